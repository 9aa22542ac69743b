/* Kernel tests: every weight type x every ISA table this CPU can run, against (a) the ref
 * table on the same quantized inputs and (b) a double-precision dot of the dequantized
 * inputs; plus quantize round-trip bounds, exhaustive fp16 conversion, the fp16 attention
 * kernels and dispatch. Sizes: one block, odd block counts, 4096 and 12288. Each SIMD table
 * must hold its own kernels where its file has them, not ref's: a table that fell back to
 * ref would pass every comparison against ref. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/kernels.h"
#include "quant.h"
#include "test.h"
#include "util.h"
#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

/* Kernel rounding budget, relative to sum|w_i a_i|: integer block sums are exact, so the
 * error is the float scaling and accumulation of at most n/32 partial sums (ref adds them
 * in order, SIMD in 2-8 interleaved lanes); 128 ulps covers 12288-element rows with room. */
#define KERNEL_EPS (128 * FLT_EPSILON)
/* fp16 attention kernels: f32 accumulation of n <= 512 products, compared to double. */
#define F16_ATTN_EPS (64 * FLT_EPSILON)

static const uint32_t weight_types[] = {
    HACHI_TYPE_F32, HACHI_TYPE_F16, HACHI_TYPE_BF16, HACHI_TYPE_Q8_0, HACHI_TYPE_Q4_0,
    HACHI_TYPE_Q4_1, HACHI_TYPE_Q5_0, HACHI_TYPE_Q4_K, HACHI_TYPE_Q5_K, HACHI_TYPE_Q6_K,
};
#define N_WEIGHT_TYPES (sizeof weight_types / sizeof weight_types[0])

/* Format epsilon: bound on rms(x - dequant(quant(x))) / rms(x) for the test data (uniform
 * in [-1,1] times a per-32 scale); about step/sqrt(12) of each format's grid, with margin. */
static double format_eps(uint32_t type) {
    switch (type) {
    case HACHI_TYPE_F32: return 0;
    case HACHI_TYPE_F16: return 3e-4;     /* 11-bit mantissa */
    case HACHI_TYPE_BF16: return 2.5e-3;  /* 8-bit mantissa */
    case HACHI_TYPE_Q8_0: return 0.006;   /* step amax/127 */
    case HACHI_TYPE_Q8_K: return 0.011;   /* step max/127 over 256 */
    case HACHI_TYPE_Q4_0: return 0.08;    /* step amax/8 */
    case HACHI_TYPE_Q4_1: return 0.075;   /* step (max-min)/15 */
    case HACHI_TYPE_Q5_0: return 0.04;    /* step amax/16 */
    case HACHI_TYPE_Q4_K: return 0.07;    /* (max-min)/15 per 32, 6-bit scales */
    case HACHI_TYPE_Q5_K: return 0.035;   /* (max-min)/31 per 32 */
    case HACHI_TYPE_Q6_K: return 0.018;   /* amax/32 per 16, 8-bit scales */
    default: return 0;
    }
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rng_unit(void) { return (float)(rng_u32() & 0xFFFFFF) / 8388608.0f - 1.0f; }  /* [-1,1) */

/* uniform [-1,1) times a scale 2^(-3..3) changing every 32 elements; block 1 zero when zero_blk */
static void fill(float *x, int64_t n, int zero_blk) {
    float sc = 1;
    for (int64_t i = 0; i < n; i++) {
        if (i % 32 == 0) sc = ldexpf(1.0f, (int)(rng_u32() % 7) - 3);
        x[i] = rng_unit() * sc;
    }
    if (zero_blk && n >= 3 * QK_K) memset(x + QK_K, 0, QK_K * sizeof(float));
}

static int64_t row_bytes(uint32_t type, int64_t n) { return (int64_t)hachi_row_size(type, n); }

/* One weight type on one ISA at one size. Returns 0 on failure (already reported). */
static int check_type(const hachi_kernels *K, const hachi_kernels *R, uint32_t type, int64_t n) {
    const hachi_type_kernels *kt = &K->t[type], *rt = &R->t[type];
    const char *tn = hachi_type_name(type), *isa = K->name;
    enum { NA = 16 };
    int ok = 1;
    if (!kt->vec_dot || !kt->vec_dot_multi || !kt->to_float || !kt->from_float) {
        test_fail(__FILE__, __LINE__, "%s/%s: incomplete table", tn, isa);
        return 0;
    }
    const uint32_t vdt = rt->vec_dot_type;
    CHECKF(kt->vec_dot_type == vdt, "%s/%s: vec_dot_type %u, ref %u", tn, isa, kt->vec_dot_type, vdt);
    /* activation rows: the quantized row, then this ISA's extras for the type (act_prep) */
    const int64_t ab0 = row_bytes(vdt, n), ab = ab0 + (kt->act_extra ? (int64_t)kt->act_extra(n) : 0);
    const int64_t wb = row_bytes(type, n);
    CHECKF(!kt->act_extra == !kt->act_prep, "%s/%s: act_extra and act_prep come together", tn, isa);
    float *w = malloc((size_t)n * 4), *wd = malloc((size_t)n * 4), *wd2 = malloc((size_t)n * 4);
    float *a = malloc((size_t)n * 4 * NA), *ad = malloc((size_t)n * 4 * NA);
    char *wq = malloc((size_t)wb), *wq2 = malloc((size_t)wb), *aq = malloc((size_t)ab * NA);
    fill(w, n, 1);
    rt->from_float(w, wq, n);
    rt->to_float(wq, wd, n);
    /* this ISA's quantizer and dequantizer agree with ref */
    kt->from_float(w, wq2, n);
    CHECKF(!memcmp(wq, wq2, (size_t)wb), "%s/%s n=%lld: from_float differs from ref", tn, isa, (long long)n);
    kt->to_float(wq, wd2, n);
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&wd[i], &wd2[i], 4)) {   // NOLINT(bugprone-suspicious-memory-comparison): bitwise equality is what is tested
            test_fail(__FILE__, __LINE__, "%s/%s n=%lld: to_float[%lld] = %g, ref %g", tn, isa, (long long)n,
                      (long long)i, wd2[i], wd[i]);
            ok = 0;
            break;
        }
    for (int r = 0; r < NA; r++) {
        fill(a + r * n, n, 0);
        R->t[vdt].from_float(a + r * n, aq + r * ab, n);
        R->t[vdt].to_float(aq + r * ab, ad + r * n, n);
        if (kt->act_prep) {
            /* extras prepared in one go equal those prepared in pieces of 4 blocks (matmul's chunks) */
            const int64_t nbk = n / hachi_type_info(vdt)->blck_size;
            char *row = aq + r * ab;
            memset(row + ab0, 0xA5, (size_t)(ab - ab0));
            kt->act_prep(n, row, 0, nbk);
            char *once = malloc((size_t)(ab - ab0) + 1);   /* (+ 1: never malloc(0)) */
            memcpy(once, row + ab0, (size_t)(ab - ab0));
            memset(row + ab0, 0x5A, (size_t)(ab - ab0));
            for (int64_t b0 = 0; b0 < nbk; b0 += 4) kt->act_prep(n, row, b0, HACHI_MIN(b0 + 4, nbk));
            CHECKF(!memcmp(once, row + ab0, (size_t)(ab - ab0)), "%s/%s n=%lld: act_prep in pieces differs", tn, isa, (long long)n);
            free(once);
        }
    }
    float want[NA], single[NA];
    double exact[NA], tol[NA];
    for (int r = 0; r < NA; r++) {
        double sum = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) {
            sum += (double)wd[i] * ad[r * n + i];
            mag += fabs((double)wd[i] * ad[r * n + i]);
        }
        exact[r] = sum;
        tol[r] = KERNEL_EPS * mag + 1e-30;
        rt->vec_dot(n, &want[r], wq, aq + r * ab);
        float got;
        kt->vec_dot(n, &got, wq, aq + r * ab);
        single[r] = got;
        if (fabs((double)got - want[r]) > tol[r] || fabs((double)got - exact[r]) > tol[r]) {
            test_fail(__FILE__, __LINE__, "%s/%s n=%lld vec_dot row %d: got %.9g, ref %.9g, exact %.9g (tol %.3g)",
                      tn, isa, (long long)n, r, got, want[r], exact[r], tol[r]);
            ok = 0;
        }
    }
    static const int nas[] = {1, 3, 8, 16};
    for (size_t k = 0; k < sizeof nas / sizeof nas[0]; k++) {
        float s[NA + 1];
        s[nas[k]] = 12345.0f;   /* guard: must stay untouched */
        kt->vec_dot_multi(n, s, wq, aq, (size_t)ab, nas[k]);
        int worst = -1;
        double worst_err = 0;
        for (int r = 0; r < nas[k]; r++) {
            const double e = HACHI_MAX(fabs((double)s[r] - want[r]), fabs((double)s[r] - exact[r]));
            if (e > tol[r] && (worst < 0 || e / tol[r] > worst_err)) { worst = r; worst_err = e / tol[r]; }
        }
        if (worst >= 0) {
            test_fail(__FILE__, __LINE__, "%s/%s n=%lld vec_dot_multi na=%d: worst row %d got %.9g, ref %.9g, exact %.9g (tol %.3g)",
                      tn, isa, (long long)n, nas[k], worst, s[worst], want[worst], exact[worst], tol[worst]);
            ok = 0;
        }
        CHECKF(s[nas[k]] == 12345.0f, "%s/%s vec_dot_multi na=%d wrote past s[na-1]", tn, isa, nas[k]);
    }
    /* bitwise: row r of vec_dot_multi is exactly vec_dot of row r, for every na (prefill,
     * verify and decode must agree to the bit), including rows past the first group */
    for (int na = 1; na <= NA; na++) {
        float s[NA];
        kt->vec_dot_multi(n, s, wq, aq, (size_t)ab, na);
        for (int r = 0; r < na; r++)
            if (memcmp(&s[r], &single[r], sizeof(float))) {   // NOLINT(bugprone-suspicious-memory-comparison): bitwise equality is what is tested
                test_fail(__FILE__, __LINE__, "%s/%s n=%lld vec_dot_multi na=%d row %d: %.9g, vec_dot %.9g (not bitwise equal)",
                          tn, isa, (long long)n, na, r, s[r], single[r]);
                ok = 0;
                na = NA;
                break;
            }
    }
    free(w); free(wd); free(wd2); free(a); free(ad); free(wq); free(wq2); free(aq);
    return ok;
}

