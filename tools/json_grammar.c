/* JSON as a constraint on sampling (serve's response_format): a byte-level pushdown automaton of
 * RFC 8259 JSON held to a compiled schema (json_object's: any object; json_schema's: the types,
 * properties in their order, enums and consts a schema gives), and, per sampling step, the mask of
 * the vocabulary's tokens whose text can come next (hachi_sampler_constraint). Once the value is
 * whole, only an end-of-generation token may come. A token's text is its piece as
 * hachi_token_to_text gives it (a byte token its byte); control tokens other than the end are never
 * allowed (their text is not the reply's). White space between two of JSON's tokens is at most one
 * newline and JSON_WS_MAX spaces or tabs (llama.cpp's JSON grammar allows as much), and nesting
 * at most JSON_DEPTH_MAX deep, so that a model cannot stall in either. Inside a string a token is
 * taken whole when it holds no quote, backslash or control byte (nor, in Gemma 4's calls, a '<':
 * there a string's or key's text never spells <|"|>, which would read as the quote token), and run
 * through a copy of the automaton otherwise. Elsewhere (and in a string with a pattern) the mask
 * walks the vocabulary's texts sorted as a trie: a prefix many texts share is fed once, and one
 * that fails rejects them all. A state's mask is kept for when it comes again. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

enum {
    J_VALUE,        /* a value of node vnode */
    J_ARR_FIRST,    /* after '[': an item or ']' */
    J_KEY_FIRST,    /* after '{': a key or '}' */
    J_KEY,          /* after ',' in an object: a key */
    J_COLON,        /* after a key */
    J_AFTER,        /* after a value in a container: ',' or its close */
    J_STRING,       /* in a string (key: an undeclared object's key) */
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
    J_LITS,         /* one of the literals lits[lit_base + i] (i in cand), pos bytes matched, of kind lit_kind */
    J_BKEY,         /* g4: a bare key, up to its ':' */
    J_G4_END,       /* g4: a call's arguments closed: <tool_call|> */
    J_G4_NEXT,      /* g4: another call's <|tool_call>, or the end */
    J_G4_IDLE,      /* g4, tool_choice auto: text, until a <|tool_call> */
    J_DONE,         /* the value is whole: only the end */
    J_FAIL,
};
enum { LK_VALUE, LK_KEY, LK_FUNC, LK_CALL };   /* a literal: a value, a declared key, a function's "NAME{", "call:" */
enum { LIT_TRUE, LIT_FALSE, LIT_NULL, LIT_CALL, LIT_NONE };   /* every schema's first literals */

/* ---- schemas ------------------------------------------------------------------------------- */

bool json_grow(void **p, int n, size_t size) {
    if (n < 0 || n > INT32_MAX / 2) return false;
    if (n > 0 && (n < 8 || (n & (n - 1)))) return true;
    void *q = realloc(*p, size * (size_t)(n ? 2 * n : 8));
    if (!q) return false;
    *p = q;
    return true;
}

int json_schema_add_node(json_schema *js, json_node n) {
    if (js->n_nodes == JSON_NODES_MAX || !json_grow((void **)&js->nodes, js->n_nodes, sizeof *js->nodes)) return -1;
    if (!n.obj) n.obj = js->n_nodes;   /* (0: its own structure) */
    if (!n.arr) n.arr = js->n_nodes;
    js->nodes[js->n_nodes] = n;
    return js->n_nodes++;
}

/* The node of item i of an array of structure node a */
static int item_node(const json_schema *js, const json_node *a, int i) {
    return i < a->n_prefix ? js->prefix[a->prefix + i] : a->items;
}

/* The least nesting an array of structure node a needs to be whole, its items' need[] as given:
 * 1, and 1 + its required items' most */
static int arr_need(const json_schema *js, const json_node *a, const int *need, int inf) {
    int v = 1;
    const int n = a->bounds & JB_ITEMS ? CLI_MIN(a->min_items, a->n_prefix + 1) : 0;   /* (past the prefix: all alike) */
    for (int i = 0; i < n; i++) v = CLI_MAX(v, CLI_MIN(1 + need[item_node(js, a, i)], inf));
    return v;
}

/* The least nesting a value of each node needs to be whole, and an object of its structure
 * (1 << 20: never), to a fixed point (a property that holds its own object recurses) */
bool json_schema_finish(json_schema *js) {
    const int n = js->n_nodes, inf = 1 << 20;
    int *need = malloc(sizeof *need * 2 * (size_t)n);
    if (!need) return false;
    for (int i = 0; i < 2 * n; i++) need[i] = inf;
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < n; i++) {
            const json_node *d = &js->nodes[i];
            int obj = 1;   /* an object of node i's structure: 1 + its required properties' most */
            for (int p = 0; p < d->n_props; p++)
                if (js->props[d->props + p].required) obj = CLI_MAX(obj, 1 + need[js->props[d->props + p].node]);
            if (d->n_props < 0 && d->bounds & JB_PROPS && d->min_props) obj = CLI_MAX(obj, 1 + need[d->add]);   /* (a map's) */
            obj = CLI_MIN(obj, inf);
            int val = d->n_lits || (d->types & ~(JT_OBJ | JT_ARR)) ? 0 : inf;
            const json_node *a = &js->nodes[d->arr];   /* (an array of at least one item: 1 + the item's) */
            if (d->types & JT_ARR) val = CLI_MIN(val, arr_need(js, a, need, inf));
            if (d->types & JT_OBJ) val = CLI_MIN(val, d->obj == i ? obj : need[n + d->obj]);
            if (val < need[i] || obj < need[n + i]) { need[i] = CLI_MIN(need[i], val); need[n + i] = CLI_MIN(need[n + i], obj); changed = true; }
        }
    }
    free(js->need);
    js->need = need;
    return true;
}

int json_schema_add_lit(json_schema *js, const char *text) {
    char *t = strdup(text);
    if (!t || !json_grow((void **)&js->lits, js->n_lits, sizeof *js->lits)) { free(t); return -1; }
    js->lits[js->n_lits] = t;
    return js->n_lits++;
}

