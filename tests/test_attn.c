/* Attention tile kernels (kernels.h attn_scores_f16, attn_values_f16, attn_softmax, and the
 * int8 attn_scores_i8, attn_values_i8) of every table this CPU runs against the scalar
 * reference table (ref.c: per-row double-precision dots, libm expf) and a double-precision
 * sum computed here, over every G and head dim the register-blocked tiles take and some they
 * hand to the per-row kernels. A table other than ref's must have its own entries (a fallback
 * to ref's would compare ref with itself). */
#include <float.h>
#include <math.h>
#include "test.h"
#include "kernels/kernels.h"
#include "util.h"

/* Tolerances, first order in the unit roundoff u = FLT_EPSILON / 2.
 * Scores, relative to sum_d |k_d q_d|: an f32 sum in L >= 4 lanes rounds once per fma of its
 * lane (hd / L), log2 L <= 4 times in the reduction and twice per tail product (< 8); ref's
 * double sum once: hd / 4 + 32 units covers every kernel (tiles, per-row, single-row dot). */
#define SCORES_TOL(hd, mag) (((hd) / 4.0 + 32) * (FLT_EPSILON / 2) * (mag) + 1e-30)
/* Softmax exponentials, relative: libm's expf is within 1 ulp, the tables' Cephes-style
 * exp (x86_avx2_exp.h) within 2.3e-7 (its published peak error), on the same argument (the
 * scale multiply and max subtraction are the same float operations everywhere). */
#define EXP_REL (4 * FLT_EPSILON)
/* Softmax sums of nk positive terms, relative: EXP_REL per term plus the two summation
 * orders (ref sequential, tables in lanes), at most nk - 1 roundings each. */
#define SUM_TOL(nk, sum) ((EXP_REL + (nk) * FLT_EPSILON) * (sum))
/* Values, relative to |out| + sum_j |p_j v_j| per output: at most two roundings per key
 * (a product and an add; one with fma) in each of the two compared kernels. */
#define VALUES_TOL(nk, mag) (2.0 * (nk) * FLT_EPSILON * (mag) + 1e-30)

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return ((int)(*s >> 40 & 0xffff) - 32768) / 32768.0f;
}

enum { GMAX = 16 };

/* One shape on table K against ref's table R; returns 0 after reporting a failure. */
static int check_case(const hachi_kernels *K, const hachi_kernels *R, int G, int hd, int nk, uint64_t *seed) {
    const int64_t stride = hd + 8;   /* rows not packed, as in a multi-head cache */
    uint16_t *k = malloc(sizeof *k * nk * stride), *v = malloc(sizeof *v * nk * stride);
    float *q = malloc(sizeof *q * G * hd), *sr = malloc(sizeof *sr * nk * G), *sk = malloc(sizeof *sk * nk * G);
    float *o0 = malloc(sizeof *o0 * G * hd), *or = malloc(sizeof *or * G * hd), *ok = malloc(sizeof *ok * G * hd);
    for (int i = 0; i < nk * stride; i++) { k[i] = hachi_f32_to_f16(frand(seed)); v[i] = hachi_f32_to_f16(frand(seed)); }
    for (int i = 0; i < G * hd; i++) { q[i] = frand(seed); o0[i] = frand(seed); }
    const char *isa = K->name;
    int good = 1;

    R->attn_scores_f16(hd, nk, k, stride, q, G, sr);
    K->attn_scores_f16(hd, nk, k, stride, q, G, sk);
    double worst = 0;
    int at = 0, ref_off = 0;
    for (int j = 0; j < nk; j++)
        for (int h = 0; h < G; h++) {
            double exact = 0, mag = 0;
            for (int d = 0; d < hd; d++) {
                const double p = (double)hachi_f16_to_f32(k[j * stride + d]) * q[h * hd + d];
                exact += p;
                mag += fabs(p);
            }
            ref_off += !(fabs((double)sr[j * G + h] - exact) <= FLT_EPSILON * mag + 1e-30);
            const double e = fabs((double)sk[j * G + h] - sr[j * G + h]) / SCORES_TOL(hd, mag);
            if (!(e <= worst)) { worst = e; at = j * G + h; }
        }
    CHECKF(ref_off == 0, "ref scores G %d hd %d nk %d: %d off the double sum", G, hd, nk, ref_off);
    if (!(worst <= 1.0)) {
        test_fail(__FILE__, __LINE__, "%s scores G %d hd %d nk %d: worst index %d %.9g, ref %.9g (%.2f x tol)", isa, G,
                  hd, nk, at, sk[at], sr[at], worst);
        good = 0;
    }

    float mxr[GMAX], mxk[GMAX], sumr[GMAX], sumk[GMAX];
    memcpy(sk, sr, sizeof *sr * nk * G);
    R->attn_softmax(sr, nk, G, 0.125f, mxr, sumr);
    K->attn_softmax(sk, nk, G, 0.125f, mxk, sumk);
    for (int h = 0; h < G; h++) {
        CHECKF(mxr[h] == mxk[h], "%s softmax max G %d nk %d head %d: %.9g, ref %.9g", isa, G, nk, h, mxk[h], mxr[h]);
        CHECKF(fabs((double)sumr[h] - sumk[h]) <= SUM_TOL(nk, sumr[h]), "%s softmax sum G %d nk %d head %d: %.9g, ref %.9g",
               isa, G, nk, h, sumk[h], sumr[h]);
    }
    worst = 0;
    at = 0;
    for (int i = 0; i < nk * G; i++) {
        const double e = fabs((double)sr[i] - sk[i]) / (EXP_REL * sr[i] + 1e-30);
        if (!(e <= worst)) { worst = e; at = i; }
    }
    if (!(worst <= 1.0)) {
        test_fail(__FILE__, __LINE__, "%s softmax exp G %d nk %d: worst index %d %.9g, ref %.9g (%.2f x tol)", isa, G, nk,
                  at, sk[at], sr[at], worst);
        good = 0;
    }

    /* the same weights p (ref's softmax) into outputs that already hold values */
    memcpy(or, o0, sizeof *o0 * G * hd);
    memcpy(ok, o0, sizeof *o0 * G * hd);
    R->attn_values_f16(hd, nk, v, stride, sr, G, or);
    K->attn_values_f16(hd, nk, v, stride, sr, G, ok);
    worst = 0;
    at = 0;
    for (int h = 0; h < G; h++)
        for (int d = 0; d < hd; d++) {
            double mag = fabs(o0[h * hd + d]);
            for (int j = 0; j < nk; j++) mag += fabs((double)sr[j * G + h] * hachi_f16_to_f32(v[j * stride + d]));
            const double e = fabs((double)ok[h * hd + d] - or[h * hd + d]) / VALUES_TOL(nk, mag);
            if (!(e <= worst)) { worst = e; at = h * hd + d; }
        }
    if (!(worst <= 1.0)) {
        test_fail(__FILE__, __LINE__, "%s values G %d hd %d nk %d: worst index %d %.9g, ref %.9g (%.2f x tol)", isa, G,
                  hd, nk, at, ok[at], or[at], worst);
        good = 0;
    }
    free(k); free(v); free(q); free(sr); free(sk); free(o0); free(or); free(ok);
    return good;
}

