/* A JSON Schema "pattern" (ECMA-262's regular expressions, the subset that is regular: no
 * backreferences or lookaround) compiled to a position automaton (Glushkov's) over code points, for
 * the JSON constraint's strings (json_grammar.c). A state is the set of positions that the text so far
 * can end on; position 0 is the start. Beside the automaton, for every position, the lengths (in
 * code points) of the texts that lead from it to a match, so that a string is never begun or grown
 * where no text within its minLength / maxLength could complete it. A pattern not anchored by ^ or $
 * matches anywhere in the string, as a validator's RegExp.test does: any text may stand before it or
 * after it. Compiling is the cold path; json_pattern_step and json_pattern_can_take run per byte of
 * every token the mask tries. The code points fall into columns that every class takes whole or
 * not at all: each ASCII character its own, and the intervals between the classes' bounds past it.
 * A step goes through a cache of the sets met so far (a lazy DFA: each set's successor by each
 * column, and the lengths that complete a match from it), filled as the masks meet them and
 * emptied when full. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

#define SETW (JSON_PAT_POS / 64)
#define LENS (JSON_PAT_LEN + JSON_PAT_POS + 1)   /* the lengths tracked: past JSON_PAT_LEN, to tell longer ones */

typedef struct { uint32_t lo, hi; } cp_range;
typedef struct { int first, n; bool neg; } cp_class;   /* ranges[first ..], negated */

#define PAT_RANGES 1024        /* ranges in a pattern's classes (each bound a column) */
#define DFA_STATES 256          /* sets the cache holds (then it starts again) */
#define DFA_SLOTS 512           /* its hash table of them */
#define LENW ((LENS + 63) / 64)
enum { DFA_UNKNOWN = -2, DFA_DEAD = -1 };
typedef struct {
    json_pset set;
    uint64_t lens[LENW];        /* bit k: a text of k more code points completes a match from some position of set */
} dfa_state;
typedef struct {
    int n;
    dfa_state st[DFA_STATES];
    int16_t slot[DFA_SLOTS];    /* -1: empty */
    int16_t *next;              /* [DFA_STATES][n_cols] the state after a code point of the column (DFA_UNKNOWN:
                                   not met yet; DFA_DEAD: none) */
} dfa_cache;

struct json_pattern {
    int n_pos;                  /* positions 1 .. n_pos - 1 (0: the start) */
    int cls[JSON_PAT_POS];      /* [n_pos] a position's class */
    json_pset follow[JSON_PAT_POS];   /* [n_pos] the positions that may come after it */
    json_pset accept;           /* the positions a match may end on */
    uint32_t *wide;             /* [n_cols - 128 + 1] the columns past ASCII: code points [wide[j], wide[j + 1]) */
    int n_cols;
    json_pset *col;             /* [n_cols] the positions whose class holds the column's code points */
    json_pset *lens;            /* [LENS]: lens[k]: the positions a text of k more code points leads to a match from */
    cp_class *classes;
    int n_classes;
    cp_range *ranges;
    int n_ranges;
    dfa_cache *dfa;             /* (filled behind a const pattern: it is no part of the pattern) */
};

typedef struct { json_pset first, last; bool nullable; } frag;   /* a sub-expression's positions */

typedef struct {
    json_pattern *p;
    const char *s, *end;        /* the pattern's UTF-8, what is left of it */
    char *err;
    size_t cap;
    bool failed;
    int atoms;                  /* atoms parsed (each repeat's copies again): bounded, as ((){99}){99}... */
} parser;

static bool perr(parser *ps, const char *fmt, ...) {
    if (!ps->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ps->err, ps->cap, fmt, ap);
        va_end(ap);
    }
    ps->failed = true;
    return false;
}

static void set_add(json_pset *a, int i) { a->w[i >> 6] |= 1ull << (i & 63); }
static bool set_has(const json_pset *a, int i) { return a->w[i >> 6] >> (i & 63) & 1; }
static void set_or(json_pset *a, const json_pset *b) {
    for (int i = 0; i < SETW; i++) a->w[i] |= b->w[i];
}
static bool set_meets(const json_pset *a, const json_pset *b) {
    uint64_t x = 0;
    for (int i = 0; i < SETW; i++) x |= a->w[i] & b->w[i];
    return x != 0;
}

