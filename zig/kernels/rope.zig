//! rope: rotary position embedding, ggml_rope_ext's CPU math (ggml-cpu/ops.cpp,
//! ggml_compute_forward_rope_flt, ggml_rope_cache_init, rope_yarn, rope_yarn_ramp; ggml.c,
//! ggml_rope_yarn_corr_dims). src0 f32|f16 [ne0, heads, tokens, ne3], src1 i32 positions
//! [tokens] (one per i2, shared by every i1 and i3), src2 (optional) f32 frequency factors
//! [>= n_dims/2]; dst of src0's dtype and shape.
//!
//! params (f32 slots): [0] n_dims (even, 2 <= n_dims <= ne0), [1] mode (0 normal, 2 neox),
//! [2] freq_base, [3] freq_scale, [4] ext_factor, [5] attn_factor, [6] beta_fast, [7] beta_slow,
//! [8] n_ctx_orig (a whole number; ggml converts its int to float where it uses it, so the f32
//! slot holds the same value). As ggml, in f32: theta_scale = powf(freq_base, -2.0f/n_dims);
//! for pair k the base angle is p * theta_scale^k by the recurrence `theta *= theta_scale` (not
//! pow), divided by freq_factors[k] when src2 is given, then rope_yarn: theta_interp =
//! freq_scale * theta; with ext_factor != 0 the angle mixes interpolation and extrapolation by
//! YaRN's ramp over the corr dims and the magnitude grows by 1 + 0.1 logf(1/freq_scale); cos and
//! sin are scaled by attn_factor times that. Normal mode rotates (x[2k], x[2k+1]); neox rotates
//! (x[k], x[k + n_dims/2]). Elements from n_dims on are copied unchanged. f16 elements are
//! widened to f32 and the results rounded back (ggml's rotate_pairs<ggml_fp16_t>).
//!
//! Bit for bit ggml-cpu's (tests/ggml_exact_ops_test.ts, tests/rpc_server_ops_test.ts): powf,
//! logf, cosf and sinf are the C library's, as ggml calls them; GCC contracts ggml's
//! `a*b + c*d` forms into one fused multiply-add of the first product (the rotation's
//! `x0*cos - x1*sin` and `x0*sin + x1*cos`, YaRN's `theta_interp*(1 - ramp_mix) +
//! theta_extrap*ramp_mix` and `1.0f + 0.1f*logf(...)`), so these are @mulAdd here, on wasm too
//! (a correctly rounded software fma there: the same bits).
//!
//! Like ggml, each thread keeps the cos/sin of one position in its share of the work buffer and
//! refills it when the row's position index changes; rows are split across threads. The rotation
//! runs on vectors of `lanes` (gathers on strided rows); `rope_row_scalar` is its reference.
//! Each output pair is written after both of its inputs are read, and no other output reads
//! them, so dst may alias src0 (ggml_rope_inplace).

const std = @import("std");
const common = @import("common.zig");

const assert = common.assert;
const lanes = common.lanes;
const F32x = common.F32x;
const Strided = common.Strided;
const Tensor = common.Tensor;

pub const Mode = enum(u32) { normal = 0, neox = 2 };

/// The node's params (validated: validate.zig check_rope).
pub const Params = struct {
    n_dims: usize,
    mode: Mode,
    freq_base: f32,
    freq_scale: f32,
    ext_factor: f32,
    attn_factor: f32,
    beta_fast: f32,
    beta_slow: f32,
    n_ctx_orig: f32,

    pub fn of(n: *const common.Node) Params {
        const n_dims: usize = @intFromFloat(n.param_f32(0));
        assert(n_dims >= 2 and n_dims % 2 == 0);
        return .{
            .n_dims = n_dims,
            // validate allows only 0 and 2
            .mode = @enumFromInt(@as(u32, @intFromFloat(n.param_f32(1)))),
            .freq_base = n.param_f32(2),
            .freq_scale = n.param_f32(3),
            .ext_factor = n.param_f32(4),
            .attn_factor = n.param_f32(5),
            .beta_fast = n.param_f32(6),
            .beta_slow = n.param_f32(7),
            .n_ctx_orig = n.param_f32(8),
        };
    }
};

