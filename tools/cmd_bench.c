/* hachi bench: decode speed against the memory roofline (DESIGN.md section 5).
 *
 * For each context depth: fill the KV cache to that depth (a real prefill, or
 * hachi_session_fill_synthetic), then time -r repetitions of -n single-token decode
 * steps and report tok/s (median, min, max), bytes read per token (weights +
 * KV at that depth), the achieved GB/s and its fraction of the machine's
 * read bandwidth (probed before each repetition and after the last: each rep against the mean
 * of the probes on its two sides, the median of the ratios). Also: prefill tok/s, the cost of one forward of
 * k = 1..16 tokens relative to k = 1 (speculative verification), a per-chunk
 * profile from a separate profiled session, peak RSS. --synth makes (once, into
 * a cache directory) a random-weight model of a real shape to run on.
 *
 * Decode steps feed a fixed pseudo-random token sequence (no sampling, no EOS
 * handling in the timed loop); repetitions continue from where the previous one
 * ended, so depth D runs positions D+2 .. D+2+n*r (2 warm-up steps first). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli.h"
#include "hachi.h"

void cli_print_profile(FILE *f, const hachi_session *s);   /* tools/cmd_run.c */

static const char *CMD = "bench";

#define MAX_DEPTHS 16
#define N_VERIFY 5
#define WARMUP_STEPS 2
#define PREFILL_EVAL 512   /* tokens per eval of a real prefill: one output head each, < 0.2% extra on E2B */
static const int verify_k[N_VERIFY] = {1, 2, 4, 8, 16};

enum fill_mode { FILL_REAL, FILL_FAST, FILL_AUTO };

typedef struct bench_opts {
    cli_opts o;
    const char *synth_shape, *type, *json;
    uint64_t seed;
    int depths[MAX_DEPTHS], n_depths;
    int ttft[MAX_DEPTHS], n_ttft;   /* --ttft: prompt lengths to time a real prefill of, from position 0 */
    long n, reps, bw_mb, prefill_n;
    enum fill_mode fill;
    long auto_real_max;             /* --fill auto: real prefill up to this depth, fast beyond */
    bool verify, prefill, profile;
    const char *replay;             /* --spec-replay: trace files, comma-separated */
    const char *spec_text, *md_path;   /* --spec TEXT, -md FILE */
    long n_draft;                   /* --draft N (--spec); -1: not given */
} bench_opts;

typedef struct depth_result {
    int depth;
    bool fast;                      /* filled by hachi_session_fill_synthetic (K/V rows not computed) */
    int fill_tokens;                /* tokens actually prefilled to reach the depth (0: none / fast) */
    double fill_tps;
    double tps_med, tps_min, tps_max;
    double weight_bytes, kv_bytes;  /* per token */
    /* each rep's GB/s over the mean of the bandwidths probed just before and after it: median;
     * the probes' range */
    double roof_med, probe_min, probe_max;
} depth_result;

typedef struct ttft_result {
    int tokens;
    double seconds, tps;
    double matmul_ms, attn_ms, other_ms, input_ms, head_ms;   /* per token: the profile's split */
} ttft_result;

typedef struct bench_result {
    double bw_gbs, bw_end_gbs;      /* read bandwidth at the start (the roofline's), again at the end */
    int threads, n_cpus, n_ctx;
    char cpu[128], kernels[16], type[32];
    const char *model_path;
    size_t file_bytes, plan_bytes, rss_bytes;
    double load_s;                  /* hachi_model_load: parse, checks, the repack */
    depth_result d[MAX_DEPTHS];
    int n_depths;
    int prefill_tokens;
    double prefill_tps;
    int verify_depth;
    double verify_ms[N_VERIFY];
    bool have_verify;
    bool have_profile;
    int profile_depth;
    hachi_profile prof;
    ttft_result ttft[MAX_DEPTHS];
    int n_ttft;
} bench_result;

static void usage(FILE *f) {
    fprintf(f,
            "usage: hachi bench (-m MODEL | --synth e2b|tiny [--type T] [--seed S]) [--depth 128,2048,8192]\n"
            "                   [-n 32] [-r 3] [-t THREADS] [-c CTX] [--fill real|fast|auto] [--json FILE]\n"
            "                   [--no-verify] [--no-prefill] [--no-profile] [--prefill-n 512] [--bw-mb 1024]\n"
            "                   [--ttft 2048,8192,32768] [--spec-replay TRACE[,TRACE...]]\n"
            "                   [--spec TEXT [-md FILE] [--draft N] [--self-budget N]]\n"
            "  --synth     generate a random-weight model of that shape once into $HACHI_BENCH_CACHE\n"
            "              (default bench/cache/) and reuse it; --type q4_0 (default), q4_k_m, q5_k_m, q8_0, f16, ...\n"
            "  --depth     KV-cache depths to decode at (comma-separated)\n"
            "  -n, -r      decode steps per repetition (32), repetitions (3)\n"
            "  --fill      real: prefill every depth (default); fast: write plausible K/V rows without\n"
            "              computing them; auto: real up to depth 512, fast beyond\n"
            "  --prefill-n   tokens of the timed prefill (default 512)\n"
            "  --no-prefill  no real prefill at all: skip the prefill rate, fill every depth fast\n"
            "  --no-verify   skip the cost of one forward of k = 1..16 tokens\n"
            "  --no-profile  skip the per-chunk profile run\n"
            "  --ttft      time to first token instead of the decode table: a real prefill of that many\n"
            "              tokens from position 0 for each length, its tok/s, seconds and where the time\n"
            "              went (matmuls, attention, the rest of the layers, inputs, head)\n"
            "  --spec-replay  instead of the decode table, at each depth: the forwards of each trace\n"
            "              (hachi run --spec-trace: drafted and kept tokens per forward) on this model,\n"
            "              alternated with plain decoding of as many tokens: tok/s of both and the ratio;\n"
            "              a trace of --spec self replays its draft steps (page-sparse, budget 1024)\n"
            "  --self-budget  keys a self-speculative draft step attends (--spec-replay, --spec; default 1024)\n"
            "  --spec TEXT instead of the decode table, at each depth: workloads made from TEXT's tokens\n"
            "              (quote: the text, then its first 48 tokens again; doc: a pass key in its middle,\n"
            "              asked for at its end; free: the text), each decoded -n tokens greedily -r times\n"
            "              by every drafter (none, lookup, -md FILE's assistant, self with --self-budget N,\n"
            "              auto; --draft N):\n"
            "              tok/s, the ratio to plain decoding, acceptance, and that the tokens are the same\n"
            "  --bw-mb     buffer of the bandwidth measurement in MiB (default 1024)\n"
            "  --json      also write the results as one JSON object to FILE\n"
            CLI_MODE_USAGE);
}

