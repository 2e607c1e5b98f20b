/**
 * mulMat of f16 weights (S0) by f32 S1 into f32 D with ggml-cpu's AVX2 arithmetic, bit for bit
 * (the CPU backend's `zig/kernels/gemm.zig` f16 dot path, which equals ggml's AVX2 build): the
 * kernel `mulMat(a, b, { ggml: true })` gets for f16 `a`, llama's attention products K·q and
 * V·softmax over the KV cache above all. Like ggml, it first rounds S1 to f16 (round to nearest
 * even), then takes per element of D one of ggml's two orders, chosen per product as ggml's
 * `mul_mat` does (`f16Order`):
 * - `"tinyBlas"` (llamafile_sgemm's tinyBLAS<8>: it takes the product when N >= 2, K % 8 == 0
 *   and M % 4 == 0): one 8-lane accumulator, lane l summing the products of elements
 *   k = 8s + l over s in order, then tinyBLAS's hsum: t_j = lane j + lane j+4, then
 *   (t0 + t2) + (t1 + t3).
 * - `"vecDot"` (ggml_vec_dot_f16, every other product, one column above all): four 8-lane
 *   accumulators over steps of 32 elements (accumulator i, lane l sums element 32s + 8i + l),
 *   reduced as GGML_F32x8_REDUCE ((x0 + x2) + (x1 + x3) lane by lane, then t_j = lane j +
 *   lane j+4, then (t0 + t1) + (t2 + t3)), widened to f64, the K % 32 leftover products added
 *   one by one in f64, the total rounded to f32.
 *
 * ggml fuses each multiply-add (vfmadd). No fused operation is needed here: a product of two
 * f16 values has at most 22 significant bits and lies far inside f32's exponent range, so
 * `a * b` is exact in f32 and `acc + a * b` rounds once, as the fused one does (lavapipe's
 * `fma()` is not fused, and need not be). The f64 total of the leftovers is a float-float
 * (`ff_add`, about 48 bits, EXACT_WGSL): its f32 rounding is the f64 one's except within about
 * 2^-40 (relative) of a point halfway between two floats.
 *
 * A workgroup computes a tile of D (one element per thread for ggml_vec_dot_f16, whose 32 lanes
 * fill the registers, 2 x 2 for tinyBLAS), with K in chunks of 32 (one ggml step) staged in
 * workgroup memory: S0 widened and S1 rounded to f16 once per workgroup.
 * Loads go through the tensors' strides (the KV cache's views), but the elements of a row must
 * be adjacent, as on the CPU, whose dot path this is (`f16ExactTakes`).
 * @module
 */

import type { Tensor } from "../../tensor.ts";
import { type Kernel, matmulGrid } from "./kernels.ts";
import { asksGgml } from "./shader_matmul_exact.ts";
import { matmulPrologue, PARAMS_WGSL, tensorBindings } from "./wgsl_common.ts";
import { EXACT_WGSL } from "./wgsl_exact.ts";

/** ggml's order for an f16 product: llamafile's tinyBLAS or ggml_vec_dot_f16 per element. */
export type F16Order = "tinyBlas" | "vecDot";

/** Lanes of ggml's AVX2 vectors (GGML_F16_EPR, tinyBLAS's KN). */
const LANES = 8;
/** GGML_F16_STEP: elements per step of ggml_vec_dot_f16's main loop (4 vectors). */
const STEP = 4 * LANES;

/**
 * The order ggml's AVX2 `mul_mat` takes for f16 S0 [K, M] times S1 [K, N] (per batch):
 * llamafile_sgemm's tinyBLAS when it accepts the shape, else ggml_vec_dot_f16.
 */
export function f16Order(m: number, n: number, k: number): F16Order {
  return n >= 2 && k % LANES === 0 && m % 4 === 0 ? "tinyBlas" : "vecDot";
}

/**
 * Whether `node` (a mulMat) takes this kernel: f16 weights, ggml's arithmetic asked for
 * (`asksGgml`: params[1] 1, or 2, which f16 weights compute as 1), and adjacent elements in the
 * rows of both sources (the CPU's dot path; other strides take its GEMM, whose order is not
 * ggml's).
 */
