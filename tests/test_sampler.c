/* Tests for the sampler: greedy and its tie rule, seeding, top-k = 1 equals
 * greedy, the empirical distribution against softmax (chi-square bound at a
 * fixed seed, so deterministic), top-p / min-p cut-offs, the repetition
 * penalty and its window, the presence and frequency penalties, the logit biases, no allocation in
 * sample(), parameter checks. */
#include "test.h"
#include "hachi.h"
#include "util.h"
#include <math.h>

static hachi_sampler *mk(hachi_sampler_params p, int32_t n_vocab) {
    hachi_sampler *s = NULL;
    hachi_status st = hachi_sampler_create(&p, n_vocab, &s);
    CHECKF(st == HACHI_OK, "sampler_create: %s", hachi_last_error());
    return s;
}

static hachi_sampler_params plain(float temp) {
    hachi_sampler_params p = hachi_sampler_default_params();
    p.temp = temp; p.top_k = 0; p.top_p = 1.0f; p.min_p = 0.0f;
    return p;
}

static uint64_t lcg(uint64_t *x) { *x = *x * 6364136223846793005ull + 1442695040888963407ull; return *x >> 33; }
static void random_logits(float *l, int n, uint64_t seed, float scale) {
    for (int i = 0; i < n; i++) l[i] = ((float)(lcg(&seed) % 100000) / 100000.0f - 0.5f) * scale;
}

TEST(sampler_defaults) {
    hachi_sampler_params p = hachi_sampler_default_params();
    CHECK(p.temp == 0.8f && p.top_k == 40 && p.top_p == 0.95f && p.min_p == 0.05f);
    CHECK(p.repeat_penalty == 1.0f && p.repeat_last_n == 64 && p.seed == 0);
}

TEST(sampler_greedy_and_ties) {
    hachi_sampler *s = mk(plain(0.0f), 6);
    if (!s) return;
    float l1[6] = {0.1f, 3.0f, -2.0f, 3.0f, 2.9f, 3.0f};
    CHECK(hachi_sampler_sample(s, l1) == 1);
    float l2[6] = {-INFINITY, -1.0f, -0.5f, -0.5f, -7.0f, -0.6f};
    CHECK(hachi_sampler_sample(s, l2) == 2);
    float l3[6] = {5, 5, 5, 5, 5, 5};
    CHECK(hachi_sampler_sample(s, l3) == 0);
    float l4[6] = {NAN, 1.0f, NAN, 2.0f, 0.0f, 1.5f};
    CHECK(hachi_sampler_sample(s, l4) == 3);
    hachi_sampler_free(s);
}