TEST(attn_tiles_vs_ref) {
    const hachi_kernels *R = hachi_kernels_ref();
    const int Gs[] = {1, 2, 3, 4, 8, 16}, hds[] = {32, 64, 256, 512, 40, 24}, nks[] = {1, 3, 8, 33, 200};
    for (int isa = 0; isa < HACHI_ISA_COUNT; isa++) {
        const hachi_kernels *K = hachi_kernels_get((hachi_isa)isa);
        if (!K) continue;
        CHECKF(K->attn_scores_f16 && K->attn_values_f16 && K->attn_softmax, "%s: attention entries missing", K->name);
        if (!K->attn_scores_f16 || !K->attn_values_f16 || !K->attn_softmax) continue;
        if (K != R) {   /* this ISA's own kernels, not ref's (NEON keeps ref's scalar softmax) */
            CHECKF(K->attn_scores_f16 != R->attn_scores_f16 && K->attn_values_f16 != R->attn_values_f16,
                   "%s: attention tiles are ref's", K->name);
            CHECKF(K->isa == HACHI_ISA_NEON || K->attn_softmax != R->attn_softmax, "%s: softmax is ref's", K->name);
        }
        uint64_t seed = 7;
        for (size_t gi = 0; gi < sizeof Gs / sizeof Gs[0]; gi++)
            for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
                for (size_t ni = 0; ni < sizeof nks / sizeof nks[0]; ni++)
                    if (!check_case(K, R, Gs[gi], hds[hi], nks[ni], &seed)) goto next;   /* one report per table */
    next:;
    }
}

/* ---- int8 K/V rows (kernels.h attn_scores_i8, attn_values_i8) ------------------------------ */

/* One int8 shape on table K against ref's table R: rows hd + 8 apart, scales 3 apart (as in a
 * cache of several K/V heads); the same tolerances as fp16 (a key's scale multiplies its f32
 * dot once more, within the scores' 32 spare units; the values' weights p * scale are the same
 * float product in every kernel). */
