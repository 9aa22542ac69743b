/* spec: the drafter interface of speculative decoding. The verifier loop and its public
 * API (hachi_spec_*, include/hachi.h) live in src/spec.c; a drafter kind only proposes
 * tokens, so it decides how many forwards a text takes, never which tokens come out. */
#ifndef HACHI_SPEC_H
#define HACHI_SPEC_H
#include "hachi.h"

/* One kind of drafter (hachi_drafter). propose: up to max (1..HACHI_DRAFT_MAX) tokens
 * likely to follow text[0..n), the session's tokens by position then the token about to
 * be evaluated, into draft; returns how many (0: no guess, the forward decodes one token).
 * The assistant (HACHI_DRAFTER_ASSISTANT) has a state of its own (mtp.h) and may sample its
 * drafts, so spec.c drives it directly instead of through this table. */
typedef struct hachi_drafter_ops {
    int32_t (*propose)(const hachi_spec_params *p, const int32_t *text, int32_t n, int32_t max, int32_t *draft);
} hachi_drafter_ops;

extern const hachi_drafter_ops hachi_drafter_lookup_ops;   /* HACHI_DRAFTER_LOOKUP */

#endif
