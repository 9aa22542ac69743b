/* Tests of the Gemma 4 assistant drafter (src/mtp.c) and its use in hachi_spec: the oracle's
 * random-weight assistant for gemma4-tiny against llama.cpp's and the float64 reference's
 * drafts and first-step logits; refusals of mismatched pairs; the trained gemma4-micro
 * assistant in the decode loop (greedy and deterministic-draft sampling give plain decoding's
 * tokens; sampled drafts give its distribution, by a chi-square test). */
#include <math.h>
#include "test.h"
#include "micro.h"
#include "hachi.h"
#include "../src/gguf.h"
#include "../src/mtp.h"
#include "../src/session.h"
#include "../src/util.h"

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static hachi_model *load(const char *path) {
    hachi_model *m = NULL;
    CHECKF(hachi_model_load(path, NULL, &m) == HACHI_OK, "load %s: %s", path, hachi_last_error());
    return m;
}

static hachi_session *session_f32(const hachi_model *m, int threads) {
    hachi_session_params p = hachi_session_default_params();
    p.kv_type = HACHI_KV_F32;
    p.n_threads = threads;
    hachi_session *s = NULL;
    CHECKF(hachi_session_create(m, &p, &s) == HACHI_OK, "session: %s", hachi_last_error());
    return s;
}

/* ---- the oracle: gemma4-tiny + gemma4-tiny-assistant ------------------------------------ */

/* For P = 24..63: the target evaluates tokens[0..P) in one batch (f32 KV), the drafter takes
 * tokens[P] and the target's hidden row of P - 1, three greedy steps at position P. Every
 * drafted token equals llama.cpp's and the float64 reference's, the first step's logits are
 * within 1e-3 of the reference's (and 0.05 of llama.cpp's, whose fp16 GELU table moves them by
 * up to 0.025 per the oracle README). */
TEST(mtp_oracle_tiny) {
    NEED_SHARED(tpath, "oracle/gemma4-tiny.gguf");
    NEED_SHARED(apath, "oracle/gemma4-tiny-assistant.gguf");
    NEED_SHARED(kpath, "oracle/gemma4-tiny.tokens.txt");
    const char *dpath[2] = {test_shared_path("oracle/gemma4-tiny-assistant.ref64.drafts.txt"),
                            test_shared_path("oracle/gemma4-tiny-assistant.llamacpp.drafts.txt")};
    const char *lpath[2] = {test_shared_path("oracle/gemma4-tiny-assistant.ref64.logits.f32"),
                            test_shared_path("oracle/gemma4-tiny-assistant.llamacpp.logits.f32")};
    if (!dpath[0] || !dpath[1] || !lpath[0] || !lpath[1]) SKIP("oracle assistant fixtures absent");
    enum { N_P = 40, P0 = 24, V = 1024 };
    int32_t tokens[80], drafts[2][N_P][4];
    static float ref[2][N_P * V];
    FILE *f = fopen(kpath, "r");
    int nt = 0;
    while (f && nt < 80 && fscanf(f, "%d", &tokens[nt]) == 1) nt++;   // NOLINT(cert-err34-c): a fixture
    if (f) fclose(f);
    CHECK(nt == 80);
    for (int w = 0; w < 2; w++) {
        f = fopen(dpath[w], "r");
        int got = 0;
        for (int i = 0; f && i < N_P; i++)
            got += fscanf(f, "%d %d %d %d", &drafts[w][i][0], &drafts[w][i][1], &drafts[w][i][2],   // NOLINT(cert-err34-c)
                          &drafts[w][i][3]) == 4;
        if (f) fclose(f);
        CHECK(got == N_P);
        f = fopen(lpath[w], "rb");
        CHECK(f && fread(ref[w], sizeof(float), (size_t)N_P * V, f) == (size_t)N_P * V);
        if (f) fclose(f);
    }
    hachi_model *t = load(tpath), *a = load(apath);
    if (!t || !a || nt != 80) { hachi_model_free(t); hachi_model_free(a); return; }
    CHECKF(hachi_assistant_check(t, a) == HACHI_OK, "check: %s", hachi_last_error());
    double worst[2] = {0, 0};
    int same[2] = {0, 0};
    for (int i = 0; i < N_P; i++) {
        const int P = P0 + i;
        hachi_session *s = session_f32(t, 1);
        hachi_mtp *d = NULL;
        if (!s || hachi_mtp_create(a, s, &d) != HACHI_OK) { CHECKF(0, "mtp: %s", hachi_last_error()); hachi_session_free(s); break; }
        CHECK(hachi_session_eval(s, tokens, P, NULL) == HACHI_OK);
        CHECK(hachi_mtp_begin(d));
        int32_t tok = tokens[P], out[3];
        for (int k = 0; k < 3; k++) {
            const float *lg = hachi_mtp_step(d, tok);
            if (k == 0)
                for (int w = 0; w < 2; w++)
                    for (int v = 0; v < V; v++) {   /* no fmax: the aarch64 cross gcc's vectorizer crashes on it */
                        const double dv = fabs((double)lg[v] - ref[w][(size_t)i * V + v]);
                        if (dv > worst[w]) worst[w] = dv;
                    }
            out[k] = tok = argmax(lg, V);
        }
        for (int w = 0; w < 2; w++) {
            CHECKF(drafts[w][i][0] == P, "drafts line %d is for P %d", i, drafts[w][i][0]);
            for (int k = 0; k < 3; k++) {
                CHECKF(out[k] == drafts[w][i][k + 1], "P %d step %d: drafted %d, %s %d", P, k + 1, out[k],
                       w ? "llama.cpp" : "ref64", drafts[w][i][k + 1]);
                same[w] += out[k] == drafts[w][i][k + 1];
            }
        }
        hachi_mtp_free(d);
        hachi_session_free(s);
    }
    printf("  mtp oracle: drafts equal %d/120 (ref64), %d/120 (llama.cpp); first-step logits max |d| %.2e (ref64), "
           "%.2e (llama.cpp)\n", same[0], same[1], worst[0], worst[1]);
    CHECKF(worst[0] < 1e-3, "first-step logits %.3g from ref64", worst[0]);
    CHECKF(worst[1] < 0.05, "first-step logits %.3g from llama.cpp", worst[1]);
    hachi_model_free(t);
    hachi_model_free(a);
}

