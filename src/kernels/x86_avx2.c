/* kernels/x86_avx2: AVX2+FMA+F16C kernels, the hot path of decode on most x86 CPUs.
 * Accelerated: vec_dot of every weight type; vec_dot_multi that unpacks each weight block
 * once for all rows (Q4_0, Q8_0, Q4_K, Q6_K, F16, F32; Q4_1, Q5_0, Q5_K, BF16 loop the
 * single dot); vec_dot_x8 over rows interleaved 8 by 8 (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K); the
 * prefill GEMM of the float types (2 rows x 2 tokens a tile), of interleaved Q4_0 rows (two
 * groups of 8 rows a pass) and of Q4_K / Q5_K rows (8 tokens a pass); fp16 conversion and
 * the fp16 and int8 attention kernels (x86_avx2_attn.c). Quantizers and the other
 * dequantizers are ref's (cold).
 * Integer dots use the maddubs/madd pattern: u8 x s8 pairs into int16, pairs of int16 into
 * int32, then float FMAs on several blocks folded into one vector. Q4_0 feeds its unsigned
 * nibbles to maddubs directly and corrects with -8*sum(activation block) from the activation
 * extras (act_prep, once per matmul); Q6_K's -32 offset comes from the Q8_K bsums. In cache:
 * ~1.0 ns per Q4_0 block, ~9-11 ns per Q6_K block (Zen 3), so two cores outrun DRAM. */
#include "kernels/kernels.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include "kernels/rows.h"
#include "kernels/x86_avx2_exp.h"
#include "kernels/x86_q4k_x8.h"
#include <string.h>
#include "util.h"

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* The multi kernels do so much work per weight byte that the out-of-order window no longer
 * reaches the next cache lines: prefetch the weight stream explicitly, AVX2_PF_DIST ahead. 8 KiB
 * against 1 KiB, Zen 5, bench_ab in one process, E2B Q4_0 with this table: a decode step 0.97x
 * the time (the Q6_K head's rows), 0.89x with the x8 Q4_0 kernel's too; a forward of 8 rows
 * 1.01x (6 of 16 rounds faster, inside the noise). */
#define AVX2_PF_DIST 8192
#define PREFETCH(p) _mm_prefetch((const char *)(p) + AVX2_PF_DIST, _MM_HINT_T0)

static inline float hsum_ps(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* the largest of v's 8 lanes (no NaN among them: the quantizers' max_ps skip NaNs) */
static inline float hmax_ps(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

static inline float hsum_ps128(__m128 x) {
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* 16 bytes of nibbles -> 32 bytes: byte j (j < 16) = low nibble of qs[j] (element j),
 * byte 16 + j = high nibble of qs[j] (element j + 16), matching the q4_0 layout. */
static inline __m256i nibbles_32(const uint8_t *qs) {
    const __m128i t = _mm_loadu_si128((const __m128i *)qs);
    const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

/* 32 bits -> 32 bytes, byte k = 0xFF where bit k is set (q5_0's qh) */
static inline __m256i bytes_from_bits_32(const uint8_t *p) {
    uint32_t x;
    memcpy(&x, p, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);   /* byte k = source byte k/8 */
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));    /* all bits but k%8 */
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

/* int32 sums of 4 adjacent x*y products for signed x, y (|x| <= 127): sign moves onto y */
static inline __m256i dot_i8_pairs(__m256i ax, __m256i sy) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

static inline __m256 dot_s8_f(__m256i x, __m256i y) {
    return _mm256_cvtepi32_ps(dot_i8_pairs(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)));
}

/* ---------------- float weights ---------------- */

static inline __m256 load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 load_bf16(const uint16_t *p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
static inline __m256 load_f32(const float *p) { return _mm256_loadu_ps(p); }

/* Float weights: a tile of R weight rows x T activation rows (R <= 2, T <= 4, R*T <= 4). Per
 * (row, token): per 32 elements s = w0*a0 (+ w1*a1 + w2*a2 + w3*a3 by fma), acc += s; then 8 at
 * a time acc = fma(w, a, acc); hsum; scalar tail in order; the result to y[t*ldy + r]. vec_dot and
 * multi are the tile of one weight row (rows_*), the prefill GEMM tiles of 2 rows x 2 tokens, so
 * all of them give the same sums bit for bit. In a 2 x 2 tile the 8 weight vectors of a step serve
 * both tokens and each activation vector, loaded one at a time, both rows (15 of the 16 ymm), so a
 * prefill reads its activations from L2 half as often as multi does. */
#define FLOAT_KERNELS(sfx, wtype, load, scalar)                                              \
    static ALWAYS_INLINE void tile_##sfx(int64_t n, float *y, int64_t ldy, const char *vw, size_t rb, \
                                         const char *va, size_t stride, const int R, const int T) { \
        __m256 acc[2][ROWS_MAX];                                                             \
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps(); \
        int64_t i = 0;                                                                       \
        for (; i + 32 <= n; i += 32) {                                                       \
            __m256 w[2][4];                                                                  \
            UNROLL for (int r = 0; r < R; r++) {                                             \
                const wtype *wr = (const wtype *)(const void *)(vw + (size_t)r * rb) + i;    \
                PREFETCH(wr);                                                                \
                PREFETCH(wr + 16);                                                           \
                UNROLL for (int k = 0; k < 4; k++) w[r][k] = load(wr + 8 * k);               \
            }                                                                                \
            UNROLL for (int t = 0; t < T; t++) {                                             \
                const float *a = (const float *)(const void *)(va + (size_t)t * stride) + i; \
                __m256 s[2];                                                                 \
                UNROLL for (int k = 0; k < 4; k++) {                                         \
                    __m256 ak = _mm256_loadu_ps(a + 8 * k);                                  \
                    if (R > 1) __asm__("" : "+x"(ak));   /* one load for both rows */         \
                    UNROLL for (int r = 0; r < R; r++)                                       \
                        s[r] = k ? _mm256_fmadd_ps(w[r][k], ak, s[r]) : _mm256_mul_ps(w[r][0], ak); \
                }                                                                            \
                UNROLL for (int r = 0; r < R; r++) acc[r][t] = _mm256_add_ps(acc[r][t], s[r]); \
            }                                                                                \
        }                                                                                    \
        for (; i + 8 <= n; i += 8)                                                           \
            UNROLL for (int r = 0; r < R; r++) {                                             \
                const __m256 w0 = load((const wtype *)(const void *)(vw + (size_t)r * rb) + i); \
                UNROLL for (int t = 0; t < T; t++)                                           \
                    acc[r][t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps((const float *)(const void *)(va + (size_t)t * stride) + i), acc[r][t]); \
            }                                                                                \
        UNROLL for (int r = 0; r < R; r++) {                                                 \
            const wtype *wr = (const wtype *)(const void *)(vw + (size_t)r * rb);            \
            UNROLL for (int t = 0; t < T; t++) {                                             \
                const float *a = (const float *)(const void *)(va + (size_t)t * stride);     \
                float sum = hsum_ps(acc[r][t]);                                              \
                for (int64_t k = i; k < n; k++) sum += scalar(wr[k]) * a[k];                 \
                y[(size_t)t * ldy + r] = sum;                                                \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
    static ALWAYS_INLINE void rows_##sfx(int64_t n, float *s, const void *w, const char *va, size_t stride, const int R) { \
        tile_##sfx(n, s, 1, w, 0, va, stride, 1, R);                                         \
    }                                                                                        \
    void hachi_vec_dot_##sfx##_avx2(int64_t n, float *s, const void *w, const void *a) { rows_##sfx(n, s, w, a, 0, 1); } \
    MULTI_FROM_ROWS(multi_##sfx, rows_##sfx)                                                 \
    static void gemm_##sfx(int64_t n, float *y, int64_t ldy, const void *w, size_t rb, int n_rows, const void *a, \
                           size_t stride, int nt) {                                          \
        for (int r0 = 0; r0 < n_rows; r0 += 2)                                               \
            for (int t0 = 0; t0 < nt; t0 += 2) {                                             \
                const char *wr = (const char *)w + (size_t)r0 * rb, *at = (const char *)a + (size_t)t0 * stride; \
                float *yt = y + (size_t)t0 * ldy + r0;                                       \
                if (r0 + 2 <= n_rows && t0 + 2 <= nt) tile_##sfx(n, yt, ldy, wr, rb, at, stride, 2, 2); \
                else if (r0 + 2 <= n_rows) tile_##sfx(n, yt, ldy, wr, rb, at, stride, 2, 1);  \
                else if (t0 + 2 <= nt) tile_##sfx(n, yt, ldy, wr, rb, at, stride, 1, 2);      \
                else tile_##sfx(n, yt, ldy, wr, rb, at, stride, 1, 1);                       \
            }                                                                                \
    }
static inline float id_f32(float x) { return x; }
static inline float bf2f(uint16_t h) { return hachi_bf16_to_f32(h); }
// cppcheck-suppress invalidPointerCast ; the activation rows are f32 arrays (aligned scratch)
FLOAT_KERNELS(f32, float, load_f32, id_f32)
// cppcheck-suppress invalidPointerCast ; the activation rows are f32 arrays (aligned scratch)
FLOAT_KERNELS(f16, uint16_t, load_f16, h2f)
// cppcheck-suppress invalidPointerCast ; the activation rows are f32 arrays (aligned scratch)
FLOAT_KERNELS(bf16, uint16_t, load_bf16, bf2f)

/* ---------------- 32-element blocks x q8_0 ---------------- */

/* |x| . sign(y, x) of one q8_0 activation block: 8 int32 sums of 4 products */
static inline __m256i q8_dot(__m256i ax, __m256i x, const block_q8_0 *a) {
    return dot_i8_pairs(ax, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)a->qs), x));
}
/* the fp16 scales at p0, p1 as floats [d0 d1 d0 d1 d0 d1 d0 d1] */
static inline __m256 f16_pair(const uint16_t *p0, const uint16_t *p1) {
    const __m128i h = _mm_insert_epi16(_mm_cvtsi32_si128(*p0), *p1, 1);
    return _mm256_cvtph_ps(_mm_broadcastd_epi32(h));
}
/* two blocks' int32 sums folded into one vector, lanes alternating block 0, block 1 (exact) */
static inline __m256i fold_pair(__m256i v0, __m256i v1) {
    return _mm256_add_epi32(_mm256_unpacklo_epi32(v0, v1), _mm256_unpackhi_epi32(v0, v1));
}
static inline __m256i unpack_q8_0(const block_q8_0 *b) { return _mm256_loadu_si256((const __m256i *)b->qs); }

/* 32-element weight blocks x q8_0, per row: per pair of blocks the two int32 sum vectors are
 * folded into one (lanes alternating the blocks), converted once and scaled by
 * [dw0*da0, dw1*da1, ...] in one fma: acc = fma(s, v, acc); an odd last block
 * acc = fma(dw*da, v, acc). The unpacked pair, |x| and the weight scales stay in registers
 * for all R rows. */
#define Q32_ROWS(name, wtype, unpack)                                                        \
    static ALWAYS_INLINE void name(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) { \
        const wtype *w = vw;                                                                 \
        const int64_t nb = n / 32;                                                           \
        __m256 acc[ROWS_MAX];                                                                \
        UNROLL for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();                     \
        int64_t i = 0;                                                                       \
        for (; i + 2 <= nb; i += 2) {                                                        \
            PREFETCH(w + i);                                                                 \
            const __m256i x0 = unpack(w + i), x1 = unpack(w + i + 1);                        \
            const __m256i ax0 = _mm256_sign_epi8(x0, x0), ax1 = _mm256_sign_epi8(x1, x1);    \
            const __m256 dw = f16_pair(&w[i].d, &w[i + 1].d);                                \
            UNROLL for (int r = 0; r < R; r++) {                                             \
                const block_q8_0 *a = (const block_q8_0 *)(va + (size_t)r * stride) + i;    \
                const __m256i v = fold_pair(q8_dot(ax0, x0, a), q8_dot(ax1, x1, a + 1));     \
                const __m256 sc = _mm256_mul_ps(dw, f16_pair(&a[0].d, &a[1].d));             \
                acc[r] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(v), acc[r]);                 \
            }                                                                                \
        }                                                                                    \
        if (i < nb) {                                                                        \
            const __m256i x0 = unpack(w + i), ax0 = _mm256_sign_epi8(x0, x0);                \
            const float d0 = h2f(w[i].d);                                                    \
            UNROLL for (int r = 0; r < R; r++) {                                             \
                const block_q8_0 *a = (const block_q8_0 *)(va + (size_t)r * stride) + i;    \
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * h2f(a->d)),                     \
                                         _mm256_cvtepi32_ps(q8_dot(ax0, x0, a)), acc[r]);    \
            }                                                                                \
        }                                                                                    \
        UNROLL for (int r = 0; r < R; r++) s[r] = hsum_ps(acc[r]);                           \
    }
