/* kernels/x86_vnni_x8: the VNNI kernels of the interleaved rows (block_q4_0x8, block_q4_Kx8,
 * block_q5_Kx8, block_q6_Kx8, block_q8_0x8), written once for the two x86 tables that have vpdpbusd on 256-bit vectors:
 * AVX-512 VNNI (x86_avx512.c, EVEX, VNNI_ROWS 8: 32 vector registers) and AVX-VNNI
 * (x86_avxvnni.c, VEX, VNNI_ROWS 4: 16). The including file defines VNNI_ROWS and
 * VNNI_DPBUSD (the intrinsic), optionally VNNI_DPBUSD_B (the same with a broadcast memory
 * operand), and includes rows.h and x86_q4k_x8.h; it gets the static
 * vec_dot_x8 entries x8_q4_0 (over AVX2's Q4_0 activation extras), x8_q4_K, x8_q5_K, and
 * x8_q8_0 over AVX2's Q8_0 extras (-128*sum(y)), and x8_q6_K over its own extras (act_extra_q6_K /
 * act_prep_q6_K; x8_q6_K only without VNNI_X8_NO_Q6_K, which AVX-512 sets: it has a 512-bit one),
 * and x86_q4k_x8.h's unpacking of the interleaved K-quant values. */
#ifndef HACHI_KERNELS_X86_VNNI_X8_H
#define HACHI_KERNELS_X86_VNNI_X8_H
#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include "kernels/rows.h"
#include "kernels/x86_q4k_x8.h"
#include "quant.h"

/* weight prefetch distance and level (these kernels and x86_avx512.c's GEMM): 4 KiB ahead streamed
 * 1 token from DRAM at 20.3-21.9 GB/s on 2 threads against 17.3-19.1 at 1 KiB (Sapphire Rapids
 * class); 8 KiB ahead into L2 (T1) then decoded E2B Q4_0 at a median 20.5 tok/s against 19.4 at
 * 4 KiB into L1 (Zen 4, 7 alternated rounds), and the GEMM's verify forwards were faster with it in
 * 7 of 7 rounds, its prefill no different beyond the noise (bench/RESULTS.md) */
#ifndef X8_PF_DIST
#define X8_PF_DIST 8192
#endif
#ifndef X8_PF_HINT
#define X8_PF_HINT _MM_HINT_T1
#endif

/* Block b's activation extras in a q8_0 row of nb blocks (AVX2's act_prep_q4_0, whose tables
 * these kernels share: per 4 blocks 4 int32 -8*sum(y), then 4 float d): -8*sum(y) at [0], d at [16] */
static ALWAYS_INLINE const char *q4_0_extras(const char *row, int64_t nb, int64_t b) {
    return row + (size_t)nb * sizeof(block_q8_0) + (size_t)(b >> 2) * 32 + (size_t)(b & 3) * 4;
}

/* The GEMMs' activations for Q4_0 and Q8_0 weights, packed (act_pack): per block of 32, the 16
 * tokens' quants, then per half of the tokens their -k*sum(y) (k = 8 for Q4_0, 128 for Q8_0: the
 * extras that AVX-512's and AVX2's tables share) and their d, one cache line a half. AVX-512's
 * GEMM then reads one stream; from the rows (two streams a token: the block, its extras) it ran
 * 11% slower in L1 at 1536 columns and 17-23% at 12288. AMX's loads a block's quants as one A
 * tile. */
typedef struct act_tile_q8 {
    int8_t qs[16][QK8_0];
    struct { int32_t corr[8]; float d[8]; } half[2];
} act_tile_q8;

static inline size_t act_pack_bytes_q8(int64_t n) { return (size_t)(n / QK8_0) * sizeof(act_tile_q8); }
static inline void act_pack_q8(int64_t n, const void *va, size_t a_stride, int t0, int nt, int tile_nt, void *tile) {
    const int64_t nb = n / QK8_0;
    act_tile_q8 *o = tile;
    for (int i = 0; i < nt; i++) {
        const int t = t0 + i;
        const char *ar = (const char *)va + (size_t)i * a_stride;
        for (int64_t b = 0; b < nb; b++) {
            const char *ex = q4_0_extras(ar, nb, b);
            memcpy(o[b].qs[t], ((const block_q8_0 *)ar + b)->qs, QK8_0);
            memcpy(&o[b].half[t / 8].corr[t % 8], ex, 4);
            memcpy(&o[b].half[t / 8].d[t % 8], ex + 16, 4);
        }
    }
}

