/* kernels/ref: the scalar reference of every kernel, always compiled and the oracle the
 * per-ISA files are tested against. Integer dots sum exactly per block, then scale in
 * float as ggml does; float dots accumulate in double. Nothing here is hot unless the
 * CPU has no SIMD table (or HACHI_ISA=ref). */
#include <float.h>
#include <stdbool.h>
#include <stddef.h>
#include <math.h>
#include <string.h>
#include "kernels/kernels.h"
#include "kernels/rows.h"
#include "util.h"

/* ---- float weights: activations stay f32 ---- */

void hachi_vec_dot_f32_ref(int64_t n, float *s, const void *vw, const void *va) {
    const float *w = vw, *a = va;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)w[i] * a[i];
    *s = (float)sum;
}

void hachi_vec_dot_f16_ref(int64_t n, float *s, const void *vw, const void *va) {
    const uint16_t *w = vw;
    const float *a = va;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)hachi_f16_to_f32(w[i]) * a[i];
    *s = (float)sum;
}

void hachi_vec_dot_bf16_ref(int64_t n, float *s, const void *vw, const void *va) {
    const uint16_t *w = vw;
    const float *a = va;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)hachi_bf16_to_f32(w[i]) * a[i];
    *s = (float)sum;
}

/* ---- 32-element blocks against q8_0 activations ---- */

void hachi_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *vw, const void *va) {
    const block_q4_0 *w = vw;
    const block_q8_0 *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)   /* qs[j]: element j low nibble, j+16 high nibble */
            sumi += ((w[i].qs[j] & 0xF) - 8) * a[i].qs[j] + ((w[i].qs[j] >> 4) - 8) * a[i].qs[j + 16];
        sum += (float)sumi * (hachi_f16_to_f32(w[i].d) * hachi_f16_to_f32(a[i].d));
    }
    *s = sum;
}

/* 8 interleaved q4_0 rows: per block the exact integer sum(q*y) - 8*sum(y) (q the unsigned
 * nibble), then acc = fma(dw*da, that, acc) in block order: the order every ISA keeps. */
void hachi_vec_dot_x8_q4_0_q8_0_ref(int64_t n, float *s, const void *vw, const void *va, size_t stride, int na) {
    const block_q4_0x8 *w = vw;
    for (int t = 0; t < na; t++) {
        const block_q8_0 *a = (const block_q8_0 *)((const char *)va + (size_t)t * stride);
        for (int j = 0; j < 8; j++) {
            float acc = 0;
            for (int64_t b = 0; b < n / QK8_0; b++) {
                int sumi = 0, suma = 0;
                for (int c = 0; c < 4; c++)
                    for (int k = 0; k < 4; k++) {
                        const int q = w[b].qs[32 * c + 4 * j + k];
                        sumi += (q & 0xF) * a[b].qs[4 * c + k] + (q >> 4) * a[b].qs[16 + 4 * c + k];
                    }
                for (int e = 0; e < QK8_0; e++) suma += a[b].qs[e];
                const float sc = hachi_f16_to_f32(w[b].d[j]) * hachi_f16_to_f32(a[b].d);
                acc = fmaf(sc, (float)(sumi - 8 * suma), acc);
            }
            s[8 * t + j] = acc;
        }
    }
}

/* x = q*d + m: dot = d*da*sum(q*qa) + m*da*sum(qa) */
void hachi_vec_dot_q4_1_q8_0_ref(int64_t n, float *s, const void *vw, const void *va) {
    const block_q4_1 *w = vw;
    const block_q8_0 *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0, suma = 0;
        for (int j = 0; j < 16; j++) {
            sumi += (w[i].qs[j] & 0xF) * a[i].qs[j] + (w[i].qs[j] >> 4) * a[i].qs[j + 16];
            suma += a[i].qs[j] + a[i].qs[j + 16];
        }
        const float da = hachi_f16_to_f32(a[i].d);
        sum += (float)sumi * (hachi_f16_to_f32(w[i].d) * da) + (float)suma * (hachi_f16_to_f32(w[i].m) * da);
    }
    *s = sum;
}

