/* attn: decode/verify/prefill attention of one layer over its KV cache (kv.h). One
 * K/V head serves a group of G query heads: each K and V row is read once per step
 * and used for all G heads. Keys before p0 are the cache's held rows, keys of this
 * forward its pending rows. Each token of a forward is attended as its own decode step
 * would be: with enough keys, its key range cut into parts by their count alone (the parts
 * shared out over the threads) and the softmax partials merged in order (flash-decoding),
 * else whole on one thread; the keys in tiles of
 * positions with an online softmax (flash attention), up to 16 tokens per dispatch
 * sharing each tile while it is in cache (an fp16 tile converted to f32 once for them,
 * the kernels' sums unchanged). So a token's logits do not depend on how the
 * sequence was cut into forwards (prefill chunks, verified drafts, a restored prompt
 * cache) nor on the thread count: they are bitwise those of decoding it on any threads.
 * Streaming heads see their own keys (a sink and a recent window): the query heads of a KV
 * head form at most two sets, each with its key runs. Everything comes from hachi_attn_args
 * (attn.h). */
#include <float.h>
#include <math.h>
#include <string.h>
#include "attn.h"
#include "util.h"

typedef struct attn_job {
    const hachi_attn_args *a;
    const hachi_kernels *kern;
    hachi_pool *pool;
    int t0, n;      /* tokens t0..t0+n-1 of the forward (n <= HACHI_ATTN_GROUP) */
} attn_job;

/* Keys per tile of attn_task: 128 K and 128 V rows of 512 fp16 dims are 256 KiB, which stay
 * in L2 while every token of a group reads them */
#define ATTN_TILE_KEYS 128
/* A thread with this many head sets converts each fp16 tile they read to f32 once
 * (hachi_kv_rows_f32), so that the sets' kernels read f32 rows instead of each converting them
 * (where the table has such kernels, dense attention only). Attention cycles against converting
 * nothing (bench_ab, Sapphire Rapids class, 2 threads, depth 8192): forwards of 4 tokens (4 sets a
 * thread) 1.02x, 8 tokens 0.957x, 16 0.957x; a prefill of 4096 from position 0, 0.895x. */
#define ATTN_F32_SETS 6

/* Floats of a token's slot in attn_task: its gathered queries [G][hd] (head sets that are not
 * all G heads), its running state [G][hd + 2] (a head set's value sums [Gs][hd], maxima [Gs],
 * sums [Gs], set after set) and its queries as the cache's scores take them (kv.h) */
static size_t token_floats(int G, int hd) { return (size_t)G * (2 * (size_t)hd + 2) + hachi_kv_query_floats(G, hd); }

/* Queries of a group's head sets of one KV head on a thread (each token's G heads, in one or two
 * sets): the int8 tiles' (hachi_kv_i8_tile) */
static int i8_queries(int G) { return HACHI_ATTN_GROUP * G; }

/* Per thread: a tile's scores [ATTN_TILE_KEYS][G], then a slot for each token of a group, then
 * the int8 value sums [G][hd] (int32), then from the next 64-byte boundary the tile's K and V
 * rows as f32 [2][ATTN_TILE_KEYS][hd] (512-bit loads across two lines: 56 against 70 G FMA/s)
 * or an int8 cache's tile buffers (hachi_kv_i8_tile_bytes);
 * before that, page selection's two query sums [hd] and its page scores [n_ctx / HACHI_PAGE]. */
size_t hachi_attn_scores_stride(int n_head, int n_ctx, int hd_max, hachi_kv_type kv_type) {
    const size_t rows = HACHI_MAX(2 * (size_t)ATTN_TILE_KEYS * hd_max,
                                  (hachi_kv_i8_tile_bytes(kv_type, i8_queries(n_head), hd_max, ATTN_TILE_KEYS) + 3) / 4);
    const size_t tiles = (size_t)n_head * ATTN_TILE_KEYS + HACHI_ATTN_GROUP * token_floats(n_head, hd_max) +
                         (size_t)n_head * hd_max + 16 + rows;
    return HACHI_MAX(tiles, 2 * (size_t)hd_max + (size_t)n_ctx / HACHI_PAGE);
}

