//! Unary math kernels: abs, sgn, neg, step, tanh, elu, leaky_relu, sigmoid, hard_sigmoid,
//! hard_swish, gelu_erf, gelu_quick, exp, log, sin, cos, clamp, floor, ceil, round, trunc, each
//! with ggml-cpu's definition (ggml/src/ggml-cpu/vec.h and unary-ops.cpp), including what NaN
//! gives: step, sgn and hard_sigmoid of NaN are 0 (their comparisons are false), clamp of NaN
//! is max (ggml's MAX(MIN(x, max), min) macros), the rest propagate NaN.
//!
//! dst and src0 share one shape and one dtype, f32 or f16 (f16 widened to f32, computed in f32,
//! rounded back once, as ggml's f16 paths do). Rows are split across threads; within a row every
//! element goes through the same vector function in chunks of `lanes`, contiguous or strided, so
//! a value depends neither on the layout nor on the thread count. dst may alias src0 exactly:
//! each chunk is loaded before the same chunk is stored.
//!
//! `apply_scalar` is the scalar reference path (f64 math where the C library would use float),
//! used by the unit tests against the vector path.

const std = @import("std");
const common = @import("common.zig");
const vec_math = @import("vec_math.zig");

const assert = common.assert;
const F32x = common.F32x;
const Strided = common.Strided;
const Tensor = common.Tensor;
const lanes = common.lanes;
const splat = common.splat;

pub const Kind = @import("../node.zig").Op.UnaryMath;
const Op = @import("../node.zig").Op;

/// Runs `op` if it is one of this file's ops; null when it is not.
pub fn unary_math_of(op: Op, n: *const common.Node, work: *const common.Work) ?common.Status {
    inline for (@typeInfo(Kind).@"enum".fields) |field| {
        if (op == @field(Op, field.name)) return unary(@field(Kind, field.name), n, work);
    }
    return null;
}

/// The op's f32 parameters (leaky_relu's slope, clamp's bounds), as vectors.
const Params = struct { p0: F32x, p1: F32x };

pub fn unary(comptime kind: Kind, n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    assert(dst.element_count() == src.element_count());
    assert(dst.dtype == src.dtype);
    const params: Params = .{ .p0 = splat(n.param_f32(0)), .p1 = splat(n.param_f32(1)) };
    const range = common.thread_range(dst.rows(), work);
    // Outputs past the cache size skip the read-for-ownership of each line (see common.zig).
    const stream = common.use_stream_stores(dst);
    if (dst.dtype == .f16) {
        for (range.begin..range.end) |row| {
            const index = dst.row_index(row);
            unary_row(kind, .f16, dst.row_at(index), src.row_at(index), dst.ne[0], params, false);
        }
    } else {
        assert(dst.dtype == .f32);
        for (range.begin..range.end) |row| {
            const index = dst.row_index(row);
            unary_row(kind, .f32, dst.row_at(index), src.row_at(index), dst.ne[0], params, stream);
        }
        if (stream) common.stream_fence();
    }
    return .ok;
}

fn unary_row(
    comptime kind: Kind,
    comptime dtype: common.DType,
    dst: Strided,
    src: Strided,
    count: usize,
    params: Params,
    stream: bool,
) void {
    var i: usize = 0;
    while (i < count) : (i += lanes) {
        const chunk = @min(lanes, count - i);
        // Padding lanes hold 1: inside every op's domain (log, and no overflow anywhere).
        const x = if (dtype == .f16)
            common.load_chunk_f16(src, i, chunk)
        else
            common.load_chunk(src, i, chunk, 1);
        const y = apply(kind, x, params);
        if (dtype == .f16) {
            common.store_chunk_f16(dst, i, chunk, y);
        } else {
            common.store_chunk_maybe_stream(dst, i, chunk, y, stream);
        }
    }
}

const zero = splat(0);
const one = splat(1);

/// The vector path: every op in vector arithmetic (expm1, log, sin and cos from vec_math.zig;
/// sin and cos send only lanes beyond 8192 in magnitude through the scalar library).
pub fn apply(comptime kind: Kind, x: F32x, params: Params) F32x {
    return switch (kind) {
        .abs => @abs(x),
        .sgn => @select(f32, x > zero, one, @select(f32, x < zero, -one, zero)),
        .neg => -x,
        .step => @select(f32, x > zero, one, zero),
        .tanh => tanh(x),
        // ggml: x > 0 ? x : expm1f(x).
        .elu => @select(f32, x > zero, x, vec_math.expm1(x)),
        // ggml: ((x > 0) ? x : 0) + slope * ((x < 0) ? x : 0).
        .leaky_relu => @select(f32, x > zero, x, zero) +
            params.p0 * @select(f32, x < zero, x, zero),
        .sigmoid => one / (one + common.exp(-x)),
        .hard_sigmoid => hard_sigmoid(x),
        .hard_swish => x * hard_sigmoid(x),
        .gelu_erf => gelu_erf(x),
        // ggml: x * (1 / (1 + expf(-1.702 x))).
        .gelu_quick => x * (one / (one + common.exp(splat(-1.702) * x))),
        .exp => common.exp(x),
        .log => vec_math.log(x),
        .sin => vec_math.sin(x),
        .cos => vec_math.cos(x),
        // ggml: MAX(MIN(x, max), min) with the C macros (a < b ? a : b), so NaN gives max.
        .clamp => blk: {
            const low = @select(f32, x < params.p1, x, params.p1);
            break :blk @select(f32, low > params.p0, low, params.p0);
        },
        .floor => @floor(x),
        .ceil => @ceil(x),
        // roundf: halves away from zero (Zig's @round is the same).
        .round => @round(x),
        .trunc => @trunc(x),
    };
}

