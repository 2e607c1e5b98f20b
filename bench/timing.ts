/**
 * Timing for benchmarks that compare with a peer in the same run: the two are measured in
 * alternation, so a noisy neighbour slows both, and the best of several rounds is kept.
 * @module
 */

/** Seconds per call of `fn`: the best round mean over `rounds` rounds of at least `minMs`. */
export function secondsPerCall(fn: () => void, minMs = 150): number {
  fn(); // warm up caches, pages and branch predictors
  let calls = 1;
  for (;;) {
    const start = performance.now();
    for (let i = 0; i < calls; i++) fn();
    const elapsed = performance.now() - start;
    if (elapsed >= minMs) return elapsed / 1000 / calls;
    calls = Math.max(calls * 2, Math.ceil((calls * minMs) / Math.max(elapsed, 0.01)));
  }
}

/** Best-of-`rounds` seconds per call for each of two functions, measured alternately. */
export function compare(a: () => void, b: () => void, rounds = 3, minMs = 150): [number, number] {
  let bestA = Infinity, bestB = Infinity;
  for (let r = 0; r < rounds; r++) {
    bestA = Math.min(bestA, secondsPerCall(a, minMs));
    bestB = Math.min(bestB, secondsPerCall(b, minMs));
  }
  return [bestA, bestB];
}

/** Seconds per call of an async `fn`, like {@link secondsPerCall}. */
export async function secondsPerCallAsync(
  fn: () => Promise<unknown>,
  minMs = 150,
): Promise<number> {
  await fn();
  let calls = 1;
  for (;;) {
    const start = performance.now();
    for (let i = 0; i < calls; i++) await fn();
    const elapsed = performance.now() - start;
    if (elapsed >= minMs) return elapsed / 1000 / calls;
    calls = Math.max(calls * 2, Math.ceil((calls * minMs) / Math.max(elapsed, 0.01)));
  }
}

/** Best-of-`rounds` for two async functions measured alternately, like {@link compare}. */
export async function compareAsync(
  a: () => Promise<unknown>,
  b: () => Promise<unknown>,
  rounds = 3,
  minMs = 300,
): Promise<[number, number]> {
  let bestA = Infinity, bestB = Infinity;
  for (let r = 0; r < rounds; r++) {
    bestA = Math.min(bestA, await secondsPerCallAsync(a, minMs));
    bestB = Math.min(bestB, await secondsPerCallAsync(b, minMs));
  }
  return [bestA, bestB];
}
