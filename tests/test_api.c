/* The public API's contracts beyond single calls: one model shared read-only by
 * sessions on several threads at once, the progress/abort callback of model load
 * and long evals, the version, and the per-thread last error. */
#include <pthread.h>
#include "test.h"
#include "hachi.h"

enum { N_PROMPT = 300, N_GEN = 24, N_THREADS = 3 };

static hachi_model *load_micro(void) {
    const char *path = test_shared_path("models/gemma4-micro.gguf");
    hachi_model *m = NULL;
    if (path && hachi_model_load(path, NULL, &m) != HACHI_OK) test_fail(__FILE__, __LINE__, "load: %s", hachi_last_error());
    return m;
}

static void prompt(int32_t *ids, int n) {
    for (int i = 0; i < n; i++) ids[i] = i ? 3 + (i * 37) % 500 : 1;
}

/* Greedy continuation of the prompt in a session of its own (1 worker thread). */
static hachi_status greedy(const hachi_model *m, int32_t *out) {
    hachi_session_params sp = hachi_session_default_params();
    sp.n_threads = 1;
    hachi_session *s = NULL;
    hachi_status st = hachi_session_create(m, &sp, &s);
    int32_t ids[N_PROMPT];
    prompt(ids, N_PROMPT);
    if (!st) st = hachi_session_eval(s, ids, N_PROMPT, NULL);
    for (int i = 0; !st && i < N_GEN; i++) {
        const float *lg = hachi_session_logits(s);
        int32_t best = 0;
        for (int32_t v = 1; v < hachi_model_n_vocab(m); v++) if (lg[v] > lg[best]) best = v;
        out[i] = best;
        st = hachi_session_eval(s, &best, 1, NULL);
    }
    hachi_session_free(s);
    return st;
}

typedef struct { const hachi_model *m; int32_t out[N_GEN]; hachi_status st; } worker;

static void *work(void *arg) {
    worker *w = arg;
    w->st = greedy(w->m, w->out);
    return NULL;
}

TEST(api_model_shared_by_threads) {
    hachi_model *m = load_micro();
    if (!m) SKIP("../shared/models/gemma4-micro.gguf absent");
    int32_t ref[N_GEN];
    CHECK(greedy(m, ref) == HACHI_OK);
    worker w[N_THREADS];
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        w[i].m = m;
        CHECK(pthread_create(&th[i], NULL, work, &w[i]) == 0);
    }
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        CHECKF(w[i].st == HACHI_OK, "thread %d: %s", i, hachi_status_str(w[i].st));
        CHECKF(!memcmp(w[i].out, ref, sizeof ref), "thread %d generated other tokens than a lone session", i);
    }
    hachi_model_free(m);
}

typedef struct { int calls, stop_after; double last_done, last_total; } progress_log;

static bool on_progress(void *ctx, double done, double total) {
    progress_log *p = ctx;
    p->calls++;
    CHECK(done > p->last_done && done <= total);
    p->last_done = done;
    p->last_total = total;
    return p->calls != p->stop_after;
}

