/* threads: the persistent worker pool. hachi_pool_run is on the hot path
 * (~300 calls per decoded token), so dispatch and join are lock-free:
 *
 *   dispatch  the caller publishes fn/ctx, sets `pending` = n-1 and bumps the
 *             generation counter `gen`; workers spin on `gen` (pause loop) for
 *             HACHI_POOL_SPIN_US, then sleep on a condvar. The caller only
 *             touches the mutex when some worker is asleep (`n_sleeping` > 0).
 *   join      each worker decrements `pending` when its part is done; the
 *             caller runs part 0 itself, then spins until `pending` is 0.
 *
 * hachi_pool_barrier is a sense-reversing barrier for use inside a task
 * (e.g. matmul: quantize activations, barrier, dot products). Everything is
 * allocated in hachi_pool_create; run/barrier allocate nothing. */
#include "threads.h"
#include "util.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* How long an idle worker spins before sleeping. Between two matmuls of one
 * token there are only microseconds of serial work; between tokens (sampling,
 * detokenizing) there may be more, and one wake-up per token is cheap. */
#define HACHI_POOL_SPIN_US 100.0
/* Spins between checks of the clock / before a waiter yields the CPU. */
#define SPIN_CHECK 256
#define CACHELINE 64

typedef struct hachi_worker {
    hachi_pool *pool;
    int ith;
    pthread_t tid;
} hachi_worker;

struct hachi_pool {
    int n;                                          /* threads, caller included */
    hachi_worker *workers;                          /* [n-1] */
    int n_started;                                  /* workers actually created */
    int oversubscribed;                             /* more threads than CPUs: yield, don't pause */
    hachi_task_fn fn;                               /* the current task */
    void *ctx;
    pthread_mutex_t mu;                             /* sleep path only */
    pthread_cond_t cv;
    _Alignas(CACHELINE) atomic_uint gen;            /* bumped once per run */
    atomic_int stop;
    atomic_int n_sleeping;
    _Alignas(CACHELINE) atomic_int pending;         /* workers still running this run */
    _Alignas(CACHELINE) atomic_int bar_count;       /* threads arrived at the barrier */
    atomic_uint bar_phase;
};

/* Wait until pool->gen != seen (or stop): spin, then sleep. Returns the new gen. */
static unsigned pool_wait_gen(hachi_pool *p, unsigned seen) {
    double t0 = -1.0;
    for (;;) {
        for (int i = 0; i < SPIN_CHECK; i++) {
            unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
            if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed)) return g;
            if (p->oversubscribed) sched_yield();
            else hachi_cpu_relax();
        }
        double now = hachi_time_ms();
        if (t0 < 0) t0 = now;
        else if ((now - t0) * 1000.0 > HACHI_POOL_SPIN_US) break;
    }
    /* Sleep. n_sleeping is raised before re-checking gen (both seq_cst), and
     * the caller bumps gen before reading n_sleeping: one of us sees the other. */
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->n_sleeping, 1);
    unsigned g;
    while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->n_sleeping, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *pool_worker_main(void *arg) {
    hachi_worker *w = arg;
    hachi_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        seen = pool_wait_gen(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
        p->fn(p->ctx, w->ith, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
    return NULL;
}

/* Wake sleeping workers after gen or stop changed. */
static void pool_wake(hachi_pool *p) {
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

/* CPUs this process may run on. */
static int pool_cpus_allowed(void) {
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (int)n : 1;
}

hachi_status hachi_pool_create(int n_threads, hachi_pool **out) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "thread pool: n_threads %d out of range 1..1024", n_threads);
    hachi_pool *p = hachi_aligned_alloc(sizeof *p);
    if (!p) return HACHI_ERR_NOMEM;
    p->n = n_threads;
    p->oversubscribed = n_threads > pool_cpus_allowed();
    atomic_init(&p->gen, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->bar_count, 0);
    atomic_init(&p->bar_phase, 0);
    if (pthread_mutex_init(&p->mu, NULL) != 0) { hachi_free(p); return hachi_fail(HACHI_ERR_INTERNAL, "thread pool: mutex init failed"); }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        hachi_free(p);
        return hachi_fail(HACHI_ERR_INTERNAL, "thread pool: condvar init failed");
    }
    if (n_threads > 1) {
        p->workers = hachi_calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) { hachi_pool_free(p); return HACHI_ERR_NOMEM; }
        for (int i = 1; i < n_threads; i++) {
            hachi_worker *w = &p->workers[i - 1];
            w->pool = p;
            w->ith = i;
            if (pthread_create(&w->tid, NULL, pool_worker_main, w) != 0) {
                hachi_pool_free(p);
                return hachi_fail(HACHI_ERR_INTERNAL, "thread pool: cannot create thread %d of %d", i, n_threads);
            }
            p->n_started++;
        }
    }
    *out = p;
    return HACHI_OK;
}

