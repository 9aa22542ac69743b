/* test_bench: `hachi bench` end to end on a tiny synthetic model (made into a
 * scratch cache directory, one thread: quick even on a loaded machine): the
 * JSON it writes has every required key, each number finite and positive; a
 * second run reuses the cached model; bad flags give one `hachi bench: ...`
 * line and exit 1. Also the bandwidth measurement on a small buffer. It never
 * asserts a speed (DESIGN.md section 5). */
#include "test.h"
#include <math.h>
#include "hachi.h"

/* The number after the n-th (0-based) occurrence of "key": in json, NAN if absent or null. */
static double json_num_at(const char *json, const char *key, int nth) {
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = json;
    for (int i = 0; i <= nth; i++) {
        if (!(p = strstr(p, pat))) return NAN;
        p += strlen(pat);
    }
    while (*p == ' ') p++;
    char *end;
    double v = strtod(p, &end);
    return end == p ? NAN : v;
}

static int count(const char *s, const char *sub) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, sub)); p += strlen(sub)) n++;
    return n;
}

#define CHECK_POS(json, key, nth)                                                         \
    do {                                                                                  \
        double v_ = json_num_at(json, key, nth);                                          \
        CHECKF(isfinite(v_) && v_ > 0, "%s[%d] = %g, want finite > 0", key, nth, v_);     \
    } while (0)

TEST(bench_json_tiny) {
    const char *bin = test_hachi_bin(), *dir = test_tmpdir();
    char cmd[2048], json_path[600];
    snprintf(json_path, sizeof json_path, "%s/bench.json", dir);
    snprintf(cmd, sizeof cmd,
             "HACHI_BENCH_CACHE='%s/bench-cache' %s bench --synth tiny --depth 16,64 -n 4 -r 2 -t 1 "
             "--prefill-n 64 --bw-mb 64 --json '%s' 2>&1",
             dir, bin, json_path);
    char *out = NULL;
    int rc = test_run(cmd, &out);
    CHECKF(rc == 0, "bench exited %d:\n%s", rc, out ? out : "");
    if (out) {
        CHECKF(strstr(out, "roofline") && strstr(out, "[profile]") && strstr(out, "verify"),
               "table, verify or profile line missing:\n%s", out);
        CHECKF(strstr(out, "synthesizing"), "no progress line while synthesizing:\n%s", out);
        /* the expected speed-up of drafts kept at a = 0.3 .. 0.9: at least 1 (k = 0), never less
         * for a higher a */
        const char *e = strstr(out, "expected speed-up over plain decoding");
        double prev = 0;
        int n_a = 0;
        for (const char *p = e; p && (p = strstr(p, " a=0.")) && p < strchr(e, '\n'); p += 5, n_a++) {
            double a, x;
            int k;
            if (sscanf(p, " a=%lf %lfx (k=%d)", &a, &x, &k) != 3 || x < 1.0 || x < prev || k < 0 || k > 15) break;   // NOLINT(cert-err34-c): the CLI's own output; a bad parse fails the check
            prev = x;
        }
        CHECKF(e && n_a == 7, "expected speed-up line: %d good entries:\n%s", n_a, out);
    }
    free(out);
    if (rc != 0) return;

    FILE *f = fopen(json_path, "r");
    CHECKF(f, "no JSON at %s", json_path);
    if (!f) return;
    char *json = calloc(1, 1 << 16);
    size_t n = json ? fread(json, 1, (1 << 16) - 1, f) : 0;
    fclose(f);
    CHECK(n > 0);
    if (!json || !n) { free(json); return; }
    CHECK(json[0] == '{' && strstr(json, "}\n"));
    static const char *keys[] = {"bandwidth_gbs", "bandwidth_end_gbs", "threads", "model", "path", "type", "depths",
                                 "prefill_tps", "verify", "rss_bytes", "profile"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char pat[64];
        snprintf(pat, sizeof pat, "\"%s\":", keys[i]);
        CHECKF(strstr(json, pat), "key %s missing", keys[i]);
    }
    CHECK_POS(json, "bandwidth_gbs", 0);
    CHECK_POS(json, "bandwidth_end_gbs", 0);
    CHECK(json_num_at(json, "threads", 0) == 1);
    CHECK(strstr(json, "\"type\": \"q4_0\""));
    CHECK_POS(json, "load_seconds", 0);
    static const char *dkeys[] = {"decode_tps_median", "decode_tps_min", "decode_tps_max", "ms_per_token",
                                  "bytes_per_token", "achieved_gbs", "roofline_pct", "probe_gbs_min", "probe_gbs_max"};
    CHECKF(count(json, "\"depth\":") == 3, "want 2 depth rows + the profile's depth");   /* 2 rows + profile */
    CHECK(json_num_at(json, "depth", 0) == 16 && json_num_at(json, "depth", 1) == 64);
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof dkeys / sizeof dkeys[0]; i++) CHECK_POS(json, dkeys[i], d);
    for (int d = 0; d < 2; d++)
        CHECK(json_num_at(json, "decode_tps_min", d) <= json_num_at(json, "decode_tps_max", d));
    /* KV bytes grow with depth; weights do not change */
    CHECK(json_num_at(json, "kv_bytes_per_token", 1) > json_num_at(json, "kv_bytes_per_token", 0));
    CHECK_POS(json, "prefill_tps", 0);
    CHECK(json_num_at(json, "prefill_tokens", 0) == 64);
    CHECKF(count(json, "\"rel_cost\":") == 5, "want 5 verify entries");
    CHECK(json_num_at(json, "k", 4) == 16);
    CHECK(json_num_at(json, "rel_cost", 0) == 1);
    for (int i = 0; i < 5; i++) CHECK_POS(json, "rel_cost", i);
    CHECK_POS(json, "rss_bytes", 0);
    static const char *pkeys[] = {"emb", "ple", "c1", "c2", "c3", "c4", "head", "total"};
    for (size_t i = 0; i < sizeof pkeys / sizeof pkeys[0]; i++) {
        double v = json_num_at(json, pkeys[i], 0);
        CHECKF(isfinite(v) && v >= 0, "profile %s = %g", pkeys[i], v);
    }
    CHECK_POS(json, "total", 0);
    free(json);

    /* the second run reuses the cached model: no synthesis */
    snprintf(cmd, sizeof cmd,
             "HACHI_BENCH_CACHE='%s/bench-cache' %s bench --synth tiny --depth 8 -n 2 -r 1 --no-prefill "
             "--no-verify --no-profile --bw-mb 16 2>&1",
             dir, bin);
    rc = test_run(cmd, &out);
    CHECKF(rc == 0 && out && strstr(out, "cached") && !strstr(out, "synthesizing") && strstr(out, "fill: fast"),
           "second run (rc %d):\n%s", rc, out ? out : "");
    free(out);
}

