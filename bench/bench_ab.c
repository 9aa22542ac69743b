/* bench_ab: two versions of a kernel compared inside one process, so that the minute-to-minute
 * swings of a shared VM's memory and clock (bench/RESULTS.md: 2x between runs, 5-10% between two
 * reads of one round) fall on both alike. Put the new code and the old behind the global
 *     __attribute__((visibility("default"))) int hachi_exp_flag = 1;   // 1: new, 0: old
 * in a scratch build of the library (never in the tree), link this file against it, and it runs
 * the same work with the flag 0 and 1 in turn, the order turning round by round:
 *   forward K  (K = 1..16): forwards of K tokens at depth 130, or the depth given after the
 *              rounds (all K logits rows kept), 8 a side;
 *   prefill N  (N = 1..4096): an eval of N tokens from position 0, once a side.
 * It prints new/old time per round as a median with quartiles, and how many rounds the new side
 * won. Linked against a normal build, the flag below (weak) is the only one and both sides run
 * the same code: a check of the method (medians within 1-2% of 1). Repeat a run before believing
 * it: on the 2-core VM one run's 0.972 (14 wins of 16) was 1.002 the next time.
 *
 * Build by hand, after `make BUILD=/tmp/bx build/...` of the scratch library:
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc -pthread bench/bench_ab.c \
 *       /tmp/bx/libhachi.a -o /tmp/bench_ab -lm
 * Run: /tmp/bench_ab MODEL.gguf forward|prefill K|N [rounds=30] [depth=130]   (2 threads) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hachi.h"
#include "util.h"

__attribute__((weak)) int hachi_exp_flag = 1;

enum { ROUNDS_MAX = 400, STEPS = 8 };

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 4 || (strcmp(argv[2], "forward") && strcmp(argv[2], "prefill"))) {
        fprintf(stderr, "usage: bench_ab MODEL.gguf forward|prefill K|N [rounds] [depth]\n");
        return 2;
    }
    const bool prefill = !strcmp(argv[2], "prefill");
    const int k = atoi(argv[3]), rounds = argc > 4 ? atoi(argv[4]) : 30, depth = argc > 5 ? atoi(argv[5]) : 130;
    if (k < 1 || k > (prefill ? 4096 : 16) || rounds < 1 || rounds > ROUNDS_MAX || depth < 1 || depth > (1 << 20)) {
        fprintf(stderr, "bench_ab: K 1..16 (forward), N 1..4096 (prefill), rounds 1..%d, depth 1..2^20\n", ROUNDS_MAX);
        return 2;
    }
    hachi_model *m;
    hachi_model_params mp = hachi_model_default_params();
    hachi_status st = hachi_model_load(argv[1], &mp, &m);
    if (st) {
        fprintf(stderr, "bench_ab: %s: %s\n", argv[1], hachi_status_str(st));
        return 1;
    }
    hachi_session_params sp = hachi_session_default_params();
    sp.n_threads = 2;
    while (sp.n_ctx < (prefill ? k : depth + k)) sp.n_ctx = sp.n_ctx ? 2 * sp.n_ctx : HACHI_CTX_MIN;
    hachi_session *s;
    if ((st = hachi_session_create(m, &sp, &s))) {
        fprintf(stderr, "bench_ab: session: %s\n", hachi_status_str(st));
        return 1;
    }
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)k);
    float *logits = prefill ? NULL : malloc(sizeof(float) * (size_t)k * (size_t)hachi_model_n_vocab(m));
    if (!tok || (!prefill && !logits)) return 1;
    for (int i = 0; i < k; i++) tok[i] = (int32_t)((1000 + (int64_t)i * 7919) % hachi_model_n_vocab(m));
    if (!prefill) hachi_session_fill_synthetic(s, depth, 7);

    static double t[2][ROUNDS_MAX], ratio[ROUNDS_MAX];
    for (int r = 0; r < rounds; r++)
        for (int q = 0; q < 2; q++) {
            const int side = (q + r) % 2;
            hachi_exp_flag = side;
            double ms = 0;
            if (prefill) {
                hachi_session_rewind(s, 0);
                const double t0 = hachi_time_ms();
                st = hachi_session_eval(s, tok, k, NULL);
                ms = hachi_time_ms() - t0;
            } else {
                hachi_session_rewind(s, depth);
                st = hachi_session_eval(s, tok, k, logits);   /* warm the side's code */
                const double t0 = hachi_time_ms();
                for (int i = 0; i < STEPS && !st; i++) {
                    hachi_session_rewind(s, depth);
                    st = hachi_session_eval(s, tok, k, logits);
                }
                ms = (hachi_time_ms() - t0) / STEPS;
            }
            if (st) {
                fprintf(stderr, "bench_ab: eval: %s\n", hachi_status_str(st));
                return 1;
            }
            t[side][r] = ms;
        }
    double sum[2] = {0, 0};
    int wins = 0;
    for (int r = 0; r < rounds; r++) {
        ratio[r] = t[1][r] / t[0][r];
        sum[0] += t[0][r];
        sum[1] += t[1][r];
        wins += ratio[r] < 1.0;
    }
    qsort(ratio, (size_t)rounds, sizeof(double), cmp_double);
    printf("%s %d, %d rounds: old %.2f ms, new %.2f ms (means); new/old median %.3f, quartiles %.3f-%.3f; new faster in %d of %d\n",
           argv[2], k, rounds, sum[0] / rounds, sum[1] / rounds, ratio[rounds / 2], ratio[rounds / 4], ratio[3 * rounds / 4],
           wins, rounds);
    free(tok);
    free(logits);
    hachi_session_free(s);
    hachi_model_free(m);
    return 0;
}
