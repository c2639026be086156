/*
** qparams.c: code ranges and the two qparams conventions: scale and zero point from a range
** [lo, hi] [docs/quantization.md "Code ranges", "Conventions"].
**
** ONNX: ONNX Runtime quant_utils.compute_scale_zp (range widened to include 0; symmetric;
**       scale < float tiny -> scale 1, zero point 0), with the code ranges and float32
**       arithmetic that ../shared/vectors/spec/ define (see tm_qspec_range).
** TORCH: torch.ao.quantization.observer._ObserverBase._calculate_qparams (1.13): eps 2^-23,
**       symmetric divides by (qmax - qmin) / 2, quint8 symmetric zero point 128.
*/
#include "quant_impl.h"

#include <float.h>
#include <math.h>

#define TORCH_EPS 1.1920928955078125e-07f /* torch.finfo(torch.float32).eps = 2^-23 */

tm_observer tm_observer_default(tm_observer_kind kind) {
    tm_observer o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.percentile = 99.999;
    o.averaging_constant = 0.01;
    o.n_bins = 2048;
    o.n_quantized_bins = 128;
    return o;
}

tm_qspec tm_qspec_default(void) {
    tm_qspec s;
    memset(&s, 0, sizeof s);
    s.code_dtype = TM_I8;
    s.symmetric = 1;
    s.gran.kind = TM_GRAN_CHANNEL;
    s.gran.axis = 0;
    s.gran.group_size = 128;
    s.gran.block_h = 128;
    s.gran.block_w = 128;
    s.observer = tm_observer_default(TM_OBS_MINMAX);
    s.convention = TM_CONV_ONNX;
    s.scale_dtype = TM_F32;
    s.allow_nonfinite = 0;
    return s;
}

/* Both conventions clamp integer codes to the dtype's full range: [-128, 127] int8,
** [0, 255] uint8, [-8, 7] int4, [0, 15] uint4. That is torch's default quant_min/quant_max
** and what ../shared/vectors/spec/int8_block2d and spec/int4_per_group_axis1_g32 require for
** symmetric codes. ONNX Runtime's get_qmin_qmax_for_qType would use [-127, 127] for symmetric
** int8 (ONNX_INT_TYPE_SYMMETRIC_RANGE); its scale a/127 is what we compute too, so the two
** differ only for values below -a (a range clipped by the observer), which we let reach -128.
** fp8: [-fmax, fmax] (informative; fp8 quantization saturates, it does not use qmin/qmax). */
void tm_qspec_range(const tm_qspec *spec, int64_t *qmin, int64_t *qmax) {
    int64_t lo = 0, hi = 0;
    const tm_dtype_traits *t = spec ? tm_dtype_get(spec->code_dtype) : NULL;
    if (t && t->is_code) {
        if (t->is_float) {
            lo = -(int64_t)t->fmax;
            hi = (int64_t)t->fmax;
        } else {
            lo = t->qmin;
            hi = t->qmax;
        }
    }
    if (qmin) *qmin = lo;
    if (qmax) *qmax = hi;
}

void tm_qrange_torch_reduced(tm_dtype code_dtype, int64_t *qmin, int64_t *qmax) {
    /* torch _ObserverBase: reduce_range halves the range: qint8 [-64, 63], quint8 [0, 127] */
    const tm_dtype_traits *t = tm_dtype_get(code_dtype);
    int64_t lo = 0, hi = 0;
    if (t && !t->is_float) {
        lo = t->qmin / 2;
        hi = t->qmax / 2;
    }
    if (qmin) *qmin = lo;
    if (qmax) *qmax = hi;
}

void tm_qrange_onnxruntime(tm_dtype code_dtype, int symmetric, int reduce_range, int64_t *qmin,
                           int64_t *qmax) {
    /* quant_utils.get_qmin_qmax_for_qType: ONNX_INT_TYPE_REDUCED_RANGE when reduce_range,
    ** else ONNX_INT_TYPE_SYMMETRIC_RANGE (int8 only) when symmetric, else the full range */
    int64_t lo = 0, hi = 0;
    const tm_dtype_traits *t = tm_dtype_get(code_dtype);
    if (t && t->is_code && !t->is_float) {
        lo = t->qmin;
        hi = t->qmax;
        if (reduce_range) {
            switch (code_dtype) {
            case TM_U8: lo = 0; hi = 127; break;
            case TM_I8: lo = -64; hi = 64; break;
            case TM_U4: lo = 0; hi = 7; break;
            case TM_I4: lo = -4; hi = 3; break;
            default: break;
            }
        } else if (symmetric && code_dtype == TM_I8) {
            lo = -127;
        }
    }
    if (qmin) *qmin = lo;
    if (qmax) *qmax = hi;
}

