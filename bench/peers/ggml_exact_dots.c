// ggml's own CPU mul_mat results on seeded inputs, the reference tests/ggml_exact_dots_test.ts
// checks Graft against bit for bit. Build and run with bench/peers/ggml_exact_dots.sh, which
// writes tests/fixtures/ggml_exact_dots.json (and, from the AVX2 build, ggml_exact_dots_avx2.json).
//
// Each case is one ggml_mul_mat computed by the pinned build's CPU backend (ggml_backend_cpu_init,
// 1 and 2 threads: the two must agree) on inputs generated from a seed with xorshift32, the same
// generator the Deno test runs (see gen_* below and the test's mirror of them), so the fixture
// holds only the case parameters and the f32 results (base64, little-endian):
//   quant  q4_1 / q8_0 / q5_0 / q5_1 weights [k, m] (raw blocks: random f16 scales, random quants) x f32 [k, n]
//          (what ggml runs: vec_dot_q4_1_q8_1 / vec_dot_q8_0_q8_0 / vec_dot_q5_*_q8_* per element
//          after quantizing src1; q8_0 and q5_0 with n >= 2 go to llamafile_sgemm's tinyBLAS_Q0_AVX)
//          and q4_K / q5_K / q6_K weights (random valid super-blocks, see gen_k_block) x f32 [k, n]
//          (after quantizing src1 to q8_K: ggml_vec_dot_q*_K_q8_K per element below 8 columns,
//          the tiled matmul of ggml-cpu/tiled/ from 8 on (GGML_CPU_TILED_MM, on by default); x86
//          has no llamafile path for them, and nothing is repacked here: the weights live in a
//          plain CPU buffer, as llama.cpp's with --no-repack)
//   kq     llama.cpp's decode K*Q: an f16 K cache of 256 cells x 192 (3 heads of 64), viewed as
//          [64, n_kv, 3] (row stride 384 bytes, head stride 128), times q f32 [64, 9, n]
//          permuted to [64, n, 9] (GQA: 3 q heads per K head)
//   kqv    llama.cpp's V * softmax(KQ) with the transposed V cache: f16 [256 cells] x 192 viewed
//          as [n_kv, 64, 3] (row stride 512 bytes, head stride 512*64), times kq f32 [n_kv, n, 9]
// f16 with n = 1 runs ggml_vec_dot_f16 per element; with n >= 2 llamafile_sgemm's tinyBLAS when
// k is a multiple of its vector width and m of 4, else vec_dot_f16 again.
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng_state;
static uint32_t next_u32(void) {
  uint32_t x = rng_state;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  rng_state = x;
  return x;
}
// Uniform in [-1, 1), multiples of 2^-23: exact in f32.
static float next_signed(void) { return (float)((double)(next_u32() >> 8) / 8388608.0 - 1.0); }
// Uniform in [0, 1), multiples of 2^-24.
static float next_unit(void) { return (float)((double)(next_u32() >> 8) / 16777216.0); }
// An f16 of magnitude in [2^-3, 2), random sign.
static uint16_t next_f16(void) {
  uint32_t r = next_u32() >> 16;
  return (uint16_t)((r & 0x8000) | ((12 + ((r >> 10) & 3)) << 10) | (r & 0x3ff));
}

static uint8_t next_byte(void) { return (uint8_t)(next_u32() & 0xff); }

// A k-quant super-block's f16 scale of magnitude in [2^-13, 2^-11) (exponent field 2 or 3), with
// `sign`: as small as real weights' (d times a 6-bit scale times a quant is a weight), far from
// f16's subnormals.
static uint16_t next_f16_k(uint16_t sign) { return (uint16_t)(sign | 0x0800 | (next_u32() & 0x7ff)); }

