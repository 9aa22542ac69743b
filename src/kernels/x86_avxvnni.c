/* kernels/x86_avxvnni: the table of x86 CPUs with AVX-VNNI (VEX-encoded vpdpbusd on 256-bit
 * vectors) but no AVX-512: Intel Alder Lake and later client cores, AMD Zen 5 with AVX-512
 * off. It overrides only the interleaved-row kernels (x86_vnni_x8.h: Q4_0, Q4_K, Q5_K, Q6_K,
 * Q8_0; 4 activation rows per pass: 16 vector registers) and has the prefill GEMMs below: Q4_0
 * and Q8_0 (two groups of 8 rows a pass), Q4_K, Q5_K and Q6_K (one group, 8 tokens a pass); every
 * other entry is the AVX2 table's, which dispatch.c copies first. Built with the AVX2/FMA/F16C/AVX-VNNI flags that dispatch.c
 * checks. */
#include "kernels/kernels.h"

#if defined(__x86_64__) && defined(__AVXVNNI__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include "kernels/rows.h"

#define VNNI_ROWS 4
#define VNNI_DPBUSD _mm256_dpbusd_avx_epi32
#include "kernels/x86_vnni_x8.h"

/* x8_rows_q4_0's or x8_rows_q8_0's work (x86_vnni_x8.h) for two groups of 8 rows (g0b, g1b:
 * blocks of bsz bytes, block_q4_0x8 when nib, else block_q8_0x8: the same d, then qs) and R <= 4
 * tokens: each broadcast of 4 activation bytes feeds both groups' vpdpbusd (the int32 sums from
 * the extras' correction, 8 registers), the float sums in an L1 array; each lane's arithmetic is
 * the x8 kernel's, bit for bit. */
static ALWAYS_INLINE void x16_rows_b(int64_t n, float *y, int64_t ldy, const char *g0b, const char *g1b, const size_t bsz,
                                     const bool nib, const char *va, size_t stride, const int R) {
    const int64_t nb = n / QK8_0;
    const int NC = nib ? 4 : 8, NL = nib ? 3 : 5;   /* 32-byte loads, lines a block */
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    _Alignas(32) float acc[VNNI_ROWS][2][8];
    UNROLL for (int r = 0; r < R; r++) {
        _mm256_store_ps(acc[r][0], _mm256_setzero_ps());
        _mm256_store_ps(acc[r][1], _mm256_setzero_ps());
    }
    for (int64_t b = 0; b < nb; b++) {
        const block_q8_0x8 *w[2] = {(const block_q8_0x8 *)(const void *)(g0b + (size_t)b * bsz),
                                    (const block_q8_0x8 *)(const void *)(g1b + (size_t)b * bsz)};
        UNROLL for (int k = 0; k < 2; k++)
            UNROLL for (int l = 0; l < NL; l++) _mm_prefetch((const char *)w[k] + X8_PF_DIST + 64 * l, X8_PF_HINT);
        __m256i p[VNNI_ROWS][2];
        UNROLL for (int r = 0; r < R; r++) p[r][0] = p[r][1] = bcast32((const int8_t *)q4_0_extras(va + (size_t)r * stride, nb, b));
        UNROLL for (int c = 0; c < NC; c++) {
            __m256i q[2][2];   /* [group]: the values that meet activation bytes 4c (and, nibbles, 16 + 4c) */
            UNROLL for (int k = 0; k < 2; k++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(w[k]->qs + 32 * c));
                q[k][0] = nib ? _mm256_and_si256(v, m4) : v;
                q[k][1] = nib ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : v;
            }
            UNROLL for (int r = 0; r < R; r++) {
                const int8_t *ya = ((const block_q8_0 *)(va + (size_t)r * stride) + b)->qs + 4 * c;
                const __m256i yl = bcast32(ya);
                UNROLL for (int k = 0; k < 2; k++) p[r][k] = VNNI_DPBUSD(p[r][k], q[k][0], yl);
                if (nib) {
                    const __m256i yh = bcast32(ya + 16);
                    UNROLL for (int k = 0; k < 2; k++) p[r][k] = VNNI_DPBUSD(p[r][k], q[k][1], yh);
                }
            }
        }
        const __m256 dw0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w[0]->d));
        const __m256 dw1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w[1]->d));
        UNROLL for (int r = 0; r < R; r++) {
            float da;
            memcpy(&da, q4_0_extras(va + (size_t)r * stride, nb, b) + 16, 4);
            const __m256 vda = _mm256_set1_ps(da);
            _mm256_store_ps(acc[r][0], _mm256_fmadd_ps(_mm256_mul_ps(dw0, vda), _mm256_cvtepi32_ps(p[r][0]), _mm256_load_ps(acc[r][0])));
            _mm256_store_ps(acc[r][1], _mm256_fmadd_ps(_mm256_mul_ps(dw1, vda), _mm256_cvtepi32_ps(p[r][1]), _mm256_load_ps(acc[r][1])));
        }
    }
    UNROLL for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(y + (size_t)r * ldy, _mm256_load_ps(acc[r][0]));
        _mm256_storeu_ps(y + (size_t)r * ldy + 8, _mm256_load_ps(acc[r][1]));
    }
}
static ALWAYS_INLINE void x16_rows_q4_0(int64_t n, float *y, int64_t ldy, const block_q4_0x8 *g0, const block_q4_0x8 *g1,
                                        const char *va, size_t stride, const int R) {
    x16_rows_b(n, y, ldy, (const char *)g0, (const char *)g1, sizeof *g0, true, va, stride, R);
}
static ALWAYS_INLINE void x16_rows_q8_0(int64_t n, float *y, int64_t ldy, const block_q8_0x8 *g0, const block_q8_0x8 *g1,
                                        const char *va, size_t stride, const int R) {
    x16_rows_b(n, y, ldy, (const char *)g0, (const char *)g1, sizeof *g0, false, va, stride, R);
}
GEMM_FROM_PAIRS(gemm_q4_0_x8, x16_rows_q4_0, block_q4_0x8, QK8_0, x8_q4_0, 4, GEMM_CASES3)
GEMM_FROM_PAIRS(gemm_q8_0_x8, x16_rows_q8_0, block_q8_0x8, QK8_0, x8_q8_0, 4, GEMM_CASES3)

