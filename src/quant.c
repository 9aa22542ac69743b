/* quant: the type traits table (ggml type ids, block sizes, names) and the reference
 * row (de)quantizers of every runnable type, byte-exact with ggml. Cold path: used when
 * converting activations in the ref ISA, in tests, and when writing files. */
#include "quant.h"
#include <math.h>
#include <string.h>
#include <strings.h>
#include "util.h"

static const hachi_type_traits traits[HACHI_TYPE_COUNT] = {
    [HACHI_TYPE_F32]     = {"f32", 1, 4, true},
    [HACHI_TYPE_F16]     = {"f16", 1, 2, true},
    [HACHI_TYPE_Q4_0]    = {"q4_0", QK4_0, sizeof(block_q4_0), true},
    [HACHI_TYPE_Q4_1]    = {"q4_1", QK4_1, sizeof(block_q4_1), true},
    [HACHI_TYPE_Q5_0]    = {"q5_0", QK5_0, sizeof(block_q5_0), true},
    [HACHI_TYPE_Q5_1]    = {"q5_1", 32, 24, false},
    [HACHI_TYPE_Q8_0]    = {"q8_0", QK8_0, sizeof(block_q8_0), true},
    [HACHI_TYPE_Q8_1]    = {"q8_1", 32, sizeof(block_q8_1), false},
    [HACHI_TYPE_Q2_K]    = {"q2_K", QK_K, 84, false},
    [HACHI_TYPE_Q3_K]    = {"q3_K", QK_K, 110, false},
    [HACHI_TYPE_Q4_K]    = {"q4_K", QK_K, sizeof(block_q4_K), true},
    [HACHI_TYPE_Q5_K]    = {"q5_K", QK_K, sizeof(block_q5_K), true},
    [HACHI_TYPE_Q6_K]    = {"q6_K", QK_K, sizeof(block_q6_K), true},
    [HACHI_TYPE_Q8_K]    = {"q8_K", QK_K, sizeof(block_q8_K), false},
    [HACHI_TYPE_IQ2_XXS] = {"iq2_xxs", QK_K, 66, false},
    [HACHI_TYPE_IQ2_XS]  = {"iq2_xs", QK_K, 74, false},
    [HACHI_TYPE_IQ3_XXS] = {"iq3_xxs", QK_K, 98, false},
    [HACHI_TYPE_IQ1_S]   = {"iq1_s", QK_K, 50, false},
    [HACHI_TYPE_IQ4_NL]  = {"iq4_nl", 32, 18, false},
    [HACHI_TYPE_IQ3_S]   = {"iq3_s", QK_K, 110, false},
    [HACHI_TYPE_IQ2_S]   = {"iq2_s", QK_K, 82, false},
    [HACHI_TYPE_IQ4_XS]  = {"iq4_xs", QK_K, 136, false},
    [HACHI_TYPE_I8]      = {"i8", 1, 1, false},
    [HACHI_TYPE_I16]     = {"i16", 1, 2, false},
    [HACHI_TYPE_I32]     = {"i32", 1, 4, false},
    [HACHI_TYPE_I64]     = {"i64", 1, 8, false},
    [HACHI_TYPE_F64]     = {"f64", 1, 8, false},
    [HACHI_TYPE_IQ1_M]   = {"iq1_m", QK_K, 56, false},
    [HACHI_TYPE_BF16]    = {"bf16", 1, 2, true},
    [HACHI_TYPE_TQ1_0]   = {"tq1_0", QK_K, 54, false},
    [HACHI_TYPE_TQ2_0]   = {"tq2_0", QK_K, 66, false},
    [HACHI_TYPE_MXFP4]   = {"mxfp4", 32, 17, false},
};

const hachi_type_traits *hachi_type_info(uint32_t type) {
    return type < HACHI_TYPE_COUNT && traits[type].name ? &traits[type] : NULL;
}

const char *hachi_type_name(uint32_t type) {
    const hachi_type_traits *t = hachi_type_info(type);
    return t ? t->name : "unknown";
}

