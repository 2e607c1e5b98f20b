//! Helpers shared by every kernel family: the SIMD width of the CPU this object is compiled for,
//! tensor and row addressing in unsigned byte arithmetic, the split of rows across threads, and
//! chunked loads and stores that let one vector code path serve contiguous and strided rows.
//!
//! Kernels only run on nodes that `validate.zig` accepted, so shapes are >= 1 and strides are
//! >= 0; the helpers convert them to `usize` once and assert the rest.

const std = @import("std");
const builtin = @import("builtin");
const node = @import("../node.zig");

pub const assert = std.debug.assert;
pub const Node = node.Node;
pub const Work = node.Work;
pub const Status = node.Status;
pub const DType = node.DType;
pub const TensorDesc = node.TensorDesc;
pub const dims_max = node.dims_max;

/// f32 lanes of one register: 16 on AVX-512, 8 on AVX2. Each variant object is compiled for its
/// own CPU model, so reading the target features here is the same as reading the variant name,
/// and it also works in the unit tests, which have no `build_options`.
pub const lanes: comptime_int = blk: {
    if (builtin.cpu.arch.isX86()) {
        if (builtin.cpu.has(.x86, .avx512f)) break :blk 16;
        if (builtin.cpu.has(.x86, .avx2)) break :blk 8;
    }
    break :blk 4;
};

pub const F32x = @Vector(lanes, f32);
pub const F64x = @Vector(lanes, f64);
pub const F16x = @Vector(lanes, f16);
const lane_index: @Vector(lanes, u32) = std.simd.iota(u32, lanes);

comptime {
    assert(lanes == 4 or lanes == 8 or lanes == 16);
    assert(@sizeOf(F32x) == lanes * 4);
}

/// One row (or any run of equally spaced elements): element i lives at `base + i * stride`.
pub const Strided = struct {
    base: usize,
    stride: usize, // bytes between consecutive elements

    pub fn at(self: Strided, index: usize) usize {
        return self.base + index * self.stride;
    }
};

/// A validated tensor descriptor with its shape and strides as `usize`.
pub const Tensor = struct {
    base: usize,
    ne: [dims_max]usize,
    nb: [dims_max]usize,
    dtype: DType,

    pub fn from(desc: *const TensorDesc) Tensor {
        assert(desc.dtype <= @intFromEnum(DType.last));
        var tensor: Tensor = .{
            .base = @intCast(desc.data),
            .ne = undefined,
            .nb = undefined,
            .dtype = @enumFromInt(desc.dtype),
        };
        for (0..dims_max) |d| {
            assert(desc.ne[d] >= 1);
            assert(desc.nb[d] >= 0);
            tensor.ne[d] = @intCast(desc.ne[d]);
            tensor.nb[d] = @intCast(desc.nb[d]);
        }
        return tensor;
    }

    pub fn size_bytes(self: Tensor) usize {
        return self.dtype.size_bytes();
    }

    /// Rows are every (i1, i2, i3); kernels split and walk them in this flattened order.
    pub fn rows(self: Tensor) usize {
        return self.ne[1] * self.ne[2] * self.ne[3];
    }

    pub fn element_count(self: Tensor) usize {
        return self.ne[0] * self.rows();
    }

    pub fn row_contiguous(self: Tensor) bool {
        return self.nb[0] == self.size_bytes();
    }

    pub fn is_contiguous(self: Tensor) bool {
        return self.nb[0] == self.size_bytes() and self.nb[1] == self.nb[0] * self.ne[0] and
            self.nb[2] == self.nb[1] * self.ne[1] and self.nb[3] == self.nb[2] * self.ne[2];
    }

    pub fn row_index(self: Tensor, row_flat: usize) RowIndex {
        assert(row_flat < self.rows());
        return .{
            .i1 = row_flat % self.ne[1],
            .i2 = (row_flat / self.ne[1]) % self.ne[2],
            .i3 = row_flat / (self.ne[1] * self.ne[2]),
        };
    }

    pub fn row_at(self: Tensor, index: RowIndex) Strided {
        assert(index.i1 < self.ne[1]);
        assert(index.i2 < self.ne[2]);
        assert(index.i3 < self.ne[3]);
        const offset = index.i1 * self.nb[1] + index.i2 * self.nb[2] + index.i3 * self.nb[3];
        return .{ .base = self.base + offset, .stride = self.nb[0] };
    }

    /// Flattened row `row` (see `rows`).
    pub fn row(self: Tensor, row_flat: usize) Strided {
        return self.row_at(self.row_index(row_flat));
    }

    /// The row a broadcast source uses for row `index` of a larger tensor: each index modulo
    /// this tensor's extent.
    pub fn row_broadcast(self: Tensor, index: RowIndex) Strided {
        return self.row_at(.{
            .i1 = index.i1 % self.ne[1],
            .i2 = index.i2 % self.ne[2],
            .i3 = index.i3 % self.ne[3],
        });
    }
};

