/* kernels/arm_neon: AArch64 NEON kernels, the hot path on ARM64. Int8 dots use sdot
 * (vdotq_s32: 4 s8 products summed into each int32 lane) and are installed only when the
 * CPU reports ASIMDDP (dispatch.c asks); without it the int8 entries stay ref's while the
 * float, fp16 and attention kernels (fp16 and int8 KV rows, the softmax; plain ASIMD) and the
 * activations (GELU, softcap: the x86 files' Cephes exp and tanh) are still used.
 * vec_dot_multi unpacks each weight block once for all rows for Q4_0, Q8_0, Q4_K, Q6_K,
 * F16, F32; other types loop the dot. With sdot, Q4_0, Q8_0, Q4_K, Q5_K and Q6_K also get
 * vec_dot_x8 (rows interleaved by 8, so the loader repacks them). These five types also have a
 * prefill GEMM (gemm_x8) over activations packed in token pairs, by sdot or, with i8mm (smmla),
 * all but Q6_K's by smmla; F32, F16 and BF16 have one over rows in the file's layout. */
#include "kernels/kernels.h"

#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#include <arm_neon.h>
#include <math.h>
#include <string.h>
#include "kernels/exp_cephes.h"
#include "kernels/rows.h"
#include "util.h"

static inline float h2f(uint16_t h) { return hachi_f16_to_f32(h); }
static inline float32x4_t load_f16(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
static inline float32x4_t load_bf16(const uint16_t *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
static inline float32x4_t load_f32(const float *p) { return vld1q_f32(p); }
/* 8 fp16 values as 2 vectors: one 16-byte load, its two halves converted */
static inline void load8_f16(const uint16_t *p, float32x4_t *lo, float32x4_t *hi) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
    *lo = vcvt_f32_f16(vget_low_f16(h));
    *hi = vcvt_high_f32_f16(h);
}
/* 16 values as 4 vectors */
static inline void load16_f16(const uint16_t *p, float32x4_t v[4]) {
    load8_f16(p, &v[0], &v[1]);
    load8_f16(p + 8, &v[2], &v[3]);
}
static inline void load16_bf16(const uint16_t *p, float32x4_t v[4]) {
    UNROLL for (int i = 0; i < 2; i++) {
        const uint16x8_t h = vld1q_u16(p + 8 * i);
        v[2 * i] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
        v[2 * i + 1] = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
    }
}
static inline void load16_f32(const float *p, float32x4_t v[4]) {
    UNROLL for (int i = 0; i < 4; i++) v[i] = vld1q_f32(p + 4 * i);
}
static inline float id_f32(float x) { return x; }
static inline float bf2f(uint16_t h) { return hachi_bf16_to_f32(h); }

/* ---------------- float weights ---------------- */

/* Float weights: a tile of R weight rows x T activation rows (R <= 3, T <= 4). Per (row, token):
 * per 16 elements s = w0*a0 (+ w1*a1 + w2*a2 + w3*a3 by fma), acc += s; then 4 at a time
 * acc = fma(w, a, acc); vaddv; scalar tail in order; the result to y[t*ldy + r]. vec_dot and
 * multi are the tile of one weight row (rows_*), the prefill GEMM tiles of 3 rows x 4 tokens (the
 * x86 tables' shape), so all of them give the same sums bit for bit. A 3 x 4 tile converts each
 * weight vector once for 4 tokens and loads each activation vector once for 3 rows: 12
 * accumulators, 12 weight and 4 activation vectors and the sum, 29 of the 32 q registers. */
#define FGEMM_R 3
#define FGEMM_T 4
#define FTILE_CASE(tile, R, T) case FGEMM_T * ((R) - 1) + (T) - 1: tile(n, yt, ldy, wr, rb, at, stride, R, T); break;
#define FLOAT_KERNELS(sfx, wtype, load, load16, scalar)                                      \
    static ALWAYS_INLINE void tile_##sfx(int64_t n, float *y, int64_t ldy, const char *vw, size_t rb, \
                                         const char *va, size_t stride, const int R, const int T) { \
        float32x4_t acc[FGEMM_R][FGEMM_T];                                                   \
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] = vdupq_n_f32(0); \
        int64_t i = 0;                                                                       \
        for (; i + 16 <= n; i += 16) {                                                       \
            float32x4_t w[FGEMM_R][4];                                                       \
            UNROLL for (int r = 0; r < R; r++) {                                             \
                const wtype *wr = (const wtype *)(const void *)(vw + (size_t)r * rb) + i;    \
                load16(wr, w[r]);                                                            \
            }                                                                                \
            UNROLL for (int t = 0; t < T; t++) {                                             \
                const float *a = (const float *)(const void *)(va + (size_t)t * stride) + i; \
                const float32x4_t a0 = vld1q_f32(a), a1 = vld1q_f32(a + 4), a2 = vld1q_f32(a + 8), a3 = vld1q_f32(a + 12); \
                UNROLL for (int r = 0; r < R; r++) {                                         \
                    float32x4_t s = vmulq_f32(w[r][0], a0);                                  \
                    s = vfmaq_f32(s, w[r][1], a1);                                           \
                    s = vfmaq_f32(s, w[r][2], a2);                                           \
                    s = vfmaq_f32(s, w[r][3], a3);                                           \
                    acc[r][t] = vaddq_f32(acc[r][t], s);                                     \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
        for (; i + 4 <= n; i += 4)                                                           \
            UNROLL for (int r = 0; r < R; r++) {                                             \
                const float32x4_t w0 = load((const wtype *)(const void *)(vw + (size_t)r * rb) + i); \
                UNROLL for (int t = 0; t < T; t++)                                           \
                    acc[r][t] = vfmaq_f32(acc[r][t], w0, vld1q_f32((const float *)(const void *)(va + (size_t)t * stride) + i)); \
            }                                                                                \
        UNROLL for (int r = 0; r < R; r++) {                                                 \
            const wtype *wr = (const wtype *)(const void *)(vw + (size_t)r * rb);            \
            UNROLL for (int t = 0; t < T; t++) {                                             \
                const float *a = (const float *)(const void *)(va + (size_t)t * stride);     \
                float sum = vaddvq_f32(acc[r][t]);                                           \
                for (int64_t k = i; k < n; k++) sum += scalar(wr[k]) * a[k];                 \
                y[(size_t)t * ldy + r] = sum;                                                \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
    static ALWAYS_INLINE void rows_##sfx(int64_t n, float *s, const void *w, const char *va, size_t stride, const int R) { \
        tile_##sfx(n, s, 1, w, 0, va, stride, 1, R);                                         \
    }                                                                                        \
    void hachi_vec_dot_##sfx##_neon(int64_t n, float *s, const void *w, const void *a) { rows_##sfx(n, s, w, a, 0, 1); } \
    MULTI_FROM_ROWS(multi_##sfx, rows_##sfx)                                                 \
    /* the GEMM: tiles of FGEMM_R rows x FGEMM_T tokens, the last row and token tiles smaller */ \
    static void gemm_##sfx(int64_t n, float *y, int64_t ldy, const void *w, size_t rb, int n_rows, const void *a, \
                           size_t stride, int nt) {                                          \
        for (int r0 = 0; r0 < n_rows; r0 += FGEMM_R)                                         \
            for (int t0 = 0; t0 < nt; t0 += FGEMM_T) {                                       \
                const char *wr = (const char *)w + (size_t)r0 * rb, *at = (const char *)a + (size_t)t0 * stride; \
                float *yt = y + (size_t)t0 * ldy + r0;                                       \
                switch (FGEMM_T * (HACHI_MIN(FGEMM_R, n_rows - r0) - 1) + HACHI_MIN(FGEMM_T, nt - t0) - 1) { \
                    FTILE_CASE(tile_##sfx, 1, 1) FTILE_CASE(tile_##sfx, 1, 2) FTILE_CASE(tile_##sfx, 1, 3) \
                    FTILE_CASE(tile_##sfx, 1, 4) FTILE_CASE(tile_##sfx, 2, 1) FTILE_CASE(tile_##sfx, 2, 2) \
                    FTILE_CASE(tile_##sfx, 2, 3) FTILE_CASE(tile_##sfx, 2, 4) FTILE_CASE(tile_##sfx, 3, 1) \
                    FTILE_CASE(tile_##sfx, 3, 2) FTILE_CASE(tile_##sfx, 3, 3)                \
                    default: tile_##sfx(n, yt, ldy, wr, rb, at, stride, FGEMM_R, FGEMM_T); break; \
                }                                                                            \
            }                                                                                \
    }
// cppcheck-suppress invalidPointerCast ; the activation rows are f32 arrays (aligned scratch)
FLOAT_KERNELS(f32, float, load_f32, load16_f32, id_f32)
// cppcheck-suppress invalidPointerCast ; the activation rows are f32 arrays (aligned scratch)
FLOAT_KERNELS(f16, uint16_t, load_f16, load16_f16, h2f)
// cppcheck-suppress invalidPointerCast ; the activation rows are f32 arrays (aligned scratch)
FLOAT_KERNELS(bf16, uint16_t, load_bf16, load16_bf16, bf2f)

/* ---------------- 32-element blocks x q8_0 ---------------- */

/* q4_0 block -> elements 0..15 (low nibbles) in lo, 16..31 (high nibbles) in hi, minus 8 */
static inline void q4_0_unpack(const uint8_t *qs, int8x16_t *lo, int8x16_t *hi) {
    const uint8x16_t v = vld1q_u8(qs);
    *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0xF))), vdupq_n_s8(8));
    *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), vdupq_n_s8(8));
}

static inline int32x4_t dot32(int8x16_t x0, int8x16_t x1, const int8_t *y) {
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), x0, vld1q_s8(y)), x1, vld1q_s8(y + 16));
}

static inline void unpack_q4_0(const block_q4_0 *b, int8x16_t *lo, int8x16_t *hi) { q4_0_unpack(b->qs, lo, hi); }
static inline void unpack_q8_0(const block_q8_0 *b, int8x16_t *lo, int8x16_t *hi) {
    *lo = vld1q_s8(b->qs);
    *hi = vld1q_s8(b->qs + 16);
}

/* 32-element weight blocks x q8_0, per row: per pair of blocks the two int32 sum vectors are
 * folded pairwise into one (lanes: block 0, 0, 1, 1; exact), converted once and scaled by
 * [dw0*da0 x2, dw1*da1 x2] in one fma: acc = fma(acc, s, v); an odd last block
 * acc = fma(acc, v, dw*da). The unpacked pair stays in registers for all R rows. */
#define Q32_ROWS(name, wtype, unpack)                                                        \
    static ALWAYS_INLINE void name(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) { \
        const wtype *w = vw;                                                                 \
        const int64_t nb = n / 32;                                                           \
        float32x4_t acc[ROWS_MAX];                                                           \
        UNROLL for (int r = 0; r < R; r++) acc[r] = vdupq_n_f32(0);                          \
        int64_t i = 0;                                                                       \
        for (; i + 2 <= nb; i += 2) {                                                        \
            int8x16_t l0, h0, l1, h1;                                                        \
            unpack(w + i, &l0, &h0);                                                         \
            unpack(w + i + 1, &l1, &h1);                                                     \
            const float d0 = h2f(w[i].d), d1 = h2f(w[i + 1].d);                              \
            UNROLL for (int r = 0; r < R; r++) {                                             \
                const block_q8_0 *a = (const block_q8_0 *)(va + (size_t)r * stride) + i;    \
                const int32x4_t v = vpaddq_s32(dot32(l0, h0, a[0].qs), dot32(l1, h1, a[1].qs)); \
                const float32x4_t sc = vcombine_f32(vdup_n_f32(d0 * h2f(a[0].d)), vdup_n_f32(d1 * h2f(a[1].d))); \
                acc[r] = vfmaq_f32(acc[r], sc, vcvtq_f32_s32(v));                            \
            }                                                                                \
        }                                                                                    \
        if (i < nb) {                                                                        \
            int8x16_t l0, h0;                                                                \
            unpack(w + i, &l0, &h0);                                                         \
            const float d0 = h2f(w[i].d);                                                    \
            UNROLL for (int r = 0; r < R; r++) {                                             \
                const block_q8_0 *a = (const block_q8_0 *)(va + (size_t)r * stride) + i;    \
                acc[r] = vfmaq_n_f32(acc[r], vcvtq_f32_s32(dot32(l0, h0, a->qs)), d0 * h2f(a->d)); \
            }                                                                                \
        }                                                                                    \
        UNROLL for (int r = 0; r < R; r++) s[r] = vaddvq_f32(acc[r]);                        \
    }
Q32_ROWS(rows_q4_0, block_q4_0, unpack_q4_0)
Q32_ROWS(rows_q8_0, block_q8_0, unpack_q8_0)
void hachi_vec_dot_q4_0_q8_0_neon(int64_t n, float *s, const void *w, const void *a) { rows_q4_0(n, s, w, a, 0, 1); }
void hachi_vec_dot_q8_0_q8_0_neon(int64_t n, float *s, const void *w, const void *a) { rows_q8_0(n, s, w, a, 0, 1); }
MULTI_FROM_ROWS(multi_q4_0, rows_q4_0)
MULTI_FROM_ROWS(multi_q8_0, rows_q8_0)

/* 8 interleaved q4_0 rows (block_q4_0x8) against R activation rows: the 16 bytes at
 * qs + 32c (rows 0..3) and qs + 32c + 16 (rows 4..7) hold bytes 4c..4c+3 of each row, so
 * one sdot with lane c of the activation's elements 0..15 (low nibbles) or 16..31 (high
 * nibbles) adds 4 products into each row's int32 lane: the lanes are the rows' sums and
 * nothing is reduced horizontally. Weights are unpacked once per block for all R rows, as the
 * unsigned nibbles (0..15, valid s8 operands: an and and a shift a chunk), and the sdots start
 * from the activation block's -8*sum(y) (its extras, act_prep_q4_0), so they give ref's exact
 * sum(q*y) - 8*sum(y). (The nibbles as two's complement q - 8, x ^ 0x88 and shifts, took 74
 * instructions per 8 rows x 32 values for one token under qemu, this 58.) Then per block
 * acc = fma(dw*da, v, acc): ref's order, so results equal ref's bit for bit and never
 * depend on R (fp16 -> f32 is exact in hardware too). */
static ALWAYS_INLINE int32x4_t x8_dot4(int32x4_t v, const int8x16_t q[8], int8x16_t y0, int8x16_t y1) {
    v = vdotq_laneq_s32(v, q[0], y0, 0);
    v = vdotq_laneq_s32(v, q[1], y1, 0);
    v = vdotq_laneq_s32(v, q[2], y0, 1);
    v = vdotq_laneq_s32(v, q[3], y1, 1);
    v = vdotq_laneq_s32(v, q[4], y0, 2);
    v = vdotq_laneq_s32(v, q[5], y1, 2);
    v = vdotq_laneq_s32(v, q[6], y0, 3);
    return vdotq_laneq_s32(v, q[7], y1, 3);
}
/* NEON's Q4_0 activation extras: per block -8*sum(y) (int32) and d as a float, 8 bytes a block
 * after the row's blocks (act_prep: once per matmul, not per weight row) */
