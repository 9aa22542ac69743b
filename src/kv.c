/* kv: one owning layer's K/V rows: storage type, ring or linear layout, the
 * pending rows of a forward, commit, rewind bounds, and the row access of the
 * prompt cache. The only place that knows slot = position % n_slots and which
 * element type a row holds (int8 quantization included). */
#include <math.h>
#include <string.h>
#include "kv.h"
#include "util.h"

const char *hachi_kv_type_name(hachi_kv_type type) {
    return type == HACHI_KV_F32 ? "f32" : type == HACHI_KV_INT8 ? "int8" : type == HACHI_KV_F16 ? "f16" : "unknown";
}

static size_t elem_size(hachi_kv_type type) { return type == HACHI_KV_F32 ? 4 : type == HACHI_KV_INT8 ? 1 : 2; }
static int scales_of(hachi_kv_type type, int n_head_kv) { return type == HACHI_KV_INT8 ? n_head_kv : 0; }

size_t hachi_kv_row_bytes(hachi_kv_type type, int n_head_kv, int head_dim) {
    return (size_t)n_head_kv * head_dim * elem_size(type) + (size_t)scales_of(type, n_head_kv) * sizeof(float);
}

int hachi_kv_planes(const hachi_kv *kv, hachi_kv_plane pl[HACHI_KV_MAX_PLANES]) {
    static const char *const dtypes[] = {[HACHI_KV_F16] = "F16", [HACHI_KV_F32] = "F32", [HACHI_KV_INT8] = "I8"};
    pl[0] = (hachi_kv_plane){"", dtypes[kv->type], kv->dim, elem_size(kv->type)};
    if (!kv->n_scales) return 1;
    pl[1] = (hachi_kv_plane){"_scale", "F32", kv->n_scales, sizeof(float)};
    return 2;
}

static int slot_of(const hachi_kv *kv, int pos) { return kv->ring ? pos % kv->n_slots : pos; }

static bool is_ring(int window, int n_ctx) { return window > 0 && window + HACHI_SPEC_SLOTS < n_ctx; }

static int n_pages_of(int window, int n_ctx, bool pages) {
    return pages && !is_ring(window, n_ctx) ? n_ctx / HACHI_PAGE : 0;
}

size_t hachi_kv_plan_bytes(int n_head_kv, int head_dim, int window, int n_ctx, int n_pending, hachi_kv_type type,
                           bool pages) {
    const size_t slots = is_ring(window, n_ctx) ? (size_t)window + HACHI_SPEC_SLOTS : (size_t)n_ctx;
    return 2 * (slots + (size_t)n_pending) * hachi_kv_row_bytes(type, n_head_kv, head_dim) +
           2 * (size_t)n_pages_of(window, n_ctx, pages) * (size_t)n_head_kv * head_dim * sizeof(uint16_t);
}

/* bytes of a whole row, values and scales */
static size_t full_row(const hachi_kv *kv) { return kv->row_bytes + (size_t)kv->n_scales * sizeof(float); }

