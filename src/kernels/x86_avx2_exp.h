/* x86_avx2_exp: e^x on 8 floats for the AVX2 files (x86_avx2.c's GELU / softcap tanh and
 * x86_avx2_attn.c's softmax), and on 16 where AVX-512 is enabled (x86_avx512.c's softmax): the
 * same operations and constants, so lane for lane the same results. Include only where AVX2
 * and FMA are enabled. */
#ifndef HACHI_X86_AVX2_EXP_H
#define HACHI_X86_AVX2_EXP_H
#include <immintrin.h>

#include "kernels/exp_cephes.h"

static inline __m256 hachi_exp256(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));   /* a NaN stays NaN */
    const __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(HACHI_EXP_LOG2E), _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(HACHI_EXP_LN2_HI), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(HACHI_EXP_LN2_LO), x);
    __m256 y = _mm256_set1_ps(HACHI_EXP_P0);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(HACHI_EXP_P1));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(HACHI_EXP_P2));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(HACHI_EXP_P3));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(HACHI_EXP_P4));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(HACHI_EXP_P5));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

#ifdef __AVX512F__
static inline __m512 hachi_exp512(__m512 x) {
    x = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(_mm512_set1_ps(-87.0f), x));   /* a NaN stays NaN */
    const __m512 fx = _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(HACHI_EXP_LOG2E), _mm512_set1_ps(0.5f)),
                                           _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(HACHI_EXP_LN2_HI), x);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(HACHI_EXP_LN2_LO), x);
    __m512 y = _mm512_set1_ps(HACHI_EXP_P0);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(HACHI_EXP_P1));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(HACHI_EXP_P2));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(HACHI_EXP_P3));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(HACHI_EXP_P4));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(HACHI_EXP_P5));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(fx), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}
#endif

#endif
