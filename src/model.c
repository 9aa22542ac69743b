/* model: load a GGUF (mmap), read the architecture's hyperparameters and bind
 * every tensor with its shape checked. Missing tensors, inconsistent shapes and
 * tensor types hachi cannot run are named errors at load time. */
#include "model.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "kernels/kernels.h"
#include "threads.h"
#include "util.h"

typedef struct loader {
    hachi_model *m;
    char key[256];
} loader;

static const char *akey(loader *ld, const char *suffix) {
    snprintf(ld->key, sizeof ld->key, "%s.%s", ld->m->arch_name, suffix);
    return ld->key;
}

static hachi_status get_u32(loader *ld, const char *suffix, bool required, int *out) {
    uint32_t v;
    if (!hachi_gguf_get_u32(ld->m->gguf, akey(ld, suffix), &v)) {
        if (!required) return HACHI_OK;
        return hachi_fail(HACHI_ERR_FORMAT, "model '%s': missing or non-integer key '%s'",
                          ld->m->path, ld->key);
    }
    if (v > (1u << 30))
        return hachi_fail(HACHI_ERR_FORMAT, "model '%s': key '%s' = %u is out of range",
                          ld->m->path, ld->key, v);
    *out = (int)v;
    return HACHI_OK;
}

static void get_f32(loader *ld, const char *suffix, float *out) {
    hachi_gguf_get_f32(ld->m->gguf, akey(ld, suffix), out);
}

/* t's shape as "[ne0, ne1, ...]" (its n_dims) */
static const char *shape_str(const hachi_gguf_tensor *t, char buf[96]) {
    int k = snprintf(buf, 96, "[%lld", (long long)t->ne[0]);
    for (int d = 1; d < (int)t->n_dims && d < 4; d++) k += snprintf(buf + k, (size_t)(96 - k), ", %lld", (long long)t->ne[d]);
    snprintf(buf + k, (size_t)(96 - k), "]");
    return buf;
}

/* Bind a matrix [rows][cols]; rows/cols < 0 accept any (and return it). Dimensions past the
 * second must be 1 (a writer may keep them, as ggml's 4-D shapes). */
static hachi_status bind_mat(loader *ld, hachi_mat *dst, const char *name, int64_t cols, int64_t rows,
                             bool required) {
    hachi_model *m = ld->m;
    const hachi_gguf_tensor *t = hachi_gguf_find_tensor(m->gguf, name);
    memset(dst, 0, sizeof *dst);
    if (!t) {
        if (!required) return HACHI_OK;
        return hachi_fail(HACHI_ERR_FORMAT, "model '%s': missing tensor '%s'", m->path, name);
    }
    if (t->ne[2] != 1 || t->ne[3] != 1 || (cols >= 0 && t->ne[0] != cols) || (rows >= 0 && t->ne[1] != rows)) {
        char sh[96];
        return hachi_fail(HACHI_ERR_FORMAT, "model '%s': tensor '%s' has shape %s, expected [%lld, %lld]", m->path, name,
                          shape_str(t, sh), (long long)cols, (long long)rows);
    }
    if (t->type >= HACHI_TYPE_COUNT || !m->kern->t[t->type].vec_dot)
        return hachi_fail(HACHI_ERR_UNSUPPORTED,
                          "model '%s': tensor '%s' has type %s, which hachi cannot run",
                          m->path, name, hachi_type_name(t->type));
    dst->type = t->type;
    dst->cols = t->ne[0];
    dst->rows = t->ne[1];
    dst->data = t->data;
    dst->row_bytes = hachi_row_size(t->type, t->ne[0]);
    return HACHI_OK;
}

/* Copy a 1-D tensor of n values into an owned f32 array. */
static hachi_status bind_vec(loader *ld, float **dst, const char *name, int64_t n, bool required) {
    hachi_model *m = ld->m;
    const hachi_gguf_tensor *t = hachi_gguf_find_tensor(m->gguf, name);
    *dst = NULL;
    if (!t) {
        if (!required) return HACHI_OK;
        return hachi_fail(HACHI_ERR_FORMAT, "model '%s': missing tensor '%s'", m->path, name);
    }
    if (t->ne[0] != n || t->ne[1] * t->ne[2] * t->ne[3] != 1) {
        char sh[96];
        return hachi_fail(HACHI_ERR_FORMAT, "model '%s': tensor '%s' has shape %s, expected [%lld]", m->path, name,
                          shape_str(t, sh), (long long)n);
    }
    if (t->type >= HACHI_TYPE_COUNT || !m->kern->t[t->type].to_float)
        return hachi_fail(HACHI_ERR_UNSUPPORTED, "model '%s': tensor '%s' has type %s, which hachi cannot read",
                          m->path, name, hachi_type_name(t->type));
    if (!(*dst = hachi_malloc((size_t)n * sizeof(float)))) return HACHI_ERR_NOMEM;
    m->kern->t[t->type].to_float(t->data, *dst, n);
    return HACHI_OK;
}