size_t hachi_attn_partial_floats(int n_head, int hd_max) {
    return (size_t)HACHI_ATTN_GROUP * HACHI_ATTN_PARTS * n_head * (hd_max + 2);
}

size_t hachi_attn_page_floats(int n_ctx) { return (size_t)HACHI_ATTN_GROUP * 2 * (n_ctx / HACHI_PAGE); }
size_t hachi_attn_range_ints(int sparse_pages) { return (size_t)HACHI_ATTN_GROUP * 2 * (sparse_pages + 2); }

/* ---- the keys a query sees: ascending runs of positions ------------------------------------ */

/* Keys of the query at pos, as n ascending runs [r[2i], r[2i+1]); returns n. Dense: the
 * window (or everything) before it. Page-sparse, once the pages before pos exceed the budget:
 * page 0 (the sink), the selected pages, and the last two pages (pos's and the one before),
 * so the keys of this forward (at most 16 before pos) are always in the recent run. */
static int key_runs(const hachi_attn_args *a, int pos, const int *sel, int n_sel, int *r) {
    const int P = pos / HACHI_PAGE;
    if (!a->sparse_pages || P + 1 <= a->sparse_pages) {
        r[0] = a->window > 0 ? HACHI_MAX(0, pos - a->window + 1) : 0;
        r[1] = pos + 1;
        return 1;
    }
    int n = 0;
    r[n++] = 0; r[n++] = HACHI_PAGE;
    for (int i = 0; i < n_sel; i++) {
        const int lo = sel[i] * HACHI_PAGE;
        if (r[n - 1] == lo) r[n - 1] = lo + HACHI_PAGE;
        else { r[n++] = lo; r[n++] = lo + HACHI_PAGE; }
    }
    const int lo = (P - 1) * HACHI_PAGE;
    if (r[n - 1] == lo) r[n - 1] = pos + 1;
    else { r[n++] = lo; r[n++] = pos + 1; }
    return n / 2;
}

static int n_keys(const int *r, int n) {
    int k = 0;
    for (int i = 0; i < n; i++) k += r[2 * i + 1] - r[2 * i];
    return k;
}

/* A streaming head's keys at pos: the sink, then the recent window (one run once they meet). */
static int stream_runs(const hachi_attn_args *a, int pos, int *r) {
    const int lo = HACHI_MAX(0, pos - a->stream_window + 1);
    if (lo <= a->stream_sink || a->stream_sink == 0) {
        r[0] = lo <= a->stream_sink ? 0 : lo;
        r[1] = pos + 1;
        return 1;
    }
    r[0] = 0; r[1] = a->stream_sink;
    r[2] = lo; r[3] = pos + 1;
    return 2;
}

/* Query heads of one KV head that attend to the same keys: bits over its G heads. */
typedef struct head_set {
    uint64_t heads;
    const int *r;       /* key runs */
    int nr, k;          /* runs, keys */
} head_set;

/* The query heads of KV head g split by their keys for slot i (position pos): those that see
 * the token's runs (tok, ntok), then the streaming ones (runs into sr[4]). Returns 1 or 2. */
static int head_sets(const hachi_attn_args *a, int g, int pos, const int *tok, int ntok, int *sr, head_set *hs) {
    const int G = a->n_head / a->n_head_kv;
    const uint64_t all = G >= 64 ? ~0ull : (1ull << G) - 1, sm = a->stream ? (a->stream >> (g * G)) & all : 0;
    int n = 0;
    if (sm != all) hs[n++] = (head_set){all & ~sm, tok, ntok, n_keys(tok, ntok)};
    if (sm) {
        const int nr = stream_runs(a, pos, sr);
        hs[n++] = (head_set){sm, sr, nr, n_keys(sr, nr)};
    }
    return n;
}

