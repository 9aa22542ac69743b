/* Tests for speculative decoding (src/spec.c): the prompt-lookup drafter by hand. */
#include "test.h"
#include "hachi.h"

/* Prompt lookup, by hand: the longest n-gram (4..2 here) of the tail that occurred
 * before, its latest occurrence, what followed it (bounded by max_draft, by the end of
 * the history and by HACHI_DRAFT_MAX), and nothing when nothing matches. */
TEST(draft_lookup) {
    int32_t d[32];
    const int32_t a[] = {5, 6, 7, 8, 9, 5, 6, 7};   /* tail "5 6 7" at 0 (no earlier "9 5 6 7") */
    CHECK(hachi_draft_lookup(a, 8, 2, 4, 3, d) == 3 && d[0] == 8 && d[1] == 9 && d[2] == 5);
    CHECK(hachi_draft_lookup(a, 8, 2, 4, 8, d) == 5 && d[4] == 7);   /* up to the end of the history */
    const int32_t b[] = {1, 2, 3, 1, 2, 4, 1, 2};   /* "1 2" at 0 and 3: the latest wins */
    CHECK(hachi_draft_lookup(b, 8, 2, 4, 2, d) == 2 && d[0] == 4 && d[1] == 1);
    const int32_t c[] = {1, 2, 3, 4, 5, 6, 2, 9, 9, 3, 4};   /* "3 4" at 2 beats the 1-gram "4" */
    CHECK(hachi_draft_lookup(c, 11, 1, 4, 2, d) == 2 && d[0] == 5 && d[1] == 6);
    CHECK(hachi_draft_lookup(c, 11, 3, 4, 2, d) == 0);   /* no earlier "9 3 4" */
    int32_t z[40];
    for (int i = 0; i < 40; i++) z[i] = i % 20;   /* period 20: 20 tokens follow, 15 at most */
    CHECK(hachi_draft_lookup(z, 40, 2, 4, 100, d) == HACHI_DRAFT_MAX && d[0] == 0 && d[14] == 14);
    CHECK(hachi_draft_lookup(a, 8, 2, 4, 0, d) == 0 && hachi_draft_lookup(a, 1, 2, 4, 4, d) == 0);
    CHECK(hachi_draft_lookup(NULL, 8, 2, 4, 4, d) == 0 && hachi_draft_lookup(a, 8, 0, 4, 4, d) == 0);
}
