//! Guard-page memory for the bounds-checked library (libgraft-safe.so, `guard_pages` in
//! build.zig): the buffers and the plans' work and prepacked memory come from here instead of
//! libc's malloc, so that a kernel writing past its memory is caught where it happens instead
//! of corrupting malloc's heap for someone else to trip over later.
//!
//! Each block is its own mapping: a PROT_NONE page, the data pages, a PROT_NONE page. The
//! block is placed so that its end, rounded up to `alignment`, is the start of the last guard
//! page: a write one byte past the rounded end faults at once. The bytes between the requested
//! end and the rounded end (the slack, under `alignment` bytes) and those from the first data
//! page's start to the block (the head) hold a canary, which `check` compares: a write of even
//! one byte past the requested end shows there. The data start filled with `junk`, as malloc's
//! perturb option fills it, so that a kernel that reads scratch it never wrote gets nonsense
//! instead of the zeros of a fresh mapping. The release library keeps libc's malloc (root.zig).

const std = @import("std");
const assert = std.debug.assert;
const posix = std.posix;

/// The blocks' alignment: root.zig's buffer alignment (a cache line), so that the rounded end
/// is where a kernel's whole-vector access past the block would land.
pub const alignment = 64;
/// What fresh data holds (not zero: see the header).
pub const junk: u8 = 0xa5;

/// The canary byte at `address`: varies with the address, so that a stray run of one value
/// (zeros, a repeated float) cannot match it everywhere.
fn canary(address: usize) u8 {
    return @truncate((address *% 0x9e3779b1) >> 7 ^ 0xcb);
}

fn page_size() usize {
    return std.heap.pageSize();
}

/// The mapping that holds a block of `size` bytes at `data`: its start and length.
const Mapping = struct {
    base: [*]align(std.heap.page_size_min) u8,
    length: usize,
    /// The first data page's address, past the first guard page.
    data_start: usize,

    fn of(data: usize, size: usize) Mapping {
        const page = page_size();
        const end = data + std.mem.alignForward(usize, size, alignment);
        assert(end % page == 0);
        const pages = (std.mem.alignForward(usize, size, alignment) + page - 1) / page;
        return .{
            .base = @ptrFromInt(end - pages * page - page),
            .length = (pages + 2) * page,
            .data_start = end - pages * page,
        };
    }
};

/// A block of `size` bytes (0 allowed: then every access faults), `alignment`-aligned, ending
/// (rounded up) at a guard page.
pub fn alloc(size: usize) error{OutOfMemory}![]align(alignment) u8 {
    const page = page_size();
    const rounded = std.mem.alignForward(usize, size, alignment);
    const pages = (rounded + page - 1) / page;
    const length = std.math.mul(usize, pages + 2, page) catch return error.OutOfMemory;
    const base = posix.mmap(null, length, posix.PROT.NONE, .{ .TYPE = .PRIVATE, .ANONYMOUS = true }, -1, 0) catch {
        return error.OutOfMemory;
    };
    const data_pages = base.ptr + page;
    if (pages > 0) {
        posix.mprotect(@alignCast(data_pages[0 .. pages * page]), posix.PROT.READ | posix.PROT.WRITE) catch {
            posix.munmap(base);
            return error.OutOfMemory;
        };
    }
    const data: [*]align(alignment) u8 = @alignCast(data_pages + pages * page - rounded);
    const mapping = Mapping.of(@intFromPtr(data), size);
    assert(mapping.base == base.ptr);
    assert(mapping.length == length);
    fill_canary(@intFromPtr(data_pages), @intFromPtr(data));
    @memset(data[0..size], junk);
    fill_canary(@intFromPtr(data) + size, @intFromPtr(data) + rounded);
    return data[0..size];
}

fn fill_canary(begin: usize, end: usize) void {
    for (begin..end) |address| @as(*u8, @ptrFromInt(address)).* = canary(address);
}

