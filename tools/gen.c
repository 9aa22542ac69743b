/* gen: the decode loop of run and chat. Sample a token from the current logits;
 * evaluate it, and with --draft N also up to N tokens drafted by prompt lookup
 * over everything the session has seen, in the same forward. Each row of that
 * forward is sampled in turn with the same sampler: a drafted token is kept while
 * the sample equals it, and the rest is rewound when it does not. A forward of up
 * to 16 tokens gives bitwise the logits of decoding them one by one, so the
 * tokens are those of plain decoding for any sampler settings. */
#include <stdlib.h>
#include <string.h>
#include "cli.h"

hachi_status cli_gen_init(cli_gen *g, hachi_session *s, hachi_sampler *smp, const hachi_model *m, int n_draft,
                          int cap_hist) {
    memset(g, 0, sizeof *g);
    g->s = s;
    g->smp = smp;
    g->m = m;
    g->n_draft = n_draft;
    g->n_vocab = (size_t)hachi_model_n_vocab(m);
    g->cap_hist = cap_hist;
    g->hist = malloc(sizeof(int32_t) * (size_t)cap_hist);
    g->rows = n_draft ? malloc(sizeof(float) * g->n_vocab * (size_t)(n_draft + 1)) : NULL;
    g->lg = hachi_session_logits(s);
    return g->hist && (g->rows || !n_draft) ? HACHI_OK : HACHI_ERR_NOMEM;
}

void cli_gen_free(cli_gen *g) {
    free(g->hist);
    free(g->rows);
}

static void remember(cli_gen *g, int32_t tok) {
    hachi_sampler_accept(g->smp, tok);
    if (g->n_hist < g->cap_hist) g->hist[g->n_hist++] = tok;
}

void cli_gen_feed(cli_gen *g, const int32_t *tokens, int n) {
    for (int i = 0; i < n; i++) remember(g, tokens[i]);
    g->lg = hachi_session_logits(g->s);
    g->k = g->r = 0;
}

int32_t cli_gen_sample(cli_gen *g) {
    int32_t tok = hachi_sampler_sample(g->smp, g->lg);
    if (!hachi_model_is_eog(g->m, tok)) remember(g, tok);
    return tok;
}

hachi_status cli_gen_settle(cli_gen *g) {
    hachi_status st = g->r < g->k ? hachi_session_rewind(g->s, g->base + g->r + 1) : HACHI_OK;
    g->k = g->r = 0;
    return st;
}

hachi_status cli_gen_next(cli_gen *g, int32_t tok, int more) {
    if (g->r < g->k && tok == g->draft[g->r]) {   /* a drafted token, already evaluated: its row is next */
        g->accepted++;
        g->lg = g->rows + (size_t)++g->r * g->n_vocab;
        return HACHI_OK;
    }
    hachi_status st = cli_gen_settle(g);
    if (st) return st;
    hachi_session *s = g->s;
    g->base = hachi_session_pos(s);
    if (g->base >= hachi_session_n_ctx(s)) return HACHI_ERR_CONTEXT_FULL;
    int room = CLI_MIN(hachi_session_n_ctx(s) - g->base - 1, more - 1);
    g->k = g->n_draft && room > 0 ? hachi_draft_lookup(g->hist, g->n_hist, 2, 4, CLI_MIN(g->n_draft, room), g->draft) : 0;
    g->forwards++;
    if (g->k == 0) {
        st = hachi_session_eval(s, &tok, 1, NULL);
        g->lg = hachi_session_logits(s);
        return st;
    }
    int32_t batch[HACHI_DRAFT_MAX + 1];
    batch[0] = tok;
    memcpy(batch + 1, g->draft, (size_t)g->k * sizeof *g->draft);
    g->drafted += g->k;
    g->lg = g->rows;
    return hachi_session_eval(s, batch, g->k + 1, g->rows);
}
