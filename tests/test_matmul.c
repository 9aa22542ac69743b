/* Tests for matmul: for every ISA table this machine has, several weight types
 * and awkward shapes (rows not a multiple of the thread count, n_tok around
 * the 16-row multi kernel and the prefill tiling), hachi_matmul with pools of
 * 1, 2 and 3 threads against a naive loop of the reference vec_dot over the
 * same quantized activations; n_tok outputs against n_tok 1-token calls;
 * output padding untouched; no allocation; hachi_matmul_gather equal to hachi_matmul's rows;
 * hachi_mat_row against to_float;
 * the same with rows interleaved by 8 (Q4_0, Q4_K, Q5_K, Q6_K, Q8_0 where the ISA has the x8 kernel). */
#include "test.h"
#include "matmul.h"
#include "util.h"
#include <float.h>
#include <math.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

/* Tolerance of an output against ref's vec_dot, relative to |w| |x| (>= sum |w_i a_i| by
 * Cauchy-Schwarz, a the activations as quantized, |a| <= 1.02 |x| for the formats here):
 * matmul quantizes activations with the table's quantizer, byte-identical to ref's (the
 * kernel test checks it), so only the kernels' rounding differs, within test_kernels.c's
 * KERNEL_EPS (128 ulps) of sum |w_i a_i|; twice that covers the norms' slack. */
#define MM_EPS (256 * FLT_EPSILON)

static uint64_t mm_rng(uint64_t *x) { *x = *x * 6364136223846793005ull + 1442695040888963407ull; return *x >> 33; }
static float mm_uniform(uint64_t *x) { return (float)(mm_rng(x) % 2000001) / 1000000.0f - 1.0f; }

typedef struct mm_case {
    uint32_t type;
    int64_t rows, cols;
    const int *n_toks;
    int n_n_toks;
    bool x8;                /* W interleaved 8 rows by 8 as the model loader does (if k has the kernel) */
} mm_case;

/* Reference: y[t][r] = ref vec_dot(W row r, activation row t) with activations
 * quantized by the ref table; norm[t][r] = |w_r| |x_t| (dequantized), the tolerance scale. */
static void mm_reference(const hachi_kernels *ref, const hachi_mat *W, const float *x, int64_t ldx, int n_tok,
                         void *act, float *y, float *norm) {
    const hachi_type_kernels *kt = &ref->t[W->type];
    uint32_t vdt = kt->vec_dot_type;
    size_t stride = vdt == HACHI_TYPE_F32 ? (size_t)W->cols * 4 : (size_t)hachi_row_size(vdt, W->cols);
    for (int t = 0; t < n_tok; t++)
        ref->t[vdt].from_float(x + t * ldx, (char *)act + t * stride, W->cols);
    float *wrow = hachi_malloc((size_t)W->cols * sizeof(float));
    if (!wrow) return;
    for (int64_t r = 0; r < W->rows; r++) {
        kt->to_float((const char *)W->data + r * W->row_bytes, wrow, W->cols);
        double wn = 0;
        for (int64_t c = 0; c < W->cols; c++) wn += (double)wrow[c] * wrow[c];
        for (int t = 0; t < n_tok; t++) {
            double xn = 0;
            for (int64_t c = 0; c < W->cols; c++) xn += (double)x[t * ldx + c] * x[t * ldx + c];
            kt->vec_dot(W->cols, &y[t * W->rows + r], (const char *)W->data + r * W->row_bytes,
                        (const char *)act + t * stride);
            norm[t * W->rows + r] = (float)sqrt(wn * xn);
        }
    }
    hachi_free(wrow);
}

