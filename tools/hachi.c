/* hachi: the command-line tool's entry point; dispatches to tools/cmd_*.c. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "cli.h"

static const struct { const char *name; int (*fn)(int, char **); const char *help; } commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"chat", cmd_chat, "interactive chat in one session"},
    {"info", cmd_info, "architecture, hyperparameters, tokenizer, tensors, plan"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"eval", cmd_eval, "logits of a token sequence to a raw f32 file"},
    {"perplexity", cmd_perplexity, "perplexity of a text file; KL divergence of a mode against a dense base"},
    {"passkey", cmd_passkey, "passkey retrieval of a mode against dense f16, by length and depth"},
    {"heads", cmd_heads, "classify streaming heads of the full-attention layers (for --heads)"},
    {"bench", cmd_bench, "decode/prefill speed against the memory roofline"},
    {"convert-llama2c", cmd_convert_llama2c, "llama2.c checkpoint + tokenizer -> GGUF"},
    {"synth", cmd_synth, "write a random-weight model (e.g. E2B-shaped) as GGUF"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server (chat, completions, streaming)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: hachi <command> [options]   (hachi <command> --help; hachi --version)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-16s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 1; }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("hachi %s\n", hachi_version());
        return 0;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name)) continue;
        const int rc = commands[i].fn(argc - 1, argv + 1);
        /* output that never arrived (a full disk, a closed pipe) is a failure, whatever printed it */
        if ((fflush(stdout) != 0 || ferror(stdout)) && rc == 0) {
            fprintf(stderr, "hachi %s: cannot write the output: %s\n", argv[1], strerror(errno ? errno : EIO));
            return 1;
        }
        return rc;
    }
    fprintf(stderr, "hachi: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 1;
}
