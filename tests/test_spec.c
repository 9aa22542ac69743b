/* Tests for speculative decoding (src/spec.c): the prompt-lookup drafter by hand; the
 * hachi_spec loop on real models against plain decoding (stories260K greedy and sampled,
 * with "." made its end-of-generation token, at the context limit; the gemma4-micro
 * passkey answers), step budgets, no allocation while decoding, parameter checks. */
#include <stdbool.h>
#include "test.h"
#include "hachi.h"
#include "hachi.h"
#include "util.h"
#include "lookup.h"

/* Prompt lookup, by hand: the longest n-gram (4..2 here) of the tail that occurred
 * before, its latest occurrence, what followed it (bounded by max_draft, by the end of
 * the history and by HACHI_DRAFT_MAX), and nothing when nothing matches. */
TEST(draft_lookup) {
    int32_t d[32];
    const int32_t a[] = {5, 6, 7, 8, 9, 5, 6, 7};   /* tail "5 6 7" at 0 (no earlier "9 5 6 7") */
    CHECK(hachi_draft_lookup(a, 8, 2, 4, 3, d) == 3 && d[0] == 8 && d[1] == 9 && d[2] == 5);
    CHECK(hachi_draft_lookup(a, 8, 2, 4, 8, d) == 5 && d[4] == 7);   /* up to the end of the history */
    const int32_t b[] = {1, 2, 3, 1, 2, 4, 1, 2};   /* "1 2" at 0 and 3: the latest wins */
    CHECK(hachi_draft_lookup(b, 8, 2, 4, 2, d) == 2 && d[0] == 4 && d[1] == 1);
    const int32_t c[] = {1, 2, 3, 4, 5, 6, 2, 9, 9, 3, 4};   /* "3 4" at 2 beats the 1-gram "4" */
    CHECK(hachi_draft_lookup(c, 11, 1, 4, 2, d) == 2 && d[0] == 5 && d[1] == 6);
    CHECK(hachi_draft_lookup(c, 11, 3, 4, 2, d) == 0);   /* no earlier "9 3 4" */
    int32_t z[40];
    for (int i = 0; i < 40; i++) z[i] = i % 20;   /* period 20: 20 tokens follow, 15 at most */
    CHECK(hachi_draft_lookup(z, 40, 2, 4, 100, d) == HACHI_DRAFT_MAX && d[0] == 0 && d[14] == 14);
    CHECK(hachi_draft_lookup(a, 8, 2, 4, 0, d) == 0 && hachi_draft_lookup(a, 1, 2, 4, 4, d) == 0);
    CHECK(hachi_draft_lookup(NULL, 8, 2, 4, 4, d) == 0 && hachi_draft_lookup(a, 8, 0, 4, 4, d) == 0);
}

/* The n-gram index (lookup.h) answers as the scan above: texts of 2..6 symbols (matches
 * everywhere), n-grams 1..1 up to 3..8, drafts of 1..15, asked after every appended token, with
 * rewrites of earlier positions (truncate, then a different continuation) in between. */
TEST(lookup_index_equals_scan) {
    enum { CAP = 1500 };
    static int32_t text[CAP];
    uint64_t x = 88172645463325252ull;
    int cases = 0;
    for (int round = 0; round < 24; round++) {
        const int32_t n_min = 1 + round % 3, n_max = n_min + (round / 3) % 6, vocab = 2 + round % 5;
        hachi_lookup *ix = NULL;
        CHECK(hachi_lookup_create(CAP, n_min, n_max, &ix) == HACHI_OK);
        if (!ix) return;
        int32_t len = 0;
        while (len < CAP) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            if (len > 64 && x % 97 == 0) {   /* a rewrite: the text from up to 64 positions back on */
                len -= 1 + (int32_t)(x / 97 % 64);
                hachi_lookup_truncate(ix, len);
            }
            text[len++] = (int32_t)(x >> 20) % vocab;
            const int32_t max = 1 + (int32_t)(x >> 40) % HACHI_DRAFT_MAX;
            int32_t a[HACHI_DRAFT_MAX], b[HACHI_DRAFT_MAX];
            const int32_t na = hachi_draft_lookup(text, len, n_min, n_max, max, a);
            const int32_t nb = hachi_lookup_draft(ix, text, len, max, b);
            cases++;
            if (na != nb || memcmp(a, b, (size_t)na * sizeof *a)) {
                CHECKF(0, "round %d (n-grams %d..%d, %d symbols), length %d, max %d: scan %d tokens, index %d", round,
                       n_min, n_max, vocab, len, max, na, nb);
                break;
            }
        }
        hachi_lookup_free(ix);
    }
    CHECK(cases > 24 * CAP / 2);
    hachi_lookup *ix = (hachi_lookup *)1;
    CHECK(hachi_lookup_create(10, 3, 2, &ix) == HACHI_ERR_INVALID_ARG && !ix);
    CHECK(hachi_lookup_create(10, 1, HACHI_LOOKUP_NGRAM_MAX + 1, &ix) == HACHI_ERR_INVALID_ARG && !ix);
}

/* ---- the loop on real models -------------------------------------------------------- */

/* stories260K (llama2.c) converted once per run; with dot_eog, a copy whose end-of-generation
 * token is "." (the one u32 of tokenizer.ggml.eos_token_id patched in place), so that every
 * sentence ends a generation, often in the middle of a verified draft. */