static void check_isa_all_types(const hachi_kernels *K) {
    const hachi_kernels *R = hachi_kernels_ref();
    static const int64_t sizes_f[] = {1, 7, 33, 100, 4096, 12288};
    static const int64_t sizes_32[] = {32, 96, 224, 4096, 12288};
    static const int64_t sizes_k[] = {256, 768, 1792, 4096, 12288};
    for (size_t t = 0; t < N_WEIGHT_TYPES; t++) {
        const uint32_t type = weight_types[t];
        const int32_t bs = hachi_type_info(type)->blck_size;
        const int64_t *sz = bs == 1 ? sizes_f : bs == 32 ? sizes_32 : sizes_k;
        const size_t nsz = bs == 1 ? 6 : 5;
        for (size_t i = 0; i < nsz; i++)
            if (!check_type(K, R, type, sz[i])) break;   /* one report per type is enough */
    }
    /* activation types: the ISA's quantizer must be byte-identical to ref */
    static const uint32_t act[] = {HACHI_TYPE_Q8_0, HACHI_TYPE_Q8_K, HACHI_TYPE_F32};
    for (size_t t = 0; t < 3; t++) {
        const int64_t n = 4096, b = row_bytes(act[t], n);
        float *x = malloc(n * 4);
        char *q1 = malloc((size_t)b), *q2 = malloc((size_t)b);
        fill(x, n, 1);
        R->t[act[t]].from_float(x, q1, n);
        CHECKF(K->t[act[t]].from_float != NULL, "%s/%s: no from_float", hachi_type_name(act[t]), K->name);
        if (K->t[act[t]].from_float) {
            K->t[act[t]].from_float(x, q2, n);
            CHECKF(!memcmp(q1, q2, (size_t)b), "%s/%s: activation quantizer differs from ref",
                   hachi_type_name(act[t]), K->name);
            /* a row gone non-finite (a diverged model): an infinity's or a NaN's value is 0 in every table */
            x[5] = INFINITY;
            x[300] = NAN;
            x[301] = -INFINITY;
            R->t[act[t]].from_float(x, q1, n);
            K->t[act[t]].from_float(x, q2, n);
            if (act[t] == HACHI_TYPE_Q8_0)
                CHECKF(((const block_q8_0 *)q1)->qs[5] == 0 && ((const block_q8_0 *)q1)[9].qs[12] == 0 &&
                       ((const block_q8_0 *)q1)[9].qs[13] == 0, "ref's q8_0 of an infinity or a NaN: %d", ((const block_q8_0 *)q1)->qs[5]);
            CHECKF(!memcmp(q1, q2, (size_t)b), "%s/%s: activation quantizer differs from ref on inf and NaN",
                   hachi_type_name(act[t]), K->name);
        }
        free(x); free(q1); free(q2);
    }
}

/* fp16 conversions (exhaustive) and the attention kernels of one ISA against double. */
static void check_fp16(const hachi_kernels *K) {
    uint16_t *h = malloc(65536 * 2), *h2 = malloc(65536 * 2);
    float *f = malloc(65536 * 4);
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    K->f16_to_f32(h, f, 65536);
    int bad = 0;
    for (int i = 0; i < 65536 && bad < 5; i++) {
        const float want = hachi_f16_to_f32((uint16_t)i);
        if (isnan(want) ? !isnan(f[i]) : memcmp(&want, &f[i], 4)) {   // NOLINT(bugprone-suspicious-memory-comparison): bitwise equality is what is tested
            test_fail(__FILE__, __LINE__, "%s f16_to_f32(0x%04x) = %g, want %g", K->name, i, f[i], want);
            bad++;
        }
    }
    /* every half's value must convert back to itself (NaNs excepted) */
    K->f32_to_f16(f, h2, 65536);
    for (int i = 0; i < 65536 && bad < 5; i++)
        if (!isnan(f[i]) && h2[i] != (uint16_t)i) {
            test_fail(__FILE__, __LINE__, "%s f32_to_f16(%g) = 0x%04x, want 0x%04x", K->name, f[i], h2[i], i);
            bad++;
        }
    /* random float bit patterns (rounding, overflow, subnormals), and odd lengths */
    enum { NR = 1 << 16 };
    float *x = malloc(NR * 4);
    uint16_t *hx = malloc(NR * 2);
    for (int i = 0; i < NR; i++) {
        uint32_t u = rng_u32();
        if (i & 1) u = (u & 0x8FFFFFFFu) | 0x30000000u;   /* bias towards the half range */
        memcpy(&x[i], &u, 4);
        if (isnan(x[i])) x[i] = 1.0f;
    }
    K->f32_to_f16(x, hx, NR - 3);
    for (int i = 0; i < NR - 3 && bad < 5; i++)
        if (hx[i] != hachi_f32_to_f16(x[i])) {
            test_fail(__FILE__, __LINE__, "%s f32_to_f16(%.9g) = 0x%04x, want 0x%04x", K->name, x[i], hx[i],
                      hachi_f32_to_f16(x[i]));
            bad++;
        }
    free(x); free(hx); free(h); free(h2); free(f);

    static const int64_t ns[] = {1, 7, 64, 100, 256, 512};
    static const int ms[] = {1, 3, 8, 13};
    for (size_t ni = 0; ni < 6; ni++)
        for (size_t mi = 0; mi < 4; mi++) {
            const int64_t n = ns[ni], stride = n + 5;
            const int m = ms[mi];
            uint16_t *k = malloc((size_t)n * 2);
            float *q = malloc((size_t)(stride * m) * 4), *y = malloc((size_t)(stride * m) * 4);
            double *yd = malloc((size_t)(stride * m) * sizeof(double));
            float s[16], av[16];
            for (int64_t i = 0; i < n; i++) k[i] = hachi_f32_to_f16(rng_unit());
            for (int64_t i = 0; i < stride * m; i++) { q[i] = rng_unit(); y[i] = rng_unit(); yd[i] = y[i]; }
            for (int j = 0; j < m; j++) av[j] = rng_unit();
            K->dot_f16_multi(n, s, k, q, stride, m);
            K->axpy_f16_multi(n, av, k, y, stride, m);
            for (int j = 0; j < m; j++) {
                double sum = 0, mag = 0, worst = 0, wtol = 0;
                int64_t wi = -1;
                for (int64_t i = 0; i < n; i++) {
                    const double kv = hachi_f16_to_f32(k[i]);
                    sum += kv * q[j * stride + i];
                    mag += fabs(kv * q[j * stride + i]);
                    const double want = yd[j * stride + i] + (double)av[j] * kv;
                    const double t = 4 * FLT_EPSILON * (fabs(yd[j * stride + i]) + fabs(av[j] * kv)) + 1e-30;
                    const double e = fabs(y[j * stride + i] - want);
                    if (e > t && e / t > worst) { worst = e / t; wi = i; wtol = t; }
                }
                CHECKF(fabs(s[j] - sum) <= F16_ATTN_EPS * mag + 1e-30,
                       "%s dot_f16_multi n=%lld m=%d row %d: got %.9g want %.9g", K->name, (long long)n, m, j, s[j], sum);
                CHECKF(wi < 0, "%s axpy_f16_multi n=%lld m=%d row %d: worst index %lld off by %.3g (tol %.3g)",
                       K->name, (long long)n, m, j, (long long)wi, worst * wtol, wtol);
                /* the padding between rows is untouched */
                for (int64_t i = n; i < stride; i++)
                    if (y[j * stride + i] != (float)yd[j * stride + i]) {
                        test_fail(__FILE__, __LINE__, "%s axpy_f16_multi wrote past row end", K->name);
                        break;
                    }
            }
            free(k); free(q); free(y); free(yd);
        }
}