static void mm_run_case(const hachi_kernels *k, const hachi_kernels *ref, hachi_pool **pools, int n_pools,
                        const mm_case *mc, uint64_t seed) {
    const int64_t rows = mc->rows, cols = mc->cols, ldx = cols + 3, ldy = rows + 5;
    int max_tok = 0;
    for (int i = 0; i < mc->n_n_toks; i++) max_tok = HACHI_MAX(max_tok, mc->n_toks[i]);
    uint64_t row_bytes = hachi_row_size(mc->type, cols);
    float *wf = hachi_malloc((size_t)(rows * cols) * sizeof(float));
    void *wq = hachi_aligned_alloc((size_t)(rows * row_bytes));
    float *x = hachi_malloc((size_t)(max_tok * ldx) * sizeof(float));
    float *y = hachi_malloc((size_t)(max_tok * ldy) * sizeof(float));
    float *y1 = hachi_malloc((size_t)(max_tok * ldy) * sizeof(float));
    float *yr = hachi_malloc((size_t)(max_tok * rows) * sizeof(float));
    float *nr = hachi_malloc((size_t)(max_tok * rows) * sizeof(float));
    void *act = hachi_aligned_alloc((size_t)max_tok * (size_t)cols * 4 + 4096);
    size_t scratch_bytes = hachi_matmul_scratch_bytes(k, mc->type, cols, max_tok);
    void *scratch = hachi_aligned_alloc(scratch_bytes + 1);
    void *w8 = hachi_aligned_alloc((size_t)(rows * row_bytes));
    if (!wf || !wq || !x || !y || !y1 || !yr || !nr || !act || !scratch || !w8) goto out;

    for (int64_t i = 0; i < rows * cols; i++) wf[i] = mm_uniform(&seed) * (1.0f + (float)(i % 7));
    for (int64_t r = 0; r < rows; r++) ref->t[mc->type].from_float(wf + r * cols, (char *)wq + r * row_bytes, cols);
    for (int64_t i = 0; i < max_tok * ldx; i++) x[i] = mm_uniform(&seed) * 2.0f;
    const hachi_mat Wf = {.type = mc->type, .rows = rows, .cols = cols, .data = wq, .row_bytes = row_bytes};
    hachi_mat W = Wf;        /* what matmul reads; Wf (the file's layout) feeds the reference */
    if (mc->x8) {
        if (!hachi_mat_x8_bytes(k, &W)) goto out;
        hachi_mat_to_x8(&W, w8);
        CHECK(W.x8 && W.data == w8);
    }
    {   /* the activation rows; then, where the GEMM takes them packed, the tiles of 16 tokens */
        const hachi_type_kernels *kt = &k->t[mc->type];
        size_t want = kt->vec_dot_type == HACHI_TYPE_F32 ? 0
            : ((size_t)hachi_row_size(kt->vec_dot_type, cols) + (kt->act_extra ? kt->act_extra(cols) : 0)) * (size_t)max_tok;
        if (want && kt->act_pack && max_tok >= kt->gemm_min && max_tok >= kt->act_pack_min)
            want = (want + 63) / 64 * 64 + (size_t)((max_tok + 15) / 16) * kt->act_pack_bytes(cols);
        CHECKF(scratch_bytes == want, "%s %s: scratch %zu bytes, want %zu", k->name, hachi_type_name(mc->type), scratch_bytes, want);
    }

    const float rel = MM_EPS;
    for (int ni = 0; ni < mc->n_n_toks; ni++) {
        const int n_tok = mc->n_toks[ni];
        mm_reference(ref, &Wf, x, ldx, n_tok, act, yr, nr);
        /* the 1-token calls, one at a time, on the 2-thread pool */
        for (int t = 0; t < n_tok; t++)
            hachi_matmul(pools[n_pools > 1 ? 1 : 0], k, &W, x + t * ldx, ldx, 1, y1 + t * ldy, ldy, scratch);
        for (int pi = 0; pi < n_pools; pi++) {
            for (int64_t i = 0; i < max_tok * ldy; i++) y[i] = NAN;
            uint64_t a0 = hachi_alloc_count();
            hachi_matmul(pools[pi], k, &W, x, ldx, n_tok, y, ldy, scratch);
            CHECK(hachi_alloc_count() == a0);
            int bad = 0, bad1 = 0, pad = 0;
            double worst = 0;
            int64_t worst_at = -1;
            for (int t = 0; t < n_tok; t++) {
                for (int64_t r = 0; r < rows; r++) {
                    float got = y[t * ldy + r], want = yr[t * rows + r], tol = rel * nr[t * rows + r] + 1e-6f;
                    double e = fabs((double)got - want) / tol;
                    if (!(e <= 1.0)) bad++;
                    if (!(e <= worst)) { worst = e; worst_at = t * rows + r; }
                    if (!(fabsf(got - y1[t * ldy + r]) <= 1e-5f * nr[t * rows + r] + 1e-6f)) bad1++;
                }
                for (int64_t r = rows; r < ldy; r++) pad += !isnan(y[t * ldy + r]);
            }
            CHECKF(bad == 0, "%s %s%s %lldx%lld n_tok %d pool %d: %d outputs off (worst %.2f x tol at %lld)",
                   k->name, hachi_type_name(mc->type), mc->x8 ? " x8" : "", (long long)rows, (long long)cols, n_tok,
                   hachi_pool_size(pools[pi]), bad, worst, (long long)worst_at);
            CHECKF(bad1 == 0, "%s %s %lldx%lld n_tok %d pool %d: %d outputs differ from 1-token calls",
                   k->name, hachi_type_name(mc->type), (long long)rows, (long long)cols, n_tok,
                   hachi_pool_size(pools[pi]), bad1);
            CHECKF(pad == 0, "%s %s: %d writes past rows in y", k->name, hachi_type_name(mc->type), pad);
        }
    }
    /* hachi_matmul_gather of rows in a shuffled order (some twice) gives the 1-token call's
     * outputs bit for bit (y1 still holds them for token 0) */
    {
        const int n = (int)HACHI_MIN(rows, 64);
        int32_t idx[64];
        float g[64];
        for (int i = 0; i < n; i++) idx[i] = (int32_t)((i * 37 + 11) % rows);
        const uint64_t a0 = hachi_alloc_count();
        hachi_matmul_gather(k, &W, x, idx, n, g, scratch);
        CHECK(hachi_alloc_count() == a0);
        int bad = 0;
        for (int i = 0; i < n; i++) {   /* bit for bit */
            uint32_t a, b;
            memcpy(&a, &g[i], 4);
            memcpy(&b, &y1[idx[i]], 4);
            bad += a != b;
        }
        CHECKF(bad == 0, "%s %s%s: %d of %d gathered rows differ from hachi_matmul's", k->name,
               hachi_type_name(mc->type), mc->x8 ? " x8" : "", bad, n);
    }
    /* hachi_mat_row is to_float of the row */
    {
        int64_t r = rows / 2;
        float *got = wf, *want = wf + cols;     /* wf (rows x cols floats) is free now */
        hachi_mat_row(k, &W, r, got);
        ref->t[mc->type].to_float((const char *)wq + r * row_bytes, want, cols);
        int bad = 0;
        for (int64_t c = 0; c < cols; c++) bad += !(fabsf(got[c] - want[c]) <= 1e-6f * fabsf(want[c]));
        CHECKF(bad == 0, "%s %s: mat_row differs in %d values", k->name, hachi_type_name(mc->type), bad);
    }
out:
    hachi_free(wf); hachi_free(wq); hachi_free(x); hachi_free(y); hachi_free(y1);
    hachi_free(yr); hachi_free(nr); hachi_free(act); hachi_free(scratch); hachi_free(w8);
}