TEST(api_eval_progress_and_abort) {
    hachi_model *m = load_micro();
    if (!m) SKIP("../shared/models/gemma4-micro.gguf absent");
    int32_t ids[N_PROMPT];
    prompt(ids, N_PROMPT);
    progress_log log = {0, 0, 0, 0};
    hachi_session_params sp = hachi_session_default_params();
    sp.n_batch = 64;
    sp.progress = on_progress;
    sp.progress_ctx = &log;
    hachi_session *s = NULL;
    CHECK(hachi_session_create(m, &sp, &s) == HACHI_OK);
    CHECK(hachi_session_eval(s, ids, N_PROMPT, NULL) == HACHI_OK);
    CHECKF(log.calls == 5 && log.last_done == N_PROMPT && log.last_total == N_PROMPT,
           "%d calls, last %g of %g (want 5 chunks of 64)", log.calls, log.last_done, log.last_total);
    /* a stop after the second chunk: the two chunks stay, the call says why */
    CHECK(hachi_session_rewind(s, 0) == HACHI_OK);
    log = (progress_log){0, 2, 0, 0};
    CHECK(hachi_session_eval(s, ids, N_PROMPT, NULL) == HACHI_ERR_ABORTED);
    CHECKF(hachi_session_pos(s) == 128, "position %d after a stop at chunk 2", hachi_session_pos(s));
    CHECK(hachi_session_logits(s) == NULL);   /* "no logits are kept" */
    CHECK(strstr(hachi_last_error(), "128 of 300") != NULL);
    /* a stop asked for at the last chunk is a stop too (the header's promise), every chunk kept */
    CHECK(hachi_session_rewind(s, 0) == HACHI_OK);
    log = (progress_log){0, 5, 0, 0};
    CHECK(hachi_session_eval(s, ids, N_PROMPT, NULL) == HACHI_ERR_ABORTED && hachi_session_pos(s) == N_PROMPT);
    CHECK(hachi_session_rewind(s, 0) == HACHI_OK);
    log = (progress_log){0, 2, 0, 0};
    CHECK(hachi_session_eval(s, ids, N_PROMPT, NULL) == HACHI_ERR_ABORTED);
    /* evaluating the rest gives the same logits as an uninterrupted eval */
    log = (progress_log){0, 0, 0, 0};
    CHECK(hachi_session_eval(s, ids + 128, N_PROMPT - 128, NULL) == HACHI_OK);
    float *a = malloc(sizeof(float) * (size_t)hachi_model_n_vocab(m));
    memcpy(a, hachi_session_logits(s), sizeof(float) * (size_t)hachi_model_n_vocab(m));
    CHECK(hachi_session_rewind(s, 0) == HACHI_OK);
    log = (progress_log){0, 0, 0, 0};
    CHECK(hachi_session_eval(s, ids, N_PROMPT, NULL) == HACHI_OK);
    CHECK(!memcmp(a, hachi_session_logits(s), sizeof(float) * (size_t)hachi_model_n_vocab(m)));
    free(a);
    hachi_session_free(s);
    hachi_model_free(m);
}

TEST(api_load_progress_and_abort) {
    char path[1024];
    snprintf(path, sizeof path, "%s/api_q4_0.gguf", test_tmpdir());
    hachi_synth_params sp = hachi_synth_default_params();
    sp.type = "q4_0";
    CHECK(hachi_synth(&sp, path, NULL, NULL) == HACHI_OK);
    progress_log log = {0, 0, 0, 0};
    hachi_model_params mp = hachi_model_default_params();
    mp.progress = on_progress;
    mp.progress_ctx = &log;
    hachi_model *m = NULL;
    CHECK(hachi_model_load(path, &mp, &m) == HACHI_OK);
    if (hachi_model_repacked_bytes(m) > 0)   /* kernels with an x8 layout for Q4_0 */
        CHECKF(log.calls > 1 && log.last_done == log.last_total && log.last_total == (double)hachi_model_repacked_bytes(m),
               "%d calls, last %g of %g", log.calls, log.last_done, log.last_total);
    else
        CHECK(log.calls == 0);
    hachi_model_free(m);
    if (log.calls > 1) {
        const int calls = log.calls;
        log = (progress_log){0, 1, 0, 0};
        m = NULL;
        CHECK(hachi_model_load(path, &mp, &m) == HACHI_ERR_ABORTED && m == NULL);
        CHECK(strstr(hachi_last_error(), "progress callback") != NULL);
        log = (progress_log){0, calls, 0, 0};   /* a stop at the last call too */
        CHECK(hachi_model_load(path, &mp, &m) == HACHI_ERR_ABORTED && m == NULL);
    }
}

static void *fail_here(void *arg) {
    hachi_model *m = NULL;
    *(hachi_status *)arg = hachi_model_load("/nonexistent/other-thread.gguf", NULL, &m);
    return NULL;
}

TEST(api_version_and_error_per_thread) {
    CHECK(!strcmp(hachi_version(), HACHI_VERSION));
    hachi_model *m = NULL;
    CHECK(hachi_model_load("/nonexistent/this-thread.gguf", NULL, &m) != HACHI_OK);
    hachi_status st = HACHI_OK;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, fail_here, &st) == 0);
    pthread_join(th, NULL);
    CHECK(st != HACHI_OK);
    CHECKF(strstr(hachi_last_error(), "this-thread") != NULL, "last error: %s", hachi_last_error());
}

