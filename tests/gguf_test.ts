/**
 * GGUF read and write: every metadata type, round trips byte for byte, the gguf package's view
 * (llama.cpp's own Python reader) agrees, and bad files are GGUFErrors naming field and offset.
 */

import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import assert from "node:assert/strict";
import {
  allocTensors,
  Context,
  CpuBackend,
  getRows,
  ggmlTypeByName,
  GGUFError,
  GGUFFile,
  Graph,
  isTensorDType,
  layoutTensors,
  liveAllocations,
  MemorySource,
  readGGUF,
  writeGGUF,
} from "../mod.ts";
import { sampleFile, sampleMetadata, sampleTensors } from "./gguf_sample.ts";
import { seededRandom } from "./random_dag.ts";
import { assertNothingLive } from "./leaks.ts";
import { graftView, pythonDequantHashes, pythonView } from "./gguf_python.ts";

const baseline = liveAllocations();

Deno.test("every metadata type, arrays of strings and nested arrays read back as written", () => {
  const bytes = sampleFile(true);
  const header = readGGUF(new MemorySource(bytes));
  assert.equal(header.version, 3);
  assert.deepEqual(header.metadata, sampleMetadata(true));
  const { infos } = sampleTensors();
  assert.deepEqual(header.tensors, infos);
  assert.equal(header.alignment, 32);
  assert.equal(header.dataOffset % 32, 0);
});

Deno.test("writing what was read gives the same bytes (key and tensor order kept)", () => {
  for (const nested of [false, true]) {
    const bytes = sampleFile(nested);
    const header = readGGUF(new MemorySource(bytes));
    const again = writeGGUF({
      metadata: header.metadata,
      tensors: header.tensors,
      data: (i) => {
        const t = header.tensors[i]!;
        return bytes.subarray(
          header.dataOffset + t.offset,
          header.dataOffset + t.offset + t.nbytes,
        );
      },
      onWarning: () => {},
    });
    assert.deepEqual(again, bytes);
  }
});

Deno.test("the writer warns once when it writes a nested array (llama.cpp rejects them)", () => {
  const warnings: string[] = [];
  const { infos, data } = sampleTensors();
  writeGGUF({
    metadata: sampleMetadata(true),
    tensors: infos,
    data: (i) => data[i]!,
    onWarning: (m) => warnings.push(m),
  });
  assert.equal(warnings.length, 1);
  assert.match(warnings[0]!, /nested array.*llama\.cpp/);
});

const python = Deno.permissions.querySync({ name: "run" }).state === "granted"
  ? await pythonView(await sampleOnDisk())
  : null;
if (python === null) {
  console.log("gguf_test: python3 with gguf==0.19.0 is missing: the cross-check is skipped");
}

async function sampleOnDisk(): Promise<string> {
  const path = await Deno.makeTempFile({ suffix: ".gguf" });
  await Deno.writeFile(path, sampleFile(false));
  return path;
}

Deno.test({
  name: "the gguf package (llama.cpp's Python reader) sees the same metadata and tensors",
  ignore: python === null,
  fn: () => {
    assert.deepEqual(graftView(sampleFile(false)), python);
  },
});

Deno.test("a file cut at any byte is a GGUFError, unless only the end padding is cut", () => {
  const bytes = sampleFile(false);
  const header = readGGUF(new MemorySource(bytes));
  const dataEnd = header.dataOffset +
    Math.max(...header.tensors.map((t) => t.offset + t.nbytes));
  for (let cut = 0; cut < bytes.length; cut++) {
    const source = new MemorySource(bytes.subarray(0, cut));
    if (cut >= dataEnd) {
      readGGUF(source); // only padding is missing: still a whole file
      continue;
    }
    assert.throws(() => readGGUF(source), GGUFError, `cut at ${cut}`);
  }
});

/** A file with one u64 field overwritten, at the byte offset where `find` is. */
function patched(bytes: Uint8Array, at: number, value: bigint, size: 4 | 8 = 8): Uint8Array {
  const copy = bytes.slice();
  const view = new DataView(copy.buffer);
  if (size === 8) view.setBigUint64(at, value, true);
  else view.setUint32(at, Number(value), true);
  return copy;
}

