//! Read-only file mappings (mmap PROT_READ, MAP_PRIVATE) for weights used in place: the file's
//! bytes are the buffer's memory, paged in by the OS as kernels read them, so loading costs no
//! copy and no memory beyond the page cache. Calls go to libc directly with their errno read
//! here, so that no failure (a missing file, a directory, an empty file, a refused mmap) ends in
//! a Zig `unreachable`: each is a status with a message naming the path and the OS error.
//!
//! Memory of a mapping is never written: the core refuses writes into it (read_only) before
//! they would fault. A file truncated while mapped makes reads past its new end fault (SIGBUS),
//! as with any mapping; the caller checks the file it mapped is the one it opened.

const std = @import("std");
const builtin = @import("builtin");
const status_module = @import("status.zig");
const Status = status_module.Status;
const fail = status_module.fail;
const c = std.c;
const is_windows = builtin.os.tag == .windows;
/// Windows maps with CreateFileMappingW/MapViewOfFile (windows.zig); a struct with nothing
/// elsewhere, so the Windows declarations are never compiled for other targets.
const win = if (is_windows) @import("windows.zig") else struct {};

/// The longest path accepted, NUL terminator included (Linux's PATH_MAX): the path is copied
/// onto the stack to terminate it, so no heap allocation depends on the caller's length.
pub const path_bytes_max = std.fs.max_path_bytes;

pub const Mapping = struct {
    memory: []align(std.heap.page_size_min) u8,
    device: u64,
    inode: u64,
};

/// Why a mapping failed: the step, and the errno or the reason.
pub const Failure = union(enum) {
    /// open, fstat or mmap failed with this errno.
    os: struct { step: []const u8, errno: std.posix.E },
    /// A Win32 call failed with this GetLastError code (Windows only).
    win32: struct { step: []const u8, code: u32 },
    /// The path is not valid UTF-8 or too long for Windows (Windows only).
    bad_path,
    not_regular,
    empty,
    too_large: u64,
    nul_in_path,

    /// Records the failure's message and returns its status.
    pub fn report(self: Failure, path: []const u8) Status {
        return switch (self) {
            .os => |os| fail(.io_error, "map file {s}: {s} failed: {s} (errno {d})", .{ path, os.step, @tagName(os.errno), @intFromEnum(os.errno) }),
            .win32 => |call| fail(.io_error, "map file {s}: {s} failed (Windows error {d})", .{ path, call.step, call.code }),
            .bad_path => fail(.invalid_argument, "map file {s}: not valid UTF-8, or too long for Windows", .{path}),
            .not_regular => fail(.io_error, "map file {s}: not a regular file", .{path}),
            .empty => fail(.io_error, "map file {s}: the file is empty (nothing to map)", .{path}),
            .too_large => |size| fail(.invalid_argument, "map file {s}: {d} bytes exceed buffer_bytes_max", .{ path, size }),
            .nul_in_path => fail(.invalid_argument, "map file: the path contains a NUL byte", .{}),
        };
    }
};

pub const Outcome = union(enum) { ok, failed: Failure };

fn last_errno() std.posix.E {
    return @enumFromInt(c._errno().*);
}

/// Maps the whole file at `path` read-only into `out`. The file descriptor is closed before
/// returning (the mapping keeps the file's pages reachable).
pub fn map(path: []const u8, size_max: u64, out: *Mapping) Outcome {
    std.debug.assert(path.len < path_bytes_max);
    if (std.mem.indexOfScalar(u8, path, 0) != null) return .{ .failed = .nul_in_path };
    var terminated: [path_bytes_max:0]u8 = undefined;
    if (comptime is_windows) return map_windows(path, size_max, out);
    @memcpy(terminated[0..path.len], path);
    terminated[path.len] = 0;
    const fd = open: while (true) {
        const fd = c.open(@ptrCast(&terminated), .{ .ACCMODE = .RDONLY, .CLOEXEC = true });
        if (fd >= 0) break :open fd;
        const errno = last_errno();
        if (errno == .INTR) continue;
        return .{ .failed = .{ .os = .{ .step = "open", .errno = errno } } };
    };
    defer _ = c.close(fd);
    var stat: c.Stat = undefined;
    if (c.fstat(fd, &stat) != 0) return .{ .failed = .{ .os = .{ .step = "fstat", .errno = last_errno() } } };
    if (!c.S.ISREG(stat.mode)) return .{ .failed = .not_regular };
    if (stat.size <= 0) return .{ .failed = .empty };
    const size: u64 = @intCast(stat.size);
    if (size > size_max or size > std.math.maxInt(usize)) return .{ .failed = .{ .too_large = size } };
    const address = c.mmap(null, @intCast(size), c.PROT.READ, .{ .TYPE = .PRIVATE }, fd, 0);
    if (address == c.MAP_FAILED) return .{ .failed = .{ .os = .{ .step = "mmap", .errno = last_errno() } } };
    const base: [*]align(std.heap.page_size_min) u8 = @ptrCast(@alignCast(address));
    out.* = .{
        .memory = base[0..@intCast(size)],
        .device = @intCast(stat.dev),
        .inode = @intCast(stat.ino),
    };
    return .ok;
}

