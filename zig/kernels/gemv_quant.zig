//! Matrix-vector kernels for q8_0, q4_0 and q4_1 weights, the memory-bound half of a quantized
//! mul_mat (decode: a few columns of src1). As ggml does, each src1 row is first quantized per
//! block of 32 (q8_0 for q8_0/q4_0 weights, q8_1 for q4_1: quant.zig's quantize_row, so the same
//! integers and f16 scales as ggml's quantize_row_q8_*_ref), and each weight block's dot with it
//! is an integer dot scaled by both blocks' scales, as ggml_vec_dot_q4_0_q8_0,
//! ggml_vec_dot_q8_0_q8_0 and ggml_vec_dot_q4_1_q8_1 compute it. All three give ggml's x86
//! results bit for bit (the same 8 integer lanes per block, the same scale products, fma chain
//! and horizontal sum: see dot_q4 and hsum_float_8; tests/ggml_exact_dots_test.ts checks q4_1
//! and q8_0 against the pinned llama.cpp build, and this file's tests all three against
//! ggml_dot_ref).
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
//! ggml's AVX2 code does. Both run 256-bit vectors, a block per vector: ggml's lanes, and
//! 512-bit ones measured no faster, their shuffles crowding one port.
//!
//! The scales are read without gathers: vpgatherdd is microcoded on Intel since the GDS fix,
//! and a load per row and block measured faster on both builds (see head_at).

const std = @import("std");
const builtin = @import("builtin");
const quant = @import("../quant.zig");
const common = @import("common.zig");
const node = @import("../node.zig");
const dots = @import("dot_quant.zig");

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

/// The weight types these kernels take.
pub fn takes(dtype: DType) bool {
    return dtype == .q8_0 or dtype == .q4_0 or dtype == .q4_1 or dtype == .q5_0 or dtype == .q5_1;
}

