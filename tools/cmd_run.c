/* hachi run: prefill a prompt, then sample and stream tokens to stdout; a
 * summary (tokens, prefill and decode tok/s) goes to stderr. --profile prints
 * the per-chunk profile line every 16 decode steps after a warm-up. --draft N:
 * speculative decoding with prompt-lookup drafts of up to N tokens (or -md FILE: a
 * Gemma 4 assistant's), verified in one forward; the output is the same as without
 * it (both decode through hachi_spec).
 * --prompt-cache FILE: restore the longest prefix of the prompt that FILE holds
 * and prefill only the rest; when nothing was restored, save the prompt's state
 * there (hachi_session_save / _load; the output is the same either way). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"

static void usage(void) {
    fprintf(stdout,
            "usage: hachi run -m MODEL [-p PROMPT | -f FILE] [-n N] [-c CTX] [-t THREADS]\n"
            "                 [--temp T] [--top-k K] [--top-p P] [--min-p M] [--repeat-penalty R] [--repeat-last-n N]\n"
            "                 [--presence-penalty P] [--frequency-penalty F] [--logit-bias ID+B|ID-B ...] [--seed S]\n"
            "                 [--no-bos] [--draft N] [-md FILE] [--spec KIND] [--draft-sample] [--prompt-cache FILE] [--profile]\n"
            "                 [--chunks 8,15,25] [--json-schema SCHEMA | --json-schema-file FILE]\n"
            CLI_JSON_USAGE CLI_DRAFT_USAGE CLI_DRAFT_TRACE_USAGE
            CLI_MODE_USAGE
            "  --prompt-cache FILE   restore the longest prefix of the prompt FILE holds and prefill only\n"
            "              the rest; when nothing was restored, save the prompt's state to FILE\n");
}

/* "  name: c1=..% c2=..% ..": part[c] as a share of each chunk's time */
static void print_shares(FILE *f, const char *name, const double *part, const hachi_profile *p) {
    fprintf(f, "  %s:", name);
    for (int c = 0; c < p->n_chunks; c++)
        fprintf(f, " c%d=%.0f%%", c + 1, p->chunk_ms[c] > 0 ? 100.0 * part[c] / p->chunk_ms[c] : 0.0);
}

/* "[profile] emb=.. ple=.. c1=.. .. head=.. total=.. ms (.. tok/s)  attn: c1=..% ..  matmul: c1=..% .."
 * averaged per step */
void cli_print_profile(FILE *f, const hachi_session *s) {
    const hachi_profile *p = hachi_session_profile(s);
    if (p->steps == 0) return;
    double k = 1.0 / p->steps, total = p->emb_ms + p->ple_ms + p->head_ms;
    for (int c = 0; c < p->n_chunks; c++) total += p->chunk_ms[c];
    fprintf(f, "[profile] emb=%.2f ple=%.2f", p->emb_ms * k, p->ple_ms * k);
    for (int c = 0; c < p->n_chunks; c++) fprintf(f, " c%d=%.2f", c + 1, p->chunk_ms[c] * k);
    fprintf(f, " head=%.2f total=%.2f ms (%.2f tok/s)", p->head_ms * k, total * k, 1000.0 / (total * k));
    print_shares(f, "attn", p->attn_ms, p);
    print_shares(f, "matmul", p->matmul_ms, p);
    fputc('\n', f);
}

