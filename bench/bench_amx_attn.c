/* bench_amx_attn: a feasibility measurement, not hachi code. Attention scores (QK^T) of NQ f32
 * queries against 128 fp16 keys of 512 dims on AMX-BF16, in split precision: each key exactly as
 * two bf16 (hi + lo: an fp16 has 11 significant bits), each query as two or three bf16, and the
 * bf16 x bf16 products (exact in f32) summed by TDPBF16PS: 3 products (Kh.Qh, Kh.Ql, Kl.Qh) or 5
 * (those, Kl.Ql and Kh.Qm with a third query part). Against the AVX-512 table's attn_scores_f16
 * (8 heads a call), both checked against a double reference; then the same products blocked 2 key
 * tiles x 2 query tiles (NQ a multiple of 32); and the values (P.V) in the same split precision
 * against attn_values_f16_hot (values_check). It shows what a prefill attention
 * through AMX could gain and at what accuracy (bench/RESULTS.md, twenty-first session); it is not
 * bitwise anything hachi computes, so using it would need decode to take the same path.
 * Build (after make; a CPU with AMX-BF16):
 *   gcc -std=gnu11 -O2 -march=sapphirerapids -Iinclude -Isrc bench/bench_amx_attn.c \
 *       build/libhachi.a -o /tmp/bench_amx_attn -lm -pthread
 * Run: /tmp/bench_amx_attn NQ   (NQ a multiple of 16, at most 128; one thread) */
#define _GNU_SOURCE
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>
#include "kernels/kernels.h"

enum { HD = 512, NK = 128, NQMAX = 128 };
typedef struct { uint8_t palette, start; uint8_t res[14]; uint16_t colsb[16]; uint8_t rows[16]; } cfg_t;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec * 1e-6; }
static uint16_t f2h(float f) { return _cvtss_sh(f, 0); }
static float h2f(uint16_t h) { return _cvtsh_ss(h); }

static uint16_t kh[NK * HD] __attribute__((aligned(64))), kl[NK * HD] __attribute__((aligned(64)));
/* B tiles: [dim block j][pair k][query n][2] bf16, queries in groups of 16 */
static uint16_t qbh[NQMAX / 16][HD / 32][16][32] __attribute__((aligned(64))), qbl[NQMAX / 16][HD / 32][16][32] __attribute__((aligned(64))), qbm[NQMAX / 16][HD / 32][16][32] __attribute__((aligned(64)));

static inline uint16_t bf16_rne(float x) { uint32_t u; memcpy(&u, &x, 4); u += 0x7FFF + ((u >> 16) & 1); return u >> 16; }
static inline float bf2f(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }

/* K tile rows (fp16) -> bf16 hi/lo, vectorized */
static void convert_k(const uint16_t *k, int nk) {
    for (int i = 0; i < nk * HD; i += 32) {
        __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + i)));
        __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + i + 16)));
        __m512bh h = _mm512_cvtne2ps_pbh(b, a);
        __m512i hi = (__m512i)h;
        __m512 ah = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(hi)), 16));
        __m512 bh = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hi, 1)), 16));
        __m512bh l = _mm512_cvtne2ps_pbh(_mm512_sub_ps(b, bh), _mm512_sub_ps(a, ah));
        _mm512_store_si512((__m512i *)(kh + i), hi);
        _mm512_store_si512((__m512i *)(kl + i), (__m512i)l);
    }
}

static void prep_q(const float *q, int nq) {
    for (int n = 0; n < nq; n++)
        for (int d = 0; d < HD; d++) {
            const uint16_t h = bf16_rne(q[n * HD + d]);
            const uint16_t l = bf16_rne(q[n * HD + d] - bf2f(h));
            qbm[n / 16][d / 32][(d % 32) / 2][(n % 16) * 2 + d % 2] = bf16_rne(q[n * HD + d] - bf2f(h) - bf2f(l));
            qbh[n / 16][d / 32][(d % 32) / 2][(n % 16) * 2 + d % 2] = h;
            qbl[n / 16][d / 32][(d % 32) / 2][(n % 16) * 2 + d % 2] = l;
        }
}

/* s[key][query] for 16-key blocks and 16-query groups: 3 products, or 5 (five) */
static void amx_scores(int nk, int nq, float *s, int five) {
    for (int kb = 0; kb < nk; kb += 16)
        for (int g = 0; g < nq / 16; g++) {
            _tile_zero(0);
            for (int j = 0; j < HD / 32; j++) {
                _tile_loadd(1, kh + kb * HD + j * 32, HD * 2);
                _tile_loadd(2, kl + kb * HD + j * 32, HD * 2);
                _tile_loadd(3, qbh[g][j], 64);
                _tile_loadd(4, qbl[g][j], 64);
                _tile_dpbf16ps(0, 1, 3);
                _tile_dpbf16ps(0, 1, 4);
                _tile_dpbf16ps(0, 2, 3);
                if (five) { _tile_dpbf16ps(0, 2, 4); _tile_loadd(5, qbm[g][j], 64); _tile_dpbf16ps(0, 1, 5); }
            }
            _tile_stored(0, s + (size_t)kb * nq + g * 16, nq * 4);
        }
}