/* --kv-type int8 with the synthetic fill: KV bytes per token are int8 values plus one f32
 * scale per K/V head and row, (hd + 4) / (2 hd) of fp16's (0.52-0.53 at tiny's head dims). */
TEST(bench_kv_int8_bytes) {
    const char *bin = test_hachi_bin(), *dir = test_tmpdir();
    double kvb[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        char cmd[2048], json_path[600];
        snprintf(json_path, sizeof json_path, "%s/bench-kv%d.json", dir, i);
        snprintf(cmd, sizeof cmd,
                 "HACHI_BENCH_CACHE='%s/bench-cache' %s bench --synth tiny --depth 256 -n 2 -r 1 -t 1 --no-prefill "
                 "--no-verify --no-profile --bw-mb 16 --kv-type %s --json '%s' 2>&1",
                 dir, bin, i ? "int8" : "f16", json_path);
        char *out = NULL;
        int rc = test_run(cmd, &out);
        CHECKF(rc == 0, "bench --kv-type %s exited %d:\n%s", i ? "int8" : "f16", rc, out ? out : "");
        free(out);
        size_t len = 0;
        char *json = test_read_file(json_path, &len);
        if (json) kvb[i] = json_num_at(json, "kv_bytes_per_token", 0);
        free(json);
        CHECKF(isfinite(kvb[i]) && kvb[i] > 0, "kv_bytes_per_token %g", kvb[i]);
    }
    const double r = kvb[1] / kvb[0];
    CHECKF(r > 0.5 && r < 0.54, "int8 / f16 KV bytes per token: %.0f / %.0f = %.3f", kvb[1], kvb[0], r);
}

/* --ttft: one real prefill per length from position 0; the profile's split (matmuls, attention,
 * the rest of the layers, inputs, head) is each part of the eval, so it adds up to at most the
 * eval's time per token, and to most of it. */