static hachi_model *stories(bool dot_eog, int32_t *dot) {
    static char path[2][1024];
    const char *bin = test_shared_path("data/stories260K.bin"), *tok = test_shared_path("data/tok512.bin");
    if (!bin || !tok) return NULL;
    if (!path[0][0]) {
        snprintf(path[0], sizeof path[0], "%s/spec_stories260K.gguf", test_tmpdir());
        hachi_status st = hachi_convert_llama2c(bin, tok, path[0]);
        CHECKF(st == HACHI_OK, "convert: %s", hachi_last_error());
        if (st) { path[0][0] = 0; return NULL; }
    }
    hachi_model *m = NULL;
    CHECKF(hachi_model_load(path[0], NULL, &m) == HACHI_OK, "load: %s", hachi_last_error());
    if (!m || !dot_eog) return m;
    int32_t ids[8], n = 0;
    hachi_tokenize(m, "big.", 4, false, false, ids, 8, &n);
    *dot = n > 0 ? ids[n - 1] : -1;
    hachi_model_free(m);
    m = NULL;
    size_t len;
    char *b = test_read_file(path[0], &len);
    const char *key = "tokenizer.ggml.eos_token_id";
    char *at = b ? memmem(b, len, key, strlen(key)) : NULL;
    uint32_t type = 0;
    if (at) memcpy(&type, at + strlen(key), 4);
    CHECKF(at && type == 4 && *dot >= 0, "no u32 eos_token_id in the converted file");   /* GGUF type 4: u32 */
    if (!at || type != 4 || *dot < 0) { free(b); return NULL; }
    uint32_t v = (uint32_t)*dot;
    memcpy(at + strlen(key) + 4, &v, 4);
    snprintf(path[1], sizeof path[1], "%s/spec_stories260K_dot.gguf", test_tmpdir());
    FILE *f = fopen(path[1], "wb");
    CHECK(f && fwrite(b, 1, len, f) == len && fclose(f) == 0);
    free(b);
    CHECKF(hachi_model_load(path[1], NULL, &m) == HACHI_OK, "load: %s", hachi_last_error());
    CHECK(!m || (hachi_model_is_eog(m, *dot) && !hachi_model_is_eog(m, 2)));
    return m;
}

/* A session of 2048 positions on one thread; with self-speculation's draft steps at budget
 * positions when budget > 0. */
static hachi_session *self_session(const hachi_model *m, int budget) {
    hachi_session_params p = hachi_session_default_params();
    p.n_ctx = 2048;
    p.n_threads = 1;
    p.draft_budget = budget;
    hachi_session *s = NULL;
    CHECKF(hachi_session_create(m, &p, &s) == HACHI_OK, "session: %s", hachi_last_error());
    return s;
}
static hachi_session *session(const hachi_model *m) { return self_session(m, 0); }

static hachi_sampler *sampler(bool sampled) {
    hachi_sampler_params p = hachi_sampler_default_params();
    if (sampled) { p.temp = 0.8f; p.top_p = 0.95f; p.repeat_penalty = 1.1f; p.seed = 7; }
    else p.temp = 0;
    hachi_sampler *smp = NULL;
    CHECK(hachi_sampler_create(&p, 512, &smp) == HACHI_OK);
    return smp;
}

static hachi_spec *spec_with(const hachi_model *m, hachi_session *s, hachi_sampler *smp, const hachi_spec_params *p) {
    hachi_spec *sp = NULL;
    CHECKF(hachi_spec_create(m, s, smp, p, &sp) == HACHI_OK, "spec: %s", hachi_last_error());
    return sp;
}

static hachi_spec *spec(const hachi_model *m, hachi_session *s, hachi_sampler *smp, int n_draft) {
    hachi_spec_params p = hachi_spec_default_params();
    p.drafter = n_draft ? HACHI_DRAFTER_LOOKUP : HACHI_DRAFTER_NONE;
    p.n_draft = n_draft;
    return spec_with(m, s, smp, &p);
}

/* Plain decoding, what hachi_spec must reproduce: sample, record (unless end of generation),
 * evaluate one token at a time (the last one too when eval_last). Stops after an
 * end-of-generation token (returned), after n tokens, or at the first token that does not
 * fit the context (returned); the count. */
static int plain(const hachi_model *m, hachi_session *s, hachi_sampler *smp, int n, bool eval_last, int32_t *out) {
    for (int i = 0; i < n; i++) {
        int32_t t = hachi_sampler_sample(smp, hachi_session_logits(s));
        out[i] = t;
        if (hachi_model_is_eog(m, t)) return i + 1;
        hachi_sampler_accept(smp, t);
        if ((i + 1 < n || eval_last) && hachi_session_eval(s, &t, 1, NULL) != HACHI_OK) return i + 1;
    }
    return n;
}

/* Up to n tokens from sp, every step asked for at most `budget` of them (0: all that are
 * left), checking each step's count; stops after an end of generation or an error (*st). */
static int spec_decode(hachi_spec *sp, const hachi_model *m, int n, int budget, int32_t *out, hachi_status *st) {
    int got = 0;
    *st = HACHI_OK;
    for (int step = 0; got < n; step++) {
        int32_t max = budget ? HACHI_MIN(n - got, 1 + step % budget) : n - got, k = -1;
        int32_t buf[HACHI_SPEC_STEP_MAX];
        if ((*st = hachi_spec_step(sp, max, buf, &k))) { CHECK(k == 0); break; }
        CHECKF(k >= 1 && k <= max && k <= HACHI_SPEC_STEP_MAX, "step %d: %d tokens for at most %d", step, k, max);
        if (k < 1 || k > max) break;
        memcpy(out + got, buf, (size_t)k * sizeof *buf);
        got += k;
        for (int i = 0; i < k - 1; i++) CHECKF(!hachi_model_is_eog(m, buf[i]), "an end of generation inside a step");
        if (hachi_model_is_eog(m, buf[k - 1])) break;
    }
    return got;
}

static bool same(const int32_t *a, int na, const int32_t *b, int nb, const char *what) {
    int i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    CHECKF(na == nb && i == na, "%s: %d tokens vs %d of plain decoding, first difference at %d", what, na, nb, i);
    return na == nb && i == na;
}

