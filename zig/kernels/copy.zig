//! cpy and get_rows.
//!
//! cpy: dst <- src0 converted, element counts equal but shapes free (ggml): elements are read in
//! row-major logical order of src0 and written in row-major logical order of dst. Pairs f32->f32,
//! f32->f16, f16->f32, f16->f16, i32->i32; same-dtype copies are bit exact, f32->f16 rounds to
//! nearest even. f32/f16 <-> q8_0/q4_0 (quantized KV caches) go row to row through quant.zig. Three paths: both contiguous with one dtype (a byte copy split across threads),
//! equal row length (row to row, vectorized), and otherwise an element walk per dst row.
//!
//! set_rows: the scatter of get_rows, into a KV cache at token positions: dst (the target's own
//! memory, f32 or f16, any strides) row (src1[n, b, c], b, c) <- src0 f32 or f16 row (n, b, c),
//! converted as cpy converts; src1 i32 or i64. An index outside [0, R) stops the node before any thread writes; two equal
//! indices leave one of their rows (which one is not specified), as in ggml.
//!
//! get_rows: src0 [ne0, R, B, C] f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 (rows of
//! the last six are dequantized with quant.zig, bit for bit what `dequantize` gives; an i32
//! table gives i32 rows, as ggml), src1 i32 or i64
//! [N, B, C, 1], dst f32 [ne0, N, B, C]: dst row (n, b, c) = src0 row (src1[n, b, c], b, c). An index outside [0, R) makes every thread
//! return .out_of_bounds before any thread writes.

const std = @import("std");
const common = @import("common.zig");
const quant = @import("../quant.zig");

const assert = common.assert;
const DType = common.DType;
const Strided = common.Strided;
const Tensor = common.Tensor;
const lanes = common.lanes;

/// Byte copy chunks are multiples of this, so no thread splits a cache line with another.
const copy_granule_bytes = 64;

pub fn cpy(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    assert(dst.element_count() == src.element_count());
    if (!pair_supported(src.dtype, dst.dtype)) return .unsupported;
    if (dst.dtype.block_size() > 1 or src.dtype.block_size() > 1) {
        // f32/f16 rows to or from q8_0/q4_0 blocks (validate: equal row lengths, contiguous
        // rows), with quant.zig's row functions: bit for bit what `quantize`/`dequantize` give
        // (f16 goes through f32 a block at a time, as ggml converts it).
        const count = dst.ne[0];
        const range = common.thread_range(dst.rows(), work);
        for (range.begin..range.end) |row| {
            if (src.dtype.block_size() > 1) {
                const bytes: [*]const u8 = @ptrFromInt(src.row(row).base);
                dequantize_row_to(dst.dtype, dst.row(row).base, src.dtype, bytes[0..@intCast(quant.row_bytes(src.dtype, count))], count);
            } else {
                const bytes: [*]u8 = @ptrFromInt(dst.row(row).base);
                quantize_row_from(src.dtype, src.row(row).base, dst.dtype, bytes[0..@intCast(quant.row_bytes(dst.dtype, count))], count);
            }
        }
        return .ok;
    }
    if (dst.dtype == src.dtype and dst.is_contiguous() and src.is_contiguous()) {
        copy_bytes(dst.base, src.base, dst.element_count() * dst.size_bytes(), work);
    } else if (dst.ne[0] == src.ne[0]) {
        // Equal row length: flattened row r of dst holds exactly flattened row r of src0.
        const range = common.thread_range(dst.rows(), work);
        for (range.begin..range.end) |row| {
            convert_row(dst.row(row), dst.dtype, src.row(row), src.dtype, dst.ne[0]);
        }
    } else {
        const range = common.thread_range(dst.rows(), work);
        for (range.begin..range.end) |row| walk_row(dst, src, row);
    }
    return .ok;
}

/// `count` f32 or f16 values at `from` (adjacent) quantized into `bytes`: f32 rows whole, f16
/// rows a block at a time through f32 (ggml's cpy converts f16 rows to f32, then quantizes).
fn quantize_row_from(from: DType, address: usize, to: DType, bytes: []u8, count: usize) void {
    if (from == .f32) {
        const floats: [*]align(1) const f32 = @ptrFromInt(address);
        return quant.quantize_row(to, floats[0..count], bytes);
    }
    assert(from == .f16);
    const halves: [*]align(1) const u16 = @ptrFromInt(address);
    const block_size = to.block_size();
    const block_bytes = to.block_bytes();
    var block: [quant.qk_k]f32 = undefined;
    var index: usize = 0;
    while (index < count) : (index += block_size) {
        for (block[0..block_size], halves[index..][0..block_size]) |*x, h| x.* = quant.fp16_to_fp32(h);
        const at = index / block_size * block_bytes;
        quant.quantize_row(to, block[0..block_size], bytes[at..][0..block_bytes]);
    }
}

