/**
 * The dtype traits table: every element type once, with its code in the node table, its block
 * size (elements per block: 1 for plain types, 32 or 256 for ggml's quantized ones), bytes per
 * block, whether it is quantized, the typed array that holds its values and the conversions
 * the copy kernels do. Its twin is `zig/dtype.zig`, checked against it when the library loads.
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
  /** The dtypes a `cpy` converts this one to (itself included). */
  readonly convertsTo: readonly string[];
}

/** The dtype table. */
export const DTYPES = {
  f32: { code: 0, blockSize: 1, blockBytes: 4, quantized: false, convertsTo: ["f32", "f16"] },
  f16: { code: 1, blockSize: 1, blockBytes: 2, quantized: false, convertsTo: ["f32", "f16"] },
  i32: { code: 2, blockSize: 1, blockBytes: 4, quantized: false, convertsTo: ["i32"] },
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
export type TypedArrayOf<T extends DType> = T extends "f32" ? Float32Array
  : T extends "f16" ? Float16Array
  : Int32Array;

/** Any typed array Graft reads from or writes to tensors. */
export type TensorData = Float32Array | Float16Array | Int32Array;

const arrays = {
  f32: Float32Array,
  f16: Float16Array,
  i32: Int32Array,
} as const satisfies Record<DType, unknown>;

/** The name of the typed array class that holds `dtype`'s elements. */
export function typedArrayName(dtype: DType): string {
  return arrays[dtype].name;
}

/** Makes a typed array view of `bytes` for a dtype. */
export function typedView(dtype: DType, bytes: ArrayBuffer, length: number): TensorData {
  return new arrays[dtype](bytes, 0, length);
}
