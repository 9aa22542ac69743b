/* hachi info: architecture, hyperparameters, tokenizer, tensor table, and the
 * static plan of a session in the given context mode with its memory. */
#include <stdio.h>
#include <string.h>
#include "cli.h"

int cmd_info(int argc, char **argv) {
    const char *cmd = "info";
    cli_opts o;
    cli_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        int r = cli_opts_parse(cmd, &o, argc, argv, &i);
        if (r < 0) return 1;
        if (r > 0) continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: hachi info -m MODEL [-c CTX] [-t THREADS] [--batch N] [--kv-type T] [--sparse B] [--heads FILE]\n"
                   "(the session flags change the plan it prints; see the README's shared flags)\n");
            return 0;
        }
        return cli_error(cmd, "unknown option '%s'", argv[i]);
    }
    hachi_model *m = cli_load_model(cmd, &o, false);
    if (!m) {
        /* a vocabulary-only file still has something to show */
        hachi_model_params mp = hachi_model_default_params();
        mp.vocab_only = true;
        if (!o.model || hachi_model_load(o.model, &mp, &m) != HACHI_OK) return 1;
        fprintf(stderr, "hachi info: showing the tokenizer and tensors only\n");
        hachi_model_print_info(m, stdout);
        cli_free_model(&o, m);
        return 1;
    }
    hachi_session *s = NULL;   /* (a drafter has no session, so no plan) */
    if (strcmp(hachi_model_arch(m), "gemma4-assistant")) {
        hachi_status st = hachi_session_create(m, &o.sp, &s);   /* before any output: a bad flag is one line */
        if (st != HACHI_OK) { cli_lib_error(cmd, st, "cannot plan a session"); cli_free_model(&o, m); return 1; }
    }
    hachi_model_print_info(m, stdout);
    if (s) hachi_session_print_plan(s, stdout);
    hachi_session_free(s);
    cli_free_model(&o, m);
    return 0;
}
