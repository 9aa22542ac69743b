/* hachi serve end to end on gemma4-micro: the server started on a free port (--port 0, the
 * port read from its first line), then curl for every error case, stop sequences across token
 * boundaries, a full queue (503) and clients that go away; the openai npm client
 * (tests/node/client.mjs) for chat, streaming, completions, models, concurrency and prompt
 * reuse. Each server must stop on SIGTERM with exit status 0 and no sanitizer report (the
 * ASan build runs these tests too). Skipped, with the reason, without curl, node's openai
 * package, the model or a server in the binary (the aarch64 build has none). */
#ifndef HACHI_NO_SERVE
#include <cjson/cJSON.h>
#endif
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "test.h"
#include "../tools/cli.h"

#define KEY "test-key"

typedef struct { pid_t pid; int port; char err[1024]; } server;

static void sleep_ms(int ms) { nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL); }

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* NULL when the tests can run, else why not */
static const char *cannot_serve(const char **model) {
    static char why[256];
    int rc;
    if (!(*model = test_shared_path("models/gemma4-micro.gguf"))) return "../shared/models/gemma4-micro.gguf absent";
    char *o = test_sh(&rc, "command -v curl >/dev/null 2>&1 && echo yes");
    bool curl = strstr(o, "yes") != NULL;
    free(o);
    if (!curl) return "curl absent";
    o = test_sh(&rc, "%s serve --help 2>&1", test_hachi_bin());
    snprintf(why, sizeof why, "%s", strstr(o, "built without the server") ? "hachi was built without the server" : "");
    free(o);
    return why[0] ? why : NULL;
}

static int body_status(char **body, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Starts `hachi serve -m model --port 0 -t 1 -n 64 --api-key KEY extra`; waits for its listening line. */
static bool server_start(server *sv, const char *model, const char *extra) {
    static int k;
    memset(sv, 0, sizeof *sv);
    snprintf(sv->err, sizeof sv->err, "%s/serve-%d.err", test_tmpdir(), k++);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "exec %s serve -m %s --port 0 -t 1 -n 64 --api-key " KEY " %s 2>%s", test_hachi_bin(), model,
             extra, sv->err);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    if (pid < 0) return false;
    sv->pid = pid;
    const char *tag = "listening on http://127.0.0.1:";
    for (int i = 0; i < 1200; i++) {   /* up to 60 s (the ASan build loads slower) */
        char *e = test_read_file(sv->err, NULL);
        const char *l = e ? strstr(e, tag) : NULL;
        if (l) sv->port = (int)strtol(l + strlen(tag), NULL, 10);
        free(e);
        if (sv->port > 0) return true;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) { sv->pid = 0; break; }
        sleep_ms(50);
    }
    char *e = test_read_file(sv->err, NULL);
    test_fail(__FILE__, __LINE__, "the server did not start: %s", e ? e : "");
    free(e);
    return false;
}

/* SIGTERM; the server must exit 0 within 30 s with no sanitizer report on stderr. */
static void server_stop(server *sv) {
    if (sv->pid <= 0) return;
    kill(sv->pid, SIGTERM);
    int st = -1;
    bool done = false;
    for (int i = 0; i < 600 && !done; i++) {
        done = waitpid(sv->pid, &st, WNOHANG) == sv->pid;
        if (!done) sleep_ms(50);
    }
    if (!done) { kill(sv->pid, SIGKILL); waitpid(sv->pid, &st, 0); }
    char *e = test_read_file(sv->err, NULL);
    CHECKF(done && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the server did not stop cleanly (status %d): %s", st, e ? e : "");
    CHECKF(e && !strstr(e, "Sanitizer") && !strstr(e, "runtime error") && strstr(e, "stopping"), "server stderr: %s",
           e ? e : "");
    free(e);
    sv->pid = 0;
}

/* curl with args; returns the HTTP status (0 on failure), the body in *body (malloc'd). */
static int body_status(char **body, const char *fmt, ...) {
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char file[1024];
    snprintf(file, sizeof file, "%s/curl.body", test_tmpdir());
    int rc;
    char *code = test_sh(&rc, "curl -s -o %s -w '%%{http_code}' %s", file, args);
    int status = (int)strtol(code, NULL, 10);
    free(code);
    *body = test_read_file(file, NULL);
    if (!*body) *body = strdup("");
    remove(file);
    return status;
}

/* An error response: the status and OpenAI's shape with words in its message. */
static void check_error(const server *sv, int want, const char *words, const char *curl_args) {
    char *b = NULL;
    int st = body_status(&b, "%s", curl_args);
    CHECKF(st == want && strstr(b, "{\"error\":{\"message\":\"") && strstr(b, "\"type\":") && strstr(b, "\"code\":") &&
           strstr(b, words), "%s: status %d (want %d), body %s (want '%s')", curl_args, st, want, b, words);
    free(b);
}

#define URL "http://127.0.0.1:%d"
#define AUTH "-H 'Authorization: Bearer " KEY "' "

/* the "text" values of a body (a response, or a stream's events) concatenated */
static char *texts(const char *b) {
    size_t n = 0;
    char *out = calloc(1, strlen(b) + 1);
    for (const char *p = b; out && (p = strstr(p, "\"text\":\"")); ) {
        p += 8;
        while (*p && *p != '"') {
            if (*p == '\\' && p[1]) out[n++] = *p++;
            out[n++] = *p++;
        }
    }
    return out;
}

/* A completion request body at path: {fields"prompt":"cat cat ..."}, n cats (2 tokens each) */
static void write_cats(const char *path, const char *fields, int n) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "{%s\"prompt\":\"", fields);
    for (int i = 0; i < n; i++) fputs("cat ", f);
    fputs("\"}", f);
    fclose(f);
}

/* "cut short" lines in the server's log */
static int count_cut(const char *err) {
    char *e = test_read_file(err, NULL);
    int n = 0;
    for (const char *c = e; c && (c = strstr(c, "cut short")); c++) n++;
    free(e);
    return n;
}

/* A client that gives up during a long prefill stops it after the chunk that runs (the
 * sessions' progress callback asks whether the client is still there): its log line has
 * fewer tokens prefilled than the prompt's 8000, which takes seconds at any speed this model
 * runs; and the slot takes the next request. */
TEST(serve_prefill_stops_when_client_goes) {
    const char *model, *why = cannot_serve(&model);
    if (why) SKIP("%s", why);
    server sv;
    if (!server_start(&sv, model, "-c 8192")) return;
    const int p = sv.port;
    char lp[1024], a[512];
    snprintf(a, sizeof a, "-H 'Content-Type: application/json' " AUTH URL "/v1/completions", p);
    snprintf(lp, sizeof lp, "%s/long8k.json", test_tmpdir());
    write_cats(lp, "\"max_tokens\":1,", 3999);
    int rc;
    free(test_sh(&rc, "curl -s --max-time 0.2 %s --data-binary @%s >/dev/null 2>&1", a, lp));
    double t0 = now_ms();
    const char *l = NULL;
    char *e = NULL;
    while (!l && now_ms() - t0 < 60000) {
        free(e);
        e = test_read_file(sv.err, NULL);
        l = e ? strstr(e, "cut short") : NULL;
        if (!l) sleep_ms(20);
    }
    int n = 0, reused = -1, pre = -1;
    const char *c = l && e ? strstr(e, "slot 0: prompt ") : NULL;
    CHECKF(c && sscanf(c, "slot 0: prompt %d tokens (%d reused, %d prefilled)", &n, &reused, &pre) == 3, "log: %s", e ? e : "");   // NOLINT(cert-err34-c): parses the server's own log; a bad parse fails the check
    CHECKF(n > 7990 && reused == 0 && pre >= 0 && pre < n - 1000, "prompt %d, reused %d, prefilled %d: the prefill went on", n, reused, pre);
    free(e);
    char *b = NULL;
    CHECKF(body_status(&b, "%s -d '{\"prompt\":\"The cat\",\"max_tokens\":2}'", a) == 200 &&
           strstr(b, "\"completion_tokens\":2"), "%s", b);
    free(b);
    remove(lp);
    /* a stream under way when the server stops ends whole: its finish chunk and [DONE] */
    char sf[1024];
    snprintf(sf, sizeof sf, "%s/stopped.txt", test_tmpdir());
    free(test_sh(&rc, "curl -s -N %s -d '{\"prompt\":\"Once\",\"max_tokens\":8000,\"stream\":true}' > %s 2>/dev/null &", a, sf));
    char *s = NULL;
    t0 = now_ms();
    while ((!s || !strstr(s, "\"text\":\"")) && now_ms() - t0 < 10000) {
        free(s);
        s = test_read_file(sf, NULL);
        sleep_ms(10);
    }
    free(s);
    server_stop(&sv);
    s = NULL;
    t0 = now_ms();
    while ((!s || !strstr(s, "[DONE]")) && now_ms() - t0 < 5000) {
        free(s);
        s = test_read_file(sf, NULL);
        sleep_ms(20);
    }
    e = test_read_file(sv.err, NULL);
    const char *g = e ? strstr(e, "prompt 2 tokens") : NULL;
    int gen = -1;
    if (g) g = strstr(g, "prefilled), ");
    if (g) gen = (int)strtol(g + 12, NULL, 10);
    CHECKF(s && strstr(s, "\"finish_reason\":\"length\"") && strstr(s, "data: [DONE]") && gen > 0 && gen < 8000,
           "a stream when the server stopped (%d generated): %s", gen, s ? s + (strlen(s) > 300 ? strlen(s) - 300 : 0) : "");
    free(s);
    free(e);
    remove(sf);
}

/* -md: a server drafting with gemma4-micro's assistant gives the same greedy completion as
 * one without, and its log shows drafts made and accepted. */