/// `bytes` (`count` values of blocks) dequantized into f32 or f16 values at `address`
/// (adjacent): f16 values are the f32 ones rounded to nearest even (GGML_FP32_TO_FP16).
fn dequantize_row_to(to: DType, address: usize, from: DType, bytes: []const u8, count: usize) void {
    if (to == .f32) {
        const floats: [*]align(1) f32 = @ptrFromInt(address);
        return quant.dequantize_row(from, bytes, floats[0..count]);
    }
    assert(to == .f16);
    const halves: [*]align(1) u16 = @ptrFromInt(address);
    const block_size = from.block_size();
    const block_bytes = from.block_bytes();
    var block: [quant.qk_k]f32 = undefined;
    var index: usize = 0;
    while (index < count) : (index += block_size) {
        const at = index / block_size * block_bytes;
        quant.dequantize_row(from, bytes[at..][0..block_bytes], block[0..block_size]);
        for (halves[index..][0..block_size], block[0..block_size]) |*h, x| h.* = quant.fp32_to_fp16(x);
    }
}

pub fn pair_supported(from: DType, to: DType) bool {
    return switch (from) {
        .f32, .f16 => to == .f32 or to == .f16 or to == .q8_0 or to == .q4_0,
        .q8_0, .q4_0 => to == .f32 or to == .f16,
        .i32 => to == .i32,
        else => false, // bf16 and the block types: no cpy kernel yet (validate refuses them)
    };
}

fn copy_bytes(to: usize, from: usize, size_bytes: usize, work: *const common.Work) void {
    const granules = (size_bytes + copy_granule_bytes - 1) / copy_granule_bytes;
    const range = common.thread_range(granules, work);
    const begin = @min(size_bytes, range.begin * copy_granule_bytes);
    const end = @min(size_bytes, range.end * copy_granule_bytes);
    if (begin == end) return;
    const destination: [*]u8 = @ptrFromInt(to);
    const source: [*]const u8 = @ptrFromInt(from);
    // memmove: a cpy of a tensor onto itself is legal and must not trip the overlap check.
    @memmove(destination[begin..end], source[begin..end]);
}

/// Converts `count` elements from `src` to `dst`.
pub fn convert_row(dst: Strided, to: DType, src: Strided, from: DType, count: usize) void {
    assert(pair_supported(from, to));
    if (from == to) return copy_row_bits(dst, src, count, to.size_bytes());
    var index: usize = 0;
    while (index < count) : (index += lanes) {
        const chunk = @min(lanes, count - index);
        const value = switch (from) {
            .f32 => common.load_chunk(src, index, chunk, 0),
            .f16 => common.load_chunk_f16(src, index, chunk),
            else => unreachable,
        };
        switch (to) {
            .f32 => common.store_chunk(dst, index, chunk, value),
            .f16 => common.store_chunk_f16(dst, index, chunk, value),
            else => unreachable,
        }
    }
}

fn copy_row_bits(dst: Strided, src: Strided, count: usize, size: usize) void {
    assert(size == 2 or size == 4);
    if (dst.stride == size and src.stride == size) {
        const destination: [*]u8 = @ptrFromInt(dst.base);
        const source: [*]const u8 = @ptrFromInt(src.base);
        @memmove(destination[0 .. count * size], source[0 .. count * size]);
        return;
    }
    for (0..count) |index| copy_element(dst.at(index), src.at(index), size);
}

fn copy_element(to: usize, from: usize, size: usize) void {
    if (size == 4) {
        common.store_u32(to, common.load_u32(from));
    } else {
        common.store_u16(to, common.load_u16(from));
    }
}

/// Row `row` of dst when src0 has another row length: the row's flat element range, read from
/// src0 by carrying src0 coordinates along (no division per element).
fn walk_row(dst: Tensor, src: Tensor, row: usize) void {
    const dst_row = dst.row(row);
    const flat = row * dst.ne[0];
    var position: [common.dims_max]usize = undefined;
    var rest = flat;
    for (0..common.dims_max) |d| {
        position[d] = rest % src.ne[d];
        rest /= src.ne[d];
    }
    assert(rest == 0);
    for (0..dst.ne[0]) |index| {
        var from = src.base;
        for (0..common.dims_max) |d| from += position[d] * src.nb[d];
        convert_element(dst_row.at(index), dst.dtype, from, src.dtype);
        advance(&position, src.ne);
    }
}

