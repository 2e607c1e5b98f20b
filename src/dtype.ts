/**
 * The dtype traits table: every element type once, with its code in the node table, its block
 * size (elements per block: 1 for plain types, 32 or 256 for ggml's quantized ones), bytes per
 * block, whether it is quantized, ggml's type id (what GGUF files store), the typed array that
 * holds its values and the conversions the copy kernels do. bf16 and the block-quantized types
 * (q8_0, q4_0, q4_1, q5_0, q5_1, q8_1, and the 256-element k-quants q4_K, q5_K, q6_K, q8_K) are
 * ggml's formats, bit for bit: `quantize` and `dequantize` (`src/quant.ts`) convert rows of
 * them; tensors hold them as raw bytes. Its twin is `zig/dtype.zig`, checked against it when the
 * library loads.
 * Every other file asks this table: adding a dtype starts with a row here.
 * @module
 */

import { DTypeError } from "./errors.ts";

/** One row of the dtype table. */
export interface DTypeTraits {
  /** The dtype's code in the node table (`zig/dtype.zig`). */
  readonly code: number;
  /** Elements per block (1 for plain types). */
  readonly blockSize: number;
  /** Bytes one block takes. */
  readonly blockBytes: number;
  /** True for block-quantized types (no typed array holds their elements). */
  readonly quantized: boolean;
  /** The dtypes a `cpy` converts this one to (itself included; empty: no cpy takes it yet). */
  readonly convertsTo: readonly string[];
  /** ggml's type id (`enum ggml_type`, `GGML_TYPE_*`), as GGUF files name tensor types. */
  readonly ggmlType: number;
  /**
   * True when `getRows` and `mulMat` take it as src0 (a table or weight matrix): f32, f16 and
   * the types whose rows the kernels dequantize. q8_1 and q8_K are activation types only.
   */
  readonly weight: boolean;
}

/** The dtype table. */
export const DTYPES = {
  f32: {
    code: 0,
    blockSize: 1,
    blockBytes: 4,
    quantized: false,
    convertsTo: ["f32", "f16", "q8_0", "q4_0"],
    ggmlType: 0,
    weight: true,
  },
  f16: {
    code: 1,
    blockSize: 1,
    blockBytes: 2,
    quantized: false,
    convertsTo: ["f32", "f16", "q8_0", "q4_0"],
    ggmlType: 1,
    weight: true,
  },
  i32: {
    code: 2,
    blockSize: 1,
    blockBytes: 4,
    quantized: false,
    convertsTo: ["i32"],
    ggmlType: 26,
    weight: false,
  },
  bf16: {
    code: 3,
    blockSize: 1,
    blockBytes: 2,
    quantized: false,
    convertsTo: [],
    ggmlType: 30,
    weight: true,
  },
  q8_0: {
    code: 4,
    blockSize: 32,
    blockBytes: 34,
    quantized: true,
    convertsTo: ["f32", "f16"],
    ggmlType: 8,
    weight: true,
  },
  q4_0: {
    code: 5,
    blockSize: 32,
    blockBytes: 18,
    quantized: true,
    convertsTo: ["f32", "f16"],
    ggmlType: 2,
    weight: true,
  },
  q4_1: {
    code: 6,
    blockSize: 32,
    blockBytes: 20,
    quantized: true,
    convertsTo: [],
    ggmlType: 3,
    weight: true,
  },
  q5_0: {
    code: 7,
    blockSize: 32,
    blockBytes: 22,
    quantized: true,
    convertsTo: [],
    ggmlType: 6,
    weight: true,
  },
  q5_1: {
    code: 8,
    blockSize: 32,
    blockBytes: 24,
    quantized: true,
    convertsTo: [],
    ggmlType: 7,
    weight: true,
  },
  q8_1: {
    code: 9,
    blockSize: 32,
    blockBytes: 36,
    quantized: true,
    convertsTo: [],
    ggmlType: 9,
    weight: false,
  },
  q4_K: {
    code: 10,
    blockSize: 256,
    blockBytes: 144,
    quantized: true,
    convertsTo: [],
    ggmlType: 12,
    weight: true,
  },
  q5_K: {
    code: 11,
    blockSize: 256,
    blockBytes: 176,
    quantized: true,
    convertsTo: [],
    ggmlType: 13,
    weight: true,
  },
  q6_K: {
    code: 12,
    blockSize: 256,
    blockBytes: 210,
    quantized: true,
    convertsTo: [],
    ggmlType: 14,
    weight: true,
  },
  q8_K: {
    code: 13,
    blockSize: 256,
    blockBytes: 292,
    quantized: true,
    convertsTo: [],
    ggmlType: 15,
    weight: false,
  },
  // ggml's GGML_TYPE_I64: row indices of getRows and setRows only. No typed array holds it in
  // TensorData (a BigInt64Array would change every numeric reader): its values travel as raw
  // bytes, `new Uint8Array(BigInt64Array.from(...).buffer)`.
  i64: {
    code: 14,
    blockSize: 1,
    blockBytes: 8,
    quantized: false,
    convertsTo: [],
    ggmlType: 27,
    weight: false,
  },
} as const satisfies Record<string, DTypeTraits>;