void hachi_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *vw, const void *va) {
    const block_q5_0 *w = vw;
    const block_q8_0 *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        uint32_t qh;
        memcpy(&qh, w[i].qh, 4);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            const int x0 = ((w[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4)) - 16;
            const int x1 = ((w[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4)) - 16;
            sumi += x0 * a[i].qs[j] + x1 * a[i].qs[j + 16];
        }
        sum += (float)sumi * (hachi_f16_to_f32(w[i].d) * hachi_f16_to_f32(a[i].d));
    }
    *s = sum;
}

void hachi_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *vw, const void *va) {
    const block_q8_0 *w = vw;
    const block_q8_0 *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += w[i].qs[j] * a[i].qs[j];
        sum += (float)sumi * (hachi_f16_to_f32(w[i].d) * hachi_f16_to_f32(a[i].d));
    }
    *s = sum;
}

/* 8 interleaved q8_0 rows: per block the exact integer sum(u*y) - 128*sum(y) (u the stored
 * unsigned byte, q + 128), then acc = fma(dw*da, that, acc) in block order, as for q4_0. */
void hachi_vec_dot_x8_q8_0_q8_0_ref(int64_t n, float *s, const void *vw, const void *va, size_t stride, int na) {
    const block_q8_0x8 *w = vw;
    for (int t = 0; t < na; t++) {
        const block_q8_0 *a = (const block_q8_0 *)((const char *)va + (size_t)t * stride);
        for (int j = 0; j < 8; j++) {
            float acc = 0;
            for (int64_t b = 0; b < n / QK8_0; b++) {
                int sumi = 0, suma = 0;
                for (int e = 0; e < QK8_0; e++) {
                    sumi += w[b].qs[32 * (e / 4) + 4 * j + e % 4] * a[b].qs[e];
                    suma += a[b].qs[e];
                }
                const float sc = hachi_f16_to_f32(w[b].d[j]) * hachi_f16_to_f32(a[b].d);
                acc = fmaf(sc, (float)(sumi - 128 * suma), acc);
            }
            s[8 * t + j] = acc;
        }
    }
}

/* ---- K-quants against q8_K activations ---- */

/* x = d*sc*q - dmin*m per sub-block of 32: dot = da*(d*sum(sc*q*qa) - dmin*sum(m*bsum)) */
void hachi_vec_dot_q4_K_q8_K_ref(int64_t n, float *s, const void *vw, const void *va) {
    const block_q4_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0, summ = 0;
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = w[i].qs + 32 * c;
            const int8_t *qa = a[i].qs + 64 * c;
            uint8_t s0, m0, s1, m1;
            hachi_q4k_scale_min(2 * c, w[i].scales, &s0, &m0);
            hachi_q4k_scale_min(2 * c + 1, w[i].scales, &s1, &m1);
            int d0 = 0, d1 = 0;
            for (int l = 0; l < 32; l++) {
                d0 += (q[l] & 0xF) * qa[l];
                d1 += (q[l] >> 4) * qa[l + 32];
            }
            sumi += s0 * d0 + s1 * d1;
            summ += m0 * (a[i].bsums[4 * c] + a[i].bsums[4 * c + 1]) + m1 * (a[i].bsums[4 * c + 2] + a[i].bsums[4 * c + 3]);
        }
        sum += a[i].d * (hachi_f16_to_f32(w[i].d) * (float)sumi - hachi_f16_to_f32(w[i].dmin) * (float)summ);
    }
    *s = sum;
}

/* 8 interleaved q4_K rows (block_q4_Kx8): per block the exact integers sumi = sum_j sc[j] *
 * sum(q*qa over sub-block j) and summ = sum_j m[j] * (bsums[2j] + bsums[2j+1]), then
 * acc = fma(d*da, sumi, acc), acc = fma(-(dmin*da), summ, acc) in block order: the order
 * every ISA keeps. */
