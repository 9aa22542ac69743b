/* prompt_cache: a session's state on disk, so a later run whose prompt starts
 * the same way prefills only the rest (DESIGN.md section 4, "prefix cache").
 *
 * The file is safetensors: an 8-byte little-endian header length, a JSON header
 * (padded with spaces to a multiple of 8), then the raw tensors back to back:
 *   tokens      I32 [n]          the ids that produced the state
 *   logits      F32 [n_vocab]    of tokens[n-1] (only when the session had them)
 *   kv.L.k/.v   F16|F32|I8 [rows][dim]  owner layer L's K/V rows of positions first..n-1
 *   kv.L.k_scale/.v_scale  F32 [rows][n_head_kv]  their per-head scales (int8 only)
 * and __metadata__ strings: format, version, model (an id of the weights: FNV-1a
 * over the tensors' names, types, shapes and first/last bytes), n_tokens, kv
 * (f16|f32|int8), kv.L.first, and the integrity checksums (CRC-32C, 8 hex digits):
 * crc.NAME of each tensor's bytes and crc.header of the 8-byte length and the header with
 * crc.header's own digits as zeros. A load checks them all, and that the tensors fill the
 * data section exactly, before it touches the session: a damaged, truncated or extended
 * file is refused with one line naming what is wrong. Full-attention caches keep every position (first
 * 0), sliding rings their last slots. The loader reads only this layout; any
 * other JSON, or sizes that disagree with the file or the session, is an error;
 * so is a file of another KV type (its rows would have to be converted, lossily).
 *
 * Restoring position r needs, per ring, the keys a query at r sees (r-window, r):
 * a prompt that extends the saved one (the usual reuse) always works; one that
 * leaves it earlier works down to about as many positions before its end as the rings have spare
 * slots (kv.h) on sliding layers (all the way on models without rings). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>
#include "crc32c.h"
#include "session.h"
#include "util.h"

#define PC_FORMAT "hachi-prompt-cache"
#define PC_VERSION "2"              /* 2: with the CRC-32C checksums */
#define PC_MAX_TENSORS 258   /* tokens, logits, K and V (values and scales) of up to 64 caches */
#define PC_MAX_HEADER (1u << 20)
#define PC_CRC_HEADER "\"crc.header\":\""   /* then 8 hex digits */

/* ---- saving --------------------------------------------------------------------------------- */

/* The settings besides the KV type that make the rows a session stores: its attention ("dense"
 * or "sparse PAGES") and its streaming heads ("none" or "CRC SINK WINDOW", CRC-32C of the layers'
 * masks). A file's rows restore only into a session that would have computed them. */
static void attn_desc(const hachi_session *s, char attn[32], char heads[32]) {
    if (s->sparse_pages) snprintf(attn, 32, "sparse %d", s->sparse_pages);
    else snprintf(attn, 32, "dense");
    uint32_t crc = 0;
    for (int l = 0; l < s->m->n_layer; l++) crc = hachi_crc32c(crc, &s->lp[l].stream, sizeof s->lp[l].stream);
    if (s->n_stream) snprintf(heads, 32, "%08x %d %d", crc, s->stream_sink, s->stream_window);
    else snprintf(heads, 32, "none");
}

/* CRC-32C of the rows of positions [first, n) of plane i of K (j 0) or V (1), as saved */
static uint32_t rows_crc(const hachi_kv *kv, int j, int i, const hachi_kv_plane *pl, int n) {
    uint32_t crc = 0;
    for (int p = hachi_kv_first(kv, n), run; p < n; p += run) {
        const char *rows = hachi_kv_rows(kv, j, i, p, n, &run);
        crc = hachi_crc32c(crc, rows, (size_t)run * (size_t)pl->cols * pl->elem);
    }
    return crc;
}

