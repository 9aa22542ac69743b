/* synth: random-weight Gemma 4 models as GGUF (test and benchmark inputs).
 *
 * The tensor list, names, shapes and metadata keys are those of llama.cpp's
 * gemma4 files (see ../shared/oracle/gemma4-tiny*.gguf). Values: matrices
 * N(0, 1/fan_in), norm weights ~1 +- 0.1, Q/K norm weights scaled so q.k has a
 * standard deviation of about 2 at attention scale 1.0, layer output scales
 * in [0.6, 0.75], token embeddings with sd 5/sqrt(n_embd) so tied logits have
 * sd ~5 before the softcap. Every row has its own RNG stream, seeded from
 * (seed, tensor index, row): rows are generated in parallel, chunk by chunk,
 * inside the writer's fill callback, so the output never sits in memory whole
 * and its bytes depend only on the seed. Quantized matrices and embeddings are
 * drawn block by block straight from the RNG (see make_row_direct), not
 * quantized from floats: E2B takes seconds, not the reference K-quant
 * quantizer's ten minutes; F32/F16/BF16 and the norms go through floats. */
#include "hachi.h"
#include "gguf.h"
#include "kernels/kernels.h"
#include "quant.h"
#include "util.h"
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- shapes and type mixes ----------------------------------------------------- */

typedef struct synth_shape {
    const char *name;
    int n_layer, n_embd, n_head, n_head_kv;
    int hd_swa, hd_full;        /* head dim on sliding / full layers */
    int full_every;             /* layer l is full when (l + 1) % full_every == 0 */
    int window, n_shared_kv, n_embd_pl;
    int ff_lo, ff_hi, ff_split; /* FFN width ff_lo for l < ff_split, ff_hi after */
    int n_rope_rot;             /* rope_freqs: this many 1.0, then 1e30 (of hd_full/2) */
    int n_vocab, n_ctx;
} synth_shape;

static const synth_shape shapes[] = {
    {"e2b", 35, 1536, 8, 1, 256, 512, 5, 512, 20, 256, 6144, 12288, 15, 64, 262144, 32768},
    {"tiny", 10, 256, 4, 1, 64, 128, 5, 16, 5, 128, 256, 512, 5, 16, 1024, 4096},
};

typedef struct synth_mix {
    const char *name;
    uint32_t mat;               /* matrices */
    uint32_t embd;              /* token_embd and per_layer_token_embd */
    uint32_t ftype;             /* general.file_type (llama_ftype) */
    bool k_mix;                 /* Q4_K_M, Q5_K_M: attn_v / ffn_down Q6_K on use_more_bits layers */
} synth_mix;

static const synth_mix mixes[] = {
    {"f32", HACHI_TYPE_F32, HACHI_TYPE_F32, 0, false},
    {"f16", HACHI_TYPE_F16, HACHI_TYPE_F16, 1, false},
    {"bf16", HACHI_TYPE_BF16, HACHI_TYPE_BF16, 32, false},
    {"q8_0", HACHI_TYPE_Q8_0, HACHI_TYPE_Q8_0, 7, false},
    {"q4_0", HACHI_TYPE_Q4_0, HACHI_TYPE_Q6_K, 2, false},
    {"q4_k_m", HACHI_TYPE_Q4_K, HACHI_TYPE_Q6_K, 15, true},
    {"q5_k_m", HACHI_TYPE_Q5_K, HACHI_TYPE_Q6_K, 17, true},
};

/* llama.cpp's rule for which layers of a Q4_K_M (Q5_K_M) file get more bits. */
static bool use_more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* The type itself when a row of ne0 fits its blocks, else Q8_0 (ne0 % 32 == 0), else F16. */
static uint32_t fit_type(uint32_t type, int64_t ne0) {
    if (hachi_row_size(type, ne0)) return type;
    if (hachi_row_size(HACHI_TYPE_Q8_0, ne0)) return HACHI_TYPE_Q8_0;
    return HACHI_TYPE_F16;
}

