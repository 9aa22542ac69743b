/* attn: decode/verify/prefill attention of one layer over its KV cache (kv.h). One
 * K/V head serves a group of G query heads: each K and V row is read once per step
 * and used for all G heads. Keys before p0 are the cache's held rows, keys of this
 * forward its pending rows. Each token of a forward is attended alone, as its own
 * decode step would be: with enough keys, its key range split over the threads and
 * the softmax partials merged (flash-decoding), else whole on one thread; up to 16
 * tokens per dispatch. So a token's logits do not depend on how the sequence was cut
 * into forwards (prefill chunks, verified drafts, a restored prompt cache): they are
 * bitwise those of decoding it. Everything comes from hachi_attn_args (attn.h). */
#include <float.h>
#include <math.h>
#include <string.h>
#include "attn.h"
#include "util.h"
#include "kernels/attn.h"

typedef struct attn_job {
    const hachi_attn_args *a;
    const hachi_kernels *kern;
    int t0, n;      /* tokens t0..t0+n-1 of the forward (n <= HACHI_ATTN_GROUP) */
} attn_job;

size_t hachi_attn_scores_stride(int n_head, int n_ctx, int hd_max) { return (size_t)n_head * (n_ctx + hd_max); }

size_t hachi_attn_partial_floats(int n_threads, int n_head, int hd_max) {
    return (size_t)HACHI_ATTN_GROUP * n_threads * n_head * (hd_max + 2);
}

/* Scores, softmax numerators and the weighted V sum of keys [a, b) for token t and
 * KV head g. acc [G][hd] receives sum_j exp(s_j - mx_h) v_j; mx, sum [G]. */
static void attend_range(const attn_job *jb, float *sc, int t, int g, int a, int b,
                         float *acc, float *mx, float *sum) {
    const hachi_attn_args *A = jb->a;
    const hachi_kv *kv = A->kv;
    const int hd = A->head_dim, G = A->n_head / A->n_head_kv;
    const float *q = A->q + (size_t)t * A->n_head * hd + (size_t)g * G * hd;

    for (int j = a; j < b;) {
        hachi_kv_run r = hachi_kv_segment(kv, j, b, A->p0);
        hachi_kv_scores(kv, jb->kern, &r, g, hd, q, G, sc + (size_t)(j - a) * G);
        j += r.n;
    }
    hachi_attn_kernels_for(jb->kern)->softmax(sc, b - a, G, A->scale, mx, sum);
    memset(acc, 0, (size_t)G * hd * sizeof(float));
    for (int j = a; j < b;) {
        hachi_kv_run r = hachi_kv_segment(kv, j, b, A->p0);
        hachi_kv_values(kv, jb->kern, &r, g, hd, sc + (size_t)(j - a) * G, G, acc);
        j += r.n;
    }
}

/* keys a query at pos sees: [lo, hi) */
static void key_bounds(const hachi_attn_args *a, int pos, int *lo, int *hi) {
    *hi = pos + 1;
    *lo = a->window > 0 ? HACHI_MAX(0, pos - a->window + 1) : 0;
}

/* A token's keys are split over the threads when there are enough of them (decode too). */
static bool split_keys(int lo, int hi, int nth) { return nth > 1 && hi - lo >= 64 * nth; }

/* Tokens t0..t0+n-1: a short token whole on one thread (round robin), a long one with its
 * keys split over all of them, the partials of slot i (token t0+i) left for the caller. */
static void attn_task(void *ctx, int ith, int nth) {
    const attn_job *jb = ctx;
    const hachi_attn_args *A = jb->a;
    const int hd = A->head_dim, Hkv = A->n_head_kv, G = A->n_head / Hkv, qd = A->n_head * hd;
    float *sc = A->scores + (size_t)ith * A->scores_stride;
    float mx[64], sum[64];

    for (int i = 0; i < jb->n; i++) {
        const int t = jb->t0 + i;
        int lo, hi;
        key_bounds(A, A->p0 + t, &lo, &hi);
        if (!split_keys(lo, hi, nth)) {
            if (i % nth != ith) continue;
            for (int g = 0; g < Hkv; g++) {
                float *out = A->out + (size_t)t * qd + (size_t)g * G * hd;
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
        float *part = A->partial + ((size_t)i * nth + ith) * A->n_head * (hd + 2);
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
static void merge_partials(const hachi_attn_args *a, int t, int i, int nth) {
    const int hd = a->head_dim, H = a->n_head;
    const float *part = a->partial + (size_t)i * nth * H * (hd + 2);
    for (int h = 0; h < H; h++) {
        float M = -FLT_MAX, den = 0.0f;
        float *out = a->out + (size_t)t * H * hd + (size_t)h * hd;
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

void hachi_attention(hachi_pool *pool, const hachi_kernels *kern, const hachi_attn_args *a) {
    const int nth = hachi_pool_size(pool);
    for (int t0 = 0; t0 < a->n; t0 += HACHI_ATTN_GROUP) {
        attn_job jb = {a, kern, t0, HACHI_MIN(HACHI_ATTN_GROUP, a->n - t0)};
        hachi_pool_run(pool, attn_task, &jb);
        for (int i = 0; i < jb.n; i++) {
            int lo, hi;
            key_bounds(a, a->p0 + t0 + i, &lo, &hi);
            if (split_keys(lo, hi, nth)) merge_partials(a, t0 + i, i, nth);
        }
    }
}