pub const RowIndex = struct { i1: usize, i2: usize, i3: usize };

/// A half-open range of items (rows, chunks, bytes) owned by one thread.
pub const Range = struct {
    begin: usize,
    end: usize,
};

/// Thread t gets items [t * ceil(count / n), (t + 1) * ceil(count / n)), clipped to count, so
/// each item is processed by exactly one thread and in the same way for any thread count.
pub fn thread_range(count: usize, work: *const Work) Range {
    assert(work.thread_count >= 1);
    assert(work.thread_index < work.thread_count);
    const per_thread = (count + work.thread_count - 1) / work.thread_count;
    const begin = @min(count, per_thread * work.thread_index);
    return .{ .begin = begin, .end = @min(count, begin + per_thread) };
}

pub fn load_f32(address: usize) f32 {
    return @as(*align(1) const f32, @ptrFromInt(address)).*;
}

pub fn store_f32(address: usize, value: f32) void {
    @as(*align(1) f32, @ptrFromInt(address)).* = value;
}

pub fn load_f16(address: usize) f16 {
    return @as(*align(1) const f16, @ptrFromInt(address)).*;
}

pub fn store_f16(address: usize, value: f16) void {
    @as(*align(1) f16, @ptrFromInt(address)).* = value;
}

pub fn load_u16(address: usize) u16 {
    return @as(*align(1) const u16, @ptrFromInt(address)).*;
}

pub fn store_u16(address: usize, value: u16) void {
    @as(*align(1) u16, @ptrFromInt(address)).* = value;
}

pub fn load_u32(address: usize) u32 {
    return @as(*align(1) const u32, @ptrFromInt(address)).*;
}

pub fn store_u32(address: usize, value: u32) void {
    @as(*align(1) u32, @ptrFromInt(address)).* = value;
}

pub fn store_u64(address: usize, value: u64) void {
    @as(*align(1) u64, @ptrFromInt(address)).* = value;
}

/// Lanes [0, count) are valid; the rest are padding of a row's last chunk.
pub fn lane_mask(count: usize) @Vector(lanes, bool) {
    assert(count >= 1);
    assert(count <= lanes);
    return lane_index < @as(@Vector(lanes, u32), @splat(@intCast(count)));
}

/// Loads `count` f32 elements starting at element `index`: one vector load on a contiguous row
/// with a full chunk, a gather otherwise. Padding lanes hold `fill`.
pub fn load_chunk(row: Strided, index: usize, count: usize, fill: f32) F32x {
    assert(count >= 1);
    assert(count <= lanes);
    if (count == lanes and row.stride == 4) {
        return @as(*align(1) const [lanes]f32, @ptrFromInt(row.at(index))).*;
    }
    var chunk: [lanes]f32 = @splat(fill);
    for (0..count) |lane| chunk[lane] = load_f32(row.at(index + lane));
    return chunk;
}

/// Stores lanes [0, count) of `value` at elements [index, index + count) of `row`.
pub fn store_chunk(row: Strided, index: usize, count: usize, value: F32x) void {
    assert(count >= 1);
    assert(count <= lanes);
    if (count == lanes and row.stride == 4) {
        @as(*align(1) [lanes]f32, @ptrFromInt(row.at(index))).* = value;
        return;
    }
    const chunk: [lanes]f32 = value;
    for (0..count) |lane| store_f32(row.at(index + lane), chunk[lane]);
}

