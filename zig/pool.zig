//! A persistent thread pool. Workers start once and park on a futex between jobs; inside a job
//! (one graph) threads meet at a spinning barrier between dependent nodes, which costs far less
//! than a futex round trip. After a job a worker spins briefly for the next one, then sleeps, so
//! an idle pool uses no CPU.
//!
//! Target-aware: a single-threaded build (wasm32 without shared memory) has `threads_max` 1 and
//! no workers; `run` then runs the job on the calling thread, and the barrier is a no-op. The
//! threaded wasm32 build (shared memory) cannot spawn threads: the JS loader starts Web Workers
//! once per instance, each parks in `crew` (`graft_wasm_worker`), and every pool hands its jobs
//! to that crew. There the calling thread (a page's main thread, which may not block) only
//! spins; the workers park on `memory.atomic.wait32` (std.Thread.Futex).

const std = @import("std");
const assert = std.debug.assert;
const Atomic = std.atomic.Value;
const Futex = std.Thread.Futex;
const target = @import("target.zig");

pub const threads_max = if (target.threads_available) 64 else 1;
/// A worker's thread; nothing in a build without threads of its own (std.Thread does not
/// compile there; the threaded wasm build's workers belong to the JS loader).
const Worker = if (target.native_threads) std.Thread else void;
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
    // wasm has no yield: a worker that spins long is the engine's to schedule.
    if (comptime target.wasm_workers) return;
    std.Thread.yield() catch {};
}

/// The threaded wasm build's workers: one pool whose workers are the JS loader's Web Workers
/// (worker i runs `crew.worker_main(i)` for the instance's life). Every `Pool` of that build
/// runs its jobs on it. Unused elsewhere.
pub var crew: Pool = .{ .thread_count = 1 };

/// Workers that have left `crew.worker_main` since the crew was sized.
pub var crew_exited: Atomic(u32) = .init(0);

/// Sizes the crew before the loader starts its `worker_count` workers; false when a crew runs.
pub fn crew_init(worker_count: u32) bool {
    if (comptime !target.wasm_workers) return worker_count == 0;
    if (worker_count == 0 or worker_count + 1 > threads_max or crew.thread_count != 1) return false;
    crew = .{ .thread_count = worker_count + 1 };
    crew_exited.store(0, .release);
    return true;
}

/// Stops the crew: wakes its workers, spins until each has left its loop (the caller may be a
/// page's main thread, which cannot block), and leaves a crew of one thread, ready for
/// `crew_init` again. False when no crew runs or it is running a job.
pub fn crew_stop() bool {
    if (comptime !target.wasm_workers) return false;
    if (crew.thread_count == 1 or crew.busy.load(.acquire)) return false;
    const workers = crew.thread_count - 1;
    crew.stop();
    while (crew_exited.load(.acquire) != workers) std.atomic.spinLoopHint();
    crew = .{ .thread_count = 1 };
    return true;
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
        // The crew's workers run this pool's jobs: as many threads as it has, at most.
        if (comptime target.wasm_workers) {
            if (thread_count > crew.thread_count) return error.SystemResources;
            return;
        }
        errdefer self.stop();
        if (comptime target.native_threads) {
            for (1..thread_count) |index| {
                self.workers[index] = try std.Thread.spawn(.{}, worker_main, .{ self, @as(u32, @intCast(index)) });
                self.worker_count += 1;
            }
        }
    }

    /// Wakes and joins every worker. The pool must not be running a job.
    pub fn stop(self: *Pool) void {
        assert(!self.busy.load(.acquire));
        // The crew's workers outlive every pool; the crew itself stops (crew_stop).
        if (comptime target.wasm_workers) {
            if (self != &crew) return;
        }
        self.shutdown.store(true, .release);
        _ = self.job_generation.fetchAdd(1, .release);
        Futex.wake(&self.job_generation, threads_max);
        if (comptime target.native_threads) {
            for (1..self.worker_count + 1) |index| self.workers[index].join();
        }
        self.worker_count = 0;
    }

    /// Runs the job on `job.thread_count` threads (the caller is thread 0) and returns when all
    /// have finished. Returns false, running nothing, when another job is in progress.
    pub fn run(self: *Pool, job: Job) bool {
        assert(job.thread_count >= 1 and job.thread_count <= self.thread_count);
        if (comptime target.wasm_workers) {
            if (self != &crew) {
                // One thread needs no worker; more than the crew has (it was stopped) cannot run.
                if (job.thread_count == 1) {
                    job.run(job.context, 0, 1);
                    return true;
                }
                if (job.thread_count > crew.thread_count) return false;
                return crew.run(job);
            }
        }
        if (self.busy.swap(true, .acquire)) return false;
        defer self.busy.store(false, .release);
        // One thread needs no worker: waking them would only set them spinning for nothing.
        if (job.thread_count == 1) {
            job.run(job.context, 0, 1);
            return true;
        }
        self.job = job;
        self.finished.store(0, .monotonic);
        _ = self.job_generation.fetchAdd(1, .release);
        Futex.wake(&self.job_generation, threads_max);
        job.run(job.context, 0, job.thread_count);
        if (comptime target.threads_available) {
            if (self.thread_count > 1) self.wait_for_workers();
        }
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
            // A page's main thread may not block (memory.atomic.wait32 traps there): spin.
            if (spins < park_spins_max or target.wasm_workers) {
                std.atomic.spinLoopHint();
                spins += 1;
            } else {
                Futex.wait(&self.finished, finished);
            }
        }
    }

    /// A worker's loop: runs each job, until `stop`. The threaded wasm build's JS workers call
    /// it on `crew` through `graft_wasm_worker`.
    pub fn worker_main(self: *Pool, thread_index: u32) void {
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

test "a job of one thread runs on the caller and wakes no worker" {
    const Context = struct {
        hits: [3]Atomic(u32) = [_]Atomic(u32){.init(0)} ** 3,
        fn run(context: *anyopaque, thread_index: u32, thread_count: u32) void {
            const self: *@This() = @ptrCast(@alignCast(context));
            std.debug.assert(thread_count == 1);
            _ = self.hits[thread_index].fetchAdd(1, .monotonic);
        }
    };
    var pool: Pool = undefined;
    try pool.start(3);
    defer pool.stop();
    var context: Context = .{};
    for (0..10) |_| try std.testing.expect(pool.run(.{ .context = &context, .run = Context.run, .thread_count = 1 }));
    try std.testing.expectEqual(@as(u32, 10), context.hits[0].load(.monotonic));
    // No worker was woken: the job generation never moved.
    try std.testing.expectEqual(@as(u32, 0), pool.job_generation.load(.monotonic));
}
