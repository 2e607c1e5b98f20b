//! mul_mat in the order of llama.cpp's repacked q4_0 / q4_K kernels (params[1] == 2, TS
//! `mulMat(a, b, { ggml: true, repack: true })`): what a default llama.cpp run computes on an
//! x86 CPU with AVX2 (no AMX), where q4_0 and q4_K weights with ne[1] % 8 == 0 live in the
//! CPU_REPACK buffer (ggml-cpu/repack.cpp, pinned llama.cpp 0.3.36).
//!
//! Where ggml takes it (`takes`): src0 q4_0 or q4_K, 2-D, ne[1] % 8 == 0; src1 f32 with rows of
//! adjacent floats and ne[3] == 1 (extra_buffer_type::supports_op, forward_mul_mat's asserts);
//! src1 batches (ne[2]) broadcast the one src0. Every other params-2 node computes as params 1.
//!
//! ggml's steps (tensor_traits::forward_mul_mat; arch/x86/repack.cpp), per src1 batch of n
//! columns: the first n - n % 4 columns are quantized 4 at a time by ggml_quantize_mat_q8_0_4x8 /
//! _q8_K_4x8 and multiplied by ggml_gemm_q4_0_8x8_q8_0 / _q4_K_8x8_q8_K; the n % 4 columns left
//! are quantized by quantize_row_q8_0 / _q8_K and multiplied by ggml_gemv_*. Per output element
//! (weight row r, column c), in every branch (the AVX2 one, the AVX-512 one taking 16 columns and
//! 4 or 16 rows at a time, their remainders) the same float steps, established from the sources:
//! - q4_0 (gemm and gemv alike): acc = 0; per block b in order
//!   acc = fma(f32(isum_b), f32(d_w) * f32(d_a), acc), isum_b = sum_i (q_i - 8) * a_i, the
//!   block's exact integer dot (int32 lanes of maddubs/madd or vpdpbusd: no saturation, the
//!   nibbles being at most 8 in size and |a| <= 127), d_w and d_a the blocks' f16 scales, their
//!   product rounded to f32 first.
//! - q4_K gemm (columns in groups of 4): acc = accm = 0; per super-block b, per pair p = 0..3 of
//!   its 32-element sub-blocks j = 2p, 2p+1:
//!   acc = fma(f32(sc_2p * isum_2p + sc_2p+1 * isum_2p+1), f32(d_w) * d_a, acc),
//!   accm = fma(f32(m_2p * S_2p + m_2p+1 * S_2p+1), f32(dmin_w) * d_a, accm);
//!   result acc - accm. isum_j = sum of the sub-block's nibbles times the q8_K quants (exact:
//!   int16 sums of 16 products of at most 15 * 128, then vpmaddwd by the scale), S_j the q8_K
//!   sums of the sub-block's 32 quants (bsums pairs), d_a the q8_K block's f32 d.
//! - q4_K gemv (the n % 4 columns left): the same with one step per super-block:
//!   acc = fma(f32(sum_j sc_j * isum_j), f32(d_w) * d_a, acc),
//!   accm = fma(f32(sum_j m_j * S_j), f32(dmin_w) * d_a, accm); result acc - accm. The int32
//!   sum can exceed 2^24: f32() rounds it to nearest even, as vcvtdq2ps.
//! - Activations: ggml_quantize_mat_q8_0_4x8 gives each row exactly quantize_row_q8_0's block
//!   (the same absmax, d = absmax / 127, quants x * (127 / absmax) rounded half to even).
//!   ggml_quantize_mat_q8_K_4x8 differs from quantize_row_q8_K in one case: the reference takes
//!   the sign of the first element of largest magnitude (iscale = -127 / max), the 4x8 version
//!   takes iscale = -127 / amax when any element equals +amax and 127 / amax otherwise, so a
//!   block holding both +amax and -amax (-amax first) gets the other sign; the quants are
//!   otherwise the same (nearest_int and vroundps both round half to even, |q| <= 127), d =
//!   1 / iscale, bsums the exact sums of 16. `quantize_q8_K_4x8` follows the 4x8 rule.
//!
//! The kernel keeps ggml's shape: 8 weight rows per pass, a row per vector lane, so each block's
//! integer totals come out of the dot instructions per row without a horizontal sum. Each pass
//! unpacks a chunk of the 8 rows' blocks once (a 4x8 transpose of their 32-bit words puts word t
//! of every row in one vector; the nibbles are then masked out) into a small panel in L1, and
//! every column of src1 is then dotted with the panel: the unpacking is shared by all columns.
//! A lone column (decode) skips the panel: each block's vectors go from the transpose straight
//! into its dot (the same operations, in the same order).
//! q4_0's weights are taken as unsigned nibbles and 8 * sum(a) is subtracted from each block's
//! total (the same integer as ggml's signed dot); the integer sums use vpdpbusd with VNNI,
//! vpmaddubsw + vpaddw + vpmaddwd without (exact either way), so both kernel builds give ggml's
//! bits, and ggml's AVX2 and AVX-512 builds agree (tests/fixtures/ggml_exact_dots{,_avx2}.json).

