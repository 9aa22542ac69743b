/* micro: shared helpers of the gemma4-micro tests (micro.h). */
#include "micro.h"
#include "test.h"

hachi_model *micro_load(void) {
    const char *path = test_shared_path("models/gemma4-micro.gguf");
    hachi_model *m = NULL;
    if (path && hachi_model_load(path, NULL, &m) != HACHI_OK) test_fail(__FILE__, __LINE__, "load: %s", hachi_last_error());
    return m;
}

hachi_session_params micro_params(hachi_kv_type type, int ctx, int threads, int budget) {
    hachi_session_params p = hachi_session_default_params();
    p.n_ctx = ctx;
    p.n_threads = threads;
    p.kv_type = type;
    p.sparse_budget = budget;
    return p;
}

static hachi_session *session_of(hachi_model *m, const hachi_session_params *p) {
    hachi_session *s = NULL;
    hachi_status st = hachi_session_create(m, p, &s);
    if (st != HACHI_OK)
        test_fail(__FILE__, __LINE__, "session %s ctx %d budget %d%s: %s", hachi_kv_type_name(p->kv_type), p->n_ctx,
                  p->sparse_budget, p->heads ? " with streaming heads" : "", hachi_last_error());
    return s;
}

hachi_session *micro_session(hachi_model *m, hachi_kv_type type, int ctx, int threads, int budget) {
    const hachi_session_params p = micro_params(type, ctx, threads, budget);
    return session_of(m, &p);
}

int32_t *micro_passkey_prompt(int k, int *n, int *key) {
    const char *pp = test_shared_path("models/gemma4-micro.passkey.prompts.txt");
    const char *ap = test_shared_path("models/gemma4-micro.passkey.answers.txt");
    FILE *pf = pp ? fopen(pp, "r") : NULL, *af = ap ? fopen(ap, "r") : NULL;
    int32_t *ids = NULL;
    char *line = NULL, aline[1024];
    size_t cap = 0;
    for (int i = 0; pf && af && i <= k; i++) {
        if (getline(&line, &cap, pf) <= 0) break;
        do { if (!fgets(aline, sizeof aline, af)) aline[0] = 0; } while (aline[0] == '#');
        if (i < k) continue;
        ids = malloc(sizeof *ids * 8192);
        *n = 0;
        for (char *p = line, *e; ids && *n < 8192; p = e) {
            long v = strtol(p, &e, 10);
            if (e == p) break;
            ids[(*n)++] = (int32_t)v;
        }
        char *e;   /* "length depth key | ..." */
        strtol(aline, &e, 10);
        strtod(e, &e);
        *key = (int)strtol(e, &e, 10);
    }
    free(line);
    if (pf) fclose(pf);
    if (af) fclose(af);
    return ids;
}

bool micro_passkey_answer(hachi_model *m, const hachi_session_params *p, int k, int *n, char *text, size_t cap) {
    int key;
    *n = 0;
    text[0] = 0;
    int32_t *ids = micro_passkey_prompt(k, n, &key);
    if (!ids) { test_fail(__FILE__, __LINE__, "passkey prompt %d absent", k); return false; }
    hachi_session_params q = *p;
    q.n_ctx = 8192;
    hachi_session *s = session_of(m, &q);
    bool ok = s && hachi_session_eval(s, ids, *n, NULL) == HACHI_OK;
    size_t len = 0;
    for (int i = 0; ok && i < 8; i++) {
        const float *lg = hachi_session_logits(s);
        int32_t best = 0;
        for (int32_t v = 1; v < hachi_model_n_vocab(m); v++) if (lg[v] > lg[best]) best = v;
        const int32_t got = hachi_token_to_text(m, best, text + len, (int32_t)(cap - 1 - len));
        len += got > 0 ? (size_t)got : 0;
        text[len] = 0;
        ok = hachi_session_eval(s, &best, 1, NULL) == HACHI_OK;
    }
    if (!ok) test_fail(__FILE__, __LINE__, "passkey prompt %d: %s", k, hachi_last_error());
    char want[16];
    snprintf(want, sizeof want, "%d", key);
    hachi_session_free(s);
    free(ids);
    return ok && strstr(text, want) != NULL;
}

float *micro_eval_all(hachi_model *m, hachi_kv_type type, const int32_t *ids, int n, int step, int ctx, int threads,
                      int budget) {
    const hachi_session_params p = micro_params(type, ctx, threads, budget);
    return micro_eval_all_params(m, &p, ids, n, step);
}

float *micro_eval_all_params(hachi_model *m, const hachi_session_params *p, const int32_t *ids, int n, int step) {
    hachi_session *s = session_of(m, p);
    if (!s) return NULL;
    const size_t nv = (size_t)hachi_model_n_vocab(m);
    float *lg = calloc(nv * (size_t)n, sizeof(float));   /* zeros where an eval fails (reported) */
    for (int i = 0; lg && i < n; i += step) {
        int c = n - i < step ? n - i : step;
        if (hachi_session_eval(s, ids + i, c, lg + i * nv) != HACHI_OK)
            test_fail(__FILE__, __LINE__, "eval: %s", hachi_last_error());
    }
    hachi_session_free(s);
    return lg;
}

void micro_check_forwards(hachi_model *m, const hachi_session_params *p, const int32_t *ids, int n, const int *steps,
                          int n_steps) {
    const size_t nv = (size_t)hachi_model_n_vocab(m);
    float *one = micro_eval_all_params(m, p, ids, n, 1);
    for (int i = 0; one && i < n_steps; i++) {
        float *k = micro_eval_all_params(m, p, ids, n, steps[i]);
        size_t bad = 0;
        for (size_t j = 0; k && j < nv * n && !bad; j++) if (one[j] != k[j]) bad = j + 1;
        if (!k || bad)
            test_fail(__FILE__, __LINE__, "kv %s, budget %d, threads %d%s, %d tokens per forward: logits differ first "
                      "at position %zu", hachi_kv_type_name(p->kv_type), p->sparse_budget, p->n_threads,
                      p->heads ? ", streaming heads" : "", steps[i], bad ? (bad - 1) / nv : 0);
        free(k);
    }
    free(one);
}