bool json_schema_add_prop(json_schema *js, int obj, const char *key_json, int node, bool required) {
    json_node *o = &js->nodes[obj];
    if (o->n_props < 0) { o->n_props = 0; o->props = js->n_props; }
    if (!key_json) return false;
    if (o->props + o->n_props != js->n_props || o->n_props == JSON_LITS_MAX) return false;   /* (one object at a time) */
    const int k = json_schema_add_lit(js, key_json);   /* (an object's keys are consecutive literals) */
    if (k < 0 || (o->n_props && k != js->keys[o->props] + o->n_props) || !json_grow((void **)&js->props, js->n_props, sizeof *js->props) ||
        !json_grow((void **)&js->keys, js->n_props, sizeof *js->keys))
        return false;
    js->props[js->n_props] = (json_prop){node, required};
    js->keys[js->n_props++] = k;
    js->nodes[obj].n_props++;
    return true;
}

json_schema *json_schema_object(void) {
    json_schema *js = calloc(1, sizeof *js);
    if (!js) return NULL;
    const json_node any = {.types = JT_ANY, .items = 0, .add = 0, .n_props = -1}, obj = {.types = JT_OBJ, .add = 0, .n_props = -1};
    if (json_schema_add_lit(js, "true") != LIT_TRUE || json_schema_add_lit(js, "false") != LIT_FALSE ||
        json_schema_add_lit(js, "null") != LIT_NULL || json_schema_add_lit(js, "call:") != LIT_CALL ||
        json_schema_add_lit(js, "None") != LIT_NONE || json_schema_add_node(js, any) != 0 || json_schema_add_node(js, obj) != 1) {
        json_schema_free(js);
        return NULL;
    }
    js->root = 1;
    if (!json_schema_finish(js)) { json_schema_free(js); return NULL; }
    return js;
}

json_schema *json_schema_calls(int calls, bool one_call) {
    json_schema *js = json_schema_object();
    if (!js) return NULL;
    js->g4 = true;
    js->calls = calls;
    js->one_call = one_call;
    return js;
}

bool json_schema_add_func(json_schema *js, const char *name, int args) {
    char lit[160];
    if (js->n_funcs == JSON_LITS_MAX || snprintf(lit, sizeof lit, "%s{", name) >= (int)sizeof lit) return false;
    const int k = json_schema_add_lit(js, lit);   /* (the functions' literals are consecutive) */
    if (k < 0 || (js->n_funcs && k != js->func_lits + js->n_funcs) || !json_grow((void **)&js->func_nodes, js->n_funcs, sizeof(int)))
        return false;
    if (!js->n_funcs) js->func_lits = k;
    js->func_nodes[js->n_funcs++] = args;
    return true;
}

bool json_schema_add_prefix(json_schema *js, int arr, const int *nodes, int n) {
    js->nodes[arr].prefix = js->n_prefix;
    js->nodes[arr].n_prefix = n;
    for (int i = 0; i < n; i++) {
        if (!json_grow((void **)&js->prefix, js->n_prefix, sizeof *js->prefix)) return false;
        js->prefix[js->n_prefix++] = nodes[i];
    }
    return true;
}

int json_schema_add_pattern(json_schema *js, json_pattern *p) {
    if (!json_grow((void **)&js->pats, js->n_pats, sizeof(json_pattern *))) { json_pattern_free(p); return 0; }
    js->pats[js->n_pats] = p;
    return ++js->n_pats;
}

void json_schema_free(json_schema *js) {
    if (!js) return;
    for (int i = 0; i < js->n_pats; i++) json_pattern_free(js->pats[i]);
    free(js->pats);
    free(js->need);
    free(js->func_nodes);
    for (int i = 0; i < js->n_lits; i++) free(js->lits[i]);
    free(js->lits);
    free(js->nodes);
    free(js->props);
    free(js->keys);
    free(js->prefix);
    free(js);
}

/* ---- the automaton ------------------------------------------------------------------------- */

static bool lits_start(json_state *s, int base, uint64_t mask, int kind);

static uint64_t all_of(int n) { return n >= 64 ? ~0ull : (1ull << n) - 1; }

/* A call's arguments: function f's object (its structure's node: a $ref's target) */
static void args_start(json_state *s, int f) {
    s->stack[s->depth++] = (json_frame){(short)s->js->nodes[s->js->func_nodes[f]].obj, 0, '{', 0};
    s->mode = J_KEY_FIRST;
}

void json_state_init(json_state *s, const json_schema *js) {
    memset(s, 0, sizeof *s);
    s->js = js;
    s->mode = J_VALUE;
    s->vnode = js->root;
    s->done_lit = -1;
    if (!js->g4) return;
    if (js->calls == JSON_CALLS_AUTO) s->mode = J_G4_IDLE;
    else if (js->calls == JSON_CALLS_REQUIRED) lits_start(s, js->func_lits, all_of(js->n_funcs), LK_FUNC);
    else if (js->calls >= 0 && js->calls < js->n_funcs) args_start(s, js->calls);
    else s->mode = J_FAIL;
}

static bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static const json_node *node(const json_state *s, int i) { return &s->js->nodes[i]; }

/* The least nesting a value of node i needs to be whole; an object of its structure */
static int need_val(const json_state *s, int i) { return s->js->need ? s->js->need[i] : 0; }
static int need_obj(const json_state *s, int i) { return s->js->need ? s->js->need[s->js->n_nodes + i] : 1; }
static bool fits(const json_state *s, int i) { return s->depth + need_val(s, i) <= JSON_DEPTH_MAX; }
/* An array of structure node a: the least nesting it needs to be whole */
static int need_arr(const json_state *s, int a) {
    return s->js->need ? arr_need(s->js, node(s, a), s->js->need, 1 << 20) : 1;
}
static json_frame *top(json_state *s) { return &s->stack[s->depth - 1]; }

/* The frame of the unique array whose items are node vn's values, if the top frame is one */
static json_frame *unique_of(json_state *s, int vn) {
    if (!s->depth || top(s)->kind != '[') return NULL;
    const json_node *a = node(s, top(s)->node);
    return a->unique && a->items == vn ? top(s) : NULL;
}
/* The literals a value of node vn may be (mask over lits[base ..]): in a unique array, those not
 * yet taken */
static uint64_t unused(json_state *s, int vn, uint64_t mask) {
    const json_frame *f = unique_of(s, vn);
    return f ? mask & ~f->used : mask;
}