/* ---- classes ------------------------------------------------------------------------------- */

static bool add_range(parser *ps, uint32_t lo, uint32_t hi) {
    json_pattern *p = ps->p;
    if (p->n_ranges == PAT_RANGES) return perr(ps, "more than %d ranges in its character classes", PAT_RANGES);
    if (!json_grow((void **)&p->ranges, p->n_ranges, sizeof *p->ranges)) return perr(ps, "out of memory");
    p->ranges[p->n_ranges++] = (cp_range){lo, hi};
    p->classes[p->n_classes - 1].n++;
    return true;
}

/* A new class (its ranges added after it); its index */
static int new_class(parser *ps, bool neg) {
    json_pattern *p = ps->p;
    if (!json_grow((void **)&p->classes, p->n_classes, sizeof *p->classes)) return perr(ps, "out of memory"), -1;
    p->classes[p->n_classes] = (cp_class){p->n_ranges, 0, neg};
    return p->n_classes++;
}

static bool class_has(const json_pattern *p, int k, uint32_t c) {
    const cp_class *cl = &p->classes[k];
    bool in = false;
    for (int i = 0; i < cl->n && !in; i++) in = c >= p->ranges[cl->first + i].lo && c <= p->ranges[cl->first + i].hi;
    return in != cl->neg;
}

static int cp_cmp(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The columns: ASCII's characters, then the intervals past it between the classes' bounds (and the
 * surrogates', which no class is given: a string holds none), with each one's positions */
static bool columns(json_pattern *p) {
    uint32_t *b = malloc(sizeof *b * (4 + 2 * (size_t)p->n_ranges));
    if (!b) return false;
    int n = 0;
    b[n++] = 0x80, b[n++] = 0xD800, b[n++] = 0xE000, b[n++] = 0x110000;
    for (int i = 0; i < p->n_ranges; i++)
        for (int e = 0; e < 2; e++) {
            const uint32_t c = e ? p->ranges[i].hi + 1 : p->ranges[i].lo;
            if (c > 0x80 && c < 0x110000) b[n++] = c;
        }
    qsort(b, (size_t)n, sizeof *b, cp_cmp);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!k || b[i] != b[k - 1]) b[k++] = b[i];
    p->wide = b;
    p->n_cols = 128 + k - 1;
    if (!(p->col = calloc((size_t)p->n_cols, sizeof *p->col))) return false;
    for (int c = 0; c < p->n_cols; c++) {
        const uint32_t cp = c < 128 ? (uint32_t)c : b[c - 128];
        for (int i = 1; i < p->n_pos && cp != 0xD800; i++)
            if (class_has(p, p->cls[i], cp)) set_add(&p->col[c], i);
    }
    return true;
}

/* Code point c's column (no surrogate) */
static int column(const json_pattern *p, uint32_t c) {
    if (c < 128) return (int)c;
    int lo = 0, hi = p->n_cols - 128 - 1;   /* (the last interval whose start is at most c) */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (p->wide[mid] <= c) lo = mid;
        else hi = mid - 1;
    }
    return 128 + lo;
}

