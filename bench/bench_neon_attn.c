/* bench_neon_attn: the NEON table's fp16 attention tile kernels (scores, values streamed, values in
 * cache) on G query heads of head dim HD against NK keys, for qemu_insn.c to count, REPS times
 * after one call whose outputs' FNV-1a hash is printed (so two builds can be shown to give the same
 * bits). bench/neon_counts.sh runs it with REPS and 0 and divides by the key x head x dim units.
 * Build (after make CROSS=aarch64):
 *     aarch64-linux-gnu-gcc -O2 -Isrc -Iinclude -static -o /tmp/bench_neon_attn bench/bench_neon_attn.c \
 *         build-aarch64/libhachi.a -lm -lpthread
 * Run: qemu-aarch64 -L /usr/aarch64-linux-gnu /tmp/bench_neon_attn scores|values|hot|scores32|values32|scores8|values8|dots8|wsums8
 *          G HD NK REPS
 * scores32, values32: the f32-row entries (kernels.h attn_scores_f32, attn_values_f32) over the same
 * rows converted once before the calls, as attn.c converts a tile for a prefill group (G 8: their
 * hashes are scores' and hot's).
 * int8 rows: scores8 and values8 (the int8 tile kernels, attn_scores_i8 and attn_values_i8 of G
 * heads), dots8 and wsums8 (the matrix products, kernels.h attn_i8_dots, and attn_i8_vpack with
 * attn_i8_wsums, of 16 x G queries, as a prefill group's head sets take a tile; where the table has
 * them): units key x query head x dim either way. */
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
        fprintf(stderr, "usage: bench_neon_attn scores|values|hot|scores32|values32|scores8|values8|dots8|wsums8 G HD NK REPS\n");
        return 2;
    }
    const char *way = argv[1];
    const int G = atoi(argv[2]), hd = atoi(argv[3]), nk = atoi(argv[4]), reps = atoi(argv[5]);
    const hachi_kernels *K = hachi_kernels_best();
    if (G < 1 || G > 16 || hd < 1 || nk < 1 || reps < 0) return 2;
    if (!strncmp(way, "scores8", 7) || !strncmp(way, "values8", 7) || !strncmp(way, "dots8", 5) || !strncmp(way, "wsums8", 6)) {
        const bool prod = way[0] == 'd' || way[0] == 'w', sc = way[0] == 's' || way[0] == 'd';
        const int nq = prod ? 16 * G : G;
        if (prod && !(K->attn_i8_sets && hd % 64 == 0 && nk % 64 == 0 && nq % 16 == 0)) return 2;
        int8_t *k8 = malloc((size_t)nk * hd), *q8 = malloc((size_t)nq * hd), *qp = malloc((size_t)nq * hd);
        int8_t *vp = malloc((size_t)nk * hd);
        uint8_t *wh = malloc((size_t)nq * nk), *wl = malloc((size_t)nq * nk);
        int32_t *d = malloc(sizeof *d * (size_t)nk * nq), *acc = malloc(sizeof *acc * (size_t)nq * hd);
        float *ks = malloc(sizeof *ks * (size_t)nk), *qf = malloc(sizeof *qf * (size_t)nq * hd), *qs = malloc(sizeof *qs * (size_t)nq);
        float *p = malloc(sizeof *p * (size_t)nk * G), *r = malloc(sizeof *r * (size_t)G), *sc8 = malloc(sizeof *sc8 * (size_t)nk * G);
        uint64_t seed = 7;
        for (int64_t i = 0; i < (int64_t)nk * hd; i++) k8[i] = (int8_t)(uniform(&seed) * 127.0f);
        for (int64_t i = 0; i < (int64_t)nq * hd; i++) qf[i] = q8[i] = (int8_t)(uniform(&seed) * 127.0f);
        for (int i = 0; i < nk; i++) ks[i] = 0.01f;
        for (int i = 0; i < nq; i++) qs[i] = 0.01f;
        for (int i = 0; i < nk * G; i++) p[i] = uniform(&seed) * 0.5f + 0.5f;
        for (int h = 0; h < G; h++) r[h] = 32767.0f;
        for (int i = 0; i < nq * nk; i++) { wh[i] = (uint8_t)(i % 251); wl[i] = (uint8_t)(i % 127); }
        const hachi_query_i8 qi = {q8, qf, qs};
        if (prod) K->attn_i8_qpack(hd, nq, q8, qp);
        uint64_t hash = 1469598103934665603ull;
        for (int rep = 0; rep <= reps; rep++) {
            const unsigned char *o;
            size_t bytes;
            if (prod && sc) { K->attn_i8_dots(hd, nk, k8, hd, nq, qp, d); o = (const unsigned char *)d; bytes = sizeof *d * (size_t)nk * nq; }
            else if (prod) {
                K->attn_i8_vpack(hd, nk, k8, vp);
                K->attn_i8_wsums(hd, nk, nq, wh, wl, vp, acc);
                o = (const unsigned char *)acc; bytes = sizeof *acc * (size_t)nq * hd;
            } else if (sc) { K->attn_scores_i8(hd, nk, k8, hd, ks, 1, &qi, G, sc8); o = (const unsigned char *)sc8; bytes = sizeof *sc8 * (size_t)nk * G; }
            else { K->attn_values_i8(hd, nk, k8, hd, ks, 1, p, G, r, acc, true); o = (const unsigned char *)acc; bytes = sizeof *acc * (size_t)G * hd; }
            if (rep == 0)
                for (size_t i = 0; i < bytes; i++) hash = (hash ^ o[i]) * 1099511628211ull;
        }
        printf("%s %s G %d hd %d nk %d: hash %016llx, units %lld\n", K->name, way, G, hd, nk, (unsigned long long)hash,
               (long long)reps * nk * nq * hd);
        free(k8); free(q8); free(qp); free(vp); free(wh); free(wl); free(d); free(acc); free(ks); free(qf); free(qs);
        free(p); free(r); free(sc8);
        return 0;
    }
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
