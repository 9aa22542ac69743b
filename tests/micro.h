/* Helpers of the tests on the trained passkey model ../shared/models/gemma4-micro.gguf
 * (tests/micro.c): the model, a session of a mode, the shared passkey prompts, logits of
 * every position. */
#ifndef HACHI_TEST_MICRO_H
#define HACHI_TEST_MICRO_H
#include "hachi.h"

/* The model, or NULL when ../shared lacks it (a load failure is a test failure). */
hachi_model *micro_load(void);
/* The params of a mode: KV type, context, threads, sparse budget. */
hachi_session_params micro_params(hachi_kv_type type, int ctx, int threads, int budget);
/* A session of the mode (a failure is reported). */
hachi_session *micro_session(hachi_model *m, hachi_kv_type type, int ctx, int threads, int budget);
/* Prompt k of the shared passkey file: its ids (*n of them, malloc'd) and *key; NULL if absent. */
int32_t *micro_passkey_prompt(int k, int *n, int *key);
/* Prompt k of the shared passkey file on a session of p (context 8192): whether 8 greedy
 * tokens contain its key, their text into text[cap], the prompt's length into *n (0 when the
 * prompt is absent, a failure). */
bool micro_passkey_answer(hachi_model *m, const hachi_session_params *p, int k, int *n, char *text, size_t cap);
/* Logits [n][n_vocab] of every position, step tokens per forward (malloc'd). */
float *micro_eval_all(hachi_model *m, hachi_kv_type type, const int32_t *ids, int n, int step, int ctx, int threads,
                      int budget);
float *micro_eval_all_params(hachi_model *m, const hachi_session_params *p, const int32_t *ids, int n, int step);
/* With each step of steps[0..n_steps), the logits of ids[0..n) on sessions of p equal bitwise
 * those of one token per forward; a difference fails, naming the mode, the step and the first
 * position that differs. */
void micro_check_forwards(hachi_model *m, const hachi_session_params *p, const int32_t *ids, int n, const int *steps,
                          int n_steps);

#endif
