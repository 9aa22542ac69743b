/* kernels/x86_avx512: the kernels that are really 512-bit: the float weight dots (F32, F16,
 * BF16; 16 lanes) and their prefill GEMM (3 rows x 4 tokens a tile), fp16 conversion and the
 * per-row fp16 attention kernels, on which the AVX2 attention tiles fall back; Q6_K's dot; the
 * VNNI kernels of interleaved int4 rows (x8: one group of 8 rows in ymm, x86_vnni_x8.h) and the
 * GEMM of forwards of 2 tokens or more (two groups, 16 rows, per zmm; Q4_0's and Q8_0's over
 * activations packed by act_pack); the attention tiles of 8 query heads over fp16 and int8 K/V
 * rows (int8 scores by vpdpbusd). Every other entry is the AVX2 table's (dispatch.c starts this
 * table from a copy of it). Built with the F/BW/VL/DQ/VNNI flags that dispatch.c checks the
 * CPU for. */
#include "kernels/kernels.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include "kernels/rows.h"
#include "kernels/x86_avx2_exp.h"
#include "kernels/x86_q4k_x8.h"
#include <string.h>
#include "util.h"

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* The multi kernels do so much work per weight byte that the out-of-order window no longer
 * reaches the next cache lines: prefetch the weight stream explicitly, 1 KiB ahead. */
#define PREFETCH(p) _mm_prefetch((const char *)(p) + 1024, _MM_HINT_T0)

/* ---------------- float weights (512-bit) ---------------- */

static inline __m512 load16_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline __m512 load16_bf16(const uint16_t *p) {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
static inline __m512 load16_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline float id_f32(float x) { return x; }
static inline float bf2f(uint16_t h) { return hachi_bf16_to_f32(h); }

/* Float weights: a tile of R weight rows x T activation rows (R <= 3, T <= 4). Per (row, token):
 * per 64 elements s = w0*a0 (+ w1*a1 + w2*a2 + w3*a3 by fma), acc += s; then 16 at a time
 * acc = fma(w, a, acc); reduce; scalar tail in order; the result to y[t*ldy + r]. vec_dot and
 * multi are the tile of one weight row (rows_*), the prefill GEMM tiles of 3 rows x 4 tokens, so
 * all of them give the same sums bit for bit. In a 3 x 4 tile each weight vector is converted once
 * for 4 tokens and each activation vector loaded once for 3 rows (12 accumulators, 12 weight and 4
 * activation vectors: 29 of the 32 zmm); multi, one weight row against 4 activation rows, loads an
 * activation vector per FMA, from L2 in a prefill. */
#define FGEMM_R 3
#define FGEMM_T 4
#define FLOAT_KERNELS(sfx, wtype, load, scalar)                                              \
    static ALWAYS_INLINE void tile_##sfx(int64_t n, float *y, int64_t ldy, const char *vw, size_t rb, \
                                         const char *va, size_t stride, const int R, const int T) { \
        __m512 acc[FGEMM_R][FGEMM_T];                                                        \
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps(); \
        int64_t i = 0;                                                                       \
        for (; i + 64 <= n; i += 64) {                                                       \
            __m512 w[FGEMM_R][4];                                                            \
            UNROLL for (int r = 0; r < R; r++) {                                             \
                const wtype *wr = (const wtype *)(const void *)(vw + (size_t)r * rb) + i;    \
                PREFETCH(wr);                                                                \
                PREFETCH(wr + 32);                                                           \
                UNROLL for (int k = 0; k < 4; k++) w[r][k] = load(wr + 16 * k);              \
            }                                                                                \
            UNROLL for (int t = 0; t < T; t++) {                                             \
                const float *a = (const float *)(const void *)(va + (size_t)t * stride) + i; \
                __m512 a0 = _mm512_loadu_ps(a), a1 = _mm512_loadu_ps(a + 16);                \
                __m512 a2 = _mm512_loadu_ps(a + 32), a3 = _mm512_loadu_ps(a + 48);           \
                /* in registers for several rows: gcc otherwise folds a load into every FMA */ \
                if (R > 1) __asm__("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3));             \
                UNROLL for (int r = 0; r < R; r++) {                                         \
                    __m512 s = _mm512_mul_ps(w[r][0], a0);                                   \
                    s = _mm512_fmadd_ps(w[r][1], a1, s);                                     \
                    s = _mm512_fmadd_ps(w[r][2], a2, s);                                     \
                    s = _mm512_fmadd_ps(w[r][3], a3, s);                                     \
                    acc[r][t] = _mm512_add_ps(acc[r][t], s);                                 \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
        for (; i + 16 <= n; i += 16)                                                         \
            UNROLL for (int r = 0; r < R; r++) {                                             \
                const __m512 w0 = load((const wtype *)(const void *)(vw + (size_t)r * rb) + i); \
                UNROLL for (int t = 0; t < T; t++)                                           \
                    acc[r][t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps((const float *)(const void *)(va + (size_t)t * stride) + i), acc[r][t]); \
            }                                                                                \
        UNROLL for (int r = 0; r < R; r++) {                                                 \
            const wtype *wr = (const wtype *)(const void *)(vw + (size_t)r * rb);            \
            UNROLL for (int t = 0; t < T; t++) {                                             \
                const float *a = (const float *)(const void *)(va + (size_t)t * stride);     \
                float sum = _mm512_reduce_add_ps(acc[r][t]);                                 \
                for (int64_t k = i; k < n; k++) sum += scalar(wr[k]) * a[k];                 \
                y[(size_t)t * ldy + r] = sum;                                                \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
    static ALWAYS_INLINE void rows_##sfx(int64_t n, float *s, const void *w, const char *va, size_t stride, const int R) { \
        tile_##sfx(n, s, 1, w, 0, va, stride, 1, R);                                         \
    }                                                                                        \
    void hachi_vec_dot_##sfx##_avx512(int64_t n, float *s, const void *w, const void *a) { rows_##sfx(n, s, w, a, 0, 1); } \
    MULTI_FROM_ROWS(multi_##sfx, rows_##sfx)                                                 \
    /* the GEMM: tiles of FGEMM_R rows x FGEMM_T tokens; the rows and tokens left over one at a time */ \
    static void gemm_##sfx(int64_t n, float *y, int64_t ldy, const void *w, size_t rb, int n_rows, const void *a, \
                           size_t stride, int nt) {                                          \
        for (int r0 = 0; r0 < n_rows; r0 += FGEMM_R) {                                       \
            const bool rfull = r0 + FGEMM_R <= n_rows;                                       \
            for (int t0 = 0; t0 < nt; t0 += FGEMM_T) {                                       \
                const bool tfull = t0 + FGEMM_T <= nt;                                       \
                const char *wr = (const char *)w + (size_t)r0 * rb, *at = (const char *)a + (size_t)t0 * stride; \
                float *yt = y + (size_t)t0 * ldy + r0;                                       \
                if (rfull && tfull) {                                                        \
                    tile_##sfx(n, yt, ldy, wr, rb, at, stride, FGEMM_R, FGEMM_T);            \
                    continue;                                                                \
                }                                                                            \
                for (int r = 0; r < (rfull ? FGEMM_R : n_rows - r0); r++) {                  \
                    if (tfull) tile_##sfx(n, yt + r, ldy, wr + (size_t)r * rb, rb, at, stride, 1, FGEMM_T); \
                    else for (int t = 0; t < nt - t0; t++)                                   \
                        tile_##sfx(n, yt + (size_t)t * ldy + r, ldy, wr + (size_t)r * rb, rb, at + (size_t)t * stride, stride, 1, 1); \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }
// cppcheck-suppress invalidPointerCast ; the activation rows are f32 arrays (aligned scratch)
FLOAT_KERNELS(f32, float, load16_f32, id_f32)
// cppcheck-suppress invalidPointerCast ; the activation rows are f32 arrays (aligned scratch)
FLOAT_KERNELS(f16, uint16_t, load16_f16, h2f)
// cppcheck-suppress invalidPointerCast ; the activation rows are f32 arrays (aligned scratch)
FLOAT_KERNELS(bf16, uint16_t, load16_bf16, bf2f)

/* ---------------- q8_0 activations (512-bit) ---------------- */

/* AVX2's quantizer a block (two zmm) at a time: the same max (a NaN skipped), d and 1/d, and
 * rounding half away from zero as ref's roundf (truncate, then +-1 where |frac| >= 0.5), the
 * int32 -> int8 narrowing in one saturating vpmovsdb a zmm: bitwise ref's. */
static void quantize_row_q8_0(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    const __m512 sign = _mm512_set1_ps(-0.0f), half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        const __m512 v[2] = {_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16)};
        __m512 m = _mm512_max_ps(_mm512_andnot_ps(sign, v[0]), _mm512_setzero_ps());
        m = _mm512_max_ps(_mm512_andnot_ps(sign, v[1]), m);
        const float amax = _mm512_reduce_max_ps(m);
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        y[i].d = hachi_f32_to_f16(d);
        const __m512 vid = _mm512_set1_ps(id);
        UNROLL for (int k = 0; k < 2; k++) {
            const __m512 p = _mm512_mul_ps(v[k], vid);
            const __m512 t = _mm512_roundscale_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __mmask16 up = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_sub_ps(p, t)), half, _CMP_GE_OQ);
            const __m512 r = _mm512_mask_add_ps(t, up, t, _mm512_or_ps(one, _mm512_and_ps(p, sign)));
            const __mmask16 num = _mm512_cmp_ps_mask(p, p, _CMP_ORD_Q);   /* NaN: 0, as ref */
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * k), _mm512_cvtsepi32_epi8(_mm512_maskz_cvttps_epi32(num, r)));
        }
    }
}

/* ---------------- fp16 KV cache (512-bit) ---------------- */

static void f32_to_f16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = hachi_f32_to_f16(x[i]);
}

static void f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, load16_f16(x + i));
    for (; i < n; i++) y[i] = h2f(x[i]);
}

static void to_float_f16(const void *x, float *y, int64_t n) { f16_to_f32(x, y, n); }