/* A value has ended: the container's next, or the end (g4: of the call's arguments) */
static void value_end(json_state *s) {
    s->mode = s->depth ? J_AFTER : s->js->g4 ? J_G4_END : J_DONE;
    s->done_lit = -1;
    s->n = s->len = s->u8 = s->cu = 0;   /* (a string's or a number's counts, gone: states that are alike compare equal) */
    s->hs = false;
    memset(&s->ps, 0, sizeof s->ps);
    s->iv = s->fv = 0;
    s->neg = false;
}

/* The first required property of object frame f at or after its next one (n_props: none) */
static int next_required(const json_state *s, const json_frame *f) {
    const json_node *o = node(s, f->node);
    int i = f->idx;
    while (i < o->n_props && !s->js->props[o->props + i].required) i++;
    return i;
}

/* Literal matching over lits[base + i], i in mask: the first byte c (pos 0) */
static bool lits_start(json_state *s, int base, uint64_t mask, int kind) {
    s->lit_base = base;
    s->cand = mask;
    s->pos = 0;
    s->lit_kind = kind;
    s->done_lit = -1;
    s->mode = J_LITS;
    return true;   /* (the first byte through lits_step) */
}

static bool lits_step(json_state *s, unsigned char c);

static __int128 pow10_(int j) {
    __int128 p = 1;
    while (j-- > 0) p *= 10;
    return p;
}

bool json_holds_multiple(__int128 lo, __int128 hi, __int128 m) {
    if (lo > hi || !m) return lo <= hi;
    const __int128 q = lo >= 0 ? (lo + m - 1) / m : -(-lo / m);   /* (the least multiple at or above lo, over m) */
    return q * m <= hi;
}

/* A bounded number (its node's JB_RANGE): whether some number its text so far can still become
 * (JSON_DIGITS digits at most before the point and after it, no exponent) lies in the node's
 * range, and is a multiple of its mult (then an integer); whole: whether its value does. Exact:
 * JSON_UNITs in 128-bit integers. */
static bool num_ok(const json_state *s, bool whole) {
    const json_node *nd = node(s, s->vnode);
    if (!(nd->bounds & JB_RANGE)) return true;
    const __int128 lo = s->neg ? -nd->hi : nd->lo, hi = s->neg ? -nd->lo : nd->hi;   /* (the magnitude's range) */
    const __int128 mu = nd->mult * JSON_UNIT;
    const int m = s->mode;
    if (m == J_MINUS) return !whole && json_holds_multiple(lo > 0 ? lo : 0, hi, mu);   /* (any magnitude to come) */
    if (m == J_DOT || m == J_FRAC) {   /* [a, a + span): the fraction's digits so far, then any */
        const __int128 span = pow10_(JSON_DIGITS - (m == J_FRAC ? s->n : 0)), a = s->iv * JSON_UNIT + s->fv * span;
        return whole ? m == J_FRAC && a >= lo && a <= hi : a <= hi && a + span - 1 >= lo;
    }
    __int128 a = s->iv * JSON_UNIT, span = JSON_UNIT;   /* J_ZERO, J_INT: the integer part so far, then j digits more */
    if (whole) return json_holds_multiple(a > lo ? a : lo, a < hi ? a : hi, mu);
    for (int j = 0; j <= (m == J_ZERO ? 0 : JSON_DIGITS - s->n) && a <= hi; j++, a *= 10, span *= 10)
        if (json_holds_multiple(a > lo ? a : lo, a + span - 1 < hi ? a + span - 1 : hi, mu)) return true;
    return false;
}

/* One more character of a bounded string (its node's JB_LEN): false past maxLength; without one,
 * counted up to minLength only (so that a long string's states repeat, and their masks) */
static bool str_char(json_state *s) {
    const json_node *n = node(s, s->vnode);
    if (!(n->bounds & JB_LEN)) return true;   /* (a key's node: its object's key node) */
    if (n->max_len >= 0 && s->len >= n->max_len) return false;
    if (n->max_len >= 0 || s->len < n->min_len) s->len++;
    return true;
}
/* Room for one more character (a surrogate pair's low half needs none: the pair is one) */
static bool str_room(const json_state *s) {
    const json_node *n = node(s, s->vnode);
    return !(n->bounds & JB_LEN) || n->max_len < 0 || s->len < n->max_len;
}
/* A string value's pattern (or format's), if it has one */
static const json_pattern *pattern(const json_state *s) {
    const json_node *n = node(s, s->vnode);
    return n->pattern ? s->js->pats[n->pattern - 1] : NULL;
}

/* A character of a string with a pattern: one of [lo, hi] (lo == hi: that one, taken), counted (or,
 * extra 1, not yet); whether the pattern takes it, with a match within the string's lengths after it */
static bool pat_char(json_state *s, uint32_t lo, uint32_t hi, int extra) {
    const json_pattern *p = pattern(s);
    if (!p) return true;
    const json_node *n = node(s, s->vnode);
    const bool b = n->bounds & JB_LEN;
    const int len_lo = b ? CLI_MAX(0, n->min_len - s->len - extra) : 0, len_hi = b && n->max_len >= 0 ? n->max_len - s->len - extra : -1;
    if (b && n->max_len >= 0 && len_hi < 0) return false;
    return lo == hi ? json_pattern_step(p, &s->ps, &s->ps_hint, lo, len_lo, len_hi)
                    : json_pattern_can_take(p, &s->ps, &s->ps_hint, lo, hi, len_lo, len_hi);
}

static bool str_closes(const json_state *s) {
    const json_node *n = node(s, s->vnode);
    const json_pattern *p = pattern(s);
    return !s->u8 && (!(n->bounds & JB_LEN) || s->len >= n->min_len) && (!p || json_pattern_can_end(p, &s->ps, 0, 0));
}

/* Byte c as UTF-8 (JSON's encoding): 1 where it begins a character, 0 where it continues one as
 * that character needs (no overlong form, surrogate or code point past U+10FFFF), -1 otherwise */
static int utf8_step(json_state *s, unsigned char c) {
    if (s->u8) {
        if (c < s->u8lo || c > s->u8hi) return -1;
        s->u8--;
        s->u8lo = 0x80;
        s->u8hi = 0xBF;
        return 0;
    }
    if (c >= 0x80 && (c < 0xC2 || c > 0xF4)) return -1;
    if (c >= 0x80) {
        s->u8 = c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
        s->u8lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
        s->u8hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    }
    return 1;
}

/* Byte c of a string or g4 key: UTF-8 (the reply's text would have U+FFFD for each stray byte),
 * each character counted */