/// ggml: fminf(1, fmaxf(0, (x + 3) / 6)); fmaxf ignores a NaN operand, so NaN gives 0.
fn hard_sigmoid(x: F32x) F32x {
    const t = (x + splat(3)) / splat(6);
    const low = @select(f32, t > zero, t, zero); // NaN > 0 is false: 0, as fmaxf(0, NaN)
    return @select(f32, low < one, low, one);
}

/// The edge where `tanh`'s rational form rounds to exactly +-1 in f32 (Eigen's clamp).
const tanh_clamp: f32 = 7.90531110763549805;

/// tanh as Eigen's float `ptanh` (generic_fast_tanh_float): an odd degree-13 polynomial over an
/// even degree-6 one on x clamped to +-7.905 (where the ratio rounds to +-1). Relative error
/// below 3e-7 over the whole line (Cephes' two-branch tanhf was about 2 ulp too), with one
/// division and no exp: half the arithmetic. -0 stays -0, +-inf give +-1, NaN stays NaN.
fn tanh(x: F32x) F32x {
    const c = @min(@max(x, splat(-tanh_clamp)), splat(tanh_clamp));
    const z = c * c;
    var p = splat(-2.76076847742355e-16);
    p = common.mul_add(z, p, splat(2.00018790482477e-13));
    p = common.mul_add(z, p, splat(-8.60467152213735e-11));
    p = common.mul_add(z, p, splat(5.12229709037114e-08));
    p = common.mul_add(z, p, splat(1.48572235717979e-05));
    p = common.mul_add(z, p, splat(6.37261928875436e-04));
    p = common.mul_add(z, p, splat(4.89352455891786e-03));
    var q = splat(1.19825839466702e-06);
    q = common.mul_add(z, q, splat(1.18534705686654e-04));
    q = common.mul_add(z, q, splat(2.26843463243900e-03));
    q = common.mul_add(z, q, splat(4.89352518554385e-03));
    // @min and @max return the other operand for NaN: put NaN back.
    return @select(f32, x != x, x, (c * p) / q);
}

/// gelu_erf in f32 vectors: 0.5 x erfc(-x / sqrt 2) with Numerical Recipes' erfc (see
/// `erfc`), its exp the vector `common.exp`. Relative error a few 1e-7 (the exponent of exp
/// grows as x^2), well inside the f32 activations' tolerance.
fn gelu_erf(x: F32x) F32x {
    const z = -x * splat(std.math.sqrt1_2);
    const a = @abs(z);
    const t = one / (one + splat(0.5) * a);
    var p = splat(0.17087277);
    p = common.mul_add(p, t, splat(-0.82215223));
    p = common.mul_add(p, t, splat(1.48851587));
    p = common.mul_add(p, t, splat(-1.13520398));
    p = common.mul_add(p, t, splat(0.27886807));
    p = common.mul_add(p, t, splat(-0.18628806));
    p = common.mul_add(p, t, splat(0.09678418));
    p = common.mul_add(p, t, splat(0.37409196));
    p = common.mul_add(p, t, splat(1.00002368));
    p = common.mul_add(p, t, splat(-1.26551223));
    const r = t * common.exp(p - a * a);
    const complement = @select(f32, z >= zero, r, splat(2) - r);
    // NaN: every comparison is false, so `complement` is 2 - NaN = NaN and the product NaN.
    return splat(0.5) * x * complement;
}

/// erfc(z) for any z, fractional error < 1.2e-7 (Numerical Recipes in C, 2nd ed., 6.2).
pub fn erfc(z: f64) f64 {
    const t = 1.0 / (1.0 + 0.5 * @abs(z));
    const poly = -@abs(z) * @abs(z) - 1.26551223 + t * (1.00002368 + t * (0.37409196 +
        t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 +
            t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    const result = t * @exp(poly);
    return if (z >= 0) result else 2.0 - result;
}

/// The scalar reference of each op in f64 (the C library's double functions), for the tests.
pub fn apply_scalar(kind: Kind, x: f64, p0: f64, p1: f64) f64 {
    return switch (kind) {
        .abs => @abs(x),
        .sgn => if (x > 0) 1 else if (x < 0) -1 else 0,
        .neg => -x,
        .step => if (x > 0) 1 else 0,
        .tanh => std.math.tanh(x),
        .elu => if (x > 0) x else std.math.expm1(x),
        .leaky_relu => (if (x > 0) x else 0) + p0 * (if (x < 0) x else 0),
        .sigmoid => 1 / (1 + @exp(-x)),
        .hard_sigmoid => hard_sigmoid_scalar(x),
        .hard_swish => x * hard_sigmoid_scalar(x),
        .gelu_erf => 0.5 * x * erfc(-x * std.math.sqrt1_2),
        .gelu_quick => x / (1 + @exp(-1.702 * x)),
        .exp => @exp(x),
        .log => @log(x),
        .sin => @sin(x),
        .cos => @cos(x),
        .clamp => blk: {
            const low = if (x < p1) x else p1;
            break :blk if (low > p0) low else p0;
        },
        .floor => @floor(x),
        .ceil => @ceil(x),
        .round => @round(x),
        .trunc => @trunc(x),
    };
}

fn hard_sigmoid_scalar(x: f64) f64 {
    const t = (x + 3) / 6;
    const low = if (t > 0) t else 0;
    return if (low < 1) low else 1;
}
