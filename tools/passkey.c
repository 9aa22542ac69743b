/* passkey: the prompts of hachi passkey and hachi heads (cli.h).
 *
 * A prompt has the format of ../shared/models/README.md and of its fixtures
 * (gemma4-micro.passkey.prompts.txt is built this way, checked by a test): BOS; a run of
 * filler tokens (the filler file tokenized once, the run at a random offset); after
 * round(depth x filler) of them the needle "The pass key is K. Remember it. K is the pass
 * key." tokenized on its own (so with SentencePiece's leading space); the rest of the run;
 * then "What is the pass key? The pass key is", tokenized on its own. The filler run is as
 * long as makes the prompt exactly the requested length. K is a random 5-digit number. The
 * key and the offset of prompt i at (length, depth) come from the seed and those three
 * alone: a prompt does not depend on which other lengths and depths were asked for. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The random stream of prompt i at (length, depth). */
static uint64_t prompt_stream(uint64_t seed, int length, double depth, int i) {
    uint64_t x = seed;
    x = splitmix64(&x) ^ (uint64_t)length;
    x = splitmix64(&x) ^ (uint64_t)llround(depth * 1e6);
    x = splitmix64(&x) ^ (uint64_t)i;
    return splitmix64(&x);
}

/* Text -> ids, no BOS, control-token text kept as text; NULL on failure. */
int32_t *pk_tokens_of(const hachi_model *m, const char *text, size_t len, int32_t *n) {
    if (hachi_tokenize(m, text, len, false, false, NULL, 0, n) != HACHI_OK) return NULL;
    int32_t *t = malloc(sizeof(int32_t) * ((size_t)*n + 1));
    if (t && hachi_tokenize(m, text, len, false, false, t, *n + 1, n) != HACHI_OK) { free(t); t = NULL; }
    return t;
}

/* Comma-separated list of numbers within [lo, hi]; the count, or -1 (error printed). */
int pk_parse_list(const char *cmd, const char *flag, const char *v, double lo, double hi, bool integer, double *out) {
    int n = 0;
    const char *p = v;
    while (*p) {
        char *end;
        double d = strtod(p, &end);
        if (end == p || (*end && *end != ',') || (*end == ',' && !end[1]) || isnan(d) || (integer && d != floor(d)))
            return cli_error(cmd, "%s expects a comma-separated list of %s, got '%s'", flag,
                             integer ? "integers" : "numbers", v), -1;
        if (d < lo || d > hi) return cli_error(cmd, "%s: %g is not in [%g, %g]", flag, d, lo, hi), -1;
        if (n == PK_MAX_LIST) return cli_error(cmd, "%s: at most %d values", flag, PK_MAX_LIST), -1;
        out[n++] = d;
        p = *end ? end + 1 : end;
    }
    if (n == 0) return cli_error(cmd, "%s is empty", flag), -1;
    return n;
}