TEST(sampler_seeds) {
    enum { V = 100, N = 64 };
    float l[V];
    random_logits(l, V, 7, 2.0f);
    int32_t a[N], b[N], c[N], d[N];
    hachi_sampler_params p = plain(1.0f);
    p.seed = 1234;
    hachi_sampler *s1 = mk(p, V), *s2 = mk(p, V);
    p.seed = 99;
    hachi_sampler *s3 = mk(p, V);
    if (!s1 || !s2 || !s3) return;
    for (int i = 0; i < N; i++) {
        a[i] = hachi_sampler_sample(s1, l);
        b[i] = hachi_sampler_sample(s2, l);
        c[i] = hachi_sampler_sample(s3, l);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    hachi_sampler_reset(s1);            /* reset re-seeds: the sequence repeats */
    for (int i = 0; i < N; i++) d[i] = hachi_sampler_sample(s1, l);
    CHECK(memcmp(a, d, sizeof a) == 0);
    /* seed 0 is a fixed default: two samplers agree */
    p.seed = 0;
    hachi_sampler *z1 = mk(p, V), *z2 = mk(p, V);
    if (z1 && z2) {
        int same = 1;
        for (int i = 0; i < N; i++) same &= hachi_sampler_sample(z1, l) == hachi_sampler_sample(z2, l);
        CHECK(same);
    }
    hachi_sampler_free(z1); hachi_sampler_free(z2);
    hachi_sampler_free(s1); hachi_sampler_free(s2); hachi_sampler_free(s3);
}

TEST(sampler_top_k1_is_greedy) {
    enum { V = 5000 };
    static float l[V];
    hachi_sampler_params p = hachi_sampler_default_params();
    p.top_k = 1;
    hachi_sampler *s = mk(p, V), *g = mk(plain(0.0f), V);
    if (!s || !g) return;
    for (int r = 0; r < 20; r++) {
        random_logits(l, V, 100 + r, 10.0f);
        if (r % 4 == 0) l[r * 7] = l[r * 7 + 1] = 100.0f;   /* a tie */
        CHECK(hachi_sampler_sample(s, l) == hachi_sampler_sample(g, l));
    }
    hachi_sampler_free(s); hachi_sampler_free(g);
}

/* A temperature so small that its reciprocal overflows a float is greedy (its limit): 1/temp = inf
 * made every weight NaN and the draw token 0, with top-k 0 and top-p 1 (any min-p) */
TEST(sampler_tiny_temperature_is_greedy) {
    enum { V = 5000 };
    static float l[V];
    const float temps[] = {1e-40f, 2e-39f, 1e-45f};
    for (size_t t = 0; t < sizeof temps / sizeof temps[0]; t++) {
        hachi_sampler_params p = plain(temps[t]);
        hachi_sampler *s = mk(p, V), *g = mk(plain(0.0f), V);
        if (!s || !g) return;
        for (int r = 0; r < 8; r++) {
            random_logits(l, V, 300 + r, 10.0f);
            const int32_t want = hachi_sampler_sample(g, l);
            CHECKF(want > 0 && hachi_sampler_sample(s, l) == want, "temp %g: token %d, greedy %d", temps[t],
                   hachi_sampler_sample(s, l), want);
        }
        hachi_sampler_free(s); hachi_sampler_free(g);
    }
}

/* Draw n times; chi-square of the counts against probabilities q (q[i] == 0
 * must never be drawn). Returns the statistic, *df the degrees of freedom. */
static double chi_square(hachi_sampler *s, const float *l, const double *q, int V, int n, int *df, int *forbidden) {
    static int cnt[64];
    memset(cnt, 0, sizeof cnt);
    *forbidden = 0;
    for (int i = 0; i < n; i++) {
        int32_t t = hachi_sampler_sample(s, l);
        if (t < 0 || t >= V || q[t] == 0) (*forbidden)++;
        else cnt[t]++;
    }
    double x2 = 0;
    *df = -1;
    for (int i = 0; i < V; i++) {
        if (q[i] == 0) continue;
        double e = q[i] * n;
        x2 += (cnt[i] - e) * (cnt[i] - e) / e;
        (*df)++;
    }
    return x2;
}

/* Bound for a chi-square with df degrees of freedom, far in the tail
 * (mean df, sd sqrt(2 df): mean + 8 sd + 10); at a fixed seed the test is deterministic. */
static double chi_bound(int df) { return df + 8.0 * sqrt(2.0 * df) + 10.0; }

TEST(sampler_distribution_matches_softmax) {
    enum { V = 12, N = 200000 };
    float l[V];
    random_logits(l, V, 3, 4.0f);
    static const float temps[] = {1.0f, 0.5f, 2.0f};
    for (int ti = 0; ti < 3; ti++) {
        double q[V], z = 0;
        for (int i = 0; i < V; i++) z += exp((double)l[i] / temps[ti]);
        for (int i = 0; i < V; i++) q[i] = exp((double)l[i] / temps[ti]) / z;
        hachi_sampler_params p = plain(temps[ti]);
        p.seed = 42 + (uint64_t)ti;
        hachi_sampler *s = mk(p, V);
        if (!s) return;
        int df, bad;
        double x2 = chi_square(s, l, q, V, N, &df, &bad);
        CHECKF(x2 < chi_bound(df) && bad == 0, "temp %g: chi2 %.1f (df %d, bound %.1f), %d forbidden",
               (double)temps[ti], x2, df, chi_bound(df), bad);
        hachi_sampler_free(s);
    }
    /* top-k path: softmax over the 5 best only */
    {
        double q[V], z = 0;
        int rank[V];
        for (int i = 0; i < V; i++) {
            rank[i] = 0;
            for (int j = 0; j < V; j++) rank[i] += l[j] > l[i];
        }
        for (int i = 0; i < V; i++) q[i] = rank[i] < 5 ? exp((double)l[i] / 0.7) : 0, z += q[i];
        for (int i = 0; i < V; i++) q[i] /= z;
        hachi_sampler_params p = plain(0.7f);
        p.top_k = 5;
        hachi_sampler *s = mk(p, V);
        if (!s) return;
        int df, bad;
        double x2 = chi_square(s, l, q, V, N, &df, &bad);
        CHECKF(x2 < chi_bound(df) && bad == 0 && df == 4, "top-k 5: chi2 %.1f (df %d), %d forbidden", x2, df, bad);
        hachi_sampler_free(s);
    }
}

/* probabilities 0.5, 0.3, 0.15, 0.05 (+ optional negligible tail) */
static void four_probs(float *l, int V) {
    l[0] = logf(0.5f); l[1] = logf(0.3f); l[2] = logf(0.15f); l[3] = logf(0.05f);
    for (int i = 4; i < V; i++) l[i] = -1e4f;
}

static void check_support(hachi_sampler_params p, int V, const int *allowed, const char *what) {
    static float l[4096];
    four_probs(l, V);
    hachi_sampler *s = mk(p, V);
    if (!s) return;
    int seen[4] = {0}, bad = 0;
    for (int i = 0; i < 4000; i++) {
        int32_t t = hachi_sampler_sample(s, l);
        if (t < 0 || t >= 4 || !allowed[t]) bad++;
        else seen[t]++;
    }
    CHECKF(bad == 0, "%s: %d draws outside the allowed set", what, bad);
    for (int i = 0; i < 4; i++) CHECKF(!allowed[i] || seen[i] > 0, "%s: token %d never drawn", what, i);
    hachi_sampler_free(s);
}

TEST(sampler_top_p_min_p) {
    static const int p01[4] = {1, 1, 0, 0}, p012[4] = {1, 1, 1, 0}, p0[4] = {1, 0, 0, 0};
    hachi_sampler_params p = plain(1.0f);
    p.top_p = 0.75f;                                  /* 0.5 < 0.75 <= 0.8 */
    check_support(p, 4, p01, "top-p 0.75, vocab 4");
    check_support(p, 3000, p01, "top-p 0.75, vocab 3000 (full path)");
    p.top_k = 10;
    check_support(p, 3000, p01, "top-p 0.75 after top-k 10");
    p.top_p = 0.9f;                                   /* 0.8 < 0.9 <= 0.95 */
    check_support(p, 3000, p012, "top-p 0.9 after top-k 10");
    p.top_p = 0.3f;                                   /* keeps at least the first */
    check_support(p, 3000, p0, "top-p 0.3");
    p = plain(1.0f);
    p.min_p = 0.2f;                                   /* threshold 0.1 drops token 3 */
    check_support(p, 4, p012, "min-p 0.2, vocab 4");
    check_support(p, 3000, p012, "min-p 0.2, vocab 3000");
    p.top_k = 40;
    check_support(p, 3000, p012, "min-p 0.2 after top-k 40");
    p.min_p = 0.61f;                                  /* 0.3 / 0.5 = 0.6 < 0.61 */
    check_support(p, 3000, p0, "min-p 0.61");
    p = plain(1.0f);
    p.top_p = 0.9f; p.min_p = 0.2f;
    check_support(p, 3000, p012, "top-p 0.9 + min-p 0.2");
    p.top_p = 0.75f;
    check_support(p, 3000, p01, "top-p 0.75 + min-p 0.2");
}

TEST(sampler_nucleus_large_vocab_distribution) {
    /* full path with top-p over a vocab larger than the first partial selection:
     * 200 equal tokens at the top, top-p 0.5 keeps about 100 of them, no more. */
    enum { V = 50000 };
    static float l[V];
    random_logits(l, V, 11, 1.0f);
    for (int i = 0; i < 200; i++) l[i * 97] = 12.0f;
    hachi_sampler_params p = plain(1.0f);
    p.top_p = 0.5f;
    hachi_sampler *s = mk(p, V);
    if (!s) return;
    int bad = 0, distinct = 0;
    static int seen[V];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 5000; i++) {
        int32_t t = hachi_sampler_sample(s, l);
        if (t % 97 != 0 || t / 97 > 101) bad++;
        else if (!seen[t]++) distinct++;
    }
    CHECKF(bad == 0, "%d draws outside the top tokens", bad);
    /* ties resolve to the lowest ids: the kept prefix is the first ~100 of them */
    CHECKF(distinct >= 90 && distinct <= 110, "distinct %d, expected ~100", distinct);
    hachi_sampler_free(s);
}

