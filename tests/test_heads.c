/* Streaming heads (hachi_heads, hachi_session_params.heads): attention of a streaming head is
 * exactly attention over its sink and recent window (against a double-precision sum, with a
 * key range split over threads and not); a window that covers everything is dense; a forward
 * of k tokens equals k decode steps (with page-sparse attention too); the heads file round
 * trips and every malformed or foreign file is refused with its fault named; the classified
 * heads of gemma4-micro (bench/heads/gemma4-micro.heads, made by hachi heads) keep the shared
 * passkey answers; hachi heads and --heads from the command line. */
#include <math.h>
#include "test.h"
#include "attn.h"
#include "hachi.h"
#include "kernels/kernels.h"
#include "micro.h"

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return ((int)(*s >> 40 & 0xffff) - 32768) / 32768.0f;
}

/* One KV head, G = 4 query heads of which 0 and 2 stream (sink 16, window 64), f32 rows, one
 * query at position nk - 1 whose own K/V row is staged: each head's output against the
 * softmax-weighted sum of its keys in double. nk = 1000 splits the others' keys over 2
 * threads; the streaming heads' 80 keys stay on one. */
TEST(heads_attention_is_sink_and_window) {
    const int hd = 64, G = 4, nk = 1000, sink = 16, window = 64;
    const hachi_kernels *K = hachi_kernels_get(HACHI_ISA_REF);
    uint64_t seed = 11;
    for (int th = 1; th <= 2; th++) {
        hachi_kv kv;
        size_t bytes = 0;
        hachi_pool *pool = NULL;
        CHECK(hachi_kv_init(&kv, 0, 1, hd, 0, 2048, 1, HACHI_KV_F32, false, &bytes) == HACHI_OK);
        CHECK(hachi_pool_create(th, &pool) == HACHI_OK);
        float *k = malloc(sizeof *k * nk * hd), *v = malloc(sizeof *v * nk * hd), q[4 * 64], out[4 * 64];
        for (int i = 0; i < nk * hd; i++) { k[i] = 2.0f * frand(&seed); v[i] = frand(&seed); }
        for (int i = 0; i < G * hd; i++) q[i] = frand(&seed);
        for (int t = 0; t < nk - 1; t++) {
            hachi_kv_stage(&kv, K, t, 0, k + (size_t)t * hd, v + (size_t)t * hd);
            hachi_kv_commit(&kv, t, 1);
        }
        hachi_kv_stage(&kv, K, nk - 1, 0, k + (size_t)(nk - 1) * hd, v + (size_t)(nk - 1) * hd);
        const size_t stride = hachi_attn_scores_stride(G, 2048, hd, HACHI_KV_F32);
        float *scores = malloc(sizeof(float) * stride * th), *partial = malloc(sizeof(float) * hachi_attn_partial_floats(G, hd));
        const hachi_attn_args a = {
            .q = q, .out = out, .kv = &kv, .p0 = nk - 1, .n = 1, .window = 0, .n_head = G, .n_head_kv = 1,
            .head_dim = hd, .scale = 0.125f, .scores = scores, .scores_stride = stride, .partial = partial,
            .stream = 0x5, .stream_sink = sink, .stream_window = window,
        };
        hachi_attention(pool, K, &a);
        double worst = 0;
        for (int h = 0; h < G; h++) {
            const bool streams = h % 2 == 0;
            double mx = -1e300, den = 0, o[64] = {0};
            for (int pass = 0; pass < 2; pass++)
                for (int j = 0; j < nk; j++) {
                    if (streams && j >= sink && j <= nk - 1 - window) continue;
                    double dot = 0;
                    for (int d = 0; d < hd; d++) dot += (double)q[h * hd + d] * k[(size_t)j * hd + d];
                    dot *= 0.125;
                    if (!pass) { if (dot > mx) mx = dot; continue; }
                    const double w = exp(dot - mx);
                    den += w;
                    for (int d = 0; d < hd; d++) o[d] += w * v[(size_t)j * hd + d];
                }
            for (int d = 0; d < hd; d++) {   /* (an fmax reduction here crashes aarch64 gcc 12.2's vectorizer) */
                const double e = fabs(o[d] / den - out[h * hd + d]);
                if (e > worst) worst = e;
            }
        }
        CHECKF(worst < 2e-5, "threads %d: streaming attention off the double reference by %g", th, worst);
        free(k); free(v); free(scores); free(partial);
        hachi_kv_free(&kv);
        hachi_pool_free(pool);
    }
}