/* s + sc * (the 8 rows' dot products of one sub-block, q, with the token's 32 bytes at ya),
 * the running sum s in memory (L1): 8 vpdpbusd against broadcasts of 4 activation bytes (VEX
 * has no broadcast operand) in two chains, one asm so that nothing spills (as in the AVX-512
 * file's kx8_subblock: the registers are q's 8, sc, two chains and two broadcasts) */
static ALWAYS_INLINE void kx8v_subblock(__m256i *s, const __m256i *q, __m256i sc, const int8_t *ya) {
    __m256i p0, p1, b0, b1;
    __asm__("vpbroadcastd 0(%[a]), %[b0]\n\t"
            "vpbroadcastd 4(%[a]), %[b1]\n\t"
            "vpxor %[p0], %[p0], %[p0]\n\t"
            "vpxor %[p1], %[p1], %[p1]\n\t"
            "%{vex%} vpdpbusd %[b0], %[q0], %[p0]\n\t"
            "vpbroadcastd 8(%[a]), %[b0]\n\t"
            "%{vex%} vpdpbusd %[b1], %[q1], %[p1]\n\t"
            "vpbroadcastd 12(%[a]), %[b1]\n\t"
            "%{vex%} vpdpbusd %[b0], %[q2], %[p0]\n\t"
            "vpbroadcastd 16(%[a]), %[b0]\n\t"
            "%{vex%} vpdpbusd %[b1], %[q3], %[p1]\n\t"
            "vpbroadcastd 20(%[a]), %[b1]\n\t"
            "%{vex%} vpdpbusd %[b0], %[q4], %[p0]\n\t"
            "vpbroadcastd 24(%[a]), %[b0]\n\t"
            "%{vex%} vpdpbusd %[b1], %[q5], %[p1]\n\t"
            "vpbroadcastd 28(%[a]), %[b1]\n\t"
            "%{vex%} vpdpbusd %[b0], %[q6], %[p0]\n\t"
            "%{vex%} vpdpbusd %[b1], %[q7], %[p1]\n\t"
            "vpaddd %[p1], %[p0], %[p0]\n\t"
            "vpmulld %[sc], %[p0], %[p0]\n\t"
            "vpaddd %[s], %[p0], %[p0]\n\t"
            "vmovdqa %[p0], %[s]"
            : [s] "+m"(*s), [p0] "=&x"(p0), [p1] "=&x"(p1), [b0] "=&x"(b0), [b1] "=&x"(b1)
            : [a] "r"(ya), [q0] "x"(q[0]), [q1] "x"(q[1]), [q2] "x"(q[2]), [q3] "x"(q[3]), [q4] "x"(q[4]),
              [q5] "x"(q[5]), [q6] "x"(q[6]), [q7] "x"(q[7]), [sc] "x"(sc), "m"(*(const int8_t (*)[32])ya));
}