static int32_t clamp_zp(float zp_f, int64_t qmin, int64_t qmax) {
    if (zp_f < (float)qmin) return (int32_t)qmin;
    if (zp_f > (float)qmax) return (int32_t)qmax;
    return (int32_t)zp_f;
}

/* Affine zero point: clamp(qmin - round_half_even(lo / s)) in float32 (both conventions; the
** spec vectors' "zp = clamp(qmin - round_half_even(min_neg/scale))"). */
static int32_t affine_zp(float lo, float s, int64_t qmin, int64_t qmax) {
    float r = rintf(lo / s);
    return clamp_zp((float)qmin - r, qmin, qmax);
}

/* Round s to the scale dtype. Returns TM_E_RANGE when it overflows or vanishes. */
static tm_status round_scale(tm_dtype scale_dtype, float *s, tm_err *err) {
    float v = *s;
    if (!isfinite(v) || !(v > 0.0f))
        return tm__err_set(err, TM_E_RANGE, -1, "quant: scale %g is not a finite positive float32",
                           (double)v);
    float r;
    switch (scale_dtype) {
    case TM_F32:
        return TM_OK;
    case TM_F16:
        r = tm_f16_to_f32(tm_f32_to_f16(v));
        break;
    case TM_BF16:
        r = tm_bf16_to_f32(tm_f32_to_bf16(v));
        break;
    default:
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: scale dtype %s not F32/F16/BF16",
                           tm_dtype_get(scale_dtype) ? tm_dtype_get(scale_dtype)->name : "?");
    }
    if (!isfinite(r) || !(r > 0.0f))
        return tm__err_set(err, TM_E_RANGE, -1, "quant: scale %.9g does not fit %s (rounds to %g)",
                           (double)v, tm_dtype_get(scale_dtype)->name, (double)r);
    *s = r;
    return TM_OK;
}

static int is_unsigned_code(tm_dtype dt) { return dt == TM_U8 || dt == TM_U4; }

static tm_status fp8_qparams(const tm_qspec *spec, float lo, float hi, float *scale,
                             int32_t *zero_point, tm_err *err) {
    float a = fmaxf(fabsf(lo), fabsf(hi));
    float s = a / (float)tm_dtype_get(spec->code_dtype)->fmax;
    if (!(s >= FLT_MIN)) s = 1.0f; /* all-zero (or subnormal-only) unit */
    tm_status st = round_scale(spec->scale_dtype, &s, err);
    if (st != TM_OK) return st;
    *scale = s;
    if (zero_point) *zero_point = 0;
    return TM_OK;
}

static tm_status onnx_qparams(const tm_qspec *spec, int64_t qmin, int64_t qmax, float lo,
                              float hi, float *scale, int32_t *zero_point, tm_err *err) {
    float rmin = fminf(lo, 0.0f), rmax = fmaxf(hi, 0.0f);
    float s;
    int32_t zp;
    int sym = spec->symmetric;
    if (sym) {
        float a = fmaxf(fabsf(rmin), fabsf(rmax));
        if (is_unsigned_code(spec->code_dtype)) {
            s = (a + a) / (float)(qmax - qmin);
            zp = (int32_t)rint(((double)qmin + (double)qmax) / 2.0);
        } else {
            int64_t m = -qmin < qmax ? -qmin : qmax; /* symmetric half range: 127 int8, 7 int4 */
            s = a / (float)m;
            zp = 0;
        }
    } else {
        s = (rmax - rmin) / (float)(qmax - qmin);
        zp = 0;
    }
    if (!(s >= FLT_MIN)) { /* ORT: scale < numpy.finfo(float32).tiny -> 1, 0 */
        *scale = 1.0f;
        if (zero_point) *zero_point = 0;
        return round_scale(spec->scale_dtype, scale, err);
    }
    tm_status st = round_scale(spec->scale_dtype, &s, err);
    if (st != TM_OK) return st;
    if (!sym) zp = affine_zp(rmin, s, qmin, qmax);
    *scale = s;
    if (zero_point) *zero_point = zp;
    return TM_OK;
}

