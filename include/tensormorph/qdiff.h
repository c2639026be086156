/*
** tensormorph/qdiff.h: Quantization Diff: a quantized checkpoint against its full-precision
** source, tensor by tensor, with flags (layer analysis, src/analysis/qdiff.c; docs/qdiff.md).
*/
/* the base API first, outside the guard, so this header compiles alone (docs/ARCHITECTURE.md
** "Public headers") */
#include "../tensormorph.h"
#include "errstats.h"
#include "names.h"
#include "imatrix.h"
#ifndef TENSORMORPH_QDIFF_H
#define TENSORMORPH_QDIFF_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tm_qdiff_entry {
    const char *name;          /* points into the quantized file's tensor list                  */
    int64_t     ref_index, q_index;
    tm_errsum   e;
    int         flagged;
    char        reason[256];   /* why flagged, "" otherwise                                      */
    char        scheme[96];    /* tm_qtensor_label: "I4 group:128 sym scale:F16"                  */
    int         clip_expected; /* the observer clips by design (percentile, mse, entropy,
                                  histogram) or the codec searches its range (ggml K-quants):
                                  clipping and half-LSB excess are not flagged; RMSE and SQNR are */
    int         codebook;      /* a ggml codebook type (IQ*): one LSB is the sub-block scale times
                                  tm_ggml_code_step; the grid is searched as a whole, so the RMSE
                                  bound of rounding is not flagged either; SQNR is             */
    const char *ref_name;      /* its source's name in ref (differs from name across naming
                                  conventions, GPTQ qweight, ONNX _quantized)                     */
    /* with tm_qdiff_params.imatrix and an entry of this tensor's name and size: the error
    ** weighted by the importance w_c of each element's input column c (the mean squared
    ** activation llama-imatrix measured; tensormorph/imatrix.h), the quantity the ggml
    ** K-quant / IQ searches minimise (docs/qdiff.md "Importance-weighted error"):
    **   imx_sqnr_db = 10 log10(sum w_c x^2 / sum w_c (x - xq)^2),
    **   imx_rmse    = sqrt(sum w_c (x - xq)^2 / sum w_c)   (sums in double, element order).
    ** Every weight 0 on the tensor: both NaN (undefined); a weighted error of 0 with a weighted
    ** source that is not 0: imx_sqnr_db +inf; both 0: NaN. */
    int         imatrix;       /* 1: the two figures below were computed                         */
    double      imx_sqnr_db, imx_rmse;
    int         plain;         /* 1: a float tensor (neither file holds a quantized tensor: QUANT
                                  an F16/BF16/F32 output): a plain weight diff; scheme is its
                                  dtype name; the LSB figures are NaN (no scale), nothing is
                                  clipped, worst_group -1; the SQNR and non-finite flags apply */
} tm_qdiff_entry;

typedef struct tm_qdiff_result {
    tm_qdiff_entry *entries;   /* sorted: flagged first, worst (lowest SQNR) first               */
    int64_t         n;
    double          median_sqnr_db; /* over every measured tensor; +inf when at least half are exact */
    int64_t         n_flagged;
    int64_t         n_unmatched; /* quantized tensors without a source of the same name/size     */
    int64_t         n_imatrix;   /* entries with importance-weighted figures                       */
} tm_qdiff_result;

typedef struct tm_qdiff_params {
    int n_threads;             /* 0 = 1                                                          */
    void (*progress)(void *ud, uint64_t done, uint64_t total); /* tensors compared so far, of
                                                                  total; serialised            */
    void *progress_ud;
    volatile const int *cancel;
    const tm_imatrix *imatrix; /* NULL, or an importance matrix: the weighted figures (entry)   */
} tm_qdiff_params;

/* tm_qdiff: (when neither file holds a quantized tensor: for every float tensor of q, entry.plain)
** for every quantized tensor of q whose source tm_ref_find finds in ref (else
** tm_tensor_pair_find: its name in the other convention, HF <-> llama.cpp, with q/k rows
** un-permuted) with the same element count, compare ref (converted to f32) with q's dequantized values, measuring error
** against each element's own scale (LSB units). Memory: a few row chunks per thread.
** Returns TM_OK | TM_E_NOMEM | TM_E_CORRUPT | TM_E_CANCELLED. Free with tm_qdiff_free. */
tm_status tm_qdiff(const tm_file *ref, const tm_file *q, const tm_qdiff_params *p,
                   tm_qdiff_result **out, tm_err *err);
/* tm_ref_find: the index in `ref` (a full-precision checkpoint) of the source of tensor
** `quantized_name` of a quantized checkpoint, or -1 (also when either argument is NULL). Tried
** in order: the same name; GPTQ/AWQ "P.qweight" (or a bare "qweight") -> "P.weight"
** (docs/formats.md "GPTQ and AWQ"); ONNX "X_quantized" -> "X" (the DequantizeLinear codes that
** tensormorph's ONNX output and ONNX Runtime's quantizer name so, docs/onnx-quantize.md). Only
** names are compared: callers check that the element counts agree. Used by tm_qdiff and by
** `scalar --ref`, `heatmap --ref` and the web UI's reference lookup. */
int64_t   tm_ref_find(const tm_file *ref, const char *quantized_name);
/* tm_ref_pair: how tensor qi of q pairs with its source in ref, the one pairing every --ref
** command uses (qdiff, diff's names, scalar, heatmap, the web UI): tm_ref_find, else
** tm_tensor_pair_find (the name in the other convention, Hugging Face <-> llama.cpp, with the
** q/k rows permuted). Read the source in q's element order with tm_tensor_pair_read_f32.
** Returns out->index (-1 when none; out is then a pair with index -1). Callers check that the
** element counts agree. */
int64_t   tm_ref_pair(const tm_file *ref, const tm_file *q, int64_t qi, tm_tensor_pair *out);
/* tm_qdiff_flag: (re)apply the flag rules to r (median SQNR per scheme, thresholds). Called by
** tm_qdiff; call again after changing entries' clip_expected. */
void      tm_qdiff_flag(tm_qdiff_result *r);
/* tm_qdiff_scheme_median: the median of the SQNRs (dB) of r's entries whose scheme string is
** `scheme` (the median the SQNR flag compares each tensor with, docs/qdiff.md). An exact
** tensor counts as +inf, so a comparison of a file with itself gives +inf (and the SQNR flag,
** which needs a finite median, does not fire); NaN when no entry of that scheme was measured or
** out of memory. */
double    tm_qdiff_scheme_median(const tm_qdiff_result *r, const char *scheme);
void      tm_qdiff_free(tm_qdiff_result *r);

#ifdef __cplusplus
}
#endif
#endif
