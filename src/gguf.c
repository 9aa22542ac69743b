/* gguf: owns the GGUF v2/v3 reader and writer.
 *
 * Reader: hachi_gguf_parse() walks (buf, len) once with a cursor whose every
 * read is checked against len; counts are bounded by the bytes left before any
 * table is allocated, so a hostile file cannot make it allocate more than a
 * small multiple of its own size. Index tables (key copies, value structs,
 * string-array offsets, nested items, tensor infos, two hash tables) live in
 * one arena freed by hachi_gguf_free(). hachi_gguf_open() adds mmap.
 *
 * Writer: collects KVs (stored already encoded) and tensor infos, lays the
 * file out, then serialises into one destination: a heap buffer, or the
 * output file itself mapped MAP_SHARED after posix_fallocate, so tensor data
 * (from a pointer or a fill callback) streams to disk without a copy of the
 * whole file in memory. Files go to a new path.tmp (hachi_tmp_create), then msync+fsync+rename.
 *
 * Layout (ggml docs/gguf.md): "GGUF", u32 version, u64 n_tensors, u64 n_kv;
 * n_kv x (string key, u32 type, value); n_tensors x (string name, u32 n_dims,
 * n_dims x i64 ne, u32 ggml type, u64 offset); zero padding to
 * general.alignment; data section (offsets relative to it, each aligned).
 * Strings are u64 length + bytes; arrays are u32 elem type, u64 count, items. */
#include "gguf.h"
#include "quant.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DEPTH 8          /* arrays nested deeper than this are rejected */
#define KV_MIN_BYTES 13           /* key len (8) + type (4) + smallest value (1) */
#define TENSOR_MIN_BYTES 32       /* name len, n_dims, one ne, type, offset */

/* Encoded size of each fixed-size value type; 0 for string and array. */
static const uint8_t vtype_size[HACHI_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static const char *const vtype_name[HACHI_GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};

static uint64_t rd_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* ---- arena: every index table of a parsed file ------------------------------- */

typedef struct arena_chunk { struct arena_chunk *next; size_t used, cap; } arena_chunk;
#define CHUNK_HDR ((sizeof(arena_chunk) + 15) & ~(size_t)15)

static void *arena_alloc(arena_chunk **head, size_t n) {
    n = (n + 15) & ~(size_t)15;
    arena_chunk *c = *head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > (1u << 16) ? n : (1u << 16);
        c = hachi_malloc(CHUNK_HDR + cap);
        if (!c) return NULL;
        c->cap = cap; c->used = 0;
        /* keep the partly used chunk at the head when this one is a big one-off */
        if (*head && n > (1u << 15)) { c->next = (*head)->next; (*head)->next = c; }
        else { c->next = *head; *head = c; }
    }
    void *p = (char *)c + CHUNK_HDR + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

static void arena_free(arena_chunk *c) {
    while (c) { arena_chunk *next = c->next; hachi_free(c); c = next; }
}

/* ---- name hash: open addressing over NUL-terminated names --------------------- */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Table of cap (power of two) slots, each an index + 1 (0 = empty). */
typedef struct { int64_t *slot; uint64_t mask; } name_table;

static bool table_init(arena_chunk **arena, name_table *t, int64_t n) {
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2) cap <<= 1;
    t->slot = arena_alloc(arena, cap * sizeof(int64_t));
    t->mask = cap - 1;
    return t->slot != NULL;
}

/* Index of name, or -1; name_of(i) gives entry i's name. */
#define TABLE_FIND(t, name, name_of, result)                                      \
    do {                                                                          \
        (result) = -1;                                                            \
        if (!(t).slot) break;                                                     \
        for (uint64_t h_ = hash_str(name) & (t).mask; (t).slot[h_]; h_ = (h_ + 1) & (t).mask) \
            if (!strcmp(name_of((t).slot[h_] - 1), (name))) { (result) = (t).slot[h_] - 1; break; } \
    } while (0)

static void table_put(name_table *t, const char *name, int64_t i) {
    uint64_t h = hash_str(name) & t->mask;
    while (t->slot[h]) h = (h + 1) & t->mask;
    t->slot[h] = i + 1;
}

/* ---- parser ----------------------------------------------------------------------- */

struct hachi_gguf {
    const uint8_t *base;
    size_t len;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;           /* start of the data section */
    int64_t n_kv, n_tensors;
    char **keys;                    /* [n_kv] NUL-terminated copies */
    hachi_gguf_value *vals;         /* [n_kv] */
    hachi_gguf_tensor *tensors;     /* [n_tensors] */
    name_table key_tab, tensor_tab;
    arena_chunk *arena;
    void *map; size_t map_len;      /* set by hachi_gguf_open */
};

typedef struct {
    const uint8_t *p;
    uint64_t len, pos;
    arena_chunk **arena;
    const char *key;                /* the KV being read, for messages */
} cursor;

static uint64_t left(const cursor *c) { return c->len - c->pos; }

static hachi_status need(const cursor *c, uint64_t n, const char *what) {
    if (n <= left(c)) return HACHI_OK;
    if (c->key)
        return hachi_fail(HACHI_ERR_FORMAT, "gguf: key '%s': %s at offset %" PRIu64
                          " needs %" PRIu64 " bytes, extends past end of file (size %" PRIu64 ")",
                          c->key, what, c->pos, n, c->len);
    return hachi_fail(HACHI_ERR_FORMAT, "gguf: %s at offset %" PRIu64 " needs %" PRIu64
                      " bytes, extends past end of file (size %" PRIu64 ")", what, c->pos, n, c->len);
}

static hachi_status get_u32(cursor *c, uint32_t *v, const char *what) {
    hachi_status st = need(c, 4, what);
    if (st) return st;
    *v = (uint32_t)rd_le(c->p + c->pos, 4); c->pos += 4;
    return HACHI_OK;
}

static hachi_status get_u64(cursor *c, uint64_t *v, const char *what) {
    hachi_status st = need(c, 8, what);
    if (st) return st;
    *v = rd_le(c->p + c->pos, 8); c->pos += 8;
    return HACHI_OK;
}

