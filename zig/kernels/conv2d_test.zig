//! conv_2d (kernels/conv2d.zig) against a float64 convolution, through tests.zig's harness
//! (1, 2 and 3 threads with a real barrier, bitwise equal across thread counts, no byte outside
//! dst written). Shapes hit the three paths' edges. The Winograd path (3x3, stride 1, f32
//! weights, 8 channels or more): odd and even output sizes (a tile half outside), no padding,
//! padding of 2 and 3 (wider than the kernel's reach), tile rows longer than a unit, units
//! and thread ranges across tile rows and images, more input channels than a weight transform
//! step, output channels not a multiple of NR. The direct path (other stride-1
//! convolutions): tiles across padded rows and whole tiles inside one (output rows wider than
//! a tile), dilation, padding wider than a tap (output rows longer than an image row and its
//! left padding), 1x1 kernels with and without padding, f16 weights, output channels not a
//! multiple of its NR. The packing path (a stride other than 1): several KC blocks of taps,
//! output channels not a multiple of NR, pixel counts not a multiple of MR, output rows longer
//! than a panel, strides (the division path), dilation. All three: several images, an image
//! with gaps between its rows and planes, strided weights, and both dst layouts (conv2d's
//! pixels-adjacent one, with vector stores, and a channels-adjacent one).

const std = @import("std");
const node = @import("../node.zig");
const tests = @import("tests.zig");
const conv2d = @import("conv2d.zig");

const testing = std.testing;
const DType = node.DType;
const TestTensor = tests.TestTensor;

const Case = struct {
    kernel: [2]i64, // KW, KH
    channels: i64,
    out_channels: i64,
    image: [3]i64, // IW, IH, N
    stride: [2]i64 = .{ 1, 1 },
    pad: [2]i64 = .{ 0, 0 },
    dilation: [2]i64 = .{ 1, 1 },
    weights: DType = .f32,
    gaps: bool = false, // image rows and planes apart (a view of a larger image)
    strided_weights: bool = false,
    pixels_adjacent: bool = true, // dst [OC, P, N] with nb[1] = 4, as conv2d's
};

const cases = [_]Case{
    .{ .kernel = .{ 3, 3 }, .channels = 37, .out_channels = 13, .image = .{ 23, 19, 2 }, .pad = .{ 1, 1 } },
    .{ .kernel = .{ 3, 2 }, .channels = 5, .out_channels = 7, .image = .{ 11, 9, 2 }, .stride = .{ 2, 2 }, .pad = .{ 1, 0 }, .pixels_adjacent = false },
    .{ .kernel = .{ 3, 3 }, .channels = 4, .out_channels = 5, .image = .{ 13, 12, 2 }, .stride = .{ 1, 2 }, .pad = .{ 1, 2 }, .dilation = .{ 2, 2 }, .weights = .f16 },
    .{ .kernel = .{ 1, 1 }, .channels = 16, .out_channels = 3, .image = .{ 7, 5, 1 }, .gaps = true },
    .{ .kernel = .{ 3, 3 }, .channels = 3, .out_channels = 4, .image = .{ 70, 5, 1 }, .pad = .{ 1, 1 }, .strided_weights = true },
    .{ .kernel = .{ 3, 3 }, .channels = 4, .out_channels = 5, .image = .{ 3, 40, 1 }, .gaps = true },
    .{ .kernel = .{ 5, 5 }, .channels = 2, .out_channels = 17, .image = .{ 6, 6, 3 }, .pad = .{ 3, 3 }, .weights = .f16, .gaps = true },
    .{ .kernel = .{ 3, 3 }, .channels = 30, .out_channels = 20, .image = .{ 9, 8, 2 }, .stride = .{ 3, 1 }, .pad = .{ 2, 1 }, .dilation = .{ 1, 2 }, .weights = .f16 },
    .{ .kernel = .{ 3, 2 }, .channels = 6, .out_channels = 9, .image = .{ 61, 7, 2 }, .pad = .{ 2, 0 }, .dilation = .{ 2, 3 }, .pixels_adjacent = false },
    .{ .kernel = .{ 1, 1 }, .channels = 8, .out_channels = 16, .image = .{ 50, 3, 1 } },
    .{ .kernel = .{ 3, 3 }, .channels = 7, .out_channels = 4, .image = .{ 100, 4, 1 }, .pad = .{ 1, 1 }, .weights = .f16 },
    .{ .kernel = .{ 3, 1 }, .channels = 3, .out_channels = 5, .image = .{ 9, 6, 2 }, .pad = .{ 3, 2 } },
    .{ .kernel = .{ 1, 1 }, .channels = 5, .out_channels = 9, .image = .{ 20, 3, 1 }, .pad = .{ 1, 1 }, .weights = .f16, .gaps = true },
    .{ .kernel = .{ 3, 3 }, .channels = 9, .out_channels = 8, .image = .{ 10, 8, 1 } },
    .{ .kernel = .{ 3, 3 }, .channels = 8, .out_channels = 17, .image = .{ 7, 9, 2 }, .pad = .{ 2, 2 }, .gaps = true },
    .{ .kernel = .{ 3, 3 }, .channels = 10, .out_channels = 9, .image = .{ 5, 4, 1 }, .pad = .{ 3, 1 }, .pixels_adjacent = false },
    .{ .kernel = .{ 3, 3 }, .channels = 8, .out_channels = 8, .image = .{ 100, 6, 1 }, .pad = .{ 1, 1 }, .strided_weights = true },
    .{ .kernel = .{ 3, 3 }, .channels = 40, .out_channels = 70, .image = .{ 31, 30, 1 }, .pad = .{ 1, 0 } },
};

