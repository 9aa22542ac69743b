/* hachi — run Gemma 4 (and llama-family) GGUF models on CPUs.
 *
 * One header, opaque handles; the functions declared here (HACHI_API) are the only
 * symbols libhachi.so exports. Every function that can fail returns a hachi_status; on
 * failure hachi_last_error() gives a one-line message naming the file, key, tensor or
 * value at fault. Free functions accept NULL. The library never calls exit() or abort().
 *
 * Lifetimes: a model must outlive every session, sampler use and detokenizer made from
 * it; a session outlives what points into it (hachi_session_logits, hachi_session_profile).
 * Pointers into a session stay valid until its next eval, rewind, load or free.
 *
 * Threads: a loaded model is read-only and may be shared by sessions running on several
 * threads at once (tested). A session, a sampler or a detokenizer is used by one thread
 * at a time. hachi_last_error() is per thread: it describes the calling thread's last
 * failure. Each session owns a pool of worker threads (hachi_session_params.n_threads). */
#ifndef HACHI_H
#define HACHI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(HACHI_BUILD) && defined(__GNUC__)
#define HACHI_API __attribute__((visibility("default")))
#else
#define HACHI_API
#endif

/* 0.x: a minor version may change the ABI (0.5.0: hachi_sampler_params grew two fields; 0.6.0:
 * logit biases and constraints in the sampler); build against the header of the library you link */
#define HACHI_VERSION "0.6.0"
HACHI_API const char *hachi_version(void);   /* HACHI_VERSION of the library linked in */

typedef enum hachi_status {
    HACHI_OK = 0,
    HACHI_ERR_INVALID_ARG = 1,   /* a parameter out of range, a bad flag value */
    HACHI_ERR_IO = 2,            /* a file missing, unreadable or unwritable */
    HACHI_ERR_FORMAT = 3,        /* a malformed file (GGUF, checkpoint, tokenizer) */
    HACHI_ERR_UNSUPPORTED = 4,   /* well-formed but not supported: architecture, tensor type */
    HACHI_ERR_NOMEM = 5,
    HACHI_ERR_CONTEXT_FULL = 6,  /* more tokens than the session's context holds */
    HACHI_ERR_INTERNAL = 7,
    HACHI_ERR_ABORTED = 8,       /* a progress callback asked to stop */
} hachi_status;

/* Progress of long work (model load and repack: bytes; an eval of several chunks: tokens):
 * done of total so far. Return false to stop: the call then fails with HACHI_ERR_ABORTED. */
typedef bool (*hachi_progress_fn)(void *ctx, double done, double total);

HACHI_API const char *hachi_last_error(void);          /* thread-local; "" when none */
HACHI_API const char *hachi_status_str(hachi_status st);

typedef struct hachi_model hachi_model;
typedef struct hachi_session hachi_session;
typedef struct hachi_sampler hachi_sampler;
typedef struct hachi_detok hachi_detok;
typedef struct hachi_heads hachi_heads;

/* ---- model ---------------------------------------------------------------- */

typedef struct hachi_model_params {
    bool vocab_only;        /* load the tokenizer only (no tensors needed) */
    bool no_repack;         /* keep every matrix in the file's layout (default: Q4_0, Q4_K, Q8_0,
                               Q5_K, Q6_K rows are interleaved 8 by 8 at load for the SIMD kernels
                               that have them; same bytes) */
    hachi_progress_fn progress;  /* NULL = none; called during the repack (bytes done of total) */
    void *progress_ctx;
} hachi_model_params;

HACHI_API hachi_model_params hachi_model_default_params(void);
HACHI_API hachi_status hachi_model_load(const char *path, const hachi_model_params *params, hachi_model **out);
HACHI_API void hachi_model_free(hachi_model *model);

HACHI_API const char *hachi_model_arch(const hachi_model *model);     /* "gemma4", "llama" */
HACHI_API int32_t hachi_model_n_vocab(const hachi_model *model);
HACHI_API int32_t hachi_model_n_ctx_train(const hachi_model *model);
HACHI_API int32_t hachi_model_n_layer(const hachi_model *model);
HACHI_API int32_t hachi_model_n_head(const hachi_model *model);                  /* query heads per layer */
HACHI_API bool    hachi_model_layer_sliding(const hachi_model *model, int32_t layer);  /* a sliding-window layer */
HACHI_API int32_t hachi_model_bos(const hachi_model *model);
HACHI_API int32_t hachi_model_eos(const hachi_model *model);
HACHI_API bool    hachi_model_is_eog(const hachi_model *model, int32_t token); /* EOS, end of turn, ... */
HACHI_API size_t  hachi_model_file_bytes(const hachi_model *model);
HACHI_API size_t  hachi_model_weight_bytes(const hachi_model *model);    /* matrix bytes one token reads */
HACHI_API size_t  hachi_model_repacked_bytes(const hachi_model *model);  /* of which interleaved at load */
HACHI_API int32_t hachi_model_file_type(const hachi_model *model);       /* general.file_type; -1: absent */
/* Human-readable description (hyperparameters, tokenizer, tensors) into f (nothing for NULLs). */
HACHI_API void    hachi_model_print_info(const hachi_model *model, void *file /* FILE* */);