static hachi_status get_str(cursor *c, hachi_gguf_str *s, const char *what) {
    uint64_t at = c->pos, n;
    *s = (hachi_gguf_str){0};
    hachi_status st = get_u64(c, &n, what);
    if (st) return st;
    if (n > left(c)) {
        c->pos = at;
        return need(c, n > UINT64_MAX - 8 ? UINT64_MAX : n + 8, what);
    }
    s->ptr = (const char *)c->p + c->pos; s->len = n; c->pos += n;
    return HACHI_OK;
}

/* A key or tensor name as a NUL-terminated copy: non-empty, no NUL bytes. */
static hachi_status copy_name(cursor *c, char **out, const char *what, int64_t idx) {
    uint64_t at = c->pos;
    hachi_gguf_str s;
    hachi_status st = get_str(c, &s, what);
    if (st) return st;
    if (s.len == 0 || memchr(s.ptr, 0, s.len))
        return hachi_fail(HACHI_ERR_FORMAT, "gguf: %s %" PRId64 " at offset %" PRIu64 " %s",
                          what, idx, at, s.len ? "has a NUL byte" : "is empty");
    if (!(*out = arena_alloc(c->arena, s.len + 1))) return HACHI_ERR_NOMEM;
    memcpy(*out, s.ptr, s.len);
    return HACHI_OK;
}

static hachi_status parse_array(cursor *c, hachi_gguf_value *v, int depth);

/* One value of the given type at the cursor (the type itself already read). */
static hachi_status parse_value(cursor *c, uint32_t type, hachi_gguf_value *v, int depth) {
    uint64_t at = c->pos;
    hachi_status st;
    if (type >= HACHI_GGUF_VTYPE_COUNT)
        return hachi_fail(HACHI_ERR_FORMAT, "gguf: key '%s': unknown value type %" PRIu32
                          " at offset %" PRIu64, c->key, type, at > 4 ? at - 4 : 0);
    v->type = type;
    if (type == HACHI_GGUF_STRING) return get_str(c, &v->str, "string value");
    if (type == HACHI_GGUF_ARRAY) return parse_array(c, v, depth + 1);
    int n = vtype_size[type];
    if ((st = need(c, (uint64_t)n, vtype_name[type]))) return st;
    uint64_t raw = rd_le(c->p + c->pos, n);
    c->pos += (uint64_t)n;
    switch (type) {
    case HACHI_GGUF_INT8: v->i64 = (int8_t)raw; break;   // NOLINT(bugprone-signed-char-misuse): an INT8 value, sign-extended on purpose
    case HACHI_GGUF_INT16: v->i64 = (int16_t)raw; break;
    case HACHI_GGUF_INT32: v->i64 = (int32_t)raw; break;
    case HACHI_GGUF_INT64: v->i64 = (int64_t)raw; break;
    case HACHI_GGUF_FLOAT32: { uint32_t b = (uint32_t)raw; float f; memcpy(&f, &b, 4); v->f64 = f; break; }
    case HACHI_GGUF_FLOAT64: memcpy(&v->f64, &raw, 8); break;
    case HACHI_GGUF_BOOL:
        if (raw > 1)
            return hachi_fail(HACHI_ERR_FORMAT, "gguf: key '%s': bool value %" PRIu64
                              " at offset %" PRIu64 " is not 0 or 1", c->key, raw, at);
        v->b = raw != 0; break;
    default: v->u64 = raw; break;
    }
    return HACHI_OK;
}

