/**
 * The esbuild bundle (tools/bundle.ts): built into a temporary directory, it loads in a Deno
 * without --allow-ffi (the WebAssembly core read from beside it) and computes a graph.
 */

import assert from "node:assert/strict";

const root = new URL("..", import.meta.url);

async function run(args: string[], cwd?: string): Promise<{ code: number; out: string }> {
  const output = await new Deno.Command(Deno.execPath(), {
    args,
    cwd,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decode = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);
  return { code: output.code, out: decode(output.stdout) + decode(output.stderr) };
}

Deno.test("the bundle loads without FFI and computes on its WebAssembly core", async () => {
  const dir = await Deno.makeTempDir({ prefix: "graft_bundle_" });
  try {
    const bundle = await run([
      "run",
      "--allow-read",
      "--allow-write",
      "--allow-env",
      "--allow-run",
      new URL("tools/bundle.ts", root).pathname,
      "--out",
      dir,
    ]);
    assert.equal(bundle.code, 0, bundle.out);
    assert.match(bundle.out, /graft\.js +[\d.]+ KiB \(gzip [\d.]+ KiB\)/);
    const script = `${dir}/smoke.js`;
    await Deno.writeTextFile(
      script,
      `import { add, allocTensors, Context, defaultBackend, Graph, mulMat } from "./graft.js";
const backend = await defaultBackend({ quiet: true });
const ctx = new Context();
const a = ctx.newTensor("f32", [3, 2]);
const b = ctx.newTensor("f32", [3, 1]);
const c = add(mulMat(a, b), mulMat(a, b));
const graph = Graph.build(c);
const memory = allocTensors(backend, [a, b, ...graph.nodes]);
backend.setTensor(a, new Float32Array([1, 2, 3, 4, 5, 6]));
backend.setTensor(b, new Float32Array([1, 0, -1]));
backend.graphCompute(graph);
console.log(JSON.stringify({ simd: backend.simd, out: Array.from(backend.getTensor(c)) }));
memory.dispose();
backend.dispose();
`,
    );
    const child = await run(["run", `--allow-read=${dir}`, script]);
    assert.equal(child.code, 0, child.out);
    // [1 2 3; 4 5 6] . [1 0 -1] = [-2, -2], doubled.
    assert.deepEqual(JSON.parse(child.out), { simd: "simd128", out: [-4, -4] });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
