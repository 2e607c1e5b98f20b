//! soft_max: per row, dst = softmax(x * scale + mask), scale = params[0], mask = src1 when
//! src_count == 2 (row i1 of src0 uses mask row i1; mask dims 2 and 3 broadcast by modulo).
//! The maximum is subtracted before exp for stability; the sum is taken in f64.
//!
//! Deviation from ggml: a row whose every value is -inf (fully masked) becomes all zeros rather
//! than NaN, so a fully masked attention row contributes nothing instead of poisoning the output.
//! Each element of src0 is read before the same element of dst is written, so dst may alias src0.

const std = @import("std");
const common = @import("common.zig");

const assert = common.assert;
const F32x = common.F32x;
const F64x = common.F64x;
const Strided = common.Strided;
const Tensor = common.Tensor;
const lanes = common.lanes;
const splat = common.splat;

const RowArgs = struct {
    dst: Strided,
    src: Strided,
    mask: ?Strided,
    count: usize,
    scale: f32,
};

pub fn soft_max(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    assert(dst.element_count() == src.element_count());
    const mask: ?Tensor = if (n.src_count == 2) Tensor.from(&n.src[1]) else null;
    if (mask) |m| {
        assert(m.ne[0] == src.ne[0]);
        assert(m.ne[1] >= src.ne[1]);
    }
    const range = common.thread_range(src.rows(), work);
    for (range.begin..range.end) |row| {
        const index = src.row_index(row);
        soft_max_row(.{
            .dst = dst.row_at(index),
            .src = src.row_at(index),
            // Mask row i1 (never modulo: mask.ne[1] >= ne1), dims 2 and 3 broadcast.
            .mask = if (mask) |m| m.row_broadcast(index) else null,
            .count = src.ne[0],
            .scale = n.param_f32(0),
        });
    }
    return .ok;
}

/// x * scale + mask for lanes [index, index + chunk); padding lanes are -inf.
fn logits(args: RowArgs, index: usize, chunk: usize) F32x {
    var value = common.load_chunk(args.src, index, chunk, 0) * splat(args.scale);
    if (args.mask) |mask| value += common.load_chunk(mask, index, chunk, 0);
    return @select(f32, common.lane_mask(chunk), value, splat(-std.math.inf(f32)));
}

fn soft_max_row(args: RowArgs) void {
    assert(args.count >= 1);
    var maximum_lanes = splat(-std.math.inf(f32));
    var index: usize = 0;
    while (index < args.count) : (index += lanes) {
        const chunk = @min(lanes, args.count - index);
        maximum_lanes = @max(maximum_lanes, logits(args, index, chunk));
    }
    const maximum = @reduce(.Max, maximum_lanes);
    if (maximum == -std.math.inf(f32)) {
        index = 0;
        while (index < args.count) : (index += lanes) {
            common.store_chunk(args.dst, index, @min(lanes, args.count - index), splat(0));
        }
        return;
    }
    var total: F64x = @splat(0);
    index = 0;
    while (index < args.count) : (index += lanes) {
        const chunk = @min(lanes, args.count - index);
        // Padding lanes are -inf, so their exp is 0 and adds nothing.
        const e = common.exp(logits(args, index, chunk) - splat(maximum));
        total += @as(F64x, @floatCast(e));
        common.store_chunk(args.dst, index, chunk, e);
    }
    const inverse: f32 = @floatCast(1.0 / @reduce(.Add, total));
    index = 0;
    while (index < args.count) : (index += lanes) {
        const chunk = @min(lanes, args.count - index);
        const e = common.load_chunk(args.dst, index, chunk, 0);
        common.store_chunk(args.dst, index, chunk, e * splat(inverse));
    }
}
