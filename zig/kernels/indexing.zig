//! Shape and indexing kernels, as ggml-cpu defines them (ops.cpp): concat, pad (ggml_pad_ext:
//! zeros before and after each dim), pad_circular (src0 wrapped around), pad_reflect_1d, roll, repeat_back (the sum of every tile
//! of src0 that a repeat of dst would make), tri, diag_mask_inf, fill and arange.
//!
//! Every kernel but repeat_back and arange moves elements without arithmetic: values are copied
//! as bits (2 or 4 bytes: f16, f32, i32), so results are exact and do not depend on the dtype.
//! Constants (the zero of a pad, the -inf of a mask, a fill value) are written as the dtype's
//! bits. Rows of dst are split across threads (common.thread_range); each dst element is
//! written by exactly one thread, so results are identical for any thread count.

const std = @import("std");
const common = @import("common.zig");
const copy = @import("copy.zig");

const assert = common.assert;
const DType = common.DType;
const Strided = common.Strided;
const Tensor = common.Tensor;
const RowIndex = common.RowIndex;
const dims_max = common.dims_max;
const lanes = common.lanes;

/// ggml_tri's types (enum ggml_tri_type): which (column, row) pairs keep their value.
pub const TriType = enum(u32) { upper_diag = 0, upper = 1, lower_diag = 2, lower = 3 };

/// A param slot holding a whole number written as f32 (TypeScript writes every param as f32).
pub fn param_int(n: *const common.Node, index: usize) i64 {
    return @intFromFloat(n.param_f32(index));
}

fn copy_bits(to: usize, from: usize, size: usize) void {
    assert(size == 2 or size == 4);
    if (size == 4) common.store_u32(to, common.load_u32(from)) else common.store_u16(to, common.load_u16(from));
}

fn store_bits(to: usize, bits: u32, size: usize) void {
    assert(size == 2 or size == 4);
    if (size == 4) common.store_u32(to, bits) else common.store_u16(to, @intCast(bits));
}

/// The bits of `value` in `dtype` (f32, or f16 rounded to nearest even; i32 truncated).
fn constant_bits(dtype: DType, value: f32) u32 {
    return switch (dtype) {
        .f32 => @bitCast(value),
        .f16 => @as(u16, @bitCast(@as(f16, @floatCast(value)))),
        .i32 => @bitCast(@as(i32, @intFromFloat(value))),
        else => unreachable, // validate admits f32, f16 and i32 only
    };
}

fn fill_row(row: Strided, count: usize, bits: u32, size: usize) void {
    for (0..count) |i| store_bits(row.at(i), bits, size);
}

/// Elements [begin, begin + count) of `from` into [at, at + count) of `to` (one dtype).
fn copy_span(to: Strided, at: usize, from: Strided, begin: usize, count: usize, dtype: DType) void {
    if (count == 0) return;
    const shifted_to: Strided = .{ .base = to.at(at), .stride = to.stride };
    const shifted_from: Strided = .{ .base = from.at(begin), .stride = from.stride };
    copy.convert_row(shifted_to, dtype, shifted_from, dtype, count);
}

/// concat: dst = src0 followed by src1 along params[0] (dim). A dst row lies wholly in one
/// source unless dim is 0, where its first src0.ne[0] elements come from src0.
pub fn concat(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    const dim: usize = @intCast(param_int(n, 0));
    assert(dim < dims_max);
    assert(dst.ne[dim] == a.ne[dim] + b.ne[dim]);
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        const to = dst.row_at(index);
        if (dim == 0) {
            copy_span(to, 0, a.row_at(index), 0, a.ne[0], dst.dtype);
            copy_span(to, a.ne[0], b.row_at(index), 0, b.ne[0], dst.dtype);
            continue;
        }
        const position = [dims_max]usize{ 0, index.i1, index.i2, index.i3 };
        if (position[dim] < a.ne[dim]) {
            copy_span(to, 0, a.row_at(index), 0, dst.ne[0], dst.dtype);
        } else {
            var shifted = position;
            shifted[dim] -= a.ne[dim];
            const from = b.row_at(.{ .i1 = shifted[1], .i2 = shifted[2], .i3 = shifted[3] });
            copy_span(to, 0, from, 0, dst.ne[0], dst.dtype);
        }
    }
    return .ok;
}

