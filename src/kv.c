/* kv: one owning layer's K/V rows: storage type, ring or linear layout, the
 * pending rows of a forward, commit, rewind bounds, and the row access of the
 * prompt cache. The only place that knows slot = position % n_slots and which
 * element type a row holds. */
#include <string.h>
#include "kv.h"
#include "util.h"

const char *hachi_kv_type_name(hachi_kv_type type) { return type == HACHI_KV_F32 ? "f32" : "f16"; }
size_t hachi_kv_type_size(hachi_kv_type type) { return type == HACHI_KV_F32 ? 4 : 2; }
const char *hachi_kv_dtype(hachi_kv_type type) { return type == HACHI_KV_F32 ? "F32" : "F16"; }

static int slot_of(const hachi_kv *kv, int pos) { return kv->ring ? pos % kv->n_slots : pos; }

static bool is_ring(int window, int n_ctx) { return window > 0 && window + HACHI_SPEC_SLOTS < n_ctx; }

static int n_pages_of(int window, int n_ctx, bool pages) {
    return pages && !is_ring(window, n_ctx) ? n_ctx / HACHI_PAGE : 0;
}

size_t hachi_kv_plan_bytes(int dim, int window, int n_ctx, int n_pending, hachi_kv_type type, bool pages) {
    const size_t slots = is_ring(window, n_ctx) ? (size_t)window + HACHI_SPEC_SLOTS : (size_t)n_ctx;
    return 2 * (slots + (size_t)n_pending) * (size_t)dim * hachi_kv_type_size(type) +
           2 * (size_t)n_pages_of(window, n_ctx, pages) * (size_t)dim * sizeof(uint16_t);
}

hachi_status hachi_kv_init(hachi_kv *kv, int owner, int dim, int window, int n_ctx, int n_pending,
                           hachi_kv_type type, bool pages, size_t *bytes) {
    memset(kv, 0, sizeof *kv);
    kv->owner = owner;
    kv->dim = dim;
    kv->window = window;
    kv->type = type;
    kv->ring = is_ring(window, n_ctx);
    kv->n_slots = kv->ring ? window + HACHI_SPEC_SLOTS : n_ctx;
    kv->n_pending = n_pending;
    kv->row_bytes = (size_t)dim * hachi_kv_type_size(type);
    const size_t held = (size_t)kv->n_slots * kv->row_bytes, pend = (size_t)n_pending * kv->row_bytes;
    kv->k = hachi_aligned_alloc(held);
    kv->v = hachi_aligned_alloc(held);
    kv->kp = hachi_aligned_alloc(pend);
    kv->vp = hachi_aligned_alloc(pend);
    kv->n_pages = n_pages_of(window, n_ctx, pages);
    const size_t meta = (size_t)kv->n_pages * (size_t)dim * sizeof(uint16_t);
    if (meta) {
        kv->kmin = hachi_aligned_alloc(meta);
        kv->kmax = hachi_aligned_alloc(meta);
    }
    if (!kv->k || !kv->v || !kv->kp || !kv->vp || (meta && (!kv->kmin || !kv->kmax))) {
        hachi_kv_free(kv);
        return HACHI_ERR_NOMEM;
    }
    *bytes += 2 * (held + pend + meta);
    return HACHI_OK;
}

void hachi_kv_free(hachi_kv *kv) {
    if (!kv) return;
    hachi_free(kv->k); hachi_free(kv->v); hachi_free(kv->kp); hachi_free(kv->vp);
    hachi_free(kv->kmin); hachi_free(kv->kmax);
    kv->k = kv->v = kv->kp = kv->vp = NULL;
    kv->kmin = kv->kmax = NULL;
}

size_t hachi_kv_bytes(const hachi_kv *kv) { return (size_t)kv->n_slots * kv->row_bytes * 2; }

size_t hachi_kv_bytes_read(const hachi_kv *kv, int depth, int sparse_pages) {
    const int pages = depth / HACHI_PAGE + 1;
    if (kv->n_pages && sparse_pages && pages > sparse_pages)   /* the selected rows + the candidates' min/max */
        return (size_t)sparse_pages * HACHI_PAGE * kv->row_bytes * 2 +
               (size_t)(pages - 3) * kv->dim * sizeof(uint16_t) * 2;
    const int keys = kv->window > 0 ? HACHI_MIN(depth, kv->window) : depth;
    return (size_t)keys * kv->row_bytes * 2;
}

/* ---- page metadata: per dimension min and max of a page's keys, fp16 ---------------------- */

static float elem(const hachi_kv *kv, const char *row, int i) {
    // cppcheck-suppress invalidPointerCast ; an f32 cache's rows are f32 arrays (64-byte aligned allocations)
    return kv->type == HACHI_KV_F32 ? ((const float *)row)[i] : hachi_f16_to_f32(((const uint16_t *)row)[i]);
}