/* Pairs that do not fit are refused at load with both shapes named; an assistant has no session
 * of its own and is no target; a spec without its assistant is refused. */
TEST(mtp_refusals) {
    NEED_SHARED(tpath, "oracle/gemma4-tiny.gguf");
    NEED_SHARED(apath, "oracle/gemma4-tiny-assistant.gguf");
    NEED_SHARED(mpath, "models/gemma4-micro.gguf");
    NEED_SHARED(mapath, "models/gemma4-micro-assistant.gguf");
    hachi_model *t = load(tpath), *a = load(apath), *m = load(mpath), *ma = load(mapath);
    if (!t || !a || !m || !ma) goto out;
    CHECK(hachi_assistant_check(m, a) == HACHI_ERR_INVALID_ARG);   /* widths 128 both, vocabularies 512 vs 1024 */
    CHECKF(strstr(hachi_last_error(), "1024") && strstr(hachi_last_error(), "512"), "%s", hachi_last_error());
    CHECK(hachi_assistant_check(t, ma) == HACHI_ERR_INVALID_ARG);
    CHECK(hachi_assistant_check(a, ma) == HACHI_ERR_UNSUPPORTED);   /* an assistant is no target */
    CHECK(hachi_assistant_check(m, m) == HACHI_ERR_UNSUPPORTED);    /* a target is no assistant */
    CHECKF(strstr(hachi_last_error(), "gemma4-assistant"), "%s", hachi_last_error());
    hachi_session *s = NULL;
    CHECK(hachi_session_create(ma, NULL, &s) == HACHI_ERR_UNSUPPORTED && !s);
    s = session_f32(m, 1);
    hachi_sampler *smp = NULL;
    hachi_sampler_create(NULL, 512, &smp);
    hachi_spec_params p = hachi_spec_default_params();
    p.drafter = HACHI_DRAFTER_ASSISTANT;
    hachi_spec *sp = NULL;
    CHECK(hachi_spec_create(m, s, smp, &p, &sp) == HACHI_ERR_INVALID_ARG && !sp);   /* no assistant */
    p.assistant = a;
    CHECK(hachi_spec_create(m, s, smp, &p, &sp) == HACHI_ERR_INVALID_ARG && !sp);   /* another target's */
    p.assistant = ma;
    p.n_draft = 0;
    CHECK(hachi_spec_create(m, s, smp, &p, &sp) == HACHI_ERR_INVALID_ARG && !sp);
    p.n_draft = 3;
    CHECK(hachi_spec_create(m, s, smp, &p, &sp) == HACHI_OK && sp);
    hachi_spec_free(sp);
    hachi_sampler_free(smp);
    hachi_session_free(s);
out:
    hachi_model_free(t);
    hachi_model_free(a);
    hachi_model_free(m);
    hachi_model_free(ma);
}

/* ---- the trained gemma4-micro assistant in the decode loop ------------------------------- */

static hachi_sampler *sampler_of(float temp, uint64_t seed) {
    hachi_sampler_params p = hachi_sampler_default_params();
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 0.95f;
    p.min_p = 0;
    p.seed = seed;
    hachi_sampler *smp = NULL;
    CHECK(hachi_sampler_create(&p, 512, &smp) == HACHI_OK);
    return smp;
}

