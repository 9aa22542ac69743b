/* hachi perplexity: perplexity of a text file, and the KL divergence of a mode against a base.
 * Default: documents split on blank lines, each starting with BOS, cut at the
 * context length, every predicted token scored.
 * --chunks N: llama.cpp's method: the whole text tokenized once (with BOS),
 * cut into chunks of -c tokens (first token of each set to BOS), the second half
 * of each chunk scored, at most N chunks. --whole-window: chunks (all of them unless
 * --chunks), every position of each scored. Last line: `perplexity: X`.
 *
 * KL divergence (llama.cpp's --kl-divergence): --kl-divergence-base FILE alone saves, for
 * every scored position, the run's top-K log-probabilities (the base: run it dense);
 * --kl-divergence --kl-divergence-base FILE runs the mode the flags give on the same
 * positions and reports its perplexity, KL(base || mode) and how often the top tokens agree.
 *
 * The base file (little-endian):
 *   header  "HACHIKLD", u32 version 1, u32 n_vocab, u32 top_k, u32 ctx, u32 scoring
 *           (0 documents, 1 chunks' second halves, 2 whole windows), u32 windows,
 *           u64 positions, u64 model id, u64 text id, char mode[32] (the base's mode, NUL-padded)
 *   then per scored position, in order: f64 the negative log-likelihood of the text's next
 *           token, then top_k x (u32 id, f32 log-probability), largest first, ties by lower id.
 * The model id hashes the model file's size and 64 samples of 4 KiB spread over it; the text
 * id hashes every token evaluated and every window's bounds (so the tokenizer, the text, -c
 * and the scoring). A file made for another model, text or context is refused.
 * KL at one position: sum over the base's top-K tokens of p (log p - log q), plus the mass
 * outside them, P log(P / Q) (P, Q: 1 - the top-K's mass under base and mode): exact with
 * top_k = n_vocab, else a lower bound of the full KL. */
#include <math.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

#define KL_MAGIC "HACHIKLD"
#define KL_VERSION 1
#define KL_PIECE 256   /* tokens per eval, to bound the logits buffer */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;   // NOLINT(clang-analyzer-core.UndefinedBinaryOperatorResult): the callers hash written bytes (the analyzer does not follow memcpy and fread)
    return h;
}
#define FNV_INIT 0xcbf29ce484222325ull

enum { SCORE_DOCS = 0, SCORE_HALF = 1, SCORE_WHOLE = 2 };
static const char *scoring_name[3] = {"documents", "second half of each chunk", "whole window"};

typedef struct kl_header {
    char magic[8];
    uint32_t version, n_vocab, top_k, ctx, scoring, windows;
    uint64_t positions, model_id, text_id;
    char mode[32];
} kl_header;

_Static_assert(sizeof(kl_header) == 88, "kl_header is the file's 88-byte header");

typedef struct kl_entry { uint32_t id; float lp; } kl_entry;
_Static_assert(sizeof(kl_entry) == 8, "kl_entry is 8 bytes in the file");

/* What a run scores: windows of tokens, each evaluated from position 0, rows first..n-2 scored. */
typedef struct ppl_windows {
    int32_t *tokens;          /* every window's tokens, one after another (BOS first in each) */
    long n_tokens, cap_tokens;
    int32_t (*win)[2];        /* [n][2]: tokens in the window, first row scored */
    long n, cap;
} ppl_windows;

static bool windows_add(ppl_windows *w, const int32_t *t, int n, int first, int32_t bos) {
    if (w->n_tokens + n > w->cap_tokens) {
        long cap = CLI_MAX(2 * w->cap_tokens, w->n_tokens + n);
        int32_t *nt = realloc(w->tokens, sizeof(int32_t) * (size_t)cap);
        if (!nt) return false;
        w->tokens = nt;
        w->cap_tokens = cap;
    }
    if (w->n == w->cap) {
        long cap = w->cap ? 2 * w->cap : 64;
        int32_t (*nw)[2] = realloc(w->win, sizeof *w->win * (size_t)cap);
        if (!nw) return false;
        w->win = nw;
        w->cap = cap;
    }
    memcpy(w->tokens + w->n_tokens, t, sizeof(int32_t) * (size_t)n);
    if (bos >= 0) w->tokens[w->n_tokens] = bos;
    w->n_tokens += n;
    w->win[w->n][0] = n;
    w->win[w->n][1] = first;
    w->n++;
    return true;
}

