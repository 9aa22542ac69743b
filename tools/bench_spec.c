/* bench_spec: hachi bench --spec TEXT. Speculative decoding end to end on a real model: for
 * each depth, three workloads built from TEXT's tokens (quote: the text up to the depth, then
 * its first tokens again, so the continuation copies the context; doc: the text with a pass
 * key stated in its middle and asked for at its end; free: the text, continued), each prefilled
 * once; then every drafter (none, prompt lookup, -md's assistant, self-speculation, auto)
 * decodes n tokens greedily from the same point, the drafters alternated over the repetitions
 * (the session goes back with a ring checkpoint). Reports decode tok/s, the ratio to plain
 * decoding of the same repetition, acceptance, tokens per verifying forward, and whether the
 * tokens equal plain decoding's. Also the expected speed-up table that hachi bench prints from
 * its measured verify costs (spec_expected). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

#define QUOTE_TOKENS 48   /* quote: the text's first tokens repeated at the end */
#define N_DRAFTERS 5

static const char *const drafter_names[N_DRAFTERS] = {"none", "lookup", "model", "self", "auto"};

typedef struct spec_run {
    double tps[SPEC_BENCH_REPS_MAX], ratio[SPEC_BENCH_REPS_MAX];
    int64_t drafted, accepted, draft_forwards;
    bool same;
} spec_run;

/* The prompt of workload w (0 quote, 1 doc, 2 free) at depth D into p: BOS, then D - 1 tokens.
 * Returns its length, 0 when the text is too short (error printed). */
static int workload(const char *cmd, const hachi_model *m, const int32_t *text, int n_text, int w, int D, int32_t *p) {
    static const char *key = " The pass key is 48213. Remember it. 48213 is the pass key.";
    static const char *ask = " What is the pass key? The pass key is";
    int32_t k[64], q[64];
    int nk = 0, nq = 0, n = 0;
    if (hachi_tokenize(m, key, (int32_t)strlen(key), false, false, k, 64, &nk) ||
        hachi_tokenize(m, ask, (int32_t)strlen(ask), false, false, q, 64, &nq)) {
        cli_error(cmd, "--spec: cannot tokenize the pass key sentences");
        return 0;
    }
    const int body = D - 1 - (w == 0 ? QUOTE_TOKENS : w == 1 ? nk + nq : 0);
    if (body < QUOTE_TOKENS || body > n_text) {
        if (body < QUOTE_TOKENS)
            cli_error(cmd, "--spec: depth %d is too small: a workload needs at least %d tokens", D,
                      D + QUOTE_TOKENS - body);
        else cli_error(cmd, "--spec: the text has %d tokens; depth %d needs %d", n_text, D, body);
        return 0;
    }
    p[n++] = hachi_model_bos(m);
    if (w == 1) {   /* the key in the middle of the text, the question at its end */
        memcpy(p + n, text, sizeof *p * (size_t)(body / 2));
        n += body / 2;
        memcpy(p + n, k, sizeof *p * (size_t)nk);
        n += nk;
        memcpy(p + n, text + body / 2, sizeof *p * (size_t)(body - body / 2));
        n += body - body / 2;
        memcpy(p + n, q, sizeof *p * (size_t)nq);
        return n + nq;
    }
    memcpy(p + n, text, sizeof *p * (size_t)body);
    n += body;
    if (w == 0) {
        memcpy(p + n, text, sizeof *p * QUOTE_TOKENS);
        n += QUOTE_TOKENS;
    }
    return n;
}

/* One decode of up to n tokens with drafter d from the checkpoint (the prompt but its last
 * token evaluated): its tokens into out (*n_out), decode tok/s into *tps, stats into st. */
