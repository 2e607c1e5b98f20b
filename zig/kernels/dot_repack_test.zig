//! dot_repack.zig against a plain scalar reference of ggml's repacked float steps, bit for bit:
//! per output element, the chains its doc comment states (q4_0: one fma per block; q4_K: two
//! chains, a step per pair of sub-blocks in the gemm columns and one per super-block in the
//! gemv ones), written out element by element from the raw blocks, with the src1 rows quantized
//! by quant.zig's q8_0 / q8_K (the gemv columns) and by a plain copy of ggml's 4x8 q8_K rule
//! (the gemm columns). The node runs through `dispatch.compute_node` with 1 and 3 threads, on
//! random valid blocks (random nibbles and 6-bit scales, random f16 d and dmin), odd shapes,
//! src1 batches and padded, interleaved and strided layouts.
//!
//! The 4x8 rule's other sign (a block holding -amax before +amax) negates d and every quant
//! exactly, so it changes no output bit (each product and fma sees both signs flipped; checked:
//! the product test passes with the reference's gemm columns quantized by quantize_row_q8_K);
//! the last test therefore checks the rule on the blocks themselves.

const std = @import("std");
const node = @import("../node.zig");
const validate = @import("../validate.zig");
const quant = @import("../quant.zig");
const repack = @import("dot_repack.zig");
const kernel_tests = @import("tests.zig");

const testing = std.testing;
const allocator = testing.allocator;
const DType = node.DType;
const TensorDesc = node.TensorDesc;

const qk = 32;
const qk_k = 256;

// ---------------------------------------------------------------------------------------------
// The reference.

fn f16_at(bytes: []const u8) f32 {
    return quant.fp16_to_fp32(std.mem.readInt(u16, bytes[0..2], .little));
}

/// ggml's nearest_int (round half to even through the f32 mantissa; |x| <= 127 here).
fn nearest_int(x: f32) i32 {
    const bits: i32 = @bitCast(x + 12582912.0);
    return (bits & 0x007fffff) - 0x00400000;
}

/// ggml_quantize_mat_q8_K_4x8's block for one row (arch/x86/repack.cpp, AVX2): the scale is
/// -127 / amax when some element equals +amax, else 127 / amax. q8_K's 292-byte layout.
fn quantize_q8_K_4x8_ref(x: *const [qk_k]f32, y: *[292]u8) void {
    var amax: f32 = 0;
    for (x) |v| amax = @max(amax, @abs(v));
    @memset(y, 0);
    if (amax == 0) return;
    var positive = false;
    for (x) |v| {
        if (v == amax) positive = true;
    }
    const iscale: f32 = if (positive) -127.0 / amax else 127.0 / amax;
    for (0..qk_k) |i| y[4 + i] = @bitCast(@as(i8, @intCast(@min(127, nearest_int(iscale * x[i])))));
    for (0..16) |j| {
        var sum: i16 = 0;
        for (0..16) |i| sum += @as(i8, @bitCast(y[4 + 16 * j + i]));
        std.mem.writeInt(i16, y[260 + 2 * j ..][0..2], sum, .little);
    }
    std.mem.writeInt(u32, y[0..4], @bitCast(1 / iscale), .little);
}

/// ggml's get_scale_min_k4: sub-block j's 6-bit scale and min.
fn scale_min(j: usize, s: *const [12]u8) [2]i32 {
    if (j < 4) return .{ s[j] & 63, s[j + 4] & 63 };
    return .{ (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4) };
}

/// A q4_0 row (18-byte blocks) times a q8_0 row (34-byte blocks): acc = fma(f32(isum_b),
/// f32(d_w) * f32(d_a), acc) per block.
fn ref_q4_0(w: []const u8, a: []const u8, blocks: usize) f32 {
    var acc: f32 = 0;
    for (0..blocks) |b| {
        const x = w[b * 18 ..][0..18];
        const y = a[b * 34 ..][0..34];
        var isum: i32 = 0;
        for (0..qk) |i| {
            const nibble: i32 = if (i < 16) x[2 + i] & 15 else x[2 + i - 16] >> 4;
            isum += (nibble - 8) * @as(i8, @bitCast(y[2 + i]));
        }
        acc = @mulAdd(f32, @floatFromInt(isum), f16_at(x[0..2]) * f16_at(y[0..2]), acc);
    }
    return acc;
}