/* ---- tokenizer --------------------------------------------------------------- */

/* Encode text[0..len). Writes at most cap ids into out and the number needed into
 * *n_out (which may exceed cap: call again with a larger buffer). */
HACHI_API hachi_status hachi_tokenize(const hachi_model *model, const char *text, size_t len,
                            bool add_bos, bool parse_special,
                            int32_t *out, int32_t cap, int32_t *n_out);
/* hachi_tokenize with specials on, except that a control token's text overlapping one of the
 * n_plain byte ranges [plain[2i], plain[2i] + plain[2i+1]) of text stays text: a chat's messages
 * (hachi_chat_turn_spans) inside its template's markers. */
HACHI_API hachi_status hachi_tokenize_spans(const hachi_model *model, const char *text, size_t len, bool add_bos,
                                            const size_t *plain, int32_t n_plain, int32_t *out, int32_t cap,
                                            int32_t *n_out);
/* The text of one token (byte tokens give their byte; may be a partial UTF-8
 * sequence). Returns the byte length written (<= cap) or -1 on a bad id. */
HACHI_API int32_t hachi_token_to_text(const hachi_model *model, int32_t token, char *buf, int32_t cap);
/* A control token (BOS, EOS, a turn marker): its text is not the reply's (the detokenizer gives nothing) */
HACHI_API bool    hachi_token_is_control(const hachi_model *model, int32_t token);

/* Streaming detokenizer: pushes tokens, emits only complete UTF-8 sequences; control
 * tokens give nothing, and the first piece loses the SentencePiece leading space when
 * the vocabulary adds one. Allocated once at create (the model must outlive it);
 * push and flush allocate nothing. */
HACHI_API hachi_status hachi_detok_create(const hachi_model *model, hachi_detok **out);
HACHI_API void    hachi_detok_free(hachi_detok *d);
/* Starts a new text (what is pending is dropped). at_start false: the text continues
 * text already shown (a prompt), so no leading space is stripped. */
HACHI_API void    hachi_detok_reset(hachi_detok *d, bool at_start);
/* Appends the printable text of token to out (cap >= HACHI_DETOK_MAX always suffices: a
 * piece's text is cut at 1024 bytes, up to 8 held back from the token before go with it, and
 * each byte of them that is not UTF-8 becomes U+FFFD's 3; most pieces are under 64 bytes);
 * returns bytes written (0, the token not taken, for a NULL d or out or a cap <= 0). */
#define HACHI_DETOK_MAX 3096
HACHI_API int32_t hachi_detok_push(hachi_detok *d, int32_t token, char *out, int32_t cap);
/* Emits what is left (an incomplete sequence becomes U+FFFD). */
HACHI_API int32_t hachi_detok_flush(hachi_detok *d, char *out, int32_t cap);
/* Gemma 4 writes a reply's thoughts between its control tokens <|channel> and <channel|>
 * ("thought\n..." with thinking on; an empty one may end a reply even with it off). in_thought:
 * whether the text the last push or flush returned lies in one (the markers print nothing; the
 * bytes a marker flushes belong to the text before it); thought_tokens: tokens inside thoughts
 * since the last reset. A reply's reader routes that text apart (chat: stderr; serve:
 * reasoning_content); run prints it with the rest. */
HACHI_API bool    hachi_detok_in_thought(const hachi_detok *d);
HACHI_API int32_t hachi_detok_thought_tokens(const hachi_detok *d);
/* Gemma 4's tool calls lie between its control tokens <|tool_call> and <tool_call|>
 * ("call:NAME{ARGS}"); in_tool_call: whether the last push or flush returned such text, in which
 * control tokens write their own text (the arguments' string quotes <|"|>). */
HACHI_API bool    hachi_detok_in_tool_call(const hachi_detok *d);
/* Whether the next token with text pushed loses its leading space (a text's first piece, where
 * the vocabulary prefixes one): for a reader that lines up tokens with the text. */
HACHI_API bool    hachi_detok_strips_space(const hachi_detok *d);

/* ---- session: one static plan for one context size --------------------------- */

/* How K/V rows are stored. f16 is the default; f32 for exactness checks (twice the bytes);
 * int8 (lossy, about half the bytes of f16): each K/V head of a row symmetric int8 with one
 * f32 scale, max|x| / 127 over its head_dim values. */
