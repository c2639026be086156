/*
** tensormorph/quant.h: quantization numerics (included by tensormorph.h).
**
** Pure functions over caller-owned buffers: quantize / dequantize with any granularity,
** error statistics, observers (range estimators) and the two qparams conventions (ONNX
** Runtime, PyTorch), and bit packing of codes. Formulas are derived in docs/quantization.md;
** each comment below names its source.
**
** Codes in memory ("one code per byte"): every quantize/dequantize/pack function exchanges
** codes as one byte per element:
**   I8  int8_t bits            U8  uint8_t
**   I4  int8_t in [-8, 7]      U4  uint8_t in [0, 15]
**   F8_E4M3 / F8_E5M2: the fp8 byte.
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_QUANT_H
#define TENSORMORPH_QUANT_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------- */
/* Quantization parameters of one tensor                                                     */
/* ---------------------------------------------------------------------------------------- */

/* Everything quantize/dequantize need: the code range, who shares a scale, the scales and
** zero points (caller-owned, flattened row-major over tm_qgran_param_shape) and the rounding
** convention. */
typedef struct tm_qparams {
    tm_dtype       code_dtype;     /* I8 U8 I4 U4 F8_E4M3 F8_E5M2                            */
    int64_t        qmin, qmax;     /* inclusive code range, inside the dtype's range; ignored
                                      for fp8 (saturation to +-max finite)                   */
    tm_qgran       gran;
    int64_t        n_params;       /* length of scale[] and zero_point[]: must equal the
                                      n_params of tm_qgran_param_shape                        */
    const float   *scale;          /* [n_params], each finite and > 0                        */
    const int32_t *zero_point;     /* [n_params] in [qmin, qmax], or NULL (all 0); fp8: unused */
    tm_convention  convention;     /* ONNX: round(x / scale); TORCH: round(x * (1.0f/scale))  */
    int            allow_nonfinite;/* 0: NaN/Inf input is TM_E_NONFINITE; 1: NaN -> zero point
                                      code (fp8: +0), +Inf -> qmax, -Inf -> qmin (fp8: +-max)  */
    const tm_kernels *kernels;     /* kernel set (tm_kernels_get); NULL: "auto"; same bits    */
} tm_qparams;

/* tm_qparams_for_spec: the tm_qparams that quantize and dequantize with spec's code dtype, code
** range (tm_qspec_range), granularity, convention and non-finite policy, over the caller's
** scale[n_params] and zero_point[n_params] (NULL: all 0), and spec's kernel set. */
tm_qparams tm_qparams_for_spec(const tm_qspec *spec, int64_t n_params, const float *scale,
                               const int32_t *zero_point);

/* ---------------------------------------------------------------------------------------- */
/* Error statistics                                                                          */
/* ---------------------------------------------------------------------------------------- */

/* Accumulated while quantizing (docs/quantization.md "Error statistics"). err = x - deq where
** deq is exactly what tm_dequantize returns for the code; "lsb" = |err| / scale of the
** element's param unit. Only finite x contribute to n and the sums. Sums are double and
** depend on the order of accumulation: merge chunk statistics in a fixed (e.g. chunk index)
** order and the totals are identical for every thread count and kernel variant.
** Per-param accumulation (optional): point param_sum_err_lsb2 / param_n at caller-owned
** zeroed arrays of n_params entries; then the worst unit (largest RMSE in LSB) is
** tm_qstats_worst_param. Use tm_qstats_init to set the struct up. */
typedef struct tm_qstats {
    int64_t  n;                  /* finite elements measured                                 */
    int64_t  n_clipped;          /* x outside [(qmin-zp-1/2)*s, (qmax-zp+1/2)*s]; fp8: |x/s|
                                    beyond the largest finite value plus half its step      */
    int64_t  n_nonfinite;        /* NaN/+-Inf elements (only with allow_nonfinite)           */
    int64_t  first_nonfinite;    /* flat index of the first one seen, or -1                  */
    double   sum_x2;             /* sum of x^2                                               */
    double   sum_err2;           /* sum of (x - deq)^2                                       */
    double   sum_err_lsb2;       /* sum of ((x - deq)/scale)^2                               */
    double   max_abs_err;        /* max |x - deq|                                            */
    double   max_err_lsb;        /* max |x - deq| / scale                                    */
    int64_t  n_params;           /* length of the two arrays below; 0 when they are NULL     */
    double  *param_sum_err_lsb2; /* [n_params] per param unit, or NULL                       */
    int64_t *param_n;            /* [n_params] finite elements per param unit, or NULL       */
} tm_qstats;

