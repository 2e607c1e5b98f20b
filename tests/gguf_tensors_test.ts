/**
 * writeTensorsGGUF: Graft tensors written as a GGUF v3 file (bytes read from their backend),
 * opened with GGUFFile, loaded back into the CPU backend with the same bytes, and read by the
 * gguf package (llama.cpp's Python reader) with the same types and shapes.
 */

import assert from "node:assert/strict";
import {
  allocTensors,
  ArgumentError,
  Context,
  CpuBackend,
  GGUFFile,
  liveAllocations,
  PlacementError,
  quantize,
  type Tensor,
  transpose,
  view,
  writeTensorsGGUF,
} from "../mod.ts";
import { graftView, pythonView } from "./gguf_python.ts";
import { seededRandom } from "./random_dag.ts";
import { assertNothingLive } from "./leaks.ts";

const baseline = liveAllocations();

function bytesOf(cpu: CpuBackend, t: Tensor): Uint8Array {
  const data = cpu.getTensor(t);
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength).slice();
}

Deno.test("write -> GGUFFile.open -> load into the CPU: same names, types, dims and bytes", async () => {
  using cpu = new CpuBackend({ threads: 2 });
  const random = seededRandom(3);
  const values = (n: number) => Float32Array.from({ length: n }, () => random() - 0.5);
  const ctx = new Context();
  const tensors = [
    ctx.newTensor("f32", [64, 3], "blk.0.attn_q.weight"),
    ctx.newTensor("f16", [64], "blk.0.attn_norm.weight"),
    ctx.newTensor("i32", [5, 2], "ids"),
    ctx.newTensor("q4_0", [64, 2], "blk.0.ffn_up.weight"),
    ctx.newTensor("q8_0", [32, 3], "blk.0.ffn_down.weight"),
    ctx.newTensor("bf16", [16, 2], "bf"),
    ctx.newTensor("q4_K", [256, 2], "k"),
    ctx.newTensor("f32", [4, 3, 2], "three_d"),
    ctx.newTensor("f32", [8, 1, 1, 1], "trailing_ones"), // written as 1-D, as ggml does
  ];
  const big = ctx.newTensor("f32", [16, 4], "big");
  // A contiguous view: rows 1 and 2 of `big`.
  const rows = view(big, [16, 2], { nb: big.nb, offset: 16 * 4 });
  rows.name = "rows";
  using _memory = allocTensors(cpu, [...tensors, big]);
  for (const t of tensors) {
    if (t.dtype === "f32") cpu.setTensor(t, values(t.nelements));
    else if (t.dtype === "f16") cpu.setTensor(t, Float16Array.from(values(t.nelements)));
    else if (t.dtype === "i32") cpu.setTensor(t, Int32Array.from({ length: 10 }, (_, i) => i * 7));
    else if (t.dtype === "bf16") cpu.setTensor(t, quantize(values(t.nelements), "bf16"));
    else cpu.setTensor(t, quantize(values(t.nelements), t.dtype as "q4_0"));
  }
  cpu.setTensor(big, values(64));
  const written = [...tensors, rows];
  const dir = await Deno.makeTempDir();
  try {
    const path = `${dir}/tensors.gguf`;
    const metadata = [
      { key: "general.architecture", type: "string" as const, value: "graft" },
      { key: "general.alignment", type: "u32" as const, value: 64 },
    ];
    const n = await writeTensorsGGUF(path, { metadata, tensors: written });
    assert.equal(n, (await Deno.stat(path)).size);
    assert.equal(n % 64, 0);
    // A sink gets the same bytes.
    const chunks: Uint8Array[] = [];
    await writeTensorsGGUF({ write: (b) => void chunks.push(b.slice()) }, {
      metadata,
      tensors: written,
    });
    const streamed = new Uint8Array(chunks.reduce((s, c) => s + c.length, 0));
    chunks.reduce((at, c) => (streamed.set(c, at), at + c.length), 0);
    assert.deepEqual(streamed, await Deno.readFile(path));

    using file = GGUFFile.open(path);
    assert.equal(file.header.alignment, 64);
    assert.deepEqual(file.header.metadata, metadata);
    assert.deepEqual(
      file.header.tensors.map((t) => [t.name, t.type.name, t.dims]),
      written.map((t) => [
        t.name,
        t.dtype,
        t.name === "trailing_ones" ? [8] : t.name === "blk.0.attn_norm.weight" ? [64] : (
          t.name === "three_d" ? [4, 3, 2] : [t.ne[0], t.ne[1]]
        ),
      ]),
    );
    using weights = file.load(cpu);
    for (const t of written) {
      assert.deepEqual(bytesOf(cpu, weights.tensors.get(t.name)!), bytesOf(cpu, t), t.name);
    }
    if (Deno.permissions.querySync({ name: "run" }).state === "granted") {
      const python = await pythonView(path);
      if (python === null) console.log("gguf_tensors_test: python3/gguf missing: skipped");
      else assert.deepEqual(graftView(await Deno.readFile(path)), python);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("writeTensorsGGUF: unnamed, duplicate, long-named, strided and unplaced tensors", async () => {
  using cpu = new CpuBackend({ threads: 1 });
  const ctx = new Context();
  const a = ctx.newTensor("f32", [4, 2], "a");
  const unnamed = ctx.newTensor("f32", [4]);
  const same = ctx.newTensor("f32", [4], "a");
  const long = ctx.newTensor("f32", [4], "x".repeat(64));
  const unplaced = ctx.newTensor("f32", [4], "unplaced");
  using _memory = allocTensors(cpu, [a, unnamed, same, long]);
  const strided = transpose(a);
  strided.name = "strided";
  const sink = { write: () => assert.fail("nothing may be written") };
  const cases: [Tensor[], ErrorConstructor | typeof ArgumentError, RegExp][] = [
    [[unnamed], ArgumentError, /has no name/],
    [[a, same], ArgumentError, /two tensors are named "a"/],
    [[long], ArgumentError, /64 bytes; llama\.cpp reads names of fewer than 64/],
    [[strided], ArgumentError, /strided.*is not contiguous.*cont\(\)/],
    [[unplaced], PlacementError, /unplaced.*has no memory/],
  ];
  for (const [tensors, type, message] of cases) {
    await assert.rejects(writeTensorsGGUF(sink, { tensors }), (e: unknown) => {
      assert.ok(e instanceof type, String(e));
      assert.match((e as Error).message, message);
      return true;
    });
  }
});

Deno.test("gguf tensors: nothing native is left alive", () => assertNothingLive(baseline));
