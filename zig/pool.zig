//! A persistent thread pool. Workers start once and park on a futex between jobs; inside a job
//! (one graph) threads meet at a spinning barrier between dependent nodes, which costs far less
//! than a futex round trip. After a job a worker spins briefly for the next one, then sleeps, so
//! an idle pool uses no CPU.
//!
//! Target-aware: a single-threaded build (wasm32 without shared memory) has `threads_max` 1 and
//! no workers; `run` then runs the job on the calling thread, and the barrier is a no-op.

const std = @import("std");
const assert = std.debug.assert;
const Atomic = std.atomic.Value;
const Futex = std.Thread.Futex;
const target = @import("target.zig");

pub const threads_max = if (target.threads_available) 64 else 1;
/// A worker's thread; nothing in a build without threads (std.Thread does not compile there).
const Worker = if (target.threads_available) std.Thread else void;
/// Spins before a parked worker sleeps: long enough to catch back-to-back graphs.
const park_spins_max = 20_000;
/// Spins in the barrier before yielding the core, for machines with more threads than cores.
const barrier_spins_before_yield = 1 << 16;

pub const Barrier = struct {
    arrived: Atomic(u32) = .init(0),
    phase: Atomic(u32) = .init(0),
    thread_count: u32 = 1,

    pub fn wait(self: *Barrier) void {
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
            if (spins % barrier_spins_before_yield == 0) yield_core();
        }
    }

    pub fn wait_c(context: *anyopaque) callconv(.c) void {
        const self: *Barrier = @ptrCast(@alignCast(context));
        self.wait();
    }
};

fn yield_core() void {
    // Unreachable without threads: the barrier of one thread returns before spinning.
    if (comptime !target.threads_available) unreachable;
    std.Thread.yield() catch {};
}

pub const Job = struct {
    context: *anyopaque,
    run: *const fn (context: *anyopaque, thread_index: u32, thread_count: u32) void,
    thread_count: u32,
};

pub const Pool = struct {
    thread_count: u32,
    workers: [threads_max]Worker = undefined,
    worker_count: u32 = 0,
    job: ?Job = null,
    job_generation: Atomic(u32) = .init(0),
    finished: Atomic(u32) = .init(0),
    shutdown: Atomic(bool) = .init(false),
    busy: Atomic(bool) = .init(false),

    /// Starts `thread_count - 1` workers; the calling thread of `run` is thread 0.
    pub fn start(self: *Pool, thread_count: u32) std.Thread.SpawnError!void {
        assert(thread_count >= 1 and thread_count <= threads_max);
        self.* = .{ .thread_count = thread_count };
        errdefer self.stop();
        if (comptime target.threads_available) {
            for (1..thread_count) |index| {
                self.workers[index] = try std.Thread.spawn(.{}, worker_main, .{ self, @as(u32, @intCast(index)) });
                self.worker_count += 1;
            }
        }
    }

    /// Wakes and joins every worker. The pool must not be running a job.
    pub fn stop(self: *Pool) void {
        assert(!self.busy.load(.acquire));
        self.shutdown.store(true, .release);
        _ = self.job_generation.fetchAdd(1, .release);
        Futex.wake(&self.job_generation, threads_max);
        if (comptime target.threads_available) {
            for (1..self.worker_count + 1) |index| self.workers[index].join();
        }
        self.worker_count = 0;
    }

    /// Runs the job on `job.thread_count` threads (the caller is thread 0) and returns when all
    /// have finished. Returns false, running nothing, when another job is in progress.
    pub fn run(self: *Pool, job: Job) bool {
        assert(job.thread_count >= 1 and job.thread_count <= self.thread_count);
        if (self.busy.swap(true, .acquire)) return false;
        defer self.busy.store(false, .release);
        self.job = job;
        self.finished.store(0, .monotonic);
        _ = self.job_generation.fetchAdd(1, .release);
        Futex.wake(&self.job_generation, threads_max);
        job.run(job.context, 0, job.thread_count);
        if (comptime target.threads_available) self.wait_for_workers();
        self.job = null;
        return true;
    }

    fn wait_for_workers(self: *Pool) void {
        // Workers not taking part still report, so the job's memory outlives every reader.
        const expected = self.thread_count - 1;
        var spins: u32 = 0;
        while (true) {
            const finished = self.finished.load(.acquire);
            if (finished == expected) break;
            if (spins < park_spins_max) {
                std.atomic.spinLoopHint();
                spins += 1;
            } else {
                Futex.wait(&self.finished, finished);
            }
        }
    }

    fn worker_main(self: *Pool, thread_index: u32) void {
        // Generation 0 is the state before the first job; reading the counter here instead could
        // skip a job that started before this thread did.
        var seen: u32 = 0;
        while (true) {
            seen = self.wait_for_job(seen);
            if (self.shutdown.load(.acquire)) return;
            const job = self.job.?;
            if (thread_index < job.thread_count) job.run(job.context, thread_index, job.thread_count);
            _ = self.finished.fetchAdd(1, .acq_rel);
            Futex.wake(&self.finished, 1);
        }
    }

    fn wait_for_job(self: *Pool, seen: u32) u32 {
        var spins: u32 = 0;
        while (true) {
            const generation = self.job_generation.load(.acquire);
            if (generation != seen) return generation;
            if (spins < park_spins_max) {
                std.atomic.spinLoopHint();
                spins += 1;
            } else {
                Futex.wait(&self.job_generation, seen);
            }
        }
    }
};

test "every thread runs the job and meets at the barrier" {
    const Context = struct {
        barrier: Barrier,
        hits: [4]Atomic(u32) = [_]Atomic(u32){.init(0)} ** 4,
        fn run(context: *anyopaque, thread_index: u32, thread_count: u32) void {
            const self: *@This() = @ptrCast(@alignCast(context));
            _ = thread_count;
            for (0..100) |_| {
                _ = self.hits[thread_index].fetchAdd(1, .monotonic);
                self.barrier.wait();
            }
        }
    };
    var pool: Pool = undefined;
    try pool.start(4);
    defer pool.stop();
    for (0..50) |_| {
        var context: Context = .{ .barrier = .{ .thread_count = 3 } };
        try std.testing.expect(pool.run(.{ .context = &context, .run = Context.run, .thread_count = 3 }));
        for (0..3) |index| try std.testing.expectEqual(@as(u32, 100), context.hits[index].load(.monotonic));
        try std.testing.expectEqual(@as(u32, 0), context.hits[3].load(.monotonic));
    }
}