/* tm_qstats_init: zero the scalar fields (first_nonfinite = -1) and attach optional per-param
** arrays (both NULL, or both of n_params entries; they are zeroed here too). */
void tm_qstats_init(tm_qstats *s, int64_t n_params, double *param_sum_err_lsb2, int64_t *param_n);

/* tm_qstats_merge: dst += src (sums added, maxima kept, counts added, first_nonfinite = the
** smaller valid index). Per-param arrays are added elementwise when both have them with the
** same n_params. Deterministic for a fixed merge order. */
void tm_qstats_merge(tm_qstats *dst, const tm_qstats *src);

/* tm_qstats_worst_param: index of the param unit with the largest RMSE in LSB
** sqrt(param_sum_err_lsb2[i] / param_n[i]) (first one on ties; units with param_n 0 skipped);
** -1 when the stats have no per-param arrays or no measured unit. *rmse_lsb (may be NULL)
** gets that RMSE. */
int64_t tm_qstats_worst_param(const tm_qstats *s, double *rmse_lsb);

/* ---------------------------------------------------------------------------------------- */
/* Quantize / dequantize                                                                     */
/* ---------------------------------------------------------------------------------------- */

/* tm_quantize_f32: affine (or fp8-scaled) quantization of a range of a float32 tensor.
** Formula [docs/quantization.md "Quantize"]:
**   ONNX  q = clamp(round_half_even(x / s) + zp, qmin, qmax)    [ONNX QuantizeLinear]
**   TORCH q = clamp(zp + round_half_even(x * (1.0f / s)), qmin, qmax)   [ATen quantize_val]
**   fp8   q = fp8_saturate(x / s) (TORCH: x * (1.0f/s)); zp unused
**         [compressed-tensors / ONNX QuantizeLinear-19 saturate=1; OCP OFP8]
**   float32 arithmetic, one rounding per operation (no FMA).
**   qp     in  qparams; scale/zero point of element f = index tm_qgran_param_index(f).
**   ndim, shape  the whole tensor's shape (row-major), ndim 0..TM_MAX_DIMS.
**   x      in  n floats: elements [start, start+n) of the tensor (x[0] is element `start`).
**   codes  out n bytes, one code per element (see the top of this file).
**   stats  in/out accumulated into (not reset); may be NULL.
** Returns TM_OK | TM_E_INVALID_ARG (bad dtype/range/shape/n_params, range outside the tensor,
**         a used scale not finite or <= 0, a used zero point outside [qmin, qmax])
**         | TM_E_NONFINITE (a NaN/Inf and !allow_nonfinite; message names the first flat
**         index and the count in the range; codes are not written).
** Reentrant. Codes and stats are bit-identical for every kernel set (qp->kernels).
** Cost: one param lookup per run of elements sharing a param (a row for per-channel axis 0,
** a group for per-group on the last axis), not per element. */
tm_status tm_quantize_f32(const tm_qparams *qp, int ndim, const int64_t *shape, const float *x,
                          int64_t start, int64_t n, uint8_t *codes, tm_qstats *stats,
                          tm_err *err);