/* Whether the query at pos selects pages, and its candidate pages [1, P - 1). */
static bool selects(const hachi_attn_args *a, int pos) {
    return a->sparse_pages && pos / HACHI_PAGE + 1 > a->sparse_pages;
}

/* Candidates better first: a higher score, on a tie the lower page. */
static bool better(const float *sc, int x, int y) {
    const float a = sc[x], b = sc[y];
    return a > b || (a == b && x < y);
}

/* The n_top best of pages [1, P - 1) by score (sc indexed by page), ascending into sel:
 * a heap of the best so far with the worst at its root. Returns how many (fewer than n_top
 * only when there are fewer candidates). */
static int select_pages(const float *sc, int P, int n_top, int *sel) {
    int n = 0;
    if (n_top <= 0) return 0;
    for (int p = 1; p < P - 1; p++) {
        int i;
        if (n < n_top) {
            i = n++;
            while (i > 0 && better(sc, sel[(i - 1) / 2], p)) { sel[i] = sel[(i - 1) / 2]; i = (i - 1) / 2; }
            sel[i] = p;
            continue;
        }
        if (!better(sc, p, sel[0])) continue;
        i = 0;   /* replace the root, sift down */
        for (;;) {
            int c = 2 * i + 1;
            if (c >= n) break;
            if (c + 1 < n && better(sc, sel[c], sel[c + 1])) c++;
            if (!better(sc, p, sel[c])) break;
            sel[i] = sel[c];
            i = c;
        }
        sel[i] = p;
    }
    for (int i = 1; i < n; i++) {   /* ascending pages */
        int v = sel[i], j = i;
        while (j > 0 && sel[j - 1] > v) { sel[j] = sel[j - 1]; j--; }
        sel[j] = v;
    }
    return n;
}

/* ---- attention over a token's runs -------------------------------------------------------- */

/* The parts a head set's k keys are cut into, by k alone (part j on thread j % nth: the same
 * arithmetic on any number of threads), in whole tiles: none below ATTN_SPLIT_KEYS (a sliding
 * window of 512 in two), then one per ATTN_PART_KEYS, up to HACHI_ATTN_PARTS. Each part more
 * costs its partial's write and merge: a part per 256 keys cost 1.5-2.5% of a 2048 prefill and
 * of a forward of 8 at depth 4096, these 0.996-1.006x the split over the threads before them
 * (bench_ab, Zen 5, 2 threads; bench/RESULTS.md). */
#define ATTN_SPLIT_KEYS 512
#define ATTN_PART_KEYS 2048
static int key_parts(int k) { return k < ATTN_SPLIT_KEYS ? 1 : HACHI_MAX(2, HACHI_MIN(k / ATTN_PART_KEYS, HACHI_ATTN_PARTS)); }

/* Page-sparse tokens of the group: their page scores (pages split over the threads), then
 * each one's selection (tokens round robin) into its runs. Every thread takes both barriers. */
