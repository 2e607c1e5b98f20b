//! Tests of the shape and indexing kernels (indexing.zig, sort.zig) against scalar references
//! written here element by element from ggml's definitions: f32, f16 and i32 values, odd sizes,
//! contiguous and strided (gaps between elements and rows) layouts, 1, 2 and 3 threads (results
//! bitwise equal), and no write outside dst's elements. Moving ops must be exact.

const std = @import("std");
const node = @import("../node.zig");
const validate = @import("../validate.zig");
const common = @import("common.zig");
const indexing = @import("indexing.zig");
const kernel_tests = @import("tests.zig");

const testing = std.testing;
const allocator = testing.allocator;
const Node = node.Node;
const Op = node.Op;
const DType = node.DType;
const TensorDesc = node.TensorDesc;
const Shape = [node.dims_max]i64;
const thread_counts = [_]u32{ 1, 2, 3 };

const Layout = enum { contiguous, strided };

/// A test tensor in its own allocation, filled with 0xFF (NaN, -1) around and between elements.
const Buffer = struct {
    memory: []align(64) u8,
    desc: TensorDesc,

    fn init(dtype: DType, ne: Shape, layout: Layout) !Buffer {
        const size: i64 = @intCast(dtype.size_bytes());
        var nb: Shape = undefined;
        nb[0] = if (layout == .strided) 2 * size else size;
        for (1..node.dims_max) |d| {
            nb[d] = nb[d - 1] * ne[d - 1] + (if (layout == .strided) size * @as(i64, @intCast(d)) else 0);
        }
        var extent: i64 = size;
        for (0..node.dims_max) |d| extent += (ne[d] - 1) * nb[d];
        const memory = try allocator.alignedAlloc(u8, .@"64", @intCast(extent + 8));
        @memset(memory, 0xFF);
        return .{
            .memory = memory,
            .desc = .{
                // 4 bytes in: not 64-byte aligned, but aligned for its elements.
                .data = @intFromPtr(memory.ptr) + 4,
                .ne = ne,
                .nb = nb,
                .dtype = @intFromEnum(dtype),
                .reserved = 0,
            },
        };
    }

    fn deinit(self: *Buffer) void {
        allocator.free(self.memory);
    }

    fn count(self: *const Buffer) usize {
        return @intCast(self.desc.element_count());
    }

    fn address(self: *const Buffer, p: [4]usize) usize {
        var at: usize = @intCast(self.desc.data);
        for (0..node.dims_max) |d| at += p[d] * @as(usize, @intCast(self.desc.nb[d]));
        return at;
    }

    fn get(self: *const Buffer, p: [4]usize) f64 {
        const at = self.address(p);
        return switch (@as(DType, @enumFromInt(self.desc.dtype))) {
            .f32 => common.load_f32(at),
            .f16 => common.load_f16(at),
            .i32 => @floatFromInt(@as(i32, @bitCast(common.load_u32(at)))),
            else => unreachable,
        };
    }

    fn set(self: *const Buffer, p: [4]usize, value: f64) void {
        const at = self.address(p);
        switch (@as(DType, @enumFromInt(self.desc.dtype))) {
            .f32 => common.store_f32(at, @floatCast(value)),
            .f16 => common.store_f16(at, @floatCast(value)),
            .i32 => common.store_u32(at, @bitCast(@as(i32, @intFromFloat(value)))),
            else => unreachable,
        }
    }

    fn fill_random(self: *const Buffer, random: std.Random) void {
        for (0..self.count()) |flat| {
            const p = position(self.desc.ne, flat);
            const value: f64 = if (self.desc.dtype == @intFromEnum(DType.i32))
                @floatFromInt(random.intRangeLessThan(i32, -1000, 1000))
            else
                random.float(f32) * 4 - 2;
            self.set(p, value);
        }
    }
};

fn position(ne: Shape, flat: usize) [4]usize {
    var p: [4]usize = undefined;
    var rest = flat;
    for (0..node.dims_max) |d| {
        const extent: usize = @intCast(ne[d]);
        p[d] = rest % extent;
        rest /= extent;
    }
    return p;
}

