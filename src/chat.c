/* chat: the chat format of a model, picked from its vocabulary (and the GGUF
 * tokenizer.chat_template when present), and the text of one turn.
 *   Gemma 4: <bos><|turn>system\n...<turn|>\n<|turn>user\n...<turn|>\n<|turn>model\n, then the
 *            reply prefix <|channel>thought\n<channel|> (an empty thought: thinking off) where
 *            the file's template opens a reply so; the system and user text trimmed as the
 *            template's `| trim` does
 *   Gemma 3: <bos><start_of_turn>user\n(system\n\n)...<end_of_turn>\n<start_of_turn>model\n
 *   plain (vocabularies without turn tokens): "User: ...\nAssistant:" */
#include <stdio.h>
#include <string.h>
#include "model.h"
#include "util.h"

#define G4_EMPTY_THOUGHT "<|channel>thought\n<channel|>"

hachi_chat_format hachi_chat_detect(const hachi_model *m) {
    if (!m) return HACHI_CHAT_PLAIN;
    const hachi_tokenizer *t = hachi_model_tokenizer(m);
    hachi_gguf_str tmpl = {0};
    bool has_tmpl = hachi_gguf_get_str(hachi_model_gguf(m), "tokenizer.chat_template", &tmpl);
    bool g4 = hachi_tokenizer_find(t, "<|turn>") >= 0 && hachi_tokenizer_find(t, "<turn|>") >= 0;
    bool g3 = hachi_tokenizer_find(t, "<start_of_turn>") >= 0 && hachi_tokenizer_find(t, "<end_of_turn>") >= 0;
    if (has_tmpl) {   /* the template names the turn markers it uses */
        if (g4 && memmem(tmpl.ptr, tmpl.len, "<|turn>", 7)) return HACHI_CHAT_GEMMA4;
        if (g3 && memmem(tmpl.ptr, tmpl.len, "<start_of_turn>", 15)) return HACHI_CHAT_GEMMA3;
    }
    return g4 ? HACHI_CHAT_GEMMA4 : g3 ? HACHI_CHAT_GEMMA3 : HACHI_CHAT_PLAIN;
}

const char *hachi_chat_reply_prefix(const hachi_model *m) {
    if (hachi_chat_detect(m) != HACHI_CHAT_GEMMA4) return "";
    const hachi_tokenizer *t = hachi_model_tokenizer(m);
    hachi_gguf_str tmpl = {0};
    if (!hachi_gguf_get_str(hachi_model_gguf(m), "tokenizer.chat_template", &tmpl)) return "";
    /* the template's string literal, its newline escaped as in Gemma 4's templates or not */
    const bool empty_thought = memmem(tmpl.ptr, tmpl.len, "<|channel>thought\\n<channel|>", 29) ||
                               memmem(tmpl.ptr, tmpl.len, G4_EMPTY_THOUGHT, strlen(G4_EMPTY_THOUGHT));
    return empty_thought && hachi_tokenizer_find(t, "<|channel>") >= 0 && hachi_tokenizer_find(t, "<channel|>") >= 0
               ? G4_EMPTY_THOUGHT : "";
}

/* A turn's parts in order: template text (which = 0), or the system prompt (1) or user text (2) */
typedef struct { const char *s; size_t len; int which; } part;

/* s without the whitespace at its ends that jinja's trim (Python's str.strip) removes, as far as
 * ASCII goes; its length in *len */
static const char *trimmed(const char *s, size_t *len) {
    static const char ws[] = " \t\n\v\f\r\x1c\x1d\x1e\x1f";
    size_t n = strlen(s);
    while (n && strchr(ws, s[n - 1])) n--;
    while (n && strchr(ws, *s)) { s++; n--; }
    *len = n;
    return s;
}

/* The parts joined into buf as snprintf would (at most cap bytes with the NUL), the system's and
 * the user's offset and length into plain[4] (NULL: not wanted); returns the full length. */
