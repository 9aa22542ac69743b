/* kernels: the per-ISA kernel table. ref.c (scalar, always built), x86_avx2.c,
 * x86_avx512.c, arm_neon.c fill in the entries of their ISA with the same signatures;
 * dispatch.c assembles one table per ISA from them and picks one from CPU features, once.
 * Kernels take pointers, lengths and strides only; they never include model headers. */
#ifndef HACHI_KERNELS_H
#define HACHI_KERNELS_H
#include <stddef.h>
#include <stdint.h>
#include "quant.h"

typedef enum hachi_isa { HACHI_ISA_REF = 0, HACHI_ISA_AVX2, HACHI_ISA_AVX512, HACHI_ISA_NEON, HACHI_ISA_AVXVNNI, HACHI_ISA_COUNT } hachi_isa;

/* x (n elements of the type) -> y (n floats) */
typedef void (*hachi_to_float_fn)(const void *x, float *y, int64_t n);
/* x (n floats) -> y (n elements of the type); n a multiple of the block size */
typedef void (*hachi_from_float_fn)(const float *x, void *y, int64_t n);
/* *s = dot(w, a): w a weight row of n elements, a n elements in the type's vec_dot_type */
typedef void (*hachi_vec_dot_fn)(int64_t n, float *s, const void *w, const void *a);
/* s[i] = dot(w, a_i) for i < na (na <= 16), a_i = (char *)a + i * a_stride: each weight
 * block is loaded and unpacked once for all na activation rows. */
typedef void (*hachi_vec_dot_multi_fn)(int64_t n, float *s, const void *w, const void *a,
                                       size_t a_stride, int na);

/* s[8t + j] = dot(row j, a_t) for j < 8, t < na (na <= 16): w8 is 8 weight rows interleaved
 * (block_*x8, quant.h), a_t = (char *)a + t * a_stride with this ISA's activation extras. The
 * sums of one token do not depend on na (so a verify step equals single steps bit for bit)
 * and every ISA's result equals ref's bit for bit. */
typedef void (*hachi_vec_dot_x8_fn)(int64_t n, float *s, const void *w8, const void *a,
                                    size_t a_stride, int na);

/* Activation extras (optional, per ISA and weight type): a row of n activations in the
 * vec_dot_type is followed by act_extra(n) bytes (row stride = row size + act_extra(n)) that
 * act_prep(n, row, b0, b1) fills for the row's blocks [b0, b1) (b0 a multiple of 4; every
 * block of a row is covered once) after those blocks were quantized. This ISA's vec_dot and
 * vec_dot_multi of that weight type read them; work that depends on the activations alone
 * (e.g. per-block sums, fp16 scales as floats) is so done once per matmul, not per weight
 * row. ref never has extras; callers of vec_dot on quantized activations must run act_prep. */
typedef size_t (*hachi_act_extra_fn)(int64_t n);
typedef void (*hachi_act_prep_fn)(int64_t n, void *a, int64_t b0, int64_t b1);

/* s[j] = dot(q_j, k) for j < m: one fp16 key row against m f32 query rows (stride q_stride) */
typedef void (*hachi_dot_f16_multi_fn)(int64_t n, float *s, const uint16_t *k, const float *q, int64_t q_stride, int m);
/* y_j += a[j] * v for j < m: one fp16 value row into m f32 rows (stride y_stride) */
typedef void (*hachi_axpy_f16_multi_fn)(int64_t n, const float *a, const uint16_t *v, float *y, int64_t y_stride, int m);

/* A query of G heads quantized for int8 K rows (kv.c, the keys' rule): head h is qs[h] times
 * the int8 row q8 + h*hd, whose whole numbers qf + h*hd also holds as f32 (tables that multiply
 * in f32 use those: |q| and |k| <= 127 and hd <= 1024 keep every product and partial sum below
 * 2^24, so f32 sums of them are the exact integer dot in any order). */
typedef struct hachi_query_i8 {
    const int8_t *q8;
    const float *qf, *qs;
} hachi_query_i8;