/* An array body (elem type, count, items) at the cursor; depth counts nesting. */
static hachi_status parse_array(cursor *c, hachi_gguf_value *v, int depth) {
    uint64_t at = c->pos, n;
    uint32_t et;
    hachi_status st;
    if (depth > GGUF_MAX_DEPTH)
        return hachi_fail(HACHI_ERR_FORMAT, "gguf: key '%s': arrays nested deeper than %d at offset %"
                          PRIu64, c->key, GGUF_MAX_DEPTH, at);
    if ((st = get_u32(c, &et, "array type")) || (st = get_u64(c, &n, "array count"))) return st;
    if (et >= HACHI_GGUF_VTYPE_COUNT)
        return hachi_fail(HACHI_ERR_FORMAT, "gguf: key '%s': unknown array element type %" PRIu32
                          " at offset %" PRIu64, c->key, et, at);
    v->type = HACHI_GGUF_ARRAY;
    v->arr.type = et;
    v->arr.n = n;
    /* smallest encoding of one element: fixed size, string length, nested header */
    uint64_t min = et == HACHI_GGUF_STRING ? 8 : et == HACHI_GGUF_ARRAY ? 12 : vtype_size[et];
    if (n > left(c) / min)
        return hachi_fail(HACHI_ERR_FORMAT, "gguf: key '%s': array of %" PRIu64 " %s elements at offset %"
                          PRIu64 " extends past end of file (size %" PRIu64 ")",
                          c->key, n, vtype_name[et], at, c->len);
    if (et == HACHI_GGUF_STRING) {
        if (n && !(v->arr.strs = arena_alloc(c->arena, n * sizeof(hachi_gguf_str)))) return HACHI_ERR_NOMEM;
        for (uint64_t i = 0; i < n; i++)
            if ((st = get_str(c, &v->arr.strs[i], "array string"))) return st;
    } else if (et == HACHI_GGUF_ARRAY) {
        if (n && !(v->arr.items = arena_alloc(c->arena, n * sizeof(hachi_gguf_value)))) return HACHI_ERR_NOMEM;
        for (uint64_t i = 0; i < n; i++)
            if ((st = parse_array(c, &v->arr.items[i], depth + 1))) return st;
    } else {
        v->arr.data = c->p + c->pos;
        if (et == HACHI_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (c->p[c->pos + i] > 1)
                    return hachi_fail(HACHI_ERR_FORMAT, "gguf: key '%s': bool element %" PRIu64
                                      " at offset %" PRIu64 " is %u, not 0 or 1",
                                      c->key, i, c->pos + i, c->p[c->pos + i]);
        c->pos += n * min;
    }
    return HACHI_OK;
}

static const char *key_name(const hachi_gguf *g, int64_t i) { return g->keys[i]; }
static const char *tensor_name(const hachi_gguf *g, int64_t i) { return g->tensors[i].name; }
#define KEY_OF(i) key_name(g, (i))
#define TENSOR_OF(i) tensor_name(g, (i))

static hachi_status parse_header(hachi_gguf *g, cursor *c) {
    hachi_status st;
    uint64_t nt, nkv;
    if (c->len < 4 || memcmp(c->p, "GGUF", 4))
        return hachi_fail(HACHI_ERR_FORMAT, "gguf: bad magic (not a GGUF file, size %" PRIu64 ")", c->len);
    c->pos = 4;
    if ((st = get_u32(c, &g->version, "version"))) return st;
    if (g->version != 2 && g->version != 3) {
        if (g->version == 0x03000000u || g->version == 0x02000000u)
            return hachi_fail(HACHI_ERR_UNSUPPORTED, "gguf: big-endian GGUF files are not supported");
        return hachi_fail(HACHI_ERR_UNSUPPORTED, "gguf: version %" PRIu32 " not supported (only 2 and 3)",
                          g->version);
    }
    if ((st = get_u64(c, &nt, "n_tensors")) || (st = get_u64(c, &nkv, "n_kv"))) return st;
    if (nkv > left(c) / KV_MIN_BYTES)
        return hachi_fail(HACHI_ERR_FORMAT, "gguf: n_kv %" PRIu64 " cannot fit in file (size %" PRIu64 ")",
                          nkv, c->len);
    if (nt > left(c) / TENSOR_MIN_BYTES)
        return hachi_fail(HACHI_ERR_FORMAT, "gguf: n_tensors %" PRIu64 " cannot fit in file (size %" PRIu64
                          ")", nt, c->len);
    g->n_kv = (int64_t)nkv;
    g->n_tensors = (int64_t)nt;
    return HACHI_OK;
}

static hachi_status parse_kvs(hachi_gguf *g, cursor *c) {
    hachi_status st;
    g->keys = arena_alloc(&g->arena, (size_t)g->n_kv * sizeof(char *) + 1);
    g->vals = arena_alloc(&g->arena, (size_t)g->n_kv * sizeof(hachi_gguf_value) + 1);
    if (!g->keys || !g->vals || !table_init(&g->arena, &g->key_tab, g->n_kv)) return HACHI_ERR_NOMEM;
    for (int64_t i = 0; i < g->n_kv; i++) {
        uint32_t type;
        int64_t dup;
        c->key = NULL;
        if ((st = copy_name(c, &g->keys[i], "key string", i))) return st;
        TABLE_FIND(g->key_tab, g->keys[i], KEY_OF, dup);
        if (dup >= 0)
            return hachi_fail(HACHI_ERR_FORMAT, "gguf: duplicate key '%s' (entries %" PRId64 " and %" PRId64
                              ")", g->keys[i], dup, i);
        table_put(&g->key_tab, g->keys[i], i);
        c->key = g->keys[i];
        if ((st = get_u32(c, &type, "value type")) || (st = parse_value(c, type, &g->vals[i], 0))) return st;
    }
    c->key = NULL;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const hachi_gguf_value *a = hachi_gguf_get(g, "general.alignment");
    if (a) {
        if (a->type != HACHI_GGUF_UINT32)
            return hachi_fail(HACHI_ERR_FORMAT, "gguf: key 'general.alignment' has type %s, expected u32",
                              vtype_name[a->type]);
        if (a->u64 == 0 || (a->u64 & (a->u64 - 1)))
            return hachi_fail(HACHI_ERR_FORMAT, "gguf: key 'general.alignment' = %" PRIu64
                              " is not a power of two", a->u64);
        g->alignment = a->u64;
    }
    return HACHI_OK;
}

static hachi_status parse_tensor_info(hachi_gguf *g, cursor *c, int64_t i) {
    hachi_gguf_tensor *t = &g->tensors[i];
    uint64_t at = c->pos, raw;
    int64_t dup;
    hachi_status st;
    char *name;
    if ((st = copy_name(c, &name, "tensor name", i))) return st;
    t->name = name;
    TABLE_FIND(g->tensor_tab, t->name, TENSOR_OF, dup);
    if (dup >= 0)
        return hachi_fail(HACHI_ERR_FORMAT, "gguf: duplicate tensor name '%s' (tensors %" PRId64 " and %"
                          PRId64 ")", t->name, dup, i);
    table_put(&g->tensor_tab, t->name, i);
    if ((st = get_u32(c, &t->n_dims, "tensor n_dims"))) return st;
    if (t->n_dims < 1 || t->n_dims > 4)
        return hachi_fail(HACHI_ERR_FORMAT, "gguf: tensor '%s' (offset %" PRIu64 "): n_dims %" PRIu32
                          " not in 1..4", t->name, at, t->n_dims);
    uint64_t nel = 1;
    bool ovf = false;
    for (int d = 0; d < 4; d++) {
        t->ne[d] = 1;
        if ((uint32_t)d >= t->n_dims) continue;
        if ((st = get_u64(c, &raw, "tensor ne"))) return st;
        if (raw > (uint64_t)INT64_MAX)
            return hachi_fail(HACHI_ERR_FORMAT, "gguf: tensor '%s': ne[%d] = %" PRId64 " is negative",
                              t->name, d, (int64_t)raw);
        t->ne[d] = (int64_t)raw;
        if (__builtin_mul_overflow(nel, raw, &nel) || nel > (uint64_t)INT64_MAX) ovf = true;
    }
    if (ovf)
        return hachi_fail(HACHI_ERR_FORMAT, "gguf: tensor '%s': element count [%" PRId64 ", %" PRId64 ", %"
                          PRId64 ", %" PRId64 "] overflows", t->name, t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
    if ((st = get_u32(c, &t->type, "tensor type")) || (st = get_u64(c, &t->offset, "tensor offset")))
        return st;
    const hachi_type_traits *tt = hachi_type_info(t->type);
    if (!tt)
        return hachi_fail(HACHI_ERR_UNSUPPORTED, "gguf: tensor '%s' has unknown ggml type %" PRIu32,
                          t->name, t->type);
    if (t->ne[0] % tt->blck_size)
        return hachi_fail(HACHI_ERR_FORMAT, "gguf: tensor '%s': ne[0] = %" PRId64
                          " is not a multiple of the %s block size %" PRId32,
                          t->name, t->ne[0], tt->name, tt->blck_size);
    uint64_t rows = (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3]; /* <= nel: no overflow */
    if (__builtin_mul_overflow((uint64_t)(t->ne[0] / tt->blck_size) * (uint64_t)tt->type_size, rows,
                               &t->nbytes))
        return hachi_fail(HACHI_ERR_FORMAT, "gguf: tensor '%s': byte size overflows", t->name);
    return HACHI_OK;
}

/* a tensor's data range, sorted by offset (place_tensors' overlap check) */
typedef struct { uint64_t offset, nbytes; int64_t i; } data_range;
static int by_offset(const void *a, const void *b) {
    const data_range *x = a, *y = b;   /* equal offsets in the file's order */
    return x->offset != y->offset ? (x->offset < y->offset ? -1 : 1) : (x->i > y->i) - (x->i < y->i);
}

static hachi_status place_tensors(hachi_gguf *g) {
    for (int64_t i = 0; i < g->n_tensors; i++) {
        hachi_gguf_tensor *t = &g->tensors[i];
        uint64_t start, end;
        bool ovf = __builtin_add_overflow(g->data_offset, t->offset, &start);
        ovf |= __builtin_add_overflow(start, t->nbytes, &end);
        if (t->offset % g->alignment)
            return hachi_fail(HACHI_ERR_FORMAT, "gguf: tensor '%s' offset %" PRIu64
                              " is not aligned to %" PRIu64, t->name, t->offset, g->alignment);
        if (ovf || end > g->len)
            return hachi_fail(HACHI_ERR_FORMAT, "gguf: tensor '%s' data [%" PRIu64 ", %" PRIu64
                              ") extends past end of file (size %zu)", t->name,
                              ovf ? g->data_offset : start, ovf ? UINT64_MAX : end, g->len);
        t->data = g->base + start;
    }
    /* no two tensors share bytes (one tensor's data read as another's weights) */
    data_range *r = hachi_malloc(sizeof *r * (size_t)HACHI_MAX(g->n_tensors, 1));
    if (!r) return HACHI_ERR_NOMEM;
    int64_t n = 0;
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].nbytes) r[n++] = (data_range){g->tensors[i].offset, g->tensors[i].nbytes, i};
    qsort(r, (size_t)n, sizeof *r, by_offset);
    hachi_status st = HACHI_OK;
    for (int64_t i = 1; i < n && !st; i++)
        if (r[i - 1].offset + r[i - 1].nbytes > r[i].offset)
            st = hachi_fail(HACHI_ERR_FORMAT, "gguf: tensors '%s' and '%s' share data bytes (offsets %" PRIu64 " and %" PRIu64
                            ")", g->tensors[r[i - 1].i].name, g->tensors[r[i].i].name, r[i - 1].offset, r[i].offset);
    hachi_free(r);
    return st;
}

