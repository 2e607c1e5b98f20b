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

pub fn build(b: *std.Build) void {
    const fast = addCore(b, "graft", .ReleaseFast);
    const safe = addCore(b, "graft-safe", .ReleaseSafe);
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
}

fn addCore(b: *std.Build, name: []const u8, optimize: std.builtin.OptimizeMode) *std.Build.Step.Compile {
    const root = b.createModule(.{
        .root_source_file = b.path("zig/root.zig"),
        .target = b.resolveTargetQuery(baseline),
        .optimize = optimize,
        .link_libc = true,
        .pic = true,
    });
    inline for (variants) |variant| {
        var query = baseline;
        query.cpu_model = .{ .explicit = variant[1] };
        query.cpu_features_add = std.Target.x86.featureSet(variant[2]);
        const options = b.addOptions();
        options.addOption([]const u8, "variant", variant[0]);
        const module = b.createModule(.{
            .root_source_file = b.path("zig/variant.zig"),
            .target = b.resolveTargetQuery(query),
            .optimize = optimize,
            .link_libc = true,
            .pic = true,
        });
        module.addOptions("build_options", options);
        root.addObject(b.addObject(.{ .name = b.fmt("{s}-{s}", .{ name, variant[0] }), .root_module = module }));
    }
    return b.addLibrary(.{ .linkage = .dynamic, .name = name, .root_module = root });
}
