//! A graph plan: a validated copy of the node table, its work buffer, and the buffers it touches.
//! Computing a plan is one job on the pool: every thread walks every node, computes its share,
//! and waits at the barrier before the next node.
//!
//! Prepacked weights: nodes whose constant operand the kernels prepack (flagged mul_mat) get a
//! range of the plan's `prepacked` memory, allocated with the plan. A compute that finds the
//! plan unpacked (just made, or `request_repack` since) first packs every such node on all
//! threads, then waits at the barrier, then runs the nodes; later computes skip the packing.

const std = @import("std");
const assert = std.debug.assert;
const node_abi = @import("node.zig");
const pool_module = @import("pool.zig");
const target = @import("target.zig");

const Node = node_abi.Node;
const Status = node_abi.Status;
const Work = node_abi.Work;

/// Nodes in one plan. A named limit so a too-big graph fails with a clear message.
pub const nodes_max = 1 << 22;

/// A graph whose estimated work (`graph_work`) is below this runs on the calling thread alone:
/// waking a parked worker and meeting it at a barrier costs more than a few thousand elements
/// of work (measured on a 2-core VM: a one-row get_rows took longer on 2 threads than on 1),
/// and a woken worker then spins for the next job, taking a core from whoever needs it next
/// (an RPC server on the same machine, while this process waits for its reply).
pub const single_thread_work_max = 1 << 14;

/// A rough count of element operations of one node: its output, plus what it reads, plus the
/// inner dimension of the contractions. Only its order of magnitude matters (see
/// `single_thread_work_max`).
pub fn node_work(node: *const Node) u64 {
    const dst = count(&node.dst);
    const op: node_abi.Op = @enumFromInt(node.op);
    return switch (op) {
        .mul_mat => dst *| count_dim(node.src[0].ne[0]),
        .flash_attn_ext => dst *| count_dim(node.src[1].ne[1]),
        .conv_2d => dst *| (count_dim(node.src[0].ne[0]) *| count_dim(node.src[0].ne[1]) *| count_dim(node.src[0].ne[2])),
        // A lookup reads its rows, not the whole table.
        .get_rows => dst +| count(&node.src[1]),
        else => blk: {
            var total = dst;
            for (node.src[0..@min(node.src_count, node_abi.sources_max)]) |*src| total +|= count(src);
            break :blk total;
        },
    };
}

/// The sum of `node_work` over a graph, saturating.
pub fn graph_work(nodes: []const Node) u64 {
    var total: u64 = 0;
    for (nodes) |*node| total +|= node_work(node);
    return total;
}

/// Threads to run a plan of `nodes` made for `thread_count`: one when the graph is tiny.
pub fn run_threads(nodes: []const Node, thread_count: u32) u32 {
    return if (graph_work(nodes) < single_thread_work_max) 1 else thread_count;
}

fn count(desc: *const node_abi.TensorDesc) u64 {
    var total: u64 = 1;
    for (desc.ne) |ne| total *|= count_dim(ne);
    return total;
}

fn count_dim(ne: i64) u64 {
    return @intCast(@max(ne, 0));
}

pub const Kernels = struct {
    compute_node: *const fn (node: *const Node, work: *const Work) callconv(.c) c_int,
    work_size: *const fn (node: *const Node, thread_count: u32) callconv(.c) u64,
    prepacked_size: *const fn (node: *const Node) callconv(.c) u64,
    prepack: *const fn (node: *const Node, work: *const Work) callconv(.c) c_int,
};

/// One node's range of `Plan.prepacked`; size 0 when the node has none.
pub const PrepackedRange = struct {
    offset: u64,
    size_bytes: u64,
};

/// Prepacked ranges start on this boundary (a cache line, as kernels expect of `Work.scratch`).
pub const prepacked_alignment = 64;

pub const Plan = struct {
    nodes: []Node,
    work: []align(64) u8,
    /// Handles of every buffer the nodes point into, checked alive before each compute.
    buffer_handles: []u32,
    thread_count: u32,
    /// Threads a compute uses: `thread_count`, or 1 for a tiny graph (`run_threads`).
    run_thread_count: u32,
    /// The kernel build (SIMD level) chosen when the plan was made; work sizes depend on it.
    kernels: Kernels,
    /// When set (by `graft_plan_profile`), thread 0 records each node's wall time here,
    /// measured up to the barrier after it, so it includes waiting for the slowest thread.
    node_nanoseconds: ?[]u64 = null,
    computing: std.atomic.Value(bool) = .init(false),
    /// Packed copies of the nodes' constant operands; empty when no node has one.
    prepacked: []align(64) u8,
    /// Per node (as many as `nodes`, or empty with `prepacked`), its range of `prepacked`.
    prepacked_ranges: []PrepackedRange,
    /// Repack requests so far, and the count the packed copies reflect: they differ when the
    /// next compute must pack. A count, not a flag, so that a request made while a compute
    /// packs is never lost when that compute finishes.
    pack_requests: target.Counter64 = .init(1),
    packed_requests: u64 = 0,

    /// Marks the packed copies stale: the next compute packs again.
    pub fn request_repack(self: *Plan) void {
        _ = self.pack_requests.fetchAdd(1, .acq_rel);
    }

    fn prepacked_for(self: *const Plan, index: usize) struct { ?[*]align(64) u8, u64 } {
        if (self.prepacked_ranges.len == 0) return .{ null, 0 };
        const range = self.prepacked_ranges[index];
        if (range.size_bytes == 0) return .{ null, 0 };
        assert(range.offset % prepacked_alignment == 0);
        assert(range.offset + range.size_bytes <= self.prepacked.len);
        return .{ @alignCast(self.prepacked.ptr + @as(usize, @intCast(range.offset))), range.size_bytes };
    }
};

