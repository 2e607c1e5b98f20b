//! flash_attn_ext: ggml_flash_attn_ext's attention, fused. For every query row (token t of head h
//! in batch b) dst[:, h, t, b] = softmax(s) V with s_j = scale * (q . k_j) (logit_softcap c > 0:
//! c * tanh(s_j / c), scale divided by c first as ggml) + slope(h) * mask[j, t]; k and v are
//! the heads h / (Hq / Hkv) of src1 and src2 (grouped-query attention), slope(h) ALiBi's
//! (ggml's m0 / m1 formula, 1 without max_bias). A row whose every logit is -inf gives zeros
//! (ggml's `S == 0 ? 0 : 1/S`).
//!
//! Never holds the T x nKv scores: the kv positions go by in tiles of `tile` (64), and each
//! row keeps a running maximum M, a running sum L of exp(s - M) and its unnormalised output O
//! (online softmax, Milakov and Gimelshein 2018; the flash-attention tiling of Dao et al.).
//! A tile is turned once per thread into what the vector loops want (K transposed through
//! lanes x lanes register transposes; V widened to f32 and padded unless it already is f32 in
//! whole vectors) and then used by every query block of that head the thread owns, `rows_block`
//! (6) rows at a time, in three steps per block:
//! - scores: S = Q K^T for the block as register-tiled products (`multiply_block`): rows_block x
//!   vectors_block vector accumulators, one broadcast q element and vectors_block K^T vectors per
//!   step, no horizontal sums. The logits (scale, softcap, ALiBi-sloped mask, -inf past the
//!   tile's end) and each row's tile maximum are made from the accumulators while they are in
//!   registers (a separate pass over the stored scores cost about a tenth of the kernel's time);
//!   one instantiation per kind of logits, chosen once per node.
//! - softmax: the new maxima and the factors exp(M_old - M_new) of the whole block in one vector
//!   (a factor is exactly 1 where the maximum did not grow), then the weights exp(s - M) in
//!   place of the logits (`exp_nonpositive`: ggml_v_expf's polynomial, no range branches) and L.
//! - output: O = factor * O + P V with the same register-tiled product (P broadcast, V vectors),
//!   vectors_block vectors of the head dim at a time; O lives in the thread's scratch, dv_padded
//!   floats a row, and goes to dst divided by L once the last tile is done.
//! The register tiles are 6 x 4 vectors on AVX-512 (24 accumulators of 32 registers) and 6 x 2
//! on AVX2 and SIMD128 (12 of 16); the three steps are separate (noinline) functions so that
//! each register tile is allocated on its own.
//!
//! Threads split (head, batch) x query blocks in flattened order (`common.thread_range`): every
//! row is computed by one thread, with the same operations in the same order of tiles whatever
//! the thread count (a row's accumulators never mix with the other rows of its block), so the
//! result does not depend on it. A tile where the mask hides
//! every row of a block is skipped (the upper triangle of a causal mask).
//!
//! One query token per head (a decoding step) takes `OneToken` instead: chunks of positions for
//! the query heads that share a kv head together, combined after a barrier (see there).

const std = @import("std");
const common = @import("common.zig");

const assert = common.assert;
const F32x = common.F32x;
const Tensor = common.Tensor;
const lanes = common.lanes;
const splat = common.splat;

/// kv positions per tile: the scores of a block are rows_block x tile floats in scratch.
pub const tile = 64;
/// Query rows per block: the rows of every register-tiled product.
pub const rows_block = 6;
/// Vectors per row of a register-tiled product: rows_block x vectors_block accumulators, the
/// vectors_block B vectors and one broadcast fit AVX-512's 32 registers (29) and AVX2's or
/// SIMD128's 16 (15).
pub const vectors_block = if (lanes == 16) 4 else 2;
/// Vectors of scores per query row in a tile.
const tile_vectors = tile / lanes;

comptime {
    assert(tile % (vectors_block * lanes) == 0);
    assert(rows_block * vectors_block + vectors_block + 1 <= if (lanes == 16) 32 else 16);
}

const negative_infinity = -std.math.inf(f32);

/// The shapes and parameters every part of the kernel reads, converted once.
const Args = struct {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: ?Tensor,
    dst: Tensor,
    dk: usize, // head dim of q and k
    dv: usize, // head dim of v and dst
    dv_padded: usize, // dv rounded up to whole vectors (the V tile's row stride, in floats)
    kv_count: usize,
    scale: f32,
    softcap: f32,
    max_bias: f32,
    blocks: usize, // query blocks per (head, batch)
};

/// The thread's part of the work buffer, in f32 elements (each part starts on a vector).
const Scratch = struct {
    k_transposed: []f32, // dk x tile: element (d, j) at d * tile + j
    v_tile: []f32, // tile x dv_padded
    scores: []f32, // rows_block x tile: a block's scores, then its weights exp(s - M)
    factor: []f32, // rows_block: each row's exp(M_old - M_new) for the tile
    maximum: []f32, // M of each query row of one (head, batch), blocks * rows_block
    total: []f32, // L of each such row
    output: []f32, // the unnormalised output of each such row, dv_padded floats apart

    const part_count = 7;

    /// Each part's size, in parts' order; every part starts on a whole vector.
    fn sizes(dk: usize, dv_padded: usize, blocks: usize) [part_count]usize {
        const rows = blocks * rows_block;
        return .{ dk * tile, tile * dv_padded, rows_block * tile, rows_block, rows, rows, rows * dv_padded };
    }

    fn floats(dk: usize, dv_padded: usize, blocks: usize) usize {
        var total: usize = 0;
        for (sizes(dk, dv_padded, blocks)) |size| total += round_up(size, lanes);
        return total;
    }
};