// q4_K / q5_K: d, dmin (positive, as ggml's quantizer writes them), the 12 scale bytes (any 12
// bytes are 8 valid 6-bit scales and 8 6-bit mins), q5_K's 32 bytes of fifth bits, 128 bytes of
// nibbles. q6_K: 128 bytes of low nibbles, 64 of high bit pairs, 16 int8 scales (the full range),
// d of either sign (ggml's quantizer writes negative ones too).
static void gen_k_block(enum ggml_type type, uint8_t *p) {
  if (type == GGML_TYPE_Q6_K) {
    for (int i = 0; i < 208; i++) p[i] = next_byte();
    uint16_t d = next_f16_k((uint16_t)(next_u32() & 0x8000));
    memcpy(p + 208, &d, 2);
    return;
  }
  uint16_t d = next_f16_k(0), dmin = next_f16_k(0);
  memcpy(p, &d, 2);
  memcpy(p + 2, &dmin, 2);
  int rest = type == GGML_TYPE_Q5_K ? 12 + 32 + 128 : 12 + 128;
  for (int i = 0; i < rest; i++) p[4 + i] = next_byte();
}

static int is_k_quant(enum ggml_type type) {
  return type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K || type == GGML_TYPE_Q6_K;
}

static void gen_blocks(enum ggml_type type, uint8_t *out, size_t blocks) {
  for (size_t b = 0; b < blocks; b++) {
    if (is_k_quant(type)) {
      gen_k_block(type, out + b * ggml_type_size(type));
    } else if (type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q5_1) {
      // d (and q5_1's negative m), the 32 fifth bits, 16 bytes of nibbles.
      const int with_min = type == GGML_TYPE_Q5_1;
      uint8_t *p = out + b * (with_min ? 24 : 22);
      uint16_t d = (uint16_t)(0x2000 | (next_u32() & 0x3ff));
      memcpy(p, &d, 2);
      if (with_min) {
        uint16_t m = (uint16_t)(0xAC00 | (next_u32() & 0x3ff));
        memcpy(p + 2, &m, 2);
      }
      uint32_t qh = next_u32();
      memcpy(p + (with_min ? 4 : 2), &qh, 4);
      for (int i = 0; i < 16; i++) p[(with_min ? 8 : 6) + i] = (uint8_t)(next_u32() & 0xff);
    } else if (type == GGML_TYPE_Q4_0) {
      // d (magnitude in [2^-9, 2^-8), either sign: repacked weights keep it as it is), 16 bytes
      // of nibbles.
      uint8_t *p = out + b * 18;
      uint32_t r = next_u32();
      uint16_t d = (uint16_t)((r & 0x8000) | 0x1C00 | (r & 0x3ff));
      memcpy(p, &d, 2);
      for (int i = 0; i < 16; i++) p[2 + i] = next_byte();
    } else if (type == GGML_TYPE_Q4_1) {
      uint8_t *p = out + b * 20;
      uint16_t d = (uint16_t)(0x2000 | (next_u32() & 0x3ff));
      uint16_t m = (uint16_t)(0xAC00 | (next_u32() & 0x3ff));
      memcpy(p, &d, 2);
      memcpy(p + 2, &m, 2);
      for (int i = 0; i < 16; i++) p[4 + i] = (uint8_t)(next_u32() & 0xff);
    } else {
      uint8_t *p = out + b * 34;
      uint16_t d = (uint16_t)(0x1C00 | (next_u32() & 0x3ff));
      memcpy(p, &d, 2);
      for (int i = 0; i < 32; i++) p[2 + i] = (uint8_t)(int8_t)((int)(next_u32() % 255) - 127);
    }
  }
}

// src1 of the quant cases: [-1, 1) times 1, 2, 4 or 8 by block, so blocks' scales differ.
static void gen_activations(float *x, size_t count) {
  for (size_t i = 0; i < count; i++) x[i] = next_signed() * (float)(1u << ((i >> 5) % 4));
}

// src1 of the k-quant cases: [-1, 1) times 1, 2, 4 or 8 by group of 16 (q8_K's bsums differ),
// and an outlier 16 times larger every 61 elements, which sets its super-block's q8_K scale.
static void gen_activations_k(float *x, size_t count) {
  for (size_t i = 0; i < count; i++) {
    x[i] = next_signed() * (float)(1u << ((i >> 4) % 4)) * (i % 61 == 0 ? 16.0f : 1.0f);
  }
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static void put_base64(FILE *f, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16;
    if (i + 1 < n) v |= (uint32_t)p[i + 1] << 8;
    if (i + 2 < n) v |= p[i + 2];
    fputc(b64[(v >> 18) & 63], f);
    fputc(b64[(v >> 12) & 63], f);
    fputc(i + 1 < n ? b64[(v >> 6) & 63] : '=', f);
    fputc(i + 2 < n ? b64[v & 63] : '=', f);
  }
}

