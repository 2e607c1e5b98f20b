//! Maps a node to its kernel. `variant.zig` exports these functions under per-variant names;
//! they live here, apart from the exports, so the unit tests can call them directly.
//!
//! The core validates every node of a plan before computing it; the entry points validate again
//! (a few dozen compares, next to a kernel's work) so that no input, however it arrives, reaches
//! a kernel assert or an out-of-range address: a rejected node returns its verdict's status.

const std = @import("std");
const common = @import("common.zig");
const validate = @import("../validate.zig");
const elementwise = @import("elementwise.zig");
const reduce = @import("reduce.zig");
const norm = @import("norm.zig");
const soft_max = @import("soft_max.zig");
const rope = @import("rope.zig");
const mul_mat = @import("mul_mat.zig");
const copy = @import("copy.zig");
const unary = @import("unary.zig");
const reduce_rows = @import("reduce_rows.zig");
const indexing = @import("indexing.zig");
const sort = @import("sort.zig");
const attention = @import("attention.zig");
const conv = @import("conv.zig");
const conv2d = @import("conv2d.zig");
const group_norm = @import("group_norm.zig");
const pool = @import("pool.zig");
const interpolate = @import("interpolate.zig");
const conv_transpose = @import("conv_transpose.zig");
const view_write = @import("view_write.zig");

const assert = common.assert;
const Node = common.Node;
const Work = common.Work;
const Status = common.Status;
const Op = @import("../node.zig").Op;

/// Below this many output elements a node runs on thread 0 alone: splitting it would cost more
/// in cache-line traffic between cores than its work (the other threads go to the barrier).
pub const single_thread_elements_max = 8192;

pub fn compute_node(n: *const Node, work: *const Work) Status {
    if (work.thread_count == 0 or work.thread_index >= work.thread_count) return .invalid_argument;
    const verdict = validate.validate_node(n);
    if (verdict.status != .ok) return verdict.status;
    const op: Op = @enumFromInt(n.op);
    if (work.thread_count > 1 and !uses_barrier(op) and !fails_on_data(op) and
        n.dst.element_count() <= single_thread_elements_max)
    {
        if (work.thread_index != 0) return .ok;
        var alone = work.*;
        alone.thread_count = 1;
        return dispatch(op, n, &alone);
    }
    return dispatch(op, n, work);
}

fn dispatch(op: Op, n: *const Node, work: *const Work) Status {
    if (elementwise.unary_of(op, n, work)) |status| return status;
    if (unary.unary_math_of(op, n, work)) |status| return status;
    return switch (op) {
        .add => elementwise.binary(.add, n, work),
        .sub => elementwise.binary(.sub, n, work),
        .mul => elementwise.binary(.mul, n, work),
        .div => elementwise.binary(.div, n, work),
        .silu_mul => elementwise.silu_mul(n, work),
        .rms_norm_mul => norm.normalize(.rms_norm_mul, n, work),
        .repeat => elementwise.repeat(n, work),
        .sum => reduce.sum(n, work),
        .mean => reduce.mean(n, work),
        .norm => norm.normalize(.norm, n, work),
        .rms_norm => norm.normalize(.rms_norm, n, work),
        .soft_max => soft_max.soft_max(n, work),
        .rope => rope.rope(n, work),
        .mul_mat => mul_mat.mul_mat(n, work),
        .cpy => copy.cpy(n, work),
        .get_rows => copy.get_rows(n, work),
        .set_rows => copy.set_rows(n, work),
        .sum_rows => reduce_rows.sum_rows(n, work),
        .max_rows => reduce_rows.extreme_rows(.max, n, work),
        .min_rows => reduce_rows.extreme_rows(.min, n, work),
        .argmax => reduce_rows.argmax(n, work),
        .cumsum => reduce_rows.cumsum(n, work),
        .count_equal => reduce_rows.count_equal(n, work),
        .concat => indexing.concat(n, work),
        .pad => indexing.pad(n, work),
        .pad_circular => indexing.pad_circular(n, work),
        .acc => view_write.view_write(.acc, n, work),
        .set => view_write.view_write(.set, n, work),
        .pad_reflect_1d => indexing.pad_reflect_1d(n, work),
        .roll => indexing.roll(n, work),
        .repeat_back => indexing.repeat_back(n, work),
        .tri => indexing.mask(.tri, n, work),
        .diag_mask_inf => indexing.mask(.diag_mask_inf, n, work),
        .fill => indexing.fill(n, work),
        .arange => indexing.arange(n, work),
        .argsort => sort.argsort(n, work),
        .top_k => sort.top_k(n, work),
        .flash_attn_ext => attention.flash_attn_ext(n, work),
        .im2col => conv.im2col(n, work),
        .conv_2d => conv2d.conv_2d(n, work),
        .l2_norm => group_norm.l2_norm(n, work),
        .group_norm => group_norm.group_norm(n, work),
        .pool_1d => pool.pool(.one_d, n, work),
        .pool_2d => pool.pool(.two_d, n, work),
        .interpolate => interpolate.interpolate(n, work),
        .timestep_embedding => interpolate.timestep_embedding(n, work),
        .conv_transpose_1d => conv_transpose.conv_transpose(.one_d, n, work),
        .conv_transpose_2d => conv_transpose.conv_transpose(.two_d, n, work),
        // Unary ops returned above; anything else is no op the core knows.
        else => .unsupported,
    };
}

/// Scratch bytes the node needs with `thread_count` threads; 0 for a node that fails validation
/// (compute_node refuses it anyway).
pub fn work_size(n: *const Node, thread_count: u32) u64 {
    if (thread_count == 0) return 0;
    if (validate.validate_node(n).status != .ok) return 0;
    const op: Op = @enumFromInt(n.op);
    return switch (op) {
        .sum => reduce.sum_work_size_bytes,
        .count_equal => reduce_rows.count_work_size_bytes,
        .mul_mat => mul_mat.work_size(n, thread_count),
        .conv_2d => conv2d.work_size(n, thread_count),
        .top_k => sort.top_k_work_size(n, thread_count),
        .flash_attn_ext => attention.work_size(n, thread_count),
        .rope => rope.work_size(n, thread_count),
        else => 0,
    };
}

/// Bytes of the node's prepacked operand (0: none): only mul_mat flagged to prepack src0.
pub fn prepacked_size(n: *const Node) u64 {
    if (validate.validate_node(n).status != .ok) return 0;
    const op: Op = @enumFromInt(n.op);
    return if (op == .mul_mat) mul_mat.prepacked_size(n) else 0;
}

/// This thread's share of packing the node's prepacked operand into `work.prepacked`. Every
/// thread calls it; the caller waits at the barrier before any node reads the packed copy.
pub fn prepack(n: *const Node, work: *const Work) Status {
    if (work.thread_count == 0 or work.thread_index >= work.thread_count) return .invalid_argument;
    const verdict = validate.validate_node(n);
    if (verdict.status != .ok) return verdict.status;
    const op: Op = @enumFromInt(n.op);
    return if (op == .mul_mat) mul_mat.prepack(n, work) else .ok;
}

/// Ops whose kernel can fail on the values it reads (get_rows, set_rows on a bad index). Every
/// thread runs them, so that every thread reports the same status for the node.
pub fn fails_on_data(op: Op) bool {
    return op == .get_rows or op == .set_rows;
}

/// Ops whose kernel calls `Work.sync`, so every thread must run it concurrently.
pub fn uses_barrier(op: Op) bool {
    return op == .sum or op == .mul_mat or op == .count_equal or op == .acc or op == .set or
        op == .conv_2d or op == .flash_attn_ext;
}
