/**
 * ggml's quantized formats, bit for bit. bf16, q8_0, q4_0, q4_1, q5_0 and q5_1 are compared
 * with fixtures from gguf-py 0.19.0 (`tools/quant_fixtures.py`, an independent numpy port of
 * ggml-quants.c): quantized bytes, dequantized values (as f32 bits) and the dequantization of
 * random block bytes. gguf-py has no q8_1, so q8_1 is compared with `q8_1Reference` below, an
 * f64 re-statement of ggml's quantize_row_q8_1_ref (f32 steps rounded with Math.fround).
 * The k-quants q4_K, q5_K, q6_K and q8_K are compared with what ggml's own C code writes
 * (`tools/kquant_fixtures.py`: a harness linked with llama.cpp's ggml-quants.c, whose
 * dequantizations gguf-py 0.19.0 reproduces for q4_K, q5_K and q6_K).
 */

import assert from "node:assert/strict";
import {
  ArgumentError,
  Context,
  dequantize,
  DTypeError,
  DTYPES,
  liveAllocations,
  QUANT_DTYPES,
  type QuantDType,
  quantize,
  rowBytes,
  ShapeError,
  Status,
} from "../mod.ts";
import { loadCore } from "../src/core/core.ts";
import { assertNothingLive } from "./leaks.ts";

const baseline = liveAllocations();
const fixtures = new URL("./fixtures/quant/", import.meta.url);

interface Manifest {
  gguf: string;
  rows: { name: string; offset: number; length: number }[];
  types: QuantDType[];
  files: Record<string, { bytes: number; sha256: string }>;
}

const manifest: Manifest = JSON.parse(
  Deno.readTextFileSync(new URL("manifest.json", fixtures)),
);

function bytes(name: string): Uint8Array {
  const data = Deno.readFileSync(new URL(name, fixtures));
  assert.equal(data.length, manifest.files[name]?.bytes, `${name}: size in manifest.json`);
  return data;
}

function floats(name: string): Float32Array {
  const data = bytes(name);
  return new Float32Array(data.buffer, data.byteOffset, data.length / 4);
}

/** The row of the manifest that holds element `index` of input.f32. */
function rowOf(index: number): string {
  const row = manifest.rows.find((r) => index >= r.offset && index < r.offset + r.length);
  return row ? `${row.name}[${index - row.offset}]` : `element ${index}`;
}

/** Asserts equal bytes, naming the first difference. */
function assertSameBytes(got: Uint8Array, want: Uint8Array, what: string, block: number): void {
  assert.equal(got.length, want.length, `${what}: length`);
  const i = got.findIndex((b, index) => b !== want[index]);
  if (i >= 0) {
    assert.fail(
      `${what}: byte ${i} (block ${Math.floor(i / block)}, byte ${i % block}) is ` +
        `0x${got[i]!.toString(16)}, gguf-py has 0x${want[i]!.toString(16)}`,
    );
  }
}

/** Asserts equal f32 bit patterns (NaNs included), naming the first difference. */
function assertSameBits(got: Float32Array, want: Float32Array, what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  const a = new Uint32Array(got.buffer, got.byteOffset, got.length);
  const b = new Uint32Array(want.buffer, want.byteOffset, want.length);
  const i = a.findIndex((bits, index) => bits !== b[index]);
  if (i >= 0) {
    assert.fail(
      `${what}: value ${i} is ${got[i]} (0x${a[i]!.toString(16)}), expected ${want[i]} ` +
        `(0x${b[i]!.toString(16)})`,
    );
  }
}

Deno.test("the fixtures are gguf-py 0.19.0's and cover every type it implements", () => {
  assert.equal(manifest.gguf, "0.19.0");
  assert.deepEqual(
    manifest.types,
    QUANT_DTYPES.filter((t) => t !== "q8_1" && DTYPES[t].blockSize !== 256),
  );
  assert.ok(manifest.rows.some((r) => r.name === "zeros"));
});

