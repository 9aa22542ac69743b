/* spec: lossless speculative decoding, the decode loop of hachi run, hachi chat and any
 * other front end. A drafter proposes tokens to follow the session's text (prompt lookup:
 * what followed the latest earlier occurrence of its last few tokens); the verifier
 * evaluates the pending token and the drafts in one hachi_session_eval, samples each row
 * in order with the caller's sampler, keeps the drafts while the samples equal them and
 * rewinds the rest. For a deterministic drafter this is DESIGN.md's "sample y from p,
 * accept iff y == x"; with a forward of up to 16 tokens giving bitwise the logits of
 * decoding them one by one, the tokens are those of plain decoding for any sampler.
 *
 * The assistant drafter (mtp.h) drafts greedily from the target's last hidden row by default,
 * a deterministic draft judged by that same rule. With sample_drafts (and a sampler at
 * temperature > 0) each draft x is drawn from the drafter's distribution q and kept with
 * probability min(1, p(x)/q(x)); the first rejected row samples from normalize(max(p - q, 0))
 * instead: the standard speculative-sampling rule, which gives plain decoding's distribution.
 *
 * Adaptive (and AUTO): the drafter and the draft length of each forward are chosen from each
 * drafter's running acceptance and the measured cost of forwards by row count (a forward of
 * k + 1 rows is near one step where decode is bandwidth-bound, near k + 1 steps where the
 * weights sit in cache), so speculation is used where it pays and left where it does not.
 *
 * Self-speculation drafts with the target itself: draft steps whose full-attention layers read a
 * page-sparse selection of the KV (hachi_session_eval_draft), rewound before the dense forward
 * that verifies them; it pays where the KV reads rival the weights' (long contexts).
 *
 * Only the public session API is used (eval, eval_draft, rewind, pos, n_ctx, logits), and
 * mtp.h's drafter.
 * Every buffer is allocated in hachi_spec_create; a step allocates nothing. Hot path: one step
 * per forward; the lookup (an n-gram index, lookup.h) is a few hash probes. */
#include "spec.h"
#include "mtp.h"
#include "sampler.h"
#include "util.h"

enum { SRC_LOOKUP, SRC_ASSISTANT, SRC_SELF, N_SRC };   /* where a forward's drafts came from */
#define COST_PRIOR_SLOPE 0.1   /* a forward's cost per extra row, in one-row forwards, until measured */
#define ACCEPT_DECAY 0.9       /* weight of a drafter's older forwards in its running acceptance */
#define PAY_MARGIN 1.1         /* a draft must promise 10% more tokens per unit of cost than plain
                                  decoding: the estimates are noisy, and a draft that does not pay
                                  costs more than one not tried */
#define PROBE_MIN 16           /* forwards without drafts between two one-token probes: at first, */
#define PROBE_MAX 256          /* and at most (the gap doubles with each probe rejected) */
#define PROBE_HOPE 0.9         /* the acceptance a drafter is weighed at before a probe: one that would
                                  not pay even then (a draft step or a second row that costs as much
                                  as the token it may save) is probed only every PROBE_MAX forwards,
                                  once it has been probed at all */
#define PROBE_SHARE 0.02       /* and probes are spaced so that rejected ones cost at most this share
                                  of the forwards' time */
#define PLAIN_EVERY 64         /* the most forwards between two of one row (the unit the others are
                                  weighed against), when the costs are measured */

/* The last TIMING_N times of something, whose median is its cost: on a shared machine a forward
 * now and then takes several times its usual time, which a running mean would carry for long
 * enough to mislead the choices (a slow one-row forward makes every draft look cheap). */
#define TIMING_N 8
typedef struct timing {
    double v[TIMING_N];
    int n, next;
} timing;

static double timing_add(timing *t, double ms) {
    t->v[t->next] = ms;
    t->next = (t->next + 1) % TIMING_N;
    if (t->n < TIMING_N) t->n++;
    double s[TIMING_N];
    memcpy(s, t->v, sizeof s);
    for (int i = 1; i < t->n; i++)   /* insertion sort of at most 8 */
        for (int j = i; j > 0 && s[j - 1] > s[j]; j--) {
            const double x = s[j];
            s[j] = s[j - 1];
            s[j - 1] = x;
        }
    return t->n % 2 ? s[t->n / 2] : 0.5 * (s[t->n / 2 - 1] + s[t->n / 2]);
}