/* ---- helpers ------------------------------------------------------------------ */

/* "a,b,c" (flag's value) into v[] ascending without duplicates: one session goes deeper and deeper */
static bool parse_lengths(const char *flag, const char *val, int max, int *v, int *n) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", val);
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long d;
        if (*n == MAX_DEPTHS) { cli_error(CMD, "%s: at most %d values", flag, MAX_DEPTHS); return false; }
        if (!cli_int(CMD, flag, tok, 1, max, &d)) return false;
        v[(*n)++] = (int)d;
    }
    if (*n == 0) { cli_error(CMD, "%s needs at least one value, got '%s'", flag, val); return false; }
    for (int i = 1; i < *n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            int t = v[j]; v[j] = v[j - 1]; v[j - 1] = t;
        }
    int k = 0;
    for (int i = 0; i < *n; i++)
        if (k == 0 || v[i] != v[k - 1]) v[k++] = v[i];
    *n = k;
    return true;
}

static bool parse_depths(bench_opts *b, const char *val) {
    return parse_lengths("--depth", val, HACHI_CTX_MAX, b->depths, &b->n_depths);
}

static void cpu_model(char *out, size_t cap) {
    snprintf(out, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        /* x86: "model name"; arm64 kernels may only give "CPU part" / "Hardware" */
        if (!strncmp(line, "model name", 10) || !strncmp(line, "Hardware", 8)) {
            char *c = strchr(line, ':');
            if (!c) continue;
            c++;
            while (*c == ' ' || *c == '\t') c++;
            c[strcspn(c, "\n")] = 0;
            snprintf(out, cap, "%s", c);
            break;
        }
    }
    fclose(f);
}

static const char *ftype_name(int64_t ft) {
    switch (ft) {
    case 0: return "f32";
    case 1: return "f16";
    case 2: return "q4_0";
    case 3: return "q4_1";
    case 7: return "q8_0";
    case 8: return "q5_0";
    case 10: return "q2_k";
    case 12: return "q3_k_m";
    case 14: return "q4_k_s";
    case 15: return "q4_k_m";
    case 16: return "q5_k_s";
    case 17: return "q5_k_m";
    case 18: return "q6_k";
    case 32: return "bf16";
    default: return NULL;
    }
}

/* The machine's read bandwidth, measured in a child process so that the big
 * buffer does not count in this process's peak RSS. */
static double measure_bandwidth(int threads, long mb) {
    size_t bytes = (size_t)mb << 20;
    int fd[2];
    if (pipe(fd) == 0) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            close(fd[0]);
            double bw = hachi_measure_read_bandwidth(threads, bytes, 5);
            ssize_t w = write(fd[1], &bw, sizeof bw);
            _exit(w == (ssize_t)sizeof bw ? 0 : 1);
        }
        close(fd[1]);
        if (pid > 0) {
            double bw = -1;
            ssize_t got = read(fd[0], &bw, sizeof bw);
            close(fd[0]);
            int status = 0;
            waitpid(pid, &status, 0);
            if (got == (ssize_t)sizeof bw) return bw;
            return -1;
        }
        close(fd[0]);
    }
    return hachi_measure_read_bandwidth(threads, bytes, 5);
}

/* ---- synthetic model cache --------------------------------------------------- */

typedef struct synth_progress { int last; bool tty; const char *what; double t_print; } synth_progress;

/* A tty gets one updating line; a log gets a line per 10% or per 15 s. */
static void on_synth_progress(void *ctx, double done) {
    synth_progress *p = ctx;
    int pct = (int)(done * 100.0);
    if (pct == p->last) return;
    double now = cli_time_ms();
    if (p->tty) fprintf(stderr, "\rhachi bench: synthesizing %s: %3d%%", p->what, pct);
    else if (pct / 10 != p->last / 10 || now - p->t_print > 15000) {
        fprintf(stderr, "hachi bench: synthesizing %s: %d%%\n", p->what, pct);
        p->t_print = now;
    }
    p->last = pct;
}

static bool mkdir_p(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST) return false;
        *p = '/';
    }
    return !mkdir(buf, 0777) || errno == EEXIST;
}

/* Path of the cached synthetic model, generating it first when absent. */
static bool synth_model(const bench_opts *b, char *path, size_t cap) {
    const char *dir = getenv("HACHI_BENCH_CACHE");
    if (!dir || !*dir) dir = "bench/cache";
    snprintf(path, cap, "%s/gemma4-%s-%s-s%llu.gguf", dir, b->synth_shape, b->type, (unsigned long long)b->seed);
    struct stat st;
    if (stat(path, &st) == 0 && st.st_size > 0) {
        fprintf(stderr, "hachi bench: using the cached synthetic model %s\n", path);
        return true;
    }
    if (!mkdir_p(dir)) { cli_error(CMD, "cannot create the cache directory '%s': %s", dir, strerror(errno)); return false; }
    hachi_synth_params p = hachi_synth_default_params();
    p.shape = b->synth_shape;
    p.type = b->type;
    p.seed = b->seed;
    char what[1200];
    snprintf(what, sizeof what, "%s %s (seed %llu) into %s", b->synth_shape, b->type, (unsigned long long)b->seed, path);
    synth_progress pr = {0, isatty(2) != 0, what, cli_time_ms()};
    double t0 = pr.t_print;
    fprintf(stderr, pr.tty ? "\rhachi bench: synthesizing %s:   0%%" : "hachi bench: synthesizing %s: 0%%\n", what);
    hachi_status st2 = hachi_synth(&p, path, on_synth_progress, &pr);
    if (pr.tty) fputc('\n', stderr);
    if (st2) { cli_lib_error(CMD, st2, "cannot synthesize the model"); return false; }
    fprintf(stderr, "hachi bench: synthesized %s in %.1f s\n", path, (cli_time_ms() - t0) / 1000.0);
    return true;
}

