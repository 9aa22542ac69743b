/* Attention tile kernels (kernels.h attn_scores_f16, attn_values_f16, attn_softmax, and the
 * int8 attn_scores_i8, attn_values_i8) of every table this CPU runs against the scalar
 * reference table (ref.c: per-row double-precision dots, libm expf; int8 scores: integer dots,
 * which every table must give bit for bit) and a double-precision or integer sum computed here,
 * over every G and head dim the register-blocked tiles take and some they hand to the per-row
 * kernels; attn_values_f16_hot / attn_values_i8_hot, where a table has them,
 * bit for bit its attn_values_f16 / attn_values_i8. A table other than ref's must have its own entries (a fallback
 * to ref's would compare ref with itself). Then int8 K/V end to end through kv.c: staging
 * quantizes by the rule, and attention over int8 rows stays within the bound the two
 * quantizations (int8, fp16) allow of attention over fp16 rows. */
#include <float.h>
#include <math.h>
#include "test.h"
#include "attn.h"
#include "kernels/kernels.h"
#include "kv.h"
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

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

enum { GMAX = 16 };

/* One shape on table K against ref's table R; returns 0 after reporting a failure. */
static int check_case(const hachi_kernels *K, const hachi_kernels *R, int G, int hd, int nk, uint64_t *seed) {
    const int64_t stride = hd + 8;   /* rows not packed, as in a multi-head cache */
    uint16_t *k = malloc(sizeof *k * nk * stride), *v = malloc(sizeof *v * nk * stride);
    float *q = malloc(sizeof *q * G * hd), *sr = malloc(sizeof *sr * nk * G), *sk = malloc(sizeof *sk * nk * G);
    float *o0 = calloc((size_t)G * hd, sizeof *o0), *or = malloc(sizeof *or * G * hd), *ok = malloc(sizeof *ok * G * hd);
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
    for (int h = 0; h < G; h++)   /* running maxima: none, or one above or below the tile's */
        mxr[h] = mxk[h] = h % 3 == 0 ? -INFINITY : h % 3 == 1 ? 0.5f : -0.5f;
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
            double mag = fabs((double)o0[h * hd + d]);
            for (int j = 0; j < nk; j++) mag += fabs((double)sr[j * G + h] * hachi_f16_to_f32(v[j * stride + d]));
            const double e = fabs((double)ok[h * hd + d] - or[h * hd + d]) / VALUES_TOL(nk, mag);
            if (!(e <= worst)) { worst = e; at = h * hd + d; }
        }
    if (!(worst <= 1.0)) {
        test_fail(__FILE__, __LINE__, "%s values G %d hd %d nk %d: worst index %d %.9g, ref %.9g (%.2f x tol)", isa, G,
                  hd, nk, at, ok[at], or[at], worst);
        good = 0;
    }
    if (K->attn_values_f16_hot) {   /* the hot entry: the same sums bit for bit */
        memcpy(or, o0, sizeof *o0 * G * hd);
        K->attn_values_f16_hot(hd, nk, v, stride, sr, G, or);
        if (memcmp(or, ok, sizeof *ok * G * hd)) {
            test_fail(__FILE__, __LINE__, "%s values_hot G %d hd %d nk %d differ from attn_values_f16", isa, G, hd, nk);
            good = 0;
        }
    }
    if (K->attn_scores_f32 && G == K->attn_f32_g && hd % K->attn_f32_hd == 0) {   /* f32 rows: the fp16 entries' bits */
        float *kf = malloc(sizeof *kf * nk * hd), *vf = malloc(sizeof *vf * nk * hd), *s32 = malloc(sizeof *s32 * nk * G);
        for (int j = 0; j < nk; j++)
            for (int d = 0; d < hd; d++) {
                kf[j * hd + d] = hachi_f16_to_f32(k[j * stride + d]);
                vf[j * hd + d] = hachi_f16_to_f32(v[j * stride + d]);
            }
        K->attn_scores_f16(hd, nk, k, stride, q, G, sk);
        K->attn_scores_f32(hd, nk, kf, hd, q, G, s32);
        memcpy(or, o0, sizeof *o0 * G * hd);
        K->attn_values_f32(hd, nk, vf, hd, sr, G, or);
        if (memcmp(sk, s32, sizeof *sk * nk * G) || memcmp(or, ok, sizeof *ok * G * hd)) {
            test_fail(__FILE__, __LINE__, "%s f32 rows G %d hd %d nk %d: scores or values differ from the fp16 entries'",
                      isa, G, hd, nk);
            good = 0;
        }
        free(kf); free(vf); free(s32);
    }
    free(k); free(v); free(q); free(sr); free(sk); free(o0); free(or); free(ok);
    return good;
}

TEST(attn_tiles_vs_ref) {
    const hachi_kernels *R = hachi_kernels_ref();
    for (int isa = 0; isa < HACHI_ISA_COUNT; isa++) {   /* every SIMD table has f32-row entries for Gemma 4's G */
        const hachi_kernels *X = hachi_kernels_get((hachi_isa)isa);
        CHECKF(!X || X == R || (X->attn_scores_f32 && X->attn_values_f32 && X->attn_f32_g == 8 && X->attn_f32_hd > 0),
               "%s: no f32-row attention entries", X ? X->name : "");
    }
    const int Gs[] = {1, 2, 3, 4, 8, 16}, hds[] = {32, 64, 256, 512, 40, 24}, nks[] = {1, 3, 8, 33, 200};
    for (int isa = 0; isa < HACHI_ISA_COUNT; isa++) {
        const hachi_kernels *K = hachi_kernels_get((hachi_isa)isa);
        if (!K) continue;
        CHECKF(K->attn_scores_f16 && K->attn_values_f16 && K->attn_softmax, "%s: attention entries missing", K->name);
        if (!K->attn_scores_f16 || !K->attn_values_f16 || !K->attn_softmax) continue;
        if (K != R) {   /* this ISA's own kernels, not ref's */
            CHECKF(K->attn_scores_f16 != R->attn_scores_f16 && K->attn_values_f16 != R->attn_values_f16,
                   "%s: attention tiles are ref's", K->name);
            CHECKF(K->attn_softmax != R->attn_softmax, "%s: softmax is ref's", K->name);
        }
        uint64_t seed = 7;
        for (size_t gi = 0; gi < sizeof Gs / sizeof Gs[0]; gi++)
            for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
                for (size_t ni = 0; ni < sizeof nks / sizeof nks[0]; ni++)
                    if (!check_case(K, R, Gs[gi], hds[hi], nks[ni], &seed)) goto next;   /* one report per table */
    next:;
    }
}