/* ---- RNG ------------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t row_seed(uint64_t seed, uint32_t tensor, int64_t row) {
    uint64_t s = seed;
    uint64_t a = splitmix64(&s);
    s = a ^ ((uint64_t)tensor << 32);
    uint64_t b = splitmix64(&s);
    s = b ^ (uint64_t)row;
    return splitmix64(&s);
}

/* Approximately N(0,1): the sum of four 16-bit uniforms (Irwin-Hall), unit variance. */
static float gauss(uint64_t *s) {
    uint64_t r = splitmix64(s);
    int32_t sum = (int32_t)(r & 0xffff) + (int32_t)((r >> 16) & 0xffff) +
                  (int32_t)((r >> 32) & 0xffff) + (int32_t)(r >> 48) - 2 * 65535;
    return (float)sum * (float)(1.0 / (65536.0 * 0.5773502691896258));  /* sd of the sum: 65536*sqrt(4/12) */
}

static float uniform01(uint64_t *s) { return (float)(splitmix64(s) >> 40) * (1.0f / 16777216.0f); }

/* ---- tensors ----------------------------------------------------------------------- */

enum value_kind { V_GAUSS, V_UNIFORM, V_ROPE };

typedef struct synth_job synth_job;

typedef struct synth_tensor {
    char name[64];
    uint32_t type, index, n_dims;
    int64_t ne[2];
    enum value_kind kind;
    float a, b;                 /* gauss: mean, sd; uniform: lo, hi; rope: n rotated */
    uint64_t nbytes;
    synth_job *job;
} synth_tensor;

struct synth_job {
    uint64_t seed;
    int n_threads;
    const hachi_kernels *kern;
    uint64_t total_bytes, done_bytes;
    hachi_synth_progress_fn progress;
    void *progress_ctx;
    synth_tensor *t;
    int n_t, cap_t;
};

static hachi_status add_tensor(synth_job *job, const char *name, uint32_t type, uint32_t n_dims,
                               int64_t ne0, int64_t ne1, enum value_kind kind, float a, float b) {
    if (job->n_t == job->cap_t) return hachi_fail(HACHI_ERR_INTERNAL, "synth: tensor table full");
    synth_tensor *t = &job->t[job->n_t];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->index = (uint32_t)job->n_t;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->kind = kind;
    t->a = a;
    t->b = b;
    t->nbytes = hachi_row_size(type, ne0) * (uint64_t)ne1;
    t->job = job;
    if (!t->nbytes) return hachi_fail(HACHI_ERR_INTERNAL, "synth: %s: rows of %lld do not fit %s",
                                      name, (long long)ne0, hachi_type_name(type));
    if (type != HACHI_TYPE_F32 && type != HACHI_TYPE_F16 && type != HACHI_TYPE_BF16 &&
        !job->kern->t[type].from_float)
        return hachi_fail(HACHI_ERR_UNSUPPORTED, "synth: no quantizer for %s", hachi_type_name(type));
    job->total_bytes += t->nbytes;
    job->n_t++;
    return HACHI_OK;
}

/* ---- quantized blocks straight from the RNG ---------------------------------------------
 *
 * A zero-mean Gaussian tensor in Q4_0, Q8_0, Q4_K, Q5_K or Q6_K is not generated as floats and
 * quantized (the reference K-quant search costs ~250-350 ns a value, minutes for E2B's
 * embeddings): each block is drawn directly. Quant values are raw random bits, so every
 * q is uniform over the type's whole range (Q4_0/Q4_K nibbles 0..15, Q6_K 0..63, Q8_0
 * -128..127). Scales are chosen so the dequantized values have the tensor's standard
 * deviation sd, and mean zero:
 *   Q4_0  x = d (q - 8):            E[(q-8)^2] = 21.5,  d = +-sd / sqrt(21.5), sign per block
 *   Q8_0  x = d q:                  E[q^2] = 5461.5,    d = +-sd / sqrt(5461.5), sign per block
 *   Q6_K  x = d s_j (q - 32):       s_j = +-[64, 127] per 16 values (E[s^2] = 9461.5),
 *                                   E[(q-32)^2] = 341.5, d = sd / sqrt(9461.5 * 341.5)
 *   Q4_K  x = d s_j q - dmin m_j:   s_j in [32, 63] per 32 values (E[s^2] = 2341.5),
 *                                   var(q) = 21.25, d = sd / sqrt(2341.5 * 21.25), dmin = 8 d,
 *                                   m_j = round(7.5 s_j d / dmin) centres each sub-block
 *   Q5_K  as Q4_K with q 0..31:     var(q) = 85.25, dmin = 16 d, m_j = round(15.5 s_j d / dmin)
 * Every value sits on its type's grid, so the file is a valid model whose matrices have
 * the same scale as the float path's (uniform rather than Gaussian per element: the same
 * second moments, which is all the forward pass's statistics see). */

