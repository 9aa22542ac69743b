/* cmd_convert: `hachi convert-llama2c model.bin tokenizer.bin -o model.gguf`,
 * a llama2.c checkpoint and its tokenizer into an F32 llama GGUF. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "cli.h"
#include "hachi.h"

static const char *CMD = "convert-llama2c";

static void usage(FILE *f) {
    fprintf(f, "usage: hachi convert-llama2c MODEL.bin TOKENIZER.bin -o OUT.gguf\n"
               "  MODEL.bin      llama2.c checkpoint (legacy v0 export: 7 x int32 header, float32 weights)\n"
               "  TOKENIZER.bin  llama2.c tokenizer (max_token_length, then score, length, bytes per token)\n"
               "  -o OUT.gguf    output: llama architecture, F32 tensors, SentencePiece vocabulary\n");
}

int cmd_convert_llama2c(int argc, char **argv) {
    const char *pos[2] = {NULL, NULL}, *out = NULL;
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
            if (!(out = cli_value(CMD, argc, argv, &i))) return 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_error(CMD, "unknown option '%s' (see --help)", argv[i]);
        } else if (n_pos < 2) {
            pos[n_pos++] = argv[i];
        } else {
            return cli_error(CMD, "unexpected argument '%s' (see --help)", argv[i]);
        }
    }
    if (n_pos < 2) return cli_error(CMD, "needs MODEL.bin and TOKENIZER.bin (see --help)");
    if (!out) return cli_error(CMD, "missing -o OUT.gguf");
    if (!cli_not_input(CMD, out, pos[0]) || !cli_not_input(CMD, out, pos[1])) return 1;
    hachi_status st = hachi_convert_llama2c(pos[0], pos[1], out);
    if (st) return cli_error(CMD, "%s", *hachi_last_error() ? hachi_last_error() : hachi_status_str(st));
    struct stat sb;
    fprintf(stderr, "hachi convert-llama2c: wrote %s (%.1f MB)\n", out,
            stat(out, &sb) ? 0.0 : (double)sb.st_size / 1e6);
    return 0;
}
