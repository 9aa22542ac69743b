/* hachi serve: an OpenAI-compatible HTTP server on libmicrohttpd (one thread per connection).
 * POST /v1/chat/completions and /v1/completions (streaming as server-sent events too),
 * GET /v1/models, GET /health, llama.cpp's POST /tokenize and /detokenize; errors in OpenAI's
 * {"error":{...}} shape. The JSON is
 * tools/serve_api.c's (cJSON); this file owns the HTTP side, the slots and generation.
 *
 * Slots: --parallel N sessions, each planned once at start-up (its own hachi_session,
 * detokenizer and the tokens it holds). A request takes the free slot whose held tokens share
 * the longest prefix with its prompt, rewinds the slot there (or, past the rings' rewind
 * bound, restores the slot's newest ring checkpoint below it) and prefills only the rest; its
 * sampler and decode loop (hachi_spec) are made per request. When every slot is busy a
 * request waits in a queue of --queue places, past that it gets 503 with Retry-After. A
 * client that goes away (its socket closed: checked before every decode step, and a failed
 * write of a stream) ends its generation and frees the slot. */
#ifdef HACHI_NO_SERVE
#include "cli.h"
int cmd_serve(int argc, char **argv) {
    return cli_error("serve", "hachi was built without the server (libmicrohttpd/cJSON absent)");
}
#else
#include <microhttpd.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include "cli.h"

#define SERVE_MAX_BODY (4u << 20)    /* bytes of a request body (413 past it) */
/* Seconds a connection may stay idle (no request bytes, no response to send) before it is closed:
 * idle keep-alive connections count against the connection limit, so 64 of them held open lock
 * every client out for as long as this (it was 600 s). A request that waits for a slot or
 * generates does not idle (its thread is busy). */
#define SERVE_IDLE_S 10
#define SERVE_STREAM_BUF (64u << 10) /* a stream's pending events: a step's chunk fits many times */
#define SERVE_CHECKPOINTS 8          /* ring checkpoints a slot keeps */
#define SERVE_SCORE_ROWS 32          /* echo with logprobs: the prompt's rows prefilled at a time, logits kept */

typedef struct slot {
    int id;
    hachi_session *s;
    hachi_detok *dt;
    int32_t *held;                  /* [n_ctx + HACHI_SPEC_STEP_MAX] the tokens of the session's positions
                                       (then those sampled past them in the last request) */
    int n_held;                     /* = hachi_session_pos(s) between requests */
    hachi_checkpoint *cp[SERVE_CHECKPOINTS];   /* ring checkpoints at positions of held (pos -1: empty) */
    uint64_t cp_saved[SERVE_CHECKPOINTS];       /* when each was saved */
    uint64_t n_saves;
    bool busy;
    uint64_t used;                  /* when it was last taken (least recently used wins ties) */
    struct MHD_Connection *conn;    /* of the request whose prompt it prefills (NULL: none) */
    atomic_int *stop;               /* the server's */
    cli_progress pr;                /* its session's progress callback: a long prefill's lines, and
                                       it stops when the client goes or the server stops */
    char label[32];
} slot;

typedef struct server {
    hachi_model *m;
    char name[128];                 /* the model's id in responses: the file name, JSON-safe */
    hachi_sampler_params smp;       /* the sampling flags; a request's fields override */
    bool seed_given;                /* --seed: the seed of requests without one (else a fresh one each) */
    const cli_opts *o;              /* the flags (--logit-bias: of requests without logit_bias) */
    json_vocab *jv, *jv4;           /* the token texts of response_format's masks; of Gemma 4's calls' (NULL: none) */
    hachi_spec_params spp;
    slot *slots;
    int n_slots, queue_max, waiting;
    long n_predict;                 /* -n: tokens a request without max_tokens may generate; 0: the context */
    size_t max_piece;               /* the longest token text, bytes (log-probability entries' size) */
    uint64_t clock;
    pthread_mutex_t mu;             /* slots' busy flags, waiting, clock */
    pthread_cond_t freed;
    const char *api_key;
    long long started;
    atomic_int stop;                /* shutting down: generations end */
    atomic_long served, seq, ids;
    atomic_int live;                /* requests whose struct exists (headers seen, not yet freed) */
} server;

enum route { R_NONE, R_HEALTH, R_MODELS, R_CHAT, R_COMPLETIONS, R_TOKENIZE, R_DETOKENIZE };

/* A growing byte buffer (a failure to grow: oom, the generation ends) */
typedef struct { char *p; size_t len, cap; } text_acc;

/* One HTTP request; with a completion in progress, its generation state. Freed when both the
 * connection (request completed) and, for a stream, the response have let go of it. */
typedef struct request {
    server *srv;
    struct MHD_Connection *conn;
    atomic_int refs;
    enum route route;
    char *body;
    size_t len, cap;
    bool too_big;
    /* the completion */
    serve_req rq;
    bool parsed;
    slot *sl;
    hachi_sampler *smp;
    hachi_spec *sp;
    int32_t *prompt;
    int n_prompt, n_cached, n_gen, max_gen;
    int32_t n_forced;               /* the prompt's last tokens that begin the reply (tool_choice's call) */
    text_acc text;                  /* generated text (after echo's prompt); [0, sent) released to the client */
    size_t sent, gen_from;          /* ...; where the generated text begins (stop sequences are looked for there) */
    size_t cp_at;                   /* a completion's log-probabilities: text[0, cp_at) holds cp characters */
    long cp;
    int strip_at;                   /* echo: the prompt's token whose text lost its leading space (-1: none) */
    bool text_oom;                  /* the text could not grow: the generation ends there */
    text_acc think;                 /* a chat reply's thought (reasoning_content); [0, think_sent) sent */
    size_t think_sent;
    bool was_in_thought;
    int label;                      /* in a thought: bytes of its "thought" label matched; 7: its white space; 8: its text */
    text_acc calls;                 /* a chat reply's tool calls as written, each begun by SERVE_CALL_SEP */
    bool was_in_call, calls_done;
    char *tool_calls;               /* their JSON (serve_tool_calls); NULL: none */
    json_grammar jg;                /* response_format json_object: the sampler's constraint */
    text_acc lp;                    /* logprobs: the tokens' entries, comma-joined; [0, lp_sent) sent */
    size_t lp_sent, lp_max;         /* ...; the most bytes of one entry */
    size_t lp_base;                 /* lp.len before the generated tokens' entries (after echo's prompt's) */
    size_t *tok_at, *tok_lp;        /* [max_gen] where each generated token's text began (SIZE_MAX: it wrote
                                       none), and lp.len after its entry: what a stop sequence's cut drops */
    int lp_next;                    /* a stream's generated tokens whose entries are sent */
    const char *finish;             /* NULL while generating */
    bool role_sent, stream_end;
    char *out;                      /* [out_cap] stream events not yet handed to MHD (the last ones may grow it) */
    size_t out_len, out_off, out_cap;
    serve_result res;
    char id[48];
    double t0, t_event;             /* started; a stream's last event */
} request;

/* ---- slots ------------------------------------------------------------------------------------ */

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int c = 0;
    while (c < na && c < nb && a[c] == b[c]) c++;
    return c;
}

