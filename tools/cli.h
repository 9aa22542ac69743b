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
int cmd_bench(int argc, char **argv);
int cmd_convert_llama2c(int argc, char **argv);
int cmd_synth(int argc, char **argv);

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

#endif
