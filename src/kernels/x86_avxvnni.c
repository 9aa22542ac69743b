/* kernels/x86_avxvnni: the table of x86 CPUs with AVX-VNNI (VEX-encoded vpdpbusd on 256-bit
 * vectors) but no AVX-512: Intel Alder Lake and later client cores, AMD Zen 5 with AVX-512
 * off. It overrides only the interleaved-row kernels (x86_vnni_x8.h: Q4_0, Q4_K, Q5_K, Q6_K,
 * Q8_0; 4 activation rows per pass: 16 vector registers); every other entry is the AVX2
 * table's, which dispatch.c copies first. Built with the AVX2/FMA/F16C/AVX-VNNI flags that
 * dispatch.c checks. */
#include "kernels/kernels.h"

#if defined(__x86_64__) && defined(__AVXVNNI__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include "kernels/rows.h"

#define VNNI_ROWS 4
#define VNNI_DPBUSD _mm256_dpbusd_avx_epi32
#include "kernels/x86_vnni_x8.h"

/* on a copy of AVX2's table */
int hachi_kernels_fill_avxvnni(hachi_kernels *t) {
    t->t[HACHI_TYPE_Q4_0].vec_dot_x8 = x8_q4_0;   /* with AVX2's activation extras */
    t->t[HACHI_TYPE_Q4_K].vec_dot_x8 = x8_q4_K;
    t->t[HACHI_TYPE_Q8_0].act_extra = act_extra_q8_0;
    t->t[HACHI_TYPE_Q8_0].act_prep = act_prep_q8_0;
    t->t[HACHI_TYPE_Q8_0].vec_dot_x8 = x8_q8_0;
    t->t[HACHI_TYPE_Q5_K].vec_dot_x8 = x8_q5_K;
    t->t[HACHI_TYPE_Q6_K].act_extra = act_extra_q6_K;
    t->t[HACHI_TYPE_Q6_K].act_prep = act_prep_q6_K;
    t->t[HACHI_TYPE_Q6_K].vec_dot_x8 = x8_q6_K;
    return 1;
}

#else
int hachi_kernels_fill_avxvnni(hachi_kernels *t) { (void)t; return 0; }
#endif