/// tests.zig's node with `params` (f32 slots) set.
fn make_node(op: Op, dst: TensorDesc, sources: []const TensorDesc, params: []const f32) Node {
    var n = kernel_tests.make_node(op, dst, sources);
    for (params, 0..) |p, i| n.params[i] = @bitCast(p);
    return n;
}

const run = kernel_tests.run;

/// Checks the node for every thread count: dst equals `reference` (flat logical order) within
/// `tolerance` (0: exactly, NaN and infinities included), bytes equal across thread counts and
/// no byte outside dst's elements changes.
fn expect_node(n: *const Node, dst: *const Buffer, reference: []const f64, tolerance: f64) !void {
    try testing.expectEqual(node.Status.ok, validate.validate_node(n).status);
    const original = try allocator.dupe(u8, dst.memory);
    defer allocator.free(original);
    const first = try allocator.alloc(u8, dst.memory.len);
    defer allocator.free(first);
    const size = @as(DType, @enumFromInt(dst.desc.dtype)).size_bytes();
    for (thread_counts, 0..) |threads, attempt| {
        @memcpy(dst.memory, original);
        try testing.expectEqual(node.Status.ok, try run(n, threads));
        for (reference, 0..) |want, flat| {
            const got = dst.get(position(dst.desc.ne, flat));
            const ok = if (std.math.isNan(want)) std.math.isNan(got) else if (tolerance == 0) got == want else @abs(got - want) <= tolerance * @max(1.0, @abs(want));
            if (!ok) {
                std.debug.print("element {d}: got {d}, want {d}\n", .{ flat, got, want });
                return error.TestValueMismatch;
            }
        }
        if (attempt == 0) @memcpy(first, dst.memory) else try testing.expectEqualSlices(u8, first, dst.memory);
    }
    // Bytes outside dst's elements keep their 0xFF.
    var owned = try allocator.alloc(bool, dst.memory.len);
    defer allocator.free(owned);
    @memset(owned, false);
    for (0..dst.count()) |flat| {
        const at = dst.address(position(dst.desc.ne, flat)) - @intFromPtr(dst.memory.ptr);
        @memset(owned[at .. at + size], true);
    }
    for (dst.memory, owned) |byte, mine| if (!mine) try testing.expectEqual(@as(u8, 0xFF), byte);
}

/// The reference value of dst element `flat` in the dtype's rounding (f16: one rounding).
fn rounded(dtype: DType, value: f64) f64 {
    return switch (dtype) {
        .f16 => @floatCast(@as(f16, @floatCast(value))),
        .f32 => @floatCast(@as(f32, @floatCast(value))),
        else => value,
    };
}

const plain = [_]DType{ .f32, .f16, .i32 };
const layouts = [_]Layout{ .contiguous, .strided };

test "concat along each dim matches ggml's element rule" {
    var prng = std.Random.DefaultPrng.init(70);
    for (plain) |dtype| for (layouts) |layout| for (0..4) |dim| {
        const ne_a: Shape = .{ 5, 3, 2, 2 };
        var ne_b = ne_a;
        ne_b[dim] = if (dim == 0) 33 else 1;
        var ne_d = ne_a;
        ne_d[dim] += ne_b[dim];
        var a = try Buffer.init(dtype, ne_a, layout);
        defer a.deinit();
        var b = try Buffer.init(dtype, ne_b, .contiguous);
        defer b.deinit();
        var d = try Buffer.init(dtype, ne_d, layout);
        defer d.deinit();
        a.fill_random(prng.random());
        b.fill_random(prng.random());
        const reference = try allocator.alloc(f64, d.count());
        defer allocator.free(reference);
        for (reference, 0..) |*value, flat| {
            var p = position(ne_d, flat);
            if (p[dim] < ne_a[dim]) {
                value.* = a.get(p);
            } else {
                p[dim] -= @intCast(ne_a[dim]);
                value.* = b.get(p);
            }
        }
        const n = make_node(.concat, d.desc, &.{ a.desc, b.desc }, &.{@floatFromInt(dim)});
        try expect_node(&n, &d, reference, 0);
    };
}