typedef enum hachi_kv_type { HACHI_KV_F16 = 0, HACHI_KV_F32 = 1, HACHI_KV_INT8 = 2 } hachi_kv_type;
HACHI_API const char *hachi_kv_type_name(hachi_kv_type type);   /* "f16", "f32", "int8"; "unknown" */

/* Streaming heads (DuoAttention style; lossy, see README): a query head of a full-attention
 * layer that streams attends only to its sink (positions < sink) and its recent window (the
 * last `window` positions up to its own); the others attend to every key (or their page-sparse
 * selection). A layer whose heads all stream reads only its sink and window of the cache.
 * `hachi heads` classifies a model's heads and saves them; the file is documented in README. */
HACHI_API hachi_status hachi_heads_create(const hachi_model *model, int32_t sink, int32_t window, hachi_heads **out);
/* Loads a heads file, checked against model (its id, architecture, layers and heads). */
HACHI_API hachi_status hachi_heads_load(const hachi_model *model, const char *path, hachi_heads **out);
HACHI_API hachi_status hachi_heads_save(const hachi_heads *heads, const char *path);
HACHI_API void    hachi_heads_free(hachi_heads *heads);
/* Marks query head `head` of layer `layer` (a full-attention layer) streaming or not. */
HACHI_API hachi_status hachi_heads_set(hachi_heads *heads, int32_t layer, int32_t head, bool streaming);
HACHI_API bool    hachi_heads_get(const hachi_heads *heads, int32_t layer, int32_t head);
HACHI_API int32_t hachi_heads_count(const hachi_heads *heads);   /* streaming heads */
HACHI_API int32_t hachi_heads_sink(const hachi_heads *heads);
HACHI_API int32_t hachi_heads_window(const hachi_heads *heads);

#define HACHI_CTX_MIN 2048
#define HACHI_CTX_MAX 131072
typedef struct hachi_session_params {
    int32_t n_ctx;          /* context mode: a power of two from 2048 to 131072 (0 = 2048) */
    int32_t n_threads;      /* 0 = number of physical cores */
    int32_t n_batch;        /* prefill chunk (tokens per forward), default 64 */
    const char *chunks;     /* profile chunk boundaries, e.g. "8,15,25"; NULL = DESIGN.md's */
    bool profile;           /* collect per-chunk timings */
    hachi_kv_type kv_type;  /* K/V storage, HACHI_KV_F16 by default */
    int32_t sparse_budget;  /* page-sparse attention on full-attention layers (lossy, see README):
                               keys attended per query, in pages of 16 positions: page 0, the last
                               two pages and the best-scoring others; a multiple of 16 from 48 to
                               16384. 0 = dense (the default) */
    int32_t draft_budget;   /* self-speculation: the page-sparse budget (as sparse_budget) of the draft
                               steps hachi_session_eval_draft runs; 0 = none (the default). Keeps page
                               metadata on the full-attention caches (128 bytes a position) */
    const hachi_heads *heads;    /* streaming heads of this model; NULL = none. Read at create only */
    hachi_progress_fn progress;  /* NULL = none; an eval of more than n_batch tokens calls it after
                                    each chunk (tokens done of the eval's). On a stop the chunks done
                                    stay evaluated (hachi_session_pos) and no logits are kept. */
    void *progress_ctx;
} hachi_session_params;

HACHI_API hachi_session_params hachi_session_default_params(void);
HACHI_API hachi_status hachi_session_create(const hachi_model *model, const hachi_session_params *params,
                                  hachi_session **out);
HACHI_API void hachi_session_free(hachi_session *s);

/* Run n tokens at positions pos..pos+n-1 (pos = hachi_session_pos). When
 * logits_out is non-NULL it receives [n][n_vocab] logits, else only the last
 * row is kept (hachi_session_logits). Fails with HACHI_ERR_CONTEXT_FULL, changing
 * nothing, when the tokens do not fit. */
HACHI_API hachi_status hachi_session_eval(hachi_session *s, const int32_t *tokens, int32_t n, float *logits_out);
/* Self-speculation's draft step: hachi_session_eval (the last row's logits kept) with the
 * full-attention layers attending page-sparse at the session's draft_budget: the same weights at
 * a fraction of the KV reads (lossy; its tokens are drafts that a dense eval of the same positions
 * judges after a rewind). HACHI_ERR_INVALID_ARG for a session created without a draft_budget. */
