//! A graph plan: a validated copy of the node table, its work buffer, and the buffers it touches.
//! Computing a plan is one job on the pool: every thread walks every node, computes its share,
//! and waits at the barrier before the next node.

const std = @import("std");
const assert = std.debug.assert;
const node_abi = @import("node.zig");
const pool_module = @import("pool.zig");

const Node = node_abi.Node;
const Status = node_abi.Status;
const Work = node_abi.Work;

/// Nodes in one plan. A named limit so a too-big graph fails with a clear message.
pub const nodes_max = 1 << 22;

pub const Kernels = struct {
    compute_node: *const fn (node: *const Node, work: *const Work) callconv(.c) c_int,
    work_size: *const fn (node: *const Node, thread_count: u32) callconv(.c) u64,
};

pub const Plan = struct {
    nodes: []Node,
    work: []align(64) u8,
    /// Handles of every buffer the nodes point into, checked alive before each compute.
    buffer_handles: []u32,
    thread_count: u32,
    /// The kernel build (SIMD level) chosen when the plan was made; work sizes depend on it.
    kernels: Kernels,
    /// When set (by `graft_plan_profile`), thread 0 records each node's wall time here,
    /// measured up to the barrier after it, so it includes waiting for the slowest thread.
    node_nanoseconds: ?[]u64 = null,
    computing: std.atomic.Value(bool) = .init(false),
};

/// The outcome of one compute: the first failing node, if any.
pub const Outcome = struct {
    status: Status,
    node_index: u32,
};

const Execution = struct {
    plan: *const Plan,
    kernels: Kernels,
    barrier: pool_module.Barrier,
    first_error: std.atomic.Value(i32) = .init(0),
    error_node: std.atomic.Value(u32) = .init(0),

    fn run(context: *anyopaque, thread_index: u32, thread_count: u32) void {
        const self: *Execution = @ptrCast(@alignCast(context));
        const work: Work = .{
            .thread_index = thread_index,
            .thread_count = thread_count,
            .scratch = self.plan.work.ptr,
            .scratch_size_bytes = self.plan.work.len,
            .barrier_context = &self.barrier,
            .barrier = pool_module.Barrier.wait_c,
        };
        const timings = if (thread_index == 0) self.plan.node_nanoseconds else null;
        var started = if (timings != null) std.time.nanoTimestamp() else 0;
        for (self.plan.nodes, 0..) |*node, index| {
            if (self.first_error.load(.monotonic) == 0) {
                const status = self.kernels.compute_node(node, &work);
                if (status != 0) self.record_error(status, @intCast(index));
            }
            // No barrier after the last node: the pool's join is one.
            if (index + 1 < self.plan.nodes.len) self.barrier.wait();
            if (timings) |out| {
                const now = std.time.nanoTimestamp();
                out[index] = @intCast(now - started);
                started = now;
            }
        }
    }

    fn record_error(self: *Execution, status: c_int, index: u32) void {
        if (self.first_error.cmpxchgStrong(0, status, .acq_rel, .monotonic) == null) {
            self.error_node.store(index, .release);
        }
    }
};

/// Runs the plan on `thread_count` threads of the pool (the caller is thread 0).
pub fn compute(plan: *Plan, pool: *pool_module.Pool) Outcome {
    if (plan.computing.swap(true, .acquire)) return .{ .status = .busy, .node_index = 0 };
    defer plan.computing.store(false, .release);
    if (plan.nodes.len == 0) return .{ .status = .ok, .node_index = 0 };
    const thread_count = @min(plan.thread_count, pool.thread_count);
    assert(thread_count >= 1);
    var execution: Execution = .{
        .plan = plan,
        .kernels = plan.kernels,
        .barrier = .{ .thread_count = thread_count },
    };
    const job: pool_module.Job = .{ .context = &execution, .run = Execution.run, .thread_count = thread_count };
    if (!pool.run(job)) return .{ .status = .busy, .node_index = 0 };
    const status: Status = @enumFromInt(execution.first_error.load(.acquire));
    return .{ .status = status, .node_index = execution.error_node.load(.acquire) };
}