for (const type of manifest.types) {
  const blockBytes = DTYPES[type].blockBytes;

  Deno.test(`${type}: quantize gives gguf-py's bytes for every fixture row`, () => {
    const input = floats("input.f32");
    const want = bytes(`${type}.bin`);
    const got = quantize(input, type);
    assert.equal(got.length, want.length);
    const i = got.findIndex((b, index) => b !== want[index]);
    if (i >= 0) {
      const element = Math.floor(i / blockBytes) * DTYPES[type].blockSize;
      assertSameBytes(got, want, `${type} at ${rowOf(element)}`, blockBytes);
    }
  });

  Deno.test(`${type}: dequantize gives gguf-py's values, bit for bit`, () => {
    const values = dequantize(bytes(`${type}.bin`), type);
    assertSameBits(values, floats(`${type}.dequant.f32`), `${type} dequantize`);
  });

  Deno.test(`${type}: dequantize of random block bytes gives gguf-py's values`, () => {
    const values = dequantize(bytes(`${type}.random.bin`), type);
    assertSameBits(values, floats(`${type}.random.dequant.f32`), `${type} random bytes`);
  });
}

Deno.test("bf16: NaNs stay NaN (quiet), ties round to even, overflow gives infinity", () => {
  const got = quantize(floats("bf16_special.f32"), "bf16");
  assertSameBytes(got, bytes("bf16_special.bin"), "bf16 specials", 2);
  const halves = new Uint16Array(got.buffer);
  assert.equal(halves[1], 0x7fc0); // signalling NaN 0x7f800001 becomes quiet
  assert.equal(halves[9], 0x3f80); // 1 + half an ulp: the tie goes to the even 0x3f80
  assert.equal(halves[10], 0x3f82); // 0x3f818000: the tie goes to the even 0x3f82
});

// ---------------------------------------------------------------------------------------------
// k-quants: ggml's own bytes (tools/kquant_fixtures.py builds ggml-quants.c into a harness).

interface KManifest extends Manifest {
  sdist_sha256: string;
  gguf_dequantize_agrees: string[];
}

const kmanifest: KManifest = JSON.parse(
  Deno.readTextFileSync(new URL("kquant_manifest.json", fixtures)),
);

function kbytes(name: string): Uint8Array {
  const data = Deno.readFileSync(new URL(name, fixtures));
  assert.equal(data.length, kmanifest.files[name]?.bytes, `${name}: size in kquant_manifest.json`);
  return data;
}

function kfloats(name: string): Float32Array {
  const data = kbytes(name);
  return new Float32Array(data.buffer, data.byteOffset, data.length / 4);
}

Deno.test("the k-quant fixtures are ggml's and cover every k-quant dtype", () => {
  assert.deepEqual(kmanifest.types, QUANT_DTYPES.filter((t) => DTYPES[t].blockSize === 256));
  assert.deepEqual(kmanifest.gguf_dequantize_agrees, ["q4_K", "q5_K", "q6_K"]);
  assert.ok(kmanifest.rows.some((r) => r.name === "zeros"));
});

for (const type of kmanifest.types) {
  const { blockBytes, blockSize } = DTYPES[type];

  Deno.test(`${type}: quantize gives ggml's bytes for every fixture row`, () => {
    const input = kfloats("kquant_input.f32");
    const want = kbytes(`${type}.bin`);
    const got = quantize(input, type);
    assert.equal(got.length, want.length);
    const i = got.findIndex((b, index) => b !== want[index]);
    if (i >= 0) {
      const element = Math.floor(i / blockBytes) * blockSize;
      const row = kmanifest.rows.find((r) => element >= r.offset && element < r.offset + r.length);
      assertSameBytes(
        got,
        want,
        `${type} at ${row?.name}[${element - (row?.offset ?? 0)}]`,
        blockBytes,
      );
    }
  });

  Deno.test(`${type}: dequantize gives ggml's values, bit for bit`, () => {
    const values = dequantize(kbytes(`${type}.bin`), type);
    assertSameBits(values, kfloats(`${type}.dequant.f32`), `${type} dequantize`);
  });

  Deno.test(`${type}: dequantize of random block bytes gives ggml's values`, () => {
    const values = dequantize(kbytes(`${type}.random.bin`), type);
    assertSameBits(values, kfloats(`${type}.random.dequant.f32`), `${type} random bytes`);
  });
}

