//! Checks one node of a plan before anything computes it: known op, source count, per-tensor
//! sanity (dtype code, ne >= 1, nb >= 0, no overflow), allowed dtypes and shape consistency per
//! op. Kernels assume every rule here holds, so this file is the single statement of what each
//! op accepts. Plain scalar code: it runs in the baseline library, before any variant is chosen.

const std = @import("std");
const node = @import("node.zig");

const assert = std.debug.assert;
const Node = node.Node;
const Op = node.Op;
const Status = node.Status;
const TensorDesc = node.TensorDesc;
const DType = node.DType;
const dims_max = node.dims_max;

pub const Verdict = struct {
    status: Status,
    reason: []const u8, // static; names the op and the broken rule

    pub const ok: Verdict = .{ .status = .ok, .reason = "ok" };
};

/// Largest extent of one dimension and of a whole tensor, in elements; far above any real
/// tensor, low enough that index and byte arithmetic in the kernels cannot overflow 64 bits.
pub const ne_max: i64 = 1 << 40;
pub const element_count_max: i64 = 1 << 44;
/// Largest stride and largest byte extent of a tensor.
pub const nb_max: i64 = 1 << 48;
pub const extent_bytes_max: i64 = 1 << 56;

comptime {
    assert(element_count_max * 4 < extent_bytes_max);
    assert(@as(i128, element_count_max) * ne_max < std.math.maxInt(i128));
    assert(@as(i128, extent_bytes_max) + @as(i128, ne_max) * nb_max < std.math.maxInt(i128));
}

pub fn validate_node(n: *const Node) Verdict {
    const op: Op = @enumFromInt(n.op);
    return switch (op) {
        _ => .{ .status = .unsupported, .reason = "unknown op code" },
        inline else => |known| validate_op(known, n),
    };
}

fn validate_op(comptime op: Op, n: *const Node) Verdict {
    const name = @tagName(op);
    const counts = source_counts(op);
    if (n.src_count < counts[0] or n.src_count > counts[1]) {
        return fail(.invalid_argument, name ++ ": wrong src_count");
    }
    if (check_tensor(name ++ ": dst", &n.dst, true)) |verdict| return verdict;
    inline for (0..node.sources_max) |s| {
        if (s < n.src_count) {
            const label = std.fmt.comptimePrint("{s}: src{d}", .{ name, s });
            if (check_tensor(label, &n.src[s], false)) |verdict| return verdict;
        }
    }
    if (comptime op.is_unary() or op.is_unary_math()) return check_unary_float(name, n);
    return switch (op) {
        .add, .sub, .mul, .div => check_binary(name, n),
        .norm, .rms_norm => check_unary(name, n),
        .sum => check_sum(n),
        .mean => check_mean(n),
        .repeat => check_repeat(n),
        .mul_mat => check_mul_mat(n),
        .cpy => check_cpy(n),
        .get_rows => check_get_rows(n),
        .soft_max => check_soft_max(n),
        .rope => check_rope(n),
        .set_rows => check_set_rows(n),
        .silu_mul => check_silu_mul(n),
        .rms_norm_mul => check_rms_norm_mul(n),
        .sum_rows, .max_rows, .min_rows => check_row_reduction(name, n),
        .argmax => check_argmax(n),
        .cumsum => check_unary_float(name, n),
        .count_equal => check_count_equal(n),
        .concat => check_concat(n),
        .pad => check_pad("pad", n),
        .pad_circular => check_pad("pad_circular", n),
        .acc => check_view_write(.acc, n),
        .set => check_view_write(.set, n),
        .pad_reflect_1d => check_pad_reflect_1d(n),
        .roll => check_roll(n),
        .repeat_back => check_repeat_back(n),
        .argsort => check_sort(.argsort, n),
        .top_k => check_sort(.top_k, n),
        .tri => check_tri(n),
        .diag_mask_inf => check_diag_mask_inf(n),
        .fill => check_fill(n),
        .arange => check_arange(n),
        .flash_attn_ext => check_flash_attn_ext(n),
        .im2col => check_im2col(n),
        .conv_2d => check_conv_2d(n),
        .l2_norm => check_l2_norm(n),
        .group_norm => check_group_norm(n),
        .pool_1d => check_pool(.one_d, n),
        .pool_2d => check_pool(.two_d, n),
        .interpolate => check_interpolate(n),
        .timestep_embedding => check_timestep_embedding(n),
        .conv_transpose_1d => check_conv_transpose(.one_d, n),
        .conv_transpose_2d => check_conv_transpose(.two_d, n),
        // Unary ops returned above (op is comptime-known); unnamed codes never get here.
        else => unreachable,
    };
}

/// Inclusive bounds on src_count.
fn source_counts(comptime op: Op) [2]u32 {
    return switch (op) {
        .add, .sub, .mul, .div, .mul_mat, .get_rows, .im2col, .conv_2d, .conv_transpose_1d, .conv_transpose_2d, .silu_mul, .rms_norm_mul, .set_rows, .concat, .count_equal, .acc, .set => .{ 2, 2 },
        .arange => .{ 0, 0 },
        .soft_max => .{ 1, 2 },
        .rope => .{ 2, 3 },
        .flash_attn_ext => .{ 3, 4 },
        else => .{ 1, 1 },
    };
}

fn fail(status: Status, reason: []const u8) Verdict {
    assert(status != .ok);
    return .{ .status = status, .reason = reason };
}

/// Dtype code, null data, ne in [1, ne_max], nb in [0, nb_max], overflow-free extent. A dst
/// stride of 0 over more than one element is refused: threads would race on one address.
fn check_tensor(comptime label: []const u8, t: *const TensorDesc, is_dst: bool) ?Verdict {
    const dtype = DType.from_code(t.dtype) orelse {
        return fail(.invalid_argument, label ++ ".dtype unknown");
    };
    // Block types: ne[0] is whole blocks and nb[0] one block (ggml's layout); the ops that
    // take them (get_rows, mul_mat src0) check that themselves, every other op refuses them.
    if (@mod(t.ne[0], @as(i64, @intCast(dtype.block_size()))) != 0) {
        return fail(.invalid_argument, label ++ ".ne[0] is not whole blocks of its dtype");
    }
    if (t.data == 0) return fail(.invalid_argument, label ++ ".data is null");
    // i128: each factor is bounded below, so neither product can overflow before its check.
    var count: i128 = 1;
    var extent: i128 = 0;
    inline for (0..dims_max) |d| {
        const dim = std.fmt.comptimePrint("[{d}]", .{d});
        if (t.ne[d] < 1) return fail(.invalid_argument, label ++ ".ne" ++ dim ++ " < 1");
        if (t.ne[d] > ne_max) return fail(.limit_reached, label ++ ".ne" ++ dim ++ " > ne_max");
        if (t.nb[d] < 0) return fail(.invalid_argument, label ++ ".nb" ++ dim ++ " < 0");
        if (t.nb[d] > nb_max) return fail(.limit_reached, label ++ ".nb" ++ dim ++ " > nb_max");
        if (is_dst and t.nb[d] == 0 and t.ne[d] > 1) {
            return fail(
                .invalid_argument,
                label ++ ".nb" ++ dim ++ " == 0 with ne" ++ dim ++ " > 1",
            );
        }
        count *= t.ne[d];
        if (count > element_count_max) {
            return fail(.limit_reached, label ++ " has more than element_count_max elements");
        }
        extent += @as(i128, t.ne[d] - 1) * t.nb[d];
        if (extent > extent_bytes_max) {
            return fail(.limit_reached, label ++ " spans more than extent_bytes_max bytes");
        }
    }
    return null;
}

