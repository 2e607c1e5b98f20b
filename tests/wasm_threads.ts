/**
 * Child process of tests/wasm_threads_test.ts (its own process, so that it loads the threaded
 * WebAssembly core whatever other test files loaded): computes a matrix product with odd sizes
 * (several cache blocks along k, a partial micro-tile) and the demo's transformer block on a
 * WebAssembly backend of 3 threads (Web Workers on a shared memory) and of 1 thread on the same
 * core, and prints one JSON line: the core build, the thread counts, whether the outputs are
 * bitwise equal across thread counts (the kernels split output tiles only), the products' max
 * error against a float64 reference, the block's against its float64 reference, and the live
 * allocations after disposing everything. The process must then exit by itself: the last
 * threaded backend's dispose stops the workers.
 */

import {
  allocTensors,
  Context,
  type CoreBackend,
  Graph,
  mulMat,
  planGraph,
  WasmBackend,
} from "../mod.ts";
import { blockData, buildBlock, randomValues, setBlockInputs } from "../demo/block.ts";
import { referenceBlock, relativeError } from "../demo/block_reference.ts";

const THREADS = 3;
/** m, n, k of the product: past one KC block (256) along k, several MR panels, odd. */
const [M, N, K] = [301, 67, 517];
const config = { dim: 64, heads: 4, seq: 9, ffn: 176, eps: 1e-5 };

function product(backend: CoreBackend, a: Float32Array, b: Float32Array): Float32Array {
  const ctx = new Context();
  const ta = ctx.newTensor("f32", [K, M]);
  const tb = ctx.newTensor("f32", [K, N]);
  const c = mulMat(ta, tb);
  const graph = Graph.build(c);
  using _memory = allocTensors(backend, [ta, tb, ...graph.nodes]);
  backend.setTensor(ta, a);
  backend.setTensor(tb, b);
  using plan = backend.graphPlanCreate(graph);
  backend.graphPlanCompute(plan);
  return backend.getTensor(c) as Float32Array;
}

function block(backend: CoreBackend): Float32Array {
  const built = buildBlock(config);
  using _weights = allocTensors(backend, built.ctx.tensors);
  const memory = planGraph(built.graph, { alignment: backend.alignment });
  using _activations = memory.allocate(backend);
  setBlockInputs(built, blockData(config));
  using plan = backend.graphPlanCreate(built.graph, { prepackWeights: true });
  backend.graphPlanCompute(plan);
  return backend.getTensor(built.output) as Float32Array;
}

function maxRelativeError(actual: Float32Array, a: Float32Array, b: Float32Array): number {
  let worst = 0;
  for (let j = 0; j < N; j++) {
    for (let i = 0; i < M; i++) {
      let sum = 0;
      let magnitude = 0;
      for (let k = 0; k < K; k++) {
        sum += a[i * K + k]! * b[j * K + k]!;
        magnitude += Math.abs(a[i * K + k]! * b[j * K + k]!);
      }
      worst = Math.max(worst, Math.abs(actual[j * M + i]! - sum) / magnitude);
    }
  }
  return worst;
}

async function main(): Promise<void> {
  const a = randomValues(M * K, 11);
  const b = randomValues(N * K, 12);
  let threads: number[];
  let sameBits: boolean;
  let productError: number;
  let blockError: number;
  {
    using many = await WasmBackend.create({ threads: THREADS });
    using one = await WasmBackend.create({ threads: 1 });
    threads = [many.threads, one.threads];
    const productMany = product(many, a, b);
    const blockMany = block(many);
    sameBits = productMany.every((v, i) => Object.is(v, product(one, a, b)[i])) &&
      blockMany.every((v, i) => Object.is(v, block(one)[i]));
    productError = maxRelativeError(productMany, a, b);
    blockError = relativeError(Array.from(blockMany), referenceBlock(config, blockData(config)));
  }
  const counts = WasmBackend.liveAllocations();
  const live = counts.buffers + counts.pools + counts.plans + counts.allocators;
  console.log(JSON.stringify({
    build: WasmBackend.coreBuild(),
    threads,
    sameBits,
    productError,
    blockError,
    live,
  }));
}

await main();
