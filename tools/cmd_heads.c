/* hachi heads: classify the query heads of a model's full-attention layers as streaming
 * (attend to a sink and a recent window only) or retrieval (attend to every key), and save
 * the classification for --heads (the file format: src/heads.c, README).
 *
 * The classifier is the output deviation a head causes when it alone streams: on calibration
 * passkey prompts (tools/passkey.c, a seed of their own, so not the prompts hachi passkey
 * scores by default), the KL divergence from dense attention's of the distributions of the
 * key's tokens after the prompt (teacher-forced: the positions where the model must retrieve),
 * summed over the key, averaged over the prompts. That is the objective
 * DuoAttention trains its gates on (the deviation of streaming from full attention on
 * passkey data), measured per head instead of learned; unlike the attention mass outside the
 * window it needs no look inside the attention and counts a head only by what it changes.
 * Heads then stream in the order of their scores, as many as keep the gate on the
 * calibration prompts: every key that dense attention answers is still answered, and the mean
 * KL divergence of all the streaming heads together stays within --max-kl. The count is found
 * by bisection (assuming that streaming more heads never helps). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

static const char *usage_text =
    "usage: hachi heads -m MODEL --filler TEXT -o FILE [--lengths 2048,8192] [--depths 0.1,0.5,0.9] [-n N]\n"
    "                   [--seed S] [--sink N] [--window N] [--max-kl X] [-c CTX] [-t THREADS]\n"
    "  Scores every query head of the full-attention layers by the KL divergence its streaming\n"
    "  alone causes on calibration passkey prompts, streams the lowest-scoring heads while the\n"
    "  gate holds (every key dense answers still answered, mean KL <= --max-kl), writes FILE.\n"
    "  --filler TEXT   held-out text the prompts are cut from\n"
    "  --lengths L,..  calibration prompt lengths (default 2048,8192)\n"
    "  --depths D,..   needle depths (default 0.1,0.5,0.9)\n"
    "  -n N            prompts per length and depth (default 2)\n"
    "  --seed S        draws the calibration prompts (default 1000)\n"
    "  --sink N        positions every streaming head keeps from the start (default 16)\n"
    "  --window N      recent positions a streaming head attends to (default 256)\n"
    "  --max-kl X      the gate's mean KL divergence in nats (default 0.02)\n";

typedef struct head_id { int layer, head; double score; } head_id;

typedef struct calib {
    const hachi_model *m;
    const cli_opts *o;
    int n_len, n_prompts;           /* lengths; prompts in all */
    int *len_of;                    /* [n_prompts] length of each prompt */
    const int *lengths;             /* [n_len] */
    int32_t **ids;                  /* [n_prompts] */
    pk_prompt *pr;                  /* [n_prompts] */
    float *dense_lg;                /* [n_prompts][8][n_vocab] dense logits of each key token */
    bool *dense_ok;                 /* [n_prompts] dense answered */
    float *lg;                      /* [9][n_vocab] scratch: a key's logits, then an answer's */
} calib;

/* KL(p || q) of the softmax distributions of logits a (p) and b (q). */
static double kl_div(const float *a, const float *b, int n) {
    double ma = -INFINITY, mb = -INFINITY, za = 0, zb = 0, kl = 0;
    for (int i = 0; i < n; i++) { ma = fmax(ma, a[i]); mb = fmax(mb, b[i]); }
    for (int i = 0; i < n; i++) { za += exp(a[i] - ma); zb += exp(b[i] - mb); }
    for (int i = 0; i < n; i++) {
        const double la = a[i] - ma - log(za), lb = b[i] - mb - log(zb);
        kl += exp(la) * (la - lb);
    }
    return kl > 0 ? kl : 0;
}

/* Logits [pr->n_answer][nv] of the key's tokens after prompt ids[0..n) (teacher-forced), from
 * position 0. */
