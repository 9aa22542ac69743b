/* model: hyperparameters and tensor binding from GGUF, per architecture
 * (gemma4, llama). Matrices stay in the read-only mmap (hachi_mat points into
 * it), except those the kernels read faster interleaved 8 rows by 8 (Q4_0, Q4_K):
 * they are repacked once at load into one anonymous mapping and their file pages
 * released. 1-D vectors (norm weights, rope_freqs) are small owned f32 copies. */
#ifndef HACHI_MODEL_H
#define HACHI_MODEL_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include "hachi.h"
#include "gguf.h"
#include "matmul.h"
#include "tokenizer.h"

enum hachi_arch { HACHI_ARCH_LLAMA, HACHI_ARCH_GEMMA4, HACHI_ARCH_GEMMA4_ASSISTANT };
#define HACHI_LAYERS_MAX 1024   /* block_count a model may have */

typedef struct hachi_layer {
    bool sliding;               /* gemma4: sliding-window layer; llama: false */
    int head_dim;               /* per head, q/k/v (k and v equal) */
    int n_ff;                   /* FFN width */
    int kv_owner;               /* layer whose K/V cache this layer reads (itself if it owns one);
                                   gemma4-assistant: -1 (it reads the target's, mtp.c) */
    hachi_mat wq;               /* [n_head*head_dim][n_embd] */
    hachi_mat wk, wv;           /* [n_head_kv*head_dim][n_embd]; wv.data NULL: V = K; unused on shared layers */
    hachi_mat wo;               /* [n_embd][n_head*head_dim] */
    hachi_mat w_gate, w_up;     /* [n_ff][n_embd] */
    hachi_mat w_down;           /* [n_embd][n_ff] */
    float *attn_norm;           /* [n_embd] */
    float *q_norm, *k_norm;     /* [head_dim] gemma4 */
    float *post_attn_norm;      /* [n_embd] gemma4 */
    float *ffn_norm;            /* [n_embd] */
    float *post_ffw_norm;       /* [n_embd] gemma4 */
    hachi_mat inp_gate;         /* [n_embd_pl][n_embd] gemma4 per-layer input gate */
    hachi_mat proj;             /* [n_embd][n_embd_pl] gemma4 */
    float *post_norm;           /* [n_embd] gemma4 */
    float out_scale;            /* layer_output_scale (1 when absent) */
} hachi_layer;

struct hachi_model {
    hachi_gguf *gguf;
    hachi_tokenizer *tok;
    const hachi_kernels *kern;
    enum hachi_arch arch;
    char arch_name[32];
    char path[512];
    int n_layer, n_embd, n_head, n_head_kv, n_vocab, n_ctx_train;
    int head_dim_full, head_dim_swa;   /* llama: both = n_embd / n_head */
    int n_rot;                         /* llama: rotated dims per head */
    int window;                        /* gemma4 sliding window (0: none) */
    int n_shared_kv;                   /* gemma4: last n layers reuse earlier caches */
    int n_embd_pl;                     /* gemma4 per-layer input width (0: none) */
    bool rope_neox;
    float rope_base, rope_base_swa, rms_eps, softcap, attn_scale;
    float *rope_freqs;                 /* [head_dim_full/2] or NULL */
    hachi_mat tok_embd;                /* [n_vocab][n_embd] */
    hachi_mat output;                  /* [n_vocab][n_embd] (= tok_embd when tied) */
    float *output_norm;                /* [n_embd] */
    hachi_mat pl_tok_embd;             /* [n_vocab][n_layer*n_embd_pl] */
    hachi_mat pl_model_proj;           /* [n_layer*n_embd_pl][n_embd] */
    float *pl_proj_norm;               /* [n_embd_pl] */
    hachi_layer *layers;               /* [n_layer] */
    /* gemma4-assistant (a drafter for a gemma4 target, run by mtp.c; no session of its own) */
    int n_embd_out;                    /* the target's width: the hidden row taken in and handed on */
    hachi_mat nextn_pre;               /* [n_embd][2 * n_embd_out]: concat(target embedding, h) -> n_embd */
    hachi_mat nextn_post;              /* [n_embd_out][n_embd]: the next step's h */
    hachi_mat centroids;               /* [n_centroids][n_embd] masked_embd_centroids; data NULL: dense head */
    int32_t *ordering;                 /* [n_vocab] masked_embd_ordering: token ids, cluster by cluster
                                          (n_vocab / n_centroids each); NULL without centroids */
    int n_centroids, centroid_top_k;   /* clusters, and how many a draft step keeps (32) */
    size_t weight_bytes;               /* bytes of all matrices read per token (excl. embeddings rows) */
    void *x8;                          /* the interleaved copies of the repacked matrices (anonymous map) */
    size_t x8_bytes;
    pthread_t read_ahead;              /* reads the row-lookup tables into the page cache (model.c) */
    bool reading_ahead;                /* that thread runs (joined by hachi_model_free) */
    atomic_bool stop_read_ahead;
};

const hachi_tokenizer *hachi_model_tokenizer(const hachi_model *model);
const hachi_gguf *hachi_model_gguf(const hachi_model *model);
/* An id of the model file (its size, and each tensor's name, type, shape and first and last
 * bytes): what prompt caches and heads files are checked against. */
uint64_t hachi_model_id(const hachi_model *model);

#endif
