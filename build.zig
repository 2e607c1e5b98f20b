//! Builds the Graft core: one shared library, `libgraft.so` (ReleaseFast, for use) and
//! `libgraft-safe.so` (ReleaseSafe, bounds-checked, for tests). The library's own code targets a
//! pinned baseline CPU; kernels are compiled once per SIMD level into separate objects whose
//! symbols carry the level's name, and the core picks one at run time from CPUID. So one binary
//! runs on any x86-64 machine with AVX2 and uses AVX-512 where the CPU has it.
const std = @import("std");

/// Kernel builds: symbol prefix, the CPU model it is compiled for, and features on top of it.
/// The AVX-512 build also takes VNNI (vpdpbusd, for the quantized dot products): every AVX-512
/// CPU since Ice Lake and Zen 4 has it, and cpu.zig picks this build only where it is there.
const variants = .{
    .{ "avx2", &std.Target.x86.cpu.x86_64_v3, &[_]std.Target.x86.Feature{} },
    .{ "avx512", &std.Target.x86.cpu.x86_64_v4, &[_]std.Target.x86.Feature{.avx512vnni} },
};

const baseline: std.Target.Query = .{
    .cpu_arch = .x86_64,
    .os_tag = .linux,
    .abi = .gnu,
    .cpu_model = .{ .explicit = &std.Target.x86.cpu.x86_64_v2 },
};

/// The prebuilt libraries `zig build dist` makes, one per npm platform package (`npm/core-*`,
/// named as npm names OS and CPU): each goes into `zig-out/dist/<platform>/`. Linux targets
/// glibc 2.17 so the library loads on every glibc distribution of the last decade; macOS and
/// Windows libraries are built here too (Zig cross-compiles them) and link-tested where CI has
/// such a machine.
const dist_targets = [_]struct { platform: []const u8, triple: []const u8 }{
    .{ .platform = "linux-x64", .triple = "x86_64-linux-gnu.2.17" },
    .{ .platform = "linux-arm64", .triple = "aarch64-linux-gnu.2.17" },
    .{ .platform = "darwin-x64", .triple = "x86_64-macos.11.0" },
    .{ .platform = "darwin-arm64", .triple = "aarch64-macos.11.0" },
    .{ .platform = "win32-x64", .triple = "x86_64-windows-gnu" },
};

pub fn build(b: *std.Build) void {
    const fast = addCore(b, "graft", .ReleaseFast, baseline, .{});
    // The bounds-checked build also puts every buffer, work buffer and prepacked block between
    // guard pages (zig/guard.zig), so an overrun faults or trips a canary where it happens.
    const safe = addCore(b, "graft-safe", .ReleaseSafe, baseline, .{ .guard_pages = true });
    b.installArtifact(fast);
    b.installArtifact(safe);

    const test_step = b.step("test", "Run the Zig unit tests (allocator, kernels)");
    const unit = b.addTest(.{ .root_module = b.createModule(.{
        .root_source_file = b.path("zig/tests.zig"),
        .target = b.resolveTargetQuery(.{ .cpu_model = .{ .explicit = &std.Target.x86.cpu.x86_64_v3 } }),
        .optimize = .ReleaseSafe,
        .link_libc = true,
    }) });
    test_step.dependOn(&b.addRunArtifact(unit).step);
    addDist(b);
    // The AVX-512 kernel build's own code paths (two blocks per vector), where this CPU runs them.
    const host = b.graph.host.result.cpu;
    if (host.arch == .x86_64 and host.has(.x86, .avx512bw) and host.has(.x86, .avx512vnni)) {
        var query: std.Target.Query = .{ .cpu_model = .{ .explicit = &std.Target.x86.cpu.x86_64_v4 } };
        query.cpu_features_add = std.Target.x86.featureSet(&.{.avx512vnni});
        const unit512 = b.addTest(.{ .name = "test-avx512", .root_module = b.createModule(.{
            .root_source_file = b.path("zig/tests.zig"),
            .target = b.resolveTargetQuery(query),
            .optimize = .ReleaseSafe,
            .link_libc = true,
        }) });
        test_step.dependOn(&b.addRunArtifact(unit512).step);
    }

    addWasm(b);
}

/// The wasm kernel builds: SIMD128 (`@Vector(4, f32)` lowers to v128), bulk memory for memcpy
/// and memset. A wasm module cannot choose instructions at run time (an engine without a feature
/// rejects the whole module), so each feature set is a whole module and the loader
/// (src/core/wasm.ts) picks the best one this engine validates.
const wasm_features = [_]std.Target.wasm.Feature{ .simd128, .bulk_memory, .sign_ext, .nontrapping_fptoint, .mutable_globals };

