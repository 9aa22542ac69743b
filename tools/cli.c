/* cli: shared helpers of the commands: errors, strict flag values, file reading. */
#include "cli.h"
#include <time.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

int cli_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "hachi %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

bool cli_one_of(const char *a, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(a, list[i])) return true;
    return false;
}

bool cli_replaceable(const char *cmd, const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0 || S_ISREG(sb.st_mode)) return true;
    const mode_t m = sb.st_mode;
    cli_error(cmd, "'%s' is %s: it would be replaced, not written (give a regular file's path)", path,
              S_ISDIR(m) ? "a directory" : S_ISLNK(m) ? "a symbolic link" : S_ISFIFO(m) ? "a FIFO" :
              S_ISCHR(m) || S_ISBLK(m) ? "a device" : "not a regular file");
    return false;
}

/* The files this process has read as inputs (cli_note_input): an output may be none of them */
enum { INPUTS_MAX = 64 };
static struct { dev_t dev; ino_t ino; char path[256]; } inputs[INPUTS_MAX];
static int n_inputs;

void cli_note_input(const char *path) {
    struct stat sb;
    if (!path || stat(path, &sb) != 0 || n_inputs == INPUTS_MAX) return;
    for (int i = 0; i < n_inputs; i++)
        if (inputs[i].dev == sb.st_dev && inputs[i].ino == sb.st_ino) return;
    inputs[n_inputs].dev = sb.st_dev;
    inputs[n_inputs].ino = sb.st_ino;
    snprintf(inputs[n_inputs].path, sizeof inputs[n_inputs].path, "%s", path);
    n_inputs++;
}

bool cli_out_check(const char *cmd, const char *path) {
    if (!*path) { cli_error(cmd, "an empty output path"); return false; }
    if (!cli_replaceable(cmd, path)) return false;
    struct stat sb;
    if (stat(path, &sb) != 0) return true;
    for (int i = 0; i < n_inputs; i++)
        if (inputs[i].dev == sb.st_dev && inputs[i].ino == sb.st_ino) {
            cli_error(cmd, "the output '%s' is the input '%s': it would be overwritten", path, inputs[i].path);
            return false;
        }
    return true;
}

bool cli_not_input(const char *cmd, const char *out, const char *in) {
    struct stat a, b;
    if (!out || !in || stat(out, &a) != 0 || stat(in, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) return true;
    cli_error(cmd, "the output '%s' is the input '%s': it would be overwritten", out, in);
    return false;
}

/* path.tmp, or path.tmp.1 .. .tmp.99 while those exist, created anew (the library's
 * hachi_tmp_create, which the tools cannot call: O_EXCL, so never an existing file, which may be
 * an input, and never through a symbolic link) */
void *cli_out_open(const char *cmd, const char *path, char *tmp, size_t cap) {
    if (!cli_out_check(cmd, path)) return NULL;
    for (int i = 0; i < 100; i++) {
        const int n = i ? snprintf(tmp, cap, "%s.tmp.%d", path, i) : snprintf(tmp, cap, "%s.tmp", path);
        if (n < 0 || (size_t)n >= cap) { cli_error(cmd, "'%s': the path is too long", path); return NULL; }
        const int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST) continue;
        FILE *f = fd < 0 ? NULL : fdopen(fd, "w+");
        if (!f) {
            cli_error(cmd, "cannot write '%s': %s", tmp, strerror(errno));
            if (fd >= 0) { close(fd); remove(tmp); }
        }
        return f;
    }
    cli_error(cmd, "cannot create a temporary file beside '%s': .tmp to .tmp.99 are all there", path);
    return NULL;
}