hachi_status hachi_session_save(const hachi_session *s, const int32_t *tokens, int32_t n, const char *path) {
    if (!s || !tokens || !path) return hachi_fail(HACHI_ERR_INVALID_ARG, "save: NULL session, tokens or path");
    if (n <= 0 || n != s->pos)
        return hachi_fail(HACHI_ERR_INVALID_ARG, "save: %d tokens given for a session at position %d", n, s->pos);
    const hachi_model *m = s->m;
    const bool logits = s->logits_pos == n - 1;
    const char *kvt = hachi_kv_type_name(s->kv_type);
    char attn[32], heads[32];
    attn_desc(s, attn, heads);
    size_t cap = 4096 + (size_t)s->n_kv * 1024, len = 0, off = 0;
    char *hdr = hachi_malloc(cap);
    if (!hdr) return HACHI_ERR_NOMEM;
#define PUT(...) (len += (size_t)snprintf(hdr + len, cap - len, __VA_ARGS__))
    PUT("{\"__metadata__\":{\"format\":\"" PC_FORMAT "\",\"version\":\"" PC_VERSION "\",\"model\":\"%016llx\","
        "\"n_tokens\":\"%d\",\"kv\":\"%s\",\"attn\":\"%s\",\"heads\":\"%s\"", (unsigned long long)hachi_model_id(m), n,
        kvt, attn, heads);
    for (int c = 0; c < s->n_kv; c++) PUT(",\"kv.%d.first\":\"%d\"", s->kv[c].owner, hachi_kv_first(&s->kv[c], n));
    PUT(",\"crc.tokens\":\"%08x\"", hachi_crc32c(0, tokens, (size_t)n * 4));
    if (logits) PUT(",\"crc.logits\":\"%08x\"", hachi_crc32c(0, s->logits, (size_t)m->n_vocab * 4));
    for (int c = 0; c < s->n_kv; c++) {
        const hachi_kv *kv = &s->kv[c];
        hachi_kv_plane pl[HACHI_KV_MAX_PLANES];
        const int np = hachi_kv_planes(kv, pl);
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < np; i++)
                PUT(",\"crc.kv.%d.%c%s\":\"%08x\"", kv->owner, j ? 'v' : 'k', pl[i].suffix, rows_crc(kv, j, i, &pl[i], n));
    }
    PUT("," PC_CRC_HEADER "00000000\"");
    PUT("},\"tokens\":{\"dtype\":\"I32\",\"shape\":[%d],\"data_offsets\":[0,%zu]}", n, (size_t)n * 4);
    off = (size_t)n * 4;
    if (logits) {
        PUT(",\"logits\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}", m->n_vocab, off,
            off + (size_t)m->n_vocab * 4);
        off += (size_t)m->n_vocab * 4;
    }
    for (int c = 0; c < s->n_kv; c++) {
        const hachi_kv *kv = &s->kv[c];
        hachi_kv_plane pl[HACHI_KV_MAX_PLANES];
        const int np = hachi_kv_planes(kv, pl);
        const size_t rows = (size_t)(n - hachi_kv_first(kv, n));
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < np; i++) {
                const size_t bytes = rows * (size_t)pl[i].cols * pl[i].elem;
                PUT(",\"kv.%d.%c%s\":{\"dtype\":\"%s\",\"shape\":[%zu,%d],\"data_offsets\":[%zu,%zu]}", kv->owner,
                    j ? 'v' : 'k', pl[i].suffix, pl[i].dtype, rows, pl[i].cols, off, off + bytes);
                off += bytes;
            }
    }
    PUT("}");
#undef PUT
    while (len % 8) hdr[len++] = ' ';
    if (len >= cap) { hachi_free(hdr); return hachi_fail(HACHI_ERR_INTERNAL, "save: the header outgrew its buffer"); }

    uint64_t hl = len;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hl >> (8 * i));
    char *digits = memmem(hdr, len, PC_CRC_HEADER, strlen(PC_CRC_HEADER));
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", hachi_crc32c(hachi_crc32c(0, le, 8), hdr, len));
    if (digits) memcpy(digits + strlen(PC_CRC_HEADER), hex, 8);

    char tmp[4096];
    int fd = -1;
    hachi_status st = hachi_replaceable(path);
    if (!st) st = hachi_tmp_create(path, tmp, sizeof tmp, &fd);
    FILE *f = st ? NULL : fdopen(fd, "wb");
    if (!f) {
        hachi_free(hdr);
        if (st) return st;
        close(fd);
        remove(tmp);
        return hachi_fail(HACHI_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    }
    bool ok = fwrite(le, 1, 8, f) == 8 && fwrite(hdr, 1, len, f) == len &&
              fwrite(tokens, 4, (size_t)n, f) == (size_t)n &&
              (!logits || fwrite(s->logits, 4, (size_t)m->n_vocab, f) == (size_t)m->n_vocab);
    for (int c = 0; ok && c < s->n_kv; c++) {
        const hachi_kv *kv = &s->kv[c];
        hachi_kv_plane pl[HACHI_KV_MAX_PLANES];
        const int np = hachi_kv_planes(kv, pl);
        for (int j = 0; ok && j < 2; j++)
            for (int i = 0; ok && i < np; i++)
                for (int p = hachi_kv_first(kv, n), run; ok && p < n; p += run) {
                    const char *rows = hachi_kv_rows(kv, j, i, p, n, &run);
                    ok = fwrite(rows, (size_t)pl[i].cols * pl[i].elem, (size_t)run, f) == (size_t)run;
                }
    }
    ok = (fclose(f) == 0) && ok;
    hachi_free(hdr);
    if (!ok || rename(tmp, path) != 0) {
        const int e = errno;
        remove(tmp);
        return hachi_fail(HACHI_ERR_IO, "cannot write the prompt cache '%s': %s", path, strerror(e));
    }
    return HACHI_OK;
}

