//! Row reductions and scans: sum_rows, max_rows, min_rows, argmax, cumsum (each row of src0
//! on its own, rows split across threads) and count_equal (every element, partial counts per
//! fixed chunk of rows, summed by thread 0 after the barrier, so any thread count gives the same
//! result).
//!
//! Sums accumulate in f64 (one accumulator per lane, chunks of `lanes`, the same for contiguous
//! and strided rows), a little more exact than ggml's f32 sums. max/min/argmax scan with
//! `x > best` (or `<`), as ggml_vec_argmax_f32, so NaN never wins and ties keep the first index;
//! a row of NaN gives -inf (+inf for min) and index 0.

const std = @import("std");
const common = @import("common.zig");

const assert = common.assert;
const F32x = common.F32x;
const F64x = common.F64x;
const Strided = common.Strided;
const Tensor = common.Tensor;
const lanes = common.lanes;
const splat = common.splat;

/// Row chunks of `count_equal` (see reduce.zig's `sum_chunk_count`).
pub const count_chunk_count = 64;
pub const count_work_size_bytes = count_chunk_count * @sizeOf(u64);

comptime {
    assert(count_work_size_bytes % 64 == 0);
}

fn load(comptime dtype: common.DType, row: Strided, index: usize, count: usize, fill: f32) F32x {
    if (dtype == .f16) {
        const x = common.load_chunk_f16(row, index, count);
        return @select(f32, common.lane_mask(count), x, splat(fill));
    }
    return common.load_chunk(row, index, count, fill);
}

fn store_one(dtype: common.DType, address: usize, value: f32) void {
    if (dtype == .f16) common.store_f16(address, @floatCast(value)) else common.store_f32(address, value);
}

fn row_sum(comptime dtype: common.DType, row: Strided, count: usize) f64 {
    var total: F64x = @splat(0);
    var index: usize = 0;
    while (index < count) : (index += lanes) {
        const chunk = @min(lanes, count - index);
        total += @as(F64x, @floatCast(load(dtype, row, index, chunk, 0)));
    }
    return @reduce(.Add, total);
}

pub const Extreme = enum { max, min };

/// The largest (smallest) value of a row and its first index; NaN never replaces the best.
fn row_extreme(comptime dtype: common.DType, comptime which: Extreme, row: Strided, count: usize) struct { value: f32, index: usize } {
    const start: f32 = if (which == .max) -std.math.inf(f32) else std.math.inf(f32);
    var best: F32x = splat(start);
    var best_index: @Vector(lanes, u32) = @splat(0);
    const iota = std.simd.iota(u32, lanes);
    var index: usize = 0;
    while (index < count) : (index += lanes) {
        const chunk = @min(lanes, count - index);
        const x = load(dtype, row, index, chunk, start);
        const better = if (which == .max) x > best else x < best;
        best = @select(f32, better, x, best);
        best_index = @select(u32, better, iota + @as(@Vector(lanes, u32), @splat(@intCast(index))), best_index);
    }
    // Across lanes: the best value, the lowest index among equals (the first in the row).
    const values: [lanes]f32 = best;
    const indices: [lanes]u32 = best_index;
    var value = start;
    var at: u32 = 0;
    var found = false;
    for (0..lanes) |lane| {
        const v = values[lane];
        const better = if (which == .max) v > value else v < value;
        if (better or (found and v == value and indices[lane] < at)) {
            value = v;
            at = indices[lane];
            found = true;
        }
    }
    return .{ .value = value, .index = at };
}

/// `row_extreme` for the row's run-time dtype (f32 or f16, checked by validate.zig).
fn row_extreme_of(dtype: common.DType, comptime which: Extreme, row: Strided, count: usize) @TypeOf(row_extreme(.f32, which, row, count)) {
    return if (dtype == .f16) row_extreme(.f16, which, row, count) else row_extreme(.f32, which, row, count);
}

pub fn sum_rows(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    assert(dst.ne[0] == 1);
    assert(dst.rows() == src.rows());
    const range = common.thread_range(src.rows(), work);
    for (range.begin..range.end) |row| {
        const index = src.row_index(row);
        const total = if (src.dtype == .f16)
            row_sum(.f16, src.row_at(index), src.ne[0])
        else
            row_sum(.f32, src.row_at(index), src.ne[0]);
        store_one(dst.dtype, dst.row_at(index).base, @floatCast(total));
    }
    return .ok;
}

pub fn extreme_rows(comptime which: Extreme, n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    assert(dst.ne[0] == 1);
    assert(dst.rows() == src.rows());
    const range = common.thread_range(src.rows(), work);
    for (range.begin..range.end) |row| {
        const index = src.row_index(row);
        const found = row_extreme_of(src.dtype, which, src.row_at(index), src.ne[0]);
        store_one(dst.dtype, dst.row_at(index).base, found.value);
    }
    return .ok;
}

/// dst i32 [ne1, ne2, ne3, 1]: element (i1, i2, i3) is the argmax of src0's row (i1, i2, i3).
pub fn argmax(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    assert(dst.element_count() == src.rows());
    const range = common.thread_range(src.rows(), work);
    for (range.begin..range.end) |row| {
        const index = src.row_index(row);
        const found = row_extreme_of(src.dtype, .max, src.row_at(index), src.ne[0]);
        const address = dst.base + index.i1 * dst.nb[0] + index.i2 * dst.nb[1] + index.i3 * dst.nb[2];
        common.store_u32(address, @intCast(found.index));
    }
    return .ok;
}

/// Running sums along each row, in f64, rounded once per element.
pub fn cumsum(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    assert(dst.element_count() == src.element_count());
    const range = common.thread_range(src.rows(), work);
    for (range.begin..range.end) |row| {
        const index = src.row_index(row);
        const from = src.row_at(index);
        const to = dst.row_at(index);
        var total: f64 = 0;
        for (0..src.ne[0]) |i| {
            if (src.dtype == .f16) {
                total += common.load_f16(from.at(i));
                common.store_f16(to.at(i), @floatCast(total));
            } else {
                total += common.load_f32(from.at(i));
                common.store_f32(to.at(i), @floatCast(total));
            }
        }
    }
    return .ok;
}

/// dst i64 [1] (ggml's dtype): how many elements of src0 and src1 (i32, one shape) are equal.
pub fn count_equal(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    assert(dst.element_count() == 1);
    assert(a.element_count() == b.element_count());
    // Every thread sees the same scratch size, so all take this exit and none waits alone.
    if (work.scratch_size_bytes < count_work_size_bytes) return .out_of_space;
    const partials: *[count_chunk_count]u64 = @ptrCast(@alignCast(work.scratch));
    const rows = a.rows();
    const rows_per_chunk = (rows + count_chunk_count - 1) / count_chunk_count;
    const chunks = common.thread_range(count_chunk_count, work);
    for (chunks.begin..chunks.end) |chunk| {
        const begin = @min(rows, chunk * rows_per_chunk);
        const end = @min(rows, begin + rows_per_chunk);
        var total: u64 = 0;
        for (begin..end) |row| {
            const index = a.row_index(row);
            const row_a = a.row_at(index);
            const row_b = b.row_at(index);
            for (0..a.ne[0]) |i| {
                total += @intFromBool(common.load_u32(row_a.at(i)) == common.load_u32(row_b.at(i)));
            }
        }
        partials[chunk] = total;
    }
    work.sync();
    if (work.thread_index == 0) {
        var total: u64 = 0;
        for (partials) |partial| total += partial;
        assert(total <= a.element_count());
        common.store_u64(dst.base, total);
    }
    return .ok;
}