/* rows in groups of 4 with register accumulators; the key row stays in L1 */
static void dot_f16_multi(int64_t n, float *s, const uint16_t *k, const float *q, int64_t qs, int m) {
    int j = 0;
    for (; j + 4 <= m; j += 4) {
        const float *q0 = q + j * qs, *q1 = q0 + qs, *q2 = q1 + qs, *q3 = q2 + qs;
        __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            const __m512 kv = load16_f16(k + i);
            c0 = _mm512_fmadd_ps(kv, _mm512_loadu_ps(q0 + i), c0);
            c1 = _mm512_fmadd_ps(kv, _mm512_loadu_ps(q1 + i), c1);
            c2 = _mm512_fmadd_ps(kv, _mm512_loadu_ps(q2 + i), c2);
            c3 = _mm512_fmadd_ps(kv, _mm512_loadu_ps(q3 + i), c3);
        }
        float s0 = _mm512_reduce_add_ps(c0), s1 = _mm512_reduce_add_ps(c1);
        float s2 = _mm512_reduce_add_ps(c2), s3 = _mm512_reduce_add_ps(c3);
        for (; i < n; i++) {
            const float kv = h2f(k[i]);
            s0 += kv * q0[i]; s1 += kv * q1[i]; s2 += kv * q2[i]; s3 += kv * q3[i];
        }
        s[j] = s0; s[j + 1] = s1; s[j + 2] = s2; s[j + 3] = s3;
    }
    for (; j < m; j++) hachi_vec_dot_f16_avx512(n, s + j, k, q + j * qs);
}

static void axpy_f16_multi(int64_t n, const float *a, const uint16_t *v, float *y, int64_t ys, int m) {
    int j = 0;
    for (; j + 4 <= m; j += 4) {
        float *y0 = y + j * ys, *y1 = y0 + ys, *y2 = y1 + ys, *y3 = y2 + ys;
        const __m512 a0 = _mm512_set1_ps(a[j]), a1 = _mm512_set1_ps(a[j + 1]);
        const __m512 a2 = _mm512_set1_ps(a[j + 2]), a3 = _mm512_set1_ps(a[j + 3]);
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            const __m512 vv = load16_f16(v + i);
            _mm512_storeu_ps(y0 + i, _mm512_fmadd_ps(a0, vv, _mm512_loadu_ps(y0 + i)));
            _mm512_storeu_ps(y1 + i, _mm512_fmadd_ps(a1, vv, _mm512_loadu_ps(y1 + i)));
            _mm512_storeu_ps(y2 + i, _mm512_fmadd_ps(a2, vv, _mm512_loadu_ps(y2 + i)));
            _mm512_storeu_ps(y3 + i, _mm512_fmadd_ps(a3, vv, _mm512_loadu_ps(y3 + i)));
        }
        for (; i < n; i++) {
            const float vv = h2f(v[i]);
            y0[i] += a[j] * vv; y1[i] += a[j + 1] * vv; y2[i] += a[j + 2] * vv; y3[i] += a[j + 3] * vv;
        }
    }
    for (; j < m; j++) {
        float *yj = y + j * ys;
        const __m512 aj = _mm512_set1_ps(a[j]);
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(yj + i, _mm512_fmadd_ps(aj, load16_f16(v + i), _mm512_loadu_ps(yj + i)));
        for (; i < n; i++) yj[i] += a[j] * h2f(v[i]);
    }
}

/* Attention tiles of 8 query heads per K/V head (Gemma 4's), 512-bit; other shapes go to AVX2's
 * tiles (x86_avx2_attn.c) over this file's per-row kernels. */

/* [sum(a0), .., sum(a7)] of 8 zmm: the halves added, then a transposing tree of hadds */
static inline __m256 hsum8x16(const __m512 *a) {
    __m256 h[8];
    UNROLL for (int i = 0; i < 8; i++) {
        const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[i]), 1));
        h[i] = _mm256_add_ps(_mm512_castps512_ps256(a[i]), hi);
    }
    const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
    const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(h[4], h[5]), _mm256_hadd_ps(h[6], h[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* 16 elements of a K/V row from element d: fp16 converted, or f32 (a tile converted already,
 * kernels.h attn_scores_f32: the same values) */
static ALWAYS_INLINE __m512 load16_row(const void *r, int64_t d, const bool f32) {
    return f32 ? _mm512_loadu_ps((const float *)r + d) : load16_f16((const uint16_t *)r + d);
}
/* row i of rows stride elements apart */
static ALWAYS_INLINE const void *row_at(const void *rows, int64_t i, int64_t stride, const bool f32) {
    return (const char *)rows + i * stride * (f32 ? 4 : 2);
}

/* Scores of NK <= 3 keys (fp16 rows, or f32) against the 8 heads: 8 * NK accumulators, each
 * query load used NK times. Zen 4 issues about one 512-bit load a cycle beside its FMA: with one
 * query load per FMA the kernel was load-bound, with two keys (8 query and 2 key loads per 16
 * FMAs) still ~75% of the FMA rate in cache, with three 11 loads per 24 FMAs. A key's sums never
 * depend on its partners (each accumulator sums over d in the same order), so every key gets the
 * same result whichever pass computes it. ahead: NK K rows prefetched line by line into L2, or
 * NULL. */
static ALWAYS_INLINE void scores_g8_keys(int64_t hd, const void *k, int64_t ks, const float *q, float *s,
                                         const uint16_t *ahead, const int NK, const bool f32) {
    __m512 a[3][8];
    UNROLL for (int i = 0; i < NK; i++) UNROLL for (int h = 0; h < 8; h++) a[i][h] = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; d += 16) {
        if (ahead && d % 32 == 0) UNROLL for (int i = 0; i < NK; i++) _mm_prefetch((const char *)(ahead + i * ks + d), _MM_HINT_T1);
        __m512 x[3];
        UNROLL for (int i = 0; i < NK; i++) x[i] = load16_row(row_at(k, i, ks, f32), d, f32);
        UNROLL for (int h = 0; h < 8; h++) {
            __m512 qh = _mm512_loadu_ps(q + (size_t)h * hd + d);
            __asm__("" : "+v"(qh));   /* one load into a register: gcc would fold it into every FMA */
            UNROLL for (int i = 0; i < NK; i++) a[i][h] = _mm512_fmadd_ps(x[i], qh, a[i][h]);
        }
    }
    UNROLL for (int i = 0; i < NK; i++) _mm256_storeu_ps(s + (size_t)i * 8, hsum8x16(a[i]));
}

/* Three keys a pass, the last one or two keys in one pass. fp16 rows: the K rows 4 passes (12
 * keys) ahead are prefetched into L2: from DRAM, one thread, 128-key tiles (bench_attn), 35-44 G
 * FMA/s against 24-36 with the rows 2 passes ahead into L1, 22 with none. Past the last key too
 * (kernels.h: the rows that follow a call's are the next tile's). f32 rows (kernels.h
 * attn_scores_f32, a tile in cache): nothing to prefetch; one SPR core, 126 keys x 8 heads x 512
 * dims in L2, 75 G FMA/s against 59 for fp16 rows. */
static ALWAYS_INLINE void scores_g8(int64_t hd, int nk, const void *k, int64_t ks, const float *q, float *s,
                                    const bool f32) {
    enum { AHEAD = 12 };
    for (int j = 0; j < nk; j += 3) {
        const void *kj = row_at(k, j, ks, f32);
        float *sj = s + (size_t)j * 8;
        if (nk - j >= 3) scores_g8_keys(hd, kj, ks, q, sj, f32 ? NULL : row_at(kj, AHEAD, ks, false), 3, f32);
        else if (nk - j == 2) scores_g8_keys(hd, kj, ks, q, sj, NULL, 2, f32);
        else scores_g8_keys(hd, kj, ks, q, sj, NULL, 1, f32);
    }
}

static void attn_scores_f32(int64_t hd, int nk, const float *k, int64_t ks, const float *q, int G, float *s) {
    (void)G;
    scores_g8(hd, nk, k, ks, q, s, true);
}

static void attn_scores_f16(int64_t hd, int nk, const uint16_t *k, int64_t ks, const float *q, int G, float *s) {
    if (G == 8 && hd % 16 == 0) scores_g8(hd, nk, k, ks, q, s, false);
    else hachi_attn_scores_f16_avx2(dot_f16_multi, hd, nk, k, ks, q, G, s);
}

/* out[h][d..d + 16 NZ) += p[j*8 + h] * v_j[d..d + 16 NZ) for the 8 heads over keys j < n in
 * order (rows vs elements apart, fp16 or f32): 8 NZ accumulators loaded from out and stored
 * back, each weight broadcast once into a register. With NZ = 3 a key costs 3 row loads and 8
 * broadcasts for 24 FMAs (2 and 8 for 16 with NZ = 2: Zen 4 issues about one 512-bit load a
 * cycle beside its FMA). */
static ALWAYS_INLINE void values_g8_dims(int64_t hd, int64_t d, int n, const void *v, int64_t vs, const float *p,
                                         float *out, const int NZ, const bool f32) {
    __m512 a[8][3];
    UNROLL for (int h = 0; h < 8; h++) UNROLL for (int z = 0; z < NZ; z++) a[h][z] = _mm512_loadu_ps(out + (size_t)h * hd + d + 16 * z);
    for (int j = 0; j < n; j++) {
        __m512 x[3];
        UNROLL for (int z = 0; z < NZ; z++) x[z] = load16_row(row_at(v, j, vs, f32), d + 16 * z, f32);
        UNROLL for (int h = 0; h < 8; h++) {
            const __m512 w = _mm512_set1_ps(p[(size_t)j * 8 + h]);
            UNROLL for (int z = 0; z < NZ; z++) a[h][z] = _mm512_fmadd_ps(w, x[z], a[h][z]);
        }
    }
    UNROLL for (int h = 0; h < 8; h++) UNROLL for (int z = 0; z < NZ; z++) _mm512_storeu_ps(out + (size_t)h * hd + d + 16 * z, a[h][z]);
}

/* fp16 V rows in cache (attn_values_f16_hot): all nk keys per pass of dims, so out is loaded and
 * stored once per call instead of once per tile of 8 keys; nothing to prefetch. Passes of 48
 * dims while they last (64 left go as two of 32). One Zen 4 core, 128 keys x 8 heads
 * (bench/bench_attn.c), in L2: 53-55 G FMA/s at head dim 512 and 51-53 at 256, against 47-50
 * and 48-50 with passes of 32, and 31-40 for values_g8. */
static ALWAYS_INLINE void values_g8_all(int64_t hd, int n, const void *v, int64_t vs, const float *p, float *out,
                                        const bool f32) {
    for (int64_t d = 0; d < hd;) {
        const int64_t left = hd - d;
        if (left >= 48 && left != 64) { values_g8_dims(hd, d, n, v, vs, p, out, 3, f32); d += 48; }
        else { values_g8_dims(hd, d, n, v, vs, p, out, 2, f32); d += 32; }
    }
}

/* kernels.h's attn_values_f32 (G 8): values_g8_all over f32 rows. One SPR core, 126 keys x 8
 * heads x 512 dims in L2: 86 G FMA/s against 67 for fp16 rows. */
static void attn_values_f32(int64_t hd, int nk, const float *v, int64_t vs, const float *p, int G, float *out) {
    (void)G;
    values_g8_all(hd, nk, v, vs, p, out, true);
}

/* fp16 V rows streamed from memory: keys in tiles of 8, 32 dims at a time per tile (so the sums
 * grow key after key in out whatever the tiles), the next 8 rows prefetched a few lines per 32
 * dims, past the last key too (kernels.h). (Passes of 48 dims, as the hot kernel's, were 10%
 * slower here at head dim 256 and no faster at 512: bench/RESULTS.md.) */
#define VTILE16 8
static void values_g8(int64_t hd, int nk, const uint16_t *v, int64_t vs, const float *p, float *out) {
    const int64_t row_lines = (hd * 2 + 63) / 64, lines = VTILE16 * row_lines, per_step = (lines + hd / 32 - 1) / (hd / 32);
    for (int j0 = 0; j0 < nk; j0 += VTILE16) {
        const int n = HACHI_MIN(VTILE16, nk - j0);
        const uint16_t *tile = v + j0 * vs, *next = tile + n * vs;
        int64_t line = 0;
        for (int64_t d = 0; d < hd; d += 32) {
            for (int64_t e = line + per_step; line < e && line < lines; line++)
                _mm_prefetch((const char *)(next + line / row_lines * vs) + line % row_lines * 64, _MM_HINT_T0);
            values_g8_dims(hd, d, n, tile, vs, p + (size_t)j0 * 8, out, 2, false);
        }
    }
}

static void attn_values_f16(int64_t hd, int nk, const uint16_t *v, int64_t vs, const float *p, int G, float *out) {
    if (G == 8 && hd % 32 == 0) values_g8(hd, nk, v, vs, p, out);
    else hachi_attn_values_f16_avx2(axpy_f16_multi, hd, nk, v, vs, p, G, out);
}

static void attn_values_f16_hot(int64_t hd, int nk, const uint16_t *v, int64_t vs, const float *p, int G, float *out) {
    if (G == 8 && hd % 32 == 0) values_g8_all(hd, nk, v, vs, p, out, false);
    else hachi_attn_values_f16_hot_avx2(axpy_f16_multi, hd, nk, v, vs, p, G, out);
}

/* kernels.h's attn_softmax for G = 8 (else AVX2's): two keys a vector, an odd n's last key by
 * the 256-bit exp (the same values) */
static void attn_softmax(float *x, int n, int G, float scale, float *mx, float *sum) {
    if (G != 8) { hachi_attn_softmax_avx2(x, n, G, scale, mx, sum); return; }
    const int np = n / 2;
    const __m512 sc = _mm512_set1_ps(scale);
    __m512 m = _mm512_broadcast_f32x8(_mm256_loadu_ps(mx));
    for (int i = 0; i < np; i++) {
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + 16 * i), sc);
        _mm512_storeu_ps(x + 16 * i, v);
        m = _mm512_max_ps(v, m);   /* a NaN score passed over, as ref's v > mx */
    }
    float *last = x + 16 * np;
    if (n % 2) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(last), _mm256_set1_ps(scale));
        _mm256_storeu_ps(last, v);
        m = _mm512_max_ps(_mm512_broadcast_f32x8(v), m);
    }
    m = _mm512_max_ps(m, _mm512_shuffle_f32x4(m, m, 0x4E));   /* both halves: the max per head */
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < np; i++) {
        const __m512 e = hachi_exp512(_mm512_sub_ps(_mm512_loadu_ps(x + 16 * i), m));
        _mm512_storeu_ps(x + 16 * i, e);
        acc = _mm512_add_ps(acc, e);
    }
    const __m256 m8 = _mm512_castps512_ps256(m);
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    if (n % 2) {
        const __m256 e = hachi_exp256(_mm256_sub_ps(_mm256_loadu_ps(last), m8));
        _mm256_storeu_ps(last, e);
        s8 = _mm256_add_ps(s8, e);
    }
    _mm256_storeu_ps(mx, m8);
    _mm256_storeu_ps(sum, s8);
}

