//! interpolate (ggml_interpolate / ggml_upscale_ext) and timestep_embedding, as ggml-cpu.
//!
//! interpolate (params[0] the mode as f32: 0 nearest, 1 bilinear, 2 bicubic, + 256 align
//! corners): dst [ne0..ne3] f32 from src0 f32 of any strides, with scale factors sf_d = ne_d / src.ne_d
//! (align corners: (ne - 1) / (src.ne - 1) in dims 0-1, pixel offset 0 instead of 0.5).
//! Nearest takes element i / sf in every dim; bilinear weighs the four pixels around
//! ((i + offset) / sf - offset) in dims 0-1 (indices clamped, weights clamped to [0, 1]) and
//! takes dims 2-3 nearest; bicubic mixes the 4x4 pixels around the same position with ggml's
//! cubic convolution weights (alpha -0.75), indices clamped, dims 2-3 nearest.
//!
//! timestep_embedding (params: dim, max_period as f32): src0 f32 timesteps [N] -> dst f32
//! [dim, N]: element j < dim/2 is cos(t * f_j), element j + dim/2 is sin(t * f_j), f_j =
//! exp(-ln(max_period) * j / (dim/2)); an odd dim's last element is 0. Threads split dst rows.

const std = @import("std");
const common = @import("common.zig");

const assert = common.assert;
const Tensor = common.Tensor;

pub const mode_nearest = 0;
pub const mode_bilinear = 1;
pub const mode_bicubic = 2;
pub const flag_align_corners = 256;

pub fn interpolate(n: *const common.Node, work: *const common.Work) common.Status {
    const src = Tensor.from(&n.src[0]);
    const dst = Tensor.from(&n.dst);
    const flags: u32 = @intFromFloat(n.param_f32(0));
    const bilinear = flags & 0xff == mode_bilinear;
    const bicubic = flags & 0xff == mode_bicubic;
    var sf: [4]f32 = undefined;
    for (0..4) |d| sf[d] = @as(f32, @floatFromInt(dst.ne[d])) / @as(f32, @floatFromInt(src.ne[d]));
    var offset: f32 = 0.5;
    if (flags & flag_align_corners != 0) {
        offset = 0;
        for (0..2) |d| {
            if (dst.ne[d] > 1 and src.ne[d] > 1) {
                sf[d] = @as(f32, @floatFromInt(dst.ne[d] - 1)) / @as(f32, @floatFromInt(src.ne[d] - 1));
            }
        }
    }
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        const out = dst.row_at(index);
        const plane = nearest(index.i2, sf[2]);
        const batch = nearest(index.i3, sf[3]);
        if (bicubic) {
            bicubic_row(src, out, dst.ne[0], index.i1, plane, batch, sf, offset);
            continue;
        }
        if (!bilinear) {
            const line = src.row_at(.{ .i1 = nearest(index.i1, sf[1]), .i2 = plane, .i3 = batch });
            for (0..dst.ne[0]) |column| common.store_f32(out.at(column), common.load_f32(line.at(nearest(column, sf[0]))));
            continue;
        }
        const y = Sample.of(index.i1, sf[1], offset, src.ne[1]);
        const top = src.row_at(.{ .i1 = y.low, .i2 = plane, .i3 = batch });
        const bottom = src.row_at(.{ .i1 = y.high, .i2 = plane, .i3 = batch });
        for (0..dst.ne[0]) |column| {
            const x = Sample.of(column, sf[0], offset, src.ne[0]);
            const a = common.load_f32(top.at(x.low));
            const b = common.load_f32(top.at(x.high));
            const c = common.load_f32(bottom.at(x.low));
            const d = common.load_f32(bottom.at(x.high));
            const dx = x.weight;
            const dy = y.weight;
            // ggml's expression, term by term, left to right.
            const value = a * (1 - dx) * (1 - dy) + b * dx * (1 - dy) + c * (1 - dx) * dy + d * dx * dy;
            common.store_f32(out.at(column), value);
        }
    }
    return .ok;
}

/// ggml's bicubic convolution weights with alpha -0.75 (as PyTorch), in f32 as ggml-cpu:
/// weight1 for |x| <= 1, weight2 for 1 < |x| < 2.
const bicubic_alpha: f32 = -0.75;

fn weight1(x: f32) f32 {
    const a = bicubic_alpha;
    return ((a + 2) * x - (a + 3)) * x * x + 1;
}

