// Greedy-generation reference harness against the pinned llama.cpp (tools/llama_build.sh), compiled
// and driven by tools/llm_fixtures.sh. For one prompt it builds a context with llama-completion's
// defaults (common_context_params_to_llama of common/common.cpp: n_ctx 0 = the model's 8192,
// n_batch 2048, n_ubatch 512, f16 K/V, flash_attn as -fa says (default auto), swa_full false, kv_unified false), then runs
// the same prompt three ways, each from an empty KV cache:
//   "all":    the whole prompt in one llama_decode batch with logits requested at every position
//             (the fixture's prompt_top comes from here);
//   "last":   the whole prompt in one batch with logits at the last position only, as llama-completion
//             decodes it (common_prompt_batch_decode + common_batch_get_one);
//   "single": the prompt one token per llama_decode call (what -b 1 -ub 1 does).
// Each run then generates n tokens one at a time. The choice is llama-completion's --temp 0
// --ignore-eos: end-of-generation tokens are masked (--ignore-eos adds a -inf logit bias to every
// EOG token), then the argmax, lowest id on exact ties (llama_sampler_greedy's order; the CLI's
// temp<=0 path keeps the first maximum of its top-k-sorted list, which differs only on exact ties,
// so the per-step margins are recorded). Raw (unmasked) top-8 logits, the raw argmax and the first
// step where the raw argmax is an EOG token are recorded too.
// Prints one JSON object on stdout; llama.cpp's log goes to stderr only with -v.
//
// Usage: llama_greedy -m MODEL (-f PROMPT_FILE | --ids 1,2,3) -n N [-c N_CTX] [-b N_BATCH]
//        [-ub N_UBATCH] [-t THREADS] [--extra-bufts | --repack REGEX] [-v]
// Weight repacking (extra buffer types, --no-repack in the CLI) is off unless --extra-bufts: on an
// AMX CPU ggml's AMX buffer type takes the Q4_1 weights and this machine's VM faults on ldtilecfg.
// --repack REGEX puts the weights whose names match REGEX in ggml's CPU_REPACK buffer type and
// nothing in any other extra buffer type (never AMX): what llama.cpp's default does on an x86 CPU
// without AMX, where CPU_REPACK is the only extra buffer type and takes exactly the q4_0 and q4_K
// matrices whose ne[1] is a multiple of 8 (ggml_repack_get_optimal_repack_type). The caller
// (tools/llm_fixtures.sh) builds REGEX from the file's tensor table.
#include "llama.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOPK 8

static bool g_verbose = false;
static int g_flash_attn = -1; // -1 unknown, 0 disabled, 1 enabled (from llama.cpp's log)

static void log_cb(enum ggml_log_level level, const char *text, void *user) {
  (void)level;
  (void)user;
  if (strstr(text, "Flash Attention enabled")) g_flash_attn = 1;
  if (strstr(text, "Flash Attention disabled") || strstr(text, "Flash Attention not supported")) {
    g_flash_attn = 0;
  }
  if (g_verbose) fputs(text, stderr);
}

static void die(const char *msg) {
  fprintf(stderr, "llama_greedy: %s\n", msg);
  exit(1);
}

// ggml's CPU_REPACK buffer type, from the CPU device's extra buffer types (as llama.cpp's
// make_cpu_buft_list finds them).
static ggml_backend_buffer_type_t cpu_repack_buft(void) {
  ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  if (!dev) die("no CPU device");
  ggml_backend_dev_get_extra_bufts_t get = (ggml_backend_dev_get_extra_bufts_t)
      ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts");
  if (!get) die("the CPU backend has no extra buffer types");
  for (ggml_backend_buffer_type_t *b = get(dev); b && *b; b++) {
    if (!strcmp(ggml_backend_buft_name(*b), "CPU_REPACK")) return *b;
  }
  die("the CPU backend has no CPU_REPACK buffer type");
  return NULL;
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) die("cannot open prompt file");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) die("cannot read prompt file");
  buf[n] = 0;
  fclose(f);
  *len = (size_t)n;
  return buf;
}

// JSON string of raw bytes: escapes quotes, backslashes and control bytes; other bytes pass through
// (the driver also gets the hex form, since a piece may be an incomplete UTF-8 sequence).
static void put_json_bytes(const char *s, size_t n) {
  putchar('"');
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      printf("\\%c", c);
    } else if (c < 0x20) {
      printf("\\u%04x", c);
    } else {
      putchar(c);
    }
  }
  putchar('"');
}

static void put_hex(const char *s, size_t n) {
  putchar('"');
  for (size_t i = 0; i < n; i++) printf("%02x", (unsigned char)s[i]);
  putchar('"');
}

