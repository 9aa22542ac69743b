/* convert: llama2.c checkpoint + tokenizer.bin -> llama GGUF.
 *
 * The checkpoint (llama2.c's legacy v0 export) is mapped read-only and its
 * float32 weights are handed to the GGUF writer as they are: llama2.c keeps
 * W[out][in] row-major, which is GGUF's ne = [in, out], and its RoPE rotates
 * adjacent pairs (x[2i], x[2i+1]), llama.cpp's normal (non-NeoX) mode of the
 * llama architecture, so Wq and Wk need no permutation. Layout after the
 * 7 x int32 header (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
 * vocab_size, seq_len; vocab_size < 0 means a separate classifier):
 *   token_embedding [vocab][dim], rms_att [L][dim], wq [L][dim][dim],
 *   wk [L][kv_dim][dim], wv [L][kv_dim][dim], wo [L][dim][dim], rms_ffn [L][dim],
 *   w1 [L][hidden][dim], w2 [L][dim][hidden], w3 [L][hidden][dim], rms_final [dim],
 *   freq_cis_real [seq_len][head_size/2], freq_cis_imag (same; both skipped),
 *   wcls [vocab][dim] when not shared.
 * The tokenizer: int32 max_token_length, then per token float score, int32
 * length, bytes. llama2.c stored SentencePiece's U+2581 as ' ' and BOS/EOS as
 * "\n<s>\n" / "\n</s>\n"; both are turned back into SentencePiece form. */
#include "hachi.h"
#include "gguf.h"
#include "model.h"
#include "quant.h"
#include "util.h"
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LLAMA2C_MAGIC 0x616b3432u   /* "ak42": the v1/v2 exports, not supported */

typedef struct l2c_config {
    int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
} l2c_config;

/* The checkpoint's weights, pointing into the mapping. */
typedef struct l2c_weights {
    const float *tok_embd;      /* [vocab][dim] */
    const float *rms_att;       /* [L][dim] */
    const float *wq;            /* [L][dim][dim] */
    const float *wk, *wv;       /* [L][kv_dim][dim] */
    const float *wo;            /* [L][dim][dim] */
    const float *rms_ffn;       /* [L][dim] */
    const float *w1, *w3;       /* [L][hidden][dim] */
    const float *w2;            /* [L][dim][hidden] */
    const float *rms_final;     /* [dim] */
    const float *wcls;          /* [vocab][dim], NULL when shared */
} l2c_weights;

/* ---- file helpers --------------------------------------------------------------- */

static hachi_status map_file(const char *path, const void **data, size_t *len) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);   /* (a FIFO must not block the open: refused below) */
    if (fd < 0) return hachi_fail(HACHI_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return hachi_fail(HACHI_ERR_IO, "%s: not a regular file", path);
    }
    *len = (size_t)st.st_size;
    *data = NULL;
    if (*len) {
        void *p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return hachi_fail(HACHI_ERR_IO, "%s: mmap: %s", path, strerror(errno));
        }
        *data = p;
    }
    close(fd);
    return HACHI_OK;
}

static void unmap_file(const void *data, size_t len) {
    if (data && len) munmap((void *)data, len);
}

/* ---- checkpoint ------------------------------------------------------------------ */