static bool direct_type(uint32_t type) {
    return type == HACHI_TYPE_Q4_0 || type == HACHI_TYPE_Q8_0 || type == HACHI_TYPE_Q4_K ||
           type == HACHI_TYPE_Q5_K || type == HACHI_TYPE_Q6_K;
}

static void rand_bytes(uint64_t *s, uint8_t *p, size_t n) {
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t r = splitmix64(s);
        memcpy(p, &r, 8);
    }
    if (n) {
        uint64_t r = splitmix64(s);
        memcpy(p, &r, n);
    }
}

/* One row of n values of type t->type, zero mean and sd t->b, into dst. */
static void make_row_direct(const synth_tensor *t, uint64_t *s, void *dst) {
    const float sd = t->b;
    const int64_t n = t->ne[0];
    uint64_t bits = 0;
    int nbits = 0;
#define SIGN_BIT() (nbits ? 0 : (bits = splitmix64(s), nbits = 64), nbits--, (bits >> nbits) & 1)
    switch (t->type) {
    case HACHI_TYPE_Q4_0: {
        const uint16_t dp = hachi_f32_to_f16(sd / sqrtf(21.5f)), dn = dp ^ 0x8000;
        block_q4_0 *y = dst;
        for (int64_t i = 0; i < n / QK4_0; i++) {
            y[i].d = SIGN_BIT() ? dn : dp;
            rand_bytes(s, y[i].qs, sizeof y[i].qs);
        }
        break;
    }
    case HACHI_TYPE_Q8_0: {
        const uint16_t dp = hachi_f32_to_f16(sd / sqrtf(5461.5f)), dn = dp ^ 0x8000;
        block_q8_0 *y = dst;
        for (int64_t i = 0; i < n / QK8_0; i++) {
            y[i].d = SIGN_BIT() ? dn : dp;
            rand_bytes(s, (uint8_t *)y[i].qs, sizeof y[i].qs);
        }
        break;
    }
    case HACHI_TYPE_Q6_K: {
        const uint16_t d = hachi_f32_to_f16(sd / sqrtf(9461.5f * 341.5f));
        block_q6_K *y = dst;
        for (int64_t i = 0; i < n / QK_K; i++) {
            rand_bytes(s, y[i].ql, sizeof y[i].ql);
            rand_bytes(s, y[i].qh, sizeof y[i].qh);
            uint64_t r[2] = {splitmix64(s), splitmix64(s)};
            for (int j = 0; j < QK_K / 16; j++) {
                unsigned b = (unsigned)(r[j / 8] >> (8 * (j % 8))) & 0x7f;  /* 6 bits of size, 1 of sign */
                int mag = 64 + (int)(b & 63);
                y[i].scales[j] = (int8_t)(b & 64 ? -mag : mag);
            }
            y[i].d = d;
        }
        break;
    }
    case HACHI_TYPE_Q4_K:
    case HACHI_TYPE_Q5_K: {
        const bool q5 = t->type == HACHI_TYPE_Q5_K;
        const uint16_t d = hachi_f32_to_f16(sd / sqrtf(2341.5f * (q5 ? 85.25f : 21.25f)));
        const float df = hachi_f16_to_f32(d);
        const uint16_t dmin = hachi_f32_to_f16((q5 ? 16.0f : 8.0f) * df);
        const float ratio = df > 0 ? (q5 ? 15.5f : 7.5f) * df / hachi_f16_to_f32(dmin) : 0.0f;
        for (int64_t i = 0; i < n / QK_K; i++) {
            uint8_t *scales = q5 ? ((block_q5_K *)dst)[i].scales : ((block_q4_K *)dst)[i].scales;
            uint64_t r = splitmix64(s);
            memset(scales, 0, K_SCALE_SIZE);
            for (int j = 0; j < 8; j++) {
                int ls = 32 + (int)((r >> (5 * j)) & 31);
                int lm = (int)lrintf((float)ls * ratio);
                lm = lm < 0 ? 0 : lm > 63 ? 63 : lm;
                if (j < 4) {
                    scales[j] = (uint8_t)ls;
                    scales[j + 4] = (uint8_t)lm;
                } else {
                    scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
                    scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
                    scales[j] |= (uint8_t)((lm >> 4) << 6);
                }
            }
            if (q5) {
                block_q5_K *y = (block_q5_K *)dst + i;
                y->d = d;
                y->dmin = dmin;
                rand_bytes(s, y->qh, sizeof y->qh);
                rand_bytes(s, y->qs, sizeof y->qs);
            } else {
                block_q4_K *y = (block_q4_K *)dst + i;
                y->d = d;
                y->dmin = dmin;
                rand_bytes(s, y->qs, sizeof y->qs);
            }
        }
        break;
    }
    default: break;
    }
#undef SIGN_BIT
}

