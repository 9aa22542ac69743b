/* tokenize: text -> token ids for the three tokenizer kinds (tokenizer.c
 * loads the vocabulary). All three share one merge loop: a heap of adjacent-
 * symbol bigrams over a linked list of symbols, SPM by score, BPE by merge rank;
 * pieces between hard boundaries are cached by text. "gpt2" first cuts the text
 * with GPT-2's pre-tokenizer regex (hand-coded over Unicode range tables);
 * control / unknown tokens are matched whole when parse_special is on,
 * user-defined tokens always (as llama.cpp does). */
#include <stdlib.h>
#include <string.h>
#include "tokenizer_impl.h"
#include "unicode_tables.h"
#include "util.h"

/* ---- Unicode classes (GPT-2 pre-tokenizer) ------------------------------------------------ */

static bool in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return true;
    }
    return false;
}

enum { CF_LETTER = 1, CF_NUMBER = 2, CF_SPACE = 4, CF_OTHER = 8 };   /* 0 = past the fragment */

static unsigned cp_flags(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CF_LETTER;
        if (cp >= '0' && cp <= '9') return CF_NUMBER;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CF_SPACE;
        return CF_OTHER;
    }
    /* llama.cpp's whitespace set */
    if (cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
        cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000)
        return CF_SPACE;
    if (in_ranges(hachi_ucd_letter, sizeof hachi_ucd_letter / sizeof hachi_ucd_letter[0], cp)) return CF_LETTER;
    if (in_ranges(hachi_ucd_number, sizeof hachi_ucd_number / sizeof hachi_ucd_number[0], cp)) return CF_NUMBER;
    return CF_OTHER;
}

/* ---- encoding: shared merge loop ------------------------------------------------------- */

typedef struct {
    int32_t prev, next;     /* linked list over live symbols; -1 = none */
    uint32_t off, n;        /* bytes text[off..off+n); n = 0 once merged away */
} tsym;

typedef struct {
    double key;             /* higher first: SPM score, BPE -rank */
    int32_t left, right;
    uint32_t size;          /* bytes of the pair when queued (stale check) */
} tbigram;

typedef struct {            /* one cached piece: key text and its ids in the arenas */
    uint32_t hash, key_off, ids_off;
    uint16_t key_len, n_ids;    /* key_len 0 = empty slot */
} cache_slot;

enum { CACHE_SLOTS = 8192, CACHE_MAX_KEY = 64 };

typedef struct {            /* scratch of one encode call */
    tsym *sym; size_t cap_sym;
    tbigram *heap; size_t n_heap, cap_heap;
    int32_t *out; size_t n_out, cap_out;
    char *buf; size_t cap_buf;
    /* pieces between hard boundaries repeat (words): their ids, by text */
    cache_slot *cache; size_t n_cache;
    char *ckeys; size_t n_ckeys, cap_ckeys;
    int32_t *cids; size_t n_cids, cap_cids;
} work;

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = hachi_realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static hachi_status emit(work *w, int32_t id) {
    if (!grow((void **)&w->out, &w->cap_out, w->n_out + 1, sizeof *w->out)) return HACHI_ERR_NOMEM;
    w->out[w->n_out++] = id;
    return HACHI_OK;
}