static int32_t argmax(const float *x, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

/* The first maximal run of exactly 5 digits in s, or -1. */
static long first_5digit(const char *s) {
    for (const char *p = s; *p;) {
        if (*p < '0' || *p > '9') { p++; continue; }
        const char *q = p;
        while (*q >= '0' && *q <= '9') q++;
        if (q - p == 5) return strtol(p, NULL, 10);
        p = q;
    }
    return -1;
}

/* Prompt i at (len, depth) into ids[0..len); false with an error printed when it cannot be made. */
bool pk_build_prompt(const char *cmd, const pk_source *src, int len, double depth, uint64_t seed, int i,
                         int32_t *ids, pk_prompt *pr) {
    const hachi_model *m = src->m;
    uint64_t x = prompt_stream(seed, len, depth, i);
    pr->key = 10000 + (long)(splitmix64(&x) % 90000);
    char needle_text[128], key_text[16];
    snprintf(needle_text, sizeof needle_text, "The pass key is %ld. Remember it. %ld is the pass key.", pr->key, pr->key);
    snprintf(key_text, sizeof key_text, "%ld", pr->key);
    int32_t n_needle, n_key;
    int32_t *needle = pk_tokens_of(m, needle_text, strlen(needle_text), &n_needle);
    int32_t *key_toks = pk_tokens_of(m, key_text, strlen(key_text), &n_key);
    int n_fill = len - 1 - n_needle - src->n_question;
    bool ok = false;
    if (!needle || !key_toks) cli_error(cmd, "cannot tokenize the needle");
    else if (n_fill < 2)
        cli_error(cmd, "length %d is too short for the needle and the question (%d tokens)", len, len - n_fill);
    else if (n_fill > src->n_filler)
        cli_error(cmd, "the filler '%s' has %d tokens; length %d needs %d", src->path, src->n_filler, len, n_fill);
    else {
        /* " 67519" is "▁" "6" "7" ... on gemma4-micro: the margin is taken after the "▁" */
        for (pr->n_lead = 0; pr->n_lead < n_key && pr->n_lead < 8; pr->n_lead++) {
            char piece[64];
            int32_t pl = hachi_token_to_text(m, key_toks[pr->n_lead], piece, sizeof piece);
            if (pl > 0 && memchr(piece, key_text[0], (size_t)pl)) break;
        }
        if (pr->n_lead == n_key || pr->n_lead == 8) cli_error(cmd, "no token of '%s' holds its first digit", key_text);
        else {
            memcpy(pr->lead, key_toks, sizeof(int32_t) * (size_t)pr->n_lead);
            pr->n_answer = CLI_MIN(n_key, 8);
            memcpy(pr->answer, key_toks, sizeof(int32_t) * (size_t)pr->n_answer);
            pr->target = key_toks[pr->n_lead];
            pr->offset = (int)(splitmix64(&x) % (uint64_t)(src->n_filler - n_fill + 1));
            int n_pre = (int)floor(depth * n_fill + 0.5), p = 0;
            const int32_t *run = src->filler + pr->offset;
            ids[p++] = hachi_model_bos(m);
            memcpy(ids + p, run, sizeof(int32_t) * (size_t)n_pre); p += n_pre;
            pr->needle_pos = p;
            memcpy(ids + p, needle, sizeof(int32_t) * (size_t)n_needle); p += n_needle;
            memcpy(ids + p, run + n_pre, sizeof(int32_t) * (size_t)(n_fill - n_pre)); p += n_fill - n_pre;
            memcpy(ids + p, src->question, sizeof(int32_t) * (size_t)src->n_question);
            ok = true;
        }
    }
    free(needle);
    free(key_toks);
    return ok;
}

/* The answer to the prompt ids[0..n) on s: the margin (teacher-forcing the answer's tokens before
 * the key's first digit, then rewinding them), then 8 greedy tokens. lg: n_vocab floats. */
hachi_status pk_answer_prompt(hachi_session *s, const hachi_model *m, const int32_t *ids, int n, const pk_prompt *pr,
                           float *lg, pk_answer *a) {
    const int32_t *lead = pr->lead, target = pr->target;
    int n_lead = pr->n_lead;
    int nv = hachi_model_n_vocab(m);
    hachi_status st;
    memset(a, 0, sizeof *a);
    if ((st = hachi_session_rewind(s, 0)) || (st = hachi_session_eval(s, ids, n, NULL))) return st;
    memcpy(lg, hachi_session_logits(s), sizeof(float) * nv);
    const float *ml = lg;
    if (n_lead > 0) {
        if ((st = hachi_session_eval(s, lead, n_lead, NULL))) return st;
        ml = hachi_session_logits(s);
    }
    float best = -INFINITY;
    for (int i = 0; i < nv; i++) if (i != target && ml[i] > best) best = ml[i];
    a->margin = (double)ml[target] - best;
    if (n_lead > 0 && (st = hachi_session_rewind(s, n))) return st;
    size_t len = 0;
    for (int k = 0; k < PK_GEN; k++) {
        int32_t t = a->toks[k] = argmax(k == 0 ? lg : hachi_session_logits(s), nv);
        char piece[64];
        int32_t l = hachi_token_to_text(m, t, piece, sizeof piece);
        if (l > 0 && len + (size_t)l < sizeof a->text) { memcpy(a->text + len, piece, (size_t)l); len += (size_t)l; }
        if (k + 1 < PK_GEN && (st = hachi_session_eval(s, &t, 1, NULL))) return st;
    }
    a->text[len] = 0;
    a->correct = first_5digit(a->text) == pr->key;
    return HACHI_OK;
}


bool pk_source_init(const char *cmd, const hachi_model *m, const char *filler_path, pk_source *src) {
    memset(src, 0, sizeof *src);
    src->m = m;
    src->path = filler_path;
    size_t len;
    char *text = cli_read_file(cmd, filler_path, &len);
    const char *q_text = "What is the pass key? The pass key is";
    bool ok = text && (src->filler = pk_tokens_of(m, text, len, &src->n_filler)) &&
              (src->question = pk_tokens_of(m, q_text, strlen(q_text), &src->n_question));
    free(text);
    if (text && !ok) cli_error(cmd, "cannot tokenize '%s': %s", filler_path, hachi_last_error());
    if (ok && hachi_model_bos(m) < 0) ok = !cli_error(cmd, "the model has no BOS token");
    if (!ok) pk_source_free(src);
    return ok;
}

void pk_source_free(pk_source *src) {
    free(src->filler);
    free(src->question);
    src->filler = src->question = NULL;
}
