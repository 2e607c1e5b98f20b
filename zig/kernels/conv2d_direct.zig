//! conv_2d's direct path for stride 1 (kernels/conv2d.zig chooses it): an implicit GEMM that
//! reads its A vectors straight from a zero-padded copy of the image, with no im2col packing.
//!
//! With stride 1, output pixel (ox, oy) reads tap (ic, ky, kx) at (ox + kx * d0 - p0,
//! oy + ky * d1 - p1) of channel ic. The padded copy holds each channel as PH = IH + 2 * p1
//! rows of PW = max(IW + p0, OW) floats: p0 zeros, the image row, zeros to PW; the p0 zeros
//! that start a row are also the right padding of the row above (a read past a row's end
//! lands on the next row's first p0 floats, and reads never reach further). Number the output
//! pixels along the padded rows, q = oy * PW + ox: the tap's value for pixel q is then
//! padded[q + offset(tap)] with offset(tap) = ic * PH * PW + ky * d1 * PW + kx * d0, so MR
//! consecutive q are MR consecutive floats for every tap, one unaligned vector load each. The
//! q with ox >= OW are not pixels: their sums are computed with the others and never stored
//! (one column in 57 for a 3x3 kernel with padding 1), which costs less than packing the
//! unfolded image (a quarter of the time of the packing path on the 3x3, 64 -> 64 channels,
//! 56x56 convolution).
//!
//! The units of work (a tile of MR consecutive q by some or all weight panels) are cut into
//! one range per thread. Before the one barrier every thread does a share of three
//! preparations into the work buffer: the padded rows its range starts on (rounded to f16 for
//! f16 weights, as ggml's im2col into f16), some of the weights packed as NR-panels [k][NR],
//! and some tap offsets. After it each thread claims the units of its range from its own
//! counter, then those left in the other ranges, so a thread a busy machine deschedules
//! leaves its tiles to the others.
//!
//! Every element is one sum over the taps in order, one fma each, whatever the thread count.

const std = @import("std");
const common = @import("common.zig");
const gemm = @import("gemm.zig");
const conv2d_common = @import("conv2d_common.zig");
const Shape = conv2d_common.Shape;
const zero = conv2d_common.zero;
const copy = conv2d_common.copy;

const assert = common.assert;
const Tensor = common.Tensor;
const lanes = gemm.lanes;
const V = @Vector(lanes, f32);

/// Vectors of pixels in one tile.
const vectors: usize = 3;
/// A tile: MR consecutive q (vectors) by NR output channels (broadcasts). AVX-512: 24
/// accumulators, 3 vectors of A and a broadcast of 32 registers, and NR = 8 divides the
/// usual channel counts; 16 registers (AVX2, wasm): 12 accumulators, 3 of A, 1 broadcast.
pub const mr: usize = vectors * lanes;
pub const nr: usize = if (lanes == 16) 8 else 4;
/// The largest padded image this path copies into the work buffer; a larger one takes the
/// packing path, whose work buffer does not grow with the image.
pub const padded_bytes_max: usize = 64 << 20;
/// A claimed unit is one tile by a group of weight panels: all of them where the image has at
/// least this many tiles per thread, fewer where it has not, so that the last claims (small:
/// a tile of the 3x3, 64 -> 64 convolution is 1/68 of it on 56x56) even out the threads'
/// finishing times.
const units_per_thread_min: usize = 8;
/// Rows of taps (a channel and ky) ahead that a tile prefetches, and the cache lines it
/// prefetches of each: a tile's MR floats and the taps' shifts along the row.
const prefetch_rows: usize = 4;
const prefetch_lines: usize = mr * @sizeOf(f32) / 64 + 1;
const counter_bytes = conv2d_common.counter_bytes;

comptime {
    assert(vectors * nr + vectors + 1 <= if (lanes == 16) 32 else 16);
}

inline fn min(x: usize, y: usize) usize {
    return if (x < y) x else y;
}

fn round_up(x: usize, to: usize) usize {
    return (x + to - 1) / to * to;
}

