/* x86_avx2_attn: register-blocked attention tiles for G = 4 or 8 query heads
 * per K/V head, the attention entries of the AVX2 and AVX-512 tables (other G,
 * or head dims not a multiple of 8 (scores) or 16 (values), go to the table's
 * per-row kernel passed as rows; softmax to ref's). Scores: one K row converted once, G accumulators (G
 * independent FMA chains), a transposing horizontal sum, the row 4 keys ahead
 * prefetched line by line. Values: keys in tiles of 8 (the V tile stays in L1,
 * the next one is prefetched a few lines at a time), 4 heads x 16 dims of output
 * in registers, each V element converted once per 4 heads.
 * The int8 scores are the same with int8 rows (sign-extended and converted to f32,
 * exactly) over the quantized queries' whole numbers in f32 (exact sums, kernels.h),
 * then times the query head's scale and the key's; the int8 values are kernels.h's
 * integer sums of 15-bit weights, two keys' 16-bit values a vpmaddwd; the other shapes
 * go to this file's per-key loops (scores) or ref's (values). */
#include "kernels/kernels.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <math.h>
#include "kernels/rows.h"
#include "kernels/x86_avx2_exp.h"

#define VTILE 8   /* keys per tile: 8 V rows stream in parallel (32 were ~20% slower from DRAM) */
#define KAHEAD 4  /* scores prefetch the K row this many keys ahead, a line per 32 dims (4096
                   * keys x 512 dims x 8 heads from DRAM, 2 threads: ~0.74 -> ~0.47 ms), past a
                   * call's last key too (kernels.h: the next tile's rows) */

/* The tiles load from the K/V rows and queries their callers pass; clang's analyzer follows
 * paths on which those are NULL (a cache with no rows), so its null-dereference check is off
 * for them. */
// NOLINTBEGIN(clang-analyzer-core.NullDereference)
static inline __m256 ld16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
/* 8 elements of a K/V row from element d: fp16 converted, or f32 (a tile converted already,
 * kernels.h attn_scores_f32: the same values) */
static ALWAYS_INLINE __m256 ld_row8(const void *r, int64_t d, const bool f32) {
    return f32 ? _mm256_loadu_ps((const float *)r + d) : ld16((const uint16_t *)r + d);
}
/* row i of rows stride elements apart */
static ALWAYS_INLINE const void *row_at(const void *rows, int64_t i, int64_t stride, const bool f32) {
    return (const char *)rows + i * stride * (f32 ? 4 : 2);
}

/* [sum(a0), .., sum(a7)] */
static inline __m256 hsum8(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5, __m256 a6, __m256 a7) {
    __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* fp16 rows (the row KAHEAD keys ahead prefetched), or f32 rows (kernels.h attn_scores_f32) */
static ALWAYS_INLINE void scores_g8(int64_t hd, int nk, const void *k, int64_t ks, const float *q, float *s,
                                    const bool f32) {
    const float *q0 = q, *q1 = q + hd, *q2 = q1 + hd, *q3 = q2 + hd, *q4 = q3 + hd, *q5 = q4 + hd, *q6 = q5 + hd,
                *q7 = q6 + hd;
    for (int j = 0; j < nk; j++) {
        const void *kr = row_at(k, j, ks, f32);
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
        for (int64_t d = 0; d < hd; d += 8) {
            if (!f32 && d % 32 == 0) _mm_prefetch((const char *)row_at(kr, KAHEAD, ks, false) + 2 * d, _MM_HINT_T0);
            const __m256 kv = ld_row8(kr, d, f32);
            a0 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q0 + d), a0);
            a1 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q1 + d), a1);
            a2 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q2 + d), a2);
            a3 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q3 + d), a3);
            a4 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q4 + d), a4);
            a5 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q5 + d), a5);
            a6 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q6 + d), a6);
            a7 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q7 + d), a7);
        }
        _mm256_storeu_ps(s + (size_t)j * 8, hsum8(a0, a1, a2, a3, a4, a5, a6, a7));
    }
}

