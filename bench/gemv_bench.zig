//! Standalone benchmark of the quantized mat-vec kernels (zig/kernels/gemv_quant.zig), built and
//! run by bench/gemv_bench.sh, which lays this file beside a copy of zig/. It times what
//! mul_mat_quant.zig's fused path does for one column: 4096x4096 weights of one type, groups of
//! `rows_max` rows split evenly over the threads, a barrier after each matrix (one graph node),
//! over a rotation of copies larger than the last-level cache; and, alternating with it on the
//! same threads and buffer, a plain read of the same bytes (4 interleaved streams per thread,
//! as bench/read_bound.zig's best pattern usually is). Alternating rounds makes the ratio less
//! sensitive to the load of a shared machine than two separate processes are.
//! Usage: gemv_bench TYPE [ROTATION_MIB] [ROUNDS] [THREADS]
//! (via bench/gemv_bench.sh [avx2|avx512] TYPE ...). GEMV_ROWS (rows per dot_rows call, default
//! 4) and GEMV_SPLIT (far-apart runs read side by side, default 4) pick the row order; the
//! default is mul_mat_quant.zig's, GEMV_ROWS=8 GEMV_SPLIT=1 the groups of 8 adjacent rows it
//! read before.
//! Prints per round `round gemv=<GB/s> read=<GB/s> ratio=<r>` and a median line.

const std = @import("std");
const gemv = @import("kernels/gemv_quant.zig");
const quant = @import("quant.zig");
const node = @import("node.zig");
const Atomic = std.atomic.Value;

const K = 4096;
const M = 4096;

const SpinBarrier = struct {
    arrived: Atomic(u32) = .init(0),
    phase: Atomic(u32) = .init(0),
    thread_count: u32,

    fn wait(self: *SpinBarrier) void {
        if (self.thread_count == 1) return;
        const phase = self.phase.load(.acquire);
        if (self.arrived.fetchAdd(1, .acq_rel) + 1 == self.thread_count) {
            self.arrived.store(0, .monotonic);
            self.phase.store(phase +% 1, .release);
            return;
        }
        while (self.phase.load(.acquire) == phase) std.atomic.spinLoopHint();
    }
};

const Shared = struct {
    dtype: node.DType,
    weights: []align(64) const u8,
    copies: usize,
    matrix_bytes: usize,
    row_bytes: usize,
    activation: gemv.Activation,
    out: []f32,
    threads: u32,
    /// Rows per dot_rows call (at most rows_max): env GEMV_ROWS, default 4 (as mul_mat_quant.zig).
    rows_per_call: usize,
    /// Far-apart regions of its range a thread reads in lockstep: env GEMV_SPLIT, default 4
    /// (mul_mat_quant.zig's fused_streams).
    split: usize,
    barrier: SpinBarrier,
    sink: [16]u64 = @splat(0),
};

fn gemv_pass(s: *Shared, t: u32) void {
    const groups = M / gemv.rows_max;
    const per = (groups + s.threads - 1) / s.threads;
    const begin: usize = @min(groups, per * t);
    const end: usize = @min(groups, begin + per);
    for (0..s.copies) |c| {
        const base = s.weights.ptr + c * s.matrix_bytes;
        // Rows of the thread's range taken from `split` equal regions in lockstep, rows_per_call
        // / split adjacent rows from each.
        const first = begin * gemv.rows_max;
        const region = (end - begin) * gemv.rows_max / s.split;
        const per_region = s.rows_per_call / s.split;
        var j: usize = 0;
        while (j < region) : (j += per_region) {
            var rows: [gemv.rows_max][*]const u8 = undefined;
            var index: [gemv.rows_max]usize = undefined;
            for (0..s.split) |q| {
                for (0..per_region) |i| {
                    index[q * per_region + i] = first + q * region + j + i;
                    rows[q * per_region + i] = base + index[q * per_region + i] * s.row_bytes;
                }
            }
            var sums: [gemv.rows_max]f32 = undefined;
            gemv.dot_rows(s.dtype, &rows, s.rows_per_call, s.activation, K / gemv.qk, &sums);
            for (0..s.rows_per_call) |r| s.out[index[r]] = sums[r];
        }
        s.barrier.wait();
    }
}

const Line = @Vector(8, u64);

fn read_pass(s: *Shared, t: u32) void {
    const total = s.copies * s.matrix_bytes;
    const part = total / s.threads / 4096 * 4096;
    const lines: [*]const Line = @ptrCast(@alignCast(s.weights.ptr + t * part));
    const n = part / @sizeOf(Line);
    const run = n / 4;
    var acc: [4]Line = @splat(@splat(0));
    var i: usize = 0;
    while (i < run) : (i += 1) {
        inline for (0..4) |j| acc[j] ^= lines[j * run + i];
    }
    s.sink[t] ^= @reduce(.Xor, acc[0] ^ acc[1] ^ acc[2] ^ acc[3]);
    s.barrier.wait();
}