fn round_up(value: usize, multiple: usize) usize {
    return (value + multiple - 1) / multiple * multiple;
}

fn args_of(n: *const common.Node) Args {
    const q = Tensor.from(&n.src[0]);
    const v = Tensor.from(&n.src[2]);
    const softcap = n.param_f32(2);
    const scale = n.param_f32(0);
    return .{
        .q = q,
        .k = Tensor.from(&n.src[1]),
        .v = v,
        .mask = if (n.src_count == 4) Tensor.from(&n.src[3]) else null,
        .dst = Tensor.from(&n.dst),
        .dk = q.ne[0],
        .dv = v.ne[0],
        .dv_padded = round_up(v.ne[0], lanes),
        .kv_count = v.ne[1],
        .scale = if (softcap != 0) scale / softcap else scale,
        .softcap = softcap,
        .max_bias = n.param_f32(1),
        .blocks = (q.ne[1] + rows_block - 1) / rows_block,
    };
}

fn thread_bytes(args: *const Args) usize {
    return round_up(Scratch.floats(args.dk, args.dv_padded, args.blocks) * 4, 64);
}

/// Scratch bytes for `thread_count` threads: one `Scratch` each; for one query token, the
/// one-token path's (`OneToken`).
pub fn work_size(n: *const common.Node, thread_count: u32) u64 {
    const args = args_of(n);
    if (OneToken.applies(&args)) return OneToken.of(&args).work_size(thread_count);
    return @as(u64, thread_bytes(&args)) * thread_count;
}

fn scratch_of(args: *const Args, work: *const common.Work) Scratch {
    const bytes = thread_bytes(args);
    const base: [*]f32 = @ptrCast(@alignCast(work.scratch + bytes * work.thread_index));
    var at: usize = 0;
    var parts: [Scratch.part_count][]f32 = undefined;
    for (Scratch.sizes(args.dk, args.dv_padded, args.blocks), 0..) |size, i| {
        parts[i] = base[at .. at + size];
        at += round_up(size, lanes);
    }
    assert(at * 4 <= bytes);
    return .{
        .k_transposed = parts[0],
        .v_tile = parts[1],
        .scores = parts[2],
        .factor = parts[3],
        .maximum = parts[4],
        .total = parts[5],
        .output = parts[6],
    };
}

/// ALiBi's slope of head h (ggml_flash_attn_ext / ggml_soft_max_ext): 1 without max_bias.
pub fn alibi_slope(max_bias: f32, head: usize, head_count: usize) f32 {
    if (max_bias <= 0) return 1;
    const head_count_log2: usize = @as(usize, 1) << @intCast(std.math.log2_int(usize, head_count));
    const log2_f: f32 = @floatFromInt(head_count_log2);
    const m0 = common.powf(2.0, -max_bias / log2_f);
    const m1 = common.powf(2.0, -(max_bias / 2.0) / log2_f);
    if (head < head_count_log2) return common.powf(m0, @floatFromInt(head + 1));
    return common.powf(m1, @floatFromInt(2 * (head - head_count_log2) + 1));
}

pub fn flash_attn_ext(n: *const common.Node, work: *const common.Work) common.Status {
    const args = args_of(n);
    assert(args.k.ne[0] == args.dk);
    assert(args.dst.ne[0] == args.dv);
    if (work.scratch_size_bytes < work_size(n, work.thread_count)) return .out_of_space;
    if (OneToken.applies(&args)) {
        OneToken.of(&args).run(&args, work);
        return .ok;
    }
    const scratch = scratch_of(&args, work);
    const heads = args.q.ne[2] * args.q.ne[3];
    const range = common.thread_range(heads * args.blocks, work);
    var item = range.begin;
    while (item < range.end) {
        const head_flat = item / args.blocks;
        const block_begin = item % args.blocks;
        const block_end = @min(args.blocks, block_begin + (range.end - item));
        attend_head(&args, &scratch, head_flat % args.q.ne[2], head_flat / args.q.ne[2], block_begin, block_end);
        item += block_end - block_begin;
    }
    return .ok;
}

/// Query blocks [block_begin, block_end) of head h in batch b, tile by tile.
fn attend_head(args: *const Args, scratch: *const Scratch, h: usize, b: usize, block_begin: usize, block_end: usize) void {
    const row_begin = block_begin * rows_block;
    const row_end = @min(args.q.ne[1], block_end * rows_block);
    const states = row_end - row_begin;
    @memset(scratch.maximum[0..states], negative_infinity);
    @memset(scratch.total[0..states], 0);
    @memset(scratch.output[0 .. states * args.dv_padded], 0);
    const slope = alibi_slope(args.max_bias, h, args.q.ne[2]);
    const logits = Logits.of(args);
    const kv_head = h / (args.q.ne[2] / args.k.ne[2]);
    const kv_batch = b / (args.q.ne[3] / args.k.ne[3]);
    const v_head = h / (args.q.ne[2] / args.v.ne[2]);
    const v_batch = b / (args.q.ne[3] / args.v.ne[3]);
    var tile_begin: usize = 0;
    while (tile_begin < args.kv_count) : (tile_begin += tile) {
        const count = @min(tile, args.kv_count - tile_begin);
        load_k_tile(args, scratch, kv_head, kv_batch, tile_begin, count);
        const v_rows = load_v_tile(args, scratch, v_head, v_batch, tile_begin, count);
        var row = row_begin;
        while (row < row_end) : (row += rows_block) {
            const rows = @min(rows_block, row_end - row);
            if (block_hidden(args, h, b, row, rows, tile_begin, count)) continue;
            const block: Block = .{ .h = h, .b = b, .row = row, .rows = rows, .state = row - row_begin };
            var tile_maximum: [row_slots]f32 = @splat(negative_infinity);
            switch (logits.mask) {
                inline else => |mask| if (logits.softcap)
                    scores_block(.{ .mask = mask, .softcap = true }, args, scratch, &block, tile_begin, count, slope, &tile_maximum)
                else
                    scores_block(.{ .mask = mask, .softcap = false }, args, scratch, &block, tile_begin, count, slope, &tile_maximum),
            }
            softmax_block(scratch, &block, &tile_maximum);
            accumulate_block(args, scratch, &block, v_rows, count);
        }
    }
    for (row_begin..row_end) |t| {
        const total = scratch.total[t - row_begin];
        const inverse = splat(if (total == 0) 0 else 1.0 / total);
        const output = scratch.output[(t - row_begin) * args.dv_padded ..];
        var chunk: usize = 0;
        while (chunk < args.dv) : (chunk += lanes) {
            const value: F32x = output[chunk..][0..lanes].*;
            common.store_chunk(dst_row(args, h, t, b), chunk, @min(lanes, args.dv - chunk), value * inverse);
        }
    }
}

