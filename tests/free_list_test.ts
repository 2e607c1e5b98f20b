/**
 * The planner's allocator walk in TypeScript gives exactly the Zig allocator's offsets and
 * sizes, and planning runs in a Deno without --allow-ffi.
 */

import assert from "node:assert/strict";
import { liveAllocations } from "../mod.ts";
import { Allocator } from "../internal.ts";
import { FreeList } from "../src/alloc/free_list.ts";
import { greedyWalk, planGreedy } from "../src/alloc/greedy.ts";
import { analyzeLifetimes } from "../src/alloc/lifetimes.ts";
import { randomDag, seededRandom } from "./random_dag.ts";
import { assertNothingLive } from "./leaks.ts";

const baseline = liveAllocations();

Deno.test("random alloc/free sequences: the same offsets and sizes as the Zig allocator", () => {
  for (let seed = 1; seed <= 60; seed++) {
    const random = seededRandom(seed);
    const alignment = [16, 64, 256][seed % 3]!;
    const bounded = seed % 2 === 0;
    const size = 1 << 16;
    const ts = bounded ? new FreeList(size, alignment) : FreeList.measure(alignment);
    using zig = bounded
      ? new Allocator(size, { alignment, blocksMax: 4096 })
      : Allocator.measure({ alignment, blocksMax: 4096 });
    const live: [number, number][] = [];
    for (let step = 0; step < 400; step++) {
      if (live.length > 0 && random() < 0.45) {
        const [offset, bytes] = live.splice(Math.floor(random() * live.length), 1)[0]!;
        ts.free(offset, bytes);
        zig.free(offset, bytes);
      } else {
        const bytes = 1 + Math.floor(random() ** 3 * 4000);
        let expected: number | null = null;
        try {
          expected = zig.alloc(bytes);
        } catch {
          assert.throws(() => ts.alloc(bytes), `seed ${seed} step ${step}: both run out`);
          continue;
        }
        assert.equal(ts.alloc(bytes), expected, `seed ${seed} step ${step}: alloc(${bytes})`);
        live.push([expected, bytes]);
      }
      assert.equal(ts.sizeMax, zig.stats().sizeMax, `seed ${seed} step ${step}: size`);
      assert.equal(ts.freeBlocks, zig.stats().freeBlocks, `seed ${seed} step ${step}: blocks`);
    }
  }
});

Deno.test("random DAGs: the planner's TS walk places every block where the Zig walk does", () => {
  for (let seed = 1; seed <= 40; seed++) {
    const dag = randomDag({ seed, nodes: 20 + seed * 3 });
    const life = analyzeLifetimes([dag.graph], 64);
    const ts = planGreedy(life, 64);
    using zig = Allocator.measure({ alignment: 64, blocksMax: life.blockCount + 2 });
    const native = greedyWalk(life, zig);
    assert.deepEqual(Array.from(ts.offsets), Array.from(native.offsets), `seed ${seed}`);
    assert.equal(ts.size, native.size, `seed ${seed}`);
    assert.equal(ts.size, zig.stats().sizeMax, `seed ${seed}`);
  }
});

Deno.test({
  name: "planning and measuring run in a Deno without --allow-ffi",
  ignore: Deno.permissions.querySync({ name: "run" }).state !== "granted",
  fn: async () => {
    const mod = new URL("../mod.ts", import.meta.url).href;
    const file = await Deno.makeTempFile({ suffix: ".ts" });
    await Deno.writeTextFile(
      file,
      `import { Context, Graph, mulMat, planGraph, silu } from ${JSON.stringify(mod)};
       const ctx = new Context();
       const w = ctx.newTensor("f32", [64, 64]);
       let h = ctx.newTensor("f32", [64, 8]);
       for (let i = 0; i < 4; i++) h = silu(mulMat(w, h));
       const plan = planGraph(Graph.build(h), { strategy: "greedy" });
       const both = planGraph(Graph.build(h));
       console.log(JSON.stringify({ size: plan.size, blocks: plan.blocks.length, auto: both.size }));`,
    );
    try {
      const output = await new Deno.Command(Deno.execPath(), {
        args: ["run", "--no-prompt", file],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stderr = new TextDecoder().decode(output.stderr);
      assert.equal(output.code, 0, stderr);
      const result = JSON.parse(new TextDecoder().decode(output.stdout));
      assert.deepEqual(result, { size: 4096, blocks: 8, auto: 4096 });
    } finally {
      await Deno.remove(file);
    }
  },
});

Deno.test("free list: nothing native is left alive", () => assertNothingLive(baseline));
