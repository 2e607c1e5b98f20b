/**
 * Generates `docs/ops.md`, the op x dtype x backend support matrix, from the op table's
 * `support` column (`src/op.ts`): `deno task docs:ops`. `tests/op_suite_test.ts` checks that
 * the file is up to date, and the op suite checks the declarations themselves.
 * @module
 */

import { type DType, DTYPES } from "../src/dtype.ts";
import { type OpInfo, OPS } from "../src/op.ts";

/** The dtypes that get a column: those some compute op declares on some backend. */
function columns(): DType[] {
  const used = new Set<DType>();
  for (const info of Object.values(OPS) as OpInfo[]) {
    if (info.core === null) continue;
    for (const d of [...info.support.cpu, ...info.support.webgpu]) used.add(d);
  }
  return (Object.keys(DTYPES) as DType[]).filter((d) => used.has(d));
}

/** The text of `docs/ops.md`. */
export function opsDoc(): string {
  const dtypes = columns();
  const lines = [
    "# Op support matrix",
    "",
    "Generated from the op table (`src/op.ts`, the `support` column) by `deno task docs:ops`;",
    "do not edit. Each cell lists the backends that compute the op with that result dtype",
    "(`cpu`, `webgpu`); `tests/op_suite_test.ts` and `tests/op_suite_webgpu_test.ts` verify every",
    "declaration both ways. Views and inputs (`none`, `view`, `reshape`, `permute`, `transpose`)",
    "compute nothing and take every dtype.",
    "",
    `| op | code | core op | in place | ${dtypes.join(" | ")} |`,
    `| --- | ---: | --- | --- | ${dtypes.map(() => "---").join(" | ")} |`,
  ];
  for (const [name, info] of Object.entries(OPS) as [string, OpInfo][]) {
    if (info.core === null) continue;
    const cells = dtypes.map((d) => {
      const on = (["cpu", "webgpu"] as const).filter((b) => info.support[b].includes(d));
      return on.length ? on.join(", ") : "";
    });
    const inPlace = info.inPlace.safe ? "yes" : "no";
    lines.push(`| ${name} | ${info.code} | ${info.core} | ${inPlace} | ${cells.join(" | ")} |`);
  }
  return lines.join("\n") + "\n";
}

if (import.meta.main) {
  await Deno.writeTextFile(new URL("../docs/ops.md", import.meta.url), opsDoc());
  console.log("wrote docs/ops.md");
}