static bool bigram_before(const tbigram *a, const tbigram *b) {
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

static hachi_status heap_push(work *w, tbigram b) {
    if (!grow((void **)&w->heap, &w->cap_heap, w->n_heap + 1, sizeof *w->heap)) return HACHI_ERR_NOMEM;
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&b, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = b;
    return HACHI_OK;
}

static tbigram heap_pop(work *w) {
    tbigram top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&w->heap[c + 1], &w->heap[c])) c++;
        if (!bigram_before(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

/* Queue the pair (l, r) if it can merge: SPM when the joined text is a token (by
 * its score), BPE when the two tokens have a merge rule (by rank). */
static hachi_status try_pair(const hachi_tokenizer *t, work *w, const char *text, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return HACHI_OK;
    const tsym *L = &w->sym[l], *R = &w->sym[r];
    tbigram b = {.left = l, .right = r, .size = L->n + R->n};
    if (t->kind == HACHI_TOK_SPM) {
        int32_t id = hachi_tok_find_span(t, text + L->off, b.size);
        if (id < 0) return HACHI_OK;
        b.key = t->scores[id];
    } else {
        int32_t rank = hachi_tok_find_merge(t, text + L->off, L->n, R->n);
        if (rank < 0) return HACHI_OK;
        b.key = -(double)rank;
    }
    return heap_push(w, b);
}

/* One byte as a token: <0xNN>, else the one-byte piece, else <unk>, else nothing. */
static hachi_status emit_byte(const hachi_tokenizer *t, work *w, unsigned char c) {
    int32_t id = t->byte_tok[c];
    if (id < 0) id = hachi_tok_find_span(t, (const char *)&c, 1);
    if (id < 0) id = t->unk;
    return id >= 0 ? emit(w, id) : HACHI_OK;
}

/* Merge text[0..len) (already escaped / byte-mapped) and append its tokens. */
static hachi_status merge_text(const hachi_tokenizer *t, work *w, const char *text, size_t len) {
    hachi_status st;
    if (!len) return HACHI_OK;
    if (len >= INT32_MAX) return hachi_fail(HACHI_ERR_INVALID_ARG, "tokenize: text of %zu bytes is too long", len);
    if (!grow((void **)&w->sym, &w->cap_sym, len, sizeof *w->sym)) return HACHI_ERR_NOMEM;
    int32_t n = 0;
    for (size_t off = 0; off < len;) {
        size_t cl = HACHI_MIN(hachi_utf8_len((unsigned char)text[off]), len - off);
        w->sym[n] = (tsym){n - 1, n + 1, (uint32_t)off, (uint32_t)cl};
        off += cl;
        n++;
    }
    w->sym[n - 1].next = -1;
    w->n_heap = 0;
    for (int32_t i = 1; i < n; i++)
        if ((st = try_pair(t, w, text, i - 1, i))) return st;
    while (w->n_heap) {
        tbigram b = heap_pop(w);
        tsym *L = &w->sym[b.left], *R = &w->sym[b.right];
        if (!L->n || !R->n || L->n + R->n != b.size) continue;   /* stale */
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0) w->sym[R->next].prev = b.left;
        if ((st = try_pair(t, w, text, L->prev, b.left)) || (st = try_pair(t, w, text, b.left, L->next))) return st;
    }
    for (int32_t i = 0; i != -1; i = w->sym[i].next) {
        const tsym *s = &w->sym[i];
        int32_t id = hachi_tok_find_span(t, text + s->off, s->n);
        if (id >= 0) { if ((st = emit(w, id))) return st; continue; }
        for (uint32_t k = 0; k < s->n; k++)
            if ((st = emit_byte(t, w, (unsigned char)text[s->off + k]))) return st;
    }
    return HACHI_OK;
}

/* merge_text through the per-call cache of short pieces. */
static hachi_status merge_cached(const hachi_tokenizer *t, work *w, const char *text, size_t len) {
    if (len == 0 || len > CACHE_MAX_KEY) return merge_text(t, w, text, len);
    if (!w->cache && !(w->cache = hachi_calloc(CACHE_SLOTS, sizeof *w->cache))) return HACHI_ERR_NOMEM;
    uint32_t h = hachi_tok_hash(t, text, len), i;
    for (i = h & (CACHE_SLOTS - 1); w->cache[i].key_len; i = (i + 1) & (CACHE_SLOTS - 1)) {
        const cache_slot *c = &w->cache[i];
        /* (a used slot means its key is in ckeys: a new cache's slots are zeroed) */
        if (c->hash == h && c->key_len == len && !memcmp(w->ckeys + c->key_off, text, len)) {   // NOLINT(clang-analyzer-core.NonNullParamChecker)
            if (!grow((void **)&w->out, &w->cap_out, w->n_out + c->n_ids, sizeof *w->out)) return HACHI_ERR_NOMEM;
            memcpy(w->out + w->n_out, w->cids + c->ids_off, c->n_ids * sizeof *w->out);
            w->n_out += c->n_ids;
            return HACHI_OK;
        }
    }
    size_t n0 = w->n_out, nids;
    hachi_status st = merge_text(t, w, text, len);
    if (st) return st;
    nids = w->n_out - n0;
    if (w->n_cache >= CACHE_SLOTS * 3 / 4 || nids > UINT16_MAX) return HACHI_OK;   /* full: just stop caching */
    if (!grow((void **)&w->ckeys, &w->cap_ckeys, w->n_ckeys + len, 1) ||
        !grow((void **)&w->cids, &w->cap_cids, w->n_cids + nids, sizeof *w->cids))
        return HACHI_ERR_NOMEM;
    memcpy(w->ckeys + w->n_ckeys, text, len);
    memcpy(w->cids + w->n_cids, w->out + n0, nids * sizeof *w->cids);
    w->cache[i] = (cache_slot){h, (uint32_t)w->n_ckeys, (uint32_t)w->n_cids, (uint16_t)len, (uint16_t)nids};
    w->n_ckeys += len;
    w->n_cids += nids;
    w->n_cache++;
    return HACHI_OK;
}

/* merge_text over the pieces between hard boundaries: a U+2581 symbol after a
 * symbol that is one code point no piece/merge puts before a U+2581. */
static hachi_status merge_split(const hachi_tokenizer *t, work *w, const char *text, size_t len) {
    hachi_status st;
    size_t start = 0, prev = 0, prev_len = 0;
    if (t->no_split) return merge_text(t, w, text, len);
    for (size_t off = 0; off < len;) {
        size_t cl = HACHI_MIN(hachi_utf8_len((unsigned char)text[off]), len - off);
        if (cl == 3 && off > start && !memcmp(text + off, "\xe2\x96\x81", 3)) {
            uint32_t cp;
            if (hachi_utf8_decode((const unsigned char *)text + prev, prev_len, &cp) == prev_len && cp != 0x2581 &&
                !hachi_tok_has_pre_space(t, cp)) {
                if ((st = merge_cached(t, w, text + start, off - start))) return st;
                start = off;
            }
        }
        prev = off;
        prev_len = cl;
        off += cl;
    }
    return merge_cached(t, w, text + start, len - start);
}

/* ---- encoding: per tokenizer kind ------------------------------------------------------- */

/* Spaces -> U+2581 into w->buf, with an optional leading U+2581. */
static hachi_status escape_spaces(work *w, const char *s, size_t n, bool prefix, size_t *out_len) {
    if (!grow((void **)&w->buf, &w->cap_buf, 3 * n + 3, 1)) return HACHI_ERR_NOMEM;
    size_t k = 0;
    if (prefix) { memcpy(w->buf, "\xe2\x96\x81", 3); k = 3; }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') { memcpy(w->buf + k, "\xe2\x96\x81", 3); k += 3; }
        else w->buf[k++] = s[i];
    }
    *out_len = k;
    return HACHI_OK;
}