/* A forward of n tokens at depth P through hachi_attention against n decode steps over another
 * cache with the same rows: bitwise the same outputs. With G = 8 the tables that have f32-row
 * entries (kernels.h attn_scores_f32) convert each tile once for the forward's tokens, while a
 * decode step reads the fp16 rows; over int8 rows the tables with matrix products (attn_i8_sets)
 * take the forward's tiles through them; windowed caches wrap. The decode steps run on th
 * threads, the forward on th2: a token's keys are cut into parts by their count alone, so the
 * thread count changes no bit either. */
static void forward_vs_decode(const hachi_kernels *K, hachi_kv_type type, int hd, int window, int th, int th2, int P,
                              int n, uint64_t *seed) {
    enum { G = 8, CTX = 8192 };
    hachi_kv kd, kf;
    size_t bytes = 0;
    hachi_pool *pool = NULL, *pool2 = NULL;
    CHECK(hachi_kv_init(&kd, 0, 1, hd, window, CTX, n, type, false, &bytes) == HACHI_OK);
    CHECK(hachi_kv_init(&kf, 0, 1, hd, window, CTX, n, type, false, &bytes) == HACHI_OK);
    CHECK(hachi_pool_create(th, &pool) == HACHI_OK);
    CHECK(hachi_pool_create(th2, &pool2) == HACHI_OK);
    const int N = P + n;
    float *k = malloc(sizeof *k * N * hd), *v = malloc(sizeof *v * N * hd), *q = malloc(sizeof *q * n * G * hd);
    float *od = malloc(sizeof *od * n * G * hd), *of = malloc(sizeof *of * n * G * hd);
    for (int i = 0; i < N * hd; i++) { k[i] = 2.0f * frand(seed); v[i] = frand(seed); }
    for (int i = 0; i < n * G * hd; i++) q[i] = frand(seed);
    for (int t = 0; t < P; t++) {
        hachi_kv_stage(&kd, K, t, 0, k + (size_t)t * hd, v + (size_t)t * hd);
        hachi_kv_commit(&kd, t, 1);
        hachi_kv_stage(&kf, K, t, 0, k + (size_t)t * hd, v + (size_t)t * hd);
        hachi_kv_commit(&kf, t, 1);
    }
    const size_t stride = hachi_attn_scores_stride(G, CTX, hd, type);
    float *scores = malloc(sizeof(float) * stride * HACHI_MAX(th, th2)), *partial = malloc(sizeof(float) * hachi_attn_partial_floats(G, hd));
    hachi_attn_args a = {.q = q, .out = od, .kv = &kd, .p0 = P, .n = 1, .window = window, .n_head = G, .n_head_kv = 1,
                         .head_dim = hd, .scale = 0.125f, .scores = scores, .scores_stride = stride, .partial = partial};
    for (int t = 0; t < n; t++) {   /* decode steps */
        hachi_kv_stage(&kd, K, P + t, 0, k + (size_t)(P + t) * hd, v + (size_t)(P + t) * hd);
        a.q = q + (size_t)t * G * hd;
        a.out = od + (size_t)t * G * hd;
        a.p0 = P + t;
        hachi_attention(pool, K, &a);
        hachi_kv_commit(&kd, P + t, 1);
    }
    for (int t = 0; t < n; t++) hachi_kv_stage(&kf, K, P, t, k + (size_t)(P + t) * hd, v + (size_t)(P + t) * hd);
    a = (hachi_attn_args){.q = q, .out = of, .kv = &kf, .p0 = P, .n = n, .window = window, .n_head = G, .n_head_kv = 1,
                          .head_dim = hd, .scale = 0.125f, .scores = scores, .scores_stride = stride, .partial = partial};
    hachi_attention(pool2, K, &a);
    int bad = -1;
    for (int t = n - 1; t >= 0; t--)
        if (memcmp(od + (size_t)t * G * hd, of + (size_t)t * G * hd, sizeof *od * G * hd)) bad = t;
    CHECKF(bad < 0, "%s, kv %s: hd %d window %d: token %d of a forward of %d at depth %d on %d thread(s) differs from its "
           "decode step on %d", K->name, type == HACHI_KV_INT8 ? "int8" : "f16", hd, window, bad, n, P, th2, th);
    free(k); free(v); free(q); free(od); free(of); free(scores); free(partial);
    hachi_kv_free(&kd);
    hachi_kv_free(&kf);
    hachi_pool_free(pool);
    hachi_pool_free(pool2);
}

