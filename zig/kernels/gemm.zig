//! f32 GEMM in ggml's orientation: C[n][m] = sum_k A[m][k] * B[n][k].
//! A holds M rows of K (f32 or f16 weights), B holds N rows of K f32, C holds N rows of M f32.
//! Every thread of the pool calls `sgemm` with the same arguments; each computes its share.
//!
//! Two paths, chosen from the arguments alone (never from the thread count):
//! - Small N (matrix-vector and a few columns) with k-contiguous A and B: a dot-product kernel
//!   that streams A once, unpacked, vectorized along k, a few rows of A at a time.
//! - Otherwise a packed, cache-blocked GEMM (BLIS loop order). Per (NC, KC) block each thread
//!   packs the B panels it needs into panels [k][NR], and per (MC, KC) block the rows of A it
//!   needs into panels [k][MR] (f16 converted to f32 there), both in its own scratch region, so
//!   threads never wait on each other (no barrier: `Work.sync` is not used). A register-tiled
//!   micro-kernel computes an MR (along m, vectors) x NR (along n, broadcasts) tile of C.
//!   Transposed or strided operands are handled by the packing (in-register transposes when a
//!   row is contiguous along k, vector copies when contiguous along m).
//!
//! Threads split the rows of A (m) when there are enough, else the columns of each B block (n);
//! the redundant packing that costs (B per thread, or A per thread) is small next to the work.
//! With several threads, a single NC block and a packed B (all of K) that fits a thread's
//! budget, the rows are not split statically: threads claim units of a few MR panels from a
//! shared counter (the dynamic schedule), so a thread that a noisy machine descheduled leaves
//! its rows to the others instead of stalling the node. There B (all of K) is packed once into
//! one buffer, each thread packing a share, between the two barriers that reset the counter.
//!
//! Prepacked A: a plan that knows A is a constant weight packs all of it once (`prepack_a`) into
//! panels of MR rows by all of K, [k][MR] each, the exact values `packPanel` makes per block, and
//! computes with `sgemm_prepacked`, which reads the blocks from there instead of packing them:
//! the same micro-kernel calls on the same floats, so the results are bitwise those of `sgemm`.
//!
//! Determinism: threads split output tiles only, never k. Every element of C is summed in the
//! same order (KC blocks in order, k in order inside a block, one fused multiply-add per term)
//! whatever the thread count or split, so results are bitwise identical for any thread count.

const std = @import("std");
const builtin = @import("builtin");
const node = @import("../node.zig");
const quant = @import("../quant.zig");
const common = @import("common.zig");

const assert = std.debug.assert;

pub const GemmArgs = struct {
    m: usize,
    n: usize,
    k: usize,
    a: [*]const u8,
    a_dtype: node.DType, // f32, f16, or bf16 / a block type (packed paths only: see packQuantPanel)
    a_row_stride_bytes: isize,
    a_element_stride_bytes: isize,
    b: [*]const u8, // f32
    b_row_stride_bytes: isize,
    b_element_stride_bytes: isize,
    c: [*]u8, // f32
    c_row_stride_bytes: isize, // between the N rows of C
    c_element_stride_bytes: isize, // between the M elements of a row of C
};

// ---------------------------------------------------------------------------------------------
// Tuning, fixed at compile time from the target's SIMD level.

const is_x86 = builtin.cpu.arch == .x86_64;
const has_avx512 = is_x86 and std.Target.x86.featureSetHas(builtin.cpu.features, .avx512f);
const has_avx2 = is_x86 and std.Target.x86.featureSetHas(builtin.cpu.features, .avx2);

/// f32 lanes of one vector register.
pub const lanes: usize = if (has_avx512) 16 else if (has_avx2) 8 else 4;
const V = @Vector(lanes, f32);
const is_wasm = builtin.cpu.arch.isWasm();
/// Vectors along m in one micro-tile.
pub const mr_vectors: usize = if (is_wasm) wasm_tile.mr_vectors else 2;
/// Micro-tile: MR elements of m (vectors) by NR elements of n (broadcasts).
pub const mr: usize = mr_vectors * lanes;
pub const nr: usize = if (has_avx512) 12 else if (has_avx2) 6 else if (is_wasm) wasm_tile.nr else 4;
/// wasm (SIMD128): V8 on x86-64 gives wasm values 15 xmm registers. With relaxed SIMD a 2 x 6
/// tile: 12 accumulators, 2 vectors of A and 1 broadcast of B, all 15, in the instruction order
/// of wasm_micro_kernel.zig (sgemm n=512 in headless Chromium: 1.45-1.7x the 3 x 4 tile as LLVM
/// scheduled it, which spilled two accumulators; a 3 x 3 tile fits without care but measured
/// 0.85x of 2 x 6). Without relaxed SIMD each multiply-add needs a register for its product:
/// 2 x 5 (1.2x the 3 x 4 tile; 3 x 3 about the same).
const wasm_tile: struct { mr_vectors: usize, nr: usize } = if (common.has_relaxed_madd)
    .{ .mr_vectors = 2, .nr = 6 }
else
    .{ .mr_vectors = 2, .nr = 5 };
const wasm_kernel = if (is_wasm) @import("wasm_micro_kernel.zig").Kernel(mr_vectors, nr) else void;
/// Cache blocks: a KC x NR panel of B stays in L1, an MC x KC block of A in L2, a KC x NC block of
/// B in L3.
pub const kc_max: usize = 256;
/// A multiple of MR.
pub const mc_max: usize = 256 - 256 % mr;
pub const nc_max: usize = 2048 - 2048 % nr;
/// Largest N that takes the dot-product path.
pub const dot_n_max: usize = 64;
/// Rows of A by columns of B (accumulator vectors) per step of the dot-product kernel.
const dot_rows: usize = 4;
const dot_cols: usize = if (has_avx512) 4 else 2;
const dot_prefetch_bytes = 0;
/// How far ahead along a row of A packing prefetches.
const prefetch_bytes = 512;
/// Dynamic schedule: the most MR panels of A per claimed unit (a unit's packed A block, at most
/// unit_panels_max * MR x KC, stays in L2), and at least this many units per thread, so the
/// last units even out the threads' finishing times.
pub const unit_panels_max: usize = 4;
const units_per_thread_min: usize = 2;
/// Dynamic schedule: the largest packed B (all of K by one NC block) one thread keeps. Packed
/// once, it is read back one KC block at a time; past this the static schedule is used.
pub const b_all_bytes_max: usize = 2 << 20;
/// Dynamic schedule: the work buffer starts with the shared unit counter, on its own line.
const counter_bytes: usize = 64;
/// Cache line, for prefetching the next block of A while the current one is computed.
const line_bytes: usize = 64;