typedef struct hachi_type_kernels {
    uint32_t vec_dot_type;            /* what activations are converted to: F32, Q8_0 or Q8_K */
    hachi_to_float_fn to_float;       /* dequantize */
    hachi_from_float_fn from_float;   /* quantize (reference quality) */
    hachi_vec_dot_fn vec_dot;         /* NULL: the type cannot be used as a weight */
    hachi_vec_dot_multi_fn vec_dot_multi;
    hachi_act_extra_fn act_extra;     /* NULL: no activation extras (then act_prep is NULL) */
    hachi_act_prep_fn act_prep;
    hachi_vec_dot_x8_fn vec_dot_x8;   /* NULL: rows are not interleaved for this type */
    /* Prefill GEMM over interleaved rows (NULL where this ISA has none): y[t*ldy + r] for the
     * 8*n_groups rows of w8 (n_groups consecutive groups of 8) and the nt <= 16 activation rows
     * at a (vec_dot_type rows with this ISA's extras, a_stride apart), each bit for bit
     * vec_dot_x8's. */
    void (*gemm_x8)(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *a, size_t a_stride,
                    int nt);
    /* Where set, gemm_x8 (or gemm_x8_all, below) takes its activations packed: a tile of
     * act_pack_bytes(n) bytes holds 16 tokens in the order the GEMM reads them (one stream where
     * the rows were 2 per token); act_pack(n, a, a_stride, t0, nt, tile_nt, tile) writes the nt
     * rows at a (as above) as the tile's tokens t0.. t0 + nt - 1 of its tile_nt (t0 0 or 8,
     * nt <= 8: the two halves touch no common cache line, so two threads can fill them), and
     * gemm_x8 gets the tile (a_stride unused) and nt = tile_nt. A tile of at most 8 tokens is so
     * packed in one call (t0 0, nt = tile_nt): a table may lay such a tile out its own way
     * (AVX-512's Q4_0 does). */
    void (*act_pack)(int64_t n, const void *a, size_t a_stride, int t0, int nt, int tile_nt, void *tile);
    size_t (*act_pack_bytes)(int64_t n);
    int act_pack_min;                 /* forwards of fewer tokens are not packed (gemm_x8_all: pack NULL) */
    /* Prefill GEMM over rows in the file's layout (the float types; NULL where this ISA has none):
     * y[t*ldy + r] for the n_rows rows at w (row_bytes apart) and the nt <= 16 activation rows at
     * a (a_stride apart), each bit for bit this ISA's vec_dot. */
    void (*gemm)(int64_t n, float *y, int64_t ldy, const void *w, size_t row_bytes, int n_rows, const void *a,
                 size_t a_stride, int nt);
    int gemm_min;                     /* forwards of this many tokens or more use gemm_x8 / gemm (measured per ISA) */
    /* Where set (gemm_x8 then NULL), the interleaved rows' GEMM takes any nt: matmul hands it all
     * the forward's tokens in one call, so it can unpack each weight block once for all of them.
     * It gets the activation rows (a, a_stride, as gemm_x8's) and, where act_pack is set, the
     * same tokens packed too: tile t (tokens 16t..16t+15) at pack + t * act_pack_bytes(n) (else
     * pack is NULL). */
    void (*gemm_x8_all)(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *a,
                        size_t a_stride, const void *pack, int nt);
} hachi_type_kernels;

