/* serve_api: the JSON of hachi serve's OpenAI-compatible endpoints, on cJSON: request bodies
 * parsed and checked into a serve_req (chat messages turned into the model's chat format
 * with hachi_chat_turn), and the response objects and stream chunks written back. Knows
 * no HTTP and no slots (tools/cmd_serve.c). The stream chunks are written with snprintf
 * into the request's buffer (no allocation per token); whole responses go through cJSON. */
#ifndef HACHI_NO_SERVE
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

static bool fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return false;
}

/* The first byte of s[0..n) where it stops being UTF-8 (RFC 3629: no overlongs, no surrogates,
 * nothing past U+10FFFF), or n */
static size_t utf8_end(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        const unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!k || i + k > n) return i;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return i;
        if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F) || (c == 0xF0 && s[i + 1] < 0x90) ||
            (c == 0xF4 && s[i + 1] > 0x8F))
            return i;
        i += k;
    }
    return n;
}

/* The bytes at s[0..n) that begin a character without making a whole one: its lead byte and the
 * continuation bytes that may follow it (the maximal subpart, Unicode's U+FFFD unit); 0 when s[0]
 * begins none */
static size_t utf8_partial(const unsigned char *s, size_t n) {
    const unsigned c = s[0];
    const size_t k = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    size_t j = k ? 1 : 0;
    for (; j < k && j < n && (s[j] & 0xC0) == 0x80; j++)
        if (j == 1 && ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) ||
                       (c == 0xF4 && s[1] > 0x8F)))
            break;
    return j;
}

size_t serve_utf8_clean(const char *s, size_t n, bool final, char *out, size_t *kept) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, o = 0;
    *kept = 0;
    while (i < n) {
        const size_t e = i + utf8_end(u + i, n - i);
        memcpy(out + o, s + i, e - i);
        o += e - i;
        if ((i = e) == n) break;
        const size_t p = utf8_partial(u + i, n - i);
        if (p && i + p == n && !final) { *kept = p; break; }
        out[o++] = (char)0xEF;   /* U+FFFD */
        out[o++] = (char)0xBF;
        out[o++] = (char)0xBD;
        i += p ? p : 1;
    }
    return o;
}

/* How many of s's first bytes (at most max) to print without cutting a character */
static int clip(const char *s, int max) {
    int n = 0;
    while (n < max && s[n]) n++;
    if (s[n])
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    return n;
}

static const char *type_name(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "invalid";
}

/* ---- a growing text (the chat prompt) -------------------------------------------------- */

typedef struct { char *p; size_t len, cap; bool oom; } text_buf;

static void put(text_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (!b->p || b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}
static void puts_(text_buf *b, const char *s) { if (s) put(b, s, strlen(s)); }

/* ---- fields -------------------------------------------------------------------------------- */

/* An optional number field in [lo, hi] (integral when integer); false with err on a bad one. */
static bool num_field(const cJSON *o, const char *name, bool integer, double lo, double hi, double *out, bool *given,
                      char *err, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    *given = false;
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsNumber(v)) return fail(err, cap, "'%s' must be a number, got %s", name, type_name(v));
    double d = v->valuedouble;
    if (integer && d != floor(d)) return fail(err, cap, "'%s' must be an integer, got %.15g", name, d);
    if (!(d >= lo && d <= hi)) return fail(err, cap, "'%s' must be in [%.15g, %.15g], got %.15g", name, lo, hi, d);
    *out = d;
    *given = true;
    return true;
}

static bool bool_field(const cJSON *o, const char *name, bool *out, char *err, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsBool(v)) return fail(err, cap, "'%s' must be a boolean, got %s", name, type_name(v));
    *out = cJSON_IsTrue(v);
    return true;
}

static bool add_stop(serve_req *rq, const char *s, char *err, size_t cap) {
    size_t n = strlen(s);
    if (n == 0) return true;   /* an empty stop sequence stops nothing */
    if (rq->n_stop == SERVE_MAX_STOP) return fail(err, cap, "'stop' holds more than %d sequences", SERVE_MAX_STOP);
    if (n > SERVE_MAX_STOP_LEN) return fail(err, cap, "'stop' sequence of %zu bytes: at most %d", n, SERVE_MAX_STOP_LEN);
    if (!(rq->stop[rq->n_stop] = strdup(s))) return fail(err, cap, "out of memory");
    rq->n_stop++;
    return true;
}

static bool stop_field(const cJSON *o, serve_req *rq, char *err, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "stop");
    if (!v || cJSON_IsNull(v)) return true;
    if (cJSON_IsString(v)) return add_stop(rq, v->valuestring, err, cap);
    if (!cJSON_IsArray(v)) return fail(err, cap, "'stop' must be a string or an array of strings, got %s", type_name(v));
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsString(e)) return fail(err, cap, "'stop[%d]' must be a string, got %s", i, type_name(e));
        if (!add_stop(rq, e->valuestring, err, cap)) return false;
        i++;
    }
    return true;
}

/* A message's content: a string, null (an empty turn) or an array of {"type":"text","text":..}
 * parts, joined; into *out (malloc'd). */
static bool content_text(const cJSON *msg, int i, char **out, char *err, size_t cap) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    text_buf b = {0};
    puts_(&b, "");
    if (cJSON_IsString(c)) puts_(&b, c->valuestring);
    else if (cJSON_IsArray(c)) {
        int j = 0;
        const cJSON *part;
        cJSON_ArrayForEach(part, c) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type");
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(part, "text");
            if (!cJSON_IsObject(part) || !cJSON_IsString(t)) {
                free(b.p);
                return fail(err, cap, "'messages[%d].content[%d]' must be an object with a string 'type'", i, j);
            }
            if (strcmp(t->valuestring, "text")) {
                fail(err, cap, "'messages[%d].content[%d].type' '%.*s' is not supported (only 'text')", i, j,
                     clip(t->valuestring, 40), t->valuestring);
                free(b.p);
                return false;
            }
            if (!cJSON_IsString(x)) {
                free(b.p);
                return fail(err, cap, "'messages[%d].content[%d].text' must be a string, got %s", i, j, type_name(x));
            }
            puts_(&b, x->valuestring);
            j++;
        }
    } else if (c && !cJSON_IsNull(c)) {
        free(b.p);
        return fail(err, cap, "'messages[%d].content' must be a string or an array of content parts, got %s", i, type_name(c));
    }
    if (b.oom) { free(b.p); return fail(err, cap, "out of memory"); }
    *out = b.p;
    return true;
}

/* The message texts' ranges in the prompt (serve_req.plain) */
typedef struct { size_t *r; int n, cap; bool oom; } spans;

static void span_add(spans *sp, size_t off, size_t len) {
    if (sp->oom || !len) return;
    if (sp->n == sp->cap) {
        const int cap = sp->cap ? 2 * sp->cap : 16;
        size_t *r = realloc(sp->r, sizeof *r * 2 * (size_t)cap);
        if (!r) { sp->oom = true; return; }
        sp->r = r;
        sp->cap = cap;
    }
    sp->r[2 * sp->n] = off;
    sp->r[2 * sp->n + 1] = len;
    sp->n++;
}

/* ---- Gemma 4 with tools: its official template (google-gemma-4-31B-it.jinja as llama.cpp ships
 * it) written out: tool declarations in the system turn, assistant tool calls and the tool
 * responses that follow them, thinking. Template literals go to the prompt as they are (control
 * tokens); every string of the request goes in as text (a span). ------------------------------ */

#define G4Q "<|\"|>"   /* Gemma 4's string quote (a control token) */

typedef struct { text_buf *b; spans *sp; } g4out;

static void lit(g4out *o, const char *s) { puts_(o->b, s); }
static void txt(g4out *o, const char *s, size_t n) {
    span_add(o->sp, o->b->len, n);
    put(o->b, s, n);
}
static void txts(g4out *o, const char *s) { if (s) txt(o, s, strlen(s)); }

/* ASCII lowercase comparison: jinja's dictsort (case-insensitive keys) */
static int key_cmp(const char *a, const char *b) {
    for (;; a++, b++) {
        const int x = (*a >= 'A' && *a <= 'Z') ? *a + 32 : (unsigned char)*a, y = (*b >= 'A' && *b <= 'Z') ? *b + 32 : (unsigned char)*b;
        if (x != y || !x) return x - y;
    }
}

/* An object's members in dictsort order (stable); malloc'd, their count in *n (NULL: none or no memory) */
static const cJSON **dictsort(const cJSON *o, int *n) {
    *n = 0;
    const int k = cJSON_IsObject(o) ? cJSON_GetArraySize(o) : 0;   /* (an array's items have no keys) */
    const cJSON **v = k ? malloc(sizeof(const cJSON *) * (size_t)k) : NULL, *c;
    if (!v) return NULL;
    cJSON_ArrayForEach(c, o) {
        int j = 0;
        while (j < *n && strcmp(v[j]->string, c->string)) j++;
        if (j < *n) { v[j] = c; continue; }   /* a key given again: Python's dict keeps the last value */
        j = *n;
        while (j > 0 && key_cmp(v[j - 1]->string, c->string) > 0) { v[j] = v[j - 1]; j--; }
        v[j] = c;
        (*n)++;
    }
    return v;
}

static const cJSON *get(const cJSON *o, const char *key) { return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL; }

/* jinja's truth of a value: absent, null, false, 0, "", [] and {} are false */
static bool truthy(const cJSON *v) {
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return false;
    if (cJSON_IsNumber(v)) return v->valuedouble != 0;
    if (cJSON_IsString(v)) return v->valuestring[0] != 0;
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) return v->child != NULL;
    return true;
}

/* Python's repr of a float: the shortest digits that read back as d, written fixed where the
 * decimal point falls within 16 digits of them (at least one digit after it), else d.ddde+XX */
static void py_float(char *out, size_t cap, double d) {
    if (!isfinite(d)) { snprintf(out, cap, "%s", isnan(d) ? "nan" : d < 0 ? "-inf" : "inf"); return; }
    char e[40];
    int p = 1;
    for (; p < 17; p++) {   /* %.{p-1}e: p significant digits */
        snprintf(e, sizeof e, "%.*e", p - 1, d);
        if (strtod(e, NULL) == d) break;
    }
    snprintf(e, sizeof e, "%.*e", p - 1, d);
    char dig[24] = "0";
    int n = 0;
    const char *c = e + (e[0] == '-');
    for (; *c && *c != 'e' && n < 20; c++)
        if (*c != '.') dig[n++] = *c;
    n = n ? n : 1;
    const int x = *c == 'e' ? (int)strtol(c + 1, NULL, 10) : 0, decpt = x + 1;   /* d = 0.dig x 10^decpt */
    size_t o = 0;
#define PUT(ch) do { if (o + 1 < cap) out[o++] = (ch); } while (0)
    if (signbit(d)) PUT('-');
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            PUT('0');
            PUT('.');
            for (int i = 0; i < -decpt; i++) PUT('0');
            for (int i = 0; i < n; i++) PUT(dig[i]);
        } else {
            for (int i = 0; i < decpt; i++) PUT(i < n ? dig[i] : '0');
            PUT('.');
            if (decpt >= n) PUT('0');
            for (int i = decpt; i < n; i++) PUT(dig[i]);
        }
        out[o] = 0;
    } else {
        PUT(dig[0]);
        if (n > 1) PUT('.');
        for (int i = 1; i < n; i++) PUT(dig[i]);
        out[o] = 0;
        snprintf(out + o, cap - o, "e%c%02d", x < 0 ? '-' : '+', abs(x));
    }
#undef PUT
}

/* A JSON number as the template's Python writes it: an integer as written (-0 as 0), a float (a
 * '.', 'e' or 'E' in it) by repr; json_number_texts keeps a number's text in its valuestring */
static void g4_number(g4out *o, const cJSON *v) {
    char s[64];
    const char *t = v->valuestring;
    if (t && !strpbrk(t, ".eE")) {
        txts(o, strcmp(t, "-0") ? t : "0");
        return;
    }
    if (!t && v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e16)   /* (no text: an integer) */
        snprintf(s, sizeof s, "%.0f", v->valuedouble);
    else py_float(s, sizeof s, v->valuedouble);
    txts(o, s);
}

/* {{ v }} of a string, number, boolean or null as jinja writes it (Python's str); "" for the rest */
static void g4_scalar(g4out *o, const cJSON *v) {
    if (cJSON_IsString(v)) txts(o, v->valuestring);
    else if (cJSON_IsNumber(v)) g4_number(o, v);
    else if (cJSON_IsBool(v)) lit(o, cJSON_IsTrue(v) ? "True" : "False");
    else if (cJSON_IsNull(v)) lit(o, "None");
}

/* The number tokens of JSON text[0..len) given, in order, to the number nodes of the tree parsed
 * from it (cJSON keeps its children in the text's order): each token's text into the node's
 * valuestring (which cJSON_Delete frees), so that an integer and a float are told apart. */
static void number_nodes(cJSON *v, const char **at, const char *end) {
    for (; v; v = v->next) {
        if (cJSON_IsNumber(v) && !v->valuestring) {
            const char *p = *at;
            bool in = false;
            for (; p < end; p++) {   /* the next number outside a string */
                if (in) { if (*p == '\\') p++; else if (*p == '"') in = false; }
                else if (*p == '"') in = true;
                else if (*p == '-' || (*p >= '0' && *p <= '9')) break;
            }
            size_t k = 0;
            while (p + k < end && strchr("+-.eE0123456789", p[k]) && p[k]) k++;
            if (p < end && (v->valuestring = malloc(k + 1))) {
                memcpy(v->valuestring, p, k);
                v->valuestring[k] = 0;
            }
            *at = p + k;
        }
        if (cJSON_IsArray(v) || cJSON_IsObject(v)) number_nodes(v->child, at, end);
    }
}
static void json_number_texts(cJSON *root, const char *text, size_t len) {
    const char *at = text;
    if (root) number_nodes(root, &at, text + len);
}

/* format_argument: strings quoted, objects with their keys sorted (quoted with esc) */
static void g4_arg(g4out *o, const cJSON *v, bool esc) {
    if (cJSON_IsString(v)) { lit(o, G4Q); txts(o, v->valuestring); lit(o, G4Q); }
    else if (cJSON_IsBool(v)) lit(o, cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNumber(v)) g4_number(o, v);
    else if (cJSON_IsObject(v)) {
        int n;
        const cJSON **kv = dictsort(v, &n);
        lit(o, "{");
        for (int i = 0; i < n; i++) {
            if (i) lit(o, ",");
            if (esc) lit(o, G4Q);
            txts(o, kv[i]->string);
            if (esc) lit(o, G4Q);
            lit(o, ":");
            g4_arg(o, kv[i], esc);
        }
        lit(o, "}");
        free(kv);
    } else if (cJSON_IsArray(v)) {
        const cJSON *c;
        lit(o, "[");
        cJSON_ArrayForEach(c, v) {
            if (c != v->child) lit(o, ",");
            g4_arg(o, c, esc);
        }
        lit(o, "]");
    } else lit(o, "None");
}

/* value | upper for a string (anything else: "") */
static void upper_into(char *dst, size_t cap, const cJSON *v) {
    size_t i = 0;
    for (const char *s = cJSON_IsString(v) ? v->valuestring : ""; *s && i + 1 < cap; s++)
        dst[i++] = (char)(*s >= 'a' && *s <= 'z' ? *s - 32 : *s);
    dst[i] = 0;
}

/* a comma between the fields of one property after its first */
static void comma(g4out *o, bool *add) {
    if (*add) lit(o, ",");
    *add = true;
}

static void g4_required(g4out *o, const cJSON *req) {
    const cJSON *c;
    lit(o, "required:[");
    cJSON_ArrayForEach(c, req) {
        if (c != req->child) lit(o, ",");
        lit(o, G4Q);
        txts(o, cJSON_IsString(c) ? c->valuestring : "");
        lit(o, G4Q);
    }
    lit(o, "]");
}

