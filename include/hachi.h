/* hachi — run Gemma 4 (and llama-family) GGUF models on CPUs.
 *
 * One header, opaque handles. Every function that can fail returns a
 * hachi_status; on failure hachi_last_error() gives a one-line message naming
 * the file, key, tensor or value at fault. Free functions accept NULL.
 * The library never calls exit() or abort(). */
#ifndef HACHI_H
#define HACHI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hachi_status {
    HACHI_OK = 0,
    HACHI_ERR_INVALID_ARG = 1,   /* a parameter out of range, a bad flag value */
    HACHI_ERR_IO = 2,            /* a file missing, unreadable or unwritable */
    HACHI_ERR_FORMAT = 3,        /* a malformed file (GGUF, checkpoint, tokenizer) */
    HACHI_ERR_UNSUPPORTED = 4,   /* well-formed but not supported: architecture, tensor type */
    HACHI_ERR_NOMEM = 5,
    HACHI_ERR_CONTEXT_FULL = 6,  /* more tokens than the session's context holds */
    HACHI_ERR_INTERNAL = 7,
} hachi_status;

const char *hachi_last_error(void);          /* thread-local; "" when none */
const char *hachi_status_str(hachi_status st);

typedef struct hachi_model hachi_model;
typedef struct hachi_session hachi_session;
typedef struct hachi_sampler hachi_sampler;
typedef struct hachi_detok hachi_detok;

/* ---- model ---------------------------------------------------------------- */

typedef struct hachi_model_params {
    bool vocab_only;        /* load the tokenizer only (no tensors needed) */
    bool no_repack;         /* keep Q4_0/Q4_K matrices in the file's layout (default: rows are
                               interleaved 8 by 8 at load for the SIMD kernels; same bytes) */
} hachi_model_params;

hachi_model_params hachi_model_default_params(void);
hachi_status hachi_model_load(const char *path, const hachi_model_params *params, hachi_model **out);
void hachi_model_free(hachi_model *model);

const char *hachi_model_arch(const hachi_model *model);     /* "gemma4", "llama" */
int32_t hachi_model_n_vocab(const hachi_model *model);
int32_t hachi_model_n_ctx_train(const hachi_model *model);
int32_t hachi_model_bos(const hachi_model *model);
int32_t hachi_model_eos(const hachi_model *model);
bool    hachi_model_is_eog(const hachi_model *model, int32_t token); /* EOS, end of turn, ... */
/* Human-readable description (hyperparameters, tokenizer, tensors) into f. */
void    hachi_model_print_info(const hachi_model *model, void *file /* FILE* */);

/* ---- tokenizer --------------------------------------------------------------- */

/* Encode text[0..len). Writes at most cap ids into out and the number needed into
 * *n_out (which may exceed cap: call again with a larger buffer). */
hachi_status hachi_tokenize(const hachi_model *model, const char *text, size_t len,
                            bool add_bos, bool parse_special,
                            int32_t *out, int32_t cap, int32_t *n_out);
/* The text of one token (byte tokens give their byte; may be a partial UTF-8
 * sequence). Returns the byte length written (<= cap) or -1 on a bad id. */
int32_t hachi_token_to_text(const hachi_model *model, int32_t token, char *buf, int32_t cap);

/* Streaming detokenizer: pushes tokens, emits only complete UTF-8 sequences; control
 * tokens give nothing, and the first piece loses the SentencePiece leading space when
 * the vocabulary adds one. Allocated once at create (the model must outlive it);
 * push and flush allocate nothing. */
hachi_status hachi_detok_create(const hachi_model *model, hachi_detok **out);
void    hachi_detok_free(hachi_detok *d);
/* Starts a new text (what is pending is dropped). at_start false: the text continues
 * text already shown (a prompt), so no leading space is stripped. */
void    hachi_detok_reset(hachi_detok *d, bool at_start);
/* Appends the printable text of token to out (cap >= 64 suffices); returns bytes written. */
int32_t hachi_detok_push(hachi_detok *d, int32_t token, char *out, int32_t cap);
/* Emits what is left (an incomplete sequence becomes U+FFFD). */
int32_t hachi_detok_flush(hachi_detok *d, char *out, int32_t cap);

/* ---- session: one static plan for one context size --------------------------- */

typedef struct hachi_session_params {
    int32_t n_ctx;          /* context mode: 2048, 4096, 8192, 16384, 32768 (0 = 2048 clamp to train ctx) */
    int32_t n_threads;      /* 0 = number of physical cores */
    int32_t n_batch;        /* prefill chunk (tokens per forward), default 64 */
    const char *chunks;     /* profile chunk boundaries, e.g. "8,15,25"; NULL = DESIGN.md's */
    bool profile;           /* collect per-chunk timings */
    bool kv_f32;            /* keep K/V in f32 instead of fp16 (twice the KV bytes; for exactness checks) */
} hachi_session_params;

hachi_session_params hachi_session_default_params(void);
hachi_status hachi_session_create(const hachi_model *model, const hachi_session_params *params,
                                  hachi_session **out);
void hachi_session_free(hachi_session *s);

