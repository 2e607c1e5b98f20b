//! mul_mat: src0 [K, M, ne02, ne03] (f32 | f16 | bf16 | block types: see quantized_src0) x src1 [K, N, ne12, ne13] f32 -> dst [M, N, ne12,
//! ne13] f32, dst[n][m] = sum_k src0[m][k] * src1[n][k]. src0 batches broadcast: batch (i12, i13)
//! uses src0 batch (i12 / (ne12 / ne02), i13 / (ne13 / ne03)), as ggml does. Each batch is one
//! `gemm.sgemm` call made by every thread with the same arguments; sgemm splits the work itself
//! (and may use the barrier, which is why every thread walks every batch).
//!
//! With many batches (attention heads) each batch is small, and splitting it costs more in
//! packing and synchronization than it saves: threads then claim whole batches from a shared
//! counter and run each one alone, in their own slice of the work buffer. sgemm gives bitwise
//! the same result on any thread count, so the result does not depend on who ran which batch.
//!
//! params[0] == `prepack_flag` marks src0 as a constant weight: a plan then packs it once
//! (`prepack`, into `Work.prepacked`) and every compute reads it from there. Only a src0 of one
//! batch is prepacked (every batch of src1 shares it); other shapes, and shapes that take the
//! dot-product path, ignore the flag (`prepacked_size` is 0 for them).

const std = @import("std");
const common = @import("common.zig");
const gemm = @import("gemm.zig");
const mul_mat_quant = @import("mul_mat_quant.zig");

const assert = common.assert;
const Tensor = common.Tensor;

pub fn mul_mat(n: *const common.Node, work: *const common.Work) common.Status {
    if (quantized_src0(n) and !mul_mat_quant.use_gemm(n)) return mul_mat_quant.mul_mat(n, work);
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    const c = Tensor.from(&n.dst);
    assert(a.ne[0] == b.ne[0]);
    assert(b.ne[2] % a.ne[2] == 0);
    assert(b.ne[3] % a.ne[3] == 0);
    if (work.scratch_size_bytes < work_size(n, work.thread_count)) return .out_of_space;
    const ratio2 = b.ne[2] / a.ne[2];
    const ratio3 = b.ne[3] / a.ne[3];
    const a_packed = prepacked_of(n, work) catch return .out_of_space;
    if (split_batches(b.ne[2] * b.ne[3], work.thread_count)) {
        claim_batches(a, b, c, a_packed, work);
        return .ok;
    }
    for (0..b.ne[3]) |batch3| {
        for (0..b.ne[2]) |batch2| {
            const batch_a: common.RowIndex = .{
                .i1 = 0,
                .i2 = batch2 / ratio2,
                .i3 = batch3 / ratio3,
            };
            const batch_bc: common.RowIndex = .{ .i1 = 0, .i2 = batch2, .i3 = batch3 };
            const args = batch_args(a, b, c, batch_a, batch_bc);
            run_gemm(&args, a_packed, work);
        }
    }
    return .ok;
}

/// bf16 and block-quantized weights: mul_mat_quant.zig's kernels for a few columns of src1, else
/// the GEMM below, which dequantizes them while packing (never prepacked: that would keep an f32
/// copy of the weights).
fn quantized_src0(n: *const common.Node) bool {
    return Tensor.from(&n.src[0]).dtype.dequantizes();
}

/// params[0] value that asks the plan to prepack src0.
pub const prepack_flag: u32 = 1;

fn run_gemm(args: *const gemm.GemmArgs, a_packed: ?[]const f32, work: *const common.Work) void {
    if (a_packed) |all| gemm.sgemm_prepacked(args, all, work) else gemm.sgemm(args, work);
}

/// Bytes of src0 prepacked, or 0 when the node is not flagged or its shape is not prepacked.
pub fn prepacked_size(n: *const common.Node) u64 {
    if (n.params[0] != prepack_flag or quantized_src0(n)) return 0;
    const a = Tensor.from(&n.src[0]);
    if (a.ne[2] != 1 or a.ne[3] != 1) return 0;
    const args = first_batch_args(n);
    return gemm.prepacked_size_bytes(&args);
}

/// Packs src0 into `work.prepacked` (this thread's share); the caller waits for every thread.
pub fn prepack(n: *const common.Node, work: *const common.Work) common.Status {
    const size = prepacked_size(n);
    if (size == 0) return .ok;
    const dest = work.prepacked orelse return .invalid_argument;
    if (work.prepacked_size_bytes != size) return .out_of_space;
    const floats: [*]f32 = @ptrCast(dest);
    const args = first_batch_args(n);
    gemm.prepack_a(&args, floats[0..@intCast(size / @sizeOf(f32))], work);
    return .ok;
}

/// The prepacked src0 the plan hands this node, or null when it computes from src0 itself.
fn prepacked_of(n: *const common.Node, work: *const common.Work) error{Size}!?[]const f32 {
    const size = prepacked_size(n);
    if (size == 0) return null;
    const all = work.prepacked orelse return null;
    if (work.prepacked_size_bytes != size) return error.Size;
    const floats: [*]const f32 = @ptrCast(all);
    return floats[0..@intCast(size / @sizeOf(f32))];
}

