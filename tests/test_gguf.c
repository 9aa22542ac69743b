/* Tests of src/gguf.c: writer -> parser round trips of every value type and
 * tensor layout, a catalogue of malformed files (each a corruption of a valid
 * one, asserting status and message), truncation at every byte, random byte
 * flips, real GGUF files written by other toolchains, and open() errors. */
#include "test.h"
#include "gguf.h"
#include "quant.h"
#include "util.h"
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

static void put_u32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i); }
static void put_u64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> 8 * i); }
static uint64_t get_u64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

/* Offset just past the string `s` (u64 length + bytes) in buf; aborts the test with 0 if absent. */
static size_t after_str(const uint8_t *buf, size_t len, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 8; i + n <= len; i++)
        if (!memcmp(buf + i, s, n) && get_u64(buf + i - 8) == n) return i + n;
    return 0;
}

static hachi_status fill_ramp(void *ctx, void *dst, uint64_t nbytes) {
    uint8_t seed = (uint8_t)(uintptr_t)ctx;
    for (uint64_t i = 0; i < nbytes; i++) ((uint8_t *)dst)[i] = (uint8_t)(seed + i * 7);
    return HACHI_OK;
}

static float alpha_data[16];
static uint8_t beta_data[3 * 2 * 34];   /* q8_0 [64, 3] */
static uint16_t gamma_data[5];

/* The valid file every malformed case starts from. */
static hachi_gguf_writer *base_writer(void) {
    hachi_gguf_writer *w = hachi_gguf_writer_new();
    uint8_t raw[16];
    hachi_gguf_set_str(w, "general.architecture", "llama");
    raw[0] = 200; hachi_gguf_set_raw(w, "k.u8", HACHI_GGUF_UINT8, raw, 1);
    raw[0] = (uint8_t)-5; hachi_gguf_set_raw(w, "k.i8", HACHI_GGUF_INT8, raw, 1);
    raw[0] = 0x34; raw[1] = 0x12; hachi_gguf_set_raw(w, "k.u16", HACHI_GGUF_UINT16, raw, 2);
    raw[0] = 0x00; raw[1] = 0x80; hachi_gguf_set_raw(w, "k.i16", HACHI_GGUF_INT16, raw, 2);
    hachi_gguf_set_u32(w, "k.u32", 4000000000u);
    hachi_gguf_set_i32(w, "k.i32", -123456);
    hachi_gguf_set_f32(w, "k.f32", 1.5f);
    hachi_gguf_set_bool(w, "k.bool", true);
    hachi_gguf_set_str(w, "k.str", "hello");
    hachi_gguf_set_u64(w, "k.u64", UINT64_MAX);
    int64_t i64 = INT64_MIN; hachi_gguf_set_raw(w, "k.i64", HACHI_GGUF_INT64, &i64, 8);
    double f64 = -2.25; hachi_gguf_set_raw(w, "k.f64", HACHI_GGUF_FLOAT64, &f64, 8);
    uint32_t u32s[4] = {1, 2, 3, 0xffffffffu};
    hachi_gguf_set_arr(w, "k.arr.u32", HACHI_GGUF_UINT32, u32s, 4);
    int16_t i16s[3] = {-1, 0, 32767};
    hachi_gguf_set_arr(w, "k.arr.i16", HACHI_GGUF_INT16, i16s, 3);
    double f64s[2] = {0.5, 1e300};
    hachi_gguf_set_arr(w, "k.arr.f64", HACHI_GGUF_FLOAT64, f64s, 2);
    bool bools[3] = {true, false, true};
    hachi_gguf_set_arr(w, "k.arr.bool", HACHI_GGUF_BOOL, bools, 3);
    const char *strs[4] = {"a", "", "ccc", "\xe2\x96\x81x"};
    hachi_gguf_set_arr_str(w, "k.arr.str", strs, 4);
    hachi_gguf_set_arr(w, "k.arr.empty", HACHI_GGUF_INT32, NULL, 0);
    /* [[7, 8], [9], []] of i32, then [["x"]] of strings */
    uint8_t nest[128], *p = nest;
    put_u32(p, HACHI_GGUF_ARRAY); put_u64(p + 4, 3); p += 12;
    put_u32(p, HACHI_GGUF_INT32); put_u64(p + 4, 2); put_u32(p + 12, 7); put_u32(p + 16, 8); p += 20;
    put_u32(p, HACHI_GGUF_INT32); put_u64(p + 4, 1); put_u32(p + 12, 9); p += 16;
    put_u32(p, HACHI_GGUF_INT32); put_u64(p + 4, 0); p += 12;
    hachi_gguf_set_raw(w, "k.nested", HACHI_GGUF_ARRAY, nest, (uint64_t)(p - nest));
    p = nest;
    put_u32(p, HACHI_GGUF_ARRAY); put_u64(p + 4, 1); p += 12;
    put_u32(p, HACHI_GGUF_STRING); put_u64(p + 4, 1); put_u64(p + 12, 1); p[20] = 'x'; p += 21;
    hachi_gguf_set_raw(w, "k.nested.str", HACHI_GGUF_ARRAY, nest, (uint64_t)(p - nest));
    hachi_gguf_set_u32(w, "dup.a1", 1);
    hachi_gguf_set_u32(w, "dup.a2", 2);
    hachi_gguf_set_u32(w, "k.replaced", 1);
    hachi_gguf_set_u32(w, "k.replaced", 77);             /* setting twice replaces */

    for (int i = 0; i < 16; i++) alpha_data[i] = (float)i - 3.5f;
    for (size_t i = 0; i < sizeof beta_data; i++) beta_data[i] = (uint8_t)(i * 13);
    for (int i = 0; i < 5; i++) gamma_data[i] = hachi_f32_to_f16((float)i);
    hachi_gguf_add_tensor(w, "tensor.alpha", HACHI_TYPE_F32, 2, (int64_t[]){8, 2}, alpha_data);
    hachi_gguf_add_tensor(w, "tensor.beta", HACHI_TYPE_Q8_0, 2, (int64_t[]){64, 3}, beta_data);
    hachi_gguf_add_tensor(w, "tensor.gamma", HACHI_TYPE_F16, 1, (int64_t[]){5}, gamma_data);
    hachi_gguf_add_tensor_fn(w, "tensor.delta", HACHI_TYPE_Q4_K, 3, (int64_t[]){256, 2, 2}, fill_ramp, (void *)3);
    hachi_gguf_add_tensor(w, "tensor.empty", HACHI_TYPE_I8, 2, (int64_t[]){0, 4}, NULL);
    return w;
}

