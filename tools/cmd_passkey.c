/* hachi passkey: passkey retrieval of a mode (the session params the shared flags build)
 * against its dense f16 baseline (cli_dense_params), in one process, on the same prompts.
 *
 * The prompts are those of tools/passkey.c (the format of ../shared/models/README.md).
 *
 * Scored per prompt and per run (dense, mode):
 *   correct  the first run of exactly 5 digits in the text of 8 greedy tokens is K;
 *   margin   teacher-forced after the prompt and the answer's tokens before the key's first
 *            digit (" " on gemma4-micro), the logit of the token holding that digit minus the
 *            largest other logit (> 0: greedy starts the key right), in logits (softcapped).
 * Each length runs in the smallest context mode holding length + 8 tokens (at least -c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"


static const char *usage_text =
    "usage: hachi passkey -m MODEL --filler TEXT [--lengths 2048,8192] [--depths 0.1,0.5,0.9] [-n N]\n"
    "                     [--seed S] [--json OUT] [--dump-prompts OUT] [--dense-only] [mode flags]\n"
    "                     [-c CTX] [-t THREADS]\n"
    "  Runs the mode (the session the flags build, e.g. --kv-type f32) and dense f16 (the same\n"
    "  params otherwise) on the same passkey prompts and prints, per length and depth, the\n"
    "  correct answers, the mean logit margin and the KV bytes a token reads, mode / dense.\n"
    "  --filler TEXT   held-out text the prompts are cut from (tokenized once)\n"
    "  --lengths L,..  prompt lengths in tokens, each exact (default 2048)\n"
    "  --depths D,..   needle depths as fractions of the filler, 0..1 (default 0.1,0.5,0.9)\n"
    "  -n N            prompts per length and depth (default 20)\n"
    "  --seed S        draws the keys and filler offsets (default 0)\n"
    "  --json OUT      every prompt's key, offset, needle position, tokens, answer and margin\n"
    "  --dump-prompts OUT  the prompts' token ids, one prompt per line (the fixtures' format)\n"
    "  --dense-only    run the dense baseline alone\n"
    "  correct: the first 5-digit number in 8 greedy tokens is the key. margin: after the prompt\n"
    "  and the answer's tokens before the key's first digit (teacher-forced), the logit of the\n"
    "  key's first digit token minus the best other logit, averaged over the prompts.\n"
    CLI_MODE_USAGE;

/* Totals of one (length, depth) cell, or of a length, or of all. */
typedef struct pk_tally {
    int n, correct[2], same;
    double margin[2];
} pk_tally;

static void tally_add(pk_tally *t, const pk_answer a[2], bool with_mode) {
    t->n++;
    for (int r = 0; r < (with_mode ? 2 : 1); r++) {
        t->correct[r] += a[r].correct;
        t->margin[r] += a[r].margin;
    }
    t->same += with_mode && !memcmp(a[0].toks, a[1].toks, sizeof a[0].toks);
}

