/* quant: ggml's tensor types with their exact block layouts, and the type
 * traits table (block size, bytes per block, name). Layouts are byte-exact
 * with ggml-common.h; each carries a static size assert and its formula. */
#ifndef HACHI_QUANT_H
#define HACHI_QUANT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef uint16_t hachi_half;   /* IEEE fp16 bits */

/* ggml type ids, as stored in GGUF tensor infos. */
enum hachi_type {
    HACHI_TYPE_F32 = 0, HACHI_TYPE_F16 = 1, HACHI_TYPE_Q4_0 = 2, HACHI_TYPE_Q4_1 = 3,
    HACHI_TYPE_Q5_0 = 6, HACHI_TYPE_Q5_1 = 7, HACHI_TYPE_Q8_0 = 8, HACHI_TYPE_Q8_1 = 9,
    HACHI_TYPE_Q2_K = 10, HACHI_TYPE_Q3_K = 11, HACHI_TYPE_Q4_K = 12, HACHI_TYPE_Q5_K = 13,
    HACHI_TYPE_Q6_K = 14, HACHI_TYPE_Q8_K = 15, HACHI_TYPE_IQ2_XXS = 16, HACHI_TYPE_IQ2_XS = 17,
    HACHI_TYPE_IQ3_XXS = 18, HACHI_TYPE_IQ1_S = 19, HACHI_TYPE_IQ4_NL = 20, HACHI_TYPE_IQ3_S = 21,
    HACHI_TYPE_IQ2_S = 22, HACHI_TYPE_IQ4_XS = 23, HACHI_TYPE_I8 = 24, HACHI_TYPE_I16 = 25,
    HACHI_TYPE_I32 = 26, HACHI_TYPE_I64 = 27, HACHI_TYPE_F64 = 28, HACHI_TYPE_IQ1_M = 29,
    HACHI_TYPE_BF16 = 30, HACHI_TYPE_TQ1_0 = 34, HACHI_TYPE_TQ2_0 = 35, HACHI_TYPE_MXFP4 = 39,
    HACHI_TYPE_COUNT = 40
};

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK8_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

/* 4.5 bits/weight: x[j] = (qs[j] & 0xF) - 8) * d, x[j+16] = ((qs[j] >> 4) - 8) * d */
typedef struct { hachi_half d; uint8_t qs[QK4_0 / 2]; } block_q4_0;
_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");
/* hachi's runtime layout of 8 q4_0 rows (never in a file): block column b of rows
 * 8g..8g+7 as one block, d[j] = row j's scale, qs[32c + 4j + k] = row j's qs[4c + k]
 * (c, k < 4), so one 32-byte load holds 4 nibble bytes of each of the 8 rows and a
 * broadcast of 4 activation bytes meets all 8 rows at once. 8 rows take the same bytes
 * as in the file (8 x 18 = 144). */