/* bsz: bytes per block (block_q4_Kx8 or block_q5_Kx8); high: the values' 5th bit from qh */
static void x8_kquant_ref(int64_t n, float *s, const char *w, size_t bsz, bool high, const void *va, size_t stride,
                          int na) {
    for (int t = 0; t < na; t++) {
        const block_q8_K *a = (const block_q8_K *)((const char *)va + (size_t)t * stride);
        for (int r = 0; r < 8; r++) {
            float acc = 0;
            for (int64_t b = 0; b < n / QK_K; b++) {
                const block_q4_Kx8 *k = (const block_q4_Kx8 *)(const void *)(w + (size_t)b * bsz);
                const uint8_t *qh = (const uint8_t *)k + offsetof(block_q5_Kx8, qh) + 4 * r;
                uint8_t sc8[K_SCALE_SIZE];
                for (int i = 0; i < K_SCALE_SIZE; i++) sc8[i] = k->scales[i][r];
                int sumi = 0, summ = 0;
                for (int j = 0; j < 8; j++) {
                    uint8_t sc, m;
                    hachi_q4k_scale_min(j, sc8, &sc, &m);
                    const uint8_t *q = k->qs + 256 * (j / 2) + 4 * r;
                    const int8_t *qa = a[b].qs + 32 * j;
                    const int shift = 4 * (j % 2);
                    int dj = 0;
                    for (int c = 0; c < 8; c++)
                        for (int e = 0; e < 4; e++)
                            dj += (((q[32 * c + e] >> shift) & 0xF) | (high ? ((qh[32 * c + e] >> j) & 1) << 4 : 0)) *
                                  qa[4 * c + e];
                    sumi += sc * dj;
                    summ += m * (a[b].bsums[2 * j] + a[b].bsums[2 * j + 1]);
                }
                const float dd = hachi_f16_to_f32(k->d[r]) * a[b].d;
                const float dm = hachi_f16_to_f32(k->dmin[r]) * a[b].d;
                acc = fmaf(dd, (float)sumi, acc);
                acc = fmaf(-dm, (float)summ, acc);
            }
            s[8 * t + r] = acc;
        }
    }
}
void hachi_vec_dot_x8_q4_K_q8_K_ref(int64_t n, float *s, const void *vw, const void *va, size_t stride, int na) {
    x8_kquant_ref(n, s, vw, sizeof(block_q4_Kx8), false, va, stride, na);
}
/* q5_K: the same with the high bit of each value from qh (bit j at the nibble's place) */
void hachi_vec_dot_x8_q5_K_q8_K_ref(int64_t n, float *s, const void *vw, const void *va, size_t stride, int na) {
    x8_kquant_ref(n, s, vw, sizeof(block_q5_Kx8), true, va, stride, na);
}

void hachi_vec_dot_q5_K_q8_K_ref(int64_t n, float *s, const void *vw, const void *va) {
    const block_q5_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0, summ = 0;
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = w[i].qs + 32 * c, *qh = w[i].qh;
            const int8_t *qa = a[i].qs + 64 * c;
            uint8_t s0, m0, s1, m1;
            hachi_q4k_scale_min(2 * c, w[i].scales, &s0, &m0);
            hachi_q4k_scale_min(2 * c + 1, w[i].scales, &s1, &m1);
            int d0 = 0, d1 = 0;
            for (int l = 0; l < 32; l++) {
                d0 += ((q[l] & 0xF) | (((qh[l] >> (2 * c)) & 1) << 4)) * qa[l];
                d1 += ((q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4)) * qa[l + 32];
            }
            sumi += s0 * d0 + s1 * d1;
            summ += m0 * (a[i].bsums[4 * c] + a[i].bsums[4 * c + 1]) + m1 * (a[i].bsums[4 * c + 2] + a[i].bsums[4 * c + 3]);
        }
        sum += a[i].d * (hachi_f16_to_f32(w[i].d) * (float)sumi - hachi_f16_to_f32(w[i].dmin) * (float)summ);
    }
    *s = sum;
}