/// Nanoseconds of a monotonic clock. Only reached with timings on, which a build without a
/// clock refuses (graft_plan_profile), so the wasm build never calls it.
fn timestamp() i128 {
    if (comptime !target.clock_available) unreachable;
    return std.time.nanoTimestamp();
}

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
    /// Whether this compute packs the prepacked operands first, and (set by thread 0 after the
    /// packing barrier) whether every thread packed without error.
    pack: bool,
    packed_ok: bool = false,

    fn run(context: *anyopaque, thread_index: u32, thread_count: u32) void {
        const self: *Execution = @ptrCast(@alignCast(context));
        var work: Work = .{
            .thread_index = thread_index,
            .thread_count = thread_count,
            .scratch = self.plan.work.ptr,
            .scratch_size_bytes = self.plan.work.len,
            .barrier_context = &self.barrier,
            .barrier = pool_module.Barrier.wait_c,
        };
        if (self.pack) {
            self.pack_all(&work);
            // No node may read a packed copy before every thread has written its share.
            self.barrier.wait();
            if (thread_index == 0) self.packed_ok = self.first_error.load(.acquire) == 0;
        }
        // Timings start after the packing: they measure the steady-state nodes.
        const timings = if (thread_index == 0) self.plan.node_nanoseconds else null;
        var started = if (timings != null) timestamp() else 0;
        for (self.plan.nodes, 0..) |*node, index| {
            work.prepacked, work.prepacked_size_bytes = self.plan.prepacked_for(index);
            if (self.first_error.load(.monotonic) == 0) {
                const status = self.kernels.compute_node(node, &work);
                if (status != 0) self.record_error(status, @intCast(index));
            }
            // No barrier after the last node: the pool's join is one.
            if (index + 1 < self.plan.nodes.len) self.barrier.wait();
            if (timings) |out| {
                const now = timestamp();
                out[index] = @intCast(now - started);
                started = now;
            }
        }
    }

    /// This thread's share of packing every node's prepacked operand; each node's packing is
    /// split by the kernel itself, so no barrier between nodes.
    fn pack_all(self: *Execution, work: *Work) void {
        for (self.plan.nodes, 0..) |*node, index| {
            work.prepacked, work.prepacked_size_bytes = self.plan.prepacked_for(index);
            if (work.prepacked == null) continue;
            const status = self.kernels.prepack(node, work);
            if (status != 0) self.record_error(status, @intCast(index));
        }
        work.prepacked = null;
        work.prepacked_size_bytes = 0;
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
    const thread_count = @min(plan.run_thread_count, pool.thread_count);
    assert(thread_count >= 1);
    const requests = plan.pack_requests.load(.acquire);
    var execution: Execution = .{
        .plan = plan,
        .kernels = plan.kernels,
        .barrier = .{ .thread_count = thread_count },
        .pack = plan.prepacked.len > 0 and plan.packed_requests != requests,
    };
    const job: pool_module.Job = .{ .context = &execution, .run = Execution.run, .thread_count = thread_count };
    if (!pool.run(job)) return .{ .status = .busy, .node_index = 0 };
    // A failed packing leaves the plan unpacked: the next compute tries again.
    if (execution.pack and execution.packed_ok) plan.packed_requests = requests;
    const status: Status = @enumFromInt(execution.first_error.load(.acquire));
    return .{ .status = status, .node_index = execution.error_node.load(.acquire) };
}

fn test_node(op: node_abi.Op, dst: [4]i64, srcs: []const [4]i64) Node {
    var node = std.mem.zeroes(Node);
    node.op = @intFromEnum(op);
    node.dst.ne = dst;
    node.src_count = @intCast(srcs.len);
    for (srcs, 0..) |ne, i| node.src[i].ne = ne;
    return node;
}

test "a tiny graph runs on one thread, a real one on all" {
    // One embedding row looked up in a 49152-row table: the table is not read, only the row.
    const lookup = test_node(.get_rows, .{ 576, 1, 1, 1 }, &.{ .{ 576, 49152, 1, 1 }, .{ 1, 1, 1, 1 } });
    try std.testing.expectEqual(@as(u32, 1), run_threads(&.{lookup}, 2));
    // A 576x576 mat-vec is 331,776 multiply-adds.
    const product = test_node(.mul_mat, .{ 576, 1, 1, 1 }, &.{ .{ 576, 576, 1, 1 }, .{ 576, 1, 1, 1 } });
    try std.testing.expectEqual(@as(u32, 2), run_threads(&.{ lookup, product }, 2));
    // Small element-wise nodes add up.
    const add = test_node(.add, .{ 4096, 1, 1, 1 }, &.{ .{ 4096, 1, 1, 1 }, .{ 4096, 1, 1, 1 } });
    try std.testing.expectEqual(@as(u32, 1), run_threads(&.{add}, 4));
    try std.testing.expectEqual(@as(u32, 4), run_threads(&.{ add, add }, 4));
    // Negative (invalid) extents count as empty, and huge ones saturate instead of overflowing.
    const huge = test_node(.mul_mat, .{ 1 << 40, 1 << 40, 1, 1 }, &.{ .{ 1 << 40, -3, 1, 1 }, .{ 1, 1, 1, 1 } });
    try std.testing.expectEqual(@as(u32, 3), run_threads(&.{huge}, 3));
}
