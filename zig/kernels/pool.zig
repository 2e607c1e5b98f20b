//! pool_1d and pool_2d, as ggml-cpu computes them. params (f32 whole numbers): pool_1d op, k0,
//! s0, p0; pool_2d op, k0, k1, s0, s1, p0, p1; op 0 is max, 1 is average (ggml_op_pool). src0
//! f32 or f16 [W, H, C, N]; dst f32 [OW, ...] with OW = (W + 2 p0 - k0) / s0 + 1 (and OH
//! likewise in 2D). A window's elements outside the input are skipped: max starts from -FLT_MAX
//! and keeps `v < res ? res : v` (std::max(v, res), so a NaN input wins); the 1D average divides
//! by the elements inside, the 2D average by k0 * k1 (padding counted), both as ggml. Threads
//! split dst rows.

const std = @import("std");
const common = @import("common.zig");

const assert = common.assert;
const Tensor = common.Tensor;

pub const Kind = enum { one_d, two_d };

const Window = struct {
    average: bool,
    kernel: [2]i64,
    stride: [2]i64,
    pad: [2]i64,
};

fn int(n: *const common.Node, i: usize) i64 {
    return @intFromFloat(n.param_f32(i));
}

fn window_of(comptime kind: Kind, n: *const common.Node) Window {
    return switch (kind) {
        .one_d => .{
            .average = n.param_f32(0) == 1,
            .kernel = .{ int(n, 1), 1 },
            .stride = .{ int(n, 2), 1 },
            .pad = .{ int(n, 3), 0 },
        },
        .two_d => .{
            .average = n.param_f32(0) == 1,
            .kernel = .{ int(n, 1), int(n, 2) },
            .stride = .{ int(n, 3), int(n, 4) },
            .pad = .{ int(n, 5), int(n, 6) },
        },
    };
}

fn load(src: Tensor, row: common.Strided, j: usize) f32 {
    return if (src.dtype == .f16) @floatCast(common.load_f16(row.at(j))) else common.load_f32(row.at(j));
}

pub fn pool(comptime kind: Kind, n: *const common.Node, work: *const common.Work) common.Status {
    const w = window_of(kind, n);
    const src = Tensor.from(&n.src[0]);
    const dst = Tensor.from(&n.dst);
    const width: i64 = @intCast(src.ne[0]);
    const height: i64 = @intCast(src.ne[1]);
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        const out = dst.row_at(index);
        for (0..dst.ne[0]) |ox| {
            const ix = @as(i64, @intCast(ox)) * w.stride[0] - w.pad[0];
            var result: f32 = if (w.average) 0 else -std.math.floatMax(f32);
            var count: i64 = 0;
            // 1D: the window is one input row, the dst row's own (dims 1-3 are rows).
            const rows_in_window: i64 = if (kind == .two_d) w.kernel[1] else 1;
            const iy = if (kind == .two_d) @as(i64, @intCast(index.i1)) * w.stride[1] - w.pad[1] else 0;
            for (0..@intCast(rows_in_window)) |ky| {
                const y = iy + @as(i64, @intCast(ky));
                if (kind == .two_d and (y < 0 or y >= height)) continue;
                const line = if (kind == .two_d)
                    src.row_at(.{ .i1 = @intCast(y), .i2 = index.i2, .i3 = index.i3 })
                else
                    src.row_at(index);
                for (0..@intCast(w.kernel[0])) |kx| {
                    const x = ix + @as(i64, @intCast(kx));
                    if (x < 0 or x >= width) continue;
                    const v = load(src, line, @intCast(x));
                    result = if (w.average) result + v else (if (v < result) result else v);
                    count += 1;
                }
            }
            if (w.average) {
                const divisor: i64 = if (kind == .two_d) w.kernel[0] * w.kernel[1] else count;
                result = if (divisor > 0) result / @as(f32, @floatFromInt(divisor)) else 0;
            }
            common.store_f32(out.at(ox), result);
        }
    }
    return .ok;
}
