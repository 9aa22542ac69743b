/* fuzz_model: the model a fuzz target runs on: $HACHI_FUZZ_MODEL (e.g. gemma4-micro.gguf, the
 * real Gemma 4 vocabulary), else a tiny synthetic Gemma 4 (SentencePiece vocabulary, f32)
 * written once to /tmp. Aborts when neither can be had: a fuzz run without its model would
 * test nothing. */
#ifndef HACHI_FUZZ_MODEL_H
#define HACHI_FUZZ_MODEL_H
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "hachi.h"

static hachi_model *fuzz_model(bool vocab_only) {
    const char *path = getenv("HACHI_FUZZ_MODEL");
    static const char synth_path[] = "/tmp/hachi-fuzz-tiny.gguf";
    struct stat st;
    if (!path || !*path) {
        path = synth_path;
        hachi_synth_params p = hachi_synth_default_params();
        if (stat(path, &st) != 0 && hachi_synth(&p, path, NULL, NULL) != HACHI_OK) {
            fprintf(stderr, "fuzz: cannot write %s: %s\n", path, hachi_last_error());
            abort();
        }
    }
    hachi_model_params mp = hachi_model_default_params();
    mp.vocab_only = vocab_only;
    hachi_model *m = NULL;
    if (hachi_model_load(path, &mp, &m) != HACHI_OK) {
        fprintf(stderr, "fuzz: cannot load %s: %s\n", path, hachi_last_error());
        abort();
    }
    return m;
}

#endif
