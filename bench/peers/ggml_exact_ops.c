// ggml's own CPU row-wise ops on given inputs, for tests/ggml_exact_ops_test.ts and
// bench/peers/ggml_exact_ops.sh: rms_norm, rms_norm * weight, silu, swiglu_split, soft_max_ext
// (f16 mask) and rope_ext (ext_factor 0, attn_factor 1). argv: manifest dir threads. Each line of
// dir/manifest.txt is one case (inputs are raw f32 / i32 files in dir, the output is written there):
//   rms_norm     OUT NE0 NE1 EPS X
//   rms_norm_mul OUT NE0 NE1 EPS X W          (W [NE0], broadcast over rows)
//   silu         OUT NE0 NE1 X
//   swiglu       OUT NE0 NE1 X G              (silu(X) * G)
//   soft_max     OUT NE0 NE1 NE2 SCALE X MASK (MASK [NE0, NE1] f32 file, passed to ggml as f16)
//   rope         OUT NE0 NE1 NE2 NDIMS MODE BASE X POS (POS [NE2] i32)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"
#include "ggml-cpu.h"

static const char *dir;

static void *slurp(const char *name, size_t bytes) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "cannot open %s\n", path); exit(1); }
  void *data = malloc(bytes);
  if (fread(data, 1, bytes, f) != bytes) { fprintf(stderr, "short read %s\n", path); exit(1); }
  fclose(f);
  return data;
}

static void load(struct ggml_tensor *t, const char *name) {
  void *data = slurp(name, ggml_nbytes(t));
  memcpy(t->data, data, ggml_nbytes(t));
  free(data);
}

static void spill(const char *name, struct ggml_tensor *t) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(t->data, 1, ggml_nbytes(t), f) != ggml_nbytes(t)) { fprintf(stderr, "cannot write %s\n", path); exit(1); }
  fclose(f);
}

int main(int argc, char **argv) {
  if (argc != 3) { fprintf(stderr, "usage: ggml_exact_ops DIR THREADS\n"); return 2; }
  dir = argv[1];
  int threads = atoi(argv[2]);
  char path[4096];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  FILE *manifest = fopen(path, "r");
  if (!manifest) { fprintf(stderr, "cannot open %s\n", path); return 1; }
  char line[4096];
  while (fgets(line, sizeof line, manifest)) {
    char op[64], out[512], a[512], b[512];
    long n0 = 0, n1 = 0, n2 = 0, nd = 0, mode = 0;
    float f = 0, base = 0;
    if (sscanf(line, "%63s", op) != 1) continue;
    struct ggml_init_params ip = { (size_t)256 << 20, NULL, false };
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *r = NULL;
    if (!strcmp(op, "rms_norm") && sscanf(line, "%*s %511s %ld %ld %f %511s", out, &n0, &n1, &f, a) == 5) {
      struct ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n0, n1);
      load(x, a);
      r = ggml_rms_norm(ctx, x, f);
    } else if (!strcmp(op, "rms_norm_mul") &&
               sscanf(line, "%*s %511s %ld %ld %f %511s %511s", out, &n0, &n1, &f, a, b) == 6) {
      struct ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n0, n1);
      struct ggml_tensor *w = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n0);
      load(x, a);
      load(w, b);
      r = ggml_mul(ctx, ggml_rms_norm(ctx, x, f), w);
    } else if (!strcmp(op, "silu") && sscanf(line, "%*s %511s %ld %ld %511s", out, &n0, &n1, a) == 4) {
      struct ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n0, n1);
      load(x, a);
      r = ggml_silu(ctx, x);
    } else if (!strcmp(op, "swiglu") &&
               sscanf(line, "%*s %511s %ld %ld %511s %511s", out, &n0, &n1, a, b) == 5) {
      struct ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n0, n1);
      struct ggml_tensor *g = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n0, n1);
      load(x, a);
      load(g, b);
      r = ggml_swiglu_split(ctx, x, g);
    } else if (!strcmp(op, "soft_max") &&
               sscanf(line, "%*s %511s %ld %ld %ld %f %511s %511s", out, &n0, &n1, &n2, &f, a, b) == 7) {
      struct ggml_tensor *x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n0, n1, n2);
      struct ggml_tensor *m = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, n0, n1);
      load(x, a);
      float *m32 = slurp(b, (size_t)n0 * n1 * 4);
      for (long i = 0; i < n0 * n1; i++) ((ggml_fp16_t *)m->data)[i] = ggml_fp32_to_fp16(m32[i]);
      free(m32);
      r = ggml_soft_max_ext(ctx, x, m, f, 0.0f);
    } else if (!strcmp(op, "rope") &&
               sscanf(line, "%*s %511s %ld %ld %ld %ld %ld %f %511s %511s", out, &n0, &n1, &n2, &nd, &mode, &base, a, b) == 9) {
      struct ggml_tensor *x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n0, n1, n2);
      struct ggml_tensor *p = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n2);
      load(x, a);
      load(p, b);
      r = ggml_rope_ext(ctx, x, p, NULL, (int)nd, (int)mode, 0, base, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);
    } else {
      fprintf(stderr, "bad manifest line: %s", line);
      return 1;
    }
    struct ggml_cgraph *g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, r);
    ggml_graph_compute_with_ctx(ctx, g, threads);
    spill(out, r);
    ggml_free(ctx);
  }
  fclose(manifest);
  return 0;
}