/// rows_block query rows of one head: rows [row, row + rows) are real, the rest of the block
/// repeats row `row`; `state` indexes the first row's M, L and O in scratch.
const Block = struct {
    h: usize,
    b: usize,
    row: usize,
    rows: usize,
    state: usize,

    /// Query row of the block's r-th slot (a short block's missing slots repeat its first row).
    fn token(self: *const Block, r: usize) usize {
        return self.row + if (r < self.rows) r else 0;
    }
};

fn dst_row(args: *const Args, h: usize, t: usize, b: usize) common.Strided {
    return args.dst.row_at(.{ .i1 = h, .i2 = t, .i3 = b });
}

fn mask_row(mask: Tensor, h: usize, t: usize, b: usize) common.Strided {
    return mask.row_at(.{ .i1 = t, .i2 = h % mask.ne[2], .i3 = b % mask.ne[3] });
}

/// Elements [index, index + width) of an f32 or f16 row as f32 (width >= 1); padding lanes 0.
inline fn row_chunk(dtype: common.DType, row: common.Strided, index: usize, width: usize) F32x {
    return if (dtype == .f16) common.load_chunk_f16(row, index, width) else common.load_chunk(row, index, width, 0);
}

/// Lanes [first, first + width) of a mask row as f32 (width >= 1); padding lanes are -inf.
fn mask_chunk(mask: Tensor, row: common.Strided, first: usize, width: usize) F32x {
    const value = row_chunk(mask.dtype, row, first, width);
    if (width == lanes) return value;
    return @select(f32, common.lane_mask(width), value, splat(negative_infinity));
}

/// True when the mask is -inf at every position of the tile for every row of the block: the
/// block has nothing to attend to there (a causal mask's upper triangle), so it is skipped.
fn block_hidden(args: *const Args, h: usize, b: usize, row: usize, rows: usize, tile_begin: usize, count: usize) bool {
    const mask = args.mask orelse return false;
    for (row..row + rows) |t| {
        const mask_at = mask_row(mask, h, t, b);
        var first: usize = 0;
        while (first < count) : (first += lanes) {
            const chunk = mask_chunk(mask, mask_at, tile_begin + first, @min(lanes, count - first));
            if (@reduce(.Or, chunk != splat(negative_infinity))) return false;
        }
    }
    return true;
}

/// K rows [tile_begin, tile_begin + count) transposed into dk x tile f32, zeros past count:
/// lanes x lanes squares through registers (`transpose`), the edges element by element.
fn load_k_tile(args: *const Args, scratch: *const Scratch, kv_head: usize, kv_batch: usize, tile_begin: usize, count: usize) void {
    const out = scratch.k_transposed;
    if (count < tile) @memset(out, 0);
    const count_whole = count - count % lanes;
    const dk_whole = args.dk - args.dk % lanes;
    var j: usize = 0;
    while (j < count_whole) : (j += lanes) {
        var rows: [lanes]usize = undefined;
        for (0..lanes) |i| rows[i] = args.k.row_at(.{ .i1 = tile_begin + j + i, .i2 = kv_head, .i3 = kv_batch }).base;
        var d: usize = 0;
        while (d < dk_whole) : (d += lanes) {
            var square: [lanes]F32x = undefined;
            inline for (0..lanes) |i| square[i] = k_chunk(args.k.dtype, rows[i], d);
            transpose(&square);
            inline for (0..lanes) |i| out[(d + i) * tile + j ..][0..lanes].* = square[i];
        }
    }
    for (0..count) |position| {
        const row = args.k.row_at(.{ .i1 = tile_begin + position, .i2 = kv_head, .i3 = kv_batch }).base;
        const d_first = if (position < count_whole) dk_whole else 0;
        for (d_first..args.dk) |d| out[d * tile + position] = k_element(args.k.dtype, row, d);
    }
}

/// K elements [d, d + lanes) of the row at `row` as f32.
inline fn k_chunk(dtype: common.DType, row: usize, d: usize) F32x {
    if (dtype == .f16) return common.widen_f16(lanes, @as(*align(1) const [lanes]f16, @ptrFromInt(row + d * 2)).*);
    return @as(*align(1) const [lanes]f32, @ptrFromInt(row + d * 4)).*;
}