/* format_parameters: a JSON schema's properties */
static void g4_params(g4out *o, const cJSON *props, int depth) {
    static const char *const standard[] = {"description", "type", "properties", "required", "nullable"};
    if (depth > 16) return;   /* (deeper schemas: not rendered) */
    int n;
    const cJSON **kv = dictsort(props, &n);
    bool found = false;
    for (int i = 0; i < n; i++) {
        const cJSON *v = kv[i];
        bool std = false;
        for (size_t k = 0; k < sizeof standard / sizeof *standard; k++) std |= !strcmp(v->string, standard[k]);
        if (std) continue;
        if (found) lit(o, ",");
        found = true;
        bool add = false;
        char type[32];
        upper_into(type, sizeof type, get(v, "type"));
        txts(o, v->string);
        lit(o, ":{");
        if (truthy(get(v, "description"))) {
            lit(o, "description:" G4Q);
            g4_scalar(o, get(v, "description"));
            lit(o, G4Q);
            add = true;
        }
        if (!strcmp(type, "STRING")) {
            if (truthy(get(v, "enum"))) { comma(o, &add); lit(o, "enum:"); g4_arg(o, get(v, "enum"), true); }
        } else if (!strcmp(type, "ARRAY")) {
            const cJSON *items = get(v, "items");
            if (cJSON_IsObject(items) && truthy(items)) {
                comma(o, &add);
                lit(o, "items:{");
                int m;
                const cJSON **ikv = dictsort(items, &m);
                bool f2 = false;
                for (int j = 0; j < m; j++) {
                    const cJSON *iv = ikv[j];
                    if (cJSON_IsNull(iv)) continue;
                    if (f2) lit(o, ",");
                    f2 = true;
                    if (!strcmp(iv->string, "properties")) {
                        lit(o, "properties:{");
                        if (cJSON_IsObject(iv)) g4_params(o, iv, depth + 1);
                        lit(o, "}");
                    } else if (!strcmp(iv->string, "required")) {
                        g4_required(o, iv);
                    } else if (!strcmp(iv->string, "type")) {
                        lit(o, "type:");
                        if (cJSON_IsString(iv)) {
                            char t[32];
                            upper_into(t, sizeof t, iv);
                            lit(o, G4Q);
                            txts(o, t);
                            lit(o, G4Q);
                        } else {   /* a list of types, each upper-cased */
                            const cJSON *c;
                            lit(o, "[");
                            cJSON_ArrayForEach(c, iv) {
                                char t[32];
                                upper_into(t, sizeof t, c);
                                if (c != iv->child) lit(o, ",");
                                lit(o, G4Q);
                                txts(o, t);
                                lit(o, G4Q);
                            }
                            lit(o, "]");
                        }
                    } else {
                        txts(o, iv->string);
                        lit(o, ":");
                        g4_arg(o, iv, true);
                    }
                }
                free(ikv);
                lit(o, "}");
            }
        }
        if (truthy(get(v, "nullable"))) { comma(o, &add); lit(o, "nullable:true"); }
        if (!strcmp(type, "OBJECT")) {
            const cJSON *p = get(v, "properties");
            comma(o, &add);
            lit(o, "properties:{");
            g4_params(o, cJSON_IsObject(p) ? p : v, depth + 1);
            lit(o, "}");
            if (truthy(get(v, "required"))) { comma(o, &add); g4_required(o, get(v, "required")); }
        }
        comma(o, &add);
        lit(o, "type:" G4Q);
        txts(o, type);
        lit(o, G4Q "}");
    }
    free(kv);
}

/* format_function_declaration */
static void g4_declaration(g4out *o, const cJSON *tool) {
    const cJSON *f = get(tool, "function"), *name = get(f, "name"), *desc = get(f, "description");
    const cJSON *params = get(f, "parameters"), *resp = get(f, "response");
    lit(o, "declaration:");
    txts(o, cJSON_IsString(name) ? name->valuestring : "");
    lit(o, "{description:" G4Q);
    if (desc) g4_scalar(o, desc);   /* (absent: jinja's undefined, "") */
    lit(o, G4Q);
    if (truthy(params)) {
        lit(o, ",parameters:{");
        if (truthy(get(params, "properties"))) {
            lit(o, "properties:{");
            g4_params(o, get(params, "properties"), 0);
            lit(o, "},");
        }
        if (truthy(get(params, "required"))) {
            g4_required(o, get(params, "required"));
            lit(o, ",");
        }
        if (truthy(get(params, "type"))) {
            char t[32];
            upper_into(t, sizeof t, get(params, "type"));
            lit(o, "type:" G4Q);
            txts(o, t);
            lit(o, G4Q "}");
        }
    }
    if (resp) {
        char t[32];
        upper_into(t, sizeof t, get(resp, "type"));
        lit(o, ",response:{");
        if (truthy(get(resp, "description"))) {
            lit(o, "description:" G4Q);
            g4_scalar(o, get(resp, "description"));
            lit(o, G4Q ",");
        }
        if (!strcmp(t, "OBJECT")) lit(o, "type:" G4Q "OBJECT" G4Q "}");
    }
    lit(o, "}");
}

/* s[0..n) trimmed as jinja's trim does (cli_trim) */
static void g4_trimmed(g4out *o, const char *s, size_t n) {
    size_t a = 0;
    cli_trim(s, &a, &n);
    txt(o, s + a, n - a);
}

/* strip_thinking: a model message without its thoughts, trimmed */
static void g4_model_text(g4out *o, const char *s) {
    text_buf r = {0};
    puts_(&r, "");
    for (const char *p = s; p; ) {
        const char *end = strstr(p, "<channel|>"), *stop = end ? end : p + strlen(p);
        const char *open = memmem(p, (size_t)(stop - p), "<|channel>", 10);
        put(&r, p, (size_t)((open ? open : stop) - p));
        p = end ? end + 10 : NULL;
    }
    g4_trimmed(o, r.p ? r.p : "", r.p ? r.len : 0);
    free(r.p);
}

/* A tool call's arguments: an object as format_argument writes it without quoted keys; a JSON
 * string (OpenAI's form) parsed first, a string that is no JSON object as it is */
static void g4_call_args(g4out *o, const cJSON *args) {
    cJSON *parsed = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
    if (parsed) json_number_texts(parsed, args->valuestring, strlen(args->valuestring));
    const cJSON *a = parsed && cJSON_IsObject(parsed) ? parsed : args;
    if (cJSON_IsObject(a)) {
        int n;
        const cJSON **kv = dictsort(a, &n);
        for (int i = 0; i < n; i++) {
            if (i) lit(o, ",");
            txts(o, kv[i]->string);
            lit(o, ":");
            g4_arg(o, kv[i], false);
        }
        free(kv);
    } else if (a && cJSON_IsString(a)) txts(o, a->valuestring);
    cJSON_Delete(parsed);
}

/* OpenAI's function names: 1-64 of [A-Za-z0-9_-] */
static bool function_name(const char *s) {
    const size_t n = strlen(s);
    return n && n <= 64 && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") == n;
}

/* A request's tool_choice: none given or "auto" (the model's choice), "none", "required", or a
 * function, {"type":"function","function":{"name":...}} (*name: its name, as OpenAI allows names:
 * 1-64 of [A-Za-z0-9_-], so that the call begun cannot read as another's); false with err on another */
enum choice { CHOICE_AUTO, CHOICE_NONE, CHOICE_REQUIRED, CHOICE_NAMED };
static bool tool_choice(const cJSON *root, enum choice *choice, const char **name, char *err, size_t cap) {
    const cJSON *c = get(root, "tool_choice"), *f = get(get(c, "function"), "name");
    *choice = CHOICE_AUTO;
    *name = NULL;
    if (!c || cJSON_IsNull(c) || (cJSON_IsString(c) && !strcmp(c->valuestring, "auto"))) return true;
    if (cJSON_IsString(c) && !strcmp(c->valuestring, "none")) *choice = CHOICE_NONE;
    else if (cJSON_IsString(c) && !strcmp(c->valuestring, "required")) *choice = CHOICE_REQUIRED;
    else if (cJSON_IsObject(c) && cJSON_IsString(f)) {
        if (!function_name(f->valuestring))
            return fail(err, cap, "'tool_choice.function.name' '%.*s' is not a function name (1-64 of A-Z, a-z, 0-9, _ and -)",
                        clip(f->valuestring, 64), f->valuestring);
        *choice = CHOICE_NAMED;
        *name = f->valuestring;
    } else
        return fail(err, cap, "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\":\"function\",\"function\":{\"name\":...}}");
    return true;
}

/* The conversation with tools, tool calls or tool responses, as the template renders it with
 * add_generation_prompt (and llama.cpp's model turn after a closed one). */
static bool g4_prompt(const cJSON *root, const hachi_model *m, bool think, enum choice choice, const char *chosen,
                      char **out, spans *sp, size_t *forced, char *err, size_t cap) {
    const cJSON *msgs = get(root, "messages"), *tools = get(root, "tools");
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools)) return fail(err, cap, "'tools' must be an array, got %s", type_name(tools));
    if (choice == CHOICE_NONE) tools = NULL;
    const cJSON *t, *tool_list = cJSON_IsArray(tools) ? tools : NULL;
    int ti = 0;
    bool named = false;
    if (cJSON_GetArraySize(tool_list) > SERVE_TOOLS_MAX)   /* (OpenAI's limit; each name is checked against the others') */
        return fail(err, cap, "'tools' declares %d functions: at most %d", cJSON_GetArraySize(tool_list), SERVE_TOOLS_MAX);
    cJSON_ArrayForEach(t, tool_list) {
        const cJSON *f = get(t, "function");
        if (!cJSON_IsObject(f) || !cJSON_IsString(get(f, "name")))
            return fail(err, cap, "'tools[%d]' must be {\"type\":\"function\",\"function\":{\"name\":...}}", ti);
        const char *name = get(f, "name")->valuestring;
        if (!function_name(name))
            return fail(err, cap, "'tools[%d].function.name' '%.*s' is not a function name (1-64 of A-Z, a-z, 0-9, _ and -)", ti,
                        clip(name, 64), name);
        for (const cJSON *u = tool_list->child; u != t; u = u->next)
            if (!strcmp(cJSON_GetStringValue(get(get(u, "function"), "name")), name))
                return fail(err, cap, "'tools[%d]' declares the function '%s' again", ti, name);
        const cJSON *props = get(get(f, "parameters"), "properties");   /* (the template's dictsort takes a mapping) */
        if (truthy(props) && !cJSON_IsObject(props))
            return fail(err, cap, "'tools[%d].function.parameters.properties' must be an object, got %s", ti, type_name(props));
        named |= chosen && !strcmp(get(f, "name")->valuestring, chosen);
        ti++;
    }
    if (choice == CHOICE_NAMED && !named)
        return fail(err, cap, "'tool_choice' names the function '%s', which 'tools' does not declare", chosen);
    if (!cJSON_IsArray(msgs)) return fail(err, cap, "'messages' must be an array, got %s", msgs ? type_name(msgs) : "nothing");
    const int n = cJSON_GetArraySize(msgs);
    if (n <= 0) return fail(err, cap, "'messages' is empty");
    for (int i = 0; i < n; i++) {
        const cJSON *msg = cJSON_GetArrayItem(msgs, i), *r = get(msg, "role"), *tc = get(msg, "tool_calls");
        if (!cJSON_IsObject(msg) || !cJSON_IsString(r)) return fail(err, cap, "'messages[%d]' must be an object with a string 'role'", i);
        if (strcmp(r->valuestring, "system") && strcmp(r->valuestring, "developer") && strcmp(r->valuestring, "user") &&
            strcmp(r->valuestring, "assistant") && strcmp(r->valuestring, "tool"))
            return fail(err, cap, "'messages[%d].role' '%.*s' is not supported (system, developer, user, assistant, tool)", i,
                        clip(r->valuestring, 40), r->valuestring);
        const cJSON *c;
        int j = 0;
        if (tc && !cJSON_IsNull(tc) && !cJSON_IsArray(tc)) return fail(err, cap, "'messages[%d].tool_calls' must be an array", i);
        const cJSON *call_list = cJSON_IsArray(tc) ? tc : NULL;
        cJSON_ArrayForEach(c, call_list) {
            if (!cJSON_IsString(get(get(c, "function"), "name")))
                return fail(err, cap, "'messages[%d].tool_calls[%d].function.name' must be a string", i, j);
            j++;
        }
    }
    char **text = calloc((size_t)n, sizeof *text);
    bool ok = text != NULL;
    for (int i = 0; ok && i < n; i++) ok = content_text(cJSON_GetArrayItem(msgs, i), i, &text[i], err, cap);
    text_buf b = {0};
    g4out o = {&b, sp};
    puts_(&b, "");
    char bos[64] = "";
    if (ok && hachi_model_bos(m) >= 0) {
        const int32_t k = hachi_token_to_text(m, hachi_model_bos(m), bos, sizeof bos - 1);
        bos[k > 0 ? k : 0] = 0;
    }
    lit(&o, bos);
    int first = 0;
    const char *r0 = ok && n ? get(cJSON_GetArrayItem(msgs, 0), "role")->valuestring : "";
    const bool sys0 = !strcmp(r0, "system") || !strcmp(r0, "developer");
    const char *prev = NULL;   /* ns.prev_message_type */
    if (ok && (think || truthy(tools) || sys0)) {
        lit(&o, "<|turn>system\n");
        if (think) { lit(&o, "<|think|>\n"); prev = "think"; }
        if (sys0) { g4_trimmed(&o, text[0], strlen(text[0])); first = 1; }
        cJSON_ArrayForEach(t, tool_list) {
            lit(&o, "<|tool>");
            g4_declaration(&o, t);
            lit(&o, "<tool|>");
            prev = "tool";
        }
        lit(&o, "<turn|>\n");
    }
    int last_user = -1;
    for (int i = first; ok && i < n; i++)
        if (!strcmp(get(cJSON_GetArrayItem(msgs, i), "role")->valuestring, "user")) last_user = i;
    for (int i = first; ok && i < n; i++) {
        const cJSON *msg = cJSON_GetArrayItem(msgs, i), *calls = get(msg, "tool_calls");
        const char *rs = get(msg, "role")->valuestring;
        if (!strcmp(rs, "tool")) continue;
        prev = NULL;
        const bool model = !strcmp(rs, "assistant");
        const char *prev_nt = NULL;   /* the role of the last message before this one that is no tool's */
        for (int j = i - 1; j >= first && !prev_nt; j--) {
            const char *pr = get(cJSON_GetArrayItem(msgs, j), "role")->valuestring;
            if (strcmp(pr, "tool")) prev_nt = pr;
        }
        if (!(model && prev_nt && !strcmp(prev_nt, "assistant"))) {
            lit(&o, "<|turn>");
            lit(&o, model ? "model" : rs);
            lit(&o, "\n");
        }
        const cJSON *thinking = get(msg, "reasoning");
        if (!truthy(thinking)) thinking = get(msg, "reasoning_content");
        if (truthy(thinking) && cJSON_IsString(thinking) && i > last_user && truthy(calls)) {
            lit(&o, "<|channel>thought\n");
            txts(&o, thinking->valuestring);
            lit(&o, "\n<channel|>");
        }
        const cJSON *c, *call_list = cJSON_IsArray(calls) ? calls : NULL;
        cJSON_ArrayForEach(c, call_list) {
            const cJSON *f = get(c, "function");
            lit(&o, "<|tool_call>call:");
            txts(&o, get(f, "name")->valuestring);
            lit(&o, "{");
            g4_call_args(&o, get(f, "arguments"));
            lit(&o, "}<tool_call|>");
            prev = "tool_call";
        }
        bool responses = false;
        for (int k = i + 1; truthy(calls) && k < n; k++) {   /* the tool messages that follow the calls */
            const cJSON *follow = cJSON_GetArrayItem(msgs, k), *id = get(follow, "tool_call_id");
            if (strcmp(get(follow, "role")->valuestring, "tool")) break;
            const cJSON *nm = get(follow, "name");
            const char *name = cJSON_IsString(nm) ? nm->valuestring : "unknown";
            cJSON_ArrayForEach(c, calls)
                if (cJSON_IsString(id) && cJSON_IsString(get(c, "id")) && !strcmp(get(c, "id")->valuestring, id->valuestring))
                    name = get(get(c, "function"), "name")->valuestring;
            lit(&o, "<|tool_response>response:");
            txts(&o, name);
            lit(&o, "{value:" G4Q);
            txts(&o, text[k]);
            lit(&o, G4Q "}<tool_response|>");
            responses = true;
            prev = "tool_response";
        }
        if (model) g4_model_text(&o, text[i]);
        else g4_trimmed(&o, text[i], strlen(text[i]));
        if (prev && !strcmp(prev, "tool_call") && !responses) lit(&o, "<|tool_response>");
        else if (!(responses && !text[i][0])) lit(&o, "<turn|>\n");
    }
    if (ok && !(prev && (!strcmp(prev, "tool_response") || !strcmp(prev, "tool_call")))) {
        lit(&o, "<|turn>model\n");
        if (!think) lit(&o, hachi_chat_reply_prefix(m));
    } else if (ok && b.len >= 8 && !strcmp(b.p + b.len - 8, "<turn|>\n")) {
        lit(&o, "<|turn>model\n");   /* llama.cpp's: a closed turn is followed by the model's */
    }
    const size_t before = b.len;   /* a call asked for: the reply begins it (no grammar holds the rest) */
    if (ok && (choice == CHOICE_REQUIRED || choice == CHOICE_NAMED)) {
        lit(&o, "<|tool_call>call:");
        if (chosen) { txts(&o, chosen); lit(&o, "{"); }
    }
    *forced = b.len - before;
    for (int i = 0; text && i < n; i++) free(text[i]);
    free(text);
    if (ok && (b.oom || sp->oom)) ok = fail(err, cap, "out of memory");
    if (!ok) { free(b.p); return false; }
    *out = b.p;
    return true;
}

