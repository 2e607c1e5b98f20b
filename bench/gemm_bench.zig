//! Standalone benchmark of the GEMM kernel (zig/kernels/gemm.zig), built and run by
//! bench/gemm_bench.sh, which lays this file beside a copy of zig/ as "kernels/gemm.zig".
//! Square sgemm (M = N = K) on 1 and 2 threads in GFLOP/s, skinny N in GFLOP/s, and
//! matrix-vector (N = 1) in GB/s of weights read; OpenBLAS alongside where it can be loaded.
//! Usage: gemm_bench [--quick] [--no-blas] [--square | --skinny | --block]
//! --block: the products of the demo's transformer block (dim 768, seq 128, ffn 3072) with
//! prepacked weights, as the CPU plan runs them.

const std = @import("std");
const gemm = @import("kernels/gemm.zig");
const node = @import("node.zig");
const Atomic = std.atomic.Value;

// ------------------------------------------------------------------------------------------
// A tiny persistent pool: workers spin between runs so small sizes are not timed with spawns.

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

    fn wait_c(context: *anyopaque) callconv(.c) void {
        const self: *SpinBarrier = @ptrCast(@alignCast(context));
        self.wait();
    }
};

/// Idle workers sleep on a futex, so they never steal a core from another measurement.
const Pool = struct {
    thread_count: u32,
    generation: Atomic(u32) = .init(0),
    done: SpinBarrier,
    kernel_barrier: SpinBarrier,
    args: *const gemm.GemmArgs = undefined,
    /// When set, A comes prepacked (`gemm.prepack_a`), as a plan with constant weights runs it.
    a_packed: ?[]const f32 = null,
    scratch: []align(64) u8 = &.{},
    quit: bool = false,
    threads: [8]std.Thread = undefined,

    fn init(self: *Pool, thread_count: u32) !void {
        self.* = .{
            .thread_count = thread_count,
            .done = .{ .thread_count = thread_count },
            .kernel_barrier = .{ .thread_count = thread_count },
        };
        for (1..thread_count) |t| self.threads[t] = try std.Thread.spawn(.{}, worker, .{ self, @as(u32, @intCast(t)) });
    }

    fn deinit(self: *Pool) void {
        @atomicStore(bool, &self.quit, true, .release);
        self.kick();
        for (1..self.thread_count) |t| self.threads[t].join();
    }

    fn work(self: *Pool, t: u32) node.Work {
        return .{
            .thread_index = t,
            .thread_count = self.thread_count,
            .scratch = self.scratch.ptr,
            .scratch_size_bytes = self.scratch.len,
            .barrier_context = &self.kernel_barrier,
            .barrier = SpinBarrier.wait_c,
        };
    }

    fn kick(self: *Pool) void {
        _ = self.generation.fetchAdd(1, .release);
        std.Thread.Futex.wake(&self.generation, 8);
    }

    fn worker(self: *Pool, t: u32) void {
        var seen: u32 = 0;
        while (true) {
            var spins: u32 = 0;
            while (self.generation.load(.acquire) == seen) {
                spins += 1;
                if (spins < 20000) std.atomic.spinLoopHint() else std.Thread.Futex.wait(&self.generation, seen);
            }
            seen = self.generation.load(.acquire);
            if (@atomicLoad(bool, &self.quit, .acquire)) return;
            const w = self.work(t);
            self.call(&w);
            self.done.wait();
        }
    }

    fn run(self: *Pool, args: *const gemm.GemmArgs) void {
        self.args = args;
        self.kick();
        const w = self.work(0);
        self.call(&w);
        self.done.wait();
    }

    fn call(self: *Pool, w: *const node.Work) void {
        if (self.a_packed) |a| gemm.sgemm_prepacked(self.args, a, w) else gemm.sgemm(self.args, w);
    }
};

// ------------------------------------------------------------------------------------------
// OpenBLAS, loaded at run time.