/* The entries an ISA's file provides are its own, not its base table's: every weight dot
 * (NEON's int8 dots only with sdot), the x8 kernels, fp16 conversion, attention rows, the
 * activations and the softmax; on x86 the Q8_0 activation quantizer; on AVX-512 the float dots
 * and fp16 kernels are its 512-bit ones, not AVX2's. */
static void check_own_entries(const hachi_kernels *K) {
    const hachi_kernels *R = hachi_kernels_ref();
    const int x86 = K->isa == HACHI_ISA_AVX2 || K->isa == HACHI_ISA_AVX512 || K->isa == HACHI_ISA_AVXVNNI;
    int int8 = x86;
#if defined(__aarch64__)
    if (K->isa == HACHI_ISA_NEON) int8 = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
    for (size_t t = 0; t < N_WEIGHT_TYPES; t++) {
        const uint32_t type = weight_types[t];
        const hachi_type_kernels *k = &K->t[type], *r = &R->t[type];
        if (r->vec_dot_type != HACHI_TYPE_F32 && !int8) continue;
        CHECKF(k->vec_dot != r->vec_dot && k->vec_dot_multi != r->vec_dot_multi, "%s %s: vec_dot is ref's", K->name,
               hachi_type_name(type));
    }
    if (int8) {
        CHECKF(K->t[HACHI_TYPE_Q4_0].vec_dot_x8 && K->t[HACHI_TYPE_Q4_0].vec_dot_x8 != R->t[HACHI_TYPE_Q4_0].vec_dot_x8,
               "%s q4_0: vec_dot_x8 missing or ref's", K->name);
        CHECKF(K->t[HACHI_TYPE_Q4_K].vec_dot_x8 && K->t[HACHI_TYPE_Q4_K].vec_dot_x8 != R->t[HACHI_TYPE_Q4_K].vec_dot_x8,
               "%s q4_K: vec_dot_x8 missing or ref's", K->name);
    }
    /* the loader interleaves a type's rows wherever the table has vec_dot_x8: never for ref's scalar one */
    for (uint32_t type = 0; type < HACHI_TYPE_COUNT; type++)
        CHECKF(!K->t[type].vec_dot_x8 || K->t[type].vec_dot_x8 != R->t[type].vec_dot_x8, "%s %s: vec_dot_x8 is ref's",
               K->name, hachi_type_name(type));
    if (K->isa == HACHI_ISA_AVX512 || K->isa == HACHI_ISA_AVXVNNI)
        CHECKF(K->t[HACHI_TYPE_Q8_0].vec_dot_x8 && K->t[HACHI_TYPE_Q8_0].act_prep, "%s q8_0: no VNNI x8 kernel", K->name);
    CHECKF(K->f32_to_f16 != R->f32_to_f16 && K->f16_to_f32 != R->f16_to_f32 && K->dot_f16_multi != R->dot_f16_multi &&
           K->axpy_f16_multi != R->axpy_f16_multi, "%s: fp16 kernels are ref's", K->name);
    CHECKF(K->attn_scores_f16 != R->attn_scores_f16 && K->attn_values_f16 != R->attn_values_f16,
           "%s: attention tiles are ref's", K->name);
    CHECKF(K->gelu_mul != R->gelu_mul && K->softcap != R->softcap && K->attn_softmax != R->attn_softmax,
           "%s: activations or softmax are ref's", K->name);
    if (x86)
        CHECKF(K->t[HACHI_TYPE_Q8_0].from_float != R->t[HACHI_TYPE_Q8_0].from_float, "%s: q8_0 quantizer is ref's", K->name);
    const hachi_kernels *A = hachi_kernels_get(HACHI_ISA_AVX2);
    if (K->isa == HACHI_ISA_AVX512 && A) {
        static const uint32_t wide[] = {HACHI_TYPE_F32, HACHI_TYPE_F16, HACHI_TYPE_BF16};
        for (size_t t = 0; t < 3; t++)
            CHECKF(K->t[wide[t]].vec_dot != A->t[wide[t]].vec_dot && K->t[wide[t]].vec_dot_multi != A->t[wide[t]].vec_dot_multi,
                   "avx512 %s: vec_dot is AVX2's", hachi_type_name(wide[t]));
        CHECKF(K->dot_f16_multi != A->dot_f16_multi && K->axpy_f16_multi != A->axpy_f16_multi &&
               K->attn_scores_f16 != A->attn_scores_f16, "avx512: fp16 kernels are AVX2's");
        CHECKF(K->attn_scores_i8 && K->attn_scores_i8 != A->attn_scores_i8 && K->attn_values_i8 != A->attn_values_i8 &&
               K->attn_values_i8_hot != A->attn_values_i8_hot, "avx512: int8 attention tiles are AVX2's");
        CHECKF(K->t[HACHI_TYPE_Q4_0].vec_dot_x8 != A->t[HACHI_TYPE_Q4_0].vec_dot_x8 &&
               K->t[HACHI_TYPE_Q4_K].vec_dot_x8 != A->t[HACHI_TYPE_Q4_K].vec_dot_x8, "avx512: x8 kernels are AVX2's");
        CHECKF(K->t[HACHI_TYPE_Q6_K].vec_dot != A->t[HACHI_TYPE_Q6_K].vec_dot &&
               K->t[HACHI_TYPE_Q6_K].vec_dot_multi != A->t[HACHI_TYPE_Q6_K].vec_dot_multi, "avx512: q6_K is AVX2's");
    }
}

TEST(kernels_roundtrip) {
    const hachi_kernels *R = hachi_kernels_ref();
    static const uint32_t types[] = {HACHI_TYPE_F32, HACHI_TYPE_F16, HACHI_TYPE_BF16, HACHI_TYPE_Q8_0,
                                     HACHI_TYPE_Q4_0, HACHI_TYPE_Q4_1, HACHI_TYPE_Q5_0, HACHI_TYPE_Q4_K,
                                     HACHI_TYPE_Q5_K, HACHI_TYPE_Q6_K, HACHI_TYPE_Q8_K};
    const int64_t n = 8192;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    char *q = malloc((size_t)row_bytes(HACHI_TYPE_F32, n));
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const uint32_t type = types[t];
        CHECKF(row_bytes(type, n) > 0, "%s: row size", hachi_type_name(type));
        fill(x, n, 1);
        R->t[type].from_float(x, q, n);
        R->t[type].to_float(q, y, n);
        double err = 0, ref = 0, worst = 0;
        int64_t wi = 0;
        for (int64_t i = 0; i < n; i++) {
            err += (double)(x[i] - y[i]) * (x[i] - y[i]);
            ref += (double)x[i] * x[i];
            if (fabsf(x[i] - y[i]) > worst) { worst = fabsf(x[i] - y[i]); wi = i; }
            if (!isfinite(y[i])) { test_fail(__FILE__, __LINE__, "%s: y[%lld] not finite", hachi_type_name(type), (long long)i); break; }
        }
        for (int64_t i = QK_K; i < 2 * QK_K; i++)
            if (y[i] != 0) { test_fail(__FILE__, __LINE__, "%s: zero block dequantizes to %g", hachi_type_name(type), y[i]); break; }
        const double rel = sqrt(err / ref);
        CHECKF(rel <= format_eps(type), "%s: rms rel error %.4g > %.4g (worst index %lld: %g -> %g)",
               hachi_type_name(type), rel, format_eps(type), (long long)wi, x[wi], y[wi]);
    }
    free(x); free(y); free(q);
}