int hachi_type_from_name(const char *name) {
    for (int i = 0; i < HACHI_TYPE_COUNT; i++)
        if (traits[i].name && !strcasecmp(traits[i].name, name)) return i;
    return -1;
}

uint64_t hachi_row_size(uint32_t type, int64_t n) {
    const hachi_type_traits *t = hachi_type_info(type);
    if (!t || n < 0 || n % t->blck_size) return 0;
    return (uint64_t)(n / t->blck_size) * (uint64_t)t->type_size;
}

/* ------------------------------------------------------------------------------------
 * Reference (de)quantization. Layout facts (ggml-common.h):
 *  - q4_0/q4_1/q5_0: byte qs[j] holds element j in its low nibble and element j+16 in
 *    its high nibble (not j, j+1); q5_0's 5th bit of element e is bit e of qh (LE u32).
 *  - q4_K/q5_K: a super-block of 256 = 4 chunks of 64; chunk c's 32 bytes qs[32c..]
 *    hold sub-block 2c in the low nibbles and sub-block 2c+1 in the high nibbles;
 *    q5_K's 5th bits: qh[l] bit 2c for sub-block 2c, bit 2c+1 for sub-block 2c+1.
 *    scales[12]: sub-blocks 0..3 keep scale/min in the low 6 bits of bytes 0..3 / 4..7;
 *    sub-blocks 4..7 keep their low 4 bits in bytes 8..11 (scale low, min high nibble)
 *    and their top 2 bits in the top 2 bits of bytes 0..3 (scale) / 4..7 (min).
 *  - q6_K: two halves of 128; in half h, element l (l < 32) of each quarter q = 0..3
 *    has low 4 bits in ql[64h + l + 32*(q&1)] (low nibble for q < 2, high for q >= 2)
 *    and high 2 bits in qh[32h + l] bits 2q..2q+1; sub-block of 16 has an int8 scale.
 * ------------------------------------------------------------------------------------ */
/* round to nearest, ties to even, for |f| < 2^22 (ggml's nearest_int) */
static inline int nearest_int(float f) {
    float v = f + 12582912.f;
    int i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

void hachi_quantize_row_f16_ref(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = hachi_f32_to_f16(x[i]);
}

void hachi_quantize_row_bf16_ref(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = hachi_f32_to_bf16(x[i]);
}

void hachi_dequantize_row_f16(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = hachi_f16_to_f32(x[i]);
}

void hachi_dequantize_row_bf16(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = hachi_bf16_to_f32(x[i]);
}

/* signed value of largest magnitude, and that magnitude */
static float signed_absmax(const float *x, int n, float *amax_out) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
    *amax_out = amax;
    return max;
}