Q32_ROWS(rows_q8_0, block_q8_0, unpack_q8_0)
void hachi_vec_dot_q8_0_q8_0_avx2(int64_t n, float *s, const void *w, const void *a) { rows_q8_0(n, s, w, a, 0, 1); }
MULTI_FROM_ROWS(multi_q8_0, rows_q8_0)

/* q4_0 x q8_0 with activation extras. The weights' unsigned nibbles q (x = q - 8) go into
 * maddubs as they are: sum(x*y) = sum(q*y) - 8*sum(y), the last term precomputed per
 * activation block (exact integers, so the block sums equal the signed formulation's).
 * Extras: per group of 4 q8_0 blocks, 32 bytes: int32 -8*sum(qs) of each block (negative, so
 * that a VNNI dot chain can start from it), then float d of each block (0 past the last
 * block). */
#define Q4_0_GROUP 4
#ifndef Q4PF
#define Q4PF(p) PREFETCH(p)
#endif
/* block b's extras in a q4_0 activation row of nb blocks: -8*sum(y) and d */
static ALWAYS_INLINE void q4_0_extra(const char *row, int64_t nb, int64_t b, int32_t *sy, float *da) {
    const char *ex = row + (size_t)nb * sizeof(block_q8_0) + (size_t)(b / Q4_0_GROUP) * 32 + (size_t)(b % Q4_0_GROUP) * 4;
    memcpy(sy, ex, 4);
    memcpy(da, ex + 16, 4);
}
static size_t act_extra_q4_0(int64_t n) { return (size_t)((n / QK8_0 + Q4_0_GROUP - 1) / Q4_0_GROUP) * 32; }
static ALWAYS_INLINE void act_prep_sums(int64_t n, void *va, int64_t b0, int64_t b1, const int32_t mul) {
    const int64_t nb = n / QK8_0;
    const block_q8_0 *a = va;
    char *ex = (char *)va + nb * (int64_t)sizeof(block_q8_0);
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int64_t g = b0 / Q4_0_GROUP; g * Q4_0_GROUP < b1; g++) {   /* b0 % 4 == 0 */
        int32_t sums[Q4_0_GROUP] = {0};
        float d[Q4_0_GROUP] = {0};
        for (int k = 0; k < Q4_0_GROUP && g * Q4_0_GROUP + k < nb; k++) {
            const block_q8_0 *b = a + g * Q4_0_GROUP + k;
            const __m256i y = _mm256_loadu_si256((const __m256i *)b->qs);
            const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, y), ones16);
            __m128i t = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
            t = _mm_add_epi32(t, _mm_unpackhi_epi64(t, t));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 1));
            sums[k] = mul * _mm_cvtsi128_si32(t);
            d[k] = h2f(b->d);
        }
        memcpy(ex + 32 * g, sums, 16);
        memcpy(ex + 32 * g + 16, d, 16);
    }
}
static void act_prep_q4_0(int64_t n, void *va, int64_t b0, int64_t b1) { act_prep_sums(n, va, b0, b1, -8); }
/* Q8_0's extras in the same layout: -128*sum(y) (block_q8_0x8 stores the weights + 128; the VNNI
 * kernels' vpdpbusd chains start from it, this table's x8 kernel adds it) and d */
static void act_prep_q8_0(int64_t n, void *va, int64_t b0, int64_t b1) { act_prep_sums(n, va, b0, b1, -128); }

/* the 32 unsigned nibbles of a q4_0 block: bytes 0..15 low nibbles, 16..31 high nibbles */
static ALWAYS_INLINE __m256i q4_0_nibbles(const block_q4_0 *b) {
    const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b->qs));
    return _mm256_and_si256(_mm256_srlv_epi64(t, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0F));
}
/* the fp16 scales of 4 consecutive q4_0 blocks as floats [d0 d1 d2 d3 d0 d1 d2 d3] */
static ALWAYS_INLINE __m256 q4_0_scales4(const block_q4_0 *w) {
    const uint64_t h = (uint64_t)w[0].d | (uint64_t)w[1].d << 16 | (uint64_t)w[2].d << 32 | (uint64_t)w[3].d << 48;
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h));
    return _mm256_set_m128(f, f);
}
/* int32 partial sums of q*y of one block, 4 adjacent products per lane */
static ALWAYS_INLINE __m256i q4_0_dot(__m256i q, const block_q8_0 *a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)a->qs)), _mm256_set1_epi16(1));
}

/* per row: per group of 4 blocks the 4 int32 vectors are folded into one
 * [b0 b1 b2 b3 | b0 b1 b2 b3] (low half: elements 0..15 of each block, high half 16..31),
 * the extras' -8*sum(y) added to the low half, converted once and scaled by
 * [dw_k*da_k] in one fma: acc = fma(s, v, acc). Left blocks (nb % 4), one at a time:
 * acc = fma(dw*da, v - 8*sum(y) in lane 0, acc). The nibbles and weight scales stay in
 * registers for all R rows. */
