//! Handle tables. TypeScript never holds a native pointer to a core object: it holds a u32
//! handle (kind, generation, slot). A freed slot bumps its generation, so a stale handle (use
//! after free, double free) or a handle of another kind is detected instead of dereferenced.

const std = @import("std");
const assert = std.debug.assert;

pub const slot_bits = 16;
pub const generation_bits = 13;
pub const kind_bits = 3;
pub const slots_max = 1 << slot_bits;

pub const Kind = enum(u3) { buffer = 1, allocator = 2, pool = 3, plan = 4 };

comptime {
    assert(slot_bits + generation_bits + kind_bits == 32);
}

pub fn Registry(comptime T: type, comptime kind: Kind, comptime capacity: u32) type {
    comptime assert(capacity <= slots_max);
    return struct {
        const Self = @This();
        pub const capacity_max = capacity;

        items: [capacity]?*T = [_]?*T{null} ** capacity,
        generations: [capacity]u16 = [_]u16{1} ** capacity,
        live_count: u32 = 0,
        mutex: std.Thread.Mutex = .{},

        pub fn insert(self: *Self, item: *T) ?u32 {
            self.mutex.lock();
            defer self.mutex.unlock();
            for (&self.items, 0..) |*slot, index| {
                if (slot.* == null) {
                    slot.* = item;
                    self.live_count += 1;
                    return encode(@intCast(index), self.generations[index]);
                }
            }
            return null;
        }

        pub fn get(self: *Self, handle: u32) ?*T {
            const index = self.decode(handle) orelse return null;
            return self.items[index];
        }

        /// Removes the item and returns it, or null when the handle is not live.
        pub fn remove(self: *Self, handle: u32) ?*T {
            self.mutex.lock();
            defer self.mutex.unlock();
            const index = self.decode(handle) orelse return null;
            const item = self.items[index] orelse return null;
            self.items[index] = null;
            self.generations[index] = next_generation(self.generations[index]);
            assert(self.live_count > 0);
            self.live_count -= 1;
            return item;
        }

        /// The handle of an occupied slot, for callers that scan `items` under the mutex.
        pub fn handle_at(self: *const Self, index: u32) u32 {
            assert(self.items[index] != null);
            return encode(index, self.generations[index]);
        }

        fn decode(self: *Self, handle: u32) ?u32 {
            const handle_kind: u32 = handle >> (slot_bits + generation_bits);
            if (handle_kind != @intFromEnum(kind)) return null;
            const index = handle & (slots_max - 1);
            if (index >= capacity) return null;
            const generation = (handle >> slot_bits) & ((1 << generation_bits) - 1);
            if (generation != self.generations[index]) return null;
            return index;
        }

        fn encode(index: u32, generation: u16) u32 {
            assert(index < capacity);
            return (@as(u32, @intFromEnum(kind)) << (slot_bits + generation_bits)) |
                (@as(u32, generation) << slot_bits) | index;
        }

        fn next_generation(generation: u16) u16 {
            const next = (generation + 1) & ((1 << generation_bits) - 1);
            return if (next == 0) 1 else @intCast(next);
        }
    };
}

test "a freed handle is never valid again, and kinds do not mix" {
    const Item = struct { value: u32 };
    var registry: Registry(Item, .buffer, 4) = .{};
    var item: Item = .{ .value = 7 };
    const handle = registry.insert(&item).?;
    try std.testing.expectEqual(@as(u32, 7), registry.get(handle).?.value);
    try std.testing.expect(registry.remove(handle) != null);
    try std.testing.expect(registry.get(handle) == null);
    try std.testing.expect(registry.remove(handle) == null);
    const other_kind = (handle & ~(@as(u32, 0b111) << 29)) | (@as(u32, 2) << 29);
    try std.testing.expect(registry.get(other_kind) == null);
}