fn weight2(x: f32) f32 {
    const a = bicubic_alpha;
    return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
}

/// ggml-cpu's `bicubic(p0, p1, p2, p3, x)`: the four taps around position floor + x.
fn bicubic_mix(p: [4]f32, x: f32) f32 {
    const w0 = weight2(x + 1);
    const w1 = weight1(x + 0);
    const w2 = weight1(1 - x);
    const w3 = weight2(2 - x);
    return p[0] * w0 + p[1] * w1 + p[2] * w2 + p[3] * w3;
}

/// One dst row of the bicubic mode (ggml-cpu's upscale, GGML_SCALE_MODE_BICUBIC): a 4x4
/// neighbourhood around ((i + offset) / sf - offset) in dims 0-1, source indices clamped to the
/// image, mixed along x in each of the four rows and then along y; dims 2-3 nearest.
fn bicubic_row(
    src: Tensor,
    out: common.Strided,
    count: usize,
    line: usize,
    plane: usize,
    batch: usize,
    sf: [4]f32,
    offset: f32,
) void {
    const y = (@as(f32, @floatFromInt(line)) + offset) / sf[1] - offset;
    const y_floor = @floor(y);
    const y0: i64 = @intFromFloat(y_floor);
    const dy = y - y_floor;
    var lines: [4]common.Strided = undefined;
    for (0..4) |k| {
        const row = clamp_index(y0 + @as(i64, @intCast(k)) - 1, src.ne[1]);
        lines[k] = src.row_at(.{ .i1 = row, .i2 = plane, .i3 = batch });
    }
    for (0..count) |column| {
        const x = (@as(f32, @floatFromInt(column)) + offset) / sf[0] - offset;
        const x_floor = @floor(x);
        const x0: i64 = @intFromFloat(x_floor);
        const dx = x - x_floor;
        var columns: [4]usize = undefined;
        for (0..4) |k| columns[k] = clamp_index(x0 + @as(i64, @intCast(k)) - 1, src.ne[0]);
        var mixed: [4]f32 = undefined;
        for (0..4) |k| {
            var taps: [4]f32 = undefined;
            for (0..4) |j| taps[j] = common.load_f32(lines[k].at(columns[j]));
            mixed[k] = bicubic_mix(taps, dx);
        }
        common.store_f32(out.at(column), bicubic_mix(mixed, dy));
    }
}

/// i clamped to [0, size - 1].
fn clamp_index(i: i64, size: usize) usize {
    assert(size >= 1);
    return @intCast(std.math.clamp(i, 0, @as(i64, @intCast(size - 1))));
}

/// ggml's `(int64_t)(i / sf)`: an f32 division, truncated.
fn nearest(i: usize, sf: f32) usize {
    return @intFromFloat(@as(f32, @floatFromInt(i)) / sf);
}

/// One axis of a bilinear sample: the two source indices (clamped) and the second's weight.
const Sample = struct {
    low: usize,
    high: usize,
    weight: f32,

    fn of(i: usize, sf: f32, offset: f32, size: usize) Sample {
        const position = (@as(f32, @floatFromInt(i)) + offset) / sf - offset;
        const floor: i64 = @intFromFloat(@floor(position));
        const last: i64 = @intCast(size - 1);
        const low = std.math.clamp(floor, 0, last);
        const high = std.math.clamp(floor + 1, 0, last);
        const weight = std.math.clamp(position - @as(f32, @floatFromInt(low)), 0, 1);
        return .{ .low = @intCast(low), .high = @intCast(high), .weight = weight };
    }
};

pub fn timestep_embedding(n: *const common.Node, work: *const common.Work) common.Status {
    const src = Tensor.from(&n.src[0]);
    const dst = Tensor.from(&n.dst);
    const dim: usize = @intFromFloat(n.param_f32(0));
    const max_period = n.param_f32(1);
    assert(dst.ne[0] == dim);
    const half = dim / 2;
    const log_period = @log(max_period);
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const t = common.load_f32(src.base + row * src.nb[0]);
        const out = dst.row(row);
        for (0..half) |j| {
            const exponent = (-log_period * @as(f32, @floatFromInt(j))) / @as(f32, @floatFromInt(half));
            const arg = t * common.expf(exponent);
            common.store_f32(out.at(j), common.cosf(arg));
            common.store_f32(out.at(j + half), common.sinf(arg));
        }
        if (dim % 2 != 0) common.store_f32(out.at(2 * half), 0);
    }
    return .ok;
}
