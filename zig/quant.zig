//! ggml's block formats, bit for bit: quantize_row_*_ref and dequantize_row_* of
//! ggml/src/ggml-quants.c for q8_0, q4_0, q4_1, q5_0, q5_1, q8_1 and the k-quants q4_K, q5_K,
//! q6_K, q8_K (256-element super-blocks; their layouts head their section), and f32 <-> bf16 as
//! ggml_compute_fp32_to_bf16 / ggml_compute_bf16_to_fp32. Scalar reference code (what GGUF
//! files are written with); kernels that compute on quantized weights come later.
//!
//! Bit identity: ggml builds these functions into ggml-base for the baseline x86-64 target, so
//! its arithmetic is plain f32 without fused multiply-adds, which is what Zig emits (its float
//! mode is strict). Where C converts a float to int8_t/uint8_t, an x86 build takes the low byte
//! of cvttss2si's 32-bit result; `c_float_to_byte` does the same, so NaN, infinite and
//! out-of-range values (undefined behaviour in C, never a crash here) give ggml's x86 bytes.
//! The k-quants turn floats into ints only through ggml's nearest_int bit trick, defined for
//! every input, so they match ggml on NaN and infinities too.
//!
//! Block layouts (little-endian, packed; ggml-common.h):
//!   q8_0 (34 bytes): f16 d, i8 qs[32]                     x = qs * d
//!   q4_0 (18 bytes): f16 d, u8 qs[16] (low nibble: elements 0..15, high: 16..31)
//!                                                          x = (q - 8) * d
//!   q4_1 (20 bytes): f16 d, f16 m, u8 qs[16]              x = q * d + m
//!   q5_0 (22 bytes): f16 d, u32 qh (bit j: fifth bit of element j), u8 qs[16]
//!                                                          x = (q - 16) * d
//!   q5_1 (24 bytes): f16 d, f16 m, u32 qh, u8 qs[16]      x = q * d + m
//!   q8_1 (36 bytes): f16 d, f16 s (= sum(qs) * d), i8 qs[32]
//!                                                          x = qs * d
//! ggml has no dequantize_row_q8_1 (q8_1 only feeds its dot products); Graft's is q8_0's,
//! ignoring s.

const std = @import("std");
const DType = @import("dtype.zig").DType;

const assert = std.debug.assert;

/// Elements per block of the 32-element block types (ggml's QK4_0 ... QK8_1).
pub const qk = 32;

/// Elements per super-block of the k-quants (ggml's QK_K).
pub const qk_k = 256;

/// True for the dtypes `quantize_row` and `dequantize_row` take: bf16 and the block types.
pub fn quantizable(dtype: DType) bool {
    return switch (dtype) {
        .bf16, .q8_0, .q4_0, .q4_1, .q5_0, .q5_1, .q8_1, .q4_K, .q5_K, .q6_K, .q8_K => true,
        .f32, .f16, .i32, .i64 => false,
    };
}

/// Bytes that `n` elements of `dtype` take; `n` must be whole blocks.
pub fn row_bytes(dtype: DType, n: u64) u64 {
    assert(n % dtype.block_size() == 0);
    return n / dtype.block_size() * dtype.block_bytes();
}

/// Quantizes `src` (whole blocks of `dtype`) into `dst` (exactly `row_bytes` long).
pub fn quantize_row(dtype: DType, src: []align(1) const f32, dst: []u8) void {
    assert(quantizable(dtype));
    assert(dst.len == row_bytes(dtype, src.len));
    if (dtype == .bf16) {
        for (src, 0..) |x, i| std.mem.writeInt(u16, dst[2 * i ..][0..2], fp32_to_bf16(x), .little);
        return;
    }
    const block_bytes = dtype.block_bytes();
    const block_size = dtype.block_size();
    var block: usize = 0;
    while (block * block_size < src.len) : (block += 1) {
        const y = dst[block * block_bytes ..][0..block_bytes];
        if (block_size == qk_k) {
            const x: [qk_k]f32 = src[block * qk_k ..][0..qk_k].*; // src may be unaligned
            switch (dtype) {
                .q4_K => quantize_q4_K(&x, y[0..144]),
                .q5_K => quantize_q5_K(&x, y[0..176]),
                .q6_K => quantize_q6_K(&x, y[0..210]),
                .q8_K => quantize_q8_K(&x, y[0..292]),
                else => unreachable,
            }
            continue;
        }
        const x: [qk]f32 = src[block * qk ..][0..qk].*; // src may be unaligned
        switch (dtype) {
            .q8_0 => quantize_q8_0(&x, y[0..34]),
            .q4_0 => quantize_q4_0(&x, y[0..18]),
            .q4_1 => quantize_q4_1(&x, y[0..20]),
            .q5_0 => quantize_q5_0(&x, y[0..22]),
            .q5_1 => quantize_q5_1(&x, y[0..24]),
            .q8_1 => quantize_q8_1(&x, y[0..36]),
            else => unreachable,
        }
    }
}

/// Dequantizes `row_bytes(dtype, dst.len)` bytes of `src` into `dst` (whole blocks).
pub fn dequantize_row(dtype: DType, src: []const u8, dst: []align(1) f32) void {
    assert(quantizable(dtype));
    assert(src.len == row_bytes(dtype, dst.len));
    if (dtype == .bf16) {
        for (dst, 0..) |*y, i| y.* = bf16_to_fp32(std.mem.readInt(u16, src[2 * i ..][0..2], .little));
        return;
    }
    const block_bytes = dtype.block_bytes();
    const block_size = dtype.block_size();
    var block: usize = 0;
    while (block * block_size < dst.len) : (block += 1) {
        const x = src[block * block_bytes ..][0..block_bytes];
        if (block_size == qk_k) {
            var y: [qk_k]f32 = undefined;
            switch (dtype) {
                .q4_K => dequantize_q4_K(x[0..144], &y),
                .q5_K => dequantize_q5_K(x[0..176], &y),
                .q6_K => dequantize_q6_K(x[0..210], &y),
                .q8_K => dequantize_q8_K(x[0..292], &y),
                else => unreachable,
            }
            dst[block * qk_k ..][0..qk_k].* = y; // dst may be unaligned
            continue;
        }
        var y: [qk]f32 = undefined;
        switch (dtype) {
            .q8_0 => dequantize_q8(x[0..34], 2, &y),
            .q4_0 => dequantize_q4_0(x[0..18], &y),
            .q4_1 => dequantize_q4_1(x[0..20], &y),
            .q5_0 => dequantize_q5_0(x[0..22], &y),
            .q5_1 => dequantize_q5_1(x[0..24], &y),
            .q8_1 => dequantize_q8(x[0..36], 4, &y),
            else => unreachable,
        }
        dst[block * qk ..][0..qk].* = y; // dst may be unaligned
    }
}

