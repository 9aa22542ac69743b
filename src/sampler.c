/* sampler: picks the next token from a logit vector. Once per decoded token,
 * so it must stay small next to a forward pass even at a 262,144 vocabulary:
 * top-k is a bounded heap over the vocabulary (O(n) when k is small), never a
 * full sort; with top_k = 0 the nucleus is found from a histogram of weights
 * and only its boundary bucket is sorted.
 *
 * Order: the constraint's mask (hachi_sampler_set_constraint); the logit biases
 * (hachi_sampler_set_logit_bias) added; the penalties over the last
 * repeat_last_n accepted tokens (both also in greedy mode): a
 * token's positive logit divided by repeat_penalty, a negative one multiplied (llama.cpp's
 * rule), then frequency_penalty * its count + presence_penalty subtracted, counting only the
 * sampled tokens in the window, not a prompt's (OpenAI's rule); then
 * temp == 0 -> argmax (ties to the lowest id); else top-k, temperature,
 * softmax, top-p (smallest prefix with mass >= top_p, at least one token),
 * min-p (p >= min_p * p_max), then one draw from the survivors.
 *
 * RNG: xoshiro256** seeded through splitmix64, so a seed gives the same
 * tokens on every platform. seed 0 means HACHI_SAMPLER_DEFAULT_SEED.
 * hachi_sampler_reset clears the penalty history and re-seeds.
 * Every buffer is allocated in hachi_sampler_create; sample() allocates nothing. */
#include "sampler.h"
#include "util.h"
#include <math.h>

#define HACHI_SAMPLER_DEFAULT_SEED 0x6861636869ull   /* "hachi" */
#define NUCLEUS_PER_NAT 16                           /* top-p buckets per nat of log-weight */
#define NUCLEUS_BUCKETS 1024                         /* the last one takes everything below */

typedef struct cand { int32_t id; float logit; } cand;

struct hachi_sampler {
    hachi_sampler_params p;
    int32_t n_vocab;
    float *work;            /* [n_vocab] penalized logits, or weights on the full path */
    cand *cand;             /* [n_vocab] candidates (full path: the min-p survivors) */
    cand *sel;              /* [n_vocab] heap / sorted selection, best first */
    int32_t *hist;          /* [repeat_last_n] ring of accepted tokens (a prompt's as -1 - id); NULL when no penalty */
    int32_t *count;         /* [n_vocab] occurrences of each token in the ring */
    int32_t *gcount;        /* [n_vocab] of which sampled (presence and frequency count only those) */
    int32_t hist_len, hist_pos;
    int32_t *bias_id;       /* [n_bias] logit biases: bias[i] added to token bias_id[i]'s logit */
    float *bias;
    int32_t n_bias;
    hachi_sampler_constraint con;   /* con.mask NULL: none */
    uint64_t rng[4];        /* xoshiro256** state */
};

/* ---- RNG ------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(hachi_sampler *s) {
    uint64_t x = s->p.seed ? s->p.seed : HACHI_SAMPLER_DEFAULT_SEED;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(hachi_sampler *s) {
    uint64_t *r = s->rng;
    uint64_t out = rotl(r[1] * 5, 7) * 9, t = r[1] << 17;
    r[2] ^= r[0]; r[3] ^= r[1]; r[1] ^= r[2]; r[0] ^= r[3];
    r[2] ^= t; r[3] = rotl(r[3], 45);
    return out;
}

static double rng_uniform(hachi_sampler *s) {   /* [0, 1) */
    return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

/* ---- selection ------------------------------------------------------------ */

/* a ranks above b: higher logit, ties to the lower id */
static inline int better(cand a, cand b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }

/* Min-heap on `better`: h[0] is the worst of the kept candidates. */
static void heap_sift_down(cand *h, int32_t n, int32_t i) {
    cand v = h[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && better(h[c], h[c + 1])) c++;
        if (!better(v, h[c])) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

static void heap_offer(cand *h, int32_t *n, int32_t k, cand v) {
    if (*n < k) {
        int32_t i = (*n)++;
        while (i > 0) {
            int32_t parent = (i - 1) / 2;
            if (!better(h[parent], v)) break;
            h[i] = h[parent];
            i = parent;
        }
        h[i] = v;
    } else if (better(v, h[0])) {
        h[0] = v;
        heap_sift_down(h, *n, 0);
    }
}

/* Heap -> sorted, best first. */
static void heap_sort(cand *h, int32_t n) {
    for (int32_t i = n - 1; i > 0; i--) {
        cand t = h[0]; h[0] = h[i]; h[i] = t;
        heap_sift_down(h, i, 0);
    }
}

/* The k best of logits[0..n) into out[0..k), sorted; NaNs are skipped. Returns the count. */
static int32_t select_top_logits(const float *l, int32_t n, int32_t k, cand *out) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        float v = l[i];
        if (v != v) continue;
        if (m == k && v < out[0].logit) continue;       /* quick reject */
        heap_offer(out, &m, k, (cand){i, v});
    }
    heap_sort(out, m);
    return m;
}