static size_t act_extra_q4_0(int64_t n) { return (size_t)(n / QK8_0) * 8; }
static void act_prep_q4_0(int64_t n, void *va, int64_t b0, int64_t b1) {
    const block_q8_0 *a = va;
    char *ex = (char *)va + n / QK8_0 * (int64_t)sizeof(block_q8_0);
    for (int64_t b = b0; b < b1; b++) {
        const int32_t corr = -8 * (vaddlvq_s8(vld1q_s8(a[b].qs)) + vaddlvq_s8(vld1q_s8(a[b].qs + 16)));
        const float d = h2f(a[b].d);
        memcpy(ex + 8 * b, &corr, 4);
        memcpy(ex + 8 * b + 4, &d, 4);
    }
}
static ALWAYS_INLINE void x8_rows_q4_0(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    const block_q4_0x8 *w = vw;
    const int64_t nb = n / QK8_0;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float32x4_t acc0[ROWS_MAX], acc1[ROWS_MAX];   /* rows 0..3, 4..7 */
    UNROLL for (int r = 0; r < R; r++) acc0[r] = acc1[r] = vdupq_n_f32(0);
    for (int64_t b = 0; b < nb; b++) {
        int8x16_t q[2][8];   /* [h][2c], [h][2c + 1]: rows 4h..4h+3, bytes 4c..4c+3, lo and hi nibbles */
        UNROLL for (int c = 0; c < 4; c++)
            UNROLL for (int h = 0; h < 2; h++) {
                const uint8x16_t x = vld1q_u8(w[b].qs + 32 * c + 16 * h);
                q[h][2 * c] = vreinterpretq_s8_u8(vandq_u8(x, m4));
                q[h][2 * c + 1] = vreinterpretq_s8_u8(vshrq_n_u8(x, 4));
            }
        const float32x4_t d0 = load_f16(w[b].d), d1 = load_f16(w[b].d + 4);
        UNROLL for (int r = 0; r < R; r++) {
            const char *row = va + (size_t)r * stride;
            const block_q8_0 *a = (const block_q8_0 *)(const void *)row + b;
            const int8x16_t y0 = vld1q_s8(a->qs), y1 = vld1q_s8(a->qs + 16);
            int32_t corr;
            float dav;
            memcpy(&corr, row + nb * (int64_t)sizeof(block_q8_0) + 8 * b, 4);
            memcpy(&dav, row + nb * (int64_t)sizeof(block_q8_0) + 8 * b + 4, 4);
            const int32x4_t c0 = vdupq_n_s32(corr);
            const float32x4_t da = vdupq_n_f32(dav);
            acc0[r] = vfmaq_f32(acc0[r], vmulq_f32(d0, da), vcvtq_f32_s32(x8_dot4(c0, q[0], y0, y1)));
            acc1[r] = vfmaq_f32(acc1[r], vmulq_f32(d1, da), vcvtq_f32_s32(x8_dot4(c0, q[1], y0, y1)));
        }
    }
    UNROLL for (int r = 0; r < R; r++) {
        vst1q_f32(s + 8 * r, acc0[r]);
        vst1q_f32(s + 8 * r + 4, acc1[r]);
    }
}
ROWS_FROM(x8_q4_0, x8_rows_q4_0, 8)

/* 8 interleaved q8_0 rows (block_q8_0x8) against R activation rows: the 16 bytes at qs + 32c
 * (rows 0..3) and qs + 32c + 16 (rows 4..7) hold values 4c..4c+3 of each row, stored + 128;
 * x ^ 0x80 gives the signed values back, so 8 sdots with lane c % 4 of the activation's
 * elements 0..15 (c < 4) or 16..31 leave each row's exact sum(q*y) (= ref's sum(u*y) -
 * 128*sum(y)) in its int32 lane. Then acc = fma(dw*da, v, acc) per block: ref's order, bit
 * for bit, whatever R. */
static ALWAYS_INLINE int32x4_t x8_dot8(const int8x16_t q[8], int8x16_t y0, int8x16_t y1) {
    int32x4_t v = vdotq_laneq_s32(vdupq_n_s32(0), q[0], y0, 0);
    v = vdotq_laneq_s32(v, q[1], y0, 1);
    v = vdotq_laneq_s32(v, q[2], y0, 2);
    v = vdotq_laneq_s32(v, q[3], y0, 3);
    v = vdotq_laneq_s32(v, q[4], y1, 0);
    v = vdotq_laneq_s32(v, q[5], y1, 1);
    v = vdotq_laneq_s32(v, q[6], y1, 2);
    return vdotq_laneq_s32(v, q[7], y1, 3);
}
static ALWAYS_INLINE void x8_rows_q8_0(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    const block_q8_0x8 *w = vw;
    const int8x16_t x80 = vdupq_n_s8((int8_t)0x80);
    float32x4_t acc0[ROWS_MAX], acc1[ROWS_MAX];   /* rows 0..3, 4..7 */
    UNROLL for (int r = 0; r < R; r++) acc0[r] = acc1[r] = vdupq_n_f32(0);
    for (int64_t b = 0; b < n / QK8_0; b++) {
        int8x16_t q[2][8];   /* [h][c]: rows 4h..4h+3, values 4c..4c+3 */
        UNROLL for (int c = 0; c < 8; c++)
            UNROLL for (int h = 0; h < 2; h++) q[h][c] = veorq_s8(vld1q_s8((const int8_t *)w[b].qs + 32 * c + 16 * h), x80);
        const float32x4_t d0 = load_f16(w[b].d), d1 = load_f16(w[b].d + 4);
        UNROLL for (int r = 0; r < R; r++) {
            const block_q8_0 *a = (const block_q8_0 *)(va + (size_t)r * stride) + b;
            const int8x16_t y0 = vld1q_s8(a->qs), y1 = vld1q_s8(a->qs + 16);
            const float32x4_t da = vcvt_f32_f16(vreinterpret_f16_u16(vld1_dup_u16(&a->d)));   /* exact */
            acc0[r] = vfmaq_f32(acc0[r], vmulq_f32(d0, da), vcvtq_f32_s32(x8_dot8(q[0], y0, y1)));
            acc1[r] = vfmaq_f32(acc1[r], vmulq_f32(d1, da), vcvtq_f32_s32(x8_dot8(q[1], y0, y1)));
        }
    }
    UNROLL for (int r = 0; r < R; r++) {
        vst1q_f32(s + 8 * r, acc0[r]);
        vst1q_f32(s + 8 * r + 4, acc1[r]);
    }
}
ROWS_FROM(x8_q8_0, x8_rows_q8_0, 8)

/* ---------------- prefill GEMM over interleaved Q4_0 / Q8_0 rows (gemm_x8) ---------------- */

/* The activations come packed per tile of 16 tokens (act_pack): per block of 32, per half of the
 * tile (its tokens 0..7 or 8..15, 4 pairs), pair p's 64 bytes as 4 registers k < 4 that hold
 * elements 8k..8k+7 of the pair's first token, then the same of its second (smmla's operand as it
 * is; to sdot by lane, lanes 2s and 2s + 1 are token s's elements 8k..8k+3 and 8k+4..8k+7), then
 * the 8 tokens' d as floats; a half is 5 cache lines of its own, so two threads can pack the two. */
typedef struct act_pair_half {
    int8_t qs[4][4][16];   /* [pair][k][token of the pair * 8 + i]: element 8k + i */
    float d[8];
    float pad[8];
} act_pair_half;
typedef struct act_pair_tile { act_pair_half half[2]; } act_pair_tile;

static size_t act_pack_bytes_pairs(int64_t n) { return (size_t)(n / QK8_0) * sizeof(act_pair_tile); }
/* tokens t0.. t0 + nt - 1 (one half of the tile); an odd count's last pair gets a zero token */
static void act_pack_pairs(int64_t n, const void *va, size_t a_stride, int t0, int nt, int tile_nt, void *tile) {
    (void)tile_nt;
    static const int8_t zero[QK8_0];
    act_pair_tile *o = tile;
    for (int i = 0; i < nt + (nt & 1); i++) {
        const int t = t0 + i, p = t % 8 / 2, s = t % 2;
        const block_q8_0 *x = i < nt ? (const block_q8_0 *)(const void *)((const char *)va + (size_t)i * a_stride) : NULL;
        for (int64_t b = 0; b < n / QK8_0; b++) {
            act_pair_half *hf = &o[b].half[t / 8];
            for (int k = 0; k < 4; k++) memcpy(hf->qs[p][k] + 8 * s, (x ? x[b].qs : zero) + 8 * k, 8);
            hf->d[t % 8] = x ? h2f(x[b].d) : 0.0f;
        }
    }
}
static ALWAYS_INLINE const act_pair_half *act_pair_next(const act_pair_half *A) {
    return (const act_pair_half *)(const void *)((const char *)A + sizeof(act_pair_tile));
}
/* token 2p + s's d (one load of 4 floats serves two pairs) times the rows' dw */
static ALWAYS_INLINE float32x4_t scale_of(float32x4_t dw, const act_pair_half *A, int p, int s) {
    const float32x4_t dq = vld1q_f32(A->d + 4 * (p / 2));
    const float32x2_t d2 = p % 2 ? vget_high_f32(dq) : vget_low_f32(dq);
    return s ? vmulq_lane_f32(dw, d2, 1) : vmulq_lane_f32(dw, d2, 0);
}

/* token s (0, 1) of a pair's sum over 32 values against 4 rows' chunks w[c] (values 4c..4c+3 of
 * each row): those values are in the pair's register c / 2, lane 2s + c % 2 */
static ALWAYS_INLINE int32x4_t pair_dot8(const int8x16_t w[8], const int8x16_t a[4], int s) {
    int32x4_t v = vdupq_n_s32(0);
    UNROLL for (int c = 0; c < 8; c++) {
        switch (2 * s + c % 2) {   /* a constant after unrolling */
        case 0: v = vdotq_laneq_s32(v, w[c], a[c / 2], 0); break;
        case 1: v = vdotq_laneq_s32(v, w[c], a[c / 2], 1); break;
        case 2: v = vdotq_laneq_s32(v, w[c], a[c / 2], 2); break;
        default: v = vdotq_laneq_s32(v, w[c], a[c / 2], 3); break;
        }
    }
    return v;
}

/* A pass holds half a group's rows (4h..4h+3) against the up to 8 tokens of one tile half: the
 * rows' chunks unpacked as x8_rows_q4_0 / x8_rows_q8_0 do (8 registers), each token's 8 sdots by
 * lane of its pair's registers into one int32 lane per row, its float sums in registers over all
 * blocks. Exact integer sums, then x8_rows_*'s fma(dw*da, float(sum), acc) a block: their
 * results, ref's, bit for bit. x8_rows_* hold all 8 rows for 4 tokens; here the unpacking and the
 * rows' scales serve 8 tokens and the activations come packed: at 8 and 16 tokens 0.93 (Q4_0) and
 * 0.86 (Q8_0) of the x8 kernels' instructions, counted under qemu (bench/neon_counts.sh); below 5
 * (Q4_0) and 4 (Q8_0) tokens the x8 kernels take fewer (gemm_min). */
static ALWAYS_INLINE void sdot_gemm_half(int64_t nb, float *y, int64_t ldy, const char *g, size_t bsz, const bool q4,
                                         const void *tile_half, int h, const int NT) {
    const act_pair_half *A = tile_half;
    const int NP = (NT + 1) / 2;
    float32x4_t acc[8];   /* [token]: rows 4h..4h+3 */
    UNROLL for (int t = 0; t < NT; t++) acc[t] = vdupq_n_f32(0);
    for (int64_t b = 0; b < nb; b++, A = act_pair_next(A)) {
        const char *wb = g + (size_t)b * bsz;
        const int8_t *qs = (const int8_t *)(wb + 8 * sizeof(uint16_t));   /* after d[8] */
        int8x16_t w[8];   /* [c]: elements 4c..4c+3 of the 4 rows (q4_0: lo nibbles in c < 4, hi 16 + ..) */
        UNROLL for (int c = 0; c < 8; c++) {
            if (q4 && c >= 4) break;
            const int8x16_t x = veorq_s8(vld1q_s8(qs + 32 * c + 16 * h), vdupq_n_s8((int8_t)(q4 ? 0x88 : 0x80)));
            if (q4) {
                w[c] = vshrq_n_s8(vshlq_n_s8(x, 4), 4);
                w[4 + c] = vshrq_n_s8(x, 4);
            } else {
                w[c] = x;
            }
        }
        const float32x4_t dw = load_f16((const uint16_t *)(const void *)wb + 4 * h);
        UNROLL for (int p = 0; p < NP; p++) {
            int8x16_t a[4];
            UNROLL for (int k = 0; k < 4; k++) a[k] = vld1q_s8(A->qs[p][k]);
            UNROLL for (int s = 0; s < 2; s++) {
                if (2 * p + s == NT) break;   /* an odd count's zero token: not computed */
                acc[2 * p + s] = vfmaq_f32(acc[2 * p + s], scale_of(dw, A, p, s), vcvtq_f32_s32(pair_dot8(w, a, s)));
            }
        }
    }
    UNROLL for (int t = 0; t < NT; t++) vst1q_f32(y + (size_t)t * ldy + 4 * h, acc[t]);
}

/* gemm_x8 from a half-group kernel: per group, per half of the tile, both halves of the rows */
#define HALF_CASE(kern, blk, f, k) case k: kern(nb, yt, ldy, g, sizeof(blk), f, A, h, k); break;
#define GEMM_FROM_HALVES(name, kern, blk, qk, tile_t, f, attr)                                         \
    attr static void name(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *tile, \
                          size_t a_stride, int nt) {                                                   \
        (void)a_stride;                                                                                \
        const int64_t nb = n / (qk);                                                                   \
        for (int gi = 0; gi < n_groups; gi++) {                                                        \
            const char *g = (const char *)w8 + (size_t)gi * nb * sizeof(blk);                          \
            for (int th = 0; 8 * th < nt; th++) {                                                      \
                const void *A = &((const tile_t *)tile)->half[th];                                     \
                float *yt = y + (size_t)(8 * th) * ldy + 8 * gi;                                       \
                UNROLL for (int h = 0; h < 2; h++) switch (HACHI_MIN(8, nt - 8 * th)) {                \
                    HALF_CASE(kern, blk, f, 1) HALF_CASE(kern, blk, f, 2) HALF_CASE(kern, blk, f, 3)   \
                    HALF_CASE(kern, blk, f, 4) HALF_CASE(kern, blk, f, 5) HALF_CASE(kern, blk, f, 6)   \
                    HALF_CASE(kern, blk, f, 7) default: kern(nb, yt, ldy, g, sizeof(blk), f, A, h, 8); break; \
                    }                                                                                  \
            }                                                                                          \
        }                                                                                              \
    }
GEMM_FROM_HALVES(gemm_sdot_q4_0, sdot_gemm_half, block_q4_0x8, QK8_0, act_pair_tile, true, )
GEMM_FROM_HALVES(gemm_sdot_q8_0, sdot_gemm_half, block_q8_0x8, QK8_0, act_pair_tile, false, )

