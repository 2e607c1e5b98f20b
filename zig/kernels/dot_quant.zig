//! Fused dot products of one quantized weight row with one quantized activation row, as ggml's
//! ggml_vec_dot_<weights>_<activations> (ggml-cpu/arch/x86/quants.c) compute them: per block,
//! integer products of the quants summed exactly in i16/i32 lanes, then scaled once by the two
//! blocks' float scales; the offsets of the weight formats with a minimum come from the
//! activation block's stored sums (q8_1's s, q8_K's bsums), as ggml's do.
//!
//!   dot_q4_1_q8_1   x: n/32 q4_1 blocks (20 bytes)   y: n/32 q8_1 blocks (36 bytes)
//!   dot_q5_0_q8_0   x: n/32 q5_0 blocks (22 bytes)   y: n/32 q8_0 blocks (34 bytes)
//!   dot_q5_1_q8_1   x: n/32 q5_1 blocks (24 bytes)   y: n/32 q8_1 blocks (36 bytes)
//!   dot_q4_K_q8_K   x: n/256 q4_K blocks (144 bytes) y: n/256 q8_K blocks (292 bytes)
//!   dot_q5_K_q8_K   x: n/256 q5_K blocks (176 bytes) y: n/256 q8_K blocks (292 bytes)
//!   dot_q6_K_q8_K   x: n/256 q6_K blocks (210 bytes) y: n/256 q8_K blocks (292 bytes)
//!   dot_q{4,5,6}_K_q8_K_tiled   the same, in the float steps of ggml's tiled matmul
//!
//! y is the activation row of the same n elements as quant.zig's quantize_row writes it (ggml's
//! quantize_row_q8_*_ref), so its quants lie in -127..127. Every pair of u8 x i8 products then
//! stays below pmaddubsw's i16 saturation (the largest, q6_K's 63 * 127 * 2 = 16002; even -128
//! would be safe), so the integer sums are exact and equal those of ggml's generic code. q5_0's
//! signed values go through ggml's sign trick (|x| times y with x's sign), which like ggml's
//! needs y != -128. Any alignment; n may be 0 (the result is 0).
//!
//! pmaddubsw (u8 x i8 pairs into i16) and pmaddwd (i16 x i16 pairs into i32) are LLVM's x86
//! intrinsics in the x86 builds with AVX2 (LLVM does not keep the portable pattern: once it
//! knows an operand is a nibble it drops the saturation, then the match, and multiplies in i16
//! instead); other targets and backends get the portable @Vector form, which a test checks
//! against the intrinsics. Everything else is plain @Vector code: 32-byte vectors per 32-element
//! block and 64-byte vectors per 64 elements of a k-quant, so the AVX2 build gets ggml's ymm
//! code and the AVX-512 build one zmm instruction where AVX2 takes two.
//!
//! Float order: the 32-element blocks accumulate (integer sum) * (d_x * d_y) in one vector of 8
//! f32 lanes, block after block (fused), sum it in hsum_float_8's order and add the minimum
//! terms m_x * s_y summed one after another (each product of two f16 values is exact, so fused
//! or not it rounds once): ggml's AVX2 code, bit for bit (tests/ggml_exact_dots_test.ts checks
//! q5_0 and q5_1 against ggml's outputs). The k-quants do as ggml's AVX2 code does too (it has no
//! AVX-512 branch, so both ggml builds compute it): per super-block, 8 i32 lanes whose lane l
//! sums elements 4l..4l+3 of every 32-element sub-block times its scale (q6_K: less 32 * scale *
//! bsums of sub-block l), converted and fused into one 8-lane accumulator with d = d_y * d_x,
//! summed in hsum_float_8's order at the end. The min terms -d_y * dmin_x * (mins x bsums):
//! q4_K fuses them into 4 more lanes (lane q: sub-blocks 2q and 2q+1), summed (m0 + m2) +
//! (m1 + m3) and added last; q5_K sums each super-block's in integers and fuses it into one
//! float (gcc contracts ggml's `summs += dmin * sum`), added last. The AVX-512 build forms the
//! integer lanes in zmm registers (16 lanes: two sub-blocks side by side) and adds the halves
//! before the float step, which leaves ggml's integers. From 8 src1 columns on ggml's mul_mat
//! does not call these but its tiled matmul (ggml-cpu/tiled/), which scales each super-block's
//! integer totals itself: the _tiled dots (KOrder). tests/ggml_exact_dots_test.ts checks both
//! orders of all three against ggml's outputs, bit for bit. The tests below compare every dot
//! with the f64 dot of the dequantized rows and with ggml's generic code within a bound on the
//! rounding of any summation order (not bitwise: the generic code sums in another order).

const std = @import("std");
const builtin = @import("builtin");
const quant = @import("../quant.zig");
const common = @import("common.zig");

const assert = std.debug.assert;

pub const q4_1_bytes = 20;
pub const q5_0_bytes = 22;
pub const q5_1_bytes = 24;
pub const q8_0_bytes = 34;
pub const q8_1_bytes = 36;
pub const q4_K_bytes = 144;
pub const q5_K_bytes = 176;
pub const q6_K_bytes = 210;
pub const q8_K_bytes = 292;

const U8x32 = @Vector(32, u8);
const I8x32 = @Vector(32, i8);
const U8x64 = @Vector(64, u8);
const I8x64 = @Vector(64, i8);
const I16x16 = @Vector(16, i16);
const I16x32 = @Vector(32, i16);
const I32x8 = @Vector(8, i32);
const I32x16 = @Vector(16, i32);
const F32x8 = @Vector(8, f32);
const F32x16 = @Vector(16, f32);

// ---------------------------------------------------------------------------------------------
// Vector primitives

fn pairIndices(comptime n: usize, comptime first: usize) [n]i32 {
    @setEvalBranchQuota(10_000);
    var mask: [n]i32 = undefined;
    for (&mask, 0..) |*m, i| m.* = @intCast(2 * i + first);
    return mask;
}

/// Where this object may call the x86 instructions through LLVM's intrinsics: the LLVM backend
/// (every build of the library and the tests) and the CPU model of this kernel variant. LLVM
/// does not reliably pick pmaddubsw from the portable pattern: once it knows an operand is a
/// nibble it drops the saturation and the pattern, and multiplies in i16 instead.
const llvm = builtin.zig_backend == .stage2_llvm;
const has_avx2 = llvm and builtin.cpu.arch == .x86_64 and builtin.cpu.has(.x86, .avx2);
const has_avx512bw = has_avx2 and builtin.cpu.has(.x86, .avx512bw);

extern fn @"llvm.x86.avx2.pmadd.ub.sw"(a: U8x32, b: I8x32) I16x16;
extern fn @"llvm.x86.avx512.pmaddubs.w.512"(a: U8x64, b: I8x64) I16x32;
extern fn @"llvm.x86.avx2.pmadd.wd"(a: I16x16, b: I16x16) I32x8;
extern fn @"llvm.x86.avx512.pmaddw.d.512"(a: I16x32, b: I16x32) I32x16;

