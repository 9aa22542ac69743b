/* test_convert: llama2.c stories260K + tok512 -> GGUF: metadata, shapes, weight
 * values against the checkpoint's floats, SentencePiece pieces; broken inputs
 * (truncated, bad header, missing) fail cleanly and leave no output behind. */
#include "test.h"
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include "hachi.h"
#include "gguf.h"
#include "quant.h"

static int spit(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, len, f);
    return fclose(f) == 0 && w == len ? 0 : -1;
}

static int exists(const char *path) { struct stat st; return stat(path, &st) == 0; }

static int64_t get_int(const hachi_gguf *g, const char *key) {
    int64_t v = -1;
    return hachi_gguf_get_i64(g, key, &v) ? v : -1;
}

/* The f32 value i of tensor name, or NAN. */
static float tensor_f32(const hachi_gguf *g, const char *name, int64_t i) {
    const hachi_gguf_tensor *t = hachi_gguf_find_tensor(g, name);
    float v = NAN;
    if (t && t->type == HACHI_TYPE_F32 && (uint64_t)(i + 1) * 4 <= t->nbytes)
        memcpy(&v, (const char *)t->data + i * 4, 4);
    return v;
}

static int shape_is(const hachi_gguf *g, const char *name, uint32_t nd, int64_t ne0, int64_t ne1) {
    const hachi_gguf_tensor *t = hachi_gguf_find_tensor(g, name);
    return t && t->n_dims == nd && t->ne[0] == ne0 && t->ne[1] == ne1 && t->type == HACHI_TYPE_F32;
}