// ---------------------------------------------------------------------------------------------
// Conversions

/// GGML_FP32_TO_FP16: round to nearest even, overflow to infinity; NaN becomes the quiet NaN
/// 0x7e00 with the sign kept (ggml_compute_fp32_to_fp16).
pub fn fp32_to_fp16(x: f32) u16 {
    const bits: u32 = @bitCast(x);
    if (std.math.isNan(x)) return @as(u16, @truncate(bits >> 16)) & 0x8000 | 0x7e00;
    return @bitCast(@as(f16, @floatCast(x)));
}

/// GGML_FP16_TO_FP32 (exact).
pub fn fp16_to_fp32(h: u16) f32 {
    return @floatCast(@as(f16, @bitCast(h)));
}

/// ggml_compute_fp32_to_bf16: round to nearest even; NaN keeps its top 16 bits with the quiet
/// bit (64) forced on.
pub fn fp32_to_bf16(x: f32) u16 {
    const bits: u32 = @bitCast(x);
    if (bits & 0x7fffffff > 0x7f800000) return @as(u16, @truncate(bits >> 16)) | 64;
    return @truncate((bits +% (0x7fff + ((bits >> 16) & 1))) >> 16);
}

/// ggml_compute_bf16_to_fp32 (exact).
pub fn bf16_to_fp32(h: u16) f32 {
    return @bitCast(@as(u32, h) << 16);
}

/// C's conversion of a float to int8_t or uint8_t as x86 builds do it: cvttss2si (truncation
/// toward zero into 32 bits; 0x80000000 for NaN and values out of the i32 range), low byte.
fn c_float_to_byte(x: f32) u8 {
    const wide: i32 = if (x > -2147483904.0 and x < 2147483648.0)
        @intFromFloat(x)
    else
        std.math.minInt(i32);
    return @truncate(@as(u32, @bitCast(wide)));
}

/// `MIN(limit, (int8_t)x)` stored into a uint8_t, as ggml writes q4_0, q4_1 and q5_0.
fn c_min_int8(limit: i8, x: f32) u8 {
    const value: i8 = @bitCast(c_float_to_byte(x));
    return @bitCast(@min(limit, value));
}

/// ggml's `d ? 1.0f/d : 0.0f` (NaN is true in C, and here).
fn inverse(d: f32) f32 {
    return if (d != 0) 1.0 / d else 0.0;
}

fn write_f16(bytes: *[2]u8, x: f32) void {
    std.mem.writeInt(u16, bytes, fp32_to_fp16(x), .little);
}

fn read_f16(bytes: *const [2]u8) f32 {
    return fp16_to_fp32(std.mem.readInt(u16, bytes, .little));
}

// ---------------------------------------------------------------------------------------------
// Quantize (quantize_row_*_ref, one block each)

/// The value of largest magnitude (the first of equals), as q4_0 and q5_0 pick it.
fn signed_absmax(x: *const [qk]f32) f32 {
    var amax: f32 = 0;
    var max: f32 = 0;
    for (x) |v| {
        if (amax < @abs(v)) {
            amax = @abs(v);
            max = v;
        }
    }
    return max;
}

/// `amax = MAX(amax, fabsf(v))` with ggml's MAX macro (a NaN element makes amax NaN).
fn absmax(x: *const [qk]f32) f32 {
    var amax: f32 = 0;
    for (x) |v| amax = if (amax > @abs(v)) amax else @abs(v);
    return amax;
}

/// ggml's min and max from FLT_MAX and -FLT_MAX (NaN elements are skipped).
fn min_max(x: *const [qk]f32) [2]f32 {
    var min: f32 = std.math.floatMax(f32);
    var max: f32 = -std.math.floatMax(f32);
    for (x) |v| {
        if (v < min) min = v;
        if (v > max) max = v;
    }
    return .{ min, max };
}

fn quantize_q8_0(x: *const [qk]f32, y: *[34]u8) void {
    const d = absmax(x) / 127.0;
    const id = inverse(d);
    write_f16(y[0..2], d);
    for (x, 0..) |v, j| y[2 + j] = c_float_to_byte(@round(v * id));
}

fn quantize_q8_1(x: *const [qk]f32, y: *[36]u8) void {
    const d = absmax(x) / 127.0;
    const id = inverse(d);
    write_f16(y[0..2], d);
    var sum: i32 = 0;
    for (x, 0..) |v, j| {
        const q = c_float_to_byte(@round(v * id));
        y[4 + j] = q;
        sum += @as(i8, @bitCast(q));
    }
    write_f16(y[2..4], @as(f32, @floatFromInt(sum)) * d);
}

/// Rounds half to even (as `_mm256_round_ps(x, _MM_ROUND_NEAREST)`), for |x| < 2^22: adding
/// 1.5 * 2^23 leaves no fraction bits, so the add itself rounds in the default mode.
pub inline fn round_even(x: anytype) @TypeOf(x) {
    const magic = 12582912.0; // 1.5 * 2^23
    const T = @TypeOf(x);
    const m: T = if (@typeInfo(T) == .vector) @splat(magic) else magic;
    return (x + m) - m;
}

/// One block of a quantized mul_mat's src1 as ggml's CPU backend makes it on x86
/// (ggml-cpu/arch/x86/quants.c quantize_row_q8_0/_q8_1): d = absmax / 127 as the reference,
/// but the quants are x * (127 / absmax) rounded half to even, where the reference takes
/// x * (1 / d) rounded half away from zero: a quant can differ by one. q8_1's s is
/// d * (sum of the quants), both as ggml. A block holding an infinity or NaN takes the
/// reference (ggml's vector code has no defined result for it).
fn quantize_activation_block(q8_1: bool, x: *const [qk]f32, y: []u8) void {
    const amax = absmax(x);
    // Every element, not only amax: a NaN may not survive into the maximum.
    var finite = true;
    for (x) |v| finite = finite and @abs(v) <= std.math.floatMax(f32);
    if (!finite) {
        if (q8_1) quantize_q8_1(x, y[0..36]) else quantize_q8_0(x, y[0..34]);
        return;
    }
    const d = amax / 127.0;
    const id: f32 = if (amax != 0) 127.0 / amax else 0.0;
    write_f16(y[0..2], d);
    const qs = if (q8_1) y[4..36] else y[2..34];
    var sum: i32 = 0;
    for (x, 0..) |v, j| {
        const q: i32 = @intFromFloat(round_even(v * id));
        qs[j] = @truncate(@as(u32, @bitCast(q)));
        sum += q;
    }
    if (q8_1) write_f16(y[2..4], d * @as(f32, @floatFromInt(sum)));
}

