//! acc and set (ggml_acc, ggml_set, as ggml-cpu's ops.cpp): dst = src0, then src1 added (acc)
//! or written (set) into the view of dst that the params describe (strides nb1, nb2, nb3 and
//! an offset, in elements; nb0 one element; src1's shape).
//!
//! Two phases: the threads copy src0 into dst by rows (skipped when dst is src0's memory, an
//! in-place node), wait at the barrier, then split src1's rows. validate.zig admits only views
//! whose rows, planes and batches lie apart, so no dst element is written by two threads.

const std = @import("std");
const common = @import("common.zig");
const copy = @import("copy.zig");
const validate = @import("../validate.zig");

const assert = common.assert;
const Tensor = common.Tensor;
const dims_max = common.dims_max;
const lanes = common.lanes;

pub const ViewWrite = validate.ViewWrite;

pub fn view_write(comptime op: ViewWrite, n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    assert(dst.element_count() == a.element_count());
    assert(dst.dtype == b.dtype);
    // Every thread takes this exit or none does: the barrier below is reached by all or none.
    const params = validate.view_params(n) orelse return .invalid_argument;
    if (dst.base != a.base) {
        const range = common.thread_range(dst.rows(), work);
        for (range.begin..range.end) |row| {
            copy.convert_row(dst.row(row), dst.dtype, a.row(row), a.dtype, dst.ne[0]);
        }
    }
    work.sync();
    const view = view_of(dst, b, params);
    const range = common.thread_range(b.rows(), work);
    for (range.begin..range.end) |row| {
        const index = b.row_index(row);
        const to = view.row_at(index);
        const from = b.row_at(index);
        if (op == .set) {
            copy.convert_row(to, dst.dtype, from, b.dtype, b.ne[0]);
        } else {
            acc_row(to, from, b.ne[0], dst.dtype);
        }
    }
    return .ok;
}

/// The view of dst that src1 lands on: src1's shape, the params' strides, in bytes.
fn view_of(dst: Tensor, b: Tensor, params: validate.ViewParams) Tensor {
    const size = dst.size_bytes();
    var view: Tensor = .{ .base = undefined, .ne = b.ne, .nb = undefined, .dtype = dst.dtype };
    for (0..dims_max) |d| view.nb[d] = @as(usize, @intCast(params.nb[d])) * size;
    const offset: usize = @intCast(params.offset);
    // validate.zig: the view's last element lies inside dst.
    assert(offset < dst.element_count());
    view.base = dst.base + offset * size;
    return view;
}

/// to[i] += from[i] in f32 (f16 widened and rounded back once, as ggml's f16 add).
fn acc_row(to: common.Strided, from: common.Strided, count: usize, dtype: common.DType) void {
    assert(dtype == .f32 or dtype == .f16);
    var i: usize = 0;
    while (i < count) : (i += lanes) {
        const chunk = @min(lanes, count - i);
        if (dtype == .f16) {
            const sum = common.load_chunk_f16(to, i, chunk) + common.load_chunk_f16(from, i, chunk);
            common.store_chunk_f16(to, i, chunk, sum);
        } else {
            const sum = common.load_chunk(to, i, chunk, 0) + common.load_chunk(from, i, chunk, 0);
            common.store_chunk(to, i, chunk, sum);
        }
    }
}
