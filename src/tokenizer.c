/* tokenizer: vocabularies from GGUF tokenizer.ggml.* metadata, their lookups
 * and the streaming detokenizer (the encoders are in tokenize.c).
 *
 *   "llama"  SentencePiece-style: spaces -> U+2581, dummy prefix, pairs merged by
 *            highest vocabulary score, characters left unknown -> <0xNN> bytes.
 *   "gpt2"   byte-level BPE: GPT-2 pre-tokenizer, bytes mapped to printable code
 *            points, merges by rank.
 *   "gemma4" BPE by merge rank over the whole fragment, spaces -> U+2581, no
 *            pre-split, no dummy prefix, <0xNN> byte fallback for missing characters.
 * Loading builds open-addressing hash tables (piece -> id, (left id, right id) ->
 * merge) over strings that stay in the GGUF buffer. Nothing here is hot. */
#include "tokenizer_impl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include "util.h"

/* ---- hashing -------------------------------------------------------------------------- */

static uint32_t fnv1a(const void *p, size_t n, uint32_t h) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}

static uint32_t mix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    return h ^ (h >> 16);
}

uint32_t hachi_tok_hash(const hachi_tokenizer *t, const void *s, size_t n) { return mix32(fnv1a(s, n, t->seed)); }

/* a merge "a b" hashes as its text would */
static uint32_t merge_hash(const hachi_tokenizer *t, const char *a, size_t na, const char *b, size_t nb) {
    return mix32(fnv1a(b, nb, fnv1a(" ", 1, fnv1a(a, na, t->seed))));
}

static uint32_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c <<= 1;
    return (uint32_t)c;
}

static int32_t find_hashed(const hachi_tokenizer *t, uint32_t h, const char *s, size_t n) {
    for (uint32_t i = h & t->tok_mask;; i = (i + 1) & t->tok_mask) {
        const tok_slot *e = &t->tok_hash[i];
        if (!e->id1) return -1;
        if (e->hash != h) continue;
        const hachi_gguf_str *p = &t->pieces[e->id1 - 1];
        if (p->len == n && (n == 0 || !memcmp(p->ptr, s, n))) return (int32_t)(e->id1 - 1);
    }
}

int32_t hachi_tok_find_span(const hachi_tokenizer *t, const char *s, size_t n) {
    return find_hashed(t, hachi_tok_hash(t, s, n), s, n);
}

int32_t hachi_tok_find_merge(const hachi_tokenizer *t, const char *a, size_t na, size_t nb) {
    if (!t->merges) return -1;
    uint32_t h = merge_hash(t, a, na, a + na, nb);
    for (uint32_t i = h & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const merge_slot *m = &t->merges[i];
        if (m->rank < 0) return -1;
        if (m->hash != h) continue;
        const hachi_gguf_str *ms = &t->merge_strs[m->rank];
        if (ms->len == na + 1 + nb && ms->ptr[na] == ' ' && !memcmp(ms->ptr, a, na) &&
            !memcmp(ms->ptr + na + 1, a + na, nb) && (na < 2 || !memchr(ms->ptr + 1, ' ', na - 1)))
            return m->rank;   /* (the rule splits at its first space after the first byte) */
    }
}

/* ---- UTF-8 ------------------------------------------------------------------------------- */

size_t hachi_utf8_len(unsigned char c) {
    static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

size_t hachi_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    size_t len;
    uint32_t v, lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        unsigned char d = s[i];
        if (d < (i == 1 ? lo : 0x80) || d > (i == 1 ? hi : 0xBF)) return 0;
        v = v << 6 | (d & 0x3F);
    }
    *cp = v;
    return len;
}

size_t hachi_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- loading ---------------------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int parse_byte_piece(const hachi_gguf_str *p) {
    static const char hex[] = "0123456789ABCDEF";
    if (p->len != 6 || memcmp(p->ptr, "<0x", 3) || p->ptr[5] != '>') return -1;
    const char *h1 = memchr(hex, p->ptr[3], 16), *h2 = memchr(hex, p->ptr[4], 16);   // NOLINT(bugprone-not-null-terminated-result): the 16 digits, not the NUL
    if (!h1 || !h2 || !p->ptr[3] || !p->ptr[4]) return -1;
    return (int)((h1 - hex) * 16 + (h2 - hex));
}