static int check_case_i8(const hachi_kernels *K, const hachi_kernels *R, int G, int hd, int nk, uint64_t *seed) {
    const int64_t stride = hd + 8, ss = 3;
    int8_t *k = malloc((size_t)nk * stride), *v = malloc((size_t)nk * stride);
    float *ks = malloc(sizeof *ks * nk * ss), *vs = malloc(sizeof *vs * nk * ss);
    float *q = malloc(sizeof *q * G * hd), *p = malloc(sizeof *p * nk * G);
    float *sr = malloc(sizeof *sr * nk * G), *sk = malloc(sizeof *sk * nk * G);
    float *o0 = malloc(sizeof *o0 * G * hd), *or = malloc(sizeof *or * G * hd), *ok = malloc(sizeof *ok * G * hd);
    for (int i = 0; i < nk * stride; i++) { k[i] = (int8_t)(frand(seed) * 127.5f); v[i] = (int8_t)(frand(seed) * 127.5f); }
    for (int i = 0; i < nk * ss; i++) { ks[i] = 0.02f * (1.5f + frand(seed)); vs[i] = 0.02f * (1.5f + frand(seed)); }
    for (int i = 0; i < G * hd; i++) { q[i] = frand(seed); o0[i] = frand(seed); }
    for (int i = 0; i < nk * G; i++) p[i] = 0.5f * (1.0f + frand(seed));
    const char *isa = K->name;
    int good = 1;

    R->attn_scores_i8(hd, nk, k, stride, ks, ss, q, G, sr);
    K->attn_scores_i8(hd, nk, k, stride, ks, ss, q, G, sk);
    double worst = 0;
    int at = 0, ref_off = 0;
    for (int j = 0; j < nk; j++)
        for (int h = 0; h < G; h++) {
            double exact = 0, mag = 0;
            for (int d = 0; d < hd; d++) {
                const double x = (double)ks[j * ss] * k[j * stride + d] * q[h * hd + d];
                exact += x;
                mag += fabs(x);
            }
            ref_off += !(fabs((double)sr[j * G + h] - exact) <= FLT_EPSILON * mag + 1e-30);
            const double e = fabs((double)sk[j * G + h] - sr[j * G + h]) / SCORES_TOL(hd, mag);
            if (!(e <= worst)) { worst = e; at = j * G + h; }
        }
    CHECKF(ref_off == 0, "ref int8 scores G %d hd %d nk %d: %d off the double sum", G, hd, nk, ref_off);
    if (!(worst <= 1.0)) {
        test_fail(__FILE__, __LINE__, "%s int8 scores G %d hd %d nk %d: worst index %d %.9g, ref %.9g (%.2f x tol)", isa,
                  G, hd, nk, at, sk[at], sr[at], worst);
        good = 0;
    }

    memcpy(or, o0, sizeof *o0 * G * hd);
    memcpy(ok, o0, sizeof *o0 * G * hd);
    R->attn_values_i8(hd, nk, v, stride, vs, ss, p, G, or);
    K->attn_values_i8(hd, nk, v, stride, vs, ss, p, G, ok);
    worst = 0;
    at = 0;
    for (int h = 0; h < G; h++)
        for (int d = 0; d < hd; d++) {
            double mag = fabs(o0[h * hd + d]);
            for (int j = 0; j < nk; j++) mag += fabs((double)(p[j * G + h] * vs[j * ss]) * v[j * stride + d]);
            const double e = fabs((double)ok[h * hd + d] - or[h * hd + d]) / VALUES_TOL(nk, mag);
            if (!(e <= worst)) { worst = e; at = h * hd + d; }
        }
    if (!(worst <= 1.0)) {
        test_fail(__FILE__, __LINE__, "%s int8 values G %d hd %d nk %d: worst index %d %.9g, ref %.9g (%.2f x tol)", isa,
                  G, hd, nk, at, ok[at], or[at], worst);
        good = 0;
    }
    free(k); free(v); free(ks); free(vs); free(q); free(p); free(sr); free(sk); free(o0); free(or); free(ok);
    return good;
}

TEST(attn_int8_tiles_vs_ref) {
    const hachi_kernels *R = hachi_kernels_ref();
    const int Gs[] = {1, 2, 3, 4, 8, 16}, hds[] = {32, 64, 256, 512, 40, 24, 20}, nks[] = {1, 3, 8, 33, 200};
    for (int isa = 0; isa < HACHI_ISA_COUNT; isa++) {
        const hachi_kernels *K = hachi_kernels_get((hachi_isa)isa);
        if (!K) continue;
        CHECKF(K->attn_scores_i8 && K->attn_values_i8, "%s: int8 attention entries missing", K->name);
        if (!K->attn_scores_i8 || !K->attn_values_i8) continue;
        if (K != R)   /* this ISA's own kernels (AVX-512: AVX2's), not ref's */
            CHECKF(K->attn_scores_i8 != R->attn_scores_i8 && K->attn_values_i8 != R->attn_values_i8,
                   "%s: int8 attention tiles are ref's", K->name);
        uint64_t seed = 11;
        for (size_t gi = 0; gi < sizeof Gs / sizeof Gs[0]; gi++)
            for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
                for (size_t ni = 0; ni < sizeof nks / sizeof nks[0]; ni++)
                    if (!check_case_i8(K, R, Gs[gi], hds[hi], nks[ni], &seed)) goto next;
    next:;
    }
}
