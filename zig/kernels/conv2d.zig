//! conv_2d: ggml_conv_2d (the planar im2col and the mul_mat that reads it) as one fused node, an
//! implicit GEMM that never writes the unfolded image. The CPU plan (src/backend/cpu/fuse.ts)
//! emits it for conv2d's pair when nothing else reads the im2col result.
//!
//! src0 the kernel as mul_mat's weights [K, OC] (K = IC * KH * KW, f32 or f16), src1 the f32
//! image [IW, IH, IC, N] (contiguous rows, any other strides), dst f32 [OC, OW * OH, N, 1] with
//! any strides (conv2d's is pixels-adjacent: [OW, OH, OC, N] seen transposed). params (f32,
//! whole numbers): s0, s1, p0, p1, d0, d1, KW, KH, as im2col's; tap k = (ic * KH + ky) * KW + kx.
//!
//! Three paths. 3x3 kernels with stride 1, no dilation, f32 weights and at least a few input
//! and output channels take the Winograd path (conv2d_winograd.zig: F(2x2, 3x3), 2.25 times
//! fewer multiply-adds). Other stride-1 convolutions take the direct path
//! (conv2d_direct.zig), which reads its A vectors straight from a zero-padded copy of the
//! image. Other strides, and images whose padded copy would be too large, take the packing
//! path below.
//!
//! The packing path runs with pixels along m (vectors: each micro-tile writes MR adjacent
//! pixels of one output channel) and output channels along n (broadcasts), over gemm.zig's
//! micro-kernel: dst[oc][p] = sum_k image_tap(p, k) * weights[oc][k]. Each thread packs the
//! weights (all of K, all OC, a small part of the work) into NR-panels of its own; each unit
//! of a few MR-panels of pixels packs its A block, KC taps at a time, straight from the
//! image (the im2col row pieces, zeros in the padding) and multiplies it by every weight panel.
//! Threads claim units from a shared counter, so a thread a busy machine deschedules leaves its
//! pixels to the others. f16 weights: the image values are rounded to f16 while packed, as
//! ggml's im2col into f16 does (and as mul_mat rounds its f32 operand for f16 weights).
//!
//! Every element is summed in one order (KC blocks in order, taps in order, one fma each)
//! whatever the thread count, so results do not depend on it.

const std = @import("std");
const common = @import("common.zig");
const gemm = @import("gemm.zig");
const direct = @import("conv2d_direct.zig");
const winograd = @import("conv2d_winograd.zig");
const conv2d_common = @import("conv2d_common.zig");
const Shape = conv2d_common.Shape;
const zero = conv2d_common.zero;
const copy = conv2d_common.copy;
const round_f16 = conv2d_common.round_f16;

const assert = common.assert;
const Tensor = common.Tensor;
const lanes = gemm.lanes;
const mr = gemm.mr;
const nr = gemm.nr;
/// Taps per KC block at most: gemm.zig's. K is cut into blocks of equal size (`kc_block`), so
/// that no thin last block pays a pass over C for few taps.
const kc_max = gemm.kc_max;
const V = @Vector(lanes, f32);

/// The most MR panels of pixels in one claimed unit (its packed A block, at most
/// unit_panels_max * MR x KC floats, stays in L2).
pub const unit_panels_max: usize = 4;
/// At least this many units per thread where the image allows, so the last claims even out
/// the threads' finishing times.
const units_per_thread_min: usize = 3;
/// The work buffer starts with the shared unit counter, on its own cache line.
const counter_bytes: usize = 64;

comptime {
    assert(counter_bytes % 64 == 0); // the regions after it stay 64-byte aligned
    assert(@sizeOf(std.atomic.Value(usize)) <= counter_bytes);
    assert(unit_panels_max >= 1);
}

/// Taps per KC block: K in equal blocks of at most kc_max.
fn kc_block(k: usize) usize {
    const blocks = (k + kc_max - 1) / kc_max;
    return (k + blocks - 1) / blocks;
}

