//! Row normalizations, as ggml computes them (sums in f64, the scaling in f32); rms_norm (and
//! rms_norm_mul) bit for bit as ggml-cpu (see `rms_scales`):
//! norm: y = x - mean, dst = y / sqrt(mean(y^2) + eps); rms_norm: dst = x / sqrt(mean(x^2) + eps).
//! Each row is read before any of its elements is written, element by element, so dst may alias
//! src0 exactly.

const std = @import("std");
const common = @import("common.zig");
const reduce = @import("reduce.zig");

const assert = common.assert;
const F32x = common.F32x;
const F64x = common.F64x;
const Strided = common.Strided;
const Tensor = common.Tensor;
const lanes = common.lanes;
const splat = common.splat;

/// rms_norm_mul is rms_norm followed by a multiply by src1's row (a gain broadcast over rows),
/// fused: the same two roundings as the two nodes, without writing and reading back the norm.
pub const Kind = enum { norm, rms_norm, rms_norm_mul };

pub fn normalize(
    comptime kind: Kind,
    n: *const common.Node,
    work: *const common.Work,
) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    assert(dst.element_count() == src.element_count());
    const eps_f32 = n.param_f32(0);
    const eps: f64 = eps_f32;
    const count = src.ne[0];
    const stream = common.use_stream_stores(dst);
    const gain: ?Tensor = if (kind == .rms_norm_mul) Tensor.from(&n.src[1]) else null;
    if (gain) |g| assert(g.ne[0] == count);
    const range = common.thread_range(src.rows(), work);
    if (kind != .norm) {
        rms_rows(kind, dst, src, gain, range, eps_f32, stream);
        if (stream) common.stream_fence();
        return .ok;
    }
    for (range.begin..range.end) |row| {
        const index = src.row_index(row);
        const src_row = src.row_at(index);
        const dst_row = dst.row_at(index);
        switch (kind) {
            .norm => {
                const mean: f32 = @floatCast(
                    reduce.row_sum(src_row, count) / @as(f64, @floatFromInt(count)),
                );
                const variance = squares_sum(src_row, count, mean) / @as(f64, @floatFromInt(count));
                const scale: f32 = @floatCast(1.0 / @sqrt(variance + eps));
                scale_row(dst_row, src_row, count, mean, scale, stream);
            },
            .rms_norm, .rms_norm_mul => unreachable, // rms_rows, above
        }
    }
    if (stream) common.stream_fence();
    return .ok;
}

/// Rows whose rms scales are summed together: each row's sum is one serial chain of f64 adds
/// (ggml's order, so bit for bit), latency-bound; independent rows interleaved let the CPU
/// overlap their chains, which brings the kernel to the memory bound.
const rms_rows_together = 8;

fn rms_rows(
    comptime kind: Kind,
    dst: Tensor,
    src: Tensor,
    gain: ?Tensor,
    range: common.Range,
    eps: f32,
    stream: bool,
) void {
    const count = src.ne[0];
    var row = range.begin;
    while (row < range.end) : (row += rms_rows_together) {
        const active = @min(rms_rows_together, range.end - row);
        var rows: [rms_rows_together]Strided = undefined;
        for (0..rms_rows_together) |r| rows[r] = src.row(row + @min(r, active - 1));
        // Every row is read whole (its sum) before any of them is written: in place is safe.
        const scales = rms_scales(rows, count, eps);
        for (0..active) |r| {
            const index = src.row_index(row + r);
            if (kind == .rms_norm_mul) {
                scale_gain_row(dst.row_at(index), rows[r], gain.?.row_broadcast(index), count, scales[r], stream);
            } else {
                scale_row(dst.row_at(index), rows[r], count, 0, scales[r], stream);
            }
        }
    }
}

/// ggml_compute_forward_rms_norm_f32's scale of several rows at once (a row may repeat to fill
/// the group), bit for bit: the squares rounded to f32, summed in f64 one element after another
/// in row order (each row its own chain); `mean = (float)(sum / n)`, then
/// `1.0f / sqrtf(mean + eps)` all in f32.
fn rms_scales(rows: [rms_rows_together]Strided, count: usize, eps: f32) [rms_rows_together]f32 {
    var totals: [rms_rows_together]f64 = @splat(0);
    var index: usize = 0;
    while (index < count) : (index += lanes) {
        const chunk = @min(lanes, count - index);
        // Each square rounded to f32 (ggml's x * x), then widened exactly to f64, a vector at
        // a time; the adds below stay scalar and in order.
        var squares: [rms_rows_together][lanes]f64 = undefined;
        inline for (0..rms_rows_together) |r| {
            const x = common.load_chunk(rows[r], index, chunk, 0);
            squares[r] = @as(F64x, @floatCast(x * x));
        }
        // Padding lanes are 0: adding +0 to a (non-negative) sum changes nothing.
        inline for (0..lanes) |lane| {
            inline for (0..rms_rows_together) |r| totals[r] += squares[r][lane];
        }
    }
    var scales: [rms_rows_together]f32 = undefined;
    for (0..rms_rows_together) |r| {
        const mean: f32 = @floatCast(totals[r] / @as(f64, @floatFromInt(count)));
        scales[r] = 1.0 / @sqrt(mean + eps);
    }
    return scales;
}

/// Sum of (x - center)^2 in f64, the difference taken in f32 as ggml does.
fn squares_sum(row: Strided, count: usize, center: f32) f64 {
    var total: F64x = @splat(0);
    var index: usize = 0;
    while (index < count) : (index += lanes) {
        const chunk = @min(lanes, count - index);
        const centered = common.load_chunk(row, index, chunk, center) - splat(center);
        const wide: F64x = @floatCast(centered);
        total += wide * wide;
    }
    return @reduce(.Add, total);
}

/// dst = (x - center) * scale. The row was just read by the sum, so it comes from L1 or L2.
fn scale_row(dst: Strided, src: Strided, count: usize, center: f32, scale: f32, stream: bool) void {
    var index: usize = 0;
    while (index < count) : (index += lanes) {
        const chunk = @min(lanes, count - index);
        const value = (common.load_chunk(src, index, chunk, center) - splat(center)) * splat(scale);
        common.store_chunk_maybe_stream(dst, index, chunk, value, stream);
    }
}

/// dst = (x * scale) * gain, the product rounded to f32 before the gain as in two nodes.
fn scale_gain_row(dst: Strided, src: Strided, gain: Strided, count: usize, scale: f32, stream: bool) void {
    var index: usize = 0;
    while (index < count) : (index += lanes) {
        const chunk = @min(lanes, count - index);
        const normed = (common.load_chunk(src, index, chunk, 0) - splat(0)) * splat(scale);
        const value = normed * common.load_chunk(gain, index, chunk, 1);
        common.store_chunk_maybe_stream(dst, index, chunk, value, stream);
    }
}
