/** One table per concept: the core's op, dtype and status tables agree with TypeScript's. */

import assert from "node:assert/strict";
import {
  CoreOp,
  DTypeError,
  liveAllocations,
  Op,
  opInfo,
  OPS,
  parseDType,
  rowBytes,
} from "../mod.ts";
import { coreOp, isViewOp } from "../internal.ts";
import { loadLibrary, nativeTables } from "../src/core/ffi.ts";
import { compareTables, expectedTables } from "../src/core/tables.ts";
import { assertNothingLive } from "./leaks.ts";
import { copyLoader } from "./child.ts";

const baseline = liveAllocations();

Deno.test("the library's tables agree with TypeScript's", () => {
  assert.deepEqual(compareTables(nativeTables(loadLibrary())), []);
});

Deno.test("a library whose tables differ is refused, naming each difference", () => {
  const native = expectedTables()
    .replace("op silu_mul 20\n", "op silu_mul 23\n")
    .replace("dtype f16 1 1 2 1 1\n", "dtype f16 1 1 4 1 1\n")
    .replace("status busy -9\n", "")
    .concat("op conv_3d 30\n");
  const problems = compareTables(native);
  assert.deepEqual(problems.sort(), [
    "dtype f16: library 1 1 4 1 1, TypeScript 1 1 2 1 1",
    "op conv_3d: only in the library (30)",
    "op silu_mul: library 23, TypeScript 20",
    "status busy: missing in the library (TypeScript: -9)",
  ]);
});

Deno.test({
  name: "loading a library whose tables differ throws LibraryLoadError (subprocess)",
  ignore: Deno.permissions.querySync({ name: "run" }).state !== "granted",
  fn: async () => {
    // The binding is copied with one table entry changed, as a stale build would disagree.
    const dir = await Deno.makeTempDir({ prefix: "graft-tables-" });
    try {
      const loader = await copyLoader(
        dir,
        (file, text) =>
          file === "op.ts"
            ? text.replace("  relu: 19,\n  silu_mul", "  relu: 24,\n  silu_mul")
            : text,
      );
      const lib = new URL("../zig-out/lib/libgraft.so", import.meta.url).pathname;
      const script = `
        import { loadLibrary } from ${JSON.stringify(loader)};
        try { loadLibrary({ path: ${JSON.stringify(lib)} }); console.log("loaded"); }
        catch (e) { console.log(e.name + ": " + e.message); }
      `;
      const output = await new Deno.Command(Deno.execPath(), {
        args: ["eval", "--ext=ts", script],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stdout = new TextDecoder().decode(output.stdout);
      assert.match(stdout, /^LibraryLoadError: .*op relu: library 19, TypeScript 24.*Rebuild/);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("the op table: views have no core op, every compute op one the core knows", () => {
  for (const [name, info] of Object.entries(OPS)) {
    if (info.core === null) continue;
    assert.ok(info.core in CoreOp, `${name} -> ${info.core}`);
  }
  assert.equal(coreOp(Op.cont), CoreOp.cpy);
  // cont's graph code used to be 20, the core's silu_mul.
  assert.ok(!Object.values(CoreOp).includes(Op.cont as never));
  assert.ok(isViewOp(Op.permute) && !isViewOp(Op.none) && !isViewOp(Op.add));
  assert.equal(opInfo(Op.mulMat).inPlace.safe, false);
});

Deno.test("dtype names are checked where they enter; rows are whole blocks", () => {
  assert.equal(parseDType("test", "f16"), "f16");
  assert.throws(
    () => parseDType("newTensor", "f64"),
    (e: unknown) => e instanceof DTypeError && /"f64".*f32, f16, i32/.test(e.message),
  );
  assert.equal(rowBytes("f16", 7), 14);
});

Deno.test("tables: nothing native is left alive", () => assertNothingLive(baseline));
