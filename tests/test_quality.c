/* Tests of the quality harness (hachi passkey, hachi perplexity --kl-divergence) on the
 * trained gemma4-micro: its prompts have the shared fixtures' format, dense retrieves every
 * key at lengths it was trained on, a mode equal to dense in outputs (f16) or close (f32 K/V)
 * scores as such, and the JSON output is well-formed. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/stat.h>
#include "test.h"
#include "hachi.h"

/* ---- a strict JSON checker (RFC 8259 grammar, no extensions) ---------------------- */

static const char *json_ws(const char *p) {
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
    return p;
}

static const char *json_value(const char *p, int depth);

static const char *json_string(const char *p) {
    if (*p++ != '"') return NULL;
    while (*p != '"') {
        if ((unsigned char)*p < 0x20) return NULL;
        if (*p == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++) if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i]) return NULL;
                p += 4;
            } else if (!*p || !strchr("\"\\/bfnrt", *p)) return NULL;
        }
        p++;
    }
    return p + 1;
}

static const char *json_number(const char *p) {
    if (*p == '-') p++;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (*p >= '0' && *p <= '9') p++;
    else return NULL;
    if (*p == '.') { p++; if (*p < '0' || *p > '9') return NULL; while (*p >= '0' && *p <= '9') p++; }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (*p < '0' || *p > '9') return NULL;
        while (*p >= '0' && *p <= '9') p++;
    }
    return p;
}

static const char *json_value(const char *p, int depth) {
    p = json_ws(p);
    if (depth > 64) return NULL;
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        bool obj = *p == '{';
        p = json_ws(p + 1);
        if (*p == close) return p + 1;
        for (;;) {
            if (obj) {
                if (!(p = json_string(json_ws(p)))) return NULL;
                p = json_ws(p);
                if (*p++ != ':') return NULL;
            }
            if (!(p = json_value(p, depth + 1))) return NULL;
            p = json_ws(p);
            if (*p == close) return p + 1;
            if (*p++ != ',') return NULL;
        }
    }
    if (*p == '"') return json_string(p);
    if (!strncmp(p, "true", 4)) return p + 4;
    if (!strncmp(p, "false", 5)) return p + 5;
    if (!strncmp(p, "null", 4)) return p + 4;
    return json_number(p);
}

static bool json_valid(const char *s) {
    const char *p = json_value(s, 0);
    return p && !*json_ws(p);
}

/* The number after the n-th (0-based) occurrence of "key": in s, or NAN. */
static double json_num(const char *s, const char *key, int n) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = s;
    for (int i = 0; i <= n; i++) {
        if (!(p = strstr(p, pat))) return NAN;
        p += strlen(pat);
    }
    return strtod(p, NULL);
}

/* ---- the prompt format ------------------------------------------------------------ */

static int32_t *tokens(const hachi_model *m, const char *text, size_t len, int32_t *n) {
    hachi_tokenize(m, text, len, false, false, NULL, 0, n);
    int32_t *t = malloc(sizeof(int32_t) * ((size_t)*n + 1));
    if (t && hachi_tokenize(m, text, len, false, false, t, *n + 1, n) != HACHI_OK) { free(t); t = NULL; }
    return t;
}

static int32_t *read_ids(const char *line, int *n) {
    int cap = 1024;
    int32_t *ids = malloc(sizeof(int32_t) * cap);
    *n = 0;
    for (const char *p = line;;) {
        char *e;
        while (*p == ' ') p++;
        long v = strtol(p, &e, 10);
        if (e == p || *p == '\n') break;
        if (*n == cap) {
            int32_t *grown = realloc(ids, sizeof(int32_t) * (cap *= 2));
            if (!grown) { free(ids); *n = 0; return NULL; }
            ids = grown;
        }
        ids[(*n)++] = (int32_t)v;
        p = e;
    }
    return ids;
}

static int32_t *find_run(int32_t *hay, int n_hay, const int32_t *run, int n) {
    for (int i = 0; i + n <= n_hay; i++)
        if (!memcmp(hay + i, run, sizeof(int32_t) * (size_t)n)) return hay + i;
    return NULL;
}

/* Checks that ids[0..n) is BOS, filler[off..off+pre), the needle of key, filler[off+pre..) and
 * the question, the needle and question tokenized on their own (what hachi passkey builds).
 * off < 0: the run is searched for in filler. Returns the offset, or -1. */
