//! Tests of gemm.zig against a float64 reference: edge tails, f16 weights, transposed and strided
//! operands, real threads meeting at a real barrier, and bitwise determinism across thread counts.

const std = @import("std");
const gemm = @import("gemm.zig");
const node = @import("../node.zig");

const testing = std.testing;
const Atomic = std.atomic.Value;

/// A small spinning barrier, as the pool's.
const TestBarrier = struct {
    arrived: Atomic(u32) = .init(0),
    phase: Atomic(u32) = .init(0),
    thread_count: u32,

    fn wait(context: *anyopaque) callconv(.c) void {
        const self: *TestBarrier = @ptrCast(@alignCast(context));
        if (self.thread_count == 1) return;
        const phase = self.phase.load(.acquire);
        if (self.arrived.fetchAdd(1, .acq_rel) + 1 == self.thread_count) {
            self.arrived.store(0, .monotonic);
            self.phase.store(phase +% 1, .release);
            return;
        }
        var spins: u32 = 0;
        while (self.phase.load(.acquire) == phase) {
            std.atomic.spinLoopHint();
            spins += 1;
            if (spins % 1024 == 0) std.Thread.yield() catch {};
        }
    }
};

/// What each test thread runs: sgemm, sgemm on prepacked A, or its share of prepacking A.
const Task = union(enum) {
    sgemm,
    prepacked: []const f32,
    prepack: []f32,
};

fn threadMain(args: *const gemm.GemmArgs, work: *const node.Work) void {
    gemm.sgemm(args, work);
}

fn taskMain(task: Task, args: *const gemm.GemmArgs, work: *const node.Work) void {
    switch (task) {
        .sgemm => gemm.sgemm(args, work),
        .prepacked => |a_packed| gemm.sgemm_prepacked(args, a_packed, work),
        .prepack => |dest| gemm.prepack_a(args, dest, work),
    }
}

/// Runs sgemm on `thread_count` real threads sharing one scratch buffer and barrier.
pub fn runThreads(args: *const gemm.GemmArgs, thread_count: u32) !void {
    return runTask(.sgemm, args, thread_count);
}

fn runTask(task: Task, args: *const gemm.GemmArgs, thread_count: u32) !void {
    const size = gemm.work_size_bytes(args, thread_count);
    const scratch = try testing.allocator.alignedAlloc(u8, .@"64", @max(size, 64));
    defer testing.allocator.free(scratch);
    // Garbage in the scratch: the kernel must not read what it did not write.
    @memset(scratch, 0xff);
    var barrier: TestBarrier = .{ .thread_count = thread_count };
    var works: [8]node.Work = undefined;
    for (0..thread_count) |t| works[t] = .{
        .thread_index = @intCast(t),
        .thread_count = thread_count,
        .scratch = scratch.ptr,
        .scratch_size_bytes = size,
        .barrier_context = &barrier,
        .barrier = TestBarrier.wait,
    };
    var threads: [8]std.Thread = undefined;
    for (1..thread_count) |t| threads[t] = try std.Thread.spawn(.{}, taskMain, .{ task, args, &works[t] });
    taskMain(task, args, &works[0]);
    for (1..thread_count) |t| threads[t].join();
}

const Layout = enum { normal, padded, transposed, strided };

/// Strides (bytes) for `rows` rows of `cols` elements of `size` bytes, and the buffer length.
const Strides = struct { row: isize, elem: isize, bytes: usize };

fn strides(layout: Layout, rows: usize, cols: usize, size: usize) Strides {
    const s: isize = @intCast(size);
    const r: isize = @intCast(rows);
    const c: isize = @intCast(cols);
    const out: Strides = switch (layout) {
        .normal => .{ .row = c * s, .elem = s, .bytes = 0 },
        .padded => .{ .row = (c + 3) * s, .elem = s, .bytes = 0 },
        .transposed => .{ .row = s, .elem = (r + 1) * s, .bytes = 0 },
        .strided => .{ .row = (2 * c + 5) * s, .elem = 2 * s, .bytes = 0 },
    };
    const last = (r - 1) * out.row + (c - 1) * out.elem + s;
    return .{ .row = out.row, .elem = out.elem, .bytes = @intCast(last) };
}

