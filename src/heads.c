/* heads: which query heads of the full-attention layers stream (attend to a sink and a
 * recent window only), made by `hachi heads`, saved as a small text file:
 *
 *     hachi-heads 1
 *     model 5d1c0a9e2f4b7c31      hachi_model_id, 16 hex digits
 *     arch gemma4
 *     layers 8
 *     heads 4                     query heads per layer
 *     sink 16
 *     window 256
 *     layer 2 .S..                one line per full-attention layer: S streams, . attends to all
 *
 * Lines starting with # are comments. Load checks every field against the model. */
#include "heads.h"
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "model.h"
#include "util.h"

#define HEADS_VERSION 1
#define HEADS_MAX_LINE 256

static hachi_status heads_alloc(const hachi_model *m, int sink, int window, hachi_heads **out) {
    if (m->n_head > HACHI_HEADS_MAX_HEAD)
        return hachi_fail(HACHI_ERR_UNSUPPORTED, "streaming heads: model '%s' has %d query heads (at most %d)", m->path,
                          m->n_head, HACHI_HEADS_MAX_HEAD);
    if (sink < 0 || window < 1 || sink > HACHI_CTX_MAX || window > HACHI_CTX_MAX)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "streaming heads: sink %d and window %d out of range (sink >= 0, "
                          "window >= 1, each at most %d)", sink, window, HACHI_CTX_MAX);
    hachi_heads *h = hachi_calloc(1, sizeof *h);
    if (!h) return HACHI_ERR_NOMEM;
    h->stream = hachi_calloc((size_t)m->n_layer, sizeof *h->stream);
    h->full = hachi_calloc((size_t)m->n_layer, sizeof *h->full);
    if (!h->stream || !h->full) { hachi_heads_free(h); return HACHI_ERR_NOMEM; }
    for (int l = 0; l < m->n_layer; l++) h->full[l] = !m->layers[l].sliding;
    h->model_id = hachi_model_id(m);
    snprintf(h->arch, sizeof h->arch, "%s", m->arch_name);
    h->n_layer = m->n_layer;
    h->n_head = m->n_head;
    h->sink = sink;
    h->window = window;
    *out = h;
    return HACHI_OK;
}

hachi_status hachi_heads_create(const hachi_model *m, int32_t sink, int32_t window, hachi_heads **out) {
    if (!m || !out) return hachi_fail(HACHI_ERR_INVALID_ARG, "hachi_heads_create: NULL argument");
    *out = NULL;
    if (!m->layers) return hachi_fail(HACHI_ERR_INVALID_ARG, "model '%s' was loaded vocab-only", m->path);
    return heads_alloc(m, sink, window, out);
}

void hachi_heads_free(hachi_heads *h) {
    if (!h) return;
    free(h->stream);
    free(h->full);
    free(h);
}

hachi_status hachi_heads_set(hachi_heads *h, int32_t layer, int32_t head, bool streaming) {
    if (!h) return hachi_fail(HACHI_ERR_INVALID_ARG, "hachi_heads_set: NULL heads");
    if (layer < 0 || layer >= h->n_layer || head < 0 || head >= h->n_head)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "streaming heads: layer %d head %d out of range (%d layers, %d heads)",
                          layer, head, h->n_layer, h->n_head);
    if (!h->full[layer])
        return hachi_fail(HACHI_ERR_INVALID_ARG, "streaming heads: layer %d is a sliding-window layer (only "
                          "full-attention layers stream)", layer);
    if (streaming) h->stream[layer] |= 1ull << head;
    else h->stream[layer] &= ~(1ull << head);
    return HACHI_OK;
}

bool hachi_heads_get(const hachi_heads *h, int32_t layer, int32_t head) {
    return h && layer >= 0 && layer < h->n_layer && head >= 0 && head < h->n_head && (h->stream[layer] >> head & 1);
}