/** An element type name. */
export type DType = keyof typeof DTYPES;

/** The names of every dtype, in table order. */
export const DTYPE_NAMES: readonly DType[] = Object.keys(DTYPES) as DType[];

/** The dtypes `getRows` and `mulMat` take as src0 (the table's `weight` trait), in table order. */
export const WEIGHT_DTYPES: readonly DType[] = DTYPE_NAMES.filter((name) => DTYPES[name].weight);

/** Bytes per element of plain dtypes (derived from the table). */
export const dtypeSize: Readonly<Record<DType, number>> = Object.fromEntries(
  DTYPE_NAMES.map((name) => [name, DTYPES[name].blockBytes / DTYPES[name].blockSize]),
) as Record<DType, number>;

/** Code of each dtype in the node table (derived from the table). */
export const dtypeCode: Readonly<Record<DType, number>> = Object.fromEntries(
  DTYPE_NAMES.map((name) => [name, DTYPES[name].code]),
) as Record<DType, number>;

/** True when `name` is a dtype of the table. */
export function isDType(name: unknown): name is DType {
  return typeof name === "string" && Object.hasOwn(DTYPES, name);
}

/** Checks a dtype name where it enters: a DTypeError names `what`, the value and the choices. */
export function parseDType(what: string, name: unknown): DType {
  if (!isDType(name)) {
    throw new DTypeError(
      `${what}: dtype ${JSON.stringify(name) ?? String(name)} is not one Graft has; use one of ` +
        DTYPE_NAMES.join(", "),
    );
  }
  return name;
}

/** Bytes of `n` consecutive elements (a whole number of blocks) of `dtype`. */
export function rowBytes(dtype: DType, n: number): number {
  const { blockSize, blockBytes } = DTYPES[dtype];
  if (n % blockSize !== 0) {
    throw new DTypeError(`${n} ${dtype} elements are not whole blocks of ${blockSize}`);
  }
  return (n / blockSize) * blockBytes;
}

/** The typed array that holds a dtype's elements (raw bytes for bf16 and the block types). */
export type TypedArrayOf<T extends TensorDType> = T extends "f32" ? Float32Array
  : T extends "f16" ? Float16Array
  : T extends "i32" ? Int32Array
  : Uint8Array;

/**
 * Any typed array Graft reads from or writes to tensors: a Uint8Array holds the raw bytes of
 * bf16 and block-quantized tensors (ggml's layout, what `quantize` makes).
 */
export type TensorData = Float32Array | Float16Array | Int32Array | Uint8Array;

/**
 * The dtypes a tensor holds: every dtype of the table. f32, f16 and i32 have a typed array;
 * bf16 and the block-quantized types are raw bytes (`quantize`/`dequantize` convert them), and
 * the ops that take them say so (getRows, mulMat's src0 on the CPU).
 */
export type TensorDType = DType;

const arrays = {
  f32: Float32Array,
  f16: Float16Array,
  i32: Int32Array,
} as const;

/** True when `name` is a dtype a tensor can hold (see {@link TensorDType}): every dtype. */
export function isTensorDType(name: unknown): name is TensorDType {
  return isDType(name);
}

/** Checks a tensor's dtype name where it enters: a DTypeError names `what` and the value. */
export function parseTensorDType(what: string, name: unknown): TensorDType {
  return parseDType(what, name);
}

/** True when a dtype's values travel as raw bytes (bf16 and the block-quantized types). */
export function holdsRawBytes(dtype: TensorDType): boolean {
  return !Object.hasOwn(arrays, dtype);
}

/** The name of the typed array class that holds `dtype`'s elements (Uint8Array: raw bytes). */
export function typedArrayName(dtype: TensorDType): string {
  return holdsRawBytes(dtype) ? "Uint8Array" : arrays[dtype as keyof typeof arrays].name;
}

/**
 * Makes a typed array view of `bytes` for a dtype: `length` elements of a plain dtype, or all
 * of `bytes` as a Uint8Array for bf16 and the block types.
 */
export function typedView(dtype: TensorDType, bytes: ArrayBuffer, length: number): TensorData {
  if (holdsRawBytes(dtype)) return new Uint8Array(bytes);
  return new arrays[dtype as keyof typeof arrays](bytes, 0, length);
}
