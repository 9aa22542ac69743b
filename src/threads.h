/* threads: a persistent worker pool. hachi_pool_run(fn) runs fn(ctx, ith, nth)
 * on every thread (the caller is thread 0) and returns when all are done; no
 * thread is created per call. Workers spin briefly, then sleep. A NULL pool
 * runs tasks inline on the caller (nth = 1). */
#ifndef HACHI_THREADS_H
#define HACHI_THREADS_H
#include "hachi.h"

/* One pause of a spin-wait loop. */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void hachi_cpu_relax(void) { _mm_pause(); }
#elif defined(__aarch64__)
static inline void hachi_cpu_relax(void) { __asm__ __volatile__("yield" ::: "memory"); }
#else
static inline void hachi_cpu_relax(void) {}
#endif

typedef struct hachi_pool hachi_pool;
typedef void (*hachi_task_fn)(void *ctx, int ith, int nth);

hachi_status hachi_pool_create(int n_threads, hachi_pool **out);  /* n_threads >= 1 */
void hachi_pool_free(hachi_pool *pool);
int  hachi_pool_size(const hachi_pool *pool);
void hachi_pool_run(hachi_pool *pool, hachi_task_fn fn, void *ctx);
/* Inside a task run by hachi_pool_run: wait until all nth threads reach it.
 * Every thread of the run must call it the same number of times. No-op for 1 thread. */
void hachi_pool_barrier(hachi_pool *pool);
/* Split [0, n) into nth near-equal parts (multiples of `align`): part ith is [*lo, *hi). */
void hachi_split(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi);

#endif