static ALWAYS_INLINE void rows_q4_0(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    const block_q4_0 *w = vw;
    const int64_t nb = n / QK8_0;
    const size_t ex_off = (size_t)nb * sizeof(block_q8_0);
    __m256 acc[ROWS_MAX];
    UNROLL for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + Q4_0_GROUP <= nb; i += Q4_0_GROUP) {
        Q4PF(w + i);
        const __m256i q0 = q4_0_nibbles(w + i), q1 = q4_0_nibbles(w + i + 1);
        const __m256i q2 = q4_0_nibbles(w + i + 2), q3 = q4_0_nibbles(w + i + 3);
        const __m256 dw = q4_0_scales4(w + i);
        UNROLL for (int r = 0; r < R; r++) {
            const char *ar = va + (size_t)r * stride;
            const block_q8_0 *a = (const block_q8_0 *)ar + i;
            const char *ex = ar + ex_off + (size_t)i * 8;
            const __m256i f01 = fold_pair(q4_0_dot(q0, a), q4_0_dot(q1, a + 1));
            const __m256i f23 = fold_pair(q4_0_dot(q2, a + 2), q4_0_dot(q3, a + 3));
            __m256i v = _mm256_add_epi32(_mm256_unpacklo_epi64(f01, f23), _mm256_unpackhi_epi64(f01, f23));
            v = _mm256_add_epi32(v, _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)ex)));
            const __m256 sc = _mm256_mul_ps(dw, _mm256_broadcast_ps((const __m128 *)(ex + 16)));
            acc[r] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(v), acc[r]);
        }
    }
    for (; i < nb; i++) {
        const __m256i q0 = q4_0_nibbles(w + i);
        const float d0 = h2f(w[i].d);
        UNROLL for (int r = 0; r < R; r++) {
            const char *ar = va + (size_t)r * stride;
            int32_t sy;
            float da;
            q4_0_extra(ar, nb, i, &sy, &da);
            const __m256i v = _mm256_add_epi32(q4_0_dot(q0, (const block_q8_0 *)ar + i),
                                               _mm256_zextsi128_si256(_mm_cvtsi32_si128(sy)));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * da), _mm256_cvtepi32_ps(v), acc[r]);
        }
    }
    UNROLL for (int r = 0; r < R; r++) s[r] = hsum_ps(acc[r]);
}
void hachi_vec_dot_q4_0_q8_0_avx2(int64_t n, float *s, const void *w, const void *a) { rows_q4_0(n, s, w, a, 0, 1); }
MULTI_FROM_ROWS(multi_q4_0, rows_q4_0)

/* 8 interleaved q4_0 rows (block_q4_0x8) against R activation rows: a 32-byte load holds 4
 * nibble bytes of each weight row, a broadcast of 4 activation bytes meets all 8 at once, so
 * the int32 lanes are the 8 rows' sums and nothing is reduced horizontally. Per block and
 * row the 8 maddubs products add up in int16 (|sum| <= 8 * 2 * 15 * 128 < 2^15), one madd
 * makes int32, the extras' -8*sum(y) is added, then acc = fma(dw*da, v, acc): exactly
 * ref's order, so results equal ref's bit for bit and never depend on R. */
static ALWAYS_INLINE __m256i bcast32(const int8_t *p) {
    int32_t x;
    memcpy(&x, p, 4);
    return _mm256_set1_epi32(x);
}
static ALWAYS_INLINE void x8_rows_q4_0(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    const block_q4_0x8 *w = vw;
    const int64_t nb = n / QK8_0;
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc[ROWS_MAX];
    UNROLL for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        UNROLL for (int l = 0; l < 3; l++) _mm_prefetch((const char *)(w + b) + AVX2_PF_DIST + 64 * l, _MM_HINT_T0);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w[b].d));
        __m256i p[ROWS_MAX];
        UNROLL for (int c = 0; c < 4; c++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * c));
            const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            UNROLL for (int r = 0; r < R; r++) {
                const block_q8_0 *a = (const block_q8_0 *)(va + (size_t)r * stride) + b;
                const __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast32(a->qs + 4 * c)),
                                                   _mm256_maddubs_epi16(hi, bcast32(a->qs + 16 + 4 * c)));
                p[r] = c ? _mm256_add_epi16(p[r], t) : t;
                __asm__("" : "+x"(p[r]));   /* keep the sum in a register: gcc otherwise spills every product */
            }
        }
        UNROLL for (int r = 0; r < R; r++) {
            int32_t sy;
            float da;
            q4_0_extra(va + (size_t)r * stride, nb, b, &sy, &da);
            const __m256i v = _mm256_add_epi32(_mm256_madd_epi16(p[r], ones), _mm256_set1_epi32(sy));
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(da)), _mm256_cvtepi32_ps(v), acc[r]);
        }
    }
    UNROLL for (int r = 0; r < R; r++) _mm256_storeu_ps(s + 8 * r, acc[r]);
}
ROWS_FROM(x8_q4_0, x8_rows_q4_0, 8)

/* 8 interleaved q8_0 rows (block_q8_0x8: each value + 128, an unsigned byte u = 16h + l) against
 * R activation rows: per 32-byte load (4 values of each row) two maddubs, l and h against the
 * same broadcast of 4 activation bytes, each summed over the block's 8 loads in int16 (8 * 2 * 15
 * * 127 < 2^15); then madd(L, 1) + madd(H, 16) + the extras' -128*sum(y) is the exact sum(w*y),
 * and acc = fma(dw*da, v, acc) in block order as ref does: bit for bit, whatever R. The float
 * sums live in an L1 array (the 8 int16 sums fill the registers). */
static ALWAYS_INLINE void x8_rows_q8_0(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    const block_q8_0x8 *w = vw;
    const int64_t nb = n / QK8_0;
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1), sixteen = _mm256_set1_epi16(16);
    _Alignas(32) float acc[ROWS_MAX][8];
    UNROLL for (int r = 0; r < R; r++) _mm256_store_ps(acc[r], _mm256_setzero_ps());
    for (int64_t b = 0; b < nb; b++) {
        UNROLL for (int l = 0; l < 5; l++) _mm_prefetch((const char *)(w + b) + AVX2_PF_DIST + 64 * l, _MM_HINT_T0);
        __m256i L[ROWS_MAX], H[ROWS_MAX];
        UNROLL for (int c = 0; c < 8; c++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * c));
            const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            UNROLL for (int r = 0; r < R; r++) {
                const __m256i y = bcast32(((const block_q8_0 *)(va + (size_t)r * stride) + b)->qs + 4 * c);
                const __m256i tl = _mm256_maddubs_epi16(lo, y), th = _mm256_maddubs_epi16(hi, y);
                L[r] = c ? _mm256_add_epi16(L[r], tl) : tl;
                H[r] = c ? _mm256_add_epi16(H[r], th) : th;
                __asm__("" : "+x"(L[r]), "+x"(H[r]));   /* as x8_rows_q4_0: the sums stay in registers */
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w[b].d));
        UNROLL for (int r = 0; r < R; r++) {
            int32_t sy;
            float da;
            q4_0_extra(va + (size_t)r * stride, nb, b, &sy, &da);
            const __m256i v = _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(L[r], ones), _mm256_madd_epi16(H[r], sixteen)),
                                               _mm256_set1_epi32(sy));
            _mm256_store_ps(acc[r], _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(da)), _mm256_cvtepi32_ps(v), _mm256_load_ps(acc[r])));
        }
    }
    UNROLL for (int r = 0; r < R; r++) _mm256_storeu_ps(s + 8 * r, _mm256_load_ps(acc[r]));
}
ROWS_FROM(x8_q8_0, x8_rows_q8_0, 8)

/* x8_rows_q4_0's work for two groups of 8 rows (g0, g1) and R <= 4 tokens: each broadcast of 4
 * activation bytes meets both groups' nibbles, so a token's block takes 5 broadcasts a group
 * instead of 10; the 8 int16 sums fill the registers, so the float sums live in an L1 array.
 * Each lane's arithmetic is x8_rows_q4_0's (exact int16 and int32 sums, then one fma a block
 * in block order): bit for bit the same. */
