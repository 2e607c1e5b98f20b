// ggml's own rope (ggml_rope_ext, ext_factor 0, attn_factor 1) on a fixed input, for
// bench/peers/ggml_rope_compare.ts: argv headDim nDims mode freqBase freqScale out.bin in.bin.
// Input [headDim, 3, 5] f32, x[i] = 1.7 sin(0.37 i); positions {0, 4095, 17, -3, 1}; one thread.
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "ggml.h"
#include "ggml-cpu.h"
int main(int argc, char **argv) {
  if (argc != 8) return 2;
  int hd = atoi(argv[1]), nd = atoi(argv[2]), mode = atoi(argv[3]);
  float base = atof(argv[4]), scale = atof(argv[5]);
  int heads = 3, tokens = 5; int pos[5] = {0, 4095, 17, -3, 1};
  struct ggml_init_params ip = { 64 << 20, NULL, false };
  struct ggml_context *ctx = ggml_init(ip);
  struct ggml_tensor *a = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, hd, heads, tokens);
  struct ggml_tensor *p = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, tokens);
  float *x = (float *)a->data;
  for (int i = 0; i < hd * heads * tokens; i++) x[i] = (float)(sin(i * 0.37) * 1.7);
  for (int i = 0; i < tokens; i++) ((int *)p->data)[i] = pos[i];
  struct ggml_tensor *r = ggml_rope_ext(ctx, a, p, NULL, nd, mode, 0, base, scale, 0.0f, 1.0f, 0.0f, 0.0f);
  struct ggml_cgraph *g = ggml_new_graph(ctx);
  ggml_build_forward_expand(g, r);
  ggml_graph_compute_with_ctx(ctx, g, 1);
  FILE *f = fopen(argv[6], "wb"); fwrite(r->data, 4, hd * heads * tokens, f); fclose(f);
  FILE *fi = fopen(argv[7], "wb"); fwrite(x, 4, hd * heads * tokens, fi); fclose(fi);
  return 0;
}