/* GPT-2: the pre-tokenizer regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * over code points (an invalid byte counts as one "other" code point); each piece's
 * bytes are mapped to printable code points and merged. */
static hachi_status encode_gpt2(const hachi_tokenizer *t, work *w, const char *s, size_t n) {
    hachi_status st = HACHI_OK;
    uint32_t *cps = hachi_malloc((n + 1) * sizeof *cps);
    uint32_t *offs = hachi_malloc((n + 1) * sizeof *offs);
    unsigned char *fl = hachi_malloc(n + 1);
    if (!cps || !offs || !fl) { st = HACHI_ERR_NOMEM; goto out; }
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = hachi_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        offs[m] = (uint32_t)i;
        if (l) { cps[m] = cp; fl[m] = (unsigned char)cp_flags(cp); }
        else { cps[m] = 0xFFFD; fl[m] = CF_OTHER; l = 1; }
        m++;
        i += l;
    }
    offs[m] = (uint32_t)n;
    fl[m] = 0;
    cps[m] = 0;
#define CP(p) ((p) < m ? cps[p] : 0xFFFFFFFFu)
#define FL(p) ((p) < m ? fl[p] : 0u)
    for (size_t pos = 0; pos < m;) {
        uint32_t c = cps[pos];
        size_t end = 0;
        if (c == '\'' && pos + 1 < m) {
            uint32_t c1 = CP(pos + 1), c2 = CP(pos + 2);
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') end = pos + 2;
            else if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) end = pos + 3;
        }
        if (!end) {
            unsigned f2 = c == ' ' ? FL(pos + 1) : fl[pos];
            size_t p = pos + (c == ' ');
            if (f2 & CF_LETTER) { while (FL(p) & CF_LETTER) p++; end = p; }
            else if (f2 & CF_NUMBER) { while (FL(p) & CF_NUMBER) p++; end = p; }
            else if (f2 & CF_OTHER) { while (FL(p) & CF_OTHER) p++; end = p; }
            else {
                size_t k = 0;
                while (FL(pos + k) & CF_SPACE) k++;
                if (k > 1 && pos + k < m) end = pos + k - 1;     /* \s+(?!\S) */
                else if (k > 0) end = pos + k;                   /* \s+ */
                else end = pos + 1;
            }
        }
        /* map the piece's bytes to code points and merge */
        size_t b0 = offs[pos], b1 = offs[end];
        if (!grow((void **)&w->buf, &w->cap_buf, 2 * (b1 - b0) + 1, 1)) { st = HACHI_ERR_NOMEM; goto out; }
        size_t k = 0;
        for (size_t i = b0; i < b1; i++) k += hachi_utf8_encode(t->byte_cp[(unsigned char)s[i]], w->buf + k);
        if ((st = merge_cached(t, w, w->buf, k))) goto out;
        pos = end;
    }
