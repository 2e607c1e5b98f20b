//! rope: rotary position embedding, ggml_rope_ext's CPU math with ext_factor 0 and attn_factor 1
//! (ggml-cpu/ops.cpp, ggml_compute_forward_rope_flt). src0 f32 [ne0, heads, tokens, ne3], src1
//! i32 positions [tokens] (one per i2, shared by every i1 and i3); dst f32 like src0.
//!
//! params (f32 slots): [0] n_dims (even, 2 <= n_dims <= ne0), [1] mode (0 normal, 2 neox),
//! [2] freq_base, [3] freq_scale. As ggml, in f32: theta_scale = powf(freq_base, -2.0f/n_dims),
//! and for pair k theta = p * theta_scale^k by the recurrence `theta *= theta_scale` (not pow),
//! then cos and sin of freq_scale * theta. Normal mode rotates (x[2k], x[2k+1]); neox rotates
//! (x[k], x[k + n_dims/2]). Elements from n_dims on are copied unchanged.
//!
//! Bit for bit ggml-cpu's (tests/ggml_exact_ops_test.ts): powf, cosf and sinf are the C
//! library's, as ggml calls them (common.powf, cosf, sinf), on the f32 angle; the rotation uses
//! one fused multiply-add per output, as GCC contracts ggml's `x0*cos - x1*sin` on FMA machines.
//! Rows are split across threads. Each output pair is written after both of its inputs are read,
//! and no other output reads them, so dst may alias src0 (ggml_rope_inplace).

const std = @import("std");
const common = @import("common.zig");

const assert = common.assert;
const Strided = common.Strided;
const Tensor = common.Tensor;

pub const Mode = enum(u32) { normal = 0, neox = 2 };

/// ggml's theta_scale: powf(freq_base, -2.0f / n_dims) (the C library's powf), the exponent
/// rounded to f32 first.
pub fn theta_scale(freq_base: f32, n_dims: usize) f32 {
    const exponent: f32 = -2.0 / @as(f32, @floatFromInt(n_dims));
    return common.powf(freq_base, exponent);
}

pub fn rope(n: *const common.Node, work: *const common.Work) common.Status {
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    const positions = Tensor.from(&n.src[1]);
    assert(src.dtype == .f32 and dst.dtype == .f32 and positions.dtype == .i32);
    assert(positions.ne[0] == src.ne[2]);
    const n_dims: usize = @intFromFloat(n.param_f32(0));
    assert(n_dims % 2 == 0 and n_dims <= src.ne[0]);
    const mode: Mode = @enumFromInt( // validate allows only 0 and 2
        @as(u32, @intFromFloat(n.param_f32(1))));
    const scale = theta_scale(n.param_f32(2), n_dims);
    const freq_scale = n.param_f32(3);
    const range = common.thread_range(src.rows(), work);
    for (range.begin..range.end) |row| {
        const index = src.row_index(row);
        const position: i32 = @bitCast(common.load_u32(positions.base + index.i2 * positions.nb[0]));
        const args: RowArgs = .{
            .dst = dst.row_at(index),
            .src = src.row_at(index),
            .count = src.ne[0],
            .n_dims = n_dims,
            .position = @floatFromInt(position),
            .theta_scale = scale,
            .freq_scale = freq_scale,
        };
        switch (mode) {
            .normal => rope_row(.normal, args),
            .neox => rope_row(.neox, args),
        }
    }
    return .ok;
}

const RowArgs = struct {
    dst: Strided,
    src: Strided,
    count: usize,
    n_dims: usize,
    position: f32,
    theta_scale: f32,
    freq_scale: f32,
};

fn rope_row(comptime mode: Mode, args: RowArgs) void {
    const half = args.n_dims / 2;
    var theta: f32 = args.position;
    for (0..half) |k| {
        // rope_yarn with ext_factor 0, mscale 1: cosf(freq_scale * theta), sinf(...).
        const angle: f32 = args.freq_scale * theta;
        const cos_theta = common.cosf(angle);
        const sin_theta = common.sinf(angle);
        theta *= args.theta_scale;
        const first, const second = switch (mode) {
            .normal => .{ 2 * k, 2 * k + 1 },
            .neox => .{ k, k + half },
        };
        const x0 = common.load_f32(args.src.at(first));
        const x1 = common.load_f32(args.src.at(second));
        common.store_f32(args.dst.at(first), @mulAdd(f32, x0, cos_theta, -(x1 * sin_theta)));
        common.store_f32(args.dst.at(second), @mulAdd(f32, x0, sin_theta, x1 * cos_theta));
    }
    // Dims past n_dims pass through (a same-address copy when dst aliases src0).
    for (args.n_dims..args.count) |i| {
        common.store_f32(args.dst.at(i), common.load_f32(args.src.at(i)));
    }
}
