/* forward: the model's equations for n tokens at once (n = 1 decode, small n
 * verify, larger n a prefill chunk). Hot path: allocates nothing; every buffer
 * comes from the session's plan. Reads top to bottom like DESIGN.md section 3. */
#include <math.h>
#include "session.h"
#include "util.h"

/* ---- small vector ops (per row, in the caller's thread) ---------------------------- */

static void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / n + eps));
    if (w) for (int i = 0; i < n; i++) out[i] = x[i] * r * w[i];
    else   for (int i = 0; i < n; i++) out[i] = x[i] * r;
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* Rotate one head in place: neox pairs (i, i + d/2), normal pairs (2i, 2i+1); cs = [d/2][cos, sin]. */
static void rope_head(float *x, const float *cs, int n_rot, int head_dim, bool neox) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float c = cs[2 * i], s = cs[2 * i + 1];
        int a = neox ? i : 2 * i, b = neox ? i + head_dim / 2 : 2 * i + 1;
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

static void matmul(hachi_session *s, const hachi_mat *W, const float *x, int64_t ldx, int n, float *y, int64_t ldy) {
    hachi_matmul(s->pool, s->kern, W, x, ldx, n, y, ldy, s->mm_scratch);
}

/* cos/sin tables of this forward's positions for both attention kinds. */
static void rope_tables(hachi_session *s, int n, int p0) {
    const hachi_model *m = s->m;
    for (int kind = 0; kind < 2; kind++) {
        if (!s->inv_freq[kind]) continue;
        int half = (kind ? m->head_dim_full : m->head_dim_swa) / 2;
        if (m->arch == HACHI_ARCH_LLAMA) half = m->n_rot / 2;
        for (int t = 0; t < n; t++) {
            float *cs = s->rope_cs[kind] + (size_t)t * half * 2;
            for (int i = 0; i < half; i++) {
                double th = (double)(p0 + t) * s->inv_freq[kind][i];
                cs[2 * i] = (float)cos(th);
                cs[2 * i + 1] = (float)sin(th);
            }
        }
    }
}

/* Gemma 4 per-layer inputs: ple[t][l] = (rmsnorm(proj x / sqrt(E)) * w + tok_pl * sqrt(P)) / sqrt(2) */
static void per_layer_inputs(hachi_session *s, const int32_t *tokens, int n) {
    const hachi_model *m = s->m;
    int P = m->n_embd_pl, LP = m->n_layer * P;
    matmul(s, &m->pl_model_proj, s->x, m->n_embd, n, s->ple, LP);
    float inv_sqrt_e = 1.0f / sqrtf((float)m->n_embd), sqrt_p = sqrtf((float)P);
    for (int t = 0; t < n; t++) {
        float *pl = s->ple + (size_t)t * LP, *tok = s->hb + 0;    /* hb is free here: [LP] scratch */
        hachi_mat_row(s->kern, &m->pl_tok_embd, tokens[t], tok);
        for (int l = 0; l < m->n_layer; l++) {
            float *c = pl + l * P;
            for (int i = 0; i < P; i++) c[i] *= inv_sqrt_e;
            rmsnorm(c, c, m->pl_proj_norm, P, m->rms_eps);
            for (int i = 0; i < P; i++) c[i] = (c[i] + tok[l * P + i] * sqrt_p) * (float)M_SQRT1_2;
        }
    }
}

