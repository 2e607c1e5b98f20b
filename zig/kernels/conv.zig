//! im2col: ggml_im2col, the unfolding that turns a convolution into one matrix product. src0 is
//! the kernel (only its shape matters: [KW, KH, IC, OC] in 2D, [KW, IC, OC] in 1D), src1 the f32
//! image ([IW, IH, IC, N] in 2D, [IW, IC, N] in 1D), params (f32, whole numbers) s0, s1, p0, p1,
//! d0, d1, is_2d. dst (f32 or f16) row (ow, oh, n) holds, for every (ic, kh, kw) at
//! ic * KH * KW + kh * KW + kw, the image element (ow * s0 + kw * d0 - p0, oh * s1 + kh * d1 -
//! p1) of channel ic and image n, 0 where that falls in the padding. In 1D, KH = OH = 1 and
//! dst's dim 2 is the image. Threads split dst rows; each row is written by one thread.
//!
//! Graft's planar layout (params[7] = 1, 2D only): dst [OW, OH, IC*KH*KW, N], the same values
//! with the pixel dims first, so that each dst row (ow = 0..OW of one oh, tap and image) is a run
//! of one image row: a contiguous copy for stride 1, with zeros at the padded ends. Transposed,
//! it is the [K, OW*OH] operand conv2d's matrix product packs without gathers.

const std = @import("std");
const common = @import("common.zig");

const assert = common.assert;
const Tensor = common.Tensor;

/// The convolution geometry of an im2col node (validate.zig checked the params).
pub const Geometry = struct {
    stride: [2]i64,
    pad: [2]i64,
    dilation: [2]i64,
    is_2d: bool,
    planar: bool, // params[7]: dst [OW, OH, IC*KH*KW, N] (see im2col_planar)

    pub fn of(n: *const common.Node) Geometry {
        const p = struct {
            fn int(node: *const common.Node, i: usize) i64 {
                return @intFromFloat(node.param_f32(i));
            }
        };
        return .{
            .stride = .{ p.int(n, 0), p.int(n, 1) },
            .pad = .{ p.int(n, 2), p.int(n, 3) },
            .dilation = .{ p.int(n, 4), p.int(n, 5) },
            .is_2d = n.param_f32(6) != 0,
            .planar = n.param_f32(7) != 0,
        };
    }
};

/// ggml_calc_conv_output_size: (ins + 2p - d(ks - 1) - 1) / s + 1.
pub fn output_size(ins: i64, ks: i64, s: i64, p: i64, d: i64) i64 {
    return @divFloor(ins + 2 * p - d * (ks - 1) - 1, s) + 1;
}

pub fn im2col(n: *const common.Node, work: *const common.Work) common.Status {
    const g = Geometry.of(n);
    if (g.planar) return im2col_planar(n, g, work);
    const kernel = Tensor.from(&n.src[0]);
    const image = Tensor.from(&n.src[1]);
    const dst = Tensor.from(&n.dst);
    const kw: usize = kernel.ne[0];
    const kh: usize = if (g.is_2d) kernel.ne[1] else 1;
    const channels: usize = if (g.is_2d) image.ne[2] else image.ne[1];
    const ih: i64 = if (g.is_2d) @intCast(image.ne[1]) else 1;
    const iw: i64 = @intCast(image.ne[0]);
    // Image n, channel c starts at n * nb_image + c * nb_channel.
    const nb_image = if (g.is_2d) image.nb[3] else image.nb[2];
    const nb_channel = if (g.is_2d) image.nb[2] else image.nb[1];
    const nb_row = if (g.is_2d) image.nb[1] else 0;
    assert(dst.ne[0] == channels * kh * kw);
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        const ow: i64 = @intCast(index.i1);
        const oh: i64 = if (g.is_2d) @intCast(index.i2) else 0;
        const image_index = if (g.is_2d) index.i3 else index.i2;
        const out = dst.row_at(index);
        for (0..channels) |c| {
            const plane = image.base + image_index * nb_image + c * nb_channel;
            for (0..kh) |y| {
                const source_y = oh * g.stride[1] + @as(i64, @intCast(y)) * g.dilation[1] - g.pad[1];
                const at = (c * kh + y) * kw;
                const row_inside = source_y >= 0 and source_y < ih;
                const line = if (row_inside) plane + @as(usize, @intCast(source_y)) * nb_row else 0;
                for (0..kw) |x| {
                    const source_x = ow * g.stride[0] + @as(i64, @intCast(x)) * g.dilation[0] - g.pad[0];
                    const inside = row_inside and source_x >= 0 and source_x < iw;
                    const value: f32 = if (inside)
                        common.load_f32(line + @as(usize, @intCast(source_x)) * image.nb[0])
                    else
                        0;
                    if (dst.dtype == .f16) {
                        common.store_f16(out.at(at + x), @floatCast(value));
                    } else {
                        common.store_f32(out.at(at + x), value);
                    }
                }
            }
        }
    }
    return .ok;
}