hachi_status hachi_kv_init(hachi_kv *kv, int owner, int n_head_kv, int head_dim, int window, int n_ctx, int n_pending,
                           hachi_kv_type type, bool pages, size_t *bytes) {
    memset(kv, 0, sizeof *kv);
    if (type == HACHI_KV_INT8 && head_dim > HACHI_KV_INT8_HD_MAX)   /* the exact sums of attn_scores_i8 */
        return hachi_fail(HACHI_ERR_UNSUPPORTED, "int8 K/V: head dim %d is over %d", head_dim, HACHI_KV_INT8_HD_MAX);
    kv->owner = owner;
    kv->dim = n_head_kv * head_dim;
    kv->n_head_kv = n_head_kv;
    kv->window = window;
    kv->type = type;
    kv->ring = is_ring(window, n_ctx);
    kv->n_slots = kv->ring ? window + HACHI_SPEC_SLOTS : n_ctx;
    kv->n_pending = n_pending;
    kv->row_bytes = (size_t)kv->dim * elem_size(type);
    kv->n_scales = scales_of(type, n_head_kv);
    const size_t held = (size_t)kv->n_slots * kv->row_bytes, pend = (size_t)n_pending * kv->row_bytes;
    const size_t held_sc = (size_t)kv->n_slots * kv->n_scales * sizeof(float);
    const size_t pend_sc = (size_t)n_pending * kv->n_scales * sizeof(float);
    kv->k = hachi_aligned_alloc(held);
    kv->v = hachi_aligned_alloc(held);
    kv->kp = hachi_aligned_alloc(pend);
    kv->vp = hachi_aligned_alloc(pend);
    bool ok = kv->k && kv->v && kv->kp && kv->vp;
    if (kv->n_scales) {
        kv->ks = hachi_aligned_alloc(held_sc);
        kv->vs = hachi_aligned_alloc(held_sc);
        kv->ksp = hachi_aligned_alloc(pend_sc);
        kv->vsp = hachi_aligned_alloc(pend_sc);
        ok = ok && kv->ks && kv->vs && kv->ksp && kv->vsp;
    }
    kv->n_pages = n_pages_of(window, n_ctx, pages);
    const size_t meta = (size_t)kv->n_pages * (size_t)kv->dim * sizeof(uint16_t);
    if (meta) {
        kv->kmin = hachi_aligned_alloc(meta);
        kv->kmax = hachi_aligned_alloc(meta);
        ok = ok && kv->kmin && kv->kmax;
    }
    if (!ok) {
        hachi_kv_free(kv);
        return HACHI_ERR_NOMEM;
    }
    *bytes += 2 * (held + pend + held_sc + pend_sc + meta);
    return HACHI_OK;
}

void hachi_kv_free(hachi_kv *kv) {
    if (!kv) return;
    hachi_free(kv->k); hachi_free(kv->v); hachi_free(kv->kp); hachi_free(kv->vp);
    hachi_free(kv->ks); hachi_free(kv->vs); hachi_free(kv->ksp); hachi_free(kv->vsp);
    hachi_free(kv->kmin); hachi_free(kv->kmax);
    kv->k = kv->v = kv->kp = kv->vp = NULL;
    kv->ks = kv->vs = kv->ksp = kv->vsp = NULL;
    kv->kmin = kv->kmax = NULL;
}

size_t hachi_kv_bytes(const hachi_kv *kv) { return (size_t)kv->n_slots * full_row(kv) * 2; }

size_t hachi_kv_bytes_keys(const hachi_kv *kv, int keys) { return (size_t)keys * full_row(kv) * 2; }

size_t hachi_kv_bytes_read(const hachi_kv *kv, int depth, int sparse_pages) {
    const int pages = depth / HACHI_PAGE + 1;
    if (kv->n_pages && sparse_pages && pages > sparse_pages)   /* the selected rows + the candidates' min/max */
        return (size_t)sparse_pages * HACHI_PAGE * full_row(kv) * 2 +
               (size_t)(pages - 3) * kv->dim * sizeof(uint16_t) * 2;
    const int keys = kv->window > 0 ? HACHI_MIN(depth, kv->window) : depth;
    return (size_t)keys * full_row(kv) * 2;
}

/* ---- int8 rows: per head, scale = max|x| / 127, q = round(x / scale) ------------------------ */

/* n heads of hd at x into q, their scales into sc (kernels.h's quant_rows_i8) */
static void quantize_row(const hachi_kv *kv, const hachi_kernels *kern, const float *x, int8_t *q, float *sc) {
    kern->quant_rows_i8(x, kv->n_head_kv, kv->dim / kv->n_head_kv, q, sc);
}

/* buf: the scales [G], the whole numbers as f32 [G][hd], then the int8 rows [G][hd] */
size_t hachi_kv_query_floats(int G, int hd) { return (size_t)G * (1 + (size_t)hd + ((size_t)hd + 3) / 4); }