/* ---- the header: exactly the JSON hachi_session_save writes ---------------------------------- */

typedef struct { const char *p, *end; } js;
typedef struct { char name[32], dtype[8]; int64_t shape[2]; int n_shape; uint64_t a, b; } pc_tensor;
typedef struct {
    char format[32], version[32], model[32], kv[32], attn[32], heads[32];   /* attn, heads: attn_desc's */
    int64_t n_tokens;
    int first[64], first_owner[64], n_first;
    char crc_name[PC_MAX_TENSORS][32];   /* crc.NAME: the tensor NAME's checksum */
    uint32_t crc[PC_MAX_TENSORS];
    int n_crc;
    bool header_crc;                     /* crc.header present */
    pc_tensor t[PC_MAX_TENSORS];
    int n_t;
} pc_header;

static void ws(js *j) { while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r')) j->p++; }
static bool lit(js *j, char c) { ws(j); if (j->p < j->end && *j->p == c) { j->p++; return true; } return false; }

/* a string without escapes into buf (cap bytes with the NUL) */
static bool jstr(js *j, char *buf, size_t cap) {
    if (!lit(j, '"')) return false;
    size_t n = 0;
    while (j->p < j->end && *j->p != '"') {
        if (*j->p == '\\' || n + 1 >= cap) return false;
        buf[n++] = *j->p++;
    }
    buf[n] = 0;
    return lit(j, '"');
}

static bool jint(js *j, int64_t *v) {
    ws(j);
    int64_t x = 0;
    const char *s = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (x > (INT64_MAX - 9) / 10) return false;
        x = x * 10 + (*j->p++ - '0');
    }
    *v = x;
    return j->p > s;
}

static bool jints(js *j, int64_t *v, int max, int *n) {
    if (!lit(j, '[')) return false;
    for (*n = 0; *n < max; (*n)++) {
        if (!jint(j, &v[*n])) return false;
        if (lit(j, ']')) { (*n)++; return true; }
        if (!lit(j, ',')) return false;
    }
    return false;
}

/* a decimal integer at s (digits, optional '-'); *end after it */
static bool parse_i64(const char *s, int64_t *out, const char **end) {
    char *e = (char *)s;
    errno = 0;
    long long v = strtoll(s, &e, 10);
    *end = e;
    *out = v;
    return e != s && errno == 0 && (*s == '-' || (*s >= '0' && *s <= '9'));
}

static bool parse_meta(js *j, pc_header *h) {
    if (!lit(j, '{')) return false;
    do {
        char k[32] = "", v[32] = "";
        if (!jstr(j, k, sizeof k) || !lit(j, ':') || !jstr(j, v, sizeof v)) return false;
        int64_t num, first;
        const char *end;
        if (!strcmp(k, "format")) snprintf(h->format, sizeof h->format, "%s", v);
        else if (!strcmp(k, "version")) snprintf(h->version, sizeof h->version, "%s", v);
        else if (!strcmp(k, "model")) snprintf(h->model, sizeof h->model, "%s", v);
        else if (!strcmp(k, "kv")) snprintf(h->kv, sizeof h->kv, "%s", v);
        else if (!strcmp(k, "attn")) snprintf(h->attn, sizeof h->attn, "%s", v);
        else if (!strcmp(k, "heads")) snprintf(h->heads, sizeof h->heads, "%s", v);
        else if (!strcmp(k, "n_tokens")) { if (!parse_i64(v, &h->n_tokens, &end) || *end) return false; }
        else if (!strcmp(k, "crc.header")) h->header_crc = true;   /* checked on the raw bytes */
        else if (!strncmp(k, "crc.", 4) && h->n_crc < PC_MAX_TENSORS) {
            char *e = NULL;
            unsigned long x = strtoul(v, &e, 16);
            if (strlen(v) != 8 || *e || x > 0xffffffffUL) return false;
            snprintf(h->crc_name[h->n_crc], sizeof h->crc_name[0], "%s", k + 4);
            h->crc[h->n_crc++] = (uint32_t)x;
        }
        else if (!strncmp(k, "kv.", 3) && parse_i64(k + 3, &num, &end) && !strcmp(end, ".first") &&
                 num >= 0 && num < 4096 && h->n_first < 64) {
            if (!parse_i64(v, &first, &end) || *end || first < 0 || first > INT32_MAX) return false;
            h->first[h->n_first] = (int)first;
            h->first_owner[h->n_first++] = (int)num;
        } else return false;
    } while (lit(j, ','));
    return lit(j, '}');
}

