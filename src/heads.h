/* heads: the streaming-head classification of a model (DuoAttention style), its file
 * format, and its check against the model. The session copies the masks into its plan at
 * creation; attention (attn.h) sees only a layer's mask, sink and window. */
#ifndef HACHI_HEADS_H
#define HACHI_HEADS_H
#include "hachi.h"

#define HACHI_HEADS_MAX_HEAD 64     /* query heads per layer a mask holds */

struct hachi_heads {
    uint64_t model_id;              /* hachi_model_id of the model it classifies */
    char arch[32];
    int n_layer, n_head;
    int sink, window;               /* a streaming head's keys: positions < sink and the last window */
    uint64_t *stream;               /* [n_layer] bit h: query head h streams (full-attention layers only) */
    bool *full;                     /* [n_layer] which layers may stream (the model's full-attention layers) */
};

#endif