bool cli_out_close(const char *cmd, void *f, const char *tmp, const char *path, bool keep) {
    if (!f) return true;
    const bool ok = !ferror((FILE *)f) && fclose(f) == 0;
    if (keep && ok && rename(tmp, path) == 0) return true;
    if (keep) cli_error(cmd, "cannot write '%s': %s", path, strerror(errno));
    remove(tmp);
    return !keep;
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
    cli_note_input(path);
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

void cli_opts_init(cli_opts *o) {
    memset(o, 0, sizeof *o);
    o->sp = hachi_session_default_params();
    o->smp = hachi_sampler_default_params();
    o->progress = -1;
}

void cli_progress_attach(cli_opts *o, cli_progress *p, const char *label) {
    memset(p, 0, sizeof *p);
    p->label = label;
    p->tty = isatty(2) != 0;
    p->print = o->progress > 0 || (o->progress < 0 && p->tty);
    if (!p->print) return;
    o->sp.progress = cli_progress_cb;
    o->sp.progress_ctx = p;
}

static void progress_line(cli_progress *p, double done, double total, double tps, double ms) {
    const double left = tps > 0 ? (total - done) / tps : 0;
    if (done >= total)
        fprintf(stderr, "%s%s: prefilled %.0f tokens in %.1f s, %.1f tok/s\n", p->tty ? "\r" : "", p->label, total,
                ms / 1000.0, tps);
    else
        fprintf(stderr, p->tty ? "\r%s: prefill %.0f/%.0f tokens, %.1f tok/s, %dm %02ds left  "
                               : "%s: prefill %.0f/%.0f tokens, %.1f tok/s, %dm %02ds left\n",
                p->label, done, total, tps, (int)left / 60, (int)left % 60);
    p->shown = done < total;
}

bool cli_progress_cb(void *ctx, double done, double total) {
    cli_progress *p = ctx;
    if (p->stop && p->stop(p->stop_ctx)) return false;
    if (!p->print) return true;
    const double now = cli_time_ms();
    if (done <= p->last_done || p->t_first == 0) {   /* a new eval: its first chunk is done */
        p->t_first = p->t_print = now;
        p->done_first = done;
        p->shown = false;
    }
    p->last_done = done;
    const double tps = now > p->t_first ? (done - p->done_first) / ((now - p->t_first) / 1000.0) : 0;
    if (done >= total) {
        if (p->shown || !p->tty) progress_line(p, done, total, tps, now - p->t_first);
        p->last_done = 0;
        p->t_first = 0;
    } else if (now - p->t_print >= (p->tty ? 250 : 5000) && tps > 0) {
        progress_line(p, done, total, tps, now - p->t_first);
        p->t_print = now;
    }
    return true;
}

int cli_opts_parse(const char *cmd, cli_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    long n;
    double d;
#define VAL() do { if (!(v = cli_value(cmd, argc, argv, i))) return -1; } while (0)
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) { VAL(); o->model = v; return 1; }
    if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
        VAL();
        if (!cli_int(cmd, a, v, 1, 131072, &n)) return -1;
        o->sp.n_ctx = (int32_t)n; o->ctx_given = true; return 1;
    }
    if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
        VAL(); if (!cli_int(cmd, a, v, 1, 256, &n)) return -1; o->sp.n_threads = (int32_t)n; return 1;
    }
    if (!strcmp(a, "--batch")) { VAL(); if (!cli_int(cmd, a, v, 1, 512, &n)) return -1; o->sp.n_batch = (int32_t)n; return 1; }
    if (!strcmp(a, "--chunks")) { VAL(); o->sp.chunks = v; return 1; }
    if (!strcmp(a, "--profile")) { o->sp.profile = true; return 1; }
    if (!strcmp(a, "--kv-f32")) { o->sp.kv_type = HACHI_KV_F32; return 1; }
    if (!strcmp(a, "--kv-type")) {
        VAL();
        if (!strcmp(v, "f16")) o->sp.kv_type = HACHI_KV_F16;
        else if (!strcmp(v, "f32")) o->sp.kv_type = HACHI_KV_F32;
        else if (!strcmp(v, "int8")) o->sp.kv_type = HACHI_KV_INT8;
        else return cli_error(cmd, "--kv-type '%s': expected f16, f32 or int8", v), -1;
        return 1;
    }
    if (!strcmp(a, "--sparse")) {
        VAL(); if (!cli_int(cmd, a, v, 0, 16384, &n)) return -1; o->sp.sparse_budget = (int32_t)n; return 1;
    }
    if (!strcmp(a, "--heads")) { VAL(); o->heads_path = v; return 1; }
    if (!strcmp(a, "--no-repack")) { o->no_repack = true; return 1; }
    if (!strcmp(a, "--progress")) { o->progress = 1; return 1; }
    if (!strcmp(a, "--no-progress")) { o->progress = 0; return 1; }
    if (!strcmp(a, "--temp")) { VAL(); if (!cli_float(cmd, a, v, 0, 100, &d)) return -1; o->smp.temp = (float)d; return 1; }
    if (!strcmp(a, "--top-k")) { VAL(); if (!cli_int(cmd, a, v, 0, 1 << 30, &n)) return -1; o->smp.top_k = (int32_t)n; return 1; }
    if (!strcmp(a, "--top-p")) {   /* 0 keeps the likeliest token alone, as the server's top_p 0 does */
        VAL(); if (!cli_float(cmd, a, v, 0, 1, &d)) return -1; o->smp.top_p = (float)CLI_MAX(d, CLI_TOP_P_MIN); return 1;
    }
    if (!strcmp(a, "--min-p")) { VAL(); if (!cli_float(cmd, a, v, 0, 1, &d)) return -1; o->smp.min_p = (float)d; return 1; }
    if (!strcmp(a, "--repeat-penalty")) {
        VAL(); if (!cli_float(cmd, a, v, 0.01, 100, &d)) return -1; o->smp.repeat_penalty = (float)d; return 1;
    }
    if (!strcmp(a, "--repeat-last-n")) {
        VAL(); if (!cli_int(cmd, a, v, 0, 1 << 20, &n)) return -1; o->smp.repeat_last_n = (int32_t)n; return 1;
    }
    if (!strcmp(a, "--presence-penalty")) {
        VAL(); if (!cli_float(cmd, a, v, -2, 2, &d)) return -1; o->smp.presence_penalty = (float)d; return 1;
    }
    if (!strcmp(a, "--frequency-penalty")) {
        VAL(); if (!cli_float(cmd, a, v, -2, 2, &d)) return -1; o->smp.frequency_penalty = (float)d; return 1;
    }
    if (!strcmp(a, "--logit-bias")) {   /* llama.cpp's form: 15043+1, 15043-0.5, 15043-inf */
        VAL();
        char *end = NULL, *e2 = NULL;
        errno = 0;
        const long id = isdigit((unsigned char)v[0]) ? strtol(v, &end, 10) : -1;
        double b = NAN;
        if (id >= 0 && (*end == '+' || *end == '-') && isalnum((unsigned char)end[1])) b = strtod(end + 1, &e2);
        if (errno || id < 0 || id > INT32_MAX || !e2 || *e2 || isnan(b) || (*end == '+' && isinf(b)))
            return cli_error(cmd, "--logit-bias '%s': expected TOKEN_ID+BIAS or TOKEN_ID-BIAS (15043+1, 15043-inf)", v), -1;
        if (o->n_bias == CLI_MAX_BIAS) return cli_error(cmd, "--logit-bias given more than %d times", CLI_MAX_BIAS), -1;
        o->bias_ids[o->n_bias] = (int32_t)id;
        o->bias[o->n_bias++] = (float)(*end == '-' ? -b : b);
        return 1;
    }
    if (!strcmp(a, "--seed")) {
        VAL(); if (!cli_int(cmd, a, v, 0, 0x7fffffffL, &n)) return -1; o->smp.seed = (uint64_t)n; o->seed_given = true; return 1;
    }
