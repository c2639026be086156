/*
** tensormorph/errstats.h: error statistics of a quantized tensor against its source (SQNR,
** RMSE and max error in LSB, clipping), shared by quantize and qdiff (layer analysis,
** src/analysis/errstats.c; docs/qdiff.md).
*/
/* the base API first, outside the guard, so this header compiles alone (docs/ARCHITECTURE.md
** "Public headers") */
#include "../tensormorph.h"
#ifndef TENSORMORPH_ERRSTATS_H
#define TENSORMORPH_ERRSTATS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Thresholds for flagging a quantized tensor in Quantization Diff (docs/qdiff.md).
** Plain round-to-nearest gives an error uniform in [-0.5, 0.5] LSB: RMSE 1/sqrt(12) = 0.289. */
#define TM_QDIFF_RMSE_LSB_FLAG       0.45   /* RMSE in LSB above this is more than rounding     */
#define TM_QDIFF_MAX_LSB_TOL         0.501  /* unclipped |error| beyond half an LSB (+ f32 slack)*/
#define TM_QDIFF_SQNR_DROP_DB        10.0   /* SQNR this far below the checkpoint's median       */
#define TM_QDIFF_CLIPPED_FLAG        0.01   /* more than 1% of values clipped                    */

/* Per-tensor error summary of a quantized tensor against its source. */
typedef struct tm_errsum {
    int64_t n;                 /* elements compared                                             */
    double  sqnr_db;           /* 10 log10(sum x^2 / sum (x - xq)^2); +inf when error is 0      */
    double  rmse;              /* sqrt(mean (x - xq)^2), in the tensor's units                  */
    double  rmse_lsb;          /* sqrt(mean ((x - xq)/scale)^2)                                  */
    double  max_abs_err;       /* max |x - xq|                                                   */
    double  max_err_lsb;       /* max |x - xq| / scale over all elements                         */
    double  max_err_lsb_unclipped; /* the same over elements inside the representable range   */
    int64_t n_beyond_half_lsb; /* unclipped elements with |err| > TM_QDIFF_MAX_LSB_TOL LSB       */
    double  clipped_fraction;  /* fraction of elements outside [(qmin-zp)s, (qmax-zp)s] +- s/2  */
    int64_t n_nonfinite;       /* NaN/Inf source values (excluded from the sums)                */
    int64_t worst_group;       /* flat param index with the largest RMSE in LSB (-1 none)       */
    double  worst_group_rmse_lsb;
    double  cosine;            /* cosine similarity of x and xq                                  */
    int64_t n_bad_scales;      /* scales that are NaN, infinite, zero or negative                */
} tm_errsum;

/* Streaming accumulator behind tm_errsum. Deterministic: merge in a fixed order. */
typedef struct tm_erracc {
    int64_t n, n_clipped, n_nonfinite, n_beyond;
    double  sum_x2, sum_e2, sum_l2, sum_q2, sum_xq;
    double  max_abs, max_lsb, max_lsb_unclipped;
    int64_t n_params;          /* per-param accumulation when > 0                               */
    double *param_sum_l2;      /* [n_params] sum of (err/scale)^2                               */
    int64_t *param_n;          /* [n_params]                                                    */
    const tm_kernels *kernels; /* kernel set of the sums (tm_kernels_get); NULL (as
                                  tm_erracc_init leaves it): "auto". Same bits for every set    */
    double  lsb_mult;          /* integer codes: one LSB = scale * lsb_mult (tm_erracc_init: 1, 0 reads as 1;
                                  a ggml codebook type: tm_ggml_code_step). The clipping range
                                  stays [qmin, qmax] codes of `scale`                           */
} tm_erracc;

/* tm_lsb_size: one LSB at source value x for codes of code_dtype with this scale: |scale| for
** integer codes; for float8 codes |scale| times the spacing of the float8 grid at x/scale. */
double    tm_lsb_size(tm_dtype code_dtype, double scale, double x);

tm_status tm_erracc_init(tm_erracc *a, int64_t n_params, tm_err *err);
void      tm_erracc_free(tm_erracc *a);
/* Add n elements: x source, xq dequantized, param[k] the flat param index of element k into
** scale[]/zero_point[] (zero_point may be NULL), [qmin, qmax] the code range. One LSB is the
** element's scale for integer codes; for float8 codes it is scale times the spacing of the
** float8 grid at x/scale (so plain rounding is again within half an LSB).
** Non-finite x are counted and skipped. */
void      tm_erracc_add(tm_erracc *a, tm_dtype code_dtype, const float *x, const float *xq,
                        const int64_t *param, const float *scale, const int32_t *zero_point,
                        int64_t qmin, int64_t qmax, int64_t n);
/* The same for n consecutive elements that all use param p (a row of a per-channel tensor, a
** group, a per-tensor chunk): x[n] source and xq[n] dequantized values (float32, the tensor's
** units), scale[p] / zero_point[p] (zero_point may be NULL). Equal, bit for bit, to
** tm_erracc_add with param[k] = p for those n elements, without the per-element param array.
** LSB and clipping as in docs/qdiff.md; sums in a fixed order of 8 lanes (errstats.c), so the
** result does not depend on the CPU's vector width. No errors: n <= 0 adds nothing. */
void      tm_erracc_add_run(tm_erracc *a, tm_dtype code_dtype, const float *x, const float *xq,
                            int64_t p, const float *scale, const int32_t *zero_point, int64_t qmin,
                            int64_t qmax, int64_t n);
void      tm_erracc_merge(tm_erracc *into, const tm_erracc *from);
void      tm_erracc_summary(const tm_erracc *a, tm_errsum *out);

#ifdef __cplusplus
}
#endif
#endif