hachi_status hachi_gguf_parse(const void *buf, size_t len, hachi_gguf **out) {
    hachi_status st;
    *out = NULL;
    if (!buf && len) return hachi_fail(HACHI_ERR_INVALID_ARG, "gguf: NULL buffer");
    hachi_gguf *g = hachi_calloc(1, sizeof *g);
    if (!g) return HACHI_ERR_NOMEM;
    g->base = buf;
    g->len = len;
    cursor c = {.p = buf, .len = len, .arena = &g->arena};
    if ((st = parse_header(g, &c)) || (st = parse_kvs(g, &c))) goto fail;
    g->tensors = arena_alloc(&g->arena, (size_t)g->n_tensors * sizeof(hachi_gguf_tensor) + 1);
    if (!g->tensors || !table_init(&g->arena, &g->tensor_tab, g->n_tensors)) { st = HACHI_ERR_NOMEM; goto fail; }
    for (int64_t i = 0; i < g->n_tensors; i++)
        if ((st = parse_tensor_info(g, &c, i))) goto fail;
    /* c.pos <= len < 2^63, alignment <= 2^31: no overflow */
    g->data_offset = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    if ((st = place_tensors(g))) goto fail;
    *out = g;
    return HACHI_OK;
fail:
    hachi_gguf_free(g);
    return st;
}

hachi_status hachi_gguf_open(const char *path, hachi_gguf **out) {
    struct stat sb;
    *out = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);   /* (a FIFO must not block the open: refused below) */
    if (fd < 0) return hachi_fail(HACHI_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return hachi_fail(HACHI_ERR_IO, "cannot open '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return hachi_fail(HACHI_ERR_IO, "cannot open '%s': %s", path,
                          S_ISDIR(sb.st_mode) ? strerror(EISDIR) : "not a regular file");
    }
    if (sb.st_size == 0) {
        close(fd);
        return hachi_fail(HACHI_ERR_FORMAT, "'%s': empty file, not GGUF", path);
    }
    size_t len = (size_t)sb.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return hachi_fail(HACHI_ERR_IO, "cannot map '%s': %s", path, strerror(e));
    hachi_status st = hachi_gguf_parse(map, len, out);
    if (st) {
        char msg[900];
        snprintf(msg, sizeof msg, "%s", hachi_last_error());
        munmap(map, len);
        return hachi_fail(st, "'%s': %s", path, msg);
    }
    (*out)->map = map;
    (*out)->map_len = len;
    return HACHI_OK;
}

void hachi_gguf_free(hachi_gguf *g) {
    if (!g) return;
    if (g->map) munmap(g->map, g->map_len);
    arena_free(g->arena);
    hachi_free(g);
}

