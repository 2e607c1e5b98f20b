//! What conv_2d's two paths (kernels/conv2d.zig, kernels/conv2d_direct.zig) share: the
//! node's geometry, and copies, zeros and f16 rounding of short runs of floats.

const std = @import("std");
const common = @import("common.zig");

const assert = common.assert;
const Tensor = common.Tensor;
const lanes = common.lanes;
const V = @Vector(lanes, f32);

/// The geometry of a conv_2d node (validate.zig checked it).
pub const Shape = struct {
    kw: usize,
    kh: usize,
    channels: usize,
    out_channels: usize,
    iw: i64,
    ih: i64,
    ow: usize,
    oh: usize,
    images: usize,
    stride: [2]i64,
    pad: [2]i64,
    dilation: [2]i64,
    k: usize, // taps: channels * kh * kw
    pixels: usize, // ow * oh

    pub fn of(n: *const common.Node) Shape {
        const p = struct {
            fn int(node: *const common.Node, i: usize) i64 {
                return @intFromFloat(node.param_f32(i));
            }
        };
        const image = Tensor.from(&n.src[1]);
        const weights = Tensor.from(&n.src[0]);
        const dst = Tensor.from(&n.dst);
        const kw: usize = @intCast(p.int(n, 6));
        const kh: usize = @intCast(p.int(n, 7));
        const iw: i64 = @intCast(image.ne[0]);
        const ih: i64 = @intCast(image.ne[1]);
        const ow = output_size(iw, @intCast(kw), p.int(n, 0), p.int(n, 2), p.int(n, 4));
        const oh = output_size(ih, @intCast(kh), p.int(n, 1), p.int(n, 3), p.int(n, 5));
        const shape: Shape = .{
            .kw = kw,
            .kh = kh,
            .channels = image.ne[2],
            .out_channels = weights.ne[1],
            .iw = iw,
            .ih = ih,
            .ow = @intCast(ow),
            .oh = @intCast(oh),
            .images = image.ne[3],
            .stride = .{ p.int(n, 0), p.int(n, 1) },
            .pad = .{ p.int(n, 2), p.int(n, 3) },
            .dilation = .{ p.int(n, 4), p.int(n, 5) },
            .k = weights.ne[0],
            .pixels = @intCast(ow * oh),
        };
        assert(shape.k == shape.channels * kh * kw);
        assert(dst.ne[1] == shape.pixels);
        return shape;
    }
};

/// ggml_calc_conv_output_size: (ins + 2p - d(ks - 1) - 1) / s + 1.
fn output_size(ins: i64, ks: i64, s: i64, p: i64, d: i64) i64 {
    return @divFloor(ins + 2 * p - d * (ks - 1) - 1, s) + 1;
}

/// Width of the rows of the padded image copy (conv2d_direct.zig, conv2d_winograd.zig):
/// max(IW + p0, OW) floats, p0 zeros, the image row, zeros to the end. The p0 zeros that start
/// a row are also the right padding of the row above: a stride-1 read past a row's end lands
/// on them, and no tap of a stored output reads further.
pub fn padded_width(shape: Shape) usize {
    return @max(@as(usize, @intCast(shape.iw + shape.pad[0])), shape.ow);
}

/// Padded row `row` of channel `channel` of image `image_index` into `dst` (`pw` floats): zeros
/// in the padding, the image row rounded to f16 (kept as f32) for f16 weights, which multiply
/// the image rounded as ggml's im2col into f16 does.
pub fn pad_row(comptime T: type, n: *const common.Node, shape: Shape, pw: usize, image_index: usize, channel: usize, row: usize, dst: [*]f32) void {
    const image = Tensor.from(&n.src[1]);
    const iw: usize = @intCast(shape.iw);
    const ih: usize = @intCast(shape.ih);
    const p0: usize = @intCast(shape.pad[0]);
    const p1: usize = @intCast(shape.pad[1]);
    if (row < p1 or row >= p1 + ih) return zero(dst, pw);
    const source = image.base + image_index * image.nb[3] + channel * image.nb[2] + (row - p1) * image.nb[1];
    zero(dst, p0);
    copy(dst + p0, @ptrFromInt(source), iw, 1);
    if (T == f16) round_f16(dst + p0, iw);
    zero(dst + p0 + iw, pw - p0 - iw);
}