const Blas = struct {
    sgemm: *const fn (c_int, c_int, c_int, c_int, c_int, c_int, f32, [*]const f32, c_int, [*]const f32, c_int, f32, [*]f32, c_int) callconv(.c) void,
    sgemv: *const fn (c_int, c_int, c_int, c_int, f32, [*]const f32, c_int, [*]const f32, c_int, f32, [*]f32, c_int) callconv(.c) void,
    set_threads: *const fn (c_int) callconv(.c) void,

    fn load() ?Blas {
        const paths = [_][:0]const u8{ "/usr/lib/x86_64-linux-gnu/libopenblas.so.0", "libopenblas.so.0" };
        for (paths) |path| {
            const handle = std.c.dlopen(path, .{ .NOW = true }) orelse continue;
            const s = std.c.dlsym(handle, "cblas_sgemm") orelse continue;
            const v = std.c.dlsym(handle, "cblas_sgemv") orelse continue;
            const t = std.c.dlsym(handle, "openblas_set_num_threads") orelse continue;
            return .{ .sgemm = @ptrCast(s), .sgemv = @ptrCast(v), .set_threads = @ptrCast(t) };
        }
        return null;
    }
};

const row_major = 101;
const no_trans = 111;
const trans = 112;

// ------------------------------------------------------------------------------------------

/// Single-thread runs are timed in the thread's CPU time, which a busy machine disturbs less.
var clock: std.posix.clockid_t = .MONOTONIC;

fn nowNs() u64 {
    const ts = std.posix.clock_gettime(clock) catch unreachable;
    return @as(u64, @intCast(ts.sec)) * 1_000_000_000 + @as(u64, @intCast(ts.nsec));
}

/// Best time of one call, in seconds: repeats for at least `min_s` (and 3 calls).
fn timeBest(context: anytype, comptime call: fn (@TypeOf(context)) void, min_s: f64) f64 {
    call(context); // warm up
    var best: f64 = std.math.inf(f64);
    const begin = nowNs();
    var reps: usize = 0;
    while (reps < 3 or @as(f64, @floatFromInt(nowNs() - begin)) * 1e-9 < min_s) : (reps += 1) {
        const t0 = nowNs();
        call(context);
        const dt = @as(f64, @floatFromInt(nowNs() - t0)) * 1e-9;
        best = @min(best, dt);
    }
    return best;
}

const Problem = struct {
    m: usize,
    n: usize,
    k: usize,
    a32: []f32,
    a16: []f16,
    b: []f32,
    c: []f32,
    c_blas: []f32,

    fn init(allocator: std.mem.Allocator, m: usize, n: usize, k: usize) !Problem {
        var prng = std.Random.DefaultPrng.init(m * 31 + n * 7 + k);
        const rng = prng.random();
        const p: Problem = .{
            .m = m,
            .n = n,
            .k = k,
            .a32 = try allocator.alloc(f32, m * k),
            .a16 = try allocator.alloc(f16, m * k),
            .b = try allocator.alloc(f32, n * k),
            .c = try allocator.alloc(f32, n * m),
            .c_blas = try allocator.alloc(f32, n * m),
        };
        for (p.a32, p.a16) |*x, *h| {
            x.* = rng.float(f32) * 2 - 1;
            h.* = @floatCast(x.*);
        }
        for (p.b) |*x| x.* = rng.float(f32) * 2 - 1;
        return p;
    }

    fn deinit(self: *Problem, allocator: std.mem.Allocator) void {
        allocator.free(self.a32);
        allocator.free(self.a16);
        allocator.free(self.b);
        allocator.free(self.c);
        allocator.free(self.c_blas);
    }

    fn args(self: *Problem, dtype: node.DType) gemm.GemmArgs {
        const es: isize = @intCast(dtype.size_bytes());
        const k: isize = @intCast(self.k);
        const m: isize = @intCast(self.m);
        return .{
            .m = self.m,
            .n = self.n,
            .k = self.k,
            .a = if (dtype == .f16) @ptrCast(self.a16.ptr) else @ptrCast(self.a32.ptr),
            .a_dtype = dtype,
            .a_row_stride_bytes = k * es,
            .a_element_stride_bytes = es,
            .b = @ptrCast(self.b.ptr),
            .b_row_stride_bytes = k * 4,
            .b_element_stride_bytes = 4,
            .c = @ptrCast(self.c.ptr),
            .c_row_stride_bytes = m * 4,
            .c_element_stride_bytes = 4,
        };
    }
};