/// Like `load_chunk` for f16 elements, widened to f32 (exact).
pub fn load_chunk_f16(row: Strided, index: usize, count: usize) F32x {
    assert(count >= 1);
    assert(count <= lanes);
    if (count == lanes and row.stride == 2) {
        const halves: F16x = @as(*align(1) const [lanes]f16, @ptrFromInt(row.at(index))).*;
        return widen_f16(lanes, halves);
    }
    var chunk: [lanes]f16 = @splat(0);
    for (0..count) |lane| chunk[lane] = load_f16(row.at(index + lane));
    const halves: F16x = chunk;
    return widen_f16(lanes, halves);
}

/// LLVM 20 cannot lower vector f32 <-> f16 conversions for wasm32 (it fails the module with
/// "Invalid cast"); there each lane converts alone, with the same results (widening is exact,
/// narrowing rounds to nearest even).
const vector_f16_conversions = !builtin.cpu.arch.isWasm();

/// `halves` widened to f32 (exact).
pub inline fn widen_f16(comptime n: usize, halves: @Vector(n, f16)) @Vector(n, f32) {
    if (comptime vector_f16_conversions) return @floatCast(halves);
    const narrow: [n]f16 = halves;
    var wide: [n]f32 = undefined;
    inline for (0..n) |lane| wide[lane] = @floatCast(narrow[lane]);
    return wide;
}

/// `value` rounded to f16 lane by lane (nearest even, overflow to infinity).
pub inline fn narrow_f16(comptime n: usize, value: @Vector(n, f32)) @Vector(n, f16) {
    if (comptime vector_f16_conversions) return @floatCast(value);
    const wide: [n]f32 = value;
    var halves: [n]f16 = undefined;
    inline for (0..n) |lane| halves[lane] = @floatCast(wide[lane]);
    return halves;
}

/// Narrows lanes [0, count) to f16 (round to nearest even, overflow to infinity) and stores them.
pub fn store_chunk_f16(row: Strided, index: usize, count: usize, value: F32x) void {
    assert(count >= 1);
    assert(count <= lanes);
    const halves: F16x = narrow_f16(lanes, value);
    if (count == lanes and row.stride == 2) {
        @as(*align(1) [lanes]f16, @ptrFromInt(row.at(index))).* = halves;
        return;
    }
    const chunk: [lanes]f16 = halves;
    for (0..count) |lane| store_f16(row.at(index + lane), chunk[lane]);
}

/// Whether this object's CPU has fused multiply-add; without it `@mulAdd` is a libcall.
const has_fma = (builtin.cpu.arch.isX86() and builtin.cpu.has(.x86, .fma)) or
    builtin.cpu.arch.isAARCH64();

/// The wasm build with relaxed SIMD (graft-relaxed.wasm): f32x4.relaxed_madd, which the engine
/// runs as one fused multiply-add where its CPU has FMA (V8 on x86-64 with FMA3, ARM64), else as
/// a multiply and an add. LLVM never forms it from `@mulAdd` or a contracted `a * b + c` (it
/// keeps wasm's exact semantics), so the intrinsic is called by name.
pub const has_relaxed_madd = builtin.cpu.arch.isWasm() and
    builtin.cpu.has(.wasm, .relaxed_simd);

extern fn @"llvm.wasm.relaxed.madd.v4f32"(a: @Vector(4, f32), b: @Vector(4, f32), c: @Vector(4, f32)) @Vector(4, f32);

/// a * b + c for a float or vector type T: fused (one rounding) where the CPU has FMA (every
/// native kernel build; relaxed_madd in graft-relaxed.wasm), else a multiply and an add. Never
/// `@mulAdd` without FMA: that is a correctly rounded software fma per lane, which made the wasm
/// sgemm 10 times slower.
pub inline fn fma(comptime T: type, a: T, b: T, c: T) T {
    if (comptime has_fma) return @mulAdd(T, a, b, c);
    if (comptime has_relaxed_madd and T == @Vector(4, f32)) {
        return @"llvm.wasm.relaxed.madd.v4f32"(a, b, c);
    }
    return a * b + c;
}

/// a * b + c, fused (one rounding) where the CPU has FMA, else a multiply and an add.
pub fn mul_add(a: F32x, b: F32x, c: F32x) F32x {
    return fma(F32x, a, b, c);
}

