/**
 * The WGSL exact-arithmetic helpers (src/backend/webgpu/wgsl_exact.ts) on the shared WebGPU
 * device against the same operations computed in float64 here: `fma_exact` is a * b + c rounded
 * once on seeded operands, many of them chosen so that c cancels most of a * b (where an unfused
 * product or a compiler's algebra shows); `two_sum` and `two_prod` give the exact error terms;
 * the float-float total of a row and its quotients round as the f64 ones do; `glibc_sinf`,
 * `glibc_cosf` and `expf_libc` equal the C library's (through FFI, where it is glibc's
 * libm.so.6), the sines and cosines on every SmolLM2 rope angle and more, expf over its whole
 * finite range: by construction they can differ from glibc only where glibc's double result lies
 * within about 2^-44 of a midpoint between two floats, and none does. Skipped, visibly, when
 * Deno finds no adapter.
 */

import assert from "node:assert/strict";
import { closeSharedWebGpuTest, sharedWebGpu } from "./gpu.ts";
import { EXACT_WGSL, GGML_EXP_WGSL } from "../src/backend/webgpu/wgsl_exact.ts";
import { SINCOSF_WGSL } from "../src/backend/webgpu/wgsl_sincosf.ts";
import { PARAMS_WGSL, UNIFORM_SLOT_BYTES } from "../src/backend/webgpu/wgsl_common.ts";
import { fmaF32Exact, Rng } from "./reference.ts";
import { seeded } from "./ggml_exact_ops.ts";

const gpu = await sharedWebGpu();

/** Runs `body` (WGSL statements over `i`, inputs `a`, `b`, `c`, output `o`) for `n` values of i. */
async function run(
  body: string,
  inputs: [Float32Array<ArrayBuffer>, Float32Array<ArrayBuffer>, Float32Array<ArrayBuffer>],
  outputs: number,
): Promise<Float32Array> {
  const device = gpu!.device;
  const n = inputs[0].length;
  const code = `${PARAMS_WGSL}
${EXACT_WGSL}
${GGML_EXP_WGSL}
${SINCOSF_WGSL}
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> c: array<f32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let i = g.x;
  if (i >= arrayLength(&a)) {
    return;
  }
  // Every binding is used, so that the automatic layout has them all.
  _ = b[0];
  _ = c[0];
${body}
}`;
  const module = device.createShaderModule({ code });
  const pipeline = device.createComputePipeline({
    layout: "auto",
    compute: { module, entryPoint: "main" },
  });
  const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;
  const params = device.createBuffer({
    size: UNIFORM_SLOT_BYTES,
    usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
  });
  const sources = inputs.map((x) => {
    const buffer = device.createBuffer({ size: x.byteLength, usage });
    device.queue.writeBuffer(buffer, 0, x);
    return buffer;
  });
  const size = n * outputs * 4;
  const out = device.createBuffer({
    size,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC,
  });
  const read = device.createBuffer({
    size,
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
  });
  const bindGroup = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [params, ...sources, out].map((buffer, binding) => ({
      binding,
      resource: { buffer },
    })),
  });
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.ceil(n / 64));
  pass.end();
  encoder.copyBufferToBuffer(out, 0, read, 0, size);
  device.queue.submit([encoder.finish()]);
  await read.mapAsync(GPUMapMode.READ);
  const result = new Float32Array(read.getMappedRange().slice(0));
  read.unmap();
  for (const buffer of [params, ...sources, out, read]) buffer.destroy();
  return result;
}

const N = 1 << 16;
/** a * b + c rounded once (the reference `fma_exact` must give). */
const fmaRef = fmaF32Exact;

