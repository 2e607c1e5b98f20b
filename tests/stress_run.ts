/**
 * The lifecycle stress: rounds of asynchronous computes while other tasks dispose buffers,
 * plans and backends and allocate and free buffers. Every call either completes correctly or
 * throws a typed error; no signal, no hang; nothing native is left alive. Run by
 * tests/stress_test.ts in-process (fast build) and as `deno run` with GRAFT_SAFE=1 (safe build).
 */

import {
  add,
  allocTensors,
  type BackendBuffer,
  Context,
  CpuBackend,
  type CpuPlan,
  GraftError,
  Graph,
  liveAllocations,
  mulMat,
  type Tensor,
} from "../mod.ts";

/** What a run did, for the test to check. */
export interface StressReport {
  rounds: number;
  computesOk: number;
  computesRefused: number;
  disposalsRefused: number;
  handleCycles: number;
  live: ReturnType<typeof liveAllocations>;
}

/** A small deterministic PRNG (mulberry32), so a failing run can be repeated. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Job {
  backend: CpuBackend;
  buffer: BackendBuffer;
  plan: CpuPlan;
  y: Tensor;
  expected: number;
}

const N = 48;

function makeJob(backend: CpuBackend, value: number): Job {
  const ctx = new Context();
  const w = ctx.newTensor("f32", [N, N], "w");
  const x = ctx.newTensor("f32", [N, 4], "x");
  const b = ctx.newTensor("f32", [N, 4], "b");
  const y = add(mulMat(w, x), b);
  const graph = Graph.build(y);
  const buffer = allocTensors(backend, [w, x, b, ...graph.nodes]);
  try {
    backend.setTensor(w, new Float32Array(N * N).fill(1));
    backend.setTensor(x, new Float32Array(N * 4).fill(value));
    backend.setTensor(b, new Float32Array(N * 4).fill(1));
    const plan = backend.graphPlanCreate(graph);
    return { backend, buffer, plan, y, expected: N * value + 1 };
  } catch (error) {
    buffer.dispose();
    throw error;
  }
}

/** A call that may be refused with a typed error; anything else is a failure. */
function attempt(action: () => void): boolean {
  try {
    action();
    return true;
  } catch (error) {
    if (!(error instanceof GraftError)) throw error;
    return false;
  }
}

/** Runs the stress for `rounds` rounds; throws on any untyped error or wrong result. */
export async function stress(rounds: number, seed = 1): Promise<StressReport> {
  const next = random(seed);
  const pick = <T>(items: readonly T[]): T | undefined =>
    items.length ? items[Math.floor(next() * items.length)] : undefined;
  const backends: CpuBackend[] = [];
  const jobs: Job[] = [];
  const inFlight: Promise<void>[] = [];
  const report = { computesOk: 0, computesRefused: 0, disposalsRefused: 0, handleCycles: 0 };

  for (let round = 0; round < rounds; round++) {
    const live = backends.filter((b) => !b.disposed);
    if (live.length === 0 || (live.length < 2 && next() < 0.3)) {
      const made = new CpuBackend({ threads: 1 + Math.floor(next() * 2) });
      backends.push(made);
      live.push(made);
    }
    const backend = pick(live);
    if (backend && jobs.length < 6 && next() < 0.6) {
      attempt(() => void jobs.push(makeJob(backend, 1 + (round % 5))));
    }
    // Start computes, each checking its own result when it completes.
    for (let i = 0; i < 2; i++) {
      const job = pick(jobs);
      if (!job) break;
      let started: Promise<void>;
      try {
        started = job.backend.graphPlanComputeAsync(job.plan);
      } catch (error) {
        if (!(error instanceof GraftError)) throw error;
        report.computesRefused++;
        continue;
      }
      inFlight.push(started.then(
        (): Promise<void> | undefined => {
          report.computesOk++;
          if (!job.buffer.disposed && !job.backend.disposed) {
            // Read through the queue: behind every compute queued before it.
            return job.backend.getTensorAsync(job.y).then((out) => {
              if (out[0] !== job.expected) {
                throw new Error(`round ${round}: got ${out[0]}, expected ${job.expected}`);
              }
            }, (error) => {
              if (!(error instanceof GraftError)) throw error;
            });
          }
          return undefined;
        },
        (error) => {
          if (!(error instanceof GraftError)) throw error;
          report.computesRefused++;
        },
      ));
    }
    // Other tasks dispose things while those computes run.
    const victim = pick(jobs);
    const roll = next();
    if (victim && roll < 0.15) {
      if (!attempt(() => victim.buffer.dispose())) report.disposalsRefused++;
    } else if (victim && roll < 0.3) {
      if (!attempt(() => victim.plan.dispose())) report.disposalsRefused++;
    } else if (roll < 0.35) {
      const doomed = pick(backends);
      if (doomed && !attempt(() => doomed.dispose())) report.disposalsRefused++;
    }
    // Handle churn: buffers allocated and freed around the computes.
    if (backend && !backend.disposed) {
      for (let i = 0; i < 12; i++) {
        if (attempt(() => backend.allocBuffer(64 + i).dispose())) report.handleCycles++;
      }
    }
    // Forget what is fully gone; let queued work run now and then.
    for (let i = jobs.length - 1; i >= 0; i--) {
      const job = jobs[i]!;
      if (job.buffer.disposed && job.plan.disposed) jobs.splice(i, 1);
    }
    if (round % 8 === 0) await new Promise((resolve) => setTimeout(resolve, 0));
  }

  await Promise.all(inFlight);
  for (const backend of backends) if (!backend.disposed) await backend.synchronize();
  for (const job of jobs) {
    if (!job.plan.disposed) job.plan.dispose();
    if (!job.buffer.disposed) job.buffer.dispose();
  }
  for (const backend of backends) if (!backend.disposed) backend.dispose();
  return { rounds, ...report, live: liveAllocations() };
}

if (import.meta.main) {
  const rounds = Number(Deno.args[0] ?? 1000);
  console.log(JSON.stringify(await stress(rounds, Number(Deno.args[1] ?? 1))));
}