static void select_group(const attn_job *jb, int ith, int nth) {
    const hachi_attn_args *A = jb->a;
    const int hd = A->head_dim, Hkv = A->n_head_kv, G = A->n_head / Hkv, stride = 2 * A->kv->n_pages;
    for (int i = 0; i < jb->n; i++) {
        const int t = jb->t0 + i, pos = A->p0 + t, P = pos / HACHI_PAGE;
        if (!selects(A, pos)) continue;
        int64_t lo, hi;   /* candidates 1 .. P-2, split over the threads */
        hachi_split(P - 2, 1, ith, nth, &lo, &hi);
        const int p0 = 1 + (int)lo, p1 = 1 + (int)hi;
        float *ps = A->page_scores + (size_t)i * stride, *add = ps + stride / 2;   /* [n_pages] each */
        float *qpos = A->scores + (size_t)ith * A->scores_stride, *qneg = qpos + hd;   /* free until attention */
        bool first = true;
        for (int g = 0; g < Hkv; g++) {   /* more KV heads: their scores add up; streaming heads select nothing */
            const float *q = A->q + (size_t)t * A->n_head * hd + (size_t)g * G * hd;
            const uint64_t sm = A->stream ? A->stream >> (g * G) : 0;
            if (G < 64 && (sm & ((1ull << G) - 1)) == (1ull << G) - 1) continue;
            for (int d = 0; d < hd; d++) {
                float sp = 0.0f, sn = 0.0f;
                for (int h = 0; h < G; h++) {
                    if (sm >> h & 1) continue;
                    const float x = q[(size_t)h * hd + d];
                    if (x > 0.0f) sp += x; else sn += x;
                }
                qpos[d] = sp;
                qneg[d] = sn;
            }
            hachi_kv_page_scores(A->kv, jb->kern, g, hd, qpos, qneg, p0, p1, first ? ps + p0 : add + p0, qneg + hd);
            for (int p = p0; !first && p < p1; p++) ps[p] += add[p];
            first = false;
        }
    }
    hachi_pool_barrier(jb->pool);
    for (int i = ith; i < jb->n; i += nth) {
        const int t = jb->t0 + i, pos = A->p0 + t;
        int *r = A->ranges + (size_t)i * 2 * (A->sparse_pages + 2), sel[HACHI_ATTN_MAX_PAGES];
        int n_sel = 0;
        if (selects(A, pos)) n_sel = select_pages(A->page_scores + (size_t)i * stride, pos / HACHI_PAGE, A->sparse_pages - 3, sel);
        A->n_ranges[i] = key_runs(A, pos, sel, n_sel, r);
    }
    hachi_pool_barrier(jb->pool);
}

/* Slot i's key runs for the heads that are not streaming (into dense[2] when not page-sparse). */
static const int *token_runs(const hachi_attn_args *a, int i, int pos, int *dense, int *nr) {
    if (a->sparse_pages) {
        *nr = a->n_ranges[i];
        return a->ranges + (size_t)i * 2 * (a->sparse_pages + 2);
    }
    *nr = key_runs(a, pos, NULL, 0, dense);
    return dense;
}

/* A head set of one token, on this thread: its keys [a, b) of the set's k (the runs r), a
 * cursor into r (run ci starts at key cf), its queries and its running state. */
typedef struct tile_set {
    int i;                  /* slot: token t0 + i */
    const head_set *h;
    int Gs, a, b, ci, cf;
    int part;               /* its part of the set's keys (key_parts), -1: all of them */
    hachi_kv_query q;       /* [Gs][hd] */
    float *acc;             /* [Gs][hd] value sums, then [Gs] maxima, [Gs] sums */
} tile_set;

/* Position of key index j (< the set's k) of runs r */
static int key_pos(const int *r, int nr, int j) {
    for (int i = 0; i < nr; i++) {
        const int n = r[2 * i + 1] - r[2 * i];
        if (j < n) return r[2 * i] + j;
        j -= n;
    }
    return r[2 * nr - 1];
}

/* The set's keys in positions [p, p + T) as runs of rows (at most one a key): the segments where
 * its runs (within its keys [a, b)) meet the tile, in order, with their f32 rows where the tile's
 * positions from `from` on are converted at kf, vf (else NULL). Returns the runs, their keys in *m.
 * The cursor moves past runs that end before p. */
static int tile_runs(const attn_job *jb, tile_set *ts, int p, int T, const float *kf, const float *vf, int from,
                     hachi_kv_run *out, int *at, int *m) {
    const hachi_attn_args *A = jb->a;
    const int *r = ts->h->r, nr = ts->h->nr;
    while (ts->ci < nr && (r[2 * ts->ci + 1] <= p || ts->cf + r[2 * ts->ci + 1] - r[2 * ts->ci] <= ts->a)) {
        ts->cf += r[2 * ts->ci + 1] - r[2 * ts->ci];
        ts->ci++;
    }
    int n = 0;
    *m = 0;
    for (int i = ts->ci, f = ts->cf; i < nr && f < ts->b && r[2 * i] < p + T; f += r[2 * i + 1] - r[2 * i], i++) {
        const int lo = HACHI_MAX(p, r[2 * i] + HACHI_MAX(0, ts->a - f));
        const int hi = HACHI_MIN(p + T, HACHI_MIN(r[2 * i + 1], r[2 * i] + (ts->b - f)));
        for (int j = lo; j < hi; j += out[n++].n) {
            if (at) at[n] = j;
            out[n] = hachi_kv_segment(A->kv, j, hi, A->p0);
            if (kf) {
                out[n].kf = kf + (size_t)(j - from) * A->head_dim;
                out[n].vf = vf + (size_t)(j - from) * A->head_dim;
            }
            *m += out[n].n;
        }
    }
    return n;
}

