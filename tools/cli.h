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
int cmd_serve(int argc, char **argv);

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

/* ---- hachi serve: the OpenAI request bodies and response texts (tools/serve_api.c, cJSON) ----
 * The HTTP side, slots and generation are tools/cmd_serve.c. */
#define SERVE_MAX_STOP 4            /* stop sequences a request may give (OpenAI's limit) */
#define SERVE_MAX_STOP_LEN 256      /* bytes of one stop sequence */

/* One completion request, as parsed and checked. */
typedef struct serve_req {
    bool chat;                      /* /v1/chat/completions (else /v1/completions) */
    char *prompt;                   /* the text to tokenize: chat messages in the model's format (malloc'd) */
    bool add_bos;                   /* completions: BOS before the prompt (a chat prompt carries its own) */
    bool continues;                 /* chat: the last message is the assistant's, which the reply continues */
    long max_tokens;                /* -1: until the context is full */
    double temperature, top_p;      /* -1: the server's default */
    long long seed;                 /* -1: none given */
    char *stop[SERVE_MAX_STOP];     /* malloc'd, non-empty */
    int n_stop;
    bool stream, include_usage;
    bool cache_prompt;              /* llama.cpp's field (default true): false prefills the whole prompt */
} serve_req;

/* Parses and checks a request body of len bytes (not NUL-terminated) for chat (else a
 * completion) of model m. false: err (cap bytes) says what is wrong, naming the field. */
bool serve_parse(const char *body, size_t len, bool chat, const hachi_model *m, serve_req *rq, char *err, size_t cap);
void serve_req_free(serve_req *rq);

/* Appends s[0..n) to buf as the inside of a JSON string (quotes not added); returns the
 * bytes written, or 0 when it does not fit cap (6 bytes per input byte always fit). */
size_t serve_json_escape(char *buf, size_t cap, const char *s, size_t n);
/* {"error":{"message":msg,"type":type,"code":code}} (malloc'd). */
char *serve_error_json(const char *msg, const char *type, const char *code);

/* What a finished request returns: the text, why it ended, the token counts. */
typedef struct serve_result {
    const char *id, *model;         /* "chatcmpl-.." / "cmpl-..", the model's name */
    long long created;              /* unix seconds */
    const char *text;
    size_t len;
    const char *finish;             /* "stop" or "length" */
    int prompt_tokens, cached_tokens, completion_tokens;
} serve_result;
/* The chat.completion or text_completion object (malloc'd). */
char *serve_result_json(const serve_req *rq, const serve_result *r);
/* One SSE event "data: {...}\n\n" of a stream into buf (cap bytes): a delta of text[0..len)
 * (first: the chat role comes with it), the last chunk (finish set), or the usage chunk
 * (usage). Returns the bytes written, 0 when it does not fit. */
size_t serve_chunk(char *buf, size_t cap, const serve_req *rq, const serve_result *r, const char *text, size_t len,
                   bool first, const char *finish, bool usage);
/* {"object":"list","data":[{"id":name,...}]} (malloc'd). */
char *serve_models_json(const char *name, long long created);

#endif
