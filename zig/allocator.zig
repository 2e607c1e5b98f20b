//! Best-fit free-list allocator over the offsets of one buffer (ggml-alloc's design). Free
//! blocks are kept sorted by offset, so freeing coalesces with both neighbours in one pass. In
//! measure mode the buffer is unbounded: allocation never fails and `size_max_bytes` reports how
//! big a real buffer must be for the same sequence of calls.

const std = @import("std");
const assert = std.debug.assert;

pub const Error = error{ OutOfSpace, FreeBlocksFull, InvalidFree };

pub const Block = struct {
    offset: u64,
    size: u64,
};

pub const Allocator = struct {
    /// Sorted by offset, never adjacent (adjacent blocks are merged), never empty.
    blocks: []Block,
    block_count: u32,
    size_bytes: u64,
    alignment: u64,
    measure: bool,
    /// The highest end offset ever handed out: the buffer size this sequence needs.
    size_max_bytes: u64,
    live_blocks: u64,
    live_bytes: u64,

    /// `blocks` is the caller's storage for free blocks; its length is the free-block limit.
    pub fn init(blocks: []Block, size_bytes: u64, alignment: u64, measure: bool) Allocator {
        assert(blocks.len >= 1);
        assert(std.math.isPowerOfTwo(alignment));
        var self: Allocator = .{
            .blocks = blocks,
            .block_count = 0,
            .size_bytes = if (measure) std.math.maxInt(u64) / 2 else size_bytes,
            .alignment = alignment,
            .measure = measure,
            .size_max_bytes = 0,
            .live_blocks = 0,
            .live_bytes = 0,
        };
        self.reset();
        return self;
    }

    pub fn reset(self: *Allocator) void {
        self.block_count = 0;
        if (self.size_bytes > 0) {
            self.blocks[0] = .{ .offset = 0, .size = self.size_bytes };
            self.block_count = 1;
        }
        self.live_blocks = 0;
        self.live_bytes = 0;
    }

    pub fn aligned_size(self: *const Allocator, size: u64) u64 {
        return std.mem.alignForward(u64, @max(size, 1), self.alignment);
    }

    /// Returns the offset of a block of at least `size` bytes: the smallest free block that fits.
    pub fn alloc(self: *Allocator, size: u64) Error!u64 {
        const needed = self.aligned_size(size);
        var best: ?u32 = null;
        for (self.blocks[0..self.block_count], 0..) |block, index| {
            if (block.size < needed) continue;
            if (best == null or block.size < self.blocks[best.?].size) best = @intCast(index);
        }
        const index = best orelse return error.OutOfSpace;
        const block = &self.blocks[index];
        const offset = block.offset;
        block.offset += needed;
        block.size -= needed;
        if (block.size == 0) self.remove_block(index);
        self.size_max_bytes = @max(self.size_max_bytes, offset + needed);
        self.live_blocks += 1;
        self.live_bytes += needed;
        assert(offset % self.alignment == 0);
        return offset;
    }

    /// Returns a block to the free list, merging it with free neighbours. Freeing a range that
    /// is outside the buffer or overlaps free memory (a double free) is an error.
    pub fn free(self: *Allocator, offset: u64, size: u64) Error!void {
        const freed = self.aligned_size(size);
        if (offset % self.alignment != 0) return error.InvalidFree;
        if (offset > self.size_bytes or freed > self.size_bytes - offset) return error.InvalidFree;
        if (self.live_blocks == 0 or freed > self.live_bytes) return error.InvalidFree;
        // The first free block after the freed range.
        var index: u32 = 0;
        while (index < self.block_count and self.blocks[index].offset < offset) index += 1;
        const merges_before = index > 0 and self.end(index - 1) == offset;
        const merges_after = index < self.block_count and offset + freed == self.blocks[index].offset;
        if (index > 0 and self.end(index - 1) > offset) return error.InvalidFree;
        if (index < self.block_count and offset + freed > self.blocks[index].offset) {
            return error.InvalidFree;
        }
        if (merges_before and merges_after) {
            self.blocks[index - 1].size += freed + self.blocks[index].size;
            self.remove_block(index);
        } else if (merges_before) {
            self.blocks[index - 1].size += freed;
        } else if (merges_after) {
            self.blocks[index].offset = offset;
            self.blocks[index].size += freed;
        } else {
            if (self.block_count == self.blocks.len) return error.FreeBlocksFull;
            std.mem.copyBackwards(
                Block,
                self.blocks[index + 1 .. self.block_count + 1],
                self.blocks[index..self.block_count],
            );
            self.blocks[index] = .{ .offset = offset, .size = freed };
            self.block_count += 1;
        }
        self.live_blocks -= 1;
        self.live_bytes -= freed;
    }

    pub fn largest_free_block(self: *const Allocator) u64 {
        var largest: u64 = 0;
        for (self.blocks[0..self.block_count]) |block| largest = @max(largest, block.size);
        return largest;
    }

    fn end(self: *const Allocator, index: u32) u64 {
        return self.blocks[index].offset + self.blocks[index].size;
    }

    fn remove_block(self: *Allocator, index: u32) void {
        assert(index < self.block_count);
        std.mem.copyForwards(
            Block,
            self.blocks[index .. self.block_count - 1],
            self.blocks[index + 1 .. self.block_count],
        );
        self.block_count -= 1;
    }
};

