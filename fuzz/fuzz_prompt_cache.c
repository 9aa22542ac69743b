/* fuzz_prompt_cache: libFuzzer target for the prompt-cache loader (hachi_session_load). Each
 * input is written to a file and loaded into a session of the fuzz model for a fixed prompt
 * of 40 tokens; whatever it restores (a checksummed, checked file: normally nothing) must
 * leave a session that evaluates the next token and rewinds. The seed (a valid cache of the
 * prompt) is written to $HACHI_FUZZ_SEED when set. Built by `make fuzz`. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include "fuzz_model.h"

#define N_PROMPT 40

static hachi_model *m;
static hachi_session *s;
static int32_t prompt[N_PROMPT + 1];
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    m = fuzz_model(false);
    hachi_session_params sp = hachi_session_default_params();
    sp.n_threads = 1;
    if (hachi_session_create(m, &sp, &s) != HACHI_OK) abort();
    for (int i = 0; i <= N_PROMPT; i++) prompt[i] = (int32_t)(4 + (i * 7919) % (hachi_model_n_vocab(m) - 4));
    const char *seed = getenv("HACHI_FUZZ_SEED");
    if (seed && *seed) {   /* the valid file the corpus starts from */
        if (hachi_session_eval(s, prompt, N_PROMPT, NULL) != HACHI_OK || hachi_session_save(s, prompt, N_PROMPT, seed))
            abort();
        hachi_session_rewind(s, 0);
    }
    snprintf(path, sizeof path, "/tmp/hachi-fuzz-%d.cache", (int)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    if (hachi_session_rewind(s, 0) != HACHI_OK) abort();
    int32_t n = -1;
    hachi_status st = hachi_session_load(s, path, prompt, N_PROMPT, &n);
    if (st == HACHI_OK) {
        if (n < 0 || n > N_PROMPT || hachi_session_pos(s) != n) __builtin_trap();
        if (n < N_PROMPT && hachi_session_eval(s, prompt + n, 1, NULL) != HACHI_OK) __builtin_trap();
    } else if (hachi_session_pos(s) != 0) {
        __builtin_trap();   /* a refused file leaves the session as it was */
    }
    remove(path);
    return 0;
}
