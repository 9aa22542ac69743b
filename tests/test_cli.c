/* CLI tests: the hachi binary end to end on real models (stories260K from
 * llama2.c, llama-2-tiny-random from another GGUF toolchain, the trained
 * gemma4-micro), and its one-line errors on bad input. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/stat.h>
#include "test.h"
#include "hachi.h"
#ifndef HACHI_NO_SERVE
#include <cjson/cJSON.h>
#endif

/* stories260K converted once per run */
static const char *stories_gguf(void) {
    static char path[1024];
    const char *bin = test_shared_path("data/stories260K.bin"), *tok = test_shared_path("data/tok512.bin");
    if (!bin || !tok) return NULL;
    snprintf(path, sizeof path, "%s", test_tmp("stories260K.gguf"));
    struct stat st;
    if (stat(path, &st) == 0) return path;
    int rc;
    free(test_sh(&rc, "%s convert-llama2c %s %s -o %s 2>&1", test_hachi_bin(), bin, tok, path));
    CHECKF(rc == 0, "convert-llama2c failed");
    return rc == 0 ? path : NULL;
}

TEST(cli_stories260k_greedy_256) {
    NEED_SHARED(expected_path, "data/stories260K_greedy_256.txt");
    const char *model = stories_gguf();
    if (!model) SKIP("stories260K absent");
    size_t elen = 0;
    char *expected = test_read_file(expected_path, &elen);
    if (!expected) { CHECK(0); return; }
    const char *modes[] = {"", "--draft 8"};   /* plain, and speculative with prompt-lookup drafts */
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        int rc;
        char *out = test_sh(&rc, "%s run -m %s -n 256 --temp 0 %s 2>/dev/null", test_hachi_bin(), model, modes[i]);
        CHECKF(rc == 0, "run exit %d", rc);
        CHECKF(strlen(out) == elen && !memcmp(out, expected, elen),
               "greedy output (%s) differs:\n--- got\n%s\n--- expected\n%s", modes[i], out, expected);
        free(out);
    }
    free(expected);
}

/* "draft: D drafted, A accepted (..%), F forwards for N tokens" of a run's stderr */
static bool draft_stats(const char *err, int *drafted, int *accepted, int *forwards, int *tokens) {
    const char *l = strstr(err, "draft: ");
    return l && sscanf(l, "draft: %d drafted, %d accepted (%*d%%), %d forwards for %d tokens", drafted, accepted,   // NOLINT(cert-err34-c): parses the CLI's own output; a bad parse fails the check
                       forwards, tokens) == 4;
}

/* --prompt-cache: the first run saves the prompt's state, the second restores all of it
 * (no prefill) and prints the same text; a file that is not a prompt cache, or one of
 * another KV type (--kv-type int8 on the f16 file), is refused with one line and left as it
 * was. */
TEST(cli_run_prompt_cache) {
    const char *model = stories_gguf();
    if (!model) SKIP("stories260K absent");
    const char *cache = test_tmp("stories.cache"), *notes = test_tmp("notes.txt");
    remove(cache);
    const char *args = "-p 'Once upon a time, a little dog' -n 64 --temp 0.7 --seed 3";
    int rc;
    char *out[2], *err[2];
    for (int i = 0; i < 2; i++) {
        const char *e = test_tmp(i ? "pc_err1.txt" : "pc_err0.txt");
        out[i] = test_sh(&rc, "%s run -m %s %s --prompt-cache %s 2>%s", test_hachi_bin(), model, args, cache, e);
        CHECKF(rc == 0, "run %d exit %d", i, rc);
        err[i] = test_read_file(e, NULL);
    }
    CHECKF(err[0] && strstr(err[0], "prompt cache: saved"), "first run: %s", err[0] ? err[0] : "");
    CHECKF(err[1] && strstr(err[1], "prompt cache: restored 10 of 10 prompt tokens"), "second run: %s", err[1] ? err[1] : "");
    CHECKF(!strcmp(out[0], out[1]), "outputs differ:\n%s\n---\n%s", out[0], out[1]);
    FILE *f = fopen(notes, "w");
    fputs("my notes, not a cache\n", f);
    fclose(f);
    char *e2 = test_sh(&rc, "%s run -m %s %s --prompt-cache %s 2>&1 >/dev/null", test_hachi_bin(), model, args, notes);
    char *kept = test_read_file(notes, NULL);
    CHECKF(rc != 0 && strstr(e2, "not a hachi prompt cache") && strchr(e2, '\n') == e2 + strlen(e2) - 1,
           "not a cache: %s", e2);
    CHECKF(kept && !strcmp(kept, "my notes, not a cache\n"), "the file was changed: %s", kept ? kept : "(gone)");
    size_t n0 = 0, n1 = 0;
    char *before = test_read_file(cache, &n0);
    char *e3 = test_sh(&rc, "%s run -m %s %s --kv-type int8 --prompt-cache %s 2>&1 >/dev/null", test_hachi_bin(), model,
                  args, cache);
    char *after = test_read_file(cache, &n1);
    CHECKF(rc != 0 && strstr(e3, "int8") && strstr(e3, "f16") && strstr(e3, "stories.cache") &&
           strchr(e3, '\n') == e3 + strlen(e3) - 1, "int8 run on the f16 cache: %s", e3);
    CHECKF(before && after && n0 == n1 && !memcmp(before, after, n0), "the f16 cache was changed");
    for (int i = 0; i < 2; i++) { free(out[i]); free(err[i]); }
    free(e2); free(kept); free(e3); free(before); free(after);
    remove(cache);
}

