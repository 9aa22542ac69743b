/* util: the library's error text, counted allocation, fp16/bf16 conversion.
 * Every allocation in src/ goes through hachi_malloc/calloc/free so tests can
 * assert that decoding allocates nothing (hachi_alloc_count). */
#ifndef HACHI_UTIL_H
#define HACHI_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "hachi.h"

/* Set the thread-local last-error text and return st (so: `return hachi_fail(...)`). A macro so
 * that "returns st" is visible where it is called: the static analyzer (make lint), which does not
 * follow variadic calls, then knows that a failing path returns non-zero. To set the text alone,
 * call hachi_error_set. */
#define hachi_fail(st, ...) (hachi_error_set(__VA_ARGS__), (st))
void hachi_error_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void hachi_clear_error(void);

void *hachi_malloc(size_t n);             /* NULL on failure, error text set */
void *hachi_calloc(size_t n, size_t size);
void *hachi_aligned_alloc(size_t n);      /* 64-byte aligned, zeroed; free with hachi_free */
void *hachi_realloc(void *p, size_t n);
void  hachi_free(void *p);
char *hachi_strndup(const char *s, size_t n);
uint64_t hachi_alloc_count(void);         /* allocations made so far by the library */

double hachi_time_ms(void);               /* monotonic clock */
/* The read bandwidth probe's loop (bandwidth.c): the sum of the n 32-byte words at p (32-byte
 * aligned; n rounded down to a multiple of 4), for programs that read memory as the probe does. */
uint64_t hachi_read_sum(const void *p, int64_t n);
/* A file the library replaces (written to path.tmp, renamed over path) must be a regular file
 * or not there yet: renaming over a FIFO, a device or a symbolic link would replace it instead of
 * writing to it. HACHI_ERR_IO naming it otherwise. */
hachi_status hachi_replaceable(const char *path);
/* The file a whole-file write goes to before its rename over path: path.tmp, or path.tmp.1 ..
 * path.tmp.99 while those exist, created anew (O_EXCL: never a file that is there, which may be
 * an input, and never through a symbolic link), mode 0644 less the umask. Its name goes to tmp
 * (cap bytes), its descriptor to *fd; HACHI_ERR_INVALID_ARG for a path too long for tmp. */
hachi_status hachi_tmp_create(const char *path, char *tmp, size_t cap, int *fd);
/* A file the library reads whole must be a regular file: a FIFO would block the open. */
hachi_status hachi_readable_file(const char *path, const char *what);
size_t hachi_mem_available(void);         /* bytes the system can still give (MemAvailable, or
                                             $HACHI_MEM_AVAILABLE when set); 0: unknown */

/* IEEE half <-> float, round to nearest even; bf16 by truncation-free rounding. */
static inline float hachi_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else {  /* subnormal: normalise */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) bits = sign | 0x7f800000 | (man << 13);
    else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    float f; memcpy(&f, &bits, 4); return f;
}
static inline uint16_t hachi_f32_to_f16(float f) {
    uint32_t x; memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, absx = x & 0x7fffffff;
    if (absx > 0x7f800000) return (uint16_t)(sign | 0x7e00);            /* NaN */
    if (absx >= 0x477ff000) return (uint16_t)(sign | 0x7c00);           /* overflow -> inf */
    if (absx < 0x38800000) {                                            /* subnormal / zero */
        if (absx < 0x33000000) return (uint16_t)sign;
        uint32_t e = absx >> 23, m = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e;   /* 14..24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = absx + 0xc8000fffu + ((absx >> 13) & 1);               /* rebias + round */
    return (uint16_t)(sign | (r >> 13));
}
static inline float hachi_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16; float f; memcpy(&f, &bits, 4); return f;
}
static inline uint16_t hachi_f32_to_bf16(float f) {
    uint32_t x; memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 64);  /* quiet NaN */
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

#define HACHI_MIN(a, b) ((a) < (b) ? (a) : (b))
#define HACHI_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Four floats as one value, unaligned and read through float pointers (may_alias, as the
 * intrinsics headers' own unaligned types): the GCC / clang vector extension (SSE2 on x86-64,
 * NEON on arm64), one register. Element-wise arithmetic on them is bit for bit the scalar one:
 * the model's row ops and the merge of attention partials use it. */
typedef float hachi_f32x4 __attribute__((vector_size(16), aligned(4), may_alias));
typedef int32_t hachi_i32x4 __attribute__((vector_size(16), aligned(4), may_alias));

#endif