HACHI_API hachi_status hachi_session_eval_draft(hachi_session *s, const int32_t *tokens, int32_t n);
HACHI_API int32_t hachi_session_draft_budget(const hachi_session *s);   /* 0: no draft steps */
/* [n_vocab]: the logits of the last token evaluated, at position hachi_session_pos - 1; NULL when
 * there are none (nothing evaluated, an eval stopped by its progress callback, a rewind, a
 * restored checkpoint, a prompt cache that held none). */
HACHI_API const float *hachi_session_logits(const hachi_session *s);
HACHI_API int32_t hachi_session_pos(const hachi_session *s);
HACHI_API int32_t hachi_session_n_ctx(const hachi_session *s);
/* Forget positions >= pos (pos <= current). Sliding layers keep 16 spare ring slots, so a
 * rewind to within 16 tokens of the furthest position evaluated is exact; one that would need
 * keys the rings have overwritten since (further back, or after earlier rewinds) is refused
 * (HACHI_ERR_INVALID_ARG, nothing changed). A rewind to 0 always works. */
HACHI_API hachi_status hachi_session_rewind(hachi_session *s, int32_t pos);
/* Prompt cache (a safetensors file: the token ids, every K/V row the session holds, the last
 * token's logits, an id of the model). save: the state after tokens[0..n), n = the session's
 * position; written to path.tmp, then renamed over path. load: drops the session's state and
 * restores the longest prefix of tokens[0..n) that path holds: *n_loaded positions (then
 * hachi_session_pos); with *n_loaded == n also that token's logits, else the caller evaluates
 * tokens[*n_loaded..n) as usual. 0 restored, and HACHI_OK, when the file is for another model
 * or shares no prefix a sliding window can resume from (a prompt that extends the saved one
 * always can). A file that cannot be opened, is not a prompt cache, is of another version, or
 * is of this model with another KV type (f16, f32, int8: HACHI_ERR_UNSUPPORTED naming both)
 * is an error that leaves the session as it was; so is a damaged file: the file carries a
 * CRC-32C of its header and of every tensor, all checked (and that the tensors fill the file
 * exactly: nothing truncated or appended) before anything is loaded, and a mismatch is
 * HACHI_ERR_FORMAT naming the part. So is a file of this model whose rows another attention
 * computed (HACHI_ERR_UNSUPPORTED naming both: dense or page-sparse at another budget, other
 * streaming heads). Restored or not, the tokens that follow get bitwise the logits of an
 * uncached run (on as many threads as the run that saved it: a long prompt's keys are split
 * over the threads). */
HACHI_API hachi_status hachi_session_save(const hachi_session *s, const int32_t *tokens, int32_t n, const char *path);
HACHI_API hachi_status hachi_session_load(hachi_session *s, const char *path, const int32_t *tokens, int32_t n,
                                int32_t *n_loaded);
/* Ring checkpoints: a copy of the sliding-window rings at the session's position, so that the
 * session can later go back there after it has gone on past it by more than a rewind can undo
 * (16 tokens on sliding layers), as a server does when a new request shares a prefix with what
 * a slot held (llama.cpp's context checkpoints). Full-attention caches keep every position, so
 * they need no copy. create allocates the copy once (the rings' bytes: 2 x (window + 16) rows
 * per sliding cache); save and restore allocate nothing. restore puts the session back at the
 * checkpoint's position: the session must hold the same tokens below it as when it was saved
 * (the caller keeps the token history; a session that went below it and evaluated other tokens
 * must not be restored) and be at or past it. No logits are kept: evaluate at least one token
 * next, whose logits are then bitwise those of a session that never left (tested). */
typedef struct hachi_checkpoint hachi_checkpoint;
HACHI_API hachi_status hachi_checkpoint_create(const hachi_session *s, hachi_checkpoint **out);
HACHI_API void    hachi_checkpoint_free(hachi_checkpoint *c);
HACHI_API int32_t hachi_checkpoint_pos(const hachi_checkpoint *c);   /* -1: empty (and NULL) */
HACHI_API void    hachi_checkpoint_clear(hachi_checkpoint *c);         /* empty it */
HACHI_API size_t  hachi_checkpoint_bytes(const hachi_checkpoint *c);
HACHI_API hachi_status hachi_session_checkpoint_save(const hachi_session *s, hachi_checkpoint *c);
HACHI_API hachi_status hachi_session_checkpoint_restore(hachi_session *s, const hachi_checkpoint *c);
/* The name of the kernel table the session runs ("avx2", "neon", "ref", ...). */
HACHI_API const char *hachi_session_kernels(const hachi_session *s);
HACHI_API const hachi_model *hachi_session_model(const hachi_session *s);
/* Print the plan (per layer: kind, window, KV owner, bytes) and totals into f (nothing for NULLs). */
HACHI_API void hachi_session_print_plan(const hachi_session *s, void *file /* FILE* */);
HACHI_API size_t hachi_session_plan_bytes(const hachi_session *s);
/* Bytes of K/V one decode step reads after depth positions (every layer reads its cache,
 * a sliding layer its window at most). */