static void scores_g4(int64_t hd, int nk, const uint16_t *k, int64_t ks, const float *q, float *s) {
    const float *q0 = q, *q1 = q + hd, *q2 = q1 + hd, *q3 = q2 + hd;
    int j = 0;
    for (; j + 2 <= nk; j += 2) {   /* two keys: 8 chains */
        const uint16_t *k0 = k + (size_t)j * ks, *k1 = k0 + ks, *ahead = k0 + KAHEAD * ks;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        for (int64_t d = 0; d < hd; d += 8) {
            if (d % 32 == 0) {
                _mm_prefetch((const char *)(ahead + d), _MM_HINT_T0);
                _mm_prefetch((const char *)(ahead + ks + d), _MM_HINT_T0);
            }
            const __m256 x0 = ld16(k0 + d), x1 = ld16(k1 + d);
            const __m256 r0 = _mm256_loadu_ps(q0 + d), r1 = _mm256_loadu_ps(q1 + d);
            const __m256 r2 = _mm256_loadu_ps(q2 + d), r3 = _mm256_loadu_ps(q3 + d);
            a0 = _mm256_fmadd_ps(x0, r0, a0); a1 = _mm256_fmadd_ps(x0, r1, a1);
            a2 = _mm256_fmadd_ps(x0, r2, a2); a3 = _mm256_fmadd_ps(x0, r3, a3);
            b0 = _mm256_fmadd_ps(x1, r0, b0); b1 = _mm256_fmadd_ps(x1, r1, b1);
            b2 = _mm256_fmadd_ps(x1, r2, b2); b3 = _mm256_fmadd_ps(x1, r3, b3);
        }
        _mm256_storeu_ps(s + (size_t)j * 4, hsum8(a0, a1, a2, a3, b0, b1, b2, b3));
    }
    for (; j < nk; j++) {
        const uint16_t *k0 = k + (size_t)j * ks;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t d = 0; d < hd; d += 8) {
            const __m256 x0 = ld16(k0 + d);
            a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(q0 + d), a0);
            a1 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(q1 + d), a1);
            a2 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(q2 + d), a2);
            a3 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(q3 + d), a3);
        }
        const __m256 z = _mm256_setzero_ps();
        _mm_storeu_ps(s + (size_t)j * 4, _mm256_castps256_ps128(hsum8(a0, a1, a2, a3, z, z, z, z)));
    }
}

void hachi_attn_scores_f16_avx2(hachi_dot_f16_multi_fn rows, int64_t hd, int nk, const uint16_t *k, int64_t ks,
                                const float *q, int G, float *s) {
    if (hd % 8 == 0 && G == 8) scores_g8(hd, nk, k, ks, q, s, false);
    else if (hd % 8 == 0 && G == 4) scores_g4(hd, nk, k, ks, q, s);
    else attn_scores_rows(rows, hd, nk, k, ks, q, G, s);
}

/* The value tiles' accumulators: rows o, o + hd, o + 2hd, o + 3hd (4 heads), 16 dims each (a: the
 * first 8, b: the next 8); x and y the key's 16 value dims, w its 4 heads' weights. */
static inline void acc4_load(const float *o, int64_t hd, __m256 *a, __m256 *b) {
    UNROLL for (int h = 0; h < 4; h++) { a[h] = _mm256_loadu_ps(o + h * hd); b[h] = _mm256_loadu_ps(o + h * hd + 8); }
}
static inline void acc4_store(float *o, int64_t hd, const __m256 *a, const __m256 *b) {
    UNROLL for (int h = 0; h < 4; h++) { _mm256_storeu_ps(o + h * hd, a[h]); _mm256_storeu_ps(o + h * hd + 8, b[h]); }
}
static inline void acc4_fma(const float *w, __m256 x, __m256 y, __m256 *a, __m256 *b) {
    UNROLL for (int h = 0; h < 4; h++) {
        const __m256 c = _mm256_broadcast_ss(w + h);
        a[h] = _mm256_fmadd_ps(c, x, a[h]);
        b[h] = _mm256_fmadd_ps(c, y, b[h]);
    }
}