void hachi_pool_free(hachi_pool *p) {
    if (!p) return;
    if (p->n_started > 0) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->stop, 1);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i].tid, NULL);
    }
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    hachi_free(p->workers);
    hachi_free(p);
}

int hachi_pool_size(const hachi_pool *p) { return p ? p->n : 1; }

void hachi_pool_run(hachi_pool *p, hachi_task_fn fn, void *ctx) {
    if (!p || p->n == 1) { fn(ctx, 0, 1); return; }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1);               /* seq_cst: publishes fn/ctx/pending */
    pool_wake(p);
    fn(ctx, 0, p->n);
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) != 0; spins++) {
        if (p->oversubscribed || spins >= SPIN_CHECK * 64) sched_yield();   /* let workers run */
        else hachi_cpu_relax();
    }
}

void hachi_pool_barrier(hachi_pool *p) {
    if (!p || p->n == 1) return;
    unsigned phase = atomic_load_explicit(&p->bar_phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&p->bar_count, 1, memory_order_acq_rel) == p->n - 1) {
        atomic_store_explicit(&p->bar_count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->bar_phase, 1, memory_order_acq_rel);
        return;
    }
    for (int spins = 0; atomic_load_explicit(&p->bar_phase, memory_order_acquire) == phase; spins++) {
        if (p->oversubscribed || spins >= SPIN_CHECK * 64) sched_yield();
        else hachi_cpu_relax();
    }
}

/* ---- topology ------------------------------------------------------------- */

static int read_int_file(const char *path, int *v) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int ok = fscanf(f, "%d", v) == 1;   // NOLINT(cert-err34-c): sysfs topology ids, small non-negative ints
    fclose(f);
    return ok;
}

int hachi_physical_cores(void) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online < 1) online = 1;
    int n_allowed = (int)online;
#ifdef CPU_COUNT
    cpu_set_t set;
    int have_set = sched_getaffinity(0, sizeof set, &set) == 0;
    if (have_set) n_allowed = CPU_COUNT(&set);
#else
    int have_set = 0;
#endif
    /* Distinct (package, core) pairs among the CPUs we may run on. */
    enum { MAX_CPUS = 1024 };
    int keys[MAX_CPUS];
    int n_keys = 0, seen_any = 0;
    for (int cpu = 0; cpu < MAX_CPUS; cpu++) {
#ifdef CPU_COUNT
        if (have_set && !CPU_ISSET(cpu, &set)) continue;
#endif
        char path[128];
        int core, pkg;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        if (!read_int_file(path, &core)) { if (!have_set && cpu >= online) break; continue; }
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        if (!read_int_file(path, &pkg)) pkg = 0;
        seen_any = 1;
        int key = pkg * 65536 + core, dup = 0;
        // cppcheck-suppress uninitvar ; keys[0..n_keys) are written before they are read
        for (int i = 0; i < n_keys; i++) if (keys[i] == key) { dup = 1; break; }
        if (!dup) keys[n_keys++] = key;
    }
    int n = seen_any ? n_keys : n_allowed;
    if (n > n_allowed) n = n_allowed;
    return n >= 1 ? n : 1;
}

void hachi_split(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi) {
    if (align < 1) align = 1;
    if (nth < 1) nth = 1;
    int64_t units = (n + align - 1) / align;
    int64_t a = units * ith / nth * align, b = units * (ith + 1) / nth * align;
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
}
