/* exp_cephes: the constants of the vector e^x of the SIMD files (x86_avx2_exp.h, arm_neon.c):
 * Cephes expf, 2^n * polynomial(r) with r = x - n ln2 (ln2 in two parts), about 1 ulp, x clamped
 * to [-87, 88]. One set of constants, so every ISA's exp is the same operations on the same
 * numbers. */
#ifndef HACHI_KERNELS_EXP_CEPHES_H
#define HACHI_KERNELS_EXP_CEPHES_H

#define HACHI_EXP_LOG2E 1.44269504088896341f
#define HACHI_EXP_LN2_HI 0.693359375f
#define HACHI_EXP_LN2_LO (-2.12194440e-4f)
#define HACHI_EXP_P0 1.9875691500e-4f
#define HACHI_EXP_P1 1.3981999507e-3f
#define HACHI_EXP_P2 8.3334519073e-3f
#define HACHI_EXP_P3 4.1665795894e-2f
#define HACHI_EXP_P4 1.6666665459e-1f
#define HACHI_EXP_P5 5.0000001201e-1f

#endif