TEST(attn_forward_equals_decode_g8) {
    uint64_t seed = 5;
    for (int isa = 0; isa < HACHI_ISA_COUNT; isa++) {
        const hachi_kernels *K = hachi_kernels_get((hachi_isa)isa);
        if (!K) continue;
        for (int th = 1; th <= 2; th++)
            for (int type = 0; type < 2; type++) {
                const hachi_kv_type kt = type ? HACHI_KV_INT8 : HACHI_KV_F16;
                forward_vs_decode(K, kt, 512, 0, th, th, 300, 16, &seed);
                forward_vs_decode(K, kt, 64, 0, th, th, 260, 40, &seed);
                forward_vs_decode(K, kt, 64, 100, th, th, 400, 21, &seed);
                forward_vs_decode(K, kt, 96, 0, th, th, 130, 3, &seed);
                forward_vs_decode(K, kt, 256, 0, th, th, 1000, 16, &seed);
                /* keys in 2 or 3 parts; the forward on other threads */
                forward_vs_decode(K, kt, 256, 0, th, th == 1 ? 2 : 3, 1015, 20, &seed);
                forward_vs_decode(K, kt, 512, 0, th, th == 1 ? 3 : 1, 3000, 5, &seed);
                forward_vs_decode(K, kt, 64, 1500, th, th == 1 ? 2 : 3, 2900, 17, &seed);
                forward_vs_decode(K, kt, 64, 0, th, th == 1 ? 2 : 1, 6500, 3, &seed);
            }
    }
}

/* ---- int8 K/V rows (kernels.h attn_scores_i8, attn_values_i8) ------------------------------ */

/* kernels.h's int8 values rule written out here, in int64 and double: per block of 128 keys and
 * head, the weights to 15 bits against their maximum, then out = fmaf(sum, u, out). */
static void values_i8_rule(int hd, int nk, const int8_t *v, int64_t stride, const float *vs, int64_t ss,
                           const float *p, int G, float *out) {
    for (int j0 = 0; j0 < nk; j0 += 128) {
        const int n = nk - j0 < 128 ? nk - j0 : 128;
        for (int h = 0; h < G; h++) {
            float m = 0;
            for (int j = j0; j < j0 + n; j++) {
                const float w = p[j * G + h] * vs[j * ss];
                if (w > m) m = w;
            }
            const float r = m > 0 ? 32767.0f / m : 0.0f, u = m / 32767.0f;
            for (int d = 0; d < hd; d++) {
                int64_t sum = 0;
                for (int j = j0; j < j0 + n; j++) {
                    const float x = p[j * G + h] * vs[j * ss] * r;
                    double q = floor((double)x + 0.5);   /* to nearest, ties to even */
                    if (q - x == 0.5 && fmod(q, 2.0) != 0) q -= 1;
                    sum += (int64_t)q * v[j * stride + d];
                }
                out[h * hd + d] = fmaf((float)sum, u, out[h * hd + d]);
            }
        }
    }
}

/* A table's int8 values over nk keys as kv.c runs them: blocks of 128 keys, each cut into two
 * runs after `cut` keys (none where cut is 0 or the block shorter): attn_vmax_i8 over the runs,
 * attn_values_i8 (or its hot entry) run by run, attn_flush_i8 */
static void values_i8_table(const hachi_kernels *K, bool hot, int hd, int nk, const int8_t *v, int64_t stride,
                            const float *vs, int64_t ss, const float *p, int G, int cut, float *out) {
    int32_t *acc = malloc(sizeof *acc * G * hd);
    float m[16], r[16], u[16];
    for (int j0 = 0; j0 < nk; j0 += 128) {
        const int n = nk - j0 < 128 ? nk - j0 : 128, c = cut > 0 && cut < n ? cut : n;
        const int lo[2] = {j0, j0 + c}, len[2] = {c, n - c};
        for (int h = 0; h < G; h++) m[h] = 0;
        for (int i = 0; i < 2; i++)
            if (len[i]) K->attn_vmax_i8(len[i], vs + lo[i] * ss, ss, p + lo[i] * G, G, m);
        for (int h = 0; h < G; h++) {
            r[h] = m[h] > 0 ? 32767.0f / m[h] : 0.0f;
            u[h] = m[h] / 32767.0f;
        }
        for (int i = 0; i < 2; i++)
            if (len[i])
                (hot && K->attn_values_i8_hot ? K->attn_values_i8_hot : K->attn_values_i8)(
                    hd, len[i], v + lo[i] * stride, stride, vs + lo[i] * ss, ss, p + lo[i] * G, G, r, acc, i == 0);
        K->attn_flush_i8(hd, G, acc, u, out);
    }
    free(acc);
}

/* One int8 shape on table K against ref's table R: rows hd + 8 apart, scales 3 apart (as in a
 * cache of several K/V heads). Scores: ref within the two roundings of its two float products of
 * the exact integer dot; values: ref's the rule's (values_i8_rule), and within the weights'
 * 15-bit rounding (m / 65534 each) of the exact sums; every table bit for bit ref's (kernels.h),
 * however a block is cut into runs (ref whole, the table cut after 5 keys, its hot entry after
 * 64). */
