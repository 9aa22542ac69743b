/* fuzz_gguf: libFuzzer target for the GGUF parser. Parses the input, then
 * walks every key, value (arrays recursively, through the typed accessors)
 * and tensor (first and last data byte), so ASan/UBSan see every pointer the
 * parser hands out. Built by `make fuzz`; seeds in fuzz/corpus/ are written
 * by fuzz/gen_seeds.c. */
#include "gguf.h"
#include "util.h"
#include <stdint.h>
#include <string.h>

static volatile uint64_t sink;

static void walk_value(const hachi_gguf_value *v, int depth) {
    int64_t i64; double f64; bool b; hachi_gguf_str s;
    if (depth > 16) __builtin_trap();    /* the parser limits nesting to 8 */
    switch (v->type) {
    case HACHI_GGUF_STRING:
        if (v->str.len) sink += (uint8_t)v->str.ptr[0] + (uint8_t)v->str.ptr[v->str.len - 1];
        sink += hachi_gguf_str_eq(v->str, "llama");
        break;
    case HACHI_GGUF_ARRAY:
        for (uint64_t i = 0; i < v->arr.n && i < 4096; i++) {
            if (v->arr.type == HACHI_GGUF_ARRAY) { walk_value(&v->arr.items[i], depth + 1); continue; }
            if (hachi_gguf_arr_i64(v, i, &i64)) sink += (uint64_t)i64;
            if (hachi_gguf_arr_f64(v, i, &f64)) sink += f64 == f64;
            if (hachi_gguf_arr_bool(v, i, &b)) sink += b;
            if (hachi_gguf_arr_str(v, i, &s) && s.len) sink += (uint8_t)s.ptr[s.len - 1];
        }
        if (v->arr.n) {   /* and the last element, however long the array */
            uint64_t last = v->arr.n - 1;
            if (hachi_gguf_arr_i64(v, last, &i64)) sink += (uint64_t)i64;
            if (hachi_gguf_arr_str(v, last, &s) && s.len) sink += (uint8_t)s.ptr[s.len - 1];
        }
        sink += hachi_gguf_arr_i64(v, v->arr.n, &i64);   /* out of range: false */
        break;
    default:
        sink += v->u64;
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hachi_gguf *g = NULL;
    if (hachi_gguf_parse(data, size, &g) != HACHI_OK) {
        if (g || !hachi_last_error()[0]) __builtin_trap();
        return 0;
    }
    uint32_t u32; int64_t i64; float f; bool b; hachi_gguf_str s;
    sink += hachi_gguf_version(g) + hachi_gguf_alignment(g) + hachi_gguf_file_size(g);
    for (int64_t i = 0; i < hachi_gguf_n_kv(g); i++) {
        const char *key = hachi_gguf_key_at(g, i);
        const hachi_gguf_value *v = hachi_gguf_value_at(g, i);
        if (!key || !v || hachi_gguf_get(g, key) != v) __builtin_trap();
        sink += hachi_gguf_get_u32(g, key, &u32) + hachi_gguf_get_i64(g, key, &i64) +
                hachi_gguf_get_f32(g, key, &f) + hachi_gguf_get_bool(g, key, &b) + hachi_gguf_get_str(g, key, &s);
        walk_value(v, 0);
    }
    for (int64_t i = 0; i < hachi_gguf_n_tensors(g); i++) {
        const hachi_gguf_tensor *t = hachi_gguf_tensor_at(g, i);
        if (!t || hachi_gguf_find_tensor(g, t->name) != t) __builtin_trap();
        const uint8_t *d = t->data;
        if (d < data || d + t->nbytes > data + size || t->offset % hachi_gguf_alignment(g)) __builtin_trap();
        if (t->nbytes) sink += d[0] + d[t->nbytes - 1];
    }
    sink += hachi_gguf_get(g, "general.architecture") != NULL;
    sink += hachi_gguf_find_tensor(g, "token_embd.weight") != NULL;
    hachi_gguf_free(g);
    return 0;
}
