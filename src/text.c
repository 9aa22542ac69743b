/* text: the public text API over a model (include/hachi.h): tokenize, the text of a
 * token, the streaming detokenizer. Thin wrappers over tokenizer.c, which knows only
 * GGUF: model -> tokenizer, never the other way. Nothing here is hot. */
#include <string.h>
#include "model.h"
#include "util.h"

struct hachi_detok {
    const hachi_tokenizer *tok;     /* the model's; the model outlives the detokenizer */
    hachi_detok_state st;
    int32_t thought_open, thought_close;   /* Gemma 4's <|channel>, <channel|>; -1: none */
    bool in_thought;                /* between them */
    bool last_in_thought;           /* the text the last push or flush returned lies in a thought */
    int32_t thought_tokens;         /* since the reset */
};

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

hachi_status hachi_detok_create(const hachi_model *model, hachi_detok **out) {
    if (!out) return hachi_fail(HACHI_ERR_INVALID_ARG, "detok_create: out is NULL");
    *out = NULL;
    const hachi_tokenizer *t = hachi_model_tokenizer(model);
    if (!t) return hachi_fail(HACHI_ERR_INVALID_ARG, "detok_create: no model");
    hachi_detok *d = hachi_malloc(sizeof *d);
    if (!d) return HACHI_ERR_NOMEM;   /* (hachi_malloc set the message) */
    d->tok = t;
    hachi_tokenizer_detok_init(&d->st, true);
    d->thought_open = hachi_tokenizer_find(t, "<|channel>");
    d->thought_close = hachi_tokenizer_find(t, "<channel|>");
    if (d->thought_open < 0 || d->thought_close < 0 || !hachi_tokenizer_is_control(t, d->thought_open) ||
        !hachi_tokenizer_is_control(t, d->thought_close))
        d->thought_open = d->thought_close = -1;
    d->in_thought = d->last_in_thought = false;
    d->thought_tokens = 0;
    *out = d;
    return HACHI_OK;
}

void hachi_detok_free(hachi_detok *d) { hachi_free(d); }

void hachi_detok_reset(hachi_detok *d, bool at_start) {
    if (!d) return;
    hachi_tokenizer_detok_init(&d->st, at_start);
    d->in_thought = d->last_in_thought = false;
    d->thought_tokens = 0;
}

bool hachi_detok_in_thought(const hachi_detok *d) { return d && d->last_in_thought; }

int32_t hachi_detok_thought_tokens(const hachi_detok *d) { return d ? d->thought_tokens : 0; }

int32_t hachi_detok_push(hachi_detok *d, int32_t token, char *out, int32_t cap) {
    if (!d || !out || cap <= 0) return 0;
    if (d->thought_open >= 0 && (token == d->thought_open || token == d->thought_close)) {
        /* a thought's marker: what is pending belongs to the text before it */
        d->last_in_thought = d->in_thought;
        d->in_thought = token == d->thought_open;
        return hachi_tokenizer_detok_flush(d->tok, &d->st, out, cap);
    }
    d->last_in_thought = d->in_thought;
    d->thought_tokens += d->in_thought;
    return hachi_tokenizer_detok_push(d->tok, &d->st, token, out, cap);
}

int32_t hachi_detok_flush(hachi_detok *d, char *out, int32_t cap) {
    if (!d || !out || cap <= 0) return 0;
    d->last_in_thought = d->in_thought;
    return hachi_tokenizer_detok_flush(d->tok, &d->st, out, cap);
}