/** Seeded operands over 16 binades; `cancel` makes c nearly -a*b. */
function operands(
  seed: number,
): [Float32Array<ArrayBuffer>, Float32Array<ArrayBuffer>, Float32Array<ArrayBuffer>] {
  const rng = new Rng(seed);
  const value = (): number =>
    Math.fround((rng.next() * 2 - 1) * 2 ** Math.floor(rng.next() * 16 - 8));
  const a = Float32Array.from({ length: N }, value);
  const b = Float32Array.from({ length: N }, value);
  const c = Float32Array.from({ length: N }, (_, i) => {
    const p = a[i]! * b[i]!;
    if (i % 3 === 0) return Math.fround(-p * (1 + (rng.next() - 0.5) * 2 ** -16));
    if (i % 3 === 1) return Math.fround(p * 2 ** -(10 + (i % 20)));
    return value();
  });
  return [a, b, c];
}

Deno.test({
  name: "webgpu exact: fma_exact rounds a * b + c once",
  ignore: gpu === null,
  async fn(): Promise<void> {
    const [a, b, c] = operands(7);
    const got = await run("  o[i] = fma_exact(a[i], b[i], c[i]);", [a, b, c], 1);
    let differ = 0;
    let first = "";
    for (let i = 0; i < N; i++) {
      const want = fmaRef(a[i]!, b[i]!, c[i]!);
      if (Object.is(got[i], want) || (got[i] === 0 && want === 0)) continue;
      differ++;
      first ||= `fma(${a[i]}, ${b[i]}, ${c[i]}) = ${got[i]}, want ${want}`;
    }
    assert.equal(differ, 0, `${differ}/${N} differ; first ${first}`);
  },
});

Deno.test({
  name: "webgpu exact: two_sum and two_prod give exact error terms",
  ignore: gpu === null,
  async fn(): Promise<void> {
    const [a, b, c] = operands(11);
    const got = await run(
      `  let s = two_sum(a[i], c[i]);
  let p = two_prod(a[i], b[i]);
  o[4u * i] = s.x;
  o[4u * i + 1u] = s.y;
  o[4u * i + 2u] = p.x;
  o[4u * i + 3u] = p.y;`,
      [a, b, c],
      4,
    );
    for (let i = 0; i < N; i++) {
      const [s, e, p, q] = got.subarray(4 * i, 4 * i + 4);
      assert.equal(s, Math.fround(a[i]! + c[i]!), `two_sum(${a[i]}, ${c[i]}).s`);
      // s + e is the exact sum (exact in f64: two floats of 24 bits within 2^30 of each other).
      assert.equal(s! + e!, a[i]! + c[i]!, `two_sum(${a[i]}, ${c[i]}) = ${s} + ${e}`);
      assert.equal(p, Math.fround(a[i]! * b[i]!), `two_prod(${a[i]}, ${b[i]}).p`);
      assert.equal(p! + q!, a[i]! * b[i]!, `two_prod(${a[i]}, ${b[i]}) = ${p} + ${q}`);
    }
  },
});

Deno.test({
  name: "webgpu exact: float-float totals round as f64 ones (sum / n, 1 / sum)",
  ignore: gpu === null,
  async fn(): Promise<void> {
    // Each thread sums 96 values from a[i] on (wrapping), squared as rms_norm's: x * x in f32.
    const rng = new Rng(3);
    const a = Float32Array.from({ length: 4096 }, () => Math.fround((rng.next() * 2 - 1) * 4));
    const got = await run(
      `  var acc = vec2<f32>(0.0, 0.0);
  for (var j = 0u; j < 96u; j = j + 1u) {
    let x = a[(i + j) % arrayLength(&a)];
    acc = ff_add(acc, x * x);
  }
  o[2u * i] = ff_div_f32(acc, 96.0);
  o[2u * i + 1u] = ff_recip_f32(acc);`,
      [a, a, a],
      2,
    );
    let differ = 0;
    for (let i = 0; i < a.length; i++) {
      let sum = 0;
      for (let j = 0; j < 96; j++) {
        const x = a[(i + j) % a.length]!;
        sum += Math.fround(x * x);
      }
      if (got[2 * i] !== Math.fround(sum / 96)) differ++;
      if (got[2 * i + 1] !== Math.fround(1 / sum)) differ++;
    }
    // Equal but where the f64 result lies within about 2^-40 of a halfway point (none here).
    assert.equal(differ, 0, `${differ} of ${2 * a.length} roundings differ`);
  },
});