struct hachi_spec {
    const hachi_model *model;
    hachi_session *s;
    hachi_sampler *smp;
    hachi_spec_params p;
    hachi_lookup *lookup;               /* LOOKUP, AUTO: the n-gram index over text; else NULL */
    hachi_mtp *mtp;                     /* ASSISTANT: the drafter over the session; else NULL */
    bool self;                          /* SELF (AUTO with a draft budget): the session's draft steps */
    bool sampled;                       /* a model's drafts drawn from q and judged by rejection sampling */
    size_t n_vocab;
    int32_t *text;          /* [n_ctx + 1] the token at each position of the session, then the
                               pending one: the drafter's text (fed and sampled tokens) */
    float *rows;            /* [n_draft + 1][n_vocab] logits of one verifying forward; NULL without a drafter */
    float *q;               /* sampled: [n_draft][n_vocab] the distribution each draft was drawn from */
    float *pd;              /* sampled: [n_vocab] the target's distribution of a row, then the residual */
    const float *lg;        /* [n_vocab] the logits the next sample without a pending token comes from */
    int32_t lg_pos;         /* the position that sample is for (a session rewound since: other) */
    int32_t pending;        /* the last token returned, at position hachi_session_pos, not evaluated; -1: none */
    hachi_spec_stats stats;
    /* adaptive */
    double fwd_ms[HACHI_DRAFT_MAX + 2];   /* [rows] time of a forward of that many rows (the median of
                                             its recent ones); 0: not yet */
    double tok_ms[N_SRC];                 /* the same of one draft step (prompt lookup: 0) */
    timing fwd_t[HACHI_DRAFT_MAX + 2], tok_t[N_SRC];   /* their recent samples */
    int n_src, srcs[N_SRC];               /* the drafters at hand, in the order they are probed */
    double kept[N_SRC], lost[N_SRC];      /* decayed counts: drafts kept, forwards that rejected one */
    int32_t idle, probe_gap;              /* forwards since the last draft that could have had one; the gap */
    const float *step_lg[HACHI_SPEC_STEP_MAX];   /* the logits each token of the last step was drawn from */
    int32_t step_n;                       /* that step's tokens (0 after a feed or flush) */
    int32_t since_plain;                  /* forwards since the last of one row */
    bool probing;                         /* this forward's one draft is a probe */
    int32_t probes[N_SRC];                /* the probes of each drafter so far */
    int probe_src;                        /* the drafter probed last */
};

/* ---- drafters ------------------------------------------------------------------------ */

int32_t hachi_draft_lookup(const int32_t *hist, int32_t n_hist, int32_t ngram_min, int32_t ngram_max,
                           int32_t max_draft, int32_t *draft) {
    if (!hist || !draft || ngram_min < 1 || max_draft < 1) return 0;
    max_draft = HACHI_MIN(max_draft, HACHI_DRAFT_MAX);
    for (int32_t n = HACHI_MIN(ngram_max, n_hist - 1); n >= ngram_min; n--) {
        const int32_t *tail = hist + n_hist - n;
        for (int32_t i = n_hist - n - 1; i >= 0; i--) {   /* latest occurrence first */
            if (memcmp(hist + i, tail, (size_t)n * sizeof *hist)) continue;
            int32_t k = HACHI_MIN(max_draft, n_hist - (i + n));
            memcpy(draft, hist + i + n, (size_t)k * sizeof *draft);
            return k;
        }
    }
    return 0;
}

/* ---- the loop ------------------------------------------------------------------------ */

hachi_spec_params hachi_spec_default_params(void) {
    return (hachi_spec_params){.drafter = HACHI_DRAFTER_LOOKUP, .n_draft = 4, .ngram_min = 2, .ngram_max = 4};
}