TEST(serve_assistant_drafts_same_text) {
    const char *model, *why = cannot_serve(&model);
    if (why) SKIP("%s", why);
    NEED_SHARED(assistant, "models/gemma4-micro-assistant.gguf");
    char *text[3] = {NULL, NULL, NULL}, extra[2][1200];
    snprintf(extra[0], sizeof extra[0], "-md %s", assistant);
    snprintf(extra[1], sizeof extra[1], "--spec auto -md %s", assistant);   /* adaptive: drafts or not, the same text */
    const char *body = "{\"prompt\":\"= = Gameplay = =\\n\",\"max_tokens\":48,\"temperature\":0}";
    for (int k = 0; k < 3; k++) {
        server sv;
        if (!server_start(&sv, model, k ? extra[k - 1] : "")) break;
        char *b = NULL;
        int st = body_status(&b, "-H 'Content-Type: application/json' " AUTH URL "/v1/completions -d '%s'", sv.port, body);
        CHECKF(st == 200 && strstr(b, "\"completion_tokens\":48"), "%s: %d %s", k ? "-md" : "plain", st, b);
        text[k] = texts(b);
        free(b);
        if (k == 1) {
            char *e = test_read_file(sv.err, NULL);
            long long drafted = 0, accepted = 0;
            const char *l = e ? strstr(e, "generated, ") : NULL;
            CHECKF(l && sscanf(l, "generated, %lld drafted, %lld accepted", &drafted, &accepted) == 2 && drafted > 0 &&   // NOLINT(cert-err34-c): parses the server's own log; a bad parse fails the check
                   accepted > 0 && accepted <= drafted, "log: %s", e ? e : "");
            free(e);
        }
        server_stop(&sv);
    }
    CHECKF(text[0] && text[1] && text[2] && strlen(text[0]) > 20 && !strcmp(text[0], text[1]) && !strcmp(text[0], text[2]),
           "plain '%s', -md '%s', --spec auto -md '%s'", text[0] ? text[0] : "", text[1] ? text[1] : "",
           text[2] ? text[2] : "");
    for (int k = 0; k < 3; k++) free(text[k]);
}

