// The native core of Graft for linux-arm64. Graft's loader imports this package and loads the file
// named here from Deno's npm cache (`import.meta.resolve`); nothing else uses it.
export const library = "libgraft.so";
