//! The C ABI of the Graft core: every export lives here, each named `graft_*` and returning a
//! `Status` (0 ok, negative error) with results through out-pointers. No Zig error or panic
//! crosses the boundary. Objects are u32 handles (see registry.zig); ownership stays here.

const std = @import("std");
const assert = std.debug.assert;
const node_abi = @import("node.zig");
const status_module = @import("status.zig");
const registry_module = @import("registry.zig");
const allocator_module = @import("allocator.zig");
const pool_module = @import("pool.zig");
const plan_module = @import("plan.zig");
const validate = @import("validate.zig");
const cpu = @import("cpu.zig");
const pin = @import("pin.zig");
const tables = @import("tables.zig");
const quant = @import("quant.zig");
const mapping = @import("mapping.zig");
const DType = @import("dtype.zig").DType;
const target = @import("target.zig");
const guard = @import("guard.zig");
const core_options = @import("core_options");

const Node = node_abi.Node;
const Status = node_abi.Status;
const fail = status_module.fail;

/// Bumped whenever an export, the node table or a status code changes meaning.
pub const abi_version: u32 = 9;

pub const buffers_max = 4096;
pub const allocators_max = 4096;
pub const pools_max = 64;
pub const plans_max = 4096;
pub const buffer_alignment = 64;
pub const free_blocks_max = 1 << 20;
/// Entries of an allocator's live-block list at first; it doubles when full.
pub const live_blocks_initial = 64;
/// The largest buffer: 2^53 bytes, the largest size TypeScript's numbers hold exactly.
pub const buffer_bytes_max: u64 = 1 << 53;

/// libc's allocator natively; the wasm build links no libc and grows the instance's memory.
const gpa = if (target.wasm_workers)
    @import("wasm_allocator.zig").allocator
else if (target.is_wasm)
    std.heap.wasm_allocator
else
    std.heap.c_allocator;

/// Buffers, work buffers and prepacked weights come from guard pages (guard.zig) in the
/// bounds-checked library, so that an overrun faults or trips a canary at once; from `gpa`
/// everywhere else, at no cost.
const guarded = core_options.guard_pages and !target.is_wasm;

comptime {
    assert(guard.alignment == buffer_alignment);
    assert(plan_module.prepacked_alignment == buffer_alignment);
}

/// A block of memory for a buffer, a plan's work buffer or its prepacked weights.
fn block_alloc(size_bytes: usize) error{OutOfMemory}![]align(buffer_alignment) u8 {
    if (comptime guarded) return guard.alloc(size_bytes);
    return gpa.alignedAlloc(u8, .fromByteUnits(buffer_alignment), size_bytes);
}

/// Frees a block from `block_alloc`; `what` names it in the panic of a damaged guard.
fn block_free(what: []const u8, memory: []align(buffer_alignment) u8) void {
    if (comptime guarded) {
        if (guard.free(memory)) |damage| guard_damaged(what, memory.len, damage, "found when it was freed");
        return;
    }
    gpa.free(memory);
}

/// The bounds-checked build's verdict on an overrun: a panic naming the block, its size and
/// the first damaged byte, since the memory around it can no longer be trusted.
fn guard_damaged(what: []const u8, size_bytes: usize, damage: guard.Damage, when: []const u8) noreturn {
    std.debug.panic("graft guard: a {s} of {d} bytes was written out of bounds: its canary at byte {d} from its start ({s}) changed, {s}", .{
        what,
        size_bytes,
        damage.offset,
        if (damage.offset < 0) "before its start" else "past its end",
        when,
    });
}

const Buffer = struct {
    memory: []align(buffer_alignment) u8,
    /// A read-only file mapping (graft_file_map), not an allocation: released with munmap,
    /// and every write into it is refused (read_only) instead of faulting.
    mapped: bool = false,
};

const AllocatorObject = struct {
    allocator: allocator_module.Allocator,
};

var buffers: registry_module.Registry(Buffer, .buffer, buffers_max) = .{};
var allocators: registry_module.Registry(AllocatorObject, .allocator, allocators_max) = .{};
var pools: registry_module.Registry(pool_module.Pool, .pool, pools_max) = .{};
var plans: registry_module.Registry(plan_module.Plan, .plan, plans_max) = .{};
var live_buffer_bytes = target.Counter64.init(0);
var live_plan_bytes = target.Counter64.init(0);
var live_mappings = target.Counter64.init(0);
var live_mapped_bytes = target.Counter64.init(0);

/// The kernel builds linked into this library (build.zig): AVX2 and AVX-512 on x86-64, one
/// NEON build on aarch64, one SIMD128 build in the wasm module. Each is a variant object
/// exporting `graft_<variant>_*`.
fn variant_kernels(comptime variant: []const u8) plan_module.Kernels {
    const Compute = fn (node: *const Node, work: *const node_abi.Work) callconv(.c) c_int;
    const WorkSize = fn (node: *const Node, thread_count: u32) callconv(.c) u64;
    const PrepackedSize = fn (node: *const Node) callconv(.c) u64;
    const prefix = "graft_" ++ variant;
    return .{
        .compute_node = @extern(*const Compute, .{ .name = prefix ++ "_compute_node" }),
        .work_size = @extern(*const WorkSize, .{ .name = prefix ++ "_work_size" }),
        .prepacked_size = @extern(*const PrepackedSize, .{ .name = prefix ++ "_prepacked_size" }),
        .prepack = @extern(*const Compute, .{ .name = prefix ++ "_prepack" }),
    };
}