/* stories260K after "Once upon a time" (its ids into prompt, *n_prompt of them): n tokens of
 * plain decoding, greedy or sampled, into ref; their count. */
static int plain_reference(const hachi_model *m, bool sampled, int n, int32_t *prompt, int *n_prompt, int32_t *ref) {
    hachi_tokenize(m, "Once upon a time", 16, true, true, prompt, 16, n_prompt);
    hachi_session *s = session(m);
    hachi_sampler *smp = sampler(sampled);
    int got = 0;
    if (s && smp) {
        CHECK(hachi_session_eval(s, prompt, *n_prompt, NULL) == HACHI_OK);
        for (int i = 0; i < *n_prompt; i++) hachi_sampler_accept(smp, prompt[i]);
        got = plain(m, s, smp, n, false, ref);
    }
    hachi_sampler_free(smp);
    hachi_session_free(s);
    return got;
}

/* n tokens from sp (the prompt fed), which must be ref's; the steps allocate nothing. */
static void decode_checked(hachi_spec *sp, const hachi_model *m, int n, const int32_t *ref, int n_ref, const char *what) {
    int32_t got[256];
    hachi_status st;
    const uint64_t allocs = hachi_alloc_count();
    const int g = spec_decode(sp, m, HACHI_MIN(n, 256), 0, got, &st);
    CHECKF(hachi_alloc_count() == allocs, "%s: %llu allocations while decoding", what,
           (unsigned long long)(hachi_alloc_count() - allocs));
    CHECKF(st == HACHI_OK, "%s: %s", what, hachi_last_error());
    same(got, g, ref, n_ref, what);
}

/* Plain decoding and hachi_spec give the same tokens, greedy and sampled (temperature, top-p,
 * repetition penalty, a seed), without a drafter and with drafts of 1, 4 and 15 tokens, and
 * drafts are kept where the text repeats; the last token stays pending until flushed; the
 * steps allocate nothing. */
TEST(spec_same_tokens_as_plain) {
    hachi_model *m = stories(false, NULL);
    if (!m) SKIP("stories260K absent");
    enum { N = 200 };
    int32_t prompt[16], n_prompt = 0, ref[N];
    for (int sampled = 0; sampled < 2; sampled++) {
        const int n_ref = plain_reference(m, sampled, N, prompt, &n_prompt, ref);
        CHECK(n_ref == N);
        const int drafts[] = {0, 1, 4, HACHI_DRAFT_MAX};
        for (int d = 0; d < 4; d++) {
            char what[64];
            snprintf(what, sizeof what, "%s, n_draft %d", sampled ? "sampled" : "greedy", drafts[d]);
            hachi_session *s = session(m);
            hachi_sampler *smp = sampler(sampled);
            hachi_spec *sp = s && smp ? spec(m, s, smp, drafts[d]) : NULL;
            if (!sp) { hachi_sampler_free(smp); hachi_session_free(s); break; }
            CHECK(hachi_session_eval(s, prompt, n_prompt, NULL) == HACHI_OK);
            CHECK(hachi_spec_feed(sp, prompt, n_prompt) == HACHI_OK);
            decode_checked(sp, m, N, ref, n_ref, what);
            const hachi_spec_stats *ss = hachi_spec_get_stats(sp);
            if (drafts[d]) CHECKF(ss->drafted > 0 && ss->accepted > 0 && ss->accepted <= ss->drafted &&
                                  ss->forwards + ss->accepted == N - 1,
                                  "%s: %lld drafted, %lld accepted, %lld forwards", what, (long long)ss->drafted,
                                  (long long)ss->accepted, (long long)ss->forwards);
            else CHECKF(ss->drafted == 0 && ss->accepted == 0 && ss->forwards == N - 1, "%s: %lld forwards", what,
                        (long long)ss->forwards);
            const int64_t fw = ss->forwards;
            CHECK(hachi_session_pos(s) == n_prompt + N - 1);   /* the last token is pending */
            CHECK(hachi_spec_feed(sp, NULL, 0) == HACHI_ERR_INVALID_ARG);
            CHECK(hachi_spec_flush(sp) == HACHI_OK && hachi_session_pos(s) == n_prompt + N && ss->forwards == fw + 1);
            CHECK(hachi_spec_flush(sp) == HACHI_OK && ss->forwards == fw + 1);   /* nothing pending: nothing */
            hachi_spec_free(sp);
            hachi_sampler_free(smp);
            hachi_session_free(s);
        }
    }
    hachi_model_free(m);
}

/* hachi_spec_step_logits: each token of a step comes with the logits it was drawn from, bitwise
 * those plain decoding samples that token from (a verify forward's row equals a decode step's),
 * with and without drafts; nothing past the step's tokens, nothing after a flush. */