TEST(bench_ttft_tiny) {
    const char *bin = test_hachi_bin(), *dir = test_tmpdir();
    char cmd[2048], json_path[600];
    snprintf(json_path, sizeof json_path, "%s/bench-ttft.json", dir);
    snprintf(cmd, sizeof cmd,
             "HACHI_BENCH_CACHE='%s/bench-cache' %s bench --synth tiny --ttft 200,64 -t 1 --bw-mb 16 --json '%s' 2>&1",
             dir, bin, json_path);
    char *out = NULL;
    int rc = test_run(cmd, &out);
    CHECKF(rc == 0 && out && strstr(out, "time to first token") && !strstr(out, "tok/s median"),
           "bench --ttft (rc %d):\n%s", rc, out ? out : "");
    free(out);
    size_t len = 0;
    char *json = rc == 0 ? test_read_file(json_path, &len) : NULL;
    CHECK(json);
    if (!json) return;
    CHECKF(count(json, "\"tokens\":") == 2, "want 2 ttft entries:\n%s", json);
    CHECK(json_num_at(json, "tokens", 0) == 64 && json_num_at(json, "tokens", 1) == 200);
    for (int i = 0; i < 2; i++) {
        CHECK_POS(json, "tps", i);
        CHECK_POS(json, "seconds", i);
        CHECK_POS(json, "matmul", i);
        CHECK_POS(json, "attention", i);
        const double ms = 1000.0 / json_num_at(json, "tps", i);
        const double sum = json_num_at(json, "matmul", i) + json_num_at(json, "attention", i) +
                           json_num_at(json, "other_layers", i) + json_num_at(json, "inputs", i) +
                           json_num_at(json, "head", i);
        CHECKF(sum <= ms * 1.001 && sum >= 0.5 * ms, "ttft %d: split sums to %.4f ms of %.4f ms per token", i, sum, ms);
        CHECKF(fabs(json_num_at(json, "seconds", i) * json_num_at(json, "tps", i) - json_num_at(json, "tokens", i)) < 0.01,
               "ttft %d: seconds x tps != tokens", i);
    }
    free(json);
}

/* --spec-replay: a hand-written trace's forwards and tokens counted back (4 forwards, 7 drafted,
 * 5 kept: 9 tokens), with the forward costs of 1..16 rows; a trace that hachi run --spec-trace
 * writes (gemma4-micro, prompt lookup) accounts for every generated token and replays; bad
 * traces are one line naming the file and line. */
