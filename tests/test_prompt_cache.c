/* Tests of src/prompt_cache.c on the trained gemma4-micro (sliding rings of
 * 64 + 16 slots, full layers, shared caches): a restored state continues with
 * bitwise the logits of an uncached session; which prefixes can be restored;
 * other models and damaged files. */
#include "test.h"
#include <stdint.h>
#include "crc32c.h"
#include "hachi.h"
#include "session.h"

enum { P = 300, EXTRA = 20, V = 512 };

static hachi_session *session_on(hachi_model *m, int batch, int threads) {
    hachi_session_params sp = hachi_session_default_params();
    sp.n_ctx = 2048;
    sp.n_threads = threads;
    sp.n_batch = batch;
    hachi_session *s = NULL;
    CHECKF(hachi_session_create(m, &sp, &s) == HACHI_OK, "%s", hachi_last_error());
    return s;
}
static hachi_session *session(hachi_model *m, int batch) { return session_on(m, batch, 2); }

static void ids(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) { seed = seed * 1103515245u + 12345u; t[i] = 3 + (int32_t)((seed >> 8) % (V - 3)); }
}

static bool same_logits(const float *a, const float *b) { return !memcmp(a, b, V * sizeof(float)); }   // NOLINT(bugprone-suspicious-memory-comparison): bitwise equality is what is tested

/* logits of the last of tokens[0..n) from a fresh session that prefills them all */
static void reference(hachi_model *m, const int32_t *t, int n, float *out) {
    hachi_session *s = session(m, 64);
    if (s && hachi_session_eval(s, t, n, NULL) == HACHI_OK) memcpy(out, hachi_session_logits(s), V * sizeof(float));
    hachi_session_free(s);
}

TEST(prompt_cache_restores_exactly) {
    NEED_SHARED(path, "models/gemma4-micro.gguf");
    char file[1024];
    snprintf(file, sizeof file, "%s/micro.cache", test_tmpdir());
    hachi_model *m = NULL;
    CHECKF(hachi_model_load(path, NULL, &m) == HACHI_OK, "%s", hachi_last_error());
    if (!m) return;
    int32_t t[P + EXTRA];
    ids(t, P + EXTRA, 7);
    float want[V], after[6][V];
    hachi_session *a = session(m, 64), *b = session(m, 7);
    if (!a || !b) goto out;

    /* save after the prompt; a session of another batch size restores it and continues alike */
    CHECK(hachi_session_eval(a, t, P, NULL) == HACHI_OK);
    memcpy(want, hachi_session_logits(a), sizeof want);
    CHECKF(hachi_session_save(a, t, P, file) == HACHI_OK, "%s", hachi_last_error());
    for (int i = 0; i < 6; i++) {
        CHECK(hachi_session_eval(a, &t[P + i], 1, NULL) == HACHI_OK);
        memcpy(after[i], hachi_session_logits(a), sizeof after[i]);
    }
    int32_t n = -1;
    CHECKF(hachi_session_load(b, file, t, P, &n) == HACHI_OK && n == P && hachi_session_pos(b) == P,
           "load: %d restored: %s", n, hachi_last_error());
    CHECK(same_logits(hachi_session_logits(b), want));
    for (int i = 0; i < 6; i++) {
        CHECK(hachi_session_eval(b, &t[P + i], 1, NULL) == HACHI_OK);
        CHECKF(same_logits(hachi_session_logits(b), after[i]), "step %d after the restore differs", i);
    }
    CHECK(hachi_session_rewind(b, P - 10) == HACHI_OK);   /* the rings hold their spare slots */

    /* a longer prompt: the saved part restored, the rest prefilled */
    float ref[V];
    CHECK(hachi_session_load(b, file, t, P + EXTRA, &n) == HACHI_OK && n == P);
    CHECK(hachi_session_eval(b, t + P, EXTRA, NULL) == HACHI_OK);
    reference(m, t, P + EXTRA, ref);
    CHECK(same_logits(hachi_session_logits(b), ref));

    /* a shorter prompt: restored up to its last token, which is evaluated again */
    CHECK(hachi_session_load(b, file, t, P - 5, &n) == HACHI_OK && n == P - 6);
    CHECK(hachi_session_eval(b, t + P - 6, 1, NULL) == HACHI_OK);
    reference(m, t, P - 5, ref);
    CHECK(same_logits(hachi_session_logits(b), ref));

    /* diverging at 100: the sliding rings no longer hold what position 100 needs */
    int32_t u[P];
    memcpy(u, t, sizeof u);
    u[100] ^= 1;
    CHECK(hachi_session_load(b, file, u, P, &n) == HACHI_OK && n == 0 && hachi_session_pos(b) == 0);
out:
    hachi_session_free(a);
    hachi_session_free(b);
    hachi_model_free(m);
    remove(file);
}