static ALWAYS_INLINE void x16_rows_q4_0(int64_t n, float *y, int64_t ldy, const block_q4_0x8 *g0, const block_q4_0x8 *g1,
                                        const char *va, size_t stride, const int R) {
    const int64_t nb = n / QK8_0;
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    _Alignas(32) float acc[ROWS_MAX][2][8];
    UNROLL for (int r = 0; r < R; r++) {
        _mm256_store_ps(acc[r][0], _mm256_setzero_ps());
        _mm256_store_ps(acc[r][1], _mm256_setzero_ps());
    }
    for (int64_t b = 0; b < nb; b++) {
        UNROLL for (int l = 0; l < 3; l++) {
            _mm_prefetch((const char *)(g0 + b) + 1024 + 64 * l, _MM_HINT_T0);
            _mm_prefetch((const char *)(g1 + b) + 1024 + 64 * l, _MM_HINT_T0);
        }
        __m256i p[ROWS_MAX][2];
        UNROLL for (int c = 0; c < 4; c++) {
            const __m256i v0 = _mm256_loadu_si256((const __m256i *)(g0[b].qs + 32 * c));
            const __m256i v1 = _mm256_loadu_si256((const __m256i *)(g1[b].qs + 32 * c));
            const __m256i lo0 = _mm256_and_si256(v0, m4), hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
            const __m256i lo1 = _mm256_and_si256(v1, m4), hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
            UNROLL for (int r = 0; r < R; r++) {
                const block_q8_0 *a = (const block_q8_0 *)(va + (size_t)r * stride) + b;
                const __m256i yl = bcast32(a->qs + 4 * c), yh = bcast32(a->qs + 16 + 4 * c);
                const __m256i t0 = _mm256_add_epi16(_mm256_maddubs_epi16(lo0, yl), _mm256_maddubs_epi16(hi0, yh));
                const __m256i t1 = _mm256_add_epi16(_mm256_maddubs_epi16(lo1, yl), _mm256_maddubs_epi16(hi1, yh));
                p[r][0] = c ? _mm256_add_epi16(p[r][0], t0) : t0;
                p[r][1] = c ? _mm256_add_epi16(p[r][1], t1) : t1;
                __asm__("" : "+x"(p[r][0]), "+x"(p[r][1]));
            }
        }
        const __m256 dw0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g0[b].d));
        const __m256 dw1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g1[b].d));
        UNROLL for (int r = 0; r < R; r++) {
            int32_t sy;
            float da;
            q4_0_extra(va + (size_t)r * stride, nb, b, &sy, &da);
            const __m256i c8 = _mm256_set1_epi32(sy);
            const __m256 vda = _mm256_set1_ps(da);
            const __m256i v0 = _mm256_add_epi32(_mm256_madd_epi16(p[r][0], ones), c8);
            const __m256i v1 = _mm256_add_epi32(_mm256_madd_epi16(p[r][1], ones), c8);
            _mm256_store_ps(acc[r][0], _mm256_fmadd_ps(_mm256_mul_ps(dw0, vda), _mm256_cvtepi32_ps(v0), _mm256_load_ps(acc[r][0])));
            _mm256_store_ps(acc[r][1], _mm256_fmadd_ps(_mm256_mul_ps(dw1, vda), _mm256_cvtepi32_ps(v1), _mm256_load_ps(acc[r][1])));
        }
    }
    UNROLL for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(y + (size_t)r * ldy, _mm256_load_ps(acc[r][0]));
        _mm256_storeu_ps(y + (size_t)r * ldy + 8, _mm256_load_ps(acc[r][1]));
    }
}

GEMM_FROM_PAIRS(gemm_q4_0_x8, x16_rows_q4_0, block_q4_0x8, QK8_0, x8_q4_0, 4, GEMM_CASES3)

/* x = q*d + m (q unsigned): d*da*sum(q*qa) + m*da*sum(qa) */
void hachi_vec_dot_q4_1_q8_0_avx2(int64_t n, float *s, const void *vw, const void *va) {
    const block_q4_1 *w = vw;
    const block_q8_0 *a = va;
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m256i x = nibbles_32(w[i].qs);
        const __m256i y = _mm256_loadu_si256((const __m256i *)a[i].qs);
        const __m256i xy = _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), ones16);
        const __m256i sy = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, y), ones16);
        const float da = h2f(a[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(w[i].d) * da), _mm256_cvtepi32_ps(xy), acc);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(h2f(w[i].m) * da), _mm256_cvtepi32_ps(sy), accm);
    }
    *s = hsum_ps(_mm256_add_ps(acc, accm));
}

/* q5_0: nibble | (bit ? 0 : 0xF0) reads as the signed int8 value q - 16 */
void hachi_vec_dot_q5_0_q8_0_avx2(int64_t n, float *s, const void *vw, const void *va) {
    const block_q5_0 *w = vw;
    const block_q8_0 *a = va;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m256i hi = _mm256_andnot_si256(bytes_from_bits_32(w[i].qh), _mm256_set1_epi8((char)0xF0));
        const __m256i x = _mm256_or_si256(nibbles_32(w[i].qs), hi);
        const __m256i y = _mm256_loadu_si256((const __m256i *)a[i].qs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(w[i].d) * h2f(a[i].d)), dot_s8_f(x, y), acc);
    }
    *s = hsum_ps(acc);
}

/* ---------------- K-quants x q8_K ---------------- */

/* scales[12] -> bytes 0..7: the 8 six-bit scales, bytes 8..15: the 8 six-bit mins */
static inline void unpack_k_scales(const uint8_t *scales, uint32_t u[4]) {
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    memcpy(u, scales, 12);
    u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);   /* mins 4..7 */
    const uint32_t m03 = u[1] & k1;                          /* mins 0..3 */
    u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);          /* scales 4..7 */
    u[2] = m03;
    u[0] &= k1;                                              /* scales 0..3 */
}

/* sum over the 8 sub-blocks of min * (bsum pair) as 4 int32 */
static inline __m128i k_mins_dot(const uint32_t u[4], const int16_t *bsums) {
    const __m128i mins = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)u[3], (int)u[2]));
    const __m256i bs = _mm256_loadu_si256((const __m256i *)bsums);
    const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    return _mm_madd_epi16(mins, pairs);
}

void hachi_vec_dot_q4_K_q8_K_avx2(int64_t n, float *s, const void *vw, const void *va) {
    const block_q4_K *w = vw;
    const block_q8_K *a = va;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint32_t u[4];
        unpack_k_scales(w[i].scales, u);
        const uint8_t *sc = (const uint8_t *)u;
        const float d = a[i].d * h2f(w[i].d), dmin = -a[i].d * h2f(w[i].dmin);
        accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k_mins_dot(u, a[i].bsums)), accm);
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {   /* 32 bytes: sub-block 2c low nibbles, 2c+1 high */
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * c));
            const __m256i ql = _mm256_and_si256(q, m4), qh = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i yl = _mm256_loadu_si256((const __m256i *)(a[i].qs + 64 * c));
            const __m256i yh = _mm256_loadu_si256((const __m256i *)(a[i].qs + 64 * c + 32));
            const __m256i pl = _mm256_madd_epi16(_mm256_set1_epi16(sc[2 * c]), _mm256_maddubs_epi16(ql, yl));
            const __m256i ph = _mm256_madd_epi16(_mm256_set1_epi16(sc[2 * c + 1]), _mm256_maddubs_epi16(qh, yh));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps(acc) + hsum_ps128(accm);
}

/* multi: the 8 sub-blocks' 4-bit values and scale vectors are unpacked once per block */
static void multi_q4_K(int64_t n, float *s, const void *vw, const void *va, size_t stride, int na) {
    const block_q4_K *w = vw;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc[16];
    __m128 accm[16];
    for (int r = 0; r < na; r++) { acc[r] = _mm256_setzero_ps(); accm[r] = _mm_setzero_ps(); }
    for (int64_t i = 0; i < n / QK_K; i++) {
        PREFETCH(w + i);
        PREFETCH((const char *)(w + i) + 64);
        uint32_t u[4];
        unpack_k_scales(w[i].scales, u);
        const uint8_t *sc = (const uint8_t *)u;
        __m256i q[8], scv[8];
        for (int c = 0; c < 4; c++) {
            const __m256i b = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * c));
            q[2 * c] = _mm256_and_si256(b, m4);
            q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
        }
        for (int k = 0; k < 8; k++) scv[k] = _mm256_set1_epi16(sc[k]);
        const float dw = h2f(w[i].d), dmw = -h2f(w[i].dmin);
        for (int r = 0; r < na; r++) {
            const block_q8_K *a = (const block_q8_K *)((const char *)va + (size_t)r * stride) + i;
            __m256i sumi = _mm256_setzero_si256();
            for (int k = 0; k < 8; k++) {
                const __m256i y = _mm256_loadu_si256((const __m256i *)(a->qs + 32 * k));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scv[k], _mm256_maddubs_epi16(q[k], y)));
            }
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(a->d * dw), _mm256_cvtepi32_ps(sumi), acc[r]);
            accm[r] = _mm_fmadd_ps(_mm_set1_ps(a->d * dmw), _mm_cvtepi32_ps(k_mins_dot(u, a->bsums)), accm[r]);
        }
    }
    for (int r = 0; r < na; r++) s[r] = hsum_ps(acc[r]) + hsum_ps128(accm[r]);
}

/* 8 interleaved q4_K rows (block_q4_Kx8; bsz its size) or q5_K rows (block_q5_Kx8, high: the
 * values' 5th bit from its qh) against R activation rows. Per block the 8 rows' scales and
 * mins are decoded once for all R rows (x86_q4k_x8.h). Per sub-block j and row: 8 maddubs (4
 * value bytes of each weight row against a broadcast of 4 activation bytes) summed in int16
 * (q4_K: |sum| <= 8 * 2 * 15 * 128 < 2^15; q5_K in two halves of 4, <= 4 * 2 * 31 * 128), one
 * madd per int16 sum with sc[j] of each weight row in both int16 lanes of that row -> int32 per
 * row, summed over the 8 sub-blocks; the mins: 4 madds of the rows' (m[2p], m[2p+1]) against
 * (bsum pair 2p, bsum pair 2p+1). Then acc = fma(dw*da, sumi, acc), acc = fma(-(dmw*da), summ,
 * acc): exactly ref's order, so results equal ref's bit for bit and never depend on R. */