/* The conversation in the model's chat format: the system (and developer) messages joined
 * into the system prompt, then per user message hachi_chat_turn_spans and the assistant reply
 * that followed it as the model wrote it (consecutive messages of one role joined by newlines).
 * A last assistant message is the start of the reply, which the model continues. The messages'
 * own text, where specials stay text, goes to sp. */
static bool chat_prompt(const cJSON *msgs, const hachi_model *m, bool think, char **out, spans *sp, bool *continues,
                        char *err, size_t cap) {
    if (!cJSON_IsArray(msgs)) return fail(err, cap, "'messages' must be an array, got %s", msgs ? type_name(msgs) : "nothing");
    const int n = cJSON_GetArraySize(msgs);
    if (n == 0) return fail(err, cap, "'messages' is empty");
    char **text = calloc((size_t)n, sizeof *text);
    int *role = calloc((size_t)n, sizeof *role);   /* 0 system, 1 user, 2 assistant */
    text_buf sys = {0}, out_b = {0}, user = {0};
    bool ok = text && role;
    if (!ok) fail(err, cap, "out of memory");
    for (int i = 0; ok && i < n; i++) {
        const cJSON *msg = cJSON_GetArrayItem(msgs, i), *r = cJSON_GetObjectItemCaseSensitive(msg, "role");
        if (!cJSON_IsObject(msg)) { ok = fail(err, cap, "'messages[%d]' must be an object, got %s", i, type_name(msg)); break; }
        if (!cJSON_IsString(r)) { ok = fail(err, cap, "'messages[%d].role' must be a string, got %s", i, r ? type_name(r) : "nothing"); break; }
        const char *rs = r->valuestring;
        if (!strcmp(rs, "system") || !strcmp(rs, "developer")) role[i] = 0;
        else if (!strcmp(rs, "user")) role[i] = 1;
        else if (!strcmp(rs, "assistant")) role[i] = 2;
        else { ok = fail(err, cap, "'messages[%d].role' '%.*s' is not supported (system, developer, user, assistant)", i, clip(rs, 40), rs); break; }
        ok = content_text(msg, i, &text[i], err, cap);
    }
    for (int i = 0; ok && i < n; i++)
        if (role[i] == 0) { if (sys.len) puts_(&sys, "\n\n"); puts_(&sys, text[i]); }
    const bool plain = ok && hachi_chat_detect(m) == HACHI_CHAT_PLAIN;
    bool first = true;
    puts_(&out_b, "");
    for (int i = 0; ok && i < n; i++) {
        if (role[i] == 0) continue;
        if (role[i] == 1) {   /* user turns up to the next assistant message */
            if (user.len) puts_(&user, "\n");
            puts_(&user, text[i]);
            int k = i + 1;
            while (k < n && role[k] == 0) k++;
            if (k < n && role[k] == 1) continue;
        }
        if (role[i] == 1 || first) {   /* the turn (an assistant message first gets an empty user turn) */
            const char *u = user.p ? user.p : "";
            int32_t need = hachi_chat_turn_think(m, sys.p, u, first, think, NULL, 0, NULL) + 1;
            if (need <= 0) { ok = fail(err, cap, "'chat_template_kwargs.enable_thinking': this model has no Gemma 4 thinking"); break; }
            char *t = malloc((size_t)need);
            if (!t) { ok = fail(err, cap, "out of memory"); break; }
            size_t pl[4];
            hachi_chat_turn_think(m, sys.p, u, first, think, t, need, pl);
            /* a reply that a later user message follows is history: the template renders it
             * without the reply prefix (Gemma 4's empty thought), which the turn ends with */
            int k = role[i] == 1 ? i + 1 : i;
            while (k < n && role[k] == 0) k++;
            bool history = false;
            for (int j = k + 1; k < n && role[k] == 2 && j < n && !history; j++) history = role[j] == 1;
            const size_t tl = strlen(t), pre = strlen(hachi_chat_reply_prefix(m));
            if (history && pre && tl >= pre && !strcmp(t + tl - pre, hachi_chat_reply_prefix(m))) t[tl - pre] = 0;
            span_add(sp, out_b.len + pl[0], pl[1]);
            span_add(sp, out_b.len + pl[2], pl[3]);
            puts_(&out_b, t);
            free(t);
            first = false;
            user.len = 0;
            if (user.p) user.p[0] = 0;
            if (role[i] == 1) continue;
        }
        /* an assistant message: as the model wrote it (in the plain format a reply that starts
         * with a word followed "Assistant:" after a space, which the detokenizer strips from the
         * first piece) */
        if (plain && text[i] && text[i][0] && !strchr(" \n\t\r", text[i][0])) puts_(&out_b, " ");
        span_add(sp, out_b.len, text[i] ? strlen(text[i]) : 0);
        puts_(&out_b, text[i]);
        for (int k = i + 1; k < n && role[k] != 1; k++)
            if (role[k] == 2) {
                puts_(&out_b, "\n");
                span_add(sp, out_b.len, text[k] ? strlen(text[k]) : 0);
                puts_(&out_b, text[k]);
                i = k;
            }
    }
    if (ok && first) ok = fail(err, cap, "'messages' holds no user or assistant message");
    for (int i = n - 1; ok && i >= 0; i--)
        if (role[i]) { *continues = role[i] == 2; break; }
    if (ok && (sys.oom || out_b.oom || user.oom || sp->oom)) ok = fail(err, cap, "out of memory");
    for (int i = 0; text && i < n; i++) free(text[i]);
    free(text);
    free(role);
    free(sys.p);
    free(user.p);
    if (ok) *out = out_b.p;
    else free(out_b.p);
    return ok;
}

/* The offset of the first \u0000 escape in a JSON text (a backslash escaped by another is text),
 * len when there is none: cJSON ends its strings there, so a prompt, message or stop sequence
 * holding one would be cut short without a word */
static size_t json_nul_at(const char *s, size_t len) {
    for (size_t i = 0; i + 1 < len; i++)
        if (s[i] == '\\') {
            if (i + 5 < len && !memcmp(s + i + 1, "u0000", 5)) return i;
            i++;   /* the escaped character */
        }
    return len;
}

typedef struct { int32_t id; int at; float bias; } bias_entry;

static int bias_cmp(const void *a, const void *b) {
    const bias_entry *x = a, *y = b;
    return x->id != y->id ? (x->id > y->id) - (x->id < y->id) : (x->at > y->at) - (x->at < y->at);
}

/* OpenAI's logit_bias: {"token id": bias in [-100, 100]}; a token given twice keeps its last bias */
static bool logit_bias_field(const cJSON *o, const hachi_model *m, serve_req *rq, char *err, size_t cap) {
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(o, "logit_bias"), *e;
    if (!lb || cJSON_IsNull(lb)) return true;
    if (!cJSON_IsObject(lb)) return fail(err, cap, "'logit_bias' must be an object of token ids to biases, got %s", type_name(lb));
    const int n = cJSON_GetArraySize(lb);
    bias_entry *v = n ? malloc(sizeof *v * (size_t)n) : NULL;
    if (n && !v) return fail(err, cap, "out of memory");
    const int32_t nv = hachi_model_n_vocab(m);
    int k = 0;
    cJSON_ArrayForEach(e, lb) {
        char *end = NULL;
        const long id = strtol(e->string, &end, 10);
        if (!*e->string || *end || id < 0 || id >= nv || !isdigit((unsigned char)e->string[0])) {
            fail(err, cap, "'logit_bias' key '%.*s' is not a token id in [0, %d)", clip(e->string, 64), e->string, nv);
            break;
        }
        if (!cJSON_IsNumber(e)) {
            fail(err, cap, "'logit_bias' of token %ld must be a number, got %s", id, type_name(e));
            break;
        }
        if (!(e->valuedouble >= -100 && e->valuedouble <= 100)) {
            fail(err, cap, "'logit_bias' of token %ld must be in [-100, 100], got %.15g", id, e->valuedouble);
            break;
        }
        v[k] = (bias_entry){(int32_t)id, k, (float)e->valuedouble};
        k++;
    }
    if (k < n) { free(v); return false; }
    if (n) qsort(v, (size_t)n, sizeof *v, bias_cmp);   /* ({}: none, and no list to sort) */
    rq->bias_ids = malloc(sizeof(int32_t) * (size_t)n + 1);
    rq->bias = malloc(sizeof(float) * (size_t)n + 1);
    if (!rq->bias_ids || !rq->bias) { free(v); return fail(err, cap, "out of memory"); }
    for (int i = 0; i < n; i++) {
        if (i + 1 < n && v[i + 1].id == v[i].id) continue;   /* (the last of a token's entries) */
        rq->bias_ids[rq->n_bias] = v[i].id;
        rq->bias[rq->n_bias++] = v[i].bias;
    }
    free(v);
    return true;
}

/* ---- JSON schemas into the sampling constraint (json_grammar.c) ---- */

typedef struct {
    json_schema *js;
    bool g4;                        /* Gemma 4's call syntax: keys bare and sorted (as its template writes them) */
    const cJSON *root;
    struct { const char *ref; int node; } refs[64];   /* $refs compiled (recursion ends there) */
    int n_refs;
    cJSON *merged;                  /* allOf's schemas merged, kept while the compile may point into them */
    struct { const cJSON *props, *add; } closed[16];   /* a merge's schemas with additionalProperties: their own
                                                          properties, and what others' must also be */
    int n_closed;
    char *err;
    size_t cap;
} schema_cc;

static int schema_node(schema_cc *cc, const cJSON *sc, const char *path, int depth);

/* The schema a "#/$defs/NAME" (or "#/definitions/NAME") names, NULL if none */
static const cJSON *ref_target(const schema_cc *cc, const char *r) {
    const char *name = r && !strncmp(r, "#/$defs/", 8) ? r + 8 : r && !strncmp(r, "#/definitions/", 14) ? r + 14 : NULL;
    return name ? get(get(cc->root, r[2] == '$' ? "$defs" : "definitions"), name) : NULL;
}

/* The JT_ bit of a JSON schema type's name (0: none) */
static int type_bit(const cJSON *e) {
    static const struct { const char *name; int bit; } names[] = {
        {"object", JT_OBJ}, {"array", JT_ARR}, {"string", JT_STR}, {"number", JT_NUM},
        {"integer", JT_INT}, {"boolean", JT_BOOL}, {"null", JT_NULL},
    };
    for (size_t k = 0; cJSON_IsString(e) && k < sizeof names / sizeof *names; k++)
        if (!strcmp(e->valuestring, names[k].name)) return names[k].bit;
    return 0;
}

/* The types of both: integer where one takes numbers and the other integers */
static int type_meet(int a, int b) {
    return (a & b) | ((a & JT_NUM) && (b & JT_INT) ? JT_INT : 0) | ((b & JT_NUM) && (a & JT_INT) ? JT_INT : 0);
}

/* The types a schema names before it is compiled (its "type", properties or items, its $ref's,
 * its alternatives'; 0 for an enum or const) */
static int shallow_types(const schema_cc *cc, const cJSON *sc, int depth) {
    if (depth > 8 || !cJSON_IsObject(sc) || !sc->child) return JT_ANY;
    if (get(sc, "const") || get(sc, "enum")) return 0;
    int all = JT_ANY;   /* (allOf's schemas and a $ref's target: the types they all name) */
    const cJSON *a, *each = get(sc, "allOf");
    cJSON_ArrayForEach(a, each) all = type_meet(all, shallow_types(cc, a, depth + 1));
    if (get(sc, "$ref")) all = type_meet(all, shallow_types(cc, ref_target(cc, cJSON_GetStringValue(get(sc, "$ref"))), depth + 1));
    const cJSON *alts = get(sc, "anyOf") ? get(sc, "anyOf") : get(sc, "oneOf");
    int t = 0;
    if (alts) {
        cJSON_ArrayForEach(a, alts) t |= shallow_types(cc, a, depth + 1);
        return type_meet(all, t);
    }
    const cJSON *ty = get(sc, "type"), *tys = cJSON_IsArray(ty) ? ty : NULL;
    cJSON_ArrayForEach(a, tys) t |= type_bit(a);
    if (!tys) t = type_bit(ty);
    return type_meet(all, t ? t : get(sc, "properties") ? JT_OBJ : get(sc, "items") ? JT_ARR : JT_ANY);
}

/* A value as a Gemma 4 call writes it (format_argument), its quote tokens as JSON_G4_QUOTE (malloc'd) */
static char *g4_literal(const cJSON *v) {
    text_buf b = {0};
    spans sp = {0};
    g4_arg(&(g4out){&b, &sp}, v, false);
    free(sp.r);
    if (b.oom || !b.p) { free(b.p); return NULL; }
    size_t o = 0;
    for (size_t i = 0; i < b.len; i++) {
        if (!strncmp(b.p + i, G4Q, 5)) { b.p[o++] = JSON_G4_QUOTE; i += 4; }
        else b.p[o++] = b.p[i];
    }
    b.p[o] = 0;
    return b.p;
}

/* A literal node of the JSON texts of vals (an enum's array, or a const alone) */
static int schema_lits(schema_cc *cc, const cJSON *vals, bool one, const char *path) {
    const int n = one ? 1 : cJSON_GetArraySize(vals);
    if (n < 1 || n > JSON_LITS_MAX)
        return fail(cc->err, cc->cap, "'%s': an enum of %d values (1 to %d are supported)", path, n, JSON_LITS_MAX), -1;
    json_node nd = {.lits = cc->js->n_lits, .n_lits = 0, .n_props = -1};
    for (int i = 0; i < n; i++) {   /* (a value given twice: kept once, so that the values' texts tell them apart) */
        const cJSON *v = one ? vals : cJSON_GetArrayItem(vals, i);
        char *t = cc->g4 ? g4_literal(v) : cJSON_PrintUnformatted(v);
        bool again = false;
        for (int j = 0; t && j < nd.n_lits && !again; j++) again = !strcmp(cc->js->lits[nd.lits + j], t);
        const int k = t && !again ? json_schema_add_lit(cc->js, t) : -1;
        free(t);
        if (!again && k != nd.lits + nd.n_lits++) return fail(cc->err, cc->cap, "out of memory"), -1;
    }
    const int k = json_schema_add_node(cc->js, nd);
    return k >= 0 ? k : (fail(cc->err, cc->cap, "'%s': the schema is too large (%d nodes at most)", path, JSON_NODES_MAX), -1);
}

/* The types a schema's "type" names (a string or an array of them); 0 and err on a bad one */
static int schema_types(schema_cc *cc, const cJSON *t, const char *path) {
    int types = 0, n = cJSON_IsArray(t) ? cJSON_GetArraySize(t) : 1;
    for (int i = 0; i < n; i++) {
        const int bit = type_bit(cJSON_IsArray(t) ? cJSON_GetArrayItem(t, i) : t);
        if (!bit)
            return fail(cc->err, cc->cap, "'%s.type': not a JSON schema type (object, array, string, number, integer, "
                        "boolean, null)", path), 0;
        types |= bit;
    }
    if (!types) fail(cc->err, cc->cap, "'%s.type' names no type", path);
    return types;
}