/// Whether `dtype` weights pair with a q8_1 activation (with its sums; q4_1, q5_1: the formats
/// with a minimum) rather than q8_0.
pub fn pairs_q8_1(dtype: DType) bool {
    return dtype == .q4_1 or dtype == .q5_1;
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
/// as q8_1 for q4_1 and q5_1 weights and as q8_0 otherwise.
pub fn quantize_activation(weight: DType, values: []align(1) const f32, out: [*]align(64) u8) void {
    assert(takes(weight));
    assert(values.len % qk == 0);
    const blocks = values.len / qk;
    const qs: [*]u8 = out;
    const d: [*]f32 = @ptrCast(@alignCast(out + blocks * qk));
    const s: [*]f32 = @ptrCast(@alignCast(out + blocks * qk + blocks * @sizeOf(f32)));
    for (0..blocks) |b| {
        const x = values[b * qk ..][0..qk];
        if (quantize_block(pairs_q8_1(weight), x, qs[b * qk ..][0..qk], &d[b], &s[b])) continue;
        if (pairs_q8_1(weight)) {
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
pub const has_avx2 = is_x86 and builtin.cpu.has(.x86, .avx2);
/// vpdpbusd on ymm registers: the AVX-512 build has VNNI (build.zig), the AVX2 build does not.
pub const has_vnni = is_x86 and builtin.cpu.has(.x86, .avx512vnni) and builtin.cpu.has(.x86, .avx512vl);

// LLVM's own names for the x86 instructions (Zig passes `llvm.*` externs to LLVM as intrinsics),
// so the compiler schedules and allocates registers around them, unlike inline assembly.
extern fn @"llvm.x86.avx2.pmadd.ub.sw"(a: U8x32, b: I8x32) I16x16;
extern fn @"llvm.x86.avx2.pmadd.wd"(a: I16x16, b: I16x16) I32x8;
extern fn @"llvm.x86.avx512.vpdpbusd.256"(acc: I32x8, a: I32x8, b: I32x8) I32x8;
extern fn @"llvm.x86.avx2.psign.b"(a: I8x32, b: I8x32) I8x32;

/// u8 x i8 products summed in adjacent pairs to i16, saturating (vpmaddubsw). Never saturates
/// here: nibbles give at most 2 * 15 * 127, and q8_0's |x| <= 127 at most 2 * 127 * 128.
pub inline fn maddubs(a: U8x32, b: I8x32) I16x16 {
    if (comptime has_avx2) return @"llvm.x86.avx2.pmadd.ub.sw"(a, b);
    const wide_a: @Vector(32, i16) = a;
    const wide_b: @Vector(32, i16) = b;
    const products = std.simd.deinterlace(2, wide_a * wide_b);
    return products[0] +| products[1];
}

/// i16 pairs summed to i32 (vpmaddwd with ones).
pub inline fn pairs(a: I16x16) I32x8 {
    if (comptime has_avx2) return @"llvm.x86.avx2.pmadd.wd"(a, @splat(1));
    const wide: @Vector(16, i32) = a;
    const halves = std.simd.deinterlace(2, wide);
    return halves[0] + halves[1];
}

/// acc + the u8 x i8 products of each group of 4 adjacent bytes, in 8 i32 lanes: one vpdpbusd
/// with VNNI, vpmaddubsw + vpmaddwd + vpaddd without (the same integers: no saturation here).
pub inline fn dot_add(acc: I32x8, a: U8x32, b: I8x32) I32x8 {
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
    // Both halves hold the 16 bytes; shifting the upper half's dwords by 4 (vpsrlvd) brings
    // its high nibbles down, and the mask drops what crossed over. Measured faster than
    // masking and shifting 16 bytes and joining them (a vinserti128 per block).
    const both: @Vector(8, u32) = @bitCast(broadcast16(qs));
    const shifted = both >> @Vector(8, u5){ 0, 0, 0, 0, 4, 4, 4, 4 };
    return @as(U8x32, @bitCast(shifted)) & @as(U8x32, @splat(0x0f));
}

/// 16 bytes in both halves of a vector: one vbroadcasti128 load.
inline fn broadcast16(qs: *const [16]u8) U8x32 {
    const packed_bytes: @Vector(16, u8) = qs.*;
    return std.simd.join(packed_bytes, packed_bytes);
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
        inline .q4_0, .q4_1, .q5_0, .q5_1 => |kind| switch (count) {
            inline 1...rows_max => |r| return dot_q4(kind, r, 1, rows, (&y)[0..1], blocks, @ptrCast(out)),
            else => unreachable,
        },
        .q8_0 => switch (count) {
            inline 1...rows_max => |r| return dot_q8_0(r, rows, y, blocks, out),
            else => unreachable,
        },
        else => unreachable,
    }
}

/// Activation columns one call of `dot_tile` reads together: each weight block unpacked serves
/// them all. R x C accumulators (and C activation blocks) must stay in registers: the AVX-512
/// build has 32 vector registers, the AVX2 build 16.
pub const cols_max = if (has_vnni) 4 else 2;
/// Weight rows one call of `dot_tile` reads together.
pub const tile_rows_max = 4;

/// out[c][r] = dot(row r of weights, ys[c]) for `count` (<= tile_rows_max) rows and `cols`
/// (<= cols_max) activations: each element the bits dot_rows gives it (its own accumulators,
/// in the same order), with the weight blocks unpacked once for all columns. q8_0 has no
/// tiled kernel and takes dot_rows column by column.
pub fn dot_tile(
    dtype: DType,
    rows: *const [rows_max][*]const u8,
    count: usize,
    ys: *const [cols_max]Activation,
    cols: usize,
    blocks: usize,
    out: *[cols_max][rows_max]f32,
) void {
    assert(count >= 1 and count <= tile_rows_max and cols >= 1 and cols <= cols_max);
    switch (dtype) {
        inline .q4_0, .q4_1, .q5_0, .q5_1 => |kind| switch (count) {
            inline 1...tile_rows_max => |r| switch (cols) {
                inline 1...cols_max => |c| return dot_q4(kind, r, c, rows, ys[0..c], blocks, out[0..c]),
                else => unreachable,
            },
            else => unreachable,
        },
        else => for (0..cols) |c| dot_rows(dtype, rows, count, ys[c], blocks, &out[c]),
    }
}

/// Bytes of one block of `kind`.
fn block_bytes(comptime kind: DType) usize {
    return switch (kind) {
        .q4_0 => 18,
        .q4_1 => 20,
        .q5_0 => 22,
        .q5_1 => 24,
        .q8_0 => 34,
        else => unreachable,
    };
}

/// Blocks whose scales are read and converted together.
const chunk = 8;

/// How far ahead of each block a row's bytes are prefetched (into L2). Each row is one of
/// mul_mat_quant.zig's far-apart sequential streams; 768-1024 bytes measured best (2 threads,
/// 4096x4096 weights from DRAM, AVX-512 build: q4_0 27-29 GB/s, against 25-26.5 at 4 rows
/// ahead and 21-22 with no prefetch).
const prefetch_bytes = 1024;

/// The first 4 bytes of each of `count` (<= chunk) consecutive blocks of `bb` bytes from `row`
/// as i32 lanes (lanes past `count` are 0): f16 d in the low half, and for q4_1 f16 m in the
/// high half.
inline fn chunk_heads(comptime bb: usize, row: [*]const u8, count: usize) I32x8 {
    var out: I32x8 = @splat(0);
    if (count == chunk) {
        inline for (0..chunk) |i| out[i] = head_at(row + i * bb);
        return out;
    }
    for (0..count) |i| out[i] = head_at(row + i * bb);
    return out;
}

/// A block's first 4 bytes as a little-endian i32 (every target Graft builds is little-endian). The load is volatile so that LLVM
/// keeps it a scalar load (vmovd/vpinsrd) instead of vectorizing neighbours into a vpgatherdd,
/// which the AVX-512 target thinks cheap and which is several times slower here (Intel's gather
/// microcode since the GDS fix; measured 19 vs 11 GB/s for q4_0 in cache).
inline fn head_at(p: [*]const u8) i32 {
    comptime assert(builtin.cpu.arch.endian() == .little);
    const word: *align(1) const volatile i32 = @ptrCast(p);
    return word.*;
}

/// The low f16 halves of 8 i32 lanes (the blocks' d) as f32.
inline fn low_halves_to_f32(heads: I32x8) F32x8 {
    const bits: @Vector(8, u32) = @bitCast(heads);
    const h: @Vector(8, f16) = @bitCast(@as(@Vector(8, u16), @truncate(bits)));
    return common.widen_f16(8, h);
}

extern fn @"llvm.x86.avx2.permps"(a: F32x8, index: @Vector(8, i32)) F32x8;

/// a[index[i]] per lane (vpermps).
inline fn permute(a: F32x8, index: @Vector(8, i32)) F32x8 {
    if (comptime has_avx2) return @"llvm.x86.avx2.permps"(a, index);
    var out: F32x8 = undefined;
    for (0..8) |i| out[i] = a[@intCast(index[i])];
    return out;
}

/// q8_0 rows' dots, a chunk of 8 blocks at a time: per row, the chunk's 8 scales are read,
/// converted and multiplied by the activation's scales in one vector; then each block's integer
/// sums (ggml's, in 8 i32 lanes) take their scale lane by one vpermps.
fn dot_q8_0(comptime R: usize, rows: *const [rows_max][*]const u8, y: Activation, blocks: usize, out: *[rows_max]f32) void {
    const bb = comptime block_bytes(.q8_0);
    var acc: [R]F32x8 = @splat(@splat(0));
    const y_bytes: [*]align(32) const u8 = @ptrCast(y.qs);
    var first: usize = 0;
    while (first < blocks) : (first += chunk) {
        const count = @min(chunk, blocks - first);
        var dy: F32x8 = @splat(0);
        for (0..count) |i| dy[i] = y.d[first + i];
        var scales: [R]F32x8 = undefined;
        inline for (0..R) |r| scales[r] = low_halves_to_f32(chunk_heads(bb, rows[r] + first * bb, count)) * dy;
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
                @prefetch(block + prefetch_bytes, .{ .locality = 2 });
                const xq: I8x32 = @bitCast(block[2..34].*);
                const dot = if (has_vnni)
                    dot_add(offset, @as(U8x32, @bitCast(xq)) ^ @as(U8x32, @splat(0x80)), yq)
                else
                    dot_add(zero, @bitCast(@abs(xq)), sign(yq, xq));
                acc[r] = common.fma(F32x8, @floatFromInt(dot), permute(scales[r], index), acc[r]);
            }
        }
    }
    inline for (0..R) |r| out[r] = hsum_float_8(acc[r]);
}

/// ggml's hsum_float_8 (x86 quants.c): the high half added to the low one, then lanes 2-3 to
/// 0-1 (movehl), then lane 1 to lane 0 (movehdup): ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)).
inline fn hsum_float_8(v: F32x8) f32 {
    const lo: @Vector(4, f32) = @shuffle(f32, v, undefined, [4]i32{ 0, 1, 2, 3 });
    const hi: @Vector(4, f32) = @shuffle(f32, v, undefined, [4]i32{ 4, 5, 6, 7 });
    const a = hi + lo;
    return (a[0] + a[2]) + (a[1] + a[3]);
}

/// dot_q4's and dot_q4_pairs' per-block scales of block `b` for every column c: `dxy[c][h]`
/// holds lanes [d_r * d_y, m_r * d_y] of rows 4h..4h+3 (one vcvtph2ps of their heads), and for
/// weights with a minimum `summs[c][h]` gains the fused m_r * s_y.
inline fn block_scales(
    comptime kind: DType,
    comptime R: usize,
    comptime C: usize,
    rows: *const [rows_max][*]const u8,
    ys: *const [C]Activation,
    b: usize,
    dxy: *[C][(R + 3) / 4]F32x8,
    summs: *[C][(R + 3) / 4]F32x8,
) void {
    const H = comptime (R + 3) / 4;
    const bb = comptime block_bytes(kind);
    inline for (0..H) |h| {
        var heads: @Vector(4, i32) = @splat(0);
        inline for (4 * h..@min(R, 4 * h + 4)) |r| heads[r - 4 * h] = head_at(rows[r] + b * bb);
        const dm: F32x8 = common.widen_f16(8, @bitCast(heads));
        inline for (0..C) |c| {
            dxy[c][h] = dm * @as(F32x8, @splat(ys[c].d[b]));
            if (comptime pairs_q8_1(kind)) summs[c][h] = common.fma(F32x8, dm, @as(F32x8, @splat(ys[c].s[b])), summs[c][h]);
        }
    }
}

/// q4_1 rows times a q8_1 activation, or q4_0 rows times a q8_0 one, with
/// ggml_vec_dot_q4_1_q8_1's and ggml_vec_dot_q4_0_q8_0's f32 operations (x86, AVX2 branch), so
/// each row's result has their bits: per block, the 32 nibbles (less 8 for q4_0) as [low
/// nibbles (elements 0-15), high ones (16-31)] dotted with the block's quants into 8 i32 lanes
/// (lane j: elements 4j..4j+3; exact integers, vpdpbusd or vpmaddubsw + vpmaddwd alike),
/// converted to f32 and accumulated as acc = fma(d_x * d_y, lanes, acc), blocks in order; for
/// q4_1, beside it summs = fma(m_x, s_y, summs) per block in order (GCC contracts ggml's
/// `summs += m*s`: its build has vfmadd231ss there); the result hsum_float_8(acc) (+ summs).
/// Several rows and columns at once only interleave independent chains: a weight block is
/// unpacked once for the C columns, an activation block loaded once for the R rows.
///
/// q5_1 and q5_0 (ggml_vec_dot_q5_1_q8_1, ggml_vec_dot_q5_0_q8_0) are q4_1 and q4_0 with a
/// fifth bit per element (the 32 bits after the head, bit j for element j) above the nibble,
/// and q5_0's offset 16 instead of 8: the same float steps, so the same code with the bits
/// or'ed into the nibbles (dot_quant.zig's dot_q5_*, which these match bit for bit).
/// A q4 block's 16 bytes broadcast to both halves, masked to the low nibbles in the low half and
/// the high nibbles in place (16 times their value) in the high half.
const in_place_mask: U8x32 = std.simd.join(@as(@Vector(16, u8), @splat(0x0f)), @as(@Vector(16, u8), @splat(0xf0)));

/// The bytes whose dot with a block of activation quants gives the per-lane offset of the
/// weights' stored values from their signed ones: 16 for q5_0's 5-bit values, 8 for q4_0's
/// nibbles (128 in the high half where they are taken in place, see dot_q4).
fn quant_offsets(comptime q5: bool, comptime in_place: bool) U8x32 {
    if (q5) return @splat(16);
    if (in_place) return std.simd.join(@as(@Vector(16, u8), @splat(8)), @as(@Vector(16, u8), @splat(128)));
    return @splat(8);
}

fn dot_q4(comptime kind: DType, comptime R: usize, comptime C: usize, rows: *const [rows_max][*]const u8, ys: *const [C]Activation, blocks: usize, out: *[C][rows_max]f32) void {
    comptime assert(R <= rows_max and (kind == .q4_0 or kind == .q4_1 or kind == .q5_0 or kind == .q5_1));
    if (comptime has_vnni and C % 2 == 0) return dot_q4_pairs(kind, R, C, rows, ys, blocks, out);
    const q5 = comptime kind == .q5_0 or kind == .q5_1;
    const with_min = comptime pairs_q8_1(kind);
    // Rows 0-3 and 4-7 each have their vector of heads.
    const H = comptime (R + 3) / 4;
    const bb = comptime block_bytes(kind);
    const head = comptime if (with_min) 4 else 2;
    // q5's fifth bits follow the head, its nibbles them.
    const at = comptime if (q5) head + 4 else head;
    // Each row's first 4 bytes (f16 d, then q4_1's f16 m or q4_0's first quants) go to one
    // i32 lane, and one vcvtph2ps makes `dm` = [d_0, m_0, d_1, m_1, ...] in f32: lane 2r
    // times d_y is row r's d_x * d_y, and for q4_1 lane 2r + 1 carries row r's summs chain
    // (the chains in the other lanes are unused).
    //
    // With VNNI the high nibbles are taken in place (byte & 0xf0, 16 times their value)
    // instead of shifted down: lanes 4-7 of the integer sums are 16 times ggml's, exact in f32
    // (|16 s| < 2^24), so those lanes of the accumulator are exactly 16 times ggml's at every
    // step (fma(16 a, b, 16 c) = 16 fma(a, b, c): scaling by a power of two is exact, and the
    // values are far from f32's range limits), and one exact multiply by 1/16 at the end gives
    // ggml's bits.
    //
    // q4_0's quants are nibbles - 8: the nibbles' sums are offset by -8 * sum(y) per lane
    // (-128 * sum(y) in the high lanes taken in place), one dot per block for all rows; q5_0's
    // by -16 * sum(y). q5's high nibbles are shifted down: their fifth bit would not fit a byte
    // in place.
    const in_place = comptime has_vnni and !q5;
    const nibble_mask = in_place_mask;
    const eights = comptime quant_offsets(q5, in_place);
    var acc: [C][R]F32x8 = @splat(@splat(@splat(0)));
    var summs: [C][H]F32x8 = @splat(@splat(@splat(0)));
    var y_bytes: [C][*]align(32) const u8 = undefined;
    inline for (0..C) |c| y_bytes[c] = @ptrCast(ys[c].qs);
    for (0..blocks) |b| {
        var dxy: [C][H]F32x8 = undefined;
        block_scales(kind, R, C, rows, ys, b, &dxy, &summs);
        var yq: [C]I8x32 = undefined;
        var offset: [C]I32x8 = undefined;
        const zero: I32x8 = @splat(0);
        inline for (0..C) |c| {
            yq[c] = @bitCast(y_bytes[c][b * qk ..][0..32].*);
            offset[c] = if (with_min) zero else zero - dot_add(zero, eights, yq[c]);
        }
        inline for (0..R) |r| {
            const block = rows[r] + b * bb;
            @prefetch(block + prefetch_bytes, .{ .locality = 2 });
            var quants = if (in_place) broadcast16(block[at..][0..16]) & nibble_mask else nibbles(block[at..][0..16]);
            if (q5) quants |= @select(u8, fifth_bits(block[head..][0..4]), @as(U8x32, @splat(0x10)), @as(U8x32, @splat(0)));
            inline for (0..C) |c| {
                const dot = dot_add(offset[c], quants, yq[c]);
                acc[c][r] = common.fma(F32x8, @floatFromInt(dot), @as(F32x8, @splat(dxy[c][r / 4][2 * (r % 4)])), acc[c][r]);
            }
        }
    }
    const unscale: F32x8 = if (in_place) .{ 1, 1, 1, 1, 1.0 / 16.0, 1.0 / 16.0, 1.0 / 16.0, 1.0 / 16.0 } else @splat(1);
    inline for (0..C) |c| {
        inline for (0..R) |r| {
            const sum = hsum_float_8(acc[c][r] * unscale);
            out[c][r] = if (with_min) sum + summs[c][r / 4][2 * (r % 4) + 1] else sum;
        }
    }
}

extern fn @"llvm.x86.avx512.vpdpbusd.512"(acc: I32x16, a: I32x16, b: I32x16) I32x16;
const I32x16 = @Vector(16, i32);
const F32x16 = @Vector(16, f32);

/// dot_q4 for an even number of columns in the AVX-512 build: columns 2p and 2p + 1 share 512-bit
/// vectors, column 2p in the low 8 lanes and 2p + 1 in the high ones, so one vpdpbusd, one
/// conversion and one fma serve two elements (their lanes are computed apart, each exactly as
/// dot_q4 computes it: the same integers, scales and chains, so the same bits).
fn dot_q4_pairs(comptime kind: DType, comptime R: usize, comptime C: usize, rows: *const [rows_max][*]const u8, ys: *const [C]Activation, blocks: usize, out: *[C][rows_max]f32) void {
    comptime assert(has_vnni and C % 2 == 0);
    const P = C / 2;
    const q5 = comptime kind == .q5_0 or kind == .q5_1;
    const with_min = comptime pairs_q8_1(kind);
    const H = comptime (R + 3) / 4;
    const bb = comptime block_bytes(kind);
    const head = comptime if (with_min) 4 else 2;
    const at = comptime if (q5) head + 4 else head;
    // As dot_q4: q4's high nibbles in place (16 times their value, undone at the end), q5's
    // shifted down; the offsets of q4_0 and q5_0 from one dot of the activation per block.
    const in_place = comptime !q5;
    const U8x64 = @Vector(64, u8);
    const I8x64 = @Vector(64, i8);
    const nibble_mask: U8x64 = comptime std.simd.join(in_place_mask, in_place_mask);
    const eights32 = comptime quant_offsets(q5, in_place);
    const eights: U8x64 = comptime std.simd.join(eights32, eights32);
    var acc: [P][R]F32x16 = @splat(@splat(@splat(0)));
    var summs: [C][H]F32x8 = @splat(@splat(@splat(0)));
    var y_bytes: [C][*]align(32) const u8 = undefined;
    inline for (0..C) |c| y_bytes[c] = @ptrCast(ys[c].qs);
    for (0..blocks) |b| {
        var dxy: [C][H]F32x8 = undefined;
        block_scales(kind, R, C, rows, ys, b, &dxy, &summs);
        var yq: [P]I8x64 = undefined;
        var offset: [P]I32x16 = undefined;
        const zero: I32x16 = @splat(0);
        inline for (0..P) |p| {
            const lo: I8x32 = @bitCast(y_bytes[2 * p][b * qk ..][0..32].*);
            const hi: I8x32 = @bitCast(y_bytes[2 * p + 1][b * qk ..][0..32].*);
            yq[p] = std.simd.join(lo, hi);
            offset[p] = if (with_min) zero else zero - @"llvm.x86.avx512.vpdpbusd.512"(zero, @bitCast(eights), @bitCast(yq[p]));
        }
        inline for (0..R) |r| {
            const block = rows[r] + b * bb;
            @prefetch(block + prefetch_bytes, .{ .locality = 2 });
            const packed_bytes: @Vector(16, u8) = block[at..][0..16].*;
            const four = std.simd.join(std.simd.join(packed_bytes, packed_bytes), std.simd.join(packed_bytes, packed_bytes));
            var quants: U8x64 = undefined;
            if (in_place) {
                quants = four & nibble_mask;
            } else {
                const words: @Vector(16, u32) = @bitCast(four);
                const shifted = words >> @Vector(16, u5){ 0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4 };
                quants = @as(U8x64, @bitCast(shifted)) & @as(U8x64, @splat(0x0f));
                const bits = std.mem.readInt(u32, block[head..][0..4], .little);
                const set: @Vector(64, bool) = @bitCast(@as(u64, bits) | @as(u64, bits) << 32);
                quants |= @select(u8, set, @as(U8x64, @splat(0x10)), @as(U8x64, @splat(0)));
            }
            inline for (0..P) |p| {
                const dot = @"llvm.x86.avx512.vpdpbusd.512"(offset[p], @bitCast(quants), @bitCast(yq[p]));
                const lane: i32 = @intCast(2 * (r % 4));
                const scale = @shuffle(f32, dxy[2 * p][r / 4], dxy[2 * p + 1][r / 4], [_]i32{lane} ** 8 ++ [_]i32{~lane} ** 8);
                acc[p][r] = common.fma(F32x16, @floatFromInt(dot), scale, acc[p][r]);
            }
        }
    }
    const unscale: F32x8 = if (in_place) .{ 1, 1, 1, 1, 1.0 / 16.0, 1.0 / 16.0, 1.0 / 16.0, 1.0 / 16.0 } else @splat(1);
    inline for (0..P) |p| {
        inline for (0..R) |r| {
            const halves: [2]F32x8 = @bitCast(acc[p][r]);
            inline for (0..2) |t| {
                const c = 2 * p + t;
                const sum = hsum_float_8(halves[t] * unscale);
                out[c][r] = if (with_min) sum + summs[c][r / 4][2 * (r % 4) + 1] else sum;
            }
        }
    }
}

/// Bit j of the little-endian u32 at `qh` as lane j (q5's fifth bits): true where set.
inline fn fifth_bits(qh: *const [4]u8) @Vector(32, bool) {
    return @bitCast(std.mem.readInt(u32, qh, .little));
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
    const act_type: DType = if (pairs_q8_1(dtype)) .q8_1 else .q8_0;
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
        const bound = 1e-5 * magnitude + if (pairs_q8_1(dtype)) 1e-3 * magnitude else 0;
        try std.testing.expect(@abs(@as(f64, got[r]) - want) <= bound);
    }
}