#undef CP
#undef FL
out:
    hachi_free(cps);
    hachi_free(offs);
    hachi_free(fl);
    return st;
}

/* ---- special-token partition --------------------------------------------------------------- */

typedef struct { size_t off, len; int32_t tok; } frag;   /* tok -1 = raw text */

/* Whether [a, a + n) overlaps one of the plain ranges (encode_spans) */
static bool in_plain(const size_t *plain, int n_plain, size_t a, size_t n) {
    for (int i = 0; i < n_plain; i++)
        if (a < plain[2 * i] + plain[2 * i + 1] && a + n > plain[2 * i]) return true;
    return false;
}

/* Split text into raw fragments and whole special tokens, longest token first
 * (each token splits every raw fragment at its non-overlapping occurrences; a control token's
 * occurrence that overlaps a plain range stays text). Each token rewrites the fragment list in
 * one pass into a second list: linear in the fragments and its matches (splitting in place,
 * moving the list's tail at each match, took 14 s for 1.8 MB of "</s>x<s>y"). */
static hachi_status partition(const hachi_tokenizer *t, const char *text, size_t len, bool parse_special,
                              const size_t *plain, int n_plain, frag **out, size_t *n_out) {
    size_t cap = 8, n = 1, cap_g = 8, m;
    frag *f = hachi_malloc(cap * sizeof *f), *g = hachi_malloc(cap_g * sizeof *g);
    if (!f || !g) { hachi_free(f); hachi_free(g); return HACHI_ERR_NOMEM; }
    f[0] = (frag){0, len, -1};
    bool present[256] = {false};
    for (size_t i = 0; i < len; i++) present[(unsigned char)text[i]] = true;
    for (int32_t s = 0; s < t->n_specials; s++) {
        int32_t id = t->specials[s];
        int ty = t->types[id];
        if (!parse_special && ty != TT_USER) continue;
        const hachi_gguf_str *p = &t->pieces[id];
        if (p->len > len || !present[(unsigned char)p->ptr[0]]) continue;
        m = 0;
        for (size_t i = 0; i < n; i++) {
            size_t off = f[i].off, left = f[i].len;   /* the fragment's part not yet split */
            while (f[i].tok < 0 && left >= p->len) {
                const char *base = text + off, *hit = memmem(base, left, p->ptr, p->len);
                while (hit && ty != TT_USER && in_plain(plain, n_plain, (size_t)(hit - text), p->len)) {
                    const size_t from = (size_t)(hit - base) + 1;
                    hit = from + p->len <= left ? memmem(base + from, left - from, p->ptr, p->len) : NULL;
                }
                if (!hit) break;
                const size_t before = (size_t)(hit - base);
                if (!grow((void **)&g, &cap_g, m + 2, sizeof *g)) { hachi_free(f); hachi_free(g); return HACHI_ERR_NOMEM; }
                if (before) g[m++] = (frag){off, before, -1};
                g[m++] = (frag){off + before, p->len, id};
                off += before + p->len;
                left -= before + p->len;
            }
            if (!grow((void **)&g, &cap_g, m + 1, sizeof *g)) { hachi_free(f); hachi_free(g); return HACHI_ERR_NOMEM; }
            if (f[i].tok >= 0) g[m++] = f[i];
            else if (left) g[m++] = (frag){off, left, -1};
        }
        frag *x = f;   /* g is the list now; f takes the next rewrite */
        f = g, g = x;
        size_t c = cap;
        cap = cap_g, cap_g = c;
        n = m;
    }
    hachi_free(g);
    *out = f;
    *n_out = n;
    return HACHI_OK;
}

