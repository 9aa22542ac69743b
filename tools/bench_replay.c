/* bench_replay: hachi bench --spec-replay. A trace (hachi run --spec-trace) holds, per forward
 * of a speculative run, how many tokens were drafted (k) and how many of them were kept (r). The
 * replay runs the same forwards on another model (an E2B-shaped file whose random weights make
 * its own acceptance meaningless): a forward of k + 1 pseudo-random tokens with k + 1 logits
 * rows, as the verifier asks for, then a rewind past the r + 1 tokens it gave, beside plain
 * decoding of as many tokens one at a time. The two alternate in segments of 16 forwards, so
 * drift on a shared machine falls on both; each goes on from where the last left (the depth
 * grows by twice the trace's tokens). Self-speculation's draft steps are replayed (a draft step
 * per drafted token, then a rewind, before the forward that verifies); other drafting time is
 * not (prompt lookup's is ~1 us per token). Also the token and median helpers of hachi bench's
 * other measurements. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

#define SEGMENT 16   /* forwards per alternation */

bool replay_load(const char *cmd, const char *path, replay_trace *t) {
    memset(t, 0, sizeof *t);
    t->path = path;
    FILE *f = fopen(path, "r");
    if (!f) return cli_error(cmd, "cannot read the trace '%s'", path) == 0;
    cli_note_input(path);
    char line[256];
    int cap = 0, no = 0;
    bool ok = true;
    while (ok && fgets(line, sizeof line, f)) {
        no++;
        if (line[0] == '#' || line[0] == '\n') continue;
        char *e1, *e2, *e3;
        const long k = strtol(line, &e1, 10), r = strtol(e1, &e2, 10);
        long d = strtol(e2, &e3, 10);
        if (e3 == e2) d = 0;   /* no third field: no draft steps */
        while (*e3 == ' ' || *e3 == '\t' || *e3 == '\r' || *e3 == '\n') e3++;
        if (e1 == line || e2 == e1 || *e3 || k < 0 || k > HACHI_DRAFT_MAX || r < 0 || r > k || (d && d != k)) {
            ok = cli_error(cmd, "'%s' line %d: expected 'drafted kept [draft_steps]' with 0 <= kept <= drafted <= %d "
                           "and draft steps 0 or as many as drafted", path, no, HACHI_DRAFT_MAX) == 0;
            break;
        }
        if (t->n == cap) {
            cap = cap ? 2 * cap : 256;
            uint8_t(*nk)[3] = realloc(t->kr, sizeof *t->kr * (size_t)cap);
            if (!nk) { ok = cli_error(cmd, "out of memory") == 0; break; }
            t->kr = nk;
        }
        t->kr[t->n][0] = (uint8_t)k;
        t->kr[t->n][1] = (uint8_t)r;
        t->kr[t->n][2] = (uint8_t)d;
        t->draft_steps += (int)d;
        t->n++;
    }
    fclose(f);
    if (ok && !t->n) ok = cli_error(cmd, "'%s' holds no forwards", path) == 0;
    if (!ok) replay_free(t);
    return ok;
}

int replay_positions(const replay_trace *t) {
    int n = 0;
    for (int i = 0; i < t->n; i++) n += (i < SEGMENT ? 4 : 2) * (t->kr[i][1] + 1) + (t->kr[i][0] - t->kr[i][1]);
    return n;
}

void replay_free(replay_trace *t) {
    free(t->kr);
    t->kr = NULL;
    t->n = 0;
}

/* ---- what hachi bench's measurements share (cli.h) ---- */