TEST(serve_http_errors_and_slots) {
    const char *model, *why = cannot_serve(&model);
    if (why) SKIP("%s", why);
    server sv;
    if (!server_start(&sv, model, "--parallel 3 --queue 2")) return;
    const int p = sv.port;
    char *b = NULL;
    char chat[512], a[512], full[8192];   /* a: the completions endpoint */
    snprintf(chat, sizeof chat, "-H 'Content-Type: application/json' " AUTH URL "/v1/chat/completions", p);
    snprintf(a, sizeof a, "-H 'Content-Type: application/json' " AUTH URL "/v1/completions", p);

    /* health needs no key; the model list does */
    CHECKF(body_status(&b, URL "/health", p) == 200 && strstr(b, "\"status\":\"ok\"") && strstr(b, "\"slots_idle\":3"), "%s", b);
    free(b);
    CHECKF(body_status(&b, AUTH URL "/v1/models", p) == 200 && strstr(b, "\"id\":\"gemma4-micro.gguf\""), "%s", b);
    free(b);
    snprintf(full, sizeof full, URL "/v1/models", p);
    check_error(&sv, 401, "API key", full);
    snprintf(full, sizeof full, "-H 'Authorization: Bearer wrong' " URL "/v1/models", p);
    check_error(&sv, 401, "API key", full);
    snprintf(full, sizeof full, URL "/v1/chat/completions -d '{\"messages\":[]}'", p);
    check_error(&sv, 401, "API key", full);

    /* malformed JSON, wrong types, unsupported content, too many stops */
    const struct { const char *body, *words; } bad[] = {
        {"{\"messages\":[", "malformed JSON"},
        {"[]", "must be a JSON object"},
        {"{\"messages\":\"hi\"}", "'messages' must be an array"},
        {"{}", "'messages' must be an array, got nothing"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":\"5\"}", "'max_tokens' must be a number"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2.5}", "'max_tokens' must be an integer"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"temperature\":7}", "'temperature' must be in"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"presence_penalty\":2.5}", "'presence_penalty' must be in [-2, 2]"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"top_k\":1.5}", "'top_k' must be an integer"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"repeat_last_n\":-2}", "'repeat_last_n' must be in"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":\"yes\"}", "'stream' must be a boolean"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream_options\":{\"include_usage\":1}}", "'include_usage' must be a boolean"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "more than 4"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":[1]}", "'stop[0]' must be a string"},
        {"{\"messages\":[{\"role\":\"tool\",\"content\":\"hi\"}]}", "'tool' messages need a Gemma 4 model"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
         "tools, tool calls and 'tool' messages need a Gemma 4 model"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":\"f\"}", "'tools' must be an array"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "'messages[0].content[0].type' 'image_url'"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":5}]}]}", "'messages[0].content[0].text' must be a string"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":7}]}", "'messages[0].content' must be a string or an array"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1e300}", "'max_tokens' must be in"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":0}", "'max_tokens' must be in [1,"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3} trailing", "malformed JSON"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}{}", "malformed JSON"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"n\":2}", "'n' of 2 is not supported"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"top_logprobs\":2}", "'top_logprobs' needs 'logprobs': true"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":true,\"top_logprobs\":21}", "'top_logprobs' must be in [0, 20]"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":1}", "'logprobs' must be a boolean"},
        /* cJSON ends a string at a NUL: the stop sequence was cut to "a", the text to "hi" */
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":[\"a\\u0000b\"]}", "u0000 at byte 55) is not supported"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\\u0000there\"}]}", "NUL character"},
        /* thinking: Gemma 4's alone (this model's format is the plain one) */
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"chat_template_kwargs\":{\"enable_thinking\":true}}",
         "this model has no Gemma 4 thinking"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"chat_template_kwargs\":5}", "'chat_template_kwargs' must be an object"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"chat_template_kwargs\":{\"enable_thinking\":1}}",
         "'enable_thinking' must be a boolean"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(full, sizeof full, "%s -d '%s'", chat, bad[i].body);
        check_error(&sv, 400, bad[i].words, full);
    }
    static const struct { const char *body, *words; } bad_completion[] = {
        {"{\"prompt\":5}", "'prompt' must be a string or an array of token ids (one prompt a request), got a number"},
        {"{\"prompt\":[]}", "got an empty array"},
        {"{\"prompt\":[[1],[2]]}", "got several prompts"},
        {"{\"prompt\":[\"a\",\"b\"]}", "'prompt[0]' must be a token id, got a string"},
        {"{\"prompt\":[1,-2]}", "'prompt[1]' must be a token id in [0, "},
        {"{\"prompt\":[1,2.5]}", "got 2.5"},
        {"{\"prompt\":[1,1e9]}", "got 1000000000"},
        {"{\"prompt\":\"hi\",\"logprobs\":21}", "'logprobs' must be in [0, 20]"},
        {"{\"prompt\":\"hi\",\"logprobs\":true}", "'logprobs' of a completion is a count of alternatives (0 to 20), got true"},
        {"{\"prompt\":\"hi\",\"logprobs\":\"2\"}", "'logprobs' must be a number"},
        {"{\"prompt\":\"hi\",\"echo\":1}", "'echo' must be a boolean"},
        {"{\"prompt\":\"hi\",\"max_tokens\":-1}", "'max_tokens' must be in [0,"},
        {"{\"prompt\":\"hi\",\"logit_bias\":[1]}", "'logit_bias' must be an object of token ids to biases, got an array"},
        {"{\"prompt\":\"hi\",\"logit_bias\":{\"x\":1}}", "'logit_bias' key 'x' is not a token id in [0, "},
        {"{\"prompt\":\"hi\",\"logit_bias\":{\"-1\":1}}", "'logit_bias' key '-1' is not a token id"},
        {"{\"prompt\":\"hi\",\"logit_bias\":{\"99999999\":1}}", "'logit_bias' key '99999999' is not a token id"},
        {"{\"prompt\":\"hi\",\"logit_bias\":{\"5\":101}}", "'logit_bias' of token 5 must be in [-100, 100], got 101"},
        {"{\"prompt\":\"hi\",\"logit_bias\":{\"5\":\"a\"}}", "'logit_bias' of token 5 must be a number, got a string"},
    };
    for (size_t i = 0; i < sizeof bad_completion / sizeof bad_completion[0]; i++) {
        snprintf(full, sizeof full, "%s -d '%s'", a, bad_completion[i].body);
        check_error(&sv, 400, bad_completion[i].words, full);
    }
    /* an escaped backslash before u0000 is text, not a NUL */
    CHECKF(body_status(&b, "%s -d '{\"prompt\":\"a\\\\u0000\",\"max_tokens\":2}'", a) == 200 &&
           strstr(b, "\"completion_tokens\":2"), "%s", b);
    free(b);
    /* a body that is not UTF-8 (JSON must be), and a role cut for the message on a character's
     * boundary: every error body parses as UTF-8 */
    char ub[1024];
    snprintf(ub, sizeof ub, "%s/latin1.json", test_tmpdir());
    FILE *uf = fopen(ub, "wb");
    if (uf) { fputs("{\"prompt\":\"caf\xe9\"}", uf); fclose(uf); }
    snprintf(full, sizeof full, "%s --data-binary @%s", a, ub);
    check_error(&sv, 400, "not UTF-8 (at byte 14 of 17)", full);
    uf = fopen(ub, "wb");
    if (uf) {
        fputs("{\"messages\":[{\"role\":\"", uf);
        for (int i = 0; i < 14; i++) fputs("\xe2\x82\xac", uf);   /* 14 euro signs: 42 bytes */
        fputs("\",\"content\":\"x\"}]}", uf);
        fclose(uf);
    }
    snprintf(full, sizeof full, "%s --data-binary @%s", chat, ub);
    {
        char *eb = NULL;
        CHECK(body_status(&eb, "%s", full) == 400);
        const char *r = eb ? strstr(eb, "' is not supported") : NULL;   /* 13 whole signs, nothing after */
        CHECKF(r && r - eb >= 3 && !memcmp(r - 3, "\xe2\x82\xac", 3), "a cut role: %s", eb ? eb : "");
        free(eb);
    }
    /* max_completion_tokens null stands for absent: max_tokens counts */
    CHECKF(body_status(&b, "%s -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                           "\"max_completion_tokens\":null,\"max_tokens\":3,\"temperature\":0}'", chat) == 200 &&
           strstr(b, "\"completion_tokens\":3"), "%s", b);
    free(b);
    /* a message's "</s>" (the end-of-sequence token's text) is text, not the control token */
    int pt[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        CHECK(body_status(&b, "%s -d '{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":1}'", chat,
                          k ? "</s>" : "") == 200);
        const char *u = b ? strstr(b, "\"prompt_tokens\":") : NULL;
        pt[k] = u ? (int)strtol(u + 16, NULL, 10) : -1;
        free(b);
    }
    CHECKF(pt[0] > 0 && pt[1] >= pt[0] + 3, "prompt tokens: empty message %d, '</s>' %d (want its 4 characters as text)",
           pt[0], pt[1]);
    /* the API key's scheme in any case; a 405 names the endpoint's own method */
    CHECKF(body_status(&b, "-H 'Authorization: bearer " KEY "' " URL "/v1/models", p) == 200, "%s", b);
    free(b);
    char hd[1024];
    snprintf(hd, sizeof hd, "%s/h405.txt", test_tmpdir());
    snprintf(full, sizeof full, "-D %s " AUTH URL "/v1/chat/completions", hd, p);
    check_error(&sv, 405, "takes POST, not GET", full);
    char *hs = test_read_file(hd, NULL);
    CHECKF(hs && strstr(hs, "Allow: POST\r"), "405 headers: %s", hs ? hs : "");
    free(hs);
    /* deep nesting, a prompt longer than the context (both lengths named), a body over the limit */
    char deep[6001];
    memset(deep, '[', 6000);
    deep[6000] = 0;
    snprintf(full, sizeof full, "%s -d %s", a, deep);
    check_error(&sv, 400, "malformed JSON", full);
    char lp[1024];
    snprintf(lp, sizeof lp, "%s/long.json", test_tmpdir());
    write_cats(lp, "", 3000);
    FILE *f;
    snprintf(full, sizeof full, "%s --data-binary @%s", a, lp);
    check_error(&sv, 400, "but the context holds 2048", full);
    check_error(&sv, 400, "the prompt has 6002 tokens", full);
    snprintf(lp, sizeof lp, "%s/big.json", test_tmpdir());
    if ((f = fopen(lp, "w"))) {
        for (int i = 0; i < 5 << 20; i += 64) fputs("                                                               \n", f);
        fclose(f);
    }
    snprintf(full, sizeof full, "%s --data-binary @%s", a, lp);
    check_error(&sv, 413, "over the limit", full);
    snprintf(full, sizeof full, "%s -H 'Transfer-Encoding: chunked' --data-binary @%s", a, lp);
    check_error(&sv, 413, "over the limit", full);
    remove(lp);
    /* unknown endpoint, wrong method */
    snprintf(full, sizeof full, AUTH URL "/v1/engines", p);
    check_error(&sv, 404, "no endpoint GET /v1/engines", full);
    snprintf(full, sizeof full, AUTH URL "/v1/chat/completions", p);
    check_error(&sv, 405, "takes POST, not GET", full);
    snprintf(full, sizeof full, "-X DELETE " AUTH URL "/v1/models", p);
    check_error(&sv, 405, "takes GET, not DELETE", full);

    /* 60 mutated bodies (bytes replaced at random, some cut short): a 200 or a 400 each, never a crash */
    const char *good[2] = {"{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
                           "[{\"type\":\"text\",\"text\":\"Hi there\"}]}],\"max_tokens\":3,\"stop\":[\"x\"],\"seed\":4}",
                           "{\"prompt\":\"The dog\",\"max_tokens\":3,\"temperature\":0.5,\"top_p\":0.9,\"stop\":\"zz\"}"};
    char mp[1024];
    snprintf(mp, sizeof mp, "%s/mutated.json", test_tmpdir());
    uint32_t rng = 7;
    for (int i = 0; i < 60; i++) {
        const char *g = good[i % 2];
        size_t n = strlen(g);
        char m[512];
        snprintf(m, sizeof m, "%s", g);
        for (int k = 0; k <= i % 4; k++) {
            rng = rng * 1103515245u + 12345u;
            m[(rng >> 8) % n] = (char)(rng >> 24);
        }
        if (i % 7 == 6) n = (rng >> 4) % n;
        if ((f = fopen(mp, "wb"))) { fwrite(m, 1, n, f); fclose(f); }
        int status = body_status(&b, "%s --data-binary @%s", i % 2 ? a : chat, mp);
        CHECKF(status == 200 || status == 400, "mutated body %d: status %d: %s", i, status, b);
        free(b);
    }
    CHECKF(body_status(&b, URL "/health", p) == 200, "the server is gone after the mutated bodies");
    free(b);

    /* a stop sequence spanning tokens: the text up to it, plain and streamed */
    const char *once = "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0";
    CHECK(body_status(&b, "%s -d '%s}'", a, once) == 200);
    char *all = texts(b);
    free(b);
    const char *stop = "l named Li";
    const char *at = all ? strstr(all, stop) : NULL;
    CHECKF(at, "the greedy text has no '%s': %s", stop, all ? all : "");
    for (int stream = 0; at && stream < 2; stream++) {
        CHECK(body_status(&b, "%s -d '%s,\"stop\":[\"zzz\",\"%s\"],\"stream\":%s}'", a, once, stop, stream ? "true" : "false") == 200);
        char *t = texts(b);
        CHECKF(t && strlen(t) == (size_t)(at - all) && !strncmp(t, all, strlen(t)) &&
               strstr(b, "\"finish_reason\":\"stop\"") && (!stream || strstr(b, "data: [DONE]")),
               "stop (stream %d): '%s' of '%s': %s", stream, t ? t : "", all, b);
        free(t);
        free(b);
    }
    free(all);

    /* all 3 slots busy and 2 requests queued: the next one gets 503 with Retry-After; the
     * clients go away and the slots are free again at once */
    char pids[1024];
    snprintf(pids, sizeof pids, "%s/curl.pids", test_tmpdir());
    int rc;
    free(test_sh(&rc, "rm -f %s; for i in 1 2 3 4 5; do curl -s -N %s -d '{\"prompt\":\"= = Gameplay = =\",\"max_tokens\":2000,"
                 "\"stream\":true,\"temperature\":0}' >/dev/null 2>&1 & echo $! >> %s; done", pids, a, pids));
    bool full_now = false;
    for (int i = 0; i < 400 && !full_now; i++) {
        body_status(&b, URL "/health", p);
        full_now = strstr(b, "\"slots_processing\":3,\"queued\":2") != NULL;
        free(b);
        if (!full_now) sleep_ms(10);
    }
    CHECKF(full_now, "the slots and the queue did not fill");
    char hdr[1024];
    snprintf(hdr, sizeof hdr, "%s/headers.txt", test_tmpdir());
    snprintf(full, sizeof full, "-D %s %s -d '{\"prompt\":\"hi\",\"max_tokens\":2}'", hdr, a);
    check_error(&sv, 503, "all 3 slots are busy", full);
    char *h = test_read_file(hdr, NULL);
    CHECKF(h && strstr(h, "Retry-After: 1"), "503 headers: %s", h ? h : "");
    free(h);
    free(test_sh(&rc, "kill $(cat %s) 2>/dev/null", pids));
    double t0 = now_ms();
    bool idle = false;
    while (!idle && now_ms() - t0 < 5000) {
        body_status(&b, URL "/health", p);
        idle = strstr(b, "\"slots_idle\":3,\"slots_processing\":0,\"queued\":0") != NULL;
        free(b);
        if (!idle) sleep_ms(10);
    }
    CHECKF(idle, "the slots were not freed within 5 s of the clients going away");
    /* the 3 streams were cut short; so was a queued one that took a freed slot before its
     * client's end was seen (a race: 0-2 of them) */
    const int streams = count_cut(sv.err);
    CHECKF(streams >= 3 && streams <= 5, "%d streams cut short (want the 3 in the slots, and up to 2 queued)", streams);
    /* a non-streaming client that gives up after 0.3 s: its generation is cut short too */
    free(test_sh(&rc, "curl -s --max-time 0.3 %s -d '{\"prompt\":\"= = Gameplay = =\",\"max_tokens\":2000,\"temperature\":0}' >/dev/null 2>&1", a));
    t0 = now_ms();
    int cut = 0;
    while ((cut = count_cut(sv.err)) < streams + 1 && now_ms() - t0 < 5000) sleep_ms(10);
    CHECKF(cut == streams + 1, "%d generations cut short after the plain request (want %d)", cut, streams + 1);
    /* and the server still answers */
    CHECKF(body_status(&b, "%s -d '{\"prompt\":\"The cat\",\"max_tokens\":3}'", a) == 200 &&
           strstr(b, "\"completion_tokens\":3"), "%s", b);
    free(b);
    server_stop(&sv);
}

TEST(serve_openai_client) {
    const char *model, *why = cannot_serve(&model);
    if (why) SKIP("%s", why);
    struct stat st;
    int rc;
    char *o = test_sh(&rc, "command -v node >/dev/null 2>&1 && echo yes");
    bool node = strstr(o, "yes") != NULL;
    free(o);
    if (!node) SKIP("node absent");
    if (stat("tests/node/node_modules/openai/package.json", &st) != 0)
        SKIP("tests/node/node_modules/openai absent (npm ci --prefix tests/node)");
    server sv;
    if (!server_start(&sv, model, "--parallel 3")) return;
    o = test_sh(&rc, "node tests/node/client.mjs http://127.0.0.1:%d/v1 " KEY " gemma4-micro.gguf 2>&1", sv.port);
    CHECKF(rc == 0 && !strstr(o, "FAIL"), "client.mjs (exit %d):\n%s", rc, o);
    free(o);
    server_stop(&sv);
}

/* response_format json_schema with bounds (lengths, item counts, ranges; through anyOf and $ref),
 * patterns and formats:
 * sampled replies through the openai client, each checked by Ajv (tests/node/schemas.mjs), a JSON
 * Schema validator that is no part of hachi */
