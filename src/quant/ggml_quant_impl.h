/*
** ggml_quant_impl.h: private declarations between ggml_quant.c (the scalar reference
** quantizers, the specification) and its SIMD variants (ggml_quant_avx2.c). Not installed.
*/
#ifndef TM_GGML_QUANT_IMPL_H
#define TM_GGML_QUANT_IMPL_H

#include "core/core.h"
#include "quant_impl.h"

/* Error sums of quantized rows against their float32 source, for the GGUF job's manifest
** (src/job/gguf_job.c): sum x^2, sum (x - dq)^2 and max |x - dq| in double, dq the value the
** written bytes dequantize to (tm_ggml_dequantize). TM__GQ_ERR_LANES independent partial sums:
** lane k takes the values whose index since the last reset is k mod 8, each lane one IEEE
** sequence in index order; the values after the last multiple of 8 (only the last call may
** have n % 8 != 0) go to the tail sums in order; tm__gq_err_total adds the tail, then lanes 0..7.
** Every path (scalar, AVX2, the fused quantizers) gives the same bits. */
#define TM__GQ_ERR_LANES 8
typedef struct tm__gq_err {
    double x2[TM__GQ_ERR_LANES], e2[TM__GQ_ERR_LANES], emax[TM__GQ_ERR_LANES];
    double tx2, te2, temax;
} tm__gq_err;
/* Add n values (x the source, dq its dequantization) to a with the lanes of kernel set k (NULL:
** "auto"; kernels.h). */
void tm__gq_err_add(tm__gq_err *a, const float *x, const float *dq, int64_t n, const tm_kernels *k);
void tm__gq_err_total(const tm__gq_err *a, double *sx2, double *se2, double *emax);
/* tm_gq_quantize_row, then the row's error added to acc (when non-NULL): dq is scratch for n
** floats (unused where the quantizer measures the error itself: Q8_0 and Q4_0 with AVX2).
** imatrix: NULL, or the importances of the n_row input columns of a row (x then holds n / n_row
** rows of n_row values, each quantized with it by the type's reference imatrix path; types
** without one ignore it, as ggml's quantize_q8_0 does); n_row is unused without an imatrix.
** k: the kernel set (NULL: "auto"); &tm__kernels_ref gives the scalar reference quantizer,
** dequantizer and sums (the specification). On an error acc is left partly updated. */
tm_status tm__gq_quantize_row_err(int type, const float *x, int64_t n, const float *imatrix,
                                  int64_t n_row, void *out, float *dq, tm__gq_err *acc,
                                  int64_t *bad_block, const tm_kernels *k, tm_err *err);