/* Speculative decoding is exact for any sampler: the same tokens with and without
 * drafts (temperature, top-p, the three penalties, logit biases, a seed), and drafts really kept. */
TEST(cli_run_draft_same_tokens_sampled) {
    const char *model = stories_gguf();
    if (!model) SKIP("stories260K absent");
    const char *args = "-p 'Once upon a time' -n 200 --temp 0.8 --top-p 0.95 --repeat-penalty 1.1 --frequency-penalty 0.2 "
                       "--presence-penalty 0.1 --logit-bias 13+1.5 --logit-bias 11-inf --seed 7";
    int rc, d, a, fw, n;
    char *plain = test_sh(&rc, "%s run -m %s %s 2>/dev/null", test_hachi_bin(), model, args);
    CHECKF(rc == 0 && strlen(plain) > 200, "run: %s", plain);
    const int drafts[] = {1, 8, HACHI_DRAFT_MAX};
    for (int i = 0; i < 3; i++) {
        const char *err = test_tmp("draft_err.txt");
        char *out = test_sh(&rc, "%s run -m %s %s --draft %d 2>%s", test_hachi_bin(), model, args, drafts[i], err);
        CHECKF(rc == 0 && !strcmp(out, plain), "--draft %d: other tokens:\n--- got\n%s\n--- without drafts\n%s",
               drafts[i], out, plain);
        size_t len;
        char *e = test_read_file(err, &len);
        CHECKF(e && draft_stats(e, &d, &a, &fw, &n) && d > 0 && a > 0 && a <= d && n == 200 && fw < n,
               "--draft %d: stats: %s", drafts[i], e ? e : "(none)");
        free(e);
        free(out);
    }
    free(plain);
}

/* On the trained long-context model a passkey answer copies the key from the context:
 * prompt lookup drafts its digits, which the model accepts (fewer forwards than tokens),
 * with the same answer as plain decoding. */
TEST(cli_gemma4_micro_draft_passkey) {
    NEED_SHARED(model, "models/gemma4-micro.gguf");
    NEED_SHARED(text, "models/heldout/heldout_stories.txt");
    size_t len;
    char *t = test_read_file(text, &len);
    if (!t) { CHECK(0); return; }
    const char *path = test_tmp("passkey_prompt.txt");
    FILE *f = fopen(path, "w");
    size_t cut = len < 6000 ? len / 2 : 3000, end = len < 6000 ? len : 6000;
    while (cut < end && t[cut] != ' ') cut++;
    fwrite(t, 1, cut, f);
    fputs(" The pass key is 67519. Remember it. 67519 is the pass key.", f);
    fwrite(t + cut, 1, end - cut, f);
    fputs(" What is the pass key? The pass key is", f);
    fclose(f);
    int rc, d, a, fw, n;
    char *plain = test_sh(&rc, "%s run -m %s -f %s -n 12 --temp 0 2>/dev/null", test_hachi_bin(), model, path);
    CHECKF(rc == 0 && strstr(plain, "The pass key is 67519"), "plain answer: %s", plain + (strlen(plain) > 200 ? strlen(plain) - 200 : 0));
    const char *err = test_tmp("passkey_err.txt");
    char *out = test_sh(&rc, "%s run -m %s -f %s -n 12 --temp 0 --draft 8 2>%s", test_hachi_bin(), model, path, err);
    CHECKF(rc == 0 && !strcmp(out, plain), "--draft 8 answers otherwise: %s", out + (strlen(out) > 200 ? strlen(out) - 200 : 0));
    char *e = test_read_file(err, &len);
    CHECKF(e && draft_stats(e, &d, &a, &fw, &n) && a >= 5 && fw < n, "stats: %s", e ? e : "(none)");
    free(e); free(out);
    /* self-speculation, its draft steps attending 3 pages of the ~1.6K-token context */
    out = test_sh(&rc, "%s run -m %s -f %s -n 12 --temp 0 --spec self --self-budget 48 2>%s", test_hachi_bin(), model,
                  path, err);
    CHECKF(rc == 0 && !strcmp(out, plain), "--spec self answers otherwise: %s", out + (strlen(out) > 200 ? strlen(out) - 200 : 0));
    e = test_read_file(err, &len);
    CHECKF(e && draft_stats(e, &d, &a, &fw, &n) && a >= 1 && fw < n, "--spec self stats: %s", e ? e : "(none)");
    free(e); free(out); free(plain); free(t);
}

