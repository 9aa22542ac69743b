/* bench_attn: G FMA/s of the attention tile kernels of this CPU's table (kernels.h
 * attn_scores_f16, attn_values_f16, attn_values_f16_hot) on one thread, for Gemma 4's
 * full-attention shape (8 query heads per K/V head, head dim 512) over tiles of 128 keys
 * (attn.c's ATTN_TILE_KEYS): "cache" reuses one tile (in L2, as the tokens of a prefill group
 * after the first read it), "dram" walks tiles through 256 MB as a decode step reads them: the
 * K rows one after another in the first half, the V rows in the second (a cache's two arrays),
 * so a kernel's prefetch past its tile lands on the next tile's rows.
 *
 * Build by hand, after `make`:
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc -pthread bench/bench_attn.c \
 *       build/libhachi.a -o /tmp/bench_attn -lm
 * Run: /tmp/bench_attn [rounds=5] [head_dim=512] [f16|int8]   ($HACHI_ISA picks a table)
 * f16 also times the f32-row entries (kernels.h attn_scores_f32, attn_values_f32) over the cache
 * tile converted once, as attn.c runs a tile that several tokens of a forward read.
 * int8: the int8 K/V entries (attn_scores_i8; a tile's values as kv.c runs them: attn_vmax_i8,
 * attn_values_i8 or attn_values_i8_hot, attn_flush_i8) over the same bytes read as int8 rows of
 * twice the length' worth, with a scale per row; where the table has the int8 matrix products
 * (kernels.h attn_i8_*), also those of 128 queries (a prefill group's 16 tokens x 8 heads) against
 * the cache tile: the dots, and the value sums with the values packed per call, in G MAC/s. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/kernels.h"
#include "util.h"

#define G 8
#define NK 128
#define DRAM_BYTES ((size_t)256 << 20)

typedef void (*values_fn)(int64_t, int, const uint16_t *, int64_t, const float *, int, float *);
typedef void (*values_i8_fn)(int64_t, int, const int8_t *, int64_t, const float *, int64_t, const float *, int,
                             const float *, int32_t *, bool);

static const float *scales;   /* int8: one scale per row */
static hachi_query_i8 qi;     /* int8: the queries quantized */

static void scores(const hachi_kernels *k, bool i8, int hd, const uint16_t *rows, const float *q, float *s) {
    if (i8) k->attn_scores_i8(hd, NK, (const int8_t *)rows, hd, scales, 1, &qi, G, s);
    else k->attn_scores_f16(hd, NK, rows, hd, q, G, s);
}

