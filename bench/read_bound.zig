//! The read-only streaming bound for bench/quant_bench.ts: how fast `threads` threads can read a
//! working set of `bytes` bytes (each thread streams its contiguous half, third, ... of it with
//! 64-byte vector loads, xor-folding them so nothing but the loads is timed). A mat-vec over
//! weights of the same size cannot read them faster; its GB/s divided by this is its efficiency.
//! Usage: read_bound BYTES THREADS SECONDS   prints `read_bound bytes=<n> threads=<t> gbps=<v>`.

const std = @import("std");

const Line = @Vector(8, u64);

fn stream(part: []const u8, sink: *u64) void {
    const lines: []const Line = @as([*]const Line, @ptrCast(@alignCast(part.ptr)))[0 .. part.len / 64];
    var a: Line = @splat(0);
    var b: Line = @splat(0);
    var c: Line = @splat(0);
    var d: Line = @splat(0);
    var i: usize = 0;
    while (i + 4 <= lines.len) : (i += 4) {
        a ^= lines[i];
        b ^= lines[i + 1];
        c ^= lines[i + 2];
        d ^= lines[i + 3];
    }
    sink.* = @reduce(.Xor, a ^ b ^ c ^ d);
}

fn pass(buffer: []const u8, threads: usize, sinks: []u64) !void {
    var handles: [64]std.Thread = undefined;
    const part = buffer.len / threads / 256 * 256;
    for (1..threads) |t| handles[t] = try std.Thread.spawn(.{}, stream, .{ buffer[t * part ..][0..part], &sinks[t] });
    stream(buffer[0..part], &sinks[0]);
    for (1..threads) |t| handles[t].join();
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
    try pass(buffer, threads, &sinks); // warm-up
    var best: f64 = 0;
    var timer = try std.time.Timer.start();
    const budget: u64 = @intFromFloat(seconds * 1e9);
    var total: u64 = 0;
    while (total < budget) {
        const start = timer.read();
        try pass(buffer, threads, &sinks);
        const elapsed = timer.read() - start;
        total += elapsed;
        const part = buffer.len / threads / 256 * 256;
        const gbps = @as(f64, @floatFromInt(part * threads)) / @as(f64, @floatFromInt(elapsed));
        best = @max(best, gbps);
    }
    var fold: u64 = 0;
    for (sinks[0..threads]) |s| fold ^= s;
    std.mem.doNotOptimizeAway(fold);
    var buf: [128]u8 = undefined;
    const line = try std.fmt.bufPrint(&buf, "read_bound bytes={d} threads={d} gbps={d:.2}\n", .{ bytes, threads, best });
    try std.fs.File.stdout().writeAll(line);
}