void bench_tokens(int32_t *t, int n, int32_t n_vocab, uint64_t *x) {
    const int32_t span = n_vocab > 8 ? n_vocab - 4 : n_vocab;
    for (int i = 0; i < n; i++) {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        t[i] = (n_vocab > 8 ? 4 : 0) + (int32_t)(*x % (uint64_t)span);
    }
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- the replay ---- */

/* Forwards [a, b) of t from the session's position: speculative (spec) or plain; the time in
 * ms, -1 on an error (printed). */
static double segment(const char *cmd, hachi_session *s, const replay_trace *t, int a, int b, bool spec, float *rows,
                      uint64_t *rng) {
    const int32_t nv = hachi_model_n_vocab(hachi_session_model(s));
    int32_t toks[HACHI_DRAFT_MAX + 1];
    hachi_status st = HACHI_OK;
    const double t0 = cli_time_ms();
    for (int i = a; i < b && !st; i++) {
        const int k = t->kr[i][0], r = t->kr[i][1], d = t->kr[i][2];
        if (spec) {
            const int32_t base = hachi_session_pos(s);
            bench_tokens(toks, k + 1, nv, rng);
            for (int j = 0; j < d && !st; j++) st = hachi_session_eval_draft(s, toks + j, 1);
            if (d && !st) st = hachi_session_rewind(s, base);
            if (!st) st = hachi_session_eval(s, toks, k + 1, k ? rows : NULL);
            if (!st && r < k) st = hachi_session_rewind(s, base + r + 1);
        } else {
            for (int j = 0; j <= r && !st; j++) {
                bench_tokens(toks, 1, nv, rng);
                st = hachi_session_eval(s, toks, 1, NULL);
            }
        }
    }
    const double ms = cli_time_ms() - t0;
    if (st) { cli_lib_error(cmd, st, "replay forward failed"); return -1; }
    return ms;
}

bool replay_run(const char *cmd, hachi_session *s, const replay_trace *t, uint64_t seed, replay_result *out) {
    memset(out, 0, sizeof *out);
    const size_t nv = (size_t)hachi_model_n_vocab(hachi_session_model(s));
    float *rows = malloc(sizeof *rows * nv * (HACHI_DRAFT_MAX + 1));
    const int n_seg = (t->n + SEGMENT - 1) / SEGMENT;
    double *ratio = malloc(sizeof *ratio * (size_t)n_seg);
    uint64_t rng = seed | 1;
    bool ok = rows && ratio;
    if (!ok) cli_error(cmd, "out of memory");
    for (int i = 0; i < t->n; i++) {
        out->forwards++;
        out->drafted += t->kr[i][0];
        out->kept += t->kr[i][1];
        out->tokens += t->kr[i][1] + 1;
        out->draft_forwards += t->kr[i][0] > 0;
    }
    /* warm-up: one segment of each, untimed */
    ok = ok && segment(cmd, s, t, 0, CLI_MIN(SEGMENT, t->n), true, rows, &rng) >= 0 &&
         segment(cmd, s, t, 0, CLI_MIN(SEGMENT, t->n), false, rows, &rng) >= 0;
    for (int g = 0; ok && g < n_seg; g++) {
        const int a = g * SEGMENT, b = CLI_MIN(a + SEGMENT, t->n);
        double ms[2];   /* [spec, plain] */
        for (int o = 0; ok && o < 2; o++) {
            const bool spec = (o + g) % 2 == 0;   /* the order alternates */
            ms[spec ? 0 : 1] = segment(cmd, s, t, a, b, spec, rows, &rng);
            ok = ms[spec ? 0 : 1] >= 0;
        }
        if (!ok) break;
        out->spec_ms += ms[0];
        out->plain_ms += ms[1];
        ratio[g] = ms[1] / ms[0];
    }
    if (ok) out->median_ratio = bench_median(ratio, n_seg);
    free(ratio);
    free(rows);
    return ok;
}

void replay_print(const replay_trace *t, int depth, const replay_result *r) {
    const double spec = r->tokens / (r->spec_ms / 1000.0), plain = r->tokens / (r->plain_ms / 1000.0);
    printf("replay %s at depth %d: %d forwards for %d tokens (%d drafted, %d kept: acceptance %.3f, mean accepted "
           "length %.2f%s)\n  speculative %.2f tok/s, plain %.2f tok/s: %.2fx (median of %d segments %.2fx)\n",
           t->path, depth, r->forwards, r->tokens, r->drafted, r->kept, r->drafted ? (double)r->kept / r->drafted : 0.0,
           r->draft_forwards ? 1.0 + (double)r->kept / r->draft_forwards : 0.0,
           t->draft_steps ? "; self-speculative draft steps replayed" : "", spec, plain, spec / plain,
           (t->n + SEGMENT - 1) / SEGMENT, r->median_ratio);
}
