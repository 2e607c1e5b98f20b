/**
 * Mapped GGUF weights (`GGUFFile.load(cpu)`, mmap by default): the same bytes as streamed
 * ones, graphs on them compute the same, writes into them are typed errors (never a fault),
 * misaligned tensors are copied, a file removed or changed since it was opened is a clean
 * error, and every mapping is unmapped by dispose.
 */

import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import assert from "node:assert/strict";
import {
  allocTensors,
  ArgumentError,
  type Backend,
  BusyError,
  Context,
  CpuBackend,
  CpuMappedBuffer,
  cpy,
  FileError,
  getRows,
  ggmlTypeByName,
  GGUFError,
  GGUFFile,
  type GGUFTensorInfo,
  Graph,
  layoutTensors,
  liveAllocations,
  type LoadedWeights,
  mappedAlignment,
  MemorySource,
  mulMat,
  quantize,
  readGGUF,
  ReadOnlyError,
  StalePlanError,
  type Tensor,
  writeGGUF,
} from "../mod.ts";
import { lastError, loadCore } from "../src/core/core.ts";
import { encodeNodeTable } from "../src/backend/cpu/node_table.ts";
import type { CpuBuffer } from "../src/backend/cpu/buffer.ts";
import { Status } from "../src/errors.ts";
import { sampleMetadata } from "./gguf_sample.ts";
import { seededRandom } from "./random_dag.ts";
import { assertNothingLive } from "./leaks.ts";

const baseline = liveAllocations();

const type = (name: string) => ggmlTypeByName(name)!;
const K = 64;

function randomF32(n: number, seed: number): Float32Array {
  const random = seededRandom(seed);
  return Float32Array.from({ length: n }, () => random() * 2 - 1);
}

function bytesOf(values: Float32Array | Int32Array): Uint8Array {
  return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
}

/**
 * A small model-like file: an f32 embedding table, a q4_1 and a q8_0 projection, an f32
 * projection, an f16 gain and i32 ids; written to a temp file.
 */
async function modelFile(): Promise<string> {
  const data = [
    bytesOf(randomF32(K * 10, 1)),
    quantize(randomF32(K * 16, 2), "q4_1"),
    quantize(randomF32(K * 8, 3), "q8_0"),
    bytesOf(randomF32(K * 12, 4)),
    new Uint8Array(new Float16Array([1, 0.5, -2, 3]).buffer),
    bytesOf(new Int32Array([3, 1, 4, 1, 5, 9])),
  ];
  const infos = layoutTensors([
    { name: "token_embd.weight", dims: [K, 10], type: type("f32"), nbytes: data[0]!.length },
    { name: "blk.0.attn_q.weight", dims: [K, 16], type: type("q4_1"), nbytes: data[1]!.length },
    { name: "blk.0.attn_k.weight", dims: [K, 8], type: type("q8_0"), nbytes: data[2]!.length },
    { name: "blk.0.ffn_up.weight", dims: [K, 12], type: type("f32"), nbytes: data[3]!.length },
    { name: "blk.0.attn_norm.weight", dims: [4], type: type("f16"), nbytes: 8 },
    { name: "ids", dims: [6], type: type("i32"), nbytes: 24 },
  ]);
  const path = await Deno.makeTempFile({ suffix: ".gguf" });
  await Deno.writeFile(
    path,
    writeGGUF({ metadata: sampleMetadata(false), tensors: infos, data: (i) => data[i]! }),
  );
  return path;
}

function sourceHandle(tensor: Tensor): number {
  return (tensor.placement!.buffer as CpuBuffer).handle;
}

