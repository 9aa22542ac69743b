/* bench_pattern: how close a decode step comes to a plain read of its own weights, in its own
 * order. Per round, in one process: the read probe (hachi_measure_read_bandwidth, 256 MiB, best
 * of 3) before and after; "pattern": the step's matrices in forward order (per layer q/k/v, o,
 * gate/up, down, the per-layer input gate and projection; then the head), one pool run per group
 * as the step runs them, each thread summing a contiguous half of each matrix as the probe sums
 * its slice; "no barriers": the same bytes in one pool run; "one pass": the interleaved weights'
 * map in one pool run; the matmuls alone (hachi_matmul_n over each group, one token: layers and
 * head apart); 8 decode steps at depth 128. All as GB/s of the weights read. The three plain reads
 * take turns going first (on this VM whichever of two reads runs second in a round gained 5-10%:
 * bench/RESULTS.md, 2026-12-05).
 *
 * Build by hand, after `make`:
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc -pthread bench/bench_pattern.c \
 *       build/libhachi.a -o /tmp/bench_pattern -lm
 * Run: /tmp/bench_pattern MODEL.gguf [rounds=5]   (2 threads; a gemma4 or llama GGUF) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model.h"
#include "threads.h"
#include "util.h"

enum { GROUP_MAX = 3, GROUPS_MAX = 4096 };
typedef struct {
    const hachi_mat *W[GROUP_MAX];
    int n;
} group_t;

static group_t groups[GROUPS_MAX];
static int n_groups;
static size_t layer_bytes, head_bytes;
static uint64_t sink[64][8];

static size_t mat_bytes(const hachi_mat *W) { return (size_t)W->rows * W->row_bytes; }

/* The next groups from a, b, c (b, c may be NULL): those with weights, one pool run for those that
 * the step runs in one (hachi_matmul_fusable with the first), one run each for the others. */
static void group(const hachi_mat *a, const hachi_mat *b, const hachi_mat *c) {
    const hachi_mat *w[GROUP_MAX] = {a, b, c};
    group_t *g = &groups[n_groups];
    for (int i = 0; i < GROUP_MAX && n_groups < GROUPS_MAX - 1; i++) {
        if (!w[i] || !w[i]->data) continue;
        if (g->n && !hachi_matmul_fusable(g->W[0], w[i])) g = &groups[++n_groups];
        g->W[g->n++] = w[i];
    }
    if (g->n) n_groups++;
}

/* thread ith's contiguous share of [p, p + bytes), aligned down to 32 bytes, read as the probe reads */
static uint64_t sum_share(const void *p, size_t bytes, int ith, int nth) {
    int64_t lo, hi;
    hachi_split((int64_t)bytes, 4096, ith, nth, &lo, &hi);
    const uintptr_t a = ((uintptr_t)p + (uintptr_t)lo) & ~(uintptr_t)31;
    return hachi_read_sum((const void *)a, (hi - lo) / 32);
}

static void read_group(void *ctx, int ith, int nth) {
    const group_t *g = ctx;
    for (int m = 0; m < g->n; m++) sink[ith][0] += sum_share(g->W[m]->data, mat_bytes(g->W[m]), ith, nth);
}

static void read_all(void *ctx, int ith, int nth) {
    (void)ctx;
    for (int i = 0; i < n_groups; i++) read_group(&groups[i], ith, nth);
}