/* ECMA-262's character class escapes: d, s, w (negated: their capitals) */
static bool add_escape_set(parser *ps, char e) {
    static const uint32_t d[] = {'0', '9'}, w[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'},
                          sp[] = {9, 13, ' ', ' ', 0xA0, 0xA0, 0x1680, 0x1680, 0x2000, 0x200A, 0x2028, 0x2029,
                                  0x202F, 0x202F, 0x205F, 0x205F, 0x3000, 0x3000, 0xFEFF, 0xFEFF};
    const char l = (char)(e | 0x20);
    const uint32_t *r = l == 'd' ? d : l == 'w' ? w : sp;
    const int n = l == 'd' ? 1 : l == 'w' ? 4 : 10;
    if (e == l) {
        for (int i = 0; i < n; i++)
            if (!add_range(ps, r[2 * i], r[2 * i + 1])) return false;
        return true;
    }
    uint32_t from = 0;   /* the complement, as ranges */
    for (int i = 0; i < n; i++) {
        if (r[2 * i] > from && !add_range(ps, from, r[2 * i] - 1)) return false;
        from = r[2 * i + 1] + 1;
    }
    return add_range(ps, from, 0x10FFFF);
}

/* ---- parsing ------------------------------------------------------------------------------- */

static bool more(const parser *ps) { return ps->s < ps->end && !ps->failed; }

/* The next code point of the pattern's UTF-8 */
static uint32_t next_cp(parser *ps) {
    const unsigned char *u = (const unsigned char *)ps->s;
    int n = u[0] < 0x80 ? 1 : u[0] < 0xE0 ? 2 : u[0] < 0xF0 ? 3 : 4;
    if (ps->s + n > ps->end) n = 1;
    uint32_t c = n == 1 ? u[0] : u[0] & (0x7F >> n);
    for (int i = 1; i < n; i++) c = c << 6 | (u[i] & 0x3F);
    ps->s += n;
    return c;
}

/* n hex digits (n 0: \u{...}'s) into *c */
static bool hex_cp(parser *ps, int n, uint32_t *c) {
    const bool braced = n == 0 && ps->s < ps->end && *ps->s == '{';
    *c = 0;
    if (braced) ps->s++;
    int i = 0;
    for (; ps->s < ps->end && (braced || i < n) && json_hex_digit(*ps->s) >= 0; i++, ps->s++)
        if ((*c = *c << 4 | (uint32_t)json_hex_digit(*ps->s)) > 0x10FFFF) return perr(ps, "an escape past U+10FFFF");
    if (braced ? !(i && ps->s < ps->end && *ps->s++ == '}') : i != n) return perr(ps, "a malformed \\x or \\u escape");
    return true;
}

/* After a backslash: one code point in *c, or (set) a class escape added to the open class */
static bool escape(parser *ps, uint32_t *c, bool *set, bool in_class) {
    if (ps->s >= ps->end) return perr(ps, "a backslash at the end");
    const char e = *ps->s++;
    *set = false;
    switch (e) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': *set = true; return add_escape_set(ps, e);
    case 't': *c = 9; return true;
    case 'n': *c = 10; return true;
    case 'v': *c = 11; return true;
    case 'f': *c = 12; return true;
    case 'r': *c = 13; return true;
    case 'x': return hex_cp(ps, 2, c);
    case 'u': return hex_cp(ps, ps->s < ps->end && *ps->s == '{' ? 0 : 4, c);
    case '0':
        if (ps->s < ps->end && *ps->s >= '0' && *ps->s <= '9') return perr(ps, "an octal escape is not supported");
        *c = 0;
        return true;
    case 'b':
        if (in_class) { *c = 8; return true; }
        return perr(ps, "\\b (a word boundary) is not supported");
    default:
        if ((e >= '1' && e <= '9') || e == 'k') return perr(ps, "backreferences are not supported");
        if (e == 'B') return perr(ps, "\\B (a word boundary) is not supported");
        if (e == 'p' || e == 'P') return perr(ps, "Unicode property escapes (\\p) are not supported");
        if (e == 'c') return perr(ps, "control escapes (\\c) are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return perr(ps, "an unknown escape \\%c", e);
        ps->s--;
        *c = next_cp(ps);   /* (an escaped punctuation character: itself) */
        return true;
    }
}

/* A new position of class k: a fragment of it alone */
static frag position(parser *ps, int k) {
    frag f = {{{0}}, {{0}}, false};
    json_pattern *p = ps->p;
    if (k < 0) return f;
    if (p->n_pos == JSON_PAT_POS) {
        perr(ps, "the pattern is too large to sample with (%d characters at most, counting repeats out)", JSON_PAT_POS - 1);
        return f;
    }
    p->cls[p->n_pos] = k;
    set_add(&f.first, p->n_pos);
    set_add(&f.last, p->n_pos++);
    return f;
}

/* [...] after its '[' */
static frag bracket(parser *ps) {
    const bool neg = ps->s < ps->end && *ps->s == '^';
    ps->s += neg;
    const int k = new_class(ps, neg);
    for (;;) {
        if (!more(ps)) { perr(ps, "a '[' without its ']'"); break; }
        if (*ps->s == ']') { ps->s++; break; }
        uint32_t lo, hi;
        bool set = false;
        if (*ps->s == '\\') { ps->s++; escape(ps, &lo, &set, true); }
        else lo = next_cp(ps);
        if (set || ps->failed) continue;
        hi = lo;
        if (ps->s + 1 < ps->end && *ps->s == '-' && ps->s[1] != ']') {   /* a range */
            ps->s++;
            bool set2 = false;
            if (*ps->s == '\\') { ps->s++; escape(ps, &hi, &set2, true); }
            else hi = next_cp(ps);
            if (set2) { perr(ps, "a class escape ends a range"); break; }
            if (hi < lo) { perr(ps, "a range out of order in a class"); break; }
        }
        add_range(ps, lo, hi);
    }
    return position(ps, ps->failed ? -1 : k);
}

static frag concat(json_pattern *p, frag a, const frag *b) {
    for (int i = 0; i < p->n_pos; i++)
        if (set_has(&a.last, i)) set_or(&p->follow[i], &b->first);
    if (a.nullable) set_or(&a.first, &b->first);
    if (!b->nullable) a.last = b->last;
    else set_or(&a.last, &b->last);
    a.nullable = a.nullable && b->nullable;
    return a;
}

static frag star(json_pattern *p, frag a, bool nullable) {
    for (int i = 0; i < p->n_pos; i++)
        if (set_has(&a.last, i)) set_or(&p->follow[i], &a.first);
    a.nullable |= nullable;
    return a;
}

static frag alternation(parser *ps);

/* One atom: a character, a class, '.', a group */
static frag atom(parser *ps) {
    const frag none = {{{0}}, {{0}}, false};
    const char c = *ps->s;
    if (++ps->atoms > 64 * JSON_PAT_POS) return perr(ps, "the pattern's repeats nest too deep"), none;
    if (c == '(') {
        ps->s++;
        if (ps->s < ps->end && *ps->s == '?') {
            if (ps->s + 1 < ps->end && ps->s[1] == ':') ps->s += 2;
            else if (ps->s + 2 < ps->end && ps->s[1] == '<' && ps->s[2] != '=' && ps->s[2] != '!') {   /* (?<name>: a group */
                const char *gt = memchr(ps->s, '>', (size_t)(ps->end - ps->s));
                if (!gt) return perr(ps, "a group's name without its '>'"), none;
                ps->s = gt + 1;
            } else return perr(ps, "lookaround ((?=, (?!, (?<=, (?<!) is not supported"), none;
        }
        frag f = alternation(ps);
        if (!more(ps) || *ps->s != ')') return perr(ps, "a '(' without its ')'"), none;
        ps->s++;
        return f;
    }
    if (c == '[') { ps->s++; return bracket(ps); }
    if (c == '.') {   /* any but a line terminator */
        ps->s++;
        const int k = new_class(ps, true);
        if (k < 0 || !add_range(ps, 10, 10) || !add_range(ps, 13, 13) || !add_range(ps, 0x2028, 0x2029)) return none;
        return position(ps, k);
    }
    if (c == '^' || c == '$') return perr(ps, "'%c' is supported only at the pattern's start ('^') or end ('$')", c), none;
    if (c == '*' || c == '+' || c == '?' || c == '{') return perr(ps, "'%c' repeats nothing", c), none;
    if (c == ')' || c == ']' || c == '}') return perr(ps, "an unmatched '%c'", c), none;
    const int k = new_class(ps, false);
    if (k < 0) return none;
    uint32_t cp = 0;
    bool set = false;
    if (c == '\\') { ps->s++; escape(ps, &cp, &set, false); }
    else cp = next_cp(ps);
    if (!set && !ps->failed) add_range(ps, cp, cp);
    return position(ps, ps->failed ? -1 : k);
}

/* {n}, {n,}, {n,m} after its '{': n in *lo, m in *hi (-1: none) */
static bool braces(parser *ps, int *lo, int *hi) {
    char *e;
    const long a = strtol(ps->s, &e, 10);
    if (e == ps->s || e >= ps->end) return perr(ps, "a malformed {n,m} repeat");
    long b = a;
    if (*e == ',') {
        const char *f = e + 1;
        b = f < ps->end && *f == '}' ? -1 : strtol(f, &e, 10);
        if (b >= 0 && e == f) return perr(ps, "a malformed {n,m} repeat");
        if (b < 0) e = (char *)f;
    }
    if (e >= ps->end || *e != '}') return perr(ps, "a malformed {n,m} repeat");
    if (a > JSON_PAT_POS || b > JSON_PAT_POS || (b >= 0 && b < a))
        return perr(ps, "a {n,m} repeat out of order or above %d", JSON_PAT_POS);
    ps->s = e + 1;
    *lo = (int)a;
    *hi = (int)b;
    return true;
}

/* An atom and its repeat: a {n,m} repeat parses the atom's text again for each copy. Optional
 * copies nest, x{1,3} as x(x(x)?)?, so that a position leads to the next copy only, not to every
 * later one (x?x? would: a state of .{0,200} then held up to 200 positions, and a mask took
 * seconds). */
static frag piece(parser *ps) {
    const char *from = ps->s;
    frag f = atom(ps);
    const char *to = ps->s;
    if (!more(ps) || !strchr("*+?{", *ps->s)) return f;
    const char q = *ps->s++;
    int lo = 0, hi = -1;
    if (q == '+') lo = 1;
    else if (q == '?') hi = 1;
    else if (q == '{' && !braces(ps, &lo, &hi)) return f;
    if (more(ps) && *ps->s == '?') ps->s++;   /* (lazy: the same strings) */
    const char *after = ps->s;
    const int n = hi < 0 ? CLI_MAX(lo, 1) : hi;
    frag r = {{{0}}, {{0}}, true}, tail = {{{0}}, {{0}}, true}, *c = malloc(sizeof *c * (size_t)CLI_MAX(n, 1));
    if (!c) return perr(ps, "out of memory"), r;
    for (int i = 0; i < n && !ps->failed; i++) {
        c[i] = f;
        if (i) {   /* a fresh copy */
            ps->s = from;
            c[i] = atom(ps);
            if (ps->s != to) perr(ps, "a repeat could not be copied");
        }
    }
    for (int i = n - 1; i >= lo && hi >= 0 && !ps->failed; i--) {   /* the optional copies, nested from the last */
        tail = concat(ps->p, c[i], &tail);
        tail.nullable = true;
    }
    for (int i = 0; i < CLI_MIN(lo, n) && !ps->failed; i++) {
        if (hi < 0 && i == n - 1) c[i] = star(ps->p, c[i], false);   /* x{n,}: the last required one repeated */
        r = concat(ps->p, r, &c[i]);
    }
    if (hi < 0 && lo == 0 && !ps->failed) r = star(ps->p, c[0], true);   /* x*, x{0,} */
    if (!ps->failed) r = concat(ps->p, r, &tail);
    free(c);
    ps->s = after;
    return r;
}

static frag alternation(parser *ps) {
    frag a = {{{0}}, {{0}}, true};
    for (bool any = false; !ps->failed;) {
        frag seq = {{{0}}, {{0}}, true};
        while (more(ps) && *ps->s != '|' && *ps->s != ')') {
            const frag p = piece(ps);
            seq = concat(ps->p, seq, &p);
        }
        if (!any) a = seq;
        else {
            set_or(&a.first, &seq.first);
            set_or(&a.last, &seq.last);
            a.nullable |= seq.nullable;
        }
        any = true;
        if (!more(ps) || *ps->s != '|') break;
        ps->s++;
    }
    return a;
}

/* ---- the automaton --------------------------------------------------------------------------- */

json_pattern *json_pattern_compile(const char *re, char *err, size_t cap) {
    json_pattern *p = calloc(1, sizeof *p);
    if (!p) { snprintf(err, cap, "out of memory"); return NULL; }
    p->n_pos = 1;
    const size_t n = strlen(re);
    parser ps = {p, re, re + n, err, cap, false, 0};
    const bool head = n && re[0] == '^';   /* anchored: $ unescaped at the end */
    size_t bs = 0;
    while (bs + 1 < n && re[n - 2 - bs] == '\\') bs++;
    const bool tail = n > (size_t)head && re[n - 1] == '$' && !(bs & 1);
    ps.s += head;
    ps.end -= tail;
    frag any = {{{0}}, {{0}}, false};
    const int k = new_class(&ps, true);   /* (anything: a class of no ranges, negated) */
    if (k >= 0 && !head) any = star(p, position(&ps, k), true);
    frag f = alternation(&ps);
    if (!ps.failed && ps.s != ps.end) perr(&ps, "an unmatched ')'");
    if (k >= 0 && !tail && !ps.failed) {
        const frag after = star(p, position(&ps, k), true);
        f = concat(p, f, &after);
    }
    if (!head && !ps.failed) f = concat(p, any, &f);
    if (ps.failed || !(p->lens = calloc(LENS, sizeof *p->lens)) || !columns(p) || !(p->dfa = malloc(sizeof *p->dfa)) ||
        !(p->dfa->next = malloc(sizeof *p->dfa->next * DFA_STATES * (size_t)p->n_cols))) {
        if (!ps.failed) snprintf(err, cap, "out of memory");
        json_pattern_free(p);
        return NULL;
    }
    p->dfa->n = 0;
    memset(p->dfa->slot, -1, sizeof p->dfa->slot);
    p->follow[0] = f.first;
    p->accept = f.last;
    if (f.nullable) set_add(&p->accept, 0);
    json_pset live = {{0}};   /* (positions whose class holds something a string can hold: in a column) */
    for (int c = 0; c < p->n_cols; c++) set_or(&live, &p->col[c]);
    p->lens[0] = p->accept;
    for (int len = 1; len < LENS; len++)
        for (int i = 0; i < p->n_pos; i++) {
            json_pset next = p->follow[i];
            for (int w = 0; w < SETW; w++) next.w[w] &= live.w[w] & p->lens[len - 1].w[w];
            if (set_meets(&next, &next)) set_add(&p->lens[len], i);
        }
    return p;
}

void json_pattern_free(json_pattern *p) {
    if (!p) return;
    if (p->dfa) free(p->dfa->next);
    free(p->dfa);
    free(p->lens);
    free(p->wide);
    free(p->col);
    free(p->classes);
    free(p->ranges);
    free(p);
}

void json_pattern_start(json_pset *s) {
    memset(s, 0, sizeof *s);
    set_add(s, 0);
}

/* The positions that follow those of s whose classes hold column c's code points, into *next; whether any */
static bool follow_col(const json_pattern *p, const json_pset *s, int c, json_pset *next) {
    json_pset cand = {{0}};
    for (int w = 0; w < SETW; w++)
        for (uint64_t b = s->w[w]; b; b &= b - 1) set_or(&cand, &p->follow[64 * w + __builtin_ctzll(b)]);
    bool any = false;
    for (int w = 0; w < SETW; w++) any |= (next->w[w] = cand.w[w] & p->col[c].w[w]) != 0;
    return any;
}

/* The lengths [*a, *b] of lens to look at for a completion of lo..hi more code points (hi < 0: no
 * most). A text longer than JSON_PAT_LEN is as good as one of at least lo: if there is one there
 * is one of JSON_PAT_LEN + 1 .. + JSON_PAT_POS, as the shortest has no loop to leave out, and then
 * one of any length. */
static void len_window(int lo, int hi, int *a, int *b) {
    *a = CLI_MIN(lo, JSON_PAT_LEN + 1);
    *b = hi < 0 ? LENS - 1 : CLI_MIN(hi, JSON_PAT_LEN);
}

bool json_pattern_can_end(const json_pattern *p, const json_pset *s, int lo, int hi) {
    int a, b;
    len_window(lo, hi, &a, &b);
    for (int k = a; k <= b; k++)
        if (set_meets(&p->lens[k], s)) return true;
    return false;
}

/* ---- the cache of sets (a lazy DFA) ------------------------------------------------------- */

static uint32_t set_hash(const json_pset *s) {
    uint64_t h = 0;
    for (int w = 0; w < SETW; w++) h = (h ^ s->w[w]) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 40);
}