TEST(bench_spec_replay_tiny) {
    const char *bin = test_hachi_bin(), *dir = test_tmpdir();
    char trace[600], bad[600];
    snprintf(trace, sizeof trace, "%s/hand.trace", dir);
    snprintf(bad, sizeof bad, "%s/bad.trace", dir);
    FILE *f = fopen(trace, "w"), *g = fopen(bad, "w");
    if (!f || !g) { CHECK(0); if (f) fclose(f); if (g) fclose(g); return; }
    fputs("# drafted kept\n2 1\n0 0\n4 4\n1 0\n", f);
    fputs("2 1\n3 5\n", g);
    fclose(f);
    fclose(g);
    int rc;
    char *out = test_sh(&rc, "HACHI_BENCH_CACHE='%s/bench-cache' %s bench --synth tiny --depth 16,40 --fill fast -t 1 "
                        "--bw-mb 16 -r 1 --spec-replay '%s' 2>&1", dir, bin, trace);
    char want[800];
    snprintf(want, sizeof want, "replay %s at depth 40: 4 forwards for 9 tokens (7 drafted, 5 kept: acceptance 0.714, "
             "mean accepted length 2.67)", trace);
    CHECKF(rc == 0 && strstr(out, want) && strstr(out, "forward costs at depth 16") && strstr(out, "as --spec-costs: 1.000,") &&
           count(out, "speculative ") == 2 && !strstr(out, "tok/s median"), "bench --spec-replay (rc %d):\n%s", rc, out);
    free(out);
    out = test_sh(&rc, "%s bench --synth tiny --spec-replay '%s' 2>&1", bin, bad);
    CHECKF(rc == 1 && !strncmp(out, "hachi bench: ", 13) && strstr(out, "line 2") && count(out, "\n") == 1, "%s", out);
    free(out);
    /* self-speculation's trace: its draft steps replayed on a session with a draft budget */
    if ((f = fopen(trace, "w"))) {
        fputs("3 2 3\n0 0\n2 2 2\n", f);
        fclose(f);
    }
    out = test_sh(&rc, "HACHI_BENCH_CACHE='%s/bench-cache' %s bench --synth tiny --depth 40 --fill fast -t 1 --bw-mb 16 "
                  "-r 1 --self-budget 48 --spec-replay '%s' 2>&1", dir, bin, trace);
    snprintf(want, sizeof want, "replay %s at depth 40: 3 forwards for 7 tokens (5 drafted, 4 kept: acceptance 0.800, "
             "mean accepted length 3.00; self-speculative draft steps replayed)", trace);
    CHECKF(rc == 0 && strstr(out, want) && strstr(out, "a self-speculative draft step (budget 48 keys)") &&
           strstr(out, "self-speculative draft steps page-sparse (budget 48"), "self trace (rc %d):\n%s", rc, out);
    free(out);
    if ((g = fopen(bad, "w"))) {
        fputs("2 1 1\n", g);   /* draft steps but not one per draft */
        fclose(g);
    }
    out = test_sh(&rc, "%s bench --synth tiny --spec-replay '%s' 2>&1", bin, bad);
    CHECKF(rc == 1 && strstr(out, "line 1") && count(out, "\n") == 1, "%s", out);
    free(out);
    out = test_sh(&rc, "%s bench --synth tiny --spec-replay '%s/none.trace' 2>&1", bin, dir);
    CHECKF(rc == 1 && strstr(out, "none.trace") && count(out, "\n") == 1, "%s", out);
    free(out);

    const char *mpath = test_shared_path("models/gemma4-micro.gguf");
    if (!mpath) SKIP("../shared/models/gemma4-micro.gguf absent (the hand-written trace passed)");
    snprintf(trace, sizeof trace, "%s/run.trace", dir);
    out = test_sh(&rc, "%s run -m %s -p 'Once upon a time, there was a little girl. Once upon a time, there' -n 40 "
                  "--temp 0 -t 1 --draft 4 --spec-trace '%s' 2>&1 >/dev/null", bin, mpath, trace);
    int n_gen = -1, k, r, forwards = 0, tokens = 0, bad_lines = 0;
    const char *p = strstr(out, "generated tokens: ");
    if (p) n_gen = (int)strtol(p + 18, NULL, 10);
    free(out);
    char line[128];
    f = fopen(trace, "r");
    while (f && fgets(line, sizeof line, f))
        if (line[0] != '#') {
            char *e1, *e2;
            k = (int)strtol(line, &e1, 10);
            r = (int)strtol(e1, &e2, 10);
            if (e1 != line && e2 != e1 && r >= 0 && r <= k && k <= 4) { forwards++; tokens += r + 1; }
            else bad_lines++;
        }
    if (f) fclose(f);
    CHECKF(rc == 0 && n_gen == 40 && tokens == n_gen - 1 && !bad_lines, "run --spec-trace: rc %d, %d generated, "
           "%d forwards for %d tokens in the trace, %d bad lines", rc, n_gen, forwards, tokens, bad_lines);
    out = test_sh(&rc, "HACHI_BENCH_CACHE='%s/bench-cache' %s bench --synth tiny --depth 16 --fill fast -t 1 --bw-mb 16 "
                  "--no-verify --spec-replay '%s' 2>&1", dir, bin, trace);
    snprintf(want, sizeof want, "%d forwards for %d tokens", forwards, tokens);
    CHECKF(rc == 0 && strstr(out, want), "want '%s':\n%s", want, out);
    free(out);
    /* --spec self's trace: every line "k r k"; it replays with its draft steps */
    out = test_sh(&rc, "%s run -m %s -p 'Once upon a time, there was a little girl. Once upon a time, there' -n 40 "
                  "--temp 0 -t 1 --spec self --self-budget 48 --spec-trace '%s' 2>&1 >/dev/null", bin, mpath, trace);
    free(out);
    forwards = tokens = bad_lines = 0;
    f = fopen(trace, "r");
    while (f && fgets(line, sizeof line, f)) {
        int d = -1;
        if (line[0] == '#') continue;
        if (sscanf(line, "%d %d %d", &k, &r, &d) == 3 && r >= 0 && r <= k && d == k) { forwards++; tokens += r + 1; }   // NOLINT(cert-err34-c): the CLI's own trace; a bad line is counted
        else bad_lines++;
    }
    if (f) fclose(f);
    CHECKF(rc == 0 && tokens == 39 && !bad_lines, "run --spec self --spec-trace: rc %d, %d tokens, %d bad lines", rc,
           tokens, bad_lines);
    /* a trace onto the model, or the prompt file, is refused and the file kept */
    {
        char copy[1200], pf[1200];
        snprintf(copy, sizeof copy, "%s/trace-model.gguf", dir);
        snprintf(pf, sizeof pf, "%s/trace-prompt.txt", dir);
        char *o2 = test_sh(&rc, "cp '%s' '%s' && %s run -m '%s' -p 'Once upon a time' -n 4 --draft 3 --spec-trace '%s' 2>&1",
                           mpath, copy, bin, copy, copy);
        CHECKF(rc == 1 && strstr(o2, "is the input"), "rc %d: %s", rc, o2);
        free(o2);
        hachi_model *mc = NULL;
        CHECK(hachi_model_load(copy, NULL, &mc) == HACHI_OK);
        hachi_model_free(mc);
        o2 = test_sh(&rc, "printf 'Once upon a time' > '%s' && %s run -m '%s' -f '%s' -n 4 --draft 3 --spec-trace '%s' 2>&1 && "
                     "cat '%s'", pf, bin, mpath, pf, pf, pf);
        CHECKF(rc == 1 && strstr(o2, "is the input"), "rc %d: %s", rc, o2);
        free(o2);
        char *kept = test_read_file(pf, NULL);
        CHECK(kept && !strcmp(kept, "Once upon a time"));
        free(kept);
    }
    out = test_sh(&rc, "HACHI_BENCH_CACHE='%s/bench-cache' %s bench --synth tiny --depth 16 --fill fast -t 1 --bw-mb 16 "
                  "--no-verify --spec-replay '%s' 2>&1", dir, bin, trace);
    snprintf(want, sizeof want, "%d forwards for %d tokens", forwards, tokens);
    CHECKF(rc == 0 && strstr(out, want) && strstr(out, "draft steps replayed"), "want '%s':\n%s", want, out);
    free(out);
}

