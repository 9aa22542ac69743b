/* text: the public text API over a model (include/hachi.h): tokenize, the text of a
 * token, the streaming detokenizer. Thin wrappers over tokenizer.c, which knows only
 * GGUF: model -> tokenizer, never the other way. Nothing here is hot. */
#include <string.h>
#include "model.h"
#include "util.h"

/* The sections of a reply: Gemma 4's thoughts between <|channel> and <channel|>, its tool calls
 * between <|tool_call> and <tool_call|> (control tokens all) */
enum { SEC_TEXT, SEC_THOUGHT, SEC_CALL, SEC_COUNT };

struct hachi_detok {
    const hachi_tokenizer *tok;     /* the model's; the model outlives the detokenizer */
    hachi_detok_state st;
    int32_t open[SEC_COUNT], close[SEC_COUNT];   /* each section's markers (SEC_TEXT's, none: -1) */
    int sec;                        /* the section the next token lies in */
    int last_sec;                   /* the section of the text the last push or flush returned */
    int32_t thought_tokens;         /* since the reset */
};

/* id's control token named s, else -1 */
static int32_t control(const hachi_tokenizer *t, const char *s) {
    const int32_t id = hachi_tokenizer_find(t, s);
    return hachi_tokenizer_is_control(t, id) ? id : -1;
}

static hachi_status tokenize(const hachi_model *model, const char *text, size_t len, bool add_bos, bool parse_special,
                             const size_t *plain, int32_t n_plain, int32_t *out, int32_t cap, int32_t *n_out) {
    const hachi_tokenizer *t = hachi_model_tokenizer(model);
    int32_t *ids, n;
    if (n_out) *n_out = 0;
    if (!t) return hachi_fail(HACHI_ERR_INVALID_ARG, "tokenize: no model");
    if (cap < 0 || (cap > 0 && !out)) return hachi_fail(HACHI_ERR_INVALID_ARG, "tokenize: bad output buffer");
    if (n_plain < 0 || (n_plain > 0 && !plain)) return hachi_fail(HACHI_ERR_INVALID_ARG, "tokenize: bad plain ranges");
    hachi_status st = hachi_tokenizer_encode_spans(t, text, len, add_bos, parse_special, plain, n_plain, &ids, &n);
    if (st) return st;
    if (n > 0 && cap > 0) memcpy(out, ids, (size_t)HACHI_MIN(n, cap) * sizeof *ids);
    if (n_out) *n_out = n;
    hachi_free(ids);
    return HACHI_OK;
}

hachi_status hachi_tokenize(const hachi_model *model, const char *text, size_t len, bool add_bos,
                            bool parse_special, int32_t *out, int32_t cap, int32_t *n_out) {
    return tokenize(model, text, len, add_bos, parse_special, NULL, 0, out, cap, n_out);
}

hachi_status hachi_tokenize_spans(const hachi_model *model, const char *text, size_t len, bool add_bos,
                                  const size_t *plain, int32_t n_plain, int32_t *out, int32_t cap, int32_t *n_out) {
    return tokenize(model, text, len, add_bos, true, plain, n_plain, out, cap, n_out);
}

int32_t hachi_token_to_text(const hachi_model *model, int32_t token, char *buf, int32_t cap) {
    if (!buf && cap) return -1;
    return hachi_tokenizer_token_text(hachi_model_tokenizer(model), token, buf, cap);
}

bool hachi_token_is_control(const hachi_model *model, int32_t token) {
    return model && hachi_tokenizer_is_control(hachi_model_tokenizer(model), token);
}

hachi_status hachi_detok_create(const hachi_model *model, hachi_detok **out) {
    if (!out) return hachi_fail(HACHI_ERR_INVALID_ARG, "detok_create: out is NULL");
    *out = NULL;
    const hachi_tokenizer *t = hachi_model_tokenizer(model);
    if (!t) return hachi_fail(HACHI_ERR_INVALID_ARG, "detok_create: no model");
    hachi_detok *d = hachi_malloc(sizeof *d);
    if (!d) return HACHI_ERR_NOMEM;   /* (hachi_malloc set the message) */
    d->tok = t;
    hachi_tokenizer_detok_init(&d->st, true);
    static const char *const markers[SEC_COUNT][2] = {{"", ""}, {"<|channel>", "<channel|>"}, {"<|tool_call>", "<tool_call|>"}};
    for (int k = 0; k < SEC_COUNT; k++) {
        d->open[k] = k ? control(t, markers[k][0]) : -1;
        d->close[k] = k ? control(t, markers[k][1]) : -1;
        if (d->open[k] < 0 || d->close[k] < 0) d->open[k] = d->close[k] = -1;
    }
    d->sec = d->last_sec = SEC_TEXT;
    d->thought_tokens = 0;
    *out = d;
    return HACHI_OK;
}

void hachi_detok_free(hachi_detok *d) { hachi_free(d); }

void hachi_detok_reset(hachi_detok *d, bool at_start) {
    if (!d) return;
    hachi_tokenizer_detok_init(&d->st, at_start);
    d->sec = d->last_sec = SEC_TEXT;
    d->thought_tokens = 0;
}

bool hachi_detok_in_thought(const hachi_detok *d) { return d && d->last_sec == SEC_THOUGHT; }

bool hachi_detok_in_tool_call(const hachi_detok *d) { return d && d->last_sec == SEC_CALL; }

bool hachi_detok_strips_space(const hachi_detok *d) {
    return d && d->st.at_start && hachi_tokenizer_strips_leading_space(d->tok);
}

int32_t hachi_detok_thought_tokens(const hachi_detok *d) { return d ? d->thought_tokens : 0; }

int32_t hachi_detok_push(hachi_detok *d, int32_t token, char *out, int32_t cap) {
    if (!d || !out || cap <= 0) return 0;
    d->last_sec = d->sec;
    for (int k = 1; k < SEC_COUNT; k++)
        if (token >= 0 && (token == d->open[k] || token == d->close[k])) {
            /* a section's marker: what is pending belongs to the text before it */
            d->sec = token == d->open[k] ? k : SEC_TEXT;
            return hachi_tokenizer_detok_flush(d->tok, &d->st, out, cap);
        }
    d->thought_tokens += d->sec == SEC_THOUGHT;
    if (d->sec == SEC_CALL && hachi_tokenizer_is_control(d->tok, token)) {   /* a call's <|"|> is its syntax: written */
        int32_t n = hachi_tokenizer_detok_flush(d->tok, &d->st, out, cap);
        size_t len = 0;
        const char *piece = hachi_tokenizer_piece(d->tok, token, &len);
        if (piece && (size_t)(cap - n) > len) { memcpy(out + n, piece, len); n += (int32_t)len; }
        return n;
    }
    return hachi_tokenizer_detok_push(d->tok, &d->st, token, out, cap);
}

int32_t hachi_detok_flush(hachi_detok *d, char *out, int32_t cap) {
    if (!d || !out || cap <= 0) return 0;
    d->last_sec = d->sec;
    return hachi_tokenizer_detok_flush(d->tok, &d->st, out, cap);
}
