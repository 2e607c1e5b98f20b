/**
 * Operation codes. Compute ops share their numbers with the Zig core (`zig/node.zig`, `Op`);
 * view ops never reach the core, they only describe memory.
 * @module
 */

/** Every op a tensor can be the result of. */
export const Op = {
  none: 0,
  add: 1,
  sub: 2,
  mul: 3,
  div: 4,
  scale: 5,
  sqr: 6,
  sqrt: 7,
  sum: 8,
  mean: 9,
  repeat: 10,
  mulMat: 11,
  cpy: 12,
  getRows: 13,
  norm: 14,
  rmsNorm: 15,
  softmax: 16,
  gelu: 17,
  silu: 18,
  relu: 19,
  cont: 20,
  view: 100,
  reshape: 101,
  permute: 102,
  transpose: 103,
} as const;

/** An op code. */
export type OpCode = typeof Op[keyof typeof Op];

const names = new Map<number, string>(Object.entries(Op).map(([name, code]) => [code, name]));

/** The op's name, as used in error messages and reports. */
export function opName(op: OpCode): string {
  return names.get(op) ?? `op${op}`;
}

/** Ops whose result shares its source's memory instead of owning memory. */
export function isViewOp(op: OpCode): boolean {
  return op >= Op.view;
}

/** The core op that computes `op` (cont is a cpy into fresh memory). */
export function coreOp(op: OpCode): number {
  return op === Op.cont ? Op.cpy : op;
}
