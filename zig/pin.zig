//! Keeps the library mapped for the life of the process. Deno closes a dynamic library when its
//! last handle goes (and on an uncaught exception while a nonblocking call runs), which would
//! unmap the code that pool threads and in-flight computes are executing. Zig 0.15's build API
//! has no `-z nodelete`, so the library takes one more reference to itself with RTLD_NODELETE:
//! later dlclose calls then leave it mapped.

const std = @import("std");
const builtin = @import("builtin");
/// Windows pins with GetModuleHandleExW (windows.zig); empty elsewhere.
const windows = if (builtin.os.tag == .windows) @import("windows.zig") else struct {};
const Status = @import("node.zig").Status;
const fail = @import("status.zig").fail;
const target = @import("target.zig");

const DlInfo = extern struct {
    dli_fname: ?[*:0]const u8,
    dli_fbase: ?*anyopaque,
    dli_sname: ?[*:0]const u8,
    dli_saddr: ?*anyopaque,
};

extern "c" fn dladdr(address: *const anyopaque, info: *DlInfo) c_int;

var pinned = std.atomic.Value(bool).init(false);

/// Pins the library (idempotent). Called by the loader right after it opens the library.
pub fn pin() Status {
    // A wasm instance is never unloaded under running code: nothing to pin.
    if (comptime target.is_wasm) return .ok;
    if (pinned.load(.acquire)) return .ok;
    if (comptime builtin.os.tag == .windows) {
        var code: u32 = 0;
        if (!windows.pin_module(@ptrCast(&pin), &code)) {
            return fail(.unsupported, "cannot pin the library in memory (GetModuleHandleExW failed: Windows error {d})", .{code});
        }
        pinned.store(true, .release);
        return .ok;
    }
    var info: DlInfo = undefined;
    if (dladdr(@ptrCast(&pin), &info) == 0 or info.dli_fname == null) {
        return fail(.unsupported, "cannot find the library's own path (dladdr failed)", .{});
    }
    const handle = std.c.dlopen(info.dli_fname.?, .{ .NOW = true, .NOLOAD = true, .NODELETE = true });
    if (handle == null) {
        return fail(.unsupported, "cannot pin the library {s} in memory (dlopen RTLD_NODELETE failed)", .{info.dli_fname.?});
    }
    // The reference is never dropped: that is the point.
    pinned.store(true, .release);
    return .ok;
}