Deno.test("q8_K stores f32 d and the sums of each 16 quants", () => {
  const input = kfloats("kquant_input.f32");
  const q = quantize(input, "q8_K");
  const view = new DataView(q.buffer);
  for (let b = 0; b < input.length / 256; b++) {
    for (let j = 0; j < 16; j++) {
      let sum = 0;
      for (let i = 0; i < 16; i++) sum += view.getInt8(b * 292 + 4 + 16 * j + i);
      assert.equal(view.getInt16(b * 292 + 260 + 2 * j, true), sum, `block ${b} sum ${j}`);
    }
  }
});

// ---------------------------------------------------------------------------------------------
// q8_1: no gguf-py implementation; an f64 re-statement of ggml's quantize_row_q8_1_ref.

const f16Scratch = new Float16Array(1);
const f16Bits = new Uint16Array(f16Scratch.buffer);

/** GGML_FP32_TO_FP16 of a finite-or-infinite f32 value: round to nearest even. */
function toF16Bits(value: number): number {
  f16Scratch[0] = value;
  return f16Bits[0]!;
}

function fromF16Bits(bits: number): number {
  f16Bits[0] = bits;
  return f16Scratch[0]!;
}

/** C's roundf: half away from zero (exact in f64 for an f32 argument). */
function roundf(x: number): number {
  return Math.sign(x) * Math.floor(Math.abs(x) + 0.5);
}

/**
 * ggml's quantize_row_q8_1_ref: per block of 32, d = amax / 127, id = 1 / d (0 when d is 0),
 * qs = roundf(x * id), then d and s = sum(qs) * d as f16; every f32 operation rounded with
 * Math.fround. Returns the bytes and ggml's dequantization of them (qs * f16(d)).
 */
function q8_1Reference(x: Float32Array): { bytes: Uint8Array; values: Float32Array } {
  const blocks = x.length / 32;
  const out = new Uint8Array(blocks * 36);
  const view = new DataView(out.buffer);
  const values = new Float32Array(x.length);
  for (let b = 0; b < blocks; b++) {
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[b * 32 + j]!));
    const d = Math.fround(amax / 127);
    const id = d !== 0 ? Math.fround(1 / d) : 0;
    let sum = 0;
    for (let j = 0; j < 32; j++) {
      const q = roundf(Math.fround(x[b * 32 + j]! * id));
      view.setInt8(b * 36 + 4 + j, q);
      sum += q;
    }
    const dBits = toF16Bits(d);
    view.setUint16(b * 36, dBits, true);
    view.setUint16(b * 36 + 2, toF16Bits(Math.fround(sum * d)), true);
    const dHalf = fromF16Bits(dBits);
    for (let j = 0; j < 32; j++) {
      values[b * 32 + j] = Math.fround(view.getInt8(b * 36 + 4 + j) * dHalf);
    }
  }
  return { bytes: out, values };
}

Deno.test("q8_1: quantize matches the f64 reference of ggml's algorithm (s = d * sum)", () => {
  const input = floats("input.f32");
  const want = q8_1Reference(input);
  const got = quantize(input, "q8_1");
  assertSameBytes(got, want.bytes, "q8_1 (against the test's reference)", 36);
  assertSameBits(dequantize(got, "q8_1"), want.values, "q8_1 dequantize");
});

