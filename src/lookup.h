/* lookup: the n-gram index behind prompt lookup (HACHI_DRAFTER_LOOKUP): hachi_draft_lookup's
 * answer without scanning the text. Owned by a spec (spec.c); the text stays the caller's. */
#ifndef HACHI_LOOKUP_H
#define HACHI_LOOKUP_H
#include "hachi.h"

#define HACHI_LOOKUP_NGRAM_MAX 16   /* the longest n-gram indexed */

typedef struct hachi_lookup hachi_lookup;

/* An index for texts of up to cap positions and n-grams of n_min..n_max tokens (1 <= n_min <=
 * n_max <= HACHI_LOOKUP_NGRAM_MAX); every table is allocated here. */
hachi_status hachi_lookup_create(int32_t cap, int32_t n_min, int32_t n_max, hachi_lookup **out);
void hachi_lookup_free(hachi_lookup *x);
/* The text changes from position len on (a rewrite of positions already seen); appending
 * needs no call. */
void hachi_lookup_truncate(hachi_lookup *x, int32_t len);
/* hachi_draft_lookup(text, len, n_min, n_max, max_draft, draft): the tokens after the latest
 * earlier occurrence of the longest tail n-gram that occurs before (at most max_draft, <=
 * HACHI_DRAFT_MAX); indexes the positions appended since the last call. Allocates nothing. */
int32_t hachi_lookup_draft(hachi_lookup *x, const int32_t *text, int32_t len, int32_t max_draft, int32_t *draft);

#endif
