/* synth: writes a random-weight Gemma 4 model as GGUF, with the real E2B
 * dimensions (DESIGN.md section 3) or a tiny test shape, in one of the weight
 * mixes published files use (f32, f16, bf16, q8_0, q4_0, q4_k_m). Metadata
 * keys and tensor names mirror llama.cpp's gemma4 files exactly. Tensors are
 * generated row by row while the file is written (a seeded RNG per row: the
 * bytes depend on the seed only, not on the thread count); quantized tensors
 * are drawn directly as random blocks with the float weights' scale. */
#ifndef HACHI_SYNTH_H
#define HACHI_SYNTH_H
#include <stdint.h>
#include "hachi.h"

typedef struct hachi_synth_params {
    const char *arch;       /* "gemma4" (the only one) */
    const char *shape;      /* "e2b" (35 layers, 1536 wide, 262144 vocab) or "tiny" (10 layers, 256 wide) */
    const char *type;       /* "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m" */
    uint64_t seed;
    int n_threads;          /* quantization threads; 0 = number of online CPUs (at most 16) */
} hachi_synth_params;

/* Called from the writing thread with the fraction of tensor bytes written so far. */
typedef void (*hachi_synth_progress_fn)(void *ctx, double done);

hachi_synth_params hachi_synth_default_params(void);   /* gemma4, tiny, f32, seed 1 */
/* Writes out_path (through out_path.tmp and a rename). progress may be NULL. */
hachi_status hachi_synth(const hachi_synth_params *p, const char *out_path,
                         hachi_synth_progress_fn progress, void *progress_ctx);

#endif
