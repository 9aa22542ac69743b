/* attn: attention of one layer for the n tokens of a forward, over one KV cache.
 * Takes everything from a narrow argument struct that the plan fills: queries,
 * output, the cache, positions, window, dims, scratch. Knows no model and no
 * session. Hot path. */
#ifndef HACHI_ATTN_H
#define HACHI_ATTN_H
#include "kv.h"
#include "threads.h"

#define HACHI_ATTN_GROUP 16         /* tokens per dispatch (their split partials kept at once) */

typedef struct hachi_attn_args {
    const float *q;                 /* [n][n_head * head_dim], normed and rotated */
    float *out;                     /* [n][n_head * head_dim] */
    const hachi_kv *kv;             /* keys before p0 held, this forward's staged as pending rows */
    int p0, n;                      /* position of token 0 of the forward; tokens */
    int window;                     /* a query at q sees keys q-window < p <= q; 0 = all before it */
    int n_head, n_head_kv, head_dim;
    float scale;                    /* on q.k before the softmax */
    float *scores;                  /* [n_threads][scores_stride] per-thread scratch */
    size_t scores_stride;
    float *partial;                 /* [HACHI_ATTN_GROUP][n_threads][n_head][head_dim + 2] split partials */
} hachi_attn_args;

/* Floats of scores_stride and of partial for contexts up to n_ctx and head dims up to hd_max. */
size_t hachi_attn_scores_stride(int n_head, int n_ctx, int hd_max);
size_t hachi_attn_partial_floats(int n_threads, int n_head, int hd_max);

void hachi_attention(hachi_pool *pool, const hachi_kernels *kern, const hachi_attn_args *a);

#endif