/* tm_dequantize: value = (q - zp) * s in float32 [ONNX DequantizeLinear; ATen dequantize
** per-tensor]; fp8: decode(q) * s. Same addressing as tm_quantize_f32: codes[0] is element
** `start`, out has n floats.
** Returns TM_OK | TM_E_INVALID_ARG (as tm_quantize_f32; also a code outside [qmin, qmax] is
** dequantized as is, not rejected). Reentrant. */
tm_status tm_dequantize(const tm_qparams *qp, int ndim, const int64_t *shape,
                        const uint8_t *codes, int64_t start, int64_t n, float *out,
                        tm_err *err);

/* tm_count_nonfinite: how many of x[0..n) are NaN or +-Inf; *first (may be NULL) gets the
** index of the first one, or -1. For a job that reports a tensor's count and first flat index
** before observing it. Reentrant. */
int64_t tm_count_nonfinite(const float *x, int64_t n, int64_t *first);

/* tm_kernels_get: the kernel set named `name`, for tm_qspec / tm_qparams / tm_erracc .kernels
** and the jobs' parameters: "ref" (the scalar reference functions, which define behaviour),
** "auto" (the fastest set this CPU runs, by __builtin_cpu_supports; what NULL means everywhere),
** or a set by name: "avx2" (AVX2, FMA and F16C), "avx512" (AVX-512F besides). One set covers the
** affine quantize/dequantize runs, the observers' min/max, the error statistics and the ggml
** quantizers and error sums. Every set gives the same bits (codes, scales, statistics, files).
** Returns TM_OK | TM_E_INVALID_ARG (unknown name) | TM_E_UNSUPPORTED (the CPU lacks the ISA). */
tm_status tm_kernels_get(const char *name, const tm_kernels **out);

/* tm_kernels_name: "ref", "avx2" or "avx512": the set k is (NULL: the one "auto" picks). */
const char *tm_kernels_name(const tm_kernels *k);

/* ---------------------------------------------------------------------------------------- */
/* Observers and qparams conventions                                                          */
/* ---------------------------------------------------------------------------------------- */

/* tm_observer_default: observer `kind` with its documented defaults (percentile 99.999,
** averaging_constant 0.01, n_bins 2048, n_quantized_bins 128). */
tm_observer tm_observer_default(tm_observer_kind kind);

/* tm_observe_range: the range [lo, hi] that spec->observer picks for ONE param unit whose
** values are vals[0..n) (one batch). [docs/quantization.md "Observers"]
**   MINMAX, EMA_MINMAX   min and max (one batch: the moving average starts at it)
**   HISTOGRAM            torch 1.13 HistogramObserver: histc + _non_linear_param_search
**   PERCENTILE           ORT HistogramCollector.compute_percentile (|x| histogram when
**                        spec->symmetric, x histogram over [-max|x|, max|x|] otherwise)
**   ENTROPY              ORT HistogramCollector.get_entropy_threshold (KL, int64 q quirk)
**   MSE                  clipping-ratio grid search minimising sum (x - deq)^2 under spec
** NaN/Inf: TM_E_NONFINITE naming the index in vals; with spec->allow_nonfinite they are left
** out of the range instead (no finite value at all: lo = hi = 0, the all-zero rule).
** Returns TM_OK | TM_E_INVALID_ARG (n < 1, bad observer settings)
**         | TM_E_NONFINITE | TM_E_NOMEM.
** Reentrant. Memory: O(n_bins) for the histogram observers (plus a copy of |vals| for the
** symmetric percentile), O(1) otherwise. Cost: MSE quantizes the unit 100 times. */
tm_status tm_observe_range(const tm_qspec *spec, const float *vals, int64_t n, double *lo,
                           double *hi, tm_err *err);

