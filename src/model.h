/* model: hyperparameters and tensor binding from GGUF, per architecture
 * (gemma4, llama). Weights stay in the read-only mmap. */
#ifndef HACHI_MODEL_H
#define HACHI_MODEL_H
#include "hachi.h"
#include "gguf.h"
#include "tokenizer.h"

const hachi_tokenizer *hachi_model_tokenizer(const hachi_model *model);
const hachi_gguf *hachi_model_gguf(const hachi_model *model);

#endif