static uint8_t *base_buffer(size_t *len) {
    hachi_gguf_writer *w = base_writer();
    void *buf = NULL;
    hachi_status st = hachi_gguf_writer_to_buffer(w, &buf, len);
    hachi_gguf_writer_free(w);
    return st ? NULL : buf;
}

static void check_base(const hachi_gguf *g) {
    hachi_gguf_str s;
    uint32_t u32; int64_t i64; float f; bool b; double d;
    CHECK(hachi_gguf_version(g) == 3);
    CHECK(hachi_gguf_alignment(g) == 32);
    CHECK(hachi_gguf_n_kv(g) == 24);
    CHECK(!strcmp(hachi_gguf_key_at(g, 0), "general.architecture"));
    CHECK(hachi_gguf_key_at(g, 24) == NULL && hachi_gguf_value_at(g, -1) == NULL);
    CHECK(hachi_gguf_get_str(g, "general.architecture", &s) && hachi_gguf_str_eq(s, "llama"));
    CHECK(hachi_gguf_get(g, "absent") == NULL && !hachi_gguf_get_u32(g, "absent", &u32));
    CHECK(hachi_gguf_get_u32(g, "k.u8", &u32) && u32 == 200);
    CHECK(hachi_gguf_get_i64(g, "k.i8", &i64) && i64 == -5);
    CHECK(!hachi_gguf_get_u32(g, "k.i8", &u32));                     /* negative: no u32 */
    CHECK(hachi_gguf_get_u32(g, "k.u16", &u32) && u32 == 0x1234);
    CHECK(hachi_gguf_get_i64(g, "k.i16", &i64) && i64 == -32768);
    CHECK(hachi_gguf_get_u32(g, "k.u32", &u32) && u32 == 4000000000u);
    CHECK(hachi_gguf_get_i64(g, "k.u32", &i64) && i64 == 4000000000);
    CHECK(hachi_gguf_get_i64(g, "k.i32", &i64) && i64 == -123456);
    CHECK(hachi_gguf_get_f32(g, "k.i32", &f) && f == -123456.0f);    /* int -> float */
    CHECK(hachi_gguf_get_f32(g, "k.f32", &f) && f == 1.5f);
    CHECK(!hachi_gguf_get_i64(g, "k.f32", &i64));                   /* float -> int: no */
    CHECK(hachi_gguf_get_bool(g, "k.bool", &b) && b);
    CHECK(!hachi_gguf_get_bool(g, "k.u32", &b) && !hachi_gguf_get_u32(g, "k.bool", &u32));
    CHECK(hachi_gguf_get_str(g, "k.str", &s) && hachi_gguf_str_eq(s, "hello") && !hachi_gguf_str_eq(s, "hell"));
    CHECK(!hachi_gguf_get_str(g, "k.u32", &s) && !hachi_gguf_get_u32(g, "k.str", &u32));
    CHECK(!hachi_gguf_get_i64(g, "k.u64", &i64) && !hachi_gguf_get_u32(g, "k.u64", &u32));
    CHECK(hachi_gguf_get(g, "k.u64")->u64 == UINT64_MAX);
    CHECK(hachi_gguf_get_f32(g, "k.u64", &f) && f > 1.8e19f);
    CHECK(hachi_gguf_get_i64(g, "k.i64", &i64) && i64 == INT64_MIN);
    CHECK(hachi_gguf_get_f32(g, "k.f64", &f) && f == -2.25f);
    CHECK(hachi_gguf_get_u32(g, "k.replaced", &u32) && u32 == 77);

    const hachi_gguf_value *a = hachi_gguf_get(g, "k.arr.u32");
    CHECK(a && a->type == HACHI_GGUF_ARRAY && a->arr.type == HACHI_GGUF_UINT32 && a->arr.n == 4);
    CHECK(hachi_gguf_arr_i64(a, 3, &i64) && i64 == 0xffffffff);
    CHECK(hachi_gguf_arr_f64(a, 1, &d) && d == 2.0);
    CHECK(!hachi_gguf_arr_i64(a, 4, &i64) && !hachi_gguf_arr_str(a, 0, &s) && !hachi_gguf_arr_bool(a, 0, &b));
    a = hachi_gguf_get(g, "k.arr.i16");
    CHECK(hachi_gguf_arr_i64(a, 0, &i64) && i64 == -1);
    CHECK(hachi_gguf_arr_i64(a, 2, &i64) && i64 == 32767);
    a = hachi_gguf_get(g, "k.arr.f64");
    CHECK(hachi_gguf_arr_f64(a, 1, &d) && d == 1e300 && !hachi_gguf_arr_i64(a, 0, &i64));
    a = hachi_gguf_get(g, "k.arr.bool");
    CHECK(hachi_gguf_arr_bool(a, 0, &b) && b && hachi_gguf_arr_bool(a, 1, &b) && !b);
    a = hachi_gguf_get(g, "k.arr.str");
    CHECK(a && a->arr.type == HACHI_GGUF_STRING && a->arr.n == 4);
    CHECK(hachi_gguf_arr_str(a, 1, &s) && s.len == 0 && hachi_gguf_str_eq(s, ""));
    CHECK(hachi_gguf_arr_str(a, 3, &s) && hachi_gguf_str_eq(s, "\xe2\x96\x81x"));
    CHECK(!hachi_gguf_arr_str(a, 4, &s) && !hachi_gguf_arr_i64(a, 0, &i64));
    a = hachi_gguf_get(g, "k.arr.empty");
    CHECK(a && a->arr.type == HACHI_GGUF_INT32 && a->arr.n == 0 && !hachi_gguf_arr_i64(a, 0, &i64));
    a = hachi_gguf_get(g, "k.nested");
    CHECK(a && a->arr.type == HACHI_GGUF_ARRAY && a->arr.n == 3 && a->arr.items);
    if (a && a->arr.items) {
        CHECK(a->arr.items[0].arr.n == 2 && hachi_gguf_arr_i64(&a->arr.items[0], 1, &i64) && i64 == 8);
        CHECK(a->arr.items[1].arr.n == 1 && hachi_gguf_arr_i64(&a->arr.items[1], 0, &i64) && i64 == 9);
        CHECK(a->arr.items[2].arr.n == 0);
    }
    a = hachi_gguf_get(g, "k.nested.str");
    CHECK(a && a->arr.n == 1 && a->arr.items && hachi_gguf_arr_str(&a->arr.items[0], 0, &s) &&
          hachi_gguf_str_eq(s, "x"));

    CHECK(hachi_gguf_n_tensors(g) == 5);
    const hachi_gguf_tensor *t = hachi_gguf_find_tensor(g, "tensor.alpha");
    CHECK(t && t->type == HACHI_TYPE_F32 && t->n_dims == 2 && t->ne[0] == 8 && t->ne[1] == 2 && t->ne[2] == 1);
    CHECK(t && t->nbytes == 64 && !memcmp(t->data, alpha_data, 64) && t == hachi_gguf_tensor_at(g, 0));   // NOLINT(bugprone-suspicious-memory-comparison): bitwise equality is what is tested
    t = hachi_gguf_find_tensor(g, "tensor.beta");
    CHECK(t && t->nbytes == sizeof beta_data && !memcmp(t->data, beta_data, sizeof beta_data));
    t = hachi_gguf_find_tensor(g, "tensor.gamma");
    CHECK(t && t->nbytes == 10 && hachi_f16_to_f32(((const uint16_t *)t->data)[4]) == 4.0f);
    t = hachi_gguf_find_tensor(g, "tensor.delta");
    CHECK(t && t->n_dims == 3 && t->nbytes == 4 * 144 && ((const uint8_t *)t->data)[10] == (uint8_t)(3 + 70));
    t = hachi_gguf_find_tensor(g, "tensor.empty");
    CHECK(t && t->nbytes == 0 && t->ne[0] == 0 && t->ne[1] == 4);
    for (int64_t i = 0; i < hachi_gguf_n_tensors(g); i++)
        CHECK(hachi_gguf_tensor_at(g, i)->offset % 32 == 0);
    CHECK(hachi_gguf_find_tensor(g, "tensor") == NULL && hachi_gguf_tensor_at(g, 5) == NULL);
}

