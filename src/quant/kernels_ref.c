/*
** kernels_ref.c: the reference functions of the kernel table (kernels.h), the "ref" set: scalar
** code that defines behaviour; every SIMD set gives their bits. The SIMD variants (quant_avx2.c,
** quant_avx512.c, errlanes.c, ggml_quant_avx2.c) fall back to these for their tails; nothing
** here uses the table, so the table's files form no cycle.
*/
#include "kernels.h"

#include <math.h>

/* ---- affine quantize / dequantize runs (quant_impl.h) ------------------------------------ */

void tm__quant_int_ref(const float *x, int64_t n, const struct tm__qseg *seg, uint8_t *codes) {
    for (int64_t i = 0; i < n; i++) codes[i] = (uint8_t)tm__quant_one(x[i], seg);
}

void tm__dequant_int_ref(const uint8_t *codes, int64_t n, const struct tm__qseg *seg,
                         float *out) {
    for (int64_t i = 0; i < n; i++) {
        int32_t q = seg->code_signed ? (int32_t)(int8_t)codes[i] : (int32_t)codes[i];
        out[i] = (float)(q - seg->zp) * seg->scale;
    }
}

/* ---- the observers' min/max ---------------------------------------------------------------- */

/* min and max of the finite values among v[0..n) (non-finite ones are skipped); +inf / -inf when
** there is none; 1 when it met a non-finite value. The first of equal extremes is kept (-0 or
** +0); no scale or zero point depends on which. */
int tm__minmax_ref(const float *v, int64_t n, float *mn, float *mx) {
    float a = INFINITY, b = -INFINITY;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) { bad = 1; continue; }
        if (v[i] < a) a = v[i];
        if (v[i] > b) b = v[i];
    }
    *mn = a;
    *mx = b;
    return bad;
}

/* ---- the ggml error lanes (ggml_quant_impl.h) -------------------------------------------- */

/* The specification of the lanes: lane k of value i (i % 8 == k) in index order. The max is
** (|e| > m ? |e| : m), as _mm256_max_pd(|e|, m) computes it. */
void tm__gq_err_lanes_ref(tm__gq_err *a, const float *x, const float *dq, int64_t n) {
    for (int64_t i = 0; i < n; i += TM__GQ_ERR_LANES) {
        for (int k = 0; k < TM__GQ_ERR_LANES; k++) {
            const double xv = (double)x[i + k], e = xv - (double)dq[i + k], ae = fabs(e);
            a->x2[k] += xv * xv;
            a->e2[k] += e * e;
            a->emax[k] = ae > a->emax[k] ? ae : a->emax[k];
        }
    }
}
