//! The dtype traits table of the core: each element type's code, block size (elements per
//! block; 1 for plain types), bytes per block and ggml's type id (GGML_TYPE_*, what GGUF files
//! store). Its twin is `src/dtype.ts`; the library reports this table (see tables.zig) and
//! TypeScript checks it when it loads the library.

/// Element types; the codes are the node table's (`TensorDesc.dtype`).
pub const DType = enum(u32) {
    f32 = 0,
    f16 = 1,
    i32 = 2,
    bf16 = 3,
    q8_0 = 4,
    q4_0 = 5,
    q4_1 = 6,
    q5_0 = 7,
    q5_1 = 8,
    q8_1 = 9,
    q4_K = 10,
    q5_K = 11,
    q6_K = 12,
    q8_K = 13,
    i64 = 14, // row indices of get_rows and set_rows only (ggml's GGML_TYPE_I64)

    /// The last code; a larger one names no dtype.
    pub const last: DType = .i64;

    /// Elements per block: ggml's quantized types store blocks of 32, its k-quants super-blocks of 256; plain types 1.
    pub fn block_size(dtype: DType) usize {
        return switch (dtype) {
            .f32, .f16, .i32, .bf16, .i64 => 1,
            .q8_0, .q4_0, .q4_1, .q5_0, .q5_1, .q8_1 => 32,
            .q4_K, .q5_K, .q6_K, .q8_K => 256, // ggml's QK_K super-blocks
        };
    }

    /// Bytes one block takes (ggml's type_size).
    pub fn block_bytes(dtype: DType) usize {
        return switch (dtype) {
            .i64 => 8,
            .f32, .i32 => 4,
            .f16, .bf16 => 2,
            .q8_0 => 34, // f16 d, 32 x i8
            .q4_0 => 18, // f16 d, 16 bytes of nibbles
            .q4_1 => 20, // f16 d, f16 m, 16 bytes of nibbles
            .q5_0 => 22, // f16 d, u32 high bits, 16 bytes of nibbles
            .q5_1 => 24, // f16 d, f16 m, u32 high bits, 16 bytes of nibbles
            .q8_1 => 36, // f16 d, f16 s (d * sum of qs), 32 x i8
            .q4_K => 144, // f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
            .q5_K => 176, // as q4_K, then 32 bytes of fifth bits before the nibbles
            .q6_K => 210, // 128 bytes low nibbles, 64 bytes high bit pairs, 16 x i8 scales, f16 d
            .q8_K => 292, // f32 d, 256 x i8, 16 x i16 sums of 16 quants
        };
    }

    /// ggml's type id (enum ggml_type), as GGUF files store it.
    pub fn ggml_type(dtype: DType) u32 {
        return switch (dtype) {
            .f32 => 0,
            .f16 => 1,
            .q4_0 => 2,
            .q4_1 => 3,
            .q5_0 => 6,
            .q5_1 => 7,
            .q8_0 => 8,
            .q8_1 => 9,
            .q4_K => 12,
            .q5_K => 13,
            .q6_K => 14,
            .q8_K => 15,
            .i32 => 26,
            .i64 => 27,
            .bf16 => 30,
        };
    }

    /// True for the plain types that the element kernels take (f32, f16, i32). bf16 and the
    /// block types reach only the ops whose checks name them (get_rows, mul_mat src0), which
    /// dequantize rows with quant.zig.
    pub fn has_kernels(dtype: DType) bool {
        return switch (dtype) {
            .f32, .f16, .i32 => true,
            else => false,
        };
    }

    /// The dtype of a code, or null for a code that names none.
    pub fn from_code(code: u32) ?DType {
        if (code > @intFromEnum(last)) return null;
        return @enumFromInt(code);
    }

    /// True for the dtypes that get_rows (src0) and mul_mat (src0) dequantize: bf16 and the
    /// block types with a dequantize_row in quant.zig (q8_1 is only ever a dot-product operand).
    pub fn dequantizes(dtype: DType) bool {
        return switch (dtype) {
            .bf16, .q8_0, .q4_0, .q4_1, .q5_0, .q5_1, .q4_K, .q5_K, .q6_K => true,
            // q8_1 and q8_K are ggml's activation types: they only feed dot products.
            .f32, .f16, .i32, .q8_1, .q8_K, .i64 => false,
        };
    }

    /// getRows and mul_mat take it as src0 (TypeScript's `weight` trait, checked at load).
    pub fn weight(dtype: DType) bool {
        return dtype == .f32 or dtype == .f16 or dtype.dequantizes();
    }

    /// Bytes per element of a plain (unblocked) type; kernels that index elements use it.
    pub fn size_bytes(dtype: DType) usize {
        std.debug.assert(dtype.block_size() == 1);
        return dtype.block_bytes();
    }
};

const std = @import("std");