/* ---- measurements --------------------------------------------------------------- */

/* Real prefill of n tokens at the session's position in chunks, with progress
 * lines for long fills; returns tok/s or -1 (error printed). */
static double prefill(hachi_session *s, int n, uint64_t *rng, const char *what) {
    const hachi_model *m = hachi_session_model(s);
    int32_t toks[PREFILL_EVAL];
    double ms = 0, last_print = cli_time_ms();
    bool tty = isatty(2) != 0, printed = false;
    for (int done = 0; done < n;) {
        int c = CLI_MIN(PREFILL_EVAL, n - done);
        bench_tokens(toks, c, hachi_model_n_vocab(m), rng);
        double t0 = cli_time_ms();
        hachi_status st = hachi_session_eval(s, toks, c, NULL);
        double t1 = cli_time_ms();
        if (st) { cli_lib_error(CMD, st, "prefill failed"); return -1; }
        ms += t1 - t0;
        done += c;
        if (n > PREFILL_EVAL && (t1 - last_print > 2000 || (printed && done == n))) {
            fprintf(stderr, tty ? "\rhachi bench: %s: %d/%d tokens (%.1f tok/s)" : "hachi bench: %s: %d/%d tokens (%.1f tok/s)\n",
                    what, done, n, done / (ms / 1000.0));
            last_print = t1;
            printed = true;
        }
    }
    if (printed && tty) fputc('\n', stderr);
    return ms > 0 ? n / (ms / 1000.0) : INFINITY;
}

/* -r repetitions of -n decode steps: rep r's tok/s into tps[r], and into probe[r] the read
 * bandwidth measured (in a child, probe_mb) just before it, into probe[reps] after the last:
 * the bandwidth of a shared host drifts within seconds (33 to 92 GB/s in one session on a
 * Zen 5 VM), so a rep is judged against the probes on its two sides, not the run's first. */
static bool decode_reps(hachi_session *s, int n, int reps, uint64_t *rng, double *tps, double *probe, int threads,
                        long probe_mb) {
    const hachi_model *m = hachi_session_model(s);
    int32_t tok;
    for (int w = 0; w < WARMUP_STEPS; w++) {
        bench_tokens(&tok, 1, hachi_model_n_vocab(m), rng);
        hachi_status st = hachi_session_eval(s, &tok, 1, NULL);
        if (st) { cli_lib_error(CMD, st, "decode failed"); return false; }
    }
    for (int r = 0; r < reps; r++) {
        probe[r] = measure_bandwidth(threads, probe_mb);
        double t0 = cli_time_ms();
        for (int i = 0; i < n; i++) {
            bench_tokens(&tok, 1, hachi_model_n_vocab(m), rng);
            hachi_status st = hachi_session_eval(s, &tok, 1, NULL);
            if (st) { cli_lib_error(CMD, st, "decode failed"); return false; }
        }
        double ms = cli_time_ms() - t0;
        tps[r] = ms > 0 ? n / (ms / 1000.0) : INFINITY;
    }
    probe[reps] = measure_bandwidth(threads, probe_mb);
    return true;
}

/* For each k of ks[0..n_k): the median ms of one forward of k tokens (all k logits rows, as a
 * verifier needs) then a rewind by k, over reps after a warm-up. */
static bool verify_costs(hachi_session *s, const int *ks, int n_k, int reps, uint64_t *rng, double *ms_out) {
    const hachi_model *m = hachi_session_model(s);
    size_t nv = (size_t)hachi_model_n_vocab(m);
    float *logits = malloc(sizeof(float) * nv * 16);
    double *t = malloc(sizeof(double) * reps);
    bool ok = logits && t;
    if (!ok) cli_error(CMD, "out of memory");
    for (int ki = 0; ok && ki < n_k; ki++) {
        int k = ks[ki];
        int32_t toks[16];
        for (int r = -1; ok && r < reps; r++) {     /* r = -1: warm-up */
            bench_tokens(toks, k, hachi_model_n_vocab(m), rng);
            int pos = hachi_session_pos(s);
            double t0 = cli_time_ms();
            hachi_status st = hachi_session_eval(s, toks, k, logits);
            double ms = cli_time_ms() - t0;
            if (!st) st = hachi_session_rewind(s, pos);
            if (st) { cli_lib_error(CMD, st, "verify forward failed"); ok = false; }
            if (r >= 0) t[r] = ms;
        }
        if (ok) ms_out[ki] = bench_median(t, reps);
    }
    free(t);
    free(logits);
    return ok;
}

/* --spec-replay: the costs of forwards of 1..16 rows at the session's position, in ms and as
 * ratios for --spec-costs. */
static bool replay_cost_table(hachi_session *s, int reps, uint64_t *rng) {
    enum { ROWS = HACHI_DRAFT_MAX + 1 };
    int ks[ROWS];
    double ms[ROWS];
    for (int i = 0; i < ROWS; i++) ks[i] = i + 1;
    if (!verify_costs(s, ks, ROWS, reps, rng, ms)) return false;
    printf("forward costs at depth %d (median of %d, ms for 1..%d rows):", hachi_session_pos(s), reps, ROWS);
    for (int i = 0; i < ROWS; i++) printf(" %.1f", ms[i]);
    printf("\n  as --spec-costs: ");
    for (int i = 0; i < ROWS; i++) printf("%s%.3f", i ? "," : "", ms[i] / ms[0]);
    printf("\n");
    if (!hachi_session_draft_budget(s)) return true;
    /* a self-speculative draft step: one token page-sparse, rewound */
    double *t = malloc(sizeof *t * (size_t)reps);
    const int32_t nv = hachi_model_n_vocab(hachi_session_model(s)), base = hachi_session_pos(s);
    hachi_status st = t ? HACHI_OK : HACHI_ERR_NOMEM;
    for (int i = 0; i < reps && !st; i++) {
        int32_t tok;
        bench_tokens(&tok, 1, nv, rng);
        const double t0 = cli_time_ms();
        st = hachi_session_eval_draft(s, &tok, 1);
        t[i] = cli_time_ms() - t0;
        if (!st) st = hachi_session_rewind(s, base);
    }
    if (!st) {
        const double med = bench_median(t, reps);
        printf("  a self-speculative draft step (budget %d keys): %.1f ms, %.3f of a one-row forward\n",
               hachi_session_draft_budget(s), med, med / ms[0]);
    } else {
        cli_lib_error(CMD, st, "draft step failed");
    }
    free(t);
    return !st;
}

