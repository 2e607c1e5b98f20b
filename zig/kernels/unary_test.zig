//! Tests of kernels/unary.zig and kernels/reduce_rows.zig: every op on f32 and f16, odd sizes,
//! contiguous, permuted and strided layouts, 1-3 threads (tests.zig's `expect_node`: values,
//! bitwise equality across thread counts, no stray writes), against the scalar float64
//! reference `unary.apply_scalar` and plain loops. Tolerances as tests.zig: 1e-5 of the largest
//! reference magnitude for f32, 1e-3 where f16 rounding enters, 0 for exact ops.

const std = @import("std");
const node = @import("../node.zig");
const validate = @import("../validate.zig");
const unary = @import("unary.zig");
const t = @import("tests.zig");

const testing = std.testing;
const allocator = testing.allocator;
const Op = node.Op;
const DType = node.DType;

fn tolerance(dtype: DType) f64 {
    return if (dtype == .f16) 1e-3 else 1e-5;
}

/// Inputs where each op is well-conditioned: log on positive values.
fn fill(op: Op, tensor: *t.TestTensor, random: std.Random) void {
    tensor.fill_random(random, 4);
    if (op == .log) {
        for (0..tensor.count()) |flat| {
            const value = tensor.value_at(flat);
            set_value(tensor, flat, @abs(value));
        }
    }
}

fn set_value(tensor: *t.TestTensor, flat: usize, value: f64) void {
    const address = element_address(&tensor.desc, flat);
    switch (@as(DType, @enumFromInt(tensor.desc.dtype))) {
        .f32 => @as(*align(1) f32, @ptrFromInt(address)).* = @floatCast(value),
        .f16 => @as(*align(1) f16, @ptrFromInt(address)).* = @floatCast(value),
        else => unreachable,
    }
}

fn element_address(desc: *const node.TensorDesc, flat: usize) usize {
    var rest = flat;
    var address: usize = @intCast(desc.data);
    for (0..node.dims_max) |d| {
        const extent: usize = @intCast(desc.ne[d]);
        address += (rest % extent) * @as(usize, @intCast(desc.nb[d]));
        rest /= extent;
    }
    return address;
}

fn expect_math(comptime kind: unary.Kind, dtype: DType, ne: t.Shape, layout_src: t.Layout, layout_dst: t.Layout, random: std.Random) !void {
    const op: Op = @field(Op, @tagName(kind));
    var src = try t.TestTensor.init(dtype, ne, layout_src);
    defer src.deinit();
    var dst = try t.TestTensor.init(dtype, ne, layout_dst);
    defer dst.deinit();
    fill(op, &src, random);
    const p0: f32 = if (kind == .clamp) -0.5 else 0.125;
    const p1: f32 = 0.75;
    const reference = try allocator.alloc(f64, src.count());
    defer allocator.free(reference);
    for (reference, 0..) |*value, flat| value.* = unary.apply_scalar(kind, src.value_at(flat), p0, p1);
    var n = t.make_node(op, dst.desc, &.{src.desc});
    n.params[0] = @bitCast(p0);
    n.params[1] = @bitCast(p1);
    try testing.expectEqual(node.Status.ok, validate.validate_node(&n).status);
    const buffers = [_][]align(64) u8{ src.memory, dst.memory };
    try t.expect_node(&n, &buffers, 1, reference, tolerance(dtype));
}

test "unary math ops match the float64 scalar reference on f32 and f16, any layout" {
    var prng = std.Random.DefaultPrng.init(25);
    inline for (@typeInfo(unary.Kind).@"enum".fields) |field| {
        const kind: unary.Kind = @enumFromInt(field.value);
        for ([_]DType{ .f32, .f16 }) |dtype| {
            for (t.shapes) |ne| {
                for (t.layouts) |layout| {
                    try expect_math(kind, dtype, ne, layout, .contiguous, prng.random());
                    try expect_math(kind, dtype, ne, .contiguous, layout, prng.random());
                }
            }
        }
    }
}

