/* bench_attn: G FMA/s of the attention tile kernels of this CPU's table (kernels.h
 * attn_scores_f16, attn_values_f16, attn_values_f16_hot) on one thread, for Gemma 4's
 * full-attention shape (8 query heads per K/V head, head dim 512) over tiles of 128 keys
 * (attn.c's ATTN_TILE_KEYS): "cache" reuses one tile (in L2, as the tokens of a prefill group
 * after the first read it), "dram" walks tiles through 256 MB (as a decode step reads them).
 *
 * Build by hand, after `make`:
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc -pthread bench/bench_attn.c \
 *       build/libhachi.a -o /tmp/bench_attn -lm
 * Run: /tmp/bench_attn [rounds=5] [head_dim=512]   ($HACHI_ISA picks a table) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/kernels.h"
#include "util.h"

#define G 8
#define NK 128
#define DRAM_BYTES ((size_t)256 << 20)

typedef void (*values_fn)(int64_t, int, const uint16_t *, int64_t, const float *, int, float *);

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 5, hd = argc > 2 ? atoi(argv[2]) : 512;
    const hachi_kernels *k = hachi_kernels_best();
    if (rounds < 1 || hd < 32 || hd % 32) { fprintf(stderr, "usage: bench_attn [rounds] [head_dim: a multiple of 32]\n"); return 2; }
    const size_t tile = (size_t)NK * hd, tiles = DRAM_BYTES / (tile * 2 * sizeof(uint16_t));
    uint16_t *kv = malloc(DRAM_BYTES);
    float *q = malloc(sizeof *q * G * hd), *s = malloc(sizeof *s * NK * G), *o = calloc((size_t)G * hd, sizeof *o);
    if (!kv || !q || !s || !o) { fprintf(stderr, "out of memory\n"); return 1; }
    for (size_t i = 0; i < DRAM_BYTES / sizeof(uint16_t); i++) kv[i] = hachi_f32_to_f16((float)(i % 61) / 61.0f - 0.5f);
    for (int i = 0; i < G * hd; i++) q[i] = (float)(i % 7) * 0.01f;
    for (int i = 0; i < NK * G; i++) s[i] = 1.0f / (float)(1 + i % 5);
    const values_fn values[2] = {k->attn_values_f16, k->attn_values_f16_hot ? k->attn_values_f16_hot : k->attn_values_f16};
    printf("kernels %s, %d heads x %d dims, tiles of %d keys; G FMA/s (1 thread)\n", k->name, G, hd, NK);
    printf("  round   scores cache   values cache   values_hot cache   scores dram   values dram   values_hot dram\n");
    const double fma = (double)NK * G * hd;
    for (int r = 0; r < rounds; r++) {
        double g[6];
        for (int dram = 0; dram < 2; dram++) {
            const int it = dram ? (int)tiles : 2000;
            double t0 = hachi_time_ms();
            for (int i = 0; i < it; i++) {
                const uint16_t *kt = kv + (dram ? (size_t)i * 2 * tile : 0);
                k->attn_scores_f16(hd, NK, kt, hd, q, G, s);
            }
            g[dram * 3] = fma * it / ((hachi_time_ms() - t0) * 1e6);
            for (int v = 0; v < 2; v++) {
                t0 = hachi_time_ms();
                for (int i = 0; i < it; i++) {
                    const uint16_t *vt = kv + (dram ? (size_t)i * 2 * tile + tile : tile);
                    values[v](hd, NK, vt, hd, s, G, o);
                }
                g[dram * 3 + 1 + v] = fma * it / ((hachi_time_ms() - t0) * 1e6);
            }
        }
        printf("  %5d   %12.1f   %12.1f   %16.1f   %11.1f   %11.1f   %15.1f\n", r + 1, g[0], g[1], g[2], g[3], g[4], g[5]);
    }
    free(kv); free(q); free(s); free(o);
    return 0;
}