/* y[d] = x[d] * f for d < n, four at a time (gcc -O2 left the loop scalar: 1% of a prefill) */
static void scale_row(float *y, const float *x, float f, int n) {
    const hachi_f32x4 f4 = {f, f, f, f};
    int d = 0;
    for (; d + 4 <= n; d += 4) *(hachi_f32x4 *)(y + d) = *(const hachi_f32x4 *)(x + d) * f4;
    for (; d < n; d++) y[d] = x[d] * f;
}

/* The set's scores of a tile's m keys (sc, [m][Gs]) to their weights against the set's new
 * running maximum, the set's sums so far rescaled to it */
static void tile_softmax(const attn_job *jb, tile_set *x, float *sc, int m, int hd) {
    const int Gs = x->Gs;
    float *mx = x->acc + (size_t)Gs * hd, *sum = mx + Gs, mt[64], lt[64];
    memcpy(mt, mx, (size_t)Gs * sizeof(float));
    jb->kern->attn_softmax(sc, m, Gs, jb->a->scale, mt, lt);
    for (int c = 0; c < Gs; c++) {
        if (mx[c] < mt[c]) {
            const float f = expf(mx[c] - mt[c]);
            scale_row(x->acc + (size_t)c * hd, x->acc + (size_t)c * hd, f, hd);
            sum[c] *= f;
        }
        mx[c] = mt[c];
        sum[c] += lt[c];
    }
}

/* The tiles of KV head g for this thread's nts head sets over an int8 cache, through the kernel
 * table's int8 matrix products (hachi_kv_i8_tile): per tile every set's scores, its softmax and
 * weights, then every set's value sums at once and each set's flush. sc: the thread's tile
 * scores; buf: its tile buffers. */
static void tiles_i8(const attn_job *jb, tile_set *ts, int nts, int g, int first, int end, float *sc, void *buf) {
    const hachi_attn_args *A = jb->a;
    const hachi_kernels *K = jb->kern;
    const int hd = A->head_dim, G = A->n_head / A->n_head_kv, T = ATTN_TILE_KEYS;
    hachi_kv_i8_tile t = hachi_kv_i8_tile_init(buf, i8_queries(G), hd, T);
    hachi_kv_run runs[ATTN_TILE_KEYS];
    int qo[2 * HACHI_ATTN_GROUP], at[ATTN_TILE_KEYS];
    float u[2 * HACHI_ATTN_GROUP][64];
    bool live[2 * HACHI_ATTN_GROUP];
    for (int e = 0; e < nts; e++) qo[e] = hachi_kv_i8_query(&t, &ts[e].q, ts[e].Gs);
    hachi_kv_i8_pack(&t, K);
    for (int p = first / T * T; p < end; p += T) {
        hachi_kv_i8_load(&t, A->kv, K, HACHI_MAX(p, first), HACHI_MIN(p + T, end), A->p0, g);
        for (int e = 0; e < nts; e++) {
            tile_set *x = &ts[e];
            int m;
            const int nr = tile_runs(jb, x, p, T, NULL, NULL, 0, runs, at, &m);
            if (!(live[e] = m > 0)) continue;
            hachi_kv_i8_scores(&t, at, runs, nr, qo[e], &x->q, x->Gs, sc);
            tile_softmax(jb, x, sc, m, hd);
            hachi_kv_i8_weights(&t, K, at, runs, nr, qo[e], sc, x->Gs, u[e]);
        }
        hachi_kv_i8_values(&t, K);
        for (int e = 0; e < nts; e++)
            if (live[e]) hachi_kv_i8_flush(&t, K, qo[e], ts[e].Gs, u[e], ts[e].acc);
    }
}