/* One row: values into x[ne0], then converted into dst. */
static void make_row(const synth_tensor *t, int64_t row, float *x, void *dst) {
    uint64_t s = row_seed(t->job->seed, t->index, row);
    int64_t n = t->ne[0];
    if (t->kind == V_GAUSS && t->a == 0.0f && direct_type(t->type)) {
        make_row_direct(t, &s, dst);
        return;
    }
    switch (t->kind) {
    case V_GAUSS:
        for (int64_t i = 0; i < n; i++) x[i] = t->a + t->b * gauss(&s);
        break;
    case V_UNIFORM:
        for (int64_t i = 0; i < n; i++) x[i] = t->a + (t->b - t->a) * uniform01(&s);
        break;
    case V_ROPE:
        for (int64_t i = 0; i < n; i++) x[i] = i < (int64_t)t->a ? 1.0f : 1e30f;
        break;
    }
    switch (t->type) {
    case HACHI_TYPE_F32: memcpy(dst, x, (size_t)n * sizeof(float)); break;
    case HACHI_TYPE_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = hachi_f32_to_f16(x[i]);
        break;
    case HACHI_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = hachi_f32_to_bf16(x[i]);
        break;
    default: t->job->kern->t[t->type].from_float(x, dst, n); break;
    }
}

typedef struct synth_worker {
    const synth_tensor *t;
    uint8_t *dst;               /* the tensor's first byte */
    int64_t r0, r1;             /* rows [r0, r1) */
    float *x;                   /* [ne0] scratch */
} synth_worker;

static void *worker_run(void *arg) {
    synth_worker *w = arg;
    uint64_t rs = hachi_row_size(w->t->type, w->t->ne[0]);
    for (int64_t r = w->r0; r < w->r1; r++) make_row(w->t, r, w->x, w->dst + (uint64_t)r * rs);
    return NULL;
}

/* The writer's fill callback: rows in chunks of ~4M values, each chunk split over the threads. */
static hachi_status fill_tensor(void *ctx, void *dst, uint64_t nbytes) {
    synth_tensor *t = ctx;
    synth_job *job = t->job;
    if (nbytes != t->nbytes)
        return hachi_fail(HACHI_ERR_INTERNAL, "synth: %s: writer asks %llu bytes, expected %llu",
                          t->name, (unsigned long long)nbytes, (unsigned long long)t->nbytes);
    int nt = HACHI_MAX(1, HACHI_MIN(job->n_threads, 16));   /* (hachi_synth checked it: 1..16, the size of w and th) */
    uint64_t rs = hachi_row_size(t->type, t->ne[0]);
    synth_worker w[16];
    pthread_t th[16];
    float *scratch = hachi_malloc((size_t)nt * (size_t)t->ne[0] * sizeof(float));
    if (!scratch) return HACHI_ERR_NOMEM;
    int64_t chunk = HACHI_MAX((int64_t)1, ((int64_t)4 << 20) / t->ne[0]);
    for (int64_t c0 = 0; c0 < t->ne[1]; c0 += chunk) {
        int64_t c1 = HACHI_MIN(t->ne[1], c0 + chunk), n = c1 - c0;
        int use = (int)HACHI_MIN((int64_t)nt, n), started = 0;
        for (int i = 0; i < use; i++) {
            w[i] = (synth_worker){t, dst, c0 + n * i / use, c0 + n * (i + 1) / use,
                                  scratch + (size_t)i * (size_t)t->ne[0]};
        }
        for (int i = 1; i < use; i++) {
            if (pthread_create(&th[i], NULL, worker_run, &w[i])) break;
            started = i;
        }
        for (int i = started + 1; i < use; i++) worker_run(&w[i]);   /* threads that failed to start */
        worker_run(&w[0]);
        for (int i = 1; i <= started; i++) pthread_join(th[i], NULL);
        job->done_bytes += (uint64_t)n * rs;
        if (job->progress) job->progress(job->progress_ctx, (double)job->done_bytes / (double)job->total_bytes);
    }
    hachi_free(scratch);
    return HACHI_OK;
}