#define TRY(x) do { hachi_status st_ = (x); if (st_ != HACHI_OK) return st_; } while (0)

static hachi_status load_llama(loader *ld) {
    hachi_model *m = ld->m;
    char name[128];
    m->n_head_kv = m->n_head;
    TRY(get_u32(ld, "attention.head_count_kv", false, &m->n_head_kv));
    if (m->n_head <= 0 || m->n_embd % m->n_head || m->n_head_kv <= 0 || m->n_head % m->n_head_kv)
        return hachi_fail(HACHI_ERR_FORMAT, "model '%s': inconsistent heads (n_embd %d, heads %d, kv heads %d)",
                          m->path, m->n_embd, m->n_head, m->n_head_kv);
    int hd = m->n_embd / m->n_head, n_ff = 0;
    m->head_dim_full = m->head_dim_swa = hd;
    m->n_rot = hd;
    TRY(get_u32(ld, "rope.dimension_count", false, &m->n_rot));
    TRY(get_u32(ld, "feed_forward_length", true, &n_ff));
    if (m->n_rot > hd || m->n_rot % 2)
        return hachi_fail(HACHI_ERR_FORMAT, "model '%s': rope.dimension_count %d invalid for head dim %d",
                          m->path, m->n_rot, hd);
    m->rms_eps = 1e-5f;
    m->rope_base = 10000.0f;
    get_f32(ld, "attention.layer_norm_rms_epsilon", &m->rms_eps);
    get_f32(ld, "rope.freq_base", &m->rope_base);
    m->rope_base_swa = m->rope_base;
    m->attn_scale = 1.0f / sqrtf((float)hd);
    m->rope_neox = false;
    for (int l = 0; l < m->n_layer; l++) {
        hachi_layer *L = &m->layers[l];
        L->head_dim = hd;
        L->n_ff = n_ff;
        L->kv_owner = l;
        L->out_scale = 1.0f;
#define LN(s) (snprintf(name, sizeof name, "blk.%d." s, l), name)
        TRY(bind_mat(ld, &L->wq, LN("attn_q.weight"), m->n_embd, m->n_head * hd, true));
        TRY(bind_mat(ld, &L->wk, LN("attn_k.weight"), m->n_embd, m->n_head_kv * hd, true));
        TRY(bind_mat(ld, &L->wv, LN("attn_v.weight"), m->n_embd, m->n_head_kv * hd, true));
        TRY(bind_mat(ld, &L->wo, LN("attn_output.weight"), m->n_head * hd, m->n_embd, true));
        TRY(bind_mat(ld, &L->w_gate, LN("ffn_gate.weight"), m->n_embd, n_ff, true));
        TRY(bind_mat(ld, &L->w_up, LN("ffn_up.weight"), m->n_embd, n_ff, true));
        TRY(bind_mat(ld, &L->w_down, LN("ffn_down.weight"), n_ff, m->n_embd, true));
        TRY(bind_vec(ld, &L->attn_norm, LN("attn_norm.weight"), m->n_embd, true));
        TRY(bind_vec(ld, &L->ffn_norm, LN("ffn_norm.weight"), m->n_embd, true));
#undef LN
    }
    return HACHI_OK;
}

/* A gemma4-assistant's input and output beyond the layers: the projections from and back to
 * the target's width, and the optional centroid head (masked_embd_centroids: a score per
 * cluster of n_vocab / n_centroids tokens; masked_embd_ordering: the token ids cluster by
 * cluster, I32). */
