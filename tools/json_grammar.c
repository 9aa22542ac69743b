/* JSON as a constraint on sampling (serve's response_format json_object): a byte-level pushdown
 * automaton of RFC 8259 JSON whose root is an object, and, per sampling step, the mask of the
 * vocabulary's tokens whose text can come next (hachi_sampler_constraint). After the root object
 * closes, only an end-of-generation token may come. A token's text is its piece as
 * hachi_token_to_text gives it (a byte token its byte); control tokens other than the end are never
 * allowed (their text is not the reply's). White space between two of JSON's tokens is at most one
 * newline and JSON_WS_MAX spaces or tabs (llama.cpp's JSON grammar allows as much), and nesting
 * at most JSON_DEPTH_MAX deep, so that a model cannot stall in either. The mask costs one pass over the vocabulary: a token is rejected by its first byte where
 * that byte cannot come, taken whole inside a string when it holds no quote, backslash or control
 * byte, and run through a copy of the automaton otherwise. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

enum {
    J_VALUE,        /* a value: the root's (an object), an array's first or next, an object member's */
    J_ARR_FIRST,    /* after '[': a value or ']' */
    J_KEY_FIRST,    /* after '{': a key or '}' */
    J_KEY,          /* after ',' in an object: a key */
    J_COLON,        /* after a key */
    J_AFTER,        /* after a value in a container: ',' or its close */
    J_STRING,       /* in a string (key: the top of the stack says) */
    J_ESC,          /* after '\' in a string */
    J_HEX,          /* in \uXXXX, hex digits left in n */
    J_MINUS,        /* a number after '-' */
    J_ZERO,         /* a number's integer part "0" */
    J_INT,          /* its integer digits */
    J_DOT,          /* after '.' */
    J_FRAC,         /* fraction digits */
    J_E,            /* after 'e' */
    J_ESIGN,        /* after the exponent's sign */
    J_EXP,          /* exponent digits */
    J_LIT,          /* true / false / null: the literal's rest */
    J_DONE,         /* the root closed: only the end */
    J_FAIL,
};

static const char *const lits[3] = {"true", "false", "null"};

void json_state_init(json_state *s) {
    memset(s, 0, sizeof *s);
    s->mode = J_VALUE;
}

static bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* A value has ended: the container's next, or the root's end */
static void value_end(json_state *s) { s->mode = s->depth ? J_AFTER : J_DONE; }

/* The start of a value at c (false: none starts there) */
static bool value_start(json_state *s, unsigned char c) {
    if (s->depth == 0 && c != '{') return false;   /* the root is an object */
    switch (c) {
    case '{': case '[':
        if (s->depth == JSON_DEPTH_MAX) return false;
        s->stack[s->depth++] = (char)c;
        s->mode = c == '{' ? J_KEY_FIRST : J_ARR_FIRST;
        return true;
    case '"': s->key = false; s->mode = J_STRING; return true;
    case '-': s->mode = J_MINUS; return true;
    case '0': s->mode = J_ZERO; return true;
    case 't': case 'f': case 'n':
        s->lit = c == 't' ? 0 : c == 'f' ? 1 : 2;
        s->n = 1;
        s->mode = J_LIT;
        return true;
    default:
        if (c >= '1' && c <= '9') { s->mode = J_INT; return true; }
        return false;
    }
}

/* A number ends at c, which is then what follows the value */
static bool number_end(json_state *s, unsigned char c);

static bool after_value(json_state *s, unsigned char c) {
    const char top = s->stack[s->depth - 1];
    if (c == ',') { s->mode = top == '{' ? J_KEY : J_VALUE; return true; }
    if (c == (top == '{' ? '}' : ']')) { s->depth--; value_end(s); return true; }
    return false;
}

/* One byte; false (and the state J_FAIL) where JSON cannot go on with it */
static bool step(json_state *s, unsigned char c) {
    const int m = s->mode;
    if (is_ws(c) && (m <= J_AFTER || m == J_DONE)) {   /* between tokens (none after the root: the end must come) */
        const bool nl = c == '\n';
        if (m == J_DONE || c == '\r' || (nl ? s->nl++ : s->ws++) >= (nl ? 1 : JSON_WS_MAX)) { s->mode = J_FAIL; return false; }
        return true;
    }
    if (m <= J_AFTER) s->ws = s->nl = 0;
    bool ok = true;
    switch (m) {
    case J_VALUE: ok = value_start(s, c); break;
    case J_ARR_FIRST:
        if (c == ']') { s->depth--; value_end(s); }
        else ok = value_start(s, c);
        break;
    case J_KEY_FIRST:
    case J_KEY:
        if (c == '"') { s->key = true; s->mode = J_STRING; }
        else if (c == '}' && m == J_KEY_FIRST) { s->depth--; value_end(s); }
        else ok = false;
        break;
    case J_COLON:
        if (c == ':') s->mode = J_VALUE;
        else ok = false;
        break;
    case J_AFTER: ok = after_value(s, c); break;
    case J_STRING:
        if (c == '"') { if (s->key) s->mode = J_COLON; else value_end(s); }
        else if (c == '\\') s->mode = J_ESC;
        else ok = c >= 0x20;
        break;
    case J_ESC:
        if (c == 'u') { s->mode = J_HEX; s->n = 4; }
        else if (strchr("\"\\/bfnrt", c) && c) s->mode = J_STRING;
        else ok = false;
        break;
    case J_HEX:
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) ok = false;
        else if (--s->n == 0) s->mode = J_STRING;
        break;
    case J_MINUS:
        if (c == '0') s->mode = J_ZERO;
        else if (c >= '1' && c <= '9') s->mode = J_INT;
        else ok = false;
        break;
    case J_ZERO: case J_INT: case J_FRAC: case J_EXP:
        if (c >= '0' && c <= '9' && m != J_ZERO) break;
        if (c == '.' && m <= J_INT) s->mode = J_DOT;
        else if ((c == 'e' || c == 'E') && m != J_EXP) s->mode = J_E;
        else ok = number_end(s, c);
        break;
    case J_DOT: case J_ESIGN:
        if (c >= '0' && c <= '9') s->mode = m == J_DOT ? J_FRAC : J_EXP;
        else ok = false;
        break;
    case J_E:
        if (c == '+' || c == '-') s->mode = J_ESIGN;
        else if (c >= '0' && c <= '9') s->mode = J_EXP;
        else ok = false;
        break;
    case J_LIT:
        if (c != (unsigned char)lits[s->lit][s->n]) ok = false;
        else if (!lits[s->lit][++s->n]) value_end(s);
        break;
    default: ok = false;
    }
    if (!ok) s->mode = J_FAIL;
    return ok;
}