/* i8mm (FEAT_I8MM, smmla): vmmlaq_s32(m, a, b) adds the 2x2 products of two rows of 8 s8 in a
 * (a[0..7], a[8..15]) with two rows of 8 in b: m += [a0.b0, a0.b1, a1.b0, a1.b1]. Forwards of
 * two or more activation rows take them in pairs: b holds 8 consecutive values of two weight
 * rows, which zip1 / zip2 of the 32-bit lanes of two x8 chunks (bytes 4c..4c+3 and 4c+4..4c+7
 * of rows 4h..4h+3) give for rows 4h, 4h+1 and 4h+2, 4h+3; a holds the same 8 elements of the
 * two activation rows. Two smmla cover 16 values of two weight rows for two tokens, where sdot
 * takes four. Each (token, row) sum is exact in int32 and the float steps per block are the
 * sdot kernels', so the results are theirs (and ref's) bit for bit. Q4_0's and Q8_0's x8
 * kernels by smmla (pairs of tokens, each operand built from two 8-byte loads) were dropped:
 * under qemu's count they took more instructions than the sdot ones at 2-4 tokens (Q4_0 54.5 /
 * 54.8 / 41.6 against 43.5 / 40.4 / 39.6 once sdot's had the -8*sum(y) extras; Q8_0 52.2 / 54.9
 * against 45.7 / 44.5), and the GEMMs take 4 tokens and more. */
#if defined(__ARM_FEATURE_MATMUL_INT8) || !defined(__clang__)
/* GCC compiles these for i8mm alone (the target attribute); clang 14's arm_neon.h declares
 * vmmlaq_s32 only where the whole file targets i8mm, so its builds go without them */
#define HAVE_I8MM 1
#define I8MM __attribute__((target("+i8mm")))

static ALWAYS_INLINE int8x16_t rows_even(int8x16_t x0, int8x16_t x1) {
    return vreinterpretq_s8_s32(vzip1q_s32(vreinterpretq_s32_s8(x0), vreinterpretq_s32_s8(x1)));
}
static ALWAYS_INLINE int8x16_t rows_odd(int8x16_t x0, int8x16_t x1) {
    return vreinterpretq_s8_s32(vzip2q_s32(vreinterpretq_s32_s8(x0), vreinterpretq_s32_s8(x1)));
}

/* The same passes by smmla: per block the 4 rows' chunks zipped into row pairs (rows_even /
 * rows_odd, 8 registers), each pair of tokens' 8 smmla into two sums [t0.r, t0.r', t1.r, t1.r'] of
 * rows 4h+2e, 4h+2e+1, zipped back into each token's 4 rows: at 8 and 16 tokens 0.78-0.81 of the
 * sdot GEMM's instructions, with half its multiply instructions (bench/RESULTS.md). */
I8MM static ALWAYS_INLINE void mm_gemm_half(int64_t nb, float *y, int64_t ldy, const char *g, size_t bsz, const bool q4,
                                            const void *tile_half, int h, const int NT) {
    const act_pair_half *A = tile_half;
    const int NP = (NT + 1) / 2;
    const int8x16_t flip = vdupq_n_s8((int8_t)(q4 ? 0x88 : 0x80));
    float32x4_t acc[4][2];   /* [pair][token of the pair]: rows 4h..4h+3 */
    UNROLL for (int p = 0; p < NP; p++) acc[p][0] = acc[p][1] = vdupq_n_f32(0);
    for (int64_t b = 0; b < nb; b++, A = act_pair_next(A)) {
        const char *wb = g + (size_t)b * bsz;
        const int8_t *qs = (const int8_t *)(wb + 8 * sizeof(uint16_t));   /* after d[8] */
        int8x16_t w[4][2];   /* [k][e]: elements 8k..8k+7 of rows 4h+2e, 4h+2e+1 */
        UNROLL for (int o = 0; o < 4; o++) {
            if (q4 && o >= 2) break;   /* a q4_0 byte holds elements j and 16 + j */
            const int8x16_t x0 = veorq_s8(vld1q_s8(qs + 64 * o + 16 * h), flip);
            const int8x16_t x1 = veorq_s8(vld1q_s8(qs + 64 * o + 32 + 16 * h), flip);
            const int8x16_t z[2] = {rows_even(x0, x1), rows_odd(x0, x1)};
            UNROLL for (int e = 0; e < 2; e++) {
                w[o][e] = q4 ? vshrq_n_s8(vshlq_n_s8(z[e], 4), 4) : z[e];
                if (q4) w[2 + o][e] = vshrq_n_s8(z[e], 4);
            }
        }
        const float32x4_t dw = load_f16((const uint16_t *)(const void *)wb + 4 * h);
        UNROLL for (int p = 0; p < NP; p++) {
            int32x4_t m0 = vdupq_n_s32(0), m1 = vdupq_n_s32(0);
            UNROLL for (int k = 0; k < 4; k++) {
                const int8x16_t a = vld1q_s8(A->qs[p][k]);
                m0 = vmmlaq_s32(m0, a, w[k][0]);
                m1 = vmmlaq_s32(m1, a, w[k][1]);
            }
            const int64x2_t l0 = vreinterpretq_s64_s32(m0), l1 = vreinterpretq_s64_s32(m1);
            acc[p][0] = vfmaq_f32(acc[p][0], scale_of(dw, A, p, 0), vcvtq_f32_s32(vreinterpretq_s32_s64(vzip1q_s64(l0, l1))));
            acc[p][1] = vfmaq_f32(acc[p][1], scale_of(dw, A, p, 1), vcvtq_f32_s32(vreinterpretq_s32_s64(vzip2q_s64(l0, l1))));
        }
    }
    UNROLL for (int p = 0; p < NP; p++)
        UNROLL for (int s = 0; s < 2; s++)
            if (2 * p + s < NT) vst1q_f32(y + (size_t)(2 * p + s) * ldy + 4 * h, acc[p][s]);
}
GEMM_FROM_HALVES(gemm_mm_q4_0, mm_gemm_half, block_q4_0x8, QK8_0, act_pair_tile, true, I8MM)
GEMM_FROM_HALVES(gemm_mm_q8_0, mm_gemm_half, block_q8_0x8, QK8_0, act_pair_tile, false, I8MM)
#endif

/* 8 interleaved q4_K rows (block_q4_Kx8) against R activation rows. Per block the 8 rows'
 * 6-bit scales and mins are decoded once for all R rows: scales[k] holds byte k of the 8
 * rows, so a 16-byte load holds bytes k, k+1 of all 8 and hachi_q4k_scale_min's bit moves
 * run on 8 rows at once, into sc[8j + r], mn[8j + r] (row r, sub-block j). Then per half h
 * (rows 4h..4h+3) and sub-block j: the 8 chunks of 16 bytes hold 4 nibble bytes of each of
 * the 4 rows (low nibbles for even j, high for odd; 0..15 are valid s8 operands as they are),
 * so 8 sdots with lane c of the activation's sub-block as in x8_dot4 leave each row's sum in
 * its int32 lane, and sumi += that * the rows' sc[j] (vmlaq_s32: |sumi| < 2^25, exact). The
 * mins: summ = sum_j m[j] * (bsums[2j] + bsums[2j+1]) by widening multiplies with lane j of
 * the bsum pairs (exact). Then acc = fma(dw*da, sumi, acc), acc = fma(-(dmw*da), summ, acc):
 * ref's order, so results equal ref's bit for bit and never depend on R. Sub-blocks 2i and 2i + 1
 * are the low and high nibbles of the same bytes, so a pair is loaded once (one token: 72 instead
 * of 110 instructions per 8 rows x 32 values under qemu, Q5_K 160 instead of 177). */
static ALWAYS_INLINE int32x4_t x8_mins_q4_K(const uint8_t *mn, int h, int16x8_t p) {
    int16x4_t m[8];   /* rows 4h..4h+3, sub-block j */
    UNROLL for (int j = 0; j < 8; j++) {
        const int16x8_t v = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn + 8 * j)));
        m[j] = h ? vget_high_s16(v) : vget_low_s16(v);
    }
    int32x4_t v = vmull_laneq_s16(m[0], p, 0);
    v = vmlal_laneq_s16(v, m[1], p, 1);
    v = vmlal_laneq_s16(v, m[2], p, 2);
    v = vmlal_laneq_s16(v, m[3], p, 3);
    v = vmlal_laneq_s16(v, m[4], p, 4);
    v = vmlal_laneq_s16(v, m[5], p, 5);
    v = vmlal_laneq_s16(v, m[6], p, 6);
    return vmlal_laneq_s16(v, m[7], p, 7);
}
/* the 8 rows' 6-bit scales and mins of a block: sc[8j + r], mn[8j + r] (row r, sub-block j) */
static ALWAYS_INLINE void kx8_scales(const block_q4_Kx8 *w, uint8_t sc[64], uint8_t mn[64]) {
    const uint8x16_t m6 = vdupq_n_u8(0x3F);
    uint8x16_t v[6];   /* v[i]: bytes 2i, 2i+1 of the 8 rows' scales */
    UNROLL for (int i = 0; i < 6; i++) v[i] = vld1q_u8(w->scales[2 * i]);
    vst1q_u8(sc, vandq_u8(v[0], m6));
    vst1q_u8(sc + 16, vandq_u8(v[1], m6));
    vst1q_u8(sc + 32, vsliq_n_u8(v[4], vshrq_n_u8(v[0], 6), 4));
    vst1q_u8(sc + 48, vsliq_n_u8(v[5], vshrq_n_u8(v[1], 6), 4));
    vst1q_u8(mn, vandq_u8(v[2], m6));
    vst1q_u8(mn + 16, vandq_u8(v[3], m6));
    vst1q_u8(mn + 32, vsliq_n_u8(vshrq_n_u8(v[4], 4), vshrq_n_u8(v[2], 6), 4));
    vst1q_u8(mn + 48, vsliq_n_u8(vshrq_n_u8(v[5], 4), vshrq_n_u8(v[3], 6), 4));
}
static ALWAYS_INLINE void x8_rows_kx8(int64_t n, float *s, const char *vw, const size_t bsz, const bool high,
                                      const char *va, size_t stride, const int R) {
    const uint8x16_t m4 = vdupq_n_u8(0xF), m10 = vdupq_n_u8(0x10);
    float32x4_t acc[2][ROWS_MAX];   /* [h][r]: rows 4h..4h+3 */
    UNROLL for (int r = 0; r < R; r++) acc[0][r] = acc[1][r] = vdupq_n_f32(0);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const block_q4_Kx8 *w = (const block_q4_Kx8 *)(const void *)(vw + (size_t)b * bsz);
        const uint8_t *qh = (const uint8_t *)w + offsetof(block_q5_Kx8, qh);
        uint8_t sc[64], mn[64];
        kx8_scales(w, sc, mn);
        UNROLL for (int h = 0; h < 2; h++) {
            int32x4_t sumi[ROWS_MAX];
            UNROLL for (int r = 0; r < R; r++) sumi[r] = vdupq_n_s32(0);
            for (int jp = 0; jp < 8; jp += 2) {   /* sub-blocks jp, jp + 1: the low and high nibbles of the same bytes */
                uint8x16_t x[8], xh[8];   /* chunk k: bytes 4k..4k+3 of the pair's 32 (and their qh) */
                UNROLL for (int k = 0; k < 8; k++) {
                    x[k] = vld1q_u8(w->qs + 128 * jp + 32 * k + 16 * h);
                    if (high) xh[k] = vld1q_u8(qh + 32 * k + 16 * h);
                }
                UNROLL for (int sb = 0; sb < 2; sb++) {
                    const int j = jp + sb;
                    const uint16x8_t sc16 = vmovl_u8(vld1_u8(sc + 8 * j));
                    const int32x4_t scv = vreinterpretq_s32_u32(h ? vmovl_high_u16(sc16) : vmovl_u16(vget_low_u16(sc16)));
                    const int8x16_t shh = vdupq_n_s8((int8_t)(4 - j));   /* q5_K: bit j of qh to bit 4 */
                    int8x16_t q[8];   /* q[2c], q[2c + 1]: bytes 4c..4c+3, 4c+16..4c+19 of sub-block j */
                    UNROLL for (int c = 0; c < 4; c++)
                        UNROLL for (int e = 0; e < 2; e++) {
                            const int k = c + 4 * e;
                            uint8x16_t u;
                            if (high) {   /* the 5th bit alone at bit 4, the nibble put under it in one instruction */
                                const uint8x16_t t = vandq_u8(vshlq_u8(xh[k], shh), m10);
                                u = sb ? vsriq_n_u8(t, x[k], 4) : vbslq_u8(m4, x[k], t);
                            } else {
                                u = sb ? vshrq_n_u8(x[k], 4) : vandq_u8(x[k], m4);
                            }
                            q[2 * c + e] = vreinterpretq_s8_u8(u);
                        }
                    UNROLL for (int r = 0; r < R; r++) {
                        const int8_t *y = ((const block_q8_K *)(va + (size_t)r * stride) + b)->qs + 32 * j;
                        sumi[r] = vmlaq_s32(sumi[r], x8_dot4(vdupq_n_s32(0), q, vld1q_s8(y), vld1q_s8(y + 16)), scv);
                    }
                }
            }
            const float32x4_t dw = load_f16(w->d + 4 * h), dmw = load_f16(w->dmin + 4 * h);
            UNROLL for (int r = 0; r < R; r++) {
                const block_q8_K *a = (const block_q8_K *)(va + (size_t)r * stride) + b;
                /* lane j: bsums[2j] + bsums[2j+1], |.| <= 4096 */
                const int16x8_t p = vpaddq_s16(vld1q_s16(a->bsums), vld1q_s16(a->bsums + 8));
                const float32x4_t da = vdupq_n_f32(a->d);
                acc[h][r] = vfmaq_f32(acc[h][r], vmulq_f32(dw, da), vcvtq_f32_s32(sumi[r]));
                acc[h][r] = vfmsq_f32(acc[h][r], vmulq_f32(dmw, da), vcvtq_f32_s32(x8_mins_q4_K(mn, h, p)));
            }
        }
    }
    UNROLL for (int r = 0; r < R; r++) {
        vst1q_f32(s + 8 * r, acc[0][r]);
        vst1q_f32(s + 8 * r + 4, acc[1][r]);
    }
}
static ALWAYS_INLINE void x8_rows_q4_K(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    x8_rows_kx8(n, s, vw, sizeof(block_q4_Kx8), false, va, stride, R);
}
ROWS_FROM(x8_q4_K, x8_rows_q4_K, 8)
/* q5_K rows (block_q5_Kx8): the same with the 5th bit of each value from qh (bit j at bit 4) */
static ALWAYS_INLINE void x8_rows_q5_K(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    x8_rows_kx8(n, s, vw, sizeof(block_q5_Kx8), true, va, stride, R);
}
ROWS_FROM(x8_q5_K, x8_rows_q5_K, 8)

/* Prefill GEMM over interleaved Q4_K / Q5_K rows, as the Q4_0 one: the activations (q8_K) packed in
 * token pairs per block of 256 (each sub-block j's 32 values as 4 registers of 8 values of both
 * tokens, then the tokens' bsums and d), a pass of half a group's rows against the up to 8 tokens
 * of one tile half. Per sub-block the 4 rows' chunks are unpacked once for all tokens (x8_rows_kx8:
 * for 4), each token's 8 sdots by lane go through pair_dot8 and sumi += that * the rows' scales;
 * at the block's end x8_rows_kx8's float steps, so the results are its, ref's, bit for bit. */