fn randomValue(rng: std.Random) f32 {
    // Non-zero, mixed signs, magnitudes in [0.1, 1).
    const magnitude = 0.1 + 0.9 * rng.float(f32);
    return if (rng.boolean()) magnitude else -magnitude;
}

const Case = struct {
    m: usize,
    n: usize,
    k: usize,
    a_dtype: node.DType = .f32,
    a_layout: Layout = .normal,
    b_layout: Layout = .normal,
    c_layout: Layout = .normal,
};

const sentinel: u32 = 0x7fc0_dead; // a NaN pattern that never comes out of the kernel

const Problem = struct {
    args: gemm.GemmArgs,
    a: []u8,
    b: []u8,
    c: []u8,
    reference: []f64, // [n][m]
    abs_sum: []f64, // [n][m]: sum of |a*b|, for the tolerance
    c_strides: Strides,

    fn init(case: Case, seed: u64) !Problem {
        const allocator = testing.allocator;
        var prng = std.Random.DefaultPrng.init(seed);
        const rng = prng.random();
        const a_size = case.a_dtype.size_bytes();
        const sa = strides(case.a_layout, case.m, case.k, a_size);
        const sb = strides(case.b_layout, case.n, case.k, 4);
        const sc = strides(case.c_layout, case.n, case.m, 4);
        const a = try allocator.alloc(u8, sa.bytes);
        errdefer allocator.free(a);
        const b = try allocator.alloc(u8, sb.bytes);
        errdefer allocator.free(b);
        const c = try allocator.alloc(u8, sc.bytes);
        errdefer allocator.free(c);
        @memset(a, 0x55);
        @memset(b, 0x55);
        const c_words: []align(1) u32 = std.mem.bytesAsSlice(u32, c[0 .. c.len / 4 * 4]);
        @memset(c_words, sentinel);

        const a_values = try allocator.alloc(f64, case.m * case.k);
        defer allocator.free(a_values);
        const b_values = try allocator.alloc(f64, case.n * case.k);
        defer allocator.free(b_values);
        for (0..case.m) |m| for (0..case.k) |k| {
            const offset: usize = @intCast(@as(isize, @intCast(m)) * sa.row + @as(isize, @intCast(k)) * sa.elem);
            const value = randomValue(rng);
            switch (case.a_dtype) {
                .f16 => {
                    const h: f16 = @floatCast(value);
                    std.mem.writeInt(u16, a[offset..][0..2], @bitCast(h), .little);
                    a_values[m * case.k + k] = h;
                },
                else => {
                    std.mem.writeInt(u32, a[offset..][0..4], @bitCast(value), .little);
                    a_values[m * case.k + k] = value;
                },
            }
        };
        for (0..case.n) |n| for (0..case.k) |k| {
            const offset: usize = @intCast(@as(isize, @intCast(n)) * sb.row + @as(isize, @intCast(k)) * sb.elem);
            const value = randomValue(rng);
            std.mem.writeInt(u32, b[offset..][0..4], @bitCast(value), .little);
            // f16 A multiplies B rounded to f16, as ggml converts src1 to f16 (gemm.zig roundB).
            b_values[n * case.k + k] = if (case.a_dtype == .f16) @as(f16, @floatCast(value)) else value;
        };
        const reference = try allocator.alloc(f64, case.n * case.m);
        errdefer allocator.free(reference);
        const abs_sum = try allocator.alloc(f64, case.n * case.m);
        errdefer allocator.free(abs_sum);
        for (0..case.n) |n| for (0..case.m) |m| {
            var sum: f64 = 0;
            var abs: f64 = 0;
            for (0..case.k) |k| {
                const p = a_values[m * case.k + k] * b_values[n * case.k + k];
                sum += p;
                abs += @abs(p);
            }
            reference[n * case.m + m] = sum;
            abs_sum[n * case.m + m] = abs;
        };
        return .{
            .args = .{
                .m = case.m,
                .n = case.n,
                .k = case.k,
                .a = a.ptr,
                .a_dtype = case.a_dtype,
                .a_row_stride_bytes = sa.row,
                .a_element_stride_bytes = sa.elem,
                .b = b.ptr,
                .b_row_stride_bytes = sb.row,
                .b_element_stride_bytes = sb.elem,
                .c = c.ptr,
                .c_row_stride_bytes = sc.row,
                .c_element_stride_bytes = sc.elem,
            },
            .a = a,
            .b = b,
            .c = c,
            .reference = reference,
            .abs_sum = abs_sum,
            .c_strides = sc,
        };
    }

    fn deinit(self: *Problem) void {
        const allocator = testing.allocator;
        allocator.free(self.a);
        allocator.free(self.b);
        allocator.free(self.c);
        allocator.free(self.reference);
        allocator.free(self.abs_sum);
    }

    fn cOffset(self: *const Problem, n: usize, m: usize) usize {
        return @intCast(@as(isize, @intCast(n)) * self.c_strides.row + @as(isize, @intCast(m)) * self.c_strides.elem);
    }

    fn result(self: *const Problem, n: usize, m: usize) f32 {
        const offset = self.cOffset(n, m);
        return @bitCast(std.mem.readInt(u32, self.c[offset..][0..4], .little));
    }

    /// Checks C against the reference, and that no byte outside C's elements was written.
    fn check(self: *const Problem) !void {
        const k: f64 = @floatFromInt(self.args.k);
        var written = try testing.allocator.alloc(bool, self.c.len / 4 + 1);
        defer testing.allocator.free(written);
        @memset(written, false);
        for (0..self.args.n) |n| for (0..self.args.m) |m| {
            const got: f64 = self.result(n, m);
            const want = self.reference[n * self.args.m + m];
            const tolerance = 2.4e-7 * (4.0 * @sqrt(k) + 4.0) * self.abs_sum[n * self.args.m + m];
            if (!(@abs(got - want) <= tolerance)) {
                std.debug.print("mismatch m={} n={} k={} at (n={}, m={}): got {d}, want {d}, tolerance {e}\n", .{ self.args.m, self.args.n, self.args.k, n, m, got, want, tolerance });
                return error.TestMismatch;
            }
            written[self.cOffset(n, m) / 4] = true;
        };
        // Every 4-byte word of the buffer that is not an element must still hold the sentinel
        // (element offsets are multiples of 4 in every layout used here).
        for (0..self.c.len / 4) |w| {
            if (written[w]) continue;
            const word = std.mem.readInt(u32, self.c[w * 4 ..][0..4], .little);
            if (word != sentinel) {
                std.debug.print("write outside C at byte {} (m={} n={} k={})\n", .{ w * 4, self.args.m, self.args.n, self.args.k });
                return error.TestOutOfBoundsWrite;
            }
        }
    }
};