/* The text id: every window's bounds and tokens. */
static uint64_t windows_id(const ppl_windows *w) {
    uint64_t h = FNV_INIT;
    h = fnv1a(h, w->win, sizeof *w->win * (size_t)w->n);
    return fnv1a(h, w->tokens, sizeof(int32_t) * (size_t)w->n_tokens);
}

/* One perplexity run: its session, what it sums, and the base it writes or reads. */
typedef struct ppl_run {
    hachi_session *s;
    int nv;
    float *rows;              /* [KL_PIECE][nv] logits of one eval */
    float *lp;                /* [nv] log-softmax of one row */
    double nll;               /* summed over the scored positions */
    long count;
    /* saving a base */
    FILE *save;
    int top_k;
    kl_entry *top;            /* [top_k] */
    /* comparing with a base */
    FILE *base;
    kl_entry *be;             /* [top_k] the base's entries at this position */
    double *kl;               /* [count] KL per position */
    long cap_kl, same;
    double nll_base, sum_d, sum_d2;
    bool io_error;            /* a base record could not be written or read */
} ppl_run;


/* The model file's size and 64 samples of 4 KiB; 0 when it cannot be read. */
static uint64_t model_id(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    uint64_t h = FNV_INIT;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    h = fnv1a(h, &size, sizeof size);
    unsigned char buf[4096] = {0};
    for (int i = 0; i < 64 && size > 0; i++) {
        long at = size > (long)sizeof buf ? (long)((double)(size - (long)sizeof buf) * i / 63) : 0;
        if (fseek(f, at, SEEK_SET)) break;
        size_t got = fread(buf, 1, sizeof buf, f);
        h = fnv1a(h, buf, got);
    }
    fclose(f);
    return h;
}

/* -log softmax(logits)[target] in double, and r->lp = the log-softmax rounded to f32. */
static double row_lp(ppl_run *r, const float *logits, int32_t target) {
    int nv = r->nv;
    float mx = logits[0];
    for (int i = 1; i < nv; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < nv; i++) sum += exp((double)logits[i] - mx);
    // cppcheck-suppress invalidFunctionArg ; sum >= 1: the largest logit's term is exp(0)
    double lse = log(sum);
    for (int i = 0; i < nv; i++) r->lp[i] = (float)((double)logits[i] - mx - lse);
    return lse - ((double)logits[target] - mx);
}

/* a before b in the base's order: larger log-prob first, then lower id */
static bool kl_before(kl_entry a, kl_entry b) { return a.lp > b.lp || (a.lp == b.lp && a.id < b.id); }

static void heap_down(kl_entry *h, int n, int i) {   /* min-heap under kl_before: the last kept on top */
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && kl_before(h[w], h[l])) w = l;
        if (r < n && kl_before(h[w], h[r])) w = r;
        if (w == i) return;
        kl_entry t = h[i]; h[i] = h[w]; h[w] = t;
        i = w;
    }
}

static int cmp_entry(const void *a, const void *b) {
    kl_entry x = *(const kl_entry *)a, y = *(const kl_entry *)b;
    return kl_before(x, y) ? -1 : kl_before(y, x) ? 1 : 0;
}

/* The top_k entries of r->lp, in the base's order. */
static void top_entries(ppl_run *r) {
    int k = r->top_k;
    for (int i = 0; i < k; i++) r->top[i] = (kl_entry){(uint32_t)i, r->lp[i]};
    for (int i = k / 2 - 1; i >= 0; i--) heap_down(r->top, k, i);
    for (int i = k; i < r->nv; i++) {
        kl_entry e = {(uint32_t)i, r->lp[i]};
        if (kl_before(e, r->top[0])) { r->top[0] = e; heap_down(r->top, k, 0); }
    }
    qsort(r->top, (size_t)k, sizeof *r->top, cmp_entry);
}