typedef struct act_kpair_half {
    int8_t qs[8][4][4][16];   /* [sub-block j][k][pair][token of the pair * 8 + i]: value 32j + 8k + i */
    int16_t bsums[8][QK_K / 16];
    float d[8];
    float pad[8];
} act_kpair_half;
typedef struct act_kpair_tile { act_kpair_half half[2]; } act_kpair_tile;

static size_t act_pack_bytes_kpairs(int64_t n) { return (size_t)(n / QK_K) * sizeof(act_kpair_tile); }
static void act_pack_kpairs(int64_t n, const void *va, size_t a_stride, int t0, int nt, int tile_nt, void *tile) {
    (void)tile_nt;
    static const block_q8_K zero;
    act_kpair_tile *o = tile;
    for (int i = 0; i < nt + (nt & 1); i++) {   /* an odd count's last pair gets a zero token */
        const int t = t0 + i, p = t % 8 / 2, s = t % 2;
        const block_q8_K *x = i < nt ? (const block_q8_K *)(const void *)((const char *)va + (size_t)i * a_stride) : NULL;
        for (int64_t b = 0; b < n / QK_K; b++) {
            const block_q8_K *xb = x ? x + b : &zero;
            act_kpair_half *hf = &o[b].half[t / 8];
            for (int j = 0; j < 8; j++)
                for (int k = 0; k < 4; k++) memcpy(hf->qs[j][k][p] + 8 * s, xb->qs + 32 * j + 8 * k, 8);
            memcpy(hf->bsums[t % 8], xb->bsums, sizeof xb->bsums);
            hf->d[t % 8] = xb->d;
        }
    }
}

/* token t's float steps at a block's end (x8_rows_kx8's): sums, then the mins */
static ALWAYS_INLINE float32x4_t kx8_block_end(float32x4_t acc, int32x4_t sumi, const uint8_t mn[64], int h, float32x4_t dw,
                                               float32x4_t dmw, const act_kpair_half *A, int t) {
    const int16x8_t pb = vpaddq_s16(vld1q_s16(A->bsums[t]), vld1q_s16(A->bsums[t] + 8));   /* lane j: bsums 2j + 2j+1 */
    const float32x4_t da = vdupq_n_f32(A->d[t]);
    acc = vfmaq_f32(acc, vmulq_f32(dw, da), vcvtq_f32_s32(sumi));
    return vfmsq_f32(acc, vmulq_f32(dmw, da), vcvtq_f32_s32(x8_mins_q4_K(mn, h, pb)));
}

/* chunk k (values 4k..4k+3 of sub-block j) of rows 4h..4h+3, as x8_rows_kx8 unpacks it */
static ALWAYS_INLINE uint8x16_t kx8_chunk(const block_q4_Kx8 *w, const uint8_t *qh, const bool high, int j, int k, int h) {
    const uint8x16_t x = vld1q_u8(w->qs + 256 * (j / 2) + 32 * k + 16 * h), m4 = vdupq_n_u8(0xF);
    if (!high) return j % 2 ? vshrq_n_u8(x, 4) : vandq_u8(x, m4);
    const uint8x16_t t = vandq_u8(vshlq_u8(vld1q_u8(qh + 32 * k + 16 * h), vdupq_n_s8((int8_t)(4 - j))), vdupq_n_u8(0x10));
    return j % 2 ? vsriq_n_u8(t, x, 4) : vbslq_u8(m4, x, t);
}

static ALWAYS_INLINE void sdot_gemm_half_kx8(int64_t nb, float *y, int64_t ldy, const char *g, size_t bsz, const bool high,
                                             const void *tile_half, int h, const int NT) {
    const act_kpair_half *A = tile_half;
    float32x4_t acc[8];   /* [token]: rows 4h..4h+3 */
    UNROLL for (int t = 0; t < NT; t++) acc[t] = vdupq_n_f32(0);
    for (int64_t b = 0; b < nb; b++, A = (const act_kpair_half *)(const void *)((const char *)A + sizeof(act_kpair_tile))) {
        const block_q4_Kx8 *w = (const block_q4_Kx8 *)(const void *)(g + (size_t)b * bsz);
        const uint8_t *qh = (const uint8_t *)w + offsetof(block_q5_Kx8, qh);
        uint8_t sc[64], mn[64];
        kx8_scales(w, sc, mn);
        int32x4_t sumi[8];
        UNROLL for (int t = 0; t < NT; t++) sumi[t] = vdupq_n_s32(0);
        for (int j = 0; j < 8; j++) {
            const uint16x8_t sc16 = vmovl_u8(vld1_u8(sc + 8 * j));
            const int32x4_t scv = vreinterpretq_s32_u32(h ? vmovl_high_u16(sc16) : vmovl_u16(vget_low_u16(sc16)));
            int8x16_t q[8];
            UNROLL for (int k = 0; k < 8; k++) q[k] = vreinterpretq_s8_u8(kx8_chunk(w, qh, high, j, k, h));
            UNROLL for (int p = 0; p < (NT + 1) / 2; p++) {
                int8x16_t a[4];
                UNROLL for (int k = 0; k < 4; k++) a[k] = vld1q_s8(A->qs[j][k][p]);
                UNROLL for (int s = 0; s < 2; s++)
                    if (2 * p + s < NT) sumi[2 * p + s] = vmlaq_s32(sumi[2 * p + s], pair_dot8(q, a, s), scv);
            }
        }
        const float32x4_t dw = load_f16(w->d + 4 * h), dmw = load_f16(w->dmin + 4 * h);
        UNROLL for (int t = 0; t < NT; t++) acc[t] = kx8_block_end(acc[t], sumi[t], mn, h, dw, dmw, A, t);
    }
    UNROLL for (int t = 0; t < NT; t++) vst1q_f32(y + (size_t)t * ldy + 4 * h, acc[t]);
}
GEMM_FROM_HALVES(gemm_sdot_q4_K, sdot_gemm_half_kx8, block_q4_Kx8, QK_K, act_kpair_tile, false, )
GEMM_FROM_HALVES(gemm_sdot_q5_K, sdot_gemm_half_kx8, block_q5_Kx8, QK_K, act_kpair_tile, true, )

/* 8 interleaved q6_K rows (block_q6_Kx8) against R activation rows. Per half h (rows
 * 4h..4h+3) and sub-block j (unit u = j/2, half sb = j%2): the 16 bytes at ql + 128u + 32c +
 * 16h hold the nibbles of values 4c..4c+3 of the 4 rows (low for sb 0, high for 1), those at
 * qh + 64u + 32sb + 16h their top 2 bits at bits 2c, 2c+1: moved to bits 4-5 they make the
 * unsigned 6-bit values (valid s8 operands), so 4 sdots with lane c of the activation's 16
 * values, from -32*bsums[j], leave each row's exact sum((v - 32)*y) in its lane; sumi += that
 * * the rows' scales (|sumi| < 2^28). Then acc = fma(dw*da, sumi, acc): ref's order, bit for
 * bit, whatever R. */
/* q[sb][c]: the unsigned 6-bit values 4c..4c+3 of rows 4h..4h+3 in sub-blocks 2u (sb 0) and 2u + 1
 * of a block, which take the low and the high nibbles of the same ql bytes (loaded once for both;
 * a loop over the 16 sub-blocks one at a time took 199 instructions per 8 rows x 32 values for one
 * token under qemu, this 1.6x fewer, bench/RESULTS.md; an and and an or a value before bsl / sri
 * did the nibbles' part) */
static ALWAYS_INLINE void q6x8_values(const block_q6_Kx8 *w, int u, int h, int8x16_t q[2][4]) {
    const uint8x16_t m4 = vdupq_n_u8(0xF), m30 = vdupq_n_u8(0x30);
    uint8x16_t l[4];
    UNROLL for (int c = 0; c < 4; c++) l[c] = vld1q_u8(w->ql + 128 * u + 32 * c + 16 * h);
    UNROLL for (int sb = 0; sb < 2; sb++) {
        const uint8x16_t hb = vld1q_u8(w->qh + 64 * u + 32 * sb + 16 * h);
        /* top bits at 4-5, 0 at 6-7 (hb >> 2 has them so), the low nibble's bits overwritten below */
        const uint8x16_t t[4] = {vandq_u8(vshlq_n_u8(hb, 4), m30), vandq_u8(vshlq_n_u8(hb, 2), m30), vandq_u8(hb, m30),
                                 vshrq_n_u8(hb, 2)};
        /* the nibble into bits 0-3 in one instruction: bit-select the low one, shift-right-insert the high */
        UNROLL for (int c = 0; c < 4; c++)
            q[sb][c] = vreinterpretq_s8_u8(sb ? vsriq_n_u8(t[c], l[c], 4) : vbslq_u8(m4, l[c], t[c]));
    }
}
static ALWAYS_INLINE void x8_rows_q6_K(int64_t n, float *s, const void *vw, const char *va, size_t stride, const int R) {
    const block_q6_Kx8 *w = vw;
    float32x4_t acc[2][ROWS_MAX];   /* [h][r]: rows 4h..4h+3 */
    UNROLL for (int r = 0; r < R; r++) acc[0][r] = acc[1][r] = vdupq_n_f32(0);
    for (int64_t b = 0; b < n / QK_K; b++) {
        UNROLL for (int h = 0; h < 2; h++) {
            int32x4_t sumi[ROWS_MAX];
            UNROLL for (int r = 0; r < R; r++) sumi[r] = vdupq_n_s32(0);
            for (int u = 0; u < QK_K / 32; u++) {
                int8x16_t q6[2][4];
                q6x8_values(&w[b], u, h, q6);
                UNROLL for (int sb = 0; sb < 2; sb++) {
                    const int j = 2 * u + sb;
                    const int8x16_t *q = q6[sb];
                    const int16x8_t sc16 = vmovl_s8(vld1_s8(w[b].scales[j]));
                    const int32x4_t scv = vmovl_s16(h ? vget_high_s16(sc16) : vget_low_s16(sc16));
                    UNROLL for (int r = 0; r < R; r++) {
                        const block_q8_K *a = (const block_q8_K *)(va + (size_t)r * stride) + b;
                        const int8x16_t y = vld1q_s8(a->qs + 16 * j);
                        int32x4_t p = vdupq_n_s32(-32 * a->bsums[j]);
                        p = vdotq_laneq_s32(p, q[0], y, 0);
                        p = vdotq_laneq_s32(p, q[1], y, 1);
                        p = vdotq_laneq_s32(p, q[2], y, 2);
                        p = vdotq_laneq_s32(p, q[3], y, 3);
                        sumi[r] = vmlaq_s32(sumi[r], p, scv);
                    }
                }
            }
            const float32x4_t dw = load_f16(w[b].d + 4 * h);
            UNROLL for (int r = 0; r < R; r++) {
                const float32x4_t da = vdupq_n_f32(((const block_q8_K *)(va + (size_t)r * stride) + b)->d);
                acc[h][r] = vfmaq_f32(acc[h][r], vmulq_f32(dw, da), vcvtq_f32_s32(sumi[r]));
            }
        }
    }
    UNROLL for (int r = 0; r < R; r++) {
        vst1q_f32(s + 8 * r, acc[0][r]);
        vst1q_f32(s + 8 * r + 4, acc[1][r]);
    }
}
ROWS_FROM(x8_q6_K, x8_rows_q6_K, 8)

/* The same GEMM for interleaved Q6_K rows (the tiles of act_pack_kpairs): per 16-value sub-block j
 * the 4 rows' values as x8_rows_q6_K unpacks them (q6x8_values) for all tokens, each token's 4
 * sdots by lane (values 16j + 4c.. are in its pair's register 2(j % 2) + c / 2 of sub-block j / 2,
 * lane 2s + c % 2) from -32*bsums[j], sumi += that * the rows' scales; the block's end is
 * x8_rows_q6_K's, so the results are its, ref's, bit for bit. (Starting the sub-blocks from 0 and
 * taking 32 * sum_j sc[j]*bsums[j] off at the block's end took more instructions: 68 against 61,
 * before q6x8_values unpacked two sub-blocks a call.) */
static ALWAYS_INLINE void sdot_gemm_half_q6_K(int64_t nb, float *y, int64_t ldy, const char *g, size_t bsz, const bool unused,
                                              const void *tile_half, int h, const int NT) {
    (void)unused;
    const act_kpair_half *A = tile_half;
    float32x4_t acc[8];   /* [token]: rows 4h..4h+3 */
    UNROLL for (int t = 0; t < NT; t++) acc[t] = vdupq_n_f32(0);
    for (int64_t b = 0; b < nb; b++, A = (const act_kpair_half *)(const void *)((const char *)A + sizeof(act_kpair_tile))) {
        const block_q6_Kx8 *w = (const block_q6_Kx8 *)(const void *)(g + (size_t)b * bsz);
        int32x4_t sumi[8];
        UNROLL for (int t = 0; t < NT; t++) sumi[t] = vdupq_n_s32(0);
        for (int u = 0; u < QK_K / 32; u++) {
          int8x16_t q6[2][4];
          q6x8_values(w, u, h, q6);
          UNROLL for (int sb = 0; sb < 2; sb++) {
            const int j = 2 * u + sb;
            const int8x16_t *q = q6[sb];
            const int16x8_t sc16 = vmovl_s8(vld1_s8(w->scales[j]));
            const int32x4_t scv = vmovl_s16(h ? vget_high_s16(sc16) : vget_low_s16(sc16));
            UNROLL for (int p = 0; p < (NT + 1) / 2; p++) {
                const int8x16_t a0 = vld1q_s8(A->qs[j / 2][2 * (j % 2)][p]), a1 = vld1q_s8(A->qs[j / 2][2 * (j % 2) + 1][p]);
                UNROLL for (int s = 0; s < 2; s++) {
                    if (2 * p + s == NT) break;
                    int32x4_t v = vdupq_n_s32(-32 * A->bsums[2 * p + s][j]);
                    if (s) {
                        v = vdotq_laneq_s32(v, q[0], a0, 2);
                        v = vdotq_laneq_s32(v, q[1], a0, 3);
                        v = vdotq_laneq_s32(v, q[2], a1, 2);
                        v = vdotq_laneq_s32(v, q[3], a1, 3);
                    } else {
                        v = vdotq_laneq_s32(v, q[0], a0, 0);
                        v = vdotq_laneq_s32(v, q[1], a0, 1);
                        v = vdotq_laneq_s32(v, q[2], a1, 0);
                        v = vdotq_laneq_s32(v, q[3], a1, 1);
                    }
                    sumi[2 * p + s] = vmlaq_s32(sumi[2 * p + s], v, scv);
                }
            }
          }
        }
        const float32x4_t dw = load_f16(w->d + 4 * h);
        UNROLL for (int t = 0; t < NT; t++) acc[t] = vfmaq_f32(acc[t], vmulq_f32(dw, vdupq_n_f32(A->d[t])), vcvtq_f32_s32(sumi[t]));
    }
    UNROLL for (int t = 0; t < NT; t++) vst1q_f32(y + (size_t)t * ldy + 4 * h, acc[t]);
}
GEMM_FROM_HALVES(gemm_sdot_q6_K, sdot_gemm_half_q6_K, block_q6_Kx8, QK_K, act_kpair_tile, false, )