fn runCase(case: Case, thread_count: u32, seed: u64) !void {
    var problem = try Problem.init(case, seed);
    defer problem.deinit();
    try runThreads(&problem.args, thread_count);
    problem.check() catch |err| {
        std.debug.print("case {any}, threads {}\n", .{ case, thread_count });
        return err;
    };
}

const edge_sizes = [_]usize{ 1, 2, 7, 15, 17, 33, 100 };
const edge_n = [_]usize{ 1, 2, 3, 4, 5, 7, 13, 17, 33 };
const edge_k = [_]usize{ 1, 2, 7, 15, 17, 33, 100, 257 };

test "gemm: every edge tail of m, n and k, f32" {
    var seed: u64 = 1;
    for (edge_sizes) |m| for (edge_n) |n| for (edge_k) |k| {
        seed += 1;
        try runCase(.{ .m = m, .n = n, .k = k }, 1, seed);
    };
}

test "gemm: every edge tail of m, n and k, f16 weights" {
    var seed: u64 = 1000;
    for (edge_sizes) |m| for (edge_n) |n| for (edge_k) |k| {
        seed += 1;
        try runCase(.{ .m = m, .n = n, .k = k, .a_dtype = .f16 }, 1, seed);
    };
}

test "gemm: blocks larger than the cache blocks (MC, KC, NC)" {
    const cases = [_]Case{
        .{ .m = 257, .n = 100, .k = 600 },
        .{ .m = 600, .n = 37, .k = 513, .a_dtype = .f16 },
        .{ .m = gemm.mc_max + 1, .n = 2 * gemm.nr + 1, .k = gemm.kc_max * 2 + 3 },
        .{ .m = 33, .n = gemm.nc_max + 5, .k = 20 },
        .{ .m = 1000, .n = 1, .k = 1000 },
        .{ .m = 999, .n = 3, .k = 1001, .a_dtype = .f16 },
    };
    for (cases, 0..) |case, i| try runCase(case, 1, 77 + i);
}