TEST(spec_step_logits_are_plain_decodings) {
    hachi_model *m = stories(false, NULL);
    if (!m) SKIP("stories260K absent");
    enum { N = 120 };
    const int V = hachi_model_n_vocab(m);
    int32_t prompt[16], n_prompt = 0, ref[N];
    float *lg = malloc(sizeof(float) * (size_t)V * N);
    hachi_tokenize(m, "Once upon a time", 16, true, true, prompt, 16, &n_prompt);
    hachi_session *s = session(m);
    hachi_sampler *smp = sampler(true);
    int n_ref = 0;
    if (lg && s && smp && hachi_session_eval(s, prompt, n_prompt, NULL) == HACHI_OK) {
        for (int i = 0; i < n_prompt; i++) hachi_sampler_accept(smp, prompt[i]);
        for (; n_ref < N; n_ref++) {   /* plain decoding, each token's logits kept */
            memcpy(lg + (size_t)n_ref * V, hachi_session_logits(s), sizeof(float) * (size_t)V);
            ref[n_ref] = hachi_sampler_sample(smp, hachi_session_logits(s));
            if (hachi_model_is_eog(m, ref[n_ref])) { n_ref++; break; }
            hachi_sampler_accept(smp, ref[n_ref]);
            if (hachi_session_eval(s, &ref[n_ref], 1, NULL) != HACHI_OK) break;
        }
    }
    hachi_sampler_free(smp);
    hachi_session_free(s);
    CHECK(n_ref > 50);
    for (int d = 0; d < 2 && n_ref > 50; d++) {
        s = session(m);
        smp = sampler(true);
        hachi_spec *sp = s && smp ? spec(m, s, smp, d ? 4 : 0) : NULL;
        if (!sp) { hachi_sampler_free(smp); hachi_session_free(s); break; }
        CHECK(hachi_session_eval(s, prompt, n_prompt, NULL) == HACHI_OK && hachi_spec_feed(sp, prompt, n_prompt) == HACHI_OK);
        CHECK(hachi_spec_step_logits(sp, 0) == NULL);
        int got = 0, bad = 0, multi = 0;
        while (got < n_ref) {
            int32_t buf[HACHI_SPEC_STEP_MAX], k = 0;
            if (hachi_spec_step(sp, n_ref - got, buf, &k) != HACHI_OK || k < 1) break;
            multi += k > 1;
            for (int i = 0; i < k && got + i < n_ref; i++) {
                const float *l = hachi_spec_step_logits(sp, i);
                bad += !l || buf[i] != ref[got + i] || memcmp(l, lg + (size_t)(got + i) * V, sizeof(float) * (size_t)V);
            }
            CHECK(hachi_spec_step_logits(sp, k) == NULL && hachi_spec_step_logits(sp, -1) == NULL);
            got += k;
            if (hachi_model_is_eog(m, buf[k - 1])) break;
        }
        CHECKF(got == n_ref && bad == 0 && (d == 0 || multi > 0), "n_draft %d: %d of %d tokens, %d not plain's tokens "
               "and logits, %d steps of several", d ? 4 : 0, got, n_ref, bad, multi);
        CHECK(hachi_spec_flush(sp) == HACHI_OK && hachi_spec_step_logits(sp, 0) == NULL);
        hachi_spec_free(sp);
        hachi_sampler_free(smp);
        hachi_session_free(s);
    }
    free(lg);
    hachi_model_free(m);
}

/* max_tokens bounds every step (steps asked for 1, 2, 3, ... tokens, drafts cut to fit),
 * with the same tokens; after a flush the loop continues from the session's logits as
 * plain decoding does (a second run of tokens, as a chat's next reply without a prompt). */
TEST(spec_max_tokens) {
    hachi_model *m = stories(false, NULL);
    if (!m) SKIP("stories260K absent");
    enum { N = 60 };
    int32_t prompt[16], n_prompt = 0, ref[2 * N], got[2 * N];
    hachi_tokenize(m, "Once upon a time", 16, true, true, prompt, 16, &n_prompt);
    hachi_session *s = session(m);
    hachi_sampler *smp = sampler(true);
    if (!s || !smp) { hachi_model_free(m); return; }
    CHECK(hachi_session_eval(s, prompt, n_prompt, NULL) == HACHI_OK);
    for (int i = 0; i < n_prompt; i++) hachi_sampler_accept(smp, prompt[i]);
    int n_ref = plain(m, s, smp, 2 * N, false, ref);
    hachi_sampler_free(smp);
    hachi_session_free(s);
    for (int budget = 1; budget <= 5; budget += 2) {
        s = session(m);
        smp = sampler(true);
        hachi_spec *sp = s && smp ? spec(m, s, smp, 8) : NULL;
        if (!sp) { hachi_sampler_free(smp); hachi_session_free(s); break; }
        CHECK(hachi_session_eval(s, prompt, n_prompt, NULL) == HACHI_OK);
        CHECK(hachi_spec_feed(sp, prompt, n_prompt) == HACHI_OK);
        hachi_status st;
        int n = spec_decode(sp, m, N, budget, got, &st);
        CHECK(st == HACHI_OK && n == N && hachi_session_pos(s) == n_prompt + N - 1);
        CHECK(hachi_spec_flush(sp) == HACHI_OK && hachi_session_pos(s) == n_prompt + N);
        n += spec_decode(sp, m, N, budget, got + n, &st);
        CHECK(st == HACHI_OK);
        char what[32];
        snprintf(what, sizeof what, "steps of at most %d", budget);
        same(got, n, ref, n_ref, what);
        hachi_spec_free(sp);
        hachi_sampler_free(smp);
        hachi_session_free(s);
    }
    hachi_model_free(m);
}

/* End of generation, with "." as the end-of-generation token: every reply stops at its
 * first "." (returned last, not evaluated: the session holds the tokens before it, drafted
 * positions past it rewound, nothing pending), and the next turn starts with it as a chat's
 * does; over several turns the same tokens as plain decoding, and drafts kept. */
