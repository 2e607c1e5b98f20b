/**
 * Small graphs that RPC tests compute on several backends (the CPU, Graft's server, ggml's) and
 * compare: a case builds its graph in a fresh context from a seeded generator, and `runCase`
 * places, computes and reads it back on one backend.
 * @module
 */

import {
  allocTensors,
  type Backend,
  Context,
  Graph,
  type Tensor,
  type TensorData,
} from "../mod.ts";
import { Rng } from "./reference.ts";

/** A graph to compute on each backend, with the error its comparison allows. */
export interface BackendCase {
  name: string;
  build: (ctx: Context, rng: Rng) => { data: Map<Tensor, ArrayBufferView>; out: Tensor };
  /** NMSE bound between backends (0: bitwise). */
  nmse: number;
}

/** An f32 input of shape `ne`, filled from `rng` and recorded in `data`. */
export function f32Input(
  ctx: Context,
  rng: Rng,
  data: Map<Tensor, ArrayBufferView>,
  ne: number[],
): Tensor {
  const t = ctx.newTensor("f32", ne as [number]);
  data.set(t, rng.f32(t.nelements));
  return t;
}

/** Builds `c` (seeded by its name), computes it on `backend` and reads its output. */
export async function runCase(backend: Backend, c: BackendCase): Promise<TensorData> {
  const ctx = new Context();
  const { data, out } = c.build(ctx, new Rng(c.name.length * 7919));
  const graph = Graph.build(out);
  const unplaced = [...ctx.tensors, ...graph.nodes].filter((t) => !t.viewSource && !t.placement);
  using _b = allocTensors(backend, unplaced);
  for (const [t, values] of data) await backend.setTensorAsync(t, values);
  backend.graphCompute(graph);
  const result = await backend.getTensorAsync(out);
  await backend.synchronize();
  return result;
}
