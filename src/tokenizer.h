/* tokenizer: vocabularies from GGUF metadata and their encoders:
 *   "llama"  SentencePiece-style: scores, byte fallback <0xNN>, dummy prefix
 *   "gpt2"   byte-level BPE with merges and a pre-tokenizer
 *   "gemma4" BPE with merges, spaces as U+2581, byte fallback, no dummy prefix
 * Control / user-defined tokens are matched whole when parse_special is on. */
#ifndef HACHI_TOKENIZER_H
#define HACHI_TOKENIZER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "hachi.h"
#include "gguf.h"

typedef struct hachi_tokenizer hachi_tokenizer;

enum hachi_tok_kind { HACHI_TOK_SPM, HACHI_TOK_GPT2, HACHI_TOK_GEMMA4 };

/* Build from tokenizer.ggml.* keys; g must outlive the tokenizer. */
hachi_status hachi_tokenizer_load(const hachi_gguf *g, hachi_tokenizer **out);
void hachi_tokenizer_free(hachi_tokenizer *t);

int     hachi_tokenizer_kind(const hachi_tokenizer *t);
int32_t hachi_tokenizer_n_vocab(const hachi_tokenizer *t);
int32_t hachi_tokenizer_bos(const hachi_tokenizer *t);   /* -1 if none */
int32_t hachi_tokenizer_eos(const hachi_tokenizer *t);
bool    hachi_tokenizer_add_bos(const hachi_tokenizer *t); /* tokenizer.ggml.add_bos_token */
bool    hachi_tokenizer_is_eog(const hachi_tokenizer *t, int32_t id);
bool    hachi_tokenizer_is_control(const hachi_tokenizer *t, int32_t id);
/* Id of the token whose piece is exactly text, or -1. */
int32_t hachi_tokenizer_find(const hachi_tokenizer *t, const char *text);
/* The raw vocabulary piece (as stored in GGUF). */
const char *hachi_tokenizer_piece(const hachi_tokenizer *t, int32_t id, size_t *len);

/* Encode text[0..len); *out is allocated with hachi_malloc (caller hachi_free's it). */
hachi_status hachi_tokenizer_encode(const hachi_tokenizer *t, const char *text, size_t len,
                                    bool add_bos, bool parse_special, int32_t **out, int32_t *n_out);
/* The same with specials parsed but for control tokens whose text overlaps one of the n_plain
 * byte ranges [plain[2i], plain[2i] + plain[2i+1]) (a message's own text) */
hachi_status hachi_tokenizer_encode_spans(const hachi_tokenizer *t, const char *text, size_t len, bool add_bos,
                                          bool parse_special, const size_t *plain, int n_plain, int32_t **out,
                                          int32_t *n_out);
/* The text bytes of one token (byte token -> its byte, U+2581 -> ' ', GPT-2 byte
 * mapping undone; control, user-defined, unknown, unused tokens -> their piece).
 * Writes at most cap bytes and returns how many it wrote (a text longer than cap is
 * cut; hachi_tokenizer_max_piece_len bounds it), -1 on a bad id. */
int32_t hachi_tokenizer_token_text(const hachi_tokenizer *t, int32_t id, char *buf, int32_t cap);
/* Whether the decoder strips one leading space from the first piece (SentencePiece dummy prefix). */
bool    hachi_tokenizer_strips_leading_space(const hachi_tokenizer *t);
/* tokenizer.ggml.token_type of id (1 normal, 2 unknown, 3 control, 4 user-defined,
 * 5 unused, 6 byte), -1 on a bad id. Longest piece in bytes (bounds token_text). */
int     hachi_tokenizer_token_type(const hachi_tokenizer *t, int32_t id);
int32_t hachi_tokenizer_max_piece_len(const hachi_tokenizer *t);

/* The streaming detokenizer behind hachi_detok_push/flush, on a tokenizer directly:
 * the state it keeps between tokens. */
typedef struct hachi_detok_state {
    unsigned char pending[8];   /* the start of a UTF-8 sequence that a token boundary cut */
    int32_t n_pending;
    bool at_start;              /* nothing emitted yet: the first piece may lose its leading space */
} hachi_detok_state;
/* A new text; at_start false continues text already shown (no leading space stripped). */
void    hachi_tokenizer_detok_init(hachi_detok_state *d, bool at_start);
/* Control tokens produce nothing; the first piece loses one leading space when
 * hachi_tokenizer_strips_leading_space; output is always whole UTF-8 (invalid bytes ->
 * U+FFFD). out needs 3 bytes per byte of the token's text plus 12; what does not fit is
 * dropped. flush emits what is pending (an incomplete sequence becomes U+FFFD). */
int32_t hachi_tokenizer_detok_push(const hachi_tokenizer *t, hachi_detok_state *d, int32_t id, char *out, int32_t cap);
int32_t hachi_tokenizer_detok_flush(const hachi_tokenizer *t, hachi_detok_state *d, char *out, int32_t cap);

#endif
