//! gemm.zig's micro-kernel for wasm32, written as a WebAssembly function (module assembly) so
//! that the engine sees its instructions in the order that keeps every value in a register.
//!
//! Why not Zig: V8 on x86-64 allocates 15 xmm registers to wasm values (xmm15 is its scratch).
//! An MR x NR tile of 2 x 6 vectors holds 12 accumulators, and one step of k needs the 2 vectors
//! of A and one broadcast of B besides: exactly 15, but only when each broadcast is used by its
//! two fused multiply-adds right after it is loaded. LLVM's scheduling hoists the broadcasts
//! ahead of their uses, so the engine spills accumulators to the stack, and the spilled ones
//! become a loop-carried store-to-load chain. Written in this order, the kernel alone (panels
//! in L1) measured 54-58 GFLOP/s in headless Chromium 156 on a Sapphire Rapids core, against 40
//! for a 3 x 4 tile in any order (16 values: it always spills): that V8 follows the order closely
//! enough not to spill. (Node 20's older V8 still hoisted the loads and spilled; so did every
//! order LLVM produced for 2 x 6.)
//!
//! The function, generated at compile time from the tile shape:
//!   kernel(a: [kc][MR] f32, b: [kc][NR] f32, kc, out: [NR][MR / 4] v128)
//! sums, for every k in order, one multiply-add per accumulator (`fused`: f32x4.relaxed_madd,
//! one fused multiply-add where the CPU has FMA, as common.fma; else f32x4.mul then f32x4.add,
//! as common.fma without relaxed SIMD), from zero, and stores the tile to `out`: the same
//! operations in the same order as gemm.zig's Zig loop, so the same results.

const std = @import("std");
const builtin = @import("builtin");

const assert = std.debug.assert;
const V = @Vector(4, f32);

/// The module-assembly text of one kernel named `name`: `mr_vectors` vectors of A by `nr`
/// broadcasts of B per step of k.
fn source(comptime name: []const u8, comptime shape: Shape) []const u8 {
    comptime {
        @setEvalBranchQuota(400_000);
        const print = std.fmt.comptimePrint;
        const accumulators = shape.nr * shape.mr_vectors;
        const vector_locals = accumulators + shape.mr_vectors + 1 + @intFromBool(!shape.fused);
        // Every vector value of a step in a register of V8's 15 (see the top of the file).
        assert(vector_locals <= 15);
        var text: []const u8 = print(
            ".hidden {0s}\n.globl {0s}\n.type {0s},@function\n{0s}:\n" ++
                ".functype {0s} (i32, i32, i32, i32) -> ()\n.local v128",
            .{name},
        );
        for (1..vector_locals) |_| text = text ++ ", v128";
        text = text ++ "\nv128.const 0, 0, 0, 0\n";
        for (0..accumulators) |i| {
            text = text ++ print("local.{s} {d}\n", .{ if (i + 1 < accumulators) "tee" else "set", local_acc + i });
        }
        // One step when kc is odd, then pairs of steps: half the loop's own work per step
        // (counter, pointers, V8's stack check), which counts in Deno, whose V8 bounds-checks
        // every access explicitly (about 1.08x there). kc = 0 runs no step.
        text = text ++ "local.get 2\ni32.const 1\ni32.and\nif\n" ++ steps(shape, 1) ++ "end_if\n";
        text = text ++ "local.get 2\ni32.const 1\ni32.shr_u\nlocal.tee 2\nif\nloop\n" ++ steps(shape, 2) ++
            "local.get 2\ni32.const -1\ni32.add\nlocal.tee 2\nbr_if 0\nend_loop\nend_if\n";
        for (0..accumulators) |i| {
            text = text ++ print("local.get 3\nlocal.get {d}\nv128.store {d}:p2align=2\n", .{ local_acc + i, i * 16 });
        }
        return text ++ "end_function\n";
    }
}

/// Locals: the parameters a, b, kc, out (0-3), then the accumulators (j * mr_vectors + v), the
/// vectors of A, one broadcast of B, and without fusion the product.
const local_acc = 4;

/// `count` steps of k, then a and b advanced past them. Per step: the vectors of A, then per
/// column of B its broadcast and at once every multiply-add that reads it.
fn steps(comptime shape: Shape, comptime count: usize) []const u8 {
    comptime {
        const print = std.fmt.comptimePrint;
        const mv = shape.mr_vectors;
        const local_a = local_acc + shape.nr * mv;
        const local_b = local_a + mv;
        const local_product = local_b + 1;
        const a_step_bytes = mv * 16;
        const b_step_bytes = shape.nr * 4;
        var text: []const u8 = "";
        for (0..count) |step| {
            for (0..mv) |v| {
                const offset = step * a_step_bytes + v * 16;
                text = text ++ print("local.get 0\nv128.load {d}:p2align=2\nlocal.set {d}\n", .{ offset, local_a + v });
            }
            for (0..shape.nr) |j| {
                const offset = step * b_step_bytes + j * 4;
                text = text ++ print("local.get 1\nv128.load32_splat {d}:p2align=2\nlocal.set {d}\n", .{ offset, local_b });
                for (0..mv) |v| {
                    const acc = local_acc + j * mv + v;
                    const operands = print("local.get {d}\nlocal.get {d}\n", .{ local_a + v, local_b });
                    text = text ++ if (shape.fused)
                        print("{s}local.get {d}\nf32x4.relaxed_madd\nlocal.set {d}\n", .{ operands, acc, acc })
                    else
                        print("{s}f32x4.mul\nlocal.set {d}\nlocal.get {d}\nlocal.get {d}\nf32x4.add\nlocal.set {d}\n", .{ operands, local_product, acc, local_product, acc });
                }
            }
        }
        return text ++ print(
            "local.get 0\ni32.const {d}\ni32.add\nlocal.set 0\nlocal.get 1\ni32.const {d}\ni32.add\nlocal.set 1\n",
            .{ count * a_step_bytes, count * b_step_bytes },
        );
    }
}

/// A kernel's tile and code shape.
pub const Shape = struct {
    mr_vectors: usize,
    nr: usize,
    /// f32x4.relaxed_madd (relaxed SIMD), else f32x4.mul and f32x4.add.
    fused: bool,
};

/// The micro-kernel of `mr_vectors` x `nr` vectors for this wasm build, as a Zig function:
/// `out[j][v]` = sum over k of a[k][v] * b[k][j], in k order, from zero.
pub fn Kernel(comptime mr_vectors: usize, comptime nr: usize) type {
    comptime assert(builtin.cpu.arch.isWasm());
    const shape: Shape = .{
        .mr_vectors = mr_vectors,
        .nr = nr,
        .fused = builtin.cpu.has(.wasm, .relaxed_simd),
    };
    const name = std.fmt.comptimePrint("graft_wasm_sgemm_{d}x{d}", .{ mr_vectors, nr });
    return struct {
        comptime {
            asm (source(name, shape));
        }
        const Tile = [nr][mr_vectors]V;
        const Function = fn (a: [*]const f32, b: [*]const f32, kc: usize, out: *Tile) callconv(.c) void;
        const entry = @extern(*const Function, .{ .name = name });

        pub inline fn run(kc: usize, a: [*]const f32, b: [*]const f32, out: *Tile) void {
            entry(a, b, kc, out);
        }
    };
}