static int check_prompt(const hachi_model *m, const int32_t *ids, int n, long key, int32_t *filler, int n_filler,
                        int off, int pre, const char *what) {
    char nt[128];
    snprintf(nt, sizeof nt, "The pass key is %ld. Remember it. %ld is the pass key.", key, key);
    const char *qt = "What is the pass key? The pass key is";
    int32_t nn, nq;
    int32_t *needle = tokens(m, nt, strlen(nt), &nn), *q = tokens(m, qt, strlen(qt), &nq);
    int ok = -1;
    CHECKF(ids[0] == hachi_model_bos(m), "%s: does not start with BOS", what);
    CHECKF(n > nq && !memcmp(ids + n - nq, q, sizeof(int32_t) * nq), "%s: does not end in the question's tokens", what);
    const int32_t *at = find_run((int32_t *)ids, n, needle, nn);
    CHECKF(at != NULL, "%s: the needle's tokens (key %ld) are not in the prompt", what, key);
    if (at && ids[0] == hachi_model_bos(m)) {
        int p = (int)(at - ids) - 1, post = n - 1 - p - nn - nq;
        if (off < 0) {
            int32_t *f = find_run(filler, n_filler, ids + 1, p);
            off = f ? (int)(f - filler) : -1;
        }
        CHECKF(pre < 0 || p == pre, "%s: needle after %d filler tokens, expected %d", what, p, pre);
        bool run = off >= 0 && off + p + post <= n_filler && !memcmp(ids + 1, filler + off, sizeof(int32_t) * p) &&
                   !memcmp(ids + 1 + p + nn, filler + off + p, sizeof(int32_t) * post);
        CHECKF(run, "%s: the filler is not one run of the tokenized text around the needle", what);
        if (run) ok = off;
    }
    free(needle); free(q);
    return ok;
}

/* The shared fixtures were built as hachi passkey builds its prompts: each of the 12 is BOS,
 * one run of a held-out text's tokens cut by the needle, then the question (needle and question
 * tokenized alone), and a prompt hachi passkey dumps is the same at the offset, needle position
 * and length its JSON names. */
TEST(passkey_prompt_format_matches_fixtures) {
    NEED_SHARED(mpath, "models/gemma4-micro.gguf");
    NEED_SHARED(ppath, "models/gemma4-micro.passkey.prompts.txt");
    NEED_SHARED(apath, "models/gemma4-micro.passkey.answers.txt");
    hachi_model_params mp = hachi_model_default_params();
    mp.vocab_only = true;
    hachi_model *m = NULL;
    if (hachi_model_load(mpath, &mp, &m) != HACHI_OK) { CHECK(0); return; }
    const char *names[4] = {"stories", "warpeace", "shakespeare", "wiki"};
    int32_t *filler[4], n_filler[4];
    for (int t = 0; t < 4; t++) {
        char rel[128];
        snprintf(rel, sizeof rel, "models/heldout/heldout_%s.txt", names[t]);
        size_t len;
        char *text = test_read_file(test_shared_path(rel), &len);
        filler[t] = text ? tokens(m, text, len, &n_filler[t]) : NULL;
        CHECK(filler[t] != NULL);
        free(text);
        if (!filler[t]) { hachi_model_free(m); return; }
    }
    char *prompts = test_read_file(ppath, NULL), *ans = test_read_file(apath, NULL);
    int k = 0;
    for (char *pl = prompts, *al = ans; pl && *pl && al; k++) {
        while (*al == '#') al = strchr(al, '\n') + 1;
        int len;
        double depth;
        long key;
        CHECK(sscanf(al, "%d %lf %ld", &len, &depth, &key) == 3);   // NOLINT(cert-err34-c): the reference file; a bad line fails the check
        int n;
        int32_t *ids = read_ids(pl, &n);
        char what[64];
        snprintf(what, sizeof what, "fixture prompt %d", k);
        CHECKF(n == len, "%s: %d tokens, answers.txt says %d", what, n, len);
        int found = -1;
        for (int t = 0; t < 4 && found < 0; t++) {
            int32_t *f = NULL;
            /* the text whose tokens start the prompt */
            if (n > 33 && (f = find_run(filler[t], n_filler[t], ids + 1, 32)))
                found = check_prompt(m, ids, n, key, filler[t], n_filler[t], (int)(f - filler[t]), -1, what);
        }
        CHECKF(found >= 0, "%s: no held-out text starts it", what);
        free(ids);
        pl = strchr(pl, '\n'); if (pl) pl++;
        al = strchr(al, '\n'); if (al) al++;
    }
    CHECK(k == 12);
    free(prompts); free(ans);

    /* hachi passkey's own prompts */
    const char *json = test_tmp("pk_format.json"), *dump = test_tmp("pk_format.txt");
    int rc;
    char *out = test_sh(&rc, "%s passkey -m %s --filler %s --lengths 300,1000 --depths 0,0.37,1 -n 2 --seed 7 --dense-only "
                   "--json %s --dump-prompts %s 2>&1", test_hachi_bin(), mpath,
                   test_shared_path("models/heldout/heldout_wiki.txt"), json, dump);
    CHECKF(rc == 0, "passkey exit %d: %s", rc, out);
    char *j = test_read_file(json, NULL), *d = test_read_file(dump, NULL);
    CHECKF(j && json_valid(j), "--json output is not well-formed JSON");
    int i = 0;
    for (char *pl = d; pl && *pl; i++) {
        int n;
        int32_t *ids = read_ids(pl, &n);
        int len = (int)json_num(j, "length", i), off = (int)json_num(j, "offset", i);
        int pos = (int)json_num(j, "needle_pos", i);
        double depth = json_num(j, "depth", i);
        long key = (long)json_num(j, "key", i);
        char what[64];
        snprintf(what, sizeof what, "passkey prompt %d", i);
        CHECKF(n == len && (len == 300 || len == 1000), "%s: %d tokens, asked %d", what, n, len);
        CHECKF(key >= 10000 && key <= 99999, "%s: key %ld", what, key);
        int32_t nn, nq;
        char nt[128];
        snprintf(nt, sizeof nt, "The pass key is %ld. Remember it. %ld is the pass key.", key, key);
        free(tokens(m, nt, strlen(nt), &nn));
        free(tokens(m, "What is the pass key? The pass key is", 37, &nq));
        int n_fill = len - 1 - nn - nq;
        CHECKF(pos - 1 == (int)floor(depth * n_fill + 0.5), "%s: needle at %d, depth %g of %d", what, pos, depth, n_fill);
        CHECK(check_prompt(m, ids, n, key, filler[3], n_filler[3], off, pos - 1, what) == off);
        free(ids);
        pl = strchr(pl, '\n'); if (pl) pl++;
    }
    CHECKF(i == 12, "%d prompts dumped, expected 12", i);
    free(j); free(d); free(out);
    for (int t = 0; t < 4; t++) free(filler[t]);
    hachi_model_free(m);
}