fn k_element(dtype: common.DType, row: usize, d: usize) f32 {
    if (dtype == .f16) return common.load_f16(row + d * 2);
    return common.load_f32(row + d * 4);
}

/// Transposes a lanes x lanes square held as `lanes` vectors in log2(lanes) rounds: round w
/// pairs rows i and i + w and swaps their w-lane blocks across the diagonal.
inline fn transpose(square: *[lanes]F32x) void {
    comptime var w = 1;
    inline while (w < lanes) : (w *= 2) {
        const low = comptime interleave_mask(w, false);
        const high = comptime interleave_mask(w, true);
        inline for (0..lanes) |i| {
            if (i & w == 0) {
                const a = square[i];
                const b = square[i + w];
                square[i] = @shuffle(f32, a, b, low);
                square[i + w] = @shuffle(f32, a, b, high);
            }
        }
    }
}

/// The shuffle of round w: lane l takes a's lane l (or l + w for `high`) where bit w of l is
/// clear, b's lane l - w (or l) where it is set.
fn interleave_mask(comptime w: usize, comptime high: bool) [lanes]i32 {
    var mask: [lanes]i32 = undefined;
    for (0..lanes) |l| {
        if (l & w == 0) {
            mask[l] = @intCast(if (high) l + w else l);
        } else {
            mask[l] = ~@as(i32, @intCast(if (high) l else l - w));
        }
    }
    return mask;
}

/// Rows of f32 elements `stride` floats apart (the B operand of `multiply_block`).
const Rows = struct {
    base: [*]align(1) const f32,
    stride: usize,
};

/// The tile's V rows as f32 with whole vectors: V itself where it is f32 and dv is whole
/// vectors (rows a whole number of floats apart), else a copy in scratch widened from f16 and
/// padded with zeros to dv_padded.
fn load_v_tile(args: *const Args, scratch: *const Scratch, v_head: usize, v_batch: usize, tile_begin: usize, count: usize) Rows {
    const first = args.v.row_at(.{ .i1 = tile_begin, .i2 = v_head, .i3 = v_batch });
    if (args.v.dtype == .f32 and args.dv == args.dv_padded and args.v.nb[1] % 4 == 0) {
        return .{ .base = @ptrFromInt(first.base), .stride = args.v.nb[1] / 4 };
    }
    for (0..count) |j| {
        const row = args.v.row_at(.{ .i1 = tile_begin + j, .i2 = v_head, .i3 = v_batch });
        const out: common.Strided = .{ .base = @intFromPtr(scratch.v_tile.ptr + j * args.dv_padded), .stride = 4 };
        var chunk: usize = 0;
        while (chunk < args.dv) : (chunk += lanes) {
            // Padding lanes are 0 (row_chunk), as the products past dv need.
            common.store_chunk(out, chunk, lanes, row_chunk(args.v.dtype, row, chunk, @min(lanes, args.dv - chunk)));
        }
    }
    return .{ .base = scratch.v_tile.ptr, .stride = args.dv_padded };
}

/// The register-tiled product both halves of the kernel use: for each slot r and vector v,
/// acc[r][v] += sum over k < depth of a[r][k] * b[k * b_stride + v * lanes ..][0..lanes], in
/// order of k. Each accumulator sees the same operations whatever the other rows are.
inline fn multiply_block(
    comptime vectors: usize,
    acc: *[rows_block][vectors]F32x,
    a: *const [rows_block][*]align(1) const f32,
    b: [*]align(1) const f32,
    b_stride: usize,
    depth: usize,
) void {
    var sums = acc.*;
    for (0..depth) |k| {
        var b_row: [vectors]F32x = undefined;
        inline for (0..vectors) |v| b_row[v] = b[k * b_stride + v * lanes ..][0..lanes].*;
        inline for (0..rows_block) |r| {
            const a_value = splat(a[r][k]);
            inline for (0..vectors) |v| sums[r][v] = common.mul_add(a_value, b_row[v], sums[r][v]);
        }
    }
    acc.* = sums;
}

/// The block's logits for the tile, written to scores, and each slot's largest in `maximum`:
/// scale * (q_r . k_j) (softcap c: c * tanh of it), plus slope * mask[j, t], -inf past count.
/// The dot products come vectors_block vectors of positions at a time, and each group's logits
/// are made from its accumulators while they are still in registers.
/// noinline, as softmax_block and accumulate_group: see the header comment.
noinline fn scores_block(
    comptime logits: Logits,
    args: *const Args,
    scratch: *const Scratch,
    block: *const Block,
    tile_begin: usize,
    count: usize,
    slope: f32,
    maximum: *[row_slots]f32,
) void {
    var q_rows: [rows_block][*]align(1) const f32 = undefined;
    var mask_rows: [rows_block]common.Strided = undefined;
    for (0..rows_block) |r| {
        q_rows[r] = @ptrFromInt(args.q.row_at(.{ .i1 = block.token(r), .i2 = block.h, .i3 = block.b }).base);
        if (logits.mask != .none) mask_rows[r] = mask_row(args.mask.?, block.h, block.token(r), block.b);
    }
    var row_maximum: [rows_block]F32x = @splat(splat(negative_infinity));
    var first: usize = 0;
    while (first < tile) : (first += vectors_block * lanes) {
        var acc: [rows_block][vectors_block]F32x = @splat(@splat(splat(0)));
        multiply_block(vectors_block, &acc, &q_rows, scratch.k_transposed.ptr + first, tile, args.dk);
        inline for (0..rows_block) |r| {
            inline for (0..vectors_block) |v| {
                const position = first + v * lanes;
                const value = logit(logits, args, acc[r][v], mask_rows[r], tile_begin + position, count -| position, slope);
                scratch.scores[r * tile + position ..][0..lanes].* = value;
                row_maximum[r] = vector_max(row_maximum[r], value);
            }
        }
    }
    inline for (0..rows_block) |r| maximum[r] = lanes_max(row_maximum[r]);
}