fn dtype_of(t: *const TensorDesc) DType {
    return DType.from_code(t.dtype).?; // check_tensor refused unknown codes
}

/// A src0 that get_rows and mul_mat dequantize row by row: a dtype with a dequantize_row, rows
/// of adjacent blocks (nb[0] one block).
fn check_dequantized_rows(comptime name: []const u8, t: *const TensorDesc) ?Verdict {
    const dtype = dtype_of(t);
    if (!dtype.dequantizes()) return null;
    if (t.nb[0] != @as(i64, @intCast(dtype.block_bytes()))) {
        return fail(.unsupported, name ++ ": a bf16 or quantized src0 needs nb[0] == one block");
    }
    return null;
}

fn same_shape(a: *const TensorDesc, b: *const TensorDesc) bool {
    return std.mem.eql(i64, &a.ne, &b.ne);
}

fn check_binary(comptime name: []const u8, n: *const Node) Verdict {
    const a = &n.src[0];
    const b = &n.src[1];
    const dtype = dtype_of(&n.dst);
    const same = is_float(dtype) and dtype_of(a) == dtype and dtype_of(b) == dtype;
    // ggml-cpu's binary-ops.cpp also takes an f16 src0 with an f32 src1, into f16 or f32.
    const mixed = is_float(dtype) and dtype_of(a) == .f16 and dtype_of(b) == .f32;
    if (!same and !mixed) {
        return fail(.unsupported, name ++ ": dst, src0 and src1 must be all f32, all f16, or f16 src0 and f32 src1");
    }
    if (!same_shape(&n.dst, a)) return fail(.shape_mismatch, name ++ ": dst.ne != src0.ne");
    for (0..dims_max) |d| {
        if (@mod(a.ne[d], b.ne[d]) != 0) {
            return fail(.shape_mismatch, name ++ ": src1.ne[d] does not divide src0.ne[d]");
        }
    }
    return .ok;
}

/// The row norms: f32 in, f32 out, one shape.
fn check_unary(comptime name: []const u8, n: *const Node) Verdict {
    if (dtype_of(&n.dst) != .f32 or dtype_of(&n.src[0]) != .f32) {
        return fail(.unsupported, name ++ ": dst and src0 must be f32");
    }
    if (!same_shape(&n.dst, &n.src[0])) return fail(.shape_mismatch, name ++ ": dst.ne != src0.ne");
    return .ok;
}

fn check_sum(n: *const Node) Verdict {
    if (dtype_of(&n.dst) != .f32 or dtype_of(&n.src[0]) != .f32) {
        return fail(.unsupported, "sum: dst and src0 must be f32");
    }
    if (n.dst.element_count() != 1) return fail(.shape_mismatch, "sum: dst.ne != [1, 1, 1, 1]");
    return .ok;
}

fn check_mean(n: *const Node) Verdict {
    const src = &n.src[0];
    if (dtype_of(&n.dst) != .f32 or dtype_of(src) != .f32) {
        return fail(.unsupported, "mean: dst and src0 must be f32");
    }
    const expected = [dims_max]i64{ 1, src.ne[1], src.ne[2], src.ne[3] };
    if (!std.mem.eql(i64, &n.dst.ne, &expected)) {
        return fail(.shape_mismatch, "mean: dst.ne != [1, src0.ne[1], src0.ne[2], src0.ne[3]]");
    }
    return .ok;
}

fn check_repeat(n: *const Node) Verdict {
    if (dtype_of(&n.dst) != dtype_of(&n.src[0])) {
        return fail(.unsupported, "repeat: dst.dtype != src0.dtype");
    }
    if (!dtype_of(&n.dst).has_kernels()) {
        return fail(.unsupported, "repeat: dtype must be f32, f16 or i32");
    }
    for (0..dims_max) |d| {
        if (@mod(n.dst.ne[d], n.src[0].ne[d]) != 0) {
            return fail(.shape_mismatch, "repeat: src0.ne[d] does not divide dst.ne[d]");
        }
    }
    return .ok;
}

fn check_mul_mat(n: *const Node) Verdict {
    const a = &n.src[0];
    const b = &n.src[1];
    const c = &n.dst;
    if (!dtype_of(a).weight()) return fail(.unsupported, "mul_mat: src0 must be f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K or q6_K");
    if (check_dequantized_rows("mul_mat", a)) |verdict| return verdict;
    if (dtype_of(b) != .f32) return fail(.unsupported, "mul_mat: src1 must be f32");
    if (dtype_of(c) != .f32) return fail(.unsupported, "mul_mat: dst must be f32");
    // params[0] is the prepack flag (see kernels/mul_mat.zig): 0, or 1 for a constant src0.
    if (n.params[0] > 1) return fail(.invalid_argument, "mul_mat: params[0] (prepack) is not 0 or 1");
    // params[1] (f32) picks the arithmetic (kernels/mul_mat_quant.zig): 0 Graft's own, 1 ggml's,
    // 2 ggml's with its repacked q4_0 / q4_K kernels where ggml would use them (dot_repack.zig).
    const arithmetic = n.param_f32(1);
    if (arithmetic != 0 and arithmetic != 1 and arithmetic != 2) {
        return fail(.invalid_argument, "mul_mat: params[1] (ggml) is not 0, 1 or 2");
    }
    if (a.ne[0] != b.ne[0]) return fail(.shape_mismatch, "mul_mat: src0.ne[0] != src1.ne[0]");
    if (@mod(b.ne[2], a.ne[2]) != 0) {
        return fail(.shape_mismatch, "mul_mat: src0.ne[2] does not divide src1.ne[2]");
    }
    if (@mod(b.ne[3], a.ne[3]) != 0) {
        return fail(.shape_mismatch, "mul_mat: src0.ne[3] does not divide src1.ne[3]");
    }
    if (c.ne[0] != a.ne[1]) return fail(.shape_mismatch, "mul_mat: dst.ne[0] != src0.ne[1]");
    if (c.ne[1] != b.ne[1]) return fail(.shape_mismatch, "mul_mat: dst.ne[1] != src1.ne[1]");
    if (c.ne[2] != b.ne[2]) return fail(.shape_mismatch, "mul_mat: dst.ne[2] != src1.ne[2]");
    if (c.ne[3] != b.ne[3]) return fail(.shape_mismatch, "mul_mat: dst.ne[3] != src1.ne[3]");
    return .ok;
}

fn check_cpy(n: *const Node) Verdict {
    const from = dtype_of(&n.src[0]);
    const to = dtype_of(&n.dst);
    const float_pair = (from == .f32 or from == .f16) and (to == .f32 or to == .f16);
    // Quantized caches: f32/f16 rows quantized into q8_0/q4_0 blocks, and back.
    const float_from = from == .f32 or from == .f16;
    const float_to = to == .f32 or to == .f16;
    const quant_pair = (float_from and (to == .q8_0 or to == .q4_0)) or
        ((from == .q8_0 or from == .q4_0) and float_to);
    if (!float_pair and !quant_pair and !(from == .i32 and to == .i32)) {
        return fail(.unsupported, "cpy: dtype pair must be f32/f16 -> f32/f16, f32/f16 <-> q8_0/q4_0 or i32 -> i32");
    }
    if (quant_pair) {
        if (n.dst.ne[0] != n.src[0].ne[0]) return fail(.shape_mismatch, "cpy: a quantizing copy needs equal row lengths");
        const float_side = if (float_from) &n.src[0] else &n.dst;
        const block_side = if (float_from) &n.dst else &n.src[0];
        if (float_side.nb[0] != @as(i64, @intCast(dtype_of(float_side).size_bytes()))) {
            return fail(.unsupported, "cpy: a quantizing copy needs contiguous f32/f16 rows");
        }
        if (block_side.nb[0] != @as(i64, @intCast(dtype_of(block_side).block_bytes()))) {
            return fail(.unsupported, "cpy: a quantizing copy needs nb[0] == one block");
        }
    }
    if (n.dst.element_count() != n.src[0].element_count()) {
        return fail(.shape_mismatch, "cpy: dst and src0 element counts differ");
    }
    return .ok;
}