TEST(matmul_vs_reference) {
    static const int all_toks[] = {1, 2, 5, 16, 17, 64, 100};
    static const int few_toks[] = {1, 3, 17, 40};
    static const uint32_t types[] = {HACHI_TYPE_F32, HACHI_TYPE_F16, HACHI_TYPE_Q8_0,
                                     HACHI_TYPE_Q4_0, HACHI_TYPE_Q4_K, HACHI_TYPE_Q5_K, HACHI_TYPE_Q6_K};
    const hachi_kernels *ref = hachi_kernels_ref();
    hachi_pool *pools[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        CHECK(hachi_pool_create(i + 1, &pools[i]) == HACHI_OK);
        if (!pools[i]) goto out;
    }
    for (int isa = 0; isa < HACHI_ISA_COUNT; isa++) {
        const hachi_kernels *k = hachi_kernels_get((hachi_isa)isa);
        if (!k) continue;
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            if (!k->t[types[ti]].vec_dot) { CHECKF(0, "%s lacks %s", k->name, hachi_type_name(types[ti])); continue; }
            const mm_case cases[] = {
                {types[ti], 37, 256, all_toks, 7, false},
                {types[ti], 13, 1536, all_toks, 7, false},
                {types[ti], 21, 2048 + 256, few_toks, 4, false},
                /* 51 blocks of 32: a last conversion chunk of 3 blocks, a partial group of
                 * activation extras (Q4_0) and the kernels' left-over blocks */
                {types[ti], 11, 1536 + 96, few_toks, 4, false},
                /* rows interleaved by 8 (where this ISA has the kernel for the type) */
                {types[ti], 40, 256, all_toks, 7, true},
                {types[ti], 24, 1536 + 96, few_toks, 4, true},
                {types[ti], 32, 2048 + 256, few_toks, 4, true},   /* 9 Q4_K blocks per row */
            };
            for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
                if (cases[ci].cols % hachi_type_info(types[ti])->blck_size) continue;
                if (cases[ci].x8 && !k->t[types[ti]].vec_dot_x8) continue;
                mm_run_case(k, ref, pools, 3, &cases[ci], 1000 + ti * 10 + ci);
            }
        }
    }