static void read_map(void *ctx, int ith, int nth) {
    const hachi_model *m = ctx;
    sink[ith][1] += sum_share(m->x8, m->x8_bytes, ith, nth);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_pattern MODEL.gguf [rounds]\n");
        return 2;
    }
    const int rounds = argc > 2 ? atoi(argv[2]) : 5;
    hachi_model *m;
    hachi_model_params mp = hachi_model_default_params();
    const hachi_status st = hachi_model_load(argv[1], &mp, &m);
    if (st) {
        fprintf(stderr, "bench_pattern: %s: %s\n", argv[1], hachi_status_str(st));
        return 1;
    }
    for (int l = 0; l < m->n_layer; l++) {
        const hachi_layer *L = &m->layers[l];
        group(&L->wq, &L->wk, &L->wv);
        group(&L->wo, NULL, NULL);
        group(&L->w_gate, &L->w_up, NULL);
        group(&L->w_down, NULL, NULL);
        group(&L->inp_gate, NULL, NULL);
        group(&L->proj, NULL, NULL);
    }
    group(&m->output, NULL, NULL);
    for (int i = 0; i < n_groups; i++)
        for (int k = 0; k < groups[i].n; k++) *(i == n_groups - 1 ? &head_bytes : &layer_bytes) += mat_bytes(groups[i].W[k]);
    const size_t total = layer_bytes + head_bytes;
    printf("%d groups, %.1f MB (layers %.1f, head %.1f; the model reads %.1f MB a token), interleaved map %.1f MB\n",
           n_groups, total / 1e6, layer_bytes / 1e6, head_bytes / 1e6, m->weight_bytes / 1e6, m->x8_bytes / 1e6);

    hachi_pool *pool;
    hachi_session *s;
    hachi_session_params sp = hachi_session_default_params();
    sp.n_threads = 2;
    if (hachi_pool_create(2, &pool) || hachi_session_create(m, &sp, &s)) return 1;
    int64_t max_rows = 1, max_cols = 1;
    size_t scratch_bytes = 1;
    for (int i = 0; i < n_groups; i++)
        for (int j = 0; j < groups[i].n; j++) {
            const hachi_mat *W = groups[i].W[j];
            max_rows = W->rows > max_rows ? W->rows : max_rows;
            max_cols = W->cols > max_cols ? W->cols : max_cols;
            const size_t sb = hachi_matmul_scratch_bytes(m->kern, W->type, W->cols, 1);
            scratch_bytes = sb > scratch_bytes ? sb : scratch_bytes;
        }
    float *x = calloc((size_t)max_cols, sizeof(float)), *y = calloc((size_t)GROUP_MAX * max_rows, sizeof(float));
    void *scratch = hachi_aligned_alloc(scratch_bytes);
    if (!x || !y || !scratch) return 1;
    for (int64_t i = 0; i < max_cols; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    hachi_session_fill_synthetic(s, 128, 7);
    int32_t tok = 1234;
    for (int i = 0; i < 3; i++) hachi_session_eval(s, &tok, 1, NULL);

    printf("round  probes GB/s   pattern  no-barriers  one-pass  matmuls: layers  head   decode ms  GB/s  of probes  of pattern\n");
    for (int r = 0; r < rounds; r++) {
        const double p0 = hachi_measure_read_bandwidth(2, (size_t)256 << 20, 3);
        double reads[3];   /* pattern, no barriers, one pass: which goes first turns round by round */
        for (int q = 0; q < 3; q++) {
            const int k = (q + r) % 3;
            const double t = hachi_time_ms();
            for (int rep = 0; rep < 4; rep++) {
                if (k == 0)
                    for (int i = 0; i < n_groups; i++) hachi_pool_run(pool, read_group, &groups[i]);
                else hachi_pool_run(pool, k == 1 ? read_all : read_map, k == 1 ? NULL : m);
            }
            const double bytes = k == 2 ? (double)m->x8_bytes : (double)total;
            reads[k] = bytes > 0 ? 4.0 * bytes / ((hachi_time_ms() - t) * 1e6) : 0.0;
        }
        const double pattern = reads[0], all = reads[1], map = reads[2];
        double ms_layers = 0, ms_head = 0;
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < n_groups; i++) {
                hachi_matmul_out o[GROUP_MAX];
                for (int j = 0; j < groups[i].n; j++) o[j] = (hachi_matmul_out){groups[i].W[j], y + (size_t)j * max_rows, 0};
                const double a = hachi_time_ms();
                hachi_matmul_n(pool, m->kern, o, groups[i].n, x, 0, 1, scratch);
                *(i == n_groups - 1 ? &ms_head : &ms_layers) += hachi_time_ms() - a;
            }
        const double t = hachi_time_ms();
        for (int k = 0; k < 8; k++) {
            hachi_session_rewind(s, 130);
            hachi_session_eval(s, &tok, 1, NULL);
        }
        const double step = (hachi_time_ms() - t) / 8, dec = m->weight_bytes / (step * 1e6);
        const double p1 = hachi_measure_read_bandwidth(2, (size_t)256 << 20, 3), pm = (p0 + p1) / 2;
        printf("%5d  %5.1f / %5.1f  %7.1f  %11.1f  %8.1f  %15.1f  %5.1f  %10.2f  %4.1f  %8.0f%%  %9.0f%%\n", r, p0, p1, pattern,
               all, map, 4.0 * layer_bytes / (ms_layers * 1e6), 4.0 * head_bytes / (ms_head * 1e6), step, dec,
               100 * dec / pm, 100 * dec / pattern);
        fflush(stdout);
    }
    hachi_session_free(s);
    hachi_pool_free(pool);
    hachi_free(scratch);
    free(x);
    free(y);
    hachi_model_free(m);
    return 0;
}
