//! conv_2d's Winograd path (kernels/conv2d.zig chooses it): F(2x2, 3x3) for 3x3 kernels with
//! stride 1, no dilation and f32 weights. Each 2x2 tile of output pixels is
//! Y = A^T [(G g G^T) . (B^T d B)] A, with d the tile's 4x4 window of the zero-padded image and
//! g a 3x3 kernel: 16 products per tile, input channel and output channel where the
//! convolution takes 36, so the sums take 2.25 times fewer multiply-adds (Lavin and Gray,
//! "Fast Algorithms for Convolutional Neural Networks", 2015). The transforms only add,
//! subtract and halve, and the results stay within f32 rounding of the direct sums (the tests
//! hold them to the same float64 tolerance).
//!
//! Per claimed unit (up to MR consecutive tiles, row-major over the images): the input
//! transform V[ic][xi][tile] = (B^T d B)[xi] of each window, for every input channel, into this
//! thread's region; then per NR-panel of output channels and per position xi (16) one GEMM
//! M[xi][oc][tile] = sum over ic of V[ic][xi][tile] * U[xi][ic][oc] (tiles along vectors,
//! output channels broadcast), and the output transform of the panel's M into dst. Tiles
//! along a vector are consecutive tiles of one tile row: the padded copy keeps each row as its
//! even columns then its odd ones, so a window's column c of consecutive tiles is consecutive
//! floats, and a tile's two output columns interleave into adjacent pixels.
//!
//! Before the one barrier every thread does a share of two preparations: the weights'
//! transform U = G g G^T, stored [xi][panel][ic][NR], and the padded rows its range of tiles
//! starts on. After it each thread
//! claims units of its own range of tiles from its own counter, then what is left of the
//! others', as conv2d_direct.zig.
//!
//! Every element is summed in one order (each position's sum over the input channels in
//! order, one fma each, then the output transform) whatever the thread count.

const std = @import("std");
const common = @import("common.zig");
const gemm = @import("gemm.zig");
const conv2d_common = @import("conv2d_common.zig");
const Shape = conv2d_common.Shape;

const assert = common.assert;
const Tensor = common.Tensor;
const lanes = gemm.lanes;
const V = @Vector(lanes, f32);
const zero = conv2d_common.zero;
const copy_short = conv2d_common.copy_short;
const counter_bytes = conv2d_common.counter_bytes;

/// Vectors of tiles in one GEMM micro-tile, and its output channels (broadcasts): the direct
/// path's register budget (AVX-512 3 x 8, 16 registers 3 x 4).
const vectors: usize = 3;
/// Tiles per unit: one micro-tile's worth.
pub const mr: usize = vectors * lanes;
pub const nr: usize = if (lanes == 16) 8 else 4;
/// Positions of the 4x4 transformed tile.
const positions: usize = 16;
/// Floats between the rows of V and of M: a unit's MR tiles and a vector of slack, which a
/// run's last vector of transformed windows may overrun, and its last vector of sums overread
/// (those lanes are never stored).
const v_pitch: usize = mr + lanes;
/// Fewer input or output channels than this take the direct path: the transforms, per tile
/// and channel, would weigh more than the multiply-adds they save.
pub const channels_min: usize = 8;
/// The largest padded image this path copies into the work buffer (as the direct path's).
pub const padded_bytes_max: usize = 64 << 20;

comptime {
    assert(vectors * nr + vectors + 1 <= if (lanes == 16) 32 else 16);
    assert(v_pitch * @sizeOf(f32) % 64 == 0); // rows of V stay aligned for vector loads
}

inline fn min(x: usize, y: usize) usize {
    return if (x < y) x else y;
}

fn round_up(x: usize, to: usize) usize {
    return (x + to - 1) / to * to;
}