/// Where things live in the padded domain and in the work buffer.
pub const Geometry = struct {
    pw: usize, // padded width: max(IW + p0, OW)
    ph: usize,
    plane: usize, // pw * ph floats
    image_floats: usize, // channels * plane
    span: usize, // q of one image: (OH - 1) * PW + OW
    tiles: usize, // tiles of one image
    panels: usize, // NR panels of output channels
    rows: usize, // rows of taps (a channel and ky): channels * KH
    threads: usize, // the most threads the work buffer serves
    // Work buffer: a unit counter per thread (a cache line each), the tap offsets (u32), the
    // packed weights, the padded images (with zeros after the last, which the last tile's
    // sums past `span` read).
    offsets_offset: usize,
    weights_offset: usize,
    padded_offset: usize,
    padded_floats: usize,
    total_bytes: usize,

    /// The geometry, or null where this path does not apply: a stride other than 1, or a
    /// padded image larger than `padded_bytes_max`.
    pub fn of(shape: Shape, thread_count: usize) ?Geometry {
        if (shape.stride[0] != 1 or shape.stride[1] != 1) return null;
        const pw = conv2d_common.padded_width(shape);
        const ph: usize = @intCast(shape.ih + 2 * shape.pad[1]);
        const plane = pw *| ph;
        const image_floats = plane *| shape.channels;
        if (image_floats *| shape.images > padded_bytes_max / @sizeOf(f32)) return null;
        const span = (shape.oh - 1) * pw + shape.ow;
        const tiles = (span + mr - 1) / mr;
        const offset_max = (shape.channels - 1) * plane + tap_offset(shape, pw, 0, shape.kh - 1, shape.kw - 1);
        // The last tile of the last image reads up to its end plus the largest offset (past
        // the last plane: the zeros that end the buffer).
        const padded_floats = round_up((shape.images - 1) * image_floats + tiles * mr + offset_max, 16);
        assert(padded_floats >= shape.images * image_floats);
        const panels = (shape.out_channels + nr - 1) / nr;
        const rows = shape.channels * shape.kh;
        // One offset per tap, then the first tap's repeated for the last rows' prefetches.
        const offsets_offset = counter_bytes * thread_count;
        const weights_offset = offsets_offset + round_up((shape.k + prefetch_rows * shape.kw) * @sizeOf(u32), 64);
        const padded_offset = weights_offset + round_up(panels * nr * shape.k, 16) * @sizeOf(f32);
        return .{
            .pw = pw,
            .ph = ph,
            .plane = plane,
            .image_floats = image_floats,
            .span = span,
            .tiles = tiles,
            .panels = panels,
            .rows = rows,
            .threads = thread_count,
            .offsets_offset = offsets_offset,
            .weights_offset = weights_offset,
            .padded_offset = padded_offset,
            .padded_floats = padded_floats,
            .total_bytes = padded_offset + padded_floats * @sizeOf(f32),
        };
    }
};

/// Floats from a pixel's q to its tap (channel, ky, kx) in the padded image.
fn tap_offset(shape: Shape, pw: usize, channel: usize, ky: usize, kx: usize) usize {
    const d0: usize = @intCast(shape.dilation[0]);
    const d1: usize = @intCast(shape.dilation[1]);
    return channel * pw * (@as(usize, @intCast(shape.ih)) + 2 * @as(usize, @intCast(shape.pad[1]))) + ky * d1 * pw + kx * d0;
}

/// Units (a tile by a group of weight panels) in order of q, cut into one contiguous range per
/// thread.
const Schedule = struct {
    groups: usize, // groups of weight panels
    units: usize,
    threads: usize,

    fn of(shape: Shape, geo: Geometry, thread_count: usize) Schedule {
        const tiles = shape.images * geo.tiles;
        const groups = std.math.clamp((units_per_thread_min * thread_count + tiles - 1) / tiles, 1, geo.panels);
        return .{ .groups = groups, .units = tiles * groups, .threads = thread_count };
    }

    /// Thread `t`'s first unit (the end of thread t - 1's range).
    fn first_unit(self: Schedule, t: usize) usize {
        return self.units * t / self.threads;
    }

    /// The first padded row (counted over all images: image * PH + row) whose every tap row
    /// thread `t` builds: the top row of its first tile.
    fn first_row(self: Schedule, geo: Geometry, t: usize) usize {
        if (t == self.threads) return (self.units / self.groups / geo.tiles) * geo.ph;
        const tile = self.first_unit(t) / self.groups;
        return (tile / geo.tiles) * geo.ph + (tile % geo.tiles) * mr / geo.pw;
    }
};

