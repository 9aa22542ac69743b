/* The test harness: TEST(name) registers a test at start-up; CHECK records a
 * failure and continues; SKIP ends a test as skipped (reported, never counted
 * as a pass). One runner (tests/main.c) runs every registered test. */
#ifndef HACHI_TEST_H
#define HACHI_TEST_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*test_fn)(void);
void test_register(const char *name, const char *file, test_fn fn);
void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int  test_failed(void);          /* has the current test failed so far */

/* ../shared (or $HACHI_SHARED); NULL when absent. */
const char *test_shared_dir(void);
/* Path of a file under the shared dir, in a static rotating buffer; NULL when absent. */
const char *test_shared_path(const char *rel);
/* The hachi CLI binary built beside the tests ($HACHI_BIN). */
const char *test_hachi_bin(void);
/* A fresh scratch directory for this test run (under $TMPDIR). */
const char *test_tmpdir(void);
/* A whole file, NUL-terminated (length in *len when len is not NULL); NULL when unreadable. malloc'd. */
char *test_read_file(const char *path, size_t *len);
/* Run a shell command, capture stdout (and stderr when merge) into a malloc'd
 * string; returns the exit status (or -1). */
int test_run(const char *cmd, char **out);
/* test_run of a printf-formatted command; its output, never NULL (malloc'd). */
char *test_sh(int *rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* name in the scratch directory, in a static buffer (16 rotating). */
const char *test_tmp(const char *name);

/* A copy of the GGUF at src written to dst (tests/gguf_edit.c): the pieces at ids[0..n) renamed
 * pieces[] and typed control, tokenizer.chat_template tmpl (NULL: none), every other key and
 * tensor as src has it. false (a failure recorded) when that fails. */
bool test_gguf_control_tokens(const char *src, const char *dst, const int32_t *ids, const char *const *pieces, int n,
                              const char *tmpl);

#define TEST(name)                                                            \
    static void name(void);                                                   \
    __attribute__((constructor)) static void name##_register(void) {          \
        test_register(#name, __FILE__, name);                                 \
    }                                                                         \
    static void name(void)

#define CHECK(cond)                                                           \
    do { if (!(cond)) test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond); } while (0)
#define CHECKF(cond, ...)                                                     \
    do { if (!(cond)) test_fail(__FILE__, __LINE__, __VA_ARGS__); } while (0)
#define SKIP(...) do { test_skip(__VA_ARGS__); return; } while (0)
/* Skip unless ../shared/<rel> exists; binds `path` to it. */
#define NEED_SHARED(path, rel)                                                \
    const char *path = test_shared_path(rel);                                 \
    if (!(path)) SKIP("../shared/%s absent", rel)

#endif
