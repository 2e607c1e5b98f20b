// Helpers for tests that need a fresh Deno: a child process with chosen flags and environment,
// and a copy of the library loader outside the checkout.

/** What a child Deno printed and how it ended. */
export interface ChildResult {
  code: number;
  signal: Deno.Signal | null;
  stdout: string;
  stderr: string;
}

/** Runs `deno eval` (all permissions) of a TypeScript `script` with extra environment. */
export async function denoEval(
  script: string,
  env: Record<string, string> = {},
): Promise<ChildResult> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--ext=ts", script],
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decode = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);
  return {
    code: output.code,
    signal: output.signal,
    stdout: decode(output.stdout),
    stderr: decode(output.stderr),
  };
}

/** The loader's modules: what `src/core/ffi.ts` imports, directly or not. */
const LOADER_FILES = [
  "core/ffi.ts",
  "core/lookup.ts",
  "core/abi.ts",
  "core/tables.ts",
  "errors.ts",
  "dtype.ts",
  "op.ts",
];

/**
 * Copies the loader into `dir/src/` (outside the checkout, so its build-output fallback finds
 * nothing), each file passed through `edit`; returns the URL of the copied `ffi.ts`.
 */
export async function copyLoader(
  dir: string,
  edit: (file: string, text: string) => string = (_file, text) => text,
): Promise<string> {
  await Deno.mkdir(`${dir}/src/core`, { recursive: true });
  for (const file of LOADER_FILES) {
    const text = await Deno.readTextFile(new URL(`../src/${file}`, import.meta.url));
    await Deno.writeTextFile(`${dir}/src/${file}`, edit(file, text));
  }
  return `file://${dir}/src/core/ffi.ts`;
}
