/**
 * The check every backend's `getTensorIntoAsync` passes (backend_interface_test: CPU and WASM;
 * webgpu_test: WebGPU; rpc_backend_test covers the RPC backend against a real server): a
 * computed tensor read into the caller's array, again after a new compute into the same array,
 * as raw bytes too; an array of the wrong size or dtype refused, naming the tensor.
 */

import assert from "node:assert/strict";
import {
  add,
  allocTensors,
  ArgumentError,
  type Backend,
  Context,
  DTypeError,
  Graph,
} from "../mod.ts";

/** Reads `a + b` into one array over three computes on `backend`. */
export async function checkReadInto(backend: Backend): Promise<void> {
  const ctx = new Context();
  const a = ctx.newTensor("f32", [5, 3], "a");
  const b = ctx.newTensor("f32", [5, 3], "b");
  const sum = add(a, b);
  const graph = Graph.build(sum);
  using _memory = allocTensors(backend, [a, b, ...graph.nodes]);
  const into = new Float32Array(15);
  backend.setTensor(b, new Float32Array(15).map((_, i) => i));
  for (let step = 1; step <= 3; step++) {
    backend.setTensor(a, new Float32Array(15).fill(step * 100));
    backend.graphCompute(graph);
    await backend.getTensorIntoAsync(sum, into);
    assert.deepEqual([...into], Array.from({ length: 15 }, (_, i) => step * 100 + i), `${step}`);
  }
  const bytes = new Uint8Array(60);
  await backend.getTensorIntoAsync(sum, bytes);
  assert.deepEqual(new Float32Array(bytes.buffer), into);
  await assert.rejects(
    () => backend.getTensorIntoAsync(sum, new Float32Array(14)),
    (e: Error) => e instanceof ArgumentError && /60 bytes, the array 56/.test(e.message),
  );
  await assert.rejects(() => backend.getTensorIntoAsync(sum, new Int32Array(15)), DTypeError);
  await backend.synchronize();
}
