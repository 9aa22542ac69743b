/* cli: the hachi command-line tool. Each command is one file tools/cmd_<name>.c
 * with `int cmd_<name>(int argc, char **argv)` (argv[0] is the command name),
 * returning the process exit code. Errors are one line on stderr:
 * "hachi <cmd>: <what is wrong>". */
#ifndef HACHI_CLI_H
#define HACHI_CLI_H
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include "hachi.h"

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_passkey(int argc, char **argv);
int cmd_heads(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_convert_llama2c(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* top_p 0 (CLI and server): the likeliest token alone, as the smallest top_p the sampler takes */
#define CLI_TOP_P_MIN 1e-6
#define CLI_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CLI_MAX(a, b) ((a) > (b) ? (a) : (b))
/* s[*a..*b) narrowed past the white space at its ends that jinja's trim (Python's str.strip)
 * removes, as far as ASCII goes: the set hachi_chat_turn trims with (chat's kept replies, serve's
 * Gemma 4 rendering; inline, so that serve_api.c needs nothing else of cli) */
static inline void cli_trim(const char *s, size_t *a, size_t *b) {
    static const char ws[] = " \t\n\v\f\r\x1c\x1d\x1e\x1f";
    while (*a < *b && memchr(ws, s[*a], sizeof ws - 1)) ++*a;
    while (*b > *a && memchr(ws, s[*b - 1], sizeof ws - 1)) --*b;
}
/* Monotonic clock in milliseconds. */
double cli_time_ms(void);

/* Print "hachi <cmd>: <msg>\n" to stderr; returns 1 (the exit code to use). */
int cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same, appending ": <hachi_last_error()>" for a failed library call. */
int cli_lib_error(const char *cmd, hachi_status st, const char *what);
/* Strict number parsing of a flag's value within [lo, hi]; prints the error itself. */
bool cli_int(const char *cmd, const char *flag, const char *val, long lo, long hi, long *out);
bool cli_float(const char *cmd, const char *flag, const char *val, double lo, double hi, double *out);
/* Whether a is one of the n strings of list. */
bool cli_one_of(const char *a, const char *const *list, size_t n);
/* Fetch the value following argv[*i] for flag; prints an error when missing. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);
/* Read a whole file (binary-exact); *len set; NULL with an error printed on failure. */
char *cli_read_file(const char *cmd, const char *path, size_t *len);
/* An output the tool writes to path.tmp and renames over path must be a regular file or absent
 * (a FIFO, device or symbolic link would be replaced, not written); false with the error printed. */
bool cli_replaceable(const char *cmd, const char *path);
/* An output written whole or not at all: cli_out_open creates a new path.tmp (or path.tmp.N when
 * that is there: an existing file is never opened; its name into tmp, cap bytes), for reading and
 * writing, after cli_replaceable; cli_out_close closes it and, with keep and every write done,
 * renames it over path, else removes it. NULL / false with the error printed. */
void *cli_out_open(const char *cmd, const char *path, char *tmp, size_t cap);   /* FILE* */
/* An output that is one of the command's inputs (the same file, by any path) is refused: false
 * with the error printed. */
bool cli_not_input(const char *cmd, const char *out, const char *in);
/* Records path (NULL: nothing) as an input of this process: cli_load_model notes the model and
 * heads file, cli_read_file what it reads, the drafter flags the -md file. cli_out_check (which
 * cli_out_open runs first) refuses an output that is a noted input, as well as an empty path and
 * what cli_replaceable refuses: false with the error printed. */
void cli_note_input(const char *path);
bool cli_out_check(const char *cmd, const char *path);
bool cli_out_close(const char *cmd, void *f, const char *tmp, const char *path, bool keep);

#define CLI_MAX_BIAS 64
/* Flags shared by the model-running commands. */
typedef struct cli_opts {
    const char *model;              /* -m */
    hachi_session_params sp;        /* -c -t --batch --chunks --profile */
    hachi_sampler_params smp;       /* --temp --top-k --top-p --min-p --repeat-penalty --repeat-last-n
                                       --presence-penalty --frequency-penalty --seed */
    bool seed_given;
    int32_t bias_ids[CLI_MAX_BIAS]; /* --logit-bias ID+B / ID-B (repeatable): bias[i] added to token bias_ids[i] */
    float bias[CLI_MAX_BIAS];
    int n_bias;
    bool ctx_given;
    bool no_repack;                 /* --no-repack */
    const char *heads_path;         /* --heads FILE: loaded by cli_load_model into sp.heads */
    hachi_heads *heads;
    int progress;                   /* --progress 1, --no-progress 0; -1: when stderr is a terminal */
    const char *json_schema;        /* --json-schema SCHEMA (or --json-schema-file FILE: its path) */
    bool json_schema_file;
} cli_opts;

/* Progress of long prefills on stderr (tokens done, rate, time left): hachi_session_params'
 * callback. A terminal gets one line rewritten in place, a log (--progress) a line per 5 s and
 * the last one. cli_progress_attach readies p (print: as o->progress says) and sets o->sp's
 * callback to it when it prints; label names what runs ("hachi run", "hachi serve: slot 1").
 * The callback stops an eval only when stop (if set) returns true. */
typedef struct cli_progress {
    const char *label;
    bool tty, print, (*stop)(void *ctx);
    void *stop_ctx;
    double t_first, t_print, done_first, last_done;
    bool shown;
} cli_progress;
void cli_progress_attach(cli_opts *o, cli_progress *p, const char *label);
bool cli_progress_cb(void *ctx, double done, double total);

void cli_opts_init(cli_opts *o);
/* Consume argv[*i] (and its value) if it is a shared flag: 1 consumed, 0 not ours, -1 bad value. */
int  cli_opts_parse(const char *cmd, cli_opts *o, int argc, char **argv, int *i);
/* Load o->model, and o->heads_path into o->sp.heads (error printed on failure). */
/* The sampler of o's flags (--logit-bias included) for model m; an error said on stderr. With
 * --json-schema, *json (where json is not NULL; NULL: the command takes no schema, an error) gets
 * the grammar the sampler is held to, which lives until cli_json_free, after the sampler's last
 * use; cli_json_reset readies it for another reply. */
typedef struct cli_json cli_json;
hachi_status cli_sampler_create(const char *cmd, const cli_opts *o, const hachi_model *m, cli_json **json, hachi_sampler **out);
/* --json-schema SCHEMA / --json-schema-file FILE (run and chat): as cli_opts_parse */
int cli_json_parse(const char *cmd, cli_opts *o, int argc, char **argv, int *i);
#define CLI_JSON_USAGE                                                                                       \
    "  --json-schema SCHEMA, --json-schema-file FILE   hold the reply to a JSON schema as it is sampled (the\n" \
    "              subset serve's response_format takes; '{}': any JSON value); it ends once the value is whole\n"

void cli_json_reset(cli_json *j);
void cli_json_free(cli_json *j);
hachi_model *cli_load_model(const char *cmd, cli_opts *o, bool vocab_only);
/* Free what cli_load_model loaded. */
void cli_free_model(cli_opts *o, hachi_model *m);
/* Smallest context mode holding n tokens (0 if none). */
int cli_ctx_for(int n_tokens);

/* The drafter flags of run, chat and serve (tools/draft.c): --draft N (drafted tokens per
 * forward), -md FILE (a gemma4-assistant drafter; --draft defaults to 3 with it, else prompt
 * lookup), --spec KIND (none, lookup, model or auto: lookup and -md, lengths adaptive),
 * --draft-sample (the assistant's drafts sampled and judged by rejection sampling). */
typedef struct cli_draft {
    long n_draft;                   /* --draft N; -1: not given */
    const char *spec;               /* --spec KIND; NULL: from --draft and -md */
    const char *trace_path;         /* --spec-trace FILE (run): each forward's drafted and kept counts */
    void *trace;                    /* FILE* open on trace_path */
    const char *cmd;                /* the command, for the trace's errors */
    bool trace_failed;              /* a write failed: the trace is removed at the end */
    float costs[HACHI_DRAFT_MAX + 1];   /* --spec-costs: forwards of 1, 2, ... rows (auto) */
    int n_costs;
    const char *md_path;            /* -md FILE */
    bool sample;                    /* --draft-sample */
    long self_budget;               /* --self-budget N: self-speculation's page-sparse budget; -1: not given */
    hachi_model *assistant;         /* -md, loaded by cli_draft_setup */
} cli_draft;
void cli_draft_init(cli_draft *d);
/* Consume argv[*i] (and its value) if it is a drafter flag: 1 consumed, 0 not ours, -1 bad value. */
int  cli_draft_parse(const char *cmd, cli_draft *d, int argc, char **argv, int *i);
/* The session's draft_budget: --self-budget (default 1024) with --spec self, --self-budget with
 * --spec auto; 0 otherwise. Before the session is created. */
void cli_draft_session(const cli_draft *d, hachi_session_params *sp);
/* Load -md (checked against the target m) and fill spp; false with the error printed. */
bool cli_draft_setup(const char *cmd, cli_draft *d, const hachi_model *m, hachi_spec_params *spp);
/* --spec-trace: after a step, the line "k r" (k drafted, r of them kept; "k r k" when the k drafts
 * took k self-speculative draft steps) when it ran a forward;
 * before: the stats before the step. A write error is printed once and the trace dropped. */
void cli_draft_trace(const char *cmd, cli_draft *d, const hachi_spec_stats *before, const hachi_spec_stats *after);
/* "draft: ..." lines of the stats (nothing without a drafter). */
void cli_draft_print(void *file /* FILE* */, const cli_draft *d, const hachi_spec_stats *ss, int n_gen);
/* false when the trace could not be written whole (it is removed then) */
bool cli_draft_free(cli_draft *d);
#define CLI_DRAFT_USAGE                                                                                  \
    "  --draft N   speculative decoding with up to N (1..15) drafted tokens per forward: prompt lookup\n"  \
    "              (the tokens after the latest earlier occurrence of the last 4, 3 or 2 tokens), or the\n" \
    "              -md drafter; the same output as without\n"                                             \
    "  -md FILE    draft with a Gemma 4 assistant (GGUF gemma4-assistant made for -m; --draft default 3)\n" \
    "  --spec-costs C1,C2,..  with --spec auto: the cost of a forward of 1, 2, ... rows (at least\n" \
    "              --draft + 1 values, any unit; hachi bench --spec-replay prints a model's) instead of\n" \
    "              measuring them while decoding\n"                                                      \
    "  --spec KIND none, lookup, model (-md), self or auto: self drafts with the model itself, its\n"      \
    "              full-attention layers reading --self-budget keys (page-sparse; pays at long contexts);\n" \
    "              auto: prompt lookup where it matches, else -md if given or self with --self-budget,\n" \
    "              each forward's draft length (up to --draft, default 4) chosen from the measured\n"      \
    "              forward costs and the running acceptance, none where drafting does not pay\n"        \
    "  --self-budget N  keys a self-speculative draft step attends on full-attention layers (a multiple\n" \
    "              of 16 from 48 to 16384; default 1024 with --spec self)\n"                           \
    "  --draft-sample   -md or --spec self at temperature > 0: sample the drafts, keep each with\n"     \
    "              probability min(1, p/q) (the output has plain decoding's distribution, not its tokens)\n"
/* run's and chat's (serve has no trace) */
#define CLI_DRAFT_TRACE_USAGE \
    "  --spec-trace FILE  write each forward's drafted and kept token counts (hachi bench --spec-replay)\n"

/* hachi bench --spec-replay (tools/bench_replay.c): a speculative run's accept/reject trace
 * (--spec-trace) replayed through another model's forwards beside plain decoding. */
typedef struct replay_trace {
    const char *path;
    int n;                  /* forwards */
    uint8_t (*kr)[3];       /* [n] drafted, kept, draft steps (self-speculation's: as many as drafted) */
    int draft_steps;        /* of all forwards */
} replay_trace;

typedef struct replay_result {
    int forwards, draft_forwards, drafted, kept, tokens;   /* of the trace */
    double spec_ms, plain_ms;   /* the replayed forwards; plain decoding of as many tokens */
    double median_ratio;        /* of plain / speculative time per segment */
} replay_result;

/* Parse a trace ("drafted kept [draft_steps]" per line, '#' comments); false with the error printed. */
bool replay_load(const char *cmd, const char *path, replay_trace *t);
void replay_free(replay_trace *t);
/* Positions a replay of t takes past the session's position (both arms and the warm-up). */
int replay_positions(const replay_trace *t);
/* Replay t from the session's position (replay_positions further on at most); false with
 * the error printed. A trace with draft steps needs a session with a draft_budget. */
bool replay_run(const char *cmd, hachi_session *s, const replay_trace *t, uint64_t seed, replay_result *out);
void replay_print(const replay_trace *t, int depth, const replay_result *r);
/* What hachi bench's measurements share: n pseudo-random token ids in [4, n_vocab) (never
 * BOS/EOS/PAD on Gemma vocabularies) from the xorshift state x; the median of v[0..n) (sorts v). */
/* hachi bench --spec TEXT (tools/bench_spec.c): every drafter end to end on workloads made from
 * TEXT (quote, doc, free) at each depth, beside plain decoding in the same run. */
#define SPEC_BENCH_REPS_MAX 32
typedef struct spec_bench_opts {
    const char *text_path;
    const hachi_model *assistant;   /* -md; NULL: no assistant rows */
    int32_t self_budget;            /* self-speculation's draft budget; 0: no self rows */
    long n, reps, n_draft;          /* tokens a run, runs, drafts (-1: 4 lookup and auto, 3 model and self) */
    const int *depths;
    int n_depths;
    hachi_session_params sp;        /* threads, batch, KV type ... (the context is set per run) */
} spec_bench_opts;
bool spec_bench_run(const char *cmd, const hachi_model *m, const spec_bench_opts *o);
/* The expected speed-up table from verify costs ms[i] of forwards of rows[i] rows (rows[0] = 1). */
void spec_expected(const int *rows, const double *ms, int n, int max_draft);

void bench_tokens(int32_t *t, int n, int32_t n_vocab, uint64_t *x);
double bench_median(double *v, int n);

/* The mode flags every model command takes (cli_opts_parse), for its --help. */
#define CLI_MODE_USAGE                                                                                   \
    "  mode flags (dense f16 is the default; the lossy ones are measured against it on gemma4-micro\n"  \
    "  in bench/RESULTS.md):\n"                                                                          \
    "  --kv-type f16|f32|int8   K/V storage: f16; f32 (exact checks, twice the bytes); int8 (half the\n" \
    "              bytes, lossy: passes the quality gate, KL 5e-5, top token 99.5 percent the same)\n"           \
    "  --sparse B  page-sparse attention on the full-attention layers, B keys a query attends (lossy:\n" \
    "              fails the gate: top token under 99 percent the same at B 256, 1024; B 256 keeps\n"        \
    "              29 of 60 passkeys at 8K on repetitive filler)\n"                                          \
    "  --heads FILE   streaming heads classified by hachi heads, sink + window only (lossy: fails\n"    \
    "              the gate with gemma4-micro's classification: top token under 99 percent the same)\n"

/* Quality modes. A mode is the session params the shared flags built (--kv-type, and the
 * lossy attention flags as they come); the quality harness (passkey, perplexity
 * --kl-divergence) compares it with its dense baseline in the same process. */
/* The baseline of a mode: the library's defaults (dense attention, f16 K/V; a new mode field
 * defaults to the exact path) with the mode's fields that do not change the outputs: context,
 * threads, batch, profile, progress. */
hachi_session_params cli_dense_params(const hachi_session_params *mode);
/* The mode's output-changing fields in words ("kv f16"); buf of cap bytes, returned. */
const char *cli_mode_name(const hachi_session_params *p, char *buf, size_t cap);

/* Passkey prompts (tools/passkey.c; the format of ../shared/models/README.md), used by
 * hachi passkey and hachi heads. */
#define PK_GEN 8          /* greedy tokens per answer */
#define PK_MAX_LIST 32    /* lengths, depths */
/* One prompt on one session. */
typedef struct pk_answer {
    int32_t toks[PK_GEN];
    char text[PK_GEN * 16 + 1];
    bool correct;
    double margin;
} pk_answer;

/* What prompts are cut from. */
typedef struct pk_source {
    const hachi_model *m;
    int32_t *filler;          /* the filler file's tokens */
    int32_t n_filler;
    int32_t *question;              /* "What is the pass key? The pass key is" */
    int32_t n_question;
    const char *path;               /* the filler file, for errors */
} pk_source;

/* One prompt's facts (its ids are written apart). */
typedef struct pk_prompt {
    long key;
    int offset;                     /* of its filler run in the filler's tokens */
    int needle_pos;                 /* index of the needle's first token in the prompt */
    int32_t lead[8];                /* the answer's tokens before the key's first digit */
    int n_lead;
    int32_t target;                 /* the token holding the key's first digit */
    int32_t answer[8];              /* the key's tokens as the prompt continues ("▁" "6" "7" ...) */
    int n_answer;
} pk_prompt;


/* Reads and tokenizes the filler and the question; false with an error printed. */
bool pk_source_init(const char *cmd, const hachi_model *m, const char *filler_path, pk_source *src);
void pk_source_free(pk_source *src);
/* Text -> ids, no BOS, control-token text kept as text; NULL on failure (malloc'd). */
int32_t *pk_tokens_of(const hachi_model *m, const char *text, size_t len, int32_t *n);
/* Comma-separated list of at most PK_MAX_LIST numbers within [lo, hi]; the count, or -1 (error printed). */
int pk_parse_list(const char *cmd, const char *flag, const char *v, double lo, double hi, bool integer, double *out);
/* Prompt i at (len, depth) into ids[0..len); false with an error printed when it cannot be made. */
bool pk_build_prompt(const char *cmd, const pk_source *src, int len, double depth, uint64_t seed, int i,
                     int32_t *ids, pk_prompt *pr);
/* The answer to the prompt ids[0..n) on s, from position 0: its margin (teacher-forcing the
 * answer's tokens before the key's first digit, then rewinding them), then 8 greedy tokens;
 * lg (n_vocab floats) receives the logits after the prompt. */
hachi_status pk_answer_prompt(hachi_session *s, const hachi_model *m, const int32_t *ids, int n, const pk_prompt *pr,
                              float *lg, pk_answer *a);

/* ---- hachi serve: the OpenAI request bodies and response texts (tools/serve_api.c, cJSON) ----
 * The HTTP side, slots and generation are tools/cmd_serve.c. */
#define SERVE_MAX_STOP 4            /* stop sequences a request may give (OpenAI's limit) */
#define SERVE_MAX_STOP_LEN 256      /* bytes of one stop sequence */
#define SERVE_TOOLS_MAX 128         /* functions a request may declare (OpenAI's limit) */

/* One completion request, as parsed and checked. */
typedef struct serve_req {
    bool chat;                      /* /v1/chat/completions (else /v1/completions) */
    char *prompt;                   /* the text to tokenize: chat messages in the model's format (malloc'd) */
    size_t *plain;                  /* chat: [n_plain][2] the messages' own text in prompt (offset, length),
                                       where a control token's text stays text (malloc'd) */
    int n_plain;
    bool add_bos;                   /* completions: BOS before the prompt (a chat prompt carries its own) */
    int32_t *ids;                   /* completions: the prompt as token ids (malloc'd; prompt is then "") */
    int n_ids;
    bool echo;                      /* completions: the prompt comes back before the reply (its tokens' entries too) */
    bool continues;                 /* chat: the last message is the assistant's, which the reply continues */
    long max_tokens;                /* -1: until the context is full */
    struct {                        /* the sampling fields given (NAN: the server's default) */
        double temperature, top_p, top_k, min_p, repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty;
    } smp;
    long long seed;                 /* -1: none given */
    int32_t *bias_ids;              /* logit_bias: [n_bias] tokens and their biases (malloc'd) */
    float *bias;
    int n_bias;
    char *stop[SERVE_MAX_STOP];     /* malloc'd, non-empty */
    int n_stop;
    bool stream, include_usage;
    bool cache_prompt;              /* llama.cpp's field (default true): false prefills the whole prompt */
    bool think;                     /* chat_template_kwargs.enable_thinking: Gemma 4's thinking on */
    int top_logprobs;               /* logprobs: -1 none, else the alternatives a token (chat's top_logprobs, a
                                       completion's logprobs: 0..20) */
    size_t forced;                  /* chat: bytes at the prompt's end that begin the reply (tool_choice: a call) */
    struct json_schema *schema;     /* response_format json_object or json_schema: the reply is held to it */
} serve_req;

/* Parses and checks a request body of len bytes (not NUL-terminated) for chat (else a
 * completion) of model m. false: err (cap bytes) says what is wrong, naming the field. */
bool serve_parse(const char *body, size_t len, bool chat, const hachi_model *m, serve_req *rq, char *err, size_t cap);
void serve_req_free(serve_req *rq);

/* Appends s[0..n) to buf as the inside of a JSON string (quotes not added); returns the
 * bytes written, or 0 when it does not fit cap (6 bytes per input byte always fit). */
size_t serve_json_escape(char *buf, size_t cap, const char *s, size_t n);
/* s[0..n) as UTF-8 into out (at least 3n bytes), as the detokenizer writes text: each maximal
 * subpart that is not a character as one U+FFFD; a character cut short at the end left out unless
 * final (its bytes: *kept). Returns the bytes written. */
size_t serve_utf8_clean(const char *s, size_t n, bool final, char *out, size_t *kept);
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
    const char *reasoning;          /* a chat reply's thought (reasoning_content; len 0: none) */
    size_t reasoning_len;
    const char *tool_calls;         /* a chat reply's tool calls: a JSON array (serve_tool_calls); NULL: none */
    const char *logprobs;           /* with top_logprobs >= 0: the tokens' entries (serve_logprob_entry), comma-joined:
                                       the reply's, or in a stream those that go with the chunk */
    size_t logprobs_len;
} serve_result;
/* The chat.completion or text_completion object (malloc'd). */
char *serve_result_json(const serve_req *rq, const serve_result *r);
/* One SSE event "data: {...}\n\n" of a stream into buf (cap bytes): a delta of text[0..len)
 * (first: the chat role comes with it), the last chunk (finish set), or the usage chunk
 * (usage). Returns the bytes written, 0 when it does not fit. */
size_t serve_chunk(char *buf, size_t cap, const serve_req *rq, const serve_result *r, const char *text, size_t len,
                   bool first, const char *finish, bool usage);
/* Gemma 4's tool calls of a reply: calls[0..len) holds each call's text as the detokenizer gave it
 * ("call:NAME{ARGS}", ARGS in Gemma 4's syntax with <|"|> quotes), each begun by SERVE_CALL_SEP.
 * Returns OpenAI's tool_calls array ({"id": id_prefix + index, "type": "function", "function":
 * {"name", "arguments": the arguments as a JSON string}}) as JSON text (malloc'd; NULL: no call
 * parsed); the calls that do not parse, as they were written, into *rest (malloc'd, *rest_len
 * bytes; NULL when all parse). */
#define SERVE_CALL_SEP '\x1e'
char *serve_tool_calls(const char *calls, size_t len, const char *id_prefix, char **rest, size_t *rest_len);
/* A chat stream's delta of the tool calls (a serve_tool_calls array, each with its index); 0 when it does not fit. */
size_t serve_chunk_tool_calls(char *buf, size_t cap, const serve_req *rq, const serve_result *r);
/* A chat stream's delta of the reply's thought: {"reasoning_content": text[0..len)}; 0 when it does not fit. */
size_t serve_chunk_reasoning(char *buf, size_t cap, const serve_req *rq, const serve_result *r, const char *text,
                             size_t len);
/* One token's entry of a chat reply's logprobs.content, as OpenAI writes it: {"token", "logprob",
 * "bytes", "top_logprobs": [the top likeliest tokens' {"token", "logprob", "bytes"}]}, from the
 * logits lg[n_vocab] token tok was drawn from (their log-softmax: the model's distribution, before
 * temperature and the rest; -9999 where a probability is 0, as OpenAI writes it). A token's text
 * that is not UTF-8 has U+FFFD in "token" and its own bytes in "bytes"; strip SERVE_STRIP_SPACE: the
 * token's leading space left out of both, and of its alternatives' (the detokenizer dropped it from
 * the reply's first piece, and would have dropped theirs),
 * SERVE_STRIP_TEXT: its text (a BOS the server added, not in the echoed prompt).
 * offset >= 0: a text completion's entry, with "text_offset" (the characters of the text before the
 * token), written in OpenAI's completion form by the responses; lg NULL: a prompt's first token,
 * "logprob" and "top_logprobs" null. Written into buf (cap bytes, NUL-terminated); returns its
 * length, 0 when it does not fit. */
size_t serve_logprob_entry(char *buf, size_t cap, const hachi_model *m, const float *lg, int32_t tok, int top,
                           int strip, long offset);
enum { SERVE_STRIP_NONE, SERVE_STRIP_SPACE, SERVE_STRIP_TEXT };
/* The most bytes serve_logprob_entry writes for top alternatives, for a vocabulary whose tokens'
 * texts are at most piece bytes long */
#define SERVE_LOGPROB_MAX 20
static inline size_t serve_logprob_entry_max(size_t piece, int top) { return (size_t)(top + 1) * (96 + 10 * piece) + 64; }
/* ---- JSON Schema's pattern (tools/json_pattern.c) ----
 * ECMA-262's regular expressions without backreferences, lookaround, word boundaries or \p, over
 * code points; matched anywhere in the string unless anchored by ^ and $ (as RegExp.test). */
#define JSON_PAT_POS 256            /* a compiled pattern's positions (its characters and classes, repeats
                                       counted out, and the start) */