const MaskKind = enum { none, f32, f16 };

/// What the logits of a tile are made of, fixed per node: one `scores_block` for each.
const Logits = struct {
    mask: MaskKind,
    softcap: bool,

    fn of(args: *const Args) Logits {
        const mask = args.mask orelse return .{ .mask = .none, .softcap = args.softcap != 0 };
        return .{ .mask = if (mask.dtype == .f16) .f16 else .f32, .softcap = args.softcap != 0 };
    }
};

/// The logits of one vector of dot products at mask positions [first, first + lanes), of
/// which `width` are in the tile.
inline fn logit(
    comptime logits: Logits,
    args: *const Args,
    dot: F32x,
    mask_at: common.Strided,
    first: usize,
    width: usize,
    slope: f32,
) F32x {
    var value = dot * splat(args.scale);
    if (logits.softcap) value = splat(args.softcap) * tanh(value);
    if (width >= lanes) {
        // Mask rows are contiguous (validate.zig).
        const mask_value: F32x = switch (logits.mask) {
            .none => return value,
            .f32 => @as(*align(1) const [lanes]f32, @ptrFromInt(mask_at.at(first))).*,
            .f16 => common.widen_f16(lanes, @as(*align(1) const [lanes]f16, @ptrFromInt(mask_at.at(first))).*),
        };
        return common.mul_add(splat(slope), mask_value, value);
    }
    if (width == 0) return splat(negative_infinity);
    if (logits.mask != .none) value = common.mul_add(splat(slope), mask_chunk(args.mask.?, mask_at, first, width), value);
    return @select(f32, common.lane_mask(width), value, splat(negative_infinity));
}

/// The larger of each pair of lanes: one vmaxps (`@max` also orders NaNs, three instructions).
fn vector_max(a: F32x, b: F32x) F32x {
    return @select(f32, a > b, a, b);
}

/// Lane i + shift of `v` at lane i (wrapping), for the reduction trees.
fn rotate(v: F32x, comptime shift: usize) F32x {
    const indices = comptime blk: {
        var out: [lanes]i32 = undefined;
        for (0..lanes) |i| out[i] = @intCast((i + shift) % lanes);
        break :blk out;
    };
    return @shuffle(f32, v, undefined, indices);
}

/// The largest lane, by a tree of log2(lanes) vector steps (`@reduce(.Max)` is a chain of
/// NaN-aware scalar steps).
fn lanes_max(v: F32x) f32 {
    var x = v;
    comptime var shift = lanes / 2;
    inline while (shift >= 1) : (shift /= 2) x = vector_max(x, rotate(x, shift));
    return x[0];
}

/// The sum of the lanes, by a tree of log2(lanes) vector steps (`@reduce(.Add)` adds the lanes
/// one after another); the same order every time.
fn lanes_sum(v: F32x) f32 {
    var x = v;
    comptime var shift = lanes / 2;
    inline while (shift >= 1) : (shift /= 2) x += rotate(x, shift);
    return x[0];
}

/// tanh through exp: 1 - 2 / (e^(2x) + 1), exact at the ends (e^(2x) = inf gives 1, 0 gives -1).
fn tanh(x: F32x) F32x {
    return splat(1) - splat(2) / (common.exp(x * splat(2)) + splat(1));
}

/// e^x for x <= 0 (a weight exp(s - M), a factor exp(M_old - M_new)): ggml_v_expf's reduction and
/// polynomial (at most 1.95 ulp) without its range branches. Below -86 (-inf included) it gives
/// 0, computed from 0 so that no lane underflows (an underflow costs a microcode assist on x86
/// without flush-to-zero): e^-86 is 2^-124, nothing beside the row's largest weight, 1. NaN
/// stays NaN.
fn exp_nonpositive(x: F32x) F32x {
    const U32x = @Vector(lanes, u32);
    const tiny = x < splat(-86.0);
    const xs = @select(f32, tiny, splat(0), x);
    const round = splat(0x1.8p23);
    const z = common.mul_add(xs, splat(0x1.715476p+0), round);
    const n = z - round;
    const b = common.mul_add(-n, splat(0x1.7f7d1cp-20), common.mul_add(-n, splat(0x1.62e4p-1), xs));
    const u = b * b;
    const c54 = common.mul_add(splat(0x1.0e4020p-7), b, splat(0x1.573e2ep-5));
    const c32 = common.mul_add(splat(0x1.555e66p-3), b, splat(0x1.fffdb6p-2));
    const j = common.mul_add(common.mul_add(c54, u, c32), u, splat(0x1.ffffecp-1) * b);
    // 2^n from n's bits in z's mantissa: n is in [-124, 0], so the exponent is normal.
    const k: F32x = @bitCast((@as(U32x, @bitCast(z)) << @splat(23)) +% @as(U32x, @splat(0x3f800000)));
    return @select(f32, tiny, splat(0), common.mul_add(j, k, k));
}

/// Rows of M or L of a block, padded to whole vectors.
const row_vectors = (rows_block + lanes - 1) / lanes;
const row_slots = row_vectors * lanes;

