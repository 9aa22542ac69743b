/* bench_matmul: ms and GB/s of one E2B FFN-shaped matmul (W = 6144 x 1536,
 * Q4_0 by default) at n_tok = 1, 8, 16 (and 64, prefill tiling), with 1 and
 * 2 threads, against the machine's measured read bandwidth. "cold" rotates
 * through copies of W totalling > 1 GiB so weights come from DRAM, as in
 * decode; "hot" reuses one copy (cache-resident where it fits).
 *
 * Build by hand, after `make` (links the kernels with their ISA flags):
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc -pthread bench/bench_matmul.c \
 *       build/libhachi.a -o /tmp/bench_matmul -lm
 * Run: /tmp/bench_matmul [type=q4_0] [rows=6144] [cols=1536] [max_threads=2] [only_n_tok: 1..64] [x8=1]
 * x8: rows interleaved 8 by 8 as the model loader does (0: the file's layout).
 * ns/block/thread: the best time per weight block and thread (hot rows of a small W, one
 * thread: the in-cache cost of the dot kernel, e.g. `/tmp/bench_matmul q4_0 128 1536 1 1`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "matmul.h"
#include "util.h"

/* 96 MB of copies were partly cache-resident on a Zen 5 VM (an E2B FFN matmul "cold" at 79 GB/s
 * against 58 with 1 GiB, on 2 threads): its last-level cache holds more than lscpu says */
#define COLD_BYTES (1024u << 20)
#define REPS 7

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct { const uint64_t *p; size_t n; uint64_t out[64]; } bw_ctx;

static void bw_task(void *arg, int ith, int nth) {
    bw_ctx *c = arg;
    int64_t lo, hi;
    hachi_split((int64_t)c->n, 64, ith, nth, &lo, &hi);
    uint64_t a = 0, b = 0, d = 0, e = 0;
    for (int64_t i = lo; i + 4 <= hi; i += 4) { a += c->p[i]; b ^= c->p[i + 1]; d += c->p[i + 2]; e ^= c->p[i + 3]; }
    c->out[ith] = a + b + d + e;
}

/* Read bandwidth in GB/s with the pool (median of REPS passes over 512 MB). */
static double read_bandwidth(hachi_pool *pool, const uint64_t *buf, size_t n) {
    bw_ctx c = {buf, n, {0}};
    double t[REPS];
    hachi_pool_run(pool, bw_task, &c);
    for (int r = 0; r < REPS; r++) {
        double t0 = hachi_time_ms();
        hachi_pool_run(pool, bw_task, &c);
        t[r] = hachi_time_ms() - t0;
    }
    qsort(t, REPS, sizeof t[0], cmp_double);
    return (double)n * 8 / (t[REPS / 2] * 1e6);
}