static hachi_status load_assistant_io(loader *ld) {
    hachi_model *m = ld->m;
    TRY(get_u32(ld, "embedding_length_out", true, &m->n_embd_out));
    if (m->n_embd_out <= 0)
        return hachi_fail(HACHI_ERR_FORMAT, "model '%s': embedding_length_out %d invalid", m->path, m->n_embd_out);
    TRY(bind_mat(ld, &m->nextn_pre, "nextn.pre_projection.weight", 2 * (int64_t)m->n_embd_out, m->n_embd, true));
    TRY(bind_mat(ld, &m->nextn_post, "nextn.post_projection.weight", m->n_embd, m->n_embd_out, true));
    TRY(bind_mat(ld, &m->centroids, "masked_embd_centroids.weight", m->n_embd, -1, false));
    if (!m->centroids.data) return HACHI_OK;
    const hachi_gguf_tensor *t = hachi_gguf_find_tensor(m->gguf, "masked_embd_ordering");
    m->n_centroids = (int)m->centroids.rows;
    m->centroid_top_k = 32;
    TRY(get_u32(ld, "centroid_top_k", false, &m->centroid_top_k));
    if (!t || t->type != HACHI_TYPE_I32 || t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3] != m->n_vocab)
        return hachi_fail(HACHI_ERR_FORMAT, "model '%s': masked_embd_centroids needs masked_embd_ordering, "
                          "%d I32 token ids", m->path, m->n_vocab);
    if (m->n_centroids < 1 || m->n_vocab % m->n_centroids || m->centroid_top_k < 1 ||
        m->centroid_top_k > m->n_centroids)
        return hachi_fail(HACHI_ERR_FORMAT, "model '%s': %d centroids (top %d) do not split %d tokens evenly",
                          m->path, m->n_centroids, m->centroid_top_k, m->n_vocab);
    if (!(m->ordering = hachi_malloc((size_t)m->n_vocab * sizeof *m->ordering))) return HACHI_ERR_NOMEM;
    memcpy(m->ordering, t->data, (size_t)m->n_vocab * sizeof *m->ordering);
    /* each token in exactly one cluster: a permutation (a repeated id would leave tokens that no
     * draft step can score) */
    uint8_t *seen = hachi_calloc((size_t)m->n_vocab, 1);
    if (!seen) return HACHI_ERR_NOMEM;
    hachi_status st = HACHI_OK;
    for (int i = 0; i < m->n_vocab && !st; i++) {
        const int32_t id = m->ordering[i];
        if (id < 0 || id >= m->n_vocab)
            st = hachi_fail(HACHI_ERR_FORMAT, "model '%s': masked_embd_ordering[%d] = %d is not a token id", m->path, i, (int)id);
        else if (seen[id]++)
            st = hachi_fail(HACHI_ERR_FORMAT, "model '%s': masked_embd_ordering[%d] = %d: token %d appears twice",
                            m->path, i, (int)id, (int)id);
    }
    hachi_free(seen);
    return st;
}

/* gemma4 and gemma4-assistant share the layer layout; an assistant's layers have no K/V of
 * their own (they read the target's caches, mtp.c), so every layer is KV-shared. */