TEST(serve_json_schema_ajv) {
    const char *model, *why = cannot_serve(&model);
    if (why) SKIP("%s", why);
    struct stat st;
    int rc;
    char *o = test_sh(&rc, "command -v node >/dev/null 2>&1 && echo yes");
    const bool node = strstr(o, "yes") != NULL;
    free(o);
    if (!node) SKIP("node absent");
    if (stat("tests/node/node_modules/ajv/package.json", &st) != 0 || stat("tests/node/node_modules/openai/package.json", &st) != 0 ||
        stat("tests/node/node_modules/ajv-formats/package.json", &st) != 0)
        SKIP("tests/node/node_modules/ajv, ajv-formats or openai absent (npm ci --prefix tests/node)");
    server sv;
    if (!server_start(&sv, model, "")) return;
    o = test_sh(&rc, "node tests/node/schemas.mjs http://127.0.0.1:%d/v1 " KEY " gemma4-micro.gguf 2>&1", sv.port);
    CHECKF(rc == 0 && !strstr(o, "FAIL") && strstr(o, "ok   pydantic") && strstr(o, "ok   multiples") &&
               strstr(o, "ok   patterns") && strstr(o, "ok   intersections") &&
               strstr(o, "ok   tuples:") && strstr(o, "ok   tuples07") && strstr(o, "ok   maps"), "schemas.mjs (exit %d):\n%s", rc, o);
    free(o);
    server_stop(&sv);
}

static char *field_texts(const char *b, const char *field);

/* --seed is the seed of the requests that give none: the same sampled text each time (it was
 * ignored: a fresh seed each request); a request's own seed still overrides it */
TEST(serve_seed_flag) {
    const char *model, *why = cannot_serve(&model);
    if (why) SKIP("%s", why);
    server sv;
    if (!server_start(&sv, model, "--seed 5 --temp 1")) return;
    char a[512], *t[3] = {NULL, NULL, NULL}, *b = NULL;
    snprintf(a, sizeof a, "-H 'Content-Type: application/json' " AUTH URL "/v1/completions", sv.port);
    for (int i = 0; i < 3; i++) {
        const char *seed = i == 2 ? ",\"seed\":6" : "";
        CHECK(body_status(&b, "%s -d '{\"prompt\":\"Once upon a time\",\"max_tokens\":24%s}'", a, seed) == 200);
        t[i] = texts(b);
        free(b);
    }
    CHECKF(t[0] && t[1] && t[2] && !strcmp(t[0], t[1]) && strcmp(t[0], t[2]), "'%s' / '%s' / seed 6: '%s'", t[0], t[1], t[2]);
    for (int i = 0; i < 3; i++) free(t[i]);
    /* the other sampling fields reach the sampler: top_k 1 and min_p 1 at temperature 1 are greedy;
     * the penalties give what `hachi run` gives with the same flags, and not the greedy text */
    static const char *const fields[] = {
        "\"temperature\":0",
        "\"temperature\":1,\"top_k\":1",
        "\"temperature\":1,\"top_k\":0,\"top_p\":1,\"min_p\":1",
        "\"temperature\":0,\"frequency_penalty\":1.5,\"presence_penalty\":0.5,\"repeat_penalty\":1.3,\"repeat_last_n\":-1",
    };
    char *g[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < 4; i++) {
        CHECK(body_status(&b, "%s -d '{\"prompt\":\"Once upon a time\",\"max_tokens\":40,%s}'", a, fields[i]) == 200);
        g[i] = texts(b);
        free(b);
    }
    int rc = 0;
    char *run = test_sh(&rc, "%s run -m %s -p 'Once upon a time' -n 40 --temp 0 --frequency-penalty 1.5 --presence-penalty 0.5 "
                             "--repeat-penalty 1.3 --repeat-last-n 2048 2>/dev/null", test_hachi_bin(), model);
    const char *pen = run && !strncmp(run, "Once upon a time", 16) ? run + 16 : "";
    CHECKF(g[0] && g[1] && g[2] && strlen(g[0]) > 20 && !strcmp(g[0], g[1]) && !strcmp(g[0], g[2]),
           "greedy '%s', top_k 1 '%s', min_p 1 '%s'", g[0], g[1], g[2]);
    CHECKF(rc == 0 && g[3] && strcmp(g[3], g[0]) && !strncmp(pen, g[3], strlen(g[3])) && strlen(pen) <= strlen(g[3]) + 1,
           "penalized '%s', run '%s', greedy '%s'", g[3], pen, g[0]);
    free(run);
    /* a generated NUL byte (token 3, <0x00>, raised) is text: \u0000 in the reply as in the stream (it cut the reply short) */
    for (int stream = 0; stream < 2; stream++) {
        CHECK(body_status(&b, "%s -d '{\"prompt\":\"abc\",\"max_tokens\":3,\"temperature\":0,\"logit_bias\":{\"3\":100}%s}'", a,
                          stream ? ",\"stream\":true" : "") == 200);
        const char *t = strstr(b, "\\u0000");
        const char *t2 = t ? strstr(t + 6, "\\u0000") : NULL, *t3 = t2 ? strstr(t2 + 6, "\\u0000") : NULL;
        CHECKF(stream ? t3 != NULL : strstr(b, "\"text\":\"\\u0000\\u0000\\u0000\"") != NULL, "stream %d: %s", stream, b);
        free(b);
    }
    /* logit_bias: ',' (432) banned and ' there' (383) down gives what `hachi run --logit-bias` gives, not
     * the greedy text; a token given twice keeps its last bias */
    CHECK(body_status(&b, "%s -d '{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0,"
                          "\"logit_bias\":{\"383\":50,\"432\":-100,\"383\":-3}}'", a) == 200);
    char *biased = field_texts(b, "text");
    free(b);
    run = test_sh(&rc, "%s run -m %s -p 'Once upon a time' -n 40 --temp 0 --logit-bias 432-100 --logit-bias 383-3 2>/dev/null",
                  test_hachi_bin(), model);
    pen = run && !strncmp(run, "Once upon a time", 16) ? run + 16 : "";
    CHECKF(rc == 0 && biased && strcmp(biased, g[0]) && !strchr(biased, ',') && !strncmp(pen, biased, strlen(biased)) &&
           strlen(pen) <= strlen(biased) + 1, "biased '%s', run '%s', greedy '%s'", biased, pen, g[0]);
    free(run);
    for (int i = 0; i < 4; i++) free(g[i]);
    server_stop(&sv);
    /* the server's --logit-bias for requests without logit_bias; a request's, even {}, in its place */
    if (!server_start(&sv, model, "--logit-bias 432-100 --logit-bias 383-3")) { free(biased); return; }
    snprintf(a, sizeof a, "-H 'Content-Type: application/json' " AUTH URL "/v1/completions", sv.port);
    char *t2[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        CHECK(body_status(&b, "%s -d '{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0%s}'", a,
                          i ? ",\"logit_bias\":{}" : "") == 200);
        t2[i] = field_texts(b, "text");
        free(b);
    }
    CHECKF(t2[0] && t2[1] && biased && !strcmp(t2[0], biased) && strcmp(t2[1], biased) && strchr(t2[1], ','),
           "--logit-bias: '%s'; with {}: '%s'", t2[0], t2[1]);
    free(t2[0]);
    free(t2[1]);
    free(biased);
    server_stop(&sv);
}

#ifndef HACHI_NO_SERVE
/* log(sum(exp(row[0..n)))) in long double */
static long double log_sum_exp(const float *row, int n) {
    long double mx = row[0], z = 0;
    for (int i = 1; i < n; i++) mx = row[i] > mx ? row[i] : mx;
    for (int i = 0; i < n; i++) z += expl((long double)row[i] - mx);
    return mx + logl(z > 1 ? z : 1);   /* (z >= 1: the largest logit's own term) */
}

/* A completion's logprobs object: parsed from a 200 response, else NULL (the body in the failure) */
static cJSON *completion_logprobs(const char *b, int st, cJSON **doc) {
    *doc = st == 200 ? cJSON_Parse(b) : NULL;
    cJSON *lp = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(*doc, "choices"), 0), "logprobs");
    CHECKF(cJSON_IsObject(lp), "status %d: %s", st, b);
    return cJSON_IsObject(lp) ? lp : NULL;
}

/* /v1/completions' logprobs, in OpenAI's completion form, with echo: on gemma4-tiny (F32, f32 KV)
 * a prompt of the oracle's 80 token ids comes back with each token's log-probability under the
 * float64 reference's logits of the row before it (the first: null), the top alternatives among
 * its likeliest, and the generated token's after them; on gemma4-micro a string prompt's tokens
 * make up its text at their text_offsets, max_tokens 0 gives the prompt alone, and a stop
 * sequence in the echoed prompt stops nothing. */