TEST(kernels_ref) {
    const hachi_kernels *R = hachi_kernels_ref();
    CHECK(R && R->isa == HACHI_ISA_REF && !strcmp(R->name, "ref"));
    check_isa_all_types(R);   /* against itself: checks the double-precision dot (b) */
}

TEST(kernels_avx2) {
#if defined(__x86_64__)
    const hachi_kernels *K = hachi_kernels_get(HACHI_ISA_AVX2);
    if (!K) SKIP("CPU lacks AVX2/FMA/F16C");
    CHECK(K->isa == HACHI_ISA_AVX2);
    check_own_entries(K);
    check_isa_all_types(K);
#else
    SKIP("not an x86-64 build");
#endif
}

TEST(kernels_avx512) {
#if defined(__x86_64__)
    const hachi_kernels *K = hachi_kernels_get(HACHI_ISA_AVX512);
    if (!K) SKIP("CPU lacks AVX-512");
    CHECK(K->isa == HACHI_ISA_AVX512);
    check_own_entries(K);
    check_isa_all_types(K);
#else
    SKIP("not an x86-64 build");
#endif
}

TEST(kernels_avxvnni) {
#if defined(__x86_64__)
    const hachi_kernels *K = hachi_kernels_get(HACHI_ISA_AVXVNNI), *A = hachi_kernels_get(HACHI_ISA_AVX2);
    if (!K) SKIP("CPU lacks AVX-VNNI");
    CHECK(K->isa == HACHI_ISA_AVXVNNI && A);
    check_own_entries(K);
    check_isa_all_types(K);
    CHECKF(A && K->t[HACHI_TYPE_Q4_0].vec_dot_x8 != A->t[HACHI_TYPE_Q4_0].vec_dot_x8 &&
               K->t[HACHI_TYPE_Q4_K].vec_dot_x8 != A->t[HACHI_TYPE_Q4_K].vec_dot_x8,
           "avxvnni: x8 kernels are AVX2's");
    static const uint32_t own[] = {HACHI_TYPE_Q8_0, HACHI_TYPE_Q5_K, HACHI_TYPE_Q6_K};   /* AVX2 has none */
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        CHECKF(K->t[own[i]].vec_dot_x8 != NULL, "avxvnni: no %s vec_dot_x8", hachi_type_name(own[i]));
#else
    SKIP("not an x86-64 build");
#endif
}

TEST(kernels_neon) {
#if defined(__aarch64__)
    const hachi_kernels *K = hachi_kernels_get(HACHI_ISA_NEON);
    CHECK(K != NULL);
    if (!K) return;
    CHECK(K->isa == HACHI_ISA_NEON);
    check_own_entries(K);
    check_isa_all_types(K);
    if (K->t[HACHI_TYPE_Q4_0].vec_dot_x8) {   /* the CPU has sdot: every interleaved type has its kernel */
        static const uint32_t x8[] = {HACHI_TYPE_Q8_0, HACHI_TYPE_Q4_K, HACHI_TYPE_Q5_K, HACHI_TYPE_Q6_K};
        for (size_t i = 0; i < sizeof x8 / sizeof x8[0]; i++)
            CHECKF(K->t[x8[i]].vec_dot_x8 != NULL, "neon: no %s vec_dot_x8", hachi_type_name(x8[i]));
    }
    /* with i8mm (qemu's default CPU has it) the GEMMs but Q6_K's are smmla's (where sdot's took
     * fewer instructions, sdot's stay: the x8 kernels, Q6_K's GEMM); the sdot table stays testable
     * (check_x8 and check_gemm run both bitwise against ref) */
    const hachi_kernels *S = hachi_kernels_neon_sdot();
    const bool i8mm = (getauxval(AT_HWCAP2) & (1 << 13)) != 0;   /* HWCAP2_I8MM */
    CHECKF((S != NULL) == (i8mm && K->t[HACHI_TYPE_Q4_0].vec_dot_x8), "neon: the sdot table %s with i8mm %d",
           S ? "exists" : "is missing", (int)i8mm);
    if (S) {
        check_own_entries(S);
        static const uint32_t mm[] = {HACHI_TYPE_Q4_0, HACHI_TYPE_Q8_0, HACHI_TYPE_Q4_K, HACHI_TYPE_Q5_K};
        for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++)
            CHECKF(S->t[mm[i]].gemm_x8 && S->t[mm[i]].gemm_x8 != K->t[mm[i]].gemm_x8, "neon: no i8mm %s gemm_x8",
                   hachi_type_name(mm[i]));
    }
#else
    SKIP("not an aarch64 build");
#endif
}

/* The checks shared by the interleaved layouts, on 8 weight rows w (file layout, rb bytes
 * apart) of n elements and 16 activation rows a (vec_dot_type, ab bytes apart, no extras):
 * repack/unpack round trip; ref's vec_dot_x8 against ref's vec_dot of the file layout within
 * KERNEL_EPS; every table's vec_dot_x8 equal to ref's bit for bit for na = 1..16 (with its
 * own activation extras, the same quantized bytes). Returns how many x86 tables ran it. */
typedef void (*repack_fn)(const void *, uint64_t, void *, int64_t);
typedef void (*unpack_fn)(const void *, int, void *, int64_t);
static repack_fn x8_repack(uint32_t type) {
    switch (type) {
    case HACHI_TYPE_Q8_0: return hachi_repack_q8_0_x8;
    case HACHI_TYPE_Q4_K: return hachi_repack_q4_K_x8;
    case HACHI_TYPE_Q5_K: return hachi_repack_q5_K_x8;
    case HACHI_TYPE_Q6_K: return hachi_repack_q6_K_x8;
    default: return hachi_repack_q4_0_x8;
    }
}
static unpack_fn x8_unpack(uint32_t type) {
    switch (type) {
    case HACHI_TYPE_Q8_0: return hachi_unpack_q8_0_x8;
    case HACHI_TYPE_Q4_K: return hachi_unpack_q4_K_x8;
    case HACHI_TYPE_Q5_K: return hachi_unpack_q5_K_x8;
    case HACHI_TYPE_Q6_K: return hachi_unpack_q6_K_x8;
    default: return hachi_unpack_q4_0_x8;
    }
}

static int check_x8(uint32_t type, int64_t n, const char *w, int64_t rb, const char *a, size_t ab, int variant) {
    const hachi_kernels *R = hachi_kernels_ref();
    const uint32_t vdt = R->t[type].vec_dot_type;
    const repack_fn repack = x8_repack(type);
    const unpack_fn unpack = x8_unpack(type);
    const char *name = hachi_type_name(type);
    char *w8 = malloc((size_t)rb * 8), *back = malloc((size_t)rb), *ax = malloc((ab + 4096) * 16);
    float *wf = malloc((size_t)n * sizeof(float)), *af = malloc((size_t)n * sizeof(float)), got[128], want[128];
    int x86 = 0;
    repack(w, (uint64_t)rb, w8, n);
    int bad_rt = 0;
    for (int j = 0; j < 8; j++) {
        unpack(w8, j, back, n);
        bad_rt += memcmp(back, w + j * rb, (size_t)rb) != 0;
    }
    CHECKF(bad_rt == 0, "%s x8 n=%lld: %d rows differ after repack + unpack", name, (long long)n, bad_rt);
    R->t[type].vec_dot_x8(n, want, w8, a, ab, 16);
    int bad_ref = 0;
    for (int t = 0; t < 16; t++)
        for (int j = 0; j < 8; j++) {
            float d, norm = 0;
            R->t[type].vec_dot(n, &d, w + j * rb, a + t * ab);
            R->t[type].to_float(w + j * rb, wf, n);
            R->t[vdt].to_float(a + t * ab, af, n);
            for (int64_t i = 0; i < n; i++) norm += fabsf(wf[i] * af[i]);
            bad_ref += !(fabsf(want[8 * t + j] - d) <= KERNEL_EPS * norm);
        }
    CHECKF(bad_ref == 0, "ref %s x8 n=%lld variant %d: %d sums off ref's vec_dot", name, (long long)n, variant, bad_ref);
    for (int isa = 0; isa <= HACHI_ISA_COUNT; isa++) {   /* and NEON's sdot table where i8mm replaced it */
        const hachi_kernels *K = isa < HACHI_ISA_COUNT ? hachi_kernels_get((hachi_isa)isa) : hachi_kernels_neon_sdot();
        if (!K || !K->t[type].vec_dot_x8) continue;
        x86 += isa == HACHI_ISA_AVX2 || isa == HACHI_ISA_AVX512 || isa == HACHI_ISA_AVXVNNI;
        const hachi_type_kernels *kt = &K->t[type];
        const size_t st = ab + (kt->act_extra ? kt->act_extra(n) : 0);
        for (int t = 0; t < 16; t++) {
            memcpy(ax + t * st, a + t * ab, ab);
            if (kt->act_prep) kt->act_prep(n, ax + t * st, 0, n / hachi_type_info(vdt)->blck_size);
        }
        int bad = 0, at = -1;
        for (int na = 1; na <= 16; na++) {
            for (int i = 0; i < 128; i++) got[i] = NAN;
            kt->vec_dot_x8(n, got, w8, ax, st, na);
            for (int i = 0; i < 8 * na; i++)
                if (memcmp(&got[i], &want[i], sizeof(float))) { bad++; if (at < 0) at = 1000 * na + i; }   // NOLINT(bugprone-suspicious-memory-comparison): bitwise equality is what is tested
            for (int i = 8 * na; i < 128; i++) bad += !isnan(got[i]);
        }
        CHECKF(bad == 0, "%s %s x8 n=%lld variant %d: %d sums not bitwise ref's (first na*1000+i %d)",
               K->name, name, (long long)n, variant, bad, at);
    }
    free(w8); free(back); free(ax); free(wf); free(af);
    return x86;
}

