//! What the compile target allows, in one place: the native build (x86-64 Linux, threads, libc,
//! mmap, a clock) and the wasm32 build (freestanding, single-threaded, SIMD128). Code that
//! differs between them asks these constants, so the wasm-only paths are easy to find.

const std = @import("std");
const builtin = @import("builtin");

pub const is_wasm = builtin.cpu.arch.isWasm();

/// Worker threads: none in a single-threaded build (wasm32 without shared memory).
pub const threads_available = !builtin.single_threaded;

/// Read-only file mappings (mmap): a WebAssembly module has no files.
pub const file_mapping_available = !is_wasm;

/// A monotonic clock for per-node timings: freestanding wasm has none without imports.
pub const clock_available = !is_wasm;

/// A u64 counter that several threads update: atomic in a threaded build; a plain integer in a
/// single-threaded one (wasm32 has no 64-bit atomics without the threads proposal, and one
/// thread needs none).
pub const Counter64 = if (threads_available) std.atomic.Value(u64) else struct {
    raw: u64,

    const Self = @This();

    pub fn init(value: u64) Self {
        return .{ .raw = value };
    }

    pub fn load(self: *const Self, comptime order: std.builtin.AtomicOrder) u64 {
        _ = order;
        return self.raw;
    }

    pub fn fetchAdd(self: *Self, operand: u64, comptime order: std.builtin.AtomicOrder) u64 {
        _ = order;
        const previous = self.raw;
        self.raw +%= operand;
        return previous;
    }

    pub fn fetchSub(self: *Self, operand: u64, comptime order: std.builtin.AtomicOrder) u64 {
        _ = order;
        const previous = self.raw;
        self.raw -%= operand;
        return previous;
    }
};

test "Counter64 adds and subtracts" {
    var counter = Counter64.init(5);
    try std.testing.expectEqual(@as(u64, 5), counter.fetchAdd(3, .monotonic));
    try std.testing.expectEqual(@as(u64, 8), counter.fetchSub(8, .monotonic));
    try std.testing.expectEqual(@as(u64, 0), counter.load(.monotonic));
}