/// pad (ggml_pad_ext): params[2d] zeros before and params[2d + 1] after dim d; dst.ne[d] =
/// src0.ne[d] + both (validate). A dst row outside src0 in dims 1-3 is all zeros.
pub fn pad(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    var left: [dims_max]usize = undefined;
    for (0..dims_max) |d| left[d] = @intCast(param_int(n, 2 * d));
    const size = dst.size_bytes();
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        const to = dst.row_at(index);
        const inside = index.i1 >= left[1] and index.i1 - left[1] < src.ne[1] and
            index.i2 >= left[2] and index.i2 - left[2] < src.ne[2] and
            index.i3 >= left[3] and index.i3 - left[3] < src.ne[3];
        if (!inside) {
            fill_row(to, dst.ne[0], 0, size);
            continue;
        }
        const from = src.row_at(.{
            .i1 = index.i1 - left[1],
            .i2 = index.i2 - left[2],
            .i3 = index.i3 - left[3],
        });
        fill_row(to, left[0], 0, size);
        copy_span(to, left[0], from, 0, src.ne[0], dst.dtype);
        const after: Strided = .{ .base = to.at(left[0] + src.ne[0]), .stride = to.stride };
        fill_row(after, dst.ne[0] - left[0] - src.ne[0], 0, size);
    }
    return .ok;
}

/// ggml_wrap_around: i modulo n in [0, n), for any sign of i.
fn wrap_around(i: i64, n: usize) usize {
    assert(n >= 1);
    return @intCast(@mod(i, @as(i64, @intCast(n))));
}

/// pad_circular (ggml_pad_ext_circular): dst element i reads src0 at (i - left) wrapped around
/// each dim, so a pad repeats the far side of src0 (again and again when longer than src0).
/// Each dst row is copied as spans of src0's row: from the wrapped start to the row's end, then
/// from 0.
pub fn pad_circular(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    var left: [dims_max]i64 = undefined;
    for (0..dims_max) |d| left[d] = param_int(n, 2 * d);
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        const to = dst.row_at(index);
        const from = src.row_at(.{
            .i1 = wrap_around(@as(i64, @intCast(index.i1)) - left[1], src.ne[1]),
            .i2 = wrap_around(@as(i64, @intCast(index.i2)) - left[2], src.ne[2]),
            .i3 = wrap_around(@as(i64, @intCast(index.i3)) - left[3], src.ne[3]),
        });
        var column: usize = wrap_around(-left[0], src.ne[0]);
        var at: usize = 0;
        while (at < dst.ne[0]) {
            const count = @min(src.ne[0] - column, dst.ne[0] - at);
            copy_span(to, at, from, column, count, dst.dtype);
            at += count;
            column = 0;
        }
    }
    return .ok;
}

/// pad_reflect_1d: params p0, p1 (each < src0.ne[0]); [a, b, c, d] with p0 = p1 = 1 gives
/// [b, a, b, c, d, c]: the edge element is not repeated.
pub fn pad_reflect_1d(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    const p0: usize = @intCast(param_int(n, 0));
    assert(p0 < src.ne[0]);
    assert(dst.ne[0] >= src.ne[0] + p0);
    const size = dst.size_bytes();
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        const to = dst.row_at(index);
        const from = src.row_at(index);
        for (0..p0) |i| copy_bits(to.at(i), from.at(p0 - i), size);
        copy_span(to, p0, from, 0, src.ne[0], dst.dtype);
        for (p0 + src.ne[0]..dst.ne[0]) |i| {
            // Mirrored about the last element: one past it reads the one before it.
            const mirrored = 2 * (src.ne[0] - 1) - (i - p0);
            copy_bits(to.at(i), from.at(mirrored), size);
        }
    }
    return .ok;
}

/// (i - shift) wrapped into [0, extent); |shift| < extent (validate).
fn wrap(i: usize, shift: i64, extent: usize) usize {
    const e: i64 = @intCast(extent);
    assert(shift > -e and shift < e);
    return @intCast(@mod(@as(i64, @intCast(i)) - shift, e));
}

/// roll: dst[i] = src0[(i - shift) mod ne] in every dim (params[d]: the shift of dim d).
pub fn roll(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    var shift: [dims_max]i64 = undefined;
    for (0..dims_max) |d| shift[d] = param_int(n, d);
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        const from = src.row_at(.{
            .i1 = wrap(index.i1, shift[1], src.ne[1]),
            .i2 = wrap(index.i2, shift[2], src.ne[2]),
            .i3 = wrap(index.i3, shift[3], src.ne[3]),
        });
        // dst[0, count - s) <- src[s, count); dst[count - s, count) <- src[0, s).
        const s = wrap(0, shift[0], src.ne[0]);
        const to = dst.row_at(index);
        copy_span(to, 0, from, s, src.ne[0] - s, dst.dtype);
        copy_span(to, src.ne[0] - s, from, 0, s, dst.dtype);
    }
    return .ok;
}