/* Run n tokens at positions pos..pos+n-1 (pos = hachi_session_pos). When
 * logits_out is non-NULL it receives [n][n_vocab] logits, else only the last
 * row is kept (hachi_session_logits). Fails with HACHI_ERR_CONTEXT_FULL, changing
 * nothing, when the tokens do not fit. */
hachi_status hachi_session_eval(hachi_session *s, const int32_t *tokens, int32_t n, float *logits_out);
const float *hachi_session_logits(const hachi_session *s);   /* [n_vocab] of the last token */
int32_t hachi_session_pos(const hachi_session *s);
int32_t hachi_session_n_ctx(const hachi_session *s);
/* Forget positions >= pos (pos <= current). Sliding layers keep 16 spare ring slots,
 * so a rewind of up to 16 tokens is always exact. */
hachi_status hachi_session_rewind(hachi_session *s, int32_t pos);
/* Prompt cache (a safetensors file: the token ids, every K/V row the session holds, the last
 * token's logits, an id of the model). save: the state after tokens[0..n), n = the session's
 * position; written to path.tmp, then renamed over path. load: drops the session's state and
 * restores the longest prefix of tokens[0..n) that path holds: *n_loaded positions (then
 * hachi_session_pos); with *n_loaded == n also that token's logits, else the caller evaluates
 * tokens[*n_loaded..n) as usual. 0 restored, and HACHI_OK, when the file is for another model
 * or KV type or shares no prefix a sliding window can resume from (a prompt that extends the
 * saved one always can). A file that is not a prompt cache, or is damaged, is an error naming
 * what is wrong, with the session left at position 0. Restored or not, the tokens that follow
 * get bitwise the logits of an uncached run. */
hachi_status hachi_session_save(const hachi_session *s, const int32_t *tokens, int32_t n, const char *path);
hachi_status hachi_session_load(hachi_session *s, const char *path, const int32_t *tokens, int32_t n,
                                int32_t *n_loaded);
/* Print the plan (per layer: kind, window, KV owner, bytes) and totals into f. */
void hachi_session_print_plan(const hachi_session *s, void *file /* FILE* */);
size_t hachi_session_plan_bytes(const hachi_session *s);

/* ---- sampler ----------------------------------------------------------------- */

typedef struct hachi_sampler_params {
    float    temp;           /* 0 = greedy (ties to the lowest id) */
    int32_t  top_k;          /* 0 = off */
    float    top_p;          /* 1 = off */
    float    min_p;          /* 0 = off */
    float    repeat_penalty; /* 1 = off */
    int32_t  repeat_last_n;  /* window of the penalty */
    uint64_t seed;
} hachi_sampler_params;

hachi_sampler_params hachi_sampler_default_params(void);
hachi_status hachi_sampler_create(const hachi_sampler_params *params, int32_t n_vocab, hachi_sampler **out);
void    hachi_sampler_free(hachi_sampler *s);
int32_t hachi_sampler_sample(hachi_sampler *s, const float *logits);  /* allocates nothing */
void    hachi_sampler_accept(hachi_sampler *s, int32_t token);         /* record for the penalty */
void    hachi_sampler_reset(hachi_sampler *s);

/* ---- speculative decoding: prompt-lookup drafts ------------------------------ */

#define HACHI_DRAFT_MAX 15   /* drafted tokens per forward: with the token before them, at most
                              * 16 rows, which verify bitwise like decode steps and rewind exactly */
/* Prompt lookup: the tokens that followed the latest earlier occurrence of the last
 * n tokens of hist[0..n_hist), for n = ngram_max down to ngram_min (the first n that
 * matches). Writes at most max_draft of them (<= HACHI_DRAFT_MAX) into draft and returns
 * how many; 0 when nothing matches. Exact use (hachi run --draft): evaluate the last
 * token and the draft in one hachi_session_eval with logits_out; sample each row in
 * order with the same sampler as usual; keep the drafted tokens while the sample equals
 * them, emit the first sample that does not (or the sample after the last draft), and
 * hachi_session_rewind past the rejected rest. The tokens are those of decoding one at
 * a time, for any sampler settings and seed. */
int32_t hachi_draft_lookup(const int32_t *hist, int32_t n_hist, int32_t ngram_min, int32_t ngram_max,
                           int32_t max_draft, int32_t *draft);


/* ---- chat ---------------------------------------------------------------------- */

typedef enum hachi_chat_format { HACHI_CHAT_GEMMA4, HACHI_CHAT_GEMMA3, HACHI_CHAT_PLAIN } hachi_chat_format;
/* The format of the model's vocabulary (and tokenizer.chat_template when present). */
hachi_chat_format hachi_chat_detect(const hachi_model *model);
/* The text to prefill for one user turn: on the first turn BOS and the system
 * prompt, on later turns the end of the previous reply first. Writes at most cap
 * bytes (NUL-terminated) and returns the full length; tokenize it with specials on. */
int32_t hachi_chat_turn(const hachi_model *model, const char *system, const char *user, bool first,
                        char *buf, int32_t cap);

#ifdef __cplusplus
}
#endif
#endif