const std = @import("std");
const builtin = @import("builtin");
const common = @import("common.zig");
const quant = @import("../quant.zig");
const gemv = @import("gemv_quant.zig");

const assert = common.assert;
const Tensor = common.Tensor;
const DType = common.DType;

const U8x32 = @Vector(32, u8);
const I8x32 = @Vector(32, i8);
const I16x16 = @Vector(16, i16);
const I32x8 = @Vector(8, i32);
const U32x8 = @Vector(8, u32);
const F32x8 = @Vector(8, f32);

/// Weight rows per pass (ggml's 8x8 interleave), one per vector lane.
pub const rows = 8;
/// Elements of a q4_0 / q8_0 block and of a k-quant super-block.
const qk = 32;
const qk_k = 256;
/// q4_0 blocks unpacked per panel: as many elements as one q4_K super-block.
const q4_0_chunk = 8;

/// Whether llama.cpp's CPU backend would compute this node with its repacked kernels (see the
/// file's doc): params[1] == 2 and the shapes and types ggml repacks.
pub fn takes(n: *const common.Node) bool {
    if (@as(f32, @bitCast(n.params[1])) != 2.0) return false;
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    if (a.dtype != .q4_0 and a.dtype != .q4_K) return false;
    if (a.ne[1] % rows != 0 or a.ne[2] != 1 or a.ne[3] != 1) return false;
    return b.dtype == .f32 and b.ne[3] == 1 and b.nb[0] == @sizeOf(f32);
}

// ---------------------------------------------------------------------------------------------
// Activations: each src1 row quantized once into the work buffer, in a layout of this file.

/// A q8_0 row as gemv_quant.zig's Activation (32-quant runs, f32 d per block), whose third
/// array (q8_1's sums there, unused for q8_0) holds each block's 8 * sum of quants as i32: the
/// term that turns q4_0's unsigned nibbles' dot into the signed one.
const Act0 = struct {
    qs: [*]const u8,
    d: [*]const f32,
    offset: [*]const i32,

    fn bytes(k: usize) usize {
        return gemv.Activation.bytes(k);
    }

    fn at(base: [*]align(64) const u8, k: usize) Act0 {
        const blocks = k / qk;
        return .{
            .qs = base,
            .d = @ptrCast(@alignCast(base + blocks * qk)),
            .offset = @ptrCast(@alignCast(base + blocks * qk + blocks * @sizeOf(f32))),
        };
    }

    fn quantize(values: []align(1) const f32, out: [*]align(64) u8) void {
        gemv.quantize_activation(.q4_0, values, out);
        const blocks = values.len / qk;
        const offset: [*]i32 = @ptrCast(@alignCast(out + blocks * qk + blocks * @sizeOf(f32)));
        for (0..blocks) |b| {
            const q: I8x32 = @bitCast(out[b * qk ..][0..qk].*);
            offset[b] = 8 * @reduce(.Add, @as(I32x8, @bitCast(gemv.pairs(gemv.maddubs(@splat(1), q)))));
        }
    }
};

