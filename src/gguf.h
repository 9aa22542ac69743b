/* gguf: a pure, bounds-checked GGUF v2/v3 parser over (ptr, len), an mmap
 * open on top of it, and a writer. Strings and tensor data point into the
 * parsed buffer (which must outlive the hachi_gguf); nothing is copied except
 * the small index tables. */
#ifndef HACHI_GGUF_H
#define HACHI_GGUF_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "hachi.h"

enum hachi_gguf_vtype {
    HACHI_GGUF_UINT8 = 0, HACHI_GGUF_INT8 = 1, HACHI_GGUF_UINT16 = 2, HACHI_GGUF_INT16 = 3,
    HACHI_GGUF_UINT32 = 4, HACHI_GGUF_INT32 = 5, HACHI_GGUF_FLOAT32 = 6, HACHI_GGUF_BOOL = 7,
    HACHI_GGUF_STRING = 8, HACHI_GGUF_ARRAY = 9, HACHI_GGUF_UINT64 = 10, HACHI_GGUF_INT64 = 11,
    HACHI_GGUF_FLOAT64 = 12, HACHI_GGUF_VTYPE_COUNT
};

typedef struct hachi_gguf_str { const char *ptr; uint64_t len; } hachi_gguf_str; /* not NUL-terminated */

typedef struct hachi_gguf_value {
    uint32_t type;                    /* enum hachi_gguf_vtype */
    union {
        uint64_t u64; int64_t i64; double f64; bool b;   /* scalars, widened */
        hachi_gguf_str str;
        struct {
            uint32_t type;            /* element type */
            uint64_t n;               /* element count */
            const void *data;         /* fixed-size elements: raw little-endian, maybe unaligned */
            hachi_gguf_str *strs;     /* string elements: [n] */
            struct hachi_gguf_value *items; /* array elements (nested arrays): [n] */
        } arr;
    };
} hachi_gguf_value;

typedef struct hachi_gguf_tensor {
    const char *name;                 /* NUL-terminated copy */
    uint32_t n_dims;
    int64_t ne[4];                    /* ne[0] = row length (contiguous); unused dims = 1 */
    uint32_t type;                    /* enum hachi_type (ggml type id) */
    uint64_t offset;                  /* relative to the data section */
    const void *data;                 /* absolute pointer into the buffer */
    uint64_t nbytes;
} hachi_gguf_tensor;

typedef struct hachi_gguf hachi_gguf;

/* Parse buf[0..len). Errors (HACHI_ERR_FORMAT / UNSUPPORTED) name the offset, key or tensor. */
hachi_status hachi_gguf_parse(const void *buf, size_t len, hachi_gguf **out);
/* mmap the file read-only and parse it. */
hachi_status hachi_gguf_open(const char *path, hachi_gguf **out);
void hachi_gguf_free(hachi_gguf *g);                         /* NULL-safe; unmaps when opened */

uint32_t hachi_gguf_version(const hachi_gguf *g);
uint64_t hachi_gguf_alignment(const hachi_gguf *g);
size_t   hachi_gguf_file_size(const hachi_gguf *g);

int64_t  hachi_gguf_n_kv(const hachi_gguf *g);
const char *hachi_gguf_key_at(const hachi_gguf *g, int64_t i);              /* NUL-terminated */
const hachi_gguf_value *hachi_gguf_value_at(const hachi_gguf *g, int64_t i);
const hachi_gguf_value *hachi_gguf_get(const hachi_gguf *g, const char *key); /* NULL if absent */

/* Typed getters: false when absent or when the stored type does not convert
 * (integers convert to any integer type they fit, ints and floats to float). */
