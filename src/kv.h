/* kv: the KV cache of one owning layer. It alone knows the storage type (f16, f32, int8) and
 * the layout: a full-attention cache holds every position of the context in order (linear), a
 * sliding one a ring of window + HACHI_SPEC_SLOTS slots (slot = position % n_slots), the spare
 * slots letting a rewind of up to that many tokens stay exact. A forward stages its new rows
 * in the pending rows (one per token of the forward) and commits them when every layer has
 * read them. Hot path: hachi_kv_stage, hachi_kv_segment, hachi_kv_commit.
 *
 * An int8 row is its dim int8 values plus one f32 scale per K/V head, in two planes: the
 * values in k[slot][dim] (head g's head_dim values at g * head_dim, as in f16), the scales in
 * ks[slot][n_head_kv]; element d of head g is ks[slot][g] * k[slot][g * head_dim + d], with
 * scale = max|x| / 127 over the head's values and q = round(x / scale) (0 for an all-zero
 * head). Two planes rather than scales inside the row: value rows stay multiples of 64 bytes
 * (512 at head_dim 512) and each plane is one prompt-cache tensor. 516 bytes per K or V row at
 * dim 512 with one head, against 1024 in f16. */
#ifndef HACHI_KV_H
#define HACHI_KV_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "hachi.h"
#include "kernels/kernels.h"

#define HACHI_SPEC_SLOTS 16         /* spare ring slots: a rewind of up to 16 tokens stays exact */
#define HACHI_KV_INT8_HD_MAX 1024    /* kernels.h: int8 scores are exact integer sums */
#define HACHI_PAGE 16               /* positions per page of the page-sparse metadata */

typedef struct hachi_kv {
    int owner;                      /* layer that writes it */
    int dim;                        /* elements per row: n_head_kv * head_dim */
    int n_head_kv;                  /* K/V heads of a row */
    int window;                     /* keys a query at q sees: q-window < p <= q; 0 = all */
    hachi_kv_type type;
    bool ring;                      /* sliding ring (window + spare slots < context) */
    int n_slots;                    /* ring: window + HACHI_SPEC_SLOTS; linear: n_ctx */
    int n_pending;                  /* pending rows: the largest forward */
    int valid_from;                 /* positions below it are not held (a restored prompt cache) */
    size_t row_bytes;               /* a row's values: dim * element size (int8: dim) */
    int n_scales;                   /* f32 scales per row: int8 n_head_kv, else 0 */
    char *k, *v;                    /* [n_slots][dim] of the type */
    char *kp, *vp;                  /* [n_pending][dim]: this forward's new rows, committed at its end */
    float *ks, *vs;                 /* int8: [n_slots][n_head_kv] scales of k, v; else NULL */
    float *ksp, *vsp;               /* int8: [n_pending][n_head_kv] scales of kp, vp; else NULL */
    int n_pages;                    /* linear caches with page metadata: n_ctx / HACHI_PAGE; else 0 */
    uint16_t *kmin, *kmax;          /* [n_pages][dim] fp16: per dimension the min / max of the committed
                                       keys of page p (positions [16p, 16p + 16)); 128 bytes a position
                                       at dim 512 */
} hachi_kv;

/* A run of consecutive rows: n rows of k and v, stride hachi_kv.dim elements; int8: their
 * scales ks, vs, stride n_head_kv (NULL for the other types). kf, vf: where the caller has
 * them, one K/V head's rows of the run as f32 (hachi_kv_rows_f32), head_dim apart; else NULL. */
typedef struct hachi_kv_run { const void *k, *v; const float *ks, *vs, *kf, *vf; int n; } hachi_kv_run;

/* Bytes of one K (or V) row of n_head_kv heads of head_dim, the int8 scales included. */
size_t hachi_kv_row_bytes(hachi_kv_type type, int n_head_kv, int head_dim);