static ALWAYS_INLINE void x8_rows_kx8(int64_t n, float *s, const char *vw, const size_t bsz, const bool high,
                                      const char *va, size_t stride, const int R) {
    /* from 8 bytes in each 128-bit half: int16 lanes 2r, 2r+1 = byte r (rows 0..3 in half 0, 4..7 in half 1) */
    const __m256i dup = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,
                                         4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
    __m256 acc[ROWS_MAX];
    UNROLL for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; b++) {
        const block_q4_Kx8 *w = (const block_q4_Kx8 *)(const void *)(vw + (size_t)b * bsz);
        /* prefetched: AVX2_PF_DIST ahead, a block's worth per block (the next block instead: E2B
         * Q4_K_M decode 1.08x the time with this table on Zen 5, in one process) */
        const char *next = (const char *)w + AVX2_PF_DIST;
        _Alignas(32) uint8_t sc[64];   /* sc[8j + r]: row r's 6-bit scale of sub-block j */
        q4k_x8_scales(w->scales, sc);
        __m256i sumi[ROWS_MAX];
        UNROLL for (int j = 0; j < 8; j++) {
            KX8_PREFETCH(next, high, j, _MM_HINT_T0);
            int64_t s8;
            memcpy(&s8, sc + 8 * j, 8);
            const __m256i scv = _mm256_shuffle_epi8(_mm256_set1_epi64x(s8), dup);
            __m256i p[ROWS_MAX];
            UNROLL for (int c = 0; c < 8; c++) {
                const __m256i q = kx8_values(w, high, j, c);
                UNROLL for (int r = 0; r < R; r++) {
                    const block_q8_K *a = (const block_q8_K *)(va + (size_t)r * stride) + b;
                    const __m256i t = _mm256_maddubs_epi16(q, bcast32(a->qs + 32 * j + 4 * c));
                    p[r] = c == 0 || (high && c == 4) ? t : _mm256_add_epi16(p[r], t);
                    __asm__("" : "+x"(p[r]));   /* keep the sum in a register: gcc otherwise spills every product */
                }
                if (high && c == 3) {
                    UNROLL for (int r = 0; r < R; r++) {
                        const __m256i t = _mm256_madd_epi16(p[r], scv);
                        sumi[r] = j ? _mm256_add_epi32(sumi[r], t) : t;
                    }
                }
            }
            UNROLL for (int r = 0; r < R; r++) {
                const __m256i t = _mm256_madd_epi16(p[r], scv);
                sumi[r] = j || high ? _mm256_add_epi32(sumi[r], t) : t;
            }
        }
        const kx8_tail tl = kx8_tail_of(w);
        UNROLL for (int r = 0; r < R; r++)
            acc[r] = kx8_accumulate(acc[r], &tl, sumi[r], va + (size_t)r * stride, n / QK_K, b);
    }
    UNROLL for (int r = 0; r < R; r++) _mm256_storeu_ps(s + 8 * r, acc[r]);
}
static ALWAYS_INLINE void x8_rows_q4_K(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    x8_rows_kx8(n, s, vw, sizeof(block_q4_Kx8), false, va, stride, R);
}
static ALWAYS_INLINE void x8_rows_q5_K(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    x8_rows_kx8(n, s, vw, sizeof(block_q5_Kx8), true, va, stride, R);
}
ROWS_FROM(x8_q4_K, x8_rows_q4_K, 8)
ROWS_FROM(x8_q5_K, x8_rows_q5_K, 8)

/* 8 interleaved q6_K rows (block_q6_Kx8) against R activation rows. Per sub-block j of 16 and
 * row: 4 maddubs of the rows' unsigned 6-bit values v (4 of each row a vector, Q6X8_VALUES)
 * against broadcasts of 4 activation bytes, summed two by two in int16 (|sum| <= 4 * 63 * 128
 * < 2^15), each pair's sum times sc[j] of each weight row (madd, the int8 scale sign-extended
 * into both int16 lanes of its row) -> int32 sum_j sc_j * sum(v*y) per row. The offset of v
 * (v - 32) once a block: 8 madds of the rows' scale pairs (sc[2p], sc[2p+1]) against the bsum
 * pairs, 32 * sum_j sc_j * bsum_j, subtracted: the exact integer of ref. Then acc = fma(dw*da,
 * sumi, acc) in block order as ref does, bit for bit, whatever R. */
static ALWAYS_INLINE void x8_rows_q6_K(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    const block_q6_Kx8 *w = vw;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    /* as x8_rows_kx8's, byte r in the high byte of lanes 2r, 2r+1 (then an arithmetic shift) */
    const __m256i dup = _mm256_setr_epi8(-1, 0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3,
                                         -1, 4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7);
    __m256 acc[ROWS_MAX];
    UNROLL for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; b++) {
        const char *next = (const char *)(w + b) + AVX2_PF_DIST;
        __m256i sumi[ROWS_MAX];
        for (int u = 0; u < QK_K / 32; u++) {
            UNROLL for (int sb = 0; sb < 2; sb++) {
                const int j = 2 * u + sb;
                _mm_prefetch(next + 128 * j, _MM_HINT_T0);   /* 16 x 128 >= 1680 bytes a block */
                _mm_prefetch(next + 128 * j + 64, _MM_HINT_T0);
                __m256i q[4];
                Q6X8_VALUES(__m256i, v256, load256, w[b].ql, w[b].qh, u, sb, q);
                int64_t s8;
                memcpy(&s8, w[b].scales[j], 8);
                const __m256i scv = _mm256_srai_epi16(_mm256_shuffle_epi8(_mm256_set1_epi64x(s8), dup), 8);
                UNROLL for (int r = 0; r < R; r++) {
                    const int8_t *y = ((const block_q8_K *)(va + (size_t)r * stride) + b)->qs + 16 * j;
                    const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(q[0], bcast32(y)), _mm256_maddubs_epi16(q[1], bcast32(y + 4)));
                    const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(q[2], bcast32(y + 8)), _mm256_maddubs_epi16(q[3], bcast32(y + 12)));
                    const __m256i t = _mm256_add_epi32(_mm256_madd_epi16(p0, scv), _mm256_madd_epi16(p1, scv));
                    sumi[r] = j ? _mm256_add_epi32(sumi[r], t) : t;
                }
            }
        }
        __m256i scp[8];   /* int16 lanes 2r, 2r+1: row r's sc[2p], sc[2p + 1] */
        UNROLL for (int k = 0; k < 8; k++)
            scp[k] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)w[b].scales[2 * k]),
                                                            _mm_loadl_epi64((const __m128i *)w[b].scales[2 * k + 1])));
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w[b].d));
        UNROLL for (int r = 0; r < R; r++) {
            const block_q8_K *a = (const block_q8_K *)(va + (size_t)r * stride) + b;
            __m256i off = _mm256_madd_epi16(scp[0], bcast32((const int8_t *)a->bsums));
            UNROLL for (int k = 1; k < 8; k++) off = _mm256_add_epi32(off, _mm256_madd_epi16(scp[k], bcast32((const int8_t *)(a->bsums + 2 * k))));
            const __m256i t = _mm256_sub_epi32(sumi[r], _mm256_slli_epi32(off, 5));
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a->d)), _mm256_cvtepi32_ps(t), acc[r]);
        }
    }
    UNROLL for (int r = 0; r < R; r++) _mm256_storeu_ps(s + 8 * r, acc[r]);
}
ROWS_FROM(x8_q6_K, x8_rows_q6_K, 8)

/* s + (the 8 rows' sums of one q4_K / q5_K sub-block (q: its 8 value vectors) against the token's
 * 32 bytes at ya) times the rows' scales (scv: row r's in int16 lanes 2r, 2r + 1): x8_rows_kx8's
 * maddubs, int16 sums and madds for one token, in two chains of 4 (q5_K: each chain's int16 sum
 * is one of its halves, <= 4 * 2 * 31 * 128; q4_K's two chains added in int16 first, as its one
 * sum of 8 is). One asm, so that nothing spills: the 8 vectors, scv, two chains and two
 * broadcasts fill 13 registers (gcc's own schedule of the unrolled tokens spilled the values and
 * ran 1.3x x8's time). The running sum s in L1. */
