/* attn: decode/verify/prefill attention over the fp16 KV cache. One K/V head
 * serves a group of G query heads: each K and V row is read once per step and
 * used for all G heads (dot_f16_multi / axpy_f16_multi). Keys before p0 come
 * from the owner's cache (ring slot = position % n_slots on sliding layers),
 * keys of this forward from its batch rows (kb/vb). A single decoded token
 * splits its key range over the threads and merges the softmax partials
 * (flash-decoding); several tokens are split by token. */
#include <math.h>
#include <float.h>
#include "session.h"
#include "util.h"

typedef struct attn_job {
    hachi_session *s;
    int l, n, p0;
    bool split;
} attn_job;

static inline const char *key_row(const hachi_kv *kv, const char *cache, const char *batch, int j, int p0) {
    if (j >= p0) return batch + (size_t)(j - p0) * kv->row_bytes;
    int slot = kv->ring ? j % kv->n_slots : j;
    return cache + (size_t)slot * kv->row_bytes;
}

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
    const float *q = s->q + (size_t)t * qd + (size_t)g * G * hd;
    const float scale = m->attn_scale;

    for (int h = 0; h < G; h++) { mx[h] = -FLT_MAX; sum[h] = 0.0f; }
    for (int j = a; j < b; j++) {
        float *sj = sc + (size_t)(j - a) * G;
        const char *kr = key_row(kv, kv->k, kv->kb, j, jb->p0);
        if (s->kv_f32) dot_f32_multi(hd, sj, (const float *)kr + g * hd, q, hd, G);
        else k->dot_f16_multi(hd, sj, (const uint16_t *)kr + g * hd, q, hd, G);
        for (int h = 0; h < G; h++) {
            sj[h] *= scale;
            if (sj[h] > mx[h]) mx[h] = sj[h];
        }
    }
    for (int j = a; j < b; j++) {
        float *sj = sc + (size_t)(j - a) * G;
        for (int h = 0; h < G; h++) { sj[h] = expf(sj[h] - mx[h]); sum[h] += sj[h]; }
    }
    memset(acc, 0, (size_t)G * hd * sizeof(float));
    for (int j = a; j < b; j++) {
        const char *vr = key_row(kv, kv->v, kv->vb, j, jb->p0);
        if (s->kv_f32) axpy_f32_multi(hd, sc + (size_t)(j - a) * G, (const float *)vr + g * hd, acc, hd, G);
        else k->axpy_f16_multi(hd, sc + (size_t)(j - a) * G, (const uint16_t *)vr + g * hd, acc, hd, G);
    }
}

static void key_bounds(const hachi_session *s, const hachi_layer_plan *lp, int pos, int *lo, int *hi) {
    *hi = pos + 1;
    *lo = lp->window > 0 ? HACHI_MAX(0, pos - lp->window + 1) : 0;
    (void)s;
}

static void attn_task(void *ctx, int ith, int nth) {
    const attn_job *jb = ctx;
    hachi_session *s = jb->s;
    const hachi_model *m = s->m;
    const hachi_layer_plan *lp = &s->lp[jb->l];
    const int hd = lp->head_dim, Hkv = m->n_head_kv, G = m->n_head / Hkv, qd = m->n_head * hd;
    float *sc = s->scores + (size_t)ith * m->n_head * s->n_ctx;
    float mx[64], sum[64];

    if (jb->split) {   /* one token, keys split over threads; partials merged by the caller */
        int lo, hi;
        key_bounds(s, lp, jb->p0, &lo, &hi);
        int64_t a, b;
        hachi_split(hi - lo, 1, ith, nth, &a, &b);
        float *part = s->partial + (size_t)ith * m->n_head * (hd + 2);
        for (int g = 0; g < Hkv; g++) {
            float *acc = part + (size_t)g * G * (hd + 2);
            /* acc rows interleaved with their max and sum: [G][hd + 2]; the raw
             * [G][hd] sums go right after this range's scores */
            float *buf = sc + (size_t)G * (b - a);
            attend_range(jb, sc, 0, g, lo + (int)a, lo + (int)b, buf, mx, sum);
            for (int h = 0; h < G; h++) {
                memcpy(acc + (size_t)h * (hd + 2), buf + (size_t)h * hd, hd * sizeof(float));
                acc[(size_t)h * (hd + 2) + hd] = mx[h];
                acc[(size_t)h * (hd + 2) + hd + 1] = sum[h];
            }
        }
        return;
    }
    int64_t t0, t1;
    hachi_split(jb->n, 1, ith, nth, &t0, &t1);
    for (int t = (int)t0; t < t1; t++) {
        int lo, hi;
        key_bounds(s, lp, jb->p0 + t, &lo, &hi);
        for (int g = 0; g < Hkv; g++) {
            float *out = s->att + (size_t)t * qd + (size_t)g * G * hd;
            attend_range(jb, sc, t, g, lo, hi, out, mx, sum);
            for (int h = 0; h < G; h++) {
                float inv = 1.0f / sum[h];
                for (int i = 0; i < hd; i++) out[h * hd + i] *= inv;
            }
        }
    }
}

void hachi_attention(hachi_session *s, int l, int n, int p0) {
    const hachi_model *m = s->m;
    const hachi_layer_plan *lp = &s->lp[l];
    int nth = hachi_pool_size(s->pool), lo, hi;
    key_bounds(s, lp, p0, &lo, &hi);
    attn_job jb = {s, l, n, p0, n == 1 && nth > 1 && hi - lo >= 64 * nth};
    hachi_pool_run(s->pool, attn_task, &jb);
    if (!jb.split) return;

    /* merge the per-thread softmax partials: out = sum_i e^(m_i - M) acc_i / sum_i e^(m_i - M) l_i */
    const int hd = lp->head_dim, H = m->n_head;
    for (int h = 0; h < H; h++) {
        float M = -FLT_MAX, den = 0.0f;
        float *out = s->att + (size_t)h * hd;
        for (int i = 0; i < nth; i++) {
            const float *p = s->partial + (size_t)i * H * (hd + 2) + (size_t)h * (hd + 2);
            if (p[hd + 1] > 0.0f && p[hd] > M) M = p[hd];
        }
        memset(out, 0, hd * sizeof(float));
        for (int i = 0; i < nth; i++) {
            const float *p = s->partial + (size_t)i * H * (hd + 2) + (size_t)h * (hd + 2);
            if (p[hd + 1] <= 0.0f) continue;
            float w = expf(p[hd] - M);
            den += w * p[hd + 1];
            for (int d = 0; d < hd; d++) out[d] += w * p[d];
        }
        for (int d = 0; d < hd; d++) out[d] /= den;
    }
}