/* ---- int8 K/V rows: scores by vpdpbusd, values by vpdpwssd ---- */

/* [sum(a0), .., sum(a7)] of 8 zmm of int32 */
static inline __m256i hsum8x16_epi32(const __m512i *a) {
    __m256i h[8];
    UNROLL for (int i = 0; i < 8; i++) h[i] = _mm256_add_epi32(_mm512_castsi512_si256(a[i]), _mm512_extracti64x4_epi64(a[i], 1));
    const __m256i u0 = _mm256_hadd_epi32(_mm256_hadd_epi32(h[0], h[1]), _mm256_hadd_epi32(h[2], h[3]));
    const __m256i u1 = _mm256_hadd_epi32(_mm256_hadd_epi32(h[4], h[5]), _mm256_hadd_epi32(h[6], h[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* acc += u (unsigned bytes) . x (signed bytes), 4 products a lane: vpdpbusd in place (gcc
 * copied each accumulator to another register and back around the intrinsic, and spilled) */
#define DPBUSD(acc, u, x) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(x))

/* Scores of NK <= 3 int8 keys against the 8 heads. vpdpbusd multiplies unsigned bytes by signed
 * ones, so the queries come offset, u = q + 128, and 128 times each key's own sum (one more
 * vpdpbusd, the bytes 0x80 against the key) comes off: per 64 dims of a key 9 instructions for
 * the 8 heads where f32 FMAs take 32. The sums are exact integers, so any order gives ref's. */
static ALWAYS_INLINE void scores_i8_g8_keys(int64_t hd, const int8_t *k, int64_t ks, const float *sc, int64_t ss,
                                            const uint8_t *u, const float *qs, float *s, const int8_t *ahead,
                                            const int NK) {
    const __m512i off = _mm512_set1_epi8((char)0x80);
    __m512i a[3][8], c[3];
    UNROLL for (int i = 0; i < NK; i++) {
        c[i] = _mm512_setzero_si512();
        UNROLL for (int h = 0; h < 8; h++) a[i][h] = _mm512_setzero_si512();
    }
    for (int64_t d = 0; d < hd; d += 64) {
        __m512i x[3];
        UNROLL for (int i = 0; i < NK; i++) {
            if (ahead) _mm_prefetch((const char *)(ahead + i * ks + d), _MM_HINT_T1);
            x[i] = _mm512_loadu_si512(k + i * ks + d);
            DPBUSD(c[i], off, x[i]);
        }
        UNROLL for (int h = 0; h < 8; h++) {
            __m512i uh = _mm512_loadu_si512(u + (size_t)h * hd + d);
            __asm__("" : "+v"(uh));   /* one load into a register, not one per key */
            UNROLL for (int i = 0; i < NK; i++) DPBUSD(a[i][h], uh, x[i]);
        }
    }
    const __m256 qsv = _mm256_loadu_ps(qs);
    UNROLL for (int i = 0; i < NK; i++) {
        const __m256i dot = _mm256_sub_epi32(hsum8x16_epi32(a[i]), _mm256_set1_epi32(_mm512_reduce_add_epi32(c[i])));
        const __m256 r = _mm256_mul_ps(_mm256_cvtepi32_ps(dot), qsv);
        _mm256_storeu_ps(s + (size_t)i * 8, _mm256_mul_ps(r, _mm256_set1_ps(sc[(size_t)i * ss])));
    }
}

/* Three keys a pass, the K rows 4 passes (12 keys) ahead prefetched into L2, past the last key
 * too (kernels.h): from DRAM, one thread, 128-key tiles (bench_attn), 84-98 G MAC/s against
 * 58-66 with 6 keys into L1 (the f32 kernel's distance), 85-94 with 9, 18 or 24 into L2; the
 * queries offset once a call into u (hd <= 1024: kernels.h) */
static void scores_i8_g8(int64_t hd, int nk, const int8_t *k, int64_t ks, const float *sc, int64_t ss,
                         const hachi_query_i8 *q, float *s) {
    enum { AHEAD = 12 };
    _Alignas(64) uint8_t u[8 * 1024];
    const __m512i off = _mm512_set1_epi8((char)0x80);
    for (int64_t i = 0; i < 8 * hd; i += 64)
        _mm512_store_si512(u + i, _mm512_xor_si512(_mm512_loadu_si512(q->q8 + i), off));
    for (int j = 0; j < nk; j += 3) {
        const int8_t *kj = k + (size_t)j * ks;
        const float *scj = sc + (size_t)j * ss;
        float *sj = s + (size_t)j * 8;
        if (nk - j >= 3) scores_i8_g8_keys(hd, kj, ks, scj, ss, u, q->qs, sj, kj + AHEAD * ks, 3);
        else if (nk - j == 2) scores_i8_g8_keys(hd, kj, ks, scj, ss, u, q->qs, sj, NULL, 2);
        else scores_i8_g8_keys(hd, kj, ks, scj, ss, u, q->qs, sj, NULL, 1);
    }
}

static void attn_scores_i8(int64_t hd, int nk, const int8_t *k, int64_t ks, const float *sc, int64_t ss,
                           const hachi_query_i8 *q, int G, float *s) {
    if (G == 8 && hd % 64 == 0 && hd <= 1024) scores_i8_g8(hd, nk, k, ks, sc, ss, q, s);
    else hachi_attn_scores_i8_avx2(hd, nk, k, ks, sc, ss, q, G, s);
}

/* acc += the 16-bit pairs of x times those of w, summed by lane: vpdpwssd in place (as DPBUSD) */
#define DPWSSD(acc, x, w) __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w))

/* kernels.h's int8 values, 8 heads x 32 dims of acc over a run's n keys, two keys a step: the
 * two rows' values as 16-bit pairs (vpunpck*wd: per 128-bit lane dims 0-3 in lo, 4-7 in hi)
 * against each head's pair of 15-bit weights, 16 vpdpwssd per step where f32 takes 32 FMAs; the
 * exact sums then back in dim order into acc. pf: prefetch each row's next line (the first of
 * a line's two passes, streaming). */
static ALWAYS_INLINE void values_i8q_g8_dims(int64_t hd, int64_t d, int n, const int8_t *v, int64_t vs,
                                             const int32_t *wp, int32_t *acc, const bool first, const bool pf) {
    __m512i a[8][2];
    UNROLL for (int h = 0; h < 8; h++) a[h][0] = a[h][1] = _mm512_setzero_si512();
    for (int j = 0; j < n; j += 2) {
        const int8_t *r0 = v + (size_t)j * vs + d, *r1 = r0 + vs;
        if (pf) _mm_prefetch((const char *)(r0 + 64), _MM_HINT_T0);
        const __m512i x = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)r0));
        __m512i y = _mm512_setzero_si512();
        if (j + 1 < n) {
            if (pf) _mm_prefetch((const char *)(r1 + 64), _MM_HINT_T0);
            y = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)r1));
        }
        const __m512i lo = _mm512_unpacklo_epi16(x, y), hi = _mm512_unpackhi_epi16(x, y);
        UNROLL for (int h = 0; h < 8; h++) {
            const __m512i w = _mm512_set1_epi32(wp[(size_t)j / 2 * 8 + h]);
            DPWSSD(a[h][0], lo, w);
            DPWSSD(a[h][1], hi, w);
        }
    }
    const __m512i i0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i i1 = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    UNROLL for (int h = 0; h < 8; h++) {
        int32_t *o = acc + (size_t)h * hd + d;
        __m512i s0 = _mm512_permutex2var_epi32(a[h][0], i0, a[h][1]), s1 = _mm512_permutex2var_epi32(a[h][0], i1, a[h][1]);
        if (!first) {
            s0 = _mm512_add_epi32(s0, _mm512_loadu_si512(o));
            s1 = _mm512_add_epi32(s1, _mm512_loadu_si512(o + 16));
        }
        _mm512_storeu_si512(o, s0);
        _mm512_storeu_si512(o + 16, s1);
    }
}