static void layer(hachi_session *s, int l, int n, int p0) {
    const hachi_model *m = s->m;
    const hachi_layer *L = &m->layers[l];
    const hachi_layer_plan *lp = &s->lp[l];
    const bool gemma = m->arch == HACHI_ARCH_GEMMA4;
    const int E = m->n_embd, hd = lp->head_dim, H = m->n_head, Hkv = m->n_head_kv;
    const int qd = H * hd, kd = Hkv * hd, ff = L->n_ff;
    const float eps = m->rms_eps;
    hachi_kv *kv = &s->kv[lp->kv_index];
    int kind = lp->sliding ? 0 : 1;
    const float *cs = s->rope_cs[m->arch == HACHI_ARCH_LLAMA ? 1 : kind];
    int n_rot = m->arch == HACHI_ARCH_LLAMA ? m->n_rot : hd;

    /* attention: h = norm(x); q, k, v; per-head norms; rope; softmax(q k^T) v */
    for (int t = 0; t < n; t++) rmsnorm(s->xb + (size_t)t * E, s->x + (size_t)t * E, L->attn_norm, E, eps);
    matmul(s, &L->wq, s->xb, E, n, s->q, qd);
    bool own = lp->kv_owner == l;
    if (own) {
        matmul(s, &L->wk, s->xb, E, n, s->k, kd);
        if (L->wv.data) matmul(s, &L->wv, s->xb, E, n, s->v, kd);
        else memcpy(s->v, s->k, (size_t)n * kd * sizeof(float));   /* V = K before norms */
    }
    for (int t = 0; t < n; t++) {
        const float *c = cs + (size_t)t * (n_rot / 2) * 2;
        for (int h = 0; h < H; h++) {
            float *qh = s->q + (size_t)t * qd + h * hd;
            if (gemma) rmsnorm(qh, qh, L->q_norm, hd, eps);
            rope_head(qh, c, n_rot, hd, m->rope_neox);
        }
        if (!own) continue;
        for (int h = 0; h < Hkv; h++) {
            float *kh = s->k + (size_t)t * kd + h * hd, *vh = s->v + (size_t)t * kd + h * hd;
            if (gemma) { rmsnorm(kh, kh, L->k_norm, hd, eps); rmsnorm(vh, vh, NULL, hd, eps); }
            rope_head(kh, c, n_rot, hd, m->rope_neox);
        }
        if (s->kv_f32) {
            memcpy(kv->kb + t * kv->row_bytes, s->k + (size_t)t * kd, kv->row_bytes);
            memcpy(kv->vb + t * kv->row_bytes, s->v + (size_t)t * kd, kv->row_bytes);
        } else {
            s->kern->f32_to_f16(s->k + (size_t)t * kd, (uint16_t *)(kv->kb + t * kv->row_bytes), kd);
            s->kern->f32_to_f16(s->v + (size_t)t * kd, (uint16_t *)(kv->vb + t * kv->row_bytes), kd);
        }
    }
    double t0 = s->profiling ? hachi_time_ms() : 0;
    hachi_attention(s, l, n, p0);
    if (s->profiling) s->prof.attn_ms[lp->chunk] += hachi_time_ms() - t0;
    matmul(s, &L->wo, s->att, qd, n, s->xb2, E);
    for (int t = 0; t < n; t++) {
        float *x = s->x + (size_t)t * E, *o = s->xb2 + (size_t)t * E;
        if (gemma) rmsnorm(o, o, L->post_attn_norm, E, eps);
        for (int i = 0; i < E; i++) x[i] += o[i];
        rmsnorm(s->xb + (size_t)t * E, x, L->ffn_norm, E, eps);
    }

    /* feed-forward: down(act(gate f) * up f) */
    matmul(s, &L->w_gate, s->xb, E, n, s->hb, ff);
    matmul(s, &L->w_up, s->xb, E, n, s->hb2, ff);
    if (gemma) s->kern->gelu_mul((int64_t)n * ff, s->hb, s->hb2);
    else for (int64_t i = 0; i < (int64_t)n * ff; i++) s->hb[i] = silu(s->hb[i]) * s->hb2[i];
    matmul(s, &L->w_down, s->hb, ff, n, s->xb2, E);
    for (int t = 0; t < n; t++) {
        float *x = s->x + (size_t)t * E, *o = s->xb2 + (size_t)t * E;
        if (gemma) rmsnorm(o, o, L->post_ffw_norm, E, eps);
        for (int i = 0; i < E; i++) x[i] += o[i];
    }

    /* per-layer input branch: x += norm(proj(gelu(inp_gate x) * ple[l])) */
    if (gemma && m->n_embd_pl > 0) {
        int P = m->n_embd_pl;
        matmul(s, &L->inp_gate, s->x, E, n, s->plg, P);
        for (int t = 0; t < n; t++) {
            float *g = s->plg + (size_t)t * P;
            const float *pl = s->ple + (size_t)t * m->n_layer * P + (size_t)l * P;
            s->kern->gelu_mul(P, g, pl);
        }
        matmul(s, &L->proj, s->plg, P, n, s->xb2, E);
        for (int t = 0; t < n; t++) {
            float *x = s->x + (size_t)t * E, *o = s->xb2 + (size_t)t * E;
            rmsnorm(o, o, L->post_norm, E, eps);
            for (int i = 0; i < E; i++) x[i] += o[i];
        }
    }
    if (L->out_scale != 1.0f)
        for (int64_t i = 0; i < (int64_t)n * E; i++) s->x[i] *= L->out_scale;
}

