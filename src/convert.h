/* convert: llama2.c checkpoints (legacy v0 export: a 7-int header, then
 * float32 weights) and their tokenizer.bin into a llama-architecture GGUF
 * with llama.cpp's key and tensor names, F32 tensors, and the vocabulary in
 * SentencePiece form (U+2581 for spaces, <0xNN> byte tokens). */
#ifndef HACHI_CONVERT_H
#define HACHI_CONVERT_H
#include "hachi.h"

/* Reads model_bin and tok_bin, writes out_gguf (through out_gguf.tmp and a
 * rename: never half-written). Errors name the file and what is wrong. */
hachi_status hachi_convert_llama2c(const char *model_bin, const char *tok_bin, const char *out_gguf);

#endif