static bool number_end(json_state *s, unsigned char c) {
    value_end(s);   /* (a number is never the root) */
    s->ws = s->nl = 0;
    return is_ws(c) ? step(s, c) : after_value(s, c);
}

bool json_state_feed(json_state *s, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!step(s, (unsigned char)p[i])) return false;
    return true;
}

bool json_state_done(const json_state *s) { return s->mode == J_DONE; }

/* ---- the vocabulary ----------------------------------------------------------------------------- */

struct json_vocab {
    const hachi_model *m;
    int32_t n;
    uint32_t *off;          /* [n + 1] token t's text: bytes[off[t], off[t + 1]) */
    char *bytes;
    uint8_t *kind;          /* [n] JV_* */
};
enum { JV_TEXT = 0, JV_PLAIN = 1, JV_END = 2, JV_NONE = 3 };   /* plain: string content whole; end: end of generation */

json_vocab *json_vocab_create(const hachi_model *m) {
    json_vocab *v = calloc(1, sizeof *v);
    const int32_t n = hachi_model_n_vocab(m);
    if (!v) return NULL;
    v->m = m;
    v->n = n;
    v->off = malloc(sizeof *v->off * ((size_t)n + 1));
    v->kind = malloc((size_t)n);
    size_t total = 0, cap = (size_t)n * 8 + 1024;
    v->bytes = malloc(cap);
    if (!v->off || !v->kind || !v->bytes) { json_vocab_free(v); return NULL; }
    for (int32_t t = 0; t < n; t++) {
        char piece[1024];
        const bool control = hachi_token_is_control(m, t);
        int32_t k = control ? 0 : CLI_MAX(0, CLI_MIN(hachi_token_to_text(m, t, piece, sizeof piece), (int32_t)sizeof piece));
        if (total + (size_t)k > cap) {
            char *b = realloc(v->bytes, cap = 2 * (total + (size_t)k));
            if (!b) { json_vocab_free(v); return NULL; }
            v->bytes = b;
        }
        v->off[t] = (uint32_t)total;
        memcpy(v->bytes + total, piece, (size_t)k);
        total += (size_t)k;
        bool plain = k > 0;
        for (int32_t j = 0; j < k && plain; j++) {
            const unsigned char c = (unsigned char)piece[j];
            plain = c >= 0x20 && c != '"' && c != '\\';
        }
        v->kind[t] = hachi_model_is_eog(m, t) ? JV_END : control || k == 0 ? JV_NONE : plain ? JV_PLAIN : JV_TEXT;
    }
    v->off[n] = (uint32_t)total;
    return v;
}

void json_vocab_free(json_vocab *v) {
    if (!v) return;
    free(v->off);
    free(v->bytes);
    free(v->kind);
    free(v);
}

void json_grammar_init(json_grammar *g, const json_vocab *v) {
    g->v = v;
    json_state_init(&g->st);
}

void json_grammar_mask(void *ctx, float *logits, int32_t n_vocab) {
    const json_grammar *g = ctx;
    const json_vocab *v = g->v;
    const json_state *s = &g->st;
    bool first[256];   /* the bytes that can come next */
    for (int c = 0; c < 256; c++) {
        json_state t = *s;
        first[c] = step(&t, (unsigned char)c);
    }
    const bool in_string = s->mode == J_STRING;
    for (int32_t t = 0; t < n_vocab && t < v->n; t++) {
        const int k = v->kind[t];
        bool ok;
        if (k == JV_END) ok = s->mode == J_DONE || s->mode == J_FAIL;   /* (failed: a forced token; end it) */
        else if (k == JV_NONE) ok = false;
        else if (!first[(unsigned char)v->bytes[v->off[t]]]) ok = false;
        else if (k == JV_PLAIN && in_string) ok = true;
        else {
            json_state x = *s;
            ok = json_state_feed(&x, v->bytes + v->off[t], v->off[t + 1] - v->off[t]);
        }
        if (!ok) logits[t] = -INFINITY;
    }
    for (int32_t t = v->n; t < n_vocab; t++) logits[t] = -INFINITY;
}

void json_grammar_accept(void *ctx, int32_t token) {
    json_grammar *g = ctx;
    const json_vocab *v = g->v;
    if (token < 0 || token >= v->n || v->kind[token] >= JV_END) { g->st.mode = J_FAIL; return; }
    json_state_feed(&g->st, v->bytes + v->off[token], v->off[token + 1] - v->off[token]);
}
