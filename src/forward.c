/* forward: the model's equations for n tokens at once (n = 1 decode, small n
 * verify, larger n a prefill chunk). Hot path: allocates nothing; every buffer
 * comes from the session's plan. Reads top to bottom like DESIGN.md section 3. */
#include <math.h>
#include "session.h"
#include "util.h"

/* ---- small vector ops (per row, in the caller's thread) ---------------------------- */

/* The sum of squares in double, in 4 interleaved partial sums (one chain of dependent adds
 * made it 3% of a prefill), added pairwise at the end. (Vector forms of this loop, 4 or 8 sums
 * in SSE2 registers, were no faster: 453-510 ns against 428-461 for a row of 1536.) */
static void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss[4] = {0.0, 0.0, 0.0, 0.0};
    int i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) ss[k] += (double)x[i + k] * x[i + k];
    for (; i < n; i++) ss[0] += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(((ss[0] + ss[1]) + (ss[2] + ss[3])) / n + eps));
    if (w) for (int i = 0; i < n; i++) out[i] = x[i] * r * w[i];
    else   for (int i = 0; i < n; i++) out[i] = x[i] * r;
}

/* Rotate one head in place: neox pairs (i, i + d/2), normal pairs (2i, 2i+1); cs = [cos][sin],
 * n_rot/2 of each. */
