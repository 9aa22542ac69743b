/* kernels/x86_amx: the prefill GEMMs of interleaved Q4_0, Q8_0, Q4_K, Q5_K and Q6_K rows on
 * Intel AMX (TMUL, int8), 16 tokens (a tile's rows) by 16 weight rows (two x8 groups) at a
 * time. All take the whole forward in one call (gemm_x8_all). Q4_0 and Q8_0 stream each group
 * pair's blocks once per token tile, the B tile of a block unpacked two blocks ahead of its
 * product (q8_stream); the K-quants unpack a chunk of blocks' B tiles once for all the token
 * tiles. Each token tile keeps its 16 sums (one zmm a token, the 16 weight rows in its lanes)
 * in registers, the tile unit on one block while the vector units scale an earlier one. The A tiles
 * (the tokens' int8 activations) come packed by act_pack once per forward, each a contiguous
 * block of memory instead of 16 lines gathered from the activation rows.
 * - Q4_0: per block of 32, one TDPBSSD multiplies the tokens' int8 activations by the weights'
 *   signed q - 8 (B: 8 rows of 16 x 4 bytes, which the interleaved layout nearly is: one nibble
 *   mask and a lane shuffle per 64 bytes) into exact int32 sums; then, as ref does,
 *   acc = fma(dw*da, v, acc) in block order. Q8_0 the same, its bytes q + 128 made signed again.
 * - Q4_K and Q5_K: the 6-bit scales folded into two B tiles, Q6_K: the int8 scales into three
 *   (below).
 * Every result equals ref's vec_dot_x8 bit for bit. Short forwards and a lone group (rows % 16
 * == 8) go to the AVX-512 kernels. Built with the AVX-512 and AMX flags; dispatch.c adds these
 * entries to the AVX-512 table only where the CPU has AMX-TILE/INT8 and Linux grants the tile
 * data permission. Tile unit and vector costs on a Sapphire Rapids VM: bench/RESULTS.md. */
#include "kernels/kernels.h"

#if defined(__x86_64__) && defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AVX512F__) && \
    defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && defined(__F16C__)
#include <immintrin.h>
#include <string.h>
#include "kernels/rows.h"

#define VNNI_ROWS 8
#define VNNI_DPBUSD _mm256_dpbusd_epi32
#include "kernels/x86_vnni_x8.h"

#define AMX_ROWS 16   /* weight rows (two groups) and tokens per tile */

/* 16 lanes from the 8 halves at a (group g0's rows) and the 8 at b (g1's) */
static ALWAYS_INLINE __m512 halves16(const hachi_half *a, const hachi_half *b) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                                   _mm_loadu_si128((const __m128i *)b), 1));
}
/* The tile intrinsics are asm statements that tell the compiler neither that they read memory
 * (the config, the B tile written just before) nor that they write it (the stored C tile): a
 * compiler barrier on each side, with the buffers' addresses escaping into it, keeps the
 * stores before and the loads after. */
#define AMX_BARRIER(p) __asm__ __volatile__("" : : "r"(p) : "memory")

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tilecfg;

/* C (tmm0, tmm1): nt tokens x 16 int32; A (tmm2, tmm3): nt tokens x 32 bytes; B (tmm4, tmm5):
 * 8 rows x 64 bytes. Two of each: block b uses the set b % 2. */
static void amx_config(int nt) {
    amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 2; i++) {
        cfg.rows[i] = (uint8_t)nt; cfg.colsb[i] = AMX_ROWS * 4;
        cfg.rows[2 + i] = (uint8_t)nt; cfg.colsb[2 + i] = QK8_0;
        cfg.rows[4 + i] = QK8_0 / 4; cfg.colsb[4 + i] = AMX_ROWS * 4;
    }
    AMX_BARRIER(&cfg);
    _tile_loadconfig(&cfg);
}

/* a token tile's sums: token t's 16 rows in acc[t], from y (zero where first, or past NT) and back */
static ALWAYS_INLINE void acc_load(__m512 *acc, const float *y, int64_t ldy, bool first, const int NT) {
    UNROLL for (int t = 0; t < AMX_ROWS; t++)
        acc[t] = first || t >= NT ? _mm512_setzero_ps() : _mm512_loadu_ps(y + (size_t)t * ldy);
}
static ALWAYS_INLINE void acc_store(const __m512 *acc, float *y, int64_t ldy, const int NT) {
    UNROLL for (int t = 0; t < NT; t++) _mm512_storeu_ps(y + (size_t)t * ldy, acc[t]);
}

/* The B tile of block b of Q4_0 groups g0, g1: row r holds elements 4r..4r+3 of each of the 16
 * weight rows (rows 0-7 from g0, 8-15 from g1), as q - 8. A group's 32-byte slice c holds
 * elements 4c..4c+3 of its 8 rows in its low nibbles and 16+4c.. in its high ones, so B row r
 * is [g0 slice r | g1 slice r] low nibbles for r < 4 and high nibbles of slice r-4 after. */
static ALWAYS_INLINE void unpack_b(const block_q4_0x8 *g0, const block_q4_0x8 *g1, int8_t *bt) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
    UNROLL for (int h = 0; h < 2; h++) {   /* slices 2h, 2h+1 */
        const __m512i a = _mm512_loadu_si512(g0->qs + 64 * h), b = _mm512_loadu_si512(g1->qs + 64 * h);
        /* [g0 slice 2h | g1 slice 2h], [g0 slice 2h+1 | g1 slice 2h+1] */
        const __m512i s0 = _mm512_shuffle_i64x2(a, b, 0x44), s1 = _mm512_shuffle_i64x2(a, b, 0xEE);
        int8_t *o = bt + 64 * 2 * h;
        _mm512_storeu_si512(o, _mm512_sub_epi8(_mm512_and_si512(s0, m4), eight));
        _mm512_storeu_si512(o + 64, _mm512_sub_epi8(_mm512_and_si512(s1, m4), eight));
        _mm512_storeu_si512(o + 256, _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(s0, 4), m4), eight));
        _mm512_storeu_si512(o + 256 + 64, _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(s1, 4), m4), eight));
    }
}

/* The same of Q8_0 groups: slice r of a group is B row r's half, its bytes q + 128 */
static ALWAYS_INLINE void unpack_b8(const block_q8_0x8 *g0, const block_q8_0x8 *g1, int8_t *bt) {
    const __m512i k80 = _mm512_set1_epi8((char)0x80);
    UNROLL for (int h = 0; h < 4; h++) {   /* slices 2h, 2h+1 */
        const __m512i a = _mm512_loadu_si512(g0->qs + 64 * h), b = _mm512_loadu_si512(g1->qs + 64 * h);
        _mm512_storeu_si512(bt + 128 * h, _mm512_xor_si512(_mm512_shuffle_i64x2(a, b, 0x44), k80));
        _mm512_storeu_si512(bt + 128 * h + 64, _mm512_xor_si512(_mm512_shuffle_i64x2(a, b, 0xEE), k80));
    }
}

/* acc[t] = fma(dw * da_t, float(c[t]), acc[t]) for the NT tokens of a block (ab; NT a constant
 * for the tile sizes gemm_q8_all names, so the accumulators stay in registers) */
static ALWAYS_INLINE void scale_block(__m512 *acc, const int32_t (*c)[AMX_ROWS], __m512 dw, const act_tile_q8 *ab,
                                      const int NT) {
    UNROLL for (int t = 0; t < NT; t++)
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(ab->half[t / 8].d[t % 8])),
                                 _mm512_cvtepi32_ps(_mm512_load_si512(c[t])), acc[t]);
}