TEST(sampler_repetition_penalty) {
    enum { V = 8 };
    float l[V] = {2.0f, 1.9f, -1.0f, -1.1f, 0.0f, -3.0f, -3.0f, -3.0f};
    hachi_sampler_params p = plain(0.0f);
    p.repeat_penalty = 1.2f;
    p.repeat_last_n = 2;
    hachi_sampler *s = mk(p, V);
    if (!s) return;
    CHECK(hachi_sampler_sample(s, l) == 0);
    hachi_sampler_accept(s, 0);
    CHECK(hachi_sampler_sample(s, l) == 1);          /* 2.0 / 1.2 = 1.67 < 1.9 */
    hachi_sampler_accept(s, 0);                      /* a repeat is penalized once */
    CHECK(hachi_sampler_sample(s, l) == 1);
    hachi_sampler_accept(s, 1);
    CHECK(hachi_sampler_sample(s, l) == 0);          /* both penalized: 1.67 > 1.58 */
    hachi_sampler_accept(s, 5);                      /* window 2: token 0 leaves */
    CHECK(hachi_sampler_sample(s, l) == 0);          /* 2.0 vs 1.9/1.2 */
    hachi_sampler_accept(s, 7);                      /* token 1 leaves too */
    CHECK(hachi_sampler_sample(s, l) == 0);
    hachi_sampler_reset(s);
    CHECK(hachi_sampler_sample(s, l) == 0);
    hachi_sampler_accept(s, 0);
    CHECK(hachi_sampler_sample(s, l) == 1);
    hachi_sampler_free(s);
    /* negative logits are multiplied: -1.0 * 1.5 = -1.5 < -1.1 */
    float m[V] = {-1.0f, -1.1f, -5, -5, -5, -5, -5, -5};
    p.repeat_penalty = 1.5f;
    p.repeat_last_n = 64;
    s = mk(p, V);
    if (!s) return;
    hachi_sampler_accept(s, 0);
    hachi_sampler_accept(s, -3);                     /* out of range: ignored */
    hachi_sampler_accept(s, V);
    CHECK(hachi_sampler_sample(s, m) == 1);
    hachi_sampler_free(s);
    /* the penalty also applies in sampling mode: top-k 1 follows it, input untouched */
    p = hachi_sampler_default_params();
    p.top_k = 1;
    p.repeat_penalty = 1.2f;
    s = mk(p, V);
    if (!s) return;
    hachi_sampler_accept(s, 0);
    CHECK(hachi_sampler_sample(s, l) == 1);
    CHECK(l[0] == 2.0f);
    hachi_sampler_free(s);
}