/// pmaddubsw: out[i] = a[2i] * b[2i] + a[2i+1] * b[2i+1] (u8 x i8), saturated to i16.
inline fn maddubs(comptime n: usize, a: @Vector(n, u8), b: @Vector(n, i8)) @Vector(n / 2, i16) {
    if (n == 64 and has_avx512bw) return @"llvm.x86.avx512.pmaddubs.w.512"(a, b);
    if (n == 64 and has_avx2) {
        const a2: [2]U8x32 = @bitCast(a);
        const b2: [2]I8x32 = @bitCast(b);
        return std.simd.join(@"llvm.x86.avx2.pmadd.ub.sw"(a2[0], b2[0]), @"llvm.x86.avx2.pmadd.ub.sw"(a2[1], b2[1]));
    }
    if (n == 32 and has_avx2) return @"llvm.x86.avx2.pmadd.ub.sw"(a, b);
    return maddubsPortable(n, a, b);
}

fn maddubsPortable(comptime n: usize, a: @Vector(n, u8), b: @Vector(n, i8)) @Vector(n / 2, i16) {
    const W = @Vector(n / 2, i32);
    const a0: W = @shuffle(u8, a, undefined, pairIndices(n / 2, 0));
    const a1: W = @shuffle(u8, a, undefined, pairIndices(n / 2, 1));
    const b0: W = @shuffle(i8, b, undefined, pairIndices(n / 2, 0));
    const b1: W = @shuffle(i8, b, undefined, pairIndices(n / 2, 1));
    const sum = a0 * b0 + a1 * b1;
    return @intCast(@min(@max(sum, @as(W, @splat(-32768))), @as(W, @splat(32767))));
}

/// pmaddwd: out[i] = a[2i] * b[2i] + a[2i+1] * b[2i+1] (i16 x i16 into i32, wrapping where
/// both pairs are -32768, which never happens here).
inline fn madd(comptime n: usize, a: @Vector(n, i16), b: @Vector(n, i16)) @Vector(n / 2, i32) {
    if (n == 32 and has_avx512bw) return @"llvm.x86.avx512.pmaddw.d.512"(a, b);
    if (n == 32 and has_avx2) {
        const a2: [2]I16x16 = @bitCast(a);
        const b2: [2]I16x16 = @bitCast(b);
        return std.simd.join(@"llvm.x86.avx2.pmadd.wd"(a2[0], b2[0]), @"llvm.x86.avx2.pmadd.wd"(a2[1], b2[1]));
    }
    if (n == 16 and has_avx2) return @"llvm.x86.avx2.pmadd.wd"(a, b);
    return maddPortable(n, a, b);
}

fn maddPortable(comptime n: usize, a: @Vector(n, i16), b: @Vector(n, i16)) @Vector(n / 2, i32) {
    const W = @Vector(n / 2, i32);
    const a0: W = @shuffle(i16, a, undefined, pairIndices(n / 2, 0));
    const a1: W = @shuffle(i16, a, undefined, pairIndices(n / 2, 1));
    const b0: W = @shuffle(i16, b, undefined, pairIndices(n / 2, 0));
    const b1: W = @shuffle(i16, b, undefined, pairIndices(n / 2, 1));
    return a0 *% b0 +% a1 *% b1;
}

inline fn splat8(comptime n: usize, value: u8) @Vector(n, u8) {
    return @splat(value);
}

inline fn shr(comptime n: usize, v: @Vector(n, u8), comptime bits: u3) @Vector(n, u8) {
    return v >> @as(@Vector(n, u3), @splat(bits));
}

inline fn shl(comptime n: usize, v: @Vector(n, u8), comptime bits: u3) @Vector(n, u8) {
    return v << @as(@Vector(n, u3), @splat(bits));
}

/// A 32-element block's 16 bytes of nibbles as 32 values: low nibbles (elements 0-15), then
/// high nibbles (16-31). The 16 bytes go to both halves (a broadcast load) and the upper half
/// shifts right by 4 in 32-bit lanes (the mask drops what crosses bytes): no lane-crossing
/// shuffle, which would compete with the rest for the one shuffle port.
inline fn nibbles32(qs: *const [16]u8) U8x32 {
    const v: @Vector(16, u8) = qs.*;
    const both: @Vector(8, u32) = @bitCast(std.simd.join(v, v));
    const shifted = both >> @Vector(8, u5){ 0, 0, 0, 0, 4, 4, 4, 4 };
    return @as(U8x32, @bitCast(shifted)) & splat8(32, 0x0f);
}

/// Bit j of the little-endian u32 at `qh` as lane j: true where set.
inline fn bits32(qh: *const [4]u8) @Vector(32, bool) {
    return @bitCast(std.mem.readInt(u32, qh, .little));
}

/// Sum of the 32 products of a u8 and an i8 block, in 8 i32 lanes.
inline fn dotUnsigned32(x: U8x32, y: I8x32) I32x8 {
    return madd(16, maddubs(32, x, y), @splat(1));
}

/// Sum of the 32 products of two i8 blocks, in 8 i32 lanes (|x| <= 16 here): ggml's sign trick,
/// |x| times y with x's sign, so pmaddubsw takes it.
inline fn dotSigned32(x: I8x32, y: I8x32) I32x8 {
    const zero: I8x32 = @splat(0);
    const signed_y = @select(i8, x < zero, zero -% y, y);
    return dotUnsigned32(@abs(x), signed_y);
}

/// Sum of 8 f32 lanes as a tree (halves, quarters, pairs), like ggml's hsum_float_8; @reduce
/// on floats adds the lanes one after another.
inline fn hsum8(v: F32x8) f32 {
    const halves: [2]@Vector(4, f32) = @bitCast(v);
    const four = halves[0] + halves[1];
    const two = @shuffle(f32, four, undefined, [2]i32{ 0, 1 }) + @shuffle(f32, four, undefined, [2]i32{ 2, 3 });
    return two[0] + two[1];
}

fn f16At(bytes: *const [2]u8) f32 {
    return quant.fp16_to_fp32(std.mem.readInt(u16, bytes, .little));
}

fn f32At(bytes: *const [4]u8) f32 {
    return @bitCast(std.mem.readInt(u32, bytes, .little));
}

// ---------------------------------------------------------------------------------------------
// 32-element blocks

const Small = enum { q4_1, q5_0, q5_1 };

fn xBytes(comptime kind: Small) usize {
    return switch (kind) {
        .q4_1 => q4_1_bytes,
        .q5_0 => q5_0_bytes,
        .q5_1 => q5_1_bytes,
    };
}

fn yBytes(comptime kind: Small) usize {
    return if (kind == .q5_0) q8_0_bytes else q8_1_bytes;
}

/// One block's integer dot (8 i32 lanes) and its scales: lane 0 of `scales` is d_x * d_y, lane 1
/// m_x * s_y (q4_1, q5_1; lanes 2 and 3 are their mirror images and unused).
const BlockDot = struct { ints: I32x8, scales: @Vector(4, f32) };

/// The two f16 pairs heading an x and a y block ({d, m} and {d, s}; q5_0 and q8_0 use only the
/// first), converted together and multiplied crosswise: {d_x * d_y, m_x * s_y, ...}.
inline fn blockScales(xb: *const [4]u8, yb: *const [4]u8) @Vector(4, f32) {
    const bits = @as(u64, std.mem.readInt(u32, xb, .little)) | @as(u64, std.mem.readInt(u32, yb, .little)) << 32;
    const halves: @Vector(4, f16) = @bitCast(bits);
    const values: @Vector(4, f32) = common.widen_f16(4, halves);
    return values * @shuffle(f32, values, undefined, [4]i32{ 2, 3, 0, 1 });
}

