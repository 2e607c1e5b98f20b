//! Tests of acc and set (view_write.zig), pad_circular (indexing.zig), the bicubic mode of
//! interpolate and binary ops of an f16 src0 with an f32 src1 (elementwise.zig) against scalar
//! references written here from ggml's definitions: f32, f16 and
//! i32 values, contiguous, permuted and strided sources, 1, 2 and 3 threads with bitwise equal
//! results and no write outside dst (tests.zig's expect_node), in place and not; and the
//! validation refusals (a view outside dst, a view overlapping itself).

const std = @import("std");
const node = @import("../node.zig");
const validate = @import("../validate.zig");
const t = @import("tests.zig");

const testing = std.testing;
const allocator = testing.allocator;
const Op = node.Op;
const DType = node.DType;

/// The view of a test: element strides nb1-nb3 and an element offset into dst.
const View = struct { nb: [3]i64, offset: i64 };

/// acc / set's params (see node.zig): each value as its low 24 bits and the rest, as f32.
fn view_node(op: Op, dst: node.TensorDesc, a: node.TensorDesc, b: node.TensorDesc, view: View) node.Node {
    var n = t.make_node(op, dst, &.{ a, b });
    const values = [4]i64{ view.nb[0], view.nb[1], view.nb[2], view.offset };
    for (values, 0..) |value, k| {
        const low: f32 = @floatFromInt(@mod(value, 1 << 24));
        const high: f32 = @floatFromInt(@divFloor(value, 1 << 24));
        n.params[2 * k] = @bitCast(low);
        n.params[2 * k + 1] = @bitCast(high);
    }
    return n;
}

fn round_to(dtype: DType, value: f64) f64 {
    return switch (dtype) {
        .f16 => @as(f16, @floatCast(value)),
        .f32 => @as(f32, @floatCast(value)),
        else => value,
    };
}

fn expect_view_write(op: Op, dtype: DType, ne_a: t.Shape, ne_b: t.Shape, view: View, layout: t.Layout, in_place: bool) !void {
    var prng = std.Random.DefaultPrng.init(@intFromEnum(op) * 31 + @intFromEnum(dtype));
    var a = try t.TestTensor.init(dtype, ne_a, .contiguous);
    defer a.deinit();
    var b = try t.TestTensor.init(dtype, ne_b, layout);
    defer b.deinit();
    var dst = try t.TestTensor.init(dtype, ne_a, .contiguous);
    defer dst.deinit();
    if (dtype == .i32) {
        for (0..a.count()) |flat| t.set_value(&a.desc, flat, @floatFromInt(prng.random().intRangeAtMost(i32, -999, 999)));
        for (0..b.count()) |flat| t.set_value(&b.desc, flat, @floatFromInt(prng.random().intRangeAtMost(i32, -999, 999)));
    } else {
        a.fill_random(prng.random(), 1);
        b.fill_random(prng.random(), 1);
    }
    const reference = try allocator.alloc(f64, a.count());
    defer allocator.free(reference);
    for (reference, 0..) |*value, flat| value.* = a.value_at(flat);
    for (0..b.count()) |flat| {
        var rest = flat;
        var at: i64 = view.offset;
        for (0..node.dims_max) |d| {
            const extent: usize = @intCast(ne_b[d]);
            const stride: i64 = if (d == 0) 1 else view.nb[d - 1];
            at += @as(i64, @intCast(rest % extent)) * stride;
            rest /= extent;
        }
        const k: usize = @intCast(at);
        const x = b.value_at(flat);
        reference[k] = round_to(dtype, if (op == .acc) reference[k] + x else x);
    }
    const target = if (in_place) a.desc else dst.desc;
    const n = view_node(op, target, a.desc, b.desc, view);
    try testing.expectEqual(node.Status.ok, validate.validate_node(&n).status);
    if (in_place) {
        const buffers = [_][]align(64) u8{ a.memory, b.memory };
        try t.expect_node(&n, &buffers, 0, reference, 0);
    } else {
        const buffers = [_][]align(64) u8{ a.memory, b.memory, dst.memory };
        try t.expect_node(&n, &buffers, 2, reference, 0);
    }
}