int main(int argc, char **argv) {
    int type = argc > 1 ? hachi_type_from_name(argv[1]) : HACHI_TYPE_Q4_0;
    int64_t rows = argc > 2 ? atoll(argv[2]) : 6144, cols = argc > 3 ? atoll(argv[3]) : 1536;
    int max_threads = argc > 4 ? atoi(argv[4]) : 2, only_tok = argc > 5 ? atoi(argv[5]) : 0;
    int want_x8 = argc > 6 ? atoi(argv[6]) : 1;
    if (only_tok < 0 || only_tok > 64) { fprintf(stderr, "bench_matmul: only_n_tok must be 0..64\n"); return 1; }
    const hachi_kernels *k = hachi_kernels_best();
    if (type < 0 || !k->t[type].vec_dot) { fprintf(stderr, "bench_matmul: type not runnable\n"); return 1; }
    uint64_t row_bytes = hachi_row_size((uint32_t)type, cols);
    size_t mat_bytes = (size_t)(rows * (int64_t)row_bytes);
    int n_copies = (int)(COLD_BYTES / mat_bytes) + 1;
    hachi_mat W0 = {.type = (uint32_t)type, .rows = rows, .cols = cols, .row_bytes = row_bytes, .data = ""};
    bool x8 = want_x8 && hachi_mat_x8_bytes(k, &W0);
    printf("kernels %s, W %lld x %lld %s%s (%.2f MB), %d copies for cold runs, physical cores %d\n", k->name,
           (long long)rows, (long long)cols, hachi_type_name((uint32_t)type), x8 ? " x8" : "", mat_bytes / 1e6,
           n_copies, hachi_physical_cores());

    /* weights: quantize one random matrix, replicate */
    float *wf = malloc((size_t)cols * sizeof(float));
    char *w = hachi_aligned_alloc(mat_bytes * (size_t)n_copies);
    enum { MAX_TOK = 64 };
    float *x = malloc((size_t)MAX_TOK * (size_t)cols * sizeof(float));
    float *y = malloc((size_t)MAX_TOK * (size_t)rows * sizeof(float));
    void *scratch = hachi_aligned_alloc(hachi_matmul_scratch_bytes(k, (uint32_t)type, cols, MAX_TOK) + 64);
    size_t bw_n = (512u << 20) / 8;
    uint64_t *bw = malloc(bw_n * 8);
    if (!wf || !w || !x || !y || !scratch || !bw) { fprintf(stderr, "bench_matmul: out of memory\n"); return 1; }
    uint64_t s = 1;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) { s = s * 6364136223846793005ull + 1; wf[c] = (float)((s >> 40) % 2001) / 1000.0f - 1.0f; }
        k->t[type].from_float(wf, w + r * row_bytes, cols);
    }
    if (x8) {
        char *tmp = malloc(mat_bytes);
        if (!tmp) { fprintf(stderr, "bench_matmul: out of memory\n"); return 1; }
        hachi_mat W = W0;
        W.data = w;
        hachi_mat_to_x8(&W, tmp);
        memcpy(w, tmp, mat_bytes);
        free(tmp);
    }
    for (int i = 1; i < n_copies; i++) memcpy(w + i * mat_bytes, w, mat_bytes);
    for (int64_t i = 0; i < MAX_TOK * cols; i++) x[i] = (float)(i % 17) / 17.0f - 0.5f;
    for (size_t i = 0; i < bw_n; i++) bw[i] = i;

    static const int toks[] = {1, 2, 4, 8, 16, 64};
    for (int nth = 1; nth <= max_threads; nth++) {
        hachi_pool *pool = NULL;
        if (hachi_pool_create(nth, &pool) != HACHI_OK) { fprintf(stderr, "%s\n", hachi_last_error()); return 1; }
        double gbs_read = read_bandwidth(pool, bw, bw_n);
        printf("threads %d: read bandwidth %.1f GB/s\n", nth, gbs_read);
        for (size_t ti = 0; ti < (only_tok ? 1 : sizeof toks / sizeof toks[0]); ti++) {
            int n_tok = only_tok ? only_tok : toks[ti];
            for (int cold = 1; cold >= 0; cold--) {
                int iters = cold ? n_copies : 16;
                double t[REPS];
                for (int r = -1; r < REPS; r++) {
                    double t0 = hachi_time_ms();
                    for (int i = 0; i < iters; i++) {
                        hachi_mat W = W0;
                        W.data = w + (size_t)(cold ? i : 0) * mat_bytes;
                        W.x8 = x8;
                        hachi_matmul(pool, k, &W, x, cols, n_tok, y, rows, scratch);
                    }
                    if (r >= 0) t[r] = (hachi_time_ms() - t0) / iters;
                }
                qsort(t, REPS, sizeof t[0], cmp_double);
                double ms = t[REPS / 2], gbs = mat_bytes / (ms * 1e6);
                double nblk = (double)rows * (double)(cols / hachi_type_info((uint32_t)type)->blck_size);
                printf("  n_tok %3d %s: %7.3f ms/call (min %.3f, max %.3f)  %6.1f GB/s of weights  %5.1f%% of read bw"
                       "  %.3f ms/token  %.3f ns/block/thread (best)\n", n_tok, cold ? "cold" : "hot ", ms, t[0], t[REPS - 1],
                       gbs, 100 * gbs / gbs_read, ms / n_tok, t[0] * 1e6 * nth / nblk);
            }
        }
        hachi_pool_free(pool);
    }
    hachi_free(w); hachi_free(scratch);
    free(wf); free(x); free(y); free(bw);
    return 0;
}