inline fn blockDot(comptime kind: Small, xb: *const [xBytes(kind)]u8, yb: *const [yBytes(kind)]u8) BlockDot {
    const qy: I8x32 = @bitCast(yb[yBytes(kind) - 32 ..][0..32].*);
    const scales = blockScales(xb[0..4], yb[0..4]);
    switch (kind) {
        .q4_1 => return .{ .ints = dotUnsigned32(nibbles32(xb[4..20]), qy), .scales = scales },
        .q5_0 => {
            // (nibble | fifth bit << 4) - 16: the nibble where the bit is set, nibble - 16
            // (0xf0 | nibble as i8) where it is clear.
            const high = @select(u8, bits32(xb[2..6]), splat8(32, 0), splat8(32, 0xf0));
            const qx: I8x32 = @bitCast(nibbles32(xb[6..22]) | high);
            return .{ .ints = dotSigned32(qx, qy), .scales = scales };
        },
        .q5_1 => {
            const high = @select(u8, bits32(xb[4..8]), splat8(32, 0x10), splat8(32, 0));
            return .{ .ints = dotUnsigned32(nibbles32(xb[8..24]) | high, qy), .scales = scales };
        },
    }
}

fn dotSmall(comptime kind: Small, x: []const u8, y: []const u8) f32 {
    const xs = comptime xBytes(kind);
    const ys = comptime yBytes(kind);
    assert(x.len % xs == 0);
    const blocks = x.len / xs;
    assert(y.len == blocks * ys);
    // One accumulator, the blocks in order, as ggml's AVX2 loops (no unrolling into several:
    // that would sum in another order).
    var acc: F32x8 = @splat(0);
    var mins: @Vector(4, f32) = @splat(0); // lane 1: sum of m_x * s_y, block after block
    for (0..blocks) |i| {
        const a = blockDot(kind, x[i * xs ..][0..xs], y[i * ys ..][0..ys]);
        acc = common.fma(F32x8, @splat(a.scales[0]), @floatFromInt(a.ints), acc);
        if (kind != .q5_0) mins += a.scales;
    }
    return hsum8(acc) + mins[1];
}

/// ggml_vec_dot_q4_1_q8_1: x is n/32 q4_1 blocks, y n/32 q8_1 blocks of the same n elements.
/// sum over blocks of d_x * d_y * (nibbles . y quants) + m_x * s_y.
pub fn dot_q4_1_q8_1(x: []const u8, y: []const u8) f32 {
    return dotSmall(.q4_1, x, y);
}

/// ggml_vec_dot_q5_0_q8_0: x is n/32 q5_0 blocks, y n/32 q8_0 blocks of the same n elements.
/// sum over blocks of d_x * d_y * ((5-bit values - 16) . y quants).
pub fn dot_q5_0_q8_0(x: []const u8, y: []const u8) f32 {
    return dotSmall(.q5_0, x, y);
}

/// ggml_vec_dot_q5_1_q8_1: x is n/32 q5_1 blocks, y n/32 q8_1 blocks of the same n elements.
/// sum over blocks of d_x * d_y * (5-bit values . y quants) + m_x * s_y.
pub fn dot_q5_1_q8_1(x: []const u8, y: []const u8) f32 {
    return dotSmall(.q5_1, x, y);
}

// ---------------------------------------------------------------------------------------------
// k-quants (256-element super-blocks against q8_K)

const kmask1: u32 = 0x3f3f3f3f;
const kmask2: u32 = 0x0f0f0f0f;
const kmask3: u32 = 0x03030303;

/// q4_K's and q5_K's twelve scale bytes (the first 12 of `bytes`) as 16 i16: the eight 6-bit
/// sub-block scales, then the eight 6-bit mins (ggml's utmp shuffle; quant.zig's scale_min_k4
/// for each j). All in one vector register from one load: built from scalar words, LLVM
/// inserts them into a register it picks freely, and picked the min accumulator, which chained
/// every super-block to the last one's float work.
inline fn scalesAndMins(bytes: *const [16]u8) I16x16 {
    const u: @Vector(4, u32) = @bitCast(bytes.*);
    // Lanes {u0 & k1, (u2 & k2) | ((u0 >> 6) & k3) << 4, u1 & k1, ((u2 >> 4) & k2) | ((u1 >> 6) & k3) << 4}.
    const p = @shuffle(u32, u, undefined, [4]i32{ 0, 2, 1, 2 });
    const q = @shuffle(u32, u, undefined, [4]i32{ 0, 0, 1, 1 });
    const low = (p >> @Vector(4, u5){ 0, 0, 0, 4 }) & @Vector(4, u32){ kmask1, kmask2, kmask1, kmask2 };
    const high = ((q >> @splat(6)) & @Vector(4, u32){ 0, kmask3, 0, kmask3 }) << @splat(4);
    const values: @Vector(16, u8) = @bitCast(low | high);
    return values;
}

/// Lane i of 32 i16: `sm[first + i / per]`.
inline fn spreadScales(sm: I16x16, comptime first: usize, comptime per: usize) I16x32 {
    return @shuffle(i16, sm, undefined, blk: {
        var mask: [32]i32 = undefined;
        for (&mask, 0..) |*m, i| m.* = @intCast(first + i / per);
        break :blk mask;
    });
}

/// The min term of one q4_K / q5_K super-block: sum over 16-element groups j of
/// bsums[j] * mins[j / 2], in 8 i32 lanes.
inline fn minProducts(sm: I16x16, yb: *const [q8_K_bytes]u8) I32x8 {
    const bsums: I16x16 = @bitCast(yb[260..292].*);
    const mins: I16x16 = @shuffle(i16, sm, undefined, blk: {
        var mask: [16]i32 = undefined;
        for (&mask, 0..) |*m, i| m.* = @intCast(8 + i / 2);
        break :blk mask;
    });
    return madd(16, bsums, mins);
}

const KKind = enum { q4_K, q5_K, q6_K };

fn kBytes(comptime kind: KKind) usize {
    return switch (kind) {
        .q4_K => q4_K_bytes,
        .q5_K => q5_K_bytes,
        .q6_K => q6_K_bytes,
    };
}

/// Which of ggml's two x86 products of k-quant rows a dot reproduces. Both take the same exact
/// integer sums per super-block and differ in the float steps after them:
/// - vec_dot: ggml_vec_dot_q*_K_q8_K (arch/x86/quants.c, its __AVX2__ branch), which ggml's
///   mul_mat runs for each element when src1 has fewer than `tiled_columns_min` columns;
/// - tiled: ggml's tiled k-quant matmul (ggml-cpu/tiled/, on unless GGML_CPU_TILED_MM=0), which
///   takes the whole mul_mat from `tiled_columns_min` columns on. Per element and super-block it
///   scales the super-block's integer totals: r = float(S) * d_x, r = r - dmin_x * float(M)
///   (fused), sum = sum + r * d_y (fused; gcc contracts the AVX-512 kernel's mul and add), super-
///   blocks in order. Its AVX2 and AVX-512 (VNNI) kernels compute the same bits.
pub const KOrder = enum { vec_dot, tiled };

/// ggml_tiled_min_batch: from this many src1 columns (ne[1]) on, ggml's mul_mat of k-quant
/// weights (not repacked) is the tiled matmul.
pub const tiled_columns_min = 8;