/* Heads of micro: layer/head pairs streaming, or all full-attention heads when n < 0. */
static hachi_heads *micro_heads(hachi_model *m, int sink, int window, const int (*lh)[2], int n) {
    hachi_heads *h = NULL;
    CHECK(hachi_heads_create(m, sink, window, &h) == HACHI_OK);
    for (int l = 0; h && n < 0 && l < hachi_model_n_layer(m); l++)
        for (int k = 0; !hachi_model_layer_sliding(m, l) && k < hachi_model_n_head(m); k++)
            CHECK(hachi_heads_set(h, l, k, true) == HACHI_OK);
    for (int i = 0; h && i < n; i++) CHECK(hachi_heads_set(h, lh[i][0], lh[i][1], true) == HACHI_OK);
    return h;
}

static float *eval_heads(hachi_model *m, const hachi_heads *h, int budget, const int32_t *ids, int n, int step,
                         int threads) {
    hachi_session_params p = micro_params(HACHI_KV_F16, 2048, threads, budget);
    p.heads = h;
    return micro_eval_all_params(m, &p, ids, n, step);
}

/* Every head streaming with a window past the prompt (sink 0) is dense bit for bit; some
 * heads streaming with such a window give dense's logits up to rounding (their queries are
 * gathered); a window of 64 after a sink of 16 gives that run's logits bit for bit while a
 * query has at most 80 keys, and others after. */
TEST(heads_window_covering_all_is_dense) {
    hachi_model *m = micro_load();
    if (!m) SKIP("../shared/models/gemma4-micro.gguf absent");
    int n, key;
    int32_t *ids = micro_passkey_prompt(0, &n, &key);
    CHECK(ids && n > 1000);
    if (!ids) { hachi_model_free(m); return; }
    if (getenv("HACHI_TEST_QUICK")) n = 200;   /* instrumented and emulated runs: the first 200 positions */
    const size_t nv = (size_t)hachi_model_n_vocab(m);
    float *dense = micro_eval_all(m, HACHI_KV_F16, ids, n, 64, 2048, 2, 0);
    hachi_heads *all = micro_heads(m, 0, 2048, NULL, -1);
    float *got = eval_heads(m, all, 0, ids, n, 64, 2);
    CHECK(!memcmp(dense, got, sizeof(float) * nv * n));
    free(got);
    static const int some[][2] = {{2, 1}, {5, 0}, {5, 3}, {7, 2}};
    hachi_heads *h = micro_heads(m, 16, 2048, some, 4);
    got = eval_heads(m, h, 0, ids, n, 64, 2);
    double worst = 0;
    for (size_t i = 0; i < nv * n; i++) {
        const double e = fabs((double)dense[i] - got[i]);
        if (e > worst) worst = e;
    }
    CHECKF(worst < 1e-3, "some heads streaming over every key: logits off dense by %g", worst);
    hachi_heads_free(h);
    h = micro_heads(m, 16, 64, some, 4);
    float *win = eval_heads(m, h, 0, ids, n, 64, 2);
    CHECK(!memcmp(got, win, sizeof(float) * nv * 80));
    CHECK(memcmp(got + nv * 80, win + nv * 80, sizeof(float) * nv) != 0);
    free(win);
    free(got);
    hachi_heads_free(h);
    hachi_heads_free(all);
    free(dense);
    free(ids);
    hachi_model_free(m);
}

/* Forwards of 16 and 9 tokens and chunks of 64 give bitwise the logits of decoding one
 * token at a time, with 1 and 2 threads, streaming heads alone and with page-sparse attention;
 * every head of layer 5 streams, so layer 7 selects pages of a cache whose owner selects none. */