/* G = 8, hd % 32 == 0 (else AVX2's): the run's weights, then all dims 32 at a time */
static ALWAYS_INLINE void values_i8q_g8(int64_t hd, int nk, const int8_t *v, int64_t vs, const float *sc, int64_t ss,
                                        const float *p, const float *r, int32_t *acc, const bool first,
                                        const bool hot) {
    int32_t wp[HACHI_VQ_KEYS / 2 * 8];
    hachi_attn_quant_weights(p, sc, ss, nk, 8, r, wp);
    for (int64_t d = 0; d < hd; d += 32)
        if (!hot && d % 64 == 0 && d + 64 < hd) values_i8q_g8_dims(hd, d, nk, v, vs, wp, acc, first, true);
        else values_i8q_g8_dims(hd, d, nk, v, vs, wp, acc, first, false);
}

static void attn_values_i8(int64_t hd, int nk, const int8_t *v, int64_t vs, const float *sc, int64_t ss, const float *p,
                           int G, const float *r, int32_t *acc, bool first) {
    if (G == 8 && hd % 32 == 0) values_i8q_g8(hd, nk, v, vs, sc, ss, p, r, acc, first, false);
    else hachi_attn_values_i8_avx2(hd, nk, v, vs, sc, ss, p, G, r, acc, first);
}

static void attn_values_i8_hot(int64_t hd, int nk, const int8_t *v, int64_t vs, const float *sc, int64_t ss,
                               const float *p, int G, const float *r, int32_t *acc, bool first) {
    if (G == 8 && hd % 32 == 0) values_i8q_g8(hd, nk, v, vs, sc, ss, p, r, acc, first, true);
    else hachi_attn_values_i8_hot_avx2(hd, nk, v, vs, sc, ss, p, G, r, acc, first);
}

/* ---------------- interleaved int4 rows (VNNI) ---------------- */

/* Up to 8 activation rows per pass: the unpacked nibbles of a block (8 ymm) and 8
 * accumulators fit in the 32 vector registers that AVX-512 gives even to 256-bit code. */
#define VNNI_ROWS 8
#define VNNI_DPBUSD _mm256_dpbusd_epi32
static inline __attribute__((always_inline)) __m256i dpbusd_bcast(__m256i acc, __m256i w, const int8_t *p) {
    __asm__("vpdpbusd %2%{1to8%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)(const void *)p));
    return acc;
}
#define VNNI_DPBUSD_B(acc, w, p) dpbusd_bcast((acc), (w), (p))
#define VNNI_X8_NO_Q6_K   /* x8z_q6_K below */
#include "kernels/x86_vnni_x8.h"

/* ---------------- prefill GEMM of interleaved Q4_0 rows (512-bit VNNI) ---------------- */

/* vec_dot_x8 works on one group of 8 rows in ymm registers: the same work for 16 rows (two
 * groups, one per 256-bit half of a zmm) takes the same instructions. Per block, the 16 rows'
 * nibbles are unpacked once into 8 zmm and each token's 32 activation bytes are broadcast 4 at
 * a time ({1to16}) into 8 vpdpbusd that start from -8*sum(y); then, as ref does, acc =
 * fma(dw*da, float(sum - 8*sum(y)), acc) per block: each lane is exactly x8_rows_q4_0's
 * computation, bit for bit ref's. */
static inline __attribute__((always_inline)) __m512i dpbusd_bcast16(__m512i acc, __m512i w, const int8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)(const void *)p));
    return acc;
}

static ALWAYS_INLINE __m512i load_pair(const uint8_t *p0, const uint8_t *p1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
                              _mm256_loadu_si256((const __m256i *)p1), 1);
}

/* the 8 fp16 scales at h0, then the 8 at h1, as 16 floats */
static ALWAYS_INLINE __m512 load_ph_pair(const hachi_half *h0, const hachi_half *h1) {
    const __m128i a = _mm_loadu_si128((const __m128i *)h0), b = _mm_loadu_si128((const __m128i *)h1);
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1));
}

/* Where a GEMM over a pair of row groups (g1 = g0 + S bytes, both read side by side, block by
 * block) prefetches: GEMM_PF_DIST bytes ahead in each stream, inside the pair while it lasts,
 * then in the pairs after it (the next gemm2 call's, from g0 + 2S). at() is the byte of g0's
 * stream that far ahead; the same byte of g1's stream is at() + S. (Before, each group was
 * prefetched at its own address + 8 KiB, which for a group shorter than that lands in data
 * already read and never reaches the next pair's second group: the Q6_K head (262144 x 1536,
 * groups of 10 KB) for 9 tokens took 37 ms from DRAM on 2 threads, 17 ms now; 16 KiB against 8
 * and 32: bench/RESULTS.md.) */
#ifndef GEMM_PF_DIST
#define GEMM_PF_DIST 16384
#endif
typedef struct { const char *g0; size_t S, k, r; } pair_pf;
static ALWAYS_INLINE pair_pf pair_pf_init(const void *g0, size_t S) {
    return (pair_pf){(const char *)g0, S, GEMM_PF_DIST / S, GEMM_PF_DIST % S};
}
static ALWAYS_INLINE const char *pair_pf_at(const pair_pf *p) { return p->g0 + 2 * p->k * p->S + p->r; }
static ALWAYS_INLINE void pair_pf_next(pair_pf *p, size_t blk) {
    p->r += blk;
    if (p->r >= p->S) { p->r -= p->S; p->k++; }
}

/* A forward of at most GEMM1_TOKENS tokens over Q4_0 rows of an even number of blocks goes
 * through gemm1, which takes its tile per pair of blocks (2j, 2j + 1): per token its 8 dwords of
 * quants, each beside its twin of the other block, so that one qword load broadcasts both; then
 * the tokens' -8*sum(y) and d, the pair's two side by side. Such a tile is packed in one act_pack
 * call and the tile's token count, which gemm_x8 gets too, tells the layout. (gemm2 through this
 * layout instead ran 3-5% slower for 16 tokens.) */
#define GEMM1_TOKENS 8
typedef struct act_twin_q8 {
    int8_t qs[GEMM1_TOKENS][8][2][4];   /* [token][dword][block of the pair][byte] */
    int32_t corr[GEMM1_TOKENS][2];
    float d[GEMM1_TOKENS][2];
} act_twin_q8;
_Static_assert(sizeof(act_twin_q8) <= 2 * sizeof(act_tile_q8), "a twin tile fits where a plain one goes");
static ALWAYS_INLINE bool act_twin(int64_t nb, int nt) { return nt <= GEMM1_TOKENS && nb % 2 == 0; }

static void act_pack_q4_0(int64_t n, const void *va, size_t a_stride, int t0, int nt, int tile_nt, void *tile) {
    const int64_t nb = n / QK8_0;
    if (!act_twin(nb, tile_nt)) {
        act_pack_q8(n, va, a_stride, t0, nt, tile_nt, tile);
        return;
    }
    act_twin_q8 *o = tile;
    for (int t = 0; t < nt; t++) {
        const char *ar = (const char *)va + (size_t)t * a_stride;
        const block_q8_0 *x = (const block_q8_0 *)(const void *)ar;
        for (int64_t b = 0; b < nb; b += 2) {
            act_twin_q8 *p = o + b / 2;
            const __m256i u = _mm256_loadu_si256((const __m256i *)x[b].qs), v = _mm256_loadu_si256((const __m256i *)x[b + 1].qs);
            const __m256i lo = _mm256_unpacklo_epi32(u, v), hi = _mm256_unpackhi_epi32(u, v);   /* u0 v0 u1 v1 | u4 v4 u5 v5 */
            _mm256_storeu_si256((__m256i *)p->qs[t][0], _mm256_permute2x128_si256(lo, hi, 0x20));
            _mm256_storeu_si256((__m256i *)p->qs[t][4], _mm256_permute2x128_si256(lo, hi, 0x31));
            for (int k = 0; k < 2; k++) {
                const char *ex = q4_0_extras(ar, nb, b + k);
                memcpy(&p->corr[t][k], ex, 4);
                memcpy(&p->d[t][k], ex + 16, 4);
            }
        }
    }
}

/* Token t's block b: its quants, -k*sum(y) and d, from rows a_stride apart or a packed tile */
static ALWAYS_INLINE const int8_t *act_q8_qs(const char *a, size_t a_stride, int64_t b, int t, bool packed) {
    return packed ? ((const act_tile_q8 *)(const void *)a)[b].qs[t] : ((const block_q8_0 *)(a + (size_t)t * a_stride) + b)->qs;
}
static ALWAYS_INLINE void act_q8_extras(const char *a, size_t a_stride, int64_t nb, int64_t b, int t, bool packed,
                                        int32_t *corr, float *d) {
    if (packed) {
        const act_tile_q8 *p = (const act_tile_q8 *)(const void *)a + b;
        *corr = p->half[t / 8].corr[t % 8];
        *d = p->half[t / 8].d[t % 8];
        return;
    }
    const char *ex = q4_0_extras(a + (size_t)t * a_stride, nb, b);
    memcpy(corr, ex, 4);
    memcpy(d, ex + 16, 4);
}