/// One super-block's integer sums. `sums`: ggml's AVX2 sumi lanes, lane l holding elements
/// 4l..4l+3 of every 32-element sub-block times its scale (q6_K: less 32 * scale * bsums of
/// sub-block l, its q8sclsub). `mins` (q4_K, q5_K): lane p holds mins[p] * (bsums[2p] +
/// bsums[2p+1]). The integers are exact, so only which lane holds what matters.
const KSums = struct { sums: I32x8, mins: I32x8 };

/// 32 bytes in both halves of a 64-byte vector (one broadcast load on AVX-512).
inline fn duplicate(bytes: *const [32]u8) U8x64 {
    const v: U8x32 = bytes.*;
    return std.simd.join(v, v);
}

/// The halves of `v` shifted by `low` and `high` bits in 32-bit lanes (bits cross into the
/// neighbouring byte; callers mask them off): one variable shift, no shuffle.
inline fn shiftHalves(v: U8x64, comptime direction: enum { left, right }, comptime low: u5, comptime high: u5) U8x64 {
    const words: @Vector(16, u32) = @bitCast(v);
    const counts: @Vector(16, u5) = [_]u5{low} ** 8 ++ [_]u5{high} ** 8;
    return @bitCast(if (direction == .right) words >> counts else words << counts);
}

/// ggml's 8 sumi lanes from a 16-lane sum whose lanes l and l + 8 cover the same elements of two
/// sub-blocks (the AVX-512 build's zmm form).
inline fn ggmlLanes(sumi: I32x16) I32x8 {
    const halves: [2]I32x8 = @bitCast(sumi);
    return halves[0] + halves[1];
}

inline fn sums45K(comptime kind: KKind, xb: *const [kBytes(kind)]u8, yb: *const [q8_K_bytes]u8) KSums {
    const sm = scalesAndMins(xb[4..20]);
    const qs_at = if (kind == .q4_K) 16 else 48;
    var sumi: I32x16 = @splat(0);
    const qh: U8x64 = if (kind == .q5_K) duplicate(xb[16..48]) else undefined;
    inline for (0..4) |j| {
        // Sub-blocks 2j (low nibbles) and 2j+1 (high nibbles) of qs[32j..32j+32], side by
        // side: the 32 bytes in both halves, the upper half shifted right by 4.
        var values = duplicate(xb[qs_at + 32 * j ..][0..32]);
        values = shiftHalves(values, .right, 0, 4) & splat8(64, 0x0f);
        if (kind == .q5_K) {
            // Fifth bits: bit 2j (low half) and 2j+1 (upper half) of qh[l], moved to bit 4.
            values |= shiftHalves(shiftHalves(qh, .right, 2 * j, 2 * j + 1), .left, 4, 4) & splat8(64, 0x10);
        }
        const q8: I8x64 = @bitCast(yb[4 + 64 * j ..][0..64].*);
        sumi += madd(32, maddubs(64, values, q8), spreadScales(sm, 2 * j, 16));
    }
    return .{ .sums = ggmlLanes(sumi), .mins = minProducts(sm, yb) };
}

/// Half `half` of a q6_K block's unsigned 6-bit values (ql's nibbles with qh's two bits), in
/// the two 64-byte vectors that multiply the activation's q8 bytes 128 half .. + 64 and + 64 ..
/// + 128, as ggml's AVX2 code builds them.
inline fn q6KValues(xb: *const [q6_K_bytes]u8, comptime half: usize) [2]U8x64 {
    const ql1: U8x32 = xb[64 * half ..][0..32].*;
    const ql2: U8x32 = xb[64 * half + 32 ..][0..32].*;
    const qh: U8x32 = xb[128 + 32 * half ..][0..32].*;
    const m15 = splat8(32, 0x0f);
    const v0 = (ql1 & m15) | shl(32, qh & splat8(32, 0x03), 4);
    const v1 = (ql2 & m15) | shl(32, qh & splat8(32, 0x0c), 2);
    const v2 = shr(32, ql1, 4) | (qh & splat8(32, 0x30));
    const v3 = shr(32, ql2, 4) | shr(32, qh & splat8(32, 0xc0), 2);
    return .{ std.simd.join(v0, v1), std.simd.join(v2, v3) };
}

/// q6_K as ggml's AVX2 code sums it: unsigned values times q8, less 32 * scale_j * bsums_j.
inline fn sumsQ6K(xb: *const [q6_K_bytes]u8, yb: *const [q8_K_bytes]u8) KSums {
    const scales8: @Vector(16, i8) = @bitCast(xb[192..208].*);
    const scales: I16x16 = scales8;
    const bsums: I16x16 = @bitCast(yb[260..292].*);
    const offset = madd(16, bsums, scales) << @splat(5);
    var sumi: I32x16 = @splat(0);
    inline for (0..2) |half| {
        const v = q6KValues(xb, half);
        const q8a: I8x64 = @bitCast(yb[4 + 128 * half ..][0..64].*);
        const q8b: I8x64 = @bitCast(yb[4 + 128 * half + 64 ..][0..64].*);
        const pa = maddubs(64, v[0], q8a);
        const pb = maddubs(64, v[1], q8b);
        // Lane l of a product vector covers elements 2l, 2l+1: group (2l)/16 = l/8.
        sumi += madd(32, pa, spreadScales(scales, 8 * half, 8));
        sumi += madd(32, pb, spreadScales(scales, 8 * half + 4, 8));
    }
    return .{ .sums = ggmlLanes(sumi) - offset, .mins = @splat(0) };
}

/// ggml's pairwise sums of `mins` (q4_K's prod: lane q = lanes 2q + 2q+1) in the even lanes,
/// without a lane-crossing shuffle: each 64-bit lane's high half added to its low half.
inline fn pairSums(mins: I32x8) I32x8 {
    const wide: @Vector(4, u64) = @bitCast(mins);
    return mins +% @as(I32x8, @bitCast(wide >> @splat(32)));
}

/// Lane 0: the sum of a's lanes, lane 4: the sum of b's (exact): both reductions share their
/// shuffles.
inline fn reduce2(a: I32x8, b: I32x8) I32x8 {
    const low = @shuffle(i32, a, b, [8]i32{ 0, 1, 2, 3, -1, -2, -3, -4 });
    const high = @shuffle(i32, a, b, [8]i32{ 4, 5, 6, 7, -5, -6, -7, -8 });
    const c = low + high;
    const d = c + @shuffle(i32, c, undefined, [8]i32{ 2, 3, 0, 1, 6, 7, 4, 5 });
    return d + @shuffle(i32, d, undefined, [8]i32{ 1, 0, 3, 2, 5, 4, 7, 6 });
}

