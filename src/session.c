/* session: the static plan (per-layer attention kind, window, KV source,
 * chunk; every buffer sized and allocated once) and the public eval API. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "session.h"
#include "heads.h"
#include "util.h"

/* Bytes of the KV caches a plan for n_ctx allocates with KV type t. */
static size_t kv_plan_bytes(const hachi_model *m, int n_ctx, int n_batch, hachi_kv_type t, bool pages) {
    size_t b = 0;
    for (int l = 0; l < m->n_layer; l++) {
        const hachi_layer *ly = &m->layers[l];
        if (ly->kv_owner == l)
            b += hachi_kv_plan_bytes(m->n_head_kv, ly->head_dim, ly->sliding ? m->window : 0, n_ctx, n_batch, t, pages);
    }
    return b;
}

hachi_session_params hachi_session_default_params(void) {
    hachi_session_params p = {.n_ctx = 2048, .n_threads = 0, .n_batch = 64, .chunks = NULL, .profile = false};
    return p;
}

/* Chunk bounds from "a,b,c" (or DESIGN.md's 8,15,25 scaled to the model's depth). */
static hachi_status plan_chunks(hachi_session *s, const char *spec) {
    hachi_profile *p = &s->prof;
    int L = s->m->n_layer, nb = 0, b[HACHI_MAX_CHUNKS] = {0};
    if (spec && *spec) {
        const char *c = spec;
        while (*c) {
            char *end;
            long v = strtol(c, &end, 10);
            if (end == c || v <= (nb ? b[nb - 1] : 0) || v >= L || nb >= HACHI_MAX_CHUNKS - 1)
                return hachi_fail(HACHI_ERR_INVALID_ARG,
                                  "chunks '%s': expected increasing layer indices in (0, %d), at most %d",
                                  spec, L, HACHI_MAX_CHUNKS - 1);
            b[nb++] = (int)v;
            c = *end == ',' ? end + 1 : end;
            if (*end && *end != ',') return hachi_fail(HACHI_ERR_INVALID_ARG, "chunks '%s': bad separator", spec);
        }
    } else {
        const int def[3] = {8, 15, 25};
        for (int i = 0; i < 3; i++) {
            int v = (int)lround((double)def[i] * L / 35.0);
            if (v > (nb ? b[nb - 1] : 0) && v < L) b[nb++] = v;
        }
    }
    p->n_chunks = nb + 1;
    p->bounds[0] = 0;
    for (int i = 0; i < nb; i++) p->bounds[i + 1] = b[i];
    p->bounds[nb + 1] = L;
    for (int l = 0, c = 0; l < L; l++) {
        while (l >= p->bounds[c + 1]) c++;
        s->lp[l].chunk = c;
    }
    return HACHI_OK;
}

#define ALLOC(ptr, count)                                                           \
    do {                                                                            \
        size_t bytes_ = (size_t)(count) * sizeof(*(ptr));                           \
        if (!((ptr) = hachi_aligned_alloc(bytes_))) { st = HACHI_ERR_NOMEM; goto fail; } \
        s->plan_bytes += bytes_;                                                    \
    } while (0)

/* Every query head of the layer streams. */
static bool all_stream(const hachi_layer_plan *lp) {
    return lp->stream && __builtin_popcountll(lp->stream) == lp->n_head;
}

/* A page-sparse budget (sparse_budget, draft_budget): 0, or pages the model's full-attention
 * layers can select from. */
static hachi_status check_budget(const hachi_model *m, const char *what, int32_t budget) {
    if (!budget) return HACHI_OK;
    bool full = false;
    for (int l = 0; l < m->n_layer; l++) full |= !m->layers[l].sliding;
    if (budget < 3 * HACHI_PAGE || budget % HACHI_PAGE || budget > HACHI_ATTN_MAX_PAGES * HACHI_PAGE)
        return hachi_fail(HACHI_ERR_INVALID_ARG,
                          "%s budget %d: expected a multiple of %d from %d (the sink and the last two pages) to %d",
                          what, budget, HACHI_PAGE, 3 * HACHI_PAGE, HACHI_ATTN_MAX_PAGES * HACHI_PAGE);
    if (!full)
        return hachi_fail(HACHI_ERR_UNSUPPORTED, "%s budget %d: model '%s' has no full-attention layers", what, budget,
                          m->path);
    return HACHI_OK;
}

