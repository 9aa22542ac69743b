/* sampler: what the speculative loop (spec.c) needs beyond the public hachi_sampler_* calls:
 * the distribution a sample is drawn from, and draws from the sampler's own RNG (so a seed
 * fixes the whole run). */
#ifndef HACHI_SAMPLER_H
#define HACHI_SAMPLER_H
#include "hachi.h"

/* The distribution hachi_sampler_sample(s, logits) draws from (the penalties of the
 * current history, temperature, top-k, top-p, min-p) into dist[n_vocab], summing to 1; greedy
 * settings give the argmax one-hot. Same code path as the sample; uses no randomness. */
void hachi_sampler_dist(hachi_sampler *s, const float *logits, float *dist);
/* The vocabulary size it was created for. */
int32_t hachi_sampler_n_vocab(const hachi_sampler *s);
/* Temperature 0 (or top-k 1): every sample is the argmax. */
bool hachi_sampler_greedy(const hachi_sampler *s);
/* A uniform number in [0, 1) from the sampler's RNG. */
double hachi_sampler_uniform(hachi_sampler *s);
/* A draw by weight from w[n_vocab] (>= 0, not normalized) with the sampler's RNG; -1 when
 * every weight is 0. */
int32_t hachi_sampler_draw_weights(hachi_sampler *s, const float *w);

#endif