hachi_status hachi_tokenizer_encode(const hachi_tokenizer *t, const char *text, size_t len,
                                    bool add_bos, bool parse_special, int32_t **out, int32_t *n_out) {
    return hachi_tokenizer_encode_spans(t, text, len, add_bos, parse_special, NULL, 0, out, n_out);
}

hachi_status hachi_tokenizer_encode_spans(const hachi_tokenizer *t, const char *text, size_t len, bool add_bos,
                                          bool parse_special, const size_t *plain, int n_plain, int32_t **out,
                                          int32_t *n_out) {
    work w = {0};
    frag *f = NULL;
    size_t nf = 0;
    hachi_status st;
    *out = NULL;
    *n_out = 0;
    if (!t || (!text && len)) return hachi_fail(HACHI_ERR_INVALID_ARG, "tokenize: no tokenizer or no text");
    if (len >= INT32_MAX / 4) return hachi_fail(HACHI_ERR_INVALID_ARG, "tokenize: text of %zu bytes is too long", len);
    if (add_bos && t->bos >= 0 && (st = emit(&w, t->bos))) goto out;
    if (len && (st = partition(t, text, len, parse_special, plain, n_plain, &f, &nf))) goto out;
    bool prev_special = true;   /* SPM: a dummy prefix at the start and after a special token */
    for (size_t i = 0; i < nf; i++) {
        if (f[i].tok >= 0) {
            if ((st = emit(&w, f[i].tok))) goto out;
            prev_special = true;
            continue;
        }
        const char *s = text + f[i].off;
        size_t k;
        switch (t->kind) {
        case HACHI_TOK_SPM:
        case HACHI_TOK_GEMMA4:
            if ((st = escape_spaces(&w, s, f[i].len, t->add_space_prefix && prev_special, &k)) ||
                (st = merge_split(t, &w, w.buf, k)))
                goto out;
            break;
        default:
            if ((st = encode_gpt2(t, &w, s, f[i].len))) goto out;
        }
        prev_special = false;
    }
    if (!w.n_out && !grow((void **)&w.out, &w.cap_out, 1, sizeof *w.out)) { st = HACHI_ERR_NOMEM; goto out; }
    *out = w.out;
    *n_out = (int32_t)w.n_out;
    w.out = NULL;
    st = HACHI_OK;
out:
    hachi_free(f);
    hachi_free(w.sym);
    hachi_free(w.heap);
    hachi_free(w.buf);
    hachi_free(w.out);
    hachi_free(w.cache);
    hachi_free(w.ckeys);
    hachi_free(w.cids);
    return st;
}