TEST(spec_end_of_generation) {
    int32_t dot = -1;
    hachi_model *m = stories(true, &dot);
    if (!m) SKIP("stories260K absent");
    enum { TURNS = 8, MAX = 64 };
    int32_t prompt[32], n_prompt = 0, turn[16], n_turn = 0;
    hachi_tokenize(m, "Once upon a time, Lily was happy", 32, true, true, prompt, 32, &n_prompt);
    hachi_tokenize(m, " Lily was", 9, false, true, turn + 1, 15, &n_turn);
    for (int sampled = 0; sampled < 2; sampled++) {
        int32_t ref[TURNS * MAX] = {0}, got[TURNS * MAX] = {0};
        int n_ref = 0, n_got = 0, ended = 0;
        for (int pass = 0; pass < 2; pass++) {   /* plain, then hachi_spec */
            hachi_session *s = session(m);
            hachi_sampler *smp = sampler(sampled);
            hachi_spec *sp = pass && s && smp ? spec(m, s, smp, 8) : NULL;
            if (!s || !smp || (pass && !sp)) { hachi_sampler_free(smp); hachi_session_free(s); break; }
            CHECK(hachi_session_eval(s, prompt, n_prompt, NULL) == HACHI_OK);
            if (sp) CHECK(hachi_spec_feed(sp, prompt, n_prompt) == HACHI_OK);
            else for (int i = 0; i < n_prompt; i++) hachi_sampler_accept(smp, prompt[i]);
            for (int t = 0; t < TURNS; t++) {
                int32_t *out = pass ? got + n_got : ref + n_ref;
                int n;
                if (!sp) n = plain(m, s, smp, MAX, true, out);
                else {
                    hachi_status st;
                    int32_t pos = hachi_session_pos(s);
                    n = spec_decode(sp, m, MAX, 0, out, &st);
                    CHECK(st == HACHI_OK);
                    if (n > 0 && out[n - 1] == dot) {
                        ended++;
                        const int64_t fw = hachi_spec_get_stats(sp)->forwards;
                        CHECKF(hachi_session_pos(s) == pos + n - 1, "turn %d: at %d after %d tokens from %d", t,
                               hachi_session_pos(s), n, pos);
                        CHECK(hachi_spec_flush(sp) == HACHI_OK && hachi_spec_get_stats(sp)->forwards == fw);
                    } else CHECK(hachi_spec_flush(sp) == HACHI_OK);
                }
                /* the next turn: the end of the reply (as a chat's turn text), then " Lily was" */
                turn[0] = dot;
                int32_t *next = turn + (n > 0 && out[n - 1] == dot ? 0 : 1);
                int n_next = n_turn + 1 - (int)(next - turn);
                CHECK(hachi_session_eval(s, next, n_next, NULL) == HACHI_OK);
                if (sp) CHECK(hachi_spec_feed(sp, next, n_next) == HACHI_OK);
                else for (int i = 0; i < n_next; i++) hachi_sampler_accept(smp, next[i]);
                if (pass) n_got += n; else n_ref += n;
            }
            if (sp) {
                const hachi_spec_stats *ss = hachi_spec_get_stats(sp);
                CHECKF(ss->drafted > 0 && ss->accepted > 0, "%s: %lld drafted, %lld accepted",
                       sampled ? "sampled" : "greedy", (long long)ss->drafted, (long long)ss->accepted);
            }
            hachi_spec_free(sp);
            hachi_sampler_free(smp);
            hachi_session_free(s);
        }
        CHECKF(ended >= TURNS / 2, "%s: only %d of %d replies ended at a '.'", sampled ? "sampled" : "greedy", ended, TURNS);
        same(got, n_got, ref, n_ref, sampled ? "sampled" : "greedy");
    }
    hachi_model_free(m);
}

/* The context limit: drafts are cut to the room left; when the pending token does not fit,
 * the step says HACHI_ERR_CONTEXT_FULL (no tokens, nothing changed), with the tokens of
 * plain decoding up to there: the session full, the last token still pending. */
TEST(spec_context_full) {
    NEED_SHARED(text_path, "data/tinystories_val_head.txt");
    hachi_model *m = stories(false, NULL);
    if (!m) SKIP("stories260K absent");
    size_t len;
    char *text = test_read_file(text_path, &len);
    enum { N_PROMPT = 2030, MAX = 64 };
    int32_t *prompt = malloc(sizeof(int32_t) * 8192), n = 0;
    hachi_tokenize(m, text, HACHI_MIN(len, (size_t)12000), true, true, prompt, 8192, &n);
    CHECK(n >= N_PROMPT);
    int32_t ref[MAX], got[MAX];
    int n_ref = 0;
    for (int pass = 0; pass < 2 && n >= N_PROMPT; pass++) {
        hachi_session *s = session(m);
        hachi_sampler *smp = sampler(false);
        hachi_spec *sp = pass && s && smp ? spec(m, s, smp, 8) : NULL;
        if (!s || !smp || (pass && !sp)) { hachi_sampler_free(smp); hachi_session_free(s); break; }
        CHECK(hachi_session_eval(s, prompt, N_PROMPT, NULL) == HACHI_OK);
        if (!sp) {
            for (int i = 0; i < N_PROMPT; i++) hachi_sampler_accept(smp, prompt[i]);
            n_ref = plain(m, s, smp, MAX, true, ref);
            CHECK(n_ref == 2048 - N_PROMPT + 1);
        } else {
            CHECK(hachi_spec_feed(sp, prompt, N_PROMPT) == HACHI_OK);
            hachi_status st;
            int k = spec_decode(sp, m, MAX, 0, got, &st);
            CHECKF(st == HACHI_ERR_CONTEXT_FULL, "status %d: %s", st, hachi_last_error());
            same(got, k, ref, n_ref, "to the context limit");
            CHECK(hachi_session_pos(s) == 2048);
            CHECK(hachi_spec_flush(sp) == HACHI_ERR_CONTEXT_FULL && hachi_session_pos(s) == 2048);
            int32_t one[HACHI_SPEC_STEP_MAX], n_one = -1;
            CHECK(hachi_spec_step(sp, 4, one, &n_one) == HACHI_ERR_CONTEXT_FULL && n_one == 0);
        }
        hachi_spec_free(sp);
        hachi_sampler_free(smp);
        hachi_session_free(s);
    }
    free(prompt);
    free(text);
    hachi_model_free(m);
}