/* merges the key row of position pos into its page (the first row of a page starts it) */
static void page_add(hachi_kv *kv, int pos, const char *row) {
    const int p = pos / HACHI_PAGE;
    uint16_t *lo = kv->kmin + (size_t)p * kv->dim, *hi = kv->kmax + (size_t)p * kv->dim;
    const bool first = pos % HACHI_PAGE == 0;
    for (int i = 0; i < kv->dim; i++) {
        const float x = elem(kv, row, i);
        lo[i] = first || x < hachi_f16_to_f32(lo[i]) ? hachi_f32_to_f16(x) : lo[i];
        hi[i] = first || x > hachi_f16_to_f32(hi[i]) ? hachi_f32_to_f16(x) : hi[i];
    }
}

void hachi_kv_rebuild_pages(hachi_kv *kv, int pos) {
    if (!kv->n_pages) return;
    for (int p = 0; p < pos; p++) page_add(kv, p, kv->k + (size_t)p * kv->row_bytes);
}

void hachi_kv_rewound(hachi_kv *kv, int pos) {
    if (!kv->n_pages) return;
    for (int p = pos / HACHI_PAGE * HACHI_PAGE; p < pos; p++) page_add(kv, p, kv->k + (size_t)p * kv->row_bytes);
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
    if (kv->type == HACHI_KV_F32) {
        memcpy(kd, k, kv->row_bytes);
        memcpy(vd, v, kv->row_bytes);
    } else {
        kern->f32_to_f16(k, (uint16_t *)kd, kv->dim);
        kern->f32_to_f16(v, (uint16_t *)vd, kv->dim);
    }
    if (kv->n_pages) page_add(kv, p0 + t, kd);
}

hachi_kv_run hachi_kv_segment(const hachi_kv *kv, int a, int b, int p0) {
    hachi_kv_run r;
    if (a >= p0) {   /* this forward's rows */
        r.k = kv->kp + (size_t)(a - p0) * kv->row_bytes;
        r.v = kv->vp + (size_t)(a - p0) * kv->row_bytes;
        r.n = b - a;
        return r;
    }
    const int slot = slot_of(kv, a);
    r.n = HACHI_MIN(b, p0) - a;
    if (kv->ring) r.n = HACHI_MIN(r.n, kv->n_slots - slot);
    r.k = kv->k + (size_t)slot * kv->row_bytes;
    r.v = kv->v + (size_t)slot * kv->row_bytes;
    return r;
}

void hachi_kv_commit(hachi_kv *kv, int p0, int n) {
    for (int t = 0; t < n; t++) {
        const size_t slot = (size_t)slot_of(kv, p0 + t);
        memcpy(kv->k + slot * kv->row_bytes, kv->kp + (size_t)t * kv->row_bytes, kv->row_bytes);
        memcpy(kv->v + slot * kv->row_bytes, kv->vp + (size_t)t * kv->row_bytes, kv->row_bytes);
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

char *hachi_kv_rows(const hachi_kv *kv, int which, int p, int end, int *n) {
    const int slot = slot_of(kv, p);
    *n = kv->ring ? HACHI_MIN(end - p, kv->n_slots - slot) : end - p;
    return (which ? kv->v : kv->k) + (size_t)slot * kv->row_bytes;
}

void hachi_kv_fill_fast(hachi_kv *kv, int pos, int n, uint64_t *rng) {
    uint64_t x = *rng;
    for (int t = 0; t < n; t++) {
        if (kv->ring && n - t > kv->n_slots) continue;   /* would be overwritten anyway */
        const size_t slot = (size_t)slot_of(kv, pos + t);
        char *kr = kv->k + slot * kv->row_bytes, *vr = kv->v + slot * kv->row_bytes;
        for (int i = 0; i < kv->dim; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            float a = ((int)(x & 0xffff) - 32768) / 18918.0f, b = ((int)((x >> 16) & 0xffff) - 32768) / 18918.0f;
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

void hachi_kv_scores(const hachi_kv *kv, const hachi_kernels *kern, const hachi_kv_run *r, int g, int hd,
                     const float *q, int G, float *s) {
    const int64_t stride = kv->dim;
    if (kv->type == HACHI_KV_F32) {
        for (int j = 0; j < r->n; j++) {
            const float *k = (const float *)r->k + j * stride + (int64_t)g * hd;
            for (int h = 0; h < G; h++) {
                float acc = 0.0f;
                for (int i = 0; i < hd; i++) acc += q[(int64_t)h * hd + i] * k[i];
                s[(size_t)j * G + h] = acc;
            }
        }
    } else {
        kern->attn_scores_f16(hd, r->n, (const uint16_t *)r->k + (int64_t)g * hd, stride, q, G, s);
    }
}

void hachi_kv_values(const hachi_kv *kv, const hachi_kernels *kern, const hachi_kv_run *r, int g, int hd,
                     const float *p, int G, float *out) {
    const int64_t stride = kv->dim;
    if (kv->type == HACHI_KV_F32) {
        for (int j = 0; j < r->n; j++) {
            const float *v = (const float *)r->v + j * stride + (int64_t)g * hd;
            for (int h = 0; h < G; h++)
                for (int i = 0; i < hd; i++) out[(int64_t)h * hd + i] += p[(size_t)j * G + h] * v[i];
        }
    } else {
        kern->attn_values_f16(hd, r->n, (const uint16_t *)r->v + (int64_t)g * hd, stride, p, G, out);
    }
}
