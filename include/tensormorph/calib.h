/*
** tensormorph/calib.h: the calibration lab (included by tensormorph.h).
**
** Runs one observer over calibration samples (one or more batches, fed to the observer in order
** as torch's forward() / ONNX Runtime's collect() calls), derives the scale and zero point under
** a convention, and measures what that choice costs on the same samples: the clipped tails,
** the SQNR, and what happens to chosen probe values. The observers and conventions are the
** core's (tensormorph/quant.h, docs/quantization.md "Observers", "Conventions"); quantize and
** dequantize go through tm_quantize_f32 / tm_dequantize, the kernels `tensormorph quantize`
** uses. Definitions of every reported number: docs/calibrate.md.
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_CALIB_H
#define TENSORMORPH_CALIB_H

#ifdef __cplusplus
extern "C" {
#endif

/* One batch of samples: a float32 tensor of `shape` (row-major), caller-owned. */
typedef struct tm_calib_batch {
    int          ndim;                /* 0..TM_MAX_DIMS                                      */
    int64_t      shape[TM_MAX_DIMS];
    const float *x;                   /* prod(shape) values                                   */
} tm_calib_batch;

/* What to calibrate. */
typedef struct tm_calib_params {
    tm_qspec      spec;         /* code_dtype I8 U8 I4 U4; symmetric; gran (over one batch's
                                   shape: TENSOR, CHANNEL, GROUP or BLOCK); observer;
                                   convention; scale_dtype. allow_nonfinite must be 0.        */
    int64_t       qmin, qmax;   /* the code range; both 0: tm_qspec_range(spec)              */
    int           custom_range; /* 1: [qmin, qmax] is user-given (tm_qparams_from_range_q)    */
    const double *probes;       /* n_probes real values to follow through quantization; any
                                   finite double (beyond float32's range they clip like any
                                   out-of-range value: the end code)                          */
    int64_t       n_probes;
    volatile const int *cancel; /* NULL, or a flag another thread or a signal handler sets:
                                   checked between batches, param units and chunks of 4096
                                   samples; tm_calibrate then returns TM_E_CANCELLED          */
} tm_calib_params;

/* Clipping and error statistics over a set of samples (one param unit, or all samples).
** A sample x is clipped when its code saturated beyond rounding: x < (qmin - zp - 1/2) * s or
** x > (qmax - zp + 1/2) * s, in float64, the rule of tm_qstats.n_clipped and of qdiff's clipped
** fraction. Its excess is its distance beyond the representable range [(qmin - zp) * s,
** (qmax - zp) * s] (the dequantized end codes, float32 as tm_dequantize computes them), i.e. its
** dequantization error; real units. */
typedef struct tm_calib_stats {
    int64_t n;                    /* samples                                                  */
    int64_t n_clipped;
    double  clipped_fraction;     /* n_clipped / n                                            */
    double  clipped_mean_excess;  /* mean excess of the clipped samples; 0 when none          */
    double  clipped_max_excess;   /* largest excess; 0 when none                              */
    double  sum_x2;               /* sum x^2, float64 in sample order                        */
    double  sum_err2;             /* sum (x - deq)^2                                          */
    double  sqnr_db;              /* 10 log10(sum_x2 / sum_err2); +inf when sum_err2 == 0     */
} tm_calib_stats;

/* One param unit (the whole tensor, a channel, ...). */
typedef struct tm_calib_unit {
    double         range_min, range_max; /* the observer's range [lo, hi] (before the
                                            conventions widen it to include 0)               */
    float          scale;
    int32_t        zero_point;
    double         rounding_bound;       /* scale / 2: the largest error of an unclipped sample */
    tm_calib_stats st;
} tm_calib_unit;

/* A probe: real -> code -> dequantized, error = dequantized - real. */
typedef struct tm_calib_probe {
    double  real;
    int64_t code;
    double  dequantized;
    double  error;
} tm_calib_probe;

typedef struct tm_calib_result {
    tm_observer     observer;
    int64_t         qmin, qmax;    /* the code range used                                    */
    int64_t         n_units;       /* param units (tm_qgran_param_shape of one batch)         */
    int             pndim;         /* their shape                                            */
    int64_t         pshape[TM_MAX_DIMS];
    tm_calib_unit  *units;         /* [n_units], flattened row-major over pshape             */
    tm_calib_stats  total;         /* over every sample of every batch                        */
    int64_t         n_probes;
    tm_calib_probe *probes;        /* [n_units][n_probes]: probe k under unit u at u*n_probes+k */
    float           sample_min, sample_max;
} tm_calib_result;

/* tm_calibrate: observe every batch (tm_calib_create on batch 0's shape, tm_calib_update per
** batch, in order), then for each unit tm_calib_range and tm_qparams_from_range_q, then quantize
** every sample with tm_quantize_f32 and dequantize with tm_dequantize (the convention's
** rounding: ONNX round(x / s), TORCH round(x * (1/s)); docs/quantization.md "Quantize") to
** measure the statistics above, and the probes the same way.
**   b          n_batches >= 1 batches; batch shapes may differ as long as they give the same
**              param shape (e.g. ONNX Runtime's batches of different lengths).
** Returns TM_OK | TM_E_INVALID_ARG (no batch, a batch or the whole set without samples, bad
**         spec, code range, granularity or param layout, a non-finite probe)
**         | TM_E_CANCELLED (*p->cancel became non-zero; nothing is returned in *out. One param
**         unit's range search, e.g. entropy's KL sweep, O(bins^2), is not interrupted inside)
**         | TM_E_UNSUPPORTED (fp8 or other non-integer code dtypes)
**         | TM_E_NONFINITE (a NaN/Inf sample: the message names the batch and flat index)
**         | TM_E_RANGE (a scale that overflows) | TM_E_NOMEM.
** *out is freed with tm_calib_result_free. Reentrant. Memory: the observer's
** (tm_calib_create), plus O(n_units * n_probes) and a fixed chunk buffer. */
tm_status tm_calibrate(const tm_calib_params *p, const tm_calib_batch *b, int n_batches,
                       tm_calib_result **out, tm_err *err);

/* tm_calib_result_free: NULL is a no-op. */
void tm_calib_result_free(tm_calib_result *r);

/* tm_calib_histogram_samples: a display histogram of all samples: n_bins equal bins over
** [lo, hi] (lo < hi, both finite), edge k = lo + k * (hi - lo) / n_bins in float64, bin of x =
** floor((x - lo) / (hi - lo) * n_bins), x == hi in the last bin (numpy.histogram's rule);
** samples outside [lo, hi] and non-finite ones are not counted. counts: n_bins entries, set here.
** Returns TM_OK | TM_E_INVALID_ARG (n_bins < 1, bad range). */
tm_status tm_calib_histogram_samples(const tm_calib_batch *b, int n_batches, double lo, double hi,
                                     int n_bins, int64_t *counts, tm_err *err);

/* Observer names (tm_observer_name / tm_observer_from_name) are in tensormorph/quant.h "Names". */

#ifdef __cplusplus
}
#endif
#endif