/* y[t*ldy + j] for the 16 rows of groups g0 (j < 8) and g1 (j >= 8) and tokens t < NT */
static ALWAYS_INLINE void gemm2_q4_0_any(int64_t n, float *y, int64_t ldy, const block_q4_0x8 *g0, const block_q4_0x8 *g1,
                                         const char *a, size_t a_stride, const int NT, const bool packed) {
    const int64_t nb = n / QK8_0;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[16];
    UNROLL for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    pair_pf pf = pair_pf_init(g0, (size_t)nb * sizeof *g0);
    for (int64_t b = 0; b < nb; b++, pair_pf_next(&pf, sizeof *g0)) {
        UNROLL for (int l = 0; l < 3; l++) {
            _mm_prefetch(pair_pf_at(&pf) + 64 * l, X8_PF_HINT);
            _mm_prefetch(pair_pf_at(&pf) + pf.S + 64 * l, X8_PF_HINT);
        }
        const __m512 dw = load_ph_pair(g0[b].d, g1[b].d);
        __m512i lo[4], hi[4];
        UNROLL for (int c = 0; c < 4; c++) {
            const __m512i v = load_pair(g0[b].qs + 32 * c, g1[b].qs + 32 * c);
            lo[c] = _mm512_and_si512(v, m4);
            hi[c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        UNROLL for (int t = 0; t < NT; t++) {
            const int8_t *qs = act_q8_qs(a, a_stride, b, t, packed);
            float da;
            int32_t corr;
            act_q8_extras(a, a_stride, nb, b, t, packed, &corr, &da);
            __m512i p = _mm512_set1_epi32(corr);   /* -8*sum(y) */
            UNROLL for (int c = 0; c < 4; c++) {
                p = dpbusd_bcast16(p, lo[c], qs + 4 * c);
                p = dpbusd_bcast16(p, hi[c], qs + 16 + 4 * c);
            }
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(da)), _mm512_cvtepi32_ps(p), acc[t]);
        }
    }
    UNROLL for (int t = 0; t < NT; t++) _mm512_storeu_ps(y + (size_t)t * ldy, acc[t]);
}
/* The 8 rows of one group (g) for NT <= GEMM1_TOKENS tokens (a twin tile), one stream of weights:
 * a zmm holds two adjacent blocks (2j, 2j + 1) of the 8 rows, row r's dword of block 2j in lane 2r
 * and of block 2j + 1 in lane 2r + 1, against the token's dword and its twin (one qword load,
 * broadcast). gemm2 reads two groups side by side, two streams S apart, which for a few tokens
 * streamed from DRAM 20-30% slower than one in a test of the two loops (bench/RESULTS.md). Lane
 * 2r then ends block 2j and, shifted down, block 2j + 1, in order: fma(dw*da, float(sum), acc) a
 * block, exactly x8_rows_q4_0's computation. Needs an even number of blocks. */
static ALWAYS_INLINE __m512 shr32_ps(__m512 x) { return _mm512_castsi512_ps(_mm512_srli_epi64(_mm512_castps_si512(x), 32)); }
static ALWAYS_INLINE void gemm1_q4_0(int64_t n, float *y, int64_t ldy, const block_q4_0x8 *g, const char *a, const int NT) {
    const int64_t nb = n / QK8_0;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i twin = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    __m512 acc[GEMM1_TOKENS];
    UNROLL for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2) {
        UNROLL for (int l = 0; l < 5; l++) _mm_prefetch((const char *)(g + b) + X8_PF_DIST + 64 * l, X8_PF_HINT);
        const act_twin_q8 *at = (const act_twin_q8 *)(const void *)a + b / 2;
        const __m512 dw = _mm512_permutex2var_ps(_mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g[b].d))), twin,
                                                 _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g[b + 1].d))));
        __m512i lo[4], hi[4];
        UNROLL for (int c = 0; c < 4; c++) {
            const __m512i v = _mm512_permutex2var_epi32(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(g[b].qs + 32 * c))), twin,
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(g[b + 1].qs + 32 * c))));
            lo[c] = _mm512_and_si512(v, m4);
            hi[c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        UNROLL for (int t = 0; t < NT; t++) {
            int64_t q;
            memcpy(&q, at->corr[t], 8);
            __m512i p = _mm512_set1_epi64(q), p1 = _mm512_setzero_si512();   /* -8*sum(y) of both blocks */
            UNROLL for (int c = 0; c < 4; c++) {   /* two chains of 4: integer sums, any order */
                memcpy(&q, at->qs[t][c], 8);
                DPBUSD(p, lo[c], _mm512_set1_epi64(q));
                memcpy(&q, at->qs[t][4 + c], 8);
                DPBUSD(p1, hi[c], _mm512_set1_epi64(q));
            }
            p = _mm512_add_epi32(p, p1);
            double da;
            memcpy(&da, at->d[t], 8);
            const __m512 sc = _mm512_mul_ps(dw, _mm512_castpd_ps(_mm512_set1_pd(da))), f = _mm512_cvtepi32_ps(p);
            acc[t] = _mm512_fmadd_ps(sc, f, acc[t]);
            acc[t] = _mm512_fmadd_ps(shr32_ps(sc), shr32_ps(f), acc[t]);
        }
    }
    UNROLL for (int t = 0; t < NT; t++)   /* the even lanes */
        _mm256_storeu_si256((__m256i *)(y + (size_t)t * ldy), _mm512_cvtepi64_epi32(_mm512_castps_si512(acc[t])));
}

static ALWAYS_INLINE void gemm2_q4_0(int64_t n, float *y, int64_t ldy, const block_q4_0x8 *g0, const block_q4_0x8 *g1,
                                     const char *a, size_t a_stride, const int NT) {
    gemm2_q4_0_any(n, y, ldy, g0, g1, a, a_stride, NT, false);
}
static ALWAYS_INLINE void gemm2_q4_0_packed(int64_t n, float *y, int64_t ldy, const block_q4_0x8 *g0,
                                            const block_q4_0x8 *g1, const char *a, size_t a_stride, const int NT) {
    gemm2_q4_0_any(n, y, ldy, g0, g1, a, a_stride, NT, true);
}

/* The same for interleaved q8_0 rows: per block the 16 rows' unsigned bytes in 8 zmm (no
 * unpacking), each token's 8 vpdpbusd starting from its -128*sum(y) (act_prep_q8_0): each lane
 * is exactly x8_rows_q8_0's computation, bit for bit ref's. */
static ALWAYS_INLINE void gemm2_q8_0_any(int64_t n, float *y, int64_t ldy, const block_q8_0x8 *g0, const block_q8_0x8 *g1,
                                         const char *a, size_t a_stride, const int NT, const bool packed) {
    const int64_t nb = n / QK8_0;
    __m512 acc[16];
    UNROLL for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    pair_pf pf = pair_pf_init(g0, (size_t)nb * sizeof *g0);
    for (int64_t b = 0; b < nb; b++, pair_pf_next(&pf, sizeof *g0)) {
        UNROLL for (int l = 0; l < 5; l++) {
            _mm_prefetch(pair_pf_at(&pf) + 64 * l, X8_PF_HINT);
            _mm_prefetch(pair_pf_at(&pf) + pf.S + 64 * l, X8_PF_HINT);
        }
        const __m512 dw = load_ph_pair(g0[b].d, g1[b].d);
        __m512i q[8];
        UNROLL for (int c = 0; c < 8; c++) q[c] = load_pair(g0[b].qs + 32 * c, g1[b].qs + 32 * c);
        UNROLL for (int t = 0; t < NT; t++) {
            const int8_t *qs = act_q8_qs(a, a_stride, b, t, packed);
            float da;
            int32_t corr;
            act_q8_extras(a, a_stride, nb, b, t, packed, &corr, &da);
            __m512i p = _mm512_set1_epi32(corr);   /* -128*sum(y) */
            UNROLL for (int c = 0; c < 8; c++) p = dpbusd_bcast16(p, q[c], qs + 4 * c);
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(da)), _mm512_cvtepi32_ps(p), acc[t]);
        }
    }
    UNROLL for (int t = 0; t < NT; t++) _mm512_storeu_ps(y + (size_t)t * ldy, acc[t]);
}
static ALWAYS_INLINE void gemm2_q8_0_packed(int64_t n, float *y, int64_t ldy, const block_q8_0x8 *g0,
                                            const block_q8_0x8 *g1, const char *a, size_t a_stride, const int NT) {
    gemm2_q8_0_any(n, y, ldy, g0, g1, a, a_stride, NT, true);
}

/* s + sc * (the 16 rows' dot products of one sub-block, q, with the token's 32 bytes at ya): 8
 * vpdpbusd in two chains, in one asm so that each token's sums die at once (as intrinsics, gcc
 * deferred every token's vpmulld past all its vpdpbusd and spilled 16 sums a sub-block: the Q4_K
 * GEMM ran 13% slower in cache) */
static ALWAYS_INLINE __m512i kx8_subblock(__m512i s, const __m512i *q, __m512i sc, const int8_t *ya) {
    __m512i p0, p1;
    __asm__("vpxord %[p0], %[p0], %[p0]\n\t"
            "vpxord %[p1], %[p1], %[p1]\n\t"
            "vpdpbusd 0(%[a])%{1to16%}, %[q0], %[p0]\n\t"
            "vpdpbusd 4(%[a])%{1to16%}, %[q1], %[p1]\n\t"
            "vpdpbusd 8(%[a])%{1to16%}, %[q2], %[p0]\n\t"
            "vpdpbusd 12(%[a])%{1to16%}, %[q3], %[p1]\n\t"
            "vpdpbusd 16(%[a])%{1to16%}, %[q4], %[p0]\n\t"
            "vpdpbusd 20(%[a])%{1to16%}, %[q5], %[p1]\n\t"
            "vpdpbusd 24(%[a])%{1to16%}, %[q6], %[p0]\n\t"
            "vpdpbusd 28(%[a])%{1to16%}, %[q7], %[p1]\n\t"
            "vpaddd %[p1], %[p0], %[p0]\n\t"
            "vpmulld %[sc], %[p0], %[p0]\n\t"
            "vpaddd %[p0], %[s], %[s]"
            : [s] "+v"(s), [p0] "=&v"(p0), [p1] "=&v"(p1)
            : [a] "r"(ya), [q0] "v"(q[0]), [q1] "v"(q[1]), [q2] "v"(q[2]), [q3] "v"(q[3]), [q4] "v"(q[4]),
              [q5] "v"(q[5]), [q6] "v"(q[6]), [q7] "v"(q[7]), [sc] "v"(sc), "m"(*(const int8_t (*)[32])ya));
    return s;
}