static hachi_status key_logits(hachi_session *s, const int32_t *ids, int n, const pk_prompt *pr, int nv, float *lg) {
    hachi_status st;
    if ((st = hachi_session_rewind(s, 0)) || (st = hachi_session_eval(s, ids, n, NULL))) return st;
    memcpy(lg, hachi_session_logits(s), sizeof(float) * (size_t)nv);
    return pr->n_answer > 1 ? hachi_session_eval(s, pr->answer, pr->n_answer - 1, lg + nv) : HACHI_OK;
}

/* One mode (heads; NULL = dense) over the calibration prompts: the mean over the prompts of
 * the key's KL divergence from dense and, with answers, whether every prompt dense answers is
 * still answered. For dense it fills the calib's logits and answers. false with an error
 * printed on a failure. */
static bool run_mode(const char *cmd, calib *c, const hachi_heads *heads, bool answers, double *mean_kl, bool *keeps) {
    const int nv = hachi_model_n_vocab(c->m);
    hachi_session *s = NULL;
    double kl = 0;
    *keeps = true;
    for (int i = 0; i < c->n_prompts; i++) {
        if (i == 0 || c->len_of[i] != c->len_of[i - 1]) {
            hachi_session_params p = c->o->sp;
            p.n_ctx = cli_ctx_for(c->len_of[i] + PK_GEN);
            if (c->o->ctx_given && c->o->sp.n_ctx > p.n_ctx) p.n_ctx = cli_ctx_for(c->o->sp.n_ctx);
            p.heads = heads;
            hachi_session_free(s);
            hachi_status st = hachi_session_create(c->m, &p, &s);
            if (st) return cli_lib_error(cmd, st, "cannot create the session"), false;
        }
        const pk_prompt *pr = &c->pr[i];
        float *dense = c->dense_lg + (size_t)i * 8 * nv, *lg = heads ? c->lg : dense;
        hachi_status st = key_logits(s, c->ids[i], c->len_of[i], pr, nv, lg);
        if (!st && answers) {
            pk_answer a;
            st = pk_answer_prompt(s, c->m, c->ids[i], c->len_of[i], pr, c->lg + (size_t)8 * nv, &a);
            if (!heads) c->dense_ok[i] = a.correct;
            else if (c->dense_ok[i] && !a.correct) *keeps = false;
        }
        if (st) { hachi_session_free(s); return cli_lib_error(cmd, st, "eval failed"), false; }
        for (int j = 0; heads && j < pr->n_answer; j++) kl += kl_div(dense + (size_t)j * nv, lg + (size_t)j * nv, nv);
    }
    hachi_session_free(s);
    *mean_kl = kl / c->n_prompts;
    return true;
}

static int by_score(const void *a, const void *b) {
    const head_id *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    return x->layer != y->layer ? x->layer - y->layer : x->head - y->head;
}

/* The first k heads of the ranking streaming. */
static hachi_status heads_of(const hachi_model *m, int sink, int window, const head_id *rank, int k, hachi_heads **out) {
    hachi_status st = hachi_heads_create(m, sink, window, out);
    for (int i = 0; !st && i < k; i++) st = hachi_heads_set(*out, rank[i].layer, rank[i].head, true);
    return st;
}

