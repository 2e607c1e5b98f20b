//! Matrix-vector kernels for q8_0, q4_0 and q4_1 weights, the memory-bound half of a quantized
//! mul_mat (decode: a few columns of src1). As ggml does, each src1 row is first quantized per
//! block of 32 (q8_0 for q8_0/q4_0 weights, q8_1 for q4_1: quant.zig's quantize_row, so the same
//! integers and f16 scales as ggml's quantize_row_q8_*_ref), and each weight block's dot with it
//! is an integer dot scaled by both blocks' scales, as ggml_vec_dot_q4_0_q8_0,
//! ggml_vec_dot_q8_0_q8_0 and ggml_vec_dot_q4_1_q8_1 compute it. q4_1 and q8_0 give ggml's x86
//! results bit for bit (the same 8 integer lanes per block, the same scale products, fma chain
//! and horizontal sum: see dot_q4_1 and hsum_float_8; tests/ggml_exact_dots_test.ts checks it
//! against the pinned llama.cpp build); q4_0 sums pairs of blocks per vector, another f32 order.
//!
//! The quantized src1 row is kept in a layout of its own (`Activation`): the 32 quants of every
//! block in one aligned run, and the scales (and q8_1's sums) as f32 arrays beside it, so the
//! inner loop loads quants with one aligned load and scales without an f16 conversion. Weight
//! rows are read in place, up to `rows_max` at a time, so each activation block loaded serves
//! several rows and several independent streams keep the memory system busy (mul_mat_quant.zig
//! takes them from far-apart runs of rows: see fused_streams there).
//!
//! The integer products use vpdpbusd (u8 x i8, groups of 4 summed into i32) in the AVX-512 build,
//! which has VNNI, and vpmaddubsw + vpmaddwd (the same sums through i16) in the AVX2 build, as
//! ggml's AVX2 code does. Both run 256-bit vectors (a q8_0 or q4_1 block, or a pair of q4_0
//! blocks, per vector; see dot_chunks): 512-bit ones measured no faster, their shuffles crowding
//! one port.

const std = @import("std");
const builtin = @import("builtin");
const quant = @import("../quant.zig");
const common = @import("common.zig");
const node = @import("../node.zig");

const assert = std.debug.assert;
const DType = node.DType;

/// Elements per block of the 32-element types.
pub const qk = 32;
/// Weight rows one call of `dot_rows` reads together.
pub const rows_max = 8;

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
        if (quantize_block(weight == .q4_1, x, qs[b * qk ..][0..qk], &d[b], &s[b])) continue;
        if (weight == .q4_1) {
            var block: [36]u8 = undefined;
            quant.quantize_row_activation(.q8_1, x, &block);
            d[b] = f16_at(block[0..2]);
            s[b] = f16_at(block[2..4]);
            qs[b * qk ..][0..qk].* = block[4..36].*;
        } else {
            var block: [34]u8 = undefined;
            quant.quantize_row_activation(.q8_0, x, &block);
            d[b] = f16_at(block[0..2]);
            s[b] = 0;
            qs[b * qk ..][0..qk].* = block[2..34].*;
        }
    }
    // The q4_0 kernel reads a pair of blocks as one vector: the low nibbles (elements 0-15) of
    // both blocks, then the high ones (16-31); the activation of each whole pair (pairs of
    // blocks counted from the row's start: chunks hold an even number) is laid out to match.
    // q4_1 (dot_q4_1, ggml's block-at-a-time order) and q8_0 keep each block's 32 quants in order.
    if (weight == .q4_0) {
        for (0..blocks / 2) |pair| {
            const run = qs[pair * 2 * qk ..][0 .. 2 * qk];
            const original = run[0 .. 2 * qk].*;
            run[16..32].* = original[32..48].*;
            run[32..48].* = original[16..32].*;
        }
    }
}

