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
#include "util.h"

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

/* gemm_x8 (kernels.h) from gemm2(n, y, ldy, g0, g1, a, a_stride, NT), a kernel of two groups of
 * 8 interleaved rows (blk, qk values a block) and NT <= tok tokens (a constant in each case of
 * cases, tok - 1 of them): pairs of groups, the tokens in passes of tok (a later pass reads the
 * pair's weights from L1/L2), a lone last group through the file's vec_dot_x8 x8 */
#define GEMM_CASE(f, k) case k: f(n, yg, ldy, g0, g0 + nb, at, a_stride, k); break;
#define GEMM_CASES3(f) GEMM_CASE(f, 1) GEMM_CASE(f, 2) GEMM_CASE(f, 3)
#define GEMM_CASES7(f) GEMM_CASES3(f) GEMM_CASE(f, 4) GEMM_CASE(f, 5) GEMM_CASE(f, 6) GEMM_CASE(f, 7)
#define GEMM_CASES15(f) GEMM_CASES7(f) GEMM_CASE(f, 8) GEMM_CASE(f, 9) GEMM_CASE(f, 10) GEMM_CASE(f, 11) \
    GEMM_CASE(f, 12) GEMM_CASE(f, 13) GEMM_CASE(f, 14) GEMM_CASE(f, 15)
#define GEMM_FROM_PAIRS(name, gemm2, blk, qk, x8, tok, cases)                                          \
    static void name(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *a,    \
                     size_t a_stride, int nt) {                                                        \
        const int64_t nb = n / (qk);                                                                   \
        const blk *w = w8;                                                                             \
        int gi = 0;                                                                                    \
        for (; gi + 2 <= n_groups; gi += 2) {                                                          \
            const blk *g0 = w + (size_t)gi * nb;                                                       \
            for (int t0 = 0; t0 < nt; t0 += (tok)) {                                                   \
                float *yg = y + (size_t)t0 * ldy + 8 * gi;                                             \
                const char *at = (const char *)a + (size_t)t0 * a_stride;                              \
                switch (HACHI_MIN((tok), nt - t0)) {                                                   \
                    cases(gemm2)                                                                       \
                    default: gemm2(n, yg, ldy, g0, g0 + nb, at, a_stride, (tok)); break;               \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
        if (gi < n_groups) {                                                                           \
            float s[8 * 16];                                                                           \
            x8(n, s, w + (size_t)gi * nb, a, a_stride, nt);                                            \
            for (int t = 0; t < nt; t++) memcpy(y + (size_t)t * ldy + 8 * gi, s + 8 * t, 8 * sizeof(float)); \
        }                                                                                              \
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