static hachi_status check_config(const char *path, const l2c_config *c) {
    const int32_t *v = &c->dim;
    static const char *names[] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                                  "vocab_size", "seq_len"};
    for (int i = 0; i < 7; i++) {
        int32_t x = i == 5 && v[i] < 0 && v[i] != INT32_MIN ? -v[i] : v[i];
        if (x <= 0)
            return hachi_fail(HACHI_ERR_FORMAT, "%s: header %s = %d must be positive", path, names[i], v[i]);
    }
    if (c->dim % c->n_heads)
        return hachi_fail(HACHI_ERR_FORMAT, "%s: dim %d is not a multiple of n_heads %d", path, c->dim, c->n_heads);
    if (c->n_kv_heads > c->n_heads || c->n_heads % c->n_kv_heads)
        return hachi_fail(HACHI_ERR_FORMAT, "%s: n_kv_heads %d does not divide n_heads %d", path,
                          c->n_kv_heads, c->n_heads);
    if ((c->dim / c->n_heads) % 2)
        return hachi_fail(HACHI_ERR_FORMAT, "%s: head size %d is odd", path, c->dim / c->n_heads);
    /* what the loader takes: the converted file names BOS 1 and EOS 2 */
    if (c->n_layers > HACHI_LAYERS_MAX)
        return hachi_fail(HACHI_ERR_FORMAT, "%s: n_layers %d is more than %d", path, c->n_layers, HACHI_LAYERS_MAX);
    if ((c->vocab_size < 0 ? -(int64_t)c->vocab_size : c->vocab_size) < 3)
        return hachi_fail(HACHI_ERR_FORMAT, "%s: vocab_size %d holds no BOS (1) and EOS (2) tokens", path, c->vocab_size);
    return HACHI_OK;
}

/* Lays the weights out over data (after the header); checks the file length. */
static hachi_status bind_weights(const char *path, const l2c_config *c, const void *data, size_t len,
                                 l2c_weights *w) {
    const uint64_t dim = (uint64_t)c->dim, hid = (uint64_t)c->hidden_dim, L = (uint64_t)c->n_layers;
    const uint64_t V = (uint64_t)(c->vocab_size < 0 ? -(int64_t)c->vocab_size : c->vocab_size);
    const uint64_t kv_dim = dim * (uint64_t)c->n_kv_heads / (uint64_t)c->n_heads;
    const uint64_t head = dim / (uint64_t)c->n_heads;
    const bool shared = c->vocab_size > 0;
    /* products of three 31-bit header values can overflow 64 bits: an estimate in
     * floating point refuses absurd headers before the exact sums */
    double approx = (double)V * dim * 2 + (double)L * (dim * 2.0 + dim * dim * 2.0 + kv_dim * dim * 2.0 +
                    hid * dim * 3.0) + dim + (double)c->seq_len * head;
    if (approx * 4 > 1e15)
        return hachi_fail(HACHI_ERR_FORMAT, "%s: header sizes describe %.3g bytes of weights", path, approx * 4);
    /* offsets in floats from the end of the header; pointers are formed once the length is checked */
    uint64_t o = 0, off[11];
    off[0] = o; o += V * dim;          /* token_embedding */
    off[1] = o; o += L * dim;          /* rms_att */
    off[2] = o; o += L * dim * dim;    /* wq */
    off[3] = o; o += L * kv_dim * dim; /* wk */
    off[4] = o; o += L * kv_dim * dim; /* wv */
    off[5] = o; o += L * dim * dim;    /* wo */
    off[6] = o; o += L * dim;          /* rms_ffn */
    off[7] = o; o += L * hid * dim;    /* w1 */
    off[8] = o; o += L * dim * hid;    /* w2 */
    off[9] = o; o += L * hid * dim;    /* w3 */
    off[10] = o; o += dim;             /* rms_final */
    o += (uint64_t)c->seq_len * head;  /* freq_cis_real [seq_len][head/2] + imag */
    uint64_t off_cls = o;
    if (!shared) o += V * dim;
    uint64_t need = sizeof(l2c_config) + o * sizeof(float);
    if (len < need)
        return hachi_fail(HACHI_ERR_FORMAT, "%s: truncated: %zu bytes, the header (dim %d, %d layers, vocab %llu) "
                          "needs %llu", path, len, c->dim, c->n_layers, (unsigned long long)V,
                          (unsigned long long)need);
    if (len > need)
        return hachi_fail(HACHI_ERR_FORMAT, "%s: %llu bytes beyond the weights the header describes "
                          "(not a llama2.c v0 checkpoint?)", path, (unsigned long long)(len - need));
    // cppcheck-suppress invalidPointerCast ; the checkpoint is floats after the 28-byte header (4-byte aligned)
    const float *p = (const float *)((const char *)data + sizeof(l2c_config));
    const float **dst[11] = {&w->tok_embd, &w->rms_att, &w->wq, &w->wk, &w->wv, &w->wo,
                             &w->rms_ffn, &w->w1, &w->w2, &w->w3, &w->rms_final};
    for (int i = 0; i < 11; i++) *dst[i] = p + off[i];
    w->wcls = shared ? NULL : p + off_cls;
    return HACHI_OK;
}

