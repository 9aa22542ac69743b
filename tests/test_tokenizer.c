/* Tests of src/tokenizer.c and src/tokenize.c against vectors written by other implementations:
 * llama.cpp's test-tokenizer-0 files for the Llama SentencePiece and GPT-2 vocabs,
 * the Gemma vocabulary oracle (../shared/oracle/gemma4-vocab.tests.txt), the
 * stories260K reference ids; plus streaming detokenization over random splits,
 * loader errors, and the public hachi_tokenize / hachi_detok wrappers. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gguf.h"
#include "hachi.h"
#include "test.h"
#include "tokenizer.h"
#include "util.h"

/* ---- helpers ------------------------------------------------------------------------------ */

typedef struct { int32_t *v; int n, cap; } ids_t;

static void ids_push(ids_t *a, int32_t x) {
    if (a->n == a->cap) { a->cap = a->cap ? 2 * a->cap : 16; a->v = realloc(a->v, (size_t)a->cap * sizeof *a->v); }
    a->v[a->n++] = x;
}

static ids_t parse_ids(const char *s) {
    ids_t a = {0};
    char *end;
    for (;;) {
        while (*s == ' ') s++;
        if (*s < '0' || *s > '9') break;
        ids_push(&a, (int32_t)strtol(s, &end, 10));
        s = end;
    }
    return a;
}

static bool ids_eq(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && (na == 0 || !memcmp(a, b, (size_t)na * sizeof *a));
}

static void ids_str(char *buf, size_t cap, const int32_t *v, int n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < n && k + 16 < cap; i++) k += (size_t)snprintf(buf + k, cap - k, "%s%d", i ? " " : "", v[i]);
}

/* Printable form of text for failure messages. */
static const char *esc(const char *s, size_t n) {
    static char buf[4][512];
    static int r;
    char *b = buf[r++ & 3];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 8 < sizeof buf[0]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') k += (size_t)sprintf(b + k, "\\n");
        else if (c < 0x20 || c == 0x7f) k += (size_t)sprintf(b + k, "\\x%02x", c);
        else b[k++] = (char)c;
    }
    b[k] = 0;
    return b;
}

static bool load_vocab(const char *path, hachi_gguf **g, hachi_tokenizer **t) {
    *g = NULL;
    *t = NULL;
    hachi_status st = hachi_gguf_open(path, g);
    if (st) { test_fail(__FILE__, __LINE__, "open %s: %s", path, hachi_last_error()); return false; }
    st = hachi_tokenizer_load(*g, t);
    if (st) { test_fail(__FILE__, __LINE__, "load %s: %s", path, hachi_last_error()); hachi_gguf_free(*g); return false; }
    return true;
}

/* Concatenated text of ids through the streaming detokenizer. */
static char *detok_all(const hachi_tokenizer *t, const int32_t *ids, int n, size_t *len) {
    size_t cap = 64, k = 0;
    char *s = malloc(cap);
    hachi_detok_state d;
    hachi_tokenizer_detok_init(&d, true);
    char chunk[4096];
    for (int i = 0; i <= n; i++) {
        int32_t m = i < n ? hachi_tokenizer_detok_push(t, &d, ids[i], chunk, sizeof chunk)
                          : hachi_tokenizer_detok_flush(t, &d, chunk, sizeof chunk);
        if (k + (size_t)m + 1 > cap) {
            while (k + (size_t)m + 1 > cap) cap *= 2;
            char *more = realloc(s, cap);
            if (!more) { test_fail(__FILE__, __LINE__, "out of memory"); break; }
            s = more;
        }
        memcpy(s + k, chunk, (size_t)m);
        k += (size_t)m;
    }
    s[k] = 0;
    *len = k;
    return s;
}

