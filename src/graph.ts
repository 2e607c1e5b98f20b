/**
 * A compute graph: the tensors needed for some outputs, in topological order, split into leafs
 * (inputs: no op) and nodes (results of ops, views included), as ggml's forward expand does.
 * @module
 */

import { GraftError } from "./errors.ts";
import { Op, opName } from "./op.ts";
import type { Tensor } from "./tensor.ts";

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
    this.nodes = nodes;
    this.leafs = leafs;
    this.outputs = outputs;
    this.hash = structureHash(nodes, leafs);
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

  /** One line per node: index, op, shape, sources. */
  describe(): string {
    const index = new Map<number, string>();
    this.leafs.forEach((t, i) => index.set(t.id, `leaf${i}`));
    this.nodes.forEach((t, i) => index.set(t.id, `node${i}`));
    return this.nodes.map((t, i) =>
      `node${i} ${opName(t.op)} ${t.label} <- ${t.src.map((s) => index.get(s.id)).join(", ")}`
    ).join("\n");
  }
}

function structureHash(nodes: readonly Tensor[], leafs: readonly Tensor[]): string {
  // FNV-1a over 32-bit words, two lanes for 64 bits of hash.
  let h1 = 0x811c9dc5, h2 = 0x01000193 ^ 0x5bd1e995;
  const position = new Map<number, number>();
  const mix = (value: number): void => {
    h1 = Math.imul(h1 ^ (value | 0), 0x01000193);
    h2 = Math.imul(h2 ^ ((value / 0x100000000) | 0) ^ (value | 0), 0x5bd1e995);
    h2 ^= h2 >>> 15;
  };
  const add = (t: Tensor): void => {
    position.set(t.id, position.size);
    mix(t.op);
    mix(t.dtype.charCodeAt(1));
    for (let d = 0; d < 4; d++) {
      mix(t.ne[d]!);
      mix(t.nb[d]!);
    }
    mix(t.viewOffset);
    for (const p of t.params) mix(Math.fround(p) * 1e6);
    for (const s of t.src) mix(position.get(s.id) ?? -1);
  };
  leafs.forEach(add);
  nodes.forEach(add);
  return (h1 >>> 0).toString(16).padStart(8, "0") + (h2 >>> 0).toString(16).padStart(8, "0");
}
