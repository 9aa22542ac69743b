/* cli: shared helpers of the commands: errors, strict flag values, file reading. */
#include "cli.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "hachi %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

int cli_lib_error(const char *cmd, hachi_status st, const char *what) {
    const char *e = hachi_last_error();
    return cli_error(cmd, "%s: %s", what, e && *e ? e : hachi_status_str(st));
}

bool cli_int(const char *cmd, const char *flag, const char *val, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (errno || end == val || *end) {
        cli_error(cmd, "%s expects an integer, got '%s'", flag, val);
        return false;
    }
    if (v < lo || v > hi) {
        cli_error(cmd, "%s must be in [%ld, %ld], got %ld", flag, lo, hi, v);
        return false;
    }
    *out = v;
    return true;
}

bool cli_float(const char *cmd, const char *flag, const char *val, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (errno || end == val || *end || isnan(v)) {
        cli_error(cmd, "%s expects a number, got '%s'", flag, val);
        return false;
    }
    if (v < lo || v > hi) {
        cli_error(cmd, "%s must be in [%g, %g], got %g", flag, lo, hi, v);
        return false;
    }
    *out = v;
    return true;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_error(cmd, "%s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

char *cli_read_file(const char *cmd, const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { cli_error(cmd, "cannot open '%s': %s", path, strerror(errno)); return NULL; }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) { free(buf); buf = NULL; break; }
        buf = nb;
    }
    if (!buf || ferror(f)) {
        cli_error(cmd, "cannot read '%s'", path);
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}
