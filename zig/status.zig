//! Error reporting across the C ABI: every export returns a `Status`; the last failure's message
//! is kept so TypeScript can put it in the exception it throws. It is process-wide, not per
//! thread, because Deno runs non-blocking FFI calls on threads of its own.

const std = @import("std");
const node = @import("node.zig");

pub const Status = node.Status;

pub const message_size_max = 512;

var message_buffer: [message_size_max]u8 = undefined;
var message_length: usize = 0;
var message_mutex: std.Thread.Mutex = .{};

/// Records why a call fails and returns the status to hand back to the caller.
pub fn fail(status: Status, comptime format: []const u8, arguments: anytype) Status {
    std.debug.assert(status != .ok);
    message_mutex.lock();
    defer message_mutex.unlock();
    const written = std.fmt.bufPrint(&message_buffer, format, arguments) catch blk: {
        // A message longer than the buffer is cut, never dropped.
        break :blk message_buffer[0..];
    };
    message_length = written.len;
    return status;
}

/// Copies the last message into `destination` (cut to fit) and returns its full length.
pub fn copy_message(destination: []u8) usize {
    message_mutex.lock();
    defer message_mutex.unlock();
    const length = @min(destination.len, message_length);
    @memcpy(destination[0..length], message_buffer[0..length]);
    return message_length;
}