export function f16ExactTakes(node: Tensor): boolean {
  const [a, b] = node.src as [Tensor, Tensor];
  return a.dtype === "f16" && asksGgml(node) && a.nb[0] === 2 && b.nb[0] === 4;
}

/**
 * How a workgroup splits its tile of D: `threads` (along M, along N), each computing a `block`
 * of elements (rows `threads[0]` apart, columns `threads[1]` apart). tinyBLAS's single
 * accumulator per element leaves registers for 2 x 2 elements per thread; ggml_vec_dot_f16's
 * four take one element's worth.
 */
interface Layout {
  readonly threads: readonly [number, number];
  readonly block: readonly [number, number];
}

function layoutFor(order: F16Order, n: number): Layout {
  // Columns of S1 the threads span: the power of two from n up, at most 16.
  const cols = n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : n <= 8 ? 8 : 16;
  if (order === "vecDot") return { threads: [Math.max(16, 64 / cols), cols], block: [1, 1] };
  // tinyBLAS (n >= 2): tiles of 64 x 2, 64 x 4, 32 x 8 and 32 x 32.
  const threads: [number, number] = cols <= 8 ? [cols <= 4 ? 32 : 16, cols / 2] : [16, 16];
  return { threads, block: [2, 2] };
}

/** The kernel of a mulMat that {@link f16ExactTakes}. */
export function matmulF16ExactKernel(node: Tensor): Kernel {
  const [a, b] = node.src as [Tensor, Tensor];
  const [m, n, k] = [a.ne[1], b.ne[1], a.ne[0]];
  const order = f16Order(m, n, k);
  const layout = layoutFor(order, n);
  const tm = layout.threads[0] * layout.block[0], tn = layout.threads[1] * layout.block[1];
  const workgroups = matmulGrid(node, tm, tn);
  return {
    key: `mulMatF16Exact:${order}:${layout.threads.join("x")}:${layout.block.join("x")}`,
    source: () => matmulF16ExactShader(order, layout),
    tensors: [node, a, b],
    status: false,
    count: 0,
    floats: [],
    workgroups,
  };
}

/** Accumulators (vec4: lanes 0-3 or 4-7 of one of ggml's 8-lane vectors) per element of D. */
function accumulators(order: F16Order): number {
  return order === "vecDot" ? 8 : 2;
}

/** The thread's elements of D, as (row, column) in its block. */
function elements(layout: Layout): [number, number][] {
  const out: [number, number][] = [];
  for (let i = 0; i < layout.block[0]; i++) {
    for (let j = 0; j < layout.block[1]; j++) out.push([i, j]);
  }
  return out;
}

/**
 * WGSL statements adding one staged chunk of 32 elements to the accumulators `acc_i_j_q` of
 * element (i, j): vecDot's q is 2 * (ggml's accumulator) + (half), tinyBLAS's the half of its
 * one accumulator, which takes the chunk's four steps in order.
 */
function chunkUpdate(order: F16Order, layout: Layout): string {
  const lines: string[] = [];
  for (let v = 0; v < 8; v++) {
    for (let i = 0; i < layout.block[0]; i++) lines.push(`let a${i}_${v} = As[ra${i} + ${v}u];`);
    for (let j = 0; j < layout.block[1]; j++) lines.push(`let b${j}_${v} = Bs[cb${j} + ${v}u];`);
    const q = order === "vecDot" ? v : v % 2;
    for (const [i, j] of elements(layout)) {
      lines.push(`acc_${i}_${j}_${q} = acc_${i}_${j}_${q} + a${i}_${v} * b${j}_${v};`);
    }
  }
  return lines.join("\n      ");
}

/** The reduction of an element's accumulators to one f32 (see the module's doc). */
function reduction(order: F16Order): string {
  if (order === "tinyBlas") {
    return `let t = acc1 + acc0;
  return (t.x + t.z) + (t.y + t.w);`;
  }
  return `let lo = (acc0 + acc4) + (acc2 + acc6);
  let hi = (acc1 + acc5) + (acc3 + acc7);
  let t = lo + hi;
  return (t.x + t.y) + (t.z + t.w);`;
}