/* OpenAI's presence and frequency penalties over the window, after llama.cpp's repetition
 * penalty: logit - (count * frequency + presence), greedy and sampled */
TEST(sampler_presence_frequency_penalty) {
    enum { V = 6, N = 200000 };
    float l[V] = {2.0f, 1.5f, 1.0f, 0.0f, -0.5f, -1.0f};
    hachi_sampler_params p = plain(0.0f);
    p.presence_penalty = 0.3f;
    p.frequency_penalty = 0.2f;
    p.repeat_last_n = 3;
    hachi_sampler *s = mk(p, V);
    if (!s) return;
    CHECK(hachi_sampler_sample(s, l) == 0);
    hachi_sampler_accept(s, 0);
    CHECK(hachi_sampler_sample(s, l) == 0);          /* 2.0 - 0.5 = 1.5: a tie with token 1, lower id */
    hachi_sampler_accept(s, 0);
    CHECK(hachi_sampler_sample(s, l) == 1);          /* 2.0 - 0.7 = 1.3 < 1.5 */
    hachi_sampler_accept(s, 1);
    CHECK(hachi_sampler_sample(s, l) == 0);          /* 1.3 against 1.5 - 0.5 = 1.0 */
    hachi_sampler_accept(s, 5);                      /* window 3: the first 0 leaves */
    CHECK(hachi_sampler_sample(s, l) == 0);          /* 2.0 - 0.5 = 1.5 against 1.0 */
    hachi_sampler_accept_prompt(s, 2);               /* a prompt's tokens: not counted... */
    hachi_sampler_accept_prompt(s, 2);               /* ...(and 0 and 1 leave the window) */
    CHECK(hachi_sampler_sample(s, l) == 0);
    hachi_sampler_reset(s);
    for (int i = 0; i < 3; i++) hachi_sampler_accept_prompt(s, 0);
    CHECK(hachi_sampler_sample(s, l) == 0);          /* 2.0 unpenalized */
    hachi_sampler_free(s);
    /* the repetition penalty first, then a negative presence penalty raises the token: token 0
     * seen once is 2.0 / 2 - (1 * 0.1 - 0.6) = 1.5, a tie with the unseen token 1 */
    p = plain(0.0f);
    p.repeat_penalty = 2.0f;
    p.presence_penalty = -0.6f;
    p.frequency_penalty = 0.1f;
    s = mk(p, V);
    if (!s) return;
    hachi_sampler_accept(s, 0);
    CHECK(hachi_sampler_sample(s, l) == 0);
    hachi_sampler_accept(s, 0);                      /* 1.0 - (0.2 - 0.6) = 1.4 < 1.5 */
    CHECK(hachi_sampler_sample(s, l) == 1);
    hachi_sampler_free(s);
    /* sampled: the draws follow softmax of the penalized logits (chi-square at a fixed seed) */
    p = plain(1.0f);
    p.presence_penalty = 0.4f;
    p.frequency_penalty = 0.25f;
    p.seed = 7;
    s = mk(p, V);
    if (!s) return;
    const int seen[] = {0, 0, 2, 4};   /* counts 2, 0, 1, 0, 1, 0 */
    for (int i = 0; i < 4; i++) hachi_sampler_accept(s, seen[i]);
    const int count[V] = {2, 0, 1, 0, 1, 0};
    double q[V], z = 0;
    for (int i = 0; i < V; i++) z += q[i] = exp((double)l[i] - (count[i] ? count[i] * 0.25 + 0.4 : 0));
    for (int i = 0; i < V; i++) q[i] /= z;
    int df, bad;
    double x2 = chi_square(s, l, q, V, N, &df, &bad);
    CHECKF(x2 < chi_bound(df) && bad == 0, "penalized softmax: chi2 %.1f (df %d, bound %.1f), %d forbidden", x2, df,
           chi_bound(df), bad);
    hachi_sampler_free(s);
}