/// e^x for every lane, about 1 ulp: Cephes' expf. x = n ln2 + r with |r| <= ln2 / 2, e^r from a
/// degree-7 polynomial (fused multiply-adds where the CPU has them). 2^n goes into p's exponent
/// bits when every lane's result is normal; otherwise `exp_wide` applies it in two halves so
/// results that overflow become +inf and results in the subnormal range round once. NaN stays
/// NaN; -inf gives 0 (soft_max masks).
pub fn exp(x: F32x) F32x {
    // Lanes below -104 (e^x < 2^-150, so 0 after rounding; -inf included) are computed from 0 and
    // replaced at the end: scaling them down to 0 would be an underflow, which costs a microcode
    // assist per instruction on x86 when flush-to-zero is off.
    const is_zero = x < splat(-104.0);
    const xs = @select(f32, is_zero, splat(0), x);
    // Common case: every other lane has a normal result, so 2^n is added to p's exponent bits.
    // NaN, overflow and subnormal results take `exp_wide`; both give the same bits where both
    // apply (p and n are computed the same way and either scaling is exact).
    if (!@reduce(.And, @abs(xs) < splat(87.0))) return exp_wide(x);
    const t = mul_add(xs, splat(1.44269504088896341), splat(round_magic));
    const p = exp_reduced(xs, t - splat(round_magic));
    const t_bits: @Vector(lanes, u32) = @bitCast(t);
    const p_bits: @Vector(lanes, u32) = @bitCast(p);
    const scaled: F32x = @bitCast(p_bits +% (t_bits << @splat(23)));
    return @select(f32, is_zero, splat(0), scaled);
}

/// 1.5 * 2^23: adding it rounds a float of magnitude < 2^22 to an integer (nearest, ties to even)
/// held in the low mantissa bits.
const round_magic: f32 = 12582912.0;

/// e^(x - n ln2) for |x - n ln2| <= ln2 / 2: Cody-Waite reduction and the degree-7 polynomial.
fn exp_reduced(x: F32x, n: F32x) F32x {
    var r = mul_add(n, splat(-0.693359375), x);
    r = mul_add(n, splat(2.12194440e-4), r);
    var p = splat(1.9875691500e-4);
    p = mul_add(p, r, splat(1.3981999507e-3));
    p = mul_add(p, r, splat(8.3334519073e-3));
    p = mul_add(p, r, splat(4.1665795894e-2));
    p = mul_add(p, r, splat(1.6666665459e-1));
    p = mul_add(p, r, splat(5.0000001201e-1));
    return mul_add(p, r * r, r) + splat(1.0);
}

/// `exp` for any lanes: clamped to [-104, 89], 2^n applied in two halves.
fn exp_wide(x: F32x) F32x {
    const is_nan = x != x;
    const is_zero = x < splat(-104.0);
    const clamped = @min(@select(f32, is_nan | is_zero, splat(0), x), splat(89.0));
    const t = mul_add(clamped, splat(1.44269504088896341), splat(round_magic));
    const n = t - splat(round_magic);
    const p = exp_reduced(clamped, n);
    const exponent: @Vector(lanes, i32) = @intFromFloat(n);
    const half = exponent >> @splat(1);
    const scaled = p * power_of_two(half) * power_of_two(exponent - half);
    return @select(f32, is_nan, x, @select(f32, is_zero, splat(0), scaled));
}

/// 2^e for -126 <= e <= 127, built from the exponent bits.
fn power_of_two(e: @Vector(lanes, i32)) F32x {
    const bits: @Vector(lanes, u32) = @bitCast(
        (e + @as(@Vector(lanes, i32), @splat(127))) << @splat(23),
    );
    return @bitCast(bits);
}

/// Outputs at least this large are written with non-temporal (streaming) stores: they cannot
/// stay in cache (L3 is 32 MiB on the machines tuned for) and a normal store first reads the
/// line it overwrites, a third more memory traffic for a copy-like kernel. Smaller outputs are
/// usually read by the next node, so they are written through the cache.
pub const stream_store_bytes_min: usize = 16 << 20;

const has_avx = builtin.cpu.arch == .x86_64 and builtin.cpu.has(.x86, .avx);

/// Whether a kernel writing `dst` should use `store_stream` for its full, aligned chunks.
pub fn use_stream_stores(dst: Tensor) bool {
    return has_avx and dst.row_contiguous() and
        dst.element_count() * dst.size_bytes() >= stream_store_bytes_min;
}

