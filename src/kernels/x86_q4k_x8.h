/* kernels/x86_q4k_x8: the per-block parts of the interleaved K-quant kernels (block_q4_Kx8,
 * block_q5_Kx8, block_q6_Kx8) that the AVX2, AVX-VNNI and AVX-512 files share: the 8 rows'
 * 6-bit scales and mins decoded with a few vector ops (byte k of the 8 rows' scales is one
 * 64-bit lane, so the 6-bit unpacking runs on 8 rows at once), the activation extras of the
 * q4_K / q5_K kernels (act_prep_kx8: a block's sub-block sums) and the mins' exact integer sum
 * against them, those kernels' prefetch, value vectors and float step (KX8_PREFETCH, kx8_values,
 * kx8_tail) and the q6_K values (Q6X8_VALUES). Included only by files built with AVX2 (or wider)
 * flags. */
#ifndef HACHI_KERNELS_X86_Q4K_X8_H
#define HACHI_KERNELS_X86_Q4K_X8_H
#include <immintrin.h>
#include <stddef.h>
#include "kernels/rows.h"
#include "quant.h"

/* sc[8j + r] = row r's 6-bit scale of sub-block j (sc: 64 bytes, 32-byte aligned), from the
 * packed scales of 8 interleaved rows (block_q4_Kx8's or block_q5_Kx8's: scales[k][r]) */
static ALWAYS_INLINE void q4k_x8_scales(const uint8_t (*scales)[8], uint8_t *sc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m6 = _mm256_set1_epi8(0x3F), m30 = _mm256_set1_epi8(0x30);
    /* scales[k] = byte k of the 8 rows: s0 = bytes 0..3, s2 = 8..11 (8 rows each) */
    const __m256i s0 = _mm256_loadu_si256((const __m256i *)scales[0]);
    const __m256i s2 = _mm256_loadu_si256((const __m256i *)scales[8]);
    _mm256_store_si256((__m256i *)sc, _mm256_and_si256(s0, m6));
    _mm256_store_si256((__m256i *)(sc + 32), _mm256_or_si256(_mm256_and_si256(s2, m4),
                                                              _mm256_and_si256(_mm256_srli_epi16(s0, 2), m30)));
}

/* the mins as the scales above: mlo byte 8j + r = row r's m[j] for j < 4, mhi for j = 4..7 */
static ALWAYS_INLINE void q4k_x8_min_halves(const uint8_t (*scales)[8], __m256i *mlo, __m256i *mhi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m6 = _mm256_set1_epi8(0x3F), m30 = _mm256_set1_epi8(0x30);
    const __m256i s1 = _mm256_loadu_si256((const __m256i *)scales[4]);
    const __m256i s2 = _mm256_loadu_si256((const __m256i *)scales[8]);
    *mlo = _mm256_and_si256(s1, m6);
    *mhi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(s2, 4), m4), _mm256_and_si256(_mm256_srli_epi16(s1, 2), m30));
}

/* the mins: mv[p] int16 lanes 2r, 2r+1 = row r's m[2p], m[2p+1] */
static ALWAYS_INLINE void q4k_x8_mins(const uint8_t (*scales)[8], __m256i mv[4]) {
    __m256i mlo, mhi;
    q4k_x8_min_halves(scales, &mlo, &mhi);
    for (int p = 0; p < 4; p++) {
        const __m256i v = p < 2 ? mlo : mhi;
        const __m128i h = p % 2 ? _mm256_extracti128_si256(v, 1) : _mm256_castsi256_si128(v);
        mv[p] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(h, _mm_srli_si128(h, 8)));
    }
}

/* The activation extras of the q4_K and q5_K kernels (act_extra / act_prep of every x86 table):
 * per block the sums of its 8 sub-blocks of 32 values (bsums[2j] + bsums[2j+1], |sum| <= 32 *
 * 127: int16), so that dword p, the sums of sub-blocks 2p and 2p+1, meets a row's mins m[2p],
 * m[2p+1] in one madd (against a hadd and 4 shuffles a block and token before; in the AVX-512
 * GEMM 4 vpdpwssd against 8 over the bsum pairs: E2B Q4_K_M prefill 0.96-0.98x the time) */
static inline size_t act_extra_kx8(int64_t n) { return (size_t)(n / QK_K) * 16; }
static ALWAYS_INLINE const int32_t *kx8_extras(const char *row, int64_t nb, int64_t b) {
    return (const int32_t *)(const void *)(row + (size_t)nb * sizeof(block_q8_K)) + 4 * b;
}
static inline void act_prep_kx8(int64_t n, void *va, int64_t b0, int64_t b1) {
    const int64_t nb = n / QK_K;
    const block_q8_K *a = va;
    for (int64_t b = b0; b < b1; b++) {
        const __m256i bs = _mm256_loadu_si256((const __m256i *)a[b].bsums);
        _mm_storeu_si128((__m128i *)(void *)kx8_extras(va, nb, b),
                         _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
    }
}

/* int32 lane r: sum_j m_r[j] * (bsums[2j] + bsums[2j+1]) of an activation block (ex: its extras) */
static ALWAYS_INLINE __m256i q4k_x8_summ(const __m256i mv[4], const int32_t *ex) {
    return _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(mv[0], _mm256_set1_epi32(ex[0])),
                                             _mm256_madd_epi16(mv[1], _mm256_set1_epi32(ex[1]))),
                            _mm256_add_epi32(_mm256_madd_epi16(mv[2], _mm256_set1_epi32(ex[2])),
                                             _mm256_madd_epi16(mv[3], _mm256_set1_epi32(ex[3]))));
}