TEST(heads_forwards_equal_decode) {
    hachi_model *m = micro_load();
    if (!m) SKIP("../shared/models/gemma4-micro.gguf absent");
    int n, key;
    int32_t *ids = micro_passkey_prompt(0, &n, &key);
    CHECK(ids != NULL);
    if (!ids) { hachi_model_free(m); return; }
    const bool quick = getenv("HACHI_TEST_QUICK") != NULL;   /* instrumented, emulated: 2 threads, 160 tokens */
    n = quick ? 160 : 320;
    static const int some[][2] = {{2, 1}, {5, 0}, {5, 1}, {5, 2}, {5, 3}, {7, 3}};
    hachi_heads *h = micro_heads(m, 16, 64, some, 6);
    static const int steps[] = {16, 9, 64};
    for (int budget = 0; budget <= 64; budget += 64)
        for (int th = quick ? 2 : 1; th <= 2; th++) {
            hachi_session_params p = micro_params(HACHI_KV_F16, 2048, th, budget);
            p.heads = h;
            micro_check_forwards(m, &p, ids, n, steps, 3);
        }
    hachi_heads_free(h);
    free(ids);
    hachi_model_free(m);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) { fputs(text, f); fclose(f); }
}

/* save -> load gives the same heads; set refuses sliding layers and bad indices; load refuses,
 * naming the fault: a missing file, another version, another model, a sliding layer, a bad
 * mask, a truncated header, a line too long. */
