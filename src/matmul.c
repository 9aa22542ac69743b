/* matmul: y = W x over the pool, for every runnable weight type. The hot
 * path of decode (n_tok = 1), verify (n_tok <= 16) and prefill (n_tok > 16).
 *
 *   step 1  the n_tok activation rows are converted to W's vec_dot_type
 *           (Q8_0 / Q8_K) into scratch, split over threads (by token when
 *           there are enough tokens, else by blocks within each row); F32
 *           activations are used in place. Then a pool barrier.
 *   step 2  W's rows are split into contiguous ranges, one per thread.
 *           n_tok == 1: vec_dot per row. n_tok <= 16: vec_dot_multi per row,
 *           so each weight block is loaded once for all tokens (a verify of 8
 *           drafted tokens reads the weights once, like one decode step).
 *           n_tok > 16: a tile of rows that fits in L2 is swept by token
 *           tiles of 16, so weights come from DRAM once per row tile.
 * Nothing is allocated here. */
#include "matmul.h"
#include "util.h"

#define MATMUL_MULTI_MAX 16              /* vec_dot_multi takes at most 16 rows */
#define MATMUL_ROW_ALIGN 4               /* rows per thread come in multiples of 4 */
#define MATMUL_L2_TILE_BYTES (256 * 1024)

typedef struct matmul_ctx {
    hachi_pool *pool;
    const hachi_type_kernels *kt;        /* W's kernels */
    const hachi_type_kernels *kv;        /* the activation type's kernels (from_float) */
    const hachi_mat *W;
    const float *x;                      /* [n_tok][ldx] */
    int64_t ldx;
    int n_tok;
    float *y;                            /* [n_tok][ldy] */
    int64_t ldy;
    uint32_t vdt;                        /* vec_dot_type */
    void *scratch;                       /* [n_tok][act_stride] bytes, vdt != F32 */
    const char *act;                     /* activations in vdt: scratch or x */
    size_t act_stride;                   /* bytes between activation rows */
} matmul_ctx;

size_t hachi_matmul_scratch_bytes(const hachi_kernels *k, uint32_t type, int64_t cols, int n_tok) {
    if (type >= HACHI_TYPE_COUNT || n_tok < 1) return 0;
    uint32_t vdt = k->t[type].vec_dot_type;
    if (vdt == HACHI_TYPE_F32) return 0;
    return (size_t)hachi_row_size(vdt, cols) * (size_t)n_tok;
}

/* Step 1: quantize the activations into scratch. */
static void matmul_convert(matmul_ctx *c, int ith, int nth) {
    const int64_t cols = c->W->cols;
    if (c->n_tok >= nth) {
        int64_t lo, hi;
        hachi_split(c->n_tok, 1, ith, nth, &lo, &hi);
        for (int64_t t = lo; t < hi; t++)
            c->kv->from_float(c->x + t * c->ldx, (char *)c->scratch + t * c->act_stride, cols);
        return;
    }
    /* few tokens: split each row by whole blocks */
    const hachi_type_traits *tr = hachi_type_info(c->vdt);
    const int64_t bs = tr->blck_size, nb = cols / bs;
    int64_t lo, hi;
    hachi_split(nb, 1, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    for (int t = 0; t < c->n_tok; t++)
        c->kv->from_float(c->x + t * c->ldx + lo * bs,
                          (char *)c->scratch + t * c->act_stride + lo * tr->type_size, (hi - lo) * bs);
}

/* Outputs of rows [r0, r1) for tokens [t0, t0 + nt). */
static void matmul_rows(const matmul_ctx *c, int64_t r0, int64_t r1, int t0, int nt) {
    const hachi_mat *W = c->W;
    const int64_t cols = W->cols;
    const char *w = (const char *)W->data + r0 * W->row_bytes;
    const char *a = c->act + (size_t)t0 * c->act_stride;
    float *y = c->y + t0 * c->ldy;
    if (nt == 1) {
        for (int64_t r = r0; r < r1; r++, w += W->row_bytes) c->kt->vec_dot(cols, y + r, w, a);
        return;
    }
    float s[MATMUL_MULTI_MAX];
    for (int64_t r = r0; r < r1; r++, w += W->row_bytes) {
        if (c->kt->vec_dot_multi) c->kt->vec_dot_multi(cols, s, w, a, c->act_stride, nt);
        else for (int t = 0; t < nt; t++) c->kt->vec_dot(cols, &s[t], w, a + (size_t)t * c->act_stride);
        for (int t = 0; t < nt; t++) y[t * c->ldy + r] = s[t];
    }
}

static void matmul_task(void *arg, int ith, int nth) {
    matmul_ctx *c = arg;
    if (c->vdt != HACHI_TYPE_F32) {
        matmul_convert(c, ith, nth);
        hachi_pool_barrier(c->pool);
    }
    int64_t lo, hi;
    hachi_split(c->W->rows, MATMUL_ROW_ALIGN, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    if (c->n_tok <= MATMUL_MULTI_MAX) {
        matmul_rows(c, lo, hi, 0, c->n_tok);
        return;
    }
    /* prefill: row tiles that fit in L2, swept by token tiles of 16 */
    int64_t tile = (int64_t)(MATMUL_L2_TILE_BYTES / (c->W->row_bytes ? c->W->row_bytes : 1));
    if (tile < MATMUL_ROW_ALIGN) tile = MATMUL_ROW_ALIGN;
    for (int64_t r0 = lo; r0 < hi; r0 += tile) {
        int64_t r1 = HACHI_MIN(r0 + tile, hi);
        for (int t0 = 0; t0 < c->n_tok; t0 += MATMUL_MULTI_MAX)
            matmul_rows(c, r0, r1, t0, HACHI_MIN(MATMUL_MULTI_MAX, c->n_tok - t0));
    }
}

void hachi_matmul(hachi_pool *pool, const hachi_kernels *k, const hachi_mat *W,
                  const float *x, int64_t ldx, int n_tok, float *y, int64_t ldy, void *scratch) {
    if (n_tok < 1 || W->rows < 1) return;
    const hachi_type_kernels *kt = &k->t[W->type];
    matmul_ctx c = {
        .pool = pool, .kt = kt, .kv = &k->t[kt->vec_dot_type], .W = W, .x = x, .ldx = ldx,
        .n_tok = n_tok, .y = y, .ldy = ldy, .vdt = kt->vec_dot_type, .scratch = scratch,
    };
    if (c.vdt == HACHI_TYPE_F32) {
        c.act = (const char *)x;
        c.act_stride = (size_t)ldx * sizeof(float);
    } else {
        c.act = scratch;
        c.act_stride = (size_t)hachi_row_size(c.vdt, W->cols);
    }
    hachi_pool_run(pool, matmul_task, &c);
}

void hachi_mat_row(const hachi_kernels *k, const hachi_mat *W, int64_t r, float *out) {
    k->t[W->type].to_float((const char *)W->data + r * W->row_bytes, out, W->cols);
}