/* the Q4_K / Q5_K GEMMs: x86_kx8_gemm.h's with kx8v_subblock (vpdpbusd sums int32 as it goes: q5_K's
 * halves need no care), the scales as int32 lanes */
#define KX8G_SCALES(sc8) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc8)))
#define KX8G_SUBBLOCK(s, q, scv, ya, high) kx8v_subblock(s, q, scv, ya)
#define KX8G_PF_DIST X8_PF_DIST
#define KX8G_PF_HINT X8_PF_HINT
#define KX8G_TOKENS UNROLL
#include "kernels/x86_kx8_gemm.h"

/* s + sc0 * (the 8 rows' sums of sub-block 2u, q[0..3], against the token's 16 bytes at ya,
 * starting from the extras' -32*bsum e[0]) + sc1 * (the same for sub-block 2u + 1: q[4..7],
 * ya + 16, e[1]): x8_rows_q6_K's work for two sub-blocks in one asm, as kx8v_subblock (8 values,
 * 2 scales, 2 chains and 2 broadcasts fill 14 registers), the running sum s in L1 */
static ALWAYS_INLINE void q6v_subblocks(__m256i *s, const __m256i *q, __m256i sc0, __m256i sc1, const int8_t *ya,
                                        const int32_t *e) {
    __m256i p0, p1, b0, b1;
    __asm__("vpbroadcastd %[e0], %[p0]\n\t"
            "vpbroadcastd %[e1], %[p1]\n\t"
            "vpbroadcastd 0(%[a]), %[b0]\n\t"
            "vpbroadcastd 16(%[a]), %[b1]\n\t"
            "%{vex%} vpdpbusd %[b0], %[q0], %[p0]\n\t"
            "vpbroadcastd 4(%[a]), %[b0]\n\t"
            "%{vex%} vpdpbusd %[b1], %[q4], %[p1]\n\t"
            "vpbroadcastd 20(%[a]), %[b1]\n\t"
            "%{vex%} vpdpbusd %[b0], %[q1], %[p0]\n\t"
            "vpbroadcastd 8(%[a]), %[b0]\n\t"
            "%{vex%} vpdpbusd %[b1], %[q5], %[p1]\n\t"
            "vpbroadcastd 24(%[a]), %[b1]\n\t"
            "%{vex%} vpdpbusd %[b0], %[q2], %[p0]\n\t"
            "vpbroadcastd 12(%[a]), %[b0]\n\t"
            "%{vex%} vpdpbusd %[b1], %[q6], %[p1]\n\t"
            "vpbroadcastd 28(%[a]), %[b1]\n\t"
            "%{vex%} vpdpbusd %[b0], %[q3], %[p0]\n\t"
            "%{vex%} vpdpbusd %[b1], %[q7], %[p1]\n\t"
            "vpmulld %[sc0], %[p0], %[p0]\n\t"
            "vpmulld %[sc1], %[p1], %[p1]\n\t"
            "vpaddd %[p1], %[p0], %[p0]\n\t"
            "vpaddd %[s], %[p0], %[p0]\n\t"
            "vmovdqa %[p0], %[s]"
            : [s] "+m"(*s), [p0] "=&x"(p0), [p1] "=&x"(p1), [b0] "=&x"(b0), [b1] "=&x"(b1)
            : [a] "r"(ya), [e0] "m"(e[0]), [e1] "m"(e[1]), [q0] "x"(q[0]), [q1] "x"(q[1]), [q2] "x"(q[2]), [q3] "x"(q[3]),
              [q4] "x"(q[4]), [q5] "x"(q[5]), [q6] "x"(q[6]), [q7] "x"(q[7]), [sc0] "x"(sc0), [sc1] "x"(sc1),
              "m"(*(const int8_t (*)[32])ya));
}

/* x8_rows_q6_K's work (x86_vnni_x8.h) as a GEMM: 8 interleaved q6_K rows and NT <= 8 tokens a
 * pass, each pair of sub-blocks unpacked once for all NT (q6v_subblocks), the tokens' int32 sums
 * in an L1 array, the float sums in y. The integer sums are exact in any order, so each lane is
 * x8_rows_q6_K's computation, bit for bit ref's. */