/// ggml's theta_scale: powf(freq_base, -2.0f / n_dims) (the C library's powf), the exponent
/// rounded to f32 first.
pub fn theta_scale(freq_base: f32, n_dims: usize) f32 {
    const exponent: f32 = -2.0 / @as(f32, @floatFromInt(n_dims));
    return common.powf(freq_base, exponent);
}

/// C's MAX and MIN macros (ggml's), which keep b when the comparison is false (NaN included).
fn c_max(a: f32, b: f32) f32 {
    return if (a > b) a else b;
}
fn c_min(a: f32, b: f32) f32 {
    return if (a < b) a else b;
}

/// ggml_rope_yarn_corr_dim: n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) /
/// (2 * logf(base)), each operation in f32 in C's order.
fn corr_dim(n_dims: usize, n_ctx_orig: f32, n_rot: f32, base: f32) f32 {
    const pi: f32 = std.math.pi;
    const dims: f32 = @floatFromInt(n_dims);
    return dims * common.logf(n_ctx_orig / (n_rot * 2 * pi)) / (2 * common.logf(base));
}

/// ggml_rope_yarn_corr_dims: the first and last pair dims of YaRN's ramp.
pub fn corr_dims(p: *const Params) [2]f32 {
    const start = @floor(corr_dim(p.n_dims, p.n_ctx_orig, p.beta_fast, p.freq_base));
    const end = @ceil(corr_dim(p.n_dims, p.n_ctx_orig, p.beta_slow, p.freq_base));
    return .{ c_max(0, start), c_min(@floatFromInt(p.n_dims - 1), end) };
}

/// rope_yarn_ramp: 1 below `low`, 0 above `high`, linear between, for pair `pair` (ggml's
/// i0 / 2, converted to float).
fn yarn_ramp(low: f32, high: f32, pair: usize) f32 {
    const y = (@as(f32, @floatFromInt(pair)) - low) / c_max(0.001, high - low);
    return 1 - c_min(1, c_max(0, y));
}

/// What the cos/sin of one position depend on besides the position.
const Angles = struct {
    n_dims: usize,
    theta_scale: f32,
    freq_scale: f32,
    ext_factor: f32,
    attn_factor: f32,
    corr: [2]f32,
    /// src2's elements, or null for factors of 1.
    freq_factors: ?Strided,

    fn of(p: *const Params, freq_factors: ?Strided) Angles {
        return .{
            .n_dims = p.n_dims,
            .theta_scale = theta_scale(p.freq_base, p.n_dims),
            .freq_scale = p.freq_scale,
            .ext_factor = p.ext_factor,
            .attn_factor = p.attn_factor,
            .corr = corr_dims(p),
            .freq_factors = freq_factors,
        };
    }
};

const CosSin = struct { cos: f32, sin: f32 };

/// rope_yarn for pair `pair` with the extrapolated angle `theta_extrap` (ggml's theta / ff).
fn yarn(a: *const Angles, theta_extrap: f32, pair: usize) CosSin {
    const theta_interp = a.freq_scale * theta_extrap;
    var theta = theta_interp;
    var mscale = a.attn_factor;
    if (a.ext_factor != 0) {
        const ramp_mix = yarn_ramp(a.corr[0], a.corr[1], pair) * a.ext_factor;
        theta = @mulAdd(f32, theta_interp, 1 - ramp_mix, theta_extrap * ramp_mix);
        mscale *= @mulAdd(f32, 0.1, common.logf(1.0 / a.freq_scale), 1.0);
    }
    return .{ .cos = common.cosf(theta) * mscale, .sin = common.sinf(theta) * mscale };
}

