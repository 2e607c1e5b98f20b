/**
 * Rope scaling in the llama model, as llama.cpp 0.3.36 runs a llama GGUF: the frequency factors
 * of `rope_freqs.weight` (Llama 3.1+) in every block, YaRN (`rope.scaling.type` "yarn" with its
 * factor, original context and `rope.scaling.attn_factor`), LongRoPE's long and short factors,
 * the factors on every backend of a layer split, and bad metadata as typed errors. Graft's
 * logits are held to the f64 reference (tests/llm_reference.ts, written from ggml's formulas)
 * with llm_test.ts's tolerance for Graft's f32 paths (NMSE <= 5e-6, |error| <= 0.05), on tiny
 * f32 models with an f32 cache (so the error is the rope's f32 rounding, not quantization), and
 * to a tighter bound (TIGHT_NMSE) that such models allow; each case also shows that the reference
 * without the feature is outside that tolerance.
 */

import assert from "node:assert/strict";
import { CpuBackend } from "../src/backend/cpu/backend.ts";
import { GGUFFile } from "../src/gguf/file.ts";
import type { GGUFMetadataEntry } from "../src/gguf/reader.ts";
import { type LlamaHParams, ModelError, readLlamaHParams } from "../src/llm/hparams.ts";
import { LLM } from "../src/llm/llm.ts";
import { loadReferenceModel, referenceLogits, type ReferenceModel } from "./llm_reference.ts";
import { f32Weight, HD, type TinyWeight, tinyWeights, V, writeTiny } from "./tiny_llama.ts";

const IDS = [3, 9, 0, 7, 3, 1, 10, 4, 4, 2, 8, 6, 5, 0];
/** Frequency factors, one per rotated pair (HD / 2 = 4). */
const FACTORS = [2.5, 1.7, 4, 13];

interface Errors {
  nmse: number;
  max: number;
}

function errors(got: ArrayLike<number>, want: readonly Float64Array[]): Errors {
  let max = 0, num = 0, den = 0;
  want.forEach((row, t) => {
    for (let i = 0; i < V; i++) {
      const d = got[t * V + i]! - row[i]!;
      max = Math.max(max, Math.abs(d));
      num += d * d;
      den += row[i]! * row[i]!;
    }
  });
  return { nmse: num / den, max };
}

/**
 * On these f32 models Graft measures NMSE ~1e-13 (f32 rounding only); this bound leaves four
 * orders of magnitude and still tells apart every wrong variant below (the nearest, YaRN at the
 * trained context instead of the original one, is 2.3e-4).
 */
const TIGHT_NMSE = 1e-9;

function withinTolerance(e: Errors): boolean {
  return e.nmse <= 5e-6 && e.max <= 0.05;
}