/* out rows h0..h0+3, dims [d, d+16) += p[j*G + h] * v_j for keys j < n in order (fp16 or f32 rows) */
static ALWAYS_INLINE void values_4heads_dims(int64_t hd, int64_t d, int n, const void *v, int64_t vs, const float *p,
                                             int G, int h0, float *out, const bool f32) {
    __m256 a[4], b[4];
    acc4_load(out + (size_t)h0 * hd + d, hd, a, b);
    for (int j = 0; j < n; j++) {
        const void *vr = row_at(v, j, vs, f32);
        acc4_fma(p + (size_t)j * G + h0, ld_row8(vr, d, f32), ld_row8(vr, d + 8, f32), a, b);
    }
    acc4_store(out + (size_t)h0 * hd + d, hd, a, b);
}

/* out rows h0..h0+3 += p[j*G + h] * v_j over one tile of keys, 16 dims at a time (so the sums
 * grow key after key in out whatever the tiles). The nn rows at next (the next tile, past the
 * call's last key too: kernels.h) are prefetched a few lines per 16 dims, spread over the pass:
 * issuing the whole tile's prefetches at once stalled on the outstanding misses (0.79 -> 0.56 ms
 * for 4096 keys x 512 dims x 8 heads from DRAM, 2 threads). */
static void values_4heads(int64_t hd, int nk, const uint16_t *v, int64_t vs, const float *p, int G, int h0,
                          float *out, const uint16_t *next, int nn) {
    const int64_t row_lines = (hd + 31) / 32, lines = nn * row_lines, per_step = (lines + hd / 16 - 1) / (hd / 16);
    int64_t line = 0;
    for (int64_t d = 0; d < hd; d += 16) {
        for (int64_t e = line + per_step; line < e && line < lines; line++)
            _mm_prefetch((const char *)(next + (size_t)(line / row_lines) * vs + (line % row_lines) * 32), _MM_HINT_T0);
        values_4heads_dims(hd, d, nk, v, vs, p, G, h0, out, false);
    }
}

void hachi_attn_values_f16_avx2(hachi_axpy_f16_multi_fn rows, int64_t hd, int nk, const uint16_t *v, int64_t vs,
                                const float *p, int G, float *out) {
    if (hd % 16 || (G != 4 && G != 8)) { attn_values_rows(rows, hd, nk, v, vs, p, G, out); return; }
    for (int j0 = 0; j0 < nk; j0 += VTILE) {
        const int n = nk - j0 < VTILE ? nk - j0 : VTILE;
        const uint16_t *tile = v + (size_t)j0 * vs;
        for (int h0 = 0; h0 < G; h0 += 4)   /* the first pass prefetches the next tile */
            values_4heads(hd, n, tile, vs, p + (size_t)j0 * G, G, h0, out, tile + (size_t)n * vs, h0 ? 0 : VTILE);
    }
}

/* V rows in cache (attn_values_f16_hot): all nk keys per 16 dims, out loaded and stored once per
 * call instead of once per tile; nothing to prefetch (see the AVX-512 values_g8_hot) */
void hachi_attn_values_f16_hot_avx2(hachi_axpy_f16_multi_fn rows, int64_t hd, int nk, const uint16_t *v, int64_t vs,
                                    const float *p, int G, float *out) {
    if (hd % 16 || (G != 4 && G != 8)) { attn_values_rows(rows, hd, nk, v, vs, p, G, out); return; }
    for (int h0 = 0; h0 < G; h0 += 4)
        for (int64_t d = 0; d < hd; d += 16) values_4heads_dims(hd, d, nk, v, vs, p, G, h0, out, false);
}

/* kernels.h's attn_scores_f32 and attn_values_f32 for G = 8 and head dims a multiple of 16: the
 * fp16 tiles above (scores_g8, the hot values) over f32 rows, nothing to prefetch */
