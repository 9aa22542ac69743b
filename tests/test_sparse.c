/* Page-sparse attention (hachi_session_params.sparse_budget) on the trained passkey
 * model: a budget that covers every page is dense bit for bit; a forward of k tokens
 * selects and attends exactly as k decode steps (so speculative verification stays
 * exact); rewinds and restored prompt caches rebuild the page metadata; the passkey
 * answers of the shared prompts; bad budgets are refused. */
#include <math.h>
#include "test.h"
#include "hachi.h"
#include "micro.h"

TEST(sparse_budget_covering_all_is_dense) {
    hachi_model *m = micro_load();
    if (!m) SKIP("../shared/models/gemma4-micro.gguf absent");
    int n, key;
    int32_t *ids = micro_passkey_prompt(0, &n, &key);   /* ~1017 tokens: 64 pages */
    CHECK(ids && n > 1000);
    const size_t nv = (size_t)hachi_model_n_vocab(m);
    float *dense = micro_eval_all(m, HACHI_KV_F16, ids, n, 64, 2048, 2, 0);
    float *all = micro_eval_all(m, HACHI_KV_F16, ids, n, 64, 2048, 2, 1024);
    CHECK(!memcmp(dense, all, sizeof(float) * nv * n));
    free(all);
    /* a small budget changes the logits once a query has more pages than it */
    float *sparse = micro_eval_all(m, HACHI_KV_F16, ids, n, 64, 2048, 2, 128);
    CHECK(!memcmp(dense, sparse, sizeof(float) * nv * 128));   /* the first 8 pages: still dense */
    CHECK(memcmp(dense + nv * (n - 1), sparse + nv * (n - 1), sizeof(float) * nv) != 0);
    free(sparse);
    free(dense);
    free(ids);
    hachi_model_free(m);
}

/* Forwards of 16, 9 and 2 tokens (verification) and prefill chunks of 64 give bitwise the
 * logits of decoding one token at a time, with 1 and 2 threads, dense and page-sparse. */
TEST(sparse_forwards_equal_decode) {
    hachi_model *m = micro_load();
    if (!m) SKIP("../shared/models/gemma4-micro.gguf absent");
    int n, key;
    int32_t *ids = micro_passkey_prompt(0, &n, &key);
    CHECK(ids != NULL);
    if (!ids) { hachi_model_free(m); return; }
    const bool quick = getenv("HACHI_TEST_QUICK") != NULL;   /* instrumented, emulated: 2 threads, 300 tokens */
    n = quick ? 300 : 700;
    static const int steps[] = {16, 9, 2, 64};
    for (int budget = 0; budget <= 64; budget += 64)   /* 0: dense, attn.c's tiled path */
        for (int th = quick ? 2 : 1; th <= 2; th++) {
            const hachi_session_params p = micro_params(HACHI_KV_F16, 2048, th, budget);
            micro_check_forwards(m, &p, ids, n, steps, 4);
        }
    free(ids);
    hachi_model_free(m);
}

/* A rewind into the middle of a page and a restored prompt cache continue with bitwise
 * the logits of a session that never left the path. */
TEST(sparse_rewind_and_prompt_cache) {
    hachi_model *m = micro_load();
    if (!m) SKIP("../shared/models/gemma4-micro.gguf absent");
    int n, key;
    int32_t *ids = micro_passkey_prompt(0, &n, &key);
    CHECK(ids != NULL);
    if (!ids) { hachi_model_free(m); return; }
    const size_t nv = (size_t)hachi_model_n_vocab(m);
    const int a = 500, b = 620;   /* a is not on a page boundary */
    float *ref = malloc(sizeof(float) * nv), *got = malloc(sizeof(float) * nv);
    hachi_session *s = micro_session(m, HACHI_KV_F16, 2048, 2, 96);
    CHECK(hachi_session_eval(s, ids, b, NULL) == HACHI_OK);
    memcpy(ref, hachi_session_logits(s), sizeof(float) * nv);
    hachi_session_free(s);
    /* rewind to a, evaluate other tokens, rewind to a again and take the real ones */
    s = micro_session(m, HACHI_KV_F16, 2048, 2, 96);
    CHECK(hachi_session_eval(s, ids, a + 9, NULL) == HACHI_OK);
    CHECK(hachi_session_rewind(s, a) == HACHI_OK);
    int32_t other[9] = {5, 6, 7, 8, 9, 10, 11, 12, 13};
    CHECK(hachi_session_eval(s, other, 9, NULL) == HACHI_OK);
    CHECK(hachi_session_rewind(s, a) == HACHI_OK);
    CHECK(hachi_session_eval(s, ids + a, b - a, NULL) == HACHI_OK);
    memcpy(got, hachi_session_logits(s), sizeof(float) * nv);
    CHECK(!memcmp(ref, got, sizeof(float) * nv));
    hachi_session_free(s);
    /* save at a, restore into a fresh sparse session, continue to b */
    char path[1024];
    snprintf(path, sizeof path, "%s/sparse.cache", test_tmpdir());
    s = micro_session(m, HACHI_KV_F16, 2048, 2, 96);
    CHECK(hachi_session_eval(s, ids, a, NULL) == HACHI_OK);
    CHECK(hachi_session_save(s, ids, a, path) == HACHI_OK);
    hachi_session_free(s);
    s = micro_session(m, HACHI_KV_F16, 2048, 2, 96);
    int32_t loaded = 0;
    CHECK(hachi_session_load(s, path, ids, b, &loaded) == HACHI_OK && loaded == a);
    CHECK(hachi_session_eval(s, ids + a, b - a, NULL) == HACHI_OK);
    CHECK(!memcmp(ref, hachi_session_logits(s), sizeof(float) * nv));
    hachi_session_free(s);
    free(ref);
    free(got);
    free(ids);
    hachi_model_free(m);
}

/* The 12 shared passkey prompts (1K and 4K tokens; dense answers all of them, test_models.c)
 * at budget 256: at most one answer may lose the key. */
TEST(sparse_passkey_shared_prompts) {
    hachi_model *m = micro_load();
    if (!m) SKIP("../shared/models/gemma4-micro.gguf absent");
    const char *quick = getenv("HACHI_TEST_QUICK");   /* instrumented, emulated: two 1K prompts */
    const hachi_session_params p = micro_params(HACHI_KV_F16, 8192, 2, 256);
    int correct = 0, total = 0;
    for (int k = 0; k < (quick ? 2 : 12); k++) {
        int n;
        char text[256];
        correct += micro_passkey_answer(m, &p, k, &n, text, sizeof text);
        total++;
    }
    printf("    passkey, sparse budget 256: %d/%d\n", correct, total);
    CHECKF(correct >= total - 1, "sparse 256 answered %d of %d", correct, total);
    hachi_model_free(m);
}

TEST(sparse_bad_budgets) {
    hachi_model *m = micro_load();
    if (!m) SKIP("../shared/models/gemma4-micro.gguf absent");
    const int bad[] = {16, 32, 40, 50, 16400, -16};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hachi_session_params p = hachi_session_default_params();
        p.sparse_budget = bad[i];
        hachi_session *s = NULL;
        CHECKF(hachi_session_create(m, &p, &s) == HACHI_ERR_INVALID_ARG && !s, "budget %d accepted", bad[i]);
        CHECK(strstr(hachi_last_error(), "sparse budget") != NULL);
    }
    hachi_model_free(m);
}
