//! Vector forms of the C library's log, sin, cos and expm1 for the unary kernels, so that no
//! element goes lane by lane through a scalar libm call on the hot path (which made log 10 times
//! slower than a copy of the same bytes). Each follows a published single-precision routine:
//! log is Cephes' logf (frexp-style split into 2^e * m, m in [sqrt(1/2), sqrt(2)), a degree-8
//! polynomial in m - 1), sin and cos are SLEEF's sinf/cosf_u35 (Cody-Waite reduction by pi
//! in four parts, an odd degree-9 polynomial), expm1 is a degree-8 Taylor polynomial near 0,
//! where e^x - 1 would cancel, and `common.exp(x) - 1` elsewhere. All are within a few f32 ulps
//! (the unit tests check each against f64 over its range), give the C library's answers for
//! NaN, infinities and zeros, and the same bits for a lane whatever the other lanes hold.

const std = @import("std");
const common = @import("common.zig");

const F32x = common.F32x;
const lanes = common.lanes;
const splat = common.splat;
const mul_add = common.mul_add;

const U32x = @Vector(lanes, u32);
const I32x = @Vector(lanes, i32);

const inf = std.math.inf(f32);
const nan = std.math.nan(f32);

/// ln(x) for every lane, about 1 ulp (Cephes' logf): x = 2^e * m with m in [sqrt(1/2),
/// sqrt(2)), ln(m) = f - f^2 / 2 + f^3 P(f) for f = m - 1, and e ln 2 added in two parts.
/// Subnormal x are scaled by 2^23 first. log(0) = -inf, log(x < 0) = NaN, log(inf) = inf.
pub fn log(x: F32x) F32x {
    // Common case: every lane a positive normal number, no scaling and no special results.
    if (@reduce(.And, (x >= splat(std.math.floatMin(f32))) & (x < splat(inf)))) {
        return log_normal(x, splat(0));
    }
    const subnormal = x < splat(std.math.floatMin(f32));
    const normal = @select(f32, subnormal, x * splat(0x1p23), x);
    const result = log_normal(normal, @select(f32, subnormal, splat(23), splat(0)));
    // Lanes outside (0, inf): every comparison with NaN is false, so NaN takes the last select.
    const zero_or_inf = @select(f32, x == splat(0), splat(-inf), splat(inf));
    const finite = @select(f32, (x == splat(0)) | (x == splat(inf)), zero_or_inf, result);
    return @select(f32, x >= splat(0), finite, splat(nan));
}

/// ln(normal) - shift * ln 2 for positive normal lanes (shift 23 undoes a subnormal's scaling).
fn log_normal(normal: F32x, shift: F32x) F32x {
    const bits: I32x = @bitCast(normal);
    // Subtracting sqrt(1/2)'s bits makes the exponent field floor(log2(x / sqrt(1/2))).
    const offset: I32x = @splat(0x3f3504f3);
    const exponent = (bits -% offset) >> @splat(23);
    const m: F32x = @bitCast(bits -% (exponent << @splat(23)));
    const e = @as(F32x, @floatFromInt(exponent)) - shift;
    const f = m - splat(1);
    const z = f * f;
    var p = splat(7.0376836292e-2);
    p = mul_add(p, f, splat(-1.1514610310e-1));
    p = mul_add(p, f, splat(1.1676998740e-1));
    p = mul_add(p, f, splat(-1.2420140846e-1));
    p = mul_add(p, f, splat(1.4249322787e-1));
    p = mul_add(p, f, splat(-1.6668057665e-1));
    p = mul_add(p, f, splat(2.0000714765e-1));
    p = mul_add(p, f, splat(-2.4999993993e-1));
    p = mul_add(p, f, splat(3.3333331174e-1));
    var y = p * f * z;
    y = mul_add(e, splat(-2.12194440e-4), y);
    y = mul_add(z, splat(-0.5), y);
    return mul_add(e, splat(0.693359375), f + y);
}

/// |x| above this goes lane by lane through the f32 libm path: the four-part reduction by pi
/// below keeps the reduced argument exact to well under an ulp only while q * pi_a is exact.
pub const trig_vector_abs_max: f32 = 8192.0;

