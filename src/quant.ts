/**
 * ggml's quantized formats, bit for bit: {@link quantize} turns f32 values into bf16, one of
 * ggml's 32-element block types (q8_0, q4_0, q4_1, q5_0, q5_1, q8_1) or one of its 256-element
 * k-quants (q4_K, q5_K, q6_K, q8_K) exactly as ggml's
 * `quantize_row_*_ref` writes them into GGUF files, and {@link dequantize} turns them back as
 * ggml's `dequantize_row_*` does. The arithmetic is the core's (`zig/quant.zig`), so it needs
 * the native library (`--allow-ffi`), found as the backends find it.
 * @module
 */

import { check, loadCore } from "./core/core.ts";
import { type DType, DTYPES, parseDType } from "./dtype.ts";
import { ArgumentError, DTypeError } from "./errors.ts";

/** The dtypes {@link quantize} and {@link dequantize} take. */
export const QUANT_DTYPES = [
  "bf16",
  "q8_0",
  "q4_0",
  "q4_1",
  "q5_0",
  "q5_1",
  "q8_1",
  "q4_K",
  "q5_K",
  "q6_K",
  "q8_K",
] as const;

/** bf16 or one of ggml's block types: a dtype {@link quantize} writes. */
export type QuantDType = (typeof QUANT_DTYPES)[number];

/** True when `name` is a dtype {@link quantize} and {@link dequantize} take. */
export function isQuantDType(name: unknown): name is QuantDType {
  return (QUANT_DTYPES as readonly unknown[]).includes(name);
}

function parseQuantDType(what: string, name: unknown): QuantDType {
  const dtype: DType = parseDType(what, name);
  if (!isQuantDType(dtype)) {
    throw new DTypeError(
      `${what}: ${dtype} is not a quantized dtype; use one of ${QUANT_DTYPES.join(", ")}`,
    );
  }
  return dtype;
}

function show(value: unknown): string {
  if (typeof value === "bigint") return `${value}n (a BigInt)`;
  if (ArrayBuffer.isView(value)) return `a ${value.constructor.name}`;
  if (typeof value === "string") return JSON.stringify(value);
  return value === null ? "null" : typeof value === "object" ? "an object" : String(value);
}

/**
 * Quantizes f32 values into `dtype`'s bytes, as ggml's reference quantizer does (the bytes are
 * those llama.cpp writes into a GGUF file). `data.length` must be whole blocks (32 values for
 * the block types, 256 for the k-quants, any length for bf16).
 *
 * Throws ArgumentError for data that is not a Float32Array or not whole blocks, and DTypeError
 * for a dtype that is not one of {@link QUANT_DTYPES}; each names the value.
 *
 * @example
 * ```ts
 * import { dequantize, quantize } from "./quant.ts";
 * const x = Float32Array.from({ length: 64 }, (_, i) => Math.sin(i));
 * const bytes = quantize(x, "q8_0"); // 2 blocks: an f16 scale and 32 int8 each
 * console.log(bytes.length); // 68
 * const back = dequantize(bytes, "q8_0"); // 64 values, each within half a step of x
 * ```
 */
export function quantize(data: Float32Array, dtype: QuantDType): Uint8Array {
  const what = "quantize";
  if (!(data instanceof Float32Array)) {
    throw new ArgumentError(`${what}: data must be a Float32Array, got ${show(data)}`);
  }
  const type = parseQuantDType(what, dtype);
  const { code, blockSize, blockBytes } = DTYPES[type];
  if (data.length % blockSize !== 0) {
    throw new ArgumentError(
      `${what}: ${data.length} values are not whole ${type} blocks of ${blockSize}`,
    );
  }
  const out = new Uint8Array((data.length / blockSize) * blockBytes);
  const lib = loadCore();
  check(
    lib,
    lib.graft_quantize(code, data, BigInt(data.length), out, BigInt(out.length)),
    what,
  );
  return out;
}

/**
 * Dequantizes `dtype`'s bytes into f32 values, as ggml's `dequantize_row_*` does (q8_1, which
 * ggml only produces for its dot products, dequantizes as q8_0: the scale times each int8).
 * `n`, the number of values, defaults to every whole block in `bytes`; given, it must be whole
 * blocks and `bytes` must hold them (more bytes are ignored).
 *
 * Throws ArgumentError for bytes that are not a Uint8Array, an `n` that is not a whole number
 * of blocks or more than `bytes` holds, and DTypeError for a dtype that is not one of
 * {@link QUANT_DTYPES}; each names the value.
 *
 * @example
 * ```ts
 * import { dequantize } from "./quant.ts";
 * // One q4_0 block: scale 0.5 (f16 0x3800), then 16 bytes of nibbles (each value (q - 8) * 0.5).
 * const block = new Uint8Array(18);
 * block.set([0x00, 0x38]);
 * block.fill(0x9a, 2); // low nibble 10 -> 1.0 (elements 0..15), high nibble 9 -> 0.5 (16..31)
 * const x = dequantize(block, "q4_0");
 * console.log(x[0], x[16]); // 1 0.5
 * ```
 */
export function dequantize(bytes: Uint8Array, dtype: QuantDType, n?: number): Float32Array {
  const what = "dequantize";
  if (!(bytes instanceof Uint8Array)) {
    throw new ArgumentError(`${what}: bytes must be a Uint8Array, got ${show(bytes)}`);
  }
  const type = parseQuantDType(what, dtype);
  const { code, blockSize, blockBytes } = DTYPES[type];
  let count: number;
  if (n === undefined) {
    if (bytes.length % blockBytes !== 0) {
      throw new ArgumentError(
        `${what}: ${bytes.length} bytes are not whole ${type} blocks of ${blockBytes} bytes; ` +
          `pass n to read fewer values`,
      );
    }
    count = (bytes.length / blockBytes) * blockSize;
  } else {
    if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 0) {
      throw new ArgumentError(
        `${what}: n must be an integer number in [0, 2^53), got ${show(n)}`,
      );
    }
    if (n % blockSize !== 0) {
      throw new ArgumentError(
        `${what}: n = ${n} values are not whole ${type} blocks of ${blockSize}`,
      );
    }
    const needed = (n / blockSize) * blockBytes;
    if (needed > bytes.length) {
      throw new ArgumentError(
        `${what}: n = ${n} ${type} values take ${needed} bytes; bytes has ${bytes.length}`,
      );
    }
    count = n;
  }
  const out = new Float32Array(count);
  const lib = loadCore();
  check(
    lib,
    lib.graft_dequantize(code, bytes, BigInt(bytes.length), out, BigInt(count)),
    what,
  );
  return out;
}