static bool str_byte(json_state *s, unsigned char c) {
    static const uint32_t least[4] = {0, 0x80, 0x800, 0x10000};   /* (a character of 1 + u8 bytes, at its first) */
    const int k = utf8_step(s, c);
    s->hs = false;
    if (k < 0 || (k == 1 && !str_char(s))) return false;
    if (!pattern(s)) return true;
    s->cp = k == 1 ? (c < 0x80 ? c : c & (0x3Fu >> s->u8)) : s->cp << 6 | (c & 0x3F);   /* (the character's bits so far) */
    const int sh = 6 * s->u8;
    const uint32_t lo = CLI_MAX(s->cp << sh, least[s->u8]), hi = CLI_MIN(s->cp << sh | ((1u << sh) - 1), 0x10FFFFu);
    const bool ok = pat_char(s, lo, hi, 0);
    if (!s->u8) s->cp = 0;
    return ok;
}

/* The start of a value of node vn at c (false: none starts there) */
static bool value_start(json_state *s, int vn, unsigned char c) {
    const json_node *n = node(s, vn);
    if (n->n_lits) return lits_start(s, n->lits, unused(s, vn, all_of(n->n_lits)), LK_VALUE) && lits_step(s, c);   /* an enum, a const */
    const bool g4 = s->js->g4;
    s->integer = false;
    switch (c) {
    case '{': case '[': {   /* (a frame of its structure's node; an object whose required values nest too deep: none) */
        const int st = c == '{' ? n->obj : n->arr;
        if (!(n->types & (c == '{' ? JT_OBJ : JT_ARR)) || s->depth + (c == '{' ? need_obj(s, st) : need_arr(s, st)) > JSON_DEPTH_MAX)
            return false;
        s->stack[s->depth++] = (json_frame){(short)st, 0, (char)c, 0};
        s->mode = c == '{' ? J_KEY_FIRST : J_ARR_FIRST;
        s->vnode = c == '{' ? node(s, st)->items : item_node(s->js, node(s, st), 0);
        return true;
    }
    case '"': case JSON_G4_QUOTE:
        if (!(n->types & JT_STR) || c != (g4 ? JSON_G4_QUOTE : '"')) return false;
        s->key = false;
        s->mode = J_STRING;
        s->n = 0;
        if (n->pattern) json_pattern_start(&s->ps), s->ps_hint = -1;
        return true;
    case 't': case 'f':
        return (n->types & JT_BOOL) && lits_start(s, LIT_TRUE, unused(s, vn, 3), LK_VALUE) && lits_step(s, c);
    case 'n': case 'N':   /* (g4: the template writes None) */
        return (n->types & JT_NULL) && (c == 'n' || g4) && lits_start(s, c == 'n' ? LIT_NULL : LIT_NONE, 1, LK_VALUE) &&
               lits_step(s, c);
    default:
        if (!(n->types & (JT_NUM | JT_INT)) || !(c == '-' || (c >= '0' && c <= '9'))) return false;
        s->integer = !(n->types & JT_NUM) || n->mult;
        s->mode = c == '-' ? J_MINUS : c == '0' ? J_ZERO : J_INT;
        s->n = s->mode == J_INT;   /* (the digits of the part being read) */
        if (!(n->bounds & JB_RANGE)) return true;
        s->neg = c == '-';
        s->iv = s->mode == J_INT ? c - '0' : 0;
        return num_ok(s, false);
    }
}

static bool close_container(json_state *s) {
    s->depth--;
    value_end(s);
    return true;
}

/* After a value in the top container: ',' or its close */
static bool after_value(json_state *s, unsigned char c) {
    json_frame *f = top(s);
    const json_node *n = node(s, f->kind == '{' ? f->node : 0);
    if (f->kind == '[') {   /* (bounded: idx + 1 items read; idx counts to maxItems, else to minItems and the prefix) */
        const json_node *a = node(s, f->node);
        const bool counted = a->bounds & JB_ITEMS;
        const int next = item_node(s->js, a, f->idx + 1);
        if (c == ']') return (!counted || f->idx + 1 >= a->min_items) && close_container(s);
        if (c != ',' || !fits(s, next) || (counted && a->max_items >= 0 && f->idx + 1 >= a->max_items)) return false;
        if (a->unique) {   /* (unique items: one not yet taken must be left) */
            const json_node *it = node(s, a->items);
            if (!unused(s, a->items, it->n_lits ? all_of(it->n_lits) : 3)) return false;
        }
        if (counted && (a->max_items >= 0 || f->idx < a->min_items || f->idx < a->n_prefix)) f->idx++;
        s->vnode = next;
        s->mode = J_VALUE;
        return true;
    }
    const bool declared = n->n_props >= 0, counted = !declared && n->bounds & JB_PROPS;   /* (a map's: as an array's items) */
    if (c == '}') return (declared ? next_required(s, f) == n->n_props : !counted || f->idx + 1 >= n->min_props) && close_container(s);
    if (c != ',' || (declared && f->idx >= n->n_props) || (counted && n->max_props >= 0 && f->idx + 1 >= n->max_props)) return false;
    if (counted && (n->max_props >= 0 || f->idx < n->min_props)) f->idx++;
    s->mode = J_KEY;
    return true;
}

/* A byte of a g4 bare key */
static bool key_char(unsigned char c) { return c > ' ' && !strchr(":,{}[]", c); }

static bool g4_text(json_state *s, unsigned char c);

/* A key's first byte c in object frame f (a declared object's: one of the properties it may have next) */
static bool key_start(json_state *s, unsigned char c) {
    json_frame *f = top(s);
    const json_node *n = node(s, f->node);
    const bool g4 = s->js->g4;
    if (n->n_props < 0) {
        if ((g4 ? !key_char(c) : c != '"') || !fits(s, n->add) || (n->bounds & JB_PROPS && !n->max_props)) return false;
        s->key = true;
        s->mode = g4 ? J_BKEY : J_STRING;
        s->n = s->len = 0;
        s->vnode = n->key;   /* (a string node: the key's lengths and pattern) */
        if (pattern(s)) json_pattern_start(&s->ps), s->ps_hint = -1;
        return !g4 || (g4_text(s, c) && str_byte(s, c));   /* (a bare key's first byte is its text) */
    }
    const int last = CLI_MIN(next_required(s, f), n->n_props - 1);   /* up to the next required one */
    if (f->idx > last) return false;
    uint64_t mask = 0;   /* (those whose values fit the nesting left) */
    for (int i = f->idx; i <= last; i++) mask |= (uint64_t)fits(s, s->js->props[n->props + i].node) << i;
    if (!mask) return false;
    return lits_start(s, s->js->keys[n->props], mask, LK_KEY) && lits_step(s, c);
}