/// A q4_K row (144-byte super-blocks) times a q8_K row (292-byte blocks): the scales' chain and
/// the mins' chain, a step per pair of sub-blocks (`per_pair`, the gemm) or per super-block
/// (the gemv); acc - accm.
fn ref_q4_K(w: []const u8, a: []const u8, blocks: usize, per_pair: bool) f32 {
    var acc: f32 = 0;
    var accm: f32 = 0;
    for (0..blocks) |b| {
        const x = w[b * 144 ..][0..144];
        const y = a[b * 292 ..][0..292];
        const d_a: f32 = @bitCast(std.mem.readInt(u32, y[0..4], .little));
        const dd = f16_at(x[0..2]) * d_a;
        const dmd = f16_at(x[2..4]) * d_a;
        var total: i32 = 0;
        var total_min: i32 = 0;
        for (0..4) |p| {
            var v: i32 = 0;
            var mv: i32 = 0;
            for (0..2) |h| {
                const j = 2 * p + h;
                const sm = scale_min(j, x[4..16]);
                var isum: i32 = 0;
                var sum: i32 = 0;
                for (0..32) |i| {
                    const byte = x[16 + 32 * p + i];
                    const nibble: i32 = if (h == 0) byte & 15 else byte >> 4;
                    const q: i32 = @as(i8, @bitCast(y[4 + 32 * j + i]));
                    isum += nibble * q;
                    sum += q;
                }
                v += sm[0] * isum;
                mv += sm[1] * sum;
            }
            if (per_pair) {
                acc = @mulAdd(f32, @floatFromInt(v), dd, acc);
                accm = @mulAdd(f32, @floatFromInt(mv), dmd, accm);
            } else {
                total += v;
                total_min += mv;
            }
        }
        if (!per_pair) {
            acc = @mulAdd(f32, @floatFromInt(total), dd, acc);
            accm = @mulAdd(f32, @floatFromInt(total_min), dmd, accm);
        }
    }
    return acc - accm;
}

// ---------------------------------------------------------------------------------------------
// Inputs.

fn random_f16(random: std.Random) u16 {
    const magnitude = 1e-3 + random.float(f32) * 0.05;
    return quant.fp32_to_fp16(if (random.boolean()) magnitude else -magnitude);
}

/// A row of random valid blocks: random nibbles and scale bytes, random f16 d (and dmin).
fn random_row(kind: DType, row: []u8, random: std.Random) void {
    random.bytes(row);
    const size: usize = if (kind == .q4_0) 18 else 144;
    var at: usize = 0;
    while (at < row.len) : (at += size) {
        std.mem.writeInt(u16, row[at..][0..2], random_f16(random), .little);
        if (kind == .q4_K) std.mem.writeInt(u16, row[at + 2 ..][0..2], random_f16(random), .little);
    }
}

/// A src1 row: uniform in [-1, 1], with each 256-block (q8_K's) sometimes holding -2 before
/// +2, +2 before -2 (the 4x8 rule's tie) or all zeros.
fn random_column(values: []f32, random: std.Random) void {
    for (values) |*v| v.* = random.float(f32) * 2 - 1;
    var at: usize = 0;
    while (at + qk_k <= values.len) : (at += qk_k) {
        const block = values[at..][0..qk_k];
        const i = random.uintLessThan(usize, qk_k - 1);
        const j = i + 1 + random.uintLessThan(usize, qk_k - 1 - i);
        switch (random.uintLessThan(u8, 8)) {
            0, 1, 2 => {
                block[i] = -2;
                block[j] = 2;
            },
            3 => {
                block[i] = 2;
                block[j] = -2;
            },
            4 => @memset(block, 0),
            else => {},
        }
    }
}

// ---------------------------------------------------------------------------------------------
// One case through the node.

/// Where the case's tensors lie: contiguous; padded rows and batches with data off any
/// alignment; src1's batches interleaved between its columns and dst's elements 8 bytes apart.
const Layout = enum { contiguous, padded, interleaved };

const Case = struct { kind: DType, m: usize, n: usize, blocks: usize, batches: usize, layout: Layout };

fn address(desc: *const TensorDesc, e: usize, col: usize, batch: usize) usize {
    return @as(usize, @intCast(desc.data)) + e * @as(usize, @intCast(desc.nb[0])) +
        col * @as(usize, @intCast(desc.nb[1])) + batch * @as(usize, @intCast(desc.nb[2]));
}

fn desc_in(memory: []u8, offset: usize, dtype: DType, ne: [3]usize, nb: [3]usize) TensorDesc {
    return .{
        .data = @intFromPtr(memory.ptr) + offset,
        .ne = .{ @intCast(ne[0]), @intCast(ne[1]), @intCast(ne[2]), 1 },
        .nb = .{ @intCast(nb[0]), @intCast(nb[1]), @intCast(nb[2]), @intCast(nb[2] * ne[2]) },
        .dtype = @intFromEnum(dtype),
        .reserved = 0,
    };
}