static void rope_head(float *x, const float *cs, int n_rot, int head_dim, bool neox) {
    const int half = n_rot / 2;
    const float *sn = cs + half;
    int i = 0;
    if (neox)
        for (; i + 4 <= half; i += 4) {
            hachi_f32x4 *a = (hachi_f32x4 *)(x + i), *b = (hachi_f32x4 *)(x + i + head_dim / 2);
            const hachi_f32x4 c = *(const hachi_f32x4 *)(cs + i), s = *(const hachi_f32x4 *)(sn + i), x0 = *a, x1 = *b;
            *a = x0 * c - x1 * s;
            *b = x0 * s + x1 * c;
        }
    for (; i < half; i++) {
        const float c = cs[i], s = sn[i];
        const int a = neox ? i : 2 * i, b = neox ? i + head_dim / 2 : 2 * i + 1;
        const float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

/* out[i].y = out[i].W x for i < n_out; matrices that can share a run of the pool do (matmul.h) */
static void matmul_n(hachi_session *s, const hachi_matmul_out *out, int n_out, const float *x, int64_t ldx, int n) {
    const double t0 = s->profiling && s->prof_chunk >= 0 ? hachi_time_ms() : 0;
    for (int i = 0, j; i < n_out; i = j) {
        for (j = i + 1; j < n_out && hachi_matmul_fusable(out[i].W, out[j].W); j++) {}
        hachi_matmul_n(s->pool, s->kern, out + i, j - i, x, ldx, n, s->mm_scratch);
    }
    if (t0 > 0) s->prof.matmul_ms[s->prof_chunk] += hachi_time_ms() - t0;
}

static void matmul(hachi_session *s, const hachi_mat *W, const float *x, int64_t ldx, int n, float *y, int64_t ldy) {
    matmul_n(s, &(hachi_matmul_out){W, y, ldy}, 1, x, ldx, n);
}

/* ---- the row-wise work between the matmuls, rows split over the pool ---------------------
 * Each token row is computed exactly as a decode step computes it (one row alone), so a
 * prefill's rows do not depend on how many threads share them. A forward of a few rows
 * (decode, verify) runs them on the caller: a pool run costs more than the work. */

typedef struct row_op {
    void (*fn)(const struct row_op *op, int t);
    const hachi_kernels *kern;
    float *a, *b;               /* the rows' arrays (a: out or in place) */
    const float *c, *w;         /* a second input; the norm's weights (NULL: none) */
    const float *cs;            /* RoPE table rows of the forward (q, k) */
    int len, heads, hd, stride; /* row length; heads of hd per row (q, k, v); c's row stride */
    float eps, scale;           /* the norm's epsilon; add_normed's factor after the sum */
} row_op;

#define ROWS_INLINE_MAX 4

typedef void (*row_fn)(const void *ctx, int t, int ith);
typedef struct row_job { row_fn fn; const void *ctx; int n; } row_job;

static void row_job_task(void *arg, int ith, int nth) {
    const row_job *j = arg;
    int64_t lo, hi;
    hachi_split(j->n, 1, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) j->fn(j->ctx, (int)t, ith);
}

/* fn(ctx, t, thread) on rows 0..n-1, the pool's threads each taking a range */
static void split_rows(hachi_session *s, int n, row_fn fn, const void *ctx) {
    if (n <= ROWS_INLINE_MAX) {
        for (int t = 0; t < n; t++) fn(ctx, t, 0);
        return;
    }
    row_job j = {fn, ctx, n};
    hachi_pool_run(s->pool, row_job_task, &j);
}

static void row_op_row(const void *ctx, int t, int ith) {
    const row_op *op = ctx;
    op->fn(op, t);
}

/* op.fn on rows 0..n-1 */
static void for_rows(hachi_session *s, const row_op op, int n) { split_rows(s, n, row_op_row, &op); }

/* a[t] = rmsnorm(c[t]) * w */
static void op_norm(const row_op *op, int t) {
    rmsnorm(op->a + (size_t)t * op->len, op->c + (size_t)t * op->len, op->w, op->len, op->eps);
}

/* a[t] += rmsnorm(b[t]) * w (w NULL: b[t] added as it is), then a[t] *= scale unless it is 1 */
static void op_add_normed(const row_op *op, int t) {
    float *x = op->a + (size_t)t * op->len, *o = op->b + (size_t)t * op->len;
    const int n = op->len, n4 = n / 4 * 4;
    if (op->w) rmsnorm(o, o, op->w, n, op->eps);
    for (int i = 0; i < n4; i += 4) *(hachi_f32x4 *)(x + i) += *(const hachi_f32x4 *)(o + i);
    for (int i = n4; i < n; i++) x[i] += o[i];
    if (op->scale == 1.0f) return;
    const hachi_f32x4 s4 = {op->scale, op->scale, op->scale, op->scale};
    for (int i = 0; i < n4; i += 4) *(hachi_f32x4 *)(x + i) *= s4;
    for (int i = n4; i < n; i++) x[i] *= op->scale;
}

/* a[t] = gelu_tanh(a[t]) * c[t] (c's rows op->stride apart) */
static void op_gelu_mul(const row_op *op, int t) {
    op->kern->gelu_mul(op->len, op->a + (size_t)t * op->len, op->c + (size_t)t * op->stride);
}

/* each head of a[t]: rmsnorm * w, then RoPE (cs NULL: none); b (when set) as a's V: its heads
 * rmsnorm without weights */
static void op_heads(const row_op *op, int t) {
    for (int h = 0; h < op->heads; h++) {
        float *x = op->a + (size_t)t * op->len + (size_t)h * op->hd;
        rmsnorm(x, x, op->w, op->hd, op->eps);
        if (op->cs) rope_head(x, op->cs + (size_t)t * op->hd, op->hd, op->hd, true);
        if (op->b) {
            float *v = op->b + (size_t)t * op->len + (size_t)h * op->hd;
            rmsnorm(v, v, NULL, op->hd, op->eps);
        }
    }
}

static void norm_rows(hachi_session *s, float *out, const float *x, const float *w, int n, int E, float eps) {
    for_rows(s, (row_op){.fn = op_norm, .a = out, .c = x, .w = w, .len = E, .eps = eps}, n);
}

/* x = (x + rmsnorm(o) * w) * scale */
static void add_normed(hachi_session *s, float *x, float *o, const float *w, int n, int E, float eps, float scale) {
    for_rows(s, (row_op){.fn = op_add_normed, .a = x, .b = o, .w = w, .len = E, .eps = eps, .scale = scale}, n);
}

/* ---- the forward's inputs, tokens split over the pool like the rows above ---------------- */

typedef struct inputs { hachi_session *s; const int32_t *tokens; int p0; } inputs;

/* x[t] = token_embd[tokens[t]] * emb_scale (gemma4: sqrt(E)); the cos/sin rows of position
 * p0 + t for both attention kinds */
static void embed_token(const void *ctx, int t, int ith) {
    const inputs *j = ctx;
    hachi_session *s = j->s;
    const int E = s->m->n_embd;
    float *x = s->x + (size_t)t * E;
    hachi_mat_row(s->kern, &s->m->tok_embd, j->tokens[t], x);
    if (s->emb_scale != 1.0f) for (int i = 0; i < E; i++) x[i] *= s->emb_scale;
    for (int kind = 0; kind < 2; kind++) {
        if (!s->inv_freq[kind]) continue;
        const int half = s->rope_dim[kind] / 2;
        float *cs = s->rope_cs[kind] + (size_t)t * half * 2;
        for (int i = 0; i < half; i++) {
            double th = (double)(j->p0 + t) * s->inv_freq[kind][i];
            cs[i] = (float)cos(th);
            cs[half + i] = (float)sin(th);
        }
    }
}

/* Gemma 4 per-layer inputs of token t from the projection already in ple[t]:
 * ple[t][l] = (rmsnorm(proj x / sqrt(E)) * w + tok_pl * sqrt(P)) / sqrt(2), tok_pl the token's
 * per_layer_token_embd row, dequantized into the thread's ple_tok row */
static void ple_token(const void *ctx, int t, int ith) {
    const inputs *j = ctx;
    hachi_session *s = j->s;
    const hachi_model *m = s->m;
    const int P = m->n_embd_pl, LP = m->n_layer * P;
    const float inv_sqrt_e = 1.0f / sqrtf((float)m->n_embd), sqrt_p = sqrtf((float)P);
    float *pl = s->ple + (size_t)t * LP, *tok = s->ple_tok + (size_t)ith * LP;
    hachi_mat_row(s->kern, &m->pl_tok_embd, j->tokens[t], tok);
    for (int l = 0; l < m->n_layer; l++) {
        float *c = pl + l * P;
        for (int i = 0; i < P; i++) c[i] *= inv_sqrt_e;
        rmsnorm(c, c, m->pl_proj_norm, P, m->rms_eps);
        for (int i = 0; i < P; i++) c[i] = (c[i] + tok[l * P + i] * sqrt_p) * (float)M_SQRT1_2;
    }
}

/* The layer's attention over its plan: this forward's K/V rows are staged in the cache
 * (when the layer owns one) before it is called. */
static void attend(hachi_session *s, const hachi_layer_plan *lp, int n, int p0) {
    const hachi_attn_args a = {
        .q = s->q, .out = s->attn, .kv = lp->kv, .p0 = p0, .n = n, .window = lp->window,
        .n_head = lp->n_head, .n_head_kv = lp->n_head_kv, .head_dim = lp->head_dim, .scale = lp->attn_scale,
        .scores = s->scores, .scores_stride = s->scores_stride, .partial = s->partial,
        .sparse_pages = s->drafting ? lp->draft_pages : lp->sparse_pages, .page_scores = s->page_scores, .ranges = s->ranges, .n_ranges = s->n_ranges,
        .stream = lp->stream, .stream_sink = s->stream_sink, .stream_window = s->stream_window,
    };
    double t0 = s->profiling ? hachi_time_ms() : 0;
    hachi_attention(s->pool, s->kern, &a);
    if (s->profiling) s->prof.attn_ms[lp->chunk] += hachi_time_ms() - t0;
}

/* ---- Gemma 4 (DESIGN.md section 3) ----------------------------------------------------- */

static void gemma4_layer(hachi_session *s, int l, int n, int p0) {
    const hachi_model *m = s->m;
    const hachi_layer *L = &m->layers[l];
    const hachi_layer_plan *lp = &s->lp[l];
    const int E = m->n_embd, hd = lp->head_dim, H = lp->n_head, Hkv = lp->n_head_kv;
    const int qd = H * hd, kd = Hkv * hd, ff = L->n_ff, P = m->n_embd_pl;
    const float eps = m->rms_eps;

    /* h = rmsnorm(x) * attn_norm */
    norm_rows(s, s->xn, s->x, L->attn_norm, n, E, eps);
    /* q = Wq h; the owner of a cache also k = Wk h, v = Wv h (V = K without Wv): one pool run */
    const hachi_matmul_out qkv[3] = {{&L->wq, s->q, qd}, {&L->wk, s->k, kd}, {&L->wv, s->v, kd}};
    matmul_n(s, qkv, lp->owns_kv ? (L->wv.data ? 3 : 2) : 1, s->xn, E, n);
    /* q = rope(rmsnorm_per_head(q) * attn_q_norm) */
    for_rows(s, (row_op){.fn = op_heads, .a = s->q, .w = L->q_norm, .cs = lp->rope_cs, .len = qd, .heads = H, .hd = hd,
                         .eps = eps}, n);
    /* owner of a cache: k = rope(rmsnorm_per_head(k) * attn_k_norm), v = rmsnorm_per_head(v),
     * staged in the cache (in order: a page's key bounds); shared layers read the owner's */
    if (lp->owns_kv) {
        if (!L->wv.data) memcpy(s->v, s->k, (size_t)n * kd * sizeof(float));
        for_rows(s, (row_op){.fn = op_heads, .a = s->k, .b = s->v, .w = L->k_norm, .cs = lp->rope_cs, .len = kd,
                             .heads = Hkv, .hd = hd, .eps = eps}, n);
        for (int t = 0; t < n; t++) hachi_kv_stage(lp->kv, s->kern, p0, t, s->k + (size_t)t * kd, s->v + (size_t)t * kd);
    }
    /* a = softmax(q k^T * scale + causal/window mask) v */
    attend(s, lp, n, p0);
    /* x1 = rmsnorm(Wo a) * post_attention_norm + x */
    matmul(s, &L->wo, s->attn, qd, n, s->proj, E);
    add_normed(s, s->x, s->proj, L->post_attn_norm, n, E, eps, 1.0f);

    /* f = rmsnorm(x1) * ffn_norm; f = Wdown(gelu_tanh(Wgate f) * (Wup f)) */
    norm_rows(s, s->xn, s->x, L->ffn_norm, n, E, eps);
    const hachi_matmul_out gate_up[2] = {{&L->w_gate, s->ffn_gate, ff}, {&L->w_up, s->ffn_up, ff}};
    matmul_n(s, gate_up, 2, s->xn, E, n);
    for_rows(s, (row_op){.fn = op_gelu_mul, .kern = s->kern, .a = s->ffn_gate, .c = s->ffn_up, .len = ff, .stride = ff}, n);
    matmul(s, &L->w_down, s->ffn_gate, ff, n, s->proj, E);
    /* x2 = rmsnorm(f) * post_ffw_norm + x1 (times layer_output_scale where no per-layer input follows) */
    add_normed(s, s->x, s->proj, L->post_ffw_norm, n, E, eps, P > 0 ? 1.0f : L->out_scale);

    /* per-layer input: g = gelu_tanh(inp_gate x2) * inp_pl[l]; x3 = rmsnorm(proj g) * post_norm + x2;
     * x = x3 * layer_output_scale */
    if (P > 0) {
        matmul(s, &L->inp_gate, s->x, E, n, s->ple_gate, P);
        for_rows(s, (row_op){.fn = op_gelu_mul, .kern = s->kern, .a = s->ple_gate, .c = s->ple + (size_t)l * P, .len = P,
                             .stride = m->n_layer * P}, n);
        matmul(s, &L->proj, s->ple_gate, P, n, s->proj, E);
        add_normed(s, s->x, s->proj, L->post_norm, n, E, eps, L->out_scale);
    }
}

/* ---- llama ------------------------------------------------------------------------------ */

static float silu(float x) { return x / (1.0f + expf(-x)); }

static void llama_layer(hachi_session *s, int l, int n, int p0) {
    const hachi_model *m = s->m;
    const hachi_layer *L = &m->layers[l];
    const hachi_layer_plan *lp = &s->lp[l];
    const int E = m->n_embd, hd = lp->head_dim, H = lp->n_head, Hkv = lp->n_head_kv;
    const int qd = H * hd, kd = Hkv * hd, ff = L->n_ff, n_rot = lp->n_rot;
    const float eps = m->rms_eps;

    /* h = rmsnorm(x) * attn_norm; q, k, v = Wq h, Wk h, Wv h; rope on q and k */
    norm_rows(s, s->xn, s->x, L->attn_norm, n, E, eps);
    const hachi_matmul_out qkv[3] = {{&L->wq, s->q, qd}, {&L->wk, s->k, kd}, {&L->wv, s->v, kd}};
    matmul_n(s, qkv, 3, s->xn, E, n);
    for (int t = 0; t < n; t++) {
        const float *cs = lp->rope_cs + (size_t)t * n_rot;
        for (int h = 0; h < H; h++) rope_head(s->q + (size_t)t * qd + h * hd, cs, n_rot, hd, m->rope_neox);
        for (int h = 0; h < Hkv; h++) rope_head(s->k + (size_t)t * kd + h * hd, cs, n_rot, hd, m->rope_neox);
        hachi_kv_stage(lp->kv, s->kern, p0, t, s->k + (size_t)t * kd, s->v + (size_t)t * kd);
    }
    /* x += Wo softmax(q k^T * scale + causal mask) v */
    attend(s, lp, n, p0);
    matmul(s, &L->wo, s->attn, qd, n, s->proj, E);
    add_normed(s, s->x, s->proj, NULL, n, E, eps, 1.0f);
    /* x += Wdown(silu(Wgate f) * (Wup f)), f = rmsnorm(x) * ffn_norm */
    norm_rows(s, s->xn, s->x, L->ffn_norm, n, E, eps);
    const hachi_matmul_out gate_up[2] = {{&L->w_gate, s->ffn_gate, ff}, {&L->w_up, s->ffn_up, ff}};
    matmul_n(s, gate_up, 2, s->xn, E, n);
    for (int64_t i = 0; i < (int64_t)n * ff; i++) s->ffn_gate[i] = silu(s->ffn_gate[i]) * s->ffn_up[i];
    matmul(s, &L->w_down, s->ffn_gate, ff, n, s->proj, E);
    add_normed(s, s->x, s->proj, NULL, n, E, eps, 1.0f);
}

hachi_layer_fn hachi_forward_layer_fn(const hachi_model *m) {
    return m->arch == HACHI_ARCH_GEMMA4 ? gemma4_layer : llama_layer;
}

typedef struct softcap_job { const hachi_kernels *k; float *x; int64_t n; float cap; } softcap_job;

/* logits = cap * tanh(logits / cap) */
static void softcap_task(void *ctx, int ith, int nth) {
    const softcap_job *j = ctx;
    int64_t lo, hi;
    hachi_split(j->n, 64, ith, nth, &lo, &hi);
    if (hi > lo) j->k->softcap(hi - lo, j->x + lo, j->cap);
}

void hachi_forward_prefetch(const hachi_session *s, const int32_t *tokens, int n) {
    hachi_mat_prefetch_rows(&s->m->tok_embd, tokens, n);
    if (s->m->n_embd_pl > 0) hachi_mat_prefetch_rows(&s->m->pl_tok_embd, tokens, n);
}

void hachi_forward(hachi_session *s, const int32_t *tokens, int n, float *out, bool head) {
    const hachi_model *m = s->m;
    const int E = m->n_embd, p0 = s->pos;
    const bool prof = s->profiling;
    double t0 = prof ? hachi_time_ms() : 0, t1;
    s->hidden_lo = s->hidden_hi = 0;   /* the layers overwrite xn */

    const inputs in = {s, tokens, p0};
    split_rows(s, n, embed_token, &in);
    if (prof) { t1 = hachi_time_ms(); s->prof.emb_ms += t1 - t0; t0 = t1; }
    if (m->n_embd_pl > 0) {   /* Gemma 4's per-layer inputs: the projection of x, then per token */
        matmul(s, &m->pl_model_proj, s->x, E, n, s->ple, (int64_t)m->n_layer * m->n_embd_pl);
        split_rows(s, n, ple_token, &in);
    }
    if (prof) { t1 = hachi_time_ms(); s->prof.ple_ms += t1 - t0; t0 = t1; }

    for (int l = 0; l < m->n_layer; l++) {
        s->prof_chunk = s->lp[l].chunk;
        s->layer(s, l, n, p0);
        if (prof) { t1 = hachi_time_ms(); s->prof.chunk_ms[s->lp[l].chunk] += t1 - t0; t0 = t1; }
    }
    s->prof_chunk = -1;
    if (prof) s->prof.tokens += n;
    for (int c = 0; c < s->n_kv; c++) hachi_kv_commit(&s->kv[c], p0, n);
    s->pos = p0 + n;
    if (!head && !out) return;

    /* head: logits = softcap(output @ norm(x)) for the rows asked for */
    int first = out ? 0 : n - 1;
    for (int t = first; t < n; t++)
        rmsnorm(s->xn + (size_t)t * E, s->x + (size_t)t * E, m->output_norm, E, m->rms_eps);
    s->hidden_p0 = p0;                  /* xn now holds the head's input rows */
    s->hidden_lo = p0 + first;
    s->hidden_hi = p0 + n;
    float *dst = out ? out : s->logits;
    matmul(s, &m->output, s->xn + (size_t)first * E, E, n - first, dst, m->n_vocab);
    if (m->softcap > 0.0f) {   /* 262144 tanh per row: split them */
        softcap_job sj = {s->kern, dst, (int64_t)(n - first) * m->n_vocab, m->softcap};
        hachi_pool_run(s->pool, softcap_task, &sj);
    }
    if (out) memcpy(s->logits, out + (size_t)(n - 1) * m->n_vocab, (size_t)m->n_vocab * sizeof(float));
    s->logits_pos = p0 + n - 1;
    if (prof) { s->prof.head_ms += hachi_time_ms() - t0; s->prof.steps++; }
}