static tm_status torch_qparams(const tm_qspec *spec, int64_t qmin, int64_t qmax, int custom,
                               float lo, float hi, float *scale, int32_t *zero_point,
                               tm_err *err) {
    float min_neg = fminf(lo, 0.0f), max_pos = fmaxf(hi, 0.0f);
    float s;
    int32_t zp = 0;
    if (spec->symmetric) {
        max_pos = fmaxf(-min_neg, max_pos);
        s = max_pos / (float)((double)(qmax - qmin) / 2.0);
        s = fmaxf(s, TORCH_EPS);
        if (is_unsigned_code(spec->code_dtype)) {
            /* quint8: 128; a customized range: the down-rounded midpoint */
            zp = (!custom && qmin <= 128 && 128 <= qmax) ? 128 : (int32_t)((qmin + qmax) >> 1);
        }
    } else {
        s = (max_pos - min_neg) / (float)(qmax - qmin);
        s = fmaxf(s, TORCH_EPS);
    }
    tm_status st = round_scale(spec->scale_dtype, &s, err);
    if (st != TM_OK) return st;
    if (!spec->symmetric) zp = affine_zp(min_neg, s, qmin, qmax);
    *scale = s;
    if (zero_point) *zero_point = zp;
    return TM_OK;
}

tm_status tm_qparams_from_range_q(const tm_qspec *spec, int64_t qmin, int64_t qmax,
                                  int custom_range, double lo, double hi, float *scale,
                                  int32_t *zero_point, tm_err *err) {
    if (!spec || !scale) return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: spec/scale NULL");
    const tm_dtype_traits *t = tm_dtype_get(spec->code_dtype);
    if (!t || !t->is_code)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: %s is not a code dtype",
                           t ? t->name : "?");
    if (!isfinite(lo) || !isfinite(hi) || lo > hi)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: range [%g, %g] is not finite/ordered",
                           lo, hi);
    float lo_f = (float)lo, hi_f = (float)hi;
    if (!isfinite(lo_f) || !isfinite(hi_f))
        return tm__err_set(err, TM_E_RANGE, -1, "quant: range [%g, %g] overflows float32", lo, hi);
    if (t->is_float) return fp8_qparams(spec, lo_f, hi_f, scale, zero_point, err);
    if (qmin > 0 || qmax < 0 || qmin >= qmax || qmin < t->qmin || qmax > t->qmax)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "quant: code range [%lld, %lld] must contain 0 and fit %s",
                           (long long)qmin, (long long)qmax, t->name);
    tm_status st;
    if (spec->convention == TM_CONV_TORCH)
        st = torch_qparams(spec, qmin, qmax, custom_range, lo_f, hi_f, scale, zero_point, err);
    else if (spec->convention == TM_CONV_ONNX)
        st = onnx_qparams(spec, qmin, qmax, lo_f, hi_f, scale, zero_point, err);
    else
        st = tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: unknown convention %d",
                         (int)spec->convention);
    return st;
}

tm_status tm_qparams_from_range(const tm_qspec *spec, double lo, double hi, float *scale,
                                int32_t *zero_point, tm_err *err) {
    int64_t qmin, qmax;
    if (!spec) return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: spec is NULL");
    tm_qspec_range(spec, &qmin, &qmax);
    return tm_qparams_from_range_q(spec, qmin, qmax, 0, lo, hi, scale, zero_point, err);
}

tm_qparams tm_qparams_for_spec(const tm_qspec *spec, int64_t n_params, const float *scale,
                               const int32_t *zero_point) {
    tm_qparams qp;
    memset(&qp, 0, sizeof qp);
    qp.code_dtype = spec->code_dtype;
    tm_qspec_range(spec, &qp.qmin, &qp.qmax);
    qp.gran = spec->gran;
    qp.n_params = n_params;
    qp.scale = scale;
    qp.zero_point = zero_point;
    qp.convention = spec->convention;
    qp.allow_nonfinite = spec->allow_nonfinite;
    qp.kernels = spec->kernels;
    return qp;
}