TEST(cli_stories260k_perplexity) {
    const char *model = stories_gguf();
    if (!model) SKIP("stories260K absent");
    const char *txt = test_tmp("fox.txt");
    FILE *f = fopen(txt, "w");
    fputs("One day, a clever fox found a shiny key under the old oak tree.", f);
    fclose(f);
    int rc;
    char *ids = test_sh(&rc, "%s tokenize -m %s -f %s --ids --bos", test_hachi_bin(), model, txt);
    CHECKF(rc == 0 && !strncmp(ids, "1 385 328 432 261 280 305 330 272 414 444 272 277 264 261 262 415 271 422 410 354 422 318 "
                                      "264 285 265 334 341 334 412 433 259 276 411 426", 130), "ids: %s", ids);
    /* f32 KV: the reference is an fp32 implementation (fp16 K/V moves this by 1.0e-4) */
    char *out = test_sh(&rc, "%s perplexity -m %s -f %s --kv-f32 2>/dev/null", test_hachi_bin(), model, txt);
    double ppl = 0;
    char *line = strstr(out, "perplexity: ");
    CHECKF(rc == 0 && line && sscanf(line, "perplexity: %lf", &ppl) == 1, "output: %s", out);   // NOLINT(cert-err34-c): parses the CLI's own output; a bad parse fails the check
    CHECKF(fabs(ppl / 4.953633 - 1) <= 1e-4, "perplexity %.6f, reference 4.953633", ppl);
    free(ids); free(out);
}