/// Floats of one thread's cos/sin cache: cos and sin of each pair, padded to whole vectors.
fn cache_floats(n_dims: usize) usize {
    return 2 * std.mem.alignForward(usize, n_dims / 2, lanes);
}

fn thread_bytes(n_dims: usize) usize {
    return std.mem.alignForward(usize, cache_floats(n_dims) * 4, 64);
}

/// Scratch bytes for `thread_count` threads: one cos/sin cache each.
pub fn work_size(n: *const common.Node, thread_count: u32) u64 {
    const n_dims: usize = @intFromFloat(n.param_f32(0));
    return @as(u64, thread_bytes(n_dims)) * thread_count;
}

/// ggml_rope_cache_init for `position`, in the layout `mode`'s rotation reads: normal keeps
/// (cos, sin) of pair k at [2k, 2k + 1] (ggml's own cache), neox keeps cos at [k] and sin at
/// [half_padded + k]. Padding lanes are 0.
fn fill_cache(comptime mode: Mode, a: *const Angles, position: i32, cache: []f32) void {
    assert(cache.len == cache_floats(a.n_dims));
    @memset(cache, 0);
    const half = a.n_dims / 2;
    const sin_at = cache.len / 2;
    var theta: f32 = @floatFromInt(position);
    for (0..half) |k| {
        const factor: f32 = if (a.freq_factors) |f| common.load_f32(f.at(k)) else 1.0;
        const cs = yarn(a, theta / factor, k);
        switch (mode) {
            .normal => {
                cache[2 * k] = cs.cos;
                cache[2 * k + 1] = cs.sin;
            },
            .neox => {
                cache[k] = cs.cos;
                cache[sin_at + k] = cs.sin;
            },
        }
        theta *= a.theta_scale;
    }
}

pub fn rope(n: *const common.Node, work: *const common.Work) common.Status {
    const p = Params.of(n);
    const dst = Tensor.from(&n.dst);
    const src = Tensor.from(&n.src[0]);
    const positions = Tensor.from(&n.src[1]);
    assert(src.dtype == dst.dtype and (src.dtype == .f32 or src.dtype == .f16));
    assert(positions.dtype == .i32 and positions.ne[0] == src.ne[2]);
    assert(p.n_dims <= src.ne[0]);
    if (work.scratch_size_bytes < work_size(n, work.thread_count)) return .out_of_space;
    const factors: ?Strided = if (n.src_count == 3) Tensor.from(&n.src[2]).row(0) else null;
    const angles = Angles.of(&p, factors);
    const bytes = thread_bytes(p.n_dims);
    const cache_base: [*]f32 = @ptrCast(@alignCast(work.scratch + bytes * work.thread_index));
    const cache = cache_base[0..cache_floats(p.n_dims)];
    const rows: Rows = .{ .dst = dst, .src = src, .positions = positions, .angles = &angles };
    const range = common.thread_range(src.rows(), work);
    switch (src.dtype) {
        .f32 => switch (p.mode) {
            .normal => rope_rows(f32, .normal, rows, range, cache),
            .neox => rope_rows(f32, .neox, rows, range, cache),
        },
        .f16 => switch (p.mode) {
            .normal => rope_rows(f16, .normal, rows, range, cache),
            .neox => rope_rows(f16, .neox, rows, range, cache),
        },
        else => unreachable, // asserted above
    }
    return .ok;
}

const Rows = struct {
    dst: Tensor,
    src: Tensor,
    positions: Tensor,
    angles: *const Angles,
};

fn rope_rows(
    comptime T: type,
    comptime mode: Mode,
    rows: Rows,
    range: common.Range,
    cache: []f32,
) void {
    var cached_i2: ?usize = null;
    for (range.begin..range.end) |row| {
        const index = rows.src.row_index(row);
        if (cached_i2 != index.i2) {
            const at = rows.positions.base + index.i2 * rows.positions.nb[0];
            fill_cache(mode, rows.angles, @bitCast(common.load_u32(at)), cache);
            cached_i2 = index.i2;
        }
        const args: RowArgs = .{
            .dst = rows.dst.row_at(index),
            .src = rows.src.row_at(index),
            .count = rows.src.ne[0],
            .n_dims = rows.angles.n_dims,
            .cache = cache,
        };
        rope_row(T, mode, args);
        copy_rest(T, args);
    }
}