static hachi_status load_gemma4(loader *ld) {
    hachi_model *m = ld->m;
    const hachi_gguf *g = m->gguf;
    const bool assistant = m->arch == HACHI_ARCH_GEMMA4_ASSISTANT;
    char name[128];
    m->n_head_kv = 1;
    TRY(get_u32(ld, "attention.head_count_kv", false, &m->n_head_kv));
    TRY(get_u32(ld, "attention.key_length", true, &m->head_dim_full));
    TRY(get_u32(ld, "attention.key_length_swa", true, &m->head_dim_swa));
    TRY(get_u32(ld, "attention.sliding_window", true, &m->window));
    TRY(get_u32(ld, "attention.shared_kv_layers", false, &m->n_shared_kv));
    TRY(get_u32(ld, "embedding_length_per_layer_input", false, &m->n_embd_pl));
    int vl = m->head_dim_full, vl_swa = m->head_dim_swa;
    TRY(get_u32(ld, "attention.value_length", false, &vl));
    TRY(get_u32(ld, "attention.value_length_swa", false, &vl_swa));
    if (vl != m->head_dim_full || vl_swa != m->head_dim_swa)
        return hachi_fail(HACHI_ERR_UNSUPPORTED, "model '%s': value_length differs from key_length", m->path);
    if (m->n_head <= 0 || m->n_head_kv <= 0 || m->n_head % m->n_head_kv || m->head_dim_full <= 0 ||
        m->head_dim_swa <= 0 || m->head_dim_full % 2 || m->head_dim_swa % 2 || m->window <= 0 ||
        (m->n_shared_kv >= m->n_layer && !assistant))
        return hachi_fail(HACHI_ERR_FORMAT, "model '%s': inconsistent gemma4 attention hyperparameters: head_count %d, "
                          "head_count_kv %d (a divisor of head_count), key_length %d and key_length_swa %d (even, > 0), "
                          "sliding_window %d (> 0), shared_kv_layers %d (< %d layers)", m->path, m->n_head, m->n_head_kv,
                          m->head_dim_full, m->head_dim_swa, m->window, m->n_shared_kv, m->n_layer);
    m->rms_eps = 1e-6f;
    m->rope_base = 1e6f;
    m->rope_base_swa = 1e4f;
    m->softcap = 0.0f;
    get_f32(ld, "attention.layer_norm_rms_epsilon", &m->rms_eps);
    get_f32(ld, "rope.freq_base", &m->rope_base);
    get_f32(ld, "rope.freq_base_swa", &m->rope_base_swa);
    get_f32(ld, "final_logit_softcapping", &m->softcap);
    m->attn_scale = 1.0f;
    m->rope_neox = true;
    m->n_rot = m->head_dim_full;

    const hachi_gguf_value *pat = hachi_gguf_get(g, akey(ld, "attention.sliding_window_pattern"));
    const hachi_gguf_value *ffl = hachi_gguf_get(g, akey(ld, "feed_forward_length"));
    if (!pat || pat->type != HACHI_GGUF_ARRAY || pat->arr.n != (uint64_t)m->n_layer)
        return hachi_fail(HACHI_ERR_FORMAT, "model '%s': '%s.attention.sliding_window_pattern' must be a bool array of %d",
                          m->path, m->arch_name, m->n_layer);
    int n_ff_scalar = 0;
    if (!ffl) return hachi_fail(HACHI_ERR_FORMAT, "model '%s': missing '%s.feed_forward_length'", m->path, m->arch_name);
    if (ffl->type != HACHI_GGUF_ARRAY) TRY(get_u32(ld, "feed_forward_length", true, &n_ff_scalar));
    else if (ffl->arr.n != (uint64_t)m->n_layer)
        return hachi_fail(HACHI_ERR_FORMAT, "model '%s': feed_forward_length has %llu entries, expected %d",
                          m->path, (unsigned long long)ffl->arr.n, m->n_layer);

    TRY(bind_vec(ld, &m->rope_freqs, "rope_freqs.weight", m->head_dim_full / 2, false));
    int n_own = m->n_layer - m->n_shared_kv;
    int last_own_swa = -1, last_own_full = -1;
    for (int l = 0; l < m->n_layer; l++) {
        hachi_layer *L = &m->layers[l];
        bool sl;
        int64_t ff = n_ff_scalar;
        if (!hachi_gguf_arr_bool(pat, l, &sl))
            return hachi_fail(HACHI_ERR_FORMAT, "model '%s': sliding_window_pattern[%d] is not a bool", m->path, l);
        if (ffl->type == HACHI_GGUF_ARRAY && (!hachi_gguf_arr_i64(ffl, l, &ff) || ff <= 0 || ff > (1 << 24)))
            return hachi_fail(HACHI_ERR_FORMAT, "model '%s': feed_forward_length[%d] invalid", m->path, l);
        L->sliding = sl;
        L->head_dim = sl ? m->head_dim_swa : m->head_dim_full;
        L->n_ff = (int)ff;
        L->out_scale = 1.0f;
        if (assistant) {
            L->kv_owner = -1;
        } else if (l < n_own) {
            L->kv_owner = l;
            if (sl) last_own_swa = l; else last_own_full = l;
        } else {
            L->kv_owner = sl ? last_own_swa : last_own_full;
            if (L->kv_owner < 0)
                return hachi_fail(HACHI_ERR_FORMAT, "model '%s': shared layer %d has no earlier %s layer owning a KV cache",
                                  m->path, l, sl ? "sliding" : "full");
        }
        int hd = L->head_dim;
        bool own = !assistant && L->kv_owner == l;
#define LN(s) (snprintf(name, sizeof name, "blk.%d." s, l), name)
        TRY(bind_vec(ld, &L->attn_norm, LN("attn_norm.weight"), m->n_embd, true));
        TRY(bind_mat(ld, &L->wq, LN("attn_q.weight"), m->n_embd, (int64_t)m->n_head * hd, true));
        TRY(bind_vec(ld, &L->q_norm, LN("attn_q_norm.weight"), hd, true));
        if (own) {
            TRY(bind_mat(ld, &L->wk, LN("attn_k.weight"), m->n_embd, (int64_t)m->n_head_kv * hd, true));
            TRY(bind_mat(ld, &L->wv, LN("attn_v.weight"), m->n_embd, (int64_t)m->n_head_kv * hd, false));
            TRY(bind_vec(ld, &L->k_norm, LN("attn_k_norm.weight"), hd, true));
        }
        TRY(bind_mat(ld, &L->wo, LN("attn_output.weight"), (int64_t)m->n_head * hd, m->n_embd, true));
        TRY(bind_vec(ld, &L->post_attn_norm, LN("post_attention_norm.weight"), m->n_embd, true));
        TRY(bind_vec(ld, &L->ffn_norm, LN("ffn_norm.weight"), m->n_embd, true));
        TRY(bind_mat(ld, &L->w_gate, LN("ffn_gate.weight"), m->n_embd, ff, true));
        TRY(bind_mat(ld, &L->w_up, LN("ffn_up.weight"), m->n_embd, ff, true));
        TRY(bind_mat(ld, &L->w_down, LN("ffn_down.weight"), ff, m->n_embd, true));
        TRY(bind_vec(ld, &L->post_ffw_norm, LN("post_ffw_norm.weight"), m->n_embd, true));
        if (m->n_embd_pl > 0) {
            TRY(bind_mat(ld, &L->inp_gate, LN("inp_gate.weight"), m->n_embd, m->n_embd_pl, true));
            TRY(bind_mat(ld, &L->proj, LN("proj.weight"), m->n_embd_pl, m->n_embd, true));
            TRY(bind_vec(ld, &L->post_norm, LN("post_norm.weight"), m->n_embd, true));
        }
        float *scale = NULL;
        TRY(bind_vec(ld, &scale, LN("layer_output_scale.weight"), 1, false));
        if (scale) { L->out_scale = scale[0]; hachi_free(scale); }
#undef LN
    }
    if (m->n_embd_pl > 0) {
        int64_t w = (int64_t)m->n_layer * m->n_embd_pl;
        TRY(bind_mat(ld, &m->pl_tok_embd, "per_layer_token_embd.weight", w, m->n_vocab, true));
        TRY(bind_mat(ld, &m->pl_model_proj, "per_layer_model_proj.weight", m->n_embd, w, true));
        TRY(bind_vec(ld, &m->pl_proj_norm, "per_layer_proj_norm.weight", m->n_embd_pl, true));
    }
    return assistant ? load_assistant_io(ld) : HACHI_OK;
}