hachi_kv_query hachi_kv_query_prepare(const hachi_kv *kv, const hachi_kernels *kern, const float *q, int G, int hd,
                                      float *buf) {
    hachi_kv_query r = {.f = q};
    if (kv->type != HACHI_KV_INT8) return r;
    float *qs = buf, *qf = qs + G;
    int8_t *q8 = (int8_t *)(qf + (size_t)G * hd);
    kern->quant_rows_i8(q, G, hd, q8, qs);
    for (size_t i = 0; i < (size_t)G * hd; i++) qf[i] = q8[i];
    r.i8 = (hachi_query_i8){q8, qf, qs};
    return r;
}

/* ---- page metadata: per dimension min and max of a page's keys, fp16 ---------------------- */

/* element i of a row as stored (int8: dequantized with its head's scale of sc) */
static float elem(const hachi_kv *kv, const char *row, const float *sc, int i) {
    switch (kv->type) {
    // cppcheck-suppress invalidPointerCast ; an f32 cache's rows are f32 arrays (64-byte aligned allocations)
    case HACHI_KV_F32: return ((const float *)row)[i];
    case HACHI_KV_INT8: return sc[i / (kv->dim / kv->n_head_kv)] * ((const int8_t *)row)[i];
    default: return hachi_f16_to_f32(((const uint16_t *)row)[i]);
    }
}

/* merges the key row of position pos (scales sc) into its page (the first row of a page starts it) */
static void page_add(hachi_kv *kv, int pos, const char *row, const float *sc) {
    const int p = pos / HACHI_PAGE;
    uint16_t *lo = kv->kmin + (size_t)p * kv->dim, *hi = kv->kmax + (size_t)p * kv->dim;
    const bool first = pos % HACHI_PAGE == 0;
    for (int i = 0; i < kv->dim; i++) {
        const float x = elem(kv, row, sc, i);
        lo[i] = first || x < hachi_f16_to_f32(lo[i]) ? hachi_f32_to_f16(x) : lo[i];
        hi[i] = first || x > hachi_f16_to_f32(hi[i]) ? hachi_f32_to_f16(x) : hi[i];
    }
}

/* the held key row of position p (linear caches: slot p) into its page */
static void page_add_held(hachi_kv *kv, int p) {
    page_add(kv, p, kv->k + (size_t)p * kv->row_bytes, kv->type == HACHI_KV_INT8 ? kv->ks + (size_t)p * kv->n_scales : NULL);
}

void hachi_kv_rebuild_pages(hachi_kv *kv, int pos) {
    if (!kv->n_pages) return;
    for (int p = 0; p < pos; p++) page_add_held(kv, p);
}

void hachi_kv_rewound(hachi_kv *kv, int pos) {
    if (!kv->n_pages) return;
    for (int p = pos / HACHI_PAGE * HACHI_PAGE; p < pos; p++) page_add_held(kv, p);
}

void hachi_kv_page_scores(const hachi_kv *kv, const hachi_kernels *kern, int g, int hd, const float *qpos,
                          const float *qneg, int p0, int p1, float *out, float *tmp) {
    if (p1 <= p0) return;
    const size_t off = (size_t)p0 * kv->dim + (size_t)g * hd;
    kern->attn_scores_f16(hd, p1 - p0, kv->kmax + off, kv->dim, qpos, 1, out);
    kern->attn_scores_f16(hd, p1 - p0, kv->kmin + off, kv->dim, qneg, 1, tmp);
    for (int i = 0; i < p1 - p0; i++) out[i] += tmp[i];
}