static int32_t argmax(const float *l, int32_t n) {
    int32_t best = 0;
    float bv = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (l[i] > bv) { bv = l[i]; best = i; }
    return best;
}

static inline int nucleus_bucket(float d) {
    float b = d * NUCLEUS_PER_NAT;
    return b < (float)(NUCLEUS_BUCKETS - 1) ? (int)b : NUCLEUS_BUCKETS - 1;   /* d >= 0; inf too */
}

/* ---- public API ----------------------------------------------------------- */

hachi_sampler_params hachi_sampler_default_params(void) {
    return (hachi_sampler_params){
        .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
        .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 0,
    };
}

hachi_status hachi_sampler_create(const hachi_sampler_params *params, int32_t n_vocab, hachi_sampler **out) {
    if (!out) return hachi_fail(HACHI_ERR_INVALID_ARG, "sampler: out is NULL");
    *out = NULL;
    hachi_sampler_params p = params ? *params : hachi_sampler_default_params();
    if (n_vocab < 1) return hachi_fail(HACHI_ERR_INVALID_ARG, "sampler: n_vocab %d < 1", (int)n_vocab);
    if (!(p.temp >= 0 && isfinite(p.temp)))
        return hachi_fail(HACHI_ERR_INVALID_ARG, "sampler: temp %g must be >= 0", (double)p.temp);
    if (p.top_k < 0) return hachi_fail(HACHI_ERR_INVALID_ARG, "sampler: top_k %d < 0", (int)p.top_k);
    if (!(p.top_p > 0 && p.top_p <= 1))
        return hachi_fail(HACHI_ERR_INVALID_ARG, "sampler: top_p %g not in (0, 1]", (double)p.top_p);
    if (!(p.min_p >= 0 && p.min_p <= 1))
        return hachi_fail(HACHI_ERR_INVALID_ARG, "sampler: min_p %g not in [0, 1]", (double)p.min_p);
    if (!(p.repeat_penalty > 0 && isfinite(p.repeat_penalty)))
        return hachi_fail(HACHI_ERR_INVALID_ARG, "sampler: repeat_penalty %g must be > 0", (double)p.repeat_penalty);
    if (p.repeat_last_n < 0)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "sampler: repeat_last_n %d < 0", (int)p.repeat_last_n);
    if (!isfinite(p.presence_penalty) || !isfinite(p.frequency_penalty))
        return hachi_fail(HACHI_ERR_INVALID_ARG, "sampler: presence_penalty %g and frequency_penalty %g must be finite",
                          (double)p.presence_penalty, (double)p.frequency_penalty);

    hachi_sampler *s = hachi_calloc(1, sizeof *s);
    if (!s) return HACHI_ERR_NOMEM;
    s->p = p;
    s->n_vocab = n_vocab;
    s->work = hachi_malloc((size_t)n_vocab * sizeof *s->work);
    s->cand = hachi_malloc((size_t)n_vocab * sizeof *s->cand);
    s->sel = hachi_malloc((size_t)n_vocab * sizeof *s->sel);
    int ok = s->work && s->cand && s->sel;
    const bool penalized = p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    if (ok && penalized && p.repeat_last_n > 0) {
        s->hist = hachi_malloc((size_t)p.repeat_last_n * sizeof *s->hist);
        s->count = hachi_calloc((size_t)n_vocab, sizeof *s->count);
        s->gcount = hachi_calloc((size_t)n_vocab, sizeof *s->gcount);
        ok = s->hist && s->count && s->gcount;
    }
    if (!ok) { hachi_sampler_free(s); return HACHI_ERR_NOMEM; }
    rng_seed(s);
    *out = s;
    return HACHI_OK;
}

