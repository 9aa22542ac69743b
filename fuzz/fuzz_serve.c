/* libFuzzer target for hachi serve's request JSON (tools/serve_api.c): any bytes as a chat and
 * as a completion body; a body that parses is also written back as a response and as stream
 * chunks, and a response_format's schema walks the bytes; and the bytes as a reply's Gemma 4 tool calls. The chat format is a stand-in shaped as Gemma 4's (turn markers and a reply prefix)
 * so that no model is needed: the JSON handling and the message walk are what is fuzzed; the bytes
 * also go to /tokenize's and /detokenize's readers (a stand-in tokenizer). Build:
 * make fuzz; run:
 *   build-fuzz/fuzz_serve -max_total_time=60 /tmp/serve-corpus fuzz/serve-corpus */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

hachi_chat_format hachi_chat_detect(const hachi_model *m) { return HACHI_CHAT_GEMMA4; }

const char *hachi_chat_reply_prefix(const hachi_model *m) { return "<|channel>thought\n<channel|>"; }

int32_t hachi_model_bos(const hachi_model *m) { return 2; }

int32_t hachi_model_n_vocab(const hachi_model *m) { return 8; }

bool hachi_token_is_control(const hachi_model *m, int32_t token) { return token == 2; }

bool hachi_model_is_eog(const hachi_model *m, int32_t token) { return token == 1; }

int32_t hachi_token_to_text(const hachi_model *m, int32_t token, char *buf, int32_t cap) {
    return snprintf(buf, (size_t)cap, "<bos>");
}

int32_t hachi_chat_turn_spans(const hachi_model *m, const char *system, const char *user, bool first, char *buf,
                              int32_t cap, size_t plain[4]) {
    const char *sy = first && system ? system : "";
    const char *head = first ? (*sy ? "<bos><|turn>system\n" : "<bos>") : "<turn|>\n";
    const char *mid = first && *sy ? "<turn|>\n<|turn>user\n" : "<|turn>user\n";
    if (plain) {
        plain[0] = strlen(head);
        plain[1] = strlen(sy);
        plain[2] = plain[0] + plain[1] + strlen(mid);
        plain[3] = strlen(user);
    }
    int n = snprintf(buf, (size_t)cap, "%s%s%s%s<turn|>\n<|turn>model\n%s", head, sy, mid, user, hachi_chat_reply_prefix(m));
    return n < 0 ? 0 : n;
}

int32_t hachi_chat_turn(const hachi_model *m, const char *system, const char *user, bool first, char *buf, int32_t cap) {
    return hachi_chat_turn_spans(m, system, user, first, buf, cap, NULL);
}

int32_t hachi_chat_turn_think(const hachi_model *m, const char *system, const char *user, bool first, bool think,
                              char *buf, int32_t cap, size_t plain[4]) {
    return think ? -1 : hachi_chat_turn_spans(m, system, user, first, buf, cap, plain);   /* no thinking in the stand-in */
}

/* /tokenize and /detokenize's stand-ins: a token a byte (ids 0..7: the byte's low 3 bits), its text a letter */
hachi_status hachi_tokenize(const hachi_model *m, const char *text, size_t len, bool add_bos, bool parse_special, int32_t *out,
                            int32_t cap, int32_t *n_out) {
    *n_out = (int32_t)len + add_bos;
    if (!out) return HACHI_OK;
    if (*n_out > cap) return HACHI_ERR_INVALID_ARG;
    for (size_t i = 0; i < len; i++) out[i + add_bos] = text[i] & 7;
    if (add_bos) out[0] = 2;
    return HACHI_OK;
}
struct hachi_detok { int n; };
hachi_status hachi_detok_create(const hachi_model *m, hachi_detok **out) {
    return (*out = calloc(1, sizeof **out)) ? HACHI_OK : HACHI_ERR_NOMEM;
}
void hachi_detok_free(hachi_detok *d) { free(d); }
void hachi_detok_reset(hachi_detok *d, bool at_start) { d->n = 0; }
int32_t hachi_detok_push(hachi_detok *d, int32_t token, char *out, int32_t cap) {
    out[0] = token == 3 ? 0 : (char)('a' + token);   /* (3: a NUL byte, as a byte token's) */
    d->n++;
    return 1;
}
int32_t hachi_detok_flush(hachi_detok *d, char *out, int32_t cap) { return 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char chunk[1 << 16], entry[1 << 14];
    for (int chat = 0; chat < 2; chat++) {
        serve_req rq;
        char err[512];
        if (!serve_parse((const char *)data, size, chat, NULL, &rq, err, sizeof err)) continue;
        serve_result r = {.id = "id", .model = "m", .created = 1, .text = rq.prompt, .len = strlen(rq.prompt),
                          .finish = "stop", .prompt_tokens = 1};
        if (rq.top_logprobs >= 0) {   /* the request's text as a token's logits, and entries of it */
            float lg[8] = {0};
            memcpy(lg, rq.prompt, strlen(rq.prompt) < sizeof lg ? strlen(rq.prompt) : sizeof lg);
            r.logprobs = entry;   /* a completion's: a prompt's first entry (no distribution), then one drawn */
            const size_t w = chat ? 0 : serve_logprob_entry(entry, sizeof entry - 1, NULL, NULL, (int32_t)(size % 9), rq.top_logprobs, SERVE_STRIP_TEXT, 0);
            if (w) entry[w] = ',';
            r.logprobs_len = serve_logprob_entry(entry + w + !!w, sizeof entry - w - 1, NULL, lg, (int32_t)(size % 9),
                                                 rq.top_logprobs, (int)(size % 2), chat ? -1 : (long)(size % 7));
            r.logprobs_len += r.logprobs_len ? w + !!w : 0;
        }
        if (rq.schema) {   /* a response_format's schema walked by the body's own bytes */
            json_state st;
            json_state_init(&st, rq.schema);
            json_state_feed(&st, (const char *)data, size);
            json_state_done(&st);
        }
        free(serve_result_json(&rq, &r));
        serve_chunk(chunk, sizeof chunk, &rq, &r, r.text, r.len, true, NULL, false);
        serve_chunk(chunk, sizeof chunk, &rq, &r, "", 0, false, "length", false);
        serve_chunk(chunk, sizeof chunk, &rq, &r, NULL, 0, false, NULL, true);
        serve_chunk_reasoning(chunk, sizeof chunk, &rq, &r, r.text, r.len);
        serve_req_free(&rq);
    }
    char err[512];   /* the bytes as /tokenize's and /detokenize's bodies */
    free(serve_tokenize(NULL, (const char *)data, size, err, sizeof err));
    free(serve_detokenize(NULL, (const char *)data, size, err, sizeof err));
    serve_json_escape(chunk, sizeof chunk, (const char *)data, size);
    char *rest = NULL;   /* the bytes as a reply's tool calls */
    size_t rest_len = 0;
    free(serve_tool_calls((const char *)data, size, "call_", &rest, &rest_len));
    free(rest);
    return 0;
}