fn check_get_rows(n: *const Node) Verdict {
    const src = &n.src[0];
    const indices = &n.src[1];
    if (!dtype_of(src).weight() and dtype_of(src) != .i32) return fail(.unsupported, "get_rows: src0 must be f32, f16, i32, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K or q6_K");
    if (check_dequantized_rows("get_rows", src)) |verdict| return verdict;
    if (dtype_of(src).dequantizes() and n.dst.nb[0] != 4) {
        return fail(.unsupported, "get_rows: dst rows must be contiguous for a bf16 or quantized src0");
    }
    if (dtype_of(indices) != .i32 and dtype_of(indices) != .i64) {
        return fail(.unsupported, "get_rows: src1 must be i32 or i64");
    }
    if (dtype_of(src) == .i32) {
        if (dtype_of(&n.dst) != .i32) return fail(.unsupported, "get_rows: dst must be i32 for an i32 src0");
    } else if (dtype_of(&n.dst) != .f32) return fail(.unsupported, "get_rows: dst must be f32");
    if (indices.ne[1] != src.ne[2]) {
        return fail(.shape_mismatch, "get_rows: src1.ne[1] != src0.ne[2]");
    }
    if (indices.ne[2] != src.ne[3]) {
        return fail(.shape_mismatch, "get_rows: src1.ne[2] != src0.ne[3]");
    }
    if (indices.ne[3] != 1) return fail(.shape_mismatch, "get_rows: src1.ne[3] != 1");
    const expected = [dims_max]i64{ src.ne[0], indices.ne[0], src.ne[2], src.ne[3] };
    if (!std.mem.eql(i64, &n.dst.ne, &expected)) {
        return fail(
            .shape_mismatch,
            "get_rows: dst.ne != [src0.ne[0], src1.ne[0], src0.ne[2], src0.ne[3]]",
        );
    }
    return .ok;
}

/// set_rows (kernels/copy.zig): f32 | f16 src0 [ne0, N, B, C], i32 | i64 src1 [N, B', C'] (B' | B,
/// C' | C: broadcast), dst f32 or f16
/// [ne0, R, B, C] of any strides (a KV cache, or a transposed view of one).
fn check_set_rows(n: *const Node) Verdict {
    const src = &n.src[0];
    const indices = &n.src[1];
    if (dtype_of(src) != .f32 and dtype_of(src) != .f16) return fail(.unsupported, "set_rows: src0 must be f32 or f16");
    const to = dtype_of(&n.dst);
    if (to != .f32 and to != .f16) return fail(.unsupported, "set_rows: dst must be f32 or f16");
    if (dtype_of(indices) != .i32 and dtype_of(indices) != .i64) {
        return fail(.unsupported, "set_rows: src1 must be i32 or i64");
    }
    if (n.dst.ne[0] != src.ne[0]) return fail(.shape_mismatch, "set_rows: dst.ne[0] != src0.ne[0]");
    if (n.dst.ne[2] != src.ne[2] or n.dst.ne[3] != src.ne[3]) {
        return fail(.shape_mismatch, "set_rows: dst.ne[2..4] != src0.ne[2..4]");
    }
    // As ggml_set_rows: src1 [N, B', C'] with B' dividing B and C' dividing C (broadcast).
    if (indices.ne[0] != src.ne[1] or indices.ne[3] != 1 or @mod(src.ne[2], indices.ne[1]) != 0 or
        @mod(src.ne[3], indices.ne[2]) != 0)
    {
        return fail(.shape_mismatch, "set_rows: src1.ne must be [src0.ne[1], a divisor of src0.ne[2], a divisor of src0.ne[3], 1]");
    }
    return .ok;
}

fn check_soft_max(n: *const Node) Verdict {
    const src = &n.src[0];
    if (dtype_of(&n.dst) != .f32 or dtype_of(src) != .f32) {
        return fail(.unsupported, "soft_max: dst and src0 must be f32");
    }
    if (!same_shape(&n.dst, src)) return fail(.shape_mismatch, "soft_max: dst.ne != src0.ne");
    if (n.src_count == 2) {
        const mask = &n.src[1];
        if (dtype_of(mask) != .f32) return fail(.unsupported, "soft_max: mask (src1) must be f32");
        if (mask.ne[0] != src.ne[0]) {
            return fail(.shape_mismatch, "soft_max: src1.ne[0] != src0.ne[0]");
        }
        if (mask.ne[1] < src.ne[1]) {
            return fail(.shape_mismatch, "soft_max: src1.ne[1] < src0.ne[1]");
        }
    }
    // params[1]: ALiBi's max_bias (kernels/soft_max.zig); 0 means none.
    const max_bias = n.param_f32(1);
    if (!std.math.isFinite(max_bias) or max_bias < 0) {
        return fail(.invalid_argument, "soft_max: params[1] (max_bias) must be finite and >= 0");
    }
    if (max_bias > 0 and n.src_count != 2) {
        return fail(.invalid_argument, "soft_max: params[1] (max_bias) > 0 needs a mask (src1)");
    }
    return .ok;
}

/// rope (kernels/rope.zig): src0 f32|f16 and dst of its dtype and shape, i32 positions
/// [src0.ne[2]], an optional f32 vector of frequency factors (src2, at least n_dims/2), and
/// params n_dims (even, 2..ne0), mode (0 or 2), freq_base (finite, > 0), freq_scale, ext_factor,
/// attn_factor, beta_fast, beta_slow (finite) and n_ctx_orig (a whole number >= 0).
fn check_rope(n: *const Node) Verdict {
    const src = &n.src[0];
    const positions = &n.src[1];
    if (dtype_of(src) != .f32 and dtype_of(src) != .f16) {
        return fail(.unsupported, "rope: src0 must be f32 or f16");
    }
    if (dtype_of(&n.dst) != dtype_of(src)) return fail(.unsupported, "rope: dst and src0 dtypes differ");
    if (dtype_of(positions) != .i32) return fail(.unsupported, "rope: src1 (positions) must be i32");
    if (!same_shape(&n.dst, src)) return fail(.shape_mismatch, "rope: dst.ne != src0.ne");
    if (positions.ne[0] != src.ne[2] or positions.ne[1] != 1 or positions.ne[2] != 1 or
        positions.ne[3] != 1)
    {
        return fail(.shape_mismatch, "rope: src1.ne != [src0.ne[2], 1, 1, 1]");
    }
    const n_dims = n.param_f32(0);
    if (!(n_dims >= 2) or n_dims > @as(f32, @floatFromInt(src.ne[0])) or
        @floor(n_dims) != n_dims or @mod(n_dims, 2) != 0)
    {
        return fail(.invalid_argument, "rope: params[0] (n_dims) must be even, >= 2 and <= src0.ne[0]");
    }
    if (n.src_count == 3) {
        const factors = &n.src[2];
        if (dtype_of(factors) != .f32) return fail(.unsupported, "rope: src2 (freq factors) must be f32");
        if (@as(f32, @floatFromInt(factors.ne[0])) < n_dims / 2 or factors.ne[1] != 1 or
            factors.ne[2] != 1 or factors.ne[3] != 1)
        {
            return fail(.shape_mismatch, "rope: src2 (freq factors) must be a vector of >= n_dims/2");
        }
    }
    const mode = n.param_f32(1);
    if (mode != 0 and mode != 2) return fail(.invalid_argument, "rope: params[1] (mode) must be 0 (normal) or 2 (neox)");
    const freq_base = n.param_f32(2);
    if (!std.math.isFinite(freq_base) or !(freq_base > 0)) {
        return fail(.invalid_argument, "rope: params[2] (freq_base) must be finite and > 0");
    }
    const finite_names = [_][]const u8{
        "rope: params[3] (freq_scale) must be finite",
        "rope: params[4] (ext_factor) must be finite",
        "rope: params[5] (attn_factor) must be finite",
        "rope: params[6] (beta_fast) must be finite",
        "rope: params[7] (beta_slow) must be finite",
    };
    for (finite_names, 3..) |reason, slot| {
        if (!std.math.isFinite(n.param_f32(slot))) return fail(.invalid_argument, reason);
    }
    const n_ctx_orig = n.param_f32(8);
    if (!std.math.isFinite(n_ctx_orig) or n_ctx_orig < 0 or @floor(n_ctx_orig) != n_ctx_orig) {
        return fail(.invalid_argument, "rope: params[8] (n_ctx_orig) must be a whole number >= 0");
    }
    return .ok;
}