TEST(serve_completion_logprobs_echo) {
    const char *model, *why = cannot_serve(&model);
    if (why) SKIP("%s", why);
    const char *tiny = test_shared_path("oracle/gemma4-tiny.gguf"), *tok_path = test_shared_path("oracle/gemma4-tiny.tokens.txt"),
               *ref_path = test_shared_path("oracle/gemma4-tiny.ref64.logits.f32");
    if (!tiny || !tok_path || !ref_path) SKIP("../shared/oracle's gemma4-tiny files absent");
    size_t rl = 0;
    char *raw = test_read_file(ref_path, &rl), *toks = test_read_file(tok_path, NULL);
    float *ref = raw ? malloc(rl + 1) : NULL;
    if (ref) memcpy(ref, raw, rl);
    free(raw);
    CHECK(ref && rl == sizeof(float) * 80 * 1024 && toks);
    int ids[80], n = 0;
    char body[4096];
    int o = snprintf(body, sizeof body, "{\"prompt\":[");
    for (char *p = toks, *e; p && n < 80; p = e, n++) {
        ids[n] = (int)strtol(p, &e, 10);
        if (e == p) break;
        o += snprintf(body + o, sizeof body - (size_t)o, "%s%d", n ? "," : "", ids[n]);
    }
    snprintf(body + o, sizeof body - (size_t)o, "],\"echo\":true,\"logprobs\":3,\"max_tokens\":1,\"temperature\":0}");
    CHECK(n == 80);
    char file[1024];
    snprintf(file, sizeof file, "%s/echo.json", test_tmpdir());
    FILE *f = fopen(file, "w");
    if (f) { fputs(body, f); fclose(f); }
    server sv;
    char a[512], *b = NULL;
    cJSON *doc = NULL;
    if (ref && toks && n == 80 && server_start(&sv, tiny, "--kv-f32 -c 2048 -t 2")) {
        snprintf(a, sizeof a, "-H 'Content-Type: application/json' " AUTH URL "/v1/completions", sv.port);
        const int st = body_status(&b, "%s -d @%s", a, file);
        const cJSON *lp = completion_logprobs(b, st, &doc);
        const cJSON *tl = cJSON_GetObjectItem(lp, "token_logprobs"), *top = cJSON_GetObjectItem(lp, "top_logprobs"),
                    *offs = cJSON_GetObjectItem(lp, "text_offset");
        CHECKF(cJSON_GetArraySize(tl) == 81 && cJSON_GetArraySize(top) == 81 && cJSON_GetArraySize(offs) == 81 &&
               cJSON_GetArraySize(cJSON_GetObjectItem(lp, "tokens")) == 81, "%s", b);
        CHECK(cJSON_IsNull(cJSON_GetArrayItem(tl, 0)) && cJSON_IsNull(cJSON_GetArrayItem(top, 0)));
        double worst = 0, worst_top = 0;
        for (int i = 1; i <= 80 && cJSON_GetArraySize(tl) == 81; i++) {
            const float *row = ref + (size_t)(i - 1) * 1024;
            const long double lse = log_sum_exp(row, 1024);
            int best = 0;
            for (int j = 1; j < 1024; j++) best = row[j] > row[best] ? j : best;
            const int id = i < 80 ? ids[i] : best;   /* (the generated token: greedy) */
            worst = fmax(worst, fabs(cJSON_GetArrayItem(tl, i)->valuedouble - (double)(row[id] - lse)));
            double top_max = -INFINITY;   /* the likeliest alternative is the reference's */
            const cJSON *x;
            cJSON_ArrayForEach(x, cJSON_GetArrayItem(top, i)) top_max = fmax(top_max, x->valuedouble);
            worst_top = fmax(worst_top, fabs(top_max - (double)(row[best] - lse)));
            const int na = cJSON_GetArraySize(cJSON_GetArrayItem(top, i));   /* (a text once: byte tokens share U+FFFD) */
            CHECKF(na >= 1 && na <= 4, "row %d: %d alternatives", i, na);
            CHECK(cJSON_GetArrayItem(offs, i)->valueint >= cJSON_GetArrayItem(offs, i - 1)->valueint);
        }
        printf("  echo logprobs against ref64: max |d| %.2e (tokens), %.2e (likeliest)\n", worst, worst_top);
        CHECKF(worst < 2e-3 && worst_top < 2e-3, "log-probabilities %.3g / %.3g from the float64 reference", worst, worst_top);
        cJSON_Delete(doc);
        free(b);
        server_stop(&sv);
    }
    remove(file);
    free(ref);
    free(toks);
    /* gemma4-micro: a string prompt's tokens at their offsets; max_tokens 0; a stop in the prompt */
    if (!server_start(&sv, model, "")) return;
    snprintf(a, sizeof a, "-H 'Content-Type: application/json' " AUTH URL "/v1/completions", sv.port);
    static const char prompt[] = "Once upon a time, the little cat sat";
    int st = body_status(&b, "%s -d '{\"prompt\":\"%s\",\"echo\":true,\"logprobs\":1,\"max_tokens\":6,\"temperature\":0,"
                             "\"stop\":\"Once\"}'", a, prompt);
    const cJSON *lp = completion_logprobs(b, st, &doc);
    const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "choices"), 0), "text"));
    const cJSON *tk = cJSON_GetObjectItem(lp, "tokens"), *offs = cJSON_GetObjectItem(lp, "text_offset"), *x;
    CHECKF(text && !strncmp(text, prompt, strlen(prompt)) && strlen(text) > strlen(prompt), "text '%s'", text ? text : "");
    size_t at = 0;
    int i = 0;
    cJSON_ArrayForEach(x, tk) {   /* (ASCII: characters are bytes) */
        const char *t = cJSON_GetStringValue(x);   /* (the BOS the server added: "", as in the text) */
        CHECKF(text && t && cJSON_GetArrayItem(offs, i)->valueint == (int)at && !strncmp(text + at, t, strlen(t)),
               "token %d '%s' at %d, want %zu", i, t ? t : "", cJSON_GetArrayItem(offs, i)->valueint, at);
        at += t ? strlen(t) : 0;
        i++;
    }
    CHECKF(text && at == strlen(text), "the tokens make %zu bytes of %zu", at, text ? strlen(text) : 0);
    cJSON_Delete(doc);
    free(b);
    CHECK(body_status(&b, "%s -d '{\"prompt\":\"%s\",\"echo\":true,\"max_tokens\":0}'", a, prompt) == 200 &&
          strstr(b, "\"text\":\"Once upon a time, the little cat sat\"") && strstr(b, "\"completion_tokens\":0") &&
          strstr(b, "\"logprobs\":null"));
    free(b);
    /* a character split into byte tokens: the same text_offsets whether the prompt comes as its
     * string or as its token ids (the string's added BOS aside) */
    long got[2][16];
    int n_offs[2] = {0, 0};
    for (int ids = 0; ids < 2; ids++) {
        st = body_status(&b, "%s -d '{\"prompt\":%s,\"echo\":true,\"logprobs\":0,\"max_tokens\":0}'", a,
                         ids ? "[261,410,243,160,135,161,268]" : "\"a \xF0\x9D\x84\x9E b\"");   /* (" a", " ", 4 bytes, " b") */
        lp = completion_logprobs(b, st, &doc);
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(lp, "text_offset"))
            if (n_offs[ids] < 16) got[ids][n_offs[ids]++] = x->valueint;
        cJSON_Delete(doc);
        free(b);
    }
    CHECKF(n_offs[0] == 8 && n_offs[1] == 7 && !memcmp(got[0] + 1, got[1], 7 * sizeof(long)) && got[1][3] == 3 &&
           got[1][6] == 3, "%d and %d offsets", n_offs[0], n_offs[1]);
    /* a stop sequence cuts the entries with the text: the tokens join to it, streamed or not (they went
     * past it: " the", " ", "re", "st" for " the ") */
    char *joined[2] = {NULL, NULL};
    for (int stream = 0; stream < 2; stream++) {
        st = body_status(&b, "%s -d '{\"prompt\":\"Hello world, this is\",\"max_tokens\":8,\"temperature\":0,\"logprobs\":0,"
                             "\"stop\":[\"rest\"]%s}'", a, stream ? ",\"stream\":true" : "");
        char tokens[1024] = "", text[1024] = "";
        size_t nt = 0, nx = 0;
        for (const char *l = b; st == 200 && l && (l = strstr(l, "{\"id\"")); l++) {   /* each response or event */
            cJSON *ev = cJSON_ParseWithOpts(l, NULL, false);
            const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(ev, "choices"), 0), *x;
            const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(c, "text"));
            if (t) nx += (size_t)snprintf(text + nx, sizeof text - nx, "%s", t);
            cJSON_ArrayForEach(x, cJSON_GetObjectItem(cJSON_GetObjectItem(c, "logprobs"), "tokens"))
                nt += (size_t)snprintf(tokens + nt, sizeof tokens - nt, "%s", x->valuestring);
            nx = CLI_MIN(nx, sizeof text - 1);
            nt = CLI_MIN(nt, sizeof tokens - 1);
            cJSON_Delete(ev);
        }
        CHECKF(st == 200 && !strcmp(tokens, text) && *text, "stream %d: tokens '%s', text '%s'", stream, tokens, text);
        joined[stream] = strdup(text);
        free(b);
    }
    CHECK(joined[0] && joined[1] && !strcmp(joined[0], joined[1]));
    free(joined[0]);
    free(joined[1]);
    /* without echo: text_offset from the reply's start; logprobs 0 gives the token itself */
    st = body_status(&b, "%s -d '{\"prompt\":\"%s\",\"logprobs\":0,\"max_tokens\":4}'", a, prompt);
    lp = completion_logprobs(b, st, &doc);
    CHECKF(cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "text_offset"), 0) &&
           cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "text_offset"), 0)->valueint == 0 &&
           cJSON_GetArraySize(cJSON_GetArrayItem(cJSON_GetObjectItem(lp, "top_logprobs"), 0)) == 1, "%s", b);
    cJSON_Delete(doc);
    free(b);
    server_stop(&sv);
}
#endif

#ifndef HACHI_NO_SERVE
/* A chat reply's content and finish_reason (malloc'd; NULL for a response that is not a reply) */
static char *chat_content(const char *b, char **finish) {
    cJSON *doc = cJSON_Parse(b), *c = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "choices"), 0);
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content"));
    const char *f = cJSON_GetStringValue(cJSON_GetObjectItem(c, "finish_reason"));
    char *out = t ? strdup(t) : NULL;
    *finish = f ? strdup(f) : NULL;
    cJSON_Delete(doc);
    return out;
}

/* A reply to the PERSON schema, checked with cJSON: an object of name (a string), age (an integer)
 * and pet ("cat" or "dog"), then maybe tags (strings) and note (a string or null), in that order */
#define PERSON "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}," \
               "\"pet\":{\"enum\":[\"cat\",\"dog\"]},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}," \
               "\"note\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}},\"required\":[\"name\",\"age\",\"pet\"]}"
static bool is_person(const cJSON *o) {
    static const char *const order[] = {"name", "age", "pet", "tags", "note"};
    const cJSON *e, *x, *obj = cJSON_IsObject(o) ? o : NULL;
    int at = 0, n = 0;
    cJSON_ArrayForEach(e, obj) {
        while (at < 5 && strcmp(order[at], e->string)) at++;
        if (at == 5) return false;
        n++;
    }
    const char *pet = cJSON_GetStringValue(cJSON_GetObjectItem(o, "pet"));
    const cJSON *age = cJSON_GetObjectItem(o, "age"), *tags = cJSON_GetObjectItem(o, "tags"), *note = cJSON_GetObjectItem(o, "note");
    bool ok = n >= 3 && cJSON_IsString(cJSON_GetObjectItem(o, "name")) && cJSON_IsNumber(age) && age->valuedouble == floor(age->valuedouble) &&
              pet && (!strcmp(pet, "cat") || !strcmp(pet, "dog")) && (!note || cJSON_IsString(note) || cJSON_IsNull(note));
    cJSON_ArrayForEach(x, tags) ok &= cJSON_IsString(x);
    return ok && (!tags || cJSON_IsArray(tags));
}

