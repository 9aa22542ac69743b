/* matmul: y = W x over the pool, for every runnable weight type. The hot
 * path of decode (n_tok = 1), verify (n_tok <= 16) and prefill (n_tok > 16).
 *
 *   step 1  the n_tok activation rows are converted to W's vec_dot_type
 *           (Q8_0 / Q8_K) into scratch, 8 whole rows a claim, followed by the
 *           kernel's activation extras (act_prep, e.g. block sums) and, where
 *           the ISA's GEMM reads them packed, the packing (act_pack); F32
 *           activations are used in place. A thread goes on to step 2 when
 *           every claim is done (a counter, not a barrier on all threads).
 *   step 2  W's rows, in chunks of ~32 KB of weights (prefill: ~one L2 tile).
 *           n_tok == 1: vec_dot per row. n_tok <= 16: vec_dot_multi per row,
 *           so each weight block is loaded once for all tokens (a verify of 8
 *           drafted tokens reads the weights once, like one decode step).
 *           n_tok > 16: a chunk of rows that fits in L2 is swept by token
 *           tiles of 16, so weights come from DRAM once per chunk.
 *           Where the ISA has a GEMM for W's interleaved type (AVX-512 VNNI's
 *           16 rows per zmm, AMX's tiles) or for its float rows (AVX2's and
 *           AVX-512's register-blocked F32 / F16 / BF16), forwards of the table's
 *           gemm_min tokens or more send each chunk's rows through it
 *           instead, token tile by token tile (bitwise the same sums), or
 *           with all the forward's tokens in one call where the GEMM takes
 *           them (gemm_x8_all: AMX's, which unpacks each weight block once
 *           for all its token tiles; with the rows, and packed too where
 *           the table packs them).
 * Chunks are claimed from atomic counters rather than split statically: on
 * a loaded machine a descheduled thread then delays a call by at most the
 * chunks it holds (a quarter of its share, fewer near the end), not by its
 * whole share (measured: statically split, two threads were slower than one
 * under load). Each thread claims from its own contiguous range of chunks
 * first, a quarter of what is left there at a time, and then one at a time
 * from the others' (from their fronts): its reads stay one sequential stream
 * that the hardware prefetcher follows across chunks (decode of E2B Q4_0:
 * 16.9 -> 20.3 tok/s against chunks dealt out alternately from one counter).
 * Nothing is allocated here. */
#include "matmul.h"
#include "util.h"
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdatomic.h>
#include <string.h>

#define MATMUL_MULTI_MAX 16              /* vec_dot_multi takes at most 16 rows */
#define MATMUL_ROW_ALIGN 4               /* row chunks come in multiples of 4 */
#ifndef MATMUL_CHUNK_BYTES
#define MATMUL_CHUNK_BYTES (32 * 1024)   /* weights per row chunk, n_tok <= 16 */
#endif
#ifndef MATMUL_L2_TILE_BYTES
#define MATMUL_L2_TILE_BYTES (256 * 1024)
#endif
#define MATMUL_CONV_ROWS 8               /* activation rows per conversion claim (half a token tile) */
#define MATMUL_RANGES_MAX 16             /* threads past this share ranges */

typedef struct matmul_ctx {
    const hachi_type_kernels *kt;        /* W's kernels */
    const hachi_type_kernels *kv;        /* the activation type's kernels (from_float) */
    const hachi_mat *W;                  /* out[0]'s matrix: the type and cols all share */
    const float *x;                      /* [n_tok][ldx] */
    int64_t ldx;
    int n_tok;
    hachi_matmul_out out[HACHI_MATMUL_OUT_MAX];
    int64_t out_chunk[HACHI_MATMUL_OUT_MAX];       /* rows per chunk of out[m]'s matrix */
    int64_t out_first[HACHI_MATMUL_OUT_MAX + 1];   /* out[m]'s chunks are [out_first[m], out_first[m + 1]) */
    uint32_t vdt;                        /* vec_dot_type */
    void *scratch;                       /* [n_tok][act_stride] bytes, vdt != F32 */
    const char *act;                     /* activations in vdt: scratch or x */
    size_t act_stride;                   /* bytes between activation rows */
    int64_t row_chunks;                  /* over all outputs */
    bool gemm;                           /* prefill through the ISA's GEMM (kt->gemm_x8 or gemm_x8_all, or
                                          * kt->gemm for rows in the file's layout) */
    char *pack;                          /* the packed tiles of 16 tokens (kt->act_pack), NULL: none */
    size_t pack_bytes;                   /* bytes per tile */
    _Alignas(64) atomic_int_fast64_t conv_next;          /* chunk counters, off the read-mostly line */
    atomic_int_fast64_t conv_done;
    int n_ranges;                        /* row chunks: range r is [range[r].next, range[r].end) */
    struct { _Alignas(64) atomic_int_fast64_t next; int64_t end; } range[MATMUL_RANGES_MAX];
} matmul_ctx;