/// The online-softmax update of the block's tile from its logits (in scores) and their row
/// maxima: M and L of each row, the weights exp(s - M) left in scores and the factors
/// exp(M_old - M_new) that accumulate_block applies to the running outputs.
noinline fn softmax_block(scratch: *const Scratch, block: *const Block, tile_maximum: *const [row_slots]f32) void {
    var old_maximum: [row_slots]f32 = @splat(negative_infinity);
    for (0..block.rows) |r| old_maximum[r] = scratch.maximum[block.state + r];
    var new_maximum: [row_slots]f32 = undefined;
    var factor: [row_slots]f32 = undefined;
    inline for (0..row_vectors) |i| {
        const old: F32x = old_maximum[i * lanes ..][0..lanes].*;
        const new = vector_max(old, tile_maximum[i * lanes ..][0..lanes].*);
        // A row with nothing visible yet keeps factor 1 (its sums are 0), not exp(-inf + inf).
        const visible = new != splat(negative_infinity);
        new_maximum[i * lanes ..][0..lanes].* = new;
        factor[i * lanes ..][0..lanes].* = @select(f32, visible, exp_nonpositive(old - new), splat(1));
    }
    for (0..rows_block) |r| {
        // A short last block's missing rows are computed (from its first row) and never
        // stored: any factor does, 0 rather than whatever the scratch held.
        scratch.factor[r] = if (r < block.rows) factor[r] else 0;
    }
    for (0..block.rows) |r| {
        const scores = scratch.scores[r * tile ..][0..tile];
        if (tile_maximum[r] == negative_infinity) {
            // Every position of the tile is hidden for this row: weights 0, state unchanged.
            @memset(scores, 0);
            continue;
        }
        var total = splat(0);
        inline for (0..tile_vectors) |i| {
            const p = exp_nonpositive(scores[i * lanes ..][0..lanes].* - splat(new_maximum[r]));
            scores[i * lanes ..][0..lanes].* = p;
            total += p;
        }
        const index = block.state + r;
        scratch.total[index] = scratch.total[index] * factor[r] + lanes_sum(total);
        scratch.maximum[index] = new_maximum[r];
    }
}

/// out_r = out_r * factor_r + sum_j weight[r][j] * v_j for the block's rows, vectors_block
/// vectors of the head dim at a time (the last group may be shorter).
fn accumulate_block(args: *const Args, scratch: *const Scratch, block: *const Block, v_rows: Rows, count: usize) void {
    const dv_vectors = args.dv_padded / lanes;
    var first: usize = 0;
    while (first < dv_vectors) : (first += vectors_block) {
        switch (@min(vectors_block, dv_vectors - first)) {
            inline 1...vectors_block => |vectors| accumulate_group(vectors, args, scratch, block, v_rows, first, count),
            else => unreachable,
        }
    }
}

/// accumulate_block for vectors [first, first + vectors) of the head dim.
noinline fn accumulate_group(
    comptime vectors: usize,
    args: *const Args,
    scratch: *const Scratch,
    block: *const Block,
    v_rows: Rows,
    first: usize,
    count: usize,
) void {
    var weights: [rows_block][*]align(1) const f32 = undefined;
    var out: [rows_block][*]f32 = undefined;
    var acc: [rows_block][vectors]F32x = undefined;
    inline for (0..rows_block) |r| {
        weights[r] = scratch.scores.ptr + r * tile;
        out[r] = scratch.output.ptr + (block.state + block.token(r) - block.row) * args.dv_padded + first * lanes;
        const factor = splat(scratch.factor[r]);
        inline for (0..vectors) |v| acc[r][v] = @as(F32x, out[r][v * lanes ..][0..lanes].*) * factor;
    }
    multiply_block(vectors, &acc, &weights, v_rows.base + first * lanes, v_rows.stride, count);
    inline for (0..rows_block) |r| {
        if (r < block.rows) {
            inline for (0..vectors) |v| out[r][v * lanes ..][0..lanes].* = acc[r][v];
        }
    }
}