void hachi_kv_stage(hachi_kv *kv, const hachi_kernels *kern, int p0, int t, const float *k, const float *v) {
    char *kd = kv->kp + (size_t)t * kv->row_bytes, *vd = kv->vp + (size_t)t * kv->row_bytes;
    float *ksd = NULL;   /* the key row's scales (int8) */
    switch (kv->type) {
    case HACHI_KV_F32:
        memcpy(kd, k, kv->row_bytes);
        memcpy(vd, v, kv->row_bytes);
        break;
    case HACHI_KV_INT8:
        ksd = kv->ksp + (size_t)t * kv->n_scales;
        quantize_row(kv, kern, k, (int8_t *)kd, ksd);
        quantize_row(kv, kern, v, (int8_t *)vd, kv->vsp + (size_t)t * kv->n_scales);
        break;
    default:
        kern->f32_to_f16(k, (uint16_t *)kd, kv->dim);
        kern->f32_to_f16(v, (uint16_t *)vd, kv->dim);
    }
    if (kv->n_pages) page_add(kv, p0 + t, kd, ksd);
}

hachi_kv_run hachi_kv_segment(const hachi_kv *kv, int a, int b, int p0) {
    hachi_kv_run r = {0};
    if (a >= p0) {   /* this forward's rows */
        const size_t t = (size_t)(a - p0);
        r.k = kv->kp + t * kv->row_bytes;
        r.v = kv->vp + t * kv->row_bytes;
        if (kv->n_scales) { r.ks = kv->ksp + t * kv->n_scales; r.vs = kv->vsp + t * kv->n_scales; }
        r.n = b - a;
        return r;
    }
    const int slot = slot_of(kv, a);
    r.n = HACHI_MIN(b, p0) - a;
    if (kv->ring) r.n = HACHI_MIN(r.n, kv->n_slots - slot);
    r.k = kv->k + (size_t)slot * kv->row_bytes;
    r.v = kv->v + (size_t)slot * kv->row_bytes;
    if (kv->n_scales) { r.ks = kv->ks + (size_t)slot * kv->n_scales; r.vs = kv->vs + (size_t)slot * kv->n_scales; }
    return r;
}

void hachi_kv_commit(hachi_kv *kv, int p0, int n) {
    const size_t sb = (size_t)kv->n_scales * sizeof(float);
    for (int t = 0; t < n; t++) {
        const size_t slot = (size_t)slot_of(kv, p0 + t);
        memcpy(kv->k + slot * kv->row_bytes, kv->kp + (size_t)t * kv->row_bytes, kv->row_bytes);
        memcpy(kv->v + slot * kv->row_bytes, kv->vp + (size_t)t * kv->row_bytes, kv->row_bytes);
        if (sb) {
            memcpy(kv->ks + slot * kv->n_scales, kv->ksp + (size_t)t * kv->n_scales, sb);
            memcpy(kv->vs + slot * kv->n_scales, kv->vsp + (size_t)t * kv->n_scales, sb);
        }
    }
}

int hachi_kv_first(const hachi_kv *kv, int pos) {
    return HACHI_MAX(kv->valid_from, kv->ring ? pos - kv->n_slots : 0);
}

void hachi_kv_restored_from(hachi_kv *kv, int pos) { kv->valid_from = pos; }

/* a ring at cur keeps positions [cur - n_slots, cur): a query at pos needs (pos - window, pos) */
bool hachi_kv_can_rewind(const hachi_kv *kv, int pos, int cur) {
    if (!kv->ring || pos == 0) return true;
    return HACHI_MAX(0, pos - kv->window + 1) >= HACHI_MAX(cur - kv->n_slots, kv->valid_from);
}

char *hachi_kv_rows(const hachi_kv *kv, int which, int plane, int p, int end, int *n) {
    const int slot = slot_of(kv, p);
    *n = kv->ring ? HACHI_MIN(end - p, kv->n_slots - slot) : end - p;
    if (plane) return (char *)((which ? kv->vs : kv->ks) + (size_t)slot * kv->n_scales);
    return (which ? kv->v : kv->k) + (size_t)slot * kv->row_bytes;
}

size_t hachi_kv_ring_bytes(const hachi_kv *kv) {
    return kv->ring ? 2 * (size_t)kv->n_slots * (kv->row_bytes + (size_t)kv->n_scales * sizeof(float)) : 0;
}