comptime {
    std.debug.assert(mc_max % mr == 0);
    std.debug.assert(nc_max % nr == 0);
    std.debug.assert(counter_bytes % 64 == 0); // the thread regions stay 64-byte aligned
    std.debug.assert(@sizeOf(std.atomic.Value(usize)) <= counter_bytes);
}

// ---------------------------------------------------------------------------------------------
// Small helpers.

inline fn offsetPtr(base: anytype, offset: isize) @TypeOf(base) {
    const address: isize = @as(isize, @intCast(@intFromPtr(base))) + offset;
    return @ptrFromInt(@as(usize, @intCast(address)));
}

inline fn loadScalar(comptime T: type, base: [*]const u8, offset: isize) f32 {
    const p: *align(1) const T = @ptrCast(offsetPtr(base, offset));
    return p.*;
}

inline fn loadVec(comptime T: type, comptime n: usize, p: [*]const u8) @Vector(n, f32) {
    const q: *align(1) const [n]T = @ptrCast(p);
    const v: @Vector(n, T) = q.*;
    return if (T == f32) v else common.widen_f16(n, v);
}

inline fn iota(comptime n: usize) @Vector(n, i32) {
    comptime var mask: [n]i32 = undefined;
    inline for (0..n) |i| mask[i] = @intCast(i);
    return mask;
}

const log2_lanes = std.math.log2_int(usize, lanes);

/// Shuffle masks, stage s (h = 1 << s): hsum folds lanes h..2h onto 0..h; a transpose stage swaps
/// the off-diagonal h x h blocks of each pair of rows (i, i + h).
const masks = blk: {
    @setEvalBranchQuota(10000);
    var hsum_masks: [log2_lanes][lanes]i32 = undefined;
    var lo_masks: [log2_lanes][lanes]i32 = undefined;
    var hi_masks: [log2_lanes][lanes]i32 = undefined;
    for (0..log2_lanes) |s| {
        const h = 1 << s;
        for (0..lanes) |j| {
            hsum_masks[s][j] = if (j < h) j + h else j;
            lo_masks[s][j] = if (j & h == 0) j else ~@as(i32, j - h);
            hi_masks[s][j] = if (j & h == 0) j + h else ~@as(i32, j);
        }
    }
    break :blk .{ .hsum = hsum_masks, .lo = lo_masks, .hi = hi_masks };
};

/// Horizontal sum in a fixed tree order.
inline fn hsum(v: V) f32 {
    var w = v;
    inline for (0..log2_lanes) |i| {
        const s = log2_lanes - 1 - i;
        w = w + @shuffle(f32, w, undefined, masks.hsum[s]);
    }
    return w[0];
}