/* ---- tokenizer ----------------------------------------------------------------------- */

typedef struct l2c_vocab {
    char **tok;                 /* [n] NUL-terminated SentencePiece pieces */
    float *score;               /* [n] */
    int32_t *type;              /* [n] llama token types */
    int n;
} l2c_vocab;

static void vocab_free(l2c_vocab *v) {
    if (v->tok)
        for (int i = 0; i < v->n; i++) hachi_free(v->tok[i]);
    hachi_free(v->tok);
    hachi_free(v->score);
    hachi_free(v->type);
}

static bool is_byte_piece(const unsigned char *s, int32_t len) {
    static const char hex[] = "0123456789ABCDEF";
    return len == 6 && !memcmp(s, "<0x", 3) && strchr(hex, s[3]) && strchr(hex, s[4]) && s[3] && s[4] &&
           s[5] == '>';
}

/* piece -> SentencePiece text: ' ' -> U+2581 (3 bytes). */
static char *sp_piece(const unsigned char *s, int32_t len) {
    size_t n = 0;
    for (int32_t i = 0; i < len; i++) n += s[i] == ' ' ? 3 : 1;
    char *out = hachi_malloc(n + 1), *o = out;
    if (!out) return NULL;
    for (int32_t i = 0; i < len; i++) {
        if (s[i] == ' ') { memcpy(o, "\xe2\x96\x81", 3); o += 3; }
        else *o++ = (char)s[i];
    }
    *o = 0;
    return out;
}

static hachi_status read_vocab(const char *path, int n_vocab, l2c_vocab *v) {
    const void *data;
    size_t len;
    hachi_status st = map_file(path, &data, &len);
    if (st) return st;
    const unsigned char *b = data;
    size_t off = 4;
    if (len < 4) { st = hachi_fail(HACHI_ERR_FORMAT, "%s: truncated header", path); goto out; }
    v->tok = hachi_calloc((size_t)n_vocab, sizeof *v->tok);
    v->score = hachi_calloc((size_t)n_vocab, sizeof *v->score);
    v->type = hachi_calloc((size_t)n_vocab, sizeof *v->type);
    if (!v->tok || !v->score || !v->type) { st = HACHI_ERR_NOMEM; goto out; }
    for (int i = 0; i < n_vocab; i++) {
        float score;
        int32_t plen;
        if (len - off < 8) {
            st = hachi_fail(HACHI_ERR_FORMAT, "%s: truncated at token %d of %d (offset %zu)", path, i, n_vocab, off);
            goto out;
        }
        memcpy(&score, b + off, 4);
        memcpy(&plen, b + off + 4, 4);
        off += 8;
        if (plen < 0 || (size_t)plen > len - off) {
            st = hachi_fail(HACHI_ERR_FORMAT, "%s: token %d: length %d runs past the end (offset %zu)",
                            path, i, plen, off - 4);
            goto out;
        }
        const unsigned char *s = b + off;
        if (memchr(s, 0, (size_t)plen)) {   /* a piece is a C string from here on: it would be cut */
            st = hachi_fail(HACHI_ERR_FORMAT, "%s: token %d holds a NUL byte (offset %zu)", path, i, off);
            goto out;
        }
        if (!isfinite(score)) {
            st = hachi_fail(HACHI_ERR_FORMAT, "%s: token %d has score %g", path, i, (double)score);
            goto out;
        }
        off += (size_t)plen;
        /* llama2.c wrote BOS/EOS as "\n<s>\n" and "\n</s>\n": strip the newlines */
        if (i <= 2 && plen >= 2 && s[0] == '\n' && s[plen - 1] == '\n') { s++; plen -= 2; }
        v->tok[i] = is_byte_piece(s, plen) || i <= 2 ? hachi_strndup((const char *)s, (size_t)plen)
                                                    : sp_piece(s, plen);
        v->n = i + 1;
        if (!v->tok[i]) { st = HACHI_ERR_NOMEM; goto out; }
        v->score[i] = score;
        v->type[i] = i == 0 ? 2 : i <= 2 ? 3 : is_byte_piece(s, plen) ? 6 : 1;
    }
    if (off != len)
        st = hachi_fail(HACHI_ERR_FORMAT, "%s: %zu bytes after token %d (vocabulary larger than the model's %d?)",
                        path, len - off, n_vocab - 1, n_vocab);
out:
    unmap_file(data, len);
    return st;
}

