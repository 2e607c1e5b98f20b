/**
 * Which kernel build a CPU backend runs. The core carries one build per SIMD level (AVX2 and
 * AVX-512) and reports the best this CPU runs; `GRAFT_CPU` caps it for the whole process, so an
 * AVX-512 machine can run everything on the AVX2 kernels (as an AVX2-only CPU would).
 * @module
 */

import { GraftError } from "../../errors.ts";
import { loadNativeLibrary, type LoadOptions, type NativeCore } from "../../core/core.ts";

/**
 * A kernel build: AVX2 or AVX-512 on x86-64, NEON on aarch64 (the native core), or the
 * WebAssembly core's SIMD128.
 */
export type SimdLevel = "avx2" | "avx512" | "neon" | "simd128";

/** What `simd` in the backend's options accepts. */
export type SimdChoice = "auto" | SimdLevel;

/** The kernel builds by their core level number (0: the CPU runs none of them). */
const LEVELS = ["none", "avx2", "avx512", "neon", "simd128"] as const;

/** The name of a core level number (1 AVX2, 2 AVX-512, 3 NEON, 4 SIMD128). */
export function simdLevelName(level: number): SimdLevel {
  const name = LEVELS[level];
  if (name === undefined || name === "none") {
    throw new GraftError(`simd level ${level} names no kernel build`);
  }
  return name;
}

/** The value `GRAFT_CPU` may take. */
const CHOICES: readonly string[] = ["auto", "avx2", "avx512", "neon"];

function readCap(): SimdChoice {
  let value: string | undefined;
  try {
    value = Deno.env.get("GRAFT_CPU");
  } catch {
    return "auto"; // without --allow-env the variable is not consulted
  }
  if (value === undefined || value === "") return "auto";
  if (!CHOICES.includes(value)) {
    throw new GraftError(
      `GRAFT_CPU=${JSON.stringify(value)} is not a kernel build; use one of ${CHOICES.join(", ")}`,
    );
  }
  return value as SimdChoice;
}

/** The core's level number of the best build this process may use (0: none), and why. */
export function bestLevel(lib: NativeCore): { level: number; reason: string } {
  const cpu = lib.graft_simd_supported();
  const cap = readCap();
  if (cap === "auto") return { level: cpu, reason: `best on this CPU: ${LEVELS[cpu]}` };
  // NEON (aarch64) and the x86 builds do not order against each other: a cap of the other
  // architecture's build leaves nothing.
  const neon = LEVELS.indexOf("neon");
  const capped = (cpu === neon) !== (cap === "neon") ? 0 : Math.min(cpu, LEVELS.indexOf(cap));
  return {
    level: capped,
    reason: `best on this CPU: ${LEVELS[cpu]}, GRAFT_CPU=${cap} caps it at ${LEVELS[capped]}`,
  };
}

/**
 * Resolves a backend's `simd` option to a core level number (1 AVX2, 2 AVX-512). An explicit
 * option names the build; without one, `GRAFT_CPU` does, else the best the CPU runs.
 */
export function resolveSimd(lib: NativeCore, choice: SimdChoice | undefined): number {
  const wanted = choice ?? "auto";
  if (!CHOICES.includes(wanted)) {
    throw new GraftError(
      `CpuBackend: simd=${JSON.stringify(wanted)} is not a kernel build; use one of ` +
        CHOICES.join(", "),
    );
  }
  const { level: best, reason } = bestLevel(lib);
  const level = wanted === "auto" ? best : LEVELS.indexOf(wanted);
  const neon = LEVELS.indexOf("neon");
  if (best === 0 || level > best || (best === neon) !== (level === neon)) {
    throw new GraftError(
      `CpuBackend: simd=${wanted} cannot run here (AVX2 with FMA and F16C is the minimum; ` +
        `${reason}); use simd: "auto"`,
    );
  }
  return level;
}

/**
 * The kernel builds a CPU backend can use in this process: those the CPU runs, capped by
 * `GRAFT_CPU` (`auto`, `avx2` or `avx512`). Empty when the CPU lacks AVX2.
 *
 * @example
 * ```ts
 * import { simdLevels } from "../../../mod.ts";
 * console.log(simdLevels()); // e.g. ["avx2", "avx512"]
 * ```
 */
export function simdLevels(options: LoadOptions = {}): SimdLevel[] {
  const { level } = bestLevel(loadNativeLibrary(options));
  if (LEVELS[level] === "neon") return ["neon"];
  return (["avx2", "avx512"] as const).slice(0, level);
}