function expectError(bytes: Uint8Array, field: RegExp, message: RegExp): void {
  assert.throws(() => readGGUF(new MemorySource(bytes)), (e: unknown) => {
    assert.ok(e instanceof GGUFError, String(e));
    assert.match(e.field, field);
    assert.match(e.message, message);
    assert.ok(Number.isInteger(e.offset) && e.offset >= 0);
    return true;
  });
}

Deno.test("bad files: each a GGUFError naming the field and the byte offset", () => {
  const bytes = sampleFile(false);
  expectError(new TextEncoder().encode("not a gguf file at all"), /magic/, /not a GGUF file/);
  expectError(patched(bytes, 4, 1n, 4), /version/, /v1 is not supported/);
  expectError(patched(bytes, 4, 7n, 4), /version/, /not 2 or 3/);
  expectError(patched(bytes, 8, 2n ** 40n), /tensor_count/, /cannot fit/);
  expectError(patched(bytes, 16, 2n ** 63n), /kv_count/, /larger than any file/);
  // The first key's length: larger than the file.
  expectError(patched(bytes, 24, 1n << 50n), /metadata\[0\]\.key\.length/, /cannot fit/);
  const header = readGGUF(new MemorySource(bytes));
  const find = (text: string): number => {
    const needle = new TextEncoder().encode(text);
    outer: for (let i = 0; i < bytes.length; i++) {
      for (let j = 0; j < needle.length; j++) if (bytes[i + j] !== needle[j]) continue outer;
      return i + needle.length;
    }
    throw new Error(`${text} not found`);
  };
  const ids = find("ids"); // then n_dims u32, dims u64 x2, type u32, offset u64
  expectError(patched(bytes, ids, 5n, 4), /ids\.n_dims/, /not in 1\.\.4/);
  expectError(patched(bytes, ids + 4, 2n ** 52n), /ids\.dims/, /overflows|end past|cannot/);
  expectError(patched(bytes, ids + 20, 99n, 4), /ids\.type/, /unknown ggml type 99/);
  expectError(patched(bytes, ids + 24, 33n), /ids\.offset/, /not a multiple of the alignment/);
  expectError(patched(bytes, ids + 24, 0n), /offset/, /overlaps/);
  expectError(patched(bytes, ids + 24, 1n << 20n), /ids\.offset/, /end past the file/);
  assert.equal(header.tensors.length, 4);
});

Deno.test("fuzz: 10,000 mutated headers and tensor tables never crash the reader", () => {
  const bytes = sampleFile(true);
  const header = readGGUF(new MemorySource(bytes));
  const random = seededRandom(2026);
  let parsed = 0, refused = 0;
  for (let i = 0; i < 10_000; i++) {
    const copy = bytes.slice();
    const edits = 1 + Math.floor(random() * 4);
    for (let e = 0; e < edits; e++) {
      // Mostly inside the header and tensor table, where every byte means something.
      const at = Math.floor(random() * header.dataOffset);
      const kind = random();
      if (kind < 0.6) copy[at] = Math.floor(random() * 256);
      else if (kind < 0.8) copy[at] = copy[at]! ^ (1 << Math.floor(random() * 8));
      else copy[at] = kind < 0.9 ? 0xff : 0;
    }
    try {
      readGGUF(new MemorySource(copy));
      parsed++;
    } catch (error) {
      if (!(error instanceof GGUFError)) throw new Error(`case ${i}: ${error}`);
      refused++;
    }
  }
  assert.equal(parsed + refused, 10_000);
  assert.ok(refused > 1000 && parsed > 100, `parsed ${parsed}, refused ${refused}`);
});