const OursContext = struct { pool: *Pool, args: *const gemm.GemmArgs };
fn callOurs(ctx: OursContext) void {
    ctx.pool.run(ctx.args);
}

const BlasContext = struct { blas: *const Blas, p: *Problem };
fn callBlasGemm(ctx: BlasContext) void {
    const p = ctx.p;
    const m: c_int = @intCast(p.m);
    const n: c_int = @intCast(p.n);
    const k: c_int = @intCast(p.k);
    ctx.blas.sgemm(row_major, no_trans, trans, n, m, k, 1, p.b.ptr, k, p.a32.ptr, k, 0, p.c_blas.ptr, m);
}
fn callBlasGemv(ctx: BlasContext) void {
    const p = ctx.p;
    const m: c_int = @intCast(p.m);
    const k: c_int = @intCast(p.k);
    ctx.blas.sgemv(row_major, no_trans, m, k, 1, p.a32.ptr, k, p.b.ptr, 1, 0, p.c_blas.ptr, 1);
}

fn maxRelDiff(x: []const f32, y: []const f32) f64 {
    var worst: f64 = 0;
    var scale: f64 = 0;
    for (y) |v| scale = @max(scale, @abs(@as(f64, v)));
    for (x, y) |a, b| worst = @max(worst, @abs(@as(f64, a) - @as(f64, b)));
    return worst / @max(scale, 1e-30);
}

fn ensureScratch(allocator: std.mem.Allocator, pool: *Pool, args: *const gemm.GemmArgs) !void {
    const size = gemm.work_size_bytes(args, pool.thread_count);
    if (pool.scratch.len < size) {
        if (pool.scratch.len > 0) allocator.free(pool.scratch);
        pool.scratch = try allocator.alignedAlloc(u8, .@"64", size);
    }
}