const Mode = enum { gemv, read };

fn worker(s: *Shared, t: u32, mode: Mode) void {
    switch (mode) {
        .gemv => gemv_pass(s, t),
        .read => read_pass(s, t),
    }
}

fn timed(s: *Shared, mode: Mode) !f64 {
    var handles: [16]std.Thread = undefined;
    var timer = try std.time.Timer.start();
    for (1..s.threads) |t| handles[t] = try std.Thread.spawn(.{}, worker, .{ s, @as(u32, @intCast(t)), mode });
    worker(s, 0, mode);
    for (1..s.threads) |t| handles[t].join();
    const ns = timer.read();
    return @as(f64, @floatFromInt(s.copies * s.matrix_bytes)) / @as(f64, @floatFromInt(ns));
}

fn lessThan(_: void, a: f64, b: f64) bool {
    return a < b;
}

pub fn main() !void {
    var args = std.process.args();
    _ = args.next();
    const type_name = args.next() orelse return error.MissingType;
    const dtype = std.meta.stringToEnum(node.DType, type_name) orelse return error.BadType;
    const rotation_mib = try std.fmt.parseInt(usize, args.next() orelse "1024", 10);
    const rounds = try std.fmt.parseInt(usize, args.next() orelse "7", 10);
    const threads = try std.fmt.parseInt(u32, args.next() orelse "2", 10);
    const allocator = std.heap.page_allocator;
    const row_bytes: usize = @intCast(quant.row_bytes(dtype, K));
    const matrix_bytes = row_bytes * M;
    const copies = @max(2, rotation_mib * (1 << 20) / matrix_bytes);
    const weights = try allocator.alignedAlloc(u8, .@"64", copies * matrix_bytes);
    defer allocator.free(weights);
    var prng = std.Random.DefaultPrng.init(1);
    const random = prng.random();
    const values = try allocator.alloc(f32, K);
    defer allocator.free(values);
    for (0..M) |r| {
        for (values) |*v| v.* = random.float(f32) * 2 - 1;
        quant.quantize_row(dtype, values, weights[r * row_bytes ..][0..row_bytes]);
    }
    for (1..copies) |c| @memcpy(weights[c * matrix_bytes ..][0..matrix_bytes], weights[0..matrix_bytes]);
    for (values) |*v| v.* = random.float(f32) * 2 - 1;
    const act = try allocator.alignedAlloc(u8, .@"64", gemv.Activation.bytes(K));
    defer allocator.free(act);
    gemv.quantize_activation(dtype, values, act.ptr);
    const out = try allocator.alloc(f32, M);
    defer allocator.free(out);
    var shared: Shared = .{
        .dtype = dtype,
        .weights = weights,
        .copies = copies,
        .matrix_bytes = matrix_bytes,
        .row_bytes = row_bytes,
        .activation = gemv.Activation.at(act.ptr, K),
        .out = out,
        .threads = threads,
        .rows_per_call = if (std.posix.getenv("GEMV_ROWS")) |v| try std.fmt.parseInt(usize, v, 10) else 4,
        .split = if (std.posix.getenv("GEMV_SPLIT")) |v| try std.fmt.parseInt(usize, v, 10) else 4,
        .barrier = .{ .thread_count = threads },
    };
    _ = try timed(&shared, .gemv);
    _ = try timed(&shared, .read);
    var ratios: [64]f64 = undefined;
    var gs: [64]f64 = undefined;
    var rs: [64]f64 = undefined;
    const n = @min(rounds, 64);
    for (0..n) |i| {
        const g = try timed(&shared, .gemv);
        const r = try timed(&shared, .read);
        gs[i] = g;
        rs[i] = r;
        ratios[i] = g / r;
        std.debug.print("round {s} gemv={d:.2} read={d:.2} ratio={d:.3}\n", .{ type_name, g, r, g / r });
    }
    std.mem.sort(f64, ratios[0..n], {}, lessThan);
    std.mem.sort(f64, gs[0..n], {}, lessThan);
    std.mem.sort(f64, rs[0..n], {}, lessThan);
    std.mem.doNotOptimizeAway(shared.sink);
    var checksum: f64 = 0;
    for (out) |v| checksum += v;
    std.debug.print("median {s} gemv={d:.2}GB/s read={d:.2}GB/s ratio={d:.3} best_gemv={d:.2} best_read={d:.2} copies={d} checksum={d:.4}\n", .{ type_name, gs[n / 2], rs[n / 2], ratios[n / 2], gs[n - 1], rs[n - 1], copies, checksum });
}