/// The work buffer of the padded paths starts with the threads' unit counters, each on its
/// own cache line.
pub const counter_bytes: usize = 64;

comptime {
    assert(counter_bytes % 64 == 0); // the regions after them stay 64-byte aligned
    assert(@sizeOf(std.atomic.Value(usize)) <= counter_bytes);
}

pub fn counter_of(counters: [*]align(64) [counter_bytes]u8, t: usize) *std.atomic.Value(usize) {
    return @ptrCast(@alignCast(&counters[t]));
}

/// Powers of two below `lanes`, largest first: the vector widths that finish a run's tail.
const tail_widths = blk: {
    var widths: [std.math.log2_int(usize, lanes)]usize = undefined;
    for (&widths, 0..) |*w, i| w.* = lanes >> (i + 1);
    break :blk widths;
};

pub inline fn zero(out: [*]f32, count: usize) void {
    var i: usize = 0;
    while (i + lanes <= count) : (i += lanes) out[i..][0..lanes].* = @as(V, @splat(0));
    inline for (tail_widths) |w| {
        if ((count - i) & w != 0) {
            out[i..][0..w].* = @as(@Vector(w, f32), @splat(0));
            i += w;
        }
    }
    assert(i == count);
}

/// `count` floats from `from`, `step` floats apart (step 1: vector copies; a run's tail in
/// halving widths, never reading past its last float).
pub inline fn copy(out: [*]f32, from: [*]align(1) const f32, count: usize, step: usize) void {
    if (step == 1) {
        var i: usize = 0;
        while (i + lanes <= count) : (i += lanes) {
            const v: V = from[i..][0..lanes].*;
            out[i..][0..lanes].* = v;
        }
        copy_tail(out, from, i, count);
        return;
    }
    for (0..count) |i| out[i] = from[i * step];
}

/// `copy` (step 1) of at most `max` floats, `max` a multiple of lanes: straight-line vector
/// moves, where `copy`'s loop would become a call to memcpy for a few dozen bytes.
pub inline fn copy_short(comptime max: usize, out: [*]f32, from: [*]align(1) const f32, count: usize) void {
    comptime assert(max % lanes == 0);
    assert(count <= max);
    var i: usize = 0;
    inline for (0..max / lanes) |_| {
        if (count - i >= lanes) {
            const v: V = from[i..][0..lanes].*;
            out[i..][0..lanes].* = v;
            i += lanes;
        }
    }
    copy_tail(out, from, i, count);
}

/// Floats [start, count) of `from`, fewer than lanes: one move per set bit of their number,
/// halving widths, never reading past the last.
inline fn copy_tail(out: [*]f32, from: [*]align(1) const f32, start: usize, count: usize) void {
    assert(count - start < lanes);
    var i = start;
    inline for (tail_widths) |w| {
        if ((count - i) & w != 0) {
            const v: @Vector(w, f32) = from[i..][0..w].*;
            out[i..][0..w].* = v;
            i += w;
        }
    }
    assert(i == count);
}

/// The values rounded to f16 (kept as f32): f16 weights multiply the image rounded, as ggml.
pub fn round_f16(values: [*]f32, count: usize) void {
    var i: usize = 0;
    while (i + lanes <= count) : (i += lanes) {
        const v: V = values[i..][0..lanes].*;
        values[i..][0..lanes].* = common.widen_f16(lanes, common.narrow_f16(lanes, v));
    }
    while (i < count) : (i += 1) values[i] = @floatCast(@as(f16, @floatCast(values[i])));
}