fn dotK(comptime kind: KKind, comptime order: KOrder, x: []const u8, y: []const u8) f32 {
    const xs = comptime kBytes(kind);
    assert(x.len % xs == 0);
    const blocks = x.len / xs;
    assert(y.len == blocks * q8_K_bytes);
    // vec_dot: ggml's AVX2 accumulators, acc (8 lanes, d * sumi fused in) and the min terms,
    // which q4_K keeps in 4 lanes (acc_m) and q5_K in one float (summs). tiled: one float.
    var acc: F32x8 = @splat(0);
    var acc_m: F32x8 = @splat(0); // ggml's 4 lanes in the even ones
    var summs: f32 = 0;
    for (0..blocks) |i| {
        const xb = x[i * xs ..][0..xs];
        const yb = y[i * q8_K_bytes ..][0..q8_K_bytes];
        const s = if (kind == .q6_K) sumsQ6K(xb, yb) else sums45K(kind, xb, yb);
        const dy = f32At(yb[0..4]);
        const dx = f16At(if (kind == .q6_K) xb[208..210] else xb[0..2]);
        const dmin_x = if (kind == .q6_K) 0 else f16At(xb[2..4]);
        switch (order) {
            .vec_dot => {
                acc = common.fma(F32x8, @splat(dy * dx), @floatFromInt(s.sums), acc);
                const dmin = -dy * dmin_x;
                if (kind == .q4_K) {
                    // ggml's prod lane q (pmaddwd of the mins with the pairwise bsums) is
                    // lanes 2q and 2q + 1 of ours, summed into lane 2q.
                    acc_m = common.fma(F32x8, @splat(dmin), @floatFromInt(pairSums(s.mins)), acc_m);
                } else if (kind == .q5_K) {
                    // summs += dmin * hsum: ggml's C, which gcc contracts into one vfmadd231ss.
                    summs = common.fma(f32, dmin, @floatFromInt(@reduce(.Add, s.mins)), summs);
                }
            },
            .tiled => {
                // Lane 0: float(S), lane 4: float(M) (the integer totals, converted once).
                const totals: F32x8 = @floatFromInt(reduce2(s.sums, s.mins));
                var r = totals[0] * dx;
                if (kind != .q6_K) r = common.fma(f32, -dmin_x, totals[4], r);
                summs = common.fma(f32, r, dy, summs);
            },
        }
    }
    return switch (order) {
        .tiled => summs,
        .vec_dot => switch (kind) {
            .q6_K => hsum8(acc),
            .q5_K => hsum8(acc) + summs,
            // _mm_movehl_ps then _mm_movehdup_ps: (m0 + m2) + (m1 + m3), ggml's lane q our 2q.
            .q4_K => hsum8(acc) + ((acc_m[0] + acc_m[4]) + (acc_m[2] + acc_m[6])),
        },
    };
}

/// A k-quant super-block's values unpacked to bytes and its scales spread to i16 lanes, once
/// for every activation row it is dotted with (dotKTiledCols): part i (0-3) pairs with the 64
/// q8 quants at 64 i of the activation block. q4_K, q5_K: part j holds sub-blocks 2j and 2j+1
/// (sums45K's values), `sm` the scales and mins; q6_K: parts 2h and 2h + 1 sumsQ6K's two
/// products of half h, `sm` the 16 scales.
const KUnpacked = struct { values: [4]U8x64, scales: [4]I16x32, sm: I16x16 };

inline fn unpackK(comptime kind: KKind, xb: *const [kBytes(kind)]u8) KUnpacked {
    var u: KUnpacked = undefined;
    if (kind == .q6_K) {
        const scales8: @Vector(16, i8) = @bitCast(xb[192..208].*);
        u.sm = scales8;
        inline for (0..2) |half| {
            const v = q6KValues(xb, half);
            u.values[2 * half] = v[0];
            u.values[2 * half + 1] = v[1];
            u.scales[2 * half] = spreadScales(u.sm, 8 * half, 8);
            u.scales[2 * half + 1] = spreadScales(u.sm, 8 * half + 4, 8);
        }
        return u;
    }
    u.sm = scalesAndMins(xb[4..20]);
    const qs_at = if (kind == .q4_K) 16 else 48;
    const qh: U8x64 = if (kind == .q5_K) duplicate(xb[16..48]) else undefined;
    inline for (0..4) |j| {
        var values = duplicate(xb[qs_at + 32 * j ..][0..32]);
        values = shiftHalves(values, .right, 0, 4) & splat8(64, 0x0f);
        if (kind == .q5_K) {
            values |= shiftHalves(shiftHalves(qh, .right, 2 * j, 2 * j + 1), .left, 4, 4) & splat8(64, 0x10);
        }
        u.values[j] = values;
        u.scales[j] = spreadScales(u.sm, 2 * j, 16);
    }
    return u;
}

/// sums45K / sumsQ6K of an unpacked super-block with one activation block: the same integers
/// in the same lanes.
inline fn sumsUnpacked(comptime kind: KKind, u: *const KUnpacked, yb: *const [q8_K_bytes]u8) KSums {
    var sumi: I32x16 = @splat(0);
    inline for (0..4) |i| {
        const q8: I8x64 = @bitCast(yb[4 + 64 * i ..][0..64].*);
        sumi += madd(32, maddubs(64, u.values[i], q8), u.scales[i]);
    }
    if (kind == .q6_K) {
        const bsums: I16x16 = @bitCast(yb[260..292].*);
        return .{ .sums = ggmlLanes(sumi) - (madd(16, bsums, u.sm) << @splat(5)), .mins = @splat(0) };
    }
    return .{ .sums = ggmlLanes(sumi), .mins = minProducts(u.sm, yb) };
}

/// Most activation rows one dot_*_tiled_cols call takes.
pub const k_cols_max = 4;

/// The tiled dots of one weight row with C activation rows `y_stride` bytes apart: each
/// super-block is unpacked once for the C of them, and each out[c] is dotK(kind, .tiled)'s
/// result for its row, bit for bit (its own chain, the same float steps in the same order).
fn dotKTiledCols(comptime kind: KKind, comptime C: usize, x: []const u8, y: [*]const u8, y_stride: usize, out: *[k_cols_max]f32) void {
    const xs = comptime kBytes(kind);
    assert(x.len % xs == 0);
    const blocks = x.len / xs;
    var summs: [C]f32 = @splat(0);
    for (0..blocks) |i| {
        const xb = x[i * xs ..][0..xs];
        const u = unpackK(kind, xb);
        const dx = f16At(if (kind == .q6_K) xb[208..210] else xb[0..2]);
        const dmin_x = if (kind == .q6_K) 0 else f16At(xb[2..4]);
        inline for (0..C) |c| {
            const yb = y[c * y_stride + i * q8_K_bytes ..][0..q8_K_bytes];
            const s = sumsUnpacked(kind, &u, yb);
            const dy = f32At(yb[0..4]);
            const totals: F32x8 = @floatFromInt(reduce2(s.sums, s.mins));
            var r = totals[0] * dx;
            if (kind != .q6_K) r = common.fma(f32, -dmin_x, totals[4], r);
            summs[c] = common.fma(f32, r, dy, summs[c]);
        }
    }
    inline for (0..C) |c| out[c] = summs[c];
}

fn dotKTiledColsAny(comptime kind: KKind, x: []const u8, y: [*]const u8, y_stride: usize, cols: usize, out: *[k_cols_max]f32) void {
    switch (cols) {
        inline 1...k_cols_max => |c| dotKTiledCols(kind, c, x, y, y_stride, out),
        else => unreachable,
    }
}

/// dot_q4_K_q8_K_tiled of x with each of `cols` (1..k_cols_max) q8_K rows of x's length, the
/// first at `y` and the next `y_stride` bytes apart, into out[0..cols]; x is unpacked once.
pub fn dot_q4_K_q8_K_tiled_cols(x: []const u8, y: [*]const u8, y_stride: usize, cols: usize, out: *[k_cols_max]f32) void {
    dotKTiledColsAny(.q4_K, x, y, y_stride, cols, out);
}

/// dot_q5_K_q8_K_tiled of x with `cols` q8_K rows (as dot_q4_K_q8_K_tiled_cols).
pub fn dot_q5_K_q8_K_tiled_cols(x: []const u8, y: [*]const u8, y_stride: usize, cols: usize, out: *[k_cols_max]f32) void {
    dotKTiledColsAny(.q5_K, x, y, y_stride, cols, out);
}