/* The trained passkey model (1K-token prompts): the 8 greedy tokens of the reference answer,
 * the key's digits drafted from where the prompt states it and accepted. */
TEST(spec_gemma4_micro_passkey) {
    NEED_SHARED(mpath, "models/gemma4-micro.gguf");
    NEED_SHARED(ppath, "models/gemma4-micro.passkey.prompts.txt");
    NEED_SHARED(apath, "models/gemma4-micro.passkey.answers.txt");
    hachi_model *m = NULL;
    CHECKF(hachi_model_load(mpath, NULL, &m) == HACHI_OK, "load: %s", hachi_last_error());
    FILE *pf = fopen(ppath, "r"), *af = fopen(apath, "r");
    if (!m || !pf || !af) { CHECK(0); hachi_model_free(m); return; }
    char *line = NULL, aline[1024];
    size_t cap = 0;
    int k = 0;
    static int32_t ids[8192];
    while (k < 6 && getline(&line, &cap, pf) > 0) {   /* the 6 prompts of ~1K tokens */
        int n = 0;
        for (char *p = line, *e; n < 8192; p = e) {
            long v = strtol(p, &e, 10);
            if (e == p) break;
            ids[n++] = (int32_t)v;
        }
        do { if (!fgets(aline, sizeof aline, af)) aline[0] = 0; } while (aline[0] == '#');
        int plen, key, exp[8];
        double depth;
        CHECK(sscanf(aline, "%d %lf %d | %d %d %d %d %d %d %d %d", &plen, &depth, &key, &exp[0], &exp[1], &exp[2],   // NOLINT(cert-err34-c): the reference file; a bad line fails the check
                     &exp[3], &exp[4], &exp[5], &exp[6], &exp[7]) == 11);
        hachi_session *s = session(m);
        hachi_sampler *smp = sampler(false);
        hachi_spec *sp = s && smp ? spec(m, s, smp, 8) : NULL;
        if (sp) {
            CHECK(hachi_session_eval(s, ids, n, NULL) == HACHI_OK && hachi_spec_feed(sp, ids, n) == HACHI_OK);
            int32_t got[8];
            hachi_status st;
            int g = spec_decode(sp, m, 8, 0, got, &st);
            CHECK(st == HACHI_OK);
            char what[64];
            snprintf(what, sizeof what, "prompt %d (key %d)", k, key);
            same(got, g, exp, 8, what);
            const hachi_spec_stats *ss = hachi_spec_get_stats(sp);
            CHECKF(ss->accepted >= 5 && ss->forwards <= 3, "%s: %lld of %lld drafts kept, %lld forwards", what,
                   (long long)ss->accepted, (long long)ss->drafted, (long long)ss->forwards);
        }
        hachi_spec_free(sp);
        hachi_sampler_free(smp);
        hachi_session_free(s);
        k++;
    }
    CHECK(k == 6);
    free(line);
    fclose(pf);
    fclose(af);
    hachi_model_free(m);
}

/* Adaptive draft length (hachi_spec_params.adaptive) with fixed forward costs, where what it
 * chooses is known: verification for free (every forward of up to 5 rows costs the same): the
 * longest draft every time, so the same forwards as fixed 4-token drafts; a forward of k rows
 * costing k steps (a model whose weights sit in cache): drafting never pays, not even at 0.9
 * acceptance, so one one-token probe (after 16 forwards) and no other in 200 tokens (the next is
 * 256 forwards on); measured costs: the tokens
 * still plain decoding's. Greedy and sampled, 200 tokens each. */
TEST(spec_adaptive) {
    hachi_model *m = stories(false, NULL);
    if (!m) SKIP("stories260K absent");
    enum { N = 200 };
    int32_t prompt[16], n_prompt = 0, ref[N];
    static const float flat[5] = {1, 1, 1, 1, 1}, rows[5] = {1, 2, 3, 4, 5};
    const float *costs[4] = {NULL, flat, rows, NULL};   /* 0: fixed length 4, the reference of 1 */
    for (int sampled = 0; sampled < 2; sampled++) {
        const int n_ref = plain_reference(m, sampled, N, prompt, &n_prompt, ref);
        hachi_spec_stats fixed = {0};
        for (int c = 0; c < 4; c++) {
            const char *names[4] = {"fixed 4", "adaptive, flat costs", "adaptive, costs = rows", "adaptive, measured"};
            char what[80];
            snprintf(what, sizeof what, "%s, %s", sampled ? "sampled" : "greedy", names[c]);
            hachi_session *s = session(m);
            hachi_sampler *smp = sampler(sampled);
            hachi_spec_params p = hachi_spec_default_params();
            p.n_draft = 4;
            p.adaptive = c > 0;
            p.forward_cost = costs[c];
            hachi_spec *sp = s && smp ? spec_with(m, s, smp, &p) : NULL;
            if (!sp) { hachi_sampler_free(smp); hachi_session_free(s); break; }
            CHECK(hachi_session_eval(s, prompt, n_prompt, NULL) == HACHI_OK && hachi_spec_feed(sp, prompt, n_prompt) == HACHI_OK);
            decode_checked(sp, m, N, ref, n_ref, what);
            const hachi_spec_stats *ss = hachi_spec_get_stats(sp);
            if (c == 0) fixed = *ss;
            if (c == 1)
                CHECKF(ss->forwards == fixed.forwards && ss->drafted == fixed.drafted && ss->accepted == fixed.accepted,
                       "%s: %lld forwards, %lld drafted, %lld accepted; fixed: %lld, %lld, %lld", what,
                       (long long)ss->forwards, (long long)ss->drafted, (long long)ss->accepted,
                       (long long)fixed.forwards, (long long)fixed.drafted, (long long)fixed.accepted);
            if (c == 2)
                CHECKF(ss->drafted == 1 && ss->draft_forwards == 1,
                       "%s: %lld drafted in %lld of %lld forwards", what, (long long)ss->drafted,
                       (long long)ss->draft_forwards, (long long)ss->forwards);
            hachi_spec_free(sp);
            hachi_sampler_free(smp);
            hachi_session_free(s);
        }
    }
    hachi_model_free(m);
}