#define JSON_PAT_LEN 1024           /* the largest minLength / maxLength a string with a pattern may have */
#define JSON_PATS_MAX 64            /* patterns and formats in one schema (each ~40 KB compiled) */
typedef struct json_pattern json_pattern;
typedef struct json_pset { uint64_t w[JSON_PAT_POS / 64]; } json_pset;   /* a state: a set of positions */
/* NULL and err (what is wrong with it) where it is malformed, beyond the subset or too large */
json_pattern *json_pattern_compile(const char *re, char *err, size_t cap);
void json_pattern_free(json_pattern *p);
void json_pattern_start(json_pset *s);   /* the empty text's state */
/* Whether from state s some text of k more code points, lo <= k <= hi (hi < 0: no most), matches */
bool json_pattern_can_end(const json_pattern *p, const json_pset *s, int lo, int hi);
/* Whether some code point in [lo, hi] (no surrogate) can come next, with a match of len_lo..len_hi more
 * after it (*hint: as json_pattern_step's) */
bool json_pattern_can_take(const json_pattern *p, const json_pset *s, int *hint, uint32_t lo, uint32_t hi, int len_lo,
                           int len_hi);
/* Code point c next (false, s unchanged, where it cannot, or no match of len_lo..len_hi more could follow).
 * *hint: the pattern's cached state of s (-1: none; checked before it is used), kept with s. The
 * pattern's cache changes: one thread at a time. */