void hachi_quantize_row_q4_0_ref(const float *x, void *vy, int64_t n) {
    block_q4_0 *y = vy;
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        float amax, max = signed_absmax(x, QK4_0, &amax);
        const float d = max / -8, id = d ? 1.0f / d : 0.0f;
        y[i].d = hachi_f32_to_f16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const uint8_t a = (uint8_t)HACHI_MIN(15, (int8_t)(x[j] * id + 8.5f));
            const uint8_t b = (uint8_t)HACHI_MIN(15, (int8_t)(x[j + 16] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}

void hachi_dequantize_row_q4_0(const void *vx, float *y, int64_t n) {
    const block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / QK4_0; i++, y += QK4_0) {
        const float d = hachi_f16_to_f32(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((x[i].qs[j] & 0xF) - 8) * d;
            y[j + 16] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* The interleaved layouts move 4 bytes at a time (+ 128 on q8_0 is ^ 0x80 a byte); the loops
 * over them are unrolled: not unrolled (gcc -O2), Q4_0's took 6.9 instructions a byte on ARM */
static uint32_t rd32(const void *p) { uint32_t x; memcpy(&x, p, 4); return x; }
static void wr32(void *p, uint32_t x) { memcpy(p, &x, 4); }
#define UNROLL_ALL _Pragma("GCC unroll 8")

void hachi_repack_q4_0_x8(const void *rows, uint64_t row_bytes, void *dst, int64_t n) {
    block_q4_0x8 *y = dst;
    for (int64_t b = 0; b < n / QK4_0; b++)
        for (int j = 0; j < 8; j++) {
            const block_q4_0 *x = (const block_q4_0 *)((const char *)rows + j * row_bytes) + b;
            y[b].d[j] = x->d;
            UNROLL_ALL for (int c = 0; c < 4; c++) wr32(y[b].qs + 32 * c + 4 * j, rd32(x->qs + 4 * c));
        }
}

void hachi_unpack_q4_0_x8(const void *src, int j, void *row, int64_t n) {
    const block_q4_0x8 *x = src;
    block_q4_0 *y = row;
    for (int64_t b = 0; b < n / QK4_0; b++) {
        y[b].d = x[b].d[j];
        UNROLL_ALL for (int c = 0; c < 4; c++) wr32(y[b].qs + 4 * c, rd32(x[b].qs + 32 * c + 4 * j));
    }
}

void hachi_repack_q8_0_x8(const void *rows, uint64_t row_bytes, void *dst, int64_t n) {
    block_q8_0x8 *y = dst;
    for (int64_t b = 0; b < n / QK8_0; b++)
        for (int j = 0; j < 8; j++) {
            const block_q8_0 *x = (const block_q8_0 *)((const char *)rows + j * row_bytes) + b;
            y[b].d[j] = x->d;
            UNROLL_ALL for (int c = 0; c < 8; c++) wr32(y[b].qs + 32 * c + 4 * j, rd32(x->qs + 4 * c) ^ 0x80808080u);
        }
}

void hachi_unpack_q8_0_x8(const void *src, int j, void *row, int64_t n) {
    const block_q8_0x8 *x = src;
    block_q8_0 *y = row;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        y[b].d = x[b].d[j];
        UNROLL_ALL for (int c = 0; c < 8; c++) wr32(y[b].qs + 4 * c, rd32(x[b].qs + 32 * c + 4 * j) ^ 0x80808080u);
    }
}

/* A q6_K block's 256 6-bit values in element order, from and into its ql / qh bytes (the
 * dequantizer's order: in half h = e / 128, quarter q = e / 32 % 4 and l = e % 32, the nibble
 * of ql[64h + l + 32(q & 1)] that q & 2 picks, and bits 2q, 2q + 1 of qh[32h + l]); 8 bytes
 * at a time, a mask per field */
static uint64_t rd64(const uint8_t *p) { uint64_t x; memcpy(&x, p, 8); return x; }
static void wr64(uint8_t *p, uint64_t x) { memcpy(p, &x, 8); }
#define B8(x) (0x0101010101010101ull * (x))
#define B4(x) (0x01010101u * (x))

static void q6k_values(const block_q6_K *x, uint8_t *v) {
    for (int h = 0; h < 2; h++)
        UNROLL_ALL for (int l = 0; l < 32; l += 8) {
            const uint64_t a = rd64(x->ql + 64 * h + l), b = rd64(x->ql + 64 * h + 32 + l), t = rd64(x->qh + 32 * h + l);
            uint8_t *o = v + 128 * h + l;
            wr64(o, (a & B8(0xF)) | (t & B8(3)) << 4);
            wr64(o + 32, (b & B8(0xF)) | (t & B8(0xC)) << 2);
            wr64(o + 64, (a >> 4 & B8(0xF)) | (t & B8(0x30)));
            wr64(o + 96, (b >> 4 & B8(0xF)) | (t >> 2 & B8(0x30)));
        }
}
static void q6k_from_values(const uint8_t *v, block_q6_K *x) {
    for (int h = 0; h < 2; h++)
        UNROLL_ALL for (int l = 0; l < 32; l += 8) {
            const uint8_t *o = v + 128 * h + l;
            const uint64_t e0 = rd64(o), e1 = rd64(o + 32), e2 = rd64(o + 64), e3 = rd64(o + 96);
            wr64(x->ql + 64 * h + l, (e0 & B8(0xF)) | (e2 & B8(0xF)) << 4);
            wr64(x->ql + 64 * h + 32 + l, (e1 & B8(0xF)) | (e3 & B8(0xF)) << 4);
            wr64(x->qh + 32 * h + l, (e0 >> 4 & B8(3)) | (e1 >> 2 & B8(0xC)) | (e2 & B8(0x30)) | (e3 << 2 & B8(0xC0)));
        }
}

/* Row r's values into / out of an interleaved block: element e = 32u + 16s + 4c + k has its
 * nibble in ql[128u + 32c + 4r + k] (low for s 0, high for 1) and its top bits at 2c, 2c + 1
 * of qh[64u + 32s + 4r + k] (x8 kernels, arm_neon.c); 4 bytes (k) at a time */
static void q6kx8_put(block_q6_Kx8 *y, int r, const uint8_t *v) {
    for (int u = 0; u < QK_K / 32; u++) {
        const uint8_t *e = v + 32 * u;
        UNROLL_ALL for (int c = 0; c < 4; c++)
            wr32(y->ql + 128 * u + 32 * c + 4 * r, (rd32(e + 4 * c) & B4(0xF)) | (rd32(e + 16 + 4 * c) & B4(0xF)) << 4);
        UNROLL_ALL for (int s = 0; s < 2; s++) {
            const uint8_t *f = e + 16 * s;
            wr32(y->qh + 64 * u + 32 * s + 4 * r, (rd32(f) >> 4 & B4(3)) | (rd32(f + 4) >> 2 & B4(0xC)) |
                                                      (rd32(f + 8) & B4(0x30)) | (rd32(f + 12) << 2 & B4(0xC0)));
        }
    }
}
static void q6kx8_get(const block_q6_Kx8 *x, int r, uint8_t *v) {
    for (int u = 0; u < QK_K / 32; u++)
        for (int s = 0; s < 2; s++) {
            const uint32_t t = rd32(x->qh + 64 * u + 32 * s + 4 * r);
            UNROLL_ALL for (int c = 0; c < 4; c++)
                wr32(v + 32 * u + 16 * s + 4 * c,
                     (rd32(x->ql + 128 * u + 32 * c + 4 * r) >> (4 * s) & B4(0xF)) | (t >> (2 * c) & B4(3)) << 4);
        }
}

/* through the values, words at a time: a value at a time, by its bit positions, took 64
 * instructions a byte on ARM (most of loading an E2B file, whose output head is Q6_K:
 * bench/RESULTS.md) */
void hachi_repack_q6_K_x8(const void *rows, uint64_t row_bytes, void *dst, int64_t n) {
    block_q6_Kx8 *y = dst;
    uint8_t v[QK_K];
    for (int64_t b = 0; b < n / QK_K; b++)
        for (int r = 0; r < 8; r++) {
            const block_q6_K *x = (const block_q6_K *)((const char *)rows + r * row_bytes) + b;
            y[b].d[r] = x->d;
            for (int j = 0; j < QK_K / 16; j++) y[b].scales[j][r] = x->scales[j];
            q6k_values(x, v);
            q6kx8_put(&y[b], r, v);
        }
}

void hachi_unpack_q6_K_x8(const void *src, int j, void *row, int64_t n) {
    const block_q6_Kx8 *x = src;
    block_q6_K *y = row;
    uint8_t v[QK_K];
    for (int64_t b = 0; b < n / QK_K; b++) {
        y[b].d = x[b].d[j];
        for (int i = 0; i < QK_K / 16; i++) y[b].scales[i] = x[b].scales[i][j];
        q6kx8_get(&x[b], j, v);
        q6k_from_values(v, &y[b]);
    }
}

/* Row r's d, dmin, scales and nibbles (a q4_K or q5_K block's) into / out of block y / x */
static void kx8_put(block_q4_Kx8 *y, int r, hachi_half d, hachi_half dmin, const uint8_t *scales, const uint8_t *qs) {
    y->d[r] = d;
    y->dmin[r] = dmin;
    for (int k = 0; k < K_SCALE_SIZE; k++) y->scales[k][r] = scales[k];
    for (int i = 0; i < 4; i++)
        UNROLL_ALL for (int c = 0; c < 8; c++) wr32(y->qs + 256 * i + 32 * c + 4 * r, rd32(qs + 32 * i + 4 * c));
}
static void kx8_get(const block_q4_Kx8 *x, int r, hachi_half *d, hachi_half *dmin, uint8_t *scales, uint8_t *qs) {
    *d = x->d[r];
    *dmin = x->dmin[r];
    for (int k = 0; k < K_SCALE_SIZE; k++) scales[k] = x->scales[k][r];
    for (int i = 0; i < 4; i++)
        UNROLL_ALL for (int c = 0; c < 8; c++) wr32(qs + 32 * i + 4 * c, rd32(x->qs + 256 * i + 32 * c + 4 * r));
}

void hachi_repack_q4_K_x8(const void *rows, uint64_t row_bytes, void *dst, int64_t n) {
    block_q4_Kx8 *y = dst;
    for (int64_t b = 0; b < n / QK_K; b++)
        for (int r = 0; r < 8; r++) {
            const block_q4_K *x = (const block_q4_K *)((const char *)rows + r * row_bytes) + b;
            kx8_put(&y[b], r, x->d, x->dmin, x->scales, x->qs);
        }
}

void hachi_unpack_q4_K_x8(const void *src, int j, void *row, int64_t n) {
    const block_q4_Kx8 *x = src;
    block_q4_K *y = row;
    for (int64_t b = 0; b < n / QK_K; b++) kx8_get(&x[b], j, &y[b].d, &y[b].dmin, y[b].scales, y[b].qs);
}

void hachi_repack_q5_K_x8(const void *rows, uint64_t row_bytes, void *dst, int64_t n) {
    block_q5_Kx8 *y = dst;
    for (int64_t b = 0; b < n / QK_K; b++)
        for (int r = 0; r < 8; r++) {
            const block_q5_K *x = (const block_q5_K *)((const char *)rows + r * row_bytes) + b;
            kx8_put(&y[b].k, r, x->d, x->dmin, x->scales, x->qs);
            UNROLL_ALL for (int c = 0; c < 8; c++) wr32(y[b].qh + 32 * c + 4 * r, rd32(x->qh + 4 * c));
        }
}

void hachi_unpack_q5_K_x8(const void *src, int j, void *row, int64_t n) {
    const block_q5_Kx8 *x = src;
    block_q5_K *y = row;
    for (int64_t b = 0; b < n / QK_K; b++) {
        kx8_get(&x[b].k, j, &y[b].d, &y[b].dmin, y[b].scales, y[b].qs);
        UNROLL_ALL for (int c = 0; c < 8; c++) wr32(y[b].qh + 4 * c, rd32(x[b].qh + 32 * c + 4 * j));
    }
}

void hachi_quantize_row_q4_1_ref(const float *x, void *vy, int64_t n) {
    block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
        float lo = x[0], hi = x[0];
        for (int j = 1; j < QK4_1; j++) { lo = fminf(lo, x[j]); hi = fmaxf(hi, x[j]); }
        const float d = (hi - lo) / 15, id = d ? 1.0f / d : 0.0f;
        y[i].d = hachi_f32_to_f16(d);
        y[i].m = hachi_f32_to_f16(lo);
        for (int j = 0; j < 16; j++) {
            /* (x - lo) * id >= 0: + 0.5 and truncation round as ggml's quantize_row_q4_1_ref does */
            const uint8_t a = (uint8_t)HACHI_MIN(15, (int8_t)((x[j] - lo) * id + 0.5f));        // NOLINT(bugprone-incorrect-roundings)
            const uint8_t b = (uint8_t)HACHI_MIN(15, (int8_t)((x[j + 16] - lo) * id + 0.5f));   // NOLINT(bugprone-incorrect-roundings)
            y[i].qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}

void hachi_dequantize_row_q4_1(const void *vx, float *y, int64_t n) {
    const block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / QK4_1; i++, y += QK4_1) {
        const float d = hachi_f16_to_f32(x[i].d), m = hachi_f16_to_f32(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(x[i].qs[j] & 0xF) * d + m;
            y[j + 16] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

void hachi_quantize_row_q5_0_ref(const float *x, void *vy, int64_t n) {
    block_q5_0 *y = vy;
    for (int64_t i = 0; i < n / QK5_0; i++, x += QK5_0) {
        float amax, max = signed_absmax(x, QK5_0, &amax);
        const float d = max / -16, id = d ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        y[i].d = hachi_f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            const uint8_t a = (uint8_t)HACHI_MIN(31, (int8_t)(x[j] * id + 16.5f));
            const uint8_t b = (uint8_t)HACHI_MIN(31, (int8_t)(x[j + 16] * id + 16.5f));
            y[i].qs[j] = (uint8_t)((a & 0xF) | ((b & 0xF) << 4));
            qh |= (uint32_t)(a >> 4) << j;
            qh |= (uint32_t)(b >> 4) << (j + 16);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

void hachi_dequantize_row_q5_0(const void *vx, float *y, int64_t n) {
    const block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / QK5_0; i++, y += QK5_0) {
        const float d = hachi_f16_to_f32(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < 16; j++) {
            const int a = (x[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            const int b = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = (float)(a - 16) * d;
            y[j + 16] = (float)(b - 16) * d;
        }
    }
}

void hachi_quantize_row_q8_0_ref(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax;
        signed_absmax(x, QK8_0, &amax);
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        y[i].d = hachi_f32_to_f16(d);
        for (int j = 0; j < QK8_0; j++) {   /* (a NaN product, of a NaN or an infinity, is 0: no cast of a NaN) */
            const float p = x[j] * id;
            y[i].qs[j] = p == p ? (int8_t)roundf(p) : 0;
        }
    }
}

void hachi_dequantize_row_q8_0(const void *vx, float *y, int64_t n) {
    const block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
        const float d = hachi_f16_to_f32(x[i].d);
        for (int j = 0; j < QK8_0; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

void hachi_quantize_row_q8_K_ref(const float *x, void *vy, int64_t n) {
    block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax, max = signed_absmax(x, QK_K, &amax);
        if (amax == 0) { memset(&y[i], 0, sizeof y[i]); continue; }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {   /* (a NaN product is 0, as in q8_0) */
            const float p = iscale * x[j];
            y[i].qs[j] = p == p ? (int8_t)HACHI_MIN(127, nearest_int(p)) : 0;
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

void hachi_dequantize_row_q8_K(const void *vx, float *y, int64_t n) {
    const block_q8_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K)
        for (int j = 0; j < QK_K; j++) y[j] = x[i].d * (float)x[i].qs[j];
}

void hachi_q4k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Fit x ~ scale * L - mn, L in 0..nmax, mn >= 0, for one sub-block of n <= 32: the
 * min/max grid, then 21 slightly stretched grids each refit by least squares; keep
 * the fit of least squared error. Returns scale (>= 0) and *mn. */
static float fit_scale_min(int n, int nmax, const float *x, float *mn) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) { lo = fminf(lo, x[i]); hi = fmaxf(hi, x[i]); }
    if (lo > 0) lo = 0;
    if (hi == lo) { *mn = -lo; return 0; }
    float best_sc = (hi - lo) / (float)nmax, best_lo = lo, best_err = 0;
    for (int i = 0; i < n; i++) {
        const int l = HACHI_MAX(0, HACHI_MIN(nmax, nearest_int((x[i] - lo) / best_sc)));
        const float e = best_sc * (float)l + lo - x[i];
        best_err += e * e;
    }
    uint8_t L[32];
    for (int step = 0; step <= 20; step++) {
        const float is = ((float)nmax - 1.0f + 0.1f * (float)step) / (hi - lo);
        float sl = 0, sl2 = 0, sxl = 0, sx = 0;
        for (int i = 0; i < n; i++) {
            const int l = HACHI_MAX(0, HACHI_MIN(nmax, nearest_int(is * (x[i] - lo))));
            L[i] = (uint8_t)l;
            sl += (float)l; sl2 += (float)(l * l); sxl += (float)l * x[i]; sx += x[i];
        }
        const float D = (float)n * sl2 - sl * sl;
        if (D <= 0) continue;
        float sc = ((float)n * sxl - sx * sl) / D, m0 = (sl2 * sx - sl * sxl) / D;
        if (m0 > 0) { m0 = 0; sc = sxl / sl2; }
        if (!(sc > 0)) continue;
        float err = 0;
        for (int i = 0; i < n; i++) {
            const float e = sc * (float)L[i] + m0 - x[i];
            err += e * e;
        }
        if (err < best_err) { best_err = err; best_sc = sc; best_lo = m0; }
    }
    *mn = -best_lo;
    return best_sc;
}

/* Shared by q4_K (nmax 15) and q5_K (nmax 31): fits the 8 sub-blocks, packs the 6-bit
 * scales/mins, writes d/dmin, and returns the levels in L[256]. */
static void quantize_superblock_k(const float *x, int nmax, hachi_half *d_out, hachi_half *dmin_out,
                                  uint8_t scales[K_SCALE_SIZE], uint8_t L[QK_K]) {
    float sc[8], mn[8], max_sc = 0, max_mn = 0;
    for (int j = 0; j < 8; j++) {
        sc[j] = fit_scale_min(32, nmax, x + 32 * j, &mn[j]);
        max_sc = fmaxf(max_sc, sc[j]);
        max_mn = fmaxf(max_mn, mn[j]);
    }
    const float inv_sc = max_sc > 0 ? 63.f / max_sc : 0.f, inv_mn = max_mn > 0 ? 63.f / max_mn : 0.f;
    memset(scales, 0, K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        const uint8_t ls = (uint8_t)HACHI_MIN(63, nearest_int(inv_sc * sc[j]));
        const uint8_t lm = (uint8_t)HACHI_MIN(63, nearest_int(inv_mn * mn[j]));
        if (j < 4) {
            scales[j] = ls;
            scales[j + 4] = lm;
        } else {
            scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = hachi_f32_to_f16(max_sc / 63.f);
    *dmin_out = hachi_f32_to_f16(max_mn / 63.f);
    const float d = hachi_f16_to_f32(*d_out), dmin = hachi_f16_to_f32(*dmin_out);
    for (int j = 0; j < 8; j++) {
        uint8_t s, m;
        hachi_q4k_scale_min(j, scales, &s, &m);
        const float ds = d * s, dm = dmin * m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = ds ? (uint8_t)HACHI_MAX(0, HACHI_MIN(nmax, nearest_int((x[32 * j + l] + dm) / ds))) : 0;
    }
}

void hachi_quantize_row_q4_K_ref(const float *x, void *vy, int64_t n) {
    block_q4_K *y = vy;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quantize_superblock_k(x, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

void hachi_dequantize_row_q4_K(const void *vx, float *y, int64_t n) {
    const block_q4_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = hachi_f16_to_f32(x[i].d), dmin = hachi_f16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t s0, m0, s1, m1;
            hachi_q4k_scale_min(2 * c, x[i].scales, &s0, &m0);
            hachi_q4k_scale_min(2 * c + 1, x[i].scales, &s1, &m1);
            const float d0 = d * s0, dm0 = dmin * m0, d1 = d * s1, dm1 = dmin * m1;
            for (int l = 0; l < 32; l++) *y++ = d0 * (float)(q[l] & 0xF) - dm0;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] >> 4) - dm1;
        }
    }
}

void hachi_quantize_row_q5_K_ref(const float *x, void *vy, int64_t n) {
    block_q5_K *y = vy;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quantize_superblock_k(x, 31, &y[i].d, &y[i].dmin, y[i].scales, L);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const int a = L[64 * c + l], b = L[64 * c + 32 + l];
                y[i].qs[32 * c + l] = (uint8_t)((a & 0xF) | ((b & 0xF) << 4));
                y[i].qh[l] |= (uint8_t)(((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1)));
            }
    }
}

void hachi_dequantize_row_q5_K(const void *vx, float *y, int64_t n) {
    const block_q5_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = hachi_f16_to_f32(x[i].d), dmin = hachi_f16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs, *qh = x[i].qh;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t s0, m0, s1, m1;
            hachi_q4k_scale_min(2 * c, x[i].scales, &s0, &m0);
            hachi_q4k_scale_min(2 * c + 1, x[i].scales, &s1, &m1);
            const float d0 = d * s0, dm0 = dmin * m0, d1 = d * s1, dm1 = dmin * m1;
            for (int l = 0; l < 32; l++)
                *y++ = d0 * (float)((q[l] & 0xF) | (((qh[l] >> (2 * c)) & 1) << 4)) - dm0;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4)) - dm1;
        }
    }
}

/* Symmetric fit x ~ scale * (L - 32), L in 0..63, for a sub-block of 16: grids around
 * the signed absmax, choosing the best x^2-weighted least-squares scale. */
static float fit_scale_sym6(const float *x) {
    float amax, max = signed_absmax(x, 16, &amax);
    if (amax < 1e-15f) return 0;
    float best_scale = -max / 32, best = -1;
    for (int k = -9; k <= 9; k++) {
        const float is = -(32.f + 0.1f * (float)k) / max;
        float slx = 0, sl2 = 0;
        for (int i = 0; i < 16; i++) {
            const int l = HACHI_MAX(-32, HACHI_MIN(31, nearest_int(is * x[i])));
            const float w = x[i] * x[i];
            slx += w * x[i] * (float)l;
            sl2 += w * (float)(l * l);
        }
        if (sl2 > 0 && slx * slx / sl2 > best) { best = slx * slx / sl2; best_scale = slx / sl2; }
    }
    return best_scale;
}

void hachi_quantize_row_q6_K_ref(const float *x, void *vy, int64_t n) {
    block_q6_K *y = vy;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float sc[16], max_sc = 0, amax_sc = 0;
        for (int j = 0; j < 16; j++) {
            sc[j] = fit_scale_sym6(x + 16 * j);
            if (fabsf(sc[j]) > amax_sc) { amax_sc = fabsf(sc[j]); max_sc = sc[j]; }
        }
        memset(L, 32, sizeof L);
        if (amax_sc < 1e-15f) {
            memset(y[i].scales, 0, sizeof y[i].scales);
            y[i].d = 0;
        } else {
            const float iscale = -128.f / max_sc;
            y[i].d = hachi_f32_to_f16(1 / iscale);
            for (int j = 0; j < 16; j++)
                y[i].scales[j] = (int8_t)HACHI_MIN(127, nearest_int(iscale * sc[j]));
            const float d = hachi_f16_to_f32(y[i].d);
            for (int j = 0; j < 16; j++) {
                const float ds = d * (float)y[i].scales[j];
                if (!ds) continue;
                for (int l = 0; l < 16; l++)
                    L[16 * j + l] = (uint8_t)(HACHI_MAX(-32, HACHI_MIN(31, nearest_int(x[16 * j + l] / ds))) + 32);
            }
        }
        for (int h = 0; h < 2; h++) {
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            const uint8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                const int q0 = Lh[l], q1 = Lh[l + 32], q2 = Lh[l + 64], q3 = Lh[l + 96];
                ql[l] = (uint8_t)((q0 & 0xF) | ((q2 & 0xF) << 4));
                ql[l + 32] = (uint8_t)((q1 & 0xF) | ((q3 & 0xF) << 4));
                qh[l] = (uint8_t)((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
            }
        }
    }
}

void hachi_dequantize_row_q6_K(const void *vx, float *y, int64_t n) {
    const block_q6_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = hachi_f16_to_f32(x[i].d);
        for (int h = 0; h < 2; h++, y += 128) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *sc = x[i].scales + 8 * h;
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q0 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q1 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q0;
                y[l + 32] = d * (float)sc[is + 2] * (float)q1;
                y[l + 64] = d * (float)sc[is + 4] * (float)q2;
                y[l + 96] = d * (float)sc[is + 6] * (float)q3;
            }
        }
    }
}
