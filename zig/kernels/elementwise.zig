//! Element-wise kernels: binary (add, sub, mul, div with src1 broadcast by repetition; f32, f16,
//! or an f16 src0 with an f32 src1 as ggml-cpu), unary
//! (scale, sqr, sqrt, gelu, silu, relu), repeat, and the fused silu_mul. Every output element depends only on the
//! input elements of the same (or the broadcast) index, so dst may alias src0 exactly.
//!
//! Rows are split across threads. Within a row, elements go through the same vector function in
//! chunks of `lanes`, whether the row is contiguous (vector loads) or strided (gathers), so a
//! value does not depend on the layout or the thread count.

const std = @import("std");
const common = @import("common.zig");

const assert = common.assert;
const F32x = common.F32x;
const Strided = common.Strided;
const Op = @import("../node.zig").Op;
const Tensor = common.Tensor;
const lanes = common.lanes;
const splat = common.splat;

pub const BinaryOp = enum { add, sub, mul, div };

/// The unary ops (node.zig holds the list; this file holds their math).
pub const UnaryOp = Op.Unary;

/// Runs `op` if it is a unary op; null when it is not one.
pub fn unary_of(op: Op, n: *const common.Node, work: *const common.Work) ?common.Status {
    inline for (@typeInfo(UnaryOp).@"enum".fields) |field| {
        if (op == @field(Op, field.name)) return unary(@field(UnaryOp, field.name), n, work);
    }
    return null;
}

pub fn binary(
    comptime op: BinaryOp,
    n: *const common.Node,
    work: *const common.Work,
) common.Status {
    const dst = Tensor.from(&n.dst);
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    assert(dst.element_count() == a.element_count());
    assert(a.ne[0] % b.ne[0] == 0);
    if (dst.dtype != .f32 or a.dtype != .f32 or b.dtype != .f32) {
        return binary_converted(op, dst, a, b, work);
    }
    const stream = common.use_stream_stores(dst);
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        binary_row(
            op,
            dst.row_at(index),
            a.row_at(index),
            b.row_broadcast(index),
            dst.ne[0],
            b.ne[0],
            stream,
        );
    }
    if (stream) common.stream_fence();
    return .ok;
}

/// Any f16 among dst, src0 and src1 (ggml-cpu's binary-ops.cpp: all f16, or an f16 src0 with
/// an f32 src1 into an f16 or f32 dst): each element widened to f32, one f32 operation, the
/// result rounded once to dst's dtype. src1's row is gathered with a wrapping index.
fn binary_converted(
    comptime op: BinaryOp,
    dst: Tensor,
    a: Tensor,
    b: Tensor,
    work: *const common.Work,
) common.Status {
    assert(a.dtype == .f16 or a.dtype == .f32);
    assert(b.dtype == .f16 or b.dtype == .f32);
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        const dst_row = dst.row_at(index);
        const a_row = a.row_at(index);
        const b_row = b.row_broadcast(index);
        var index_b: usize = 0;
        var i: usize = 0;
        while (i < dst.ne[0]) : (i += lanes) {
            const chunk = @min(lanes, dst.ne[0] - i);
            var gathered: [lanes]f32 = @splat(1);
            for (0..chunk) |lane| {
                const at = b_row.at(index_b);
                gathered[lane] = if (b.dtype == .f16) common.load_f16(at) else common.load_f32(at);
                index_b += 1;
                if (index_b == b.ne[0]) index_b = 0;
            }
            const loaded = if (a.dtype == .f16)
                common.load_chunk_f16(a_row, i, chunk)
            else
                common.load_chunk(a_row, i, chunk, 1);
            const value = binary_apply(op, loaded, gathered);
            if (dst.dtype == .f16) {
                common.store_chunk_f16(dst_row, i, chunk, value);
            } else {
                common.store_chunk(dst_row, i, chunk, value);
            }
        }
    }
    return .ok;
}