// pi in four parts (SLEEF's PI_A..PI_D): the first has 8 significant bits, so q * pi_a is exact
// for |q| < 2^16 (|x| < 2e5; `trig_vector_abs_max` stays far inside that).
const pi_a: f32 = 3.140625;
const pi_b: f32 = 0.0009670257568359375;
const pi_c: f32 = 6.2771141529083251953e-07;
const pi_d: f32 = 1.2154201256553420762e-10;

/// 1.5 * 2^23: adding it rounds a float of magnitude < 2^22 to the nearest integer (ties to
/// even), the integer's low bits landing in the low mantissa bits.
const round_magic: f32 = 12582912.0;

/// sin(x) for every lane, about 3 ulp (SLEEF's sinf_u35): q = round(x / pi), d = x - q pi,
/// sin(x) = (-1)^q sin(d) with an odd polynomial on [-pi/2, pi/2]. -0 stays -0; inf and NaN
/// give NaN.
pub fn sin(x: F32x) F32x {
    const t = mul_add(x, splat(1.0 / std.math.pi), splat(round_magic));
    const q = t - splat(round_magic);
    const odd = (@as(U32x, @bitCast(t)) & @as(U32x, @splat(1))) << @splat(31);
    const d = reduce(x, q, 1.0);
    const result = sin_reduced(@bitCast(@as(U32x, @bitCast(d)) ^ odd));
    return finish_trig(x, @select(f32, x == splat(0), x, result), sin_scalar);
}

/// cos(x) for every lane, about 3 ulp (SLEEF's cosf_u35): q = 2 round(x / pi - 1/2) + 1,
/// d = x - q pi / 2, cos(x) = -(-1)^((q - 1) / 2) sin(d). inf and NaN give NaN.
pub fn cos(x: F32x) F32x {
    const t = mul_add(x, splat(1.0 / std.math.pi), splat(-0.5)) + splat(round_magic);
    const r = t - splat(round_magic);
    const q = mul_add(r, splat(2), splat(1));
    // The sign flips when r is even: (q & 2) == 0 in SLEEF's terms.
    const even = ((@as(U32x, @bitCast(t)) & @as(U32x, @splat(1))) ^ @as(U32x, @splat(1))) << @splat(31);
    const d = reduce(x, q, 0.5);
    return finish_trig(x, sin_reduced(@bitCast(@as(U32x, @bitCast(d)) ^ even)), cos_scalar);
}

/// x - q * pi * half, pi in four parts, each product fused into the running difference.
fn reduce(x: F32x, q: F32x, comptime half: f32) F32x {
    var d = mul_add(q, splat(-pi_a * half), x);
    d = mul_add(q, splat(-pi_b * half), d);
    d = mul_add(q, splat(-pi_c * half), d);
    return mul_add(q, splat(-pi_d * half), d);
}

/// sin(d) for |d| <= pi / 2 (SLEEF's coefficients).
fn sin_reduced(d: F32x) F32x {
    const s = d * d;
    var u = splat(2.6083159809786593541503e-06);
    u = mul_add(u, s, splat(-0.0001981069071916863322258));
    u = mul_add(u, s, splat(0.00833307858556509017944336));
    u = mul_add(u, s, splat(-0.166666597127914428710938));
    return mul_add(s, u * d, d);
}

/// Lanes beyond `trig_vector_abs_max` (and infinities and NaN) recomputed by `scalar`.
fn finish_trig(x: F32x, result: F32x, comptime scalar: fn (f32) f32) F32x {
    const far = !(@abs(x) <= splat(trig_vector_abs_max));
    if (!@reduce(.Or, far)) return result;
    var out: [lanes]f32 = result;
    const in: [lanes]f32 = x;
    const far_lanes: [lanes]bool = far;
    for (0..lanes) |lane| {
        if (far_lanes[lane]) out[lane] = scalar(in[lane]);
    }
    return out;
}

fn sin_scalar(x: f32) f32 {
    return @sin(x);
}

fn cos_scalar(x: f32) f32 {
    return @cos(x);
}