#undef VAL
    return 0;
}

hachi_model *cli_load_model(const char *cmd, cli_opts *o, bool vocab_only) {
    if (!o->model) { cli_error(cmd, "no model given (-m MODEL.gguf)"); return NULL; }
    hachi_model_params mp = hachi_model_default_params();
    mp.vocab_only = vocab_only;
    mp.no_repack = o->no_repack;
    hachi_model *m = NULL;
    cli_note_input(o->model);
    cli_note_input(o->heads_path);
    hachi_status st = hachi_model_load(o->model, &mp, &m);
    if (st != HACHI_OK) { cli_lib_error(cmd, st, "cannot load model"); return NULL; }
    if (o->heads_path && !vocab_only) {
        if ((st = hachi_heads_load(m, o->heads_path, &o->heads))) {
            cli_lib_error(cmd, st, "cannot load the streaming heads");
            hachi_model_free(m);
            return NULL;
        }
        o->sp.heads = o->heads;
    }
    return m;
}

void cli_free_model(cli_opts *o, hachi_model *m) {
    hachi_heads_free(o->heads);
    o->heads = NULL;
    o->sp.heads = NULL;
    hachi_model_free(m);
}

struct cli_json {
    json_schema *js;
    json_vocab *v;
    json_grammar g;
};

