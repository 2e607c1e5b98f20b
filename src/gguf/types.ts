/**
 * The GGUF format's own tables: metadata value types and ggml's tensor type ids with their
 * block sizes (the file format's list, as llama.cpp's `GGML_QUANT_SIZES`). A file may hold any
 * of these types; which of them Graft computes with is the dtype table's business
 * (`src/dtype.ts`): `graftDType` maps between the two.
 * @module
 */

import { isTensorDType, type TensorDType } from "../dtype.ts";

/** GGUF metadata value types, by their code in the file. */
export const ValueType: {
  readonly u8: 0;
  readonly i8: 1;
  readonly u16: 2;
  readonly i16: 3;
  readonly u32: 4;
  readonly i32: 5;
  readonly f32: 6;
  readonly bool: 7;
  readonly string: 8;
  readonly array: 9;
  readonly u64: 10;
  readonly i64: 11;
  readonly f64: 12;
} = {
  u8: 0,
  i8: 1,
  u16: 2,
  i16: 3,
  u32: 4,
  i32: 5,
  f32: 6,
  bool: 7,
  string: 8,
  array: 9,
  u64: 10,
  i64: 11,
  f64: 12,
} as const;

/** A metadata value type's name. */
export type ValueTypeName = keyof typeof ValueType;

const valueTypeNames = new Map<number, ValueTypeName>(
  (Object.entries(ValueType) as [ValueTypeName, number][]).map(([name, code]) => [code, name]),
);

/** The name of a value type code, or undefined for a code GGUF does not define. */
export function valueTypeName(code: number): ValueTypeName | undefined {
  return valueTypeNames.get(code);
}

/** Bytes of a fixed-size value type (strings and arrays have none). */
export const VALUE_SIZES: Readonly<Partial<Record<ValueTypeName, number>>> = {
  u8: 1,
  i8: 1,
  u16: 2,
  i16: 2,
  u32: 4,
  i32: 4,
  f32: 4,
  bool: 1,
  u64: 8,
  i64: 8,
  f64: 8,
};

/** One ggml tensor type: its name as Graft and llama.cpp's tools print it, block size, bytes. */
export interface GgmlType {
  /** Its id in GGUF files (GGML_TYPE_*). */
  readonly id: number;
  /** Its name, lower case as llama.cpp prints it ("q4_K"). */
  readonly name: string;
  /** Elements per block. */
  readonly blockSize: number;
  /** Bytes per block. */
  readonly blockBytes: number;
}

const rows: readonly [number, string, number, number][] = [
  [0, "f32", 1, 4],
  [1, "f16", 1, 2],
  [2, "q4_0", 32, 18],
  [3, "q4_1", 32, 20],
  [6, "q5_0", 32, 22],
  [7, "q5_1", 32, 24],
  [8, "q8_0", 32, 34],
  [9, "q8_1", 32, 40],
  [10, "q2_K", 256, 84],
  [11, "q3_K", 256, 110],
  [12, "q4_K", 256, 144],
  [13, "q5_K", 256, 176],
  [14, "q6_K", 256, 210],
  [15, "q8_K", 256, 292],
  [16, "iq2_xxs", 256, 66],
  [17, "iq2_xs", 256, 74],
  [18, "iq3_xxs", 256, 98],
  [19, "iq1_s", 256, 50],
  [20, "iq4_nl", 32, 18],
  [21, "iq3_s", 256, 110],
  [22, "iq2_s", 256, 82],
  [23, "iq4_xs", 256, 136],
  [24, "i8", 1, 1],
  [25, "i16", 1, 2],
  [26, "i32", 1, 4],
  [27, "i64", 1, 8],
  [28, "f64", 1, 8],
  [29, "iq1_m", 256, 56],
  [30, "bf16", 1, 2],
  [34, "tq1_0", 256, 54],
  [35, "tq2_0", 256, 66],
  [39, "mxfp4", 32, 17],
];

const byId = new Map<number, GgmlType>(
  rows.map(([id, name, blockSize, blockBytes]) => [id, { id, name, blockSize, blockBytes }]),
);

/** The ggml type with this id, or undefined for an id this table does not know. */
export function ggmlType(id: number): GgmlType | undefined {
  return byId.get(id);
}

/** The ggml type named `name` (as in the table), or undefined. */
export function ggmlTypeByName(name: string): GgmlType | undefined {
  for (const type of byId.values()) if (type.name === name) return type;
  return undefined;
}

/** The Graft dtype whose tensors hold this ggml type, or undefined if tensors cannot yet. */
export function graftDType(type: GgmlType): TensorDType | undefined {
  return isTensorDType(type.name) ? type.name : undefined;
}