hachi_model_params hachi_model_default_params(void) {
    hachi_model_params p = {0};
    return p;
}

static hachi_status load(hachi_model *m, const hachi_model_params *p) {
    loader ld = {.m = m};
    hachi_gguf_str arch;
    TRY(hachi_tokenizer_load(m->gguf, &m->tok));
    m->n_vocab = hachi_tokenizer_n_vocab(m->tok);
    if (!hachi_gguf_get_str(m->gguf, "general.architecture", &arch)) {
        if (p->vocab_only) { snprintf(m->arch_name, sizeof m->arch_name, "none"); return HACHI_OK; }
        return hachi_fail(HACHI_ERR_FORMAT, "model '%s': missing key 'general.architecture'", m->path);
    }
    snprintf(m->arch_name, sizeof m->arch_name, "%.*s", (int)HACHI_MIN(arch.len, 31), arch.ptr);
    if (p->vocab_only) return HACHI_OK;
    if (hachi_gguf_str_eq(arch, "llama")) m->arch = HACHI_ARCH_LLAMA;
    else if (hachi_gguf_str_eq(arch, "gemma4")) m->arch = HACHI_ARCH_GEMMA4;
    else if (hachi_gguf_str_eq(arch, "gemma4-assistant")) m->arch = HACHI_ARCH_GEMMA4_ASSISTANT;
    else return hachi_fail(HACHI_ERR_UNSUPPORTED, "model '%s': architecture '%s' is not supported (hachi runs gemma4, "
                           "llama and gemma4-assistant drafters)",
                           m->path, m->arch_name);

    TRY(get_u32(&ld, "block_count", true, &m->n_layer));
    TRY(get_u32(&ld, "embedding_length", true, &m->n_embd));
    TRY(get_u32(&ld, "attention.head_count", true, &m->n_head));
    m->n_ctx_train = 2048;
    TRY(get_u32(&ld, "context_length", false, &m->n_ctx_train));
    if (m->n_layer <= 0 || m->n_layer > HACHI_LAYERS_MAX || m->n_embd <= 0)
        return hachi_fail(HACHI_ERR_FORMAT, "model '%s': invalid block_count %d or embedding_length %d",
                          m->path, m->n_layer, m->n_embd);
    if (!(m->layers = hachi_calloc((size_t)m->n_layer, sizeof *m->layers))) return HACHI_ERR_NOMEM;

    TRY(bind_mat(&ld, &m->tok_embd, "token_embd.weight", m->n_embd, m->n_vocab, true));
    TRY(bind_vec(&ld, &m->output_norm, "output_norm.weight", m->n_embd, true));
    TRY(bind_mat(&ld, &m->output, "output.weight", m->n_embd, m->n_vocab, false));
    if (!m->output.data) m->output = m->tok_embd;
    TRY(m->arch == HACHI_ARCH_LLAMA ? load_llama(&ld) : load_gemma4(&ld));

    /* bytes of weights read per decoded token */
    size_t b = m->output.rows * m->output.row_bytes;
    if (m->pl_model_proj.data) b += m->pl_model_proj.rows * m->pl_model_proj.row_bytes;
    if (m->nextn_pre.data) b += m->nextn_pre.rows * m->nextn_pre.row_bytes + m->nextn_post.rows * m->nextn_post.row_bytes;
    for (int l = 0; l < m->n_layer; l++) {
        const hachi_layer *L = &m->layers[l];
        const hachi_mat *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down,
                                   &L->inp_gate, &L->proj};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
            if (mats[i]->data && (L->kv_owner == l || (mats[i] != &L->wk && mats[i] != &L->wv)))
                b += mats[i]->rows * mats[i]->row_bytes;
    }
    m->weight_bytes = b;
    return HACHI_OK;
}

/* Drop this process's pages of [p, p + n) of the read-only file mapping (whole pages inside
 * the range only): they are re-read from the file if ever touched again. */