static hachi_spec *assistant_spec(const hachi_model *m, hachi_session *s, hachi_sampler *smp, const hachi_model *a,
                                  bool sample_drafts) {
    hachi_spec_params p = hachi_spec_default_params();
    p.drafter = a ? HACHI_DRAFTER_ASSISTANT : HACHI_DRAFTER_NONE;
    p.assistant = a;
    p.n_draft = a ? 3 : 0;
    p.sample_drafts = sample_drafts;
    hachi_spec *sp = NULL;
    CHECKF(hachi_spec_create(m, s, smp, &p, &sp) == HACHI_OK, "spec: %s", hachi_last_error());
    return sp;
}

/* n tokens (fewer after an end of generation) from sp, each step asked for what is left. */
static int decode(hachi_spec *sp, const hachi_model *m, int n, int32_t *out) {
    int got = 0;
    while (got < n) {
        int32_t buf[HACHI_SPEC_STEP_MAX], k = 0;
        if (hachi_spec_step(sp, n - got, buf, &k) != HACHI_OK || k < 1) { CHECKF(0, "step: %s", hachi_last_error()); break; }
        memcpy(out + got, buf, (size_t)k * sizeof *buf);
        got += k;
        if (hachi_model_is_eog(m, buf[k - 1])) break;
    }
    return got;
}

/* The first 1000 bytes after the first newline of a held-out text, as ../shared/models/README.md's
 * llama-server measurement takes them; its token ids (malloc'd, BOS first). */
static int32_t *heldout_prompt(const hachi_model *m, const char *name, int *n) {
    char rel[64];
    snprintf(rel, sizeof rel, "models/heldout/heldout_%s.txt", name);
    const char *path = test_shared_path(rel);
    char *text = path ? test_read_file(path, NULL) : NULL;
    const char *nl = text ? strchr(text, '\n') : NULL;
    if (!nl) { free(text); return NULL; }
    size_t len = HACHI_MIN(strlen(nl + 1), (size_t)1000);
    int32_t *ids = malloc(sizeof *ids * 2048);
    *n = 0;
    if (ids) hachi_tokenize(m, nl + 1, len, true, true, ids, 2048, n);
    free(text);
    return ids;
}

/* Greedy decoding with the trained assistant (3 drafts) gives plain decoding's tokens on the
 * README's workloads (passkey prompt 0, 64 tokens; the held-out story text, 256), as does a
 * sampled run (temperature 1, top-p 0.95) with greedy drafts; drafts are kept; the steps
 * allocate nothing. Prints the acceptance (llama.cpp's on these prompts: stories 0.597 / 2.79,
 * passkey 0.514 / 2.48). */
TEST(mtp_micro_same_tokens) {
    NEED_SHARED(apath, "models/gemma4-micro-assistant.gguf");
    hachi_model *m = micro_load();
    if (!m) SKIP("gemma4-micro absent");
    hachi_model *a = load(apath);
    const bool quick = getenv("HACHI_TEST_QUICK") != NULL;
    int32_t *prompt[2] = {NULL, NULL}, np[2] = {0, 0}, key;
    prompt[0] = micro_passkey_prompt(0, &np[0], &key);
    prompt[1] = heldout_prompt(m, "stories", &np[1]);
    const int gen[2] = {64, quick ? 64 : 256};
    const char *names[2] = {"passkey 0", "held-out stories"};
    for (int w = 0; a && w < 2; w++) {
        if (!prompt[w]) { CHECKF(0, "%s: prompt absent", names[w]); continue; }
        for (int sampled = 0; sampled < (quick ? 1 : 2); sampled++) {
            int32_t ref[256] = {0}, got[256] = {0};
            int n_ref = 0, n_got = 0;
            hachi_spec_stats st = {0};
            for (int pass = 0; pass < 2; pass++) {
                hachi_session *s = micro_session(m, HACHI_KV_F16, 2048, 1, 0);
                hachi_sampler *smp = sampler_of(sampled ? 1.0f : 0.0f, 11);
                hachi_spec *sp = s && smp ? assistant_spec(m, s, smp, pass ? a : NULL, false) : NULL;
                if (sp) {
                    CHECK(hachi_session_eval(s, prompt[w], np[w], NULL) == HACHI_OK);
                    CHECK(hachi_spec_feed(sp, prompt[w], np[w]) == HACHI_OK);
                    const uint64_t allocs = hachi_alloc_count();
                    int n = decode(sp, m, gen[w], pass ? got : ref);
                    CHECKF(hachi_alloc_count() == allocs, "%s: %llu allocations while decoding", names[w],
                           (unsigned long long)(hachi_alloc_count() - allocs));
                    if (pass) { n_got = n; st = *hachi_spec_get_stats(sp); } else n_ref = n;
                }
                hachi_spec_free(sp);
                hachi_sampler_free(smp);
                hachi_session_free(s);
            }
            int i = 0;
            while (i < n_ref && i < n_got && ref[i] == got[i]) i++;
            CHECKF(n_ref == gen[w] && n_got == n_ref && i == n_ref, "%s %s: %d tokens vs %d plain, first difference at %d",
                   names[w], sampled ? "sampled" : "greedy", n_got, n_ref, i);
            CHECKF(st.accepted > st.drafted / 8, "%s: %lld of %lld drafts kept", names[w], (long long)st.accepted,
                   (long long)st.drafted);
            printf("  mtp %s, %s: %d tokens, %lld drafted, %lld accepted (%.3f), mean accepted length %.2f, "
                   "%lld forwards\n", names[w], sampled ? "temp 1 top-p 0.95, greedy drafts" : "greedy", n_got,
                   (long long)st.drafted, (long long)st.accepted, st.drafted ? (double)st.accepted / st.drafted : 0.0,
                   st.draft_forwards ? 1.0 + (double)st.accepted / st.draft_forwards : 0.0, (long long)st.forwards);
        }
    }
    free(prompt[0]);
    free(prompt[1]);
    hachi_model_free(a);
    hachi_model_free(m);
}