TEST(gguf_roundtrip_all_types) {
    size_t len;
    uint8_t *buf = base_buffer(&len);
    hachi_gguf *g = NULL;
    CHECK(buf != NULL);
    if (!buf) return;
    CHECK(len % 32 == 0);
    hachi_status st = hachi_gguf_parse(buf, len, &g);
    CHECKF(st == HACHI_OK, "parse: %s", hachi_last_error());
    if (g) check_base(g);
    if (g) CHECK(hachi_gguf_file_size(g) == len);
    hachi_gguf_free(g);
    hachi_free(buf);
}

/* hachi_gguf_copy_kv: every key of the all-types file copied into a new writer reads back with
 * the same type and value (scalars widened equal, strings and arrays byte for byte); the arrays
 * of arrays are refused with their key named. */
static bool same_value(const hachi_gguf_value *a, const hachi_gguf_value *b) {
    if (a->type != b->type) return false;
    if (a->type == HACHI_GGUF_STRING) return a->str.len == b->str.len && !memcmp(a->str.ptr, b->str.ptr, a->str.len);
    if (a->type == HACHI_GGUF_BOOL) return a->b == b->b;
    if (a->type == HACHI_GGUF_FLOAT32 || a->type == HACHI_GGUF_FLOAT64) {   /* bit for bit */
        uint64_t x, y;
        memcpy(&x, &a->f64, 8);
        memcpy(&y, &b->f64, 8);
        return x == y;
    }
    if (a->type != HACHI_GGUF_ARRAY) return a->u64 == b->u64;   /* integers, widened (i64 the same bits) */
    if (a->arr.type != b->arr.type || a->arr.n != b->arr.n) return false;
    for (uint64_t i = 0; a->arr.type == HACHI_GGUF_STRING && i < a->arr.n; i++)
        if (a->arr.strs[i].len != b->arr.strs[i].len || memcmp(a->arr.strs[i].ptr, b->arr.strs[i].ptr, a->arr.strs[i].len))
            return false;
    if (a->arr.type == HACHI_GGUF_STRING || !a->arr.n) return true;
    const size_t size[HACHI_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return !memcmp(a->arr.data, b->arr.data, a->arr.n * size[a->arr.type]);
}

TEST(gguf_copy_kv) {
    size_t len, len2 = 0;
    uint8_t *buf = base_buffer(&len);
    void *buf2 = NULL;
    hachi_gguf *g = NULL, *g2 = NULL;
    hachi_gguf_writer *w = hachi_gguf_writer_new();
    if (!buf || !w || hachi_gguf_parse(buf, len, &g) != HACHI_OK) { CHECK(0); goto out; }
    int copied = 0;
    for (int64_t k = 0; k < hachi_gguf_n_kv(g); k++) {
        const char *key = hachi_gguf_key_at(g, k);
        const hachi_status st = hachi_gguf_copy_kv(w, g, k);
        if (!strncmp(key, "k.nested", 8))
            CHECKF(st == HACHI_ERR_UNSUPPORTED && strstr(hachi_last_error(), key), "%s: %d %s", key, st, hachi_last_error());
        else {
            CHECKF(st == HACHI_OK, "%s: %s", key, hachi_last_error());
            copied++;
        }
    }
    CHECK(hachi_gguf_copy_kv(w, g, hachi_gguf_n_kv(g)) == HACHI_ERR_INVALID_ARG);
    if (hachi_gguf_writer_to_buffer(w, &buf2, &len2) != HACHI_OK || hachi_gguf_parse(buf2, len2, &g2) != HACHI_OK) {
        CHECK(0);
        goto out;
    }
    CHECK(hachi_gguf_n_kv(g2) == copied && copied == hachi_gguf_n_kv(g) - 2);
    for (int64_t k = 0; k < hachi_gguf_n_kv(g2); k++) {
        const char *key = hachi_gguf_key_at(g2, k);
        const hachi_gguf_value *a = hachi_gguf_get(g, key);
        CHECKF(a && same_value(a, hachi_gguf_value_at(g2, k)), "%s differs after the copy", key);
    }
out:
    hachi_gguf_free(g);
    hachi_gguf_free(g2);
    hachi_gguf_writer_free(w);
    hachi_free(buf);
    hachi_free(buf2);
}

/* Many tensors of many types under several alignments. */
TEST(gguf_roundtrip_alignments) {
    static const uint32_t types[] = {HACHI_TYPE_F32, HACHI_TYPE_F16, HACHI_TYPE_Q4_0, HACHI_TYPE_Q8_0,
                                     HACHI_TYPE_Q4_K, HACHI_TYPE_Q6_K, HACHI_TYPE_BF16, HACHI_TYPE_I32};
    static const uint32_t aligns[] = {1, 8, 32, 64, 4096};
    for (size_t ai = 0; ai < sizeof aligns / sizeof aligns[0]; ai++) {
        hachi_gguf_writer *w = hachi_gguf_writer_new();
        if (aligns[ai] != 32) hachi_gguf_set_u32(w, "general.alignment", aligns[ai]);
        char name[64];
        for (int i = 0; i < 40; i++) {
            uint32_t ty = types[i % 8];
            int64_t ne[2] = {hachi_type_info(ty)->blck_size * (1 + i % 3), 1 + i % 5};
            snprintf(name, sizeof name, "blk.%d.weight", i);
            CHECK(hachi_gguf_add_tensor_fn(w, name, ty, 2, ne, fill_ramp, (void *)(uintptr_t)i) == HACHI_OK);   // NOLINT(performance-no-int-to-ptr): the context is the index itself
        }
        void *buf; size_t len;
        hachi_gguf *g = NULL;
        CHECK(hachi_gguf_writer_to_buffer(w, &buf, &len) == HACHI_OK);
        hachi_status st = hachi_gguf_parse(buf, len, &g);
        CHECKF(st == HACHI_OK, "align %u: %s", aligns[ai], hachi_last_error());
        if (g) {
            CHECK(hachi_gguf_alignment(g) == aligns[ai] && hachi_gguf_n_tensors(g) == 40);
            CHECK(len % aligns[ai] == 0);
            for (int i = 0; i < 40; i++) {
                const hachi_gguf_tensor *t = hachi_gguf_tensor_at(g, i);
                snprintf(name, sizeof name, "blk.%d.weight", i);
                CHECK(!strcmp(t->name, name) && hachi_gguf_find_tensor(g, name) == t);
                CHECK(t->type == types[i % 8] && t->offset % aligns[ai] == 0);
                CHECK(((uintptr_t)t->data - (uintptr_t)buf) % aligns[ai] == 0);
                CHECK(t->nbytes == hachi_row_size(t->type, t->ne[0]) * (uint64_t)t->ne[1]);
                const uint8_t *d = t->data;
                CHECK(d[0] == (uint8_t)i && d[t->nbytes - 1] == (uint8_t)(i + (t->nbytes - 1) * 7));
            }
        }
        hachi_gguf_free(g);
        hachi_free(buf);
        hachi_gguf_writer_free(w);
    }
}

TEST(gguf_writer_file_and_errors) {
    char path[600], tmp[610];
    snprintf(path, sizeof path, "%s/rt.gguf", test_tmpdir());
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    hachi_gguf_writer *w = base_writer();
    CHECK(hachi_gguf_writer_write(w, path) == HACHI_OK);
    CHECK(hachi_gguf_writer_write(w, path) == HACHI_OK);        /* overwrite */
    CHECK(access(tmp, F_OK) != 0);
    hachi_gguf *g = NULL;
    hachi_status st = hachi_gguf_open(path, &g);
    CHECKF(st == HACHI_OK, "open: %s", hachi_last_error());
    if (g) check_base(g);
    hachi_gguf_free(g);
    /* bad inputs to the writer */
    CHECK(hachi_gguf_add_tensor(w, "tensor.alpha", HACHI_TYPE_F32, 1, (int64_t[]){4}, alpha_data) ==
          HACHI_ERR_INVALID_ARG);
    CHECK(hachi_gguf_add_tensor(w, "x", HACHI_TYPE_Q4_0, 1, (int64_t[]){31}, alpha_data) == HACHI_ERR_INVALID_ARG);
    CHECK(hachi_gguf_add_tensor(w, "x", 4, 1, (int64_t[]){32}, alpha_data) == HACHI_ERR_INVALID_ARG);
    CHECK(hachi_gguf_add_tensor(w, "x", HACHI_TYPE_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, alpha_data) ==
          HACHI_ERR_INVALID_ARG);
    CHECK(hachi_gguf_set_arr(w, "x", HACHI_GGUF_STRING, NULL, 0) == HACHI_ERR_INVALID_ARG);
    snprintf(path, sizeof path, "%s/no/such/dir/x.gguf", test_tmpdir());
    CHECK(hachi_gguf_writer_write(w, path) == HACHI_ERR_IO && strstr(hachi_last_error(), "no/such/dir"));
    hachi_gguf_writer_free(w);
}

/* ---- malformed catalogue ---------------------------------------------------------- */

typedef struct { const char *name; void (*mutate)(uint8_t **buf, size_t *len); hachi_status st; const char *msg; } bad_case;

static uint8_t *tensor_field(uint8_t *b, size_t len, const char *name, int field) {
    /* field: 0 n_dims, 1 ne[0], 2 ne[1], 3 type (2-d tensors), 4 offset */
    size_t o = after_str(b, len, name);
    static const int at[] = {0, 4, 12, 20, 24};
    return b + o + at[field];
}
static uint8_t *kv_value(uint8_t *b, size_t len, const char *key) { return b + after_str(b, len, key) + 4; }
static uint8_t *kv_type(uint8_t *b, size_t len, const char *key) { return b + after_str(b, len, key); }

static void rebuild(uint8_t **b, size_t *len, hachi_gguf_writer *w) {
    void *nb; size_t nl;
    if (hachi_gguf_writer_to_buffer(w, &nb, &nl) == HACHI_OK) { hachi_free(*b); *b = nb; *len = nl; }
    hachi_gguf_writer_free(w);
}

static void m_magic(uint8_t **b, size_t *l) { (*b)[0] = 'X'; }
static void m_v1(uint8_t **b, size_t *l) { put_u32(*b + 4, 1); }
static void m_v99(uint8_t **b, size_t *l) { put_u32(*b + 4, 99); }
static void m_big_endian(uint8_t **b, size_t *l) { put_u32(*b + 4, 0x03000000); }
static void m_key_len(uint8_t **b, size_t *l) { put_u64(*b + 24, 1ull << 40); }
static void m_empty_key(uint8_t **b, size_t *l) { put_u64(*b + 24, 0); }
static void m_nul_key(uint8_t **b, size_t *l) { (*b)[32 + 3] = 0; }
static void m_n_kv(uint8_t **b, size_t *l) { put_u64(*b + 16, 1ull << 60); }
static void m_n_tensors(uint8_t **b, size_t *l) { put_u64(*b + 8, UINT64_MAX); }
static void m_vtype(uint8_t **b, size_t *l) { put_u32(kv_type(*b, *l, "k.u32"), 13); }
static void m_elem_type(uint8_t **b, size_t *l) { put_u32(kv_value(*b, *l, "k.arr.u32"), 77); }
static void m_arr_count(uint8_t **b, size_t *l) { put_u64(kv_value(*b, *l, "k.arr.u32") + 4, 1ull << 62); }
static void m_str_arr_count(uint8_t **b, size_t *l) { put_u64(kv_value(*b, *l, "k.arr.str") + 4, UINT64_MAX / 8); }
static void m_str_len(uint8_t **b, size_t *l) { put_u64(kv_value(*b, *l, "k.str"), *l); }
static void m_bool(uint8_t **b, size_t *l) { *kv_value(*b, *l, "k.bool") = 2; }
static void m_bool_elem(uint8_t **b, size_t *l) { kv_value(*b, *l, "k.arr.bool")[12 + 1] = 0xff; }
static void m_dup_key(uint8_t **b, size_t *l) { (*b)[after_str(*b, *l, "dup.a2") - 1] = '1'; }
static void m_depth(uint8_t **b, size_t *l) {
    hachi_gguf_writer *w = base_writer();
    uint8_t nest[12 * 10];
    for (int i = 0; i < 10; i++) { put_u32(nest + 12 * i, i < 9 ? HACHI_GGUF_ARRAY : HACHI_GGUF_UINT8); put_u64(nest + 12 * i + 4, i < 9); }
    hachi_gguf_set_raw(w, "k.deep", HACHI_GGUF_ARRAY, nest, sizeof nest);
    rebuild(b, l, w);
}
static void m_align(uint8_t **b, size_t *l, uint32_t a, bool as_u64) {
    hachi_gguf_writer *w = base_writer();   /* raw: the typed setters refuse such values */
    const uint64_t v = a;
    hachi_gguf_set_raw(w, "general.alignment", as_u64 ? HACHI_GGUF_UINT64 : HACHI_GGUF_UINT32, &v, as_u64 ? 8 : 4);
    CHECK(as_u64 ? hachi_gguf_set_u64(w, "general.alignment", a) == HACHI_ERR_INVALID_ARG
                 : a == 32 || hachi_gguf_set_u32(w, "general.alignment", a) == HACHI_ERR_INVALID_ARG);
    rebuild(b, l, w);
}
static void m_align0(uint8_t **b, size_t *l) { m_align(b, l, 0, false); }
static void m_align3(uint8_t **b, size_t *l) { m_align(b, l, 3, false); }
static void m_align_type(uint8_t **b, size_t *l) { m_align(b, l, 32, true); }
static void m_ndims0(uint8_t **b, size_t *l) { put_u32(tensor_field(*b, *l, "tensor.alpha", 0), 0); }
static void m_ndims5(uint8_t **b, size_t *l) { put_u32(tensor_field(*b, *l, "tensor.alpha", 0), 5); }
static void m_gtype(uint8_t **b, size_t *l) { put_u32(tensor_field(*b, *l, "tensor.alpha", 3), 99); }
static void m_gtype_removed(uint8_t **b, size_t *l) { put_u32(tensor_field(*b, *l, "tensor.beta", 3), 4); }
static void m_block(uint8_t **b, size_t *l) { put_u64(tensor_field(*b, *l, "tensor.beta", 1), 33); }
static void m_ne_overflow(uint8_t **b, size_t *l) {
    put_u64(tensor_field(*b, *l, "tensor.alpha", 1), 1ull << 32);
    put_u64(tensor_field(*b, *l, "tensor.alpha", 2), 1ull << 32);
}
static void m_ne_negative(uint8_t **b, size_t *l) { put_u64(tensor_field(*b, *l, "tensor.alpha", 2), (uint64_t)-2); }
static void m_bytes_huge(uint8_t **b, size_t *l) {   /* fits int64 elements, data far past end */
    put_u64(tensor_field(*b, *l, "tensor.alpha", 1), 1ull << 30);
    put_u64(tensor_field(*b, *l, "tensor.alpha", 2), 1ull << 30);
}
static void m_misaligned(uint8_t **b, size_t *l) {
    uint8_t *p = tensor_field(*b, *l, "tensor.beta", 4);
    put_u64(p, get_u64(p) + 1);
}
static void m_past_end(uint8_t **b, size_t *l) {
    uint8_t *p = tensor_field(*b, *l, "tensor.beta", 4);
    put_u64(p, get_u64(p) + (1u << 20));
}
static void m_offset_wrap(uint8_t **b, size_t *l) { put_u64(tensor_field(*b, *l, "tensor.beta", 4), UINT64_MAX & ~31ull); }
static void m_dup_tensor(uint8_t **b, size_t *l) { memcpy(*b + after_str(*b, *l, "tensor.gamma") - 5, "alpha", 5); }
static void m_data_cut(uint8_t **b, size_t *l) { *l -= 40; }
static void m_overlap(uint8_t **b, size_t *l) {   /* beta's data at alpha's */
    put_u64(tensor_field(*b, *l, "tensor.beta", 4), get_u64(tensor_field(*b, *l, "tensor.alpha", 4)));
}

static const bad_case bad_cases[] = {
    {"bad magic", m_magic, HACHI_ERR_FORMAT, "bad magic"},
    {"version 1", m_v1, HACHI_ERR_UNSUPPORTED, "version 1 not supported"},
    {"version 99", m_v99, HACHI_ERR_UNSUPPORTED, "version 99 not supported"},
    {"big-endian", m_big_endian, HACHI_ERR_UNSUPPORTED, "big-endian"},
    {"key length past end", m_key_len, HACHI_ERR_FORMAT, "extends past end of file"},
    {"empty key", m_empty_key, HACHI_ERR_FORMAT, "key string 0 at offset 24 is empty"},
    {"NUL in key", m_nul_key, HACHI_ERR_FORMAT, "NUL byte"},
    {"huge n_kv", m_n_kv, HACHI_ERR_FORMAT, "n_kv 1152921504606846976 cannot fit"},
    {"huge n_tensors", m_n_tensors, HACHI_ERR_FORMAT, "n_tensors 18446744073709551615 cannot fit"},
    {"unknown value type", m_vtype, HACHI_ERR_FORMAT, "key 'k.u32': unknown value type 13"},
    {"unknown array type", m_elem_type, HACHI_ERR_FORMAT, "unknown array element type 77"},
    {"array count overflow", m_arr_count, HACHI_ERR_FORMAT, "key 'k.arr.u32': array of 4611686018427387904"},
    {"string array count", m_str_arr_count, HACHI_ERR_FORMAT, "key 'k.arr.str': array of"},
    {"string length past end", m_str_len, HACHI_ERR_FORMAT, "key 'k.str': string value"},
    {"bad bool", m_bool, HACHI_ERR_FORMAT, "key 'k.bool': bool value 2"},
    {"bad bool element", m_bool_elem, HACHI_ERR_FORMAT, "bool element 1"},
    {"duplicate key", m_dup_key, HACHI_ERR_FORMAT, "duplicate key 'dup.a1'"},
    {"nesting depth", m_depth, HACHI_ERR_FORMAT, "key 'k.deep': arrays nested deeper than 8"},
    {"alignment 0", m_align0, HACHI_ERR_FORMAT, "'general.alignment' = 0 is not a power of two"},
    {"alignment 3", m_align3, HACHI_ERR_FORMAT, "'general.alignment' = 3 is not a power of two"},
    {"alignment type", m_align_type, HACHI_ERR_FORMAT, "'general.alignment' has type u64"},
    {"n_dims 0", m_ndims0, HACHI_ERR_FORMAT, "tensor 'tensor.alpha' (offset"},
    {"n_dims 5", m_ndims5, HACHI_ERR_FORMAT, "n_dims 5 not in 1..4"},
    {"unknown ggml type", m_gtype, HACHI_ERR_UNSUPPORTED, "tensor 'tensor.alpha' has unknown ggml type 99"},
    {"removed ggml type", m_gtype_removed, HACHI_ERR_UNSUPPORTED, "'tensor.beta' has unknown ggml type 4"},
    {"block size", m_block, HACHI_ERR_FORMAT, "ne[0] = 33 is not a multiple of the q8_0 block size 32"},
    {"element overflow", m_ne_overflow, HACHI_ERR_FORMAT, "'tensor.alpha': element count"},
    {"negative ne", m_ne_negative, HACHI_ERR_FORMAT, "ne[1] = -2 is negative"},
    {"huge tensor", m_bytes_huge, HACHI_ERR_FORMAT, "'tensor.alpha' data [1088, 4611686018427388992) extends"},
    {"misaligned offset", m_misaligned, HACHI_ERR_FORMAT, "'tensor.beta' offset 65 is not aligned to 32"},
    {"data past end", m_past_end, HACHI_ERR_FORMAT, "'tensor.beta' data ["},
    {"offset wrap", m_offset_wrap, HACHI_ERR_FORMAT, ", 18446744073709551615) extends past end of file"},
    {"duplicate tensor", m_dup_tensor, HACHI_ERR_FORMAT, "duplicate tensor name 'tensor.alpha'"},
    {"data cut short", m_data_cut, HACHI_ERR_FORMAT, "'tensor.delta' data [1408, 1984) extends past end of file (size 1944)"},
    {"overlapping data", m_overlap, HACHI_ERR_FORMAT, "tensors 'tensor.alpha' and 'tensor.beta' share data bytes"},
};

TEST(gguf_malformed_catalogue) {
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *bc = &bad_cases[i];
        size_t len;
        uint8_t *buf = base_buffer(&len);
        if (!buf) { CHECK(buf != NULL); return; }
        bc->mutate(&buf, &len);
        /* an exact-size copy so ASan sees any read past the end */
        uint8_t *copy = hachi_malloc(len);
        memcpy(copy, buf, len);
        hachi_gguf *g = NULL;
        hachi_clear_error();
        hachi_status st = hachi_gguf_parse(copy, len, &g);
        CHECKF(st == bc->st && g == NULL, "%s: status %d (want %d): %s", bc->name, st, bc->st, hachi_last_error());
        CHECKF(strstr(hachi_last_error(), bc->msg) != NULL, "%s: message '%s' lacks '%s'", bc->name,
               hachi_last_error(), bc->msg);
        CHECKF(!strchr(hachi_last_error(), '\n'), "%s: multi-line message", bc->name);
        hachi_gguf_free(g);
        hachi_free(copy);
        hachi_free(buf);
    }
}