/* --spec TEXT: every drafter end to end on gemma4-micro with workloads from a held-out text, each
 * row's tokens equal to plain decoding's (the command fails otherwise), the assistant and
 * self-speculation rows when asked for; a text too short for the depth is one line naming it. */
TEST(bench_spec_micro) {
    NEED_SHARED(mpath, "models/gemma4-micro.gguf");
    NEED_SHARED(apath, "models/gemma4-micro-assistant.gguf");
    NEED_SHARED(text, "models/heldout/heldout_stories.txt");
    int rc;
    char *out = test_sh(&rc, "%s bench -m %s --spec %s -md %s --self-budget 64 --depth 512 -n 24 -r 2 -t 1 --bw-mb 16 2>&1",
                        test_hachi_bin(), mpath, text, apath);
    static const char *rows[] = {"quote     none", "quote     lookup", "quote     model", "quote     self", "quote     auto",
                                 "doc       none", "doc       model", "free      self", "free      auto"};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *l = strstr(out, rows[i]), *nl = l ? strchr(l, '\n') : NULL;
        CHECKF(rc == 0 && l && nl && nl - l > 4 && !strncmp(nl - 3, "yes", 3), "--spec: row '%s' missing or not the "
               "same tokens (rc %d):\n%s", rows[i], rc, out);
    }
    CHECKF(!strstr(out, "tok/s median"), "--spec printed the decode table:\n%s", out);
    free(out);
    const char *tiny = test_tmp("spec_tiny.txt");
    FILE *f = fopen(tiny, "w");
    if (f) { fputs("Once upon a time there was a cat.", f); fclose(f); }
    out = test_sh(&rc, "%s bench -m %s --spec %s --depth 512 -n 8 -r 1 --bw-mb 16 2>&1", test_hachi_bin(), mpath, tiny);
    CHECKF(rc == 1 && strstr(out, "the text has") && strstr(out, "depth 512"), "short text: rc %d\n%s", rc, out);
    free(out);
}

TEST(bench_bad_flags) {
    static const char *bad[] = {"--synth tiny --depth x", "--synth tiny -n 0", "--synth huge", "--depth 16",
                                "--synth tiny --fill slow", "--synth tiny --bogus", "--synth tiny -m x.gguf",
                                "--synth tiny --depth 140000", "--synth tiny --ttft 0", "--synth tiny --ttft 64,x",
                                "--synth tiny --spec-replay", "--synth tiny --spec-replay ,", "--synth tiny --ttft 64 --spec-replay x",
                                "--synth tiny -md x.gguf", "--synth tiny --draft 3", "--synth tiny --spec x --ttft 64",
                                "--synth tiny --spec /nonexistent.txt"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s bench %s 2>&1", test_hachi_bin(), bad[i]);
        char *out = NULL;
        int rc = test_run(cmd, &out);
        CHECKF(rc == 1, "'%s': exit %d, want 1", bad[i], rc);
        CHECKF(out && !strncmp(out, "hachi bench: ", 13) && count(out, "\n") == 1, "'%s': output\n%s", bad[i],
               out ? out : "");
        free(out);
    }
}

TEST(bench_bandwidth_small) {
    double bw = hachi_measure_read_bandwidth(2, (size_t)8 << 20, 2);
    CHECKF(isfinite(bw) && bw > 0, "bandwidth %g", bw);
}