/// One query token per head (a decoding step: q.ne[1] == 1). The block path above would compute
/// a rows_block-row block for that one row (5 of 6 rows wasted) and give each thread whole
/// heads (9 heads on 2 threads: 5 against 4). Here the kv positions are cut into chunks of
/// `chunk` (fixed, so the result does not depend on the thread count), and the query heads
/// that share a kv head (grouped-query attention) go together, so each key and value row is
/// read once for all of them:
/// - phase 1, each (kv head group, batch, chunk) on its own: for each of the group's heads, the
///   chunk's logits (dot products of q with each key row, then scale, softcap and the sloped mask
///   a vector at a time), their maximum M, the weights exp(s - M), their sum L and the weighted
///   sum O of the value rows, stored as that head's partial (M, L, O) for the chunk;
/// - after a barrier, each (head, batch): the partials combined in chunk order, O and L scaled
///   by exp(M_c - M) to the row's maximum, and O / L written (zeros where every logit is -inf).
const OneToken = struct {
    /// kv positions per partial.
    const chunk = tile;
    /// Vectors of logits per chunk.
    const chunk_vectors = chunk / lanes;
    /// Most query heads that read the key and value rows together.
    const group_max = 8;

    chunks: usize, // per (head, batch)
    rows: usize, // (head, batch) pairs
    group: usize, // query heads of a unit: consecutive heads sharing their k and v heads
    partial_floats: usize, // M, L, then O, rounded to whole vectors
    thread_floats: usize, // a thread's logits (a chunk per head of a group) or combined output

    fn applies(args: *const Args) bool {
        return args.q.ne[1] == 1;
    }

    fn of(args: *const Args) OneToken {
        const heads = args.q.ne[2];
        // Heads h share k head h / (heads / k.ne[2]); they share a v head too where v has as
        // many heads as k (else each head goes alone).
        const per_k = heads / args.k.ne[2];
        const group = if (args.v.ne[2] == args.k.ne[2]) largest_divisor_at_most(per_k, group_max) else 1;
        return .{
            .chunks = (args.kv_count + chunk - 1) / chunk,
            .rows = heads * args.q.ne[3],
            .group = group,
            .partial_floats = round_up(2 + args.dv_padded, lanes),
            .thread_floats = round_up(@max(group * chunk, args.dv_padded), lanes),
        };
    }

    fn largest_divisor_at_most(value: usize, limit: usize) usize {
        var d = @min(value, limit);
        while (value % d != 0) d -= 1;
        return d;
    }

    fn thread_bytes_of(self: OneToken) usize {
        return round_up(self.thread_floats * 4, 64);
    }

    fn work_size(self: OneToken, thread_count: u32) u64 {
        const partials = @as(u64, self.rows) * self.chunks * self.partial_floats * 4;
        return @as(u64, self.thread_bytes_of()) * thread_count + partials;
    }

    fn run(self: OneToken, args: *const Args, work: *const common.Work) void {
        const own: [*]f32 = @ptrCast(@alignCast(work.scratch + self.thread_bytes_of() * work.thread_index));
        const shared: [*]f32 = @ptrCast(@alignCast(work.scratch + self.thread_bytes_of() * work.thread_count));
        const logits = Logits.of(args);
        const groups = self.rows / self.group;
        const units = common.thread_range(groups * self.chunks, work);
        for (units.begin..units.end) |unit| {
            // Unit (g, c): heads [first, first + group) of batch b (rows b * heads + h), chunk c.
            const first_row = (unit / self.chunks) * self.group;
            const c = unit % self.chunks;
            self.attend_chunk(logits, args, own, shared, first_row, c);
        }
        work.sync(); // every partial is written before any row combines them
        const rows = common.thread_range(self.rows, work);
        for (rows.begin..rows.end) |row| {
            self.combine(args, own, shared + row * self.chunks * self.partial_floats, row % args.q.ne[2], row / args.q.ne[2]);
        }
    }

    /// The partial of (head, batch) row `row` for chunk c.
    fn partial_of(self: OneToken, shared: [*]f32, row: usize, c: usize) [*]f32 {
        return shared + (row * self.chunks + c) * self.partial_floats;
    }

    /// Positions [c * chunk, ...) of the group's heads (rows [first_row, first_row + group) of
    /// one batch), into their partials (M, L, O[dv_padded]).
    fn attend_chunk(
        self: OneToken,
        logits: Logits,
        args: *const Args,
        scores: [*]f32,
        shared: [*]f32,
        first_row: usize,
        c: usize,
    ) void {
        const heads = args.q.ne[2];
        const h0 = first_row % heads;
        const b = first_row / heads;
        const begin = c * chunk;
        // Positions past the last one the mask shows (the unfilled end of a decoding bucket) are
        // neither multiplied nor read: their logits are -inf for every head of the group.
        const count = self.visible_count(args, h0, b, begin, @min(chunk, args.kv_count - begin));
        const rows: Rows2 = .{
            .k = args.k.row_at(.{ .i1 = begin, .i2 = h0 / (heads / args.k.ne[2]), .i3 = b / (args.q.ne[3] / args.k.ne[3]) }).base,
            .v = args.v.row_at(.{ .i1 = begin, .i2 = h0 / (heads / args.v.ne[2]), .i3 = b / (args.q.ne[3] / args.v.ne[3]) }).base,
        };
        switch (self.group) {
            inline 1...group_max => |group| dots(group, args, h0, b, rows.k, scores, count),
            else => unreachable,
        }
        var used: [chunk]bool = @splat(false);
        for (0..self.group) |g| {
            const partial = self.partial_of(shared, first_row + g, c);
            switch (logits.mask) {
                inline else => |mask| if (logits.softcap)
                    weights_of(.{ .mask = mask, .softcap = true }, args, h0 + g, b, begin, count, scores + g * chunk, partial, &used)
                else
                    weights_of(.{ .mask = mask, .softcap = false }, args, h0 + g, b, begin, count, scores + g * chunk, partial, &used),
            }
        }
        switch (self.group) {
            inline 1...group_max => |group| self.accumulate(group, args, rows.v, scores, &used, count, shared, first_row, c),
            else => unreachable,
        }
    }

    const Rows2 = struct { k: usize, v: usize };

    /// `count`, less the positions at the chunk's end that the mask hides from every head of the
    /// group (where one mask row serves them all).
    fn visible_count(self: OneToken, args: *const Args, h0: usize, b: usize, begin: usize, count: usize) usize {
        const mask = args.mask orelse return count;
        if (mask.ne[2] != 1 and self.group > 1) return count;
        const row = mask_row(mask, h0, 0, b);
        var n = count;
        while (n > 0) : (n -= 1) {
            const value = if (mask.dtype == .f16) @as(f32, common.load_f16(row.at(begin + n - 1))) else common.load_f32(row.at(begin + n - 1));
            if (value != negative_infinity) break;
        }
        return n;
    }

    /// q_g . k_j for the group's heads and positions j < count, into scores[g * chunk + j] (0
    /// past count): a vector of the head dim at a time, the lanes summed by `lanes_sum`.
    fn dots(comptime group: usize, args: *const Args, h0: usize, b: usize, k_first: usize, scores: [*]f32, count: usize) void {
        var q_rows: [group]usize = undefined;
        inline for (0..group) |g| q_rows[g] = args.q.row_at(.{ .i1 = 0, .i2 = h0 + g, .i3 = b }).base;
        const k_stride = args.k.nb[1];
        const element: usize = if (args.k.dtype == .f16) 2 else 4;
        for (0..count) |j| {
            const k_row = k_first + j * k_stride;
            var acc: [group]F32x = @splat(splat(0));
            var d: usize = 0;
            while (d + lanes <= args.dk) : (d += lanes) {
                const k = k_chunk(args.k.dtype, k_row, d);
                inline for (0..group) |g| {
                    const q: F32x = @as(*align(1) const [lanes]f32, @ptrFromInt(q_rows[g] + d * 4)).*;
                    acc[g] = common.mul_add(q, k, acc[g]);
                }
            }
            if (d < args.dk) {
                const width = args.dk - d;
                const k_at: common.Strided = .{ .base = k_row, .stride = element };
                const k = row_chunk(args.k.dtype, k_at, d, width);
                inline for (0..group) |g| {
                    const q = common.load_chunk(.{ .base = q_rows[g], .stride = 4 }, d, width, 0);
                    acc[g] = common.mul_add(q, k, acc[g]);
                }
            }
            inline for (0..group) |g| scores[g * chunk + j] = lanes_sum(acc[g]);
        }
        inline for (0..group) |g| @memset(scores[g * chunk + count .. (g + 1) * chunk], 0);
    }

    /// Head h's logits (scale, softcap, sloped mask; -inf past count) and its maximum M, then
    /// in place the weights exp(s - M) (all 0 where every logit is -inf) and their sum L:
    /// partial[0] = M, partial[1] = L. Marks the positions with a weight in `used`.
    noinline fn weights_of(
        comptime logits: Logits,
        args: *const Args,
        h: usize,
        b: usize,
        begin: usize,
        count: usize,
        scores: [*]f32,
        partial: [*]f32,
        used: *[chunk]bool,
    ) void {
        const slope = alibi_slope(args.max_bias, h, args.q.ne[2]);
        const mask_at: common.Strided = if (logits.mask != .none) mask_row(args.mask.?, h, 0, b) else undefined;
        var maximum = splat(negative_infinity);
        inline for (0..chunk_vectors) |i| {
            const first = i * lanes;
            const value = logit(logits, args, scores[first..][0..lanes].*, mask_at, begin + first, count -| first, slope);
            scores[first..][0..lanes].* = value;
            maximum = vector_max(maximum, value);
        }
        const top = lanes_max(maximum);
        partial[0] = top;
        partial[1] = 0;
        if (top == negative_infinity) {
            @memset(scores[0..chunk], 0); // every position hidden: nothing to add
            return;
        }
        var total = splat(0);
        inline for (0..chunk_vectors) |i| {
            const weights = exp_nonpositive(@as(F32x, scores[i * lanes ..][0..lanes].*) - splat(top));
            scores[i * lanes ..][0..lanes].* = weights;
            total += weights;
        }
        partial[1] = lanes_sum(total);
        for (0..count) |j| used[j] = used[j] or scores[j] != 0;
    }

    /// O_g = sum over used positions j of weight_g[j] * v_j for the group's heads, into their
    /// partials: a vector of the head dim at a time, its group accumulators in registers.
    fn accumulate(
        self: OneToken,
        comptime group: usize,
        args: *const Args,
        v_first: usize,
        scores: [*]const f32,
        used: *const [chunk]bool,
        count: usize,
        shared: [*]f32,
        first_row: usize,
        c: usize,
    ) void {
        const v_stride = args.v.nb[1];
        const element: usize = if (args.v.dtype == .f16) 2 else 4;
        var d: usize = 0;
        while (d < args.dv_padded) : (d += lanes) {
            var acc: [group]F32x = @splat(splat(0));
            if (d < args.dv) {
                const width = @min(lanes, args.dv - d);
                for (0..count) |j| {
                    if (!used[j]) continue;
                    const v_at: common.Strided = .{ .base = v_first + j * v_stride, .stride = element };
                    const value = row_chunk(args.v.dtype, v_at, d, width);
                    inline for (0..group) |g| acc[g] = common.mul_add(splat(scores[g * chunk + j]), value, acc[g]);
                }
            }
            inline for (0..group) |g| {
                const output = self.partial_of(shared, first_row + g, c) + 2;
                output[d..][0..lanes].* = acc[g];
            }
        }
    }

    /// Head h in batch b from its chunks' partials (`partials`, in chunk order) into dst.
    fn combine(self: OneToken, args: *const Args, output: [*]f32, partials: [*]const f32, h: usize, b: usize) void {
        var top = negative_infinity;
        for (0..self.chunks) |c| top = @max(top, partials[c * self.partial_floats]);
        @memset(output[0..args.dv_padded], 0);
        var total: f32 = 0;
        if (top != negative_infinity) {
            for (0..self.chunks) |c| {
                const partial = partials + c * self.partial_floats;
                if (partial[0] == negative_infinity) continue;
                const factor = exp_nonpositive(splat(partial[0] - top))[0];
                total += partial[1] * factor;
                var d: usize = 0;
                while (d < args.dv_padded) : (d += lanes) {
                    const sum: F32x = output[d..][0..lanes].*;
                    output[d..][0..lanes].* = common.mul_add(splat(factor), partial[2 + d ..][0..lanes].*, sum);
                }
            }
        }
        const inverse = splat(if (total == 0) 0 else 1.0 / total);
        var d: usize = 0;
        while (d < args.dv) : (d += lanes) {
            const value: F32x = output[d..][0..lanes].*;
            common.store_chunk(dst_row(args, h, 0, b), d, @min(lanes, args.dv - d), value * inverse);
        }
    }
};
