/**
 * Which kernel build a CPU backend runs. The core carries one build per SIMD level (AVX2 and
 * AVX-512) and reports the best this CPU runs; `GRAFT_CPU` caps it for the whole process, so an
 * AVX-512 machine can run everything on the AVX2 kernels (as an AVX2-only CPU would).
 * @module
 */

import { GraftError } from "../../errors.ts";
import { loadCore, type LoadOptions, type NativeCore } from "../../core/core.ts";

/** A kernel build: the x86 builds of the native core, or the WebAssembly core's SIMD128. */
export type SimdLevel = "avx2" | "avx512" | "simd128";

/** What `simd` in the backend's options accepts. */
export type SimdChoice = "auto" | SimdLevel;

/** The kernel builds by their core level number (0: the CPU runs none of them). */
const LEVELS = ["none", "avx2", "avx512", "simd128"] as const;

/** The name of a core level number (1 AVX2, 2 AVX-512, 3 SIMD128). */
export function simdLevelName(level: number): SimdLevel {
  const name = LEVELS[level];
  if (name === undefined || name === "none") {
    throw new GraftError(`simd level ${level} names no kernel build`);
  }
  return name;
}

/** The value `GRAFT_CPU` may take. */
const CHOICES: readonly string[] = ["auto", "avx2", "avx512"];

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
  const capped = Math.min(cpu, LEVELS.indexOf(cap));
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
  if (best === 0 || level > best) {
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
  const { level } = bestLevel(loadCore(options));
  return (["avx2", "avx512"] as const).slice(0, level);
}