/// The planar layout: dst row (oh, k, n) with k = (ic * KH + ky) * KW + kx is image row
/// oh * s1 + ky * d1 - p1 of channel ic, sampled at ow * s0 + kx * d0 - p0 for every ow.
fn im2col_planar(n: *const common.Node, g: Geometry, work: *const common.Work) common.Status {
    const kernel = Tensor.from(&n.src[0]);
    const image = Tensor.from(&n.src[1]);
    const dst = Tensor.from(&n.dst);
    assert(g.is_2d);
    const kw: usize = kernel.ne[0];
    const kh: usize = kernel.ne[1];
    const ih: i64 = @intCast(image.ne[1]);
    const iw: i64 = @intCast(image.ne[0]);
    const ow_count: i64 = @intCast(dst.ne[0]);
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        const kx: i64 = @intCast(index.i2 % kw);
        const ky: i64 = @intCast((index.i2 / kw) % kh);
        const channel = index.i2 / (kw * kh);
        const out = dst.row_at(index);
        const source_y = @as(i64, @intCast(index.i1)) * g.stride[1] + ky * g.dilation[1] - g.pad[1];
        // ow in [first, last) reads inside the image: first x >= 0, last x < iw.
        const offset = kx * g.dilation[0] - g.pad[0];
        const first = std.math.clamp(@divFloor(-offset + g.stride[0] - 1, g.stride[0]), 0, ow_count);
        const last = std.math.clamp(@divFloor(iw - 1 - offset, g.stride[0]) + 1, first, ow_count);
        const inside_y = source_y >= 0 and source_y < ih;
        const begin: usize = if (inside_y) @intCast(first) else @intCast(ow_count);
        const end: usize = if (inside_y) @intCast(last) else @intCast(ow_count);
        for (0..begin) |ow| store(dst.dtype, out.at(ow), 0);
        for (end..@intCast(ow_count)) |ow| store(dst.dtype, out.at(ow), 0);
        if (begin == end) continue;
        const line = image.row_at(.{ .i1 = @intCast(source_y), .i2 = channel, .i3 = index.i3 });
        const step: usize = @intCast(g.stride[0]);
        const start: usize = @intCast(@as(i64, @intCast(begin)) * g.stride[0] + offset);
        if (dst.dtype == .f32 and step == 1 and out.stride == 4) {
            const from: [*]const f32 = @ptrFromInt(line.at(start));
            const to: [*]f32 = @ptrFromInt(out.at(begin));
            @memcpy(to[0 .. end - begin], from[0 .. end - begin]);
            continue;
        }
        for (begin..end, 0..) |ow, i| store(dst.dtype, out.at(ow), common.load_f32(line.at(start + i * step)));
    }
    return .ok;
}

fn store(dtype: common.DType, address: usize, value: f32) void {
    if (dtype == .f16) common.store_f16(address, @floatCast(value)) else common.store_f32(address, value);
}