void hachi_sampler_free(hachi_sampler *s) {
    if (!s) return;
    hachi_free(s->work);
    hachi_free(s->cand);
    hachi_free(s->sel);
    hachi_free(s->hist);
    hachi_free(s->count);
    hachi_free(s->gcount);
    hachi_free(s->bias_id);
    hachi_free(s->bias);
    hachi_free(s);
}

hachi_status hachi_sampler_set_logit_bias(hachi_sampler *s, const int32_t *ids, const float *bias, int32_t n) {
    if (!s || n < 0 || (n && (!ids || !bias))) return hachi_fail(HACHI_ERR_INVALID_ARG, "sampler: logit bias: no list");
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= s->n_vocab)
            return hachi_fail(HACHI_ERR_INVALID_ARG, "sampler: logit bias of token %d: not in [0, %d)", (int)ids[i], (int)s->n_vocab);
        if (!(bias[i] < INFINITY))   /* (-inf: never the token) */
            return hachi_fail(HACHI_ERR_INVALID_ARG, "sampler: logit bias %g of token %d: not a number below +inf",
                              (double)bias[i], (int)ids[i]);
    }
    int32_t *id = n ? hachi_malloc((size_t)n * sizeof *id) : NULL;
    float *b = n ? hachi_malloc((size_t)n * sizeof *b) : NULL;
    if (n && (!id || !b)) { hachi_free(id); hachi_free(b); return HACHI_ERR_NOMEM; }
    if (n) { memcpy(id, ids, (size_t)n * sizeof *id); memcpy(b, bias, (size_t)n * sizeof *b); }
    hachi_free(s->bias_id);
    hachi_free(s->bias);
    s->bias_id = id;
    s->bias = b;
    s->n_bias = n;
    return HACHI_OK;
}

static inline int32_t hist_id(int32_t h) { return h < 0 ? -1 - h : h; }

static void accept(hachi_sampler *s, int32_t token, bool sampled) {
    if (!s || !s->hist || token < 0 || token >= s->n_vocab) return;
    int32_t cap = s->p.repeat_last_n;
    if (s->hist_len == cap) {   /* the oldest leaves the window */
        const int32_t old = s->hist[s->hist_pos];
        s->count[hist_id(old)]--;
        if (old >= 0) s->gcount[old]--;
    } else s->hist_len++;
    s->hist[s->hist_pos] = sampled ? token : -1 - token;
    s->count[token]++;
    s->gcount[token] += sampled;
    s->hist_pos = (s->hist_pos + 1) % cap;
}

void hachi_sampler_accept(hachi_sampler *s, int32_t token) {
    if (s && s->con.accept && token >= 0 && token < s->n_vocab) s->con.accept(s->con.ctx, token);
    accept(s, token, true);
}

void hachi_sampler_set_constraint(hachi_sampler *s, const hachi_sampler_constraint *c) {
    if (s) s->con = c && c->mask ? *c : (hachi_sampler_constraint){0};
}
void hachi_sampler_accept_prompt(hachi_sampler *s, int32_t token) { accept(s, token, false); }

void hachi_sampler_reset(hachi_sampler *s) {
    if (!s) return;
    for (int32_t i = 0; i < s->hist_len; i++) s->count[hist_id(s->hist[i])] = s->gcount[hist_id(s->hist[i])] = 0;
    s->hist_len = s->hist_pos = 0;
    rng_seed(s);
}

/* The constraint's mask, the logit biases added, then every distinct token of the ring penalized
 * once, in a copy of the logits (the logits themselves when there is none of them). */
static const float *adjust(hachi_sampler *s, const float *logits) {
    if ((!s->hist || s->hist_len == 0) && !s->n_bias && !s->con.mask) return logits;
    memcpy(s->work, logits, (size_t)s->n_vocab * sizeof *s->work);
    if (s->con.mask) s->con.mask(s->con.ctx, s->work, s->n_vocab);
    for (int32_t i = 0; i < s->n_bias; i++) s->work[s->bias_id[i]] += s->bias[i];
    if (!s->hist) return s->work;
    const float pen = s->p.repeat_penalty, pres = s->p.presence_penalty, freq = s->p.frequency_penalty;
    for (int32_t i = 0; i < s->hist_len; i++) {
        int32_t t = hist_id(s->hist[i]);
        if (s->count[t] <= 0) continue;                  /* already done (marked negative) */
        float v = s->work[t];
        if (pen != 1.0f) v = v > 0 ? v / pen : v * pen;
        if (s->gcount[t]) v -= (float)s->gcount[t] * freq + pres;
        s->work[t] = v;
        s->count[t] = -s->count[t];
    }
    for (int32_t i = 0; i < s->hist_len; i++) {
        int32_t t = hist_id(s->hist[i]);
        if (s->count[t] < 0) s->count[t] = -s->count[t];
    }
    return s->work;
}

