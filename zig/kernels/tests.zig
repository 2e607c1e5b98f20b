//! Kernel tests. Each test builds nodes over pseudo-random non-zero data in odd sizes (1, 7, 33,
//! 1000+) and several layouts (contiguous, permuted, padded with gaps between elements), runs
//! them through `dispatch.compute_node` with 1, 2 and 3 threads and checks three things:
//! - values against a float64 scalar reference, with the error normalized by the largest
//!   reference magnitude: 1e-5 for f32 math, 1e-3 where f16 rounding or f16 inputs enter, 0 for
//!   pure copies;
//! - the bytes of every buffer are identical for every thread count;
//! - no byte outside dst's elements changes (buffers start as 0xFF: NaN in f32 and f16, -1 in
//!   i32, so a stray read shows up as NaN and a stray write as a changed byte).
//! Kernels without phases run their threads one after another with a no-op barrier; kernels that
//! call the barrier (`dispatch.uses_barrier`) run on real threads with a real barrier.

const std = @import("std");
const node = @import("../node.zig");
const validate = @import("../validate.zig");
const dispatch = @import("dispatch.zig");
const common = @import("common.zig");

const testing = std.testing;
const allocator = testing.allocator;
const Node = node.Node;
const Op = node.Op;
const DType = node.DType;
const TensorDesc = node.TensorDesc;
pub const Shape = [node.dims_max]i64;

const tolerance_f32 = 1e-5;
const tolerance_f16 = 1e-3;
const thread_counts = [_]u32{ 1, 2, 3 };
const buffers_max = 4;

// ---------------------------------------------------------------------------------------------
// Test tensors.

pub const Layout = enum { contiguous, permuted, strided };
pub const layouts = [_]Layout{ .contiguous, .permuted, .strided };

pub const TestTensor = struct {
    memory: []align(64) u8,
    desc: TensorDesc,

    pub fn init(dtype: DType, ne: Shape, layout: Layout) !TestTensor {
        const size: i64 = @intCast(dtype.size_bytes());
        var nb: Shape = undefined;
        switch (layout) {
            .contiguous => {
                nb[0] = size;
                for (1..node.dims_max) |d| nb[d] = nb[d - 1] * ne[d - 1];
            },
            .permuted => {
                // Physical order innermost first: dims 1, 3, 0, 2 (rows are not contiguous).
                var stride = size;
                for ([_]usize{ 1, 3, 0, 2 }) |d| {
                    nb[d] = stride;
                    stride *= ne[d];
                }
            },
            .strided => {
                nb[0] = 2 * size;
                nb[1] = nb[0] * ne[0] + 3 * size;
                nb[2] = nb[1] * ne[1] + 5 * size;
                nb[3] = nb[2] * ne[2] + 7 * size;
            },
        }
        var extent: i64 = size;
        for (0..node.dims_max) |d| extent += (ne[d] - 1) * nb[d];
        // One element of slack in front: data is not 64-byte aligned, as in a real arena.
        const memory = try allocator.alignedAlloc(u8, .@"64", @intCast(extent + 2 * size));
        @memset(memory, 0xFF);
        return .{ .memory = memory, .desc = .{
            .data = @intFromPtr(memory.ptr) + @as(u64, @intCast(size)),
            .ne = ne,
            .nb = nb,
            .dtype = @intFromEnum(dtype),
            .reserved = 0,
        } };
    }

    pub fn deinit(self: *TestTensor) void {
        allocator.free(self.memory);
    }

    pub fn count(self: *const TestTensor) usize {
        return @intCast(self.desc.element_count());
    }

    pub fn fill_random(self: *TestTensor, random: std.Random, magnitude: f32) void {
        for (0..self.count()) |flat| set(&self.desc, flat, random_value(random, magnitude));
    }

    pub fn value_at(self: *const TestTensor, flat: usize) f64 {
        return get(&self.desc, flat);
    }
};

/// Uniform in [-magnitude, -magnitude/40] U [magnitude/40, magnitude]: never zero.
fn random_value(random: std.Random, magnitude: f32) f64 {
    const value = magnitude * (0.025 + 0.975 * random.float(f32));
    return if (random.boolean()) value else -value;
}

fn element_address(desc: *const TensorDesc, flat: usize) usize {
    var rest = flat;
    var address: usize = @intCast(desc.data);
    for (0..node.dims_max) |d| {
        const extent: usize = @intCast(desc.ne[d]);
        address += (rest % extent) * @as(usize, @intCast(desc.nb[d]));
        rest /= extent;
    }
    std.debug.assert(rest == 0);
    return address;
}

pub fn get(desc: *const TensorDesc, flat: usize) f64 {
    const address = element_address(desc, flat);
    return switch (@as(DType, @enumFromInt(desc.dtype))) {
        .f32 => common.load_f32(address),
        .f16 => common.load_f16(address),
        .i32 => @floatFromInt(@as(i32, @bitCast(common.load_u32(address)))),
        .i64 => @floatFromInt(@as(*align(1) const i64, @ptrFromInt(address)).*),
        else => unreachable, // no kernel takes bf16 or block types yet
    };
}

/// Writes element `flat` (logical order) of `desc`; for tests that fill tensors themselves.
pub fn set_value(desc: *const TensorDesc, flat: usize, value: f64) void {
    set(desc, flat, value);
}

fn set(desc: *const TensorDesc, flat: usize, value: f64) void {
    const address = element_address(desc, flat);
    switch (@as(DType, @enumFromInt(desc.dtype))) {
        .f32 => common.store_f32(address, @floatCast(value)),
        .f16 => common.store_f16(address, @floatCast(value)),
        .i32 => common.store_u32(address, @bitCast(@as(i32, @intFromFloat(value)))),
        .i64 => @as(*align(1) i64, @ptrFromInt(address)).* = @intFromFloat(value),
        else => unreachable, // no kernel takes bf16 or block types yet
    }
}

/// (i0, i1, i2, i3) of a flat index in row-major logical order.
fn coordinates(ne: Shape, flat: usize) [node.dims_max]usize {
    var result: [node.dims_max]usize = undefined;
    var rest = flat;
    for (0..node.dims_max) |d| {
        const extent: usize = @intCast(ne[d]);
        result[d] = rest % extent;
        rest /= extent;
    }
    return result;
}

fn flat_index(ne: Shape, position: [node.dims_max]usize) usize {
    var flat: usize = 0;
    var d: usize = node.dims_max;
    while (d > 0) {
        d -= 1;
        flat = flat * @as(usize, @intCast(ne[d])) + position[d];
    }
    return flat;
}

pub fn make_node(op: Op, dst: TensorDesc, sources: []const TensorDesc) Node {
    var result: Node = .{
        .op = @intFromEnum(op),
        .src_count = @intCast(sources.len),
        .params = @splat(0),
        .dst = dst,
        .src = std.mem.zeroes([node.sources_max]TensorDesc),
    };
    for (sources, 0..) |source, s| result.src[s] = source;
    return result;
}