/// Where things live in the tile grid and in the work buffer.
pub const Geometry = struct {
    half: usize, // floats of each half of a padded row (its even columns, then its odd ones)
    ph: usize, // padded height: IH + 2 * p1
    plane: usize, // 2 * half * ph floats
    image_floats: usize, // channels * plane
    tw: usize, // tiles per tile row: ceil(OW / 2)
    tiles: usize, // tiles of one image: tw * ceil(OH / 2)
    panels: usize, // NR panels of output channels
    threads: usize, // the most threads the work buffer serves
    // Work buffer: a tile counter per thread (a cache line each), U, the padded images (with
    // zeros after the last, which the last windows and vector loads overrun), then per
    // thread V and M.
    transformed_offset: usize,
    padded_offset: usize,
    padded_floats: usize,
    region_offset: usize,
    region_floats: usize, // V (channels x positions x v_pitch) then M (positions x NR x v_pitch)
    total_bytes: usize,

    /// The geometry, or null where this path does not apply.
    pub fn of(shape: Shape, weights: common.DType, thread_count: usize) ?Geometry {
        if (shape.kw != 3 or shape.kh != 3 or weights != .f32) return null;
        if (shape.stride[0] != 1 or shape.stride[1] != 1) return null;
        if (shape.dilation[0] != 1 or shape.dilation[1] != 1) return null;
        if (shape.channels < channels_min or shape.out_channels < channels_min) return null;
        // Every column a stored output's window reads (up to OW + 1), the image's columns, and
        // an even count: no window wraps into the next row.
        const pw = round_up(@max(shape.ow + 2, @as(usize, @intCast(shape.iw + shape.pad[0]))), 2);
        const ph: usize = @intCast(shape.ih + 2 * shape.pad[1]);
        const plane = pw *| ph;
        const image_floats = plane *| shape.channels;
        if (image_floats *| shape.images > padded_bytes_max / @sizeOf(f32)) return null;
        const tw = (shape.ow + 1) / 2;
        const tiles = tw * ((shape.oh + 1) / 2);
        const panels = (shape.out_channels + nr - 1) / nr;
        // A window reaches two rows past the last output row (one past the plane when OH is
        // odd); a run's vector loads reach lanes + 1 past its tiles' columns.
        const padded_floats = round_up(shape.images * image_floats + 2 * pw + 2 * mr + 4 * lanes, 16);
        const transformed_offset = counter_bytes * thread_count;
        const padded_offset = transformed_offset + positions * panels * nr * shape.channels * @sizeOf(f32);
        const region_offset = padded_offset + padded_floats * @sizeOf(f32);
        const region_floats = positions * shape.channels * v_pitch + positions * nr * v_pitch;
        return .{
            .half = pw / 2,
            .ph = ph,
            .plane = plane,
            .image_floats = image_floats,
            .tw = tw,
            .tiles = tiles,
            .panels = panels,
            .threads = thread_count,
            .transformed_offset = transformed_offset,
            .padded_offset = padded_offset,
            .padded_floats = padded_floats,
            .region_offset = region_offset,
            .region_floats = region_floats,
            .total_bytes = region_offset + region_floats * thread_count * @sizeOf(f32),
        };
    }

    /// Thread `t`'s first tile (counted over all images; the end of thread t - 1's range).
    fn first_tile(self: Geometry, shape: Shape, t: usize, thread_count: usize) usize {
        return shape.images * self.tiles * t / thread_count;
    }

    /// The first padded row (image * PH + row) thread `t` builds: its first tile's top row.
    fn first_row(self: Geometry, shape: Shape, t: usize, thread_count: usize) usize {
        if (t == thread_count) return shape.images * self.ph;
        const tile = self.first_tile(shape, t, thread_count);
        return (tile / self.tiles) * self.ph + (tile % self.tiles) / self.tw * 2;
    }
};

pub fn run(n: *const common.Node, shape: Shape, geo: Geometry, work: *const common.Work) void {
    const t: usize = work.thread_index;
    const tc: usize = work.thread_count;
    assert(work.scratch_size_bytes >= geo.total_bytes);
    assert(tc <= geo.threads);
    const counters: [*]align(64) [counter_bytes]u8 = @ptrCast(work.scratch);
    const transformed: [*]f32 = @ptrCast(@alignCast(work.scratch + geo.transformed_offset));
    const padded: [*]f32 = @ptrCast(@alignCast(work.scratch + geo.padded_offset));
    const region = @as([*]f32, @ptrCast(@alignCast(work.scratch + geo.region_offset))) + t * geo.region_floats;

    // Each thread resets its counter before anyone claims (the barrier), and the plan's
    // barrier after the node keeps the next compute's resets and preparations from
    // overtaking a claim or a read of this one.
    conv2d_common.counter_of(counters, t).store(geo.first_tile(shape, t, tc), .monotonic);
    for (geo.panels * t / tc..geo.panels * (t + 1) / tc) |p| transform_weights(n, shape, geo, p, transformed);
    // Each thread pads the rows its own tiles start on (conv2d_direct.zig's reasons).
    const rows_end = geo.first_row(shape, t + 1, tc);
    for (0..shape.channels) |channel| {
        for (geo.first_row(shape, t, tc)..rows_end) |row| {
            const image_index = row / geo.ph;
            const at = image_index * geo.image_floats + channel * geo.plane + (row % geo.ph) * 2 * geo.half;
            pad_row_split(n, shape, geo.half, image_index, channel, row % geo.ph, padded + at);
        }
    }
    if (t == tc - 1) @memset(padded[shape.images * geo.image_floats .. geo.padded_floats], 0);
    work.sync();

    // A thread's own range first, in order, then what is left of the next threads' ranges.
    for (0..tc) |step| {
        const owner = (t + step) % tc;
        const end = geo.first_tile(shape, owner + 1, tc);
        const counter = conv2d_common.counter_of(counters, owner);
        var first = counter.fetchAdd(mr, .monotonic);
        while (first < end) : (first = counter.fetchAdd(mr, .monotonic)) {
            compute_unit(n, shape, geo, first, min(end, first + mr), padded, transformed, region);
        }
    }
}