/* The same for interleaved q4_K rows (q5_K rows: high, the 5th bit from qh): per sub-block j of
 * 32 elements, the 16 rows' values in 8 zmm, 8 vpdpbusd per token (kx8_subblock), times the
 * rows' 6-bit scales (vpmulld); the mins' sum per token in 4 vpdpwssd, a row's mins of sub-
 * blocks 2k, 2k + 1 in a lane against the token's sums of those sub-blocks (the activation
 * extras of x86_q4k_x8.h): an exact integer, as the 8 vpdpwssd over the bsum pairs before it
 * (E2B Q4_K_M prefill 1.02-1.04x the time). The float sums build up in y. Each lane is exactly
 * x8_rows_kx8's computation, bit for bit ref's. Up to 8 tokens per pass (16 were no faster). */
static ALWAYS_INLINE void gemm2_kx8(int64_t n, float *y, int64_t ldy, const char *g0b, const char *g1b, const size_t bsz,
                                    const bool high, const char *a, size_t a_stride, const int NT) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
    UNROLL for (int t = 0; t < NT; t++) _mm512_storeu_ps(y + (size_t)t * ldy, _mm512_setzero_ps());
    pair_pf pf = pair_pf_init(g0b, (size_t)(n / QK_K) * bsz);
    for (int64_t b = 0; b < n / QK_K; b++, pair_pf_next(&pf, bsz)) {
        const block_q4_Kx8 *g0 = (const block_q4_Kx8 *)(const void *)(g0b + (size_t)b * bsz);
        const block_q4_Kx8 *g1 = (const block_q4_Kx8 *)(const void *)(g1b + (size_t)b * bsz);
        const uint8_t *qh0 = (const uint8_t *)g0 + offsetof(block_q5_Kx8, qh), *qh1 = (const uint8_t *)g1 + offsetof(block_q5_Kx8, qh);
        _Alignas(32) uint8_t sc0[64], sc1[64];   /* sc[8j + r]: row r's scale of sub-block j */
        q4k_x8_scales(g0->scales, sc0);
        q4k_x8_scales(g1->scales, sc1);
        __m512i sumi[8];
        UNROLL for (int j = 0; j < 8; j++) {
            UNROLL for (int l = 0; l < 3; l++) {   /* bsz / 8 bytes per sub-block */
                if (l == 2 && !high) break;
                _mm_prefetch(pair_pf_at(&pf) + bsz / 8 * j + 64 * l, X8_PF_HINT);
                _mm_prefetch(pair_pf_at(&pf) + pf.S + bsz / 8 * j + 64 * l, X8_PF_HINT);
            }
            const __m128i s8 = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(sc0 + 8 * j)),
                                                  _mm_loadl_epi64((const __m128i *)(sc1 + 8 * j)));
            const __m512i scv = _mm512_cvtepu8_epi32(s8);   /* the 16 rows' scales of sub-block j */
            const uint8_t *q0 = g0->qs + 256 * (j / 2), *q1 = g1->qs + 256 * (j / 2);
            __m512i q[8];
            UNROLL for (int c = 0; c < 8; c++) {
                const __m512i v = load_pair(q0 + 32 * c, q1 + 32 * c);
                q[c] = j % 2 ? _mm512_and_si512(_mm512_srli_epi16(v, 4), m4) : _mm512_and_si512(v, m4);
                if (high) {   /* bit j of each qh byte to bit 4 */
                    const __m512i h = load_pair(qh0 + 32 * c, qh1 + 32 * c);
                    const __m512i t = j < 4 ? _mm512_slli_epi16(h, 4 - j) : j == 4 ? h : _mm512_srli_epi16(h, j - 4);
                    q[c] = _mm512_or_si512(q[c], _mm512_and_si512(t, m10));
                }
            }
            UNROLL for (int t = 0; t < NT; t++) {
                const int8_t *ya = ((const block_q8_K *)(a + (size_t)t * a_stride) + b)->qs + 32 * j;
                sumi[t] = kx8_subblock(j ? sumi[t] : _mm512_setzero_si512(), q, scv, ya);
            }
        }
        __m512i mz[4];   /* int16 lanes 2r, 2r + 1: row r's mins of sub-blocks 2k, 2k + 1 */
        {
            __m256i m0[4], m1[4];
            q4k_x8_mins(g0->scales, m0);
            q4k_x8_mins(g1->scales, m1);
            UNROLL for (int k = 0; k < 4; k++) mz[k] = _mm512_inserti64x4(_mm512_castsi256_si512(m0[k]), m1[k], 1);
        }
        const __m512 dw = load_ph_pair(g0->d, g1->d);
        const __m512 dmw = load_ph_pair(g0->dmin, g1->dmin);
        UNROLL for (int t = 0; t < NT; t++) {
            const char *at = a + (size_t)t * a_stride;
            const block_q8_K *ab = (const block_q8_K *)at + b;
            const int32_t *bs = kx8_extras(at, n / QK_K, b);
            const __m512 da = _mm512_set1_ps(ab->d);
            __m512i summ = _mm512_setzero_si512();
            UNROLL for (int k = 0; k < 4; k++) summ = _mm512_dpwssd_epi32(summ, mz[k], _mm512_set1_epi32(bs[k]));
            __m512 acc = _mm512_loadu_ps(y + (size_t)t * ldy);
            acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(sumi[t]), acc);
            acc = _mm512_fnmadd_ps(_mm512_mul_ps(dmw, da), _mm512_cvtepi32_ps(summ), acc);
            _mm512_storeu_ps(y + (size_t)t * ldy, acc);
        }
    }
}
static ALWAYS_INLINE void gemm2_q4_K(int64_t n, float *y, int64_t ldy, const block_q4_Kx8 *g0, const block_q4_Kx8 *g1,
                                     const char *a, size_t a_stride, const int NT) {
    gemm2_kx8(n, y, ldy, (const char *)g0, (const char *)g1, sizeof *g0, false, a, a_stride, NT);
}

/* gemm_x8 from the two-group kernels (rows.h's GEMM_FROM_PAIRS) */
GEMM_FROM_PAIRS(gemm_q4_0, gemm2_q4_0, block_q4_0x8, QK8_0, x8_q4_0, 16, GEMM_CASES15)
GEMM_FROM_PAIRS(gemm_q4_K, gemm2_q4_K, block_q4_Kx8, QK_K, x8_q4_K, 8, GEMM_CASES7)

/* gemm_x8 over packed activations (one tile of nt <= 16 tokens): a twin tile through ones (gemm1
 * group by group) where the type has it, else pairs of groups, a lone group as a pair with itself
 * whose first 8 rows are kept */
#define GEMM_PACKED(name, gemm2, ones, blk)                                                            \
    static void name(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *a,    \
                     size_t a_stride, int nt) {                                                        \
        const int64_t nb = n / QK8_0;                                                                  \
        const blk *w = w8;                                                                             \
        const char *at = a;                                                                            \
        gemm1_groups_fn *const one = ones;                                                             \
        if (one && act_twin(nb, nt)) {                                                                 \
            one(n, y, ldy, w8, n_groups, at, nt);                                                      \
            return;                                                                                    \
        }                                                                                              \
        for (int gi = 0; gi < n_groups; gi += 2) {                                                     \
            const blk *g0 = w + (size_t)gi * nb;                                                       \
            const bool lone = gi + 1 == n_groups;                                                      \
            const blk *g1 = lone ? g0 : g0 + nb;                                                       \
            float s[16 * 16];                                                                          \
            float *yg = lone ? s : y + 8 * gi;                                                         \
            const int64_t ld = lone ? 16 : ldy;                                                        \
            switch (nt) {                                                                              \
                GEMM_CASES15_P(gemm2)                                                                  \
                default: gemm2(n, yg, ld, g0, g1, at, a_stride, 16); break;                            \
            }                                                                                          \
            if (lone)                                                                                  \
                for (int t = 0; t < nt; t++) memcpy(y + (size_t)t * ldy + 8 * gi, s + 16 * t, 8 * sizeof(float)); \
        }                                                                                              \
    }
#define GEMM_CASE_P(f, k) case k: f(n, yg, ld, g0, g1, at, a_stride, k); break;
#define GEMM_CASES15_P(f) GEMM_CASE_P(f, 1) GEMM_CASE_P(f, 2) GEMM_CASE_P(f, 3) GEMM_CASE_P(f, 4) GEMM_CASE_P(f, 5) \
    GEMM_CASE_P(f, 6) GEMM_CASE_P(f, 7) GEMM_CASE_P(f, 8) GEMM_CASE_P(f, 9) GEMM_CASE_P(f, 10) GEMM_CASE_P(f, 11) \
    GEMM_CASE_P(f, 12) GEMM_CASE_P(f, 13) GEMM_CASE_P(f, 14) GEMM_CASE_P(f, 15)
/* gemm1 over every group of w, for nt <= GEMM1_TOKENS tokens */
typedef void gemm1_groups_fn(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const char *at, int nt);
static void groups1_q4_0(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const char *at, int nt) {
    const block_q4_0x8 *w = w8;
    for (int gi = 0; gi < n_groups; gi++) {
        const block_q4_0x8 *g = w + (size_t)gi * (n / QK8_0);
        float *yg = y + 8 * gi;
        switch (nt) {
            case 1: gemm1_q4_0(n, yg, ldy, g, at, 1); break;
            case 2: gemm1_q4_0(n, yg, ldy, g, at, 2); break;
            case 3: gemm1_q4_0(n, yg, ldy, g, at, 3); break;
            case 4: gemm1_q4_0(n, yg, ldy, g, at, 4); break;
            case 5: gemm1_q4_0(n, yg, ldy, g, at, 5); break;
            case 6: gemm1_q4_0(n, yg, ldy, g, at, 6); break;
            case 7: gemm1_q4_0(n, yg, ldy, g, at, 7); break;
            default: gemm1_q4_0(n, yg, ldy, g, at, 8); break;
        }
    }
}
GEMM_PACKED(gemm_q4_0_packed, gemm2_q4_0_packed, groups1_q4_0, block_q4_0x8)
GEMM_PACKED(gemm_q8_0_packed, gemm2_q8_0_packed, NULL, block_q8_0x8)

void hachi_gemm_q4_0_x8_rows_avx512(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *a,
                                    size_t a_stride, int nt) {
    gemm_q4_0(n, y, ldy, w8, n_groups, a, a_stride, nt);
}

/* ---------------- interleaved q6_K rows: the 512-bit GEMM over x86_vnni_x8.h's Q6X8_VALUES ---------------- */

#define v512_and _mm512_and_si512
#define v512_or _mm512_or_si512
#define v512_srli _mm512_srli_epi16
#define v512_slli _mm512_slli_epi16