test "pad, pad_reflect_1d and roll move elements as ggml defines them" {
    var prng = std.Random.DefaultPrng.init(71);
    for (plain) |dtype| for (layouts) |layout| {
        const ne: Shape = .{ 7, 4, 3, 2 };
        var a = try Buffer.init(dtype, ne, layout);
        defer a.deinit();
        a.fill_random(prng.random());
        // pad_ext: left 2, 1, 0, 1; right 1, 0, 2, 1.
        const left = [4]usize{ 2, 1, 0, 1 };
        const right = [4]usize{ 1, 0, 2, 1 };
        var ne_pad: Shape = undefined;
        for (0..4) |d| ne_pad[d] = ne[d] + @as(i64, @intCast(left[d] + right[d]));
        var padded = try Buffer.init(dtype, ne_pad, layout);
        defer padded.deinit();
        const want_pad = try allocator.alloc(f64, padded.count());
        defer allocator.free(want_pad);
        for (want_pad, 0..) |*value, flat| {
            const p = position(ne_pad, flat);
            var q: [4]usize = undefined;
            var inside = true;
            for (0..4) |d| {
                inside = inside and p[d] >= left[d] and p[d] - left[d] < ne[d];
                q[d] = if (p[d] >= left[d]) p[d] - left[d] else 0;
            }
            value.* = if (inside) a.get(q) else 0;
        }
        const pad_node = make_node(.pad, padded.desc, &.{a.desc}, &.{ 2, 1, 1, 0, 0, 2, 1, 1 });
        try expect_node(&pad_node, &padded, want_pad, 0);

        // pad_reflect_1d: p0 = 6, p1 = 3 (each < ne0 = 7).
        var reflected = try Buffer.init(dtype, .{ 16, 4, 3, 2 }, layout);
        defer reflected.deinit();
        const want_reflect = try allocator.alloc(f64, reflected.count());
        defer allocator.free(want_reflect);
        for (want_reflect, 0..) |*value, flat| {
            var p = position(reflected.desc.ne, flat);
            const j: i64 = @as(i64, @intCast(p[0])) - 6;
            p[0] = @intCast(if (j < 0) -j else if (j >= 7) 12 - j else j);
            value.* = a.get(p);
        }
        const reflect_node = make_node(.pad_reflect_1d, reflected.desc, &.{a.desc}, &.{ 6, 3 });
        try expect_node(&reflect_node, &reflected, want_reflect, 0);

        // roll by (3, -1, 2, -1).
        const shifts = [4]i64{ 3, -1, 2, -1 };
        var rolled = try Buffer.init(dtype, ne, layout);
        defer rolled.deinit();
        const want_roll = try allocator.alloc(f64, rolled.count());
        defer allocator.free(want_roll);
        for (want_roll, 0..) |*value, flat| {
            var p = position(ne, flat);
            for (0..4) |d| p[d] = @intCast(@mod(@as(i64, @intCast(p[d])) - shifts[d], ne[d]));
            value.* = a.get(p);
        }
        const roll_node = make_node(.roll, rolled.desc, &.{a.desc}, &.{ 3, -1, 2, -1 });
        try expect_node(&roll_node, &rolled, want_roll, 0);
    };
}

test "tri, diag_mask_inf and fill keep, mask or set each element" {
    var prng = std.Random.DefaultPrng.init(72);
    for (plain) |dtype| for (layouts) |layout| {
        const ne: Shape = .{ 9, 9, 2, 1 };
        var a = try Buffer.init(dtype, ne, layout);
        defer a.deinit();
        a.fill_random(prng.random());
        var d = try Buffer.init(dtype, ne, layout);
        defer d.deinit();
        const reference = try allocator.alloc(f64, d.count());
        defer allocator.free(reference);
        for ([_]indexing.TriType{ .upper_diag, .upper, .lower_diag, .lower }) |kind| {
            for (reference, 0..) |*value, flat| {
                const p = position(ne, flat);
                value.* = if (indexing.tri_keeps(kind, p[0], p[1])) a.get(p) else 0;
            }
            const n = make_node(.tri, d.desc, &.{a.desc}, &.{@floatFromInt(@intFromEnum(kind))});
            try expect_node(&n, &d, reference, 0);
        }
        if (dtype == .i32) continue;
        for ([_]usize{ 0, 2, 20 }) |n_past| {
            for (reference, 0..) |*value, flat| {
                const p = position(ne, flat);
                value.* = if (p[0] > n_past + p[1]) -std.math.inf(f64) else a.get(p);
            }
            const n = make_node(.diag_mask_inf, d.desc, &.{a.desc}, &.{@floatFromInt(n_past)});
            try expect_node(&n, &d, reference, 0);
        }
        @memset(reference, rounded(dtype, 0.1));
        const n = make_node(.fill, d.desc, &.{a.desc}, &.{0.1});
        try expect_node(&n, &d, reference, 0);
    };
}

