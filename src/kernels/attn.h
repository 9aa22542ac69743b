/* attention tile kernels over an fp16 KV cache: G query heads share one K/V
 * head, so each K and V row is converted once and used for all G heads.
 * A separate small table from kernels.h: attn_ref.c falls back to the main
 * table's per-row dot_f16_multi / axpy_f16_multi; x86_avx2_attn.c holds the
 * register-blocked AVX2 versions (also used on AVX-512 machines). */
#ifndef HACHI_ATTN_KERNELS_H
#define HACHI_ATTN_KERNELS_H
#include <stdint.h>
#include "kernels/kernels.h"

typedef struct hachi_attn_kernels {
    const char *name;
    /* s[j*G + h] = dot(q + h*hd, k + j*k_stride) for j < nk, h < G */
    void (*scores_f16)(const hachi_kernels *kt, int64_t hd, int nk, const uint16_t *k, int64_t k_stride,
                       const float *q, int G, float *s);
    /* out[h*hd + d] += sum_j p[j*G + h] * v[j*v_stride + d] for h < G, d < hd */
    void (*values_f16)(const hachi_kernels *kt, int64_t hd, int nk, const uint16_t *v, int64_t v_stride,
                       const float *p, int G, float *out);
    /* x[j*G + h] *= scale, then mx[h] = max_j x[j*G + h], x[j*G + h] = exp(x[j*G + h] - mx[h]),
     * sum[h] = sum_j x[j*G + h], for j < n (n >= 1), h < G */
    void (*softmax)(float *x, int n, int G, float scale, float *mx, float *sum);
} hachi_attn_kernels;

/* The per-row fallbacks (any G, any head dim), built on kt's dot_f16_multi / axpy_f16_multi. */
void hachi_attn_scores_rows(const hachi_kernels *kt, int64_t hd, int nk, const uint16_t *k, int64_t k_stride,
                            const float *q, int G, float *s);
void hachi_attn_values_rows(const hachi_kernels *kt, int64_t hd, int nk, const uint16_t *v, int64_t v_stride,
                            const float *p, int G, float *out);

void hachi_attn_softmax_ref(float *x, int n, int G, float scale, float *mx, float *sum);

/* The attention kernels that go with the main kernel table kt. */
const hachi_attn_kernels *hachi_attn_kernels_for(const hachi_kernels *kt);
const hachi_attn_kernels *hachi_attn_kernels_avx2(void);   /* NULL when not built for x86-64 */

#endif