/* ---- accessors ---------------------------------------------------------------------- */

uint32_t hachi_gguf_version(const hachi_gguf *g) { return g->version; }
uint64_t hachi_gguf_alignment(const hachi_gguf *g) { return g->alignment; }
size_t hachi_gguf_file_size(const hachi_gguf *g) { return g->len; }
int64_t hachi_gguf_n_kv(const hachi_gguf *g) { return g->n_kv; }
int64_t hachi_gguf_n_tensors(const hachi_gguf *g) { return g->n_tensors; }

const char *hachi_gguf_key_at(const hachi_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->keys[i] : NULL;
}
const hachi_gguf_value *hachi_gguf_value_at(const hachi_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? &g->vals[i] : NULL;
}
const hachi_gguf_value *hachi_gguf_get(const hachi_gguf *g, const char *key) {
    int64_t i;
    TABLE_FIND(g->key_tab, key, KEY_OF, i);
    return i >= 0 ? &g->vals[i] : NULL;
}
const hachi_gguf_tensor *hachi_gguf_tensor_at(const hachi_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}
const hachi_gguf_tensor *hachi_gguf_find_tensor(const hachi_gguf *g, const char *name) {
    int64_t i;
    TABLE_FIND(g->tensor_tab, name, TENSOR_OF, i);
    return i >= 0 ? &g->tensors[i] : NULL;
}

static bool is_signed(uint32_t t) {
    return t == HACHI_GGUF_INT8 || t == HACHI_GGUF_INT16 || t == HACHI_GGUF_INT32 || t == HACHI_GGUF_INT64;
}
static bool is_unsigned(uint32_t t) {
    return t == HACHI_GGUF_UINT8 || t == HACHI_GGUF_UINT16 || t == HACHI_GGUF_UINT32 || t == HACHI_GGUF_UINT64;
}
static bool is_float(uint32_t t) { return t == HACHI_GGUF_FLOAT32 || t == HACHI_GGUF_FLOAT64; }

/* A scalar of type t and raw bits as a widened value. */
static hachi_gguf_value widen(uint32_t t, uint64_t raw) {
    hachi_gguf_value v = {.type = t};
    int n = vtype_size[t];
    if (t == HACHI_GGUF_FLOAT32) { uint32_t b = (uint32_t)raw; float f; memcpy(&f, &b, 4); v.f64 = f; }
    else if (t == HACHI_GGUF_FLOAT64) memcpy(&v.f64, &raw, 8);
    else if (t == HACHI_GGUF_BOOL) v.b = raw != 0;
    else if (is_signed(t) && n < 8) v.i64 = (int64_t)(raw << (64 - 8 * n)) >> (64 - 8 * n);
    else v.u64 = raw;
    return v;
}

/* Integer value as int64 if representable. */
static bool as_i64(const hachi_gguf_value *v, int64_t *out) {
    if (is_signed(v->type)) { *out = v->i64; return true; }
    if (is_unsigned(v->type) && v->u64 <= (uint64_t)INT64_MAX) { *out = (int64_t)v->u64; return true; }
    return false;
}
static bool as_f64(const hachi_gguf_value *v, double *out) {
    if (is_float(v->type)) { *out = v->f64; return true; }
    if (is_signed(v->type)) { *out = (double)v->i64; return true; }
    if (is_unsigned(v->type)) { *out = (double)v->u64; return true; }
    return false;
}

bool hachi_gguf_get_u32(const hachi_gguf *g, const char *key, uint32_t *out) {
    const hachi_gguf_value *v = hachi_gguf_get(g, key);
    if (!v) return false;
    if (is_unsigned(v->type) && v->u64 <= UINT32_MAX) { *out = (uint32_t)v->u64; return true; }
    if (is_signed(v->type) && v->i64 >= 0 && v->i64 <= (int64_t)UINT32_MAX) { *out = (uint32_t)v->i64; return true; }
    return false;
}
bool hachi_gguf_get_i64(const hachi_gguf *g, const char *key, int64_t *out) {
    const hachi_gguf_value *v = hachi_gguf_get(g, key);
    return v && as_i64(v, out);
}
bool hachi_gguf_get_f32(const hachi_gguf *g, const char *key, float *out) {
    const hachi_gguf_value *v = hachi_gguf_get(g, key);
    double d;
    if (!v || !as_f64(v, &d)) return false;
    *out = (float)d;
    return true;
}
bool hachi_gguf_get_bool(const hachi_gguf *g, const char *key, bool *out) {
    const hachi_gguf_value *v = hachi_gguf_get(g, key);
    if (!v || v->type != HACHI_GGUF_BOOL) return false;
    *out = v->b;
    return true;
}
bool hachi_gguf_get_str(const hachi_gguf *g, const char *key, hachi_gguf_str *out) {
    const hachi_gguf_value *v = hachi_gguf_get(g, key);
    if (!v || v->type != HACHI_GGUF_STRING) return false;
    *out = v->str;
    return true;
}

/* Element i of a fixed-size array, widened. */
static bool arr_elem(const hachi_gguf_value *a, uint64_t i, hachi_gguf_value *out) {
    if (!a || a->type != HACHI_GGUF_ARRAY || i >= a->arr.n || a->arr.type >= HACHI_GGUF_VTYPE_COUNT ||
        !vtype_size[a->arr.type])
        return false;
    int n = vtype_size[a->arr.type];
    *out = widen(a->arr.type, rd_le((const uint8_t *)a->arr.data + i * (uint64_t)n, n));
    return true;
}
bool hachi_gguf_arr_i64(const hachi_gguf_value *arr, uint64_t i, int64_t *out) {
    hachi_gguf_value v;
    return arr_elem(arr, i, &v) && as_i64(&v, out);
}
bool hachi_gguf_arr_f64(const hachi_gguf_value *arr, uint64_t i, double *out) {
    hachi_gguf_value v;
    return arr_elem(arr, i, &v) && as_f64(&v, out);
}
bool hachi_gguf_arr_bool(const hachi_gguf_value *arr, uint64_t i, bool *out) {
    hachi_gguf_value v;
    if (!arr_elem(arr, i, &v) || v.type != HACHI_GGUF_BOOL) return false;
    *out = v.b;
    return true;
}
bool hachi_gguf_arr_str(const hachi_gguf_value *arr, uint64_t i, hachi_gguf_str *out) {
    if (!arr || arr->type != HACHI_GGUF_ARRAY || arr->arr.type != HACHI_GGUF_STRING || i >= arr->arr.n)
        return false;
    *out = arr->arr.strs[i];
    return true;
}
bool hachi_gguf_str_eq(hachi_gguf_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || !memcmp(s.ptr, cstr, n));
}

