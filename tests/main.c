/* Test runner: runs every TEST (or those whose name contains argv[1]) and
 * prints `N passed, N failed, N skipped` as its last line, each test's time on its line.
 * $HACHI_TEST_SKIP (comma-separated name parts) reports the tests it names as skipped. */
#include "test.h"
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct { const char *name, *file; test_fn fn; } test_case;
static test_case tests[1024];
static int n_tests;
static int cur_failed, cur_skipped;
static char skip_reason[512];

void test_register(const char *name, const char *file, test_fn fn) {
    if (n_tests < (int)(sizeof tests / sizeof tests[0]))
        tests[n_tests++] = (test_case){name, file, fn};
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    if (cur_failed < 20) {
        fprintf(stderr, "    %s:%d: ", file, line);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    cur_failed++;
}

void test_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(skip_reason, sizeof skip_reason, fmt, ap);
    va_end(ap);
    cur_skipped = 1;
}

int test_failed(void) { return cur_failed > 0; }

const char *test_shared_dir(void) {
    static char dir[1024];
    struct stat st;
    const char *env = getenv("HACHI_SHARED");
    snprintf(dir, sizeof dir, "%s", env ? env : "../shared");
    return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) ? dir : NULL;
}

const char *test_shared_path(const char *rel) {
    static char bufs[8][1024];
    static int k;
    const char *dir = test_shared_dir();
    struct stat st;
    if (!dir) return NULL;
    char *b = bufs[k++ % 8];
    snprintf(b, 1024, "%s/%s", dir, rel);
    return stat(b, &st) == 0 ? b : NULL;
}

const char *test_hachi_bin(void) {
    const char *env = getenv("HACHI_BIN");
    return env ? env : "build/hachi";
}

const char *test_tmpdir(void) {
    static char dir[512];
    if (!dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/hachi-test-XXXXXX", t ? t : "/tmp");
        if (!mkdtemp(dir)) { perror("mkdtemp"); exit(2); }
    }
    return dir;
}

char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)n + 1))) {
        if (fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
        else { b[n] = 0; if (len) *len = (size_t)n; }
    }
    fclose(f);
    return b;
}

int test_run(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");   // NOLINT(cert-env33-c): tests run the CLI through the shell
    if (!p) return -1;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += got;
        if (cap - len < 2) { cap *= 2; char *nb = realloc(buf, cap); if (!nb) break; buf = nb; }
    }
    if (buf) buf[len] = 0;
    int st = pclose(p);
    if (out) *out = buf; else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

char *test_sh(int *rc, const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char *out = NULL;
    *rc = test_run(cmd, &out);
    return out ? out : strdup("");
}

const char *test_tmp(const char *name) {
    static char bufs[16][1024];
    static int k;
    char *b = bufs[k++ % 16];
    snprintf(b, 1024, "%s/%s", test_tmpdir(), name);
    return b;
}

/* The part of $HACHI_TEST_SKIP that name contains, or NULL. */
static const char *skip_part(const char *name, char *part, size_t cap) {
    const char *list = getenv("HACHI_TEST_SKIP");
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        const size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > 0 && n < cap) {
            memcpy(part, p, n);
            part[n] = 0;
            if (strstr(name, part)) return part;
        }
        p = e ? e + 1 : p + n;
    }
    return NULL;
}

int main(int argc, char **argv) {
    int passed = 0, failed = 0, skipped = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < n_tests; i++) {
        if (argc > 1 && !strstr(tests[i].name, argv[1])) continue;
        char part[128];
        if (skip_part(tests[i].name, part, sizeof part)) {
            printf("skip %s: HACHI_TEST_SKIP names '%s'\n", tests[i].name, part);
            skipped++;
            continue;
        }
        cur_failed = 0; cur_skipped = 0; skip_reason[0] = 0;
        fflush(stderr);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        tests[i].fn();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (cur_failed) { printf("FAIL %s (%d checks, %.1f s)\n", tests[i].name, cur_failed, sec); failed++; }
        else if (cur_skipped) { printf("skip %s: %s\n", tests[i].name, skip_reason); skipped++; }
        else { printf("ok   %s %.1f s\n", tests[i].name, sec); passed++; }
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_tmpdir());
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", test_tmpdir());   // NOLINT(cert-env33-c): a fixed rm -rf of our own dir
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