/* Draft steps (hachi_session_eval_draft) really attend page-sparse and leave no trace: on
 * stories260K (every layer full attention) after 300 tokens, a draft step at budget 48 (3 pages)
 * gives other logits than a dense step, one at budget 512 (all 19 pages) the dense step's
 * exactly; after a draft step and a rewind, the dense step gives bitwise the logits of a session
 * that never drafted (the K/V rows and page metadata rewritten). */
TEST(spec_self_draft_step) {
    hachi_model *m = stories(false, NULL);
    if (!m) SKIP("stories260K absent");
    enum { N = 300 };
    int32_t toks[N + 1];
    uint64_t x = 1;
    for (int i = 0; i <= N; i++) { x = x * 6364136223846793005ULL + 1442695040888963407ULL; toks[i] = 3 + (int32_t)(x >> 33) % 500; }
    const size_t nv = (size_t)hachi_model_n_vocab(m);
    float *dense = malloc(nv * sizeof *dense), *lg = malloc(nv * sizeof *lg);
    hachi_session *ref = session(m), *s48 = self_session(m, 48), *s512 = self_session(m, 512);
    if (!ref || !s48 || !s512 || !dense || !lg) { CHECK(0); goto out; }
    CHECK(hachi_session_draft_budget(ref) == 0 && hachi_session_draft_budget(s48) == 48);
    CHECK(hachi_session_eval_draft(ref, toks, 1) == HACHI_ERR_INVALID_ARG && strstr(hachi_last_error(), "draft budget"));
    CHECK(hachi_session_eval(ref, toks, N + 1, NULL) == HACHI_OK);
    memcpy(dense, hachi_session_logits(ref), nv * sizeof *dense);
    hachi_session *ss[2] = {s48, s512};
    for (int i = 0; i < 2; i++) {
        hachi_session *s = ss[i];
        CHECK(hachi_session_eval(s, toks, N, NULL) == HACHI_OK);
        CHECK(hachi_session_eval_draft(s, toks + N, 1) == HACHI_OK && hachi_session_pos(s) == N + 1);
        memcpy(lg, hachi_session_logits(s), nv * sizeof *lg);
        const bool equal = !memcmp(lg, dense, nv * sizeof *lg);
        CHECKF(i ? equal : !equal, "budget %d: a draft step's logits %s the dense step's", i ? 512 : 48,
               equal ? "equal" : "differ from");
        CHECK(hachi_session_rewind(s, N) == HACHI_OK && hachi_session_eval(s, toks + N, 1, NULL) == HACHI_OK);
        CHECKF(!memcmp(hachi_session_logits(s), dense, nv * sizeof *lg), "budget %d: the dense step after a draft "
               "step and a rewind differs from a session that never drafted", i ? 512 : 48);
    }
out:
    free(dense);
    free(lg);
    hachi_session_free(ref);
    hachi_session_free(s48);
    hachi_session_free(s512);
    hachi_model_free(m);
}

/* Self-speculation gives plain decoding's tokens, greedy and sampled, with 1, 4 and 15 drafts
 * at a budget of 48 keys (the drafts then differ from the target's picks now and then), and
 * drafts are kept; AUTO on a session with a draft budget drafts with it too; the steps
 * allocate nothing. Sampled drafts (sample_drafts) run and keep some. */
TEST(spec_self_same_tokens_as_plain) {
    hachi_model *m = stories(false, NULL);
    if (!m) SKIP("stories260K absent");
    enum { N = 200 };
    int32_t prompt[16], n_prompt = 0, ref[N];
    static const float flat[5] = {1, 1.1f, 1.2f, 1.3f, 1.4f};
    for (int sampled = 0; sampled < 2; sampled++) {
        const int n_ref = plain_reference(m, sampled, N, prompt, &n_prompt, ref);
        CHECK(n_ref == N);
        for (int c = 0; c < 5; c++) {
            const int drafts[5] = {1, 4, HACHI_DRAFT_MAX, 4, 4};
            hachi_spec_params p = hachi_spec_default_params();
            p.drafter = c < 4 ? HACHI_DRAFTER_SELF : HACHI_DRAFTER_AUTO;
            p.n_draft = drafts[c];
            p.sample_drafts = c == 3;
            p.forward_cost = c == 4 ? flat : NULL;
            if (c == 3 && !sampled) continue;
            char what[80];
            snprintf(what, sizeof what, "%s, %s, n_draft %d", sampled ? "sampled" : "greedy",
                     c == 4 ? "auto" : c == 3 ? "self, sampled drafts" : "self", drafts[c]);
            hachi_session *s = self_session(m, 48);
            hachi_sampler *smp = sampler(sampled);
            hachi_spec *sp = s && smp ? spec_with(m, s, smp, &p) : NULL;
            if (!sp) { hachi_sampler_free(smp); hachi_session_free(s); break; }
            CHECK(hachi_session_eval(s, prompt, n_prompt, NULL) == HACHI_OK);
            CHECK(hachi_spec_feed(sp, prompt, n_prompt) == HACHI_OK);
            if (c == 3) {   /* rejection sampling: plain decoding's distribution, not its tokens */
                int32_t got[N];
                hachi_status st;
                CHECK(spec_decode(sp, m, N, 0, got, &st) == N && st == HACHI_OK);
            } else {
                decode_checked(sp, m, N, ref, n_ref, what);
            }
            const hachi_spec_stats *ss = hachi_spec_get_stats(sp);
            CHECKF(ss->drafted > 0 && ss->accepted > 0 && ss->accepted <= ss->drafted &&
                   ss->forwards + ss->accepted == N - 1 && (c < 4 || ss->self_forwards > 0),
                   "%s: %lld drafted, %lld accepted, %lld forwards (%lld self)", what, (long long)ss->drafted,
                   (long long)ss->accepted, (long long)ss->forwards, (long long)ss->self_forwards);
            hachi_spec_free(sp);
            hachi_sampler_free(smp);
            hachi_session_free(s);
        }
    }
    hachi_model_free(m);
}

