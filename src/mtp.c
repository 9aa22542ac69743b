/* mtp: the Gemma 4 assistant drafter over a target session. One draft step, for the token
 * t and the hidden row h at the newest position P (../shared/oracle/README.md):
 *
 *   x = nextn.pre_projection @ concat(target.token_embd[t] * sqrt(E_target), h)
 *   per layer: q = rope_P(rmsnorm_per_head(Wq rmsnorm(x) * attn_norm) * attn_q_norm);
 *              attention (scale attn_scale) over the target's cached K/V of positions < P
 *              (a sliding layer: P - p < window) of its last sliding or last full layer;
 *              x = rmsnorm(Wo a) * post_attention_norm + x;
 *              x = (rmsnorm(Wdown(gelu_tanh(Wgate g) * Wup g)) * post_ffw_norm + x) * layer_output_scale,
 *              g = rmsnorm(x) * ffn_norm
 *   n = rmsnorm(x) * output_norm; logits = token_embd @ n (no softcap); h = nextn.post_projection @ n
 *
 * The position stays P for every step of a draft and the drafter writes no K/V. With a
 * centroid head only the tokens of the top clusters get logits. The K/V rows are read
 * through kv.h (segments of positions, scores and value sums); this file never computes a
 * cache slot. Hot path: hachi_mtp_step, which allocates nothing. */
#include "mtp.h"
#include <math.h>
#include "session.h"
#include "util.h"

struct hachi_mtp {
    const hachi_model *a;           /* the assistant */
    hachi_session *s;               /* the target's session */
    const hachi_kv *kv[2];          /* the caches its sliding (0) and full (1) layers read */
    int P;                          /* the position of the draft (hachi_mtp_begin) */
    double *inv_freq[2];            /* [head_dim/2] RoPE frequencies, sliding (0) and full (1) */
    float *cs;                      /* [hd_max/2][cos, sin] at P of the layer at hand */
    float *in;                      /* [2 * n_embd_out] concat(target embedding, h) */
    float *h;                       /* [n_embd_out] the hidden row of the next step */
    float *x, *xn, *proj;           /* [n_embd] residual, normed input of a block, a block's output */
    float *q, *attn;                /* [n_head * hd_max] */
    float *qk;                      /* a KV head's queries as its cache's scores take them (kv.h) */
    int32_t *vsum;                  /* [G][hd_max] an int8 cache's value sums (kv.h) */
    float *gate, *up;               /* [ff_max] */
    float *scores;                  /* [n_ctx][G] attention scores of one KV head's G query heads */
    float *logits;                  /* [n_vocab] */
    float *cscore;                  /* [n_centroids] centroid scores; NULL without a centroid head */
    int *top;                       /* [centroid_top_k] the kept clusters */
    int32_t *kept;                  /* [centroid_top_k * cluster size] the kept clusters' tokens */
    float *kept_logits;             /* [centroid_top_k * cluster size] their logits */
    char *mm_scratch;               /* matmul activation conversions */
};

/* ---- checks ---------------------------------------------------------------------------- */

/* The target layer whose cache an assistant layer of the kind reads: n_layer - 2 (sliding)
 * or n_layer - 1 (full), as llama.cpp maps them; their KV owners hold the rows. */
static int target_layer(const hachi_model *t, bool sliding) { return t->n_layer - (sliding ? 2 : 1); }

