// Times ggml's own CPU mul_mat (mat-vec at n=1, GEMM at larger n) on quantized weights, as a peer
// number for Graft's kernels. Build and run with bench/peers/ggml_gemv.sh.
//
// The weights are R copies of one k x m matrix (ggml order: ne0 = k), R chosen so that the copies
// together are at least twice the last-level cache: a mat-vec rotating through them reads every
// weight from DRAM, as a model's layers do, instead of timing a cache-resident matrix.
// Each copy has its own graph, ggml_mul_mat(W_i, x); a timed op is one ggml_backend_graph_compute,
// so it includes the quantization of x to the weight type's vec_dot type, as a real mat-vec does.
//
// --repack puts the weights in the CPU backend's extra buffer type (interleaved rows, the layout
// llama.cpp's model loader picks by default on x86/ARM); without it, the plain layout and the kernels
// that test-backend-ops times. --copies R overrides the rotation; --copies 1 keeps one matrix hot
// in cache, as test-backend-ops perf does (it repeats one op on one matrix).
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include <glob.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// Beyond this the copies would crowd a 24 GiB machine that also runs other builds.
#define MAX_WEIGHT_BYTES (6ull << 30)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(void) {
  fprintf(stderr,
          "usage: ggml_gemv [--type q4_0|q8_0|q4_1|q4_K|q6_K|f32|...] [--k 4096] [--m 4096] "
          "[--n 1] [--threads 2] [--seconds 2] [--repack] [--copies R]\n");
  exit(2);
}

// Largest level-3 cache of cpu0 in bytes (sysfs "491520K"), else the largest cache of any level,
// else 32 MiB: the rotation only needs an upper bound on what could stay cached.
static uint64_t llc_bytes(void) {
  glob_t g;
  uint64_t best = 0;
  int best_level = 0;
  if (glob("/sys/devices/system/cpu/cpu0/cache/index*", 0, NULL, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; i++) {
      char path[512];
      int level = 0;
      unsigned long long size = 0;
      char unit = 0;
      snprintf(path, sizeof path, "%s/level", g.gl_pathv[i]);
      FILE *f = fopen(path, "r");
      if (!f) continue;
      if (fscanf(f, "%d", &level) != 1) level = 0;
      fclose(f);
      snprintf(path, sizeof path, "%s/size", g.gl_pathv[i]);
      f = fopen(path, "r");
      if (!f) continue;
      int got = fscanf(f, "%llu%c", &size, &unit);
      fclose(f);
      if (got < 1) continue;
      if (got == 2 && unit == 'K') size <<= 10;
      if (got == 2 && unit == 'M') size <<= 20;
      if (level > best_level || (level == best_level && size > best)) {
        best_level = level;
        best = size;
      }
    }
    globfree(&g);
  }
  return best ? best : (32ull << 20);
}

// ggml's debug lines (one "repack tensor" per copy) drowned the result; warnings and errors pass.
static void log_quiet(enum ggml_log_level level, const char *text, void *user_data) {
  static int shown = 1;  // GGML_LOG_LEVEL_CONT continues the previous line: shown if it was
  (void)user_data;
  if (level != GGML_LOG_LEVEL_CONT) shown = level >= GGML_LOG_LEVEL_WARN;
  if (shown) fputs(text, stderr);
}

static enum ggml_type parse_type(const char *name) {
  for (int t = 0; t < GGML_TYPE_COUNT; t++) {
    const char *tn = ggml_type_name((enum ggml_type)t);
    if (tn && strcmp(tn, name) == 0 && ggml_get_type_traits((enum ggml_type)t)->blck_size > 0) {
      return (enum ggml_type)t;
    }
  }
  fprintf(stderr, "ggml_gemv: unknown type %s\n", name);
  exit(2);
}