/* The cache's state of set s: found, or added (a full cache emptied first: *flushed set) */
static int dfa_intern(const json_pattern *p, const json_pset *s, bool *flushed) {
    dfa_cache *d = p->dfa;
    uint32_t h = set_hash(s) % DFA_SLOTS;
    for (; d->slot[h] >= 0; h = (h + 1) % DFA_SLOTS)
        if (!memcmp(&d->st[d->slot[h]].set, s, sizeof *s)) return d->slot[h];
    if (d->n == DFA_STATES) {
        d->n = 0;
        memset(d->slot, -1, sizeof d->slot);
        *flushed = true;
        for (h = set_hash(s) % DFA_SLOTS; d->slot[h] >= 0; h = (h + 1) % DFA_SLOTS) {}
    }
    dfa_state *x = &d->st[d->n];
    x->set = *s;
    memset(x->lens, 0, sizeof x->lens);
    for (int k = 0; k < LENS; k++)
        if (set_meets(&p->lens[k], s)) x->lens[k >> 6] |= 1ull << (k & 63);
    for (int c = 0; c < p->n_cols; c++) d->next[(size_t)d->n * (size_t)p->n_cols + (size_t)c] = DFA_UNKNOWN;
    d->slot[h] = (int16_t)d->n;
    return d->n++;
}