bool json_pattern_step(const json_pattern *p, json_pset *s, int *hint, uint32_t c, int len_lo, int len_hi);

/* ---- JSON as a sampling constraint (tools/json_grammar.c): response_format ----
 * A schema is compiled into nodes; a byte-level pushdown automaton walks JSON text against it. */
#define JSON_DEPTH_MAX 32           /* nesting of objects and arrays */
#define JSON_WS_MAX 20              /* spaces and tabs between two of JSON's tokens (and one newline) */
#define JSON_LITS_MAX 64            /* values of an enum, properties of an object */
#define JSON_NODES_MAX 4096         /* nodes of a compiled schema */
#define JSON_DIGITS 16              /* digits of a number's integer part, and of its fraction */
#define JSON_EXP_DIGITS 3           /* of its exponent */
enum { JT_OBJ = 1, JT_ARR = 2, JT_STR = 4, JT_NUM = 8, JT_INT = 16, JT_BOOL = 32, JT_NULL = 64, JT_ANY = 127 };
enum { JB_LEN = 1, JB_ITEMS = 2, JB_RANGE = 4, JB_PROPS = 8 };   /* json_node.bounds: which bounds it has */
#define JSON_COUNT_MAX 30000        /* the largest minLength / maxLength / minItems / maxItems held (a larger
                                       maximum is none; a larger minimum is refused) */