#ifdef HAVE_I8MM
/* smmla's sums [t0.w(2q), t0.w(2q+1), t1.w(2q), t1.w(2q+1)] take the rows' scales as [s(2q), s(2q+1),
 * s(2q), s(2q+1)] (sc_pair) into sumi, exact in int32 as in the sdot kernels */
static ALWAYS_INLINE int32x4_t sc_pair(int16x8_t sc, int q) {   /* sc: the 8 rows' scales as s16 */
    const int32x4_t v = vreinterpretq_s32_s16(sc);
    int32x2_t d;
    switch (q) {   /* lane q: constant after unrolling */
    case 0: d = vdup_laneq_s32(v, 0); break;
    case 1: d = vdup_laneq_s32(v, 1); break;
    case 2: d = vdup_laneq_s32(v, 2); break;
    default: d = vdup_laneq_s32(v, 3); break;
    }
    return vmovl_s16(vreinterpret_s16_s32(d));
}
/* [pair sums of row pairs 2h, 2h+1] -> token t's (0 or 1) rows 4h..4h+3 */
static ALWAYS_INLINE int32x4_t token_rows(int32x4_t m0, int32x4_t m1, int t) {
    const int64x2_t a = vreinterpretq_s64_s32(m0), b = vreinterpretq_s64_s32(m1);
    return vreinterpretq_s32_s64(t ? vzip2q_s64(a, b) : vzip1q_s64(a, b));
}

/* The K-quant passes by smmla: per sub-block the 4 rows' chunks zipped into row pairs, each token
 * pair's 8 smmla into two sums of the row pairs, sumi += them * sc_pair; the block's end as the
 * sdot GEMM's (kx8_block_end), so the results are x8_rows_kx8's bit for bit. */
I8MM static ALWAYS_INLINE void mm_gemm_half_kx8(int64_t nb, float *y, int64_t ldy, const char *g, size_t bsz, const bool high,
                                                const void *tile_half, int h, const int NT) {
    const act_kpair_half *A = tile_half;
    const int NP = (NT + 1) / 2;
    float32x4_t acc[8];   /* [token]: rows 4h..4h+3 */
    UNROLL for (int t = 0; t < NT; t++) acc[t] = vdupq_n_f32(0);
    for (int64_t b = 0; b < nb; b++, A = (const act_kpair_half *)(const void *)((const char *)A + sizeof(act_kpair_tile))) {
        const block_q4_Kx8 *w = (const block_q4_Kx8 *)(const void *)(g + (size_t)b * bsz);
        const uint8_t *qh = (const uint8_t *)w + offsetof(block_q5_Kx8, qh);
        uint8_t sc[64], mn[64];
        kx8_scales(w, sc, mn);
        int32x4_t sumi[4][2];   /* [pair][e]: row pair 4h+2e, 4h+2e+1 */
        UNROLL for (int p = 0; p < NP; p++) sumi[p][0] = sumi[p][1] = vdupq_n_s32(0);
        for (int j = 0; j < 8; j++) {
            const int16x8_t scs = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sc + 8 * j)));
            const int32x4_t scq[2] = {sc_pair(scs, 2 * h), sc_pair(scs, 2 * h + 1)};
            int8x16_t z[4][2];   /* [o][e]: values 8o..8o+7 of rows 4h+2e, 4h+2e+1 */
            UNROLL for (int o = 0; o < 4; o++) {
                const int8x16_t u0 = vreinterpretq_s8_u8(kx8_chunk(w, qh, high, j, 2 * o, h));
                const int8x16_t u1 = vreinterpretq_s8_u8(kx8_chunk(w, qh, high, j, 2 * o + 1, h));
                z[o][0] = rows_even(u0, u1);
                z[o][1] = rows_odd(u0, u1);
            }
            UNROLL for (int p = 0; p < NP; p++) {
                int32x4_t m0 = vdupq_n_s32(0), m1 = vdupq_n_s32(0);
                UNROLL for (int o = 0; o < 4; o++) {
                    const int8x16_t a = vld1q_s8(A->qs[j][o][p]);
                    m0 = vmmlaq_s32(m0, a, z[o][0]);
                    m1 = vmmlaq_s32(m1, a, z[o][1]);
                }
                sumi[p][0] = vmlaq_s32(sumi[p][0], m0, scq[0]);
                sumi[p][1] = vmlaq_s32(sumi[p][1], m1, scq[1]);
            }
        }
        const float32x4_t dw = load_f16(w->d + 4 * h), dmw = load_f16(w->dmin + 4 * h);
        UNROLL for (int t = 0; t < NT; t++)
            acc[t] = kx8_block_end(acc[t], token_rows(sumi[t / 2][0], sumi[t / 2][1], t % 2), mn, h, dw, dmw, A, t);
    }
    UNROLL for (int t = 0; t < NT; t++) vst1q_f32(y + (size_t)t * ldy + 4 * h, acc[t]);
}
GEMM_FROM_HALVES(gemm_mm_q4_K, mm_gemm_half_kx8, block_q4_Kx8, QK_K, act_kpair_tile, false, I8MM)
GEMM_FROM_HALVES(gemm_mm_q5_K, mm_gemm_half_kx8, block_q5_Kx8, QK_K, act_kpair_tile, true, I8MM)

/* ---- int8 attention rows for many queries by smmla / usmmla (kernels.h attn_i8_*) ----------- */

/* query pair p's dims 8s..8s+7, both queries' (smmla's second operand), at (p * hd / 8 + s) * 16 */
static void attn_i8_qpack_mm(int64_t hd, int nq, const int8_t *q, int8_t *pack) {
    for (int p = 0; p < nq / 2; p++)
        for (int64_t s = 0; s < hd / 8; s++) {
            int8_t *o = pack + ((size_t)p * (hd / 8) + s) * 16;
            memcpy(o, q + (size_t)(2 * p) * hd + 8 * s, 8);
            memcpy(o + 8, q + (size_t)(2 * p + 1) * hd + 8 * s, 8);
        }
}

/* 8 keys (4 pairs, each operand two 8-byte loads) by 8 queries (4 packed pairs) a block: 16 sums
 * [k.q, k.q', k'.q, k'.q'] in registers over all dims */
I8MM static void attn_i8_dots_mm(int64_t hd, int nk, const int8_t *k, int64_t k_stride, int nq, const int8_t *pack,
                                 int32_t *d) {
    const int64_t ns = hd / 8;
    for (int k0 = 0; k0 < nk; k0 += 8)
        for (int q0 = 0; q0 < nq; q0 += 8) {
            int32x4_t m[4][4];
            UNROLL for (int a = 0; a < 4; a++)
                UNROLL for (int b = 0; b < 4; b++) m[a][b] = vdupq_n_s32(0);
            const int8_t *qb = pack + (size_t)(q0 / 2) * ns * 16;
            for (int64_t s = 0; s < ns; s++) {
                int8x16_t ka[4], qv[4];
                UNROLL for (int a = 0; a < 4; a++) {
                    const int8_t *r = k + (size_t)(k0 + 2 * a) * k_stride + 8 * s;
                    ka[a] = vcombine_s8(vld1_s8(r), vld1_s8(r + k_stride));
                    qv[a] = vld1q_s8(qb + ((size_t)a * ns + s) * 16);
                }
                UNROLL for (int a = 0; a < 4; a++)
                    UNROLL for (int b = 0; b < 4; b++) m[a][b] = vmmlaq_s32(m[a][b], ka[a], qv[b]);
            }
            UNROLL for (int a = 0; a < 4; a++)
                UNROLL for (int b = 0; b < 4; b++) {
                    int32_t *o = d + (size_t)(k0 + 2 * a) * nq + q0 + 2 * b;
                    vst1_s32(o, vget_low_s32(m[a][b]));
                    vst1_s32(o + nq, vget_high_s32(m[a][b]));
                }
        }
}

/* dim pair p's keys 8s..8s+7, both dims' (usmmla's second operand), at (p * nk / 8 + s) * 16: 8
 * value rows of 16 dims transposed by three rounds of vtrn (bytes, halves, words), after which
 * vector i holds dim i's 8 keys in its low half and dim 8 + i's in its high half */
static void attn_i8_vpack_mm(int64_t hd, int nk, const int8_t *v, int8_t *pack) {
    const int ns = nk / 8;
    for (int s = 0; s < ns; s++)
        for (int64_t c = 0; c < hd / 16; c++) {
            uint8x16_t r[8], t[8], u[8], w[8];
            UNROLL for (int i = 0; i < 8; i++) r[i] = vld1q_u8((const uint8_t *)v + (size_t)(8 * s + i) * hd + 16 * c);
            UNROLL for (int i = 0; i < 8; i += 2) {
                t[i] = vtrn1q_u8(r[i], r[i + 1]);
                t[i + 1] = vtrn2q_u8(r[i], r[i + 1]);
            }
            UNROLL for (int i = 0; i < 8; i += 4)
                UNROLL for (int j = 0; j < 2; j++) {
                    u[i + j] = vreinterpretq_u8_u16(vtrn1q_u16(vreinterpretq_u16_u8(t[i + j]), vreinterpretq_u16_u8(t[i + j + 2])));
                    u[i + j + 2] = vreinterpretq_u8_u16(vtrn2q_u16(vreinterpretq_u16_u8(t[i + j]), vreinterpretq_u16_u8(t[i + j + 2])));
                }
            UNROLL for (int j = 0; j < 4; j++) {
                w[j] = vreinterpretq_u8_u32(vtrn1q_u32(vreinterpretq_u32_u8(u[j]), vreinterpretq_u32_u8(u[j + 4])));
                w[j + 4] = vreinterpretq_u8_u32(vtrn2q_u32(vreinterpretq_u32_u8(u[j]), vreinterpretq_u32_u8(u[j + 4])));
            }
            UNROLL for (int j = 0; j < 4; j++) {   /* dims 2j, 2j + 1 and 8 + 2j, 9 + 2j of the 16 */
                vst1q_u8((uint8_t *)pack + ((size_t)(8 * c + j) * ns + s) * 16, vcombine_u8(vget_low_u8(w[2 * j]), vget_low_u8(w[2 * j + 1])));
                vst1q_u8((uint8_t *)pack + ((size_t)(8 * c + 4 + j) * ns + s) * 16,
                         vcombine_u8(vget_high_u8(w[2 * j]), vget_high_u8(w[2 * j + 1])));
            }
        }
}

/* 4 queries (2 pairs, hi and lo weights, each operand two 8-byte loads) by 8 dims (4 packed pairs)
 * a block: 16 sums in registers over all keys, then S = 128 * hi + lo */
I8MM static void attn_i8_wsums_mm(int64_t hd, int nk, int nq, const uint8_t *whi, const uint8_t *wlo, const int8_t *pack,
                                  int32_t *S) {
    const int ns = nk / 8;
    for (int q0 = 0; q0 < nq; q0 += 4)
        for (int64_t d0 = 0; d0 < hd; d0 += 8) {
            int32x4_t h[2][4], l[2][4];
            UNROLL for (int a = 0; a < 2; a++)
                UNROLL for (int b = 0; b < 4; b++) h[a][b] = l[a][b] = vdupq_n_s32(0);
            const int8_t *vb = pack + (size_t)(d0 / 2) * ns * 16;
            for (int s = 0; s < ns; s++) {
                uint8x16_t ah[2], al[2];
                int8x16_t vv[4];
                UNROLL for (int a = 0; a < 2; a++) {
                    const size_t o = (size_t)(q0 + 2 * a) * nk + 8 * s;
                    ah[a] = vcombine_u8(vld1_u8(whi + o), vld1_u8(whi + o + nk));
                    al[a] = vcombine_u8(vld1_u8(wlo + o), vld1_u8(wlo + o + nk));
                }
                UNROLL for (int b = 0; b < 4; b++) vv[b] = vld1q_s8(vb + ((size_t)b * ns + s) * 16);
                UNROLL for (int a = 0; a < 2; a++)
                    UNROLL for (int b = 0; b < 4; b++) {
                        h[a][b] = vusmmlaq_s32(h[a][b], ah[a], vv[b]);
                        l[a][b] = vusmmlaq_s32(l[a][b], al[a], vv[b]);
                    }
            }
            UNROLL for (int a = 0; a < 2; a++)
                UNROLL for (int b = 0; b < 4; b++) {
                    const int32x4_t x = vaddq_s32(vshlq_n_s32(h[a][b], 7), l[a][b]);
                    int32_t *o = S + (size_t)(q0 + 2 * a) * hd + d0 + 2 * b;
                    vst1_s32(o, vget_low_s32(x));
                    vst1_s32(o + hd, vget_high_s32(x));
                }
        }
}

#endif

/* q4_1: d*da*sum(q*qa) + m*da*sum(qa); nibbles 0..15 are valid s8 operands */
void hachi_vec_dot_q4_1_q8_0_neon(int64_t n, float *s, const void *vw, const void *va) {
    const block_q4_1 *w = vw;
    const block_q8_0 *a = va;
    const int8x16_t ones = vdupq_n_s8(1);
    float32x4_t acc = vdupq_n_f32(0), accm = vdupq_n_f32(0);
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const uint8x16_t v = vld1q_u8(w[i].qs);
        const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0xF))), hi = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
        const float da = h2f(a[i].d);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(dot32(lo, hi, a[i].qs)), h2f(w[i].d) * da);
        accm = vmlaq_n_f32(accm, vcvtq_f32_s32(dot32(ones, ones, a[i].qs)), h2f(w[i].m) * da);
    }
    *s = vaddvq_f32(vaddq_f32(acc, accm));
}

/* q5_0: byte e gets 0xF0 unless bit e of qh is set, so nibble | that reads as q - 16 */
void hachi_vec_dot_q5_0_q8_0_neon(int64_t n, float *s, const void *vw, const void *va) {
    const block_q5_0 *w = vw;
    const block_q8_0 *a = va;
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t bm = vld1q_u8(bits), f0 = vdupq_n_u8(0xF0);
    float32x4_t acc = vdupq_n_f32(0);
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const uint8_t *qh = w[i].qh;
        const uint8x16_t h0 = vtstq_u8(vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1])), bm);
        const uint8x16_t h1 = vtstq_u8(vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3])), bm);
        const uint8x16_t v = vld1q_u8(w[i].qs);
        const int8x16_t lo = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v, vdupq_n_u8(0xF)), vbicq_u8(f0, h0)));
        const int8x16_t hi = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(v, 4), vbicq_u8(f0, h1)));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(dot32(lo, hi, a[i].qs)), h2f(w[i].d) * h2f(a[i].d));
    }
    *s = vaddvq_f32(acc);
}

/* ---------------- K-quants x q8_K ---------------- */

/* scales[12] -> bytes 0..7: the 8 six-bit scales, bytes 8..15: the 8 six-bit mins */
static inline void unpack_k_scales(const uint8_t *scales, uint32_t u[4]) {
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    memcpy(u, scales, 12);
    u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
    const uint32_t m03 = u[1] & k1;
    u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
    u[2] = m03;
    u[0] &= k1;
}