int main(int argc, char **argv) {
  const char *type_name = "q4_0";
  long long k = 4096, m = 4096, n = 1;
  int threads = 2, repack = 0;
  long long copies = 0;  // 0: enough for 2x the LLC
  double seconds = 2.0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--repack") == 0) {
      repack = 1;
      continue;
    }
    if (i + 1 >= argc) usage();
    const char *v = argv[++i];
    if (strcmp(a, "--type") == 0) type_name = v;
    else if (strcmp(a, "--k") == 0) k = atoll(v);
    else if (strcmp(a, "--m") == 0) m = atoll(v);
    else if (strcmp(a, "--n") == 0) n = atoll(v);
    else if (strcmp(a, "--threads") == 0) threads = atoi(v);
    else if (strcmp(a, "--seconds") == 0) seconds = atof(v);
    else if (strcmp(a, "--copies") == 0) copies = atoll(v);
    else usage();
  }
  if (k <= 0 || m <= 0 || n <= 0 || threads <= 0 || seconds <= 0 || copies < 0) usage();
  ggml_log_set(log_quiet, NULL);
  const enum ggml_type type = parse_type(type_name);
  if (k % ggml_blck_size(type) != 0) {
    fprintf(stderr, "ggml_gemv: k=%lld is not a multiple of %s's block of %lld\n", k, type_name,
            (long long)ggml_blck_size(type));
    return 2;
  }
  if (ggml_quantize_requires_imatrix(type)) {
    fprintf(stderr, "ggml_gemv: %s needs an importance matrix; not supported here\n", type_name);
    return 2;
  }

  const size_t w_bytes = ggml_row_size(type, k) * (size_t)m;
  const uint64_t llc = llc_bytes();
  long long r = copies ? copies : (long long)((2 * llc + w_bytes - 1) / w_bytes);
  if (r < 1) r = 1;
  if ((uint64_t)r * w_bytes > MAX_WEIGHT_BYTES) {
    const long long wanted = r;
    r = (long long)(MAX_WEIGHT_BYTES / w_bytes);
    if (r < 1) r = 1;
    fprintf(stderr, "ggml_gemv: capped at %lld copies of the %lld wanted (6 GiB limit)\n", r, wanted);
  }
  fprintf(stderr, "ggml_gemv: LLC %.0f MiB; %lld copies of %.2f MiB = %.0f MiB of %s weights%s\n",
          llc / 1048576.0, r, w_bytes / 1048576.0, r * w_bytes / 1048576.0, type_name,
          repack ? " (repacked)" : "");

  ggml_backend_t backend = ggml_backend_cpu_init();
  if (!backend) {
    fprintf(stderr, "ggml_gemv: ggml_backend_cpu_init failed\n");
    return 1;
  }
  ggml_backend_cpu_set_n_threads(backend, threads);

  ggml_backend_buffer_type_t w_buft = ggml_backend_cpu_buffer_type();
  if (repack) {
    ggml_backend_reg_t reg = ggml_backend_cpu_reg();
    ggml_backend_dev_get_extra_bufts_t get_extra = (ggml_backend_dev_get_extra_bufts_t)
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    ggml_backend_buffer_type_t *extra = get_extra ? get_extra(ggml_backend_reg_dev_get(reg, 0)) : NULL;
    w_buft = NULL;
    for (; extra && *extra; extra++) {
      if (strcmp(ggml_backend_buft_name(*extra), "CPU_REPACK") == 0) w_buft = *extra;
    }
    if (!w_buft) {
      fprintf(stderr, "ggml_gemv: this ggml build has no CPU_REPACK buffer type\n");
      return 1;
    }
  }

  // Weights in one context, x and the outputs in another: the weights' buffer type may differ.
  struct ggml_init_params wp = {ggml_tensor_overhead() * (size_t)r, NULL, true};
  struct ggml_context *wctx = ggml_init(wp);
  struct ggml_tensor **w = calloc((size_t)r, sizeof *w);
  for (long long i = 0; i < r; i++) w[i] = ggml_new_tensor_2d(wctx, type, k, m);
  ggml_backend_buffer_t w_buf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, w_buft);
  if (!w_buf) {
    fprintf(stderr, "ggml_gemv: could not allocate %.0f MiB of weights\n", r * w_bytes / 1048576.0);
    return 1;
  }
  if (repack && w[0]->extra == NULL) {
    fprintf(stderr, "ggml_gemv: CPU_REPACK has no layout for %s %lldx%lld on this CPU\n", type_name,
            k, m);
    return 1;
  }

  const size_t g_size = 4;  // mul_mat and its two sources
  struct ggml_init_params ap = {
      ggml_tensor_overhead() * (size_t)(r + 1) + ggml_graph_overhead_custom(g_size, false) * (size_t)r,
      NULL, true};
  struct ggml_context *actx = ggml_init(ap);
  struct ggml_tensor *x = ggml_new_tensor_2d(actx, GGML_TYPE_F32, k, n);
  struct ggml_cgraph **gf = calloc((size_t)r, sizeof *gf);
  for (long long i = 0; i < r; i++) {
    gf[i] = ggml_new_graph_custom(actx, g_size, false);
    ggml_build_forward_expand(gf[i], ggml_mul_mat(actx, w[i], x));
  }
  ggml_backend_buffer_t a_buf = ggml_backend_alloc_ctx_tensors(actx, backend);
  if (!a_buf) {
    fprintf(stderr, "ggml_gemv: could not allocate x and the outputs\n");
    return 1;
  }

  // Random weights quantized once; the copies are byte copies (repack: re-laid out per copy).
  srand(1234);
  const size_t n_w = (size_t)k * (size_t)m, n_x = (size_t)k * (size_t)n;
  float *f = malloc((n_w > n_x ? n_w : n_x) * sizeof *f);
  void *q = malloc(w_bytes);
  for (size_t i = 0; i < n_w; i++) f[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
  size_t written = ggml_quantize_chunk(type, f, q, 0, m, k, NULL);
  if (written != w_bytes) {
    fprintf(stderr, "ggml_gemv: quantize wrote %zu bytes, expected %zu\n", written, w_bytes);
    return 1;
  }
  for (long long i = 0; i < r; i++) {
    if (repack) ggml_backend_tensor_set(w[i], q, 0, w_bytes);
    else memcpy(w[i]->data, q, w_bytes);
  }
  for (size_t i = 0; i < n_x; i++) f[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
  ggml_backend_tensor_set(x, f, 0, n_x * sizeof *f);

  // Warm-up: threads started, work buffer grown, and pages touched; one rotation, or 0.5 s of it
  // when an op is slow (n=512), since the rotation then adds nothing the timed loop lacks.
  double t0 = now_s();
  for (long long i = 0; i < r && (i == 0 || now_s() - t0 < 0.5); i++) {
    if (ggml_backend_graph_compute(backend, gf[i]) != GGML_STATUS_SUCCESS) {
      fprintf(stderr, "ggml_gemv: graph compute failed\n");
      return 1;
    }
  }

  // A fast wrong kernel is no peer: check a few outputs of the first graph against the dequantized
  // weights in f64. x is quantized to 8 bits for the dot product, which leaves errors up to ~1.2% of
  // the root-sum-square of the products (measured, k=256 and 4096); the bound allows 5%.
  {
    struct ggml_tensor *y = ggml_graph_node(gf[0], -1);
    float *row = malloc((size_t)k * sizeof *row);
    float *yv = malloc((size_t)m * (size_t)n * sizeof *yv);
    ggml_backend_tensor_get(y, yv, 0, ggml_nbytes(y));
    const struct ggml_type_traits *tt = ggml_get_type_traits(type);
    for (long long i = 0; i < m && i < 16; i++) {
      if (type == GGML_TYPE_F32) memcpy(row, (float *)q + i * k, (size_t)k * sizeof *row);
      else tt->to_float((const char *)q + (size_t)i * ggml_row_size(type, k), row, k);
      for (long long j = 0; j < n && j < 4; j++) {
        double ref = 0, rss = 0;
        for (long long e = 0; e < k; e++) {
          const double p = (double)row[e] * f[j * k + e];
          ref += p;
          rss += p * p;
        }
        const double got = yv[j * m + i];
        if (!(fabs(got - ref) <= 0.05 * sqrt(rss))) {
          fprintf(stderr, "ggml_gemv: y[%lld,%lld] = %g, expected %g\n", j, i, got, ref);
          return 1;
        }
      }
    }
    free(yv);
    free(row);
  }
  free(f);
  free(q);

  long long ops = 0;
  double elapsed = 0;
  t0 = now_s();
  do {
    ggml_backend_graph_compute(backend, gf[ops % r]);
    ops++;
    elapsed = now_s() - t0;
  } while (elapsed < seconds);

  const double per_op = elapsed / (double)ops;
  printf("ggml %s k=%lld m=%lld n=%lld threads=%d us_per_op=%.1f gbps=%.2f gflops=%.2f%s\n",
         type_name, k, m, n, threads, per_op * 1e6, (double)w_bytes / per_op / 1e9,
         2.0 * (double)k * (double)m * (double)n / per_op / 1e9, repack ? " repack=1" : "");

  ggml_backend_buffer_free(a_buf);
  ggml_backend_buffer_free(w_buf);
  ggml_free(actx);
  ggml_free(wctx);
  free(gf);
  free(w);
  ggml_backend_free(backend);
  return 0;
}