/* x8_rows_q6_K's work (x86_vnni_x8.h) for 16 rows (groups g0, g1, one per 256-bit half) and NT
 * <= 16 tokens: each lane is exactly its computation. The tokens' sums stay in registers for the
 * block (16 zmm), their float accumulators in an L1 array (one load and store a block): one pass
 * of up to 16 tokens unpacks each sub-block's values once. */
static ALWAYS_INLINE void gemm2_q6_K(int64_t n, float *y, int64_t ldy, const block_q6_Kx8 *g0, const block_q6_Kx8 *g1,
                                     const char *a, size_t a_stride, const int NT) {
    const int64_t nb = n / QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const ptrdiff_t d1 = (const char *)g1 - (const char *)g0;   /* g1's arrays at g0's + d1 */
    _Alignas(64) float acc[16][16];
    UNROLL for (int t = 0; t < NT; t++) _mm512_store_ps(acc[t], _mm512_setzero_ps());
    pair_pf pf = pair_pf_init(g0, (size_t)nb * sizeof *g0);
    for (int64_t b = 0; b < nb; b++, pair_pf_next(&pf, sizeof *g0)) {
        __m512i sumi[16];
        UNROLL for (int t = 0; t < NT; t++) sumi[t] = _mm512_setzero_si512();
        for (int j = 0; j < QK_K / 16; j++) {
            UNROLL for (int l = 0; l < 2; l++) {   /* 2048 bytes over the block's 1680 */
                _mm_prefetch(pair_pf_at(&pf) + 128 * j + 64 * l, X8_PF_HINT);
                _mm_prefetch(pair_pf_at(&pf) + pf.S + 128 * j + 64 * l, X8_PF_HINT);
            }
            __m512i q[4];
#define LOAD_G01(p) load_pair((p), (const uint8_t *)(p) + d1)
            Q6X8_VALUES(__m512i, v512, LOAD_G01, g0[b].ql, g0[b].qh, j / 2, j % 2, q);
#undef LOAD_G01
            const __m512i scv = _mm512_cvtepi8_epi32(_mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)g0[b].scales[j]),
                                                                        _mm_loadl_epi64((const __m128i *)g1[b].scales[j])));
            UNROLL for (int t = 0; t < NT; t++) {
                const char *at = a + (size_t)t * a_stride;
                const int8_t *ya = ((const block_q8_K *)at + b)->qs + 16 * j;
                __m512i p;   /* one asm, as kx8_subblock (as intrinsics: 1.1-1.4x the time in cache) */
                __asm__("vpbroadcastd %[e], %[p]\n\t"
                        "vpdpbusd 0(%[a])%{1to16%}, %[q0], %[p]\n\t"
                        "vpdpbusd 4(%[a])%{1to16%}, %[q1], %[p]\n\t"
                        "vpdpbusd 8(%[a])%{1to16%}, %[q2], %[p]\n\t"
                        "vpdpbusd 12(%[a])%{1to16%}, %[q3], %[p]\n\t"
                        "vpmulld %[sc], %[p], %[p]\n\t"
                        "vpaddd %[p], %[s], %[s]"
                        : [s] "+v"(sumi[t]), [p] "=&v"(p)
                        : [a] "r"(ya), [e] "m"(q6_K_extras(at, nb, b)[j]), [q0] "v"(q[0]), [q1] "v"(q[1]), [q2] "v"(q[2]),
                          [q3] "v"(q[3]), [sc] "v"(scv), "m"(*(const int8_t (*)[16])ya));
            }
        }
        const __m512 dw = load_ph_pair(g0[b].d, g1[b].d);
        UNROLL for (int t = 0; t < NT; t++) {
            const block_q8_K *ab = (const block_q8_K *)(a + (size_t)t * a_stride) + b;
            _mm512_store_ps(acc[t], _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(ab->d)), _mm512_cvtepi32_ps(sumi[t]),
                                                    _mm512_load_ps(acc[t])));
        }
    }
    UNROLL for (int t = 0; t < NT; t++) _mm512_storeu_ps(y + (size_t)t * ldy, _mm512_load_ps(acc[t]));
}
/* x8_rows_q6_K's work (x86_vnni_x8.h) in 512-bit vectors: this table's vec_dot_x8 (a decode step,
 * forwards of up to 4 tokens) and the GEMM's lone group. A zmm holds the 8 rows of sub-block 2u in
 * its lower half and of 2u + 1 in its upper half. The two share their ql bytes (low and high
 * nibbles: one 32-byte load to both halves, the upper half shifted) and have their qh bytes and
 * their scales side by side; a token's two activation dwords go to the halves by one vpermd of
 * its 32 bytes. The halves' integer sums add up at the block's end (exact, so bitwise the 256-bit
 * kernel's and ref's). Half the instructions: the 256-bit kernel was bound by them at one token
 * (the Q6_K head streamed at ~24 GB/s a core, cold or hot). */
static ALWAYS_INLINE void x8z_rows_q6_K(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    const block_q6_Kx8 *w = vw;
    const int64_t nb = n / QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i halves = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);   /* dword 0 | 1 */
    __m512i dwords[4];   /* dword c of the lower 16 bytes | of the upper 16 */
    UNROLL for (int c = 0; c < 4; c++) dwords[c] = _mm512_add_epi32(_mm512_slli_epi32(halves, 2), _mm512_set1_epi32(c));
    __m256 acc[4];
    UNROLL for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i sumi[4];
        for (int u = 0; u < QK_K / 32; u++) {
            UNROLL for (int l = 0; l < 4; l++)   /* 2048 bytes over the block's 1680 */
                _mm_prefetch((const char *)(w + b) + X8_PF_DIST + 256 * u + 64 * l, X8_PF_HINT);
            const __m512i h = _mm512_loadu_si512(w[b].qh + 64 * u);
            __m512i q[4];
            UNROLL for (int c = 0; c < 4; c++) {
                const __m512i l = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w[b].ql + 128 * u + 32 * c)));
                const __m512i t = c == 0 ? _mm512_slli_epi16(h, 4) : c == 1 ? _mm512_slli_epi16(h, 2) : c == 2 ? h : _mm512_srli_epi16(h, 2);
                q[c] = _mm512_or_si512(_mm512_and_si512(_mm512_mask_srli_epi16(l, 0xFFFF0000u, l, 4), m4), _mm512_and_si512(t, m30));
            }
            const __m512i scv = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)w[b].scales[2 * u]));
            UNROLL for (int r = 0; r < R; r++) {
                const char *ar = va + (size_t)r * stride;
                const __m512i y = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(((const block_q8_K *)ar + b)->qs + 32 * u)));
                __m512i p = _mm512_permutexvar_epi32(halves, _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(q6_K_extras(ar, nb, b) + 2 * u))));
                UNROLL for (int c = 0; c < 4; c++)
                    DPBUSD(p, q[c], _mm512_permutexvar_epi32(dwords[c], y));
                const __m512i t = _mm512_mullo_epi32(p, scv);
                sumi[r] = u ? _mm512_add_epi32(sumi[r], t) : t;
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w[b].d));
        UNROLL for (int r = 0; r < R; r++) {
            const block_q8_K *a = (const block_q8_K *)(va + (size_t)r * stride) + b;
            const __m256i si = _mm256_add_epi32(_mm512_castsi512_si256(sumi[r]), _mm512_extracti64x4_epi64(sumi[r], 1));
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a->d)), _mm256_cvtepi32_ps(si), acc[r]);
        }
    }
    UNROLL for (int r = 0; r < R; r++) _mm256_storeu_ps(s + 8 * r, acc[r]);
}
ROWS_FROM_N(x8z_q6_K, x8z_rows_q6_K, 8, 4)
GEMM_FROM_PAIRS(gemm_q6_K, gemm2_q6_K, block_q6_Kx8, QK_K, x8z_q6_K, 16, GEMM_CASES15)

/* ---------------- interleaved q5_K rows: the q4_K GEMM with the values' 5th bit ---------------- */

static ALWAYS_INLINE void gemm2_q5_K(int64_t n, float *y, int64_t ldy, const block_q5_Kx8 *g0, const block_q5_Kx8 *g1,
                                     const char *a, size_t a_stride, const int NT) {
    gemm2_kx8(n, y, ldy, (const char *)g0, (const char *)g1, sizeof *g0, true, a, a_stride, NT);
}
GEMM_FROM_PAIRS(gemm_q5_K, gemm2_q5_K, block_q5_Kx8, QK_K, x8_q5_K, 8, GEMM_CASES7)

/* ---------------- q6_K (512-bit) ---------------- */

#define Q6_PF_DIST 1024   /* 2 and 4 KiB measured no better for the Q6_K head */
#define Q6_ROWS 8         /* activation rows per pass of the multi kernel */

/* q6_K x q8_K per row, a half of 128 elements in two zmm: q01 = quarters 0 and 1 (the low
 * nibbles of ql[0..63] with qh's bits 0-1 and 2-3 above them), q23 = quarters 2 and 3 (the
 * high nibbles, qh's bits 4-5 and 6-7): unsigned 6-bit values, whose activations are the
 * 64 contiguous bytes y[0..63] and y[64..127]. maddubs makes int16 pairs (|sum| <= 2 * 63 *
 * 128 < 2^15); vpdpwssd multiplies them by the scale of their 16 elements and adds to int32.
 * The -32 offset is 32 * sum_j sc[j] * bsums[j]; acc = fma(da*dw, float(sumi), acc). The
 * quarters and the scale vectors are unpacked once per block for all R rows. */