fn binary_apply(comptime op: BinaryOp, a: F32x, b: F32x) F32x {
    return switch (op) {
        .add => a + b,
        .sub => a - b,
        .mul => a * b,
        .div => a / b,
    };
}

/// dst[i] = a[i] op b[i % count_b]; count_b divides count.
fn binary_row(
    comptime op: BinaryOp,
    dst: Strided,
    a: Strided,
    b: Strided,
    count: usize,
    count_b: usize,
    stream: bool,
) void {
    assert(count_b >= 1);
    assert(count % count_b == 0);
    var index: usize = 0;
    if (count_b == count) {
        while (index < count) : (index += lanes) {
            const chunk = @min(lanes, count - index);
            const value = binary_apply(
                op,
                common.load_chunk(a, index, chunk, 1),
                common.load_chunk(b, index, chunk, 1),
            );
            common.store_chunk_maybe_stream(dst, index, chunk, value, stream);
        }
    } else if (count_b == 1) {
        const scalar = splat(common.load_f32(b.base));
        while (index < count) : (index += lanes) {
            const chunk = @min(lanes, count - index);
            common.store_chunk(
                dst,
                index,
                chunk,
                binary_apply(op, common.load_chunk(a, index, chunk, 1), scalar),
            );
        }
    } else {
        // src1's row repeats inside the row: gather it with a wrapping index, no division.
        var index_b: usize = 0;
        while (index < count) : (index += lanes) {
            const chunk = @min(lanes, count - index);
            var gathered: [lanes]f32 = @splat(1);
            for (0..chunk) |lane| {
                gathered[lane] = common.load_f32(b.at(index_b));
                index_b += 1;
                if (index_b == count_b) index_b = 0;
            }
            common.store_chunk(
                dst,
                index,
                chunk,
                binary_apply(op, common.load_chunk(a, index, chunk, 1), gathered),
            );
        }
    }
}

pub fn unary(comptime op: UnaryOp, n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    assert(dst.element_count() == src.element_count());
    assert(dst.dtype == src.dtype);
    // scale's params: factor and bias (ggml_scale_bias: x * factor + bias; bias 0 is a plain
    // multiply, as ggml-cpu's ggml_vec_scale_f32, so -0 stays -0).
    const factor = splat(n.param_f32(0));
    const bias = splat(n.param_f32(1));
    // Outputs past the cache size skip the read-for-ownership of each line (see common.zig).
    const stream = dst.dtype == .f32 and common.use_stream_stores(dst);
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        const dst_row = dst.row_at(index);
        const src_row = src.row_at(index);
        var i: usize = 0;
        while (i < dst.ne[0]) : (i += lanes) {
            const chunk = @min(lanes, dst.ne[0] - i);
            // f16 rows are widened, computed in f32 and rounded back once (ggml's f16 paths).
            const x = if (dst.dtype == .f16)
                common.load_chunk_f16(src_row, i, chunk)
            else
                common.load_chunk(src_row, i, chunk, 0);
            // silu as ggml_vec_silu_f32: full vectors and the scalar tail differ in their exp.
            const value = if (op == .silu)
                common.ggml_silu_chunk(x, chunk)
            else if (op == .scale and n.param_f32(1) != 0)
                common.mul_add(x, factor, bias)
            else
                unary_apply(op, x, factor);
            if (dst.dtype == .f16) {
                common.store_chunk_f16(dst_row, i, chunk, value);
            } else {
                common.store_chunk_maybe_stream(dst_row, i, chunk, value, stream);
            }
        }
    }
    if (stream) common.stream_fence();
    return .ok;
}

