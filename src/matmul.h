/* matmul: y = W x for n_tok activation rows, over any runnable weight type.
 * x is converted once to W's vec_dot_type (Q8_0 / Q8_K / F32), rows are split
 * over the pool. n_tok <= 16 reads each weight block once for all tokens
 * (vec_dot_multi); larger n_tok is tiled so a weight tile stays in cache. */
#ifndef HACHI_MATMUL_H
#define HACHI_MATMUL_H
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kernels/kernels.h"
#include "threads.h"

typedef struct hachi_mat {
    uint32_t type;          /* enum hachi_type */
    int64_t rows, cols;     /* W is [rows][cols], a row is contiguous */
    const void *data;
    uint64_t row_bytes;
    bool x8;                /* data holds rows 8 by 8 interleaved (block_*x8; rows % 8 == 0) */
} hachi_mat;

/* Scratch bytes hachi_matmul needs for cols x n_tok activations of W's type. */
size_t hachi_matmul_scratch_bytes(const hachi_kernels *k, uint32_t type, int64_t cols, int n_tok);
/* y[t*ldy + r] = sum_c W[r][c] * x[t*ldx + c], t < n_tok, r < rows. */
void hachi_matmul(hachi_pool *pool, const hachi_kernels *k, const hachi_mat *W,
                  const float *x, int64_t ldx, int n_tok, float *y, int64_t ldy, void *scratch);
/* One output of hachi_matmul_n: y[t*ldy + r] = W[r] . x[t] */
typedef struct hachi_matmul_out {
    const hachi_mat *W;
    float *y;
    int64_t ldy;
} hachi_matmul_out;
#define HACHI_MATMUL_OUT_MAX 3
/* Whether a and b can share one hachi_matmul_n (the same type, cols and layout). */
bool hachi_matmul_fusable(const hachi_mat *a, const hachi_mat *b);
/* hachi_matmul for n_out (<= HACHI_MATMUL_OUT_MAX) matrices that share x (fusable with out[0]):
 * x converted once and all their rows in one run of the pool (a decode step's q, k, v or gate,
 * up: one start and one wait instead of several). Each output bit for bit hachi_matmul's. */
void hachi_matmul_n(hachi_pool *pool, const hachi_kernels *k, const hachi_matmul_out *out, int n_out,
                    const float *x, int64_t ldx, int n_tok, void *scratch);
/* Bytes W's rows take interleaved by 8 for this ISA's kernels; 0 when W stays as it is
 * (no interleaved kernel for its type, or rows % 8 != 0). */
uint64_t hachi_mat_x8_bytes(const hachi_kernels *k, const hachi_mat *W);
/* Interleave W's rows 8 by 8 into dst (hachi_mat_x8_bytes(W) bytes); W then points there.
 * _groups: only the groups of 8 rows [g0, g1), W unchanged (for splitting the work). */
void hachi_mat_to_x8(hachi_mat *W, void *dst);
void hachi_mat_to_x8_groups(const hachi_mat *W, void *dst, int64_t g0, int64_t g1);
/* y[i] = W[rows[i]] . x for i < n: one activation row x[cols], converted once into scratch
 * (hachi_matmul_scratch_bytes(k, W->type, W->cols, 1) bytes), then the rows picked; each
 * y[i] is bit for bit hachi_matmul's output row rows[i] for that x. In the calling thread. */
void hachi_matmul_gather(const hachi_kernels *k, const hachi_mat *W, const float *x, const int32_t *rows, int n,
                         float *y, void *scratch);
/* Dequantize row r of W into out[cols]. */
void hachi_mat_row(const hachi_kernels *k, const hachi_mat *W, int64_t r, float *out);
/* Ask the kernel to start reading rows[i] (i < n) of W from its file now (madvise WILLNEED) when
 * W is still the file's mapping: a row read later then does not wait on the disk. Any row id out
 * of [0, rows) is skipped. */
void hachi_mat_prefetch_rows(const hachi_mat *W, const int32_t *rows, int n);
/* The same for all of W's rows still in the file, chunk bytes per request (Linux reads at most
 * its readahead window, ~2 MB, per request); stops early (false) once *stop is set. Blocks while
 * the kernel queues the reads: for a background thread. */
bool hachi_mat_read_ahead(const hachi_mat *W, size_t chunk, const atomic_bool *stop);

#endif
