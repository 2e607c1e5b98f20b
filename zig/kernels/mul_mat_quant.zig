//! mul_mat with a bf16 or block-quantized src0 (the weights) and an f32 src1 with few columns
//! (decode; from `gemm_columns_min` columns on mul_mat.zig runs the f32 GEMM instead). Three
//! paths, each as ggml computes it:
//! - q8_0, q4_0, q4_1, q5_0, q5_1 (src1 rows of adjacent f32s): gemv_quant.zig's kernels, src1
//!   quantized per block into their own layout once per node;
//! - q4_K, q5_K, q6_K: src1 rows quantized to the activation type ggml pairs with
//!   the weights (q8_0, q8_1, q8_K) and dot_quant.zig's fused dot of each weight row with them
//!   (k-quants with 8 columns or more: in the float steps of ggml's tiled matmul, as ggml);
//! - otherwise (bf16, strided src1 rows): each thread dequantizes a few rows of src0 (quant.zig's
//!   dequantize_row, exactly what `dequantize` gives) into its slice of the work buffer and dots
//!   them with every row of src1 in f32.
//! Work items are (group of src0 rows, src1 batch) pairs (the fused path: (src0 row, src1 batch)
//! pairs, see fused_streams), split evenly across threads; each dst
//! element is written by one thread, from one dot product, so the result does not depend on the
//! thread count. Shapes and batch broadcasting as in mul_mat.zig.

const std = @import("std");
const common = @import("common.zig");
const quant = @import("../quant.zig");
const gemv = @import("gemv_quant.zig");
const dots = @import("dot_quant.zig");
const repack = @import("dot_repack.zig");

const assert = common.assert;
const lanes = common.lanes;
const F32x = common.F32x;
const Tensor = common.Tensor;

/// From this many src1 columns on, mul_mat.zig hands the product to the f32 GEMM, which
/// dequantizes the weights block by block into its packed panels (gemm.zig's packQuantPanel):
/// there the dequantizing is paid once per weight and the register-tiled micro-kernel does the
/// rest, while these kernels redo per-block integer work for every column. Measured crossover
/// (4096x4096 weights, 2 threads, AVX-512 build): between 16 and 24 columns for q4_0, q8_0 and
/// q4_K (at 24, GEMM 144-153 GFLOP/s against 113-135 here; at 16, 112-116 against 115-130).
/// Measured before the column tiles (gemv_quant.zig's dot_tile, dot_quant.zig's _cols dots),
/// which now share the per-block work among up to 4 columns: the crossover may lie higher.
pub const gemm_columns_min = 20;

/// params[1] as f32 1.0 or 2.0: the node asks for ggml's arithmetic at every column count (TS
/// `mulMat(a, b, { ggml: true })`; 2.0 with `repack: true`, dot_repack.zig's order where ggml
/// would repack the weights, this file's otherwise), so it never takes the GEMM.
pub fn ggml_arithmetic(n: *const common.Node) bool {
    const arithmetic: f32 = @bitCast(n.params[1]);
    return arithmetic == 1.0 or arithmetic == 2.0;
}

/// True when mul_mat.zig runs the node through the GEMM instead of this file's kernels.
pub fn use_gemm(n: *const common.Node) bool {
    return Tensor.from(&n.src[1]).ne[1] >= gemm_columns_min and !ggml_arithmetic(n);
}

/// Rows of src0 read together; each src1 row is then read once per group.
const rows_per_group = gemv.rows_max;

/// f32s one dequantized row takes in the work buffer (whole cache lines).
fn row_floats(k: usize) usize {
    return (k + 15) / 16 * 16;
}

fn slice_bytes(k: usize) u64 {
    return @as(u64, rows_per_group) * row_floats(k) * @sizeOf(f32);
}

/// q8_0, q4_0, q4_1, q5_0 and q5_1 weights with src1 rows of adjacent f32s take gemv_quant.zig's
/// kernels: src1 is quantized per block (q8_0, or q8_1 for q4_1 and q5_1) into the work buffer
/// once, then each dot multiplies blocks of integers and scales them, as ggml's
/// ggml_vec_dot_*_q8_* do.
fn fused(a: Tensor, b: Tensor) bool {
    return gemv.takes(a.dtype) and b.nb[0] == @sizeOf(f32);
}

fn quantized_b_bytes(b: Tensor) u64 {
    return gemv.Activation.bytes(b.ne[0]) * b.rows();
}

/// A weight type dotted a row at a time with src1 rows quantized to `activation` (ggml's
/// vec_dot_type for it), by dot_quant.zig.
const RowDot = struct {
    activation: common.DType,
    dot: *const fn (x: []const u8, y: []const u8) f32,
    /// `dot` of one weight row with up to dots.k_cols_max adjacent activation rows at once,
    /// unpacking the row's blocks once for all of them (the same bits per element), where
    /// there is one.
    cols_dot: ?*const fn (x: []const u8, y: [*]const u8, y_stride: usize, cols: usize, out: *[dots.k_cols_max]f32) void = null,

    /// Bytes of one quantized src1 row in the work buffer (whole cache lines).
    fn row_bytes(self: RowDot, k: usize) usize {
        return std.mem.alignForward(usize, @intCast(quant.row_bytes(self.activation, k)), 64);
    }
};