#define JSON_UNIT ((__int128)10000000000000000)   /* 10^16: a number's value in units of 10^-16 (its digits) */
typedef struct json_node {
    int types;                      /* JT_*: the types its value may have; 0: one of the literals */
    int obj, arr;                   /* the nodes whose properties / items its objects / arrays have (0: itself;
                                       an anyOf's: its alternatives') */
    int items;                      /* JT_ARR: the node of its items (those after its prefix) */
    int prefix, n_prefix;           /* JT_ARR: its first items' nodes, prefix[prefix ..] (a tuple's: prefixItems) */
    int add;                        /* JT_OBJ without declared properties: the node of its members' values */
    int key;                        /* and the string node its members' keys are held to (0: any string) */
    int props, n_props;             /* JT_OBJ: its properties, in order, props[props ..] (n_props < 0: none declared) */
    int lits, n_lits;               /* an enum or a const: its values' JSON texts lits[lits ..] */
    int bounds;                     /* JB_*; an anyOf's: its alternatives' (arrays': on their structure's node) */
    int min_len, max_len;           /* JB_LEN, JT_STR: its characters (code points; an escape one) */
    int min_items, max_items;       /* JB_ITEMS, JT_ARR: its items */
    int min_props, max_props;       /* JB_PROPS, JT_OBJ without declared properties: its members */
    __int128 lo, hi;                /* JB_RANGE, JT_NUM / JT_INT: its value in [lo, hi], in JSON_UNITs (an integer
                                       node's bounds whole numbers); written without an exponent */
    int64_t mult;                   /* JB_RANGE: a multiple of it, an integer (0: any) */
    bool unique;                    /* JT_ARR: its items unique (items an enum of scalars, or booleans) */
    int pattern;                    /* JT_STR: its strings match pats[pattern - 1] (0: none) */
} json_node;
typedef struct json_prop { int node; bool required; } json_prop;   /* its key: the object's n-th key literal */
/* Gemma 4's tool calls (g4): call:NAME{ARGS} with ARGS in its syntax (bare keys, strings between
 * <|"|> tokens, no white space), each between <|tool_call> and <tool_call|> */