int cmd_heads(int argc, char **argv) {
    const char *cmd = "heads", *filler_path = NULL, *out_path = NULL;
    double lengths_d[PK_MAX_LIST] = {2048, 8192}, depths[PK_MAX_LIST] = {0.1, 0.5, 0.9}, max_kl = 0.02;
    int n_len = 2, n_depth = 3;
    long n_per = 2, sink = 16, window = 256;
    cli_opts o;
    cli_opts_init(&o);
    o.smp.seed = 1000;
    for (int i = 1; i < argc; i++) {
        int r = cli_opts_parse(cmd, &o, argc, argv, &i);
        if (r < 0) return 1;
        if (r > 0) continue;
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage_text, stdout); return 0; }
        static const char *const valued[] = {"--filler", "-o", "--lengths", "--depths", "-n", "--sink", "--window", "--max-kl"};
        if (!cli_one_of(a, valued, sizeof valued / sizeof valued[0]))
            return cli_error(cmd, "unknown option '%s' (see hachi heads --help)", a);
        if (!(v = cli_value(cmd, argc, argv, &i))) return 1;
        if (!strcmp(a, "--filler")) filler_path = v;
        else if (!strcmp(a, "-o")) out_path = v;
        else if (!strcmp(a, "--lengths")) { if ((n_len = pk_parse_list(cmd, a, v, 64, HACHI_CTX_MAX - PK_GEN, true, lengths_d)) < 0) return 1; }
        else if (!strcmp(a, "--depths")) { if ((n_depth = pk_parse_list(cmd, a, v, 0, 1, false, depths)) < 0) return 1; }
        else if (!strcmp(a, "-n")) { if (!cli_int(cmd, a, v, 1, 1000, &n_per)) return 1; }
        else if (!strcmp(a, "--sink")) { if (!cli_int(cmd, a, v, 0, HACHI_CTX_MAX, &sink)) return 1; }
        else if (!strcmp(a, "--window")) { if (!cli_int(cmd, a, v, 1, HACHI_CTX_MAX, &window)) return 1; }
        else if (!strcmp(a, "--max-kl")) { if (!cli_float(cmd, a, v, 0, 100, &max_kl)) return 1; }
        else return cli_error(cmd, "unknown option '%s' (see hachi heads --help)", a);
    }
    if (!filler_path) return cli_error(cmd, "no filler text given (--filler TEXT)");
    if (!out_path) return cli_error(cmd, "no output file given (-o FILE)");
    if (o.sp.heads || o.heads_path) return cli_error(cmd, "--heads: heads classifies from dense attention");
    /* the output checked before the calibration's minutes: a file it may replace, none of the
     * inputs, in a directory that takes a new file */
    char probe[4096];
    if (!cli_not_input(cmd, out_path, o.model) || !cli_not_input(cmd, out_path, filler_path)) return 1;
    void *pf = cli_out_open(cmd, out_path, probe, sizeof probe);
    if (!pf) return 1;
    cli_out_close(cmd, pf, probe, out_path, false);

    int rc = 1, lengths[PK_MAX_LIST], n_heads = 0;
    hachi_model *m = NULL;
    hachi_heads *h = NULL;
    pk_source src = {0};
    calib c = {0};
    head_id *rank = NULL;
    if (!(m = cli_load_model(cmd, &o, false)) || !pk_source_init(cmd, m, filler_path, &src)) goto out;
    const int nv = hachi_model_n_vocab(m);
    if (nv <= 0) { cli_error(cmd, "model '%s' has no vocabulary", o.model); goto out; }
    const int n_layer = hachi_model_n_layer(m), n_head = hachi_model_n_head(m);
    hachi_status st;
    for (int l = 0; l < n_layer; l++) n_heads += hachi_model_layer_sliding(m, l) ? 0 : n_head;
    if (!n_heads) { cli_error(cmd, "model '%s' has no full-attention layers", o.model); goto out; }
    if (!(rank = calloc((size_t)n_heads, sizeof *rank))) { cli_error(cmd, "out of memory"); goto out; }

    c.m = m;
    c.o = &o;
    c.n_len = n_len;
    c.n_prompts = n_len * n_depth * (int)n_per;
    if (c.n_prompts < 1) { cli_error(cmd, "no calibration prompts"); goto out; }
    for (int l = 0; l < n_len; l++) lengths[l] = (int)lengths_d[l];
    c.lengths = lengths;
    c.len_of = calloc((size_t)c.n_prompts, sizeof *c.len_of);
    c.ids = calloc((size_t)c.n_prompts, sizeof *c.ids);
    c.pr = calloc((size_t)c.n_prompts, sizeof *c.pr);
    c.dense_lg = malloc(sizeof(float) * (size_t)nv * 8 * (size_t)c.n_prompts);
    c.dense_ok = calloc((size_t)c.n_prompts, sizeof *c.dense_ok);
    c.lg = malloc(sizeof(float) * (size_t)nv * 9);
    if (!c.len_of || !c.ids || !c.pr || !c.dense_lg || !c.dense_ok || !c.lg) { cli_error(cmd, "out of memory"); goto out; }
    for (int l = 0, i = 0; l < n_len; l++)
        for (int d = 0; d < n_depth; d++)
            for (int k = 0; k < n_per; k++, i++) {
                c.len_of[i] = lengths[l];
                if (!(c.ids[i] = malloc(sizeof(int32_t) * (size_t)lengths[l]))) { cli_error(cmd, "out of memory"); goto out; }
                if (!pk_build_prompt(cmd, &src, lengths[l], depths[d], o.smp.seed, k, c.ids[i], &c.pr[i])) goto out;
            }
    double t0 = cli_time_ms(), kl;
    bool keeps;
    if (!run_mode(cmd, &c, NULL, true, &kl, &keeps)) goto out;
    int n_ok = 0;
    for (int i = 0; i < c.n_prompts; i++) n_ok += c.dense_ok[i];
    printf("heads: %d calibration prompts (seed %llu), dense answers %d; sink %ld, window %ld, gate: mean KL <= %g "
           "and every answered key kept\n", c.n_prompts, (unsigned long long)o.smp.seed, n_ok, sink, window, max_kl);
    fflush(stdout);

    /* every head of the full-attention layers, scored streaming alone */
    printf("%6s %5s %12s\n", "layer", "head", "KL alone");
    for (int l = 0, i = 0; l < n_layer; l++)
        for (int k = 0; !hachi_model_layer_sliding(m, l) && k < n_head; k++, i++) {
            rank[i] = (head_id){l, k, 0};
            if ((st = heads_of(m, (int)sink, (int)window, &rank[i], 1, &h))) { cli_lib_error(cmd, st, "streaming heads"); goto out; }
            const bool ok = run_mode(cmd, &c, h, false, &rank[i].score, &keeps);
            hachi_heads_free(h);
            h = NULL;
            if (!ok) goto out;
            printf("%6d %5d %12.6f\n", l, k, rank[i].score);
            fflush(stdout);
        }
    qsort(rank, (size_t)n_heads, sizeof *rank, by_score);

    /* the most heads that keep the gate: bisection over the ranking's prefixes */
    int lo = 0, hi = n_heads;   /* lo keeps the gate; is hi + 1 .. known to fail */
    while (lo < hi) {
        const int k = (lo + hi + 1) / 2;
        if ((st = heads_of(m, (int)sink, (int)window, rank, k, &h))) { cli_lib_error(cmd, st, "streaming heads"); goto out; }
        bool ok = run_mode(cmd, &c, h, true, &kl, &keeps);
        hachi_heads_free(h);
        h = NULL;
        if (!ok) goto out;
        const bool pass = keeps && kl <= max_kl;
        printf("streaming the %d best heads: mean KL %.6f, answered keys %s: %s\n", k, kl, keeps ? "kept" : "lost",
               pass ? "passes" : "fails");
        fflush(stdout);
        if (pass) lo = k; else hi = k - 1;
    }
    if ((st = heads_of(m, (int)sink, (int)window, rank, lo, &h)) || (st = hachi_heads_save(h, out_path))) {
        cli_lib_error(cmd, st, "cannot save the streaming heads");
        goto out;
    }
    printf("streaming heads: %d of %d; layers whose heads all stream:", lo, n_heads);
    int n_all = 0;
    for (int l = 0; l < n_layer; l++) {
        int k = 0;
        while (k < n_head && hachi_heads_get(h, l, k)) k++;
        if (k == n_head) { printf(" %d", l); n_all++; }
    }
    printf("%s -> %s (%.1f s)\n", n_all ? "" : " none", out_path, (cli_time_ms() - t0) / 1e3);
    rc = 0;
out:
    for (int i = 0; c.ids && i < c.n_prompts; i++) free(c.ids[i]);
    free(c.ids); free(c.len_of); free(c.pr); free(c.dense_lg); free(c.dense_ok); free(c.lg);
    free(rank);
    hachi_heads_free(h);
    pk_source_free(&src);
    cli_free_model(&o, m);
    return rc;
}