// Top-k of logits by value, ties by lower id first.
static void topk(const float *logits, int n_vocab, int *ids, float *vals) {
  for (int k = 0; k < TOPK; k++) {
    ids[k] = -1;
    vals[k] = -INFINITY;
  }
  for (int i = 0; i < n_vocab; i++) {
    float v = logits[i];
    if (ids[TOPK - 1] >= 0 && !(v > vals[TOPK - 1])) continue;
    int k = TOPK - 1;
    while (k > 0 && (ids[k - 1] < 0 || v > vals[k - 1])) {
      ids[k] = ids[k - 1];
      vals[k] = vals[k - 1];
      k--;
    }
    ids[k] = i;
    vals[k] = v;
  }
}

static void put_top(const float *logits, int n_vocab) {
  int ids[TOPK];
  float vals[TOPK];
  topk(logits, n_vocab, ids, vals);
  putchar('[');
  for (int k = 0; k < TOPK; k++) printf("%s[%d,%.9g]", k ? "," : "", ids[k], (double)vals[k]);
  putchar(']');
}

typedef struct {
  int *ids;          // chosen (EOG masked)
  int *raw_argmax;   // unmasked argmax
  float *margin;     // chosen logit - best other non-EOG logit
  float *raw_margin; // unmasked top1 - top2
  float *logits;     // n_gen * n_vocab, the logits each choice was made from
  int eos_step;      // first step whose raw argmax is EOG, -1 if none
  float *prompt_logits[3]; // "all" run only: positions first, middle, last
} run_t;

static const char *MODES[3] = {"all", "last", "single"};

static void decode_or_die(struct llama_context *ctx, struct llama_batch batch) {
  int rc = llama_decode(ctx, batch);
  if (rc != 0) {
    fprintf(stderr, "llama_greedy: llama_decode returned %d\n", rc);
    exit(1);
  }
}

static void run_mode(struct llama_context *ctx, const struct llama_vocab *vocab, int mode,
                     const llama_token *prompt, int n_prompt, int n_gen, run_t *r) {
  const int n_vocab = llama_vocab_n_tokens(vocab);
  llama_memory_clear(llama_get_memory(ctx), true);
  int pos_sel[3] = {0, n_prompt / 2, n_prompt - 1};
  struct llama_batch batch = llama_batch_init(n_prompt > 1 ? n_prompt : 1, 0, 1);
  int out_idx = -1; // batch index of the logits to sample from
  if (mode == 2) {
    for (int i = 0; i < n_prompt; i++) {
      batch.n_tokens = 1;
      batch.token[0] = prompt[i];
      batch.pos[0] = i;
      batch.n_seq_id[0] = 1;
      batch.seq_id[0][0] = 0;
      batch.logits[0] = 1;
      decode_or_die(ctx, batch);
    }
    out_idx = 0;
  } else {
    batch.n_tokens = n_prompt;
    for (int i = 0; i < n_prompt; i++) {
      batch.token[i] = prompt[i];
      batch.pos[i] = i;
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = (mode == 0 || i == n_prompt - 1) ? 1 : 0;
    }
    decode_or_die(ctx, batch);
    out_idx = n_prompt - 1;
    if (mode == 0) {
      for (int p = 0; p < 3; p++) {
        r->prompt_logits[p] = malloc(sizeof(float) * (size_t)n_vocab);
        memcpy(r->prompt_logits[p], llama_get_logits_ith(ctx, pos_sel[p]),
               sizeof(float) * (size_t)n_vocab);
      }
    }
  }
  r->eos_step = -1;
  for (int s = 0; s < n_gen; s++) {
    const float *lg = llama_get_logits_ith(ctx, out_idx);
    if (!lg) die("no logits");
    memcpy(r->logits + (size_t)s * n_vocab, lg, sizeof(float) * (size_t)n_vocab);
    int best = -1, raw = -1;
    float best_v = -INFINITY, raw_v = -INFINITY;
    for (int i = 0; i < n_vocab; i++) {
      if (raw < 0 || lg[i] > raw_v) {
        raw = i;
        raw_v = lg[i];
      }
      if (llama_vocab_is_eog(vocab, i)) continue;
      if (best < 0 || lg[i] > best_v) {
        best = i;
        best_v = lg[i];
      }
    }
    float second = -INFINITY, raw_second = -INFINITY;
    for (int i = 0; i < n_vocab; i++) {
      if (i != raw && lg[i] > raw_second) raw_second = lg[i];
      if (i != best && !llama_vocab_is_eog(vocab, i) && lg[i] > second) second = lg[i];
    }
    r->ids[s] = best;
    r->raw_argmax[s] = raw;
    r->margin[s] = best_v - second;
    r->raw_margin[s] = raw_v - raw_second;
    if (r->eos_step < 0 && llama_vocab_is_eog(vocab, raw)) r->eos_step = s;
    if (s + 1 == n_gen) break;
    batch.n_tokens = 1;
    batch.token[0] = best;
    batch.pos[0] = n_prompt + s;
    batch.n_seq_id[0] = 1;
    batch.seq_id[0][0] = 0;
    batch.logits[0] = 1;
    decode_or_die(ctx, batch);
    out_idx = 0;
  }
  llama_batch_free(batch);
}

