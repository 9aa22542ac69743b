/* chat: the chat format of a model, picked from its vocabulary (and the GGUF
 * tokenizer.chat_template when present), and the text of one turn.
 *   Gemma 4: <bos><|turn>system\n...<turn|>\n<|turn>user\n...<turn|>\n<|turn>model\n
 *   Gemma 3: <bos><start_of_turn>user\n(system\n\n)...<end_of_turn>\n<start_of_turn>model\n
 *   plain (vocabularies without turn tokens): "User: ...\nAssistant:" */
#include <stdio.h>
#include <string.h>
#include "model.h"
#include "util.h"

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

/* A turn's parts in order: template text (which = 0), or the system prompt (1) or user text (2) */
typedef struct { const char *s; int which; } part;

/* The parts joined into buf as snprintf would (at most cap bytes with the NUL), the system's and
 * the user's offset and length into plain[4] (NULL: not wanted); returns the full length. */
static int32_t join(const part *p, int n, char *buf, int32_t cap, size_t *plain) {
    size_t len = 0;
    if (plain) memset(plain, 0, 4 * sizeof *plain);
    for (int i = 0; i < n; i++) {
        const size_t k = strlen(p[i].s);
        if (plain && p[i].which) { plain[2 * p[i].which - 2] = len; plain[2 * p[i].which - 1] = k; }
        if (cap > 0 && len < (size_t)cap - 1) memcpy(buf + len, p[i].s, HACHI_MIN(k, (size_t)cap - 1 - len));
        len += k;
    }
    if (cap > 0) buf[HACHI_MIN(len, (size_t)cap - 1)] = 0;
    return (int32_t)HACHI_MIN(len, (size_t)INT32_MAX);
}

int32_t hachi_chat_turn_spans(const hachi_model *m, const char *system, const char *user, bool first, char *buf,
                              int32_t cap, size_t plain[4]) {
    if (!m || cap < 0 || (!buf && cap)) {
        hachi_error_set("chat turn: %s", !m ? "no model" : cap < 0 ? "negative cap" : "NULL buffer");
        return -1;
    }
    if (!user) user = "";
    const char *bos = "";
    const hachi_tokenizer *t = hachi_model_tokenizer(m);
    size_t bl = 0;
    int32_t b = hachi_tokenizer_bos(t);
    if (first && b >= 0) bos = hachi_tokenizer_piece(t, b, &bl);
    char bosz[64];
    snprintf(bosz, sizeof bosz, "%.*s", (int)HACHI_MIN(bl, 63), bos);
    const bool sys = first && system && *system;
    const char *sy = sys ? system : "";
    part p[8];
    int n = 0;
#define PART(str, w) (p[n++] = (part){(str), (w)})
    switch (hachi_chat_detect(m)) {
    case HACHI_CHAT_GEMMA4:   /* later turns first close the previous reply (its <turn|> was sampled, not evaluated) */
        if (first) {
            PART(bosz, 0);
            PART(sys ? "<|turn>system\n" : "", 0);
            PART(sy, 1);
            PART(sys ? "<turn|>\n<|turn>user\n" : "<|turn>user\n", 0);
        } else PART("<turn|>\n<|turn>user\n", 0);
        PART(user, 2);
        PART("<turn|>\n<|turn>model\n", 0);
        break;
    case HACHI_CHAT_GEMMA3:
        PART(first ? bosz : "<end_of_turn>\n", 0);
        PART("<start_of_turn>user\n", 0);
        PART(sy, 1);
        PART(sys ? "\n\n" : "", 0);
        PART(user, 2);
        PART("<end_of_turn>\n<start_of_turn>model\n", 0);
        break;
    default:
        PART(first ? bosz : "\n", 0);
        PART(sy, 1);
        PART(sys ? "\nUser: " : "User: ", 0);
        PART(user, 2);
        PART("\nAssistant:", 0);
        break;
    }
#undef PART
    return join(p, n, buf, cap, plain);
}

int32_t hachi_chat_turn(const hachi_model *m, const char *system, const char *user, bool first, char *buf,
                        int32_t cap) {
    return hachi_chat_turn_spans(m, system, user, first, buf, cap, NULL);
}
