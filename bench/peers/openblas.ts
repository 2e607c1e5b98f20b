/**
 * Debian's OpenBLAS through Deno.dlopen: the peer the CPU benchmarks compare with. The bench
 * task installs `libopenblas0` if it is missing and sets OPENBLAS_CORETYPE=SkylakeX so OpenBLAS
 * uses its AVX-512 kernels on CPUs it does not recognise.
 * @module
 */

const CANDIDATES = [
  "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
  "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
];

const blasSymbols = {
  // (order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
  cblas_sgemm: {
    parameters: [
      "i32",
      "i32",
      "i32",
      "i32",
      "i32",
      "i32",
      "f32",
      "buffer",
      "i32",
      "buffer",
      "i32",
      "f32",
      "buffer",
      "i32",
    ],
    result: "void",
  },
  // (order, trans, M, N, alpha, A, lda, X, incX, beta, Y, incY)
  cblas_sgemv: {
    parameters: [
      "i32",
      "i32",
      "i32",
      "i32",
      "f32",
      "buffer",
      "i32",
      "buffer",
      "i32",
      "f32",
      "buffer",
      "i32",
    ],
    result: "void",
  },
  openblas_set_num_threads: { parameters: ["i32"], result: "void" },
  openblas_get_corename: { parameters: [], result: "pointer" },
} as const satisfies Deno.ForeignLibraryInterface;

export const CblasRowMajor = 101;
export const CblasNoTrans = 111;
export const CblasTrans = 112;

/** The loaded OpenBLAS, or null (with the reason printed) when it is not installed. */
export function loadOpenBlas(): Deno.DynamicLibrary<typeof blasSymbols> | null {
  for (const path of CANDIDATES) {
    try {
      return Deno.dlopen(path, blasSymbols);
    } catch {
      // Try the next location.
    }
  }
  console.warn(`openblas: not found at ${CANDIDATES.join(" or ")}; install libopenblas0`);
  return null;
}

/** OpenBLAS's name for the kernel set it picked ("SkylakeX", "Haswell", ...). */
export function coreName(blas: Deno.DynamicLibrary<typeof blasSymbols>): string {
  const pointer = blas.symbols.openblas_get_corename();
  return pointer ? new Deno.UnsafePointerView(pointer).getCString() : "unknown";
}