typedef struct softcap_job { const hachi_kernels *k; float *x; int64_t n; float cap; } softcap_job;

/* logits = cap * tanh(logits / cap) */
static void softcap_task(void *ctx, int ith, int nth) {
    const softcap_job *j = ctx;
    int64_t lo, hi;
    hachi_split(j->n, 64, ith, nth, &lo, &hi);
    if (hi > lo) j->k->softcap(hi - lo, j->x + lo, j->cap);
}

/* Copy this forward's new K/V rows into the caches (ring slot = position % n_slots). */
static void commit_kv(hachi_session *s, int n, int p0) {
    for (int c = 0; c < s->n_kv; c++) {
        hachi_kv *kv = &s->kv[c];
        for (int t = 0; t < n; t++) {
            int slot = kv->ring ? (p0 + t) % kv->n_slots : p0 + t;
            memcpy(kv->k + slot * kv->row_bytes, kv->kb + t * kv->row_bytes, kv->row_bytes);
            memcpy(kv->v + slot * kv->row_bytes, kv->vb + t * kv->row_bytes, kv->row_bytes);
        }
    }
}

void hachi_forward(hachi_session *s, const int32_t *tokens, int n, float *out, bool head) {
    const hachi_model *m = s->m;
    const int E = m->n_embd, p0 = s->pos;
    const bool prof = s->profiling;
    double t0 = prof ? hachi_time_ms() : 0, t1;

    /* embedding: x = token_embd[t] (* sqrt(E) for gemma) */
    float emb_scale = m->arch == HACHI_ARCH_GEMMA4 ? sqrtf((float)E) : 1.0f;
    for (int t = 0; t < n; t++) {
        float *x = s->x + (size_t)t * E;
        hachi_mat_row(s->kern, &m->tok_embd, tokens[t], x);
        if (emb_scale != 1.0f) for (int i = 0; i < E; i++) x[i] *= emb_scale;
    }
    rope_tables(s, n, p0);
    if (prof) { t1 = hachi_time_ms(); s->prof.emb_ms += t1 - t0; t0 = t1; }
    if (m->n_embd_pl > 0) per_layer_inputs(s, tokens, n);
    if (prof) { t1 = hachi_time_ms(); s->prof.ple_ms += t1 - t0; t0 = t1; }

    for (int l = 0; l < m->n_layer; l++) {
        layer(s, l, n, p0);
        if (prof) { t1 = hachi_time_ms(); s->prof.chunk_ms[s->lp[l].chunk] += t1 - t0; t0 = t1; }
    }
    commit_kv(s, n, p0);
    s->pos = p0 + n;
    if (!head && !out) return;

    /* head: logits = softcap(output @ norm(x)) for the rows asked for */
    int first = out ? 0 : n - 1;
    for (int t = first; t < n; t++)
        rmsnorm(s->xb + (size_t)t * E, s->x + (size_t)t * E, m->output_norm, E, m->rms_eps);
    float *dst = out ? out : s->logits;
    matmul(s, &m->output, s->xb + (size_t)first * E, E, n - first, dst, m->n_vocab);
    if (m->softcap > 0.0f) {   /* 262144 tanh per row: split them */
        softcap_job sj = {s->kern, dst, (int64_t)(n - first) * m->n_vocab, m->softcap};
        hachi_pool_run(s->pool, softcap_task, &sj);
    }
    if (out) memcpy(s->logits, out + (size_t)(n - 1) * m->n_vocab, (size_t)m->n_vocab * sizeof(float));
    s->logits_pos = p0 + n - 1;
    if (prof) { s->prof.head_ms += hachi_time_ms() - t0; s->prof.steps++; }
}