/* tm_qparams_from_range: scale and zero point for the range [lo, hi] under spec (convention,
** symmetric, code dtype, code range tm_qspec_range, scale dtype).
** Formulas [docs/quantization.md "Conventions"]:
**   ONNX  (ORT quant_utils.compute_scale_zp; code ranges as the spec vectors define)
**         lo' = min(lo, 0), hi' = max(hi, 0)
**         symmetric: a = max(|lo'|, |hi'|); signed codes s = a / min(-qmin, qmax) (int8 a/127,
**                    int4 a/7 as spec/int4_per_group_axis1_g32; ORT would use 2a/15), zp 0;
**                    unsigned s = 2a / (qmax - qmin), zp = round_half_even((qmin+qmax)/2)
**         affine:    s = (hi' - lo') / (qmax - qmin), zp = clamp(qmin - round_half_even(lo'/s))
**         s < FLT_MIN (all-zero unit) -> s = 1, zp = 0.
**   TORCH (torch.ao.quantization _ObserverBase._calculate_qparams, 1.13)
**         symmetric: s = max(max(-lo', hi') / ((qmax - qmin) / 2), eps), eps = 2^-23;
**                    zp 0 (signed), 128 (U8 [0,255]), (qmin+qmax)/2 floored otherwise
**         affine:    s = max((hi' - lo') / (qmax - qmin), eps),
**                    zp = clamp(qmin - round_half_even(lo' / s), qmin, qmax)
**   fp8   s = max(|lo|, |hi|) / fmax (448 e4m3fn, 57344 e5m2), zp 0; all-zero -> s = 1.
**   float32 arithmetic throughout. scale_dtype F16/BF16: s is rounded to it (RNE) and the
**   zero point recomputed with the rounded s.
**   scale, zero_point  out, one each (zero_point may be NULL).
** Returns TM_OK | TM_E_INVALID_ARG (lo/hi not finite, lo > hi, bad spec)
**         | TM_E_RANGE (s overflows float32 or the scale dtype, or rounds to 0 in it).
** Reentrant; O(1). */
tm_status tm_qparams_from_range(const tm_qspec *spec, double lo, double hi, float *scale,
                                int32_t *zero_point, tm_err *err);

/* tm_qparams_from_range_q: as tm_qparams_from_range with an explicit code range [qmin, qmax]
** (torch quant_min/quant_max, reduce_range). custom_range = 1 marks it as user-given, which
** only changes the TORCH unsigned symmetric zero point (128 -> (qmin+qmax)/2 floored), as
** torch's has_customized_qrange does. */
tm_status tm_qparams_from_range_q(const tm_qspec *spec, int64_t qmin, int64_t qmax,
                                  int custom_range, double lo, double hi, float *scale,
                                  int32_t *zero_point, tm_err *err);

/* tm_qrange_torch_reduced: torch's reduce_range code range for I8/U8 ([-64, 63], [0, 127]);
** other dtypes get tm_dtype_traits' full range halved the same way ([qmin/2, qmax/2]). */
void tm_qrange_torch_reduced(tm_dtype code_dtype, int64_t *qmin, int64_t *qmax);

/* tm_qrange_onnxruntime: ONNX Runtime's own code range (quant_utils.get_qmin_qmax_for_qType):
** reduce_range: U8 [0,127], I8 [-64,64], U4 [0,7], I4 [-4,3]; symmetric I8: [-127,127]; otherwise
** the dtype's full range. Not the default (tm_qspec_range); pass it to tm_qparams_from_range_q
** and tm_qparams.qmin/qmax to clamp codes as ORT does (the int4 symmetric scale stays a/7, see
** docs/quantization.md "Code ranges"). fp8 / non-code dtypes: [0, 0]. */
void tm_qrange_onnxruntime(tm_dtype code_dtype, int symmetric, int reduce_range, int64_t *qmin,
                           int64_t *qmax);

/* Calibration: observers with state across batches (torch forward() / ORT collect()).
** One tm_calib observes every param unit of a tensor shape under spec->gran. */
typedef struct tm_calib tm_calib;

/* tm_calib_create: state for spec->observer; `shape` fixes the param layout (tm_qgran_param_shape).
** Returns TM_OK | TM_E_INVALID_ARG (bad spec/shape/granularity) | TM_E_NOMEM.
** Memory: 4 floats per unit, plus n_bins counts per unit (histogram observers) or every
** observed value (MSE). One tm_calib per thread; different tm_calib are independent. */
tm_status tm_calib_create(const tm_qspec *spec, int ndim, const int64_t *shape, tm_calib **out,
                          tm_err *err);