pub fn run(comptime T: type, n: *const common.Node, shape: Shape, geo: Geometry, work: *const common.Work) void {
    const t: usize = work.thread_index;
    const tc: usize = work.thread_count;
    assert(work.scratch_size_bytes >= geo.total_bytes);
    assert(tc <= geo.threads);
    const counters: [*]align(64) [conv2d_common.counter_bytes]u8 = @ptrCast(work.scratch);
    const offsets: [*]u32 = @ptrCast(@alignCast(work.scratch + geo.offsets_offset));
    const weights: [*]f32 = @ptrCast(@alignCast(work.scratch + geo.weights_offset));
    const padded: [*]f32 = @ptrCast(@alignCast(work.scratch + geo.padded_offset));
    const schedule = Schedule.of(shape, geo, tc);

    // Each thread resets its counter before anyone claims (the barrier), and the plan's
    // barrier after the node keeps the next compute's resets (and preparations) from
    // overtaking a claim (or a read) of this one.
    conv2d_common.counter_of(counters, t).store(schedule.first_unit(t), .monotonic);
    for (geo.rows * t / tc..geo.rows * (t + 1) / tc) |r| {
        for (0..shape.kw) |kx| {
            offsets[r * shape.kw + kx] = @intCast(tap_offset(shape, geo.pw, r / shape.kh, r % shape.kh, kx));
        }
    }
    if (t == 0) @memset(offsets[shape.k .. shape.k + prefetch_rows * shape.kw], 0);
    for (geo.panels * t / tc..geo.panels * (t + 1) / tc) |p| pack_weights(T, n, shape, p, weights + p * nr * shape.k);
    // Each thread pads the rows its own units start on, so that across computes those stay
    // in its cache: another thread reads them only for the rows below a range's last tile
    // and for the units it takes over.
    const rows_end = schedule.first_row(geo, t + 1);
    for (0..shape.channels) |channel| {
        for (schedule.first_row(geo, t)..rows_end) |row| {
            const image_index = row / geo.ph;
            const plane = image_index * geo.image_floats + channel * geo.plane;
            conv2d_common.pad_row(T, n, shape, geo.pw, image_index, channel, row % geo.ph, padded + plane + (row % geo.ph) * geo.pw);
        }
    }
    if (t == tc - 1) @memset(padded[shape.images * geo.image_floats .. geo.padded_floats], 0);
    work.sync();

    // A thread's own range first, in order, then what is left of the next threads' ranges.
    for (0..tc) |step| {
        const owner = (t + step) % tc;
        const end = schedule.first_unit(owner + 1);
        const counter = conv2d_common.counter_of(counters, owner);
        var unit = counter.fetchAdd(1, .monotonic);
        while (unit < end) : (unit = counter.fetchAdd(1, .monotonic)) {
            compute_unit(n, shape, geo, schedule, unit, padded, offsets, weights);
        }
    }
}

/// One unit: a tile by a group of weight panels.
fn compute_unit(
    n: *const common.Node,
    shape: Shape,
    geo: Geometry,
    schedule: Schedule,
    unit: usize,
    padded: [*]const f32,
    offsets: [*]const u32,
    weights: [*]const f32,
) void {
    const tile = unit / schedule.groups;
    const group = unit % schedule.groups;
    const image_index = tile / geo.tiles;
    const q0 = (tile % geo.tiles) * mr;
    const a = padded + image_index * geo.image_floats + q0;
    for (geo.panels * group / schedule.groups..geo.panels * (group + 1) / schedule.groups) |p| {
        const oc0 = p * nr;
        const place: Place = .{ .image_index = image_index, .q0 = q0, .oc0 = oc0 };
        switch (min(nr, shape.out_channels - oc0)) {
            inline 1...nr => |cols| tile_product(cols, n, shape, geo, place, a, offsets, weights + p * nr * shape.k),
            else => unreachable,
        }
    }
}

/// Panel `p` of the weights: output channels [p * NR, p * NR + NR) as [k][NR] f32 (f16
/// widened; the missing channels of the last panel zero).
fn pack_weights(comptime T: type, n: *const common.Node, shape: Shape, p: usize, dst: [*]f32) void {
    const w = Tensor.from(&n.src[0]);
    const oc0 = p * nr;
    const base: [*]const u8 = @ptrFromInt(w.base + oc0 * w.nb[1]);
    gemm.pack_panel(nr, T, base, @intCast(w.nb[1]), @intCast(w.nb[0]), min(nr, shape.out_channels - oc0), shape.k, dst);
}