const LIBM_SYMBOLS = {
  expf: { parameters: ["f32"], result: "f32" },
  sinf: { parameters: ["f32"], result: "f32" },
  cosf: { parameters: ["f32"], result: "f32" },
  powf: { parameters: ["f32", "f32"], result: "f32" },
} as const;

/** glibc's expf, sinf, cosf and powf, or null where the C library is not glibc's libm.so.6. */
function glibcLibm(): Deno.DynamicLibrary<typeof LIBM_SYMBOLS> | null {
  try {
    return Deno.dlopen("libm.so.6", LIBM_SYMBOLS);
  } catch {
    return null;
  }
}

Deno.test({
  name: "webgpu exact: glibc_sinf and glibc_cosf equal the C library's (rope's angles and more)",
  ignore: gpu === null,
  async fn(): Promise<void> {
    const libm = glibcLibm();
    if (libm === null) {
      console.log("skipped: no glibc libm.so.6 to compare with");
      return;
    }
    try {
      // Every angle of SmolLM2's rope (head 64, base 100000) at positions 0..8191, as ggml's
      // recurrence makes them, then seeded values over many binades, both signs.
      const scale = libm.symbols.powf(100000, Math.fround(-2 / 64));
      const angles: number[] = [];
      for (let p = 0; p < 8192; p++) {
        let theta = Math.fround(p);
        for (let k = 0; k < 32; k++) {
          angles.push(theta);
          theta = Math.fround(theta * scale);
        }
      }
      const rng = new Rng(5);
      for (let i = 0; i < 1 << 16; i++) {
        const magnitude = 2 ** (rng.next() * 60 - 20);
        angles.push(Math.fround((rng.next() < 0.5 ? -1 : 1) * magnitude));
      }
      const a = Float32Array.from(angles);
      const got = await run(
        `  o[2u * i] = glibc_sinf(a[i]);
  o[2u * i + 1u] = glibc_cosf(a[i]);`,
        [a, a, a],
        2,
      );
      let differ = 0;
      let first = "";
      for (let i = 0; i < a.length; i++) {
        const want = [libm.symbols.sinf(a[i]!), libm.symbols.cosf(a[i]!)];
        for (let k = 0; k < 2; k++) {
          if (Object.is(got[2 * i + k], want[k])) continue;
          differ++;
          first ||= `${k ? "cos" : "sin"}(${a[i]}) = ${got[2 * i + k]}, glibc ${want[k]}`;
        }
      }
      assert.equal(differ, 0, `${differ}/${2 * a.length} differ; first ${first}`);
    } finally {
      libm.close();
    }
  },
});

Deno.test({
  name: "webgpu exact: expf_libc is glibc's expf",
  ignore: gpu === null,
  async fn(): Promise<void> {
    const libm = glibcLibm();
    if (libm === null) {
      console.log("skipped: no glibc libm.so.6 to compare with");
      return;
    }
    try {
      // Over the whole finite range (overflow, subnormal results, glibc's underflow cut-offs),
      // then densely where softmax and silu tails take it.
      const wide = seeded(1 << 17, 5, 110);
      const near = seeded(1 << 17, 6, 20);
      const x = new Float32Array(wide.length + near.length + 8);
      x.set(wide);
      x.set(near, wide.length);
      x.set(
        [0, -0, 88.72283172607422, 88.72284, -103.97207641601562, -103.2789, -103.28, -150],
        x.length - 8,
      );
      const got = await run("  o[i] = expf_libc(a[i]);", [x, x, x], 1);
      let differ = 0;
      let first = "";
      for (let i = 0; i < x.length; i++) {
        const want = libm.symbols.expf(x[i]!);
        if (Object.is(got[i], want)) continue;
        differ++;
        first ||= `expf(${x[i]}) = ${got[i]}, glibc's ${want}`;
      }
      assert.equal(differ, 0, `${differ}/${x.length} differ; first ${first}`);
    } finally {
      libm.close();
    }
  },
});

closeSharedWebGpuTest();
