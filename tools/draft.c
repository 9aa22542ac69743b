/* draft: the drafter flags of hachi run, chat and serve (--draft N, -md FILE, --spec KIND, --draft-sample),
 * the hachi_spec params they make and the stats line they print (cli.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

#define SELF_BUDGET 1024   /* --spec self's default --self-budget */

void cli_draft_init(cli_draft *d) { *d = (cli_draft){.n_draft = -1, .self_budget = -1}; }

void cli_draft_session(const cli_draft *d, hachi_session_params *sp) {
    const char *kind = d->spec ? d->spec : "";
    sp->draft_budget = !strcmp(kind, "self") ? (int32_t)(d->self_budget >= 0 ? d->self_budget : SELF_BUDGET)
                       : !strcmp(kind, "auto") && d->self_budget > 0 ? (int32_t)d->self_budget : 0;
}

int cli_draft_parse(const char *cmd, cli_draft *d, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strcmp(a, "--draft")) {
        const char *v = cli_value(cmd, argc, argv, i);
        return v && cli_int(cmd, a, v, 1, HACHI_DRAFT_MAX, &d->n_draft) ? 1 : -1;
    }
    if (!strcmp(a, "-md") || !strcmp(a, "--model-draft")) return (d->md_path = cli_value(cmd, argc, argv, i)) ? 1 : -1;
    if (!strcmp(a, "--draft-sample")) { d->sample = true; return 1; }
    if (!strcmp(a, "--self-budget")) {
        const char *v = cli_value(cmd, argc, argv, i);
        if (!v || !cli_int(cmd, a, v, 48, 16384, &d->self_budget)) return -1;
        if (d->self_budget % 16) {
            cli_error(cmd, "--self-budget %ld: expected a multiple of 16 (pages of 16 keys)", d->self_budget);
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--spec-costs")) {
        const char *v = cli_value(cmd, argc, argv, i);
        if (!v) return -1;
        d->n_costs = 0;
        for (const char *p = v;;) {
            char *end;
            const double c = strtod(p, &end);
            if (end == p || !(c > 0 && c < 1e9) || d->n_costs == HACHI_DRAFT_MAX + 1 || (*end && *end != ',')) {
                cli_error(cmd, "--spec-costs expects 1..%d positive numbers separated by commas, got '%s'",
                          HACHI_DRAFT_MAX + 1, v);
                return -1;
            }
            d->costs[d->n_costs++] = (float)c;
            if (!*end) return 1;
            p = end + 1;
        }
    }
    if (!strcmp(a, "--spec-trace") && strcmp(cmd, "serve")) return (d->trace_path = cli_value(cmd, argc, argv, i)) ? 1 : -1;
    if (!strcmp(a, "--spec")) {
        const char *v = cli_value(cmd, argc, argv, i);
        if (!v) return -1;
        if (strcmp(v, "none") && strcmp(v, "lookup") && strcmp(v, "model") && strcmp(v, "self") && strcmp(v, "auto")) {
            cli_error(cmd, "--spec expects none, lookup, model, self or auto, got '%s'", v);
            return -1;
        }
        d->spec = v;
        return 1;
    }
    return 0;
}

static bool open_trace(const char *cmd, cli_draft *d, const hachi_spec_params *spp) {
    if (!d->trace_path) return true;
    /* a regular file (a failed trace is removed) and none of the inputs read so far: the model,
     * heads, prompt file and -md (cli_note_input) */
    if (!cli_out_check(cmd, d->trace_path)) return false;
    FILE *f = fopen(d->trace_path, "w");
    if (!f) { cli_error(cmd, "cannot write the trace '%s': %s", d->trace_path, strerror(errno)); return false; }
    static const char *kinds[] = {"none", "lookup", "model", "auto", "self"};
    fprintf(f, "# hachi spec trace: per forward, tokens drafted and kept, and self-speculative draft steps "
               "(drafter %s, n_draft %d)\n",
            kinds[spp->drafter], (int)spp->n_draft);
    d->trace = f;
    d->cmd = cmd;
    return true;
}

void cli_draft_trace(const char *cmd, cli_draft *d, const hachi_spec_stats *before, const hachi_spec_stats *after) {
    FILE *f = d->trace;
    if (!f || after->forwards == before->forwards) return;
    const long long k = after->drafted - before->drafted, r = after->accepted - before->accepted;
    if ((after->self_forwards > before->self_forwards ? fprintf(f, "%lld %lld %lld\n", k, r, k)
                                                      : fprintf(f, "%lld %lld\n", k, r)) < 0) {
        cli_error(cmd, "cannot write the trace '%s': %s (trace stopped)", d->trace_path, strerror(errno));
        fclose(f);
        d->trace = NULL;
        d->trace_failed = true;
    }
}

static bool setup(const char *cmd, cli_draft *d, const hachi_model *m, hachi_spec_params *spp);

bool cli_draft_setup(const char *cmd, cli_draft *d, const hachi_model *m, hachi_spec_params *spp) {
    return setup(cmd, d, m, spp) && open_trace(cmd, d, spp);
}

