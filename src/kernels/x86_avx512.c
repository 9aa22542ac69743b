/* kernels/x86_avx512: the kernels that are really 512-bit: the float weight dots (F32, F16,
 * BF16; 16 lanes), fp16 conversion and the per-row fp16 attention kernels, on which the AVX2
 * attention tiles fall back. Every other entry is the AVX2 table's (dispatch.c starts this
 * table from a copy of it): the int8 dots stay 256-bit there (one 32-element block per
 * vector, no zmm frequency penalty on the hot int8 path), so are the int8 KV attention
 * kernels. Built with the F/BW/VL/DQ/VNNI
 * flags that dispatch.c checks the CPU for. */
#include "kernels/kernels.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include "kernels/rows.h"
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

/* float weights, per row: per 64 elements t = w0*a0 (+ w1*a1 + w2*a2 + w3*a3 by fma),
 * acc += t; then 16 at a time acc = fma(w, a, acc); reduce; scalar tail in order. */
#define FLOAT_ROWS(name, wtype, load, scalar)                                                \
    static ALWAYS_INLINE void name(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) { \
        const wtype *w = vw;                                                                 \
        __m512 acc[ROWS_MAX];                                                                \
        UNROLL for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();                     \
        int64_t i = 0;                                                                       \
        for (; i + 64 <= n; i += 64) {                                                       \
            PREFETCH(w + i);                                                                 \
            PREFETCH(w + i + 32);                                                            \
            const __m512 w0 = load(w + i), w1 = load(w + i + 16), w2 = load(w + i + 32), w3 = load(w + i + 48); \
            UNROLL for (int r = 0; r < R; r++) {                                             \
                const float *a = (const float *)(va + (size_t)r * stride) + i;               \
                __m512 t = _mm512_mul_ps(w0, _mm512_loadu_ps(a));                            \
                t = _mm512_fmadd_ps(w1, _mm512_loadu_ps(a + 16), t);                         \
                t = _mm512_fmadd_ps(w2, _mm512_loadu_ps(a + 32), t);                         \
                t = _mm512_fmadd_ps(w3, _mm512_loadu_ps(a + 48), t);                         \
                acc[r] = _mm512_add_ps(acc[r], t);                                           \
            }                                                                                \
        }                                                                                    \
        for (; i + 16 <= n; i += 16) {                                                       \
            const __m512 w0 = load(w + i);                                                   \
            UNROLL for (int r = 0; r < R; r++)                                               \
                acc[r] = _mm512_fmadd_ps(w0, _mm512_loadu_ps((const float *)(va + (size_t)r * stride) + i), acc[r]); \
        }                                                                                    \
        UNROLL for (int r = 0; r < R; r++) {                                                 \
            const float *a = (const float *)(va + (size_t)r * stride);                       \
            float sum = _mm512_reduce_add_ps(acc[r]);                                        \
            for (int64_t k = i; k < n; k++) sum += scalar(w[k]) * a[k];                      \
            s[r] = sum;                                                                      \
        }                                                                                    \
    }
// cppcheck-suppress invalidPointerCast ; the activation rows are f32 arrays (aligned scratch)
FLOAT_ROWS(rows_f32, float, load16_f32, id_f32)
// cppcheck-suppress invalidPointerCast ; the activation rows are f32 arrays (aligned scratch)
FLOAT_ROWS(rows_f16, uint16_t, load16_f16, h2f)
// cppcheck-suppress invalidPointerCast ; the activation rows are f32 arrays (aligned scratch)
FLOAT_ROWS(rows_bf16, uint16_t, load16_bf16, bf2f)
void hachi_vec_dot_f32_avx512(int64_t n, float *s, const void *w, const void *a) { rows_f32(n, s, w, a, 0, 1); }
void hachi_vec_dot_f16_avx512(int64_t n, float *s, const void *w, const void *a) { rows_f16(n, s, w, a, 0, 1); }
void hachi_vec_dot_bf16_avx512(int64_t n, float *s, const void *w, const void *a) { rows_bf16(n, s, w, a, 0, 1); }
MULTI_FROM_ROWS(multi_f32, rows_f32)
MULTI_FROM_ROWS(multi_f16, rows_f16)
MULTI_FROM_ROWS(multi_bf16, rows_bf16)

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

/* AVX2's attention tiles (x86_avx2_attn.c) over this file's per-row kernels */
static void attn_scores_f16(int64_t hd, int nk, const uint16_t *k, int64_t ks, const float *q, int G, float *s) {
    hachi_attn_scores_f16_avx2(dot_f16_multi, hd, nk, k, ks, q, G, s);
}
static void attn_values_f16(int64_t hd, int nk, const uint16_t *v, int64_t vs, const float *p, int G, float *out) {
    hachi_attn_values_f16_avx2(axpy_f16_multi, hd, nk, v, vs, p, G, out);
}

/* ---------------- the table ---------------- */

static void set(hachi_kernels *t, uint32_t type, hachi_vec_dot_fn dot, hachi_vec_dot_multi_fn multi) {
    t->t[type].vec_dot = dot;
    t->t[type].vec_dot_multi = multi;
}

/* on a copy of AVX2's table: entries not set below stay AVX2's */
int hachi_kernels_fill_avx512(hachi_kernels *t) {
    set(t, HACHI_TYPE_F32, hachi_vec_dot_f32_avx512, multi_f32);
    set(t, HACHI_TYPE_F16, hachi_vec_dot_f16_avx512, multi_f16);
    set(t, HACHI_TYPE_BF16, hachi_vec_dot_bf16_avx512, multi_bf16);
    t->t[HACHI_TYPE_F16].to_float = to_float_f16;
    t->f32_to_f16 = f32_to_f16;
    t->f16_to_f32 = f16_to_f32;
    t->dot_f16_multi = dot_f16_multi;
    t->axpy_f16_multi = axpy_f16_multi;
    t->attn_scores_f16 = attn_scores_f16;   /* the softmax stays AVX2's */
    t->attn_values_f16 = attn_values_f16;
    return 1;
}

#else
int hachi_kernels_fill_avx512(hachi_kernels *t) { (void)t; return 0; }
#endif
