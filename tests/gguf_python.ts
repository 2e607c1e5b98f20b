/**
 * llama.cpp's own Python package (PyPI gguf==0.19.0) as an independent reader of GGUF files:
 * its view of a file (tools/gguf_dump.py), Graft's view in the same shape, and its dequantized
 * values (tools/gguf_dequant_hashes.py).
 */

import { MemorySource, readGGUF } from "../mod.ts";

/** Runs a tool of tools/ on `paths`; its stdout lines, or null without python3 or gguf. */
async function runTool(script: string, paths: readonly string[]): Promise<string[] | null> {
  try {
    const output = await new Deno.Command("python3", {
      args: [new URL(`../tools/${script}`, import.meta.url).pathname, ...paths],
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (!output.success) {
      const stderr = new TextDecoder().decode(output.stderr);
      if (/No module named 'gguf'|PackageNotFoundError/.test(stderr)) return null;
      throw new Error(stderr);
    }
    return new TextDecoder().decode(output.stdout).trim().split("\n");
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return null;
    throw error;
  }
}

/** The gguf package's view of a file, or null when python3 or the package is missing. */
export async function pythonView(path: string): Promise<unknown | null> {
  return (await pythonViews([path]))?.[0] ?? null;
}

/** The gguf package's views of several files (one python3 run), or null as pythonView. */
export async function pythonViews(paths: readonly string[]): Promise<unknown[] | null> {
  return (await runTool("gguf_dump.py", paths))?.map((line) => JSON.parse(line)) ?? null;
}

/** Graft's view in the dump's shape: integers as strings, type names as the package's. */
export function graftView(bytes: Uint8Array): unknown {
  const header = readGGUF(new MemorySource(bytes));
  const plain = (v: unknown): unknown =>
    typeof v === "bigint" || (typeof v === "number" && Number.isInteger(v) && !Number.isNaN(v))
      ? String(v)
      : (v as { items?: unknown[] })?.items
      ? (v as { items: unknown[] }).items.map(plain)
      : v;
  const typeName: Record<string, string> = {
    u8: "UINT8",
    i8: "INT8",
    u16: "UINT16",
    i16: "INT16",
    u32: "UINT32",
    i32: "INT32",
    f32: "FLOAT32",
    bool: "BOOL",
    string: "STRING",
    array: "ARRAY",
    u64: "UINT64",
    i64: "INT64",
    f64: "FLOAT64",
  };
  return {
    fields: header.metadata.map((m) => {
      const items = (m.value as { items?: unknown[]; itemType?: string }).items;
      const types = m.type === "array" && items && items.length > 0
        ? ["ARRAY", typeName[(m.value as { itemType: string }).itemType]!]
        : [typeName[m.type]!];
      const isFloat = m.type === "f32" || m.type === "f64";
      return { key: m.key, types, value: isFloat ? m.value : plain(m.value) };
    }),
    tensors: header.tensors.map((t) => ({
      name: t.name,
      type: t.type.name.toUpperCase(),
      shape: [...t.dims],
      data_offset: header.dataOffset + t.offset,
      n_bytes: t.nbytes,
    })),
  };
}

/**
 * The gguf package's sha256 of each tensor dequantized to f32, per file (one python3 run), or
 * null as pythonView.
 */
export async function pythonDequantHashes(
  paths: readonly string[],
): Promise<Record<string, string>[] | null> {
  return (await runTool("gguf_dequant_hashes.py", paths))?.map((line) => JSON.parse(line)) ??
    null;
}