/* bytes between activation rows in scratch: the quantized row, then the ISA's extras */
static size_t hachi_matmul_act_stride(const hachi_kernels *k, uint32_t type, int64_t cols) {
    const hachi_type_kernels *kt = &k->t[type];
    return (size_t)hachi_row_size(kt->vec_dot_type, cols) + (kt->act_extra ? kt->act_extra(cols) : 0);
}

/* bytes of the packed activation tiles of n_tok tokens (where the ISA's GEMM takes them packed) */
static size_t matmul_pack_bytes(const hachi_type_kernels *kt, int64_t cols, int n_tok) {
    if (!kt->act_pack || n_tok < kt->gemm_min || n_tok < kt->act_pack_min) return 0;
    return (size_t)((n_tok + MATMUL_MULTI_MAX - 1) / MATMUL_MULTI_MAX) * kt->act_pack_bytes(cols);
}

/* where the packed tiles start in scratch: after the activation rows (rows_bytes), on a cache line */
static size_t matmul_pack_offset(size_t rows_bytes) { return (rows_bytes + 63) / 64 * 64; }

size_t hachi_matmul_scratch_bytes(const hachi_kernels *k, uint32_t type, int64_t cols, int n_tok) {
    if (type >= HACHI_TYPE_COUNT || n_tok < 1) return 0;
    uint32_t vdt = k->t[type].vec_dot_type;
    if (vdt == HACHI_TYPE_F32) return 0;
    const size_t rows = hachi_matmul_act_stride(k, type, cols) * (size_t)n_tok;
    const size_t pack = matmul_pack_bytes(&k->t[type], cols, n_tok);
    return pack ? matmul_pack_offset(rows) + pack : rows;
}

/* until *done reaches n (other threads' claims) */
static void wait_count(atomic_int_fast64_t *done, int64_t n) {
    for (int spins = 0; atomic_load_explicit(done, memory_order_acquire) < n; spins++) {
        hachi_cpu_relax();
        if (spins >= 1 << 14) sched_yield();
    }
}

/* Token tile t of a forward (MATMUL_MULTI_MAX tokens a tile): how many tokens it holds, and
 * where its packed activations go (c->pack set) */
static int tile_tokens(const matmul_ctx *c, int t) { return HACHI_MIN(MATMUL_MULTI_MAX, c->n_tok - t * MATMUL_MULTI_MAX); }
static char *tile_pack(const matmul_ctx *c, int t) { return c->pack + (size_t)t * c->pack_bytes; }

/* Step 1: quantize the activations into scratch, then wait until every claim (some maybe other
 * threads') is done. A claim is MATMUL_CONV_ROWS whole rows, packed right away into their half of
 * a tile where the GEMM takes them packed (while they are in this thread's cache); a decode
 * step's single row goes in one contiguous piece a thread. So the threads stay off each other's
 * cache lines: chunks of 512 elements dealt to both threads made the conversion of 64 rows of
 * 1536 take 0.056 ms on each of 2 threads against 0.026 ms on one (Zen 5). */