/* The same sums, 2 key tiles x 2 query tiles at a time (C in tiles 0-3, K parts in 4-5, query
 * parts in 6-7): each K part loaded once for both query tiles and each query part once for both key
 * tiles, 10 loads for 12 products (3) or 14 for 20 (5) instead of 16 and 24. nk and nq multiples of
 * 32. The products in the order hh, hl, (hm), lh, (ll): with 5, not the unblocked loop's order. */
/* K part kp of key tiles kb, kb + 16 (dim block j) into tiles 4, 5; query part qp of query tiles
 * g, g + 1 into tiles 6, 7 and its 4 products (the intrinsics want literal tile numbers) */
#define LOAD_K(kp)                                                                                  \
    do {                                                                                            \
        _tile_loadd(4, kp + kb * HD + j * 32, HD * 2);                                              \
        _tile_loadd(5, kp + (kb + 16) * HD + j * 32, HD * 2);                                       \
    } while (0)
#define PRODUCTS(qp)                                                                                \
    do {                                                                                            \
        _tile_loadd(6, qp[g][j], 64);                                                               \
        _tile_loadd(7, qp[g + 1][j], 64);                                                           \
        _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7); \
    } while (0)
static void amx_scores_2x2(int nk, int nq, float *s, int five) {
    for (int kb = 0; kb < nk; kb += 32)
        for (int g = 0; g < nq / 16; g += 2) {
            _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
            for (int j = 0; j < HD / 32; j++) {
                LOAD_K(kh);
                PRODUCTS(qbh);
                PRODUCTS(qbl);
                if (five) PRODUCTS(qbm);
                LOAD_K(kl);
                PRODUCTS(qbh);
                if (five) PRODUCTS(qbl);
            }
            _tile_stored(0, s + (size_t)kb * nq + g * 16, nq * 4);
            _tile_stored(1, s + (size_t)kb * nq + (g + 1) * 16, nq * 4);
            _tile_stored(2, s + (size_t)(kb + 16) * nq + g * 16, nq * 4);
            _tile_stored(3, s + (size_t)(kb + 16) * nq + (g + 1) * 16, nq * 4);
        }
}

/* ---- values: out[q][d] = sum_j p[q][j] * v[j][d], p in [0, 1] (softmax weights, f32), v fp16 ----
 * B tiles from V: rows = key pairs, 16 dims x 2 keys each (VNNI), hi and lo parts; A tiles from P:
 * 16 queries x 32 keys, in three parts. C: 16 queries x 16 dims, one tile per 16-dim chunk, summed
 * over the key blocks: 5 products (Ph.Vh, Ph.Vl, Pm.Vh, Pm.Vl, Pl.Vh). */
static uint16_t vbh[NK / 32][HD / 16][16][32] __attribute__((aligned(64))), vbl[NK / 32][HD / 16][16][32] __attribute__((aligned(64)));
static uint16_t pa[3][NQMAX / 16][NK / 32][16][32] __attribute__((aligned(64)));

/* V rows (fp16) -> pair-interleaved bf16 hi/lo, 32 keys x 16 dims a tile, vectorized by dims */
static void convert_v(const uint16_t *v, int nk) {
    for (int j = 0; j < nk; j += 2)
        for (int d = 0; d < HD; d += 16) {
            const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + (size_t)j * HD + d)));
            const __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + (size_t)(j + 1) * HD + d)));
            const __m256i ah = (__m256i)_mm512_cvtneps_pbh(a), bh = (__m256i)_mm512_cvtneps_pbh(b);
            const __m512 af = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(ah), 16));
            const __m512 bf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bh), 16));
            const __m256i al = (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(a, af)), bl = (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(b, bf));
            /* interleave key j and j + 1 per dim: 16 dims x 2 = 32 bf16 */
            const __m512i idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                                 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
            _mm512_store_si512((__m512i *)vbh[j / 32][d / 16][(j % 32) / 2],
                               _mm512_permutex2var_epi16(_mm512_castsi256_si512(ah), idx, _mm512_castsi256_si512(bh)));
            _mm512_store_si512((__m512i *)vbl[j / 32][d / 16][(j % 32) / 2],
                               _mm512_permutex2var_epi16(_mm512_castsi256_si512(al), idx, _mm512_castsi256_si512(bl)));
        }
}