fn output_size(size: i64, kernel: i64, stride: i64, pad: i64, dilation: i64) i64 {
    return @divFloor(size + 2 * pad - dilation * (kernel - 1) - 1, stride) + 1;
}

fn run_case(c: Case, random: std.Random) !void {
    const kw = c.kernel[0];
    const kh = c.kernel[1];
    const k = c.channels * kh * kw;
    const ow = output_size(c.image[0], kw, c.stride[0], c.pad[0], c.dilation[0]);
    const oh = output_size(c.image[1], kh, c.stride[1], c.pad[1], c.dilation[1]);
    const pixels = ow * oh;
    var weights = try TestTensor.init(c.weights, .{ k, c.out_channels, 1, 1 }, if (c.strided_weights) .strided else .contiguous);
    defer weights.deinit();
    // Gaps: a view of [IW + 3, IH + 2, IC, N]; the elements outside it stay NaN (0xFF bytes).
    const stored: tests.Shape = if (c.gaps)
        .{ c.image[0] + 3, c.image[1] + 2, c.channels, c.image[2] }
    else
        .{ c.image[0], c.image[1], c.channels, c.image[2] };
    var image = try TestTensor.init(.f32, stored, .contiguous);
    defer image.deinit();
    image.desc.ne = .{ c.image[0], c.image[1], c.channels, c.image[2] };
    var dst = try TestTensor.init(.f32, .{ c.out_channels, pixels, c.image[2], 1 }, .contiguous);
    defer dst.deinit();
    if (c.pixels_adjacent) dst.desc.nb = .{ pixels * 4, 4, pixels * c.out_channels * 4, pixels * c.out_channels * c.image[2] * 4 };
    weights.fill_random(random, 1);
    image.fill_random(random, 1);

    var n = tests.make_node(.conv_2d, dst.desc, &.{ weights.desc, image.desc });
    const params = [8]i64{ c.stride[0], c.stride[1], c.pad[0], c.pad[1], c.dilation[0], c.dilation[1], kw, kh };
    for (params, 0..) |p, i| n.params[i] = @bitCast(@as(f32, @floatFromInt(p)));

    const reference = try testing.allocator.alloc(f64, @intCast(c.out_channels * pixels * c.image[2]));
    defer testing.allocator.free(reference);
    for (reference, 0..) |*out, flat| {
        const oc: i64 = @intCast(flat % @as(usize, @intCast(c.out_channels)));
        const p: i64 = @intCast((flat / @as(usize, @intCast(c.out_channels))) % @as(usize, @intCast(pixels)));
        const b: i64 = @intCast(flat / @as(usize, @intCast(c.out_channels * pixels)));
        var sum: f64 = 0;
        for (0..@intCast(k)) |tap_index| {
            const tap: i64 = @intCast(tap_index);
            const kx = @mod(tap, kw);
            const ky = @mod(@divFloor(tap, kw), kh);
            const channel = @divFloor(tap, kw * kh);
            const x = @mod(p, ow) * c.stride[0] + kx * c.dilation[0] - c.pad[0];
            const y = @divFloor(p, ow) * c.stride[1] + ky * c.dilation[1] - c.pad[1];
            if (x < 0 or x >= c.image[0] or y < 0 or y >= c.image[1]) continue;
            const at = x + c.image[0] * (y + c.image[1] * (channel + c.channels * b));
            var value = image.value_at(@intCast(at));
            // f16 weights multiply the image rounded to f16, as ggml's im2col into f16.
            if (c.weights == .f16) value = @as(f16, @floatCast(value));
            sum += weights.value_at(@intCast(tap + k * oc)) * value;
        }
        out.* = sum;
    }
    const buffers = [_][]align(64) u8{ weights.memory, image.memory, dst.memory };
    const tolerance: f64 = if (c.weights == .f16) 1e-3 else 1e-5;
    try tests.expect_node(&n, &buffers, 2, reference, tolerance);
}

test "conv_2d matches a float64 convolution on odd shapes, strides, dilation, padding, gaps" {
    var prng = std.Random.DefaultPrng.init(0xC0417);
    for (cases) |c| try run_case(c, prng.random());
}

fn work_size_node(weights: *const TestTensor, image: *const TestTensor, dst: *const TestTensor, stride: f32) node.Node {
    var n = tests.make_node(.conv_2d, dst.desc, &.{ weights.desc, image.desc });
    const params = [8]f32{ stride, stride, 0, 0, 1, 1, 3, 3 };
    for (params, 0..) |p, i| n.params[i] = @bitCast(p);
    return n;
}

test "conv_2d's work size covers every thread count up to the plan's" {
    var weights = try TestTensor.init(.f32, .{ 27, 8, 1, 1 }, .contiguous);
    defer weights.deinit();
    var image = try TestTensor.init(.f32, .{ 10, 10, 3, 1 }, .contiguous);
    defer image.deinit();
    var dst = try TestTensor.init(.f32, .{ 8, 64, 1, 1 }, .contiguous);
    defer dst.deinit();
    var strided_dst = try TestTensor.init(.f32, .{ 8, 16, 1, 1 }, .contiguous);
    defer strided_dst.deinit();
    // The packing path (stride 2) gives each thread a region, the direct path (stride 1) a
    // unit counter: more threads, more bytes.
    for ([_]node.Node{ work_size_node(&weights, &image, &strided_dst, 2), work_size_node(&weights, &image, &dst, 1) }) |n| {
        var previous: u64 = 0;
        for (1..5) |threads| {
            const size = conv2d.work_size(&n, @intCast(threads));
            try testing.expect(size > previous);
            previous = size;
        }
    }
}