static bool parse_tensor(js *j, pc_tensor *t) {
    if (!lit(j, '{')) return false;
    int seen = 0;
    do {
        char k[16];
        int64_t off[2];
        int n;
        if (!jstr(j, k, sizeof k) || !lit(j, ':')) return false;
        if (!strcmp(k, "dtype") && jstr(j, t->dtype, sizeof t->dtype)) seen |= 1;
        else if (!strcmp(k, "shape") && jints(j, t->shape, 2, &t->n_shape)) seen |= 2;
        else if (!strcmp(k, "data_offsets") && jints(j, off, 2, &n) && n == 2) { t->a = (uint64_t)off[0]; t->b = (uint64_t)off[1]; seen |= 4; }
        else return false;
    } while (lit(j, ','));
    return seen == 7 && lit(j, '}');
}

static bool parse_header(const char *p, size_t n, pc_header *h) {
    js j = {p, p + n};
    memset(h, 0, sizeof *h);
    h->n_tokens = -1;
    snprintf(h->attn, sizeof h->attn, "dense");   /* files from before these keys: a dense session's */
    snprintf(h->heads, sizeof h->heads, "none");
    if (!lit(&j, '{')) return false;
    do {
        char k[32];
        if (!jstr(&j, k, sizeof k) || !lit(&j, ':')) return false;
        if (!strcmp(k, "__metadata__")) { if (!parse_meta(&j, h)) return false; continue; }
        if (h->n_t == PC_MAX_TENSORS) return false;
        pc_tensor *t = &h->t[h->n_t++];
        snprintf(t->name, sizeof t->name, "%s", k);
        if (!parse_tensor(&j, t)) return false;
    } while (lit(&j, ','));
    if (!lit(&j, '}')) return false;
    ws(&j);
    return j.p == j.end;
}

static const pc_tensor *find(const pc_header *h, const char *name) {
    for (int i = 0; i < h->n_t; i++) if (!strcmp(h->t[i].name, name)) return &h->t[i];
    return NULL;
}

/* kv.<owner>.first of the metadata, -1 when absent */
static int file_first(const pc_header *h, int owner) {
    int first = -1;
    for (int i = 0; i < h->n_first; i++) if (h->first_owner[i] == owner) first = h->first[i];
    return first;
}

/* The tensor name, of dtype and shape [d0] (d1 < 0) or [d0][d1], inside the data section. */
static hachi_status check_tensor(const pc_tensor *t, const char *name, const char *dtype, int64_t d0, int64_t d1,
                                 size_t elem, uint64_t data_size, const char *path) {
    if (!t) return hachi_fail(HACHI_ERR_FORMAT, "prompt cache '%s': no tensor %s", path, name);
    const int nd = d1 < 0 ? 1 : 2;
    uint64_t bytes = (uint64_t)d0 * (uint64_t)(d1 < 0 ? 1 : d1) * elem;
    if (strcmp(t->dtype, dtype) || t->n_shape != nd || t->shape[0] != d0 || (nd == 2 && t->shape[1] != d1) ||
        t->b < t->a || t->b - t->a != bytes || t->b > data_size) {
        char shape[48];
        if (nd == 2) snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)d0, (long long)d1);
        else snprintf(shape, sizeof shape, "[%lld]", (long long)d0);
        return hachi_fail(HACHI_ERR_FORMAT, "prompt cache '%s': tensor %s is not %s %s within the file", path, name, dtype,
                          shape);
    }
    return HACHI_OK;
}