static bool decode_once(const char *cmd, const spec_bench_opts *o, hachi_session *s, hachi_checkpoint *cp,
                        const int32_t *prompt, int P, int d, int32_t *out, int *n_out, double *tps, hachi_spec_stats *st) {
    const hachi_model *m = hachi_session_model(s);
    hachi_sampler_params smp = hachi_sampler_default_params();
    smp.temp = 0;
    hachi_sampler *sampler = NULL;
    hachi_spec *sp = NULL;
    hachi_spec_params p = hachi_spec_default_params();
    p.drafter = d == 0 ? HACHI_DRAFTER_NONE : d == 1 ? HACHI_DRAFTER_LOOKUP : d == 2 ? HACHI_DRAFTER_ASSISTANT
              : d == 3 ? HACHI_DRAFTER_SELF : HACHI_DRAFTER_AUTO;
    p.n_draft = (int32_t)(o->n_draft > 0 ? o->n_draft : d == 2 || d == 3 ? 3 : 4);
    p.assistant = d == 2 || d == 4 ? o->assistant : NULL;
    hachi_status e = hachi_session_checkpoint_restore(s, cp);
    if (!e) e = hachi_session_eval(s, prompt + P - 1, 1, NULL);
    if (!e) e = hachi_sampler_create(&smp, hachi_model_n_vocab(m), &sampler);
    if (!e) e = hachi_spec_create(m, s, sampler, &p, &sp);
    if (!e) e = hachi_spec_feed(sp, prompt, P);
    int got = 0;
    const double t0 = cli_time_ms();
    while (!e && got < o->n) {
        int32_t k = 0;
        e = hachi_spec_step(sp, o->n - got, out + got, &k);
        got += k;
        if (!e && k && hachi_model_is_eog(m, out[got - 1])) break;
    }
    const double ms = cli_time_ms() - t0;
    if (e == HACHI_ERR_CONTEXT_FULL) e = HACHI_OK;   /* the last depth's context may end the run */
    if (!e) {
        *st = *hachi_spec_get_stats(sp);
        *n_out = got;
        *tps = got / (ms / 1000.0);
    }
    hachi_spec_free(sp);
    hachi_sampler_free(sampler);
    if (e) cli_lib_error(cmd, e, "--spec decode failed");
    return !e;
}

