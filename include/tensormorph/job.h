/*
** tensormorph/job.h: whole-checkpoint operations built on the file, view and quant layers:
** the quantize job (open -> plan -> run -> finish), Quantization Diff, weight diff, hashing,
** host facts. Included by tensormorph.h.
*/
#ifndef TENSORMORPH_JOB_H
#define TENSORMORPH_JOB_H
#include "../tensormorph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- hashing and host facts ------------------------------------------------------------- */

/* tm_sha256_file: SHA-256 (FIPS 180-4, via OpenSSL) of a whole file, streamed with read(2)
** in 1 MiB pieces (read(2) leaves nothing mapped: the resident set stays small, and the page
** cache keeps what a concurrent reader of the same file needs). hex_out: 64 hex chars + NUL.
** Returns TM_OK | TM_E_IO. */
tm_status tm_sha256_file(const char *path, char hex_out[65], uint64_t *n_bytes, tm_err *err);
void      tm_sha256_buffer(const void *data, size_t n, char hex_out[65]);

typedef struct tm_host_info_t {
    char cpu_model[128];
    int  n_cores;          /* online logical CPUs */
    char os[192];          /* "Linux 6.1.0 x86_64" */
    char hostname[96];
} tm_host_info_t;
void tm_host_info(tm_host_info_t *h);

/* ---- error statistics shared by quantize and qdiff --------------------------------------- */

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

/* ---- Quantization Diff ------------------------------------------------------------------- */

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
} tm_qdiff_entry;

typedef struct tm_qdiff_result {
    tm_qdiff_entry *entries;   /* sorted: flagged first, worst (lowest SQNR) first               */
    int64_t         n;
    double          median_sqnr_db;
    int64_t         n_flagged;
    int64_t         n_unmatched; /* quantized tensors without a source of the same name/size     */
} tm_qdiff_result;

typedef struct tm_qdiff_params {
    int n_threads;             /* 0 = 1                                                          */
    void (*progress)(void *ud, uint64_t done, uint64_t total); /* tensors compared so far, of
                                                                  total; serialised            */
    void *progress_ud;
    volatile const int *cancel;
} tm_qdiff_params;

/* tm_qdiff: for every quantized tensor of q whose source tm_ref_find finds in ref with the same
** element count, compare ref (converted to f32) with q's dequantized values, measuring error
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
/* tm_qdiff_flag: (re)apply the flag rules to r (median SQNR per scheme, thresholds). Called by
** tm_qdiff; call again after changing entries' clip_expected. */
void      tm_qdiff_flag(tm_qdiff_result *r);
void      tm_qdiff_free(tm_qdiff_result *r);

/* ---- the quantize job ---------------------------------------------------------------------- */

/* A per-tensor rule (from --include/--exclude or a recipe): first matching rule wins. */
typedef struct tm_qrule {
    const char *pattern;       /* POSIX extended regex, searched in the tensor name              */
    int         ignore;        /* 1: leave this tensor unquantized                               */
    int         has_spec;      /* 1: use `spec` for it, else the job's default spec              */
    tm_qspec    spec;
} tm_qrule;

typedef struct tm_qjob_params {
    tm_qspec        spec;          /* default scheme (tm_qspec_default)                           */
    const tm_qrule *rules;  int64_t n_rules;   /* recipe targets/ignore, in order                */
    const char    **include;int64_t n_include; /* regexes: when given, only matching tensors     */
    const char    **exclude;int64_t n_exclude; /* regexes: never these                          */
    int             quantize_embeddings;  /* 0: embeddings and lm_head stay dense (default)     */
    int             strict;        /* 1: a tensor the output layout cannot hold is an error       */
    int             force;         /* 1: replace an existing OUT that holds a previous tensormorph
                                      output (tensormorph-manifest.json); anything else is never
                                      replaced                                                    */
    int             no_checksums;  /* 1: skip sha256 of sources and outputs                       */
    int             allow_empty;   /* 1: write the output even when no tensor is quantized (else
                                      TM_E_INVALID_ARG / TM_E_UNSUPPORTED saying why)             */
    int             n_threads;     /* 0 = 1                                                       */
    uint64_t        max_shard_bytes;
    const char     *command_line;  /* recorded in the manifest                                    */
    const char     *recipe_path;   /* recorded in the manifest, may be NULL                       */
    const char     *recipe_json;   /* the recipe text, recorded, may be NULL                      */
    void (*progress)(void *ud, const char *phase, uint64_t done, uint64_t total);
    void *progress_ud;
    volatile const int *cancel;
} tm_qjob_params;

tm_qjob_params tm_qjob_params_default(void);

/* Decision for one source tensor. */
typedef struct tm_qjob_tensor {
    const char *name;
    int         quantized;       /* 1 quantized, 0 copied unchanged                             */
    char        reason[200];     /* why not quantized ("1-D tensor", "embedding", ...)           */
    tm_qspec    spec;            /* the scheme used (when quantized)                            */
    tm_errsum   e;               /* error summary (when quantized)                              */
    int         flagged;  char flag_reason[256];
    int64_t     n_degenerate;    /* all-zero/constant channels or groups given a fallback scale */
} tm_qjob_tensor;