typedef struct hachi_kernels {
    hachi_isa isa;
    const char *name;                 /* "ref", "avx2", "avx512", "neon", "avxvnni" */
    hachi_type_kernels t[HACHI_TYPE_COUNT];
    /* fp16 KV cache and attention */
    void (*f32_to_f16)(const float *x, uint16_t *y, int64_t n);
    void (*f16_to_f32)(const uint16_t *x, float *y, int64_t n);
    hachi_dot_f16_multi_fn dot_f16_multi;
    hachi_axpy_f16_multi_fn axpy_f16_multi;
    /* attention tiles: G query heads (q, out: G rows of hd floats) share one fp16 K/V head, so
     * each K and V row is converted once for all G heads. The tile kernels (fp16 and int8) may
     * prefetch rows past a call's last key: in a cache they are the next tile's, read next (a
     * prefetch never faults, wherever it points). */
    /* s[j*G + h] = dot(q + h*hd, k + j*k_stride) for j < nk, h < G */
    void (*attn_scores_f16)(int64_t hd, int nk, const uint16_t *k, int64_t k_stride, const float *q, int G, float *s);
    /* out[h*hd + d] += sum_j p[j*G + h] * v[j*v_stride + d] for h < G, d < hd */
    void (*attn_values_f16)(int64_t hd, int nk, const uint16_t *v, int64_t v_stride, const float *p, int G, float *out);
    /* the same sums bit for bit (each out element grows key after key), for V rows already in cache
     * (a tile that another token of the forward has just read): the accumulators stay in registers
     * across all nk keys instead of a tile of keys streamed with prefetches. NULL: attn_values_f16 */
    void (*attn_values_f16_hot)(int64_t hd, int nk, const uint16_t *v, int64_t v_stride, const float *p, int G,
                                float *out);
    /* attn_scores_f16 and attn_values_f16 bit for bit over fp16 rows already converted to f32
     * (exactly: every fp16 is an f32): a tile that several tokens of a forward read is converted
     * once, sparing each token its conversions (rows in cache, as attn_values_f16_hot's). Only for
     * G == attn_f32_g and head dims a multiple of attn_f32_hd; NULL (attn_f32_g 0): none. */
    int attn_f32_g, attn_f32_hd;
    void (*attn_scores_f32)(int64_t hd, int nk, const float *k, int64_t k_stride, const float *q, int G, float *s);
    void (*attn_values_f32)(int64_t hd, int nk, const float *v, int64_t v_stride, const float *p, int G, float *out);
    /* int8 KV rows: key j is ks[j*ks_stride] * (its hd int8 values at k + j*k_stride), value j
     * likewise. Scores take the queries quantized as the keys are (hachi_query_i8):
     * s[j*G + h] = (float)dot(q_h, k_j) * qs[h] * ks_j, the dot an exact integer sum and the two
     * products in that order, so every table gives ref's bits. Values take the weights to 15 bits
     * (below), so they too are integer sums and every table gives ref's bits. */
    void (*attn_scores_i8)(int64_t hd, int nk, const int8_t *k, int64_t k_stride, const float *ks, int64_t ks_stride,
                           const hachi_query_i8 *q, int G, float *s);
    /* Values of int8 rows, per tile of at most HACHI_VQ_KEYS keys given as one or more runs, in
     * integers: with w_jh = p[j*G + h] * vs[j*vs_stride] (a float product) and m_h the largest w_jh
     * of the tile, each weight goes to 15 bits, wq_jh = rint(w_jh * r[h]) (0..32767, ties to
     * even; r[h] = 32767 / m_h, 0 when m_h is 0), the sums S_hd = sum_j wq_jh v_j[d] are exact
     * (int32: 128 * 32767 * 128 < 2^31), and the tile ends in out[h*hd + d] = fmaf((float)S_hd,
     * u[h], out[h*hd + d]), u[h] = m_h / 32767. A weight is off by at most m_h / 65534 (the
     * values' own rounding is 1/254 of a row's largest); pairs of 16-bit products (vpdpwssd)
     * run at twice the f32 FMA rate; how a tile is cut into runs (a decode step's against a
     * verify forward's) changes nothing.
     * attn_vmax_i8: m[h] = max(m[h], w_jh over a run's nk keys), the caller starting m at 0;
     * attn_values_i8: acc[h*hd + d] = (first ? 0 : acc[h*hd + d]) + a run's sums (nk <= HACHI_VQ_KEYS);
     * attn_flush_i8: the tile's end as above. Every table gives ref's bits. */
    void (*attn_vmax_i8)(int nk, const float *vs, int64_t vs_stride, const float *p, int G, float *m);
    void (*attn_values_i8)(int64_t hd, int nk, const int8_t *v, int64_t v_stride, const float *vs, int64_t vs_stride,
                           const float *p, int G, const float *r, int32_t *acc, bool first);
    /* attn_values_i8 for rows in cache, as attn_values_f16_hot is for fp16 ones. NULL: attn_values_i8 */
    void (*attn_values_i8_hot)(int64_t hd, int nk, const int8_t *v, int64_t v_stride, const float *vs,
                               int64_t vs_stride, const float *p, int G, const float *r, int32_t *acc, bool first);
    void (*attn_flush_i8)(int64_t hd, int G, const int32_t *acc, const float *u, float *out);
    /* int8 rows for many queries at once (a prefill group's head sets, from attn_i8_sets of them a
     * thread; 0: none, NULL entries): a tile's integer dots and value sums as matrix products,
     * exact, so the scores and flushes made from them are the tile kernels' bits. nq is a multiple
     * of 16, hd of 64, the tile's keys nk of 64 (rows past the keys zero).
     * attn_i8_qpack: the query rows q [nq][hd] into pack (nq * hd bytes, the table's layout);
     * attn_i8_dots: d[j*nq + i] = dot(key j, query i) for j < nk (key rows k_stride apart), i < nq;
     * attn_i8_vpack: value rows v [nk][hd] into pack (nk * hd bytes, the table's layout);
     * attn_i8_wsums: S[i*hd + d] = sum_j (128 * whi[i*nk + j] + wlo[i*nk + j]) * v_j[d], the 15-bit
     * weights of attn_values_i8 split (whi <= 255, wlo <= 127);
     * attn_i8_weights: those weights of n keys, wq = rint(p[j*G + h] * vs[j] * r[h]) as
     * attn_values_i8 takes them, into hi[h*ld + j] = wq >> 7 and lo[h*ld + j] = wq & 127. */
    int attn_i8_sets;
    void (*attn_i8_qpack)(int64_t hd, int nq, const int8_t *q, int8_t *pack);
    void (*attn_i8_dots)(int64_t hd, int nk, const int8_t *k, int64_t k_stride, int nq, const int8_t *pack, int32_t *d);
    void (*attn_i8_vpack)(int64_t hd, int nk, const int8_t *v, int8_t *pack);
    void (*attn_i8_wsums)(int64_t hd, int nk, int nq, const uint8_t *whi, const uint8_t *wlo, const int8_t *pack,
                          int32_t *S);
    void (*attn_i8_weights)(int n, int G, const float *p, const float *vs, const float *r, uint8_t *hi, uint8_t *lo,
                            size_t ld);
    /* int8 rows (the int8 KV cache's rule, its queries' too): for r < rows, the n floats at
     * x + r*n to scale[r] = max|x| / 127 and q = round(x / scale), halves away from zero, clamped
     * to +-127 (NaN to -127; all 0 when the scale is not > 0), the same bits in every table */
    void (*quant_rows_i8)(const float *x, int rows, int64_t n, int8_t *q, float *scale);
    /* x[j*G + h] *= scale, then mx[h] = max(mx[h], max_j x[j*G + h]) (mx comes in as a running
     * maximum, -INFINITY for none), x[j*G + h] = exp(x[j*G + h] - mx[h]), sum[h] = sum_j
     * x[j*G + h], for j < n (n >= 1), h < G: a tile's weights against the new running maximum,
     * with no second pass to rescale them */
    void (*attn_softmax)(float *x, int n, int G, float scale, float *mx, float *sum);
    /* activations: x[i] = gelu_tanh(x[i]) * g[i]; x[i] = cap * tanh(x[i] / cap) */
    void (*gelu_mul)(int64_t n, float *x, const float *g);
    void (*softcap)(int64_t n, float *x, float cap);
} hachi_kernels;

