/* cli: the hachi command-line tool. Each command is one file tools/cmd_<name>.c
 * with `int cmd_<name>(int argc, char **argv)` (argv[0] is the command name),
 * returning the process exit code. Errors are one line on stderr:
 * "hachi <cmd>: <what is wrong>". */
#ifndef HACHI_CLI_H
#define HACHI_CLI_H
#include <stdbool.h>
#include <stdint.h>
#include "hachi.h"

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_passkey(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_convert_llama2c(int argc, char **argv);
int cmd_synth(int argc, char **argv);

#define CLI_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CLI_MAX(a, b) ((a) > (b) ? (a) : (b))
/* Monotonic clock in milliseconds. */
double cli_time_ms(void);

/* Print "hachi <cmd>: <msg>\n" to stderr; returns 1 (the exit code to use). */
int cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same, appending ": <hachi_last_error()>" for a failed library call. */
int cli_lib_error(const char *cmd, hachi_status st, const char *what);
/* Strict number parsing of a flag's value within [lo, hi]; prints the error itself. */
bool cli_int(const char *cmd, const char *flag, const char *val, long lo, long hi, long *out);
bool cli_float(const char *cmd, const char *flag, const char *val, double lo, double hi, double *out);
/* Fetch the value following argv[*i] for flag; prints an error when missing. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);
/* Read a whole file (binary-exact); *len set; NULL with an error printed on failure. */
char *cli_read_file(const char *cmd, const char *path, size_t *len);

/* Flags shared by the model-running commands. */
typedef struct cli_opts {
    const char *model;              /* -m */
    hachi_session_params sp;        /* -c -t --batch --chunks --profile */
    hachi_sampler_params smp;       /* --temp --top-k --top-p --min-p --repeat-penalty --seed */
    bool ctx_given;
    bool no_repack;                 /* --no-repack */
} cli_opts;

void cli_opts_init(cli_opts *o);
/* Consume argv[*i] (and its value) if it is a shared flag: 1 consumed, 0 not ours, -1 bad value. */
int  cli_opts_parse(const char *cmd, cli_opts *o, int argc, char **argv, int *i);
/* Load o->model (error printed on failure). */
hachi_model *cli_load_model(const char *cmd, const cli_opts *o, bool vocab_only);
/* Smallest context mode holding n tokens (0 if none). */
int cli_ctx_for(int n_tokens);

/* Quality modes. A mode is the session params the shared flags built (--kv-type, and the
 * lossy attention flags as they come); the quality harness (passkey, perplexity
 * --kl-divergence) compares it with its dense baseline in the same process. */
/* The baseline of a mode: the library's defaults (dense attention, f16 K/V; a new mode field
 * defaults to the exact path) with the mode's fields that do not change the outputs: context,
 * threads, batch, profile, progress. */
hachi_session_params cli_dense_params(const hachi_session_params *mode);
/* The mode's output-changing fields in words ("kv f16"); buf of cap bytes, returned. */
const char *cli_mode_name(const hachi_session_params *p, char *buf, size_t cap);

#endif