/* A count keyword (minLength, maxItems...): -1 absent (or, for a maximum, above JSON_COUNT_MAX: none),
 * -2 and err where it is no whole number >= 0 or a minimum above JSON_COUNT_MAX */
static int schema_count(schema_cc *cc, const cJSON *sc, const char *kw, const char *path) {
    const cJSON *v = get(sc, kw);
    if (!v) return -1;
    const double d = cJSON_GetNumberValue(v);
    if (!cJSON_IsNumber(v) || d < 0 || d != floor(d))
        return fail(cc->err, cc->cap, "'%s.%s' must be a whole number >= 0", path, kw), -2;
    if (d <= JSON_COUNT_MAX) return (int)d;
    if (!strncmp(kw, "max", 3)) return -1;
    return fail(cc->err, cc->cap, "'%s.%s': at most %d is supported", path, kw, JSON_COUNT_MAX), -2;
}

/* floor(x * JSON_UNIT) exactly, x finite (beyond 1e17 in magnitude: +-2 * 10^32, outside every
 * number of JSON_DIGITS digits) */
static __int128 units_floor(double x) {
    if (x > 1e17 || x < -1e17) return (x > 0 ? 2 : -2) * JSON_UNIT * JSON_UNIT;
    int e;
    const double f = frexp(x, &e);   /* x = f * 2^e, f * 2^53 a whole number */
    const __int128 v = (__int128)(int64_t)ldexp(f, 53) * JSON_UNIT;   /* x * 10^16 = v * 2^(e - 53), |v| < 2^107 */
    e -= 53;
    if (e >= 0) return v * ((__int128)1 << e);   /* (e <= 4 here) */
    if (e < -110) return v < 0 ? -1 : 0;
    const __int128 d = (__int128)1 << -e, q = v / d;
    return q - (v % d != 0 && v < 0);
}

/* The double a client reads from the number of u JSON_UNITs written out (strtod rounds correctly) */
static double units_value(__int128 u) {
    const unsigned __int128 m = u < 0 ? -(unsigned __int128)u : (unsigned __int128)u;
    char t[64];
    snprintf(t, sizeof t, "%s%llu.%016llu", u < 0 ? "-" : "", (unsigned long long)(m / JSON_UNIT), (unsigned long long)(m % JSON_UNIT));
    return strtod(t, NULL);
}

/* The least number of JSON_UNITs a client reads as a double >= x (strict: > x). The bound is the
 * schema's double, and so is the value a client checks against it: minimum 0.1 takes 0.1 (the
 * double 0.1 is a little above one tenth), maximum 0.3 takes 0.3. */
static __int128 units_from(double x, bool strict) {
    if (x > 1e17 || x < -1e17) return units_floor(x);
    __int128 a = units_floor(nextafter(nextafter(x, -INFINITY), -INFINITY)) - 1;   /* read below x */
    __int128 b = units_floor(nextafter(nextafter(x, INFINITY), INFINITY)) + 1;     /* read above x */
    while (b - a > 1) {
        const __int128 mid = a + (b - a) / 2;
        const double v = units_value(mid);
        if (strict ? v > x : v >= x) b = mid;
        else a = mid;
    }
    return b;
}

/* minimum, maximum, exclusiveMinimum, exclusiveMaximum (a number; or, as draft 4 has them, true
 * making minimum / maximum exclusive) into [*lo, *hi] in JSON_UNITs; false and err on a bad one */