/* The table of one ISA: NULL when not compiled in or the CPU lacks it. */
const hachi_kernels *hachi_kernels_get(hachi_isa isa);
/* The scalar reference table, hachi_kernels_get(HACHI_ISA_REF) (always there). */
const hachi_kernels *hachi_kernels_ref(void);
/* The best table for this CPU ($HACHI_ISA=ref|avx2|avxvnni|avx512|neon forces one if available). */
const hachi_kernels *hachi_kernels_best(void);
const char *hachi_isa_name(hachi_isa isa);

/* Per-ISA fillers, called once by dispatch.c (the one place that assembles the tables) and
 * only for an ISA the CPU has. ref.c's sets every entry. The others get a copy of their base
 * table (AVX2 and NEON: ref's; AVX-512: AVX2's) with isa and name set, override the entries
 * they accelerate and return 1, or return 0 when the ISA is not compiled in. AVX-VNNI's base
 * is AVX2's too. */
void hachi_kernels_fill_ref(hachi_kernels *t);
int hachi_kernels_fill_avx2(hachi_kernels *t);
int hachi_kernels_fill_avxvnni(hachi_kernels *t);
int hachi_kernels_fill_avx512(hachi_kernels *t);
int hachi_kernels_fill_amx(hachi_kernels *t);   /* AVX-512 table's AMX GEMM, where the CPU has AMX */
/* dotprod: the CPU has sdot (ASIMDDP); i8mm: it has smmla (HWCAP2_I8MM) */
int hachi_kernels_fill_neon(hachi_kernels *t, int dotprod, int i8mm);
/* The NEON table as on a CPU without i8mm (its x8 kernels all sdot's), where the running CPU has
 * i8mm: the kernel test checks both; NULL elsewhere. */