inline fn min(x: usize, y: usize) usize {
    return if (x < y) x else y;
}

fn round_up(x: usize, to: usize) usize {
    return (x + to - 1) / to * to;
}

/// The work buffer: the counter, then per thread its packed weights (all of K by every NR
/// panel of output channels: `pack_weights`) and its A block.
const Layout = struct {
    b_panels: usize,
    b_floats: usize,
    a_floats: usize,
    total_bytes: usize,

    fn of(shape: Shape, thread_count: usize) Layout {
        const b_panels = (shape.out_channels + nr - 1) / nr;
        const b_floats = round_up(shape.k * b_panels * nr, 16);
        // The largest unit whatever the thread count: a plan may run on fewer threads.
        const a_floats = round_up(unit_panels_max * mr * kc_block(shape.k), 16);
        return .{
            .b_panels = b_panels,
            .b_floats = b_floats,
            .a_floats = a_floats,
            .total_bytes = counter_bytes + (b_floats + a_floats) * thread_count * @sizeOf(f32),
        };
    }
};

/// Scratch bytes conv_2d needs with `thread_count` threads.
pub fn work_size(n: *const common.Node, thread_count: u32) u64 {
    const shape = Shape.of(n);
    const threads: usize = @max(thread_count, 1);
    if (winograd.Geometry.of(shape, Tensor.from(&n.src[0]).dtype, threads)) |geo| return geo.total_bytes;
    if (direct.Geometry.of(shape, threads)) |geo| return geo.total_bytes;
    return Layout.of(shape, @max(thread_count, 1)).total_bytes;
}

/// MR panels per unit: as many as allowed while every thread still gets a few units.
fn unit_panels(shape: Shape, thread_count: usize) usize {
    const panels = shape.images * ((shape.pixels + mr - 1) / mr);
    return std.math.clamp(panels / (units_per_thread_min * thread_count), 1, unit_panels_max);
}

pub fn conv_2d(n: *const common.Node, work: *const common.Work) common.Status {
    const shape = Shape.of(n);
    const f16_weights = Tensor.from(&n.src[0]).dtype == .f16;
    if (winograd.Geometry.of(shape, Tensor.from(&n.src[0]).dtype, work.thread_count)) |geo| {
        if (work.scratch_size_bytes < geo.total_bytes) return .out_of_space;
        winograd.run(n, shape, geo, work);
        return .ok;
    }
    if (direct.Geometry.of(shape, work.thread_count)) |geo| {
        if (work.scratch_size_bytes < geo.total_bytes) return .out_of_space;
        if (f16_weights) direct.run(f16, n, shape, geo, work) else direct.run(f32, n, shape, geo, work);
        return .ok;
    }
    if (work.scratch_size_bytes < Layout.of(shape, work.thread_count).total_bytes) return .out_of_space;
    if (f16_weights) run(f16, n, shape, work) else run(f32, n, shape, work);
    return .ok;
}

fn run(comptime T: type, n: *const common.Node, shape: Shape, work: *const common.Work) void {
    const t: usize = work.thread_index;
    const tc: usize = work.thread_count;
    const lay = Layout.of(shape, tc);
    const counter: *std.atomic.Value(usize) = @ptrCast(work.scratch);
    const region: [*]f32 = @ptrCast(@alignCast(work.scratch + counter_bytes));
    const b_pack = region + (lay.b_floats + lay.a_floats) * t;
    const a_pack = b_pack + lay.b_floats;

    // Thread 0 resets the counter before anyone claims (the barrier), and the plan's barrier
    // after the node keeps the next compute's reset from overtaking a claim of this one.
    if (t == 0) counter.store(0, .monotonic);
    work.sync();
    // Each thread packs all the weights into its own region (small next to the work on them:
    // K x OC floats), so that no second barrier waits on a thread a busy machine deschedules.
    pack_weights(T, n, shape, lay.b_panels, b_pack);

    const unit_pixels = unit_panels(shape, tc) * mr;
    const units_per_image = (shape.pixels + unit_pixels - 1) / unit_pixels;
    const units = units_per_image * shape.images;
    var unit = counter.fetchAdd(1, .monotonic);
    while (unit < units) : (unit = counter.fetchAdd(1, .monotonic)) {
        const image_index = unit / units_per_image;
        const m_begin = (unit % units_per_image) * unit_pixels;
        const m_end = min(shape.pixels, m_begin + unit_pixels);
        compute_unit(T, n, shape, image_index, m_begin, m_end, a_pack, b_pack, lay.b_panels);
    }
}

