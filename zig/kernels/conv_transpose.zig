//! conv_transpose_1d and conv_transpose_2d (ggml_conv_transpose_1d with p0 = 0, d0 = 1, and
//! ggml_conv_transpose_2d_p0): each input element, times the kernel, added into the output at
//! stride s. Computed as a gather, so each dst element is written once by one thread: dst
//! (x, y, oc, n) = sum over ic and the taps (kx, ky) with x - kx and y - ky multiples of s inside
//! the input of kernel[kx, ky, oc, ic] * input[(x - kx)/s, (y - ky)/s, ic, n].
//! 2D: kernel f32|f16 [KW, KH, OC, IC], input f32 [W, H, IC, N], dst f32 [(W-1)s + KW,
//! (H-1)s + KH, OC, N]. 1D: kernel [K, OC, IC], input [L, IC], dst [(L-1)s + K, OC].
//! params[0]: the stride s (f32 whole number). Threads split dst rows.

const std = @import("std");
const common = @import("common.zig");

const assert = common.assert;
const Tensor = common.Tensor;

pub const Kind = enum { one_d, two_d };

pub fn conv_transpose(comptime kind: Kind, n: *const common.Node, work: *const common.Work) common.Status {
    const kernel = Tensor.from(&n.src[0]);
    const input = Tensor.from(&n.src[1]);
    const dst = Tensor.from(&n.dst);
    const stride: usize = @intFromFloat(n.param_f32(0));
    const two_d = kind == .two_d;
    // Kernel (kx, ky, oc, ic) and input (x, y, ic, n) strides; 1D has no y and no n.
    const k_y = if (two_d) kernel.nb[1] else 0;
    const k_oc = if (two_d) kernel.nb[2] else kernel.nb[1];
    const k_ic = if (two_d) kernel.nb[3] else kernel.nb[2];
    const kh: usize = if (two_d) kernel.ne[1] else 1;
    const channels: usize = if (two_d) kernel.ne[3] else kernel.ne[2];
    const in_y = if (two_d) input.nb[1] else 0;
    const in_c = if (two_d) input.nb[2] else input.nb[1];
    const in_n = if (two_d) input.nb[3] else 0;
    const height: usize = if (two_d) input.ne[1] else 1;
    const range = common.thread_range(dst.rows(), work);
    for (range.begin..range.end) |row| {
        const index = dst.row_index(row);
        const y: usize = if (two_d) index.i1 else 0;
        const oc: usize = if (two_d) index.i2 else index.i1;
        const image: usize = if (two_d) index.i3 else 0;
        const out = dst.row_at(index);
        for (0..dst.ne[0]) |x| {
            var total: f32 = 0;
            for (0..kh) |ky| {
                if (ky > y or (y - ky) % stride != 0) continue;
                const j = (y - ky) / stride;
                if (j >= height) continue;
                for (0..kernel.ne[0]) |kx| {
                    if (kx > x or (x - kx) % stride != 0) continue;
                    const i = (x - kx) / stride;
                    if (i >= input.ne[0]) continue;
                    const tap = kernel.base + kx * kernel.nb[0] + ky * k_y + oc * k_oc;
                    const pixel = input.base + i * input.nb[0] + j * in_y + image * in_n;
                    for (0..channels) |c| {
                        const weight: f32 = if (kernel.dtype == .f16)
                            @floatCast(common.load_f16(tap + c * k_ic))
                        else
                            common.load_f32(tap + c * k_ic);
                        total += weight * common.load_f32(pixel + c * in_c);
                    }
                }
            }
            common.store_f32(out.at(x), total);
        }
    }
    return .ok;
}