/* ---- writer ---------------------------------------------------------------------------- */

typedef struct {
    char *key;
    uint32_t type;
    uint8_t *payload;      /* the encoded value that follows the type */
    uint64_t nbytes;
} wkv;

typedef struct {
    char *name;
    uint32_t type, n_dims;
    int64_t ne[4];
    uint64_t nbytes, offset;
    const void *data;
    hachi_gguf_fill_fn fill;
    void *ctx;
} wtensor;

struct hachi_gguf_writer {
    wkv *kv; int64_t n_kv, cap_kv;
    wtensor *t; int64_t n_t, cap_t;
};

hachi_gguf_writer *hachi_gguf_writer_new(void) { return hachi_calloc(1, sizeof(hachi_gguf_writer)); }

void hachi_gguf_writer_free(hachi_gguf_writer *w) {
    if (!w) return;
    for (int64_t i = 0; i < w->n_kv; i++) { hachi_free(w->kv[i].key); hachi_free(w->kv[i].payload); }
    for (int64_t i = 0; i < w->n_t; i++) hachi_free(w->t[i].name);
    hachi_free(w->kv);
    hachi_free(w->t);
    hachi_free(w);
}

static bool grow(void **p, int64_t *cap, int64_t n, size_t elem) {
    if (n < *cap) return true;
    int64_t nc = *cap ? *cap * 2 : 16;
    void *q = hachi_realloc(*p, (size_t)nc * elem);
    if (!q) return false;
    *p = q; *cap = nc;
    return true;
}

/* Takes ownership of payload (hachi_malloc'd). */
static hachi_status put_kv(hachi_gguf_writer *w, const char *key, uint32_t type, uint8_t *payload,
                           uint64_t nbytes) {
    if (!w || !key || !*key) { hachi_free(payload); return hachi_fail(HACHI_ERR_INVALID_ARG, "gguf: empty key"); }
    for (int64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) {
            hachi_free(w->kv[i].payload);
            w->kv[i].type = type; w->kv[i].payload = payload; w->kv[i].nbytes = nbytes;
            return HACHI_OK;
        }
    char *k = hachi_strndup(key, strlen(key));
    if (!k || !grow((void **)&w->kv, &w->cap_kv, w->n_kv, sizeof(wkv))) {
        hachi_free(k); hachi_free(payload);
        return HACHI_ERR_NOMEM;
    }
    w->kv[w->n_kv++] = (wkv){k, type, payload, nbytes};
    return HACHI_OK;
}

static uint8_t *put_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
    return p + n;
}

static hachi_status set_scalar(hachi_gguf_writer *w, const char *key, uint32_t type, uint64_t raw) {
    /* what the reader accepts, or layout() would lay the file out at 32 under a key that says otherwise
     * (hachi_gguf_set_raw can still write a bad one: the reader's tests) */
    if (key && !strcmp(key, "general.alignment") && (type != HACHI_GGUF_UINT32 || !raw || (raw & (raw - 1))))
        return hachi_fail(HACHI_ERR_INVALID_ARG, "gguf: general.alignment must be a u32 power of two");
    uint8_t *p = hachi_malloc(8);
    if (!p) return HACHI_ERR_NOMEM;
    put_le(p, raw, vtype_size[type]);
    return put_kv(w, key, type, p, vtype_size[type]);
}