/* Time to first token: for each length a real prefill from position 0 in a session created
 * with profiling on, and the profile's split of its time per token. */
static bool ttft_runs(hachi_session *s, const bench_opts *b, bench_result *r, uint64_t *rng) {
    for (int i = 0; i < b->n_ttft; i++) {
        ttft_result *t = &r->ttft[r->n_ttft];
        char what[64];
        t->tokens = b->ttft[i];
        snprintf(what, sizeof what, "prefill of %d tokens", t->tokens);
        fprintf(stderr, "hachi bench: time to first token: a real %s...\n", what);
        if (hachi_session_rewind(s, 0)) return false;
        hachi_session_profile_reset(s);
        if ((t->tps = prefill(s, t->tokens, rng, what)) < 0) return false;
        t->seconds = t->tokens / t->tps;
        const hachi_profile *p = hachi_session_profile(s);
        const double k = p->tokens > 0 ? 1.0 / (double)p->tokens : 0.0;
        double layers = 0;
        for (int c = 0; c < p->n_chunks; c++) {
            layers += p->chunk_ms[c];
            t->matmul_ms += p->matmul_ms[c] * k;
            t->attn_ms += p->attn_ms[c] * k;
        }
        t->other_ms = layers * k - t->matmul_ms - t->attn_ms;
        t->input_ms = (p->emb_ms + p->ple_ms) * k;
        t->head_ms = p->head_ms * k;
        r->n_ttft++;
    }
    printf("\ntime to first token: a real prefill from position 0 of pseudo-random tokens, evals of %d tokens "
           "(each runs the head on its last row), forwards of at most %d\n", PREFILL_EVAL, b->o.sp.n_batch);
    printf("  tokens   seconds      tok/s   ms/token:  matmuls      attention    other layers  inputs  head\n");
    for (int i = 0; i < r->n_ttft; i++) {
        const ttft_result *t = &r->ttft[i];
        const double ms = 1000.0 / t->tps;
        printf("  %6d  %8.1f  %9.2f   %9.2f  %6.2f (%2.0f%%)  %6.2f (%2.0f%%)  %6.2f (%2.0f%%)  %6.2f  %4.2f\n", t->tokens,
               t->seconds, t->tps, ms, t->matmul_ms, 100 * t->matmul_ms / ms, t->attn_ms, 100 * t->attn_ms / ms,
               t->other_ms, 100 * t->other_ms / ms, t->input_ms, t->head_ms);
    }
    fflush(stdout);
    return true;
}

/* A short decode run in a separate session created with profiling on. */
static bool profile_run(const hachi_model *m, const bench_opts *b, int n_ctx, int depth, hachi_profile *out) {
    hachi_session_params sp = b->o.sp;
    sp.n_ctx = n_ctx;
    sp.profile = true;
    hachi_session *s = NULL;
    hachi_status st = hachi_session_create(m, &sp, &s);
    if (st) {
        cli_lib_error(CMD, st, "cannot create the profiling session");
        return false;
    }
    hachi_session_fill_synthetic(s, depth, 7);
    uint64_t rng = 0x51ed270b27a3f1b5ull;
    int32_t tok;
    bool ok = true;
    for (int i = 0; ok && i < WARMUP_STEPS + (int)b->n; i++) {
        if (i == WARMUP_STEPS) hachi_session_profile_reset(s);
        bench_tokens(&tok, 1, hachi_model_n_vocab(m), &rng);
        if ((st = hachi_session_eval(s, &tok, 1, NULL))) { cli_lib_error(CMD, st, "profiled decode failed"); ok = false; }
    }
    if (ok) {
        *out = *hachi_session_profile(s);
        printf("profile at depth %d (fill: fast, K/V rows not computed), %d steps, ms per token:\n", depth, out->steps);
        cli_print_profile(stdout, s);
    }
    hachi_session_free(s);
    return ok;
}

/* ---- JSON ------------------------------------------------------------------------- */

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.6g", v);
    else fputs("null", f);
}

