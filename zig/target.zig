//! What the compile target allows, in one place: the native build (x86-64 Linux, threads, libc,
//! mmap, a clock) and the wasm32 build (freestanding, single-threaded, SIMD128). Code that
//! differs between them asks these constants, so the wasm-only paths are easy to find.

const std = @import("std");
const builtin = @import("builtin");

pub const is_wasm = builtin.cpu.arch.isWasm();

/// Worker threads: none in a single-threaded build (wasm32 without shared memory).
pub const threads_available = !builtin.single_threaded;

/// The threaded wasm32 build (shared memory, atomics): its worker threads are Web Workers that
/// the JS loader starts, each running the same module on the same memory and entering the core
/// through `graft_wasm_worker`; freestanding wasm cannot spawn threads itself.
pub const wasm_workers = is_wasm and threads_available;

/// Threads the core spawns itself (std.Thread): the native build.
pub const native_threads = threads_available and !is_wasm;

/// Read-only file mappings (mmap): a WebAssembly module has no files.
pub const file_mapping_available = !is_wasm;

/// A monotonic clock for per-node timings: freestanding wasm has none without imports.
pub const clock_available = !is_wasm;

/// A u64 counter that several threads update: atomic in a native threaded build; a plain
/// integer in a single-threaded one; under a 32-bit spin lock in the threaded wasm32 build
/// (wasm32 has no 64-bit atomics Zig will emit, and these counters change rarely).
pub const Counter64 = if (native_threads) std.atomic.Value(u64) else if (wasm_workers) LockedCounter64 else PlainCounter64;

const PlainCounter64 = struct {
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

const LockedCounter64 = struct {
    raw: u64,
    lock_word: std.atomic.Value(u32) = .init(0),

    const Self = @This();

    pub fn init(value: u64) Self {
        return .{ .raw = value };
    }

    fn lock(self: *Self) void {
        while (self.lock_word.cmpxchgWeak(0, 1, .acquire, .monotonic) != null) std.atomic.spinLoopHint();
    }

    fn unlock(self: *Self) void {
        self.lock_word.store(0, .release);
    }

    pub fn load(self: *const Self, comptime order: std.builtin.AtomicOrder) u64 {
        _ = order;
        const mutable: *Self = @constCast(self);
        mutable.lock();
        defer mutable.unlock();
        return self.raw;
    }

    pub fn fetchAdd(self: *Self, operand: u64, comptime order: std.builtin.AtomicOrder) u64 {
        _ = order;
        self.lock();
        defer self.unlock();
        const previous = self.raw;
        self.raw +%= operand;
        return previous;
    }

    pub fn fetchSub(self: *Self, operand: u64, comptime order: std.builtin.AtomicOrder) u64 {
        _ = order;
        self.lock();
        defer self.unlock();
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