HACHI_API size_t hachi_session_kv_bytes_read(const hachi_session *s, int32_t depth);

/* Per-chunk timings of the forwards since the last reset (hachi_session_params.profile):
 * chunk c covers layers [bounds[c], bounds[c+1]). */
#define HACHI_MAX_CHUNKS 8
typedef struct hachi_profile {
    int32_t n_chunks;
    int32_t bounds[HACHI_MAX_CHUNKS + 1];
    double emb_ms, ple_ms, head_ms;                 /* embeddings, per-layer inputs, output head */
    double chunk_ms[HACHI_MAX_CHUNKS];              /* each chunk's layers */
    double attn_ms[HACHI_MAX_CHUNKS];               /* of which attention */
    int32_t steps;                                  /* forwards that ran the head */
    double matmul_ms[HACHI_MAX_CHUNKS];             /* of each chunk's layers: the matmuls */
    int64_t tokens;                                 /* tokens through the layers (a prefill: many per step) */
} hachi_profile;
HACHI_API const hachi_profile *hachi_session_profile(const hachi_session *s);
HACHI_API void hachi_session_profile_reset(hachi_session *s);

/* Benchmarking: write K/V rows that look like real ones (unit-RMS random values) for the
 * next n positions without computing them, advancing the position (at most to n_ctx). Decode
 * speed after it is that at the filled depth; the model's outputs are then meaningless. */
HACHI_API hachi_status hachi_session_fill_synthetic(hachi_session *s, int32_t n, uint64_t seed);

/* ---- sampler ----------------------------------------------------------------- */

typedef struct hachi_sampler_params {
    float    temp;           /* 0 = greedy (ties to the lowest id) */
    int32_t  top_k;          /* 0 = off */
    float    top_p;          /* 1 = off */
    float    min_p;          /* 0 = off */
    float    repeat_penalty; /* 1 = off */
    int32_t  repeat_last_n;  /* window of the penalties (repeat, presence, frequency) */
    uint64_t seed;
    float    presence_penalty;   /* 0 = off: logit -= presence for a token sampled in the window */
    float    frequency_penalty;  /* 0 = off: logit -= frequency * the times it was sampled in the window */
} hachi_sampler_params;

HACHI_API hachi_sampler_params hachi_sampler_default_params(void);
HACHI_API hachi_status hachi_sampler_create(const hachi_sampler_params *params, int32_t n_vocab, hachi_sampler **out);
HACHI_API void    hachi_sampler_free(hachi_sampler *s);
HACHI_API int32_t hachi_sampler_sample(hachi_sampler *s, const float *logits);  /* allocates nothing; -1 for NULL */
/* Record a token for the penalties: a sampled one (all three count it), or a prompt's (only the
 * repetition penalty does: presence and frequency count sampled tokens, as OpenAI's API defines them) */
HACHI_API void    hachi_sampler_accept(hachi_sampler *s, int32_t token);
HACHI_API void    hachi_sampler_accept_prompt(hachi_sampler *s, int32_t token);
HACHI_API void    hachi_sampler_reset(hachi_sampler *s);
/* A constraint on what is sampled (a grammar): mask(ctx, logits, n_vocab) sets the logits of the
 * tokens that may not come next to -INFINITY, on the sampler's copy, before the biases and the
 * penalties, each time the sampler reads logits (a sample, a distribution: a speculative step's
 * drafts are judged under it, so it stays lossless); accept(ctx, token) advances it by each token
 * hachi_sampler_accept records (not a prompt's). NULL c or mask: none. The callbacks must not
 * allocate; the sampler keeps the struct's values, not c. */
typedef struct hachi_sampler_constraint {
    void (*mask)(void *ctx, float *logits, int32_t n_vocab);
    void (*accept)(void *ctx, int32_t token);
    void *ctx;
} hachi_sampler_constraint;
HACHI_API void    hachi_sampler_set_constraint(hachi_sampler *s, const hachi_sampler_constraint *c);
/* OpenAI's logit_bias: bias[i] added to token ids[i]'s logit before the penalties and the rest
 * (in greedy decoding too; -INFINITY: never that token); replaces the sampler's list (n 0: none).
 * HACHI_ERR_INVALID_ARG, nothing changed, for an id outside the vocabulary or a bias that is NaN
 * or +inf. Allocates (once); hachi_sampler_reset keeps the list. */
HACHI_API hachi_status hachi_sampler_set_logit_bias(hachi_sampler *s, const int32_t *ids, const float *bias, int32_t n);

/* ---- speculative decoding (lossless) --------------------------------------------- */

