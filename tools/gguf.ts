/**
 * `deno task gguf <command>`: GGUF files from the command line, like llama.cpp's gguf-dump.
 *
 *   info FILE [--json]                 metadata and tensor table (--json: one JSON document)
 *   dequant FILE TENSOR --out OUT.f32  one tensor's values as raw little-endian f32
 *
 * @module
 */

import { GGUFError, GGUFFile, type GGUFScalar } from "../mod.ts";
import type { GGUFArray } from "../src/gguf/reader.ts";

function show(value: GGUFScalar | GGUFArray, limit = 8): string {
  if (typeof value === "object" && value !== null && "items" in value) {
    const shown = value.items.slice(0, limit).map((v) => show(v, limit));
    const more = value.items.length > limit ? `, … (${value.items.length} items)` : "";
    return `[${shown.join(", ")}${more}]`;
  }
  return typeof value === "string" ? JSON.stringify(value) : String(value);
}

function json(value: GGUFScalar | GGUFArray): unknown {
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "object" && value !== null && "items" in value) {
    return { itemType: value.itemType, items: value.items.map(json) };
  }
  return value;
}

function info(path: string, asJson: boolean): void {
  using file = GGUFFile.open(path);
  const h = file.header;
  if (asJson) {
    console.log(JSON.stringify({
      version: h.version,
      alignment: h.alignment,
      dataOffset: h.dataOffset,
      metadata: h.metadata.map((m) => ({ key: m.key, type: m.type, value: json(m.value) })),
      tensors: h.tensors.map((t) => ({
        name: t.name,
        type: t.type.name,
        dims: t.dims,
        offset: t.offset,
        nbytes: t.nbytes,
      })),
    }));
    return;
  }
  console.log(
    `${path}: GGUF v${h.version}, ${h.metadata.length} metadata entries, ` +
      `${h.tensors.length} tensors, data at byte ${h.dataOffset} (alignment ${h.alignment})`,
  );
  for (const m of h.metadata) {
    console.log(`  ${m.key.padEnd(40)} ${m.type.padEnd(6)} ${show(m.value)}`);
  }
  const counts = new Map<string, number>();
  for (const t of h.tensors) counts.set(t.type.name, (counts.get(t.type.name) ?? 0) + 1);
  console.log(`tensors (${[...counts].map(([k, n]) => `${n} ${k}`).join(", ")}):`);
  for (const t of h.tensors) {
    console.log(
      `  ${t.name.padEnd(36)} ${t.type.name.padEnd(6)} [${t.dims.join(", ")}] @${t.offset}`,
    );
  }
}

function dequant(path: string, name: string, out: string): void {
  using file = GGUFFile.open(path);
  const values = file.dequantizeTensor(file.tensor(name));
  Deno.writeFileSync(out, new Uint8Array(values.buffer, values.byteOffset, values.byteLength));
  console.log(`${name}: ${values.length} values (${file.tensor(name).type.name}) -> ${out}`);
}

function usage(): never {
  console.error(
    "usage: deno task gguf info FILE [--json]\n       deno task gguf dequant FILE TENSOR --out OUT.f32",
  );
  Deno.exit(2);
}

if (import.meta.main) {
  const [command, path, ...rest] = Deno.args;
  if (!path || (command !== "info" && command !== "dequant")) usage();
  try {
    if (command === "info") info(path, rest.includes("--json"));
    else {
      const out = rest[rest.indexOf("--out") + 1];
      if (!rest[0] || rest[0] === "--out" || !rest.includes("--out") || !out) usage();
      dequant(path, rest[0], out);
    }
  } catch (error) {
    if (error instanceof GGUFError || error instanceof Deno.errors.NotFound) {
      console.error(`gguf: ${error.message}`);
      Deno.exit(1);
    }
    throw error;
  }
}