async function withFile<T>(
  metadata: readonly GGUFMetadataEntry[],
  extra: readonly TinyWeight[],
  fn: (path: string) => Promise<T>,
): Promise<T> {
  const dir = await Deno.makeTempDir();
  try {
    const weights = tinyWeights(23, { allF32: true });
    for (const w of extra) weights.set(w.name, w);
    const path = `${dir}/tiny.gguf`;
    await writeTiny(path, weights, metadata);
    return await fn(path);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function hparamsOf(path: string): LlamaHParams {
  using file = GGUFFile.open(path);
  return readLlamaHParams(file.header);
}

/**
 * Graft's logits of every position of IDS (in batches of 5, so later batches read the cache)
 * against the reference; the reference `without` a feature must be far off.
 */
async function checkAgainstReference(
  path: string,
  without: (m: ReferenceModel) => ReferenceModel,
  options: { nCtx?: number; rpc?: CpuBackend[] } = {},
): Promise<void> {
  const nCtx = options.nCtx ?? 64;
  const model = await loadReferenceModel(path, { nCtx });
  using llm = await LLM.load(path, {
    threads: 1,
    nCtx,
    nBatch: 5,
    cacheType: "f32",
    ...(options.rpc ? { rpc: options.rpc } : {}),
  });
  const got = await llm.eval(IDS, { allLogits: true });
  const e = errors(got, referenceLogits(model, IDS));
  assert.ok(withinTolerance(e), `against the reference: NMSE ${e.nmse}, max ${e.max}`);
  assert.ok(e.nmse <= TIGHT_NMSE, `against the reference: NMSE ${e.nmse} > ${TIGHT_NMSE}`);
  const wrong = errors(got, referenceLogits(without(model), IDS));
  console.log(
    `NMSE ${e.nmse.toExponential(2)}, max ${e.max.toExponential(2)}; without the feature ` +
      `NMSE ${wrong.nmse.toExponential(2)}, max ${wrong.max.toExponential(2)}`,
  );
  assert.ok(
    !withinTolerance(wrong) && wrong.nmse > 10 * 5e-6,
    `the reference without the feature is near too (NMSE ${wrong.nmse}): the test cannot tell`,
  );
}

const u32 = (key: string, value: number): GGUFMetadataEntry => ({ key, type: "u32", value });
const f32 = (key: string, value: number): GGUFMetadataEntry => ({ key, type: "f32", value });
const str = (key: string, value: string): GGUFMetadataEntry => ({ key, type: "string", value });

Deno.test("llm rope: rope_freqs.weight divides every block's angles, as the reference", async () => {
  await withFile([], [f32Weight("rope_freqs.weight", FACTORS)], async (path) => {
    const hp = hparamsOf(path);
    assert.equal(hp.ropeScalingType, "linear"); // llama.cpp's default type
    assert.deepEqual(
      [hp.ropeFreqScale, hp.ropeExtFactor, hp.ropeAttnFactor, hp.nCtxOrigYarn],
      [1, 0, 1, 64],
    );
    await checkAgainstReference(path, (m) => ({ ...m, ropeFreqFactors: null }));
  });
});

Deno.test("llm rope: YaRN (factor, original context, attn_factor) as the reference", async () => {
  const metadata = [
    str("llama.rope.scaling.type", "yarn"),
    f32("llama.rope.scaling.factor", 4),
    // With 8 rotated dims and base 10000, YaRN's ramp spans pairs 0 to 3 (0 to 2 at the
    // trained context, 64).
    u32("llama.rope.scaling.original_context_length", 1000),
    f32("llama.rope.scaling.attn_factor", 0.875),
    // Read by other architectures only: a llama model ignores them, as in llama.cpp.
    f32("llama.rope.scaling.yarn_beta_fast", 8),
    f32("llama.rope.scaling.yarn_log_multiplier", 0.1),
  ];
  await withFile(metadata, [f32Weight("rope_freqs.weight", FACTORS)], async (path) => {
    const hp = hparamsOf(path);
    assert.equal(hp.ropeScalingType, "yarn");
    assert.deepEqual(
      [hp.ropeFreqScale, hp.ropeExtFactor, hp.ropeBetaFast, hp.ropeBetaSlow, hp.nCtxOrigYarn],
      [0.25, 1, 32, 1, 1000],
    );
    // YaRN's mscale is divided out of attn_factor (ggml multiplies it back): 0.875 remains.
    assert.ok(Math.abs(hp.ropeAttnFactor - 0.875) < 1e-6, `attn factor ${hp.ropeAttnFactor}`);
    const reference = await loadReferenceModel(path);
    assert.ok(Math.abs(reference.ropeMagnitude - 0.875 * (1 + 0.1 * Math.log(4))) < 1e-12);
    // Without YaRN's mix and magnitude (plain linear scaling), or with another original context.
    await checkAgainstReference(path, (m) => ({ ...m, ropeExtFactor: 0, ropeMagnitude: 0.875 }));
    await checkAgainstReference(path, (m) => ({ ...m, ropeCtxOrig: 64 }));
  });
});

Deno.test("llm rope: linear scaling, the old rope.scale_linear key, type none", async () => {
  await withFile([f32("llama.rope.scale_linear", 2)], [], async (path) => {
    assert.equal(hparamsOf(path).ropeFreqScale, 0.5);
    await checkAgainstReference(path, (m) => ({ ...m, ropeFreqScale: 1 }));
  });
  const none = [str("llama.rope.scaling.type", "none"), f32("llama.rope.scaling.factor", 2)];
  await withFile(none, [], async (path) => {
    assert.equal(hparamsOf(path).ropeFreqScale, 1);
    assert.equal((await loadReferenceModel(path)).ropeFreqScale, 1);
  });
});

Deno.test("llm rope: LongRoPE takes the long factors past the original context", async () => {
  const metadata = [
    str("llama.rope.scaling.type", "longrope"),
    u32("llama.rope.scaling.original_context_length", 256),
  ];
  const extra = [
    f32Weight("rope_factors_short.weight", FACTORS),
    f32Weight("rope_factors_long.weight", [1.25, 3, 7, 30]),
  ];
  await withFile(metadata, extra, async (path) => {
    // nCtx 64 pads to 256 (as llama_context pads it): not past 256, the short factors.
    const short = await loadReferenceModel(path, { nCtx: 64 });
    assert.deepEqual([...short.ropeFreqFactors!], [...Float32Array.from(FACTORS)]);
    const long = await loadReferenceModel(path, { nCtx: 300 });
    assert.deepEqual([...long.ropeFreqFactors!], [1.25, 3, 7, 30]);
    await checkAgainstReference(path, (m) => ({ ...m, ropeFreqFactors: long.ropeFreqFactors }), {
      nCtx: 64,
    });
    await checkAgainstReference(path, (m) => ({ ...m, ropeFreqFactors: short.ropeFreqFactors }), {
      nCtx: 300,
    });
  });
});

Deno.test("llm rope: split over backends, each stage's blocks read their own copy", async () => {
  const metadata = [str("llama.rope.scaling.type", "yarn"), f32("llama.rope.scaling.factor", 4)];
  await withFile(metadata, [f32Weight("rope_freqs.weight", FACTORS)], async (path) => {
    using first = new CpuBackend({ threads: 1 });
    using second = new CpuBackend({ threads: 1 });
    await checkAgainstReference(path, (m) => ({ ...m, ropeFreqFactors: null }), {
      rpc: [first, second],
    });
  });
});

Deno.test("llm rope: bad scaling metadata and factor tensors are ModelErrors naming them", async () => {
  const bad: [GGUFMetadataEntry[], RegExp][] = [
    [
      [str("llama.rope.scaling.type", "dynamic")],
      /llama\.rope\.scaling\.type = "dynamic" is not a rope scaling type/,
    ],
    [[f32("llama.rope.scaling.factor", -2)], /llama\.rope\.scaling\.factor = -2 is negative/],
    [[f32("llama.rope.scaling.factor", NaN)], /llama\.rope\.scaling\.factor = NaN/],
    [[f32("llama.rope.scaling.attn_factor", Infinity)], /rope\.scaling\.attn_factor = Infinity/],
    [[str("llama.rope.scaling.factor", "4")], /llama\.rope\.scaling\.factor is not a number/],
    [
      [{ key: "llama.rope.scaling.original_context_length", type: "u64", value: 2n ** 32n }],
      /original_context_length = 4294967296 is not an integer in \[0, 2\^31\)/,
    ],
  ];
  for (const [metadata, message] of bad) {
    await withFile(metadata, [], async (path) => {
      assert.throws(
        () => hparamsOf(path),
        (e) => e instanceof ModelError && message.test(e.message),
      );
      await assert.rejects(() => LLM.load(path), ModelError);
    });
  }
  const half: TinyWeight = {
    ...f32Weight("rope_freqs.weight", FACTORS),
    type: "f16",
    bytes: new Uint8Array(Float16Array.from(FACTORS).buffer),
  };
  const tensors: [TinyWeight, RegExp][] = [
    [
      f32Weight("rope_freqs.weight", [1, 2, 3]),
      /rope_freqs\.weight is \[3, 1, 1, 1\], expected \[4\]/,
    ],
    [half, /rope_freqs\.weight is f16; rope frequency factors must be f32/],
  ];
  for (const [weight, message] of tensors) {
    await withFile([], [weight], async (path) => {
      await assert.rejects(
        () => LLM.load(path, { nCtx: 16 }),
        (e) => e instanceof ModelError && message.test(e.message),
      );
    });
  }
  assert.equal(HD / 2, FACTORS.length);
});