/* Forwards of fewer tokens go to the AVX-512 GEMM (bench/RESULTS.md, 2026-12-06, nineteenth
 * session: E2B Q4_0 forwards through q8_stream against it took 1.08-1.12x the time at 6 tokens,
 * 0.97-1.07x at 8, 1.02-1.08x at 9 and 10, 0.89-0.95x at 11) */
#define AMX_MIN_TOKENS 11

/* weight bytes prefetched ahead in each of a pair's two streams (the chunk's rows lie one after
 * the other, so the two cover the bytes 16 KiB past the pair) */
#define AMX_PF_DIST 16384

/* block b's product (A from the packed tile ab, B from bt) into tile set (tc, ta, tb); the
 * intrinsics want literal tile numbers */
#define Q8_PRODUCT(tc, ta, tb, ab, bt)                                                             \
    do {                                                                                           \
        _tile_loadd(ta, (ab)->qs[0], QK8_0);                                                       \
        _tile_loadd(tb, (bt), AMX_ROWS * 4);                                                       \
        _tile_zero(tc);                                                                            \
        _tile_dpbssd(tc, ta, tb);                                                                  \
    } while (0)

/* The Q4_0 (Q8_0: q8) GEMM of one token tile (NT tokens, packed at ab) over group pair g0, g1
 * (bsz bytes a block of 8 rows), one block at a time through four stages, so that the vector
 * units and the tile unit work side by side: at step b the B tile of block b + 2 is unpacked
 * (into a ring of 4), the tile unit multiplies block b and stores block b - 1's C (a store right
 * after its product waits for it), and block b - 2 is scaled. Every block's sums stay in
 * registers from the first block to the last. Against unpacking 16 blocks' B tiles first and
 * then running the tile over them (the kernel before), E2B Q4_0 forwards of 12 and 16 tokens
 * took 0.67-0.73x the time, a prefill of 256 0.92-0.94x: the unpacking no longer waits for the
 * tile unit, nor the tile unit for the unpacking. */
static ALWAYS_INLINE void q8_stream(int64_t nb, float *y, int64_t ldy, const char *g0, const char *g1, size_t bsz,
                                    const act_tile_q8 *ab, const int NT, const bool q8) {
    _Alignas(64) int8_t bt[4][QK8_0 / 4][AMX_ROWS * 4];
    _Alignas(64) int32_t c[4][AMX_ROWS][AMX_ROWS];
    __m512 dw[8], acc[AMX_ROWS];
    acc_load(acc, y, ldy, true, NT);
    for (int64_t b = -2; b < nb + 2; b++) {
        if (b + 2 < nb) {
            const char *k0 = g0 + (size_t)(b + 2) * bsz, *k1 = g1 + (size_t)(b + 2) * bsz;
            UNROLL for (int l = 0; l < 3; l++) {
                _mm_prefetch(k0 + AMX_PF_DIST + 64 * l, _MM_HINT_T1);
                _mm_prefetch(k1 + AMX_PF_DIST + 64 * l, _MM_HINT_T1);
            }
            if (q8) unpack_b8((const void *)k0, (const void *)k1, bt[(b + 2) & 3][0]);
            else unpack_b((const void *)k0, (const void *)k1, bt[(b + 2) & 3][0]);
            /* d[8] leads both block types */
            dw[(b + 2) & 7] = halves16(((const block_q4_0x8 *)(const void *)k0)->d, ((const block_q4_0x8 *)(const void *)k1)->d);
        }
        AMX_BARRIER(bt);
        if (b >= 0 && b < nb) {
            if (b & 1) Q8_PRODUCT(1, 3, 5, &ab[b], bt[b & 3][0]);
            else Q8_PRODUCT(0, 2, 4, &ab[b], bt[b & 3][0]);
        }
        if (b >= 1 && b <= nb) {
            if ((b - 1) & 1) _tile_stored(1, c[(b - 1) & 3][0], AMX_ROWS * 4);
            else _tile_stored(0, c[(b - 1) & 3][0], AMX_ROWS * 4);
        }
        AMX_BARRIER(c);
        if (b >= 2) scale_block(acc, (const int32_t(*)[AMX_ROWS])c[(b - 2) & 3], dw[(b - 2) & 7], &ab[b - 2], NT);
    }
    acc_store(acc, y, ldy, NT);
}

typedef void (*amx_gemm_fn)(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *a,
                            size_t a_stride, int nt);

/* fn (a GEMM of at most 16 tokens) over the nt tokens, 16 at a time, tile i's activations at
 * a + i * step (rows: 16 * a_stride; packed tiles: their bytes) */
static void gemm_by_16(amx_gemm_fn fn, int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const char *a,
                       size_t a_stride, size_t step, int nt) {
    for (int t0 = 0; t0 < nt; t0 += AMX_ROWS)
        fn(n, y + (size_t)t0 * ldy, ldy, w8, n_groups, a + (size_t)(t0 / AMX_ROWS) * step, a_stride,
           nt - t0 < AMX_ROWS ? nt - t0 : AMX_ROWS);
}

/* the token tiles of 16 (the last maybe fewer) of the nt tokens, tile i's activations at
 * abase + i * astep, each over blocks [b0, b1) of group pair gi: tile(y, ldy, bt, per-block
 * floats, a, b0, b1, first, NT), the tiles configured by config(rows) when the
 * tile's token count changes */
#define AMX_TOKEN_TILES(config, tile, bt, fl, abase, astep)                                        \
    for (int t0 = 0; t0 < nt; t0 += AMX_ROWS) {                                                    \
        const int tn = nt - t0 < AMX_ROWS ? nt - t0 : AMX_ROWS;                                    \
        if (tn != cfg_nt) config(cfg_nt = tn);                                                     \
        float *yt = y + (size_t)t0 * ldy + 8 * gi;                                                 \
        const char *at = (abase) + (size_t)(t0 / AMX_ROWS) * (astep);                              \
        if (tn == AMX_ROWS) tile(yt, ldy, bt, fl, at, b0, b1, b0 == 0, AMX_ROWS);                  \
        else tile(yt, ldy, bt, fl, at, b0, b1, b0 == 0, tn);                                       \
    }

static amx_gemm_fn gemm_q8_0_vnni;   /* the AVX-512 table's (packed tiles) */

#define Q8_STREAM_CASE(k) case k: q8_stream(nb, yt, ldy, g0, g1, bsz, at, k, q8); break;

/* gemm_x8_all of the AMX table for Q4_0 and Q8_0 (q8), the A tiles from pack (act_tile_q8): per
 * group pair, each token tile of 16 (the pair's rows stay in cache for the tiles after the first).
 * Shorter forwards and a lone group: Q4_0's to AVX-512's GEMM of rows, Q8_0's to AVX-512's of
 * the same packed tiles, a tile at a time. */
