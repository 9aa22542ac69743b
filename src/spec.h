/* spec: the decode loop of speculative decoding. Its public API (hachi_spec_*) is in
 * include/hachi.h, the loop in src/spec.c; the drafters it runs own their state elsewhere:
 * prompt lookup's n-gram index (lookup.h) and the Gemma 4 assistant (mtp.h). A drafter only
 * proposes tokens, so it decides how many forwards a text takes, never which tokens come out. */
#ifndef HACHI_SPEC_H
#define HACHI_SPEC_H
#include "hachi.h"
#include "lookup.h"
#include "mtp.h"

#endif