static void matmul_convert(matmul_ctx *c, int nth) {
    const hachi_type_traits *tr = hachi_type_info(c->vdt);
    const int64_t nb = c->W->cols / tr->blck_size;
    const bool piece = c->n_tok == 1;   /* pieces of at least 4 blocks (act_prep's b0 % 4 == 0) */
    const int64_t units = piece ? HACHI_MAX(1, HACHI_MIN(nth, nb / 4)) : (c->n_tok + MATMUL_CONV_ROWS - 1) / MATMUL_CONV_ROWS;
    for (;;) {
        int64_t u = atomic_fetch_add_explicit(&c->conv_next, 1, memory_order_relaxed);
        if (u >= units) break;
        const int t0 = piece ? 0 : (int)(u * MATMUL_CONV_ROWS), nt = HACHI_MIN(MATMUL_CONV_ROWS, c->n_tok - t0);
        const int64_t b0 = piece ? nb * u / units / 4 * 4 : 0, b1 = piece && u + 1 < units ? nb * (u + 1) / units / 4 * 4 : nb;
        char *rows = (char *)c->scratch + (size_t)t0 * c->act_stride;
        for (int t = 0; t < nt; t++) {
            char *row = rows + (size_t)t * c->act_stride;
            c->kv->from_float(c->x + (t0 + t) * c->ldx + b0 * tr->blck_size, row + b0 * tr->type_size,
                              (b1 - b0) * tr->blck_size);
            if (c->kt->act_prep) c->kt->act_prep(c->W->cols, row, b0, b1);
        }
        if (c->pack)
            c->kt->act_pack(c->W->cols, rows, c->act_stride, t0 % MATMUL_MULTI_MAX, nt,
                            tile_tokens(c, t0 / MATMUL_MULTI_MAX), tile_pack(c, t0 / MATMUL_MULTI_MAX));
        atomic_fetch_add_explicit(&c->conv_done, 1, memory_order_release);
    }
    wait_count(&c->conv_done, units);
}

/* Outputs of o's rows [r0, r1) for tokens [t0, t0 + nt). */
static void matmul_rows(const matmul_ctx *c, const hachi_matmul_out *o, int64_t r0, int64_t r1, int t0, int nt) {
    const hachi_mat *W = o->W;
    const int64_t cols = W->cols, ldy = o->ldy;
    const char *w = (const char *)W->data + r0 * W->row_bytes;
    const char *a = c->act + (size_t)t0 * c->act_stride;
    float *y = o->y + t0 * ldy;
    if (W->x8) {   /* r0, r1: multiples of 8; one token's 8 sums go straight to y */
        float s[8 * MATMUL_MULTI_MAX];
        for (int64_t r = r0; r < r1; r += 8, w += 8 * W->row_bytes) {
            if (nt == 1) {
                c->kt->vec_dot_x8(cols, y + r, w, a, c->act_stride, 1);
                continue;
            }
            c->kt->vec_dot_x8(cols, s, w, a, c->act_stride, nt);
            for (int t = 0; t < nt; t++) memcpy(y + t * ldy + r, s + 8 * t, 8 * sizeof(float));
        }
        return;
    }
    if (nt == 1) {
        for (int64_t r = r0; r < r1; r++, w += W->row_bytes) c->kt->vec_dot(cols, y + r, w, a);
        return;
    }
    float s[MATMUL_MULTI_MAX];
    for (int64_t r = r0; r < r1; r++, w += W->row_bytes) {
        if (c->kt->vec_dot_multi) c->kt->vec_dot_multi(cols, s, w, a, c->act_stride, nt);
        else for (int t = 0; t < nt; t++) c->kt->vec_dot(cols, &s[t], w, a + (size_t)t * c->act_stride);
        for (int t = 0; t < nt; t++) y[t * ldy + r] = s[t];
    }
}

/* The next row chunks for thread ith, [*first, *first + return): from its own range a quarter of
 * what is left there (at least one), else one from the first other range with chunks left; 0 when
 * none is. A claim is a locked add, a full barrier: claiming 32 KB chunks one at a time cost 3-6%
 * of a forward of 1-8 tokens (bench/RESULTS.md), while the runs shrinking to single chunks keep a
 * descheduled thread's hold on the end of a matrix to one chunk. */
static int64_t claim_row_chunks(matmul_ctx *c, int ith, int64_t *first) {
    for (int k = 0; k < c->n_ranges; k++) {
        int r = (ith + k) % c->n_ranges;
        const int64_t next = atomic_load_explicit(&c->range[r].next, memory_order_relaxed), end = c->range[r].end;
        if (next >= end) continue;
        const int64_t want = k ? 1 : HACHI_MAX(1, (end - next) / 4);
        const int64_t i = atomic_fetch_add_explicit(&c->range[r].next, want, memory_order_relaxed);
        if (i < end) {
            *first = i;
            return HACHI_MIN(want, end - i);
        }
    }
    return 0;
}