static ALWAYS_INLINE void gemm_q8_all(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *a,
                                      size_t a_stride, const void *pack, int nt, bool q8) {
    const char *ac = a, *pk = pack;
    const int64_t nb = n / QK8_0;
    const size_t bsz = q8 ? sizeof(block_q8_0x8) : sizeof(block_q4_0x8), pb = act_pack_bytes_q8(n);
    int gi = 0;
    if (nt >= AMX_MIN_TOKENS && pack) {
        int cfg_nt = 0;
        for (; gi + 2 <= n_groups; gi += 2) {
            const char *g0 = (const char *)w8 + (size_t)gi * nb * bsz, *g1 = g0 + (size_t)nb * bsz;
            for (int t0 = 0; t0 < nt; t0 += AMX_ROWS) {
                const int tn = nt - t0 < AMX_ROWS ? nt - t0 : AMX_ROWS;
                if (tn != cfg_nt) amx_config(cfg_nt = tn);
                float *yt = y + (size_t)t0 * ldy + 8 * gi;
                const act_tile_q8 *at = (const act_tile_q8 *)(const void *)(pk + (size_t)(t0 / AMX_ROWS) * pb);
                switch (tn) {   /* the sums in registers (a verify forward's 11-16 rows too) */
                    Q8_STREAM_CASE(11) Q8_STREAM_CASE(12) Q8_STREAM_CASE(13) Q8_STREAM_CASE(14)
                    Q8_STREAM_CASE(15) Q8_STREAM_CASE(16)
                    default: q8_stream(nb, yt, ldy, g0, g1, bsz, at, tn, q8); break;
                }
            }
        }
    }
    if (gi == n_groups) return;
    const char *wr = (const char *)w8 + (size_t)gi * nb * bsz;
    float *yr = y + 8 * gi;
    if (q8) gemm_by_16(gemm_q8_0_vnni, n, yr, ldy, wr, n_groups - gi, pk, a_stride, pb, nt);
    else gemm_by_16(hachi_gemm_q4_0_x8_rows_avx512, n, yr, ldy, wr, n_groups - gi, ac, a_stride, AMX_ROWS * a_stride, nt);
}

static void gemm_q4_0_all(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *a, size_t a_stride,
                          const void *pack, int nt) {
    gemm_q8_all(n, y, ldy, w8, n_groups, a, a_stride, pack, nt, false);
}
static void gemm_q8_0_all(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *a, size_t a_stride,
                          const void *pack, int nt) {
    gemm_q8_all(n, y, ldy, w8, n_groups, a, a_stride, pack, nt, true);
}

/* ---- Q4_K: the scales folded into the tiles ----
 * Per block of 256 and 16 weight rows (two block_q4_Kx8 groups), ref's exact integers are
 * sumi = sum_j sc[j] * sum(q * y over sub-block j) and summ = sum_j m[j] * sum(y over sub-block
 * j). With sc = lo + 8 * hi (lo, hi < 8) each product q * lo, q * hi (q < 16) fits an int8, so
 * two tiles take sumi over the whole block (4 products of 64 elements each): C_lo = sum(y * q *
 * lo), C_hi = sum(y * q * hi), sumi = C_lo + 8 * C_hi. summ comes from the vector units (the
 * mins against the activation extras, as the AVX-512 GEMM does). Then, as ref does, acc =
 * fma(d*da, sumi, acc), acc = fma(-(dmin*da), summ, acc) per block. The B tiles (2 KiB a
 * 64-element step, 8 KiB a block) are built once per block and group pair for all the tokens of
 * the call (gemm_x8_all: matmul hands over the whole forward), KQ_CHUNK blocks at a time; the
 * token tiles of 16 then run over those blocks with their sums in registers, the C tiles of
 * consecutive blocks in two sets so that one block's tile products need not wait for the last
 * one's stores. The A tiles come packed (kq_act_block), each a contiguous KiB. */
#define KQ_CHUNK 4                       /* blocks whose B tiles are built at once (32 KiB) */
#define KQ_MIN_TOKENS 32                 /* fewer tokens: the AVX-512 GEMM (bench_matmul 6144 x 1536:
                                          * AMX 1.2-1.3x its time at 16-24 tokens, 0.8x at 32) */

typedef struct {
    int8_t b[QK_K / 64][2][QK_K / 16][AMX_ROWS * 4];   /* [step][lo, hi][row of 4 elements][16 rows x 4] */
} kq_btiles;

/* what the vector units need of a block of the pair: d, dmin and the mins (int16 pairs m[2p],
 * m[2p+1] of row r in int32 lane r of mz[p]) */
typedef struct {
    __m512 dw, dmw;
    __m512i mz[4];
} kq_tail;

/* word lanes 2n, 2n+1 = v[n] (16 bytes: the 8 rows of g0, then g1's) */
static ALWAYS_INLINE __m512i kq_words(__m128i v) {
    const __m512i d = _mm512_cvtepu8_epi32(v);
    return _mm512_or_si512(d, _mm512_slli_epi32(d, 16));
}

/* the B tiles and the tail of block b of the group pair (g0, g1); Q5_K: with the values' 5th
 * bits from the pair's qh (h0, h1; NULL for Q4_K) */
static ALWAYS_INLINE void kq_unpack(const block_q4_Kx8 *g0, const block_q4_Kx8 *g1, const uint8_t *h0, const uint8_t *h1,
                                    kq_btiles *bt, kq_tail *tl) {
    _Alignas(32) uint8_t sc0[64], sc1[64];
    q4k_x8_scales(g0->scales, sc0);
    q4k_x8_scales(g1->scales, sc1);
    __m256i m0[4], m1[4];
    q4k_x8_mins(g0->scales, m0);
    q4k_x8_mins(g1->scales, m1);
    UNROLL for (int p = 0; p < 4; p++) tl->mz[p] = _mm512_inserti64x4(_mm512_castsi256_si512(m0[p]), m1[p], 1);
    tl->dw = halves16(g0->d, g1->d);
    tl->dmw = halves16(g0->dmin, g1->dmin);
    const __m512i m4 = _mm512_set1_epi8(0x0F), m7 = _mm512_set1_epi16(7), m10 = _mm512_set1_epi8(0x10);
    UNROLL for (int k = 0; k < QK_K / 64; k++) {   /* sub-blocks 2k (B rows 0-7) and 2k+1 (rows 8-15) */
        __m512i mlo[2], mhi[2];
        UNROLL for (int h = 0; h < 2; h++) {
            const int j = 2 * k + h;
            const __m512i sw = kq_words(_mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(sc0 + 8 * j)),
                                                           _mm_loadl_epi64((const __m128i *)(sc1 + 8 * j))));
            mlo[h] = _mm512_and_si512(sw, m7);
            mhi[h] = _mm512_srli_epi16(sw, 3);
        }
        UNROLL for (int hh = 0; hh < 4; hh++) {   /* slices 2hh, 2hh+1 of the 8 (32 bytes a group) */
            const __m512i a = _mm512_loadu_si512(g0->qs + 256 * k + 64 * hh), b = _mm512_loadu_si512(g1->qs + 256 * k + 64 * hh);
            const __m512i s[2] = {_mm512_shuffle_i64x2(a, b, 0x44), _mm512_shuffle_i64x2(a, b, 0xEE)};
            __m512i hb[2] = {m4, m4};   /* Q5_K: slice c's high bits (bit j: sub-block j), as qs */
            if (h0) {
                const __m512i ha = _mm512_loadu_si512(h0 + 64 * hh), hb_ = _mm512_loadu_si512(h1 + 64 * hh);
                hb[0] = _mm512_shuffle_i64x2(ha, hb_, 0x44);
                hb[1] = _mm512_shuffle_i64x2(ha, hb_, 0xEE);
            }
            UNROLL for (int e = 0; e < 2; e++) {
                const int c = 2 * hh + e;
                __m512i q0 = _mm512_and_si512(s[e], m4), q1 = _mm512_and_si512(_mm512_srli_epi16(s[e], 4), m4);
                if (h0) {   /* bits 2k, 2k+1 to bit 4 */
                    const int j = 2 * k;
                    q0 = _mm512_or_si512(q0, _mm512_and_si512(j <= 4 ? _mm512_slli_epi16(hb[e], 4 - j)
                                                                     : _mm512_srli_epi16(hb[e], j - 4), m10));
                    q1 = _mm512_or_si512(q1, _mm512_and_si512(j + 1 <= 4 ? _mm512_slli_epi16(hb[e], 3 - j)
                                                                         : _mm512_srli_epi16(hb[e], j - 3), m10));
                }
                /* bytes q * m (q < 32, m < 8: below 256) in 16-bit lanes: no carry into the high byte */
                _mm512_store_si512(bt->b[k][0][c], _mm512_mullo_epi16(q0, mlo[0]));
                _mm512_store_si512(bt->b[k][1][c], _mm512_mullo_epi16(q0, mhi[0]));
                _mm512_store_si512(bt->b[k][0][8 + c], _mm512_mullo_epi16(q1, mlo[1]));
                _mm512_store_si512(bt->b[k][1][8 + c], _mm512_mullo_epi16(q1, mhi[1]));
            }
        }
    }
}