/// A q8_K row: per super-block its 256 quants (in one run, 32-byte aligned), its f32 d, and the
/// sums of its 8 sub-blocks of 32 quants as 4 words (sub-blocks 2p and 2p + 1 as the low and
/// high i16 of word p, the pair vpmaddwd takes with the weights' mins).
const ActK = struct {
    qs: [*]const u8,
    d: [*]const f32,
    sums: [*]const u32,

    fn bytes(k: usize) usize {
        const blocks = k / qk_k;
        return std.mem.alignForward(usize, blocks * (qk_k + @sizeOf(f32) + 4 * @sizeOf(u32)), 64);
    }

    fn at(base: [*]align(64) const u8, k: usize) ActK {
        const blocks = k / qk_k;
        return .{
            .qs = base,
            .d = @ptrCast(@alignCast(base + blocks * qk_k)),
            .sums = @ptrCast(@alignCast(base + blocks * (qk_k + @sizeOf(f32)))),
        };
    }

    /// `values` quantized as quantize_row_q8_K does, or (`four_by_eight`) as
    /// ggml_quantize_mat_q8_K_4x8 does.
    fn quantize(values: []align(1) const f32, four_by_eight: bool, out: [*]align(64) u8) void {
        const blocks = values.len / qk_k;
        const d: [*]f32 = @ptrCast(@alignCast(out + blocks * qk_k));
        const sums: [*]u32 = @ptrCast(@alignCast(out + blocks * (qk_k + @sizeOf(f32))));
        for (0..blocks) |b| {
            var block: [292]u8 = undefined;
            const x = values[b * qk_k ..][0..qk_k];
            if (four_by_eight) quantize_q8_K_4x8(x, &block) else quant.quantize_row_activation(.q8_K, x, &block);
            d[b] = @bitCast(std.mem.readInt(u32, block[0..4], .little));
            out[b * qk_k ..][0..qk_k].* = block[4..260].*;
            for (0..4) |p| {
                var pair: u32 = 0;
                for (0..2) |h| {
                    const j = 2 * p + h;
                    const s0 = std.mem.readInt(i16, block[260 + 4 * j ..][0..2], .little);
                    const s1 = std.mem.readInt(i16, block[262 + 4 * j ..][0..2], .little);
                    const s: u16 = @bitCast(s0 + s1);
                    pair |= @as(u32, s) << @intCast(16 * h);
                }
                sums[4 * b + p] = pair;
            }
        }
    }
};

/// ggml_quantize_mat_q8_K_4x8's block (x86, AVX2): quantize_row_q8_K's but for the sign of the
/// scale (see the file's doc), in q8_K's 292-byte layout.
pub fn quantize_q8_K_4x8(x: *align(1) const [qk_k]f32, y: *[292]u8) void {
    // An infinity or NaN has no defined result in ggml's vector code: the reference takes it.
    for (x) |v| if (!(@abs(v) <= std.math.floatMax(f32))) return quant.quantize_row_activation(.q8_K, x, y);
    var amax: f32 = 0;
    for (x) |v| amax = @max(amax, @abs(v));
    if (amax == 0) {
        @memset(y, 0);
        return;
    }
    var positive = false;
    for (x) |v| positive = positive or v == amax;
    const iscale: f32 = if (positive) -127.0 / amax else 127.0 / amax;
    const qs = y[4..260];
    for (qs, x) |*q, v| {
        const rounded: i32 = @intFromFloat(quant.round_even(iscale * v));
        q.* = @bitCast(@as(i8, @intCast(std.math.clamp(rounded, -128, 127))));
    }
    for (0..16) |j| {
        var sum: i32 = 0;
        for (qs[16 * j ..][0..16]) |q| sum += @as(i8, @bitCast(q));
        std.mem.writeInt(i16, y[260 + 2 * j ..][0..2], @intCast(sum), .little);
    }
    std.mem.writeInt(u32, y[0..4], @bitCast(1 / iscale), .little);
}

// ---------------------------------------------------------------------------------------------
// Panels: a chunk of 8 weight rows' blocks with a row per lane.

/// 8 q4_0 blocks: per block, vector i (0-3: low nibbles, 4-7: high ones) holds in lane r row r's
/// 4 nibbles that multiply the activation block's bytes 4i..4i+3; and the rows' f32 d.
const Panel0 = struct {
    q: [q4_0_chunk][8]U8x32,
    d: [q4_0_chunk]F32x8,
};