/* ---- the model's tensors ------------------------------------------------------------- */

static bool is_full(const synth_shape *s, int l) { return (l + 1) % s->full_every == 0; }
static int ff_width(const synth_shape *s, int l) { return l < s->ff_split ? s->ff_lo : s->ff_hi; }

static hachi_status build_tensors(synth_job *job, const synth_shape *s, const synth_mix *m) {
    const int E = s->n_embd, L = s->n_layer, P = s->n_embd_pl, V = s->n_vocab;
    char nm[64];
    hachi_status st;
#define T(name, type, nd, ne0, ne1, kind, a, b)                                              \
    do {                                                                                 \
        if ((st = add_tensor(job, name, fit_type(type, ne0), nd, ne0, ne1, kind, a, b))) \
            return st;                                                                   \
    } while (0)
#define MAT(name, type, ne0, ne1) T(name, type, 2, ne0, ne1, V_GAUSS, 0.0f, 1.0f / sqrtf((float)(ne0)))
#define NORM(name, n, mean, sd) T(name, HACHI_TYPE_F32, 1, n, 1, V_GAUSS, mean, sd)
    T("token_embd.weight", m->embd, 2, E, V, V_GAUSS, 0.0f, 5.0f / sqrtf((float)E));
    T("per_layer_token_embd.weight", m->embd, 2, (int64_t)L * P, V, V_GAUSS, 0.0f, 1.0f / sqrtf((float)P));
    MAT("per_layer_model_proj.weight", m->mat, E, (int64_t)L * P);
    NORM("per_layer_proj_norm.weight", P, 1.0f, 0.05f);
    T("rope_freqs.weight", HACHI_TYPE_F32, 1, s->hd_full / 2, 1, V_ROPE, (float)s->n_rope_rot, 0.0f);
    NORM("output_norm.weight", E, 1.0f, 0.1f);
    for (int l = 0; l < L; l++) {
        int hd = is_full(s, l) ? s->hd_full : s->hd_swa, F = ff_width(s, l);
        bool more = m->k_mix && use_more_bits(l, L);
        uint32_t tv = more ? HACHI_TYPE_Q6_K : m->mat;
        float qk = sqrtf(2.0f / sqrtf((float)hd));   /* q.k sd ~ qk^2 * sqrt(hd) = 2 */
#define N(suffix) (snprintf(nm, sizeof nm, "blk.%d." suffix, l), nm)
        NORM(N("attn_norm.weight"), E, 1.0f, 0.1f);
        MAT(N("attn_q.weight"), m->mat, E, (int64_t)s->n_head * hd);
        MAT(N("attn_k.weight"), m->mat, E, (int64_t)s->n_head_kv * hd);
        MAT(N("attn_v.weight"), tv, E, (int64_t)s->n_head_kv * hd);
        NORM(N("attn_q_norm.weight"), hd, qk, 0.1f * qk);
        NORM(N("attn_k_norm.weight"), hd, qk, 0.1f * qk);
        MAT(N("attn_output.weight"), m->mat, (int64_t)s->n_head * hd, E);
        NORM(N("post_attention_norm.weight"), E, 1.0f, 0.1f);
        NORM(N("ffn_norm.weight"), E, 1.0f, 0.1f);
        MAT(N("ffn_gate.weight"), m->mat, E, F);
        MAT(N("ffn_up.weight"), m->mat, E, F);
        MAT(N("ffn_down.weight"), tv, F, E);
        NORM(N("post_ffw_norm.weight"), E, 1.0f, 0.1f);
        MAT(N("inp_gate.weight"), m->mat, E, P);
        MAT(N("proj.weight"), m->mat, P, E);
        NORM(N("post_norm.weight"), E, 1.0f, 0.1f);
        T(N("layer_output_scale.weight"), HACHI_TYPE_F32, 1, 1, 1, V_UNIFORM, 0.6f, 0.75f);
#undef N
    }
#undef NORM
#undef MAT
#undef T
    return HACHI_OK;
}