/* sum over sub-blocks of min * (bsums pair) */
static inline int32_t k_mins_dot(const uint32_t u[4], const int16_t *bsums) {
    const int16x8_t pairs = vpaddq_s16(vld1q_s16(bsums), vld1q_s16(bsums + 8));
    const int16x8_t mins = vreinterpretq_s16_u16(vmovl_u8(vld1_u8((const uint8_t *)u + 8)));
    const int32x4_t p = vmlal_s16(vmull_s16(vget_low_s16(mins), vget_low_s16(pairs)), vget_high_s16(mins), vget_high_s16(pairs));
    return vaddvq_s32(p);
}

/* 32 bytes of q4_K nibbles: sub-block 2c in the low nibbles, 2c+1 in the high */
static inline void q4k_unpack(const uint8_t *qs, int8x16_t q[4]) {
    const uint8x16_t m4 = vdupq_n_u8(0xF), b0 = vld1q_u8(qs), b1 = vld1q_u8(qs + 16);
    q[0] = vreinterpretq_s8_u8(vandq_u8(b0, m4));
    q[1] = vreinterpretq_s8_u8(vandq_u8(b1, m4));
    q[2] = vreinterpretq_s8_u8(vshrq_n_u8(b0, 4));
    q[3] = vreinterpretq_s8_u8(vshrq_n_u8(b1, 4));
}

void hachi_vec_dot_q4_K_q8_K_neon(int64_t n, float *s, const void *vw, const void *va) {
    const block_q4_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint32_t u[4];
        unpack_k_scales(w[i].scales, u);
        const uint8_t *sc = (const uint8_t *)u;
        int32x4_t sumi = vdupq_n_s32(0);
        for (int c = 0; c < 4; c++) {
            int8x16_t q[4];
            q4k_unpack(w[i].qs + 32 * c, q);
            sumi = vmlaq_n_s32(sumi, dot32(q[0], q[1], a[i].qs + 64 * c), sc[2 * c]);
            sumi = vmlaq_n_s32(sumi, dot32(q[2], q[3], a[i].qs + 64 * c + 32), sc[2 * c + 1]);
        }
        sum += a[i].d * (h2f(w[i].d) * (float)vaddvq_s32(sumi) - h2f(w[i].dmin) * (float)k_mins_dot(u, a[i].bsums));
    }
    *s = sum;
}

static void multi_q4_K(int64_t n, float *s, const void *vw, const void *va, size_t stride, int na) {
    const block_q4_K *w = vw;
    float acc[16] = {0};
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint32_t u[4];
        unpack_k_scales(w[i].scales, u);
        const uint8_t *sc = (const uint8_t *)u;
        int8x16_t q[16];   /* sub-block k: q[2k], q[2k+1] */
        for (int c = 0; c < 4; c++) {
            int8x16_t t[4];
            q4k_unpack(w[i].qs + 32 * c, t);
            q[4 * c] = t[0]; q[4 * c + 1] = t[1]; q[4 * c + 2] = t[2]; q[4 * c + 3] = t[3];
        }
        const float dw = h2f(w[i].d), dmw = h2f(w[i].dmin);
        for (int r = 0; r < na; r++) {
            const block_q8_K *a = (const block_q8_K *)((const char *)va + (size_t)r * stride) + i;
            int32x4_t sumi = vdupq_n_s32(0);
            for (int k = 0; k < 8; k++) sumi = vmlaq_n_s32(sumi, dot32(q[2 * k], q[2 * k + 1], a->qs + 32 * k), sc[k]);
            acc[r] += a->d * (dw * (float)vaddvq_s32(sumi) - dmw * (float)k_mins_dot(u, a->bsums));
        }
    }
    memcpy(s, acc, (size_t)na * sizeof(float));
}

void hachi_vec_dot_q5_K_q8_K_neon(int64_t n, float *s, const void *vw, const void *va) {
    const block_q5_K *w = vw;
    const block_q8_K *a = va;
    const uint8x16_t m1 = vdupq_n_u8(1), m2 = vdupq_n_u8(2);
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint32_t u[4];
        unpack_k_scales(w[i].scales, u);
        const uint8_t *sc = (const uint8_t *)u;
        uint8x16_t hb0 = vld1q_u8(w[i].qh), hb1 = vld1q_u8(w[i].qh + 16);
        int32x4_t sumi = vdupq_n_s32(0);
        for (int c = 0; c < 4; c++) {   /* bit 2c of qh[l]: sub-block 2c, bit 2c+1: sub-block 2c+1 */
            int8x16_t q[4];
            q4k_unpack(w[i].qs + 32 * c, q);
            q[0] = vreinterpretq_s8_u8(vorrq_u8(vreinterpretq_u8_s8(q[0]), vshlq_n_u8(vandq_u8(hb0, m1), 4)));
            q[1] = vreinterpretq_s8_u8(vorrq_u8(vreinterpretq_u8_s8(q[1]), vshlq_n_u8(vandq_u8(hb1, m1), 4)));
            q[2] = vreinterpretq_s8_u8(vorrq_u8(vreinterpretq_u8_s8(q[2]), vshlq_n_u8(vandq_u8(hb0, m2), 3)));
            q[3] = vreinterpretq_s8_u8(vorrq_u8(vreinterpretq_u8_s8(q[3]), vshlq_n_u8(vandq_u8(hb1, m2), 3)));
            hb0 = vshrq_n_u8(hb0, 2);
            hb1 = vshrq_n_u8(hb1, 2);
            sumi = vmlaq_n_s32(sumi, dot32(q[0], q[1], a[i].qs + 64 * c), sc[2 * c]);
            sumi = vmlaq_n_s32(sumi, dot32(q[2], q[3], a[i].qs + 64 * c + 32), sc[2 * c + 1]);
        }
        sum += a[i].d * (h2f(w[i].d) * (float)vaddvq_s32(sumi) - h2f(w[i].dmin) * (float)k_mins_dot(u, a[i].bsums));
    }
    *s = sum;
}

/* q6_K half of 128: quarter k, bytes 16g..16g+15 -> q[2k+g] (value - 32), scale index 2k+g */
static inline void q6_unpack_half(const uint8_t *ql, const uint8_t *qh, int8x16_t q[8]) {
    const uint8x16_t m4 = vdupq_n_u8(0xF), m2 = vdupq_n_u8(3);
    const int8x16_t off = vdupq_n_s8(32);
    for (int g = 0; g < 2; g++) {
        const uint8x16_t l0 = vld1q_u8(ql + 16 * g), l1 = vld1q_u8(ql + 32 + 16 * g), h = vld1q_u8(qh + 16 * g);
        const uint8x16_t v0 = vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(h, m2), 4));
        const uint8x16_t v1 = vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 2), m2), 4));
        const uint8x16_t v2 = vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 4), m2), 4));
        const uint8x16_t v3 = vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(h, 6), 4));
        q[0 + g] = vsubq_s8(vreinterpretq_s8_u8(v0), off);
        q[2 + g] = vsubq_s8(vreinterpretq_s8_u8(v1), off);
        q[4 + g] = vsubq_s8(vreinterpretq_s8_u8(v2), off);
        q[6 + g] = vsubq_s8(vreinterpretq_s8_u8(v3), off);
    }
}

static inline int32x4_t q6_rows16(const int8x16_t *q, const int8_t *sc, const int8_t *y, int32x4_t sumi) {
    for (int k = 0; k < 16; k++)
        sumi = vmlaq_n_s32(sumi, vdotq_s32(vdupq_n_s32(0), q[k], vld1q_s8(y + 16 * k)), sc[k]);
    return sumi;
}

void hachi_vec_dot_q6_K_q8_K_neon(int64_t n, float *s, const void *vw, const void *va) {
    const block_q6_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8x16_t q[16];
        q6_unpack_half(w[i].ql, w[i].qh, q);
        q6_unpack_half(w[i].ql + 64, w[i].qh + 32, q + 8);
        const int32x4_t sumi = q6_rows16(q, w[i].scales, a[i].qs, vdupq_n_s32(0));
        sum += a[i].d * h2f(w[i].d) * (float)vaddvq_s32(sumi);
    }
    *s = sum;
}

static void multi_q6_K(int64_t n, float *s, const void *vw, const void *va, size_t stride, int na) {
    const block_q6_K *w = vw;
    float acc[16] = {0};
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8x16_t q[16];
        q6_unpack_half(w[i].ql, w[i].qh, q);
        q6_unpack_half(w[i].ql + 64, w[i].qh + 32, q + 8);
        const float dw = h2f(w[i].d);
        for (int r = 0; r < na; r++) {
            const block_q8_K *a = (const block_q8_K *)((const char *)va + (size_t)r * stride) + i;
            acc[r] += a->d * dw * (float)vaddvq_s32(q6_rows16(q, w[i].scales, a->qs, vdupq_n_s32(0)));
        }
    }
    memcpy(s, acc, (size_t)na * sizeof(float));
}

LOOP_MULTI(multi_q4_1, hachi_vec_dot_q4_1_q8_0_neon)
LOOP_MULTI(multi_q5_0, hachi_vec_dot_q5_0_q8_0_neon)
LOOP_MULTI(multi_q5_K, hachi_vec_dot_q5_K_q8_K_neon)

/* ---------------- fp16 KV cache ---------------- */

static void f32_to_f16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    for (; i < n; i++) y[i] = hachi_f32_to_f16(x[i]);
}

static void f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, load_f16(x + i));
    for (; i < n; i++) y[i] = h2f(x[i]);
}

static void to_float_f16(const void *x, float *y, int64_t n) { f16_to_f32(x, y, n); }

static void dot_f16_multi(int64_t n, float *s, const uint16_t *k, const float *q, int64_t qs, int m) {
    int j = 0;
    for (; j + 4 <= m; j += 4) {
        const float *q0 = q + j * qs, *q1 = q0 + qs, *q2 = q1 + qs, *q3 = q2 + qs;
        float32x4_t c0 = vdupq_n_f32(0), c1 = c0, c2 = c0, c3 = c0;
        int64_t i = 0;
        for (; i + 4 <= n; i += 4) {
            const float32x4_t kv = load_f16(k + i);
            c0 = vfmaq_f32(c0, kv, vld1q_f32(q0 + i));
            c1 = vfmaq_f32(c1, kv, vld1q_f32(q1 + i));
            c2 = vfmaq_f32(c2, kv, vld1q_f32(q2 + i));
            c3 = vfmaq_f32(c3, kv, vld1q_f32(q3 + i));
        }
        float s0 = vaddvq_f32(c0), s1 = vaddvq_f32(c1), s2 = vaddvq_f32(c2), s3 = vaddvq_f32(c3);
        for (; i < n; i++) {
            const float kv = h2f(k[i]);
            s0 += kv * q0[i]; s1 += kv * q1[i]; s2 += kv * q2[i]; s3 += kv * q3[i];
        }
        s[j] = s0; s[j + 1] = s1; s[j + 2] = s2; s[j + 3] = s3;
    }
    for (; j < m; j++) hachi_vec_dot_f16_neon(n, s + j, k, q + j * qs);
}

static void axpy_f16_multi(int64_t n, const float *a, const uint16_t *v, float *y, int64_t ys, int m) {
    int j = 0;
    for (; j + 4 <= m; j += 4) {
        float *y0 = y + j * ys, *y1 = y0 + ys, *y2 = y1 + ys, *y3 = y2 + ys;
        int64_t i = 0;
        for (; i + 4 <= n; i += 4) {
            const float32x4_t vv = load_f16(v + i);
            vst1q_f32(y0 + i, vfmaq_n_f32(vld1q_f32(y0 + i), vv, a[j]));
            vst1q_f32(y1 + i, vfmaq_n_f32(vld1q_f32(y1 + i), vv, a[j + 1]));
            vst1q_f32(y2 + i, vfmaq_n_f32(vld1q_f32(y2 + i), vv, a[j + 2]));
            vst1q_f32(y3 + i, vfmaq_n_f32(vld1q_f32(y3 + i), vv, a[j + 3]));
        }
        for (; i < n; i++) {
            const float vv = h2f(v[i]);
            y0[i] += a[j] * vv; y1[i] += a[j + 1] * vv; y2[i] += a[j + 2] * vv; y3[i] += a[j + 3] * vv;
        }
    }
    for (; j < m; j++) {
        float *yj = y + j * ys;
        int64_t i = 0;
        for (; i + 4 <= n; i += 4) vst1q_f32(yj + i, vfmaq_n_f32(vld1q_f32(yj + i), load_f16(v + i), a[j]));
        for (; i < n; i++) yj[i] += a[j] * h2f(v[i]);
    }
}

/* 4 elements of row j of rows ks elements apart, from element i: fp16 converted, or f32 (a tile
 * converted already, kernels.h attn_scores_f32: the same values) */
static ALWAYS_INLINE float32x4_t load_row4(const void *rows, int64_t j, int64_t ks, int64_t i, const bool f32) {
    return f32 ? vld1q_f32((const float *)rows + j * ks + i) : load_f16((const uint16_t *)rows + j * ks + i);
}

/* Attention tiles of 8 query heads per K/V head (Gemma 4's) with head dims a multiple of 8; other
 * shapes go to the per-row kernels above. Scores: 2 keys a pass, each head's 4-lane sum over the
 * dims as dot_f16_multi keeps it (lane i takes dims i, i+4, .. by fma) and vaddvq at the end, so
 * every score is dot_f16_multi's bit for bit, while each query load serves 2 keys and each key row
 * is converted once for the 8 heads (dot_f16_multi: once per 4). Under qemu's count (RESULTS):
 * 0.53 instructions per key x head x dim against dot_f16_multi's 0.84-0.86 (3 keys a pass: 0.53-0.54). */
static ALWAYS_INLINE void scores_g8_keys(int64_t hd, const void *k, int64_t ks, const float *q, float *s, const int NK,
                                         const bool f32) {
    float32x4_t c[2][8];
    UNROLL for (int j = 0; j < NK; j++)
        UNROLL for (int h = 0; h < 8; h++) c[j][h] = vdupq_n_f32(0);
    for (int64_t i = 0; i < hd; i += 4) {
        float32x4_t kv[2];
        UNROLL for (int j = 0; j < NK; j++) kv[j] = load_row4(k, j, ks, i, f32);
        UNROLL for (int h = 0; h < 8; h++) {
            const float32x4_t qv = vld1q_f32(q + h * hd + i);
            UNROLL for (int j = 0; j < NK; j++) c[j][h] = vfmaq_f32(c[j][h], kv[j], qv);
        }
    }
    UNROLL for (int j = 0; j < NK; j++)
        UNROLL for (int h = 0; h < 8; h++) s[j * 8 + h] = vaddvq_f32(c[j][h]);
}
/* two keys a pass, a last odd key alone (fp16 or f32 rows) */
static ALWAYS_INLINE void scores_g8_passes(int64_t hd, int nk, const void *k, int64_t ks, const float *q, float *s,
                                           const bool f32) {
    const size_t row = (size_t)ks * (f32 ? 4 : 2);
    int j = 0;
    for (; j + 2 <= nk; j += 2) scores_g8_keys(hd, (const char *)k + j * row, ks, q, s + j * 8, 2, f32);
    if (nk - j == 1) scores_g8_keys(hd, (const char *)k + j * row, ks, q, s + j * 8, 1, f32);
}
static void attn_scores_f16_g8(int64_t hd, int nk, const uint16_t *k, int64_t ks, const float *q, int G, float *s) {
    if (G != 8 || hd % 8) {
        attn_scores_rows(dot_f16_multi, hd, nk, k, ks, q, G, s);
        return;
    }
    scores_g8_passes(hd, nk, k, ks, q, s, false);
}
/* kernels.h's attn_scores_f32 (G 8, head dims a multiple of 8): the same passes over f32 rows */
static void attn_scores_f32_g8(int64_t hd, int nk, const float *k, int64_t ks, const float *q, int G, float *s) {
    (void)G;
    scores_g8_passes(hd, nk, k, ks, q, s, true);
}