/* response_format on gemma4-micro (a story model; '}' and '"' raised by logit biases so that
 * strings and objects close): json_object and json_schema (PERSON); every reply is the format's
 * JSON as far as it goes, one that ends by itself ("stop") is whole (an object; a PERSON as cJSON
 * reads it), the same requests without the format are not JSON, and drafts give the same replies */
TEST(serve_json_response_format) {
    const char *model, *why = cannot_serve(&model);
    if (why) SKIP("%s", why);
    enum { SEEDS = 6 };
    static const char *const formats[2] = {"{\"type\":\"json_object\"}",
                                           "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person\",\"schema\":" PERSON "}}"};
    char *got[2][2][SEEDS] = {{{NULL}}};
    int stops[2] = {0, 0}, whole[2] = {0, 0};
    for (int run = 0; run < 2; run++) {   /* without drafts, then with prompt lookup's */
        server sv;
        if (!server_start(&sv, model, run ? "--draft 4" : "")) break;
        char a[512], *b = NULL, *fin = NULL;
        snprintf(a, sizeof a, "-H 'Content-Type: application/json' " AUTH URL "/v1/chat/completions", sv.port);
        for (int f = 0; f < 2; f++) {
            serve_req rq;   /* (the format's schema, compiled as the server does, to walk the replies) */
            char body[2048], err[512];
            snprintf(body, sizeof body, "{\"prompt\":\"hi\",\"response_format\":%s}", formats[f]);
            if (!serve_parse(body, strlen(body), false, NULL, &rq, err, sizeof err)) { CHECKF(0, "%s", err); continue; }
            for (int i = 0; i < SEEDS; i++) {
                CHECK(body_status(&b, "%s -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me about a cat\"}],"
                                      "\"max_tokens\":200,\"temperature\":1,\"seed\":%d,\"logit_bias\":{\"128\":%d,\"436\":%d},"
                                      "\"response_format\":%s}'", a, i + 1, f ? 4 : 6, f ? 5 : 0, formats[f]) == 200);
                char *t = got[f][run][i] = chat_content(b, &fin);
                json_state st;
                json_state_init(&st, rq.schema);
                CHECKF(t && json_state_feed(&st, t, strlen(t)), "format %d seed %d: not its JSON: %s", f, i + 1, b);
                if (run == 0 && t && fin && !strcmp(fin, "stop")) {
                    cJSON *o = cJSON_Parse(t);
                    stops[f]++;
                    whole[f] += json_state_done(&st) && (f ? is_person(o) : cJSON_IsObject(o));
                    cJSON_Delete(o);
                }
                free(fin);
                free(b);
                if (run == 1) CHECKF(t && got[f][0][i] && !strcmp(t, got[f][0][i]), "format %d seed %d: with drafts '%s', without '%s'",
                                     f, i + 1, t ? t : "", got[f][0][i] ? got[f][0][i] : "");
            }
            serve_req_free(&rq);
        }
        if (run == 0) {   /* without the format: not JSON */
            CHECK(body_status(&b, "%s -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me about a cat\"}],"
                                  "\"max_tokens\":40,\"temperature\":1,\"seed\":1,\"logit_bias\":{\"128\":6}}'", a) == 200);
            char *t = chat_content(b, &fin);
            json_schema *obj = json_schema_object();
            json_state st;
            if (obj) json_state_init(&st, obj);
            CHECKF(obj && t && !json_state_feed(&st, t, strlen(t)), "without response_format: '%s'", t ? t : "");
            json_schema_free(obj);
            free(t);
            free(fin);
            free(b);
            static const struct { const char *rf, *words; } bad[] = {
                {"{\"type\":\"json_schema\",\"json_schema\":{}}", "'response_format.json_schema.schema' is missing"},
                {"{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"allOf\":[]}}}", "allOf' must be a non-empty array of schemas"},
                {"{\"type\":\"xml\"}", "'response_format.type' 'xml' is not supported (text, json_object and json_schema are)"},
                {"{}", "got no type"},
                {"\"json\"", "got a string"},
            };
            char full[2048];   /* a reply that continues an assistant message: refused */
            snprintf(full, sizeof full, "%s -d '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\","
                     "\"content\":\"{\\\"a\\\": \\\"b\"}],\"response_format\":{\"type\":\"json_object\"}}'", a);
            check_error(&sv, 400, "with a reply that continues the last assistant message is not supported", full);
            for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
                char full[2048];
                snprintf(full, sizeof full, "%s -d '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"response_format\":%s}'",
                         a, bad[k].rf);
                check_error(&sv, 400, bad[k].words, full);
            }
        }
        server_stop(&sv);
    }
    printf("  json_object: %d of %d replies ended by themselves, %d whole objects; json_schema: %d, %d whole PERSONs\n",
           stops[0], SEEDS, whole[0], stops[1], whole[1]);
    CHECKF(stops[0] > 0 && whole[0] == stops[0] && stops[1] > 0 && whole[1] == stops[1], "json_object %d / %d, json_schema %d / %d",
           stops[0], whole[0], stops[1], whole[1]);
    for (int f = 0; f < 2; f++)
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < SEEDS; i++) free(got[f][r][i]);
}
#endif

/* the values of a JSON string field in a body (a response, or a stream's events) concatenated,
 * unescaped as far as \" \\ \n go */
static char *field_texts(const char *b, const char *field) {
    char key[64];
    snprintf(key, sizeof key, "\"%s\":\"", field);
    size_t n = 0, kl = strlen(key);
    char *out = calloc(1, strlen(b) + 1);
    for (const char *p = b; out && (p = strstr(p, key)); ) {
        p += kl;
        for (; *p && *p != '"'; p++) {
            if (*p == '\\' && p[1]) p++, out[n++] = *p == 'n' ? '\n' : *p;
            else out[n++] = *p;
        }
    }
    return out;
}

/* A chat reply's thought goes to reasoning_content, streamed or not, and its answer to content; a
 * tool call that does not parse stays in the content, after the rest. The models: gemma4-micro with
 * its ',' and '.' tokens renamed Gemma 4's thought markers <|channel> and <channel|>, then its tool
 * call markers <|tool_call> and <tool_call|> (control tokens; the same ids, so the same greedy
 * tokens): the reply of the unchanged model, split at its ',' and '.' (the only pieces holding
 * either character), is what the changed ones must give. */
TEST(serve_thoughts_and_calls_apart) {
    const char *model, *why = cannot_serve(&model);
    if (why) SKIP("%s", why);
    static const int32_t ids[2] = {432, 426};
    char *probe = test_sh(&(int){0}, "%s tokenize -m %s -p ',.' --ids 2>&1", test_hachi_bin(), model);
    const bool ids_right = strstr(probe, "432 426") != NULL;
    free(probe);
    if (!ids_right) { CHECKF(0, "gemma4-micro's ',' and '.' are not ids 432 and 426"); return; }
    const char *req = "-d '{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}],\"max_tokens\":60,"
                      "\"temperature\":0%s}'";
    char chat[512], args[1024], full[2048], *b = NULL;
    server sv;
    if (!server_start(&sv, model, "")) return;
    snprintf(chat, sizeof chat, "-H 'Content-Type: application/json' " AUTH URL "/v1/chat/completions", sv.port);
    snprintf(args, sizeof args, req, "");
    snprintf(full, sizeof full, "%s %s", chat, args);
    CHECK(body_status(&b, "%s", full) == 200);
    char *plain = field_texts(b, "content");
    free(b);
    server_stop(&sv);
    char want[2][1024] = {"", ""};
    size_t wn[2] = {0, 0};
    int in = 0, blocks = 0;
    for (const char *p = plain; p && *p && wn[0] < 1000 && wn[1] < 1000; p++) {
        if (*p == ',') { in = 1; blocks++; }
        else if (*p == '.') in = 0;
        else want[in][wn[in]++] = *p;
    }
    CHECKF(blocks > 0 && wn[1] > 0, "the plain reply has no ',': nothing to route ('%s')", plain);
    for (int kind = 0; kind < 2; kind++) {   /* thoughts, tool calls */
        static const char *const pieces[2][2] = {{"<|channel>", "<channel|>"}, {"<|tool_call>", "<tool_call|>"}};
        char path[1024];
        snprintf(path, sizeof path, "%s/micro-%s.gguf", test_tmpdir(), kind ? "calls" : "thoughts");
        if (!test_gguf_control_tokens(model, path, ids, pieces[kind], 2, NULL) || !server_start(&sv, path, "")) break;
        snprintf(chat, sizeof chat, "-H 'Content-Type: application/json' " AUTH URL "/v1/chat/completions", sv.port);
        char calls_last[2048];   /* a call that does not parse: after the reply's text */
        snprintf(calls_last, sizeof calls_last, "%s%s", want[0], want[1]);
        for (int stream = 0; stream < 2; stream++) {
            snprintf(args, sizeof args, req, stream ? ",\"stream\":true" : "");
            snprintf(full, sizeof full, "%s %s", chat, args);
            CHECK(body_status(&b, "%s", full) == 200);
            char *c = field_texts(b, "content"), *r = field_texts(b, "reasoning_content");
            const char *wc = kind ? calls_last : want[0], *wr = kind ? "" : want[1];
            CHECKF(c && r && !strcmp(c, wc) && !strcmp(r, wr) && !strstr(b, "tool_calls"),
                   "%s, stream %d: content '%s' (want '%s'), reasoning '%s' (want '%s'); the plain reply '%s'",
                   kind ? "calls" : "thoughts", stream, c, wc, r, wr, plain);
            free(c);
            free(r);
            free(b);
        }
        server_stop(&sv);
    }
    free(plain);
}

/* tool_choice naming a function or "required" begins the reply with a call: gemma4-micro with its
 * ',' and '.' renamed Gemma 4's call markers and its '~' and '^' the turn markers (so that its
 * chat format is Gemma 4's, and tools are taken): the forced start is the reply's call text,
 * streamed or not; without tool_choice no reply of this prompt makes one. */