fn check_silu_mul(n: *const Node) Verdict {
    if (dtype_of(&n.dst) != .f32 or dtype_of(&n.src[0]) != .f32 or dtype_of(&n.src[1]) != .f32) {
        return fail(.unsupported, "silu_mul: dst, src0 and src1 must be f32");
    }
    if (!same_shape(&n.dst, &n.src[0])) return fail(.shape_mismatch, "silu_mul: dst.ne != src0.ne");
    if (!same_shape(&n.dst, &n.src[1])) return fail(.shape_mismatch, "silu_mul: dst.ne != src1.ne");
    return .ok;
}

fn check_rms_norm_mul(n: *const Node) Verdict {
    const a = &n.src[0];
    const g = &n.src[1];
    if (dtype_of(&n.dst) != .f32 or dtype_of(a) != .f32 or dtype_of(g) != .f32) {
        return fail(.unsupported, "rms_norm_mul: dst, src0 and src1 must be f32");
    }
    if (!same_shape(&n.dst, a)) return fail(.shape_mismatch, "rms_norm_mul: dst.ne != src0.ne");
    if (g.ne[0] != a.ne[0]) return fail(.shape_mismatch, "rms_norm_mul: src1.ne[0] != src0.ne[0]");
    for (1..dims_max) |d| {
        if (@mod(a.ne[d], g.ne[d]) != 0) {
            return fail(.shape_mismatch, "rms_norm_mul: src1.ne[d] does not divide src0.ne[d]");
        }
    }
    return .ok;
}

// ---- Shape and indexing ops (kernels/indexing.zig, kernels/sort.zig) ----

/// Largest magnitude of a whole-number param: TypeScript writes params as f32, exact up to 2^24.
pub const param_int_max: i64 = 1 << 24;

/// params[index] as a whole number in [min, max], or null (NaN, fractional, out of range).
fn param_int(n: *const Node, index: usize, min: i64, max: i64) ?i64 {
    const value = n.param_f32(index);
    if (!std.math.isFinite(value) or @floor(value) != value) return null;
    if (@abs(value) > @as(f32, @floatFromInt(param_int_max))) return null;
    const whole: i64 = @intFromFloat(value);
    if (whole < min or whole > max) return null;
    return whole;
}

/// dst and src0 of one dtype among those moved as bits (f32, f16, i32).
fn check_same_plain(comptime name: []const u8, n: *const Node) ?Verdict {
    if (dtype_of(&n.dst) != dtype_of(&n.src[0])) return fail(.unsupported, name ++ ": dst.dtype != src0.dtype");
    if (!dtype_of(&n.dst).has_kernels()) return fail(.unsupported, name ++ ": dtype must be f32, f16 or i32");
    return null;
}

/// dst and src0 of one float dtype (f32 or f16).
fn check_same_float(comptime name: []const u8, n: *const Node) ?Verdict {
    const dtype = dtype_of(&n.dst);
    if (dtype != dtype_of(&n.src[0])) return fail(.unsupported, name ++ ": dst.dtype != src0.dtype");
    if (dtype != .f32 and dtype != .f16) return fail(.unsupported, name ++ ": dtype must be f32 or f16");
    return null;
}

fn check_concat(n: *const Node) Verdict {
    if (check_same_plain("concat", n)) |verdict| return verdict;
    if (dtype_of(&n.src[1]) != dtype_of(&n.dst)) return fail(.unsupported, "concat: src1.dtype != src0.dtype");
    const dim = param_int(n, 0, 0, dims_max - 1) orelse {
        return fail(.invalid_argument, "concat: params[0] (dim) must be 0, 1, 2 or 3");
    };
    for (0..dims_max) |d| {
        const a = n.src[0].ne[d];
        const b = n.src[1].ne[d];
        if (d != dim and a != b) return fail(.shape_mismatch, "concat: src0.ne[d] != src1.ne[d] outside dim");
        const expected = if (d == dim) a + b else a;
        if (n.dst.ne[d] != expected) return fail(.shape_mismatch, "concat: dst.ne != src0.ne + src1.ne along dim");
    }
    return .ok;
}

/// pad and pad_circular: dst.ne[d] = src0.ne[d] + left + right (a circular pad may be longer
/// than src0: it wraps around again, as ggml's).
fn check_pad(comptime name: []const u8, n: *const Node) Verdict {
    if (check_same_plain(name, n)) |verdict| return verdict;
    for (0..dims_max) |d| {
        const left = param_int(n, 2 * d, 0, param_int_max) orelse {
            return fail(.invalid_argument, name ++ ": params[2d] (left pad) must be a whole number >= 0");
        };
        const right = param_int(n, 2 * d + 1, 0, param_int_max) orelse {
            return fail(.invalid_argument, name ++ ": params[2d + 1] (right pad) must be a whole number >= 0");
        };
        if (n.dst.ne[d] != n.src[0].ne[d] + left + right) {
            return fail(.shape_mismatch, name ++ ": dst.ne[d] != src0.ne[d] + left + right");
        }
    }
    return .ok;
}

/// acc and set's view of dst (see node.zig): strides nb1, nb2, nb3 and the offset, in elements.
pub const ViewParams = struct { nb: [dims_max]i64, offset: i64 };

/// params[2k] + params[2k + 1] * 2^24 for k = 0..3 (nb1, nb2, nb3, offset); null when a slot
/// is no whole number in range.
pub fn view_params(n: *const Node) ?ViewParams {
    var values: [4]i64 = undefined;
    for (0..4) |k| {
        const low = param_int(n, 2 * k, 0, param_int_max - 1) orelse return null;
        const high = param_int(n, 2 * k + 1, 0, param_int_max) orelse return null;
        values[k] = high * param_int_max + low;
    }
    return .{ .nb = .{ 1, values[0], values[1], values[2] }, .offset = values[3] };
}

