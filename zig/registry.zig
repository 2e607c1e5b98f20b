//! Handle tables. TypeScript never holds a native pointer to a core object: it holds a u32
//! handle (kind, generation, slot). A freed slot bumps its generation, and a slot whose
//! generation would wrap is retired for good, so a handle never names two objects in one
//! process: a stale handle (use after free, double free) or a handle of another kind is
//! detected instead of dereferenced, however many objects came and went before.
//!
//! Objects in use by a running computation are acquired: `remove` refuses (error.Busy) while
//! an acquisition is held, so no call order frees memory under a running kernel.

const std = @import("std");
const assert = std.debug.assert;

pub const slot_bits = 16;
pub const generation_bits = 13;
pub const kind_bits = 3;
pub const slots_max = 1 << slot_bits;
/// Generations run 1..generation_max; 0 marks a retired slot.
pub const generation_max = (1 << generation_bits) - 1;

pub const Kind = enum(u3) { buffer = 1, allocator = 2, pool = 3, plan = 4 };

comptime {
    assert(slot_bits + generation_bits + kind_bits == 32);
}

pub const InsertError = error{
    /// `live_max` objects of this kind are alive.
    LiveLimit,
    /// Every slot's generations are used up (slots_max * generation_max handles made).
    HandlesExhausted,
};

pub const RemoveError = error{
    /// Not a live handle of this kind.
    NotLive,
    /// A running computation holds it (see `acquire`).
    Busy,
};

/// A table of at most `live_max` live objects of one kind. Slots are taken round-robin, so a
/// slot comes back only after every other slot was used, and handles stay unique for
/// slots_max * generation_max objects of the kind: a limit named by `HandlesExhausted`.
pub fn Registry(comptime T: type, comptime kind: Kind, comptime live_max: u32) type {
    comptime assert(live_max <= slots_max);
    return struct {
        const Self = @This();
        pub const capacity_max = live_max;

        items: [slots_max]?*T = [_]?*T{null} ** slots_max,
        /// Each slot's generation minus one (wrapping: a retired slot's 0 is 0xffff), so that a
        /// new table is all zeros: the core's tables then take no room in the wasm module's
        /// data section (four of them were 3.7 MB there), only zeroed memory.
        generations_stored: [slots_max]u16 = [_]u16{0} ** slots_max,
        /// Acquisitions held per slot.
        uses: [slots_max]u32 = [_]u32{0} ** slots_max,
        /// The live slots, densely, for scans (`live_slots[0..live_count]`).
        live_slots: [live_max]u32 = undefined,
        /// Where each live slot sits in `live_slots`.
        live_position: [slots_max]u32 = undefined,
        live_count: u32 = 0,
        cursor: u32 = 0,
        mutex: std.Thread.Mutex = .{},

        pub fn insert(self: *Self, item: *T) InsertError!u32 {
            self.mutex.lock();
            defer self.mutex.unlock();
            if (self.live_count >= live_max) return error.LiveLimit;
            var scanned: u32 = 0;
            while (scanned < slots_max) : (scanned += 1) {
                const index = (self.cursor + scanned) % slots_max;
                if (self.items[index] != null or self.generation_of(index) == 0) continue;
                self.items[index] = item;
                self.uses[index] = 0;
                self.live_slots[self.live_count] = index;
                self.live_position[index] = self.live_count;
                self.live_count += 1;
                self.cursor = (index + 1) % slots_max;
                return encode(index, self.generation_of(index));
            }
            return error.HandlesExhausted;
        }

        pub fn get(self: *Self, handle: u32) ?*T {
            self.mutex.lock();
            defer self.mutex.unlock();
            const index = self.decode(handle) orelse return null;
            return self.items[index];
        }

        /// Like `get`, and holds the object: `remove` refuses until `release`.
        pub fn acquire(self: *Self, handle: u32) ?*T {
            self.mutex.lock();
            defer self.mutex.unlock();
            const index = self.decode(handle) orelse return null;
            const item = self.items[index] orelse return null;
            self.uses[index] += 1;
            return item;
        }

        pub fn release(self: *Self, handle: u32) void {
            self.mutex.lock();
            defer self.mutex.unlock();
            const index = self.decode(handle).?;
            assert(self.items[index] != null and self.uses[index] > 0);
            self.uses[index] -= 1;
        }

        /// The item, only while no computation holds it, with the table locked so none can
        /// start: the caller changes it and then calls `unlock`. Null (unlocked) when the
        /// handle is not live or the item is held (`busy` says which).
        pub fn lock_idle(self: *Self, handle: u32, busy: *bool) ?*T {
            self.mutex.lock();
            const index = self.decode(handle) orelse {
                self.mutex.unlock();
                busy.* = false;
                return null;
            };
            const item = self.items[index] orelse {
                self.mutex.unlock();
                busy.* = false;
                return null;
            };
            if (self.uses[index] > 0) {
                self.mutex.unlock();
                busy.* = true;
                return null;
            }
            return item;
        }

        pub fn unlock(self: *Self) void {
            self.mutex.unlock();
        }

        /// Removes the item and returns it; its handle is never valid again.
        pub fn remove(self: *Self, handle: u32) RemoveError!*T {
            self.mutex.lock();
            defer self.mutex.unlock();
            const index = self.decode(handle) orelse return error.NotLive;
            const item = self.items[index] orelse return error.NotLive;
            if (self.uses[index] > 0) return error.Busy;
            self.items[index] = null;
            self.set_generation(index, next_generation(self.generation_of(index)));
            assert(self.live_count > 0);
            const position = self.live_position[index];
            const last = self.live_slots[self.live_count - 1];
            self.live_slots[position] = last;
            self.live_position[last] = position;
            self.live_count -= 1;
            return item;
        }

        /// The live items and their handles, for callers that scan under `mutex`.
        pub fn live_index(self: *const Self, position: u32) u32 {
            assert(position < self.live_count);
            return self.live_slots[position];
        }

        /// The handle of an occupied slot, for callers that scan under the mutex.
        pub fn handle_at(self: *const Self, index: u32) u32 {
            assert(self.items[index] != null);
            return encode(index, self.generation_of(index));
        }

        fn decode(self: *Self, handle: u32) ?u32 {
            const handle_kind: u32 = handle >> (slot_bits + generation_bits);
            if (handle_kind != @intFromEnum(kind)) return null;
            const index = handle & (slots_max - 1);
            const generation = (handle >> slot_bits) & generation_max;
            if (generation == 0 or generation != self.generation_of(index)) return null;
            return index;
        }

        /// The slot's current generation (0: retired).
        pub fn generation_of(self: *const Self, index: u32) u16 {
            return self.generations_stored[index] +% 1;
        }

        pub fn set_generation(self: *Self, index: u32, value: u16) void {
            self.generations_stored[index] = value -% 1;
        }

        fn encode(index: u32, generation: u16) u32 {
            assert(index < slots_max and generation != 0);
            return (@as(u32, @intFromEnum(kind)) << (slot_bits + generation_bits)) |
                (@as(u32, generation) << slot_bits) | index;
        }

        /// The next generation, or 0 (retired) after the last.
        fn next_generation(generation: u16) u16 {
            return if (generation >= generation_max) 0 else generation + 1;
        }
    };
}