/* AUTO (prompt lookup where it matches, else the trained assistant; adaptive lengths) gives plain
 * decoding's tokens on passkey prompt 0 and the held-out story (64 greedy tokens each), with the
 * forward costs measured, and with free verification (flat costs), where both drafters draft:
 * lookup the passkey's digits, the assistant the rest. */
TEST(mtp_auto_same_tokens) {
    NEED_SHARED(apath, "models/gemma4-micro-assistant.gguf");
    hachi_model *m = micro_load();
    if (!m) SKIP("gemma4-micro absent");
    hachi_model *a = load(apath);
    int32_t *prompt[2] = {NULL, NULL}, np[2] = {0, 0}, key;
    prompt[0] = micro_passkey_prompt(0, &np[0], &key);
    prompt[1] = heldout_prompt(m, "stories", &np[1]);
    static const float flat[4] = {1, 1, 1, 1};
    for (int w = 0; a && w < 2; w++) {
        if (!prompt[w]) { CHECKF(0, "prompt %d absent", w); continue; }
        int32_t ref[64] = {0}, got[64] = {0};
        int n_ref = 0;
        for (int pass = 0; pass < 3; pass++) {   /* plain, AUTO measured, AUTO flat */
            hachi_session *s = micro_session(m, HACHI_KV_F16, 2048, 1, 0);
            hachi_sampler *smp = sampler_of(0.0f, 11);
            hachi_spec_params p = hachi_spec_default_params();
            p.drafter = pass ? HACHI_DRAFTER_AUTO : HACHI_DRAFTER_NONE;
            p.assistant = a;
            p.n_draft = 3;
            p.forward_cost = pass == 2 ? flat : NULL;
            hachi_spec *sp = NULL;
            CHECKF(s && smp && hachi_spec_create(m, s, smp, &p, &sp) == HACHI_OK, "spec: %s", hachi_last_error());
            if (sp) {
                CHECK(hachi_session_eval(s, prompt[w], np[w], NULL) == HACHI_OK &&
                      hachi_spec_feed(sp, prompt[w], np[w]) == HACHI_OK);
                const int n = decode(sp, m, 64, pass ? got : ref);
                if (!pass) n_ref = n;
                int i = 0;
                while (pass && i < n && i < n_ref && got[i] == ref[i]) i++;
                CHECKF(!pass || (n == n_ref && i == n), "workload %d pass %d: %d tokens vs %d plain, first difference at %d",
                       w, pass, n, n_ref, i);
                const hachi_spec_stats *ss = hachi_spec_get_stats(sp);
                if (pass == 2)
                    CHECKF(ss->draft_forwards > ss->lookup_forwards && (w == 1 || ss->lookup_forwards > 0) &&
                           ss->accepted > 0,
                           "workload %d, flat costs: %lld draft forwards, %lld from lookup, %lld accepted", w,
                           (long long)ss->draft_forwards, (long long)ss->lookup_forwards, (long long)ss->accepted);
            }
            hachi_spec_free(sp);
            hachi_sampler_free(smp);
            hachi_session_free(s);
        }
        CHECK(n_ref == 64);
    }
    free(prompt[0]);
    free(prompt[1]);
    hachi_model_free(a);
    hachi_model_free(m);
}