Deno.test("GGUFFile: open reads a prefix, load with mmap: false streams into CPU buffers", async () => {
  const f32 = ggmlTypeByName("f32")!;
  // A 4 MiB tensor after the metadata: opening must not read it.
  const big = 1 << 20;
  const infos = layoutTensors([
    { name: "small", dims: [8], type: f32, nbytes: 32 },
    { name: "big", dims: [big], type: f32, nbytes: 4 * big },
  ]);
  const values = [new Float32Array(8).map((_, i) => i), new Float32Array(big).map((_, i) => i % 7)];
  const path = await Deno.makeTempFile({ suffix: ".gguf" });
  try {
    await Deno.writeFile(
      path,
      writeGGUF({
        metadata: sampleMetadata(false),
        tensors: infos,
        data: (i) => new Uint8Array(values[i]!.buffer),
      }),
    );
    using file = GGUFFile.open(path);
    assert.ok(file.bytesRead <= 1 << 20, `opening read ${file.bytesRead} bytes`);
    assert.deepEqual(file.header.tensors.map((t) => t.name), ["small", "big"]);
    using cpu = new CpuBackend({ threads: 1, maxBufferSize: 4 << 20 });
    const progress: number[] = [];
    using weights = file.load(cpu, { mmap: false, onProgress: (done) => progress.push(done) });
    assert.equal(weights.buffers.buffers.length, 2, "two buffers: both need 4 MiB + 64 > 4 MiB");
    assert.equal(progress.at(-1), 32 + 4 * big);
    assert.deepEqual(cpu.getTensor(weights.tensors.get("small")!), values[0]);
    assert.deepEqual(cpu.getTensor(weights.tensors.get("big")!), values[1]);
    assert.deepEqual(file.rewrite(), await Deno.readFile(path));
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("GGUFFile.load names a tensor type Graft has no dtype for", async () => {
  // q2_K: a format of the file's type table that Graft's dtype table does not have.
  const q2k = ggmlTypeByName("q2_K")!;
  const f32 = ggmlTypeByName("f32")!;
  const infos = layoutTensors([
    { name: "fine", dims: [4], type: f32, nbytes: 16 },
    { name: "exotic", dims: [256], type: q2k, nbytes: 84 },
  ]);
  const path = await Deno.makeTempFile({ suffix: ".gguf" });
  try {
    await Deno.writeFile(
      path,
      writeGGUF({
        metadata: [],
        tensors: infos,
        data: (i) => new Uint8Array(infos[i]!.nbytes),
      }),
    );
    using file = GGUFFile.open(path);
    using cpu = new CpuBackend({ threads: 1 });
    using weights = file.load(cpu, { names: ["fine"] });
    assert.equal(weights.tensors.size, 1);
    assert.throws(
      () => file.load(cpu, { names: ["exotic"] }),
      (e: unknown) =>
        e instanceof GGUFError && /no dtype for ggml type q2_K \(id 10\)/.test(e.message),
    );
    assert.throws(() => file.dequantizeTensor(file.tensor("exotic")), GGUFError);
    assert.ok(!isTensorDType("q2_K"));
  } finally {
    await Deno.remove(path);
  }
});

const MODEL = SMOLLM2_PATH;
const haveModel = smolLM2Cached();
if (!haveModel) {
  console.log(`gguf_test: ${MODEL} is missing (deno task model:fetch): its checks are skipped`);
}

Deno.test({
  name:
    "SmolLM2 Q4_1: the gguf package sees the same metadata and tensors; rewrite is byte-identical",
  ignore: !haveModel,
  fn: async () => {
    using file = GGUFFile.open(MODEL);
    const h = file.header;
    assert.equal(h.tensors.length, 272);
    const types = new Map<string, number>();
    for (const t of h.tensors) types.set(t.type.name, (types.get(t.type.name) ?? 0) + 1);
    assert.deepEqual(Object.fromEntries(types), { q4_1: 210, f32: 61, q8_0: 1 });
    assert.ok(file.bytesRead < 4 << 20, `opening read ${file.bytesRead} bytes of ${h.fileSize}`);
    const original = await Deno.readFile(MODEL);
    if (python !== null) {
      assert.deepEqual(graftView(original), await pythonView(MODEL));
    }
    const rewritten = file.rewrite();
    assert.equal(rewritten.length, original.length);
    assert.ok(rewritten.every((b, i) => b === original[i]), "rewrite differs");
  },
});

async function sha256(values: Float32Array): Promise<string> {
  const bytes = new Uint8Array(values.byteLength);
  bytes.set(new Uint8Array(values.buffer, values.byteOffset, values.byteLength));
  const digest = await crypto.subtle.digest("SHA-256", bytes);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

Deno.test({
  name: "SmolLM2 Q4_1: every tensor dequantizes bit-identical to gguf.quants.dequantize",
  ignore: !haveModel || python === null,
  fn: async () => {
    const expected = (await pythonDequantHashes([MODEL]))![0]!;
    using file = GGUFFile.open(MODEL);
    assert.equal(Object.keys(expected).length, file.header.tensors.length);
    for (const info of file.header.tensors) {
      const got = await sha256(file.dequantizeTensor(info));
      assert.equal(got, expected[info.name], `${info.name} (${info.type.name})`);
    }
  },
});

Deno.test("k-quant tensors (q4_K, q5_K, q6_K, q8_K) dequantize as ggml does", async () => {
  const fixtures = new URL("./fixtures/quant/", import.meta.url);
  const types = ["q4_K", "q5_K", "q6_K", "q8_K"];
  const blocks = types.map((t) => Deno.readFileSync(new URL(`${t}.random.bin`, fixtures)));
  const infos = layoutTensors(types.map((t, i) => ({
    name: `blk.${i}.ffn_down.weight`,
    dims: [256, 4],
    type: ggmlTypeByName(t)!,
    nbytes: blocks[i]!.length,
  })));
  const path = await Deno.makeTempFile({ suffix: ".gguf" });
  try {
    await Deno.writeFile(
      path,
      writeGGUF({ metadata: sampleMetadata(false), tensors: infos, data: (i) => blocks[i]! }),
    );
    using file = GGUFFile.open(path);
    for (const [i, info] of file.header.tensors.entries()) {
      const want = Deno.readFileSync(new URL(`${types[i]}.random.dequant.f32`, fixtures));
      const got = file.dequantizeTensor(info);
      assert.deepEqual(new Uint8Array(got.buffer), want, info.type.name);
    }
  } finally {
    await Deno.remove(path);
  }
});

Deno.test({
  name:
    "SmolLM2 Q4_1: all weights load (mapped) on the CPU; getRows of the q8_0 embedding dequantizes",
  ignore: !haveModel,
  fn: () => {
    using file = GGUFFile.open(MODEL);
    using cpu = new CpuBackend({ threads: 2 });
    let progress = 0;
    using weights = file.load(cpu, { onProgress: (done) => progress = done });
    assert.equal(weights.tensors.size, 272);
    assert.equal(progress, file.header.tensors.reduce((sum, t) => sum + t.nbytes, 0));
    for (const name of ["blk.0.attn_q.weight", "output_norm.weight", "blk.29.ffn_down.weight"]) {
      const bytes = new Uint8Array(cpu.getTensor(weights.tensors.get(name)!).buffer);
      assert.deepEqual(bytes, file.readTensorData(file.tensor(name)), name);
    }
    // Token ids 0, 1 and 49151 looked up in the q8_0 table equal ggml's dequantized rows.
    const embd = weights.tensors.get("token_embd.weight")!;
    const ctx = new Context();
    const ids = ctx.newTensor("i32", [3], "ids");
    const rows = getRows(embd, ids);
    using _memory = allocTensors(cpu, [ids, rows]);
    cpu.setTensor(ids, new Int32Array([0, 1, 49151]));
    cpu.graphCompute(Graph.build(rows));
    const all = file.dequantizeTensor(file.tensor("token_embd.weight"));
    const got = cpu.getTensor(rows) as Float32Array;
    for (const [i, id] of [0, 1, 49151].entries()) {
      assert.deepEqual(
        got.subarray(i * 576, (i + 1) * 576),
        all.subarray(id * 576, (id + 1) * 576),
      );
    }
  },
});

Deno.test("gguf: nothing native is left alive", () => assertNothingLive(baseline));