typedef struct tm_qjob_result {
    tm_qjob_tensor *tensors; int64_t n;
    int64_t n_quantized;
    uint64_t src_bytes, out_bytes;
    double   seconds;
    char    *manifest_json;      /* the manifest as written (malloc'd)                           */
    char    *out_path;           /* the output directory                                         */
    char   **warnings;           /* lines about runtime compatibility of the output (malloc'd)   */
    int64_t  n_warnings;
} tm_qjob_result;

/* tm_quantize_checkpoint: quantize `in` into a compressed-tensors directory `out_dir`
** (safetensors + config.json with quantization_config + tensormorph-manifest.json), following
** ../shared/formats/compressed-tensors.md. The directory is built under "<out_dir>.tmp.<pid>"
** and renamed into place at the end: a killed run leaves nothing at out_dir.
** Returns TM_OK | TM_E_INVALID_ARG (a type/granularity the layout cannot represent at all:
** uint codes, e5m2, channel axis != 0, group axis != last) | TM_E_NONFINITE | TM_E_RANGE |
** TM_E_UNSUPPORTED (strict: a tensor it cannot hold; an already-quantized input; no tensor
** quantized and !allow_empty) | TM_E_INVALID_ARG also when --include matches nothing or the
** filters leave nothing (!allow_empty) | TM_E_IO | TM_E_NOMEM | TM_E_CANCELLED.
** Free the result with tm_qjob_result_free. */
tm_status tm_quantize_checkpoint(tm_file *in, const char *out_dir, const tm_qjob_params *p,
                                 tm_qjob_result **out, tm_err *err);
void      tm_qjob_result_free(tm_qjob_result *r);

/* ---- weight diff --------------------------------------------------------------------------- */

typedef enum tm_diff_kind { TM_DIFF_SAME = 0, TM_DIFF_CHANGED, TM_DIFF_ADDED, TM_DIFF_REMOVED,
                            TM_DIFF_SHAPE, TM_DIFF_DTYPE } tm_diff_kind;
typedef struct tm_diff_entry {
    const char  *name;
    tm_diff_kind kind;
    int64_t      a_index, b_index;
    double       max_abs_diff, rel_l2, cosine;  /* for SAME/CHANGED (and DTYPE with equal shape) */
} tm_diff_entry;
typedef struct tm_diff_result { tm_diff_entry *entries; int64_t n; int64_t n_differ; } tm_diff_result;
/* tm_diff: compare two checkpoints tensor by tensor (by logical name), values through the
** view (dequantized where quantized). Returns TM_OK | TM_E_NOMEM | TM_E_CORRUPT. */
tm_status tm_diff(const tm_file *a, const tm_file *b, int n_threads, tm_diff_result **out,
                  tm_err *err);
void      tm_diff_free(tm_diff_result *r);

/* ---- view helpers for quantized tensors --------------------------------------------------- */

/* tm_tensor_qparams: the decoded scale (f32) and zero point (int32) arrays of quantized tensor
** i, n_params long, param order as tm_qgran_param_index. Caller frees both with free().
** Returns TM_OK | TM_E_INVALID_ARG (not quantized) | TM_E_NOMEM | TM_E_CORRUPT. */
tm_status tm_tensor_qparams(const tm_file *f, int64_t i, float **scale, int32_t **zero_point,
                            int64_t *n_params, tm_err *err);

/* tm_qview: a quantized tensor's decoded scale/zero-point arrays held open for repeated reads.
** tm_qview_read gives dequantized float32 values of elements [start, start+n) and, when param
** is not NULL, each element's flat param index. Returns TM_OK | TM_E_INVALID_ARG | TM_E_CORRUPT. */
typedef struct tm_qview tm_qview;
tm_status      tm_qview_open(const tm_file *f, int64_t i, tm_qview **out, tm_err *err);
tm_status      tm_qview_read(tm_qview *v, int64_t start, int64_t n, float *out, int64_t *param,
                             tm_err *err);
const float   *tm_qview_scale(const tm_qview *v);
const int32_t *tm_qview_zero_point(const tm_qview *v);
int64_t        tm_qview_n_params(const tm_qview *v);
void           tm_qview_free(tm_qview *v);

/* tm_tensor_release_elems: a streaming reader is done with logical elements [start, start+n)
** of tensor i: release their mapped file pages (plain tensors: exactly their bytes; quantized:
** the codes of the whole rows covered). Never fails; a no-op where it does not apply. */
void tm_tensor_release_elems(const tm_file *f, int64_t i, int64_t start, int64_t n);

/* ---- the built-in demo checkpoint ---------------------------------------------------------- */

/* tm_write_demo_checkpoint: write a small deterministic LLaMA-shaped checkpoint (F32 or BF16)
** to directory `dir` (model.safetensors + config.json): embedding, per layer q/k/v/o and
** gate/up/down projections with Gaussian rows of differing scale, a few outlier input
** channels and one all-zero row, RMSNorm weights near 1, final norm and an untied lm_head.
** Same seed, same bytes. Returns TM_OK | TM_E_IO | TM_E_NOMEM. */
tm_status tm_write_demo_checkpoint(const char *dir, tm_dtype dtype, uint64_t seed, tm_err *err);

#ifdef __cplusplus
}
#endif
#endif