TEST(cli_llama_tiny_random) {
    NEED_SHARED(model, "data/llama-2-tiny-random.gguf");
    int rc;
    char *info = test_sh(&rc, "%s info -m %s", test_hachi_bin(), model);
    CHECKF(rc == 0, "info exit %d", rc);
    CHECK(strstr(info, "architecture:  llama") != NULL);
    const char *names[] = {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_down.weight", "output.weight"};
    for (int i = 0; i < 4; i++) CHECKF(strstr(info, names[i]) != NULL, "info lacks %s", names[i]);
    char *run = test_sh(&rc, "%s run -m %s -p 'Hello world' -n 12 --temp 0 2>&1", test_hachi_bin(), model);
    CHECKF(rc == 0 && strstr(run, "generated tokens: 12"), "run: %s", run);
    free(info); free(run);
}

/* Perplexity of the trained model on its held-out texts, llama.cpp's way
 * (context 512, 40 chunks), within 1% of the README's llama.cpp figures. */
TEST(cli_gemma4_micro_perplexity) {
    NEED_SHARED(model, "models/gemma4-micro.gguf");
    if (getenv("HACHI_TEST_QUICK")) SKIP("HACHI_TEST_QUICK: an instrumented or emulated run (the release run has it)");
    const struct { const char *file; double ref; } texts[] = {
        {"models/heldout/heldout_stories.txt", 7.07}, {"models/heldout/heldout_warpeace.txt", 8.93},
        {"models/heldout/heldout_shakespeare.txt", 12.66}, {"models/heldout/heldout_wiki.txt", 10.99}};
    for (int i = 0; i < 4; i++) {
        int rc;
        char *out = test_sh(&rc, "%s perplexity -m %s -f %s -c 512 --chunks 40 2>/dev/null", test_hachi_bin(), model,
                       test_shared_path(texts[i].file));
        double ppl = 0;
        char *line = strstr(out, "perplexity: ");
        CHECKF(rc == 0 && line && sscanf(line, "perplexity: %lf", &ppl) == 1, "%s: %s", texts[i].file, out);   // NOLINT(cert-err34-c): parses the CLI's own output; a bad parse fails the check
        CHECKF(fabs(ppl / texts[i].ref - 1) <= 0.01, "%s: perplexity %.3f, reference %.2f", texts[i].file, ppl,
               texts[i].ref);
        free(out);
    }
}

TEST(cli_chat_reuses_cache) {
    NEED_SHARED(model, "models/gemma4-micro.gguf");
    int rc;
    char *out = test_sh(&rc, "printf 'The pass key is 12345.\\nWhat is the pass key?\\n' | %s chat -m %s -n 8 --temp 0 2>&1",
                   test_hachi_bin(), model);
    int t1 = -1, r1 = -1, p1 = -1, t2 = -1, r2 = -1, p2 = -1;
    char *a = strstr(out, "[turn 1: prefilled "), *b = strstr(out, "[turn 2: prefilled ");
    CHECKF(rc == 0 && a && b, "chat output: %s", out);
    if (a && b) {
        sscanf(a, "[turn 1: prefilled %d new tokens, replied %d tokens%*[^,], context %d", &t1, &r1, &p1);   // NOLINT(cert-err34-c): parses the CLI's own output; a bad parse fails the check
        sscanf(b, "[turn 2: prefilled %d new tokens, replied %d tokens%*[^,], context %d", &t2, &r2, &p2);   // NOLINT(cert-err34-c): parses the CLI's own output; a bad parse fails the check
        /* turn 2 prefilled only its own tokens: the context grew by exactly them + the reply */
        CHECKF(t1 > 0 && p1 == t1 + r1, "turn 1: %d prefilled + %d replied != context %d", t1, r1, p1);
        CHECKF(t2 > 0 && t2 < p1 && p2 == p1 + t2 + r2, "turn 2: %d prefilled + %d replied on top of %d != context %d",
               t2, r2, p1, p2);
    }
    free(out);
}

/* chat --draft: the same replies and the same context after each turn (drafted positions
 * not kept are rewound before the next turn), with drafts kept from the conversation. */
TEST(cli_chat_draft_same_replies) {
    NEED_SHARED(model, "models/gemma4-micro.gguf");
    const char *in = "printf 'The pass key is 12345. Remember it. 12345 is the pass key.\\n"
                     "What is the pass key? The pass key is\\n'";
    int rc;
    char *out[2], *err[2];
    for (int d = 0; d < 2; d++) {
        const char *e = test_tmp(d ? "chat_err1.txt" : "chat_err0.txt");
        out[d] = test_sh(&rc, "%s | %s chat -m %s -n 16 --temp 0 %s 2>%s", in, test_hachi_bin(), model, d ? "--draft 8" : "", e);
        CHECKF(rc == 0, "chat %s exit %d", d ? "--draft 8" : "(plain)", rc);
        err[d] = test_read_file(e, NULL);
    }
    CHECKF(!strcmp(out[0], out[1]), "replies differ:\n%s\n---\n%s", out[0], out[1]);
    int kept = 0, drafted = 0;
    for (int t = 1; t <= 2; t++) {
        char key[32];
        snprintf(key, sizeof key, "[turn %d: ", t);
        const char *a = err[0] ? strstr(err[0], key) : NULL, *b = err[1] ? strstr(err[1], key) : NULL;
        const char *ca = a ? strstr(a, "context ") : NULL, *cb = b ? strstr(b, "context ") : NULL;
        CHECKF(ca && cb && !strncmp(ca, cb, strcspn(ca, ";]")), "turn %d: %s / %s", t, a ? a : "-", b ? b : "-");
        if (b && strstr(b, "so far ")) sscanf(strstr(b, "so far "), "so far %d of %d", &kept, &drafted);   // NOLINT(cert-err34-c): parses the CLI's own output; a bad parse fails the check
    }
    CHECKF(kept > 0 && kept <= drafted, "drafts: %d of %d kept", kept, drafted);
    for (int d = 0; d < 2; d++) { free(out[d]); free(err[d]); }
}

TEST(cli_run_profile) {
    NEED_SHARED(model, "models/gemma4-micro.gguf");
    int rc;
    char *out = test_sh(&rc, "%s run -m %s -p 'Once upon a time' -n 40 --temp 0 --profile 2>&1 >/dev/null", test_hachi_bin(), model);
    CHECKF(rc == 0, "exit %d", rc);
    char *p = strstr(out, "[profile] emb=");
    CHECKF(p && strstr(p, " ple=") && strstr(p, " c1=") && strstr(p, " head=") && strstr(p, " total=") &&
           strstr(p, "tok/s") && strstr(p, "attn:"), "profile line missing: %s", out);
    char *q = test_sh(&rc, "%s run -m %s -p 'Once' -n 40 --temp 0 --profile --chunks 2,5 2>&1 >/dev/null", test_hachi_bin(), model);
    CHECKF(rc == 0 && strstr(q, " c3=") && !strstr(q, " c4="), "--chunks 2,5: %s", q);
    free(out); free(q);
}

/* --progress: a prefill longer than one batch reports its progress on stderr (here a log, so
 * the last line only, as fast as it runs), ending "prefilled N tokens"; the text on stdout is
 * the same with --no-progress, which prints none. */
TEST(cli_run_progress) {
    NEED_SHARED(model, "models/gemma4-micro.gguf");
    const char *prompt = test_tmp("progress-prompt.txt");
    FILE *f = fopen(prompt, "w");
    if (!f) { CHECK(0); return; }
    for (int i = 0; i < 60; i++) fputs("The quick brown fox jumps over the lazy dog. ", f);
    fclose(f);
    const char *err = test_tmp("progress.err");
    int rc;
    char *with = test_sh(&rc, "%s run -m %s -f %s -n 8 --temp 0 --progress 2>%s", test_hachi_bin(), model, prompt, err);
    CHECKF(rc == 0, "exit %d", rc);
    char *e = test_read_file(err, NULL);
    int n = 0;
    const char *l = e ? strstr(e, "hachi run: prefilled ") : NULL;
    CHECKF(l && sscanf(l, "hachi run: prefilled %d tokens in", &n) == 1 && n > 64 && strstr(l, "tok/s"), "stderr: %s", e ? e : "");   // NOLINT(cert-err34-c): parses the CLI's own output; a bad parse fails the check
    free(e);
    char *without = test_sh(&rc, "%s run -m %s -f %s -n 8 --temp 0 --no-progress 2>%s", test_hachi_bin(), model, prompt, err);
    e = test_read_file(err, NULL);
    CHECKF(rc == 0 && e && !strstr(e, "prefill ") && !strstr(e, "prefilled"), "--no-progress: %s", e ? e : "");
    CHECKF(with && without && !strcmp(with, without) && strlen(with) > 2000, "stdout differs:\n%s\n---\n%s", with, without);
    free(e); free(with); free(without);
}

/* Every bad input: non-zero exit, one line on stderr naming the command and the problem. */
TEST(cli_errors_are_one_line) {
    const char *micro = test_shared_path("models/gemma4-micro.gguf");
    const char *vocab = test_shared_path("data/vocab/ggml-vocab-gpt-2.gguf");
    const char *longp = test_tmp("long_prompt.txt");
    FILE *f = fopen(longp, "w");
    for (int i = 0; i < 3000; i++) fputs("7 ", f);
    fclose(f);
    const struct { const char *args; const char *needle; bool needs_micro; } cases[] = {
        {"run -m /nonexistent.gguf -p hi", "/nonexistent.gguf", false},
        {"run", "no model", false},
        {"run -m %s -n abc", "-n expects an integer", true},
        {"run -m %s --temp -1", "--temp must be in", true},
        {"run -m %s --top-p 2", "--top-p must be in", true},
        {"run -m %s --presence-penalty 3", "--presence-penalty must be in", true},
        {"run -m %s --repeat-last-n -1", "--repeat-last-n must be in", true},
        {"run -m %s --logit-bias 5", "--logit-bias '5': expected TOKEN_ID+BIAS or TOKEN_ID-BIAS", true},
        {"run -m %s --logit-bias 5+inf", "--logit-bias '5+inf': expected", true},
        {"run -m %s --logit-bias 999999+1", "logit bias of token 999999: not in [0, ", true},
        {"run -m %s --logit-bias 99999999999+1", "--logit-bias '99999999999+1': expected", true},
        {"run -m %s --logit-bias ' 5+1'", "--logit-bias ' 5+1': expected", true},
        {"run -m %s --draft 16", "--draft must be in", true},
        {"run -m %s --spec self --self-budget 40", "--self-budget must be in", true},
        {"run -m %s --spec self --self-budget 100", "multiple of 16", true},
        {"run -m %s --self-budget 64", "--self-budget needs --spec self", true},
        {"run -m %s --spec self -md /nonexistent.gguf", "takes no -md", true},
        {"run -m %s -c 1000", "context mode", true},
        {"run -m %s -t 0", "-t must be in", true},
        {"run -m %s --bogus", "unknown option '--bogus'", true},
        {"run -m %s -f /nonexistent.txt", "/nonexistent.txt", true},
        {"run -m %s -c 2048 -f LONG", "more than the context", true},
        {"eval -m %s --tokens /nonexistent --logits-out /tmp/x.f32", "/nonexistent", true},
        /* renaming a .tmp over a device would replace the device node */
        {"eval -m %s --tokens /nonexistent --logits-out /dev/null", "'/dev/null' is a device", true},
        {"run -m %s -p hi --prompt-cache /dev/null", "'/dev/null' is a device", true},
        {"run -m %s -p hi -f /nonexistent.txt", "not both", true},
        {"passkey --bogus", "unknown option '--bogus'", false},
        {"perplexity -m %s", "no text file", true},
        {"perplexity -m %s -f LONG --kl-top 5", "--kl-top needs --kl-divergence-base", true},
        {"passkey -m %s --filler LONG --lengths 512,", "comma-separated list", true},
        {"bench -m %s -c 2048 --prefill-n 5000 --depth 16", "cannot hold the timed prefill", true},
        {"info -m /etc/passwd", "passwd", false},
        {"frobnicate", "unknown command", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].needs_micro && !micro) continue;
        char args[1024], a2[1200];
        snprintf(args, sizeof args, cases[i].args, micro);
        char *l = strstr(args, "LONG");
        if (l) { *l = 0; snprintf(a2, sizeof a2, "%s%s%s", args, longp, l + 4); }
        else snprintf(a2, sizeof a2, "%s", args);
        int rc;
        char *err = test_sh(&rc, "%s %s 2>&1 >/dev/null", test_hachi_bin(), a2);
        char *nl = strchr(err, '\n');
        CHECKF(rc != 0, "'%s' exited 0", a2);
        CHECKF(strstr(err, cases[i].needle) != NULL, "'%s': error '%s' lacks '%s'", a2, err, cases[i].needle);
        CHECKF(strncmp(err, "hachi", 5) == 0 && (!nl || nl[1] == 0 || strstr(a2, "frobnicate")),
               "'%s': not one 'hachi ...' line: %s", a2, err);
        free(err);
    }
    /* output that cannot be written is a failure (a full disk); an output that is the input is refused
     * and the input kept */
    if (micro) {
        int rc;
        char *err = test_sh(&rc, "%s eval -m %s --tokens %s --logits-out %s 2>&1 >/dev/null", test_hachi_bin(), micro, longp, longp);
        char *kept = test_read_file(longp, NULL);
        CHECKF(rc != 0 && strstr(err, "is the input") && kept && !strncmp(kept, "7 7 ", 4), "eval onto its input: rc %d, '%s'",
               rc, err);
        free(kept);
        free(err);
    }
    /* every command's output onto its model or text input (a copy of the model: the old code
     * replaced it) is refused, whatever flag names the output, and the inputs are kept */
    if (micro) {
        const char *model = test_tmp("micro-copy.gguf");
        int rc;
        free(test_sh(&rc, "cp %s %s", micro, model));
        const char *outs[] = {
            "eval -m MODEL --tokens TEXT --logits-out MODEL",
            "perplexity -m MODEL -f TEXT -c 2048 --kl-divergence-base MODEL",
            "perplexity -m MODEL -f TEXT -c 2048 --kl-divergence-base TEXT",
            "passkey -m MODEL --filler TEXT --lengths 256 -n 1 --json MODEL",
            "passkey -m MODEL --filler TEXT --lengths 256 -n 1 --json TEXT",
            "passkey -m MODEL --filler TEXT --lengths 256 -n 1 --dump-prompts TEXT",
            "bench -m MODEL --depth 16 -n 1 -r 1 --no-prefill --no-verify --no-profile --bw-mb 8 --json MODEL",
        };
        size_t model_len = 0;
        char *before = test_read_file(model, &model_len);
        for (size_t i = 0; before && i < sizeof outs / sizeof outs[0]; i++) {
            char cmd[1024] = "", *o = cmd;
            for (const char *p = outs[i]; *p; ) {   /* MODEL and TEXT substituted */
                const char *sub = !strncmp(p, "MODEL", 5) ? model : !strncmp(p, "TEXT", 4) ? longp : NULL;
                if (sub) { o += snprintf(o, cmd + sizeof cmd - o, "%s", sub); p += *p == 'M' ? 5 : 4; }
                else *o++ = *p++;
            }
            *o = 0;
            char *err = test_sh(&rc, "%s %s 2>&1 >/dev/null", test_hachi_bin(), cmd);
            size_t n = 0;
            char *after = test_read_file(model, &n), *text = test_read_file(longp, NULL);
            CHECKF(rc == 1 && strstr(err, "is the input"), "'%s': rc %d, '%s'", cmd, rc, err);
            CHECKF(after && n == model_len && !memcmp(after, before, n) && text && !strncmp(text, "7 7 ", 4),
                   "'%s': an input changed", cmd);
            free(after);
            free(text);
            free(err);
        }
        free(before);
    }
    if (micro) {
        int rc;
        char *err = test_sh(&rc, "%s run -m %s -p hi -n 4 -t 1 2>&1 >/dev/full", test_hachi_bin(), micro);
        CHECKF(rc != 0 && strstr(err, "cannot write the output"), "run into /dev/full: rc %d, '%s'", rc, err);
        free(err);
    }
    /* wrong architecture: a vocabulary-only file has no runnable model */
    if (vocab) {
        int rc;
        char *err = test_sh(&rc, "%s run -m %s -p hi 2>&1 >/dev/null", test_hachi_bin(), vocab);
        CHECKF(rc != 0 && strstr(err, "architecture"), "vocab-only run: %s", err);
        free(err);
    }
}