void hachi_attn_scores_f32_avx2(int64_t hd, int nk, const float *k, int64_t ks, const float *q, int G, float *s) {
    (void)G;
    scores_g8(hd, nk, k, ks, q, s, true);
}
void hachi_attn_values_f32_avx2(int64_t hd, int nk, const float *v, int64_t vs, const float *p, int G, float *out) {
    for (int h0 = 0; h0 < G; h0 += 4)
        for (int64_t d = 0; d < hd; d += 16) values_4heads_dims(hd, d, nk, v, vs, p, G, h0, out, true);
}

/* ---- int8 K/V rows ---------------------------------------------------------------------- */

static inline __m256 ld8_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

static inline float hsum1(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

static void scores_i8_g8(int64_t hd, int nk, const int8_t *k, int64_t ks, const float *sc, int64_t ss, const float *q,
                         const float *qs, float *s) {
    const float *q0 = q, *q1 = q + hd, *q2 = q1 + hd, *q3 = q2 + hd, *q4 = q3 + hd, *q5 = q4 + hd, *q6 = q5 + hd,
                *q7 = q6 + hd;
    for (int j = 0; j < nk; j++) {
        const int8_t *kr = k + (size_t)j * ks, *ahead = kr + KAHEAD * ks;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
        for (int64_t d = 0; d < hd; d += 8) {
            if (d % 64 == 0) _mm_prefetch((const char *)(ahead + d), _MM_HINT_T0);
            const __m256 kv = ld8_i8(kr + d);
            a0 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q0 + d), a0);
            a1 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q1 + d), a1);
            a2 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q2 + d), a2);
            a3 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q3 + d), a3);
            a4 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q4 + d), a4);
            a5 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q5 + d), a5);
            a6 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q6 + d), a6);
            a7 = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q7 + d), a7);
        }
        const __m256 scale = _mm256_set1_ps(sc[(size_t)j * ss]);
        const __m256 dot = hsum8(a0, a1, a2, a3, a4, a5, a6, a7);
        _mm256_storeu_ps(s + (size_t)j * 8, _mm256_mul_ps(_mm256_mul_ps(dot, _mm256_loadu_ps(qs)), scale));
    }
}

static void scores_i8_g4(int64_t hd, int nk, const int8_t *k, int64_t ks, const float *sc, int64_t ss, const float *q,
                         const float *qs, float *s) {
    const __m128 qs4 = _mm_loadu_ps(qs);
    const float *q0 = q, *q1 = q + hd, *q2 = q1 + hd, *q3 = q2 + hd;
    int j = 0;
    for (; j + 2 <= nk; j += 2) {   /* two keys: 8 chains, the two scales in the two halves */
        const int8_t *k0 = k + (size_t)j * ks, *k1 = k0 + ks, *ahead = k0 + KAHEAD * ks;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        for (int64_t d = 0; d < hd; d += 8) {
            if (d % 64 == 0) {
                _mm_prefetch((const char *)(ahead + d), _MM_HINT_T0);
                _mm_prefetch((const char *)(ahead + ks + d), _MM_HINT_T0);
            }
            const __m256 x0 = ld8_i8(k0 + d), x1 = ld8_i8(k1 + d);
            const __m256 r0 = _mm256_loadu_ps(q0 + d), r1 = _mm256_loadu_ps(q1 + d);
            const __m256 r2 = _mm256_loadu_ps(q2 + d), r3 = _mm256_loadu_ps(q3 + d);
            a0 = _mm256_fmadd_ps(x0, r0, a0); a1 = _mm256_fmadd_ps(x0, r1, a1);
            a2 = _mm256_fmadd_ps(x0, r2, a2); a3 = _mm256_fmadd_ps(x0, r3, a3);
            b0 = _mm256_fmadd_ps(x1, r0, b0); b1 = _mm256_fmadd_ps(x1, r1, b1);
            b2 = _mm256_fmadd_ps(x1, r2, b2); b3 = _mm256_fmadd_ps(x1, r3, b3);
        }
        const __m256 scale = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(sc[(size_t)j * ss])),
                                                  _mm_set1_ps(sc[(size_t)(j + 1) * ss]), 1);
        const __m256 dot = hsum8(a0, a1, a2, a3, b0, b1, b2, b3);
        _mm256_storeu_ps(s + (size_t)j * 4, _mm256_mul_ps(_mm256_mul_ps(dot, _mm256_set_m128(qs4, qs4)), scale));
    }
    for (; j < nk; j++) {
        const int8_t *k0 = k + (size_t)j * ks;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t d = 0; d < hd; d += 8) {
            const __m256 x0 = ld8_i8(k0 + d);
            a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(q0 + d), a0);
            a1 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(q1 + d), a1);
            a2 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(q2 + d), a2);
            a3 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(q3 + d), a3);
        }
        const __m256 z = _mm256_setzero_ps();
        const __m128 sum = _mm256_castps256_ps128(hsum8(a0, a1, a2, a3, z, z, z, z));
        _mm_storeu_ps(s + (size_t)j * 4, _mm_mul_ps(_mm_mul_ps(sum, qs4), _mm_set1_ps(sc[(size_t)j * ss])));
    }
}