/* The table row of a length and depth: "LEN CTX DEPTH d/n [m/n s/n] margin [margin ratio]". */
static bool pk_row(const char *out, int len, const char *depth, int *dense, int *mode, int *same, double *md,
                   double *mm, double *ratio) {
    char pat[64];
    snprintf(pat, sizeof pat, " %s ", depth);
    for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        int L, ctx, n1, n2, n3;
        char d[16];
        if (sscanf(l, "%d %d %15s %d/%*d %d/%*d %d/%*d %lf %lf %lf", &L, &ctx, d, &n1, &n2, &n3, md, mm, ratio) == 9 &&   // NOLINT(cert-err34-c): the CLI's own table; a bad row is no row
            L == len && !strcmp(d, depth)) {
            *dense = n1; *mode = n2; *same = n3;
            return true;
        }
    }
    return false;
}

/* The n-th value of "margin" in a JSON text, as written (its digits), or NULL. */
static const char *margin_text(const char *j, int n, size_t *len) {
    const char *p = j;
    for (int k = 0; k <= n && p; k++) p = strstr(p, "\"margin\": ") ? strstr(p, "\"margin\": ") + 10 : NULL;
    if (p) *len = strcspn(p, ",}");
    return p;
}

/* gemma4-micro retrieves every key at 1024 and 2048 tokens (its README). f16 as the mode is
 * dense itself: the same answers and bitwise the same margins, reading the same KV bytes. f32
 * K/V answers with the same tokens, margins within 0.01, reading twice the bytes. (Small runs:
 * the machine has 2 cores and f32 attention is ~4x slower than f16.) */