test "unary math ops refuse mixed dtypes, i32 and shape mismatches" {
    var a = try t.TestTensor.init(.f32, .{ 7, 3, 1, 1 }, .contiguous);
    defer a.deinit();
    var b = try t.TestTensor.init(.f16, .{ 7, 3, 1, 1 }, .contiguous);
    defer b.deinit();
    var c = try t.TestTensor.init(.i32, .{ 7, 3, 1, 1 }, .contiguous);
    defer c.deinit();
    var d = try t.TestTensor.init(.f32, .{ 3, 7, 1, 1 }, .contiguous);
    defer d.deinit();
    try testing.expectEqual(node.Status.unsupported, validate.validate_node(&t.make_node(.tanh, b.desc, &.{a.desc})).status);
    try testing.expectEqual(node.Status.unsupported, validate.validate_node(&t.make_node(.abs, c.desc, &.{c.desc})).status);
    try testing.expectEqual(node.Status.shape_mismatch, validate.validate_node(&t.make_node(.exp, d.desc, &.{a.desc})).status);
    try testing.expectEqual(node.Status.unsupported, validate.validate_node(&t.make_node(.argmax, a.desc, &.{a.desc})).status);
    try testing.expectEqual(node.Status.unsupported, validate.validate_node(&t.make_node(.count_equal, c.desc, &.{ a.desc, a.desc })).status);
}

const RowOp = enum { sum_rows, max_rows, min_rows, argmax, cumsum };

fn expect_rows(comptime which: RowOp, dtype: DType, ne: t.Shape, layout: t.Layout, random: std.Random) !void {
    var src = try t.TestTensor.init(dtype, ne, layout);
    defer src.deinit();
    src.fill_random(random, 2);
    const out_ne: t.Shape = switch (which) {
        .cumsum => ne,
        .argmax => .{ ne[1], ne[2], ne[3], 1 },
        else => .{ 1, ne[1], ne[2], ne[3] },
    };
    const out_dtype: DType = if (which == .argmax) .i32 else dtype;
    var dst = try t.TestTensor.init(out_dtype, out_ne, .contiguous);
    defer dst.deinit();
    const count: usize = @intCast(out_ne[0] * out_ne[1] * out_ne[2] * out_ne[3]);
    const reference = try allocator.alloc(f64, count);
    defer allocator.free(reference);
    const row_length: usize = @intCast(ne[0]);
    const rows = src.count() / row_length;
    for (0..rows) |row| {
        var total: f64 = 0;
        var best: f64 = if (which == .min_rows) std.math.inf(f64) else -std.math.inf(f64);
        var best_index: usize = 0;
        for (0..row_length) |i| {
            const x = src.value_at(row * row_length + i);
            total += x;
            if (which == .cumsum) reference[row * row_length + i] = total;
            if ((which == .min_rows and x < best) or (which != .min_rows and x > best)) {
                best = x;
                best_index = i;
            }
        }
        switch (which) {
            .sum_rows => reference[row] = total,
            .max_rows, .min_rows => reference[row] = best,
            .argmax => reference[row] = @floatFromInt(best_index),
            .cumsum => {},
        }
    }
    const op: Op = @field(Op, @tagName(which));
    const n = t.make_node(op, dst.desc, &.{src.desc});
    try testing.expectEqual(node.Status.ok, validate.validate_node(&n).status);
    const buffers = [_][]align(64) u8{ src.memory, dst.memory };
    const exact = which == .argmax or which == .max_rows or which == .min_rows;
    try t.expect_node(&n, &buffers, 1, reference, if (exact) 0 else tolerance(dtype));
}

test "row reductions and cumsum match float64 on f32 and f16, any layout and thread count" {
    var prng = std.Random.DefaultPrng.init(50);
    inline for (@typeInfo(RowOp).@"enum".fields) |field| {
        const which: RowOp = @enumFromInt(field.value);
        for ([_]DType{ .f32, .f16 }) |dtype| {
            for (t.shapes) |ne| {
                for (t.layouts) |layout| try expect_rows(which, dtype, ne, layout, prng.random());
            }
        }
    }
}