/* Every prefix of a valid file fails cleanly, up to the end of the last tensor's data. */
TEST(gguf_truncated_everywhere) {
    size_t len;
    uint8_t *buf = base_buffer(&len);
    hachi_gguf *g = NULL;
    if (!buf || hachi_gguf_parse(buf, len, &g)) { CHECK(0); hachi_free(buf); return; }
    size_t need = 0;
    for (int64_t i = 0; i < hachi_gguf_n_tensors(g); i++) {
        const hachi_gguf_tensor *t = hachi_gguf_tensor_at(g, i);
        size_t end = (size_t)((const uint8_t *)t->data - buf) + t->nbytes;
        if (end > need) need = end;
    }
    hachi_gguf_free(g);
    for (size_t k = 0; k < len; k++) {
        uint8_t *copy = hachi_malloc(k);
        memcpy(copy, buf, k);
        hachi_clear_error();
        hachi_status st = hachi_gguf_parse(copy, k, &g);
        if (k < need)
            CHECKF(st == HACHI_ERR_FORMAT && g == NULL && hachi_last_error()[0], "truncated at %zu: status %d '%s'",
                   k, st, hachi_last_error());
        else
            CHECKF(st == HACHI_OK, "trailing padding cut at %zu: %s", k, hachi_last_error());
        hachi_gguf_free(g);
        g = NULL;
        hachi_free(copy);
    }
    hachi_free(buf);
}

