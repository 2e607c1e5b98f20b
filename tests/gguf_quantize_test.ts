/**
 * `quantizeGGUF` / `deno task gguf quantize`: per-tensor types as llama-quantize picks them,
 * data equal to `quantize()` of the source, files the gguf package (llama.cpp's Python reader)
 * reads with the same types and values, streaming a tensor at a time, and clear errors.
 */

import { SMOLLM2_PATH, smolLM2Cached } from "../tools/model_cache.ts";
import assert from "node:assert/strict";
import {
  ArgumentError,
  dequantize,
  ggmlTypeByName,
  GGUFError,
  GGUFFile,
  type GGUFMetadataEntry,
  type GGUFTensorInfo,
  isQuantDType,
  layoutTensors,
  liveAllocations,
  LLAMA_FTYPES,
  MemorySource,
  planQuantization,
  quantize,
  QUANTIZE_TYPES,
  quantizeGGUF,
  type QuantizeType,
  readGGUF,
  writeGGUF,
  writeGGUFStream,
} from "../mod.ts";
import { graftView, pythonDequantHashes, pythonView, pythonViews } from "./gguf_python.ts";
import { sampleFile } from "./gguf_sample.ts";
import { seededRandom } from "./random_dag.ts";
import { assertNothingLive } from "./leaks.ts";

const baseline = liveAllocations();

/** The source tensors: a tiny llama-like model, f32 with one f16 weight, out of llama order. */
const SOURCE: readonly [string, number[], "f32" | "f16"][] = [
  ["token_embd.weight", [576, 8], "f32"], // tied (no output.weight), 576 wide
  ["blk.1.attn_v.weight", [576, 2], "f32"],
  ["blk.1.ffn_down.weight", [256, 3], "f32"], // 256 wide
  ["blk.1.ffn_gate.weight", [256, 2], "f16"], // an f16 source
  ["output_norm.weight", [576], "f32"], // 1-D
  ["blk.0.attn_norm.weight", [576], "f32"],
  ["blk.0.attn_q.weight", [576, 4], "f32"],
  ["blk.0.attn_q.bias", [576], "f32"], // 1-D, not a weight
  ["blk.0.attn_v.weight", [576, 2], "f32"],
  ["blk.0.ffn_down.weight", [256, 3], "f32"],
  ["blk.0.ffn_up.weight", [512, 2], "f32"],
  ["blk.0.odd.weight", [48, 2], "f32"], // no 32-element block divides 48
];

/** llama.cpp's order: tensors outside blk.N first, then by layer, each by name. */
const LLAMA_ORDER = [
  "output_norm.weight",
  "token_embd.weight",
  "blk.0.attn_norm.weight",
  "blk.0.attn_q.bias",
  "blk.0.attn_q.weight",
  "blk.0.attn_v.weight",
  "blk.0.ffn_down.weight",
  "blk.0.ffn_up.weight",
  "blk.0.odd.weight",
  "blk.1.attn_v.weight",
  "blk.1.ffn_down.weight",
  "blk.1.ffn_gate.weight",
];

const METADATA: GGUFMetadataEntry[] = [
  { key: "general.architecture", type: "string", value: "llama" },
  { key: "general.name", type: "string", value: "graft quantize sample" },
  { key: "general.file_type", type: "u32", value: 0 },
  { key: "llama.block_count", type: "u32", value: 8 },
  { key: "llama.attention.head_count", type: "u32", value: 9 },
  { key: "llama.attention.head_count_kv", type: "u32", value: 3 },
  { key: "tokenizer.ggml.tokens", type: "array", value: { itemType: "string", items: ["a"] } },
];

/** Each source tensor's values (f16 ones as the f32 values of their f16s). */
const VALUES = new Map<string, Float32Array>();
{
  const random = seededRandom(41);
  for (const [name, dims, type] of SOURCE) {
    const n = dims.reduce((a, b) => a * b, 1);
    const values = Float32Array.from({ length: n }, () => (random() - 0.5) * 4);
    VALUES.set(name, type === "f16" ? Float32Array.from(Float16Array.from(values)) : values);
  }
}

function sourceBytes(name: string, type: "f32" | "f16"): Uint8Array {
  const values = VALUES.get(name)!;
  const typed = type === "f16" ? Float16Array.from(values) : values;
  return new Uint8Array(typed.buffer);
}

