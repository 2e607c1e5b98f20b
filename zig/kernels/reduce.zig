//! Reductions: sum (every element to one value) and mean (each row to one value).
//!
//! Rows are summed in f64 with one accumulator per lane, in chunks of `lanes`, the same way for
//! contiguous and strided rows. `sum` cuts the rows into a fixed number of chunks that does not
//! depend on the thread count, sums each chunk into scratch, and after the barrier thread 0 adds
//! the chunk sums in order: the result is bitwise identical for any thread count.

const std = @import("std");
const common = @import("common.zig");

const assert = common.assert;
const F64x = common.F64x;
const Strided = common.Strided;
const Tensor = common.Tensor;
const lanes = common.lanes;

/// Row chunks of `sum`: enough to keep 16+ threads busy, small enough that the final serial
/// addition is free.
pub const sum_chunk_count = 64;
pub const sum_work_size_bytes = sum_chunk_count * @sizeOf(f64);

comptime {
    assert(sum_work_size_bytes % 64 == 0);
}

/// Sum of a row's elements in f64.
pub fn row_sum(row: Strided, count: usize) f64 {
    assert(count >= 1);
    var total: F64x = @splat(0);
    var index: usize = 0;
    while (index < count) : (index += lanes) {
        const chunk = @min(lanes, count - index);
        total += @as(F64x, @floatCast(common.load_chunk(row, index, chunk, 0)));
    }
    return @reduce(.Add, total);
}

pub fn sum(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    assert(dst.element_count() == 1);
    // Every thread sees the same scratch size, so all take this exit and none waits alone.
    if (work.scratch_size_bytes < sum_work_size_bytes) return .out_of_space;
    const partials: *[sum_chunk_count]f64 = @ptrCast(@alignCast(work.scratch));
    const rows = src.rows();
    const rows_per_chunk = (rows + sum_chunk_count - 1) / sum_chunk_count;
    const chunks = common.thread_range(sum_chunk_count, work);
    for (chunks.begin..chunks.end) |chunk| {
        const begin = @min(rows, chunk * rows_per_chunk);
        const end = @min(rows, begin + rows_per_chunk);
        var total: f64 = 0;
        for (begin..end) |row| total += row_sum(src.row(row), src.ne[0]);
        partials[chunk] = total;
    }
    work.sync();
    if (work.thread_index == 0) {
        var total: f64 = 0;
        for (partials) |partial| total += partial;
        common.store_f32(dst.base, @floatCast(total));
    }
    return .ok;
}

pub fn mean(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    assert(dst.ne[0] == 1);
    assert(dst.rows() == src.rows());
    const count: f64 = @floatFromInt(src.ne[0]);
    const range = common.thread_range(src.rows(), work);
    for (range.begin..range.end) |row| {
        const index = src.row_index(row);
        const value = row_sum(src.row_at(index), src.ne[0]) / count;
        common.store_f32(dst.row_at(index).base, @floatCast(value));
    }
    return .ok;
}
