//! Matrix-vector kernels for q8_0, q4_0 and q4_1 weights, the memory-bound half of a quantized
//! mul_mat (decode: a few columns of src1). As ggml does, each src1 row is first quantized per
//! block of 32 (q8_0 for q8_0/q4_0 weights, q8_1 for q4_1: quant.zig's quantize_row, so the same
//! integers and f16 scales as ggml's quantize_row_q8_*_ref), and each weight block's dot with it
//! is an integer dot scaled by both blocks' scales, as ggml_vec_dot_q4_0_q8_0,
//! ggml_vec_dot_q8_0_q8_0 and ggml_vec_dot_q4_1_q8_1 compute it (their per-block integer sums are
//! exact; only the f32 summation order differs).
//!
//! The quantized src1 row is kept in a layout of its own (`Activation`): the 32 quants of every
//! block in one aligned run, and the scales (and q8_1's sums) as f32 arrays beside it, so the
//! inner loop loads quants with one aligned load and scales without an f16 conversion. Weight
//! rows are read in place, `rows_max` at a time, so each activation block loaded serves several
//! rows and several independent streams keep the memory system busy.
//!
//! The integer products use vpdpbusd (u8 x i8, groups of 4 summed into i32) in the AVX-512 build,
//! which has VNNI, and vpmaddubsw + vpmaddwd (the same sums through i16) in the AVX2 build, as
//! ggml's AVX2 code does. Both run 256-bit vectors (one block per vector), as ggml's AVX-512
//! builds do for these types: the loop is bound by memory, not by vector width.

const std = @import("std");
const builtin = @import("builtin");
const quant = @import("../quant.zig");
const node = @import("../node.zig");

const assert = std.debug.assert;
const DType = node.DType;

/// Elements per block of the 32-element types.
pub const qk = 32;
/// Bytes ahead of the block being read that each weight row is prefetched.
const prefetch_distance = 1024;

/// Weight rows one call of `dot_rows` reads together.
pub const rows_max = 4;

const U8x32 = @Vector(32, u8);
const I8x32 = @Vector(32, i8);
const I16x16 = @Vector(16, i16);
const I32x8 = @Vector(8, i32);
const F32x8 = @Vector(8, f32);

/// The weight types these kernels take, and the activation type each pairs with.
pub fn takes(dtype: DType) bool {
    return dtype == .q8_0 or dtype == .q4_0 or dtype == .q4_1;
}

/// A src1 row quantized per block of 32 into this file's layout: `blocks` runs of 32 quants,
/// then `blocks` f32 scales, then (for q8_1) `blocks` f32 sums (d * sum of the quants, rounded
/// to f16 as q8_1 stores it). Offsets keep the quants 32-byte aligned.
pub const Activation = struct {
    qs: [*]align(32) const I8x32,
    d: [*]const f32,
    s: [*]const f32,

    /// Bytes one row takes (a multiple of 64, so consecutive rows stay aligned).
    pub fn bytes(k: usize) usize {
        const blocks = k / qk;
        return std.mem.alignForward(usize, blocks * (qk + 2 * @sizeOf(f32)), 64);
    }

    pub fn at(base: [*]align(64) u8, k: usize) Activation {
        const blocks = k / qk;
        return .{
            .qs = @ptrCast(base),
            .d = @ptrCast(@alignCast(base + blocks * qk)),
            .s = @ptrCast(@alignCast(base + blocks * qk + blocks * @sizeOf(f32))),
        };
    }
};