void hachi_vec_dot_q6_K_q8_K_ref(int64_t n, float *s, const void *vw, const void *va) {
    const block_q6_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w[i].ql + 64 * h, *qh = w[i].qh + 32 * h;
            const int8_t *sc = w[i].scales + 8 * h, *qa = a[i].qs + 128 * h;
            for (int g = 0; g < 2; g++) {          /* l in [16g, 16g+16): scale index g */
                int d0 = 0, d1 = 0, d2 = 0, d3 = 0;
                for (int l = 16 * g; l < 16 * g + 16; l++) {
                    d0 += (((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32) * qa[l];
                    d1 += (((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32) * qa[l + 32];
                    d2 += (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32) * qa[l + 64];
                    d3 += (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32) * qa[l + 96];
                }
                sumi += sc[g] * d0 + sc[g + 2] * d1 + sc[g + 4] * d2 + sc[g + 6] * d3;
            }
        }
        sum += a[i].d * hachi_f16_to_f32(w[i].d) * (float)sumi;
    }
    *s = sum;
}

/* 8 interleaved q6_K rows: per block the exact integer sum over the 16 sub-blocks j of
 * sc_j * (sum(v*y) - 32*bsum_j) (v the unsigned 6-bit value), then acc = fma(dw*da, that, acc)
 * in block order: the order every ISA keeps. */
void hachi_vec_dot_x8_q6_K_q8_K_ref(int64_t n, float *s, const void *vw, const void *va, size_t stride, int na) {
    const block_q6_Kx8 *w = vw;
    for (int t = 0; t < na; t++) {
        const block_q8_K *a = (const block_q8_K *)((const char *)va + (size_t)t * stride);
        for (int r = 0; r < 8; r++) {
            float acc = 0;
            for (int64_t b = 0; b < n / QK_K; b++) {
                int sumi = 0;
                for (int j = 0; j < QK_K / 16; j++) {
                    const int u = j / 2, sb = j % 2;
                    int dot = 0;
                    for (int c = 0; c < 4; c++)
                        for (int k = 0; k < 4; k++) {
                            const int v = (w[b].ql[128 * u + 32 * c + 4 * r + k] >> (4 * sb) & 0xF) |
                                          (w[b].qh[64 * u + 32 * sb + 4 * r + k] >> (2 * c) & 3) << 4;
                            dot += v * a[b].qs[16 * j + 4 * c + k];
                        }
                    sumi += w[b].scales[j][r] * (dot - 32 * a[b].bsums[j]);
                }
                acc = fmaf(hachi_f16_to_f32(w[b].d[r]) * a[b].d, (float)sumi, acc);
            }
            s[8 * t + r] = acc;
        }
    }
}

/* ---- multi-row: the reference just loops the single dot ---- */

LOOP_MULTI(multi_f32, hachi_vec_dot_f32_ref)
LOOP_MULTI(multi_f16, hachi_vec_dot_f16_ref)
LOOP_MULTI(multi_bf16, hachi_vec_dot_bf16_ref)
LOOP_MULTI(multi_q4_0, hachi_vec_dot_q4_0_q8_0_ref)
LOOP_MULTI(multi_q4_1, hachi_vec_dot_q4_1_q8_0_ref)
LOOP_MULTI(multi_q5_0, hachi_vec_dot_q5_0_q8_0_ref)
LOOP_MULTI(multi_q8_0, hachi_vec_dot_q8_0_q8_0_ref)
LOOP_MULTI(multi_q4_K, hachi_vec_dot_q4_K_q8_K_ref)
LOOP_MULTI(multi_q5_K, hachi_vec_dot_q5_K_q8_K_ref)
LOOP_MULTI(multi_q6_K, hachi_vec_dot_q6_K_q8_K_ref)

/* ---- conversions and attention over an fp16 or int8 KV cache ---- */

static void copy_f32(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }
static void copy_from_f32(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

void hachi_f32_to_f16_ref(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = hachi_f32_to_f16(x[i]);
}

void hachi_f16_to_f32_ref(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = hachi_f16_to_f32(x[i]);
}

void hachi_dot_f16_multi_ref(int64_t n, float *s, const uint16_t *k, const float *q, int64_t q_stride, int m) {
    for (int j = 0; j < m; j++) {
        const float *qj = q + j * q_stride;
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += (double)hachi_f16_to_f32(k[i]) * qj[i];
        s[j] = (float)sum;
    }
}

void hachi_axpy_f16_multi_ref(int64_t n, const float *a, const uint16_t *v, float *y, int64_t y_stride, int m) {
    for (int j = 0; j < m; j++) {
        float *yj = y + j * y_stride;
        for (int64_t i = 0; i < n; i++) yj[i] += a[j] * hachi_f16_to_f32(v[i]);
    }
}

ATTN_ROWS_FROM(attn_scores_f16_ref, attn_values_f16_ref, hachi_dot_f16_multi_ref, hachi_axpy_f16_multi_ref)

/* int8 KV rows: an integer dot, then its query head's scale and the key's */
static void attn_scores_i8_ref(int64_t hd, int nk, const int8_t *k, int64_t ks, const float *kscale, int64_t kss,
                               const hachi_query_i8 *q, int G, float *s) {
    for (int j = 0; j < nk; j++) {
        const int8_t *kr = k + (size_t)j * ks;
        for (int h = 0; h < G; h++) {
            const int8_t *qh = q->q8 + (size_t)h * hd;
            int32_t sum = 0;
            for (int64_t d = 0; d < hd; d++) sum += (int32_t)kr[d] * qh[d];
            s[(size_t)j * G + h] = (float)sum * q->qs[h] * kscale[(size_t)j * kss];
        }
    }
}

/* round(x / scale), halves away from zero, clamped to +-127 (NaN to -127): the quotient clamped
 * first (the bounds are whole), truncated, and its fraction (exact) rounded. The same values as
 * fminf(fmaxf(roundf(x / scale), -127), 127) (all 2.3 G floats of [-128, 128] and 100 M random
 * pairs compared), 5x faster than those libm calls. */
static int8_t quant_i8(float x, float scale) {
    float y = x / scale;
    y = y > -127.0f ? y : -127.0f;
    y = y < 127.0f ? y : 127.0f;
    const float f = y - (float)(int)y;
    return (int8_t)((int)y + (f >= 0.5f) - (f <= -0.5f));
}

void hachi_quant_rows_i8_ref(const float *x, int rows, int64_t n, int8_t *q, float *scale) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n;
        int8_t *qr = q + (size_t)r * n;
        float mx = 0.0f;
        for (int64_t i = 0; i < n; i++) mx = HACHI_MAX(fabsf(xr[i]), mx);   /* a NaN passed over (it becomes -127) */
        const float s = mx / 127.0f;
        scale[r] = s;
        for (int64_t i = 0; i < n; i++) qr[i] = s > 0.0f ? quant_i8(xr[i], s) : 0;
    }
}

/* kernels.h's int8 values */
void hachi_attn_vmax_i8_ref(int nk, const float *vs, int64_t ss, const float *p, int G, float *m) {
    for (int j = 0; j < nk; j++)
        for (int h = 0; h < G; h++) m[h] = fmaxf(m[h], p[(size_t)j * G + h] * vs[(size_t)j * ss]);
}

void hachi_attn_values_i8_ref(int64_t hd, int nk, const int8_t *v, int64_t vs, const float *sc, int64_t ss,
                              const float *p, int G, const float *r, int32_t *acc, bool first) {
    int16_t wq[HACHI_VQ_KEYS];
    for (int h = 0; h < G; h++) {
        for (int j = 0; j < nk; j++) wq[j] = (int16_t)rintf(p[(size_t)j * G + h] * sc[(size_t)j * ss] * r[h]);
        int32_t *a = acc + (size_t)h * hd;
        for (int64_t d = 0; d < hd; d++) {
            int32_t sum = first ? 0 : a[d];
            for (int j = 0; j < nk; j++) sum += wq[j] * v[(size_t)j * vs + d];
            a[d] = sum;
        }
    }
}

void hachi_attn_flush_i8_ref(int64_t hd, int G, const int32_t *acc, const float *u, float *out) {
    for (int h = 0; h < G; h++)
        for (int64_t d = 0; d < hd; d++) out[h * hd + d] = fmaf((float)acc[h * hd + d], u[h], out[h * hd + d]);
}

/* kernels.h's int8 rows for many queries: the packs are the rows as they are */
static void attn_i8_pack_ref(int64_t hd, int n, const int8_t *x, int8_t *pack) { memcpy(pack, x, (size_t)n * hd); }

static void attn_i8_dots_ref(int64_t hd, int nk, const int8_t *k, int64_t k_stride, int nq, const int8_t *pack,
                             int32_t *d) {
    for (int j = 0; j < nk; j++)
        for (int i = 0; i < nq; i++) {
            const int8_t *kr = k + (size_t)j * k_stride, *qr = pack + (size_t)i * hd;
            int32_t sum = 0;
            for (int64_t e = 0; e < hd; e++) sum += (int32_t)kr[e] * qr[e];
            d[(size_t)j * nq + i] = sum;
        }
}

static void attn_i8_wsums_ref(int64_t hd, int nk, int nq, const uint8_t *whi, const uint8_t *wlo, const int8_t *pack,
                              int32_t *S) {
    for (int i = 0; i < nq; i++)
        for (int64_t e = 0; e < hd; e++) {
            int32_t sum = 0;
            for (int j = 0; j < nk; j++)
                sum += (128 * whi[(size_t)i * nk + j] + wlo[(size_t)i * nk + j]) * pack[(size_t)j * hd + e];
            S[(size_t)i * hd + e] = sum;
        }
}

void hachi_attn_i8_weights_ref(int n, int G, const float *p, const float *vs, const float *r, uint8_t *hi, uint8_t *lo,
                               size_t ld) {
    for (int j = 0; j < n; j++)
        for (int h = 0; h < G; h++) {
            const int w = (int)rintf(p[(size_t)j * G + h] * vs[j] * r[h]);
            hi[(size_t)h * ld + j] = (uint8_t)(w >> 7);
            lo[(size_t)h * ld + j] = (uint8_t)(w & 127);
        }
}

void hachi_attn_softmax_ref(float *x, int n, int G, float scale, float *mx, float *sum) {
    for (int h = 0; h < G; h++) sum[h] = 0.0f;
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

/* Gemma's GELU (tanh form) times the up projection, and the logit softcap, with libm's tanhf */
static void gelu_mul_ref(int64_t n, float *x, const float *g) {
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v))) * g[i];
    }
}