/* A hachi_spec is the decode loop of a session: it samples the next tokens with a sampler
 * and, with a drafter, evaluates the last sampled token together with tokens drafted to
 * follow it in one hachi_session_eval, samples each of that forward's rows in order, keeps
 * the drafted tokens while the samples equal them and rewinds the rest. Exactness: the
 * tokens are those of plain decoding with the same sampler,
 *     t = hachi_sampler_sample(smp, logits);
 *     if (!hachi_model_is_eog(model, t)) hachi_sampler_accept(smp, t);
 *     evaluate t alone; repeat,
 * for any sampler settings and seed and any drafter (a forward of up to 16 tokens gives
 * bitwise the logits of decoding them one by one). Drafts only decide how many forwards
 * that takes. hachi run and hachi chat decode through it, with or without --draft. The one
 * exception is opt-in: sampled drafts (hachi_spec_params.sample_drafts) give
 * plain decoding's distribution by rejection sampling, not its tokens for a seed. */

#define HACHI_DRAFT_MAX 15   /* drafted tokens per forward: with the token before them, at most
                              * 16 rows, which verify bitwise like decode steps and rewind exactly */
#define HACHI_SPEC_STEP_MAX (HACHI_DRAFT_MAX + 1)   /* most tokens one hachi_spec_step returns */

typedef struct hachi_spec hachi_spec;

typedef enum hachi_drafter {
    HACHI_DRAFTER_NONE = 0,     /* plain decoding: one forward per token */
    HACHI_DRAFTER_LOOKUP = 1,   /* prompt lookup over the session's tokens (hachi_draft_lookup) */
    HACHI_DRAFTER_ASSISTANT = 2,    /* a Gemma 4 assistant (hachi_spec_params.assistant) */
    HACHI_DRAFTER_AUTO = 3,     /* per forward: prompt lookup where it finds a match, the assistant
                                   (when one is given) or self-speculation (when the session has a
                                   draft_budget) where that promises more; always adaptive */
    HACHI_DRAFTER_SELF = 4,     /* self-speculation (TriForce's idea): the target itself drafts, its
                                   full-attention layers page-sparse at the session's draft_budget
                                   (hachi_session_eval_draft), one draft step per token; pays where
                                   the KV reads rival the weights' (long contexts) */
} hachi_drafter;

typedef struct hachi_spec_params {
    hachi_drafter drafter;
    int32_t n_draft;            /* most drafted tokens per forward, 1..HACHI_DRAFT_MAX (not for NONE) */
    int32_t ngram_min, ngram_max;   /* LOOKUP: the n-gram lengths matched, longest first (2, 4) */
    /* ASSISTANT: a model of GGUF architecture gemma4-assistant (hachi_model_load) made for the
     * session's model (hachi_assistant_check); borrowed, it must outlive the spec. It drafts from
     * the target's last hidden row and its KV caches: no session, no cache of its own. */
    const hachi_model *assistant;
    /* ASSISTANT or SELF with a sampler at temperature > 0: draw each draft from the drafter's own
     * distribution q (the sampler's settings over the drafter's logits), keep it with probability
     * min(1, p/q) (p: the target's distribution the sampler draws from), and on the first
     * rejection sample from normalize(max(p - q, 0)). The output then has plain decoding's
     * distribution, but not its tokens for a given seed. false (the default): greedy drafts (the
     * drafter's argmax), kept while the samples equal them: plain decoding's tokens exactly. */
    bool sample_drafts;
    /* Draft length chosen per forward (n_draft is then the most): the k that maximises the
     * expected tokens per forward, (1 - a^(k+1)) / (1 - a) for a drafter whose drafts are kept
     * with running probability a (each drafter its own, from its recent forwards), over the
     * forward's cost: the time of a forward of k + 1 rows (measured while decoding, or
     * forward_cost) plus k draft steps (the assistant's or self-speculation's, measured; costs
     * are medians of recent timings). k = 0 (no draft) where drafting does not promise 10% over
     * plain decoding; then one forward in 16..256 (doubling while they fail) still drafts one
     * token (the drafters in turn) to follow one that gets better. The tokens do not change. */
    bool adaptive;
    /* adaptive: NULL (measure), or [n_draft + 1] fixed costs of forwards of 1..n_draft + 1 rows
     * in any unit (e.g. ms), borrowed for the spec's life; the assistant's draft steps then cost
     * nothing, self-speculation's each a one-row forward. */
    const float *forward_cost;
} hachi_spec_params;