/* Tokens t0..t0+n-1 of the forward, flash-attention style. Per KV head, each token's query
 * heads form one or two head sets (streaming heads see other keys); a set's keys are cut into
 * parts when there are enough of them (key_parts; the partials of slot i left for the caller),
 * else the set runs whole on thread i % nth. In round r a thread takes part r * nth + ith of
 * each set cut into parts (and in round 0 its whole sets). A round sweeps the positions it reads in
 * tiles aligned to ATTN_TILE_KEYS, and per tile and set: the scores of the set's keys in the
 * tile, their softmax against the tile's max, the merge into the set's running max, sum and
 * value sums (the sums so far rescaled when the max grows, the tile's weights when it does
 * not), then the value sums. Tile by tile every token of the group reads the tile while it is in
 * cache, so a forward of k tokens reads each K/V row from memory once, not k times; the value
 * sums of a set whose tile rows an earlier set mostly read go through the kernels' hot entry, and
 * with ATTN_F32_SETS sets or more the tile is converted to f32 once for all of them. A token's
 * arithmetic depends only on its position and its keys, never on the other tokens of the
 * forward or the thread count: bit for bit the same in a decode step, a verify forward or a
 * prefill chunk, on any number of threads. */
static void attn_task(void *ctx, int ith, int nth) {
    const attn_job *jb = ctx;
    const hachi_attn_args *A = jb->a;
    const int hd = A->head_dim, Hkv = A->n_head_kv, G = A->n_head / Hkv, qd = A->n_head * hd, T = ATTN_TILE_KEYS;
    float *sc = A->scores + (size_t)ith * A->scores_stride, *row0 = sc + (size_t)G * T;
    // cppcheck-suppress invalidPointerCast ; the thread's scratch ends in int32 value sums (scores_stride)
    int32_t *vsum = (int32_t *)(row0 + (size_t)HACHI_ATTN_GROUP * token_floats(G, hd));
    // cppcheck-suppress invalidPointerCast ; the f32 tile follows the value sums (scores_stride)
    float *kf = (float *)(vsum + (size_t)A->n_head * hd);
    kf += (64 - (uintptr_t)kf % 64) % 64 / sizeof(float);
    float *vf = kf + (size_t)ATTN_TILE_KEYS * hd;
    /* (page-sparse sets read scattered pages of the range a conversion would cover) */
    const bool f32 = !A->sparse_pages && hachi_kv_f32_rows(A->kv, jb->kern, G, hd);
    const bool i8 = !A->sparse_pages && hachi_kv_i8_products(A->kv, jb->kern, hd);
    hachi_kv_run runs[ATTN_TILE_KEYS];
    int dense[HACHI_ATTN_GROUP][2], sr[HACHI_ATTN_GROUP][4];
    head_set hs[HACHI_ATTN_GROUP][2];
    tile_set ts[2 * HACHI_ATTN_GROUP];

    if (A->sparse_pages) select_group(jb, ith, nth);
    for (int g = 0; g < Hkv; g++)
    for (int r = 0;; r++) {
        int nts = 0, first = INT32_MAX, end = 0;   /* the sets on this thread this round, the positions they read */
        for (int i = 0; i < jb->n; i++) {
            const int t = jb->t0 + i, pos = A->p0 + t;
            int ntok;
            const int *tok = token_runs(A, i, pos, dense[i], &ntok);
            const int ns = head_sets(A, g, pos, tok, ntok, sr[i], hs[i]);
            float *qg = row0 + (size_t)i * token_floats(G, hd), *st = qg + (size_t)G * hd;
            float *qk = st + (size_t)G * (hd + 2);
            const float *q = A->q + (size_t)t * qd + (size_t)g * G * hd;
            for (int s = 0; s < ns; s++) {
                const head_set *h = &hs[i][s];
                const int Gs = __builtin_popcountll(h->heads);
                tile_set *x = &ts[nts];
                const int parts = key_parts(h->k), j = r * nth + ith;
                *x = (tile_set){.i = i, .h = h, .Gs = Gs, .part = parts > 1 ? j : -1, .acc = st};
                st += (size_t)Gs * (hd + 2);
                if (parts > 1 && j < parts) {
                    int64_t a, b;
                    hachi_split(h->k, ATTN_TILE_KEYS, j, parts, &a, &b);
                    x->a = (int)a;
                    x->b = (int)b;
                } else if (parts == 1 && r == 0 && i % nth == ith) x->b = h->k;
                if (x->a >= x->b) continue;
                const float *qs = q;
                if (Gs < G) {   /* gather the set's queries */
                    for (int j = 0, c = 0; j < G; j++)
                        if (h->heads >> j & 1) memcpy(qg + (size_t)c++ * hd, q + (size_t)j * hd, hd * sizeof(float));
                    qs = qg;
                    qg += (size_t)Gs * hd;
                }
                x->q = hachi_kv_query_prepare(A->kv, jb->kern, qs, Gs, hd, qk);
                qk += hachi_kv_query_floats(Gs, hd);
                memset(x->acc, 0, (size_t)Gs * (hd + 2) * sizeof(float));
                for (int c = 0; c < Gs; c++) x->acc[(size_t)Gs * hd + c] = -INFINITY;
                first = HACHI_MIN(first, key_pos(h->r, h->nr, x->a));
                end = HACHI_MAX(end, key_pos(h->r, h->nr, x->b - 1) + 1);
                nts++;
            }
        }
        if (!nts) break;   /* (a later round has no more) */
        const bool cvt = f32 && nts >= ATTN_F32_SETS;
        if (i8 && nts >= jb->kern->attn_i8_sets) tiles_i8(jb, ts, nts, g, first, end, sc, kf);
        else for (int p = first / T * T; p < end; p += T) {
            const int lo = HACHI_MAX(p, first);
            if (cvt) hachi_kv_rows_f32(A->kv, jb->kern, lo, HACHI_MIN(p + T, end), A->p0, g, hd, kf, vf);
            for (int e = 0, seen = 0; e < nts; e++) {   /* seen: the most keys of the tile a set read */
                tile_set *x = &ts[e];
                const int Gs = x->Gs;
                int m;
                const int nr = tile_runs(jb, x, p, T, cvt ? kf : NULL, vf, lo, runs, NULL, &m);
                if (!m) continue;
                for (int k = 0, j = 0; k < nr; j += runs[k++].n)
                    hachi_kv_scores(A->kv, jb->kern, &runs[k], g, hd, &x->q, Gs, sc + (size_t)j * Gs);
                tile_softmax(jb, x, sc, m, hd);
                /* hot: most of its rows already read */
                hachi_kv_values(A->kv, jb->kern, runs, nr, g, hd, sc, Gs, x->acc, 2 * seen >= m, vsum);
                seen = HACHI_MAX(seen, m);
            }
        }
        for (int e = 0; e < nts; e++) {   /* whole sets to the output, parts to their partials */
            const tile_set *x = &ts[e];
            const int t = jb->t0 + x->i, Gs = x->Gs;
            const float *mx = x->acc + (size_t)Gs * hd, *sum = mx + Gs;
            float *out = A->out + (size_t)t * qd + (size_t)g * G * hd;
            float *part = A->partial + ((size_t)x->i * HACHI_ATTN_PARTS + x->part) * A->n_head * (hd + 2) + (size_t)g * G * (hd + 2);
            for (int j = 0, c = -1; j < G; j++) {
                if (!(x->h->heads >> j & 1)) continue;
                const float *src = x->acc + (size_t)++c * hd;
                if (x->part < 0) {
                    const float inv = 1.0f / sum[c];
                    scale_row(out + (size_t)j * hd, src, inv, hd);
                    continue;
                }
                float *pa = part + (size_t)j * (hd + 2);
                memcpy(pa, src, hd * sizeof(float));
                pa[hd] = mx[c];
                pa[hd + 1] = sum[c];
            }
        }
    }
}