/* Draw from sel[0..n) by weight (sel[i].logit already holds the weight). */
static int32_t draw(hachi_sampler *s, const cand *c, int32_t n, double total) {
    if (n <= 0) return 0;
    if (!(total > 0)) return c[0].id;
    double u = rng_uniform(s) * total, cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += c[i].logit;
        if (u < cum) return c[i].id;
    }
    for (int32_t i = n - 1; i > 0; i--)                  /* rounding: last positive weight */
        if (c[i].logit > 0) return c[i].id;
    return c[0].id;
}

/* Draw from c[0..n) by weight, or (dist non-NULL, zeroed) write the normalized weights
 * into dist by id instead and return -1. */
static int32_t emit(hachi_sampler *s, const cand *c, int32_t n, double total, float *dist) {
    if (!dist) return draw(s, c, n, total);
    if (n <= 0 || !(total > 0)) dist[n <= 0 ? 0 : c[0].id] = 1.0f;
    else for (int32_t i = 0; i < n; i++) dist[c[i].id] = (float)(c[i].logit / total);
    return -1;
}

/* sel[0..n) sorted best first with logits; z the softmax normalizer (in units
 * where the best token weighs 1) of the set top-p is relative to. Applies
 * top-p and min-p, then draws (emit). */
static int32_t finish_sorted(hachi_sampler *s, cand *sel, int32_t n, double z, float inv_t, float *dist) {
    const float m = sel[0].logit;
    const double p_target = (double)s->p.top_p * z;
    int32_t keep = n;
    double cum = 0, kept = 0;
    for (int32_t i = 0; i < n; i++) {
        float w = expf((sel[i].logit - m) * inv_t);
        if (i > 0 && w < s->p.min_p) { keep = i; break; }    /* min-p, relative to p_max = 1 */
        sel[i].logit = w;
        cum += w;
        kept = cum;
        if (s->p.top_p < 1.0f && cum >= p_target) { keep = i + 1; break; }
    }
    return emit(s, sel, keep, kept, dist);
}

/* top-p over the whole vocabulary without sorting it. Tokens are bucketed by
 * log-weight d = (m - logit) / temp (NUCLEUS_PER_NAT buckets per nat); walking
 * the buckets from the top finds the one where the mass crosses top_p * Z.
 * Tokens above it are kept, below it dropped; only that bucket is sorted. The
 * kept set is exactly the sorted prefix of the definition; min-p (a weight
 * threshold) is applied while bucketing, and since both cuts are prefixes the
 * result is their intersection, as in "top-p, then min-p". */
static int32_t sample_nucleus(hachi_sampler *s, const float *l, float m, float inv_t, float *dist) {
    const int32_t n = s->n_vocab;
    /* min-p as a log-weight bound: e >= min_p  <=>  d <= d_max */
    const float d_max = s->p.min_p > 0 ? -logf(s->p.min_p) : INFINITY;
    double mass[NUCLEUS_BUCKETS] = {0}, z = 0;
    for (int32_t i = 0; i < n; i++) {
        float v = l[i];
        if (v != v) continue;
        float d = (m - v) * inv_t, e = expf(-d);
        z += e;
        if (d > d_max) continue;
        mass[nucleus_bucket(d)] += e;
    }
    const double target = (double)s->p.top_p * z;
    double cum = 0;
    int b = 0;
    for (; b < NUCLEUS_BUCKETS - 1; b++) {
        if (cum + mass[b] >= target) break;
        cum += mass[b];
    }
    /* gather: buckets < b into cand (weights), bucket b into sel (logits) */
    int32_t nc = 0, nb = 0;
    for (int32_t i = 0; i < n; i++) {
        float v = l[i];
        if (v != v) continue;
        float d = (m - v) * inv_t;
        if (d > d_max) continue;
        int bi = nucleus_bucket(d);
        if (bi < b) s->cand[nc++] = (cand){i, expf(-d)};
        else if (bi == b) s->sel[nb++] = (cand){i, v};
    }
    /* sort the boundary bucket in place (heap of all its members), keep its prefix */
    int32_t h = 0;
    for (int32_t i = 0; i < nb; i++) heap_offer(s->sel, &h, nb, s->sel[i]);
    heap_sort(s->sel, nb);
    double kept = 0;
    for (int32_t i = 0; i < nc; i++) kept += s->cand[i].logit;
    for (int32_t i = 0; i < nb; i++) {
        float e = expf(-((m - s->sel[i].logit) * inv_t));
        s->cand[nc++] = (cand){s->sel[i].id, e};
        kept += e;
        if (s->p.top_p < 1.0f && kept >= target) break;
    }
    return emit(s, s->cand, nc, kept, dist);
}

