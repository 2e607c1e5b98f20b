/**
 * Packs the npm platform packages (`npm/core-<platform>/`) with their prebuilt libraries from
 * `zig build dist` (`zig-out/dist/<platform>/`) and the repository's LICENSE, as `npm pack`
 * tarballs ready for `npm publish`.
 *
 *     ./scripts/zig build dist
 *     deno run -A tools/npm_pack.ts [--out DIR] [PLATFORM ...]   # default: every platform
 *
 * @module
 */

import { CORE_VERSION, PLATFORM_PACKAGES, type PlatformPackage } from "../src/core/lookup.ts";

const root = new URL("../", import.meta.url);

/** The platform package whose npm name ends in `core-<platform>`. */
export function platformEntry(platform: string): PlatformPackage {
  const entry = PLATFORM_PACKAGES.find((p) => p.name === `@graft/core-${platform}`);
  if (!entry) {
    const known = PLATFORM_PACKAGES.map((p) => p.name.replace("@graft/core-", "")).join(", ");
    throw new Error(`npm_pack: no platform ${JSON.stringify(platform)} (there are: ${known})`);
  }
  return entry;
}

/**
 * Stages and packs one platform package into `destination`; returns the tarball's path.
 * Throws when the library was not built or the package's version is not {@link CORE_VERSION}.
 */
export async function packPlatform(
  platform: string,
  destination: string,
  npm = "npm",
): Promise<string> {
  const entry = platformEntry(platform);
  const source = new URL(`npm/core-${platform}/`, root);
  const manifest = JSON.parse(await Deno.readTextFile(new URL("package.json", source))) as {
    version: string;
    files: string[];
  };
  if (manifest.version !== CORE_VERSION) {
    throw new Error(
      `npm_pack: ${entry.name} is version ${manifest.version}, the loader wants ${CORE_VERSION}`,
    );
  }
  const library = new URL(`zig-out/dist/${platform}/${entry.file}`, root);
  try {
    await Deno.stat(library);
  } catch {
    throw new Error(
      `npm_pack: ${library.pathname} is missing: build it with ` +
        `\`./scripts/zig build dist -Ddist-platform=${platform}\``,
    );
  }
  const stage = await Deno.makeTempDir({ prefix: `graft-npm-${platform}-` });
  try {
    for (const file of ["package.json", "index.js", "README.md"]) {
      await Deno.copyFile(new URL(file, source), `${stage}/${file}`);
    }
    await Deno.copyFile(new URL("LICENSE", root), `${stage}/LICENSE`);
    await Deno.copyFile(library, `${stage}/${entry.file}`);
    await Deno.mkdir(destination, { recursive: true });
    const output = await new Deno.Command(npm, {
      args: ["pack", "--json", "--pack-destination", destination],
      cwd: stage,
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (!output.success) {
      throw new Error(`npm pack ${entry.name} failed: ${new TextDecoder().decode(output.stderr)}`);
    }
    const [packed] = JSON.parse(new TextDecoder().decode(output.stdout)) as {
      filename: string;
      files: { path: string }[];
    }[];
    if (!packed) throw new Error(`npm pack ${entry.name} reported no tarball`);
    const files = packed.files.map((f) => f.path).sort();
    const expected = [...manifest.files, "package.json"].sort();
    if (JSON.stringify(files) !== JSON.stringify(expected)) {
      throw new Error(`npm pack ${entry.name} packed ${files} instead of ${expected}`);
    }
    return `${destination}/${packed.filename}`;
  } finally {
    await Deno.remove(stage, { recursive: true });
  }
}

if (import.meta.main) {
  const args = [...Deno.args];
  let out = new URL("zig-out/npm", root).pathname;
  const at = args.indexOf("--out");
  if (at >= 0) {
    const value = args[at + 1];
    if (!value) throw new Error("npm_pack: --out needs a folder");
    out = value;
    args.splice(at, 2);
  }
  const platforms = args.length > 0
    ? args
    : PLATFORM_PACKAGES.map((p) => p.name.replace("@graft/core-", ""));
  for (const platform of platforms) console.log(await packPlatform(platform, out));
}