// ---------------------------------------------------------------------------------------------
// Running nodes.

const TestBarrier = struct {
    mutex: std.Thread.Mutex = .{},
    condition: std.Thread.Condition = .{},
    thread_count: u32,
    arrived: u32 = 0,
    generation: u64 = 0,

    fn wait(context: *anyopaque) callconv(.c) void {
        const self: *TestBarrier = @ptrCast(@alignCast(context));
        self.mutex.lock();
        defer self.mutex.unlock();
        const generation = self.generation;
        self.arrived += 1;
        if (self.arrived == self.thread_count) {
            self.arrived = 0;
            self.generation += 1;
            self.condition.broadcast();
            return;
        }
        while (generation == self.generation) self.condition.wait(&self.mutex);
    }
};

fn barrier_noop(context: *anyopaque) callconv(.c) void {
    _ = context;
}

fn worker(n: *const Node, work: *const node.Work, status: *node.Status) void {
    status.* = dispatch.compute_node(n, work);
}

/// Runs every thread's share of `n`; all threads must agree on the status.
pub fn run(n: *const Node, thread_count: u32) !node.Status {
    const scratch_size: usize = @intCast(dispatch.work_size(n, thread_count));
    const scratch = try allocator.alignedAlloc(u8, .@"64", @max(scratch_size, 64));
    defer allocator.free(scratch);
    var barrier: TestBarrier = .{ .thread_count = thread_count };
    const threaded = dispatch.uses_barrier(@enumFromInt(n.op));
    var works: [thread_counts.len + 1]node.Work = undefined;
    var statuses: [thread_counts.len + 1]node.Status = undefined;
    var threads: [thread_counts.len + 1]std.Thread = undefined;
    std.debug.assert(thread_count <= works.len);
    for (0..thread_count) |t| {
        works[t] = .{
            .thread_index = @intCast(t),
            .thread_count = thread_count,
            .scratch = scratch.ptr,
            .scratch_size_bytes = scratch_size,
            .barrier_context = &barrier,
            .barrier = if (threaded) TestBarrier.wait else barrier_noop,
        };
        if (threaded) {
            threads[t] = try std.Thread.spawn(.{}, worker, .{ n, &works[t], &statuses[t] });
        } else {
            worker(n, &works[t], &statuses[t]);
        }
    }
    if (threaded) for (threads[0..thread_count]) |thread| thread.join();
    for (statuses[1..thread_count]) |status| try testing.expectEqual(statuses[0], status);
    return statuses[0];
}

/// Checks `n` against `reference` (dst's elements in flat order) for every thread count, that
/// results are bitwise equal across thread counts and that only dst's element bytes change.
/// `buffers` are every test tensor's memory; dst lives in `buffers[dst_buffer]`.
pub fn expect_node(
    n: *const Node,
    buffers: []const []align(64) u8,
    dst_buffer: usize,
    reference: []const f64,
    tolerance: f64,
) !void {
    std.debug.assert(buffers.len <= buffers_max);
    var originals: [buffers_max][]u8 = undefined;
    var firsts: [buffers_max][]u8 = undefined;
    for (buffers, 0..) |buffer, b| {
        originals[b] = try allocator.dupe(u8, buffer);
        firsts[b] = try allocator.dupe(u8, buffer);
    }
    defer for (0..buffers.len) |b| {
        allocator.free(originals[b]);
        allocator.free(firsts[b]);
    };
    const owned = try dst_byte_mask(&n.dst, buffers[dst_buffer]);
    defer allocator.free(owned);
    for (thread_counts, 0..) |thread_count, attempt| {
        for (buffers, 0..) |buffer, b| @memcpy(buffer, originals[b]);
        try testing.expectEqual(node.Status.ok, try run(n, thread_count));
        try expect_close(&n.dst, reference, tolerance);
        for (buffers, 0..) |buffer, b| {
            if (attempt == 0) @memcpy(firsts[b], buffer);
            try testing.expectEqualSlices(u8, firsts[b], buffer);
            for (buffer, 0..) |byte, i| {
                if (b == dst_buffer and owned[i]) continue;
                if (byte != originals[b][i]) return error.TestStrayWrite;
            }
        }
    }
}

fn dst_byte_mask(dst: *const TensorDesc, buffer: []const u8) ![]bool {
    const owned = try allocator.alloc(bool, buffer.len);
    @memset(owned, false);
    const size = @as(DType, @enumFromInt(dst.dtype)).size_bytes();
    for (0..@as(usize, @intCast(dst.element_count()))) |flat| {
        const offset = element_address(dst, flat) - @intFromPtr(buffer.ptr);
        @memset(owned[offset .. offset + size], true);
    }
    return owned;
}

/// |actual - reference| <= tolerance * max|reference| for every element; non-finite references
/// must be matched exactly (NaN by NaN, +-inf by the same infinity).
fn expect_close(dst: *const TensorDesc, reference: []const f64, tolerance: f64) !void {
    try testing.expectEqual(reference.len, @as(usize, @intCast(dst.element_count())));
    var magnitude: f64 = 0;
    for (reference) |value| {
        if (std.math.isFinite(value)) magnitude = @max(magnitude, @abs(value));
    }
    const bound = tolerance * @max(magnitude, 1e-30);
    for (reference, 0..) |expected, flat| {
        const actual = get(dst, flat);
        if (std.math.isNan(expected)) {
            if (!std.math.isNan(actual)) return report(flat, actual, expected);
        } else if (std.math.isInf(expected)) {
            if (actual != expected) return report(flat, actual, expected);
        } else if (!(@abs(actual - expected) <= bound)) {
            return report(flat, actual, expected);
        }
    }
}

fn report(flat: usize, actual: f64, expected: f64) error{TestValueMismatch} {
    std.debug.print("element {d}: got {e}, expected {e}\n", .{ flat, actual, expected });
    return error.TestValueMismatch;
}

// ---------------------------------------------------------------------------------------------
// Shapes.

pub const shapes = [_]Shape{
    .{ 1, 1, 1, 1 },
    .{ 7, 3, 1, 1 },
    .{ 33, 6, 2, 3 },
    .{ 1037, 3, 2, 1 },
    .{ 16, 4, 3, 2 },
    .{ 1, 9, 1, 2 },
};

/// src1 shapes for broadcast tests: full, all ones, and a proper divisor in every dim.
fn broadcast_shapes(ne: Shape) [3]Shape {
    var divided: Shape = undefined;
    for (0..node.dims_max) |d| divided[d] = smallest_proper_divisor_quotient(ne[d]);
    return .{ ne, .{ 1, 1, 1, 1 }, divided };
}

/// ne / p for the smallest prime p dividing ne (1 for ne == 1).
fn smallest_proper_divisor_quotient(ne: i64) i64 {
    var p: i64 = 2;
    while (p * p <= ne) : (p += 1) {
        if (@mod(ne, p) == 0) return @divExact(ne, p);
    }
    return 1;
}