static ALWAYS_INLINE __m256i bcast32(const int8_t *p) {
    int32_t x;
    memcpy(&x, p, 4);
    return _mm256_set1_epi32(x);
}
/* acc += dot of w's unsigned bytes with the 4 signed bytes at p broadcast to every lane.
 * EVEX has the broadcast as a memory operand ({1to8}): one fused instruction where the
 * intrinsics compile to a separate broadcast load; VEX (AVX-VNNI) has no such operand. */
#ifndef VNNI_DPBUSD_B
#define VNNI_DPBUSD_B(acc, w, p) VNNI_DPBUSD((acc), (w), bcast32(p))
#endif

/* 8 interleaved q4_0 rows (block_q4_0x8) against R activation rows. A 32-byte load holds 4
 * nibble bytes of each weight row; vpdpbusd multiplies them (unsigned) by a broadcast of 4
 * activation bytes (signed) and adds the 4 products to that row's int32 lane, so a block's
 * 8 row sums need 8 instructions per activation row and no int16 stage. The chain starts
 * from -8*sum(y) (the AVX2 activation extras, which this table shares): the exact integer
 * sum(q*y) - 8*sum(y), then acc = fma(dw*da, v, acc) in block order, as ref does:
 * results equal ref's bit for bit and never depend on R. */
static ALWAYS_INLINE void x8_rows_q4_0(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    const block_q4_0x8 *w = vw;
    const int64_t nb = n / QK8_0;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[VNNI_ROWS];
    UNROLL for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        _mm_prefetch((const char *)(w + b) + X8_PF_DIST, X8_PF_HINT);
        _mm_prefetch((const char *)(w + b) + X8_PF_DIST + 64, X8_PF_HINT);
        _mm_prefetch((const char *)(w + b) + X8_PF_DIST + 128, X8_PF_HINT);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w[b].d));
        __m256i lo[4], hi[4];
        UNROLL for (int c = 0; c < 4; c++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * c));
            lo[c] = _mm256_and_si256(v, m4);
            hi[c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        UNROLL for (int r = 0; r < R; r++) {
            const char *ar = va + (size_t)r * stride;
            const block_q8_0 *a = (const block_q8_0 *)ar + b;
            const char *ex = q4_0_extras(ar, nb, b);
            float da;
            memcpy(&da, ex + 16, 4);
            /* one dependency chain per row when several rows interleave, two for one or two;
             * from -8*sum(y) */
            __m256i p0 = bcast32((const int8_t *)ex), p1 = _mm256_setzero_si256();
            UNROLL for (int c = 0; c < 4; c++) {
                p0 = VNNI_DPBUSD_B(p0, lo[c], a->qs + 4 * c);
                if (R > 2) p0 = VNNI_DPBUSD_B(p0, hi[c], a->qs + 16 + 4 * c);
                else p1 = VNNI_DPBUSD_B(p1, hi[c], a->qs + 16 + 4 * c);
            }
            if (R <= 2) p0 = _mm256_add_epi32(p0, p1);
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(da)), _mm256_cvtepi32_ps(p0), acc[r]);
        }
    }
    UNROLL for (int r = 0; r < R; r++) _mm256_storeu_ps(s + 8 * r, acc[r]);
}

/* 8 interleaved q4_K rows (block_q4_Kx8; bsz its size) or q5_K rows (block_q5_Kx8, high: the
 * values' 5th bit from its qh) against R activation rows. Per sub-block j and row: 8 vpdpbusd
 * (4 value bytes of each weight row against a broadcast of 4 activation bytes) make the int32
 * sum(q*qa) of each weight row, times its 6-bit scale (vpmulld), summed over the 8 sub-blocks;
 * the mins as in the AVX2 kernel (x86_q4k_x8.h). Then acc = fma(dw*da, sumi, acc),
 * acc = fma(-(dmw*da), summ, acc): exactly ref's order, so results equal ref's bit for bit and
 * never depend on R. */
