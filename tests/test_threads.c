/* Tests for the worker pool: every thread runs every task exactly once, the
 * join really waits, the barrier orders phases, create/free cycles are clean,
 * hachi_split covers [0, n). Prints (never asserts) the round-trip latency. */
#include "test.h"
#include "threads.h"
#include "util.h"
#include <stdatomic.h>
#include <unistd.h>

typedef struct {
    atomic_long sum;            /* sum of (ith + 1) over all calls */
    atomic_int calls;
    atomic_int seen_nth;
    long per_thread[8];         /* each thread writes only its own slot */
    int round;
} count_ctx;

static void count_task(void *arg, int ith, int nth) {
    count_ctx *c = arg;
    atomic_fetch_add(&c->sum, ith + 1);
    atomic_fetch_add(&c->calls, 1);
    atomic_store(&c->seen_nth, nth);   /* all threads store the same value: checked after join */
    if (ith < 8) c->per_thread[ith] += c->round;
}

TEST(threads_pool_many_runs) {
    static const int sizes[] = {1, 2, 4};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int n = sizes[si];
        hachi_pool *pool = NULL;
        CHECK(hachi_pool_create(n, &pool) == HACHI_OK);
        if (!pool) return;
        CHECK(hachi_pool_size(pool) == n);
        count_ctx c;
        memset(&c, 0, sizeof c);
        const int runs = getenv("HACHI_TEST_QUICK") ? 2000 : 20000;   /* instrumented, emulated: fewer */
        long expect_pt = 0;
        for (int r = 0; r < runs; r++) {
            c.round = r;
            expect_pt += r;
            hachi_pool_run(pool, count_task, &c);
            /* join must be complete: the count is exact right after return */
            if (atomic_load(&c.calls) != (r + 1) * n) {
                CHECKF(0, "n=%d run %d: %d calls, want %d", n, r, atomic_load(&c.calls), (r + 1) * n);
                break;
            }
        }
        CHECK(atomic_load(&c.seen_nth) == n);
        CHECK(atomic_load(&c.sum) == (long)runs * n * (n + 1) / 2);
        for (int i = 0; i < n; i++) CHECKF(c.per_thread[i] == expect_pt, "n=%d thread %d", n, i);
        hachi_pool_free(pool);
    }
}

/* Runs separated by pauses longer than the spin window exercise the sleep path. */
TEST(threads_pool_sleep_wake) {
    hachi_pool *pool = NULL;
    CHECK(hachi_pool_create(3, &pool) == HACHI_OK);
    if (!pool) return;
    count_ctx c;
    memset(&c, 0, sizeof c);
    for (int r = 0; r < 20; r++) {
        hachi_pool_run(pool, count_task, &c);
        usleep(r % 2 ? 2000 : 50);
    }
    CHECK(atomic_load(&c.calls) == 60);
    CHECK(atomic_load(&c.sum) == 20 * 6);
    hachi_pool_free(pool);
}

typedef struct {
    hachi_pool *pool;
    int64_t n;
    int *a, *b;                 /* phase 1 fills a; phase 2 reads other threads' parts of a */
} barrier_ctx;

static void barrier_task(void *arg, int ith, int nth) {
    barrier_ctx *c = arg;
    for (int rep = 0; rep < 4; rep++) {
        int64_t lo, hi;
        hachi_split(c->n, 1, ith, nth, &lo, &hi);
        for (int64_t i = lo; i < hi; i++) c->a[i] = (int)i * 3 + rep;
        hachi_pool_barrier(c->pool);
        /* read a mirrored part that (mostly) belongs to another thread */
        for (int64_t i = lo; i < hi; i++) c->b[i] += c->a[c->n - 1 - i];
        hachi_pool_barrier(c->pool);
    }
}

TEST(threads_pool_barrier) {
    static const int sizes[] = {1, 2, 4};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        hachi_pool *pool = NULL;
        CHECK(hachi_pool_create(sizes[si], &pool) == HACHI_OK);
        if (!pool) return;
        enum { N = 1001 };
        static int a[N], b[N];
        memset(b, 0, sizeof b);
        barrier_ctx c = {pool, N, a, b};
        for (int r = 0; r < 200; r++) hachi_pool_run(pool, barrier_task, &c);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            int j = N - 1 - i, want = 200 * (4 * j * 3 + (0 + 1 + 2 + 3));
            if (b[i] != want) bad++;
        }
        CHECKF(bad == 0, "pool of %d: %d wrong entries after barrier phases", sizes[si], bad);
        hachi_pool_free(pool);
    }
}

