//! mul_mat: src0 [K, M, ne02, ne03] (f32 | f16) x src1 [K, N, ne12, ne13] f32 -> dst [M, N, ne12,
//! ne13] f32, dst[n][m] = sum_k src0[m][k] * src1[n][k]. src0 batches broadcast: batch (i12, i13)
//! uses src0 batch (i12 / (ne12 / ne02), i13 / (ne13 / ne03)), as ggml does. Each batch is one
//! `gemm.sgemm` call made by every thread with the same arguments; sgemm splits the work itself
//! (and may use the barrier, which is why every thread walks every batch).

const std = @import("std");
const common = @import("common.zig");
const gemm = @import("gemm.zig");

const assert = common.assert;
const Tensor = common.Tensor;

pub fn mul_mat(n: *const common.Node, work: *const common.Work) common.Status {
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    const c = Tensor.from(&n.dst);
    assert(a.ne[0] == b.ne[0]);
    assert(b.ne[2] % a.ne[2] == 0);
    assert(b.ne[3] % a.ne[3] == 0);
    if (work.scratch_size_bytes < work_size(n, work.thread_count)) return .out_of_space;
    const ratio2 = b.ne[2] / a.ne[2];
    const ratio3 = b.ne[3] / a.ne[3];
    for (0..b.ne[3]) |batch3| {
        for (0..b.ne[2]) |batch2| {
            const batch_a: common.RowIndex = .{
                .i1 = 0,
                .i2 = batch2 / ratio2,
                .i3 = batch3 / ratio3,
            };
            const batch_bc: common.RowIndex = .{ .i1 = 0, .i2 = batch2, .i3 = batch3 };
            const args = batch_args(a, b, c, batch_a, batch_bc);
            gemm.sgemm(&args, work);
        }
    }
    return .ok;
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
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    const c = Tensor.from(&n.dst);
    const first: common.RowIndex = .{ .i1 = 0, .i2 = 0, .i3 = 0 };
    const args = batch_args(a, b, c, first, first);
    return gemm.work_size_bytes(&args, thread_count);
}