/// dot_q6_K_q8_K_tiled of x with `cols` q8_K rows (as dot_q4_K_q8_K_tiled_cols).
pub fn dot_q6_K_q8_K_tiled_cols(x: []const u8, y: [*]const u8, y_stride: usize, cols: usize, out: *[k_cols_max]f32) void {
    dotKTiledColsAny(.q6_K, x, y, y_stride, cols, out);
}

/// ggml_vec_dot_q4_K_q8_K: x is n/256 q4_K blocks, y n/256 q8_K blocks of the same n elements.
/// Per super-block d_y * d_x * sum_k scale_k * (nibbles_k . q8_k)
/// - d_y * dmin_x * sum_j mins_{j/2} * bsums_j.
pub fn dot_q4_K_q8_K(x: []const u8, y: []const u8) f32 {
    return dotK(.q4_K, .vec_dot, x, y);
}

/// ggml_vec_dot_q5_K_q8_K: as dot_q4_K_q8_K with 5-bit values (x is n/256 q5_K blocks).
pub fn dot_q5_K_q8_K(x: []const u8, y: []const u8) f32 {
    return dotK(.q5_K, .vec_dot, x, y);
}

/// ggml_vec_dot_q6_K_q8_K: x is n/256 q6_K blocks, y n/256 q8_K blocks of the same n elements.
/// Per super-block d_y * d_x * sum_j scale_j * ((6-bit values_j - 32) . q8_j) over groups of 16.
pub fn dot_q6_K_q8_K(x: []const u8, y: []const u8) f32 {
    return dotK(.q6_K, .vec_dot, x, y);
}

/// dot_q4_K_q8_K in the float steps of ggml's tiled matmul (KOrder.tiled).
pub fn dot_q4_K_q8_K_tiled(x: []const u8, y: []const u8) f32 {
    return dotK(.q4_K, .tiled, x, y);
}

/// dot_q5_K_q8_K in the float steps of ggml's tiled matmul (KOrder.tiled).
pub fn dot_q5_K_q8_K_tiled(x: []const u8, y: []const u8) f32 {
    return dotK(.q5_K, .tiled, x, y);
}

/// dot_q6_K_q8_K in the float steps of ggml's tiled matmul (KOrder.tiled).
pub fn dot_q6_K_q8_K_tiled(x: []const u8, y: []const u8) f32 {
    return dotK(.q6_K, .tiled, x, y);
}

// ---------------------------------------------------------------------------------------------
// Tests: every dot against (a) the f64 dot of the two dequantized rows and (b) a scalar port of
// ggml's generic code (ggml-cpu/quants.c, ggml_vec_dot_*_generic), on rows quantized with
// quant.zig.

const testing = std.testing;
const DType = @import("../dtype.zig").DType;

/// A generic port's result and the sum of the absolute values of every integer product it
/// scales, each times its block's |scale| (a bound for the float rounding of any order).
const Generic = struct { value: f32, magnitude: f64 };

fn i8At(bytes: []const u8, i: usize) i32 {
    return @as(i8, @bitCast(bytes[i]));
}

/// ggml_vec_dot_q4_1_q8_1_generic, ggml_vec_dot_q5_0_q8_0_generic, ggml_vec_dot_q5_1_q8_1_generic.
fn genericSmall(comptime kind: Small, x: []const u8, y: []const u8) Generic {
    const xs = xBytes(kind);
    const ys = yBytes(kind);
    const blocks = x.len / xs;
    var sumf: f32 = 0;
    var magnitude: f64 = 0;
    for (0..blocks) |ib| {
        const xb = x[ib * xs ..][0..xs];
        const yb = y[ib * ys ..][0..ys];
        const qy = yb[ys - 32 ..];
        const qs = xb[xs - 16 ..];
        const qh: u32 = if (kind == .q4_1) 0 else std.mem.readInt(u32, xb[xs - 20 ..][0..4], .little);
        var sumi0: i32 = 0;
        var sumi1: i32 = 0;
        var abs_sum: i64 = 0;
        for (0..16) |j| {
            const shift: u5 = @intCast(j);
            var x0: i32 = qs[j] & 0x0f;
            var x1: i32 = qs[j] >> 4;
            switch (kind) {
                .q4_1 => {},
                .q5_0 => {
                    const xh_0: u8 = @truncate(((qh & (@as(u32, 1) << shift)) >> shift) << 4);
                    const xh_1: u8 = @truncate((qh & (@as(u32, 1) << (shift + 16))) >> (shift + 12));
                    x0 = @as(i8, @bitCast(((qs[j] & 0x0f) | xh_0) -% 16));
                    x1 = @as(i8, @bitCast(((qs[j] >> 4) | xh_1) -% 16));
                },
                .q5_1 => {
                    const xh_0: u8 = @truncate(((qh >> shift) << 4) & 0x10);
                    const xh_1: u8 = @truncate((qh >> (shift + 12)) & 0x10);
                    x0 = (qs[j] & 0x0f) | xh_0;
                    x1 = (qs[j] >> 4) | xh_1;
                },
            }
            sumi0 += x0 * i8At(qy, j);
            sumi1 += x1 * i8At(qy, j + 16);
            abs_sum += @abs(x0 * i8At(qy, j)) + @abs(x1 * i8At(qy, j + 16));
        }
        const sumi = sumi0 + sumi1;
        const d = f16At(xb[0..2]) * f16At(yb[0..2]);
        if (kind == .q5_0) {
            sumf += d * @as(f32, @floatFromInt(sumi));
            magnitude += @abs(@as(f64, d)) * @as(f64, @floatFromInt(abs_sum));
        } else {
            const min = f16At(xb[2..4]) * f16At(yb[2..4]);
            sumf += d * @as(f32, @floatFromInt(sumi)) + min;
            magnitude += @abs(@as(f64, d)) * @as(f64, @floatFromInt(abs_sum)) + @abs(@as(f64, min));
        }
    }
    return .{ .value = sumf, .magnitude = magnitude };
}

/// The utmp shuffle of ggml_vec_dot_q4_K_q8_K_generic: scales[0..8], then mins[0..8].
fn genericScalesMins(bytes: *const [12]u8) [16]u8 {
    var utmp: [4]u32 = undefined;
    for (0..3) |k| utmp[k] = std.mem.readInt(u32, bytes[4 * k ..][0..4], .little);
    utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
    const uaux = utmp[1] & kmask1;
    utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
    utmp[2] = uaux;
    utmp[0] &= kmask1;
    return @bitCast(utmp);
}