/* The planes a K or V row is stored in, for saving and restoring: f16 and f32 rows have one
 * (the values), int8 rows two (the values, then the scales). */
#define HACHI_KV_MAX_PLANES 2
typedef struct hachi_kv_plane {
    const char *suffix;             /* of the tensor name: "" (values), "_scale" */
    const char *dtype;              /* safetensors dtype: "F16", "F32", "I8" */
    int cols;                       /* elements per row: dim, or n_head_kv scales */
    size_t elem;                    /* bytes per element */
} hachi_kv_plane;
/* Fills pl[0 .. n) and returns n. */
int hachi_kv_planes(const hachi_kv *kv, hachi_kv_plane pl[HACHI_KV_MAX_PLANES]);

/* Bytes hachi_kv_init allocates for such a cache (K and V, held and pending rows). */
size_t hachi_kv_plan_bytes(int n_head_kv, int head_dim, int window, int n_ctx, int n_pending, hachi_kv_type type,
                           bool pages);
/* Sets up (allocates) the cache of owner (rows of n_head_kv heads of head_dim) for a context
 * of n_ctx and forwards of up to n_pending tokens, with page metadata when pages (linear
 * caches only); *bytes receives what was allocated. */
hachi_status hachi_kv_init(hachi_kv *kv, int owner, int n_head_kv, int head_dim, int window, int n_ctx, int n_pending,
                           hachi_kv_type type, bool pages, size_t *bytes);
void hachi_kv_free(hachi_kv *kv);
/* bytes the cache itself holds (K and V, without the pending rows) */
size_t hachi_kv_bytes(const hachi_kv *kv);
/* bytes of K and V a decode step reads after depth positions (the window's at most); with
 * sparse_pages, past that many pages: those pages' rows and every page's metadata */
size_t hachi_kv_bytes_read(const hachi_kv *kv, int depth, int sparse_pages);
/* Bytes of K/V (and their scales) of `keys` positions. */
size_t hachi_kv_bytes_keys(const hachi_kv *kv, int keys);

/* Stages row t of the forward at p0 from f32 k, v [dim] (converted to the storage type, int8
 * quantized per head) and merges its key as stored (int8: dequantized) into the page
 * metadata: a query's candidate pages (attn.h) end before its own page, so they hold the
 * same keys in a forward of any length as in a decode step. */
void hachi_kv_stage(hachi_kv *kv, const hachi_kernels *kern, int p0, int t, const float *k, const float *v);
/* The rows of positions [a, b) a forward starting at p0 reads, from position a on: held rows
 * before p0 (a ring wraps at most once), then the forward's pending rows. Returns the first
 * run; call again from a + run.n until b. */
hachi_kv_run hachi_kv_segment(const hachi_kv *kv, int a, int b, int p0);
/* Moves the pending rows of positions [p0, p0 + n) into the cache. */
void hachi_kv_commit(hachi_kv *kv, int p0, int n);
/* The session went back to position pos: the metadata of pos's page is rebuilt from its
 * rows below pos. */
void hachi_kv_rewound(hachi_kv *kv, int pos);
/* Rebuilds the page metadata of positions [0, pos) from the held rows (after a restore or
 * a synthetic fill). */
void hachi_kv_rebuild_pages(hachi_kv *kv, int pos);

/* First position whose row the cache holds when the session is at position pos. */
int hachi_kv_first(const hachi_kv *kv, int pos);
/* The cache holds positions from pos on only (a restored prompt cache; 0: all). */
void hachi_kv_restored_from(hachi_kv *kv, int pos);
/* Whether, at position cur, a rewind to pos leaves every key a query at pos sees. */
bool hachi_kv_can_rewind(const hachi_kv *kv, int pos, int cur);
/* Row storage of positions [p, end) from p on in plane (hachi_kv_planes) of K (which 0) or
 * V (1), for saving and restoring: the rows stay consecutive for the returned count (a ring
 * wraps once), cols * elem bytes apart. */