/* logit_bias: added before the penalties, in greedy decoding too; -inf bans a token; the draws
 * follow softmax of the biased logits; a bad id or bias is refused with the list unchanged */
TEST(sampler_logit_bias) {
    enum { V = 6, N = 200000 };
    float l[V] = {2.0f, 1.5f, 1.0f, 0.0f, -0.5f, -1.0f};
    hachi_sampler_params p = plain(0.0f);
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 4;
    hachi_sampler *s = mk(p, V);
    if (!s) return;
    const int32_t ids[] = {3, 0};
    const float up[] = {1.75f, -INFINITY};
    CHECK(hachi_sampler_set_logit_bias(s, ids, up, 2) == HACHI_OK);
    CHECK(hachi_sampler_sample(s, l) == 3);          /* 0 + 1.75 beats 1.5; token 0 banned */
    hachi_sampler_accept(s, 3);
    CHECK(hachi_sampler_sample(s, l) == 1);          /* the penalty after the bias: 1.75 / 2 */
    const int32_t bad_id[] = {V};
    const float nan_bias[] = {NAN}, inf_bias[] = {INFINITY};
    CHECK(hachi_sampler_set_logit_bias(s, bad_id, up, 1) == HACHI_ERR_INVALID_ARG);
    CHECK(hachi_sampler_set_logit_bias(s, ids, nan_bias, 1) == HACHI_ERR_INVALID_ARG);
    CHECK(hachi_sampler_set_logit_bias(s, ids, inf_bias, 1) == HACHI_ERR_INVALID_ARG);
    CHECK(hachi_sampler_sample(s, l) == 1);          /* (unchanged) */
    hachi_sampler_reset(s);
    CHECK(hachi_sampler_sample(s, l) == 3);          /* a reset keeps the list */
    CHECK(hachi_sampler_set_logit_bias(s, NULL, NULL, 0) == HACHI_OK && hachi_sampler_sample(s, l) == 0);
    hachi_sampler_free(s);
    /* sampled, top-k 4 over the biased logits */
    p = plain(1.0f);
    p.top_k = 4;
    p.seed = 11;
    s = mk(p, V);
    if (!s) return;
    const int32_t bid[] = {5, 1, 2};
    const float b[] = {3.5f, -0.25f, -INFINITY};
    CHECK(hachi_sampler_set_logit_bias(s, bid, b, 3) == HACHI_OK);
    float lb[V];
    memcpy(lb, l, sizeof lb);
    for (int i = 0; i < 3; i++) lb[bid[i]] += b[i];   /* 2.0 1.25 -inf 0.0 -0.5 2.5: the top 4 are 5 0 1 3 */
    double q[V] = {0}, z = 0;
    const int top[] = {5, 0, 1, 3};
    for (int i = 0; i < 4; i++) z += q[top[i]] = exp((double)lb[top[i]]);
    for (int i = 0; i < V; i++) q[i] /= z;
    int df, bad;
    double x2 = chi_square(s, l, q, V, N, &df, &bad);
    CHECKF(x2 < chi_bound(df) && bad == 0 && df == 3, "biased top-k: chi2 %.1f (df %d, bound %.1f), %d forbidden", x2, df,
           chi_bound(df), bad);
    hachi_sampler_free(s);
}

