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

int32_t hachi_chat_turn(const hachi_model *m, const char *system, const char *user, bool first,
                        char *buf, int32_t cap) {
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
    bool sys = first && system && *system;
    int n;
    switch (hachi_chat_detect(m)) {
    case HACHI_CHAT_GEMMA4:   /* later turns first close the previous reply (its <turn|> was sampled, not evaluated) */
        if (first)
            n = snprintf(buf, cap, "%s%s%s%s<|turn>user\n%s<turn|>\n<|turn>model\n", bosz, sys ? "<|turn>system\n" : "",
                         sys ? system : "", sys ? "<turn|>\n" : "", user);
        else
            n = snprintf(buf, cap, "<turn|>\n<|turn>user\n%s<turn|>\n<|turn>model\n", user);
        break;
    case HACHI_CHAT_GEMMA3:
        n = snprintf(buf, cap, "%s<start_of_turn>user\n%s%s%s<end_of_turn>\n<start_of_turn>model\n",
                     first ? bosz : "<end_of_turn>\n", sys ? system : "", sys ? "\n\n" : "", user);
        break;
    default:
        n = snprintf(buf, cap, "%s%s%sUser: %s\nAssistant:", first ? bosz : "\n", sys ? system : "", sys ? "\n" : "", user);
        break;
    }
    return n < 0 ? 0 : n;
}