test "gemm: transposed, padded and strided operands" {
    const layouts = [_]Layout{ .normal, .padded, .transposed, .strided };
    const shapes = [_][3]usize{ .{ 1, 1, 1 }, .{ 33, 1, 17 }, .{ 17, 3, 33 }, .{ 100, 13, 257 }, .{ 7, 40, 300 }, .{ 64, 24, 64 } };
    var seed: u64 = 5000;
    for (shapes) |shape| for ([_]node.DType{ .f32, .f16 }) |dtype| for (layouts) |la| for (layouts) |lb| for ([_]Layout{ .normal, .padded, .transposed }) |lc| {
        seed += 1;
        try runCase(.{ .m = shape[0], .n = shape[1], .k = shape[2], .a_dtype = dtype, .a_layout = la, .b_layout = lb, .c_layout = lc }, 1, seed);
    };
}

const thread_cases = [_]Case{
    .{ .m = 1, .n = 1, .k = 1 },
    .{ .m = 7, .n = 2, .k = 33 },
    .{ .m = 100, .n = 1, .k = 257 },
    .{ .m = 333, .n = 4, .k = 100, .a_dtype = .f16 },
    .{ .m = 33, .n = 100, .k = 300 }, // few rows: the columns are split
    .{ .m = 17, .n = 257, .k = 17 },
    .{ .m = 257, .n = 33, .k = 600 },
    .{ .m = 300, .n = 300, .k = 300, .a_dtype = .f16 },
    .{ .m = 1100, .n = 7, .k = 530, .a_layout = .transposed },
    .{ .m = 129, .n = 65, .k = 257, .b_layout = .strided, .c_layout = .transposed },
    .{ .m = 40, .n = 5000, .k = 9 },
    .{ .m = 103, .n = 37, .k = 300 }, // dot-product path, with a column tail
    .{ .m = 65, .n = 64, .k = 256, .a_dtype = .f16 },
    .{ .m = 70, .n = 65, .k = 1000 }, // just past the dot-product path
};

test "gemm: real threads (1, 2, 3) give correct and bitwise identical results" {
    for (thread_cases, 0..) |case, i| {
        var problem = try Problem.init(case, 9000 + i);
        defer problem.deinit();
        const first = try testing.allocator.alloc(u8, problem.c.len);
        defer testing.allocator.free(first);
        for ([_]u32{ 1, 2, 3 }) |threads| {
            const c_words: []align(1) u32 = std.mem.bytesAsSlice(u32, problem.c[0 .. problem.c.len / 4 * 4]);
            @memset(c_words, sentinel);
            try runThreads(&problem.args, threads);
            problem.check() catch |err| {
                std.debug.print("case {any}, threads {}\n", .{ case, threads });
                return err;
            };
            if (threads == 1) {
                @memcpy(first, problem.c);
            } else if (!std.mem.eql(u8, first, problem.c)) {
                std.debug.print("case {any}: threads {} differ from 1 thread\n", .{ case, threads });
                return error.TestNotDeterministic;
            }
        }
    }
}

test "gemm: repeated runs on threads are stable" {
    var problem = try Problem.init(.{ .m = 200, .n = 150, .k = 1100 }, 4242);
    defer problem.deinit();
    for (0..20) |_| {
        try runThreads(&problem.args, 3);
        try problem.check();
    }
}

