/* tokenizer_impl: what tokenizer.c (loading, lookups, decoding) and tokenize.c
 * (the encoders) share: the vocabulary struct and its lookups. Not a public header. */
#ifndef HACHI_TOKENIZER_IMPL_H
#define HACHI_TOKENIZER_IMPL_H
#include "tokenizer.h"

enum { TT_UNDEF = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

typedef struct {
    uint32_t hash;          /* FNV-1a of the merge text "left right" */
    int32_t rank;           /* its index in tokenizer.ggml.merges; -1 = empty slot */
} merge_slot;

typedef struct {
    uint32_t id1;           /* token id + 1; 0 = empty slot */
    uint32_t hash;          /* hachi_tok_hash of the piece (checked before touching the piece) */
} tok_slot;

struct hachi_tokenizer {
    int kind;                       /* enum hachi_tok_kind */
    int32_t n_vocab;
    const hachi_gguf_str *pieces;   /* [n_vocab] raw pieces, pointing into the GGUF */
    float *scores;                  /* [n_vocab] SentencePiece scores (0 when absent) */
    uint8_t *types;                 /* [n_vocab] tokenizer.ggml.token_type */
    uint32_t seed;                  /* the hash tables' seed: random per load, so that no file can
                                     * choose names that pile into one probe chain */
    tok_slot *tok_hash;             /* [tok_mask+1] piece -> id */
    uint32_t tok_mask;
    const hachi_gguf_str *merge_strs; /* [n_merges] "left right", pointing into the GGUF */
    merge_slot *merges;             /* [merge_mask+1] merge text -> rank */
    uint32_t merge_mask;
    int32_t n_merges, n_merges_total; /* distinct rules, entries of tokenizer.ggml.merges */
    bool no_split;                  /* never split the merge loop (see find_pre_space) */
    int32_t byte_tok[256];          /* id of <0xNN>, -1 if absent */
    int32_t *specials;              /* [n_specials] control/unknown/user-defined ids, longest first */
    int32_t n_specials;
    int32_t eog[16];                /* end-of-generation ids (EOS, end of turn, ...) */
    int32_t n_eog;
    int32_t bos, eos, unk;
    bool add_bos, add_space_prefix;
    int32_t max_piece;              /* longest piece in bytes */
    uint32_t *pre_space;            /* [n_pre_space] sorted code points other than U+2581 that some
                                     * piece (SPM) or merge result (BPE) has right before a U+2581 */
    int32_t n_pre_space;
    uint16_t byte_cp[256];          /* GPT-2: byte -> printable code point */
    int16_t cp_byte[324];           /* GPT-2: code point -> byte, -1 if not a mapped one */
};

/* The tables' hash of s[0..n): FNV-1a from t's seed, its bits mixed (a table index is its low
 * bits, which FNV's multiply alone leaves depending on the low bits only) */
uint32_t hachi_tok_hash(const hachi_tokenizer *t, const void *s, size_t n);
/* Id of the token whose piece is s[0..n), or -1. */
int32_t hachi_tok_find_span(const hachi_tokenizer *t, const char *s, size_t n);
/* Rank of the merge rule "a b" for the adjacent texts a[0..na) and a[na..na+nb), or -1. */
int32_t hachi_tok_find_merge(const hachi_tokenizer *t, const char *a, size_t na, size_t nb);
/* Whether some piece / merge result has code point cp right before a U+2581. */
bool hachi_tok_has_pre_space(const hachi_tokenizer *t, uint32_t cp);

/* UTF-8: the length a lead byte announces (1 for stray continuation bytes, the way
 * llama.cpp cuts text into initial symbols); strict decoding of one code point at
 * s[0..n) (its length, 0 if invalid there); encoding (1-4 bytes written). */
size_t hachi_utf8_len(unsigned char c);
size_t hachi_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
size_t hachi_utf8_encode(uint32_t cp, char *out);

#endif