test "acc and set write src1 into the view of a copy of src0, exactly, in place or not" {
    const cases = [_]struct { a: t.Shape, b: t.Shape, view: View }{
        .{ .a = .{ 9, 5, 1, 1 }, .b = .{ 5, 2, 1, 1 }, .view = .{ .nb = .{ 9, 45, 45 }, .offset = 11 } },
        .{ .a = .{ 8, 6, 3, 2 }, .b = .{ 3, 3, 2, 2 }, .view = .{ .nb = .{ 16, 48, 144 }, .offset = 9 } },
        .{ .a = .{ 1037, 3, 1, 1 }, .b = .{ 1037, 3, 1, 1 }, .view = .{ .nb = .{ 1037, 3111, 3111 }, .offset = 0 } },
        .{ .a = .{ 33, 1, 1, 1 }, .b = .{ 5, 1, 1, 1 }, .view = .{ .nb = .{ 0, 0, 0 }, .offset = 28 } },
    };
    for (cases) |c| {
        for (t.layouts) |layout| {
            for ([_]bool{ false, true }) |in_place| {
                // acc rounds once from exact f32 sums of f32 (or f16) values: exact.
                try expect_view_write(.acc, .f32, c.a, c.b, c.view, layout, in_place);
                try expect_view_write(.acc, .f16, c.a, c.b, c.view, layout, in_place);
                for ([_]DType{ .f32, .f16, .i32 }) |dtype| {
                    try expect_view_write(.set, dtype, c.a, c.b, c.view, layout, in_place);
                }
            }
        }
    }
}

test "acc and set refuse views outside dst or overlapping themselves, and mixed dtypes" {
    var a = try t.TestTensor.init(.f32, .{ 8, 4, 1, 1 }, .contiguous);
    defer a.deinit();
    var b = try t.TestTensor.init(.f32, .{ 4, 2, 1, 1 }, .contiguous);
    defer b.deinit();
    var h = try t.TestTensor.init(.f16, .{ 4, 2, 1, 1 }, .contiguous);
    defer h.deinit();
    var i = try t.TestTensor.init(.i32, .{ 8, 4, 1, 1 }, .contiguous);
    defer i.deinit();
    const inside: View = .{ .nb = .{ 8, 32, 32 }, .offset = 20 };
    try testing.expectEqual(node.Status.ok, validate.validate_node(&view_node(.set, a.desc, a.desc, b.desc, inside)).status);
    const past_end: View = .{ .nb = .{ 8, 32, 32 }, .offset = 21 };
    try testing.expectEqual(node.Status.out_of_bounds, validate.validate_node(&view_node(.acc, a.desc, a.desc, b.desc, past_end)).status);
    const overlapping: View = .{ .nb = .{ 3, 32, 32 }, .offset = 0 };
    try testing.expectEqual(node.Status.invalid_argument, validate.validate_node(&view_node(.set, a.desc, a.desc, b.desc, overlapping)).status);
    try testing.expectEqual(node.Status.unsupported, validate.validate_node(&view_node(.acc, a.desc, a.desc, h.desc, inside)).status);
    try testing.expectEqual(node.Status.unsupported, validate.validate_node(&view_node(.acc, i.desc, i.desc, i.desc, .{ .nb = .{ 8, 32, 32 }, .offset = 0 })).status);
}

fn wrap(i: i64, n: i64) usize {
    return @intCast(@mod(i, n));
}

test "pad_circular wraps every dim around src0, pads longer than src0 included" {
    const cases = [_][8]i64{
        .{ 2, 3, 1, 2, 0, 0, 0, 0 },
        .{ 11, 0, 0, 7, 1, 0, 0, 2 },
        .{ 1, 2, 2, 0, 1, 1, 1, 1 },
    };
    const ne_a: t.Shape = .{ 5, 3, 2, 2 };
    for (cases) |pads| {
        for ([_]DType{ .f32, .f16, .i32 }) |dtype| {
            for (t.layouts) |layout| {
                var prng = std.Random.DefaultPrng.init(85);
                var a = try t.TestTensor.init(dtype, ne_a, layout);
                defer a.deinit();
                if (dtype == .i32) {
                    for (0..a.count()) |flat| t.set_value(&a.desc, flat, @floatFromInt(flat));
                } else {
                    a.fill_random(prng.random(), 1);
                }
                var ne: t.Shape = undefined;
                for (0..node.dims_max) |d| ne[d] = ne_a[d] + pads[2 * d] + pads[2 * d + 1];
                var dst = try t.TestTensor.init(dtype, ne, .contiguous);
                defer dst.deinit();
                const reference = try allocator.alloc(f64, dst.count());
                defer allocator.free(reference);
                for (reference, 0..) |*value, flat| {
                    var rest = flat;
                    var source: usize = 0;
                    var scale: usize = 1;
                    for (0..node.dims_max) |d| {
                        const extent: usize = @intCast(ne[d]);
                        const i: i64 = @intCast(rest % extent);
                        rest /= extent;
                        source += wrap(i - pads[2 * d], ne_a[d]) * scale;
                        scale *= @intCast(ne_a[d]);
                    }
                    value.* = a.value_at(source);
                }
                var n = t.make_node(.pad_circular, dst.desc, &.{a.desc});
                for (pads, 0..) |p, k| n.params[k] = @bitCast(@as(f32, @floatFromInt(p)));
                const buffers = [_][]align(64) u8{ a.memory, dst.memory };
                try t.expect_node(&n, &buffers, 1, reference, 0);
            }
        }
    }
}