/* any G and hd: per key, heads by four (each 8 dims of the row converted once per four) */
static void scores_i8_any(int64_t hd, int nk, const int8_t *k, int64_t ks, const float *sc, int64_t ss,
                          const float *q, const float *qs, int G, float *s) {
    for (int j = 0; j < nk; j++) {
        const int8_t *kr = k + (size_t)j * ks;
        const float scale = sc[(size_t)j * ss];
        float *sj = s + (size_t)j * G;
        int h = 0;
        for (; h + 4 <= G; h += 4) {
            const float *q0 = q + (size_t)h * hd, *q1 = q0 + hd, *q2 = q1 + hd, *q3 = q2 + hd;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            int64_t d = 0;
            for (; d + 8 <= hd; d += 8) {
                const __m256 x = ld8_i8(kr + d);
                a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(q0 + d), a0);
                a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(q1 + d), a1);
                a2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(q2 + d), a2);
                a3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(q3 + d), a3);
            }
            float s0 = hsum1(a0), s1 = hsum1(a1), s2 = hsum1(a2), s3 = hsum1(a3);
            for (; d < hd; d++) {
                const float x = (float)kr[d];
                s0 += x * q0[d]; s1 += x * q1[d]; s2 += x * q2[d]; s3 += x * q3[d];
            }
            sj[h] = s0 * qs[h] * scale; sj[h + 1] = s1 * qs[h + 1] * scale;
            sj[h + 2] = s2 * qs[h + 2] * scale; sj[h + 3] = s3 * qs[h + 3] * scale;
        }
        for (; h < G; h++) {
            const float *qh = q + (size_t)h * hd;
            __m256 a = _mm256_setzero_ps();
            int64_t d = 0;
            for (; d + 8 <= hd; d += 8) a = _mm256_fmadd_ps(ld8_i8(kr + d), _mm256_loadu_ps(qh + d), a);
            float sum = hsum1(a);
            for (; d < hd; d++) sum += (float)kr[d] * qh[d];
            sj[h] = sum * qs[h] * scale;
        }
    }
}

void hachi_attn_scores_i8_avx2(int64_t hd, int nk, const int8_t *k, int64_t ks, const float *sc, int64_t ss,
                               const hachi_query_i8 *q, int G, float *s) {
    if (hd % 8 == 0 && G == 8) scores_i8_g8(hd, nk, k, ks, sc, ss, q->qf, q->qs, s);
    else if (hd % 8 == 0 && G == 4) scores_i8_g4(hd, nk, k, ks, sc, ss, q->qf, q->qs, s);
    else scores_i8_any(hd, nk, k, ks, sc, ss, q->qf, q->qs, G, s);
}