/// In-register transpose of a lanes x lanes block: rows[i][j] becomes rows[j][i].
inline fn transpose(rows: *[lanes]V) void {
    inline for (0..log2_lanes) |si| {
        const s = log2_lanes - 1 - si;
        const h = 1 << s;
        inline for (0..lanes) |i| {
            if (i & h == 0) {
                const x = rows[i];
                const y = rows[i + h];
                rows[i] = @shuffle(f32, x, y, masks.lo[s]);
                rows[i + h] = @shuffle(f32, x, y, masks.hi[s]);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Packing.

/// Packs `valid` (<= R) rows of `kc` elements, starting at `base` (row 0, element 0), into
/// `dst` laid out [kc][R] as f32; rows from `valid` to R are zero.
fn packPanel(
    comptime R: usize,
    comptime T: type,
    base: [*]const u8,
    row_stride: isize,
    elem_stride: isize,
    valid: usize,
    kc: usize,
    dst: [*]f32,
) void {
    const size: isize = @sizeOf(T);
    if (elem_stride == size) {
        // Rows contiguous along k: transpose lanes x lanes blocks in registers.
        var k: usize = 0;
        while (k + lanes <= kc) : (k += lanes) {
            const kb: isize = @intCast(k);
            inline for (0..(R + lanes - 1) / lanes) |gi| {
                const g = gi * lanes;
                const count = @min(lanes, R - g);
                var rows: [lanes]V = undefined;
                inline for (0..lanes) |i| {
                    if (i < count and g + i < valid) {
                        const row: isize = @intCast(g + i);
                        const p = offsetPtr(base, row * row_stride + kb * size);
                        @prefetch(p + prefetch_bytes, .{});
                        rows[i] = loadVec(T, lanes, p);
                    } else rows[i] = @splat(0);
                }
                transpose(&rows);
                inline for (0..lanes) |t| {
                    const out = dst + (k + t) * R + g;
                    if (count == lanes) {
                        const p: *align(4) [lanes]f32 = @ptrCast(out);
                        p.* = rows[t];
                    } else {
                        const part: @Vector(count, f32) = @shuffle(f32, rows[t], undefined, iota(count));
                        const p: *align(4) [count]f32 = @ptrCast(out);
                        p.* = part;
                    }
                }
            }
        }
        while (k < kc) : (k += 1) {
            const kb: isize = @intCast(k);
            for (0..R) |i| {
                dst[k * R + i] = if (i < valid)
                    loadScalar(T, base, @as(isize, @intCast(i)) * row_stride + kb * size)
                else
                    0;
            }
        }
    } else if (row_stride == size and valid == R) {
        // Columns contiguous along the rows (a transposed operand): one vector per k.
        for (0..kc) |k| {
            const v = loadVec(T, R, offsetPtr(base, @as(isize, @intCast(k)) * elem_stride));
            const p: *align(4) [R]f32 = @ptrCast(dst + k * R);
            p.* = v;
        }
    } else {
        for (0..kc) |k| {
            const kb: isize = @intCast(k);
            for (0..R) |i| {
                dst[k * R + i] = if (i < valid)
                    loadScalar(T, base, @as(isize, @intCast(i)) * row_stride + kb * elem_stride)
                else
                    0;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Micro-kernel.

const CTile = struct {
    ptr: [*]u8, // element (m0, n0)
    row_stride: isize, // between n
    elem_stride: isize, // between m
};

/// acc = A panel [kc][mr] x B panel [kc][nr] (first `cols` columns used), from zero, k in order.
inline fn accumulateTile(
    comptime cols: usize,
    kc: usize,
    a: [*]const f32,
    b: [*]const f32,
    acc: *[cols][mr_vectors]V,
) void {
    inline for (0..cols) |j| {
        inline for (0..mr_vectors) |v| acc[j][v] = @splat(0);
    }
    var pa = a;
    var pb = b;
    for (0..kc) |_| {
        var av: [mr_vectors]V = undefined;
        inline for (0..mr_vectors) |v| av[v] = pa[v * lanes ..][0..lanes].*;
        inline for (0..cols) |j| {
            const bv: V = @splat(pb[j]);
            inline for (0..mr_vectors) |v| acc[j][v] = common.fma(V, av[v], bv, acc[j][v]);
        }
        pa += mr;
        pb += nr;
    }
}

/// C tile (mr x cols) (+)= A panel [kc][mr] x B panel [kc][nr] (first `cols` columns used).
fn microKernel(
    comptime cols: usize,
    kc: usize,
    a: [*]const f32,
    b: [*]const f32,
    c: CTile,
    m_valid: usize,
    accumulate: bool,
) void {
    var acc: [cols][mr_vectors]V = undefined;
    if (comptime is_wasm and cols == nr) {
        wasm_kernel.run(kc, a, b, &acc);
    } else accumulateTile(cols, kc, a, b, &acc);
    if (c.elem_stride == @sizeOf(f32) and m_valid == mr) {
        inline for (0..cols) |j| {
            const row: [*]u8 = offsetPtr(c.ptr, @as(isize, @intCast(j)) * c.row_stride);
            inline for (0..mr_vectors) |v| {
                const p: *align(1) [lanes]f32 = @ptrCast(row + v * lanes * 4);
                if (accumulate) {
                    const old: V = p.*;
                    p.* = old + acc[j][v];
                } else p.* = acc[j][v];
            }
        }
    } else {
        inline for (0..cols) |j| {
            const row: [*]u8 = offsetPtr(c.ptr, @as(isize, @intCast(j)) * c.row_stride);
            const values: [mr]f32 = @bitCast(acc[j]);
            for (0..m_valid) |i| {
                const p: *align(1) f32 = @ptrCast(offsetPtr(row, @as(isize, @intCast(i)) * c.elem_stride));
                p.* = if (accumulate) p.* + values[i] else values[i];
            }
        }
    }
}

/// For conv2d.zig's implicit GEMM, which packs its own A panels (the image, unfolded on the fly)
/// and runs the same micro-kernel on them.
pub const pack_panel = packPanel;
pub const micro_kernel = microKernelAny;
pub const Tile = CTile;

fn microKernelAny(cols: usize, kc: usize, a: [*]const f32, b: [*]const f32, c: CTile, m_valid: usize, accumulate: bool) void {
    switch (cols) {
        inline 1...nr => |n| microKernel(n, kc, a, b, c, m_valid, accumulate),
        else => unreachable,
    }
}

// ---------------------------------------------------------------------------------------------
// Work buffer layout.

/// Each thread has its own region: a packed-B block, then a packed-A block. The dynamic schedule
/// puts the shared unit counter first, then one shared packed B (all of K), then each thread's
/// packed-A block.
const Layout = struct {
    kc: usize, // largest KC block
    b_panels: usize, // NR panels in the largest NC block
    b_floats: usize, // floats of one thread's packed-B block
    a_floats: usize, // floats of one thread's packed-A block
    header_bytes: usize, // before the first thread's region: the counter, or nothing
    total_bytes: usize,
};

/// Unlike @min, never narrows the result type to a comptime operand's.
inline fn min(x: usize, y: usize) usize {
    return if (x < y) x else y;
}

fn roundUp(x: usize, to: usize) usize {
    return (x + to - 1) / to * to;
}

/// f16 A multiplies B rounded to f16, as ggml does (it converts src1 to the f16 weights'
/// vec_dot_type before its f16 dot products, which accumulate in f32): the same products, so
/// the results follow ggml's (and llama.cpp's attention) rather than a more exact f32 B.
inline fn roundB(comptime T: type, v: V) V {
    if (T != f16) return v;
    return common.widen_f16(lanes, common.narrow_f16(lanes, v));
}

/// `roundB` over a packed B panel of `count` floats when A is f16.
fn roundBPanel(args: *const GemmArgs, panel: [*]f32, count: usize) void {
    if (args.a_dtype != .f16) return;
    var i: usize = 0;
    while (i + lanes <= count) : (i += lanes) {
        const v: V = panel[i..][0..lanes].*;
        panel[i..][0..lanes].* = roundB(f16, v);
    }
    for (panel[i..count]) |*x| x.* = @floatCast(@as(f16, @floatCast(x.*)));
}

fn useDot(args: *const GemmArgs) bool {
    // bf16 and block-quantized A are dequantized while packed (mul_mat_quant.zig has the
    // matrix-vector kernels for them).
    if (args.a_dtype.dequantizes()) return false;
    const a_size: isize = @intCast(args.a_dtype.size_bytes());
    const strides = args.a_element_stride_bytes == a_size and args.b_element_stride_bytes == @sizeOf(f32);
    // f16 A (attention's K and V) always: ggml's order, vec_dot_f16 or tinyBLAS, is a dot per
    // element (see dotColumns).
    if (args.a_dtype == .f16) return strides;
    // Past a few columns the dot path pays a horizontal sum per element: only for long rows.
    return (args.n <= 4 or (args.n <= dot_n_max and args.k >= 256)) and strides;
}

/// Whether rows of A are split statically or claimed in units (a function of the arguments and
/// the thread count only, so every thread takes the same branch and the same barriers).
pub fn useDynamic(args: *const GemmArgs, thread_count: usize) bool {
    if (thread_count < 2 or args.n > nc_max) return false;
    const m_panels = (args.m + mr - 1) / mr;
    if (m_panels < 4 * thread_count) return false; // few rows: the static split takes columns
    const b_panels = (args.n + nr - 1) / nr;
    return args.k * b_panels * nr * @sizeOf(f32) <= b_all_bytes_max;
}

/// MR panels per unit of the dynamic schedule: as large as allowed while every thread still
/// gets `units_per_thread_min` units.
fn unitPanels(m: usize, thread_count: usize) usize {
    const m_panels = (m + mr - 1) / mr;
    return @max(1, min(unit_panels_max, m_panels / (units_per_thread_min * thread_count)));
}

fn layout(args: *const GemmArgs, thread_count: u32) Layout {
    const kc = min(args.k, kc_max);
    if (useDynamic(args, thread_count)) {
        // One packed B shared by all threads (each packs a share), then each thread's A block.
        const b_panels = (args.n + nr - 1) / nr;
        const b_floats = roundUp(args.k * b_panels * nr, 16);
        const a_floats = roundUp(unitPanels(args.m, thread_count) * mr * kc, 16);
        return .{
            .kc = kc,
            .b_panels = b_panels,
            .b_floats = b_floats,
            .a_floats = a_floats,
            .header_bytes = counter_bytes,
            .total_bytes = counter_bytes + (b_floats + a_floats * thread_count) * @sizeOf(f32),
        };
    }
    const b_panels = (min(args.n, nc_max) + nr - 1) / nr;
    const b_floats = roundUp(kc * b_panels * nr, 16);
    const a_floats = roundUp(min(mc_max, roundUp(args.m, mr)) * kc, 16);
    return .{
        .kc = kc,
        .b_panels = b_panels,
        .b_floats = b_floats,
        .a_floats = a_floats,
        .header_bytes = 0,
        .total_bytes = (b_floats + a_floats) * thread_count * @sizeOf(f32),
    };
}

/// Scratch bytes `sgemm` needs in `Work.scratch` for these arguments and thread count.
pub fn work_size_bytes(args: *const GemmArgs, thread_count: u32) usize {
    if (args.m == 0 or args.n == 0 or args.k == 0 or useDot(args)) return 0;
    return layout(args, @max(thread_count, 1)).total_bytes;
}

// ---------------------------------------------------------------------------------------------
// Entry point.

pub fn sgemm(args: *const GemmArgs, work: *const node.Work) void {
    std.debug.assert(args.a_dtype != .i32);
    if (args.m == 0 or args.n == 0) return;
    if (args.k == 0) return zeroFill(args, work);
    if (useDot(args)) {
        switch (args.a_dtype) {
            .f16 => dotPath(f16, args, work),
            else => dotPath(f32, args, work),
        }
        return;
    }
    packedPaths(args, null, work);
}

/// `sgemm` with A already packed by `prepack_a` (into `a_packed`, `prepacked_size_bytes` long)
/// from the same arguments: no packing of A. Only for arguments that take a packed path.
pub fn sgemm_prepacked(args: *const GemmArgs, a_packed: []const f32, work: *const node.Work) void {
    assert(prepacked_size_bytes(args) > 0);
    assert(a_packed.len * @sizeOf(f32) == prepacked_size_bytes(args));
    packedPaths(args, a_packed.ptr, work);
}

fn packedPaths(args: *const GemmArgs, a_packed: ?[*]const f32, work: *const node.Work) void {
    if (useDynamic(args, work.thread_count)) {
        switch (args.a_dtype) {
            .f16 => dynamicPath(f16, args, a_packed, work),
            else => dynamicPath(f32, args, a_packed, work),
        }
        return;
    }
    switch (args.a_dtype) {
        .f16 => packedPath(f16, args, a_packed, work),
        else => packedPath(f32, args, a_packed, work),
    }
}

// ---------------------------------------------------------------------------------------------
// Prepacked A.

/// Bytes of all of A packed by `prepack_a`: MR-row panels of all of K (the last panel's missing
/// rows zero), f32. 0 when these arguments never read packed A (the dot path, or nothing to do),
/// so that a plan prepacks nothing for them. A function of the arguments only, never of the
/// thread count: a plan may run on fewer threads than it was made for.
pub fn prepacked_size_bytes(args: *const GemmArgs) usize {
    if (args.m == 0 or args.n == 0 or args.k == 0 or useDot(args)) return 0;
    const m_panels = (args.m + mr - 1) / mr;
    return m_panels * args.k * mr * @sizeOf(f32);
}

/// The A block of KC elements from `k_begin` of panel `panel` inside prepacked A: [kc][MR], as
/// `packPanel` lays a block out, since a panel of all of K is its KC blocks one after another.
inline fn prepackedBlock(a_packed: [*]const f32, k: usize, panel: usize, k_begin: usize) [*]const f32 {
    return a_packed + panel * k * mr + k_begin * mr;
}

/// Packs all of A into `dest` (`prepacked_size_bytes(args)` long). Every thread of the pool
/// calls it with the same arguments and packs its share of the panels; no barrier inside, so
/// the caller waits for all threads before any `sgemm_prepacked` reads `dest`.
pub fn prepack_a(args: *const GemmArgs, dest: []f32, work: *const node.Work) void {
    const size_bytes = prepacked_size_bytes(args);
    assert(size_bytes > 0);
    assert(dest.len * @sizeOf(f32) == size_bytes);
    assert(work.thread_index < work.thread_count);
    const m_panels = (args.m + mr - 1) / mr;
    const begin = m_panels * work.thread_index / work.thread_count;
    const end = m_panels * (work.thread_index + 1) / work.thread_count;
    for (begin..end) |panel| {
        switch (args.a_dtype) {
            .f16 => packAPanel(f16, args, panel, 0, args.k, dest.ptr + panel * args.k * mr),
            else => packAPanel(f32, args, panel, 0, args.k, dest.ptr + panel * args.k * mr),
        }
    }
}

/// Packs rows [panel * MR, + MR) of A, elements [k_begin, + kc), into `dst` as [kc][MR].
fn packAPanel(
    comptime T: type,
    args: *const GemmArgs,
    panel: usize,
    k_begin: usize,
    kc: usize,
    dst: [*]f32,
) void {
    const m0 = panel * mr;
    assert(m0 < args.m);
    if (args.a_dtype.dequantizes()) return packQuantPanel(args, m0, k_begin, kc, dst);
    const base = offsetPtr(args.a, @as(isize, @intCast(m0)) * args.a_row_stride_bytes +
        @as(isize, @intCast(k_begin)) * args.a_element_stride_bytes);
    packPanel(mr, T, base, args.a_row_stride_bytes, args.a_element_stride_bytes, min(mr, args.m - m0), kc, dst);
}

/// `packAPanel` for bf16 or block-quantized A (rows of adjacent blocks; `k_begin` and `kc` whole
/// blocks, as KC blocks of a row of whole blocks are): `lanes` rows at a time are dequantized
/// by quant.zig (exactly the values `dequantize` gives) into row buffers, transposed in
/// registers and stored [kc][MR]; rows past M are zero. Packing is the only place A is read, so
/// the quantized weights are dequantized once per block and used by every column of B.
fn packQuantPanel(args: *const GemmArgs, m0: usize, k_begin: usize, kc: usize, dst: [*]f32) void {
    const dtype = args.a_dtype;
    const block = dtype.block_size();
    assert(k_begin % block == 0 and kc % block == 0 and kc <= kc_max);
    assert(args.a_element_stride_bytes == @as(isize, @intCast(dtype.block_bytes())));
    const valid = min(mr, args.m - m0);
    const byte_offset: isize = @intCast(quant.row_bytes(dtype, k_begin));
    const span: usize = @intCast(quant.row_bytes(dtype, kc));
    var rows: [lanes][kc_max]f32 align(64) = undefined;
    inline for (0..mr_vectors) |g| {
        for (0..lanes) |i| {
            const row = g * lanes + i;
            if (row < valid) {
                const src = offsetPtr(args.a, @as(isize, @intCast(m0 + row)) * args.a_row_stride_bytes + byte_offset);
                quant.dequantize_row(dtype, src[0..span], rows[i][0..kc]);
            } else {
                @memset(rows[i][0..kc], 0);
            }
        }
        var k: usize = 0;
        while (k + lanes <= kc) : (k += lanes) {
            var block_rows: [lanes]V = undefined;
            inline for (0..lanes) |i| block_rows[i] = rows[i][k..][0..lanes].*;
            transpose(&block_rows);
            inline for (0..lanes) |t| {
                const p: *align(4) [lanes]f32 = @ptrCast(dst + (k + t) * mr + g * lanes);
                p.* = block_rows[t];
            }
        }
        while (k < kc) : (k += 1) {
            for (0..lanes) |i| dst[k * mr + g * lanes + i] = rows[i][k];
        }
    }
}

/// Where the micro-kernels find one (MC or unit, KC) block of A: panel i at base + i * stride.
const APanels = struct {
    base: [*]const f32,
    stride: usize, // floats between panels

    fn at(self: APanels, i: usize) [*]const f32 {
        return self.base + i * self.stride;
    }
};

/// The block of `ip` panels from row `m_begin` (a multiple of MR), elements [pc, + kc): read
/// from prepacked A when there is one, else packed now into `a_pack`.
fn aBlock(
    comptime T: type,
    args: *const GemmArgs,
    a_packed: ?[*]const f32,
    a_pack: [*]f32,
    m_begin: usize,
    ip: usize,
    pc: usize,
    kc: usize,
) APanels {
    assert(m_begin % mr == 0);
    if (a_packed) |all| {
        return .{ .base = prepackedBlock(all, args.k, m_begin / mr, pc), .stride = args.k * mr };
    }
    for (0..ip) |i| packAPanel(T, args, m_begin / mr + i, pc, kc, a_pack + i * mr * kc);
    return .{ .base = a_pack, .stride = mr * kc };
}

fn zeroFill(args: *const GemmArgs, work: *const node.Work) void {
    const t = work.thread_index;
    const tc = work.thread_count;
    const begin = args.n * t / tc;
    const end = args.n * (t + 1) / tc;
    for (begin..end) |n| {
        for (0..args.m) |m| {
            const offset = @as(isize, @intCast(n)) * args.c_row_stride_bytes + @as(isize, @intCast(m)) * args.c_element_stride_bytes;
            const p: *align(1) f32 = @ptrCast(offsetPtr(args.c, offset));
            p.* = 0;
        }
    }
}

fn packedPath(comptime T: type, args: *const GemmArgs, a_packed: ?[*]const f32, work: *const node.Work) void {
    const M = args.m;
    const N = args.n;
    const K = args.k;
    const t: usize = work.thread_index;
    const tc: usize = work.thread_count;
    const lay = layout(args, work.thread_count);
    std.debug.assert(work.scratch_size_bytes >= lay.total_bytes);
    const scratch: [*]f32 = @ptrCast(@alignCast(work.scratch));
    const b_pack = scratch + (lay.b_floats + lay.a_floats) * t;
    const a_pack = b_pack + lay.b_floats;

    const m_panels = (M + mr - 1) / mr;
    const n_panels_total = (N + nr - 1) / nr;
    // Split rows of A (m) when there are enough of them, else the columns (n) of each B block.
    const split_m = tc == 1 or m_panels >= 4 * tc or n_panels_total < m_panels;
    const my_m_begin = if (split_m) (m_panels * t / tc) * mr else 0;
    const my_m_end = if (split_m) min(M, (m_panels * (t + 1) / tc) * mr) else M;

    // NC blocks of equal size (a multiple of NR, at most nc_max): no thin last block.
    const nc_blocks = (N + nc_max - 1) / nc_max;
    const nc_step = roundUp((N + nc_blocks - 1) / nc_blocks, nr);
    var jc: usize = 0;
    while (jc < N) : (jc += nc_step) {
        const nc = min(nc_step, N - jc);
        const np = (nc + nr - 1) / nr;
        var pc: usize = 0;
        while (pc < K) : (pc += kc_max) {
            const kc = min(kc_max, K - pc);
            // Each thread packs the B panels it uses into its own buffer: no barrier, so a thread
            // that is descheduled never stalls the others (B is small next to the work on it).
            const jp_begin = if (split_m) 0 else np * t / tc;
            const jp_end = if (split_m) np else np * (t + 1) / tc;
            if (jp_begin == jp_end or my_m_begin >= my_m_end) continue;
            for (jp_begin..jp_end) |p| {
                const n0 = jc + p * nr;
                const base = offsetPtr(args.b, @as(isize, @intCast(n0)) * args.b_row_stride_bytes +
                    @as(isize, @intCast(pc)) * args.b_element_stride_bytes);
                packPanel(nr, f32, base, args.b_row_stride_bytes, args.b_element_stride_bytes, min(nr, N - n0), kc, b_pack + p * nr * kc);
                roundBPanel(args, b_pack + p * nr * kc, nr * kc);
            }
            const accumulate = pc > 0;
            var ic = my_m_begin;
            while (ic < my_m_end) : (ic += mc_max) {
                const mc = min(mc_max, my_m_end - ic);
                const ip = (mc + mr - 1) / mr;
                const a_block = aBlock(T, args, a_packed, a_pack, ic, ip, pc, kc);
                for (jp_begin..jp_end) |jp| {
                    const n0 = jc + jp * nr;
                    const cols = min(nr, N - n0);
                    const b_panel = b_pack + jp * nr * kc;
                    for (0..ip) |i| {
                        const m0 = ic + i * mr;
                        const tile: CTile = .{
                            .ptr = offsetPtr(args.c, @as(isize, @intCast(n0)) * args.c_row_stride_bytes +
                                @as(isize, @intCast(m0)) * args.c_element_stride_bytes),
                            .row_stride = args.c_row_stride_bytes,
                            .elem_stride = args.c_element_stride_bytes,
                        };
                        microKernelAny(cols, kc, a_block.at(i), b_panel, tile, min(mr, M - m0), accumulate);
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Dynamic schedule: units of rows claimed from a shared counter.

/// Rows [m_begin, m_end) of A, elements [k_begin, k_begin + k_count): a block to pack next.
const ABlock = struct {
    m_begin: usize,
    m_end: usize,
    k_begin: usize,
    k_count: usize,
};

/// Prefetches the next block of A into L2 a few lines per micro-kernel call, so that its
/// packing finds it there instead of waiting on memory (weights are usually too large for L3
/// and are read once per product). Only for rows contiguous along k; a hint, never a read.
const Prefetcher = struct {
    base: [*]const u8, // element (m_begin, k_begin)
    row_stride: isize,
    rows: usize,
    lines_per_row: usize,
    lines_per_step: usize,
    row: usize = 0,
    line: usize = 0,

    fn init(comptime T: type, args: *const GemmArgs, block: ?ABlock, steps: usize) Prefetcher {
        const none: Prefetcher = .{ .base = args.a, .row_stride = 0, .rows = 0, .lines_per_row = 0, .lines_per_step = 0 };
        const b = block orelse return none;
        if (args.a_element_stride_bytes != @sizeOf(T) or steps == 0) return none;
        std.debug.assert(b.m_begin < b.m_end);
        const offset = @as(isize, @intCast(b.m_begin)) * args.a_row_stride_bytes +
            @as(isize, @intCast(b.k_begin * @sizeOf(T)));
        // One more line than the span covers, for a row that does not start on a line.
        const lines_per_row = (b.k_count * @sizeOf(T) + line_bytes - 1) / line_bytes + 1;
        const rows = b.m_end - b.m_begin;
        return .{
            .base = offsetPtr(args.a, offset),
            .row_stride = args.a_row_stride_bytes,
            .rows = rows,
            .lines_per_row = lines_per_row,
            .lines_per_step = (rows * lines_per_row + steps - 1) / steps,
        };
    }

    /// The same for prepacked A: each panel's block is one contiguous run of kc * MR floats.
    fn initPacked(a_packed: [*]const f32, k: usize, block: ?ABlock, steps: usize) Prefetcher {
        const none: Prefetcher = .{
            .base = @ptrCast(a_packed),
            .row_stride = 0,
            .rows = 0,
            .lines_per_row = 0,
            .lines_per_step = 0,
        };
        const b = block orelse return none;
        if (steps == 0) return none;
        assert(b.m_begin < b.m_end);
        assert(b.m_begin % mr == 0);
        const panels = (b.m_end - b.m_begin + mr - 1) / mr;
        const first = prepackedBlock(a_packed, k, b.m_begin / mr, b.k_begin);
        const lines_per_row = (b.k_count * mr * @sizeOf(f32) + line_bytes - 1) / line_bytes;
        return .{
            .base = @ptrCast(first),
            .row_stride = @intCast(k * mr * @sizeOf(f32)),
            .rows = panels,
            .lines_per_row = lines_per_row,
            .lines_per_step = (panels * lines_per_row + steps - 1) / steps,
        };
    }

    inline fn step(self: *Prefetcher) void {
        var left = self.lines_per_step;
        while (left > 0 and self.row < self.rows) : (left -= 1) {
            const row_ptr = offsetPtr(self.base, @as(isize, @intCast(self.row)) * self.row_stride);
            @prefetch(row_ptr + self.line * line_bytes, .{ .locality = 2 });
            self.line += 1;
            if (self.line == self.lines_per_row) {
                self.line = 0;
                self.row += 1;
            }
        }
    }
};

fn dynamicPath(comptime T: type, args: *const GemmArgs, a_packed: ?[*]const f32, work: *const node.Work) void {
    const M = args.m;
    const N = args.n;
    const K = args.k;
    const t: usize = work.thread_index;
    const tc: usize = work.thread_count;
    std.debug.assert(N <= nc_max);
    const lay = layout(args, work.thread_count);
    std.debug.assert(lay.header_bytes == counter_bytes);
    std.debug.assert(work.scratch_size_bytes >= lay.total_bytes);
    const counter: *std.atomic.Value(usize) = @ptrCast(work.scratch);
    const region: [*]f32 = @ptrCast(@alignCast(work.scratch + counter_bytes));
    const b_pack = region;
    const a_pack = region + lay.b_floats + lay.a_floats * t;
    const np = lay.b_panels;
    const unit_rows = unitPanels(M, tc) * mr;
    const units = (M + unit_rows - 1) / unit_rows;

    // The reset must not overtake a claim of the previous call on this counter, nor a claim
    // of this call the reset: a barrier on each side of it. The same barriers fence the shared
    // packed B: the first keeps a thread from packing over panels the previous call still
    // reads, the second keeps every thread from reading panels not packed yet.
    work.sync();
    if (t == 0) counter.store(0, .monotonic);

    // All of B packed once (it is small: at most b_all_bytes_max), KC blocks in order, each
    // block [panel][kc][nr]; the threads pack consecutive shares of the (block, panel) list.
    const k_blocks = (K + kc_max - 1) / kc_max;
    const items = k_blocks * np;
    for (items * t / tc..items * (t + 1) / tc) |item| {
        const pc = (item / np) * kc_max;
        const p = item % np;
        const kc = min(kc_max, K - pc);
        const n0 = p * nr;
        const base = offsetPtr(args.b, @as(isize, @intCast(n0)) * args.b_row_stride_bytes +
            @as(isize, @intCast(pc)) * args.b_element_stride_bytes);
        packPanel(nr, f32, base, args.b_row_stride_bytes, args.b_element_stride_bytes, min(nr, N - n0), kc, b_pack + pc * np * nr + p * nr * kc);
        roundBPanel(args, b_pack + pc * np * nr + p * nr * kc, nr * kc);
    }
    work.sync();
    var pc: usize = 0;

    var unit = counter.fetchAdd(1, .monotonic);
    while (unit < units) {
        const m_begin = unit * unit_rows;
        const m_end = min(M, m_begin + unit_rows);
        const ip = (m_end - m_begin + mr - 1) / mr;
        var next = units;
        pc = 0;
        while (pc < K) : (pc += kc_max) {
            const kc = min(kc_max, K - pc);
            const last = pc + kc == K;
            // Claim the next unit one KC block early, to prefetch its first block.
            if (last) next = counter.fetchAdd(1, .monotonic);
            const ahead: ?ABlock = if (!last)
                .{ .m_begin = m_begin, .m_end = m_end, .k_begin = pc + kc, .k_count = min(kc_max, K - pc - kc) }
            else if (next < units)
                .{ .m_begin = next * unit_rows, .m_end = min(M, (next + 1) * unit_rows), .k_begin = 0, .k_count = min(kc_max, K) }
            else
                null;
            var prefetcher = if (a_packed) |all|
                Prefetcher.initPacked(all, K, ahead, np * ip)
            else
                Prefetcher.init(T, args, ahead, np * ip);
            const a_block = aBlock(T, args, a_packed, a_pack, m_begin, ip, pc, kc);
            const b_block = b_pack + pc * np * nr;
            for (0..np) |jp| {
                const n0 = jp * nr;
                const cols = min(nr, N - n0);
                for (0..ip) |i| {
                    prefetcher.step();
                    const m0 = m_begin + i * mr;
                    const tile: CTile = .{
                        .ptr = offsetPtr(args.c, @as(isize, @intCast(n0)) * args.c_row_stride_bytes +
                            @as(isize, @intCast(m0)) * args.c_element_stride_bytes),
                        .row_stride = args.c_row_stride_bytes,
                        .elem_stride = args.c_element_stride_bytes,
                    };
                    microKernelAny(cols, kc, a_block.at(i), b_block + jp * nr * kc, tile, min(mr, M - m0), pc > 0);
                }
            }
        }
        unit = next;
    }
}

// ---------------------------------------------------------------------------------------------
// Dot-product path for small N: streams A once without packing.

fn dotPath(comptime T: type, args: *const GemmArgs, work: *const node.Work) void {
    // Each element of C is one accumulator vector over k, then a fixed-order horizontal sum, so
    // the grouping of rows and columns below (and the thread split) never changes a result.
    const t: usize = work.thread_index;
    const tc: usize = work.thread_count;
    const groups = args.m / dot_rows;
    const g_begin = groups * t / tc;
    const g_end = groups * (t + 1) / tc;
    for (g_begin..g_end) |g| dotColumns(T, dot_rows, args, g * dot_rows);
    if (t == tc - 1) {
        for (groups * dot_rows..args.m) |m| dotColumns(T, 1, args, m);
    }
}

/// Rows m0..m0+R of C against every column, `dot_cols` columns at a time.
fn dotColumns(comptime T: type, comptime R: usize, args: *const GemmArgs, m0: usize) void {
    if (T == f16 and !tinyBlasTakes(args)) {
        // ggml_vec_dot_f16's order, a column at a time, rows in groups small enough that their
        // 4 accumulators each stay in registers.
        const G = comptime min(R, f16_exact_rows);
        comptime var r0: usize = 0;
        inline while (r0 < R) : (r0 += G) {
            const g = comptime min(G, R - r0);
            for (0..args.n) |j| dotRowsF16(g, args, m0 + r0, j);
        }
        return;
    }
    var n0: usize = 0;
    while (n0 < args.n) : (n0 += dot_cols) {
        switch (min(dot_cols, args.n - n0)) {
            inline 1...dot_cols => |cols| dotRows(T, R, cols, args, m0, n0),
            else => unreachable,
        }
    }
}

fn dotRows(comptime T: type, comptime R: usize, comptime N: usize, args: *const GemmArgs, m0: usize, n0: usize) void {
    const K = args.k;
    var a_rows: [R][*]const u8 = undefined;
    inline for (0..R) |r| a_rows[r] = offsetPtr(args.a, @as(isize, @intCast(m0 + r)) * args.a_row_stride_bytes);
    var b_rows: [N][*]const u8 = undefined;
    inline for (0..N) |j| b_rows[j] = offsetPtr(args.b, @as(isize, @intCast(n0 + j)) * args.b_row_stride_bytes);
    var acc: [R][N]V = undefined;
    inline for (0..R) |r| {
        inline for (0..N) |j| acc[r][j] = @splat(0);
    }
    var k: usize = 0;
    while (k + lanes <= K) : (k += lanes) {
        var bv: [N]V = undefined;
        inline for (0..N) |j| bv[j] = roundB(T, loadVec(f32, lanes, b_rows[j] + k * 4));
        inline for (0..R) |r| {
            if (dot_prefetch_bytes > 0) @prefetch(a_rows[r] + k * @sizeOf(T) + dot_prefetch_bytes, .{});
            const av = loadVec(T, lanes, a_rows[r] + k * @sizeOf(T));
            inline for (0..N) |j| acc[r][j] = common.fma(V, av, bv[j], acc[r][j]);
        }
    }
    if (k < K) {
        const rest = K - k;
        var bv: [N]V = undefined;
        inline for (0..N) |j| {
            var buf: [lanes]f32 = @splat(0);
            const src: [*]align(1) const f32 = @ptrCast(b_rows[j] + k * 4);
            for (0..rest) |i| buf[i] = src[i];
            bv[j] = roundB(T, buf);
        }
        inline for (0..R) |r| {
            var buf: [lanes]T = @splat(0);
            const src: [*]align(1) const T = @ptrCast(a_rows[r] + k * @sizeOf(T));
            for (0..rest) |i| buf[i] = src[i];
            const av: V = if (T == f32) buf else common.widen_f16(lanes, buf);
            inline for (0..N) |j| acc[r][j] = common.fma(V, av, bv[j], acc[r][j]);
        }
    }
    inline for (0..R) |r| {
        inline for (0..N) |j| {
            const offset = @as(isize, @intCast(n0 + j)) * args.c_row_stride_bytes + @as(isize, @intCast(m0 + r)) * args.c_element_stride_bytes;
            const p: *align(1) f32 = @ptrCast(offsetPtr(args.c, offset));
            p.* = if (T == f16) tinyHsum(acc[r][j]) else hsum(acc[r][j]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// f16 A: ggml's CPU mul_mat bit for bit. ggml converts src1 to f16, then offers the product to
// llamafile_sgemm, whose tinyBLAS<KN> (KN = 16 lanes in the AVX-512 build, 8 in the AVX2 one)
// takes it when n >= 2, k % KN == 0 and m % 4 == 0: per element one accumulator,
// acc = fma(a, b, acc) over k in steps of KN, then tinyBLAS's hsum (dotRows with `tinyHsum`).
// Otherwise (one column: llama.cpp's decode attention products kq = K·q and kqv = V·kq, per
// head) it calls ggml_vec_dot_f16 per element (`dotRowsF16`). Graft's llama graph multiplies
// each head alone as llama.cpp does (src/llm/llama_graph.ts), so its attention takes the same
// path at every token count.

/// Whether ggml's mul_mat runs this f16 product through llamafile_sgemm's tinyBLAS.
fn tinyBlasTakes(args: *const GemmArgs) bool {
    return args.n >= 2 and args.k % lanes == 0 and args.m % 4 == 0;
}

/// tinyBLAS's hsum (llamafile/sgemm.cpp): AVX-512 _mm512_reduce_add_ps as GCC expands it (high
/// 256 bits + low, high 128 + low, lanes 2-3 + 0-1, lane 1 + lane 0); AVX2 the high 128 + low,
/// then movehl and movehdup: (t0 + t2) + (t1 + t3).
inline fn tinyHsum(x: V) f32 {
    if (lanes == 16) return reduce512(x);
    if (lanes == 8) {
        const lo4: @Vector(4, f32) = @shuffle(f32, x, undefined, [4]i32{ 0, 1, 2, 3 });
        const hi4: @Vector(4, f32) = @shuffle(f32, x, undefined, [4]i32{ 4, 5, 6, 7 });
        const t = hi4 + lo4;
        return (t[0] + t[2]) + (t[1] + t[3]);
    }
    return hsum(x);
}

/// _mm512_reduce_add_ps as GCC expands it (the pinned build's disassembly).
inline fn reduce512(x: @Vector(16, f32)) f32 {
    const lo8: @Vector(8, f32) = @shuffle(f32, x, undefined, [8]i32{ 0, 1, 2, 3, 4, 5, 6, 7 });
    const hi8: @Vector(8, f32) = @shuffle(f32, x, undefined, [8]i32{ 8, 9, 10, 11, 12, 13, 14, 15 });
    const h8 = hi8 + lo8;
    const lo4: @Vector(4, f32) = @shuffle(f32, h8, undefined, [4]i32{ 0, 1, 2, 3 });
    const hi4: @Vector(4, f32) = @shuffle(f32, h8, undefined, [4]i32{ 4, 5, 6, 7 });
    const u = hi4 + lo4;
    return (u[2] + u[0]) + (u[3] + u[1]);
}
/// Rows per `dotRowsF16` call: 4 accumulators each, 32 vector registers with AVX-512, 16 below.
const f16_exact_rows: usize = if (has_avx512) 4 else 2;
/// GGML_F16_STEP: elements per step of ggml's main loop, 4 vectors (GGML_F16_ARR) of
/// GGML_F16_EPR lanes (16 in the AVX-512 build, 8 in the AVX2 one).
const f16_step: usize = 4 * lanes;

/// ggml's GGML_F16_VEC_REDUCE of its 4 accumulators: x0 + x2 and x1 + x3, their sum, then the
/// lanes. AVX-512: _mm512_reduce_add_ps as GCC expands it (the pinned build's disassembly: high
/// 256 bits + low, high 128 + low, then lanes 2-3 + 0-1 (vpermilps 0x4e), lane 1 + lane 0).
/// AVX2: GGML_F32x8_REDUCE: low 128 + high 128, then _mm_hadd_ps twice:
/// (t0 + t1) + (t2 + t3).
inline fn f16Reduce(acc: *const [4]V) f32 {
    const x = (acc[0] + acc[2]) + (acc[1] + acc[3]);
    if (lanes == 16) {
        return reduce512(x);
    } else if (lanes == 8) {
        const lo4: @Vector(4, f32) = @shuffle(f32, x, undefined, [4]i32{ 0, 1, 2, 3 });
        const hi4: @Vector(4, f32) = @shuffle(f32, x, undefined, [4]i32{ 4, 5, 6, 7 });
        const t = lo4 + hi4;
        return (t[0] + t[1]) + (t[2] + t[3]);
    } else {
        return (x[0] + x[1]) + (x[2] + x[3]);
    }
}

/// C[j][m0 + r] for r < R: ggml_vec_dot_f16 of row m0 + r of A with column j of B rounded to f16
/// (as ggml converts src1 to f16). Per row: 4 f32 accumulators over the whole steps
/// (acc[i] = fma(a, b, acc[i]) for the i-th vector of each step, steps in order), reduced as
/// `f16Reduce`, widened to f64; the leftover elements' f32 products added one by one in f64;
/// the f64 sum rounded to f32.
fn dotRowsF16(comptime R: usize, args: *const GemmArgs, m0: usize, j: usize) void {
    const K = args.k;
    const np = K - K % f16_step;
    var a_rows: [R][*]const u8 = undefined;
    inline for (0..R) |r| a_rows[r] = offsetPtr(args.a, @as(isize, @intCast(m0 + r)) * args.a_row_stride_bytes);
    const b_row = offsetPtr(args.b, @as(isize, @intCast(j)) * args.b_row_stride_bytes);
    var acc: [R][4]V = @splat(@splat(@splat(0)));
    var k: usize = 0;
    while (k < np) : (k += f16_step) {
        inline for (0..4) |i| {
            const bv = roundB(f16, loadVec(f32, lanes, b_row + (k + i * lanes) * 4));
            inline for (0..R) |r| {
                const av = loadVec(f16, lanes, a_rows[r] + (k + i * lanes) * 2);
                acc[r][i] = common.fma(V, av, bv, acc[r][i]);
            }
        }
    }
    const b_rest: [*]align(1) const f32 = @ptrCast(b_row);
    inline for (0..R) |r| {
        var sum: f64 = f16Reduce(&acc[r]);
        const a_rest: [*]align(1) const f16 = @ptrCast(a_rows[r]);
        for (np..K) |i| {
            const bf: f32 = @as(f16, @floatCast(b_rest[i]));
            const af: f32 = a_rest[i];
            sum += @as(f64, af * bf);
        }
        const offset = @as(isize, @intCast(j)) * args.c_row_stride_bytes + @as(isize, @intCast(m0 + r)) * args.c_element_stride_bytes;
        const p: *align(1) f32 = @ptrCast(offsetPtr(args.c, offset));
        p.* = @floatCast(sum);
    }
}

test {
    _ = @import("gemm_test.zig");
}