TEST(cli_passkey_micro_dense_and_f32) {
    NEED_SHARED(model, "models/gemma4-micro.gguf");
    NEED_SHARED(filler, "models/heldout/heldout_stories.txt");
    const char *json = test_tmp("pk.json");
    const bool quick = getenv("HACHI_TEST_QUICK") != NULL;   /* instrumented, emulated: 1 prompt a cell */
    int rc;
    char *out = test_sh(&rc, "%s passkey -m %s --filler %s --lengths 1024,2048 --depths 0.1,0.9 -n %d --dense-only "
                        "--json %s 2>/dev/null", test_hachi_bin(), model, filler, quick ? 1 : 3, json);
    CHECKF(rc == 0 && strstr(out, "dense: kv f16\n"), "passkey --dense-only exit %d: %s", rc, out);
    const char *full[] = {"1024 2048 0.10 3/3", "1024 2048 0.90 3/3", "1024 2048 all 6/6", "2048 4096 0.10 3/3",
                          "2048 4096 0.90 3/3", "2048 4096 all 6/6", "all 12/12"};
    const char *small[] = {"1024 2048 0.10 1/1", "1024 2048 0.90 1/1", "1024 2048 all 2/2", "2048 4096 0.10 1/1",
                           "2048 4096 0.90 1/1", "2048 4096 all 2/2", "all 4/4"};
    const char **rows = quick ? small : full;
    for (int r = 0; r < 7; r++) {
        /* the row with its columns' runs of spaces squeezed */
        bool found = false;
        for (const char *l = out; l && *l && !found; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
            char sq[256];
            size_t k = 0;
            for (const char *c = l; *c && *c != '\n' && k + 1 < sizeof sq; c++)
                if (*c != ' ' || (k > 0 && sq[k - 1] != ' ')) sq[k++] = *c;
            sq[k] = 0;
            found = k > strlen(rows[r]) && !strncmp(sq, rows[r], strlen(rows[r])) && sq[strlen(rows[r])] == ' ';
        }
        CHECKF(found, "no row '%s ...' (dense retrieves every key) in:\n%s", rows[r], out);
    }
    char *j = test_read_file(json, NULL);
    CHECKF(j && json_valid(j) && strstr(j, "\"mode\": null"), "--dense-only JSON not well-formed");
    free(j); free(out);

    for (int f32 = 0; f32 < 2; f32++) {
        const char *kv = f32 ? "f32" : "f16";
        const int n_len = f32 && !quick ? 2 : 1;   /* lengths 1024 (and 2048) */
        out = test_sh(&rc, "%s passkey -m %s --filler %s --lengths %s --depths 0.5 -n 1 --kv-type %s --json %s 2>/dev/null",
                 test_hachi_bin(), model, filler, n_len == 2 ? "1024,2048" : "1024", kv, json);
        char head[64];
        snprintf(head, sizeof head, "dense: kv f16   mode: kv %s", kv);
        CHECKF(rc == 0 && strstr(out, head), "passkey --kv-type %s exit %d: %s", kv, rc, out);
        for (int l = 0; l < n_len; l++) {
            int len = l ? 2048 : 1024, dn, mn, sn;
            double md, mm, ratio;
            bool row = pk_row(out, len, "0.50", &dn, &mn, &sn, &md, &mm, &ratio);
            CHECKF(row, "no row for length %d in:\n%s", len, out);
            if (!row) continue;
            CHECKF(dn == 1 && mn == 1 && sn == 1, "length %d: dense %d, %s %d correct, %d the same", len, dn, kv, mn, sn);
            CHECKF(md > 1 && (f32 ? fabs(mm - md) < 0.01 : mm == md), "length %d: margins %.3f dense, %.3f %s", len, md,
                   mm, kv);
            CHECKF(fabs(ratio - (f32 ? 2.0 : 1.0)) < 1e-3, "length %d: KV read %s/f16 %.3f", len, kv, ratio);
        }
        j = test_read_file(json, NULL);
        CHECKF(j && json_valid(j), "--json output is not well-formed JSON");
        for (int i = 0; j && i < n_len; i++) {
            size_t la = 0, lb = 0;
            const char *a = margin_text(j, 2 * i, &la), *b = margin_text(j, 2 * i + 1, &lb);
            CHECKF(a && b, "prompt %d: no margins in the JSON", i);
            if (!a || !b) break;
            if (f32) CHECKF(fabs(strtod(a, NULL) - strtod(b, NULL)) < 0.01, "prompt %d: margin %.*s dense, %.*s f32", i,
                            (int)la, a, (int)lb, b);
            else CHECKF(la == lb && !memcmp(a, b, la), "prompt %d: margin %.*s dense, %.*s f16", i, (int)la, a, (int)lb, b);
        }
        free(j); free(out);
    }
}

/* "name: X" of a perplexity output as a number, or NAN */
static double line_num(const char *out, const char *name) {
    const char *p = strstr(out, name);
    return p ? strtod(p + strlen(name), NULL) : NAN;
}

/* perplexity --kl-divergence on gemma4-micro, a held-out text, 4 whole windows of 512: the base
 * against itself gives KL 0, the same perplexity and 100% the same top tokens (exactly); f32 K/V
 * against the f16 base a small KL and >99% the same top tokens, with the default top 32 too; a
 * base made for another text, context or model, a truncated one, or a file that is no base, is
 * refused with one line. */
