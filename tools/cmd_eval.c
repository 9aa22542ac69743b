/* hachi eval: logits of every position of a token-id sequence, N tokens per
 * forward (default all at once; --step 1 is the one-token decode path), written
 * as raw little-endian float32 [n_tokens][n_vocab]. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

/* Whitespace-separated ids; *n set; NULL with an error printed on failure. */
int32_t *cli_read_ids(const char *cmd, const char *path, int32_t *n) {
    size_t len;
    char *text = cli_read_file(cmd, path, &len);
    if (!text) return NULL;
    int32_t cap = 256, cnt = 0;
    int32_t *ids = malloc(sizeof *ids * cap);
    char *p = text;
    while (ids) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 0x7fffffff || (*end && !strchr(" \n\t\r", *end))) {
            cli_error(cmd, "'%s': token %d is not a non-negative integer", path, cnt);
            free(ids); ids = NULL; break;
        }
        if (cnt == cap) {
            int32_t *ni = realloc(ids, sizeof *ids * (cap *= 2));
            if (!ni) { free(ids); ids = NULL; break; }
            ids = ni;
        }
        // cppcheck-suppress nullPointerRedundantCheck ; ids is non-NULL inside the loop (every NULL path breaks)
        ids[cnt++] = (int32_t)v;
        p = end;
    }
    free(text);
    if (ids && cnt == 0) { cli_error(cmd, "'%s' holds no token ids", path); free(ids); ids = NULL; }
    *n = cnt;
    return ids;
}

int cmd_eval(int argc, char **argv) {
    const char *cmd = "eval", *tok_path = NULL, *out_path = NULL;
    cli_opts o;
    long step = 0;
    int rc = 1;
    cli_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        int r = cli_opts_parse(cmd, &o, argc, argv, &i);
        if (r < 0) return 1;
        if (r > 0) continue;
        const char *a = argv[i];
        if (!strcmp(a, "--tokens")) { if (!(tok_path = cli_value(cmd, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "--logits-out")) { if (!(out_path = cli_value(cmd, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "--step")) {
            const char *v = cli_value(cmd, argc, argv, &i);
            if (!v || !cli_int(cmd, a, v, 1, 32768, &step)) return 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: hachi eval -m MODEL --tokens FILE --logits-out OUT [--step N] [-c CTX] [-t THREADS]\n");
            return 0;
        } else return cli_error(cmd, "unknown option '%s'", a);
    }
    if (!tok_path) return cli_error(cmd, "no token file given (--tokens FILE)");
    if (!out_path) return cli_error(cmd, "no output given (--logits-out OUT)");
    if (!cli_replaceable(cmd, out_path) || !cli_not_input(cmd, out_path, tok_path)) return 1;
    if (strlen(out_path) + 5 > 4096) return cli_error(cmd, "the output path is too long");
    int32_t n = 0;
    int32_t *ids = cli_read_ids(cmd, tok_path, &n);
    if (!ids) return 1;
    hachi_model *m = cli_load_model(cmd, &o, false);
    hachi_session *s = NULL;
    float *logits = NULL;
    char tmp[4096];
    if (!m) goto out;
    int nv = hachi_model_n_vocab(m);
    if (!o.ctx_given) o.sp.n_ctx = cli_ctx_for(n) ? cli_ctx_for(n) : 32768;
    if (n > o.sp.n_ctx) { cli_error(cmd, "%d tokens do not fit the context of %d", n, o.sp.n_ctx); goto out; }
    if (step == 0) step = n;
    if (o.sp.n_batch < step && step <= 512) o.sp.n_batch = (int32_t)step;
    hachi_status st = hachi_session_create(m, &o.sp, &s);
    if (st) { cli_lib_error(cmd, st, "cannot create the session"); goto out; }
    if (!(logits = malloc(sizeof(float) * (size_t)nv * n))) { cli_error(cmd, "out of memory"); goto out; }
    for (int32_t i = 0; i < n; i += (int32_t)step) {
        int32_t c = (int32_t)(n - i < step ? n - i : step);
        if ((st = hachi_session_eval(s, ids + i, c, logits + (size_t)i * nv))) { cli_lib_error(cmd, st, "eval failed"); goto out; }
    }
    FILE *f = cli_out_open(cmd, out_path, tmp, sizeof tmp);
    if (!f) goto out;
    const bool wrote = fwrite(logits, sizeof(float), (size_t)nv * n, f) == (size_t)nv * n;
    if (!wrote) cli_error(cmd, "cannot write '%s': %s", tmp, strerror(errno));
    if (!cli_out_close(cmd, f, tmp, out_path, wrote) || !wrote) goto out;
    fprintf(stderr, "wrote %d x %d logits to %s\n", n, nv, out_path);
    rc = 0;
out:
    free(logits);
    free(ids);
    hachi_session_free(s);
    cli_free_model(&o, m);
    return rc;
}