hachi_status hachi_spec_create(const hachi_model *model, hachi_session *s, hachi_sampler *smp,
                               const hachi_spec_params *params, hachi_spec **out) {
    if (!out) return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: out is NULL");
    *out = NULL;
    hachi_spec_params p = params ? *params : hachi_spec_default_params();
    if (!model || !s || !smp) return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: needs a model, a session and a sampler");
    if (hachi_session_model(s) != model) return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: the session belongs to another model");
    if (hachi_sampler_n_vocab(smp) != hachi_model_n_vocab(model))
        return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: the sampler is for %d tokens, the model has %d",
                          (int)hachi_sampler_n_vocab(smp), (int)hachi_model_n_vocab(model));
    bool lookup = false;
    switch (p.drafter) {
    case HACHI_DRAFTER_NONE: p.n_draft = 0; p.adaptive = false; break;
    case HACHI_DRAFTER_ASSISTANT: {
        if (!p.assistant) return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: the assistant drafter needs an assistant model");
        hachi_status st = hachi_assistant_check(model, p.assistant);
        if (st) return st;
        break;
    }
    case HACHI_DRAFTER_SELF:
        if (!hachi_session_draft_budget(s))
            return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: self-speculation needs a session created with a "
                                                     "draft_budget (the page-sparse budget of its draft steps)");
        break;
    case HACHI_DRAFTER_AUTO:
        p.adaptive = true;
        if (p.assistant) {
            hachi_status st = hachi_assistant_check(model, p.assistant);
            if (st) return st;
        }
        /* prompt lookup first, as LOOKUP: */
        /* fall through */
    case HACHI_DRAFTER_LOOKUP:
        if (p.ngram_min < 1 || p.ngram_max < p.ngram_min || p.ngram_max > HACHI_LOOKUP_NGRAM_MAX)
            return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: lookup n-grams %d..%d (need 1 <= min <= max <= %d)",
                              (int)p.ngram_min, (int)p.ngram_max, HACHI_LOOKUP_NGRAM_MAX);
        lookup = true;
        break;
    default: return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: unknown drafter kind %d", (int)p.drafter);
    }
    const bool drafts = lookup || p.drafter == HACHI_DRAFTER_ASSISTANT || p.drafter == HACHI_DRAFTER_SELF;
    if (drafts && (p.n_draft < 1 || p.n_draft > HACHI_DRAFT_MAX))
        return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: n_draft %d not in 1..%d", (int)p.n_draft, HACHI_DRAFT_MAX);
    if (p.adaptive && p.forward_cost)
        for (int32_t i = 0; i <= p.n_draft; i++)
            if (!(p.forward_cost[i] > 0))
                return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: forward_cost[%d] = %g (costs must be > 0)", (int)i,
                                  (double)p.forward_cost[i]);
    if (p.drafter != HACHI_DRAFTER_ASSISTANT && p.drafter != HACHI_DRAFTER_AUTO) p.assistant = NULL;

    hachi_spec *sp = hachi_calloc(1, sizeof *sp);
    if (!sp) return HACHI_ERR_NOMEM;
    sp->model = model;
    sp->s = s;
    sp->smp = smp;
    sp->p = p;
    sp->n_vocab = (size_t)hachi_model_n_vocab(model);
    sp->pending = -1;
    sp->self = p.drafter == HACHI_DRAFTER_SELF || (p.drafter == HACHI_DRAFTER_AUTO && hachi_session_draft_budget(s));
    if (lookup) sp->srcs[sp->n_src++] = SRC_LOOKUP;
    if (p.assistant) sp->srcs[sp->n_src++] = SRC_ASSISTANT;
    if (sp->self) sp->srcs[sp->n_src++] = SRC_SELF;
    const size_t n_text = (size_t)hachi_session_n_ctx(s) + 1;
    sp->text = hachi_malloc(n_text * sizeof *sp->text);
    if (drafts) sp->rows = hachi_malloc((size_t)(p.n_draft + 1) * sp->n_vocab * sizeof *sp->rows);
    if (!sp->text || (drafts && !sp->rows)) { hachi_spec_free(sp); return HACHI_ERR_NOMEM; }
    if (lookup) {
        hachi_status st = hachi_lookup_create((int32_t)n_text, p.ngram_min, p.ngram_max, &sp->lookup);
        if (st) { hachi_spec_free(sp); return st; }
    }
    for (int i = 0; i < N_SRC; i++) {   /* a prior of 1/3: where one extra row costs much, wait for evidence */
        sp->kept[i] = 1.0;
        sp->lost[i] = 2.0;
    }
    sp->probe_gap = PROBE_MIN;
    if (p.assistant) {
        hachi_status st = hachi_mtp_create(p.assistant, s, &sp->mtp);
        if (st) { hachi_spec_free(sp); return st; }
    }
    if (p.assistant || sp->self) {
        sp->sampled = p.sample_drafts && !hachi_sampler_greedy(smp);
        if (sp->sampled) {
            sp->q = hachi_malloc((size_t)p.n_draft * sp->n_vocab * sizeof *sp->q);
            sp->pd = hachi_malloc(sp->n_vocab * sizeof *sp->pd);
            if (!sp->q || !sp->pd) { hachi_spec_free(sp); return HACHI_ERR_NOMEM; }
        }
    }
    for (size_t i = 0; i < n_text; i++) sp->text[i] = -1;   /* positions not fed: no token matches */
    sp->lg = hachi_session_logits(s);
    sp->lg_pos = hachi_session_pos(s);
    *out = sp;
    return HACHI_OK;
}

