//! soft_max: per row, dst = softmax(x * scale + slope * mask), scale = params[0], mask = src1
//! when src_count == 2 (row i1 of src0 uses mask row i1; mask dims 2 and 3 broadcast by modulo).
//! slope is ggml_soft_max_ext's ALiBi slope of head i2 of ne[2] for max_bias = params[1] > 0, else
//! 1 (then slope * mask is the mask itself, so the result is the same bits as without ALiBi).
//!
//! Bit for bit ggml_compute_forward_soft_max_f32 (ggml-cpu, max_bias 0, no sinks): x * scale
//! rounded, then + mask rounded; the row's maximum subtracted; exp through ggml_v_expf for each
//! full vector of `lanes` (the vector's sum taken in f32 in x86's horizontal-add order, then added
//! to an f64 total) and through the C library's expf for the row's last `count % lanes` elements
//! (each added to the total in f64); then every element times (float)(1.0 / total).
//!
//! Deviation from ggml: a row whose every value is -inf (fully masked) becomes all zeros rather
//! than NaN, so a fully masked attention row contributes nothing instead of poisoning the output.
//! Each element of src0 is read before the same element of dst is written, so dst may alias src0.
//!
//! Rows up to `scratch_elements_max` long keep their logits and exps in a buffer on the stack
//! (in L1/L2) and write dst once, in the last pass, with streaming stores when dst is past the
//! cache size: writing the intermediate passes to dst would make each dst line be read from
//! memory before it is written (12 bytes moved per element instead of 8). Longer rows work in
//! dst itself. Both give the same bits.

const std = @import("std");
const common = @import("common.zig");
const attention = @import("attention.zig");

const assert = common.assert;
const F32x = common.F32x;
const Strided = common.Strided;
const Tensor = common.Tensor;
const lanes = common.lanes;
const splat = common.splat;

/// The longest row computed in the stack buffer (32 KiB, inside L1 or L2 next to the source row).
const scratch_elements_max = 8192;

const RowArgs = struct {
    dst: Strided,
    src: Strided,
    mask: ?Strided,
    count: usize,
    scale: f32,
    slope: f32,
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
    const scale = n.param_f32(0);
    const max_bias = n.param_f32(1);
    const range = common.thread_range(src.rows(), work);
    if (range.begin == range.end) return .ok;
    const stream = common.use_stream_stores(dst);
    var scratch: [scratch_elements_max]f32 align(64) = undefined;
    // Walk (i1, i2, i3) incrementally from the first row: one division per thread, not per row.
    var index = src.row_index(range.begin);
    // Mask dims 2 and 3 broadcast by modulo; those only change when i1 wraps.
    var mask_i2 = if (mask) |m| index.i2 % m.ne[2] else 0;
    var mask_i3 = if (mask) |m| index.i3 % m.ne[3] else 0;
    for (range.begin..range.end) |_| {
        const args: RowArgs = .{
            .dst = dst.row_at(index),
            .src = src.row_at(index),
            // Mask row i1 (never modulo: mask.ne[1] >= ne1), dims 2 and 3 broadcast.
            .mask = if (mask) |m| m.row_at(.{ .i1 = index.i1, .i2 = mask_i2, .i3 = mask_i3 }) else null,
            .count = src.ne[0],
            .scale = scale,
            .slope = attention.alibi_slope(max_bias, index.i2, src.ne[2]),
        };
        const contiguous = args.dst.stride == 4 and args.src.stride == 4 and
            (if (args.mask) |m| m.stride == 4 else true);
        if (args.count <= scratch_elements_max) {
            // The logits and exps live in `scratch`; dst is written once, by the last pass.
            const work_row: Strided = .{ .base = @intFromPtr(&scratch), .stride = 4 };
            if (contiguous) soft_max_row(true, args, work_row, stream) else soft_max_row(false, args, work_row, false);
        } else {
            if (contiguous) soft_max_row(true, args, args.dst, false) else soft_max_row(false, args, args.dst, false);
        }
        index.i1 += 1;
        if (index.i1 == src.ne[1]) {
            index.i1 = 0;
            index.i2 += 1;
            if (index.i2 == src.ne[2]) {
                index.i2 = 0;
                index.i3 += 1;
            }
            if (mask) |m| {
                mask_i2 = index.i2 % m.ne[2];
                mask_i3 = index.i3 % m.ne[3];
            }
        }
    }
    if (stream) common.stream_fence();
    return .ok;
}