/* One scored position: logits predicting target. */
static void score_row(ppl_run *r, const float *logits, int32_t target) {
    double nll = row_lp(r, logits, target);
    r->nll += nll;
    r->count++;
    if (r->save) {
        top_entries(r);
        if (fwrite(&nll, sizeof nll, 1, r->save) != 1 ||
            fwrite(r->top, sizeof *r->top, (size_t)r->top_k, r->save) != (size_t)r->top_k) r->io_error = true;
    }
    if (!r->base || r->io_error) return;
    double nll_base;
    if (fread(&nll_base, sizeof nll_base, 1, r->base) != 1 ||
        fread(r->be, sizeof *r->be, (size_t)r->top_k, r->base) != (size_t)r->top_k) { r->io_error = true; return; }
    double kl = 0.0, pm = 0.0, qm = 0.0;
    for (int i = 0; i < r->top_k; i++) {
        uint32_t id = r->be[i].id < (uint32_t)r->nv ? r->be[i].id : 0;
        double lp = r->be[i].lp, lq = r->lp[id], p = exp(lp);
        kl += p * (lp - lq);
        pm += p;
        qm += exp(lq);
    }
    double P = 1.0 - pm, Q = 1.0 - qm;
    if (r->top_k < r->nv && P > 1e-9) kl += P * (log(P) - log(Q > 1e-30 ? Q : 1e-30));
    int32_t best = 0;   /* the mode's top token, ordered as the base's */
    for (int i = 1; i < r->nv; i++) if (r->lp[i] > r->lp[best]) best = i;
    r->same += (uint32_t)best == r->be[0].id;
    if (r->count > r->cap_kl) {
        double *n = realloc(r->kl, sizeof(double) * (size_t)(r->cap_kl = r->cap_kl ? 2 * r->cap_kl : 4096));
        if (!n) { r->io_error = true; return; }
        r->kl = n;
    }
    r->kl[r->count - 1] = kl;
    double d = nll - nll_base;
    r->nll_base += nll_base;
    r->sum_d += d;
    r->sum_d2 += d * d;
}

/* Evaluates t[0..n) from position 0 in pieces of KL_PIECE; scores rows first..n-2. */
static hachi_status score_window(ppl_run *r, const int32_t *t, int n, int first) {
    hachi_status st = hachi_session_rewind(r->s, 0);
    for (int a = 0; a < n && !st; a += KL_PIECE) {
        int b = CLI_MIN(n, a + KL_PIECE);
        bool scored = b > first && a < n - 1;
        st = hachi_session_eval(r->s, t + a, b - a, scored ? r->rows : NULL);
        for (int j = CLI_MAX(a, first); scored && !st && j < b && j < n - 1; j++)
            score_row(r, r->rows + (size_t)(j - a) * r->nv, t[j + 1]);
    }
    return st;
}