/// Stores a full vector at a vector-aligned address, bypassing the caches. A kernel that used it
/// calls `stream_fence` before returning, so that the barrier after the node orders the stores.
pub fn store_stream(address: usize, value: F32x) void {
    assert(address % @sizeOf(F32x) == 0);
    if (has_avx) {
        asm volatile ("vmovntps %[value], (%[address])"
            :
            : [value] "v" (value),
              [address] "r" (address),
            : .{ .memory = true });
    } else {
        @as(*F32x, @ptrFromInt(address)).* = value;
    }
}

/// Orders earlier streaming stores before later stores (the barrier's release store).
pub fn stream_fence() void {
    if (has_avx) asm volatile ("sfence" ::: .{ .memory = true });
}

/// Stores a chunk as `store_chunk` does, streaming it when `stream` and it is a full vector at an
/// aligned address.
pub fn store_chunk_maybe_stream(row: Strided, index: usize, count: usize, value: F32x, stream: bool) void {
    const address = row.at(index);
    if (stream and count == lanes and row.stride == 4 and address % @sizeOf(F32x) == 0) {
        store_stream(address, value);
    } else {
        store_chunk(row, index, count, value);
    }
}

pub fn splat(value: f32) F32x {
    return @splat(value);
}

comptime {
    // exp clamps to [-104, 89]; both halves of 2^n must stay normal numbers.
    assert(@divFloor(-150, 2) >= -126);
    assert(128 - @divFloor(128, 2) <= 127);
}

// ---- ggml-cpu's exact arithmetic (ggml/src/ggml-cpu/vec.h, vec.cpp) ----
//
// llama.cpp quantizes activations to q8 before each matmul, so Graft's kernels for the ops in
// its graph reproduce ggml-cpu's results bit for bit: the same formulas, the same roundings, and
// the same split of a row between the vector code (full vectors of `lanes`) and the scalar tail
// (glibc's expf). ggml compiles ggml_v_expf per SIMD level with different polynomial
// arrangements; each variant object here uses the one ggml uses at its width: AVX-512 (16 lanes,
// __AVX512F__ && __AVX512DQ__), AVX2 + FMA (8 lanes), SSE (4 lanes, fused where FMA exists).

/// The C library's expf, sinf, cosf, powf and logf, as ggml calls them (`ggml_silu_f32`,
/// soft_max's tail, rope and its YaRN corrections). Declaring `expf` itself would bind Zig's
/// compiler_rt copy, linked into this library as a local symbol; glibc (2.27 on) also exports
/// each under its TS 18661-3 name, the same function (one ifunc, so the same variant for this CPU
/// as ggml's calls pick), which only libm defines.
const libm = struct {
    extern "c" fn expf32(x: f32) f32;
    extern "c" fn sinf32(x: f32) f32;
    extern "c" fn cosf32(x: f32) f32;
    extern "c" fn powf32(x: f32, y: f32) f32;
    extern "c" fn logf32(x: f32) f32;
};
const glibc = builtin.target.isGnuLibC();
// Without glibc (the wasm build) each function is its f64 version rounded once to f32: correctly
// rounded in all but rare double-rounding cases, as glibc's are, where Zig's f32 pow is off by
// ulps (which rope's angle recurrence multiplies by the position: an NMSE of 1e-9 at 4095).
pub fn expf(x: f32) f32 {
    return if (glibc) libm.expf32(x) else @floatCast(@exp(@as(f64, x)));
}
pub fn sinf(x: f32) f32 {
    return if (glibc) libm.sinf32(x) else @floatCast(@sin(@as(f64, x)));
}
pub fn cosf(x: f32) f32 {
    return if (glibc) libm.cosf32(x) else @floatCast(@cos(@as(f64, x)));
}
pub fn powf(x: f32, y: f32) f32 {
    return if (glibc) libm.powf32(x, y) else @floatCast(std.math.pow(f64, x, y));
}
pub fn logf(x: f32) f32 {
    return if (glibc) libm.logf32(x) else @floatCast(@log(@as(f64, x)));
}

const has_avx512 = builtin.cpu.arch == .x86_64 and builtin.cpu.has(.x86, .avx512f);

