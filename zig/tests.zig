//! Root of `zig build test`: pulls in every file's tests.
test {
    _ = @import("allocator.zig");
    _ = @import("registry.zig");
    _ = @import("pool.zig");
    _ = @import("plan.zig");
    _ = @import("kernels/tests.zig");
    _ = @import("kernels/unary_test.zig");
    _ = @import("kernels/indexing_test.zig");
    _ = @import("kernels/extra_ops_test.zig");
    _ = @import("kernels/conv2d_test.zig");
    _ = @import("kernels/rope.zig");
    _ = @import("quant.zig");
    _ = @import("kernels/gemv_quant.zig");
    _ = @import("kernels/dot_quant.zig");
    _ = @import("kernels/dot_repack.zig");
    _ = @import("kernels/dot_repack_test.zig");
    _ = @import("mapping.zig");
    _ = @import("target.zig");
    _ = @import("guard.zig");
}
