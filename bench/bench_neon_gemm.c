/* bench_neon_gemm: the NEON table's prefill GEMM against the kernel it replaces, for qemu_insn.c to
 * count: for the interleaved int8 types gemm_x8 over a packed tile against the x8 kernel
 * (vec_dot_x8, group by group); for the float types (f32, f16, bf16) gemm over rows in the file's
 * layout against vec_dot_multi row by row. One way per run, REPS times over ROWS x COLS weights
 * and NT tokens, after one call of each that checks they agree bit for bit. bench/neon_counts.sh
 * runs it with REPS and with 0 and divides the difference by the units (8 rows x 32 values x
 * token) of the REPS runs. Build (after make CROSS=aarch64):
 *     aarch64-linux-gnu-gcc -O2 -Isrc -Iinclude -static -o /tmp/bench_neon_gemm bench/bench_neon_gemm.c \
 *         build-aarch64/libhachi.a -lm -lpthread
 * Run: qemu-aarch64 -L /usr/aarch64-linux-gnu [-cpu cortex-a76] /tmp/bench_neon_gemm TYPE x8|gemm ROWS COLS NT REPS
 * (x8 names the kernel replaced, multi for the float types; cortex-a76 has sdot but not i8mm;
 * qemu's default CPU has both). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/kernels.h"
#include "matmul.h"
#include "util.h"

static uint64_t rng = 1;
static float uniform(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) % 2001) / 1000.0f - 1.0f;
}

/* the float types: gemm against multi, one weight row at a time (matmul's path below gemm_min) */
static int float_gemm(const hachi_kernels *k, int type, int gemm, int64_t rows, int64_t cols, int nt, int reps) {
    const hachi_type_kernels *kt = &k->t[type];
    const size_t rb = hachi_row_size(type, cols), as = (size_t)cols * sizeof(float);
    char *w = hachi_aligned_alloc(rb * rows);
    float *a = hachi_aligned_alloc(as * nt), *x = malloc(as);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) x[c] = uniform();
        hachi_kernels_ref()->t[type].from_float(x, w + r * rb, cols);
    }
    for (int64_t i = 0; i < nt * cols; i++) a[i] = uniform();
    float *want = malloc((size_t)nt * rows * sizeof(float)), *y = malloc((size_t)nt * rows * sizeof(float)), s[16];
    for (int64_t r = 0; r < rows; r++) {
        kt->vec_dot_multi(cols, s, w + r * rb, a, as, nt);
        for (int t = 0; t < nt; t++) want[t * rows + r] = s[t];
    }
    kt->gemm(cols, y, rows, w, rb, (int)rows, a, as, nt);
    int bad = 0;
    for (int64_t i = 0; i < nt * rows; i++) bad += memcmp(&want[i], &y[i], sizeof(float)) != 0;
    for (int it = 0; it < reps; it++) {
        if (gemm) kt->gemm(cols, y, rows, w, rb, (int)rows, a, as, nt);
        else
            for (int64_t r = 0; r < rows; r++) kt->vec_dot_multi(cols, s, w + r * rb, a, as, nt);
    }
    printf("%s %s %s nt %d: units %lld, %d of %lld outputs differ\n", k->name, hachi_type_name(type), gemm ? "gemm" : "multi",
           nt, (long long)reps * (rows / 8) * (cols / 32) * nt, bad, (long long)nt * rows);
    free(w); free(a); free(x); free(want); free(y);
    return bad != 0;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: bench_neon_gemm TYPE x8|gemm ROWS COLS NT REPS\n");
        return 2;
    }
    const int type = hachi_type_from_name(argv[1]);
    const int gemm = !strcmp(argv[2], "gemm");
    const int64_t rows = atoll(argv[3]), cols = atoll(argv[4]);
    const int nt = atoi(argv[5]), reps = atoi(argv[6]);
    const hachi_kernels *k = hachi_kernels_best();
    if (type >= 0 && k->t[type].gemm) return float_gemm(k, type, gemm, rows, cols, nt, reps);
    if (type < 0 || rows % 8 || cols % 32 || nt < 1 || nt > 16 || !k->t[type].gemm_x8 || !k->t[type].act_pack) {
        fprintf(stderr, "bench_neon_gemm: needs a type whose GEMM takes packed tiles in the %s table, rows %% 8 == 0, "
                        "cols %% 32 == 0, 1 <= nt <= 16\n", k->name);
        return 2;
    }
    const hachi_type_kernels *kt = &k->t[type], *kv = &k->t[kt->vec_dot_type];
    const size_t rb = hachi_row_size(type, cols);
    char *w = hachi_aligned_alloc(rb * rows), *w8 = hachi_aligned_alloc(rb * rows);
    float *x = malloc((size_t)cols * sizeof(float));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) x[c] = uniform();
        kt->from_float(x, w + r * rb, cols);
    }
    hachi_mat W = {.type = (uint32_t)type, .rows = rows, .cols = cols, .row_bytes = rb, .data = w};
    hachi_mat_to_x8(&W, w8);
    const size_t as = hachi_row_size(kt->vec_dot_type, cols) + (kt->act_extra ? kt->act_extra(cols) : 0);
    char *a = hachi_aligned_alloc(as * nt), *tile = hachi_aligned_alloc(kt->act_pack_bytes(cols));
    for (int t = 0; t < nt; t++) {
        for (int64_t c = 0; c < cols; c++) x[c] = uniform();
        kv->from_float(x, a + t * as, cols);
        if (kt->act_prep) kt->act_prep(cols, a + t * as, 0, cols / hachi_type_info(kt->vec_dot_type)->blck_size);
    }
    for (int t0 = 0; t0 < nt; t0 += 8) kt->act_pack(cols, a + t0 * as, as, t0, HACHI_MIN(8, nt - t0), nt, tile);
    const int ng = (int)(rows / 8);
    float *want = malloc((size_t)nt * rows * sizeof(float)), *y = malloc((size_t)nt * rows * sizeof(float)), s8[8 * 16];
    for (int g = 0; g < ng; g++) {
        kt->vec_dot_x8(cols, s8, w8 + (size_t)g * 8 * rb, a, as, nt);
        for (int t = 0; t < nt; t++) memcpy(want + t * rows + 8 * g, s8 + 8 * t, 8 * sizeof(float));
    }
    kt->gemm_x8(cols, y, rows, w8, ng, tile, as, nt);
    int bad = 0;
    for (int64_t i = 0; i < nt * rows; i++) bad += memcmp(&want[i], &y[i], sizeof(float)) != 0;
    for (int it = 0; it < reps; it++) {
        if (gemm) kt->gemm_x8(cols, y, rows, w8, ng, tile, as, nt);
        else
            for (int g = 0; g < ng; g++) kt->vec_dot_x8(cols, s8, w8 + (size_t)g * 8 * rb, a, as, nt);
    }
    printf("%s %s %s nt %d: units %lld, %d of %lld outputs differ\n", k->name, hachi_type_name(type), argv[2], nt,
           (long long)reps * ng * (cols / 32) * nt, bad, (long long)nt * rows);
    free(w); free(w8); free(x); free(a); free(tile); free(want); free(y);
    return bad != 0;
}