void hachi_kv_ring_copy(const hachi_kv *kv, void *dst) {
    if (!kv->ring) return;
    const size_t rows = (size_t)kv->n_slots * kv->row_bytes, sc = (size_t)kv->n_slots * kv->n_scales * sizeof(float);
    char *d = dst;
    memcpy(d, kv->k, rows);
    memcpy(d + rows, kv->v, rows);
    if (sc) { memcpy(d + 2 * rows, kv->ks, sc); memcpy(d + 2 * rows + sc, kv->vs, sc); }
}

void hachi_kv_ring_restore(hachi_kv *kv, const void *src) {
    if (!kv->ring) return;
    const size_t rows = (size_t)kv->n_slots * kv->row_bytes, sc = (size_t)kv->n_slots * kv->n_scales * sizeof(float);
    const char *s = src;
    memcpy(kv->k, s, rows);
    memcpy(kv->v, s + rows, rows);
    if (sc) { memcpy(kv->ks, s + 2 * rows, sc); memcpy(kv->vs, s + 2 * rows + sc, sc); }
}

/* the fill's generator: the next K and V elements, roughly unit RMS */
static void fill_next(uint64_t *x, float *a, float *b) {
    *x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17;
    *a = ((int)(*x & 0xffff) - 32768) / 18918.0f;
    *b = ((int)((*x >> 16) & 0xffff) - 32768) / 18918.0f;
}

/* int8: each head's elements drawn, then quantized as hachi_kv_stage does (ref's kernel) */
static void fill_int8(hachi_kv *kv, size_t slot, uint64_t *x) {
    const int hd = kv->dim / kv->n_head_kv;
    float a[HACHI_KV_INT8_HD_MAX], b[HACHI_KV_INT8_HD_MAX];
    for (int g = 0; g < kv->n_head_kv; g++) {
        for (int d = 0; d < hd; d++) fill_next(x, &a[d], &b[d]);
        hachi_quant_rows_i8_ref(a, 1, hd, (int8_t *)kv->k + slot * kv->row_bytes + (size_t)g * hd,
                                kv->ks + slot * kv->n_scales + g);
        hachi_quant_rows_i8_ref(b, 1, hd, (int8_t *)kv->v + slot * kv->row_bytes + (size_t)g * hd,
                                kv->vs + slot * kv->n_scales + g);
    }
}

void hachi_kv_fill_fast(hachi_kv *kv, int pos, int n, uint64_t *rng) {
    uint64_t x = *rng;
    for (int t = 0; t < n; t++) {
        if (kv->ring && n - t > kv->n_slots) continue;   /* would be overwritten anyway */
        const size_t slot = (size_t)slot_of(kv, pos + t);
        if (kv->type == HACHI_KV_INT8) { fill_int8(kv, slot, &x); continue; }
        char *kr = kv->k + slot * kv->row_bytes, *vr = kv->v + slot * kv->row_bytes;
        for (int i = 0; i < kv->dim; i++) {
            float a, b;
            fill_next(&x, &a, &b);
            if (kv->type == HACHI_KV_F32) {
                // cppcheck-suppress invalidPointerCast ; an f32 cache's rows are f32 arrays
                ((float *)kr)[i] = a;
                // cppcheck-suppress invalidPointerCast ; as above
                ((float *)vr)[i] = b;
            } else {
                ((uint16_t *)kr)[i] = hachi_f32_to_f16(a);
                ((uint16_t *)vr)[i] = hachi_f32_to_f16(b);
            }
        }
    }
    *rng = x;
}

/* ---- attention over one run of rows ------------------------------------------------------- */

bool hachi_kv_f32_rows(const hachi_kv *kv, const hachi_kernels *kern, int G, int hd) {
    return kv->type == HACHI_KV_F16 && kern->attn_scores_f32 && G == kern->attn_f32_g && hd % kern->attn_f32_hd == 0;
}