test "q8_0, q4_0, q4_1, q5_0 and q5_1 mat-vec dots match the f64 dot of the dequantized rows" {
    for ([_]DType{ .q8_0, .q4_0, .q4_1, .q5_0, .q5_1 }) |dtype| {
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
    for ([_]DType{ .q8_0, .q4_1, .q5_1 }) |weight| {
        quantize_activation(weight, &values, &out);
        const y = Activation.at(&out, k);
        const act_type: DType = if (pairs_q8_1(weight)) .q8_1 else .q8_0;
        const size: usize = @intCast(quant.row_bytes(act_type, qk));
        for (0..k / qk) |b| {
            var block: [36]u8 = undefined;
            quant.quantize_row_activation(act_type, values[b * qk ..][0..qk], block[0..size]);
            const at: usize = if (pairs_q8_1(weight)) 4 else 2;
            const qs: [*]const u8 = @ptrCast(y.qs);
            try std.testing.expectEqualSlices(u8, block[at..][0..qk], qs[b * qk ..][0..qk]);
            try std.testing.expectEqual(@as(u32, @bitCast(f16_at(block[0..2]))), @as(u32, @bitCast(y.d[b])));
            if (pairs_q8_1(weight)) try std.testing.expectEqual(@as(u32, @bitCast(f16_at(block[2..4]))), @as(u32, @bitCast(y.s[b])));
        }
    }
}

/// ggml_vec_dot_q4_1_q8_1 / ggml_vec_dot_q4_0_q8_0 / ggml_vec_dot_q8_0_q8_0 /
/// ggml_vec_dot_q5_1_q8_1 / ggml_vec_dot_q5_0_q8_0 (x86, AVX2 branch) in scalar f32 steps, lane
/// by lane: the reference dot_rows must match bit for bit.
fn ggml_dot_ref(dtype: DType, x: []const u8, y: []const u8, blocks: usize) f32 {
    var acc: [8]f32 = @splat(0);
    var summs: f32 = 0;
    const xb: usize = @intCast(quant.row_bytes(dtype, qk));
    const yb: usize = if (pairs_q8_1(dtype)) 36 else 34;
    for (0..blocks) |b| {
        const xs = x[b * xb ..][0..xb];
        const ys = y[b * yb ..][0..yb];
        const d0 = f16_at(xs[0..2]);
        const d1 = f16_at(ys[0..2]);
        if (pairs_q8_1(dtype)) summs = common.fma(f32, f16_at(xs[2..4]), f16_at(ys[2..4]), summs);
        const head: usize = if (pairs_q8_1(dtype)) 4 else 2;
        const qh = std.mem.readInt(u32, xs[head..][0..4], .little);
        const dd = d0 * d1;
        const yq = ys[yb - 32 ..][0..32];
        for (0..8) |j| {
            var lane: i32 = 0;
            for (4 * j..4 * j + 4) |e| {
                const q: i32 = switch (dtype) {
                    .q4_1 => if (e < 16) xs[4 + e] & 15 else xs[4 + e - 16] >> 4,
                    .q4_0 => @as(i32, if (e < 16) xs[2 + e] & 15 else xs[2 + e - 16] >> 4) - 8,
                    .q5_1, .q5_0 => @as(i32, if (e < 16) xs[head + 4 + e] & 15 else xs[head + 4 + e - 16] >> 4) +
                        @as(i32, @intCast((qh >> @intCast(e)) & 1)) * 16 - if (dtype == .q5_0) @as(i32, 16) else 0,
                    else => @as(i8, @bitCast(xs[2 + e])),
                };
                lane += q * @as(i8, @bitCast(yq[e]));
            }
            acc[j] = common.fma(f32, dd, @floatFromInt(lane), acc[j]);
        }
    }
    return hsum_float_8(acc) + if (pairs_q8_1(dtype)) summs else 0;
}

test "q4_1, q4_0, q8_0, q5_0 and q5_1 dots are bitwise ggml's x86 vec_dot for every row count" {
    const allocator = std.testing.allocator;
    for ([_]DType{ .q4_1, .q4_0, .q8_0, .q5_0, .q5_1 }) |dtype| {
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
            const act_type: DType = if (pairs_q8_1(dtype)) .q8_1 else .q8_0;
            const act_row = try allocator.alloc(u8, @intCast(quant.row_bytes(act_type, k)));
            defer allocator.free(act_row);
            quant.quantize_row_activation(act_type, values, act_row);
            var rows: [rows_max][*]const u8 = undefined;
            for (0..rows_max) |r| rows[r] = weights.ptr + r * row_len;
            for (1..rows_max + 1) |count| {
                var got: [rows_max]f32 = undefined;
                dot_rows(dtype, &rows, count, Activation.at(activation.ptr, k), k / qk, &got);
                for (0..count) |r| {
                    const x = weights[r * row_len ..][0..row_len];
                    const want = ggml_dot_ref(dtype, x, act_row, k / qk);
                    try std.testing.expectEqual(@as(u32, @bitCast(want)), @as(u32, @bitCast(got[r])));
                    // dot_quant.zig's single-row dots, which mul_mat_quant.zig ran for q5
                    // weights before they came here: the same bits.
                    const single: ?f32 = switch (dtype) {
                        .q5_0 => dots.dot_q5_0_q8_0(x, act_row),
                        .q5_1 => dots.dot_q5_1_q8_1(x, act_row),
                        .q4_1 => dots.dot_q4_1_q8_1(x, act_row),
                        else => null,
                    };
                    if (single) |v| try std.testing.expectEqual(@as(u32, @bitCast(v)), @as(u32, @bitCast(got[r])));
                }
            }
        }
    }
}