typedef struct hachi_spec_stats {
    int64_t forwards;           /* hachi_session_eval calls of the loop (prefills not counted) */
    int64_t drafted;            /* drafted tokens evaluated */
    int64_t accepted;           /* drafted tokens kept (each saved a forward) */
    int64_t draft_forwards;     /* forwards that verified at least one draft (mean accepted length:
                                   1 + accepted / draft_forwards tokens per such forward) */
    int64_t accepted_at[HACHI_DRAFT_MAX];   /* forwards that kept draft i (0: the first) */
    double draft_ms;            /* time spent drafting */
    int64_t lookup_forwards;    /* AUTO: draft forwards whose drafts came from prompt lookup */
    int64_t self_forwards;      /* draft forwards whose drafts came from self-speculation */
} hachi_spec_stats;

/* Whether assistant (a gemma4-assistant model) can draft for target: architectures, the width
 * of the hidden row, the vocabulary (every token's text), and per assistant layer the target
 * cache it reads (the target's layer n_layer - 2 for a sliding layer, n_layer - 1 for a full
 * one: their head dims, KV heads, window). A mismatch is an error naming both shapes. */
HACHI_API hachi_status hachi_assistant_check(const hachi_model *target, const hachi_model *assistant);

/* LOOKUP, n_draft 4, n-grams 4 down to 2. */
HACHI_API hachi_spec_params hachi_spec_default_params(void);
/* Every buffer of the loop is allocated here (a step allocates nothing). The spec borrows
 * model, s and smp: s must be a session of model and smp a sampler over its vocabulary,
 * and all three must outlive it (free the spec first). Not thread-safe; one spec per session. */
HACHI_API hachi_status hachi_spec_create(const hachi_model *model, hachi_session *s, hachi_sampler *smp,
                               const hachi_spec_params *params, hachi_spec **out);
HACHI_API void hachi_spec_free(hachi_spec *sp);
/* Tokens the caller has just evaluated itself (a prompt, a chat turn; with hachi_session_eval
 * or hachi_session_load): they are the last n of the session's positions. Records them in
 * the sampler's penalty history (as a prompt's: hachi_sampler_accept_prompt) and the drafter's
 * text; the next step samples from
 * hachi_session_logits. n = 0: only that. Fails (HACHI_ERR_INVALID_ARG) while a token is
 * pending (hachi_spec_flush first) or when the session holds fewer than n tokens. */
HACHI_API hachi_status hachi_spec_feed(hachi_spec *sp, const int32_t *tokens, int32_t n);
/* The next 1..max_tokens tokens (at most HACHI_SPEC_STEP_MAX) into out, their count in *n_out.
 * The last token returned stays pending: sampled and recorded, not yet evaluated. A step
 * with a token pending evaluates it in one forward with the drafts (as many as fit
 * max_tokens - 1 and the context), then samples that forward's rows in order and returns
 * the samples up to the first that differs from its draft, rewinding the drafted positions
 * not kept; without one (after feed, flush or an end of generation) it samples one token from the
 * current logits, without a forward. Between steps the session holds every token returned
 * but the pending one. An end-of-generation token (hachi_model_is_eog) ends the step: it is
 * returned last, neither recorded nor evaluated, and nothing is pending; a further step
 * would sample again from the same logits. HACHI_ERR_CONTEXT_FULL, with *n_out = 0 and
 * nothing changed, when the pending token does not fit the context. */
HACHI_API hachi_status hachi_spec_step(hachi_spec *sp, int32_t max_tokens, int32_t *out, int32_t *n_out);
/* [n_vocab]: the target's logits that token out[i] of the last hachi_spec_step was drawn from
 * (before the sampler's settings: the model's own distribution, for log-probabilities). Valid
 * until the next step, feed or flush; NULL for i outside the last step's tokens. */
HACHI_API const float *hachi_spec_step_logits(const hachi_spec *sp, int32_t i);
/* Evaluate the pending token, if any (one forward), so that the session holds every token
 * returned, as before a next turn or hachi_session_save; the next step samples from its
 * logits. HACHI_ERR_CONTEXT_FULL, nothing changed, when it does not fit. */
HACHI_API hachi_status hachi_spec_flush(hachi_spec *sp);
/* Counts since create (all zero for NULL). */
HACHI_API const hachi_spec_stats *hachi_spec_get_stats(const hachi_spec *sp);

/* Prompt lookup: the tokens that followed the latest earlier occurrence of the last
 * n tokens of hist[0..n_hist), for n = ngram_max down to ngram_min (the first n that
 * matches). Writes at most max_draft of them (<= HACHI_DRAFT_MAX) into draft and returns
 * how many; 0 when nothing matches. The drafter HACHI_DRAFTER_LOOKUP. */
HACHI_API int32_t hachi_draft_lookup(const int32_t *hist, int32_t n_hist, int32_t ngram_min, int32_t ngram_max,
                           int32_t max_draft, int32_t *draft);