/* Bit j of each byte of h moved to bit 4, the rest cleared (j a constant after unrolling):
 * the high bits of q5_K values in block_q5_Kx8's qh */
static ALWAYS_INLINE __m256i kx8_high(__m256i h, int j) {
    const __m256i t = j < 4 ? _mm256_slli_epi16(h, 4 - j) : j == 4 ? h : _mm256_srli_epi16(h, j - 4);
    return _mm256_and_si256(t, _mm256_set1_epi8(0x10));
}

/* sub-block j's share of the prefetch of a block at next (hint: the _MM_HINT_ constant): a q5_K
 * block's 1408 bytes as 176 a sub-block; a q4_K block's 1152 as 128 a sub-block, the last also
 * taking the two lines past 1024 */
#define KX8_PREFETCH(next, high, j, hint)                                                  \
    do {                                                                                   \
        if (high) {                                                                        \
            UNROLL for (int l_ = 0; l_ < 3; l_++) _mm_prefetch((next) + 176 * (j) + 64 * l_, hint); \
        } else {                                                                           \
            _mm_prefetch((next) + 128 * (j), hint);                                        \
            _mm_prefetch((next) + 128 * (j) + 64, hint);                                   \
            if ((j) == 7) {                                                                \
                _mm_prefetch((next) + 1024, hint);                                         \
                _mm_prefetch((next) + 1088, hint);                                         \
            }                                                                              \
        }                                                                                  \
    } while (0)

/* vector c of sub-block j's values, 4 of each of the 8 rows (w: a block_q4_Kx8, or with high the
 * block_q5_Kx8 it starts: the nibbles with the 5th bit from its qh) */
static ALWAYS_INLINE __m256i kx8_values(const block_q4_Kx8 *w, const bool high, const int j, const int c) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i v = _mm256_loadu_si256((const __m256i *)(w->qs + 256 * (j / 2) + 32 * c));
    const __m256i q = j % 2 ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4);
    if (!high) return q;
    const uint8_t *qh = (const uint8_t *)w + offsetof(block_q5_Kx8, qh);
    return _mm256_or_si256(q, kx8_high(_mm256_loadu_si256((const __m256i *)(qh + 32 * c)), j));
}

/* a block's float step of the q4_K and q5_K kernels: its 8 rows' d, dmin and mins (w: a
 * block_q4_Kx8 or the block_q5_Kx8 it starts), then per token acc + dw*da * sumi - dmw*da * (the
 * mins against the sub-block sums of block b of the activation row, its extras), in ref's order */
typedef struct { __m256 dw, dmw; __m256i mv[4]; } kx8_tail;
static ALWAYS_INLINE kx8_tail kx8_tail_of(const block_q4_Kx8 *w) {
    kx8_tail t;
    t.dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w->d));
    t.dmw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w->dmin));
    q4k_x8_mins(w->scales, t.mv);
    return t;
}
static ALWAYS_INLINE __m256 kx8_accumulate(__m256 acc, const kx8_tail *t, __m256i sumi, const char *row, int64_t nb,
                                           int64_t b) {
    const __m256 da = _mm256_set1_ps(((const block_q8_K *)(const void *)row + b)->d);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(t->dw, da), _mm256_cvtepi32_ps(sumi), acc);
    return _mm256_fnmadd_ps(_mm256_mul_ps(t->dmw, da), _mm256_cvtepi32_ps(q4k_x8_summ(t->mv, kx8_extras(row, nb, b))), acc);
}

/* The 6-bit values of unit u, half sb (sub-block 2u + sb) of 8 interleaved rows (ql, qh: the
 * block's arrays at that group): 4 vectors of 4 values of each row (c = 0..3), the nibble from
 * ql (low or high half of the byte) and the top 2 bits from qh (bits 2c, 2c+1) moved to bits
 * 4-5; the 16-bit shifts' carries between bytes fall outside the masks. */
#define Q6X8_VALUES(T, P, load, ql, qh, u, sb, q)                                                      \
    do {                                                                                               \
        const T h_ = load((qh) + 64 * (u) + 32 * (sb));                                                \
        UNROLL for (int c_ = 0; c_ < 4; c_++) {                                                        \
            const T l_ = load((ql) + 128 * (u) + 32 * c_);                                             \
            const T n_ = (sb) ? P##_and(P##_srli(l_, 4), m4) : P##_and(l_, m4);                       \
            const T t_ = c_ == 0 ? P##_slli(h_, 4) : c_ == 1 ? P##_slli(h_, 2) : c_ == 2 ? h_ : P##_srli(h_, 2); \
            (q)[c_] = P##_or(n_, P##_and(t_, m30));                                                    \
        }                                                                                              \
    } while (0)
/* the byte-mask operations of 256-bit vectors, by prefix (Q6X8_VALUES; x86_avx512.c adds v512) */
#define v256_and _mm256_and_si256
#define v256_or _mm256_or_si256
#define v256_srli _mm256_srli_epi16
#define v256_slli _mm256_slli_epi16
static ALWAYS_INLINE __m256i load256(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

#endif