void hachi_spec_free(hachi_spec *sp) {
    if (!sp) return;
    hachi_free(sp->text);
    hachi_lookup_free(sp->lookup);
    hachi_free(sp->rows);
    hachi_free(sp->q);
    hachi_free(sp->pd);
    hachi_mtp_free(sp->mtp);
    hachi_free(sp);
}

const hachi_spec_stats *hachi_spec_get_stats(const hachi_spec *sp) {
    static const hachi_spec_stats none;
    return sp ? &sp->stats : &none;
}

hachi_status hachi_spec_feed(hachi_spec *sp, const int32_t *tokens, int32_t n) {
    if (!sp) return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: feed of a NULL spec");
    if (sp->pending >= 0)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: feed while the last token returned is not evaluated "
                                                 "(hachi_spec_flush first)");
    const int32_t pos = hachi_session_pos(sp->s);
    if (n < 0 || n > pos || (n > 0 && !tokens))
        return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: feed of %d tokens, but the session holds %d", (int)n, (int)pos);
    for (int32_t i = 0; i < n; i++) {
        hachi_sampler_accept_prompt(sp->smp, tokens[i]);
        sp->text[pos - n + i] = tokens[i];
    }
    if (sp->lookup) hachi_lookup_truncate(sp->lookup, pos - n);   /* from there on the text may differ */
    sp->step_n = 0;
    sp->lg = hachi_session_logits(sp->s);
    sp->lg_pos = pos;
    return HACHI_OK;
}

/* The token at position pos: a token that is not end-of-generation is recorded (the sampler's
 * penalty history, the drafter's text), as plain decoding does. */
static int32_t record(hachi_spec *sp, int32_t tok, int32_t pos) {
    if (!hachi_model_is_eog(sp->model, tok)) {
        hachi_sampler_accept(sp->smp, tok);
        sp->text[pos] = tok;
        if (sp->lookup) hachi_lookup_truncate(sp->lookup, pos);   /* nothing unless pos was seen (a rewind) */
    }
    return tok;
}

/* Sample the token at position pos from logits lg and record it. */
static int32_t sample(hachi_spec *sp, const float *lg, int32_t pos) {
    return record(sp, hachi_sampler_sample(sp->smp, lg), pos);
}