/* A literal matched whole: a key (its property next; a g4 key holds its ':'), a function's name
 * (its arguments next), "call:" (a name next) or a value */
static void lit_end(json_state *s, int i) {
    s->done_lit = -1;
    if (s->lit_kind == LK_KEY) {
        json_frame *f = top(s);
        f->idx = (short)(i + 1);
        s->prop = node(s, f->node)->props + i;
        s->mode = J_COLON;
        if (s->js->g4) {
            s->vnode = s->js->props[s->prop].node;
            s->mode = J_VALUE;
        }
    } else if (s->lit_kind == LK_FUNC) args_start(s, i);
    else if (s->lit_kind == LK_CALL) lits_start(s, s->js->func_lits, all_of(s->js->n_funcs), LK_FUNC);
    else {
        json_frame *f = unique_of(s, s->vnode);   /* (an enum's values are told apart: the compiler keeps each text once) */
        if (f) f->used |= 1ull << i;
        value_end(s);
    }
}

static bool step(json_state *s, unsigned char c);

static bool ranged(const json_state *s) { return node(s, s->vnode)->bounds & JB_RANGE; }

static bool lits_step(json_state *s, unsigned char c) {
    char *const *lits = s->js->lits + s->lit_base;
    uint64_t next = 0;
    int whole = -1, live = 0;
    for (int i = 0; i < 64; i++) {
        if (!(s->cand >> i & 1) || !lits[i][s->pos] || (unsigned char)lits[i][s->pos] != c) continue;   /* (a whole one ends) */
        next |= 1ull << i;
        live++;
        if (!lits[i][s->pos + 1]) whole = i;
    }
    if (!next) {   /* a literal that ended before c (one a prefix of another, or given twice): c follows it */
        if (s->done_lit < 0) return false;
        lit_end(s, s->done_lit);
        return step(s, c);
    }
    s->cand = next;
    s->pos++;
    if (whole >= 0 && live == 1) lit_end(s, whole);
    else s->done_lit = whole;   /* (whole, but others go on: decided by the next byte) */
    return true;
}

/* g4: byte c of a string or bare key, whose text must not spell <|"|> (the call parser would read
 * it as the quote token): n counts the bytes of it matched so far */
static bool g4_text(json_state *s, unsigned char c) {
    static const char quote[] = "<|\"|>";
    s->n = c == (unsigned char)quote[s->n] ? s->n + 1 : c == '<';
    return s->n < (int)sizeof quote - 1;
}

static bool number_end(json_state *s, unsigned char c) {
    if (!num_ok(s, true)) return false;
    value_end(s);
    return s->mode != J_DONE && step(s, c);   /* (a root number: nothing may follow it) */
}

/* One byte; false (and the state J_FAIL) where the schema's JSON cannot go on with it */
static bool step(json_state *s, unsigned char c) {
    const int m = s->mode;
    const bool g4 = s->js->g4;
    if (is_ws(c) && (m <= J_AFTER || m == J_DONE) && !g4) {   /* between tokens (none after the value: the end must come) */
        const bool nl = c == '\n';
        if (m == J_DONE || c == '\r' || (nl ? s->nl++ : s->ws++) >= (nl ? 1 : JSON_WS_MAX)) { s->mode = J_FAIL; return false; }
        return true;
    }
    if (m <= J_AFTER) s->ws = s->nl = 0;
    bool ok = true;
    switch (m) {
    case J_VALUE: ok = value_start(s, s->vnode, c); break;
    case J_ARR_FIRST: {
        const json_node *a = node(s, top(s)->node);
        const bool counted = a->bounds & JB_ITEMS;
        ok = c == ']' ? (!counted || !a->min_items) && close_container(s) : (!counted || a->max_items) && value_start(s, s->vnode, c);
        break;
    }
    case J_KEY_FIRST:
        if (c == '}') {
            const json_frame *f = top(s);
            const json_node *n = node(s, f->node);
            ok = next_required(s, f) == CLI_MAX(n->n_props, 0) && (n->n_props >= 0 || !(n->bounds & JB_PROPS) || !n->min_props) &&
                 close_container(s);
        } else ok = key_start(s, c);
        break;
    case J_KEY: ok = key_start(s, c); break;
    case J_COLON:
        if (c == ':') {
            const json_node *n = node(s, top(s)->node);
            s->vnode = n->n_props >= 0 ? s->js->props[s->prop].node : n->add;
            s->mode = J_VALUE;
        } else ok = false;
        break;
    case J_AFTER: ok = after_value(s, c); break;
    case J_STRING:
        if (g4) {   /* (no escapes: anything but the quote token; the other two never come from text) */
            if (c == JSON_G4_QUOTE) ok = str_closes(s) && (value_end(s), true);
            else ok = c != JSON_G4_CLOSE && c != JSON_G4_OPEN && g4_text(s, c) && str_byte(s, c);
        } else if (s->u8) ok = str_byte(s, c);
        else if (c == '"') {
            ok = str_closes(s);
            if (ok && s->key) s->mode = J_COLON, s->len = 0;
            else if (ok) value_end(s);
        } else if (c == '\\') {   /* (an escape is one character, counted whole) */
            s->mode = J_ESC;
            ok = (str_room(s) || s->hs) && pat_char(s, 0, 0xFFFF, 1);
        }
        else ok = c >= 0x20 && str_byte(s, c);
        break;
    case J_ESC:
        if (c == 'u') { s->mode = J_HEX; s->n = 4; s->cu = 0; }
        else if (strchr("\"\\/bfnrt", c) && c) {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const uint32_t e = (unsigned char)to[strchr(from, c) - from];   /* (the character it stands for) */
            s->mode = J_STRING;
            s->hs = false;
            ok = str_char(s) && pat_char(s, e, e, 0);
        } else ok = false;
        break;
    case J_HEX: {   /* (a low surrogate after a high one: one character with it, so room or not) */
        const int d = json_hex_digit(c);
        s->cu = (uint16_t)(s->cu << 4 | (d & 15));
        const int shift = 4 * --s->n, lo = s->cu << shift, hi = lo + (1 << shift) - 1;   /* (the code units it can become) */
        const bool low = s->hs && hi >= 0xDC00 && lo <= 0xDFFF;
        if (d < 0 || !(low || str_room(s))) ok = false;
        else if (s->n) ok = low || pat_char(s, (uint32_t)lo, (uint32_t)hi, 1);
        else {
            s->mode = J_STRING;
            ok = low || (str_char(s) && pat_char(s, s->cu, s->cu, 0));
            s->hs = !low && s->cu >= 0xD800 && s->cu <= 0xDBFF;
            s->cu = 0;
        }
        break;
    }
    case J_MINUS:
        if (c == '0') s->mode = J_ZERO;
        else if (c >= '1' && c <= '9') s->mode = J_INT, s->n = 1;
        else ok = false;
        if (ok && ranged(s)) s->iv = c - '0', ok = num_ok(s, false);
        break;
    case J_ZERO: case J_INT: case J_FRAC: case J_EXP:   /* (digits bounded as llama.cpp's JSON grammar bounds them) */
        if (c >= '0' && c <= '9' && m != J_ZERO) {
            ok = ++s->n <= (m == J_EXP ? JSON_EXP_DIGITS : JSON_DIGITS);
            if (ok && ranged(s)) {
                if (m == J_INT) s->iv = 10 * s->iv + (c - '0');
                else s->fv = 10 * s->fv + (c - '0');
                ok = num_ok(s, false);
            }
            break;
        }
        if (c == '.' && m <= J_INT && !s->integer) { s->mode = J_DOT; ok = num_ok(s, false); }
        else if ((c == 'e' || c == 'E') && m != J_EXP && !s->integer && !ranged(s)) s->mode = J_E;
        else ok = number_end(s, c);
        break;
    case J_DOT: case J_ESIGN:
        if (c >= '0' && c <= '9') s->mode = m == J_DOT ? J_FRAC : J_EXP, s->n = 1;
        else ok = false;
        if (ok && m == J_DOT && ranged(s)) s->fv = c - '0', ok = num_ok(s, false);
        break;
    case J_E:
        if (c == '+' || c == '-') s->mode = J_ESIGN;
        else if (c >= '0' && c <= '9') s->mode = J_EXP, s->n = 1;
        else ok = false;
        break;
    case J_LITS: ok = lits_step(s, c); break;
    case J_BKEY:
        if (c == ':' && str_closes(s)) {
            s->vnode = node(s, top(s)->node)->add;
            s->len = 0;
            s->mode = J_VALUE;
            s->n = 0;
        } else ok = key_char(c) && g4_text(s, c) && str_byte(s, c);
        break;
    case J_G4_END:
        if (c == JSON_G4_CLOSE) s->mode = J_G4_NEXT;   /* (auto too: once a call began, calls until the end) */
        else ok = false;
        break;
    case J_G4_NEXT:
        ok = c == JSON_G4_OPEN && !s->js->one_call && lits_start(s, LIT_CALL, 1, LK_CALL);
        break;
    case J_G4_IDLE:
        if (c == JSON_G4_OPEN) lits_start(s, LIT_CALL, 1, LK_CALL);
        break;
    default: ok = false;
    }
    if (!ok) s->mode = J_FAIL;
    return ok;
}