TEST(api_context_modes_and_memory) {
    hachi_model *m = load_micro();
    if (!m) SKIP("../shared/models/gemma4-micro.gguf absent");
    hachi_session_params sp = hachi_session_default_params();
    hachi_session *s = NULL;
    sp.n_ctx = 3000;
    CHECK(hachi_session_create(m, &sp, &s) == HACHI_ERR_INVALID_ARG && !s);
    CHECK(strstr(hachi_last_error(), "3000") != NULL);
    sp.n_ctx = 262144;
    CHECK(hachi_session_create(m, &sp, &s) == HACHI_ERR_INVALID_ARG && !s);
    sp.n_ctx = 131072;
    CHECK(hachi_session_create(m, &sp, &s) == HACHI_OK);
    CHECK(hachi_session_n_ctx(s) == 131072);
    hachi_session_free(s);
    s = NULL;
    /* a plan larger than the memory available fails at creation, naming the bytes */
    setenv("HACHI_MEM_AVAILABLE", "1000000", 1);
    CHECK(hachi_session_create(m, &sp, &s) == HACHI_ERR_NOMEM && !s);
    CHECKF(strstr(hachi_last_error(), "needs") && strstr(hachi_last_error(), "1000000 available"), "%s", hachi_last_error());
    unsetenv("HACHI_MEM_AVAILABLE");
    hachi_model_free(m);
}

/* Logits only where there are some: none before an eval or after a rewind (the buffer held the
 * old ones); a spec step after a rewind is refused instead of sampling them; the
 * print calls and the detokenizer take NULLs without crashing (they did, under UBSan). */
TEST(api_logits_only_when_there) {
    hachi_model *m = load_micro();
    if (!m) SKIP("../shared/models/gemma4-micro.gguf absent");
    int32_t ids[N_PROMPT];
    prompt(ids, N_PROMPT);
    hachi_session *s = NULL;
    CHECK(hachi_session_create(m, NULL, &s) == HACHI_OK);
    if (!s) { hachi_model_free(m); return; }
    CHECK(hachi_session_logits(s) == NULL);
    CHECK(hachi_session_eval(s, ids, 10, NULL) == HACHI_OK && hachi_session_logits(s) != NULL);
    CHECK(hachi_session_rewind(s, 9) == HACHI_OK && hachi_session_logits(s) == NULL);
    CHECK(hachi_session_eval(s, ids + 9, 1, NULL) == HACHI_OK && hachi_session_logits(s) != NULL);
    CHECK(hachi_session_rewind(s, 10) == HACHI_OK && hachi_session_logits(s) != NULL);   /* nothing forgotten */

    hachi_sampler *smp = NULL;
    hachi_sampler_params gp = hachi_sampler_default_params();
    gp.temp = 0;
    CHECK(hachi_sampler_create(&gp, hachi_model_n_vocab(m), &smp) == HACHI_OK);
    hachi_spec *sp = NULL;
    hachi_spec_params pp = hachi_spec_default_params();
    CHECK(hachi_spec_create(m, s, smp, &pp, &sp) == HACHI_OK);
    int32_t out[4], n = 0;
    if (sp) {
        CHECK(hachi_spec_feed(sp, ids, 10) == HACHI_OK);
        CHECK(hachi_session_rewind(s, 8) == HACHI_OK);
        CHECK(hachi_spec_step(sp, 1, out, &n) == HACHI_ERR_INVALID_ARG && strstr(hachi_last_error(), "rewound"));
        CHECK(hachi_session_eval(s, ids + 8, 2, NULL) == HACHI_OK && hachi_spec_feed(sp, ids + 8, 2) == HACHI_OK);
        CHECK(hachi_spec_step(sp, 1, out, &n) == HACHI_OK && n == 1);
        hachi_spec_free(sp);
    }
    hachi_sampler_free(smp);
    hachi_session_print_plan(NULL, stderr);
    hachi_session_print_plan(s, NULL);
    hachi_model_print_info(NULL, stderr);
    hachi_model_print_info(m, NULL);
    hachi_detok *d = NULL;
    CHECK(hachi_detok_create(m, &d) == HACHI_OK);
    CHECK(hachi_detok_push(d, ids[1], NULL, 100) == 0 && hachi_detok_flush(d, NULL, 10) == 0);
    hachi_detok_free(d);
    hachi_session_free(s);
    hachi_model_free(m);
}