char *hachi_kv_rows(const hachi_kv *kv, int which, int plane, int p, int end, int *n);
/* Checkpoints (hachi_session_checkpoint_*): a ring's slots as bytes (K, V, the int8 scales);
 * 0 bytes for a linear cache, whose rows below a position stay as they were while the session
 * goes on past it. copy writes hachi_kv_ring_bytes into dst, restore reads them back. */
size_t hachi_kv_ring_bytes(const hachi_kv *kv);
void hachi_kv_ring_copy(const hachi_kv *kv, void *dst);
void hachi_kv_ring_restore(hachi_kv *kv, const void *src);
/* Writes rows that look like real ones (roughly unit RMS, as after the K/V norm) for
 * positions [pos, pos + n) without computing them (bench --fill fast). */
void hachi_kv_fill_fast(hachi_kv *kv, int pos, int n, uint64_t *rng);

/* G query heads q[G][hd] as the cache's scores take them: an int8 cache's scores multiply int8
 * queries, quantized by its rows' rule (per head, scale = max|x| / 127, round(x / scale)) into
 * buf (hachi_kv_query_floats(G, hd) floats) once per query for all its runs; other types read q
 * as it is. */
typedef struct hachi_kv_query {
    const float *f;
    hachi_query_i8 i8;
} hachi_kv_query;
size_t hachi_kv_query_floats(int G, int hd);
hachi_kv_query hachi_kv_query_prepare(const hachi_kv *kv, const hachi_kernels *kern, const float *q, int G, int hd,
                                      float *buf);

/* Whether an f16 cache's rows, converted to f32 once (hachi_kv_rows_f32), serve scores and values
 * for G query heads of head dim hd (the kernel table's attn_scores_f32, attn_values_f32: the
 * same sums bit for bit) */
bool hachi_kv_f32_rows(const hachi_kv *kv, const hachi_kernels *kern, int G, int hd);
/* The K and V rows of KV head g at positions [a, b) (held before p0, pending from p0) as f32:
 * position x at k + (x - a) * hd, v likewise (hachi_kv_f32_rows) */
void hachi_kv_rows_f32(const hachi_kv *kv, const hachi_kernels *kern, int a, int b, int p0, int g, int hd, float *k,
                       float *v);
/* An int8 cache's tiles for many head sets at once, through the kernel table's int8 matrix
 * products (kernels.h attn_i8_*): a tile of at most HACHI_VQ_KEYS positions is loaded once (its
 * rows copied out, every set's dots one product, its values packed), then each set's scores and
 * weights are those hachi_kv_scores and hachi_kv_values would give over the same runs, every
 * set's value sums one product, each set's flush the table's: a token's results are bit for bit
 * those of the tile kernels. The buffers live in the caller's scratch (hachi_kv_i8_tile_bytes,
 * 64-byte aligned); a run's keys are given by its first position (at) and its rows' count. */
typedef struct hachi_kv_i8_tile {
    int8_t *qp, *k, *v, *vp;    /* packed queries [nq][hd]; the tile's K and V rows, V packed [keys][hd] */
    int32_t *d, *S;             /* dots [keys][nq]; value sums [nq][hd] (before packing: the queries) */
    uint8_t *whi, *wlo;         /* the 15-bit weights' two parts [nq][nk] */
    float *ks, *vs;             /* the rows' scales [keys] */
    int hd, nq, nqp;            /* queries appended, rounded up to 16 once packed */
    int lo, nk;                 /* the loaded tile's first position, its keys rounded up to 64 */
} hachi_kv_i8_tile;
/* whether kv's tiles can go this way for head dim hd (an int8 cache, a table with the products) */
bool hachi_kv_i8_products(const hachi_kv *kv, const hachi_kernels *kern, int hd);
/* bytes of the buffers for up to nq_max queries and tiles of keys positions: for caches of the
 * type (0 for types that never go this way) */