bool hachi_gguf_get_u32(const hachi_gguf *g, const char *key, uint32_t *out);
bool hachi_gguf_get_i64(const hachi_gguf *g, const char *key, int64_t *out);
bool hachi_gguf_get_f32(const hachi_gguf *g, const char *key, float *out);
bool hachi_gguf_get_bool(const hachi_gguf *g, const char *key, bool *out);
bool hachi_gguf_get_str(const hachi_gguf *g, const char *key, hachi_gguf_str *out);
/* Array access: element i converted; false on a type mismatch or i out of range. */
bool hachi_gguf_arr_i64(const hachi_gguf_value *arr, uint64_t i, int64_t *out);
bool hachi_gguf_arr_f64(const hachi_gguf_value *arr, uint64_t i, double *out);
bool hachi_gguf_arr_bool(const hachi_gguf_value *arr, uint64_t i, bool *out);
bool hachi_gguf_arr_str(const hachi_gguf_value *arr, uint64_t i, hachi_gguf_str *out);
bool hachi_gguf_str_eq(hachi_gguf_str s, const char *cstr);

int64_t hachi_gguf_n_tensors(const hachi_gguf *g);
const hachi_gguf_tensor *hachi_gguf_tensor_at(const hachi_gguf *g, int64_t i);
const hachi_gguf_tensor *hachi_gguf_find_tensor(const hachi_gguf *g, const char *name);

/* ---- writer ------------------------------------------------------------------ */
typedef struct hachi_gguf_writer hachi_gguf_writer;
/* Fills dst[0..nbytes) with the tensor's data when the file is written. */
typedef hachi_status (*hachi_gguf_fill_fn)(void *ctx, void *dst, uint64_t nbytes);

hachi_gguf_writer *hachi_gguf_writer_new(void);               /* GGUF v3, alignment 32 */
void hachi_gguf_writer_free(hachi_gguf_writer *w);
/* Setting a key twice replaces its value. Copies key and value. */
hachi_status hachi_gguf_set_u32(hachi_gguf_writer *w, const char *key, uint32_t v);
hachi_status hachi_gguf_set_i32(hachi_gguf_writer *w, const char *key, int32_t v);
hachi_status hachi_gguf_set_u64(hachi_gguf_writer *w, const char *key, uint64_t v);
hachi_status hachi_gguf_set_f32(hachi_gguf_writer *w, const char *key, float v);
hachi_status hachi_gguf_set_bool(hachi_gguf_writer *w, const char *key, bool v);
hachi_status hachi_gguf_set_str(hachi_gguf_writer *w, const char *key, const char *v);
/* Array of fixed-size elements (elem_type a numeric/bool vtype), data copied. */
hachi_status hachi_gguf_set_arr(hachi_gguf_writer *w, const char *key, uint32_t elem_type,
                                const void *data, uint64_t n);
hachi_status hachi_gguf_set_arr_str(hachi_gguf_writer *w, const char *key,
                                    const char *const *strs, uint64_t n);
/* Key k of g (hachi_gguf_key_at) set in w with its value as g stores it: any type but arrays
 * of arrays (HACHI_ERR_UNSUPPORTED, naming the key). */
hachi_status hachi_gguf_copy_kv(hachi_gguf_writer *w, const hachi_gguf *g, int64_t k);
/* Raw bytes for a key (for tests that craft odd values): type + encoded payload. */
hachi_status hachi_gguf_set_raw(hachi_gguf_writer *w, const char *key, uint32_t type,
                                const void *payload, uint64_t nbytes);
/* Tensor whose bytes are at data (not copied: must stay valid until write). */
hachi_status hachi_gguf_add_tensor(hachi_gguf_writer *w, const char *name, uint32_t type,
                                   uint32_t n_dims, const int64_t *ne, const void *data);
/* Tensor whose bytes are produced by fill(ctx, dst, nbytes) at write time. */
hachi_status hachi_gguf_add_tensor_fn(hachi_gguf_writer *w, const char *name, uint32_t type,
                                      uint32_t n_dims, const int64_t *ne,
                                      hachi_gguf_fill_fn fill, void *ctx);
/* Writes path.tmp, then renames it over path: an existing file is never half-written. */
hachi_status hachi_gguf_writer_write(hachi_gguf_writer *w, const char *path);
/* Serialise to memory (tests, fuzz seeds): *out malloc'd with hachi_malloc. */
hachi_status hachi_gguf_writer_to_buffer(hachi_gguf_writer *w, void **out, size_t *len);

#endif