/// Quantizes one f32 row of `k` elements (a multiple of 32) into `out` (Activation.bytes(k)),
/// as q8_1 for q4_1 weights and as q8_0 otherwise.
pub fn quantize_activation(weight: DType, values: []align(1) const f32, out: [*]align(64) u8) void {
    assert(takes(weight));
    assert(values.len % qk == 0);
    const blocks = values.len / qk;
    const qs: [*]u8 = out;
    const d: [*]f32 = @ptrCast(@alignCast(out + blocks * qk));
    const s: [*]f32 = @ptrCast(@alignCast(out + blocks * qk + blocks * @sizeOf(f32)));
    for (0..blocks) |b| {
        const x = values[b * qk ..][0..qk];
        if (weight == .q4_1) {
            var block: [36]u8 = undefined;
            quant.quantize_row(.q8_1, x, &block);
            d[b] = f16_at(block[0..2]);
            s[b] = f16_at(block[2..4]);
            qs[b * qk ..][0..qk].* = block[4..36].*;
        } else {
            var block: [34]u8 = undefined;
            quant.quantize_row(.q8_0, x, &block);
            d[b] = f16_at(block[0..2]);
            s[b] = 0;
            qs[b * qk ..][0..qk].* = block[2..34].*;
        }
    }
}

inline fn f16_at(bytes: *const [2]u8) f32 {
    const h: f16 = @bitCast(std.mem.readInt(u16, bytes, .little));
    return h;
}

const is_x86 = builtin.cpu.arch == .x86_64;
const has_avx2 = is_x86 and builtin.cpu.has(.x86, .avx2);
/// vpdpbusd on ymm registers: the AVX-512 build has VNNI (build.zig), the AVX2 build does not.
const has_vnni = is_x86 and builtin.cpu.has(.x86, .avx512vnni) and builtin.cpu.has(.x86, .avx512vl);

// LLVM's own names for the x86 instructions (Zig passes `llvm.*` externs to LLVM as intrinsics),
// so the compiler schedules and allocates registers around them, unlike inline assembly.
extern fn @"llvm.x86.avx2.pmadd.ub.sw"(a: U8x32, b: I8x32) I16x16;
extern fn @"llvm.x86.avx2.pmadd.wd"(a: I16x16, b: I16x16) I32x8;
extern fn @"llvm.x86.avx512.vpdpbusd.256"(acc: I32x8, a: I32x8, b: I32x8) I32x8;
extern fn @"llvm.x86.avx2.psign.b"(a: I8x32, b: I8x32) I8x32;

/// u8 x i8 products summed in adjacent pairs to i16, saturating (vpmaddubsw). Never saturates
/// here: nibbles give at most 2 * 15 * 127, and q8_0's |x| <= 127 at most 2 * 127 * 128.
inline fn maddubs(a: U8x32, b: I8x32) I16x16 {
    if (comptime has_avx2) return @"llvm.x86.avx2.pmadd.ub.sw"(a, b);
    const wide_a: @Vector(32, i16) = a;
    const wide_b: @Vector(32, i16) = b;
    const products = std.simd.deinterlace(2, wide_a * wide_b);
    return products[0] +| products[1];
}

/// i16 pairs summed to i32 (vpmaddwd with ones).
inline fn pairs(a: I16x16) I32x8 {
    if (comptime has_avx2) return @"llvm.x86.avx2.pmadd.wd"(a, @splat(1));
    const wide: @Vector(16, i32) = a;
    const halves = std.simd.deinterlace(2, wide);
    return halves[0] + halves[1];
}

/// acc + the u8 x i8 products of each group of 4 adjacent bytes, in 8 i32 lanes: one vpdpbusd
/// with VNNI, vpmaddubsw + vpmaddwd + vpaddd without (the same integers: no saturation here).
inline fn dot_add(acc: I32x8, a: U8x32, b: I8x32) I32x8 {
    if (comptime has_vnni) return @"llvm.x86.avx512.vpdpbusd.256"(acc, @bitCast(a), @bitCast(b));
    return acc + pairs(maddubs(a, b));
}

/// b with its sign flipped where a is negative and zeroed where a is zero (vpsignb).
inline fn sign(b: I8x32, a: I8x32) I8x32 {
    if (comptime has_avx2) return @"llvm.x86.avx2.psign.b"(b, a);
    const zero: I8x32 = @splat(0);
    return @select(i8, a < zero, zero -% b, @select(i8, a == zero, zero, b));
}