TEST(heads_file_round_trip_and_errors) {
    hachi_model *m = micro_load();
    if (!m) SKIP("../shared/models/gemma4-micro.gguf absent");
    static const int some[][2] = {{2, 1}, {7, 3}};
    hachi_heads *h = micro_heads(m, 16, 128, some, 2), *g = NULL;
    CHECK(hachi_heads_set(h, 0, 0, true) == HACHI_ERR_INVALID_ARG && strstr(hachi_last_error(), "sliding"));
    CHECK(hachi_heads_set(h, 2, 4, true) == HACHI_ERR_INVALID_ARG && strstr(hachi_last_error(), "out of range"));
    CHECK(hachi_heads_set(h, 8, 0, true) == HACHI_ERR_INVALID_ARG);
    CHECK(hachi_heads_count(h) == 2);
    char path[1024], bad[1024];
    snprintf(path, sizeof path, "%s/micro.heads", test_tmpdir());
    snprintf(bad, sizeof bad, "%s/bad.heads", test_tmpdir());
    CHECK(hachi_heads_save(h, path) == HACHI_OK);
    {   /* a path whose ".tmp" name would not fit is refused, not cut short onto another file */
        char lng[1100];
        memset(lng, 'a', sizeof lng - 1);
        lng[sizeof lng - 1] = 0;
        memcpy(lng, path, strlen(path));
        lng[strlen(path)] = '/';
        CHECKF(hachi_heads_save(h, lng) == HACHI_ERR_INVALID_ARG && strstr(hachi_last_error(), "too long"), "%s", hachi_last_error());
    }
    CHECK(hachi_heads_load(m, path, &g) == HACHI_OK);
    for (int l = 0; g && l < 8; l++)
        for (int k = 0; k < 4; k++) CHECK(hachi_heads_get(g, l, k) == hachi_heads_get(h, l, k));
    CHECK(hachi_heads_sink(g) == 16 && hachi_heads_window(g) == 128 && hachi_heads_count(g) == 2);
    hachi_heads_free(g);
    g = NULL;
    char *text = test_read_file(path, NULL);
    CHECK(text && strstr(text, "layer 2 .S..\n") && strstr(text, "layer 7 ...S\n"));
    CHECK(hachi_heads_load(m, "/nonexistent/x.heads", &g) == HACHI_ERR_IO && !g);
    struct { const char *from, *to, *msg; } cases[] = {
        {"hachi-heads 1", "hachi-heads 2", "version 2"},
        {"arch gemma4", "arch llama", "another model"},
        {"layers 8", "layers 9", "another model"},
        {"model ", "model 0", "another model"},
        {"layer 2 .S..", "layer 1 .S..", "layer 1 is not a full-attention layer"},
        {"layer 2 .S..", "layer 2 .S.", "expected 4 characters"},
        {"layer 2 .S..", "layer 2 .SX.", "expected 4 characters"},
        {"layer 2 .S..", "layer two", "expected 'layer"},
        {"sink 16", "sink -1", "expected 'sink"},
        {"sink 16", "sink 99999999", "integer from 0 to"},
        {"layers 8", "layers +8", "expected 'layers"},
        {"layer 2 .S..", "layer  2 .S..", "expected 'layer"},
        {"layer 7 ...S", "layer 7 ...S\nlayer 2 S...", "layer 2 a second time"},
        {"window 128", "window 0", "expected 'window"},
    };
    for (size_t i = 0; text && i < sizeof cases / sizeof cases[0]; i++) {
        const char *at = strstr(text, cases[i].from);
        CHECK(at != NULL);
        if (!at) continue;
        char buf[2048];
        snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - text), text, cases[i].to, at + strlen(cases[i].from));
        write_text(bad, buf);
        hachi_status st = hachi_heads_load(m, bad, &g);
        CHECKF(st != HACHI_OK && !g && strstr(hachi_last_error(), cases[i].msg), "case %zu (%s): %s, '%s'", i,
               cases[i].to, hachi_status_str(st), hachi_last_error());
        hachi_heads_free(g);
        g = NULL;
    }
    if (text) {   /* the header cut short, and a line past the limit */
        char buf[2048];
        snprintf(buf, sizeof buf, "%.*s", (int)(strstr(text, "sink") - text), text);
        write_text(bad, buf);
        CHECK(hachi_heads_load(m, bad, &g) == HACHI_ERR_FORMAT && strstr(hachi_last_error(), "the file ends"));
        memset(buf, 'S', 1000);
        memcpy(buf, "layer 2 ", 8);
        buf[1000] = 0;
        char *long_file = malloc(strlen(text) + 1002);
        sprintf(long_file, "%s%s\n", text, buf);
        write_text(bad, long_file);
        CHECK(hachi_heads_load(m, bad, &g) == HACHI_ERR_FORMAT && strstr(hachi_last_error(), "too long"));
        free(long_file);
    }
    /* a session of another model refuses these heads */
    const char *tiny = test_shared_path("oracle/gemma4-tiny.gguf");
    hachi_model *other = NULL;
    if (tiny && hachi_model_load(tiny, NULL, &other) == HACHI_OK) {
        hachi_session_params p = hachi_session_default_params();
        p.heads = h;
        hachi_session *s = NULL;
        CHECK(hachi_session_create(other, &p, &s) == HACHI_ERR_INVALID_ARG && !s &&
              strstr(hachi_last_error(), "another model"));
        CHECK(hachi_heads_load(other, path, &g) == HACHI_ERR_INVALID_ARG && strstr(hachi_last_error(), "another model"));
        hachi_model_free(other);
    }
    free(text);
    hachi_heads_free(h);
    hachi_model_free(m);
}

/* hachi heads writes a file that loads; info prints it in the plan, passkey runs it as its
 * mode; a missing file and another model's file are refused by name. */