out:
    for (int i = 0; i < 3; i++) hachi_pool_free(pools[i]);
}

/* Prefill tiling: rows well past one L2 tile and n_tok not a multiple of 16, every table. */
TEST(matmul_prefill_tiles) {
    static const int toks[] = {33};
    const hachi_kernels *ref = hachi_kernels_ref();
    hachi_pool *pools[2] = {NULL, NULL};
    CHECK(hachi_pool_create(1, &pools[0]) == HACHI_OK);
    CHECK(hachi_pool_create(2, &pools[1]) == HACHI_OK);
    for (int isa = 0; isa < HACHI_ISA_COUNT && pools[0] && pools[1]; isa++) {
        const hachi_kernels *k = hachi_kernels_get((hachi_isa)isa);
        const mm_case mc = {HACHI_TYPE_Q8_0, 2501, 256, toks, 1, false};   /* 272 B/row: 963 rows a tile */
        if (k) mm_run_case(k, ref, pools, 2, &mc, 77);
    }
    hachi_pool_free(pools[0]);
    hachi_pool_free(pools[1]);
}

/* Bitwise: token t's outputs are exactly the same floats whether t is computed alone
 * (n_tok = 1, decode), inside any batch (n_tok 1..57: vec_dot_multi groups and the prefill
 * tiles) or on 1 or 2 threads. Speculative verify and prefill-then-decode depend on it. */
