//! The geometry of a conv_2d node (kernels/conv2d.zig), shared by its two paths.

const common = @import("common.zig");

const assert = common.assert;
const Tensor = common.Tensor;

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
