/**
 * `deno task bundle`: bundles `mod.ts` with esbuild into `dist/graft.js` (ESM, minified, with a
 * source map) for browsers and other ESM hosts, and copies the WebAssembly core beside it as
 * `dist/graft.wasm`, where the loader looks (`new URL("./graft.wasm", import.meta.url)`). The
 * web page's script (`web/main.ts`) becomes `dist/web.js` the same way.
 * Prints each file's size and the bundle's gzip size. Unused exports are shaken out by the
 * bundler of an app that imports the bundle (it is plain ESM without side effects at load).
 *
 *   deno task bundle [--out DIR]   (default: dist/ of the checkout)
 * @module
 */

import * as esbuild from "npm:esbuild@0.28.2";

const root = new URL("../", import.meta.url);
const outIndex = Deno.args.indexOf("--out");
// --out is relative to the working directory (default: the checkout's dist/).
const outDir = outIndex >= 0
  ? new URL(`${Deno.args[outIndex + 1]}/`, `file://${Deno.cwd()}/`)
  : new URL("dist/", root);

async function gzipSize(bytes: Uint8Array): Promise<number> {
  const stream = new Blob([bytes as Uint8Array<ArrayBuffer>]).stream().pipeThrough(
    new CompressionStream("gzip"),
  );
  return (await new Response(stream).arrayBuffer()).byteLength;
}

function kib(bytes: number): string {
  return `${(bytes / 1024).toFixed(1)} KiB`;
}

async function main(): Promise<void> {
  await Deno.mkdir(outDir, { recursive: true });
  const bundle = new URL("graft.js", outDir);
  const result = await esbuild.build({
    entryPoints: [
      { in: new URL("mod.ts", root).pathname, out: "graft" },
      // The web page's script (web/index.html loads it): the library and the page in one file.
      { in: new URL("web/main.ts", root).pathname, out: "web" },
    ],
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    minify: true,
    sourcemap: true,
    treeShaking: true,
    outdir: outDir.pathname,
    metafile: true,
    logLevel: "warning",
  });
  await esbuild.stop();
  if (result.errors.length > 0) throw new Error(`esbuild failed: ${result.errors.length} errors`);
  const wasm = new URL("zig-out/wasm/graft.wasm", root);
  await Deno.copyFile(wasm, new URL("graft.wasm", outDir));
  // The relaxed-SIMD build, which the loader prefers where the engine validates it, and the
  // threaded builds (shared memory), which it loads for a backend of several threads.
  const relaxed = new URL("zig-out/wasm/graft-relaxed.wasm", root);
  for (const name of ["graft-relaxed", "graft-threads", "graft-relaxed-threads"]) {
    await Deno.copyFile(
      new URL(`zig-out/wasm/${name}.wasm`, root),
      new URL(`${name}.wasm`, outDir),
    );
  }
  const js = await Deno.readFile(bundle);
  const module = await Deno.readFile(wasm);
  const map = await Deno.stat(new URL("graft.js.map", outDir));
  const output = Object.entries(result.metafile.outputs).find(([path]) =>
    path.endsWith("graft.js")
  );
  const inputs = Object.keys(output?.[1].inputs ?? {}).length;
  const at = outDir.pathname;
  console.log(
    `${at}graft.js      ${kib(js.length)} (gzip ${kib(await gzipSize(js))}), ${inputs} modules`,
  );
  console.log(`${at}graft.js.map  ${kib(map.size)}`);
  console.log(`${at}graft.wasm    ${kib(module.length)} (gzip ${kib(await gzipSize(module))})`);
  const relaxedModule = await Deno.readFile(relaxed);
  console.log(`${at}graft-relaxed.wasm ${kib(relaxedModule.length)} (relaxed SIMD)`);
  const page = await Deno.readFile(new URL("web.js", outDir));
  console.log(`${at}web.js        ${kib(page.length)} (the web page: only what it uses)`);
}

await main();