/// quant.zig's quantize_row_activation of one block in vectors, the same f32 operations as
/// ggml's x86 CPU code (d = absmax / 127, quants x * (127 / absmax) rounded half to even), so
/// the same bytes; false (nothing written) for a block with an infinity or NaN, which the
/// scalar code takes.
inline fn quantize_block(q8_1: bool, x: *align(1) const [qk]f32, qs: *[qk]u8, d: *f32, s: *f32) bool {
    const v: @Vector(qk, f32) = x.*;
    const magnitude = @abs(v);
    if (!@reduce(.And, magnitude <= @as(@Vector(qk, f32), @splat(std.math.floatMax(f32))))) return false;
    const amax = @reduce(.Max, magnitude);
    const scale = amax / 127.0;
    const inverse: f32 = if (amax != 0) 127.0 / amax else 0.0;
    const q: @Vector(qk, i32) = @intFromFloat(quant.round_even(v * @as(@Vector(qk, f32), @splat(inverse))));
    qs.* = @bitCast(@as(@Vector(qk, i8), @truncate(q)));
    d.* = quant.fp16_to_fp32(quant.fp32_to_fp16(scale));
    s.* = if (q8_1) quant.fp16_to_fp32(quant.fp32_to_fp16(scale * @as(f32, @floatFromInt(@reduce(.Add, q))))) else 0;
    return true;
}

inline fn f16_at(bytes: *const [2]u8) f32 {
    return quant.fp16_to_fp32(std.mem.readInt(u16, bytes, .little));
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
        .q4_1 => switch (count) {
            inline 1...rows_max => |r| return dot_q4_1(r, rows, y, blocks, out),
            else => unreachable,
        },
        inline .q4_0, .q8_0 => |kind| switch (count) {
            inline 1...rows_max => |r| return dot_chunks(kind, r, rows, y, blocks, out),
            else => unreachable,
        },
        else => unreachable,
    }
}

/// Bytes of one block of `kind`.
fn block_bytes(comptime kind: DType) usize {
    return switch (kind) {
        .q4_0 => 18,
        .q4_1 => 20,
        .q8_0 => 34,
        else => unreachable,
    };
}

/// Blocks whose scales are read and converted together: one 8-lane gather.
const chunk = 8;

extern fn @"llvm.x86.avx2.gather.d.d.256"(src: I32x8, base: [*]const u8, index: I32x8, mask: I32x8, scale: i8) I32x8;

/// The first 4 bytes of each of `count` (<= chunk) consecutive blocks of `bb` bytes from `row`
/// as i32 lanes (lanes past `count` are 0): f16 d in the low half, and for q4_1 f16 m in the
/// high half. One vpgatherdd instead of a load and an insert per block.
inline fn gather_heads(comptime bb: usize, row: [*]const u8, count: usize) I32x8 {
    const index: I32x8 = comptime blk: {
        var lanes: [8]i32 = undefined;
        for (0..8) |i| lanes[i] = @intCast(i * bb);
        break :blk lanes;
    };
    const lane: I32x8 = comptime std.simd.iota(i32, 8);
    const mask: I32x8 = @select(i32, lane < @as(I32x8, @splat(@intCast(count))), @as(I32x8, @splat(-1)), @as(I32x8, @splat(0)));
    if (comptime has_avx2) return @"llvm.x86.avx2.gather.d.d.256"(@splat(0), row, index, mask, 1);
    var out: I32x8 = @splat(0);
    for (0..count) |i| out[i] = std.mem.readInt(i32, row[i * bb ..][0..4], .little);
    return out;
}

/// The low (or high) f16 halves of 8 i32 lanes as f32.
inline fn halves_to_f32(heads: I32x8, comptime high: bool) F32x8 {
    const bits: @Vector(8, u32) = @bitCast(heads);
    const shifted = if (high) bits >> @splat(16) else bits;
    const h: @Vector(8, f16) = @bitCast(@as(@Vector(8, u16), @truncate(shifted)));
    return common.widen_f16(8, h);
}

/// Lanes [s[2p] x 4, s[2p+1] x 4]: the scales of pair p for its 8 i32 lanes of sums.
inline fn pair_lanes(scales: F32x8, p: usize) F32x8 {
    const base: @Vector(8, i32) = .{ 0, 0, 0, 0, 1, 1, 1, 1 };
    const index = base + @as(@Vector(8, i32), @splat(@intCast(2 * p)));
    return permute(scales, index);
}

extern fn @"llvm.x86.avx2.permps"(a: F32x8, index: @Vector(8, i32)) F32x8;

/// a[index[i]] per lane (vpermps).
inline fn permute(a: F32x8, index: @Vector(8, i32)) F32x8 {
    if (comptime has_avx2) return @"llvm.x86.avx2.permps"(a, index);
    var out: F32x8 = undefined;
    for (0..8) |i| out[i] = a[@intCast(index[i])];
    return out;
}

