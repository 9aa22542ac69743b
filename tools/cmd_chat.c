/* hachi chat: a conversation in one session. Each line on stdin is a user
 * turn; only its new tokens are prefilled (the KV cache is reused across
 * turns); the reply streams until the end-of-turn token or EOS. When the
 * context cannot hold the next turn, the user is told and the chat ends.
 * --draft N: prompt-lookup drafts over the whole conversation (-md FILE: a Gemma 4
 * assistant's); with or without, the reply is decoded by the library's loop (hachi_spec).
 * A Gemma 4 reply's thought (--think asks for one) goes to stderr, the answer to stdout; the
 * reply then stays in the context as Gemma 4's template writes an earlier reply (its text
 * trimmed, without the thought or the empty one that opened it): the session goes back to a ring
 * checkpoint at the reply's turn marker and reads "model\n" and that text, one text between
 * control tokens as a renderer's whole conversation would tokenize it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"

#define G4_MODEL "model\n"   /* Gemma 4's reply turn: <|turn>model\n */

/* Appends buf[0..len) to the reply's text (false: out of memory, said) */
static bool reply_add(char **r, size_t *len, size_t *cap, const char *buf, int32_t n) {
    if (*len + (size_t)n + 1 > *cap) {
        size_t c = 2 * (*len + (size_t)n + 1);
        char *t = realloc(*r, c);
        if (!t) { cli_error("chat", "out of memory"); return false; }
        *r = t;
        *cap = c;
    }
    memcpy(*r + *len, buf, (size_t)n);
    *len += (size_t)n;
    return true;
}

/* The session back at checkpoint cp (after the reply's <|turn>), then "model\n" and the reply's
 * text trimmed (jinja's trim, as far as ASCII goes) read as one text; *n_kept: its tokens */
static hachi_status keep_reply(const hachi_model *m, hachi_session *s, hachi_spec *sp, const hachi_checkpoint *cp,
                               const char *reply, size_t len, int32_t *n_kept) {
    size_t a = 0, b = len;
    cli_trim(reply, &a, &b);
    const size_t nm = strlen(G4_MODEL), nt = nm + (b - a);
    char *text = malloc(nt + 1);
    int32_t *kept = NULL;
    hachi_status st = HACHI_ERR_NOMEM;
    *n_kept = 0;
    if (text) {
        memcpy(text, G4_MODEL, nm + 1);
        if (b > a) memcpy(text + nm, reply + a, b - a);
        text[nt] = 0;
        hachi_tokenize(m, text, nt, false, false, NULL, 0, n_kept);
        kept = malloc(sizeof(int32_t) * (size_t)(*n_kept + 1));
    }
    if (kept) {
        hachi_tokenize(m, text, nt, false, false, kept, *n_kept + 1, n_kept);
        st = hachi_session_checkpoint_restore(s, cp);
        if (st == HACHI_OK && *n_kept + 1 > hachi_session_n_ctx(s) - hachi_session_pos(s)) st = HACHI_ERR_CONTEXT_FULL;
        if (st == HACHI_OK) st = hachi_session_eval(s, kept, *n_kept, NULL);
        if (st == HACHI_OK) st = hachi_spec_feed(sp, kept, *n_kept);
    }
    free(text);
    free(kept);
    return st;
}