static int check_case_i8(const hachi_kernels *K, const hachi_kernels *R, int G, int hd, int nk, uint64_t *seed) {
    const int64_t stride = hd + 8, ss = 3;
    int8_t *k = malloc((size_t)nk * stride), *v = malloc((size_t)nk * stride), *q8 = malloc((size_t)G * hd);
    float *ks = malloc(sizeof *ks * nk * ss), *vs = malloc(sizeof *vs * nk * ss);
    float *qf = malloc(sizeof *qf * G * hd), *qs = malloc(sizeof *qs * G), *p = malloc(sizeof *p * nk * G);
    float *sr = malloc(sizeof *sr * nk * G), *sk = malloc(sizeof *sk * nk * G);
    float *o0 = calloc((size_t)G * hd, sizeof *o0), *or = malloc(sizeof *or * G * hd), *ok = malloc(sizeof *ok * G * hd);
    for (int i = 0; i < nk * stride; i++) { k[i] = (int8_t)(frand(seed) * 127.5f); v[i] = (int8_t)(frand(seed) * 127.5f); }
    for (int j = 0; j < nk; j++)   /* a key at the extremes: every product 127 * 127 in size */
        if (j % 7 == 3) for (int d = 0; d < hd; d++) k[j * stride + d] = d % 3 ? 127 : -127;
    for (int i = 0; i < nk * ss; i++) { ks[i] = 0.02f * (1.5f + frand(seed)); vs[i] = 0.02f * (1.5f + frand(seed)); }
    for (int i = 0; i < G * hd; i++) {
        q8[i] = i / hd == 1 ? (int8_t)(i % 3 ? 127 : -127) : (int8_t)(frand(seed) * 127.5f);
        qf[i] = q8[i];
        o0[i] = frand(seed);
    }
    for (int h = 0; h < G; h++) qs[h] = 0.01f * (1.5f + frand(seed));
    for (int i = 0; i < nk * G; i++) p[i] = 0.5f * (1.0f + frand(seed));
    for (int j = 0; j < nk; j++) {   /* head 0 of a 33-key case all zeros (m = 0), the last head's weights tiny */
        if (nk == 33) p[j * G] = 0;
        if (j % 3 == 1) p[j * G + G - 1] *= 1e-6f;
    }
    const hachi_query_i8 qi = {q8, qf, qs};
    const char *isa = K->name;
    int good = 1;

    R->attn_scores_i8(hd, nk, k, stride, ks, ss, &qi, G, sr);
    K->attn_scores_i8(hd, nk, k, stride, ks, ss, &qi, G, sk);
    int ref_off = 0;
    for (int j = 0; j < nk; j++)
        for (int h = 0; h < G; h++) {
            int64_t dot = 0;
            for (int d = 0; d < hd; d++) dot += (int64_t)k[j * stride + d] * q8[h * hd + d];
            const double exact = (double)dot * qs[h] * ks[j * ss];
            ref_off += !(fabs((double)sr[j * G + h] - exact) <= FLT_EPSILON * fabs(exact));
        }
    CHECKF(ref_off == 0, "ref int8 scores G %d hd %d nk %d: %d off the exact dot", G, hd, nk, ref_off);
    if (memcmp(sr, sk, sizeof *sk * nk * G)) {
        int at = 0;
        while (sr[at] == sk[at]) at++;
        test_fail(__FILE__, __LINE__, "%s int8 scores G %d hd %d nk %d: index %d %.9g, ref %.9g (not ref's bits)", isa, G,
                  hd, nk, at, sk[at], sr[at]);
        good = 0;
    }
    memcpy(or, o0, sizeof *o0 * G * hd);
    memcpy(ok, o0, sizeof *o0 * G * hd);
    float *rule = malloc(sizeof *rule * G * hd);
    memcpy(rule, o0, sizeof *o0 * G * hd);
    values_i8_rule(hd, nk, v, stride, vs, ss, p, G, rule);
    values_i8_table(R, false, hd, nk, v, stride, vs, ss, p, G, 0, or);
    values_i8_table(K, false, hd, nk, v, stride, vs, ss, p, G, 5, ok);
    if (K == R) {
        CHECKF(!memcmp(or, rule, sizeof *rule * G * hd), "ref int8 values G %d hd %d nk %d are not the rule's", G, hd, nk);
        double worst = 0;
        for (int h = 0; h < G; h++) {
            double m = 0;
            for (int j = 0; j < nk; j++) m = fmax(m, (double)(p[j * G + h] * vs[j * ss]));
            for (int d = 0; d < hd; d++) {
                double exact = o0[h * hd + d], mag = fabs(exact), vsum = 0;
                for (int j = 0; j < nk; j++) {
                    exact += (double)(p[j * G + h] * vs[j * ss]) * v[j * stride + d];
                    mag += fabs((double)(p[j * G + h] * vs[j * ss]) * v[j * stride + d]);
                    vsum += abs(v[j * stride + d]);
                }
                const int blocks = (nk + 127) / 128;
                const double tol = m / 65534 * (1 + 1e-6) * vsum + 2.0 * blocks * FLT_EPSILON * mag + 1e-30;
                worst = fmax(worst, fabs(or[h * hd + d] - exact) / tol);
            }
        }
        CHECKF(worst <= 1.0, "ref int8 values G %d hd %d nk %d: %.2f x the weights' rounding off the exact sums", G, hd,
               nk, worst);
    }
    if (memcmp(or, ok, sizeof *ok * G * hd)) {
        int at = 0;
        while (or[at] == ok[at]) at++;
        test_fail(__FILE__, __LINE__, "%s int8 values G %d hd %d nk %d: index %d %.9g, ref %.9g (not ref's bits)", isa, G,
                  hd, nk, at, ok[at], or[at]);
        good = 0;
    }
    if (K->attn_values_i8_hot) {   /* the hot entry: the same sums bit for bit */
        memcpy(or, o0, sizeof *o0 * G * hd);
        values_i8_table(K, true, hd, nk, v, stride, vs, ss, p, G, 64, or);
        if (memcmp(or, ok, sizeof *ok * G * hd)) {
            test_fail(__FILE__, __LINE__, "%s int8 values_hot G %d hd %d nk %d differ from attn_values_i8", isa, G, hd, nk);
            good = 0;
        }
    }
    free(k); free(v); free(q8); free(ks); free(vs); free(qf); free(qs); free(p); free(sr); free(sk); free(o0); free(or);
    free(ok); free(rule);
    return good;
}