/* A state saved on 2 threads past 512 positions (where a token's keys are cut into parts)
 * restores on 1 and 3 threads and continues with bitwise the logits of a session that ran the
 * whole prompt on one thread: the thread count changes no bit */
TEST(prompt_cache_any_thread_count) {
    NEED_SHARED(path, "models/gemma4-micro.gguf");
    enum { Q = 700 };
    char file[1024];
    snprintf(file, sizeof file, "%s/micro-threads.cache", test_tmpdir());
    hachi_model *m = NULL;
    CHECKF(hachi_model_load(path, NULL, &m) == HACHI_OK, "%s", hachi_last_error());
    if (!m) return;
    int32_t t[Q + 4];
    ids(t, Q + 4, 11);
    float want[4][V];
    hachi_session *one = session_on(m, 64, 1), *two = session_on(m, 64, 2);
    if (one && two && hachi_session_eval(one, t, Q, NULL) == HACHI_OK)
        for (int i = 0; i < 4; i++) {
            CHECK(hachi_session_eval(one, &t[Q + i], 1, NULL) == HACHI_OK);
            memcpy(want[i], hachi_session_logits(one), sizeof want[i]);
        }
    CHECK(two && hachi_session_eval(two, t, Q, NULL) == HACHI_OK);
    CHECKF(two && hachi_session_save(two, t, Q, file) == HACHI_OK, "%s", hachi_last_error());
    for (int threads = 1; threads <= 3; threads += 2) {
        hachi_session *s = session_on(m, 64, threads);
        int32_t n = -1;
        CHECKF(s && hachi_session_load(s, file, t, Q, &n) == HACHI_OK && n == Q, "load on %d thread(s): %s", threads,
               hachi_last_error());
        for (int i = 0; s && n == Q && i < 4; i++) {
            CHECK(hachi_session_eval(s, &t[Q + i], 1, NULL) == HACHI_OK);
            CHECKF(same_logits(hachi_session_logits(s), want[i]), "restored on %d thread(s): step %d differs", threads, i);
        }
        hachi_session_free(s);
    }
    hachi_session_free(one);
    hachi_session_free(two);
    hachi_model_free(m);
    remove(file);
}

/* Damaged files are errors that name the file, never a crash, and leave the session as it
 * was (checked before anything is loaded); a file of another KV type is an error naming both types that leaves the
 * session as it was; a file written for other weights restores nothing. */