static ALWAYS_INLINE void rows_q6_K(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    const block_q6_K *w = vw;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    /* int16 lane i of the scale vector of quarters (0,1) / (2,3) of half h: sc16[8h + 4k + i/8] */
#define Q6_SIDX(b) (b), (b), (b), (b), (b), (b), (b), (b), (b) + 1, (b) + 1, (b) + 1, (b) + 1, (b) + 1, (b) + 1, (b) + 1, \
                   (b) + 1, (b) + 2, (b) + 2, (b) + 2, (b) + 2, (b) + 2, (b) + 2, (b) + 2, (b) + 2, (b) + 3, (b) + 3, \
                   (b) + 3, (b) + 3, (b) + 3, (b) + 3, (b) + 3, (b) + 3
    static const int16_t idx[4][32] __attribute__((aligned(64))) = {{Q6_SIDX(0)}, {Q6_SIDX(4)}, {Q6_SIDX(8)}, {Q6_SIDX(12)}};
#undef Q6_SIDX
    const __m512i sidx[2][2] = {{_mm512_load_si512(idx[0]), _mm512_load_si512(idx[1])},
                                {_mm512_load_si512(idx[2]), _mm512_load_si512(idx[3])}};
    __m512 acc[Q6_ROWS];
    UNROLL for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const char *pf = (const char *)(w + i) + Q6_PF_DIST;
        _mm_prefetch(pf, X8_PF_HINT);
        _mm_prefetch(pf + 64, X8_PF_HINT);
        _mm_prefetch(pf + 128, X8_PF_HINT);
        _mm_prefetch(pf + 192, X8_PF_HINT);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[i].scales));
        const __m512i sc = _mm512_zextsi256_si512(sc16);
        __m512i sumi[Q6_ROWS];
        UNROLL for (int r = 0; r < R; r++) {
            const block_q8_K *a = (const block_q8_K *)(va + (size_t)r * stride) + i;
            const __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)a->bsums));
            sumi[r] = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5)));
        }
        UNROLL for (int h = 0; h < 2; h++) {
            const __m512i L = _mm512_loadu_si512(w[i].ql + 64 * h);
            const __m256i hq = _mm256_loadu_si256((const __m256i *)(w[i].qh + 32 * h));
            const __m512i H = _mm512_inserti64x4(_mm512_castsi256_si512(hq), _mm256_srli_epi16(hq, 2), 1);
            const __m512i q01 = _mm512_or_si512(_mm512_and_si512(L, m4), _mm512_and_si512(_mm512_slli_epi16(H, 4), m30));
            const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), m4), _mm512_and_si512(H, m30));
            const __m512i s01 = _mm512_permutexvar_epi16(sidx[h][0], sc), s23 = _mm512_permutexvar_epi16(sidx[h][1], sc);
            UNROLL for (int r = 0; r < R; r++) {
                const int8_t *y = ((const block_q8_K *)(va + (size_t)r * stride) + i)->qs + 128 * h;
                sumi[r] = _mm512_dpwssd_epi32(sumi[r], _mm512_maddubs_epi16(q01, _mm512_loadu_si512(y)), s01);
                sumi[r] = _mm512_dpwssd_epi32(sumi[r], _mm512_maddubs_epi16(q23, _mm512_loadu_si512(y + 64)), s23);
            }
        }
        const float dw = h2f(w[i].d);
        UNROLL for (int r = 0; r < R; r++) {
            const block_q8_K *a = (const block_q8_K *)(va + (size_t)r * stride) + i;
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a->d * dw), _mm512_cvtepi32_ps(sumi[r]), acc[r]);
        }
    }
    UNROLL for (int r = 0; r < R; r++) s[r] = _mm512_reduce_add_ps(acc[r]);
}
void hachi_vec_dot_q6_K_q8_K_avx512(int64_t n, float *s, const void *w, const void *a) { rows_q6_K(n, s, w, a, 0, 1); }
/* multi: activation rows 8 at a time (each weight block unpacked once per 8 tokens, not 4: the
 * 16 accumulators and the unpacked quarters fit the 32 registers) */
ROWS_FROM_N(multi_q6_K, rows_q6_K, 1, Q6_ROWS)

/* ---------------- activations ---------------- */

/* AVX2's gelu_mul 16 lanes at a time: the same operations element by element (tanh as Cephes'
 * tanhf: |x| < 0.625 an odd polynomial, else 1 - 2 / (e^2|x| + 1); sign restored), so the same
 * bits */
static inline __m512 tanh16(__m512 x) {
    const __m512 ax = _mm512_abs_ps(x);
    const __m512 e = hachi_exp512(_mm512_min_ps(_mm512_add_ps(ax, ax), _mm512_set1_ps(40.0f)));
    const __m512 big = _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
    const __m512 z = _mm512_mul_ps(ax, ax);
    __m512 p = _mm512_set1_ps(-5.70498872745e-3f);
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954e-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531e-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036e-1f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, z), ax, ax);
    const __m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_GE_OQ), p, big);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r),
                                               _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN))));
}

static inline __m512 gelu_mul16(__m512 v, __m512 g) {
    const __m512 y = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f),
                                   _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), v), _mm512_mul_ps(v, v), v));
    const __m512 h = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), v), _mm512_add_ps(_mm512_set1_ps(1.0f), tanh16(y)));
    return _mm512_mul_ps(h, g);
}

/* the last n % 16 elements masked */
static void gelu_mul(int64_t n, float *x, const float *g) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, gelu_mul16(_mm512_loadu_ps(x + i), _mm512_loadu_ps(g + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, m, gelu_mul16(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, g + i)));
    }
}

/* ---------------- the table ---------------- */

static void set(hachi_kernels *t, uint32_t type, hachi_vec_dot_fn dot, hachi_vec_dot_multi_fn multi) {
    t->t[type].vec_dot = dot;
    t->t[type].vec_dot_multi = multi;
}

/* on a copy of AVX2's table: entries not set below stay AVX2's */
#define X8_GEMM_MIN 3   /* tokens from which the interleaved types go through the GEMM: see below */
int hachi_kernels_fill_avx512(hachi_kernels *t) {
    set(t, HACHI_TYPE_F32, hachi_vec_dot_f32_avx512, multi_f32);
    set(t, HACHI_TYPE_F16, hachi_vec_dot_f16_avx512, multi_f16);
    set(t, HACHI_TYPE_BF16, hachi_vec_dot_bf16_avx512, multi_bf16);
    t->t[HACHI_TYPE_F32].gemm = gemm_f32;
    t->t[HACHI_TYPE_F16].gemm = gemm_f16;
    t->t[HACHI_TYPE_BF16].gemm = gemm_bf16;
    /* from 8 tokens (Zen 4, an E2B FFN-shaped F16 matmul from DRAM on 2 threads: 8 tokens 1.71 / 1.79
     * ms against multi's 2.19 / 2.07, 16 tokens 2.32 / 2.49 against 3.87 / 4.49; 4 tokens no faster) */
    t->t[HACHI_TYPE_F32].gemm_min = t->t[HACHI_TYPE_F16].gemm_min = t->t[HACHI_TYPE_BF16].gemm_min = 8;
    t->t[HACHI_TYPE_F16].to_float = to_float_f16;
    t->t[HACHI_TYPE_Q8_0].from_float = quantize_row_q8_0;
    t->f32_to_f16 = f32_to_f16;
    t->f16_to_f32 = f16_to_f32;
    t->dot_f16_multi = dot_f16_multi;
    t->axpy_f16_multi = axpy_f16_multi;
    t->attn_scores_f16 = attn_scores_f16;
    t->attn_softmax = attn_softmax;
    t->attn_values_f16 = attn_values_f16;
    t->attn_values_f16_hot = attn_values_f16_hot;
    t->attn_f32_g = 8;
    t->attn_f32_hd = 32;
    t->attn_scores_f32 = attn_scores_f32;
    t->attn_values_f32 = attn_values_f32;
    t->attn_scores_i8 = attn_scores_i8;
    t->attn_values_i8 = attn_values_i8;
    t->attn_values_i8_hot = attn_values_i8_hot;
    t->gelu_mul = gelu_mul;
    set(t, HACHI_TYPE_Q6_K, hachi_vec_dot_q6_K_q8_K_avx512, multi_q6_K);
    t->t[HACHI_TYPE_Q4_0].vec_dot_x8 = x8_q4_0;   /* with AVX2's activation extras */
    t->t[HACHI_TYPE_Q4_K].vec_dot_x8 = x8_q4_K;
    /* The GEMMs from X8_GEMM_MIN tokens (Zen 5, E2B-shaped Q4_0, 2 threads: verify k=8 1.80-1.83x a
     * step against 1.94-2.18x with x8_q4_0, prefill 2048 121-127 against 88 tok/s). Below it the
     * x8 kernels, which read one group of rows, one stream, where gemm2 reads a pair side by side:
     * at 2 tokens the x8 kernels made a forward 4-13% faster (3 runs of 30 alternated pairs in one
     * process, Q4_0 layers and Q6_K head), at 3 equal, at 4 7-12% slower. Q4_0 has gemm1, one
     * stream too, for 2-8 tokens: against x8_q4_0 7-8% faster at 2 tokens, against gemm2 9-12% at
     * 3-4 (the same runs) and a whole forward of 8 tokens 5-8% faster (5 runs of 30-40 pairs); for
     * one token x8_q4_0 stays (gemm1 0-5% slower, the GEMM before it: decode 15.2-17.4 against
     * 17.1-17.6 tok/s). */
    t->t[HACHI_TYPE_Q4_0].gemm_x8 = gemm_q4_0_packed;
    t->t[HACHI_TYPE_Q4_0].act_pack = act_pack_q4_0;
    t->t[HACHI_TYPE_Q4_0].act_pack_bytes = act_pack_bytes_q8;
    t->t[HACHI_TYPE_Q4_0].gemm_min = 2;
    t->t[HACHI_TYPE_Q4_K].gemm_x8 = gemm_q4_K;
    t->t[HACHI_TYPE_Q4_K].gemm_min = X8_GEMM_MIN;
    t->t[HACHI_TYPE_Q8_0].vec_dot_x8 = x8_q8_0;
    t->t[HACHI_TYPE_Q8_0].gemm_x8 = gemm_q8_0_packed;
    t->t[HACHI_TYPE_Q8_0].act_pack = act_pack_q8;
    t->t[HACHI_TYPE_Q8_0].act_pack_bytes = act_pack_bytes_q8;
    t->t[HACHI_TYPE_Q8_0].gemm_min = X8_GEMM_MIN;
    t->t[HACHI_TYPE_Q5_K].vec_dot_x8 = x8_q5_K;
    t->t[HACHI_TYPE_Q5_K].gemm_x8 = gemm_q5_K;
    t->t[HACHI_TYPE_Q5_K].gemm_min = X8_GEMM_MIN;
    t->t[HACHI_TYPE_Q6_K].act_extra = act_extra_q6_K;
    t->t[HACHI_TYPE_Q6_K].act_prep = act_prep_q6_K;
    t->t[HACHI_TYPE_Q6_K].vec_dot_x8 = x8z_q6_K;
    t->t[HACHI_TYPE_Q6_K].gemm_x8 = gemm_q6_K;
    t->t[HACHI_TYPE_Q6_K].gemm_min = 5;   /* x8z_q6_K (4 tokens a pass) below; with gemm2 from 4 tokens instead of 6 (bench_ab,
                                             E2B Q4_K_M): forwards of 4 rows 1.03x the time, of 5 rows 0.97x */
    return 1;
}

#else
int hachi_kernels_fill_avx512(hachi_kernels *t) { (void)t; return 0; }
#endif