/// The kernel build for a SIMD level (0: the best this CPU supports), or null with a message
/// when the CPU cannot run it. Each plan holds its own, so backends choose independently.
fn kernels_for(level: u32) ?plan_module.Kernels {
    const supported = cpu.detect();
    const wanted: cpu.SimdLevel = switch (level) {
        0 => supported,
        1 => .avx2,
        2 => .avx512,
        3 => .neon,
        4 => .wasm_simd128,
        else => {
            _ = fail(.invalid_argument, "simd level {d} is not 0, 1, 2, 3 or 4", .{level});
            return null;
        },
    };
    if (wanted == .none or !cpu.runs(supported, wanted)) {
        _ = fail(.unsupported, "this CPU does not support simd level {d} (best: {d}; AVX2, FMA and F16C are the minimum on x86-64)", .{ @intFromEnum(wanted), @intFromEnum(supported) });
        return null;
    }
    return switch (comptime cpu.arch_family) {
        .x86_64 => switch (wanted) {
            .avx2 => variant_kernels("avx2"),
            .avx512 => variant_kernels("avx512"),
            .none, .neon, .wasm_simd128 => unreachable,
        },
        .aarch64 => variant_kernels("neon"),
        .wasm32 => variant_kernels("wasm"),
    };
}

fn status_code(status: Status) c_int {
    return @intFromEnum(status);
}

// ---------------------------------------------------------------------------------------------
// Library

export fn graft_abi_version() u32 {
    return abi_version;
}

/// Keeps the library mapped until the process ends, so that no dlclose (Deno's, on exit or on
/// an uncaught exception) unmaps code that pool threads or an in-flight compute run.
export fn graft_pin_library() c_int {
    return status_code(pin.pin());
}

/// Copies the core's op, dtype and status tables as text (tables.zig) into `destination` and
/// returns the full length; TypeScript compares them with its own tables when it loads.
export fn graft_abi_tables(destination: [*]u8, capacity: u32) u32 {
    const length = @min(capacity, tables.text.len);
    @memcpy(destination[0..length], tables.text[0..length]);
    return @intCast(tables.text.len);
}

/// Copies the last error message into `destination` and returns its full length.
export fn graft_last_error(destination: [*]u8, capacity: u32) u32 {
    return @intCast(status_module.copy_message(destination[0..capacity]));
}

/// The best SIMD level this CPU supports (0 none, 1 AVX2, 2 AVX-512, 3 NEON on aarch64, 4 SIMD128
/// in the wasm build).
export fn graft_simd_supported() u32 {
    return @intFromEnum(cpu.detect());
}