/// The 32 nibbles of a q4 block as bytes: low nibbles are elements 0-15, high ones 16-31.
inline fn nibbles(qs: *const [16]u8) U8x32 {
    const packed_bytes: @Vector(16, u8) = qs.*;
    const low = packed_bytes & @as(@Vector(16, u8), @splat(0x0f));
    const high = packed_bytes >> @as(@Vector(16, u3), @splat(4));
    return std.simd.join(low, high);
}

/// out[r] = dot(row r of weights, activation) for `count` (<= rows_max) rows of `blocks` blocks
/// of `dtype` starting at `rows[r]`.
pub fn dot_rows(
    dtype: DType,
    rows: *const [rows_max][*]const u8,
    count: usize,
    y: Activation,
    blocks: usize,
    out: *[rows_max]f32,
) void {
    assert(count >= 1 and count <= rows_max);
    switch (dtype) {
        .q4_0 => switch (count) {
            inline 1...rows_max => |r| dot_q4_0(r, rows, y, blocks, out),
            else => unreachable,
        },
        .q4_1 => switch (count) {
            inline 1...rows_max => |r| dot_q4_1(r, rows, y, blocks, out),
            else => unreachable,
        },
        .q8_0 => switch (count) {
            inline 1...rows_max => |r| dot_q8_0(r, rows, y, blocks, out),
            else => unreachable,
        },
        else => unreachable,
    }
}

/// q4_0 (18 bytes: f16 d, 16 bytes of nibbles; x = (nibble - 8) * d) times q8_0. The nibbles
/// are used unsigned (0..15) and 8 * sum(y) is taken off per block, which gives ggml's integer
/// sum_j (nibble_j - 8) * y_j exactly; 8 * sum(y) depends on the activation only, so it is
/// computed once per block for all rows.
fn dot_q4_0(comptime R: usize, rows: *const [rows_max][*]const u8, y: Activation, blocks: usize, out: *[rows_max]f32) void {
    var acc: [R]F32x8 = @splat(@splat(0));
    const eights: U8x32 = @splat(8);
    for (0..blocks) |b| {
        const yq = y.qs[b];
        const zero: I32x8 = @splat(0);
        const offset = zero - dot_add(zero, eights, yq);
        const dy = y.d[b];
        inline for (0..R) |r| {
            const block = rows[r] + b * 18;
            @prefetch(block + prefetch_distance, .{});
            const dot = dot_add(offset, nibbles(block[2..18]), yq);
            const scale: F32x8 = @splat(f16_at(block[0..2]) * dy);
            acc[r] = @mulAdd(F32x8, @floatFromInt(dot), scale, acc[r]);
        }
    }
    inline for (0..R) |r| out[r] = @reduce(.Add, acc[r]);
}

/// q4_1 (20 bytes: f16 d, f16 m, 16 bytes of nibbles; x = nibble * d + m) times q8_1:
/// d_x * d_y * sum(nibble * y) + m_x * s_y per block, as ggml_vec_dot_q4_1_q8_1.
fn dot_q4_1(comptime R: usize, rows: *const [rows_max][*]const u8, y: Activation, blocks: usize, out: *[rows_max]f32) void {
    var acc: [R]F32x8 = @splat(@splat(0));
    var mins: [R]f32 = @splat(0);
    for (0..blocks) |b| {
        const yq = y.qs[b];
        const dy = y.d[b];
        const sy = y.s[b];
        inline for (0..R) |r| {
            const block = rows[r] + b * 20;
            const dot = dot_add(@splat(0), nibbles(block[4..20]), yq);
            const scale: F32x8 = @splat(f16_at(block[0..2]) * dy);
            acc[r] = @mulAdd(F32x8, @floatFromInt(dot), scale, acc[r]);
            mins[r] = @mulAdd(f32, f16_at(block[2..4]), sy, mins[r]);
        }
    }
    inline for (0..R) |r| out[r] = @reduce(.Add, acc[r]) + mins[r];
}

