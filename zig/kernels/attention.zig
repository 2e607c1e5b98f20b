//! flash_attn_ext: ggml_flash_attn_ext's attention, fused. For every query row (token t of head h
//! in batch b) dst[:, h, t, b] = softmax(s) V with s_j = scale * (q . k_j) (logit_softcap c > 0:
//! c * tanh(s_j / c), scale divided by c first as ggml) + slope(h) * mask[j, t]; k and v are
//! the heads h / (Hq / Hkv) of src1 and src2 (grouped-query attention), slope(h) ALiBi's
//! (ggml's m0 / m1 formula, 1 without max_bias). A row whose every logit is -inf gives zeros
//! (ggml's `S == 0 ? 0 : 1/S`).
//!
//! Never holds the T x nKv scores: the kv positions go by in tiles of `tile` (two vectors), and
//! each row keeps a running maximum M, a running sum L of exp(s - M) and its unnormalised output
//! (online softmax, Milakov and Gimelshein 2018; the flash-attention tiling of Dao et al.),
//! rescaled by exp(M_old - M_new) whenever the maximum grows. A tile is turned once per thread
//! into what the vector loops want (K transposed, V widened to f32, both in the thread's
//! scratch) and then used by every query block of that head the thread owns, `rows_block` rows
//! at a time: the q . k dot products become rows_block x 2 vector accumulators updated with one
//! broadcast q element per step, with no horizontal sums. The running output lives in dst itself
//! (each dst row is written only by the thread that owns its query row); M and L in scratch.
//!
//! Threads split (head, batch) x query blocks in flattened order (`common.thread_range`): every
//! row is computed by one thread in the same order of tiles whatever the thread count, so the
//! result does not depend on it. A tile where the mask hides every row of a block is skipped
//! (the upper triangle of a causal mask).

const std = @import("std");
const common = @import("common.zig");

const assert = common.assert;
const F32x = common.F32x;
const Tensor = common.Tensor;
const lanes = common.lanes;
const splat = common.splat;