TEST(attn_int8_tiles_vs_ref) {
    const hachi_kernels *R = hachi_kernels_ref();
    const int Gs[] = {1, 2, 3, 4, 8, 16}, hds[] = {32, 64, 256, 512, 1024, 40, 24, 20}, nks[] = {1, 3, 8, 33, 200};
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

/* The int8 matrix products (kernels.h attn_i8_*) of every table that has them against plain
 * integer sums written out here: random int8 keys, queries and values, weights at their extremes
 * (0, 255 / 127) and random, key rows strided as in a cache of two heads. */
TEST(attn_i8_products_vs_sums) {
    const int hds[] = {64, 256, 512}, nqs[] = {16, 48, 80, 128}, nks[] = {64, 128};
    int tables = 0;
    for (int isa = 0; isa < HACHI_ISA_COUNT; isa++) {
        const hachi_kernels *K = hachi_kernels_get((hachi_isa)isa);
        if (!K || !K->attn_i8_sets) continue;
        tables++;
        uint64_t seed = 21;
        for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
            for (size_t b = 0; b < sizeof nqs / sizeof *nqs; b++)
                for (size_t c = 0; c < sizeof nks / sizeof *nks; c++) {
                    const int hd = hds[a], nq = nqs[b], nk = nks[c];
                    int8_t *k = malloc((size_t)nk * 2 * hd), *q = malloc((size_t)nq * hd), *v = malloc((size_t)nk * hd);
                    int8_t *qp = malloc((size_t)nq * hd), *vp = malloc((size_t)nk * hd);
                    uint8_t *wh = malloc((size_t)nq * nk), *wl = malloc((size_t)nq * nk);
                    int32_t *d = malloc(sizeof *d * nk * nq), *S = malloc(sizeof *S * nq * hd);
                    for (int i = 0; i < nk * 2 * hd; i++) k[i] = (int8_t)((int)(xorshift(&seed) % 255) - 127);
                    for (int i = 0; i < nq * hd; i++) q[i] = (int8_t)((int)(xorshift(&seed) % 255) - 127);
                    for (int i = 0; i < nk * hd; i++) v[i] = (int8_t)((int)(xorshift(&seed) % 256) - 128);
                    for (int i = 0; i < nq * nk; i++) {
                        const uint64_t x = xorshift(&seed);
                        wh[i] = (uint8_t)(x % 3 == 0 ? 255 : x % 3 == 1 ? 0 : x >> 8 & 255);
                        wl[i] = (uint8_t)(x % 5 == 0 ? 127 : x >> 16 & 127);
                    }
                    K->attn_i8_qpack(hd, nq, q, qp);
                    K->attn_i8_dots(hd, nk, k + hd, 2 * hd, nq, qp, d);   /* head 1 of rows of two */
                    K->attn_i8_vpack(hd, nk, v, vp);
                    K->attn_i8_wsums(hd, nk, nq, wh, wl, vp, S);
                    int bad = 0;
                    for (int j = 0; j < nk; j++)
                        for (int i = 0; i < nq; i++) {
                            int64_t sum = 0;
                            for (int e = 0; e < hd; e++) sum += (int64_t)k[(size_t)j * 2 * hd + hd + e] * q[(size_t)i * hd + e];
                            bad += d[(size_t)j * nq + i] != sum;
                        }
                    for (int i = 0; i < nq; i++)
                        for (int e = 0; e < hd; e++) {
                            int64_t sum = 0;
                            for (int j = 0; j < nk; j++)
                                sum += (int64_t)(128 * wh[(size_t)i * nk + j] + wl[(size_t)i * nk + j]) * v[(size_t)j * hd + e];
                            bad += S[(size_t)i * hd + e] != sum;
                        }
                    CHECKF(!bad, "%s: hd %d, %d queries, %d keys: %d int8 products differ from their sums", K->name, hd,
                           nq, nk, bad);
                    free(k); free(q); free(v); free(qp); free(vp); free(wh); free(wl); free(d); free(S);
                }
    }
    CHECKF(tables > 0, "no table has the int8 matrix products (ref's should)");
    /* their weights: every table's bytes ref's, ref's on kernels.h's rule (tie-free random
     * softmax weights, the largest product of each head mapped to 32767) */
    const hachi_kernels *R = hachi_kernels_ref();
    const int ns[] = {1, 7, 8, 13, 64, 128}, Gw[] = {8, 4, 3};
    for (int isa = 0; isa < HACHI_ISA_COUNT; isa++) {
        const hachi_kernels *K = hachi_kernels_get((hachi_isa)isa);
        if (!K || !K->attn_i8_sets) continue;
        uint64_t seed = 33;
        for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
            for (size_t c = 0; c < sizeof Gw / sizeof *Gw; c++) {
                enum { LD = 136 };
                const int n = ns[a], G = Gw[c];
                float p[128 * 8] = {0}, vs[128] = {0}, r[8] = {0}, m[8] = {0};
                uint8_t hi[8 * LD], lo[8 * LD], rh[8 * LD], rl[8 * LD];
                for (int j = 0; j < n; j++) vs[j] = (float)(xorshift(&seed) % 1000 + 1) / 8192.0f;
                for (int i = 0; i < n * G; i++) p[i] = (float)(xorshift(&seed) % 100000) / 100000.0f;
                for (int j = 0; j < n; j++)
                    for (int h = 0; h < G; h++) m[h] = fmaxf(m[h], p[j * G + h] * vs[j]);
                for (int h = 0; h < G; h++) r[h] = m[h] > 0.0f ? 32767.0f / m[h] : 0.0f;
                memset(hi, 0xAA, sizeof hi); memset(lo, 0xAA, sizeof lo);
                memset(rh, 0xAA, sizeof rh); memset(rl, 0xAA, sizeof rl);
                K->attn_i8_weights(n, G, p, vs, r, hi, lo, LD);
                R->attn_i8_weights(n, G, p, vs, r, rh, rl, LD);
                int bad = memcmp(hi, rh, sizeof hi) != 0 || memcmp(lo, rl, sizeof lo) != 0;
                for (int j = 0; j < n; j++)
                    for (int h = 0; h < G; h++) {
                        const int w = 128 * rh[h * LD + j] + rl[h * LD + j];
                        bad += rl[h * LD + j] > 127 || w != (int)rintf(p[j * G + h] * vs[j] * r[h]);
                    }
                CHECKF(!bad, "%s: the int8 weights of %d keys, %d heads differ from ref's or the rule", K->name, n, G);
            }
    }
}

/* quant_rows_i8 of every table bit for bit ref's, and ref's on the rule: rows of random floats,
 * rows whose quotients fall on halves (x = (k + 0.5) * scale), a row of zeros, extremes */
/* A NaN score: every table's softmax passes over it for the max, as ref's v > mx does, and
 * gives it (and so its head's sum) NaN weight; the x86 tables had clamped it into exp's range (a
 * finite weight, the NaN hidden) and AVX2's max had dropped the maxima before it */
TEST(attn_softmax_nan_as_ref) {
    const hachi_kernels *R = hachi_kernels_ref();
    enum { G = 8, N = 6 };
    float base[N * G];
    uint64_t seed = 11;
    for (int i = 0; i < N * G; i++) base[i] = 4.0f * frand(&seed);
    base[0 * G + 0] = 30.0f;
    base[1 * G + 0] = NAN;    /* after the head's largest */
    base[0 * G + 3] = NAN;    /* first of its head */
    float xr[N * G], mr[G], sr[G];
    memcpy(xr, base, sizeof xr);
    for (int h = 0; h < G; h++) mr[h] = -INFINITY;
    R->attn_softmax(xr, N, G, 0.5f, mr, sr);
    CHECK(mr[0] == 15.0f && isnan(sr[0]) && isnan(sr[3]) && !isnan(sr[1]));
    for (int isa = 0; isa < HACHI_ISA_COUNT; isa++) {
        const hachi_kernels *K = hachi_kernels_get((hachi_isa)isa);
        if (!K || K == R || !K->attn_softmax) continue;
        float xk[N * G], mk[G], sk[G];
        memcpy(xk, base, sizeof xk);
        for (int h = 0; h < G; h++) mk[h] = -INFINITY;
        K->attn_softmax(xk, N, G, 0.5f, mk, sk);
        int bad = 0;
        for (int h = 0; h < G; h++) bad += mk[h] != mr[h] || isnan(sk[h]) != isnan(sr[h]);
        for (int i = 0; i < N * G; i++) bad += isnan(xk[i]) != isnan(xr[i]);
        CHECKF(bad == 0, "%s softmax with NaN scores: %d maxima, sums or weights unlike ref's (max %g, ref %g)", K->name,
               bad, mk[0], mr[0]);
    }
}

TEST(quant_rows_i8_vs_ref) {
    const hachi_kernels *R = hachi_kernels_ref();
    const int ns[] = {16, 64, 512, 24, 5};
    uint64_t seed = 3;
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int n = ns[ni], rows = 6;
        float *x = malloc(sizeof *x * rows * n), sr[6], sk[6];
        int8_t *qr = malloc((size_t)rows * n), *qk = malloc((size_t)rows * n);
        for (int i = 0; i < rows * n; i++) x[i] = 3.0f * frand(&seed);
        for (int i = 0; i < n; i++) {
            x[n + i] = i == 0 ? 127.0f : (float)(i % 200 - 100) + 0.5f;   /* scale 1: quotients on halves */
            x[2 * n + i] = 0.0f;
            x[3 * n + i] = i % 2 ? -1e30f : 1e-30f;
            x[4 * n + i] = i == 1 ? -127.0f : (float)(i % 7) * 0.25f - 0.75f;
        }
        x[5 * n + 1] = 100.0f;   /* a NaN after the largest: passed over by the max, quantized to -127 */
        x[5 * n + n / 2] = NAN;
        R->quant_rows_i8(x, rows, n, qr, sr);
        int bad = 0;
        for (int r = 0; r < rows; r++) {
            float mx = 0;
            for (int i = 0; i < n; i++) mx = fmaxf(mx, fabsf(x[r * n + i]));
            bad += sr[r] != mx / 127.0f;
            for (int i = 0; i < n; i++) {
                const double y = sr[r] > 0 ? (double)(x[r * n + i] / sr[r]) : 0;
                const double want = isnan(y) ? -127 : fmax(-127, fmin(127, y < 0 ? -floor(-y + 0.5) : floor(y + 0.5)));
                bad += qr[r * n + i] != (int)want;
            }
        }
        CHECKF(bad == 0, "ref quant_rows_i8 n %d: %d elements or scales off the rule", n, bad);
        for (int isa = 0; isa < HACHI_ISA_COUNT; isa++) {
            const hachi_kernels *K = hachi_kernels_get((hachi_isa)isa);
            if (!K || K == R) continue;
            K->quant_rows_i8(x, rows, n, qk, sk);
            int same = !memcmp(qr, qk, (size_t)rows * n);
            for (int r = 0; r < rows; r++) same &= sr[r] == sk[r];
            CHECKF(same, "%s quant_rows_i8 n %d: not ref's values or scales", K->name, n);
        }
        free(x); free(qr); free(qk);
    }
}