static ALWAYS_INLINE void x8_rows_kx8(int64_t n, float *s, const char *vw, const size_t bsz, const bool high,
                                      const char *va, size_t stride, const int R) {
    __m256 acc[VNNI_ROWS];
    UNROLL for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; b++) {
        const block_q4_Kx8 *w = (const block_q4_Kx8 *)(const void *)(vw + (size_t)b * bsz);
        /* prefetched: the bytes X8_PF_DIST ahead, a block's worth per block (the next block
         * instead: an E2B Q4_K_M decode step 1.14x the time, in one process) */
        const char *next = (const char *)w + X8_PF_DIST;
        _Alignas(32) uint8_t sc[64];   /* sc[8j + r]: row r's 6-bit scale of sub-block j */
        q4k_x8_scales(w->scales, sc);
        __m256i sumi[VNNI_ROWS];
        UNROLL for (int j = 0; j < 8; j++) {
            KX8_PREFETCH(next, high, j, X8_PF_HINT);
            const __m256i scv = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8 * j)));
            __m256i q[8];
            UNROLL for (int c = 0; c < 8; c++) q[c] = kx8_values(w, high, j, c);
            UNROLL for (int r = 0; r < R; r++) {
                const int8_t *y = ((const block_q8_K *)(va + (size_t)r * stride) + b)->qs + 32 * j;
                __m256i p0 = _mm256_setzero_si256(), p1 = _mm256_setzero_si256();   /* two chains */
                UNROLL for (int c = 0; c < 8; c += 2) {
                    p0 = VNNI_DPBUSD_B(p0, q[c], y + 4 * c);
                    p1 = VNNI_DPBUSD_B(p1, q[c + 1], y + 4 * c + 4);
                }
                const __m256i t = _mm256_mullo_epi32(_mm256_add_epi32(p0, p1), scv);
                sumi[r] = j ? _mm256_add_epi32(sumi[r], t) : t;
            }
        }
        const kx8_tail tl = kx8_tail_of(w);
        UNROLL for (int r = 0; r < R; r++)
            acc[r] = kx8_accumulate(acc[r], &tl, sumi[r], va + (size_t)r * stride, n / QK_K, b);
    }
    UNROLL for (int r = 0; r < R; r++) _mm256_storeu_ps(s + 8 * r, acc[r]);
}

/* 8 interleaved q8_0 rows (block_q8_0x8) against R activation rows: per block 8 vpdpbusd of
 * the rows' unsigned bytes (one 32-byte load: 4 values of each row) against broadcasts of 4
 * activation bytes, starting from -128*sum(y) (the extras): the exact integer sum(q*y); then
 * acc = fma(dw*da, sum, acc) in block order as ref does, bit for bit, whatever R. Up to 4
 * chains per row (one token: 4, two: 2) to hide the instruction's latency. */
static ALWAYS_INLINE void x8_rows_q8_0(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    const block_q8_0x8 *w = vw;
    const int64_t nb = n / QK8_0;
    const int NC = R == 1 ? 4 : R == 2 ? 2 : 1;
    __m256 acc[VNNI_ROWS];
    UNROLL for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        UNROLL for (int l = 0; l < 5; l++) _mm_prefetch((const char *)(w + b) + X8_PF_DIST + 64 * l, X8_PF_HINT);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w[b].d));
        __m256i q[8];
        UNROLL for (int c = 0; c < 8; c++) q[c] = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * c));
        UNROLL for (int r = 0; r < R; r++) {
            const char *ar = va + (size_t)r * stride;
            const block_q8_0 *a = (const block_q8_0 *)ar + b;
            const char *ex = q4_0_extras(ar, nb, b);
            float da;
            memcpy(&da, ex + 16, 4);
            __m256i p[4];
            p[0] = bcast32((const int8_t *)ex);
            UNROLL for (int k = 1; k < NC; k++) p[k] = _mm256_setzero_si256();
            UNROLL for (int c = 0; c < 8; c++) p[c % NC] = VNNI_DPBUSD_B(p[c % NC], q[c], a->qs + 4 * c);
            UNROLL for (int k = 1; k < NC; k++) p[0] = _mm256_add_epi32(p[0], p[k]);
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(da)), _mm256_cvtepi32_ps(p[0]), acc[r]);
        }
    }
    UNROLL for (int r = 0; r < R; r++) _mm256_storeu_ps(s + 8 * r, acc[r]);
}