TEST(cli_perplexity_kl_divergence) {
    NEED_SHARED(model, "models/gemma4-micro.gguf");
    NEED_SHARED(text, "models/heldout/heldout_wiki.txt");
    NEED_SHARED(other, "models/heldout/heldout_stories.txt");
    const char *base = test_tmp("wiki.kld"), *base32 = test_tmp("wiki32.kld");
    const char *args = "-c 512 --chunks 4 --whole-window";
    int rc;
    char *out = test_sh(&rc, "%s perplexity -m %s -f %s %s --kl-divergence-base %s --kl-top 512 2>&1", test_hachi_bin(), model,
                   text, args, base);
    double ppl = line_num(out, "perplexity: ");
    CHECKF(rc == 0 && ppl > 1 && strstr(out, "kl-divergence base: 2044 positions, top 512 log-probs each (kv f16)"),
           "saving the base: %s", out);
    free(out);
    out = test_sh(&rc, "%s perplexity -m %s -f %s %s --kl-divergence-base %s 2>&1", test_hachi_bin(), model, text, args, base32);
    CHECKF(rc == 0 && line_num(out, "perplexity: ") == ppl, "saving the top-32 base: %s", out);
    free(out);
    struct stat st;
    CHECKF(stat(base, &st) == 0 && st.st_size == 88 + 2044 * (8 + 512 * 8), "base file size");

    for (int f32 = 0; f32 < 2; f32++)
        for (int b = 0; b < 2; b++) {
            out = test_sh(&rc, "%s perplexity -m %s -f %s %s --kl-divergence --kl-divergence-base %s %s 2>/dev/null",
                     test_hachi_bin(), model, text, args, b ? base32 : base, f32 ? "--kv-type f32" : "");
            double p = line_num(out, "perplexity: "), pb = line_num(out, "perplexity (base): ");
            double kl = line_num(out, "mean KL divergence: "), same = line_num(out, "same top token: ");
            double lr = line_num(out, "ln(ppl/ppl base): ");
            CHECKF(rc == 0 && pb == ppl && strstr(out, f32 ? "this run kv f32" : "this run kv f16") &&
                   strstr(out, "4 chunks of 512, whole window: 2044 positions"), "--kl-divergence: %s", out);
            if (!f32)
                CHECKF(p == ppl && kl == 0 && lr == 0 && same == 100 && strstr(out, "(2044/2044)"),
                       "base against itself (top %d): %s", b ? 32 : 512, out);
            else
                CHECKF(fabs(p / ppl - 1) < 1e-3 && kl > 0 && kl < 1e-4 && same > 99, "f32 against the f16 base (top %d): %s",
                       b ? 32 : 512, out);
            free(out);
        }

    const struct { const char *args, *err; } bad[] = {
        {"-f %s -c 512 --chunks 4 --whole-window", "was made for another text"},
        {"-f %s -c 1024 --chunks 2 --whole-window", "was made for another context: -c 512, whole window"},
        {"-f %s -c 512 --chunks 4", "was made for another context"},
    };
    for (int i = 0; i < 3; i++) {
        char a[1024];
        snprintf(a, sizeof a, bad[i].args, i == 0 ? other : text);
        out = test_sh(&rc, "%s perplexity -m %s %s --kl-divergence --kl-divergence-base %s 2>&1", test_hachi_bin(), model, a, base);
        CHECKF(rc == 1 && strstr(out, bad[i].err) && !strchr(strchr(out, '\n') ? strchr(out, '\n') + 1 : "", '\n'),
               "%s: %s", a, out);
        free(out);
    }
    out = test_sh(&rc, "%s perplexity -m %s -f %s %s --kl-divergence --kl-divergence-base %s 2>&1", test_hachi_bin(), model, text,
             args, text);
    CHECKF(rc == 1 && strstr(out, "is not a KL divergence base"), "a text as base: %s", out);
    free(out);
    const char *cut = test_tmp("cut.kld");
    free(test_sh(&rc, "head -c 5000 %s > %s", base, cut));
    out = test_sh(&rc, "%s perplexity -m %s -f %s %s --kl-divergence --kl-divergence-base %s 2>&1", test_hachi_bin(), model, text,
             args, cut);
    CHECKF(rc == 1 && strstr(out, "is truncated or damaged: 5000 bytes"), "a truncated base: %s", out);
    free(out);
    const char *tiny = test_shared_path("data/llama-2-tiny-random.gguf");
    if (tiny) {
        out = test_sh(&rc, "%s perplexity -m %s -f %s %s --kl-divergence --kl-divergence-base %s 2>&1", test_hachi_bin(), tiny,
                 text, args, base);
        CHECKF(rc == 1 && strstr(out, "was made with another model"), "another model: %s", out);
        free(out);
    }
}