// ---------------------------------------------------------------------------------------------
// Element-wise.

fn binary_reference(op: Op, a: f64, b: f64) f64 {
    return switch (op) {
        .add => a + b,
        .sub => a - b,
        .mul => a * b,
        .div => a / b,
        else => unreachable,
    };
}

fn expect_binary(
    op: Op,
    ne: Shape,
    ne_b: Shape,
    layout_a: Layout,
    layout_b: Layout,
    layout_dst: Layout,
    in_place: bool,
    random: std.Random,
) !void {
    var a = try TestTensor.init(.f32, ne, layout_a);
    defer a.deinit();
    var b = try TestTensor.init(.f32, ne_b, layout_b);
    defer b.deinit();
    var dst = try TestTensor.init(.f32, ne, layout_dst);
    defer dst.deinit();
    a.fill_random(random, 2);
    b.fill_random(random, 2);
    const reference = try allocator.alloc(f64, a.count());
    defer allocator.free(reference);
    for (reference, 0..) |*value, flat| {
        var position = coordinates(ne, flat);
        const value_a = a.value_at(flat);
        for (0..node.dims_max) |d| position[d] %= @intCast(ne_b[d]);
        value.* = binary_reference(op, value_a, b.value_at(flat_index(ne_b, position)));
    }
    const n = make_node(op, if (in_place) a.desc else dst.desc, &.{ a.desc, b.desc });
    try testing.expectEqual(node.Status.ok, validate.validate_node(&n).status);
    const buffers = [_][]align(64) u8{ a.memory, b.memory, dst.memory };
    try expect_node(&n, &buffers, if (in_place) 0 else 2, reference, tolerance_f32);
}

test "binary ops match float64 with broadcasting, strides and in-place dst" {
    var prng = std.Random.DefaultPrng.init(1);
    for ([_]Op{ .add, .sub, .mul, .div }) |op| {
        for (shapes) |ne| {
            for (broadcast_shapes(ne)) |ne_b| {
                for (layouts) |layout| {
                    try expect_binary(
                        op,
                        ne,
                        ne_b,
                        layout,
                        layout,
                        .contiguous,
                        false,
                        prng.random(),
                    );
                    try expect_binary(
                        op,
                        ne,
                        ne_b,
                        .contiguous,
                        layout,
                        .strided,
                        false,
                        prng.random(),
                    );
                }
                try expect_binary(
                    op,
                    ne,
                    ne_b,
                    .strided,
                    .contiguous,
                    .contiguous,
                    true,
                    prng.random(),
                );
                try expect_binary(
                    op,
                    ne,
                    ne_b,
                    .contiguous,
                    .contiguous,
                    .contiguous,
                    true,
                    prng.random(),
                );
            }
        }
    }
}

const gelu_coefficient = @sqrt(2.0 / std.math.pi);

fn unary_reference(op: Op, x: f64, factor: f64) f64 {
    return switch (op) {
        .scale => x * factor,
        .sqr => x * x,
        .sqrt => @sqrt(x),
        .gelu => 0.5 * x * (1 + std.math.tanh(gelu_coefficient * (x + 0.044715 * x * x * x))),
        .silu => x / (1 + @exp(-x)),
        .relu => if (x > 0) x else 0,
        else => unreachable,
    };
}

fn expect_unary(
    op: Op,
    ne: Shape,
    layout_src: Layout,
    layout_dst: Layout,
    magnitude: f32,
    random: std.Random,
) !void {
    var src = try TestTensor.init(.f32, ne, layout_src);
    defer src.deinit();
    var dst = try TestTensor.init(.f32, ne, layout_dst);
    defer dst.deinit();
    src.fill_random(random, magnitude);
    // sqrt of negatives is NaN (as ggml); test it on magnitudes.
    if (op == .sqrt) for (0..src.count()) |flat| set(&src.desc, flat, @abs(src.value_at(flat)));
    const factor: f32 = -0.7;
    const reference = try allocator.alloc(f64, src.count());
    defer allocator.free(reference);
    for (reference, 0..) |*value, flat| value.* = unary_reference(op, src.value_at(flat), factor);
    var n = make_node(op, dst.desc, &.{src.desc});
    n.params[0] = @bitCast(factor);
    try testing.expectEqual(node.Status.ok, validate.validate_node(&n).status);
    const buffers = [_][]align(64) u8{ src.memory, dst.memory };
    try expect_node(&n, &buffers, 1, reference, tolerance_f32);
}

test "unary ops match float64 on odd sizes and strided rows, exp over a wide range" {
    var prng = std.Random.DefaultPrng.init(2);
    for ([_]Op{ .scale, .sqr, .sqrt, .gelu, .silu, .relu }) |op| {
        for (shapes) |ne| {
            for (layouts) |layout| {
                try expect_unary(op, ne, layout, .contiguous, 2, prng.random());
                try expect_unary(op, ne, .contiguous, layout, 2, prng.random());
            }
            // Large magnitudes reach exp's overflow and underflow ends.
            try expect_unary(op, ne, .contiguous, .contiguous, 120, prng.random());
        }
    }
}

test "exp is within 2e-7 relative of float64, with exact infinities, zeros and NaN" {
    var x: f32 = -103.0;
    while (x < 88.7) : (x += 0.0173) {
        const values = common.exp(common.splat(x));
        const expected = @exp(@as(f64, x));
        const actual: f64 = values[0];
        // Below ~-87.3 the result is subnormal: compare absolutely at the subnormal spacing.
        const bound = @max(2e-7 * expected, std.math.floatTrueMin(f32));
        try testing.expect(@abs(actual - expected) <= bound);
    }
    const specials = common.exp(common.splat(-std.math.inf(f32)));
    try testing.expectEqual(@as(f32, 0), specials[0]);
    try testing.expect(std.math.isPositiveInf(common.exp(common.splat(std.math.inf(f32)))[0]));
    try testing.expect(std.math.isPositiveInf(common.exp(common.splat(89.0))[0]));
    try testing.expectEqual(@as(f32, 0), common.exp(common.splat(-200.0))[0]);
    try testing.expect(std.math.isNan(common.exp(common.splat(std.math.nan(f32)))[0]));
    try testing.expectEqual(@as(f32, 1), common.exp(common.splat(0))[0]);
}

test "exp gives the same bits for a lane whatever the other lanes hold (fast and wide paths)" {
    const lanes = common.lanes;
    var prng = std.Random.DefaultPrng.init(7);
    const random = prng.random();
    for (0..2000) |_| {
        var values: [lanes]f32 = undefined;
        for (&values) |*v| v.* = (random.float(f32) - 0.5) * 170;
        values[0] = if (random.boolean()) -std.math.inf(f32) else -150;
        const alone = common.exp(values);
        // One NaN (or a subnormal result) lane sends the whole vector down the wide path.
        var mixed = values;
        mixed[lanes - 1] = if (random.boolean()) std.math.nan(f32) else -95;
        const together = common.exp(mixed);
        try testing.expectEqual(@as(f32, 0), alone[0]);
        for (0..lanes - 1) |lane| {
            try testing.expectEqual(@as(u32, @bitCast(alone[lane])), @as(u32, @bitCast(together[lane])));
        }
    }
}