/* tm__gq_validate: llama-quantize's ggml_validate_row_data (ggml_validate.c) for nb blocks of
** `type` at q: the index of the first block whose float16 scale (or min) is NaN or inf (*nan 1:
** NaN, 0: inf), or -1 (also for a type without scales: F32, F16, BF16). */
int64_t tm__gq_validate(int type, const uint8_t *q, int64_t nb, int *nan);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TM__GQ_HAVE_AVX2 1
/* nb blocks of 32 values from x into Q8_0 / Q4_0 blocks at y, byte-identical to the scalar
** q8_0_block / q4_0_block (including the all-subnormal rule). Return the index of the first
** block that holds a NaN or inf or whose d does not fit f16 (nothing written from it on), or
** -1. With acc non-NULL, also add each block's error (from its codes and f16 d, as the
** dequantizer computes it) to acc: x's index 0 must then be a lane-0 index of acc (a multiple of
** 8 values added since its reset); blocks from a failing one on are not added. Call only when
** AVX2 and F16C (the kernel sets "avx2" and "avx512", kernels.h). */
int64_t tm__gq_q8_0_avx2(const float *x, int64_t nb, uint8_t *y, tm__gq_err *acc);
int64_t tm__gq_q4_0_avx2(const float *x, int64_t nb, uint8_t *y, tm__gq_err *acc);
/* nb blocks of 32 values from x into Q4_1 / Q5_0 / Q5_1 blocks at y (ggml_quant_legacy_avx2.c),
** byte-identical to the scalar q4_1_block / q5_0_block / q5_1_block; as tm__gq_q4_0_avx2: the
** index of the first block that holds a NaN or inf or whose d (or m) does not fit f16 (nothing
** written from it on), or -1; with acc, the error of the blocks before it added (x's index 0
** lane-aligned). Call only when AVX2 and F16C (the kernel sets "avx2", "avx512"). */
int64_t tm__gq_q4_1_avx2(const float *x, int64_t nb, uint8_t *y, tm__gq_err *acc);
int64_t tm__gq_q5_0_avx2(const float *x, int64_t nb, uint8_t *y, tm__gq_err *acc);
int64_t tm__gq_q5_1_avx2(const float *x, int64_t nb, uint8_t *y, tm__gq_err *acc);
/* The legacy types' importance weights, qw[j] * sqrtf(sigma2 + x[j] * x[j]) for j < n (a
** multiple of 8) into w, as the scalar expression (ggml_quant_legacy_avx2.c). */
void tm__gq_legacy_weights_avx2(const float *x, const float *qw, float sigma2, int64_t n, float *w);
/* Q6_K's final codes of one super-block (256 values at x): for each sub-block j of 16 with
** d[j] != 0, L = clamp(nearest_int(x / d[j]), -32, 31) + 32 (sub-blocks with d[j] == 0 keep
** their L), as the scalar q6_k code; with acc non-NULL (x lane-aligned as above), the error of
** dq = d[j] * (float)(L - 32), the dequantizer's product, added for all 256 values. */
void tm__gq_q6_k_codes_avx2(const float *x, const float *d, int8_t *L, tm__gq_err *acc);
/* Q3_K's final codes of one super-block the same way: L = clamp(nearest_int(x / d[j]), -4, 3)
** + 4 where d[j] != 0, as the scalar q3_k code (no error sums). */
void tm__gq_q3_k_codes_avx2(const float *x, const float *d, int8_t *L);
/* Q3_K's codes L[256] (0..7) into hmask[32] and qs[64], as the scalar q3_k_pack (L unchanged). */
void tm__gq_q3_k_pack_avx2(const int8_t *L, uint8_t *hmask, uint8_t *qs);
/* tm__gq_err_add's lanes in AVX2 registers (n a multiple of 8). */
void tm__gq_err_lanes_avx2(tm__gq_err *a, const float *x, const float *dq, int64_t n);
/* make_qkx2_quants (ggml_quant.c) on the 8 sub-blocks of n (16 or 32) values at x (weights w,
** same layout), one per lane: codes into L[8 n], scales[8], the_mins[8] exactly as 8 scalar
** calls give them. */
void tm__gq_qkx2_x8_avx2(const float *x, const float *w, int n, int nmax, float rmin,
                         float rdelta, int nstep, int use_mad, uint8_t *L, float *scales,
                         float *the_mins);
/* make_qx_quants on 8 sub-blocks of n values, one per lane, with weights w (same layout as x;
** NULL: x^2, Q6_K without importance matrix): codes (already offset by nmax) into L[8 n] and
** scales[8], as 8 scalar calls give them. */
void tm__gq_qx_x8_avx2(const float *x, const float *w, int n, int nmax, int8_t *L, float *scales);
/* make_q3_quants with rmse (Q3_K: 16 values, nmax 4) on one whole super-block's 16 sub-blocks,
** one per lane, two groups of 8 lanes interleaved: codes (offset by 4) into L[256], scales[16],
** as 16 scalar calls give them; all-zero sub-blocks give codes 0 and scale 0 as the scalar. */
void tm__gq_q3_x16_avx2(const float *x, int8_t *L, float *scales);
/* The same on two consecutive super-blocks (512 values), four groups interleaved: L[512],
** scales[32]. */
void tm__gq_q3_x32_avx2(const float *x, int8_t *L, float *scales);
#endif

/* make_qp_quants (ggml-quants.c, ggml_quant.c): the non-negative values x[0..n) (sub-block
** scales or mins) as codes L[i] in [0, nmax] times one scale: iscale = nmax / max, then 8 trial
** iscales (nmax + 0.1 is) / max, is in [-4, 4] \ {0}, keeping the least qw-weighted squared
** error, then up to 5 passes of coordinate descent raising sumlx^2 / suml2. Returns the scale
** sumlx / suml2; 0 for all-zero input or when every weight of the codes is zero (where the
** reference at c392e509, unguarded, gives NaN). L is uint8_t as in the reference. Used by the
** K-quants with an importance matrix and by IQ1_M (ggml_quant_iq2.c). */
float tm__gq_make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *qw);

#endif