/* Whether the client of fd has closed its end (a read would return 0 or fail). */
static bool client_gone(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return true;
    char c;
    return recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

typedef enum { TAKE_OK, TAKE_BUSY, TAKE_GONE } take_result;

/* The checkpoint of sl at the highest position <= r, or -1. */
static int best_checkpoint(const slot *sl, int r) {
    int best = -1;
    for (int i = 0; i < SERVE_CHECKPOINTS; i++) {
        int p = hachi_checkpoint_pos(sl->cp[i]);
        if (p >= 0 && p <= r && (best < 0 || p > hachi_checkpoint_pos(sl->cp[best]))) best = i;
    }
    return best;
}

/* The position the slot can resume a prompt from: its common prefix with what the slot holds
 * (less the prompt's last token, evaluated for its logits) when a rewind reaches it (within
 * the rings' 16 spare slots, or anywhere on a model without rings), else its newest
 * checkpoint below that. */
static int resumable(const slot *sl, const int32_t *prompt, int n) {
    int r = CLI_MIN(common_prefix(sl->held, sl->n_held, prompt, n), n - 1);
    if (sl->n_held - r <= 16 || hachi_checkpoint_bytes(sl->cp[0]) == 0) return r;
    int k = best_checkpoint(sl, r);
    return k < 0 ? 0 : hachi_checkpoint_pos(sl->cp[k]);
}

/* The free slot that can resume the longest prefix of the prompt (waiting in the queue when
 * none is free); without reuse, the one that holds the least. */
static take_result slot_take(server *srv, request *q) {
    pthread_mutex_lock(&srv->mu);
    slot *best = NULL;
    if (atomic_load(&srv->stop)) { pthread_mutex_unlock(&srv->mu); return TAKE_GONE; }
    for (;;) {
        int best_c = INT_MIN;
        for (int i = 0; i < srv->n_slots; i++) {
            slot *sl = &srv->slots[i];
            if (sl->busy) continue;
            int c = q->rq.cache_prompt ? resumable(sl, q->prompt, q->n_prompt)
                                       : -common_prefix(sl->held, sl->n_held, q->prompt, q->n_prompt);
            if (!best || c > best_c || (c == best_c && sl->used < best->used)) { best = sl; best_c = c; }
        }
        if (best) break;
        if (srv->waiting >= srv->queue_max) { pthread_mutex_unlock(&srv->mu); return TAKE_BUSY; }
        srv->waiting++;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&srv->freed, &srv->mu, &ts);
        srv->waiting--;
        if (atomic_load(&srv->stop) || client_gone(q->conn)) { pthread_mutex_unlock(&srv->mu); return TAKE_GONE; }
    }
    best->busy = true;
    best->used = ++srv->clock;
    q->sl = best;
    pthread_mutex_unlock(&srv->mu);
    return TAKE_OK;
}

static void slot_give(server *srv, request *q) {
    if (!q->sl) return;
    pthread_mutex_lock(&srv->mu);
    q->sl->busy = false;
    q->sl = NULL;
    pthread_cond_broadcast(&srv->freed);
    pthread_mutex_unlock(&srv->mu);
}

/* ---- generation ---------------------------------------------------------------------------------- */

/* Puts the slot's session at the longest prefix of the prompt it can resume from: a rewind, or
 * the newest checkpoint at or below it; returns that position. Checkpoints past it are dropped
 * (the tokens after it change). */
static int slot_resume(slot *sl, const int32_t *prompt, int n, bool reuse) {
    int r = reuse ? CLI_MIN(common_prefix(sl->held, sl->n_held, prompt, n), n - 1) : 0;
    if (hachi_session_rewind(sl->s, r) != HACHI_OK) {
        int k = best_checkpoint(sl, r);
        if (k >= 0 && hachi_session_checkpoint_restore(sl->s, sl->cp[k]) == HACHI_OK) r = hachi_checkpoint_pos(sl->cp[k]);
        else {
            hachi_session_rewind(sl->s, 0);
            r = 0;
        }
    }
    for (int i = 0; i < SERVE_CHECKPOINTS; i++)
        if (hachi_checkpoint_pos(sl->cp[i]) > r) hachi_checkpoint_clear(sl->cp[i]);
    sl->n_held = r;
    return r;
}

/* A checkpoint of the session at its position, in place of the oldest (or an empty) one. */
static void slot_checkpoint(slot *sl) {
    int pos = hachi_session_pos(sl->s), k = 0;
    for (int i = 0; i < SERVE_CHECKPOINTS; i++) {
        int p = hachi_checkpoint_pos(sl->cp[i]);
        if (p == pos) return;
        if (p < 0) { k = i; break; }
        if (sl->cp_saved[i] < sl->cp_saved[k]) k = i;
    }
    if (hachi_session_checkpoint_save(sl->s, sl->cp[k]) == HACHI_OK) sl->cp_saved[k] = ++sl->n_saves;
}

/* A slot's prefill stops (after its chunk) once its client has gone or the server stops. */
static bool slot_stop(void *ctx) {
    const slot *sl = ctx;
    return atomic_load(sl->stop) || (sl->conn && client_gone(sl->conn));
}

static void out_add(request *q, const char *s, size_t n);
static void echo_prompt(request *q, long *offs);
static hachi_status prompt_entries(request *q, const long *offs);

/* Sampler and decode loop of the request, the slot resumed and the rest of the prompt
 * prefilled (a checkpoint where the reuse began and one before the prompt's last token). */