/// Fused silu(src0) * src1 (one shape): the arithmetic of silu then mul, element by element, so
/// bitwise their result, without writing and reading back silu's output. This is also
/// ggml_vec_swiglu_f32 bit for bit (llama.cpp's ggml_swiglu_split): full vectors through ggml_v_silu,
/// the tail through ggml_silu_f32, each times src1 in f32.
pub fn silu_mul(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const a = Tensor.from(&n.src[0]);
    const b = Tensor.from(&n.src[1]);
    assert(dst.element_count() == a.element_count());
    assert(dst.element_count() == b.element_count());
    const stream = common.use_stream_stores(dst);
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        const dst_row = dst.row_at(index);
        const a_row = a.row_at(index);
        const b_row = b.row_at(index);
        var i: usize = 0;
        while (i < dst.ne[0]) : (i += lanes) {
            const chunk = @min(lanes, dst.ne[0] - i);
            const activated = common.ggml_silu_chunk(common.load_chunk(a_row, i, chunk, 0), chunk);
            const value = activated * common.load_chunk(b_row, i, chunk, 1);
            common.store_chunk_maybe_stream(dst_row, i, chunk, value, stream);
        }
    }
    if (stream) common.stream_fence();
    return .ok;
}

fn unary_apply(comptime op: UnaryOp, x: F32x, factor: F32x) F32x {
    return switch (op) {
        .scale => x * factor,
        .sqr => x * x,
        .sqrt => @sqrt(x),
        .gelu => gelu(x),
        .silu => common.ggml_silu(x), // `unary` sends a row's partial last chunk to the scalar tail
        // As ggml: (x > 0) ? x : 0, so NaN and -0 give +0.
        .relu => @select(f32, x > splat(0), x, splat(0)),
    };
}

/// ggml's tanh approximation 0.5 x (1 + tanh(y)), y = sqrt(2/pi) (x + 0.044715 x^3). Since
/// 0.5 (1 + tanh(y)) = 1 / (1 + e^(-2y)), this is x / (1 + e^(-2y)), which has no cancellation
/// for large negative x, where 1 + tanh(y) would lose every digit. As ggml's CPU gelu, x <= -10
/// gives 0 and x >= 10 gives x (so gelu(-inf) is 0, not -inf / inf = NaN); NaN stays NaN.
fn gelu(x: F32x) F32x {
    const sqrt_2_over_pi: f32 = 0.79788456080286535588;
    const y = splat(sqrt_2_over_pi) * x * (splat(1) + splat(0.044715) * x * x);
    const smooth = x / (splat(1) + common.exp(splat(-2) * y));
    return @select(f32, x <= splat(-10), splat(0), @select(f32, x >= splat(10), x, smooth));
}

/// dst(i) = src0(i mod src0.ne), every dst.ne[d] a multiple of src0.ne[d]. Elements are copied
/// bit for bit, so any dtype works when dst and src0 share it.
pub fn repeat(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    assert(dst.dtype == src.dtype);
    assert(dst.ne[0] % src.ne[0] == 0);
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        repeat_row(
            dst.row_at(index),
            src.row_broadcast(index),
            dst.ne[0],
            src.ne[0],
            dst.size_bytes(),
        );
    }
    return .ok;
}

fn repeat_row(dst: Strided, src: Strided, count: usize, count_src: usize, size: usize) void {
    assert(size == 2 or size == 4);
    assert(count % count_src == 0);
    if (dst.stride == size and src.stride == size) {
        const bytes = count_src * size;
        const from: [*]const u8 = @ptrFromInt(src.base);
        var offset: usize = 0;
        while (offset < count * size) : (offset += bytes) {
            const to: [*]u8 = @ptrFromInt(dst.base + offset);
            @memmove(to[0..bytes], from[0..bytes]);
        }
        return;
    }
    var index_src: usize = 0;
    for (0..count) |index| {
        if (size == 4) {
            common.store_u32(dst.at(index), common.load_u32(src.at(index_src)));
        } else {
            common.store_u16(dst.at(index), common.load_u16(src.at(index_src)));
        }
        index_src += 1;
        if (index_src == count_src) index_src = 0;
    }
}