struct spec {
  const char *kind;  // quant | kq | kqv
  enum ggml_type type;
  int k, m, n, n_kv;
  uint32_t seed;
};

// A quant case with src0 in the CPU_REPACK buffer type (ggml's repacked 8x8 kernels) and src1
// [k, n, batch] (ne12 = batch; src0, 2-D, broadcast over it); `ties`: plant_ties on src1.
struct repack_spec {
  struct spec s;
  int batch;
  int ties;
};

// After src1's generation, each of its 256-blocks (a q8_K super-block of one column) gets
// element i = -256 and element j > i = +256, larger than every other value (at most 128 in
// size): the tie where ggml_quantize_mat_q8_K_4x8 (iscale -127 / amax when some element is
// +amax) and quantize_row_q8_K (the sign of the first largest element) take opposite signs.
// (The other sign negates d and every quant exactly, so no output bit depends on it; the cases
// check that the tie changes nothing else.)
static void plant_ties(float *x, size_t count) {
  for (size_t at = 0; at + 256 <= count; at += 256) {
    uint32_t i = next_u32() % 255;
    uint32_t j = i + 1 + next_u32() % (255 - i);
    x[at + i] = -256.0f;
    x[at + j] = 256.0f;
  }
}

// The CPU backend's CPU_REPACK buffer type (never AMX's, which SIGILLs on this VM), from the
// CPU device's extra buffer types.
static ggml_backend_buffer_type_t repack_buft(void) {
  ggml_backend_reg_t reg = ggml_backend_cpu_reg();
  ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, 0);
  typedef ggml_backend_buffer_type_t *(*get_extra_t)(ggml_backend_dev_t);
  get_extra_t get_extra =
      (get_extra_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
  if (get_extra) {
    for (ggml_backend_buffer_type_t *t = get_extra(dev); t && *t; t++) {
      if (strcmp(ggml_backend_buft_name(*t), "CPU_REPACK") == 0) return *t;
    }
  }
  fprintf(stderr, "ggml_exact_dots: no CPU_REPACK buffer type\n");
  exit(1);
}

enum { CELLS = 256, EMBD = 192, HEAD = 64, KV_HEADS = 3, Q_HEADS = 9 };

