/* bench_neon_attn: the NEON table's fp16 attention tile kernels (scores, values streamed, values in
 * cache) on G query heads of head dim HD against NK keys, for qemu_insn.c to count, REPS times
 * after one call whose outputs' FNV-1a hash is printed (so two builds can be shown to give the same
 * bits). bench/neon_counts.sh runs it with REPS and 0 and divides by the key x head x dim units.
 * Build (after make CROSS=aarch64):
 *     aarch64-linux-gnu-gcc -O2 -Isrc -Iinclude -static -o /tmp/bench_neon_attn bench/bench_neon_attn.c \
 *         build-aarch64/libhachi.a -lm -lpthread
 * Run: qemu-aarch64 -L /usr/aarch64-linux-gnu /tmp/bench_neon_attn scores|values|hot|scores32|values32 G HD NK REPS
 * scores32, values32: the f32-row entries (kernels.h attn_scores_f32, attn_values_f32) over the same
 * rows converted once before the calls, as attn.c converts a tile for a prefill group (G 8: their
 * hashes are scores' and hot's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/kernels.h"
#include "util.h"

static float uniform(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int)(*s >> 40 & 0xffff) - 32768) / 32768.0f;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: bench_neon_attn scores|values|hot|scores32|values32 G HD NK REPS\n");
        return 2;
    }
    const char *way = argv[1];
    const int G = atoi(argv[2]), hd = atoi(argv[3]), nk = atoi(argv[4]), reps = atoi(argv[5]);
    const hachi_kernels *K = hachi_kernels_best();
    if (G < 1 || G > 16 || hd < 1 || nk < 1 || reps < 0) return 2;
    const bool f32 = !strcmp(way, "scores32") || !strcmp(way, "values32");
    const bool scores = !strcmp(way, "scores") || !strcmp(way, "scores32");
    if (f32 && !(K->attn_scores_f32 && G == K->attn_f32_g && hd % K->attn_f32_hd == 0)) return 2;
    void (*values)(int64_t, int, const uint16_t *, int64_t, const float *, int, float *) =
        !strcmp(way, "hot") && K->attn_values_f16_hot ? K->attn_values_f16_hot : K->attn_values_f16;
    uint16_t *kv = malloc(sizeof *kv * (size_t)nk * hd);
    float *q = malloc(sizeof *q * (size_t)G * hd), *s = malloc(sizeof *s * (size_t)nk * G), *out = malloc(sizeof *out * (size_t)G * hd);
    uint64_t seed = 5;
    for (int64_t i = 0; i < (int64_t)nk * hd; i++) kv[i] = hachi_f32_to_f16(uniform(&seed));
    for (int i = 0; i < G * hd; i++) { q[i] = uniform(&seed); out[i] = uniform(&seed); }
    for (int i = 0; i < nk * G; i++) s[i] = uniform(&seed) * 0.5f + 0.5f;   /* weights for the values */
    float *kf = malloc(sizeof *kf * (size_t)nk * hd);
    if (f32) K->f16_to_f32(kv, kf, (int64_t)nk * hd);
    const unsigned char *o = scores ? (const unsigned char *)s : (const unsigned char *)out;
    const size_t bytes = scores ? sizeof *s * (size_t)nk * G : sizeof *out * (size_t)G * hd;
    uint64_t hash = 1469598103934665603ull;
    for (int r = 0; r <= reps; r++) {
        if (f32 && scores) K->attn_scores_f32(hd, nk, kf, hd, q, G, s);
        else if (f32) K->attn_values_f32(hd, nk, kf, hd, s, G, out);
        else if (scores) K->attn_scores_f16(hd, nk, kv, hd, q, G, s);
        else values(hd, nk, kv, hd, s, G, out);
        if (r == 0)
            for (size_t i = 0; i < bytes; i++) hash = (hash ^ o[i]) * 1099511628211ull;
    }
    printf("%s %s G %d hd %d nk %d: hash %016llx, units %lld\n", K->name, way, G, hd, nk, (unsigned long long)hash,
           (long long)reps * nk * G * hd);
    free(kv); free(kf); free(q); free(s); free(out);
    return 0;
}