static void prep_p(const float *p, int nq) {   /* p [nq][NK] */
    for (int n = 0; n < nq; n++)
        for (int j = 0; j < NK; j++) {
            const float x = p[n * NK + j];
            const uint16_t h = bf16_rne(x), m = bf16_rne(x - bf2f(h)), l = bf16_rne(x - bf2f(h) - bf2f(m));
            pa[0][n / 16][j / 32][n % 16][j % 32] = h;
            pa[1][n / 16][j / 32][n % 16][j % 32] = m;
            pa[2][n / 16][j / 32][n % 16][j % 32] = l;
        }
}

static void amx_values(int nk, int nq, float *out) {   /* out [nq][HD] */
    for (int g = 0; g < nq / 16; g++)
        for (int d = 0; d < HD / 16; d++) {
            _tile_zero(0);
            for (int kb = 0; kb < nk / 32; kb++) {
                _tile_loadd(1, pa[0][g][kb], 64);
                _tile_loadd(2, pa[1][g][kb], 64);
                _tile_loadd(3, pa[2][g][kb], 64);
                _tile_loadd(4, vbh[kb][d], 64);
                _tile_loadd(5, vbl[kb][d], 64);
                _tile_dpbf16ps(0, 1, 4);
                _tile_dpbf16ps(0, 1, 5);
                _tile_dpbf16ps(0, 2, 4);
                _tile_dpbf16ps(0, 2, 5);
                _tile_dpbf16ps(0, 3, 4);
            }
            _tile_stored(0, out + (size_t)g * 16 * HD + d * 16, HD * 4);
        }
}

static void values_check(int nq, const uint16_t *v, const hachi_kernels *K) {
    static float p[NQMAX * NK], o_amx[NQMAX * HD], o_avx[NQMAX * HD], pt[NK * 8];
    static double ref[NQMAX * HD];
    for (int n = 0; n < nq; n++) {   /* softmax-like weights: positive, summing to 1 */
        double sum = 0;
        for (int j = 0; j < NK; j++) sum += p[n * NK + j] = expf(4.0f * (rand() / (float)RAND_MAX));
        for (int j = 0; j < NK; j++) p[n * NK + j] = (float)(p[n * NK + j] / sum);
    }
    for (int n = 0; n < nq; n++)
        for (int d = 0; d < HD; d++) {
            double a = 0;
            for (int j = 0; j < NK; j++) a += (double)p[n * NK + j] * h2f(v[(size_t)j * HD + d]);
            ref[n * HD + d] = a;
        }
    convert_v(v, NK);
    prep_p(p, nq);
    amx_values(NK, nq, o_amx);
    memset(o_avx, 0, sizeof o_avx);
    for (int g = 0; g < nq / 8; g++) {
        for (int j = 0; j < NK; j++) for (int h = 0; h < 8; h++) pt[j * 8 + h] = p[(g * 8 + h) * NK + j];
        K->attn_values_f16_hot(HD, NK, v, HD, pt, 8, o_avx + (size_t)g * 8 * HD);
    }
    double e_amx = 0, e_avx = 0, mag = 0;
    for (int i = 0; i < nq * HD; i++) {
        e_amx = fmax(e_amx, fabs(o_amx[i] - ref[i]));
        e_avx = fmax(e_avx, fabs(o_avx[i] - ref[i]));
        mag = fmax(mag, fabs(ref[i]));
    }
    printf("values nq %d: max |out| %.3f; max error: avx512 f32 %.3g, amx 5 products %.3g\n", nq, mag, e_avx, e_amx);
    enum { REPS = 400 };
    for (int round = 0; round < 3; round++) {
        double t0 = now();
        for (int r = 0; r < REPS; r++)
            for (int g = 0; g < nq / 8; g++) K->attn_values_f16_hot(HD, NK, v, HD, pt, 8, o_avx + (size_t)g * 8 * HD);
        double t1 = now();
        for (int r = 0; r < REPS; r++) amx_values(NK, nq, o_amx);
        double t2 = now();
        for (int r = 0; r < REPS; r++) convert_v(v, NK);
        double t3 = now();
        const double per = 1e6 / ((double)REPS * NK * nq);
        printf("  values, ns per key x query (512 dims): avx512 hot %.2f | amx 5 products %.2f, V conversion %.2f\n",
               (t1 - t0) * per, (t2 - t1) * per, (t3 - t2) * per);
    }
}