static hachi_status gen_begin(server *srv, request *q) {
    slot *sl = q->sl;
    const serve_req *rq = &q->rq;
    hachi_sampler_params p = srv->smp;
    if (!isnan(rq->smp.temperature)) p.temp = (float)rq->smp.temperature;
    if (!isnan(rq->smp.top_p)) p.top_p = (float)CLI_MAX(rq->smp.top_p, CLI_TOP_P_MIN);
    if (!isnan(rq->smp.top_k)) p.top_k = (int32_t)CLI_MAX(rq->smp.top_k, 0);
    if (!isnan(rq->smp.min_p)) p.min_p = (float)rq->smp.min_p;
    if (!isnan(rq->smp.repeat_penalty)) p.repeat_penalty = (float)rq->smp.repeat_penalty;
    if (!isnan(rq->smp.repeat_last_n))
        p.repeat_last_n = rq->smp.repeat_last_n < 0 ? hachi_session_n_ctx(sl->s) : (int32_t)rq->smp.repeat_last_n;
    if (!isnan(rq->smp.presence_penalty)) p.presence_penalty = (float)rq->smp.presence_penalty;
    if (!isnan(rq->smp.frequency_penalty)) p.frequency_penalty = (float)rq->smp.frequency_penalty;
    if (rq->seed >= 0) p.seed = (uint64_t)rq->seed;
    else if (!srv->seed_given) p.seed = (uint64_t)time(NULL) * 1000003u + (uint64_t)atomic_fetch_add(&srv->seq, 1);
    hachi_status st = hachi_sampler_create(&p, hachi_model_n_vocab(srv->m), &q->smp);
    if (!st && (rq->bias_ids || srv->o->n_bias))   /* a request's logit_bias (even {}) in place of --logit-bias */
        st = rq->bias_ids ? hachi_sampler_set_logit_bias(q->smp, rq->bias_ids, rq->bias, rq->n_bias)
                        : hachi_sampler_set_logit_bias(q->smp, srv->o->bias_ids, srv->o->bias, srv->o->n_bias);
    if (!st && rq->schema && (!rq->schema->g4 || srv->jv4)) {
        if (!json_grammar_init(&q->jg, rq->schema->g4 ? srv->jv4 : srv->jv, rq->schema)) return HACHI_ERR_NOMEM;
        hachi_sampler_set_constraint(q->smp, &(hachi_sampler_constraint){json_grammar_mask, json_grammar_accept, &q->jg});
    }
    if (!st) st = hachi_spec_create(srv->m, sl->s, q->smp, &srv->spp, &q->sp);
    if (st) return st;
    const int n = q->n_prompt;
    const bool score = rq->echo && rq->top_logprobs >= 0;   /* the prompt's entries: every row's logits, from 0 */
    int r = slot_resume(sl, q->prompt, n, rq->cache_prompt && !score);
    q->n_cached = r;
    memcpy(sl->held, q->prompt, sizeof(int32_t) * (size_t)n);
    if (r > 0) slot_checkpoint(sl);
    long *offs = score ? malloc(sizeof(long) * (size_t)n) : NULL;
    if (score && !offs) return HACHI_ERR_NOMEM;
    if (rq->echo) echo_prompt(q, offs);
    q->gen_from = q->text.len;
    sl->conn = q->conn;
    st = score ? prompt_entries(q, offs) : n - 1 > r ? hachi_session_eval(sl->s, q->prompt + r, n - 1 - r, NULL) : HACHI_OK;
    sl->conn = NULL;
    free(offs);
    q->lp_base = q->lp.len;   /* (after echo's entries) */
    if (st) return st;   /* stopped (HACHI_ERR_ABORTED): gen_end keeps what it prefilled */
    if (n - 1 > r) slot_checkpoint(sl);
    if ((st = hachi_session_eval(sl->s, q->prompt + n - 1, 1, NULL))) return st;
    sl->n_held = n;
    if ((st = hachi_spec_feed(q->sp, q->prompt, n))) return st;
    hachi_detok_reset(sl->dt, rq->chat && !rq->continues);   /* a reply's first piece loses its space */
    for (int i = n - q->n_forced; i < n; i++) {   /* a forced start is the reply's text (a call's, its section) */
        char buf[HACHI_DETOK_MAX];
        out_add(q, buf, (size_t)hachi_detok_push(sl->dt, q->prompt[i], buf, sizeof buf));
    }
    return HACHI_OK;
}

/* The first stop sequence in text[from..) (not before the generated text), its start in *at. */
static bool find_stop(const request *q, size_t from, size_t *at) {
    bool hit = false;
    from = CLI_MAX(from, q->gen_from);
    for (int i = 0; i < q->rq.n_stop; i++) {
        const char *s = q->rq.stop[i];
        const char *f = memmem(q->text.p + from, q->text.len - from, s, strlen(s));
        if (f && (!hit || (size_t)(f - q->text.p) < *at)) { *at = (size_t)(f - q->text.p); hit = true; }
    }
    return hit;
}

/* Bytes at the end of the text that may begin a stop sequence (held back). */
static size_t stop_hold(const request *q) {
    size_t hold = 0;
    for (int i = 0; i < q->rq.n_stop; i++) {
        const char *s = q->rq.stop[i];
        size_t ls = strlen(s);
        for (size_t k = CLI_MIN(ls - 1, q->text.len - CLI_MAX(q->sent, q->gen_from)); k > hold; k--)
            if (!memcmp(q->text.p + q->text.len - k, s, k)) { hold = k; break; }
    }
    return hold;
}

/* Room for n more bytes in a (it doubles; a failure ends the generation: text_oom) */
static bool acc_reserve(request *q, text_acc *a, size_t n) {
    if (a->len + n <= a->cap) return true;
    char *t = realloc(a->p, 2 * (a->len + n));
    if (!t) { q->text_oom = true; return false; }
    a->p = t;
    a->cap = 2 * (a->len + n);
    return true;
}

static void acc_add(request *q, text_acc *a, const char *s, size_t n) {
    if (!n || !acc_reserve(q, a, n)) return;
    memcpy(a->p + a->len, s, n);
    a->len += n;
}

static void text_add(request *q, const char *s, size_t n) { acc_add(q, &q->text, s, n); }