bool json_state_feed(json_state *s, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!step(s, (unsigned char)p[i])) return false;
    return true;
}

bool json_state_done(const json_state *s) {
    const int m = s->mode;
    return m == J_DONE || m == J_G4_NEXT || m == J_G4_IDLE ||
           (s->depth == 0 && ((m == J_LITS && s->done_lit >= 0) || ((m == J_ZERO || m == J_INT || m == J_FRAC || m == J_EXP) && num_ok(s, true))));
}

/* ---- the vocabulary ----------------------------------------------------------------------------- */

struct json_vocab {
    const hachi_model *m;
    int32_t n;
    uint32_t *off;          /* [n + 1] token t's text: bytes[off[t], off[t + 1]) */
    char *bytes;
    uint8_t *kind;          /* [n] JV_* */
    uint16_t *chars;        /* [n] a plain token's characters (its bytes that begin one) */
    int32_t n_text, max_len, n_ends;
    int32_t *ends;          /* [n_ends] the end-of-generation tokens */
    struct vocab_text { int32_t t; uint16_t shared, len; } *text;   /* [n_text] the tokens with text (plain or
                               not) in their texts' byte order: each shares its first bytes with the last */
    char *tails;            /* their bytes past those, one after another (the mask's walk reads them in turn) */
};
enum { JV_TEXT = 0, JV_PLAIN = 1, JV_END = 2, JV_NONE = 3 };   /* plain: string content whole; end: end of generation */

/* A text's place in the order: its first 8 bytes (zeros past its end) first, the rest on a tie */
typedef struct { uint64_t head; int32_t t; } text_key;

static int text_cmp(const void *a, const void *b, void *ctx) {
    const json_vocab *v = ctx;
    const text_key *p = a, *q = b;
    if (p->head != q->head) return p->head < q->head ? -1 : 1;
    const int32_t x = p->t, y = q->t;
    const uint32_t nx = v->off[x + 1] - v->off[x], ny = v->off[y + 1] - v->off[y];
    const int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], CLI_MIN(nx, ny));
    return c ? c : nx != ny ? (nx < ny ? -1 : 1) : (x > y) - (x < y);
}

/* a[0 .. n_text) in their texts' order: by head, a byte a pass (least significant first, each pass
 * stable), then each run of one head by the whole texts */
static bool sort_texts(const json_vocab *v, text_key *a) {
    const size_t n = (size_t)v->n_text;
    text_key *tmp = malloc(sizeof *tmp * CLI_MAX(n, 1)), *src = a, *dst = tmp;
    if (!tmp) return false;
    for (int shift = 0; shift < 64; shift += 8) {
        size_t at[257] = {0};
        for (size_t i = 0; i < n; i++) at[(src[i].head >> shift & 255) + 1]++;
        for (int b = 0; b < 256; b++) at[b + 1] += at[b];
        for (size_t i = 0; i < n; i++) dst[at[src[i].head >> shift & 255]++] = src[i];
        text_key *const x = src;
        src = dst, dst = x;
    }
    for (size_t i = 0, j; i < n; i = j) {   /* (8 passes: back in a) */
        for (j = i + 1; j < n && a[j].head == a[i].head; j++) {}
        if (j - i > 1) qsort_r(a + i, j - i, sizeof *a, text_cmp, (void *)v);
    }
    free(tmp);
    return true;
}