TEST(threads_pool_create_free_cycles) {
    for (int i = 0; i < 50; i++) {
        hachi_pool *pool = NULL;
        CHECK(hachi_pool_create(1 + i % 4, &pool) == HACHI_OK);
        count_ctx c;
        memset(&c, 0, sizeof c);
        if (i % 3) hachi_pool_run(pool, count_task, &c);
        hachi_pool_free(pool);
    }
    hachi_pool *pool = (hachi_pool *)1;
    CHECK(hachi_pool_create(0, &pool) == HACHI_ERR_INVALID_ARG);
    CHECK(pool == NULL);
    hachi_pool_free(NULL);
    /* NULL pool runs inline */
    count_ctx c;
    memset(&c, 0, sizeof c);
    hachi_pool_run(NULL, count_task, &c);
    CHECK(atomic_load(&c.calls) == 1 && atomic_load(&c.seen_nth) == 1);
}

TEST(threads_run_allocates_nothing) {
    hachi_pool *pool = NULL;
    CHECK(hachi_pool_create(2, &pool) == HACHI_OK);
    if (!pool) return;
    count_ctx c;
    memset(&c, 0, sizeof c);
    uint64_t a0 = hachi_alloc_count();
    for (int r = 0; r < 100; r++) hachi_pool_run(pool, count_task, &c);
    CHECK(hachi_alloc_count() == a0);
    hachi_pool_free(pool);
}

TEST(threads_split) {
    static const int64_t ns[] = {0, 1, 7, 100, 1536, 6145};
    static const int64_t aligns[] = {1, 4, 32};
    for (size_t a = 0; a < 3; a++)
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
            for (int nth = 1; nth <= 5; nth++) {
                int64_t prev = 0;
                for (int ith = 0; ith < nth; ith++) {
                    int64_t lo, hi;
                    hachi_split(ns[k], aligns[a], ith, nth, &lo, &hi);
                    CHECKF(lo == prev && hi >= lo, "n=%lld align=%lld %d/%d", (long long)ns[k],
                           (long long)aligns[a], ith, nth);
                    CHECK(hi == ns[k] || hi % aligns[a] == 0);
                    prev = hi;
                }
                CHECK(prev == ns[k]);
            }
    int pc = hachi_physical_cores();
    CHECK(pc >= 1 && pc <= 4096);
}

static void empty_task(void *arg, int ith, int nth) { (void)arg; (void)ith; (void)nth; }

TEST(threads_pool_latency) {
    int ncores = hachi_physical_cores();
    printf("    physical cores: %d\n", ncores);
    for (int n = 2; n <= 4; n *= 2) {
        hachi_pool *pool = NULL;
        CHECK(hachi_pool_create(n, &pool) == HACHI_OK);
        if (!pool) return;
        count_ctx c;
        memset(&c, 0, sizeof c);
        for (int r = 0; r < 1000; r++) hachi_pool_run(pool, empty_task, &c);   /* warm */
        const int runs = getenv("HACHI_TEST_QUICK") ? 2000 : 20000;   /* instrumented, emulated: fewer */
        double t0 = hachi_time_ms();
        for (int r = 0; r < runs; r++) hachi_pool_run(pool, empty_task, &c);
        double us = (hachi_time_ms() - t0) * 1000.0 / runs;
        /* wake-up from sleep: idle past the spin window, then one run */
        double wake = 0;
        for (int r = 0; r < 20; r++) {
            usleep(1000);
            double t1 = hachi_time_ms();
            hachi_pool_run(pool, empty_task, &c);
            wake += (hachi_time_ms() - t1) * 1000.0 / 20;
        }
        printf("    pool of %d: run round trip %.2f us (spinning), %.1f us (after sleep)%s\n", n, us,
               wake, n > ncores ? " (oversubscribed)" : "");
        hachi_pool_free(pool);
    }
}