/* The Q4_K GEMM's activations (act_pack), per block of 256 and tile of 16 tokens: the 4 A tiles
 * (token t's qs[64k..64k+63] in row t of tile k: one contiguous KiB a tile load, where a tile
 * of the rows gathers 16 lines from some 30 KiB: that GEMM, in cache, 61 against 70 ns per block
 * and row), then each token's mins extras (kx8_extras) and d, 32 bytes a token so that the
 * tile's two halves share no cache line. */
typedef struct {
    int32_t ex[4];
    float d;
    int32_t pad[3];
} kq_act_tok;
typedef struct {
    int8_t qs[QK_K / 64][AMX_ROWS][64];
    kq_act_tok tok[AMX_ROWS];
} kq_act_block;

static size_t kq_pack_bytes(int64_t n) { return (size_t)(n / QK_K) * sizeof(kq_act_block); }

static ALWAYS_INLINE void kq_pack_rows(int64_t n, const void *va, size_t a_stride, int t0, int nt, void *tile, bool extras) {
    const int64_t nb = n / QK_K;
    kq_act_block *p = tile;
    for (int t = 0; t < nt; t++) {
        const char *row = (const char *)va + (size_t)t * a_stride;
        const block_q8_K *q = (const block_q8_K *)(const void *)row;
        for (int64_t b = 0; b < nb; b++) {
            UNROLL for (int k = 0; k < QK_K / 64; k++)
                _mm512_storeu_si512(p[b].qs[k][t0 + t], _mm512_loadu_si512(q[b].qs + 64 * k));
            if (extras) memcpy(p[b].tok[t0 + t].ex, kx8_extras(row, nb, b), sizeof p[b].tok[0].ex);
            p[b].tok[t0 + t].d = q[b].d;
        }
    }
}
static void kq_pack(int64_t n, const void *va, size_t a_stride, int t0, int nt, int tile_nt, void *tile) {
    (void)tile_nt;
    kq_pack_rows(n, va, a_stride, t0, nt, tile, true);
}
/* Q6_K's: the same tiles without the mins' extras */
static void q6_pack(int64_t n, const void *va, size_t a_stride, int t0, int nt, int tile_nt, void *tile) {
    (void)tile_nt;
    kq_pack_rows(n, va, a_stride, t0, nt, tile, false);
}

/* The K-quant GEMMs' tiles, 64 bytes a row: tmm0..n_tok-1 (C and A) nt tokens' rows, the
 * rest (B) the 16 rows of a 64-element step */
static void kquant_config(int nt, int n_tok) {
    amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) { cfg.rows[i] = (uint8_t)(i < n_tok ? nt : QK_K / 16); cfg.colsb[i] = 64; }
    AMX_BARRIER(&cfg);
    _tile_loadconfig(&cfg);
}
/* C: tmm0-1 (lo, hi) for even blocks, tmm2-3 for odd ones; A: tmm4, tmm5 by step; B: tmm6 lo, tmm7 hi */
static void kq_config(int nt) { kquant_config(nt, 6); }

/* the two products of one block for the tile's tokens (ab: their kq_act_block) into tiles (tl, th),
 * stored to c; TDPBSUD: the activations signed, the B bytes unsigned (Q5_K's reach 31 * 7) */
#define KQ_TILES(tl, th, ab, bt, c)                                                                \
    do {                                                                                           \
        AMX_BARRIER(bt);                                                                           \
        _tile_zero(tl);                                                                            \
        _tile_zero(th);                                                                            \
        UNROLL for (int k_ = 0; k_ < QK_K / 64; k_ += 2) {                                         \
            _tile_loadd(4, (ab)->qs[k_][0], 64);                                                   \
            _tile_loadd(6, (bt)->b[k_][0][0], AMX_ROWS * 4);                                       \
            _tile_loadd(7, (bt)->b[k_][1][0], AMX_ROWS * 4);                                       \
            _tile_dpbsud(tl, 4, 6);                                                                \
            _tile_dpbsud(th, 4, 7);                                                                \
            _tile_loadd(5, (ab)->qs[k_ + 1][0], 64);                                               \
            _tile_loadd(6, (bt)->b[k_ + 1][0][0], AMX_ROWS * 4);                                   \
            _tile_loadd(7, (bt)->b[k_ + 1][1][0], AMX_ROWS * 4);                                   \
            _tile_dpbsud(tl, 5, 6);                                                                \
            _tile_dpbsud(th, 5, 7);                                                                \
        }                                                                                          \
        _tile_stored(tl, (c)[0], AMX_ROWS * 4);                                                    \
        _tile_stored(th, (c)[1], AMX_ROWS * 4);                                                    \
        AMX_BARRIER(c);                                                                            \
    } while (0)

static ALWAYS_INLINE void kq_scale(__m512 *acc, const int32_t (*c)[AMX_ROWS][AMX_ROWS], const kq_tail *tl,
                                   const kq_act_block *ab, const int NT) {
    UNROLL for (int t = 0; t < NT; t++) {
        const __m512 da = _mm512_set1_ps(ab->tok[t].d);
        const int32_t *ex = ab->tok[t].ex;
        __m512i summ = _mm512_dpwssd_epi32(_mm512_setzero_si512(), tl->mz[0], _mm512_set1_epi32(ex[0]));
        UNROLL for (int p = 1; p < 4; p++) summ = _mm512_dpwssd_epi32(summ, tl->mz[p], _mm512_set1_epi32(ex[p]));
        const __m512i sumi = _mm512_add_epi32(_mm512_load_si512(c[0][t]), _mm512_slli_epi32(_mm512_load_si512(c[1][t]), 3));
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(tl->dw, da), _mm512_cvtepi32_ps(sumi), acc[t]);
        acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(tl->dmw, da), _mm512_cvtepi32_ps(summ), acc[t]);
    }
}

/* blocks [b0, b1) of the pair's B tiles bt (bt[0]: block b0) for the NT tokens of the packed
 * tile a (its kq_act_blocks), into and out of y (first: y not yet written) */
