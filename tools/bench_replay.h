/* bench_replay: a speculative run's accept/reject trace replayed through another model's
 * forwards beside plain decoding (hachi bench --spec-replay; tools/bench_replay.c). */
#ifndef HACHI_BENCH_REPLAY_H
#define HACHI_BENCH_REPLAY_H
#include <stdint.h>
#include "cli.h"

typedef struct replay_trace {
    const char *path;
    int n;                  /* forwards */
    uint8_t (*kr)[2];       /* [n] drafted, kept */
} replay_trace;

typedef struct replay_result {
    int forwards, draft_forwards, drafted, kept, tokens;   /* of the trace */
    double spec_ms, plain_ms;   /* the replayed forwards; plain decoding of as many tokens */
    double median_ratio;        /* of plain / speculative time per segment */
} replay_result;

/* Parse a trace ("drafted kept" per line, '#' comments); false with the error printed. */
bool replay_load(const char *cmd, const char *path, replay_trace *t);
void replay_free(replay_trace *t);
/* Positions a replay of t takes past the session's position (both arms and the warm-up). */
int replay_positions(const replay_trace *t);
/* Replay t from the session's position (replay_positions further on at most); false with
 * the error printed. */
bool replay_run(const char *cmd, hachi_session *s, const replay_trace *t, uint64_t seed, replay_result *out);
/* The median time of forwards of 1..16 rows at the session's position (left there), printed in
 * ms and as ratios for --spec-costs; false with the error printed. */
bool replay_costs(const char *cmd, hachi_session *s, uint64_t seed, int reps);
void replay_print(const replay_trace *t, int depth, const replay_result *r);

#endif