static bool schema_range(schema_cc *cc, const cJSON *sc, const char *path, __int128 *lo, __int128 *hi, bool *any) {
    static const char *const kw[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    *any = false;
    *lo = -2 * JSON_UNIT * JSON_UNIT;
    *hi = 2 * JSON_UNIT * JSON_UNIT;
    for (int i = 0; i < 4; i++) {
        const cJSON *v = get(sc, kw[i]);
        if (!v || (cJSON_IsBool(v) && (i & 1))) continue;   /* (draft 4's, read with its bound) */
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return fail(cc->err, cc->cap, "'%s.%s' must be a number", path, kw[i]);
        const bool excl = (i & 1) || cJSON_IsTrue(get(sc, kw[i + 1]));
        if (i < 2) {
            const __int128 b = units_from(v->valuedouble, excl);
            *lo = *lo > b ? *lo : b;
        } else {   /* (the greatest read <= x, or < x: one below the least read > x, or >= x) */
            const __int128 b = units_from(v->valuedouble, !excl) - 1;
            *hi = *hi < b ? *hi : b;
        }
        *any = true;
    }
    return true;
}

/* A pair of count keywords (minLength and maxLength, minItems and maxItems) into *lo (0: none) and
 * *hi (-1: none), bit set in *bounds where either is given; false and err on a bad one */
static bool schema_counts(schema_cc *cc, const cJSON *sc, const char *kmin, const char *kmax, const char *path, int *lo, int *hi,
                          int *bounds, int bit) {
    *lo = schema_count(cc, sc, kmin, path);
    *hi = schema_count(cc, sc, kmax, path);
    if (*lo == -2 || *hi == -2) return false;
    *lo = CLI_MAX(*lo, 0);
    if (*hi >= 0 && *lo > *hi) return fail(cc->err, cc->cap, "'%s': %s is above %s", path, kmin, kmax);
    if (*lo || *hi >= 0) *bounds |= bit;
    return true;
}

/* String formats held as patterns: each a subset of what a validator's format (ajv-formats, in
 * its full mode) takes. Other formats are not held. */
#define FMT_DATE                                                                                                            \
    "(\\d{4}-(0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|\\d{4}-(0[469]|11)-(0[1-9]|[12]\\d|30)|\\d{4}-02-(0[1-9]|1\\d|2[0-8])|" \
    "(\\d\\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)"
#define FMT_TIME "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,6})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)"
#define FMT_OCTET "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"
#define FMT_LABEL "[A-Za-z0-9]([A-Za-z0-9-]{0,20}[A-Za-z0-9])?"
#define FMT_HEX4 "[0-9a-fA-F]{1,4}"
#define FMT_PCHAR "A-Za-z0-9._~!$&'()*+,;=:@-"   /* (a URI path's characters, no %-escape) */
static const char *const formats[][2] = {
    {"date", "^" FMT_DATE "$"},
    {"time", "^" FMT_TIME "$"},
    {"date-time", "^" FMT_DATE "T" FMT_TIME "$"},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
    {"ipv4", "^(" FMT_OCTET "\\.){3}" FMT_OCTET "$"},
    {"email", "^[A-Za-z0-9_%+-]+(\\.[A-Za-z0-9_%+-]+)*@(" FMT_LABEL "\\.)+[A-Za-z]{2,20}$"},
    {"hostname", "^" FMT_LABEL "(\\." FMT_LABEL "){0,5}$"},
    {"ipv6", "^(" FMT_HEX4 ":){7}" FMT_HEX4 "$"},   /* (written whole: no ::) */
    {"uri", "^[A-Za-z][A-Za-z0-9+.-]{0,15}://[A-Za-z0-9._~-]+(:\\d{1,5})?(/[" FMT_PCHAR "]*)*(\\?[/?" FMT_PCHAR "]*)?(#[/?"
            FMT_PCHAR "]*)?$"},   /* (scheme://host[:port]/path?query#fragment) */
};

/* A string's pattern or format (not both) into nd->pattern; false and err where it is malformed,
 * beyond what is supported, or no string within its lengths matches it */
static bool schema_pattern(schema_cc *cc, const cJSON *sc, json_node *nd, const char *path) {
    const cJSON *pat = get(sc, "pattern"), *fmt = get(sc, "format");
    const char *re = NULL;
    if (pat && !cJSON_IsString(pat)) return fail(cc->err, cc->cap, "'%s.pattern' must be a string", path);
    if (fmt && !cJSON_IsString(fmt)) return fail(cc->err, cc->cap, "'%s.format' must be a string", path);
    for (size_t i = 0; fmt && i < sizeof formats / sizeof *formats; i++)
        if (!strcmp(fmt->valuestring, formats[i][0])) re = formats[i][1];
    if (pat && re) return fail(cc->err, cc->cap, "'%s': a pattern and a format together are not supported", path);
    if (pat) re = pat->valuestring;
    if (!re) return true;
    if ((nd->bounds & JB_LEN) && (nd->min_len > JSON_PAT_LEN || nd->max_len > JSON_PAT_LEN))
        return fail(cc->err, cc->cap, "'%s': with a %s, minLength and maxLength above %d are not supported", path,
                    pat ? "pattern" : "format", JSON_PAT_LEN);
    if (cc->js->n_pats == JSON_PATS_MAX)
        return fail(cc->err, cc->cap, "'%s': more than %d patterns and formats in one schema", path, JSON_PATS_MAX);
    char why[160];
    json_pattern *p = json_pattern_compile(re, why, sizeof why);
    if (!p) return fail(cc->err, cc->cap, "'%s.%s': %s", path, pat ? "pattern" : "format", why);
    json_pset start;
    json_pattern_start(&start);
    const bool b = nd->bounds & JB_LEN, any = json_pattern_can_end(p, &start, b ? nd->min_len : 0, b ? nd->max_len : -1);
    if (!any) {
        json_pattern_free(p);
        return fail(cc->err, cc->cap, "'%s': no string%s matches its %s", path, b ? " of its lengths" : "", pat ? "pattern" : "format");
    }
    if (!(nd->pattern = json_schema_add_pattern(cc->js, p))) return fail(cc->err, cc->cap, "out of memory");
    return true;
}

/* A node's bounds (json_node.bounds): minLength / maxLength of its strings, minItems / maxItems of
 * its arrays, the range of its numbers; its strings' pattern; false and err where one is malformed
 * or none can be met */
static bool schema_bounds(schema_cc *cc, const cJSON *sc, json_node *nd, const char *path) {
    if ((nd->types & JT_STR) &&
        (!schema_counts(cc, sc, "minLength", "maxLength", path, &nd->min_len, &nd->max_len, &nd->bounds, JB_LEN) ||
         !schema_pattern(cc, sc, nd, path)))
        return false;
    if ((nd->types & JT_ARR) && !schema_counts(cc, sc, "minItems", "maxItems", path, &nd->min_items, &nd->max_items, &nd->bounds, JB_ITEMS))
        return false;
    if ((nd->types & JT_OBJ) &&
        !schema_counts(cc, sc, "minProperties", "maxProperties", path, &nd->min_props, &nd->max_props, &nd->bounds, JB_PROPS))
        return false;
    if (!(nd->types & (JT_NUM | JT_INT))) return true;
    bool any;
    if (!schema_range(cc, sc, path, &nd->lo, &nd->hi, &any)) return false;
    const cJSON *mo = get(sc, "multipleOf");   /* (a whole one; a fraction is not held: validators divide in doubles) */
    if (mo && (!cJSON_IsNumber(mo) || !(mo->valuedouble > 0) || !isfinite(mo->valuedouble)))
        return fail(cc->err, cc->cap, "'%s.multipleOf' must be a number above 0", path);
    if (mo && mo->valuedouble == floor(mo->valuedouble) && mo->valuedouble <= 1e15) nd->mult = (int64_t)mo->valuedouble;
    if (!any && !nd->mult) return true;
    const __int128 u = JSON_UNIT, big = u * u - 1;   /* the largest number of 16 digits before the point and 16 after */
    nd->lo = nd->lo < -big ? -big : nd->lo;
    nd->hi = nd->hi > big ? big : nd->hi;
    if (!(nd->types & JT_NUM) || nd->mult) {   /* whole numbers: the bounds rounded inwards to them */
        nd->lo = nd->lo >= 0 ? (nd->lo + u - 1) / u * u : -(-nd->lo / u * u);
        nd->hi = nd->hi >= 0 ? nd->hi / u * u : -((-nd->hi + u - 1) / u * u);
    }
    if (nd->lo > nd->hi)
        return fail(cc->err, cc->cap, "'%s': no %s of at most %d digits (and %d after the point) lies in its range", path,
                    nd->types & JT_NUM ? "number" : "integer", JSON_DIGITS, JSON_DIGITS);
    if (!json_holds_multiple(nd->lo, nd->hi, nd->mult * u))
        return fail(cc->err, cc->cap, "'%s': no multiple of %lld of at most %d digits lies in its range", path, (long long)nd->mult,
                    JSON_DIGITS);
    nd->bounds |= JB_RANGE;
    return true;
}

/* uniqueItems, held where the items are an enum or const of scalars (told apart by their texts,
 * each kept once) or booleans: nd->unique; false and err where minItems asks for more items than
 * there are values. Other items are not held to it. */
static bool schema_unique(schema_cc *cc, json_node *nd, const char *path) {
    const json_node *it = &cc->js->nodes[nd->items];
    int distinct = it->n_lits ? it->n_lits : it->types == JT_BOOL ? 2 : -1;
    for (int i = 0; i < it->n_lits && distinct >= 0; i++)
        if (cc->js->lits[it->lits + i][0] == '{' || cc->js->lits[it->lits + i][0] == '[') distinct = -1;
    if (distinct < 0) return true;
    if (nd->min_items > distinct)
        return fail(cc->err, cc->cap, "'%s': minItems %d unique items, of %d values", path, nd->min_items, distinct);
    nd->unique = true;
    return true;
}

/* The types a value's first byte cannot tell apart, together */
static int type_class(int t) { return t & (JT_NUM | JT_INT) ? t | JT_NUM | JT_INT : t; }

/* anyOf / oneOf: alternatives of disjoint types (a value's first byte tells which), merged in one node */
static int schema_union(schema_cc *cc, const cJSON *alts, const char *path, int depth) {
    json_node u = {.items = 0, .add = 0, .n_props = -1};
    char sub[512];
    for (int i = 0; i < cJSON_GetArraySize(alts); i++) {
        snprintf(sub, sizeof sub, "%.400s[%d]", path, i);
        const int k = schema_node(cc, cJSON_GetArrayItem(alts, i), sub, depth + 1);
        if (k < 0) return -1;
        const json_node a = cc->js->nodes[k];
        if (!a.types || (type_class(u.types) & type_class(a.types)))
            return fail(cc->err, cc->cap, "'%s': alternatives of the same type, or an enum among them, are not supported "
                        "(only ones a value's first character tells apart, as [X, {\"type\": \"null\"}])", path), -1;
        u.types |= a.types;
        if (a.types & JT_STR) u.bounds |= a.bounds & JB_LEN, u.min_len = a.min_len, u.max_len = a.max_len, u.pattern = a.pattern;
        if (a.types & (JT_NUM | JT_INT)) u.bounds |= a.bounds & JB_RANGE, u.lo = a.lo, u.hi = a.hi, u.mult = a.mult;
        if (a.types & JT_ARR) u.arr = a.arr;   /* (by index: an alternative still being compiled, a $ref's, fills in later) */
        if (a.types & JT_OBJ) u.obj = a.obj;
    }
    if (!u.types) return fail(cc->err, cc->cap, "'%s': no alternatives", path), -1;
    const int k = json_schema_add_node(cc->js, u);
    return k >= 0 ? k : (fail(cc->err, cc->cap, "'%s': the schema is too large (%d nodes at most)", path, JSON_NODES_MAX), -1);
}

/* ---- allOf: its schemas merged into one, keyword by keyword ---- */

static bool annotation(const char *k) {
    static const char *const names[] = {"title", "description", "default", "examples", "$comment", "$schema", "$id",
                                        "deprecated", "readOnly", "writeOnly", "$defs", "definitions"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(k, names[i])) return true;
    return false;
}

/* A keyword whose value holds for both when the greater (minimum: +1) or the less (maximum: -1) is kept */
static int bound_kind(const char *k) {
    static const char *const lo[] = {"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"};
    static const char *const hi[] = {"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"};
    for (size_t i = 0; i < sizeof lo / sizeof *lo; i++)
        if (!strcmp(k, lo[i]) || !strcmp(k, hi[i])) return !strcmp(k, lo[i]) ? 1 : -1;
    return 0;
}

static bool add_item(cJSON *o, const char *k, cJSON *v) {   /* (v owned by o, or freed) */
    if (v && cJSON_AddItemToObject(o, k, v)) return true;
    cJSON_Delete(v);
    return false;
}

/* {"allOf": [a, b]} (copies), for a keyword both give as schemas */
static cJSON *both_of(const cJSON *a, const cJSON *b) {
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    if (!o || !add_item(o, "allOf", arr) || !cJSON_AddItemToArray(arr, cJSON_Duplicate(a, true)) ||
        !cJSON_AddItemToArray(arr, cJSON_Duplicate(b, true)) || cJSON_GetArraySize(arr) != 2) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Keyword k of value v (from the schema at path) into m, which may have it already */
static bool merge_keyword(schema_cc *cc, cJSON *m, const char *k, const cJSON *v, const char *path) {
    cJSON *had = cJSON_GetObjectItemCaseSensitive(m, k), *e;
    if (!had) return add_item(m, k, cJSON_Duplicate(v, true)) || fail(cc->err, cc->cap, "out of memory");
    if (cJSON_Compare(had, v, true)) return true;
    const int bound = bound_kind(k);
    if (bound && cJSON_IsNumber(had) && cJSON_IsNumber(v)) {   /* (the stricter) */
        if ((v->valuedouble > had->valuedouble) == (bound > 0)) cJSON_SetNumberValue(had, v->valuedouble);
        return true;
    }
    if (!strcmp(k, "type")) {   /* (the types both name) */
        const int a = schema_types(cc, had, path), b = a ? schema_types(cc, v, path) : 0, t = type_meet(a, b);
        if (!a || !b) return false;
        if (!t) return fail(cc->err, cc->cap, "'%s': no value is of a type that allOf's schemas all name", path);
        cJSON *names = cJSON_CreateArray();
        static const char *const type_names[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
        for (int i = 0; names && i < 7; i++)   /* (integer within number: number) */
            if (t >> i & 1 && (type_names[i][0] != 'i' || !(t & JT_NUM))) cJSON_AddItemToArray(names, cJSON_CreateString(type_names[i]));
        return (names && cJSON_ReplaceItemInObjectCaseSensitive(m, k, names)) || fail(cc->err, cc->cap, "out of memory");
    }
    if (!strcmp(k, "required") && cJSON_IsArray(had) && cJSON_IsArray(v)) {   /* (both's) */
        cJSON_ArrayForEach(e, v) {
            bool in = false;
            const cJSON *h;
            cJSON_ArrayForEach(h, had) in |= cJSON_Compare(h, e, true);
            if (!in && !cJSON_AddItemToArray(had, cJSON_Duplicate(e, true))) return fail(cc->err, cc->cap, "out of memory");
        }
        return true;
    }
    if (!strcmp(k, "properties") && cJSON_IsObject(had) && cJSON_IsObject(v)) {   /* (each one's, in both: both of its) */
        cJSON_ArrayForEach(e, v) {
            cJSON *p = cJSON_GetObjectItemCaseSensitive(had, e->string);
            bool ok = p ? cJSON_Compare(p, e, true) || cJSON_ReplaceItemInObjectCaseSensitive(had, e->string, both_of(p, e))
                        : add_item(had, e->string, cJSON_Duplicate(e, true));
            if (!ok) return fail(cc->err, cc->cap, "out of memory");
        }
        return true;
    }
    if (!strcmp(k, "enum") && cJSON_IsArray(had) && cJSON_IsArray(v)) {   /* (the values in both) */
        for (cJSON *h = had->child, *next; h; h = next) {
            bool in = false;
            next = h->next;
            cJSON_ArrayForEach(e, v) in |= cJSON_Compare(h, e, true);
            if (!in) cJSON_Delete(cJSON_DetachItemViaPointer(had, h));
        }
        return cJSON_GetArraySize(had) || fail(cc->err, cc->cap, "'%s': no value is in every enum of allOf's schemas", path);
    }
    if (!strcmp(k, "uniqueItems"))
        return !cJSON_IsTrue(v) || cJSON_ReplaceItemInObjectCaseSensitive(m, k, cJSON_CreateTrue()) || fail(cc->err, cc->cap, "out of memory");
    if ((!strcmp(k, "items") || !strcmp(k, "additionalProperties")) && cJSON_IsObject(had) && cJSON_IsObject(v))
        return cJSON_ReplaceItemInObjectCaseSensitive(m, k, both_of(had, v)) || fail(cc->err, cc->cap, "out of memory");
    if (!strcmp(k, "additionalProperties") && (cJSON_IsFalse(had) || cJSON_IsFalse(v)))   /* (none) */
        return cJSON_ReplaceItemInObjectCaseSensitive(m, k, cJSON_CreateFalse()) || fail(cc->err, cc->cap, "out of memory");
    return fail(cc->err, cc->cap, "'%s': '%s' given differently by two of allOf's schemas is not supported", path, k);
}

/* Schema sc's keywords into m: its $ref's target's and its allOf's schemas' first (depth: $refs and
 * allOfs followed so far) */
static bool merge_schema(schema_cc *cc, cJSON *m, const cJSON *sc, const char *path, int depth) {
    char sub[512];
    if (depth > 8) return fail(cc->err, cc->cap, "'%s': allOf and $ref nest deeper than 8 within each other", path);
    if (cJSON_IsTrue(sc)) return true;
    if (!cJSON_IsObject(sc)) return fail(cc->err, cc->cap, "'%s' must be a schema (an object), got %s", path, type_name(sc));
    const cJSON *ref = get(sc, "$ref"), *all = get(sc, "allOf"), *e;
    if (ref) {
        const char *r = cJSON_GetStringValue(ref);
        const cJSON *target = ref_target(cc, r);
        if (!target) return fail(cc->err, cc->cap, "'%s.$ref': '%.*s' is not one of the schema's $defs", path, r ? clip(r, 96) : 4,
                                 r ? r : "null");
        snprintf(sub, sizeof sub, "%.400s", r);
        if (!merge_schema(cc, m, target, sub, depth + 1)) return false;
    }
    if (all && (!cJSON_IsArray(all) || !cJSON_GetArraySize(all)))
        return fail(cc->err, cc->cap, "'%s.allOf' must be a non-empty array of schemas", path);
    for (int i = 0; i < cJSON_GetArraySize(all); i++) {
        snprintf(sub, sizeof sub, "%.400s.allOf[%d]", path, i);
        if (!merge_schema(cc, m, cJSON_GetArrayItem(all, i), sub, depth + 1)) return false;
    }
    cJSON_ArrayForEach(e, sc)
        if (strcmp(e->string, "$ref") && strcmp(e->string, "allOf") && !annotation(e->string) && !merge_keyword(cc, m, e->string, e, path))
            return false;
    const cJSON *add = get(sc, "additionalProperties");
    if (cJSON_IsFalse(add) || cJSON_IsObject(add)) {
        if (cc->n_closed == 16) return fail(cc->err, cc->cap, "'%s': more than 16 of allOf's schemas give additionalProperties", path);
        cc->closed[cc->n_closed].props = get(sc, "properties");
        cc->closed[cc->n_closed++].add = add;
    }
    const cJSON *one = get(m, "const"), *vals = get(m, "enum");   /* (a const and an enum: the const, if the enum has it) */
    if (one && vals) {
        bool in = false;
        cJSON_ArrayForEach(e, vals) in |= cJSON_Compare(e, one, true);
        if (!in) return fail(cc->err, cc->cap, "'%s': allOf's const is not in its enum", path);
        cJSON_DeleteItemFromObjectCaseSensitive(m, "enum");
    }
    return true;
}

/* o, made while compiling, kept until the compile ends (NULL and cc->err without memory) */
static cJSON *kept(schema_cc *cc, cJSON *o) {
    if (o && (cc->merged || (cc->merged = cJSON_CreateArray())) && cJSON_AddItemToArray(cc->merged, o)) return o;
    cJSON_Delete(o);
    return fail(cc->err, cc->cap, "out of memory"), NULL;
}

/* A schema with allOf (or a $ref beside other keywords) as the one schema it stands for, kept in
 * cc->merged (NULL and cc->err where its schemas cannot be merged) */
static const cJSON *merged_schema(schema_cc *cc, const cJSON *sc, const char *path) {
    cJSON *m = kept(cc, cJSON_CreateObject());
    if (!m) return NULL;
    cc->n_closed = 0;
    if (!merge_schema(cc, m, sc, path, 0)) return NULL;
    cJSON *props = cJSON_GetObjectItemCaseSensitive(m, "properties"), *p, *next;
    for (int i = 0; i < cc->n_closed; i++)   /* (a property one of them does not declare: its additionalProperties too) */
        for (p = cJSON_IsObject(props) ? props->child : NULL; p; p = next) {
            next = p->next;
            if (get(cc->closed[i].props, p->string)) continue;
            const cJSON *r, *reqs = get(m, "required");
            bool required = false;
            cJSON_ArrayForEach(r, reqs) required |= cJSON_IsString(r) && !strcmp(r->valuestring, p->string);
            if (cJSON_IsFalse(cc->closed[i].add) && required)
                return fail(cc->err, cc->cap, "'%s': property '%.64s' is required by one of allOf's schemas and shut out by "
                            "another's additionalProperties", path, p->string), NULL;
            if (cJSON_IsFalse(cc->closed[i].add)) cJSON_Delete(cJSON_DetachItemViaPointer(props, p));
            else if (!cJSON_ReplaceItemInObjectCaseSensitive(props, p->string, both_of(p, cc->closed[i].add)))
                return fail(cc->err, cc->cap, "out of memory"), NULL;
        }
    return m;
}

/* Beside annotations, sc has a $ref and more (merged as allOf's), or only an allOf of one $ref
 * (*ref: that schema, compiled as a $ref is: a recursive one too) */
static bool to_merge(const cJSON *sc, const cJSON **ref) {
    const cJSON *e, *all = get(sc, "allOf"), *one = cJSON_IsArray(all) && cJSON_GetArraySize(all) == 1 ? all->child : NULL;
    int more = 0;
    cJSON_ArrayForEach(e, sc) more += strcmp(e->string, "$ref") && strcmp(e->string, "allOf") && !annotation(e->string);
    *ref = NULL;
    if (!all) return get(sc, "$ref") && more;
    cJSON_ArrayForEach(e, one) more += strcmp(e->string, "$ref") && !annotation(e->string);
    if (!more && !get(sc, "$ref") && get(one, "$ref")) *ref = one;
    return !*ref;
}

static int schema_node(schema_cc *cc, const cJSON *sc, const char *path, int depth) {
    char sub[512];
    if (depth > JSON_DEPTH_MAX) return fail(cc->err, cc->cap, "'%s': the schema nests deeper than %d", path, JSON_DEPTH_MAX), -1;
    if (cJSON_IsTrue(sc) || (cJSON_IsObject(sc) && !sc->child)) return 0;   /* true, {}: any value */
    if (!cJSON_IsObject(sc)) return fail(cc->err, cc->cap, "'%s' must be a schema (an object), got %s", path, type_name(sc)), -1;
    static const char *const unsupported[] = {"not", "if", "then", "else",
                                              "dependentSchemas", "dependentRequired", "unevaluatedProperties"};
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++)
        if (get(sc, unsupported[i])) return fail(cc->err, cc->cap, "'%s': '%s' is not supported", path, unsupported[i]), -1;
    const cJSON *one;
    if (to_merge(sc, &one)) {
        const cJSON *m = merged_schema(cc, sc, path);
        return m ? schema_node(cc, m, path, depth + 1) : -1;
    }
    if (one) {
        snprintf(sub, sizeof sub, "%.400s.allOf[0]", path);
        return schema_node(cc, one, sub, depth + 1);
    }
    const cJSON *ref = get(sc, "$ref");
    if (ref) {
        const char *r = cJSON_GetStringValue(ref);
        for (int i = 0; r && i < cc->n_refs; i++)   /* (before the lookup: one per $ref, however often it is used) */
            if (!strcmp(cc->refs[i].ref, r)) return cc->refs[i].node;
        const cJSON *target = ref_target(cc, r);
        if (!target) return fail(cc->err, cc->cap, "'%s.$ref': '%.*s' is not one of the schema's $defs", path, r ? clip(r, 96) : 4,
                                 r ? r : "null"), -1;
        if (cc->n_refs == 64) return fail(cc->err, cc->cap, "'%s': more than 64 $defs", path), -1;
        /* a placeholder, of the types the target names (an anyOf of it and null while it compiles), filled below */
        const int k = json_schema_add_node(cc->js, (json_node){.types = shallow_types(cc, target, 0), .n_props = -1});
        if (k < 0) return fail(cc->err, cc->cap, "'%s': the schema is too large (%d nodes at most)", path, JSON_NODES_MAX), -1;
        cc->refs[cc->n_refs].ref = r;
        cc->refs[cc->n_refs++].node = k;
        snprintf(sub, sizeof sub, "%.400s", r);
        const int t = schema_node(cc, target, sub, depth + 1);
        if (t < 0) return -1;
        cc->js->nodes[k] = cc->js->nodes[t];
        return k;
    }
    if (get(sc, "const")) return schema_lits(cc, get(sc, "const"), true, path);
    if (get(sc, "enum")) {
        if (!cJSON_IsArray(get(sc, "enum"))) return fail(cc->err, cc->cap, "'%s.enum' must be an array", path), -1;
        return schema_lits(cc, get(sc, "enum"), false, path);
    }
    const cJSON *alts = get(sc, "anyOf") ? get(sc, "anyOf") : get(sc, "oneOf");
    if (alts) {
        snprintf(sub, sizeof sub, "%.400s.%s", path, get(sc, "anyOf") ? "anyOf" : "oneOf");
        if (!cJSON_IsArray(alts)) return fail(cc->err, cc->cap, "'%s' must be an array", sub), -1;
        return schema_union(cc, alts, sub, depth);
    }
    const cJSON *props = get(sc, "properties"), *items = get(sc, "items"), *add = get(sc, "additionalProperties");
    json_node nd = {.items = 0, .add = 0, .n_props = -1};
    nd.types = get(sc, "type") ? schema_types(cc, get(sc, "type"), path) : props ? JT_OBJ : items ? JT_ARR : JT_ANY;
    if (!nd.types || !schema_bounds(cc, sc, &nd, path)) return -1;
    const cJSON *tuple = get(sc, "prefixItems"), *rest = items;   /* (a tuple: its first items, then the rest's) */
    if (!tuple && cJSON_IsArray(items)) tuple = items, rest = get(sc, "additionalItems");   /* (drafts 4 to 7) */
    const int n_tuple = (nd.types & JT_ARR) ? cJSON_GetArraySize(tuple) : 0;
    const char *const tuple_kw = rest == items ? "prefixItems" : "items", *rest_kw = rest == items ? "items" : "additionalItems";
    int first[JSON_LITS_MAX];
    if (tuple && (!cJSON_IsArray(tuple) || n_tuple > JSON_LITS_MAX))
        return fail(cc->err, cc->cap, "'%s.%s' must be an array of at most %d schemas", path, tuple_kw, JSON_LITS_MAX), -1;
    for (int i = 0; i < n_tuple; i++) {
        snprintf(sub, sizeof sub, "%.400s.%s[%d]", path, tuple_kw, i);
        if ((first[i] = schema_node(cc, cJSON_GetArrayItem(tuple, i), sub, depth + 1)) < 0) return -1;
    }
    if (n_tuple && !(nd.bounds & JB_ITEMS)) nd.bounds |= JB_ITEMS, nd.min_items = 0, nd.max_items = -1;   /* (counted) */
    if (cJSON_IsFalse(rest) && (nd.types & JT_ARR)) {   /* (no more items) */
        nd.max_items = nd.bounds & JB_ITEMS && nd.max_items >= 0 ? CLI_MIN(nd.max_items, n_tuple) : n_tuple;
        nd.bounds |= JB_ITEMS;
        if (nd.min_items > nd.max_items)
            return fail(cc->err, cc->cap, "'%s': minItems %d, of a tuple of %d items", path, nd.min_items, n_tuple), -1;
    } else if (rest && (nd.types & JT_ARR)) {
        snprintf(sub, sizeof sub, "%.400s.%s", path, rest_kw);
        if ((nd.items = schema_node(cc, rest, sub, depth + 1)) < 0) return -1;
    }
    if (cJSON_IsTrue(get(sc, "uniqueItems")) && (nd.types & JT_ARR) && !n_tuple && !schema_unique(cc, &nd, path)) return -1;
    const cJSON *names = get(sc, "propertyNames"), *pats = get(sc, "patternProperties");
    if ((names || pats) && props && (nd.types & JT_OBJ))
        return fail(cc->err, cc->cap, "'%s': %s beside properties is not supported", path, names ? "propertyNames" : "patternProperties"), -1;
    if (!props && (nd.types & JT_OBJ) && (names || pats || cJSON_IsFalse(add))) {   /* (a map's keys held, or none) */
        const cJSON *vals = get(names, "enum") ? get(names, "enum") : get(names, "const"), *v;
        if (names && pats)
            return fail(cc->err, cc->cap, "'%s': propertyNames and patternProperties together are not supported", path), -1;
        if (pats && (!cJSON_IsObject(pats) || cJSON_GetArraySize(pats) != 1))
            return fail(cc->err, cc->cap, "'%s.patternProperties': one pattern is supported", path), -1;
        if (vals || (cJSON_IsFalse(add) && !pats && !names)) {   /* (keys from an enum: each an optional property) */
            cJSON *ps = kept(cc, cJSON_CreateObject());
            if (!ps) return -1;
            for (v = cJSON_IsArray(vals) ? vals->child : vals; v; v = cJSON_IsArray(vals) ? v->next : NULL)   /* (a const: one) */
                if (cJSON_IsString(v) && !get(ps, v->valuestring) &&
                    !add_item(ps, v->valuestring, cJSON_IsObject(add) ? cJSON_Duplicate(add, true) : cJSON_CreateTrue()))
                    return fail(cc->err, cc->cap, "out of memory"), -1;
            props = ps;
        } else {
            cJSON *key = pats ? kept(cc, cJSON_CreateObject()) : NULL;
            if (pats && (!key || !cJSON_AddStringToObject(key, "type", "string") || !cJSON_AddStringToObject(key, "pattern", pats->child->string)))
                return fail(cc->err, cc->cap, "out of memory"), -1;
            snprintf(sub, sizeof sub, "%.400s.%s", path, pats ? "patternProperties" : "propertyNames");
            if ((nd.key = schema_node(cc, pats ? key : names, sub, depth + 1)) < 0) return -1;
            const json_node *kn = &cc->js->nodes[nd.key];
            if (kn->n_lits || !(kn->types & JT_STR))
                return fail(cc->err, cc->cap, "'%s': keys held to anything but a string schema or an enum are not supported", sub), -1;
            if (pats) add = pats->child;   /* (the values of the keys it matches: only those come) */
        }
    }
    if ((cJSON_IsObject(add) || cJSON_IsTrue(add)) && !props && (nd.types & JT_OBJ)) {
        snprintf(sub, sizeof sub, "%.400s.%s", path, pats ? "patternProperties" : "additionalProperties");
        if ((nd.add = schema_node(cc, add, sub, depth + 1)) < 0) return -1;
    }
    const int n = cJSON_IsObject(props) ? cJSON_GetArraySize(props) : 0;
    if (props && !cJSON_IsObject(props)) return fail(cc->err, cc->cap, "'%s.properties' must be an object", path), -1;
    if (n > JSON_LITS_MAX) return fail(cc->err, cc->cap, "'%s': %d properties (at most %d are supported)", path, n, JSON_LITS_MAX), -1;
    int child[JSON_LITS_MAX];   /* the properties' nodes first: an object's keys are then consecutive literals */
    const cJSON *p = props ? props->child : NULL;
    for (int i = 0; i < n; i++, p = p->next) {
        snprintf(sub, sizeof sub, "%.400s.properties.%.64s", path, p->string);
        child[i] = -1;
        bool again = false;   /* a name given again: the last one, as a JSON object's reader keeps it */
        for (const cJSON *q = p->next; q && !again; q = q->next) again = !strcmp(q->string, p->string);
        if (!again && (child[i] = schema_node(cc, p, sub, depth + 1)) < 0) return -1;
    }
    const int k = json_schema_add_node(cc->js, nd);
    if (k < 0) return fail(cc->err, cc->cap, "'%s': the schema is too large (%d nodes at most)", path, JSON_NODES_MAX), -1;
    if (n_tuple && !json_schema_add_prefix(cc->js, k, first, n_tuple)) return fail(cc->err, cc->cap, "out of memory"), -1;
    if (!(nd.types & JT_OBJ) || !props) return k;
    const cJSON *reqs = cJSON_IsArray(get(sc, "required")) ? get(sc, "required") : NULL, *r;
    int order[JSON_LITS_MAX];   /* as declared; g4: sorted as the template's dictsort writes them */
    const cJSON *ps[JSON_LITS_MAX];
    p = props->child;
    for (int i = 0; i < n; i++, p = p->next) {
        int j = i;
        for (; j > 0 && cc->g4 && key_cmp(ps[order[j - 1]]->string, p->string) > 0; j--) order[j] = order[j - 1];
        ps[i] = p;
        order[j] = i;
    }
    cc->js->nodes[k].n_props = -1;
    int n_required = 0, n_declared = 0;
    for (int o = 0; o < n; o++) {
        const int i = order[o];
        if (child[i] < 0) continue;   /* (given again later) */
        bool required = false;
        cJSON_ArrayForEach(r, reqs) required |= cJSON_IsString(r) && !strcmp(r->valuestring, ps[i]->string);
        n_required += required;
        n_declared++;
        cJSON *key = cc->g4 ? NULL : cJSON_CreateString(ps[i]->string);
        const size_t kn = strlen(ps[i]->string) + 2;
        char *kj = cc->g4 ? malloc(kn) : key ? cJSON_PrintUnformatted(key) : NULL;
        if (kj && cc->g4) snprintf(kj, kn, "%s:", ps[i]->string);   /* (a bare key holds its colon) */
        const bool ok = kj && json_schema_add_prop(cc->js, k, kj, child[i], required);
        cJSON_Delete(key);
        free(kj);
        if (!ok) return fail(cc->err, cc->cap, "out of memory"), -1;
    }
    if (!n) cc->js->nodes[k].n_props = 0, cc->js->nodes[k].props = cc->js->n_props;   /* properties {}: an empty object */
    if (nd.bounds & JB_PROPS && (nd.min_props > n_required || (nd.max_props >= 0 && nd.max_props < n_declared)))
        return fail(cc->err, cc->cap, "'%s': minProperties / maxProperties that its required and declared properties do not "
                    "meet are not supported", path), -1;
    return k;
}

/* Gemma 4's calls held to the tools' declarations (tool_choice auto: from the reply's first
 * <|tool_call> on; required: a declared function's name after the forced "call:"; a named one:
 * its arguments after the forced "call:NAME{"), their arguments to each function's parameters
 * (a schema beyond the subset: any object). More than 64 tools: no grammar. */
static bool calls_schema(const cJSON *tools, enum choice choice, const char *chosen, bool one_call, serve_req *rq,
                         char *err, size_t cap) {
    const int n = cJSON_GetArraySize(tools);
    if (n > JSON_LITS_MAX) return true;
    int args[JSON_LITS_MAX], named = JSON_CALLS_AUTO;
    const char *names[JSON_LITS_MAX];
    json_schema *js = json_schema_calls(0, one_call);
    if (!js) return fail(err, cap, "out of memory");
    for (int i = 0; i < n; i++) {
        const cJSON *f = get(cJSON_GetArrayItem(tools, i), "function"), *params = get(f, "parameters");
        names[i] = get(f, "name")->valuestring;   /* (g4_prompt checked it) */
        if (chosen && !strcmp(names[i], chosen)) named = i;
        char ignored[256];
        schema_cc cc = {.js = js, .g4 = true, .root = params, .err = ignored, .cap = sizeof ignored};
        args[i] = truthy(params) ? schema_node(&cc, params, "parameters", 0) : -1;
        cJSON_Delete(cc.merged);
        if (args[i] < 0 || !(js->nodes[args[i]].types & JT_OBJ)) args[i] = 1;   /* (beyond the subset: any object) */
    }
    if (!json_schema_finish(js)) { json_schema_free(js); return fail(err, cap, "out of memory"); }
    for (int i = 0; i < n; i++) {
        if (js->need[js->n_nodes + js->nodes[args[i]].obj] >= JSON_DEPTH_MAX) args[i] = 1;   /* (nests too deep: any object) */
        if (!json_schema_add_func(js, names[i], args[i])) { json_schema_free(js); return fail(err, cap, "out of memory"); }
    }
    js->calls = choice == CHOICE_REQUIRED ? JSON_CALLS_REQUIRED : choice == CHOICE_NAMED ? named : JSON_CALLS_AUTO;
    rq->schema = js;
    return true;
}

/* Schema sc (NULL: any object) compiled into js as its root (path: where it is, for errors) */
static bool schema_root(json_schema *js, const cJSON *sc, const char *path, char *err, size_t cap) {
    if (!sc) return true;
    schema_cc cc = {.js = js, .root = sc, .err = err, .cap = cap};
    const int root = schema_node(&cc, sc, path, 0);
    cJSON_Delete(cc.merged);
    if (root < 0) return false;
    js->root = root;
    if (!json_schema_finish(js)) return fail(err, cap, "out of memory");
    if (js->need[root] > JSON_DEPTH_MAX)
        return fail(err, cap, "'%s': the schema's values cannot be whole within %d levels of nesting (a required "
                    "property that holds its own object?)", path, JSON_DEPTH_MAX);
    return true;
}

json_schema *serve_schema_compile(const char *text, const char *what, char *err, size_t cap) {
    cJSON *sc = cJSON_Parse(text);
    json_schema *js = sc ? json_schema_object() : NULL;
    if (!sc) fail(err, cap, "'%s' is not JSON (near byte %ld)", what, cJSON_GetErrorPtr() ? (long)(cJSON_GetErrorPtr() - text) : 0L);
    else if (!js) fail(err, cap, "out of memory");
    else if (!schema_root(js, sc, what, err, cap)) { json_schema_free(js); js = NULL; }
    cJSON_Delete(sc);
    return js;
}

/* response_format: {"type": "text"}, {"type": "json_object"} (any JSON object; llama.cpp's "schema"
 * beside it too) or {"type": "json_schema", "json_schema": {"schema": ...}}: the reply held to it
 * (rq->schema); refused with thinking or tools to call */
static bool response_format_field(const cJSON *o, serve_req *rq, char *err, size_t cap) {
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(o, "response_format");
    if (!rf || cJSON_IsNull(rf)) return true;
    const cJSON *t = get(rf, "type");
    if (!cJSON_IsObject(rf) || !cJSON_IsString(t))
        return fail(err, cap, "'response_format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                    "{\"type\": \"json_schema\", ...}, got %s", cJSON_IsObject(rf) ? "no type" : type_name(rf));
    if (!strcmp(t->valuestring, "text")) return true;
    const bool object = !strcmp(t->valuestring, "json_object");
    if (!object && strcmp(t->valuestring, "json_schema"))
        return fail(err, cap, "'response_format.type' '%.*s' is not supported (text, json_object and json_schema are)",
                    clip(t->valuestring, 64), t->valuestring);
    if (rq->think) return fail(err, cap, "'response_format' %s with thinking on is not supported", t->valuestring);
    if (rq->continues)
        return fail(err, cap, "'response_format' %s with a reply that continues the last assistant message is not supported",
                    t->valuestring);
    if (truthy(get(o, "tools")) && !(cJSON_IsString(get(o, "tool_choice")) && !strcmp(get(o, "tool_choice")->valuestring, "none")))
        return fail(err, cap, "'response_format' %s with tools to call is not supported ('tool_choice': 'none' is)", t->valuestring);
    const cJSON *sc = object ? get(rf, "schema") : get(get(rf, "json_schema"), "schema");
    if (!object && !sc) return fail(err, cap, "'response_format.json_schema.schema' is missing");
    if (!(rq->schema = json_schema_object())) return fail(err, cap, "out of memory");
    return schema_root(rq->schema, sc, object ? "response_format.schema" : "response_format.json_schema.schema", err, cap);
}

/* A completion's prompt: a string, an array of token ids, or an array of one of either */
static bool completion_prompt(const cJSON *p, const hachi_model *m, serve_req *rq, char *err, size_t cap) {
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 &&
        (cJSON_IsString(cJSON_GetArrayItem(p, 0)) || cJSON_IsArray(cJSON_GetArrayItem(p, 0))))
        p = cJSON_GetArrayItem(p, 0);   /* ["text"] or [[ids]]: one prompt */
    if (cJSON_IsString(p)) {
        if (!(rq->prompt = strdup(p->valuestring))) return fail(err, cap, "out of memory");
        rq->add_bos = true;
        return true;
    }
    const int n = cJSON_IsArray(p) ? cJSON_GetArraySize(p) : 0;
    if (!n || cJSON_IsArray(cJSON_GetArrayItem(p, 0)))
        return fail(err, cap, "'prompt' must be a string or an array of token ids (one prompt a request), got %s",
                    !p ? "nothing" : n ? "several prompts" : cJSON_IsArray(p) ? "an empty array" : type_name(p));
    if (!(rq->ids = malloc(sizeof(int32_t) * (size_t)n)) || !(rq->prompt = strdup("")))
        return fail(err, cap, "out of memory");
    const int32_t nv = hachi_model_n_vocab(m);
    const cJSON *e;
    cJSON_ArrayForEach(e, p) {
        if (!cJSON_IsNumber(e)) return fail(err, cap, "'prompt[%d]' must be a token id, got %s", rq->n_ids, type_name(e));
        const double d = e->valuedouble;
        if (!(d >= 0 && d < nv && d == floor(d)))
            return fail(err, cap, "'prompt[%d]' must be a token id in [0, %d), got %.15g", rq->n_ids, nv, d);
        rq->ids[rq->n_ids++] = (int32_t)d;
    }
    return true;
}

/* A request body as one JSON value (NULL and err where it is not UTF-8, holds a \u0000 or is no JSON) */
static cJSON *parse_body(const char *body, size_t len, char *err, size_t cap) {
    const size_t u = utf8_end((const unsigned char *)body, len);   /* JSON is UTF-8 (RFC 8259) */
    if (u < len) return fail(err, cap, "the request body is not UTF-8 (at byte %zu of %zu)", u, len), NULL;
    const size_t nul = json_nul_at(body, len);
    if (nul < len) return fail(err, cap, "a NUL character (\\u0000 at byte %zu) is not supported in the request's text", nul), NULL;
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (o && end)   /* one JSON value, then only white space */
        while (end < body + len && strchr(" \t\r\n", *end) && *end) end++;
    if (!o || !end || end != body + len) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        cJSON_Delete(o);
        return fail(err, cap, "malformed JSON in the request body (at byte %zu of %zu)", at, len), NULL;
    }
    return o;
}

char *serve_tokenize(const hachi_model *m, const char *body, size_t len, char *err, size_t cap) {
    cJSON *o = parse_body(body, len, err, cap), *out = NULL;
    const cJSON *c = get(o, "content");
    bool add_special = false, parse_special = true, pieces = false;
    int32_t *ids = NULL, n = 0;
    if (o && !cJSON_IsObject(o)) fail(err, cap, "the request body must be a JSON object, got %s", type_name(o));
    else if (o && !cJSON_IsString(c)) fail(err, cap, "'content' must be a string, got %s", c ? type_name(c) : "nothing");
    else if (o && bool_field(o, "add_special", &add_special, err, cap) && bool_field(o, "parse_special", &parse_special, err, cap) &&
             bool_field(o, "with_pieces", &pieces, err, cap)) {
        const size_t tl = strlen(c->valuestring);
        hachi_tokenize(m, c->valuestring, tl, add_special, parse_special, NULL, 0, &n);
        if ((ids = malloc(sizeof *ids * ((size_t)n + 1))) && hachi_tokenize(m, c->valuestring, tl, add_special, parse_special, ids,
                                                                             n + 1, &n) == HACHI_OK)
            out = cJSON_CreateObject();
        if (!out) fail(err, cap, "out of memory");
    }
    cJSON *arr = out ? cJSON_AddArrayToObject(out, "tokens") : NULL;
    for (int32_t i = 0; arr && i < n; i++) {   /* a piece that is not UTF-8: its bytes (as llama.cpp writes it) */
        char piece[1024];
        const int32_t k = CLI_MAX(0, CLI_MIN(hachi_token_to_text(m, ids[i], piece, sizeof piece - 1), (int32_t)sizeof piece - 1));
        cJSON *e = pieces ? cJSON_CreateObject() : cJSON_CreateNumber(ids[i]);
        if (pieces && e) {
            cJSON_AddNumberToObject(e, "id", ids[i]);
            piece[k] = 0;
            if (utf8_end((const unsigned char *)piece, (size_t)k) == (size_t)k && !memchr(piece, 0, (size_t)k))
                cJSON_AddStringToObject(e, "piece", piece);
            else {
                cJSON *b = cJSON_AddArrayToObject(e, "piece");
                for (int32_t j = 0; b && j < k; j++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)piece[j]));
            }
        }
        if (e) cJSON_AddItemToArray(arr, e);
    }
    char *s = out ? cJSON_PrintUnformatted(out) : NULL;
    if (out && !s) fail(err, cap, "out of memory");
    cJSON_Delete(out);
    cJSON_Delete(o);
    free(ids);
    return s;
}