int cmd_chat(int argc, char **argv) {
    const char *cmd = "chat", *system = NULL;
    bool think = false;
    cli_opts o;
    long n_max = 512;
    cli_draft dr;
    int rc = 1;
    cli_opts_init(&o);
    cli_draft_init(&dr);
    for (int i = 1; i < argc; i++) {
        int r = cli_opts_parse(cmd, &o, argc, argv, &i);
        if (r == 0) r = cli_draft_parse(cmd, &dr, argc, argv, &i);
        if (r == 0) r = cli_json_parse(cmd, &o, argc, argv, &i);
        if (r < 0) return 1;
        if (r > 0) continue;
        const char *a = argv[i];
        if (!strcmp(a, "--system")) { if (!(system = cli_value(cmd, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "--think")) think = true;
        else if (!strcmp(a, "-n")) {
            const char *v = cli_value(cmd, argc, argv, &i);
            if (!v || !cli_int(cmd, a, v, 1, 1 << 20, &n_max)) return 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: hachi chat -m MODEL [--system TEXT] [--think] [-n MAX_REPLY_TOKENS] [-c CTX] [--draft N] [-md FILE]\n"
                   "                  [--spec KIND] [--draft-sample] [--json-schema SCHEMA | --json-schema-file FILE] [sampling flags]\n"
                   "one user message per line on stdin; an empty line or end of input ends the chat\n"
                   "  --think     Gemma 4's thinking on (<|think|> in the system turn); a reply's thought goes\n"
                   "              to stderr, its answer to stdout\n"
                   CLI_JSON_USAGE CLI_DRAFT_USAGE CLI_DRAFT_TRACE_USAGE CLI_MODE_USAGE);
            return 0;
        } else return cli_error(cmd, "unknown option '%s'", a);
    }
    if (think && o.json_schema) return cli_error(cmd, "--json-schema with --think is not supported (the thought is no JSON)");
    hachi_model *m = cli_load_model(cmd, &o, false);
    hachi_session *s = NULL;
    hachi_sampler *smp = NULL;
    cli_json *json = NULL;         /* --json-schema: each reply held to it */
    char *line = NULL, *turn = NULL;
    int32_t *toks = NULL;
    size_t line_cap = 0;
    hachi_spec *sp = NULL;
    hachi_detok *dt = NULL;
    hachi_checkpoint *cp = NULL;   /* Gemma 4: the session where a reply begins */
    char *reply = NULL;            /* Gemma 4: the reply's text on stdout */
    size_t reply_len = 0, reply_cap = 0;
    if (!m) goto out;
    cli_progress pr;
    cli_progress_attach(&o, &pr, "hachi chat");
    cli_draft_session(&dr, &o.sp);
    hachi_status st = hachi_session_create(m, &o.sp, &s);
    if (st) { cli_lib_error(cmd, st, "cannot create the session"); goto out; }
    if (cli_sampler_create(cmd, &o, m, &json, &smp) != HACHI_OK) goto out;
    hachi_spec_params spp;
    if (!cli_draft_setup(cmd, &dr, m, &spp)) goto out;
    if ((st = hachi_spec_create(m, s, smp, &spp, &sp))) { cli_lib_error(cmd, st, "generator"); goto out; }
    if ((st = hachi_detok_create(m, &dt))) { cli_lib_error(cmd, st, "detokenizer"); goto out; }
    const bool g4 = hachi_chat_detect(m) == HACHI_CHAT_GEMMA4;
    if (g4 && (st = hachi_checkpoint_create(s, &cp))) { cli_lib_error(cmd, st, "checkpoint"); goto out; }
    /* Gemma 4: a turn ends <|turn>model\n and the empty thought that opens a reply (thinking off),
     * its last n_tail tokens; the checkpoint goes before them, after <|turn> */
    int32_t n_tail = 0, n_model = 0;
    const char *pre = think ? "" : hachi_chat_reply_prefix(m);
    hachi_tokenize(m, pre, strlen(pre), false, true, NULL, 0, &n_tail);
    hachi_tokenize(m, G4_MODEL, strlen(G4_MODEL), false, false, NULL, 0, &n_model);
    n_tail = g4 ? n_tail + n_model : 0;
    if (think) {   /* refused up front for a model without Gemma 4's thinking */
        char probe[8];
        if (hachi_chat_turn_think(m, system, "", true, true, probe, sizeof probe, NULL) < 0) {
            cli_error(cmd, "--think: %s", hachi_last_error());
            goto out;
        }
    }
    const hachi_spec_stats *ss = hachi_spec_get_stats(sp);
    bool tty = isatty(STDIN_FILENO);
    static const char *names[] = {"gemma4", "gemma3", "plain"};
    fprintf(stderr, "hachi chat: %s format, context %d; one message per line, empty line to quit\n",
            names[hachi_chat_detect(m)], hachi_session_n_ctx(s));
    int turns = 0;
    for (;;) {
        if (tty) { fputs("> ", stdout); fflush(stdout); }
        errno = 0;
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got <= 0 && ferror(stdin)) { cli_error(cmd, "cannot read the input: %s", strerror(errno ? errno : EIO)); goto out; }
        if (got <= 0) break;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        if (got == 0) break;
        if (strlen(line) != (size_t)got) { cli_error(cmd, "a message holds a NUL byte"); goto out; }

        int32_t need = hachi_chat_turn_think(m, system, line, turns == 0, think, NULL, 0, NULL) + 1;
        free(turn);
        if (!(turn = malloc(need))) goto out;
        size_t plain[4];   /* the system's and the user's text: "<turn|>" typed stays text */
        hachi_chat_turn_think(m, system, line, turns == 0, think, turn, need, plain);
        int32_t n = 0;
        hachi_tokenize_spans(m, turn, strlen(turn), false, plain, 2, NULL, 0, &n);
        free(toks);
        if (!(toks = malloc(sizeof(int32_t) * (n + 1)))) goto out;
        hachi_tokenize_spans(m, turn, strlen(turn), false, plain, 2, toks, n + 1, &n);
        int room = hachi_session_n_ctx(s) - hachi_session_pos(s);
        if (n + 1 > room) {
            fprintf(stderr, "hachi chat: context full: this turn needs %d tokens but only %d of %d are left; "
                            "start a new chat (or a larger -c)\n", n + 1, room, hachi_session_n_ctx(s));
            rc = 2;
            goto out;
        }
        if ((st = hachi_session_eval(s, toks, n - n_tail, NULL)) || (g4 && (st = hachi_session_checkpoint_save(s, cp))) ||
            (n_tail && (st = hachi_session_eval(s, toks + n - n_tail, n_tail, NULL)))) {
            cli_lib_error(cmd, st, "prefill failed");
            goto out;
        }
        if ((st = hachi_spec_feed(sp, toks, n))) { cli_lib_error(cmd, st, "generator"); goto out; }
        reply_len = 0;
        cli_json_reset(json);

        hachi_detok_reset(dt, true);
        char buf[HACHI_DETOK_MAX];
        int gen = 0;
        bool ended = false;
        while (gen < n_max && !ended) {
            int32_t out[HACHI_SPEC_STEP_MAX], n_out = 0;
            const hachi_spec_stats before = *ss;
            if ((st = hachi_spec_step(sp, (int32_t)(n_max - gen), out, &n_out)) == HACHI_ERR_CONTEXT_FULL) break;
            if (st) { cli_lib_error(cmd, st, "decode failed"); goto out; }
            cli_draft_trace(cmd, &dr, &before, ss);
            for (int32_t i = 0; i < n_out && !ended; i++) {
                if ((ended = hachi_model_is_eog(m, out[i]))) break;   /* not counted, as in run */
                gen++;
                int32_t len = hachi_detok_push(dt, out[i], buf, sizeof buf);
                if (g4 && !hachi_detok_in_thought(dt) && !reply_add(&reply, &reply_len, &reply_cap, buf, len)) goto out;
                fwrite(buf, 1, len, hachi_detok_in_thought(dt) ? stderr : stdout);   /* a thought apart */
            }
            fflush(stdout);
        }
        /* the session holds the whole reply (the end-of-turn token comes with the next turn) */
        if (st == HACHI_OK) st = hachi_spec_flush(sp);
        if (st == HACHI_ERR_CONTEXT_FULL) {
            fprintf(stderr, "\nhachi chat: context full (%d tokens): the reply was cut; start a new chat\n",
                    hachi_session_n_ctx(s));
            rc = 2;
            goto out;
        }
        if (st) { cli_lib_error(cmd, st, "decode failed"); goto out; }
        int32_t len = hachi_detok_flush(dt, buf, sizeof buf);
        if (g4 && !hachi_detok_in_thought(dt) && !reply_add(&reply, &reply_len, &reply_cap, buf, len)) goto out;
        fwrite(buf, 1, len, hachi_detok_in_thought(dt) ? stderr : stdout);
        fputc('\n', stdout);
        fflush(stdout);
        turns++;
        int32_t n_kept = -1;   /* Gemma 4: the reply read again as its template writes an earlier one */
        if (g4) {
            st = keep_reply(m, s, sp, cp, reply ? reply : "", reply_len, &n_kept);   /* (none yet: an empty reply) */
            if (st == HACHI_ERR_CONTEXT_FULL) {
                fprintf(stderr, "hachi chat: context full (%d tokens): no room to keep the reply; start a new chat\n",
                        hachi_session_n_ctx(s));
                rc = 2;
                goto out;
            }
            if (st) { cli_lib_error(cmd, st, "keeping the reply"); goto out; }
        }
        fprintf(stderr, "[turn %d: prefilled %d new tokens, replied %d tokens%s", turns, n, gen, ended ? "" : " (cut at -n)");
        if (n_kept >= 0) fprintf(stderr, ", kept as the template writes it: %d tokens", n_kept);
        fprintf(stderr, ", context %d/%d", hachi_session_pos(s), hachi_session_n_ctx(s));
        if (hachi_detok_thought_tokens(dt)) fprintf(stderr, "; %d tokens of thought (on stderr)", hachi_detok_thought_tokens(dt));
        if (spp.drafter != HACHI_DRAFTER_NONE)
            fprintf(stderr, "; so far %lld of %lld drafted tokens kept, %lld forwards", (long long)ss->accepted,
                    (long long)ss->drafted, (long long)ss->forwards);
        fputs("]\n", stderr);
    }
    rc = 0;
out:
    free(reply);
    hachi_checkpoint_free(cp);
    free(line);
    free(turn);
    free(toks);
    hachi_spec_free(sp);
    hachi_detok_free(dt);
    hachi_sampler_free(smp);
    cli_json_free(json);
    hachi_session_free(s);
    if (!cli_draft_free(&dr)) rc = 1;
    cli_free_model(&o, m);
    return rc;
}