/* The prefill GEMM (gemm_x8 or gemm_x8_all, where a table has one for the type) on GEMM_GROUPS
 * groups of 8 rows (w8, interleaved, gb bytes a group) and 16 activation rows a (ab bytes apart,
 * no extras): for n_groups 1..GEMM_GROUPS and nt 1..16 (1..GEMM_ALL_TOK for gemm_x8_all, token t
 * then being row gemm_src(t) of a), every output bitwise ref's vec_dot_x8 and nothing written
 * past the nt tokens and 8*n_groups rows. Five groups: a kernel that takes groups in pairs meets
 * more than one pair and a lone group. Returns how many tables ran it. */
enum { GEMM_GROUPS = 5, GEMM_ALL_TOK = 57 };   /* past the AMX tables' largest threshold (48), with a partial tile */
/* the 16 rows in another order in each tile of 16 tokens, so that no two tiles match */
static int gemm_src(int t) { return (5 * t + t / 16) % 16; }
static int check_gemm(uint32_t type, int64_t n, const char *w8, size_t gb, const char *a, size_t ab) {
    const hachi_kernels *R = hachi_kernels_ref();
    const uint32_t vdt = R->t[type].vec_dot_type;
    enum { LDY = 8 * GEMM_GROUPS + 3 };
    float want[GEMM_GROUPS][128], y[GEMM_ALL_TOK * LDY];
    for (int g = 0; g < GEMM_GROUPS; g++) R->t[type].vec_dot_x8(n, want[g], w8 + g * gb, a, ab, 16);
    int ran = 0;
    for (int isa = 0; isa <= HACHI_ISA_COUNT; isa++) {   /* and NEON's sdot table where i8mm replaced it */
        const hachi_kernels *K = isa < HACHI_ISA_COUNT ? hachi_kernels_get((hachi_isa)isa) : hachi_kernels_neon_sdot();
        if (!K || (!K->t[type].gemm_x8 && !K->t[type].gemm_x8_all)) continue;
        const hachi_type_kernels *kt = &K->t[type];
        ran++;
        const size_t st = ab + (kt->act_extra ? kt->act_extra(n) : 0);
        const int max_nt = kt->gemm_x8_all ? GEMM_ALL_TOK : 16;
        CHECKF(!kt->gemm_x8_all || !kt->gemm_x8, "%s %s: both gemm_x8 and gemm_x8_all", K->name, hachi_type_name(type));
        char *ax = malloc(st * (size_t)max_nt);
        for (int t = 0; t < max_nt; t++) {
            memcpy(ax + t * st, a + gemm_src(t) * ab, ab);
            if (kt->act_prep) kt->act_prep(n, ax + t * st, 0, n / hachi_type_info(vdt)->blck_size);
        }
        /* a table whose GEMM takes packed activations gets the tiles of the nt tokens (and gemm_x8_all
         * the rows too) */
        CHECKF(!kt->act_pack == !kt->act_pack_bytes, "%s %s: act_pack and act_pack_bytes come together", K->name,
               hachi_type_name(type));
        const size_t pb = kt->act_pack_bytes ? kt->act_pack_bytes(n) : 0;
        char *pk = pb ? malloc(pb * (size_t)((max_nt + 15) / 16)) : NULL;
        int bad = 0, at = -1;
        for (int nt = 1; nt <= max_nt; nt++) {
            const bool packed = pk && nt >= kt->act_pack_min;   /* as matmul.c packs */
            if (packed) {
                memset(pk, 0x5a, pb * (size_t)((max_nt + 15) / 16));
                for (int t0 = 0; t0 < nt; t0 += 8)   /* in halves, as matmul.c packs */
                    kt->act_pack(n, ax + (size_t)t0 * st, st, t0 % 16, nt - t0 < 8 ? nt - t0 : 8,
                                 nt - t0 / 16 * 16 < 16 ? nt - t0 / 16 * 16 : 16, pk + pb * (size_t)(t0 / 16));
            }
            for (int ng = 1; ng <= GEMM_GROUPS; ng++) {
                for (int i = 0; i < max_nt * LDY; i++) y[i] = NAN;
                if (kt->gemm_x8_all) kt->gemm_x8_all(n, y, LDY, w8, ng, ax, st, packed ? pk : NULL, nt);
                else kt->gemm_x8(n, y, LDY, w8, ng, packed ? pk : ax, st, nt);
                for (int t = 0; t < max_nt; t++)
                    for (int r = 0; r < LDY; r++) {
                        const float *g = &y[t * LDY + r];
                        const int in = t < nt && r < 8 * ng;
                        const int ok = in ? !memcmp(g, &want[r / 8][8 * gemm_src(t) + r % 8], sizeof(float)) : isnan(*g);   // NOLINT(bugprone-suspicious-memory-comparison): bitwise equality is what is tested
                        if (!ok) { bad++; if (at < 0) at = 10000 * nt + 100 * ng + r; }
                    }
            }
        }
        CHECKF(bad == 0, "%s %s gemm_x8 n=%lld: %d outputs not bitwise ref's or written out of range (first nt*10000+ng*100+row %d)",
               K->name, hachi_type_name(type), (long long)n, bad, at);
        free(ax);
        free(pk);
    }
    return ran;
}

/* check_gemm on GEMM_GROUPS groups of the 8 rows at w (file layout, rb bytes apart): as they are,
 * reversed, rotated by 3, 5 and 6; says how many tables have the GEMM when say is set. */
static void check_gemm_groups(uint32_t type, int64_t n, const char *w, int64_t rb, const char *a, size_t ab, bool say) {
    enum { ROWS = 8 * GEMM_GROUPS };
    char *wg = malloc((size_t)rb * ROWS), *w8 = malloc((size_t)rb * ROWS);
    static const int rot[GEMM_GROUPS] = {0, 0, 3, 5, 6};
    for (int j = 0; j < ROWS; j++) {
        const int g = j / 8, src = g == 1 ? 7 - j % 8 : (j + rot[g]) % 8;
        memcpy(wg + (size_t)j * rb, w + (size_t)src * rb, (size_t)rb);
    }
    for (int g = 0; g < GEMM_GROUPS; g++) x8_repack(type)(wg + g * 8 * rb, (uint64_t)rb, w8 + g * 8 * rb, n);
    const int ran = check_gemm(type, n, w8, (size_t)rb * 8, a, ab);
    if (say) printf("    %s gemm_x8: %d table(s) have it\n", hachi_type_name(type), ran);
    free(wg); free(w8);
}

