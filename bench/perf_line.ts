/**
 * The `perf <case> graft=<v><unit> <peer>=<v><unit> ratio=<graft/peer>` line every benchmark
 * prints, and the results it collects for bench/out/*.json.
 * @module
 */

/** One compared case. */
export interface PerfResult {
  case: string;
  graft: number;
  peer: string;
  peerValue: number;
  unit: string;
  /** graft / peer: above 1 is better for rates, below 1 is better for times. */
  ratio: number;
}

/** Prints one case's line and keeps its result in `results`. */
export class PerfReport {
  readonly results: PerfResult[] = [];

  /** Prints `perf name graft=… peer=… ratio=…` and records it. */
  report(name: string, graft: number, peer: string, peerValue: number, unit: string): void {
    const ratio = graft / peerValue;
    this.results.push({ case: name, graft, peer, peerValue, unit, ratio });
    const fmt = (v: number): string => v >= 100 ? v.toFixed(1) : v.toFixed(3);
    console.log(
      `perf ${name} graft=${fmt(graft)}${unit} ${peer}=${fmt(peerValue)}${unit} ratio=${
        ratio.toFixed(3)
      }`,
    );
  }
}