/// Input channels packed per weight transform step: [taps][NR] on the stack.
const weight_channels_step: usize = 16;
const W = @Vector(nr, f32);

/// Panel `p` of U = G g G^T for every input channel, into U[xi][p][ic][NR] (the channels past
/// the last zero), G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]: the NR
/// output channels of a panel along a vector.
fn transform_weights(n: *const common.Node, shape: Shape, geo: Geometry, p: usize, transformed: [*]f32) void {
    const w = Tensor.from(&n.src[0]);
    const oc0 = p * nr;
    var packed_taps: [weight_channels_step * 9 * nr]f32 align(64) = undefined;
    var ic0: usize = 0;
    while (ic0 < shape.channels) : (ic0 += weight_channels_step) {
        const count = min(weight_channels_step, shape.channels - ic0);
        const base: [*]const u8 = @ptrFromInt(w.base + oc0 * w.nb[1] + ic0 * 9 * w.nb[0]);
        gemm.pack_panel(nr, f32, base, @intCast(w.nb[1]), @intCast(w.nb[0]), min(nr, shape.out_channels - oc0), count * 9, &packed_taps);
        for (0..count) |i| {
            var g: [3][3]W = undefined;
            inline for (0..3) |ky| {
                inline for (0..3) |kx| g[ky][kx] = packed_taps[((i * 3 + ky) * 3 + kx) * nr ..][0..nr].*;
            }
            // G g: along ky; then (G g) G^T: along kx.
            var gg: [4][3]W = undefined;
            inline for (0..3) |kx| {
                const c = transform_kernel_line(.{ g[0][kx], g[1][kx], g[2][kx] });
                inline for (0..4) |row| gg[row][kx] = c[row];
            }
            inline for (0..4) |row| {
                const u = transform_kernel_line(gg[row]);
                inline for (0..4) |col| {
                    const xi = row * 4 + col;
                    transformed[((xi * geo.panels + p) * shape.channels + ic0 + i) * nr ..][0..nr].* = u[col];
                }
            }
        }
    }
}

/// G times three values.
inline fn transform_kernel_line(g: [3]W) [4]W {
    const half: W = @splat(0.5);
    return .{ g[0], (g[0] + g[1] + g[2]) * half, (g[0] - g[1] + g[2]) * half, g[2] };
}

/// Tiles [first, last) (counted over all images): input transform, then per panel the 16
/// GEMMs and the output transform.
fn compute_unit(
    n: *const common.Node,
    shape: Shape,
    geo: Geometry,
    first: usize,
    last: usize,
    padded: [*]const f32,
    transformed: [*]const f32,
    region: [*]f32,
) void {
    assert(first < last);
    assert(last - first <= mr);
    const v_block = region;
    const m_block = region + positions * shape.channels * v_pitch;
    for (0..shape.channels) |ic| transform_input(geo, first, last, ic, padded, v_block);
    const vector_count = (last - first + lanes - 1) / lanes;
    for (0..geo.panels) |p| {
        const cols = min(nr, shape.out_channels - p * nr);
        for (0..positions) |xi| {
            const a = v_block + xi * v_pitch;
            const b = transformed + (xi * geo.panels + p) * shape.channels * nr;
            const m = m_block + xi * nr * v_pitch;
            switch (vector_count) {
                inline 1...vectors => |vc| switch (cols) {
                    inline 1...nr => |cc| product(vc, cc, shape.channels, a, b, m),
                    else => unreachable,
                },
                else => unreachable,
            }
        }
        for (0..cols) |j| transform_output(n, shape, geo, first, last, p * nr + j, m_block + j * v_pitch);
    }
}

/// A run of consecutive tiles of one tile row of one image, from a unit's tile `slot`.
const Run = struct {
    slot: usize, // first tile's place in the unit
    len: usize,
    image_index: usize,
    ty: usize,
    tx: usize,
};