typedef struct { hachi_half d[8]; uint8_t qs[8 * QK4_0 / 2]; } block_q4_0x8;
_Static_assert(sizeof(block_q4_0x8) == 144, "block_q4_0x8 size");
/* 5 bits/weight: x = (nibble) * d + m, nibble order as q4_0 */
typedef struct { hachi_half d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 size");
/* 5.5 bits/weight: 5th bit of x[j] in qh bit j, of x[j+16] in qh bit j+16; x = (q - 16) * d */
typedef struct { hachi_half d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0;
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0 size");
/* 8.5 bits/weight: x = qs[j] * d */
typedef struct { hachi_half d; int8_t qs[QK8_0]; } block_q8_0;
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");
/* hachi's runtime layout of 8 q8_0 rows (never in a file): block column b of rows 8g..8g+7
 * as one block, d[j] = row j's scale, qs[32c + 4j + k] = row j's qs[4c + k] + 128 (c < 8,
 * k < 4: the values offset to unsigned bytes, as vpdpbusd multiplies them), so one 32-byte
 * load holds 4 values of each of the 8 rows. 8 rows take the file's bytes (8 x 34 = 272). */
typedef struct { hachi_half d[8]; uint8_t qs[8 * QK8_0]; } block_q8_0x8;
_Static_assert(sizeof(block_q8_0x8) == 272, "block_q8_0x8 size");
/* 9 bits/weight: as q8_0, s = d * sum(qs) */
typedef struct { hachi_half d, s; int8_t qs[QK8_0]; } block_q8_1;
_Static_assert(sizeof(block_q8_1) == 36, "block_q8_1 size");

/* 4.5 bits/weight: 8 sub-blocks of 32, 6-bit scale and min each packed in scales[12];
 * x = d * sc * q - dmin * m */
typedef struct { hachi_half d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; } block_q4_K;
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");
/* hachi's runtime layout of 8 q4_K rows (never in a file): block column b of rows
 * 8g..8g+7 as one block, d[r] / dmin[r] = row r's, scales[k][r] = row r's scales[k] (so
 * the 6-bit scales and mins of all 8 rows decode with a few vector ops), and
 * qs[256i + 32c + 4r + k] = row r's qs[32i + 4c + k] (i < 4, c < 8, k < 4): the low
 * nibbles are elements 4c..4c+3 of sub-block 2i, the high ones of sub-block 2i+1, so one
 * 32-byte load holds 4 nibble bytes of each of the 8 rows and a broadcast of 4 activation
 * bytes meets all 8 rows at once. 8 rows take the same bytes as in the file (8 x 144). */
typedef struct {
    hachi_half d[8], dmin[8];
    uint8_t scales[K_SCALE_SIZE][8];
    uint8_t qs[8 * QK_K / 2];
} block_q4_Kx8;
_Static_assert(sizeof(block_q4_Kx8) == 8 * 144, "block_q4_Kx8 size");
/* 5.5 bits/weight: as q4_K plus the high bit of each weight in qh[32] */
typedef struct { hachi_half d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_K;
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K size");
/* hachi's runtime layout of 8 q5_K rows (never in a file): d, dmin, scales and the low nibbles
 * as a block_q4_Kx8 (k), then qh[32c + 4r + k] = row r's qh[4c + k] (c < 8, k < 4): bit j is the
 * high bit of element 4c + k of sub-block j, so one 32-byte load gives the high bits of the
 * values of every sub-block that a qs load gives the nibbles of; the q4_K code serves both. 8
 * rows take the file's bytes (8 x 176). */
typedef struct {
    block_q4_Kx8 k;
    uint8_t qh[8 * QK_K / 8];
} block_q5_Kx8;
_Static_assert(sizeof(block_q5_Kx8) == 8 * 176, "block_q5_Kx8 size");
/* 6.5625 bits/weight: 16 sub-blocks of 16 with int8 scales; x = d * sc * (q - 32),
 * low 4 bits in ql[128], high 2 bits in qh[64] */
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; hachi_half d; } block_q6_K;
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");
/* hachi's runtime layout of 8 q6_K rows (never in a file): block column b of rows 8g..8g+7
 * as one block, d[r] and scales[j][r] = row r's (sub-block j of 16 elements), and the 6-bit
 * values v (0..63, x = d * sc * (v - 32)) of unit u (elements 32u..32u+31: sub-blocks 2u and
 * 2u+1) as ql[128u + 32c + 4r + k] = low nibbles of row r's v[32u + 4c + k] (bits 0-3) and
 * v[32u + 16 + 4c + k] (bits 4-7), qh[64u + 32s + 4r + k] bits 2c..2c+1 = the top 2 bits of
 * row r's v[32u + 16s + 4c + k] (c, k < 4, s < 2): one 32-byte load of ql and one of qh
 * give 4 values of each of the 8 rows for a broadcast of 4 activation bytes. 8 rows take
 * the file's bytes (8 x 210). */
typedef struct {
    hachi_half d[8];
    int8_t scales[QK_K / 16][8];
    uint8_t ql[8 * QK_K / 2];
    uint8_t qh[8 * QK_K / 4];
} block_q6_Kx8;
_Static_assert(sizeof(block_q6_Kx8) == 8 * 210, "block_q6_Kx8 size");
/* activations for K-quant dots: x = d * qs, bsums[i] = sum of qs[16i..16i+15] */
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K;
_Static_assert(sizeof(block_q8_K) == 292, "block_q8_K size");

typedef struct hachi_type_traits {
    const char *name;        /* "q4_0", as ggml names it; NULL for unused ids */
    int32_t blck_size;       /* elements per block */
    int32_t type_size;       /* bytes per block */
    bool runnable;           /* hachi has kernels for it */
} hachi_type_traits;

const hachi_type_traits *hachi_type_info(uint32_t type);   /* NULL for unknown ids */
const char *hachi_type_name(uint32_t type);                 /* "unknown" for unknown ids */
int  hachi_type_from_name(const char *name);                /* -1 if none */
/* Bytes of a row of n elements; 0 when n is not a multiple of the block size or type unknown. */
uint64_t hachi_row_size(uint32_t type, int64_t n);

/* Reference (de)quantization of one row of n elements (n a multiple of the block size),
 * byte-exact with ggml's layouts (src/quant.c). The quantizers follow ggml's *_ref
 * rounding; the K-quant scale search is a simpler least-squares search of the same kind.
 * q8_K: d = max / -127 (ggml's current choice), bsums[i] = sum of qs[16i..16i+15]. */
void hachi_quantize_row_f16_ref(const float *x, void *y, int64_t n);
void hachi_quantize_row_bf16_ref(const float *x, void *y, int64_t n);
void hachi_quantize_row_q4_0_ref(const float *x, void *y, int64_t n);
void hachi_quantize_row_q4_1_ref(const float *x, void *y, int64_t n);
void hachi_quantize_row_q5_0_ref(const float *x, void *y, int64_t n);
void hachi_quantize_row_q8_0_ref(const float *x, void *y, int64_t n);
void hachi_quantize_row_q4_K_ref(const float *x, void *y, int64_t n);
void hachi_quantize_row_q5_K_ref(const float *x, void *y, int64_t n);
void hachi_quantize_row_q6_K_ref(const float *x, void *y, int64_t n);
void hachi_quantize_row_q8_K_ref(const float *x, void *y, int64_t n);
void hachi_dequantize_row_f16(const void *x, float *y, int64_t n);
void hachi_dequantize_row_bf16(const void *x, float *y, int64_t n);
void hachi_dequantize_row_q4_0(const void *x, float *y, int64_t n);
void hachi_dequantize_row_q4_1(const void *x, float *y, int64_t n);
void hachi_dequantize_row_q5_0(const void *x, float *y, int64_t n);
void hachi_dequantize_row_q8_0(const void *x, float *y, int64_t n);
void hachi_dequantize_row_q4_K(const void *x, float *y, int64_t n);
void hachi_dequantize_row_q5_K(const void *x, float *y, int64_t n);
void hachi_dequantize_row_q6_K(const void *x, float *y, int64_t n);
void hachi_dequantize_row_q8_K(const void *x, float *y, int64_t n);
/* 8 q4_0 rows of n elements (row_bytes apart) -> n/32 block_q4_0x8 at dst, and back
 * (row j of the 8, into row_bytes of q4_0 blocks). */
void hachi_repack_q4_0_x8(const void *rows, uint64_t row_bytes, void *dst, int64_t n);
void hachi_unpack_q4_0_x8(const void *src, int j, void *row, int64_t n);
/* The same for q8_0 rows (block_q8_0x8), q4_K, q5_K and q6_K rows (n a multiple of 256;
 * block_q4_Kx8, block_q5_Kx8, block_q6_Kx8). */
void hachi_repack_q5_K_x8(const void *rows, uint64_t row_bytes, void *dst, int64_t n);
void hachi_unpack_q5_K_x8(const void *src, int j, void *row, int64_t n);
void hachi_repack_q6_K_x8(const void *rows, uint64_t row_bytes, void *dst, int64_t n);
void hachi_unpack_q6_K_x8(const void *src, int j, void *row, int64_t n);
void hachi_repack_q8_0_x8(const void *rows, uint64_t row_bytes, void *dst, int64_t n);
void hachi_unpack_q8_0_x8(const void *src, int j, void *row, int64_t n);
void hachi_repack_q4_K_x8(const void *rows, uint64_t row_bytes, void *dst, int64_t n);
void hachi_unpack_q4_K_x8(const void *src, int j, void *row, int64_t n);
/* q4_K / q5_K: 6-bit scale and min of sub-block j (0..7) from the packed scales[12]. */
void hachi_q4k_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *m);

#endif