/* The float GEMM (gemm, rows in the file's layout: F32, F16, BF16) of every table that has one:
 * for 1..7 rows and 1..16 tokens at sizes with every tail of its loops (a 64-element body, then
 * 16 at a time, then scalar), each output bitwise the same table's vec_dot on that row and
 * token, and nothing written past the rows and tokens asked for. Returns how many tables ran. */
static int check_float_gemm(uint32_t type, int64_t n) {
    enum { ROWS = 7, LDY = 9, NT = 16 };
    const size_t rb = (size_t)row_bytes(type, n), ab = (size_t)n * sizeof(float);
    char *w = malloc(rb * ROWS);
    float *a = malloc(ab * NT), *x = malloc(ab), want[ROWS][NT], y[NT * LDY];
    const hachi_kernels *R = hachi_kernels_ref();
    for (int r = 0; r < ROWS; r++) {
        fill(x, n, 0);
        R->t[type].from_float(x, w + r * rb, n);
    }
    for (int t = 0; t < NT; t++) fill(a + (size_t)t * n, n, 0);
    int ran = 0;
    for (int isa = 0; isa < HACHI_ISA_COUNT; isa++) {
        const hachi_kernels *K = hachi_kernels_get((hachi_isa)isa);
        if (!K || !K->t[type].gemm) continue;
        const hachi_type_kernels *kt = &K->t[type];
        ran++;
        for (int r = 0; r < ROWS; r++)
            for (int t = 0; t < NT; t++) kt->vec_dot(n, &want[r][t], w + r * rb, a + (size_t)t * n);
        int bad = 0, at = -1;
        for (int nt = 1; nt <= NT; nt++)
            for (int nr = 1; nr <= ROWS; nr++) {
                for (int i = 0; i < NT * LDY; i++) y[i] = NAN;
                kt->gemm(n, y, LDY, w, rb, nr, a, ab, nt);
                for (int t = 0; t < NT; t++)
                    for (int r = 0; r < LDY; r++) {
                        const float *g = &y[t * LDY + r];
                        const int in = t < nt && r < nr;
                        const int ok = in ? !memcmp(g, &want[r][t], sizeof(float)) : isnan(*g);   // NOLINT(bugprone-suspicious-memory-comparison): bitwise equality is what is tested
                        if (!ok) { bad++; if (at < 0) at = 10000 * nt + 100 * nr + r; }
                    }
            }
        CHECKF(bad == 0, "%s %s gemm n=%lld: %d outputs not bitwise vec_dot's or written out of range (first nt*10000+rows*100+row %d)",
               K->name, hachi_type_name(type), (long long)n, bad, at);
    }
    free(w); free(a); free(x);
    return ran;
}

TEST(kernels_float_gemm) {
    static const uint32_t types[] = {HACHI_TYPE_F32, HACHI_TYPE_F16, HACHI_TYPE_BF16};
    static const int64_t sizes[] = {13, 64, 64 + 32 + 5, 1536};
#if defined(__x86_64__)
    static const hachi_isa with_gemm[] = {HACHI_ISA_AVX2, HACHI_ISA_AVX512};
#elif defined(__aarch64__)
    static const hachi_isa with_gemm[] = {HACHI_ISA_NEON};
#endif
#if defined(__x86_64__) || defined(__aarch64__)
    for (size_t i = 0; i < sizeof with_gemm / sizeof with_gemm[0]; i++) {
        const hachi_kernels *K = hachi_kernels_get(with_gemm[i]);
        if (K) CHECKF(K->t[HACHI_TYPE_F16].gemm && K->t[HACHI_TYPE_BF16].gemm && K->t[HACHI_TYPE_F32].gemm,
                      "%s: a float type has no GEMM", K->name);
    }
#endif
    int total = 0;
    for (size_t ti = 0; ti < 3; ti++) {
        int ran = 0;
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) ran = check_float_gemm(types[ti], sizes[si]);
        printf("    %s gemm: %d table(s) have it\n", hachi_type_name(types[ti]), ran);
        total += ran;
    }
    if (!total) SKIP("no kernel table of this build has a float GEMM");
}

/* Interleaved q4_0 rows (block_q4_0x8), check_x8 on variants 0 random, 1, 2 the int16
 * extremes (all nibbles 15 against all +127 / -127); check_gemm on GEMM_GROUPS groups of random rows. */
TEST(kernels_q4_0_x8) {
    const hachi_kernels *R = hachi_kernels_ref();
    static const int64_t sizes[] = {32, 64, 96, 1536, 1536 + 32};   /* odd and even block counts */
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int extreme = 0; extreme < 3; extreme++) {
            const int64_t n = sizes[si], rb = row_bytes(HACHI_TYPE_Q4_0, n);
            const size_t ab = (size_t)row_bytes(HACHI_TYPE_Q8_0, n);
            char *w = malloc((size_t)rb * 8), *a = malloc(ab * 16);
            float *x = malloc((size_t)n * sizeof(float));
            for (int j = 0; j < 8; j++) {
                fill(x, n, 0);
                if (extreme) for (int64_t i = 0; i < n; i++) x[i] = i % 32 ? -1.0f : 8.0f / 7.0f;   /* nibble 15 */
                R->t[HACHI_TYPE_Q4_0].from_float(x, w + j * rb, n);
            }
            for (int t = 0; t < 16; t++) {
                fill(x, n, 0);
                if (extreme) for (int64_t i = 0; i < n; i++) x[i] = extreme == 1 ? 1.0f : -1.0f;   /* +-127 */
                R->t[HACHI_TYPE_Q8_0].from_float(x, a + t * ab, n);
            }
            check_x8(HACHI_TYPE_Q4_0, n, w, rb, a, ab, extreme);
            if (extreme == 0) {   /* GEMM_GROUPS groups: these 8 rows, then more */
                enum { ROWS = 8 * GEMM_GROUPS };
                char *wg = malloc((size_t)rb * ROWS), *w8 = malloc((size_t)rb * ROWS);
                memcpy(wg, w, (size_t)rb * 8);
                for (int j = 8; j < ROWS; j++) {
                    fill(x, n, 0);
                    R->t[HACHI_TYPE_Q4_0].from_float(x, wg + j * rb, n);
                }
                for (int g = 0; g < GEMM_GROUPS; g++) hachi_repack_q4_0_x8(wg + g * 8 * rb, (uint64_t)rb, w8 + g * 8 * rb, n);
                const int ran = check_gemm(HACHI_TYPE_Q4_0, n, w8, (size_t)rb * 8, a, ab);
                if (si == 0) printf("    q4_0 gemm_x8: %d table(s) have it\n", ran);
                free(wg); free(w8);
            }
            free(w); free(a); free(x);
        }
}

static void q8_K_bsums(block_q8_K *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++)
        for (int k = 0; k < QK_K / 16; k++) {
            int sum = 0;
            for (int e = 0; e < 16; e++) sum += y[b].qs[16 * k + e];
            y[b].bsums[k] = (int16_t)sum;
        }
}

/* 16 Q8_K activation rows of n at a (ab bytes apart): mode 0 quantized random floats; 1, 2 all
 * +127 / lo; 3 random lo..127, with their bsums */
static void fill_q8_K_rows(char *a, size_t ab, int64_t n, int mode, int lo) {
    float *x = malloc((size_t)n * sizeof(float));
    for (int t = 0; t < 16; t++) {
        block_q8_K *yb = (block_q8_K *)(a + t * ab);
        if (mode == 0) {
            fill(x, n, 0);
            hachi_kernels_ref()->t[HACHI_TYPE_Q8_K].from_float(x, yb, n);
            continue;
        }
        for (int64_t b = 0; b < n / QK_K; b++) {
            yb[b].d = ldexpf(1.0f + (float)(rng_u32() % 1024) / 1024.0f, -8);
            for (int e = 0; e < QK_K; e++)
                yb[b].qs[e] = (int8_t)(mode == 1 ? 127 : mode == 2 ? lo : (int)(rng_u32() % (unsigned)(128 - lo)) + lo);
        }
        q8_K_bsums(yb, n / QK_K);
    }
    free(x);
}

/* Block b of a q4_K or q5_K row, mode 1, 2: the extremes (every value 15 (q4_K) or 31, every
 * scale and min 63, dmin <= d: no cancellation); mode 3: random bytes (every scale/min bit
 * pattern, every value). d, dmin in [2^-10, 2^-6). */