static void tally_merge(pk_tally *t, const pk_tally *u) {
    t->n += u->n;
    t->same += u->same;
    for (int r = 0; r < 2; r++) { t->correct[r] += u->correct[r]; t->margin[r] += u->margin[r]; }
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static void json_answer(FILE *f, const char *name, const pk_answer *a) {
    fprintf(f, "\"%s\": {\"correct\": %s, \"margin\": %.6f, \"tokens\": [", name, a->correct ? "true" : "false",
            a->margin);
    for (int k = 0; k < PK_GEN; k++) fprintf(f, "%s%d", k ? ", " : "", a->toks[k]);
    fputs("], \"text\": ", f);
    json_str(f, a->text);
    fputc('}', f);
}

static void print_row(const char *len, const char *ctx, const char *depth, const pk_tally *t, bool with_mode,
                      double kv_ratio) {
    char d[32], md[32], sm[32];
    snprintf(d, sizeof d, "%d/%d", t->correct[0], t->n);
    printf("%7s %6s %6s %9s", len, ctx, depth, d);
    if (with_mode) {
        snprintf(md, sizeof md, "%d/%d", t->correct[1], t->n);
        snprintf(sm, sizeof sm, "%d/%d", t->same, t->n);
        printf(" %9s %9s", md, sm);
    }
    printf(" %13.3f", t->margin[0] / t->n);
    if (with_mode && isnan(kv_ratio)) printf(" %12.3f", t->margin[1] / t->n);
    else if (with_mode) printf(" %12.3f %9.3f", t->margin[1] / t->n, kv_ratio);
    putchar('\n');
}

int cmd_passkey(int argc, char **argv) {
    const char *cmd = "passkey", *filler_path = NULL, *json_path = NULL, *dump_path = NULL;
    double lengths_d[PK_MAX_LIST], depths[PK_MAX_LIST] = {0.1, 0.5, 0.9};
    int n_len = 1, n_depth = 3;
    long n_prompts = 20;
    bool dense_only = false;
    lengths_d[0] = 2048;
    cli_opts o;
    cli_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        int r = cli_opts_parse(cmd, &o, argc, argv, &i);
        if (r < 0) return 1;
        if (r > 0) continue;
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage_text, stdout); return 0; }
        if (!strcmp(a, "--dense-only")) { dense_only = true; continue; }
        static const char *const valued[] = {"--filler", "--json", "--dump-prompts", "--lengths", "--depths", "-n"};
        if (!cli_one_of(a, valued, sizeof valued / sizeof valued[0]))
            return cli_error(cmd, "unknown option '%s' (see hachi passkey --help)", a);
        if (!(v = cli_value(cmd, argc, argv, &i))) return 1;
        if (!strcmp(a, "--filler")) filler_path = v;
        else if (!strcmp(a, "--json")) json_path = v;
        else if (!strcmp(a, "--dump-prompts")) dump_path = v;
        else if (!strcmp(a, "--lengths")) { if ((n_len = pk_parse_list(cmd, a, v, 16, HACHI_CTX_MAX - PK_GEN, true, lengths_d)) < 0) return 1; }
        else if (!strcmp(a, "--depths")) { if ((n_depth = pk_parse_list(cmd, a, v, 0, 1, false, depths)) < 0) return 1; }
        else if (!strcmp(a, "-n")) { if (!cli_int(cmd, a, v, 1, 100000, &n_prompts)) return 1; }
        else return cli_error(cmd, "unknown option '%s' (see hachi passkey --help)", a);
    }
    if (!filler_path) return cli_error(cmd, "no filler text given (--filler TEXT)");

    int rc = 1;
    hachi_model *m = NULL;
    hachi_session *s[2] = {NULL, NULL};
    pk_source src = {0};
    int32_t *ids = NULL;
    float *lg = NULL;
    FILE *jf = NULL, *df = NULL;
    char jtmp[4096], dtmp[4096];
    if (!(m = cli_load_model(cmd, &o, false)) || !pk_source_init(cmd, m, filler_path, &src)) goto out;
    const int32_t nv = hachi_model_n_vocab(m), n_filler_all = src.n_filler;
    int max_len = PK_GEN;
    for (int l = 0; l < n_len; l++) max_len = CLI_MAX(max_len, (int)lengths_d[l]);
    if (!(ids = malloc(sizeof(int32_t) * (size_t)max_len)) || !(lg = malloc(sizeof(float) * (size_t)nv))) {
        cli_error(cmd, "out of memory");
        goto out;
    }

    for (int l = 0; l < n_len; l++) {   /* fail before any output */
        pk_prompt pr;
        if (!pk_build_prompt(cmd, &src, (int)lengths_d[l], 0.5, o.smp.seed, 0, ids, &pr)) goto out;
    }
    if (json_path && !(jf = cli_out_open(cmd, json_path, jtmp, sizeof jtmp))) goto out;
    if (dump_path && !(df = cli_out_open(cmd, dump_path, dtmp, sizeof dtmp))) goto out;
    hachi_session_params mode = o.sp, dense = cli_dense_params(&o.sp);
    char mode_name[128], dense_name[128];
    cli_mode_name(&mode, mode_name, sizeof mode_name);
    cli_mode_name(&dense, dense_name, sizeof dense_name);
    const char *base = strrchr(filler_path, '/') ? strrchr(filler_path, '/') + 1 : filler_path;
    int n_runs = dense_only ? 1 : 2;
    printf("passkey: %ld prompts per length and depth, filler %s (%d tokens), seed %llu\n", n_prompts, base,
           n_filler_all, (unsigned long long)o.smp.seed);
    if (dense_only) printf("dense: %s\n", dense_name);
    else printf("dense: %s   mode: %s\n", dense_name, mode_name);
    printf("%7s %6s %6s %9s", "length", "ctx", "depth", "dense");
    if (!dense_only) printf(" %9s %9s", "mode", "same");
    printf(" %13s", "margin dense");
    if (!dense_only) printf(" %12s %9s", "margin mode", "kv m/d");
    putchar('\n');
    if (jf) {
        fprintf(jf, "{\"model\": ");
        json_str(jf, o.model);
        fprintf(jf, ", \"filler\": ");
        json_str(jf, filler_path);
        fprintf(jf, ", \"filler_tokens\": %d, \"seed\": %llu, \"n\": %ld, \"dense\": ", n_filler_all,
                (unsigned long long)o.smp.seed, n_prompts);
        json_str(jf, dense_name);
        fprintf(jf, ", \"mode\": ");
        if (dense_only) fputs("null", jf); else json_str(jf, mode_name);
        fprintf(jf, ",\n \"prompts\": [");
    }

    pk_tally all = {0}, cells[PK_MAX_LIST * PK_MAX_LIST];
    double cell_ratio[PK_MAX_LIST];
    double t0 = cli_time_ms();
    long tokens_run = 0;
    bool first_cell = true;
    for (int l = 0; l < n_len; l++) {
        int len = (int)lengths_d[l];
        int ctx = cli_ctx_for(len + PK_GEN);
        if (o.ctx_given && o.sp.n_ctx > ctx) ctx = cli_ctx_for(o.sp.n_ctx);
        mode.n_ctx = dense.n_ctx = ctx;
        hachi_status st;
        for (int r = 0; r < n_runs; r++) {
            hachi_session_free(s[r]);
            s[r] = NULL;
            if ((st = hachi_session_create(m, r ? &mode : &dense, &s[r]))) {
                cli_lib_error(cmd, st, "cannot create the session");
                goto out;
            }
        }
        double kv_ratio = dense_only ? 0.0
                        : (double)hachi_session_kv_bytes_read(s[1], len) / (double)hachi_session_kv_bytes_read(s[0], len);
        cell_ratio[l] = kv_ratio;
        pk_tally len_tally = {0};
        for (int di = 0; di < n_depth; di++) {
            pk_tally cell = {0};
            double tc = cli_time_ms();
            for (int i = 0; i < n_prompts; i++) {
                pk_prompt pr;
                if (!pk_build_prompt(cmd, &src, len, depths[di], o.smp.seed, i, ids, &pr)) goto out;
                pk_answer a[2];
                memset(a, 0, sizeof a);
                st = HACHI_OK;
                for (int r = 0; r < n_runs && !st; r++)
                    st = pk_answer_prompt(s[r], m, ids, len, &pr, lg, &a[r]);
                if (st) { cli_lib_error(cmd, st, "eval failed"); goto out; }
                tokens_run += (long)n_runs * len;
                tally_add(&cell, a, !dense_only);
                if (df) {
                    for (int k = 0; k < len; k++) fprintf(df, k ? " %d" : "%d", ids[k]);
                    fputc('\n', df);
                }
                if (jf) {
                    fprintf(jf, "%s\n  {\"length\": %d, \"ctx\": %d, \"depth\": %g, \"key\": %ld, \"offset\": %d, "
                            "\"needle_pos\": %d, \"kv_read_ratio\": %.6f, ",
                            first_cell ? "" : ",", len, ctx, depths[di], pr.key, pr.offset, pr.needle_pos, kv_ratio);
                    first_cell = false;
                    json_answer(jf, "dense", &a[0]);
                    if (!dense_only) { fputs(", ", jf); json_answer(jf, "mode", &a[1]); }
                    fputc('}', jf);
                }
            }
            char ls[16], cs[16], ds[16];
            snprintf(ls, sizeof ls, "%d", len);
            snprintf(cs, sizeof cs, "%d", ctx);
            snprintf(ds, sizeof ds, "%.2f", depths[di]);
            print_row(ls, cs, ds, &cell, !dense_only, kv_ratio);
            fflush(stdout);
            fprintf(stderr, "passkey: length %d depth %.2f: dense %d/%d", len, depths[di], cell.correct[0], cell.n);
            if (!dense_only) fprintf(stderr, ", mode %d/%d", cell.correct[1], cell.n);
            fprintf(stderr, " (%.1f s)\n", (cli_time_ms() - tc) / 1e3);
            tally_merge(&len_tally, &cell);
            cells[l * n_depth + di] = cell;
        }
        if (n_depth > 1) {
            char ls[16], cs[16];
            snprintf(ls, sizeof ls, "%d", len);
            snprintf(cs, sizeof cs, "%d", ctx);
            print_row(ls, cs, "all", &len_tally, !dense_only, kv_ratio);
        }
        tally_merge(&all, &len_tally);
    }
    if (n_len > 1) print_row("all", "", "", &all, !dense_only, NAN);
    double secs = (cli_time_ms() - t0) / 1e3;
    fprintf(stderr, "passkey: %d prompts, %ld tokens evaluated in %.1f s (%.0f tok/s)\n", all.n, tokens_run, secs,
            tokens_run / (secs > 0 ? secs : 1));
    if (jf) {
        fprintf(jf, "\n ],\n \"cells\": [");
        for (int l = 0; l < n_len; l++)
            for (int di = 0; di < n_depth; di++) {
                const pk_tally *c = &cells[l * n_depth + di];
                fprintf(jf, "%s\n  {\"length\": %d, \"depth\": %g, \"n\": %d, \"dense_correct\": %d, \"dense_margin\": %.6f",
                        l + di ? "," : "", (int)lengths_d[l], depths[di], c->n, c->correct[0], c->margin[0] / c->n);
                if (!dense_only)
                    fprintf(jf, ", \"mode_correct\": %d, \"mode_margin\": %.6f, \"same_tokens\": %d, \"kv_read_ratio\": %.6f",
                            c->correct[1], c->margin[1] / c->n, c->same, cell_ratio[l]);
                fputc('}', jf);
            }
        fprintf(jf, "\n ],\n \"total\": {\"n\": %d, \"dense_correct\": %d, \"dense_margin\": %.6f", all.n,
                all.correct[0], all.margin[0] / all.n);
        if (!dense_only)
            fprintf(jf, ", \"mode_correct\": %d, \"mode_margin\": %.6f, \"same_tokens\": %d", all.correct[1],
                    all.margin[1] / all.n, all.same);
        fprintf(jf, "}}\n");
    }
    rc = 0;
out:
    if (!cli_out_close(cmd, jf, jtmp, json_path, rc == 0)) rc = 1;
    if (!cli_out_close(cmd, df, dtmp, dump_path, rc == 0)) rc = 1;
    pk_source_free(&src);
    free(ids); free(lg);
    hachi_session_free(s[0]);
    hachi_session_free(s[1]);
    cli_free_model(&o, m);
    return rc;
}

