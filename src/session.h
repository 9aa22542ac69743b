/* session: one static plan for one context mode. The plan decides per layer
 * its attention kind, window, head dim, KV source and profile chunk, and sizes
 * every buffer once; forward() allocates nothing. */
#ifndef HACHI_SESSION_H
#define HACHI_SESSION_H
#include "hachi.h"
#include "model.h"
#include "threads.h"

#define HACHI_SPEC_SLOTS 16         /* spare ring slots: a rewind of up to 16 tokens stays exact */
#define HACHI_MAX_CHUNKS 8
#define HACHI_ATTN_GROUP 16         /* tokens per attention dispatch (their split partials kept at once) */

typedef struct hachi_layer_plan {
    bool sliding;
    int window;                     /* keys seen: positions q-window < p <= q; 0 = all */
    int head_dim;
    int kv_owner;                   /* layer whose cache is read */
    int kv_index;                   /* index into session->kv of the owner's cache */
    int chunk;                      /* profile chunk */
} hachi_layer_plan;

typedef struct hachi_kv {
    int owner;                      /* layer that writes it */
    int dim;                        /* n_head_kv * head_dim */
    int n_slots;                    /* ring: window + 16; linear: n_ctx */
    bool ring;
    int valid_from;                 /* rows of positions below it are not there (a restored prompt cache) */
    size_t row_bytes;               /* dim * (2 for fp16, 4 for f32) */
    char *k, *v;                    /* [n_slots][dim] fp16 (or f32 with kv_f32) */
    char *kb, *vb;                  /* [n_batch][dim]: this forward's new rows, committed at its end */
} hachi_kv;

typedef struct hachi_profile {
    int n_chunks;
    int bounds[HACHI_MAX_CHUNKS + 1];   /* chunk c covers layers [bounds[c], bounds[c+1]) */
    double emb_ms, ple_ms, head_ms;
    double chunk_ms[HACHI_MAX_CHUNKS], attn_ms[HACHI_MAX_CHUNKS];
    int steps;
} hachi_profile;

struct hachi_session {
    const hachi_model *m;
    const hachi_kernels *kern;
    hachi_pool *pool;
    int n_ctx, n_batch, pos;
    bool profiling;
    bool kv_f32;                    /* KV rows in f32 (exactness checks) instead of fp16 */
    hachi_profile prof;

    hachi_layer_plan *lp;           /* [n_layer] */
    hachi_kv *kv;                   /* [n_kv] one per owning layer */
    int n_kv;

    /* activations for up to n_batch tokens (row-major [n][...]) */
    float *x;                       /* [nb][n_embd] residual stream */
    float *xb, *xb2;                /* [nb][n_embd] */
    float *q;                       /* [nb][n_head*hd_max] */
    float *k, *v;                   /* [nb][n_head_kv*hd_max] */
    float *att;                     /* [nb][n_head*hd_max] */
    float *hb, *hb2;                /* [nb][ff_max] */
    float *ple;                     /* [nb][n_layer*n_embd_pl] per-layer inputs */
    float *plg;                     /* [nb][n_embd_pl] */
    float *rope_cs[2];              /* [nb][hd/2][2] cos,sin for sliding (0) and full (1) */
    double *inv_freq[2];            /* [hd/2] */
    float *logits;                  /* [n_vocab] of the last evaluated token */
    int logits_pos;                 /* its position; -1: none */
    float *scores;                  /* [n_threads][scores_stride] attention scratch */
    size_t scores_stride;           /* n_head * (n_ctx + hd_max): scores of every key, then one [G][hd] sum */
    float *partial;                 /* [HACHI_ATTN_GROUP][n_threads][n_head][hd_max + 2] split-K partials */
    void *mm_scratch;
    size_t mm_scratch_bytes;
    size_t plan_bytes;
};

/* Forward n tokens (n <= n_batch) at s->pos; logits rows into out ([n][n_vocab], ld n_vocab)
 * when out != NULL, else (when head) the last row into s->logits; head = false skips the
 * output head (an intermediate prefill chunk). Advances s->pos. */

void hachi_forward(hachi_session *s, const int32_t *tokens, int n, float *out, bool head);
/* Attention of layer l for n new tokens at p0 (KV rows already in the owner's kb/vb). */
void hachi_attention(hachi_session *s, int l, int n, int p0);
/* Write K/V rows that look like real ones for positions [pos, pos+n) without computing
 * them (bench --fill fast), advancing pos. */
void hachi_session_fill_fast(hachi_session *s, int n, uint64_t seed);
const hachi_profile *hachi_session_profile(const hachi_session *s);
void hachi_session_profile_reset(hachi_session *s);

#endif
