/* bench_assistant: the cost of one Gemma 4 assistant draft step on an E2B-shaped target, with
 * and without the centroid head (issue 11). No E2B assistant file is at hand, so this writes
 * two random-weight gemma4-assistant GGUFs for the target (its vocabulary, head dims and RoPE
 * table; the layout of ../shared/models/gemma4-micro-assistant.gguf: a sliding and a full layer,
 * queries only): width W and FFN F as given (the published E2B assistant's are not known here),
 * every matrix Q8_0, one of them with 2048 centroids (top 32 kept: 4096 of the 262144 head rows),
 * then times draft steps over the target's caches filled to a depth.
 *
 * Build by hand, after `make`:
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc -pthread bench/bench_assistant.c \
 *       build/libhachi.a -o /tmp/bench_assistant -lm
 * Run: /tmp/bench_assistant TARGET.gguf [W=256] [F=2048] [depth=8192] [threads=2]
 * (TARGET: e.g. bench/cache/gemma4-e2b-q4_0-s1.gguf from `hachi bench --synth e2b`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gguf.h"
#include "mtp.h"
#include "util.h"

#define N_CENTROIDS 2048
#define TOP_K 32
#define STEPS 3    /* draft steps per draft, as llama.cpp's default */
#define DRAFTS 12

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Q8_0 rows of random int8 with a scale of ~0.02 (fp16 0x251F) */
static void *q8_0(int64_t cols, int64_t rows) {
    const size_t n = (size_t)(cols / 32) * (size_t)rows * 34;
    uint8_t *p = malloc(n);
    for (size_t i = 0; p && i < n; i += 34) {
        p[i] = 0x1F;
        p[i + 1] = 0x25;
        for (int j = 0; j < 32; j += 8) {
            const uint64_t x = next();
            memcpy(p + i + 2 + j, &x, 8);
        }
    }
    return p;
}

static float *ones(int64_t n) {
    float *p = malloc(sizeof *p * (size_t)n);
    for (int64_t i = 0; p && i < n; i++) p[i] = 1.0f;
    return p;
}

static void *keep[64];
static int n_keep;
static const void *hold(void *p) { return n_keep < 64 ? (keep[n_keep++] = p) : p; }

static hachi_status mat(hachi_gguf_writer *w, const char *name, int64_t cols, int64_t rows) {
    const int64_t ne[2] = {cols, rows};
    return hachi_gguf_add_tensor(w, name, 8 /* Q8_0 */, 2, ne, hold(q8_0(cols, rows)));
}
static hachi_status vec(hachi_gguf_writer *w, const char *name, int64_t n) {
    const int64_t ne[1] = {n};
    return hachi_gguf_add_tensor(w, name, 0, 1, ne, hold(ones(n)));
}

/* Copy the target's tokenizer keys (so that every token's text matches) */
static hachi_status copy_tokenizer(const hachi_gguf *g, hachi_gguf_writer *w) {
    hachi_status st = HACHI_OK;
    for (int64_t k = 0; !st && k < hachi_gguf_n_kv(g); k++)
        if (!strncmp(hachi_gguf_key_at(g, k), "tokenizer.", 10)) st = hachi_gguf_copy_kv(w, g, k);
    return st;
}