hachi_status hachi_session_create(const hachi_model *m, const hachi_session_params *params, hachi_session **out) {
    hachi_session_params p = params ? *params : hachi_session_default_params();
    hachi_status st;
    if (!m || !out) return hachi_fail(HACHI_ERR_INVALID_ARG, "hachi_session_create: NULL argument");
    *out = NULL;
    if (!m->layers) return hachi_fail(HACHI_ERR_INVALID_ARG, "model '%s' was loaded vocab-only", m->path);
    if (m->arch == HACHI_ARCH_GEMMA4_ASSISTANT)
        return hachi_fail(HACHI_ERR_UNSUPPORTED, "model '%s' is a gemma4-assistant drafter: it drafts for a gemma4 "
                          "target (hachi_spec_params.assistant, -md) and has no session of its own", m->path);
    if (p.n_ctx == 0) p.n_ctx = 2048;
    if (p.n_ctx < HACHI_CTX_MIN || p.n_ctx > HACHI_CTX_MAX || (p.n_ctx & (p.n_ctx - 1)))
        return hachi_fail(HACHI_ERR_INVALID_ARG, "context %d is not a context mode (a power of two from %d to %d)",
                          p.n_ctx, HACHI_CTX_MIN, HACHI_CTX_MAX);
    if ((unsigned)p.kv_type > HACHI_KV_INT8) return hachi_fail(HACHI_ERR_INVALID_ARG, "unknown KV type %d", (int)p.kv_type);
    if ((st = check_budget(m, "sparse", p.sparse_budget)) || (st = check_budget(m, "draft", p.draft_budget))) return st;
    if (p.heads && (p.heads->model_id != hachi_model_id(m) || p.heads->n_layer != m->n_layer ||
                    p.heads->n_head != m->n_head))
        return hachi_fail(HACHI_ERR_INVALID_ARG, "streaming heads made for another model than '%s'", m->path);
    if (p.n_threads < 0 || p.n_threads > 256) return hachi_fail(HACHI_ERR_INVALID_ARG, "threads %d out of range [1, 256]", p.n_threads);
    if (p.n_batch <= 0) p.n_batch = 64;
    if (p.n_batch > 512) return hachi_fail(HACHI_ERR_INVALID_ARG, "batch %d out of range [1, 512]", p.n_batch);
    if (m->n_head / m->n_head_kv > 64) return hachi_fail(HACHI_ERR_UNSUPPORTED, "more than 64 query heads per KV head");
    {   /* the plan's large buffers must fit in the memory the system has available */
        const int nth = p.n_threads ? p.n_threads : hachi_physical_cores(), nb = HACHI_MIN(p.n_batch, p.n_ctx);
        const int hd_max = HACHI_MAX(m->head_dim_full, m->head_dim_swa);
        const size_t kv = kv_plan_bytes(m, p.n_ctx, nb, p.kv_type, p.sparse_budget > 0 || p.draft_budget > 0);
        const size_t need = kv + sizeof(float) * (nth * hachi_attn_scores_stride(m->n_head, p.n_ctx, hd_max, p.kv_type) +
                                                  hachi_attn_partial_floats(m->n_head, hd_max));
        const size_t avail = hachi_mem_available();
        if (avail && need > avail)
            return hachi_fail(HACHI_ERR_NOMEM,
                              "context %d needs %zu bytes (KV cache %zu, %s) but the system has %zu available",
                              p.n_ctx, need, kv, hachi_kv_type_name(p.kv_type), avail);
    }

    hachi_session *s = hachi_calloc(1, sizeof *s);
    if (!s) return HACHI_ERR_NOMEM;
    s->m = m;
    s->kern = m->kern;
    s->n_ctx = p.n_ctx;
    s->n_batch = HACHI_MIN(p.n_batch, p.n_ctx);
    s->profiling = p.profile;
    s->prof_chunk = -1;
    s->progress = p.progress;
    s->progress_ctx = p.progress_ctx;
    s->kv_type = p.kv_type;
    s->sparse_pages = p.sparse_budget / HACHI_PAGE;
    s->draft_pages = p.draft_budget / HACHI_PAGE;
    if (p.heads) {
        s->stream_sink = p.heads->sink;
        s->stream_window = p.heads->window;
    }
    s->layer = hachi_forward_layer_fn(m);
    s->emb_scale = m->arch == HACHI_ARCH_GEMMA4 ? sqrtf((float)m->n_embd) : 1.0f;
    if ((st = hachi_pool_create(p.n_threads ? p.n_threads : hachi_physical_cores(), &s->pool))) goto fail;
    int nth = hachi_pool_size(s->pool), nb = s->n_batch, L = m->n_layer;
    int E = m->n_embd, H = m->n_head, Hkv = m->n_head_kv;
    int hd_max = HACHI_MAX(m->head_dim_full, m->head_dim_swa), ff_max = 0, LP = L * m->n_embd_pl;
    const bool llama = m->arch == HACHI_ARCH_LLAMA;

    /* rope: inv_freq_i = base^(-2i/d) (/ rope_freqs[i] on full gemma4 layers); llama has
     * one kind (table 1) over n_rot dims */
    for (int kind = 0; kind < 2; kind++) {
        int d = llama ? m->n_rot : kind ? m->head_dim_full : m->head_dim_swa;
        double base = kind ? m->rope_base : m->rope_base_swa;
        if (llama && kind == 0) continue;
        s->rope_dim[kind] = d;
        ALLOC(s->inv_freq[kind], d / 2);
        ALLOC(s->rope_cs[kind], (size_t)nb * d);
        for (int i = 0; i < d / 2; i++) {
            s->inv_freq[kind][i] = pow(base, -2.0 * i / d);
            if (kind && m->rope_freqs) s->inv_freq[kind][i] /= m->rope_freqs[i];
        }
    }

    /* per layer: kind, window, head dims, scale, rope table, KV owner and its cache */
    ALLOC(s->lp, L);
    ALLOC(s->kv, L);
    for (int l = 0; l < L; l++) {
        const hachi_layer *ly = &m->layers[l];
        hachi_layer_plan *lp = &s->lp[l];
        lp->sliding = ly->sliding;
        lp->window = ly->sliding ? m->window : 0;
        lp->head_dim = ly->head_dim;
        lp->n_head = H;
        lp->n_head_kv = Hkv;
        lp->attn_scale = m->attn_scale;
        lp->n_rot = llama ? m->n_rot : ly->head_dim;
        lp->rope_cs = s->rope_cs[llama || !ly->sliding ? 1 : 0];
        lp->kv_owner = ly->kv_owner;
        lp->owns_kv = ly->kv_owner == l;
        lp->sparse_pages = lp->window == 0 ? s->sparse_pages : 0;
        lp->stream = p.heads && !ly->sliding ? p.heads->stream[l] : 0;
        s->n_stream += __builtin_popcountll(lp->stream);
        lp->draft_pages = lp->window == 0 ? s->draft_pages : 0;
        if (all_stream(lp)) lp->sparse_pages = lp->draft_pages = 0;   /* its heads select no pages */
        ff_max = HACHI_MAX(ff_max, ly->n_ff);
        if (lp->owns_kv) {
            lp->kv = &s->kv[s->n_kv++];
            /* page metadata on every full-attention cache of a sparse plan (or one with draft
             * steps): a layer that reads it may select pages where its owner, all heads
             * streaming, does not */
            if ((st = hachi_kv_init(lp->kv, l, Hkv, ly->head_dim, lp->window, s->n_ctx, nb, s->kv_type,
                                    lp->window == 0 && (s->sparse_pages > 0 || s->draft_pages > 0), &s->plan_bytes)))
                goto fail;
        } else {
            lp->kv = s->lp[ly->kv_owner].kv;
        }
    }
    if ((st = plan_chunks(s, p.chunks))) goto fail;

    /* activations */
    ALLOC(s->x, (size_t)nb * E);
    ALLOC(s->xn, (size_t)nb * E);
    ALLOC(s->proj, (size_t)nb * E);
    ALLOC(s->q, (size_t)nb * H * hd_max);
    ALLOC(s->attn, (size_t)nb * H * hd_max);
    ALLOC(s->k, (size_t)nb * Hkv * hd_max);
    ALLOC(s->v, (size_t)nb * Hkv * hd_max);
    ALLOC(s->ffn_gate, (size_t)nb * ff_max);
    ALLOC(s->ffn_up, (size_t)nb * ff_max);
    if (LP) {
        ALLOC(s->ple, (size_t)nb * LP);
        ALLOC(s->ple_gate, (size_t)nb * m->n_embd_pl);
        ALLOC(s->ple_tok, (size_t)nth * LP);
    }
    ALLOC(s->logits, m->n_vocab);
    s->logits_pos = -1;
    s->scores_stride = hachi_attn_scores_stride(H, s->n_ctx, hd_max, s->kv_type);
    ALLOC(s->scores, (size_t)nth * s->scores_stride);
    ALLOC(s->partial, hachi_attn_partial_floats(H, hd_max));
    if (s->sparse_pages || s->draft_pages) {
        ALLOC(s->page_scores, hachi_attn_page_floats(s->n_ctx));
        ALLOC(s->ranges, hachi_attn_range_ints(HACHI_MAX(s->sparse_pages, s->draft_pages)));
        ALLOC(s->n_ranges, HACHI_ATTN_GROUP);
    }

    /* matmul scratch: the largest activation conversion of any matrix at nb rows */
    size_t scr = hachi_matmul_scratch_bytes(s->kern, m->output.type, m->output.cols, nb);
    if (m->pl_model_proj.data)
        scr = HACHI_MAX(scr, hachi_matmul_scratch_bytes(s->kern, m->pl_model_proj.type, m->pl_model_proj.cols, nb));
    for (int l = 0; l < L; l++) {
        const hachi_layer *ly = &m->layers[l];
        const hachi_mat *mats[] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down,
                                   &ly->inp_gate, &ly->proj};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
            if (mats[i]->data)
                scr = HACHI_MAX(scr, hachi_matmul_scratch_bytes(s->kern, mats[i]->type, mats[i]->cols, nb));
    }
    s->mm_scratch_bytes = scr;
    ALLOC(s->mm_scratch, scr);   /* char: bytes */
    *out = s;
    return HACHI_OK;
