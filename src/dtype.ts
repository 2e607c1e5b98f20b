/**
 * The dtype traits table: every element type once, with its code in the node table, its block
 * size (elements per block: 1 for plain types, 32 or 256 for ggml's quantized ones), bytes per
 * block, whether it is quantized, ggml's type id (what GGUF files store), the typed array that
 * holds its values and the conversions the copy kernels do. bf16 and the block-quantized types
 * (q8_0, q4_0, q4_1, q5_0, q5_1, q8_1, and the 256-element k-quants q4_K, q5_K, q6_K, q8_K) are
 * ggml's formats, bit for bit: `quantize` and
 * `dequantize` (`src/quant.ts`) convert rows of them; no tensor holds them yet. Its twin is `zig/dtype.zig`, checked against it when the library loads.
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
}

/** The dtype table. */
export const DTYPES = {
  f32: {
    code: 0,
    blockSize: 1,
    blockBytes: 4,
    quantized: false,
    convertsTo: ["f32", "f16"],
    ggmlType: 0,
  },
  f16: {
    code: 1,
    blockSize: 1,
    blockBytes: 2,
    quantized: false,
    convertsTo: ["f32", "f16"],
    ggmlType: 1,
  },
  i32: {
    code: 2,
    blockSize: 1,
    blockBytes: 4,
    quantized: false,
    convertsTo: ["i32"],
    ggmlType: 26,
  },
  bf16: { code: 3, blockSize: 1, blockBytes: 2, quantized: false, convertsTo: [], ggmlType: 30 },
  q8_0: { code: 4, blockSize: 32, blockBytes: 34, quantized: true, convertsTo: [], ggmlType: 8 },
  q4_0: { code: 5, blockSize: 32, blockBytes: 18, quantized: true, convertsTo: [], ggmlType: 2 },
  q4_1: { code: 6, blockSize: 32, blockBytes: 20, quantized: true, convertsTo: [], ggmlType: 3 },
  q5_0: { code: 7, blockSize: 32, blockBytes: 22, quantized: true, convertsTo: [], ggmlType: 6 },
  q5_1: { code: 8, blockSize: 32, blockBytes: 24, quantized: true, convertsTo: [], ggmlType: 7 },
  q8_1: { code: 9, blockSize: 32, blockBytes: 36, quantized: true, convertsTo: [], ggmlType: 9 },
  q4_K: {
    code: 10,
    blockSize: 256,
    blockBytes: 144,
    quantized: true,
    convertsTo: [],
    ggmlType: 12,
  },
  q5_K: {
    code: 11,
    blockSize: 256,
    blockBytes: 176,
    quantized: true,
    convertsTo: [],
    ggmlType: 13,
  },
  q6_K: {
    code: 12,
    blockSize: 256,
    blockBytes: 210,
    quantized: true,
    convertsTo: [],
    ggmlType: 14,
  },
  q8_K: {
    code: 13,
    blockSize: 256,
    blockBytes: 292,
    quantized: true,
    convertsTo: [],
    ggmlType: 15,
  },
} as const satisfies Record<string, DTypeTraits>;

/** An element type name. */
export type DType = keyof typeof DTYPES;

/** The names of every dtype, in table order. */
export const DTYPE_NAMES: readonly DType[] = Object.keys(DTYPES) as DType[];

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

/** The typed array that holds a dtype's elements. */
export type TypedArrayOf<T extends TensorDType> = T extends "f32" ? Float32Array
  : T extends "f16" ? Float16Array
  : Int32Array;

/** Any typed array Graft reads from or writes to tensors. */
export type TensorData = Float32Array | Float16Array | Int32Array;

/**
 * The dtypes a tensor holds today: those of the table with a typed array (f32, f16, i32), which
 * the kernels and backends take. bf16 and the block-quantized types convert with
 * `quantize`/`dequantize` until the kernels for quantized weights exist.
 */
export type TensorDType = Extract<DType, "f32" | "f16" | "i32">;

const arrays = {
  f32: Float32Array,
  f16: Float16Array,
  i32: Int32Array,
} as const satisfies Record<TensorDType, unknown>;

/** True when `name` is a dtype a tensor can hold (see {@link TensorDType}). */
export function isTensorDType(name: unknown): name is TensorDType {
  return typeof name === "string" && Object.hasOwn(arrays, name);
}

/**
 * Checks a tensor's dtype name where it enters: a DTypeError names `what` and the value, and
 * for a dtype of the table that no tensor holds yet, says so.
 */
export function parseTensorDType(what: string, name: unknown): TensorDType {
  const dtype = parseDType(what, name);
  if (!isTensorDType(dtype)) {
    throw new DTypeError(
      `${what}: no tensor holds ${dtype} yet (tensors hold ${Object.keys(arrays).join(", ")}); ` +
        `quantize() and dequantize() convert rows of it`,
    );
  }
  return dtype;
}

/** The name of the typed array class that holds `dtype`'s elements. */
export function typedArrayName(dtype: TensorDType): string {
  return arrays[dtype].name;
}

/** Makes a typed array view of `bytes` for a dtype. */
export function typedView(dtype: TensorDType, bytes: ArrayBuffer, length: number): TensorData {
  return new arrays[dtype](bytes, 0, length);
}