bool spec_bench_run(const char *cmd, const hachi_model *m, const spec_bench_opts *o) {
    static const char *wnames[3] = {"quote", "doc", "free"};
    bool use[N_DRAFTERS] = {true, true, o->assistant != NULL, o->self_budget > 0, true};
    size_t len = 0;
    char *txt = cli_read_file(cmd, o->text_path, &len);
    if (!txt) return false;
    int n_text = 0;
    hachi_tokenize(m, txt, (int32_t)len, false, false, NULL, 0, &n_text);
    int32_t *text = malloc(sizeof *text * (size_t)(n_text + 1));
    const int max_depth = o->depths[o->n_depths - 1];
    int32_t *prompt = malloc(sizeof *prompt * (size_t)(max_depth + 1));
    int32_t *toks = malloc(sizeof *toks * (size_t)N_DRAFTERS * (size_t)o->reps * (size_t)o->n);
    int *n_toks = calloc((size_t)N_DRAFTERS * (size_t)o->reps, sizeof *n_toks);
    hachi_session *s = NULL;
    hachi_checkpoint *cp = NULL;
    bool ok = text && prompt && toks && n_toks;
    if (!ok) cli_error(cmd, "out of memory");
    if (ok && hachi_tokenize(m, txt, (int32_t)len, false, false, text, n_text + 1, &n_text)) {
        ok = false;
        cli_lib_error(cmd, HACHI_ERR_INVALID_ARG, "--spec: cannot tokenize the text");
    }
    free(txt);
    hachi_session_params sp = o->sp;
    sp.n_ctx = cli_ctx_for(max_depth + (int)o->n + HACHI_SPEC_STEP_MAX);
    sp.draft_budget = o->self_budget;
    sp.progress = NULL;
    hachi_status e = HACHI_OK;
    if (ok && !sp.n_ctx) ok = cli_error(cmd, "--spec: depth %d + %ld tokens exceed the largest context", max_depth, o->n) == 0;
    if (ok && ((e = hachi_session_create(m, &sp, &s)) || (e = hachi_checkpoint_create(s, &cp))))
        ok = cli_lib_error(cmd, e, "--spec: cannot create the session") == 0;
    if (ok) {
        printf("\nspeculative decoding end to end (greedy, %ld tokens a run, median of %ld runs, the drafters "
               "alternated; vs plain: the median ratio to plain decoding in the same run; same: every run's tokens "
               "equal plain decoding's)\n", o->n, o->reps);
        printf("  depth  workload  drafter   tok/s   vs plain  drafted   kept  acceptance  tokens/forward  same\n");
    }
    for (int di = 0; ok && di < o->n_depths; di++)
        for (int w = 0; ok && w < 3; w++) {
            const int P = workload(cmd, m, text, n_text, w, o->depths[di], prompt);
            if (!(ok = P > 0)) break;
            fprintf(stderr, "hachi bench: --spec: prefilling %s at depth %d...\n", wnames[w], o->depths[di]);
            if ((e = hachi_session_rewind(s, 0)) || (e = hachi_session_eval(s, prompt, P - 1, NULL)) ||
                (e = hachi_session_checkpoint_save(s, cp))) {
                ok = cli_lib_error(cmd, e, "--spec: prefill failed") == 0;
                break;
            }
            spec_run run[N_DRAFTERS];
            memset(run, 0, sizeof run);
            for (int r = 0; ok && r < o->reps; r++)
                for (int j = 0; ok && j < N_DRAFTERS; j++) {
                    const int d = (j + r) % N_DRAFTERS;   /* a new order each repetition */
                    if (!use[d]) continue;
                    hachi_spec_stats st = {0};
                    int32_t *out = toks + ((size_t)d * (size_t)o->reps + (size_t)r) * (size_t)o->n;
                    ok = decode_once(cmd, o, s, cp, prompt, P, d, out, &n_toks[d * o->reps + r], &run[d].tps[r], &st);
                    run[d].drafted += st.drafted;
                    run[d].accepted += st.accepted;
                    run[d].draft_forwards += st.draft_forwards;
                }
            for (int d = 0; ok && d < N_DRAFTERS; d++) {
                if (!use[d]) continue;
                run[d].same = true;
                for (int r = 0; r < o->reps; r++) {
                    const int32_t *a = toks + ((size_t)d * (size_t)o->reps + (size_t)r) * (size_t)o->n, *b = toks + (size_t)r * (size_t)o->n;
                    run[d].same &= n_toks[d * o->reps + r] == n_toks[r] && !memcmp(a, b, sizeof *a * (size_t)n_toks[r]);
                    run[d].ratio[r] = run[d].tps[r] / run[0].tps[r];
                }
                const double tps = bench_median(run[d].tps, (int)o->reps), ratio = bench_median(run[d].ratio, (int)o->reps);
                printf("  %5d  %-8s  %-7s %7.2f  %7.3fx  %7lld  %5lld", o->depths[di], wnames[w], drafter_names[d], tps,
                       ratio, (long long)run[d].drafted, (long long)run[d].accepted);
                if (run[d].drafted)
                    printf("  %10.3f  %14.2f", (double)run[d].accepted / run[d].drafted,
                           1.0 + (double)run[d].accepted / CLI_MAX(run[d].draft_forwards, 1));
                else printf("  %10s  %14s", "-", "-");
                printf("  %s\n", run[d].same ? "yes" : "NO");
                ok = run[d].same || cli_error(cmd, "--spec: %s at depth %d gave other tokens than plain decoding (%s)",
                                              drafter_names[d], o->depths[di], wnames[w]) == 0;
            }
            fflush(stdout);
        }
    hachi_checkpoint_free(cp);
    hachi_session_free(s);
    free(text);
    free(prompt);
    free(toks);
    free(n_toks);
    return ok;
}

/* The expected tokens per unit of cost of drafts of k tokens each kept with probability a
 * (given the ones before it): (1 - a^(k+1)) / (1 - a) tokens a forward of k + 1 rows, whose
 * cost is interpolated linearly between the measured row counts; drafting taken as free. */
void spec_expected(const int *rows, const double *ms, int n, int max_draft) {
    printf("expected speed-up over plain decoding from these verify costs (each draft kept with probability a, "
           "drafting free; best draft length k):");
    for (int ai = 3; ai <= 9; ai++) {
        const double a = ai / 10.0;
        double best = 1.0, tokens = 1.0, ak = 1.0;
        int best_k = 0;
        for (int k = 1; k <= max_draft && k + 1 <= rows[n - 1]; k++) {
            ak *= a;
            tokens += ak;
            int i = 1;
            while (i < n - 1 && rows[i] < k + 1) i++;
            const double cost = ms[i - 1] + (ms[i] - ms[i - 1]) * (k + 1 - rows[i - 1]) / (rows[i] - rows[i - 1]);
            const double r = tokens * ms[0] / cost;
            if (r > best) { best = r; best_k = k; }
        }
        printf("%s a=%.1f %.2fx (k=%d)", ai > 3 ? "," : "", a, best, best_k);
    }
    printf("\n");
}