/* ---- loading -------------------------------------------------------------------------------- */

static bool read_at(FILE *f, uint64_t off, void *dst, size_t n) {
    return fseeko(f, (off_t)off, SEEK_SET) == 0 && fread(dst, 1, n, f) == n;
}

/* The checksum of the header: over the 8 length bytes and the header, crc.header's digits as
 * zeros. false when the header has no crc.header. */
static bool header_crc(const unsigned char le[8], const char *hdr, size_t hl, uint32_t *computed, uint32_t *stored) {
    const char *at = memmem(hdr, hl, PC_CRC_HEADER, strlen(PC_CRC_HEADER));
    const size_t d = at ? (size_t)(at - hdr) + strlen(PC_CRC_HEADER) : 0;
    if (!at || d + 8 > hl) return false;
    char digits[9];
    memcpy(digits, hdr + d, 8);
    digits[8] = 0;
    char *e = NULL;
    *stored = (uint32_t)strtoul(digits, &e, 16);
    if (*e) *stored = ~hachi_crc32c(0, digits, 8);   /* not hex: cannot match what is computed below */
    uint32_t c = hachi_crc32c(hachi_crc32c(0, le, 8), hdr, d);
    c = hachi_crc32c(c, "00000000", 8);
    *computed = hachi_crc32c(c, hdr + d + 8, hl - d - 8);
    return true;
}

/* Every tensor's checksum, and the tensors filling the data section [base, base + data) exactly. */
static hachi_status verify_tensors(FILE *f, const pc_header *h, uint64_t base, uint64_t data, const char *path) {
    enum { CHUNK = 1 << 20 };
    char *buf = hachi_malloc(CHUNK);
    if (!buf) return HACHI_ERR_NOMEM;
    hachi_status st = HACHI_OK;
    uint64_t used = 0, end = 0;
    for (int i = 0; i < h->n_t && !st; i++) {
        const pc_tensor *t = &h->t[i];
        int k = 0;
        while (k < h->n_crc && strcmp(h->crc_name[k], t->name)) k++;
        if (k == h->n_crc) { st = hachi_fail(HACHI_ERR_FORMAT, "prompt cache '%s' is damaged: no checksum for tensor %s", path, t->name); break; }
        if (t->b < t->a || t->b > data) {
            st = hachi_fail(HACHI_ERR_FORMAT, "prompt cache '%s' is damaged: tensor %s ends at byte %llu of a %llu-byte data section (truncated?)",
                            path, t->name, (unsigned long long)t->b, (unsigned long long)data);
            break;
        }
        uint32_t crc = 0;
        for (uint64_t o = t->a; o < t->b && !st; o += CHUNK) {
            const size_t n = (size_t)HACHI_MIN((uint64_t)CHUNK, t->b - o);
            if (!read_at(f, base + o, buf, n)) st = hachi_fail(HACHI_ERR_IO, "cannot read '%s'", path);
            else crc = hachi_crc32c(crc, buf, n);
        }
        if (!st && crc != h->crc[k])
            st = hachi_fail(HACHI_ERR_FORMAT, "prompt cache '%s' is damaged: tensor %s has CRC-32C %08x, the file says %08x",
                            path, t->name, crc, h->crc[k]);
        used += t->b - t->a;
        end = HACHI_MAX(end, t->b);
    }
    if (!st && (used != data || end != data))
        st = hachi_fail(HACHI_ERR_FORMAT, "prompt cache '%s' is damaged: %llu bytes of data, the tensors cover %llu (bytes appended?)",
                        path, (unsigned long long)data, (unsigned long long)used);
    hachi_free(buf);
    return st;
}

/* The file's tensor of a cache's K (j 0) or V (1) plane, its name into name */
static const pc_tensor *kv_tensor(const pc_header *h, const hachi_kv *kv, int j, const hachi_kv_plane *pl, char name[32]) {
    snprintf(name, 32, "kv.%d.%c%s", kv->owner, j ? 'v' : 'k', pl->suffix);
    return find(h, name);
}

/* Every tensor a load of this model's file may read, of its shape: the tokens, the logits when
 * there, each cache's rows from its first position; checked before the session drops anything. */
