/* bandwidth: measures the memory read bandwidth that bounds decode speed.
 * A buffer much larger than the last-level cache is written once (so every
 * page is real, not the shared zero page), then summed by every thread of a
 * pool over its own slice with 32-byte vector loads and four independent
 * accumulators; the best of several passes is the machine's read roofline.
 * Not a hot path of inference: used once per `hachi bench`. */
#include "hachi.h"
#include <stdint.h>
#include "threads.h"
#include "util.h"

typedef uint64_t v4u64 __attribute__((vector_size(32), aligned(32)));

typedef struct bw_task {
    const v4u64 *buf;
    int64_t n;                      /* vectors in buf */
    uint64_t sink[64][8];           /* per-thread results, one cache line each: keeps the sums live */
} bw_task;

/* Sum of n vectors (n a multiple of 4). One body, compiled once generic and,
 * on x86-64, once for AVX2 (picked at run time). */
#define BW_SUM_BODY                                                           \
    v4u64 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                             \
    for (int64_t i = 0; i < n; i += 4) {                                      \
        a0 += p[i]; a1 += p[i + 1]; a2 += p[i + 2]; a3 += p[i + 3];           \
    }                                                                         \
    v4u64 a = a0 + a1 + a2 + a3;                                              \
    return a[0] + a[1] + a[2] + a[3];

static uint64_t sum_generic(const v4u64 *p, int64_t n) { BW_SUM_BODY }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) static uint64_t sum_avx2(const v4u64 *p, int64_t n) { BW_SUM_BODY }
static uint64_t (*pick_sum(void))(const v4u64 *, int64_t) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? sum_avx2 : sum_generic;
}
#else
static uint64_t (*pick_sum(void))(const v4u64 *, int64_t) { return sum_generic; }
#endif

static uint64_t (*sum_fn)(const v4u64 *, int64_t);

uint64_t hachi_read_sum(const void *p, int64_t n) { return pick_sum()((const v4u64 *)p, n / 4 * 4); }

static void bw_fill(void *ctx, int ith, int nth) {
    bw_task *t = ctx;
    int64_t lo, hi;
    hachi_split(t->n, 4, ith, nth, &lo, &hi);
    v4u64 *p = (v4u64 *)t->buf;
    for (int64_t i = lo; i < hi; i++) p[i] = (v4u64){(uint64_t)i, (uint64_t)i * 3, (uint64_t)i ^ 5, 1};
}

static void bw_read(void *ctx, int ith, int nth) {
    bw_task *t = ctx;
    int64_t lo, hi;
    hachi_split(t->n, 4, ith, nth, &lo, &hi);
    t->sink[ith % 64][0] += sum_fn(t->buf + lo, hi - lo);
}

double hachi_measure_read_bandwidth(int n_threads, size_t bytes, int passes) {
    hachi_pool *pool = NULL;
    if (!bytes) bytes = (size_t)1 << 30;
    if (passes <= 0) passes = 5;
    if (hachi_pool_create(n_threads > 0 ? n_threads : hachi_physical_cores(), &pool)) return -1.0;
    if (!sum_fn) sum_fn = pick_sum();
    bytes = bytes / 128 * 128;
    bw_task *t = hachi_aligned_alloc(sizeof *t);
    void *buf = NULL;
    while (t && bytes >= 128 && !(buf = hachi_aligned_alloc(bytes))) bytes /= 2;
    double best = -1.0;
    if (t && buf) {
        t->buf = buf;
        t->n = (int64_t)(bytes / sizeof(v4u64));
        hachi_pool_run(pool, bw_fill, t);
        hachi_pool_run(pool, bw_read, t);        /* warm-up: TLB, thread wake-up */
        for (int r = 0; r < (passes > 0 ? passes : 1); r++) {
            double t0 = hachi_time_ms();
            hachi_pool_run(pool, bw_read, t);
            double ms = hachi_time_ms() - t0;
            double gbs = ms > 0 ? (double)bytes / (ms * 1e6) : 0.0;
            if (gbs > best) best = gbs;
        }
    }
    hachi_free(buf);
    hachi_free(t);
    hachi_pool_free(pool);
    return best;
}

