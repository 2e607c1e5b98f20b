//! The Windows side of the two places the core talks to the OS itself: read-only file mappings
//! (CreateFileMappingW/MapViewOfFile, as mapping.zig does with mmap elsewhere) and pinning the
//! library in memory (GetModuleHandleExW with GET_MODULE_HANDLE_EX_FLAG_PIN, as pin.zig does
//! with RTLD_NODELETE). Each failure is a status naming the step and GetLastError's code; the
//! declarations are Win32's, with its parameter names.

const std = @import("std");
const builtin = @import("builtin");
const windows = std.os.windows;

comptime {
    std.debug.assert(builtin.os.tag == .windows);
}

const HANDLE = windows.HANDLE;
const DWORD = windows.DWORD;
const BOOL = windows.BOOL;

extern "kernel32" fn CreateFileW(
    lpFileName: [*:0]const u16,
    dwDesiredAccess: DWORD,
    dwShareMode: DWORD,
    lpSecurityAttributes: ?*anyopaque,
    dwCreationDisposition: DWORD,
    dwFlagsAndAttributes: DWORD,
    hTemplateFile: ?HANDLE,
) callconv(.winapi) HANDLE;
extern "kernel32" fn GetFileInformationByHandle(
    hFile: HANDLE,
    lpFileInformation: *windows.BY_HANDLE_FILE_INFORMATION,
) callconv(.winapi) BOOL;
extern "kernel32" fn CreateFileMappingW(
    hFile: HANDLE,
    lpFileMappingAttributes: ?*anyopaque,
    flProtect: DWORD,
    dwMaximumSizeHigh: DWORD,
    dwMaximumSizeLow: DWORD,
    lpName: ?[*:0]const u16,
) callconv(.winapi) ?HANDLE;
extern "kernel32" fn MapViewOfFile(
    hFileMappingObject: HANDLE,
    dwDesiredAccess: DWORD,
    dwFileOffsetHigh: DWORD,
    dwFileOffsetLow: DWORD,
    dwNumberOfBytesToMap: usize,
) callconv(.winapi) ?*anyopaque;
extern "kernel32" fn UnmapViewOfFile(lpBaseAddress: *const anyopaque) callconv(.winapi) BOOL;
extern "kernel32" fn CloseHandle(hObject: HANDLE) callconv(.winapi) BOOL;
extern "kernel32" fn GetLastError() callconv(.winapi) DWORD;
extern "kernel32" fn GetModuleHandleExW(
    dwFlags: DWORD,
    lpModuleName: ?*const anyopaque,
    phModule: *?*anyopaque,
) callconv(.winapi) BOOL;

const GENERIC_READ: DWORD = 0x8000_0000;
const FILE_SHARE_READ: DWORD = 0x1;
const FILE_SHARE_DELETE: DWORD = 0x4;
const OPEN_EXISTING: DWORD = 3;
const FILE_ATTRIBUTE_NORMAL: DWORD = 0x80;
const FILE_ATTRIBUTE_DIRECTORY: DWORD = 0x10;
const PAGE_READONLY: DWORD = 0x02;
const FILE_MAP_READ: DWORD = 0x04;
const GET_MODULE_HANDLE_EX_FLAG_PIN: DWORD = 0x1;
const GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS: DWORD = 0x4;

/// The longest path in UTF-16 units, NUL included (Win32's limit for `\\?\` paths).
pub const path_units_max = 32767;

/// A mapped file: its bytes, and the volume serial and file index (device and inode).
pub const View = struct {
    memory: []align(std.heap.page_size_min) u8,
    device: u64,
    inode: u64,
};

/// Why a mapping failed.
pub const Failure = union(enum) {
    /// A Win32 call failed: the call and GetLastError's code.
    win32: struct { step: []const u8, code: u32 },
    bad_path,
    not_regular,
    empty,
    too_large: u64,
};

pub const Outcome = union(enum) { ok: View, failed: Failure };

/// Maps the whole file at `path` (UTF-8) read-only. The file and mapping handles are closed
/// before returning: the view keeps the file's pages reachable.
pub fn map(path: []const u8, size_max: u64) Outcome {
    var wide: [path_units_max:0]u16 = undefined;
    const units = std.unicode.utf8ToUtf16Le(wide[0..path_units_max], path) catch return .{ .failed = .bad_path };
    if (units >= path_units_max) return .{ .failed = .bad_path };
    wide[units] = 0;
    const file = CreateFileW(@ptrCast(&wide), GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_DELETE, null, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, null);
    if (file == windows.INVALID_HANDLE_VALUE) return win32_failure("CreateFileW");
    defer _ = CloseHandle(file);
    var info: windows.BY_HANDLE_FILE_INFORMATION = undefined;
    if (GetFileInformationByHandle(file, &info) == 0) return win32_failure("GetFileInformationByHandle");
    if (info.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY != 0) return .{ .failed = .not_regular };
    const size = (@as(u64, info.nFileSizeHigh) << 32) | info.nFileSizeLow;
    if (size == 0) return .{ .failed = .empty };
    if (size > size_max or size > std.math.maxInt(usize)) return .{ .failed = .{ .too_large = size } };
    const section = CreateFileMappingW(file, null, PAGE_READONLY, 0, 0, null) orelse return win32_failure("CreateFileMappingW");
    defer _ = CloseHandle(section);
    const address = MapViewOfFile(section, FILE_MAP_READ, 0, 0, 0) orelse return win32_failure("MapViewOfFile");
    const base: [*]align(std.heap.page_size_min) u8 = @ptrCast(@alignCast(address));
    return .{ .ok = .{
        .memory = base[0..@intCast(size)],
        .device = info.dwVolumeSerialNumber,
        .inode = (@as(u64, info.nFileIndexHigh) << 32) | info.nFileIndexLow,
    } };
}

fn win32_failure(step: []const u8) Outcome {
    return .{ .failed = .{ .win32 = .{ .step = step, .code = GetLastError() } } };
}

/// Unmaps a view made by `map`; a refusal leaves the pages mapped (a leak, never a crash).
pub fn unmap(memory: []align(std.heap.page_size_min) u8) void {
    _ = UnmapViewOfFile(@ptrCast(memory.ptr));
}

/// Pins the module containing `address` until the process ends; false with GetLastError's
/// code in `code` when Windows refuses.
pub fn pin_module(address: *const anyopaque, code: *u32) bool {
    var module: ?*anyopaque = null;
    const flags = GET_MODULE_HANDLE_EX_FLAG_PIN | GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS;
    if (GetModuleHandleExW(flags, address, &module) == 0) {
        code.* = GetLastError();
        return false;
    }
    return true;
}