hachi_status hachi_gguf_set_u32(hachi_gguf_writer *w, const char *key, uint32_t v) {
    return set_scalar(w, key, HACHI_GGUF_UINT32, v);
}
hachi_status hachi_gguf_set_i32(hachi_gguf_writer *w, const char *key, int32_t v) {
    return set_scalar(w, key, HACHI_GGUF_INT32, (uint32_t)v);
}
hachi_status hachi_gguf_set_u64(hachi_gguf_writer *w, const char *key, uint64_t v) {
    return set_scalar(w, key, HACHI_GGUF_UINT64, v);
}
hachi_status hachi_gguf_set_f32(hachi_gguf_writer *w, const char *key, float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    return set_scalar(w, key, HACHI_GGUF_FLOAT32, b);
}
hachi_status hachi_gguf_set_bool(hachi_gguf_writer *w, const char *key, bool v) {
    return set_scalar(w, key, HACHI_GGUF_BOOL, v ? 1 : 0);
}
static hachi_status set_str_n(hachi_gguf_writer *w, const char *key, const char *v, size_t n) {
    uint8_t *p = hachi_malloc(8 + n);
    if (!p) return HACHI_ERR_NOMEM;
    memcpy(put_le(p, n, 8), v, n);   // NOLINT(bugprone-not-null-terminated-result): GGUF strings are length-prefixed, no NUL
    return put_kv(w, key, HACHI_GGUF_STRING, p, 8 + n);
}
hachi_status hachi_gguf_set_str(hachi_gguf_writer *w, const char *key, const char *v) {
    return set_str_n(w, key, v, strlen(v));
}
hachi_status hachi_gguf_set_arr(hachi_gguf_writer *w, const char *key, uint32_t elem_type,
                                const void *data, uint64_t n) {
    if (elem_type >= HACHI_GGUF_VTYPE_COUNT || !vtype_size[elem_type])
        return hachi_fail(HACHI_ERR_INVALID_ARG, "gguf: key '%s': array element type %" PRIu32
                          " is not a fixed-size type", key, elem_type);
    if (n > (SIZE_MAX - 12) / 8) return hachi_fail(HACHI_ERR_INVALID_ARG, "gguf: array too large");
    uint64_t sz = n * vtype_size[elem_type];
    uint8_t *p = hachi_malloc((size_t)(12 + sz));
    if (!p) return HACHI_ERR_NOMEM;
    uint8_t *q = put_le(put_le(p, elem_type, 4), n, 8);
    if (sz) memcpy(q, data, (size_t)sz);
    return put_kv(w, key, HACHI_GGUF_ARRAY, p, 12 + sz);
}
/* An array of n strings (not NUL-terminated). */
static hachi_status set_strs(hachi_gguf_writer *w, const char *key, const hachi_gguf_str *strs, uint64_t n) {
    uint64_t sz = 12;
    for (uint64_t i = 0; i < n; i++) sz += 8 + strs[i].len;
    uint8_t *p = hachi_malloc((size_t)sz);
    if (!p) return HACHI_ERR_NOMEM;
    uint8_t *q = put_le(put_le(p, HACHI_GGUF_STRING, 4), n, 8);
    for (uint64_t i = 0; i < n; i++) {
        q = put_le(q, strs[i].len, 8);
        memcpy(q, strs[i].ptr, (size_t)strs[i].len);
        q += strs[i].len;
    }
    return put_kv(w, key, HACHI_GGUF_ARRAY, p, sz);
}
hachi_status hachi_gguf_set_arr_str(hachi_gguf_writer *w, const char *key, const char *const *strs,
                                    uint64_t n) {
    if (n > SIZE_MAX / sizeof(hachi_gguf_str)) return hachi_fail(HACHI_ERR_INVALID_ARG, "gguf: array too large");
    hachi_gguf_str *s = hachi_malloc((size_t)n * sizeof *s + 1);
    if (!s) return HACHI_ERR_NOMEM;
    for (uint64_t i = 0; i < n; i++) s[i] = (hachi_gguf_str){strs[i], strlen(strs[i])};
    const hachi_status st = set_strs(w, key, s, n);
    hachi_free(s);
    return st;
}
hachi_status hachi_gguf_copy_kv(hachi_gguf_writer *w, const hachi_gguf *g, int64_t k) {
    const char *key = hachi_gguf_key_at(g, k);
    const hachi_gguf_value *v = hachi_gguf_value_at(g, k);
    if (!key || !v) return hachi_fail(HACHI_ERR_INVALID_ARG, "gguf: no key %" PRId64 " to copy", k);
    switch (v->type) {
    case HACHI_GGUF_STRING: return set_str_n(w, key, v->str.ptr, (size_t)v->str.len);
    case HACHI_GGUF_ARRAY:
        if (v->arr.type == HACHI_GGUF_STRING) return set_strs(w, key, v->arr.strs, v->arr.n);
        if (v->arr.type == HACHI_GGUF_ARRAY)
            return hachi_fail(HACHI_ERR_UNSUPPORTED, "gguf: key '%s': arrays of arrays are not copied", key);
        return hachi_gguf_set_arr(w, key, v->arr.type, v->arr.data, v->arr.n);
    case HACHI_GGUF_FLOAT32: return hachi_gguf_set_f32(w, key, (float)v->f64);
    case HACHI_GGUF_FLOAT64: {
        uint64_t b;
        memcpy(&b, &v->f64, 8);
        return set_scalar(w, key, HACHI_GGUF_FLOAT64, b);
    }
    case HACHI_GGUF_BOOL: return hachi_gguf_set_bool(w, key, v->b);
    case HACHI_GGUF_INT8: case HACHI_GGUF_INT16: case HACHI_GGUF_INT32: case HACHI_GGUF_INT64:
        return set_scalar(w, key, v->type, (uint64_t)v->i64);   /* the low bytes: two's complement */
    default: return set_scalar(w, key, v->type, v->u64);
    }
}
hachi_status hachi_gguf_set_raw(hachi_gguf_writer *w, const char *key, uint32_t type,
                                const void *payload, uint64_t nbytes) {
    uint8_t *p = hachi_malloc((size_t)nbytes);
    if (!p) return HACHI_ERR_NOMEM;
    if (nbytes) memcpy(p, payload, (size_t)nbytes);
    return put_kv(w, key, type, p, nbytes);
}

static hachi_status add_tensor(hachi_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                               const int64_t *ne, const void *data, hachi_gguf_fill_fn fill, void *ctx) {
    const hachi_type_traits *tt = hachi_type_info(type);
    if (!w || !name || !*name) return hachi_fail(HACHI_ERR_INVALID_ARG, "gguf: empty tensor name");
    if (!tt) return hachi_fail(HACHI_ERR_INVALID_ARG, "gguf: tensor '%s': unknown type %" PRIu32, name, type);
    if (n_dims < 1 || n_dims > 4)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "gguf: tensor '%s': n_dims %" PRIu32 " not in 1..4", name, n_dims);
    for (int64_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return hachi_fail(HACHI_ERR_INVALID_ARG, "gguf: duplicate tensor '%s'", name);
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}, .data = data, .fill = fill, .ctx = ctx};
    uint64_t rows = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0) return hachi_fail(HACHI_ERR_INVALID_ARG, "gguf: tensor '%s': negative ne", name);
        t.ne[d] = ne[d];
        if (d > 0 && __builtin_mul_overflow(rows, (uint64_t)ne[d], &rows))
            return hachi_fail(HACHI_ERR_INVALID_ARG, "gguf: tensor '%s': size overflows", name);
    }
    if (t.ne[0] % tt->blck_size)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "gguf: tensor '%s': ne[0] = %" PRId64
                          " not a multiple of block size %" PRId32, name, t.ne[0], tt->blck_size);
    if (__builtin_mul_overflow(hachi_row_size(type, t.ne[0]), rows, &t.nbytes))
        return hachi_fail(HACHI_ERR_INVALID_ARG, "gguf: tensor '%s': size overflows", name);
    if (!(t.name = hachi_strndup(name, strlen(name)))) return HACHI_ERR_NOMEM;
    if (!grow((void **)&w->t, &w->cap_t, w->n_t, sizeof(wtensor))) { hachi_free(t.name); return HACHI_ERR_NOMEM; }
    w->t[w->n_t++] = t;
    return HACHI_OK;
}

