//! Best-fit free-list allocator over the offsets of one buffer (ggml-alloc's design). Free
//! blocks are kept sorted by offset, so freeing coalesces with both neighbours in one pass. In
//! measure mode the buffer is unbounded: allocation never fails and `size_max_bytes` reports how
//! big a real buffer must be for the same sequence of calls.
//!
//! Live blocks are tracked too (sorted by offset), so a free must name a live block exactly:
//! a double free or a free with the wrong size is an error, never a corrupted free list. The
//! safe build checks the lists' invariants after every change.

const std = @import("std");
const assert = std.debug.assert;

pub const Error = error{ OutOfSpace, FreeBlocksFull, InvalidFree, InvalidSize };

/// The largest size one block may have: 2^53 bytes (TypeScript's exact integers), so that
/// rounding a size up to the alignment can never wrap.
pub const block_bytes_max: u64 = 1 << 53;

pub const Block = struct {
    offset: u64,
    size: u64,
};

pub const Allocator = struct {
    /// Sorted by offset, never adjacent (adjacent blocks are merged), never empty.
    blocks: []Block,
    block_count: u32,
    /// The blocks handed out and not freed, sorted by offset, disjoint.
    live: []Block,
    size_bytes: u64,
    alignment: u64,
    measure: bool,
    /// The highest end offset ever handed out: the buffer size this sequence needs.
    size_max_bytes: u64,
    live_blocks: u64,
    live_bytes: u64,

    /// `blocks` is the caller's storage for free blocks and `live` for live ones; their lengths
    /// are the limits (a free that would need more free blocks fails with FreeBlocksFull, an
    /// alloc that would need more live blocks with the same).
    pub fn init(blocks: []Block, live: []Block, size_bytes: u64, alignment: u64, measure: bool) Allocator {
        assert(blocks.len >= 1);
        assert(std.math.isPowerOfTwo(alignment));
        var self: Allocator = .{
            .blocks = blocks,
            .block_count = 0,
            .live = live,
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

    /// `size` rounded up to the alignment (sizes above block_bytes_max are rejected before).
    pub fn aligned_size(self: *const Allocator, size: u64) u64 {
        return std.mem.alignForward(u64, @max(@min(size, block_bytes_max), 1), self.alignment);
    }

    /// Returns the offset of a block of at least `size` bytes: the smallest free block that fits.
    pub fn alloc(self: *Allocator, size: u64) Error!u64 {
        if (size > block_bytes_max) return error.InvalidSize;
        if (self.live_blocks == self.live.len) return error.FreeBlocksFull;
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
        self.insert_live(.{ .offset = offset, .size = needed });
        self.live_bytes += needed;
        assert(offset % self.alignment == 0);
        self.check_invariants();
        return offset;
    }

    /// Where a live block at `offset` is, or would be inserted, in `live`.
    fn live_position(self: *const Allocator, offset: u64) usize {
        var low: usize = 0;
        var high: usize = @intCast(self.live_blocks);
        while (low < high) {
            const middle = low + (high - low) / 2;
            if (self.live[middle].offset < offset) low = middle + 1 else high = middle;
        }
        return low;
    }

    fn insert_live(self: *Allocator, block: Block) void {
        const count: usize = @intCast(self.live_blocks);
        assert(count < self.live.len);
        const position = self.live_position(block.offset);
        std.mem.copyBackwards(Block, self.live[position + 1 .. count + 1], self.live[position..count]);
        self.live[position] = block;
        self.live_blocks += 1;
    }

    fn remove_live(self: *Allocator, position: usize) void {
        const count: usize = @intCast(self.live_blocks);
        std.mem.copyForwards(Block, self.live[position .. count - 1], self.live[position + 1 .. count]);
        self.live_blocks -= 1;
    }

    /// Safe build: the free list is sorted, disjoint and coalesced, the live list sorted and
    /// disjoint, and (with a bounded buffer) free and live bytes add up to the buffer.
    fn check_invariants(self: *const Allocator) void {
        if (!std.debug.runtime_safety) return;
        var free_bytes: u64 = 0;
        for (self.blocks[0..self.block_count], 0..) |block, index| {
            assert(block.size > 0);
            if (index > 0) assert(self.end(@intCast(index - 1)) < block.offset); // disjoint, not adjacent
            free_bytes += block.size;
        }
        var live_bytes: u64 = 0;
        for (self.live[0..@intCast(self.live_blocks)], 0..) |block, index| {
            if (index > 0) {
                const before = self.live[index - 1];
                assert(before.offset + before.size <= block.offset);
            }
            live_bytes += block.size;
        }
        assert(live_bytes == self.live_bytes);
        if (!self.measure) assert(free_bytes + live_bytes == self.size_bytes);
    }

    /// Returns a block to the free list, merging it with free neighbours. Freeing a range that
    /// is outside the buffer or overlaps free memory (a double free) is an error.
    pub fn free(self: *Allocator, offset: u64, size: u64) Error!void {
        if (size > block_bytes_max) return error.InvalidSize;
        const freed = self.aligned_size(size);
        // The block must be live, with the size it was allocated with (after rounding).
        const position = self.live_position(offset);
        if (position == self.live_blocks) return error.InvalidFree;
        const live_block = self.live[position];
        if (live_block.offset != offset or live_block.size != freed) return error.InvalidFree;
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
        self.remove_live(position);
        self.live_bytes -= freed;
        self.check_invariants();
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
    var live: [8]Block = undefined;
    var allocator = Allocator.init(&storage, &live, 1024, 16, false);
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
    var live: [8]Block = undefined;
    var allocator = Allocator.init(&storage, &live, 256, 16, false);
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
    var live: [8]Block = undefined;
    var allocator = Allocator.init(&storage, &live, 4096, 64, false);
    _ = try allocator.alloc(1);
    try testing.expectEqual(@as(u64, 64), try allocator.alloc(3));
    try testing.expectEqual(@as(u64, 128), allocator.size_max_bytes);
}

test "out of space, double free and foreign ranges are errors" {
    var storage: [8]Block = undefined;
    var live: [8]Block = undefined;
    var allocator = Allocator.init(&storage, &live, 128, 16, false);
    const a = try allocator.alloc(100);
    try testing.expectError(error.OutOfSpace, allocator.alloc(32));
    try allocator.free(a, 100);
    try testing.expectError(error.InvalidFree, allocator.free(a, 100));
    try testing.expectError(error.InvalidFree, allocator.free(4096, 16));
}

test "measure mode never fails and reports the size a real buffer needs" {
    var storage: [8]Block = undefined;
    var live: [8]Block = undefined;
    var allocator = Allocator.init(&storage, &live, 0, 32, true);
    const a = try allocator.alloc(1000);
    const b = try allocator.alloc(500);
    try allocator.free(a, 1000);
    _ = try allocator.alloc(900);
    _ = b;
    try testing.expectEqual(@as(u64, 1024 + 512), allocator.size_max_bytes);
}

test "a free must name a live block with its size: wrong sizes and double frees are errors" {
    var storage: [8]Block = undefined;
    var live: [8]Block = undefined;
    var allocator = Allocator.init(&storage, &live, 1024, 16, false);
    const a = try allocator.alloc(64);
    const b = try allocator.alloc(64);
    // The old allocator took these: the wrong size freed b's bytes along with a's, so the same
    // bytes were handed out twice.
    try testing.expectError(error.InvalidFree, allocator.free(a, 128));
    try testing.expectError(error.InvalidFree, allocator.free(a, 16));
    try testing.expectError(error.InvalidFree, allocator.free(a + 16, 48));
    try allocator.free(a, 60); // rounds to the same 64 bytes
    try testing.expectError(error.InvalidFree, allocator.free(a, 64));
    try testing.expectEqual(@as(u64, 1), allocator.live_blocks);
    const c = try allocator.alloc(64);
    try testing.expect(c != b);
    try allocator.free(b, 64);
    try allocator.free(c, 64);
    try testing.expectEqual(@as(u64, 1024), allocator.largest_free_block());
}

test "sizes that would wrap when aligned are rejected" {
    var storage: [8]Block = undefined;
    var live: [8]Block = undefined;
    var allocator = Allocator.init(&storage, &live, 0, 64, true);
    try testing.expectError(error.InvalidSize, allocator.alloc(std.math.maxInt(u64)));
    try testing.expectError(error.InvalidSize, allocator.alloc(block_bytes_max + 1));
    try testing.expectError(error.InvalidSize, allocator.free(0, std.math.maxInt(u64)));
    try testing.expectEqual(@as(u64, 0), allocator.live_blocks);
}