static void release_file_pages(const void *p, size_t n) {
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + pg - 1) / pg * pg, b = ((uintptr_t)p + n) / pg * pg;
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);   // NOLINT(performance-no-int-to-ptr): page rounding is integer arithmetic
}

/* Interleave every matrix matmul alone reads (not the embedding tables, whose rows are
 * looked up) 8 rows by 8 when the kernels have an x8 kernel for its type: one anonymous
 * mapping (transparent huge pages where the system allows: fewer TLB misses on the weight
 * stream), made read-only afterwards. Resident memory stays about the file's: the copies
 * replace the file pages they came from (when the mapping cannot be had, nothing is
 * repacked). The work (mostly the kernel zeroing the new pages) is split over a pool of the
 * physical cores. */
typedef struct repack_job { hachi_mat *mat; char *dst; } repack_job;

static void repack_task(void *ctx, int ith, int nth) {
    const repack_job *j = ctx;
    int64_t g0, g1;
    hachi_split(j->mat->rows / 8, 1, ith, nth, &g0, &g1);
    hachi_mat_to_x8_groups(j->mat, j->dst, g0, g1);
    const uint64_t gb = 8 * j->mat->row_bytes;   /* release as we go: the peak stays low */
    release_file_pages((const char *)j->mat->data + g0 * gb, (size_t)((g1 - g0) * gb));
}

static hachi_status repack(hachi_model *m, const hachi_model_params *params) {
    int n = 0, cap = m->n_layer * 9 + 2;
    hachi_mat **list = hachi_calloc((size_t)cap, sizeof *list);   // NOLINT(bugprone-sizeof-expression): an array of pointers
    char **dst = hachi_calloc((size_t)cap, sizeof *dst);
    hachi_pool *pool = NULL;
    hachi_status st = list && dst ? hachi_pool_create(hachi_physical_cores(), &pool) : HACHI_ERR_NOMEM;
    if (st != HACHI_OK) goto out;
    for (int l = 0; l < m->n_layer; l++) {
        hachi_layer *L = &m->layers[l];
        hachi_mat *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down, &L->inp_gate, &L->proj};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
            if ((L->kv_owner == l || (mats[i] != &L->wk && mats[i] != &L->wv)) && hachi_mat_x8_bytes(m->kern, mats[i]))
                list[n++] = mats[i];
    }
    if (hachi_mat_x8_bytes(m->kern, &m->pl_model_proj)) list[n++] = &m->pl_model_proj;
    /* the output head (tied or not): its rows are looked up too when tied, through
     * hachi_mat_row, which reads the interleaved layout */
    if (hachi_mat_x8_bytes(m->kern, &m->output)) list[n++] = &m->output;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (hachi_mat_x8_bytes(m->kern, list[i]) + 63) / 64 * 64;
    if (!total) goto out;
    char *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) goto out;   /* no memory for the copies: the file's layout runs as it is */
#ifdef MADV_HUGEPAGE
    madvise(p, total, MADV_HUGEPAGE);
#endif
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        dst[i] = p + off;
        off += (hachi_mat_x8_bytes(m->kern, list[i]) + 63) / 64 * 64;
    }
    size_t done = 0;
    for (int i = 0; i < n; i++) {   /* one matrix per run: progress between them */
        repack_job job = {list[i], dst[i]};
        hachi_pool_run(pool, repack_task, &job);
        done += (hachi_mat_x8_bytes(m->kern, list[i]) + 63) / 64 * 64;
        if (params->progress && !params->progress(params->progress_ctx, (double)done, (double)total)) {
            munmap(p, total);
            st = hachi_fail(HACHI_ERR_ABORTED, "load of '%s' stopped by its progress callback", m->path);
            goto out;
        }
    }
    const bool tied = m->output.data == m->tok_embd.data;
    for (int i = 0; i < n; i++) {
        release_file_pages(list[i]->data, hachi_mat_x8_bytes(m->kern, list[i]));   /* the slices' edges */
        list[i]->data = dst[i];
        list[i]->x8 = true;
    }
    if (tied) m->tok_embd = m->output;
    mprotect(p, total, PROT_READ);
    m->x8 = p;
    m->x8_bytes = total;
out:
    hachi_pool_free(pool);
    hachi_free(list);
    hachi_free(dst);
    return st;
}

/* The tables whose rows are looked up one token at a time and stay in the file (E2B's per-layer
 * embeddings: 1.9 GB of Q6_K, a 7 KB row a token; the token embeddings when not interleaved) are
 * read into the page cache in the background when they take at most a quarter of the memory the
 * system has available: else each new token's rows come from the disk in the middle of its decode
 * step (5-6 ms a token on this project's VMs, 10% of an E2B step). A small machine leaves them on
 * its flash and reads rows as tokens need them, as the per-layer embeddings are designed for. */