fail:
    hachi_session_free(s);
    return st;
}

void hachi_session_free(hachi_session *s) {
    if (!s) return;
    if (s->kv)
        for (int i = 0; i < s->n_kv; i++) hachi_kv_free(&s->kv[i]);
    void *bufs[] = {s->lp, s->kv, s->x, s->xn, s->proj, s->q, s->attn, s->k, s->v, s->ffn_gate, s->ffn_up, s->ple,
                    s->ple_gate, s->ple_tok, s->logits, s->scores, s->partial, s->inv_freq[0], s->inv_freq[1],
                    s->rope_cs[0], s->rope_cs[1], s->mm_scratch, s->page_scores, s->ranges, s->n_ranges};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) hachi_free(bufs[i]);
    hachi_pool_free(s->pool);
    hachi_free(s);
}

hachi_status hachi_session_eval(hachi_session *s, const int32_t *tokens, int32_t n, float *logits_out) {
    if (!s || !tokens || n <= 0) return hachi_fail(HACHI_ERR_INVALID_ARG, "eval: no tokens");
    if (n > s->n_ctx - s->pos)
        return hachi_fail(HACHI_ERR_CONTEXT_FULL, "context full: %d tokens at position %d exceed the context of %d",
                          n, s->pos, s->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->m->n_vocab)
            return hachi_fail(HACHI_ERR_INVALID_ARG, "token id %d at index %d is outside the vocabulary [0, %d)",
                              tokens[i], i, s->m->n_vocab);
    /* the rows of every token read in parallel (a long prompt's while its first chunks run), not
     * faulted in one by one; a decode step has nothing to overlap */
    if (n > 1) hachi_forward_prefetch(s, tokens, n);
    for (int i = 0; i < n; i += s->n_batch) {
        int c = HACHI_MIN(s->n_batch, n - i);
        hachi_forward(s, tokens + i, c, logits_out ? logits_out + (size_t)i * s->m->n_vocab : NULL, i + c == n);
        if (s->progress && n > s->n_batch && !s->progress(s->progress_ctx, i + c, n)) {
            s->logits_pos = -1;
            return hachi_fail(HACHI_ERR_ABORTED, "eval stopped by its progress callback after %d of %d tokens", i + c, n);
        }
    }
    return HACHI_OK;
}