static ALWAYS_INLINE void kx8a_subblock(__m256i *s, const __m256i *q, __m256i scv, const int8_t *ya, const bool high) {
    __m256i p0, p1, b0, b1;
#define KX8A_STEP(c)                                                                   \
    "vpbroadcastd " #c "*4(%[a]), %[b0]\n\t"                                           \
    "vpbroadcastd 16+" #c "*4(%[a]), %[b1]\n\t"                                        \
    "vpmaddubsw %[b0], %[q" #c "], %[b0]\n\t"                                          \
    "vpmaddubsw %[b1], %[q4" #c "], %[b1]\n\t"                                         \
    "vpaddw %[b0], %[p0], %[p0]\n\t"                                                   \
    "vpaddw %[b1], %[p1], %[p1]\n\t"
#define KX8A_OPERANDS                                                                                        \
    : [s] "+m"(*s), [p0] "=&x"(p0), [p1] "=&x"(p1), [b0] "=&x"(b0), [b1] "=&x"(b1)                           \
    : [a] "r"(ya), [q0] "x"(q[0]), [q1] "x"(q[1]), [q2] "x"(q[2]), [q3] "x"(q[3]), [q40] "x"(q[4]), [q41] "x"(q[5]), \
      [q42] "x"(q[6]), [q43] "x"(q[7]), [sc] "x"(scv), "m"(*(const int8_t (*)[32])ya)
#define KX8A_FIRST                                                                     \
    "vpbroadcastd 0(%[a]), %[b0]\n\t"                                                  \
    "vpbroadcastd 16(%[a]), %[b1]\n\t"                                                 \
    "vpmaddubsw %[b0], %[q0], %[p0]\n\t"                                               \
    "vpmaddubsw %[b1], %[q40], %[p1]\n\t"
    if (high)
        __asm__(KX8A_FIRST KX8A_STEP(1) KX8A_STEP(2) KX8A_STEP(3)
                "vpmaddwd %[sc], %[p0], %[p0]\n\t"
                "vpmaddwd %[sc], %[p1], %[p1]\n\t"
                "vpaddd %[p1], %[p0], %[p0]\n\t"
                "vpaddd %[s], %[p0], %[p0]\n\t"
                "vmovdqa %[p0], %[s]" KX8A_OPERANDS);
    else
        __asm__(KX8A_FIRST KX8A_STEP(1) KX8A_STEP(2) KX8A_STEP(3)
                "vpaddw %[p1], %[p0], %[p0]\n\t"
                "vpmaddwd %[sc], %[p0], %[p0]\n\t"
                "vpaddd %[s], %[p0], %[p0]\n\t"
                "vmovdqa %[p0], %[s]" KX8A_OPERANDS);
#undef KX8A_FIRST
#undef KX8A_OPERANDS
#undef KX8A_STEP
}

/* the rows' scales of a sub-block (sc8: their bytes) in int16 lanes 2r, 2r + 1, as kx8a_subblock's vpmaddwd takes them */
static ALWAYS_INLINE __m256i kx8a_scales(const uint8_t *sc8) {
    const __m256i dup = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,
                                         4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
    int64_t s8;
    memcpy(&s8, sc8, 8);
    return _mm256_shuffle_epi8(_mm256_set1_epi64x(s8), dup);
}
/* the Q4_K / Q5_K GEMMs: x86_kx8_gemm.h's, the token loop not unrolled (as one asm a token, 0.94x
 * the time of gcc's unrolled schedule, which spilled the values) */
#define KX8G_SCALES kx8a_scales
#define KX8G_SUBBLOCK kx8a_subblock
#define KX8G_PF_DIST AVX2_PF_DIST
#define KX8G_PF_HINT _MM_HINT_T0
#define KX8G_TOKENS
#include "kernels/x86_kx8_gemm.h"

/* q5_K: the 5th bit of sub-block 2c is bit 2c of qh[l], of sub-block 2c+1 bit 2c+1 */
void hachi_vec_dot_q5_K_q8_K_avx2(int64_t n, float *s, const void *vw, const void *va) {
    const block_q5_K *w = vw;
    const block_q8_K *a = va;
    const __m256i m4 = _mm256_set1_epi8(0xF), m1 = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint32_t u[4];
        unpack_k_scales(w[i].scales, u);
        const uint8_t *sc = (const uint8_t *)u;
        const float d = a[i].d * h2f(w[i].d), dmin = -a[i].d * h2f(w[i].dmin);
        accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k_mins_dot(u, a[i].bsums)), accm);
        __m256i hb = _mm256_loadu_si256((const __m256i *)w[i].qh);
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * c));
            const __m256i hl = _mm256_slli_epi16(_mm256_and_si256(hb, m1), 4);
            const __m256i hh = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), m1), 4);
            hb = _mm256_srli_epi16(hb, 2);
            const __m256i ql = _mm256_or_si256(_mm256_and_si256(q, m4), hl);
            const __m256i qh = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), hh);
            const __m256i yl = _mm256_loadu_si256((const __m256i *)(a[i].qs + 64 * c));
            const __m256i yh = _mm256_loadu_si256((const __m256i *)(a[i].qs + 64 * c + 32));
            const __m256i pl = _mm256_madd_epi16(_mm256_set1_epi16(sc[2 * c]), _mm256_maddubs_epi16(ql, yl));
            const __m256i ph = _mm256_madd_epi16(_mm256_set1_epi16(sc[2 * c + 1]), _mm256_maddubs_epi16(qh, yh));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps(acc) + hsum_ps128(accm);
}

/* q6_K, one half of 128: quarter k's unsigned 6-bit values (ql nibble | qh 2 bits << 4)
 * in q[k]; its low 16 bytes use scale 2k, its high 16 bytes scale 2k+1 of the half. The 2
 * high bits are masked in place and shifted within their byte (4 ops per quarter). */
static ALWAYS_INLINE void q6_unpack_half(const uint8_t *ql, const uint8_t *qh, __m256i q[4]) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3);
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
    q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
    q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(h, _mm256_slli_epi16(m2, 2)), 2));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(h, _mm256_slli_epi16(m2, 4)));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                           _mm256_srli_epi16(_mm256_and_si256(h, _mm256_slli_epi16(m2, 6)), 2));
}

#ifndef Q6PF
#define Q6PF(p) (PREFETCH(p), PREFETCH((const char *)(p) + 64), PREFETCH((const char *)(p) + 128), PREFETCH((const char *)(p) + 192))
#endif
/* q6_K x q8_K, per row: sumi = sum_k madd(scale pair k, maddubs(q_k, y_k)) over the 8
 * quarters (unsigned 6-bit q), minus the -32 offset 32 * sum_j sc[j] * bsums[j] (8 int32),
 * all exact; acc = fma(da*dw, float(sumi), acc). The quarters and the scale vectors
 * ([sc[2k] x8 | sc[2k+1] x8] int16, one byte shuffle each from the sign-extended scales) are
 * unpacked once per block for all R rows. */
static ALWAYS_INLINE void rows_q6_K(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    const block_q6_K *w = vw;
    /* int16 lane 2k of each 128-bit half to the low half, lane 2k+1 to the high half */
    const __m256i sh0 = _mm256_set_epi64x(0x0302030203020302, 0x0302030203020302, 0x0100010001000100, 0x0100010001000100);
    const __m256i sh2 = _mm256_add_epi8(sh0, _mm256_set1_epi8(4));
    const __m256i sh4 = _mm256_add_epi8(sh0, _mm256_set1_epi8(8));
    const __m256i sh6 = _mm256_add_epi8(sh0, _mm256_set1_epi8(12));
    __m256 acc[ROWS_MAX];
    UNROLL for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        Q6PF(w + i);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[i].scales));
        __m256i sumi[ROWS_MAX];
        UNROLL for (int r = 0; r < R; r++) {
            const block_q8_K *a = (const block_q8_K *)(va + (size_t)r * stride) + i;
            const __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)a->bsums));
            sumi[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5));
        }
        UNROLL for (int h = 0; h < 2; h++) {   /* halves of 128: 4 quarters and their scales live at a time */
            __m256i q[4], scv[4];
            q6_unpack_half(w[i].ql + 64 * h, w[i].qh + 32 * h, q);
            const __m256i sh = h ? _mm256_permute2x128_si256(sc16, sc16, 0x11) : _mm256_permute2x128_si256(sc16, sc16, 0x00);
            scv[0] = _mm256_shuffle_epi8(sh, sh0); scv[1] = _mm256_shuffle_epi8(sh, sh2);
            scv[2] = _mm256_shuffle_epi8(sh, sh4); scv[3] = _mm256_shuffle_epi8(sh, sh6);
            UNROLL for (int r = 0; r < R; r++) {
                const int8_t *y = ((const block_q8_K *)(va + (size_t)r * stride) + i)->qs + 128 * h;
                const __m256i p0 = _mm256_madd_epi16(scv[0], _mm256_maddubs_epi16(q[0], _mm256_loadu_si256((const __m256i *)y)));
                const __m256i p1 = _mm256_madd_epi16(scv[1], _mm256_maddubs_epi16(q[1], _mm256_loadu_si256((const __m256i *)(y + 32))));
                const __m256i p2 = _mm256_madd_epi16(scv[2], _mm256_maddubs_epi16(q[2], _mm256_loadu_si256((const __m256i *)(y + 64))));
                const __m256i p3 = _mm256_madd_epi16(scv[3], _mm256_maddubs_epi16(q[3], _mm256_loadu_si256((const __m256i *)(y + 96))));
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3)));
            }
        }
        const float dw = h2f(w[i].d);
        UNROLL for (int r = 0; r < R; r++) {
            const block_q8_K *a = (const block_q8_K *)(va + (size_t)r * stride) + i;
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(a->d * dw), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        }
    }
    UNROLL for (int r = 0; r < R; r++) s[r] = hsum_ps(acc[r]);
}
void hachi_vec_dot_q6_K_q8_K_avx2(int64_t n, float *s, const void *w, const void *a) { rows_q6_K(n, s, w, a, 0, 1); }
MULTI_FROM_ROWS(multi_q6_K, rows_q6_K)

LOOP_MULTI(multi_q4_1, hachi_vec_dot_q4_1_q8_0_avx2)
LOOP_MULTI(multi_q5_0, hachi_vec_dot_q5_0_q8_0_avx2)
LOOP_MULTI(multi_q5_K, hachi_vec_dot_q5_K_q8_K_avx2)