#define READ_AHEAD_CHUNK ((size_t)2 << 20)
static void *read_ahead_main(void *arg) {
    hachi_model *m = arg;
    if (hachi_mat_read_ahead(&m->pl_tok_embd, READ_AHEAD_CHUNK, &m->stop_read_ahead))
        hachi_mat_read_ahead(&m->tok_embd, READ_AHEAD_CHUNK, &m->stop_read_ahead);
    return NULL;
}
static void read_ahead_tables(hachi_model *m) {
    const hachi_mat *t[2] = {&m->pl_tok_embd, &m->tok_embd};
    size_t bytes = 0;
    for (int i = 0; i < 2; i++)
        if (t[i]->data && !t[i]->x8) bytes += (size_t)(t[i]->rows * t[i]->row_bytes);
    const size_t avail = hachi_mem_available();
    if (!bytes || !avail || bytes > avail / 4) return;
    atomic_init(&m->stop_read_ahead, false);
    m->reading_ahead = pthread_create(&m->read_ahead, NULL, read_ahead_main, m) == 0;
}

hachi_status hachi_model_load(const char *path, const hachi_model_params *params, hachi_model **out) {
    hachi_model_params def = hachi_model_default_params();
    hachi_status st;
    if (!out || !path) return hachi_fail(HACHI_ERR_INVALID_ARG, "hachi_model_load: NULL argument");
    *out = NULL;
    hachi_model *m = hachi_calloc(1, sizeof *m);
    if (!m) return HACHI_ERR_NOMEM;
    snprintf(m->path, sizeof m->path, "%s", path);
    m->kern = hachi_kernels_best();
    st = hachi_gguf_open(path, &m->gguf);
    if (!params) params = &def;
    if (st == HACHI_OK) st = load(m, params);
    if (st == HACHI_OK && m->layers && !params->no_repack) st = repack(m, params);
    if (st != HACHI_OK) { hachi_model_free(m); return st; }
    if (m->layers) read_ahead_tables(m);
    *out = m;
    return HACHI_OK;
}

void hachi_model_free(hachi_model *m) {
    if (!m) return;
    if (m->reading_ahead) {   /* before the mapping it reads goes */
        atomic_store(&m->stop_read_ahead, true);
        pthread_join(m->read_ahead, NULL);
    }
    if (m->layers) {
        for (int l = 0; l < m->n_layer; l++) {
            hachi_layer *L = &m->layers[l];
            float *vecs[] = {L->attn_norm, L->q_norm, L->k_norm, L->post_attn_norm, L->ffn_norm,
                             L->post_ffw_norm, L->post_norm};
            for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++) hachi_free(vecs[i]);
        }
        hachi_free(m->layers);
    }
    hachi_free(m->rope_freqs);
    hachi_free(m->output_norm);
    hachi_free(m->pl_proj_norm);
    hachi_free(m->ordering);
    if (m->x8) munmap(m->x8, m->x8_bytes);
    hachi_tokenizer_free(m->tok);
    hachi_gguf_free(m->gguf);
    hachi_free(m);
}

const hachi_tokenizer *hachi_model_tokenizer(const hachi_model *m) { return m ? m->tok : NULL; }
const hachi_gguf *hachi_model_gguf(const hachi_model *m) { return m ? m->gguf : NULL; }
const char *hachi_model_arch(const hachi_model *m) { return m ? m->arch_name : ""; }
int32_t hachi_model_n_vocab(const hachi_model *m) { return m ? m->n_vocab : 0; }
int32_t hachi_model_n_ctx_train(const hachi_model *m) { return m ? m->n_ctx_train : 0; }
int32_t hachi_model_n_layer(const hachi_model *m) { return m ? m->n_layer : 0; }
int32_t hachi_model_n_head(const hachi_model *m) { return m ? m->n_head : 0; }
bool hachi_model_layer_sliding(const hachi_model *m, int32_t l) {
    return m && m->layers && l >= 0 && l < m->n_layer && m->layers[l].sliding;
}
size_t hachi_model_file_bytes(const hachi_model *m) { return m ? (size_t)hachi_gguf_file_size(m->gguf) : 0; }
size_t hachi_model_weight_bytes(const hachi_model *m) { return m ? m->weight_bytes : 0; }
size_t hachi_model_repacked_bytes(const hachi_model *m) { return m ? m->x8_bytes : 0; }
int32_t hachi_model_file_type(const hachi_model *m) {
    int64_t ft = -1;
    return m && hachi_gguf_get_i64(m->gguf, "general.file_type", &ft) ? (int32_t)ft : -1;
}
int32_t hachi_model_bos(const hachi_model *m) { return m ? hachi_tokenizer_bos(m->tok) : -1; }
int32_t hachi_model_eos(const hachi_model *m) { return m ? hachi_tokenizer_eos(m->tok) : -1; }
bool hachi_model_is_eog(const hachi_model *m, int32_t t) { return m && hachi_tokenizer_is_eog(m->tok, t); }