static bool write_json(const char *path, const bench_result *r, const bench_opts *b) {
    char tmp[4096];
    FILE *f = cli_out_open(CMD, path, tmp, sizeof tmp);
    if (!f) return false;
    fprintf(f, "{\n  \"bandwidth_gbs\": "); json_num(f, r->bw_gbs);
    fprintf(f, ",\n  \"bandwidth_end_gbs\": "); json_num(f, r->bw_end_gbs);
    fprintf(f, ",\n  \"threads\": %d,\n  \"n_cpus\": %d,\n  \"cpu\": ", r->threads, r->n_cpus);
    json_str(f, r->cpu);
    fprintf(f, ",\n  \"kernels\": "); json_str(f, r->kernels);
    fprintf(f, ",\n  \"model\": {\"path\": "); json_str(f, r->model_path);
    fprintf(f, ", \"type\": "); json_str(f, r->type);
    fprintf(f, ", \"file_bytes\": %zu, \"synthetic\": %s, \"load_seconds\": ", r->file_bytes, b->synth_shape ? "true" : "false");
    json_num(f, r->load_s);
    fprintf(f, "},\n");
    fprintf(f, "  \"kv_type\": \"%s\",\n  \"sparse_budget\": %d,\n  \"streaming_heads\": %d,\n",
            hachi_kv_type_name(b->o.sp.kv_type), b->o.sp.sparse_budget, hachi_heads_count(b->o.sp.heads));
    fprintf(f, "  \"context\": %d,\n  \"n\": %ld,\n  \"reps\": %ld,\n  \"depths\": [", r->n_ctx, b->n, b->reps);
    for (int i = 0; i < r->n_depths; i++) {
        const depth_result *d = &r->d[i];
        double bytes = d->weight_bytes + d->kv_bytes, gbs = bytes * d->tps_med / 1e9;
        fprintf(f, "%s\n    {\"depth\": %d, \"fill\": \"%s\", \"fill_tokens\": %d, \"fill_tps\": ", i ? "," : "",
                d->depth, d->fast ? "fast" : "real", d->fill_tokens);
        json_num(f, d->fill_tokens ? d->fill_tps : NAN);
        fprintf(f, ", \"decode_tps_median\": "); json_num(f, d->tps_med);
        fprintf(f, ", \"decode_tps_min\": "); json_num(f, d->tps_min);
        fprintf(f, ", \"decode_tps_max\": "); json_num(f, d->tps_max);
        fprintf(f, ", \"ms_per_token\": "); json_num(f, 1000.0 / d->tps_med);
        fprintf(f, ", \"bytes_per_token\": %.0f, \"weight_bytes_per_token\": %.0f, \"kv_bytes_per_token\": %.0f",
                bytes, d->weight_bytes, d->kv_bytes);
        fprintf(f, ", \"achieved_gbs\": "); json_num(f, gbs);
        fprintf(f, ", \"roofline_pct\": "); json_num(f, d->roof_med);
        fprintf(f, ", \"probe_gbs_min\": "); json_num(f, d->probe_min);
        fprintf(f, ", \"probe_gbs_max\": "); json_num(f, d->probe_max);
        fputc('}', f);
    }
    fprintf(f, "\n  ],\n  \"prefill_tokens\": %d,\n  \"prefill_tps\": ", r->prefill_tokens);
    json_num(f, r->prefill_tokens ? r->prefill_tps : NAN);
    fprintf(f, ",\n  \"verify_depth\": %d,\n  \"verify\": [", r->verify_depth);
    for (int i = 0; r->have_verify && i < N_VERIFY; i++) {
        fprintf(f, "%s{\"k\": %d, \"ms\": ", i ? ", " : "", verify_k[i]);
        json_num(f, r->verify_ms[i]);
        fprintf(f, ", \"rel_cost\": ");
        json_num(f, r->verify_ms[i] / r->verify_ms[0]);
        fputc('}', f);
    }
    fprintf(f, "],\n  \"ttft\": [");
    for (int i = 0; i < r->n_ttft; i++) {
        const ttft_result *t = &r->ttft[i];
        fprintf(f, "%s\n    {\"tokens\": %d, \"tps\": ", i ? "," : "", t->tokens);
        json_num(f, t->tps);
        fprintf(f, ", \"seconds\": "); json_num(f, t->seconds);
        fprintf(f, ", \"ms_per_token\": {\"matmul\": "); json_num(f, t->matmul_ms);
        fprintf(f, ", \"attention\": "); json_num(f, t->attn_ms);
        fprintf(f, ", \"other_layers\": "); json_num(f, t->other_ms);
        fprintf(f, ", \"inputs\": "); json_num(f, t->input_ms);
        fprintf(f, ", \"head\": "); json_num(f, t->head_ms);
        fputs("}}", f);
    }
    fprintf(f, "%s],\n  \"rss_bytes\": %zu,\n  \"plan_bytes\": %zu,\n  \"profile\": ", r->n_ttft ? "\n  " : "",
            r->rss_bytes, r->plan_bytes);
    if (r->have_profile && r->prof.steps > 0) {
        const hachi_profile *p = &r->prof;
        double k = 1.0 / p->steps, total = p->emb_ms + p->ple_ms + p->head_ms;
        fprintf(f, "{\"depth\": %d, \"steps\": %d, \"emb\": ", r->profile_depth, p->steps);
        json_num(f, p->emb_ms * k);
        fprintf(f, ", \"ple\": "); json_num(f, p->ple_ms * k);
        for (int c = 0; c < p->n_chunks; c++) {
            fprintf(f, ", \"c%d\": ", c + 1);
            json_num(f, p->chunk_ms[c] * k);
            total += p->chunk_ms[c];
        }
        fprintf(f, ", \"head\": "); json_num(f, p->head_ms * k);
        fprintf(f, ", \"total\": "); json_num(f, total * k);
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    fputs("\n}\n", f);
    return cli_out_close(CMD, f, tmp, path, true);
}

/* ---- the command ---------------------------------------------------------------------- */

static bool parse_args(bench_opts *b, int argc, char **argv, bool *help) {
    memset(b, 0, sizeof *b);
    cli_opts_init(&b->o);
    b->type = "q4_0";
    b->seed = 1;
    b->n = 32;
    b->reps = 3;
    b->bw_mb = 1024;
    b->prefill_n = 512;
    b->fill = FILL_REAL;
    b->auto_real_max = 512;
    b->n_draft = -1;
    b->verify = b->prefill = b->profile = true;
    parse_depths(b, "128,2048,8192");
    long v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val;
#define VAL() do { if (!(val = cli_value(CMD, argc, argv, &i))) return false; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { *help = true; return true; }
        else if (!strcmp(a, "--synth")) {
            VAL();
            if (strcmp(val, "e2b") && strcmp(val, "tiny")) { cli_error(CMD, "--synth expects e2b or tiny, got '%s'", val); return false; }
            b->synth_shape = val;
        } else if (!strcmp(a, "--type")) { VAL(); b->type = val; }
        else if (!strcmp(a, "--seed")) {
            VAL(); if (!cli_int(CMD, a, val, 0, 0x7fffffffL, &v)) return false; b->seed = (uint64_t)v;
        } else if (!strcmp(a, "--depth") || !strcmp(a, "--depths")) { VAL(); if (!parse_depths(b, val)) return false; }
        else if (!strcmp(a, "-n")) { VAL(); if (!cli_int(CMD, a, val, 1, 4096, &b->n)) return false; }
        else if (!strcmp(a, "-r") || !strcmp(a, "--reps")) { VAL(); if (!cli_int(CMD, a, val, 1, 1000, &b->reps)) return false; }
        else if (!strcmp(a, "--bw-mb")) { VAL(); if (!cli_int(CMD, a, val, 1, 65536, &b->bw_mb)) return false; }
        else if (!strcmp(a, "--prefill-n")) { VAL(); if (!cli_int(CMD, a, val, 1, 32768, &b->prefill_n)) return false; }
        else if (!strcmp(a, "--json")) { VAL(); b->json = val; }
        else if (!strcmp(a, "--fill")) {
            VAL();
            if (!strcmp(val, "real")) b->fill = FILL_REAL;
            else if (!strcmp(val, "fast")) b->fill = FILL_FAST;
            else if (!strcmp(val, "auto")) b->fill = FILL_AUTO;
            else { cli_error(CMD, "--fill expects real, fast or auto, got '%s'", val); return false; }
        } else if (!strcmp(a, "--no-verify")) b->verify = false;
        else if (!strcmp(a, "--no-prefill")) b->prefill = false;
        else if (!strcmp(a, "--no-profile")) b->profile = false;
        else if (!strcmp(a, "--spec-replay")) {
            VAL();
            b->replay = val;
        } else if (!strcmp(a, "--spec")) {
            VAL();
            b->spec_text = val;
        } else if (!strcmp(a, "-md") || !strcmp(a, "--model-draft")) {
            VAL();
            b->md_path = val;
        } else if (!strcmp(a, "--draft")) {
            VAL();
            if (!cli_int(CMD, a, val, 1, HACHI_DRAFT_MAX, &b->n_draft)) return false;
        } else if (!strcmp(a, "--self-budget")) {
            VAL();
            if (!cli_int(CMD, a, val, 48, 16384, &v)) return false;
            b->o.sp.draft_budget = (int32_t)v;   /* checked (a multiple of 16) by the session */
        } else if (!strcmp(a, "--ttft")) {
            VAL();
            if (!parse_lengths(a, val, HACHI_CTX_MAX, b->ttft, &b->n_ttft)) return false;
        }
        else {
            int r = cli_opts_parse(CMD, &b->o, argc, argv, &i);
            if (r < 0) return false;
            if (r == 0) { cli_error(CMD, "unknown option '%s' (see --help)", a); return false; }
        }
#undef VAL
    }
    if (!b->o.model && !b->synth_shape) { cli_error(CMD, "no model: give -m MODEL.gguf or --synth e2b|tiny"); return false; }
    if (b->o.model && b->synth_shape) { cli_error(CMD, "give either -m or --synth, not both"); return false; }
    if (!b->prefill) b->fill = FILL_FAST;
    if ((b->md_path || b->n_draft > 0) && !b->spec_text) { cli_error(CMD, "-md and --draft need --spec TEXT"); return false; }
    if (b->spec_text && (b->replay || b->n_ttft)) { cli_error(CMD, "give one of --spec, --spec-replay and --ttft"); return false; }
    if (b->spec_text && b->reps > SPEC_BENCH_REPS_MAX) { cli_error(CMD, "--spec: at most %d runs (-r)", SPEC_BENCH_REPS_MAX); return false; }
    if (b->spec_text) {   /* before anything is loaded */
        FILE *f = fopen(b->spec_text, "rb");
        if (!f) { cli_error(CMD, "--spec: cannot read the text '%s': %s", b->spec_text, strerror(errno)); return false; }
        fclose(f);
    }
    return true;
}