/* tm_calib_update: observe one batch x, a tensor of `shape` (ndim dims, row-major). Batches may
** differ in shape (e.g. the batch dimension) as long as they give the create-time param shape.
** MINMAX combines min/max; EMA_MINMAX: min += c * (batch_min - min) after the first batch
** [torch MovingAverageMinMaxObserver]; HISTOGRAM: torch 1.13 forward() (histc over the
** int-truncated range, upsample/combine); PERCENTILE/ENTROPY: ORT collect() (histogram
** merge with growing edges); MSE: values kept.
** NaN/Inf: TM_E_NONFINITE (nothing updated; the message names the flat index), or with
** spec->allow_nonfinite left out (a unit without any finite value gets lo = hi = 0).
** Returns TM_OK | TM_E_INVALID_ARG (other param layout) | TM_E_NONFINITE | TM_E_NOMEM.
** Not thread-safe per tm_calib.
** Memory: a gather buffer of the batch size for the histogram observers and MSE. */
tm_status tm_calib_update(tm_calib *c, int ndim, const int64_t *shape, const float *x,
                          tm_err *err);

/* tm_calib_range: the range chosen so far for param unit `unit` (0..n_params-1). Histogram
** observers run their search here; MSE its grid over every kept value of the unit.
** Returns TM_OK | TM_E_INVALID_ARG (unit out of range, nothing observed yet) | TM_E_NOMEM. */
tm_status tm_calib_range(const tm_calib *c, int64_t unit, double *lo, double *hi, tm_err *err);

/* tm_calib_qparams: scale[i], zero_point[i] (may be NULL) for every unit: tm_calib_range then
** tm_qparams_from_range. Returns as those two. */
tm_status tm_calib_qparams(const tm_calib *c, float *scale, int32_t *zero_point, tm_err *err);

/* tm_calib_n_params: number of param units. */
int64_t tm_calib_n_params(const tm_calib *c);

/* tm_calib_minmax: observed min_val / max_val of a unit (EMA: the averaged ones), as torch's
** obs.min_val / obs.max_val. Returns TM_OK | TM_E_INVALID_ARG. */
tm_status tm_calib_minmax(const tm_calib *c, int64_t unit, float *min_val, float *max_val);

/* tm_calib_histogram: the histogram of a unit (HISTOGRAM: float32 counts of torch's layout;
** PERCENTILE/ENTROPY: ORT's int64 counts as doubles and its float32 edges). *n_bins gets the
** current bin count; hist (n_bins entries) and edges (n_bins + 1, ORT only) may be NULL to
** query the size. Returns TM_OK | TM_E_INVALID_ARG (other observers, unit out of range). */
tm_status tm_calib_histogram(const tm_calib *c, int64_t unit, int64_t *n_bins, double *hist,
                             float *edges);

/* tm_calib_free: NULL is a no-op. */
void tm_calib_free(tm_calib *c);

/* tm_hist_l2_search: torch 1.13 HistogramObserver._non_linear_param_search on a given
** histogram (e.g. one recorded from torch): bins of width (max_val - min_val)/n_bins,
** quantile bounds stepped by 1e-5, stops at the first increase of the L2 error estimate
** (float32 arithmetic as torch; the error sum in double). dst_nbins = 2^bits of the code
** dtype (256 for 8-bit). Outputs: new_min/new_max (float32, as torch) and the chosen bins.
** Returns TM_OK | TM_E_INVALID_ARG. */
tm_status tm_hist_l2_search(const float *hist, int n_bins, float min_val, float max_val,
                            int dst_nbins, float *new_min, float *new_max, int64_t *start_bin,
                            int64_t *end_bin);