int cmd_run(int argc, char **argv) {
    const char *cmd = "run", *prompt = "", *prompt_file = NULL, *cache_path = NULL;
    cli_opts o;
    long n_predict = 128;
    cli_draft dr;
    bool bos = true;
    int rc = 1;
    cli_opts_init(&o);
    cli_draft_init(&dr);
    for (int i = 1; i < argc; i++) {
        int r = cli_opts_parse(cmd, &o, argc, argv, &i);
        if (r == 0) r = cli_draft_parse(cmd, &dr, argc, argv, &i);
        if (r == 0) r = cli_json_parse(cmd, &o, argc, argv, &i);
        if (r < 0) return 1;
        if (r > 0) continue;
        const char *a = argv[i];
        if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (!(prompt = cli_value(cmd, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!(prompt_file = cli_value(cmd, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            const char *v = cli_value(cmd, argc, argv, &i);
            if (!v || !cli_int(cmd, a, v, 0, 1 << 20, &n_predict)) return 1;
        } else if (!strcmp(a, "--prompt-cache")) {
            if (!(cache_path = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--no-bos")) bos = false;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else return cli_error(cmd, "unknown option '%s' (hachi run --help)", a);
    }
    char *file_text = NULL;
    size_t plen = strlen(prompt);
    if (prompt_file && plen) return cli_error(cmd, "give the prompt as -p TEXT or -f FILE, not both");
    if (prompt_file) {
        if (!(file_text = cli_read_file(cmd, prompt_file, &plen))) return 1;
        prompt = file_text;
    }
    hachi_model *m = cli_load_model(cmd, &o, false);
    hachi_session *s = NULL;
    hachi_sampler *smp = NULL;
    cli_json *json = NULL;
    hachi_spec *sp = NULL;
    hachi_detok *dt = NULL;
    int32_t *toks = NULL, n_tok = 0;
    if (!m) goto out;

    hachi_tokenize(m, prompt, plen, bos, true, NULL, 0, &n_tok);
    if (!(toks = malloc(sizeof(int32_t) * (n_tok + 1)))) goto out;
    hachi_status st = hachi_tokenize(m, prompt, plen, bos, true, toks, n_tok + 1, &n_tok);
    if (st != HACHI_OK) { cli_lib_error(cmd, st, "cannot tokenize the prompt"); goto out; }
    if (n_tok == 0) { cli_error(cmd, "empty prompt and no BOS: nothing to start from"); goto out; }
    if (!o.ctx_given) {   /* the smallest mode for prompt and reply, else for the prompt (the reply ends at the context) */
        const int c = cli_ctx_for(n_tok + (int)n_predict), cp = cli_ctx_for(n_tok + 1);
        o.sp.n_ctx = c ? c : cp ? cp : HACHI_CTX_MAX;
    }
    cli_progress pr;
    cli_progress_attach(&o, &pr, "hachi run");
    cli_draft_session(&dr, &o.sp);
    if ((st = hachi_session_create(m, &o.sp, &s))) { cli_lib_error(cmd, st, "cannot create the session"); goto out; }
    if (n_tok > hachi_session_n_ctx(s)) {
        cli_error(cmd, "the prompt has %d tokens, more than the context of %d (-c)", n_tok, hachi_session_n_ctx(s));
        goto out;
    }
    if (cli_sampler_create(cmd, &o, m, &json, &smp) != HACHI_OK) goto out;
    hachi_spec_params spp;
    if (!cli_draft_setup(cmd, &dr, m, &spp)) goto out;
    if ((st = hachi_spec_create(m, s, smp, &spp, &sp))) { cli_lib_error(cmd, st, "generator"); goto out; }

    /* prefill the prompt (what the prompt cache does not restore), then echo it: a long
     * prefill's progress lines come before the text on a terminal */
    double t0 = cli_time_ms();
    int32_t n_cached = 0;
    const bool cache_there = cache_path && access(cache_path, F_OK) == 0;   /* no file yet: nothing to restore */
    if (cache_there && (st = hachi_session_load(s, cache_path, toks, n_tok, &n_cached))) {
        cli_lib_error(cmd, st, "cannot use the prompt cache");
        goto out;
    }
    if (n_cached < n_tok && (st = hachi_session_eval(s, toks + n_cached, n_tok - n_cached, NULL))) {
        cli_lib_error(cmd, st, "prefill failed");
        goto out;
    }
    double t_prefill = cli_time_ms() - t0;
    if (cache_path && n_cached) fprintf(stderr, "prompt cache: restored %d of %d prompt tokens from %s\n", n_cached, n_tok, cache_path);
    else if (cache_path) {
        if ((st = hachi_session_save(s, toks, n_tok, cache_path))) { cli_lib_error(cmd, st, "cannot save the prompt cache"); goto out; }
        fprintf(stderr, "prompt cache: saved %d prompt tokens to %s%s\n", n_tok, cache_path,
                cache_there ? " (replacing a cache of another model or another prompt: nothing of it was reused)" : "");
    }
    if ((st = hachi_spec_feed(sp, toks, n_tok))) { cli_lib_error(cmd, st, "generator"); goto out; }
    fwrite(prompt, 1, plen, stdout);
    fflush(stdout);

    if ((st = hachi_detok_create(m, &dt))) { cli_lib_error(cmd, st, "detokenizer"); goto out; }
    hachi_detok_reset(dt, plen == 0);   /* strip the dummy-prefix space only at the very start */
    char buf[HACHI_DETOK_MAX];
    int n_gen = 0;
    bool full = false;
    const int warmup = 4;
    if (o.sp.profile) hachi_session_profile_reset(s);
    t0 = cli_time_ms();
    const hachi_spec_stats *ss = hachi_spec_get_stats(sp);
    bool ended = false;
    while (n_gen < n_predict && !ended) {   /* the last token is returned, never evaluated */
        int32_t out[HACHI_SPEC_STEP_MAX], n_out;
        const int64_t forwards = ss->forwards;
        const hachi_spec_stats before = *ss;
        if ((st = hachi_spec_step(sp, (int32_t)(n_predict - n_gen), out, &n_out)) == HACHI_ERR_CONTEXT_FULL) { full = true; break; }
        if (st) { cli_lib_error(cmd, st, "decode failed"); goto out; }
        cli_draft_trace(cmd, &dr, &before, ss);
        if (o.sp.profile && ss->forwards > forwards) {
            if (ss->forwards == warmup) hachi_session_profile_reset(s);
            else if (ss->forwards > warmup && (ss->forwards - warmup) % 16 == 0) {
                cli_print_profile(stderr, s);
                hachi_session_profile_reset(s);
            }
        }
        for (int32_t i = 0; i < n_out && !ended; i++) {
            if ((ended = hachi_model_is_eog(m, out[i]))) break;
            int32_t len = hachi_detok_push(dt, out[i], buf, sizeof buf);
            fwrite(buf, 1, len, stdout);
            n_gen++;
        }
        if (fflush(stdout) != 0 || ferror(stdout)) {   /* nowhere to put the rest (a closed pipe) */
            cli_error(cmd, "cannot write the output: %s", strerror(errno));
            goto out;
        }
    }
    double t_decode = cli_time_ms() - t0;
    int32_t len = hachi_detok_flush(dt, buf, sizeof buf);
    fwrite(buf, 1, len, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    if (full) fprintf(stderr, "hachi run: context full (%d tokens): generation stopped\n", hachi_session_n_ctx(s));
    fprintf(stderr, "prompt tokens: %d, generated tokens: %d, prefill: %.2f tok/s, decode: %.2f tok/s\n", n_tok, n_gen,
            n_tok > n_cached ? (n_tok - n_cached) / (t_prefill / 1000.0) : 0.0,
            n_gen > 1 ? (n_gen - 1) / (t_decode / 1000.0) : 0.0);
    cli_draft_print(stderr, &dr, ss, n_gen);
    rc = 0;
out:
    hachi_spec_free(sp);
    if (!cli_draft_free(&dr)) rc = 1;
    hachi_detok_free(dt);
    hachi_sampler_free(smp);
    cli_json_free(json);
    hachi_session_free(s);
    cli_free_model(&o, m);
    free(toks);
    free(file_text);
    return rc;
}