static ALWAYS_INLINE void kq_token_tile(float *y, int64_t ldy, const kq_btiles *bt, const kq_tail *tl, const char *a,
                                        int64_t b0, int64_t b1, bool first, const int NT) {
    const kq_act_block *ab = (const kq_act_block *)(const void *)a;
    __m512 acc[AMX_ROWS];
    acc_load(acc, y, ldy, first, NT);
    _Alignas(64) int32_t c[2][2][AMX_ROWS][AMX_ROWS];
    for (int64_t b = b0; b <= b1; b++) {   /* block b on the tile unit, b-1 on the vector units */
        if (b < b1) {
            if (b & 1) KQ_TILES(2, 3, &ab[b], &bt[b - b0], c[1]);
            else KQ_TILES(0, 1, &ab[b], &bt[b - b0], c[0]);
        }
        if (b > b0) kq_scale(acc, (const int32_t(*)[AMX_ROWS][AMX_ROWS])c[(b - 1) & 1], &tl[b - 1 - b0], &ab[b - 1], NT);
    }
    acc_store(acc, y, ldy, NT);
}

static amx_gemm_fn gemm_q4_K_vnni, gemm_q5_K_vnni;   /* the AVX-512 table's */

/* gemm_x8_all of the AMX table for Q4_K and Q5_K (q5; bsz bytes a block of 8 rows), the tiles from pack */
static ALWAYS_INLINE void gemm_kq(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *a,
                                  size_t a_stride, const void *pack, int nt, size_t bsz, bool q5) {
    const amx_gemm_fn vnni = q5 ? gemm_q5_K_vnni : gemm_q4_K_vnni;
    if (nt < KQ_MIN_TOKENS || !pack) {
        gemm_by_16(vnni, n, y, ldy, w8, n_groups, a, a_stride, AMX_ROWS * a_stride, nt);
        return;
    }
    const int64_t nb = n / QK_K;
    const char *w = w8, *ac = a, *pk = pack;
    _Alignas(64) kq_btiles bt[KQ_CHUNK];
    kq_tail tl[KQ_CHUNK];
    int cfg_nt = 0, gi = 0;
    for (; gi + 2 <= n_groups; gi += 2) {
        const char *g0 = w + (size_t)gi * nb * bsz, *g1 = g0 + (size_t)nb * bsz;
        for (int64_t b0 = 0; b0 < nb; b0 += KQ_CHUNK) {
            const int64_t b1 = b0 + KQ_CHUNK < nb ? b0 + KQ_CHUNK : nb;
            for (int64_t b = b0; b < b1; b++) {
                const char *k0 = g0 + (size_t)b * bsz, *k1 = g1 + (size_t)b * bsz;
                kq_unpack((const block_q4_Kx8 *)(const void *)k0, (const block_q4_Kx8 *)(const void *)k1,
                          q5 ? (const uint8_t *)k0 + offsetof(block_q5_Kx8, qh) : NULL,
                          q5 ? (const uint8_t *)k1 + offsetof(block_q5_Kx8, qh) : NULL, &bt[b - b0], &tl[b - b0]);
            }
            AMX_TOKEN_TILES(kq_config, kq_token_tile, bt, tl, pk, kq_pack_bytes(n))
        }
    }
    if (gi < n_groups)   /* a lone group */
        gemm_by_16(vnni, n, y + 8 * gi, ldy, w + (size_t)gi * nb * bsz, 1, ac, a_stride, AMX_ROWS * a_stride, nt);
}

static void gemm_q4_K(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *a, size_t a_stride,
                      const void *pack, int nt) {
    gemm_kq(n, y, ldy, w8, n_groups, a, a_stride, pack, nt, sizeof(block_q4_Kx8), false);
}
static void gemm_q5_K(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *a, size_t a_stride,
                      const void *pack, int nt) {
    gemm_kq(n, y, ldy, w8, n_groups, a, a_stride, pack, nt, sizeof(block_q5_Kx8), true);
}

/* ---- Q6_K: the int8 scales folded into three tiles ----
 * Per block of 256 and 16 weight rows, ref's exact integer is sumi = sum_j sc[j] * sum(q * y
 * over sub-block j of 16), q = v - 32 in [-32, 31], sc in [-128, 127]. Written in balanced base
 * 8, sc = e0 + 8 * e1 + 64 * e2 with digits e in [-3, 4] (e2 in [-2, 2]), each q * e fits an
 * int8 ([-128, 124]), so three B tiles hold q * e0, q * e1, q * e2 and three C tiles take their
 * sums over the whole block (12 TDPBSSD): sumi = C0 + 8 * C1 + 64 * C2. Then acc = fma(d*da,
 * sumi, acc) per block, as ref. The byte products come from two vpmullw a B row and digit: the
 * low byte of a 16-bit product is the low byte's product mod 256 (what int8 keeps), and the high
 * byte's comes from the lane with its low byte cleared. B tiles of Q6_CHUNK blocks (12 KiB each)
 * are built at a time, the A tiles packed as Q4_K's. */
#define Q6_CHUNK 2
#define Q6_MIN_TOKENS 48   /* fewer tokens: the AVX-512 GEMM (bench_matmul 6144 x 1536: AMX 1.8x its time
                            * at 16 tokens, 1.1x at 32, even at 48-56, 0.8x at 64) */

typedef struct {
    int8_t b[QK_K / 64][3][QK_K / 16][AMX_ROWS * 4];   /* [step][digit][B row][16 rows x 4] */
} q6_btiles;

/* digit i of the 16 scales at sc (int32 lanes), in both 16-bit halves of each lane */
static ALWAYS_INLINE void q6_digits(__m512i sc, __m512i e[3]) {
    const __m512i three = _mm512_set1_epi32(3), seven = _mm512_set1_epi32(7), lo16 = _mm512_set1_epi32(0xFFFF);
    UNROLL for (int i = 0; i < 3; i++) {
        const __m512i d = i < 2 ? _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(sc, three), seven), three) : sc;
        e[i] = _mm512_or_si512(_mm512_and_si512(d, lo16), _mm512_slli_epi32(d, 16));
        sc = _mm512_srai_epi32(_mm512_sub_epi32(sc, d), 3);
    }
}