/* Values: out[h][d..d+8) of the 8 heads in 16 registers over a run of keys, each key's 8 dims
 * converted once and multiplied by its 8 weights (fma by lane): every element grows key after key
 * by the fma axpy_f16_multi does, so the sums are its bit for bit, without loading and storing
 * the output rows at every key. Streamed V rows go in runs of 16 keys (a run's 16 rows are read
 * 16 bytes at a time, each a few cache lines apart); rows in cache (attn_values_f16_hot) in one run.
 * Under qemu's count: 0.42 (runs of 16) and 0.38 (one run) instructions per key x head x dim
 * against axpy_f16_multi's 1.33-1.35. */
static ALWAYS_INLINE void values_g8_run(int64_t hd, int n, const void *v, int64_t vs, const float *p, float *out,
                                        const bool f32) {
    for (int64_t d = 0; d < hd; d += 8) {
        float32x4_t a[8][2];
        UNROLL for (int h = 0; h < 8; h++) {
            a[h][0] = vld1q_f32(out + h * hd + d);
            a[h][1] = vld1q_f32(out + h * hd + d + 4);
        }
        for (int j = 0; j < n; j++) {
            float32x4_t lo, hi;
            if (f32) {
                lo = load_row4(v, j, vs, d, true);
                hi = load_row4(v, j, vs, d + 4, true);
            } else {
                load8_f16((const uint16_t *)v + j * vs + d, &lo, &hi);
            }
            const float32x4_t p0 = vld1q_f32(p + j * 8), p1 = vld1q_f32(p + j * 8 + 4);
            a[0][0] = vfmaq_laneq_f32(a[0][0], lo, p0, 0); a[0][1] = vfmaq_laneq_f32(a[0][1], hi, p0, 0);
            a[1][0] = vfmaq_laneq_f32(a[1][0], lo, p0, 1); a[1][1] = vfmaq_laneq_f32(a[1][1], hi, p0, 1);
            a[2][0] = vfmaq_laneq_f32(a[2][0], lo, p0, 2); a[2][1] = vfmaq_laneq_f32(a[2][1], hi, p0, 2);
            a[3][0] = vfmaq_laneq_f32(a[3][0], lo, p0, 3); a[3][1] = vfmaq_laneq_f32(a[3][1], hi, p0, 3);
            a[4][0] = vfmaq_laneq_f32(a[4][0], lo, p1, 0); a[4][1] = vfmaq_laneq_f32(a[4][1], hi, p1, 0);
            a[5][0] = vfmaq_laneq_f32(a[5][0], lo, p1, 1); a[5][1] = vfmaq_laneq_f32(a[5][1], hi, p1, 1);
            a[6][0] = vfmaq_laneq_f32(a[6][0], lo, p1, 2); a[6][1] = vfmaq_laneq_f32(a[6][1], hi, p1, 2);
            a[7][0] = vfmaq_laneq_f32(a[7][0], lo, p1, 3); a[7][1] = vfmaq_laneq_f32(a[7][1], hi, p1, 3);
        }
        UNROLL for (int h = 0; h < 8; h++) {
            vst1q_f32(out + h * hd + d, a[h][0]);
            vst1q_f32(out + h * hd + d + 4, a[h][1]);
        }
    }
}
static void attn_values_f16_g8(int64_t hd, int nk, const uint16_t *v, int64_t vs, const float *p, int G, float *out) {
    if (G != 8 || hd % 8) {
        attn_values_rows(axpy_f16_multi, hd, nk, v, vs, p, G, out);
        return;
    }
    for (int j = 0; j < nk; j += 16) values_g8_run(hd, HACHI_MIN(16, nk - j), v + j * vs, vs, p + j * 8, out, false);
}
static void attn_values_f16_hot(int64_t hd, int nk, const uint16_t *v, int64_t vs, const float *p, int G, float *out) {
    if (G != 8 || hd % 8) {
        attn_values_rows(axpy_f16_multi, hd, nk, v, vs, p, G, out);
        return;
    }
    values_g8_run(hd, nk, v, vs, p, out, false);
}
/* kernels.h's attn_values_f32 (G 8): the hot entry's one run over f32 rows */
static void attn_values_f32_g8(int64_t hd, int nk, const float *v, int64_t vs, const float *p, int G, float *out) {
    (void)G;
    values_g8_run(hd, nk, v, vs, p, out, true);
}

/* e^x on 4 floats: x86_avx2_exp.h's operations on exp_cephes.h's constants (floor by vrndmq, 2^n
 * from the truncated integral fx), within its 1 ulp */
static inline float32x4_t exp4(float32x4_t x) {
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.0f)), vdupq_n_f32(88.0f));
    const float32x4_t fx = vrndmq_f32(vfmaq_f32(vdupq_n_f32(0.5f), x, vdupq_n_f32(HACHI_EXP_LOG2E)));
    x = vfmsq_f32(x, fx, vdupq_n_f32(HACHI_EXP_LN2_HI));
    x = vfmsq_f32(x, fx, vdupq_n_f32(HACHI_EXP_LN2_LO));
    float32x4_t y = vfmaq_f32(vdupq_n_f32(HACHI_EXP_P1), vdupq_n_f32(HACHI_EXP_P0), x);
    y = vfmaq_f32(vdupq_n_f32(HACHI_EXP_P2), y, x);
    y = vfmaq_f32(vdupq_n_f32(HACHI_EXP_P3), y, x);
    y = vfmaq_f32(vdupq_n_f32(HACHI_EXP_P4), y, x);
    y = vfmaq_f32(vdupq_n_f32(HACHI_EXP_P5), y, x);
    y = vfmaq_f32(vaddq_f32(x, vdupq_n_f32(1.0f)), y, vmulq_f32(x, x));
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(fx), vdupq_n_s32(127)), 23);
    return vmulq_f32(y, vreinterpretq_f32_s32(e));
}

/* ---------------- activation quantizers (bit for bit ref's) ---------------- */

/* q8_0: ref's amax (vmaxnm skips a NaN, as ref's > does), d = amax / 127, id = 1 / d, and roundf(x * id)
 * (fcvtas: to nearest, ties away from zero, which is roundf) */
static void quantize_row_q8_0(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float32x4_t v[8], m = vdupq_n_f32(0);
        UNROLL for (int k = 0; k < 8; k++) {
            v[k] = vld1q_f32(x + 4 * k);
            m = vmaxnmq_f32(m, vabsq_f32(v[k]));
        }
        const float amax = vmaxnmvq_f32(m), d = amax / 127, id = d ? 1.0f / d : 0.0f;
        y[i].d = hachi_f32_to_f16(d);
        UNROLL for (int k = 0; k < 8; k += 2) {
            const int16x8_t q = vcombine_s16(vmovn_s32(vcvtaq_s32_f32(vmulq_n_f32(v[k], id))),
                                             vmovn_s32(vcvtaq_s32_f32(vmulq_n_f32(v[k + 1], id))));
            vst1_s8(y[i].qs + 4 * k, vmovn_s16(q));
        }
    }
}

/* q8_K: ref's signed maximum (the first value of the largest magnitude), iscale = -127 / max,
 * min(127, nearest_int(iscale * x)) (fcvtns: to nearest, ties to even, as nearest_int), the bsums
 * of 16 and d = 1 / iscale */
static void quantize_row_q8_K(const float *x, void *vy, int64_t n) {
    block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float32x4_t m = vdupq_n_f32(0);
        for (int k = 0; k < QK_K; k += 4) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(x + k)));
        const float amax = vmaxnmvq_f32(m);
        if (amax == 0) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int j = 0;
        while (fabsf(x[j]) != amax) j++;   /* the first one */
        const float iscale = -127.f / x[j];
        for (int k = 0; k < QK_K; k += 16) {
            int32x4_t q[4];
            UNROLL for (int e = 0; e < 4; e++)
                q[e] = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + k + 4 * e), iscale)), vdupq_n_s32(127));
            const int8x16_t b = vcombine_s8(vmovn_s16(vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1]))),
                                            vmovn_s16(vcombine_s16(vmovn_s32(q[2]), vmovn_s32(q[3]))));
            vst1q_s8(y[i].qs + k, b);
            y[i].bsums[k / 16] = (int16_t)vaddlvq_s8(b);
        }
        y[i].d = 1 / iscale;
    }
}

/* tanh (x86_avx2.c's tanh_ps: Cephes tanhf): |x| < 0.625 an odd polynomial, else 1 - 2 / (e^2|x| + 1);
 * sign restored */
static inline float32x4_t tanh4(float32x4_t x) {
    const float32x4_t ax = vabsq_f32(x);
    const float32x4_t e = exp4(vminq_f32(vaddq_f32(ax, ax), vdupq_n_f32(40.0f)));
    const float32x4_t big = vsubq_f32(vdupq_n_f32(1.0f), vdivq_f32(vdupq_n_f32(2.0f), vaddq_f32(e, vdupq_n_f32(1.0f))));
    const float32x4_t z = vmulq_f32(ax, ax);
    float32x4_t p = vfmaq_f32(vdupq_n_f32(2.06390887954e-2f), vdupq_n_f32(-5.70498872745e-3f), z);
    p = vfmaq_f32(vdupq_n_f32(-5.37397155531e-2f), p, z);
    p = vfmaq_f32(vdupq_n_f32(1.33314422036e-1f), p, z);
    p = vfmaq_f32(vdupq_n_f32(-3.33332819422e-1f), p, z);
    p = vfmaq_f32(ax, vmulq_f32(p, z), ax);
    const float32x4_t r = vbslq_f32(vcgeq_f32(ax, vdupq_n_f32(0.625f)), big, p);
    const uint32x4_t sign = vdupq_n_u32(0x80000000u);
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(r), vandq_u32(vreinterpretq_u32_f32(x), sign)));
}
static inline float32x4_t gelu_mul4(float32x4_t v, float32x4_t g) {
    const float32x4_t y = vmulq_n_f32(vfmaq_f32(v, vmulq_n_f32(v, 0.044715f), vmulq_f32(v, v)), 0.7978845608028654f);
    return vmulq_f32(vmulq_f32(vmulq_n_f32(v, 0.5f), vaddq_f32(vdupq_n_f32(1.0f), tanh4(y))), g);
}
/* kernels.h's activations, 4 floats a step; the last n % 4 through the same code (a zero-padded copy) */
static void gelu_mul(int64_t n, float *x, const float *g) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(x + i, gelu_mul4(vld1q_f32(x + i), vld1q_f32(g + i)));
    if (i < n) {
        float a[4] = {0}, b[4] = {0};
        memcpy(a, x + i, (size_t)(n - i) * sizeof(float));
        memcpy(b, g + i, (size_t)(n - i) * sizeof(float));
        vst1q_f32(a, gelu_mul4(vld1q_f32(a), vld1q_f32(b)));
        memcpy(x + i, a, (size_t)(n - i) * sizeof(float));
    }
}
static void softcap(int64_t n, float *x, float cap) {
    const float ic = 1.0f / cap;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vmulq_n_f32(tanh4(vmulq_n_f32(vld1q_f32(x + i), ic)), cap));
    if (i < n) {
        float a[4] = {0};
        memcpy(a, x + i, (size_t)(n - i) * sizeof(float));
        vst1q_f32(a, vmulq_n_f32(tanh4(vmulq_n_f32(vld1q_f32(a), ic)), cap));
        memcpy(x + i, a, (size_t)(n - i) * sizeof(float));
    }
}

/* kernels.h's attn_softmax for G = 4 or 8 (else ref's): the heads' scores a vector per key (two
 * for 8), scaled and their running maxima taken, then exp4 of each minus its head's maximum,
 * summed per head key after key */
static void attn_softmax(float *x, int n, int G, float scale, float *mx, float *sum) {
    if (G != 8 && G != 4) {
        hachi_attn_softmax_ref(x, n, G, scale, mx, sum);
        return;
    }
    const int nv = G / 4;   /* vectors per key */
    float32x4_t m[2], acc[2];
    for (int v = 0; v < nv; v++) {
        m[v] = vld1q_f32(mx + 4 * v);
        acc[v] = vdupq_n_f32(0);
    }
    for (int j = 0; j < n; j++)
        for (int v = 0; v < nv; v++) {
            const float32x4_t s = vmulq_n_f32(vld1q_f32(x + j * G + 4 * v), scale);
            vst1q_f32(x + j * G + 4 * v, s);
            m[v] = vmaxnmq_f32(m[v], s);   /* a NaN score passed over, as ref's v > mx */
        }
    for (int j = 0; j < n; j++)
        for (int v = 0; v < nv; v++) {
            const float32x4_t e = exp4(vsubq_f32(vld1q_f32(x + j * G + 4 * v), m[v]));
            vst1q_f32(x + j * G + 4 * v, e);
            acc[v] = vaddq_f32(acc[v], e);
        }
    for (int v = 0; v < nv; v++) {
        vst1q_f32(mx + 4 * v, m[v]);
        vst1q_f32(sum + 4 * v, acc[v]);
    }
}

/* ---------------- int8 KV cache: per key, heads by four, 8 dims a step ---------------- */

/* 8 int8 -> two float32x4 (exact) */
static inline void load_i8(const int8_t *p, float32x4_t *lo, float32x4_t *hi) {
    const int16x8_t w = vmovl_s8(vld1_s8(p));
    *lo = vcvtq_f32_s32(vmovl_s16(vget_low_s16(w)));
    *hi = vcvtq_f32_s32(vmovl_s16(vget_high_s16(w)));
}