// Builds the case's graph in a fresh context on `backend`, sets the inputs, computes, and copies
// the result into `out` (allocated here); returns the element count.
static size_t run_case(ggml_backend_t backend, const struct spec *s, int repack, int batch, int ties,
                       float **out) {
  struct ggml_init_params ip = {ggml_tensor_overhead() * 16 + ggml_graph_overhead(), NULL, true};
  struct ggml_context *ctx = ggml_init(ip);
  // A repacked src0 lives in a context (and buffer) of its own, of the CPU_REPACK type.
  struct ggml_context *ctx_a = repack ? ggml_init(ip) : ctx;
  ggml_backend_buffer_t buf_a = NULL;
  struct ggml_tensor *a, *b, *src0, *src1;
  rng_state = s->seed;
  if (strcmp(s->kind, "quant") == 0) {
    a = ggml_new_tensor_2d(ctx_a, s->type, s->k, s->m);
    b = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, s->k, s->n, batch);
    src0 = a;
    src1 = b;
  } else if (strcmp(s->kind, "kq") == 0) {
    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, EMBD, CELLS);
    b = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, HEAD, Q_HEADS, s->n);
    src0 = ggml_view_3d(ctx, a, HEAD, s->n_kv, KV_HEADS, a->nb[1], HEAD * 2, 0);
    src1 = ggml_permute(ctx, b, 0, 2, 1, 3);
  } else {
    a = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, CELLS, EMBD);
    b = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, s->n_kv, s->n, Q_HEADS);
    src0 = ggml_view_3d(ctx, a, s->n_kv, HEAD, KV_HEADS, a->nb[1], a->nb[1] * HEAD, 0);
    src1 = b;
  }
  struct ggml_tensor *c = ggml_mul_mat(ctx, src0, src1);
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, c);
  if (repack) buf_a = ggml_backend_alloc_ctx_tensors_from_buft(ctx_a, repack_buft());
  ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
  if (!buf || (repack && !buf_a)) {
    fprintf(stderr, "ggml_exact_dots: allocation failed\n");
    exit(1);
  }
  // Inputs: src0's bytes, then src1's floats, in memory order.
  size_t a_bytes = ggml_nbytes(a);
  uint8_t *ad = malloc(a_bytes);
  if (strcmp(s->kind, "quant") == 0) {
    gen_blocks(s->type, ad, a_bytes / ggml_type_size(s->type));
  } else {
    uint16_t *h = (uint16_t *)ad;
    for (size_t i = 0; i < a_bytes / 2; i++) h[i] = next_f16();
  }
  size_t b_count = ggml_nelements(b);
  float *bd = malloc(b_count * sizeof(float));
  if (strcmp(s->kind, "quant") == 0 && is_k_quant(s->type)) gen_activations_k(bd, b_count);
  else if (strcmp(s->kind, "quant") == 0) gen_activations(bd, b_count);
  else if (strcmp(s->kind, "kq") == 0) for (size_t i = 0; i < b_count; i++) bd[i] = next_signed();
  else for (size_t i = 0; i < b_count; i++) bd[i] = next_unit();
  if (ties) plant_ties(bd, b_count);
  ggml_backend_tensor_set(a, ad, 0, a_bytes);
  ggml_backend_tensor_set(b, bd, 0, b_count * sizeof(float));
  if (ggml_backend_graph_compute(backend, gf) != GGML_STATUS_SUCCESS) {
    fprintf(stderr, "ggml_exact_dots: compute failed\n");
    exit(1);
  }
  size_t count = ggml_nelements(c);
  *out = malloc(count * sizeof(float));
  ggml_backend_tensor_get(c, *out, 0, count * sizeof(float));
  free(ad);
  free(bd);
  ggml_backend_buffer_free(buf);
  if (buf_a) ggml_backend_buffer_free(buf_a);
  if (ctx_a != ctx) ggml_free(ctx_a);
  ggml_free(ctx);
  return count;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "-";
  // "avx2": the kq / kqv and k-quant cases only (for the AVX2 build). Its 32-element quantized
  // dots give the AVX-512 build's bits (the same __AVX2__ code, and VNNI or not the same integer
  // lanes); its f16 dots do not; its k-quant dots should (the same __AVX2__ code: no AVX-512
  // branch), and the fixture records them to show it.
  const int avx2_set = argc > 2 && strcmp(argv[2], "avx2") == 0;
  static const struct spec specs[] = {
      // SmolLM2-135M's q4_1 shapes (576 -> 1536 and back), decode and small prefill columns.
      {"quant", GGML_TYPE_Q4_1, 576, 1536, 1, 0, 101},
      {"quant", GGML_TYPE_Q4_1, 576, 1536, 2, 0, 102},
      {"quant", GGML_TYPE_Q4_1, 576, 1536, 3, 0, 103},
      {"quant", GGML_TYPE_Q4_1, 1536, 576, 1, 0, 104},
      {"quant", GGML_TYPE_Q4_1, 96, 45, 1, 0, 105},
      {"quant", GGML_TYPE_Q4_1, 32, 13, 2, 0, 106},
      {"quant", GGML_TYPE_Q4_1, 224, 19, 5, 0, 107},
      // The tied q8_0 output layer (576 x 49152 in the model; fewer rows here).
      {"quant", GGML_TYPE_Q8_0, 576, 2048, 1, 0, 201},
      {"quant", GGML_TYPE_Q8_0, 160, 37, 1, 0, 202},
      {"quant", GGML_TYPE_Q8_0, 576, 256, 2, 0, 203},
      {"quant", GGML_TYPE_Q8_0, 576, 256, 3, 0, 204},
      {"quant", GGML_TYPE_Q8_0, 96, 40, 5, 0, 205},
      // q5_0 (tinyBLAS_Q0_AVX from two columns on: the same sums) and q5_1.
      {"quant", GGML_TYPE_Q5_0, 576, 1536, 1, 0, 501},
      {"quant", GGML_TYPE_Q5_0, 576, 256, 2, 0, 502},
      {"quant", GGML_TYPE_Q5_0, 96, 40, 5, 0, 503},
      {"quant", GGML_TYPE_Q5_1, 576, 1536, 1, 0, 601},
      {"quant", GGML_TYPE_Q5_1, 224, 19, 5, 0, 602},
      {"quant", GGML_TYPE_Q5_1, 32, 13, 2, 0, 603},
      // Decode attention (n = 1) and two tokens (tinyBLAS in ggml).
      {"kq", GGML_TYPE_F16, 64, 0, 1, 256, 301},
      {"kq", GGML_TYPE_F16, 64, 0, 1, 32, 302},
      {"kq", GGML_TYPE_F16, 64, 0, 1, 96, 303},
      {"kq", GGML_TYPE_F16, 64, 0, 2, 96, 304},
      {"kqv", GGML_TYPE_F16, 0, 64, 1, 256, 401},
      {"kqv", GGML_TYPE_F16, 0, 64, 1, 32, 402},
      {"kqv", GGML_TYPE_F16, 0, 64, 1, 96, 403},
      {"kqv", GGML_TYPE_F16, 0, 64, 1, 75, 404},
      {"kqv", GGML_TYPE_F16, 0, 64, 1, 160, 405},
      {"kqv", GGML_TYPE_F16, 0, 64, 2, 96, 406},
      // Prefill-like: tinyBLAS where it takes the shape (n >= 2, k % KN == 0, m % 4 == 0),
      // vec_dot_f16 where it declines (n_kv = 75: k or m not a multiple).
      {"kq", GGML_TYPE_F16, 64, 0, 3, 32, 307},
      {"kq", GGML_TYPE_F16, 64, 0, 2, 75, 308},
      {"kq", GGML_TYPE_F16, 64, 0, 7, 256, 309},
      {"kqv", GGML_TYPE_F16, 0, 64, 3, 75, 407},
      {"kqv", GGML_TYPE_F16, 0, 64, 4, 256, 408},
      {"kqv", GGML_TYPE_F16, 0, 64, 24, 128, 409},
      // k-quants, weights not repacked: SmolLM2's ffn_down (1536 -> 576) of a Q4_K_M file,
      // decode and prefill columns, k = 256 * (1..6). ggml_vec_dot_q{4,5,6}_K_q8_K per element
      // below 8 columns; from 8 on the tiled matmul (ggml-cpu/tiled: its narrow path up to 16
      // columns, 16 x 16 microtiles above).
      {"quant", GGML_TYPE_Q4_K, 1536, 576, 1, 0, 701},
      {"quant", GGML_TYPE_Q4_K, 1536, 96, 4, 0, 702},
      {"quant", GGML_TYPE_Q4_K, 256, 37, 1, 0, 703},
      {"quant", GGML_TYPE_Q4_K, 512, 19, 3, 0, 704},
      {"quant", GGML_TYPE_Q4_K, 768, 24, 2, 0, 705},
      {"quant", GGML_TYPE_Q4_K, 1024, 13, 5, 0, 706},
      {"quant", GGML_TYPE_Q4_K, 1280, 16, 8, 0, 707},
      {"quant", GGML_TYPE_Q4_K, 1536, 8, 24, 0, 708},
      {"quant", GGML_TYPE_Q5_K, 1536, 576, 1, 0, 801},
      {"quant", GGML_TYPE_Q5_K, 1536, 96, 4, 0, 802},
      {"quant", GGML_TYPE_Q5_K, 256, 37, 1, 0, 803},
      {"quant", GGML_TYPE_Q5_K, 512, 19, 3, 0, 804},
      {"quant", GGML_TYPE_Q5_K, 768, 24, 2, 0, 805},
      {"quant", GGML_TYPE_Q5_K, 1024, 13, 5, 0, 806},
      {"quant", GGML_TYPE_Q5_K, 1280, 16, 8, 0, 807},
      {"quant", GGML_TYPE_Q5_K, 1536, 8, 24, 0, 808},
      {"quant", GGML_TYPE_Q6_K, 1536, 576, 1, 0, 901},
      {"quant", GGML_TYPE_Q6_K, 1536, 96, 4, 0, 902},
      {"quant", GGML_TYPE_Q6_K, 256, 37, 1, 0, 903},
      {"quant", GGML_TYPE_Q6_K, 512, 19, 3, 0, 904},
      {"quant", GGML_TYPE_Q6_K, 768, 24, 2, 0, 905},
      {"quant", GGML_TYPE_Q6_K, 1024, 13, 5, 0, 906},
      {"quant", GGML_TYPE_Q6_K, 1280, 16, 8, 0, 907},
      {"quant", GGML_TYPE_Q6_K, 1536, 8, 24, 0, 908},
      // Either side of the tiled path's threshold (7 and 8 columns) and of its narrow path
      // (16 and 17), rows no multiple of its 16.
      {"quant", GGML_TYPE_Q4_K, 512, 21, 7, 0, 709},
      {"quant", GGML_TYPE_Q4_K, 1536, 40, 16, 0, 710},
      {"quant", GGML_TYPE_Q4_K, 768, 37, 17, 0, 711},
      {"quant", GGML_TYPE_Q5_K, 512, 21, 7, 0, 809},
      {"quant", GGML_TYPE_Q5_K, 1536, 40, 16, 0, 810},
      {"quant", GGML_TYPE_Q5_K, 768, 37, 17, 0, 811},
      {"quant", GGML_TYPE_Q6_K, 512, 21, 7, 0, 909},
      {"quant", GGML_TYPE_Q6_K, 1536, 40, 16, 0, 910},
      {"quant", GGML_TYPE_Q6_K, 768, 37, 17, 0, 911},
  };
  static const struct repack_spec repack_specs[] = {
      // Repacked weights (src0 in CPU_REPACK, as a default llama.cpp run puts q4_0 and q4_K
      // weights with rows a multiple of 8 on an AVX2 CPU): ggml_quantize_mat_*_4x8 and
      // ggml_gemm_*_8x8 on src1's columns in groups of 4, quantize_row_* and ggml_gemv_*_8x8 on
      // the n % 4 columns left. SmolLM2 shapes, columns on both sides of every group of 4 and
      // of the AVX-512 gemm's 16 rows, and a src1 batch (ne12 = 3, src0 broadcast).
      {{"quant", GGML_TYPE_Q4_0, 576, 576, 1, 0, 1001}, 1},
      {{"quant", GGML_TYPE_Q4_0, 576, 1536, 2, 0, 1002}, 1},
      {{"quant", GGML_TYPE_Q4_0, 1536, 576, 3, 0, 1003}, 1},
      {{"quant", GGML_TYPE_Q4_0, 96, 8, 4, 0, 1004}, 1},
      {{"quant", GGML_TYPE_Q4_0, 160, 16, 5, 0, 1005}, 1},
      {{"quant", GGML_TYPE_Q4_0, 32, 24, 7, 0, 1006}, 1},
      {{"quant", GGML_TYPE_Q4_0, 576, 8, 8, 0, 1007}, 1},
      {{"quant", GGML_TYPE_Q4_0, 224, 16, 9, 0, 1008}, 1},
      {{"quant", GGML_TYPE_Q4_0, 64, 24, 12, 0, 1009}, 1},
      {{"quant", GGML_TYPE_Q4_0, 288, 40, 13, 0, 1010}, 1},
      {{"quant", GGML_TYPE_Q4_0, 576, 16, 20, 0, 1011}, 1},
      {{"quant", GGML_TYPE_Q4_0, 128, 24, 64, 0, 1012}, 1},
      {{"quant", GGML_TYPE_Q4_0, 96, 16, 5, 0, 1013}, 3},
      {{"quant", GGML_TYPE_Q4_K, 1536, 576, 1, 0, 1101}, 1},
      {{"quant", GGML_TYPE_Q4_K, 512, 1536, 2, 0, 1102}, 1},
      {{"quant", GGML_TYPE_Q4_K, 1536, 576, 3, 0, 1103}, 1},
      {{"quant", GGML_TYPE_Q4_K, 256, 8, 4, 0, 1104}, 1},
      {{"quant", GGML_TYPE_Q4_K, 768, 16, 5, 0, 1105}, 1},
      {{"quant", GGML_TYPE_Q4_K, 1024, 24, 7, 0, 1106}, 1},
      {{"quant", GGML_TYPE_Q4_K, 1280, 8, 8, 0, 1107}, 1},
      {{"quant", GGML_TYPE_Q4_K, 1536, 16, 9, 0, 1108}, 1},
      {{"quant", GGML_TYPE_Q4_K, 512, 24, 12, 0, 1109}, 1},
      {{"quant", GGML_TYPE_Q4_K, 256, 40, 13, 0, 1110}, 1},
      {{"quant", GGML_TYPE_Q4_K, 768, 16, 20, 0, 1111}, 1},
      {{"quant", GGML_TYPE_Q4_K, 512, 24, 64, 0, 1112}, 1},
      {{"quant", GGML_TYPE_Q4_K, 512, 16, 6, 0, 1113}, 3},
      // -amax before +amax in every src1 super-block (plant_ties), in the gemm's groups of 4
      // columns and the gemv's columns left, one src1 batch and two.
      {{"quant", GGML_TYPE_Q4_K, 768, 24, 6, 0, 1114}, 1, 1},
      {{"quant", GGML_TYPE_Q4_K, 512, 16, 9, 0, 1115}, 2, 1},
  };
  FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(path, "w");
  if (!f) {
    perror(path);
    return 1;
  }
  ggml_backend_t backend = ggml_backend_cpu_init();
  fprintf(f, "{\n  \"about\": \"ggml CPU mul_mat results (pinned llama.cpp, %s build) on inputs from "
             "bench/peers/ggml_exact_dots.c's generator; written by bench/peers/ggml_exact_dots.sh\",\n",
          ggml_cpu_has_avx512() ? "AVX-512" : "AVX2");
  fprintf(f, "  \"cases\": [\n");
  size_t n_specs = sizeof specs / sizeof specs[0];
  size_t n_repack = sizeof repack_specs / sizeof repack_specs[0];
  int first = 1;
  for (size_t i = 0; i < n_specs + n_repack; i++) {
    const int repack = i >= n_specs;
    const struct spec *s = repack ? &repack_specs[i - n_specs].s : &specs[i];
    const int batch = repack ? repack_specs[i - n_specs].batch : 1;
    const int ties = repack ? repack_specs[i - n_specs].ties : 0;
    if (avx2_set && s->type != GGML_TYPE_F16 && !is_k_quant(s->type) && !repack) continue;
    float *one = NULL, *two = NULL;
    ggml_backend_cpu_set_n_threads(backend, 1);
    size_t count = run_case(backend, s, repack, batch, ties, &one);
    ggml_backend_cpu_set_n_threads(backend, 2);
    run_case(backend, s, repack, batch, ties, &two);
    if (memcmp(one, two, count * sizeof(float)) != 0) {
      fprintf(stderr, "ggml_exact_dots: case %zu: 1 and 2 threads differ\n", i);
      return 1;
    }
    fprintf(f, "%s    {\"kind\": \"%s\", \"type\": \"%s\", \"k\": %d, \"m\": %d, \"n\": %d, \"n_kv\": %d, \"seed\": %u, ",
            first ? "" : ",\n", s->kind, ggml_type_name(s->type), s->k, s->m, s->n, s->n_kv, s->seed);
    first = 0;
    if (repack) fprintf(f, "\"repack\": true, \"batch\": %d, ", batch);
    if (ties) fprintf(f, "\"ties\": true, ");
    fprintf(f, "\"bits\": \"");
    put_base64(f, (const uint8_t *)one, count * sizeof(float));
    fprintf(f, "\"}");
    free(one);
    free(two);
  }
  fprintf(f, "\n  ]\n}\n");
  if (f != stdout) fclose(f);
  ggml_backend_free(backend);
  return 0;
}