fn map_windows(path: []const u8, size_max: u64, out: *Mapping) Outcome {
    switch (win.map(path, size_max)) {
        .ok => |view| {
            out.* = .{ .memory = view.memory, .device = view.device, .inode = view.inode };
            return .ok;
        },
        .failed => |failure| return .{ .failed = switch (failure) {
            .win32 => |call| .{ .win32 = .{ .step = call.step, .code = call.code } },
            .bad_path => .bad_path,
            .not_regular => .not_regular,
            .empty => .empty,
            .too_large => |size| .{ .too_large = size },
        } },
    }
}

/// Unmaps a mapping made by `map`. munmap of a whole live mapping cannot fail; if the OS says
/// otherwise the pages stay mapped (a leak, never a crash).
pub fn unmap(memory: []align(std.heap.page_size_min) u8) void {
    if (comptime is_windows) return win.unmap(memory);
    _ = c.munmap(@ptrCast(memory.ptr), memory.len);
}

/// madvise over [offset, offset + length) of a mapping, widened to whole pages: 0 normal,
/// 1 random, 2 sequential, 3 will need.
pub fn advise(memory: []align(std.heap.page_size_min) u8, offset: u64, length: u64, advice: u32) Status {
    if (advice > 3) return fail(.invalid_argument, "advise: advice {d} is not 0 (normal), 1 (random), 2 (sequential) or 3 (will need)", .{advice});
    // Windows has no madvise; its mappings are paged in on demand, so the advice is only a hint
    // that does not apply there.
    if (comptime is_windows) return .ok;
    const native: u32 = switch (advice) {
        0 => std.posix.MADV.NORMAL,
        1 => std.posix.MADV.RANDOM,
        2 => std.posix.MADV.SEQUENTIAL,
        3 => std.posix.MADV.WILLNEED,
        else => return fail(.invalid_argument, "advise: advice {d} is not 0 (normal), 1 (random), 2 (sequential) or 3 (will need)", .{advice}),
    };
    if (length == 0) return .ok;
    const page = std.heap.pageSize();
    const begin = std.mem.alignBackward(u64, offset, page);
    const end = @min(std.mem.alignForward(u64, offset + length, page), std.mem.alignForward(u64, memory.len, page));
    const start: [*]align(std.heap.page_size_min) u8 = @alignCast(memory.ptr + @as(usize, @intCast(begin)));
    if (c.madvise(@ptrCast(start), @intCast(end - begin), native) != 0) {
        const errno = last_errno();
        return fail(.io_error, "advise: madvise failed: {s} (errno {d})", .{ @tagName(errno), @intFromEnum(errno) });
    }
    return .ok;
}

const testing = std.testing;

test "a file maps read-only with its size, device and inode; failures are statuses" {
    var directory = testing.tmpDir(.{});
    defer directory.cleanup();
    try directory.dir.writeFile(.{ .sub_path = "weights.bin", .data = "graft mapped bytes" });
    var buffer: [std.fs.max_path_bytes]u8 = undefined;
    const path = try directory.dir.realpath("weights.bin", &buffer);
    var mapped: Mapping = undefined;
    try testing.expectEqual(Outcome.ok, map(path, 1 << 53, &mapped));
    try testing.expectEqualStrings("graft mapped bytes", mapped.memory);
    const stat = try directory.dir.statFile("weights.bin");
    try testing.expectEqual(@as(u64, @intCast(stat.inode)), mapped.inode);
    try testing.expectEqual(Status.ok, advise(mapped.memory, 3, 5, 3));
    try testing.expectEqual(Status.invalid_argument, advise(mapped.memory, 0, 1, 9));
    unmap(mapped.memory);

    try testing.expect(map(path, 4, &mapped).failed == .too_large);
    try directory.dir.writeFile(.{ .sub_path = "empty.bin", .data = "" });
    const empty = try directory.dir.realpath("empty.bin", &buffer);
    try testing.expect(map(empty, 1 << 53, &mapped).failed == .empty);
    const missing = "/nonexistent/graft/weights.gguf";
    const failure = map(missing, 1 << 53, &mapped).failed;
    try testing.expectEqual(std.posix.E.NOENT, failure.os.errno);
    try testing.expectEqual(Status.io_error, failure.report(missing));
    try testing.expect(map("/", 1 << 53, &mapped).failed == .not_regular);
    try testing.expect(map("a\x00b", 1 << 53, &mapped).failed == .nul_in_path);
}