fn first_batch_args(n: *const common.Node) gemm.GemmArgs {
    const first: common.RowIndex = .{ .i1 = 0, .i2 = 0, .i3 = 0 };
    return batch_args(Tensor.from(&n.src[0]), Tensor.from(&n.src[1]), Tensor.from(&n.dst), first, first);
}

/// Whole batches per thread when they divide evenly or are plenty (then the last claims even
/// out the threads); a function of the shape and thread count only, as every thread must agree.
fn split_batches(batches: usize, thread_count: u32) bool {
    if (thread_count < 2) return false;
    return batches % thread_count == 0 or batches >= batches_per_thread_min * thread_count;
}

const batches_per_thread_min = 4;
/// The batch counter's line at the start of the work buffer; the threads' slices follow.
const counter_bytes = 64;

/// Bytes of one thread's slice: what one batch needs alone, rounded to keep slices aligned.
fn slice_bytes(a: Tensor, b: Tensor, c: Tensor) u64 {
    const first: common.RowIndex = .{ .i1 = 0, .i2 = 0, .i3 = 0 };
    const args = batch_args(a, b, c, first, first);
    const size: u64 = gemm.work_size_bytes(&args, 1);
    return (size + 63) / 64 * 64;
}

fn claim_batches(a: Tensor, b: Tensor, c: Tensor, a_packed: ?[]const f32, work: *const common.Work) void {
    const ratio2 = b.ne[2] / a.ne[2];
    const ratio3 = b.ne[3] / a.ne[3];
    const batches = b.ne[2] * b.ne[3];
    const slice = slice_bytes(a, b, c);
    const counter: *std.atomic.Value(usize) = @ptrCast(work.scratch);
    // Thread 0 resets the counter before anyone claims; the plan's barrier after the node keeps
    // the next node from reusing the buffer while a thread still claims.
    if (work.thread_index == 0) counter.store(0, .monotonic);
    work.sync();
    const offset: usize = @intCast(counter_bytes + slice * work.thread_index);
    const alone: common.Work = .{
        .thread_index = 0,
        .thread_count = 1,
        .scratch = @alignCast(work.scratch + offset),
        .scratch_size_bytes = slice,
        .barrier_context = work.barrier_context,
        .barrier = work.barrier, // never called with one thread
        .prepacked = work.prepacked,
        .prepacked_size_bytes = work.prepacked_size_bytes,
    };
    var batch = counter.fetchAdd(1, .monotonic);
    while (batch < batches) : (batch = counter.fetchAdd(1, .monotonic)) {
        const batch2 = batch % b.ne[2];
        const batch3 = batch / b.ne[2];
        const batch_a: common.RowIndex = .{ .i1 = 0, .i2 = batch2 / ratio2, .i3 = batch3 / ratio3 };
        const batch_bc: common.RowIndex = .{ .i1 = 0, .i2 = batch2, .i3 = batch3 };
        const args = batch_args(a, b, c, batch_a, batch_bc);
        run_gemm(&args, a_packed, &alone);
    }
}

fn batch_args(
    a: Tensor,
    b: Tensor,
    c: Tensor,
    batch_a: common.RowIndex,
    batch_bc: common.RowIndex,
) gemm.GemmArgs {
    assert(c.ne[0] == a.ne[1]);
    assert(c.ne[1] == b.ne[1]);
    return .{
        .m = a.ne[1],
        .n = b.ne[1],
        .k = a.ne[0],
        .a = @ptrFromInt(a.row_at(batch_a).base),
        .a_dtype = a.dtype,
        .a_row_stride_bytes = @intCast(a.nb[1]),
        .a_element_stride_bytes = @intCast(a.nb[0]),
        .b = @ptrFromInt(b.row_at(batch_bc).base),
        .b_row_stride_bytes = @intCast(b.nb[1]),
        .b_element_stride_bytes = @intCast(b.nb[0]),
        .c = @ptrFromInt(c.row_at(batch_bc).base),
        .c_row_stride_bytes = @intCast(c.nb[1]),
        .c_element_stride_bytes = @intCast(c.nb[0]),
    };
}

/// Every batch has the same sizes and strides, so batch 0's arguments size the scratch.
pub fn work_size(n: *const common.Node, thread_count: u32) u64 {
    if (quantized_src0(n) and !mul_mat_quant.use_gemm(n)) return mul_mat_quant.work_size(n, thread_count);
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    const c = Tensor.from(&n.dst);
    if (split_batches(b.ne[2] * b.ne[3], thread_count)) {
        return counter_bytes + slice_bytes(a, b, c) * thread_count;
    }
    const first: common.RowIndex = .{ .i1 = 0, .i2 = 0, .i3 = 0 };
    const args = batch_args(a, b, c, first, first);
    return gemm.work_size_bytes(&args, thread_count);
}