pub const ViewWrite = enum { acc, set };

/// acc and set (ggml_acc, ggml_set): dst, src0 and src1 of one dtype; dst and src0 contiguous
/// of one shape; the view of dst (src1's shape, the params' strides) inside dst, its rows,
/// planes and batches apart (no element written twice, so threads never race).
fn check_view_write(comptime op: ViewWrite, n: *const Node) Verdict {
    const name = @tagName(op);
    const dtype = dtype_of(&n.dst);
    const b = &n.src[1];
    if (dtype != dtype_of(&n.src[0]) or dtype != dtype_of(b)) {
        return fail(.unsupported, name ++ ": dst, src0 and src1 must share a dtype");
    }
    const allowed = if (op == .acc) is_float(dtype) else dtype.has_kernels();
    if (!allowed) return fail(.unsupported, name ++ ": dtype must be f32 or f16 (set: or i32)");
    if (!same_shape(&n.dst, &n.src[0])) return fail(.shape_mismatch, name ++ ": dst.ne != src0.ne");
    if (!n.dst.is_contiguous() or !n.src[0].is_contiguous()) {
        return fail(.unsupported, name ++ ": dst and src0 must be contiguous");
    }
    const view = view_params(n) orelse {
        return fail(.invalid_argument, name ++ ": params (view strides, offset) must be whole numbers in [0, 2^48)");
    };
    var last: i128 = view.offset;
    for (0..dims_max) |d| last += @as(i128, b.ne[d] - 1) * view.nb[d];
    if (last >= n.dst.element_count()) {
        return fail(.out_of_bounds, name ++ ": the view of src1's shape does not lie inside dst");
    }
    for (1..dims_max) |d| {
        const inner = @as(i128, b.ne[d - 1]) * view.nb[d - 1];
        if (b.ne[d] > 1 and view.nb[d] < inner) {
            return fail(.invalid_argument, name ++ ": view stride nb[d] < src1.ne[d-1] * nb[d-1] (the view overlaps itself)");
        }
    }
    return .ok;
}

fn check_pad_reflect_1d(n: *const Node) Verdict {
    if (check_same_plain("pad_reflect_1d", n)) |verdict| return verdict;
    const src = &n.src[0];
    const p0 = param_int(n, 0, 0, src.ne[0] - 1) orelse {
        return fail(.invalid_argument, "pad_reflect_1d: params[0] (p0) must be in [0, src0.ne[0])");
    };
    const p1 = param_int(n, 1, 0, src.ne[0] - 1) orelse {
        return fail(.invalid_argument, "pad_reflect_1d: params[1] (p1) must be in [0, src0.ne[0])");
    };
    const expected = [dims_max]i64{ src.ne[0] + p0 + p1, src.ne[1], src.ne[2], src.ne[3] };
    if (!std.mem.eql(i64, &n.dst.ne, &expected)) {
        return fail(.shape_mismatch, "pad_reflect_1d: dst.ne != [src0.ne[0] + p0 + p1, src0.ne[1..4]]");
    }
    return .ok;
}

fn check_roll(n: *const Node) Verdict {
    if (check_same_plain("roll", n)) |verdict| return verdict;
    if (!same_shape(&n.dst, &n.src[0])) return fail(.shape_mismatch, "roll: dst.ne != src0.ne");
    for (0..dims_max) |d| {
        const extent = n.src[0].ne[d];
        _ = param_int(n, d, 1 - extent, extent - 1) orelse {
            return fail(.invalid_argument, "roll: params[d] (shift) must be a whole number with |shift| < ne[d]");
        };
    }
    return .ok;
}

fn check_repeat_back(n: *const Node) Verdict {
    if (check_same_float("repeat_back", n)) |verdict| return verdict;
    for (0..dims_max) |d| {
        if (@mod(n.src[0].ne[d], n.dst.ne[d]) != 0) {
            return fail(.shape_mismatch, "repeat_back: dst.ne[d] does not divide src0.ne[d]");
        }
    }
    return .ok;
}

fn check_sort(comptime op: enum { argsort, top_k }, n: *const Node) Verdict {
    const name = @tagName(op);
    const src = &n.src[0];
    if (dtype_of(src) != .f32 and dtype_of(src) != .f16) return fail(.unsupported, name ++ ": src0 must be f32 or f16");
    if (dtype_of(&n.dst) != .i32) return fail(.unsupported, name ++ ": dst must be i32");
    if (src.ne[0] > std.math.maxInt(i32)) return fail(.limit_reached, name ++ ": src0.ne[0] > 2^31 - 1 (i32 indices)");
    for (1..dims_max) |d| {
        if (n.dst.ne[d] != src.ne[d]) return fail(.shape_mismatch, name ++ ": dst.ne[1..4] != src0.ne[1..4]");
    }
    if (op == .top_k) {
        if (n.dst.ne[0] > src.ne[0]) return fail(.shape_mismatch, "top_k: dst.ne[0] (k) > src0.ne[0]");
        return .ok;
    }
    if (n.dst.ne[0] != src.ne[0]) return fail(.shape_mismatch, "argsort: dst.ne[0] != src0.ne[0]");
    _ = param_int(n, 0, 0, 1) orelse return fail(.invalid_argument, "argsort: params[0] (order) must be 0 or 1");
    // The kernel sorts each dst row in place as an i32 array.
    if (n.dst.nb[0] != 4 or n.dst.data % 4 != 0 or @mod(n.dst.nb[1], 4) != 0 or
        @mod(n.dst.nb[2], 4) != 0 or @mod(n.dst.nb[3], 4) != 0)
    {
        return fail(.unsupported, "argsort: dst rows must be contiguous and 4-byte aligned");
    }
    return .ok;
}

fn check_tri(n: *const Node) Verdict {
    if (check_same_plain("tri", n)) |verdict| return verdict;
    if (!same_shape(&n.dst, &n.src[0])) return fail(.shape_mismatch, "tri: dst.ne != src0.ne");
    _ = param_int(n, 0, 0, 3) orelse return fail(.invalid_argument, "tri: params[0] (type) must be 0, 1, 2 or 3");
    return .ok;
}

fn check_diag_mask_inf(n: *const Node) Verdict {
    if (check_same_float("diag_mask_inf", n)) |verdict| return verdict;
    if (!same_shape(&n.dst, &n.src[0])) return fail(.shape_mismatch, "diag_mask_inf: dst.ne != src0.ne");
    _ = param_int(n, 0, 0, param_int_max) orelse {
        return fail(.invalid_argument, "diag_mask_inf: params[0] (n_past) must be a whole number >= 0");
    };
    return .ok;
}

fn check_fill(n: *const Node) Verdict {
    if (check_same_float("fill", n)) |verdict| return verdict;
    if (!same_shape(&n.dst, &n.src[0])) return fail(.shape_mismatch, "fill: dst.ne != src0.ne");
    return .ok;
}