/// The unit's tiles [first, last) as runs inside tile rows; `visit(run)` for each.
inline fn for_runs(geo: Geometry, first: usize, last: usize, context: anytype, comptime visit: fn (@TypeOf(context), Run) void) void {
    var tile = first;
    while (tile < last) {
        const local = tile % geo.tiles;
        const tx = local % geo.tw;
        const len = min(geo.tw - tx, last - tile);
        visit(context, .{ .slot = tile - first, .len = len, .image_index = tile / geo.tiles, .ty = local / geo.tw, .tx = tx });
        tile += len;
    }
}

/// Padded row `row` of channel `channel` of image `image_index` into `dst` split in halves of
/// `half` floats, its even columns then its odd ones (a window's column c of consecutive tiles
/// is then consecutive floats of one half): zeros in the padding.
fn pad_row_split(n: *const common.Node, shape: Shape, half: usize, image_index: usize, channel: usize, row: usize, dst: [*]f32) void {
    const image = Tensor.from(&n.src[1]);
    const iw: usize = @intCast(shape.iw);
    const ih: usize = @intCast(shape.ih);
    const p0: usize = @intCast(shape.pad[0]);
    const p1: usize = @intCast(shape.pad[1]);
    if (row < p1 or row >= p1 + ih) return zero(dst, 2 * half);
    const source: [*]align(1) const f32 = @ptrFromInt(image.base + image_index * image.nb[3] + channel * image.nb[2] + (row - p1) * image.nb[1]);
    // 2 * lanes padded columns at a time: read (zeros outside the image), then split.
    var c0: usize = 0;
    while (c0 < 2 * half) : (c0 += 2 * lanes) {
        var x: V = undefined;
        var y: V = undefined;
        if (c0 >= p0 and c0 - p0 + 2 * lanes <= iw) {
            x = source[c0 - p0 ..][0..lanes].*;
            y = source[c0 - p0 + lanes ..][0..lanes].*;
        } else {
            // At an edge: the image's columns of the chunk, zeros around.
            var columns: [2 * lanes]f32 = @splat(0);
            const lo = @max(c0, p0);
            const hi = @min(c0 + 2 * lanes, p0 + iw);
            if (hi > lo) copy_short(2 * lanes, columns[lo - c0 ..].ptr, source + (lo - p0), hi - lo);
            x = columns[0..lanes].*;
            y = columns[lanes..].*;
        }
        const count = min(lanes, half - c0 / 2);
        const even: [lanes]f32 = @shuffle(f32, x, y, split_mask(0));
        const odd: [lanes]f32 = @shuffle(f32, x, y, split_mask(1));
        copy_short(lanes, dst + c0 / 2, &even, count);
        copy_short(lanes, dst + half + c0 / 2, &odd, count);
    }
}

/// Lanes `parity`, parity + 2, ... of two vectors.
fn split_mask(comptime parity: usize) [lanes]i32 {
    var mask: [lanes]i32 = undefined;
    for (0..lanes) |i| {
        const k = 2 * i + parity;
        mask[i] = if (k < lanes) @intCast(k) else ~@as(i32, @intCast(k - lanes));
    }
    return mask;
}

/// B^T applied to four values (a column or a row of a window).
inline fn transform_input_line(d: [4]V) [4]V {
    return .{ d[0] - d[2], d[1] + d[2], d[2] - d[1], d[1] - d[3] };
}

/// V[ic][xi][slot] = (B^T d B)[xi] for the unit's windows of input channel `ic`,
/// B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], a vector of tiles at a
/// time (a run's last vector overruns into the slack or the next run's slots, which are
/// written after it).
fn transform_input(geo: Geometry, first: usize, last: usize, ic: usize, padded: [*]const f32, v_block: [*]f32) void {
    const Context = struct { geo: *const Geometry, ic: usize, padded: [*]const f32, v_block: [*]f32 };
    const context: Context = .{ .geo = &geo, .ic = ic, .padded = padded, .v_block = v_block };
    for_runs(geo, first, last, context, struct {
        fn visit(c: Context, r: Run) void {
            const half = c.geo.half;
            const window = c.padded + r.image_index * c.geo.image_floats + c.ic * c.geo.plane + 2 * r.ty * 2 * half + r.tx;
            var i: usize = 0;
            while (i < r.len) : (i += lanes) {
                // d[row][column] for `lanes` tiles: columns 0 and 2 from the row's even half,
                // 1 and 3 from its odd half.
                var u: [4][4]V = undefined;
                var d: [4][4]V = undefined;
                inline for (0..4) |row| {
                    const even = window + row * 2 * half + i;
                    inline for (0..4) |col| d[row][col] = (even + (col % 2) * half + col / 2)[0..lanes].*;
                }
                inline for (0..4) |col| {
                    const t = transform_input_line(.{ d[0][col], d[1][col], d[2][col], d[3][col] });
                    inline for (0..4) |row| u[row][col] = t[row];
                }
                inline for (0..4) |row| {
                    const t = transform_input_line(u[row]);
                    inline for (0..4) |col| {
                        const out = c.v_block + (c.ic * positions + row * 4 + col) * v_pitch + r.slot + i;
                        out[0..lanes].* = t[col];
                    }
                }
            }
        }
    }.visit);
}