void hachi_model_print_info(const hachi_model *m, void *file) {
    FILE *f = file;
    if (!m || !f) return;
    const hachi_gguf *g = m->gguf;
    hachi_gguf_str tm = {"?", 1};
    hachi_gguf_get_str(g, "tokenizer.ggml.model", &tm);
    fprintf(f, "file:          %s (GGUF v%u, %zu bytes)\n", m->path, hachi_gguf_version(g), hachi_gguf_file_size(g));
    fprintf(f, "architecture:  %s\n", m->arch_name);
    fprintf(f, "model id:      %016llx (what prompt caches and heads files are checked against)\n",
            (unsigned long long)hachi_model_id(m));
    fprintf(f, "tokenizer:     %.*s, %d tokens, bos %d, eos %d\n", (int)tm.len, tm.ptr, m->n_vocab,
            hachi_tokenizer_bos(m->tok), hachi_tokenizer_eos(m->tok));
    if (m->layers) {
        fprintf(f, "layers:        %d\nembedding:     %d\nheads:         %d (kv heads %d)\n",
                m->n_layer, m->n_embd, m->n_head, m->n_head_kv);
        fprintf(f, "head dim:      %d", m->head_dim_full);
        if (m->arch != HACHI_ARCH_LLAMA) fprintf(f, " full, %d sliding (window %d)", m->head_dim_swa, m->window);
        fprintf(f, "\ncontext train: %d\nrope:          %s, base %g", m->n_ctx_train,
                m->rope_neox ? "neox" : "normal", m->rope_base);
        if (m->arch != HACHI_ARCH_LLAMA)
            fprintf(f, " (sliding %g)%s", m->rope_base_swa, m->rope_freqs ? ", proportional rope_freqs" : "");
        fprintf(f, "\nrms eps:       %g\n", m->rms_eps);
        if (m->arch != HACHI_ARCH_LLAMA)
            fprintf(f, "kv shared:     last %d layers\nper-layer in:  %d\nsoftcap:       %g\n",
                    m->n_shared_kv, m->n_embd_pl, m->softcap);
        if (m->arch == HACHI_ARCH_GEMMA4_ASSISTANT) {
            fprintf(f, "drafter for:   a gemma4 target of width %d (reads its last sliding and full caches)\n", m->n_embd_out);
            if (m->centroids.data) fprintf(f, "centroid head: %d clusters, top %d\n", m->n_centroids, m->centroid_top_k);
            else fprintf(f, "centroid head: none (dense head over %d tokens)\n", m->n_vocab);
        }
        fprintf(f, "output:        %s\nweights/token: %.1f MB\n", m->output.data == m->tok_embd.data ? "tied" : "separate",
                m->weight_bytes / 1e6);
        fprintf(f, "repacked:      %.1f MB interleaved 8 rows by 8 (%s kernels)\n", m->x8_bytes / 1e6, m->kern->name);
    }
    fprintf(f, "tensors:       %lld\n", (long long)hachi_gguf_n_tensors(g));
    for (int64_t i = 0; i < hachi_gguf_n_tensors(g); i++) {
        const hachi_gguf_tensor *t = hachi_gguf_tensor_at(g, i);
        char shape[96];
        int n = snprintf(shape, sizeof shape, "[%lld", (long long)t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims && n < (int)sizeof shape; d++)
            n += snprintf(shape + n, sizeof shape - n, ", %lld", (long long)t->ne[d]);
        snprintf(shape + HACHI_MIN(n, (int)sizeof shape - 2), 2, "]");
        fprintf(f, "  %-36s %-6s %-22s %12llu bytes\n", t->name, hachi_type_name(t->type), shape,
                (unsigned long long)t->nbytes);
    }
}

/* FNV-1a 64 over the file size and each tensor's name, type, shape and first and last 64
 * bytes: tells two files apart without reading every weight. */
static uint64_t fnv64(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

uint64_t hachi_model_id(const hachi_model *m) {
    const hachi_gguf *g = m->gguf;
    uint64_t h = 14695981039346656037ull, size = hachi_gguf_file_size(g);
    h = fnv64(h, &size, sizeof size);
    for (int64_t i = 0; i < hachi_gguf_n_tensors(g); i++) {
        const hachi_gguf_tensor *t = hachi_gguf_tensor_at(g, i);
        size_t k = (size_t)HACHI_MIN(t->nbytes, 64);
        h = fnv64(h, t->name, strlen(t->name));
        h = fnv64(h, &t->type, sizeof t->type);
        h = fnv64(h, t->ne, sizeof t->ne);
        if (!t->data) continue;
        h = fnv64(h, t->data, k);
        h = fnv64(h, (const char *)t->data + t->nbytes - k, k);
    }
    return h;
}