TEST(prompt_cache_bad_files) {
    NEED_SHARED(path, "models/gemma4-micro.gguf");
    char file[1024], bad[1024];
    snprintf(file, sizeof file, "%s/micro2.cache", test_tmpdir());
    snprintf(bad, sizeof bad, "%s/bad.cache", test_tmpdir());
    hachi_model *m = NULL;
    CHECKF(hachi_model_load(path, NULL, &m) == HACHI_OK, "%s", hachi_last_error());
    hachi_session *s = m ? session(m, 64) : NULL;
    int32_t t[P];
    ids(t, P, 9);
    size_t len = 0;
    char *img = NULL;
    if (!s || hachi_session_eval(s, t, P, NULL) != HACHI_OK || hachi_session_save(s, t, P, file) != HACHI_OK ||
        !(img = test_read_file(file, &len))) {
        CHECK(0);
        goto out;
    }
    struct { const char *what; size_t keep; const char *patch, *with; } cases[] = {
        {"truncated in the data", len / 2, NULL, NULL},
        {"truncated in the header", 40, NULL, NULL},
        {"shorter than the length", 5, NULL, NULL},
        {"not JSON", len, "{\"__metadata__\"", "[\"__metadata__\""},
        {"another format", len, "hachi-prompt-cache", "hachi-prompt-cachx"},
        {"offsets past the end", len, "\"data_offsets\":[0,", "\"data_offsets\":[9,"},
        {"a wrong shape", len, "\"shape\":[300]", "\"shape\":[301]"},
        {"no token count", len, "\"n_tokens\":\"300\"", "\"n_tokens\":\"000\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *c = malloc(len + 1);
        memcpy(c, img, len);
        if (cases[i].patch) {
            char *at = strstr(c + 8, cases[i].patch);
            CHECKF(at != NULL, "%s: no '%s' in the header", cases[i].what, cases[i].patch);
            if (at) memcpy(at, cases[i].with, strlen(cases[i].with));
        }
        FILE *f = fopen(bad, "wb");
        fwrite(c, 1, cases[i].keep, f);
        fclose(f);
        free(c);
        int32_t n = -1;
        hachi_status st = hachi_session_load(s, bad, t, P, &n);
        CHECKF(st != HACHI_OK && n == 0 && hachi_session_pos(s) == P && strstr(hachi_last_error(), "bad.cache"),
               "%s: status %d, %d restored, error '%s'", cases[i].what, st, n, hachi_last_error());
    }
    /* a tensor's shape changed (its bytes the same) and the checksums made anew: found before
     * anything is dropped, so the session goes on as if no load had been tried */
    {
        char *c = malloc(len);
        memcpy(c, img, len);
        uint64_t hl = 0;
        for (int i = 0; i < 8; i++) hl |= (uint64_t)(unsigned char)c[i] << (8 * i);
        char *shape = strstr(c + 8, "\"kv.2.k\":{\"dtype\":\"F16\",\"shape\":[300,64]");
        char *digits = strstr(c + 8, "\"crc.header\":\"");
        CHECK(shape && digits && hl < len);
        if (shape && digits) {
            char *dims = strstr(shape, "[300,64]");
            dims[1] = '6';   /* [300,64] -> [600,32]: the same bytes */
            dims[5] = '3';
            dims[6] = '2';
            digits += strlen("\"crc.header\":\"");
            memset(digits, '0', 8);
            char hex[9];
            snprintf(hex, sizeof hex, "%08x", hachi_crc32c(hachi_crc32c(0, c, 8), c + 8, (size_t)hl));
            memcpy(digits, hex, 8);
            FILE *f = fopen(bad, "wb");
            fwrite(c, 1, len, f);
            fclose(f);
            float before[V], next[V];
            memcpy(before, hachi_session_logits(s), sizeof before);
            int32_t n = -1;
            const hachi_status st = hachi_session_load(s, bad, t, P, &n);
            CHECKF(st == HACHI_ERR_FORMAT && n == 0 && hachi_session_pos(s) == P && strstr(hachi_last_error(), "kv.2.k") &&
                   strstr(hachi_last_error(), "[300, 64]") && same_logits(hachi_session_logits(s), before),
                   "a reshaped tensor: status %d, %d restored, position %d, '%s'", st, n, hachi_session_pos(s),
                   hachi_last_error());
            int32_t x = 5;   /* the next token's logits: those of a fresh session over the same tokens */
            CHECK(hachi_session_eval(s, &x, 1, NULL) == HACHI_OK);
            memcpy(next, hachi_session_logits(s), sizeof next);
            int32_t u[P + 1];
            memcpy(u, t, sizeof t);
            u[P] = x;
            float want[V];
            reference(m, u, P + 1, want);
            CHECK(same_logits(next, want));
            CHECK(hachi_session_rewind(s, P) == HACHI_OK);
        }
        free(c);
    }
    int32_t n = -1;
    CHECK(hachi_session_load(s, "/nonexistent.cache", t, P, &n) == HACHI_ERR_IO && n == 0);
    CHECK(hachi_session_load(s, test_tmpdir(), t, P, &n) == HACHI_ERR_IO && n == 0 && strstr(hachi_last_error(), "directory"));

    /* a page-sparse session refuses the dense session's file (its rows would be other numbers)
     * and keeps its state */
    {
        hachi_session_params sp = hachi_session_default_params();
        sp.n_threads = 2;
        sp.sparse_budget = 64;
        hachi_session *sps = NULL;
        CHECK(hachi_session_create(m, &sp, &sps) == HACHI_OK);
        if (sps && hachi_session_eval(sps, t, 40, NULL) == HACHI_OK) {
            n = -1;
            const hachi_status st = hachi_session_load(sps, file, t, P, &n);
            const char *e = hachi_last_error();
            CHECKF(st == HACHI_ERR_UNSUPPORTED && n == 0 && hachi_session_pos(sps) == 40 && strstr(e, "dense") &&
                   strstr(e, "sparse 4"), "dense file into a sparse session: status %d, %d restored, '%s'", st, n, e);
        } else CHECK(0);
        hachi_session_free(sps);
    }

    /* an f32 session refuses the f16 file and keeps its state (once restored nothing either) */
    hachi_session_params sp = hachi_session_default_params();
    sp.n_threads = 2;
    sp.kv_type = HACHI_KV_F32;
    hachi_session *f32 = NULL;
    CHECK(hachi_session_create(m, &sp, &f32) == HACHI_OK);
    float want[V];
    if (f32 && hachi_session_eval(f32, t, 40, NULL) == HACHI_OK) {
        memcpy(want, hachi_session_logits(f32), sizeof want);
        n = -1;
        const hachi_status st = hachi_session_load(f32, file, t, P, &n);
        const char *e = hachi_last_error();
        CHECKF(st == HACHI_ERR_UNSUPPORTED && n == 0 && strstr(e, "micro2.cache") && strstr(e, "f16") &&
               strstr(e, "f32") && !strchr(e, '\n'), "f16 file into an f32 session: status %d, %d restored, '%s'", st, n, e);
        CHECK(hachi_session_pos(f32) == 40 && same_logits(hachi_session_logits(f32), want));
        float a[V], b[V];   /* the next token continues as without the attempt */
        CHECK(hachi_session_eval(f32, &t[40], 1, NULL) == HACHI_OK);
        memcpy(a, hachi_session_logits(f32), sizeof a);
        CHECK(hachi_session_rewind(f32, 0) == HACHI_OK && hachi_session_eval(f32, t, 41, NULL) == HACHI_OK);
        memcpy(b, hachi_session_logits(f32), sizeof b);
        CHECK(same_logits(a, b));
    } else CHECK(0);
    hachi_session_free(f32);

    /* the tiny random model cannot use the micro model's file */
    char tiny[1024];
    snprintf(tiny, sizeof tiny, "%s/tiny-pc.gguf", test_tmpdir());
    char *out = NULL;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s synth --shape tiny --type f32 -o %s >/dev/null 2>&1", test_hachi_bin(), tiny);
    hachi_model *tm = NULL;
    if (test_run(cmd, &out) == 0 && hachi_model_load(tiny, NULL, &tm) == HACHI_OK) {
        hachi_session *ts = session(tm, 64);
        CHECK(ts && hachi_session_load(ts, file, t, P, &n) == HACHI_OK && n == 0);
        hachi_session_free(ts);
    } else CHECKF(0, "synth tiny failed");
    hachi_model_free(tm);
    free(out);
    remove(tiny);
out:
    free(img);
    hachi_session_free(s);
    hachi_model_free(m);
    remove(file);
    remove(bad);
}