/// q8_0 (34 bytes: f16 d, 32 i8) times q8_0: ggml's sign trick makes the first factor unsigned
/// (|x|) and moves x's sign onto y, so vpmaddubsw takes them.
fn dot_q8_0(comptime R: usize, rows: *const [rows_max][*]const u8, y: Activation, blocks: usize, out: *[rows_max]f32) void {
    var acc: [R]F32x8 = @splat(@splat(0));
    for (0..blocks) |b| {
        const yq = y.qs[b];
        const dy = y.d[b];
        inline for (0..R) |r| {
            const block = rows[r] + b * 34;
            const xq: I8x32 = @bitCast(block[2..34].*);
            const dot = dot_add(@splat(0), @bitCast(@abs(xq)), sign(yq, xq));
            const scale: F32x8 = @splat(f16_at(block[0..2]) * dy);
            acc[r] = @mulAdd(F32x8, @floatFromInt(dot), scale, acc[r]);
        }
    }
    inline for (0..R) |r| out[r] = @reduce(.Add, acc[r]);
}

// ---------------------------------------------------------------------------------------------
// Tests: every kernel against the f64 dot of the dequantized weight row and the dequantized
// activation row, which the per-block integer arithmetic reproduces up to f32 summation.

fn check(dtype: DType, k: usize, count: usize, seed: u64) !void {
    var prng = std.Random.DefaultPrng.init(seed);
    const random = prng.random();
    const allocator = std.testing.allocator;
    const row_len: usize = @intCast(quant.row_bytes(dtype, k));
    const weights = try allocator.alloc(u8, row_len * rows_max);
    defer allocator.free(weights);
    const values = try allocator.alloc(f32, k);
    defer allocator.free(values);
    for (0..rows_max) |r| {
        for (values) |*v| v.* = random.float(f32) * 2 - 1 + if (r == 1) @as(f32, 0.5) else 0;
        quant.quantize_row(dtype, values, weights[r * row_len ..][0..row_len]);
    }
    for (values) |*v| v.* = random.float(f32) * 2 - 1;
    const activation = try allocator.alignedAlloc(u8, .@"64", Activation.bytes(k));
    defer allocator.free(activation);
    quantize_activation(dtype, values, activation.ptr);
    // The activation as ggml's dot sees it: its quants times its f16-rounded scale.
    const y = Activation.at(activation.ptr, k);
    var rows: [rows_max][*]const u8 = undefined;
    for (0..rows_max) |r| rows[r] = weights.ptr + r * row_len;
    var got: [rows_max]f32 = undefined;
    dot_rows(dtype, &rows, count, y, k / qk, &got);
    const w = try allocator.alloc(f32, k);
    defer allocator.free(w);
    for (0..count) |r| {
        quant.dequantize_row(dtype, weights[r * row_len ..][0..row_len], w);
        var want: f64 = 0;
        var magnitude: f64 = 0;
        for (0..k) |i| {
            const yq: [32]i8 = y.qs[i / qk];
            const yv = @as(f64, @floatFromInt(yq[i % qk])) * y.d[i / qk];
            want += @as(f64, w[i]) * yv;
            magnitude += @abs(@as(f64, w[i]) * yv);
        }
        // q4_1's m * s uses s rounded to f16 (as ggml's q8_1 stores it): up to 2^-11 of it.
        const bound = 1e-5 * magnitude + if (dtype == .q4_1) 1e-3 * magnitude else 0;
        try std.testing.expect(@abs(@as(f64, got[r]) - want) <= bound);
    }
}

test "q8_0, q4_0 and q4_1 mat-vec dots match the f64 dot of the dequantized rows" {
    for ([_]DType{ .q8_0, .q4_0, .q4_1 }) |dtype| {
        for ([_]usize{ 32, 64, 96, 576, 4096 }) |k| {
            for (1..rows_max + 1) |count| try check(dtype, k, count, k * 31 + count);
        }
    }
}