static hachi_status check_layout(const hachi_session *s, const pc_header *h, const pc_tensor *tt, const pc_tensor *lt,
                                 uint64_t data, const char *path) {
    const int64_t nf = h->n_tokens;
    hachi_status st;
    if (nf <= 0 || nf > INT32_MAX / 4) return hachi_fail(HACHI_ERR_FORMAT, "prompt cache '%s': n_tokens %lld", path, (long long)nf);
    if ((st = check_tensor(tt, "tokens", "I32", nf, -1, 4, data, path))) return st;
    if (lt && (st = check_tensor(lt, "logits", "F32", s->m->n_vocab, -1, 4, data, path))) return st;
    for (int k = 0; k < s->n_kv; k++) {
        const hachi_kv *kv = &s->kv[k];
        const int first = file_first(h, kv->owner);
        if (first < 0 || first > nf) return hachi_fail(HACHI_ERR_FORMAT, "prompt cache '%s': no rows for layer %d", path, kv->owner);
        hachi_kv_plane pl[HACHI_KV_MAX_PLANES];
        const int np = hachi_kv_planes(kv, pl);
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < np; i++) {
                char name[32];
                const pc_tensor *t = kv_tensor(h, kv, j, &pl[i], name);
                if ((st = check_tensor(t, name, pl[i].dtype, nf - first, pl[i].cols, pl[i].elem, data, path))) return st;
            }
    }
    return HACHI_OK;
}