#define JSON_G4_QUOTE '\x01'        /* the texts the g4 vocabulary gives <|"|>, <tool_call|> and <|tool_call> */
#define JSON_G4_CLOSE '\x02'
#define JSON_G4_OPEN '\x03'
enum { JSON_CALLS_AUTO = -1, JSON_CALLS_REQUIRED = -2 };
typedef struct json_schema {
    json_node *nodes;               /* [0]: any JSON value; [1]: any JSON object; root: where a reply begins */
    int n_nodes, root;
    bool g4;                        /* Gemma 4's call syntax: the nodes are the functions' arguments */
    int calls;                      /* g4: where a reply begins: JSON_CALLS_AUTO (text until <|tool_call>),
                                       JSON_CALLS_REQUIRED (after "call:": a function's name), or a function's
                                       index (inside its arguments, after "call:NAME{") */
    bool one_call;                  /* g4: no call after the first (parallel_tool_calls false) */
    int n_funcs, func_lits;         /* g4: the functions' "NAME{" literals lits[func_lits ..] */
    int *func_nodes;                /* g4: [n_funcs] their arguments' nodes */
    int *prefix;                    /* [n_prefix] arrays' first items' nodes */
    int n_prefix;
    json_prop *props;               /* an object's properties' keys are lits[keys + i], quoted */
    int *keys;                      /* [n_props]: the literal of property i's key */
    int n_props;
    char **lits;                    /* JSON texts: true, false, null, then the schema's */
    int n_lits;
    struct json_pattern **pats;     /* [n_pats] the strings' patterns (and formats) */
    int n_pats;
    int *need;                      /* [2 n_nodes]: the least nesting a value of each node needs, then an object
                                       of its structure (json_schema_finish) */
} json_schema;
/* The schema of any JSON object (json_object): NULL without memory. json_schema_free frees either. */
json_schema *json_schema_object(void);
/* The schema of Gemma 4's calls (g4 set, calls and one_call as given; the functions added) */
json_schema *json_schema_calls(int calls, bool one_call);
/* A function of a calls schema: "NAME{" and its arguments' node (an object's) */
bool json_schema_add_func(json_schema *js, const char *name, int args);
/* After the nodes: their nesting needs (false without memory). Where a value cannot be whole
 * within JSON_DEPTH_MAX, the automaton offers no way into it. */