/* ---------------- activation quantizer ---------------- */

/* q8_0, bit-identical to ref (matmul quantizes every activation row with it: at 12288
 * columns the scalar one cost ~5% of a decode matmul): the same amax, d = amax / 127,
 * id = 1 / d, and roundf(x * id) as trunc + (|frac| >= 0.5 ? sign : 0), exact for the
 * |x * id| <= 127 here. */
static void quantize_row_q8_0(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            m = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), m);   /* a NaN is skipped, as in ref */
        }
        const float amax = hmax_ps(m);
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        y[i].d = hachi_f32_to_f16(d);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            const __m256 p = _mm256_mul_ps(v[k], vid);
            const __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(p, t));
            const __m256 adj = _mm256_and_ps(_mm256_cmp_ps(frac, half, _CMP_GE_OQ), _mm256_or_ps(one, _mm256_and_ps(p, sign)));
            q[k] = _mm256_cvttps_epi32(_mm256_and_ps(_mm256_add_ps(t, adj), _mm256_cmp_ps(p, p, _CMP_ORD_Q)));   /* NaN: 0, as ref */
        }
        const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)y[i].qs, _mm256_permutevar8x32_epi32(b, perm));
    }
}

/* q8_K (the K-quants' activations), bit-identical to ref (the scalar one took 1.4% of an E2B
 * Q4_K_M decode step, on one thread while the other waited): the same signed maximum (the first
 * value of the largest magnitude; a NaN is skipped), iscale = -127 / max, min(127, x * iscale
 * rounded to nearest even: ref's magic-number rounding, exact for the |x * iscale| <= 127 here),
 * the bsums of 16 and d = 1 / iscale. This table's, AVX-VNNI's and AVX-512's. */
static void quantize_row_q8_K(const float *x, void *vy, int64_t n) {
    block_q8_K *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7), ones8 = _mm256_set1_epi8(1), i127 = _mm256_set1_epi32(127);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < QK_K; k += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)), m);
        const float amax = hmax_ps(m);
        if (amax == 0) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const __m256 va = _mm256_set1_ps(amax);
        int j = 0, bits;   /* the first one of that magnitude */
        while (!(bits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), va, _CMP_EQ_OQ)))) j += 8;
        const float iscale = -127.f / x[j + __builtin_ctz((unsigned)bits)];
        const __m256 vs = _mm256_set1_ps(iscale);
        for (int k = 0; k < QK_K; k += 32) {
            __m256i q[4];
            UNROLL for (int e = 0; e < 4; e++) {
                const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * e), vs);
                q[e] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_and_ps(p, _mm256_cmp_ps(p, p, _CMP_ORD_Q))), i127);   /* NaN: 0 */
            }
            const __m256i b = _mm256_permutevar8x32_epi32(
                _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])), perm);
            _mm256_storeu_si256((__m256i *)(y[i].qs + k), b);
            /* the two 16-value sums: bytes to int16 pairs (sign-extended by vpmaddubsw's signed operand), then hadd */
            const __m256i s16 = _mm256_maddubs_epi16(ones8, b);
            const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));   /* 8 sums of 4: [0..3] the first 16 */
            __m128i t = _mm_hadd_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
            t = _mm_hadd_epi32(t, t);   /* sums of 16: lanes 0, 1 */
            y[i].bsums[k / 16] = (int16_t)_mm_cvtsi128_si32(t);
            y[i].bsums[k / 16 + 1] = (int16_t)_mm_extract_epi32(t, 1);
        }
        y[i].d = 1 / iscale;
    }
}

/* ---------------- fp16 KV cache ---------------- */

static void f32_to_f16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = hachi_f32_to_f16(x[i]);
}

static void f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load_f16(x + i));
    for (; i < n; i++) y[i] = h2f(x[i]);
}

static void to_float_f16(const void *x, float *y, int64_t n) { f16_to_f32(x, y, n); }

/* rows in groups of 4 with register accumulators; the key row stays in L1 */
static void dot_f16_multi(int64_t n, float *s, const uint16_t *k, const float *q, int64_t qs, int m) {
    int j = 0;
    for (; j + 4 <= m; j += 4) {
        const float *q0 = q + j * qs, *q1 = q0 + qs, *q2 = q1 + qs, *q3 = q2 + qs;
        __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const __m256 kv = load_f16(k + i);
            c0 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q0 + i), c0);
            c1 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q1 + i), c1);
            c2 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q2 + i), c2);
            c3 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q3 + i), c3);
        }
        float s0 = hsum_ps(c0), s1 = hsum_ps(c1), s2 = hsum_ps(c2), s3 = hsum_ps(c3);
        for (; i < n; i++) {
            const float kv = h2f(k[i]);
            s0 += kv * q0[i]; s1 += kv * q1[i]; s2 += kv * q2[i]; s3 += kv * q3[i];
        }
        s[j] = s0; s[j + 1] = s1; s[j + 2] = s2; s[j + 3] = s3;
    }
    for (; j < m; j++) hachi_vec_dot_f16_avx2(n, s + j, k, q + j * qs);
}

static void axpy_f16_multi(int64_t n, const float *a, const uint16_t *v, float *y, int64_t ys, int m) {
    int j = 0;
    for (; j + 4 <= m; j += 4) {
        float *y0 = y + j * ys, *y1 = y0 + ys, *y2 = y1 + ys, *y3 = y2 + ys;
        const __m256 a0 = _mm256_set1_ps(a[j]), a1 = _mm256_set1_ps(a[j + 1]);
        const __m256 a2 = _mm256_set1_ps(a[j + 2]), a3 = _mm256_set1_ps(a[j + 3]);
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const __m256 vv = load_f16(v + i);
            _mm256_storeu_ps(y0 + i, _mm256_fmadd_ps(a0, vv, _mm256_loadu_ps(y0 + i)));
            _mm256_storeu_ps(y1 + i, _mm256_fmadd_ps(a1, vv, _mm256_loadu_ps(y1 + i)));
            _mm256_storeu_ps(y2 + i, _mm256_fmadd_ps(a2, vv, _mm256_loadu_ps(y2 + i)));
            _mm256_storeu_ps(y3 + i, _mm256_fmadd_ps(a3, vv, _mm256_loadu_ps(y3 + i)));
        }
        for (; i < n; i++) {
            const float vv = h2f(v[i]);
            y0[i] += a[j] * vv; y1[i] += a[j + 1] * vv; y2[i] += a[j + 2] * vv; y3[i] += a[j + 3] * vv;
        }
    }
    for (; j < m; j++) {
        float *yj = y + j * ys;
        const __m256 aj = _mm256_set1_ps(a[j]);
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(yj + i, _mm256_fmadd_ps(aj, load_f16(v + i), _mm256_loadu_ps(yj + i)));
        for (; i < n; i++) yj[i] += a[j] * h2f(v[i]);
    }
}

/* the attention tiles (x86_avx2_attn.c) over this file's per-row kernels */
static void attn_scores_f16(int64_t hd, int nk, const uint16_t *k, int64_t ks, const float *q, int G, float *s) {
    hachi_attn_scores_f16_avx2(dot_f16_multi, hd, nk, k, ks, q, G, s);
}
static void attn_values_f16(int64_t hd, int nk, const uint16_t *v, int64_t vs, const float *p, int G, float *out) {
    hachi_attn_values_f16_avx2(axpy_f16_multi, hd, nk, v, vs, p, G, out);
}

static void attn_values_f16_hot(int64_t hd, int nk, const uint16_t *v, int64_t vs, const float *p, int G, float *out) {
    hachi_attn_values_f16_hot_avx2(axpy_f16_multi, hd, nk, v, vs, p, G, out);
}

/* ---------------- activations ---------------- */

/* tanh (Cephes tanhf): |x| < 0.625 an odd polynomial, else 1 - 2 / (e^2|x| + 1); sign restored */
static inline __m256 tanh_ps(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f), ax = _mm256_andnot_ps(sign, x);
    const __m256 e = hachi_exp256(_mm256_min_ps(_mm256_add_ps(ax, ax), _mm256_set1_ps(40.0f)));
    const __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    const __m256 z = _mm256_mul_ps(ax, ax);
    __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, z), ax, ax);
    const __m256 r = _mm256_blendv_ps(p, big, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_GE_OQ));
    return _mm256_or_ps(r, _mm256_and_ps(x, sign));
}

static inline __m256 gelu_mul8(__m256 v, __m256 g) {
    const __m256 y = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                   _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), v), _mm256_mul_ps(v, v), v));
    const __m256 h = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v), _mm256_add_ps(_mm256_set1_ps(1.0f), tanh_ps(y)));
    return _mm256_mul_ps(h, g);
}

/* the last n % 8 elements go through the same vector code (a zero-padded copy) */
static void gelu_mul(int64_t n, float *x, const float *g) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, gelu_mul8(_mm256_loadu_ps(x + i), _mm256_loadu_ps(g + i)));
    if (i < n) {
        float a[8] = {0}, b[8] = {0};
        memcpy(a, x + i, (size_t)(n - i) * sizeof(float));
        memcpy(b, g + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(a, gelu_mul8(_mm256_loadu_ps(a), _mm256_loadu_ps(b)));
        memcpy(x + i, a, (size_t)(n - i) * sizeof(float));
    }
}