void hachi_kv_rows_f32(const hachi_kv *kv, const hachi_kernels *kern, int a, int b, int p0, int g, int hd, float *k,
                       float *v) {
    for (int x = a; x < b;) {
        const hachi_kv_run r = hachi_kv_segment(kv, x, b, p0);
        for (int j = 0; j < r.n; j++, x++) {
            const size_t off = (size_t)j * kv->dim + (size_t)g * hd, at = (size_t)(x - a) * hd;
            kern->f16_to_f32((const uint16_t *)r.k + off, k + at, hd);
            kern->f16_to_f32((const uint16_t *)r.v + off, v + at, hd);
        }
    }
}

/* ---- int8 tiles for many head sets: the kernel table's matrix products ----------------------- */

bool hachi_kv_i8_products(const hachi_kv *kv, const hachi_kernels *kern, int hd) {
    return kv->type == HACHI_KV_INT8 && kern->attn_i8_sets && hd % 64 == 0;
}

/* nq_max rounded up to 16 queries and keys to 64: every buffer a multiple of 64 bytes */
size_t hachi_kv_i8_tile_bytes(hachi_kv_type type, int nq_max, int hd, int keys) {
    if (type != HACHI_KV_INT8) return 0;
    const size_t nq = (size_t)(nq_max + 15) / 16 * 16, T = (size_t)(keys + 63) / 64 * 64;
    return (size_t)hd * (nq + 3 * T) + 4 * T * nq + 4 * nq * (size_t)hd + 2 * nq * T + 8 * T;
}

hachi_kv_i8_tile hachi_kv_i8_tile_init(void *buf, int nq_max, int hd, int keys) {
    const size_t nq = (size_t)(nq_max + 15) / 16 * 16, T = (size_t)(keys + 63) / 64 * 64;
    char *p = buf;
    hachi_kv_i8_tile t = {.hd = hd};
    t.qp = (int8_t *)p; p += nq * hd;
    t.k = (int8_t *)p; p += T * hd;
    t.v = (int8_t *)p; p += T * hd;
    t.vp = (int8_t *)p; p += T * hd;
    t.d = (int32_t *)(void *)p; p += 4 * T * nq;
    t.S = (int32_t *)(void *)p; p += 4 * nq * hd;
    t.whi = (uint8_t *)p; p += nq * T;
    t.wlo = (uint8_t *)p; p += nq * T;
    t.ks = (float *)(void *)p; p += 4 * T;
    t.vs = (float *)(void *)p;
    return t;
}

int hachi_kv_i8_query(hachi_kv_i8_tile *t, const hachi_kv_query *q, int G) {
    memcpy((int8_t *)t->S + (size_t)t->nq * t->hd, q->i8.q8, (size_t)G * t->hd);
    t->nq += G;
    return t->nq - G;
}

void hachi_kv_i8_pack(hachi_kv_i8_tile *t, const hachi_kernels *kern) {
    t->nqp = (t->nq + 15) / 16 * 16;
    int8_t *rows = (int8_t *)t->S;
    memset(rows + (size_t)t->nq * t->hd, 0, (size_t)(t->nqp - t->nq) * t->hd);
    kern->attn_i8_qpack(t->hd, t->nqp, rows, t->qp);
}

void hachi_kv_i8_load(hachi_kv_i8_tile *t, const hachi_kv *kv, const hachi_kernels *kern, int lo, int hi, int p0, int g) {
    const int hd = t->hd, n = hi - lo;
    t->lo = lo;
    t->nk = (n + 63) / 64 * 64;
    for (int x = lo; x < hi;) {
        const hachi_kv_run r = hachi_kv_segment(kv, x, hi, p0);
        if (!r.ks || !r.vs) return;   /* not an int8 cache */
        for (int j = 0; j < r.n; j++, x++) {
            const size_t off = (size_t)j * kv->dim + (size_t)g * hd, at = (size_t)(x - lo) * hd;
            memcpy(t->k + at, (const int8_t *)r.k + off, (size_t)hd);
            memcpy(t->v + at, (const int8_t *)r.v + off, (size_t)hd);
            t->ks[x - lo] = r.ks[(size_t)j * kv->n_scales + g];
            t->vs[x - lo] = r.vs[(size_t)j * kv->n_scales + g];
        }
    }
    memset(t->k + (size_t)n * hd, 0, (size_t)(t->nk - n) * hd);
    memset(t->v + (size_t)n * hd, 0, (size_t)(t->nk - n) * hd);
    kern->attn_i8_dots(hd, (n + 15) / 16 * 16, t->k, hd, t->nqp, t->qp, t->d);
    kern->attn_i8_vpack(hd, t->nk, t->v, t->vp);
    memset(t->whi, 0, (size_t)t->nqp * t->nk);
    memset(t->wlo, 0, (size_t)t->nqp * t->nk);
}