bool json_schema_finish(json_schema *js);
void json_schema_free(json_schema *js);
/* Builders (the compiler in serve_api.c): a new node (its index, -1 without memory or past
 * JSON_NODES_MAX), a literal, a
 * property of the object node obj (its key as JSON text) */
int json_schema_add_node(json_schema *js, json_node n);
int json_schema_add_lit(json_schema *js, const char *text);
bool json_schema_add_prop(json_schema *js, int obj, const char *key_json, int node, bool required);
/* The array node arr's first n items' nodes (a tuple's), nodes[0 .. n) */
bool json_schema_add_prefix(json_schema *js, int arr, const int *nodes, int n);
/* A pattern the schema then owns (freed with it, or here where it cannot be added): json_node.pattern's
 * number for it (0: out of memory) */
int json_schema_add_pattern(json_schema *js, json_pattern *p);
/* Room in *p (an array realloc'd as it grows) for element n of size bytes: 8 at first, then
 * doubled at each power of two; false without memory */
bool json_grow(void **p, int n, size_t size);
/* c's value as a hex digit, -1 where it is none */
static inline int json_hex_digit(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}
/* Whether [lo, hi] holds a multiple of m (m 0: whether it is not empty) */
bool json_holds_multiple(__int128 lo, __int128 hi, __int128 m);