fn check_arange(n: *const Node) Verdict {
    if (dtype_of(&n.dst) != .f32) return fail(.unsupported, "arange: dst must be f32");
    const start = n.param_f32(0);
    const stop = n.param_f32(1);
    const step = n.param_f32(2);
    if (!std.math.isFinite(start) or !std.math.isFinite(stop) or !std.math.isFinite(step)) {
        return fail(.invalid_argument, "arange: start, stop and step must be finite");
    }
    // ggml_arange: ceilf((stop - start) / step) elements, in f32 arithmetic.
    const steps = @ceil((stop - start) / step);
    if (!(steps >= 1) or steps > @as(f32, @floatFromInt(ne_max))) {
        return fail(.invalid_argument, "arange: (stop - start) / step must be positive");
    }
    const expected = [dims_max]i64{ @intFromFloat(steps), 1, 1, 1 };
    if (!std.mem.eql(i64, &n.dst.ne, &expected)) {
        return fail(.shape_mismatch, "arange: dst.ne != [ceil((stop - start) / step), 1, 1, 1]");
    }
    return .ok;
}
/// flash_attn_ext (kernels/attention.zig), ggml_flash_attn_ext's rules: q f32 [DK, T, Hq, B];
/// k [DK, nKv, Hkv, Bk] and v [DV, nKv, Hkv, Bk] f32 or f16 whose heads and batches divide q's
/// (GQA); rows of q, k and v contiguous; an optional mask f32 or f16 [nKv, >= T, m2, m3] with
/// m2 | Hq and m3 | B; dst f32 [DV, Hq, T, B] with contiguous rows. params: scale (finite),
/// max_bias (finite, >= 0; > 0 needs the mask, which carries the positions), logit_softcap
/// (finite, >= 0).
fn check_flash_attn_ext(n: *const Node) Verdict {
    const q = &n.src[0];
    const k = &n.src[1];
    const v = &n.src[2];
    const kv_types = (dtype_of(k) == .f32 or dtype_of(k) == .f16) and
        (dtype_of(v) == .f32 or dtype_of(v) == .f16);
    if (dtype_of(q) != .f32 or !kv_types or dtype_of(&n.dst) != .f32) {
        return fail(.unsupported, "flash_attn_ext: q and dst must be f32, k and v f32 or f16");
    }
    if (!node_rows_contiguous(q) or !node_rows_contiguous(k) or !node_rows_contiguous(v) or
        !node_rows_contiguous(&n.dst))
    {
        return fail(.unsupported, "flash_attn_ext: rows of q, k, v and dst must be contiguous");
    }
    if (k.ne[0] != q.ne[0]) return fail(.shape_mismatch, "flash_attn_ext: k.ne[0] != q.ne[0]");
    if (v.ne[1] != k.ne[1]) return fail(.shape_mismatch, "flash_attn_ext: v.ne[1] != k.ne[1]");
    for (2..dims_max) |d| {
        if (@mod(q.ne[d], k.ne[d]) != 0 or @mod(q.ne[d], v.ne[d]) != 0) {
            return fail(.shape_mismatch, "flash_attn_ext: k.ne[2..4] or v.ne[2..4] does not divide q's");
        }
    }
    const expected = [dims_max]i64{ v.ne[0], q.ne[2], q.ne[1], q.ne[3] };
    if (!std.mem.eql(i64, &n.dst.ne, &expected)) {
        return fail(.shape_mismatch, "flash_attn_ext: dst.ne != [v.ne[0], q.ne[2], q.ne[1], q.ne[3]]");
    }
    if (n.src_count == 4) {
        const mask = &n.src[3];
        if (dtype_of(mask) != .f32 and dtype_of(mask) != .f16) {
            return fail(.unsupported, "flash_attn_ext: mask (src3) must be f32 or f16");
        }
        if (!node_rows_contiguous(mask)) return fail(.unsupported, "flash_attn_ext: mask rows must be contiguous");
        if (mask.ne[0] != k.ne[1]) return fail(.shape_mismatch, "flash_attn_ext: mask.ne[0] != k.ne[1]");
        if (mask.ne[1] < q.ne[1]) return fail(.shape_mismatch, "flash_attn_ext: mask.ne[1] < q.ne[1]");
        if (@mod(q.ne[2], mask.ne[2]) != 0 or @mod(q.ne[3], mask.ne[3]) != 0) {
            return fail(.shape_mismatch, "flash_attn_ext: mask.ne[2..4] does not divide q's");
        }
    }
    const scale = n.param_f32(0);
    const max_bias = n.param_f32(1);
    const softcap = n.param_f32(2);
    if (!std.math.isFinite(scale)) return fail(.invalid_argument, "flash_attn_ext: params[0] (scale) must be finite");
    if (!std.math.isFinite(max_bias) or max_bias < 0) {
        return fail(.invalid_argument, "flash_attn_ext: params[1] (max_bias) must be finite and >= 0");
    }
    if (max_bias > 0 and n.src_count != 4) {
        return fail(.invalid_argument, "flash_attn_ext: params[1] (max_bias) > 0 needs a mask");
    }
    if (!std.math.isFinite(softcap) or softcap < 0) {
        return fail(.invalid_argument, "flash_attn_ext: params[2] (logit_softcap) must be finite and >= 0");
    }
    return .ok;
}

fn node_rows_contiguous(t: *const TensorDesc) bool {
    return t.nb[0] == @as(i64, @intCast(dtype_of(t).size_bytes()));
}

/// Largest stride, padding and dilation of im2col (src/ops/conv.ts checks the same).
pub const conv_param_max: f32 = 1 << 20;

/// im2col (kernels/conv.zig), ggml_im2col's rules: params s0, s1, d0, d1 whole numbers in
/// [1, conv_param_max], p0, p1 in [0, conv_param_max], is_2d 0 or 1; src1 f32 with contiguous
/// rows, its channels (dim 2 in 2D, 1 in 1D) those of the kernel src0 (any dtype: only its
/// shape is read); a 1D image has ne[3] == 1; dst f32 or f16 of the unfolded shape.
fn check_im2col(n: *const Node) Verdict {
    for (0..8) |i| {
        const value = n.param_f32(i);
        const min: f32 = if (i == 2 or i == 3 or i >= 6) 0 else 1;
        const max: f32 = if (i >= 6) 1 else conv_param_max;
        if (!(value >= min and value <= max) or @floor(value) != value) {
            return fail(.invalid_argument, "im2col: params (s0, s1, p0, p1, d0, d1, is_2d, planar) out of range or not whole");
        }
    }
    const kernel = &n.src[0];
    const image = &n.src[1];
    const to = dtype_of(&n.dst);
    if (dtype_of(image) != .f32 or (to != .f32 and to != .f16)) {
        return fail(.unsupported, "im2col: src1 must be f32, dst f32 or f16");
    }
    if (!node_rows_contiguous(image)) return fail(.unsupported, "im2col: src1 rows must be contiguous");
    const is_2d = n.param_f32(6) != 0;
    const planar = n.param_f32(7) != 0;
    if (planar and !is_2d) return fail(.invalid_argument, "im2col: the planar layout (params[7]) is 2D only");
    const p: [6]i64 = .{
        @intFromFloat(n.param_f32(0)), @intFromFloat(n.param_f32(1)), @intFromFloat(n.param_f32(2)),
        @intFromFloat(n.param_f32(3)), @intFromFloat(n.param_f32(4)), @intFromFloat(n.param_f32(5)),
    };
    const ow = conv_output(image.ne[0], kernel.ne[0], p[0], p[2], p[4]);
    if (is_2d) {
        if (kernel.ne[2] != image.ne[2]) return fail(.shape_mismatch, "im2col: src0.ne[2] != src1.ne[2]");
        const oh = conv_output(image.ne[1], kernel.ne[1], p[1], p[3], p[5]);
        const taps = kernel.ne[2] * kernel.ne[1] * kernel.ne[0];
        const expected = if (planar)
            [dims_max]i64{ ow, oh, taps, image.ne[3] }
        else
            [dims_max]i64{ taps, ow, oh, image.ne[3] };
        if (!std.mem.eql(i64, &n.dst.ne, &expected)) {
            return fail(.shape_mismatch, "im2col: dst.ne != [IC*KH*KW, OW, OH, N] ([OW, OH, IC*KH*KW, N] planar)");
        }
    } else {
        if (kernel.ne[1] != image.ne[1]) return fail(.shape_mismatch, "im2col: src0.ne[1] != src1.ne[1]");
        if (image.ne[3] != 1) return fail(.shape_mismatch, "im2col: a 1D src1 has ne[3] == 1");
        if (p[1] != 1 or p[3] != 0 or p[5] != 1) {
            return fail(.invalid_argument, "im2col: 1D takes s1 = 1, p1 = 0, d1 = 1 (no y)");
        }
        const expected = [dims_max]i64{ kernel.ne[1] * kernel.ne[0], ow, image.ne[2], 1 };
        if (!std.mem.eql(i64, &n.dst.ne, &expected)) {
            return fail(.shape_mismatch, "im2col: dst.ne != [IC*KW, OW, N, 1]");
        }
    }
    return .ok;
}