/// A quantized mul_mat's src1 row, as ggml's CPU backend quantizes it on x86 before its vector
/// dots: q8_0 and q8_1 by `quantize_activation_block`, q8_K as the reference (ggml's x86
/// quantize_row_q8_K is the reference).
pub fn quantize_row_activation(dtype: DType, src: []align(1) const f32, dst: []u8) void {
    if (dtype != .q8_0 and dtype != .q8_1) return quantize_row(dtype, src, dst);
    assert(src.len % qk == 0);
    assert(dst.len == row_bytes(dtype, src.len));
    const block_bytes = dtype.block_bytes();
    for (0..src.len / qk) |b| {
        const x: [qk]f32 = src[b * qk ..][0..qk].*;
        quantize_activation_block(dtype == .q8_1, &x, dst[b * block_bytes ..][0..block_bytes]);
    }
}

fn quantize_q4_0(x: *const [qk]f32, y: *[18]u8) void {
    const d = signed_absmax(x) / -8.0;
    const id = inverse(d);
    write_f16(y[0..2], d);
    for (0..qk / 2) |j| {
        const xi0: u32 = c_min_int8(15, x[j] * id + 8.5);
        const xi1: u32 = c_min_int8(15, x[qk / 2 + j] * id + 8.5);
        y[2 + j] = @truncate(xi0 | xi1 << 4);
    }
}

fn quantize_q4_1(x: *const [qk]f32, y: *[20]u8) void {
    const min, const max = min_max(x);
    const d = (max - min) / 15.0;
    const id = inverse(d);
    write_f16(y[0..2], d);
    write_f16(y[2..4], min);
    for (0..qk / 2) |j| {
        const xi0: u32 = c_min_int8(15, (x[j] - min) * id + 0.5);
        const xi1: u32 = c_min_int8(15, (x[qk / 2 + j] - min) * id + 0.5);
        y[4 + j] = @truncate(xi0 | xi1 << 4);
    }
}

/// The low nibbles and the packed fifth bits of q5_0 and q5_1.
fn pack5(y_qh: *[4]u8, y_qs: *[16]u8, xi: *const [qk]u8) void {
    var qh: u32 = 0;
    for (0..qk / 2) |j| {
        const xi0: u32 = xi[j];
        const xi1: u32 = xi[qk / 2 + j];
        y_qs[j] = @truncate((xi0 & 0x0f) | (xi1 & 0x0f) << 4);
        qh |= ((xi0 & 0x10) >> 4) << @intCast(j);
        qh |= ((xi1 & 0x10) >> 4) << @intCast(j + qk / 2);
    }
    std.mem.writeInt(u32, y_qh, qh, .little);
}

fn quantize_q5_0(x: *const [qk]f32, y: *[22]u8) void {
    const d = signed_absmax(x) / -16.0;
    const id = inverse(d);
    write_f16(y[0..2], d);
    var xi: [qk]u8 = undefined;
    for (x, 0..) |v, j| xi[j] = c_min_int8(31, v * id + 16.5);
    pack5(y[2..6], y[6..22], &xi);
}

fn quantize_q5_1(x: *const [qk]f32, y: *[24]u8) void {
    const min, const max = min_max(x);
    const d = (max - min) / 31.0;
    const id = inverse(d);
    write_f16(y[0..2], d);
    write_f16(y[2..4], min);
    var xi: [qk]u8 = undefined;
    for (x, 0..) |v, j| xi[j] = c_float_to_byte((v - min) * id + 0.5);
    pack5(y[4..8], y[8..24], &xi);
}

// ---------------------------------------------------------------------------------------------
// Dequantize (dequantize_row_*, one block each)

fn int_f32(value: i32) f32 {
    return @floatFromInt(value);
}

/// q8_0 and q8_1: the quants start at `offset`.
fn dequantize_q8(x: []const u8, comptime offset: usize, y: *[qk]f32) void {
    const d = read_f16(x[0..2]);
    for (y, 0..) |*out, j| out.* = int_f32(@as(i8, @bitCast(x[offset + j]))) * d;
}

fn dequantize_q4_0(x: *const [18]u8, y: *[qk]f32) void {
    const d = read_f16(x[0..2]);
    for (0..qk / 2) |j| {
        const q = x[2 + j];
        y[j] = int_f32(@as(i32, q & 0x0f) - 8) * d;
        y[qk / 2 + j] = int_f32(@as(i32, q >> 4) - 8) * d;
    }
}

fn dequantize_q4_1(x: *const [20]u8, y: *[qk]f32) void {
    const d = read_f16(x[0..2]);
    const m = read_f16(x[2..4]);
    for (0..qk / 2) |j| {
        const q = x[4 + j];
        y[j] = int_f32(q & 0x0f) * d + m;
        y[qk / 2 + j] = int_f32(q >> 4) * d + m;
    }
}

/// Element j's five bits of q5_0 / q5_1.
fn unpack5(qh: u32, qs: *const [16]u8, j: usize) [2]i32 {
    const shift: u5 = @intCast(j);
    const xh_0: u32 = (qh >> shift << 4) & 0x10;
    const xh_1: u32 = (qh >> (shift + 12)) & 0x10;
    return .{ @intCast((qs[j] & 0x0f) | xh_0), @intCast((qs[j] >> 4) | xh_1) };
}

fn dequantize_q5_0(x: *const [22]u8, y: *[qk]f32) void {
    const d = read_f16(x[0..2]);
    const qh = std.mem.readInt(u32, x[2..6], .little);
    for (0..qk / 2) |j| {
        const q = unpack5(qh, x[6..22], j);
        y[j] = int_f32(q[0] - 16) * d;
        y[qk / 2 + j] = int_f32(q[1] - 16) * d;
    }
}