/* kernels.h's attn_vmax_i8, four heads a vector (G % 4 == 0, else ref's) */
void hachi_attn_vmax_i8_avx2(int nk, const float *vs, int64_t ss, const float *p, int G, float *m) {
    if (G % 4) { hachi_attn_vmax_i8_ref(nk, vs, ss, p, G, m); return; }
    for (int h = 0; h < G; h += 4) {
        __m128 x = _mm_loadu_ps(m + h);
        for (int j = 0; j < nk; j++)
            x = _mm_max_ps(x, _mm_mul_ps(_mm_loadu_ps(p + (size_t)j * G + h), _mm_set1_ps(vs[(size_t)j * ss])));
        _mm_storeu_ps(m + h, x);
    }
}

void hachi_attn_quant_weights(const float *p, const float *sc, int64_t ss, int n, int G, const float *r, int32_t *wp) {
    for (int h = 0; h < G; h += 4) {
        const __m128 rh = _mm_loadu_ps(r + h);
        for (int j = 0; j < n; j += 2) {
            const __m128i lo = _mm_cvtps_epi32(
                _mm_mul_ps(_mm_mul_ps(_mm_loadu_ps(p + (size_t)j * G + h), _mm_set1_ps(sc[(size_t)j * ss])), rh));
            __m128i hi = _mm_setzero_si128();
            if (j + 1 < n)
                hi = _mm_cvtps_epi32(_mm_mul_ps(
                    _mm_mul_ps(_mm_loadu_ps(p + (size_t)(j + 1) * G + h), _mm_set1_ps(sc[(size_t)(j + 1) * ss])), rh));
            _mm_storeu_si128((__m128i *)(wp + (size_t)j / 2 * G + h), _mm_or_si128(lo, _mm_slli_epi32(hi, 16)));
        }
    }
}

/* 4 heads (h0..h0+3) x 16 dims of acc over a run's n keys, two keys a step: their rows' 16-bit
 * values interleaved by pairs (per 128-bit lane dims 0-3 in lo, 4-7 in hi) against each head's
 * pair of weights (vpmaddwd), the exact sums then put back in dim order. pf: prefetch each
 * row's next line (the caller's first pass over a line). */
static inline void values_i8q_4heads_dims(int64_t hd, int64_t d, int n, const int8_t *v, int64_t vs,
                                          const int32_t *wp, int G, int h0, int32_t *acc, bool first, bool pf) {
    __m256i a[4], b[4];
    for (int k = 0; k < 4; k++) a[k] = b[k] = _mm256_setzero_si256();
    for (int j = 0; j < n; j += 2) {
        const int8_t *r0 = v + (size_t)j * vs + d, *r1 = r0 + vs;
        if (pf) _mm_prefetch((const char *)(r0 + 64), _MM_HINT_T0);
        const __m256i x = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)r0));
        __m256i y = _mm256_setzero_si256();
        if (j + 1 < n) {
            if (pf) _mm_prefetch((const char *)(r1 + 64), _MM_HINT_T0);
            y = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)r1));
        }
        const __m256i lo = _mm256_unpacklo_epi16(x, y), hi = _mm256_unpackhi_epi16(x, y);
        const int32_t *w = wp + (size_t)j / 2 * G + h0;
        for (int k = 0; k < 4; k++) {
            const __m256i wv = _mm256_set1_epi32(w[k]);
            a[k] = _mm256_add_epi32(a[k], _mm256_madd_epi16(lo, wv));
            b[k] = _mm256_add_epi32(b[k], _mm256_madd_epi16(hi, wv));
        }
    }
    for (int k = 0; k < 4; k++) {
        __m256i *o = (__m256i *)(acc + (size_t)(h0 + k) * hd + d);
        __m256i s0 = _mm256_permute2x128_si256(a[k], b[k], 0x20), s1 = _mm256_permute2x128_si256(a[k], b[k], 0x31);
        if (!first) {
            s0 = _mm256_add_epi32(s0, _mm256_loadu_si256(o));
            s1 = _mm256_add_epi32(s1, _mm256_loadu_si256(o + 1));
        }
        _mm256_storeu_si256(o, s0);
        _mm256_storeu_si256(o + 1, s1);
    }
}

