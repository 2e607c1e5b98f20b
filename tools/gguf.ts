/**
 * `deno task gguf <command>`: GGUF files from the command line, like llama.cpp's gguf-dump.
 *
 *   info FILE [--json]                 metadata and tensor table (--json: one JSON document)
 *   dequant FILE TENSOR --out OUT.f32  one tensor's values as raw little-endian f32
 *   quantize IN OUT --type T [--pure] [--verbose]
 *                                      IN (f32/f16/bf16, or quantized: dequantized first) as a
 *                                      GGUF of type T, as llama-quantize (src/gguf/quantize.ts);
 *                                      progress on stderr when it is a terminal, then a summary
 *
 * @module
 */

import {
  ArgumentError,
  GGUFError,
  GGUFFile,
  type GGUFScalar,
  isQuantizeType,
  planQuantization,
  QUANTIZE_TYPES,
  quantizeGGUF,
  type TensorQuantization,
} from "../mod.ts";
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

function mib(bytes: number): string {
  return `${(bytes / (1 << 20)).toFixed(2)} MiB`;
}

function countsText(counts: Record<string, number>): string {
  return Object.entries(counts).sort((a, b) => b[1] - a[1]).map(([k, n]) => `${n} ${k}`).join(
    ", ",
  );
}

async function quantizeCommand(input: string, output: string, rest: string[]): Promise<void> {
  const at = rest.indexOf("--type");
  const given = at >= 0 ? rest[at + 1] : undefined;
  if (given === undefined) usage();
  // llama-quantize's upper-case names (Q4_K_M) are taken too.
  const type = QUANTIZE_TYPES.find((t) => t.toLowerCase() === given.toLowerCase()) ?? given;
  if (!isQuantizeType(type)) {
    throw new ArgumentError(
      `--type ${JSON.stringify(type)} is not a type Graft quantizes to; use one of ` +
        QUANTIZE_TYPES.join(", "),
    );
  }
  const pure = rest.includes("--pure");
  const verbose = rest.includes("--verbose");
  using file = GGUFFile.open(input);
  const plan = planQuantization(file.header, type, { pure });
  const requantized: Record<string, number> = {};
  for (const t of plan) {
    if (t.from.blockSize > 1 && t.to !== t.from) {
      requantized[t.from.name] = (requantized[t.from.name] ?? 0) + 1;
    }
  }
  if (Object.keys(requantized).length > 0) {
    console.error(
      `gguf quantize: ${input} holds quantized tensors (${countsText(requantized)}): they are ` +
        `dequantized to f32 and quantized again, which loses more than quantizing the original ` +
        `f32/f16 weights`,
    );
  }
  const tty = Deno.stderr.isTerminal();
  const encoder = new TextEncoder();
  const progress = (done: number, total: number, t: TensorQuantization): void => {
    const line = `[${String(done).padStart(String(total).length)}/${total}] ${t.name} ` +
      `${t.from.name} -> ${t.to.name}`;
    Deno.stderr.writeSync(encoder.encode(`\r\x1b[K${line}${done === total ? "\n" : ""}`));
  };
  const started = performance.now();
  const summary = await quantizeGGUF(file, output, {
    type,
    pure,
    onProgress: tty ? progress : undefined,
  });
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  if (verbose) {
    for (const t of summary.tensors) {
      console.log(
        `  ${t.name.padEnd(36)} [${t.dims.join(", ")}] ${t.from.name} -> ${t.to.name}` +
          (t.note ? `  (${t.note})` : ""),
      );
    }
  }
  console.log(
    `${input} -> ${output}: ${type}${pure ? " (pure)" : ""}, general.file_type ` +
      `${summary.fileType}, ${seconds} s`,
  );
  console.log(`tensors: ${countsText(summary.counts)} (${summary.tensors.length})`);
  if (summary.fallbacks > 0) {
    const moves: Record<string, number> = {};
    for (const t of summary.tensors) {
      const move = t.note?.match(/(\S+ -> \S+)$/)?.[1];
      if (move && t.note?.includes("is not a multiple")) moves[move] = (moves[move] ?? 0) + 1;
    }
    console.log(
      `fallbacks: ${summary.fallbacks} tensors whose ne[0] is not a multiple of the block ` +
        `size (${countsText(moves)})`,
    );
  }
  if (summary.requantized > 0) {
    console.log(`requantized: ${summary.requantized} tensors were dequantized first`);
  }
  console.log(
    `tensor data: ${mib(summary.dataBytesIn)} -> ${mib(summary.dataBytesOut)}; file: ` +
      `${summary.fileBytesIn} -> ${summary.fileBytesOut} bytes`,
  );
}

function usage(): never {
  console.error(
    "usage: deno task gguf info FILE [--json]\n" +
      "       deno task gguf dequant FILE TENSOR --out OUT.f32\n" +
      "       deno task gguf quantize IN OUT --type TYPE [--pure] [--verbose]\n" +
      `       (TYPE: ${QUANTIZE_TYPES.join(" ")})`,
  );
  Deno.exit(2);
}

if (import.meta.main) {
  const [command, path, ...rest] = Deno.args;
  if (!path || (command !== "info" && command !== "dequant" && command !== "quantize")) usage();
  try {
    if (command === "info") info(path, rest.includes("--json"));
    else if (command === "quantize") {
      const output = rest[0];
      if (!output || output.startsWith("--")) usage();
      await quantizeCommand(path, output, rest.slice(1));
    } else {
      const out = rest[rest.indexOf("--out") + 1];
      if (!rest[0] || rest[0] === "--out" || !rest.includes("--out") || !out) usage();
      dequant(path, rest[0], out);
    }
  } catch (error) {
    if (
      error instanceof GGUFError || error instanceof ArgumentError ||
      error instanceof Deno.errors.NotFound
    ) {
      console.error(`gguf: ${error.message}`);
      Deno.exit(1);
    }
    throw error;
  }
}