static hachi_status get_id(const hachi_gguf *g, const char *key, int32_t n_vocab, int32_t *out) {
    const hachi_gguf_value *v = hachi_gguf_get(g, key);
    int64_t id;
    if (!v) return HACHI_OK;
    if (!hachi_gguf_get_i64(g, key, &id))
        return hachi_fail(HACHI_ERR_FORMAT, "%s: expected an integer token id", key);
    if (id == -1 || id == 0xFFFFFFFFLL) { *out = -1; return HACHI_OK; }
    if (id < 0 || id >= n_vocab)
        return hachi_fail(HACHI_ERR_FORMAT, "%s = %lld is outside the vocabulary (%d tokens)", key,
                          (long long)id, n_vocab);
    *out = (int32_t)id;
    return HACHI_OK;
}

/* Merge rules keyed by their text: a rule "l r" applies to two adjacent symbols whose
 * texts are l and r (as llama.cpp compares strings; parts need not be tokens). */
static hachi_status load_merges(hachi_tokenizer *t, const hachi_gguf_value *mv) {
    const char *key = "tokenizer.ggml.merges";
    if (mv->type != HACHI_GGUF_ARRAY || mv->arr.type != HACHI_GGUF_STRING)
        return hachi_fail(HACHI_ERR_FORMAT, "%s: expected an array of strings", key);
    if (mv->arr.n >= INT32_MAX / 4) return hachi_fail(HACHI_ERR_FORMAT, "%s: too many entries", key);
    uint32_t size = pow2_at_least(mv->arr.n * 2 + 1);
    t->merges = hachi_malloc((size_t)size * sizeof *t->merges);
    if (!t->merges) return HACHI_ERR_NOMEM;
    memset(t->merges, 0xff, (size_t)size * sizeof *t->merges);   /* rank -1 everywhere */
    t->merge_mask = size - 1;
    t->merge_strs = mv->arr.strs;
    t->n_merges_total = (int32_t)mv->arr.n;
    for (uint64_t i = 0; i < mv->arr.n; i++) {
        const hachi_gguf_str *s = &mv->arr.strs[i];
        const char *sp = s->len > 1 ? memchr(s->ptr + 1, ' ', s->len - 1) : NULL;
        if (!sp)
            return hachi_fail(HACHI_ERR_FORMAT, "%s[%llu]: '%.*s' is not two non-empty parts around a space", key,
                              (unsigned long long)i, (int)HACHI_MIN(s->len, 64), s->len ? s->ptr : "");
        uint32_t h = hachi_tok_hash(t, s->ptr, s->len);
        for (uint32_t j = h & t->merge_mask;; j = (j + 1) & t->merge_mask) {
            merge_slot *m = &t->merges[j];
            if (m->rank < 0) { *m = (merge_slot){h, (int32_t)i}; t->n_merges++; break; }
            const hachi_gguf_str *o = &t->merge_strs[m->rank];
            if (m->hash == h && o->len == s->len && !memcmp(o->ptr, s->ptr, s->len)) break;   /* duplicate: first wins */
        }
    }
    return HACHI_OK;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

bool hachi_tok_has_pre_space(const hachi_tokenizer *t, uint32_t cp) {
    return t->n_pre_space && bsearch(&cp, t->pre_space, (size_t)t->n_pre_space, sizeof cp, cmp_u32);
}

/* Record the code point before each inner U+2581 of s[0..n) (see pre_space). */
static hachi_status note_pre_space(hachi_tokenizer *t, const char *s, size_t n, int32_t *cap) {
    for (size_t q = 1; q + 3 <= n; q++) {
        const char *hit = memmem(s + q, n - q, "\xe2\x96\x81", 3);
        if (!hit) break;
        q = (size_t)(hit - s);
        size_t b = q;
        while (b > 0 && q - b < 4 && ((unsigned char)s[b - 1] & 0xC0) == 0x80) b--;
        if (b > 0) b--;
        uint32_t cp;
        size_t l = hachi_utf8_decode((const unsigned char *)s + b, q - b, &cp);
        if (l != q - b) { t->no_split = true; continue; }   /* not a whole code point: never split */
        if (cp == 0x2581) continue;
        if (t->n_pre_space == *cap) {
            int32_t c = *cap ? 2 * *cap : 16;
            uint32_t *np = hachi_realloc(t->pre_space, (size_t)c * sizeof *np);
            if (!np) return HACHI_ERR_NOMEM;
            t->pre_space = np;
            *cap = c;
        }
        t->pre_space[t->n_pre_space++] = cp;   /* (sorted and made unique once, by find_pre_space) */
    }
    return HACHI_OK;
}

/* Where no piece (SPM) or merge result (BPE) joins a character to a following U+2581,
 * no merge can cross that boundary: the merge loop then runs on the pieces between
 * such boundaries separately (same result, small heaps on long texts). */
static hachi_status collect_pre_space(hachi_tokenizer *t) {
    int32_t cap = 0;
    hachi_status st;
    char buf[1024];
    if (t->kind == HACHI_TOK_SPM) {
        for (int32_t i = 0; i < t->n_vocab; i++)
            if ((st = note_pre_space(t, t->pieces[i].ptr, t->pieces[i].len, &cap))) return st;
        return HACHI_OK;
    }
    for (int32_t i = 0; i < t->n_merges_total; i++) {
        const hachi_gguf_str *m = &t->merge_strs[i];
        if (m->len < 4 || !memmem(m->ptr + 1, m->len - 1, "\xe2\x96\x81", 3)) continue;   /* no inner U+2581 */
        const char *sp = memchr(m->ptr + 1, ' ', m->len - 1);
        size_t nl = (size_t)(sp - m->ptr), n = m->len - 1;
        if (n > sizeof buf) {   /* too long to join here: splitting stays safe only if we give up */
            t->n_pre_space = 0;
            hachi_free(t->pre_space);
            t->pre_space = NULL;
            t->no_split = true;
            return HACHI_OK;
        }
        memcpy(buf, m->ptr, nl);
        memcpy(buf + nl, sp + 1, n - nl);
        if ((st = note_pre_space(t, buf, n, &cap))) return st;
    }
    return HACHI_OK;
}

/* collect_pre_space's code points, sorted and each once (one sort: sorting after each new one
 * took a minute for a vocabulary of 50000 such pieces) */
static hachi_status find_pre_space(hachi_tokenizer *t) {
    hachi_status st = collect_pre_space(t);
    if (st || !t->n_pre_space) return st;
    qsort(t->pre_space, (size_t)t->n_pre_space, sizeof *t->pre_space, cmp_u32);
    int32_t k = 1;
    for (int32_t i = 1; i < t->n_pre_space; i++)
        if (t->pre_space[i] != t->pre_space[k - 1]) t->pre_space[k++] = t->pre_space[i];
    t->n_pre_space = k;
    return HACHI_OK;
}

static void find_eog(hachi_tokenizer *t) {
    static const char *const names[] = {"<end_of_turn>", "<turn|>", "<|tool_response>", "<eot_id>",
                                        "<|eot_id|>", "<|im_end|>", "<|end|>"};
    if (t->eos >= 0) t->eog[t->n_eog++] = t->eos;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int32_t id = hachi_tokenizer_find(t, names[i]);
        if (id >= 0 && id != t->eos && t->n_eog < 16) t->eog[t->n_eog++] = id;
    }
}