const hachi_kernels *hachi_kernels_neon_sdot(void);

/* Kernels the ISA files share. ref.c's scalar softmax (also the AVX2 one's fallback);
 * x86_avx2_attn.c's register-blocked attention tiles, used by the AVX2 and AVX-512 tables:
 * the fp16 shapes they do not take go to the table's own per-row kernel given as rows (int8
 * scores to that file's own per-key loops, int8 values to ref's; AVX-512 has its own for 8
 * heads and hands it the other shapes). */
void hachi_attn_softmax_ref(float *x, int n, int G, float scale, float *mx, float *sum);
/* ref's quant_rows_i8 and int8 values (the other tables' fallbacks for shapes they do not take) */
#define HACHI_VQ_KEYS 128
void hachi_quant_rows_i8_ref(const float *x, int rows, int64_t n, int8_t *q, float *scale);
void hachi_attn_vmax_i8_ref(int nk, const float *vs, int64_t ss, const float *p, int G, float *m);
void hachi_attn_values_i8_ref(int64_t hd, int nk, const int8_t *v, int64_t vs, const float *sc, int64_t ss,
                              const float *p, int G, const float *r, int32_t *acc, bool first);
void hachi_attn_flush_i8_ref(int64_t hd, int G, const int32_t *acc, const float *u, float *out);
void hachi_attn_i8_weights_ref(int n, int G, const float *p, const float *vs, const float *r, uint8_t *hi, uint8_t *lo,
                               size_t ld);
void hachi_attn_scores_f16_avx2(hachi_dot_f16_multi_fn rows, int64_t hd, int nk, const uint16_t *k, int64_t k_stride,
                                const float *q, int G, float *s);
void hachi_attn_values_f16_avx2(hachi_axpy_f16_multi_fn rows, int64_t hd, int nk, const uint16_t *v, int64_t v_stride,
                                const float *p, int G, float *out);
void hachi_attn_values_f16_hot_avx2(hachi_axpy_f16_multi_fn rows, int64_t hd, int nk, const uint16_t *v,
                                    int64_t v_stride, const float *p, int G, float *out);
void hachi_attn_scores_f32_avx2(int64_t hd, int nk, const float *k, int64_t k_stride, const float *q, int G, float *s);
void hachi_attn_values_f32_avx2(int64_t hd, int nk, const float *v, int64_t v_stride, const float *p, int G, float *out);
void hachi_attn_softmax_avx2(float *x, int n, int G, float scale, float *mx, float *sum);
/* k/v rows at stride ks/vs, their per-row scales sc at stride ss */
void hachi_attn_scores_i8_avx2(int64_t hd, int nk, const int8_t *k, int64_t ks, const float *sc, int64_t ss,
                               const hachi_query_i8 *q, int G, float *s);
void hachi_attn_vmax_i8_avx2(int nk, const float *vs, int64_t ss, const float *p, int G, float *m);
void hachi_attn_values_i8_avx2(int64_t hd, int nk, const int8_t *v, int64_t vs, const float *sc, int64_t ss,
                               const float *p, int G, const float *r, int32_t *acc, bool first);
void hachi_attn_values_i8_hot_avx2(int64_t hd, int nk, const int8_t *v, int64_t vs, const float *sc, int64_t ss,
                                   const float *p, int G, const float *r, int32_t *acc, bool first);
void hachi_attn_flush_i8_avx2(int64_t hd, int G, const int32_t *acc, const float *u, float *out);
/* the AVX-512 table's Q4_0 gemm_x8 over activation rows (its own takes them packed): the AMX
 * table's for short forwards */
void hachi_gemm_q4_0_x8_rows_avx512(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *a,
                                    size_t a_stride, int nt);
/* the int8 values' 15-bit weights of a run's n keys (n <= HACHI_VQ_KEYS, G % 4 == 0, G <= 64) by
 * pairs of keys, wp[i*G + h] = wq_2i | wq_2i+1 << 16 (an odd n's last pair 0 in its upper half) */
void hachi_attn_quant_weights(const float *p, const float *sc, int64_t ss, int n, int G, const float *r, int32_t *wp);

#endif