test "gemm: the dynamic schedule (rows claimed in units) matches one thread bitwise" {
    const cases = [_]Case{
        .{ .m = 1000, .n = 128, .k = 700 }, // a K tail and a last unit of fewer rows
        .{ .m = 777, .n = 13, .k = 300, .a_dtype = .f16, .b_layout = .strided, .c_layout = .transposed },
        .{ .m = 2 * gemm.mr * gemm.unit_panels_max * 8 + 5, .n = 30, .k = 2 * gemm.kc_max }, // largest units
        .{ .m = 400, .n = 25, .k = 257, .a_layout = .transposed, .b_layout = .padded },
    };
    for (cases, 0..) |case, i| {
        var problem = try Problem.init(case, 31000 + i);
        defer problem.deinit();
        try testing.expect(gemm.useDynamic(&problem.args, 2));
        try testing.expect(gemm.useDynamic(&problem.args, 3));
        try testing.expect(!gemm.useDynamic(&problem.args, 1));
        const first = try testing.allocator.alloc(u8, problem.c.len);
        defer testing.allocator.free(first);
        for ([_]u32{ 1, 2, 3 }) |threads| {
            const c_words: []align(1) u32 = std.mem.bytesAsSlice(u32, problem.c[0 .. problem.c.len / 4 * 4]);
            @memset(c_words, sentinel);
            try runThreads(&problem.args, threads);
            problem.check() catch |err| {
                std.debug.print("case {any}, threads {}\n", .{ case, threads });
                return err;
            };
            if (threads == 1) {
                @memcpy(first, problem.c);
            } else if (!std.mem.eql(u8, first, problem.c)) {
                std.debug.print("case {any}: threads {} differ from 1 thread\n", .{ case, threads });
                return error.TestNotDeterministic;
            }
        }
    }
}

test "gemm: past the packed-B budget the static schedule is kept" {
    var problem = try Problem.init(.{ .m = 512, .n = 512, .k = 2048 }, 32000);
    defer problem.deinit();
    try testing.expect(!gemm.useDynamic(&problem.args, 2));
}

/// Packs A on `pack_threads` threads (into garbage-filled memory, so that every float it reads
/// back must have been written), then computes from it on `thread_count` threads.
fn runPrepacked(args: *const gemm.GemmArgs, pack_threads: u32, thread_count: u32) !void {
    const size = gemm.prepacked_size_bytes(args);
    try testing.expect(size > 0);
    const a_packed = try testing.allocator.alloc(f32, size / @sizeOf(f32));
    defer testing.allocator.free(a_packed);
    @memset(std.mem.sliceAsBytes(a_packed), 0xff);
    try runTask(.{ .prepack = a_packed }, args, pack_threads);
    try runTask(.{ .prepacked = a_packed }, args, thread_count);
}

const prepack_cases = [_]Case{
    .{ .m = 1, .n = 5, .k = 1 },
    .{ .m = 7, .n = 13, .k = 33, .a_dtype = .f16 },
    .{ .m = 33, .n = 100, .k = 300 }, // few rows: the columns are split
    .{ .m = 17, .n = 257, .k = 17, .a_dtype = .f16 },
    .{ .m = 257, .n = 70, .k = 600 }, // KC blocks with a tail
    .{ .m = 300, .n = 300, .k = 300, .a_dtype = .f16 },
    .{ .m = 1100, .n = 7, .k = 530, .a_layout = .transposed },
    .{ .m = 129, .n = 65, .k = 257, .b_layout = .strided, .c_layout = .transposed },
    .{ .m = 99, .n = 70, .k = 301, .a_layout = .strided, .a_dtype = .f16 },
    .{ .m = 40, .n = 5000, .k = 9 }, // more than one NC block
    .{ .m = 1000, .n = 128, .k = 700 }, // the dynamic schedule, a short last unit
    .{ .m = 777, .n = 13, .k = 300, .a_dtype = .f16, .b_layout = .strided, .c_layout = .transposed },
    .{ .m = 2 * gemm.mr * gemm.unit_panels_max * 8 + 5, .n = 30, .k = 2 * gemm.kc_max, .a_layout = .transposed },
    .{ .m = 400, .n = 25, .k = 200, .a_layout = .padded },
};