static void fill_kquant_block(uint32_t type, char *row, int64_t b, int mode) {
    hachi_half *d, *dmin;
    uint8_t *scales, *qs, *qh = NULL;
    if (type == HACHI_TYPE_Q5_K) {
        block_q5_K *x = (block_q5_K *)row + b;
        d = &x->d, dmin = &x->dmin, scales = x->scales, qs = x->qs, qh = x->qh;
    } else {
        block_q4_K *x = (block_q4_K *)row + b;
        d = &x->d, dmin = &x->dmin, scales = x->scales, qs = x->qs;
    }
    *d = hachi_f32_to_f16(ldexpf(1.0f + (float)(rng_u32() % 1024) / 1024.0f, -10 + (int)(rng_u32() % 4)));
    *dmin = mode == 3 ? hachi_f32_to_f16(ldexpf(1.0f + (float)(rng_u32() % 1024) / 1024.0f, -10 + (int)(rng_u32() % 4)))
                      : hachi_f32_to_f16(hachi_f16_to_f32(*d) / 4);
    for (int k = 0; k < K_SCALE_SIZE; k++) scales[k] = mode == 3 ? (uint8_t)rng_u32() : 0xFF;
    for (int k = 0; k < QK_K / 2; k++) qs[k] = mode == 3 ? (uint8_t)rng_u32() : 0xFF;
    for (int k = 0; qh && k < QK_K / 8; k++) qh[k] = mode == 3 ? (uint8_t)rng_u32() : 0xFF;
}

/* Interleaved q4_K or q5_K rows (block_q4_Kx8, block_q5_Kx8), check_x8 on variants 0
 * quantized random floats; 1, 2 the extremes of fill_kquant_block against activations all
 * +127 / -127; 3 random bytes against activations -127..127; check_gemm on GEMM_GROUPS groups of
 * variants 0 and 3. Returns how many x86 tables ran check_x8. */
static int check_kquant_x8(uint32_t type) {
    const hachi_kernels *R = hachi_kernels_ref();
    static const int64_t sizes[] = {256, 768, 2304};
    int x86_x8 = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int mode = 0; mode < 4; mode++) {
            const int64_t n = sizes[si], nb = n / QK_K, rb = row_bytes(type, n);
            const size_t ab = (size_t)row_bytes(HACHI_TYPE_Q8_K, n);
            char *w = calloc(8, (size_t)rb), *a = calloc(16, ab);
            float *x = malloc((size_t)n * sizeof(float));
            for (int j = 0; j < 8; j++) {
                if (mode == 0) {
                    fill(x, n, 0);
                    R->t[type].from_float(x, w + j * rb, n);
                    continue;
                }
                for (int64_t b = 0; b < nb; b++) fill_kquant_block(type, w + j * rb, b, mode);
            }
            fill_q8_K_rows(a, ab, n, mode, -127);
            x86_x8 += check_x8(type, n, w, rb, a, ab, mode);
            if (mode == 0 || mode == 3) check_gemm_groups(type, n, w, rb, a, ab, si == 0 && mode == 0);
            free(w); free(a); free(x);
        }
    return x86_x8;
}

TEST(kernels_q4_K_x8) {
    /* the AVX2 table (and AVX-512's, its copy) must have the kernel where this CPU runs it */
    CHECKF(check_kquant_x8(HACHI_TYPE_Q4_K) > 0 || !hachi_kernels_get(HACHI_ISA_AVX2), "no x86 q4_K vec_dot_x8 was tested");
}

TEST(kernels_q5_K_x8) {
    CHECKF(check_kquant_x8(HACHI_TYPE_Q5_K) > 0 || !hachi_kernels_get(HACHI_ISA_AVX512), "no x86 q5_K vec_dot_x8 was tested");
}

/* Interleaved q8_0 rows (block_q8_0x8), check_x8 on variants 0 quantized random floats; 1, 2
 * the int32 extremes (weights -128 (a file may hold it, the quantizer never writes it) and
 * +127 alternating by row, activations all +127 / -128); 3 random bytes (weights and
 * activations -128..127, random scales); check_gemm on GEMM_GROUPS groups of variants 0 and 3. */
TEST(kernels_q8_0_x8) {
    const hachi_kernels *R = hachi_kernels_ref();
    static const int64_t sizes[] = {32, 64, 96, 1536 + 32};   /* odd and even block counts */
    int x86_x8 = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int mode = 0; mode < 4; mode++) {
            const int64_t n = sizes[si], nb = n / QK8_0, rb = row_bytes(HACHI_TYPE_Q8_0, n);
            const size_t ab = (size_t)rb;
            char *w = calloc(8, (size_t)rb), *a = calloc(16, ab);
            float *x = malloc((size_t)n * sizeof(float));
            for (int j = 0; j < 24; j++) {   /* 8 weight rows, then 16 activation rows */
                block_q8_0 *blk = (block_q8_0 *)(j < 8 ? w + j * rb : a + (j - 8) * ab);
                if (mode == 0) {
                    fill(x, n, 0);
                    R->t[HACHI_TYPE_Q8_0].from_float(x, blk, n);
                    continue;
                }
                for (int64_t b = 0; b < nb; b++) {
                    blk[b].d = hachi_f32_to_f16(ldexpf(1.0f + (float)(rng_u32() % 1024) / 1024.0f, -10 + (int)(rng_u32() % 4)));
                    for (int e = 0; e < QK8_0; e++)
                        blk[b].qs[e] = (int8_t)(mode == 3 ? (int)(rng_u32() % 256) - 128
                                                : j < 8 ? (j % 2 ? 127 : -128) : mode == 1 ? 127 : -128);
                }
            }
            x86_x8 += check_x8(HACHI_TYPE_Q8_0, n, w, rb, a, ab, mode);
            if (mode == 0 || mode == 3) check_gemm_groups(HACHI_TYPE_Q8_0, n, w, rb, a, ab, si == 0 && mode == 0);
            free(w); free(a); free(x);
        }
    /* a VNNI table must have run it where this CPU has one */
    CHECKF(!(hachi_kernels_get(HACHI_ISA_AVX512) || hachi_kernels_get(HACHI_ISA_AVXVNNI)) || x86_x8 > 0,
           "no x86 q8_0 vec_dot_x8 was tested");
}

/* Interleaved q6_K rows (block_q6_Kx8), check_x8 on variants 0 quantized random floats; 1, 2
 * the int32 extremes (every value 63, scales -128 and +127 alternating by row, activations
 * all +127 / -128); 3 random bytes (ql, qh, scales, activations -128..127); check_gemm on 3
 * groups of variants 0 and 3. */
TEST(kernels_q6_K_x8) {
    const hachi_kernels *R = hachi_kernels_ref();
    static const int64_t sizes[] = {256, 768, 1536};
    int x86_x8 = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int mode = 0; mode < 4; mode++) {
            const int64_t n = sizes[si], nb = n / QK_K, rb = row_bytes(HACHI_TYPE_Q6_K, n);
            const size_t ab = (size_t)row_bytes(HACHI_TYPE_Q8_K, n);
            char *w = malloc((size_t)rb * 8), *a = malloc(ab * 16);
            float *x = malloc((size_t)n * sizeof(float));
            for (int j = 0; j < 8; j++) {
                block_q6_K *wb = (block_q6_K *)(w + j * rb);
                if (mode == 0) {
                    fill(x, n, 0);
                    R->t[HACHI_TYPE_Q6_K].from_float(x, wb, n);
                    continue;
                }
                for (int64_t b = 0; b < nb; b++) {
                    wb[b].d = hachi_f32_to_f16(ldexpf(1.0f + (float)(rng_u32() % 1024) / 1024.0f, -10 + (int)(rng_u32() % 4)));
                    for (int k = 0; k < QK_K / 16; k++) wb[b].scales[k] = (int8_t)(mode == 3 ? (int)(rng_u32() % 256) - 128 : j % 2 ? 127 : -128);
                    for (int k = 0; k < QK_K / 2; k++) wb[b].ql[k] = mode == 3 ? (uint8_t)rng_u32() : 0xFF;
                    for (int k = 0; k < QK_K / 4; k++) wb[b].qh[k] = mode == 3 ? (uint8_t)rng_u32() : 0xFF;
                }
            }
            fill_q8_K_rows(a, ab, n, mode, -128);
            x86_x8 += check_x8(HACHI_TYPE_Q6_K, n, w, rb, a, ab, mode);
            if (mode == 0 || mode == 3) check_gemm_groups(HACHI_TYPE_Q6_K, n, w, rb, a, ab, si == 0 && mode == 0);
            free(w); free(a); free(x);
        }
    CHECKF(!hachi_kernels_get(HACHI_ISA_AVX512) || x86_x8 > 0, "no x86 q6_K vec_dot_x8 was tested");
}