hachi_status hachi_gguf_add_tensor(hachi_gguf_writer *w, const char *name, uint32_t type,
                                   uint32_t n_dims, const int64_t *ne, const void *data) {
    return add_tensor(w, name, type, n_dims, ne, data, NULL, NULL);
}
hachi_status hachi_gguf_add_tensor_fn(hachi_gguf_writer *w, const char *name, uint32_t type,
                                      uint32_t n_dims, const int64_t *ne,
                                      hachi_gguf_fill_fn fill, void *ctx) {
    return add_tensor(w, name, type, n_dims, ne, NULL, fill, ctx);
}

static uint64_t pad_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Alignment the file will use, and the layout: tensor offsets and total size. */
static uint64_t layout(hachi_gguf_writer *w, uint64_t *data_offset) {
    uint64_t align = GGUF_DEFAULT_ALIGNMENT, pos = 24;
    for (int64_t i = 0; i < w->n_kv; i++) {
        const wkv *k = &w->kv[i];
        if (!strcmp(k->key, "general.alignment") && k->type == HACHI_GGUF_UINT32 && k->nbytes == 4) {
            uint64_t a = rd_le(k->payload, 4);
            if (a && !(a & (a - 1))) align = a;
        }
        pos += 8 + strlen(k->key) + 4 + k->nbytes;
    }
    for (int64_t i = 0; i < w->n_t; i++) pos += 8 + strlen(w->t[i].name) + 4 + 8 * w->t[i].n_dims + 4 + 8;
    *data_offset = pad_to(pos, align);
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        off = pad_to(off + w->t[i].nbytes, align);
    }
    return *data_offset + off;
}

/* Serialise into dst[0..total), which is zero-filled. */
static hachi_status serialise(hachi_gguf_writer *w, uint8_t *dst, uint64_t data_offset) {
    uint8_t *p = dst;
    memcpy(p, "GGUF", 4);   // NOLINT(bugprone-not-null-terminated-result): the 4-byte magic, not a string
    p = put_le(put_le(put_le(p + 4, 3, 4), (uint64_t)w->n_t, 8), (uint64_t)w->n_kv, 8);
    for (int64_t i = 0; i < w->n_kv; i++) {
        const wkv *k = &w->kv[i];
        size_t n = strlen(k->key);
        p = put_le(p, n, 8);
        memcpy(p, k->key, n);
        p = put_le(p + n, k->type, 4);
        if (k->nbytes) memcpy(p, k->payload, (size_t)k->nbytes);
        p += k->nbytes;
    }
    for (int64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        size_t n = strlen(t->name);
        p = put_le(p, n, 8);
        memcpy(p, t->name, n);
        p = put_le(p + n, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++) p = put_le(p, (uint64_t)t->ne[d], 8);
        p = put_le(put_le(p, t->type, 4), t->offset, 8);
    }
    for (int64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        uint8_t *q = dst + data_offset + t->offset;
        if (!t->nbytes) continue;
        if (t->fill) {
            hachi_status st = t->fill(t->ctx, q, t->nbytes);
            if (st) return st;
        } else if (t->data) {
            memcpy(q, t->data, (size_t)t->nbytes);
        } else {
            return hachi_fail(HACHI_ERR_INVALID_ARG, "gguf: tensor '%s' has no data", t->name);
        }
    }
    return HACHI_OK;
}

hachi_status hachi_gguf_writer_to_buffer(hachi_gguf_writer *w, void **out, size_t *len) {
    uint64_t data_offset, total = layout(w, &data_offset);
    if (total > SIZE_MAX) return hachi_fail(HACHI_ERR_NOMEM, "gguf: %" PRIu64 " bytes do not fit", total);
    uint8_t *buf = hachi_calloc(1, (size_t)total);
    if (!buf) return HACHI_ERR_NOMEM;
    hachi_status st = serialise(w, buf, data_offset);
    if (st) { hachi_free(buf); return st; }
    *out = buf;
    *len = (size_t)total;
    return HACHI_OK;
}

hachi_status hachi_gguf_writer_write(hachi_gguf_writer *w, const char *path) {
    uint64_t data_offset, total = layout(w, &data_offset);
    const size_t cap = strlen(path) + 8;
    char *tmp = hachi_malloc(cap);
    if (!tmp) return HACHI_ERR_NOMEM;
    hachi_status st = HACHI_OK;
    void *map = MAP_FAILED;
    if ((st = hachi_replaceable(path))) { hachi_free(tmp); return st; }
    int fd, e;
    if ((st = hachi_tmp_create(path, tmp, cap, &fd))) goto out;
    /* reserve the blocks first: a full disk is an error here, not a SIGBUS later */
    if (total > (uint64_t)INT64_MAX || (e = posix_fallocate(fd, 0, (off_t)total)) != 0) {
        st = hachi_fail(HACHI_ERR_IO, "cannot write '%s' (%" PRIu64 " bytes): %s", tmp, total,
                        total > (uint64_t)INT64_MAX ? "too large" : strerror(e));
        goto out;
    }
    map = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) { st = hachi_fail(HACHI_ERR_IO, "cannot map '%s': %s", tmp, strerror(errno)); goto out; }
    if ((st = serialise(w, map, data_offset))) goto out;
    if (msync(map, (size_t)total, MS_SYNC) != 0 || fsync(fd) != 0) {
        st = hachi_fail(HACHI_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
        goto out;
    }
out:
    if (map != MAP_FAILED) munmap(map, (size_t)total);
    if (fd >= 0 && close(fd) != 0 && !st) st = hachi_fail(HACHI_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    if (!st && rename(tmp, path) != 0) st = hachi_fail(HACHI_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path,
                                                       strerror(errno));
    if (st && fd >= 0) unlink(tmp);
    hachi_free(tmp);
    return st;
}