/// k-quant weights take the float steps of ggml's tiled matmul where ggml does: from
/// dots.tiled_columns_min src1 columns on (ggml's vec_dot below that).
fn row_dot(a: Tensor, b: Tensor) ?RowDot {
    if (b.nb[0] != @sizeOf(f32)) return null;
    const tiled = b.ne[1] >= dots.tiled_columns_min;
    return switch (a.dtype) {
        .q4_K => if (tiled)
            .{ .activation = .q8_K, .dot = dots.dot_q4_K_q8_K_tiled, .cols_dot = dots.dot_q4_K_q8_K_tiled_cols }
        else
            .{ .activation = .q8_K, .dot = dots.dot_q4_K_q8_K },
        .q5_K => if (tiled)
            .{ .activation = .q8_K, .dot = dots.dot_q5_K_q8_K_tiled, .cols_dot = dots.dot_q5_K_q8_K_tiled_cols }
        else
            .{ .activation = .q8_K, .dot = dots.dot_q5_K_q8_K },
        .q6_K => if (tiled)
            .{ .activation = .q8_K, .dot = dots.dot_q6_K_q8_K_tiled, .cols_dot = dots.dot_q6_K_q8_K_tiled_cols }
        else
            .{ .activation = .q8_K, .dot = dots.dot_q6_K_q8_K },
        else => null,
    };
}

pub fn work_size(n: *const common.Node, thread_count: u32) u64 {
    if (repack.takes(n)) return repack.work_size(n, thread_count);
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    if (fused(a, b)) return quantized_b_bytes(b);
    if (row_dot(a, b)) |rd| return rd.row_bytes(b.ne[0]) * b.rows();
    return slice_bytes(a.ne[0]) * thread_count;
}