TEST(convert_stories260k) {
    NEED_SHARED(model, "data/stories260K.bin");
    NEED_SHARED(tok, "data/tok512.bin");
    const char *out = test_tmp("stories260K.gguf");
    hachi_status st = hachi_convert_llama2c(model, tok, out);
    CHECKF(st == HACHI_OK, "convert: %s", hachi_last_error());
    if (st) return;
    size_t len;
    char *ck = test_read_file(model, &len);
    hachi_gguf *g = NULL;
    st = hachi_gguf_open(out, &g);
    CHECKF(st == HACHI_OK, "open: %s", hachi_last_error());
    if (st || !ck) { free(ck); hachi_gguf_free(g); return; }

    hachi_gguf_str s;
    CHECK(hachi_gguf_get_str(g, "general.architecture", &s) && hachi_gguf_str_eq(s, "llama"));
    CHECK(hachi_gguf_get_str(g, "general.name", &s) && hachi_gguf_str_eq(s, "stories260K"));
    CHECK(get_int(g, "llama.context_length") == 512);
    CHECK(get_int(g, "llama.embedding_length") == 64);
    CHECK(get_int(g, "llama.block_count") == 5);
    CHECK(get_int(g, "llama.feed_forward_length") == 172);
    CHECK(get_int(g, "llama.attention.head_count") == 8);
    CHECK(get_int(g, "llama.attention.head_count_kv") == 4);
    CHECK(get_int(g, "llama.rope.dimension_count") == 8);
    float f = 0;
    CHECK(hachi_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f) && f == 1e-5f);
    CHECK(hachi_gguf_get_f32(g, "llama.rope.freq_base", &f) && f == 10000.0f);
    CHECK(hachi_gguf_get_str(g, "tokenizer.ggml.model", &s) && hachi_gguf_str_eq(s, "llama"));
    CHECK(get_int(g, "tokenizer.ggml.bos_token_id") == 1);
    CHECK(get_int(g, "tokenizer.ggml.eos_token_id") == 2);
    CHECK(get_int(g, "tokenizer.ggml.unknown_token_id") == 0);
    bool b = false;
    CHECK(hachi_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) && b);
    CHECK(hachi_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b) && b);
    CHECK(hachi_gguf_alignment(g) == 32);

    /* tensors: 1 + 5 x 9 + 1, classifier shared (no output.weight) */
    CHECKF(hachi_gguf_n_tensors(g) == 47, "%lld tensors", (long long)hachi_gguf_n_tensors(g));
    CHECK(!hachi_gguf_find_tensor(g, "output.weight"));
    CHECK(shape_is(g, "token_embd.weight", 2, 64, 512));
    CHECK(shape_is(g, "blk.0.attn_norm.weight", 1, 64, 1));
    CHECK(shape_is(g, "blk.2.attn_q.weight", 2, 64, 64));
    CHECK(shape_is(g, "blk.2.attn_k.weight", 2, 64, 32));
    CHECK(shape_is(g, "blk.2.attn_v.weight", 2, 64, 32));
    CHECK(shape_is(g, "blk.4.attn_output.weight", 2, 64, 64));
    CHECK(shape_is(g, "blk.4.ffn_gate.weight", 2, 64, 172));
    CHECK(shape_is(g, "blk.4.ffn_up.weight", 2, 64, 172));
    CHECK(shape_is(g, "blk.4.ffn_down.weight", 2, 172, 64));
    CHECK(shape_is(g, "output_norm.weight", 1, 64, 1));

    /* values: float offsets into the checkpoint after the 28-byte header */
    // cppcheck-suppress invalidPointerCast ; the checkpoint is floats after the 28-byte header (4-byte aligned)
    const float *w = (const float *)(ck + 28);
    const int64_t D = 64, H = 172, L = 5, V = 512, KV = 32;
    int64_t o_att = V * D, o_wq = o_att + L * D, o_wk = o_wq + L * D * D, o_wv = o_wk + L * KV * D;
    int64_t o_wo = o_wv + L * KV * D, o_ffn = o_wo + L * D * D, o_w1 = o_ffn + L * D;
    int64_t o_w2 = o_w1 + L * H * D, o_w3 = o_w2 + L * D * H, o_fin = o_w3 + L * H * D;
    CHECK(tensor_f32(g, "token_embd.weight", 0) == w[0]);
    CHECK(tensor_f32(g, "token_embd.weight", 300 * D + 7) == w[300 * D + 7]);
    CHECK(tensor_f32(g, "blk.3.attn_norm.weight", 5) == w[o_att + 3 * D + 5]);
    CHECK(tensor_f32(g, "blk.1.attn_q.weight", 100) == w[o_wq + 1 * D * D + 100]);
    CHECK(tensor_f32(g, "blk.1.attn_k.weight", 2047) == w[o_wk + 1 * KV * D + 2047]);
    CHECK(tensor_f32(g, "blk.4.attn_v.weight", 0) == w[o_wv + 4 * KV * D]);
    CHECK(tensor_f32(g, "blk.2.attn_output.weight", 99) == w[o_wo + 2 * D * D + 99]);
    CHECK(tensor_f32(g, "blk.0.ffn_norm.weight", 63) == w[o_ffn + 63]);
    CHECK(tensor_f32(g, "blk.4.ffn_gate.weight", 1234) == w[o_w1 + 4 * H * D + 1234]);
    CHECK(tensor_f32(g, "blk.4.ffn_down.weight", 1234) == w[o_w2 + 4 * D * H + 1234]);
    CHECK(tensor_f32(g, "blk.4.ffn_up.weight", H * D - 1) == w[o_w3 + 4 * H * D + H * D - 1]);
    CHECK(tensor_f32(g, "output_norm.weight", 10) == w[o_fin + 10]);
    CHECK(o_fin + D + 512 * 8 == (int64_t)(len - 28) / 4);   /* + freq_cis real and imag */

    /* vocabulary: SentencePiece conventions */
    const hachi_gguf_value *tv = hachi_gguf_get(g, "tokenizer.ggml.tokens");
    const hachi_gguf_value *ty = hachi_gguf_get(g, "tokenizer.ggml.token_type");
    const hachi_gguf_value *sc = hachi_gguf_get(g, "tokenizer.ggml.scores");
    CHECK(tv && tv->type == HACHI_GGUF_ARRAY && tv->arr.n == 512);
    CHECK(ty && ty->arr.n == 512 && sc && sc->arr.n == 512);
    if (tv && ty && sc && tv->arr.n == 512 && ty->arr.n == 512 && sc->arr.n == 512) {
        static const struct { int id; const char *piece; int type; } want[] = {
            {0, "<unk>", 2}, {1, "<s>", 3}, {2, "</s>", 3}, {3, "<0x00>", 6}, {258, "<0xFF>", 6},
            {259, "\xe2\x96\x81t", 1}, {260, "he", 1}, {265, "\xe2\x96\x81the", 1},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            int64_t t = -1;
            CHECKF(hachi_gguf_arr_str(tv, (uint64_t)want[i].id, &s) && hachi_gguf_str_eq(s, want[i].piece),
                   "token %d is not '%s'", want[i].id, want[i].piece);
            CHECKF(hachi_gguf_arr_i64(ty, (uint64_t)want[i].id, &t) && t == want[i].type,
                   "token %d type %lld, want %d", want[i].id, (long long)t, want[i].type);
        }
        double d = 0;
        CHECK(hachi_gguf_arr_f64(sc, 260, &d) && d == -1.0);
        /* no raw spaces survive */
        int spaces = 0;
        for (uint64_t i = 0; i < 512; i++)
            if (hachi_gguf_arr_str(tv, i, &s) && memchr(s.ptr, ' ', s.len)) spaces++;
        CHECK(spaces == 0);
    }
    hachi_gguf_free(g);
    free(ck);
}

