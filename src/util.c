/* util: last-error text (thread-local), counted allocation, clock. */
#include "util.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

static _Thread_local char last_error[1024];
static atomic_uint_fast64_t n_allocs;

const char *hachi_last_error(void) { return last_error; }
void hachi_clear_error(void) { last_error[0] = 0; }

void hachi_error_set(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
}

const char *hachi_version(void) { return HACHI_VERSION; }

const char *hachi_status_str(hachi_status st) {
    switch (st) {
    case HACHI_OK: return "ok";
    case HACHI_ERR_INVALID_ARG: return "invalid argument";
    case HACHI_ERR_IO: return "I/O error";
    case HACHI_ERR_FORMAT: return "malformed file";
    case HACHI_ERR_UNSUPPORTED: return "unsupported";
    case HACHI_ERR_NOMEM: return "out of memory";
    case HACHI_ERR_CONTEXT_FULL: return "context full";
    case HACHI_ERR_INTERNAL: return "internal error";
    case HACHI_ERR_ABORTED: return "aborted";
    }
    return "unknown status";
}

void *hachi_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    atomic_fetch_add(&n_allocs, 1);
    if (!p) hachi_error_set("out of memory allocating %zu bytes", n);
    return p;
}

void *hachi_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    atomic_fetch_add(&n_allocs, 1);
    if (!p) hachi_error_set("out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *hachi_aligned_alloc(size_t n) {
    void *p = NULL;
    atomic_fetch_add(&n_allocs, 1);
    if (posix_memalign(&p, 64, n ? (n + 63) / 64 * 64 : 64) != 0) {
        hachi_error_set("out of memory allocating %zu bytes", n);
        return NULL;
    }
    memset(p, 0, n);
    return p;
}

void *hachi_realloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    atomic_fetch_add(&n_allocs, 1);
    if (!q) hachi_error_set("out of memory reallocating %zu bytes", n);
    return q;
}

void hachi_free(void *p) { free(p); }

char *hachi_strndup(const char *s, size_t n) {
    char *d = hachi_malloc(n + 1);
    if (d) { memcpy(d, s, n); d[n] = 0; }
    return d;
}

uint64_t hachi_alloc_count(void) { return atomic_load(&n_allocs); }

double hachi_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static const char *file_kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISLNK(m) ? "a symbolic link" : S_ISFIFO(m) ? "a FIFO" :
           S_ISCHR(m) || S_ISBLK(m) ? "a device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

hachi_status hachi_replaceable(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0 || S_ISREG(sb.st_mode)) return HACHI_OK;
    return hachi_fail(HACHI_ERR_IO, "'%s' is %s: it would be replaced, not written (give a regular file's path)", path,
                      file_kind(sb.st_mode));
}

hachi_status hachi_tmp_create(const char *path, char *tmp, size_t cap, int *fd) {
    *fd = -1;
    if (!*path) return hachi_fail(HACHI_ERR_INVALID_ARG, "an empty output path");
    for (int i = 0; i < 100; i++) {
        const int n = i ? snprintf(tmp, cap, "%s.tmp.%d", path, i) : snprintf(tmp, cap, "%s.tmp", path);
        if (n < 0 || (size_t)n >= cap)
            return hachi_fail(HACHI_ERR_INVALID_ARG, "a path too long for its temporary name: '%s'", path);
        if ((*fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) >= 0) return HACHI_OK;
        if (errno != EEXIST) return hachi_fail(HACHI_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
    }
    return hachi_fail(HACHI_ERR_IO, "cannot create a temporary file beside '%s': .tmp to .tmp.99 are all there", path);
}

hachi_status hachi_readable_file(const char *path, const char *what) {
    struct stat sb;
    if (stat(path, &sb) != 0 || S_ISREG(sb.st_mode)) return HACHI_OK;   /* (a missing file: the open says so) */
    return hachi_fail(HACHI_ERR_IO, "%s '%s' is %s", what, path, file_kind(sb.st_mode));
}

size_t hachi_mem_available(void) {
    const char *e = getenv("HACHI_MEM_AVAILABLE");   /* a stand-in for the system's figure (tests) */
    if (e && *e) return (size_t)strtoull(e, NULL, 10);
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "MemAvailable:", 13)) { kb = strtoull(line + 13, NULL, 10); break; }
    fclose(f);
    return (size_t)kb * 1024;
}
