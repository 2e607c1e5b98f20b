/**
 * The cases of tests/ggml_exact_ops_test.ts and bench/peers/ggml_exact_ops_record.ts: ggml's CPU
 * row-wise ops (rms_norm, rms_norm * weight, silu, swiglu, soft_max_ext with a mask, rope_ext) on
 * seeded inputs with SmolLM2-135M's shapes and a few odd row lengths, the same cases through
 * Graft's CPU backend, and the manifest that bench/peers/ggml_exact_ops.c reads to run them in
 * ggml. Graft must match ggml bit for bit here: llama.cpp quantizes activations to q8 before each
 * matmul, so one ulp anywhere can flip a quant and grow over 30 layers.
 * @module
 */

import {
  allocTensors,
  Context,
  CpuBackend,
  Graph,
  mul,
  rmsNorm,
  rope,
  type Shape,
  silu,
  type SimdLevel,
  softmax,
  type Tensor,
} from "../mod.ts";

/** A case built in Graft: its input tensors (in the manifest's order) and its output. */
export interface Built {
  inputs: Tensor[];
  output: Tensor;
}

/** One op on one input set. */
export interface ExactCase {
  name: string;
  /** The line of bench/peers/ggml_exact_ops.c's manifest (inputs `<name>.<k>.bin`). */
  manifest: string;
  /** Input arrays, in the manifest's order. */
  inputs: (Float32Array | Int32Array)[];
  /** Builds the case in Graft: its input tensors (same order) and its output. */
  build(ctx: Context): Built;
}

/** xorshift32 values in [-scale, scale), each exact in f32 (a 24-bit integer times a power of 2). */
export function seeded(count: number, seed: number, scale: number): Float32Array {
  let state = seed >>> 0 || 1;
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    out[i] = ((state >>> 8) * 2 ** -23 - 1) * scale;
  }
  return out;
}

/** silu's special inputs (exp overflow and underflow, zeros) at the start of each row. */
function withExtremes(x: Float32Array, rowLength: number): Float32Array {
  const special = [
    -100,
    100,
    -88.5,
    88.5,
    -89,
    89,
    0,
    -0,
    -103,
    104,
    -20,
    20,
    1e-30,
    -1e-30,
    -150,
    150,
    -1000,
    1000,
    -126,
    127,
    87.3,
    -87.3,
  ];
  for (let row = 0; row * rowLength < x.length; row++) {
    for (let i = 0; i < Math.min(special.length, rowLength); i++) {
      // Different rows put them in different lanes.
      const at = row * rowLength + ((i * 7 + row * 3) % rowLength);
      x[at] = special[i]!;
    }
  }
  return x;
}

function f32(ctx: Context, shape: Shape): Tensor {
  return ctx.newTensor("f32", shape);
}