/// Per-lane scale form the products take: i32 (vpmulld after vpdpbusd) with VNNI, else the
/// scale in both i16 halves of the lane (vpmaddwd of the i16 partial sums).
const Scale = if (gemv.has_vnni) I32x8 else I16x16;

/// One q4_K super-block of 8 rows: vector [j][t] holds in lane r row r's 4 nibbles of
/// sub-block j that multiply the activation's bytes 32j + 4t ..; the 6-bit scales per
/// sub-block, the mins of sub-blocks 2p, 2p + 1 as i16 pairs, and f32 d and dmin.
const PanelK = struct {
    q: [8][8]U8x32,
    scale: [8]Scale,
    mins: [4]I16x16,
    d: F32x8,
    dmin: F32x8,
};

/// 16 bytes at each of 8 places as 4 vectors: vector t holds word t (bytes 4t..4t+3) of place r
/// in lane r (unpack-style shuffles within 128-bit halves: places r and r + 4 share a lane
/// half).
inline fn transpose_words(at: [8][*]const u8) [4]U32x8 {
    var y: [4]U32x8 = undefined;
    inline for (0..4) |r| {
        const lo: @Vector(4, u32) = @bitCast(at[r][0..16].*);
        const hi: @Vector(4, u32) = @bitCast(at[r + 4][0..16].*);
        y[r] = std.simd.join(lo, hi);
    }
    const t0 = @shuffle(u32, y[0], y[1], [8]i32{ 0, -1, 1, -2, 4, -5, 5, -6 });
    const t1 = @shuffle(u32, y[0], y[1], [8]i32{ 2, -3, 3, -4, 6, -7, 7, -8 });
    const t2 = @shuffle(u32, y[2], y[3], [8]i32{ 0, -1, 1, -2, 4, -5, 5, -6 });
    const t3 = @shuffle(u32, y[2], y[3], [8]i32{ 2, -3, 3, -4, 6, -7, 7, -8 });
    const order_lo = [8]i32{ 0, 1, -1, -2, 4, 5, -5, -6 };
    const order_hi = [8]i32{ 2, 3, -3, -4, 6, 7, -7, -8 };
    return .{
        @shuffle(u32, t0, t2, order_lo),
        @shuffle(u32, t0, t2, order_hi),
        @shuffle(u32, t1, t3, order_lo),
        @shuffle(u32, t1, t3, order_hi),
    };
}

/// The low (elements 0-15 of a q4 block / the even sub-block of a q4_K pair) and high nibbles
/// of each byte.
inline fn low_nibbles(w: U32x8) U8x32 {
    return @bitCast(w & @as(U32x8, @splat(0x0f0f0f0f)));
}

inline fn high_nibbles(w: U32x8) U8x32 {
    return @bitCast((w >> @splat(4)) & @as(U32x8, @splat(0x0f0f0f0f)));
}

/// The f16 at `p` (a scalar load, kept from becoming a gather: see gemv_quant.zig's head_at).
inline fn f16_at(p: [*]const u8) f16 {
    const half: *align(1) const volatile u16 = @ptrCast(p);
    return @bitCast(half.*);
}

/// q4_0 block `b` of the 8 rows: its 8 vectors (Panel0's layout) into `q`, the rows' f32 d.
inline fn unpack_block0(w: *const [rows][*]const u8, b: usize, q: *[8]U8x32) F32x8 {
    var at: [8][*]const u8 = undefined;
    var d: @Vector(8, f16) = undefined;
    inline for (0..rows) |r| {
        at[r] = w[r] + b * 18 + 2;
        d[r] = f16_at(w[r] + b * 18);
    }
    const words = transpose_words(at);
    inline for (0..4) |t| {
        q[t] = low_nibbles(words[t]);
        q[4 + t] = high_nibbles(words[t]);
    }
    return common.widen_f16(8, d);
}

fn fill_panel0(w: *const [rows][*]const u8, first: usize, count: usize, panel: *Panel0) void {
    for (0..count) |i| {
        prefetch_group(18, w, first + i);
        panel.d[i] = unpack_block0(w, first + i, &panel.q[i]);
    }
}

inline fn scale_form(value: U32x8) Scale {
    if (comptime gemv.has_vnni) return @bitCast(value);
    return @bitCast(value | (value << @splat(16)));
}