/* json_pattern_can_end from a cached state: a bit of its lengths in [lo, hi] */
static inline bool dfa_can_end(const dfa_state *x, int lo, int hi) {
    int a, b;
    len_window(lo, hi, &a, &b);
    for (int w = a >> 6; w <= b >> 6 && a <= b; w++) {
        uint64_t m = x->lens[w];
        if (w == a >> 6) m &= ~0ull << (a & 63);
        if (w == b >> 6 && (b & 63) < 63) m &= (2ull << (b & 63)) - 1;
        if (m) return true;
    }
    return false;
}

/* s's state in the cache (*hint where it holds s: checked) */
static int dfa_of(const json_pattern *p, const json_pset *s, const int *hint) {
    const dfa_cache *d = p->dfa;
    bool flushed = false;
    return *hint >= 0 && *hint < d->n && !memcmp(&d->st[*hint].set, s, sizeof *s) ? *hint : dfa_intern(p, s, &flushed);
}

/* The state after column c from state *id, s's (DFA_DEAD: none); a cache emptied meanwhile leaves
 * *id as s's state again */
static int dfa_met(const json_pattern *p, const json_pset *s, int *id, int c);
static inline int dfa_next(const json_pattern *p, const json_pset *s, int *id, int c) {
    const int nx = p->dfa->next[(size_t)*id * (size_t)p->n_cols + (size_t)c];
    return nx != DFA_UNKNOWN ? nx : dfa_met(p, s, id, c);
}

