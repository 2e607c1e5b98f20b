/**
 * Runs a benchmark side in a process of its own under bench/peers/rss.py, so every side's peak
 * RSS is measured the same way: getrusage(RUSAGE_CHILDREN).ru_maxrss of the child after it exits.
 * @module
 */

const RSS_PY = new URL("./peers/rss.py", import.meta.url).pathname;

/** What one measured run gave: its stdout, stderr, exit status and peak RSS in bytes. */
export interface MeasuredRun {
  stdout: string;
  stderr: string;
  success: boolean;
  code: number;
  /** ru_maxrss (KiB on Linux) in bytes; NaN if the wrapper did not report it. */
  peakRssBytes: number;
}

/** Runs `cmd args` under rss.py and collects its output and peak RSS. */
export async function runWithPeakRss(
  cmd: string,
  args: string[],
  env?: Record<string, string>,
): Promise<MeasuredRun> {
  const out = await new Deno.Command("python3", { args: [RSS_PY, cmd, ...args], env }).output();
  const stderr = new TextDecoder().decode(out.stderr);
  const peak = /peak_rss_kb=(\d+)\s*$/.exec(stderr);
  return {
    stdout: new TextDecoder().decode(out.stdout),
    stderr: peak ? stderr.slice(0, peak.index) : stderr,
    success: out.success,
    code: out.code,
    peakRssBytes: peak ? Number(peak[1]) * 1024 : NaN,
  };
}