/* s[h] = (float)d[h] * qs[h] * ks for n heads: kernels.h's attn_scores_i8, four heads at a time */
static void dots_to_scores(float *s, const int32_t *d, const float *qs, float ks, int n) {
    int h = 0;
    for (; h + 4 <= n; h += 4)
        *(hachi_f32x4 *)(s + h) = __builtin_convertvector(*(const hachi_i32x4 *)(d + h), hachi_f32x4) *
                                  *(const hachi_f32x4 *)(qs + h) * ks;
    for (; h < n; h++) s[h] = (float)d[h] * qs[h] * ks;
}

void hachi_kv_i8_scores(const hachi_kv_i8_tile *t, const int *at, const hachi_kv_run *r, int nr, int qo,
                        const hachi_kv_query *q, int G, float *s) {
    for (int k = 0, j = 0; k < nr; k++)   /* the set's keys in order: j, at tile row i */
        for (int i = at[k] - t->lo; i < at[k] - t->lo + r[k].n; i++, j++)
            dots_to_scores(s + (size_t)j * G, t->d + (size_t)i * t->nqp + qo, q->i8.qs, t->ks[i], G);
}

/* values_i8's maximum, factors and weights for a piece of at most HACHI_VQ_KEYS keys */
void hachi_kv_i8_weights(hachi_kv_i8_tile *t, const hachi_kernels *kern, const int *at, const hachi_kv_run *r, int nr,
                         int qo, const float *p, int G, float *u) {
    float m[64] = {0}, rq[64];
    for (int k = 0, j = 0; k < nr; j += r[k++].n) kern->attn_vmax_i8(r[k].n, t->vs + at[k] - t->lo, 1, p + (size_t)j * G, G, m);
    for (int h = 0; h < G; h++) {
        rq[h] = m[h] > 0.0f ? 32767.0f / m[h] : 0.0f;
        u[h] = m[h] / 32767.0f;
    }
    const size_t w0 = (size_t)qo * t->nk;
    for (int k = 0, j = 0; k < nr; j += r[k++].n) {
        const int i = at[k] - t->lo;
        kern->attn_i8_weights(r[k].n, G, p + (size_t)j * G, t->vs + i, rq, t->whi + w0 + i, t->wlo + w0 + i,
                              (size_t)t->nk);
    }
}

void hachi_kv_i8_values(hachi_kv_i8_tile *t, const hachi_kernels *kern) {
    kern->attn_i8_wsums(t->hd, t->nk, t->nqp, t->whi, t->wlo, t->vp, t->S);
}

void hachi_kv_i8_flush(const hachi_kv_i8_tile *t, const hachi_kernels *kern, int qo, int G, const float *u, float *out) {
    kern->attn_flush_i8(t->hd, G, t->S + (size_t)qo * t->hd, u, out);
}

void hachi_kv_scores(const hachi_kv *kv, const hachi_kernels *kern, const hachi_kv_run *r, int g, int hd,
                     const hachi_kv_query *q, int G, float *s) {
    const int64_t stride = kv->dim;
    if (r->kf && G == kern->attn_f32_g) {
        kern->attn_scores_f32(hd, r->n, r->kf, hd, q->f, G, s);
    } else if (kv->type == HACHI_KV_F32) {
        for (int j = 0; j < r->n; j++) {
            const float *k = (const float *)r->k + j * stride + (int64_t)g * hd;
            for (int h = 0; h < G; h++) {
                float acc = 0.0f;
                for (int i = 0; i < hd; i++) acc += q->f[(int64_t)h * hd + i] * k[i];
                s[(size_t)j * G + h] = acc;
            }
        }
    } else if (kv->type == HACHI_KV_INT8) {
        kern->attn_scores_i8(hd, r->n, (const int8_t *)r->k + (int64_t)g * hd, stride, r->ks + g, kv->n_scales, &q->i8,
                             G, s);
    } else {
        kern->attn_scores_f16(hd, r->n, (const uint16_t *)r->k + (int64_t)g * hd, stride, q->f, G, s);
    }
}