/// ggml_v_expf of this width, bit for bit ("adapted from arm limited optimized routine": at most
/// 1.95 ulp; above 88.38 it gives +inf, below -103.97 zero).
pub fn ggml_expf(x: F32x) F32x {
    const r = splat(0x1.8p23);
    const z = mul_add(x, splat(0x1.715476p+0), r);
    const n = z - r;
    // fnmadd(a, b, c) = c - a * b, one rounding: the negation of n is exact.
    const b = mul_add(-n, splat(0x1.7f7d1cp-20), mul_add(-n, splat(0x1.62e4p-1), x));
    const u = b * b;
    const c5 = splat(0x1.0e4020p-7);
    const c4 = splat(0x1.573e2ep-5);
    const c3 = splat(0x1.555e66p-3);
    const c2 = splat(0x1.fffdb6p-2);
    const c1 = splat(0x1.ffffecp-1);
    if (comptime lanes == 16 and has_avx512) {
        const j = mul_add(
            mul_add(mul_add(c5, b, c4), u, mul_add(c3, b, c2)),
            u,
            mul_add(c1, b, splat(1.0)),
        );
        const res = scalef(j, n);
        const d = @abs(n) > splat(192);
        if (!@reduce(.Or, d)) return res;
        const alt = @select(f32, n <= splat(0), splat(0), splat(std.math.inf(f32)));
        return @select(f32, d, alt, res);
    } else {
        const U32x = @Vector(lanes, u32);
        const one_bits: U32x = @splat(0x3f800000);
        const e: U32x = @as(U32x, @bitCast(z)) << @splat(23);
        const k: F32x = @bitCast(e +% one_bits);
        const c = @abs(n) > splat(126);
        const j = mul_add(mul_add(mul_add(c5, b, c4), u, mul_add(c3, b, c2)), u, c1 * b);
        if (!@reduce(.Or, c)) return mul_add(j, k, k);
        const g: U32x = @select(u32, n <= splat(0), @as(U32x, @splat(0x82000000)), @as(U32x, @splat(0)));
        const s1: F32x = @bitCast(g +% @as(U32x, @splat(0x7f000000)));
        const s2: F32x = @bitCast(e -% g);
        const d = @abs(n) > splat(192);
        return @select(f32, d, s1 * s1, @select(f32, c, mul_add(s2, j, s2) * s1, mul_add(k, j, k)));
    }
}

/// j * 2^floor(n), one rounding (AVX-512's vscalefps, as ggml's _mm512_scalef_ps).
fn scalef(j: F32x, n: F32x) F32x {
    return asm ("vscalefps %[n], %[j], %[out]"
        : [out] "=v" (-> F32x),
        : [j] "v" (j),
          [n] "v" (n),
    );
}

/// ggml_v_silu: x / (1 + ggml_v_expf(0 - x)).
pub fn ggml_silu(x: F32x) F32x {
    return x / (splat(1) + ggml_expf(splat(0) - x));
}

/// ggml_silu_f32, the scalar tail: x / (1.0f + expf(-x)) with the C library's expf.
pub fn ggml_silu_scalar(x: f32) f32 {
    return x / (1.0 + expf(-x));
}

/// silu of lanes [0, count) as ggml_vec_silu_f32 computes them: a full vector through
/// `ggml_silu`, a row's partial last chunk element by element through `ggml_silu_scalar`.
pub fn ggml_silu_chunk(x: F32x, count: usize) F32x {
    if (count == lanes) return ggml_silu(x);
    var out: [lanes]f32 = @splat(0);
    const in: [lanes]f32 = x;
    for (0..count) |lane| out[lane] = ggml_silu_scalar(in[lane]);
    return out;
}

/// The f32 sum of a vector in the order of x86's horizontal adds as ggml uses them
/// (_mm512_reduce_add_ps in GCC's header; the AVX2 and SSE sequences of ggml_vec_soft_max_f32):
/// halves added until 4 lanes are left, then (v0 + v2) + (v1 + v3).
pub fn ggml_reduce_add(v: F32x) f32 {
    var a: [lanes]f32 = v;
    comptime var width = lanes;
    inline while (width > 4) : (width /= 2) {
        inline for (0..width / 2) |i| a[i] = a[i + width / 2] + a[i];
    }
    return (a[0] + a[2]) + (a[1] + a[3]);
}