#define MAX_TRACES 8
static int bench(bench_opts *bp, const replay_trace *traces, int n_traces);

int cmd_bench(int argc, char **argv) {
    bench_opts b;
    bool help = false;
    if (!parse_args(&b, argc, argv, &help)) return 1;
    if (help) { usage(stdout); return 0; }

    /* --spec-replay: the traces, read before anything is loaded */
    replay_trace traces[MAX_TRACES];
    int n_traces = 0, rc = 1;
    char names[4096];
    if (b.replay && b.n_ttft) return cli_error(CMD, "give either --ttft or --spec-replay, not both");
    if (b.replay && snprintf(names, sizeof names, "%s", b.replay) >= (int)sizeof names)
        return cli_error(CMD, "--spec-replay: the list of traces is too long");
    for (char *p = names, *save = NULL, *tok; b.replay && (tok = strtok_r(p, ",", &save)); p = NULL) {
        if (n_traces == MAX_TRACES) { cli_error(CMD, "--spec-replay: at most %d traces", MAX_TRACES); goto free_traces; }
        if (!replay_load(CMD, tok, &traces[n_traces])) goto free_traces;
        n_traces++;
    }
    if (b.replay && !n_traces) { cli_error(CMD, "--spec-replay: no trace given"); goto free_traces; }
    for (int i = 0; i < n_traces; i++)   /* self-speculation's draft steps: the session's, at 1024 keys unless given */
        if (traces[i].draft_steps && !b.o.sp.draft_budget) b.o.sp.draft_budget = 1024;
    rc = bench(&b, traces, n_traces);
free_traces:
    for (int i = 0; i < n_traces; i++) replay_free(&traces[i]);
    return rc;
}