function sourceFile(extra: readonly [string, number[], "f32" | "f16"][] = []): Uint8Array {
  const all = [...SOURCE, ...extra];
  for (const [name, dims] of extra) {
    VALUES.set(name, Float32Array.from({ length: dims[0]! * (dims[1] ?? 1) }, (_, i) => i / 7));
  }
  const infos = layoutTensors(all.map(([name, dims, type]) => ({
    name,
    dims,
    type: ggmlTypeByName(type)!,
    nbytes: dims.reduce((a, b) => a * b, 1) * (type === "f16" ? 2 : 4),
  })));
  return writeGGUF({
    metadata: METADATA,
    tensors: infos,
    data: (i) => sourceBytes(all[i]![0], all[i]![2]),
  });
}

const BLOCK: Record<string, number> = {
  q8_0: 32,
  q4_0: 32,
  q4_1: 32,
  q5_0: 32,
  q5_1: 32,
  q4_K: 256,
  q5_K: 256,
  q6_K: 256,
};

/**
 * The type llama-quantize gives each sample tensor, stated rule by rule (8 layers; two attn_v
 * tensors, numbered 0 and 1 of 2; ffn_down numbered 0 and 1 of 8 layers).
 */
function expectedType(type: QuantizeType, name: string, dims: number[]): string {
  if (dims.length === 1) return "f32"; // 1-D: kept as it is
  const base = type.replace(/_[SM]$/, "");
  if (!(base in BLOCK)) return base; // f32, f16, bf16: every weight
  let t = base;
  // Tied embeddings: token_embd is quantized as output.weight is.
  if (name === "token_embd.weight") {
    t = base === "q8_0" || dims[0]! % BLOCK[base]! ? "q8_0" : "q6_K";
  }
  if (type === "q4_K_M" || type === "q5_K_M") {
    // use_more_bits(1, 2) for attn_v, use_more_bits(0, 8) for ffn_down.
    if (name === "blk.1.attn_v.weight" || name === "blk.0.ffn_down.weight") t = "q6_K";
  }
  if (type === "q4_K_S") {
    if (name.endsWith("attn_v.weight") || name === "blk.0.ffn_down.weight") t = "q5_K"; // first 4, first n/8
  }
  // Row lengths that are not whole blocks fall back (then to f16).
  if (dims[0]! % BLOCK[t]! !== 0) {
    t = ({ q4_K: "q5_0", q5_K: "q5_1", q6_K: "q8_0" } as Record<string, string>)[t] ?? "f16";
    if (t !== "f16" && dims[0]! % BLOCK[t]! !== 0) t = "f16";
  }
  return t;
}

/** What the output bytes of a tensor must be: the source's, or `quantize()` of its values. */
function expectedBytes(name: string, from: string, to: string): Uint8Array {
  const source = SOURCE.find(([n]) => n === name)!;
  if (from === to) return sourceBytes(name, source[2]);
  const values = VALUES.get(name)!;
  if (to === "f32") return new Uint8Array(values.slice().buffer);
  if (to === "f16") return new Uint8Array(Float16Array.from(values).buffer);
  assert.ok(isQuantDType(to), to);
  return quantize(values, to);
}

async function sha256(values: Float32Array): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new Uint8Array(values.slice().buffer));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

const canRun = Deno.permissions.querySync({ name: "run" }).state === "granted";