/* vec_dot_x8 from x8_rows: activation rows in groups of VNNI_ROWS, then of 4, then 1..3 */
ROWS_FROM_N(x8_q4_0, x8_rows_q4_0, 8, VNNI_ROWS)
ROWS_FROM_N(x8_q8_0, x8_rows_q8_0, 8, VNNI_ROWS)
static ALWAYS_INLINE void x8_rows_q4_K(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    x8_rows_kx8(n, s, vw, sizeof(block_q4_Kx8), false, va, stride, R);
}
ROWS_FROM_N(x8_q4_K, x8_rows_q4_K, 8, VNNI_ROWS)

/* block_q5_Kx8 through the q4_K kernel with the values' 5th bit */
static ALWAYS_INLINE void x8_rows_q5_K(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    x8_rows_kx8(n, s, vw, sizeof(block_q5_Kx8), true, va, stride, R);
}
ROWS_FROM_N(x8_q5_K, x8_rows_q5_K, 8, VNNI_ROWS)

/* Q6_K activation extras: per block of the Q8_K row, 16 int32 -32*bsum_j (one per sub-block of
 * 16), the value each sub-block's vpdpbusd chain starts from: the chain then ends at the exact
 * sum((v - 32)*y) of the sub-block (v the unsigned 6-bit value). */
static size_t act_extra_q6_K(int64_t n) { return (size_t)(n / QK_K) * 64; }
static ALWAYS_INLINE const int32_t *q6_K_extras(const char *row, int64_t nb, int64_t b) {
    return (const int32_t *)(const void *)(row + (size_t)nb * sizeof(block_q8_K)) + 16 * b;
}
static void act_prep_q6_K(int64_t n, void *va, int64_t b0, int64_t b1) {
    const int64_t nb = n / QK_K;
    const block_q8_K *a = va;
    for (int64_t b = b0; b < b1; b++) {
        int32_t *ex = (int32_t *)q6_K_extras(va, nb, b);
        UNROLL for (int h = 0; h < 2; h++) {
            const __m256i bs = _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(a[b].bsums + 8 * h)));
            _mm256_storeu_si256((__m256i *)(void *)(ex + 8 * h), _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(bs, 5)));
        }
    }
}

/* 8 interleaved q6_K rows (block_q6_Kx8) against R activation rows: per sub-block j, 4
 * vpdpbusd of the rows' values against broadcasts of 4 activation bytes, from -32*bsum_j (the
 * extras): the exact sum((v - 32)*y); times the rows' scales (vpmulld), summed over the 16
 * sub-blocks; then acc = fma(dw*da, sumi, acc) in block order as ref does, bit for bit,
 * whatever R. */
static ALWAYS_INLINE void x8_rows_q6_K(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    const block_q6_Kx8 *w = vw;
    const int64_t nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256 acc[VNNI_ROWS];
    UNROLL for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i sumi[VNNI_ROWS];
        for (int j = 0; j < QK_K / 16; j++) {
            _mm_prefetch((const char *)(w + b) + X8_PF_DIST + 128 * j, X8_PF_HINT);
            _mm_prefetch((const char *)(w + b) + X8_PF_DIST + 128 * j + 64, X8_PF_HINT);
            __m256i q[4];
            Q6X8_VALUES(__m256i, v256, load256, w[b].ql, w[b].qh, j / 2, j % 2, q);
            const __m256i scv = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)w[b].scales[j]));
            UNROLL for (int r = 0; r < R; r++) {
                const char *ar = va + (size_t)r * stride;
                const int8_t *y = ((const block_q8_K *)ar + b)->qs + 16 * j;
                __m256i p = _mm256_set1_epi32(q6_K_extras(ar, nb, b)[j]);
                UNROLL for (int c = 0; c < 4; c++) p = VNNI_DPBUSD_B(p, q[c], y + 4 * c);
                const __m256i t = _mm256_mullo_epi32(p, scv);
                sumi[r] = j ? _mm256_add_epi32(sumi[r], t) : t;
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w[b].d));
        UNROLL for (int r = 0; r < R; r++) {
            const block_q8_K *a = (const block_q8_K *)(va + (size_t)r * stride) + b;
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a->d)), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        }
    }
    UNROLL for (int r = 0; r < R; r++) _mm256_storeu_ps(s + 8 * r, acc[r]);
}
#ifndef VNNI_X8_NO_Q6_K
ROWS_FROM_N(x8_q6_K, x8_rows_q6_K, 8, VNNI_ROWS)
#endif

#endif