test "repeat_back sums the tiles of src0 in f64, rounded once" {
    var prng = std.Random.DefaultPrng.init(73);
    for ([_]DType{ .f32, .f16 }) |dtype| for (layouts) |layout| {
        const ne_src: Shape = .{ 35, 6, 4, 2 };
        var a = try Buffer.init(dtype, ne_src, layout);
        defer a.deinit();
        a.fill_random(prng.random());
        for ([_]Shape{ .{ 7, 3, 2, 1 }, .{ 1, 1, 1, 1 }, .{ 35, 6, 4, 2 } }) |ne| {
            var d = try Buffer.init(dtype, ne, layout);
            defer d.deinit();
            const reference = try allocator.alloc(f64, d.count());
            defer allocator.free(reference);
            @memset(reference, 0);
            for (0..a.count()) |flat| {
                const p = position(ne_src, flat);
                var q: [4]usize = undefined;
                for (0..4) |k| q[k] = p[k] % @as(usize, @intCast(ne[k]));
                const at = q[0] + @as(usize, @intCast(ne[0])) * (q[1] + @as(usize, @intCast(ne[1])) * (q[2] + @as(usize, @intCast(ne[2])) * q[3]));
                reference[at] += a.get(p);
            }
            for (reference) |*value| value.* = rounded(dtype, value.*);
            const n = make_node(.repeat_back, d.desc, &.{a.desc}, &.{});
            // f64 sums in another order; f16 goes through f32 (a double rounding).
            try expect_node(&n, &d, reference, if (dtype == .f32) 2e-7 else 1e-3);
        }
    };
}

test "argsort and top_k give the stable order of each row, NaN above every number" {
    var prng = std.Random.DefaultPrng.init(74);
    for ([_]DType{ .f32, .f16 }) |dtype| for (layouts) |layout| {
        const ne: Shape = .{ 37, 5, 2, 1 };
        var a = try Buffer.init(dtype, ne, layout);
        defer a.deinit();
        a.fill_random(prng.random());
        // Ties and NaN in row 0.
        a.set(.{ 3, 0, 0, 0 }, a.get(.{ 10, 0, 0, 0 }));
        a.set(.{ 5, 0, 0, 0 }, std.math.nan(f64));
        for ([_]u32{ 0, 1 }) |order| {
            var d = try Buffer.init(.i32, ne, .contiguous);
            defer d.deinit();
            const reference = try allocator.alloc(f64, d.count());
            defer allocator.free(reference);
            // Reference: the rank of each element among its row (strictly before, or equal
            // with a lower column) is where its column goes.
            for (0..d.count()) |flat| {
                const p = position(ne, flat);
                const x = a.get(p);
                var rank: usize = 0;
                for (0..37) |j| {
                    const y = a.get(.{ j, p[1], p[2], p[3] });
                    if (before(y, x, order == 1) or (j < p[0] and !before(x, y, order == 1))) rank += 1;
                }
                reference[rank + 37 * (p[1] + 5 * p[2])] = @floatFromInt(p[0]);
            }
            const n = make_node(.argsort, d.desc, &.{a.desc}, &.{@floatFromInt(order)});
            try expect_node(&n, &d, reference, 0);
            if (order == 0) continue;
            // top_k: the first k of the descending order.
            var top = try Buffer.init(.i32, .{ 4, 5, 2, 1 }, layout);
            defer top.deinit();
            const want = try allocator.alloc(f64, top.count());
            defer allocator.free(want);
            for (want, 0..) |*value, flat| {
                const p = position(top.desc.ne, flat);
                value.* = reference[p[0] + 37 * (p[1] + 5 * p[2])];
            }
            const k = make_node(.top_k, top.desc, &.{a.desc}, &.{4});
            try expect_node(&k, &top, want, 0);
        }
    };
}