/* ---- chat ---------------------------------------------------------------------- */

typedef enum hachi_chat_format { HACHI_CHAT_GEMMA4, HACHI_CHAT_GEMMA3, HACHI_CHAT_PLAIN } hachi_chat_format;
/* The format of the model's vocabulary (and tokenizer.chat_template when present). */
HACHI_API hachi_chat_format hachi_chat_detect(const hachi_model *model);
/* The text to prefill for one user turn: on the first turn BOS and the system
 * prompt, on later turns the end of the previous reply first; Gemma 4's system and user text
 * trimmed of the whitespace at their ends (as its template does). Writes at most cap
 * bytes (NUL-terminated) and returns the full length; tokenize it with specials on. -1
 * (hachi_last_error) for a NULL model, a negative cap, or a NULL buf with cap > 0. */
HACHI_API int32_t hachi_chat_turn(const hachi_model *model, const char *system, const char *user, bool first,
                        char *buf, int32_t cap);
/* The same text, and where the system prompt and the user's text lie in it: plain[0], plain[1]
 * the system's offset and length, plain[2], plain[3] the user's (length 0: none). Tokenized by
 * hachi_tokenize_spans over those ranges, a control token's text inside them ("<turn|>" typed by
 * a user) stays text instead of closing the turn; only the format's own markers are control. */
HACHI_API int32_t hachi_chat_turn_spans(const hachi_model *model, const char *system, const char *user, bool first,
                                        char *buf, int32_t cap, size_t plain[4]);
/* hachi_chat_turn_spans with Gemma 4's thinking on (think true) as its template renders it: the
 * first turn's system turn opens with <|think|> (written without a system prompt too) and a reply
 * starts bare, the model writing its thought first; think false: hachi_chat_turn_spans. -1
 * (hachi_last_error) for think on a model without Gemma 4's format or its <|think|> token. */
HACHI_API int32_t hachi_chat_turn_think(const hachi_model *model, const char *system, const char *user, bool first,
                                        bool think, char *buf, int32_t cap, size_t plain[4]);
/* What the format puts at the start of every reply, after the turn's markers, and so at the end
 * of hachi_chat_turn's text: for Gemma 4 files whose tokenizer.chat_template opens a reply with
 * an empty thought (thinking off) "<|channel>thought\n<channel|>", else "". A conversation's
 * earlier replies are rendered without it, as that template renders them. Never NULL. */
HACHI_API const char *hachi_chat_reply_prefix(const hachi_model *model);

/* ---- models for tests and benchmarks, conversion, the machine ----------------- */

/* A random-weight Gemma 4 written as GGUF, with the real E2B dimensions or a tiny test shape,
 * in one of the weight mixes published files use. Metadata keys and tensor names mirror
 * llama.cpp's gemma4 files. The bytes depend on the seed only. */
typedef struct hachi_synth_params {
    const char *arch;       /* "gemma4" (the only one) */
    const char *shape;      /* "e2b" (35 layers, 1536 wide, 262144 vocab) or "tiny" (10 layers, 256 wide) */
    const char *type;       /* "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m", "q5_k_m" */
    uint64_t seed;
    int n_threads;          /* quantization threads; 0 = number of online CPUs (at most 16) */
} hachi_synth_params;
/* Called from the writing thread with the fraction of tensor bytes written so far. */
typedef void (*hachi_synth_progress_fn)(void *ctx, double done);
HACHI_API hachi_synth_params hachi_synth_default_params(void);   /* gemma4, tiny, f32, seed 1 */
/* Writes out_path (through out_path.tmp and a rename). progress may be NULL. */
HACHI_API hachi_status hachi_synth(const hachi_synth_params *p, const char *out_path,
                         hachi_synth_progress_fn progress, void *progress_ctx);

/* A llama2.c checkpoint (legacy v0 header, then float32 weights) and its tokenizer.bin as a
 * llama-architecture GGUF (llama.cpp's names, F32, SentencePiece vocabulary). Written through
 * out_gguf.tmp and a rename: never half-written. Errors name the file and what is wrong. */
HACHI_API hachi_status hachi_convert_llama2c(const char *model_bin, const char *tok_bin, const char *out_gguf);

/* Memory read bandwidth in GB/s (1e9 bytes/s): n_threads threads (0 = physical cores) sum a
 * buffer of bytes (0 = 1 GiB, halved until it can be allocated, at least 64 MiB) with vector
 * loads; the best of passes (0 = several). Negative when no buffer or threads could be had. */
HACHI_API double hachi_measure_read_bandwidth(int n_threads, size_t bytes, int passes);
/* Number of physical cores (falls back to online CPUs). */
HACHI_API int hachi_physical_cores(void);

#ifdef __cplusplus
}
#endif
#endif
