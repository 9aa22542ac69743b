/* kernels/rows: the row-blocking framework shared by the SIMD files (x86_avx2.c,
 * x86_avx512.c, arm_neon.c) and ref.c. A file writes one always-inlined ROWS function per
 * weight type,
 *     rows(n, s, w, a, a_stride, R)   R = 1..ROWS_MAX activation rows, accumulators in registers,
 * and builds its table entries from it with the drivers below: vec_dot is rows(.., 0, 1),
 * vec_dot_multi is MULTI_FROM_ROWS, vec_dot_x8 (8 outputs per activation row) is
 * ROWS_FROM(.., 8). So single and multi dots share one accumulation order and a row's result
 * is bit-identical whether computed alone (decode) or with other rows (verify, prefill):
 * multi sweeps the activation rows in groups of ROWS_MAX (the weight row, a few KB, stays in
 * L1 between groups) and per row the order never depends on R. Types without a block-shared
 * path loop their single dot (LOOP_MULTI); attention tiles without a register-blocked
 * kernel call the per-row fp16 kernels once per key (ATTN_ROWS_FROM). */
#ifndef HACHI_KERNELS_ROWS_H
#define HACHI_KERNELS_ROWS_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "kernels/kernels.h"

#define ROWS_MAX 4
#define ALWAYS_INLINE inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* multi (step 1) or x8 (step 8: 8 outputs per activation row) from ROWS: groups of N
 * activation rows (N a constant, 4 or more), then one of 4 when N is more, then the 1..3 left */
#define ROWS_FROM_N(name, rows, step, N)                                                     \
    static void name(int64_t n, float *s, const void *w, const void *va, size_t stride, int na) { \
        const char *a = va;                                                                  \
        int r = 0;                                                                           \
        for (; r + (N) <= na; r += (N)) rows(n, s + (step) * r, w, a + (size_t)r * stride, stride, (N)); \
        if ((N) > 4 && r + 4 <= na) {                                                        \
            rows(n, s + (step) * r, w, a + (size_t)r * stride, stride, 4);                   \
            r += 4;                                                                          \
        }                                                                                    \
        switch (na - r) {                                                                    \
        case 3: rows(n, s + (step) * r, w, a + (size_t)r * stride, stride, 3); break;        \
        case 2: rows(n, s + (step) * r, w, a + (size_t)r * stride, stride, 2); break;        \
        case 1: rows(n, s + (step) * r, w, a + (size_t)r * stride, stride, 1); break;        \
        default: break;                                                                      \
        }                                                                                    \
    }
#define ROWS_FROM(name, rows, step) ROWS_FROM_N(name, rows, step, ROWS_MAX)

/* gemm_x8 (kernels.h) from x16(n, y, ldy, g0, g1, a, stride, R), a kernel of two groups of 8
 * interleaved rows (blk, qk values a block) and R <= 4 activation rows: pairs of groups, the
 * tokens in passes of 4 (the pair's blocks stay in L1 between passes), a lone last group through
 * the file's vec_dot_x8 x8 */
#define GEMM_FROM_X16(name, x16, x8, blk, qk)                                                \
    static void name(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *a, \
                     size_t a_stride, int nt) {                                              \
        const int64_t nb = n / (qk);                                                         \
        const blk *w = w8;                                                                   \
        const char *va = a;                                                                  \
        int gi = 0;                                                                          \
        for (; gi + 2 <= n_groups; gi += 2) {                                                \
            const blk *g0 = w + (size_t)gi * nb;                                             \
            int t = 0;                                                                       \
            for (; t + 4 <= nt; t += 4)                                                      \
                x16(n, y + (size_t)t * ldy + 8 * gi, ldy, g0, g0 + nb, va + (size_t)t * a_stride, a_stride, 4); \
            float *yt = y + (size_t)t * ldy + 8 * gi;                                        \
            const char *at = va + (size_t)t * a_stride;                                      \
            switch (nt - t) {                                                                \
            case 3: x16(n, yt, ldy, g0, g0 + nb, at, a_stride, 3); break;                    \
            case 2: x16(n, yt, ldy, g0, g0 + nb, at, a_stride, 2); break;                    \
            case 1: x16(n, yt, ldy, g0, g0 + nb, at, a_stride, 1); break;                    \
            default: break;                                                                  \
            }                                                                                \
        }                                                                                    \
        if (gi < n_groups) {                                                                 \
            float s[8 * 16];                                                                 \
            x8(n, s, w + (size_t)gi * nb, a, a_stride, nt);                                  \
            for (int t = 0; t < nt; t++) memcpy(y + (size_t)t * ldy + 8 * gi, s + 8 * t, 8 * sizeof(float)); \
        }                                                                                    \
    }
#define MULTI_FROM_ROWS(name, rows) ROWS_FROM(name, rows, 1)

/* multi for the types without a block-shared path: loop the single dot */
#define LOOP_MULTI(name, dot)                                                                \
    static void name(int64_t n, float *s, const void *w, const void *a, size_t stride, int na) { \
        for (int r = 0; r < na; r++) dot(n, s + r, w, (const char *)a + (size_t)r * stride); \
    }

/* attention tiles (kernels.h: attn_scores_f16, attn_values_f16) from the per-row fp16
 * kernels: one dot_f16_multi / axpy_f16_multi call per key serves all G heads */
static inline void attn_scores_rows(hachi_dot_f16_multi_fn dot, int64_t hd, int nk, const uint16_t *k,
                                    int64_t k_stride, const float *q, int G, float *s) {
    for (int j = 0; j < nk; j++) dot(hd, s + (size_t)j * G, k + (size_t)j * k_stride, q, hd, G);
}
static inline void attn_values_rows(hachi_axpy_f16_multi_fn axpy, int64_t hd, int nk, const uint16_t *v,
                                    int64_t v_stride, const float *p, int G, float *out) {
    for (int j = 0; j < nk; j++) axpy(hd, p + (size_t)j * G, v + (size_t)j * v_stride, out, hd, G);
}
#define ATTN_ROWS_FROM(scores, values, dot, axpy)                                            \
    static void scores(int64_t hd, int nk, const uint16_t *k, int64_t k_stride, const float *q, int G, float *s) { \
        attn_scores_rows(dot, hd, nk, k, k_stride, q, G, s);                                 \
    }                                                                                        \
    static void values(int64_t hd, int nk, const uint16_t *v, int64_t v_stride, const float *p, int G, float *out) { \
        attn_values_rows(axpy, hd, nk, v, v_stride, p, G, out);                              \
    }

#endif