hachi_status hachi_session_eval_draft(hachi_session *s, const int32_t *tokens, int32_t n) {
    if (!s) return hachi_fail(HACHI_ERR_INVALID_ARG, "eval_draft: NULL session");
    if (!s->draft_pages)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "eval_draft: the session was created without a draft budget");
    s->drafting = true;
    hachi_status st = hachi_session_eval(s, tokens, n, NULL);
    s->drafting = false;
    return st;
}

int32_t hachi_session_draft_budget(const hachi_session *s) { return s ? s->draft_pages * HACHI_PAGE : 0; }
const float *hachi_session_logits(const hachi_session *s) {
    return s && s->logits_pos >= 0 && s->logits_pos == s->pos - 1 ? s->logits : NULL;
}

const float *hachi_session_hidden(const hachi_session *s, int pos) {
    if (!s || pos < s->hidden_lo || pos >= s->hidden_hi || pos >= s->pos) return NULL;
    return s->xn + (size_t)(pos - s->hidden_p0) * s->m->n_embd;
}
int32_t hachi_session_pos(const hachi_session *s) { return s ? s->pos : 0; }
int32_t hachi_session_n_ctx(const hachi_session *s) { return s ? s->n_ctx : 0; }
size_t hachi_session_plan_bytes(const hachi_session *s) { return s ? s->plan_bytes : 0; }