fn fill_panel_k(w: *const [rows][*]const u8, b: usize, panel: *PanelK) void {
    prefetch_group(144, w, b);
    fill_head_k(w, b, panel);
    inline for (0..4) |p| unpack_pair_k(w, b, p, panel.q[2 * p ..][0..2]);
}

/// Super-block `b`'s d, dmin, scales and mins of the 8 rows into `panel` (not its quants).
inline fn fill_head_k(w: *const [rows][*]const u8, b: usize, panel: *PanelK) void {
    var at: [8][*]const u8 = undefined;
    inline for (0..rows) |r| at[r] = w[r] + b * 144;
    const head = transpose_words(at);
    // head[0]: d | dmin << 16; head[1..3]: the 12 bytes of 6-bit scales and mins, decoded as
    // ggml's get_scale_min_k4 does, 4 bytes (sub-blocks) per lane at a time.
    const halves: @Vector(16, f16) = @bitCast(head[0]);
    panel.d = common.widen_f16(8, std.simd.deinterlace(2, halves)[0]);
    panel.dmin = common.widen_f16(8, std.simd.deinterlace(2, halves)[1]);
    const six: U32x8 = @splat(0x3f3f3f3f);
    const four: U32x8 = @splat(0x0f0f0f0f);
    const two: U32x8 = @splat(0x03030303);
    const sc03 = head[1] & six;
    const m03 = head[2] & six;
    const sc47 = (head[3] & four) | (((head[1] >> @splat(6)) & two) << @splat(4));
    const m47 = ((head[3] >> @splat(4)) & four) | (((head[2] >> @splat(6)) & two) << @splat(4));
    const byte: U32x8 = @splat(0xff);
    inline for (0..4) |j| {
        panel.scale[j] = scale_form((sc03 >> @splat(8 * j)) & byte);
        panel.scale[4 + j] = scale_form((sc47 >> @splat(8 * j)) & byte);
    }
    inline for (0..2) |p| {
        const lo = (m03 >> @splat(16 * p)) & byte;
        const hi = (m03 >> @splat(16 * p + 8)) & byte;
        panel.mins[p] = @bitCast(lo | (hi << @splat(16)));
        const lo47 = (m47 >> @splat(16 * p)) & byte;
        const hi47 = (m47 >> @splat(16 * p + 8)) & byte;
        panel.mins[2 + p] = @bitCast(lo47 | (hi47 << @splat(16)));
    }
}