const testing = std.testing;

test "a freed handle is never valid again, and kinds do not mix" {
    const Item = struct { value: u32 };
    var registry: Registry(Item, .buffer, 4) = .{};
    var item: Item = .{ .value = 7 };
    const handle = try registry.insert(&item);
    try testing.expectEqual(@as(u32, 7), registry.get(handle).?.value);
    _ = try registry.remove(handle);
    try testing.expect(registry.get(handle) == null);
    try testing.expectError(error.NotLive, registry.remove(handle));
    const other_kind = (handle & ~(@as(u32, 0b111) << 29)) | (@as(u32, 2) << 29);
    try testing.expect(registry.get(other_kind) == null);
}

test "handles never repeat: slots go round-robin and retire when their generations run out" {
    const Item = struct { value: u32 };
    const Table = Registry(Item, .plan, 2);
    const table = try testing.allocator.create(Table);
    defer testing.allocator.destroy(table);
    table.* = .{};
    var item: Item = .{ .value = 1 };
    var seen = std.AutoHashMap(u32, void).init(testing.allocator);
    defer seen.deinit();
    // More cycles than one slot's generations (the old table reused slot 0 every time and
    // wrapped after 8,191), so every slot's generation is bumped at least once.
    const cycles = slots_max + 2 * generation_max;
    for (0..cycles) |_| {
        const handle = try table.insert(&item);
        try testing.expect(!seen.contains(handle));
        try seen.put(handle, {});
        _ = try table.remove(handle);
    }
    // A retired slot is skipped: exhaust slot 0 by hand and check it is never handed out.
    table.set_generation(table.cursor, generation_max);
    const last = try table.insert(&item);
    _ = try table.remove(last);
    try testing.expectEqual(@as(u16, 0), table.generation_of(last & (slots_max - 1)));
    const next = try table.insert(&item);
    try testing.expect(next & (slots_max - 1) != last & (slots_max - 1));
    _ = try table.remove(next);
}

test "the live limit is named, and an acquired item cannot be removed until released" {
    const Item = struct { value: u32 };
    var registry: Registry(Item, .buffer, 2) = .{};
    var item: Item = .{ .value = 1 };
    const a = try registry.insert(&item);
    const b = try registry.insert(&item);
    try testing.expectError(error.LiveLimit, registry.insert(&item));
    try testing.expect(registry.acquire(a) != null);
    try testing.expectError(error.Busy, registry.remove(a));
    registry.release(a);
    _ = try registry.remove(a);
    _ = try registry.remove(b);
    try testing.expectEqual(@as(u32, 0), registry.live_count);
}
