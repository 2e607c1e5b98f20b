/**
 * 1,000 rounds of asynchronous computes while other tasks dispose buffers, plans and backends
 * and allocate and free buffers (past 10,000 handle cycles): in this process on the fast
 * build, and in a child process on the safe (bounds-checked) build. See tests/stress_run.ts.
 */

import assert from "node:assert/strict";
import { liveAllocations } from "../mod.ts";
import { assertNothingLive, NOTHING_LIVE } from "./leaks.ts";
import { stress, type StressReport } from "./stress_run.ts";

// Loads the library outside any test, so its resource is not reported as a test's leak.
const baseline = liveAllocations();

function checkReport(report: StressReport, build: string): void {
  assert.equal(report.rounds, 1000);
  assert.ok(report.handleCycles > 10_000, `${build}: ${report.handleCycles} handle cycles`);
  assert.ok(report.computesOk > 100, `${build}: only ${report.computesOk} computes completed`);
  assert.deepEqual(report.live, NOTHING_LIVE, `${build}: native objects left alive`);
}

Deno.test("stress, fast build: every call completes correctly or throws a typed error", async () => {
  checkReport(await stress(1000, 1), "fast");
});

Deno.test({
  name: "stress, safe build (child process): no signal, no hang, nothing left alive",
  ignore: Deno.permissions.querySync({ name: "run" }).state !== "granted",
  fn: async () => {
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", new URL("./stress_run.ts", import.meta.url).pathname, "1000", "2"],
      env: { GRAFT_SAFE: "1" },
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    // A hang is a failure, not a stuck suite: the child gets two minutes.
    const timer = setTimeout(() => child.kill("SIGKILL"), 120_000);
    const output = await child.output();
    clearTimeout(timer);
    const stderr = new TextDecoder().decode(output.stderr);
    assert.equal(output.signal, null, `killed by ${output.signal}: ${stderr}`);
    assert.equal(output.code, 0, stderr);
    checkReport(JSON.parse(new TextDecoder().decode(output.stdout)) as StressReport, "safe");
  },
});

Deno.test("stress: nothing native is left alive", () => assertNothingLive(baseline));
