//! argsort and top_k (ggml-cpu ops.cpp): per row of src0 (f32 or f16), the i32 column indices
//! in sorted order (argsort: ascending or descending by params[0]), or the indices of the k
//! largest (top_k, k = dst.ne[0]).
//!
//! ggml sorts with std::sort (not stable; its top_k says the order is unspecified). Graft uses a
//! stable sort (std.sort.block: in place, no allocation), so equal values keep column order and
//! the result is one defined permutation that every backend reproduces; top_k returns its k
//! indices in descending order of value. NaN sorts as larger than every number (last when
//! ascending, first when descending), so the order is total and no comparison is undefined.
//! Rows are split across threads.

const std = @import("std");
const common = @import("common.zig");

const assert = common.assert;
const Strided = common.Strided;
const Tensor = common.Tensor;
const DType = common.DType;

/// ggml_sort_order.
pub const Order = enum(u32) { ascending = 0, descending = 1 };

/// Bytes of one thread's top_k index buffer: a row of src0's column indices, in whole cache lines.
pub fn top_k_row_bytes(columns: usize) usize {
    return std.mem.alignForward(usize, columns * @sizeOf(i32), 64);
}

pub fn top_k_work_size(n: *const common.Node, thread_count: u32) u64 {
    const columns: usize = @intCast(n.src[0].ne[0]);
    return @as(u64, thread_count) * top_k_row_bytes(columns);
}

const Row = struct {
    values: Strided,
    dtype: DType,
    order: Order,

    fn value(self: Row, column: i32) f32 {
        const at = self.values.at(@intCast(column));
        return if (self.dtype == .f32) common.load_f32(at) else common.load_f16(at);
    }

    /// Strictly before: a total order on values with NaN above everything; ties are left to
    /// the stable sort (column order).
    fn before(self: Row, a: i32, b: i32) bool {
        const x = self.value(a);
        const y = self.value(b);
        const larger = (x > y) or (std.math.isNan(x) and !std.math.isNan(y));
        const smaller = (x < y) or (!std.math.isNan(x) and std.math.isNan(y));
        return if (self.order == .descending) larger else smaller;
    }
};

fn sort_row(indices: []i32, row: Row) void {
    for (indices, 0..) |*index, column| index.* = @intCast(column);
    std.sort.block(i32, indices, row, Row.before);
}

pub fn argsort(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    assert(dst.nb[0] == @sizeOf(i32)); // validate: dst rows are contiguous i32
    const order: Order = @enumFromInt(@as(u32, @intFromFloat(n.param_f32(0))));
    const range = common.thread_range(src.rows(), work);
    for (range.begin..range.end) |row| {
        const index = src.row_index(row);
        // validate: the dst rows are contiguous, 4-byte aligned i32, so a row is the sort's
        // own buffer.
        const base = dst.row_at(index).base;
        assert(base % @alignOf(i32) == 0);
        const out: [*]i32 = @ptrFromInt(base);
        sort_row(out[0..dst.ne[0]], .{ .values = src.row_at(index), .dtype = src.dtype, .order = order });
    }
    return .ok;
}

pub fn top_k(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    const columns = src.ne[0];
    const row_bytes = top_k_row_bytes(columns);
    // Every thread sees the same scratch size, so all agree on this status.
    if (work.scratch_size_bytes < @as(u64, work.thread_count) * row_bytes) return .out_of_space;
    const base = @intFromPtr(work.scratch) + work.thread_index * row_bytes;
    const buffer: [*]i32 = @ptrFromInt(base);
    const range = common.thread_range(src.rows(), work);
    for (range.begin..range.end) |row| {
        const index = src.row_index(row);
        sort_row(buffer[0..columns], .{ .values = src.row_at(index), .dtype = src.dtype, .order = .descending });
        const out = dst.row_at(index);
        for (0..dst.ne[0]) |i| common.store_u32(out.at(i), @bitCast(buffer[i]));
    }
    return .ok;
}