/* Parameters and misuse: bad kinds, lengths and n-grams refused with a message and nothing
 * made; a step before anything was evaluated or for no tokens, a feed of more tokens than
 * the session holds; NULL-safe free and stats. */
TEST(spec_bad_params) {
    hachi_model *m = stories(false, NULL);
    if (!m) SKIP("stories260K absent");
    hachi_session *s = session(m);
    hachi_sampler *smp = sampler(false);
    hachi_spec *sp = (hachi_spec *)1;
    hachi_spec_params p = hachi_spec_default_params();
    CHECK(p.drafter == HACHI_DRAFTER_LOOKUP && p.n_draft >= 1 && p.n_draft <= HACHI_DRAFT_MAX);
    const struct { hachi_drafter kind; int n_draft, lo, hi; } bad[] = {
        {HACHI_DRAFTER_LOOKUP, 0, 2, 4}, {HACHI_DRAFTER_LOOKUP, HACHI_DRAFT_MAX + 1, 2, 4},
        {HACHI_DRAFTER_LOOKUP, 4, 0, 4}, {HACHI_DRAFTER_LOOKUP, 4, 3, 2}, {(hachi_drafter)7, 4, 2, 4},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = (hachi_spec_params){.drafter = bad[i].kind, .n_draft = bad[i].n_draft, .ngram_min = bad[i].lo,
                                .ngram_max = bad[i].hi};
        CHECKF(hachi_spec_create(m, s, smp, &p, &sp) == HACHI_ERR_INVALID_ARG && !sp && hachi_last_error()[0],
               "params %zu accepted", i);
        sp = (hachi_spec *)1;
    }
    p = (hachi_spec_params){.drafter = HACHI_DRAFTER_SELF, .n_draft = 3};   /* a session without draft steps */
    CHECK(hachi_spec_create(m, s, smp, &p, &sp) == HACHI_ERR_INVALID_ARG && !sp && strstr(hachi_last_error(), "draft_budget"));
    sp = (hachi_spec *)1;
    const int32_t bad_budgets[] = {16, 40, 100, 16400};
    for (size_t i = 0; i < sizeof bad_budgets / sizeof bad_budgets[0]; i++) {
        hachi_session_params sp2 = hachi_session_default_params();
        sp2.draft_budget = bad_budgets[i];
        hachi_session *s2 = (hachi_session *)1;
        CHECKF(hachi_session_create(m, &sp2, &s2) == HACHI_ERR_INVALID_ARG && !s2 &&
               strstr(hachi_last_error(), "draft budget"), "draft budget %d accepted", (int)bad_budgets[i]);
    }
    static const float costs[3] = {1, 0, 2};   /* adaptive with a cost that is not > 0 */
    p = hachi_spec_default_params();
    p.n_draft = 2;
    p.adaptive = true;
    p.forward_cost = costs;
    CHECK(hachi_spec_create(m, s, smp, &p, &sp) == HACHI_ERR_INVALID_ARG && !sp && strstr(hachi_last_error(), "forward_cost[1]"));
    sp = (hachi_spec *)1;
    CHECK(hachi_spec_create(m, NULL, smp, NULL, &sp) == HACHI_ERR_INVALID_ARG && !sp);
    hachi_sampler *wide = NULL;   /* a sampler over another vocabulary would read past the logits */
    CHECK(hachi_sampler_create(NULL, 4 * hachi_model_n_vocab(m), &wide) == HACHI_OK);
    CHECK(hachi_spec_create(m, s, wide, NULL, &sp) == HACHI_ERR_INVALID_ARG && !sp && strstr(hachi_last_error(), "sampler"));
    hachi_sampler_free(wide);
    CHECK(hachi_spec_step(NULL, 4, NULL, NULL) == HACHI_ERR_INVALID_ARG && hachi_spec_flush(NULL) == HACHI_ERR_INVALID_ARG);
    p = (hachi_spec_params){.drafter = HACHI_DRAFTER_NONE};   /* n-grams and length unused */
    CHECK(hachi_spec_create(m, s, smp, &p, &sp) == HACHI_OK && sp);
    int32_t out[HACHI_SPEC_STEP_MAX], n = -1, bos = hachi_model_bos(m);
    CHECK(hachi_spec_step(sp, 4, out, &n) == HACHI_ERR_INVALID_ARG && n == 0);   /* nothing evaluated */
    CHECK(hachi_spec_feed(sp, &bos, 1) == HACHI_ERR_INVALID_ARG);               /* the session holds 0 */
    CHECK(hachi_session_eval(s, &bos, 1, NULL) == HACHI_OK && hachi_spec_feed(sp, &bos, 1) == HACHI_OK);
    CHECK(hachi_spec_step(sp, 0, out, &n) == HACHI_ERR_INVALID_ARG && n == 0);
    CHECK(hachi_spec_step(sp, 4, out, &n) == HACHI_OK && n == 1);
    hachi_spec_free(sp);
    hachi_spec_free(NULL);
    CHECK(hachi_spec_get_stats(NULL)->forwards == 0);
    hachi_sampler_free(smp);
    hachi_session_free(s);
    hachi_model_free(m);
}
