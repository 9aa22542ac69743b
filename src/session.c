/* session: the static plan (per-layer attention kind, window, KV source,
 * chunk; every buffer sized and allocated once) and the public eval API. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "session.h"
#include "util.h"

static const int modes[] = {2048, 4096, 8192, 16384, 32768};

hachi_session_params hachi_session_default_params(void) {
    hachi_session_params p = {.n_ctx = 2048, .n_threads = 0, .n_batch = 64, .chunks = NULL, .profile = false};
    return p;
}

/* Chunk bounds from "a,b,c" (or DESIGN.md's 8,15,25 scaled to the model's depth). */
static hachi_status plan_chunks(hachi_session *s, const char *spec) {
    hachi_profile *p = &s->prof;
    int L = s->m->n_layer, nb = 0, b[HACHI_MAX_CHUNKS];
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

hachi_status hachi_session_create(const hachi_model *m, const hachi_session_params *params, hachi_session **out) {
    hachi_session_params p = params ? *params : hachi_session_default_params();
    hachi_status st;
    if (!m || !out) return hachi_fail(HACHI_ERR_INVALID_ARG, "hachi_session_create: NULL argument");
    *out = NULL;
    if (!m->layers) return hachi_fail(HACHI_ERR_INVALID_ARG, "model '%s' was loaded vocab-only", m->path);
    if (p.n_ctx == 0) p.n_ctx = 2048;
    bool ok = false;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) ok |= p.n_ctx == modes[i];
    if (!ok) return hachi_fail(HACHI_ERR_INVALID_ARG, "context %d is not a context mode (2048, 4096, 8192, 16384, 32768)", p.n_ctx);
    if (p.n_threads < 0 || p.n_threads > 256) return hachi_fail(HACHI_ERR_INVALID_ARG, "threads %d out of range [1, 256]", p.n_threads);
    if (p.n_batch <= 0) p.n_batch = 64;
    if (p.n_batch > 512) return hachi_fail(HACHI_ERR_INVALID_ARG, "batch %d out of range [1, 512]", p.n_batch);
    if (m->n_head / m->n_head_kv > 64) return hachi_fail(HACHI_ERR_UNSUPPORTED, "more than 64 query heads per KV head");

    hachi_session *s = hachi_calloc(1, sizeof *s);
    if (!s) return HACHI_ERR_NOMEM;
    s->m = m;
    s->kern = m->kern;
    s->n_ctx = p.n_ctx;
    s->n_batch = HACHI_MIN(p.n_batch, p.n_ctx);
    s->profiling = p.profile;
    s->kv_f32 = p.kv_f32;
    if ((st = hachi_pool_create(p.n_threads ? p.n_threads : hachi_physical_cores(), &s->pool))) goto fail;
    int nth = hachi_pool_size(s->pool), nb = s->n_batch, L = m->n_layer;
    int E = m->n_embd, H = m->n_head, Hkv = m->n_head_kv;
    int hd_max = HACHI_MAX(m->head_dim_full, m->head_dim_swa), ff_max = 0, LP = L * m->n_embd_pl;

    /* per layer: kind, window, head dim, KV owner and its cache */
    ALLOC(s->lp, L);
    ALLOC(s->kv, L);
    for (int l = 0; l < L; l++) {
        const hachi_layer *ly = &m->layers[l];
        hachi_layer_plan *lp = &s->lp[l];
        lp->sliding = ly->sliding;
        lp->window = ly->sliding ? m->window : 0;
        lp->head_dim = ly->head_dim;
        lp->kv_owner = ly->kv_owner;
        ff_max = HACHI_MAX(ff_max, ly->n_ff);
        if (ly->kv_owner == l) {
            hachi_kv *kv = &s->kv[s->n_kv];
            kv->owner = l;
            kv->dim = Hkv * ly->head_dim;
            kv->ring = lp->window > 0 && lp->window + HACHI_SPEC_SLOTS < s->n_ctx;
            kv->n_slots = kv->ring ? lp->window + HACHI_SPEC_SLOTS : s->n_ctx;
            kv->row_bytes = (size_t)kv->dim * (s->kv_f32 ? 4 : 2);
            ALLOC(kv->k, (size_t)kv->n_slots * kv->row_bytes);
            ALLOC(kv->v, (size_t)kv->n_slots * kv->row_bytes);
            ALLOC(kv->kb, (size_t)nb * kv->row_bytes);
            ALLOC(kv->vb, (size_t)nb * kv->row_bytes);
            lp->kv_index = s->n_kv++;
        } else {
            lp->kv_index = s->lp[ly->kv_owner].kv_index;
        }
    }
    if ((st = plan_chunks(s, p.chunks))) goto fail;

    /* activations */
    ALLOC(s->x, (size_t)nb * E);
    ALLOC(s->xb, (size_t)nb * E);
    ALLOC(s->xb2, (size_t)nb * E);
    ALLOC(s->q, (size_t)nb * H * hd_max);
    ALLOC(s->att, (size_t)nb * H * hd_max);
    ALLOC(s->k, (size_t)nb * Hkv * hd_max);
    ALLOC(s->v, (size_t)nb * Hkv * hd_max);
    ALLOC(s->hb, (size_t)nb * HACHI_MAX(ff_max, LP));
    ALLOC(s->hb2, (size_t)nb * ff_max);
    if (LP) { ALLOC(s->ple, (size_t)nb * LP); ALLOC(s->plg, (size_t)nb * m->n_embd_pl); }
    ALLOC(s->logits, m->n_vocab);
    s->logits_pos = -1;
    s->scores_stride = (size_t)H * (s->n_ctx + hd_max);
    ALLOC(s->scores, (size_t)nth * s->scores_stride);
    ALLOC(s->partial, (size_t)HACHI_ATTN_GROUP * nth * H * (hd_max + 2));

    /* rope: inv_freq_i = base^(-2i/d) (/ rope_freqs[i] on full gemma4 layers) */
    for (int kind = 0; kind < 2; kind++) {
        int d = m->arch == HACHI_ARCH_LLAMA ? m->n_rot : kind ? m->head_dim_full : m->head_dim_swa;
        double base = kind ? m->rope_base : m->rope_base_swa;
        if (m->arch == HACHI_ARCH_LLAMA && kind == 0) continue;
        ALLOC(s->inv_freq[kind], d / 2);
        ALLOC(s->rope_cs[kind], (size_t)nb * d);
        for (int i = 0; i < d / 2; i++) {
            s->inv_freq[kind][i] = pow(base, -2.0 * i / d);
            if (kind && m->rope_freqs) s->inv_freq[kind][i] /= m->rope_freqs[i];
        }
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
    ALLOC(s->mm_scratch, scr);
    *out = s;
    return HACHI_OK;
fail:
    hachi_session_free(s);
    return st;
}

void hachi_session_free(hachi_session *s) {
    if (!s) return;
    if (s->kv)
        for (int i = 0; i < s->n_kv; i++) {
            hachi_free(s->kv[i].k); hachi_free(s->kv[i].v);
            hachi_free(s->kv[i].kb); hachi_free(s->kv[i].vb);
        }
    void *bufs[] = {s->lp, s->kv, s->x, s->xb, s->xb2, s->q, s->att, s->k, s->v, s->hb, s->hb2, s->ple,
                    s->plg, s->logits, s->scores, s->partial, s->inv_freq[0], s->inv_freq[1],
                    s->rope_cs[0], s->rope_cs[1], s->mm_scratch};
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
    for (int i = 0; i < n; i += s->n_batch) {
        int c = HACHI_MIN(s->n_batch, n - i);
        hachi_forward(s, tokens + i, c, logits_out ? logits_out + (size_t)i * s->m->n_vocab : NULL, i + c == n);
    }
    return HACHI_OK;
}

const float *hachi_session_logits(const hachi_session *s) { return s ? s->logits : NULL; }
int32_t hachi_session_pos(const hachi_session *s) { return s ? s->pos : 0; }
int32_t hachi_session_n_ctx(const hachi_session *s) { return s ? s->n_ctx : 0; }
size_t hachi_session_plan_bytes(const hachi_session *s) { return s ? s->plan_bytes : 0; }

hachi_status hachi_session_rewind(hachi_session *s, int32_t pos) {
    if (!s || pos < 0 || pos > s->pos) return hachi_fail(HACHI_ERR_INVALID_ARG, "rewind to %d: outside [0, %d]", pos, s ? s->pos : 0);
    /* after the rewind, every ring must still hold the window before pos: it keeps
     * positions [old_pos - n_slots, old_pos) */
    for (int i = 0; i < s->n_kv; i++) {
        const hachi_kv *kv = &s->kv[i];
        int window = s->lp[kv->owner].window;
        if (kv->ring && pos > 0 && HACHI_MAX(0, pos - window + 1) < HACHI_MAX(s->pos - kv->n_slots, kv->valid_from))
            return hachi_fail(HACHI_ERR_INVALID_ARG,
                              "rewind by %d tokens: sliding-window rings keep only %d spare slots",
                              s->pos - pos, HACHI_SPEC_SLOTS);
    }
    s->pos = pos;
    return HACHI_OK;
}

void hachi_session_print_plan(const hachi_session *s, void *file) {
    FILE *f = file;
    const hachi_model *m = s->m;
    fprintf(f, "plan: context %d, batch %d, threads %d, kernels %s\n", s->n_ctx, s->n_batch,
            hachi_pool_size(s->pool), s->kern->name);
    fprintf(f, "  layer kind    window head_dim kv_owner chunk   kv_bytes\n");
    size_t kv_total = 0;
    for (int l = 0; l < m->n_layer; l++) {
        const hachi_layer_plan *lp = &s->lp[l];
        size_t bytes = 0;
        if (lp->kv_owner == l) {
            const hachi_kv *kv = &s->kv[lp->kv_index];
            bytes = (size_t)kv->n_slots * kv->row_bytes * 2;
            kv_total += bytes;
        }
        fprintf(f, "  %5d %-7s %6d %8d %8d %5d %10zu%s\n", l, lp->sliding ? "sliding" : "full", lp->window,
                lp->head_dim, lp->kv_owner, lp->chunk + 1, bytes, lp->kv_owner == l ? "" : " (shared)");
    }
    fprintf(f, "  kv cache: %zu bytes (%s, %d caches); activations+scratch: %zu bytes; total plan: %zu bytes\n",
            kv_total, s->kv_f32 ? "f32" : "fp16", s->n_kv, s->plan_bytes - kv_total, s->plan_bytes);
}

void hachi_session_fill_fast(hachi_session *s, int n, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int c = 0; c < s->n_kv; c++) {
        hachi_kv *kv = &s->kv[c];
        for (int t = 0; t < n; t++) {
            int slot = kv->ring ? (s->pos + t) % kv->n_slots : s->pos + t;
            if (kv->ring && n - t > kv->n_slots) continue;   /* would be overwritten anyway */
            for (int i = 0; i < kv->dim; i++) {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                /* roughly unit-RMS values, as after the K/V RMSNorm */
                float a = ((int)(x & 0xffff) - 32768) / 18918.0f, b = ((int)((x >> 16) & 0xffff) - 32768) / 18918.0f;
                if (s->kv_f32) {
                    ((float *)(kv->k + slot * kv->row_bytes))[i] = a;
                    ((float *)(kv->v + slot * kv->row_bytes))[i] = b;
                } else {
                    ((uint16_t *)(kv->k + slot * kv->row_bytes))[i] = hachi_f32_to_f16(a);
                    ((uint16_t *)(kv->v + slot * kv->row_bytes))[i] = hachi_f32_to_f16(b);
                }
            }
        }
    }
    s->pos = HACHI_MIN(s->pos + n, s->n_ctx);
}

const hachi_profile *hachi_session_profile(const hachi_session *s) { return &s->prof; }

void hachi_session_profile_reset(hachi_session *s) {
    hachi_profile *p = &s->prof;
    p->emb_ms = p->ple_ms = p->head_ms = 0;
    memset(p->chunk_ms, 0, sizeof p->chunk_ms);
    memset(p->attn_ms, 0, sizeof p->attn_ms);
    p->steps = 0;
}