/* ---- tokenizer: a Gemma-layout SentencePiece vocabulary ------------------------------- */

/* Ids: 0 <pad>, 1 <eos>, 2 <bos>, 3 <unk>, 4.. <unusedN>, 105 <start_of_turn>,
 * 106 <end_of_turn>, more <unusedN> up to 237, byte tokens <0x00>..<0xFF> at
 * 238..493 (as in Gemma vocabularies), then ordinary pieces with descending
 * scores: U+2581, the printable ASCII characters, U+2581 + each, then all
 * lowercase pairs, triples, quadruples, each alone and after U+2581, until
 * the vocabulary is full. Every piece can be built by merging two shorter ones. */
#define SP "\xe2\x96\x81"
enum { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_BYTE = 6 };
enum { FIRST_BYTE = 238, FIRST_PIECE = FIRST_BYTE + 256 };

typedef struct vocab {
    char **tok;                 /* [n] pointers into pool */
    float *score;
    int32_t *type;
    char *pool;
    size_t pool_len, pool_cap;
    int n, cap;
} vocab;

static void vocab_add(vocab *v, const char *s, float score, int32_t type) {
    size_t len = strlen(s) + 1;
    if (v->n >= v->cap || v->pool_len + len > v->pool_cap) return;
    memcpy(v->pool + v->pool_len, s, len);
    v->tok[v->n] = v->pool + v->pool_len;              /* the pool never moves (pool_cap is fixed) */
    v->score[v->n] = score;
    v->type[v->n] = type;
    v->pool_len += len;
    v->n++;
}

/* Appends the lowercase strings of length len (base 26 counting), alone or after U+2581,
 * until the vocabulary is full. */
static void vocab_words(vocab *v, int len, float *score) {
    long total = 1;
    for (int i = 0; i < len; i++) total *= 26;
    char w[16];
    for (long k = 0; k < total && v->n < v->cap; k++) {
        long x = k;
        for (int i = len - 1; i >= 0; i--) { w[i] = (char)('a' + x % 26); x /= 26; }
        w[len] = 0;
        vocab_add(v, w, (*score)--, TOK_NORMAL);
        char sw[32];
        snprintf(sw, sizeof sw, SP "%s", w);
        if (v->n < v->cap) vocab_add(v, sw, (*score)--, TOK_NORMAL);
    }
}

static hachi_status vocab_build(vocab *v, int n) {
    memset(v, 0, sizeof *v);
    if (n < FIRST_PIECE + 200) return hachi_fail(HACHI_ERR_INVALID_ARG, "synth: vocabulary of %d too small", n);
    v->cap = n;
    v->pool_cap = (size_t)n * 12 + 4096;
    v->tok = hachi_calloc((size_t)n, sizeof *v->tok);
    v->score = hachi_calloc((size_t)n, sizeof *v->score);
    v->type = hachi_calloc((size_t)n, sizeof *v->type);
    v->pool = hachi_malloc(v->pool_cap);
    if (!v->tok || !v->score || !v->type || !v->pool) return HACHI_ERR_NOMEM;
    char buf[32];
    vocab_add(v, "<pad>", 0, TOK_CONTROL);
    vocab_add(v, "<eos>", 0, TOK_CONTROL);
    vocab_add(v, "<bos>", 0, TOK_CONTROL);
    vocab_add(v, "<unk>", 0, TOK_UNKNOWN);
    for (int u = 0; v->n < FIRST_BYTE; u++) {
        if (v->n == 105) vocab_add(v, "<start_of_turn>", 0, TOK_CONTROL);
        else if (v->n == 106) vocab_add(v, "<end_of_turn>", 0, TOK_CONTROL);
        else {
            snprintf(buf, sizeof buf, "<unused%d>", u);
            vocab_add(v, buf, 0, TOK_CONTROL);
        }
    }
    for (int b = 0; b < 256; b++) {
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        vocab_add(v, buf, 0, TOK_BYTE);
    }
    float score = 0;
    vocab_add(v, SP, score--, TOK_NORMAL);
    for (int c = 33; c < 127; c++) {
        buf[0] = (char)c;
        buf[1] = 0;
        vocab_add(v, buf, score--, TOK_NORMAL);
    }
    for (int c = 33; c < 127; c++) {
        snprintf(buf, sizeof buf, SP "%c", c);
        vocab_add(v, buf, score--, TOK_NORMAL);
    }
    for (int len = 2; len <= 4 && v->n < v->cap; len++) vocab_words(v, len, &score);
    if (v->n != n) return hachi_fail(HACHI_ERR_INTERNAL, "synth: built %d of %d tokens", v->n, n);
    return HACHI_OK;
}