Deno.test("quantize a small f32 model to every type: types, order, metadata, bytes, gguf package", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const input = `${dir}/in.gguf`;
    await Deno.writeFile(input, sourceFile());
    const outputs: string[] = [];
    for (const type of QUANTIZE_TYPES) {
      const output = `${dir}/out-${type}.gguf`;
      outputs.push(output);
      const progress: number[] = [];
      const summary = await quantizeGGUF(input, output, {
        type,
        onProgress: (done) => progress.push(done),
      });
      assert.deepEqual(progress, SOURCE.map((_, i) => i + 1));
      using file = GGUFFile.open(output);
      const h = file.header;
      assert.deepEqual(h.tensors.map((t) => t.name), LLAMA_ORDER, type);
      const counts: Record<string, number> = {};
      for (const t of h.tensors) {
        const [, dims, from] = SOURCE.find(([n]) => n === t.name)!;
        const want = expectedType(type, t.name, dims);
        assert.equal(t.type.name, want, `${type}: ${t.name}`);
        assert.deepEqual(t.dims, dims);
        assert.deepEqual(file.readTensorData(t), expectedBytes(t.name, from, want), t.name);
        counts[want] = (counts[want] ?? 0) + 1;
      }
      assert.deepEqual(summary.counts, counts);
      assert.equal(summary.requantized, 0);
      assert.equal(summary.fileBytesOut, (await Deno.stat(output)).size);
      assert.equal(summary.fileBytesOut % 32, 0);
      // Metadata: the input's, then quantization_version and file_type (llama.cpp's order).
      assert.deepEqual(
        h.metadata.slice(0, -2),
        METADATA.filter((m) => m.key !== "general.file_type"),
      );
      assert.deepEqual(h.metadata.slice(-2), [
        { key: "general.quantization_version", type: "u32", value: 2 },
        { key: "general.file_type", type: "u32", value: LLAMA_FTYPES[type] },
      ]);
    }
    assert.deepEqual(
      [LLAMA_FTYPES.q8_0, LLAMA_FTYPES.q4_0, LLAMA_FTYPES.q4_K_M, LLAMA_FTYPES.bf16],
      [7, 2, 15, 32],
    );
    if (!canRun) return;
    const views = await pythonViews(outputs);
    if (views === null) {
      console.log("gguf_quantize_test: python3 with gguf==0.19.0 is missing: cross-check skipped");
      return;
    }
    const hashes = (await pythonDequantHashes(outputs))!;
    for (const [i, output] of outputs.entries()) {
      assert.deepEqual(graftView(await Deno.readFile(output)), views[i], output);
      using file = GGUFFile.open(output);
      for (const t of file.header.tensors) {
        assert.equal(
          await sha256(file.dequantizeTensor(t)),
          hashes[i]![t.name],
          `${output} ${t.name}`,
        );
      }
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("output.weight present: it gets q6_K (q8_0 for q8_0), token_embd the type", () => {
  const bytes = sourceFile([["output.weight", [256, 4], "f32"]]);
  const header = readGGUF(new MemorySource(bytes));
  const typeOf = (type: QuantizeType, name: string): string =>
    planQuantization(header, type).find((t) => t.name === name)!.to.name;
  assert.equal(typeOf("q4_0", "output.weight"), "q6_K");
  assert.equal(typeOf("q8_0", "output.weight"), "q8_0");
  assert.equal(typeOf("q4_K_M", "output.weight"), "q6_K");
  assert.equal(typeOf("f16", "output.weight"), "f16");
  assert.equal(typeOf("q4_0", "token_embd.weight"), "q4_0");
  assert.equal(typeOf("q4_K", "token_embd.weight"), "q5_0"); // 576: fallback
  // --pure: no output rule, no mixture; fallbacks still.
  const pure = planQuantization(header, "q4_K_M", { pure: true });
  assert.equal(pure.find((t) => t.name === "output.weight")!.to.name, "q4_K");
  assert.equal(pure.find((t) => t.name === "blk.0.ffn_down.weight")!.to.name, "q4_K");
  assert.equal(pure.find((t) => t.name === "blk.0.attn_q.weight")!.to.name, "q5_0");
});

Deno.test("layers sort by number (blk.2 before blk.10), and the mixture counts in that order", () => {
  const names = ["blk.10.ffn_down.weight", "blk.2.ffn_down.weight", "blk.0.ffn_down.weight"];
  const tensors = layoutTensors(names.map((name) => ({
    name,
    dims: [256, 1, 1], // ggml_n_dims: 1
    type: ggmlTypeByName("f32")!,
    nbytes: 1024,
  })));
  const wide = layoutTensors(names.map((name) => ({
    name,
    dims: [256, 2],
    type: ggmlTypeByName("f32")!,
    nbytes: 2048,
  })));
  const header = (infos: GGUFTensorInfo[], layers: number) =>
    readGGUF(
      new MemorySource(writeGGUF({
        metadata: [
          { key: "general.architecture", type: "string", value: "llama" },
          { key: "llama.block_count", type: "u32", value: layers },
        ],
        tensors: infos,
        data: (i) => new Uint8Array(infos[i]!.nbytes),
      })),
    );
  // Trailing 1s do not count: [256, 1, 1] is 1-D, kept.
  assert.ok(planQuantization(header(tensors, 16), "q4_0").every((t) => t.to.name === "f32"));
  const plan = planQuantization(header(wide, 16), "q4_K_M");
  assert.deepEqual(plan.map((t) => t.name), [names[2], names[1], names[0]]);
  // use_more_bits(i, 16): i < 2 or i >= 14 or (i - 2) % 3 == 2: counters 0, 1, 2 -> yes, yes, no.
  assert.deepEqual(plan.map((t) => t.to.name), ["q6_K", "q6_K", "q4_K"]);
  assert.match(plan[0]!.note!, /q4_K_M mixture: q6_K/);
});

Deno.test("writeGGUFStream writes writeGGUF's bytes, the header and one tensor at a time", async () => {
  const bytes = sampleFile(false);
  const header = readGGUF(new MemorySource(bytes));
  for (const padEnd of [true, false]) {
    const input = {
      metadata: header.metadata,
      tensors: header.tensors,
      padEnd,
      data: (i: number) => {
        const t = header.tensors[i]!;
        return bytes.subarray(
          header.dataOffset + t.offset,
          header.dataOffset + t.offset + t.nbytes,
        );
      },
    };
    const chunks: Uint8Array[] = [];
    const n = await writeGGUFStream({ write: (b) => void chunks.push(b.slice()) }, {
      ...input,
      data: async (i) => await Promise.resolve(input.data(i)),
    });
    const streamed = new Uint8Array(n);
    let at = 0;
    for (const c of chunks) streamed.set(c, (at += c.length) - c.length);
    assert.equal(at, n);
    assert.deepEqual(streamed, writeGGUF(input));
    assert.ok(chunks.every((c) => c.length <= Math.max(header.dataOffset, 4096)));
  }
  const wrong = { ...header.tensors[0]!, nbytes: 5 };
  await assert.rejects(
    writeGGUFStream({ write: () => {} }, {
      metadata: [],
      tensors: [wrong],
      data: () => new Uint8Array(4),
    }),
    /has 4 bytes, not 5/,
  );
});

Deno.test("quantizeGGUF streams: the sink never gets more than the header or one tensor", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const input = `${dir}/in.gguf`;
    await Deno.writeFile(input, sourceFile());
    let largest = 0;
    let total = 0;
    const summary = await quantizeGGUF(input, {
      write: (b) => {
        largest = Math.max(largest, b.length);
        total += b.length;
      },
    }, { type: "q8_0" });
    using file = GGUFFile.open(input);
    const biggest = Math.max(file.header.dataOffset + 64, 576 * 8 / 32 * 34);
    assert.ok(largest <= biggest, `${largest} > ${biggest}`);
    assert.equal(total, summary.fileBytesOut);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("bad input: unknown type, missing file, output = input, a type Graft cannot read", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const input = `${dir}/in.gguf`;
    await Deno.writeFile(input, sourceFile());
    await assert.rejects(
      quantizeGGUF(input, `${dir}/out.gguf`, { type: "q3_K" as QuantizeType }),
      (e: unknown) =>
        e instanceof ArgumentError && /"q3_K" is not one Graft quantizes to.*q8_0/.test(e.message),
    );
    await assert.rejects(
      quantizeGGUF(`${dir}/missing.gguf`, `${dir}/out.gguf`, { type: "q8_0" }),
      Deno.errors.NotFound,
    );
    await assert.rejects(quantizeGGUF(input, input, { type: "q8_0" }), /is the input file/);
    await assert.rejects(
      quantizeGGUF(input, `${dir}/no/such/dir/out.gguf`, { type: "q8_0" }),
      /cannot write .*out\.gguf/,
    );
    // A q2_K weight (Graft has no q2_K dequantizer): a GGUFError naming it, no file left.
    const q2 = `${dir}/q2.gguf`;
    const q2k = ggmlTypeByName("q2_K")!;
    await Deno.writeFile(
      q2,
      writeGGUF({
        metadata: METADATA,
        tensors: layoutTensors([{
          name: "blk.0.ffn_up.weight",
          dims: [256, 2],
          type: q2k,
          nbytes: 168,
        }]),
        data: () => new Uint8Array(168),
      }),
    );
    await assert.rejects(
      quantizeGGUF(q2, `${dir}/q2-out.gguf`, { type: "q8_0" }),
      (e: unknown) => e instanceof GGUFError && /blk\.0\.ffn_up\.weight.*q2_K/.test(e.message),
    );
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name).sort(), ["in.gguf", "q2.gguf"]);
    // A mixture needs the layer count.
    const noLayers = readGGUF(
      new MemorySource(writeGGUF({
        metadata: [],
        tensors: layoutTensors([{
          name: "w.weight",
          dims: [256, 2],
          type: ggmlTypeByName("f32")!,
          nbytes: 2048,
        }]),
        data: () => new Uint8Array(2048),
      })),
    );
    assert.throws(() => planQuantization(noLayers, "q4_K_M"), /block_count/);
    assert.equal(planQuantization(noLayers, "q4_K")[0]!.to.name, "q4_K");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-read",
      "--allow-write",
      "--allow-ffi",
      "--allow-env",
      "tools/gguf.ts",
      ...args,
    ],
    cwd: new URL("..", import.meta.url).pathname,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: output.code, stdout: text(output.stdout), stderr: text(output.stderr) };
}