static int32_t join(const part *p, int n, char *buf, int32_t cap, size_t *plain) {
    size_t len = 0;
    if (plain) memset(plain, 0, 4 * sizeof *plain);
    for (int i = 0; i < n; i++) {
        const size_t k = p[i].len;
        if (plain && p[i].which) { plain[2 * p[i].which - 2] = len; plain[2 * p[i].which - 1] = k; }
        if (cap > 0 && len < (size_t)cap - 1) memcpy(buf + len, p[i].s, HACHI_MIN(k, (size_t)cap - 1 - len));
        len += k;
    }
    if (cap > 0) buf[HACHI_MIN(len, (size_t)cap - 1)] = 0;
    return (int32_t)HACHI_MIN(len, (size_t)INT32_MAX);
}

int32_t hachi_chat_turn_think(const hachi_model *m, const char *system, const char *user, bool first, bool think,
                              char *buf, int32_t cap, size_t plain[4]) {
    if (!m || cap < 0 || (!buf && cap)) {
        hachi_error_set("chat turn: %s", !m ? "no model" : cap < 0 ? "negative cap" : "NULL buffer");
        return -1;
    }
    const hachi_tokenizer *t = hachi_model_tokenizer(m);
    if (think && (hachi_chat_detect(m) != HACHI_CHAT_GEMMA4 || !hachi_tokenizer_is_control(t, hachi_tokenizer_find(t, "<|think|>")))) {
        hachi_error_set("chat turn: thinking needs Gemma 4's chat format and its <|think|> token; this model has %s",
                        hachi_chat_detect(m) == HACHI_CHAT_GEMMA4 ? "no <|think|> control token" : "another format");
        return -1;
    }
    if (!user) user = "";
    const char *bos = "";
    size_t bl = 0;
    int32_t b = hachi_tokenizer_bos(t);
    if (first && b >= 0) bos = hachi_tokenizer_piece(t, b, &bl);
    char bosz[64];
    snprintf(bosz, sizeof bosz, "%.*s", (int)HACHI_MIN(bl, 63), bos);
    size_t syl = 0, ul = strlen(user);
    const char *sy = first && system ? system : "";
    if (hachi_chat_detect(m) == HACHI_CHAT_GEMMA4) {
        sy = trimmed(sy, &syl);
        user = trimmed(user, &ul);
    } else syl = strlen(sy);
    const bool sys = syl > 0;
    part p[10];
    int n = 0;
#define PART(str, w) (p[n++] = (part){(str), strlen(str), (w)})
#define PARTN(str, l, w) (p[n++] = (part){(str), (l), (w)})
    switch (hachi_chat_detect(m)) {
    case HACHI_CHAT_GEMMA4:   /* later turns first close the previous reply (its <turn|> was sampled, not evaluated) */
        if (first) {
            PART(bosz, 0);
            PART(sys || think ? "<|turn>system\n" : "", 0);
            PART(think ? "<|think|>\n" : "", 0);
            PARTN(sy, syl, 1);
            PART(sys || think ? "<turn|>\n<|turn>user\n" : "<|turn>user\n", 0);
        } else PART("<turn|>\n<|turn>user\n", 0);
        PARTN(user, ul, 2);
        PART("<turn|>\n<|turn>model\n", 0);
        PART(think ? "" : hachi_chat_reply_prefix(m), 0);   /* thinking: the model writes its thought */
        break;
    case HACHI_CHAT_GEMMA3:
        PART(first ? bosz : "<end_of_turn>\n", 0);
        PART("<start_of_turn>user\n", 0);
        PARTN(sy, syl, 1);
        PART(sys ? "\n\n" : "", 0);
        PARTN(user, ul, 2);
        PART("<end_of_turn>\n<start_of_turn>model\n", 0);
        break;
    default:
        PART(first ? bosz : "\n", 0);
        PARTN(sy, syl, 1);
        PART(sys ? "\nUser: " : "User: ", 0);
        PARTN(user, ul, 2);
        PART("\nAssistant:", 0);
        break;
    }
#undef PART
#undef PARTN
    return join(p, n, buf, cap, plain);
}

int32_t hachi_chat_turn_spans(const hachi_model *m, const char *system, const char *user, bool first, char *buf,
                              int32_t cap, size_t plain[4]) {
    return hachi_chat_turn_think(m, system, user, first, false, buf, cap, plain);
}

int32_t hachi_chat_turn(const hachi_model *m, const char *system, const char *user, bool first, char *buf,
                        int32_t cap) {
    return hachi_chat_turn_think(m, system, user, first, false, buf, cap, NULL);
}
