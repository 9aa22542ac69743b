/* test_gguf_control_tokens: a copy of a GGUF with some pieces renamed as control tokens (the
 * tests' Gemma 4 vocabulary from the shared Gemma 3 one; a trained model whose '.' and ',' stand
 * for Gemma 4's thought markers). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "gguf.h"
#include "test.h"

/* The encoded payload of a GGUF string array (element type, count, then length and bytes of
 * each) with the strings at ids[0..n_repl) replaced by repl[]; malloc'd, length in *len. */
static uint8_t *str_array_payload(const hachi_gguf_value *v, const int32_t *ids, const char *const *repl,
                                  int n_repl, size_t *len) {
    size_t sz = 12;
    for (uint64_t i = 0; i < v->arr.n; i++) sz += 8 + v->arr.strs[i].len;
    for (int r = 0; r < n_repl; r++) sz += strlen(repl[r]) - v->arr.strs[ids[r]].len;
    uint8_t *p = malloc(sz), *q = p;
    if (!p) return NULL;
    uint32_t et = HACHI_GGUF_STRING;
    uint64_t n = v->arr.n;
    memcpy(q, &et, 4);   /* (little-endian host, as the rest of hachi) */
    memcpy(q + 4, &n, 8);
    q += 12;
    for (uint64_t i = 0; i < n; i++) {
        const char *s = v->arr.strs[i].ptr;
        uint64_t l = v->arr.strs[i].len;
        for (int r = 0; r < n_repl; r++)
            if ((uint64_t)ids[r] == i) { s = repl[r]; l = strlen(repl[r]); }
        memcpy(q, &l, 8);
        if (l) memcpy(q + 8, s, (size_t)l);
        q += 8 + l;
    }
    *len = sz;
    return p;
}

bool test_gguf_control_tokens(const char *src, const char *dst, const int32_t *ids, const char *const *pieces, int n,
                              const char *tmpl) {
    hachi_gguf *g = NULL;
    hachi_status st = hachi_gguf_open(src, &g);
    CHECKF(st == HACHI_OK, "open %s: %s", src, hachi_last_error());
    if (st) return false;
    hachi_gguf_writer *w = hachi_gguf_writer_new();
    bool ok = w != NULL;
    for (int64_t k = 0; ok && k < hachi_gguf_n_kv(g); k++) {
        const char *key = hachi_gguf_key_at(g, k);
        const hachi_gguf_value *v = hachi_gguf_value_at(g, k);
        const bool tokens = !strcmp(key, "tokenizer.ggml.tokens"), types = !strcmp(key, "tokenizer.ggml.token_type");
        bool short_arr = false;
        for (int i = 0; i < n && (tokens || types); i++) short_arr |= v->arr.n <= (uint64_t)ids[i];
        if (short_arr) { CHECKF(0, "%s: too short", key); ok = false; break; }
        if (tokens && v->type == HACHI_GGUF_ARRAY && v->arr.type == HACHI_GGUF_STRING) {
            size_t len = 0;
            uint8_t *p = str_array_payload(v, ids, pieces, n, &len);
            st = p ? hachi_gguf_set_raw(w, key, HACHI_GGUF_ARRAY, p, len) : HACHI_ERR_NOMEM;
            free(p);
        } else if (types && v->type == HACHI_GGUF_ARRAY && v->arr.type == HACHI_GGUF_INT32) {
            int32_t *t = malloc(sizeof *t * v->arr.n);
            if (!t) { ok = false; break; }
            memcpy(t, v->arr.data, sizeof *t * v->arr.n);
            for (int i = 0; i < n; i++) t[ids[i]] = 3;   /* control */
            st = hachi_gguf_set_arr(w, key, HACHI_GGUF_INT32, t, v->arr.n);
            free(t);
        } else if (!strcmp(key, "tokenizer.chat_template")) {
            continue;
        } else {
            st = hachi_gguf_copy_kv(w, g, k);
        }
        CHECKF(st == HACHI_OK, "copy %s (type %u): %s", key, v->type, hachi_last_error());
        ok = st == HACHI_OK;
    }
    if (ok && tmpl) {
        st = hachi_gguf_set_str(w, "tokenizer.chat_template", tmpl);
        CHECKF(st == HACHI_OK, "chat template: %s", hachi_last_error());
        ok = st == HACHI_OK;
    }
    for (int64_t i = 0; ok && i < hachi_gguf_n_tensors(g); i++) {   /* the data stays mapped until the write */
        const hachi_gguf_tensor *t = hachi_gguf_tensor_at(g, i);
        st = hachi_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
        CHECKF(st == HACHI_OK, "tensor %s: %s", t->name, hachi_last_error());
        ok = st == HACHI_OK;
    }
    if (ok) {
        st = hachi_gguf_writer_write(w, dst);
        CHECKF(st == HACHI_OK, "write %s: %s", dst, hachi_last_error());
        ok = st == HACHI_OK;
    }
    hachi_gguf_writer_free(w);
    hachi_gguf_free(g);
    return ok;
}