/// One wasm build: its file name, the features on top of `wasm_features`, and whether it is the
/// threaded build (shared memory imported from the loader, atomics; its workers are Web Workers
/// the loader starts, see zig/pool.zig).
const WasmBuild = struct { name: []const u8, features: []const std.Target.wasm.Feature, threads: bool = false };

/// graft.wasm runs in every engine with SIMD128; graft-relaxed.wasm adds relaxed SIMD, whose
/// f32x4.relaxed_madd is one fused multiply-add where the CPU has FMA (V8 on x86-64 with FMA3,
/// every ARM64): the kernels' `common.fma` uses it there.
/// The -threads builds are the same on shared memory, for pages that are cross-origin isolated
/// (and Deno): the loader falls back to the others where SharedArrayBuffer is missing.
const wasm_builds = [_]WasmBuild{
    .{ .name = "graft", .features = &.{} },
    .{ .name = "graft-relaxed", .features = &.{.relaxed_simd} },
    .{ .name = "graft-threads", .features = &.{.atomics}, .threads = true },
    .{ .name = "graft-relaxed-threads", .features = &.{ .relaxed_simd, .atomics }, .threads = true },
};

/// `zig build wasm`: zig-out/wasm/graft.wasm and graft-relaxed.wasm, the core for browsers and a
/// Deno without --allow-ffi. Executables with no entry point whose exports are the C ABI of
/// root.zig (ghostty's lib_vt wasm build does the same); freestanding, so a module imports
/// nothing. Single-threaded: the pool runs every job on the calling thread.
fn addWasm(b: *std.Build) void {
    const step = b.step("wasm", "Build zig-out/wasm/graft{,-relaxed}{,-threads}.wasm (wasm32, SIMD128)");
    const only = b.option([]const u8, "wasm-only", "Only this wasm build for `wasm` (e.g. graft-relaxed-threads)");
    for (wasm_builds) |build_spec| {
        if (only) |name| if (!std.mem.eql(u8, name, build_spec.name)) continue;
        var features = std.Target.wasm.featureSet(&wasm_features);
        features.addFeatureSet(std.Target.wasm.featureSet(build_spec.features));
        const query: std.Target.Query = .{
            .cpu_arch = .wasm32,
            .os_tag = .freestanding,
            .cpu_model = .{ .explicit = &std.Target.wasm.cpu.mvp },
            .cpu_features_add = features,
        };
        step.dependOn(addWasmModule(b, build_spec, b.resolveTargetQuery(query)));
    }
}

/// One wasm module of the core for `target`, installed as zig-out/wasm/<name>.wasm.
fn addWasmModule(b: *std.Build, spec: WasmBuild, target: std.Build.ResolvedTarget) *std.Build.Step {
    const name = spec.name;
    const root = b.createModule(.{
        .root_source_file = b.path("zig/root.zig"),
        .target = target,
        .optimize = .ReleaseFast,
        .single_threaded = !spec.threads,
        // Shipped to browsers: no debug sections.
        .strip = true,
    });
    const core_options = b.addOptions();
    core_options.addOption(bool, "guard_pages", false);
    root.addOptions("core_options", core_options);
    const options = b.addOptions();
    options.addOption([]const u8, "variant", "wasm");
    const module = b.createModule(.{
        .root_source_file = b.path("zig/variant.zig"),
        .target = target,
        .optimize = .ReleaseFast,
        .single_threaded = !spec.threads,
        .strip = true,
    });
    module.addOptions("build_options", options);
    root.addObject(b.addObject(.{ .name = b.fmt("{s}-kernels", .{name}), .root_module = module }));
    const exe = b.addExecutable(.{ .name = name, .root_module = root });
    exe.entry = .disabled;
    exe.rdynamic = true;
    // Memory grows on demand; the first 16 MiB cover the stack and small graphs.
    exe.initial_memory = 16 << 20;
    exe.max_memory = 4 << 30;
    exe.stack_size = 1 << 20;
    if (spec.threads) {
        // One memory for the main instance and every worker's: the loader makes it (shared)
        // and passes it in as env.memory.
        exe.import_memory = true;
        exe.shared_memory = true;
    }
    const install = b.addInstallArtifact(exe, .{ .dest_dir = .{ .override = .{ .custom = "wasm" } } });
    return &install.step;
}