pub fn main() !void {
    const allocator = std.heap.page_allocator;
    var quick = false;
    var use_blas = true;
    var do_square = true;
    var do_skinny = true;
    var do_block = false;
    var it = std.process.args();
    _ = it.skip();
    while (it.next()) |arg| {
        if (std.mem.eql(u8, arg, "--quick")) quick = true;
        if (std.mem.eql(u8, arg, "--no-blas")) use_blas = false;
        if (std.mem.eql(u8, arg, "--square")) do_skinny = false;
        if (std.mem.eql(u8, arg, "--skinny")) do_square = false;
        if (std.mem.eql(u8, arg, "--block")) do_block = true;
    }
    // Timed: best of repeats; 1 thread in thread CPU time (less disturbed by other load), 2 in
    // wall time.
    const min_s: f64 = if (quick) 0.15 else 0.5;
    const blas: ?Blas = if (use_blas) Blas.load() else null;
    const out = std.debug.print;
    out("tiles: mr={} nr={} kc={} mc={} nc={} lanes={}  openblas: {s}\n", .{ gemm.mr, gemm.nr, gemm.kc_max, gemm.mc_max, gemm.nc_max, gemm.lanes, if (blas != null) "yes" else "no" });

    var pools: [2]Pool = undefined;
    try pools[0].init(1);
    try pools[1].init(2);
    defer for (&pools) |*p| {
        p.deinit();
        if (p.scratch.len > 0) allocator.free(p.scratch);
    };
    if (do_block) return blockShapes(allocator, &pools, blas, min_s);

    const sizes = [_]usize{ 256, 512, 1024, 2048 };
    const ns = [_]usize{ 1, 2, 3, 4, 5, 8, 16, 32, 64 };
    const mk: usize = 4096;
    // Results [case][threads-1]; OpenBLAS runs after all of ours: its idle threads spin a while.
    var sq32: [sizes.len][2]f64 = undefined;
    var sq16: [sizes.len][2]f64 = undefined;
    var sq_blas: [sizes.len][2]f64 = @splat(@splat(0));
    var sq_diff: [sizes.len][2]f64 = @splat(@splat(0));
    var sk32: [ns.len][2]f64 = undefined;
    var sk16: [ns.len][2]f64 = undefined;
    var sk_blas: [ns.len][2]f64 = @splat(@splat(0));

    for (0..2) |phase| {
        if (phase == 1 and blas == null) break;
        for (sizes, 0..) |size, si| {
            if (!do_square) break;
            var p = try Problem.init(allocator, size, size, size);
            defer p.deinit(allocator);
            const flops = 2.0 * @as(f64, @floatFromInt(size * size * size));
            for (&pools, 0..) |*pool, ti| {
                clock = if (ti == 0) .THREAD_CPUTIME_ID else .MONOTONIC;
                const args32 = p.args(.f32);
                if (phase == 0) {
                    const args16 = p.args(.f16);
                    try ensureScratch(allocator, pool, &args32);
                    try ensureScratch(allocator, pool, &args16);
                    sq16[si][ti] = flops / timeBest(OursContext{ .pool = pool, .args = &args16 }, callOurs, min_s) * 1e-9;
                    sq32[si][ti] = flops / timeBest(OursContext{ .pool = pool, .args = &args32 }, callOurs, min_s) * 1e-9;
                } else {
                    const bl = &blas.?;
                    bl.set_threads(@intCast(pool.thread_count));
                    sq_blas[si][ti] = flops / timeBest(BlasContext{ .blas = bl, .p = &p }, callBlasGemm, min_s) * 1e-9;
                    pool.run(&args32);
                    sq_diff[si][ti] = maxRelDiff(p.c, p.c_blas);
                }
            }
        }
        var p_full = try Problem.init(allocator, mk, ns[ns.len - 1], mk);
        defer p_full.deinit(allocator);
        for (ns, 0..) |n, ni| {
            if (!do_skinny) break;
            var p = p_full;
            p.n = n;
            const flops = 2.0 * @as(f64, @floatFromInt(mk * mk * n));
            for (&pools, 0..) |*pool, ti| {
                clock = if (ti == 0) .THREAD_CPUTIME_ID else .MONOTONIC;
                if (phase == 0) {
                    const args32 = p.args(.f32);
                    const args16 = p.args(.f16);
                    try ensureScratch(allocator, pool, &args32);
                    try ensureScratch(allocator, pool, &args16);
                    sk32[ni][ti] = flops / timeBest(OursContext{ .pool = pool, .args = &args32 }, callOurs, min_s) * 1e-9;
                    sk16[ni][ti] = flops / timeBest(OursContext{ .pool = pool, .args = &args16 }, callOurs, min_s) * 1e-9;
                } else {
                    const bl = &blas.?;
                    bl.set_threads(@intCast(pool.thread_count));
                    const tb = if (n == 1)
                        timeBest(BlasContext{ .blas = bl, .p = &p }, callBlasGemv, min_s)
                    else
                        timeBest(BlasContext{ .blas = bl, .p = &p }, callBlasGemm, min_s);
                    sk_blas[ni][ti] = flops / tb * 1e-9;
                }
            }
        }
    }

    out("\n== square sgemm, M = N = K (GFLOP/s) ==\n", .{});
    out("{s:>6} {s:>4} {s:>10} {s:>10} {s:>10} {s:>7}\n", .{ "n", "thr", "graft f32", "graft f16", "openblas", "ratio" });
    for (sizes, 0..) |size, si| for (0..2) |ti| {
        if (!do_square) break;
        const ratio = if (sq_blas[si][ti] > 0) sq32[si][ti] / sq_blas[si][ti] else 0;
        out("{d:>6} {d:>4} {d:>10.1} {d:>10.1} {d:>10.1} {d:>7.3}   (max rel diff vs blas {e:.1})\n", .{ size, ti + 1, sq32[si][ti], sq16[si][ti], sq_blas[si][ti], ratio, sq_diff[si][ti] });
    };
    out("\n== skinny N, M = K = {} (GFLOP/s, and GB/s of weights read) ==\n", .{mk});
    out("{s:>6} {s:>4} {s:>10} {s:>8} {s:>10} {s:>8} {s:>10} {s:>8}\n", .{ "N", "thr", "f32", "GB/s", "f16", "GB/s", "openblas", "GB/s" });
    for (ns, 0..) |n, ni| for (0..2) |ti| {
        if (!do_skinny) break;
        const per_gflop_bytes = 4.0 / (2.0 * @as(f64, @floatFromInt(n))); // weight bytes per flop, f32
        out("{d:>6} {d:>4} {d:>10.1} {d:>8.1} {d:>10.1} {d:>8.1} {d:>10.1} {d:>8.1}\n", .{ n, ti + 1, sk32[ni][ti], sk32[ni][ti] * per_gflop_bytes, sk16[ni][ti], sk16[ni][ti] * per_gflop_bytes / 2, sk_blas[ni][ti], sk_blas[ni][ti] * per_gflop_bytes });
    };
}

