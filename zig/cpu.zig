//! Run-time CPU feature detection: which kernel build this machine can run. The wasm build has
//! one kernel build (SIMD128, checked by the engine when it compiles the module), so there is
//! nothing to detect: `detect` names it.

const std = @import("std");
const builtin = @import("builtin");

/// Kernel builds by level number (the TS side's `LEVELS`): AVX2 and AVX-512 on x86-64, NEON on
/// aarch64 (its baseline, so every aarch64 CPU runs it), SIMD128 in the wasm build (checked by
/// the engine when it compiles the module: nothing to detect).
pub const SimdLevel = enum(u32) { none = 0, avx2 = 1, avx512 = 2, neon = 3, wasm_simd128 = 4 };

/// The architectures the core is built for (build.zig); anything else fails to compile here.
pub const arch_family: enum { x86_64, aarch64, wasm32 } = switch (builtin.cpu.arch) {
    .x86_64 => .x86_64,
    .aarch64 => .aarch64,
    .wasm32 => .wasm32,
    else => @compileError("the Graft core is built for x86_64, aarch64 and wasm32 only"),
};

/// Whether a CPU whose best build is `supported` runs the `wanted` build: on x86-64 the
/// AVX-512 machine runs the AVX2 build too; on aarch64 there is only NEON, in wasm only SIMD128.
pub fn runs(supported: SimdLevel, wanted: SimdLevel) bool {
    return switch (wanted) {
        .none => false,
        .neon, .wasm_simd128 => supported == wanted,
        .avx2, .avx512 => (supported == .avx2 or supported == .avx512) and
            @intFromEnum(wanted) <= @intFromEnum(supported),
    };
}

const Registers = struct { eax: u32, ebx: u32, ecx: u32, edx: u32 };

fn cpuid(leaf: u32, subleaf: u32) Registers {
    var eax: u32 = undefined;
    var ebx: u32 = undefined;
    var ecx: u32 = undefined;
    var edx: u32 = undefined;
    asm volatile ("cpuid"
        : [eax] "={eax}" (eax),
          [ebx] "={ebx}" (ebx),
          [ecx] "={ecx}" (ecx),
          [edx] "={edx}" (edx),
        : [leaf] "{eax}" (leaf),
          [subleaf] "{ecx}" (subleaf),
    );
    return .{ .eax = eax, .ebx = ebx, .ecx = ecx, .edx = edx };
}

fn xgetbv() u64 {
    var eax: u32 = undefined;
    var edx: u32 = undefined;
    asm volatile ("xgetbv"
        : [eax] "={eax}" (eax),
          [edx] "={edx}" (edx),
        : [index] "{ecx}" (@as(u32, 0)),
    );
    return (@as(u64, edx) << 32) | eax;
}

fn bit(value: u32, index: u5) bool {
    return (value >> index) & 1 == 1;
}

/// The best kernel build the CPU and the OS (saved vector state) support: the AVX-512 build
/// needs x86-64-v4 (AVX-512 F/CD/BW/DQ/VL) and AVX512-VNNI, the AVX2 build x86-64-v3 (AVX2,
/// FMA, F16C, BMI1/2, MOVBE and LZCNT). An AVX-512 CPU without VNNI (Skylake-SP) runs the AVX2
/// build.
pub fn detect() SimdLevel {
    // cpuid and xgetbv exist on x86 only; NEON is part of aarch64's baseline.
    if (comptime arch_family == .wasm32) return .wasm_simd128;
    if (comptime arch_family == .aarch64) return .neon;
    const basic = cpuid(1, 0);
    if (!bit(basic.ecx, 27)) return .none; // OSXSAVE: xgetbv is usable
    const xcr0 = xgetbv();
    if (xcr0 & 0b110 != 0b110) return .none; // the OS saves xmm and ymm state
    const extended = cpuid(7, 0);
    const amd = cpuid(0x80000001, 0);
    const v3 = bit(basic.ecx, 12) and bit(basic.ecx, 29) and bit(basic.ecx, 22) and
        bit(extended.ebx, 5) and bit(extended.ebx, 3) and bit(extended.ebx, 8) and bit(amd.ecx, 5);
    if (!v3) return .none;
    const zmm_state = xcr0 & 0b1110_0000 == 0b1110_0000;
    const v4 = zmm_state and bit(extended.ebx, 16) and bit(extended.ebx, 17) and
        bit(extended.ebx, 28) and bit(extended.ebx, 30) and bit(extended.ebx, 31) and
        bit(extended.ecx, 11); // AVX512_VNNI
    return if (v4) .avx512 else .avx2;
}