/* Whether s[0..n) is entirely valid UTF-8. */
static bool valid_utf8(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        size_t l;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { l = 2; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { l = 3; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { l = 4; cp = c & 0x07; }
        else return false;
        if (i + l > n) return false;
        for (size_t j = 1; j < l; j++) {
            if ((u[i + j] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (u[i + j] & 0x3F);
        }
        if ((l == 3 && cp < 0x800) || (l == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += l;
    }
    return true;
}

/* ---- llama.cpp test-tokenizer-0 vectors ----------------------------------------------------- */

static void run_ggml_vocab(const char *name) {
    char rel[128], rel_in[128], rel_out[128];
    snprintf(rel, sizeof rel, "data/vocab/%s", name);
    snprintf(rel_in, sizeof rel_in, "data/vocab/%s.inp", name);
    snprintf(rel_out, sizeof rel_out, "data/vocab/%s.out", name);
    NEED_SHARED(path, rel);
    char p_in[1024], p_out[1024];
    snprintf(p_in, sizeof p_in, "%s", test_shared_path(rel_in));
    snprintf(p_out, sizeof p_out, "%s", test_shared_path(rel_out));
    size_t n_in, n_out;
    char *inp = test_read_file(p_in, &n_in), *outp = test_read_file(p_out, &n_out);
    hachi_gguf *g;
    hachi_tokenizer *t;
    CHECK(inp && outp);
    if (!inp || !outp || !load_vocab(path, &g, &t)) { free(inp); free(outp); return; }

    const char *sep = "\n__ggml_vocab_test__\n";
    size_t seplen = strlen(sep);
    char *p = inp, *q = outp;
    int n_cases = 0, n_bad = 0, n_bad_dec = 0;
    for (;;) {
        char *e = memmem(p, n_in - (size_t)(p - inp), sep, seplen);
        if (!e) break;
        char *nl = strchr(q, '\n');
        if (!nl) { CHECKF(0, "%s: fewer .out lines than .inp cases", name); break; }
        *nl = 0;
        ids_t want = parse_ids(q);
        q = nl + 1;
        size_t len = (size_t)(e - p);
        int32_t *got;
        int32_t n_got;
        hachi_status st = hachi_tokenizer_encode(t, p, len, false, false, &got, &n_got);
        CHECK(st == HACHI_OK);
        if (!st && !ids_eq(got, n_got, want.v, want.n)) {
            char a[2048], b[2048];
            ids_str(a, sizeof a, want.v, want.n);
            ids_str(b, sizeof b, got, n_got);
            CHECKF(0, "%s case %d '%s':\n      want %s\n      got  %s", name, n_cases, esc(p, len), a, b);
            n_bad++;
        }
        if (!st) {
            size_t dl;
            char *dec = detok_all(t, want.v, want.n, &dl);
            if (dl != len || memcmp(dec, p, len)) {
                CHECKF(0, "%s case %d decode: want '%s' got '%s'", name, n_cases, esc(p, len), esc(dec, dl));
                n_bad_dec++;
            }
            free(dec);
        }
        hachi_free(got);
        free(want.v);
        n_cases++;
        p = e + seplen;
    }
    fprintf(stderr, "    %s: %d cases, %d encode mismatches, %d decode mismatches\n", name, n_cases,
            n_bad, n_bad_dec);
    CHECK(n_cases >= 40);
    hachi_tokenizer_free(t);
    hachi_gguf_free(g);
    free(inp);
    free(outp);
}

TEST(tokenizer_llama_spm_vectors) { run_ggml_vocab("ggml-vocab-llama-spm.gguf"); }
TEST(tokenizer_gpt2_vectors) { run_ggml_vocab("ggml-vocab-gpt-2.gguf"); }

/* ---- Gemma oracle ---------------------------------------------------------------------------- */

/* Decode a JSON string literal starting at s (at the quote) into out; returns its length. */
static size_t json_str(const char *s, char *out) {
    size_t k = 0;
    if (*s != '"') return 0;
    for (s++; *s && *s != '"'; s++) {
        if (*s != '\\') { out[k++] = *s; continue; }
        s++;
        switch (*s) {
        case 'n': out[k++] = '\n'; break;
        case 't': out[k++] = '\t'; break;
        case 'r': out[k++] = '\r'; break;
        case 'b': out[k++] = '\b'; break;
        case 'f': out[k++] = '\f'; break;
        case 'u': {
            uint32_t cp = (uint32_t)strtoul((char[5]){s[1], s[2], s[3], s[4], 0}, NULL, 16);
            s += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF && s[1] == '\\' && s[2] == 'u') {
                uint32_t lo = (uint32_t)strtoul((char[5]){s[3], s[4], s[5], s[6], 0}, NULL, 16);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                s += 6;
            }
            if (cp < 0x80) out[k++] = (char)cp;
            else if (cp < 0x800) { out[k++] = (char)(0xC0 | cp >> 6); out[k++] = (char)(0x80 | (cp & 0x3F)); }
            else if (cp < 0x10000) {
                out[k++] = (char)(0xE0 | cp >> 12); out[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[k++] = (char)(0x80 | (cp & 0x3F));
            } else {
                out[k++] = (char)(0xF0 | cp >> 18); out[k++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                out[k++] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[k++] = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default: out[k++] = *s;
        }
    }
    out[k] = 0;
    return k;
}

typedef struct {
    char text[4096]; size_t len;
    ids_t plain, special, bos, fallback;   /* fallback.n == 0 && !has_fallback: "same" */
    bool has_fallback;
    char decoded[4096]; size_t dlen;
} gemma_case;

/* Reads the next block; false at the end. */
static bool gemma_next(char **pp, gemma_case *c) {
    char *p = *pp;
    memset(c, 0, sizeof *c);
    int line = 0;
    while (*p) {
        char *nl = strchr(p, '\n');
        if (!nl) nl = p + strlen(p);
        char save = *nl;
        *nl = 0;
        if (*p == '#' && line == 0) { /* comment */ }
        else if (!*p) { if (line) { *nl = save; *pp = *nl ? nl + 1 : nl; return true; } }
        else {
            if (line == 0) c->len = json_str(p, c->text);
            else if (line == 1) c->plain = parse_ids(p);
            else if (!strncmp(p, "special: ", 9)) c->special = parse_ids(p + 9);
            else if (!strncmp(p, "bos: ", 5)) c->bos = parse_ids(p + 5);
            else if (!strncmp(p, "fallback: ", 10)) {
                c->has_fallback = strcmp(p + 10, "same") != 0;
                if (c->has_fallback) c->fallback = parse_ids(p + 10);
            } else if (!strncmp(p, "decoded: ", 9)) c->dlen = json_str(p + 9, c->decoded);
            line++;
        }
        *nl = save;
        p = *nl ? nl + 1 : nl;
    }
    *pp = p;
    return line > 0;
}

static void gemma_free(gemma_case *c) {
    free(c->plain.v); free(c->special.v); free(c->bos.v); free(c->fallback.v);
}

static int check_ids(const char *what, int idx, const gemma_case *c, const int32_t *got, int n_got,
                     const int32_t *want, int n_want) {
    if (ids_eq(got, n_got, want, n_want)) return 0;
    char a[4096], b[4096];
    ids_str(a, sizeof a, want, n_want);
    ids_str(b, sizeof b, got, n_got);
    test_fail(__FILE__, __LINE__, "gemma case %d (%s) '%s':\n      want %s\n      got  %s", idx, what,
              esc(c->text, c->len), a, b);
    return 1;
}

TEST(tokenizer_gemma4_oracle) {
    NEED_SHARED(path, "oracle/gemma4-vocab.gguf");
    const char *tp = test_shared_path("oracle/gemma4-vocab.tests.txt");
    if (!tp) SKIP("../shared/oracle/gemma4-vocab.tests.txt absent");
    char *txt = test_read_file(tp, NULL);
    hachi_gguf *g;
    hachi_tokenizer *t;
    CHECK(txt != NULL);
    if (!txt) return;
    double t0 = hachi_time_ms();
    CHECKF(hachi_gguf_open(path, &g) == HACHI_OK, "%s", hachi_last_error());
    if (test_failed()) { free(txt); return; }
    double t1 = hachi_time_ms();
    CHECKF(hachi_tokenizer_load(g, &t) == HACHI_OK, "%s", hachi_last_error());
    if (test_failed()) { hachi_gguf_free(g); free(txt); return; }
    double t2 = hachi_time_ms();
    fprintf(stderr, "    gemma4 vocab: %d tokens; GGUF parse %.0f ms, tokenizer load %.0f ms\n",
            hachi_tokenizer_n_vocab(t), t1 - t0, t2 - t1);
    CHECK(hachi_tokenizer_kind(t) == HACHI_TOK_GEMMA4);
    CHECK(hachi_tokenizer_bos(t) == 2);
    CHECK(hachi_tokenizer_eos(t) == 106);
    CHECK(hachi_tokenizer_is_eog(t, 106));
    CHECK(!hachi_tokenizer_is_eog(t, 105));
    CHECK(hachi_tokenizer_is_control(t, 105));
    CHECK(!hachi_tokenizer_strips_leading_space(t));

    char *p = txt;
    gemma_case *c = malloc(sizeof *c);
    int idx = 0, bad[4] = {0}, n_fallback = 0;
    while (gemma_next(&p, c)) {
        const ids_t *want = c->has_fallback ? &c->fallback : &c->plain;
        int32_t *got, n;
        n_fallback += c->has_fallback;
        /* line 2 / fallback: no specials */
        CHECK(hachi_tokenizer_encode(t, c->text, c->len, false, false, &got, &n) == HACHI_OK);
        bad[0] += check_ids("plain", idx, c, got, n, want->v, want->n);
        hachi_free(got);
        /* special: where the text needs byte fallback, the oracle's special line is its
         * plain line (no control tokens in those texts): expect our fallback ids */
        bool sp_plain = ids_eq(c->special.v, c->special.n, c->plain.v, c->plain.n);
        const ids_t *want_sp = c->has_fallback && sp_plain ? &c->fallback : &c->special;
        CHECK(hachi_tokenizer_encode(t, c->text, c->len, false, true, &got, &n) == HACHI_OK);
        bad[1] += check_ids("special", idx, c, got, n, want_sp->v, want_sp->n);
        hachi_free(got);
        CHECK(hachi_tokenizer_encode(t, c->text, c->len, true, true, &got, &n) == HACHI_OK);
        if (c->has_fallback && sp_plain) {
            CHECK(n >= 1 && got[0] == 2);
            bad[2] += check_ids("bos", idx, c, got + 1, n - 1, want_sp->v, want_sp->n);
        } else {
            bad[2] += check_ids("bos", idx, c, got, n, c->bos.v, c->bos.n);
        }
        hachi_free(got);
        /* decoding: the oracle's line-2 ids give 'decoded'; our ids give the text back */
        size_t dl;
        char *dec = detok_all(t, c->plain.v, c->plain.n, &dl);
        if (dl != c->dlen || memcmp(dec, c->decoded, dl)) {
            test_fail(__FILE__, __LINE__, "gemma case %d decode: want '%s' got '%s'", idx, esc(c->decoded, c->dlen),
                      esc(dec, dl));
            bad[3]++;
        }
        free(dec);
        dec = detok_all(t, want->v, want->n, &dl);
        if (dl != c->len || memcmp(dec, c->text, dl)) {
            test_fail(__FILE__, __LINE__, "gemma case %d round trip: want '%s' got '%s'", idx, esc(c->text, c->len),
                      esc(dec, dl));
            bad[3]++;
        }
        free(dec);
        gemma_free(c);
        idx++;
    }
    fprintf(stderr, "    gemma4 oracle: %d cases (%d with byte fallback); mismatches: plain %d, special %d, bos %d, decode %d\n",
            idx, n_fallback, bad[0], bad[1], bad[2], bad[3]);
    CHECK(idx == 42);
    free(c);
    free(txt);
    hachi_tokenizer_free(t);
    hachi_gguf_free(g);
}

/* ---- streaming detokenization ------------------------------------------------------------------ */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* Encode text cut at random byte offsets (so multi-byte characters become byte
 * tokens), then stream the ids back: every chunk whole UTF-8, the sum the text. */
static void stream_check(const char *vocab_rel, const char *const *texts, int n_texts) {
    NEED_SHARED(path, vocab_rel);
    hachi_gguf *g;
    hachi_tokenizer *t;
    if (!load_vocab(path, &g, &t)) return;
    for (int ti = 0; ti < n_texts; ti++) {
        const char *text = texts[ti];
        size_t len = strlen(text);
        for (int rep = 0; rep < 50; rep++) {
            ids_t ids = {0};
            for (size_t a = 0; a < len;) {
                size_t b = a + 1 + rnd() % 7;
                if (b > len) b = len;
                int32_t *got, n;
                CHECK(hachi_tokenizer_encode(t, text + a, b - a, false, false, &got, &n) == HACHI_OK);
                for (int i = 0; i < n; i++) ids_push(&ids, got[i]);
                hachi_free(got);
                a = b;
            }
            hachi_detok_state d;
            hachi_tokenizer_detok_init(&d, true);
            char all[8192], chunk[4096];
            size_t k = 0;
            bool ok = true;
            for (int i = 0; i <= ids.n; i++) {
                int32_t m = i < ids.n ? hachi_tokenizer_detok_push(t, &d, ids.v[i], chunk, sizeof chunk)
                                      : hachi_tokenizer_detok_flush(t, &d, chunk, sizeof chunk);
                if (!valid_utf8(chunk, (size_t)m)) ok = false;
                if (k + (size_t)m < sizeof all) { memcpy(all + k, chunk, (size_t)m); k += (size_t)m; }
            }
            CHECKF(ok, "%s text %d rep %d: a chunk was not whole UTF-8", vocab_rel, ti, rep);
            CHECKF(k == len && !memcmp(all, text, len), "%s text %d rep %d: streamed '%s' want '%s'", vocab_rel, ti,
                   rep, esc(all, k), esc(text, len));
            free(ids.v);
            if (test_failed()) break;
        }
    }
    hachi_tokenizer_free(t);
    hachi_gguf_free(g);
}

static const char *const stream_texts[] = {
    "Grüße aus Köln — naïve café, 東京と大阪、𝔘𝔫𝔦𝔠𝔬𝔡𝔢 👨‍👩‍👧‍👦 🇩🇪!",
    "Приветствую, мир. Ελληνικά. עברית العربية हिन्दी ไทย 한국어",
    "ascii only, nothing special\n\twith tabs  and  spaces",
};

TEST(tokenizer_stream_gemma4) { stream_check("oracle/gemma4-vocab.gguf", stream_texts, 3); }
TEST(tokenizer_stream_gpt2) { stream_check("data/vocab/ggml-vocab-gpt-2.gguf", stream_texts, 3); }

/* Invalid and cut-off sequences through byte tokens of the Llama vocab. */
TEST(tokenizer_stream_invalid_bytes) {
    NEED_SHARED(path, "data/vocab/ggml-vocab-llama-spm.gguf");
    hachi_gguf *g;
    hachi_tokenizer *t;
    if (!load_vocab(path, &g, &t)) return;
    /* bytes: ff | e2 82 then 'A' | e2 82 ac | f0 9f (end) */
    static const unsigned char seq[] = {0xff, 0xe2, 0x82, 'A', 0xe2, 0x82, 0xac, 0xf0, 0x9f};
    char all[256], chunk[64];
    size_t k = 0;
    hachi_detok_state d;
    hachi_tokenizer_detok_init(&d, false);
    for (size_t i = 0; i <= sizeof seq; i++) {
        int32_t m;
        if (i < sizeof seq) {
            char piece[8];
            snprintf(piece, sizeof piece, "<0x%02X>", seq[i]);
            int32_t id = hachi_tokenizer_find(t, piece);
            CHECK(id >= 3 && id < 259);
            m = hachi_tokenizer_detok_push(t, &d, id, chunk, sizeof chunk);
        } else {
            m = hachi_tokenizer_detok_flush(t, &d, chunk, sizeof chunk);
        }
        CHECK(valid_utf8(chunk, (size_t)m));
        memcpy(all + k, chunk, (size_t)m);
        k += (size_t)m;
    }
    const char *want = "\xef\xbf\xbd\xef\xbf\xbd" "A" "\xe2\x82\xac" "\xef\xbf\xbd";
    CHECKF(k == strlen(want) && !memcmp(all, want, k), "got '%s'", esc(all, k));
    /* control tokens are silent; the first piece loses its dummy-prefix space */
    hachi_tokenizer_detok_init(&d, true);
    int32_t m = hachi_tokenizer_detok_push(t, &d, 1, chunk, sizeof chunk);   /* <s> */
    CHECK(m == 0);
    int32_t hello = hachi_tokenizer_find(t, "\xe2\x96\x81Hello");
    CHECK(hello == 15043);
    m = hachi_tokenizer_detok_push(t, &d, hello, chunk, sizeof chunk);
    CHECK(m == 5 && !memcmp(chunk, "Hello", 5));
    m = hachi_tokenizer_detok_push(t, &d, hello, chunk, sizeof chunk);
    CHECK(m == 6 && !memcmp(chunk, " Hello", 6));
    /* token_text: control tokens give their piece, byte tokens their byte */
    char buf[16];
    CHECK(hachi_tokenizer_token_text(t, 2, buf, sizeof buf) == 4 && !memcmp(buf, "</s>", 4));
    CHECK(hachi_tokenizer_token_text(t, 3 + 0x41, buf, sizeof buf) == 1 && buf[0] == 'A');
    CHECK(hachi_tokenizer_token_text(t, hello, buf, 3) == 3 && !memcmp(buf, " He", 3));
    CHECK(hachi_tokenizer_token_text(t, 32000, buf, sizeof buf) == -1);
    CHECK(hachi_tokenizer_token_text(t, -1, buf, sizeof buf) == -1);
    CHECK(hachi_tokenizer_is_eog(t, 2) && !hachi_tokenizer_is_eog(t, 1));
    hachi_tokenizer_free(t);
    hachi_gguf_free(g);
}

/* ---- stories260K: llama2.c tokenizer as a GGUF vocabulary ------------------------------------- */

/* Build a "llama" vocab GGUF in memory from tok512.bin (llama2.c format: int32
 * max_token_length, then per token float score, int32 len, bytes; spaces stand for U+2581). */
static bool tok512_gguf(void **buf, size_t *len) {
    const char *path = test_shared_path("data/tok512.bin");
    if (!path) return false;
    size_t n;
    unsigned char *b = (unsigned char *)test_read_file(path, &n);
    if (!b) return false;
    enum { N = 512 };
    char *toks[N];
    float scores[N];
    int32_t types[N];
    size_t o = 4;
    for (int i = 0; i < N; i++) {
        int32_t l;
        memcpy(&scores[i], b + o, 4);
        memcpy(&l, b + o + 4, 4);
        o += 8;
        toks[i] = malloc((size_t)l * 3 + 1);
        size_t k = 0;
        for (int32_t j = 0; j < l; j++) {
            if (b[o + j] == ' ') { memcpy(toks[i] + k, "\xe2\x96\x81", 3); k += 3; }
            else toks[i][k++] = (char)b[o + j];
        }
        toks[i][k] = 0;
        o += (size_t)l;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
    }
    free(toks[1]);
    free(toks[2]);
    toks[1] = strdup("<s>");
    toks[2] = strdup("</s>");
    free(b);
    hachi_gguf_writer *w = hachi_gguf_writer_new();
    hachi_gguf_set_str(w, "general.architecture", "llama");
    hachi_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    hachi_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, N);
    hachi_gguf_set_arr(w, "tokenizer.ggml.scores", HACHI_GGUF_FLOAT32, scores, N);
    hachi_gguf_set_arr(w, "tokenizer.ggml.token_type", HACHI_GGUF_INT32, types, N);
    hachi_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    hachi_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    hachi_gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    hachi_status st = hachi_gguf_writer_to_buffer(w, buf, len);
    hachi_gguf_writer_free(w);
    for (int i = 0; i < N; i++) free(toks[i]);
    return st == HACHI_OK;
}

TEST(tokenizer_stories260k_reference) {
    void *buf = NULL;
    size_t len = 0;
    if (!test_shared_path("data/tok512.bin")) SKIP("../shared/data/tok512.bin absent");
    CHECK(tok512_gguf(&buf, &len));
    if (test_failed()) return;
    hachi_gguf *g;
    hachi_tokenizer *t;
    CHECK(hachi_gguf_parse(buf, len, &g) == HACHI_OK);
    CHECK(hachi_tokenizer_load(g, &t) == HACHI_OK);
    if (test_failed()) { hachi_free(buf); return; }
    const char *text = "One day, a clever fox found a shiny key under the old oak tree.";
    ids_t want = parse_ids("1 385 328 432 261 280 305 330 272 414 444 272 277 264 261 262 415 271 422 410 354 422 "
                           "318 264 285 265 334 341 334 412 433 259 276 411 426");
    int32_t *got, n;
    CHECK(hachi_tokenizer_encode(t, text, strlen(text), true, true, &got, &n) == HACHI_OK);
    char a[1024], b[1024];
    ids_str(a, sizeof a, want.v, want.n);
    ids_str(b, sizeof b, got, n);
    CHECKF(ids_eq(got, n, want.v, want.n), "want %s\n      got  %s", a, b);
    size_t dl;
    char *dec = detok_all(t, got, n, &dl);
    CHECKF(dl == strlen(text) && !memcmp(dec, text, dl), "decoded '%s'", esc(dec, dl));
    free(dec);
    free(want.v);
    hachi_free(got);
    hachi_tokenizer_free(t);
    hachi_gguf_free(g);
    hachi_free(buf);
}

/* ---- loader errors ----------------------------------------------------------------------------- */

static hachi_status load_from(hachi_gguf_writer *w, hachi_tokenizer **t) {
    void *buf;
    size_t len;
    hachi_gguf *g = NULL;
    hachi_status st = hachi_gguf_writer_to_buffer(w, &buf, &len);
    hachi_gguf_writer_free(w);
    if (st) return st;
    st = hachi_gguf_parse(buf, len, &g);
    if (!st) st = hachi_tokenizer_load(g, t);
    hachi_tokenizer_free(*t);
    *t = NULL;
    hachi_gguf_free(g);
    hachi_free(buf);
    return st;
}

TEST(tokenizer_load_errors) {
    static const char *const toks[] = {"<unk>", "a", "b", "ab"};
    static const char *const merges_bad[] = {"a b", "ab"};
    int32_t types[3] = {2, 1, 1};
    hachi_tokenizer *t = NULL;
    hachi_gguf_writer *w;
    hachi_status st;

    w = hachi_gguf_writer_new();
    hachi_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    st = load_from(w, &t);
    CHECKF(st == HACHI_ERR_FORMAT && strstr(hachi_last_error(), "tokenizer.ggml.tokens"), "%d %s", st, hachi_last_error());

    w = hachi_gguf_writer_new();
    hachi_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    st = load_from(w, &t);
    CHECKF(st == HACHI_ERR_FORMAT && strstr(hachi_last_error(), "tokenizer.ggml.model"), "%d %s", st, hachi_last_error());

    w = hachi_gguf_writer_new();
    hachi_gguf_set_str(w, "tokenizer.ggml.model", "bert");
    hachi_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    st = load_from(w, &t);
    CHECKF(st == HACHI_ERR_UNSUPPORTED && strstr(hachi_last_error(), "'bert'"), "%d %s", st, hachi_last_error());

    w = hachi_gguf_writer_new();
    hachi_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    hachi_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    hachi_gguf_set_arr_str(w, "tokenizer.ggml.merges", merges_bad, 2);
    st = load_from(w, &t);
    CHECKF(st == HACHI_ERR_FORMAT && strstr(hachi_last_error(), "tokenizer.ggml.merges[1]"), "%d %s", st,
           hachi_last_error());

    w = hachi_gguf_writer_new();
    hachi_gguf_set_str(w, "tokenizer.ggml.model", "gemma4");
    hachi_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    st = load_from(w, &t);
    CHECKF(st == HACHI_ERR_FORMAT && strstr(hachi_last_error(), "tokenizer.ggml.merges"), "%d %s", st, hachi_last_error());

    w = hachi_gguf_writer_new();
    hachi_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    hachi_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    hachi_gguf_set_arr(w, "tokenizer.ggml.token_type", HACHI_GGUF_INT32, types, 3);
    st = load_from(w, &t);
    CHECKF(st == HACHI_ERR_FORMAT && strstr(hachi_last_error(), "tokenizer.ggml.token_type"), "%d %s", st,
           hachi_last_error());

    w = hachi_gguf_writer_new();
    hachi_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    hachi_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    hachi_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 4);
    st = load_from(w, &t);
    CHECKF(st == HACHI_ERR_FORMAT && strstr(hachi_last_error(), "tokenizer.ggml.bos_token_id"), "%d %s", st,
           hachi_last_error());

    w = hachi_gguf_writer_new();   /* keys of the wrong type are named as such */
    hachi_gguf_set_u32(w, "tokenizer.ggml.model", 1);
    hachi_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    st = load_from(w, &t);
    CHECKF(st == HACHI_ERR_FORMAT && strstr(hachi_last_error(), "tokenizer.ggml.model is not a string"), "%d %s", st,
           hachi_last_error());
    w = hachi_gguf_writer_new();
    hachi_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    hachi_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    hachi_gguf_set_u32(w, "tokenizer.ggml.scores", 0);
    st = load_from(w, &t);
    CHECKF(st == HACHI_ERR_FORMAT && strstr(hachi_last_error(), "scores is not an array"), "%d %s", st, hachi_last_error());
    w = hachi_gguf_writer_new();
    hachi_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    hachi_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    hachi_gguf_set_u32(w, "tokenizer.ggml.add_bos_token", 1);
    st = load_from(w, &t);
    CHECKF(st == HACHI_ERR_FORMAT && strstr(hachi_last_error(), "add_bos_token is not a bool"), "%d %s", st,
           hachi_last_error());

    w = hachi_gguf_writer_new();   /* a valid tiny BPE vocab loads */
    hachi_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    hachi_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
    hachi_gguf_set_arr_str(w, "tokenizer.ggml.merges", merges_bad, 1);
    st = load_from(w, &t);
    CHECKF(st == HACHI_OK, "%d %s", st, hachi_last_error());
}

/* ---- public wrappers --------------------------------------------------------------------------- */

TEST(tokenizer_public_api) {
    NEED_SHARED(path, "data/vocab/ggml-vocab-llama-spm.gguf");
    hachi_model_params mp = hachi_model_default_params();
    mp.vocab_only = true;
    hachi_model *m = NULL;
    hachi_status st = hachi_model_load(path, &mp, &m);
    CHECKF(st == HACHI_OK, "load: %s", hachi_last_error());
    if (st) return;
    const char *text = " Hello, world!";   /* 29871 15043 29892 3186 29991 */
    int32_t ids[8], n = -1;
    CHECK(hachi_tokenize(m, text, strlen(text), true, true, ids, 2, &n) == HACHI_OK);
    CHECK(n == 6 && ids[0] == 1 && ids[1] == 29871);
    CHECK(hachi_tokenize(m, text, strlen(text), true, true, ids, 8, &n) == HACHI_OK);
    CHECK(n == 6 && ids[2] == 15043 && ids[5] == 29991);
    CHECK(hachi_tokenize(m, "", 0, false, true, ids, 8, &n) == HACHI_OK && n == 0);
    CHECK(hachi_tokenize(m, "<s>x", 4, false, true, ids, 8, &n) == HACHI_OK && n >= 2 && ids[0] == 1);
    CHECK(hachi_tokenize(m, "<s>x", 4, false, false, ids, 8, &n) == HACHI_OK && n >= 2 && ids[0] != 1);
    {   /* two specials 20000 times each, between text: every one split out, the text between the same */
        enum { R = 20000 };
        static const char unit[9] = {'<', '/', 's', '>', 'x', '<', 's', '>', 'y'};
        char *many = malloc(9 * R);
        int32_t *mids = malloc(sizeof *mids * 6 * R), one[8], n1 = 0;
        for (int r = 0; many && r < R; r++) memcpy(many + 9 * r, unit, sizeof unit);
        CHECK(hachi_tokenize(m, "</s>x<s>y", 9, false, true, one, 8, &n1) == HACHI_OK && n1 >= 4 && one[0] == 2);
        if (many && mids && hachi_tokenize(m, many, 9 * R, false, true, mids, 6 * R, &n) == HACHI_OK) {
            bool same = n == n1 * R;
            for (int i = 0; same && i < n; i++) same = mids[i] == one[i % n1];
            CHECKF(same, "%d ids for %d repeats of %d", n, R, n1);
        } else CHECK(0);
        free(many);
        free(mids);
    }
    char buf[64];
    CHECK(hachi_token_to_text(m, 15043, buf, sizeof buf) == 6 && !memcmp(buf, " Hello", 6));
    CHECK(hachi_token_to_text(m, 1, buf, sizeof buf) == 3 && !memcmp(buf, "<s>", 3));
    CHECK(hachi_token_to_text(m, 99999, buf, sizeof buf) == -1);
    hachi_detok *d = NULL;
    CHECK(hachi_detok_create(NULL, &d) == HACHI_ERR_INVALID_ARG && !d);
    CHECK(hachi_detok_create(m, &d) == HACHI_OK && d);
    if (!d) { hachi_model_free(m); return; }
    char all[128];
    int32_t k = 0;
    CHECK(hachi_tokenize(m, text, strlen(text), true, true, ids, 8, &n) == HACHI_OK);
    for (int i = 0; i < n; i++) k += hachi_detok_push(d, ids[i], all + k, (int32_t)sizeof all - k);
    k += hachi_detok_flush(d, all + k, (int32_t)sizeof all - k);
    CHECKF(k == (int32_t)strlen(text) && !memcmp(all, text, (size_t)k), "'%s'", esc(all, (size_t)k));
    /* reset: a new text strips the leading space again; a continuation keeps it; a
     * pending partial sequence is dropped */
    hachi_detok_reset(d, true);
    CHECK(hachi_detok_push(d, 15043, all, sizeof all) == 5 && !memcmp(all, "Hello", 5));
    hachi_detok_reset(d, false);
    CHECK(hachi_detok_push(d, 15043, all, sizeof all) == 6 && !memcmp(all, " Hello", 6));
    const int32_t e2 = 3 + 0xE2;   /* <0xE2>: this vocabulary's byte tokens are ids 3..258 */
    CHECK(hachi_token_to_text(m, e2, buf, sizeof buf) == 1 && (unsigned char)buf[0] == 0xE2);
    CHECK(hachi_detok_push(d, e2, all, sizeof all) == 0);
    hachi_detok_reset(d, false);
    CHECK(hachi_detok_flush(d, all, sizeof all) == 0);
    CHECK(hachi_detok_push(NULL, 15043, all, sizeof all) == 0 && hachi_detok_flush(NULL, all, sizeof all) == 0);
    hachi_detok_free(d);
    hachi_detok_free(NULL);
    CHECK(hachi_model_is_eog(m, 2));
    hachi_model_free(m);
}

/* ---- the CLI ------------------------------------------------------------------------------------ */

TEST(tokenizer_cli) {
    NEED_SHARED(path, "oracle/gemma4-vocab.gguf");
    const char *bin = test_hachi_bin();
    char cmd[2048], fpath[600];
    char *out = NULL;
    snprintf(cmd, sizeof cmd, "%s tokenize -m '%s' -p '<start_of_turn>hi there' --ids --bos 2>&1", bin, path);
    int rc = test_run(cmd, &out);
    if (rc == 127 || (out && strstr(out, "not found"))) { free(out); SKIP("%s not built", bin); }
    CHECKF(rc == 0 && out && !strcmp(out, "2 105 2202 993\n"), "rc %d out '%s'", rc, out ? out : "");
    free(out);
    /* -f: the file's bytes exactly (the trailing newline and \r stay) */
    snprintf(fpath, sizeof fpath, "%s/tok_in.txt", test_tmpdir());
    FILE *f = fopen(fpath, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fputs("a\r\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s tokenize -m '%s' -f '%s' 2>&1", bin, path, fpath);
    rc = test_run(cmd, &out);
    CHECKF(rc == 0 && out && !strcmp(out, "236746 'a'\n251 '\\r'\n107 '\\n'\n"), "rc %d out '%s'", rc, out ? out : "");
    free(out);
    snprintf(cmd, sizeof cmd, "%s tokenize -m '%s' -p '<start_of_turn>' --no-special --ids 2>&1", bin, path);
    rc = test_run(cmd, &out);
    CHECKF(rc == 0 && out && strncmp(out, "105", 3) && strchr(out, ' '), "rc %d out '%s'", rc, out ? out : "");
    free(out);
    static const char *const bad[] = {"-p x", "-m '%s'", "-m '%s' -p a -f b", "-m '%s' -f /nonexistent/x",
                                      "-m '%s' -p a --bogus", "-m /nonexistent/model.gguf -p a", "-m '%s' -p"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[1024];
        snprintf(args, sizeof args, bad[i], path);
        snprintf(cmd, sizeof cmd, "%s tokenize %s 2>&1", bin, args);
        rc = test_run(cmd, &out);
        CHECKF(rc == 1 && out && !strncmp(out, "hachi tokenize: ", 16) && strchr(out, '\n') == out + strlen(out) - 1,
               "'%s': rc %d out '%s'", args, rc, out ? out : "");
        free(out);
    }
}