TEST(serve_tool_choice_begins_the_call) {
    const char *model, *why = cannot_serve(&model);
    if (why) SKIP("%s", why);
    static const int32_t ids[4] = {432, 426, 510, 97};
    static const char *const pieces[4] = {"<|tool_call>", "<tool_call|>", "<|turn>", "<turn|>"};
    char *probe = test_sh(&(int){0}, "%s tokenize -m %s -p ',.~^' --ids 2>&1", test_hachi_bin(), model);
    const bool ids_right = strstr(probe, "432 426 510 97") != NULL;
    free(probe);
    if (!ids_right) { CHECKF(0, "gemma4-micro's ',' '.' '~' '^' are not ids 432 426 510 97"); return; }
    char path[1024], chat[512], full[2048], *b = NULL;
    snprintf(path, sizeof path, "%s/micro-g4-calls.gguf", test_tmpdir());
    server sv;
    if (!test_gguf_control_tokens(model, path, ids, pieces, 4, NULL) || !server_start(&sv, path, "")) return;
    snprintf(chat, sizeof chat, "-H 'Content-Type: application/json' " AUTH URL "/v1/chat/completions", sv.port);
    static const char *const choices[] = {"", ",\"tool_choice\":\"required\"",
                                          ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"};
    for (int i = 0; i < 3; i++)
        for (int stream = 0; stream < 2; stream++) {
            snprintf(full, sizeof full, "%s -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}],"
                     "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]%s,\"max_tokens\":40,"
                     "\"temperature\":0%s}'", chat, choices[i], stream ? ",\"stream\":true" : "");
            CHECK(body_status(&b, "%s", full) == 200);
            char *c = field_texts(b, "content");   /* a call that does not parse stays in the content */
            const char *call = i == 2 ? "call:f{" : "call:";
            CHECKF(c && (i ? strstr(c, call) != NULL : !strstr(c, call)) && !strstr(c, "<|tool_call>"),
                   "tool_choice %d, stream %d: content '%s'", i, stream, c ? c : "");
            free(c);
            free(b);
        }
    server_stop(&sv);
}

#ifndef HACHI_NO_SERVE
/* A reply's tool calls held to the tools' declarations: gemma4-micro with ',' '.' '~' '^' '$'
 * renamed Gemma 4's call and turn markers and its string quote <|"|> (a story model: ',' comes
 * often, so tool_choice auto begins calls too; '$' and '}' raised by logit biases so that strings
 * and arguments close). Named, required and auto choices, single calls, streamed or not: every
 * call comes back as tool_calls with arguments that hold to their function's parameters (cJSON
 * reads them; a string's length and an integer's range too), and without the grammar the same requests do not (the server whose vocabulary lacks
 * the quote token takes none). */
static bool weather_or_time(const cJSON *calls, bool want_weather) {
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, calls) {
        const cJSON *f = cJSON_GetObjectItem(c, "function");
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(f, "name"));
        cJSON *args = cJSON_Parse(cJSON_GetStringValue(cJSON_GetObjectItem(f, "arguments")));
        bool ok;
        if (name && !strcmp(name, "get_weather")) {
            const cJSON *days = cJSON_GetObjectItem(args, "days");
            const char *city = cJSON_GetStringValue(cJSON_GetObjectItem(args, "city"));
            int chars = 0;   /* (its code points: 2 to 20) */
            for (const char *p = city; p && *p; p++) chars += ((unsigned char)*p & 0xC0) != 0x80;
            ok = cJSON_GetArraySize(args) == 2 && city && chars >= 2 && chars <= 20 && cJSON_IsNumber(days) &&
                 days->valuedouble == floor(days->valuedouble) && days->valuedouble >= 1 && days->valuedouble <= 14;
        } else {
            const char *zone = cJSON_GetStringValue(cJSON_GetObjectItem(args, "zone"));
            ok = !want_weather && name && !strcmp(name, "get_time") && cJSON_GetArraySize(args) == 1 && zone &&
                 (!strcmp(zone, "utc") || !strcmp(zone, "local"));
        }
        cJSON_Delete(args);
        if (!ok) return false;
        n++;
    }
    return n == 1;
}

TEST(serve_tool_calls_grammar) {
    const char *model, *why = cannot_serve(&model);
    if (why) SKIP("%s", why);
    static const int32_t ids[5] = {432, 426, 510, 97, 494};
    static const char *const pieces[5] = {"<|tool_call>", "<tool_call|>", "<|turn>", "<turn|>", "<|\"|>"};
    char path[1024], path4[1024], chat[512], *b = NULL;
    snprintf(path, sizeof path, "%s/micro-g4-quote.gguf", test_tmpdir());
    snprintf(path4, sizeof path4, "%s/micro-g4-noquote.gguf", test_tmpdir());
    if (!test_gguf_control_tokens(model, path, ids, pieces, 5, NULL) || !test_gguf_control_tokens(model, path4, ids, pieces, 4, NULL))
        return;
    static const char tools[] =
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":"
        "{\"city\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":20},\"days\":{\"type\":\"integer\",\"minimum\":1,"
        "\"maximum\":14}},\"required\":[\"city\",\"days\"]}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\",\"properties\":"
        "{\"zone\":{\"enum\":[\"utc\",\"local\"]}},\"required\":[\"zone\"]}}}]";
    static const char *const choices[3] = {"{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}", "\"required\"", "\"auto\""};
    int held[2] = {0, 0}, asked[2] = {0, 0};
    for (int grammar = 1; grammar >= 0; grammar--) {
        server sv;
        if (!server_start(&sv, grammar ? path : path4, "")) return;
        snprintf(chat, sizeof chat, "-H 'Content-Type: application/json' " AUTH URL "/v1/chat/completions", sv.port);
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < 4; i++) {
                CHECK(body_status(&b, "%s -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}],\"tools\":%s,"
                                      "\"tool_choice\":%s,\"parallel_tool_calls\":false,\"max_tokens\":120,\"temperature\":1,"
                                      "\"seed\":%d,\"logit_bias\":{\"494\":12,\"128\":6}%s}'", chat, tools, choices[c], i + 1,
                                      i == 3 ? ",\"stream\":true" : "") == 200);
                if (i == 3) {   /* streamed: the calls' delta */
                    const char *d = strstr(b, "\"tool_calls\":");
                    if (!d && c == 2) { free(b); continue; }   /* (auto: a reply may make no call) */
                    cJSON *arr = d ? cJSON_ParseWithOpts(d + 13, NULL, false) : NULL;
                    const bool ok = weather_or_time(arr, c == 0);
                    cJSON_Delete(arr);
                    held[grammar] += ok;
                    asked[grammar]++;
                    if (grammar) CHECKF(ok && strstr(b, "\"finish_reason\":\"tool_calls\""), "choice %d streamed: %s", c, b);
                    free(b);
                    continue;
                }
                cJSON *doc = cJSON_Parse(b);
                const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "choices"), 0);
                const cJSON *calls = cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "message"), "tool_calls");
                const char *fin = cJSON_GetStringValue(cJSON_GetObjectItem(ch, "finish_reason"));
                const bool called = calls != NULL || c < 2;   /* (auto: a reply may make no call) */
                const bool ok = calls ? weather_or_time(calls, c == 0) && fin && !strcmp(fin, "tool_calls") : false;
                if (called) { held[grammar] += ok; asked[grammar]++; }
                if (grammar && called) CHECKF(ok, "choice %d seed %d: %s", c, i + 1, b);
                cJSON_Delete(doc);
                free(b);
            }
        server_stop(&sv);
    }
    printf("  calls held to their declarations: %d of %d with the grammar, %d of %d without\n", held[1], asked[1], held[0], asked[0]);
    CHECKF(asked[1] >= 8 && held[1] == asked[1] && held[0] < asked[0], "with %d / %d, without %d / %d", held[1], asked[1], held[0],
           asked[0]);
}
#endif