/* A failed conversion: the status, a message containing `needle`, and no output file. */
static void expect_fail(const char *model, const char *tok, hachi_status want, const char *needle) {
    const char *out = test_tmp("bad.gguf");
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    hachi_status st = hachi_convert_llama2c(model, tok, out);
    CHECKF(st == want, "%s: status %d, want %d (%s)", model, (int)st, (int)want, hachi_last_error());
    CHECKF(strstr(hachi_last_error(), needle), "%s: message '%s' lacks '%s'", model, hachi_last_error(), needle);
    CHECKF(!exists(out) && !exists(tmp), "%s: output left behind", model);
}

TEST(convert_errors) {
    NEED_SHARED(model, "data/stories260K.bin");
    NEED_SHARED(tok, "data/tok512.bin");
    size_t len, tlen;
    char *ck = test_read_file(model, &len), *tk = test_read_file(tok, &tlen);
    CHECK(ck && tk);
    if (!ck || !tk) { free(ck); free(tk); return; }
    const char *bad = test_tmp("bad.bin"), *badtok = test_tmp("badtok.bin");

    CHECK(spit(bad, ck, len - 4) == 0);                 /* one float short */
    expect_fail(bad, tok, HACHI_ERR_FORMAT, "truncated");
    CHECK(spit(bad, ck, 20) == 0);                      /* inside the header */
    expect_fail(bad, tok, HACHI_ERR_FORMAT, "truncated");
    CHECK(spit(bad, ck, len / 2) == 0);
    expect_fail(bad, tok, HACHI_ERR_FORMAT, "truncated");

    int32_t hdr[7];
    memcpy(hdr, ck, sizeof hdr);
    int32_t h2[7];
    memcpy(h2, hdr, sizeof h2); h2[3] = 7;              /* 64 % 7 != 0 */
    memcpy(ck, h2, sizeof h2); CHECK(spit(bad, ck, len) == 0);
    expect_fail(bad, tok, HACHI_ERR_FORMAT, "n_heads");
    memcpy(h2, hdr, sizeof h2); h2[4] = 3;              /* 8 % 3 != 0 */
    memcpy(ck, h2, sizeof h2); CHECK(spit(bad, ck, len) == 0);
    expect_fail(bad, tok, HACHI_ERR_FORMAT, "n_kv_heads");
    memcpy(h2, hdr, sizeof h2); h2[0] = 0;
    memcpy(ck, h2, sizeof h2); CHECK(spit(bad, ck, len) == 0);
    expect_fail(bad, tok, HACHI_ERR_FORMAT, "dim");
    memcpy(h2, hdr, sizeof h2); h2[5] = -512;           /* separate classifier: file too short */
    memcpy(ck, h2, sizeof h2); CHECK(spit(bad, ck, len) == 0);
    expect_fail(bad, tok, HACHI_ERR_FORMAT, "truncated");
    memcpy(ck, hdr, sizeof hdr);

    memcpy(h2, hdr, sizeof h2); h2[5] = 2;              /* no EOS (2) in the vocabulary */
    memcpy(ck, h2, sizeof h2); CHECK(spit(bad, ck, len) == 0);
    expect_fail(bad, tok, HACHI_ERR_FORMAT, "vocab_size");
    memcpy(h2, hdr, sizeof h2); h2[2] = 2000;           /* more layers than a model may have */
    memcpy(ck, h2, sizeof h2); CHECK(spit(bad, ck, len) == 0);
    expect_fail(bad, tok, HACHI_ERR_FORMAT, "n_layers");
    memcpy(ck, hdr, sizeof hdr);

    int32_t plen;                                       /* token 10's piece with a NUL byte */
    size_t at = 4;
    for (int i = 0; i < 10; i++) { memcpy(&plen, tk + at + 4, 4); at += 8 + (size_t)plen; }
    memcpy(&plen, tk + at + 4, 4);
    CHECK(plen >= 1);
    const char keep = tk[at + 8];
    tk[at + 8] = 0;
    CHECK(spit(badtok, tk, tlen) == 0);
    expect_fail(model, badtok, HACHI_ERR_FORMAT, "NUL");
    tk[at + 8] = keep;

    const char *fifo = test_tmp("fifo.bin");            /* a FIFO is refused, not waited on */
    unlink(fifo);
    if (mkfifo(fifo, 0600) == 0) {
        expect_fail(fifo, tok, HACHI_ERR_IO, "regular");
        unlink(fifo);
    }

    CHECK(spit(badtok, tk, tlen - 3) == 0);             /* last piece cut */
    expect_fail(model, badtok, HACHI_ERR_FORMAT, "badtok.bin");
    expect_fail(test_tmp("missing.bin"), tok, HACHI_ERR_IO, "missing.bin");
    expect_fail(model, test_tmp("missing-tok.bin"), HACHI_ERR_IO, "missing-tok.bin");
    free(ck);
    free(tk);
}