/* the B tiles of block b of the group pair (g0, g1), and its d */
static ALWAYS_INLINE void q6_unpack(const block_q6_Kx8 *g0, const block_q6_Kx8 *g1, q6_btiles *bt, __m512 *dw) {
    *dw = halves16(g0->d, g1->d);
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30), k32 = _mm512_set1_epi8(32),
                  odd = _mm512_set1_epi16((short)0xFF00);
    UNROLL for (int u = 0; u < QK_K / 32; u++) {   /* 32 values: sub-blocks 2u, 2u+1; step u / 2, B rows 8(u % 2).. */
        __m512i e[2][3], ql[4], qh[2];
        UNROLL for (int s = 0; s < 2; s++) {
            const __m128i sc = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(const void *)g0->scales[2 * u + s]),
                                                  _mm_loadl_epi64((const __m128i *)(const void *)g1->scales[2 * u + s]));
            q6_digits(_mm512_cvtepi8_epi32(sc), e[s]);
        }
        UNROLL for (int h = 0; h < 2; h++) {   /* [g0 | g1] 32-byte slices c = 2h, 2h+1 */
            const __m512i a = _mm512_loadu_si512(g0->ql + 128 * u + 64 * h), b = _mm512_loadu_si512(g1->ql + 128 * u + 64 * h);
            ql[2 * h] = _mm512_shuffle_i64x2(a, b, 0x44);
            ql[2 * h + 1] = _mm512_shuffle_i64x2(a, b, 0xEE);
        }
        {
            const __m512i a = _mm512_loadu_si512(g0->qh + 64 * u), b = _mm512_loadu_si512(g1->qh + 64 * u);
            qh[0] = _mm512_shuffle_i64x2(a, b, 0x44);
            qh[1] = _mm512_shuffle_i64x2(a, b, 0xEE);
        }
        UNROLL for (int s = 0; s < 2; s++)
            UNROLL for (int c = 0; c < 4; c++) {
                const __m512i nib = _mm512_and_si512(s ? _mm512_srli_epi16(ql[c], 4) : ql[c], m4);
                const __m512i top = c == 0 ? _mm512_slli_epi16(qh[s], 4) : c == 1 ? _mm512_slli_epi16(qh[s], 2)
                                  : c == 2 ? qh[s] : _mm512_srli_epi16(qh[s], 2);   /* bits 2c, 2c+1 to 4, 5 */
                const __m512i q = _mm512_sub_epi8(_mm512_or_si512(nib, _mm512_and_si512(top, m30)), k32);
                const __m512i qo = _mm512_and_si512(q, odd);
                UNROLL for (int i = 0; i < 3; i++)
                    _mm512_store_si512(bt->b[u / 2][i][8 * (u % 2) + 4 * s + c],
                                       _mm512_mask_blend_epi8((__mmask64)0xAAAAAAAAAAAAAAAAull, _mm512_mullo_epi16(q, e[s][i]),
                                                              _mm512_mullo_epi16(qo, e[s][i])));
            }
    }
}

/* C: tmm0-2 (the digits); A: tmm3, tmm4 by step; B: tmm5-7 */
static void q6_config(int nt) { kquant_config(nt, 5); }

/* one step's three products (A tile ta from the packed block ab) */
#define Q6_STEP(ta, ab, bt, k)                                                                     \
    do {                                                                                           \
        _tile_loadd(ta, (ab)->qs[k][0], 64);                                                       \
        _tile_loadd(5, (bt)->b[k][0][0], AMX_ROWS * 4);                                            \
        _tile_loadd(6, (bt)->b[k][1][0], AMX_ROWS * 4);                                            \
        _tile_loadd(7, (bt)->b[k][2][0], AMX_ROWS * 4);                                            \
        _tile_dpbssd(0, ta, 5);                                                                    \
        _tile_dpbssd(1, ta, 6);                                                                    \
        _tile_dpbssd(2, ta, 7);                                                                    \
    } while (0)

static ALWAYS_INLINE void q6_token_tile(float *y, int64_t ldy, const q6_btiles *bt, const __m512 *dw, const char *a,
                                        int64_t b0, int64_t b1, bool first, const int NT) {
    const kq_act_block *ab = (const kq_act_block *)(const void *)a;
    __m512 acc[AMX_ROWS];
    acc_load(acc, y, ldy, first, NT);
    _Alignas(64) int32_t c[2][3][AMX_ROWS][AMX_ROWS];
    for (int64_t b = b0; b <= b1; b++) {   /* block b on the tile unit, b-1 on the vector units */
        if (b < b1) {
            const q6_btiles *bb = &bt[b - b0];
            int32_t (*cb)[AMX_ROWS][AMX_ROWS] = c[b & 1];
            AMX_BARRIER(bb);
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            Q6_STEP(3, &ab[b], bb, 0);
            Q6_STEP(4, &ab[b], bb, 1);
            Q6_STEP(3, &ab[b], bb, 2);
            Q6_STEP(4, &ab[b], bb, 3);
            _tile_stored(0, cb[0], AMX_ROWS * 4);
            _tile_stored(1, cb[1], AMX_ROWS * 4);
            _tile_stored(2, cb[2], AMX_ROWS * 4);
            AMX_BARRIER(cb);
        }
        if (b > b0) {
            const int32_t (*cb)[AMX_ROWS][AMX_ROWS] = (const int32_t(*)[AMX_ROWS][AMX_ROWS])c[(b - 1) & 1];
            const __m512 d = dw[b - 1 - b0];
            UNROLL for (int t = 0; t < NT; t++) {
                const __m512i sumi = _mm512_add_epi32(_mm512_add_epi32(_mm512_load_si512(cb[0][t]),
                                                                       _mm512_slli_epi32(_mm512_load_si512(cb[1][t]), 3)),
                                                      _mm512_slli_epi32(_mm512_load_si512(cb[2][t]), 6));
                acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(ab[b - 1].tok[t].d)), _mm512_cvtepi32_ps(sumi), acc[t]);
            }
        }
    }
    acc_store(acc, y, ldy, NT);
}

static amx_gemm_fn gemm_q6_K_vnni;   /* the AVX-512 table's */

/* gemm_x8_all of the AMX table for Q6_K (the tiles from pack) */
static void gemm_q6_K(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *a, size_t a_stride,
                      const void *pack, int nt) {
    if (nt < Q6_MIN_TOKENS || !pack) {
        gemm_by_16(gemm_q6_K_vnni, n, y, ldy, w8, n_groups, a, a_stride, AMX_ROWS * a_stride, nt);
        return;
    }
    const int64_t nb = n / QK_K;
    const block_q6_Kx8 *w = w8;
    const char *ac = a, *pk = pack;
    _Alignas(64) q6_btiles bt[Q6_CHUNK];
    __m512 dw[Q6_CHUNK];
    int cfg_nt = 0, gi = 0;
    for (; gi + 2 <= n_groups; gi += 2) {
        const block_q6_Kx8 *g0 = w + (size_t)gi * nb, *g1 = g0 + nb;
        for (int64_t b0 = 0; b0 < nb; b0 += Q6_CHUNK) {
            const int64_t b1 = b0 + Q6_CHUNK < nb ? b0 + Q6_CHUNK : nb;
            for (int64_t b = b0; b < b1; b++) q6_unpack(g0 + b, g1 + b, &bt[b - b0], &dw[b - b0]);
            AMX_TOKEN_TILES(q6_config, q6_token_tile, bt, dw, pk, kq_pack_bytes(n))
        }
    }
    if (gi < n_groups)   /* a lone group */
        gemm_by_16(gemm_q6_K_vnni, n, y + 8 * gi, ldy, w + (size_t)gi * nb, 1, ac, a_stride, AMX_ROWS * a_stride, nt);
}

/* ---- int8 attention rows for many queries (kernels.h attn_i8_*) ----------------------------- */

/* every tile 16 rows of 64 bytes: dots' C (tmm0-3, keys x queries), A (tmm4, key rows) and B
 * (tmm5-7, query tiles); wsums' C (tmm0-3: hi and lo sums of two tiles of 16 dims, queries x
 * dims), A (tmm4, tmm5: the queries' weights over 64 keys, hi and lo) and B (tmm6, tmm7: value tiles) */
static void attn_config(void) {
    amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) {
        cfg.rows[i] = AMX_ROWS;
        cfg.colsb[i] = 64;
    }
    AMX_BARRIER(&cfg);
    _tile_loadconfig(&cfg);
}

/* B tiles of 16 queries by 64 dims (1 KiB each, query tile qt and dim step ks at (qt * hd / 64 + ks)
 * KiB): row r holds dims 4r..4r+3 of the step for each of the 16 queries */