static void put_ints(const int *v, int n) {
  putchar('[');
  for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", v[i]);
  putchar(']');
}

static void put_floats(const float *v, int n) {
  putchar('[');
  for (int i = 0; i < n; i++) printf("%s%.9g", i ? "," : "", (double)v[i]);
  putchar(']');
}

int main(int argc, char **argv) {
  const char *model_path = NULL, *prompt_file = NULL, *ids_arg = NULL;
  int n_gen = 64, n_ctx = 0, n_batch = 2048, n_ubatch = 512, threads = 2;
  bool extra_bufts = false;
  const char *repack = NULL;
  enum llama_flash_attn_type flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-v")) {
      g_verbose = true;
      continue;
    }
    if (!strcmp(a, "--extra-bufts")) {
      extra_bufts = true;
      continue;
    }
    if (!v) die("missing argument value");
    i++;
    if (!strcmp(a, "-m")) model_path = v;
    else if (!strcmp(a, "-f")) prompt_file = v;
    else if (!strcmp(a, "--ids")) ids_arg = v;
    else if (!strcmp(a, "-n")) n_gen = atoi(v);
    else if (!strcmp(a, "-c")) n_ctx = atoi(v);
    else if (!strcmp(a, "-b")) n_batch = atoi(v);
    else if (!strcmp(a, "-ub")) n_ubatch = atoi(v);
    else if (!strcmp(a, "-t")) threads = atoi(v);
    else if (!strcmp(a, "--repack")) repack = v;
    else if (!strcmp(a, "-fa")) {
      if (!strcmp(v, "on")) flash_attn = LLAMA_FLASH_ATTN_TYPE_ENABLED;
      else if (!strcmp(v, "off")) flash_attn = LLAMA_FLASH_ATTN_TYPE_DISABLED;
      else if (!strcmp(v, "auto")) flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;
      else die("-fa takes on, off or auto");
    }
    else die("unknown argument");
  }
  if (!model_path || (!prompt_file && !ids_arg) || n_gen < 1) die("usage: see the header comment");

  llama_log_set(log_cb, NULL);
  llama_backend_init();

  struct llama_model_params mp = llama_model_default_params();
  mp.use_extra_bufts = extra_bufts;
  struct llama_model_tensor_buft_override overrides[2] = {{NULL, NULL}, {NULL, NULL}};
  if (repack) {
    if (extra_bufts) die("--repack and --extra-bufts exclude each other");
    overrides[0].pattern = repack;
    overrides[0].buft = cpu_repack_buft();
    mp.tensor_buft_overrides = overrides;
  }
  struct llama_model *model = llama_model_load_from_file(model_path, mp);
  if (!model) die("cannot load model");
  const struct llama_vocab *vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);

  // Prompt ids: tokenized like llama-completion (common_tokenize(ctx, prompt, true, true)).
  llama_token *prompt = NULL;
  int n_prompt = 0;
  if (prompt_file) {
    size_t len = 0;
    char *text = read_file(prompt_file, &len);
    int cap = (int)len + 16;
    prompt = malloc(sizeof(llama_token) * (size_t)cap);
    n_prompt = llama_tokenize(vocab, text, (int32_t)len, prompt, cap, true, true);
    if (n_prompt < 0) die("tokenize failed");
    free(text);
  } else {
    int cap = (int)strlen(ids_arg) + 1;
    prompt = malloc(sizeof(llama_token) * (size_t)cap);
    for (const char *p = ids_arg; *p;) {
      prompt[n_prompt++] = (llama_token)strtol(p, (char **)&p, 10);
      if (*p == ',') p++;
    }
  }
  if (n_prompt < 1) die("empty prompt");
  for (int i = 0; i < n_prompt; i++) {
    if (prompt[i] < 0 || prompt[i] >= n_vocab) die("prompt id out of range");
  }

  // common_context_params_to_llama with common_params' defaults and -t THREADS.
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)n_ctx;
  cp.n_batch = (uint32_t)n_batch;
  cp.n_ubatch = (uint32_t)n_ubatch;
  cp.n_seq_max = 1;
  cp.n_outputs_max = 0;
  cp.n_outputs_max_per_seq = 0; // common passes 1; only backend samplers read it, and "all" needs >1
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.flash_attn_type = flash_attn;
  if (flash_attn == LLAMA_FLASH_ATTN_TYPE_DISABLED) g_flash_attn = 0; // llama.cpp logs nothing then
  cp.type_k = GGML_TYPE_F16;
  cp.type_v = GGML_TYPE_F16;
  cp.swa_full = false;
  cp.kv_unified = false;
  cp.offload_kqv = true;
  cp.op_offload = true;
  struct llama_context *ctx = llama_init_from_model(model, cp);
  if (!ctx) die("cannot create context");
  if ((int)llama_n_ctx(ctx) < n_prompt + n_gen) die("context too small");

  run_t runs[3];
  for (int m = 0; m < 3; m++) {
    memset(&runs[m], 0, sizeof(run_t));
    runs[m].ids = malloc(sizeof(int) * (size_t)n_gen);
    runs[m].raw_argmax = malloc(sizeof(int) * (size_t)n_gen);
    runs[m].margin = malloc(sizeof(float) * (size_t)n_gen);
    runs[m].raw_margin = malloc(sizeof(float) * (size_t)n_gen);
    runs[m].logits = malloc(sizeof(float) * (size_t)n_gen * (size_t)n_vocab);
    run_mode(ctx, vocab, m, prompt, n_prompt, n_gen, &runs[m]);
  }

  printf("{\"n_ctx\":%u,\"n_batch\":%u,\"n_ubatch\":%u,\"threads\":%d,", llama_n_ctx(ctx),
         llama_n_batch(ctx), llama_n_ubatch(ctx), threads);
  printf("\"flash_attn\":\"%s\",\"type_k\":\"f16\",\"type_v\":\"f16\",\"use_extra_bufts\":%s,",
         g_flash_attn == 1 ? "enabled" : g_flash_attn == 0 ? "disabled" : "unknown",
         extra_bufts ? "true" : "false");
  printf("\"repack\":");
  if (repack) {
    putchar('"');
    for (const char *c = repack; *c; c++) {
      if (*c == '"' || *c == '\\') putchar('\\');
      putchar(*c);
    }
    printf("\",");
  } else {
    printf("null,");
  }
  printf("\"n_vocab\":%d,\"eog\":[", n_vocab);
  for (int i = 0, first = 1; i < n_vocab; i++) {
    if (llama_vocab_is_eog(vocab, i)) {
      printf("%s%d", first ? "" : ",", i);
      first = 0;
    }
  }
  printf("],\"system_info\":");
  const char *si = llama_print_system_info();
  put_json_bytes(si, strlen(si));
  printf(",\"prompt_ids\":");
  put_ints(prompt, n_prompt);
  printf(",\"runs\":{");
  char piece[512];
  for (int m = 0; m < 3; m++) {
    run_t *r = &runs[m];
    printf("%s\"%s\":{\"ids\":", m ? "," : "", MODES[m]);
    put_ints(r->ids, n_gen);
    printf(",\"raw_argmax\":");
    put_ints(r->raw_argmax, n_gen);
    printf(",\"eos_step\":%d,\"margins\":", r->eos_step);
    put_floats(r->margin, n_gen);
    printf(",\"raw_margins\":");
    put_floats(r->raw_margin, n_gen);
    printf(",\"top\":[");
    for (int s = 0; s < n_gen; s++) {
      if (s) putchar(',');
      put_top(r->logits + (size_t)s * n_vocab, n_vocab);
    }
    putchar(']');
    if (m == 0) {
      int pos_sel[3] = {0, n_prompt / 2, n_prompt - 1};
      printf(",\"prompt_top\":{");
      for (int p = 0; p < 3; p++) {
        if (p > 0 && pos_sel[p] == pos_sel[p - 1]) continue;
        printf("%s\"%d\":", p ? "," : "", pos_sel[p]);
        put_top(r->prompt_logits[p], n_vocab);
      }
      putchar('}');
    }
    // Max |logit difference| from the "last" run (llama-completion's batching) per step, while
    // the ids still agree (after a divergence the contexts differ and the numbers mean nothing).
    printf(",\"max_abs_diff_vs_last\":[");
    for (int s = 0; s < n_gen; s++) {
      if (s > 0 && r->ids[s - 1] != runs[1].ids[s - 1]) break;
      float d = 0;
      const float *a = r->logits + (size_t)s * n_vocab, *b = runs[1].logits + (size_t)s * n_vocab;
      for (int i = 0; i < n_vocab; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
      printf("%s%.9g", s ? "," : "", (double)d);
    }
    putchar(']');
    // Detokenized like llama-completion's echo: per-token pieces, special tokens not rendered.
    char *text = malloc((size_t)n_gen * sizeof(piece));
    size_t tlen = 0;
    for (int s = 0; s < n_gen; s++) {
      int n = llama_token_to_piece(vocab, r->ids[s], piece, sizeof(piece), 0, false);
      if (n < 0) die("piece too long");
      memcpy(text + tlen, piece, (size_t)n);
      tlen += (size_t)n;
    }
    printf(",\"text_hex\":");
    put_hex(text, tlen);
    free(text);
    putchar('}');
  }
  printf("}}\n");

  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
