/* lookup: the n-gram index of prompt lookup. For each length n of ngram_min..ngram_max, an
 * open-addressing table maps an n-gram to the latest position where it ends and is followed by
 * a token, so a draft is found in O(ngram_max - ngram_min + 1) probes instead of a scan of the
 * text: exactly hachi_draft_lookup's answer (the latest earlier occurrence of the longest
 * n-gram that matches the tail). The text is the spec's: positions appended in order, and
 * truncated (then rebuilt on the next append) only when a caller rewrites earlier positions.
 * Every table is allocated at creation for the whole context. */
#include "lookup.h"
#include "util.h"

struct hachi_lookup {
    int32_t n_min, n_max;
    int32_t cap;            /* the most text positions */
    int32_t len;            /* positions of text indexed: n-grams ending at len - 2 and before */
    uint32_t mask;          /* slots per table - 1 (a power of two >= 2 * cap) */
    int32_t *slot;          /* [n_max - n_min + 1][mask + 1] end position of an n-gram; -1: empty */
};

static void clear(hachi_lookup *x);

static uint32_t hash(const int32_t *t, int32_t n) {
    uint32_t h = 2166136261u;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)t[i]) * 16777619u;
    return h ^ (h >> 15);
}

hachi_status hachi_lookup_create(int32_t cap, int32_t n_min, int32_t n_max, hachi_lookup **out) {
    *out = NULL;
    if (cap < 1 || n_min < 1 || n_max < n_min || n_max > HACHI_LOOKUP_NGRAM_MAX)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "lookup: n-grams %d..%d (need 1 <= min <= max <= %d)", (int)n_min,
                          (int)n_max, HACHI_LOOKUP_NGRAM_MAX);
    hachi_lookup *x = hachi_calloc(1, sizeof *x);
    if (!x) return HACHI_ERR_NOMEM;
    uint32_t slots = 2;
    while (slots < 2u * (uint32_t)cap) slots *= 2;
    x->n_min = n_min;
    x->n_max = n_max;
    x->cap = cap;
    x->mask = slots - 1;
    x->slot = hachi_malloc((size_t)(n_max - n_min + 1) * slots * sizeof *x->slot);
    if (!x->slot) { hachi_lookup_free(x); return HACHI_ERR_NOMEM; }
    clear(x);
    *out = x;
    return HACHI_OK;
}

void hachi_lookup_free(hachi_lookup *x) {
    if (!x) return;
    hachi_free(x->slot);
    hachi_free(x);
}

static void clear(hachi_lookup *x) {
    for (size_t i = 0; i < (size_t)(x->n_max - x->n_min + 1) * (x->mask + 1); i++) x->slot[i] = -1;
    x->len = 0;
}

/* An entry past len may have replaced an older one that is still valid: start again (rare, a
 * rewrite of earlier positions; the next draft indexes the text anew). */
void hachi_lookup_truncate(hachi_lookup *x, int32_t len) {
    if (len < x->len) clear(x);
}

/* The slot of the n-gram text[end - n + 1 .. end] in table t: where it is, or the empty one
 * where it goes. */
static int32_t *find(const hachi_lookup *x, const int32_t *text, int32_t n, int32_t end) {
    int32_t *t = x->slot + (size_t)(n - x->n_min) * (x->mask + 1);
    const int32_t *g = text + end - n + 1;
    for (uint32_t i = hash(g, n) & x->mask;; i = (i + 1) & x->mask) {
        const int32_t e = t[i];
        if (e < 0 || !memcmp(text + e - n + 1, g, (size_t)n * sizeof *g)) return &t[i];
    }
}

/* Index text[0..len): every n-gram that ends before its last position. */
static void extend(hachi_lookup *x, const int32_t *text, int32_t len) {
    for (int32_t end = x->len - 1; end <= len - 2; end++) {
        if (end < 0) continue;
        for (int32_t n = x->n_min; n <= x->n_max && n <= end + 1; n++) *find(x, text, n, end) = end;
    }
    x->len = HACHI_MAX(x->len, len);
}

int32_t hachi_lookup_draft(hachi_lookup *x, const int32_t *text, int32_t len, int32_t max_draft, int32_t *draft) {
    if (len > x->cap || max_draft < 1) return 0;
    extend(x, text, len);
    max_draft = HACHI_MIN(max_draft, HACHI_DRAFT_MAX);
    for (int32_t n = HACHI_MIN(x->n_max, len - 1); n >= x->n_min; n--) {
        const int32_t end = *find(x, text, n, len - 1);   /* the tail's n-gram: its latest earlier end */
        if (end < 0) continue;
        const int32_t k = HACHI_MIN(max_draft, len - 1 - end);
        memcpy(draft, text + end + 1, (size_t)k * sizeof *draft);
        return k;
    }
    return 0;
}