/* K/V rows staged into a cache of the type (kv.c: conversion, int8 quantization), then
 * hachi_kv_scores, softmax, hachi_kv_values and the division by the sum, as attn.c runs them:
 * out [Hkv * G][hd] for the query q [Hkv * G][hd] over nk positions. */
static void kv_attend(const hachi_kernels *K, hachi_kv_type type, int Hkv, int hd, int nk, const float *k,
                      const float *v, const float *q, int G, float scale, float *out, hachi_kv *keep) {
    hachi_kv kv;
    size_t bytes = 0;
    if (hachi_kv_init(&kv, 0, Hkv, hd, 0, 2048, 1, type, false, &bytes) != HACHI_OK) { CHECK(0); return; }
    const int dim = Hkv * hd;
    for (int t = 0; t < nk; t++) {
        hachi_kv_stage(&kv, K, t, 0, k + (size_t)t * dim, v + (size_t)t * dim);
        hachi_kv_commit(&kv, t, 1);
    }
    float *s = malloc(sizeof *s * nk * G), mx[GMAX], sum[GMAX];
    int32_t *vsum = malloc(sizeof *vsum * G * hd);
    float *qk = malloc(sizeof *qk * hachi_kv_query_floats(G, hd));
    const hachi_kv_run r = hachi_kv_segment(&kv, 0, nk, nk);
    CHECK(r.n == nk);
    for (int g = 0; g < Hkv; g++) {
        const hachi_kv_query kq = hachi_kv_query_prepare(&kv, K, q + (size_t)g * G * hd, G, hd, qk);
        float *og = out + (size_t)g * G * hd;
        hachi_kv_scores(&kv, K, &r, g, hd, &kq, G, s);
        for (int h = 0; h < G; h++) mx[h] = -INFINITY;
        K->attn_softmax(s, nk, G, scale, mx, sum);
        memset(og, 0, sizeof *og * G * hd);
        hachi_kv_values(&kv, K, &r, 1, g, hd, s, G, og, false, vsum);
        for (int h = 0; h < G; h++)
            for (int d = 0; d < hd; d++) og[h * hd + d] /= sum[h];
    }
    free(s);
    free(qk);
    free(vsum);
    if (keep) *keep = kv;
    else hachi_kv_free(&kv);
}