fn load(comptime contiguous: bool, row: Strided, index: usize, chunk: usize, fill: f32) F32x {
    if (contiguous and chunk == lanes) {
        return @as(*align(1) const [lanes]f32, @ptrFromInt(row.base + index * 4)).*;
    }
    return common.load_chunk(row, index, chunk, fill);
}

fn store(comptime contiguous: bool, row: Strided, index: usize, chunk: usize, value: F32x) void {
    if (contiguous and chunk == lanes) {
        @as(*align(1) [lanes]f32, @ptrFromInt(row.base + index * 4)).* = value;
        return;
    }
    common.store_chunk(row, index, chunk, value);
}

/// x * scale + mask for lanes [index, index + chunk); padding lanes are -inf.
fn logits(comptime contiguous: bool, args: RowArgs, index: usize, chunk: usize) F32x {
    const x = load(contiguous, args.src, index, chunk, 0);
    // Roundings as ggml: ggml_vec_scale_f32, then `wp[i] += slope * mask[i]` (slope * mask is
    // the mask itself for slope 1).
    const scaled = x * splat(args.scale);
    const value = if (args.mask) |mask|
        scaled + splat(args.slope) * load(contiguous, mask, index, chunk, 0)
    else
        scaled;
    if (chunk == lanes) return value;
    return @select(f32, common.lane_mask(chunk), value, splat(-std.math.inf(f32)));
}

fn soft_max_row(comptime contiguous: bool, args: RowArgs, work_row: Strided, stream: bool) void {
    assert(args.count >= 1);
    assert(work_row.base == args.dst.base or work_row.stride == 4);
    // Pass 1: the logits go to the work row (each element of src is read before dst's is
    // written when the work row is dst).
    var maximum_lanes = splat(-std.math.inf(f32));
    var index: usize = 0;
    while (index < args.count) : (index += lanes) {
        const chunk = @min(lanes, args.count - index);
        const value = logits(contiguous, args, index, chunk);
        maximum_lanes = @max(maximum_lanes, value);
        store(contiguous, work_row, index, chunk, value);
    }
    const maximum = @reduce(.Max, maximum_lanes);
    if (maximum == -std.math.inf(f32)) {
        index = 0;
        while (index < args.count) : (index += lanes) {
            const chunk = @min(lanes, args.count - index);
            common.store_chunk_maybe_stream(args.dst, index, chunk, splat(0), stream);
        }
        return;
    }
    // Pass 2: exp in place, summed as ggml_vec_soft_max_f32.
    var total: f64 = 0;
    index = 0;
    while (index + lanes <= args.count) : (index += lanes) {
        const shifted = load(contiguous, work_row, index, lanes, 0) - splat(maximum);
        // A chunk below -104 everywhere (masked) is 0 in ggml_v_expf too: skip the exp.
        if (@reduce(.And, shifted < splat(-104.0))) {
            store(contiguous, work_row, index, lanes, splat(0));
            continue;
        }
        const e = common.ggml_expf(shifted);
        total += @as(f64, common.ggml_reduce_add(e));
        store(contiguous, work_row, index, lanes, e);
    }
    while (index < args.count) : (index += 1) {
        const e = common.expf(common.load_f32(work_row.at(index)) - maximum);
        total += @as(f64, e);
        common.store_f32(work_row.at(index), e);
    }
    const inverse = splat(@floatCast(1.0 / total));
    // Pass 3: normalize into dst.
    index = 0;
    while (index < args.count) : (index += lanes) {
        const chunk = @min(lanes, args.count - index);
        const value = load(contiguous, work_row, index, chunk, 0) * inverse;
        if (stream) {
            common.store_chunk_maybe_stream(args.dst, index, chunk, value, true);
        } else {
            store(contiguous, args.dst, index, chunk, value);
        }
    }
}