function tensorBytes(cpu: CpuBackend, tensor: Tensor): Uint8Array {
  const data = cpu.getTensor(tensor);
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** Every tensor of `mapped` has the bytes of the same tensor in `streamed`. */
function assertSameBytes(cpu: CpuBackend, mapped: LoadedWeights, streamed: LoadedWeights): void {
  assert.deepEqual([...mapped.tensors.keys()], [...streamed.tensors.keys()]);
  for (const [name, tensor] of mapped.tensors) {
    assert.deepEqual(tensorBytes(cpu, tensor), tensorBytes(cpu, streamed.tensors.get(name)!), name);
  }
}

/**
 * getRows of `table` at `ids`, then mulMat of each projection with the rows: computed on the
 * weights as loaded (mapped or copied), with the plan's weight prepacking on or off.
 */
function project(
  cpu: CpuBackend,
  weights: LoadedWeights,
  table: string,
  projections: readonly string[],
  ids: Int32Array,
  prepackWeights: boolean,
): Float32Array[] {
  const ctx = new Context();
  const idTensor = ctx.newTensor("i32", [ids.length], "ids");
  const rows = getRows(weights.tensors.get(table)!, idTensor);
  const outputs = projections.map((name) => mulMat(weights.tensors.get(name)!, rows));
  const graph = Graph.build(...outputs);
  using _memory = allocTensors(cpu, [idTensor, ...graph.nodes]);
  cpu.setTensor(idTensor, ids);
  using plan = cpu.graphPlanCreate(graph, { prepackWeights });
  cpu.graphPlanCompute(plan);
  return outputs.map((t) => cpu.getTensor(t) as Float32Array);
}

Deno.test("mapped weights: same bytes as streamed ones, one read-only mapping, progress", async () => {
  const path = await modelFile();
  try {
    using file = GGUFFile.open(path);
    const total = file.header.tensors.reduce((sum, t) => sum + t.nbytes, 0);
    using cpu = new CpuBackend({ threads: 2 });
    const progress: number[] = [];
    using mapped = file.load(cpu, { onProgress: (done) => progress.push(done) });
    assert.equal(progress.at(-1), total);
    assert.ok(mapped.mapping instanceof CpuMappedBuffer, "the CPU maps by default");
    assert.equal(mapped.buffers.buffers.length, 1, "every tensor in the one mapping");
    assert.equal(mapped.mapping!.readOnly, true);
    assert.equal(mapped.mapping!.size, file.header.fileSize);
    for (const info of file.header.tensors) {
      const placement = mapped.tensors.get(info.name)!.placement!;
      assert.equal(placement.buffer, mapped.mapping);
      assert.equal(placement.offset, file.header.dataOffset + info.offset, info.name);
    }
    const live = liveAllocations();
    assert.equal(live.mappings, baseline.mappings + 1);
    assert.equal(live.mappedBytes, baseline.mappedBytes + file.header.fileSize);
    assert.equal(live.bufferBytes, baseline.bufferBytes, "a mapping allocates no buffer memory");
    // Opening read a prefix; mapping read nothing more through the JS side.
    assert.ok(file.bytesRead <= 1 << 20, `read ${file.bytesRead} bytes`);

    using streamed = file.load(cpu, { mmap: false });
    assert.equal(streamed.mapping, null);
    assertSameBytes(cpu, mapped, streamed);
    using prefetched = file.load(cpu, { prefetch: true, names: ["blk.0.attn_q.weight"] });
    assert.deepEqual(
      tensorBytes(cpu, prefetched.tensors.get("blk.0.attn_q.weight")!),
      file.readTensorData(file.tensor("blk.0.attn_q.weight")),
    );
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("a graph on mapped weights (getRows + q4_1/q8_0/f32 mulMat) equals it on copied weights", async () => {
  const path = await modelFile();
  try {
    using file = GGUFFile.open(path);
    using cpu = new CpuBackend({ threads: 2 });
    using mapped = file.load(cpu);
    using copied = file.load(cpu, { mmap: false });
    const ids = new Int32Array([0, 9, 3, 3, 7]);
    const projections = ["blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.ffn_up.weight"];
    for (const prepack of [false, true]) {
      const want = project(cpu, copied, "token_embd.weight", projections, ids, prepack);
      const got = project(cpu, mapped, "token_embd.weight", projections, ids, prepack);
      assert.deepEqual(got, want, `prepackWeights ${prepack}`);
      assert.ok(got.every((values) => values.some((v) => v !== 0)));
    }
    // The weights are still the file's bytes after computing on them.
    assertSameBytes(cpu, mapped, copied);
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("writing into a mapped tensor is a ReadOnlyError, in every way there is", async () => {
  const path = await modelFile();
  try {
    using file = GGUFFile.open(path);
    using cpu = new CpuBackend({ threads: 1 });
    using mapped = file.load(cpu);
    const weight = mapped.tensors.get("blk.0.ffn_up.weight")!;
    const before = tensorBytes(cpu, weight);
    const readOnly = (e: unknown) =>
      e instanceof ReadOnlyError &&
      /blk\.0\.ffn_up\.weight.*read-only.*mmap: false/.test(e.message);
    assert.throws(() => cpu.setTensor(weight, new Float32Array(K * 12)), readOnly);
    await assert.rejects(cpu.setTensorAsync(weight, new Float32Array(K * 12)), readOnly);

    const ctx = new Context();
    const source = ctx.newTensor("f32", [K, 12], "source");
    using _memory = allocTensors(cpu, [source]);
    cpu.setTensor(source, new Float32Array(K * 12).fill(7));
    await assert.rejects(async () => await cpu.cpyTensorFrom(source, weight), readOnly);
    await assert.rejects(async () => await cpu.cpyTensorTo(source, weight), readOnly);
    // A graph that would write into the weight is refused when planned.
    const write = cpy(source, weight);
    assert.throws(
      () => cpu.graphPlanCreate(Graph.build(write)),
      (e: unknown) => e instanceof ReadOnlyError && /graphPlanCreate/.test(e.message),
    );
    // The core refuses on its own too (a write through raw FFI would otherwise be SIGSEGV).
    const lib = loadCore();
    const handle = (mapped.mapping as CpuMappedBuffer).handle;
    const offset = BigInt(weight.placement!.offset);
    assert.equal(lib.graft_buffer_write(handle, offset, new Uint8Array(4), 4n), Status.readOnly);
    assert.equal(lib.graft_buffer_fill(handle, offset, 4n, 0), Status.readOnly);
    assert.equal(
      lib.graft_buffer_copy(sourceHandle(source), 0n, handle, offset, 4n),
      Status.readOnly,
    );
    // A node table written by hand, past the TypeScript check: the plan is refused, not made.
    const table = encodeNodeTable([write], (t) => cpu.addressOf(t));
    const plan = new Uint32Array(1);
    const work = new BigUint64Array(1);
    assert.equal(lib.graft_plan_create(table, 1, 1, 0, plan, work), Status.readOnly);
    assert.match(lastError(lib), /node 0: dst lies in a read-only file mapping/);
    assert.deepEqual(tensorBytes(cpu, weight), before, "the weight is unchanged");
    // Streamed weights stay writable.
    using streamed = file.load(cpu, { mmap: false, names: ["blk.0.ffn_up.weight"] });
    cpu.setTensor(streamed.tensors.get("blk.0.ffn_up.weight")!, new Float32Array(K * 12));
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("disposing mapped weights unmaps; they outlive the file handle until then", async () => {
  const path = await modelFile();
  try {
    using cpu = new CpuBackend({ threads: 1 });
    const file = GGUFFile.open(path);
    const weights = file.load(cpu);
    const want = file.readTensorData(file.tensor("blk.0.attn_q.weight"));
    file.close();
    // The mapping does not need the file handle.
    assert.deepEqual(tensorBytes(cpu, weights.tensors.get("blk.0.attn_q.weight")!), want);
    assert.equal(liveAllocations().mappings, baseline.mappings + 1);
    weights.dispose();
    assert.deepEqual(liveAllocations(), { ...baseline, pools: baseline.pools + 1 });
    assert.ok(weights.mapping!.disposed);
    assert.throws(() => cpu.getTensor(weights.tensors.get("blk.0.attn_q.weight")!), /disposed/);
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("mapped weights a compute reads: dispose waits for it (BusyError), never unmaps under it", async () => {
  const n = 768;
  const infos = layoutTensors([{ name: "w", dims: [n, n], type: type("f32"), nbytes: 4 * n * n }]);
  const path = await Deno.makeTempFile({ suffix: ".gguf" });
  try {
    await Deno.writeFile(
      path,
      writeGGUF({
        metadata: [],
        tensors: infos,
        data: () => bytesOf(new Float32Array(n * n).fill(1)),
      }),
    );
    using file = GGUFFile.open(path);
    using cpu = new CpuBackend({ threads: 1 });
    for (const queuedOnly of [false, true]) {
      const x = new Context().newTensor("f32", [n, n], "x");
      const weights = file.load(cpu);
      const y = mulMat(weights.tensors.get("w")!, x);
      const graph = Graph.build(y);
      using _memory = allocTensors(cpu, [x, y]);
      cpu.setTensor(x, new Float32Array(n * n).fill(2));
      using plan = cpu.graphPlanCreate(graph);
      const computing = cpu.graphPlanComputeAsync(plan);
      if (queuedOnly) {
        // Not started yet: nothing holds the mapping, it is unmapped, and the compute refuses.
        weights.dispose();
        await assert.rejects(computing, StalePlanError);
      } else {
        await new Promise((resolve) => setTimeout(resolve, 5));
        // The compute holds the mapping once it runs: disposing is refused until it ends. Had
        // it not started yet, the mapping goes and the compute refuses to start.
        let refused = false;
        try {
          weights.dispose();
        } catch (error) {
          assert.ok(error instanceof BusyError, String(error));
          refused = true;
        }
        await computing.catch((error) => {
          assert.ok(!refused && error instanceof StalePlanError, String(error));
        });
        if (refused) {
          assert.equal(weights.mapping!.disposed, false);
          assert.equal(cpu.getTensor(y)[0], 2 * n);
          weights.dispose();
        }
      }
      assert.equal(weights.mapping!.disposed, true);
      assert.equal(liveAllocations().mappings, baseline.mappings);
    }
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("a tensor that misses the kernels' alignment at its file offset is copied", async () => {
  // general.alignment 1: tensors may sit at any byte. Pad the metadata until the data section
  // starts at a multiple of 4, so that the f32 tensor at data offset 2 misses 4-byte alignment
  // and the f16 ones (2-byte) do not.
  const tensors: Omit<GGUFTensorInfo, "offset">[] = [
    { name: "a", dims: [1], type: type("f16"), nbytes: 2 },
    { name: "b", dims: [4], type: type("f32"), nbytes: 16 },
    { name: "c", dims: [3], type: type("f16"), nbytes: 6 },
    { name: "d", dims: [4], type: type("f32"), nbytes: 16 },
  ];
  const infos = layoutTensors(tensors, 1);
  assert.deepEqual(infos.map((t) => t.offset), [0, 2, 18, 24]);
  const random = seededRandom(5);
  const data = infos.map((t) => Uint8Array.from({ length: t.nbytes }, () => random() * 256));
  let bytes: Uint8Array = new Uint8Array();
  for (let pad = 0; pad < 4; pad++) {
    bytes = writeGGUF({
      metadata: [
        { key: "general.alignment", type: "u32", value: 1 },
        { key: "pad", type: "string", value: "x".repeat(pad) },
      ],
      tensors: infos,
      data: (i) => data[i]!,
    });
    if (readGGUF(new MemorySource(bytes)).dataOffset % 4 === 0) break;
  }
  const path = await Deno.makeTempFile({ suffix: ".gguf" });
  try {
    await Deno.writeFile(path, bytes);
    using file = GGUFFile.open(path);
    assert.equal(file.header.dataOffset % 4, 0);
    using cpu = new CpuBackend({ threads: 1 });
    let done = 0;
    using weights = file.load(cpu, { onProgress: (d) => done = d });
    assert.equal(done, 40);
    assert.equal(weights.buffers.buffers.length, 2, "the mapping and one buffer of copies");
    const where = (name: string) => weights.tensors.get(name)!.placement!.buffer;
    assert.equal(where("a"), weights.mapping);
    assert.equal(where("c"), weights.mapping);
    assert.equal(where("d"), weights.mapping);
    assert.notEqual(where("b"), weights.mapping, "b at file offset 2 mod 4 is copied");
    assert.equal(mappedAlignment("f32"), 4);
    assert.equal(mappedAlignment("q4_0"), 2);
    for (const [i, info] of infos.entries()) {
      assert.deepEqual(tensorBytes(cpu, weights.tensors.get(info.name)!), data[i], info.name);
    }
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("a truncated, removed, replaced or unmappable file errors cleanly", async () => {
  const path = await modelFile();
  const bytes = await Deno.readFile(path);
  using cpu = new CpuBackend({ threads: 1 });
  try {
    // Truncated before opening: its tensor data ends past the file.
    await Deno.writeFile(path, bytes.subarray(0, bytes.length - 100));
    assert.throws(() => GGUFFile.open(path), GGUFError);
    // Removed before opening.
    await Deno.remove(path);
    assert.throws(() => GGUFFile.open(path), Deno.errors.NotFound);

    // Removed after opening, before loading: the mapping cannot be made.
    await Deno.writeFile(path, bytes);
    {
      using file = GGUFFile.open(path);
      await Deno.remove(path);
      assert.throws(
        () => file.load(cpu),
        (e: unknown) => e instanceof FileError && /cannot be mapped.*NOENT/.test(e.message),
      );
      // Streaming still reads the open file.
      using streamed = file.load(cpu, { mmap: false });
      assert.equal(streamed.tensors.size, 6);
    }
    // Truncated after opening: the mapping is not of the file opened.
    await Deno.writeFile(path, bytes);
    {
      using file = GGUFFile.open(path);
      await Deno.truncate(path, bytes.length - 100);
      assert.throws(
        () => file.load(cpu),
        (e: unknown) => e instanceof FileError && /changed since it was opened/.test(e.message),
      );
    }
    // Replaced by another file of the same size: another inode.
    await Deno.writeFile(path, bytes);
    {
      using file = GGUFFile.open(path);
      await Deno.remove(path);
      await Deno.writeFile(path, bytes);
      assert.throws(
        () => file.load(cpu),
        (e: unknown) => e instanceof FileError && /changed since it was opened/.test(e.message),
      );
    }
    assert.equal(liveAllocations().mappings, baseline.mappings, "no mapping left behind");
    // What the core refuses to map, it names.
    const dir = await Deno.makeTempDir();
    try {
      assert.throws(() => cpu.mapFile(dir), /not a regular file/);
      await Deno.writeFile(`${dir}/empty`, new Uint8Array());
      assert.throws(() => cpu.mapFile(`${dir}/empty`), (e: unknown) => e instanceof FileError);
      assert.throws(() => cpu.mapFile(""), ArgumentError);
      assert.throws(() => cpu.mapFile(`${dir}/x\0y`), /NUL/);
      assert.throws(() => cpu.mapFile(`${dir}/${"n".repeat(5000)}`), /exceeds the OS limit/);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  } finally {
    await Deno.remove(path).catch(() => {});
  }
});

Deno.test("mmap: true on a backend that cannot map files is an ArgumentError", async () => {
  const path = await modelFile();
  try {
    using file = GGUFFile.open(path);
    const streamingOnly = { name: "stream-only" } as unknown as Backend;
    assert.throws(
      () => file.load(streamingOnly, { mmap: true }),
      (e: unknown) => e instanceof ArgumentError && /stream-only cannot map files/.test(e.message),
    );
  } finally {
    await Deno.remove(path);
  }
});

const MODEL = SMOLLM2_PATH;
const haveModel = smolLM2Cached();
if (!haveModel) {
  console.log(
    `gguf_mmap_test: ${MODEL} is missing (deno task model:fetch): the SmolLM2 checks are skipped`,
  );
}

Deno.test({
  name: "SmolLM2 Q4_1: mapped weights equal streamed ones; a graph on them computes the same",
  ignore: !haveModel,
  fn: () => {
    using file = GGUFFile.open(MODEL);
    using cpu = new CpuBackend({ threads: 2 });
    using mapped = file.load(cpu);
    assert.equal(mapped.buffers.buffers.length, 1, "SmolLM2's tensors are all mapped in place");
    assert.equal(mapped.tensors.size, 272);
    {
      using streamed = file.load(cpu, { mmap: false });
      assertSameBytes(cpu, mapped, streamed);
    }
    using copied = file.load(cpu, {
      mmap: false,
      names: ["token_embd.weight", "blk.0.attn_q.weight"],
    });
    const ids = new Int32Array([0, 1, 17, 49151]);
    const projections = ["token_embd.weight", "blk.0.attn_q.weight"];
    const want = project(cpu, copied, "token_embd.weight", projections, ids, false);
    const got = project(cpu, mapped, "token_embd.weight", projections, ids, false);
    assert.deepEqual(got, want);
  },
});

Deno.test("gguf mmap: nothing native is left alive", () => assertNothingLive(baseline));

Deno.test("load with fuse: alike tensors become views of consecutive rows of one tensor, others stay", async () => {
  const rows = [5, 3, 7];
  const data = [
    ...rows.map((r, i) => bytesOf(randomF32(K * r, 10 + i))),
    quantize(randomF32(K * 4, 20), "q8_0"),
    bytesOf(randomF32(2 * K * 2, 21)),
  ];
  const infos = layoutTensors([
    ...rows.map((r, i) => ({
      name: `w${i}`,
      dims: [K, r],
      type: type("f32"),
      nbytes: data[i]!.length,
    })),
    { name: "q", dims: [K, 4], type: type("q8_0"), nbytes: data[3]!.length },
    { name: "wide", dims: [2 * K, 2], type: type("f32"), nbytes: data[4]!.length },
  ]);
  const path = await Deno.makeTempFile({ suffix: ".gguf" });
  try {
    await Deno.writeFile(
      path,
      writeGGUF({ metadata: sampleMetadata(false), tensors: infos, data: (i) => data[i]! }),
    );
    using file = GGUFFile.open(path);
    using cpu = new CpuBackend({ threads: 1 });
    const fuse = [["w0", "w1", "w2"], ["w0", "q"], ["w1", "wide"], ["w2", "absent"]];
    {
      using streamed = file.load(cpu, { mmap: false, fuse });
      const [w0, w1, w2] = ["w0", "w1", "w2"].map((n) => streamed.tensors.get(n)!);
      const whole = w0!.viewSource!;
      assert.ok(whole !== null && whole.viewSource === null);
      assert.deepEqual([...whole.ne], [K, 15, 1, 1]);
      assert.deepEqual([w0, w1, w2].map((t) => t!.viewSource), [whole, whole, whole]);
      assert.deepEqual([w0, w1, w2].map((t) => t!.viewOffset), [0, 5 * K * 4, 8 * K * 4]);
      assert.deepEqual([w0, w1, w2].map((t) => t!.name), ["w0", "w1", "w2"]);
      for (const name of ["w0", "w1", "w2", "q", "wide"]) {
        assert.deepEqual(
          tensorBytes(cpu, streamed.tensors.get(name)!),
          file.readTensorData(file.tensor(name)),
          name,
        );
      }
      // Another dtype, another row length, a member not loaded: those groups stay apart.
      for (const name of ["q", "wide"]) assert.equal(streamed.tensors.get(name)!.viewSource, null);
      using partial = file.load(cpu, { mmap: false, fuse, names: ["w2", "q"] });
      assert.equal(partial.tensors.get("w2")!.viewSource, null);
    }
    // Mapped, the tensors stay where the file has them.
    using mapped = file.load(cpu, { fuse });
    assert.equal(mapped.tensors.get("w0")!.viewSource, null);
    assert.equal(mapped.tensors.get("w1")!.placement!.buffer, mapped.mapping);
  } finally {
    await Deno.remove(path);
  }
});