/* Q(a, x), the regularized upper incomplete gamma function (Numerical Recipes' series and
 * continued fraction): the chi-square p-value of statistic 2x with 2a degrees of freedom. */
static double gamma_q(double a, double x) {
    if (x <= 0) return 1.0;
    const double lg = lgamma(a);
    if (x < a + 1) {
        double sum = 1.0 / a, del = sum, ap = a;
        for (int n = 0; n < 1000 && fabs(del) > fabs(sum) * 1e-15; n++) sum += del *= x / ++ap;
        return 1.0 - sum * exp(-x + a * log(x) - lg);
    }
    double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
    for (int i = 1; i < 1000; i++) {
        const double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < 1e-300) d = 1e-300;
        c = b + an / c;
        if (fabs(c) < 1e-300) c = 1e-300;
        d = 1 / d;
        const double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return exp(-x + a * log(x) - lg) * h;
}

/* The chi-square test of homogeneity of two samples over categories keys[0..n) (the counts of
 * each key in a and b): categories with fewer than 10 draws in both together are pooled into
 * one. Returns the p-value; *df its degrees of freedom. */
typedef struct tally { uint64_t key; int a, b; } tally;
static double chi2_homogeneity(const tally *t, int n, int na, int nb, int *df) {
    double stat = 0, pa = 0, pb = 0;
    int cats = 0;
    const double fa = (double)na / (na + nb), fb = (double)nb / (na + nb);
    for (int i = 0; i <= n; i++) {
        double oa, ob;
        if (i < n) {
            if (t[i].a + t[i].b < 10) { pa += t[i].a; pb += t[i].b; continue; }
            oa = t[i].a;
            ob = t[i].b;
        } else {
            if (pa + pb == 0) break;
            oa = pa;
            ob = pb;
        }
        const double tot = oa + ob, ea = tot * fa, eb = tot * fb;
        stat += (oa - ea) * (oa - ea) / ea + (ob - eb) * (ob - eb) / eb;
        cats++;
    }
    *df = cats - 1;
    return *df > 0 ? gamma_q(*df / 2.0, stat / 2) : 1.0;
}

static int tally_add(tally *t, int n, uint64_t key, bool b) {
    int i = 0;
    while (i < n && t[i].key != key) i++;
    if (i == n) t[n++] = (tally){key, 0, 0};
    if (b) t[i].b++; else t[i].a++;
    return n;
}

/* Sampled drafts (rejection sampling) give plain decoding's distribution: at temperature 1 and
 * top-p 0.95, the first 3 tokens after a held-out story prompt (its first 121 tokens, where the
 * drafts are kept about half the time) over N seeds of each (disjoint seeds), plain against
 * sample_drafts with the assistant. Chi-square tests of homogeneity of each token's distribution
 * and of the 3-token sequences (categories of fewer than 10 draws pooled) must all give
 * p >= 0.001. N = 1000 (150 when HACHI_TEST_QUICK); HACHI_MTP_SEEDS=N for the long run. */
TEST(mtp_micro_sampled_distribution) {
    NEED_SHARED(apath, "models/gemma4-micro-assistant.gguf");
    hachi_model *m = micro_load();
    if (!m) SKIP("gemma4-micro absent");
    hachi_model *a = load(apath);
    int np = 0;
    int32_t *prompt = heldout_prompt(m, "stories", &np);
    const char *env = getenv("HACHI_MTP_SEEDS");
    const int N = env ? (int)strtol(env, NULL, 10) : getenv("HACHI_TEST_QUICK") ? 150 : 1000;
    np = HACHI_MIN(np, 121);   /* a short prompt: the test is in the sampling, not the context */
    tally *t[4];               /* tokens 1, 2, 3, the sequence */
    int nt[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) t[i] = calloc((size_t)2 * N + 1, sizeof **t);
    hachi_spec_stats st = {0};
    for (int arm = 0; a && prompt && t[0] && t[1] && t[2] && t[3] && N > 0 && arm < 2; arm++) {
        hachi_session *s = micro_session(m, HACHI_KV_F16, 2048, 1, 0);
        if (!s || hachi_session_eval(s, prompt, np, NULL) != HACHI_OK) { CHECK(0); hachi_session_free(s); break; }
        for (int i = 0; i < N; i++) {
            hachi_sampler *smp = sampler_of(1.0f, 1 + (uint64_t)i + (uint64_t)arm * N);
            CHECK(hachi_session_rewind(s, np - 1) == HACHI_OK && hachi_session_eval(s, prompt + np - 1, 1, NULL) == HACHI_OK);
            hachi_spec *sp = smp ? assistant_spec(m, s, smp, arm ? a : NULL, true) : NULL;
            int32_t out[3] = {0, 0, 0};
            if (sp && hachi_spec_feed(sp, prompt, np) == HACHI_OK) decode(sp, m, 3, out);
            if (sp && arm) {
                const hachi_spec_stats *x = hachi_spec_get_stats(sp);
                st.drafted += x->drafted;
                st.accepted += x->accepted;
            }
            for (int k = 0; k < 3; k++) nt[k] = tally_add(t[k], nt[k], (uint64_t)out[k], arm);
            nt[3] = tally_add(t[3], nt[3], (uint64_t)out[0] << 40 | (uint64_t)out[1] << 20 | (uint64_t)out[2], arm);
            hachi_spec_free(sp);
            hachi_sampler_free(smp);
        }
        hachi_session_free(s);
    }
    int df[4];
    double p[4], pmin = 1;
    for (int k = 0; k < 4; k++) pmin = fmin(pmin, p[k] = chi2_homogeneity(t[k], nt[k], N, N, &df[k]));
    printf("  mtp sampled drafts vs plain, %d seeds each: p = %.4f %.4f %.4f (tokens 1, 2, 3; df %d %d %d), "
           "%.4f (sequences, df %d, %d distinct); drafts kept %lld of %lld (%.3f)\n", N, p[0], p[1], p[2], df[0], df[1],
           df[2], p[3], df[3], nt[3], (long long)st.accepted, (long long)st.drafted,
           st.drafted ? (double)st.accepted / st.drafted : 0.0);
    CHECKF(df[0] > 0 && df[1] > 0 && df[2] > 0 && df[3] > 0, "too few categories");
    CHECKF(pmin >= 1e-3, "the distributions differ: smallest p = %.3g", pmin);
    CHECK(st.accepted > 0 && st.accepted < st.drafted);
    for (int k = 0; k < 4; k++) free(t[k]);
    free(prompt);
    hachi_model_free(a);
    hachi_model_free(m);
}