pub const RowArgs = struct {
    dst: Strided,
    src: Strided,
    /// Elements of the row (ne0).
    count: usize,
    n_dims: usize,
    /// fill_cache's layout for the mode.
    cache: []const f32,
};

fn load(comptime T: type, row: Strided, index: usize, count: usize) F32x {
    return if (T == f32) common.load_chunk(row, index, count, 0) else common.load_chunk_f16(row, index, count);
}

fn store(comptime T: type, row: Strided, index: usize, count: usize, value: F32x) void {
    if (T == f32) common.store_chunk(row, index, count, value) else common.store_chunk_f16(row, index, count, value);
}

fn cache_chunk(cache: []const f32, index: usize) F32x {
    return cache[index..][0..lanes].*;
}

/// The rotated dims of one row, `lanes` outputs at a time: each lane computes ggml's fused
/// `fma(x0, cos, -(x1 * sin))` or `fma(x0, sin, x1 * cos)` for its element.
pub fn rope_row(comptime T: type, comptime mode: Mode, args: RowArgs) void {
    const half = args.n_dims / 2;
    switch (mode) {
        .normal => {
            // Lanes hold pairs (x0, x1): a = (x0, x0), b = (cos, sin) (the cache as it is),
            // c = (x1, x1), d = (-sin, cos).
            const evens = comptime pattern(0, 0);
            const odds = comptime pattern(1, 1);
            const swap = comptime pattern(1, 0);
            const sign: F32x = comptime sign: {
                var s: [lanes]f32 = undefined;
                for (0..lanes) |lane| s[lane] = if (lane % 2 == 0) -1 else 1;
                break :sign s;
            };
            var i: usize = 0;
            while (i < args.n_dims) : (i += lanes) {
                const count = @min(lanes, args.n_dims - i);
                const x = load(T, args.src, i, count);
                const b = cache_chunk(args.cache, i);
                const d = @shuffle(f32, b, undefined, swap) * sign;
                const a = @shuffle(f32, x, undefined, evens);
                const c = @shuffle(f32, x, undefined, odds);
                store(T, args.dst, i, count, @mulAdd(F32x, a, b, c * d));
            }
        },
        .neox => {
            const sin_at = args.cache.len / 2;
            var k: usize = 0;
            while (k < half) : (k += lanes) {
                const count = @min(lanes, half - k);
                const x0 = load(T, args.src, k, count);
                const x1 = load(T, args.src, k + half, count);
                const cos = cache_chunk(args.cache, k);
                const sin = cache_chunk(args.cache, sin_at + k);
                store(T, args.dst, k, count, @mulAdd(F32x, x0, cos, -(x1 * sin)));
                store(T, args.dst, k + half, count, @mulAdd(F32x, x0, sin, x1 * cos));
            }
        },
    }
}

/// Shuffle mask picking element 2 * (lane / 2) + even_lane for even lanes and
/// 2 * (lane / 2) + odd_lane for odd ones.
fn pattern(comptime even_lane: i32, comptime odd_lane: i32) @Vector(lanes, i32) {
    var mask: [lanes]i32 = undefined;
    for (0..lanes) |lane| {
        const base: i32 = @intCast(lane - lane % 2);
        mask[lane] = base + if (lane % 2 == 0) even_lane else odd_lane;
    }
    return mask;
}

