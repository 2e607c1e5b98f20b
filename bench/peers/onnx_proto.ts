/**
 * A minimal ONNX protobuf writer: just the messages needed to describe a float32 graph of
 * standard ops, so the benchmark can hand onnxruntime the same transformer block Graft runs.
 * Field numbers are from onnx.proto (ModelProto, GraphProto, NodeProto, TensorProto, ...).
 * @module
 */

class Writer {
  readonly bytes: number[] = [];
  varint(value: number): this {
    // Negative int64 values are ten-byte two's complement varints.
    let v = BigInt.asUintN(64, BigInt(value));
    while (v >= 0x80n) {
      this.bytes.push(Number(v & 0x7fn) | 0x80);
      v >>= 7n;
    }
    this.bytes.push(Number(v));
    return this;
  }
  tag(field: number, wire: number): this {
    return this.varint(field * 8 + wire);
  }
  int(field: number, value: number): this {
    return this.tag(field, 0).varint(value);
  }
  float(field: number, value: number): this {
    this.tag(field, 5);
    const b = new Uint8Array(new Float32Array([value]).buffer);
    this.bytes.push(...b);
    return this;
  }
  bytesField(field: number, data: Uint8Array): this {
    this.tag(field, 2).varint(data.length);
    for (let i = 0; i < data.length; i++) this.bytes.push(data[i]!);
    return this;
  }
  string(field: number, value: string): this {
    return this.bytesField(field, new TextEncoder().encode(value));
  }
  message(field: number, inner: Writer): this {
    return this.bytesField(field, inner.finish());
  }
  finish(): Uint8Array {
    return Uint8Array.from(this.bytes);
  }
}

/** An ONNX node attribute. */
export type Attribute = { name: string; int: number } | { name: string; float: number } | {
  name: string;
  ints: number[];
};

/** An ONNX node: op type, input and output names, attributes. */
export interface OnnxNode {
  op: string;
  inputs: string[];
  outputs: string[];
  attributes?: Attribute[];
}

/** A float32 or int64 constant. */
export interface Initializer {
  name: string;
  dims: number[];
  data: Float32Array | BigInt64Array;
}

const FLOAT = 1, INT64 = 7;

function attribute(a: Attribute): Writer {
  const w = new Writer().string(1, a.name);
  if ("int" in a) return w.int(3, a.int).int(20, 2);
  if ("float" in a) return w.float(2, a.float).int(20, 1);
  for (const v of a.ints) w.int(8, v);
  return w.int(20, 7);
}

function valueInfo(name: string, dims: number[]): Writer {
  const shape = new Writer();
  for (const d of dims) shape.message(1, new Writer().int(1, d));
  const tensorType = new Writer().int(1, FLOAT).message(2, shape);
  return new Writer().string(1, name).message(2, new Writer().message(1, tensorType));
}

/** Encodes a model with one float32 input and output (opset 17). */
export function encodeModel(
  nodes: OnnxNode[],
  initializers: Initializer[],
  input: { name: string; dims: number[] },
  output: { name: string; dims: number[] },
): Uint8Array {
  const graph = new Writer();
  nodes.forEach((n, i) => {
    const w = new Writer();
    for (const x of n.inputs) w.string(1, x);
    for (const y of n.outputs) w.string(2, y);
    w.string(3, `n${i}`).string(4, n.op);
    for (const a of n.attributes ?? []) w.message(5, attribute(a));
    graph.message(1, w);
  });
  graph.string(2, "graft_block");
  for (const init of initializers) {
    const t = new Writer();
    for (const d of init.dims) t.int(1, d);
    t.int(2, init.data instanceof Float32Array ? FLOAT : INT64).string(8, init.name);
    t.bytesField(9, new Uint8Array(init.data.buffer, init.data.byteOffset, init.data.byteLength));
    graph.message(5, t);
  }
  graph.message(11, valueInfo(input.name, input.dims));
  graph.message(12, valueInfo(output.name, output.dims));
  return new Writer()
    .int(1, 8) // ir_version
    .message(8, new Writer().string(1, "").int(2, 17)) // opset_import
    .message(7, graph)
    .finish();
}