int32_t hachi_heads_count(const hachi_heads *h) {
    int32_t n = 0;
    for (int l = 0; h && l < h->n_layer; l++) n += __builtin_popcountll(h->stream[l]);
    return n;
}

int32_t hachi_heads_sink(const hachi_heads *h) { return h ? h->sink : 0; }
int32_t hachi_heads_window(const hachi_heads *h) { return h ? h->window : 0; }

hachi_status hachi_heads_save(const hachi_heads *h, const char *path) {
    if (!h || !path) return hachi_fail(HACHI_ERR_INVALID_ARG, "hachi_heads_save: NULL argument");
    char tmp[1024];
    hachi_status st = hachi_replaceable(path);
    if (st) return st;
    int fd;
    if ((st = hachi_tmp_create(path, tmp, sizeof tmp, &fd))) return st;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        remove(tmp);
        return hachi_fail(HACHI_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
    }
    fprintf(f, "hachi-heads %d\n# S: a streaming head (keys < sink and the last window keys only); .: all keys\n",
            HEADS_VERSION);
    fprintf(f, "model %016llx\narch %s\nlayers %d\nheads %d\nsink %d\nwindow %d\n", (unsigned long long)h->model_id,
            h->arch, h->n_layer, h->n_head, h->sink, h->window);
    for (int l = 0; l < h->n_layer; l++) {
        if (!h->full[l]) continue;
        fprintf(f, "layer %d ", l);
        for (int i = 0; i < h->n_head; i++) fputc(h->stream[l] >> i & 1 ? 'S' : '.', f);
        fputc('\n', f);
    }
    const bool ok = !ferror(f);
    if (fclose(f) != 0 || !ok || rename(tmp, path) != 0) {
        remove(tmp);
        return hachi_fail(HACHI_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    }
    return HACHI_OK;
}

/* ---- loading --------------------------------------------------------------------------------- */

/* The next line that is not blank or a comment, without its newline; false at the end. */
static bool next_line(FILE *f, char *buf, int *line_no, bool *too_long) {
    while (fgets(buf, HEADS_MAX_LINE, f)) {
        ++*line_no;
        size_t n = strlen(buf);
        if (n && buf[n - 1] == '\n') buf[--n] = 0;
        else if (!feof(f)) { *too_long = true; return true; }
        if (n && buf[n - 1] == '\r') buf[--n] = 0;
        if (n && buf[0] != '#') return true;
    }
    return false;
}

/* "key <integer>" with the integer in [lo, hi]. */
static bool key_int(const char *line, const char *key, long lo, long hi, long *v) {
    const size_t k = strlen(key);
    if (strncmp(line, key, k) || line[k] != ' ' || !(isdigit((unsigned char)line[k + 1]) || line[k + 1] == '-'))
        return false;   /* (strtol would take "+8" and " 8" too) */
    char *end;
    errno = 0;
    *v = strtol(line + k + 1, &end, 10);
    return !errno && end != line + k + 1 && !*end && *v >= lo && *v <= hi;
}

hachi_status hachi_heads_load(const hachi_model *m, const char *path, hachi_heads **out) {
    if (!m || !path || !out) return hachi_fail(HACHI_ERR_INVALID_ARG, "hachi_heads_load: NULL argument");
    *out = NULL;
    if (!m->layers) return hachi_fail(HACHI_ERR_INVALID_ARG, "model '%s' was loaded vocab-only", m->path);
    hachi_status rs = hachi_readable_file(path, "the heads file");
    if (rs) return rs;
    FILE *f = fopen(path, "r");
    if (!f) return hachi_fail(HACHI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char line[HEADS_MAX_LINE];
    int no = 0;
    bool too_long = false;
    long v[6];
    static const char *const keys[6] = {"hachi-heads", "model", "arch", "layers", "heads", "sink"};
    hachi_status st = HACHI_OK;
    hachi_heads *h = NULL;
    uint8_t *seen = NULL;   /* the layer lines read */
    char model_hex[32] = "", arch[32] = "";
#define BAD(...) do { st = hachi_fail(HACHI_ERR_FORMAT, __VA_ARGS__); goto done; } while (0)
    for (int i = 0; i < 6; i++) {
        if (!next_line(f, line, &no, &too_long) || too_long)
            BAD("%s: line %d: expected '%s', %s", path, too_long ? no : no + 1, keys[i],
                too_long ? "got a line too long or with a NUL byte" : "the file ends");
        if (i == 1 || i == 2) {   /* model <hex>, arch <name> */
            char *dst = i == 1 ? model_hex : arch;
            const size_t k = strlen(keys[i]);
            if (strncmp(line, keys[i], k) || line[k] != ' ' || strlen(line + k + 1) >= sizeof model_hex)
                BAD("%s: line %d: expected '%s <%s>'", path, no, keys[i], i == 1 ? "16 hex digits" : "architecture");
            memcpy(dst, line + k + 1, strlen(line + k + 1) + 1);
            continue;
        }
        if (!key_int(line, keys[i], 0, HACHI_CTX_MAX, &v[i]))
            BAD("%s: line %d: expected '%s <integer from 0 to %d>', got '%s'", path, no, keys[i], HACHI_CTX_MAX, line);
    }
    if (v[0] != HEADS_VERSION) BAD("%s: heads file version %ld (this hachi reads %d)", path, v[0], HEADS_VERSION);
    long window;
    if (!next_line(f, line, &no, &too_long) || too_long || !key_int(line, "window", 1, HACHI_CTX_MAX, &window))
        BAD("%s: line %d: expected 'window <integer from 1 to %d>'", path, no, HACHI_CTX_MAX);
    char want[32];
    snprintf(want, sizeof want, "%016llx", (unsigned long long)hachi_model_id(m));
    if (strcmp(arch, m->arch_name) || v[3] != m->n_layer || v[4] != m->n_head || strcmp(model_hex, want)) {
        st = hachi_fail(HACHI_ERR_INVALID_ARG, "%s: heads file is for another model (%s, %ld layers, %ld heads, id %s; "
                        "'%s' is %s, %d layers, %d heads, id %s)", path, arch, v[3], v[4], model_hex, m->path,
                        m->arch_name, m->n_layer, m->n_head, want);
        goto done;
    }
    if ((st = heads_alloc(m, (int)v[5], (int)window, &h))) goto done;
    if (!(seen = hachi_calloc((size_t)m->n_layer, 1))) { st = HACHI_ERR_NOMEM; goto done; }
    while (next_line(f, line, &no, &too_long)) {
        if (too_long) BAD("%s: line %d: too long, or with a NUL byte", path, no);
        char *mask = NULL;
        errno = 0;
        const long layer = strncmp(line, "layer ", 6) || !isdigit((unsigned char)line[6]) ? -1 : strtol(line + 6, &mask, 10);
        if (!mask || mask == line + 6 || errno || *mask != ' ')
            BAD("%s: line %d: expected 'layer <index> <one of S or . per head>', got '%s'", path, no, line);
        mask++;
        if (layer < 0 || layer >= m->n_layer || !h->full[layer])
            BAD("%s: line %d: layer %ld is not a full-attention layer of the model", path, no, layer);
        if ((int)strlen(mask) != m->n_head || strspn(mask, "S.") != strlen(mask))
            BAD("%s: line %d: expected %d characters S or . for layer %ld, got '%s'", path, no, m->n_head, layer, mask);
        if (seen[layer]++) BAD("%s: line %d: layer %ld a second time", path, no, layer);
        h->stream[layer] = 0;
        for (int i = 0; i < m->n_head; i++) if (mask[i] == 'S') h->stream[layer] |= 1ull << i;
    }
    if (ferror(f)) st = hachi_fail(HACHI_ERR_IO, "%s: read error", path);
#undef BAD
done:
    fclose(f);
    hachi_free(seen);
    if (st) { hachi_heads_free(h); return st; }
    *out = h;
    return HACHI_OK;
}