static void vocab_free(vocab *v) {
    hachi_free(v->tok);
    hachi_free(v->score);
    hachi_free(v->type);
    hachi_free(v->pool);
}

/* ---- metadata -------------------------------------------------------------------------- */

static hachi_status set_metadata(hachi_gguf_writer *w, const synth_shape *s, const synth_mix *m,
                                 const hachi_synth_params *p, const vocab *v) {
    const int L = s->n_layer;
    int32_t ff[64];
    uint8_t swa[64];
    char name[128];
    for (int l = 0; l < L; l++) {
        ff[l] = ff_width(s, l);
        swa[l] = !is_full(s, l);
    }
    snprintf(name, sizeof name, "synth-gemma4-%s-%s-seed%llu", s->name, m->name, (unsigned long long)p->seed);
    hachi_status st;
#define CK(x) do { if ((st = (x))) return st; } while (0)
    CK(hachi_gguf_set_str(w, "general.architecture", "gemma4"));
    CK(hachi_gguf_set_str(w, "general.name", name));
    CK(hachi_gguf_set_u32(w, "gemma4.block_count", (uint32_t)L));
    CK(hachi_gguf_set_u32(w, "gemma4.context_length", (uint32_t)s->n_ctx));
    CK(hachi_gguf_set_u32(w, "gemma4.embedding_length", (uint32_t)s->n_embd));
    CK(hachi_gguf_set_arr(w, "gemma4.feed_forward_length", HACHI_GGUF_INT32, ff, (uint64_t)L));
    CK(hachi_gguf_set_u32(w, "gemma4.attention.head_count", (uint32_t)s->n_head));
    CK(hachi_gguf_set_u32(w, "gemma4.attention.head_count_kv", (uint32_t)s->n_head_kv));
    CK(hachi_gguf_set_f32(w, "gemma4.rope.freq_base", 1e6f));
    CK(hachi_gguf_set_f32(w, "gemma4.rope.freq_base_swa", 1e4f));
    CK(hachi_gguf_set_f32(w, "gemma4.attention.layer_norm_rms_epsilon", 1e-6f));
    CK(hachi_gguf_set_u32(w, "gemma4.attention.key_length", (uint32_t)s->hd_full));
    CK(hachi_gguf_set_u32(w, "gemma4.attention.value_length", (uint32_t)s->hd_full));
    CK(hachi_gguf_set_u32(w, "general.file_type", m->ftype));
    if (m->mat != HACHI_TYPE_F32 && m->mat != HACHI_TYPE_F16 && m->mat != HACHI_TYPE_BF16)   /* the spec: must, when quantized */
        CK(hachi_gguf_set_u32(w, "general.quantization_version", 2));
    CK(hachi_gguf_set_f32(w, "gemma4.final_logit_softcapping", 30.0f));
    CK(hachi_gguf_set_u32(w, "gemma4.attention.sliding_window", (uint32_t)s->window));
    CK(hachi_gguf_set_u32(w, "gemma4.attention.shared_kv_layers", (uint32_t)s->n_shared_kv));
    CK(hachi_gguf_set_u32(w, "gemma4.embedding_length_per_layer_input", (uint32_t)s->n_embd_pl));
    CK(hachi_gguf_set_arr(w, "gemma4.attention.sliding_window_pattern", HACHI_GGUF_BOOL, swa, (uint64_t)L));
    CK(hachi_gguf_set_u32(w, "gemma4.attention.key_length_swa", (uint32_t)s->hd_swa));
    CK(hachi_gguf_set_u32(w, "gemma4.attention.value_length_swa", (uint32_t)s->hd_swa));
    CK(hachi_gguf_set_u32(w, "gemma4.rope.dimension_count", (uint32_t)s->hd_full));
    CK(hachi_gguf_set_u32(w, "gemma4.rope.dimension_count_swa", (uint32_t)s->hd_swa));
    CK(hachi_gguf_set_u32(w, "gemma4.vocab_size", (uint32_t)s->n_vocab));
    CK(hachi_gguf_set_str(w, "tokenizer.ggml.model", "llama"));
    CK(hachi_gguf_set_str(w, "tokenizer.ggml.pre", "default"));
    CK(hachi_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, (uint64_t)v->n));
    CK(hachi_gguf_set_arr(w, "tokenizer.ggml.scores", HACHI_GGUF_FLOAT32, v->score, (uint64_t)v->n));
    CK(hachi_gguf_set_arr(w, "tokenizer.ggml.token_type", HACHI_GGUF_INT32, v->type, (uint64_t)v->n));
    CK(hachi_gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", 3));
    CK(hachi_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 2));
    CK(hachi_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 1));
    CK(hachi_gguf_set_u32(w, "tokenizer.ggml.padding_token_id", 0));
    CK(hachi_gguf_set_u32(w, "tokenizer.ggml.eot_token_id", 106));
    CK(hachi_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    CK(hachi_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", false));
    CK(hachi_gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", false));
#undef CK
    return HACHI_OK;
}

/* ---- entry ------------------------------------------------------------------------------- */

hachi_synth_params hachi_synth_default_params(void) {
    return (hachi_synth_params){"gemma4", "tiny", "f32", 1, 0};
}

hachi_status hachi_synth(const hachi_synth_params *p, const char *out_path,
                         hachi_synth_progress_fn progress, void *progress_ctx) {
    if (!p || !out_path) return hachi_fail(HACHI_ERR_INVALID_ARG, "synth: no parameters or output path");
    if (!p->arch || strcmp(p->arch, "gemma4"))
        return hachi_fail(HACHI_ERR_INVALID_ARG, "unknown architecture '%s' (known: gemma4)",
                          p->arch ? p->arch : "");
    const synth_shape *s = NULL;
    const synth_mix *m = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (p->shape && !strcmp(p->shape, shapes[i].name)) s = &shapes[i];
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++)
        if (p->type && !strcmp(p->type, mixes[i].name)) m = &mixes[i];
    if (!s) return hachi_fail(HACHI_ERR_INVALID_ARG, "unknown shape '%s' (known: e2b, tiny)",
                              p->shape ? p->shape : "");
    if (!m) return hachi_fail(HACHI_ERR_INVALID_ARG,
                              "unknown type '%s' (known: f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m)",
                              p->type ? p->type : "");
    if (p->n_threads < 0 || p->n_threads > 16)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "synth: n_threads %d not in [0, 16]", p->n_threads);

    synth_job job = {0};
    job.seed = p->seed;
    job.n_threads = p->n_threads;
    if (!job.n_threads) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        job.n_threads = nc < 1 ? 1 : nc > 16 ? 16 : (int)nc;
    }
    job.kern = hachi_kernels_get(HACHI_ISA_REF);
    job.progress = progress;
    job.progress_ctx = progress_ctx;
    job.cap_t = 6 + 17 * s->n_layer;
    if (!job.kern) return hachi_fail(HACHI_ERR_INTERNAL, "synth: no reference kernels");

    vocab v;
    hachi_gguf_writer *w = NULL;
    hachi_status st = vocab_build(&v, s->n_vocab);
    if (st) goto out;
    job.t = hachi_calloc((size_t)job.cap_t, sizeof *job.t);
    w = hachi_gguf_writer_new();
    if (!job.t || !w) { st = HACHI_ERR_NOMEM; goto out; }
    if ((st = set_metadata(w, s, m, p, &v))) goto out;
    if ((st = build_tensors(&job, s, m))) goto out;
    for (int i = 0; i < job.n_t; i++) {
        synth_tensor *t = &job.t[i];
        if ((st = hachi_gguf_add_tensor_fn(w, t->name, t->type, t->n_dims, t->ne, fill_tensor, t))) goto out;
    }
    st = hachi_gguf_writer_write(w, out_path);
out:
    hachi_gguf_writer_free(w);
    hachi_free(job.t);
    vocab_free(&v);
    return st;
}