/// conv_2d (kernels/conv2d.zig), conv2d's fused im2col + mul_mat: params s0, s1, p0, p1, d0,
/// d1 as im2col's, KW and KH whole numbers >= 1; src0 f32 or f16 weights [IC*KH*KW, OC, 1, 1];
/// src1 f32 image [IW, IH, IC, N] with contiguous rows; dst f32 [OC, OW*OH, N, 1].
fn check_conv_2d(n: *const Node) Verdict {
    for (0..8) |i| {
        const value = n.param_f32(i);
        const min: f32 = if (i == 2 or i == 3) 0 else 1;
        if (!(value >= min and value <= conv_param_max) or @floor(value) != value) {
            return fail(.invalid_argument, "conv_2d: params (s0, s1, p0, p1, d0, d1, KW, KH) out of range or not whole");
        }
    }
    const weights = &n.src[0];
    const image = &n.src[1];
    const wt = dtype_of(weights);
    if ((wt != .f32 and wt != .f16) or dtype_of(image) != .f32 or dtype_of(&n.dst) != .f32) {
        return fail(.unsupported, "conv_2d: src0 must be f32 or f16, src1 and dst f32");
    }
    if (!node_rows_contiguous(image)) return fail(.unsupported, "conv_2d: src1 rows must be contiguous");
    var p: [8]i64 = undefined;
    for (0..8) |i| p[i] = @intFromFloat(n.param_f32(i));
    if (weights.ne[2] != 1 or weights.ne[3] != 1) return fail(.shape_mismatch, "conv_2d: src0 must be 2D [IC*KH*KW, OC]");
    // Params are at most 2^20 and extents at most ne_max: the products below cannot overflow.
    const taps = p[6] * p[7];
    if (@mod(weights.ne[0], taps) != 0 or @divTrunc(weights.ne[0], taps) != image.ne[2]) {
        return fail(.shape_mismatch, "conv_2d: src0.ne[0] != IC*KH*KW");
    }
    const ow = conv_output(image.ne[0], p[6], p[0], p[2], p[4]);
    const oh = conv_output(image.ne[1], p[7], p[1], p[3], p[5]);
    if (ow < 1 or oh < 1) return fail(.shape_mismatch, "conv_2d: the image is smaller than the dilated kernel");
    const pixels = @mulWithOverflow(ow, oh);
    if (pixels[1] != 0) return fail(.shape_mismatch, "conv_2d: dst.ne != [OC, OW*OH, N, 1]");
    const expected = [dims_max]i64{ weights.ne[1], pixels[0], image.ne[3], 1 };
    if (!std.mem.eql(i64, &n.dst.ne, &expected)) return fail(.shape_mismatch, "conv_2d: dst.ne != [OC, OW*OH, N, 1]");
    return .ok;
}

/// ggml_calc_conv_output_size; below 1 when the dilated kernel does not fit.
fn conv_output(size: i64, kernel: i64, stride: i64, pad: i64, dilation: i64) i64 {
    return @divFloor(size + 2 * pad - dilation * (kernel - 1) - 1, stride) + 1;
}

/// l2_norm (kernels/group_norm.zig): f32 src0 and dst of one shape, eps finite.
fn check_l2_norm(n: *const Node) Verdict {
    const verdict = check_unary("l2_norm", n);
    if (verdict.status != .ok) return verdict;
    if (!std.math.isFinite(n.param_f32(0))) return fail(.invalid_argument, "l2_norm: params[0] (eps) must be finite");
    return .ok;
}

/// Most groups group_norm takes (far above any model's 32).
pub const groups_max: f32 = 1 << 24;

/// group_norm (kernels/group_norm.zig): f32 src0 and dst of one shape, the group count a whole
/// number in [1, groups_max], eps finite.
fn check_group_norm(n: *const Node) Verdict {
    const verdict = check_unary("group_norm", n);
    if (verdict.status != .ok) return verdict;
    const groups = n.param_f32(0);
    if (!(groups >= 1 and groups <= groups_max) or @floor(groups) != groups) {
        return fail(.invalid_argument, "group_norm: params[0] (groups) must be a whole number in [1, groups_max]");
    }
    if (!std.math.isFinite(n.param_f32(1))) return fail(.invalid_argument, "group_norm: params[1] (eps) must be finite");
    return .ok;
}

/// pool_1d and pool_2d (kernels/pool.zig): op 0 or 1; kernel and stride whole numbers in
/// [1, conv_param_max], padding in [0, conv_param_max] and below the kernel (ggml's output size
/// then counts only windows that touch the input); src0 f32 or f16, dst f32 of ggml's shape.
fn check_pool(comptime kind: enum { one_d, two_d }, n: *const Node) Verdict {
    const name = if (kind == .one_d) "pool_1d" else "pool_2d";
    const count: usize = if (kind == .one_d) 4 else 7;
    const op = n.param_f32(0);
    if (op != 0 and op != 1) return fail(.invalid_argument, name ++ ": params[0] (op) must be 0 (max) or 1 (avg)");
    for (1..count) |i| {
        const value = n.param_f32(i);
        const is_pad = if (kind == .one_d) i == 3 else i >= 5;
        const min: f32 = if (is_pad) 0 else 1;
        if (!(value >= min and value <= conv_param_max) or @floor(value) != value) {
            return fail(.invalid_argument, name ++ ": params (k, s, p) out of range or not whole");
        }
    }
    const src = &n.src[0];
    const from = dtype_of(src);
    if ((from != .f32 and from != .f16) or dtype_of(&n.dst) != .f32) {
        return fail(.unsupported, name ++ ": src0 must be f32 or f16, dst f32");
    }
    const dims: usize = if (kind == .one_d) 1 else 2;
    var expected = src.ne;
    for (0..dims) |d| {
        const k: i64 = @intFromFloat(n.param_f32(1 + d));
        const s: i64 = @intFromFloat(n.param_f32(1 + dims + d));
        const p: i64 = @intFromFloat(n.param_f32(1 + 2 * dims + d));
        if (p >= k) return fail(.invalid_argument, name ++ ": padding must be below the kernel size");
        expected[d] = @divFloor(src.ne[d] + 2 * p - k, s) + 1;
    }
    if (!std.mem.eql(i64, &n.dst.ne, &expected)) return fail(.shape_mismatch, name ++ ": dst.ne is not the pooled shape");
    return .ok;
}