/* ---- the centroid head, on a synthetic file ----------------------------------------------- */

/* Every key of g into w (the value types an assistant file has); false on one it cannot copy. */
static bool copy_keys(const hachi_gguf *g, hachi_gguf_writer *w) {
    for (int64_t k = 0; k < hachi_gguf_n_kv(g); k++) {
        const hachi_status st = hachi_gguf_copy_kv(w, g, k);
        CHECKF(st == HACHI_OK, "copy %s: %s", hachi_gguf_key_at(g, k), hachi_last_error());
        if (st) return false;
    }
    return true;
}

/* The trained micro assistant with a centroid head added: 16 clusters of 32 tokens (a seeded
 * permutation of the vocabulary), each centroid the mean of its tokens' head rows, top 4 kept.
 * A draft step then gives logits to the kept clusters' 128 tokens only, bit for bit the dense
 * head's there, -inf elsewhere; greedy decoding through it still gives plain decoding's tokens. */
/* g's tensors (the assistant's) with a centroid head of nc centroids over v tokens (ordering
 * order, top k clusters) into w (its keys copied already), written to path */
static bool centroid_file(const hachi_gguf *g, hachi_gguf_writer *w, uint32_t top, const float *cent, int64_t e,
                          int64_t nc, const int32_t *order, int64_t v, const char *path) {
    bool ok = hachi_gguf_set_u32(w, "gemma4-assistant.centroid_top_k", top) == HACHI_OK;
    for (int64_t i = 0; ok && i < hachi_gguf_n_tensors(g); i++) {
        const hachi_gguf_tensor *t = hachi_gguf_tensor_at(g, i);
        ok = hachi_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data) == HACHI_OK;
    }
    const int64_t ne_c[2] = {e, nc}, ne_o[1] = {v};
    ok = ok && hachi_gguf_add_tensor(w, "masked_embd_centroids.weight", 0, 2, ne_c, cent) == HACHI_OK &&
         hachi_gguf_add_tensor(w, "masked_embd_ordering", 26, 1, ne_o, order) == HACHI_OK &&
         hachi_gguf_writer_write(w, path) == HACHI_OK;
    CHECKF(ok, "centroid file %s: %s", path, hachi_last_error());
    return ok;
}