/// The block's products (M weight rows, N tokens, K): q/k/v/o, gate/up, down.
fn blockShapes(allocator: std.mem.Allocator, pools: *[2]Pool, blas: ?Blas, min_s: f64) !void {
    const out = std.debug.print;
    const shapes = [_][3]usize{ .{ 768, 128, 768 }, .{ 3072, 128, 768 }, .{ 768, 128, 3072 } };
    out("\n== block products, prepacked A (GFLOP/s) ==\n{s:>5} {s:>5} {s:>5} {s:>4} {s:>9} {s:>9} {s:>9}\n", .{ "M", "N", "K", "thr", "graft", "openblas", "us" });
    for (shapes) |s| {
        var p = try Problem.init(allocator, s[0], s[1], s[2]);
        defer p.deinit(allocator);
        const flops = 2.0 * @as(f64, @floatFromInt(s[0] * s[1] * s[2]));
        const args32 = p.args(.f32);
        const packed_a = try allocator.alloc(f32, gemm.prepacked_size_bytes(&args32) / 4);
        defer allocator.free(packed_a);
        const no_barrier = struct {
            fn wait(_: *anyopaque) callconv(.c) void {}
        };
        var dummy: u8 = 0;
        gemm.prepack_a(&args32, packed_a, &.{ .thread_index = 0, .thread_count = 1, .scratch = undefined, .scratch_size_bytes = 0, .barrier_context = &dummy, .barrier = no_barrier.wait });
        for (pools, 0..) |*pool, ti| {
            clock = if (ti == 0) .THREAD_CPUTIME_ID else .MONOTONIC;
            try ensureScratch(allocator, pool, &args32);
            pool.a_packed = packed_a;
            const ours = timeBest(OursContext{ .pool = pool, .args = &args32 }, callOurs, min_s);
            pool.a_packed = null;
            var theirs: f64 = 0;
            if (blas) |*bl| {
                bl.set_threads(@intCast(pool.thread_count));
                theirs = timeBest(BlasContext{ .blas = bl, .p = &p }, callBlasGemm, min_s);
            }
            out("{d:>5} {d:>5} {d:>5} {d:>4} {d:>9.1} {d:>9.1} {d:>9.1}\n", .{ s[0], s[1], s[2], ti + 1, flops / ours * 1e-9, if (theirs > 0) flops / theirs * 1e-9 else 0, ours * 1e6 });
        }
    }
}
