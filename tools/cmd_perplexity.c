/* hachi perplexity: perplexity of a text file.
 * Default: documents split on blank lines, each starting with BOS, cut at the
 * context length, every predicted token scored.
 * --chunks N: llama.cpp's method: the whole text tokenized once (with BOS),
 * cut into chunks of -c tokens (first token of each set to BOS), the second half
 * of each chunk scored, at most N chunks. Last line: `perplexity: X`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

/* Adds -log softmax(logits)[target] for each row: nll += ..., returns rows scored. */
static double row_nll(const float *logits, int nv, int32_t target) {
    float mx = logits[0];
    for (int i = 1; i < nv; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < nv; i++) sum += exp((double)logits[i] - mx);
    // cppcheck-suppress invalidFunctionArg ; sum >= 1: the largest logit adds exp(0)
    return log(sum) - ((double)logits[target] - mx);
}

static int32_t *tokenize_all(hachi_model *m, const char *text, size_t len, bool bos, int32_t *n) {
    hachi_tokenize(m, text, len, bos, false, NULL, 0, n);
    int32_t *t = malloc(sizeof(int32_t) * (*n + 1));
    if (t && hachi_tokenize(m, text, len, bos, false, t, *n + 1, n) != HACHI_OK) { free(t); t = NULL; }
    return t;
}

int cmd_perplexity(int argc, char **argv) {
    const char *cmd = "perplexity", *path = NULL;
    cli_opts o;
    long max_chunks = -1;
    int rc = 1;
    cli_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--chunks")) {   /* here: llama.cpp-style chunk count, not profile chunks */
            const char *v = cli_value(cmd, argc, argv, &i);
            if (!v || !cli_int(cmd, a, v, 1, 1 << 20, &max_chunks)) return 1;
            continue;
        }
        int r = cli_opts_parse(cmd, &o, argc, argv, &i);
        if (r < 0) return 1;
        if (r > 0) continue;
        if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!(path = cli_value(cmd, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: hachi perplexity -m MODEL -f TEXT [-c CTX] [--chunks N] [-t THREADS]\n");
            return 0;
        } else return cli_error(cmd, "unknown option '%s'", a);
    }
    if (!path) return cli_error(cmd, "no text file given (-f TEXT)");
    size_t len;
    char *text = cli_read_file(cmd, path, &len);
    if (!text) return 1;
    hachi_model *m = cli_load_model(cmd, &o, false);
    hachi_session *s = NULL;
    float *logits = NULL;
    int32_t *toks = NULL;
    if (!m) goto out;
    int ctx = o.ctx_given ? o.sp.n_ctx : 2048;
    if (ctx < 2) { cli_error(cmd, "-c must be at least 2"); goto out; }
    o.sp.n_ctx = cli_ctx_for(ctx);
    int nv = hachi_model_n_vocab(m), bos = hachi_model_bos(m);
    hachi_status st = hachi_session_create(m, &o.sp, &s);
    if (st) { cli_lib_error(cmd, st, "cannot create the session"); goto out; }
    if (!(logits = malloc(sizeof(float) * (size_t)nv * ctx))) { cli_error(cmd, "out of memory"); goto out; }
    double nll = 0.0;
    long count = 0, docs = 0;

    if (max_chunks > 0) {
        int32_t n;
        if (!(toks = tokenize_all(m, text, len, bos >= 0, &n))) { cli_error(cmd, "cannot tokenize '%s'", path); goto out; }
        long n_chunks = n / ctx < max_chunks ? n / ctx : max_chunks;
        if (n_chunks == 0) { cli_error(cmd, "'%s' has %d tokens, fewer than one chunk of %d", path, n, ctx); goto out; }
        int first = ctx / 2;
        for (long c = 0; c < n_chunks; c++) {
            int32_t *chunk = toks + c * ctx, saved = chunk[0];
            if (bos >= 0) chunk[0] = bos;
            hachi_session_rewind(s, 0);
            st = hachi_session_eval(s, chunk, ctx, logits);
            chunk[0] = saved;
            if (st) { cli_lib_error(cmd, st, "eval failed"); goto out; }
            for (int j = first; j < ctx - 1; j++, count++) nll += row_nll(logits + (size_t)j * nv, nv, chunk[j + 1]);
            fprintf(stderr, "[%ld] %.4f\n", c + 1, exp(nll / count));
        }
        docs = n_chunks;
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
            hachi_session_rewind(s, 0);
            if ((st = hachi_session_eval(s, toks, n, logits))) { cli_lib_error(cmd, st, "eval failed"); goto out; }
            for (int j = 0; j < n - 1; j++, count++) nll += row_nll(logits + (size_t)j * nv, nv, toks[j + 1]);
            docs++;
        }
    }
    if (count == 0) { cli_error(cmd, "'%s' has no text to score", path); goto out; }
    fprintf(stderr, "%ld %s, %ld tokens scored, nll %.6f\n", docs, max_chunks > 0 ? "chunks" : "documents", count, nll);
    printf("perplexity: %.6f\n", exp(nll / count));
    rc = 0;
out:
    free(text);
    free(toks);
    free(logits);
    hachi_session_free(s);
    hachi_model_free(m);
    return rc;
}