/// The weight rows' dots, a chunk of 8 blocks at a time: per row, one gather reads the chunk's
/// 8 scales (and q4_1's mins), converted and multiplied by the activation's scales in one
/// vector; then each block's (q8_0) or pair's (q4) integer sums take their scale lanes by one
/// vpermps. Per pair, a q4 row is one 32-byte vector of both blocks' packed nibbles (low
/// nibbles, then high ones, against the activation's pair layout), its sums in 8 i32 lanes
/// (4 per block); q8_0 takes one block per vector. Integer sums per block are ggml's.
fn dot_chunks(comptime kind: DType, comptime R: usize, rows: *const [rows_max][*]const u8, y: Activation, blocks: usize, out: *[rows_max]f32) void {
    const bb = comptime block_bytes(kind);
    // Prefetched R rows past each row: the next group's lines when the R rows are adjacent, and
    // R rows further along each run when they come from far-apart runs (mul_mat_quant.zig).
    const ahead = R * blocks * bb;
    var acc: [R]F32x8 = @splat(@splat(0));
    var mins: [R]F32x8 = @splat(@splat(0));
    const y_bytes: [*]align(32) const u8 = @ptrCast(y.qs);
    var first: usize = 0;
    while (first < blocks) : (first += chunk) {
        const count = @min(chunk, blocks - first);
        var dy: F32x8 = @splat(0);
        var sy: F32x8 = @splat(0);
        for (0..count) |i| {
            dy[i] = y.d[first + i];
            if (kind == .q4_1) sy[i] = y.s[first + i];
        }
        var scales: [R]F32x8 = undefined;
        inline for (0..R) |r| {
            const heads = gather_heads(bb, rows[r] + first * bb, count);
            scales[r] = halves_to_f32(heads, false) * dy;
            if (kind == .q4_1) mins[r] = common.fma(F32x8, halves_to_f32(heads, true), sy, mins[r]);
        }
        if (kind == .q8_0) {
            for (0..count) |i| {
                const b = first + i;
                const yq: I8x32 = @bitCast(y_bytes[b * qk ..][0..32].*);
                const zero: I32x8 = @splat(0);
                // x + 128 is unsigned; its products overshoot by 128 * sum(y), taken off first
                // (VNNI); without VNNI ggml's sign trick keeps vpmaddubsw from saturating.
                const offset = if (has_vnni) zero - dot_add(zero, @splat(128), yq) else zero;
                const index: @Vector(8, i32) = @splat(@intCast(i));
                inline for (0..R) |r| {
                    const block = rows[r] + b * bb;
                    @prefetch(block + ahead, .{ .locality = 2 });
                    const xq: I8x32 = @bitCast(block[2..34].*);
                    const dot = if (has_vnni)
                        dot_add(offset, @as(U8x32, @bitCast(xq)) ^ @as(U8x32, @splat(0x80)), yq)
                    else
                        dot_add(zero, @bitCast(@abs(xq)), sign(yq, xq));
                    acc[r] = common.fma(F32x8, @floatFromInt(dot), permute(scales[r], index), acc[r]);
                }
            }
        } else {
            const at: usize = if (kind == .q4_1) 4 else 2;
            for (0..count / 2) |p| {
                const b = first + 2 * p;
                const ylo: I8x32 = @bitCast(y_bytes[b * qk ..][0..32].*);
                const yhi: I8x32 = @bitCast(y_bytes[b * qk + 32 ..][0..32].*);
                const zero: I32x8 = @splat(0);
                const eights: U8x32 = @splat(8);
                const offset = if (kind == .q4_0) zero - dot_add(dot_add(zero, eights, ylo), eights, yhi) else zero;
                inline for (0..R) |r| {
                    const b0 = rows[r] + b * bb;
                    @prefetch(b0 + ahead, .{ .locality = 2 });
                    const packed_bytes: U8x32 = std.simd.join(@as(@Vector(16, u8), b0[at..][0..16].*), @as(@Vector(16, u8), b0[bb + at ..][0..16].*));
                    const mask: U8x32 = @splat(0x0f);
                    const low = packed_bytes & mask;
                    // Shifting 16-bit lanes moves each byte's high nibble down; the mask drops
                    // the bits that crossed over from the next byte.
                    const high = @as(U8x32, @bitCast(@as(@Vector(16, u16), @bitCast(packed_bytes)) >> @splat(4))) & mask;
                    const dot = dot_add(dot_add(offset, low, ylo), high, yhi);
                    acc[r] = common.fma(F32x8, @floatFromInt(dot), pair_lanes(scales[r], p), acc[r]);
                }
            }
            if (count % 2 == 1) {
                // A last block without a partner: laid out as one block (elements 0-31).
                const b = first + count - 1;
                const yq: I8x32 = @bitCast(y_bytes[b * qk ..][0..32].*);
                const zero: I32x8 = @splat(0);
                const offset = if (kind == .q4_0) zero - dot_add(zero, @splat(8), yq) else zero;
                const index: @Vector(8, i32) = @splat(@intCast(count - 1));
                inline for (0..R) |r| {
                    const block = rows[r] + b * bb;
                    const dot = dot_add(offset, nibbles(block[at..][0..16]), yq);
                    acc[r] = common.fma(F32x8, @floatFromInt(dot), permute(scales[r], index), acc[r]);
                }
            }
        }
    }
    inline for (0..R) |r| out[r] = if (kind == .q4_1) hsum_float_8(acc[r]) + @reduce(.Add, mins[r]) else hsum_float_8(acc[r]);
}