/// e^x - 1 for every lane: below |x| = 1/2 the Taylor polynomial to x^8 (truncation under
/// 1e-8 relative), where e^x - 1 would lose the low digits of a result near 0; elsewhere
/// `common.exp(x) - 1` (one more rounding, within 2 ulp). -inf gives -1, NaN NaN.
pub fn expm1(x: F32x) F32x {
    var p = splat(1.0 / 40320.0);
    p = mul_add(p, x, splat(1.0 / 5040.0));
    p = mul_add(p, x, splat(1.0 / 720.0));
    p = mul_add(p, x, splat(1.0 / 120.0));
    p = mul_add(p, x, splat(1.0 / 24.0));
    p = mul_add(p, x, splat(1.0 / 6.0));
    p = mul_add(p, x, splat(0.5));
    const small = mul_add(p, x * x, x);
    const large = common.exp(x) - splat(1);
    return @select(f32, @abs(x) < splat(0.5), small, large);
}

const testing = std.testing;

fn expect_near(comptime f: fn (F32x) F32x, reference: fn (f64) f64, x: f32, ulps: f64) !void {
    const got: f64 = f(splat(x))[0];
    const want = reference(x);
    const ulp = @max(@abs(want), std.math.floatMin(f32)) * std.math.floatEps(f32);
    if (@abs(got - want) > ulps * ulp + 1e-45) {
        std.debug.print("x={e} got={e} want={e}\n", .{ x, got, want });
        return error.TestExpectedApproxEqAbs;
    }
}

fn log_f64(x: f64) f64 {
    return @log(x);
}
fn sin_f64(x: f64) f64 {
    return @sin(x);
}
fn cos_f64(x: f64) f64 {
    return @cos(x);
}
fn expm1_f64(x: f64) f64 {
    return std.math.expm1(x);
}

test "vector log is within 2 ulp of f64 from the smallest subnormal to the largest float" {
    // Every 4099th bit pattern of the positive floats, subnormals included.
    var bits: u32 = 1;
    while (bits < 0x7f800000) : (bits += 4099) try expect_near(log, log_f64, @bitCast(bits), 2);
    var y: f32 = 0.5;
    while (y < 2) : (y += 1.0 / 4096.0) try expect_near(log, log_f64, y, 2);
    try testing.expectEqual(-inf, log(splat(0))[0]);
    try testing.expectEqual(-inf, log(splat(-0.0))[0]);
    try testing.expectEqual(inf, log(splat(inf))[0]);
    try testing.expect(std.math.isNan(log(splat(-1))[0]));
    try testing.expect(std.math.isNan(log(splat(-inf))[0]));
    try testing.expect(std.math.isNan(log(splat(nan))[0]));
    try testing.expectEqual(@as(f32, 0), log(splat(1))[0]);
}

test "vector sin and cos are within 1e-7 of f64 up to the vector limit and beyond it" {
    var x: f32 = -20000;
    while (x < 20000) : (x += 0.37) {
        // Absolute bound: near a zero of sin the f32 argument itself is the limit.
        const s: f64 = sin(splat(x))[0];
        const c: f64 = cos(splat(x))[0];
        try testing.expect(@abs(s - @sin(@as(f64, x))) <= 2.5e-7);
        try testing.expect(@abs(c - @cos(@as(f64, x))) <= 2.5e-7);
    }
    var y: f32 = -4;
    while (y < 4) : (y += 1.0 / 1024.0) {
        try expect_near(sin, sin_f64, y, 4);
        try expect_near(cos, cos_f64, y, 4);
    }
    try testing.expectEqual(@as(u32, 0x80000000), @as(u32, @bitCast(sin(splat(-0.0))[0])));
    try testing.expectEqual(@as(f32, 1), cos(splat(0))[0]);
    for ([_]f32{ inf, -inf, nan }) |special| {
        try testing.expect(std.math.isNan(sin(splat(special))[0]));
        try testing.expect(std.math.isNan(cos(splat(special))[0]));
    }
}

test "vector expm1 is within 2 ulp of f64 near 0 and elsewhere" {
    var x: f32 = -30;
    while (x < 30) : (x += 0.0013) try expect_near(expm1, expm1_f64, x, 2.5);
    try testing.expectEqual(@as(f32, -1), expm1(splat(-inf))[0]);
    try testing.expectEqual(inf, expm1(splat(inf))[0]);
    try testing.expect(std.math.isNan(expm1(splat(nan))[0]));
    try testing.expectEqual(@as(f32, 0), expm1(splat(0))[0]);
}