/* A layer whose heads all stream reads its sink and window; one with some streaming heads reads
 * what the others read, and (page-sparse) at most a window more. */
size_t hachi_session_kv_bytes_read(const hachi_session *s, int32_t depth) {
    size_t b = 0;
    depth = HACHI_MAX(depth, 0);
    for (int l = 0; s && l < s->m->n_layer; l++) {
        const hachi_layer_plan *lp = &s->lp[l];
        const int stream_keys = HACHI_MIN(depth, s->stream_sink + s->stream_window);
        if (all_stream(lp)) b += hachi_kv_bytes_keys(lp->kv, stream_keys);
        else b += hachi_kv_bytes_read(lp->kv, depth, lp->sparse_pages) +
                  (lp->stream && lp->sparse_pages ? hachi_kv_bytes_keys(lp->kv, HACHI_MIN(depth, s->stream_window)) : 0);
    }
    return b;
}

hachi_status hachi_session_rewind(hachi_session *s, int32_t pos) {
    if (!s) return hachi_fail(HACHI_ERR_INVALID_ARG, "rewind: NULL session");
    if (pos < 0 || pos > s->pos) return hachi_fail(HACHI_ERR_INVALID_ARG, "rewind to %d: outside [0, %d]", pos, s->pos);
    for (int i = 0; i < s->n_kv; i++)
        if (!hachi_kv_can_rewind(&s->kv[i], pos, s->pos))
            return hachi_fail(HACHI_ERR_INVALID_ARG,
                              "rewind by %d tokens: sliding-window rings keep only %d spare slots",
                              s->pos - pos, HACHI_SPEC_SLOTS);
    for (int i = 0; i < s->n_kv; i++) {   /* what the rings overwrote up to here stays gone (rewind to 0: all new) */
        hachi_kv_restored_from(&s->kv[i], HACHI_MIN(pos, hachi_kv_first(&s->kv[i], s->pos)));
        hachi_kv_rewound(&s->kv[i], pos);
    }
    s->pos = pos;
    return HACHI_OK;
}