/// All of the weights as NR panels of output channels, KC blocks in order, each block
/// [panel][kc][NR] (the last panel's missing channels zero).
fn pack_weights(comptime T: type, n: *const common.Node, shape: Shape, np: usize, b_pack: [*]f32) void {
    const weights = Tensor.from(&n.src[0]);
    var pc: usize = 0;
    const kc_step = kc_block(shape.k);
    while (pc < shape.k) : (pc += kc_step) {
        const kc = min(kc_step, shape.k - pc);
        for (0..np) |p| {
            const oc0 = p * nr;
            const base: [*]const u8 = @ptrFromInt(weights.base + oc0 * weights.nb[1] + pc * weights.nb[0]);
            const valid = min(nr, shape.out_channels - oc0);
            gemm.pack_panel(nr, T, base, @intCast(weights.nb[1]), @intCast(weights.nb[0]), valid, kc, b_pack + pc * np * nr + p * nr * kc);
        }
    }
}

/// Pixels [m_begin, m_end) of image `image_index`, every output channel.
fn compute_unit(
    comptime T: type,
    n: *const common.Node,
    shape: Shape,
    image_index: usize,
    m_begin: usize,
    m_end: usize,
    a_pack: [*]f32,
    b_pack: [*]const f32,
    np: usize,
) void {
    assert(m_begin < m_end);
    const dst = Tensor.from(&n.dst);
    const ip = (m_end - m_begin + mr - 1) / mr;
    var pc: usize = 0;
    const kc_step = kc_block(shape.k);
    while (pc < shape.k) : (pc += kc_step) {
        const kc = min(kc_step, shape.k - pc);
        pack_a(T, n, shape, image_index, m_begin, m_end, pc, kc, a_pack);
        const b_block = b_pack + pc * np * nr;
        // A panel (MR x KC, 32 KiB at most with AVX-512) stays in L1 while the weight panels
        // stream from L2: fewer bytes per multiply-add than the other order.
        for (0..ip) |i| {
            const m0 = m_begin + i * mr;
            for (0..np) |jp| {
                const oc0 = jp * nr;
                const cols = min(nr, shape.out_channels - oc0);
                const tile: gemm.Tile = .{
                    .ptr = @ptrFromInt(dst.base + image_index * dst.nb[2] + oc0 * dst.nb[0] + m0 * dst.nb[1]),
                    .row_stride = @intCast(dst.nb[0]),
                    .elem_stride = @intCast(dst.nb[1]),
                };
                gemm.micro_kernel(cols, kc, a_pack + i * mr * kc, b_block + jp * nr * kc, tile, min(mr, m_end - m0), pc > 0);
            }
        }
    }
}

/// A run of a unit's pixels inside one output row and one MR panel: the same for every tap,
/// so `pack_a` lists them once per block and walks the list per tap.
const Piece = struct {
    out: usize, // floats from the block's start to the run's first pixel, tap 0
    y_base: i64, // oh * s1
    ow: usize, // the run's first output column
    len: usize,
};

/// The most pieces of a unit: each holds at least one pixel.
const pieces_max = unit_panels_max * mr;