char *serve_detokenize(const hachi_model *m, const char *body, size_t len, char *err, size_t cap) {
    cJSON *o = parse_body(body, len, err, cap);
    const cJSON *t = get(o, "tokens"), *e;
    const int32_t nv = hachi_model_n_vocab(m);
    int n = 0;
    if (o && !cJSON_IsObject(o)) { fail(err, cap, "the request body must be a JSON object, got %s", type_name(o)); n = -1; }
    else if (o && !cJSON_IsArray(t)) { fail(err, cap, "'tokens' must be an array of token ids, got %s", t ? type_name(t) : "nothing"); n = -1; }
    const cJSON *ids = o && n == 0 ? t : NULL;
    cJSON_ArrayForEach(e, ids) {
        const double d = cJSON_GetNumberValue(e);
        if (!cJSON_IsNumber(e) || d != floor(d) || d < 0 || d >= nv) {
            fail(err, cap, "'tokens[%d]' must be a token id in [0, %d), got %s", n, nv, cJSON_IsNumber(e) ? "a number outside it" : type_name(e));
            n = -1;
            break;
        }
        n++;
    }
    hachi_detok *dt = NULL;
    text_buf b = {0};
    if (o && n >= 0 && hachi_detok_create(m, &dt) != HACHI_OK) fail(err, cap, "out of memory");
    if (dt) {   /* the text the server writes of them in a reply (control tokens write none) */
        char buf[HACHI_DETOK_MAX];
        hachi_detok_reset(dt, true);
        cJSON_ArrayForEach(e, t) {
            put(&b, buf, (size_t)hachi_detok_push(dt, (int32_t)e->valuedouble, buf, sizeof buf));
        }
        put(&b, buf, (size_t)hachi_detok_flush(dt, buf, sizeof buf));
    }
    const size_t sc = 6 * b.len + 16;   /* (written with serve_json_escape: a byte token's NUL as \\u0000) */
    char *s = dt && !b.oom ? malloc(sc) : NULL;
    if (s) {
        const int k = snprintf(s, sc, "{\"content\":\"");
        const size_t w = serve_json_escape(s + k, sc - (size_t)k - 2, b.p ? b.p : "", b.len);
        snprintf(s + (size_t)k + w, sc - (size_t)k - w, "\"}");
    }
    if (dt && !s) fail(err, cap, "out of memory");
    cJSON_Delete(o);
    hachi_detok_free(dt);
    free(b.p);
    return s;
}