/// True where ggml_tri keeps the element in column `column` of row `row`.
pub fn tri_keeps(kind: TriType, column: usize, row: usize) bool {
    return switch (kind) {
        .lower => column < row,
        .lower_diag => column <= row,
        .upper => column > row,
        .upper_diag => column >= row,
    };
}

/// tri (params[0]: TriType) and diag_mask_inf (params[0]: n_past): each element of src0 is kept
/// or replaced by a constant (0; -inf for the mask), by its column i0 and row i1.
pub fn mask(
    comptime op: enum { tri, diag_mask_inf },
    n: *const common.Node,
    work: *const common.Work,
) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    const size = dst.size_bytes();
    const kind: TriType = if (op == .tri) @enumFromInt(@as(u32, @intCast(param_int(n, 0)))) else .lower;
    const n_past: usize = if (op == .diag_mask_inf) @intCast(param_int(n, 0)) else 0;
    const bits = if (op == .tri) 0 else constant_bits(dst.dtype, -std.math.inf(f32));
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        const to = dst.row_at(index);
        const from = src.row_at(index);
        for (0..dst.ne[0]) |i| {
            const keep = switch (op) {
                .tri => tri_keeps(kind, i, index.i1),
                // ggml_compute_forward_diag_mask_f32: column i is masked when i > n_past + row.
                .diag_mask_inf => i <= n_past + index.i1,
            };
            if (keep) copy_bits(to.at(i), from.at(i), size) else store_bits(to.at(i), bits, size);
        }
    }
    return .ok;
}

/// fill: every element of dst is params[0] (converted to dst's dtype, f32 or f16).
pub fn fill(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const bits = constant_bits(dst.dtype, n.param_f32(0));
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| fill_row(dst.row(row), dst.ne[0], bits, dst.size_bytes());
    return .ok;
}

/// arange: dst[i] = start + step * i in f32 (ggml_compute_forward_arange_f32), params start,
/// stop, step; validate checks dst.ne[0] == ceil((stop - start) / step).
pub fn arange(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    assert(dst.rows() == 1);
    const start = n.param_f32(0);
    const step = n.param_f32(2);
    const row = dst.row(0);
    const range = common.thread_range(dst.ne[0], work);
    for (range.begin..range.end) |i| {
        common.store_f32(row.at(i), start + step * @as(f32, @floatFromInt(i)));
    }
    return .ok;
}

/// repeat_back: dst[k] = the sum over every tile t of src0 (src0.ne = dst.ne * repeats) of
/// src0[t * dst.ne + k], in f64, rounded once to dst's dtype (f32 or f16).
pub fn repeat_back(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    var repeats: [dims_max]usize = undefined;
    for (0..dims_max) |d| {
        assert(src.ne[d] % dst.ne[d] == 0);
        repeats[d] = src.ne[d] / dst.ne[d];
    }
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        const to = dst.row_at(index);
        var k0: usize = 0;
        while (k0 < dst.ne[0]) : (k0 += lanes) {
            const chunk = @min(lanes, dst.ne[0] - k0);
            const total = tile_sum(src, dst.ne, index, repeats, k0, chunk);
            const value: common.F32x = @floatCast(total);
            if (dst.dtype == .f32) {
                common.store_chunk(to, k0, chunk, value);
            } else {
                common.store_chunk_f16(to, k0, chunk, value);
            }
        }
    }
    return .ok;
}

/// Sum over the tiles of src0 of elements [k0, k0 + chunk) of the tile row at `index`.
fn tile_sum(
    src: Tensor,
    ne: [dims_max]usize,
    index: RowIndex,
    repeats: [dims_max]usize,
    k0: usize,
    chunk: usize,
) common.F64x {
    var total: common.F64x = @splat(0);
    for (0..repeats[3]) |t3| for (0..repeats[2]) |t2| for (0..repeats[1]) |t1| {
        const from = src.row_at(.{
            .i1 = t1 * ne[1] + index.i1,
            .i2 = t2 * ne[2] + index.i2,
            .i3 = t3 * ne[3] + index.i3,
        });
        for (0..repeats[0]) |t0| {
            const at = t0 * ne[0] + k0;
            const values = if (src.dtype == .f32)
                common.load_chunk(from, at, chunk, 0)
            else
                common.load_chunk_f16(from, at, chunk);
            total += @as(common.F64x, @floatCast(values));
        }
    };
    return total;
}