test "bicubic interpolate to the same size is the identity (the cubic weights are 0, 1, 0, 0)" {
    for (t.layouts) |layout| {
        var prng = std.Random.DefaultPrng.init(2);
        var a = try t.TestTensor.init(.f32, .{ 7, 5, 3, 1 }, layout);
        defer a.deinit();
        a.fill_random(prng.random(), 1);
        var dst = try t.TestTensor.init(.f32, .{ 7, 5, 3, 1 }, .contiguous);
        defer dst.deinit();
        const reference = try allocator.alloc(f64, a.count());
        defer allocator.free(reference);
        for (reference, 0..) |*value, flat| value.* = a.value_at(flat);
        var n = t.make_node(.interpolate, dst.desc, &.{a.desc});
        n.params[0] = @bitCast(@as(f32, 2));
        const buffers = [_][]align(64) u8{ a.memory, dst.memory };
        try t.expect_node(&n, &buffers, 1, reference, 0);
    }
}

test "binary ops of an f16 src0 and an f32 src1 (broadcast) into f16 or f32 match float64" {
    var prng = std.Random.DefaultPrng.init(5);
    const ne: t.Shape = .{ 33, 6, 2, 3 };
    const forms = [_]t.Shape{ ne, .{ 1, 1, 1, 1 }, .{ 11, 3, 1, 3 }, .{ 33, 1, 2, 1 } };
    for ([_]Op{ .add, .sub, .mul, .div }) |op| {
        for (forms) |ne_b| {
            for (t.layouts) |layout| {
                for ([_]DType{ .f16, .f32 }) |dtype| {
                    var a = try t.TestTensor.init(.f16, ne, layout);
                    defer a.deinit();
                    var b = try t.TestTensor.init(.f32, ne_b, .contiguous);
                    defer b.deinit();
                    var dst = try t.TestTensor.init(dtype, ne, .contiguous);
                    defer dst.deinit();
                    a.fill_random(prng.random(), 1);
                    b.fill_random(prng.random(), 1);
                    const reference = try allocator.alloc(f64, a.count());
                    defer allocator.free(reference);
                    for (reference, 0..) |*value, flat| {
                        var rest = flat;
                        var at: usize = 0;
                        var scale: usize = 1;
                        for (0..node.dims_max) |d| {
                            const extent: usize = @intCast(ne[d]);
                            const extent_b: usize = @intCast(ne_b[d]);
                            at += (rest % extent) % extent_b * scale;
                            scale *= extent_b;
                            rest /= extent;
                        }
                        const x = a.value_at(flat);
                        const y = b.value_at(at);
                        // One f32 operation of the widened values, rounded once to dst.
                        const exact: f32 = switch (op) {
                            .add => @floatCast(x + y),
                            .sub => @floatCast(x - y),
                            .mul => @floatCast(x * y),
                            else => @as(f32, @floatCast(x)) / @as(f32, @floatCast(y)),
                        };
                        value.* = round_to(dtype, exact);
                    }
                    const n = t.make_node(op, dst.desc, &.{ a.desc, b.desc });
                    const buffers = [_][]align(64) u8{ a.memory, b.memory, dst.memory };
                    try t.expect_node(&n, &buffers, 2, reference, 0);
                }
            }
        }
    }
}
