/* gen_seeds: writes the small seed corpus of fuzz_gguf (fuzz/corpus/) with
 * the library's own GGUF writer: one file per feature (every value type,
 * nested and string arrays, tensors of several types, a custom alignment).
 *   cc -std=c11 -D_GNU_SOURCE -Iinclude -Isrc fuzz/gen_seeds.c src/gguf.c src/util.c src/quant.c -lm
 *   ./a.out fuzz/corpus */
#include "gguf.h"
#include "quant.h"
#include "util.h"
#include <stdio.h>

static hachi_status fill(void *ctx, void *dst, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = (uint8_t)(i * 31 + 7);
    return HACHI_OK;
}

static int save(hachi_gguf_writer *w, const char *dir, const char *name) {
    void *buf; size_t len; char path[512];
    int rc = 1;
    if (hachi_gguf_writer_to_buffer(w, &buf, &len) == HACHI_OK) {
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *f = fopen(path, "wb");
        if (f) { rc = fwrite(buf, 1, len, f) != len; rc |= fclose(f) != 0; }
        hachi_free(buf);
    }
    hachi_gguf_writer_free(w);
    if (rc) fprintf(stderr, "gen_seeds: cannot write %s: %s\n", name, hachi_last_error());
    return rc;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "fuzz/corpus";
    int rc = 0;
    uint8_t raw[64];
    hachi_gguf_writer *w = hachi_gguf_writer_new();             /* scalars of every type */
    hachi_gguf_set_str(w, "general.architecture", "gemma4");
    raw[0] = 7;
    for (uint32_t t = 0; t < HACHI_GGUF_VTYPE_COUNT; t++) {
        char key[32];
        static const uint8_t size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        snprintf(key, sizeof key, "k.t%u", t);
        if (size[t]) { memset(raw, 0, 8); raw[0] = 1; hachi_gguf_set_raw(w, key, t, raw, size[t]); }
    }
    hachi_gguf_set_str(w, "k.str", "hi");
    rc |= save(w, dir, "scalars.gguf");

    w = hachi_gguf_writer_new();                                 /* arrays */
    const char *strs[] = {"<pad>", "<eos>", "", "\xe2\x96\x81the"};
    hachi_gguf_set_arr_str(w, "tokenizer.ggml.tokens", strs, 4);
    float scores[4] = {0, -1, -2.5f, 3};
    hachi_gguf_set_arr(w, "tokenizer.ggml.scores", HACHI_GGUF_FLOAT32, scores, 4);
    bool bs[3] = {true, false, true};
    hachi_gguf_set_arr(w, "k.bools", HACHI_GGUF_BOOL, bs, 3);
    hachi_gguf_set_arr(w, "k.empty", HACHI_GGUF_UINT64, NULL, 0);
    uint8_t *p = raw;                                             /* [[1,2],["x"]] */
    memcpy(p, (uint32_t[]){HACHI_GGUF_ARRAY}, 4); memcpy(p + 4, (uint64_t[]){2}, 8); p += 12;
    memcpy(p, (uint32_t[]){HACHI_GGUF_UINT16}, 4); memcpy(p + 4, (uint64_t[]){2}, 8);
    memcpy(p + 12, (uint16_t[]){1, 2}, 4); p += 16;
    memcpy(p, (uint32_t[]){HACHI_GGUF_STRING}, 4); memcpy(p + 4, (uint64_t[]){1}, 8);
    memcpy(p + 12, (uint64_t[]){1}, 8); p[20] = 'x'; p += 21;
    hachi_gguf_set_raw(w, "k.nested", HACHI_GGUF_ARRAY, raw, (uint64_t)(p - raw));
    rc |= save(w, dir, "arrays.gguf");

    w = hachi_gguf_writer_new();                                 /* tensors, default alignment */
    hachi_gguf_set_str(w, "general.architecture", "llama");
    hachi_gguf_add_tensor_fn(w, "token_embd.weight", HACHI_TYPE_F16, 2, (int64_t[]){4, 3}, fill, NULL);
    hachi_gguf_add_tensor_fn(w, "blk.0.attn_q.weight", HACHI_TYPE_Q8_0, 2, (int64_t[]){32, 2}, fill, NULL);
    hachi_gguf_add_tensor_fn(w, "blk.0.ffn_up.weight", HACHI_TYPE_Q4_0, 1, (int64_t[]){32}, fill, NULL);
    hachi_gguf_add_tensor_fn(w, "output_norm.weight", HACHI_TYPE_F32, 4, (int64_t[]){2, 1, 1, 1}, fill, NULL);
    hachi_gguf_add_tensor_fn(w, "empty", HACHI_TYPE_I8, 2, (int64_t[]){0, 3}, fill, NULL);
    rc |= save(w, dir, "tensors.gguf");

    w = hachi_gguf_writer_new();                                 /* custom alignment, K-quant */
    hachi_gguf_set_u32(w, "general.alignment", 8);
    hachi_gguf_add_tensor_fn(w, "a", HACHI_TYPE_F32, 1, (int64_t[]){3}, fill, NULL);
    hachi_gguf_add_tensor_fn(w, "b", HACHI_TYPE_Q4_K, 1, (int64_t[]){256}, fill, NULL);
    rc |= save(w, dir, "align8.gguf");

    rc |= save(hachi_gguf_writer_new(), dir, "empty.gguf");     /* header only */
    return rc;
}