/* out = sum_k e^(m_k - M) acc_k / sum_k e^(m_k - M) l_k over the parts' partials of query
 * head h of token t (slot i), in order */
static void merge_partials(const hachi_attn_args *a, int t, int i, int h, int parts) {
    const int hd = a->head_dim, H = a->n_head, hd4 = hd / 4 * 4;
    const float *part = a->partial + (size_t)i * HACHI_ATTN_PARTS * H * (hd + 2);
    float M = -FLT_MAX, den = 0.0f;
    float *out = a->out + (size_t)t * H * hd + (size_t)h * hd;
    for (int k = 0; k < parts; k++) {
        const float *p = part + (size_t)k * H * (hd + 2) + (size_t)h * (hd + 2);
        if (p[hd + 1] > 0.0f && p[hd] > M) M = p[hd];
    }
    memset(out, 0, hd * sizeof(float));
    for (int k = 0; k < parts; k++) {
        const float *p = part + (size_t)k * H * (hd + 2) + (size_t)h * (hd + 2);
        if (p[hd + 1] <= 0.0f) continue;
        const float w = expf(p[hd] - M);
        const hachi_f32x4 w4 = {w, w, w, w};
        den += w * p[hd + 1];
        for (int d = 0; d < hd4; d += 4) *(hachi_f32x4 *)(out + d) += w4 * *(const hachi_f32x4 *)(p + d);
        for (int d = hd4; d < hd; d++) out[d] += w * p[d];
    }
    const hachi_f32x4 den4 = {den, den, den, den};
    for (int d = 0; d < hd4; d += 4) *(hachi_f32x4 *)(out + d) /= den4;
    for (int d = hd4; d < hd; d++) out[d] /= den;
}