/* The tokens with text, sorted, as a trie's walk meets them */
static bool vocab_order(json_vocab *v) {
    v->n_text = v->max_len = v->n_ends = 0;
    for (int32_t t = 0; t < v->n; t++) v->n_text += v->kind[t] <= JV_PLAIN, v->n_ends += v->kind[t] == JV_END;
    if (!(v->ends = malloc(sizeof *v->ends * (size_t)CLI_MAX(v->n_ends, 1)))) return false;
    for (int32_t t = 0, i = 0; t < v->n; t++)
        if (v->kind[t] == JV_END) v->ends[i++] = t;
    text_key *order = malloc(sizeof *order * (size_t)CLI_MAX(v->n_text, 1));
    v->text = malloc(sizeof *v->text * (size_t)CLI_MAX(v->n_text, 1));
    v->tails = malloc(CLI_MAX(v->off[v->n], 1));
    if (!order || !v->text || !v->tails) { free(order); return false; }
    for (int32_t t = 0, i = 0; t < v->n; t++) {
        if (v->kind[t] > JV_PLAIN) continue;
        uint64_t head = 0;
        for (uint32_t j = 0; j < 8; j++)
            head = head << 8 | (v->off[t] + j < v->off[t + 1] ? (unsigned char)v->bytes[v->off[t] + j] : 0);
        order[i++] = (text_key){head, t};
    }
    if (!sort_texts(v, order)) { free(order); return false; }
    size_t n_tails = 0;
    for (int32_t i = 0; i < v->n_text; i++) {
        const int32_t t = order[i].t, len = (int32_t)(v->off[t + 1] - v->off[t]);
        int32_t k = 0;
        if (i > 0) {   /* (the heads' first difference, within the shorter text; past 8 bytes, the texts') */
            const int32_t u = order[i - 1].t, n = CLI_MIN(len, v->text[i - 1].len);
            const uint64_t x = order[i].head ^ order[i - 1].head;
            k = CLI_MIN(x ? __builtin_clzll(x) / 8 : 8, n);
            while (k < n && v->bytes[v->off[t] + k] == v->bytes[v->off[u] + k]) k++;
        }
        v->text[i] = (struct vocab_text){t, (uint16_t)k, (uint16_t)len};   /* (a text is at most 1023 bytes) */
        memcpy(v->tails + n_tails, v->bytes + v->off[t] + k, (size_t)(len - k));
        n_tails += (size_t)(len - k);
        v->max_len = CLI_MAX(v->max_len, len);
    }
    free(order);
    return true;
}

json_vocab *json_vocab_create(const hachi_model *m, bool g4) {
    static const char *const g4_marks[3] = {"<|\"|>", "<tool_call|>", "<|tool_call>"};   /* JSON_G4_QUOTE .. _OPEN */
    int found = 0;
    json_vocab *v = calloc(1, sizeof *v);
    const int32_t n = hachi_model_n_vocab(m);
    if (!v) return NULL;
    v->m = m;
    v->n = n;
    v->off = malloc(sizeof *v->off * ((size_t)n + 1));
    v->kind = malloc((size_t)n);
    v->chars = malloc(sizeof *v->chars * (size_t)n);
    size_t total = 0, cap = (size_t)n * 8 + 1024;
    v->bytes = malloc(cap);
    if (!v->off || !v->kind || !v->chars || !v->bytes) { json_vocab_free(v); return NULL; }
    for (int32_t t = 0; t < n; t++) {
        char piece[1024];
        bool control = hachi_token_is_control(m, t), mark = false;
        int32_t k = CLI_MAX(0, CLI_MIN(hachi_token_to_text(m, t, piece, sizeof piece), (int32_t)sizeof piece));
        for (int i = 0; i < 3 && g4 && control; i++)
            if (k == (int32_t)strlen(g4_marks[i]) && !memcmp(piece, g4_marks[i], (size_t)k)) {   /* as its byte */
                piece[0] = (char)(JSON_G4_QUOTE + i);
                k = 1;
                control = false;
                mark = true;
                found |= 1 << i;
            }
        if (control) k = 0;
        for (int32_t j = 0; j < k && g4 && !mark; j++)   /* (text holding those bytes: never in a call) */
            if (piece[j] >= JSON_G4_QUOTE && piece[j] <= JSON_G4_OPEN) control = true, k = 0;
        if (total + (size_t)k > cap) {
            char *b = realloc(v->bytes, cap = 2 * (total + (size_t)k));
            if (!b) { json_vocab_free(v); return NULL; }
            v->bytes = b;
        }
        v->off[t] = (uint32_t)total;
        memcpy(v->bytes + total, piece, (size_t)k);
        total += (size_t)k;
        json_state u = {.u8 = 0};   /* (plain: and its characters whole, UTF-8 on its own) */
        bool plain = k > 0;   /* (g4: and no '<', which could begin the text <|"|>) */
        v->chars[t] = 0;
        for (int32_t j = 0; j < k && plain; j++) {
            const unsigned char c = (unsigned char)piece[j];
            const int begins = utf8_step(&u, c);
            plain = begins >= 0 && c >= 0x20 && c != '"' && c != '\\' && !(g4 && c == '<');
            v->chars[t] += begins == 1;
        }
        plain &= !u.u8;
        v->kind[t] = hachi_model_is_eog(m, t) ? JV_END : control || k == 0 ? JV_NONE : plain ? JV_PLAIN : JV_TEXT;
    }
    v->off[n] = (uint32_t)total;
    if (g4 && found != 7) { json_vocab_free(v); return NULL; }   /* (not Gemma 4's call tokens) */
    return vocab_order(v) ? v : (json_vocab_free(v), NULL);
}

void json_vocab_free(json_vocab *v) {
    if (!v) return;
    free(v->off);
    free(v->bytes);
    free(v->kind);
    free(v->chars);
    free(v->text);
    free(v->tails);
    free(v->ends);
    free(v);
}

static size_t mask_words(const json_vocab *v) { return ((size_t)v->n + 63) / 64; }