static hachi_status write_assistant(const hachi_gguf *g, const char *path, int64_t W, int64_t F, bool centroids) {
    const hachi_gguf_tensor *rope = hachi_gguf_find_tensor(g, "rope_freqs.weight"),
                            *emb = hachi_gguf_find_tensor(g, "token_embd.weight");
    if (!rope || !emb) return hachi_fail(HACHI_ERR_FORMAT, "the target has no rope_freqs / token_embd");
    const int64_t E = emb->ne[0], V = emb->ne[1], H = 8, hd[2] = {256, 512};
    hachi_gguf_writer *w = hachi_gguf_writer_new();
    if (!w) return HACHI_ERR_NOMEM;
    hachi_status st = copy_tokenizer(g, w);
#define A "gemma4-assistant."
    const bool swa[2] = {true, false};
    if (!st) st = hachi_gguf_set_str(w, "general.architecture", "gemma4-assistant");
    if (!st) st = hachi_gguf_set_u32(w, A "block_count", 2);
    if (!st) st = hachi_gguf_set_u32(w, A "nextn_predict_layers", 2);
    if (!st) st = hachi_gguf_set_u32(w, A "context_length", 32768);
    if (!st) st = hachi_gguf_set_u32(w, A "embedding_length", (uint32_t)W);
    if (!st) st = hachi_gguf_set_u32(w, A "embedding_length_out", (uint32_t)E);
    if (!st) st = hachi_gguf_set_u32(w, A "feed_forward_length", (uint32_t)F);
    if (!st) st = hachi_gguf_set_u32(w, A "attention.head_count", (uint32_t)H);
    if (!st) st = hachi_gguf_set_u32(w, A "attention.head_count_kv", 1);
    if (!st) st = hachi_gguf_set_u32(w, A "attention.key_length", (uint32_t)hd[1]);
    if (!st) st = hachi_gguf_set_u32(w, A "attention.value_length", (uint32_t)hd[1]);
    if (!st) st = hachi_gguf_set_u32(w, A "attention.key_length_swa", (uint32_t)hd[0]);
    if (!st) st = hachi_gguf_set_u32(w, A "attention.value_length_swa", (uint32_t)hd[0]);
    if (!st) st = hachi_gguf_set_u32(w, A "rope.dimension_count", (uint32_t)hd[1]);
    if (!st) st = hachi_gguf_set_u32(w, A "rope.dimension_count_swa", (uint32_t)hd[0]);
    if (!st) st = hachi_gguf_set_u32(w, A "attention.sliding_window", 512);
    if (!st) st = hachi_gguf_set_u32(w, A "attention.shared_kv_layers", 2);
    if (!st) st = hachi_gguf_set_u32(w, A "embedding_length_per_layer_input", 0);
    if (!st) st = hachi_gguf_set_f32(w, A "rope.freq_base", 1e6f);
    if (!st) st = hachi_gguf_set_f32(w, A "rope.freq_base_swa", 1e4f);
    if (!st) st = hachi_gguf_set_f32(w, A "attention.layer_norm_rms_epsilon", 1e-6f);
    if (!st) st = hachi_gguf_set_arr(w, A "attention.sliding_window_pattern", HACHI_GGUF_BOOL, swa, 2);
    if (!st && centroids) st = hachi_gguf_set_u32(w, A "centroid_top_k", TOP_K);
#undef A
    if (!st) st = hachi_gguf_add_tensor(w, "rope_freqs.weight", 0, 1, rope->ne, rope->data);
    if (!st) st = mat(w, "token_embd.weight", W, V);
    if (!st) st = vec(w, "output_norm.weight", W);
    if (!st) st = mat(w, "nextn.pre_projection.weight", 2 * E, W);
    if (!st) st = mat(w, "nextn.post_projection.weight", W, E);
    char name[96];
    for (int l = 0; l < 2 && !st; l++) {
#define N(s) (snprintf(name, sizeof name, "blk.%d." s, l), name)
        st = vec(w, N("attn_norm.weight"), W);
        if (!st) st = mat(w, N("attn_q.weight"), W, H * hd[l]);
        if (!st) st = vec(w, N("attn_q_norm.weight"), hd[l]);
        if (!st) st = mat(w, N("attn_output.weight"), H * hd[l], W);
        if (!st) st = vec(w, N("post_attention_norm.weight"), W);
        if (!st) st = vec(w, N("ffn_norm.weight"), W);
        if (!st) st = mat(w, N("ffn_gate.weight"), W, F);
        if (!st) st = mat(w, N("ffn_up.weight"), W, F);
        if (!st) st = mat(w, N("ffn_down.weight"), F, W);
        if (!st) st = vec(w, N("post_ffw_norm.weight"), W);
        if (!st) st = vec(w, N("layer_output_scale.weight"), 1);
#undef N
    }
    if (!st && centroids) {
        int32_t *order = malloc(sizeof *order * (size_t)V);
        if (!order) st = HACHI_ERR_NOMEM;
        for (int64_t i = 0; order && i < V; i++) order[i] = (int32_t)i;
        for (int64_t i = V - 1; order && i > 0; i--) {
            const int64_t j = (int64_t)(next() % (uint64_t)(i + 1));
            const int32_t t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        const int64_t ne_o[1] = {V};
        if (!st) st = mat(w, "masked_embd_centroids.weight", W, N_CENTROIDS);
        if (!st) st = hachi_gguf_add_tensor(w, "masked_embd_ordering", 26 /* I32 */, 1, ne_o, hold(order));
    }
    if (!st) st = hachi_gguf_writer_write(w, path);
    hachi_gguf_writer_free(w);
    for (int i = 0; i < n_keep; i++) free(keep[i]);
    n_keep = 0;
    return st;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s TARGET.gguf [W=256] [F=2048] [depth=8192] [threads=2]\n", argv[0]); return 1; }
    const int64_t W = argc > 2 ? atol(argv[2]) : 256, F = argc > 3 ? atol(argv[3]) : 2048;
    const int depth = argc > 4 ? atoi(argv[4]) : 8192, threads = argc > 5 ? atoi(argv[5]) : 2;
    hachi_gguf *g = NULL;
    hachi_model *m = NULL, *a[2] = {NULL, NULL};
    hachi_session *s = NULL;
    hachi_mtp *d[2] = {NULL, NULL};
    const char *paths[2] = {"/tmp/bench-assistant-dense.gguf", "/tmp/bench-assistant-centroids.gguf"};
    hachi_status st = hachi_gguf_open(argv[1], &g);
    for (int c = 0; c < 2 && !st; c++) st = write_assistant(g, paths[c], W, F, c == 1);
    if (!st) st = hachi_model_load(argv[1], NULL, &m);
    for (int c = 0; c < 2 && !st; c++) st = hachi_model_load(paths[c], NULL, &a[c]);
    hachi_session_params sp = hachi_session_default_params();
    sp.n_ctx = 32768;
    sp.n_threads = threads;
    if (!st) st = hachi_session_create(m, &sp, &s);
    int32_t tok = 1000;
    if (!st) st = hachi_session_fill_synthetic(s, depth - 1, 1);
    if (!st) st = hachi_session_eval(s, &tok, 1, NULL);   /* a hidden row to start from */
    for (int c = 0; c < 2 && !st; c++) st = hachi_mtp_create(a[c], s, &d[c]);
    if (st) { fprintf(stderr, "bench_assistant: %s\n", hachi_last_error()); return 1; }
    printf("target %s, assistant W %lld, FFN %lld, 2 layers, Q8_0; draft steps at depth %d, %d threads\n", argv[1],
           (long long)W, (long long)F, depth, threads);
    for (int c = 0; c < 2; c++) {
        double t[DRAFTS];
        for (int r = -2; r < DRAFTS; r++) {   /* two warm-up drafts */
            if (!hachi_mtp_begin(d[c])) { fprintf(stderr, "no hidden row\n"); return 1; }
            const double t0 = hachi_time_ms();
            int32_t x = tok;
            for (int k = 0; k < STEPS; k++) {
                const float *lg = hachi_mtp_step(d[c], x);
                x = (int32_t)(lg[0] > lg[1]);   /* any token; the cost does not depend on it */
            }
            if (r >= 0) t[r] = (hachi_time_ms() - t0) / STEPS;
        }
        qsort(t, DRAFTS, sizeof *t, cmp_double);
        printf("%-14s %8.1f MB of weights per draft step, %7.3f ms per step (median of %d drafts of %d steps; "
               "min %.3f, max %.3f)\n", c ? "centroid head" : "full head", hachi_mtp_step_bytes(d[c]) / 1e6,
               0.5 * (t[DRAFTS / 2 - 1] + t[DRAFTS / 2]), DRAFTS, STEPS, t[0], t[DRAFTS - 1]);
    }
    for (int c = 0; c < 2; c++) { hachi_mtp_free(d[c]); hachi_model_free(a[c]); remove(paths[c]); }
    hachi_session_free(s);
    hachi_model_free(m);
    hachi_gguf_free(g);
    return 0;
}