TEST(matmul_bitwise_batch) {
    enum { MAXT = 57 };   /* past the AMX GEMMs' largest threshold (48), with a partial tile */
    static const uint32_t types[] = {HACHI_TYPE_F32, HACHI_TYPE_F16, HACHI_TYPE_BF16, HACHI_TYPE_Q8_0,
                                     HACHI_TYPE_Q4_0, HACHI_TYPE_Q4_1, HACHI_TYPE_Q5_0, HACHI_TYPE_Q4_K,
                                     HACHI_TYPE_Q5_K, HACHI_TYPE_Q6_K};
    const int64_t rows = 70, cols = 768, ldx = cols + 1, ldy = rows + 2;
    const hachi_kernels *ref = hachi_kernels_ref();
    hachi_pool *pools[2] = {NULL, NULL};
    float *wf = hachi_malloc((size_t)(rows * cols) * sizeof(float));
    float *x = hachi_malloc((size_t)(MAXT * ldx) * sizeof(float));
    float *y1 = hachi_malloc((size_t)(MAXT * ldy) * sizeof(float));
    float *y = hachi_malloc((size_t)(MAXT * ldy) * sizeof(float));
    void *wq = hachi_aligned_alloc((size_t)rows * (size_t)cols * 4);
    void *w8 = hachi_aligned_alloc((size_t)rows * (size_t)cols * 4);
    void *scratch = hachi_aligned_alloc((size_t)MAXT * (size_t)cols * 4 + 64);
    CHECK(hachi_pool_create(1, &pools[0]) == HACHI_OK);
    CHECK(hachi_pool_create(2, &pools[1]) == HACHI_OK);
    if (!pools[0] || !pools[1] || !wf || !x || !y1 || !y || !wq || !w8 || !scratch) goto out;
    uint64_t seed = 4242;
    for (int64_t i = 0; i < rows * cols; i++) wf[i] = mm_uniform(&seed) * (1.0f + (float)(i % 5));
    for (int64_t i = 0; i < MAXT * ldx; i++) x[i] = mm_uniform(&seed) * 3.0f;
    for (int isa = 0; isa < HACHI_ISA_COUNT; isa++) {
        const hachi_kernels *k = hachi_kernels_get((hachi_isa)isa);
        if (!k) continue;
        for (size_t ti = 0; ti < 2 * (sizeof types / sizeof types[0]); ti++) {
            const uint32_t type = types[ti / 2];
            const bool x8 = ti % 2;     /* also rows interleaved by 8 (64 of the 70 rows) */
            if (!k->t[type].vec_dot || (x8 && !k->t[type].vec_dot_x8)) continue;
            const uint64_t rb = hachi_row_size(type, cols);
            for (int64_t r = 0; r < rows; r++) ref->t[type].from_float(wf + r * cols, (char *)wq + r * rb, cols);
            hachi_mat W = {.type = type, .rows = x8 ? rows / 8 * 8 : rows, .cols = cols, .data = wq, .row_bytes = rb};
            if (x8) hachi_mat_to_x8(&W, w8);
            for (int t = 0; t < MAXT; t++)
                hachi_matmul(pools[0], k, &W, x + t * ldx, ldx, 1, y1 + t * ldy, ldy, scratch);
            int bad = 0, bad_n = 0, bad_p = 0, bad_t = 0;
            int64_t bad_r = 0;
            for (int pi = 0; pi < 2 && !bad; pi++)
                for (int n_tok = 1; n_tok <= MAXT && !bad; n_tok++) {
                    hachi_matmul(pools[pi], k, &W, x, ldx, n_tok, y, ldy, scratch);
                    for (int t = 0; t < n_tok && !bad; t++)
                        for (int64_t r = 0; r < W.rows; r++)
                            if (memcmp(&y[t * ldy + r], &y1[t * ldy + r], sizeof(float))) {   // NOLINT(bugprone-suspicious-memory-comparison): bitwise equality is what is tested
                                bad = 1; bad_n = n_tok; bad_p = pi + 1; bad_t = t; bad_r = r;
                                break;
                            }
                }
            CHECKF(!bad, "%s %s%s: n_tok %d on %d thread(s), token %d row %lld: %.9g, alone %.9g (not bitwise equal)",
                   k->name, hachi_type_name(type), x8 ? " x8" : "", bad_n, bad_p, bad_t, (long long)bad_r,
                   bad ? y[bad_t * ldy + bad_r] : 0.0, bad ? y1[bad_t * ldy + bad_r] : 0.0);
        }
    }
out:
    hachi_pool_free(pools[0]);
    hachi_pool_free(pools[1]);
    hachi_free(wf); hachi_free(x); hachi_free(y1); hachi_free(y); hachi_free(wq); hachi_free(w8); hachi_free(scratch);
}