hachi_status hachi_session_load(hachi_session *s, const char *path, const int32_t *tokens, int32_t n,
                                int32_t *n_loaded) {
    if (!s || !path || !tokens || n <= 0 || !n_loaded) return hachi_fail(HACHI_ERR_INVALID_ARG, "load: bad arguments");
    *n_loaded = 0;
    const hachi_model *m = s->m;
    bool dropped = false;   /* the session's state, kept while only the header was read */
    hachi_status st = hachi_readable_file(path, "the prompt cache");
    if (st) return st;
    FILE *f = fopen(path, "rb");
    if (!f) return hachi_fail(HACHI_ERR_IO, "cannot open the prompt cache '%s': %s", path, strerror(errno));
    char *hdr = NULL;
    int32_t *ftok = NULL;
    pc_header *h = hachi_calloc(1, sizeof *h);
    unsigned char le[8];
    uint64_t hl = 0, size = 0;
    if (!h) { st = HACHI_ERR_NOMEM; goto out; }
    if (fseeko(f, 0, SEEK_END) == 0) size = (uint64_t)ftello(f);
    if (!read_at(f, 0, le, 8)) { st = hachi_fail(HACHI_ERR_FORMAT, "'%s' is not a hachi prompt cache (under 8 bytes)", path); goto out; }
    for (int i = 0; i < 8; i++) hl |= (uint64_t)le[i] << (8 * i);
    if (hl == 0 || hl > PC_MAX_HEADER || hl > size - 8) {
        st = hachi_fail(HACHI_ERR_FORMAT, "'%s' is not a hachi prompt cache (a header of %llu bytes does not fit the file)",
                        path, (unsigned long long)hl);
        goto out;
    }
    if (!(hdr = hachi_malloc(hl))) { st = HACHI_ERR_NOMEM; goto out; }
    uint32_t crc_now = 0, crc_file = 0;
    const bool read_ok = read_at(f, 8, hdr, hl);
    if (read_ok && header_crc(le, hdr, hl, &crc_now, &crc_file) && crc_now != crc_file) {
        st = hachi_fail(HACHI_ERR_FORMAT, "prompt cache '%s' is damaged: its header has CRC-32C %08x, the file says %08x",
                        path, crc_now, crc_file);
        goto out;
    }
    if (!read_ok || !parse_header(hdr, hl, h) || strcmp(h->format, PC_FORMAT)) {
        st = hachi_fail(HACHI_ERR_FORMAT, "'%s' is not a hachi prompt cache (safetensors header not understood)", path);
        goto out;
    }
    if (strcmp(h->version, PC_VERSION)) {
        st = hachi_fail(HACHI_ERR_UNSUPPORTED, "prompt cache '%s': version %s (this hachi reads %s)", path, h->version, PC_VERSION);
        goto out;
    }
    if (!h->header_crc) { st = hachi_fail(HACHI_ERR_FORMAT, "prompt cache '%s' is damaged: no crc.header", path); goto out; }
    if ((st = verify_tensors(f, h, 8 + hl, size - 8 - hl, path))) goto out;
    char id[24];
    snprintf(id, sizeof id, "%016llx", (unsigned long long)hachi_model_id(m));
    const bool same_model = !strcmp(h->model, id) && h->n_first == s->n_kv;
    if (same_model && strcmp(h->kv, hachi_kv_type_name(s->kv_type))) {
        st = hachi_fail(HACHI_ERR_UNSUPPORTED, "prompt cache '%s' holds %s KV rows, this session stores %s: not loaded",
                        path, h->kv, hachi_kv_type_name(s->kv_type));
        goto out;
    }
    char attn[32], heads[32];
    attn_desc(s, attn, heads);
    if (same_model && (strcmp(h->attn, attn) || strcmp(h->heads, heads))) {
        st = hachi_fail(HACHI_ERR_UNSUPPORTED, "prompt cache '%s' holds the rows of %s attention with streaming heads %s, "
                        "this session computes %s attention with streaming heads %s: not loaded", path, h->attn, h->heads,
                        attn, heads);
        goto out;
    }
    const uint64_t base = 8 + hl, data = size - base;
    const int64_t nf = h->n_tokens;
    const pc_tensor *tt = find(h, "tokens"), *lt = find(h, "logits");
    if (same_model && (st = check_layout(s, h, tt, lt, data, path))) goto out;
    if (same_model && !(ftok = hachi_malloc((size_t)nf * 4))) { st = HACHI_ERR_NOMEM; goto out; }
    if (same_model && !read_at(f, base + tt->a, ftok, (size_t)nf * 4)) { st = hachi_fail(HACHI_ERR_IO, "cannot read '%s'", path); goto out; }
    dropped = true;
    s->pos = 0;
    s->logits_pos = -1;
    s->hidden_lo = s->hidden_hi = 0;   /* no forward's hidden rows: a drafter drafts after the next one */
    for (int c = 0; c < s->n_kv; c++) hachi_kv_restored_from(&s->kv[c], 0);
    if (!same_model) goto out;   /* another model: nothing to reuse, not an error */

    /* the position to restore: the common prefix, less the last prompt token when its
     * logits are not in the file (the caller evaluates it) */
    int32_t c = 0;
    while (c < n && c < nf && ftok[c] == tokens[c]) c++;
    const bool with_logits = lt && c == n && c == nf;
    int32_t r = with_logits ? c : HACHI_MIN(c, n - 1);
    if (r > s->n_ctx) r = 0;
    for (int k = 0; k < s->n_kv && r > 0; k++) {   /* each cache must hold what a query at r sees */
        const hachi_kv *kv = &s->kv[k];
        if (file_first(h, kv->owner) > (kv->window ? HACHI_MAX(0, r - kv->window + 1) : 0)) r = 0;
    }
    for (int k = 0; k < s->n_kv && r > 0; k++) {
        hachi_kv *kv = &s->kv[k];
        const int first = file_first(h, kv->owner), from = HACHI_MAX(first, hachi_kv_first(kv, r));
        hachi_kv_plane pl[HACHI_KV_MAX_PLANES];
        const int np = hachi_kv_planes(kv, pl);
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < np; i++) {
                char name[32];
                const pc_tensor *t = kv_tensor(h, kv, j, &pl[i], name);
                const size_t rb = (size_t)pl[i].cols * pl[i].elem;
                /* positions from..r-1, one read per run of consecutive slots (a ring wraps once) */
                for (int p = from, run; p < r; p += run) {
                    char *rows = hachi_kv_rows(kv, j, i, p, r, &run);
                    if (!read_at(f, base + t->a + (uint64_t)(p - first) * rb, rows, (size_t)run * rb)) {
                        st = hachi_fail(HACHI_ERR_IO, "cannot read '%s'", path);
                        goto out;
                    }
                }
            }
        hachi_kv_restored_from(kv, from);
        hachi_kv_rebuild_pages(kv, r);
    }
    if (with_logits && r == c) {
        if (!read_at(f, base + lt->a, s->logits, (size_t)m->n_vocab * 4)) { st = hachi_fail(HACHI_ERR_IO, "cannot read '%s'", path); goto out; }
        s->logits_pos = r - 1;
    }
    s->pos = r;
    *n_loaded = r;
out:
    if (st && dropped) {
        s->pos = 0;
        for (int c = 0; c < s->n_kv; c++) hachi_kv_restored_from(&s->kv[c], 0);
    }
    fclose(f);
    hachi_free(hdr);
    hachi_free(ftok);
    hachi_free(h);
    return st;
}