bool serve_parse(const char *body, size_t len, bool chat, const hachi_model *m, serve_req *rq, char *err, size_t cap) {
    memset(rq, 0, sizeof *rq);
    if (cap) snprintf(err, cap, "the request could not be read");   /* (a path that sets no message: never another request's) */
    rq->chat = chat;
    rq->max_tokens = -1;
    rq->smp.temperature = rq->smp.top_p = rq->smp.top_k = rq->smp.min_p = NAN;
    rq->smp.repeat_penalty = rq->smp.repeat_last_n = rq->smp.presence_penalty = rq->smp.frequency_penalty = NAN;
    rq->seed = -1;
    rq->cache_prompt = true;
    cJSON *o = parse_body(body, len, err, cap);
    if (!o) return false;
    json_number_texts(o, body, len);   /* (a tool declaration's numbers as Python writes them) */
    bool ok = false, given;
    double d;
    if (!cJSON_IsObject(o)) { fail(err, cap, "the request body must be a JSON object, got %s", type_name(o)); goto out; }
    if (chat) {
        const cJSON *kw = cJSON_GetObjectItemCaseSensitive(o, "chat_template_kwargs");
        if (kw && !cJSON_IsNull(kw)) {
            if (!cJSON_IsObject(kw)) { fail(err, cap, "'chat_template_kwargs' must be an object, got %s", type_name(kw)); goto out; }
            if (!bool_field(kw, "enable_thinking", &rq->think, err, cap)) goto out;
        }
        spans sp = {0};
        const cJSON *tools = get(o, "tools");
        if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools)) {
            fail(err, cap, "'tools' must be an array, got %s", type_name(tools));
            goto out;
        }
        bool tooled = truthy(tools);   /* tools, tool calls or tool responses: Gemma 4's tool format */
        const cJSON *msg, *msgs = cJSON_IsArray(get(o, "messages")) ? get(o, "messages") : NULL;
        cJSON_ArrayForEach(msg, msgs)
            tooled |= truthy(get(msg, "tool_calls")) || (cJSON_IsString(get(msg, "role")) && !strcmp(get(msg, "role")->valuestring, "tool"));
        if (tooled && hachi_chat_detect(m) != HACHI_CHAT_GEMMA4) {
            fail(err, cap, "tools, tool calls and 'tool' messages need a Gemma 4 model (this model's chat format has none)");
            goto out;
        }
        enum choice choice;
        const char *chosen;
        if (!tool_choice(o, &choice, &chosen, err, cap)) goto out;
        if ((choice == CHOICE_REQUIRED || choice == CHOICE_NAMED) && !cJSON_GetArraySize(tools)) {
            fail(err, cap, "'tool_choice' asks for a call, but the request declares no 'tools'");
            goto out;
        }
        const bool got = tooled ? g4_prompt(o, m, rq->think, choice, chosen, &rq->prompt, &sp, &rq->forced, err, cap)
                                : chat_prompt(cJSON_GetObjectItemCaseSensitive(o, "messages"), m, rq->think, &rq->prompt, &sp,
                                              &rq->continues, err, cap);
        rq->plain = sp.r;
        rq->n_plain = sp.n;
        if (!got) goto out;
        bool parallel = true;
        if (!bool_field(o, "parallel_tool_calls", &parallel, err, cap)) goto out;
        if (tooled && cJSON_GetArraySize(tools) && choice != CHOICE_NONE &&
            !calls_schema(tools, choice, chosen, !parallel, rq, err, cap))
            goto out;
    } else {
        if (!completion_prompt(cJSON_GetObjectItemCaseSensitive(o, "prompt"), m, rq, err, cap)) goto out;
        if (!bool_field(o, "echo", &rq->echo, err, cap)) goto out;
    }
    /* (a completion may ask for none: echo's prompt and its log-probabilities alone) */
    const cJSON *mct = cJSON_GetObjectItemCaseSensitive(o, "max_completion_tokens");
    const char *mt = chat && mct && !cJSON_IsNull(mct) ? "max_completion_tokens" : "max_tokens";
    if (!num_field(o, mt, true, chat ? 1 : 0, 1 << 30, &d, &given, err, cap)) goto out;
    if (given) rq->max_tokens = (long)d;
    /* one choice, no log-probabilities: asked for otherwise, an error rather than a silent ignore */
    if (!num_field(o, "n", true, 1, 1 << 30, &d, &given, err, cap)) goto out;
    if (given && d != 1) { fail(err, cap, "'n' of %.15g is not supported: one choice a request", d); goto out; }
    /* log-probabilities: chat's logprobs (a boolean) and top_logprobs; a completion's logprobs is
     * the count of alternatives (0 included) */
    rq->top_logprobs = -1;
    if (chat) {
        bool want = false;
        if (!bool_field(o, "logprobs", &want, err, cap)) goto out;
        if (!num_field(o, "top_logprobs", true, 0, SERVE_LOGPROB_MAX, &d, &given, err, cap)) goto out;
        if (given && !want) { fail(err, cap, "'top_logprobs' needs 'logprobs': true"); goto out; }
        if (want) rq->top_logprobs = given ? (int)d : 0;
    } else {
        if (!cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(o, "logprobs")) &&
            !num_field(o, "logprobs", true, 0, SERVE_LOGPROB_MAX, &d, &given, err, cap))
            goto out;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "logprobs"))) {
            fail(err, cap, "'logprobs' of a completion is a count of alternatives (0 to %d), got true", SERVE_LOGPROB_MAX);
            goto out;
        }
        if (given) rq->top_logprobs = (int)d;
    }
    /* the sampling fields: OpenAI's, and llama.cpp server's top_k, min_p, repeat_penalty and
     * repeat_last_n (-1: the context) */
    const struct { const char *name; bool integer; double lo, hi, *to; } fields[] = {
        {"temperature", false, 0, 2, &rq->smp.temperature},
        {"top_p", false, 0, 1, &rq->smp.top_p},
        {"top_k", true, -1, 1 << 30, &rq->smp.top_k},   /* (-1, as vLLM's clients send it: off) */
        {"min_p", false, 0, 1, &rq->smp.min_p},
        {"repeat_penalty", false, 0.01, 100, &rq->smp.repeat_penalty},
        {"repeat_last_n", true, -1, 1 << 20, &rq->smp.repeat_last_n},
        {"presence_penalty", false, -2, 2, &rq->smp.presence_penalty},
        {"frequency_penalty", false, -2, 2, &rq->smp.frequency_penalty},
    };
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        if (!num_field(o, fields[i].name, fields[i].integer, fields[i].lo, fields[i].hi, &d, &given, err, cap)) goto out;
        if (given) *fields[i].to = d;
    }
    if (!logit_bias_field(o, m, rq, err, cap) || !response_format_field(o, rq, err, cap)) goto out;
    if (!num_field(o, "seed", true, -9.2e18, 9.2e18, &d, &given, err, cap)) goto out;
    if (given) rq->seed = (long long)d & 0x7fffffffffffffffLL;
    if (!stop_field(o, rq, err, cap) || !bool_field(o, "stream", &rq->stream, err, cap) ||
        !bool_field(o, "cache_prompt", &rq->cache_prompt, err, cap))
        goto out;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(o, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) { fail(err, cap, "'stream_options' must be an object, got %s", type_name(so)); goto out; }
        if (!bool_field(so, "include_usage", &rq->include_usage, err, cap)) goto out;
    }
    ok = true;
out:
    cJSON_Delete(o);
    if (!ok) serve_req_free(rq);
    return ok;
}

void serve_req_free(serve_req *rq) {
    free(rq->prompt);
    rq->prompt = NULL;
    free(rq->ids);
    rq->ids = NULL;
    rq->n_ids = 0;
    free(rq->bias_ids);
    free(rq->bias);
    json_schema_free(rq->schema);
    rq->schema = NULL;
    rq->bias_ids = NULL;
    rq->bias = NULL;
    rq->n_bias = 0;
    free(rq->plain);
    rq->plain = NULL;
    rq->n_plain = 0;
    for (int i = 0; i < rq->n_stop; i++) free(rq->stop[i]);
    rq->n_stop = 0;
}

/* ---- responses -------------------------------------------------------------------------------- */

static void put_legacy_logprobs(text_buf *b, const char *entries, size_t len);

size_t serve_json_escape(char *buf, size_t cap, const char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        const char *rep = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
        size_t k = rep ? 2 : (c < 0x20 || c == 0x7f) ? 6 : 1;
        if (o + k >= cap) return 0;
        if (rep) { buf[o] = rep[0]; buf[o + 1] = rep[1]; }
        else if (k == 6) snprintf(buf + o, cap - o, "\\u%04x", c);
        else buf[o] = (char)c;
        o += k;
    }
    buf[o] = 0;
    return o;
}

char *serve_error_json(const char *msg, const char *type, const char *code) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static void add_usage(cJSON *o, const serve_result *r) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", r->prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", r->completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", r->prompt_tokens + r->completion_tokens);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", r->cached_tokens);
}

/* a JSON string of s[0..n), written out (a NUL byte as \u0000: cJSON's strings would end there) */
static cJSON *string_n(const char *s, size_t n) {
    char *z = malloc(6 * n + 3);
    if (!z) return NULL;
    z[0] = '"';
    const size_t e = serve_json_escape(z + 1, 6 * n + 1, s, n);
    memcpy(z + 1 + e, "\"", 2);
    cJSON *v = cJSON_CreateRaw(z);
    free(z);
    return v;
}

char *serve_result_json(const serve_req *rq, const serve_result *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", rq->chat ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON *cs = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(cs, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (rq->chat) {
        cJSON *msg = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        cJSON *calls = r->tool_calls ? cJSON_Parse(r->tool_calls) : NULL;
        if (calls && !r->len) cJSON_AddNullToObject(msg, "content");   /* OpenAI's form of calls alone */
        else cJSON_AddItemToObject(msg, "content", string_n(r->text, r->len));
        if (r->reasoning_len) cJSON_AddItemToObject(msg, "reasoning_content", string_n(r->reasoning, r->reasoning_len));
        if (calls) cJSON_AddItemToObject(msg, "tool_calls", calls);
        if (rq->top_logprobs >= 0) {
            text_buf b = {0};
            puts_(&b, "{\"content\":[");
            put(&b, r->logprobs ? r->logprobs : "", r->logprobs ? r->logprobs_len : 0);
            puts_(&b, "]}");
            if (!b.oom) cJSON_AddRawToObject(c, "logprobs", b.p);
            free(b.p);
        }
    } else {
        cJSON_AddItemToObject(c, "text", string_n(r->text, r->len));
        text_buf b = {0};
        if (rq->top_logprobs >= 0) put_legacy_logprobs(&b, r->logprobs, r->logprobs_len);
        if (rq->top_logprobs >= 0 && !b.oom) cJSON_AddRawToObject(c, "logprobs", b.p);
        else cJSON_AddNullToObject(c, "logprobs");
        free(b.p);
    }
    cJSON_AddStringToObject(c, "finish_reason", r->finish);
    add_usage(o, r);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* ---- Gemma 4's tool calls in a reply ---------------------------------------------------------- */

typedef struct { const char *p, *end; } g4cur;

static bool g4_lit(g4cur *c, const char *s) {
    const size_t n = strlen(s);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n)) return false;
    c->p += n;
    return true;
}

static void g4_space(g4cur *c) { while (c->p < c->end && strchr(" \t\r\n", *c->p) && *c->p) c->p++; }

/* a <|"|>-quoted string's text, NULL when there is none */
static char *g4_string(g4cur *c) {
    if (!g4_lit(c, G4Q)) return NULL;
    const char *e = memmem(c->p, (size_t)(c->end - c->p), G4Q, 5);
    if (!e) return NULL;
    char *s = strndup(c->p, (size_t)(e - c->p));
    c->p = e + 5;
    return s;
}

/* Whether s is a number as JSON writes one: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool json_number_text(const char *s) {
    s += *s == '-';
    if (*s == '0') s++;
    else if (*s >= '1' && *s <= '9') while (*s >= '0' && *s <= '9') s++;
    else return false;
    if (*s == '.') {
        if (!(*++s >= '0' && *s <= '9')) return false;
        while (*s >= '0' && *s <= '9') s++;
    }
    if (*s == 'e' || *s == 'E') {
        s += s[1] == '+' || s[1] == '-';
        if (!(*++s >= '0' && *s <= '9')) return false;
        while (*s >= '0' && *s <= '9') s++;
    }
    return !*s;
}

/* One value of Gemma 4's argument syntax as JSON: a quoted string, {key:value,...} (keys bare or
 * quoted), [value,...], true, false, null / None, a number. NULL when it does not parse. */