/* Chat format from the vocabulary: the real Gemma vocabulary (Gemma 3 turn tokens) renders
 * <start_of_turn>user ... <end_of_turn> turns whose markers tokenize to the control ids
 * 105/106; a vocabulary without turn tokens falls back to the plain format. */
TEST(chat_format_from_vocab) {
    NEED_SHARED(path, "oracle/gemma4-vocab.gguf");
    hachi_model_params mp = hachi_model_default_params();
    mp.vocab_only = true;
    hachi_model *m = NULL;
    CHECK(hachi_model_load(path, &mp, &m) == HACHI_OK);
    if (!m) return;
    CHECK(hachi_chat_detect(m) == HACHI_CHAT_GEMMA3);
    char buf[512];
    int32_t n = hachi_chat_turn(m, "Be brief.", "Hi there", true, buf, sizeof buf);
    CHECKF(n > 0 && !strcmp(buf, "<bos><start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n<start_of_turn>model\n"),
           "first turn: %s", buf);
    int32_t ids[64], nt = 0;
    CHECK(hachi_tokenize(m, buf, strlen(buf), false, true, ids, 64, &nt) == HACHI_OK);
    CHECKF(nt > 4 && ids[0] == 2 && ids[1] == 105, "ids %d %d", ids[0], ids[1]);
    int ends = 0;
    for (int i = 0; i < nt; i++) ends += ids[i] == 106;
    CHECK(ends == 1);
    CHECK(hachi_model_is_eog(m, 106));
    hachi_chat_turn(m, NULL, "More", false, buf, sizeof buf);
    CHECKF(!strcmp(buf, "<end_of_turn>\n<start_of_turn>user\nMore<end_of_turn>\n<start_of_turn>model\n"), "later turn: %s", buf);
    hachi_model_free(m);
    const char *micro = test_shared_path("models/gemma4-micro.gguf");
    if (micro && hachi_model_load(micro, &mp, &m) == HACHI_OK) {
        CHECK(hachi_chat_detect(m) == HACHI_CHAT_PLAIN);
        hachi_model_free(m);
    }
}