Deno.test({
  name: "deno task gguf quantize: a summary on stdout, no progress off a terminal, clear errors",
  ignore: !canRun,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    try {
      const input = `${dir}/in.gguf`;
      await Deno.writeFile(input, sourceFile());
      const ok = await cli("quantize", input, `${dir}/out.gguf`, "--type", "Q4_K");
      assert.equal(ok.code, 0, ok.stderr);
      assert.equal(ok.stderr, "");
      assert.match(ok.stdout, /q4_K, general\.file_type 14/);
      assert.match(ok.stdout, /tensors: 4 q4_K, 3 f32, 3 q5_0, 1 q8_0, 1 f16 \(12\)/);
      assert.match(ok.stdout, /fallbacks: 4 tensors .*\(3 q4_K -> q5_0, 1 q4_K -> f16\)/);
      assert.match(ok.stdout, /tensor data: .* MiB -> .* MiB; file: \d+ -> \d+ bytes/);
      const bad = await cli("quantize", input, `${dir}/x.gguf`, "--type", "q3_K");
      assert.equal(bad.code, 1);
      assert.match(bad.stderr, /gguf: --type "q3_K" is not a type Graft quantizes to; use one of/);
      const missing = await cli(
        "quantize",
        `${dir}/missing.gguf`,
        `${dir}/x.gguf`,
        "--type",
        "q8_0",
      );
      assert.equal(missing.code, 1);
      assert.match(missing.stderr, /gguf: No such file or directory.*missing\.gguf/);
      const noType = await cli("quantize", input, `${dir}/x.gguf`);
      assert.equal(noType.code, 2);
      assert.match(noType.stderr, /usage: .*quantize IN OUT --type TYPE/s);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

const MODEL = SMOLLM2_PATH;
const haveModel = smolLM2Cached();
if (!haveModel) {
  console.log(`gguf_quantize_test: ${MODEL} is missing (deno task model:fetch): skipped`);
}

Deno.test({
  name: "SmolLM2 Q4_1 -> q8_0 (requantized), and the q4_K / q4_K_M / q6_K plans",
  ignore: !haveModel,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    try {
      const output = `${dir}/smol-q8_0.gguf`;
      const summary = await quantizeGGUF(MODEL, output, { type: "q8_0" });
      assert.deepEqual(summary.counts, { f32: 61, q8_0: 211 });
      assert.equal(summary.requantized, 210); // token_embd is q8_0 already: copied
      using source = GGUFFile.open(MODEL);
      using file = GGUFFile.open(output);
      for (const name of ["blk.0.attn_q.weight", "blk.29.ffn_down.weight", "token_embd.weight"]) {
        const from = source.tensor(name);
        const want = from.type.name === "q8_0"
          ? source.readTensorData(from)
          : quantize(dequantize(source.readTensorData(from), "q4_1"), "q8_0");
        assert.deepEqual(file.readTensorData(file.tensor(name)), want, name);
      }
      if (canRun) {
        const view = await pythonView(output) as { tensors: { type: string }[] } | null;
        if (view) {
          assert.deepEqual(
            view.tensors.map((t) => t.type),
            file.header.tensors.map((t) => t.type.name.toUpperCase()),
          );
        }
      }
      const counts = (type: QuantizeType): Record<string, number> => {
        const out: Record<string, number> = {};
        for (const t of planQuantization(source.header, type)) {
          out[t.to.name] = (out[t.to.name] ?? 0) + 1;
        }
        return out;
      };
      // 576-wide rows fall back (q4_K -> q5_0, q6_K -> q8_0); ffn_down (1536 wide) does not.
      assert.deepEqual(counts("q4_K"), { f32: 61, q8_0: 1, q5_0: 180, q4_K: 30 });
      assert.deepEqual(counts("q6_K"), { f32: 61, q8_0: 181, q6_K: 30 });
      // use_more_bits over 30 layers: 14 of attn_v (q6_K -> q8_0) and 14 of ffn_down get q6_K.
      assert.deepEqual(counts("q4_K_M"), { f32: 61, q8_0: 15, q5_0: 166, q6_K: 14, q4_K: 16 });
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("gguf quantize: nothing native is left alive", () => assertNothingLive(baseline));
