/* hachi tokenize: the token ids of a text under a model's (or vocabulary-only
 * GGUF's) tokenizer, as one line of ids or one line per token with its text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

static const char *usage_text =
    "usage: hachi tokenize -m MODEL (-p TEXT | -f FILE) [--ids] [--bos] [--no-special]\n"
    "  -m MODEL      GGUF model or vocabulary-only GGUF\n"
    "  -p TEXT       text to tokenize\n"
    "  -f FILE       tokenize the file's bytes exactly (nothing stripped)\n"
    "  --ids         print only the ids, space separated, on one line\n"
    "  --bos         prepend the BOS token\n"
    "  --no-special  do not match control-token text (e.g. <start_of_turn>) as control tokens\n";

/* Print s[0..n) between quotes: printable ASCII and whole UTF-8 sequences as they
 * are, \n \t \r \\ \' escaped, any other byte as \xNN. */
static void print_piece(const unsigned char *s, int32_t n) {
    putchar('\'');
    for (int32_t i = 0; i < n;) {
        unsigned char c = s[i];
        int32_t l = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3
                  : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (l > 1) {
            bool ok = i + l <= n;
            for (int32_t j = 1; ok && j < l; j++) ok = (s[i + j] & 0xC0) == 0x80;
            if (ok) { fwrite(s + i, 1, (size_t)l, stdout); i += l; continue; }
        }
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\\') fputs("\\\\", stdout);
        else if (c == '\'') fputs("\\'", stdout);
        else if (c >= 0x20 && c < 0x7f) putchar(c);
        else printf("\\x%02x", c);
        i++;
    }
    putchar('\'');
}

int cmd_tokenize(int argc, char **argv) {
    const char *cmd = "tokenize", *model_path = NULL, *prompt = NULL, *file = NULL;
    bool ids_only = false, bos = false, special = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage_text, stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(model_path = cli_value(cmd, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (!(prompt = cli_value(cmd, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!(file = cli_value(cmd, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "--ids")) ids_only = true;
        else if (!strcmp(a, "--bos")) bos = true;
        else if (!strcmp(a, "--no-special")) special = false;
        else return cli_error(cmd, "unknown option '%s' (see hachi tokenize --help)", a);
    }
    if (!model_path) return cli_error(cmd, "missing -m MODEL");
    if (!prompt == !file) return cli_error(cmd, "give exactly one of -p TEXT or -f FILE");

    char *buf = NULL;
    size_t len;
    if (file) {
        if (!(buf = cli_read_file(cmd, file, &len))) return 1;
    } else {
        len = strlen(prompt);
    }
    const char *text = file ? buf : prompt;

    hachi_model_params mp = hachi_model_default_params();
    mp.vocab_only = true;
    hachi_model *model = NULL;
    hachi_status st = hachi_model_load(model_path, &mp, &model);
    if (st) { free(buf); return cli_lib_error(cmd, st, "cannot load the model"); }

    int32_t n = 0, cap = (int32_t)(len < (size_t)INT32_MAX / 2 ? len + 16 : INT32_MAX / 2);
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int rc = 0;
    if (!ids) { rc = cli_error(cmd, "out of memory"); goto out; }
    st = hachi_tokenize(model, text, len, bos, special, ids, cap, &n);
    if (!st && n > cap) {   /* more ids than bytes + 16 (1 MB of random bytes: 1,001,547 ids on gemma4-micro) */
        int32_t *more = realloc(ids, (size_t)n * sizeof *ids);
        if (!more) { rc = cli_error(cmd, "out of memory"); goto out; }
        ids = more;
        cap = n;
        st = hachi_tokenize(model, text, len, bos, special, ids, cap, &n);
    }
    if (st) { rc = cli_lib_error(cmd, st, "tokenize"); goto out; }

    if (ids_only) {
        for (int32_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
        putchar('\n');
    } else {
        enum { SHOWN = 4096 };   /* a piece's bytes listed; one more tells a longer piece */
        unsigned char piece[SHOWN + 1];
        for (int32_t i = 0; i < n; i++) {
            int32_t l = hachi_token_to_text(model, ids[i], (char *)piece, (int32_t)sizeof piece);
            printf("%d ", ids[i]);
            print_piece(piece, l < 0 ? 0 : l > SHOWN ? SHOWN : l);
            if (l > SHOWN) printf(" (its first %d bytes)", SHOWN);
            putchar('\n');
        }
    }
    if (fflush(stdout)) rc = cli_error(cmd, "cannot write the output");
out:
    free(ids);
    free(buf);
    hachi_model_free(model);
    return rc;
}