static int32_t *tokenize_all(hachi_model *m, const char *text, size_t len, bool bos, int32_t *n) {
    hachi_tokenize(m, text, len, bos, false, NULL, 0, n);
    int32_t *t = malloc(sizeof(int32_t) * (*n + 1));
    if (t && hachi_tokenize(m, text, len, bos, false, t, *n + 1, n) != HACHI_OK) { free(t); t = NULL; }
    return t;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The comparison's lines (after `perplexity: X`). */
static void print_kl(ppl_run *r) {
    double n = (double)r->count, sum = 0, sum2 = 0;
    for (long i = 0; i < r->count; i++) { sum += r->kl[i]; sum2 += r->kl[i] * r->kl[i]; }
    double mean = sum / n, sd = sqrt(fmax(0.0, sum2 / n - mean * mean));
    double md = r->sum_d / n, sdd = sqrt(fmax(0.0, r->sum_d2 / n - md * md));
    qsort(r->kl, (size_t)r->count, sizeof *r->kl, cmp_double);
    double same = r->same / n;
    printf("perplexity (base): %.6f\n", exp(r->nll_base / n));
    printf("ln(ppl/ppl base): %.4e ± %.4e\n", md, sdd / sqrt(n));
    printf("mean KL divergence: %.4e ± %.4e nats (sd %.4e, median %.4e, 99%%: %.4e, max %.4e)\n", mean, sd / sqrt(n), sd,
           r->kl[(r->count - 1) / 2], r->kl[(long)(0.99 * (double)(r->count - 1))], r->kl[r->count - 1]);
    printf("same top token: %.3f ± %.3f %% (%ld/%ld)\n", 100 * same, 100 * sqrt(same * (1 - same) / n), r->same,
           r->count);
}

int cmd_perplexity(int argc, char **argv) {
    const char *cmd = "perplexity", *path = NULL, *kl_path = NULL;
    cli_opts o;
    long max_chunks = -1, top_k = 32;
    bool whole = false, kl = false, top_given = false;
    int rc = 1;
    cli_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--chunks")) {   /* here: llama.cpp-style chunk count, not profile chunks */
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_int(cmd, a, v, 1, 1 << 20, &max_chunks)) return 1;
            continue;
        }
        int r = cli_opts_parse(cmd, &o, argc, argv, &i);
        if (r < 0) return 1;
        if (r > 0) continue;
        if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!(path = cli_value(cmd, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "--whole-window")) whole = true;
        else if (!strcmp(a, "--kl-divergence")) kl = true;
        else if (!strcmp(a, "--kl-divergence-base")) { if (!(kl_path = cli_value(cmd, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "--kl-top")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_int(cmd, a, v, 1, 1 << 24, &top_k)) return 1;
            top_given = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: hachi perplexity -m MODEL -f TEXT [-c CTX] [--chunks N] [--whole-window] [-t THREADS]\n"
                   "                        [--kl-divergence-base FILE [--kl-top K]] [--kl-divergence] [mode flags]\n"
                   "  (default) documents split on blank lines, each from BOS, cut at -c, every token scored\n"
                   "  --chunks N      the text cut into chunks of -c tokens (BOS first), the second half of each\n"
                   "                  scored, at most N chunks (llama.cpp's perplexity)\n"
                   "  --whole-window  chunks (all unless --chunks), every position of each scored\n"
                   "  --kl-divergence-base FILE   alone: save the run's top-K log-probs per scored position (the\n"
                   "                  base; run it dense). With --kl-divergence: compare this run (its mode flags,\n"
                   "                  e.g. --kv-type f32) with FILE: perplexity, KL(base||mode) in nats, same top token\n"
                   "  --kl-top K      log-probs saved per position (default 32; the vocabulary size: exact KL)\n"
                   CLI_MODE_USAGE);
            return 0;
        } else return cli_error(cmd, "unknown option '%s'", a);
    }
    if (!path) return cli_error(cmd, "no text file given (-f TEXT)");
    if (kl && !kl_path) return cli_error(cmd, "--kl-divergence needs --kl-divergence-base FILE");
    if (kl && top_given) return cli_error(cmd, "--kl-top applies when saving a base (the base file sets it)");
    if (top_given && !kl_path) return cli_error(cmd, "--kl-top needs --kl-divergence-base FILE (the base it saves)");
    if (whole && max_chunks < 0) max_chunks = 1 << 20;
    int scoring = max_chunks < 0 ? SCORE_DOCS : whole ? SCORE_WHOLE : SCORE_HALF;
    size_t len;
    char *text = cli_read_file(cmd, path, &len);
    if (!text) return 1;
    hachi_model *m = cli_load_model(cmd, &o, false);
    ppl_run r = {0};
    int32_t *toks = NULL;
    char *tmp_path = NULL;
    kl_header h = {.version = 0};
    ppl_windows w = {0};
    if (!m) goto out;
    int ctx = o.ctx_given ? o.sp.n_ctx : 2048;
    if (ctx < 2) { cli_error(cmd, "-c must be at least 2"); goto out; }
    o.sp.n_ctx = cli_ctx_for(ctx);
    int bos = hachi_model_bos(m);
    r.nv = hachi_model_n_vocab(m);
    hachi_status st = hachi_session_create(m, &o.sp, &r.s);
    if (st) { cli_lib_error(cmd, st, "cannot create the session"); goto out; }
    if (!(r.rows = malloc(sizeof(float) * (size_t)r.nv * KL_PIECE)) || !(r.lp = malloc(sizeof(float) * (size_t)r.nv))) {
        cli_error(cmd, "out of memory");
        goto out;
    }
    if (kl_path && kl) {
        if (!(r.base = fopen(kl_path, "rb"))) { cli_error(cmd, "cannot open '%s'", kl_path); goto out; }
        if (fread(&h, sizeof h, 1, r.base) != 1 || memcmp(h.magic, KL_MAGIC, 8) || h.version != KL_VERSION) {
            cli_error(cmd, "'%s' is not a KL divergence base (hachi perplexity --kl-divergence-base)", kl_path);
            goto out;
        }
        h.mode[sizeof h.mode - 1] = 0;
        if (h.n_vocab != (uint32_t)r.nv || h.model_id != model_id(o.model)) {
            cli_error(cmd, "'%s' was made with another model", kl_path);
            goto out;
        }
        if (h.ctx != (uint32_t)ctx || h.scoring != (uint32_t)scoring) {
            cli_error(cmd, "'%s' was made for another context: -c %u, %s (this run: -c %d, %s)", kl_path, h.ctx,
                      h.scoring < 3 ? scoring_name[h.scoring] : "?", ctx, scoring_name[scoring]);
            goto out;
        }
        if (h.top_k == 0 || h.top_k > h.n_vocab) { cli_error(cmd, "'%s': bad top-K %u", kl_path, h.top_k); goto out; }
        r.top_k = (int)h.top_k;
        if (!(r.be = malloc(sizeof *r.be * (size_t)r.top_k))) { cli_error(cmd, "out of memory"); goto out; }
    } else if (kl_path) {
        r.top_k = (int)CLI_MIN(top_k, (long)r.nv);
        size_t pl = strlen(kl_path) + 8;
        if (!(tmp_path = malloc(pl)) || !(r.top = malloc(sizeof *r.top * (size_t)r.top_k))) {
            cli_error(cmd, "out of memory");
            goto out;
        }
        if (!(r.save = cli_out_open(cmd, kl_path, tmp_path, pl))) goto out;
        if (fwrite(&h, sizeof h, 1, r.save) != 1) {   /* header last */
            cli_error(cmd, "cannot write '%s': %s", tmp_path, strerror(errno));
            goto out;
        }
    }

    if (max_chunks > 0) {
        int32_t n;
        if (!(toks = tokenize_all(m, text, len, bos >= 0, &n))) { cli_error(cmd, "cannot tokenize '%s'", path); goto out; }
        long n_chunks = n / ctx < max_chunks ? n / ctx : max_chunks;
        if (n_chunks == 0) { cli_error(cmd, "'%s' has %d tokens, fewer than one chunk of %d", path, n, ctx); goto out; }
        for (long c = 0; c < n_chunks; c++)
            if (!windows_add(&w, toks + c * ctx, ctx, whole ? 0 : ctx / 2, bos)) { cli_error(cmd, "out of memory"); goto out; }
    } else {
        /* documents: split on blank lines */
        size_t i = 0;
        while (i < len) {
            while (i < len && (text[i] == '\n' || text[i] == '\r')) i++;
            size_t start = i;
            while (i < len && !(text[i] == '\n' && (i + 1 < len && (text[i + 1] == '\n' ||
                               (text[i + 1] == '\r' && i + 2 < len && text[i + 2] == '\n'))))) i++;
            size_t end = i;
            while (end > start && (text[end - 1] == '\n' || text[end - 1] == '\r')) end--;
            if (end == start) continue;
            int32_t n;
            free(toks);
            if (!(toks = tokenize_all(m, text + start, end - start, bos >= 0, &n))) { cli_error(cmd, "cannot tokenize"); goto out; }
            if (n > ctx) n = ctx;
            if (n < 2) continue;
            if (!windows_add(&w, toks, n, 0, -1)) { cli_error(cmd, "out of memory"); goto out; }
        }
    }
    long positions = 0;
    for (long k = 0; k < w.n; k++) positions += w.win[k][0] - 1 - w.win[k][1];
    if (positions == 0) {
        cli_error(cmd, "'%s' has no text to score%s", path, ctx < 8 ? " (-c is too small: a window scores half its tokens)" : "");
        goto out;
    }
    uint64_t text_id = windows_id(&w);
    if (r.base && (h.windows != (uint32_t)w.n || h.positions != (uint64_t)positions || h.text_id != text_id)) {
        cli_error(cmd, "'%s' was made for another text (%llu positions in %u windows; this run: %ld in %ld)", kl_path,
                  (unsigned long long)h.positions, h.windows, positions, w.n);
        goto out;
    }
    if (r.base) {
        long want = (long)sizeof h + positions * (long)(sizeof(double) + sizeof(kl_entry) * (size_t)r.top_k);
        long size = fseek(r.base, 0, SEEK_END) == 0 ? ftell(r.base) : -1;
        if (size != want || fseek(r.base, (long)sizeof h, SEEK_SET)) {
            cli_error(cmd, "'%s' is truncated or damaged: %ld bytes, its header says %ld", kl_path, size, want);
            goto out;
        }
    }
    for (long k = 0, at = 0; k < w.n; at += w.win[k][0], k++) {
        if ((st = score_window(&r, w.tokens + at, w.win[k][0], w.win[k][1]))) { cli_lib_error(cmd, st, "eval failed"); goto out; }
        if (max_chunks > 0) fprintf(stderr, "[%ld] %.4f\n", k + 1, exp(r.nll / r.count));
    }
    long windows = w.n;
    if (r.io_error || (r.base && fgetc(r.base) != EOF)) {
        cli_error(cmd, "cannot %s '%s'%s", r.save ? "write" : "read", r.save ? tmp_path : kl_path,
                  r.save ? "" : ": its size does not match its header");
        goto out;
    }
    char mode[32];
    cli_mode_name(&o.sp, mode, sizeof mode);
    if (r.save) {
        memcpy(h.magic, KL_MAGIC, 8);
        h.version = KL_VERSION;
        h.n_vocab = (uint32_t)r.nv;
        h.top_k = (uint32_t)r.top_k;
        h.ctx = (uint32_t)ctx;
        h.scoring = (uint32_t)scoring;
        h.windows = (uint32_t)windows;
        h.positions = (uint64_t)r.count;
        h.model_id = model_id(o.model);
        h.text_id = text_id;
        memcpy(h.mode, mode, sizeof h.mode);
        FILE *f = r.save;
        r.save = NULL;
        const bool ok = !fseek(f, 0, SEEK_SET) && fwrite(&h, sizeof h, 1, f) == 1;
        if (!cli_out_close(cmd, f, tmp_path, kl_path, ok) || !ok) {
            if (!ok) cli_error(cmd, "cannot write '%s'", kl_path);
            goto out;
        }
        fprintf(stderr, "kl-divergence base: %ld positions, top %d log-probs each (%s), saved to %s\n", r.count,
                r.top_k, mode, kl_path);
    }
    fprintf(stderr, "%ld %s, %ld tokens scored, nll %.6f\n", windows, max_chunks > 0 ? "chunks" : "documents", r.count, r.nll);
    if (r.base)
        printf("kl-divergence: base %s (%s, top %d), this run %s; %ld %s of %d, %s: %ld positions\n", kl_path, h.mode,
               r.top_k, mode, windows, max_chunks > 0 ? "chunks" : "documents", ctx, scoring_name[scoring], r.count);
    printf("perplexity: %.6f\n", exp(r.nll / r.count));
    if (r.base) print_kl(&r);
    rc = 0;
out:
    if (r.save) { fclose(r.save); remove(tmp_path); }
    if (r.base) fclose(r.base);
    free(tmp_path);
    free(text);
    free(toks);
    free(w.tokens); free(w.win);
    free(r.rows); free(r.lp); free(r.top); free(r.be); free(r.kl);
    hachi_session_free(r.s);
    cli_free_model(&o, m);
    return rc;
}