hachi_status hachi_tokenizer_load(const hachi_gguf *g, hachi_tokenizer **out) {
    hachi_gguf_str model;
    hachi_status st;
    *out = NULL;
    if (!hachi_gguf_get_str(g, "tokenizer.ggml.model", &model))
        return hachi_fail(HACHI_ERR_FORMAT, hachi_gguf_get(g, "tokenizer.ggml.model")
                                                ? "tokenizer.ggml.model is not a string"
                                                : "missing key tokenizer.ggml.model (no tokenizer in this GGUF)");
    int kind;
    if (hachi_gguf_str_eq(model, "llama")) kind = HACHI_TOK_SPM;
    else if (hachi_gguf_str_eq(model, "gpt2")) kind = HACHI_TOK_GPT2;
    else if (hachi_gguf_str_eq(model, "gemma4")) kind = HACHI_TOK_GEMMA4;
    else
        return hachi_fail(HACHI_ERR_UNSUPPORTED, "tokenizer.ggml.model '%.*s' is not supported (llama, gpt2, gemma4)",
                          (int)HACHI_MIN(model.len, 64), model.ptr);

    const hachi_gguf_value *tv = hachi_gguf_get(g, "tokenizer.ggml.tokens");
    if (!tv) return hachi_fail(HACHI_ERR_FORMAT, "missing key tokenizer.ggml.tokens");
    if (tv->type != HACHI_GGUF_ARRAY || tv->arr.type != HACHI_GGUF_STRING || tv->arr.n == 0 ||
        tv->arr.n >= INT32_MAX / 4)
        return hachi_fail(HACHI_ERR_FORMAT, "tokenizer.ggml.tokens: expected a non-empty array of strings");

    hachi_tokenizer *t = hachi_calloc(1, sizeof *t);
    if (!t) return HACHI_ERR_NOMEM;
    t->kind = kind;
    if (getrandom(&t->seed, sizeof t->seed, GRND_NONBLOCK) != (ssize_t)sizeof t->seed)   /* (no entropy yet: still varies) */
        t->seed = (uint32_t)((uintptr_t)t ^ (uintptr_t)hachi_time_ms() * 2654435761u);
    t->n_vocab = (int32_t)tv->arr.n;
    t->pieces = tv->arr.strs;
    t->bos = t->eos = t->unk = -1;
    int32_t n = t->n_vocab;

    t->scores = hachi_calloc((size_t)n, sizeof *t->scores);
    t->types = hachi_malloc((size_t)n);
    uint32_t hsize = pow2_at_least((uint64_t)n * 2 + 1);
    t->tok_hash = hachi_calloc(hsize, sizeof *t->tok_hash);
    t->tok_mask = hsize - 1;
    if (!t->scores || !t->types || !t->tok_hash) { st = HACHI_ERR_NOMEM; goto fail; }

    /* piece -> id; on duplicate pieces the last id wins (as llama.cpp's map assignment) */
    for (int32_t i = 0; i < n; i++) {
        const hachi_gguf_str *p = &t->pieces[i];
        if (p->len > (uint64_t)t->max_piece) t->max_piece = (int32_t)HACHI_MIN(p->len, (uint64_t)INT32_MAX);
        uint32_t h = hachi_tok_hash(t, p->ptr, p->len);
        for (uint32_t j = h & t->tok_mask;; j = (j + 1) & t->tok_mask) {
            tok_slot *e = &t->tok_hash[j];
            if (!e->id1) { *e = (tok_slot){(uint32_t)i + 1, h}; break; }
            const hachi_gguf_str *q = &t->pieces[e->id1 - 1];
            if (e->hash == h && q->len == p->len && (p->len == 0 || !memcmp(q->ptr, p->ptr, p->len))) {
                e->id1 = (uint32_t)i + 1;
                break;
            }
        }
    }

    const hachi_gguf_value *sv = hachi_gguf_get(g, "tokenizer.ggml.scores");
    if (sv) {
        if (sv->type != HACHI_GGUF_ARRAY || sv->arr.n != (uint64_t)n) {
            st = sv->type != HACHI_GGUF_ARRAY
                     ? hachi_fail(HACHI_ERR_FORMAT, "tokenizer.ggml.scores is not an array")
                     : hachi_fail(HACHI_ERR_FORMAT, "tokenizer.ggml.scores: %llu entries for %d tokens",
                                  (unsigned long long)sv->arr.n, n);
            goto fail;
        }
        for (int32_t i = 0; i < n; i++) {
            double d;
            if (!hachi_gguf_arr_f64(sv, (uint64_t)i, &d)) {
                st = hachi_fail(HACHI_ERR_FORMAT, "tokenizer.ggml.scores: element %d is not a number", i);
                goto fail;
            }
            t->scores[i] = (float)d;
        }
    }

    for (int i = 0; i < 256; i++) t->byte_tok[i] = -1;
    const hachi_gguf_value *yv = hachi_gguf_get(g, "tokenizer.ggml.token_type");
    if (yv) {
        if (yv->type != HACHI_GGUF_ARRAY || yv->arr.n != (uint64_t)n) {
            st = yv->type != HACHI_GGUF_ARRAY
                     ? hachi_fail(HACHI_ERR_FORMAT, "tokenizer.ggml.token_type is not an array")
                     : hachi_fail(HACHI_ERR_FORMAT, "tokenizer.ggml.token_type: %llu entries for %d tokens",
                                  (unsigned long long)yv->arr.n, n);
            goto fail;
        }
        for (int32_t i = 0; i < n; i++) {
            int64_t ty;
            if (!hachi_gguf_arr_i64(yv, (uint64_t)i, &ty) || ty < 0 || ty > TT_BYTE) {
                st = hachi_fail(HACHI_ERR_FORMAT, "tokenizer.ggml.token_type: element %d is not a token type (0-6)", i);
                goto fail;
            }
            t->types[i] = (uint8_t)ty;
        }
    } else {
        memset(t->types, TT_NORMAL, (size_t)n);
    }
    for (int32_t i = 0; i < n; i++) {
        int b = kind == HACHI_TOK_GPT2 ? -1 : parse_byte_piece(&t->pieces[i]);
        if (b >= 0 && (!yv || t->types[i] == TT_BYTE)) { t->byte_tok[b] = i; if (!yv) t->types[i] = TT_BYTE; }
    }

    if (kind == HACHI_TOK_SPM) { t->bos = 1 < n ? 1 : -1; t->eos = 2 < n ? 2 : -1; t->unk = 0; }
    if ((st = get_id(g, "tokenizer.ggml.bos_token_id", n, &t->bos)) ||
        (st = get_id(g, "tokenizer.ggml.eos_token_id", n, &t->eos)) ||
        (st = get_id(g, "tokenizer.ggml.unknown_token_id", n, &t->unk)))
        goto fail;
    if (!yv) {   /* no types stored: the special ids are at least control tokens */
        if (t->bos >= 0) t->types[t->bos] = TT_CONTROL;
        if (t->eos >= 0) t->types[t->eos] = TT_CONTROL;
        if (t->unk >= 0) t->types[t->unk] = TT_UNKNOWN;
    }
    t->add_bos = kind != HACHI_TOK_GPT2;
    t->add_space_prefix = kind == HACHI_TOK_SPM;
    static const char *const flags[2] = {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix"};
    for (int i = 0; i < 2; i++)
        if (!hachi_gguf_get_bool(g, flags[i], i ? &t->add_space_prefix : &t->add_bos) && hachi_gguf_get(g, flags[i])) {
            st = hachi_fail(HACHI_ERR_FORMAT, "%s is not a bool", flags[i]);
            goto fail;
        }

    if (kind != HACHI_TOK_SPM) {
        const hachi_gguf_value *mv = hachi_gguf_get(g, "tokenizer.ggml.merges");
        if (!mv) { st = hachi_fail(HACHI_ERR_FORMAT, "missing key tokenizer.ggml.merges (needed by '%.*s')",
                                   (int)model.len, model.ptr); goto fail; }
        if ((st = load_merges(t, mv))) goto fail;
    }

    if (kind == HACHI_TOK_GPT2) {
        int k = 0;
        for (int i = 0; i < 324; i++) t->cp_byte[i] = -1;
        for (int b = 0; b < 256; b++) {
            bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
            t->byte_cp[b] = (uint16_t)(printable ? b : 256 + k++);
            t->cp_byte[t->byte_cp[b]] = (int16_t)b;
        }
    }

    int32_t ns = 0;
    for (int32_t i = 0; i < n; i++) {
        int ty = t->types[i];
        if ((ty == TT_CONTROL || ty == TT_USER || ty == TT_UNKNOWN) && t->pieces[i].len) ns++;
    }
    /* longest first, then by id: key = (~len, id) */
    uint64_t *keys = hachi_malloc((size_t)HACHI_MAX(ns, 1) * sizeof *keys);
    t->specials = hachi_malloc((size_t)HACHI_MAX(ns, 1) * sizeof *t->specials);
    if (!keys || !t->specials) { hachi_free(keys); st = HACHI_ERR_NOMEM; goto fail; }
    for (int32_t i = 0; i < n; i++) {
        int ty = t->types[i];
        uint64_t len = HACHI_MIN(t->pieces[i].len, (uint64_t)UINT32_MAX);
        if ((ty == TT_CONTROL || ty == TT_USER || ty == TT_UNKNOWN) && len)
            keys[t->n_specials++] = (uint64_t)(UINT32_MAX - (uint32_t)len) << 32 | (uint32_t)i;
    }
    qsort(keys, (size_t)t->n_specials, sizeof *keys, cmp_u64);
    if (kind != HACHI_TOK_GPT2 && (st = find_pre_space(t))) { hachi_free(keys); goto fail; }
    for (int32_t i = 0; i < t->n_specials; i++) t->specials[i] = (int32_t)(keys[i] & 0xFFFFFFFFu);
    hachi_free(keys);
    find_eog(t);
    *out = t;
    return HACHI_OK;
fail:
    hachi_tokenizer_free(t);
    return st;
}

void hachi_tokenizer_free(hachi_tokenizer *t) {
    if (!t) return;
    hachi_free(t->scores);
    hachi_free(t->types);
    hachi_free(t->tok_hash);
    hachi_free(t->merges);
    hachi_free(t->specials);
    hachi_free(t->pre_space);
    hachi_free(t);
}

/* ---- queries ------------------------------------------------------------------------------ */

int     hachi_tokenizer_kind(const hachi_tokenizer *t) { return t ? t->kind : -1; }
int32_t hachi_tokenizer_n_vocab(const hachi_tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t hachi_tokenizer_bos(const hachi_tokenizer *t) { return t ? t->bos : -1; }
int32_t hachi_tokenizer_eos(const hachi_tokenizer *t) { return t ? t->eos : -1; }
bool    hachi_tokenizer_add_bos(const hachi_tokenizer *t) { return t && t->add_bos; }
bool    hachi_tokenizer_strips_leading_space(const hachi_tokenizer *t) {
    return t && t->kind == HACHI_TOK_SPM && t->add_space_prefix;
}
int32_t hachi_tokenizer_max_piece_len(const hachi_tokenizer *t) { return t ? t->max_piece : 0; }
int     hachi_tokenizer_token_type(const hachi_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab ? t->types[id] : -1;
}

bool hachi_tokenizer_is_eog(const hachi_tokenizer *t, int32_t id) {
    if (!t || id < 0) return false;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

bool hachi_tokenizer_is_control(const hachi_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab && t->types[id] == TT_CONTROL;
}

int32_t hachi_tokenizer_find(const hachi_tokenizer *t, const char *text) {
    return t && text ? hachi_tok_find_span(t, text, strlen(text)) : -1;
}

const char *hachi_tokenizer_piece(const hachi_tokenizer *t, int32_t id, size_t *len) {
    if (!t || id < 0 || id >= t->n_vocab) { if (len) *len = 0; return NULL; }
    if (len) *len = (size_t)t->pieces[id].len;
    return t->pieces[id].ptr;
}

/* ---- decoding ------------------------------------------------------------------------------ */

int32_t hachi_tokenizer_token_text(const hachi_tokenizer *t, int32_t id, char *buf, int32_t cap) {
    if (!t || id < 0 || id >= t->n_vocab || cap < 0) return -1;
    const hachi_gguf_str *p = &t->pieces[id];
    int ty = t->types[id];
    int32_t k = 0;
#define PUT(c) do { char c_ = (char)(c); if (k < cap) buf[k] = c_; k++; } while (0)
    if (ty == TT_BYTE && t->kind != HACHI_TOK_GPT2) {
        int b = parse_byte_piece(p);
        if (b >= 0) { PUT(b); return HACHI_MIN(k, cap); }
    }
    if (ty == TT_NORMAL || ty == TT_UNDEF) {
        if (t->kind == HACHI_TOK_GPT2) {
            for (size_t i = 0; i < p->len;) {
                uint32_t cp;
                size_t l = hachi_utf8_decode((const unsigned char *)p->ptr + i, p->len - i, &cp);
                if (l && cp < 324 && t->cp_byte[cp] >= 0) { PUT(t->cp_byte[cp]); i += l; continue; }
                if (!l) l = 1;
                for (size_t j = 0; j < l; j++) PUT(p->ptr[i + j]);
                i += l;
            }
        } else {
            for (size_t i = 0; i < p->len;) {
                if (i + 3 <= p->len && !memcmp(p->ptr + i, "\xe2\x96\x81", 3)) { PUT(' '); i += 3; }
                else PUT(p->ptr[i++]);
            }
        }
        return HACHI_MIN(k, cap);
    }
    for (size_t i = 0; i < p->len; i++) PUT(p->ptr[i]);   /* control, user-defined, unknown, unused: raw */
#undef PUT
    return HACHI_MIN(k, cap);
}

/* Bytes of s[0..n) that form a valid start of a UTF-8 sequence (0 when s[0] cannot
 * begin one); *need is the length of the whole sequence. */
static size_t utf8_valid_prefix(const unsigned char *s, size_t n, size_t *need) {
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    if (c < 0x80) { *need = 1; return 1; }
    if (c >= 0xC2 && c <= 0xDF) *need = 2;
    else if (c >= 0xE0 && c <= 0xEF) { *need = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { *need = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else { *need = 1; return 0; }
    size_t k = 1;
    while (k < *need && k < n && s[k] >= (k == 1 ? lo : 0x80) && s[k] <= (k == 1 ? hi : 0xBF)) k++;
    return k;
}

/* Streaming UTF-8 over b[0..n) (pending bytes first): whole code points go to out,
 * each maximal invalid subpart becomes U+FFFD, and an incomplete sequence at the
 * end is kept in the detokenizer (unless final, when it too becomes U+FFFD). */
static int32_t utf8_drain(hachi_detok_state *d, const unsigned char *b, size_t n, bool final, char *out, int32_t cap) {
    int32_t w = 0;
    size_t i = 0;
    d->n_pending = 0;
    while (i < n) {
        size_t need, k = utf8_valid_prefix(b + i, n - i, &need);
        const void *src = b + i;
        size_t len = k;
        if (k < need) {                      /* invalid or cut short */
            if (k && i + k == n && !final) { /* a valid start that runs to the end: wait */
                memcpy(d->pending, b + i, k);
                d->n_pending = (int32_t)k;
                break;
            }
            src = "\xef\xbf\xbd";
            len = 3;
            if (!k) k = 1;
        }
        if (w + (int32_t)len > cap) break;   /* out of room: the rest is dropped */
        memcpy(out + w, src, len);
        w += (int32_t)len;
        i += k;
    }
    return w;
}

void hachi_tokenizer_detok_init(hachi_detok_state *d, bool at_start) {
    memset(d, 0, sizeof *d);
    d->at_start = at_start;
}

int32_t hachi_tokenizer_detok_push(const hachi_tokenizer *t, hachi_detok_state *d, int32_t id, char *out, int32_t cap) {
    unsigned char buf[8 + 1024];
    if (!t || !d || id < 0 || id >= t->n_vocab || t->types[id] == TT_CONTROL) return 0;
    int32_t np = HACHI_MIN(HACHI_MAX(d->n_pending, 0), 8);
    memcpy(buf, d->pending, (size_t)np);
    int32_t n = hachi_tokenizer_token_text(t, id, (char *)buf + np, 1024);
    if (n <= 0) return 0;
    unsigned char *s = buf + np;
    if (d->at_start) {
        d->at_start = false;
        if (hachi_tokenizer_strips_leading_space(t) && s[0] == ' ') { n--; memmove(s, s + 1, (size_t)n); }
    }
    return utf8_drain(d, buf, (size_t)np + (size_t)n, false, out, cap);
}

int32_t hachi_tokenizer_detok_flush(const hachi_tokenizer *t, hachi_detok_state *d, char *out, int32_t cap) {
    unsigned char buf[8];
    (void)t;
    if (!d) return 0;
    int32_t np = HACHI_MIN(HACHI_MAX(d->n_pending, 0), 8);
    memcpy(buf, d->pending, (size_t)np);
    return utf8_drain(d, buf, (size_t)np, true, out, cap);
}