fn dequantize_q5_1(x: *const [24]u8, y: *[qk]f32) void {
    const d = read_f16(x[0..2]);
    const m = read_f16(x[2..4]);
    const qh = std.mem.readInt(u32, x[4..8], .little);
    for (0..qk / 2) |j| {
        const q = unpack5(qh, x[8..24], j);
        y[j] = int_f32(q[0]) * d + m;
        y[qk / 2 + j] = int_f32(q[1]) * d + m;
    }
}

// ---------------------------------------------------------------------------------------------
// k-quants: ggml's 256-element super-blocks (quantize_row_q{4,5,6,8}_K_ref, dequantize_row_*)
//
// Layouts (little-endian, packed; ggml-common.h):
//   q4_K (144 bytes): f16 d, f16 dmin, u8 scales[12] (eight 6-bit scales and eight 6-bit mins of
//                     32-element sub-blocks, get_scale_min_k4), u8 qs[128] (nibbles)
//                                                          x = d * sc * q - dmin * m
//   q5_K (176 bytes): as q4_K with u8 qh[32] (fifth bits) before qs
//   q6_K (210 bytes): u8 ql[128] (low nibbles), u8 qh[64] (high bit pairs), i8 scales[16]
//                     (one per 16 elements), f16 d    x = d * scale * (q - 32)
//   q8_K (292 bytes): f32 d, i8 qs[256], i16 bsums[16] (sums of 16 quants)   x = d * qs
//
// ggml leaves a q8_K block's bsums unwritten when the block is all zero; Graft writes the sums
// of its (zero) quants, zeros.

/// ggml's GROUP_MAX_EPS.
const group_max_eps: f32 = 1e-15;

/// ggml's nearest_int: round half to even through the f32 mantissa (exact for |x| <= 4194303;
/// beyond that the same bits as ggml, never a trap).
fn nearest_int(fval: f32) i32 {
    const val = fval + 12582912.0;
    const bits: i32 = @bitCast(val);
    return (bits & 0x007fffff) - 0x00400000;
}

/// The low byte of an int, as C stores an int into a uint8_t or int8_t.
fn low_byte(value: i32) u8 {
    return @truncate(@as(u32, @bitCast(value)));
}