/// rope_row one pair at a time, as ggml's rotate_pairs (the reference of the tests).
pub fn rope_row_scalar(comptime T: type, comptime mode: Mode, args: RowArgs) void {
    const half = args.n_dims / 2;
    const sin_at = args.cache.len / 2;
    for (0..half) |k| {
        const first, const second, const cos, const sin = switch (mode) {
            .normal => .{ 2 * k, 2 * k + 1, args.cache[2 * k], args.cache[2 * k + 1] },
            .neox => .{ k, k + half, args.cache[k], args.cache[sin_at + k] },
        };
        const x0: f32 = @floatCast(load_one(T, args.src.at(first)));
        const x1: f32 = @floatCast(load_one(T, args.src.at(second)));
        store_one(T, args.dst.at(first), @mulAdd(f32, x0, cos, -(x1 * sin)));
        store_one(T, args.dst.at(second), @mulAdd(f32, x0, sin, x1 * cos));
    }
}

fn load_one(comptime T: type, address: usize) T {
    return @as(*align(1) const T, @ptrFromInt(address)).*;
}

fn store_one(comptime T: type, address: usize, value: f32) void {
    @as(*align(1) T, @ptrFromInt(address)).* = @floatCast(value);
}

/// Dims past n_dims pass through, bits unchanged (a same-address copy when dst aliases src0).
fn copy_rest(comptime T: type, args: RowArgs) void {
    const Bits = if (T == f32) u32 else u16;
    for (args.n_dims..args.count) |i| {
        const bits = @as(*align(1) const Bits, @ptrFromInt(args.src.at(i))).*;
        @as(*align(1) Bits, @ptrFromInt(args.dst.at(i))).* = bits;
    }
}

/// Exposed for the unit test: the cache of one position.
pub fn cache_for_test(
    comptime mode: Mode,
    p: *const Params,
    freq_factors: ?Strided,
    position: i32,
    cache: []f32,
) void {
    const angles = Angles.of(p, freq_factors);
    fill_cache(mode, &angles, position, cache);
}

pub fn cache_floats_for_test(n_dims: usize) usize {
    return cache_floats(n_dims);
}

test "rope_row equals rope_row_scalar bit for bit, both modes and dtypes, YaRN and factors" {
    // A row of 2 * lanes + 6 rotated dims (a partial last chunk) and 3 copied ones, the cache
    // of position 1234 with YaRN on and frequency factors; the vector rows against the scalar.
    const n_dims = 2 * lanes + 6;
    const count = n_dims + 3;
    var factors: [n_dims / 2]f32 = undefined;
    for (&factors, 0..) |*f, k| f.* = 1.0 + @as(f32, @floatFromInt(k % 5)) * 0.75;
    const p: Params = .{
        .n_dims = n_dims,
        .mode = .normal,
        .freq_base = 10000,
        .freq_scale = 0.25,
        .ext_factor = 1,
        .attn_factor = 1,
        .beta_fast = 32,
        .beta_slow = 1,
        .n_ctx_orig = 4096,
    };
    var cache_store: [2 * (n_dims / 2 + lanes)]f32 = undefined;
    const cache = cache_store[0..cache_floats(n_dims)];
    const ff: Strided = .{ .base = @intFromPtr(&factors), .stride = 4 };
    inline for (.{ f32, f16 }) |T| {
        inline for (.{ Mode.normal, Mode.neox }) |mode| {
            cache_for_test(mode, &p, ff, 1234, cache);
            var src: [count]T = undefined;
            for (&src, 0..) |*x, i| x.* = @floatCast(@as(f32, @floatFromInt(i % 7)) * 0.375 - 1.1);
            var vector: [count]T = @splat(0);
            var scalar: [count]T = @splat(0);
            const row = struct {
                fn of(buffer: []T) Strided {
                    return .{ .base = @intFromPtr(buffer.ptr), .stride = @sizeOf(T) };
                }
            };
            const base: RowArgs = .{ .dst = row.of(&vector), .src = row.of(&src), .count = count, .n_dims = n_dims, .cache = cache };
            rope_row(T, mode, base);
            var other = base;
            other.dst = row.of(&scalar);
            rope_row_scalar(T, mode, other);
            try std.testing.expectEqualSlices(u8, std.mem.asBytes(&scalar), std.mem.asBytes(&vector));
        }
    }
}