/* The same automaton state (member by member: a struct's padding is no part of it) */
static bool state_eq(const json_state *a, const json_state *b) {
    if (a->js != b->js || a->mode != b->mode || a->depth != b->depth || a->n != b->n || a->ws != b->ws || a->nl != b->nl ||
        a->vnode != b->vnode || a->prop != b->prop || a->pos != b->pos || a->done_lit != b->done_lit ||
        a->lit_base != b->lit_base || a->lit_kind != b->lit_kind || a->key != b->key || a->integer != b->integer ||
        a->cand != b->cand || a->neg != b->neg || a->len != b->len || a->iv != b->iv || a->fv != b->fv || a->u8 != b->u8 ||
        a->u8lo != b->u8lo || a->u8hi != b->u8hi || a->cu != b->cu || a->hs != b->hs || a->cp != b->cp ||
        memcmp(&a->ps, &b->ps, sizeof a->ps))
        return false;
    for (int i = 0; i < a->depth; i++)
        if (a->stack[i].node != b->stack[i].node || a->stack[i].idx != b->stack[i].idx || a->stack[i].kind != b->stack[i].kind ||
            a->stack[i].used != b->stack[i].used)
            return false;
    return true;
}

bool json_grammar_init(json_grammar *g, const json_vocab *v, const json_schema *js) {
    memset(g, 0, sizeof *g);
    g->v = v;
    json_state_init(&g->st, js);
    g->bits = malloc(sizeof *g->bits * JSON_MASK_CACHE * mask_words(v));
    g->level = malloc(sizeof *g->level * ((size_t)v->max_len + 1));
    if (g->bits && g->level) return true;
    json_grammar_free(g);
    return false;
}

void json_grammar_reset(json_grammar *g) {
    json_state_init(&g->st, g->st.js);
    g->n_keys = g->next = 0;
}

void json_grammar_free(json_grammar *g) {
    free(g->bits);
    free(g->level);
    g->bits = NULL;
    g->level = NULL;
}

/* *d = *s, the stack to its depth only (a token's copy: most of the stack is never read) */
static void state_copy(json_state *d, const json_state *s) {
    memcpy(d, s, offsetof(json_state, stack) + sizeof s->stack[0] * (size_t)s->depth);
}

/* The tokens with text that can come after s, into b: the sorted texts walked as a trie, so that
 * a prefix shared by many is fed once (its state kept in level[] while later texts begin with it)
 * and a prefix that fails fails every text it begins */
static void walk_texts(json_grammar *g, const json_state *s, uint64_t *b) {
    const json_vocab *v = g->v;
    const struct vocab_text *x = v->text, *end = x + v->n_text;
    const unsigned char *tail = (const unsigned char *)v->tails;
    json_state *level = g->level, w;
    state_copy(&level[0], s);
    while (x < end) {
        const int keep = x + 1 < end ? x[1].shared : 0;   /* (the next text takes up from there) */
        int d = x->shared;
        state_copy(&w, &level[d]);
        for (; d < x->len && step(&w, tail[d - x->shared]); d++)
            if (d < keep) state_copy(&level[d + 1], &w);
        if (d == x->len) b[x->t >> 6] |= 1ull << (x->t & 63);
        do   /* (byte d failed: so does every text beginning with the first d + 1 bytes) */
            tail += x->len - x->shared;
        while (++x < end && x->shared > d);
    }
}

void json_grammar_mask(void *ctx, float *logits, int32_t n_vocab) {
    json_grammar *g = ctx;
    const json_vocab *v = g->v;
    const json_state *s = &g->st;
    if (s->mode == J_G4_IDLE) return;   /* (text: anything, until a call begins) */
    const size_t words = mask_words(v);
    int k = 0;
    while (k < g->n_keys && !state_eq(&g->key[k], s)) k++;   /* a state seen before (a string's next piece): its mask */
    uint64_t *b = g->bits + (size_t)(k < g->n_keys ? k : g->next) * words;
    if (k == g->n_keys) {   /* (a new state's, replacing the oldest) */
        memset(b, 0, words * sizeof *b);
        g->key[g->next] = *s;
        g->n_keys = CLI_MAX(g->n_keys, g->next + 1);
        g->next = (g->next + 1) % JSON_MASK_CACHE;
        const bool in_string = s->mode == J_STRING && s->n == 0 && !s->u8 && !pattern(s);   /* (g4: no part of <|"|>
                                                                                               matched; no character open; no pattern) */
        const json_node *sn = node(s, s->vnode);   /* a string's room left for a plain piece's characters */
        const int room = in_string && sn->bounds & JB_LEN && sn->max_len >= 0 ? sn->max_len - s->len : INT32_MAX;
        if (!in_string) walk_texts(g, s, b);
        for (int32_t t = 0; t < v->n && in_string; t++) {
            bool ok = v->kind[t] == JV_PLAIN && v->chars[t] <= room;   /* (taken whole) */
            if (v->kind[t] == JV_TEXT) {
                json_state x;
                state_copy(&x, s);
                ok = json_state_feed(&x, v->bytes + v->off[t], v->off[t + 1] - v->off[t]);
            }
            if (ok) b[t >> 6] |= 1ull << (t & 63);
        }
        for (int32_t i = 0; i < v->n_ends && (json_state_done(s) || s->mode == J_FAIL); i++)   /* (failed: a forced
                                                                                                   token; end it) */
            b[v->ends[i] >> 6] |= 1ull << (v->ends[i] & 63);
    }
    for (int32_t w = 0; w < (n_vocab + 63) / 64; w++) {   /* (a word of 64 tokens at a time) */
        const uint64_t m = 64 * w < v->n ? b[w] : 0;
        float *const l = logits + 64 * w;
        const int n = CLI_MIN(64, n_vocab - 64 * w);
        for (int i = 0; i < n && m != ~0ull; i++)
            if (!(m >> i & 1) || 64 * w + i >= v->n) l[i] = -INFINITY;
    }
}

void json_grammar_accept(void *ctx, int32_t token) {
    json_grammar *g = ctx;
    const json_vocab *v = g->v;
    if (token < 0 || token >= v->n) return;
    if (v->kind[token] >= JV_END) {   /* (text before a call takes anything; else a forced token: failed) */
        if (g->st.mode != J_G4_IDLE) g->st.mode = J_FAIL;
        return;
    }
    json_state_feed(&g->st, v->bytes + v->off[token], v->off[token + 1] - v->off[token]);
}