/// M[oc][tile] for one position: the sum over the input channels of V[ic][tile] * U[ic][oc],
/// `vc` vectors of tiles by `cols` output channels.
fn product(comptime vc: usize, comptime cols: usize, channels: usize, a: [*]const f32, b: [*]const f32, m: [*]f32) void {
    var acc: [cols][vc]V = undefined;
    inline for (0..cols) |j| {
        inline for (0..vc) |v| acc[j][v] = @splat(0);
    }
    var pa = a;
    var pb = b;
    for (0..channels) |_| {
        var av: [vc]V = undefined;
        inline for (0..vc) |v| av[v] = pa[v * lanes ..][0..lanes].*;
        inline for (0..cols) |j| {
            const bv: V = @splat(pb[j]);
            inline for (0..vc) |v| acc[j][v] = common.fma(V, av[v], bv, acc[j][v]);
        }
        pa += positions * v_pitch;
        pb += nr;
    }
    inline for (0..cols) |j| {
        inline for (0..vc) |v| m[j * v_pitch + v * lanes ..][0..lanes].* = acc[j][v];
    }
}

/// A^T applied to four values, A^T = [[1, 1, 1, 0], [0, 1, -1, -1]].
inline fn transform_output_line(m: [4]V) [2]V {
    return .{ m[0] + m[1] + m[2], m[1] - m[2] - m[3] };
}

/// Output channel `oc` of the unit's tiles: Y = A^T M A from `m` (M[xi] `nr * v_pitch` floats
/// apart), stored where inside the output.
fn transform_output(n: *const common.Node, shape: Shape, geo: Geometry, first: usize, last: usize, oc: usize, m: [*]const f32) void {
    const Context = struct { n: *const common.Node, shape: *const Shape, oc: usize, m: [*]const f32 };
    const context: Context = .{ .n = n, .shape = &shape, .oc = oc, .m = m };
    for_runs(geo, first, last, context, struct {
        fn visit(c: Context, r: Run) void {
            const dst = Tensor.from(&c.n.dst);
            const base = dst.base + r.image_index * dst.nb[2] + c.oc * dst.nb[0];
            var i: usize = 0;
            while (i < r.len) : (i += lanes) {
                var w: [2][4]V = undefined;
                inline for (0..4) |col| {
                    var column: [4]V = undefined;
                    inline for (0..4) |row| column[row] = c.m[(row * 4 + col) * nr * v_pitch + r.slot + i ..][0..lanes].*;
                    const t = transform_output_line(column);
                    w[0][col] = t[0];
                    w[1][col] = t[1];
                }
                const ox = 2 * (r.tx + i);
                const count = min(2 * min(lanes, r.len - i), c.shape.ow - ox);
                inline for (0..2) |row| {
                    const oy = 2 * r.ty + row;
                    if (oy < c.shape.oh) {
                        const y = transform_output_line(w[row]);
                        // Tile k's columns are pixels ox + 2k and ox + 2k + 1.
                        const pixels: [2 * lanes]f32 = @bitCast(interleave(y[0], y[1]));
                        const at = base + (oy * c.shape.ow + ox) * dst.nb[1];
                        if (dst.nb[1] == @sizeOf(f32)) {
                            copy_short(2 * lanes, @ptrFromInt(at), &pixels, count);
                        } else {
                            for (0..count) |k| common.store_f32(at + k * dst.nb[1], pixels[k]);
                        }
                    }
                }
            }
        }
    }.visit);
}

/// x[0], y[0], x[1], y[1], ...: two vectors.
inline fn interleave(x: V, y: V) [2]V {
    comptime var low: [lanes]i32 = undefined;
    comptime var high: [lanes]i32 = undefined;
    inline for (0..lanes) |i| {
        const k = i / 2;
        low[i] = if (i % 2 == 0) k else ~@as(i32, k);
        high[i] = if (i % 2 == 0) k + lanes / 2 else ~@as(i32, k + lanes / 2);
    }
    return .{ @shuffle(f32, x, y, low), @shuffle(f32, x, y, high) };
}
