//! mul_mat with a bf16 or block-quantized src0 (q8_0, q4_0, q4_1, q5_0, q5_1: weights) and an f32
//! src1: each thread dequantizes a few rows of src0 (quant.zig's dequantize_row, exactly what
//! `dequantize` gives) into its slice of the work buffer and dots them with every row of src1 in
//! f32. Work items are (group of src0 rows, src1 batch) pairs, split evenly across threads; each
//! dst element is written by one thread, from one dot product, so the result does not depend on
//! the thread count. Shapes and batch broadcasting as in mul_mat.zig.

const common = @import("common.zig");
const quant = @import("../quant.zig");

const assert = common.assert;
const lanes = common.lanes;
const F32x = common.F32x;
const Tensor = common.Tensor;

/// Rows of src0 dequantized together; each src1 row is then read once per group.
const rows_per_group = 4;

/// f32s one dequantized row takes in the work buffer (whole cache lines).
fn row_floats(k: usize) usize {
    return (k + 15) / 16 * 16;
}

fn slice_bytes(k: usize) u64 {
    return @as(u64, rows_per_group) * row_floats(k) * @sizeOf(f32);
}

pub fn work_size(n: *const common.Node, thread_count: u32) u64 {
    const a = Tensor.from(&n.src[0]);
    return slice_bytes(a.ne[0]) * thread_count;
}

pub fn mul_mat(n: *const common.Node, work: *const common.Work) common.Status {
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    const c = Tensor.from(&n.dst);
    assert(a.dtype.dequantizes());
    assert(a.ne[0] == b.ne[0]);
    if (work.scratch_size_bytes < work_size(n, work.thread_count)) return .out_of_space;
    const k = a.ne[0];
    const stride = row_floats(k);
    const offset: usize = @intCast(slice_bytes(k) * work.thread_index);
    const rows: [*]f32 = @ptrCast(@alignCast(work.scratch + offset));
    const ratio2 = b.ne[2] / a.ne[2];
    const ratio3 = b.ne[3] / a.ne[3];
    const groups = (a.ne[1] + rows_per_group - 1) / rows_per_group;
    const range = common.thread_range(groups * b.ne[2] * b.ne[3], work);
    for (range.begin..range.end) |item| {
        const m0 = (item % groups) * rows_per_group;
        const batch = item / groups;
        const batch2 = batch % b.ne[2];
        const batch3 = batch / b.ne[2];
        const count = @min(rows_per_group, a.ne[1] - m0);
        for (0..count) |r| {
            const src = a.row_at(.{ .i1 = m0 + r, .i2 = batch2 / ratio2, .i3 = batch3 / ratio3 });
            const bytes: [*]const u8 = @ptrFromInt(src.base);
            quant.dequantize_row(a.dtype, bytes[0..quant.row_bytes(a.dtype, k)], rows[r * stride ..][0..k]);
        }
        for (0..b.ne[1]) |column| {
            const index: common.RowIndex = .{ .i1 = column, .i2 = batch2, .i3 = batch3 };
            const b_row = b.row_at(index);
            const c_row = c.row_at(index);
            for (0..count) |r| {
                common.store_f32(c_row.at(m0 + r), dot(rows + r * stride, b_row, k));
            }
        }
    }
    return .ok;
}

/// sum_i x[i] * y[i] over `k` elements, in f32 with two vector accumulators.
fn dot(x: [*]const f32, y: common.Strided, k: usize) f32 {
    const x_row: common.Strided = .{ .base = @intFromPtr(x), .stride = @sizeOf(f32) };
    var sum0: F32x = @splat(0);
    var sum1: F32x = @splat(0);
    var index: usize = 0;
    while (index + 2 * lanes <= k) : (index += 2 * lanes) {
        sum0 = common.mul_add(common.load_chunk(x_row, index, lanes, 0), common.load_chunk(y, index, lanes, 0), sum0);
        sum1 = common.mul_add(common.load_chunk(x_row, index + lanes, lanes, 0), common.load_chunk(y, index + lanes, lanes, 0), sum1);
    }
    while (index < k) : (index += lanes) {
        const chunk = @min(lanes, k - index);
        sum0 = common.mul_add(common.load_chunk(x_row, index, chunk, 0), common.load_chunk(y, index, chunk, 0), sum0);
    }
    return @reduce(.Add, sum0 + sum1);
}