/* hachi_matmul_n: three matrices sharing x (rows 72, 8, 40: several chunks, one chunk, a chunk
 * shorter than the others) in one pool run give, output by output, hachi_matmul's bits, for
 * decode, verify and prefill sizes, 1 and 2 threads, every table, flat and interleaved rows. */
TEST(matmul_n_bitwise) {
    enum { NM = 3, MAXT = 49 };
    static const uint32_t types[] = {HACHI_TYPE_F16, HACHI_TYPE_Q8_0, HACHI_TYPE_Q4_0, HACHI_TYPE_Q4_K, HACHI_TYPE_Q6_K};
    static const int64_t rows[NM] = {72, 8, 40};
    static const int n_toks[] = {1, 3, 16, 17, 40, 49};
    const int64_t cols = 512, ldx = cols + 3;
    const hachi_kernels *ref = hachi_kernels_ref();
    hachi_pool *pools[2] = {NULL, NULL};
    float *wf = hachi_malloc((size_t)(72 * cols) * sizeof(float));
    float *x = hachi_malloc((size_t)(MAXT * ldx) * sizeof(float));
    float *y1[NM], *y[NM];
    void *wq[NM], *w8[NM];
    bool ok = wf && x;
    for (int m = 0; m < NM; m++) {
        y1[m] = hachi_malloc((size_t)(MAXT * (rows[m] + m)) * sizeof(float));
        y[m] = hachi_malloc((size_t)(MAXT * (rows[m] + m)) * sizeof(float));
        wq[m] = hachi_aligned_alloc((size_t)rows[m] * (size_t)cols * 4);
        w8[m] = hachi_aligned_alloc((size_t)rows[m] * (size_t)cols * 4);
        ok = ok && y1[m] && y[m] && wq[m] && w8[m];
    }
    void *scratch = hachi_aligned_alloc((size_t)MAXT * (size_t)cols * 4 + 64);
    CHECK(hachi_pool_create(1, &pools[0]) == HACHI_OK);
    CHECK(hachi_pool_create(2, &pools[1]) == HACHI_OK);
    if (!pools[0] || !pools[1] || !ok || !scratch) goto out;
    uint64_t seed = 77;
    for (int64_t i = 0; i < 72 * cols; i++) wf[i] = mm_uniform(&seed) * (1.0f + (float)(i % 7));
    for (int64_t i = 0; i < MAXT * ldx; i++) x[i] = mm_uniform(&seed) * 2.0f;
    for (int isa = 0; isa < HACHI_ISA_COUNT; isa++) {
        const hachi_kernels *k = hachi_kernels_get((hachi_isa)isa);
        if (!k) continue;
        for (size_t ti = 0; ti < 2 * (sizeof types / sizeof types[0]); ti++) {
            const uint32_t type = types[ti / 2];
            const bool x8 = ti % 2;
            if (!k->t[type].vec_dot || (x8 && !k->t[type].vec_dot_x8)) continue;
            const uint64_t rb = hachi_row_size(type, cols);
            hachi_mat W[NM];
            hachi_matmul_out o[NM];
            for (int m = 0; m < NM; m++) {
                for (int64_t r = 0; r < rows[m]; r++)   /* matrix m: rows m, m + 1, .. of wf */
                    ref->t[type].from_float(wf + (r + m) % 72 * cols, (char *)wq[m] + r * rb, cols);
                W[m] = (hachi_mat){.type = type, .rows = rows[m], .cols = cols, .data = wq[m], .row_bytes = rb};
                if (x8) hachi_mat_to_x8(&W[m], w8[m]);
                o[m] = (hachi_matmul_out){&W[m], y[m], rows[m] + m};
            }
            CHECK(hachi_matmul_fusable(&W[0], &W[2]));
            int bad = 0;
            for (size_t ni = 0; ni < sizeof n_toks / sizeof n_toks[0] && !bad; ni++)
                for (int pi = 0; pi < 2 && !bad; pi++) {
                    const int n_tok = n_toks[ni];
                    for (int m = 0; m < NM; m++)
                        hachi_matmul(pools[pi], k, &W[m], x, ldx, n_tok, y1[m], o[m].ldy, scratch);
                    hachi_matmul_n(pools[pi], k, o, NM, x, ldx, n_tok, scratch);
                    for (int m = 0; m < NM && !bad; m++)
                        for (int t = 0; t < n_tok && !bad; t++)
                            if (memcmp(y[m] + t * o[m].ldy, y1[m] + t * o[m].ldy, (size_t)rows[m] * sizeof(float))) {   // NOLINT(bugprone-suspicious-memory-comparison): bitwise equality is what is tested
                                bad = 1;
                                CHECKF(0, "%s %s%s: matmul_n output %d, n_tok %d, %d thread(s), token %d differs from hachi_matmul",
                                       k->name, hachi_type_name(type), x8 ? " x8" : "", m, n_tok, pi + 1, t);
                            }
                }
        }
    }
    {   /* different types or widths do not share a run */
        hachi_mat a = {.type = HACHI_TYPE_Q4_0, .rows = 8, .cols = 512, .data = wf, .row_bytes = 288};
        hachi_mat b = a, c = a;
        b.type = HACHI_TYPE_Q8_0;
        c.cols = 1024;
        CHECK(hachi_matmul_fusable(&a, &a));
        CHECK(!hachi_matmul_fusable(&a, &b));
        CHECK(!hachi_matmul_fusable(&a, &c));
    }
out:
    hachi_pool_free(pools[0]);
    hachi_pool_free(pools[1]);
    for (int m = 0; m < NM; m++) { hachi_free(y1[m]); hachi_free(y[m]); hachi_free(wq[m]); hachi_free(w8[m]); }
    hachi_free(wf); hachi_free(x); hachi_free(scratch);
}

