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
    bool hide;                      /* thoughts left out */
    bool in_thought;
    int32_t hidden;                 /* tokens left out since the reset */
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
    d->hide = d->in_thought = false;
    d->hidden = 0;
    *out = d;
    return HACHI_OK;
}

void hachi_detok_free(hachi_detok *d) { hachi_free(d); }

void hachi_detok_reset(hachi_detok *d, bool at_start) {
    if (!d) return;
    hachi_tokenizer_detok_init(&d->st, at_start);
    d->in_thought = false;
    d->hidden = 0;
}

void hachi_detok_hide_thoughts(hachi_detok *d, bool hide) {
    if (d) d->hide = hide;
}

int32_t hachi_detok_hidden(const hachi_detok *d) { return d ? d->hidden : 0; }

int32_t hachi_detok_push(hachi_detok *d, int32_t token, char *out, int32_t cap) {
    if (!d || !out || cap <= 0) return 0;
    if (d->hide && d->thought_open >= 0) {   /* a thought's text is left out, its markers are control */
        if (token == d->thought_open) d->in_thought = true;
        else if (token == d->thought_close) d->in_thought = false;
        else if (d->in_thought) { d->hidden++; return 0; }
    }
    return hachi_tokenizer_detok_push(d->tok, &d->st, token, out, cap);
}

int32_t hachi_detok_flush(hachi_detok *d, char *out, int32_t cap) {
    return d && out && cap > 0 ? hachi_tokenizer_detok_flush(d->tok, &d->st, out, cap) : 0;
}