/// Packs taps [pc, pc + kc) of pixels [m_begin, m_end) into `dst` as the MR panels
/// [panel][kc][MR] that the micro-kernel reads: im2col's values, one piece at a time (a piece
/// ends at an output row's end or a panel's), zeros in the padding and past m_end.
fn pack_a(
    comptime T: type,
    n: *const common.Node,
    shape: Shape,
    image_index: usize,
    m_begin: usize,
    m_end: usize,
    pc: usize,
    kc: usize,
    dst: [*]f32,
) void {
    assert(m_end - m_begin <= pieces_max);
    const image = Tensor.from(&n.src[1]);
    const ip = (m_end - m_begin + mr - 1) / mr;
    var pieces: [pieces_max]Piece = undefined;
    var count: usize = 0;
    {
        var q = m_begin;
        var oh = m_begin / shape.ow;
        var ow = m_begin % shape.ow;
        while (q < m_end) : (count += 1) {
            const offset = q - m_begin;
            const within = offset % mr;
            const len = min(min(shape.ow - ow, mr - within), m_end - q);
            pieces[count] = .{
                .out = (offset / mr) * mr * kc + within,
                .y_base = @as(i64, @intCast(oh)) * shape.stride[1],
                .ow = ow,
                .len = len,
            };
            q += len;
            ow += len;
            if (ow == shape.ow) {
                ow = 0;
                oh += 1;
            }
        }
    }
    const taps_per_channel = shape.kh * shape.kw;
    const ow_count: i64 = @intCast(shape.ow);
    const s0 = shape.stride[0];
    const filled = m_end - m_begin;
    var channel = pc / taps_per_channel;
    var ky = (pc % taps_per_channel) / shape.kw;
    var kx = pc % shape.kw;
    for (0..kc) |kk| {
        const plane = image.base + image_index * image.nb[3] + channel * image.nb[2];
        const x_offset = @as(i64, @intCast(kx)) * shape.dilation[0] - shape.pad[0];
        const y_offset = @as(i64, @intCast(ky)) * shape.dilation[1] - shape.pad[1];
        // Output columns [first, last) read inside the image: x = ow * s0 + x_offset.
        // (Stride 1 without the divisions: two per tap would cost as much as its copies.)
        const first: usize = @intCast(std.math.clamp(if (s0 == 1) -x_offset else @divFloor(-x_offset + s0 - 1, s0), 0, ow_count));
        const last: usize = @intCast(std.math.clamp(if (s0 == 1) shape.iw - x_offset else @divFloor(shape.iw - 1 - x_offset, s0) + 1, @as(i64, @intCast(first)), ow_count));
        for (pieces[0..count]) |piece| {
            const out = dst + piece.out + kk * mr;
            const y = piece.y_base + y_offset;
            if (y < 0 or y >= shape.ih) {
                zero(out, piece.len);
                continue;
            }
            const row = plane + @as(usize, @intCast(y)) * image.nb[1];
            const lo = std.math.clamp(first, piece.ow, piece.ow + piece.len);
            const hi = std.math.clamp(last, lo, piece.ow + piece.len);
            if (lo > piece.ow) zero(out, lo - piece.ow);
            if (hi > lo) {
                const x: usize = @intCast(@as(i64, @intCast(lo)) * s0 + x_offset);
                copy(out + (lo - piece.ow), @ptrFromInt(row + x * 4), hi - lo, @intCast(s0));
            }
            if (piece.ow + piece.len > hi) zero(out + (hi - piece.ow), piece.ow + piece.len - hi);
        }
        // The last panel's rows past m_end.
        if (filled < ip * mr) zero(dst + (ip - 1) * mr * kc + kk * mr + filled % mr, ip * mr - filled);
        kx += 1;
        if (kx == shape.kw) {
            kx = 0;
            ky += 1;
            if (ky == shape.kh) {
                ky = 0;
                channel += 1;
            }
        }
    }
    if (T == f16) round_f16(dst, ip * mr * kc);
}