/* The characters of s[0..n): its bytes that are no UTF-8 continuation byte */
static long utf8_chars(const char *s, size_t n) {
    long c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* The characters of the text so far (a completion's next text_offset) */
static long text_chars(request *q) {
    if (q->text.len > q->cp_at) {   /* (a stop's cut may leave the text shorter) */
        q->cp += utf8_chars(q->text.p + q->cp_at, q->text.len - q->cp_at);
        q->cp_at = q->text.len;
    }
    return q->cp;
}

/* Token tok's log-probability entry, drawn from lg (NULL: a prompt's first token), into q->lp;
 * offset: its text_offset (-1 for a chat's entry) */
static void lp_add(request *q, const float *lg, int32_t tok, int strip, long offset) {
    if (!acc_reserve(q, &q->lp, q->lp_max + 1)) return;
    const size_t at = q->lp.len + (q->lp.len > 0);
    const size_t w = serve_logprob_entry(q->lp.p + at, q->lp.cap - at, q->srv->m, lg, tok, q->rq.top_logprobs,
                                         strip, offset);
    if (w && q->lp.len) q->lp.p[q->lp.len] = ',';
    if (w) q->lp.len = at + w;
}

/* A chat reply's thought text, without the "thought" label and the white space after it that
 * open it (as llama.cpp's Gemma 4 parser takes it); a label that turns out otherwise is kept */
static void think_add(request *q, const char *s, size_t n) {
    static const char label[] = "thought";
    if (!acc_reserve(q, &q->think, n + sizeof label)) return;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (q->label < 7 && c == label[q->label]) { q->label++; continue; }
        if (q->label < 7) {   /* not the label: what matched of it is text */
            memcpy(q->think.p + q->think.len, label, (size_t)q->label);
            q->think.len += (size_t)q->label;
            q->label = 8;
        } else if (q->label == 7) {
            if (strchr(" \t\r\n", c)) continue;
            q->label = 8;
        }
        q->think.p[q->think.len++] = c;
    }
}

/* Text the detokenizer gave: a chat reply's thought and tool calls apart (a new thought opens
 * with its label, a new call with its separator) */
static void out_add(request *q, const char *s, size_t n) {
    const bool in = q->rq.chat && hachi_detok_in_thought(q->sl->dt);
    const bool call = q->rq.chat && hachi_detok_in_tool_call(q->sl->dt);
    if (in && !q->was_in_thought) q->label = 0;
    if (call && !q->was_in_call) acc_add(q, &q->calls, &(char){SERVE_CALL_SEP}, 1);
    q->was_in_thought = in;
    q->was_in_call = call;
    if (in) think_add(q, s, n);
    else if (call) acc_add(q, &q->calls, s, n);
    else text_add(q, s, n);
}

/* The reply's tool calls as OpenAI's (once, at its end): finish_reason tool_calls where a reply that
 * ended by itself made one; a call that does not parse stays in the text */
static void calls_finish(request *q) {
    if (q->calls_done) return;
    q->calls_done = true;
    if (!q->calls.len) return;
    char *rest = NULL, prefix[64];
    size_t rest_len = 0;
    snprintf(prefix, sizeof prefix, "call_%s_", q->id);
    q->tool_calls = serve_tool_calls(q->calls.p, q->calls.len, prefix, &rest, &rest_len);
    text_add(q, rest, rest_len);
    free(rest);
    if (q->tool_calls && q->finish && !strcmp(q->finish, "stop")) q->finish = "tool_calls";
}

/* The text cut at byte at (a stop sequence begins there), and the log-probability entries of the
 * tokens from the first that wrote text there or past it */
static void text_cut(request *q, size_t at) {
    q->text.len = at;
    for (int g = 0; q->tok_at && g < q->n_gen; g++)
        if (q->tok_at[g] != SIZE_MAX && q->tok_at[g] >= at) {
            q->lp.len = g ? q->tok_lp[g - 1] : q->lp_base;
            break;
        }
}

/* The end of the text: the detokenizer's rest, a last look for stop sequences. */
static void gen_finish(request *q, const char *why) {
    char buf[HACHI_DETOK_MAX];
    size_t at, k = (size_t)hachi_detok_flush(q->sl->dt, buf, sizeof buf);
    out_add(q, buf, k);
    if (q->rq.n_stop && find_stop(q, q->sent, &at)) { text_cut(q, at); why = "stop"; }
    q->finish = why;
}

/* echo: the prompt's text before the reply: a string as given, token ids as their texts (what is
 * not UTF-8 as U+FFFD); offs (NULL: not wanted) receives each token's text_offset: for ids, the
 * characters of the text before it, a character the tokens before it began included; for a string,
 * its tokens' characters before it, counted the same way (an added BOS
 * has none), which are the string's when its tokens' texts make it up. As the detokenizer does, the
 * first text loses the leading space a tokenizer with a dummy prefix gave it (q->strip_at). */
static void echo_prompt(request *q, long *offs) {
    char piece[8 + 1024], clean[3 * sizeof piece];
    size_t held = 0;   /* piece's first bytes: the end of the last token's, not a whole character yet */
    long chars = 0;
    hachi_detok_reset(q->sl->dt, true);
    q->strip_at = hachi_detok_strips_space(q->sl->dt) ? (int)q->rq.add_bos : -1;
    if (!q->rq.ids) text_add(q, q->rq.prompt, strlen(q->rq.prompt));
    for (int i = 0; i < q->n_prompt && (offs || q->rq.ids); i++) {
        if (offs) offs[i] = q->rq.ids ? text_chars(q) + utf8_chars(piece, held) : chars;   /* (a character begun counts, as a string's) */
        int32_t k = i == 0 && q->rq.add_bos ? 0 : CLI_MAX(0, CLI_MIN(1024, hachi_token_to_text(q->srv->m, q->prompt[i], piece + held, 1024)));
        if (i == q->strip_at && k > 0 && piece[held] == ' ') memmove(piece + held, piece + held + 1, (size_t)--k);
        const size_t len = held + (size_t)k;
        if (!q->rq.ids) {
            chars += utf8_chars(piece, len);
            continue;
        }
        size_t kept;
        text_add(q, clean, serve_utf8_clean(piece, len, i == q->n_prompt - 1, clean, &kept));
        memmove(piece, piece + len - kept, kept);
        held = kept;
    }
}

/* echo with logprobs: the prompt's tokens' entries at offs[n_prompt] (the first has no
 * distribution it was drawn from), from the logits of all but its last token, prefilled from
 * position 0, SERVE_SCORE_ROWS at a time */
static hachi_status prompt_entries(request *q, const long *offs) {
    const int n = q->n_prompt, rows = CLI_MIN(SERVE_SCORE_ROWS, CLI_MAX(n - 1, 1));
    const size_t nv = (size_t)hachi_model_n_vocab(q->srv->m);
    float *lg = malloc(sizeof(float) * (size_t)rows * nv);
    if (!lg) return HACHI_ERR_NOMEM;
    hachi_status st = HACHI_OK;
    for (int i = 0; i < n && !st && !q->text_oom; i++) {
        if (i > 0 && (i - 1) % rows == 0)   /* the logits of tokens i-1 .. */
            st = hachi_session_eval(q->sl->s, q->prompt + i - 1, CLI_MIN(rows, n - i), lg);
        if (!st)
            lp_add(q, i ? lg + (size_t)((i - 1) % rows) * nv : NULL, q->prompt[i],
                   i == 0 && q->rq.add_bos ? SERVE_STRIP_TEXT : i == q->strip_at ? SERVE_STRIP_SPACE : SERVE_STRIP_NONE, offs[i]);
    }
    free(lg);
    return q->text_oom ? HACHI_ERR_NOMEM : st;
}

/* One decode step (up to HACHI_SPEC_STEP_MAX tokens); returns the bytes of text now released. */
static size_t gen_step(server *srv, request *q) {
    slot *sl = q->sl;
    if (q->n_gen >= q->max_gen) { gen_finish(q, "length"); return q->text.len - q->sent; }
    int32_t out[HACHI_SPEC_STEP_MAX], n_out = 0;
    hachi_status st = hachi_spec_step(q->sp, q->max_gen - q->n_gen, out, &n_out);
    if (st) {   /* the context is full; anything else is a defect, logged (the reply ends as cut) */
        if (st != HACHI_ERR_CONTEXT_FULL) fprintf(stderr, "hachi serve: decode failed: %s\n", hachi_last_error());
        gen_finish(q, "length");
        return q->text.len - q->sent;
    }
    for (int i = 0; i < n_out; i++) {
        if (hachi_model_is_eog(srv->m, out[i])) { gen_finish(q, "stop"); return q->text.len - q->sent; }
        sl->held[q->n_prompt + q->n_gen++] = out[i];
        char buf[HACHI_DETOK_MAX];
        size_t from = q->text.len > SERVE_MAX_STOP_LEN ? q->text.len - SERVE_MAX_STOP_LEN : 0;
        const bool strips = q->rq.top_logprobs >= 0 && hachi_detok_strips_space(sl->dt);   /* (for its entry) */
        size_t k = (size_t)hachi_detok_push(sl->dt, out[i], buf, sizeof buf);
        if (q->rq.top_logprobs >= 0)   /* the token's entry (without the space the text lost, if it did) */
            lp_add(q, hachi_spec_step_logits(q->sp, i), out[i], strips && !hachi_detok_strips_space(sl->dt) ? SERVE_STRIP_SPACE : SERVE_STRIP_NONE,
                   q->rq.chat ? -1 : text_chars(q));
        const size_t t0 = q->text.len;
        out_add(q, buf, k);
        if (q->tok_at) {
            q->tok_at[q->n_gen - 1] = q->text.len > t0 ? t0 : SIZE_MAX;
            q->tok_lp[q->n_gen - 1] = q->lp.len;
        }
        if (q->text_oom) { gen_finish(q, "length"); return q->text.len - q->sent; }
        size_t at;
        if (q->rq.n_stop && find_stop(q, CLI_MAX(from, q->sent), &at)) {
            text_cut(q, at);
            q->finish = "stop";
            return q->text.len - q->sent;
        }
    }
    if (q->n_gen >= q->max_gen) { gen_finish(q, "length"); return q->text.len - q->sent; }
    return q->text.len - stop_hold(q) - q->sent;
}

/* The slot keeps what its session holds; the request's sampler and loop go. */
static void gen_end(server *srv, request *q) {
    const int pos = q->sl ? hachi_session_pos(q->sl->s) : 0;
    if (q->sl) q->sl->n_held = pos;
    const hachi_spec_stats *ss = q->sp ? hachi_spec_get_stats(q->sp) : NULL;
    char drafts[64] = "";
    if (ss && srv->spp.drafter != HACHI_DRAFTER_NONE)
        snprintf(drafts, sizeof drafts, ", %lld drafted, %lld accepted", (long long)ss->drafted, (long long)ss->accepted);
    hachi_spec_free(q->sp);
    hachi_sampler_free(q->smp);
    q->sp = NULL;
    q->smp = NULL;
    calls_finish(q);   /* (before the text is taken: a call that does not parse joins it) */
    q->res.completion_tokens = q->n_gen;
    q->res.prompt_tokens = q->n_prompt;
    q->res.cached_tokens = q->n_cached;
    q->res.text = q->text.p;
    q->res.len = q->text.len;
    q->res.reasoning = q->think.p;
    q->res.reasoning_len = q->think.len;
    q->res.tool_calls = q->tool_calls;
    q->res.logprobs = q->lp.p;
    q->res.logprobs_len = q->lp.len;
    q->res.finish = q->finish ? q->finish : "length";
    fprintf(stderr, "hachi serve: %s slot %d: prompt %d tokens (%d reused, %d prefilled), %d generated%s, %s, %.1f ms\n",
            q->rq.chat ? "chat" : "completion", q->sl ? q->sl->id : -1, q->n_prompt, q->n_cached,
            CLI_MAX(0, CLI_MIN(pos, q->n_prompt) - q->n_cached), q->n_gen, drafts,
            q->finish ? q->finish : "cut short (client gone or server stopping)", cli_time_ms() - q->t0);
    slot_give(srv, q);
    atomic_fetch_add(&srv->served, 1);
}

/* ---- responses ----------------------------------------------------------------------------------- */

/* allow: the Allow header of a 405 (the endpoint's method) */
static enum MHD_Result send_json(struct MHD_Connection *conn, unsigned status, char *json, const char *allow) {
    if (!json) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(json), json, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(json); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE) MHD_add_response_header(r, "Retry-After", "1");
    if (allow) MHD_add_response_header(r, "Allow", allow);
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *conn, unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static enum MHD_Result send_error(struct MHD_Connection *conn, unsigned status, const char *code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *type = status == 401 ? "authentication_error" : status >= 500 ? "server_error" : "invalid_request_error";
    return send_json(conn, status, serve_error_json(msg, type, code), NULL);
}

static void request_unref(request *q) {
    if (atomic_fetch_sub(&q->refs, 1) != 1) return;
    if (q->sp || q->smp) gen_end(q->srv, q);   /* a stream cut short */
    slot_give(q->srv, q);
    serve_req_free(&q->rq);
    free(q->body);
    free(q->prompt);
    free(q->text.p);
    free(q->think.p);
    free(q->calls.p);
    free(q->tool_calls);
    free(q->lp.p);
    json_grammar_free(&q->jg);
    free(q->tok_at);
    free(q->tok_lp);
    free(q->out);
    atomic_fetch_sub(&q->srv->live, 1);
    free(q);
}

static void stream_add(request *q, size_t n) {
    q->out_len += n;
    q->t_event = cli_time_ms();
}

/* Where the log-probability entries a stream may send end, with text [0, sent) released: before
 * the first token whose text is not released (a stop sequence's cut may drop it) */
static size_t lp_ready(request *q, size_t sent) {
    if (!q->tok_at || q->finish) return q->lp.len;
    while (q->lp_next < q->n_gen && !(q->tok_at[q->lp_next] != SIZE_MAX && q->tok_at[q->lp_next] >= sent)) q->lp_next++;
    return q->lp_next ? q->tok_lp[q->lp_next - 1] : q->lp_base;
}

/* The log-probability entries not sent yet, up to end, go with the next chunk (true when there
 * are some); lp_sent moves to end once it is written */
static bool lp_pending(request *q, size_t end) {
    const size_t from = q->lp_sent + (q->lp_sent > 0 && q->lp_sent < end);   /* past the comma */
    q->res.logprobs = q->lp.p ? q->lp.p + from : NULL;
    q->res.logprobs_len = end - CLI_MIN(from, end);
    return q->res.logprobs_len > 0;
}

/* A stream's event of the thought not sent yet, added to q->out at *o (*o and *cap move past it);
 * false when it does not fit */
static bool think_chunk(request *q, char **o, size_t *cap) {
    if (q->think_sent >= q->think.len) return true;
    const size_t w = serve_chunk_reasoning(*o, *cap, &q->rq, &q->res, q->think.p + q->think_sent, q->think.len - q->think_sent);
    if (!w) return false;
    q->think_sent = q->think.len;
    stream_add(q, w);
    *o += w;
    *cap -= w;
    return true;
}

/* The next events of a stream into q->out: the role, text as it is released, the end. */
static bool stream_produce(request *q) {
    server *srv = q->srv;
    char *o = q->out + q->out_len;
    size_t cap = q->out_cap - q->out_len;
    if (!q->role_sent) {
        q->role_sent = true;
        q->t_event = cli_time_ms();
        if (q->rq.chat) stream_add(q, serve_chunk(o, cap, &q->rq, &q->res, "", 0, true, NULL, false));
        return true;
    }
    while (!q->finish) {
        if (client_gone(q->conn)) return false;
        if (atomic_load(&srv->stop)) { gen_finish(q, "length"); break; }   /* the stream ends whole */
        size_t n = gen_step(srv, q);
        const size_t before = q->out_len;
        if (!think_chunk(q, &o, &cap)) return false;   /* the thought as it comes */
        const size_t ready = lp_ready(q, q->sent + n);
        const bool entries = lp_pending(q, ready);
        if ((n || entries) && !q->finish) {   /* text released, or tokens' entries (a step's) */
            size_t w = serve_chunk(o, cap, &q->rq, &q->res, q->text.p + q->sent, n, false, NULL, false);
            if (!w) return false;
            q->sent += n;
            q->lp_sent = ready;
            stream_add(q, w);
            return true;
        }
        if (q->out_len > before) return true;
        if (cli_time_ms() - q->t_event > 1000.0 * SERVE_IDLE_S / 4) {   /* text held back (a tool call, a stop's
                                                                       start): a comment, so the connection is not idle */
            const int w = snprintf(o, cap, ": keep-alive\n\n");
            if (w < 0 || (size_t)w >= cap) return false;
            stream_add(q, (size_t)w);
            return true;
        }
    }
    if (!think_chunk(q, &o, &cap)) return false;
    calls_finish(q);   /* (a call that does not parse joins the text sent next) */
    /* the rest in the last events: the text held back (a forced call's reply is all held until it
     * parses or not), the calls, the entries not sent; a JSON string takes at most 6 bytes a byte */
    const size_t need = q->out_len + 6 * (q->text.len - q->sent) + 2 * (q->tool_calls ? strlen(q->tool_calls) : 0) +
                        2 * (q->lp.len - q->lp_sent) + 4096;
    if (need > q->out_cap) {
        char *t = realloc(q->out, need);
        if (!t) return false;
        q->out = t;
        q->out_cap = need;
        o = q->out + q->out_len;
        cap = q->out_cap - q->out_len;
    }
    size_t w = 0;
    if (q->text.len > q->sent) {
        lp_pending(q, q->lp.len);
        w = serve_chunk(o, cap, &q->rq, &q->res, q->text.p + q->sent, q->text.len - q->sent, false, NULL, false);
        if (!w) return false;
        q->sent = q->text.len;
        q->lp_sent = q->lp.len;
    }
    gen_end(srv, q);
    lp_pending(q, q->lp.len);   /* (gen_end gave the result all of them) the last chunk takes the rest */
    const size_t wc = q->res.tool_calls ? serve_chunk_tool_calls(o + w, cap - w, &q->rq, &q->res) : 0;
    if (q->res.tool_calls && !wc) return false;
    w += wc;
    size_t w2 = serve_chunk(o + w, cap - w, &q->rq, &q->res, "", 0, false, q->res.finish, false);
    size_t w3 = q->rq.include_usage ? serve_chunk(o + w + w2, cap - w - w2, &q->rq, &q->res, NULL, 0, false, NULL, true) : 0;
    int w4 = snprintf(o + w + w2 + w3, cap - w - w2 - w3, "data: [DONE]\n\n");
    if (!w2 || (q->rq.include_usage && !w3) || w4 < 0) return false;
    stream_add(q, w + w2 + w3 + (size_t)w4);
    q->stream_end = true;
    return true;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    request *q = cls;
    if (q->out_off == q->out_len) {
        q->out_off = q->out_len = 0;
        while (q->out_len == 0) {
            if (q->stream_end) return MHD_CONTENT_READER_END_OF_STREAM;
            if (!stream_produce(q)) return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = CLI_MIN(max, q->out_len - q->out_off);
    memcpy(buf, q->out + q->out_off, n);
    q->out_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) { request_unref(cls); }

/* ---- completions -------------------------------------------------------------------------------- */

static enum MHD_Result completion(server *srv, request *q) {
    char err[512];
    struct MHD_Connection *conn = q->conn;
    if (!serve_parse(q->body ? q->body : "", q->len, q->route == R_CHAT, srv->m, &q->rq, err, sizeof err))
        return send_error(conn, 400, NULL, "%s", err);
    q->parsed = true;
    const serve_req *rq = &q->rq;
    int32_t n = rq->n_ids;
    const size_t plen = strlen(rq->prompt);
    /* specials in the template's text only: a message's "<turn|>" stays text (a completion's prompt is all template) */
    if (!rq->ids) hachi_tokenize_spans(srv->m, rq->prompt, plen, rq->add_bos, rq->plain, rq->n_plain, NULL, 0, &n);
    if (!(q->prompt = malloc(sizeof(int32_t) * (size_t)(n + 1)))) return send_error(conn, 500, NULL, "out of memory");
    if (rq->ids) memcpy(q->prompt, rq->ids, sizeof(int32_t) * (size_t)n);
    else hachi_tokenize_spans(srv->m, rq->prompt, plen, rq->add_bos, rq->plain, rq->n_plain, q->prompt, n + 1, &n);
    q->n_prompt = n;
    /* the reply's forced start, tokenized alone: a control token begins it and the rest is the
     * template's or a function name of [A-Za-z0-9_-] (serve_parse) */
    if (rq->forced) hachi_tokenize(srv->m, rq->prompt + plen - rq->forced, rq->forced, false, true, NULL, 0, &q->n_forced);
    const int n_ctx = hachi_session_n_ctx(srv->slots[0].s);
    if (n == 0) return send_error(conn, 400, NULL, "the prompt is empty (no tokens)");
    if (n >= n_ctx)
        return send_error(conn, 400, "context_length_exceeded",
                          "the prompt has %d tokens, but the context holds %d (with room for at least one generated token)",
                          n, n_ctx);
    const long want = rq->max_tokens >= 0 ? rq->max_tokens : srv->n_predict > 0 ? srv->n_predict : n_ctx - n;
    q->max_gen = (int)CLI_MIN(want, (long)(n_ctx - n));
    q->text.cap = (size_t)q->max_gen * 64 + 256;
    if (rq->top_logprobs >= 0) {
        q->lp_max = serve_logprob_entry_max(srv->max_piece, rq->top_logprobs);
        q->tok_at = malloc(sizeof *q->tok_at * ((size_t)q->max_gen + 1));
        q->tok_lp = malloc(sizeof *q->tok_lp * ((size_t)q->max_gen + 1));
        if (!q->tok_at || !q->tok_lp) return send_error(conn, 500, NULL, "out of memory");
    }
    q->out_cap = SERVE_STREAM_BUF + 2 * HACHI_SPEC_STEP_MAX * q->lp_max;   /* a step's entries, twice */
    if (!(q->text.p = malloc(q->text.cap)) || (rq->stream && !(q->out = malloc(q->out_cap))))
        return send_error(conn, 500, NULL, "out of memory");
    take_result tr = slot_take(srv, q);
    if (tr == TAKE_BUSY)
        return send_error(conn, 503, "server_busy", "all %d slots are busy and %d requests are queued: retry later",
                          srv->n_slots, srv->queue_max);
    if (tr == TAKE_GONE && atomic_load(&srv->stop))
        return send_error(conn, 503, "server_stopping", "the server is stopping");
    if (tr == TAKE_GONE) return MHD_NO;
    snprintf(q->id, sizeof q->id, "%s-%ld", rq->chat ? "chatcmpl" : "cmpl", atomic_fetch_add(&srv->ids, 1));
    q->res = (serve_result){.id = q->id, .model = srv->name, .created = (long long)time(NULL)};
    hachi_status st = gen_begin(srv, q);
    if (st == HACHI_ERR_ABORTED) {   /* the client went (or the server stops) during the prefill */
        gen_end(srv, q);
        return atomic_load(&srv->stop) ? send_error(conn, 503, "server_stopping", "the server is stopping")
                                       : MHD_NO;
    }
    if (st) {
        gen_end(srv, q);
        return send_error(conn, 500, NULL, "generation failed: %s",
                          st == HACHI_ERR_NOMEM ? "out of memory (the prompt's log-probabilities)" : hachi_last_error());
    }
    if (rq->stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, q, stream_free);
        if (!r) { gen_end(srv, q); return MHD_NO; }
        atomic_fetch_add(&q->refs, 1);
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ret;
    }
    while (!q->finish) {   /* (a server that stops ends the reply where it is, as at max_tokens) */
        if (client_gone(conn)) { gen_end(srv, q); return MHD_NO; }
        if (atomic_load(&srv->stop)) gen_finish(q, "length");
        else gen_step(srv, q);
    }
    gen_end(srv, q);
    return send_json(conn, MHD_HTTP_OK, serve_result_json(rq, &q->res), NULL);
}

/* Whether a slot is busy or a request waits for one */
static bool srv_active(server *srv) {
    pthread_mutex_lock(&srv->mu);
    bool busy = srv->waiting > 0;
    for (int i = 0; i < srv->n_slots; i++) busy |= srv->slots[i].busy;
    pthread_mutex_unlock(&srv->mu);
    return busy;
}

/* ---- routing ------------------------------------------------------------------------------------ */

static enum route route_of(const char *url) {
    if (!strcmp(url, "/health")) return R_HEALTH;
    if (!strcmp(url, "/v1/models")) return R_MODELS;
    if (!strcmp(url, "/v1/chat/completions")) return R_CHAT;
    if (!strcmp(url, "/v1/completions")) return R_COMPLETIONS;
    if (!strcmp(url, "/tokenize")) return R_TOKENIZE;
    if (!strcmp(url, "/detokenize")) return R_DETOKENIZE;
    return R_NONE;
}

/* The URL for an error message: printable ASCII as it is, other bytes as %XX (the message is
 * JSON, which must be UTF-8), at most about 200 bytes */
static void url_text(const char *url, char *out, size_t cap) {
    size_t k = 0;
    for (const unsigned char *u = (const unsigned char *)url; *u && k + 4 < cap && k < 200; u++) {
        if (*u >= 0x20 && *u < 0x7F) out[k++] = (char)*u;
        else k += (size_t)snprintf(out + k, cap - k, "%%%02X", *u);
    }
    out[k] = 0;
}

static bool authorized(const server *srv, struct MHD_Connection *conn) {
    if (!srv->api_key) return true;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;   /* the scheme is case-insensitive (RFC 9110) */
    h += 7;
    size_t a = strlen(h), b = strlen(srv->api_key);
    unsigned diff = a != b;   /* the key's bytes compared in constant time */
    for (size_t i = 0; i < b; i++) diff |= (unsigned char)(i < a ? h[i] : 0) ^ (unsigned char)srv->api_key[i];
    return diff == 0;
}

static enum MHD_Result health(server *srv, struct MHD_Connection *conn) {
    int busy = 0;
    pthread_mutex_lock(&srv->mu);
    for (int i = 0; i < srv->n_slots; i++) busy += srv->slots[i].busy;
    int waiting = srv->waiting;
    pthread_mutex_unlock(&srv->mu);
    char *s = malloc(160);
    if (s) snprintf(s, 160, "{\"status\":\"ok\",\"slots_idle\":%d,\"slots_processing\":%d,\"queued\":%d}",
                    srv->n_slots - busy, busy, waiting);
    return send_json(conn, MHD_HTTP_OK, s, NULL);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    server *srv = cls;
    request *q = *con_cls;
    if (!q) {   /* the headers: everything that needs no body is answered now */
        if (!(q = calloc(1, sizeof *q))) return MHD_NO;
        q->srv = srv;
        q->conn = conn;
        atomic_fetch_add(&srv->live, 1);
        atomic_init(&q->refs, 1);
        q->t0 = cli_time_ms();
        *con_cls = q;
        q->route = route_of(url);
        const bool post = q->route != R_HEALTH && q->route != R_MODELS;
        char ut[256];
        url_text(url, ut, sizeof ut);
        if (q->route == R_NONE) return send_error(conn, 404, "not_found", "no endpoint %s %s", method, ut);
        if (strcmp(method, post ? "POST" : "GET") && (post || strcmp(method, "HEAD"))) {   /* (MHD sends HEAD no body) */
            char msg[512];
            snprintf(msg, sizeof msg, "%s takes %s, not %s", ut, post ? "POST" : "GET", method);
            return send_json(conn, MHD_HTTP_METHOD_NOT_ALLOWED, serve_error_json(msg, "invalid_request_error", "method_not_allowed"),
                             post ? "POST" : "GET, HEAD");
        }
        if (q->route != R_HEALTH && !authorized(srv, conn))
            return send_error(conn, 401, "invalid_api_key", "missing or wrong API key (Authorization: Bearer KEY)");
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > SERVE_MAX_BODY)
            return send_error(conn, 413, "request_too_large", "the request body of %s bytes is over the limit of %u", cl,
                              SERVE_MAX_BODY);
        return MHD_YES;
    }
    if (*upload_size) {   /* a piece of the body */
        size_t n = *upload_size;
        *upload_size = 0;
        if (q->too_big || q->len + n > SERVE_MAX_BODY) { q->too_big = true; return MHD_YES; }
        if (q->len + n + 1 > q->cap) {
            size_t cap = CLI_MAX(q->cap * 2, q->len + n + 1);
            char *b = realloc(q->body, cap);
            if (!b) return MHD_NO;
            q->body = b;
            q->cap = cap;
        }
        memcpy(q->body + q->len, upload, n);
        q->len += n;
        q->body[q->len] = 0;
        return MHD_YES;
    }
    if (q->too_big)
        return send_error(conn, 413, "request_too_large", "the request body is over the limit of %u bytes", SERVE_MAX_BODY);
    if (q->route == R_HEALTH) return health(srv, conn);
    if (q->route == R_MODELS) return send_json(conn, MHD_HTTP_OK, serve_models_json(srv->name, srv->started), NULL);
    if (q->route == R_TOKENIZE || q->route == R_DETOKENIZE) {   /* (no slot: the vocabulary is read-only) */
        char err[1024];
        char *js = q->route == R_TOKENIZE ? serve_tokenize(srv->m, q->body ? q->body : "", q->len, err, sizeof err)
                                          : serve_detokenize(srv->m, q->body ? q->body : "", q->len, err, sizeof err);
        return js ? send_json(conn, MHD_HTTP_OK, js, NULL) : send_error(conn, 400, NULL, "%s", err);
    }
    return completion(srv, q);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    if (*con_cls) request_unref(*con_cls);
    *con_cls = NULL;
}

/* ---- the command ---------------------------------------------------------------------------------- */

static void usage(void) {
    printf("usage: hachi serve -m MODEL [--host 127.0.0.1] [--port 8080] [-c CTX] [--parallel N] [--queue N]\n"
           "                   [--api-key KEY] [--draft N] [-md FILE] [--spec KIND] [-n N] [-t THREADS per slot] [sampling flags]\n"
           "an OpenAI-compatible HTTP server: POST /v1/chat/completions, POST /v1/completions, GET /v1/models,\n"
           "GET /health, POST /tokenize and /detokenize (llama.cpp's); --parallel N sessions (slots) of context CTX; requests wait in a queue of N places\n"
           "(default 4 x slots) when all are busy, 503 past it; --port 0 picks a free port; Ctrl-C stops\n"
           "-n N: the most tokens a request without max_tokens generates (default: until the context is full)\n"
           "sampling flags set the defaults that a request's temperature, top_p, top_k, min_p, repeat_penalty,\n"
           "repeat_last_n, presence_penalty, frequency_penalty, logit_bias (--logit-bias) and seed override\n"
           "(without --seed a request that gives no seed gets a fresh one)\n"
           CLI_DRAFT_USAGE);
}

static void slots_free(server *srv) {
    for (int i = 0; srv->slots && i < srv->n_slots; i++) {
        slot *sl = &srv->slots[i];
        for (int k = 0; k < SERVE_CHECKPOINTS; k++) hachi_checkpoint_free(sl->cp[k]);
        hachi_detok_free(sl->dt);
        hachi_session_free(sl->s);
        free(sl->held);
    }
    free(srv->slots);
}

int cmd_serve(int argc, char **argv) {
    const char *cmd = "serve", *host = "127.0.0.1";
    cli_opts o;
    long port = 8080, parallel = 1, queue = -1;
    server srv = {0};
    cli_draft dr;
    cli_opts_init(&o);
    cli_draft_init(&dr);
    for (int i = 1; i < argc; i++) {
        int r = cli_opts_parse(cmd, &o, argc, argv, &i);
        if (r == 0) r = cli_draft_parse(cmd, &dr, argc, argv, &i);
        if (r < 0) return 1;
        if (r > 0) continue;
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        if (!(v = cli_value(cmd, argc, argv, &i))) return 1;
        if (!strcmp(a, "--host")) host = v;
        else if (!strcmp(a, "--api-key")) srv.api_key = v;
        else if (!strcmp(a, "--port")) { if (!cli_int(cmd, a, v, 0, 65535, &port)) return 1; }
        else if (!strcmp(a, "--parallel") || !strcmp(a, "-np")) { if (!cli_int(cmd, a, v, 1, 64, &parallel)) return 1; }
        else if (!strcmp(a, "--queue")) { if (!cli_int(cmd, a, v, 0, 4096, &queue)) return 1; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { if (!cli_int(cmd, a, v, 0, 1 << 20, &srv.n_predict)) return 1; }
        else return cli_error(cmd, "unknown option '%s' (hachi serve --help)", a);
    }
    if (srv.api_key && !*srv.api_key) return cli_error(cmd, "--api-key is empty");
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%ld", port);
    int gai = getaddrinfo(host, port_s, &hints, &ai);
    if (gai) return cli_error(cmd, "--host '%s': %s", host, gai_strerror(gai));

    int rc = 1;
    struct MHD_Daemon *d = NULL;
    MHD_socket listen_fd = MHD_INVALID_SOCKET;
    srv.m = cli_load_model(cmd, &o, false);
    pthread_mutex_init(&srv.mu, NULL);
    pthread_cond_init(&srv.freed, NULL);
    if (!srv.m) goto out;
    const char *base = strrchr(o.model, '/') ? strrchr(o.model, '/') + 1 : o.model;
    snprintf(srv.name, sizeof srv.name, "%s", base);
    for (char *c = srv.name; *c; c++) if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '_';
    srv.smp = o.smp;
    srv.o = &o;
    srv.seed_given = o.seed_given;
    hachi_sampler *check = NULL;   /* (the flags' sampler, --logit-bias's ids included, checked once) */
    if (cli_sampler_create(cmd, &o, srv.m, NULL, &check)) goto out;
    hachi_sampler_free(check);
    if (!(srv.jv = json_vocab_create(srv.m, false))) { cli_error(cmd, "out of memory (the vocabulary's texts)"); goto out; }
    srv.jv4 = hachi_chat_detect(srv.m) == HACHI_CHAT_GEMMA4 ? json_vocab_create(srv.m, true) : NULL;   /* (NULL: no calls' grammar) */
    for (int32_t t = 0; t < hachi_model_n_vocab(srv.m); t++) {   /* for the log-probability entries' bound */
        char piece[1024];
        srv.max_piece = CLI_MAX(srv.max_piece, (size_t)CLI_MAX(0, hachi_token_to_text(srv.m, t, piece, sizeof piece)));
    }
    if (!cli_draft_setup(cmd, &dr, srv.m, &srv.spp)) goto out;   /* each request's spec drafts on its own */
    cli_draft_session(&dr, &o.sp);
    srv.queue_max = queue < 0 ? 4 * (int)parallel : (int)queue;
    srv.started = (long long)time(NULL);
    if (!o.sp.n_threads) o.sp.n_threads = CLI_MAX(1, hachi_physical_cores() / (int)parallel);
    if (!(srv.slots = calloc((size_t)parallel, sizeof *srv.slots))) goto out;
    srv.n_slots = (int)parallel;
    for (int i = 0; i < srv.n_slots; i++) {
        slot *sl = &srv.slots[i];
        sl->id = i;
        sl->stop = &srv.stop;
        snprintf(sl->label, sizeof sl->label, "hachi serve: slot %d", i);
        cli_progress_attach(&o, &sl->pr, sl->label);
        sl->pr.stop = slot_stop;
        sl->pr.stop_ctx = sl;
        o.sp.progress = cli_progress_cb;
        o.sp.progress_ctx = &sl->pr;
        hachi_status st = hachi_session_create(srv.m, &o.sp, &sl->s);
        if (st) { cli_lib_error(cmd, st, "cannot create the session of a slot"); goto out; }
        if ((st = hachi_detok_create(srv.m, &sl->dt))) { cli_lib_error(cmd, st, "detokenizer"); goto out; }
        for (int k = 0; k < SERVE_CHECKPOINTS; k++)
            if ((st = hachi_checkpoint_create(sl->s, &sl->cp[k]))) { cli_lib_error(cmd, st, "checkpoint"); goto out; }
        if (!(sl->held = malloc(sizeof(int32_t) * (size_t)(hachi_session_n_ctx(sl->s) + HACHI_SPEC_STEP_MAX)))) goto out;
    }

    /* the signals go to sigwait below, not to the server's threads */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    errno = 0;
    d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, handle, &srv,
                         MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                         MHD_OPTION_NOTIFY_COMPLETED, completed, &srv,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)(64 + 2 * srv.n_slots + srv.queue_max),
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SERVE_IDLE_S,
                         MHD_OPTION_END);
    if (!d) {
        cli_error(cmd, "cannot listen on %s:%ld: %s", host, port, errno ? strerror(errno) : "the HTTP daemon did not start");
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "hachi serve: listening on http://%s%s%s:%u (model %s, %d slot%s of context %d, %d thread%s each, queue %d%s)\n",
            ai->ai_family == AF_INET6 ? "[" : "", host, ai->ai_family == AF_INET6 ? "]" : "",
            di ? di->port : (unsigned)port, srv.name, srv.n_slots, srv.n_slots > 1 ? "s" : "",
            hachi_session_n_ctx(srv.slots[0].s), o.sp.n_threads, o.sp.n_threads > 1 ? "s" : "", srv.queue_max,
            srv.api_key ? ", API key required" : "");
    int sig = 0;
    sigwait(&sigs, &sig);
    atomic_store(&srv.stop, 1);
    fprintf(stderr, "hachi serve: %s: stopping (%ld requests served)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
            atomic_load(&srv.served));
    /* no new connections; the replies under way end where they are (finish_reason "length",
     * a stream with its [DONE]), queued requests get a 503, and so does a request that had not
     * taken a slot yet; up to 5 s for every request's reply to be written (live) */
    listen_fd = MHD_quiesce_daemon(d);
    for (int i = 0; i < 500 && (srv_active(&srv) || atomic_load(&srv.live) > 0); i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    rc = 0;
out:
    if (d) MHD_stop_daemon(d);
    if (listen_fd != MHD_INVALID_SOCKET) close(listen_fd);   /* (quiesced: ours to close, after the stop) */
    freeaddrinfo(ai);
    slots_free(&srv);
    pthread_cond_destroy(&srv.freed);
    pthread_mutex_destroy(&srv.mu);
    json_vocab_free(srv.jv);
    json_vocab_free(srv.jv4);
    hachi_model_free(srv.m);
    cli_draft_free(&dr);
    return rc;
}
#endif