fn check_case(case: Case, random: std.Random) !void {
    const kind = case.kind;
    const k = case.blocks * kind.block_size();
    const m = case.m;
    const n = case.n;
    const batches = case.batches;
    const row_len: usize = @intCast(quant.row_bytes(kind, k));
    const block_bytes = kind.block_bytes();
    const padded = case.layout != .contiguous;

    // src0: rows `row_len` (+ 10 bytes) apart, 6 bytes into its buffer when padded.
    const a_stride = row_len + if (padded) @as(usize, 10) else 0;
    const a_offset: usize = if (padded) 6 else 0;
    const a_memory = try allocator.alignedAlloc(u8, .@"64", a_offset + a_stride * m);
    defer allocator.free(a_memory);
    @memset(a_memory, 0xFF);
    const a = desc_in(a_memory, a_offset, kind, .{ k, m, 1 }, .{ block_bytes, a_stride, a_stride * m });
    for (0..m) |r| random_row(kind, a_memory[a_offset + r * a_stride ..][0..row_len], random);

    // src1: f32 rows, padded or with the batches interleaved between the columns.
    const b_offset: usize = if (padded) 4 else 0;
    const b_nb: [3]usize = switch (case.layout) {
        .contiguous => .{ 4, 4 * k, 4 * k * n },
        .padded => .{ 4, 4 * k + 12, (4 * k + 12) * n + 20 },
        .interleaved => .{ 4, (4 * k + 8) * batches, 4 * k + 8 },
    };
    const b_size = b_offset + (n - 1) * b_nb[1] + (batches - 1) * b_nb[2] + 4 * k;
    const b_memory = try allocator.alignedAlloc(u8, .@"64", b_size);
    defer allocator.free(b_memory);
    @memset(b_memory, 0xFF); // NaN between the rows: a stray read shows
    const b = desc_in(b_memory, b_offset, .f32, .{ k, n, batches }, b_nb);
    const column = try allocator.alloc(f32, k);
    defer allocator.free(column);
    const columns = try allocator.alloc(f32, k * n * batches);
    defer allocator.free(columns);
    for (0..batches) |batch| {
        for (0..n) |c| {
            const values = columns[(batch * n + c) * k ..][0..k];
            random_column(values, random);
            for (values, 0..) |v, i| @as(*align(1) f32, @ptrFromInt(address(&b, i, c, batch))).* = v;
        }
    }

    // dst: padded rows, or its elements 8 bytes apart.
    const c_nb: [3]usize = switch (case.layout) {
        .contiguous => .{ 4, 4 * m, 4 * m * n },
        .padded => .{ 4, 4 * m + 8, (4 * m + 8) * n + 4 },
        .interleaved => .{ 8, 8 * m + 4, (8 * m + 4) * n },
    };
    const c_size = (m - 1) * c_nb[0] + (n - 1) * c_nb[1] + (batches - 1) * c_nb[2] + 4;
    const c_memory = try allocator.alignedAlloc(u8, .@"64", c_size);
    defer allocator.free(c_memory);
    const c = desc_in(c_memory, 0, .f32, .{ m, n, batches }, c_nb);

    var nd = kernel_tests.make_node(.mul_mat, c, &.{ a, b });
    nd.params[1] = @bitCast(@as(f32, 2.0));
    try testing.expectEqual(node.Status.ok, validate.validate_node(&nd).status);
    try testing.expect(repack.takes(&nd));

    // The reference: the gemm columns (the first n - n % 4 of each batch) quantized by the 4x8
    // rule, the rest by quant.zig's quantize_row_q8_0 / _q8_K.
    const act_type: DType = if (kind == .q4_0) .q8_0 else .q8_K;
    const act = try allocator.alloc(u8, @intCast(quant.row_bytes(act_type, k)));
    defer allocator.free(act);
    const want = try allocator.alloc(f32, m * n * batches);
    defer allocator.free(want);
    const gemm_cols = n - n % 4;
    for (0..batches) |batch| {
        for (0..n) |col| {
            const values = columns[(batch * n + col) * k ..][0..k];
            const gemm = col < gemm_cols;
            if (kind == .q4_K and gemm) {
                for (0..case.blocks) |blk| quantize_q8_K_4x8_ref(values[blk * qk_k ..][0..qk_k], act[blk * 292 ..][0..292]);
            } else {
                quant.quantize_row_activation(act_type, values, act);
            }
            for (0..m) |r| {
                const w = a_memory[a_offset + r * a_stride ..][0..row_len];
                want[(batch * n + col) * m + r] = if (kind == .q4_0)
                    ref_q4_0(w, act, case.blocks)
                else
                    ref_q4_K(w, act, case.blocks, gemm);
            }
        }
    }

    for ([_]u32{ 1, 3 }) |threads| {
        @memset(c_memory, 0xFF);
        try testing.expectEqual(node.Status.ok, try kernel_tests.run(&nd, threads));
        var written: usize = 0;
        for (0..batches) |batch| {
            for (0..n) |col| {
                for (0..m) |r| {
                    const got: u32 = @as(*align(1) const u32, @ptrFromInt(address(&c, r, col, batch))).*;
                    const value = want[(batch * n + col) * m + r];
                    const expected: u32 = @bitCast(value);
                    if (got != expected) {
                        std.debug.print("{s} m={d} n={d} blocks={d} batches={d} {s}, {d} threads: ", .{ @tagName(kind), m, n, case.blocks, batches, @tagName(case.layout), threads });
                        std.debug.print("row {d} column {d} batch {d}: got {e} ({x}), want {e} ({x})\n", .{ r, col, batch, @as(f32, @bitCast(got)), got, value, expected });
                        return error.TestExpectedEqual;
                    }
                    written += 1;
                }
            }
        }
        // Nothing outside dst's elements changed.
        var untouched: usize = 0;
        for (c_memory) |byte| untouched += @intFromBool(byte == 0xFF);
        try testing.expect(untouched >= c_memory.len - 4 * written);
    }
}

