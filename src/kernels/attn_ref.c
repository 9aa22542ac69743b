/* attn_ref: attention tile kernels built on the main table's per-row fp16
 * kernels (every ISA has those), and the choice of tile kernels per ISA. */
#include "kernels/attn.h"
#include <float.h>
#include <math.h>

void hachi_attn_scores_rows(const hachi_kernels *kt, int64_t hd, int nk, const uint16_t *k, int64_t k_stride,
                        const float *q, int G, float *s) {
    for (int j = 0; j < nk; j++) kt->dot_f16_multi(hd, s + (size_t)j * G, k + (size_t)j * k_stride, q, hd, G);
}

void hachi_attn_values_rows(const hachi_kernels *kt, int64_t hd, int nk, const uint16_t *v, int64_t v_stride,
                        const float *p, int G, float *out) {
    for (int j = 0; j < nk; j++) kt->axpy_f16_multi(hd, p + (size_t)j * G, v + (size_t)j * v_stride, out, hd, G);
}

void hachi_attn_softmax_ref(float *x, int n, int G, float scale, float *mx, float *sum) {
    for (int h = 0; h < G; h++) { mx[h] = -FLT_MAX; sum[h] = 0.0f; }
    for (int j = 0; j < n; j++)
        for (int h = 0; h < G; h++) {
            float *v = &x[(size_t)j * G + h];
            *v *= scale;
            if (*v > mx[h]) mx[h] = *v;
        }
    for (int j = 0; j < n; j++)
        for (int h = 0; h < G; h++) {
            float *v = &x[(size_t)j * G + h];
            *v = expf(*v - mx[h]);
            sum[h] += *v;
        }
}

static const hachi_attn_kernels rows = {"rows", hachi_attn_scores_rows, hachi_attn_values_rows,
                                        hachi_attn_softmax_ref};

const hachi_attn_kernels *hachi_attn_kernels_for(const hachi_kernels *kt) {
    const hachi_attn_kernels *a = NULL;
    if (kt && (kt->isa == HACHI_ISA_AVX2 || kt->isa == HACHI_ISA_AVX512)) a = hachi_attn_kernels_avx2();
    return a ? a : &rows;
}