/* Random byte corruptions: any status, never a crash (ASan build checks reads). */
TEST(gguf_random_corruption) {
    size_t len;
    uint8_t *buf = base_buffer(&len);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int n_ok = 0;
    if (!buf) { CHECK(0); return; }
    for (int it = 0; it < 3000; it++) {
        uint8_t *copy = hachi_malloc(len);
        memcpy(copy, buf, len);
        for (int j = 0; j < 1 + it % 4; j++) {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            copy[(rng >> 8) % len] ^= (uint8_t)(1u << (rng & 7));
        }
        hachi_gguf *g = NULL;
        hachi_status st = hachi_gguf_parse(copy, len, &g);
        CHECK((st == HACHI_OK) == (g != NULL));
        CHECK(st == HACHI_OK || st == HACHI_ERR_FORMAT || st == HACHI_ERR_UNSUPPORTED);
        n_ok += st == HACHI_OK;
        hachi_gguf_free(g);
        hachi_free(copy);
    }
    CHECK(n_ok > 0);   /* flips inside tensor data stay valid */
    hachi_free(buf);
}

/* ---- real files ------------------------------------------------------------------------ */

TEST(gguf_real_llama_tiny) {
    NEED_SHARED(path, "data/llama-2-tiny-random.gguf");
    hachi_gguf *g = NULL;
    hachi_status st = hachi_gguf_open(path, &g);
    CHECKF(st == HACHI_OK, "%s", hachi_last_error());
    if (!g) return;
    hachi_gguf_str s;
    uint32_t u;
    CHECK(hachi_gguf_version(g) == 3);
    CHECK(hachi_gguf_get_str(g, "general.architecture", &s) && hachi_gguf_str_eq(s, "llama"));
    CHECK(hachi_gguf_get_u32(g, "llama.embedding_length", &u) && u == 8);
    CHECK(hachi_gguf_get_u32(g, "llama.block_count", &u) && u == 1);
    const hachi_gguf_value *tok = hachi_gguf_get(g, "tokenizer.ggml.tokens");
    CHECK(tok && tok->arr.type == HACHI_GGUF_STRING && tok->arr.n == 32000);
    CHECK(hachi_gguf_arr_str(tok, 0, &s) && hachi_gguf_str_eq(s, "<unk>"));
    CHECK(hachi_gguf_n_tensors(g) >= 9);
    const hachi_gguf_tensor *t = hachi_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->n_dims == 2 && t->ne[0] == 8 && t->ne[1] == 32000 && t->type == HACHI_TYPE_F16);
    CHECK(hachi_gguf_find_tensor(g, "blk.0.attn_q.weight") != NULL);
    CHECK(hachi_gguf_find_tensor(g, "output_norm.weight") != NULL);
    for (int64_t i = 0; i < hachi_gguf_n_tensors(g); i++) {
        t = hachi_gguf_tensor_at(g, i);
        CHECKF(t->type == HACHI_TYPE_F16 || t->type == HACHI_TYPE_F32, "%s type %u", t->name, t->type);
        CHECK(t->offset % hachi_gguf_alignment(g) == 0);
    }
    hachi_gguf_free(g);
}