/// kv positions per tile: two vectors of scores per query row.
pub const tile = 2 * lanes;
/// Query rows per block: rows_block x 2 score accumulators stay in registers.
pub const rows_block = 4;

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
    maximum: []f32, // M of each query row of one (head, batch), blocks * rows_block
    total: []f32, // L of each such row
    scores: []f32, // rows_block x tile

    /// Each part's size, in parts' order; every part starts on a whole vector.
    fn sizes(dk: usize, dv_padded: usize, blocks: usize) [5]usize {
        return .{ dk * tile, tile * dv_padded, blocks * rows_block, blocks * rows_block, rows_block * tile };
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

/// Scratch bytes for `thread_count` threads: one `Scratch` each.
pub fn work_size(n: *const common.Node, thread_count: u32) u64 {
    const args = args_of(n);
    return @as(u64, thread_bytes(&args)) * thread_count;
}

fn scratch_of(args: *const Args, work: *const common.Work) Scratch {
    const bytes = thread_bytes(args);
    const base: [*]f32 = @ptrCast(@alignCast(work.scratch + bytes * work.thread_index));
    var at: usize = 0;
    var parts: [5][]f32 = undefined;
    for (Scratch.sizes(args.dk, args.dv_padded, args.blocks), 0..) |size, i| {
        parts[i] = base[at .. at + size];
        at += round_up(size, lanes);
    }
    assert(at * 4 <= bytes);
    return .{
        .k_transposed = parts[0],
        .v_tile = parts[1],
        .maximum = parts[2],
        .total = parts[3],
        .scores = parts[4],
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
    for (row_begin..row_end) |t| {
        scratch.maximum[t - row_begin] = negative_infinity;
        scratch.total[t - row_begin] = 0;
        var chunk: usize = 0;
        while (chunk < args.dv) : (chunk += lanes) {
            common.store_chunk(dst_row(args, h, t, b), chunk, @min(lanes, args.dv - chunk), splat(0));
        }
    }
    const slope = alibi_slope(args.max_bias, h, args.q.ne[2]);
    const kv_head = h / (args.q.ne[2] / args.k.ne[2]);
    const kv_batch = b / (args.q.ne[3] / args.k.ne[3]);
    const v_head = h / (args.q.ne[2] / args.v.ne[2]);
    const v_batch = b / (args.q.ne[3] / args.v.ne[3]);
    var tile_begin: usize = 0;
    while (tile_begin < args.kv_count) : (tile_begin += tile) {
        const count = @min(tile, args.kv_count - tile_begin);
        load_k_tile(args, scratch, kv_head, kv_batch, tile_begin, count);
        load_v_tile(args, scratch, v_head, v_batch, tile_begin, count);
        var row = row_begin;
        while (row < row_end) : (row += rows_block) {
            const rows = @min(rows_block, row_end - row);
            if (block_hidden(args, h, b, row, rows, tile_begin, count)) continue;
            scores_block(args, scratch, h, b, row, rows);
            for (0..rows) |r| {
                softmax_row(args, scratch, h, b, row + r, row_begin, r, tile_begin, count, slope);
            }
            accumulate_block(args, scratch, h, b, row, rows, count);
        }
    }
    for (row_begin..row_end) |t| {
        const total = scratch.total[t - row_begin];
        const inverse = splat(if (total == 0) 0 else 1.0 / total);
        const out = dst_row(args, h, t, b);
        var chunk: usize = 0;
        while (chunk < args.dv) : (chunk += lanes) {
            const width = @min(lanes, args.dv - chunk);
            common.store_chunk(out, chunk, width, common.load_chunk(out, chunk, width, 0) * inverse);
        }
    }
}

fn dst_row(args: *const Args, h: usize, t: usize, b: usize) common.Strided {
    return args.dst.row_at(.{ .i1 = h, .i2 = t, .i3 = b });
}

fn mask_row(args: *const Args, mask: Tensor, h: usize, t: usize, b: usize) common.Strided {
    _ = args;
    return mask.row_at(.{ .i1 = t, .i2 = h % mask.ne[2], .i3 = b % mask.ne[3] });
}

/// Lanes [first, first + width) of a mask row as f32 (width >= 1); padding lanes are -inf.
fn mask_chunk(mask: Tensor, row: common.Strided, first: usize, width: usize) F32x {
    const value = if (mask.dtype == .f16)
        common.load_chunk_f16(row, first, width)
    else
        common.load_chunk(row, first, width, 0);
    if (width == lanes) return value;
    return @select(f32, common.lane_mask(width), value, splat(negative_infinity));
}

/// True when the mask is -inf at every position of the tile for every row of the block: the
/// block has nothing to attend to there (a causal mask's upper triangle), so it is skipped.
fn block_hidden(args: *const Args, h: usize, b: usize, row: usize, rows: usize, tile_begin: usize, count: usize) bool {
    const mask = args.mask orelse return false;
    for (row..row + rows) |t| {
        const mask_at = mask_row(args, mask, h, t, b);
        var first: usize = 0;
        while (first < count) : (first += lanes) {
            const chunk = mask_chunk(mask, mask_at, tile_begin + first, @min(lanes, count - first));
            if (@reduce(.Or, chunk != splat(negative_infinity))) return false;
        }
    }
    return true;
}

/// K rows [tile_begin, tile_begin + count) transposed into dk x tile f32, zeros past count.
fn load_k_tile(args: *const Args, scratch: *const Scratch, kv_head: usize, kv_batch: usize, tile_begin: usize, count: usize) void {
    const out = scratch.k_transposed;
    if (count < tile) @memset(out, 0);
    for (0..count) |j| {
        const row = args.k.row_at(.{ .i1 = tile_begin + j, .i2 = kv_head, .i3 = kv_batch });
        if (args.k.dtype == .f16) {
            const values: [*]align(1) const f16 = @ptrFromInt(row.base);
            for (0..args.dk) |d| out[d * tile + j] = values[d];
        } else {
            const values: [*]align(1) const f32 = @ptrFromInt(row.base);
            for (0..args.dk) |d| out[d * tile + j] = values[d];
        }
    }
}

/// V rows of the tile as f32, each padded with zeros to dv_padded.
fn load_v_tile(args: *const Args, scratch: *const Scratch, v_head: usize, v_batch: usize, tile_begin: usize, count: usize) void {
    for (0..count) |j| {
        const row = args.v.row_at(.{ .i1 = tile_begin + j, .i2 = v_head, .i3 = v_batch });
        const out: common.Strided = .{ .base = @intFromPtr(scratch.v_tile.ptr + j * args.dv_padded), .stride = 4 };
        var chunk: usize = 0;
        while (chunk < args.dv) : (chunk += lanes) {
            const width = @min(lanes, args.dv - chunk);
            const value = if (args.v.dtype == .f16)
                common.load_chunk_f16(row, chunk, width)
            else
                common.load_chunk(row, chunk, width, 0);
            const padded = if (width == lanes) value else @select(f32, common.lane_mask(width), value, splat(0));
            common.store_chunk(out, chunk, lanes, padded);
        }
    }
}

/// scores[r][j] = q_row(r) . k_j for `rows` rows of the block (the rest of the block is unused).
fn scores_block(args: *const Args, scratch: *const Scratch, h: usize, b: usize, row: usize, rows: usize) void {
    var q_rows: [rows_block][*]align(1) const f32 = undefined;
    for (0..rows_block) |r| {
        // A short last block repeats its first row: computed, never used.
        const t = row + if (r < rows) r else 0;
        q_rows[r] = @ptrFromInt(args.q.row_at(.{ .i1 = t, .i2 = h, .i3 = b }).base);
    }
    var acc: [rows_block][2]F32x = @splat(.{ splat(0), splat(0) });
    const kt = scratch.k_transposed;
    for (0..args.dk) |d| {
        const k0: F32x = kt[d * tile ..][0..lanes].*;
        const k1: F32x = kt[d * tile + lanes ..][0..lanes].*;
        inline for (0..rows_block) |r| {
            const q = splat(q_rows[r][d]);
            acc[r][0] = common.mul_add(q, k0, acc[r][0]);
            acc[r][1] = common.mul_add(q, k1, acc[r][1]);
        }
    }
    inline for (0..rows_block) |r| {
        scratch.scores[r * tile ..][0..lanes].* = acc[r][0];
        scratch.scores[r * tile + lanes ..][0..lanes].* = acc[r][1];
    }
}

/// tanh through exp: 1 - 2 / (e^(2x) + 1), exact at the ends (e^(2x) = inf gives 1, 0 gives -1).
fn tanh(x: F32x) F32x {
    return splat(1) - splat(2) / (common.exp(x * splat(2)) + splat(1));
}

/// One query row's tile: the logits (scale, softcap, ALiBi-sloped mask; -inf past count), the
/// online-softmax update of M, L and the running output, and the weights exp(s - M) left in
/// scores for accumulate_block.
fn softmax_row(args: *const Args, scratch: *const Scratch, h: usize, b: usize, t: usize, row_begin: usize, r: usize, tile_begin: usize, count: usize, slope: f32) void {
    const scores = scratch.scores[r * tile ..][0..tile];
    var s: [2]F32x = .{ scores[0..lanes].*, scores[lanes..tile].* };
    const mask_at: ?common.Strided = if (args.mask) |m| mask_row(args, m, h, t, b) else null;
    var tile_maximum = splat(negative_infinity);
    inline for (0..2) |half| {
        var value = s[half] * splat(args.scale);
        if (args.softcap != 0) value = splat(args.softcap) * tanh(value);
        const first = half * lanes;
        const width = if (count > first) @min(lanes, count - first) else 0;
        if (mask_at) |row| {
            if (width > 0) value += splat(slope) * mask_chunk(args.mask.?, row, tile_begin + first, width);
        }
        if (width < lanes) {
            const keep = if (width == 0) @as(@Vector(lanes, bool), @splat(false)) else common.lane_mask(width);
            value = @select(f32, keep, value, splat(negative_infinity));
        }
        s[half] = value;
        tile_maximum = @max(tile_maximum, value);
    }
    const new_maximum_tile = @reduce(.Max, tile_maximum);
    const index = t - row_begin;
    const old_maximum = scratch.maximum[index];
    if (new_maximum_tile == negative_infinity) {
        // Every position of the tile is hidden for this row: weights 0, state unchanged.
        @memset(scores, 0);
        return;
    }
    const new_maximum = @max(old_maximum, new_maximum_tile);
    const p0 = common.exp(s[0] - splat(new_maximum));
    const p1 = common.exp(s[1] - splat(new_maximum));
    scores[0..lanes].* = p0;
    scores[lanes..tile].* = p1;
    const tile_total = @reduce(.Add, p0 + p1);
    if (new_maximum > old_maximum) {
        // exp(-inf) is 0: the first visible tile starts the sums from nothing.
        const factor = common.exp(splat(old_maximum - new_maximum))[0];
        scratch.total[index] = scratch.total[index] * factor + tile_total;
        scratch.maximum[index] = new_maximum;
        const out = dst_row(args, h, t, b);
        var chunk: usize = 0;
        while (chunk < args.dv) : (chunk += lanes) {
            const width = @min(lanes, args.dv - chunk);
            common.store_chunk(out, chunk, width, common.load_chunk(out, chunk, width, 0) * splat(factor));
        }
    } else {
        scratch.total[index] += tile_total;
    }
}

/// out_r += sum_j weight[r][j] * v_j for the block's rows.
fn accumulate_block(args: *const Args, scratch: *const Scratch, h: usize, b: usize, row: usize, rows: usize, count: usize) void {
    const vt = scratch.v_tile;
    var chunk: usize = 0;
    while (chunk < args.dv) : (chunk += lanes) {
        const width = @min(lanes, args.dv - chunk);
        var acc: [rows_block]F32x = @splat(splat(0));
        for (0..count) |j| {
            const value: F32x = vt[j * args.dv_padded + chunk ..][0..lanes].*;
            inline for (0..rows_block) |r| {
                acc[r] = common.mul_add(splat(scratch.scores[r * tile + j]), value, acc[r]);
            }
        }
        for (0..rows) |r| {
            const out = dst_row(args, h, row + r, b);
            common.store_chunk(out, chunk, width, common.load_chunk(out, chunk, width, 0) + acc[r]);
        }
    }
}