static cJSON *g4_value(g4cur *c, int depth) {
    g4_space(c);
    if (depth > 64 || c->p >= c->end) return NULL;
    if (*c->p == '{' || *c->p == '[') {
        const bool obj = *c->p++ == '{';
        cJSON *v = obj ? cJSON_CreateObject() : cJSON_CreateArray();
        g4_space(c);
        if (c->p < c->end && *c->p == (obj ? '}' : ']')) { c->p++; return v; }
        for (;;) {
            char *key = NULL;
            if (obj) {
                g4_space(c);
                if (!(key = g4_string(c))) {   /* a bare key: up to its colon */
                    const char *k = c->p;
                    while (c->p < c->end && *c->p != ':' && *c->p != ',' && *c->p != '}') c->p++;
                    key = c->p > k ? strndup(k, (size_t)(c->p - k)) : NULL;
                }
                g4_space(c);
                if (!key || !g4_lit(c, ":")) { free(key); cJSON_Delete(v); return NULL; }
            }
            cJSON *item = g4_value(c, depth + 1);
            if (!item) { free(key); cJSON_Delete(v); return NULL; }
            if (obj) cJSON_AddItemToObject(v, key, item);
            else cJSON_AddItemToArray(v, item);
            free(key);
            g4_space(c);
            if (g4_lit(c, ",")) continue;
            if (g4_lit(c, obj ? "}" : "]")) return v;
            cJSON_Delete(v);
            return NULL;
        }
    }
    char *s = g4_string(c);
    if (s) { cJSON *v = cJSON_CreateString(s); free(s); return v; }
    if (g4_lit(c, "true")) return cJSON_CreateTrue();
    if (g4_lit(c, "false")) return cJSON_CreateFalse();
    if (g4_lit(c, "null") || g4_lit(c, "None")) return cJSON_CreateNull();
    char num[64], *e;
    const size_t n = CLI_MIN((size_t)(c->end - c->p), sizeof num - 1);
    memcpy(num, c->p, n);
    num[n] = 0;
    const double d = strtod(num, &e);
    if (e == num || !isfinite(d)) return NULL;
    c->p += e - num;
    *e = 0;   /* a JSON number's text as written (an integer beyond 2^53 whole); else the value's */
    return json_number_text(num) ? cJSON_CreateRaw(num) : cJSON_CreateNumber(d);
}

/* "call:NAME{ARGS}" as an OpenAI tool call; NULL when it is not one */
static cJSON *g4_call(const char *s, size_t n, const char *id) {
    g4cur c = {s, s + n};
    g4_space(&c);
    if (!g4_lit(&c, "call:")) return NULL;
    const char *name = c.p;
    while (c.p < c.end && *c.p != '{') c.p++;
    if (c.p == name || c.p == c.end) return NULL;
    char *nm = strndup(name, (size_t)(c.p - name));
    cJSON *args = g4_value(&c, 0);
    g4_space(&c);
    if (!args || c.p != c.end || !cJSON_IsObject(args) || !nm) { free(nm); cJSON_Delete(args); return NULL; }
    char *aj = cJSON_PrintUnformatted(args);
    cJSON_Delete(args);
    cJSON *call = cJSON_CreateObject(), *f = cJSON_CreateObject();
    cJSON_AddStringToObject(call, "id", id);
    cJSON_AddStringToObject(call, "type", "function");
    cJSON_AddStringToObject(f, "name", nm);
    cJSON_AddStringToObject(f, "arguments", aj ? aj : "{}");
    cJSON_AddItemToObject(call, "function", f);
    free(nm);
    free(aj);
    return call;
}

char *serve_tool_calls(const char *calls, size_t len, const char *id_prefix, char **rest, size_t *rest_len) {
    cJSON *arr = cJSON_CreateArray();
    text_buf r = {0};
    int k = 0;
    for (size_t i = 0; i < len;) {
        if (calls[i] == SERVE_CALL_SEP) { i++; continue; }
        const char *e = memchr(calls + i, SERVE_CALL_SEP, len - i);
        const size_t n = e ? (size_t)(e - calls) - i : len - i;
        char id[96];
        snprintf(id, sizeof id, "%s%d", id_prefix, k);
        cJSON *call = g4_call(calls + i, n, id);
        if (call) { cJSON_AddItemToArray(arr, call); k++; }
        else put(&r, calls + i, n);
        i += n;
    }
    *rest = r.p;
    *rest_len = r.oom ? 0 : r.len;
    char *out = k ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    return out;
}

size_t serve_chunk_tool_calls(char *buf, size_t cap, const serve_req *rq, const serve_result *r) {
    cJSON *arr = r->tool_calls ? cJSON_Parse(r->tool_calls) : NULL, *c;
    int i = 0;
    cJSON_ArrayForEach(c, arr) {
        cJSON_AddNumberToObject(c, "index", i++);
    }
    char *js = arr ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    (void)rq;
    const int k = js ? snprintf(buf, cap, "data: {\"id\":\"%s\",\"object\":\"chat.completion.chunk\",\"created\":%lld,\"model\":\"%s\","
                                          "\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":%s},\"finish_reason\":null}]}\n\n",
                                r->id, r->created, r->model, js) : -1;
    free(js);
    return k < 0 || (size_t)k >= cap ? 0 : (size_t)k;
}

size_t serve_chunk_reasoning(char *buf, size_t cap, const serve_req *rq, const serve_result *r, const char *text,
                             size_t len) {
    int k = snprintf(buf, cap, "data: {\"id\":\"%s\",\"object\":\"chat.completion.chunk\",\"created\":%lld,\"model\":\"%s\","
                     "\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"", r->id, r->created, r->model);
    (void)rq;
    if (k < 0 || (size_t)k >= cap) return 0;
    size_t o = (size_t)k, e = serve_json_escape(buf + o, cap - o, text, len);
    if (len && !e) return 0;
    o += e;
    k = snprintf(buf + o, cap - o, "\"},\"finish_reason\":null}]}\n\n");
    return k < 0 || (size_t)k >= cap - o ? 0 : o + (size_t)k;
}

size_t serve_chunk(char *buf, size_t cap, const serve_req *rq, const serve_result *r, const char *text, size_t len,
                   bool first, const char *finish, bool usage) {
    size_t o = 0;
    int k = snprintf(buf, cap, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":\"%s\",\"choices\":[",
                     r->id, rq->chat ? "chat.completion.chunk" : "text_completion", r->created, r->model);
    if (k < 0 || (size_t)k >= cap) return 0;
    o = (size_t)k;
#define ADD(...) do { k = snprintf(buf + o, cap - o, __VA_ARGS__); if (k < 0 || (size_t)k >= cap - o) return 0; o += (size_t)k; } while (0)
    if (usage) {
        ADD("],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
            "\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\n", r->prompt_tokens, r->completion_tokens,
            r->prompt_tokens + r->completion_tokens, r->cached_tokens);
        return o;
    }
    if (rq->chat) {
        ADD("{\"index\":0,\"delta\":{");
        if (first) ADD("\"role\":\"assistant\"%s", finish && !len ? "" : ",");
        if (len || !finish) {
            ADD("\"content\":\"");
            size_t e = serve_json_escape(buf + o, cap - o, text, len);
            if (len && !e) return 0;
            o += e;
            ADD("\"");
        }
        ADD("}");
        if (rq->top_logprobs >= 0 && r->logprobs_len)
            ADD(",\"logprobs\":{\"content\":[%.*s]}", (int)r->logprobs_len, r->logprobs);
        else if (rq->top_logprobs >= 0) ADD(",\"logprobs\":null");
    } else {
        ADD("{\"index\":0,\"text\":\"");
        size_t e = serve_json_escape(buf + o, cap - o, text, len);
        if (len && !e) return 0;
        o += e;
        text_buf b = {0};
        if (rq->top_logprobs >= 0 && r->logprobs_len) put_legacy_logprobs(&b, r->logprobs, r->logprobs_len);
        k = snprintf(buf + o, cap - o, "\",\"logprobs\":%s", b.p && !b.oom ? b.p : "null");
        free(b.p);
        if (k < 0 || (size_t)k >= cap - o || b.oom) return 0;
        o += (size_t)k;
    }
    if (finish) ADD(",\"finish_reason\":\"%s\"}]}\n\n", finish);
    else ADD(",\"finish_reason\":null}]}\n\n");
#undef ADD
    return o;
}

/* {"token":..,"logprob":..,"bytes":[..] (no closing brace) of token t at log-probability lp into buf */
static size_t logprob_token(char *buf, size_t cap, const hachi_model *m, int32_t t, double lp, int strip) {
    char piece[1024], text[3 * sizeof piece];
    int32_t n = hachi_token_to_text(m, t, piece, sizeof piece);
    if (strip == SERVE_STRIP_TEXT) n = 0;
    if (strip == SERVE_STRIP_SPACE && n > 0 && piece[0] == ' ') memmove(piece, piece + 1, (size_t)--n);
    size_t tl = 0;
    for (size_t i = 0; n > 0 && i < (size_t)n;) {   /* the valid UTF-8 runs, U+FFFD for each other byte */
        const size_t e = utf8_end((const unsigned char *)piece + i, (size_t)n - i);
        memcpy(text + tl, piece + i, e);
        tl += e;
        i += e;
        if (i < (size_t)n) {   /* U+FFFD */
            text[tl++] = (char)0xEF;
            text[tl++] = (char)0xBF;
            text[tl++] = (char)0xBD;
            i++;
        }
    }
    int k = snprintf(buf, cap, "{\"token\":\"");
    if (k < 0 || (size_t)k >= cap) return 0;
    size_t o = (size_t)k, e = serve_json_escape(buf + o, cap - o, text, tl);
    if (tl && !e) return 0;
    o += e;
    k = isnan(lp) ? snprintf(buf + o, cap - o, "\",\"logprob\":null,\"bytes\":[")   /* (no distribution) */
                  : snprintf(buf + o, cap - o, "\",\"logprob\":%.9g,\"bytes\":[", isfinite(lp) ? lp : -9999.0);
    if (k < 0 || (size_t)k >= cap - o) return 0;
    o += (size_t)k;
    for (int32_t i = 0; i < n; i++) {
        k = snprintf(buf + o, cap - o, "%s%u", i ? "," : "", (unsigned)(unsigned char)piece[i]);
        if (k < 0 || (size_t)k >= cap - o) return 0;
        o += (size_t)k;
    }
    if (o + 2 > cap) return 0;
    buf[o++] = ']';
    buf[o] = 0;
    return o;
}

size_t serve_logprob_entry(char *buf, size_t cap, const hachi_model *m, const float *lg, int32_t tok, int top,
                           int strip, long offset) {
    const int32_t nv = hachi_model_n_vocab(m);
    if (tok < 0 || tok >= nv || top < 0 || top > SERVE_LOGPROB_MAX) return 0;
    if (!lg) {   /* a prompt's first token: no distribution it was drawn from */
        const size_t o = logprob_token(buf, cap, m, tok, NAN, strip);
        const int k = o ? snprintf(buf + o, cap - o, ",\"top_logprobs\":null,\"text_offset\":%ld}", CLI_MAX(offset, 0L)) : -1;
        return k < 0 || (size_t)k >= cap - o ? 0 : o + (size_t)k;
    }
    float mx = lg[0];
    for (int32_t i = 1; i < nv; i++) mx = lg[i] > mx ? lg[i] : mx;
    double z = 0;
    for (int32_t i = 0; i < nv; i++) z += (double)expf(lg[i] - mx);   /* (float terms summed in double: lse within 1e-7, and an E2B prompt of 517 tokens scored in 4.4 s, not 4.9) */
    const double lse = (double)mx + log(z > 1 ? z : 1);   /* (z >= 1: the largest logit's own term) */
    int32_t best[SERVE_LOGPROB_MAX];   /* the top likeliest, best first (ties: the lower id) */
    int nb = 0;
    for (int32_t i = 0; i < nv && top; i++) {
        if (nb == top && !(lg[i] > lg[best[nb - 1]])) continue;
        int j = nb < top ? nb++ : nb - 1;
        for (; j > 0 && lg[i] > lg[best[j - 1]]; j--) best[j] = best[j - 1];
        best[j] = i;
    }
    size_t o = logprob_token(buf, cap, m, tok, (double)lg[tok] - lse, strip);
    static const char open[] = ",\"top_logprobs\":[";   /* then each alternative, then "]}" and the NUL */
    if (!o || o + sizeof open - 1 + 3 > cap) return 0;
    memcpy(buf + o, open, sizeof open - 1);
    o += sizeof open - 1;
    for (int i = 0; i < nb; i++) {
        if (i && o + 1 + 3 > cap) return 0;
        if (i) buf[o++] = ',';
        const size_t w = logprob_token(buf + o, cap - o, m, best[i], (double)lg[best[i]] - lse,
                                       strip == SERVE_STRIP_SPACE ? strip : SERVE_STRIP_NONE);   /* (the first piece's alternatives lose their space too) */
        if (!w || o + w + 1 + 3 > cap) return 0;
        o += w;
        buf[o++] = '}';
    }
    const int k = offset < 0 ? snprintf(buf + o, cap - o, "]}") : snprintf(buf + o, cap - o, "],\"text_offset\":%ld}", offset);
    return k < 0 || (size_t)k >= cap - o ? 0 : o + (size_t)k;
}

/* A JSON string of s[0..n) */
static void put_string(text_buf *b, const char *s, size_t n) {
    char *e = malloc(6 * n + 1);
    const size_t w = e ? serve_json_escape(e, 6 * n + 1, s, n) : 0;
    if (!e || (n && !w)) b->oom = true;
    put(b, "\"", 1);
    put(b, e ? e : "", w);
    put(b, "\"", 1);
    free(e);
}

static void put_logprob(text_buf *b, const cJSON *v) {
    char num[32];
    if (!cJSON_IsNumber(v)) puts_(b, "null");
    else put(b, num, (size_t)snprintf(num, sizeof num, "%.9g", v->valuedouble));
}

static const char *entry_token(const cJSON *e) {
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "token"));
    return t ? t : "";
}

/* "text":logprob, after a comma unless it is the first (i 0) */
static void put_pair(text_buf *b, int i, const char *text, const cJSON *lp) {
    if (i) puts_(b, ",");
    put_string(b, text, strlen(text));
    puts_(b, ":");
    put_logprob(b, lp);
}

/* OpenAI's logprobs object of a text completion, {"tokens", "token_logprobs", "top_logprobs": [{text:
 * logprob} of the alternatives and the token itself], "text_offset"}, from serve_logprob_entry's
 * comma-joined entries[0..len) (their text_offset written) into b */
static void put_legacy_logprobs(text_buf *b, const char *entries, size_t len) {
    text_buf in = {0};
    puts_(&in, "[");
    put(&in, entries ? entries : "", len);
    puts_(&in, "]");
    cJSON *a = in.oom ? NULL : cJSON_ParseWithLength(in.p, in.len);
    free(in.p);
    if (!a) { b->oom = true; return; }
    static const char *const key[4] = {"{\"tokens\":[", "],\"token_logprobs\":[", "],\"top_logprobs\":[", "],\"text_offset\":["};
    for (int k = 0; k < 4; k++) {
        puts_(b, key[k]);
        const cJSON *e;
        int i = 0;
        cJSON_ArrayForEach(e, a) {
            const char *tok = entry_token(e);
            if (i++) puts_(b, ",");
            if (k == 0) put_string(b, tok, strlen(tok));
            else if (k == 1) put_logprob(b, cJSON_GetObjectItemCaseSensitive(e, "logprob"));
            else if (k == 3) {
                char num[32];
                put(b, num, (size_t)snprintf(num, sizeof num, "%.0f", cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "text_offset"))));
            }
            else if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(e, "top_logprobs"))) puts_(b, "null");
            else {   /* the alternatives, then the token itself unless among them; a text once (its first) */
                const cJSON *alts = cJSON_GetObjectItemCaseSensitive(e, "top_logprobs"), *x;
                int j = 0;
                bool among = false;
                puts_(b, "{");
                cJSON_ArrayForEach(x, alts) {
                    const char *t = entry_token(x);
                    bool seen = false;
                    for (const cJSON *y = alts->child; y != x && !seen; y = y->next) seen = !strcmp(entry_token(y), t);
                    among |= !strcmp(t, tok);
                    if (!seen) put_pair(b, j++, t, cJSON_GetObjectItemCaseSensitive(x, "logprob"));
                }
                if (!among) put_pair(b, j, tok, cJSON_GetObjectItemCaseSensitive(e, "logprob"));
                puts_(b, "}");
            }
        }
    }
    puts_(b, "]}");
    cJSON_Delete(a);
}

char *serve_models_json(const char *name, long long created) {
    cJSON *o = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(o, "data"), *e = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(d, e);
    cJSON_AddStringToObject(e, "id", name);
    cJSON_AddStringToObject(e, "object", "model");
    cJSON_AddNumberToObject(e, "created", (double)created);
    cJSON_AddStringToObject(e, "owned_by", "hachi");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
#endif