/// `zig build dist`: the release library for every platform package, stripped, each in its own
/// folder (`zig-out/dist/linux-x64/libgraft.so`, `.../win32-x64/graft.dll`, ...).
fn addDist(b: *std.Build) void {
    const dist_step = b.step("dist", "Build the release library for every npm platform package into zig-out/dist/");
    const only = b.option([]const u8, "dist-platform", "Only this platform for `dist` (e.g. linux-x64; host: this machine's)");
    const wanted = if (only) |name| (if (std.mem.eql(u8, name, "host")) hostPlatform(b) else name) else null;
    if (wanted) |name| {
        for (dist_targets) |dist| {
            if (std.mem.eql(u8, dist.platform, name)) break;
        } else std.debug.panic("-Ddist-platform={s}: no such platform (see dist_targets in build.zig)", .{name});
    }
    for (dist_targets) |dist| {
        if (wanted) |name| if (!std.mem.eql(u8, dist.platform, name)) continue;
        var query = std.Target.Query.parse(.{ .arch_os_abi = dist.triple }) catch |err| {
            std.debug.panic("dist target {s}: {s}", .{ dist.triple, @errorName(err) });
        };
        // x86-64 code outside the kernels runs on the same pinned baseline as the local build;
        // aarch64's baseline (ARMv8-A) includes NEON.
        if (query.cpu_arch == .x86_64) query.cpu_model = baseline.cpu_model;
        const library = addCore(b, "graft", .ReleaseFast, query, .{ .strip = true });
        const install = b.addInstallArtifact(library, .{
            .dest_dir = .{ .override = .{ .custom = b.fmt("dist/{s}", .{dist.platform}) } },
            .implib_dir = .disabled,
            .pdb_dir = .disabled,
        });
        dist_step.dependOn(&install.step);
    }
}

/// This machine's platform as npm names it (the platform package's suffix).
fn hostPlatform(b: *std.Build) []const u8 {
    const host = b.graph.host.result;
    const os = switch (host.os.tag) {
        .linux => "linux",
        .macos => "darwin",
        .windows => "win32",
        else => @tagName(host.os.tag),
    };
    const cpu = switch (host.cpu.arch) {
        .x86_64 => "x64",
        .aarch64 => "arm64",
        else => @tagName(host.cpu.arch),
    };
    return b.fmt("{s}-{s}", .{ os, cpu });
}

/// How one core library is built beyond its target and optimization.
const CoreOptions = struct {
    strip: bool = false,
    /// Buffers and plan memory from zig/guard.zig instead of libc's malloc (Linux only).
    guard_pages: bool = false,
};

/// One core library for `target`: on x86-64 the kernels are compiled once per SIMD level (see
/// `variants`) and chosen at run time; on aarch64 once, for the baseline with NEON.
fn addCore(
    b: *std.Build,
    name: []const u8,
    optimize: std.builtin.OptimizeMode,
    target: std.Target.Query,
    core: CoreOptions,
) *std.Build.Step.Compile {
    const strip = core.strip;
    const root = b.createModule(.{
        .root_source_file = b.path("zig/root.zig"),
        .target = b.resolveTargetQuery(target),
        .optimize = optimize,
        .link_libc = true,
        .pic = true,
        .strip = strip,
    });
    const core_options = b.addOptions();
    core_options.addOption(bool, "guard_pages", core.guard_pages);
    root.addOptions("core_options", core_options);
    if (target.cpu_arch == .aarch64) {
        addVariant(b, root, name, "neon", target, optimize, strip);
        return b.addLibrary(.{ .linkage = .dynamic, .name = name, .root_module = root });
    }
    inline for (variants) |variant| {
        var query = target;
        query.cpu_model = .{ .explicit = variant[1] };
        query.cpu_features_add = std.Target.x86.featureSet(variant[2]);
        addVariant(b, root, name, variant[0], query, optimize, strip);
    }
    return b.addLibrary(.{ .linkage = .dynamic, .name = name, .root_module = root });
}

/// Compiles `zig/variant.zig` for one kernel build and links it into `root`.
fn addVariant(
    b: *std.Build,
    root: *std.Build.Module,
    name: []const u8,
    variant: []const u8,
    query: std.Target.Query,
    optimize: std.builtin.OptimizeMode,
    strip: bool,
) void {
    const options = b.addOptions();
    options.addOption([]const u8, "variant", variant);
    const module = b.createModule(.{
        .root_source_file = b.path("zig/variant.zig"),
        .target = b.resolveTargetQuery(query),
        .optimize = optimize,
        .link_libc = true,
        .pic = true,
        .strip = strip,
    });
    module.addOptions("build_options", options);
    root.addObject(b.addObject(.{ .name = b.fmt("{s}-{s}", .{ name, variant }), .root_module = module }));
}
