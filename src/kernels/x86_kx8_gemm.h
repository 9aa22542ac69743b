/* kernels/x86_kx8_gemm: x8_rows_kx8's work (x86_q4k_x8.h) as a prefill GEMM on 256-bit vectors,
 * the AVX2 and AVX-VNNI files' (gemm_q4_K, gemm_q5_K): 8 interleaved q4_K rows (q5_K rows: high)
 * and NT <= 8 tokens a pass, each sub-block's 8 value vectors unpacked once for all NT, the tokens'
 * int32 sums in an L1 array, the float sums in y. The integer sums are exact in any order, so each
 * lane is x8_rows_kx8's computation, bit for bit ref's. The including file defines first:
 *   KX8G_SCALES(sc8)                   sub-block scales (sc8: the 8 rows' bytes) as its kernel takes them
 *   KX8G_SUBBLOCK(s, q, scv, ya, high) *s += one token's sums of the sub-block (q) against its 32
 *                                      bytes at ya, times the scales
 *   KX8G_PF_DIST, KX8G_PF_HINT         the weight prefetch
 *   KX8G_TOKENS                        the token loop's pragma (UNROLL, or empty where the compiler's
 *                                      schedule of unrolled tokens spills the values)
 * and its x8_q4_K, x8_q5_K (the last lone group's kernel). */
#ifndef HACHI_KERNELS_X86_KX8_GEMM_H
#define HACHI_KERNELS_X86_KX8_GEMM_H
#include "kernels/x86_q4k_x8.h"

static ALWAYS_INLINE void gemm1_kx8(int64_t n, float *y, int64_t ldy, const char *vw, const size_t bsz, const bool high,
                                    const char *a, size_t a_stride, const int NT) {
    UNROLL for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + (size_t)t * ldy, _mm256_setzero_ps());
    for (int64_t b = 0; b < n / QK_K; b++) {
        const block_q4_Kx8 *w = (const block_q4_Kx8 *)(const void *)(vw + (size_t)b * bsz);
        const char *next = (const char *)w + KX8G_PF_DIST;
        _Alignas(32) uint8_t sc[64];
        q4k_x8_scales(w->scales, sc);
        __m256i sumi[8];
        UNROLL for (int t = 0; t < NT; t++) sumi[t] = _mm256_setzero_si256();
        UNROLL for (int j = 0; j < 8; j++) {
            KX8_PREFETCH(next, high, j, KX8G_PF_HINT);
            const __m256i scv = KX8G_SCALES(sc + 8 * j);
            __m256i q[8];
            UNROLL for (int c = 0; c < 8; c++) q[c] = kx8_values(w, high, j, c);
            KX8G_TOKENS for (int t = 0; t < NT; t++)
                KX8G_SUBBLOCK(&sumi[t], q, scv, ((const block_q8_K *)(const void *)(a + (size_t)t * a_stride) + b)->qs + 32 * j, high);
        }
        const kx8_tail tl = kx8_tail_of(w);
        UNROLL for (int t = 0; t < NT; t++)
            _mm256_storeu_ps(y + (size_t)t * ldy, kx8_accumulate(_mm256_loadu_ps(y + (size_t)t * ldy), &tl, sumi[t],
                                                                 a + (size_t)t * a_stride, n / QK_K, b));
    }
}
static ALWAYS_INLINE void gemm2_q4_K(int64_t n, float *y, int64_t ldy, const block_q4_Kx8 *g0, const block_q4_Kx8 *g1,
                                     const char *a, size_t a_stride, const int NT) {
    gemm1_kx8(n, y, ldy, (const char *)g0, sizeof *g0, false, a, a_stride, NT);
    gemm1_kx8(n, y + 8, ldy, (const char *)g1, sizeof *g1, false, a, a_stride, NT);
}
static ALWAYS_INLINE void gemm2_q5_K(int64_t n, float *y, int64_t ldy, const block_q5_Kx8 *g0, const block_q5_Kx8 *g1,
                                     const char *a, size_t a_stride, const int NT) {
    gemm1_kx8(n, y, ldy, (const char *)g0, sizeof *g0, true, a, a_stride, NT);
    gemm1_kx8(n, y + 8, ldy, (const char *)g1, sizeof *g1, true, a, a_stride, NT);
}
GEMM_FROM_PAIRS(gemm_q4_K, gemm2_q4_K, block_q4_Kx8, QK_K, x8_q4_K, 8, GEMM_CASES7)
GEMM_FROM_PAIRS(gemm_q5_K, gemm2_q5_K, block_q5_Kx8, QK_K, x8_q5_K, 8, GEMM_CASES7)

#endif
