//! The dtype traits table of the core: each element type's code, block size (elements per
//! block; 1 for plain types) and bytes per block. Its twin is `src/dtype.ts`; the library
//! reports this table (see tables.zig) and TypeScript checks it when it loads the library.

/// Element types; the codes are the node table's (`TensorDesc.dtype`).
pub const DType = enum(u32) {
    f32 = 0,
    f16 = 1,
    i32 = 2,

    /// Elements per block: ggml's quantized types store blocks of 32 or 256; plain types 1.
    pub fn block_size(dtype: DType) usize {
        return switch (dtype) {
            .f32, .f16, .i32 => 1,
        };
    }

    /// Bytes one block takes.
    pub fn block_bytes(dtype: DType) usize {
        return switch (dtype) {
            .f32, .i32 => 4,
            .f16 => 2,
        };
    }

    /// Bytes per element of a plain (unblocked) type; kernels that index elements use it.
    pub fn size_bytes(dtype: DType) usize {
        std.debug.assert(dtype.block_size() == 1);
        return dtype.block_bytes();
    }
};

const std = @import("std");