/* ---- writing ------------------------------------------------------------------------- */

/* general.name: the checkpoint's file name without directory and extension. */
static void model_name(const char *path, char *out, size_t cap) {
    const char *s = strrchr(path, '/');
    s = s ? s + 1 : path;
    snprintf(out, cap, "%s", s);
    char *dot = strrchr(out, '.');
    if (dot && dot != out) *dot = 0;
}

static hachi_status write_gguf(const char *model_path, const l2c_config *c, const l2c_weights *wt,
                               const l2c_vocab *v, const char *out) {
    const int64_t dim = c->dim, hid = c->hidden_dim, L = c->n_layers, V = v->n;
    const int64_t kv_dim = dim * c->n_kv_heads / c->n_heads, head = dim / c->n_heads;
    char name[256];
    model_name(model_path, name, sizeof name);
    hachi_gguf_writer *w = hachi_gguf_writer_new();
    if (!w) return HACHI_ERR_NOMEM;
    hachi_status st;
#define CK(x) do { if ((st = (x))) goto out; } while (0)
    CK(hachi_gguf_set_str(w, "general.architecture", "llama"));
    CK(hachi_gguf_set_str(w, "general.name", name));
    CK(hachi_gguf_set_u32(w, "llama.context_length", (uint32_t)c->seq_len));
    CK(hachi_gguf_set_u32(w, "llama.embedding_length", (uint32_t)dim));
    CK(hachi_gguf_set_u32(w, "llama.block_count", (uint32_t)L));
    CK(hachi_gguf_set_u32(w, "llama.feed_forward_length", (uint32_t)hid));
    CK(hachi_gguf_set_u32(w, "llama.rope.dimension_count", (uint32_t)head));
    CK(hachi_gguf_set_u32(w, "llama.attention.head_count", (uint32_t)c->n_heads));
    CK(hachi_gguf_set_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads));
    CK(hachi_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f));
    CK(hachi_gguf_set_f32(w, "llama.rope.freq_base", 10000.0f));
    CK(hachi_gguf_set_u32(w, "llama.vocab_size", (uint32_t)V));
    CK(hachi_gguf_set_u32(w, "general.file_type", 0));   /* LLAMA_FTYPE_ALL_F32 */
    CK(hachi_gguf_set_str(w, "tokenizer.ggml.model", "llama"));
    CK(hachi_gguf_set_str(w, "tokenizer.ggml.pre", "default"));
    CK(hachi_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, (uint64_t)V));
    CK(hachi_gguf_set_arr(w, "tokenizer.ggml.scores", HACHI_GGUF_FLOAT32, v->score, (uint64_t)V));
    CK(hachi_gguf_set_arr(w, "tokenizer.ggml.token_type", HACHI_GGUF_INT32, v->type, (uint64_t)V));
    CK(hachi_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 1));
    CK(hachi_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2));
    CK(hachi_gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", 0));
    CK(hachi_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    CK(hachi_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", false));
    CK(hachi_gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", true));

    char tn[64];
#define TENSOR(nm, ptr, nd, ne0, ne1)                                              \
    do {                                                                           \
        int64_t ne_[2] = {(ne0), (ne1)};                                           \
        CK(hachi_gguf_add_tensor(w, nm, HACHI_TYPE_F32, nd, ne_, (ptr)));           \
    } while (0)
    TENSOR("token_embd.weight", wt->tok_embd, 2, dim, V);
    for (int64_t l = 0; l < L; l++) {
#define BLK(suffix) (snprintf(tn, sizeof tn, "blk.%lld." suffix, (long long)l), tn)
        TENSOR(BLK("attn_norm.weight"), wt->rms_att + l * dim, 1, dim, 1);
        TENSOR(BLK("attn_q.weight"), wt->wq + l * dim * dim, 2, dim, dim);
        TENSOR(BLK("attn_k.weight"), wt->wk + l * kv_dim * dim, 2, dim, kv_dim);
        TENSOR(BLK("attn_v.weight"), wt->wv + l * kv_dim * dim, 2, dim, kv_dim);
        TENSOR(BLK("attn_output.weight"), wt->wo + l * dim * dim, 2, dim, dim);
        TENSOR(BLK("ffn_norm.weight"), wt->rms_ffn + l * dim, 1, dim, 1);
        TENSOR(BLK("ffn_gate.weight"), wt->w1 + l * hid * dim, 2, dim, hid);   /* w1 */
        TENSOR(BLK("ffn_down.weight"), wt->w2 + l * dim * hid, 2, hid, dim);   /* w2 */
        TENSOR(BLK("ffn_up.weight"), wt->w3 + l * hid * dim, 2, dim, hid);     /* w3 */
#undef BLK
    }
    TENSOR("output_norm.weight", wt->rms_final, 1, dim, 1);
    if (wt->wcls) TENSOR("output.weight", wt->wcls, 2, dim, V);
#undef TENSOR
    st = hachi_gguf_writer_write(w, out);
#undef CK
out:
    hachi_gguf_writer_free(w);
    return st;
}

hachi_status hachi_convert_llama2c(const char *model_bin, const char *tok_bin, const char *out_gguf) {
    if (!model_bin || !tok_bin || !out_gguf)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "convert-llama2c: missing path");
    const void *data = NULL;
    size_t len = 0;
    l2c_vocab v = {0};
    hachi_status st = map_file(model_bin, &data, &len);
    if (st) return st;
    l2c_config c;
    l2c_weights w;
    uint32_t magic = 0;
    if (len >= 4) memcpy(&magic, data, 4);
    if (magic == LLAMA2C_MAGIC) {
        st = hachi_fail(HACHI_ERR_UNSUPPORTED, "%s: a llama2.c version 1/2 export (magic \"ak42\"); "
                        "only the legacy v0 format is supported", model_bin);
        goto out;
    }
    if (len < sizeof c) {
        st = hachi_fail(HACHI_ERR_FORMAT, "%s: truncated: %zu bytes, shorter than the 28-byte header",
                        model_bin, len);
        goto out;
    }
    memcpy(&c, data, sizeof c);
    if ((st = check_config(model_bin, &c))) goto out;
    if ((st = bind_weights(model_bin, &c, data, len, &w))) goto out;
    if ((st = read_vocab(tok_bin, c.vocab_size < 0 ? -c.vocab_size : c.vocab_size, &v))) goto out;
    st = write_gguf(model_bin, &c, &w, &v, out_gguf);
out:
    vocab_free(&v);
    unmap_file(data, len);
    return st;
}
