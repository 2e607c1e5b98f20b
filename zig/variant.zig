//! One SIMD build of the kernels. `build.zig` compiles this file once per variant (AVX2 for
//! x86_64_v3, AVX-512 for x86_64_v4) and links every object into the library; the symbols carry
//! the variant's name (`graft_<variant>_compute_node`, `_work_size`, `_prepacked_size`,
//! `_prepack`), and the core picks a variant at run time from CPUID. No Zig error or panic
//! crosses this boundary.

const std = @import("std");
const build_options = @import("build_options");
const node = @import("node.zig");
const dispatch = @import("kernels/dispatch.zig");
const common = @import("kernels/common.zig");

const variant = build_options.variant;

comptime {
    // The vector width follows the CPU model the build picked for this variant name.
    if (std.mem.eql(u8, variant, "avx512")) std.debug.assert(common.lanes == 16);
    if (std.mem.eql(u8, variant, "avx2")) std.debug.assert(common.lanes == 8);
    @export(&compute_node, .{ .name = "graft_" ++ variant ++ "_compute_node" });
    @export(&work_size, .{ .name = "graft_" ++ variant ++ "_work_size" });
    @export(&prepacked_size, .{ .name = "graft_" ++ variant ++ "_prepacked_size" });
    @export(&prepack, .{ .name = "graft_" ++ variant ++ "_prepack" });
}

/// Computes this thread's share of one node; returns a `node.Status` value.
fn compute_node(n: *const node.Node, work: *const node.Work) callconv(.c) c_int {
    return @intFromEnum(dispatch.compute_node(n, work));
}

/// Scratch bytes `n` needs in `Work.scratch` with `thread_count` threads.
fn work_size(n: *const node.Node, thread_count: u32) callconv(.c) u64 {
    return dispatch.work_size(n, thread_count);
}

/// Bytes of `n`'s prepacked operand in this variant's layout (0: nothing to prepack).
fn prepacked_size(n: *const node.Node) callconv(.c) u64 {
    return dispatch.prepacked_size(n);
}

/// This thread's share of packing `n`'s operand into `work.prepacked`; a `node.Status` value.
fn prepack(n: *const node.Node, work: *const node.Work) callconv(.c) c_int {
    return @intFromEnum(dispatch.prepack(n, work));
}