/* an open container; idx: an object's next property, a bounded array's items after the one being read */
typedef struct json_frame {
    short node, idx;
    char kind;
    uint64_t used;                  /* an array of unique literals: those its items took (bit i: lits[base + i]) */
} json_frame;
typedef struct json_state {
    const json_schema *js;
    int mode, depth, n, ws, nl, vnode, prop, pos, done_lit, lit_base, lit_kind;
    bool key, integer, neg;         /* neg: a bounded number's '-' */
    int len;                        /* a bounded string's characters so far (to its largest bound) */
    int u8;                         /* a string's UTF-8 character: continuation bytes still to come, */
    unsigned char u8lo, u8hi;       /* the next one's range */
    uint16_t cu;                    /* a string's u escape: its code unit so far */
    bool hs;                        /* the last character an escaped high surrogate (a low one next pairs with it) */
    uint32_t cp;                    /* a string with a pattern: its UTF-8 character's bits so far */
    json_pset ps;                   /* its pattern's state */
    int ps_hint;                    /* json_pattern_step's hint (no part of the state) */
    int64_t iv, fv;                 /* a bounded number's integer part, and its fraction's digits (n of them) */
    uint64_t cand;                  /* literal matching: the candidates lits[lit_base + i] still matching */
    json_frame stack[JSON_DEPTH_MAX];
} json_state;
void json_state_init(json_state *s, const json_schema *js);
/* Feeds n bytes; false once they cannot be the schema's JSON (the state then fails for good) */
bool json_state_feed(json_state *s, const char *p, size_t n);
bool json_state_done(const json_state *s);   /* a whole value: the reply may end */
typedef struct json_vocab json_vocab;        /* a model's token texts, for the masks */
/* g4: Gemma 4's <|"|>, <tool_call|> and <|tool_call> as JSON_G4_QUOTE, JSON_G4_CLOSE, JSON_G4_OPEN
 * (a model without them: NULL) */
