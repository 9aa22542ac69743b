/* attn: attention of one layer for the n tokens of a forward, over one KV cache.
 * Takes everything from a narrow argument struct that the plan fills: queries,
 * output, the cache, positions, window, dims, scratch. Knows no model and no
 * session. Hot path. */
#ifndef HACHI_ATTN_H
#define HACHI_ATTN_H
#include "kv.h"
#include "threads.h"

#define HACHI_ATTN_GROUP 16         /* tokens per dispatch (their split partials kept at once) */
#define HACHI_ATTN_PARTS 16         /* the most parts a token's keys are cut into (threads that share them) */
#define HACHI_ATTN_MAX_PAGES 1024   /* page-sparse: at most this many pages (16 positions) attended */

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
    float *partial;                 /* [HACHI_ATTN_GROUP][HACHI_ATTN_PARTS][n_head][head_dim + 2] the parts' partials */
    /* page-sparse attention (full-attention layers, a cache with page metadata): a query whose
     * pages exceed sparse_pages attends to page 0, the sparse_pages - 3 best pages by their
     * metadata's score, and its last two pages; 0 = dense */
    int sparse_pages;
    float *page_scores;             /* [HACHI_ATTN_GROUP][2 * kv->n_pages] */
    int *ranges;                    /* [HACHI_ATTN_GROUP][2 * (sparse_pages + 2)] each token's key runs */
    int *n_ranges;                  /* [HACHI_ATTN_GROUP] */
    /* streaming heads: query head h with bit h set attends only to keys < stream_sink and the
     * last stream_window keys up to its own (needs n_head <= 64); 0 = none */
    uint64_t stream;
    int stream_sink, stream_window;
} hachi_attn_args;

/* Floats of scores_stride and of partial for contexts up to n_ctx and head dims up to hd_max,
 * over caches of type kv_type (int8 ones need room for their tiles' matrix products). */
size_t hachi_attn_scores_stride(int n_head, int n_ctx, int hd_max, hachi_kv_type kv_type);
size_t hachi_attn_partial_floats(int n_head, int hd_max);
/* Floats of page_scores and ints of ranges for page-sparse attention. */
size_t hachi_attn_page_floats(int n_ctx);
size_t hachi_attn_range_ints(int sparse_pages);

void hachi_attention(hachi_pool *pool, const hachi_kernels *kern, const hachi_attn_args *a);

#endif