int main(int argc, char **argv) {
    const int nq = argc > 1 ? atoi(argv[1]) : 16;
    if (nq < 16 || nq > NQMAX || nq % 16) { fprintf(stderr, "bench_amx_attn: NQ a multiple of 16, 16..%d\n", NQMAX); return 2; }
    if (syscall(SYS_arch_prctl, 0x1023, 18)) { puts("no AMX"); return 1; }
    cfg_t cfg; memset(&cfg, 0, sizeof cfg); cfg.palette = 1;
    for (int i = 0; i < 8; i++) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }
    _tile_loadconfig(&cfg);
    static uint16_t k[NK * HD]; static float q[NQMAX * HD], s_amx[NK * NQMAX], s_avx[NK * NQMAX]; static double ref[NK * NQMAX];
    srand(1);
    for (int i = 0; i < NK * HD; i++) k[i] = f2h(((rand() / (float)RAND_MAX) - 0.5f) * 4);
    for (int i = 0; i < nq * HD; i++) q[i] = ((rand() / (float)RAND_MAX) - 0.5f) * 4;
    for (int j = 0; j < NK; j++) for (int n = 0; n < nq; n++) {
        double a = 0; for (int d = 0; d < HD; d++) a += (double)h2f(k[j * HD + d]) * q[n * HD + d]; ref[j * nq + n] = a; }
    const hachi_kernels *K = hachi_kernels_get(HACHI_ISA_AVX512);
    float tmp[NK * 8];
    double e_amx3 = 0, e_amx5 = 0, e_avx = 0, mag = 0;
    convert_k(k, NK); prep_q(q, nq);
    for (int five = 0; five < 2; five++) {
        amx_scores(NK, nq, s_amx, five);
        for (int i = 0; i < NK * nq; i++) { double e = fabs(s_amx[i] - ref[i]); if (five) e_amx5 = fmax(e_amx5, e); else e_amx3 = fmax(e_amx3, e); }
    }
    for (int g = 0; g < nq / 8; g++) {
        K->attn_scores_f16(HD, NK, k, HD, q + g * 8 * HD, 8, tmp);
        for (int j = 0; j < NK; j++) for (int h = 0; h < 8; h++) s_avx[j * nq + g * 8 + h] = tmp[j * 8 + h];
    }
    for (int i = 0; i < NK * nq; i++) { e_avx = fmax(e_avx, fabs(s_avx[i] - ref[i])); mag = fmax(mag, fabs(ref[i])); }
    double e_blk[2] = {0, 0};
    for (int five = 0; five < 2 && nq % 32 == 0; five++) {
        amx_scores_2x2(NK, nq, s_amx, five);
        for (int i = 0; i < NK * nq; i++) e_blk[five] = fmax(e_blk[five], fabs(s_amx[i] - ref[i]));
    }
    if (nq % 32 == 0) printf("nq %d: blocked 2x2: max error 3 products %.3g, 5 products %.3g\n", nq, e_blk[0], e_blk[1]);
    printf("nq %d: max |score| %.2f; max error: avx512 f32 %.3g, amx 3 products %.3g, 5 products %.3g\n", nq, mag, e_avx, e_amx3, e_amx5);
    values_check(nq, k, K);
    enum { REPS = 400 };
    for (int round = 0; round < 3; round++) {
        double t0 = now();
        for (int r = 0; r < REPS; r++) for (int g = 0; g < nq / 8; g++) K->attn_scores_f16(HD, NK, k, HD, q + g * 8 * HD, 8, tmp);
        double t1 = now();
        for (int r = 0; r < REPS; r++) { convert_k(k, NK); amx_scores(NK, nq, s_amx, 0); }
        double t2 = now();
        for (int r = 0; r < REPS; r++) amx_scores(NK, nq, s_amx, 0);
        double t3 = now();
        for (int r = 0; r < REPS; r++) convert_k(k, NK);
        double t4 = now();
        for (int r = 0; r < REPS; r++) amx_scores(NK, nq, s_amx, 1);
        double t5 = now();
        for (int r = 0; r < REPS && nq % 32 == 0; r++) amx_scores_2x2(NK, nq, s_amx, 0);
        double t6 = now();
        for (int r = 0; r < REPS && nq % 32 == 0; r++) amx_scores_2x2(NK, nq, s_amx, 1);
        double t7 = now();
        const double per = 1e6 / ((double)REPS * NK * nq);   /* ns per key-query from ms */
        printf("  ns per key x query (512 dims): avx512 %.2f | amx 3 products with the K conversion %.2f, alone %.2f; "
               "5 products alone %.2f; the conversion alone %.2f\n",
               (t1 - t0) * per, (t2 - t1) * per, (t3 - t2) * per, (t5 - t4) * per, (t4 - t3) * per);
        if (nq % 32 == 0) printf("  blocked 2x2, products alone: 3 products %.2f, 5 products %.2f\n", (t6 - t5) * per, (t7 - t6) * per);
    }
    return 0;
}
