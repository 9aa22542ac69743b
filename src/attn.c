/* attn: decode/verify/prefill attention over the fp16 KV cache. One K/V head
 * serves a group of G query heads: each K and V row is read once per step and
 * used for all G heads (dot_f16_multi / axpy_f16_multi). Keys before p0 come
 * from the owner's cache (ring slot = position % n_slots on sliding layers),
 * keys of this forward from its batch rows (kb/vb). Each token of a forward is
 * attended alone, as its own decode step would be: with enough keys, its key
 * range split over the threads and the softmax partials merged (flash-decoding),
 * else whole on one thread; up to 16 tokens per dispatch. So a token's logits do
 * not depend on how the sequence was cut into forwards (prefill chunks, verified
 * drafts, a restored prompt cache): they are bitwise those of decoding it. */
#include <math.h>
#include <float.h>
#include "session.h"
#include "util.h"

typedef struct attn_job {
    hachi_session *s;
    int l, p0;      /* layer; position of this forward's first token (batch row 0) */
    int t0, n;      /* tokens t0..t0+n-1 of the forward (n <= HACHI_ATTN_GROUP) */
} attn_job;

/* f32 KV rows (kv_f32): the same contracts as the kernels' fp16 versions */
static void dot_f32_multi(int64_t n, float *s, const float *k, const float *q, int64_t q_stride, int m) {
    for (int j = 0; j < m; j++) {
        float acc = 0.0f;
        for (int64_t i = 0; i < n; i++) acc += q[j * q_stride + i] * k[i];
        s[j] = acc;
    }
}

static void axpy_f32_multi(int64_t n, const float *a, const float *v, float *y, int64_t y_stride, int m) {
    for (int j = 0; j < m; j++)
        for (int64_t i = 0; i < n; i++) y[j * y_stride + i] += a[j] * v[i];
}

/* Calls fn(seg, j0, n) for the contiguous runs of rows holding positions [a, b):
 * cache rows (a ring wraps at most once) before p0, this forward's batch rows after. */
typedef struct seg { const char *k, *v; } seg;
#define FOR_SEGMENTS(kv, a, b, p0, BODY)                                                          \
    do {                                                                                          \
        int j_ = (a);                                                                             \
        while (j_ < (b)) {                                                                        \
            seg sg_;                                                                              \
            int n_;                                                                               \
            if (j_ >= (p0)) {                                                                     \
                sg_.k = (kv)->kb + (size_t)(j_ - (p0)) * (kv)->row_bytes;                         \
                sg_.v = (kv)->vb + (size_t)(j_ - (p0)) * (kv)->row_bytes;                         \
                n_ = (b) - j_;                                                                    \
            } else {                                                                              \
                int slot_ = (kv)->ring ? j_ % (kv)->n_slots : j_;                                 \
                n_ = HACHI_MIN((b), (p0)) - j_;                                                   \
                if ((kv)->ring) n_ = HACHI_MIN(n_, (kv)->n_slots - slot_);                        \
                sg_.k = (kv)->k + (size_t)slot_ * (kv)->row_bytes;                                \
                sg_.v = (kv)->v + (size_t)slot_ * (kv)->row_bytes;                                \
            }                                                                                     \
            { const int j0 = j_ - (a), n = n_; const seg sgm = sg_; BODY; }                      \
            j_ += n_;                                                                             \
        }                                                                                         \
    } while (0)

/* Scores, softmax numerators and the weighted V sum of keys [a, b) for token t and
 * KV head g. acc [G][hd] receives sum_j exp(s_j - mx_h) v_j; mx, sum [G]. */
static void attend_range(const attn_job *jb, float *sc, int t, int g, int a, int b,
                         float *acc, float *mx, float *sum) {
    const hachi_session *s = jb->s;
    const hachi_model *m = s->m;
    const hachi_kernels *k = s->kern;
    const hachi_layer_plan *lp = &s->lp[jb->l];
    const hachi_kv *kv = &s->kv[lp->kv_index];
    const int hd = lp->head_dim, G = m->n_head / m->n_head_kv, qd = m->n_head * hd;
    const int64_t stride = kv->dim;   /* elements between rows */
    const float *q = s->q + (size_t)t * qd + (size_t)g * G * hd;
    const float scale = m->attn_scale;
    const int p0 = jb->p0;

    FOR_SEGMENTS(kv, a, b, p0, {
        float *sj = sc + (size_t)j0 * G;
        if (s->kv_f32)
            for (int j = 0; j < n; j++)
                dot_f32_multi(hd, sj + (size_t)j * G, (const float *)sgm.k + j * stride + g * hd, q, hd, G);
        else
            k->attn_scores_f16(hd, n, (const uint16_t *)sgm.k + g * hd, stride, q, G, sj);
    });
    k->attn_softmax(sc, b - a, G, scale, mx, sum);
    memset(acc, 0, (size_t)G * hd * sizeof(float));
    FOR_SEGMENTS(kv, a, b, p0, {
        const float *pj = sc + (size_t)j0 * G;
        if (s->kv_f32)
            for (int j = 0; j < n; j++)
                axpy_f32_multi(hd, pj + (size_t)j * G, (const float *)sgm.v + j * stride + g * hd, acc, hd, G);
        else
            k->attn_values_f16(hd, n, (const uint16_t *)sgm.v + g * hd, stride, pj, G, acc);
    });
}

