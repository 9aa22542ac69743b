/* Attention tile kernels (src/kernels/attn.h) against the per-row fallbacks and the
 * scalar softmax: every G and head dim the tiles take and some they hand back. */
#include <math.h>
#include "test.h"
#include "kernels/attn.h"
#include "util.h"

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return ((int)(*s >> 40 & 0xffff) - 32768) / 32768.0f;
}

TEST(attn_tiles_match_rows) {
    const hachi_kernels *kt = hachi_kernels_best();
    const hachi_attn_kernels *tiles = hachi_attn_kernels_for(kt);
    const int Gs[] = {1, 2, 4, 8}, hds[] = {32, 64, 256, 512, 40}, nks[] = {1, 3, 33, 200};
    uint64_t seed = 7;
    for (size_t gi = 0; gi < 4; gi++)
        for (size_t hi = 0; hi < 5; hi++)
            for (size_t ni = 0; ni < 4; ni++) {
                int G = Gs[gi], hd = hds[hi], nk = nks[ni];
                int64_t stride = hd + 8;   /* rows not packed, as in a multi-head cache */
                uint16_t *k = malloc(sizeof *k * nk * stride), *v = malloc(sizeof *v * nk * stride);
                float *q = malloc(sizeof *q * G * hd), *s1 = malloc(sizeof *s1 * nk * G), *s2 = malloc(sizeof *s2 * nk * G);
                float *o1 = calloc((size_t)G * hd, sizeof *o1), *o2 = calloc((size_t)G * hd, sizeof *o2);
                for (int i = 0; i < nk * stride; i++) { k[i] = hachi_f32_to_f16(frand(&seed)); v[i] = hachi_f32_to_f16(frand(&seed)); }
                for (int i = 0; i < G * hd; i++) q[i] = frand(&seed);
                hachi_attn_scores_rows(kt, hd, nk, k, stride, q, G, s1);
                tiles->scores_f16(kt, hd, nk, k, stride, q, G, s2);
                double worst = 0;
                for (int i = 0; i < nk * G; i++) worst = fmax(worst, fabs((double)s1[i] - s2[i]));
                /* |s| <= hd; float sums of hd products differ by a few ulp of hd */
                CHECKF(worst <= 1e-5 * hd, "scores G %d hd %d nk %d: max diff %g", G, hd, nk, worst);

                float mx1[8], mx2[8], sum1[8], sum2[8];
                memcpy(s2, s1, sizeof *s1 * nk * G);
                hachi_attn_softmax_ref(s1, nk, G, 0.125f, mx1, sum1);
                tiles->softmax(s2, nk, G, 0.125f, mx2, sum2);
                for (int h = 0; h < G; h++) {
                    CHECKF(mx1[h] == mx2[h], "softmax max G %d head %d: %g vs %g", G, h, mx1[h], mx2[h]);
                    CHECKF(fabsf(sum1[h] - sum2[h]) <= 1e-6 * nk * 4, "softmax sum G %d nk %d head %d: %g vs %g", G, nk,
                           h, sum1[h], sum2[h]);
                }
                worst = 0;
                for (int i = 0; i < nk * G; i++) worst = fmax(worst, fabs((double)s1[i] - s2[i]) / (s1[i] + 1e-30));
                CHECKF(worst <= 2e-6, "softmax exp G %d nk %d: max rel diff %g", G, nk, worst);

                hachi_attn_values_rows(kt, hd, nk, v, stride, s1, G, o1);
                tiles->values_f16(kt, hd, nk, v, stride, s1, G, o2);
                worst = 0;
                for (int i = 0; i < G * hd; i++) worst = fmax(worst, fabs((double)o1[i] - o2[i]));
                CHECKF(worst <= 1e-5 * nk, "values G %d hd %d nk %d: max diff %g", G, hd, nk, worst);
                free(k); free(v); free(q); free(s1); free(s2); free(o1); free(o2);
            }
}