/* Staging quantizes each head of a row to scale = max|x| / 127, q = round(x / scale): the
 * largest |q| is 127 and every element is within half a scale step (a head of zeros: scale 0). */
static void check_quantized(const hachi_kv *kv, int which, const float *x, int nk, int Hkv, int hd) {
    int n, bad = 0;
    const int8_t *q = (const int8_t *)hachi_kv_rows(kv, which, 0, 0, nk, &n);
    // cppcheck-suppress invalidPointerCast ; hachi_kv_rows gives an int8 cache's scales as f32 arrays
    const float *sc = (const float *)hachi_kv_rows(kv, which, 1, 0, nk, &n);
    for (int t = 0; t < nk; t++)
        for (int g = 0; g < Hkv; g++) {
            const float *xg = x + (size_t)t * Hkv * hd + (size_t)g * hd, s = sc[t * Hkv + g];
            const int8_t *qg = q + (size_t)t * Hkv * hd + (size_t)g * hd;
            float mx = 0;
            int qmax = 0;
            for (int d = 0; d < hd; d++) {
                mx = fmaxf(mx, fabsf(xg[d]));
                qmax = abs(qg[d]) > qmax ? abs(qg[d]) : qmax;
                bad += !(fabsf(xg[d] - s * qg[d]) <= 0.501f * s);
            }
            bad += s != mx / 127.0f || qmax != (mx > 0 ? 127 : 0);
        }
    CHECKF(bad == 0, "int8 staging of %c: %d elements or heads off the quantization rule", which ? 'V' : 'K', bad);
}

/* The same attention over int8 and over fp16 rows of the same f32 K/V differs by what the
 * two roundings of K and V allow. In exact arithmetic, with k8, v8 the stored int8 rows
 * dequantized (scale * q), k16, v16 the fp16 ones and q8 the query as the int8 cache's scores
 * quantize it (dequantized; the same rule), per query head h:
 *   logits: z8_j - z16_j = attn_scale * sum_d (q8_hd k8_jd - q_hd k16_jd), at most D_h in size over
 *           the keys, plus the two score kernels' rounding (one SCORES_TOL each) and the
 *           exponentials' (2 EXP_REL), so after normalization p8_j / p16_j lies within
 *           e^(+-2 D_h);
 *   output: o8 - o16 = sum_j (p8_j - p16_j) v8_j + sum_j p16_j (v8_j - v16_j), at most
 *           (e^(2 D_h) - 1) sum_j p16_j |v8_jd| + sum_j p16_j |v8_jd - v16_jd|, plus the int8
 *           values' 15-bit weights (each off by its block's largest / 65534, kernels.h), both
 *           value sums' rounding (VALUES_TOL) and the division by the sum.
 * The quantization errors themselves are bounded by check_quantized (half a step). Measured
 * (ref, AVX2 and NEON tables, hd 64 and 256, 2 K/V heads, G 4 and 8, 300 keys of unit-RMS
 * rows with one outlier dimension per head and zero heads): the worst difference is 0.06-0.09
 * of this bound, about 0.004-0.007 absolute on outputs of size ~0.1. */