/* int8 values: the tile's runs in pieces of at most HACHI_VQ_KEYS keys, each its weights'
 * maximum, its runs' integer sums, then into out */
static void values_i8(const hachi_kv *kv, const hachi_kernels *kern, const hachi_kv_run *r, int n_runs, int g, int hd,
                      const float *p, int G, float *out, bool hot, int32_t *acc) {
    typedef struct { const int8_t *v; const float *vs, *p; int n; } part;
    const int64_t stride = kv->dim;
    void (*values)(int64_t, int, const int8_t *, int64_t, const float *, int64_t, const float *, int, const float *,
                   int32_t *, bool) = hot && kern->attn_values_i8_hot ? kern->attn_values_i8_hot : kern->attn_values_i8;
    part pt[HACHI_VQ_KEYS];
    for (int i = 0, off = 0; i < n_runs;) {
        int np = 0;
        for (int keys = 0; i < n_runs && keys < HACHI_VQ_KEYS;) {
            const int take = HACHI_MIN(r[i].n - off, HACHI_VQ_KEYS - keys);
            if (take > 0)
                pt[np++] = (part){(const int8_t *)r[i].v + off * stride + (int64_t)g * hd,
                                  r[i].vs + (size_t)off * kv->n_scales + g, p, take};
            p += (size_t)take * G;
            keys += take;
            off += take;
            if (off >= r[i].n) { i++; off = 0; }
        }
        float m[64] = {0}, rq[64], u[64];
        for (int k = 0; k < np; k++) kern->attn_vmax_i8(pt[k].n, pt[k].vs, kv->n_scales, pt[k].p, G, m);
        for (int h = 0; h < G; h++) {
            rq[h] = m[h] > 0.0f ? 32767.0f / m[h] : 0.0f;
            u[h] = m[h] / 32767.0f;
        }
        for (int k = 0; k < np; k++) values(hd, pt[k].n, pt[k].v, stride, pt[k].vs, kv->n_scales, pt[k].p, G, rq, acc, k == 0);
        if (np) kern->attn_flush_i8(hd, G, acc, u, out);
    }
}

void hachi_kv_values(const hachi_kv *kv, const hachi_kernels *kern, const hachi_kv_run *r, int n_runs, int g, int hd,
                     const float *p, int G, float *out, bool hot, int32_t *acc) {
    const int64_t stride = kv->dim;
    if (kv->type == HACHI_KV_INT8) { values_i8(kv, kern, r, n_runs, g, hd, p, G, out, hot, acc); return; }
    for (int i = 0; i < n_runs; p += (size_t)r[i].n * G, i++) {
        if (r[i].vf && G == kern->attn_f32_g) {
            kern->attn_values_f32(hd, r[i].n, r[i].vf, hd, p, G, out);
        } else if (kv->type == HACHI_KV_F32) {
            for (int j = 0; j < r[i].n; j++) {
                const float *v = (const float *)r[i].v + j * stride + (int64_t)g * hd;
                for (int h = 0; h < G; h++)
                    for (int d = 0; d < hd; d++) out[(int64_t)h * hd + d] += p[(size_t)j * G + h] * v[d];
            }
        } else {
            (hot && kern->attn_values_f16_hot ? kern->attn_values_f16_hot : kern->attn_values_f16)(
                hd, r[i].n, (const uint16_t *)r[i].v + (int64_t)g * hd, stride, p, G, out);
        }
    }
}