/// ggml_vec_dot_q4_K_q8_K_generic and ggml_vec_dot_q5_K_q8_K_generic.
fn generic45K(comptime kind: KKind, x: []const u8, y: []const u8) Generic {
    const xs = if (kind == .q4_K) q4_K_bytes else q5_K_bytes;
    const blocks = x.len / xs;
    var sums = [_]f32{0} ** 8;
    var sumf: f32 = 0;
    var magnitude: f64 = 0;
    for (0..blocks) |i| {
        const xb = x[i * xs ..][0..xs];
        const yb = y[i * q8_K_bytes ..][0..q8_K_bytes];
        const q8 = yb[4..260];
        var aux8: [256]i32 = undefined;
        const qs_at = if (kind == .q4_K) 16 else 48;
        var m: u8 = 1;
        for (0..4) |j| {
            const q4 = xb[qs_at + 32 * j ..][0..32];
            for (0..32) |l| aux8[64 * j + l] = q4[l] & 0x0f;
            if (kind == .q5_K) {
                for (0..32) |l| aux8[64 * j + l] += if (xb[16 + l] & m != 0) 16 else 0;
                m <<= 1;
            }
            for (0..32) |l| aux8[64 * j + 32 + l] = q4[l] >> 4;
            if (kind == .q5_K) {
                for (0..32) |l| aux8[64 * j + 32 + l] += if (xb[16 + l] & m != 0) 16 else 0;
                m <<= 1;
            }
        }
        const sm = genericScalesMins(xb[4..16]);
        var sumi: i32 = 0;
        var abs_mins: i64 = 0;
        for (0..16) |j| {
            const bsum: i32 = std.mem.readInt(i16, yb[260 + 2 * j ..][0..2], .little);
            sumi += bsum * sm[8 + j / 2];
            abs_mins += @abs(bsum * sm[8 + j / 2]);
        }
        var aux32 = [_]i32{0} ** 8;
        var abs_sum: i64 = 0;
        for (0..8) |j| {
            const scale: i32 = sm[j];
            for (0..4) |g| {
                for (0..8) |l| {
                    const e = 32 * j + 8 * g + l;
                    const aux16: i16 = @intCast(i8At(q8, e) * aux8[e]);
                    aux32[l] += scale * aux16;
                    abs_sum += @abs(scale * aux16);
                }
            }
        }
        const d = f16At(xb[0..2]) * f32At(yb[0..4]);
        for (0..8) |l| sums[l] += d * @as(f32, @floatFromInt(aux32[l]));
        const dmin = f16At(xb[2..4]) * f32At(yb[0..4]);
        sumf -= dmin * @as(f32, @floatFromInt(sumi));
        magnitude += @abs(@as(f64, d)) * @as(f64, @floatFromInt(abs_sum)) +
            @abs(@as(f64, dmin)) * @as(f64, @floatFromInt(abs_mins));
    }
    for (sums) |v| sumf += v;
    return .{ .value = sumf, .magnitude = magnitude };
}