TEST(attn_int8_vs_f16) {
    const int Hkv = 2, nk = 300, hds[] = {64, 256}, Gs[] = {4, 8};
    uint64_t seed = 5;
    for (int isa = 0; isa < HACHI_ISA_COUNT; isa++) {
        const hachi_kernels *K = hachi_kernels_get((hachi_isa)isa);
        if (!K) continue;
        for (int hi = 0; hi < 2; hi++)
            for (int gi = 0; gi < 2; gi++) {
                const int hd = hds[hi], G = Gs[gi], dim = Hkv * hd;
                const float scale = 1.0f / sqrtf((float)hd);
                float *k = malloc(sizeof *k * nk * dim), *v = malloc(sizeof *v * nk * dim);
                float *q = malloc(sizeof *q * Hkv * G * hd);
                float *o8 = malloc(sizeof *o8 * Hkv * G * hd), *o16 = malloc(sizeof *o16 * Hkv * G * hd);
                double *pj = malloc(sizeof *pj * nk);
                for (int i = 0; i < nk * dim; i++) {
                    const int d = i % hd;   /* one outlier dimension per head sets the scale */
                    k[i] = 1.7f * frand(&seed) * (d == 5 ? 3.0f : 1.0f);
                    v[i] = 1.7f * frand(&seed) * (d == 7 ? 3.0f : 1.0f);
                }
                for (int t = 0; t < 3; t++)   /* heads of zeros: scale 0 */
                    for (int d = 0; d < hd; d++) k[(size_t)(7 + t) * dim + d] = v[(size_t)(9 + t) * dim + hd + d] = 0;
                for (int i = 0; i < Hkv * G * hd; i++) q[i] = 2.0f * frand(&seed);
                hachi_kv kv8;
                kv_attend(K, HACHI_KV_INT8, Hkv, hd, nk, k, v, q, G, scale, o8, &kv8);
                kv_attend(K, HACHI_KV_F16, Hkv, hd, nk, k, v, q, G, scale, o16, NULL);
                check_quantized(&kv8, 0, k, nk, Hkv, hd);
                check_quantized(&kv8, 1, v, nk, Hkv, hd);
                int n;
                const int8_t *kq = (const int8_t *)hachi_kv_rows(&kv8, 0, 0, 0, nk, &n);
                const int8_t *vq = (const int8_t *)hachi_kv_rows(&kv8, 1, 0, 0, nk, &n);
                // cppcheck-suppress invalidPointerCast ; as in check_quantized
                const float *ks = (const float *)hachi_kv_rows(&kv8, 0, 1, 0, nk, &n);
                // cppcheck-suppress invalidPointerCast ; as in check_quantized
                const float *vs = (const float *)hachi_kv_rows(&kv8, 1, 1, 0, nk, &n);
#define F16(x) ((double)hachi_f16_to_f32(hachi_f32_to_f16(x)))
                double worst = 0;
                int at = 0, qbad = 0;
                float *qk = malloc(sizeof *qk * hachi_kv_query_floats(G, hd));
                for (int g = 0; g < Hkv; g++) {
                    const hachi_kv_query qq = hachi_kv_query_prepare(&kv8, K, q + (size_t)g * G * hd, G, hd, qk);
                    for (int h = 0; h < G; h++) {
                        const float *qh = q + (size_t)(g * G + h) * hd;
                        const int8_t *q8 = qq.i8.q8 + (size_t)h * hd;
                        const float qs = qq.i8.qs[h];
                        float qmx = 0;
                        for (int d = 0; d < hd; d++) {
                            qmx = fmaxf(qmx, fabsf(qh[d]));
                            qbad += !(fabsf(qh[d] - qs * q8[d]) <= 0.501f * qs) || qq.i8.qf[(size_t)h * hd + d] != q8[d];
                        }
                        qbad += qs != qmx / 127.0f;
                        double D = 0, mxs = -1e300, den = 0;
                        for (int j = 0; j < nk; j++) {   /* the exact fp16-row logits and their difference */
                            const size_t r = (size_t)j * dim + (size_t)g * hd;
                            double dz = 0, mag = 0, z = 0;
                            for (int d = 0; d < hd; d++) {
                                const double k16 = F16(k[r + d]), k8 = (double)ks[j * Hkv + g] * kq[r + d];
                                dz += (double)qs * q8[d] * k8 - qh[d] * k16;
                                mag += fabs(qh[d] * k16);
                                z += qh[d] * k16;
                            }
                            D = fmax(D, scale * (fabs(dz) + 2 * SCORES_TOL(hd, mag)));
                            pj[j] = scale * z;
                            mxs = fmax(mxs, pj[j]);
                        }
                        for (int j = 0; j < nk; j++) den += pj[j] = exp(pj[j] - mxs);
                        D += 2 * EXP_REL;
                        double wmax = 0;   /* the largest weight times its row's scale, normalized */
                        for (int j = 0; j < nk; j++) wmax = fmax(wmax, pj[j] / den * vs[j * Hkv + g]);
                        for (int d = 0; d < hd; d++) {
                            double pv = 0, pe = 0, vsum = 0;
                            for (int j = 0; j < nk; j++) {
                                const size_t r = (size_t)j * dim + (size_t)g * hd + d;
                                const double p = pj[j] / den, v8 = (double)vs[j * Hkv + g] * vq[r];
                                pv += p * fabs(v8);
                                pe += p * fabs(v8 - F16(v[r]));
                                vsum += abs(vq[r]);
                            }
                            /* the values' 15-bit weights: each off by at most its block's largest / 65534 */
                            const double wq = exp(2 * D) * wmax / 65534 * vsum;
                            const double tol = (exp(2 * D) - 1) * pv + pe + wq + 2 * VALUES_TOL(nk, pv + pe) +
                                               4 * FLT_EPSILON * (pv + pe) + 1e-30;
                            const size_t i = (size_t)(g * G + h) * hd + d;
                            const double e = fabs((double)o8[i] - o16[i]) / tol;
                            if (!(e <= worst)) { worst = e; at = (int)i; }
                        }
                    }
                }
#undef F16
                free(qk);
                CHECKF(qbad == 0, "%s hd %d G %d: %d query elements or heads off the quantization rule", K->name, hd, G, qbad);
                printf("    %s int8 vs f16 attention, hd %d G %d: worst %.3f of the bound (index %d: %.6g vs %.6g)\n",
                       K->name, hd, G, worst, at, o8[at], o16[at]);
                CHECKF(worst <= 1.0, "%s int8 vs f16 attention hd %d G %d: index %d %.9g, f16 %.9g (%.2f x bound)",
                       K->name, hd, G, at, o8[at], o16[at], worst);
                hachi_kv_free(&kv8);
                free(k); free(v); free(q); free(o8); free(o16); free(pj);
            }
    }
}