static void values(const hachi_kernels *k, bool i8, bool hot, int hd, const uint16_t *rows, const float *p, float *o) {
    if (i8) {
        static int32_t acc[G * 1024];
        float m[G] = {0}, r[G], u[G];
        const values_i8_fn f = hot && k->attn_values_i8_hot ? k->attn_values_i8_hot : k->attn_values_i8;
        k->attn_vmax_i8(NK, scales, 1, p, G, m);
        for (int h = 0; h < G; h++) {
            r[h] = m[h] > 0 ? 32767.0f / m[h] : 0.0f;
            u[h] = m[h] / 32767.0f;
        }
        f(hd, NK, (const int8_t *)rows, hd, scales, 1, p, G, r, acc, true);
        k->attn_flush_i8(hd, G, acc, u, o);
    } else {
        const values_fn f = hot && k->attn_values_f16_hot ? k->attn_values_f16_hot : k->attn_values_f16;
        f(hd, NK, rows, hd, p, G, o);
    }
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 5, hd = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 512;
    const bool i8 = argc > 3 && !strcmp(argv[3], "int8");
    const hachi_kernels *k = hachi_kernels_best();
    if (rounds < 1 || hd < 32 || hd % 32) { fprintf(stderr, "usage: bench_attn [rounds] [head_dim: a multiple of 32]\n"); return 2; }
    const size_t tile = (size_t)NK * hd, tiles = DRAM_BYTES / (tile * 2 * sizeof(uint16_t));
    uint16_t *kv = malloc(DRAM_BYTES);
    float *q = malloc(sizeof *q * G * hd), *s = malloc(sizeof *s * NK * G), *o = calloc((size_t)G * hd, sizeof *o);
    float *sc = malloc(sizeof *sc * NK);
    if (!kv || !q || !s || !o || !sc) {
        fprintf(stderr, "out of memory\n");
        free(kv); free(q); free(s); free(o); free(sc);
        return 1;
    }
    for (int j = 0; j < NK; j++) sc[j] = 0.01f;
    scales = sc;
    for (size_t i = 0; i < DRAM_BYTES / sizeof(uint16_t); i++) kv[i] = hachi_f32_to_f16((float)(i % 61) / 61.0f - 0.5f);
    for (int i = 0; i < G * hd; i++) q[i] = (float)(i % 7) * 0.01f;
    static int8_t q8[G * 1024];
    static float qf[G * 1024], qs[G];
    for (int i = 0; i < G * hd && i < G * 1024; i++) qf[i] = q8[i] = (int8_t)(i % 7 * 18);
    for (int h = 0; h < G; h++) qs[h] = 0.06f / 127;
    qi = (hachi_query_i8){q8, qf, qs};
    for (int i = 0; i < NK * G; i++) s[i] = 1.0f / (float)(1 + i % 5);
    printf("kernels %s, %s K/V, %d heads x %d dims, tiles of %d keys; G FMA/s (1 thread)\n", k->name, i8 ? "int8" : "f16",
           G, hd, NK);
    const bool f32 = !i8 && k->attn_scores_f32 && k->attn_f32_g == G && hd % k->attn_f32_hd == 0;
    float *kf = aligned_alloc(64, sizeof *kf * NK * hd), *vf = aligned_alloc(64, sizeof *vf * NK * hd);   /* as attn.c aligns its tile */
    if (f32 && kf && vf) {
        k->f16_to_f32(kv, kf, (int64_t)NK * hd);
        k->f16_to_f32(kv + tile, vf, (int64_t)NK * hd);
    }
    const bool prod = i8 && k->attn_i8_sets && hd % 64 == 0;
    enum { NQ = 16 * G };
    int8_t *qp = malloc((size_t)NQ * hd), *vp = malloc((size_t)NK * hd);
    uint8_t *wh = malloc((size_t)NQ * NK), *wl = malloc((size_t)NQ * NK);
    int32_t *d = malloc(sizeof *d * NK * NQ), *S = malloc(sizeof *S * NQ * hd);
    if (prod && qp && vp && wh && wl && d && S) {
        int8_t *rows = (int8_t *)S;
        for (int i = 0; i < NQ * hd; i++) rows[i] = (int8_t)(i % 13 * 9 - 54);
        k->attn_i8_qpack(hd, NQ, rows, qp);
        for (int i = 0; i < NQ * NK; i++) { wh[i] = (uint8_t)(i % 251); wl[i] = (uint8_t)(i % 127); }
    }
    printf("  round   scores cache   values cache   values_hot cache   scores dram   values dram   values_hot dram%s%s\n",
           f32 && kf && vf ? "   scores f32 cache   values f32 cache" : "",
           prod ? "   i8 dots x128 q   i8 wsums x128 q" : "");
    const double fma = (double)NK * G * hd;
    for (int r = 0; r < rounds; r++) {
        double g[6];
        for (int dram = 0; dram < 2; dram++) {
            const int it = dram ? (int)tiles : 2000;
            double t0 = hachi_time_ms();
            for (int i = 0; i < it; i++) {
                const uint16_t *kt = kv + (dram ? (size_t)i * tile : 0);
                scores(k, i8, hd, kt, q, s);
            }
            g[dram * 3] = fma * it / ((hachi_time_ms() - t0) * 1e6);
            for (int v = 0; v < 2; v++) {
                t0 = hachi_time_ms();
                for (int i = 0; i < it; i++) {
                    const uint16_t *vt = kv + (dram ? (size_t)(tiles + i) * tile : tile);
                    values(k, i8, v, hd, vt, s, o);
                }
                g[dram * 3 + 1 + v] = fma * it / ((hachi_time_ms() - t0) * 1e6);
            }
        }
        printf("  %5d   %12.1f   %12.1f   %16.1f   %11.1f   %11.1f   %15.1f", r + 1, g[0], g[1], g[2], g[3], g[4], g[5]);
        if (f32 && kf && vf) {
            double t0 = hachi_time_ms();
            for (int i = 0; i < 2000; i++) k->attn_scores_f32(hd, NK, kf, hd, q, G, s);
            const double gs = fma * 2000 / ((hachi_time_ms() - t0) * 1e6);
            t0 = hachi_time_ms();
            for (int i = 0; i < 2000; i++) k->attn_values_f32(hd, NK, vf, hd, s, G, o);
            printf("   %16.1f   %16.1f", gs, fma * 2000 / ((hachi_time_ms() - t0) * 1e6));
        }
        if (prod && qp && vp && wh && wl && d && S) {
            const int8_t *k8 = (const int8_t *)kv;
            const double mac = (double)NK * NQ * hd;
            double t0 = hachi_time_ms();
            for (int i = 0; i < 2000; i++) k->attn_i8_dots(hd, NK, k8, hd, NQ, qp, d);
            const double gd = mac * 2000 / ((hachi_time_ms() - t0) * 1e6);
            t0 = hachi_time_ms();
            for (int i = 0; i < 2000; i++) {
                k->attn_i8_vpack(hd, NK, k8 + (size_t)NK * hd, vp);
                k->attn_i8_wsums(hd, NK, NQ, wh, wl, vp, S);
            }
            printf("   %14.1f   %15.1f", gd, mac * 2000 / ((hachi_time_ms() - t0) * 1e6));
        }
        printf("\n");
    }
    free(kv); free(q); free(s); free(o); free(sc); free(kf); free(vf);
    free(qp); free(vp); free(wh); free(wl); free(d); free(S);
    return 0;
}