static int32_t argmax(const float *x, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

/* A model's draft of up to max tokens after tok (the pending token, at position base): the
 * assistant's steps, or self-speculation's draft steps (evaluated, then rewound to base); each
 * draft greedy, or drawn from q (the drafter's logits through the sampler's settings), q kept for
 * the verification. Stops after an end of generation. 0 when the drafter cannot start (no hidden
 * row for the assistant, a failed draft step). */
static int32_t model_propose(hachi_spec *sp, int src, int32_t base, int32_t tok, int32_t max, int32_t *draft) {
    if (src == SRC_ASSISTANT && !hachi_mtp_begin(sp->mtp)) return 0;
    int32_t n = 0;
    while (n < max) {
        const float *lg;
        if (src == SRC_SELF) {
            if (hachi_session_eval_draft(sp->s, &tok, 1)) break;
            lg = hachi_session_logits(sp->s);
        } else {
            lg = hachi_mtp_step(sp->mtp, tok);
        }
        if (sp->sampled) {
            float *q = sp->q + (size_t)n * sp->n_vocab;
            hachi_sampler_dist(sp->smp, lg, q);
            tok = hachi_sampler_draw_weights(sp->smp, q);
            if (tok < 0) break;
        } else {
            tok = argmax(lg, sp->n_vocab);
        }
        draft[n++] = tok;
        if (hachi_model_is_eog(sp->model, tok)) break;
    }
    /* draft steps hold at most HACHI_DRAFT_MAX positions past base: within the rings' spare slots */
    if (src == SRC_SELF && hachi_session_rewind(sp->s, base)) return 0;
    return n;
}

/* Rejection sampling of draft x (drawn from q, row r of sp->q) against the target's logits lg:
 * kept (*keep) with probability min(1, p(x) / q(x)), else a sample of normalize(max(p - q, 0)). */
static int32_t judge(hachi_spec *sp, const float *lg, int32_t r, int32_t x, bool *keep) {
    float *p = sp->pd;
    const float *q = sp->q + (size_t)r * sp->n_vocab;
    hachi_sampler_dist(sp->smp, lg, p);
    *keep = hachi_sampler_uniform(sp->smp) * q[x] < p[x];
    if (*keep) return x;
    for (size_t i = 0; i < sp->n_vocab; i++) p[i] = p[i] > q[i] ? p[i] - q[i] : 0.0f;
    int32_t t = hachi_sampler_draw_weights(sp->smp, p);
    return t >= 0 ? t : hachi_sampler_sample(sp->smp, lg);   /* p = q up to rounding */
}

/* ---- adaptive draft length ------------------------------------------------------------ */

/* The cost of a forward of rows rows: fixed, measured, or estimated from the nearest measured
 * row counts (interpolated between them; past them along the slope of the two nearest, or the
 * prior slope). Only ratios matter, so with nothing measured one row costs 1. */
static double forward_cost(const hachi_spec *sp, int32_t rows) {
    if (sp->p.forward_cost) return sp->p.forward_cost[rows - 1];
    const double *t = sp->fwd_ms;
    const int32_t top = HACHI_DRAFT_MAX + 1;
    if (t[rows] > 0) return t[rows];
    int32_t lo = rows - 1, hi = rows + 1;
    while (lo >= 1 && !(t[lo] > 0)) lo--;
    while (hi <= top && !(t[hi] > 0)) hi++;
    if (lo >= 1 && hi <= top) return t[lo] + (t[hi] - t[lo]) * (rows - lo) / (hi - lo);
    if (lo < 1 && hi > top) return 1.0 + COST_PRIOR_SLOPE * (rows - 1);
    const int32_t a = lo >= 1 ? lo : hi, dir = lo >= 1 ? -1 : 1;   /* the nearest, and where to look past it */
    int32_t b = a + dir;
    while (b >= 1 && b <= top && !(t[b] > 0)) b += dir;
    double slope = COST_PRIOR_SLOPE * t[a] / (1.0 + COST_PRIOR_SLOPE * (a - 1));
    if (b >= 1 && b <= top) slope = HACHI_MAX((t[a] - t[b]) / (a - b), 0.0);
    return HACHI_MAX(t[a] + slope * (rows - a), 0.5 * t[a]);
}

/* Drafter src's running acceptance */
static double acceptance(const hachi_spec *sp, int src) { return sp->kept[src] / (sp->kept[src] + sp->lost[src]); }

/* The draft length of up to cap tokens from drafter src, each kept with probability a, with the
 * most expected tokens per unit of cost (0: none beats plain decoding); the rate it promises in
 * *rate. */
static int32_t best_length(const hachi_spec *sp, int src, int32_t cap, double a, double *rate) {
    /* a draft step: measured; with fixed costs the assistant's is free and self-speculation's
     * costs a one-row forward (the same weights: at most that) */
    const double step = !sp->p.forward_cost ? sp->tok_ms[src] : src == SRC_SELF ? sp->p.forward_cost[0] : 0.0;
    double tokens = 1.0, ak = 1.0;
    int32_t best = 0;
    *rate = PAY_MARGIN / forward_cost(sp, 1);
    for (int32_t k = 1; k <= cap; k++) {
        ak *= a;
        tokens += ak;   /* (1 - a^(k+1)) / (1 - a): the draft's first i kept with probability a^i */
        const double r = tokens / (forward_cost(sp, k + 1) + k * step);
        if (r > *rate) { *rate = r; best = k; }
    }
    return best;
}

/* The drafts of the next forward (after the pending token, at most max) into draft and their
 * source in *src: prompt lookup, then a model (the assistant or the target's draft steps);
 * adaptive: the drafter and length that promise the most, or a one-token probe once in a while
 * when none pays (the drafters in turn). */
static int32_t propose(hachi_spec *sp, int32_t base, int32_t max, int32_t *draft, int *src) {
    const int32_t n_look = sp->lookup ? hachi_lookup_draft(sp->lookup, sp->text, base + 1, max, draft) : 0;
    const int model = sp->mtp ? SRC_ASSISTANT : SRC_SELF;   /* the model drafter when not adaptive */
    *src = SRC_LOOKUP;
    sp->probing = false;
    if (!sp->p.adaptive) {
        if (n_look || (!sp->mtp && !sp->self)) return n_look;
        *src = model;
        return model_propose(sp, model, base, sp->pending, max, draft);
    }
    if (!sp->p.forward_cost && (!(sp->fwd_ms[1] > 0) || sp->since_plain >= PLAIN_EVERY))
        return 0;   /* measure a plain step first, and again now and then: every estimate leans on it */
    double best = 0;
    int32_t k = 0;
    for (int i = 0; i < sp->n_src; i++) {
        const int c = sp->srcs[i];
        const int32_t cap = c == SRC_LOOKUP ? n_look : max;   /* the most drafter c can draft now */
        double r = 0;
        const int32_t kc = cap ? best_length(sp, c, cap, acceptance(sp, c), &r) : 0;
        if (kc && (!k || r > best)) { k = kc; best = r; *src = c; }
    }
    if (!k) {
        /* the drafter after the last probed that can draft now, one that could pay first */
        int next = 0, c = -1;
        bool hope = false;
        for (int i = 0; i < sp->n_src; i++)
            if (sp->srcs[i] == sp->probe_src) next = i + 1;
        for (int i = 0; i < sp->n_src && !hope; i++) {
            const int d = sp->srcs[(next + i) % sp->n_src];
            const int32_t cap = d == SRC_LOOKUP ? n_look : max;
            double r;
            if (!cap) continue;
            hope = !sp->probes[d] || best_length(sp, d, cap, PROBE_HOPE, &r) > 0;
            if (c < 0 || hope) c = d;
        }
        if (c < 0) return 0;   /* nothing to draft with: no probe due */
        double gap = hope ? sp->probe_gap : PROBE_MAX;
        if (!sp->p.forward_cost && hope)   /* a rejected probe costs its second row and draft step */
            gap = HACHI_MIN(HACHI_MAX(gap, (forward_cost(sp, 2) + sp->tok_ms[c] - forward_cost(sp, 1)) /
                                               (PROBE_SHARE * forward_cost(sp, 1))), PROBE_MAX);
        if (++sp->idle < gap) return 0;
        sp->idle = 0;
        sp->probing = true;
        k = 1;
        *src = sp->probe_src = c;
    }
    return *src == SRC_LOOKUP ? k : model_propose(sp, *src, base, sp->pending, k, draft);
}

/* After a forward of k drafts from src of which r were kept, in ms (measured rows k + 1). */
static void learn(hachi_spec *sp, int src, int32_t k, int32_t r, double fwd_ms, double draft_ms) {
    if (!sp->p.adaptive) return;
    sp->since_plain = k ? sp->since_plain + 1 : 0;
    sp->fwd_ms[k + 1] = timing_add(&sp->fwd_t[k + 1], fwd_ms);
    if (!k) return;
    sp->kept[src] = ACCEPT_DECAY * sp->kept[src] + r;
    sp->lost[src] = ACCEPT_DECAY * sp->lost[src] + (r < k);
    if (src != SRC_LOOKUP) {
        const double per = draft_ms / k;
        sp->tok_ms[src] = timing_add(&sp->tok_t[src], per);
    }
    if (sp->probing) {
        sp->probes[src]++;
        sp->probe_gap = r ? PROBE_MIN : HACHI_MIN(2 * sp->probe_gap, PROBE_MAX);
    } else {
        sp->idle = 0;
    }
}

hachi_status hachi_spec_step(hachi_spec *sp, int32_t max_tokens, int32_t *out, int32_t *n_out) {
    if (!sp || !out || !n_out) return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: step needs a spec, out and n_out");
    *n_out = 0;
    hachi_session *s = sp->s;
    const int32_t base = hachi_session_pos(s), n_ctx = hachi_session_n_ctx(s);
    if (max_tokens < 1) return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: step of max_tokens %d < 1", (int)max_tokens);
    sp->step_n = 0;
    if (sp->pending < 0) {   /* the first token after a feed: from the logits at hand, no forward */
        if (!sp->lg || sp->lg_pos != base)
            return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: no logits for position %d (%s): feed the tokens evaluated first",
                              (int)base, base == 0 ? "nothing evaluated" : "the session was rewound or evaluated since");
        int32_t tok = sample(sp, sp->lg, base);
        sp->step_lg[0] = sp->lg;
        sp->step_n = 1;
        out[(*n_out)++] = tok;
        if (!hachi_model_is_eog(sp->model, tok)) sp->pending = tok;
        return HACHI_OK;
    }
    if (base >= n_ctx) return hachi_fail(HACHI_ERR_CONTEXT_FULL, "spec: the context of %d tokens is full", (int)n_ctx);

    /* draft: the pending token, k drafts and the sample after them fit max_tokens and the context */
    int32_t batch[HACHI_DRAFT_MAX + 1], k = 0;
    int src = SRC_LOOKUP;
    double draft_ms = 0;
    const int32_t room = HACHI_MIN(n_ctx - base - 1, max_tokens - 1);
    batch[0] = sp->pending;
    if (room > 0 && sp->n_src) {
        const double t0 = hachi_time_ms();
        k = propose(sp, base, HACHI_MIN(sp->p.n_draft, room), batch + 1, &src);
        draft_ms = hachi_time_ms() - t0;
        sp->stats.draft_ms += draft_ms;
    }
    const bool sampled = sp->sampled && src != SRC_LOOKUP;   /* drafts drawn from q */

    /* evaluate: positions base..base+k in one forward (a plain decode step when k = 0) */
    const double t0 = hachi_time_ms();
    hachi_status st = hachi_session_eval(s, batch, k + 1, k ? sp->rows : NULL);
    if (st) return st;
    const double fwd_ms = hachi_time_ms() - t0;
    sp->pending = -1;
    sp->stats.forwards++;
    sp->stats.drafted += k;
    sp->stats.draft_forwards += k > 0;
    sp->stats.lookup_forwards += k > 0 && src == SRC_LOOKUP;
    sp->stats.self_forwards += k > 0 && src == SRC_SELF;

    /* accept: row r gives the token at base + r + 1; a deterministic draft is kept while the
     * sample equals it, a sampled one by rejection sampling */
    int32_t r = 0;
    for (;; r++) {
        const float *lg = k ? sp->rows + (size_t)r * sp->n_vocab : hachi_session_logits(s);
        bool keep;
        int32_t tok;
        if (sampled && r < k) {
            tok = record(sp, judge(sp, lg, r, batch[r + 1], &keep), base + r + 1);
        } else {
            tok = sample(sp, lg, base + r + 1);
            keep = r < k && tok == batch[r + 1];
        }
        sp->step_lg[*n_out] = lg;
        sp->step_n = *n_out + 1;
        out[(*n_out)++] = tok;
        sp->lg = lg;                 /* after an end of generation, the next sample's logits */
        sp->lg_pos = base + r + 1;
        if (hachi_model_is_eog(sp->model, tok)) break;
        if (keep) { sp->stats.accepted++; sp->stats.accepted_at[r]++; continue; }
        sp->pending = tok;
        break;
    }
    learn(sp, src, k, HACHI_MIN(r, k), fwd_ms, draft_ms);
    /* rewind: the drafted positions not kept */
    return r < k ? hachi_session_rewind(s, base + r + 1) : HACHI_OK;
}

const float *hachi_spec_step_logits(const hachi_spec *sp, int32_t i) {
    return sp && i >= 0 && i < sp->step_n ? sp->step_lg[i] : NULL;
}

hachi_status hachi_spec_flush(hachi_spec *sp) {
    if (!sp) return hachi_fail(HACHI_ERR_INVALID_ARG, "spec: flush of a NULL spec");
    if (sp->pending < 0) return HACHI_OK;
    hachi_session *s = sp->s;
    if (hachi_session_pos(s) >= hachi_session_n_ctx(s))
        return hachi_fail(HACHI_ERR_CONTEXT_FULL, "spec: the context of %d tokens is full", (int)hachi_session_n_ctx(s));
    sp->step_n = 0;
    hachi_status st = hachi_session_eval(s, &sp->pending, 1, NULL);
    if (st) return st;
    sp->pending = -1;
    sp->stats.forwards++;
    sp->lg = hachi_session_logits(s);
    sp->lg_pos = hachi_session_pos(s);
    return HACHI_OK;
}
