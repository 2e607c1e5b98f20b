/**
 * Element types. The numbering is shared with the Zig core (`zig/node.zig`, `DType`).
 * @module
 */

/** An element type name. */
export type DType = "f32" | "f16" | "i32";

/** Bytes per element. */
export const dtypeSize: Readonly<Record<DType, number>> = { f32: 4, f16: 2, i32: 4 };

/** Code of each dtype in the node table. */
export const dtypeCode: Readonly<Record<DType, number>> = { f32: 0, f16: 1, i32: 2 };

/** The typed array that holds a dtype's elements. */
export type TypedArrayOf<T extends DType> = T extends "f32" ? Float32Array
  : T extends "f16" ? Float16Array
  : Int32Array;

/** Any typed array Graft reads from or writes to tensors. */
export type TensorData = Float32Array | Float16Array | Int32Array;

/** Makes a typed array view of `bytes` for a dtype. */
export function typedView(dtype: DType, bytes: ArrayBuffer, length: number): TensorData {
  switch (dtype) {
    case "f32":
      return new Float32Array(bytes, 0, length);
    case "f16":
      return new Float16Array(bytes, 0, length);
    case "i32":
      return new Int32Array(bytes, 0, length);
  }
}