/// Where a tile's sums go: image, first q, first output channel.
const Place = struct {
    image_index: usize,
    q0: usize,
    oc0: usize,
};

/// One tile: MR consecutive q from `a` (the padded image at q0) by `cols` output channels of
/// the packed panel `b`, over every tap; then the sums of the q that are pixels stored.
fn tile_product(
    comptime cols: usize,
    n: *const common.Node,
    shape: Shape,
    geo: Geometry,
    place: Place,
    a: [*]const f32,
    offsets: [*]const u32,
    b: [*]const f32,
) void {
    var acc: [cols][vectors]V = undefined;
    inline for (0..cols) |j| {
        inline for (0..vectors) |v| acc[j][v] = @splat(0);
    }
    switch (shape.kw) {
        // The usual widths: a loop over rows of taps, the taps of a row unrolled.
        inline 1, 3 => |kw| {
            const d0: usize = @intCast(shape.dilation[0]);
            var pb = b;
            for (0..geo.rows) |r| {
                const row = a + offsets[r * kw];
                // The row `prefetch_rows` on: its reads come from L2 in jumps (planes, rows)
                // that the hardware prefetchers miss.
                const next: [*]const u8 = @ptrCast(a + offsets[(r + prefetch_rows) * kw]);
                inline for (0..prefetch_lines) |line| @prefetch(next + line * 64, .{});
                inline for (0..kw) |kx| {
                    multiply_add(cols, &acc, row + kx * d0, pb);
                    pb += nr;
                }
            }
        },
        else => for (offsets[0..shape.k], 0..) |offset, tap| multiply_add(cols, &acc, a + offset, b + tap * nr),
    }
    store_tile(cols, n, shape, geo, place, acc);
}

/// One tap of a tile: `acc[j]` += the tap's MR values times channel j's weight.
inline fn multiply_add(comptime cols: usize, acc: *[cols][vectors]V, pa: [*]const f32, pb: [*]const f32) void {
    var av: [vectors]V = undefined;
    inline for (0..vectors) |v| av[v] = pa[v * lanes ..][0..lanes].*;
    inline for (0..cols) |j| {
        const bv: V = @splat(pb[j]);
        inline for (0..vectors) |v| acc[j][v] = common.fma(V, av[v], bv, acc[j][v]);
    }
}

/// Stores the sums of a tile's q that are pixels: runs of consecutive q inside one output
/// row (a whole tile at once when it is one run and dst's pixels are adjacent).
fn store_tile(
    comptime cols: usize,
    n: *const common.Node,
    shape: Shape,
    geo: Geometry,
    place: Place,
    acc: [cols][vectors]V,
) void {
    const dst = Tensor.from(&n.dst);
    const base = dst.base + place.image_index * dst.nb[2] + place.oc0 * dst.nb[0];
    var q = place.q0;
    const q_end = min(place.q0 + mr, geo.span);
    var oy = q / geo.pw;
    var ox = q % geo.pw;
    if (dst.nb[1] == @sizeOf(f32) and q_end == q + mr and ox + mr <= shape.ow) {
        const p = oy * shape.ow + ox;
        inline for (0..cols) |j| {
            const out: [*]align(1) f32 = @ptrFromInt(base + j * dst.nb[0] + p * @sizeOf(f32));
            inline for (0..vectors) |v| out[v * lanes ..][0..lanes].* = acc[j][v];
        }
        return;
    }
    const sums: [cols][mr]f32 = @bitCast(acc);
    while (q < q_end) {
        if (ox >= shape.ow) {
            // Past the row's last pixel: the next padded row.
            q += geo.pw - ox;
            oy += 1;
            ox = 0;
            continue;
        }
        const len = min(shape.ow - ox, q_end - q);
        const p = oy * shape.ow + ox;
        const from = q - place.q0;
        for (0..cols) |j| {
            const row = base + j * dst.nb[0] + p * dst.nb[1];
            if (dst.nb[1] == @sizeOf(f32)) {
                conv2d_common.copy_short(mr, @ptrFromInt(row), sums[j][from..].ptr, len);
            } else {
                for (0..len) |i| common.store_f32(row + i * dst.nb[1], sums[j][from + i]);
            }
        }
        q += len;
        ox += len;
    }
}