static void attn_i8_qpack(int64_t hd, int nq, const int8_t *q, int8_t *pack) {
    const int64_t nks = hd / 64;
    for (int qt = 0; qt < nq / 16; qt++)
        for (int64_t ks = 0; ks < nks; ks++) {
            int32_t *t = (int32_t *)(void *)(pack + ((size_t)qt * nks + ks) * 1024);
            for (int i = 0; i < 16; i++) {
                const int8_t *row = q + (size_t)(16 * qt + i) * hd + 64 * ks;
                for (int r = 0; r < 16; r++) memcpy(&t[r * 16 + i], row + 4 * r, 4);
            }
        }
}

/* per 16 keys (A, loaded once a dim step) against up to 4 query tiles (C tmm0-3) at a time */
static void attn_i8_dots(int64_t hd, int nk, const int8_t *k, int64_t k_stride, int nq, const int8_t *pack, int32_t *d) {
    const int64_t nks = hd / 64;
    const int nqt = nq / 16;
    const size_t ldd = (size_t)nq * 4;
    attn_config();
    for (int kt = 0; kt < nk / 16; kt++) {
        const int8_t *kr = k + (size_t)kt * 16 * k_stride;
        int32_t *dr = d + (size_t)kt * 16 * nq;
        for (int q0 = 0; q0 < nqt; q0 += 4) {
            const int n = nqt - q0 < 4 ? nqt - q0 : 4;
            const int8_t *b = pack + (size_t)q0 * nks * 1024;
            _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
            for (int64_t ks = 0; ks < nks; ks++) {
                _tile_loadd(4, kr + 64 * ks, k_stride);
                _tile_loadd(5, b + ks * 1024, 64);
                _tile_dpbssd(0, 4, 5);
                if (n > 1) { _tile_loadd(6, b + (nks + ks) * 1024, 64); _tile_dpbssd(1, 4, 6); }
                if (n > 2) { _tile_loadd(7, b + (2 * nks + ks) * 1024, 64); _tile_dpbssd(2, 4, 7); }
                if (n > 3) { _tile_loadd(5, b + (3 * nks + ks) * 1024, 64); _tile_dpbssd(3, 4, 5); }
            }
            AMX_BARRIER(dr);
            _tile_stored(0, dr + 16 * q0, ldd);
            if (n > 1) _tile_stored(1, dr + 16 * (q0 + 1), ldd);
            if (n > 2) _tile_stored(2, dr + 16 * (q0 + 2), ldd);
            if (n > 3) _tile_stored(3, dr + 16 * (q0 + 3), ldd);
            AMX_BARRIER(dr);
        }
    }
}

/* B tiles of 64 keys by 16 dims (dim tile dt and key step ks at (dt * nk / 64 + ks) KiB): row r
 * holds keys 4r..4r+3 of the step for each of the 16 dims. Four value rows at a time: their bytes
 * interleaved within each 128-bit lane (16 dims), then the lanes of the four results transposed so
 * that each dim tile's 64 bytes of the four keys are one store. */
static void attn_i8_vpack(int64_t hd, int nk, const int8_t *v, int8_t *pack) {
    const int nks = nk / 64;
    for (int kq = 0; kq < nk / 4; kq++) {
        const int8_t *r = v + (size_t)4 * kq * hd;
        int8_t *o = pack + (size_t)(kq / 16) * 1024 + (size_t)(kq % 16) * 64;
        for (int64_t c = 0; c < hd / 64; c++) {
            const __m512i r0 = _mm512_loadu_si512(r + 64 * c), r1 = _mm512_loadu_si512(r + hd + 64 * c),
                          r2 = _mm512_loadu_si512(r + 2 * hd + 64 * c), r3 = _mm512_loadu_si512(r + 3 * hd + 64 * c);
            const __m512i l01 = _mm512_unpacklo_epi8(r0, r1), h01 = _mm512_unpackhi_epi8(r0, r1);
            const __m512i l23 = _mm512_unpacklo_epi8(r2, r3), h23 = _mm512_unpackhi_epi8(r2, r3);
            const __m512i a = _mm512_unpacklo_epi16(l01, l23), b = _mm512_unpackhi_epi16(l01, l23);
            const __m512i e = _mm512_unpacklo_epi16(h01, h23), f = _mm512_unpackhi_epi16(h01, h23);
            const __m512i t0 = _mm512_shuffle_i64x2(a, b, 0x44), t1 = _mm512_shuffle_i64x2(e, f, 0x44);
            const __m512i t2 = _mm512_shuffle_i64x2(a, b, 0xEE), t3 = _mm512_shuffle_i64x2(e, f, 0xEE);
            const size_t tile = (size_t)nks * 1024;   /* from one dim tile to the next */
            _mm512_storeu_si512(o + (4 * c + 0) * tile, _mm512_shuffle_i64x2(t0, t1, 0x88));
            _mm512_storeu_si512(o + (4 * c + 1) * tile, _mm512_shuffle_i64x2(t0, t1, 0xDD));
            _mm512_storeu_si512(o + (4 * c + 2) * tile, _mm512_shuffle_i64x2(t2, t3, 0x88));
            _mm512_storeu_si512(o + (4 * c + 3) * tile, _mm512_shuffle_i64x2(t2, t3, 0xDD));
        }
    }
}

/* per query tile and two dim tiles: the hi and lo weight tiles (A) of each key step against its two
 * value tiles (B) into four C tiles, then S = 128 * hi + lo */
static void attn_i8_wsums(int64_t hd, int nk, int nq, const uint8_t *whi, const uint8_t *wlo, const int8_t *pack,
                          int32_t *S) {
    const int nks = nk / 64;
    _Alignas(64) int32_t c[4][16][16];
    attn_config();
    for (int qt = 0; qt < nq / 16; qt++) {
        const uint8_t *ah = whi + (size_t)qt * 16 * nk, *al = wlo + (size_t)qt * 16 * nk;
        for (int64_t dt = 0; dt < hd / 16; dt += 2) {
            const int8_t *b = pack + (size_t)dt * nks * 1024;
            _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
            for (int ks = 0; ks < nks; ks++) {
                _tile_loadd(4, ah + 64 * ks, nk);
                _tile_loadd(5, al + 64 * ks, nk);
                _tile_loadd(6, b + (size_t)ks * 1024, 64);
                _tile_loadd(7, b + (size_t)(nks + ks) * 1024, 64);
                _tile_dpbusd(0, 4, 6);
                _tile_dpbusd(1, 5, 6);
                _tile_dpbusd(2, 4, 7);
                _tile_dpbusd(3, 5, 7);
            }
            AMX_BARRIER(c);
            _tile_stored(0, c[0], 64);
            _tile_stored(1, c[1], 64);
            _tile_stored(2, c[2], 64);
            _tile_stored(3, c[3], 64);
            AMX_BARRIER(c);
            for (int i = 0; i < 16; i++) {
                int32_t *o = S + (size_t)(16 * qt + i) * hd + 16 * dt;
                for (int h = 0; h < 2; h++)
                    _mm512_storeu_si512(o + 16 * h, _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c[2 * h][i]), 7),
                                                                     _mm512_load_si512(c[2 * h + 1][i])));
            }
        }
    }
}

/* kernels.h's attn_i8_weights for 8 heads, 8 keys at a time: the products in key order (two keys
 * a zmm, rounded to nearest even as rintf does), transposed to head order by two rounds of lane
 * permutes (keys 0-3 and 4-7 apart per half of the heads, then each pair of heads), narrowed to
 * bytes and stored a head's 8 keys at a time; other head counts and the last keys: ref's */