test "dot_repack: q4_0 and q4_K products are bitwise the scalar reference of ggml's repacked steps" {
    var prng = std.Random.DefaultPrng.init(0x5eed_8a8);
    const random = prng.random();
    const column_counts = [_]usize{ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 20 };
    var index: usize = 0;
    for ([_]DType{ .q4_0, .q4_K }) |kind| {
        const max_blocks: usize = if (kind == .q4_0) 6 else 3;
        var m: usize = 8;
        while (m <= 48) : (m += 8) {
            for (column_counts) |n| {
                for (1..max_blocks + 1) |blocks| {
                    index += 1;
                    try check_case(.{
                        .kind = kind,
                        .m = m,
                        .n = n,
                        .blocks = blocks,
                        .batches = 1 + index % 3,
                        .layout = @enumFromInt(index / 3 % 3),
                    }, random);
                }
            }
        }
    }
}

test "dot_repack: the 4x8 q8_K block differs from quantize_row_q8_K exactly where -amax comes before +amax" {
    var prng = std.Random.DefaultPrng.init(41);
    const random = prng.random();
    var differed: usize = 0;
    for (0..2000) |trial| {
        var x: [qk_k]f32 = undefined;
        for (&x) |*v| v.* = (random.float(f32) * 2 - 1) * 3;
        // Ties of the largest magnitude in either order, one sign alone (repeated or not), an
        // all-zero block, or none.
        const amax: f32 = 4.5;
        const i = random.uintLessThan(usize, qk_k - 1);
        const j = i + 1 + random.uintLessThan(usize, qk_k - 1 - i);
        switch (trial % 7) {
            0, 1 => {
                x[i] = -amax;
                x[j] = amax;
            },
            2 => {
                x[i] = amax;
                x[j] = -amax;
            },
            3 => {
                x[i] = -amax;
                x[j] = -amax;
            },
            4 => x[j] = amax,
            5 => if (trial % 14 == 5) @memset(&x, 0),
            else => {},
        }
        // The rule: the first element of largest magnitude is -amax and +amax comes later.
        var first: f32 = 0;
        var largest: f32 = 0;
        for (x) |v| {
            if (@abs(v) > largest) {
                largest = @abs(v);
                first = v;
            }
        }
        var differs = false;
        for (x) |v| differs = differs or (first < 0 and v == -first);

        var reference: [292]u8 = undefined;
        var four_by_eight: [292]u8 = undefined;
        var plain: [292]u8 = undefined;
        quant.quantize_row_activation(.q8_K, &x, &reference);
        repack.quantize_q8_K_4x8(&x, &four_by_eight);
        // The test's plain copy of ggml's rule agrees with the kernel's quantizer.
        quantize_q8_K_4x8_ref(&x, &plain);
        try testing.expectEqualSlices(u8, &plain, &four_by_eight);
        if (!differs) {
            try testing.expectEqualSlices(u8, &reference, &four_by_eight);
            continue;
        }
        // The other sign: d, every quant and every sum negated, bit for bit.
        differed += 1;
        const d_ref: u32 = std.mem.readInt(u32, reference[0..4], .little);
        const d_4x8: u32 = std.mem.readInt(u32, four_by_eight[0..4], .little);
        try testing.expectEqual(d_ref ^ 0x8000_0000, d_4x8);
        for (reference[4..260], four_by_eight[4..260]) |q_ref, q| {
            try testing.expectEqual(-@as(i8, @bitCast(q_ref)), @as(i8, @bitCast(q)));
        }
        for (0..16) |s| {
            const s_ref = std.mem.readInt(i16, reference[260 + 2 * s ..][0..2], .little);
            try testing.expectEqual(-s_ref, std.mem.readInt(i16, four_by_eight[260 + 2 * s ..][0..2], .little));
        }
    }
    try testing.expect(differed >= 500);
}