/* A constraint (here: only even tokens, then after 2 accepted tokens only token 4) masks before the
 * biases in every mode, and advances by accepted tokens, not a prompt's */
typedef struct { int accepted; } even_ctx;
static void even_mask(void *ctx, float *l, int32_t n) {
    const even_ctx *c = ctx;
    for (int32_t i = 0; i < n; i++)
        if (i % 2 || (c->accepted >= 2 && i != 4)) l[i] = -INFINITY;
}
static void even_accept(void *ctx, int32_t t) { (void)t; ((even_ctx *)ctx)->accepted++; }

TEST(sampler_constraint) {
    enum { V = 6, N = 100000 };
    float l[V] = {0.5f, 2.0f, 1.0f, 3.0f, -1.0f, 0.0f};
    even_ctx c = {0};
    const hachi_sampler_constraint con = {even_mask, even_accept, &c};
    hachi_sampler *s = mk(plain(0.0f), V);
    if (!s) return;
    hachi_sampler_set_constraint(s, &con);
    CHECK(hachi_sampler_sample(s, l) == 2);          /* the best even token */
    const int32_t id[] = {0};
    const float up[] = {0.75f};
    CHECK(hachi_sampler_set_logit_bias(s, id, up, 1) == HACHI_OK && hachi_sampler_sample(s, l) == 0);
    hachi_sampler_accept_prompt(s, 0);
    CHECK(c.accepted == 0);
    hachi_sampler_accept(s, 0);
    hachi_sampler_accept(s, 2);
    CHECK(c.accepted == 2 && hachi_sampler_sample(s, l) == 4);   /* a bias does not lift a masked token */
    hachi_sampler_set_constraint(s, NULL);
    CHECK(hachi_sampler_sample(s, l) == 3);
    hachi_sampler_free(s);
    /* sampled: softmax over the even tokens (chi-square at a fixed seed) */
    c.accepted = 0;
    hachi_sampler_params p = plain(1.0f);
    p.seed = 5;
    s = mk(p, V);
    if (!s) return;
    hachi_sampler_set_constraint(s, &con);
    double q[V] = {0}, z = 0;
    for (int i = 0; i < V; i += 2) z += q[i] = exp((double)l[i]);
    for (int i = 0; i < V; i++) q[i] /= z;
    int df, bad;
    const double x2 = chi_square(s, l, q, V, N, &df, &bad);
    CHECKF(x2 < chi_bound(df) && bad == 0 && df == 2, "constrained: chi2 %.1f (df %d), %d forbidden", x2, df, bad);
    hachi_sampler_free(s);
}