TEST(gguf_real_vocab_only) {
    static const struct { const char *rel; uint64_t n; const char *model; } files[] = {
        {"data/vocab/ggml-vocab-llama-spm.gguf", 32000, "llama"},
        {"data/vocab/ggml-vocab-gpt-2.gguf", 50257, "gpt2"},
    };
    for (size_t i = 0; i < 2; i++) {
        NEED_SHARED(path, files[i].rel);
        hachi_gguf *g = NULL;
        hachi_status st = hachi_gguf_open(path, &g);
        CHECKF(st == HACHI_OK, "%s", hachi_last_error());
        if (!g) continue;
        hachi_gguf_str s;
        CHECK(hachi_gguf_n_tensors(g) == 0);
        const hachi_gguf_value *tok = hachi_gguf_get(g, "tokenizer.ggml.tokens");
        CHECKF(tok && tok->arr.type == HACHI_GGUF_STRING && tok->arr.n == files[i].n, "%s", files[i].rel);
        CHECK(hachi_gguf_get_str(g, "tokenizer.ggml.model", &s) && hachi_gguf_str_eq(s, files[i].model));
        hachi_gguf_free(g);
    }
}

TEST(gguf_real_gemma4_vocab) {
    NEED_SHARED(path, "oracle/gemma4-vocab.gguf");
    hachi_gguf *g = NULL;
    double t0 = hachi_time_ms();
    hachi_status st = hachi_gguf_open(path, &g);
    double ms = hachi_time_ms() - t0;
    CHECKF(st == HACHI_OK, "%s", hachi_last_error());
    if (!g) return;
    CHECKF(ms < 1000, "parse took %.0f ms", ms);
    const hachi_gguf_value *tok = hachi_gguf_get(g, "tokenizer.ggml.tokens");
    const hachi_gguf_value *mer = hachi_gguf_get(g, "tokenizer.ggml.merges");
    CHECK(tok && tok->arr.type == HACHI_GGUF_STRING && tok->arr.n == 262144);
    CHECK(mer && mer->arr.type == HACHI_GGUF_STRING && mer->arr.n == 514906);
    hachi_gguf_str s;
    CHECK(hachi_gguf_get_str(g, "tokenizer.ggml.model", &s) && hachi_gguf_str_eq(s, "gemma4"));
    CHECK(hachi_gguf_arr_str(tok, 2, &s) && hachi_gguf_str_eq(s, "<bos>"));
    hachi_gguf_free(g);
}