/* tm_hist_percentile_range / tm_hist_entropy_range: ORT's threshold rules on a given
** histogram (counts, n_bins; edges n_bins+1 float32) and observed min/max; see
** tm_observe_range. percentile in [0, 100]. Return TM_OK | TM_E_INVALID_ARG | TM_E_NOMEM. */
tm_status tm_hist_percentile_range(const int64_t *hist, const float *edges, int64_t n_bins,
                                   float min_val, float max_val, double percentile,
                                   int symmetric, float *lo, float *hi);
tm_status tm_hist_entropy_range(const int64_t *hist, const float *edges, int64_t n_bins,
                                float min_val, float max_val, int n_quantized_bins, float *lo,
                                float *hi);

/* ---------------------------------------------------------------------------------------- */
/* Names (src/quant/qnames.c)                                                                */
/* ---------------------------------------------------------------------------------------- */
/* The one spelling of granularities and observers: every manifest, config.json, report, the
** serve API and every command-line flag and recipe (docs/recipe.md) use these, so a recorded
** scheme reads back to the run that wrote it. */

/* tm_granularity_kind_name: "tensor", "channel", "group", "block" (the JSON "granularity"
** field and compressed-tensors' "strategy"); "?" for a value outside the enum. */
const char *tm_granularity_kind_name(tm_granularity kind);

/* tm_granularity_name: g as text: "tensor", "channel:AXIS", "group:N:AXIS", "block:HxW"
** (axis as stored, negative counting from the end). Writes at most n bytes, NUL-terminated
** (buf may be NULL with n 0); returns the length of the whole text, as snprintf. A kind outside
** the enum is "?". tm_granularity_parse(tm_granularity_name(g)) == g for every g whose fields
** the kind does not use are 0 and whose axis lies in [-1000000, 1000000]. */
size_t tm_granularity_name(const tm_qgran *g, char *buf, size_t n);

/* tm_granularity_parse: "tensor" | "channel[:AXIS]" (axis 0 when not given) |
** "group:N[:AXIS]" (N >= 1; axis -1, the last, when not given) | "block:HxW" (H, W >= 1; 'X'
** also accepted). AXIS is any integer in [-1000000, 1000000]: whether it fits a shape is
** checked where the shape is known. Fields the kind does not use are 0.
** Returns TM_OK | TM_E_INVALID_ARG (anything else; *out unchanged). */
tm_status tm_granularity_parse(const char *s, tm_qgran *out);

/* tm_observer_name: o as text, with its parameters:
**   minmax | ema_minmax:C | histogram | percentile:P | mse | entropy
** then ":bins=N" (histogram, percentile, entropy) when n_bins differs from tm_observer_default,
** and ":quantized_bins=M" (entropy) likewise. C and P are the shortest decimal text that reads
** back to the same double (e.g. "percentile:99.9", "ema_minmax:0.01"). Writes at most n bytes,
** NUL-terminated; "?" for a kind outside the enum.
** tm_observer_from_name(tm_observer_name(o)) == o for every o whose fields its kind does not use
** hold tm_observer_default's values (MINMAX/MSE: all; EMA_MINMAX: all but averaging_constant;
** HISTOGRAM: all but n_bins; PERCENTILE: n_quantized_bins, averaging_constant). */
void tm_observer_name(const tm_observer *o, char *buf, size_t n);

/* tm_observer_from_name: the inverse of tm_observer_name. The parameter C (0 <= C <= 1) or P
** (0 < P <= 100) may be left out (tm_observer_default's), as may the bins suffixes (2 <= N <=
** 2^24; they may come in either order); the others get tm_observer_default's values.
** Returns TM_OK | TM_E_INVALID_ARG (unknown name, bad or out-of-range number, a parameter the
** kind does not have, entropy quantized_bins > bins; *out unchanged). */
tm_status tm_observer_from_name(const char *name, tm_observer *out);