static bool setup(const char *cmd, cli_draft *d, const hachi_model *m, hachi_spec_params *spp) {
    *spp = hachi_spec_default_params();
    const char *kind = d->spec ? d->spec : "";
    const bool self = !strcmp(kind, "self");
    if (d->sample && !d->md_path && !self) {
        cli_error(cmd, "--draft-sample needs a drafter model (-md FILE) or --spec self");
        return false;
    }
    if (d->self_budget >= 0 && !self && strcmp(kind, "auto")) {
        cli_error(cmd, "--self-budget needs --spec self or --spec auto");
        return false;
    }
    if (!strcmp(kind, "none")) {
        if (d->n_draft > 0 || d->md_path) { cli_error(cmd, "--spec none takes no --draft or -md"); return false; }
        d->n_draft = 0;
        spp->drafter = HACHI_DRAFTER_NONE;
        spp->n_draft = 0;
        return true;
    }
    if (!strcmp(kind, "model") && !d->md_path) { cli_error(cmd, "--spec model needs a drafter model (-md FILE)"); return false; }
    if ((!strcmp(kind, "lookup") || self) && d->md_path) {
        cli_error(cmd, "--spec %s takes no -md (use --spec auto for both)", kind);
        return false;
    }
    if (!strcmp(kind, "lookup") && d->n_draft < 0) d->n_draft = spp->n_draft;
    if (self) {
        if (d->n_draft < 0) d->n_draft = 3;
        spp->drafter = HACHI_DRAFTER_SELF;
        spp->n_draft = (int32_t)d->n_draft;
        spp->sample_drafts = d->sample;
        return true;
    }
    if (d->n_costs && strcmp(kind, "auto")) { cli_error(cmd, "--spec-costs needs --spec auto"); return false; }
    if (!strcmp(kind, "auto")) {
        if (d->n_draft < 0) d->n_draft = spp->n_draft;
        spp->drafter = HACHI_DRAFTER_AUTO;
        spp->n_draft = (int32_t)d->n_draft;
        if (d->n_costs && d->n_costs < d->n_draft + 1) {
            cli_error(cmd, "--spec-costs gives %d costs; --draft %ld needs %ld", d->n_costs, d->n_draft, d->n_draft + 1);
            return false;
        }
        spp->forward_cost = d->n_costs ? d->costs : NULL;
        if (!d->md_path) return true;
    } else if (!d->md_path) {
        spp->drafter = d->n_draft > 0 ? HACHI_DRAFTER_LOOKUP : HACHI_DRAFTER_NONE;
        spp->n_draft = d->n_draft > 0 ? (int32_t)d->n_draft : 0;
        return true;
    }
    cli_note_input(d->md_path);
    hachi_status st = hachi_model_load(d->md_path, NULL, &d->assistant);
    if (st == HACHI_OK) st = hachi_assistant_check(m, d->assistant);
    if (st) { cli_lib_error(cmd, st, "cannot use the drafter (-md)"); return false; }
    spp->assistant = d->assistant;
    if (spp->drafter == HACHI_DRAFTER_AUTO) return true;
    spp->drafter = HACHI_DRAFTER_ASSISTANT;
    spp->n_draft = d->n_draft > 0 ? (int32_t)d->n_draft : 3;
    spp->sample_drafts = d->sample;
    return true;
}

void cli_draft_print(void *file, const cli_draft *d, const hachi_spec_stats *ss, int n_gen) {
    FILE *f = file;
    if (d->n_draft <= 0 && !d->md_path) return;
    const long long md = ss->draft_forwards - ss->lookup_forwards - ss->self_forwards;
    if ((ss->lookup_forwards > 0) + (ss->self_forwards > 0) + (md > 0) > 1)
        fprintf(f, "draft: of %lld forwards with drafts, %lld drafted by prompt lookup, %lld by self-speculation, "
                "%lld by -md\n", (long long)ss->draft_forwards, (long long)ss->lookup_forwards,
                (long long)ss->self_forwards, md);
    fprintf(f, "draft: %lld drafted, %lld accepted (%.0f%%), %lld forwards for %d tokens\n", (long long)ss->drafted,
            (long long)ss->accepted, ss->drafted ? 100.0 * ss->accepted / ss->drafted : 0.0, (long long)ss->forwards,
            n_gen);
    if (!ss->draft_forwards) return;
    fprintf(f, "draft: acceptance %.3f, mean accepted length %.2f, acc per pos", (double)ss->accepted / ss->drafted,
            1.0 + (double)ss->accepted / ss->draft_forwards);
    int last = 0;
    for (int i = 0; i < HACHI_DRAFT_MAX; i++)
        if (ss->accepted_at[i]) last = i;
    for (int i = 0; i <= last; i++) fprintf(f, " %.3f", (double)ss->accepted_at[i] / ss->draft_forwards);
    fprintf(f, ", drafting %.1f ms (%.3f ms per drafted token)\n", ss->draft_ms, ss->drafted ? ss->draft_ms / ss->drafted : 0.0);
}

bool cli_draft_free(cli_draft *d) {
    hachi_model_free(d->assistant);
    d->assistant = NULL;
    if (d->trace && fclose(d->trace)) {
        cli_error(d->cmd, "cannot write the trace '%s': %s", d->trace_path, strerror(errno));
        d->trace_failed = true;
    }
    d->trace = NULL;
    if (d->trace_failed) remove(d->trace_path);
    return !d->trace_failed;
}