fn advance(position: *[common.dims_max]usize, ne: [common.dims_max]usize) void {
    for (0..common.dims_max) |d| {
        position[d] += 1;
        if (position[d] < ne[d]) return;
        position[d] = 0;
    }
}

fn convert_element(to: usize, to_dtype: DType, from: usize, from_dtype: DType) void {
    if (to_dtype == from_dtype) return copy_element(to, from, to_dtype.size_bytes());
    const value: f32 = switch (from_dtype) {
        .f32 => common.load_f32(from),
        .f16 => common.load_f16(from),
        else => unreachable,
    };
    switch (to_dtype) {
        .f32 => common.store_f32(to, value),
        .f16 => common.store_f16(to, @floatCast(value)),
        else => unreachable,
    }
}

pub fn get_rows(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    const indices = Tensor.from(&n.src[1]);
    assert(indices.dtype == .i32 or indices.dtype == .i64);
    assert(dst.dtype == .f32 or (dst.dtype == .i32 and src.dtype == .i32));
    if (!indices_in_range(indices, src.ne[1])) return .out_of_bounds;
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        const source_row = row_index_value(indices, index);
        const from = src.row_at(.{ .i1 = source_row, .i2 = index.i2, .i3 = index.i3 });
        if (src.dtype.dequantizes()) {
            dequantize_into(dst.row_at(index), from, src.dtype, dst.ne[0]);
        } else {
            convert_row(dst.row_at(index), dst.dtype, from, src.dtype, dst.ne[0]);
        }
    }
    return .ok;
}

pub fn set_rows(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    const indices = Tensor.from(&n.src[1]);
    assert(indices.dtype == .i32 or indices.dtype == .i64);
    assert(src.dtype == .f32 or src.dtype == .f16);
    if (!indices_in_range(indices, dst.ne[1])) return .out_of_bounds;
    const range = common.thread_range(src.rows(), work);
    for (range.begin..range.end) |row| {
        const index = src.row_index(row);
        const target_row = row_index_value(indices, index);
        const to = dst.row_at(.{ .i1 = target_row, .i2 = index.i2, .i3 = index.i3 });
        convert_row(to, dst.dtype, src.row_at(index), src.dtype, src.ne[0]);
    }
    return .ok;
}

/// One row of bf16 or blocks (adjacent, validate checks nb[0]) into a contiguous f32 row.
fn dequantize_into(dst: Strided, src: Strided, dtype: DType, count: usize) void {
    assert(dst.stride == @sizeOf(f32));
    const bytes: [*]const u8 = @ptrFromInt(src.base);
    const floats: [*]align(1) f32 = @ptrFromInt(dst.base);
    quant.dequantize_row(dtype, bytes[0..@intCast(quant.row_bytes(dtype, count))], floats[0..count]);
}

/// An index element of src1 (i32 or i64), widened.
fn load_index(indices: Tensor, address: usize) i64 {
    if (indices.dtype == .i64) return @as(*align(1) const i64, @ptrFromInt(address)).*;
    return @as(i32, @bitCast(common.load_u32(address)));
}

/// src1[n, b, c] for row (n, b, c), b and c modulo src1's extents (set_rows broadcasts its
/// indices over batches as ggml does; get_rows' are whole); only called after `indices_in_range`.
fn row_index_value(indices: Tensor, index: common.RowIndex) usize {
    const batch2 = index.i2 % indices.ne[1];
    const batch3 = index.i3 % indices.ne[2];
    const offset = index.i1 * indices.nb[0] + batch2 * indices.nb[1] + batch3 * indices.nb[2];
    const value = load_index(indices, indices.base + offset);
    assert(value >= 0);
    return @intCast(value);
}

/// Every thread checks every index (a few loads per row copied), so all threads agree on the
/// status and an out-of-range index stops the node before anything is written.
fn indices_in_range(indices: Tensor, rows: usize) bool {
    for (0..indices.ne[2]) |batch3| {
        for (0..indices.ne[1]) |batch2| {
            const row = indices.row_at(.{ .i1 = batch2, .i2 = batch3, .i3 = 0 });
            for (0..indices.ne[0]) |column| {
                const value = load_index(indices, row.at(column));
                if (value < 0 or value >= rows) return false;
            }
        }
    }
    return true;
}
