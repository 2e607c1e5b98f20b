//! mul_mat with a bf16 or block-quantized src0 (q8_0, q4_0, q4_1, q5_0, q5_1: weights) and an f32
//! src1: each thread dequantizes a few rows of src0 (quant.zig's dequantize_row, exactly what
//! `dequantize` gives) into its slice of the work buffer and dots them with every row of src1 in
//! f32. Work items are (group of src0 rows, src1 batch) pairs, split evenly across threads; each
//! dst element is written by one thread, from one dot product, so the result does not depend on
//! the thread count. Shapes and batch broadcasting as in mul_mat.zig.

const std = @import("std");
const common = @import("common.zig");
const quant = @import("../quant.zig");

const assert = common.assert;
const lanes = common.lanes;
const F32x = common.F32x;
const Tensor = common.Tensor;

/// From this many src1 columns on, mul_mat.zig hands the product to the f32 GEMM, which
/// dequantizes the weights block by block into its packed panels (gemm.zig's packQuantPanel):
/// there the dequantizing is paid once per weight and the register-tiled micro-kernel does the
/// rest, while these kernels redo per-block integer work for every column.
pub const gemm_columns_min = 32;

/// True when mul_mat.zig runs the node through the GEMM instead of this file's kernels.
pub fn use_gemm(n: *const common.Node) bool {
    return Tensor.from(&n.src[1]).ne[1] >= gemm_columns_min;
}

/// Rows of src0 dequantized together; each src1 row is then read once per group.
const rows_per_group = 4;

/// f32s one dequantized row takes in the work buffer (whole cache lines).
fn row_floats(k: usize) usize {
    return (k + 15) / 16 * 16;
}

fn slice_bytes(k: usize) u64 {
    return @as(u64, rows_per_group) * row_floats(k) * @sizeOf(f32);
}

/// q8_0 and q4_0 weights with src1 rows of adjacent f32s take the fused path: src1 is quantized
/// to q8_0 (ggml's quantize_row_q8_0_ref, per block of 32) into the work buffer once, then each
/// dot multiplies blocks of integers and scales them by both blocks' f16 scales, as ggml's
/// ggml_vec_dot_q4_0_q8_0 and ggml_vec_dot_q8_0_q8_0 do.
fn fused(a: Tensor, b: Tensor) bool {
    return (a.dtype == .q8_0 or a.dtype == .q4_0) and b.nb[0] == @sizeOf(f32);
}

/// A thread's slice for q4_0 rows unpacked to q8_0 blocks (same scale, values nibble - 8), so a
/// group's rows are unpacked once and dotted with every src1 row; q8_0 rows are read in place.
fn unpacked_bytes(a: Tensor) u64 {
    if (a.dtype != .q4_0) return 0;
    const size = quant.row_bytes(.q8_0, a.ne[0]) * rows_per_group;
    return (size + 63) / 64 * 64;
}

fn quantized_b_bytes(b: Tensor) u64 {
    const size = quant.row_bytes(.q8_0, b.ne[0]) * b.rows();
    return (size + 63) / 64 * 64;
}

pub fn work_size(n: *const common.Node, thread_count: u32) u64 {
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    if (fused(a, b)) return quantized_b_bytes(b) + unpacked_bytes(a) * thread_count;
    return slice_bytes(a.ne[0]) * thread_count;
}