/// Sub-blocks 2p and 2p + 1 of super-block `b` of the 8 rows (PanelK's layout) into `q`.
inline fn unpack_pair_k(w: *const [rows][*]const u8, b: usize, comptime p: usize, q: *[2][8]U8x32) void {
    var at: [8][*]const u8 = undefined;
    inline for (0..2) |half| {
        inline for (0..rows) |r| at[r] = w[r] + b * 144 + 16 + 32 * p + 16 * half;
        const words = transpose_words(at);
        inline for (0..4) |t| {
            q[0][4 * half + t] = low_nibbles(words[t]);
            q[1][4 * half + t] = high_nibbles(words[t]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Dots of a panel with one activation column.

extern fn @"llvm.x86.avx2.pmadd.wd"(a: I16x16, b: I16x16) I32x8;

/// a[2i] * b[2i] + a[2i+1] * b[2i+1] per i32 lane (vpmaddwd).
inline fn madd16(a: I16x16, b: I16x16) I32x8 {
    if (comptime gemv.has_avx2) return @"llvm.x86.avx2.pmadd.wd"(a, b);
    const wide_a: @Vector(16, i32) = a;
    const wide_b: @Vector(16, i32) = b;
    const products = std.simd.deinterlace(2, wide_a * wide_b);
    return products[0] + products[1];
}

/// The word at `p` in every lane, as 32 i8.
inline fn broadcast_word(p: [*]const u8) I8x32 {
    const word = std.mem.readInt(u32, p[0..4], .little);
    return @bitCast(@as(U32x8, @splat(word)));
}

/// Per lane r: sum over i of the 4 products of q[i]'s lane r with the activation bytes
/// 4i..4i+3 of `a` (32 nibbles times 32 quants: exact).
inline fn nibble_dot(q: *const [8]U8x32, a: [*]const u8) I32x8 {
    if (comptime gemv.has_vnni) {
        // Eight independent dots summed as a tree: a short dependency chain per block.
        var part: [8]I32x8 = undefined;
        inline for (0..8) |i| part[i] = gemv.dot_add(@splat(0), q[i], broadcast_word(a + 4 * i));
        return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    }
    // i16 partial sums of 16 products each, at most 16 * 15 * 128 < 2^15: no wrap.
    var sum: I16x16 = @splat(0);
    inline for (0..8) |i| sum +%= gemv.maddubs(q[i], broadcast_word(a + 4 * i));
    return gemv.pairs(sum);
}

/// The same sums times a per-lane 6-bit scale (sc * isum: exact in i32).
inline fn scaled_nibble_dot(q: *const [8]U8x32, a: [*]const u8, scale: Scale) I32x8 {
    if (comptime gemv.has_vnni) return nibble_dot(q, a) * scale;
    var sum: I16x16 = @splat(0);
    inline for (0..8) |i| sum +%= gemv.maddubs(q[i], broadcast_word(a + 4 * i));
    return madd16(sum, scale);
}

/// One column's accumulators over a chunk of q4_0 blocks (ggml's steps: see the file's doc).
inline fn column_q4_0(panel: *const Panel0, count: usize, y: Act0, first: usize, acc: *F32x8) void {
    for (0..count) |i| {
        const b = first + i;
        const isum = nibble_dot(&panel.q[i], y.qs + b * qk) - @as(I32x8, @splat(y.offset[b]));
        acc.* = @mulAdd(F32x8, @floatFromInt(isum), panel.d[i] * @as(F32x8, @splat(y.d[b])), acc.*);
    }
}

/// One column's two chains over one q4_K super-block: a step per pair of sub-blocks (gemm) or
/// one per super-block (gemv). Each pair's quants come from the panel, or (`unpack`: the
/// single-column path, whose panel holds only the head) from the rows `w` just before their
/// dot: the same operations in the same order.
inline fn column_q4_K(
    comptime per_pair: bool,
    comptime unpack: bool,
    panel: *const PanelK,
    w: *const [rows][*]const u8,
    y: ActK,
    b: usize,
    acc: *[2]F32x8,
) void {
    const d_a: F32x8 = @splat(y.d[b]);
    const dd = panel.d * d_a;
    const dmd = panel.dmin * d_a;
    const qs = y.qs + b * qk_k;
    var total: I32x8 = @splat(0);
    var total_min: I32x8 = @splat(0);
    inline for (0..4) |p| {
        var unpacked: [2][8]U8x32 = undefined;
        if (unpack) unpack_pair_k(w, b, p, &unpacked);
        const q: *const [2][8]U8x32 = if (unpack) &unpacked else panel.q[2 * p ..][0..2];
        const v = scaled_nibble_dot(&q[0], qs + 64 * p, panel.scale[2 * p]) +
            scaled_nibble_dot(&q[1], qs + 64 * p + 32, panel.scale[2 * p + 1]);
        const sums: I16x16 = @bitCast(@as(U32x8, @splat(y.sums[4 * b + p])));
        const mv = madd16(panel.mins[p], sums);
        if (per_pair) {
            acc[0] = @mulAdd(F32x8, @floatFromInt(v), dd, acc[0]);
            acc[1] = @mulAdd(F32x8, @floatFromInt(mv), dmd, acc[1]);
        } else {
            total += v;
            total_min += mv;
        }
    }
    if (!per_pair) {
        acc[0] = @mulAdd(F32x8, @floatFromInt(total), dd, acc[0]);
        acc[1] = @mulAdd(F32x8, @floatFromInt(total_min), dmd, acc[1]);
    }
}

/// Groups of 8 rows ahead whose weights `prefetch_group` asks the cache for.
const prefetch_groups = 2;

/// Prefetches, while block `b` (of `block_bytes` per row) of the rows `w` is dotted, the part
/// of the group `prefetch_groups` ahead that the same pass will read at block `b` there. The 8
/// rows' blocks go in 8 short streams (a SmolLM2 row is 18 blocks of 18 bytes), too short for
/// the hardware prefetchers to pick up, so without this every group waits for memory: decode
/// ran at 0.55 to 0.6 of the plain order's speed. Rows of a group lie one after the other
/// (`stride` apart), so the groups ahead are one run of memory that the passes over them read
/// `rows * block_bytes` bytes per block; other layouts only prefetch bytes they may not read.
inline fn prefetch_group(comptime block_bytes: usize, w: *const [rows][*]const u8, b: usize) void {
    const stride = @intFromPtr(w[1]) -% @intFromPtr(w[0]);
    const next = @intFromPtr(w[0]) +% prefetch_groups * rows * stride +% b * rows * block_bytes;
    inline for (0..(rows * block_bytes + 63) / 64) |line| {
        @prefetch(@as([*]const u8, @ptrFromInt(next +% 64 * line)), .{});
    }
}

/// column_q4_0 over all blocks for a lone column, each block unpacked just before its dot.
fn single_q4_0(w: *const [rows][*]const u8, k: usize, y: Act0) F32x8 {
    var acc: F32x8 = @splat(0);
    for (0..k / qk) |b| {
        prefetch_group(18, w, b);
        var q: [8]U8x32 = undefined;
        const d = unpack_block0(w, b, &q);
        const isum = nibble_dot(&q, y.qs + b * qk) - @as(I32x8, @splat(y.offset[b]));
        acc = @mulAdd(F32x8, @floatFromInt(isum), d * @as(F32x8, @splat(y.d[b])), acc);
    }
    return acc;
}

/// column_q4_K (gemv steps) over all super-blocks for a lone column.
fn single_q4_K(w: *const [rows][*]const u8, k: usize, y: ActK) F32x8 {
    var acc: [2]F32x8 = .{ @splat(0), @splat(0) };
    var head: PanelK = undefined;
    for (0..k / qk_k) |b| {
        prefetch_group(144, w, b);
        fill_head_k(w, b, &head);
        column_q4_K(false, true, &head, w, y, b, &acc);
    }
    return acc[0] - acc[1];
}

/// Scratch one thread needs for `group` with `cols` columns: the panel and 2 accumulators per
/// column.
fn thread_bytes(cols: usize) usize {
    const panel = std.mem.alignForward(usize, @max(@sizeOf(Panel0), @sizeOf(PanelK)), 64);
    return std.mem.alignForward(usize, panel + cols * 2 * @sizeOf(F32x8), 64);
}

/// out[c] (lane r) = ggml's repacked product of weight row r (rows `w`, `k` elements of `kind`)
/// with activation column c (at `acts + c * act_bytes`, quantized by this file) for `cols`
/// columns, the first `gemm_cols` of which ggml computes with its gemm kernel (q4_K's per-pair
/// steps), the rest with its gemv. `scratch`: thread_bytes(cols), 64-byte aligned.
pub fn dot_group(
    comptime kind: DType,
    w: *const [rows][*]const u8,
    k: usize,
    acts: [*]align(64) const u8,
    act_bytes: usize,
    cols: usize,
    gemm_cols: usize,
    scratch: [*]align(64) u8,
    out: [*]F32x8,
) void {
    comptime assert(kind == .q4_0 or kind == .q4_K);
    assert(gemm_cols <= cols and gemm_cols % 4 == 0);
    if (cols == 1) {
        // Decode: one column (a gemv one: gemm_cols is 0), each block's vectors unpacked right
        // before their dot instead of through the panel in memory.
        out[0] = if (kind == .q4_0) single_q4_0(w, k, Act0.at(acts, k)) else single_q4_K(w, k, ActK.at(acts, k));
        return;
    }
    const Panel = if (kind == .q4_0) Panel0 else PanelK;
    const panel: *Panel = @ptrCast(scratch);
    const accs: [*][2]F32x8 = @ptrCast(@alignCast(scratch + std.mem.alignForward(usize, @sizeOf(Panel), 64)));
    for (0..cols) |c| accs[c] = .{ @splat(0), @splat(0) };
    if (kind == .q4_0) {
        const blocks = k / qk;
        var first: usize = 0;
        while (first < blocks) : (first += q4_0_chunk) {
            const count = @min(q4_0_chunk, blocks - first);
            fill_panel0(w, first, count, panel);
            for (0..cols) |c| {
                const y = Act0.at(@alignCast(acts + c * act_bytes), k);
                column_q4_0(panel, count, y, first, &accs[c][0]);
            }
        }
        for (0..cols) |c| out[c] = accs[c][0];
        return;
    }
    for (0..k / qk_k) |b| {
        fill_panel_k(w, b, panel);
        for (0..gemm_cols) |c| column_q4_K(true, false, panel, w, ActK.at(@alignCast(acts + c * act_bytes), k), b, &accs[c]);
        for (gemm_cols..cols) |c| column_q4_K(false, false, panel, w, ActK.at(@alignCast(acts + c * act_bytes), k), b, &accs[c]);
    }
    for (0..cols) |c| out[c] = accs[c][0] - accs[c][1];
}

// ---------------------------------------------------------------------------------------------
// The node.

fn act_bytes_of(dtype: DType, k: usize) usize {
    return if (dtype == .q4_0) Act0.bytes(k) else ActK.bytes(k);
}

/// Work buffer bytes: every src1 row quantized, then each thread's panel, accumulators and
/// results.
pub fn work_size(n: *const common.Node, thread_count: u32) u64 {
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    const acts: u64 = @as(u64, act_bytes_of(a.dtype, a.ne[0])) * b.rows();
    const per_thread = thread_bytes(b.ne[1]) + b.ne[1] * @sizeOf(F32x8);
    return acts + @as(u64, thread_count) * std.mem.alignForward(usize, per_thread, 64);
}

pub fn mul_mat(n: *const common.Node, work: *const common.Work) common.Status {
    assert(takes(n));
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    const c = Tensor.from(&n.dst);
    const k = a.ne[0];
    if (work.scratch_size_bytes < work_size(n, work.thread_count)) return .out_of_space;
    const act_bytes = act_bytes_of(a.dtype, k);
    const scratch: [*]align(64) u8 = @alignCast(work.scratch);
    // ggml quantizes a batch's first n - n % 4 columns as its 4x8 quantizer does.
    const cols = b.ne[1];
    const gemm_cols = cols - cols % 4;
    const b_range = common.thread_range(b.rows(), work);
    for (b_range.begin..b_range.end) |row| {
        const values: [*]align(1) const f32 = @ptrFromInt(b.row(row).base);
        const out: [*]align(64) u8 = @alignCast(scratch + row * act_bytes);
        if (a.dtype == .q4_0) {
            Act0.quantize(values[0..k], out);
        } else {
            ActK.quantize(values[0..k], b.row_index(row).i1 < gemm_cols, out);
        }
    }
    work.sync(); // every row of src1 is quantized before any thread reads one
    const acts_total = act_bytes * b.rows();
    const per_thread = std.mem.alignForward(usize, thread_bytes(cols) + cols * @sizeOf(F32x8), 64);
    const mine: [*]align(64) u8 = @alignCast(scratch + acts_total + work.thread_index * per_thread);
    const results: [*]F32x8 = @ptrCast(@alignCast(mine + thread_bytes(cols)));
    const groups = a.ne[1] / rows;
    const range = common.thread_range(groups * b.ne[2], work);
    for (range.begin..range.end) |item| {
        const m0 = (item % groups) * rows;
        const batch = item / groups;
        var w: [rows][*]const u8 = undefined;
        for (0..rows) |r| w[r] = @ptrFromInt(a.row_at(.{ .i1 = m0 + r, .i2 = 0, .i3 = 0 }).base);
        const acts: [*]align(64) const u8 = @alignCast(scratch + batch * cols * act_bytes);
        switch (a.dtype) {
            inline .q4_0, .q4_K => |kind| dot_group(kind, &w, k, acts, act_bytes, cols, gemm_cols, mine, results),
            else => unreachable,
        }
        for (0..cols) |column| {
            const c_row = c.row_at(.{ .i1 = column, .i2 = batch, .i3 = 0 });
            const v: [rows]f32 = results[column];
            if (c.nb[0] == @sizeOf(f32)) {
                const dst: *align(1) [rows]f32 = @ptrFromInt(c_row.at(m0));
                dst.* = v;
            } else {
                for (0..rows) |r| common.store_f32(c_row.at(m0 + r), v[r]);
            }
        }
    }
    return .ok;
}