/* --json-schema (run, chat): sampled replies of gemma4-micro, a story model, are JSON that cJSON
 * reads and that keeps the schema's bounds; drafts give the same reply; a bad schema, a missing
 * file, --think with a schema and a schema given twice are one-line errors */
TEST(cli_json_schema) {
#ifdef HACHI_NO_SERVE
    SKIP("hachi was built without cJSON (and the server), which reads schemas");
#else
    const char *micro = test_shared_path("models/gemma4-micro.gguf");
    if (!micro) SKIP("../shared/models/gemma4-micro.gguf absent");
    static const char schema[] = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":10},"
                                 "\"n\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":9},\"tags\":{\"type\":\"array\",\"items\":"
                                 "{\"type\":\"number\",\"minimum\":-1,\"maximum\":1},\"maxItems\":2}},\"required\":[\"name\",\"n\",\"tags\"]}";
    const char *file = test_tmp("schema.json");
    FILE *f = fopen(file, "w");
    if (f) { fputs(schema, f); fclose(f); }
    static const char prompt[] = "Once upon a time";
    for (int seed = 1; seed <= 4; seed++) {
        int rc, rc2;
        char *out = test_sh(&rc, "%s run -m %s -p '%s' --json-schema-file %s --temp 1 --seed %d -n 300 2>/dev/null", test_hachi_bin(),
                            micro, prompt, file, seed);
        char *drafted = test_sh(&rc2, "%s run -m %s -p '%s' --json-schema-file %s --temp 1 --seed %d -n 300 --draft 4 2>/dev/null",
                                test_hachi_bin(), micro, prompt, file, seed);
        cJSON *doc = rc == 0 && !strncmp(out, prompt, strlen(prompt)) ? cJSON_Parse(out + strlen(prompt)) : NULL;
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "name"));
        const cJSON *n = cJSON_GetObjectItem(doc, "n"), *tags = cJSON_GetObjectItem(doc, "tags"), *t;
        int chars = 0;
        for (const char *p = name; p && *p; p++) chars += ((unsigned char)*p & 0xC0) != 0x80;
        bool ok = name && chars >= 2 && chars <= 10 && cJSON_IsNumber(n) && n->valuedouble >= 1 && n->valuedouble <= 9 &&
                  n->valuedouble == floor(n->valuedouble) && cJSON_IsArray(tags) && cJSON_GetArraySize(tags) <= 2 &&
                  cJSON_GetArraySize(doc) == 3;
        cJSON_ArrayForEach(t, tags) ok &= cJSON_IsNumber(t) && t->valuedouble >= -1 && t->valuedouble <= 1;
        CHECKF(ok, "seed %d (exit %d): '%s'", seed, rc, out);
        CHECKF(rc2 == 0 && !strcmp(out, drafted), "seed %d: with drafts '%s', without '%s'", seed, drafted, out);
        cJSON_Delete(doc);
        free(out);
        free(drafted);
    }
    /* chat: each reply held to the schema anew */
    int rc;
    char *out = test_sh(&rc, "printf 'hi\\nagain\\n' | %s chat -m %s --json-schema '{\"type\":\"array\",\"items\":{\"type\":\"integer\"},"
                        "\"minItems\":1,\"maxItems\":3}' --temp 1 --seed 2 -n 100 2>/dev/null", test_hachi_bin(), micro);
    int replies = 0;   /* (the replies one after another, white space between JSON's tokens newlines too) */
    for (const char *p = out + strspn(out, " \t\r\n"), *end = NULL; rc == 0 && *p; p = end + strspn(end, " \t\r\n")) {
        cJSON *doc = cJSON_ParseWithOpts(p, &end, false);
        CHECKF(cJSON_IsArray(doc) && cJSON_GetArraySize(doc) >= 1 && cJSON_GetArraySize(doc) <= 3, "chat reply '%s'", p);
        cJSON_Delete(doc);
        if (!doc) break;
        replies++;
    }
    CHECKF(rc == 0 && replies == 2, "chat: %d replies, exit %d", replies, rc);
    free(out);
    static const struct { const char *args, *needle; } bad[] = {
        {"run -m %s -p x --json-schema '{\"type\":\"strin\"}'", "--json-schema: 'schema.type': not a JSON schema type"},
        {"run -m %s -p x --json-schema '{\"type\":'", "--json-schema: 'schema' is not JSON"},
        {"run -m %s -p x --json-schema '{\"not\":{}}'", "'not' is not supported"},
        {"run -m %s -p x --json-schema-file /nonexistent.json", "/nonexistent.json"},
        {"run -m %s -p x --json-schema '{}' --json-schema '{}'", "give one of --json-schema and --json-schema-file, once"},
        {"chat -m %s --think --json-schema '{}'", "--json-schema with --think is not supported"},
        {"serve -m %s --json-schema '{}'", "unknown option '--json-schema'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char args[512];
        snprintf(args, sizeof args, bad[i].args, micro);
        char *err = test_sh(&rc, "%s %s 2>&1 >/dev/null </dev/null", test_hachi_bin(), args);
        const char *nl = strchr(err, '\n');
        CHECKF(rc != 0 && strstr(err, bad[i].needle) && !strncmp(err, "hachi", 5) && (!nl || !nl[1]), "'%s': exit %d, '%s'", args, rc,
               err);
        free(err);
    }
#endif
}