/* Every table's quantizer of type (an activation type) on the n values x, block by block the
 * same bytes as ref's */
static void check_quantizer(uint32_t type, const float *x, int64_t n) {
    const hachi_type_traits *ti = hachi_type_info(type);
    const size_t bs = (size_t)ti->type_size;
    const int64_t nb = n / ti->blck_size;
    char *want = malloc(bs * (size_t)nb), *got = malloc(bs * (size_t)nb);
    hachi_kernels_ref()->t[type].from_float(x, want, n);
    for (int i = 0; i < HACHI_ISA_COUNT; i++) {
        const hachi_kernels *K = hachi_kernels_get((hachi_isa)i);
        if (!K) continue;
        K->t[type].from_float(x, got, n);
        for (int64_t b = 0; b < nb; b++)
            CHECKF(!memcmp(want + b * bs, got + b * bs, bs), "%s: %s from_float block %lld differs from ref", K->name,
                   ti->name, (long long)b);
    }
    free(want); free(got);
}

/* The activation quantizers match ref to the byte on rounding ties (x * id exactly k + 0.5:
 * roundf rounds away from zero), zero blocks, and large and tiny magnitudes. */
TEST(kernels_q8_0_quantize_ties) {
    enum { N = 32 * 6 };
    float x[N];
    for (int i = 0; i < 32; i++) x[i] = (i == 0 ? 127.0f : (float)(i * 4 - 64) + (i & 1 ? 0.5f : -0.5f));  /* d = 1: ties */
    for (int i = 32; i < 64; i++) x[i] = (i == 32 ? -127.0f : -(float)(i - 32) * 3.5f);                  /* d = 1, negative ties */
    for (int i = 64; i < 96; i++) x[i] = 0.0f;                                                           /* zero block */
    for (int i = 96; i < 128; i++) x[i] = (float)((i * 7919) % 255 - 127) * 1e-30f;                      /* tiny */
    for (int i = 128; i < 160; i++) x[i] = (float)((i * 104729) % 255 - 127) * 1e30f;                    /* huge */
    for (int i = 160; i < N; i++) x[i] = (float)(i - 176) * 0.25f * 127.0f / 16.0f;                      /* quarter steps */
    check_quantizer(HACHI_TYPE_Q8_0, x, N);
}

/* q8_K quantizers against ref's on the blocks where the rules show: the signed maximum is the first
 * value of the largest magnitude (-127 before +127: iscale 1), halves that round to even, a zero
 * block, the opposite order (+8 before -8), tiny and huge values. */
TEST(kernels_q8_K_quantize_ties) {
    enum { N = 256 * 5 };
    static float x[N];
    for (int i = 0; i < 256; i++) x[i] = i == 0 ? -127.0f : i == 1 ? 127.0f : (float)(i % 200 - 100) + 0.5f;   /* ties */
    for (int i = 256; i < 512; i++) x[i] = 0.0f;
    for (int i = 512; i < 768; i++) x[i] = i == 520 ? 8.0f : i == 530 ? -8.0f : (float)(i % 31 - 15) * 0.5f;
    for (int i = 768; i < 1024; i++) x[i] = (float)((i * 7919) % 255 - 127) * 1e-30f;
    for (int i = 1024; i < N; i++) x[i] = (float)((i * 104729) % 255 - 127) * 1e30f;
    check_quantizer(HACHI_TYPE_Q8_K, x, N);   /* block_q8_K has no padding: 4 + 256 + 32 bytes */
}

/* gelu_mul and softcap of every table against ref's libm tanhf over -30..30, tiny, huge and
 * awkward lengths (the n % 8 tail): relative 4e-6, plus 2.5e-7 |x g| for 1 + tanh near -1. */
TEST(kernels_activations) {
    const hachi_kernels *R = hachi_kernels_ref();
    enum { N = 4099 };
    float *x = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
    float *want = malloc(N * sizeof(float)), *got = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) {
        x[i] = i < 4000 ? -30.0f + 60.0f * (float)i / 4000.0f : rng_unit() * ldexpf(1.0f, (int)(rng_u32() % 60) - 40);
        g[i] = i % 3 ? rng_unit() * 4.0f : 1.0f;
    }
    x[4001] = 0.0f; x[4002] = -0.0f; x[4003] = 1e30f; x[4004] = -1e30f; x[4005] = 0.625f; x[4006] = -0.625f;
    for (int isa = 0; isa < HACHI_ISA_COUNT; isa++) {
        const hachi_kernels *K = hachi_kernels_get((hachi_isa)isa);
        if (!K) continue;
        for (int kind = 0; kind < 2; kind++)
            for (int n = N; n >= N - 7; n -= 7) {   /* tails of 3 and 4 */
                memcpy(want, x, N * sizeof(float));
                memcpy(got, x, N * sizeof(float));
                if (kind) { R->softcap(n, want, 30.0f); K->softcap(n, got, 30.0f); }
                else { R->gelu_mul(n, want, g); K->gelu_mul(n, got, g); }
                int bad = 0, at = -1;
                for (int i = 0; i < N; i++) {
                    const double tol = 4e-6 * fabsf(want[i]) + (kind ? 1e-30 : 2.5e-7 * fabs((double)x[i] * g[i]));
                    if (!(fabs((double)got[i] - want[i]) <= tol) || (i >= n && got[i] != x[i])) { bad++; if (at < 0) at = i; }
                }
                CHECKF(bad == 0, "%s %s n=%d: %d values off ref (first at x=%g: %.9g vs %.9g)", K->name,
                       kind ? "softcap" : "gelu_mul", n, bad, at >= 0 ? x[at] : 0.0, at >= 0 ? got[at] : 0.0,
                       at >= 0 ? want[at] : 0.0);
            }
    }
    free(x); free(g); free(want); free(got);
}

TEST(kernels_fp16) {
    for (int i = 0; i < HACHI_ISA_COUNT; i++) {
        const hachi_kernels *K = hachi_kernels_get((hachi_isa)i);
        if (K) check_fp16(K);
    }
}

TEST(kernels_dispatch) {
    const hachi_kernels *best = hachi_kernels_best();
    CHECK(best != NULL);
    CHECK(hachi_kernels_get(HACHI_ISA_REF) == hachi_kernels_ref());
    for (int i = 0; i < HACHI_ISA_COUNT; i++) {
        const hachi_kernels *K = hachi_kernels_get((hachi_isa)i);
        if (!K) continue;
        CHECKF(K->isa == (hachi_isa)i && !strcmp(K->name, hachi_isa_name((hachi_isa)i)), "table %d names", i);
        for (size_t t = 0; t < N_WEIGHT_TYPES; t++) {
            const hachi_type_kernels *tk = &K->t[weight_types[t]];
            CHECKF(tk->vec_dot && tk->vec_dot_multi && tk->to_float && tk->from_float,
                   "%s: %s entry incomplete", K->name, hachi_type_name(weight_types[t]));
        }
        CHECKF(K->f32_to_f16 && K->f16_to_f32 && K->dot_f16_multi && K->axpy_f16_multi, "%s: fp16 entries", K->name);
        CHECKF(K->attn_scores_f16 && K->attn_values_f16 && K->attn_softmax, "%s: attention entries", K->name);
        CHECKF(K->gelu_mul && K->softcap, "%s: activation entries", K->name);
        CHECKF(K->t[HACHI_TYPE_Q8_K].from_float && K->t[HACHI_TYPE_Q8_0].from_float && K->t[HACHI_TYPE_F32].from_float,
               "%s: activation quantizers", K->name);
    }
    CHECK(!strcmp(hachi_isa_name(HACHI_ISA_AVX512), "avx512"));
    /* the automatic choice is the widest table the CPU runs */
    const char *forced = getenv("HACHI_ISA");
    if (!forced || !*forced) {
        const hachi_kernels *want = hachi_kernels_get(HACHI_ISA_AVX512);
        if (!want) want = hachi_kernels_get(HACHI_ISA_AVXVNNI);
        if (!want) want = hachi_kernels_get(HACHI_ISA_AVX2);
        if (!want) want = hachi_kernels_get(HACHI_ISA_NEON);
        if (!want) want = hachi_kernels_ref();
        CHECKF(best == want, "best table is %s, not %s", best->name, want->name);
    }
}