hachi_status hachi_assistant_check(const hachi_model *t, const hachi_model *a) {
    if (!t || !a) return hachi_fail(HACHI_ERR_INVALID_ARG, "assistant check: NULL model");
    if (a->arch == HACHI_ARCH_GEMMA4_ASSISTANT && !a->layers)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "drafter '%s' was loaded vocabulary-only: it has no weights to draft with", a->path);
    if (a->arch != HACHI_ARCH_GEMMA4_ASSISTANT)
        return hachi_fail(HACHI_ERR_UNSUPPORTED, "drafter '%s' has architecture '%s', not gemma4-assistant", a->path,
                          a->arch_name);
    if (t->arch == HACHI_ARCH_GEMMA4 && !t->layers)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "target '%s' was loaded vocabulary-only: it cannot run a drafter", t->path);
    if (t->arch != HACHI_ARCH_GEMMA4 || t->n_layer < 2)
        return hachi_fail(HACHI_ERR_UNSUPPORTED, "target '%s' has architecture '%s': a gemma4-assistant drafts for gemma4",
                          t->path, t->arch_name);
    if (a->n_embd_out != t->n_embd)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "drafter '%s' is for a target of width %d, target '%s' has width %d",
                          a->path, a->n_embd_out, t->path, t->n_embd);
    if (a->n_vocab != t->n_vocab)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "drafter '%s' has %d tokens, target '%s' has %d", a->path, a->n_vocab,
                          t->path, t->n_vocab);
    for (int32_t id = 0; id < t->n_vocab; id++) {
        char x[256], y[256];
        int32_t nx = hachi_token_to_text(t, id, x, sizeof x), ny = hachi_token_to_text(a, id, y, sizeof y);
        if (nx != ny || (nx > 0 && memcmp(x, y, (size_t)nx)))
            return hachi_fail(HACHI_ERR_INVALID_ARG, "drafter '%s' and target '%s' have other vocabularies (token %d differs)",
                              a->path, t->path, (int)id);
    }
    const bool sl_ok = t->layers[target_layer(t, true)].sliding, full_ok = !t->layers[target_layer(t, false)].sliding;
    for (int l = 0; l < a->n_layer; l++) {
        const hachi_layer *L = &a->layers[l];
        const int tl = target_layer(t, L->sliding);
        const hachi_layer *T = &t->layers[tl];
        if (!(L->sliding ? sl_ok : full_ok) || L->head_dim != T->head_dim || a->n_head_kv != t->n_head_kv ||
            (L->sliding && a->window > t->window))
            return hachi_fail(HACHI_ERR_INVALID_ARG,
                              "drafter '%s' layer %d (%s, head dim %d, %d KV heads, window %d) does not fit the cache of "
                              "target '%s' layer %d (%s, head dim %d, %d KV heads, window %d)",
                              a->path, l, L->sliding ? "sliding" : "full", L->head_dim, a->n_head_kv,
                              L->sliding ? a->window : 0, t->path, tl, T->sliding ? "sliding" : "full", T->head_dim,
                              t->n_head_kv, T->sliding ? t->window : 0);
    }
    if (a->n_head % a->n_head_kv || a->n_head / a->n_head_kv > 64)
        return hachi_fail(HACHI_ERR_UNSUPPORTED, "drafter '%s': %d query heads over %d KV heads (a whole number of "
                          "them per KV head, at most 64)", a->path, a->n_head, a->n_head_kv);
    return HACHI_OK;
}

/* ---- create ----------------------------------------------------------------------------- */

