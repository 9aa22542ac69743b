/* fuzz_tokenizer: libFuzzer target for the tokenizer and the streaming detokenizer. The first
 * byte picks add_bos / parse_special; the rest is tokenized (every id must be in the
 * vocabulary), the ids go back through hachi_detok and hachi_token_to_text; then the input's
 * bytes, read as int32 ids (many of them outside the vocabulary), go through both too. Built
 * by `make fuzz`; seeds in fuzz/tokenizer-corpus/. */
#include <stdint.h>
#include <string.h>
#include "fuzz_model.h"

static hachi_model *m;
static hachi_detok *dt;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    m = fuzz_model(true);
    if (hachi_detok_create(m, &dt) != HACHI_OK) abort();
    return 0;
}

static void detok_all(const int32_t *ids, int n, int32_t n_vocab) {
    char out[64], piece[256];
    hachi_detok_reset(dt, true);
    for (int i = 0; i < n; i++) {
        int32_t w = hachi_detok_push(dt, ids[i], out, sizeof out);
        if (w < 0 || w > (int32_t)sizeof out) __builtin_trap();
        int32_t k = hachi_token_to_text(m, ids[i], piece, sizeof piece);
        if ((ids[i] >= 0 && ids[i] < n_vocab) != (k >= 0) || k > (int32_t)sizeof piece) __builtin_trap();
    }
    int32_t w = hachi_detok_flush(dt, out, sizeof out);
    if (w < 0 || w > (int32_t)sizeof out) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int32_t ids[8192];
    if (size < 1 || size > 16384) return 0;
    const int32_t n_vocab = hachi_model_n_vocab(m);
    const char *text = (const char *)data + 1;
    int32_t n = 0;
    if (hachi_tokenize(m, text, size - 1, data[0] & 1, data[0] & 2, ids, 8192, &n) == HACHI_OK) {
        if (n < 0) __builtin_trap();
        for (int i = 0; i < n && i < 8192; i++)
            if (ids[i] < 0 || ids[i] >= n_vocab) __builtin_trap();
        detok_all(ids, n < 8192 ? n : 8192, n_vocab);
    }
    int k = (int)((size - 1) / 4);
    for (int i = 0; i < k; i++) {
        uint32_t u;
        memcpy(&u, text + 4 * i, 4);
        ids[i] = (int32_t)(u % ((uint32_t)n_vocab + 8)) - 4;   /* a few ids on either side of the range */
    }
    detok_all(ids, k, n_vocab);
    return 0;
}