fn before(x: f64, y: f64, descending: bool) bool {
    if (descending) return x > y or (std.math.isNan(x) and !std.math.isNan(y));
    return x < y or (!std.math.isNan(x) and std.math.isNan(y));
}

test "arange is start + step * i in f32" {
    var d = try Buffer.init(.f32, .{ 27, 1, 1, 1 }, .strided);
    defer d.deinit();
    const reference = try allocator.alloc(f64, 27);
    defer allocator.free(reference);
    const start: f32 = -1;
    const step: f32 = 0.3;
    for (reference, 0..) |*value, i| value.* = start + step * @as(f32, @floatFromInt(i));
    const n = make_node(.arange, d.desc, &.{}, &.{ -1, 7, 0.3 });
    try expect_node(&n, &d, reference, 0);
}

test "validation refuses what the kernels cannot run, naming the rule" {
    var a = try Buffer.init(.f32, .{ 4, 3, 1, 1 }, .contiguous);
    defer a.deinit();
    var b = try Buffer.init(.f32, .{ 9, 3, 1, 1 }, .contiguous);
    defer b.deinit();
    var h = try Buffer.init(.f16, .{ 4, 3, 1, 1 }, .contiguous);
    defer h.deinit();
    const cases = [_]struct { Node, node.Status, []const u8 }{
        .{ make_node(.pad, b.desc, &.{a.desc}, &.{ 1, 1 }), .shape_mismatch, "pad: dst.ne[d] != src0.ne[d] + left + right" },
        .{ make_node(.pad, a.desc, &.{a.desc}, &.{-1}), .invalid_argument, "pad: params[2d] (left pad) must be a whole number >= 0" },
        .{ make_node(.concat, b.desc, &.{ a.desc, h.desc }, &.{0}), .unsupported, "concat: src1.dtype != src0.dtype" },
        .{ make_node(.concat, b.desc, &.{ a.desc, a.desc }, &.{0.5}), .invalid_argument, "concat: params[0] (dim) must be 0, 1, 2 or 3" },
        .{ make_node(.roll, a.desc, &.{a.desc}, &.{4}), .invalid_argument, "roll: params[d] (shift) must be a whole number with |shift| < ne[d]" },
        .{ make_node(.pad_reflect_1d, b.desc, &.{a.desc}, &.{ 4, 1 }), .invalid_argument, "pad_reflect_1d: params[0] (p0) must be in [0, src0.ne[0])" },
        .{ make_node(.argsort, a.desc, &.{a.desc}, &.{0}), .unsupported, "argsort: dst must be i32" },
        .{ make_node(.top_k, h.desc, &.{a.desc}, &.{}), .unsupported, "top_k: dst must be i32" },
        .{ make_node(.tri, a.desc, &.{a.desc}, &.{4}), .invalid_argument, "tri: params[0] (type) must be 0, 1, 2 or 3" },
        .{ make_node(.fill, h.desc, &.{a.desc}, &.{1}), .unsupported, "fill: dst.dtype != src0.dtype" },
        .{ make_node(.repeat_back, a.desc, &.{b.desc}, &.{}), .shape_mismatch, "repeat_back: dst.ne[d] does not divide src0.ne[d]" },
        .{ make_node(.arange, a.desc, &.{}, &.{ 0, 4, 1 }), .shape_mismatch, "arange: dst.ne != [ceil((stop - start) / step), 1, 1, 1]" },
        .{ make_node(.arange, a.desc, &.{}, &.{ 0, 4, -1 }), .invalid_argument, "arange: (stop - start) / step must be positive" },
    };
    for (cases) |case| {
        const verdict = validate.validate_node(&case[0]);
        try testing.expectEqual(case[1], verdict.status);
        try testing.expectEqualStrings(case[2], verdict.reason);
        try testing.expectEqual(case[1], try run(&case[0], 2));
    }
}