/* (dfa_next's transition not met before) */
static int dfa_met(const json_pattern *p, const json_pset *s, int *id, int c) {
    dfa_cache *d = p->dfa;
    int16_t *const at = &d->next[(size_t)*id * (size_t)p->n_cols + (size_t)c];
    int nx;
    json_pset next;
    bool flushed = false;
    nx = follow_col(p, s, c, &next) ? dfa_intern(p, &next, &flushed) : DFA_DEAD;
    if (!flushed) *at = (int16_t)nx;
    else *id = dfa_intern(p, s, &flushed);   /* (emptied: next is in it, and now s) */
    return nx;
}

bool json_pattern_can_take(const json_pattern *p, const json_pset *s, int *hint, uint32_t lo, uint32_t hi, int len_lo,
                           int len_hi) {
    int id = dfa_of(p, s, hint);
    bool any = false;
    const int last = column(p, CLI_MIN(hi, 0x10FFFF));
    for (int c = column(p, lo); c <= last && !any; c++) {
        const int nx = c < 128 || p->wide[c - 128] != 0xD800 ? dfa_next(p, s, &id, c) : DFA_DEAD;
        any = nx != DFA_DEAD && dfa_can_end(&p->dfa->st[nx], len_lo, len_hi);
    }
    *hint = id;
    return any;
}

bool json_pattern_step(const json_pattern *p, json_pset *s, int *hint, uint32_t c, int len_lo, int len_hi) {
    if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) return false;
    int id = dfa_of(p, s, hint);
    const int nx = dfa_next(p, s, &id, column(p, c));
    if (nx == DFA_DEAD || !dfa_can_end(&p->dfa->st[nx], len_lo, len_hi)) {
        *hint = id;
        return false;
    }
    *s = p->dfa->st[nx].set;
    *hint = nx;
    return true;
}