/* text as the inside of a JSON string (quotes, backslashes and control characters escaped) */
static void json_put(FILE *f, const char *t) {
    for (; *t; t++) {
        const unsigned char c = (unsigned char)*t;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
}

/* `hachi chat` keeps a Gemma 4 reply in its context as the template writes an earlier reply (its
 * text trimmed, without its thought or the empty one that opened it), so its second reply is the
 * one serve gives to the conversation with the first reply as the assistant's message. The model:
 * gemma4-micro with ',' '.' '~' '^' renamed Gemma 4's thought and turn markers and a template that
 * opens a reply with the empty thought (its replies hold thoughts: the text between ',' and '.'). */
TEST(serve_chat_cli_keeps_replies_as_the_template) {
    const char *model, *why = cannot_serve(&model);
    if (why) SKIP("%s", why);
    static const int32_t ids[4] = {432, 426, 510, 97};
    static const char *const pieces[4] = {"<|channel>", "<channel|>", "<|turn>", "<turn|>"};
    char *probe = test_sh(&(int){0}, "%s tokenize -m %s -p ',.~^' --ids 2>&1", test_hachi_bin(), model);
    const bool ids_right = strstr(probe, "432 426 510 97") != NULL;
    free(probe);
    if (!ids_right) { CHECKF(0, "gemma4-micro's ',' '.' '~' '^' are not ids 432 426 510 97"); return; }
    char path[1024];
    snprintf(path, sizeof path, "%s/micro-g4-chat.gguf", test_tmpdir());
    if (!test_gguf_control_tokens(model, path, ids, pieces, 4, "{{- '<|channel>thought\\n<channel|>' -}}")) return;
    const char *in1 = test_tmp("chat1.txt"), *in2 = test_tmp("chat2.txt"), *body = test_tmp("chat_body.json");
    FILE *f = fopen(in1, "w");
    if (f) { fputs("Tell me a story\n", f); fclose(f); }
    f = fopen(in2, "w");
    if (f) { fputs("Tell me a story\nTell me more\n", f); fclose(f); }
    int rc1 = 0, rc2 = 0;
    char *one = test_sh(&rc1, "%s chat -m %s --temp 0 -n 60 -t 1 < %s 2>/dev/null", test_hachi_bin(), path, in1);
    char *two = test_sh(&rc2, "%s chat -m %s --temp 0 -n 60 -t 1 < %s 2>/dev/null", test_hachi_bin(), path, in2);
    const size_t l1 = strlen(one);
    CHECKF(rc1 == 0 && rc2 == 0 && l1 > 1 && one[l1 - 1] == '\n' && !strncmp(two, one, l1) && strlen(two) > l1 + 1,
           "chat: '%s' then '%s'", one, two);
    if (rc1 || rc2 || l1 < 2 || strncmp(two, one, l1)) { free(one); free(two); return; }
    one[l1 - 1] = 0;
    char *second = two + l1;
    second[strlen(second) - 1] = 0;
    f = fopen(body, "w");
    if (!f) { free(one); free(two); return; }
    fputs("{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"},{\"role\":\"assistant\",\"content\":\"", f);
    json_put(f, one);
    fputs("\"},{\"role\":\"user\",\"content\":\"Tell me more\"}],\"max_tokens\":60,\"temperature\":0}", f);
    fclose(f);
    server sv;
    if (server_start(&sv, path, "")) {
        char *b = NULL;
        CHECK(body_status(&b, "-H 'Content-Type: application/json' " AUTH URL "/v1/chat/completions --data-binary @%s",
                          sv.port, body) == 200);
        char *c = field_texts(b, "content");
        CHECKF(c && !strcmp(c, second), "serve's second reply '%s', chat's '%s' (first reply '%s')", c ? c : "", second, one);
        free(c);
        free(b);
        server_stop(&sv);
    }
    free(one);
    free(two);
}

/* The server's resident memory in KB (VmRSS), 0 when unreadable */
static long rss_kb(pid_t pid) {
    int rc;
    char *o = test_sh(&rc, "sed -n 's/^VmRSS: *//p' /proc/%d/status", (int)pid);
    long kb = strtol(o, NULL, 10);
    free(o);
    return kb;
}

/* Runs tests/serve_soak.sh (clients x rounds x 6 requests at once, a stream abandoned each
 * round) and checks every answer; returns the server's VmRSS afterwards. */
static long soak_round(const server *sv, int clients, int rounds) {
    int rc;
    char *o = test_sh(&rc, "sh tests/serve_soak.sh %d " KEY " %d %d %s 2>&1", sv->port, clients, rounds, test_tmpdir());
    int ok = 0, lines = 0;
    for (const char *l = o; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        lines++;
        const char *sp = strchr(l, ' ');
        if (sp && !strncmp(sp, " ok", 3)) ok++;
    }
    CHECKF(rc == 0 && ok == lines && ok == clients * rounds * 6, "%d of %d requests answered as expected (want %d):\n%.3000s",
           ok, lines, clients * rounds * 6, o);
    free(o);
    /* the abandoned streams end at the server's next token or chunk: every slot idle again */
    char url[256], *b = NULL;
    snprintf(url, sizeof url, URL "/health", sv->port);
    bool idle = false;
    for (double t0 = now_ms(); !idle && now_ms() - t0 < 10000; sleep_ms(20)) {
        idle = body_status(&b, "%s", url) == 200 && strstr(b, "\"slots_idle\":2");
        free(b);
    }
    CHECKF(idle, "slots still busy 10 s after the clients finished");
    return rss_kb(sv->pid);
}

/* A soak: four clients at once against two slots, six kinds of request (answers, streams,
 * stops, abandoned streams, malformed JSON, health), three times over. Every answer must be
 * right, the slots idle after each round, the memory flat from the second round to the third
 * (a leak or cache that grows per request would show; the ASan build's LeakSanitizer checks the
 * server's exit), and the server must stop cleanly. */
TEST(serve_soak) {
    const char *model, *why = cannot_serve(&model);
    if (why) SKIP("%s", why);
    /* ASan's quarantine keeps freed blocks (up to 256 MB) and so grows the ASan build's RSS by
     * design: off for this server, its RSS is live memory (freed-memory reuse is the other
     * tests' to catch); the variable means nothing to the release build */
    const char *asan = getenv("ASAN_OPTIONS");
    char *saved = asan ? strdup(asan) : NULL, opts[1024];
    snprintf(opts, sizeof opts, "%s%squarantine_size_mb=0", asan ? asan : "", asan && *asan ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
    server sv;
    const bool up = server_start(&sv, model, "--parallel 2 --queue 16 -c 2048");
    if (saved) setenv("ASAN_OPTIONS", saved, 1);
    else unsetenv("ASAN_OPTIONS");
    free(saved);
    if (!up) return;
    const int rounds = getenv("HACHI_TEST_QUICK") ? 3 : 12;
    const long r0 = soak_round(&sv, 4, rounds / 3), r1 = soak_round(&sv, 4, rounds), r2 = soak_round(&sv, 4, rounds);
    fprintf(stderr, "serve_soak: VmRSS %ld, %ld, %ld KB after %d, %d, %d requests\n", r0, r1, r2, 4 * 6 * (rounds / 3),
            4 * 6 * rounds, 4 * 6 * rounds);
    CHECKF(r0 > 0 && r1 > 0 && r2 > 0 && r2 - r1 < 4096, "VmRSS grew from %ld to %ld KB over %d requests", r1, r2, 4 * 6 * rounds);
    server_stop(&sv);
}

#ifndef HACHI_NO_SERVE
/* POST /tokenize and /detokenize (llama.cpp's): the ids are the library's hachi_tokenize's (specials
 * and BOS as asked), with_pieces gives each token's text (bytes where it is not UTF-8), the text
 * comes back from its ids (a character split into byte tokens too), and a bad body is a 400 */
TEST(serve_tokenize_detokenize) {
    const char *model, *why = cannot_serve(&model);
    if (why) SKIP("%s", why);
    hachi_model_params mp = hachi_model_default_params();
    mp.vocab_only = true;
    hachi_model *m = NULL;
    CHECKF(hachi_model_load(model, &mp, &m) == HACHI_OK, "%s", hachi_last_error());
    server sv;
    if (!m || !server_start(&sv, model, "")) { hachi_model_free(m); return; }
    char a[256], *b = NULL;
    snprintf(a, sizeof a, "-H 'Content-Type: application/json' " AUTH URL, sv.port);
    static const char *const texts_in[] = {"Once upon a time, the cat sat.", "a \xF0\x9D\x84\x9E b", "<s>x</s>"};
    for (size_t i = 0; i < sizeof texts_in / sizeof *texts_in; i++)
        for (int special = 0; special < 2; special++) {
            int32_t ids[128], n = 0;
            CHECK(hachi_tokenize(m, texts_in[i], strlen(texts_in[i]), special, special, ids, 128, &n) == HACHI_OK);
            int st = body_status(&b, "%s/tokenize -d '{\"content\":\"%s\",\"add_special\":%s,\"parse_special\":%s,\"with_pieces\":true}'", a,
                                 texts_in[i], special ? "true" : "false", special ? "true" : "false");
            cJSON *doc = st == 200 ? cJSON_Parse(b) : NULL;
            const cJSON *toks = cJSON_GetObjectItem(doc, "tokens"), *t;
            bool same = cJSON_GetArraySize(toks) == n;
            int k = 0;
            char joined[512] = "", piece[256];
            size_t jl = 0;
            cJSON_ArrayForEach(t, toks) {
                const cJSON *pc = cJSON_GetObjectItem(t, "piece");
                same &= k < n && cJSON_GetObjectItem(t, "id") && cJSON_GetObjectItem(t, "id")->valueint == ids[k];
                const int32_t pl = k < n ? hachi_token_to_text(m, ids[k], piece, sizeof piece) : 0;
                if (cJSON_IsString(pc)) same &= strlen(pc->valuestring) == (size_t)pl && !memcmp(pc->valuestring, piece, (size_t)pl);
                else {   /* bytes */
                    same &= cJSON_GetArraySize(pc) == pl;
                    for (int j = 0; j < pl && same; j++) same &= cJSON_GetArrayItem(pc, j)->valueint == (unsigned char)piece[j];
                }
                k++;
            }
            CHECKF(same, "'%s' special %d: %s", texts_in[i], special, b);
            /* and back: the ids (without BOS or specials) give the text */
            if (!special) {
                jl = (size_t)snprintf(joined, sizeof joined, "%s/detokenize -d '{\"tokens\":[", a);
                for (int j = 0; j < n; j++) jl += (size_t)snprintf(joined + jl, sizeof joined - jl, "%s%d", j ? "," : "", ids[j]);
                snprintf(joined + jl, sizeof joined - jl, "]}'");
                free(b);
                st = body_status(&b, "%s", joined);
                cJSON *back = st == 200 ? cJSON_Parse(b) : NULL;
                const char *content = cJSON_GetStringValue(cJSON_GetObjectItem(back, "content"));
                CHECKF(content && !strcmp(content, texts_in[i]), "detokenize of '%s': %s", texts_in[i], b);
                cJSON_Delete(back);
            }
            cJSON_Delete(doc);
            free(b);
        }
    static const struct { const char *path, *body, *words; } bad[] = {
        {"tokenize", "{}", "'content' must be a string, got nothing"},
        {"tokenize", "{\"content\":\"x\",\"with_pieces\":1}", "'with_pieces' must be a boolean"},
        {"tokenize", "[1]", "must be a JSON object"},
        {"detokenize", "{\"tokens\":[1,2.5]}", "'tokens[1]' must be a token id in [0, "},
        {"detokenize", "{\"tokens\":\"1\"}", "'tokens' must be an array of token ids, got a string"},
        {"detokenize", "{\"tokens\":[1", "malformed JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const int st = body_status(&b, "%s/%s -d '%s'", a, bad[i].path, bad[i].body);
        CHECKF(st == 400 && strstr(b, bad[i].words), "%s %s: %d %s", bad[i].path, bad[i].body, st, b);
        free(b);
    }
    int st = body_status(&b, URL "/tokenize -d '{\"content\":\"x\"}'", sv.port);   /* (no key) */
    CHECKF(st == 401, "%d %s", st, b);
    free(b);
    st = body_status(&b, AUTH URL "/detokenize", sv.port);   /* (GET) */
    CHECKF(st == 405, "%d %s", st, b);
    free(b);
    server_stop(&sv);
    hachi_model_free(m);
}
#endif