test "dot_tile gives every element dot_rows' bits, for every row and column count" {
    const allocator = std.testing.allocator;
    for ([_]DType{ .q4_1, .q4_0, .q8_0, .q5_0, .q5_1 }) |dtype| {
        for ([_]usize{ 32, 96, 1056 }) |k| {
            var prng = std.Random.DefaultPrng.init(k + 11);
            const random = prng.random();
            const row_len: usize = @intCast(quant.row_bytes(dtype, k));
            const weights = try allocator.alloc(u8, row_len * tile_rows_max);
            defer allocator.free(weights);
            const values = try allocator.alloc(f32, k);
            defer allocator.free(values);
            for (0..tile_rows_max) |r| {
                for (values) |*v| v.* = (random.float(f32) * 2 - 1) * 0.1 + if (r == 1) @as(f32, 0.03) else 0;
                quant.quantize_row(dtype, values, weights[r * row_len ..][0..row_len]);
            }
            const y_bytes = Activation.bytes(k);
            const activations = try allocator.alignedAlloc(u8, .@"64", y_bytes * cols_max);
            defer allocator.free(activations);
            var ys: [cols_max]Activation = undefined;
            for (0..cols_max) |c| {
                for (values) |*v| v.* = random.floatNorm(f32);
                quantize_activation(dtype, values, @alignCast(activations.ptr + c * y_bytes));
                ys[c] = Activation.at(@alignCast(activations.ptr + c * y_bytes), k);
            }
            var rows: [rows_max][*]const u8 = undefined;
            for (0..tile_rows_max) |r| rows[r] = weights.ptr + r * row_len;
            for (1..tile_rows_max + 1) |count| {
                for (1..cols_max + 1) |cols| {
                    var got: [cols_max][rows_max]f32 = undefined;
                    dot_tile(dtype, &rows, count, &ys, cols, k / qk, &got);
                    for (0..cols) |c| {
                        var want: [rows_max]f32 = undefined;
                        dot_rows(dtype, &rows, count, ys[c], k / qk, &want);
                        for (0..count) |r| try std.testing.expectEqual(@as(u32, @bitCast(want[r])), @as(u32, @bitCast(got[c][r])));
                    }
                }
            }
        }
    }
}