static void softcap_ref(int64_t n, float *x, float cap) {
    const float ic = 1.0f / cap;
    for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] * ic);
}

#define T_ENTRY(vdt, tof, fromf, dot, multi) \
    {.vec_dot_type = (vdt), .to_float = (tof), .from_float = (fromf), .vec_dot = (dot), .vec_dot_multi = (multi)}
static const hachi_kernels ref_table = {
    .t = {
        [HACHI_TYPE_F32]  = T_ENTRY(HACHI_TYPE_F32, copy_f32, copy_from_f32, hachi_vec_dot_f32_ref, multi_f32),
        [HACHI_TYPE_F16]  = T_ENTRY(HACHI_TYPE_F32, hachi_dequantize_row_f16, hachi_quantize_row_f16_ref, hachi_vec_dot_f16_ref, multi_f16),
        [HACHI_TYPE_BF16] = T_ENTRY(HACHI_TYPE_F32, hachi_dequantize_row_bf16, hachi_quantize_row_bf16_ref, hachi_vec_dot_bf16_ref, multi_bf16),
        [HACHI_TYPE_Q4_0] = {.vec_dot_type = HACHI_TYPE_Q8_0, .to_float = hachi_dequantize_row_q4_0,
                             .from_float = hachi_quantize_row_q4_0_ref, .vec_dot = hachi_vec_dot_q4_0_q8_0_ref,
                             .vec_dot_multi = multi_q4_0, .vec_dot_x8 = hachi_vec_dot_x8_q4_0_q8_0_ref},
        [HACHI_TYPE_Q4_1] = T_ENTRY(HACHI_TYPE_Q8_0, hachi_dequantize_row_q4_1, hachi_quantize_row_q4_1_ref, hachi_vec_dot_q4_1_q8_0_ref, multi_q4_1),
        [HACHI_TYPE_Q5_0] = T_ENTRY(HACHI_TYPE_Q8_0, hachi_dequantize_row_q5_0, hachi_quantize_row_q5_0_ref, hachi_vec_dot_q5_0_q8_0_ref, multi_q5_0),
        [HACHI_TYPE_Q8_0] = {.vec_dot_type = HACHI_TYPE_Q8_0, .to_float = hachi_dequantize_row_q8_0,
                             .from_float = hachi_quantize_row_q8_0_ref, .vec_dot = hachi_vec_dot_q8_0_q8_0_ref,
                             .vec_dot_multi = multi_q8_0, .vec_dot_x8 = hachi_vec_dot_x8_q8_0_q8_0_ref},
        [HACHI_TYPE_Q4_K] = {.vec_dot_type = HACHI_TYPE_Q8_K, .to_float = hachi_dequantize_row_q4_K,
                             .from_float = hachi_quantize_row_q4_K_ref, .vec_dot = hachi_vec_dot_q4_K_q8_K_ref,
                             .vec_dot_multi = multi_q4_K, .vec_dot_x8 = hachi_vec_dot_x8_q4_K_q8_K_ref},
        [HACHI_TYPE_Q5_K] = {.vec_dot_type = HACHI_TYPE_Q8_K, .to_float = hachi_dequantize_row_q5_K,
                             .from_float = hachi_quantize_row_q5_K_ref, .vec_dot = hachi_vec_dot_q5_K_q8_K_ref,
                             .vec_dot_multi = multi_q5_K, .vec_dot_x8 = hachi_vec_dot_x8_q5_K_q8_K_ref},
        [HACHI_TYPE_Q6_K] = {.vec_dot_type = HACHI_TYPE_Q8_K, .to_float = hachi_dequantize_row_q6_K,
                             .from_float = hachi_quantize_row_q6_K_ref, .vec_dot = hachi_vec_dot_q6_K_q8_K_ref,
                             .vec_dot_multi = multi_q6_K, .vec_dot_x8 = hachi_vec_dot_x8_q6_K_q8_K_ref},
        [HACHI_TYPE_Q8_K] = T_ENTRY(HACHI_TYPE_Q8_K, hachi_dequantize_row_q8_K, hachi_quantize_row_q8_K_ref, NULL, NULL),
    },
    .f32_to_f16 = hachi_f32_to_f16_ref,
    .f16_to_f32 = hachi_f16_to_f32_ref,
    .dot_f16_multi = hachi_dot_f16_multi_ref,
    .axpy_f16_multi = hachi_axpy_f16_multi_ref,
    .attn_scores_f16 = attn_scores_f16_ref,
    .attn_values_f16 = attn_values_f16_ref,
    .attn_scores_i8 = attn_scores_i8_ref,
    .attn_vmax_i8 = hachi_attn_vmax_i8_ref,
    .attn_values_i8 = hachi_attn_values_i8_ref,
    .attn_flush_i8 = hachi_attn_flush_i8_ref,
    .attn_i8_sets = 6,
    .attn_i8_qpack = attn_i8_pack_ref,
    .attn_i8_dots = attn_i8_dots_ref,
    .attn_i8_vpack = attn_i8_pack_ref,
    .attn_i8_wsums = attn_i8_wsums_ref,
    .attn_i8_weights = hachi_attn_i8_weights_ref,
    .quant_rows_i8 = hachi_quant_rows_i8_ref,
    .attn_softmax = hachi_attn_softmax_ref,
    .gelu_mul = gelu_mul_ref,
    .softcap = softcap_ref,
};

void hachi_kernels_fill_ref(hachi_kernels *t) { *t = ref_table; }