void cli_json_reset(cli_json *j) {
    if (!j) return;
    json_grammar_reset(&j->g);
}

void cli_json_free(cli_json *j) {
    if (!j) return;
    json_grammar_free(&j->g);
    json_vocab_free(j->v);
    json_schema_free(j->js);
    free(j);
}

int cli_json_parse(const char *cmd, cli_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (strcmp(a, "--json-schema") && strcmp(a, "--json-schema-file")) return 0;
    if (o->json_schema) return cli_error(cmd, "give one of --json-schema and --json-schema-file, once"), -1;
    if (!(o->json_schema = cli_value(cmd, argc, argv, i))) return -1;
    o->json_schema_file = !strcmp(a, "--json-schema-file");
    return 1;
}

/* --json-schema's grammar for m (NULL and an error said where the schema is bad) */
static cli_json *json_create(const char *cmd, const cli_opts *o, const hachi_model *m) {
#ifdef HACHI_NO_SERVE
    (void)m;
    cli_error(cmd, "%s: hachi was built without cJSON (and the server), which reads schemas",
              o->json_schema_file ? "--json-schema-file" : "--json-schema");
    return NULL;
#else
    size_t len;
    char *text = o->json_schema_file ? cli_read_file(cmd, o->json_schema, &len) : NULL, err[512];
    if (o->json_schema_file && !text) return NULL;
    cli_json *j = calloc(1, sizeof *j);
    if (!j) { free(text); cli_error(cmd, "out of memory"); return NULL; }
    j->js = serve_schema_compile(text ? text : o->json_schema, "schema", err, sizeof err);
    free(text);
    if (!j->js) {
        cli_error(cmd, "%s: %s", o->json_schema_file ? o->json_schema : "--json-schema", err);
        cli_json_free(j);
        return NULL;
    }
    if (!(j->v = json_vocab_create(m, false)) || !json_grammar_init(&j->g, j->v, j->js)) {
        cli_error(cmd, "out of memory");
        cli_json_free(j);
        return NULL;
    }
    return j;
#endif
}

hachi_status cli_sampler_create(const char *cmd, const cli_opts *o, const hachi_model *m, cli_json **json, hachi_sampler **out) {
    *out = NULL;
    if (json) *json = NULL;
    if (o->json_schema && !json) return cli_error(cmd, "--json-schema is not for this command"), HACHI_ERR_INVALID_ARG;
    if (o->json_schema && !(*json = json_create(cmd, o, m))) return HACHI_ERR_INVALID_ARG;
    hachi_status st = hachi_sampler_create(&o->smp, hachi_model_n_vocab(m), out);
    if (!st && o->n_bias && (st = hachi_sampler_set_logit_bias(*out, o->bias_ids, o->bias, o->n_bias))) {
        hachi_sampler_free(*out);
        *out = NULL;
    }
    if (!st && json && *json)
        hachi_sampler_set_constraint(*out, &(hachi_sampler_constraint){json_grammar_mask, json_grammar_accept, &(*json)->g});
    if (st) {
        cli_lib_error(cmd, st, "cannot create the sampler");
        if (json) { cli_json_free(*json); *json = NULL; }
    }
    return st;
}

int cli_ctx_for(int n_tokens) {
    for (int c = HACHI_CTX_MIN; c <= HACHI_CTX_MAX; c *= 2)
        if (n_tokens <= c) return c;
    return 0;
}

hachi_session_params cli_dense_params(const hachi_session_params *mode) {
    hachi_session_params d = hachi_session_default_params();
    d.n_ctx = mode->n_ctx;
    d.n_threads = mode->n_threads;
    d.n_batch = mode->n_batch;
    d.chunks = mode->chunks;
    d.profile = mode->profile;
    d.progress = mode->progress;
    d.progress_ctx = mode->progress_ctx;
    d.kv_type = HACHI_KV_F16;
    return d;
}

const char *cli_mode_name(const hachi_session_params *p, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "kv %s", hachi_kv_type_name(p->kv_type));
    if (p->sparse_budget && n >= 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, ", sparse %d", p->sparse_budget);
    if (p->heads && n >= 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, ", %d streaming heads (sink %d, window %d)", hachi_heads_count(p->heads),
                 hachi_heads_sink(p->heads), hachi_heads_window(p->heads));
    return buf;
}

double cli_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
