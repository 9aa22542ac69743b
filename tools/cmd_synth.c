/* cmd_synth: `hachi synth --arch gemma4 --shape e2b|tiny --type T --seed S -o FILE.gguf`,
 * a random-weight model of a real shape, streamed to disk with a percent counter. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli.h"
#include "hachi.h"

static const char *CMD = "synth";

static void usage(FILE *f) {
    fprintf(f, "usage: hachi synth [--arch gemma4] [--shape e2b|tiny] [--type T] [--seed S] [-t N] -o FILE.gguf\n"
               "  --shape   e2b: Gemma 4 E2B dimensions (35 layers, 1536 wide, 262144 vocab); tiny: a 10-layer\n"
               "            256-wide model for tests (default tiny)\n"
               "  --type    f32, f16, bf16, q8_0, q4_0 (Q6_K embeddings), q4_k_m, q5_k_m (llama.cpp's mixes) (default f32)\n"
               "  --seed    RNG seed (default 1): equal seeds give byte-identical files\n"
               "  -t        quantization threads (default: all CPUs)\n"
               "  -q        no progress on stderr\n");
}

typedef struct progress { int last; bool tty; } progress;

static void on_progress(void *ctx, double done) {
    progress *p = ctx;
    int pct = (int)(done * 100.0);
    if (pct == p->last) return;
    p->last = pct;
    if (p->tty) fprintf(stderr, "\rhachi synth: %3d%%", pct);
    else if (pct % 10 == 0) fprintf(stderr, "hachi synth: %d%%\n", pct);
}

int cmd_synth(int argc, char **argv) {
    hachi_synth_params p = hachi_synth_default_params();
    const char *out = NULL;
    bool quiet = false;
    long v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = true;
        else if (!strcmp(a, "--arch")) { if (!(p.arch = cli_value(CMD, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "--shape")) { if (!(p.shape = cli_value(CMD, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "--type")) { if (!(p.type = cli_value(CMD, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) { if (!(out = cli_value(CMD, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "--seed")) {
            const char *s = cli_value(CMD, argc, argv, &i);
            if (!s || !cli_int(CMD, "--seed", s, 0, 0x7fffffffffffffffL, &v)) return 1;
            p.seed = (uint64_t)v;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            const char *s = cli_value(CMD, argc, argv, &i);
            if (!s || !cli_int(CMD, a, s, 1, 16, &v)) return 1;
            p.n_threads = (int)v;
        } else return cli_error(CMD, "unknown option '%s' (see --help)", a);
    }
    if (!out) return cli_error(CMD, "missing -o FILE.gguf");
    progress pr = {-1, isatty(2) != 0};
    double t0 = cli_time_ms();
    hachi_status st = hachi_synth(&p, out, quiet ? NULL : on_progress, &pr);
    if (!quiet && pr.tty && pr.last >= 0) fputc('\n', stderr);
    if (st) return cli_error(CMD, "%s", *hachi_last_error() ? hachi_last_error() : hachi_status_str(st));
    struct stat sb;
    if (!quiet)
        fprintf(stderr, "hachi synth: wrote %s (%s %s %s, seed %llu, %.1f MB) in %.1f s\n", out, p.arch,
                p.shape, p.type, (unsigned long long)p.seed, stat(out, &sb) ? 0.0 : (double)sb.st_size / 1e6,
                (cli_time_ms() - t0) / 1000.0);
    return 0;
}