size_t hachi_kv_i8_tile_bytes(hachi_kv_type type, int nq_max, int hd, int keys);
hachi_kv_i8_tile hachi_kv_i8_tile_init(void *buf, int nq_max, int hd, int keys);
/* appends a set's G int8 queries (hachi_kv_query_prepare's); returns their first index */
int hachi_kv_i8_query(hachi_kv_i8_tile *t, const hachi_kv_query *q, int G);
void hachi_kv_i8_pack(hachi_kv_i8_tile *t, const hachi_kernels *kern);
/* the tile of KV head g at positions [lo, hi) (held before p0, pending from p0) */
void hachi_kv_i8_load(hachi_kv_i8_tile *t, const hachi_kv *kv, const hachi_kernels *kern, int lo, int hi, int p0, int g);
/* the scores of the set at queries qo.. over its runs of the tile (s: [keys][G], as hachi_kv_scores) */
void hachi_kv_i8_scores(const hachi_kv_i8_tile *t, const int *at, const hachi_kv_run *r, int nr, int qo,
                        const hachi_kv_query *q, int G, float *s);
/* the set's weights p ([keys][G]) over those runs into the value product; u[G]: its flush factors */
void hachi_kv_i8_weights(hachi_kv_i8_tile *t, const hachi_kernels *kern, const int *at, const hachi_kv_run *r, int nr,
                         int qo, const float *p, int G, float *u);
/* every set's value sums (after all sets' weights), then a set's out[h*hd + d] += its sums */
void hachi_kv_i8_values(hachi_kv_i8_tile *t, const hachi_kernels *kern);
void hachi_kv_i8_flush(const hachi_kv_i8_tile *t, const hachi_kernels *kern, int qo, int G, const float *u, float *out);
/* Scores over one run of rows for G query heads of KV head g (head dim hd): s[j*G + h] =
 * dot(q_h, key j) (int8: the kernel table's attn_scores_i8 over the quantized queries, with the
 * rows' scales; from the run's f32 rows where it has them). */
void hachi_kv_scores(const hachi_kv *kv, const hachi_kernels *kern, const hachi_kv_run *r, int g, int hd,
                     const hachi_kv_query *q, int G, float *s);
/* Value sums of a tile of keys given as n_runs runs, their weights p one run after another
 * ([keys][G]): out[h*hd + d] += sum_j p[j*G + h] * value j [d]. f16/f32: key after key; int8:
 * the kernel table's integer sums over the whole tile (kernels.h: attn_vmax_i8, attn_values_i8,
 * attn_flush_i8), a tile of more than HACHI_VQ_KEYS keys in pieces of that many, so how a tile
 * is cut into runs changes nothing; acc: int32 scratch [G][hd] (int8 caches). hot: the value
 * rows were just read by another token of the forward (in cache): the table's
 * attn_values_f16_hot / attn_values_i8_hot where it has one, the same sums bit for bit. G <= 64. */
void hachi_kv_values(const hachi_kv *kv, const hachi_kernels *kern, const hachi_kv_run *r, int n_runs, int g, int hd,
                     const float *p, int G, float *out, bool hot, int32_t *acc);
/* Page scores of KV head g over pages [p0, p1): out[p - p0] = qpos . kmax_p + qneg . kmin_p.
 * With qpos_d = sum_h max(q_hd, 0) and qneg_d = sum_h min(q_hd, 0) over the G query heads this
 * is sum_h sum_d max(q_hd kmax_d, q_hd kmin_d), the upper bound of the heads' q.k on the page
 * (kmax >= kmin), at two dot products a page. tmp: [p1 - p0] scratch. */
void hachi_kv_page_scores(const hachi_kv *kv, const hachi_kernels *kern, int g, int hd, const float *qpos,
                          const float *qneg, int p0, int p1, float *out, float *tmp);

#endif
