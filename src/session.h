/* session: one static plan for one context mode. The plan decides per layer its
 * attention kind, window, head dims, scale, RoPE table, KV cache and profile chunk,
 * chooses the layer function of the architecture, and sizes every buffer once;
 * forward() allocates nothing. Attention reads the plan through hachi_attn_args
 * (attn.h); the KV caches are kv.h's. */
#ifndef HACHI_SESSION_H
#define HACHI_SESSION_H
#include "hachi.h"
#include "attn.h"
#include "kv.h"
#include "model.h"
#include "threads.h"

typedef struct hachi_layer_plan {
    bool sliding;
    int window;                     /* keys seen: positions q-window < p <= q; 0 = all */
    int head_dim;
    int n_head, n_head_kv;          /* query heads, KV heads (n_head / n_head_kv share one) */
    float attn_scale;               /* on q.k */
    int n_rot;                      /* rotated dims per head */
    const float *rope_cs;           /* [n_batch][cos n_rot/2, sin n_rot/2] of this forward's positions */
    bool owns_kv;                   /* computes K/V (else reads kv_owner's) */
    int sparse_pages;               /* page-sparse: pages a query attends (attn.h); 0 = dense */
    int draft_pages;                /* the same in draft steps (hachi_session_eval_draft) */
    uint64_t stream;                /* streaming query heads (bit h), full-attention layers; 0 = none */
    int kv_owner;                   /* layer whose cache is read */
    hachi_kv *kv;                   /* that cache */
    int chunk;                      /* profile chunk */
} hachi_layer_plan;

/* One layer for the n tokens of a forward at positions p0..: the architecture's equations. */
typedef void (*hachi_layer_fn)(hachi_session *s, int l, int n, int p0);
hachi_layer_fn hachi_forward_layer_fn(const hachi_model *m);

struct hachi_session {
    const hachi_model *m;
    const hachi_kernels *kern;
    hachi_pool *pool;
    int n_ctx, n_batch, pos;
    bool profiling;
    int prof_chunk;                 /* profiling: the chunk whose layer runs, -1 outside the layers */
    hachi_progress_fn progress;     /* of evals longer than one chunk; NULL = none */
    void *progress_ctx;
    hachi_kv_type kv_type;
    int sparse_pages;               /* page-sparse budget in pages on full-attention layers; 0 = dense */
    int draft_pages;                /* the same in draft steps; 0 = none */
    bool drafting;                  /* the forward is a draft step (attention at draft_pages) */
    int stream_sink, stream_window; /* the keys of a streaming head (hachi_heads) */
    int n_stream;                   /* streaming heads in the plan */
    hachi_profile prof;

    hachi_layer_fn layer;           /* the architecture's layer, chosen once */
    float emb_scale;                /* token embedding multiplier (gemma4: sqrt(n_embd)) */
    hachi_layer_plan *lp;           /* [n_layer] */
    hachi_kv *kv;                   /* [n_kv] one per owning layer */
    int n_kv;

    /* activations for up to n_batch tokens, row-major [nb][...] */
    float *x;                       /* [nb][n_embd] residual stream */
    float *xn;                      /* [nb][n_embd] normed input of the current block */
    float *q;                       /* [nb][n_head*hd_max] */
    float *k, *v;                   /* [nb][n_head_kv*hd_max] this forward's K/V (f32, before staging) */
    float *attn;                    /* [nb][n_head*hd_max] attention output */
    float *proj;                    /* [nb][n_embd] a block's output projection, before its post-norm */
    float *ffn_gate, *ffn_up;       /* [nb][ff_max] */
    float *ple;                     /* [nb][n_layer*n_embd_pl] per-layer inputs */
    float *ple_gate;                /* [nb][n_embd_pl] per-layer input branch */
    float *ple_tok;                 /* [threads][n_layer*n_embd_pl] a token's per_layer_token_embd row per thread */
    float *rope_cs[2];              /* [nb][cos d/2, sin d/2] sliding (0) and full (1) */
    double *inv_freq[2];            /* [d/2] */
    int rope_dim[2];                /* d: rotated dims of each kind */
    float *logits;                  /* [n_vocab] of the last evaluated token */
    int logits_pos;                 /* its position; -1: none */
    int hidden_p0, hidden_lo, hidden_hi;   /* xn rows [lo - p0, hi - p0) hold the final-normed hidden rows (the
                                              head's input) of positions [lo, hi): the last forward's head rows */
    float *scores;                  /* [n_threads][scores_stride] attention scratch */
    size_t scores_stride;
    float *partial;                 /* attention split partials (attn.h) */
    float *page_scores;             /* page-sparse scratch (attn.h); NULL when dense */
    int *ranges, *n_ranges;
    char *mm_scratch;               /* [mm_scratch_bytes] matmul activation conversions */
    size_t mm_scratch_bytes;
    size_t plan_bytes;
};

/* Forward n tokens (n <= n_batch) at s->pos; logits rows into out ([n][n_vocab], ld n_vocab)
 * when out != NULL, else (when head) the last row into s->logits; head = false skips the
 * output head (an intermediate prefill chunk). Advances s->pos. */
void hachi_forward(hachi_session *s, const int32_t *tokens, int n, float *out, bool head);
/* Start reading the input rows of these tokens (embeddings, per-layer embeddings) that are still
 * in the model file, so that an eval's forwards do not wait on the disk token by token. */
void hachi_forward_prefetch(const hachi_session *s, const int32_t *tokens, int n);

/* The final-normed hidden row [n_embd] of position pos (< hachi_session_pos) when the last forward
 * computed it (the last token of an eval; every row of an eval with logits_out), else NULL. Valid
 * until the next eval, load or synthetic fill. What a gemma4-assistant drafter starts from. */
const float *hachi_session_hidden(const hachi_session *s, int pos);

#endif