test "count_equal counts equal i32 elements into an i64 on real threads, any layout" {
    var prng = std.Random.DefaultPrng.init(54);
    const random = prng.random();
    for (t.shapes) |ne| {
        for (t.layouts) |layout| {
            var a = try t.TestTensor.init(.i32, ne, layout);
            defer a.deinit();
            var b = try t.TestTensor.init(.i32, ne, .contiguous);
            defer b.deinit();
            var dst = try t.TestTensor.init(.i64, .{ 1, 1, 1, 1 }, .contiguous);
            defer dst.deinit();
            var expected: f64 = 0;
            for (0..a.count()) |flat| {
                const x: i32 = random.intRangeAtMost(i32, 0, 2);
                const y: i32 = random.intRangeAtMost(i32, 0, 2);
                @as(*align(1) i32, @ptrFromInt(element_address(&a.desc, flat))).* = x;
                @as(*align(1) i32, @ptrFromInt(element_address(&b.desc, flat))).* = y;
                if (x == y) expected += 1;
            }
            const n = t.make_node(.count_equal, dst.desc, &.{ a.desc, b.desc });
            const buffers = [_][]align(64) u8{ a.memory, b.memory, dst.memory };
            try t.expect_node(&n, &buffers, 2, &.{expected}, 0);
        }
    }
}

test "binary ops on f16 match float64 with every broadcast form, strides and in-place dst" {
    var prng = std.Random.DefaultPrng.init(16);
    const random = prng.random();
    const ne: t.Shape = .{ 33, 6, 2, 3 };
    const forms = [_]t.Shape{ ne, .{ 1, 1, 1, 1 }, .{ 11, 3, 1, 3 }, .{ 33, 1, 2, 1 }, .{ 1, 6, 1, 1 } };
    for ([_]Op{ .add, .sub, .mul, .div }) |op| {
        for (forms) |ne_b| {
            for (t.layouts) |layout| {
                for ([_]bool{ false, true }) |in_place| {
                    var a = try t.TestTensor.init(.f16, ne, layout);
                    defer a.deinit();
                    var b = try t.TestTensor.init(.f16, ne_b, .contiguous);
                    defer b.deinit();
                    var dst = try t.TestTensor.init(.f16, ne, .contiguous);
                    defer dst.deinit();
                    a.fill_random(random, 2);
                    b.fill_random(random, 2);
                    const reference = try allocator.alloc(f64, a.count());
                    defer allocator.free(reference);
                    for (reference, 0..) |*value, flat| {
                        var rest = flat;
                        var flat_b: usize = 0;
                        var stride_b: usize = 1;
                        for (0..node.dims_max) |d| {
                            const extent: usize = @intCast(ne[d]);
                            const extent_b: usize = @intCast(ne_b[d]);
                            flat_b += ((rest % extent) % extent_b) * stride_b;
                            stride_b *= extent_b;
                            rest /= extent;
                        }
                        const x = a.value_at(flat);
                        const y = b.value_at(flat_b);
                        value.* = switch (op) {
                            .add => x + y,
                            .sub => x - y,
                            .mul => x * y,
                            .div => x / y,
                            else => unreachable,
                        };
                    }
                    const n = t.make_node(op, if (in_place) a.desc else dst.desc, &.{ a.desc, b.desc });
                    try testing.expectEqual(node.Status.ok, validate.validate_node(&n).status);
                    const buffers = [_][]align(64) u8{ a.memory, b.memory, dst.memory };
                    try t.expect_node(&n, &buffers, if (in_place) 0 else 2, reference, tolerance(.f16));
                }
            }
        }
    }
}

test "binary ops refuse an f32 src0 with an f16 src1 (ggml-cpu takes only f16 with f32)" {
    var a = try t.TestTensor.init(.f32, .{ 7, 3, 1, 1 }, .contiguous);
    defer a.deinit();
    var b = try t.TestTensor.init(.f16, .{ 7, 3, 1, 1 }, .contiguous);
    defer b.deinit();
    try testing.expectEqual(node.Status.unsupported, validate.validate_node(&t.make_node(.add, a.desc, &.{ a.desc, b.desc })).status);
    try testing.expectEqual(node.Status.unsupported, validate.validate_node(&t.make_node(.mul, b.desc, &.{ a.desc, b.desc })).status);
    try testing.expectEqual(node.Status.ok, validate.validate_node(&t.make_node(.mul, b.desc, &.{ b.desc, a.desc })).status);
    try testing.expectEqual(node.Status.ok, validate.validate_node(&t.make_node(.sub, a.desc, &.{ b.desc, a.desc })).status);
}

test {
    // The vector math behind log, sin, cos and elu, checked against f64 in its own tests.
    _ = @import("vec_math.zig");
}