/// ggml's hsum_float_8 (x86 quants.c): the high half added to the low one, then lanes 2-3 to
/// 0-1 (movehl), then lane 1 to lane 0 (movehdup): ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)).
inline fn hsum_float_8(v: F32x8) f32 {
    const lo: @Vector(4, f32) = @shuffle(f32, v, undefined, [4]i32{ 0, 1, 2, 3 });
    const hi: @Vector(4, f32) = @shuffle(f32, v, undefined, [4]i32{ 4, 5, 6, 7 });
    const a = hi + lo;
    return (a[0] + a[2]) + (a[1] + a[3]);
}

/// q4_1 rows times a q8_1 activation with ggml_vec_dot_q4_1_q8_1's f32 operations (x86, AVX2
/// branch), so each row's result has its bits: per block, the 32 nibbles as [low nibbles
/// (elements 0-15), high ones (16-31)] dotted with the block's quants into 8 i32 lanes (lane j:
/// elements 4j..4j+3; exact integers, vpdpbusd or vpmaddubsw + vpmaddwd alike), converted to
/// f32 and accumulated as acc = fma(d_x * d_y, lanes, acc), blocks in order; beside it
/// summs = fma(m_x, s_y, summs) per block in order (GCC contracts ggml's `summs += m*s`: its
/// build has vfmadd231ss there); the result hsum_float_8(acc) + summs. Several rows at once only
/// interleave independent chains: one gather per block reads every row's d and m (lane r: row
/// r), so the rows' summs chains run side by side in one vector.
fn dot_q4_1(comptime R: usize, rows: *const [rows_max][*]const u8, y: Activation, blocks: usize, out: *[rows_max]f32) void {
    const bb = comptime block_bytes(.q4_1);
    // Prefetched R rows past each row: the next group's lines when the R rows are adjacent, and
    // R rows further along each run when they come from far-apart runs (mul_mat_quant.zig).
    const ahead = R * blocks * bb;
    const base = @intFromPtr(rows[0]);
    var index: I32x8 = @splat(0);
    var gather_ok = has_avx2;
    inline for (0..R) |r| {
        const offset: isize = @bitCast(@intFromPtr(rows[r]) -% base);
        if (offset < std.math.minInt(i32) or offset > std.math.maxInt(i32)) gather_ok = false else index[r] = @intCast(offset);
    }
    const lane: I32x8 = comptime std.simd.iota(i32, 8);
    const mask: I32x8 = @select(i32, lane < @as(I32x8, @splat(R)), @as(I32x8, @splat(-1)), @as(I32x8, @splat(0)));
    var acc: [R]F32x8 = @splat(@splat(0));
    var summs: F32x8 = @splat(0);
    const y_bytes: [*]align(32) const u8 = @ptrCast(y.qs);
    for (0..blocks) |b| {
        var heads: I32x8 = @splat(0);
        if (has_avx2 and gather_ok) {
            heads = @"llvm.x86.avx2.gather.d.d.256"(@splat(0), rows[0] + b * bb, index, mask, 1);
        } else {
            inline for (0..R) |r| heads[r] = std.mem.readInt(i32, rows[r][b * bb ..][0..4], .little);
        }
        const dxy = halves_to_f32(heads, false) * @as(F32x8, @splat(y.d[b]));
        summs = common.fma(F32x8, halves_to_f32(heads, true), @as(F32x8, @splat(y.s[b])), summs);
        const yq: I8x32 = @bitCast(y_bytes[b * qk ..][0..32].*);
        inline for (0..R) |r| {
            const block = rows[r] + b * bb;
            @prefetch(block + ahead, .{ .locality = 2 });
            const dot = dot_add(@splat(0), nibbles(block[4..][0..16]), yq);
            acc[r] = common.fma(F32x8, @floatFromInt(dot), @as(F32x8, @splat(dxy[r])), acc[r]);
        }
    }
    inline for (0..R) |r| out[r] = hsum_float_8(acc[r]) + summs[r];
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
    const y = Activation.at(activation.ptr, k);
    var rows: [rows_max][*]const u8 = undefined;
    for (0..rows_max) |r| rows[r] = weights.ptr + r * row_len;
    var got: [rows_max]f32 = undefined;
    dot_rows(dtype, &rows, count, y, k / qk, &got);
    const w = try allocator.alloc(f32, k);
    defer allocator.free(w);
    // The activation as ggml's dot sees it: quant.zig's q8_0 (q8_1) activation row (as ggml's
    // x86 code quantizes src1), dequantized (its quants times its f16 scale), independent of
    // the layout the kernels keep it in.
    const act_type: DType = if (dtype == .q4_1) .q8_1 else .q8_0;
    const act_row = try allocator.alloc(u8, @intCast(quant.row_bytes(act_type, k)));
    defer allocator.free(act_row);
    quant.quantize_row_activation(act_type, values, act_row);
    const yv_all = try allocator.alloc(f32, k);
    defer allocator.free(yv_all);
    quant.dequantize_row(act_type, act_row, yv_all);
    for (0..count) |r| {
        quant.dequantize_row(dtype, weights[r * row_len ..][0..row_len], w);
        var want: f64 = 0;
        var magnitude: f64 = 0;
        for (0..k) |i| {
            const yv: f64 = yv_all[i];
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
        // Fewer blocks than a chunk, chunks plus an odd tail (33 blocks), whole chunks.
        for ([_]usize{ 32, 64, 96, 576, 1056, 4096 }) |k| {
            for (1..rows_max + 1) |count| try check(dtype, k, count, k * 31 + count);
        }
    }
}

test "the activation layout holds quant.zig's q8_0 / q8_1 activation bytes exactly, special blocks included" {
    const k = 8 * qk;
    var prng = std.Random.DefaultPrng.init(7);
    const random = prng.random();
    var values: [k]f32 = undefined;
    for (&values) |*v| v.* = (random.float(f32) * 2 - 1) * 3;
    @memset(values[qk .. 2 * qk], 0); // an all-zero block: scale 0
    values[2 * qk + 5] = std.math.inf(f32); // infinities and NaN take the scalar path
    values[3 * qk + 1] = -std.math.inf(f32);
    values[4 * qk + 9] = std.math.nan(f32);
    values[5 * qk + 3] = 1e-30; // tiny values: f16 scales that underflow
    for (values[6 * qk .. 7 * qk]) |*v| v.* *= 1e-6;
    var out: [Activation.bytes(k)]u8 align(64) = undefined;
    for ([_]DType{ .q8_0, .q4_1 }) |weight| {
        quantize_activation(weight, &values, &out);
        const y = Activation.at(&out, k);
        const act_type: DType = if (weight == .q4_1) .q8_1 else .q8_0;
        const size: usize = @intCast(quant.row_bytes(act_type, qk));
        for (0..k / qk) |b| {
            var block: [36]u8 = undefined;
            quant.quantize_row_activation(act_type, values[b * qk ..][0..qk], block[0..size]);
            const at: usize = if (weight == .q4_1) 4 else 2;
            // Whole pairs of a q4_0 activation swap their middle halves (see quantize_activation).
            const qs: [*]const u8 = @ptrCast(y.qs);
            var got: [qk]u8 = undefined;
            for (0..qk) |j| {
                var index = b * qk + j;
                if (weight == .q4_0 and b / 2 < k / qk / 2) {
                    const in_pair = (b % 2) * qk + j;
                    const swapped = if (in_pair >= 16 and in_pair < 48) (if (in_pair < 32) in_pair + 16 else in_pair - 16) else in_pair;
                    index = (b / 2) * 2 * qk + swapped;
                }
                got[j] = qs[index];
            }
            try std.testing.expectEqualSlices(u8, block[at..][0..qk], &got);
            try std.testing.expectEqual(@as(u32, @bitCast(f16_at(block[0..2]))), @as(u32, @bitCast(y.d[b])));
            if (weight == .q4_1) try std.testing.expectEqual(@as(u32, @bitCast(f16_at(block[2..4]))), @as(u32, @bitCast(y.s[b])));
        }
    }
}

/// ggml_vec_dot_q4_1_q8_1 / ggml_vec_dot_q8_0_q8_0 (x86, AVX2 branch) in scalar f32 steps, lane
/// by lane: the reference dot_rows must match bit for bit.
fn ggml_dot_ref(dtype: DType, x: []const u8, y: []const u8, blocks: usize) f32 {
    var acc: [8]f32 = @splat(0);
    var summs: f32 = 0;
    const xb: usize = if (dtype == .q4_1) 20 else 34;
    const yb: usize = if (dtype == .q4_1) 36 else 34;
    for (0..blocks) |b| {
        const xs = x[b * xb ..][0..xb];
        const ys = y[b * yb ..][0..yb];
        const d0 = f16_at(xs[0..2]);
        const d1 = f16_at(ys[0..2]);
        if (dtype == .q4_1) summs = common.fma(f32, f16_at(xs[2..4]), f16_at(ys[2..4]), summs);
        const dd = d0 * d1;
        const yq = ys[yb - 32 ..][0..32];
        for (0..8) |j| {
            var lane: i32 = 0;
            for (4 * j..4 * j + 4) |e| {
                const q: i32 = if (dtype == .q4_1)
                    (if (e < 16) xs[4 + e] & 15 else xs[4 + e - 16] >> 4)
                else
                    @as(i8, @bitCast(xs[2 + e]));
                lane += q * @as(i8, @bitCast(yq[e]));
            }
            acc[j] = common.fma(f32, dd, @floatFromInt(lane), acc[j]);
        }
    }
    return hsum_float_8(acc) + if (dtype == .q4_1) summs else 0;
}

test "q4_1 and q8_0 dots are bitwise ggml's x86 vec_dot for every row count" {
    const allocator = std.testing.allocator;
    for ([_]DType{ .q4_1, .q8_0 }) |dtype| {
        for ([_]usize{ 32, 64, 96, 576, 1056, 1536 }) |k| {
            var prng = std.Random.DefaultPrng.init(k + 5);
            const random = prng.random();
            const row_len: usize = @intCast(quant.row_bytes(dtype, k));
            const weights = try allocator.alloc(u8, row_len * rows_max);
            defer allocator.free(weights);
            const values = try allocator.alloc(f32, k);
            defer allocator.free(values);
            for (0..rows_max) |r| {
                for (values) |*v| v.* = (random.float(f32) * 2 - 1) * 0.1 + if (r == 2) @as(f32, 0.03) else 0;
                quant.quantize_row(dtype, values, weights[r * row_len ..][0..row_len]);
            }
            for (values) |*v| v.* = random.floatNorm(f32);
            const activation = try allocator.alignedAlloc(u8, .@"64", Activation.bytes(k));
            defer allocator.free(activation);
            quantize_activation(dtype, values, activation.ptr);
            const act_type: DType = if (dtype == .q4_1) .q8_1 else .q8_0;
            const act_row = try allocator.alloc(u8, @intCast(quant.row_bytes(act_type, k)));
            defer allocator.free(act_row);
            quant.quantize_row_activation(act_type, values, act_row);
            var rows: [rows_max][*]const u8 = undefined;
            for (0..rows_max) |r| rows[r] = weights.ptr + r * row_len;
            for (1..rows_max + 1) |count| {
                var got: [rows_max]f32 = undefined;
                dot_rows(dtype, &rows, count, Activation.at(activation.ptr, k), k / qk, &got);
                for (0..count) |r| {
                    const want = ggml_dot_ref(dtype, weights[r * row_len ..][0..row_len], act_row, k / qk);
                    try std.testing.expectEqual(@as(u32, @bitCast(want)), @as(u32, @bitCast(got[r])));
                }
            }
        }
    }
}