/* The output's temporary name is never an existing file: a checkpoint named out.tmp is
 * converted to out, and is still there, byte for byte; a symbolic link named out.tmp is left
 * alone, and what it points to too. */
TEST(convert_tmp_name_taken) {
    NEED_SHARED(model, "data/stories260K.bin");
    NEED_SHARED(tok, "data/tok512.bin");
    size_t len, rlen;
    char *ck = test_read_file(model, &len);
    const char *out = test_tmp("taken.gguf"), *tmp = test_tmp("taken.gguf.tmp"), *ref = test_tmp("taken-ref.gguf");
    unlink(out);
    CHECK(ck && spit(tmp, ck, len) == 0);
    CHECKF(hachi_convert_llama2c(model, tok, ref) == HACHI_OK && hachi_convert_llama2c(tmp, tok, out) == HACHI_OK,
           "convert: %s", hachi_last_error());
    char *in = test_read_file(tmp, &rlen);
    CHECK(in && ck && rlen == len && !memcmp(in, ck, len));
    free(in);
    hachi_gguf *ga = NULL, *gb = NULL;   /* the weights are the checkpoint's (the name differs: the file's) */
    CHECK(hachi_gguf_open(ref, &ga) == HACHI_OK && hachi_gguf_open(out, &gb) == HACHI_OK);
    for (int64_t i = 0; ga && gb && i < hachi_gguf_n_tensors(ga); i++) {
        const hachi_gguf_tensor *x = hachi_gguf_tensor_at(ga, i), *y = hachi_gguf_find_tensor(gb, x->name);
        CHECKF(y && y->nbytes == x->nbytes && !memcmp(x->data, y->data, x->nbytes), "tensor %s", x->name);
    }
    hachi_gguf_free(ga);
    hachi_gguf_free(gb);
    CHECK(!exists(test_tmp("taken.gguf.tmp.1")));

    const char *victim = test_tmp("victim.txt"), *link = test_tmp("linked.gguf.tmp"), *lout = test_tmp("linked.gguf");
    unlink(link);
    CHECK(spit(victim, "keep\n", 5) == 0 && symlink(victim, link) == 0);
    CHECKF(hachi_convert_llama2c(model, tok, lout) == HACHI_OK, "convert: %s", hachi_last_error());
    char *v = test_read_file(victim, &rlen);
    struct stat sb;
    CHECK(v && rlen == 5 && !memcmp(v, "keep\n", 5) && lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
    CHECK(lstat(lout, &sb) == 0 && S_ISREG(sb.st_mode));
    free(v);
    free(ck);
    unlink(link);
}

static int one_line(const char *s) {
    const char *nl = strchr(s, '\n');
    return nl && nl[1] == 0;
}

TEST(convert_cli) {
    NEED_SHARED(model, "data/stories260K.bin");
    NEED_SHARED(tok, "data/tok512.bin");
    const char *bin = test_hachi_bin();
    if (access(bin, X_OK) != 0) SKIP("no CLI binary at %s", bin);
    char cmd[4096], *out = NULL;
    const char *dst = test_tmp("cli.gguf");
    snprintf(cmd, sizeof cmd, "%s convert-llama2c '%s' '%s' -o '%s' 2>&1", bin, model, tok, dst);
    int rc = test_run(cmd, &out);
    CHECKF(rc == 0 && exists(dst), "rc %d: %s", rc, out ? out : "");
    free(out);
    out = NULL;
    snprintf(cmd, sizeof cmd, "%s convert-llama2c '%s' '%s' -o '%s' 2>&1", bin, test_tmp("nope.bin"), tok,
             test_tmp("nope.gguf"));
    rc = test_run(cmd, &out);
    CHECKF(rc == 1 && out && !strncmp(out, "hachi convert-llama2c: ", 23) && one_line(out),
           "rc %d: %s", rc, out ? out : "");
    CHECK(!exists(test_tmp("nope.gguf")));
    free(out);
    out = NULL;
    snprintf(cmd, sizeof cmd, "%s convert-llama2c '%s' '%s' 2>&1", bin, model, tok);   /* no -o */
    rc = test_run(cmd, &out);
    CHECKF(rc == 1 && out && strstr(out, "-o"), "rc %d: %s", rc, out ? out : "");
    free(out);
}