/* Row chunk i (over all outputs) for every token */
static void matmul_chunk(const matmul_ctx *c, int64_t i) {
    int m = 0;
    while (i >= c->out_first[m + 1]) m++;
    const hachi_matmul_out *o = &c->out[m];
    const hachi_mat *W = o->W;
    int64_t r0 = (i - c->out_first[m]) * c->out_chunk[m], r1 = HACHI_MIN(r0 + c->out_chunk[m], W->rows);
    if (c->gemm) {   /* prefill GEMM: the chunk's rows (x8: groups) for each token tile */
        const char *w = (const char *)W->data + r0 * W->row_bytes;
        if (W->x8 && c->kt->gemm_x8_all) {
            c->kt->gemm_x8_all(W->cols, o->y + r0, o->ldy, w, (int)((r1 - r0) / 8), c->act, c->act_stride, c->pack,
                               c->n_tok);
            return;
        }
        for (int t0 = 0; t0 < c->n_tok; t0 += MATMUL_MULTI_MAX) {
            float *y = o->y + t0 * o->ldy + r0;
            const char *a = c->pack ? tile_pack(c, t0 / MATMUL_MULTI_MAX) : c->act + (size_t)t0 * c->act_stride;
            const int nt = tile_tokens(c, t0 / MATMUL_MULTI_MAX);
            if (W->x8) c->kt->gemm_x8(W->cols, y, o->ldy, w, (int)((r1 - r0) / 8), a, c->act_stride, nt);
            else c->kt->gemm(W->cols, y, o->ldy, w, W->row_bytes, (int)(r1 - r0), a, c->act_stride, nt);
        }
        return;
    }
    if (c->n_tok <= MATMUL_MULTI_MAX) {
        matmul_rows(c, o, r0, r1, 0, c->n_tok);
        return;
    }
    /* prefill: the chunk (about one L2 tile) is swept by token tiles of 16 */
    for (int t0 = 0; t0 < c->n_tok; t0 += MATMUL_MULTI_MAX)
        matmul_rows(c, o, r0, r1, t0, tile_tokens(c, t0 / MATMUL_MULTI_MAX));
}

static void matmul_task(void *arg, int ith, int nth) {
    matmul_ctx *c = arg;
    if (c->vdt != HACHI_TYPE_F32) matmul_convert(c, nth);
    for (int64_t first, n; (n = claim_row_chunks(c, ith, &first)) > 0;)
        for (int64_t i = first; i < first + n; i++) matmul_chunk(c, i);
}

/* Rows per chunk: ~MATMUL_CHUNK_BYTES of weights (prefill: one L2 tile), at
 * least 4 chunks per thread when the matrix allows, a multiple of 4 rows. */
static int64_t matmul_row_chunk(const hachi_mat *W, int n_tok, int nth, bool gemm) {
    uint64_t rb = W->row_bytes ? W->row_bytes : 1;
    int64_t chunk = (int64_t)((n_tok <= MATMUL_MULTI_MAX ? MATMUL_CHUNK_BYTES : MATMUL_L2_TILE_BYTES) / rb);
    int64_t balance = (W->rows + 4 * nth - 1) / (4 * nth);
    const int64_t align = gemm && W->x8 ? 16 : W->x8 ? 8 : MATMUL_ROW_ALIGN;   /* the x8 GEMM takes groups in pairs */
    if (chunk > balance) chunk = balance;
    chunk = (chunk + align - 1) / align * align;
    return chunk > 0 ? chunk : align;
}

void hachi_matmul(hachi_pool *pool, const hachi_kernels *k, const hachi_mat *W,
                  const float *x, int64_t ldx, int n_tok, float *y, int64_t ldy, void *scratch) {
    const hachi_matmul_out o = {W, y, ldy};
    hachi_matmul_n(pool, k, &o, 1, x, ldx, n_tok, scratch);
}

bool hachi_matmul_fusable(const hachi_mat *a, const hachi_mat *b) {
    return a->data && b->data && a->type == b->type && a->cols == b->cols && a->x8 == b->x8;
}