/// Live native objects, for leak checks: buffers (file mappings included), bytes allocated
/// for buffers, allocators, pools, plans, plan bytes, file mappings, bytes mapped.
export fn graft_live(out: *[8]u64) c_int {
    out.* = .{
        buffers.live_count,
        live_buffer_bytes.load(.monotonic),
        allocators.live_count,
        pools.live_count,
        plans.live_count,
        live_plan_bytes.load(.monotonic),
        live_mappings.load(.monotonic),
        live_mapped_bytes.load(.monotonic),
    };
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Quantization (quant.zig: ggml's reference formats, bit for bit)

/// The quantizable dtype of a code (bf16 or a block type), or the failure, recorded.
fn quant_dtype(what: []const u8, dtype_code: u32) union(enum) { ok: DType, failed: Status } {
    const dtype = DType.from_code(dtype_code) orelse {
        return .{ .failed = fail(.invalid_argument, "{s}: dtype code {d} names no dtype", .{ what, dtype_code }) };
    };
    if (!quant.quantizable(dtype)) {
        return .{ .failed = fail(.unsupported, "{s}: {s} is not a quantized type (bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q8_1, q4_K, q5_K, q6_K, q8_K are)", .{ what, @tagName(dtype) }) };
    }
    return .{ .ok = dtype };
}

/// The bytes `n` elements of `dtype` take, or null with the failure recorded when `n` is not
/// whole blocks or above buffer_bytes_max elements.
fn quant_bytes(what: []const u8, dtype: DType, n: u64) ?u64 {
    if (n > buffer_bytes_max) {
        _ = fail(.invalid_argument, "{s}: {d} elements exceed buffer_bytes_max ({d})", .{ what, n, buffer_bytes_max });
        return null;
    }
    if (n % dtype.block_size() != 0) {
        _ = fail(.invalid_argument, "{s}: {d} elements are not whole {s} blocks of {d}", .{ what, n, @tagName(dtype), dtype.block_size() });
        return null;
    }
    return quant.row_bytes(dtype, n);
}

/// Quantizes `n` f32 values at `source` (any alignment) into `destination` as `dtype` (bf16 or
/// a block type; `n` whole blocks), exactly as ggml's quantize_row_*_ref. `destination_capacity`
/// must hold the result (n / block_size * block_bytes bytes; out_of_space otherwise).
export fn graft_quantize(dtype_code: u32, source: ?[*]const u8, n: u64, destination: ?[*]u8, destination_capacity: u64) c_int {
    const what = "quantize";
    const dtype = switch (quant_dtype(what, dtype_code)) {
        .ok => |dtype| dtype,
        .failed => |status| return status_code(status),
    };
    const size = quant_bytes(what, dtype, n) orelse return status_code(.invalid_argument);
    if (destination_capacity < size) {
        return status_code(fail(.out_of_space, "quantize: {d} {s} elements take {d} bytes; the destination holds {d}", .{ n, @tagName(dtype), size, destination_capacity }));
    }
    if (n == 0) return 0;
    const src = source orelse return status_code(fail(.invalid_argument, "quantize: source is null", .{}));
    const dst = destination orelse return status_code(fail(.invalid_argument, "quantize: destination is null", .{}));
    const values: [*]align(1) const f32 = @ptrCast(src);
    quant.quantize_row(dtype, values[0..@intCast(n)], dst[0..@intCast(size)]);
    return 0;
}

/// Dequantizes `n` elements of `dtype` (bf16 or a block type; `n` whole blocks) from `source`
/// (`source_bytes` long, at least n / block_size * block_bytes; out_of_bounds otherwise) into
/// `n` f32 values at `destination` (any alignment), exactly as ggml's dequantize_row_*.
export fn graft_dequantize(dtype_code: u32, source: ?[*]const u8, source_bytes: u64, destination: ?[*]u8, n: u64) c_int {
    const what = "dequantize";
    const dtype = switch (quant_dtype(what, dtype_code)) {
        .ok => |dtype| dtype,
        .failed => |status| return status_code(status),
    };
    const size = quant_bytes(what, dtype, n) orelse return status_code(.invalid_argument);
    if (source_bytes < size) {
        return status_code(fail(.out_of_bounds, "dequantize: {d} {s} elements take {d} bytes; the source has {d}", .{ n, @tagName(dtype), size, source_bytes }));
    }
    if (n == 0) return 0;
    const src = source orelse return status_code(fail(.invalid_argument, "dequantize: source is null", .{}));
    const dst = destination orelse return status_code(fail(.invalid_argument, "dequantize: destination is null", .{}));
    const values: [*]align(1) f32 = @ptrCast(dst);
    quant.dequantize_row(dtype, src[0..@intCast(size)], values[0..@intCast(n)]);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Buffers

/// Why an insert into a handle table failed, as a status with its message.
fn insert_failed(err: registry_module.InsertError, what: []const u8, live_max: u32) Status {
    return switch (err) {
        error.LiveLimit => fail(.limit_reached, "{d} live {s} reached (the core's named limit {s}_max); dispose some first", .{ live_max, what, what }),
        error.HandlesExhausted => fail(.limit_reached, "this process made every handle the core can give {s} ({d} slots x {d} generations); handles are never reused", .{ what, registry_module.slots_max, registry_module.generation_max }),
    };
}

/// Why a remove from a handle table failed.
fn remove_failed(err: registry_module.RemoveError, what: []const u8, handle: u32) Status {
    return switch (err) {
        error.NotLive => fail(.invalid_handle, "{s} handle 0x{x} is not live (freed, or never one)", .{ what, handle }),
        error.Busy => fail(.busy, "the {s} is in use by a running compute; wait for it (synchronize) before disposing", .{what}),
    };
}

export fn graft_buffer_alloc(size_bytes: u64, out_handle: *u32, out_address: *u64) c_int {
    if (size_bytes == 0) return status_code(fail(.invalid_argument, "buffer size is 0", .{}));
    if (size_bytes > buffer_bytes_max) {
        return status_code(fail(.invalid_argument, "buffer size {d} exceeds buffer_bytes_max ({d})", .{ size_bytes, buffer_bytes_max }));
    }
    const memory = block_alloc(@intCast(size_bytes)) catch {
        return status_code(fail(.out_of_memory, "cannot allocate a buffer of {d} bytes", .{size_bytes}));
    };
    const buffer = gpa.create(Buffer) catch {
        block_free("buffer", memory);
        return status_code(fail(.out_of_memory, "cannot allocate a buffer record", .{}));
    };
    buffer.* = .{ .memory = memory };
    const handle = buffers.insert(buffer) catch |err| {
        block_free("buffer", memory);
        gpa.destroy(buffer);
        return status_code(insert_failed(err, "buffers", buffers_max));
    };
    _ = live_buffer_bytes.fetchAdd(size_bytes, .monotonic);
    out_handle.* = handle;
    out_address.* = @intFromPtr(memory.ptr);
    return 0;
}

/// Frees a buffer, or unmaps a file mapping (graft_file_map). Refused (busy) while a compute
/// that uses it runs.
export fn graft_buffer_free(handle: u32) c_int {
    const buffer = buffers.remove(handle) catch |err| return status_code(remove_failed(err, "buffer", handle));
    if (target.file_mapping_available and buffer.mapped) {
        mapping.unmap(@alignCast(buffer.memory));
        _ = live_mappings.fetchSub(1, .monotonic);
        _ = live_mapped_bytes.fetchSub(buffer.memory.len, .monotonic);
    } else {
        _ = live_buffer_bytes.fetchSub(buffer.memory.len, .monotonic);
        block_free("buffer", buffer.memory);
    }
    gpa.destroy(buffer);
    return 0;
}

/// Maps the file at `path` (`path_length` bytes, no NUL terminator needed) read-only
/// (PROT_READ, MAP_PRIVATE) and returns a buffer handle whose memory is the whole file: read
/// like any buffer, by kernels included, and never written (writes are refused with read_only;
/// a plan whose nodes would write into it is refused at creation). `out` receives the address,
/// the length (the file's size), and the file's device and inode numbers, so the caller can
/// check that it mapped the file it opened. A missing or unreadable file, a directory, an empty
/// file or a failed mmap is a status (io_error or invalid_argument) naming the path and the OS
/// error; nothing is allocated on the heap but the buffer record. graft_buffer_free unmaps.
export fn graft_file_map(path: ?[*]const u8, path_length: u64, out_handle: *u32, out: *[4]u64) c_int {
    return if (comptime target.file_mapping_available)
        file_map(path, path_length, out_handle, out)
    else
        status_code(fail(.unsupported, "map file: the WebAssembly core has no files; read the file and write it into a buffer", .{}));
}

fn file_map(path: ?[*]const u8, path_length: u64, out_handle: *u32, out: *[4]u64) c_int {
    const start = path orelse return status_code(fail(.invalid_argument, "map file: path is null", .{}));
    if (path_length >= mapping.path_bytes_max) {
        return status_code(fail(.invalid_argument, "map file: a path of {d} bytes exceeds the OS limit ({d})", .{ path_length, mapping.path_bytes_max - 1 }));
    }
    const bytes = start[0..@intCast(path_length)];
    var file: mapping.Mapping = undefined;
    switch (mapping.map(bytes, buffer_bytes_max, &file)) {
        .ok => {},
        .failed => |failure| return status_code(failure.report(bytes)),
    }
    const buffer = gpa.create(Buffer) catch {
        mapping.unmap(file.memory);
        return status_code(fail(.out_of_memory, "cannot allocate a buffer record", .{}));
    };
    buffer.* = .{ .memory = file.memory, .mapped = true };
    const handle = buffers.insert(buffer) catch |err| {
        mapping.unmap(file.memory);
        gpa.destroy(buffer);
        return status_code(insert_failed(err, "buffers", buffers_max));
    };
    _ = live_mappings.fetchAdd(1, .monotonic);
    _ = live_mapped_bytes.fetchAdd(file.memory.len, .monotonic);
    out_handle.* = handle;
    out.* = .{ @intFromPtr(file.memory.ptr), file.memory.len, file.device, file.inode };
    return 0;
}

/// Advice on how a file mapping's range [offset, offset + length) will be read (madvise):
/// 0 normal, 1 random, 2 sequential, 3 will need (start reading it in now). The range is
/// widened to whole pages. Only for mappings (invalid_argument for an allocated buffer); a
/// hint the OS refuses is io_error.
export fn graft_buffer_advise(handle: u32, offset: u64, length: u64, advice: u32) c_int {
    const buffer = buffers.get(handle) orelse return status_code(stale_buffer(handle));
    if (!target.file_mapping_available or !buffer.mapped) {
        return status_code(fail(.invalid_argument, "advise: buffer 0x{x} is not a file mapping", .{handle}));
    }
    const size = buffer.memory.len;
    if (offset > size or length > size - offset) {
        return status_code(fail(.out_of_bounds, "advise: range [{d}, {d}) is outside the mapping of {d} bytes", .{ offset, offset +| length, size }));
    }
    return status_code(mapping.advise(@alignCast(buffer.memory), offset, length, advice));
}

fn stale_buffer(handle: u32) Status {
    return fail(.invalid_handle, "buffer handle 0x{x} is not live (freed, or never a buffer)", .{handle});
}

const Access = enum { read, write };

/// A checked byte range of a live buffer, or the failure (recorded).
const Range = union(enum) { ok: []u8, failed: Status };

fn buffer_range(handle: u32, offset: u64, length: u64, access: Access) Range {
    const buffer = buffers.get(handle) orelse return .{ .failed = stale_buffer(handle) };
    if (access == .write and buffer.mapped) {
        // PROT_READ memory: a write would be SIGSEGV, so it is refused here.
        return .{ .failed = fail(.read_only, "buffer 0x{x} is a read-only file mapping; it cannot be written", .{handle}) };
    }
    const size = buffer.memory.len;
    if (offset > size or length > size - offset) {
        return .{ .failed = fail(.out_of_bounds, "range [{d}, {d}) is outside the buffer of {d} bytes", .{ offset, offset +| length, size }) };
    }
    return .{ .ok = buffer.memory[@intCast(offset)..][0..@intCast(length)] };
}

export fn graft_buffer_write(handle: u32, offset: u64, source: [*]const u8, length: u64) c_int {
    const range = switch (buffer_range(handle, offset, length, .write)) {
        .ok => |range| range,
        .failed => |status| return status_code(status),
    };
    @memcpy(range, source[0..range.len]);
    return 0;
}

export fn graft_buffer_read(handle: u32, offset: u64, destination: [*]u8, length: u64) c_int {
    const range = switch (buffer_range(handle, offset, length, .read)) {
        .ok => |range| range,
        .failed => |status| return status_code(status),
    };
    @memcpy(destination[0..range.len], range);
    return 0;
}

export fn graft_buffer_copy(source_handle: u32, source_offset: u64, destination_handle: u32, destination_offset: u64, length: u64) c_int {
    const source = switch (buffer_range(source_handle, source_offset, length, .read)) {
        .ok => |range| range,
        .failed => |status| return status_code(status),
    };
    const destination = switch (buffer_range(destination_handle, destination_offset, length, .write)) {
        .ok => |range| range,
        .failed => |status| return status_code(status),
    };
    // memmove semantics: the ranges may overlap within one buffer.
    if (@intFromPtr(destination.ptr) <= @intFromPtr(source.ptr)) {
        std.mem.copyForwards(u8, destination, source);
    } else {
        std.mem.copyBackwards(u8, destination, source);
    }
    return 0;
}

export fn graft_buffer_fill(handle: u32, offset: u64, length: u64, value: u32) c_int {
    const range = switch (buffer_range(handle, offset, length, .write)) {
        .ok => |range| range,
        .failed => |status| return status_code(status),
    };
    @memset(range, @truncate(value));
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Allocators (offsets within a buffer; no memory of their own beyond the free-block list)

export fn graft_allocator_create(size_bytes: u64, alignment: u32, measure: u32, blocks_max: u32, out_handle: *u32) c_int {
    if (alignment == 0 or !std.math.isPowerOfTwo(alignment)) {
        return status_code(fail(.invalid_argument, "alignment {d} is not a power of two", .{alignment}));
    }
    if (blocks_max == 0 or blocks_max > free_blocks_max) {
        return status_code(fail(.invalid_argument, "blocks_max {d} is not in 1..{d} (free_blocks_max)", .{ blocks_max, free_blocks_max }));
    }
    // Every argument is checked before anything is allocated: a refusal leaks nothing.
    if (size_bytes > allocator_module.block_bytes_max) {
        return status_code(fail(.invalid_argument, "allocator size {d} exceeds {d} bytes (block_bytes_max)", .{ size_bytes, allocator_module.block_bytes_max }));
    }
    const object = gpa.create(AllocatorObject) catch return status_code(fail(.out_of_memory, "allocator record", .{}));
    const blocks = gpa.alloc(allocator_module.Block, blocks_max) catch {
        gpa.destroy(object);
        return status_code(fail(.out_of_memory, "free-block list of {d}", .{blocks_max}));
    };
    // The live-block list grows on demand (see graft_allocator_alloc); it starts small.
    const live = gpa.alloc(allocator_module.Block, live_blocks_initial) catch {
        gpa.free(blocks);
        gpa.destroy(object);
        return status_code(fail(.out_of_memory, "live-block list", .{}));
    };
    object.* = .{ .allocator = .init(blocks, live, size_bytes, alignment, measure != 0) };
    out_handle.* = allocators.insert(object) catch |err| {
        gpa.free(live);
        gpa.free(blocks);
        gpa.destroy(object);
        return status_code(insert_failed(err, "allocators", allocators_max));
    };
    return 0;
}

fn get_allocator(handle: u32) ?*allocator_module.Allocator {
    const object = allocators.get(handle) orelse {
        _ = fail(.invalid_handle, "allocator handle 0x{x} is not live", .{handle});
        return null;
    };
    return &object.allocator;
}

export fn graft_allocator_alloc(handle: u32, size_bytes: u64, out_offset: *u64) c_int {
    const allocator = get_allocator(handle) orelse return status_code(.invalid_handle);
    if (allocator.live_blocks == allocator.live.len) {
        // The allocator itself never allocates: its live list is grown here, doubling.
        const grown = gpa.realloc(allocator.live, 2 * allocator.live.len) catch {
            return status_code(fail(.out_of_memory, "live-block list of {d}", .{2 * allocator.live.len}));
        };
        allocator.live = grown;
    }
    out_offset.* = allocator.alloc(size_bytes) catch |err| switch (err) {
        error.InvalidSize => return status_code(fail(.invalid_argument, "size {d} exceeds {d} bytes (block_bytes_max)", .{ size_bytes, allocator_module.block_bytes_max })),
        error.FreeBlocksFull => return status_code(fail(.limit_reached, "the allocator's live-block list is full ({d} blocks: raise blocks_max)", .{allocator.live.len})),
        error.OutOfSpace, error.InvalidFree => {
            // The caller learns the size it needs from the out-pointer.
            out_offset.* = allocator.aligned_size(size_bytes);
            return status_code(fail(.out_of_space, "allocator of {d} bytes cannot fit {d} bytes (largest free block {d}, {d} bytes live)", .{ allocator.size_bytes, allocator.aligned_size(size_bytes), allocator.largest_free_block(), allocator.live_bytes }));
        },
    };
    return 0;
}

export fn graft_allocator_free(handle: u32, offset: u64, size_bytes: u64) c_int {
    const allocator = get_allocator(handle) orelse return status_code(.invalid_handle);
    allocator.free(offset, size_bytes) catch |err| return status_code(switch (err) {
        error.FreeBlocksFull => fail(.limit_reached, "the allocator's free-block list is full ({d} blocks: raise blocks_max)", .{allocator.blocks.len}),
        error.InvalidSize => fail(.invalid_argument, "free size {d} exceeds {d} bytes (block_bytes_max)", .{ size_bytes, allocator_module.block_bytes_max }),
        error.InvalidFree, error.OutOfSpace => fail(.invalid_argument, "free of {d} bytes at offset {d} names no live block of that size (double free, a wrong size, or never allocated)", .{ size_bytes, offset }),
    });
    return 0;
}

export fn graft_allocator_reset(handle: u32) c_int {
    const allocator = get_allocator(handle) orelse return status_code(.invalid_handle);
    allocator.reset();
    return 0;
}

/// size_max_bytes, live_blocks, live_bytes, free_block_count, largest_free_block.
export fn graft_allocator_stats(handle: u32, out: *[5]u64) c_int {
    const allocator = get_allocator(handle) orelse return status_code(.invalid_handle);
    out.* = .{ allocator.size_max_bytes, allocator.live_blocks, allocator.live_bytes, allocator.block_count, allocator.largest_free_block() };
    return 0;
}

export fn graft_allocator_destroy(handle: u32) c_int {
    const object = allocators.remove(handle) catch |err| return status_code(remove_failed(err, "allocator", handle));
    gpa.free(object.allocator.live);
    gpa.free(object.allocator.blocks);
    gpa.destroy(object);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Thread pools

export fn graft_pool_create(thread_count: u32, out_handle: *u32) c_int {
    if (thread_count == 0 or thread_count > pool_module.threads_max) {
        return status_code(fail(.invalid_argument, "thread count {d} is not in 1..{d} (threads_max)", .{ thread_count, pool_module.threads_max }));
    }
    const pool = gpa.create(pool_module.Pool) catch return status_code(fail(.out_of_memory, "pool record", .{}));
    pool.start(thread_count) catch {
        gpa.destroy(pool);
        return status_code(fail(.out_of_memory, "cannot start {d} threads", .{thread_count}));
    };
    out_handle.* = pools.insert(pool) catch |err| {
        pool.stop();
        gpa.destroy(pool);
        return status_code(insert_failed(err, "pools", pools_max));
    };
    return 0;
}

export fn graft_pool_destroy(handle: u32) c_int {
    const pool = pools.remove(handle) catch |err| return status_code(remove_failed(err, "pool", handle));
    pool.stop();
    gpa.destroy(pool);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Graph plans

export fn graft_plan_create(nodes: [*]const Node, node_count: u32, thread_count: u32, simd_level: u32, out_handle: *u32, out_work_bytes: *u64) c_int {
    const selected = kernels_for(simd_level) orelse return status_code(.unsupported);
    if (node_count > plan_module.nodes_max) {
        return status_code(fail(.limit_reached, "graph of {d} nodes exceeds nodes_max ({d})", .{ node_count, plan_module.nodes_max }));
    }
    if (thread_count == 0 or thread_count > pool_module.threads_max) {
        return status_code(fail(.invalid_argument, "thread count {d} is not in 1..{d}", .{ thread_count, pool_module.threads_max }));
    }
    const source = nodes[0..node_count];
    var handles_found = std.AutoArrayHashMap(u32, void).init(gpa);
    defer handles_found.deinit();
    var work_bytes: u64 = 0;
    var prepacked_bytes: u64 = 0;
    for (source, 0..) |*node, index| {
        const verdict = validate.validate_node(node);
        if (verdict.status != .ok) {
            return status_code(fail(verdict.status, "node {d}: {s}", .{ index, verdict.reason }));
        }
        const status = check_node_memory(node, index, &handles_found);
        if (status != .ok) return status_code(status);
        work_bytes = @max(work_bytes, selected.work_size(node, thread_count));
        prepacked_bytes += round_up(selected.prepacked_size(node), plan_module.prepacked_alignment);
    }
    const sizes: PlanSizes = .{ .work_bytes = work_bytes, .prepacked_bytes = prepacked_bytes };
    return status_code(make_plan(source, thread_count, selected, sizes, handles_found.keys(), out_handle, out_work_bytes));
}

fn round_up(value: u64, alignment: u64) u64 {
    assert(std.math.isPowerOfTwo(alignment));
    return (value + alignment - 1) & ~(alignment - 1);
}

const PlanSizes = struct {
    work_bytes: u64,
    /// All prepacked operands, each range rounded up to `prepacked_alignment`.
    prepacked_bytes: u64,
};

fn make_plan(
    source: []const Node,
    thread_count: u32,
    selected: plan_module.Kernels,
    sizes: PlanSizes,
    handles: []const u32,
    out_handle: *u32,
    out_work_bytes: *u64,
) Status {
    const work_bytes = sizes.work_bytes;
    const plan = gpa.create(plan_module.Plan) catch return fail(.out_of_memory, "plan record", .{});
    const copied = gpa.dupe(Node, source) catch {
        gpa.destroy(plan);
        return fail(.out_of_memory, "node table of {d} nodes", .{source.len});
    };
    const work = block_alloc(@intCast(work_bytes)) catch {
        gpa.free(copied);
        gpa.destroy(plan);
        return fail(.out_of_memory, "work buffer of {d} bytes", .{work_bytes});
    };
    const handle_copy = gpa.dupe(u32, handles) catch {
        block_free("work buffer", work);
        gpa.free(copied);
        gpa.destroy(plan);
        return fail(.out_of_memory, "buffer list", .{});
    };
    const prepacked = alloc_prepacked(copied, selected, sizes.prepacked_bytes) catch {
        gpa.free(handle_copy);
        block_free("work buffer", work);
        gpa.free(copied);
        gpa.destroy(plan);
        return fail(.out_of_memory, "prepacked weights of {d} bytes", .{sizes.prepacked_bytes});
    };
    plan.* = .{
        .nodes = copied,
        .work = work,
        .buffer_handles = handle_copy,
        .thread_count = thread_count,
        .run_thread_count = plan_module.run_threads(copied, thread_count),
        .kernels = selected,
        .prepacked = prepacked.memory,
        .prepacked_ranges = prepacked.ranges,
    };
    out_handle.* = plans.insert(plan) catch |err| {
        free_plan(plan);
        return insert_failed(err, "plans", plans_max);
    };
    _ = live_plan_bytes.fetchAdd(plan_bytes(plan), .monotonic);
    out_work_bytes.* = work_bytes;
    return .ok;
}

const Prepacked = struct {
    memory: []align(64) u8,
    ranges: []plan_module.PrepackedRange,
};

/// The plan's prepacked memory (unpacked until the first compute) and each node's range of it;
/// both empty when no node prepacks, so plans without weights cost nothing more.
fn alloc_prepacked(
    nodes: []const Node,
    selected: plan_module.Kernels,
    size_bytes: u64,
) error{OutOfMemory}!Prepacked {
    if (size_bytes == 0) return .{ .memory = &.{}, .ranges = &.{} };
    const memory = try block_alloc(@intCast(size_bytes));
    errdefer block_free("prepacked block", memory);
    const ranges = try gpa.alloc(plan_module.PrepackedRange, nodes.len);
    var offset: u64 = 0;
    for (nodes, ranges) |*node, *range| {
        const node_bytes = selected.prepacked_size(node);
        range.* = .{ .offset = offset, .size_bytes = node_bytes };
        offset += round_up(node_bytes, plan_module.prepacked_alignment);
    }
    assert(offset == size_bytes);
    return .{ .memory = memory, .ranges = ranges };
}

fn plan_bytes(plan: *const plan_module.Plan) u64 {
    return plan.nodes.len * @sizeOf(Node) + plan.work.len + plan.prepacked.len +
        plan.prepacked_ranges.len * @sizeOf(plan_module.PrepackedRange);
}

fn free_plan(plan: *plan_module.Plan) void {
    if (plan.prepacked.len > 0) block_free("prepacked block", plan.prepacked);
    if (plan.prepacked_ranges.len > 0) gpa.free(plan.prepacked_ranges);
    if (plan.node_nanoseconds) |timings| gpa.free(timings);
    gpa.free(plan.buffer_handles);
    block_free("work buffer", plan.work);
    gpa.free(plan.nodes);
    gpa.destroy(plan);
}

/// Every tensor a node reads or writes must lie wholly inside one live buffer, so no kernel
/// can touch memory the core did not hand out.
fn check_node_memory(node: *const Node, index: usize, handles: *std.AutoArrayHashMap(u32, void)) Status {
    const status = check_tensor_memory(&node.dst, index, "dst", .write, handles);
    if (status != .ok) return status;
    for (node.src[0..node.src_count], 0..) |*tensor, source_index| {
        const names = [node_abi.sources_max][]const u8{ "src0", "src1", "src2", "src3" };
        const source_status = check_tensor_memory(tensor, index, names[source_index], .read, handles);
        if (source_status != .ok) return source_status;
    }
    return .ok;
}

fn check_tensor_memory(tensor: *const node_abi.TensorDesc, index: usize, role: []const u8, access: Access, handles: *std.AutoArrayHashMap(u32, void)) Status {
    const begin = tensor.data;
    const extent = tensor.extent_bytes();
    buffers.mutex.lock();
    defer buffers.mutex.unlock();
    for (0..buffers.live_count) |position| {
        const slot = buffers.live_index(@intCast(position));
        const buffer = buffers.items[slot].?;
        const base = @intFromPtr(buffer.memory.ptr);
        if (begin < base or begin - base >= buffer.memory.len) continue;
        if (extent > buffer.memory.len - (begin - base)) {
            return fail(.out_of_bounds, "node {d}: {s} spans {d} bytes from offset {d}, past the end of its buffer ({d} bytes)", .{ index, role, extent, begin - base, buffer.memory.len });
        }
        if (access == .write and buffer.mapped) {
            return fail(.read_only, "node {d}: {s} lies in a read-only file mapping; a graph cannot write into it", .{ index, role });
        }
        const handle = buffers.handle_at(@intCast(slot));
        handles.put(handle, {}) catch return fail(.out_of_memory, "buffer list", .{});
        return .ok;
    }
    return fail(.out_of_bounds, "node {d}: {s} at address 0x{x} is in no live buffer", .{ index, role, begin });
}

/// Computes a plan on a pool. The plan, the pool and every buffer the plan touches are held
/// (acquired) for the whole compute, so a free of any of them meanwhile, from any thread, is
/// refused with `busy` instead of pulling memory from under the kernels.
export fn graft_plan_compute(plan_handle: u32, pool_handle: u32) c_int {
    const plan = plans.acquire(plan_handle) orelse return status_code(fail(.invalid_handle, "plan handle 0x{x} is not live (freed?)", .{plan_handle}));
    defer plans.release(plan_handle);
    const pool = pools.acquire(pool_handle) orelse return status_code(fail(.invalid_handle, "pool handle 0x{x} is not live (disposed?)", .{pool_handle}));
    defer pools.release(pool_handle);
    for (plan.buffer_handles, 0..) |handle, held| {
        if (buffers.acquire(handle) == null) {
            for (plan.buffer_handles[0..held]) |acquired| buffers.release(acquired);
            return status_code(fail(.stale_plan, "a buffer this plan uses was freed after the plan was made", .{}));
        }
    }
    defer for (plan.buffer_handles) |handle| buffers.release(handle);
    const outcome = plan_module.compute(plan, pool);
    if (comptime guarded) check_plan_guards(plan);
    if (outcome.status == .ok) return 0;
    if (outcome.status == .busy) return status_code(fail(.busy, "the pool or plan is already computing", .{}));
    const op = plan.nodes[outcome.node_index].op;
    return status_code(fail(outcome.status, "node {d} (op {d}) failed in its kernel", .{ outcome.node_index, op }));
}

/// The bounds-checked build, after each compute: the canaries of the plan's work buffer, its
/// prepacked block and every buffer it touches (held by the compute), so that an overrun is
/// reported with the plan that made it, not at some later free.
fn check_plan_guards(plan: *const plan_module.Plan) void {
    if (guard.check(plan.work)) |damage| plan_damaged(plan, "work buffer", plan.work.len, damage);
    if (plan.prepacked.len > 0) {
        if (guard.check(plan.prepacked)) |damage| plan_damaged(plan, "prepacked block", plan.prepacked.len, damage);
    }
    for (plan.buffer_handles) |handle| {
        const buffer = buffers.get(handle).?;
        if (buffer.mapped) continue;
        if (guard.check(buffer.memory)) |damage| plan_damaged(plan, "buffer", buffer.memory.len, damage);
    }
}

fn plan_damaged(plan: *const plan_module.Plan, what: []const u8, size_bytes: usize, damage: guard.Damage) noreturn {
    var ops_text: [512]u8 = undefined;
    guard_damaged(what, size_bytes, damage, plan_ops(plan, &ops_text));
}

/// "after a compute of N nodes (ops: ...)", each op once, cut to fit `text`.
fn plan_ops(plan: *const plan_module.Plan, text: []u8) []const u8 {
    var writer: std.Io.Writer = .fixed(text);
    writer.print("after a compute of {d} nodes (ops:", .{plan.nodes.len}) catch return text;
    for (plan.nodes, 0..) |*node, index| {
        const seen = for (plan.nodes[0..index]) |*earlier| {
            if (earlier.op == node.op) break true;
        } else false;
        if (seen) continue;
        const op = std.meta.intToEnum(node_abi.Op, node.op) catch {
            writer.print(" {d}", .{node.op}) catch return writer.buffered();
            continue;
        };
        writer.print(" {s}", .{@tagName(op)}) catch return writer.buffered();
    }
    writer.writeAll(")") catch return writer.buffered();
    return writer.buffered();
}

/// Marks the plan's prepacked weights stale: the next compute packs them again from the
/// tensors (call it after writing a weight). A no-op for a plan without prepacked weights.
export fn graft_plan_repack(handle: u32) c_int {
    const plan = plans.get(handle) orelse return status_code(fail(.invalid_handle, "plan handle 0x{x} is not live", .{handle}));
    plan.request_repack();
    return 0;
}

/// Turns per-node timing on (enable != 0) or off for a plan.
export fn graft_plan_profile(handle: u32, enable: u32) c_int {
    if (comptime !target.clock_available) {
        return status_code(fail(.unsupported, "per-node timings need a clock; the WebAssembly core has none", .{}));
    }
    // The timings buffer is swapped with the plan table locked and the plan idle, so no compute
    // can start (or be running) while it changes.
    var busy = false;
    const plan = plans.lock_idle(handle, &busy) orelse return status_code(if (busy)
        fail(.busy, "plan is computing; wait for it before changing its profiling", .{})
    else
        fail(.invalid_handle, "plan handle 0x{x} is not live", .{handle}));
    defer plans.unlock();
    if (plan.node_nanoseconds) |timings| {
        gpa.free(timings);
        plan.node_nanoseconds = null;
    }
    if (enable != 0) {
        const timings = gpa.alloc(u64, plan.nodes.len) catch return status_code(fail(.out_of_memory, "profile of {d} nodes", .{plan.nodes.len}));
        @memset(timings, 0);
        plan.node_nanoseconds = timings;
    }
    return 0;
}

/// Copies the last compute's per-node nanoseconds into `out` (capacity entries).
export fn graft_plan_timings(handle: u32, out: [*]u64, capacity: u32) c_int {
    const plan = plans.get(handle) orelse return status_code(fail(.invalid_handle, "plan handle 0x{x} is not live", .{handle}));
    const timings = plan.node_nanoseconds orelse return status_code(fail(.invalid_argument, "profiling is off for this plan", .{}));
    if (capacity < timings.len) return status_code(fail(.out_of_space, "{d} nodes need {d} entries, got {d}", .{ timings.len, timings.len, capacity }));
    @memcpy(out[0..timings.len], timings);
    return 0;
}

export fn graft_plan_free(handle: u32) c_int {
    const plan = plans.remove(handle) catch |err| return status_code(remove_failed(err, "plan", handle));
    _ = live_plan_bytes.fetchSub(plan_bytes(plan), .monotonic);
    free_plan(plan);
    return 0;
}

comptime {
    assert(buffers_max <= registry_module.slots_max);
    if (target.is_wasm) {
        @export(&wasm_scratch_alloc, .{ .name = "graft_wasm_alloc" });
        @export(&wasm_scratch_free, .{ .name = "graft_wasm_free" });
    }
    if (target.wasm_workers) {
        @export(&wasm_crew_init, .{ .name = "graft_wasm_crew_init" });
        @export(&wasm_worker, .{ .name = "graft_wasm_worker" });
        @export(&wasm_crew_stop, .{ .name = "graft_wasm_crew_stop" });
    }
}

// ---------------------------------------------------------------------------------------------
// WebAssembly only: scratch memory for the loader (src/core/wasm.ts). Wasm code reaches only its
// own memory, so the loader copies each typed-array argument into a scratch block, passes the
// block's offset as the pointer, and copies results back out.

/// Scratch blocks are aligned for any scalar or v128 the exports read through a pointer.
const wasm_scratch_alignment = 16;

/// A scratch block of `size_bytes` (at least 1) and returns its offset; 0 when memory is out.
fn wasm_scratch_alloc(size_bytes: u32) callconv(.c) u32 {
    const memory = gpa.alignedAlloc(u8, .fromByteUnits(wasm_scratch_alignment), @max(size_bytes, 1)) catch return 0;
    return @intCast(@intFromPtr(memory.ptr));
}

/// Frees a block from graft_wasm_alloc (`size_bytes` as allocated).
fn wasm_scratch_free(address: u32, size_bytes: u32) callconv(.c) void {
    assert(address != 0);
    const memory: [*]align(wasm_scratch_alignment) u8 = @ptrFromInt(address);
    gpa.free(memory[0..@max(size_bytes, 1)]);
}

// ---------------------------------------------------------------------------------------------
// The threaded WebAssembly build only: its worker threads are the JS loader's Web Workers, each
// an instance of the same module on the same shared memory.

/// Sizes the pools' crew to `worker_count` workers, before the loader starts them: 0 ok, else
/// invalid_argument (called twice, or more than threads_max - 1 workers).
fn wasm_crew_init(worker_count: u32) callconv(.c) c_int {
    if (!pool_module.crew_init(worker_count)) {
        return status_code(fail(.invalid_argument, "crew of {d} workers (at most {d}, once)", .{ worker_count, pool_module.threads_max - 1 }));
    }
    return 0;
}

/// A worker's life: worker `index` (1 .. the crew's size) runs the pools' jobs until the page or
/// process ends. Called by the loader's worker script once its instance has its own stack
/// (`graft_wasm_set_stack`), never on the main thread.
fn wasm_worker(index: u32) callconv(.c) c_int {
    const crew = &pool_module.crew;
    if (index == 0 or index >= crew.thread_count) {
        return status_code(fail(.invalid_argument, "worker {d} of a crew of {d}", .{ index, crew.thread_count - 1 }));
    }
    crew.worker_main(index);
    _ = pool_module.crew_exited.fetchAdd(1, .acq_rel);
    return 0;
}

/// Stops the crew's workers (each returns from graft_wasm_worker): 0 ok, else invalid_argument
/// (no crew, or it is computing).
fn wasm_crew_stop() callconv(.c) c_int {
    if (!pool_module.crew_stop()) return status_code(fail(.invalid_argument, "no idle crew to stop", .{}));
    return 0;
}

comptime {
    if (target.wasm_workers) _ = @import("wasm_stack.zig");
}