static ALWAYS_INLINE void gemm1_q6_K(int64_t n, float *y, int64_t ldy, const block_q6_Kx8 *w, const char *a,
                                     size_t a_stride, const int NT) {
    const int64_t nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    UNROLL for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + (size_t)t * ldy, _mm256_setzero_ps());
    for (int64_t b = 0; b < nb; b++) {
        __m256i sumi[8];
        UNROLL for (int t = 0; t < NT; t++) sumi[t] = _mm256_setzero_si256();
        for (int u = 0; u < QK_K / 32; u++) {
            UNROLL for (int l = 0; l < 4; l++)   /* 2048 bytes over the block's 1680 */
                _mm_prefetch((const char *)(w + b) + X8_PF_DIST + 256 * u + 64 * l, X8_PF_HINT);
            __m256i q[8];
            Q6X8_VALUES(__m256i, v256, load256, w[b].ql, w[b].qh, u, 0, q);
            Q6X8_VALUES(__m256i, v256, load256, w[b].ql, w[b].qh, u, 1, q + 4);
            const __m256i sc0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)w[b].scales[2 * u]));
            const __m256i sc1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)w[b].scales[2 * u + 1]));
            UNROLL for (int t = 0; t < NT; t++) {
                const char *at = a + (size_t)t * a_stride;
                q6v_subblocks(&sumi[t], q, sc0, sc1, ((const block_q8_K *)at + b)->qs + 32 * u, q6_K_extras(at, nb, b) + 2 * u);
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w[b].d));
        UNROLL for (int t = 0; t < NT; t++) {
            const __m256 da = _mm256_set1_ps(((const block_q8_K *)(a + (size_t)t * a_stride) + b)->d);
            _mm256_storeu_ps(y + (size_t)t * ldy, _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(sumi[t]),
                                                                  _mm256_loadu_ps(y + (size_t)t * ldy)));
        }
    }
}
static ALWAYS_INLINE void gemm2_q6_K(int64_t n, float *y, int64_t ldy, const block_q6_Kx8 *g0, const block_q6_Kx8 *g1,
                                     const char *a, size_t a_stride, const int NT) {
    gemm1_q6_K(n, y, ldy, g0, a, a_stride, NT);
    gemm1_q6_K(n, y + 8, ldy, g1, a, a_stride, NT);
}
GEMM_FROM_PAIRS(gemm_q6_K, gemm2_q6_K, block_q6_Kx8, QK_K, x8_q6_K, 8, GEMM_CASES7)

/* on a copy of AVX2's table */
int hachi_kernels_fill_avxvnni(hachi_kernels *t) {
    t->t[HACHI_TYPE_Q4_0].vec_dot_x8 = x8_q4_0;   /* with AVX2's activation extras */
    t->t[HACHI_TYPE_Q4_0].gemm_x8 = gemm_q4_0_x8;   /* bench_ab on Zen 5: forwards of 2 rows 1.10x, 4 0.99x, 8 0.95x */
    t->t[HACHI_TYPE_Q4_0].gemm_min = 4;
    t->t[HACHI_TYPE_Q4_K].vec_dot_x8 = x8_q4_K;
    t->t[HACHI_TYPE_Q4_K].gemm_x8 = gemm_q4_K;   /* bench_ab, E2B Q4_K_M on Zen 5: prefill 256 0.87x; */
    t->t[HACHI_TYPE_Q4_K].gemm_min = 8;           /* forwards of 2 rows 1.07x, 4 1.08x, 8-16 1.00x */
    t->t[HACHI_TYPE_Q8_0].vec_dot_x8 = x8_q8_0;
    t->t[HACHI_TYPE_Q8_0].gemm_x8 = gemm_q8_0_x8;   /* bench_ab, E2B-shaped Q8_0 on Zen 5: prefill 512 0.81x; */
    t->t[HACHI_TYPE_Q8_0].gemm_min = 16;             /* forwards of 4 rows 1.16x, 8 1.06x, 12 1.01x, 16 0.93x */
    t->t[HACHI_TYPE_Q5_K].vec_dot_x8 = x8_q5_K;
    t->t[HACHI_TYPE_Q5_K].gemm_x8 = gemm_q5_K;   /* the same kernel: Q4_K's threshold */
    t->t[HACHI_TYPE_Q5_K].gemm_min = 8;
    t->t[HACHI_TYPE_Q6_K].act_extra = act_extra_q6_K;
    t->t[HACHI_TYPE_Q6_K].act_prep = act_prep_q6_K;
    t->t[HACHI_TYPE_Q6_K].vec_dot_x8 = x8_q6_K;
    t->t[HACHI_TYPE_Q6_K].gemm_x8 = gemm_q6_K;   /* bench_ab on Zen 5: E2B Q4_K_M prefill 256 0.95x; forwards */
    t->t[HACHI_TYPE_Q6_K].gemm_min = 5;           /* of the Q4_0 file (its Q6_K head) of 4 rows 1.00x, 5 0.97x, 8 0.98x */
    return 1;
}

#else
int hachi_kernels_fill_avxvnni(hachi_kernels *t) { (void)t; return 0; }
#endif