/* The sample (dist NULL), or the distribution it is drawn from written into dist (then -1):
 * one code path, so the two agree. */
static int32_t pick(hachi_sampler *s, const float *logits, float *dist) {
    const int32_t n = s->n_vocab;
    const float *l = adjust(s, logits);
#define ONE(t) (dist ? (dist[(t)] = 1.0f, -1) : (t))
    if (hachi_sampler_greedy(s)) return ONE(argmax(l, n));
    const float inv_t = 1.0f / s->p.temp;

    if (s->p.top_k > 0 && s->p.top_k < n) {
        int32_t k = select_top_logits(l, n, s->p.top_k, s->sel);
        if (k == 0) return ONE(0);
        double z = 0;
        for (int32_t i = 0; i < k; i++) z += expf((s->sel[i].logit - s->sel[0].logit) * inv_t);
        return finish_sorted(s, s->sel, k, z, inv_t, dist);
    }

    /* all tokens are candidates: normalizer over the whole vocabulary */
    float m = -INFINITY;
    for (int32_t i = 0; i < n; i++) if (l[i] > m) m = l[i];
    if (m == -INFINITY) return ONE(argmax(l, n));
    const float min_p = s->p.min_p;
    if (s->p.top_p >= 1.0f) {
        /* no ordering needed: one pass of weights (min-p filtered), one draw */
        float *w = dist ? dist : s->work;                 /* work may alias l: read before write */
        const float d_max = min_p > 0 ? -logf(min_p) : INFINITY;   /* e >= min_p <=> d <= d_max */
        double total = 0;
        for (int32_t i = 0; i < n; i++) {
            float v = l[i], d = (m - v) * inv_t, e = d <= d_max ? expf(-d) : 0.0f;   /* NaN: 0 */
            w[i] = e;
            total += e;
        }
        if (dist) {
            if (!(total > 0)) { memset(dist, 0, (size_t)n * sizeof *dist); dist[0] = 1.0f; }
            else for (int32_t i = 0; i < n; i++) dist[i] = (float)(dist[i] / total);
            return -1;
        }
        double u = rng_uniform(s) * total, cum = 0;
        int32_t last = 0;
        for (int32_t i = 0; i < n; i++) {
            if (w[i] <= 0) continue;
            cum += w[i];
            last = i;
            if (u < cum) return i;
        }
        return last;
    }
    return sample_nucleus(s, l, m, inv_t, dist);
#undef ONE
}

int32_t hachi_sampler_sample(hachi_sampler *s, const float *logits) { return s && logits ? pick(s, logits, NULL) : -1; }

void hachi_sampler_dist(hachi_sampler *s, const float *logits, float *dist) {
    memset(dist, 0, (size_t)s->n_vocab * sizeof *dist);
    pick(s, logits, dist);
}

int32_t hachi_sampler_n_vocab(const hachi_sampler *s) { return s->n_vocab; }

/* a temperature whose reciprocal overflows (below ~2.9e-39) is greedy, its limit: 1/temp = inf
 * would make every weight NaN (and the draw token 0) */
bool hachi_sampler_greedy(const hachi_sampler *s) { return s->p.temp <= 0.0f || !(1.0f / s->p.temp < INFINITY) || s->p.top_k == 1; }

double hachi_sampler_uniform(hachi_sampler *s) { return rng_uniform(s); }

int32_t hachi_sampler_draw_weights(hachi_sampler *s, const float *w) {
    double total = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (w[i] > 0) { total += w[i]; last = i; }
    if (last < 0) return -1;
    double u = rng_uniform(s) * total, cum = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (!(w[i] > 0)) continue;
        cum += w[i];
        if (u < cum) return i;
    }
    return last;   /* rounding */
}