TEST(cli_heads_classify_and_use) {
    NEED_SHARED(model, "models/gemma4-micro.gguf");
    NEED_SHARED(filler, "models/heldout/heldout_warpeace.txt");
    const char *bin = test_hachi_bin(), *file = test_tmp("cli.heads"), *err = test_tmp("heads_err.txt");
    const int len = getenv("HACHI_TEST_QUICK") ? 128 : 256, window = len / 4;
    int rc;
    char *out = test_sh(&rc, "%s heads -m %s --filler %s --lengths %d --depths 0.5 -n 1 --sink 16 --window %d -t 2 "
                        "-o %s 2>%s", bin, model, filler, len, window, file, err);
    CHECKF(rc == 0 && strstr(out, "streaming heads: ") && strstr(out, " of 12"), "rc %d: %s", rc, out);
    free(out);
    hachi_model *m = NULL;
    hachi_heads *h = NULL;
    CHECK(hachi_model_load(model, NULL, &m) == HACHI_OK);
    CHECK(hachi_heads_load(m, file, &h) == HACHI_OK);
    const int n_stream = hachi_heads_count(h);
    hachi_heads_free(h);
    hachi_model_free(m);
    out = test_sh(&rc, "%s info -m %s --heads %s 2>&1", bin, model, file);
    char want[64];
    snprintf(want, sizeof want, "streaming heads: %d (sink 16, window %d)", n_stream, window);
    CHECKF(rc == 0 && (n_stream == 0 || strstr(out, want)), "rc %d, want '%s': %s", rc, want, out);
    free(out);
    out = test_sh(&rc, "%s passkey -m %s --filler %s --lengths %d --depths 0.5 -n 1 --heads %s 2>/dev/null", bin, model,
                  filler, len, file);
    snprintf(want, sizeof want, "%d streaming heads (sink 16, window %d)", n_stream, window);
    CHECKF(rc == 0 && strstr(out, want), "rc %d, want '%s': %s", rc, want, out);
    free(out);
    /* an output that is an input, or in a directory that is not there, is refused before the
     * calibration; the input is kept */
    const char *copy = test_tmp("heads_model.gguf");
    out = test_sh(&rc, "cp %s %s && %s heads -m %s --filler %s --lengths %d -o %s 2>&1", model, copy, bin, copy, filler,
                  len, copy);
    CHECKF(rc == 1 && strstr(out, "is the input"), "rc %d: %s", rc, out);
    free(out);
    CHECK(hachi_model_load(copy, NULL, &m) == HACHI_OK);
    hachi_model_free(m);
    m = NULL;
    out = test_sh(&rc, "%s heads -m %s --filler %s --lengths %d -o /nonexistent/x.heads 2>&1", bin, model, filler, len);
    CHECKF(rc == 1 && strstr(out, "cannot write '/nonexistent/x.heads.tmp'") && !strstr(out, "streaming"), "rc %d: %s", rc, out);
    free(out);
    out = test_sh(&rc, "%s run -m %s -p hi -n 1 --heads /nonexistent.heads 2>&1", bin, model);
    CHECKF(rc == 1 && strstr(out, "/nonexistent.heads: cannot open"), "rc %d: %s", rc, out);
    free(out);
    const char *tiny = test_shared_path("oracle/gemma4-tiny.gguf");
    if (tiny) {
        out = test_sh(&rc, "%s run -m %s -p hi -n 1 --heads %s 2>&1", bin, tiny, file);
        CHECKF(rc == 1 && strstr(out, "another model"), "rc %d: %s", rc, out);
        free(out);
    }
}

/* The heads hachi heads classified for gemma4-micro (bench/heads/gemma4-micro.heads: 10 of its
 * 12 heads stream, sink 16, window 256; calibrated on other prompts, seed 1000 from
 * heldout_warpeace) on the 12 shared passkey prompts: at most one answer may lose the key. */
TEST(heads_passkey_shared_prompts) {
    hachi_model *m = micro_load();
    if (!m) SKIP("../shared/models/gemma4-micro.gguf absent");
    hachi_heads *h = NULL;
    CHECKF(hachi_heads_load(m, "bench/heads/gemma4-micro.heads", &h) == HACHI_OK, "%s", hachi_last_error());
    const bool quick = getenv("HACHI_TEST_QUICK") != NULL;   /* instrumented, emulated: two 1K prompts */
    hachi_session_params p = micro_params(HACHI_KV_F16, 8192, 2, 0);
    p.heads = h;
    int correct = 0, total = 0;
    for (int k = 0; h && k < (quick ? 2 : 12); k++, total++) {
        int n;
        char text[256];
        correct += micro_passkey_answer(m, &p, k, &n, text, sizeof text);
    }
    printf("    passkey, %d streaming heads: %d/%d\n", hachi_heads_count(h), correct, total);
    CHECKF(correct >= total - 1, "streaming heads answered %d of %d", correct, total);
    hachi_heads_free(h);
    hachi_model_free(m);
}