void hachi_session_print_plan(const hachi_session *s, void *file) {
    FILE *f = file;
    if (!s || !f) return;
    const hachi_model *m = s->m;
    fprintf(f, "plan: context %d, batch %d, threads %d, kernels %s\n", s->n_ctx, s->n_batch,
            hachi_pool_size(s->pool), s->kern->name);
    fprintf(f, "  layer kind    window head_dim kv_owner chunk   kv_bytes\n");
    size_t kv_total = 0;
    for (int l = 0; l < m->n_layer; l++) {
        const hachi_layer_plan *lp = &s->lp[l];
        size_t bytes = 0;
        if (lp->owns_kv) {
            bytes = hachi_kv_bytes(lp->kv);
            kv_total += bytes;
        }
        fprintf(f, "  %5d %-7s %6d %8d %8d %5d %10zu%s", l, lp->sliding ? "sliding" : "full", lp->window,
                lp->head_dim, lp->kv_owner, lp->chunk + 1, bytes, lp->owns_kv ? "" : " (shared)");
        if (lp->stream) {
            fputs(" streaming heads ", f);
            for (int h = 0; h < lp->n_head; h++) fputc(lp->stream >> h & 1 ? 'S' : '.', f);
        }
        fputc('\n', f);
    }
    fprintf(f, "  kv plan by type (held and pending rows) at context %d:", s->n_ctx);
    for (int t = HACHI_KV_F16; t <= HACHI_KV_INT8; t++)
        fprintf(f, " %s %zu bytes", hachi_kv_type_name((hachi_kv_type)t),
                kv_plan_bytes(m, s->n_ctx, s->n_batch, (hachi_kv_type)t, s->sparse_pages > 0 || s->draft_pages > 0));
    fputc('\n', f);
    if (s->n_stream)
        fprintf(f, "  streaming heads: %d (sink %d, window %d)\n", s->n_stream, s->stream_sink, s->stream_window);
    fprintf(f, "  kv cache: %zu bytes (%s, %d caches); activations+scratch: %zu bytes; total plan: %zu bytes\n",
            kv_total, hachi_kv_type_name(s->kv_type), s->n_kv, s->plan_bytes - kv_total, s->plan_bytes);
}

hachi_status hachi_session_fill_synthetic(hachi_session *s, int32_t n, uint64_t seed) {
    if (!s || n < 0) return hachi_fail(HACHI_ERR_INVALID_ARG, "fill: bad arguments");
    n = HACHI_MIN(n, s->n_ctx - s->pos);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int c = 0; c < s->n_kv; c++) {
        hachi_kv_fill_fast(&s->kv[c], s->pos, n, &x);
        hachi_kv_rebuild_pages(&s->kv[c], s->pos + n);
    }
    s->pos += n;
    s->logits_pos = -1;
    s->hidden_lo = s->hidden_hi = 0;
    return HACHI_OK;
}

const hachi_profile *hachi_session_profile(const hachi_session *s) { return s ? &s->prof : NULL; }
const char *hachi_session_kernels(const hachi_session *s) { return s ? s->kern->name : ""; }
const hachi_model *hachi_session_model(const hachi_session *s) { return s ? s->m : NULL; }

void hachi_session_profile_reset(hachi_session *s) {
    if (!s) return;
    hachi_profile *p = &s->prof;
    p->emb_ms = p->ple_ms = p->head_ms = 0;
    memset(p->chunk_ms, 0, sizeof p->chunk_ms);
    memset(p->attn_ms, 0, sizeof p->attn_ms);
    memset(p->matmul_ms, 0, sizeof p->matmul_ms);
    p->steps = 0;
    p->tokens = 0;
}