/// make_qx_quants with rmse_type 1 and no quant weights (w = x * x), the way
/// quantize_row_q6_K_ref calls it. `L` gets `l + nmax` (0 .. 2 * nmax - 1).
fn make_qx_quants(comptime n: usize, nmax: i32, x: *const [n]f32, L: *[n]u8) f32 {
    var max: f32 = 0;
    var amax: f32 = 0;
    for (x) |v| {
        const ax = @abs(v);
        if (ax > amax) {
            amax = ax;
            max = v;
        }
    }
    if (amax < group_max_eps) { // all zero
        @memset(L, 0);
        return 0;
    }
    var iscale = int_f32(-nmax) / max;
    var sumlx: f32 = 0;
    var suml2: f32 = 0;
    for (x, L) |v, *q| {
        const l = @max(-nmax, @min(nmax - 1, nearest_int(iscale * v)));
        q.* = @intCast(l + nmax);
        const w = v * v;
        sumlx += w * v * int_f32(l);
        suml2 += w * int_f32(l) * int_f32(l);
    }
    var scale: f32 = if (suml2 != 0) sumlx / suml2 else 0; // a NaN suml2 is true in C too
    var best = scale * sumlx;
    var is: i32 = -9;
    while (is <= 9) : (is += 1) {
        if (is == 0) continue;
        iscale = -(int_f32(nmax) + @as(f32, 0.1) * int_f32(is)) / max;
        sumlx = 0;
        suml2 = 0;
        for (x) |v| {
            const l = @max(-nmax, @min(nmax - 1, nearest_int(iscale * v)));
            const w = v * v;
            sumlx += w * v * int_f32(l);
            suml2 += w * int_f32(l) * int_f32(l);
        }
        if (suml2 > 0 and sumlx * sumlx > best * suml2) {
            for (x, L) |v, *q| {
                const l = nearest_int(iscale * v);
                q.* = @intCast(nmax + @max(-nmax, @min(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/// make_qkx2_quants for 32 elements with use_mad false, the way quantize_row_q4_K_ref and
/// quantize_row_q5_K_ref call it: the scale and (in `the_min`) the negated minimum that fit
/// `x` best, in weighted squared error, over nstep + 1 trial scales.
fn make_qkx2_quants(nmax: i32, x: *const [32]f32, weights: *const [32]f32, L: *[32]u8, the_min: *f32, rmin: f32, rdelta: f32, nstep: i32) f32 {
    var min = x[0];
    var max = x[0];
    var sum_w = weights[0];
    var sum_x = sum_w * x[0];
    for (1..32) |i| {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        @memset(L, 0);
        the_min.* = -min;
        return 0;
    }
    var iscale = int_f32(nmax) / (max - min);
    var scale = 1 / iscale;
    var best_error: f32 = 0;
    for (0..32) |i| {
        const l = nearest_int(iscale * (x[i] - min));
        L[i] = @intCast(@max(0, @min(nmax, l)));
        var diff = scale * int_f32(L[i]) + min - x[i];
        diff = diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        the_min.* = -min;
        return scale;
    }
    var is: i32 = 0;
    while (is <= nstep) : (is += 1) {
        iscale = (rmin + rdelta * int_f32(is) + int_f32(nmax)) / (max - min);
        var sum_l: f32 = 0;
        var sum_l2: f32 = 0;
        var sum_xl: f32 = 0;
        var laux: [32]u8 = undefined;
        for (0..32) |i| {
            const l = @max(0, @min(nmax, nearest_int(iscale * (x[i] - min))));
            laux[i] = @intCast(l);
            const w = weights[i];
            sum_l += w * int_f32(l);
            sum_l2 += w * int_f32(l) * int_f32(l);
            sum_xl += w * int_f32(l) * x[i];
        }
        const D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            var this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            var this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            var cur_error: f32 = 0;
            for (0..32) |i| {
                var diff = this_scale * int_f32(laux[i]) + this_min - x[i];
                diff = diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                L.* = laux;
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    the_min.* = -min;
    return scale;
}

/// get_scale_min_k4: sub-block j's 6-bit scale and min from the 12 packed bytes.
fn scale_min_k4(j: usize, q: *const [12]u8) [2]u8 {
    if (j < 4) return .{ q[j] & 63, q[j + 4] & 63 };
    return .{ (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4) };
}

/// The part q4_K and q5_K share: fits every 32-element sub-block (make_qkx2_quants), packs the
/// 6-bit scales and mins with d and dmin, then requantizes `L` (0..nmax) against those.
fn quantize_k_scales(x: *const [qk_k]f32, nmax: i32, rmin: f32, nstep: i32, y_d: *[4]u8, y_scales: *[12]u8, L: *[qk_k]u8) void {
    var mins: [8]f32 = undefined;
    var scales: [8]f32 = undefined;
    var max_scale: f32 = 0; // as we are deducting the min, scales are always positive
    var max_min: f32 = 0;
    for (0..8) |j| {
        const xs = x[32 * j ..][0..32];
        var sum_x2: f32 = 0;
        for (xs) |v| sum_x2 += v * v;
        const av_x = @sqrt(sum_x2 / 32.0);
        var weights: [32]f32 = undefined;
        for (xs, &weights) |v, *w| w.* = av_x + @abs(v);
        scales[j] = make_qkx2_quants(nmax, xs, &weights, L[32 * j ..][0..32], &mins[j], rmin, 0.1, nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const inv_scale: f32 = if (max_scale > 0) 63.0 / max_scale else 0;
    const inv_min: f32 = if (max_min > 0) 63.0 / max_min else 0;
    for (0..8) |j| {
        const ls: u8 = @min(63, low_byte(nearest_int(inv_scale * scales[j])));
        const lm: u8 = @min(63, low_byte(nearest_int(inv_min * mins[j])));
        if (j < 4) {
            y_scales[j] = ls;
            y_scales[j + 4] = lm;
        } else {
            y_scales[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
            y_scales[j - 4] |= (ls >> 4) << 6;
            y_scales[j] |= (lm >> 4) << 6;
        }
    }
    write_f16(y_d[0..2], max_scale / 63.0);
    write_f16(y_d[2..4], max_min / 63.0);
    const d_all = read_f16(y_d[0..2]);
    const dmin = read_f16(y_d[2..4]);
    for (0..8) |j| {
        const sc, const m = scale_min_k4(j, y_scales);
        const d = d_all * int_f32(sc);
        if (d == 0) continue; // C's `if (!d)`: a NaN d goes on
        const dm = dmin * int_f32(m);
        for (0..32) |ii| {
            const l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = @intCast(@max(0, @min(nmax, l)));
        }
    }
}

fn quantize_q4_K(x: *const [qk_k]f32, y: *[144]u8) void {
    var L: [qk_k]u8 = undefined;
    quantize_k_scales(x, 15, -1.0, 20, y[0..4], y[4..16], &L);
    for (0..4) |block| {
        const q = y[16 + 32 * block ..][0..32];
        for (q, 0..) |*out, l| out.* = L[64 * block + l] | (L[64 * block + l + 32] << 4);
    }
}

fn quantize_q5_K(x: *const [qk_k]f32, y: *[176]u8) void {
    var L: [qk_k]u8 = undefined;
    quantize_k_scales(x, 31, -0.5, 15, y[0..4], y[4..16], &L);
    const qh = y[16..48];
    @memset(qh, 0);
    for (0..4) |block| {
        const ql = y[48 + 32 * block ..][0..32];
        const m1: u8 = @as(u8, 1) << @intCast(2 * block);
        const m2: u8 = @as(u8, 2) << @intCast(2 * block);
        for (0..32) |j| {
            var l1 = L[64 * block + j];
            if (l1 > 15) {
                l1 -= 16;
                qh[j] |= m1;
            }
            var l2 = L[64 * block + j + 32];
            if (l2 > 15) {
                l2 -= 16;
                qh[j] |= m2;
            }
            ql[j] = l1 | (l2 << 4);
        }
    }
}

fn quantize_q6_K(x: *const [qk_k]f32, y: *[210]u8) void {
    var L: [qk_k]u8 = undefined;
    var scales: [16]f32 = undefined;
    var max_scale: f32 = 0;
    var max_abs_scale: f32 = 0;
    for (0..16) |ib| {
        const scale = make_qx_quants(16, 32, x[16 * ib ..][0..16], L[16 * ib ..][0..16]);
        scales[ib] = scale;
        const abs_scale = @abs(scale);
        if (abs_scale > max_abs_scale) {
            max_abs_scale = abs_scale;
            max_scale = scale;
        }
    }
    if (max_abs_scale < group_max_eps) {
        @memset(y, 0);
        write_f16(y[208..210], 0);
        return;
    }
    const iscale = -128.0 / max_scale;
    write_f16(y[208..210], 1 / iscale);
    const y_scales = y[192..208];
    for (y_scales, scales) |*out, scale| out.* = low_byte(@min(127, nearest_int(iscale * scale)));
    const d_all = read_f16(y[208..210]);
    for (0..16) |j| {
        const d = d_all * int_f32(@as(i8, @bitCast(y_scales[j])));
        if (d == 0) continue;
        for (0..16) |ii| {
            const l = @max(-32, @min(31, nearest_int(x[16 * j + ii] / d)));
            L[16 * j + ii] = @intCast(l + 32);
        }
    }
    for (0..2) |half| {
        const ql = y[64 * half ..][0..64];
        const qh = y[128 + 32 * half ..][0..32];
        const Lh = L[128 * half ..][0..128];
        for (0..32) |l| {
            ql[l] = (Lh[l] & 0xf) | ((Lh[l + 64] & 0xf) << 4);
            ql[l + 32] = (Lh[l + 32] & 0xf) | ((Lh[l + 96] & 0xf) << 4);
            qh[l] = (Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6);
        }
    }
}

fn quantize_q8_K(x: *const [qk_k]f32, y: *[292]u8) void {
    var max: f32 = 0;
    var amax: f32 = 0;
    for (x) |v| {
        const ax = @abs(v);
        if (ax > amax) {
            amax = ax;
            max = v;
        }
    }
    if (amax == 0) {
        @memset(y, 0); // ggml: d and qs zero, bsums left as they were
        return;
    }
    const iscale = -127.0 / max;
    const qs = y[4..260];
    for (qs, x) |*q, v| q.* = low_byte(@min(127, nearest_int(iscale * v)));
    for (0..16) |j| {
        var sum: i32 = 0;
        for (qs[16 * j ..][0..16]) |q| sum += @as(i8, @bitCast(q));
        std.mem.writeInt(u16, y[260 + 2 * j ..][0..2], @truncate(@as(u32, @bitCast(sum))), .little);
    }
    std.mem.writeInt(u32, y[0..4], @bitCast(1 / iscale), .little);
}

fn dequantize_q4_K(x: *const [144]u8, y: *[qk_k]f32) void {
    const d = read_f16(x[0..2]);
    const min = read_f16(x[2..4]);
    for (0..4) |block| {
        const q = x[16 + 32 * block ..][0..32];
        const sc1, const m1 = scale_min_k4(2 * block, x[4..16]);
        const sc2, const m2 = scale_min_k4(2 * block + 1, x[4..16]);
        const d1 = d * int_f32(sc1);
        const min1 = min * int_f32(m1);
        const d2 = d * int_f32(sc2);
        const min2 = min * int_f32(m2);
        for (0..32) |l| y[64 * block + l] = d1 * int_f32(q[l] & 0xf) - min1;
        for (0..32) |l| y[64 * block + 32 + l] = d2 * int_f32(q[l] >> 4) - min2;
    }
}

fn dequantize_q5_K(x: *const [176]u8, y: *[qk_k]f32) void {
    const d = read_f16(x[0..2]);
    const min = read_f16(x[2..4]);
    const qh = x[16..48];
    for (0..4) |block| {
        const ql = x[48 + 32 * block ..][0..32];
        const sc1, const m1 = scale_min_k4(2 * block, x[4..16]);
        const sc2, const m2 = scale_min_k4(2 * block + 1, x[4..16]);
        const d1 = d * int_f32(sc1);
        const min1 = min * int_f32(m1);
        const d2 = d * int_f32(sc2);
        const min2 = min * int_f32(m2);
        const u_1: u8 = @as(u8, 1) << @intCast(2 * block);
        const u_2: u8 = @as(u8, 2) << @intCast(2 * block);
        for (0..32) |l| {
            const high: i32 = if (qh[l] & u_1 != 0) 16 else 0;
            y[64 * block + l] = d1 * int_f32((ql[l] & 0xf) + high) - min1;
        }
        for (0..32) |l| {
            const high: i32 = if (qh[l] & u_2 != 0) 16 else 0;
            y[64 * block + 32 + l] = d2 * int_f32((ql[l] >> 4) + high) - min2;
        }
    }
}

fn dequantize_q6_K(x: *const [210]u8, y: *[qk_k]f32) void {
    const d = read_f16(x[208..210]);
    for (0..2) |half| {
        const ql = x[64 * half ..][0..64];
        const qh = x[128 + 32 * half ..][0..32];
        const sc = x[192 + 8 * half ..][0..8];
        const out = y[128 * half ..][0..128];
        for (0..32) |l| {
            const is = l / 16;
            const q1: i32 = @as(i32, (ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const q2: i32 = @as(i32, (ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const q3: i32 = @as(i32, (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const q4: i32 = @as(i32, (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            out[l] = d * int_f32(@as(i8, @bitCast(sc[is]))) * int_f32(q1);
            out[l + 32] = d * int_f32(@as(i8, @bitCast(sc[is + 2]))) * int_f32(q2);
            out[l + 64] = d * int_f32(@as(i8, @bitCast(sc[is + 4]))) * int_f32(q3);
            out[l + 96] = d * int_f32(@as(i8, @bitCast(sc[is + 6]))) * int_f32(q4);
        }
    }
}

fn dequantize_q8_K(x: *const [292]u8, y: *[qk_k]f32) void {
    const d: f32 = @bitCast(std.mem.readInt(u32, x[0..4], .little));
    for (y, x[4..260]) |*out, q| out.* = d * int_f32(@as(i8, @bitCast(q)));
}

// ---------------------------------------------------------------------------------------------
// Tests: round trips within each format's error bound, computed in f64.

const testing = std.testing;

const quant_types = [_]DType{ .q8_0, .q4_0, .q4_1, .q5_0, .q5_1, .q8_1 };

/// Largest round-trip error one block may have, from its f64 range: half a step for rounding
/// (a whole step where the format clamps its top level: q4_0, q5_0), plus what rounding d and
/// m to f16 moves the largest level by.
fn error_bound(dtype: DType, x: *const [qk]f32) f64 {
    var amax: f64 = 0;
    var min: f64 = std.math.inf(f64);
    var max: f64 = -std.math.inf(f64);
    for (x) |v| {
        amax = @max(amax, @abs(@as(f64, v)));
        min = @min(min, @as(f64, v));
        max = @max(max, @as(f64, v));
    }
    // Rounding d or m to f16 moves it by at most 2^-11 relative, or half the smallest
    // subnormal step (2^-25) where f16 has no normal number that small.
    const f16_eps = std.math.pow(f64, 2, -11);
    const f16_half_step = std.math.pow(f64, 2, -25);
    const rounded = struct {
        fn by(value: f64, eps: f64, floor: f64) f64 {
            return @max(@abs(value) * eps, floor);
        }
    }.by;
    return switch (dtype) {
        .q8_0, .q8_1 => 0.5 * amax / 127 + 127 * rounded(amax / 127, f16_eps, f16_half_step),
        .q4_0 => amax / 8 + 8 * rounded(amax / 8, f16_eps, f16_half_step),
        .q5_0 => amax / 16 + 16 * rounded(amax / 16, f16_eps, f16_half_step),
        .q4_1 => 0.5 * (max - min) / 15 + 15 * rounded((max - min) / 15, f16_eps, f16_half_step) +
            rounded(min, f16_eps, f16_half_step),
        .q5_1 => 0.5 * (max - min) / 31 + 31 * rounded((max - min) / 31, f16_eps, f16_half_step) +
            rounded(min, f16_eps, f16_half_step),
        else => unreachable,
    };
}

fn roundTrip(dtype: DType, src: []const f32) !void {
    var bytes: [8 * 36]u8 = undefined;
    var back: [8 * qk]f32 = undefined;
    const size: usize = @intCast(row_bytes(dtype, src.len));
    quantize_row(dtype, src, bytes[0..size]);
    dequantize_row(dtype, bytes[0..size], back[0..src.len]);
    var block: usize = 0;
    while (block * qk < src.len) : (block += 1) {
        const x = src[block * qk ..][0..qk];
        const bound = error_bound(dtype, x);
        for (x, back[block * qk ..][0..qk]) |want, got| {
            const err = @abs(@as(f64, got) - @as(f64, want));
            if (!(err <= bound)) {
                std.debug.print("{s}: {d} -> {d}, error {e} > bound {e}\n", .{ @tagName(dtype), want, got, err, bound });
                return error.TestUnexpectedResult;
            }
        }
    }
}

fn randomRows(random: std.Random, rows: *[8 * qk]f32) void {
    for (rows, 0..) |*v, i| {
        const block = i / qk;
        const u = random.float(f32) * 2 - 1;
        v.* = switch (block) {
            0 => u, // [-1, 1)
            1 => u * 1000, // large
            2 => u * 1e-3, // small
            3 => -@abs(u) - 0.5, // negative only
            4 => @abs(u) + 3, // positive only, away from zero
            5 => if (i % 7 == 0) u * 50 else u, // outliers
            6 => 0.25, // all equal
            else => 0, // all zero
        };
    }
}

test "quant: every block format round-trips within its error bound" {
    var prng = std.Random.DefaultPrng.init(0x5eed);
    var rows: [8 * qk]f32 = undefined;
    for (0..20) |_| {
        randomRows(prng.random(), &rows);
        inline for (quant_types) |dtype| try roundTrip(dtype, &rows);
    }
}

test "quant: zeros and equal values reproduce exactly where the format can" {
    const zeros = [_]f32{0} ** qk;
    inline for (quant_types) |dtype| {
        var bytes: [36]u8 = undefined;
        var back: [qk]f32 = undefined;
        const size: usize = @intCast(row_bytes(dtype, qk));
        quantize_row(dtype, &zeros, bytes[0..size]);
        dequantize_row(dtype, bytes[0..size], &back);
        for (back) |v| try testing.expectEqual(@as(f32, 0), v);
    }
    // q4_1 / q5_1 store an all-equal block as its minimum with d = 0.
    const equal = [_]f32{1.5} ** qk;
    inline for (.{ DType.q4_1, DType.q5_1 }) |dtype| {
        var bytes: [24]u8 = undefined;
        var back: [qk]f32 = undefined;
        const size: usize = @intCast(row_bytes(dtype, qk));
        quantize_row(dtype, &equal, bytes[0..size]);
        dequantize_row(dtype, bytes[0..size], &back);
        for (back) |v| try testing.expectEqual(@as(f32, 1.5), v);
    }
}

test "quant: q4_0 of 0..31 gives ggml's bytes" {
    // amax = 31 (positive): d = -31/8 = -3.875 (f16 0xc3c0), x*id + 8.5 truncated, capped at 15.
    var x: [qk]f32 = undefined;
    for (&x, 0..) |*v, i| v.* = @floatFromInt(i);
    var y: [18]u8 = undefined;
    quantize_row(.q4_0, &x, &y);
    try testing.expectEqual(@as(u16, 0xc3c0), std.mem.readInt(u16, y[0..2], .little));
    for (0..16) |j| {
        const lo: u8 = @intFromFloat(@trunc(@as(f32, @floatFromInt(j)) * (1.0 / -3.875) + 8.5));
        const hi: u8 = @intFromFloat(@trunc(@as(f32, @floatFromInt(j + 16)) * (1.0 / -3.875) + 8.5));
        try testing.expectEqual(@as(u8, @min(15, lo)) | (@as(u8, @min(15, hi)) << 4), y[2 + j]);
    }
}

test "quant: q8_1 stores d times the sum of its quants" {
    var x: [qk]f32 = undefined;
    for (&x, 0..) |*v, i| v.* = @as(f32, @floatFromInt(i)) - 10;
    var y: [36]u8 = undefined;
    quantize_row(.q8_1, &x, &y);
    const d = fp16_to_fp32(std.mem.readInt(u16, y[0..2], .little));
    try testing.expectEqual(fp16_to_fp32(fp32_to_fp16(21.0 / 127.0)), d);
    var sum: i32 = 0;
    for (y[4..]) |q| sum += @as(i8, @bitCast(q));
    const s = std.mem.readInt(u16, y[2..4], .little);
    try testing.expectEqual(fp32_to_fp16(@as(f32, @floatFromInt(sum)) * (21.0 / 127.0)), s);
}

test "quant: bf16 rounds to nearest even and keeps NaN quiet" {
    try testing.expectEqual(@as(u16, 0x3f80), fp32_to_bf16(1.0));
    try testing.expectEqual(@as(u16, 0x3f80), fp32_to_bf16(@bitCast(@as(u32, 0x3f808000)))); // tie, even stays
    try testing.expectEqual(@as(u16, 0x3f82), fp32_to_bf16(@bitCast(@as(u32, 0x3f818000)))); // tie, odd rounds up
    try testing.expectEqual(@as(u16, 0x3f81), fp32_to_bf16(@bitCast(@as(u32, 0x3f808001))));
    try testing.expectEqual(@as(u16, 0x7f80), fp32_to_bf16(std.math.inf(f32)));
    try testing.expectEqual(@as(u16, 0x7f80), fp32_to_bf16(std.math.floatMax(f32))); // overflows
    try testing.expectEqual(@as(u16, 0x7fc0), fp32_to_bf16(@bitCast(@as(u32, 0x7f800001)))); // sNaN quieted
    try testing.expectEqual(@as(u16, 0xffc1), fp32_to_bf16(@bitCast(@as(u32, 0xff81ffff))));
    var prng = std.Random.DefaultPrng.init(7);
    for (0..1000) |_| {
        const x = (prng.random().float(f32) * 2 - 1) * 1e6;
        const back: f64 = bf16_to_fp32(fp32_to_bf16(x));
        try testing.expect(@abs(back - x) <= @abs(@as(f64, x)) * std.math.pow(f64, 2, -8));
    }
}

test "quant: NaN, infinities and huge values never trap" {
    const specials = [_]f32{ std.math.nan(f32), std.math.inf(f32), -std.math.inf(f32), std.math.floatMax(f32), -std.math.floatMax(f32), 1e-45, 0, -0.0 };
    var x: [qk]f32 = undefined;
    for (&x, 0..) |*v, i| v.* = specials[i % specials.len];
    inline for (quant_types ++ [_]DType{.bf16}) |dtype| {
        var bytes: [64]u8 = undefined;
        var back: [qk]f32 = undefined;
        const size: usize = @intCast(row_bytes(dtype, qk));
        quantize_row(dtype, &x, bytes[0..size]);
        dequantize_row(dtype, bytes[0..size], &back);
    }
    try testing.expectEqual(@as(u8, 0), c_float_to_byte(std.math.nan(f32)));
    try testing.expectEqual(@as(u8, 0), c_float_to_byte(3e9));
    try testing.expectEqual(@as(u8, 0xff), c_float_to_byte(-1.5));
    try testing.expectEqual(@as(u16, 0x7e00), fp32_to_fp16(std.math.nan(f32)) & 0x7fff);
}

// ---------------------------------------------------------------------------------------------
// k-quant tests (the bytes themselves are compared with ggml's in tests/quant_test.ts)

const k_types = [_]DType{ .q4_K, .q5_K, .q6_K, .q8_K };

test "quant: nearest_int rounds half to even, as ggml's f32 bit trick does" {
    try testing.expectEqual(@as(i32, 2), nearest_int(2.5));
    try testing.expectEqual(@as(i32, 4), nearest_int(3.5));
    try testing.expectEqual(@as(i32, -2), nearest_int(-2.5));
    try testing.expectEqual(@as(i32, 0), nearest_int(-0.4));
    try testing.expectEqual(@as(i32, 1), nearest_int(0.5000001));
    try testing.expectEqual(@as(i32, 4194303), nearest_int(4194303));
    try testing.expectEqual(@as(i32, -4194303), nearest_int(-4194303));
    try testing.expectEqual(@as(i32, 0), nearest_int(std.math.nan(f32))); // never a trap
}

/// Round trip of one super-block: every value within `steps` steps, in f64. A step is q4_K's
/// and q5_K's 32-value sub-block max - min over nmax, q6_K's 2 * amax of its 16 values over
/// 63, q8_K's 2 * amax of the 256 over 254. More than half a step: ggml rounds the sub-block
/// scales to 6 or 8 bits and fits them by weighted error, not by the largest one.
fn kRoundTrip(dtype: DType, x: *const [qk_k]f32, steps: f64) !void {
    var bytes: [292]u8 = undefined;
    var back: [qk_k]f32 = undefined;
    const size: usize = @intCast(row_bytes(dtype, qk_k));
    quantize_row(dtype, x, bytes[0..size]);
    dequantize_row(dtype, bytes[0..size], &back);
    const span: usize, const levels: f64 = switch (dtype) {
        .q4_K => .{ 32, 15 },
        .q5_K => .{ 32, 31 },
        .q6_K => .{ 16, 63 },
        .q8_K => .{ 256, 254 },
        else => unreachable,
    };
    for (x, back, 0..) |want, got, i| {
        const sub = x[i - i % span ..][0..span];
        var lo: f64 = std.math.inf(f64);
        var hi: f64 = -std.math.inf(f64);
        var amax: f64 = 0;
        for (sub) |v| {
            lo = @min(lo, v);
            hi = @max(hi, v);
            amax = @max(amax, @abs(@as(f64, v)));
        }
        const range = if (dtype == .q6_K or dtype == .q8_K) 2 * amax else hi - lo;
        const err = @abs(@as(f64, got) - want);
        if (!(err <= steps * range / levels + 1e-30)) {
            std.debug.print("{s}[{d}]: {d} -> {d}, error {e} > {d} steps of {e}\n", .{ @tagName(dtype), i, want, got, err, steps, range / levels });
            return error.TestUnexpectedResult;
        }
    }
}

test "quant: k-quants round-trip within 1.5 steps of each sub-block's range" {
    var prng = std.Random.DefaultPrng.init(0x4b);
    const random = prng.random();
    var x: [qk_k]f32 = undefined;
    for (0..50) |round| {
        const scale = std.math.pow(f32, 10, @as(f32, @floatFromInt(round % 7)) - 3);
        for (&x) |*v| v.* = random.floatNorm(f32) * scale;
        inline for (k_types) |dtype| try kRoundTrip(dtype, &x, 1.5);
    }
}

test "quant: k-quants of zeros are zero; q8_K and q6_K of an all-zero block are zero bytes" {
    const zeros = [_]f32{0} ** qk_k;
    inline for (k_types) |dtype| {
        var bytes: [292]u8 = undefined;
        var back: [qk_k]f32 = undefined;
        const size: usize = @intCast(row_bytes(dtype, qk_k));
        quantize_row(dtype, &zeros, bytes[0..size]);
        dequantize_row(dtype, bytes[0..size], &back);
        for (back) |v| try testing.expectEqual(@as(f32, 0), v);
        if (dtype == .q6_K or dtype == .q8_K) {
            for (bytes[0..size]) |b| try testing.expectEqual(@as(u8, 0), b);
        }
    }
}

test "quant: q8_K of -127..128 ramps stores d = 1/iscale as f32 and the sums of 16" {
    var x: [qk_k]f32 = undefined;
    for (&x, 0..) |*v, i| v.* = @as(f32, @floatFromInt(i)) - 127.0; // -127 .. 128, max 128
    var y: [292]u8 = undefined;
    quantize_row(.q8_K, &x, &y);
    const iscale: f32 = -127.0 / 128.0;
    try testing.expectEqual(1 / iscale, @as(f32, @bitCast(std.mem.readInt(u32, y[0..4], .little))));
    for (x, y[4..260]) |v, q| {
        try testing.expectEqual(@as(i8, @intCast(@min(127, nearest_int(iscale * v)))), @as(i8, @bitCast(q)));
    }
    for (0..16) |j| {
        var sum: i32 = 0;
        for (y[4 + 16 * j ..][0..16]) |q| sum += @as(i8, @bitCast(q));
        try testing.expectEqual(sum, std.mem.readInt(i16, y[260 + 2 * j ..][0..2], .little));
    }
}

test "quant: k-quants never trap on NaN, infinities and the largest floats" {
    const specials = [_]f32{ std.math.nan(f32), std.math.inf(f32), -std.math.inf(f32), std.math.floatMax(f32), -std.math.floatMax(f32), 1e-45, 0, -0.0, 1.0 };
    var x: [qk_k]f32 = undefined;
    for (&x, 0..) |*v, i| v.* = specials[i % specials.len];
    inline for (k_types) |dtype| {
        var bytes: [292]u8 = undefined;
        var back: [qk_k]f32 = undefined;
        const size: usize = @intCast(row_bytes(dtype, qk_k));
        quantize_row(dtype, &x, bytes[0..size]);
        dequantize_row(dtype, bytes[0..size], &back);
    }
}