TEST(sampler_large_vocab_no_alloc) {
    enum { V = 262144 };
    static float l[V];
    random_logits(l, V, 5, 20.0f);
    hachi_sampler_params ps[4];
    ps[0] = hachi_sampler_default_params();
    ps[0].repeat_penalty = 1.1f;
    ps[1] = plain(0.8f); ps[1].top_p = 0.9f;
    ps[2] = plain(0.8f); ps[2].min_p = 0.1f;
    ps[3] = plain(0.0f);
    static const char *names[4] = {"defaults+penalty", "top_k 0, top_p 0.9", "top_k 0, min_p 0.1", "greedy"};
    for (int k = 0; k < 4; k++) {
        hachi_sampler *s = mk(ps[k], V);
        if (!s) return;
        uint64_t a0 = hachi_alloc_count();
        double t0 = hachi_time_ms();
        int bad = 0;
        for (int r = 0; r < 20; r++) {
            int32_t t = hachi_sampler_sample(s, l);
            hachi_sampler_accept(s, t);
            if (k == 0) {       /* top-k 40: at most 39 tokens rank above it (before penalty: allow slack) */
                int above = 0;
                for (int i = 0; i < V; i++) above += l[i] > l[t];
                bad += above >= 40 + 20;
            }
        }
        double ms = (hachi_time_ms() - t0) / 20;
        CHECKF(hachi_alloc_count() == a0, "%s: sample allocated", names[k]);
        CHECKF(bad == 0, "%s: %d draws outside the top-k", names[k], bad);
        printf("    sample (%s, vocab %d): %.3f ms\n", names[k], V, ms);
        hachi_sampler_free(s);
    }
}

TEST(sampler_bad_params) {
    hachi_sampler *s = (hachi_sampler *)1;
    hachi_sampler_params p = hachi_sampler_default_params();
    CHECK(hachi_sampler_create(&p, 0, &s) == HACHI_ERR_INVALID_ARG && s == NULL);
    p.temp = -1;
    CHECK(hachi_sampler_create(&p, 10, &s) == HACHI_ERR_INVALID_ARG);
    p = hachi_sampler_default_params(); p.top_p = 0;
    CHECK(hachi_sampler_create(&p, 10, &s) == HACHI_ERR_INVALID_ARG);
    p = hachi_sampler_default_params(); p.min_p = 1.5f;
    CHECK(hachi_sampler_create(&p, 10, &s) == HACHI_ERR_INVALID_ARG);
    p = hachi_sampler_default_params(); p.top_k = -1;
    CHECK(hachi_sampler_create(&p, 10, &s) == HACHI_ERR_INVALID_ARG);
    p = hachi_sampler_default_params(); p.repeat_penalty = 0;
    CHECK(hachi_sampler_create(&p, 10, &s) == HACHI_ERR_INVALID_ARG);
    p = hachi_sampler_default_params(); p.presence_penalty = NAN;
    CHECK(hachi_sampler_create(&p, 10, &s) == HACHI_ERR_INVALID_ARG);
    p = hachi_sampler_default_params(); p.frequency_penalty = INFINITY;
    CHECK(hachi_sampler_create(&p, 10, &s) == HACHI_ERR_INVALID_ARG);
    CHECK(hachi_last_error()[0] != 0);
    CHECK(hachi_sampler_create(NULL, 10, &s) == HACHI_OK && s);   /* NULL params: defaults */
    hachi_sampler_free(s);
    hachi_sampler_free(NULL);
}
