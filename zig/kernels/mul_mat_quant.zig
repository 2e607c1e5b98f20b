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

fn quantized_b_bytes(b: Tensor) u64 {
    const size = quant.row_bytes(.q8_0, b.ne[0]) * b.rows();
    return (size + 63) / 64 * 64;
}

pub fn work_size(n: *const common.Node, thread_count: u32) u64 {
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    if (fused(a, b)) return quantized_b_bytes(b);
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
        for (0..b.ne[1]) |column| {
            const index: common.RowIndex = .{ .i1 = column, .i2 = batch2, .i3 = batch3 };
            const flat = column + b.ne[1] * (batch2 + b.ne[2] * batch3);
            const y = quantized[flat * b_row_bytes ..][0..b_row_bytes];
            const c_row = c.row_at(index);
            for (0..count) |r| {
                const src = a.row_at(.{ .i1 = m0 + r, .i2 = batch2 / ratio2, .i3 = batch3 / ratio3 });
                const x: [*]const u8 = @ptrFromInt(src.base);
                const value = switch (a.dtype) {
                    .q4_0 => dot_q4_0_q8_0(x[0..a_row_bytes], y),
                    .q8_0 => dot_q8_0_q8_0(x[0..a_row_bytes], y),
                    else => unreachable,
                };
                common.store_f32(c_row.at(m0 + r), value);
            }
        }
    }
    return .ok;
}

const I16x16 = @Vector(16, i16);
const I32x16 = @Vector(16, i32);

fn scale_of(bytes: *const [2]u8) f32 {
    return quant.fp16_to_fp32(std.mem.readInt(u16, bytes, .little));
}

/// Integer dot of 16 pairs (|x| <= 128, |y| <= 128: each product fits i16 and the pair sums
/// the i16 -> i32 madd makes fit i32).
fn madd(x: I16x16, y: I16x16) i32 {
    return @reduce(.Add, @as(I32x16, x) * @as(I32x16, y));
}

fn half_of(y: []const u8, offset: usize) I16x16 {
    const bytes: @Vector(16, i8) = @bitCast(y[offset..][0..16].*);
    return bytes;
}

/// ggml_vec_dot_q4_0_q8_0: per block, (sum of (nibble - 8) * q8) * d4 * d8, summed in f32.
fn dot_q4_0_q8_0(x: []const u8, y: []const u8) f32 {
    const blocks = x.len / 18;
    assert(y.len == blocks * 34);
    var sum: f32 = 0;
    for (0..blocks) |block| {
        const xb = x[block * 18 ..][0..18];
        const yb = y[block * 34 ..][0..34];
        const nibbles: @Vector(16, u8) = xb[2..18].*;
        const low: I16x16 = @as(I16x16, nibbles & @as(@Vector(16, u8), @splat(0x0f))) - @as(I16x16, @splat(8));
        const high: I16x16 = @as(I16x16, nibbles >> @as(@Vector(16, u3), @splat(4))) - @as(I16x16, @splat(8));
        const sumi = madd(low, half_of(yb, 2)) + madd(high, half_of(yb, 18));
        sum += @as(f32, @floatFromInt(sumi)) * (scale_of(xb[0..2]) * scale_of(yb[0..2]));
    }
    return sum;
}

/// ggml_vec_dot_q8_0_q8_0: per block, (sum of q8 * q8) * d * d, summed in f32.
fn dot_q8_0_q8_0(x: []const u8, y: []const u8) f32 {
    const blocks = x.len / 34;
    assert(y.len == x.len);
    var sum: f32 = 0;
    for (0..blocks) |block| {
        const xb = x[block * 34 ..][0..34];
        const yb = y[block * 34 ..][0..34];
        const sumi = madd(half_of(xb, 2), half_of(yb, 2)) + madd(half_of(xb, 18), half_of(yb, 18));
        sum += @as(f32, @floatFromInt(sumi)) * (scale_of(xb[0..2]) * scale_of(yb[0..2]));
    }
    return sum;
}