pub fn mul_mat(n: *const common.Node, work: *const common.Work) common.Status {
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    const c = Tensor.from(&n.dst);
    assert(a.dtype.dequantizes());
    assert(a.ne[0] == b.ne[0]);
    if (work.scratch_size_bytes < work_size(n, work.thread_count)) return .out_of_space;
    if (fused(a, b)) return mul_mat_fused(a, b, c, work);
    const k = a.ne[0];
    const stride = row_floats(k);
    const offset: usize = @intCast(slice_bytes(k) * work.thread_index);
    const rows: [*]f32 = @ptrCast(@alignCast(work.scratch + offset));
    const range = common.thread_range(group_count(a, b), work);
    for (range.begin..range.end) |item| {
        const g = group_of(item, a, b);
        const m0 = g.m0;
        const count = g.count;
        for (0..count) |r| {
            const bytes: [*]const u8 = @ptrFromInt(g.weight_row(a, r).base);
            quant.dequantize_row(a.dtype, bytes[0..quant.row_bytes(a.dtype, k)], rows[r * stride ..][0..k]);
        }
        for (0..b.ne[1]) |column| {
            const index: common.RowIndex = .{ .i1 = column, .i2 = g.batch2, .i3 = g.batch3 };
            const b_row = b.row_at(index);
            const c_row = c.row_at(index);
            for (0..count) |r| {
                common.store_f32(c_row.at(m0 + r), dot(rows + r * stride, b_row, k));
            }
        }
    }
    return .ok;
}

/// One work item of both paths: up to `rows_per_group` weight rows of one batch of src1.
const Group = struct {
    m0: usize,
    count: usize,
    batch2: usize,
    batch3: usize,
    /// The batch of src0 (the weights) this batch of src1 reads: src0 broadcasts over batches.
    a2: usize,
    a3: usize,

    fn weight_row(g: Group, a: Tensor, r: usize) common.Strided {
        return a.row_at(.{ .i1 = g.m0 + r, .i2 = g.a2, .i3 = g.a3 });
    }
};

fn group_count(a: Tensor, b: Tensor) usize {
    const groups = (a.ne[1] + rows_per_group - 1) / rows_per_group;
    return groups * b.ne[2] * b.ne[3];
}

