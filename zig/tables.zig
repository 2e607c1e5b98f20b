//! The core's tables as text, for the load-time check in TypeScript (`src/core/tables.ts`):
//! one line per op, dtype and status code, built at compile time from the enums themselves,
//! so the text cannot disagree with what the core runs.
//!
//!   op <name> <code>
//!   dtype <name> <code> <block_size> <block_bytes> <ggml_type> <weight: 1 or 0>
//!   status <name> <code>

const std = @import("std");
const node = @import("node.zig");

pub const text: []const u8 = blk: {
    @setEvalBranchQuota(100_000);
    var lines: []const u8 = "";
    for (@typeInfo(node.Op).@"enum".fields) |field| {
        lines = lines ++ std.fmt.comptimePrint("op {s} {d}\n", .{ field.name, field.value });
    }
    for (@typeInfo(node.DType).@"enum".fields) |field| {
        const dtype: node.DType = @enumFromInt(field.value);
        lines = lines ++ std.fmt.comptimePrint("dtype {s} {d} {d} {d} {d} {d}\n", .{ field.name, field.value, dtype.block_size(), dtype.block_bytes(), dtype.ggml_type(), @intFromBool(dtype.weight()) });
    }
    for (@typeInfo(node.Status).@"enum".fields) |field| {
        lines = lines ++ std.fmt.comptimePrint("status {s} {d}\n", .{ field.name, field.value });
    }
    break :blk lines;
};