test "gemm: prepacked A gives bitwise the unpacked result, on any thread count" {
    // The reference is the plain sgemm on one thread; the prepacked product must equal it bit
    // for bit whatever threads packed A (1, 2, 3) and whatever threads compute (1, 2, 3).
    for (prepack_cases, 0..) |case, i| {
        var problem = try Problem.init(case, 41000 + i);
        defer problem.deinit();
        // f16 A with unit element strides (A's and B's) takes the dot path (ggml's order), never
        // prepacked: only the f16 cases with strided operands here are packed.
        if (case.a_dtype == .f16 and gemm.prepacked_size_bytes(&problem.args) == 0) continue;
        if (gemm.prepacked_size_bytes(&problem.args) == 0) {
            std.debug.print("case {any} takes the dot path\n", .{case});
            return error.TestUnexpectedResult;
        }
        const c_words: []align(1) u32 = std.mem.bytesAsSlice(u32, problem.c[0 .. problem.c.len / 4 * 4]);
        @memset(c_words, sentinel);
        try runThreads(&problem.args, 1);
        try problem.check();
        const first = try testing.allocator.alloc(u8, problem.c.len);
        defer testing.allocator.free(first);
        @memcpy(first, problem.c);
        for ([_]u32{ 1, 2, 3 }) |pack_threads| for ([_]u32{ 1, 2, 3 }) |threads| {
            @memset(c_words, sentinel);
            try runPrepacked(&problem.args, pack_threads, threads);
            if (!std.mem.eql(u8, first, problem.c)) {
                std.debug.print("case {any}: prepacked on {} (packed on {}) differs\n", .{ case, threads, pack_threads });
                return error.TestNotDeterministic;
            }
        };
    }
}

test "gemm: every edge tail prepacked equals unpacked bitwise" {
    var seed: u64 = 43000;
    for (edge_sizes) |m| for ([_]usize{ 5, 13, 33, 70 }) |n| for (edge_k) |k| for ([_]node.DType{ .f32, .f16 }) |dtype| {
        seed += 1;
        var problem = try Problem.init(.{ .m = m, .n = n, .k = k, .a_dtype = dtype }, seed);
        defer problem.deinit();
        if (gemm.prepacked_size_bytes(&problem.args) == 0) continue; // the dot path: see below
        try runThreads(&problem.args, 1);
        const first = try testing.allocator.dupe(u8, problem.c);
        defer testing.allocator.free(first);
        try runPrepacked(&problem.args, 2, 2);
        try testing.expectEqualSlices(u8, first, problem.c);
    };
}

test "gemm: shapes on the dot-product path are never prepacked" {
    // The dot path streams A unpacked; a plan must not spend memory packing it.
    const dot_cases = [_]Case{
        .{ .m = 100, .n = 1, .k = 257 },
        .{ .m = 103, .n = 37, .k = 300 },
        .{ .m = 64, .n = 4, .k = 3 },
        // f16 A with unit element stride: always the dot path (ggml's vec_dot_f16 / tinyBLAS order).
        .{ .m = 300, .n = 300, .k = 300, .a_dtype = .f16 },
    };
    for (dot_cases, 0..) |case, i| {
        var problem = try Problem.init(case, 44000 + i);
        defer problem.deinit();
        try testing.expectEqual(@as(usize, 0), gemm.prepacked_size_bytes(&problem.args));
    }
    var problem = try Problem.init(.{ .m = 33, .n = 5, .k = 7 }, 44100);
    defer problem.deinit();
    // MR-row panels of all of K, the last padded with zero rows.
    const panels = (33 + gemm.mr - 1) / gemm.mr;
    try testing.expectEqual(panels * 7 * gemm.mr * @sizeOf(f32), gemm.prepacked_size_bytes(&problem.args));
}