hachi_status hachi_mtp_create(const hachi_model *a, hachi_session *s, hachi_mtp **out) {
    *out = NULL;
    if (!a || !s) return hachi_fail(HACHI_ERR_INVALID_ARG, "mtp: needs an assistant and a target session");
    hachi_status st = hachi_assistant_check(s->m, a);
    if (st) return st;
    hachi_mtp *d = hachi_calloc(1, sizeof *d);
    if (!d) return HACHI_ERR_NOMEM;
    d->a = a;
    d->s = s;
    for (int kind = 0; kind < 2; kind++) d->kv[kind] = s->lp[target_layer(s->m, kind == 0)].kv;
    const int E = a->n_embd, Et = a->n_embd_out, H = a->n_head, G = H / a->n_head_kv;
    const int hd_max = HACHI_MAX(a->head_dim_full, a->head_dim_swa);
    int ff_max = 0;
    size_t scr = hachi_matmul_scratch_bytes(a->kern, a->output.type, a->output.cols, 1);
    const hachi_mat *io[] = {&a->nextn_pre, &a->nextn_post, &a->centroids};
    for (size_t i = 0; i < sizeof io / sizeof io[0]; i++)
        if (io[i]->data) scr = HACHI_MAX(scr, hachi_matmul_scratch_bytes(a->kern, io[i]->type, io[i]->cols, 1));
    for (int l = 0; l < a->n_layer; l++) {
        const hachi_layer *L = &a->layers[l];
        const hachi_mat *mats[] = {&L->wq, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
            scr = HACHI_MAX(scr, hachi_matmul_scratch_bytes(a->kern, mats[i]->type, mats[i]->cols, 1));
        ff_max = HACHI_MAX(ff_max, L->n_ff);
    }
    for (int kind = 0; kind < 2; kind++) {   /* inv_freq_i = base^(-2i/d), full layers / rope_freqs[i] */
        const int dim = kind ? a->head_dim_full : a->head_dim_swa;
        const double base = kind ? a->rope_base : a->rope_base_swa;
        if (!(d->inv_freq[kind] = hachi_malloc((size_t)dim / 2 * sizeof(double)))) goto nomem;
        for (int i = 0; i < dim / 2; i++) {
            d->inv_freq[kind][i] = pow(base, -2.0 * i / dim);
            if (kind && a->rope_freqs) d->inv_freq[kind][i] /= a->rope_freqs[i];
        }
    }
    float **bufs[] = {&d->cs, &d->in, &d->h, &d->x, &d->xn, &d->proj, &d->q, &d->attn, &d->qk, &d->gate, &d->up,
                      &d->scores, &d->logits};
    const size_t counts[] = {(size_t)hd_max, 2 * (size_t)Et, (size_t)Et, (size_t)E, (size_t)E, (size_t)E,
                             (size_t)H * hd_max, (size_t)H * hd_max, hachi_kv_query_floats(G, hd_max), (size_t)ff_max,
                             (size_t)ff_max, (size_t)hachi_session_n_ctx(s) * G, (size_t)a->n_vocab};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (!(*bufs[i] = hachi_aligned_alloc(counts[i] * sizeof(float)))) goto nomem;
    const size_t n_kept = a->centroids.data ? (size_t)a->centroid_top_k * (size_t)(a->n_vocab / a->n_centroids) : 0;
    if (a->centroids.data && (!(d->cscore = hachi_aligned_alloc((size_t)a->n_centroids * sizeof(float))) ||
                              !(d->top = hachi_malloc((size_t)a->centroid_top_k * sizeof(int))) ||
                              !(d->kept = hachi_malloc(n_kept * sizeof(int32_t))) ||
                              !(d->kept_logits = hachi_malloc(n_kept * sizeof(float)))))
        goto nomem;
    if (!(d->mm_scratch = hachi_aligned_alloc(HACHI_MAX(scr, 64)))) goto nomem;
    if (!(d->vsum = hachi_aligned_alloc((size_t)G * hd_max * sizeof(int32_t)))) goto nomem;
    *out = d;
    return HACHI_OK;
nomem:
    hachi_mtp_free(d);
    return HACHI_ERR_NOMEM;
}

void hachi_mtp_free(hachi_mtp *d) {
    if (!d) return;
    void *bufs[] = {d->inv_freq[0], d->inv_freq[1], d->cs, d->in, d->h, d->x, d->xn, d->proj, d->q, d->attn, d->qk, d->vsum,
                    d->gate, d->up, d->scores, d->logits, d->cscore, d->top, d->kept, d->kept_logits,
                    d->mm_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) hachi_free(bufs[i]);
    hachi_free(d);
}

size_t hachi_mtp_step_bytes(const hachi_mtp *d) {
    const hachi_model *a = d->a;
    size_t b = a->nextn_pre.rows * a->nextn_pre.row_bytes + a->nextn_post.rows * a->nextn_post.row_bytes;
    for (int l = 0; l < a->n_layer; l++) {
        const hachi_layer *L = &a->layers[l];
        const hachi_mat *mats[] = {&L->wq, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) b += mats[i]->rows * mats[i]->row_bytes;
    }
    if (!a->centroids.data) return b + a->output.rows * a->output.row_bytes;
    return b + a->centroids.rows * a->centroids.row_bytes +
           (size_t)a->centroid_top_k * (size_t)(a->n_vocab / a->n_centroids) * a->output.row_bytes;
}

/* ---- one draft step --------------------------------------------------------------------- */

static void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float r = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

/* x += rmsnorm(o) * w */
static void add_normed(float *x, float *o, const float *w, int n, float eps) {
    rmsnorm(o, o, w, n, eps);
    for (int i = 0; i < n; i++) x[i] += o[i];
}

/* A matrix under this many bytes runs in the calling thread: the drafter's one-row matmuls of a
 * few KB cost less than waking the pool (on the 2-core machine under load, 5 ms per drafted token
 * through the pool against 0.1-0.2 ms inline with micro's assistant, -t 2). */
#define MTP_SPLIT_BYTES (256u << 10)

static void matmul(hachi_mtp *d, const hachi_mat *W, const float *x, float *y) {
    hachi_pool *pool = (uint64_t)W->rows * W->row_bytes >= MTP_SPLIT_BYTES ? d->s->pool : NULL;
    hachi_matmul(pool, d->a->kern, W, x, W->cols, 1, y, W->rows, d->mm_scratch);
}

/* a = softmax(q k^T * scale) v over the target cache's positions [lo, P), per KV head for its
 * G query heads. */
static void attend(hachi_mtp *d, const hachi_kv *kv, int hd, int lo) {
    const hachi_model *a = d->a;
    const int P = d->P, Hkv = a->n_head_kv, G = a->n_head / Hkv, nk = P - lo;
    const hachi_kernels *kern = d->s->kern;
    float mx[64], sum[64];
    memset(d->attn, 0, (size_t)a->n_head * hd * sizeof(float));
    if (nk <= 0) return;
    for (int g = 0; g < Hkv; g++) {
        const hachi_kv_query kq = hachi_kv_query_prepare(kv, kern, d->q + (size_t)g * G * hd, G, hd, d->qk);
        float *o = d->attn + (size_t)g * G * hd;
        hachi_kv_run runs[4];   /* a ring cache's keys wrap at most once */
        int nr = 0;
        for (int j = lo; j < P && nr < 4; j += runs[nr++].n) {
            runs[nr] = hachi_kv_segment(kv, j, P, P);
            hachi_kv_scores(kv, kern, &runs[nr], g, hd, &kq, G, d->scores + (size_t)(j - lo) * G);
        }
        for (int h = 0; h < G; h++) mx[h] = -INFINITY;
        kern->attn_softmax(d->scores, nk, G, a->attn_scale, mx, sum);
        hachi_kv_values(kv, kern, runs, nr, g, hd, d->scores, G, o, false, d->vsum);
        for (int h = 0; h < G; h++)
            for (int i = 0; i < hd; i++) o[(size_t)h * hd + i] /= sum[h];
    }
}

static void layer(hachi_mtp *d, int l) {
    const hachi_model *a = d->a;
    const hachi_layer *L = &a->layers[l];
    const int E = a->n_embd, hd = L->head_dim, H = a->n_head, kind = L->sliding ? 0 : 1;
    const float eps = a->rms_eps;

    /* q = rope_P(rmsnorm_per_head(Wq rmsnorm(x) * attn_norm) * attn_q_norm), NeoX pairs (i, i + hd/2) */
    rmsnorm(d->xn, d->x, L->attn_norm, E, eps);
    matmul(d, &L->wq, d->xn, d->q);
    for (int i = 0; i < hd / 2; i++) {
        const double th = (double)d->P * d->inv_freq[kind][i];
        d->cs[2 * i] = (float)cos(th);
        d->cs[2 * i + 1] = (float)sin(th);
    }
    for (int h = 0; h < H; h++) {
        float *qh = d->q + (size_t)h * hd;
        rmsnorm(qh, qh, L->q_norm, hd, eps);
        for (int i = 0; i < hd / 2; i++) {
            const float c = d->cs[2 * i], s = d->cs[2 * i + 1], x0 = qh[i], x1 = qh[i + hd / 2];
            qh[i] = x0 * c - x1 * s;
            qh[i + hd / 2] = x0 * s + x1 * c;
        }
    }
    /* the target's keys below P; a sliding layer only those with P - p < window */
    const hachi_kv *kv = d->kv[kind];
    int lo = hachi_kv_first(kv, d->P);
    if (L->sliding) lo = HACHI_MAX(lo, d->P - a->window + 1);
    attend(d, kv, hd, HACHI_MAX(lo, 0));
    /* x = rmsnorm(Wo a) * post_attention_norm + x */
    matmul(d, &L->wo, d->attn, d->proj);
    add_normed(d->x, d->proj, L->post_attn_norm, E, eps);
    /* x = rmsnorm(Wdown(gelu_tanh(Wgate g) * (Wup g))) * post_ffw_norm + x, g = rmsnorm(x) * ffn_norm */
    rmsnorm(d->xn, d->x, L->ffn_norm, E, eps);
    matmul(d, &L->w_gate, d->xn, d->gate);
    matmul(d, &L->w_up, d->xn, d->up);
    d->s->kern->gelu_mul(L->n_ff, d->gate, d->up);
    matmul(d, &L->w_down, d->gate, d->proj);
    add_normed(d->x, d->proj, L->post_ffw_norm, E, eps);
    /* x *= layer_output_scale */
    if (L->out_scale != 1.0f)
        for (int i = 0; i < E; i++) d->x[i] *= L->out_scale;
}

/* Centroid head: score the clusters, keep the top_k best (ties to the lower index), and give
 * logits to their tokens only (ordering lists each cluster's n_vocab / n_centroids tokens),
 * each bit for bit the dense head's (the same kernel on the same converted activations). */
static void centroid_head(hachi_mtp *d) {
    const hachi_model *a = d->a;
    const int k = a->centroid_top_k, per = a->n_vocab / a->n_centroids;
    int n = 0;
    matmul(d, &a->centroids, d->xn, d->cscore);
    for (int c = 0; c < a->n_centroids; c++) {   /* top stays sorted, best first */
        const float v = d->cscore[c];
        if (n == k && !(v > d->cscore[d->top[k - 1]])) continue;
        int i = n < k ? n++ : k - 1;
        while (i > 0 && v > d->cscore[d->top[i - 1]]) { d->top[i] = d->top[i - 1]; i--; }
        d->top[i] = c;
    }
    for (int i = 0; i < n; i++)
        memcpy(d->kept + (size_t)i * per, a->ordering + (size_t)d->top[i] * per, per * sizeof(int32_t));
    hachi_matmul_gather(a->kern, &a->output, d->xn, d->kept, n * per, d->kept_logits, d->mm_scratch);
    for (int i = 0; i < a->n_vocab; i++) d->logits[i] = -INFINITY;
    for (int i = 0; i < n * per; i++) d->logits[d->kept[i]] = d->kept_logits[i];
}

bool hachi_mtp_begin(hachi_mtp *d) {
    const int P = hachi_session_pos(d->s);
    const float *h = P > 0 ? hachi_session_hidden(d->s, P - 1) : NULL;
    if (!h) return false;
    memcpy(d->h, h, (size_t)d->a->n_embd_out * sizeof(float));
    d->P = P;
    return true;
}

const float *hachi_mtp_step(hachi_mtp *d, int32_t token) {
    const hachi_model *a = d->a, *t = d->s->m;
    const int Et = a->n_embd_out;
    /* x = pre_projection @ concat(target.token_embd[token] * sqrt(E_target), h) */
    hachi_mat_row(d->s->kern, &t->tok_embd, token, d->in);
    for (int i = 0; i < Et; i++) d->in[i] *= d->s->emb_scale;
    memcpy(d->in + Et, d->h, (size_t)Et * sizeof(float));
    matmul(d, &a->nextn_pre, d->in, d->x);
    for (int l = 0; l < a->n_layer; l++) layer(d, l);
    /* n = rmsnorm(x) * output_norm; logits = token_embd @ n; h = post_projection @ n */
    rmsnorm(d->xn, d->x, a->output_norm, a->n_embd, a->rms_eps);
    if (a->centroids.data) centroid_head(d);
    else matmul(d, &a->output, d->xn, d->logits);
    matmul(d, &a->nextn_post, d->xn, d->h);
    return d->logits;
}