/* The head sets of slot i (token t0 + i) cut into parts, from their partials */
static void merge_token(const hachi_attn_args *a, int t0, int i) {
    const int G = a->n_head / a->n_head_kv, pos = a->p0 + t0 + i;
    int dense[2], sr[4], ntok;
    const int *tok = token_runs(a, i, pos, dense, &ntok);
    for (int g = 0; g < a->n_head_kv; g++) {
        head_set hs[2];
        const int ns = head_sets(a, g, pos, tok, ntok, sr, hs);
        for (int s = 0; s < ns; s++) {
            const int parts = key_parts(hs[s].k);
            for (int j = 0; parts > 1 && j < G; j++)
                if (hs[s].heads >> j & 1) merge_partials(a, t0 + i, i, g * G + j, parts);
        }
    }
}

/* A group of at least nth tokens merges in the task, after a barrier: slot i on thread i % nth */
static bool merge_in_task(int n, int nth) { return nth > 1 && n >= nth; }

static void attn_group_task(void *ctx, int ith, int nth) {
    const attn_job *jb = ctx;
    attn_task(ctx, ith, nth);
    hachi_pool_barrier(jb->pool);
    for (int i = ith; i < jb->n; i += nth) merge_token(jb->a, jb->t0, i);
}

void hachi_attention(hachi_pool *pool, const hachi_kernels *kern, const hachi_attn_args *a) {
    const int nth = hachi_pool_size(pool);
    for (int t0 = 0; t0 < a->n; t0 += HACHI_ATTN_GROUP) {
        attn_job jb = {a, kern, pool, t0, HACHI_MIN(HACHI_ATTN_GROUP, a->n - t0)};
        if (merge_in_task(jb.n, nth)) {
            hachi_pool_run(pool, attn_group_task, &jb);
            continue;
        }
        hachi_pool_run(pool, attn_task, &jb);
        for (int i = 0; i < jb.n; i++) merge_token(a, t0, i);
    }
}
