/* mtp: the Gemma 4 assistant, a multi-token-prediction drafter (GGUF architecture
 * gemma4-assistant, loaded by model.c) bound to a session of its gemma4 target. It has no
 * KV cache: its layers compute queries only and attend over the target's own last sliding
 * and last full caches (read through kv.h), every draft step at the newest position.
 * ../shared/oracle/README.md pins the rules; spec.c runs the draft loop over it. */
#ifndef HACHI_MTP_H
#define HACHI_MTP_H
#include "hachi.h"

typedef struct hachi_mtp hachi_mtp;

/* Every buffer of the drafter is allocated here (a draft step allocates nothing). Checks the
 * assistant against the session's model (hachi_assistant_check). The assistant and the session
 * must outlive it. */
hachi_status hachi_mtp_create(const hachi_model *assistant, hachi_session *target, hachi_mtp **out);
void hachi_mtp_free(hachi_mtp *d);
/* Starts a draft at P = the session's position: h = the target's final-normed hidden row of
 * position P - 1 (hachi_session_hidden). False when the session has none (nothing evaluated
 * since a restore; then no draft). */
bool hachi_mtp_begin(hachi_mtp *d);
/* One draft step: the input token (the token at P on the first step, then the previous
 * draft) and the current h, at position P over the target's positions < P. Returns the
 * drafter's logits [n_vocab] (valid until the next step; with a centroid head the tokens
 * outside the kept clusters get -inf) and moves h to the step's projected output. */
const float *hachi_mtp_step(hachi_mtp *d, int32_t token);
/* Bytes of weights one draft step reads (the head's rows kept, with a centroid head). */
size_t hachi_mtp_step_bytes(const hachi_mtp *d);

#endif