TEST(mtp_centroid_head) {
    NEED_SHARED(apath, "models/gemma4-micro-assistant.gguf");
    enum { V = 512, NC = 16, PER = V / NC, TOP = 4, E = 64 };
    hachi_model *m = micro_load();
    if (!m) SKIP("gemma4-micro absent");
    hachi_model *a = load(apath), *c = NULL;
    hachi_gguf *g = NULL;
    hachi_gguf_writer *w = hachi_gguf_writer_new();
    static int32_t order[V];
    static float cent[NC * E], emb[V * E];
    const char *cpath = test_tmp("mtp_centroids.gguf");
    if (!a || !w || hachi_gguf_open(apath, &g) != HACHI_OK) { CHECK(0); goto out; }
    const hachi_gguf_tensor *te = hachi_gguf_find_tensor(g, "token_embd.weight");
    CHECK(te && te->type == 0 && te->ne[0] == E && te->ne[1] == V);
    if (!te || !copy_keys(g, w)) goto out;
    memcpy(emb, te->data, sizeof emb);
    uint64_t x = 12345;
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = V - 1; i > 0; i--) {   /* Fisher-Yates with an LCG */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((x >> 33) % (uint64_t)(i + 1)), tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
    for (int k = 0; k < NC; k++)
        for (int e = 0; e < E; e++) {
            double s = 0;
            for (int j = 0; j < PER; j++) s += emb[order[k * PER + j] * E + e];
            cent[k * E + e] = (float)(s / PER);
        }
    if (!centroid_file(g, w, TOP, cent, E, NC, order, V, cpath) || !(c = load(cpath))) goto out;
    CHECK(hachi_assistant_check(m, c) == HACHI_OK);
    {   /* an ordering that names a token twice (and so another never) is refused at load */
        hachi_gguf_writer *w2 = hachi_gguf_writer_new();
        const char *dpath = test_tmp("mtp_centroids_twice.gguf");
        const int32_t keep = order[5];
        order[5] = order[4];
        hachi_model *d = NULL;
        if (w2 && copy_keys(g, w2) && centroid_file(g, w2, TOP, cent, E, NC, order, V, dpath))
            CHECKF(hachi_model_load(dpath, NULL, &d) == HACHI_ERR_FORMAT && !d && strstr(hachi_last_error(), "appears twice"),
                   "%s", hachi_last_error());
        else CHECK(0);
        order[5] = keep;
        hachi_model_free(d);
        hachi_gguf_writer_free(w2);
    }

    /* three draft steps of each on the same target state, at 8 prefixes of passkey prompt 0 */
    int np = 0, key = 0;
    int32_t *prompt = micro_passkey_prompt(0, &np, &key);
    hachi_session *s = prompt ? session_f32(m, 1) : NULL;
    hachi_mtp *dd = NULL, *dc = NULL;
    if (s && hachi_session_eval(s, prompt, np - 8, NULL) == HACHI_OK && hachi_mtp_create(a, s, &dd) == HACHI_OK &&
        hachi_mtp_create(c, s, &dc) == HACHI_OK) {
        CHECK(hachi_mtp_step_bytes(dc) < hachi_mtp_step_bytes(dd));
        int agree = 0, steps = 0;
        for (int P = np - 8; P < np; P++) {
            CHECK(hachi_mtp_begin(dd) && hachi_mtp_begin(dc));
            int32_t tok = prompt[P];
            for (int k = 0; k < 3; k++, steps++) {
                static float ld[V];
                memcpy(ld, hachi_mtp_step(dd, tok), sizeof ld);
                const float *lc = hachi_mtp_step(dc, tok);
                int finite = 0, bad = 0;
                bool whole = true;
                for (int v = 0; v < V; v++)
                    if (!isinf(lc[v])) { finite++; bad += lc[v] != ld[v]; }   /* bit for bit the dense head's */
                for (int cl = 0; cl < NC; cl++) {   /* a cluster is kept whole or not at all */
                    int kept = 0;
                    for (int j = 0; j < PER; j++) kept += !isinf(lc[order[cl * PER + j]]);
                    whole &= kept == 0 || kept == PER;
                }
                CHECKF(finite == TOP * PER && bad == 0 && whole, "P %d step %d: %d finite logits, %d differ, whole %d",
                       P, k, finite, bad, whole);
                tok = argmax(ld, V);
                agree += argmax(lc, V) == tok;   /* both continue from the dense draft */
            }
            CHECK(hachi_session_eval(s, &prompt[P], 1, NULL) == HACHI_OK);
        }
        printf("  mtp centroid head (16 clusters, top 4): %d of %d steps draft the dense head's argmax; a step reads "
               "%zu bytes of weights instead of %zu\n", agree, steps, hachi_mtp_step_bytes(dc), hachi_mtp_step_bytes(dd));
    } else CHECKF(0, "setup: %s", hachi_last_error());
    hachi_mtp_free(dd);
    hachi_mtp_free(dc);
    hachi_session_free(s);

    /* greedy decoding with the centroid head: plain decoding's tokens */
    int32_t ref[32] = {0}, got[32] = {0};
    int n_ref = 0, n_got = 0;
    for (int pass = 0; prompt && pass < 2; pass++) {
        hachi_session *s2 = micro_session(m, HACHI_KV_F16, 2048, 1, 0);
        hachi_sampler *smp = sampler_of(0.0f, 1);
        hachi_spec *sp = s2 && smp ? assistant_spec(m, s2, smp, pass ? c : NULL, false) : NULL;
        if (sp && hachi_session_eval(s2, prompt, np, NULL) == HACHI_OK && hachi_spec_feed(sp, prompt, np) == HACHI_OK) {
            if (pass) n_got = decode(sp, m, 32, got);
            else n_ref = decode(sp, m, 32, ref);
        }
        if (sp && pass) CHECK(hachi_spec_get_stats(sp)->accepted > 0);
        hachi_spec_free(sp);
        hachi_sampler_free(smp);
        hachi_session_free(s2);
    }
    CHECK(n_ref == 32 && n_got == 32 && !memcmp(ref, got, sizeof ref));
    free(prompt);
out:
    hachi_gguf_free(g);
    hachi_gguf_writer_free(w);
    hachi_model_free(c);
    hachi_model_free(a);
    hachi_model_free(m);
}