json_vocab *json_vocab_create(const hachi_model *m, bool g4);
void json_vocab_free(json_vocab *v);
#define JSON_MASK_CACHE 4           /* states whose masks a grammar keeps (a string's steps share one) */
typedef struct json_grammar {
    const json_vocab *v;
    json_state st;
    uint64_t *bits;                 /* [JSON_MASK_CACHE][words]: the tokens allowed after key[i] */
    json_state key[JSON_MASK_CACHE];
    int n_keys, next;
    json_state *level;              /* [the longest text + 1]: the mask's walk, its state after each byte of a text */
} json_grammar;
/* A grammar at the schema's start, its buffers allocated here (false: out of memory, none held) */
bool json_grammar_init(json_grammar *g, const json_vocab *v, const json_schema *js);
void json_grammar_reset(json_grammar *g);   /* back at the schema's start, its masks forgotten */
void json_grammar_free(json_grammar *g);
/* hachi_sampler_constraint's callbacks, ctx a json_grammar: the tokens that cannot come next
 * (their text breaks the schema's JSON, a control token, the end before the value is whole,
 * anything after it) masked; a token accepted */
void json_grammar_mask(void *ctx, float *logits, int32_t n_vocab);
void json_grammar_accept(void *ctx, int32_t token);
/* A JSON schema's text compiled (the subset response_format takes; {} any value); NULL and err
 * (naming what as the schema's root: 'what.properties.x') where it is no JSON, beyond the subset or
 * out of memory.
 * Only where the server is built (cJSON). */
json_schema *serve_schema_compile(const char *text, const char *what, char *err, size_t cap);

/* {"object":"list","data":[{"id":name,...}]} (malloc'd). */
char *serve_models_json(const char *name, long long created);
/* POST /tokenize (llama.cpp's): {"content": text, "add_special": false, "parse_special": true,
 * "with_pieces": false} -> {"tokens": [ids]}, with_pieces [{"id", "piece"}] (a piece that is not
 * UTF-8: its bytes as an array). POST /detokenize: {"tokens": [ids]} -> {"content": the text the
 * server writes of them in a reply: control tokens none, a text's first leading space dropped where
 * the vocabulary adds one}. Malloc'd; NULL and err (a 400's message) on a bad body. */
char *serve_tokenize(const hachi_model *m, const char *body, size_t len, char *err, size_t cap);
char *serve_detokenize(const hachi_model *m, const char *body, size_t len, char *err, size_t cap);

#endif