/// Where a block's canary was overwritten: bytes from the block's start to the first bad byte
/// (negative: before the block, in the head).
pub const Damage = struct {
    offset: i64,
};

fn first_bad(begin: usize, end: usize) ?usize {
    for (begin..end) |address| {
        if (@as(*const u8, @ptrFromInt(address)).* != canary(address)) return address;
    }
    return null;
}

/// Whether the canaries around `block` (from `alloc`) are intact; the first damage if not.
pub fn check(block: []align(alignment) const u8) ?Damage {
    const data = @intFromPtr(block.ptr);
    const mapping = Mapping.of(data, block.len);
    const head = first_bad(mapping.data_start, data);
    const tail = first_bad(data + block.len, data + std.mem.alignForward(usize, block.len, alignment));
    const bad = head orelse tail orelse return null;
    return .{ .offset = @as(i64, @intCast(bad)) - @as(i64, @intCast(data)) };
}

/// Unmaps `block` (from `alloc`) and returns what `check` says of it first.
pub fn free(block: []align(alignment) u8) ?Damage {
    const damage = check(block);
    const mapping = Mapping.of(@intFromPtr(block.ptr), block.len);
    posix.munmap(@alignCast(mapping.base[0..mapping.length]));
    return damage;
}

test "guard: a block ends at its guard page, and its canaries catch a one-byte overrun" {
    // Sizes with slack and without, under a page and over: every write inside is fine, and one
    // byte past the requested end (or before the start) is named by check.
    for ([_]usize{ 1, 63, 64, 100, 4095, 4096, 5000, 65 * 1024 + 3 }) |size| {
        const block = try alloc(size);
        try std.testing.expectEqual(@as(usize, size), block.len);
        try std.testing.expectEqual(@as(usize, 0), @intFromPtr(block.ptr) % alignment);
        const end = @intFromPtr(block.ptr) + std.mem.alignForward(usize, size, alignment);
        try std.testing.expectEqual(@as(usize, 0), end % page_size());
        try std.testing.expect(std.mem.allEqual(u8, block, junk));
        @memset(block, 0x3c);
        try std.testing.expectEqual(@as(?Damage, null), check(block));
        if (size % alignment != 0) {
            const bytes: [*]u8 = block.ptr;
            bytes[size] +%= 1;
            try std.testing.expectEqual(@as(?Damage, .{ .offset = @intCast(size) }), check(block));
            bytes[size] -%= 1;
            try std.testing.expectEqual(@as(?Damage, null), check(block));
        }
        if (@intFromPtr(block.ptr) % page_size() != 0) {
            const before: [*]u8 = @ptrFromInt(@intFromPtr(block.ptr) - 1);
            before[0] +%= 1;
            try std.testing.expectEqual(@as(?Damage, .{ .offset = -1 }), free(block));
        } else {
            try std.testing.expectEqual(@as(?Damage, null), free(block));
        }
    }
}

test "guard: a write one byte past the aligned end faults (in a child process)" {
    // The fault is the point, so it happens in a fork: the child writes past the rounded end
    // and must die of SIGSEGV; reaching its exit is the failure.
    for ([_]usize{ 0, 64, 100, 4096 }) |size| {
        const block = try alloc(size);
        defer _ = free(block);
        const pid = try posix.fork();
        if (pid == 0) {
            // The test runner's handler would report the fault and abort: die of it instead.
            const default: posix.Sigaction = .{ .handler = .{ .handler = posix.SIG.DFL }, .mask = posix.sigemptyset(), .flags = 0 };
            posix.sigaction(posix.SIG.SEGV, &default, null);
            const past: *volatile u8 = @ptrFromInt(@intFromPtr(block.ptr) + std.mem.alignForward(usize, size, alignment));
            past.* = 1;
            posix.exit(0);
        }
        const result = posix.waitpid(pid, 0);
        try std.testing.expect(posix.W.IFSIGNALED(result.status));
        try std.testing.expectEqual(@as(u32, posix.SIG.SEGV), posix.W.TERMSIG(result.status));
    }
}