void hachi_matmul_n(hachi_pool *pool, const hachi_kernels *k, const hachi_matmul_out *out, int n_out,
                    const float *x, int64_t ldx, int n_tok, void *scratch) {
    if (n_tok < 1 || n_out < 1 || n_out > HACHI_MATMUL_OUT_MAX) return;
    const hachi_mat *W = out[0].W;
    const hachi_type_kernels *kt = &k->t[W->type];
    matmul_ctx c = {
        .kt = kt, .kv = &k->t[kt->vec_dot_type], .W = W, .x = x, .ldx = ldx,
        .n_tok = n_tok, .vdt = kt->vec_dot_type, .scratch = scratch,
    };
    if (c.vdt == HACHI_TYPE_F32) {
        c.act = (const char *)x;
        c.act_stride = (size_t)ldx * sizeof(float);
    } else {
        c.act = scratch;
        c.act_stride = hachi_matmul_act_stride(k, W->type, W->cols);
    }
    c.gemm = (W->x8 ? kt->gemm_x8 || kt->gemm_x8_all : kt->gemm != NULL) && n_tok >= kt->gemm_min;
    for (int m = 0; m < n_out; m++) {   /* each matrix in its own chunks, one after the other */
        c.out[m] = out[m];
        c.out_chunk[m] = matmul_row_chunk(out[m].W, n_tok, hachi_pool_size(pool), c.gemm);
        c.out_first[m + 1] = c.out_first[m] + (out[m].W->rows + c.out_chunk[m] - 1) / c.out_chunk[m];
    }
    c.row_chunks = c.out_first[n_out];
    if (c.row_chunks == 0) return;
    if (c.gemm && W->x8 && matmul_pack_bytes(kt, W->cols, n_tok)) {
        c.pack = (char *)scratch + matmul_pack_offset(c.act_stride * (size_t)n_tok);
        c.pack_bytes = kt->act_pack_bytes(W->cols);
    }
    atomic_init(&c.conv_next, 0);
    atomic_init(&c.conv_done, 0);
    c.n_ranges = HACHI_MIN(hachi_pool_size(pool), MATMUL_RANGES_MAX);
    for (int r = 0; r < c.n_ranges; r++) {
        atomic_init(&c.range[r].next, c.row_chunks * r / c.n_ranges);
        c.range[r].end = c.row_chunks * (r + 1) / c.n_ranges;
    }
    hachi_pool_run(pool, matmul_task, &c);
}

/* The interleaved layouts (quant.h): a group of 8 rows takes exactly the bytes of the 8 file
 * rows, so matmul_rows steps by 8 * row_bytes whatever the type. */
typedef struct x8_layout {
    int64_t block;             /* elements per block of one row */
    size_t block8;             /* bytes of a block of the 8 rows */
    void (*repack)(const void *rows, uint64_t row_bytes, void *dst, int64_t n);
    void (*unpack)(const void *src, int j, void *row, int64_t n);
} x8_layout;

static const x8_layout *x8_layout_of(uint32_t type) {
    static const x8_layout q4_0 = {QK4_0, sizeof(block_q4_0x8), hachi_repack_q4_0_x8, hachi_unpack_q4_0_x8};
    static const x8_layout q8_0 = {QK8_0, sizeof(block_q8_0x8), hachi_repack_q8_0_x8, hachi_unpack_q8_0_x8};
    static const x8_layout q4_K = {QK_K, sizeof(block_q4_Kx8), hachi_repack_q4_K_x8, hachi_unpack_q4_K_x8};
    static const x8_layout q5_K = {QK_K, sizeof(block_q5_Kx8), hachi_repack_q5_K_x8, hachi_unpack_q5_K_x8};
    static const x8_layout q6_K = {QK_K, sizeof(block_q6_Kx8), hachi_repack_q6_K_x8, hachi_unpack_q6_K_x8};
    switch (type) {
    case HACHI_TYPE_Q4_0: return &q4_0;
    case HACHI_TYPE_Q8_0: return &q8_0;
    case HACHI_TYPE_Q4_K: return &q4_K;
    case HACHI_TYPE_Q5_K: return &q5_K;
    case HACHI_TYPE_Q6_K: return &q6_K;
    default: return NULL;
    }
}

uint64_t hachi_mat_x8_bytes(const hachi_kernels *k, const hachi_mat *W) {
    if (W->x8 || !W->data || !x8_layout_of(W->type) || !k->t[W->type].vec_dot_x8 || W->rows % 8) return 0;
    return (uint64_t)W->rows * W->row_bytes;
}