/* The pages of map (R of them, R <= 64) in the page cache: in[r] & 1, and how many. */
static int resident_pages(void *map, int R, unsigned char *in) {
    CHECK(mincore(map, (size_t)R * (size_t)sysconf(_SC_PAGESIZE), in) == 0);
    int n = 0;
    for (int r = 0; r < R; r++) n += in[r] & 1;
    return n;
}

/* R pages (R <= 64) written to the test's file name and mapped read-only, their page cache
 * dropped (NULL when that fails: checked). *cached: the pages still resident after the drop (a
 * file system that keeps them: the caller skips). */
static void *cold_pages(const char *name, int R, int *cached) {
    const long page = sysconf(_SC_PAGESIZE);
    const char *path = test_tmp(name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return NULL;
    float *row = hachi_malloc((size_t)page);
    for (long i = 0; i < page / 4; i++) row[i] = (float)i;
    for (int r = 0; r < R; r++) CHECK(fwrite(row, (size_t)page, 1, f) == 1);
    hachi_free(row);
    CHECK(fflush(f) == 0 && fsync(fileno(f)) == 0);
    fclose(f);
    const int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    if (fd < 0) return NULL;
    void *map = mmap(NULL, (size_t)(R * page), PROT_READ, MAP_PRIVATE, fd, 0);
    CHECK(map != MAP_FAILED);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    if (map == MAP_FAILED) return NULL;
    unsigned char in[64];
    *cached = resident_pages(map, R, in);
    if (*cached) munmap(map, (size_t)(R * page));
    return *cached ? NULL : map;
}

/* hachi_mat_read_ahead reads all the rows of a matrix in the file, chunk by chunk (Linux reads at
 * most its readahead window per request), and stops at once when asked to; a model's row-lookup
 * tables get it at load in a thread (hachi_model_load), joined by hachi_model_free. */
TEST(mat_read_ahead) {
    const long page = sysconf(_SC_PAGESIZE);
    enum { R = 64 };
    int resident = 0;
    void *map = cold_pages("read_ahead.bin", R, &resident);
    if (resident) SKIP("this file system kept %d of the file's %d pages cached after POSIX_FADV_DONTNEED", resident, R);
    if (!map) return;
    unsigned char in[R];
    hachi_mat W = {.type = HACHI_TYPE_F32, .rows = R, .cols = page / 4, .data = map, .row_bytes = (uint64_t)page};
    atomic_bool stop;
    atomic_init(&stop, true);
    CHECK(!hachi_mat_read_ahead(&W, 4 * (size_t)page, &stop));   /* stopped before its first request */
    atomic_store(&stop, false);
    CHECK(hachi_mat_read_ahead(&W, 4 * (size_t)page, &stop));
    for (int i = 0; i < 1000 && resident < R; i++) {
        resident = resident_pages(map, R, in);
        if (resident < R) usleep(10000);
    }
    munmap(map, (size_t)(R * page));
    if (!resident) SKIP("madvise(MADV_WILLNEED) read nothing here within 10 s (an emulator?)");
    CHECKF(resident == R, "%d of %d pages resident after a read-ahead in chunks of 4 pages", resident, R);
}

/* hachi_mat_prefetch_rows starts reading the asked rows of a matrix still in its file, and only
 * them: a file of 64 one-page rows, its pages dropped from the page cache (posix_fadvise), then
 * mincore until the asked rows' pages are resident (the reads are asynchronous: up to 10 s). */
TEST(mat_prefetch_rows) {
    const long page = sysconf(_SC_PAGESIZE);
    const int R = 64;
    int resident = 0;
    void *map = cold_pages("prefetch.bin", R, &resident);
    if (resident) SKIP("this file system kept %d of the file's %d pages cached after POSIX_FADV_DONTNEED", resident, R);
    if (!map) return;
    unsigned char in[64];
    hachi_mat W = {.type = HACHI_TYPE_F32, .rows = R, .cols = page / 4, .data = map, .row_bytes = (uint64_t)page};
    W.x8 = true;   /* interleaved rows live in memory: nothing to read */
    hachi_mat_prefetch_rows(&W, (const int32_t[]){5}, 1);
    W.x8 = false;
    const int32_t rows[] = {3, 40, 40, -1, 64, 10, 1 << 30};
    hachi_mat_prefetch_rows(&W, rows, (int)(sizeof rows / sizeof rows[0]));
    /* a probe: the test's own madvise of page 50 (an emulator such as qemu-user ignores madvise) */
    madvise((char *)map + 50 * page, (size_t)page, MADV_WILLNEED);
    bool asked = false, probe = false;
    for (int i = 0; i < 1000 && !(asked && probe); i++) {
        resident = resident_pages(map, R, in);
        probe = in[50] & 1;
        asked = (in[3] & in[10] & in[40] & 1) != 0;
        if (!(asked && probe)) usleep(10000);
    }
    if (!probe) {
        munmap(map, (size_t)(R * page));
        SKIP("madvise(MADV_WILLNEED) read nothing here within 10 s (an emulator?)");
    }
    CHECKF(asked, "rows 3, 10, 40 not read after 10 s: %d %d %d", in[3] & 1, in[10] & 1, in[40] & 1);
    CHECKF(resident == 4 && !(in[5] & 1), "%d pages resident (row 5: %d), 3 asked for and the probe", resident, in[5] & 1);
    munmap(map, (size_t)(R * page));
}