fn expect_repeat(
    dtype: DType,
    ne_src: Shape,
    factors: Shape,
    layout_src: Layout,
    layout_dst: Layout,
    random: std.Random,
) !void {
    var ne_dst: Shape = undefined;
    for (0..node.dims_max) |d| ne_dst[d] = ne_src[d] * factors[d];
    var src = try TestTensor.init(dtype, ne_src, layout_src);
    defer src.deinit();
    var dst = try TestTensor.init(dtype, ne_dst, layout_dst);
    defer dst.deinit();
    for (0..src.count()) |flat| {
        const value = random_value(random, 100);
        set(&src.desc, flat, if (dtype == .i32) @round(value) else value);
    }
    const reference = try allocator.alloc(f64, dst.count());
    defer allocator.free(reference);
    for (reference, 0..) |*value, flat| {
        var position = coordinates(ne_dst, flat);
        for (0..node.dims_max) |d| position[d] %= @intCast(ne_src[d]);
        value.* = src.value_at(flat_index(ne_src, position));
    }
    const n = make_node(.repeat, dst.desc, &.{src.desc});
    try testing.expectEqual(node.Status.ok, validate.validate_node(&n).status);
    const buffers = [_][]align(64) u8{ src.memory, dst.memory };
    try expect_node(&n, &buffers, 1, reference, 0);
}