/* ---------------------------------------------------------------------------------------- */
/* Packing                                                                                   */
/* ---------------------------------------------------------------------------------------- */
/* A 2-D code matrix [rows, cols] packed along one dim [../shared/formats/compressed-tensors.md
** section 3; docs/quantization.md "Packing"]: each row (tm_pack_codes) or each column
** (tm_pack_codes_dim0) is an independent bit stream; element j sits at stream bits
** [j*bits, (j+1)*bits) (pk->lsb_first = 1; a field may straddle two words when bits does not
** divide the container width), with lsb_first = TM_PACK_LSB_PER_WORD element j at bits
** [(j%per)*bits, ...) of word j/per (per = W div bits; the top W mod bits bits stay zero) or,
** with lsb_first = 0, element j of a word at its bits
** [W-(j+1)*bits, W-j*bits) (bits must divide W). Stream bit t lives in container word t/W at
** bit t%W; words are little-endian of pk->container's width W (I32/U32: 32, I8/U8 and fp8
** containers: 8, I16/U16: 16, I64/U64: 64). The stored field is (code + pk->offset) mod 2^bits;
** unused tail bits are zero. pk->codes_per_container and pk->packed_axis are not consulted.
** code_dtype says how to read a field back: signed types give field - offset, sign-extended
** from `bits` when offset is 0 (ONNX int4 two's complement nibbles).
** All packing functions are reentrant and allocate nothing.
** Examples (checked in tests): int4 codes [1,2,3,4,5,6,7,0,-1,-8], offset 8, I32 ->
** 0x8FEDCBA9, 0x00000007; int8 [1,-1,127,-128,5], offset 128, I32 -> 0x00FF7F81, 0x00000085. */

/* tm_packed_row_bytes: bytes of one packed stream of `len` codes: ceil(len*bits/W) words
** (TM_PACK_LSB_PER_WORD: ceil(len / (W div bits)) words).
** Returns 0 on a bad packing or overflow. */
uint64_t tm_packed_row_bytes(const tm_packing *pk, int64_t len);

/* tm_pack_codes: pack codes [rows, cols] along the last dim into out
** [rows, tm_packed_row_bytes(pk, cols)] bytes. Returns TM_OK | TM_E_INVALID_ARG
** (bits not 1..8, bits > W, lsb_first = 0 with W % bits != 0, negative sizes). */
tm_status tm_pack_codes(const tm_packing *pk, tm_dtype code_dtype, const uint8_t *codes,
                        int64_t rows, int64_t cols, void *out, tm_err *err);

/* tm_unpack_codes: the inverse of tm_pack_codes; codes out [rows, cols], one per byte. */
tm_status tm_unpack_codes(const tm_packing *pk, tm_dtype code_dtype, const void *packed,
                          int64_t rows, int64_t cols, uint8_t *codes, tm_err *err);

/* tm_pack_codes_dim0: pack codes [rows, cols] along dim 0 (zero points of pack-quantized):
** out is [ceil(rows*bits/W), cols] words, word (k, c) holding stream words k of column c. */
tm_status tm_pack_codes_dim0(const tm_packing *pk, tm_dtype code_dtype, const uint8_t *codes,
                             int64_t rows, int64_t cols, void *out, tm_err *err);

/* tm_unpack_codes_dim0: the inverse of tm_pack_codes_dim0. */
tm_status tm_unpack_codes_dim0(const tm_packing *pk, tm_dtype code_dtype, const void *packed,
                               int64_t rows, int64_t cols, uint8_t *codes, tm_err *err);

/* tm_unpack_one: one code of a packed stream (the Scalar Inspector): element `col` of the
** stream starting at row_base. *code = the code (offset removed, sign-extended as above; fp8:
** the byte), *stored_word = the container word holding the field's first bit, as a
** little-endian unsigned value. Either output may be NULL.
** Returns TM_OK | TM_E_INVALID_ARG (bad packing, col < 0). */
tm_status tm_unpack_one(const tm_packing *pk, tm_dtype code_dtype, const void *row_base,
                        int64_t col, int64_t *code, uint64_t *stored_word);

#ifdef __cplusplus
}
#endif
#endif