/* ---- open errors ------------------------------------------------------------------------- */

TEST(gguf_open_errors) {
    hachi_gguf *g = (hachi_gguf *)1;
    char path[600];
    snprintf(path, sizeof path, "%s/missing.gguf", test_tmpdir());
    CHECK(hachi_gguf_open(path, &g) == HACHI_ERR_IO && g == NULL);
    CHECKF(strstr(hachi_last_error(), "cannot open '") && strstr(hachi_last_error(), "missing.gguf") &&
           strstr(hachi_last_error(), "No such file"), "%s", hachi_last_error());
    CHECK(hachi_gguf_open(test_tmpdir(), &g) == HACHI_ERR_IO && g == NULL);
    CHECKF(strstr(hachi_last_error(), "Is a directory"), "%s", hachi_last_error());
    snprintf(path, sizeof path, "%s/empty.gguf", test_tmpdir());
    FILE *f = fopen(path, "wb");
    if (f) fclose(f);
    CHECK(hachi_gguf_open(path, &g) == HACHI_ERR_FORMAT && strstr(hachi_last_error(), "empty file"));
    f = fopen(path, "wb");
    if (f) { fputs("GGUF\x03\0\0\0", f); fclose(f); }
    CHECK(hachi_gguf_open(path, &g) == HACHI_ERR_FORMAT && strstr(hachi_last_error(), "empty.gguf': gguf:"));
    hachi_gguf_free(NULL);
}