/// interpolate (kernels/interpolate.zig): f32 src0 and dst, mode 0 (nearest), 1 (bilinear) or
/// either + 256 (align corners).
fn check_interpolate(n: *const Node) Verdict {
    if (dtype_of(&n.dst) != .f32 or dtype_of(&n.src[0]) != .f32) {
        return fail(.unsupported, "interpolate: dst and src0 must be f32");
    }
    const mode = n.param_f32(0);
    if (mode != 0 and mode != 1 and mode != 2 and mode != 256 and mode != 257 and mode != 258) {
        return fail(.invalid_argument, "interpolate: params[0] (mode) must be 0, 1 or 2, + 256 for align corners");
    }
    return .ok;
}

/// Largest dim and max_period of timestep_embedding.
pub const embedding_dim_max: f32 = 1 << 24;

/// timestep_embedding (kernels/interpolate.zig): f32 src0 [N] (contiguous is not needed: one
/// stride), f32 dst [dim, N]; dim and max_period whole numbers in [1, embedding_dim_max].
fn check_timestep_embedding(n: *const Node) Verdict {
    const src = &n.src[0];
    if (dtype_of(&n.dst) != .f32 or dtype_of(src) != .f32) {
        return fail(.unsupported, "timestep_embedding: dst and src0 must be f32");
    }
    const dim = n.param_f32(0);
    const period = n.param_f32(1);
    if (!(dim >= 1 and dim <= embedding_dim_max) or @floor(dim) != dim or
        !(period >= 1 and period <= embedding_dim_max) or @floor(period) != period)
    {
        return fail(.invalid_argument, "timestep_embedding: params (dim, max_period) must be whole numbers in [1, embedding_dim_max]");
    }
    if (src.ne[1] != 1 or src.ne[2] != 1 or src.ne[3] != 1) {
        return fail(.shape_mismatch, "timestep_embedding: src0 must be [N, 1, 1, 1]");
    }
    const expected = [dims_max]i64{ @intFromFloat(dim), src.ne[0], 1, 1 };
    if (!std.mem.eql(i64, &n.dst.ne, &expected)) return fail(.shape_mismatch, "timestep_embedding: dst.ne != [dim, N, 1, 1]");
    return .ok;
}

/// conv_transpose_1d / _2d (kernels/conv_transpose.zig): kernel f32 or f16, input and dst f32,
/// the stride a whole number in [1, conv_param_max], the input channels those of the kernel,
/// dst of the transposed convolution's shape.
fn check_conv_transpose(comptime kind: enum { one_d, two_d }, n: *const Node) Verdict {
    const name = if (kind == .one_d) "conv_transpose_1d" else "conv_transpose_2d";
    const kernel = &n.src[0];
    const input = &n.src[1];
    const k = dtype_of(kernel);
    if ((k != .f32 and k != .f16) or dtype_of(input) != .f32 or dtype_of(&n.dst) != .f32) {
        return fail(.unsupported, name ++ ": src0 must be f32 or f16, src1 and dst f32");
    }
    const stride = n.param_f32(0);
    if (!(stride >= 1 and stride <= conv_param_max) or @floor(stride) != stride) {
        return fail(.invalid_argument, name ++ ": params[0] (stride) must be a whole number in [1, conv_param_max]");
    }
    const s: i64 = @intFromFloat(stride);
    const expected: [dims_max]i64 = if (kind == .two_d) blk: {
        if (kernel.ne[3] != input.ne[2]) return fail(.shape_mismatch, name ++ ": src0.ne[3] != src1.ne[2]");
        break :blk .{ (input.ne[0] - 1) * s + kernel.ne[0], (input.ne[1] - 1) * s + kernel.ne[1], kernel.ne[2], input.ne[3] };
    } else blk: {
        if (kernel.ne[2] != input.ne[1] or kernel.ne[3] != 1 or input.ne[2] != 1 or input.ne[3] != 1) {
            return fail(.shape_mismatch, name ++ ": src0 must be [K, OC, IC], src1 [L, IC]");
        }
        break :blk .{ (input.ne[0] - 1) * s + kernel.ne[0], kernel.ne[1], 1, 1 };
    };
    if (!std.mem.eql(i64, &n.dst.ne, &expected)) return fail(.shape_mismatch, name ++ ": dst.ne is not the transposed convolution's shape");
    return .ok;
}

fn is_float(dtype: DType) bool {
    return dtype == .f32 or dtype == .f16;
}

/// kernels/unary.zig and cumsum: dst and src0 of one shape and one float dtype (f32 or f16).
fn check_unary_float(comptime name: []const u8, n: *const Node) Verdict {
    const dtype = dtype_of(&n.src[0]);
    if (!is_float(dtype)) return fail(.unsupported, name ++ ": src0 must be f32 or f16");
    if (dtype_of(&n.dst) != dtype) return fail(.unsupported, name ++ ": dst.dtype != src0.dtype");
    if (!same_shape(&n.dst, &n.src[0])) return fail(.shape_mismatch, name ++ ": dst.ne != src0.ne");
    return .ok;
}

/// sum_rows, max_rows, min_rows: f32 or f16 src0, dst of its dtype, [1, ne1, ne2, ne3].
fn check_row_reduction(comptime name: []const u8, n: *const Node) Verdict {
    const src = &n.src[0];
    const dtype = dtype_of(src);
    if (!is_float(dtype)) return fail(.unsupported, name ++ ": src0 must be f32 or f16");
    if (dtype_of(&n.dst) != dtype) return fail(.unsupported, name ++ ": dst.dtype != src0.dtype");
    const expected = [dims_max]i64{ 1, src.ne[1], src.ne[2], src.ne[3] };
    if (!std.mem.eql(i64, &n.dst.ne, &expected)) {
        return fail(.shape_mismatch, name ++ ": dst.ne != [1, src0.ne[1], src0.ne[2], src0.ne[3]]");
    }
    return .ok;
}

/// argmax: f32 or f16 src0, i32 dst [ne1, ne2, ne3, 1]; row lengths fit an i32 index.
fn check_argmax(n: *const Node) Verdict {
    const src = &n.src[0];
    if (!is_float(dtype_of(src))) return fail(.unsupported, "argmax: src0 must be f32 or f16");
    if (dtype_of(&n.dst) != .i32) return fail(.unsupported, "argmax: dst must be i32");
    if (src.ne[0] > std.math.maxInt(i32)) return fail(.limit_reached, "argmax: src0.ne[0] > 2^31 - 1");
    const expected = [dims_max]i64{ src.ne[1], src.ne[2], src.ne[3], 1 };
    if (!std.mem.eql(i64, &n.dst.ne, &expected)) {
        return fail(.shape_mismatch, "argmax: dst.ne != [src0.ne[1], src0.ne[2], src0.ne[3], 1]");
    }
    return .ok;
}

/// count_equal: i32 src0 and src1 of one shape, i64 dst [1] (ggml_count_equal's dtype).
fn check_count_equal(n: *const Node) Verdict {
    const a = &n.src[0];
    const b = &n.src[1];
    if (dtype_of(a) != .i32 or dtype_of(b) != .i32) {
        return fail(.unsupported, "count_equal: src0 and src1 must be i32");
    }
    if (dtype_of(&n.dst) != .i64) return fail(.unsupported, "count_equal: dst must be i64");
    if (!same_shape(a, b)) return fail(.shape_mismatch, "count_equal: src0.ne != src1.ne");
    if (n.dst.element_count() != 1) return fail(.shape_mismatch, "count_equal: dst.ne != [1, 1, 1, 1]");
    return .ok;
}