test "repeat tiles src0 bit for bit in every dtype and layout" {
    var prng = std.Random.DefaultPrng.init(3);
    const cases = [_][2]Shape{
        .{ .{ 1, 1, 1, 1 }, .{ 7, 3, 2, 1 } },
        .{ .{ 7, 3, 1, 1 }, .{ 3, 1, 2, 2 } },
        .{ .{ 33, 2, 1, 1 }, .{ 1, 3, 1, 1 } },
        .{ .{ 1037, 1, 1, 1 }, .{ 2, 2, 1, 1 } },
        .{ .{ 5, 1, 3, 1 }, .{ 1, 1, 1, 1 } },
    };
    for ([_]DType{ .f32, .f16, .i32 }) |dtype| {
        for (cases) |case| {
            for (layouts) |layout| {
                try expect_repeat(dtype, case[0], case[1], layout, .contiguous, prng.random());
                try expect_repeat(dtype, case[0], case[1], .contiguous, layout, prng.random());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reductions and norms.

fn expect_sum(ne: Shape, layout: Layout, random: std.Random) !void {
    var src = try TestTensor.init(.f32, ne, layout);
    defer src.deinit();
    var dst = try TestTensor.init(.f32, .{ 1, 1, 1, 1 }, .contiguous);
    defer dst.deinit();
    src.fill_random(random, 3);
    var total: f64 = 0;
    for (0..src.count()) |flat| total += src.value_at(flat);
    const n = make_node(.sum, dst.desc, &.{src.desc});
    const buffers = [_][]align(64) u8{ src.memory, dst.memory };
    // The f64 accumulation leaves only the final rounding to f32 (half an ulp of the result).
    try expect_node(&n, &buffers, 1, &.{total}, 1e-7);
}

fn expect_mean(ne: Shape, layout_src: Layout, layout_dst: Layout, random: std.Random) !void {
    var src = try TestTensor.init(.f32, ne, layout_src);
    defer src.deinit();
    var dst = try TestTensor.init(.f32, .{ 1, ne[1], ne[2], ne[3] }, layout_dst);
    defer dst.deinit();
    src.fill_random(random, 3);
    const row_length: usize = @intCast(ne[0]);
    const reference = try allocator.alloc(f64, dst.count());
    defer allocator.free(reference);
    for (reference, 0..) |*value, row| {
        var total: f64 = 0;
        for (0..row_length) |column| total += src.value_at(row * row_length + column);
        value.* = total / @as(f64, @floatFromInt(row_length));
    }
    const n = make_node(.mean, dst.desc, &.{src.desc});
    try testing.expectEqual(node.Status.ok, validate.validate_node(&n).status);
    const buffers = [_][]align(64) u8{ src.memory, dst.memory };
    try expect_node(&n, &buffers, 1, reference, tolerance_f32);
}

test "sum and mean match float64 for every layout and thread count (sum on real threads)" {
    var prng = std.Random.DefaultPrng.init(4);
    for (shapes) |ne| {
        for (layouts) |layout| {
            try expect_sum(ne, layout, prng.random());
            try expect_mean(ne, layout, .contiguous, prng.random());
            try expect_mean(ne, .contiguous, layout, prng.random());
        }
    }
    // More rows than sum's chunk count, so chunks hold several rows.
    try expect_sum(.{ 3, 200, 1, 1 }, .strided, prng.random());
}

fn expect_norm(
    op: Op,
    ne: Shape,
    layout_src: Layout,
    layout_dst: Layout,
    in_place: bool,
    magnitude: f32,
    random: std.Random,
) !void {
    var src = try TestTensor.init(.f32, ne, layout_src);
    defer src.deinit();
    var dst = try TestTensor.init(.f32, ne, layout_dst);
    defer dst.deinit();
    src.fill_random(random, magnitude);
    // An offset makes norm's mean subtraction matter.
    for (0..src.count()) |flat| set(&src.desc, flat, src.value_at(flat) + magnitude / 2);
    const eps: f32 = 1e-5;
    const row_length: usize = @intCast(ne[0]);
    const reference = try allocator.alloc(f64, src.count());
    defer allocator.free(reference);
    for (0..src.count() / row_length) |row| {
        const values = reference[row * row_length ..][0..row_length];
        for (values, 0..) |*value, column| value.* = src.value_at(row * row_length + column);
        normalize_reference(op, values, eps);
    }
    var n = make_node(op, if (in_place) src.desc else dst.desc, &.{src.desc});
    n.params[0] = @bitCast(eps);
    try testing.expectEqual(node.Status.ok, validate.validate_node(&n).status);
    const buffers = [_][]align(64) u8{ src.memory, dst.memory };
    try expect_node(&n, &buffers, if (in_place) 0 else 1, reference, tolerance_f32);
}

fn normalize_reference(op: Op, values: []f64, eps: f64) void {
    const count: f64 = @floatFromInt(values.len);
    var mean: f64 = 0;
    if (op == .norm) {
        for (values) |value| mean += value;
        mean /= count;
    }
    var squares: f64 = 0;
    for (values) |value| squares += (value - mean) * (value - mean);
    const scale = 1 / @sqrt(squares / count + eps);
    for (values) |*value| value.* = (value.* - mean) * scale;
}

test "norm and rms_norm match float64 on strided rows and in place" {
    var prng = std.Random.DefaultPrng.init(5);
    for ([_]Op{ .norm, .rms_norm }) |op| {
        for (shapes) |ne| {
            for (layouts) |layout| {
                try expect_norm(op, ne, layout, .contiguous, false, 3, prng.random());
                try expect_norm(op, ne, .contiguous, layout, false, 3, prng.random());
                try expect_norm(op, ne, layout, .contiguous, true, 3, prng.random());
            }
            // Variance near eps: eps must enter exactly as the formula says.
            try expect_norm(op, ne, .contiguous, .contiguous, false, 0.005, prng.random());
        }
    }
}

/// A fused op (silu_mul or rms_norm_mul) against float64, and bit for bit against its two
/// unfused nodes (silu or rms_norm into a temporary, then mul), on every thread count.
fn expect_fused(
    op: Op,
    ne: Shape,
    layout_a: Layout,
    layout_b: Layout,
    in_place: bool,
    random: std.Random,
) !void {
    const first: Op = if (op == .silu_mul) .silu else .rms_norm;
    // rms_norm_mul's src1 is a gain row broadcast over rows (and over dim 3).
    const ne_b: Shape = if (op == .silu_mul) ne else .{ ne[0], 1, ne[2], 1 };
    var a = try TestTensor.init(.f32, ne, layout_a);
    defer a.deinit();
    var b = try TestTensor.init(.f32, ne_b, layout_b);
    defer b.deinit();
    var dst = try TestTensor.init(.f32, ne, .contiguous);
    defer dst.deinit();
    var tmp = try TestTensor.init(.f32, ne, .contiguous);
    defer tmp.deinit();
    var unfused = try TestTensor.init(.f32, ne, .contiguous);
    defer unfused.deinit();
    a.fill_random(random, 4);
    b.fill_random(random, 2);
    const eps: f32 = 1e-5;
    const row_length: usize = @intCast(ne[0]);
    const reference = try allocator.alloc(f64, a.count());
    defer allocator.free(reference);
    for (reference, 0..) |*value, flat| value.* = a.value_at(flat);
    if (op == .rms_norm_mul) {
        for (0..a.count() / row_length) |row| normalize_reference(.rms_norm, reference[row * row_length ..][0..row_length], eps);
    } else {
        for (reference) |*value| value.* = unary_reference(.silu, value.*, 0);
    }
    for (reference, 0..) |*value, flat| {
        var position = coordinates(ne, flat);
        for (0..node.dims_max) |d| position[d] %= @intCast(ne_b[d]);
        value.* *= b.value_at(flat_index(ne_b, position));
    }

    // The unfused pair, computed first (before an in-place run overwrites a).
    var step1 = make_node(first, tmp.desc, &.{a.desc});
    step1.params[0] = @bitCast(eps);
    try testing.expectEqual(node.Status.ok, try run(&step1, 1));
    var step2 = make_node(.mul, unfused.desc, &.{ tmp.desc, b.desc });
    try testing.expectEqual(node.Status.ok, try run(&step2, 1));

    var n = make_node(op, if (in_place) a.desc else dst.desc, &.{ a.desc, b.desc });
    n.params[0] = @bitCast(eps);
    try testing.expectEqual(node.Status.ok, validate.validate_node(&n).status);
    const buffers = [_][]align(64) u8{ a.memory, b.memory, dst.memory };
    try expect_node(&n, &buffers, if (in_place) 0 else 2, reference, tolerance_f32);
    const out = if (in_place) &a.desc else &dst.desc;
    for (0..a.count()) |flat| {
        const fused_bits: u32 = @bitCast(@as(f32, @floatCast(get(out, flat))));
        const unfused_bits: u32 = @bitCast(@as(f32, @floatCast(unfused.value_at(flat))));
        try testing.expectEqual(unfused_bits, fused_bits);
    }
}

test "silu_mul and rms_norm_mul match float64 and their unfused pairs bit for bit, in place too" {
    var prng = std.Random.DefaultPrng.init(21);
    for ([_]Op{ .silu_mul, .rms_norm_mul }) |op| {
        for (shapes) |ne| {
            for (layouts) |layout| {
                try expect_fused(op, ne, layout, .contiguous, false, prng.random());
                try expect_fused(op, ne, .contiguous, layout, false, prng.random());
            }
            try expect_fused(op, ne, .contiguous, .contiguous, true, prng.random());
            try expect_fused(op, ne, .strided, .strided, true, prng.random());
        }
    }
}

test "validate_node refuses fused ops with mismatched shapes or dtypes" {
    var a = try TestTensor.init(.f32, .{ 8, 3, 1, 1 }, .contiguous);
    defer a.deinit();
    var short = try TestTensor.init(.f32, .{ 4, 3, 1, 1 }, .contiguous);
    defer short.deinit();
    var wide = try TestTensor.init(.f32, .{ 8, 2, 1, 1 }, .contiguous);
    defer wide.deinit();
    var half = try TestTensor.init(.f16, .{ 8, 3, 1, 1 }, .contiguous);
    defer half.deinit();
    try expect_verdict(&make_node(.silu_mul, a.desc, &.{ a.desc, short.desc }), .shape_mismatch, "silu_mul: dst.ne != src1.ne");
    try expect_verdict(&make_node(.silu_mul, a.desc, &.{ a.desc, half.desc }), .unsupported, "silu_mul: dst, src0 and src1 must be f32");
    try expect_verdict(&make_node(.silu_mul, a.desc, &.{a.desc}), .invalid_argument, "silu_mul: wrong src_count");
    try expect_verdict(&make_node(.rms_norm_mul, a.desc, &.{ a.desc, short.desc }), .shape_mismatch, "rms_norm_mul: src1.ne[0] != src0.ne[0]");
    try expect_verdict(&make_node(.rms_norm_mul, a.desc, &.{ a.desc, wide.desc }), .shape_mismatch, "rms_norm_mul: src1.ne[d] does not divide src0.ne[d]");
    try expect_verdict(&make_node(.rms_norm_mul, short.desc, &.{ a.desc, a.desc }), .shape_mismatch, "rms_norm_mul: dst.ne != src0.ne");
}

test "binary ops and norms past the streaming-store size match float64 and are in place" {
    var prng = std.Random.DefaultPrng.init(51);
    // Rows of 4101 floats: most rows start off a vector boundary, so streamed (aligned) and
    // cached stores mix inside a row. Rows of 4096: every full chunk is streamed.
    const big_odd: Shape = .{ 4101, 1024, 1, 1 };
    const big: Shape = .{ 4096, 1024, 1, 1 };
    comptime std.debug.assert(4101 * 1024 * 4 >= common.stream_store_bytes_min);
    comptime std.debug.assert(4096 * 1024 * 4 >= common.stream_store_bytes_min);
    const row_b: Shape = .{ 4101, 1, 1, 1 };
    try expect_binary(.add, big_odd, row_b, .contiguous, .contiguous, .contiguous, false, prng.random());
    try expect_binary(.mul, big, big, .contiguous, .contiguous, .contiguous, true, prng.random());
    try expect_norm(.rms_norm, big, .contiguous, .contiguous, false, 3, prng.random());
    try expect_norm(.norm, big_odd, .contiguous, .contiguous, true, 3, prng.random());
}

// ---------------------------------------------------------------------------------------------
// soft_max.

const MaskKind = enum { none, random, causal };

fn expect_soft_max(
    ne: Shape,
    mask_kind: MaskKind,
    layout: Layout,
    in_place: bool,
    random: std.Random,
) !void {
    var src = try TestTensor.init(.f32, ne, layout);
    defer src.deinit();
    var dst = try TestTensor.init(.f32, ne, .contiguous);
    defer dst.deinit();
    // A mask with extra rows and broadcast over dims 2 and 3 (one batch in dim 2).
    const ne_mask: Shape = .{ ne[0], ne[1] + 2, 1, ne[3] };
    var mask = try TestTensor.init(.f32, ne_mask, layout);
    defer mask.deinit();
    src.fill_random(random, 4);
    for (0..mask.count()) |flat| {
        const position = coordinates(ne_mask, flat);
        set(&mask.desc, flat, switch (mask_kind) {
            .none, .random => random_value(random, 2),
            // Row i1 sees columns <= i1 - 1: row 0 is fully masked.
            .causal => if (position[0] + 1 <= position[1]) 0 else -std.math.inf(f64),
        });
    }
    const scale: f32 = 0.7;
    const reference = try allocator.alloc(f64, src.count());
    defer allocator.free(reference);
    const row_length: usize = @intCast(ne[0]);
    for (0..src.count() / row_length) |row| {
        const values = reference[row * row_length ..][0..row_length];
        for (values, 0..) |*value, column| {
            const flat = row * row_length + column;
            value.* = src.value_at(flat) * scale;
            if (mask_kind != .none) {
                var position = coordinates(ne, flat);
                position[2] = 0;
                value.* += mask.value_at(flat_index(ne_mask, position));
            }
        }
        soft_max_reference(values);
    }
    const sources = [_]TensorDesc{ src.desc, mask.desc };
    var n = make_node(
        .soft_max,
        if (in_place) src.desc else dst.desc,
        if (mask_kind == .none) sources[0..1] else &sources,
    );
    n.params[0] = @bitCast(scale);
    try testing.expectEqual(node.Status.ok, validate.validate_node(&n).status);
    const buffers = [_][]align(64) u8{ src.memory, dst.memory, mask.memory };
    try expect_node(&n, &buffers, if (in_place) 0 else 1, reference, tolerance_f32);
}

/// Softmax in f64; a row of all -inf gives zeros (our documented deviation from ggml's NaN).
fn soft_max_reference(values: []f64) void {
    var maximum = -std.math.inf(f64);
    for (values) |value| maximum = @max(maximum, value);
    if (maximum == -std.math.inf(f64)) return @memset(values, 0);
    var total: f64 = 0;
    for (values) |*value| {
        value.* = @exp(value.* - maximum);
        total += value.*;
    }
    for (values) |*value| value.* /= total;
}

test "soft_max matches float64 with random and causal -inf masks, fully masked rows give 0" {
    var prng = std.Random.DefaultPrng.init(6);
    for (shapes) |ne| {
        for ([_]MaskKind{ .none, .random, .causal }) |mask_kind| {
            for (layouts) |layout| {
                try expect_soft_max(ne, mask_kind, layout, false, prng.random());
            }
            try expect_soft_max(ne, mask_kind, .contiguous, true, prng.random());
            try expect_soft_max(ne, mask_kind, .strided, true, prng.random());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// mul_mat.

const MatMulCase = struct {
    k: i64,
    m: i64,
    n: i64,
    batch_a: [2]i64,
    batch_b: [2]i64,
};

fn expect_mul_mat(
    case: MatMulCase,
    dtype_a: DType,
    layout_a: Layout,
    layout_b: Layout,
    layout_c: Layout,
    random: std.Random,
) !void {
    const ne_a: Shape = .{ case.k, case.m, case.batch_a[0], case.batch_a[1] };
    const ne_b: Shape = .{ case.k, case.n, case.batch_b[0], case.batch_b[1] };
    const ne_c: Shape = .{ case.m, case.n, case.batch_b[0], case.batch_b[1] };
    var a = try TestTensor.init(dtype_a, ne_a, layout_a);
    defer a.deinit();
    var b = try TestTensor.init(.f32, ne_b, layout_b);
    defer b.deinit();
    var c = try TestTensor.init(.f32, ne_c, layout_c);
    defer c.deinit();
    a.fill_random(random, 1);
    b.fill_random(random, 1);
    const reference = try allocator.alloc(f64, c.count());
    defer allocator.free(reference);
    const ratio = [2]usize{
        @intCast(@divExact(case.batch_b[0], case.batch_a[0])),
        @intCast(@divExact(case.batch_b[1], case.batch_a[1])),
    };
    for (reference, 0..) |*value, flat| {
        const p = coordinates(ne_c, flat);
        var total: f64 = 0;
        for (0..@as(usize, @intCast(case.k))) |k| {
            const value_a = a.value_at(
                flat_index(ne_a, .{ k, p[0], p[2] / ratio[0], p[3] / ratio[1] }),
            );
            total += value_a * b.value_at(flat_index(ne_b, .{ k, p[1], p[2], p[3] }));
        }
        value.* = total;
    }
    const n = make_node(.mul_mat, c.desc, &.{ a.desc, b.desc });
    try testing.expectEqual(node.Status.ok, validate.validate_node(&n).status);
    const buffers = [_][]align(64) u8{ a.memory, b.memory, c.memory };
    // f16 weights: a faster gemm may round src1 to f16 as ggml does.
    try expect_node(
        &n,
        &buffers,
        2,
        reference,
        if (dtype_a == .f16) tolerance_f16 else tolerance_f32,
    );
}

test "mul_mat matches float64 for f32 and f16 weights, strides and broadcast batches" {
    var prng = std.Random.DefaultPrng.init(7);
    const cases = [_]MatMulCase{
        .{ .k = 1, .m = 1, .n = 1, .batch_a = .{ 1, 1 }, .batch_b = .{ 1, 1 } },
        .{ .k = 7, .m = 3, .n = 5, .batch_a = .{ 1, 1 }, .batch_b = .{ 1, 1 } },
        .{ .k = 33, .m = 17, .n = 9, .batch_a = .{ 1, 2 }, .batch_b = .{ 3, 2 } },
        .{ .k = 1037, .m = 5, .n = 3, .batch_a = .{ 2, 1 }, .batch_b = .{ 2, 1 } },
        .{ .k = 64, .m = 16, .n = 4, .batch_a = .{ 2, 1 }, .batch_b = .{ 4, 3 } },
        // Batches claimed whole by the threads (9 >= 4 per thread), and 5 on 2 threads: split
        // inside each batch. Sizes that take the packed path.
        .{ .k = 40, .m = 70, .n = 33, .batch_a = .{ 1, 1 }, .batch_b = .{ 9, 1 } },
        .{ .k = 40, .m = 70, .n = 33, .batch_a = .{ 5, 1 }, .batch_b = .{ 5, 1 } },
    };
    for (cases) |case| {
        for ([_]DType{ .f32, .f16 }) |dtype| {
            for (layouts) |layout| {
                try expect_mul_mat(case, dtype, layout, .contiguous, .contiguous, prng.random());
                try expect_mul_mat(case, dtype, .contiguous, layout, layout, prng.random());
            }
        }
    }
}

test "mul_mat: attention-sized batches (heads) with permuted operands" {
    var prng = std.Random.DefaultPrng.init(70);
    const case: MatMulCase = .{ .k = 64, .m = 128, .n = 96, .batch_a = .{ 12, 1 }, .batch_b = .{ 12, 1 } };
    for (layouts) |layout| {
        try expect_mul_mat(case, .f32, layout, layout, .contiguous, prng.random());
    }
}

// ---------------------------------------------------------------------------------------------
// cpy and get_rows.

fn expect_cpy(
    from: DType,
    to: DType,
    ne_src: Shape,
    ne_dst: Shape,
    layout_src: Layout,
    layout_dst: Layout,
    random: std.Random,
) !void {
    var src = try TestTensor.init(from, ne_src, layout_src);
    defer src.deinit();
    var dst = try TestTensor.init(to, ne_dst, layout_dst);
    defer dst.deinit();
    for (0..src.count()) |flat| {
        const value = random_value(random, 1000);
        set(&src.desc, flat, if (from == .i32) @round(value) else value);
    }
    const reference = try allocator.alloc(f64, dst.count());
    defer allocator.free(reference);
    for (reference, 0..) |*value, flat| {
        const source = src.value_at(flat);
        // The exact expectation: f32 -> f16 rounds to nearest even, every other pair is exact.
        value.* = if (to == .f16) @as(f16, @floatCast(source)) else source;
    }
    const n = make_node(.cpy, dst.desc, &.{src.desc});
    try testing.expectEqual(node.Status.ok, validate.validate_node(&n).status);
    const buffers = [_][]align(64) u8{ src.memory, dst.memory };
    try expect_node(&n, &buffers, 1, reference, 0);
}

test "cpy converts every dtype pair exactly across layouts and reshapes" {
    var prng = std.Random.DefaultPrng.init(8);
    const pairs = [_][2]DType{
        .{ .f32, .f32 }, .{ .f32, .f16 }, .{ .f16, .f32 }, .{ .f16, .f16 }, .{ .i32, .i32 },
    };
    const reshapes = [_][2]Shape{
        .{ .{ 33, 6, 2, 3 }, .{ 33, 6, 2, 3 } },
        .{ .{ 33, 6, 2, 3 }, .{ 33, 3, 12, 1 } }, // equal row length, other batching
        .{ .{ 33, 6, 2, 3 }, .{ 11, 18, 1, 6 } }, // other row length
        .{ .{ 7, 3, 1, 1 }, .{ 21, 1, 1, 1 } },
        .{ .{ 1037, 2, 1, 1 }, .{ 2, 1037, 1, 1 } },
        .{ .{ 1, 1, 1, 1 }, .{ 1, 1, 1, 1 } },
    };
    for (pairs) |pair| {
        for (reshapes) |shape| {
            for (layouts) |layout_src| {
                for (layouts) |layout_dst| {
                    try expect_cpy(
                        pair[0],
                        pair[1],
                        shape[0],
                        shape[1],
                        layout_src,
                        layout_dst,
                        prng.random(),
                    );
                }
            }
        }
    }
}

fn expect_get_rows(
    dtype: DType,
    ne_src: Shape,
    count: i64,
    layout_src: Layout,
    layout_indices: Layout,
    random: std.Random,
) !void {
    const ne_indices: Shape = .{ count, ne_src[2], ne_src[3], 1 };
    const ne_dst: Shape = .{ ne_src[0], count, ne_src[2], ne_src[3] };
    var src = try TestTensor.init(dtype, ne_src, layout_src);
    defer src.deinit();
    var indices = try TestTensor.init(.i32, ne_indices, layout_indices);
    defer indices.deinit();
    var dst = try TestTensor.init(.f32, ne_dst, .contiguous);
    defer dst.deinit();
    src.fill_random(random, 5);
    for (0..indices.count()) |flat| {
        set(&indices.desc, flat, @floatFromInt(random.intRangeLessThan(i64, 0, ne_src[1])));
    }
    const reference = try allocator.alloc(f64, dst.count());
    defer allocator.free(reference);
    for (reference, 0..) |*value, flat| {
        const p = coordinates(ne_dst, flat);
        const row: usize = @intFromFloat(
            indices.value_at(flat_index(ne_indices, .{ p[1], p[2], p[3], 0 })),
        );
        value.* = src.value_at(flat_index(ne_src, .{ p[0], row, p[2], p[3] }));
    }
    var n = make_node(.get_rows, dst.desc, &.{ src.desc, indices.desc });
    try testing.expectEqual(node.Status.ok, validate.validate_node(&n).status);
    const buffers = [_][]align(64) u8{ src.memory, indices.memory, dst.memory };
    try expect_node(&n, &buffers, 2, reference, 0);

    // One index out of range, either way: every thread refuses, nothing is written.
    for ([_]f64{ -1, @floatFromInt(ne_src[1]) }) |bad| {
        const before = try allocator.dupe(u8, dst.memory);
        defer allocator.free(before);
        const saved = indices.value_at(indices.count() - 1);
        set(&indices.desc, indices.count() - 1, bad);
        for (thread_counts) |thread_count| {
            try testing.expectEqual(node.Status.out_of_bounds, try run(&n, thread_count));
        }
        try testing.expectEqualSlices(u8, before, dst.memory);
        set(&indices.desc, indices.count() - 1, saved);
        n.src[1] = indices.desc;
    }
}

test "get_rows gathers f32 and f16 rows per batch and refuses out-of-range indices" {
    var prng = std.Random.DefaultPrng.init(9);
    const cases = [_]struct { Shape, i64 }{
        .{ .{ 1, 1, 1, 1 }, 1 },
        .{ .{ 7, 5, 1, 1 }, 9 },
        .{ .{ 33, 4, 3, 1 }, 2 },
        .{ .{ 1037, 3, 2, 2 }, 4 },
    };
    for ([_]DType{ .f32, .f16 }) |dtype| {
        for (cases) |case| {
            for (layouts) |layout| {
                try expect_get_rows(dtype, case[0], case[1], layout, .contiguous, prng.random());
                try expect_get_rows(dtype, case[0], case[1], .contiguous, layout, prng.random());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Validation and dispatch.

fn expect_verdict(n: *const Node, status: node.Status, reason: []const u8) !void {
    const verdict = validate.validate_node(n);
    try testing.expectEqual(status, verdict.status);
    try testing.expectEqualStrings(reason, verdict.reason);
    // compute_node refuses the node with the same status instead of running a kernel.
    if (status != .ok) try testing.expectEqual(status, try run(n, 1));
}

test "validate_node names the op and the broken rule; compute_node refuses the same nodes" {
    var a = try TestTensor.init(.f32, .{ 8, 4, 1, 1 }, .contiguous);
    defer a.deinit();
    var b = try TestTensor.init(.f32, .{ 3, 4, 1, 1 }, .contiguous);
    defer b.deinit();
    var half = try TestTensor.init(.f16, .{ 8, 4, 1, 1 }, .contiguous);
    defer half.deinit();

    try expect_verdict(&make_node(.add, a.desc, &.{ a.desc, a.desc }), .ok, "ok");
    try expect_verdict(
        &make_node(.add, a.desc, &.{ a.desc, b.desc }),
        .shape_mismatch,
        "add: src1.ne[d] does not divide src0.ne[d]",
    );
    try expect_verdict(
        &make_node(.add, a.desc, &.{a.desc}),
        .invalid_argument,
        "add: wrong src_count",
    );
    try expect_verdict(
        &make_node(.mul, a.desc, &.{ a.desc, half.desc }),
        .unsupported,
        "mul: dst, src0 and src1 must be all f32, all f16, or f16 src0 and f32 src1",
    );
    try expect_verdict(
        &make_node(.mul_mat, a.desc, &.{ a.desc, b.desc }),
        .shape_mismatch,
        "mul_mat: src0.ne[0] != src1.ne[0]",
    );
    // mul_mat's params[0] is the prepack flag: 0 or 1, nothing else.
    var square = try TestTensor.init(.f32, .{ 4, 4, 1, 1 }, .contiguous);
    defer square.deinit();
    var flagged = make_node(.mul_mat, square.desc, &.{ square.desc, square.desc });
    flagged.params[0] = 1;
    try expect_verdict(&flagged, .ok, "ok");
    flagged.params[0] = 2;
    try expect_verdict(&flagged, .invalid_argument, "mul_mat: params[0] (prepack) is not 0 or 1");
    try expect_verdict(
        &make_node(.soft_max, a.desc, &.{ a.desc, b.desc }),
        .shape_mismatch,
        "soft_max: src1.ne[0] != src0.ne[0]",
    );
    try expect_verdict(
        &make_node(.cpy, b.desc, &.{a.desc}),
        .shape_mismatch,
        "cpy: dst and src0 element counts differ",
    );
    try expect_verdict(
        &make_node(.get_rows, a.desc, &.{ a.desc, a.desc }),
        .unsupported,
        "get_rows: src1 must be i32 or i64",
    );
    try expect_verdict(
        &make_node(.sum, a.desc, &.{a.desc}),
        .shape_mismatch,
        "sum: dst.ne != [1, 1, 1, 1]",
    );

    var unknown = make_node(.add, a.desc, &.{ a.desc, a.desc });
    unknown.op = 99;
    try expect_verdict(&unknown, .unsupported, "unknown op code");
    unknown.op = 0;
    try expect_verdict(&unknown, .unsupported, "unknown op code");

    var bad = a.desc;
    bad.ne[2] = 0;
    try expect_verdict(
        &make_node(.relu, a.desc, &.{bad}),
        .invalid_argument,
        "relu: src0.ne[2] < 1",
    );
    bad = a.desc;
    bad.nb[1] = -4;
    try expect_verdict(
        &make_node(.relu, bad, &.{a.desc}),
        .invalid_argument,
        "relu: dst.nb[1] < 0",
    );
    bad = a.desc;
    bad.nb[1] = 0;
    try expect_verdict(
        &make_node(.relu, bad, &.{a.desc}),
        .invalid_argument,
        "relu: dst.nb[1] == 0 with ne[1] > 1",
    );
    bad = a.desc;
    bad.dtype = @intFromEnum(DType.last) + 1;
    try expect_verdict(
        &make_node(.relu, a.desc, &.{bad}),
        .invalid_argument,
        "relu: src0.dtype unknown",
    );
    bad = a.desc;
    bad.dtype = @intFromEnum(DType.q4_0);
    try expect_verdict(
        &make_node(.relu, a.desc, &.{bad}),
        .invalid_argument,
        "relu: src0.ne[0] is not whole blocks of its dtype",
    );
    bad.ne[0] = 32;
    try expect_verdict(
        &make_node(.relu, a.desc, &.{bad}),
        .unsupported,
        "relu: src0 must be f32 or f16",
    );
    bad.dtype = @intFromEnum(DType.q8_1);
    try expect_verdict(
        &make_node(.get_rows, a.desc, &.{ bad, b.desc }),
        .unsupported,
        "get_rows: src0 must be f32, f16, i32, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K or q6_K",
    );
    bad = a.desc;
    bad.ne = .{ 1 << 30, 1 << 30, 1, 1 };
    try expect_verdict(
        &make_node(.relu, a.desc, &.{bad}),
        .limit_reached,
        "relu: src0 has more than element_count_max elements",
    );
    bad = a.desc;
    bad.ne = .{ 1 << 40, 1, 1, 1 };
    bad.nb[0] = 1 << 48;
    try expect_verdict(
        &make_node(.relu, a.desc, &.{bad}),
        .limit_reached,
        "relu: src0 spans more than extent_bytes_max bytes",
    );
    bad = a.desc;
    bad.data = 0;
    try expect_verdict(
        &make_node(.relu, a.desc, &.{bad}),
        .invalid_argument,
        "relu: src0.data is null",
    );
    // A zero source stride broadcasts and is fine.
    bad = a.desc;
    bad.nb[1] = 0;
    try expect_verdict(&make_node(.relu, a.desc, &.{bad}), .ok, "ok");
}

test "compute_node refuses a bad thread index and work_size is 0 for invalid nodes" {
    var a = try TestTensor.init(.f32, .{ 8, 4, 1, 1 }, .contiguous);
    defer a.deinit();
    const n = make_node(.relu, a.desc, &.{a.desc});
    var scratch: [64]u8 align(64) = undefined;
    var barrier: TestBarrier = .{ .thread_count = 1 };
    const work: node.Work = .{
        .thread_index = 2,
        .thread_count = 2,
        .scratch = &scratch,
        .scratch_size_bytes = scratch.len,
        .barrier_context = &barrier,
        .barrier = barrier_noop,
    };
    try testing.expectEqual(node.Status.invalid_argument, dispatch.compute_node(&n, &work));
    var invalid = n;
    invalid.op = 1000;
    try testing.expectEqual(@as(u64, 0), dispatch.work_size(&invalid, 4));
    const sum = make_node(.sum, a.desc, &.{a.desc});
    try testing.expectEqual(@as(u64, 0), dispatch.work_size(&sum, 4)); // dst is not [1,1,1,1]
}