static int bench(bench_opts *bp, const replay_trace *traces, int n_traces) {
    bench_opts b = *bp;
    /* context: the deepest depth + warm-up + decode steps + verify slack (--ttft: its longest
     * prompt; --spec-replay: the positions the traces take) */
    int max_depth = b.depths[b.n_depths - 1];
    int need = b.n_ttft ? b.ttft[b.n_ttft - 1] : max_depth + WARMUP_STEPS + (int)(b.n * b.reps) + 16;
    if (n_traces) need = max_depth + 16;
    for (int t = 0; t < n_traces; t++) need += replay_positions(&traces[t]);
    if (b.prefill && !n_traces && !b.n_ttft && !b.o.ctx_given) need = CLI_MAX(need, (int)b.prefill_n);   /* its whole prefill */
    int n_ctx = cli_ctx_for(need);
    if (b.o.ctx_given) {
        n_ctx = b.o.sp.n_ctx;
        if (n_ctx < need && b.n_ttft) return cli_error(CMD, "-c %d cannot hold a prompt of %d tokens", n_ctx, b.ttft[b.n_ttft - 1]);
        if (n_ctx < need) return cli_error(CMD, "-c %d cannot hold depth %d + %ld decode steps (needs %d)", n_ctx, max_depth, b.n * b.reps, need);
        if (b.prefill && !n_traces && !b.n_ttft && b.prefill_n > n_ctx)
            return cli_error(CMD, "-c %d cannot hold the timed prefill of %ld tokens (--prefill-n)", n_ctx, b.prefill_n);
    }
    if (!n_ctx) return cli_error(CMD, "depth %d + %ld decode steps exceeds the largest context mode (%d)", max_depth, b.n * b.reps, HACHI_CTX_MAX);
    b.o.sp.n_ctx = n_ctx;
    b.o.sp.profile = b.n_ttft > 0;  /* the decode table's session never profiles; profile_run does */

    static bench_result r;   /* large; r.model_path points into synth_path below only until return */
    memset(&r, 0, sizeof r);
    r.threads = b.o.sp.n_threads ? b.o.sp.n_threads : hachi_physical_cores();
    r.n_cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    r.n_ctx = n_ctx;
    cpu_model(r.cpu, sizeof r.cpu);

    char synth_path[1024];
    if (b.synth_shape) {
        if (!synth_model(&b, synth_path, sizeof synth_path)) return 1;
        b.o.model = synth_path;
    }
    r.model_path = b.o.model;

    fprintf(stderr, "hachi bench: measuring read bandwidth (%ld MiB, %d threads)...\n", b.bw_mb, r.threads);
    r.bw_gbs = measure_bandwidth(r.threads, b.bw_mb);
    if (!(r.bw_gbs > 0)) fprintf(stderr, "hachi bench: warning: the bandwidth measurement failed; no roofline %%\n");

    int rc = 1;
    hachi_session *s = NULL;
    r.load_s = cli_time_ms();
    hachi_model *m = cli_load_model(CMD, &b.o, false);
    if (!m) goto out;
    cli_note_input(b.spec_text);
    if (b.json && !cli_out_check(CMD, b.json)) goto out;   /* before the minutes of measuring */
    r.load_s = (cli_time_ms() - r.load_s) / 1000.0;
    hachi_status st = hachi_session_create(m, &b.o.sp, &s);
    if (st) { cli_lib_error(CMD, st, "cannot create the session"); goto out; }
    r.file_bytes = hachi_model_file_bytes(m);
    r.plan_bytes = hachi_session_plan_bytes(s);
    snprintf(r.kernels, sizeof r.kernels, "%s", hachi_session_kernels(s));
    const int64_t ft = hachi_model_file_type(m);
    if (b.synth_shape) snprintf(r.type, sizeof r.type, "%s", b.type);
    else if (ft >= 0 && ftype_name(ft))
        snprintf(r.type, sizeof r.type, "%s", ftype_name(ft));
    else snprintf(r.type, sizeof r.type, ft >= 0 ? "ftype %lld" : "unknown", (long long)ft);

    printf("hachi bench: %s, %d CPUs, %d threads, kernels %s, read bandwidth %.1f GB/s (measured)\n", r.cpu, r.n_cpus,
           r.threads, r.kernels, r.bw_gbs);
    printf("model: %s (%s %s, %.1f MB file, %.1f MB weights read per token, %.1f MB of them interleaved by 8), "
           "loaded in %.2f s, context %d, plan %.1f MB\n", r.model_path, hachi_model_arch(m), r.type, r.file_bytes / 1e6,
           hachi_model_weight_bytes(m) / 1e6, hachi_model_repacked_bytes(m) / 1e6, r.load_s, n_ctx, r.plan_bytes / 1e6);
    printf("mode: kv %s, attention %s", hachi_kv_type_name(b.o.sp.kv_type), b.o.sp.sparse_budget ? "page-sparse" : "dense");
    if (b.o.sp.sparse_budget) printf(" (budget %d positions)", b.o.sp.sparse_budget);
    if (b.o.sp.draft_budget) printf(", self-speculative draft steps page-sparse (budget %d positions)", b.o.sp.draft_budget);
    if (b.o.sp.heads)
        printf(", %d streaming heads (sink %d, window %d)", hachi_heads_count(b.o.sp.heads),
               hachi_heads_sink(b.o.sp.heads), hachi_heads_window(b.o.sp.heads));
    printf("\n");
    fflush(stdout);

    uint64_t rng = 0x2545F4914F6CDD1Dull ^ b.seed;
    if (b.spec_text) {   /* every drafter end to end on real text (no decode table) */
        hachi_model *am = NULL;
        cli_note_input(b.md_path);
        if (b.md_path && ((st = hachi_model_load(b.md_path, NULL, &am)) || (st = hachi_assistant_check(m, am)))) {
            cli_lib_error(CMD, st, "cannot use the drafter (-md)");
            hachi_model_free(am);
            goto out;
        }
        const spec_bench_opts so = {.text_path = b.spec_text, .assistant = am,
                                    .self_budget = b.o.sp.draft_budget, .n = b.n,
                                    .reps = b.reps, .n_draft = b.n_draft, .depths = b.depths, .n_depths = b.n_depths,
                                    .sp = b.o.sp};
        const bool ok = spec_bench_run(CMD, m, &so);
        hachi_model_free(am);
        if (!ok) goto out;
        goto done;
    }
    if (b.n_ttft) {
        if (!ttft_runs(s, &b, &r, &rng)) goto out;
        goto done;
    }
    /* prefill rate: a real prefill from position 0, then forgotten */
    if (b.prefill && !n_traces) {
        r.prefill_tokens = (int)b.prefill_n;
        fprintf(stderr, "hachi bench: timing a prefill of %d tokens...\n", r.prefill_tokens);
        r.prefill_tps = prefill(s, r.prefill_tokens, &rng, "prefill");
        if (r.prefill_tps < 0 || hachi_session_rewind(s, 0)) goto out;
    }

    double *tps = malloc(sizeof(double) * (3 * b.reps + 1));
    if (!tps) { cli_error(CMD, "out of memory"); goto out; }
    double *probe = tps + b.reps, *roof = probe + b.reps + 1;   /* reps + 1 probes */
    for (int i = 0; i < b.n_depths; i++) {
        depth_result *d = &r.d[r.n_depths];
        d->depth = b.depths[i];
        d->fast = b.fill == FILL_FAST || (b.fill == FILL_AUTO && d->depth > b.auto_real_max);
        if (hachi_session_pos(s) > d->depth) hachi_session_rewind(s, 0);
        int fill = d->depth - hachi_session_pos(s);
        char what[64];
        snprintf(what, sizeof what, "filling to depth %d", d->depth);
        if (d->fast) {
            fprintf(stderr, "hachi bench: %s (fast: K/V rows not computed)...\n", what);
            hachi_session_fill_synthetic(s, fill, b.seed + (uint64_t)i);
        } else if (fill > 0) {
            fprintf(stderr, "hachi bench: %s (real prefill of %d tokens)...\n", what, fill);
            d->fill_tokens = fill;
            if ((d->fill_tps = prefill(s, fill, &rng, what)) < 0) { free(tps); goto out; }
        }
        if (n_traces && b.verify && !replay_cost_table(s, (int)CLI_MAX(b.reps, 5), &rng)) { free(tps); goto out; }
        for (int t = 0; t < n_traces; t++) {
            replay_result rr;
            fprintf(stderr, "hachi bench: replaying %s at depth %d...\n", traces[t].path, d->depth);
            if (!replay_run(CMD, s, &traces[t], b.seed + (uint64_t)t, &rr)) { free(tps); goto out; }
            replay_print(&traces[t], d->depth, &rr);
            fflush(stdout);
        }
        if (n_traces) continue;
        fprintf(stderr, "hachi bench: decoding at depth %d (%ld x %ld steps)...\n", d->depth, b.reps, b.n);
        if (!decode_reps(s, (int)b.n, (int)b.reps, &rng, tps, probe, r.threads, b.bw_mb)) { free(tps); goto out; }
        d->weight_bytes = (double)hachi_model_weight_bytes(m);
        d->kv_bytes = (double)hachi_session_kv_bytes_read(s, d->depth);
        d->tps_min = d->tps_max = tps[0];   // NOLINT(clang-analyzer-core.uninitialized.Assign): decode_reps wrote tps[0..reps), reps >= 1
        d->probe_min = d->probe_max = probe[0];
        for (int k = 0; k <= b.reps; k++) {
            d->probe_min = fmin(d->probe_min, probe[k]);
            d->probe_max = fmax(d->probe_max, probe[k]);
        }
        for (int k = 0; k < b.reps; k++) {   /* rep k against its two probes: before bench_median sorts tps */
            d->tps_min = fmin(d->tps_min, tps[k]);
            d->tps_max = fmax(d->tps_max, tps[k]);
            roof[k] = 100.0 * (d->weight_bytes + d->kv_bytes) * tps[k] / 1e9 / ((probe[k] + probe[k + 1]) / 2);
        }
        d->tps_med = bench_median(tps, (int)b.reps);
        d->roof_med = d->probe_min > 0 ? bench_median(roof, (int)b.reps) : NAN;   /* a failed probe: no ratio */
        r.n_depths++;
        if (i == 0 && b.verify) {
            fprintf(stderr, "hachi bench: timing forwards of k = 1..16 tokens at depth %d...\n", hachi_session_pos(s));
            r.verify_depth = hachi_session_pos(s);
            if (!(r.have_verify = verify_costs(s, verify_k, N_VERIFY, (int)CLI_MAX(b.reps, 5), &rng, r.verify_ms))) {
                free(tps);
                goto out;
            }
        }
    }
    free(tps);
    if (n_traces) goto done;

    /* the table */
    printf("\n  depth  fill   tok/s median    min    max   ms/token   MB/token  (KV MB)   GB/s  roofline\n");
    for (int i = 0; i < r.n_depths; i++) {
        const depth_result *d = &r.d[i];
        double bytes = d->weight_bytes + d->kv_bytes, gbs = bytes * d->tps_med / 1e9;
        printf("  %5d  %-4s  %12.2f %6.2f %6.2f  %9.2f  %9.1f  %7.1f  %5.1f  %7.1f%%  (probes %.1f-%.1f GB/s)\n", d->depth,
               d->fast ? "fast" : "real", d->tps_med, d->tps_min, d->tps_max, 1000.0 / d->tps_med, bytes / 1e6,
               d->kv_bytes / 1e6, gbs, d->roof_med, d->probe_min, d->probe_max);
    }
    printf("  (roofline: each rep's GB/s over the mean of the read bandwidths probed just before and after it, the median)\n");
    bool any_fast = false;
    for (int i = 0; i < r.n_depths; i++) any_fast |= r.d[i].fast;
    if (any_fast) printf("  (fill: fast, K/V rows not computed: written by hachi_session_fill_synthetic)\n");
    printf("  (decode: %ld reps x %ld steps of one pseudo-random token, after %d warm-up steps; "
           "depth D decodes at positions D+%d..)\n", b.reps, b.n, WARMUP_STEPS, WARMUP_STEPS);
    if (b.prefill) {
        printf("prefill: %d tokens at %.2f tok/s", r.prefill_tokens, r.prefill_tps);
        for (int i = 0; i < r.n_depths; i++)
            if (r.d[i].fill_tokens > 0)
                printf("; fill to %d: %d tokens at %.2f tok/s", r.d[i].depth, r.d[i].fill_tokens, r.d[i].fill_tps);
        printf("\n");
    }
    if (r.have_verify) {
        printf("verify (depth %d, one forward of k tokens with k logits rows, median of %ld): ", r.verify_depth,
               CLI_MAX(b.reps, 5));
        for (int i = 0; i < N_VERIFY; i++)
            printf("%sk=%d %.2fx (%.1f ms)", i ? ", " : "", verify_k[i], r.verify_ms[i] / r.verify_ms[0], r.verify_ms[i]);
        printf("\n");
        spec_expected(verify_k, r.verify_ms, N_VERIFY, HACHI_DRAFT_MAX);
    }
    fflush(stdout);

    if (b.profile) {
        fprintf(stderr, "hachi bench: profiled decode at depth %d...\n", max_depth);
        r.profile_depth = max_depth;
        if (!(r.have_profile = profile_run(m, &b, n_ctx, max_depth, &r.prof))) goto out;
    }

done:;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) r.rss_bytes = (size_t)ru.ru_maxrss * 1024;
    printf("peak RSS %.1f MB (model file %.1f MB + session plan %.1f MB = %.1f MB)\n", r.rss_bytes / 1e6,
           r.file_bytes / 1e6, r.plan_bytes / 1e6, (r.file_bytes + r.plan_bytes) / 1e6);
    /* measured again, in this process now that the peak RSS is taken: how far the machine's
     * bandwidth drifted while the numbers above were taken (shared hosts drift a lot) */
    fprintf(stderr, "hachi bench: measuring read bandwidth again...\n");
    r.bw_end_gbs = hachi_measure_read_bandwidth(r.threads, (size_t)b.bw_mb << 20, 5);
    printf("read bandwidth at the end %.1f GB/s (start %.1f GB/s)\n", r.bw_end_gbs, r.bw_gbs);
    if (b.json) {
        if (!write_json(b.json, &r, &b)) goto out;
        printf("json: %s\n", b.json);
    }
    rc = 0;
out:
    r.model_path = NULL;
    hachi_session_free(s);
    cli_free_model(&b.o, m);
    return rc;
}