/* keys a query at pos sees: [lo, hi) */
static void key_bounds(const hachi_layer_plan *lp, int pos, int *lo, int *hi) {
    *hi = pos + 1;
    *lo = lp->window > 0 ? HACHI_MAX(0, pos - lp->window + 1) : 0;
}

/* A token's keys are split over the threads when there are enough of them (decode too). */
static bool split_keys(int lo, int hi, int nth) { return nth > 1 && hi - lo >= 64 * nth; }

/* Tokens t0..t0+n-1: a short token whole on one thread (round robin), a long one with its
 * keys split over all of them, the partials of slot i (token t0+i) left for the caller. */
static void attn_task(void *ctx, int ith, int nth) {
    const attn_job *jb = ctx;
    hachi_session *s = jb->s;
    const hachi_model *m = s->m;
    const hachi_layer_plan *lp = &s->lp[jb->l];
    const int hd = lp->head_dim, Hkv = m->n_head_kv, G = m->n_head / Hkv, qd = m->n_head * hd;
    float *sc = s->scores + (size_t)ith * s->scores_stride;
    float mx[64], sum[64];

    for (int i = 0; i < jb->n; i++) {
        const int t = jb->t0 + i;
        int lo, hi;
        key_bounds(lp, jb->p0 + t, &lo, &hi);
        if (!split_keys(lo, hi, nth)) {
            if (i % nth != ith) continue;
            for (int g = 0; g < Hkv; g++) {
                float *out = s->att + (size_t)t * qd + (size_t)g * G * hd;
                attend_range(jb, sc, t, g, lo, hi, out, mx, sum);
                for (int h = 0; h < G; h++) {
                    float inv = 1.0f / sum[h];
                    for (int d = 0; d < hd; d++) out[h * hd + d] *= inv;
                }
            }
            continue;
        }
        int64_t a, b;
        hachi_split(hi - lo, 1, ith, nth, &a, &b);
        float *part = s->partial + ((size_t)i * nth + ith) * m->n_head * (hd + 2);
        for (int g = 0; g < Hkv; g++) {
            float *acc = part + (size_t)g * G * (hd + 2);
            /* acc rows interleaved with their max and sum: [G][hd + 2]; the raw
             * [G][hd] sums go right after this range's scores */
            float *buf = sc + (size_t)G * (b - a);
            attend_range(jb, sc, t, g, lo + (int)a, lo + (int)b, buf, mx, sum);
            for (int h = 0; h < G; h++) {
                memcpy(acc + (size_t)h * (hd + 2), buf + (size_t)h * hd, hd * sizeof(float));
                acc[(size_t)h * (hd + 2) + hd] = mx[h];
                acc[(size_t)h * (hd + 2) + hd + 1] = sum[h];
            }
        }
    }
}

/* out = sum_k e^(m_k - M) acc_k / sum_k e^(m_k - M) l_k over the threads' partials of token t (slot i) */
static void merge_partials(hachi_session *s, int l, int t, int i, int nth) {
    const hachi_model *m = s->m;
    const int hd = s->lp[l].head_dim, H = m->n_head;
    const float *part = s->partial + (size_t)i * nth * H * (hd + 2);
    for (int h = 0; h < H; h++) {
        float M = -FLT_MAX, den = 0.0f;
        float *out = s->att + (size_t)t * H * hd + (size_t)h * hd;
        for (int k = 0; k < nth; k++) {
            const float *p = part + (size_t)k * H * (hd + 2) + (size_t)h * (hd + 2);
            if (p[hd + 1] > 0.0f && p[hd] > M) M = p[hd];
        }
        memset(out, 0, hd * sizeof(float));
        for (int k = 0; k < nth; k++) {
            const float *p = part + (size_t)k * H * (hd + 2) + (size_t)h * (hd + 2);
            if (p[hd + 1] <= 0.0f) continue;
            float w = expf(p[hd] - M);
            den += w * p[hd + 1];
            for (int d = 0; d < hd; d++) out[d] += w * p[d];
        }
        for (int d = 0; d < hd; d++) out[d] /= den;
    }
}

void hachi_attention(hachi_session *s, int l, int n, int p0) {
    const hachi_layer_plan *lp = &s->lp[l];
    const int nth = hachi_pool_size(s->pool);
    for (int t0 = 0; t0 < n; t0 += HACHI_ATTN_GROUP) {
        attn_job jb = {s, l, p0, t0, HACHI_MIN(HACHI_ATTN_GROUP, n - t0)};
        hachi_pool_run(s->pool, attn_task, &jb);
        for (int i = 0; i < jb.n; i++) {
            int lo, hi;
            key_bounds(lp, p0 + t0 + i, &lo, &hi);
            if (split_keys(lo, hi, nth)) merge_partials(s, l, t0 + i, i, nth);
        }
    }
}