void hachi_mat_to_x8_groups(const hachi_mat *W, void *dst, int64_t g0, int64_t g1) {
    const x8_layout *x = x8_layout_of(W->type);
    for (int64_t g = g0; g < g1; g++)
        x->repack((const char *)W->data + g * 8 * W->row_bytes, W->row_bytes, (char *)dst + g * 8 * W->row_bytes, W->cols);
}

void hachi_mat_to_x8(hachi_mat *W, void *dst) {
    hachi_mat_to_x8_groups(W, dst, 0, W->rows / 8);
    W->data = dst;
    W->x8 = true;
}

void hachi_matmul_gather(const hachi_kernels *k, const hachi_mat *W, const float *x, const int32_t *rows, int n,
                         float *y, void *scratch) {
    const hachi_type_kernels *kt = &k->t[W->type];
    const int64_t cols = W->cols;
    const void *a = x;
    if (kt->vec_dot_type != HACHI_TYPE_F32) {   /* as matmul_convert, in one piece */
        k->t[kt->vec_dot_type].from_float(x, scratch, cols);
        if (kt->act_prep) kt->act_prep(cols, scratch, 0, cols / hachi_type_info(kt->vec_dot_type)->blck_size);
        a = scratch;
    }
    const size_t stride = hachi_matmul_act_stride(k, W->type, cols);
    for (int i = 0; i < n; i++) {
        if (W->x8) {   /* the row's group through the interleaved kernel, as matmul_rows */
            float s[8];
            kt->vec_dot_x8(cols, s, (const char *)W->data + (size_t)(rows[i] / 8) * 8 * W->row_bytes, a, stride, 1);
            y[i] = s[rows[i] % 8];
        } else {
            kt->vec_dot(cols, &y[i], (const char *)W->data + (size_t)rows[i] * W->row_bytes, a);
        }
    }
}

void hachi_mat_row(const hachi_kernels *k, const hachi_mat *W, int64_t r, float *out) {
    if (W->x8) {   /* one block of row r at a time */
        const x8_layout *x = x8_layout_of(W->type);
        const char *g = (const char *)W->data + (r / 8) * 8 * W->row_bytes;
        union { block_q4_0 q4_0; block_q8_0 q8_0; block_q4_K q4_K; block_q5_K q5_K; block_q6_K q6_K; } blk;
        for (int64_t b = 0; b < W->cols / x->block; b++) {
            x->unpack(g + (size_t)b * x->block8, (int)(r % 8), &blk, x->block);
            k->t[W->type].to_float(&blk, out + b * x->block, x->block);
        }
        return;
    }
    k->t[W->type].to_float((const char *)W->data + r * W->row_bytes, out, W->cols);
}

/* [*lo, *hi): the whole pages holding the len bytes at a */
static void page_span(uintptr_t a, uintptr_t len, uintptr_t page, uintptr_t *lo, uintptr_t *hi) {
    *lo = a / page * page;
    *hi = (a + len + page - 1) / page * page;
}

bool hachi_mat_read_ahead(const hachi_mat *W, size_t chunk, const atomic_bool *stop) {
    if (W->x8 || !W->data) return true;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo, hi;
    page_span((uintptr_t)W->data, (uintptr_t)(W->rows * W->row_bytes), page, &lo, &hi);
    chunk = (chunk + page - 1) / page * page;
    for (uintptr_t c = lo; c < hi; c += chunk) {
        if (stop && atomic_load_explicit(stop, memory_order_relaxed)) return false;
        madvise((void *)c, HACHI_MIN(chunk, hi - c), MADV_WILLNEED);   // NOLINT(performance-no-int-to-ptr): page rounding is integer arithmetic
    }
    return true;
}

void hachi_mat_prefetch_rows(const hachi_mat *W, const int32_t *rows, int n) {
    if (W->x8 || !W->data) return;   /* interleaved rows were copied into memory at load */
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t plo = 0, phi = 0;   /* the pages last asked for (a repeated token asks once) */
    for (int i = 0; i < n; i++) {
        if (rows[i] < 0 || rows[i] >= W->rows) continue;
        uintptr_t lo, hi;
        page_span((uintptr_t)W->data + (uintptr_t)rows[i] * W->row_bytes, W->row_bytes, page, &lo, &hi);
        if (lo >= plo && hi <= phi) continue;
        madvise((void *)lo, hi - lo, MADV_WILLNEED);   // NOLINT(performance-no-int-to-ptr): page rounding is integer arithmetic
        plo = lo;
        phi = hi;
    }
}