static void softcap(int64_t n, float *x, float cap) {
    const __m256 c = _mm256_set1_ps(cap), ic = _mm256_set1_ps(1.0f / cap);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(c, tanh_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), ic))));
    if (i < n) {
        float a[8] = {0};
        memcpy(a, x + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(a, _mm256_mul_ps(c, tanh_ps(_mm256_mul_ps(_mm256_loadu_ps(a), ic))));
        memcpy(x + i, a, (size_t)(n - i) * sizeof(float));
    }
}

/* kernels.h's quant_rows_i8, 8 floats a step (n % 8 == 0, else ref's): the same float
 * operations as ref's (a true division, the clamps as max/min, truncation, the exact fraction
 * compared with +-0.5) */
static void quant_rows_i8(const float *x, int rows, int64_t n, int8_t *q, float *scale) {
    if (n % 8) { hachi_quant_rows_i8_ref(x, rows, n, q, scale); return; }
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f), half = _mm256_set1_ps(0.5f);
    const __m256 mhalf = _mm256_set1_ps(-0.5f), abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n;
        int8_t *qr = q + (size_t)r * n;
        __m256 m = _mm256_setzero_ps();
        for (int64_t i = 0; i < n; i += 8)   /* maxps gives its second operand for a NaN: passed over, as in ref */
            m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xr + i), abs), m);
        float mv[8], mx = 0.0f;
        _mm256_storeu_ps(mv, m);
        for (int i = 0; i < 8; i++) mx = mv[i] > mx ? mv[i] : mx;
        const float sc = mx / 127.0f;
        scale[r] = sc;
        if (!(sc > 0.0f)) { memset(qr, 0, (size_t)n); continue; }
        const __m256 sv = _mm256_set1_ps(sc);
        for (int64_t i = 0; i < n; i += 8) {
            const __m256 y = _mm256_min_ps(_mm256_max_ps(_mm256_div_ps(_mm256_loadu_ps(xr + i), sv), lo), hi);
            __m256i t = _mm256_cvttps_epi32(y);
            const __m256 f = _mm256_sub_ps(y, _mm256_cvtepi32_ps(t));
            t = _mm256_sub_epi32(t, _mm256_castps_si256(_mm256_cmp_ps(f, half, _CMP_GE_OQ)));
            t = _mm256_add_epi32(t, _mm256_castps_si256(_mm256_cmp_ps(f, mhalf, _CMP_LE_OQ)));
            const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
            _mm_storel_epi64((__m128i *)(qr + i), _mm_packs_epi16(w, w));
        }
    }
}

/* ---------------- the table ---------------- */

static void set(hachi_kernels *t, uint32_t type, hachi_vec_dot_fn dot, hachi_vec_dot_multi_fn multi) {
    t->t[type].vec_dot = dot;
    t->t[type].vec_dot_multi = multi;
}

/* on a copy of ref's table: the cold entries stay ref's */
int hachi_kernels_fill_avx2(hachi_kernels *t) {
    set(t, HACHI_TYPE_F32, hachi_vec_dot_f32_avx2, multi_f32);
    set(t, HACHI_TYPE_F16, hachi_vec_dot_f16_avx2, multi_f16);
    set(t, HACHI_TYPE_BF16, hachi_vec_dot_bf16_avx2, multi_bf16);
    t->t[HACHI_TYPE_F32].gemm = gemm_f32;
    t->t[HACHI_TYPE_F16].gemm = gemm_f16;
    t->t[HACHI_TYPE_BF16].gemm = gemm_bf16;
    /* from 16 tokens (Zen 4, an E2B FFN-shaped F16 matmul from DRAM on 2 threads, 3 rounds: 16 tokens
     * 3.71 / 3.78 / 3.48 ms against multi's 3.92 / 4.47 / 4.23; 8 tokens no faster, 4 slower) */
    t->t[HACHI_TYPE_F32].gemm_min = t->t[HACHI_TYPE_F16].gemm_min = t->t[HACHI_TYPE_BF16].gemm_min = 16;
    set(t, HACHI_TYPE_Q4_0, hachi_vec_dot_q4_0_q8_0_avx2, multi_q4_0);
    t->t[HACHI_TYPE_Q4_0].act_extra = act_extra_q4_0;
    t->t[HACHI_TYPE_Q4_0].act_prep = act_prep_q4_0;
    t->t[HACHI_TYPE_Q4_0].vec_dot_x8 = x8_q4_0;
    t->t[HACHI_TYPE_Q4_0].gemm_x8 = gemm_q4_0_x8;   /* bench_ab on Zen 5: forwards of 2 rows 1.07x, 4 0.97x, 8 0.98x */
    t->t[HACHI_TYPE_Q4_0].gemm_min = 4;
    set(t, HACHI_TYPE_Q4_1, hachi_vec_dot_q4_1_q8_0_avx2, multi_q4_1);
    set(t, HACHI_TYPE_Q5_0, hachi_vec_dot_q5_0_q8_0_avx2, multi_q5_0);
    set(t, HACHI_TYPE_Q8_0, hachi_vec_dot_q8_0_q8_0_avx2, multi_q8_0);
    t->t[HACHI_TYPE_Q8_0].act_extra = act_extra_q4_0;   /* the same layout, -128*sum(y) (the VNNI tables' too) */
    t->t[HACHI_TYPE_Q8_0].act_prep = act_prep_q8_0;
    t->t[HACHI_TYPE_Q8_0].vec_dot_x8 = x8_q8_0;   /* the loader repacks Q8_0 rows by 8 too */
    set(t, HACHI_TYPE_Q4_K, hachi_vec_dot_q4_K_q8_K_avx2, multi_q4_K);
    t->t[HACHI_TYPE_Q4_K].vec_dot_x8 = x8_q4_K;   /* the loader repacks Q4_K rows by 8 too */
    set(t, HACHI_TYPE_Q5_K, hachi_vec_dot_q5_K_q8_K_avx2, multi_q5_K);
    /* the x8 kernels' and GEMMs' sub-block sums (x86_q4k_x8.h; the VNNI tables' too) */
    t->t[HACHI_TYPE_Q4_K].act_extra = t->t[HACHI_TYPE_Q5_K].act_extra = act_extra_kx8;
    t->t[HACHI_TYPE_Q4_K].act_prep = t->t[HACHI_TYPE_Q5_K].act_prep = act_prep_kx8;
    set(t, HACHI_TYPE_Q6_K, hachi_vec_dot_q6_K_q8_K_avx2, multi_q6_K);
    t->t[HACHI_TYPE_Q5_K].vec_dot_x8 = x8_q5_K;
    t->t[HACHI_TYPE_Q6_K].vec_dot_x8 = x8_q6_K;
    /* bench_ab, E2B Q4_K_M with this table on Zen 5: prefill 256 0.936x (12 of 12 rounds), forwards of
     * 8 rows 0.907x (16 of 16), of 4 rows from 4 1.031x; a Q6_K GEMM of the same shape 0.995-1.000x: none */
    t->t[HACHI_TYPE_Q4_K].gemm_x8 = gemm_q4_K;
    t->t[HACHI_TYPE_Q5_K].gemm_x8 = gemm_q5_K;
    t->t[HACHI_TYPE_Q4_K].gemm_min = t->t[HACHI_TYPE_Q5_K].gemm_min = 8;
    t->t[HACHI_TYPE_F16].to_float = to_float_f16;
    t->t[HACHI_TYPE_Q8_0].from_float = quantize_row_q8_0;
    t->t[HACHI_TYPE_Q8_K].from_float = quantize_row_q8_K;
    t->f32_to_f16 = f32_to_f16;
    t->f16_to_f32 = f16_to_f32;
    t->dot_f16_multi = dot_f16_multi;
    t->axpy_f16_multi = axpy_f16_multi;
    t->attn_scores_f16 = attn_scores_f16;
    t->attn_values_f16 = attn_values_f16;
    t->attn_values_f16_hot = attn_values_f16_hot;
    t->attn_f32_g = 8;
    t->attn_f32_hd = 16;
    t->attn_scores_f32 = hachi_attn_scores_f32_avx2;
    t->attn_values_f32 = hachi_attn_values_f32_avx2;
    t->attn_scores_i8 = hachi_attn_scores_i8_avx2;   /* AVX-512 keeps these */
    t->attn_vmax_i8 = hachi_attn_vmax_i8_avx2;
    t->attn_values_i8 = hachi_attn_values_i8_avx2;
    t->attn_flush_i8 = hachi_attn_flush_i8_avx2;
    t->attn_values_i8_hot = hachi_attn_values_i8_hot_avx2;
    t->attn_i8_sets = 0;   /* ref's scalar matrix products: the tile kernels instead (AMX has its own) */
    t->attn_softmax = hachi_attn_softmax_avx2;
    t->quant_rows_i8 = quant_rows_i8;
    t->gelu_mul = gelu_mul;
    t->softcap = softcap;
    return 1;
}

#else
int hachi_kernels_fill_avx2(hachi_kernels *t) { (void)t; return 0; }
#endif