fn group_of(item: usize, a: Tensor, b: Tensor) Group {
    const groups = (a.ne[1] + rows_per_group - 1) / rows_per_group;
    const m0 = (item % groups) * rows_per_group;
    const batch = item / groups;
    const batch2 = batch % b.ne[2];
    const batch3 = batch / b.ne[2];
    return .{
        .m0 = m0,
        .count = @min(rows_per_group, a.ne[1] - m0),
        .batch2 = batch2,
        .batch3 = batch3,
        .a2 = batch2 / (b.ne[2] / a.ne[2]),
        .a3 = batch3 / (b.ne[3] / a.ne[3]),
    };
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

fn mul_mat_fused(a: Tensor, b: Tensor, c: Tensor, work: *const common.Work) common.Status {
    const k = a.ne[0];
    const b_row_bytes: usize = @intCast(quant.row_bytes(.q8_0, k));
    const quantized: [*]u8 = work.scratch;
    const b_range = common.thread_range(b.rows(), work);
    for (b_range.begin..b_range.end) |row| {
        const values: [*]align(1) const f32 = @ptrFromInt(b.row(row).base);
        quant.quantize_row(.q8_0, values[0..k], quantized[row * b_row_bytes ..][0..b_row_bytes]);
    }
    work.sync(); // every row of src1 is quantized before any thread reads one
    const a_row_bytes: usize = @intCast(quant.row_bytes(a.dtype, k));
    const slice_offset: usize = @intCast(quantized_b_bytes(b) + unpacked_bytes(a) * work.thread_index);
    const unpacked: [*]u8 = work.scratch + slice_offset;
    const range = common.thread_range(group_count(a, b), work);
    for (range.begin..range.end) |item| {
        const g = group_of(item, a, b);
        const m0 = g.m0;
        const count = g.count;
        const batch2 = g.batch2;
        const batch3 = g.batch3;
        var x_rows: [rows_per_group][]const u8 = undefined;
        for (0..count) |r| {
            const x: [*]const u8 = @ptrFromInt(g.weight_row(a, r).base);
            if (a.dtype == .q4_0) {
                const into = unpacked[r * b_row_bytes ..][0..b_row_bytes];
                unpack_q4_0(x[0..a_row_bytes], into);
                x_rows[r] = into;
            } else {
                x_rows[r] = x[0..a_row_bytes];
            }
        }
        for (0..b.ne[1]) |column| {
            const index: common.RowIndex = .{ .i1 = column, .i2 = batch2, .i3 = batch3 };
            const flat = column + b.ne[1] * (batch2 + b.ne[2] * batch3);
            const y = quantized[flat * b_row_bytes ..][0..b_row_bytes];
            const c_row = c.row_at(index);
            for (0..count) |r| common.store_f32(c_row.at(m0 + r), dot_q8_0_q8_0(x_rows[r], y));
        }
    }
    return .ok;
}

const I16x32 = @Vector(32, i16);
const I32x8 = @Vector(8, i32);
const F32x8 = @Vector(8, f32);

fn scale_of(bytes: *const [2]u8) f32 {
    return quant.fp16_to_fp32(std.mem.readInt(u16, bytes, .little));
}

/// Integer dot of one block in 8 i32 lanes: products in i16 (|x| <= 128 and |y| <= 127, since y
/// is always quantized here, so |x * y| <= 16256), widened to i32 and summed in four quarters.
fn block_dot(x: I16x32, y: I16x32) I32x8 {
    const products: @Vector(32, i32) = x * y;
    const lanes_of: [4][8]i32 = @bitCast(products);
    const q0: I32x8 = lanes_of[0];
    const q1: I32x8 = lanes_of[1];
    const q2: I32x8 = lanes_of[2];
    const q3: I32x8 = lanes_of[3];
    return (q0 + q1) + (q2 + q3);
}

/// A q8_0 block's 32 values.
fn q8_values(block: *const [34]u8) I16x32 {
    const bytes: @Vector(32, i8) = @bitCast(block[2..34].*);
    return bytes;
}

/// Adds one block's scaled integer dot to the 8 f32 lanes of `sum`, as ggml's AVX2 path does.
fn accumulate(sum: F32x8, integers: I32x8, scale: f32) F32x8 {
    const value: F32x8 = @floatFromInt(integers);
    return @mulAdd(F32x8, value, @splat(scale), sum);
}

/// A q4_0 row as q8_0 blocks: the same f16 scale, values nibble - 8 (low nibbles are elements
/// 0-15, high nibbles 16-31). Its q8_0 dot is ggml_vec_dot_q4_0_q8_0's, integer for integer.
fn unpack_q4_0(x: []const u8, out: []u8) void {
    const blocks = x.len / 18;
    assert(out.len == blocks * 34);
    for (0..blocks) |block| {
        const xb = x[block * 18 ..][0..18];
        const ob = out[block * 34 ..][0..34];
        ob[0..2].* = xb[0..2].*;
        const nibbles: @Vector(16, u8) = xb[2..18].*;
        const low: @Vector(16, u8) = nibbles & @as(@Vector(16, u8), @splat(0x0f));
        const high: @Vector(16, u8) = nibbles >> @as(@Vector(16, u3), @splat(4));
        const both: @Vector(32, u8) = std.simd.join(low, high);
        const values: @Vector(32, i8) = @intCast(@as(I16x32, both) - @as(I16x32, @splat(8)));
        ob[2..34].* = @bitCast(values);
    }
}

/// ggml_vec_dot_q8_0_q8_0 (and, on unpacked rows, ggml_vec_dot_q4_0_q8_0): per block,
/// (integer dot) * d_x * d_y, summed in 8 f32 lanes.
fn dot_q8_0_q8_0(x: []const u8, y: []const u8) f32 {
    const blocks = x.len / 34;
    assert(y.len == x.len);
    var sum: F32x8 = @splat(0);
    for (0..blocks) |block| {
        const xb = x[block * 34 ..][0..34];
        const yb = y[block * 34 ..][0..34];
        sum = accumulate(sum, block_dot(q8_values(xb), q8_values(yb)), scale_of(xb[0..2]) * scale_of(yb[0..2]));
    }
    return @reduce(.Add, sum);
}
