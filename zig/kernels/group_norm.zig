//! l2_norm and group_norm, as ggml-cpu computes them.
//!
//! l2_norm (params[0] f32 eps): each row times 1 / max(sqrt(sum x^2), eps), the sum in f64.
//! group_norm (params[0] the group count G as f32, params[1] f32 eps): src0 [W, H, C, N]; the
//! channels go in G groups of ceil(C / G) (the last one shorter, possibly empty), and every
//! element of group g of image n becomes (x - mean) / sqrt(variance + eps) over the group's
//! W * H * channels elements (sums in f64, mean and variance rounded to f32 as ggml). Threads
//! split rows (l2_norm) or (group, image) pairs (group_norm). Each element is read before the
//! same element of dst is written, so dst may alias src0.

const std = @import("std");
const common = @import("common.zig");

const assert = common.assert;
const F32x = common.F32x;
const Strided = common.Strided;
const Tensor = common.Tensor;
const lanes = common.lanes;
const splat = common.splat;

pub fn l2_norm(n: *const common.Node, work: *const common.Work) common.Status {
    const src = Tensor.from(&n.src[0]);
    const dst = Tensor.from(&n.dst);
    const eps = n.param_f32(0);
    const range = common.thread_range(src.rows(), work);
    for (range.begin..range.end) |row| {
        const index = src.row_index(row);
        const in = src.row_at(index);
        const total = sum_squares(in, src.ne[0], 0);
        const scale: f32 = 1.0 / @max(@as(f32, @floatCast(@sqrt(total))), eps);
        scale_row(dst.row_at(index), in, src.ne[0], 0, scale);
    }
    return .ok;
}

/// Sum of (x - center)^2 over a row: f32 vectors, each added to an f64 total.
fn sum_squares(row: Strided, count: usize, center: f32) f64 {
    var total: f64 = 0;
    var index: usize = 0;
    while (index < count) : (index += lanes) {
        const width = @min(lanes, count - index);
        const x = common.load_chunk(row, index, width, center) - splat(center);
        total += @as(f64, @reduce(.Add, x * x));
    }
    return total;
}

fn sum_row(row: Strided, count: usize) f64 {
    var total: f64 = 0;
    var index: usize = 0;
    while (index < count) : (index += lanes) {
        total += @as(f64, @reduce(.Add, common.load_chunk(row, index, @min(lanes, count - index), 0)));
    }
    return total;
}

/// dst = (src - center) * scale, chunk by chunk (each chunk read before it is written).
fn scale_row(dst: Strided, src: Strided, count: usize, center: f32, scale: f32) void {
    var index: usize = 0;
    while (index < count) : (index += lanes) {
        const width = @min(lanes, count - index);
        const x = common.load_chunk(src, index, width, 0);
        common.store_chunk(dst, index, width, (x - splat(center)) * splat(scale));
    }
}

pub fn group_norm(n: *const common.Node, work: *const common.Work) common.Status {
    const src = Tensor.from(&n.src[0]);
    const dst = Tensor.from(&n.dst);
    const groups: usize = @intFromFloat(n.param_f32(0));
    const eps = n.param_f32(1);
    assert(groups >= 1);
    const per_group = (src.ne[2] + groups - 1) / groups;
    const range = common.thread_range(groups * src.ne[3], work);
    for (range.begin..range.end) |item| {
        const group = item % groups;
        const image = item / groups;
        const begin = @min(src.ne[2], group * per_group);
        const end = @min(src.ne[2], begin + per_group);
        if (begin == end) continue;
        const count: f64 = @floatFromInt(src.ne[0] * src.ne[1] * (end - begin));
        var total: f64 = 0;
        for (begin..end) |c| {
            for (0..src.ne[1]) |y| total += sum_row(src.row_at(.{ .i1 = y, .i2 = c, .i3 = image }), src.ne[0]);
        }
        const mean: f32 = @floatCast(total / count);
        var squares: f64 = 0;
        for (begin..end) |c| {
            for (0..src.ne[1]) |y| {
                squares += sum_squares(src.row_at(.{ .i1 = y, .i2 = c, .i3 = image }), src.ne[0], mean);
            }
        }
        const variance: f32 = @floatCast(squares / count);
        const scale = 1.0 / @sqrt(variance + eps);
        for (begin..end) |c| {
            for (0..src.ne[1]) |y| {
                const index: common.RowIndex = .{ .i1 = y, .i2 = c, .i3 = image };
                scale_row(dst.row_at(index), src.row_at(index), src.ne[0], mean, scale);
            }
        }
    }
    return .ok;
}
