//! The read-only streaming bound for bench/quant_perf.ts: how fast `threads` threads can read a
//! working set of `bytes` bytes. Each thread reads its contiguous share with 64-byte vector
//! loads, xor-folding them so nothing but the loads is timed, as 1, 2, 4 or 8 interleaved
//! sequential streams (more streams keep more hardware prefetchers busy: one stream per thread
//! is not the most a core can read); the best of them is the bound. A mat-vec over weights of
//! the same size cannot read them faster; its GB/s divided by this is its efficiency.
//! Usage: read_bound BYTES THREADS SECONDS   prints `read_bound bytes=<n> threads=<t> gbps=<v>`.

const std = @import("std");

const Line = @Vector(4, u64);

/// One way of reading a thread's share: `S` streams in lockstep, each over a run of `chunk`
/// bytes, the S runs adjacent (chunk 0: each stream over its own contiguous 1/S of the share).
/// Adjacent runs are how a mat-vec reads a few weight rows at a time.
const Pattern = struct { streams: usize, chunk: usize };

const patterns = [_]Pattern{
    .{ .streams = 1, .chunk = 0 },
    .{ .streams = 2, .chunk = 0 },
    .{ .streams = 4, .chunk = 0 },
    .{ .streams = 8, .chunk = 0 },
    .{ .streams = 4, .chunk = 2048 },
    .{ .streams = 4, .chunk = 4096 },
    .{ .streams = 8, .chunk = 4096 },
    .{ .streams = 4, .chunk = 16384 },
};

fn read_runs(comptime S: usize, part: []const u8, chunk: usize) u64 {
    const lines: [*]const Line = @ptrCast(@alignCast(part.ptr));
    const total_lines = part.len / @sizeOf(Line);
    // Far-apart streams: one run per stream covering its 1/S; else runs of chunk/64 lines.
    const run_lines = if (chunk == 0) total_lines / S / 4 * 4 else chunk / @sizeOf(Line);
    const group_lines = run_lines * S;
    var acc: [S][4]Line = @splat(@splat(@splat(0)));
    var group: usize = 0;
    while (group + group_lines <= total_lines) : (group += group_lines) {
        var i: usize = 0;
        while (i < run_lines) : (i += 4) {
            inline for (0..S) |s| {
                inline for (0..4) |j| acc[s][j] ^= lines[group + s * run_lines + i + j];
            }
        }
    }
    var fold: Line = @splat(0);
    inline for (0..S) |s| {
        inline for (0..4) |j| fold ^= acc[s][j];
    }
    return @reduce(.Xor, fold) +% group;
}

/// Reads `part` in `pattern`; returns the bytes read (whole groups of runs).
fn stream(pattern: Pattern, part: []const u8, sink: *u64, read: *usize) void {
    const total_lines = part.len / @sizeOf(Line);
    const run_lines = if (pattern.chunk == 0) total_lines / pattern.streams / 4 * 4 else pattern.chunk / @sizeOf(Line);
    read.* = total_lines / (run_lines * pattern.streams) * run_lines * pattern.streams * @sizeOf(Line);
    sink.* = switch (pattern.streams) {
        1 => read_runs(1, part, pattern.chunk),
        2 => read_runs(2, part, pattern.chunk),
        4 => read_runs(4, part, pattern.chunk),
        else => read_runs(8, part, pattern.chunk),
    };
}

/// One pass of every thread over its share; returns the bytes read.
fn pass(buffer: []const u8, threads: usize, pattern: Pattern, sinks: []u64) !usize {
    var handles: [64]std.Thread = undefined;
    var read: [64]usize = undefined;
    const part = buffer.len / threads / 4096 * 4096;
    for (1..threads) |t| handles[t] = try std.Thread.spawn(.{}, stream, .{ pattern, buffer[t * part ..][0..part], &sinks[t], &read[t] });
    stream(pattern, buffer[0..part], &sinks[0], &read[0]);
    for (1..threads) |t| handles[t].join();
    var total: usize = 0;
    for (read[0..threads]) |r| total += r;
    return total;
}

pub fn main() !void {
    var args = std.process.args();
    _ = args.next();
    const bytes = try std.fmt.parseInt(usize, args.next() orelse return error.MissingBytes, 10);
    const threads = try std.fmt.parseInt(usize, args.next() orelse return error.MissingThreads, 10);
    const seconds = try std.fmt.parseFloat(f64, args.next() orelse "1");
    if (threads == 0 or threads > 64) return error.BadThreadCount;
    const allocator = std.heap.page_allocator;
    const buffer = try allocator.alignedAlloc(u8, .@"64", bytes);
    defer allocator.free(buffer);
    // Random-ish contents, every page touched before timing (as the weights are).
    for (buffer, 0..) |*byte, i| byte.* = @truncate(i *% 2654435761 >> 7);
    var sinks: [64]u64 = undefined;
    _ = try pass(buffer, threads, patterns[0], &sinks); // warm-up
    var best: f64 = 0;
    var timer = try std.time.Timer.start();
    const budget: u64 = @intFromFloat(seconds * 1e9 / patterns.len);
    const verbose = std.posix.getenv("READ_BOUND_VERBOSE") != null;
    for (patterns) |pattern| {
        var total: u64 = 0;
        var pattern_best: f64 = 0;
        while (total < budget) {
            const start = timer.read();
            const bytes_read = try pass(buffer, threads, pattern, &sinks);
            const elapsed = timer.read() - start;
            total += elapsed;
            pattern_best = @max(pattern_best, @as(f64, @floatFromInt(bytes_read)) / @as(f64, @floatFromInt(elapsed)));
        }
        if (verbose) std.debug.print("streams={d} chunk={d}: {d:.2} GB/s\n", .{ pattern.streams, pattern.chunk, pattern_best });
        best = @max(best, pattern_best);
    }
    var fold: u64 = 0;
    for (sinks[0..threads]) |s| fold ^= s;
    std.mem.doNotOptimizeAway(fold);
    var buf: [128]u8 = undefined;
    const line = try std.fmt.bufPrint(&buf, "read_bound bytes={d} threads={d} gbps={d:.2}\n", .{ bytes, threads, best });
    try std.fs.File.stdout().writeAll(line);
}