/* hachi run -md: the text of a run without it, the acceptance lines on stderr; a drafter for
 * another target, --draft 0 (with -md or alone) and --draft-sample without it are one-line errors. */
TEST(mtp_cli_run) {
    NEED_SHARED(mpath, "models/gemma4-micro.gguf");
    NEED_SHARED(apath, "models/gemma4-micro-assistant.gguf");
    NEED_SHARED(tapath, "oracle/gemma4-tiny-assistant.gguf");
    const char *bin = test_hachi_bin(), *p = "-p 'Once upon a time, there was a little' -n 48 --temp 0 -t 1";
    int rc0 = -1, rc1 = -1, rc;
    char *plain = test_sh(&rc0, "%s run -m %s %s 2>/dev/null", bin, mpath, p);
    char *md = test_sh(&rc1, "%s run -m %s -md %s %s 2>/dev/null", bin, mpath, apath, p);
    CHECKF(rc0 == 0 && rc1 == 0 && !strcmp(plain, md), "-md changed the text:\n%s\n---\n%s", md, plain);
    char *err = test_sh(&rc, "%s run -m %s -md %s %s 2>&1 >/dev/null", bin, mpath, apath, p);
    CHECKF(rc == 0 && strstr(err, "draft: acceptance ") && strstr(err, "mean accepted length"), "%s", err);
    free(err);
    err = test_sh(&rc, "%s run -m %s -md %s %s 2>&1 >/dev/null", bin, mpath, tapath, p);
    CHECKF(rc == 1 && strstr(err, "hachi run: ") && strstr(err, "1024") && strstr(err, "512") &&
               strchr(err, '\n') && !strchr(err, '\n')[1],
           "%s", err);
    free(err);
    for (int k = 0; k < 2; k++) {   /* --draft 0, with -md and alone */
        err = test_sh(&rc, "%s run -m %s %s %s --draft 0 %s 2>&1 >/dev/null", bin, mpath, k ? "" : "-md", k ? "" : apath, p);
        CHECKF(rc == 1 && strstr(err, "--draft must be in [1, ") && strstr(err, "got 0") && strchr(err, '\n') &&
                   !strchr(err, '\n')[1],
               "%s", err);
        free(err);
    }
    err = test_sh(&rc, "%s run -m %s --draft-sample %s 2>&1 >/dev/null", bin, mpath, p);
    CHECKF(rc == 1 && strstr(err, "-md"), "%s", err);
    free(err);
    /* --spec: auto (lookup, -md and self-speculation, adaptive), lookup, model and self give plain
     * decoding's text; misuse is one line */
    const char *kinds[] = {"--spec auto -md", "--spec auto --draft 8", "--spec lookup", "--spec model -md",
                           "--spec self --self-budget 48", "--spec auto --self-budget 48 -md"};
    for (int k = 0; k < 6; k++) {
        const bool with_md = strstr(kinds[k], "-md") != NULL;
        char *out = test_sh(&rc, "%s run -m %s %s %s %s 2>/dev/null", bin, mpath, kinds[k], with_md ? apath : "", p);
        CHECKF(rc == 0 && plain && !strcmp(out, plain), "%s changed the text:\n%s\n---\n%s", kinds[k], out, plain);
        free(out);
    }
    const char *bad[] = {"--spec selfish", "--spec model", "--spec lookup --draft 0", "--spec none --draft 4",
                         "--draft 16", "--spec"};
    for (int k = 0; k < 6; k++) {
        err = test_sh(&rc, "%s run -m %s %s %s 2>&1 >/dev/null", bin, mpath, p, bad[k]);
        CHECKF(rc == 1 && !strncmp(err, "hachi run: ", 11) && strchr(err, '\n') && !strchr(err, '\n')[1],
               "'%s': rc %d, %s", bad[k], rc, err);
        free(err);
    }
    free(plain);
    free(md);
}