Deno.test("q8_1 carries q8_0's scale and quants, plus the sum", () => {
  const input = floats("input.f32");
  const q8_0 = quantize(input, "q8_0");
  const q8_1 = quantize(input, "q8_1");
  for (let b = 0; b < input.length / 32; b++) {
    assert.deepEqual(q8_1.subarray(b * 36, b * 36 + 2), q8_0.subarray(b * 34, b * 34 + 2));
    assert.deepEqual(
      q8_1.subarray(b * 36 + 4, b * 36 + 36),
      q8_0.subarray(b * 34 + 2, b * 34 + 34),
    );
  }
});

// ---------------------------------------------------------------------------------------------
// Round trips, lengths and bad input.

Deno.test("every quantized dtype round-trips within its step; sizes follow the table", () => {
  const x = Float32Array.from({ length: 256 }, (_, i) => Math.sin(i * 0.37) * (1 + (i % 7)));
  for (const type of QUANT_DTYPES) {
    const { blockSize, blockBytes } = DTYPES[type];
    const q = quantize(x, type);
    assert.equal(q.length, (x.length / blockSize) * blockBytes, type);
    const back = dequantize(q, type);
    assert.equal(back.length, x.length);
    const levels = {
      bf16: 256,
      q8_0: 254,
      q8_1: 254,
      q4_0: 15,
      q4_1: 15,
      q5_0: 31,
      q5_1: 31,
      q4_K: 15,
      q5_K: 31,
      q6_K: 63,
      q8_K: 254,
    }[type];
    // The range a value's step divides: its 32-value block (q4_K, q5_K: sub-block), q6_K's
    // 16-value sub-block and q8_K's 256-value block, symmetric around zero.
    const span = { q6_K: 16, q8_K: 256 }[type as string] ?? 32;
    const symmetric = type === "q6_K" || type === "q8_K";
    for (let i = 0; i < x.length; i++) {
      const block = x.subarray(i - (i % span), i - (i % span) + span);
      const range = type === "bf16"
        ? Math.abs(x[i]!)
        : symmetric
        ? 2 * Math.max(...block.map(Math.abs))
        : Math.max(...block) - Math.min(...block);
      assert.ok(Math.abs(back[i]! - x[i]!) <= (range / levels) * 1.1 + 1e-6, `${type} ${i}`);
    }
    // Fewer values than the bytes hold: the first n.
    const first = dequantize(q, type, blockSize);
    assert.deepEqual(first, back.subarray(0, blockSize));
  }
  assert.equal(quantize(new Float32Array(0), "q4_0").length, 0);
  assert.equal(dequantize(new Uint8Array(0), "q4_0").length, 0);
});

function assertThrowsWith(
  fn: () => unknown,
  type: new (...args: never[]) => Error,
  parts: string[],
): void {
  assert.throws(fn, (error: Error) => {
    assert.ok(error instanceof type, `${error.name}: ${error.message}`);
    for (const part of parts) {
      assert.ok(error.message.includes(part), `"${part}" in ${error.message}`);
    }
    return true;
  });
}

Deno.test("bad arguments throw ArgumentError or DTypeError naming the value", () => {
  const x = new Float32Array(64);
  assertThrowsWith(() => quantize(new Float32Array(33), "q4_0"), ArgumentError, [
    "33",
    "q4_0",
    "32",
  ]);
  assertThrowsWith(
    () => quantize([1, 2] as unknown as Float32Array, "q8_0"),
    ArgumentError,
    ["Float32Array", "object"],
  );
  assertThrowsWith(
    () => quantize(new Float64Array(32) as unknown as Float32Array, "q8_0"),
    ArgumentError,
    ["Float64Array"],
  );
  assertThrowsWith(() => quantize(x, "q4_K"), ArgumentError, ["64", "q4_K", "256"]);
  assertThrowsWith(() => dequantize(new Uint8Array(143), "q4_K"), ArgumentError, ["143", "144"]);
  assertThrowsWith(() => quantize(x, "f16" as QuantDType), DTypeError, ["f16", "q4_0"]);
  assertThrowsWith(() => quantize(x, "q9_9" as QuantDType), DTypeError, ['"q9_9"']);
  const q = quantize(x, "q8_0"); // 68 bytes
  assertThrowsWith(() => dequantize(q.subarray(0, 35), "q8_0"), ArgumentError, ["35", "34"]);
  assertThrowsWith(() => dequantize(q, "q8_0", 96), ArgumentError, ["96", "102", "68"]);
  assertThrowsWith(() => dequantize(q, "q8_0", 40), ArgumentError, ["40", "32"]);
  assertThrowsWith(() => dequantize(q, "q8_0", 1.5), ArgumentError, ["1.5"]);
  assertThrowsWith(() => dequantize(q, "q8_0", -32), ArgumentError, ["-32"]);
  assertThrowsWith(() => dequantize(q, "i32" as QuantDType), DTypeError, ["i32"]);
  assertThrowsWith(
    () => dequantize(x as unknown as Uint8Array, "q8_0"),
    ArgumentError,
    ["Uint8Array", "Float32Array"],
  );
});