/**
 * The shader for `order` and `layout`. S0's rows and S1's columns of the workgroup's tile are
 * staged 32 elements at a time, each row as 8 vec4 (zero past K, M or N: a zero product leaves
 * a tinyBLAS accumulator unchanged, as it starts at +0 and so is never -0; ggml_vec_dot_f16's
 * leftovers are read from the last chunk one by one).
 */
function matmulF16ExactShader(order: F16Order, layout: Layout): string {
  const [tx, ty] = layout.threads;
  const [rm, rn] = layout.block;
  const tm = tx * rm, tn = ty * rn, threads = tx * ty;
  const count = accumulators(order);
  const qs = Array.from({ length: count }, (_, q) => q);
  const own = elements(layout);
  const declare = own.flatMap(([i, j]) =>
    qs.map((q) => `var acc_${i}_${j}_${q} = vec4<f32>(0.0);`)
  );
  const args = (i: number, j: number): string => qs.map((q) => `acc_${i}_${j}_${q}`).join(", ");
  const params = qs.map((q) => `acc${q}: vec4<f32>`).join(", ");
  const offsets = [
    ...Array.from({ length: rm }, (_, i) => `let ra${i} = (lid3.x + ${i * tx}u) * 8u;`),
    ...Array.from({ length: rn }, (_, j) => `let cb${j} = (lid3.y + ${j * ty}u) * 8u;`),
  ];
  // vecDot: whole steps go to the lanes, the last K % 32 elements to the f64 (float-float) total
  // (one element per thread: `own` is [[0, 0]]).
  const whole = order === "vecDot" ? `K - K % ${STEP}u` : "K";
  const rest = order === "vecDot"
    ? `} else {
      var total = vec2<f32>(reduce(${args(0, 0)}), 0.0);
      for (var j = 0u; j < K - k0; j = j + 1u) {
        total = ff_add(total, As[ra0 + j / 4u][j % 4u] * Bs[cb0 + j / 4u][j % 4u]);
      }
      result_0_0 = total.x;
      done = true;`
    : "";
  const results = own.map(([i, j]) => `var result_${i}_${j} = 0.0;`);
  const finish = own.map(([i, j]) =>
    `if (!done) {
    result_${i}_${j} = reduce(${args(i, j)});
  }
  {
    let m = m0 + lid3.x + ${i * tx}u;
    let n = n0 + lid3.y + ${j * ty}u;
    if (m < M && n < N) {
      D_set_f32(at(0u, vec4<u32>(m, n, i2, i3)), result_${i}_${j});
    }
  }`
  );
  return `${PARAMS_WGSL}
${EXACT_WGSL}
${tensorBindings("f32", ["f16", "f32"])}
var<workgroup> As: array<vec4<f32>, ${tm * 8}>;
var<workgroup> Bs: array<vec4<f32>, ${tn * 8}>;

fn reduce(${params}) -> f32 {
  ${reduction(order)}
}

@compute @workgroup_size(${tx}, ${ty})
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_id) lid3: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
${matmulPrologue(`${tm}u`, `${tn}u`)}
  ${offsets.join("\n  ")}
  let whole = ${whole};
  ${declare.join("\n  ")}
  ${results.join("\n  ")}
  var done = false;
  for (var k0 = 0u; k0 < K; k0 = k0 + ${STEP}u) {
    for (var e = lid; e < ${tm * STEP}u; e = e + ${threads}u) {
      let k = k0 + e % ${STEP}u;
      let m = m0 + e / ${STEP}u;
      var v = 0.0;
      if (k < K && m < M) {
        v = S0_f32(at(1u, vec4<u32>(k, m, a2, a3)));
      }
      As[e / 4u][e % 4u] = v;
    }
    for (var e = lid; e < ${tn * STEP}u; e = e + ${threads}u) {
      let k = k0 + e % ${STEP}u;
      let n = n0 + e / ${STEP}u;
      var v = 0.0;
      if (k < K && n < N) {
        v = f16_to_f32(f32_to_f16(S1_f32(at(2u, vec4<u32>(k, n, i2, i3)))));
      }
      Bs[e / 4u][e % 4u] = v;
    }
    workgroupBarrier();
    if (k0 < whole) {
      ${chunkUpdate(order, layout)}
    ${rest}
    }
    workgroupBarrier();
  }
  ${finish.join("\n  ")}
}`;
}