/* kernels.h's attn_values_i8, G % 4 == 0 and hd % 16 == 0 (else ref's): the run's weights, then
 * per 4 heads all dims 16 at a time over its keys; streaming (not hot): the first group's first
 * pass over each 64-byte line of the rows prefetches the next line */
static void values_i8q(int64_t hd, int nk, const int8_t *v, int64_t vs, const float *sc, int64_t ss, const float *p,
                       int G, const float *r, int32_t *acc, bool first, bool hot) {
    if (hd % 16 || G % 4 || G > 64) { hachi_attn_values_i8_ref(hd, nk, v, vs, sc, ss, p, G, r, acc, first); return; }
    int32_t wp[HACHI_VQ_KEYS / 2 * 64];
    hachi_attn_quant_weights(p, sc, ss, nk, G, r, wp);
    for (int h0 = 0; h0 < G; h0 += 4)
        for (int64_t d = 0; d < hd; d += 16)
            values_i8q_4heads_dims(hd, d, nk, v, vs, wp, G, h0, acc, first, !hot && h0 == 0 && d % 64 == 0 && d + 64 < hd);
}

void hachi_attn_values_i8_avx2(int64_t hd, int nk, const int8_t *v, int64_t vs, const float *sc, int64_t ss,
                               const float *p, int G, const float *r, int32_t *acc, bool first) {
    values_i8q(hd, nk, v, vs, sc, ss, p, G, r, acc, first, false);
}

void hachi_attn_values_i8_hot_avx2(int64_t hd, int nk, const int8_t *v, int64_t vs, const float *sc, int64_t ss,
                                   const float *p, int G, const float *r, int32_t *acc, bool first) {
    values_i8q(hd, nk, v, vs, sc, ss, p, G, r, acc, first, true);
}

/* kernels.h's attn_flush_i8, 8 dims a step (a scalar tail) */
void hachi_attn_flush_i8_avx2(int64_t hd, int G, const int32_t *acc, const float *u, float *out) {
    for (int h = 0; h < G; h++) {
        const __m256 uh = _mm256_set1_ps(u[h]);
        const int32_t *a = acc + (size_t)h * hd;
        float *o = out + (size_t)h * hd;
        int64_t d = 0;
        for (; d + 8 <= hd; d += 8)
            _mm256_storeu_ps(o + d, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(a + d))), uh,
                                                    _mm256_loadu_ps(o + d)));
        for (; d < hd; d++) o[d] = fmaf((float)a[d], u[h], o[d]);
    }
}

/* G = 8: one vector per key; G = 4: two keys per vector, the halves' maxima combined */
void hachi_attn_softmax_avx2(float *x, int n, int G, float scale, float *mx, float *sum) {
    if ((G != 8 && G != 4) || (int64_t)n * G % 8) { hachi_attn_softmax_ref(x, n, G, scale, mx, sum); return; }
    const int nv = n * G / 8;
    const __m256 sc = _mm256_set1_ps(scale);
    __m256 m = G == 8 ? _mm256_loadu_ps(mx) : _mm256_broadcast_ps((const __m128 *)mx);
    for (int i = 0; i < nv; i++) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), sc);
        _mm256_storeu_ps(x + 8 * i, v);
        m = _mm256_max_ps(v, m);   /* a NaN score passed over, as ref's v > mx */
    }
    if (G == 4) m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 0x01));   /* both halves: max per head */
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < nv; i++) {
        __m256 e = hachi_exp256(_mm256_sub_ps(_mm256_loadu_ps(x + 8 * i), m));
        _mm256_storeu_ps(x + 8 * i, e);
        acc = _mm256_add_ps(acc, e);
    }
    float mb[8], sb[8];
    _mm256_storeu_ps(mb, m);
    _mm256_storeu_ps(sb, acc);
    for (int h = 0; h < G; h++) { mx[h] = mb[h]; sum[h] = G == 4 ? sb[h] + sb[h + 4] : sb[h]; }
}
// NOLINTEND(clang-analyzer-core.NullDereference)
#endif