static void attn_scores_i8(int64_t hd, int nk, const int8_t *k, int64_t ks, const float *sc, int64_t ss,
                           const hachi_query_i8 *qi, int G, float *s) {
    const float *q = qi->qf, *qs = qi->qs;   /* whole numbers: exact f32 sums (kernels.h) */
    for (int j = 0; j < nk; j++) {
        const int8_t *kr = k + (size_t)j * ks;
        const float scale = sc[(size_t)j * ss];
        float *sj = s + (size_t)j * G;
        int h = 0;
        for (; h + 4 <= G; h += 4) {
            const float *q0 = q + (size_t)h * hd, *q1 = q0 + hd, *q2 = q1 + hd, *q3 = q2 + hd;
            float32x4_t c0 = vdupq_n_f32(0), c1 = c0, c2 = c0, c3 = c0;
            int64_t d = 0;
            for (; d + 8 <= hd; d += 8) {
                float32x4_t x, y;
                load_i8(kr + d, &x, &y);
                c0 = vfmaq_f32(vfmaq_f32(c0, x, vld1q_f32(q0 + d)), y, vld1q_f32(q0 + d + 4));
                c1 = vfmaq_f32(vfmaq_f32(c1, x, vld1q_f32(q1 + d)), y, vld1q_f32(q1 + d + 4));
                c2 = vfmaq_f32(vfmaq_f32(c2, x, vld1q_f32(q2 + d)), y, vld1q_f32(q2 + d + 4));
                c3 = vfmaq_f32(vfmaq_f32(c3, x, vld1q_f32(q3 + d)), y, vld1q_f32(q3 + d + 4));
            }
            float s0 = vaddvq_f32(c0), s1 = vaddvq_f32(c1), s2 = vaddvq_f32(c2), s3 = vaddvq_f32(c3);
            for (; d < hd; d++) {
                const float x = (float)kr[d];
                s0 += x * q0[d]; s1 += x * q1[d]; s2 += x * q2[d]; s3 += x * q3[d];
            }
            sj[h] = s0 * qs[h] * scale; sj[h + 1] = s1 * qs[h + 1] * scale;
            sj[h + 2] = s2 * qs[h + 2] * scale; sj[h + 3] = s3 * qs[h + 3] * scale;
        }
        for (; h < G; h++) {
            const float *qh = q + (size_t)h * hd;
            float32x4_t c = vdupq_n_f32(0);
            int64_t d = 0;
            for (; d + 8 <= hd; d += 8) {
                float32x4_t x, y;
                load_i8(kr + d, &x, &y);
                c = vfmaq_f32(vfmaq_f32(c, x, vld1q_f32(qh + d)), y, vld1q_f32(qh + d + 4));
            }
            float sum = vaddvq_f32(c);
            for (; d < hd; d++) sum += (float)kr[d] * qh[d];
            sj[h] = sum * qs[h] * scale;
        }
    }
}

/* attn_scores_i8 by sdot, where the CPU has it: per key, heads by four, 16 dims a step, the
 * exact integer dots (kernels.h) then the query head's scale and the key's */
static void attn_scores_i8_sdot(int64_t hd, int nk, const int8_t *k, int64_t ks, const float *sc, int64_t ss,
                                const hachi_query_i8 *qi, int G, float *s) {
    const int8_t *q = qi->q8;
    const float *qs = qi->qs;
    for (int j = 0; j < nk; j++) {
        const int8_t *kr = k + (size_t)j * ks;
        const float scale = sc[(size_t)j * ss];
        float *sj = s + (size_t)j * G;
        int h = 0;
        for (; h + 4 <= G; h += 4) {
            const int8_t *q0 = q + (size_t)h * hd, *q1 = q0 + hd, *q2 = q1 + hd, *q3 = q2 + hd;
            int32x4_t c0 = vdupq_n_s32(0), c1 = c0, c2 = c0, c3 = c0;
            int64_t d = 0;
            for (; d + 16 <= hd; d += 16) {
                const int8x16_t x = vld1q_s8(kr + d);
                c0 = vdotq_s32(c0, x, vld1q_s8(q0 + d));
                c1 = vdotq_s32(c1, x, vld1q_s8(q1 + d));
                c2 = vdotq_s32(c2, x, vld1q_s8(q2 + d));
                c3 = vdotq_s32(c3, x, vld1q_s8(q3 + d));
            }
            int32_t s0 = vaddvq_s32(c0), s1 = vaddvq_s32(c1), s2 = vaddvq_s32(c2), s3 = vaddvq_s32(c3);
            for (; d < hd; d++) {
                s0 += kr[d] * q0[d]; s1 += kr[d] * q1[d]; s2 += kr[d] * q2[d]; s3 += kr[d] * q3[d];
            }
            sj[h] = (float)s0 * qs[h] * scale; sj[h + 1] = (float)s1 * qs[h + 1] * scale;
            sj[h + 2] = (float)s2 * qs[h + 2] * scale; sj[h + 3] = (float)s3 * qs[h + 3] * scale;
        }
        for (; h < G; h++) {
            const int8_t *qh = q + (size_t)h * hd;
            int32x4_t c = vdupq_n_s32(0);
            int64_t d = 0;
            for (; d + 16 <= hd; d += 16) c = vdotq_s32(c, vld1q_s8(kr + d), vld1q_s8(qh + d));
            int32_t sum = vaddvq_s32(c);
            for (; d < hd; d++) sum += kr[d] * qh[d];
            sj[h] = (float)sum * qs[h] * scale;
        }
    }
}

/* kernels.h's int8 values: per head the run's 15-bit weights, then 16 dims at a time the exact
 * sums by widening multiply-adds (vmlal) */
static void attn_values_i8(int64_t hd, int nk, const int8_t *v, int64_t vs, const float *sc, int64_t ss,
                           const float *p, int G, const float *r, int32_t *acc, bool first) {
    if (hd % 16) { hachi_attn_values_i8_ref(hd, nk, v, vs, sc, ss, p, G, r, acc, first); return; }
    int16_t wq[HACHI_VQ_KEYS];
    for (int h = 0; h < G; h++) {
        for (int j = 0; j < nk; j++) wq[j] = (int16_t)vcvtns_s32_f32(p[(size_t)j * G + h] * sc[(size_t)j * ss] * r[h]);
        int32_t *a = acc + (size_t)h * hd;
        for (int64_t d = 0; d < hd; d += 16) {
            int32x4_t c0 = vdupq_n_s32(0), c1 = c0, c2 = c0, c3 = c0;
            if (!first) {
                c0 = vld1q_s32(a + d); c1 = vld1q_s32(a + d + 4); c2 = vld1q_s32(a + d + 8); c3 = vld1q_s32(a + d + 12);
            }
            for (int j = 0; j < nk; j++) {
                const int8x16_t x = vld1q_s8(v + (size_t)j * vs + d);
                const int16x8_t x0 = vmovl_s8(vget_low_s8(x)), x1 = vmovl_high_s8(x);
                c0 = vmlal_n_s16(c0, vget_low_s16(x0), wq[j]);
                c1 = vmlal_high_n_s16(c1, x0, wq[j]);
                c2 = vmlal_n_s16(c2, vget_low_s16(x1), wq[j]);
                c3 = vmlal_high_n_s16(c3, x1, wq[j]);
            }
            vst1q_s32(a + d, c0); vst1q_s32(a + d + 4, c1); vst1q_s32(a + d + 8, c2); vst1q_s32(a + d + 12, c3);
        }
    }
}

/* ---------------- the table ---------------- */

static void set(hachi_kernels *t, uint32_t type, hachi_vec_dot_fn dot, hachi_vec_dot_multi_fn multi) {
    t->t[type].vec_dot = dot;
    t->t[type].vec_dot_multi = multi;
}

/* on a copy of ref's table: cold entries (and int8 dots without sdot) stay ref's */
int hachi_kernels_fill_neon(hachi_kernels *t, int dotprod, int i8mm) {
    t->t[HACHI_TYPE_Q4_0].vec_dot_x8 = NULL;   /* without sdot: keep the file's layout */
    t->t[HACHI_TYPE_Q4_K].vec_dot_x8 = NULL;
    t->t[HACHI_TYPE_Q8_0].vec_dot_x8 = NULL;
    t->t[HACHI_TYPE_Q5_K].vec_dot_x8 = NULL;
    t->t[HACHI_TYPE_Q6_K].vec_dot_x8 = NULL;
    set(t, HACHI_TYPE_F32, hachi_vec_dot_f32_neon, multi_f32);
    set(t, HACHI_TYPE_F16, hachi_vec_dot_f16_neon, multi_f16);
    set(t, HACHI_TYPE_BF16, hachi_vec_dot_bf16_neon, multi_bf16);
    t->t[HACHI_TYPE_F32].gemm = gemm_f32;   /* prefill: tiles of 3 rows x 4 tokens */
    t->t[HACHI_TYPE_F16].gemm = gemm_f16;
    t->t[HACHI_TYPE_BF16].gemm = gemm_bf16;
    t->t[HACHI_TYPE_F32].gemm_min = t->t[HACHI_TYPE_F16].gemm_min = t->t[HACHI_TYPE_BF16].gemm_min = 2;   /* 0.79-0.81x multi's instructions at 2-3 tokens */
    t->t[HACHI_TYPE_F16].to_float = to_float_f16;
    t->f32_to_f16 = f32_to_f16;
    t->f16_to_f32 = f16_to_f32;
    t->dot_f16_multi = dot_f16_multi;
    t->axpy_f16_multi = axpy_f16_multi;
    t->t[HACHI_TYPE_Q8_0].from_float = quantize_row_q8_0;   /* the activations of int8 dots */
    t->t[HACHI_TYPE_Q8_K].from_float = quantize_row_q8_K;
    t->attn_softmax = attn_softmax;
    t->gelu_mul = gelu_mul;
    t->softcap = softcap;
    t->attn_scores_f16 = attn_scores_f16_g8;
    t->attn_values_f16 = attn_values_f16_g8;
    t->attn_values_f16_hot = attn_values_f16_hot;
    t->attn_f32_g = 8;
    t->attn_f32_hd = 8;
    t->attn_scores_f32 = attn_scores_f32_g8;
    t->attn_values_f32 = attn_values_f32_g8;
    t->attn_scores_i8 = attn_scores_i8;
    t->attn_values_i8 = attn_values_i8;
    t->attn_i8_sets = 0;   /* ref's scalar matrix products: the tile kernels instead */
    if (dotprod) {
        t->attn_scores_i8 = attn_scores_i8_sdot;
        set(t, HACHI_TYPE_Q4_0, hachi_vec_dot_q4_0_q8_0_neon, multi_q4_0);
        t->t[HACHI_TYPE_Q4_0].vec_dot_x8 = x8_q4_0;   /* the loader repacks Q4_0 rows by 8 */
        t->t[HACHI_TYPE_Q4_0].act_extra = act_extra_q4_0;   /* which read -8*sum(y) and d from here */
        t->t[HACHI_TYPE_Q4_0].act_prep = act_prep_q4_0;
        set(t, HACHI_TYPE_Q4_1, hachi_vec_dot_q4_1_q8_0_neon, multi_q4_1);
        set(t, HACHI_TYPE_Q5_0, hachi_vec_dot_q5_0_q8_0_neon, multi_q5_0);
        set(t, HACHI_TYPE_Q8_0, hachi_vec_dot_q8_0_q8_0_neon, multi_q8_0);
        t->t[HACHI_TYPE_Q8_0].vec_dot_x8 = x8_q8_0;   /* and Q8_0 rows */
        set(t, HACHI_TYPE_Q4_K, hachi_vec_dot_q4_K_q8_K_neon, multi_q4_K);
        t->t[HACHI_TYPE_Q4_K].vec_dot_x8 = x8_q4_K;   /* and Q4_K rows by 8 */
        set(t, HACHI_TYPE_Q5_K, hachi_vec_dot_q5_K_q8_K_neon, multi_q5_K);
        t->t[HACHI_TYPE_Q5_K].vec_dot_x8 = x8_q5_K;   /* and Q5_K, Q6_K rows by 8 */
        set(t, HACHI_TYPE_Q6_K, hachi_vec_dot_q6_K_q8_K_neon, multi_q6_K);
        t->t[HACHI_TYPE_Q6_K].vec_dot_x8 = x8_q6_K;
        t->t[HACHI_TYPE_Q4_0].gemm_x8 = gemm_sdot_q4_0;   /* prefill: packed tiles of token pairs */
        t->t[HACHI_TYPE_Q8_0].gemm_x8 = gemm_sdot_q8_0;
        t->t[HACHI_TYPE_Q4_0].act_pack = t->t[HACHI_TYPE_Q8_0].act_pack = act_pack_pairs;
        t->t[HACHI_TYPE_Q4_0].act_pack_bytes = t->t[HACHI_TYPE_Q8_0].act_pack_bytes = act_pack_bytes_pairs;
        t->t[HACHI_TYPE_Q4_0].gemm_min = 5;   /* by qemu's instruction counts */
        t->t[HACHI_TYPE_Q8_0].gemm_min = 4;
        t->t[HACHI_TYPE_Q4_K].gemm_x8 = gemm_sdot_q4_K;
        t->t[HACHI_TYPE_Q5_K].gemm_x8 = gemm_sdot_q5_K;
        t->t[HACHI_TYPE_Q4_K].act_pack = t->t[HACHI_TYPE_Q5_K].act_pack = act_pack_kpairs;
        t->t[HACHI_TYPE_Q4_K].act_pack_bytes = t->t[HACHI_TYPE_Q5_K].act_pack_bytes = act_pack_bytes_kpairs;
        t->t[HACHI_TYPE_Q4_K].gemm_min = t->t[HACHI_TYPE_Q5_K].gemm_min = 5;   /* the x8 kernels' pairs of sub-blocks win at 3-4 */
        t->t[HACHI_TYPE_Q6_K].gemm_x8 = gemm_sdot_q6_K;
        t->t[HACHI_TYPE_Q6_K].act_pack = act_pack_kpairs;
        t->t[HACHI_TYPE_Q6_K].act_pack_bytes = act_pack_bytes_kpairs;
        t->t[HACHI_TYPE_Q6_K].gemm_min = 5;
    }
#ifdef HAVE_I8MM
    if (dotprod && i8mm) {   /* smmla: the GEMMs but Q6_K's. The x8 kernels and Q6_K's GEMM stay
                                sdot's, which take fewer instructions (Q4_K 2-4 tokens 61 / 52 / 41
                                against smmla's 65 / 67 / 48; Q5_K 98 / 76 / 54 against 101 / 113 /
                                67; Q6_K 4 tokens 63 against 69, 16 in the GEMM 57 against 60) */
        t->t[HACHI_TYPE_Q4_0].gemm_x8 = gemm_mm_q4_0;   /* the same packed tiles as sdot's */
        t->t[HACHI_TYPE_Q8_0].gemm_x8 = gemm_mm_q8_0;
        t->t[HACHI_TYPE_Q4_0].gemm_min = t->t[HACHI_TYPE_Q8_0].gemm_min = 4;
        t->t[HACHI_TYPE_Q4_K].gemm_x8 = gemm_mm_q4_K;
        t->t[HACHI_TYPE_Q5_K].gemm_x8 = gemm_mm_q5_K;
        t->attn_i8_sets = 4;   /* int8 K/V tiles of 4+ head sets as smmla / usmmla products */
        t->attn_i8_qpack = attn_i8_qpack_mm;
        t->attn_i8_dots = attn_i8_dots_mm;
        t->attn_i8_vpack = attn_i8_vpack_mm;
        t->attn_i8_wsums = attn_i8_wsums_mm;
    }
#else
    (void)i8mm;
#endif
    return 1;
}

#else
int hachi_kernels_fill_neon(hachi_kernels *t, int dotprod, int i8mm) { (void)t; (void)dotprod; (void)i8mm; return 0; }
#endif
