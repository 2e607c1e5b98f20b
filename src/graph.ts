/**
 * A compute graph: the tensors needed for some outputs, in topological order, split into leafs
 * (inputs: no op) and nodes (results of ops, views included), as ggml's forward expand does.
 * @module
 */

import { GraftError } from "./errors.ts";
import { Op, opName } from "./op.ts";
import { bufferId, type Tensor } from "./tensor.ts";

/**
 * A topologically ordered graph.
 *
 * @example
 * ```ts
 * import { add, Context, Graph, mul } from "../mod.ts";
 * const ctx = new Context();
 * const a = ctx.newTensor("f32", [4]);
 * const b = ctx.newTensor("f32", [4]);
 * const graph = Graph.build(mul(add(a, b), b));
 * console.log(graph.nodes.length, graph.leafs.length); // 2 2
 * ```
 */
export class Graph {
  /** Computed tensors (and views), each after all of its sources. */
  readonly nodes: readonly Tensor[];
  /** Inputs: tensors with no op. */
  readonly leafs: readonly Tensor[];
  /** The tensors the graph was built for. */
  readonly outputs: readonly Tensor[];
  /** A hash of the structure, shapes, strides and params: plans check it. */
  readonly hash: string;

  private constructor(nodes: Tensor[], leafs: Tensor[], outputs: Tensor[]) {
    // Frozen: a plan checks the graph once, when it is made.
    this.nodes = Object.freeze(nodes);
    this.leafs = Object.freeze(leafs);
    this.outputs = Object.freeze(outputs);
    this.hash = identityHash(nodes, leafs, false);
  }

  /**
   * The structure hash ({@link hash}) plus where every tensor lives now: the buffer object and
   * offset of each (unplaced: none). Two graphs with equal identities compute the same thing
   * in the same memory; a plan is valid for exactly one identity.
   */
  identity(): string {
    return identityHash(this.nodes, this.leafs, true);
  }

  /** Collects every tensor the outputs depend on, sources before consumers. */
  static build(...outputs: Tensor[]): Graph {
    return Graph.buildWithInputs(outputs, new Set());
  }

  /**
   * Like {@link Graph.build}, but the tensors in `inputs` are leafs even if some op computes
   * them: their sources are not visited. A scheduler uses this for the results of earlier splits.
   */
  static buildWithInputs(outputs: readonly Tensor[], inputs: ReadonlySet<Tensor>): Graph {
    if (outputs.length === 0) throw new GraftError("Graph.build: give at least one output");
    const nodes: Tensor[] = [];
    const leafs: Tensor[] = [];
    const visited = new Set<number>();
    // Iterative depth-first post-order: deep graphs must not overflow the JS stack.
    for (const output of outputs) {
      output.isOutput = true;
      const stack: { tensor: Tensor; next: number }[] = [{ tensor: output, next: 0 }];
      while (stack.length > 0) {
        const top = stack[stack.length - 1]!;
        if (top.next === 0 && visited.has(top.tensor.id)) {
          stack.pop();
          continue;
        }
        if (top.next < top.tensor.src.length && !inputs.has(top.tensor)) {
          const source = top.tensor.src[top.next++]!;
          if (!visited.has(source.id)) stack.push({ tensor: source, next: 0 });
          continue;
        }
        stack.pop();
        if (visited.has(top.tensor.id)) continue;
        visited.add(top.tensor.id);
        const isLeaf = top.tensor.op === Op.none || inputs.has(top.tensor);
        (isLeaf ? leafs : nodes).push(top.tensor);
      }
    }
    return new Graph(nodes, leafs, [...outputs]);
  }

  /** One line per leaf (index, name, shape) and per node (index, op, shape, named sources). */
  describe(): string {
    // Sources are named by their index and their own name, so a leaf reads as "leaf1 x", not
    // a bare index to look up elsewhere.
    const index = new Map<number, string>();
    const named = (t: Tensor, key: string): string => t.name ? `${key} ${t.name}` : key;
    this.leafs.forEach((t, i) => index.set(t.id, named(t, `leaf${i}`)));
    this.nodes.forEach((t, i) => index.set(t.id, named(t, `node${i}`)));
    const leafLines = this.leafs.map((t, i) =>
      `leaf${i} ${t.op === Op.none ? "input" : opName(t.op)} ${t.label}`
    );
    const nodeLines = this.nodes.map((t, i) =>
      `node${i} ${opName(t.op)} ${t.label} <- ${
        t.src.map((s) => index.get(s.id) ?? `(not in this graph) ${s.label}`).join(", ")
      }`
    );
    return [...leafLines, ...nodeLines].join("\n");
  }
}

const paramBits = new DataView(new ArrayBuffer(8));

/**
 * 128 bits of hash (four 32-bit multiply-xorshift lanes) over every tensor's op, exact dtype
 * name, shape, strides, view offset, exact param bits and sources by position; with
 * `placement`, also each tensor's buffer and offset.
 */
function identityHash(
  nodes: readonly Tensor[],
  leafs: readonly Tensor[],
  placement: boolean,
): string {
  const lanes = new Uint32Array([0x811c9dc5, 0x9e3779b9, 0x85ebca6b, 0xc2b2ae35]);
  const primes = [0x01000193, 0x5bd1e995, 0x27d4eb2f, 0x165667b1];
  const position = new Map<number, number>();
  // Numbers enter as two 32-bit words (high and low), so values up to 2^53 are exact.
  const word = (value: number): void => {
    for (let i = 0; i < 4; i++) {
      let h = Math.imul(lanes[i]! ^ value, primes[i]!);
      h ^= h >>> (13 + i);
      lanes[i] = h;
    }
  };
  const mix = (value: number): void => {
    word(Math.floor(value / 0x100000000) | 0);
    word(value | 0);
  };
  const add = (t: Tensor): void => {
    position.set(t.id, position.size);
    mix(t.op);
    mix(t.dtype.length);
    for (let i = 0; i < t.dtype.length; i++) mix(t.dtype.charCodeAt(i));
    for (let d = 0; d < 4; d++) {
      mix(t.ne[d]!);
      mix(t.nb[d]!);
    }
    mix(t.viewOffset);
    mix(t.params.length);
    for (const p of t.params) {
      paramBits.setFloat64(0, p);
      word(paramBits.getInt32(0));
      word(paramBits.getInt32(4));
    }
    mix(t.src.length);
    for (const s of t.src) mix(position.get(s.id) ?? -1);
    if (placement) {
      const where = t.placement;
      mix(where ? bufferId(where.buffer) : -1);
      mix(where ? where.offset : -1);
    }
  };
  leafs.forEach(add);
  nodes.forEach(add);
  return Array.from(lanes, (h) => h.toString(16).padStart(8, "0")).join("");
}