/// ggml_vec_dot_q6_K_q8_K_generic. The magnitude counts the unsigned values (q + 32) and the
/// 32 * scale * bsums terms, which is what the AVX2 order (and ours) sums.
fn genericQ6K(x: []const u8, y: []const u8) Generic {
    const blocks = x.len / q6_K_bytes;
    var sums = [_]f32{0} ** 8;
    var magnitude: f64 = 0;
    for (0..blocks) |i| {
        const xb = x[i * q6_K_bytes ..][0..q6_K_bytes];
        const yb = y[i * q8_K_bytes ..][0..q8_K_bytes];
        const q8 = yb[4..260];
        var aux8: [256]i32 = undefined;
        for (0..2) |half| {
            const q4 = xb[64 * half ..][0..64];
            const qh = xb[128 + 32 * half ..][0..32];
            const a = aux8[128 * half ..][0..128];
            for (0..32) |l| {
                a[l + 0] = @as(i32, (q4[l + 0] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                a[l + 32] = @as(i32, (q4[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                a[l + 64] = @as(i32, (q4[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                a[l + 96] = @as(i32, (q4[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            }
        }
        var aux32 = [_]i32{0} ** 8;
        var abs_sum: i64 = 0;
        for (0..16) |j| {
            const scale = i8At(xb, 192 + j);
            var bsum: i32 = 0;
            for (0..2) |g| {
                for (0..8) |l| {
                    const e = 16 * j + 8 * g + l;
                    const aux16: i16 = @intCast(i8At(q8, e) * aux8[e]);
                    aux32[l] += scale * aux16;
                    abs_sum += @abs(scale * i8At(q8, e) * (aux8[e] + 32));
                    bsum += i8At(q8, e);
                }
            }
            abs_sum += @abs(32 * scale * bsum);
        }
        const d = f16At(xb[208..210]) * f32At(yb[0..4]);
        for (0..8) |l| sums[l] += d * @as(f32, @floatFromInt(aux32[l]));
        magnitude += @abs(@as(f64, d)) * @as(f64, @floatFromInt(abs_sum));
    }
    var sumf: f32 = 0;
    for (sums) |v| sumf += v;
    return .{ .value = sumf, .magnitude = magnitude };
}

const Case = struct {
    weights: DType,
    activations: DType,
    dot: *const fn ([]const u8, []const u8) f32,
    generic: *const fn ([]const u8, []const u8) Generic,
};

fn genericFor(comptime kind: Small) fn ([]const u8, []const u8) Generic {
    return struct {
        fn call(x: []const u8, y: []const u8) Generic {
            return genericSmall(kind, x, y);
        }
    }.call;
}

fn generic45KFor(comptime kind: KKind) fn ([]const u8, []const u8) Generic {
    return struct {
        fn call(x: []const u8, y: []const u8) Generic {
            return generic45K(kind, x, y);
        }
    }.call;
}

const cases = [_]Case{
    .{ .weights = .q4_1, .activations = .q8_1, .dot = dot_q4_1_q8_1, .generic = genericFor(.q4_1) },
    .{ .weights = .q5_0, .activations = .q8_0, .dot = dot_q5_0_q8_0, .generic = genericFor(.q5_0) },
    .{ .weights = .q5_1, .activations = .q8_1, .dot = dot_q5_1_q8_1, .generic = genericFor(.q5_1) },
    .{ .weights = .q4_K, .activations = .q8_K, .dot = dot_q4_K_q8_K, .generic = generic45KFor(.q4_K) },
    .{ .weights = .q5_K, .activations = .q8_K, .dot = dot_q5_K_q8_K, .generic = generic45KFor(.q5_K) },
    .{ .weights = .q6_K, .activations = .q8_K, .dot = dot_q6_K_q8_K, .generic = genericQ6K },
    .{ .weights = .q4_K, .activations = .q8_K, .dot = dot_q4_K_q8_K_tiled, .generic = generic45KFor(.q4_K) },
    .{ .weights = .q5_K, .activations = .q8_K, .dot = dot_q5_K_q8_K_tiled, .generic = generic45KFor(.q5_K) },
    .{ .weights = .q6_K, .activations = .q8_K, .dot = dot_q6_K_q8_K_tiled, .generic = genericQ6K },
};

const Distribution = enum { normal, offset, mixed };

/// Rows whose blocks vary: normal values, values far from zero on one side (the minimum
/// terms), and a mix of scales, outliers and all-zero blocks.
fn fillRow(random: std.Random, row: []f32, distribution: Distribution) void {
    for (row, 0..) |*v, i| {
        const normal = random.floatNorm(f32);
        v.* = switch (distribution) {
            .normal => normal,
            .offset => if ((i / 32) % 2 == 0) 3 + @abs(normal) else -2 - 0.1 * @abs(normal),
            .mixed => switch ((i / 32) % 5) {
                0 => normal * 1e-3,
                1 => normal * 100,
                2 => if (i % 13 == 0) normal * 40 else normal,
                3 => 0,
                else => 0.5 + 0.01 * normal,
            },
        };
    }
}

fn checkCase(case: Case, n: usize, random: std.Random, distribution: Distribution) !void {
    const xf = try testing.allocator.alloc(f32, n);
    defer testing.allocator.free(xf);
    const yf = try testing.allocator.alloc(f32, n);
    defer testing.allocator.free(yf);
    fillRow(random, xf, distribution);
    fillRow(random, yf, if (distribution == .offset) .normal else distribution);
    const x = try testing.allocator.alloc(u8, @intCast(quant.row_bytes(case.weights, n)));
    defer testing.allocator.free(x);
    const y = try testing.allocator.alloc(u8, @intCast(quant.row_bytes(case.activations, n)));
    defer testing.allocator.free(y);
    quant.quantize_row(case.weights, xf, x);
    quant.quantize_row(case.activations, yf, y);

    const got = case.dot(x, y);

    // (a) the dequantized rows, in f64.
    quant.dequantize_row(case.weights, x, xf);
    quant.dequantize_row(case.activations, y, yf);
    var want: f64 = 0;
    var abs_products: f64 = 0;
    for (xf, yf) |a, b| {
        want += @as(f64, a) * b;
        abs_products += @abs(@as(f64, a) * b);
    }
    // q8_1's s is sum(qs) * d rounded to f16 (ggml's format, up to 2^-11 off): the minimum term
    // m * s of q4_1 and q5_1 differs from m times the dequantized block's sum (exactly
    // d * sum(qs)) by m * (s - d * sum(qs)), which the reference adds, computed exactly.
    if (case.activations == .q8_1) {
        const xs = case.weights.block_bytes();
        for (0..n / 32) |b| {
            const yb = y[b * 36 ..][0..36];
            var sum: i32 = 0;
            for (yb[4..36]) |q| sum += @as(i8, @bitCast(q));
            const exact = @as(f64, f16At(yb[0..2])) * @as(f64, @floatFromInt(sum));
            want += @as(f64, f16At(x[b * xs + 2 ..][0..2])) * (@as(f64, f16At(yb[2..4])) - exact);
        }
    }
    const err_a = @abs(@as(f64, got) - want);
    if (!(err_a <= 1e-5 * abs_products)) {
        std.debug.print("{s} n={d} {s}: got {e}, dequantized f64 {e}, error {e} > 1e-5 * {e}\n", .{ @tagName(case.weights), n, @tagName(distribution), got, want, err_a, abs_products });
        return error.TestUnexpectedResult;
    }

    // (b) ggml's generic code, within the rounding of two f32 sums of differing order.
    const generic = case.generic(x, y);
    const blocks = n / case.weights.block_size();
    const bound = 2 * @as(f64, @floatFromInt(blocks + 40)) * std.math.floatEps(f32) * generic.magnitude;
    const err_b = @abs(@as(f64, got) - generic.value);
    if (!(err_b <= bound)) {
        std.debug.print("{s} n={d} {s}: got {e}, generic {e}, difference {e} > {e}\n", .{ @tagName(case.weights), n, @tagName(distribution), got, generic.value, err_b, bound });
        return error.TestUnexpectedResult;
    }
}

test "dot_quant: fused dots match the dequantized rows in f64 and ggml's generic code" {
    var prng = std.Random.DefaultPrng.init(0xd07);
    const random = prng.random();
    const small_lengths = [_]usize{ 32, 64, 96, 256, 512, 4096 };
    const k_lengths = [_]usize{ 256, 512, 4096 };
    for (cases) |case| {
        const lengths: []const usize = if (case.weights.block_size() == 32) &small_lengths else &k_lengths;
        for (lengths) |n| {
            for (0..4) |_| {
                inline for (.{ Distribution.normal, Distribution.offset, Distribution.mixed }) |distribution| {
                    try checkCase(case, n, random, distribution);
                }
            }
        }
    }
}

test "dot_quant: empty rows give 0" {
    for (cases) |case| try testing.expectEqual(@as(f32, 0), case.dot(&.{}, &.{}));
}

test "dot_quant: pmaddubsw and pmaddwd agree with their portable forms, saturation included" {
    var prng = std.Random.DefaultPrng.init(0xadd);
    const random = prng.random();
    for (0..200) |_| {
        var a: [64]u8 = undefined;
        var b: [64]u8 = undefined;
        var c: [64]u8 = undefined;
        random.bytes(&a);
        random.bytes(&b);
        random.bytes(&c);
        const a64: U8x64 = a;
        const b64: I8x64 = @bitCast(b);
        const wa: I16x32 = @bitCast(a);
        const wc: I16x32 = @bitCast(c);
        try testing.expectEqual(maddubsPortable(64, a64, b64), maddubs(64, a64, b64));
        try testing.expectEqual(maddubsPortable(32, a[0..32].*, @bitCast(b[0..32].*)), maddubs(32, a[0..32].*, @bitCast(b[0..32].*)));
        try testing.expectEqual(maddPortable(32, wa, wc), madd(32, wa, wc));
        const ha: [2]I16x16 = @bitCast(wa);
        const hc: [2]I16x16 = @bitCast(wc);
        try testing.expectEqual(maddPortable(16, ha[0], hc[0]), madd(16, ha[0], hc[0]));
    }
}

test "dot_quant: the k-quant column dots give each column the single tiled dot's bits" {
    var prng = std.Random.DefaultPrng.init(0xc015);
    const random = prng.random();
    const ColsDot = *const fn ([]const u8, [*]const u8, usize, usize, *[k_cols_max]f32) void;
    const kinds = [_]struct { weights: DType, single: *const fn ([]const u8, []const u8) f32, cols: ColsDot }{
        .{ .weights = .q4_K, .single = dot_q4_K_q8_K_tiled, .cols = dot_q4_K_q8_K_tiled_cols },
        .{ .weights = .q5_K, .single = dot_q5_K_q8_K_tiled, .cols = dot_q5_K_q8_K_tiled_cols },
        .{ .weights = .q6_K, .single = dot_q6_K_q8_K_tiled, .cols = dot_q6_K_q8_K_tiled_cols },
    };
    for (kinds) |kind| {
        // One super-block, an odd count, and SmolLM2's ffn_down rows.
        for ([_]usize{ 256, 768, 1536 }) |n| {
            inline for (.{ Distribution.normal, Distribution.offset, Distribution.mixed }) |distribution| {
                const xf = try testing.allocator.alloc(f32, n);
                defer testing.allocator.free(xf);
                fillRow(random, xf, distribution);
                const x = try testing.allocator.alloc(u8, @intCast(quant.row_bytes(kind.weights, n)));
                defer testing.allocator.free(x);
                quant.quantize_row(kind.weights, xf, x);
                // Activation rows a little apart (the stride need not be the row length).
                const y_len: usize = @intCast(quant.row_bytes(.q8_K, n));
                const stride = y_len + 64;
                const y = try testing.allocator.alloc(u8, stride * k_cols_max);
                defer testing.allocator.free(y);
                for (0..k_cols_max) |c| {
                    fillRow(random, xf, if (distribution == .offset) .normal else distribution);
                    quant.quantize_row(.q8_K, xf, y[c * stride ..][0..y_len]);
                }
                for (1..k_cols_max + 1) |cols| {
                    var got: [k_cols_max]f32 = undefined;
                    kind.cols(x, y.ptr, stride, cols, &got);
                    for (0..cols) |c| {
                        const want = kind.single(x, y[c * stride ..][0..y_len]);
                        try testing.expectEqual(@as(u32, @bitCast(want)), @as(u32, @bitCast(got[c])));
                    }
                }
            }
        }
    }
}