pub fn mul_mat(n: *const common.Node, work: *const common.Work) common.Status {
    if (repack.takes(n)) return repack.mul_mat(n, work);
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    const c = Tensor.from(&n.dst);
    assert(a.dtype.dequantizes());
    assert(a.ne[0] == b.ne[0]);
    if (work.scratch_size_bytes < work_size(n, work.thread_count)) return .out_of_space;
    if (fused(a, b)) return mul_mat_fused(a, b, c, work);
    if (row_dot(a, b)) |rd| return mul_mat_row_dots(a, b, c, rd, work);
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
            quant.dequantize_row(a.dtype, bytes[0..@intCast(quant.row_bytes(a.dtype, k))], rows[r * stride ..][0..k]);
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

/// Far-apart runs of its rows a thread reads side by side in the fused path: each dot_rows call
/// takes one row from each run. Rows of one call that lie next to each other (a group of 8
/// adjacent rows, as this path read them before) interleave their reads within the same 4 KiB
/// pages, which the hardware stream prefetcher follows badly; one sequential stream per run
/// is what it follows best, and 4 streams read faster than 1 (bench/read_bound.zig's patterns).
/// Measured with bench/gemv_bench.sh (4096x4096, one thread, weights from DRAM, AVX-512
/// build): 0.65-0.70 of the read bound with 8 adjacent rows, 0.85-1.0 with 4 runs.
const fused_streams = 4;

comptime {
    assert(fused_streams <= gemv.tile_rows_max);
}

fn mul_mat_fused(a: Tensor, b: Tensor, c: Tensor, work: *const common.Work) common.Status {
    const k = a.ne[0];
    const y_bytes = gemv.Activation.bytes(k);
    const scratch: [*]align(64) u8 = @alignCast(work.scratch);
    const b_range = common.thread_range(b.rows(), work);
    for (b_range.begin..b_range.end) |row| {
        const values: [*]align(1) const f32 = @ptrFromInt(b.row(row).base);
        gemv.quantize_activation(a.dtype, values[0..k], @alignCast(scratch + row * y_bytes));
    }
    work.sync(); // every row of src1 is quantized before any thread reads one
    // Work items are (batch, src0 row) pairs, a contiguous share of them per thread; within one
    // batch a share is read as fused_streams runs side by side.
    const m = a.ne[1];
    const range = common.thread_range(m * b.ne[2] * b.ne[3], work);
    var item = range.begin;
    while (item < range.end) {
        const first = item % m;
        const end = @min(m, first + (range.end - item));
        fused_rows(a, b, c, item / m, first, end, scratch, y_bytes);
        item += end - first;
    }
    return .ok;
}

/// Rows first..end of src0 batch `batch` (of src1's batches) times every column of src1.
fn fused_rows(a: Tensor, b: Tensor, c: Tensor, batch: usize, first: usize, end: usize, scratch: [*]align(64) u8, y_bytes: usize) void {
    const k = a.ne[0];
    const blocks = k / gemv.qk;
    const batch2 = batch % b.ne[2];
    const batch3 = batch / b.ne[2];
    const a2 = batch2 / (b.ne[2] / a.ne[2]);
    const a3 = batch3 / (b.ne[3] / a.ne[3]);
    const run = (end - first + fused_streams - 1) / fused_streams;
    for (0..run) |j| {
        var x_rows: [gemv.rows_max][*]const u8 = undefined;
        var ms: [fused_streams]usize = undefined;
        var count: usize = 0;
        for (0..fused_streams) |s| {
            const row = first + s * run + j;
            if (row >= end) break;
            ms[count] = row;
            x_rows[count] = @ptrFromInt(a.row_at(.{ .i1 = row, .i2 = a2, .i3 = a3 }).base);
            count += 1;
        }
        // Columns a tile at a time (prefill): the rows' blocks unpacked once per tile.
        var column: usize = 0;
        while (column < b.ne[1]) {
            const cols = @min(gemv.cols_max, b.ne[1] - column);
            var ys: [gemv.cols_max]gemv.Activation = undefined;
            for (0..cols) |t| ys[t] = gemv.Activation.at(@alignCast(scratch + (column + t + b.ne[1] * batch) * y_bytes), k);
            var sums: [gemv.cols_max][gemv.rows_max]f32 = undefined;
            gemv.dot_tile(a.dtype, &x_rows, count, &ys, cols, blocks, &sums);
            for (0..cols) |t| {
                const c_row = c.row_at(.{ .i1 = column + t, .i2 = batch2, .i3 = batch3 });
                for (0..count) |r| common.store_f32(c_row.at(ms[r]), sums[t][r]);
            }
            column += cols;
        }
    }
}

fn mul_mat_row_dots(a: Tensor, b: Tensor, c: Tensor, rd: RowDot, work: *const common.Work) common.Status {
    const k = a.ne[0];
    const y_bytes = rd.row_bytes(k);
    const y_len: usize = @intCast(quant.row_bytes(rd.activation, k));
    const x_len: usize = @intCast(quant.row_bytes(a.dtype, k));
    const b_range = common.thread_range(b.rows(), work);
    for (b_range.begin..b_range.end) |row| {
        const values: [*]align(1) const f32 = @ptrFromInt(b.row(row).base);
        quant.quantize_row_activation(rd.activation, values[0..k], work.scratch[row * y_bytes ..][0..y_len]);
    }
    work.sync(); // every row of src1 is quantized before any thread reads one
    const range = common.thread_range(group_count(a, b), work);
    if (rd.cols_dot) |cols_dot| {
        for (range.begin..range.end) |item| row_dot_tiles(a, b, c, group_of(item, a, b), cols_dot, work.scratch, y_bytes);
        return .ok;
    }
    for (range.begin..range.end) |item| {
        const g = group_of(item, a, b);
        for (0..b.ne[1]) |column| {
            const index: common.RowIndex = .{ .i1 = column, .i2 = g.batch2, .i3 = g.batch3 };
            const flat = column + b.ne[1] * (g.batch2 + b.ne[2] * g.batch3);
            const y = work.scratch[flat * y_bytes ..][0..y_len];
            const c_row = c.row_at(index);
            for (0..g.count) |r| {
                const x: [*]const u8 = @ptrFromInt(g.weight_row(a, r).base);
                // The row a group later (rows are usually adjacent), a line at a time: the dots
                // read one row after another, and this keeps the lines ahead of them arriving.
                if (column == 0) {
                    var line: usize = 0;
                    while (line < x_len) : (line += 64) @prefetch(x + rows_per_group * x_len + line, .{});
                }
                common.store_f32(c_row.at(g.m0 + r), rd.dot(x[0..x_len], y));
            }
        }
    }
    return .ok;
}

/// One group's rows times every column of src1, each row's blocks unpacked once per
/// dots.k_cols_max columns (prefill): a tile of columns, then the group's rows one by one
/// against it (both stay in L1).
fn row_dot_tiles(a: Tensor, b: Tensor, c: Tensor, g: Group, cols_dot: anytype, scratch: [*]u8, y_bytes: usize) void {
    const k = a.ne[0];
    const x_len: usize = @intCast(quant.row_bytes(a.dtype, k));
    const first = b.ne[1] * (g.batch2 + b.ne[2] * g.batch3);
    var column: usize = 0;
    while (column < b.ne[1]) {
        const cols = @min(dots.k_cols_max, b.ne[1] - column);
        for (0..g.count) |r| {
            const x: [*]const u8 = @ptrFromInt(g.weight_row(a, r).base);
            // The row a group later, as mul_mat_row_dots does.
            if (column == 0) {
                var line: usize = 0;
                while (line < x_len) : (line += 64) @prefetch(x + rows_per_group * x_len + line, .{});
            }
            var sums: [dots.k_cols_max]f32 = undefined;
            cols_dot(x[0..x_len], scratch + (first + column) * y_bytes, y_bytes, cols, &sums);
            for (0..cols) |t| {
                const c_row = c.row_at(.{ .i1 = column + t, .i2 = g.batch2, .i3 = g.batch3 });
                common.store_f32(c_row.at(g.m0 + r), sums[t]);
            }
        }
        column += cols;
    }
}