const testing = std.testing;

test "best fit picks the smallest block that fits" {
    var storage: [8]Block = undefined;
    var allocator = Allocator.init(&storage, 1024, 16, false);
    const a = try allocator.alloc(100); // 0..112
    const b = try allocator.alloc(16); // 112..128
    const c = try allocator.alloc(48); // 128..176
    _ = try allocator.alloc(16); // 176..192, keeps c's hole apart from the tail
    try allocator.free(a, 100);
    try allocator.free(c, 48);
    try testing.expectEqual(c, try allocator.alloc(40));
    _ = b;
}

test "freeing coalesces with both neighbours" {
    var storage: [8]Block = undefined;
    var allocator = Allocator.init(&storage, 256, 16, false);
    const a = try allocator.alloc(64);
    const b = try allocator.alloc(64);
    const c = try allocator.alloc(64);
    try allocator.free(a, 64);
    try allocator.free(c, 64);
    try testing.expectEqual(@as(u32, 2), allocator.block_count);
    try allocator.free(b, 64);
    try testing.expectEqual(@as(u32, 1), allocator.block_count);
    try testing.expectEqual(@as(u64, 256), allocator.largest_free_block());
    try testing.expectEqual(@as(u64, 0), allocator.live_bytes);
}

test "offsets are aligned and sizes rounded up" {
    var storage: [8]Block = undefined;
    var allocator = Allocator.init(&storage, 4096, 64, false);
    _ = try allocator.alloc(1);
    try testing.expectEqual(@as(u64, 64), try allocator.alloc(3));
    try testing.expectEqual(@as(u64, 128), allocator.size_max_bytes);
}

test "out of space, double free and foreign ranges are errors" {
    var storage: [8]Block = undefined;
    var allocator = Allocator.init(&storage, 128, 16, false);
    const a = try allocator.alloc(100);
    try testing.expectError(error.OutOfSpace, allocator.alloc(32));
    try allocator.free(a, 100);
    try testing.expectError(error.InvalidFree, allocator.free(a, 100));
    try testing.expectError(error.InvalidFree, allocator.free(4096, 16));
}

test "measure mode never fails and reports the size a real buffer needs" {
    var storage: [8]Block = undefined;
    var allocator = Allocator.init(&storage, 0, 32, true);
    const a = try allocator.alloc(1000);
    const b = try allocator.alloc(500);
    try allocator.free(a, 1000);
    _ = try allocator.alloc(900);
    _ = b;
    try testing.expectEqual(@as(u64, 1024 + 512), allocator.size_max_bytes);
}