/** Every case, in a fixed order. */
export function exactCases(): ExactCase[] {
  const cases: ExactCase[] = [];
  let seed = 1;
  const next = (): number => 0x9e3779b9 * seed++ >>> 0;
  for (const [ne0, ne1] of [[576, 7], [576, 1], [100, 3], [37, 2]] as const) {
    const eps = 1e-5;
    const x = seeded(ne0 * ne1, next(), 4);
    const w = seeded(ne0, next(), 2);
    const name = `rms_norm_${ne0}x${ne1}`;
    cases.push({
      name,
      manifest: `rms_norm ${name}.out ${ne0} ${ne1} ${eps} ${name}.0.bin`,
      inputs: [x],
      build(ctx): Built {
        const a = f32(ctx, [ne0, ne1]);
        return { inputs: [a], output: rmsNorm(a, eps) };
      },
    });
    const nameMul = `rms_norm_mul_${ne0}x${ne1}`;
    cases.push({
      name: nameMul,
      manifest:
        `rms_norm_mul ${nameMul}.out ${ne0} ${ne1} ${eps} ${nameMul}.0.bin ${nameMul}.1.bin`,
      inputs: [x, w],
      build(ctx): Built {
        const a = f32(ctx, [ne0, ne1]);
        const g = f32(ctx, [ne0]);
        return { inputs: [a, g], output: mul(rmsNorm(a, eps), g) };
      },
    });
  }
  for (const [ne0, ne1] of [[1536, 7], [1536, 1], [100, 3], [37, 2], [5, 3]] as const) {
    const x = withExtremes(seeded(ne0 * ne1, next(), 8), ne0);
    const g = seeded(ne0 * ne1, next(), 4);
    const name = `silu_${ne0}x${ne1}`;
    cases.push({
      name,
      manifest: `silu ${name}.out ${ne0} ${ne1} ${name}.0.bin`,
      inputs: [x],
      build(ctx): Built {
        const a = f32(ctx, [ne0, ne1]);
        return { inputs: [a], output: silu(a) };
      },
    });
    const nameMul = `swiglu_${ne0}x${ne1}`;
    cases.push({
      name: nameMul,
      manifest: `swiglu ${nameMul}.out ${ne0} ${ne1} ${nameMul}.0.bin ${nameMul}.1.bin`,
      inputs: [x, g],
      build(ctx): Built {
        const a = f32(ctx, [ne0, ne1]);
        const b = f32(ctx, [ne0, ne1]);
        return { inputs: [a, b], output: mul(silu(a), b) };
      },
    });
  }
  // Attention scores [n_kv, n_tokens, heads], a causal mask over the last n_tokens positions.
  for (
    const [ne0, ne1, ne2, scale, range] of [
      [256, 7, 9, 0.125, 16],
      [32, 7, 3, 0.125, 16],
      [64, 5, 3, 0.125, 16],
      [520, 7, 3, 0.125, 16],
      [37, 4, 2, 0.125, 16],
      [256, 3, 2, 1, 64], // differences past -87: subnormal and zero exps
    ] as const
  ) {
    const x = seeded(ne0 * ne1 * ne2, next(), range);
    const mask = new Float32Array(ne0 * ne1);
    for (let j = 0; j < ne1; j++) {
      for (let i = 0; i < ne0; i++) mask[j * ne0 + i] = i > ne0 - ne1 + j ? -Infinity : 0;
    }
    const name = `soft_max_${ne0}x${ne1}x${ne2}_${scale}`;
    cases.push({
      name,
      manifest: `soft_max ${name}.out ${ne0} ${ne1} ${ne2} ${scale} ${name}.0.bin ${name}.1.bin`,
      inputs: [x, mask],
      build(ctx): Built {
        const a = f32(ctx, [ne0, ne1, ne2]);
        const m = f32(ctx, [ne0, ne1]);
        return { inputs: [a, m], output: softmax(a, { mask: m, scale }) };
      },
    });
  }
  // SmolLM2's rope: head 64, all 64 dims, mode normal, base 100000; every position 0..8191.
  for (const [ne1, ne2] of [[3, 8192], [9, 7]] as const) {
    const x = seeded(64 * ne1 * ne2, next(), 4);
    const positions = ne2 === 8192
      ? Int32Array.from({ length: ne2 }, (_, i) => i)
      : Int32Array.from({ length: ne2 }, (_, i) => (i * 1237 + 11) % 8192);
    const name = `rope_64x${ne1}x${ne2}`;
    cases.push({
      name,
      manifest: `rope ${name}.out 64 ${ne1} ${ne2} 64 0 100000 ${name}.0.bin ${name}.1.bin`,
      inputs: [x, positions],
      build(ctx): Built {
        const a = f32(ctx, [64, ne1, ne2]);
        const p = ctx.newTensor("i32", [ne2]);
        return {
          inputs: [a, p],
          output: rope(a, p, { nDims: 64, mode: "normal", freqBase: 100000 }),
        };
      },
    });
  }
  return cases;
}

/** Graft's output of `c` on a CPU backend with these threads and kernel build. */
export function graftOutput(c: ExactCase, threads: number, simd: SimdLevel): Float32Array {
  using cpu = new CpuBackend({ threads, simd });
  const ctx = new Context();
  const { inputs, output } = c.build(ctx);
  const graph = Graph.build(output);
  using _memory = allocTensors(cpu, [...ctx.tensors, ...graph.leafs, ...graph.nodes]);
  inputs.forEach((t, k) => cpu.setTensor(t, c.inputs[k]!));
  cpu.graphCompute(graph);
  return cpu.getTensor(output) as Float32Array;
}

/** Writes each case's inputs and the manifest into `dir`. */
export function writeManifest(dir: string, cases: ExactCase[]): void {
  for (const c of cases) {
    c.inputs.forEach((data, k) => {
      Deno.writeFileSync(`${dir}/${c.name}.${k}.bin`, new Uint8Array(data.buffer));
    });
  }
  Deno.writeTextFileSync(`${dir}/manifest.txt`, cases.map((c) => c.manifest).join("\n") + "\n");
}

/** ggml's outputs of `cases`, computed by the ggml_exact_ops executable. */
export function ggmlOutputs(exe: string, cases: ExactCase[], threads = 1): Float32Array[] {
  const dir = Deno.makeTempDirSync();
  try {
    writeManifest(dir, cases);
    const run = new Deno.Command(exe, { args: [dir, String(threads)] }).outputSync();
    if (!run.success) {
      throw new Error(`${exe} failed: ${new TextDecoder().decode(run.stderr)}`);
    }
    return cases.map((c) => new Float32Array(Deno.readFileSync(`${dir}/${c.name}.out`).buffer));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}

/** SHA-256 of the output's bytes, hex. */
export async function digest(data: Float32Array): Promise<string> {
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", data.slice()));
  return Array.from(hash, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Elements whose bits differ, and the first such index (-1 when none). */
export function bitDiff(got: Float32Array, want: Float32Array): { count: number; first: number } {
  if (got.length !== want.length) return { count: Math.max(got.length, want.length), first: 0 };
  const a = new Uint32Array(got.buffer, got.byteOffset, got.length);
  const b = new Uint32Array(want.buffer, want.byteOffset, want.length);
  let count = 0;
  let first = -1;
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) {
      count++;
      if (first < 0) first = i;
    }
  }
  return { count, first };
}
