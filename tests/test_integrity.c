/* The prompt-cache file's integrity (src/crc32c.c, src/prompt_cache.c): CRC-32C against its
 * standard check value, and a damaged file refused in one line before anything is loaded:
 * byte flips in the header, the token ids, K/V rows and the logits, 200 bytes flipped at
 * random in the K/V rows (10 trials), truncation, appended bytes. Ring checkpoints
 * (src/checkpoint.c): a session that went far past a position and came back to it through a
 * checkpoint gives bitwise the logits of a fresh prefill. */
#include "test.h"
#include <stdint.h>
#include "crc32c.h"
#include "hachi.h"

enum { P = 300, V = 512 };

static hachi_session *session(hachi_model *m) {
    hachi_session_params sp = hachi_session_default_params();
    sp.n_ctx = 2048;
    sp.n_threads = 2;
    hachi_session *s = NULL;
    CHECKF(hachi_session_create(m, &sp, &s) == HACHI_OK, "%s", hachi_last_error());
    return s;
}

static void ids(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) { seed = seed * 1103515245u + 12345u; t[i] = 3 + (int32_t)((seed >> 8) % (V - 3)); }
}

static bool same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }   // NOLINT(bugprone-suspicious-memory-comparison): bitwise equality is what is tested

TEST(crc32c_check_value) {
    CHECKF(hachi_crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c(\"123456789\") = %08x", hachi_crc32c(0, "123456789", 9));
    CHECK(hachi_crc32c(0, "", 0) == 0);
    unsigned char buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (unsigned char)(i * 7 + 3);
    const uint32_t whole = hachi_crc32c(0, buf, sizeof buf);
    for (size_t cut = 0; cut <= sizeof buf; cut += 37)   /* any split, the 8-byte steps at any alignment */
        CHECKF(hachi_crc32c(hachi_crc32c(0, buf, cut), buf + cut, sizeof buf - cut) == whole, "split at %zu", cut);
    uint32_t bitwise = 0xffffffffu;   /* the definition, a bit at a time */
    for (size_t i = 0; i < sizeof buf; i++) {
        bitwise ^= buf[i];
        for (int k = 0; k < 8; k++) bitwise = (bitwise & 1) ? (bitwise >> 1) ^ 0x82F63B78u : bitwise >> 1;
    }
    CHECK(~bitwise == whole);
}

/* data_offsets [a, b) of a tensor in the file image (relative to the data section) */
static bool tensor_at(const char *img, const char *name, uint64_t *a, uint64_t *b) {
    char key[64];
    snprintf(key, sizeof key, "\"%s\":{", name);
    const char *t = strstr(img + 8, key), *o = t ? strstr(t, "\"data_offsets\":[") : NULL;
    unsigned long long x, y;
    if (!o || sscanf(o, "\"data_offsets\":[%llu,%llu]", &x, &y) != 2) return false;   // NOLINT(cert-err34-c): the test's own file; a bad parse fails the check
    *a = x;
    *b = y;
    return true;
}

TEST(prompt_cache_checksums_refuse_damage) {
    NEED_SHARED(path, "models/gemma4-micro.gguf");
    char file[1024], bad[1024];
    snprintf(file, sizeof file, "%s/crc.cache", test_tmpdir());
    snprintf(bad, sizeof bad, "%s/damaged.cache", test_tmpdir());
    hachi_model *m = NULL;
    CHECKF(hachi_model_load(path, NULL, &m) == HACHI_OK, "%s", hachi_last_error());
    hachi_session *s = m ? session(m) : NULL;
    hachi_session *fresh = m ? session(m) : NULL;
    int32_t t[P];
    ids(t, P, 11);
    float want[V];
    size_t len = 0;
    char *img = NULL;
    if (!s || !fresh || hachi_session_eval(s, t, P, NULL) != HACHI_OK || hachi_session_save(s, t, P, file) != HACHI_OK ||
        !(img = test_read_file(file, &len))) {
        CHECK(0);
        goto out;
    }
    memcpy(want, hachi_session_logits(s), sizeof want);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)(unsigned char)img[i] << (8 * i);
    const uint64_t base = 8 + hl;
    uint64_t ta, tb, la, lb, ka, kb, va, vb;
    CHECK(tensor_at(img, "tokens", &ta, &tb) && tensor_at(img, "logits", &la, &lb) && tensor_at(img, "kv.0.k", &ka, &kb) &&
          tensor_at(img, "kv.5.v", &va, &vb));
    const char *model = strstr(img + 8, "\"model\":\"");
    struct { const char *what; size_t at; int flips; long keep; const char *append; } cases[] = {
        {"a flip in the header's model id", model ? (size_t)(model - img) + 12 : 20, 1, 0, NULL},
        {"a flip in the header length", 1, 1, 0, NULL},
        {"a flip in the header's padding", (size_t)base - 1, 1, 0, NULL},
        {"a flip in a token id", (size_t)(base + ta + 4 * 17), 1, 0, NULL},
        {"a flip in the first K row", (size_t)(base + ka), 1, 0, NULL},
        {"a flip in a K row", (size_t)(base + (ka + kb) / 2), 1, 0, NULL},
        {"a flip in the last V row", (size_t)(base + vb - 1), 1, 0, NULL},
        {"a flip in the logits", (size_t)(base + la + 4 * 100 + 2), 1, 0, NULL},
        {"truncated by one byte", 0, 0, -1, NULL},
        {"truncated by a row", 0, 0, -64, NULL},
        {"one byte appended", 0, 0, 0, "x"},
        {"a row of zeros appended", 0, 0, 0, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"},
    };
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    uint32_t rng = 12345;
    for (int i = 0; i < n_cases + 10; i++) {   /* then 10 trials of 200 random flips in the K/V rows */
        char *c = malloc(len + 32);
        memcpy(c, img, len);
        size_t n = len;
        char what[128];
        if (i < n_cases) {
            snprintf(what, sizeof what, "%s", cases[i].what);
            if (cases[i].flips) c[cases[i].at] ^= 0x10;
            n = (size_t)((long)len + cases[i].keep);
            if (cases[i].append) { size_t k = cases[i].append[0] ? 1 : 16; memcpy(c + len, cases[i].append, k); n = len + k; }
        } else {
            snprintf(what, sizeof what, "trial %d: 200 bytes flipped in the K/V rows", i - n_cases);
            for (int k = 0; k < 200; k++) {
                rng = rng * 1103515245u + 12345u;
                c[base + ka + (rng >> 4) % (len - base - ka)] ^= (char)(1 + (rng >> 24) % 255);
            }
        }
        FILE *f = fopen(bad, "wb");
        if (f) { fwrite(c, 1, n, f); fclose(f); }
        free(c);
        int32_t got = -1;
        const hachi_status st = hachi_session_load(s, bad, t, P, &got);
        const char *e = hachi_last_error();
        CHECKF(st == HACHI_ERR_FORMAT && got == 0 && strstr(e, "damaged.cache") && !strchr(e, '\n') &&
               (strstr(e, "damaged") || strstr(e, "not a hachi prompt cache")),
               "%s: status %d, %d restored, '%s'", what, st, got, e);
        CHECKF(hachi_session_pos(s) == P && same(hachi_session_logits(s), want, V), "%s: the session was changed", what);
    }
    /* the undamaged file still loads, whole, into a fresh session */
    int32_t got = -1;
    CHECKF(hachi_session_load(fresh, file, t, P, &got) == HACHI_OK && got == P &&
           same(hachi_session_logits(fresh), want, V), "the good file: %d restored: %s", got, hachi_last_error());
out:
    free(img);
    hachi_session_free(s);
    hachi_session_free(fresh);
    hachi_model_free(m);
}

/* A checkpoint at position C; the session goes 300 tokens further (the 64 + 16-slot rings wrap
 * several times), comes back through the checkpoint and takes other tokens: their logits are
 * bitwise those of a fresh session that prefilled the same tokens. A rewind that far fails. */
TEST(checkpoint_resumes_exactly) {
    NEED_SHARED(path, "models/gemma4-micro.gguf");
    enum { C = 150, FAR = 300, NEW = 40 };
    hachi_model *m = NULL;
    CHECKF(hachi_model_load(path, NULL, &m) == HACHI_OK, "%s", hachi_last_error());
    hachi_session *a = m ? session(m) : NULL, *b = m ? session(m) : NULL;
    hachi_checkpoint *cp = NULL;
    int32_t t[C + FAR], u[C + NEW];
    ids(t, C + FAR, 5);
    memcpy(u, t, sizeof(int32_t) * C);
    ids(u + C, NEW, 99);
    float *la = malloc(sizeof(float) * V * NEW), *lb = malloc(sizeof(float) * V * (C + NEW));
    if (!a || !b || !la || !lb) { CHECK(0); goto out; }
    CHECK(hachi_checkpoint_create(a, &cp) == HACHI_OK && hachi_checkpoint_pos(cp) == -1 && hachi_checkpoint_bytes(cp) > 0);
    CHECK(hachi_session_checkpoint_restore(a, cp) == HACHI_ERR_INVALID_ARG);   /* empty */
    CHECK(hachi_session_eval(a, t, C, NULL) == HACHI_OK);
    CHECK(hachi_session_checkpoint_save(a, cp) == HACHI_OK && hachi_checkpoint_pos(cp) == C);
    CHECK(hachi_session_eval(a, t + C, FAR, NULL) == HACHI_OK);
    CHECK(hachi_session_rewind(a, C) != HACHI_OK);
    CHECKF(hachi_session_checkpoint_restore(a, cp) == HACHI_OK && hachi_session_pos(a) == C, "%s", hachi_last_error());
    CHECK(hachi_session_eval(a, u + C, NEW, la) == HACHI_OK);
    CHECK(hachi_session_eval(b, u, C + NEW, lb) == HACHI_OK);
    CHECKF(same(la, lb + (size_t)V * C, (size_t)V * NEW), "the logits after the checkpoint differ from a fresh prefill");
    /* twice from the same checkpoint, decoding one token at a time this time */
    CHECK(hachi_session_checkpoint_restore(a, cp) == HACHI_OK);
    for (int i = 0; i < NEW; i++) {
        CHECK(hachi_session_eval(a, u + C + i, 1, NULL) == HACHI_OK);
        CHECKF(same(hachi_session_logits(a), lb + (size_t)V * (C + i), V), "decode step %d after the checkpoint", i);
    }
    CHECK(hachi_session_rewind(a, 0) == HACHI_OK && hachi_session_checkpoint_restore(a, cp) == HACHI_ERR_INVALID_ARG);
out:
    free(la);
    free(lb);
    hachi_checkpoint_free(cp);
    hachi_session_free(a);
    hachi_session_free(b);
    hachi_model_free(m);
}

/* Two rewinds with a short advance between them: the second one must not reach keys that the
 * positions rewound by the first had overwritten in the rings (at 100 the 80-slot rings hold
 * 20..99; back to 90, one token on, then back to 80 needs 17..79). Refused or exact. */
TEST(rewind_twice_refused_or_exact) {
    NEED_SHARED(path, "models/gemma4-micro.gguf");
    hachi_model *m = NULL;
    CHECKF(hachi_model_load(path, NULL, &m) == HACHI_OK, "%s", hachi_last_error());
    hachi_session *a = m ? session(m) : NULL, *b = m ? session(m) : NULL;
    int32_t t[120];
    ids(t, 120, 3);
    float want[V];
    if (!a || !b) { CHECK(0); goto out; }
    CHECK(hachi_session_eval(a, t, 100, NULL) == HACHI_OK);
    CHECK(hachi_session_rewind(a, 90) == HACHI_OK && hachi_session_eval(a, t + 90, 1, NULL) == HACHI_OK);
    CHECK(hachi_session_eval(b, t, 81, NULL) == HACHI_OK);
    memcpy(want, hachi_session_logits(b), sizeof want);
    if (hachi_session_rewind(a, 80) == HACHI_OK) {
        CHECK(hachi_session_eval(a, t + 80, 1, NULL) == HACHI_OK);
        CHECKF(same(hachi_session_logits(a), want, V), "the second rewind was allowed but is not exact");
    }
out:
    hachi_session_free(a);
    hachi_session_free(b);
    hachi_model_free(m);
}