static void attn_i8_weights(int n, int G, const float *p, const float *vs, const float *r, uint8_t *hi, uint8_t *lo,
                            size_t ld) {
    if (G != 8) {
        hachi_attn_i8_weights_ref(n, G, p, vs, r, hi, lo, ld);
        return;
    }
    const __m512 rv = _mm512_broadcast_f32x8(_mm256_loadu_ps(r));
    /* IU[half], over (w[2c], w[2c + 1]): lane 4h + k takes key k's head 4 half + h (w[k / 2], lane
     * 8 (k % 2) + 4 half + h); IO[a % 2], over (u, v) of one half of the heads: lane 8e + k takes
     * head 2a + e of key k (u's lane 4 (2a + e) % 4 + k for k < 4, v's for the others) */
    static const int32_t IU[2][16] = {{0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27},
                                      {4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30, 7, 15, 23, 31}};
    static const int32_t IO[2][16] = {{0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23},
                                      {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31}};
    const __m512i iu[2] = {_mm512_loadu_si512(IU[0]), _mm512_loadu_si512(IU[1])};
    const __m512i io[2] = {_mm512_loadu_si512(IO[0]), _mm512_loadu_si512(IO[1])};
    const __m512i m7 = _mm512_set1_epi32(127);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m512i w[4];
        UNROLL for (int c = 0; c < 4; c++) {
            const __m512 v = _mm512_insertf32x8(_mm512_set1_ps(vs[j + 2 * c]), _mm256_set1_ps(vs[j + 2 * c + 1]), 1);
            w[c] = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(p + (size_t)(j + 2 * c) * 8), v), rv));
        }
        const __m512i u0 = _mm512_permutex2var_epi32(w[0], iu[0], w[1]), u1 = _mm512_permutex2var_epi32(w[0], iu[1], w[1]);
        const __m512i v0 = _mm512_permutex2var_epi32(w[2], iu[0], w[3]), v1 = _mm512_permutex2var_epi32(w[2], iu[1], w[3]);
        UNROLL for (int a = 0; a < 4; a++) {
            const __m512i o = _mm512_permutex2var_epi32(a < 2 ? u0 : u1, io[a % 2], a < 2 ? v0 : v1);
            const __m128i bh = _mm512_cvtepi32_epi8(_mm512_srli_epi32(o, 7)), bl = _mm512_cvtepi32_epi8(_mm512_and_si512(o, m7));
            _mm_storel_epi64((__m128i *)(void *)(hi + (size_t)(2 * a) * ld + j), bh);
            _mm_storel_epi64((__m128i *)(void *)(hi + (size_t)(2 * a + 1) * ld + j), _mm_unpackhi_epi64(bh, bh));
            _mm_storel_epi64((__m128i *)(void *)(lo + (size_t)(2 * a) * ld + j), bl);
            _mm_storel_epi64((__m128i *)(void *)(lo + (size_t)(2 * a + 1) * ld + j), _mm_unpackhi_epi64(bl, bl));
        }
    }
    if (j < n) hachi_attn_i8_weights_ref(n - j, G, p + (size_t)j * 8, vs + j, r, hi + j, lo + j, ld);
}

typedef void (*amx_all_fn)(int64_t n, float *y, int64_t ldy, const void *w8, int n_groups, const void *a,
                           size_t a_stride, const void *pack, int nt);

/* type kt's prefill GEMM to AMX's (all, on tiles packed by pack from pack_min tokens), its gemm_x8
 * kept in *vnni for the forwards and groups that AMX leaves to it */
static void amx_entry(hachi_type_kernels *kt, amx_gemm_fn *vnni, amx_all_fn all,
                      void (*pack)(int64_t, const void *, size_t, int, int, int, void *), size_t (*pack_bytes)(int64_t),
                      int pack_min) {
    if (vnni) *vnni = kt->gemm_x8;
    kt->gemm_x8 = NULL;
    kt->gemm_x8_all = all;
    kt->act_pack = pack;
    kt->act_pack_bytes = pack_bytes;
    kt->act_pack_min = pack_min;
}

/* on the AVX-512 table, after its filler: the Q4_0, Q8_0, Q4_K, Q5_K and Q6_K prefill GEMMs (the
 * x8 kernels stay VNNI's; shorter forwards than AMX_MIN_TOKENS / KQ_MIN_TOKENS / Q6_MIN_TOKENS
 * tokens go to the table's GEMMs: Q4_0's over the rows, the others' as that table has them, Q6_K's from 3
 * tokens here, below) */
int hachi_kernels_fill_amx(hachi_kernels *t) {
    (void)x8_q4_0;   /* the header's kernels are the AVX-512 table's */
    (void)x8_q4_K;
    (void)x8_q8_0;
    (void)x8_q5_K;
    (void)x8_q6_K;
    (void)act_extra_q6_K;
    (void)act_prep_q6_K;
    /* Q4_0: act_pack_q8's tiles, not AVX-512's own (which lays tiles of 8 tokens out its own way) */
    amx_entry(&t->t[HACHI_TYPE_Q4_0], NULL, gemm_q4_0_all, act_pack_q8, act_pack_bytes_q8, AMX_MIN_TOKENS);
    hachi_type_kernels *q8 = &t->t[HACHI_TYPE_Q8_0], *k4 = &t->t[HACHI_TYPE_Q4_K], *k5 = &t->t[HACHI_TYPE_Q5_K],
                       *k6 = &t->t[HACHI_TYPE_Q6_K];
    if (q8->gemm_x8 && q8->act_pack)   /* AVX-512's, over the same tiles (act_pack_q8's): packed from its gemm_min */
        amx_entry(q8, &gemm_q8_0_vnni, gemm_q8_0_all, act_pack_q8, act_pack_bytes_q8, 0);
    if (k4->gemm_x8 && !k4->act_pack)   /* AVX-512's over the rows */
        amx_entry(k4, &gemm_q4_K_vnni, gemm_q4_K, kq_pack, kq_pack_bytes, KQ_MIN_TOKENS);
    if (k5->gemm_x8 && !k5->act_pack && k5->act_extra == k4->act_extra)   /* the mins' extras as Q4_K's */
        amx_entry(k5, &gemm_q5_K_vnni, gemm_q5_K, kq_pack, kq_pack_bytes, KQ_MIN_TOKENS);
    if (k6->gemm_x8 && !k6->act_pack) {
        amx_entry(k6, &gemm_q6_K_vnni, gemm_q6_K, q6_pack, kq_pack_bytes, Q6_MIN_TOKENS);
        /* on these cores AVX-512's Q6_K GEMM beats its 4-token x8 kernel from 3 tokens (bench_ab,
         * forwards of the Q4_0 file, whose head is Q6_K, of 3 / 4 rows 0.974 / 0.983-0.989, of
         * Q4_K_M of 4 rows 0.960; 2 rows 0.995), not from 5 as measured on Zen */
        k6->gemm_min = 3;
    }
    t->attn_i8_sets = 4;
    t->attn_i8_qpack = attn_i8_qpack;
    t->attn_i8_dots = attn_i8_dots;
    t->attn_i8_vpack = attn_i8_vpack;
    t->attn_i8_wsums = attn_i8_wsums;
    t->attn_i8_weights = attn_i8_weights;
    return 1;
}

#else
int hachi_kernels_fill_amx(hachi_kernels *t) { (void)t; return 0; }
#endif