Deno.test("tensors hold every quantized dtype, in whole blocks (tests/quant_ops_test.ts)", () => {
  const ctx = new Context();
  for (const type of QUANT_DTYPES) {
    // 256 elements: whole blocks of every type (32 or 256).
    const t = ctx.newTensor(type, [256, 2]);
    assert.equal(t.nbytes, rowBytes(type, 256) * 2);
    if (DTYPES[type].blockSize > 1) {
      assertThrowsWith(() => ctx.newTensor(type, [48, 2]), ShapeError, ["newTensor", type]);
    }
  }
});

Deno.test("the core's quantize exports refuse bad calls with a status, never a crash", () => {
  const lib = loadCore();
  const x = new Float32Array(64);
  const out = new Uint8Array(36);
  const code = (t: QuantDType) => DTYPES[t].code;
  // Unknown dtype code, a non-quantized dtype, partial blocks, a small destination or source.
  assert.equal(lib.graft_quantize(99, x, 64n, out, 36n), Status.invalidArgument);
  assert.equal(lib.graft_quantize(DTYPES.f32.code, x, 64n, out, 36n), Status.unsupported);
  assert.equal(lib.graft_quantize(code("q4_0"), x, 33n, out, 36n), Status.invalidArgument);
  assert.equal(lib.graft_quantize(code("q4_0"), x, 64n, out, 35n), Status.outOfSpace);
  assert.equal(lib.graft_quantize(code("q4_0"), x, 64n, out, 36n), Status.ok);
  assert.equal(lib.graft_quantize(code("q4_0"), null, 64n, out, 36n), Status.invalidArgument);
  assert.equal(lib.graft_quantize(code("q4_0"), x, 2n ** 60n, out, 36n), Status.invalidArgument);
  assert.equal(lib.graft_dequantize(code("q4_0"), out, 35n, x, 64n), Status.outOfBounds);
  assert.equal(lib.graft_dequantize(code("q4_0"), out, 36n, x, 48n), Status.invalidArgument);
  assert.equal(lib.graft_dequantize(code("q4_0"), out, 36n, null, 64n), Status.invalidArgument);
  assert.equal(lib.graft_dequantize(DTYPES.i32.code, out, 36n, x, 64n), Status.unsupported);
  assert.equal(lib.graft_dequantize(code("q4_0"), out, 36n, x, 64n), Status.ok);
  assert.equal(lib.graft_dequantize(code("q4_0"), null, 0n, null, 0n), Status.ok);
  // Unaligned source and destination work.
  const bytes = new Uint8Array(4 * 32 + 1);
  const unaligned = new Uint8Array(bytes.buffer, 1, 4 * 32);
  assert.equal(lib.graft_quantize(code("q8_0"), unaligned, 32n, out, 36n), Status.ok);
  assert.equal(lib.graft_dequantize(code("q8_0"), out, 34n, unaligned, 32n), Status.ok);
});

Deno.test("nothing native is left alive", () => {
  assertNothingLive(baseline);
});
