/*
** ggml_quant_impl.h: private declarations between ggml_quant.c (the scalar reference
** quantizers, the specification) and its SIMD variants (ggml_quant_avx2.c). Not installed.
*/
#ifndef TM_GGML_QUANT_IMPL_H
#define TM_GGML_QUANT_IMPL_H

#include "core/core.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TM_GQ_HAVE_AVX2 1
/* nb blocks of 32 values from x into Q8_0 / Q4_0 blocks at y, byte-identical to the scalar
** q8_0_block / q4_0_block (including the all-subnormal rule). Return the index of the first
** block whose d does not fit f16 (nothing written from it on), or -1. Call only when
** __builtin_cpu_supports("avx2"); x must be finite. */
int64_t tm__gq_q8_0_avx2(const float *x, int64_t nb, uint8_t *y);
int64_t tm__gq_q4_0_avx2(const float *x, int64_t nb, uint8_t *y);
/* make_qkx2_quants (ggml_quant.c) on the 8 sub-blocks of n (16 or 32) values at x (weights w,
** same layout), one per lane: codes into L[8 n], scales[8], the_mins[8] exactly as 8 scalar
** calls give them. */
void tm__gq_qkx2_x8_avx2(const float *x, const float *w, int n, int nmax, float rmin,
                         float rdelta, int nstep, int use_mad, uint8_t *L, float *scales,
                         float *the_mins);
/* make_qx_quants with weights x^2 (Q6_K) on 8 sub-blocks of n values, one per lane: codes
** (already offset by nmax) into L[8 n] and scales[8], as 8 scalar calls give them. */
void tm__gq_qx_x8_avx2(const float *x, int n, int nmax, int8_t *L, float *scales);
/* make_q3_quants with rmse (Q3_K) on 8 sub-blocks of n values, one per lane; codes offset by
** nmax into L[8 n], scales[8]; all-zero sub-blocks give codes 0 and scale 0 as the scalar. */
void tm__gq_q3_x8_avx2(const float *x, int n, int nmax, int8_t *L, float *scales);
#endif

#endif
