/*
** ggml_row.c: whole rows of every ggml type through the one type table (ggml_traits.h): the
** dequantizer (tm_ggml_dequantize, the Scalar Inspector's block detail), the quantizer
** (tm_gq_quantize_row, the GGUF job's tm__gq_quantize_row_err) and the error sums. The table's
** kernel files (ggml_dequant.c, ggml_dequant_iq.c, ggml_quant.c, ggml_quant_avx2.c) know nothing
** of the table; this file walks it, so no file cycle forms.
*/
#include "core/core.h"
#include "ggml_traits.h"
#include "kernels.h"
#include "tensormorph/experimental.h"

#include <math.h>

#define QK TM_GGML_QK_K

/* ---- dequantize ------------------------------------------------------------------------- */

/* The block dequantizer of t, ready to run; NULL (with the error set) when it has none. */
static tm__ggml_block_fn block_fn(const tm__ggml_traits *tr, int type, tm_err *err) {
    if (!tr->dequantize || !tr->info.can_dequantize || (tr->prepare && !tr->prepare())) {
        tm__err_set(err, TM_E_UNSUPPORTED, -1, "unsupported ggml type %d (%s): no dequantizer", type,
                    tr->info.name);
        return NULL;
    }
    return tr->dequantize;
}

tm_status tm_ggml_dequantize(int type, const void *src, uint64_t src_bytes, int64_t n, float *dst,
                             tm_err *err) {
    const tm__ggml_traits *tr = tm__ggml_traits_of(type);
    if (!tr) return tm__err_set(err, TM_E_UNSUPPORTED, -1, "unsupported ggml type %d", type);
    uint64_t need;
    tm_status s = tm_ggml_row_bytes(type, n, &need, err);
    if (s) return s;
    if (need > src_bytes)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "%lld values of ggml type %s need %llu bytes, got %llu", (long long)n,
                           tr->info.name, (unsigned long long)need, (unsigned long long)src_bytes);
    const tm_ggml_type_info *t = &tr->info;
    if (!t->is_quantized) {
        s = tm_convert_to_f32((tm_dtype)t->plain_dtype, src, n, dst);
        if (s) return tm__err_set(err, s, -1, "ggml type %s has no float32 view", t->name);
        return TM_OK;
    }
    tm__ggml_block_fn fn = block_fn(tr, type, err);
    if (!fn) return TM_E_UNSUPPORTED;
    const uint8_t *p = src;
    for (int64_t b = 0; b < n / t->block_size; b++)
        fn(p + (uint64_t)b * t->type_size, dst + b * t->block_size, NULL);
    return TM_OK;
}

static tm_status block_detail(int type, const void *block, float *y, blk_detail *dt, tm_err *err) {
    const tm__ggml_traits *tr = tm__ggml_traits_of(type);
    if (!tr) return tm__err_set(err, TM_E_UNSUPPORTED, -1, "unsupported ggml type %d", type);
    if (!tr->info.is_quantized)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "ggml type %s is not a block type", tr->info.name);
    tm__ggml_block_fn fn = block_fn(tr, type, err);
    if (!fn) return TM_E_UNSUPPORTED;
    memset(dt, 0, sizeof *dt);
    fn(block, y, dt);
    return TM_OK;
}

tm_status tm_ggml_block_elem(int type, const void *block, int64_t j, tm_ggml_elem *out,
                             tm_err *err) {
    const tm_ggml_type_info *t = tm_ggml_type_info_get(type);
    if (t && (j < 0 || j >= t->block_size))
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "value %lld outside a %s block of %lld",
                           (long long)j, t->name, (long long)t->block_size);
    blk_detail det, *dt = &det;
    float y[QK];
    tm_status s = block_detail(type, block, y, dt, err);
    if (s == TM_OK) {
        const int sb = (int)(j / t->sub_block);
        memset(out, 0, sizeof *out);
        out->code = dt->code[j];
        out->stored = dt->stored[j];
        out->stored_bits = dt->stored_bits;
        out->scale = dt->scale[sb];
        out->zero_point = dt->zp[sb];
        out->min = dt->min[sb];
        out->super_scale = dt->d;
        out->super_min = dt->dmin;
        out->sub_scale = dt->sub_scale[sb];
        out->sub_min = dt->sub_min[sb];
        out->sub_block = sb;
        out->value = y[j];
    }
    return s;
}

tm_status tm_ggml_block_scales(int type, const void *block, double *scale, double *zero_point,
                               double *min, tm_err *err) {
    const tm_ggml_type_info *t = tm_ggml_type_info_get(type);
    blk_detail det, *dt = &det;
    float y[QK];
    tm_status s = block_detail(type, block, y, dt, err);
    if (s == TM_OK) {
        for (int64_t k = 0; k < t->block_size / t->sub_block; k++) {
            if (scale) scale[k] = dt->scale[k];
            if (zero_point) zero_point[k] = dt->zp[k];
            if (min) min[k] = dt->min[k];
        }
    }
    return s;
}

/* ---- quantize ----------------------------------------------------------------------------- */

/* The writable types are the rows of the type table (ggml_traits.h) with a reference quantizer. */
int tm_gq_writable(int type) {
    const tm__ggml_traits *t = tm__ggml_traits_of(type);
    return t && t->quantize_ref;
}

/* ---- error sums (ggml_quant_impl.h) -------------------------------------------------------- */

void tm__gq_err_add(tm__gq_err *a, const float *x, const float *dq, int64_t n, const tm_kernels *k) {
    const int64_t nl = n / TM__GQ_ERR_LANES * TM__GQ_ERR_LANES;
    tm__kernels_or_auto(k)->gq_err_lanes(a, x, dq, nl);
    for (int64_t i = nl; i < n; i++) {
        const double xv = (double)x[i], e = xv - (double)dq[i], ae = fabs(e);
        a->tx2 += xv * xv;
        a->te2 += e * e;
        a->temax = ae > a->temax ? ae : a->temax;
    }
}

void tm__gq_err_total(const tm__gq_err *a, double *sx2, double *se2, double *emax) {
    double tx = a->tx2, te = a->te2, tm = a->temax;
    for (int k = 0; k < TM__GQ_ERR_LANES; k++) {
        tx += a->x2[k];
        te += a->e2[k];
        tm = a->emax[k] > tm ? a->emax[k] : tm;
    }
    *sx2 = tx;
    *se2 = te;
    *emax = tm;
}

/* The reference's refusal of a non-finite value: the first one, by block and element. */
static tm_status check_finite(const tm_ggml_type_info *t, const float *x, int64_t n, int64_t *bad_block,
                              tm_err *err) {
    for (int64_t i = 0; tm__any_nonfinite(x, n) && i < n; i++) {
        if (!isfinite(x[i])) {
            if (bad_block) *bad_block = i / t->block_size;
            return tm__err_set(err, TM_E_NONFINITE, -1, "block %lld: element %lld is %s",
                               (long long)(i / t->block_size), (long long)i,
                               isnan(x[i]) ? "NaN" : "infinite");
        }
    }
    return TM_OK;
}

/* One row through the type table. With the kernel set's ggml_simd: the type's SIMD quantizer +
** error kernel where it has one (it checks its own input; at the first block it refuses, the
** row is scanned for the reference's error, a non-finite value anywhere in the row coming
** first, and the reference takes over at that block), else its SIMD quantizer; else (and for
** the "ref" set) the reference. Then, with acc, the error of the bytes written (dequantized)
** unless the kernel measured it.
** imatrix (NULL: none): the per-column importances of rows of n_row values; x then holds n / n_row
** such rows, each quantized alone with the same imatrix (ggml's quantize_<type> with
** quant_weights runs row by row): by the SIMD variant with the kernel set's ggml_simd, else the
** reference; never the fused kernels (they have no weighted path). Types without an imatrix path ignore it (as ggml). */
static tm_status quantize_row(int type, const float *x, int64_t n, const float *imatrix, int64_t n_row,
                              void *out, int64_t *bad_block, const tm_kernels *k, tm__gq_err *acc, float *dq,
                              tm_err *err) {
    k = tm__kernels_or_auto(k);
    if (bad_block) *bad_block = -1;
    const tm__ggml_traits *tr = tm__ggml_traits_of(type);
    if (!tr || !tr->quantize_ref) return tm__err_set(err, TM_E_INVALID_ARG, -1, "ggml type %d cannot be written", type);
    const tm_ggml_type_info *t = &tr->info;
    if (n < 0 || n % t->block_size != 0)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "row of %lld values is not a multiple of the %s block (%lld)",
                           (long long)n, t->name, (long long)t->block_size);
    if (!tr->uses_imatrix) imatrix = NULL;
    if (imatrix && (n_row <= 0 || n_row % t->block_size != 0 || n % n_row != 0))
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "importance matrix of %lld values does not fit %lld values of %s rows",
                           (long long)n_row, (long long)n, t->name);
    uint8_t *y = out;
    const int64_t nb = n / t->block_size;
    int64_t b0 = 0;
    tm_status st;
    if (imatrix) {
        st = check_finite(t, x, n, bad_block, err);
        const int64_t rb = n_row / t->block_size;
        tm__gq_rows_fn fn = k->ggml_simd && tr->quantize_simd ? tr->quantize_simd : tr->quantize_ref;
        for (int64_t r = 0; !st && r < n / n_row; r++) {
            st = fn(t, x + r * n_row, imatrix, 0, rb, y + (size_t)(r * rb) * t->type_size, bad_block, err);
            if (st && bad_block && *bad_block >= 0) *bad_block += r * rb;
        }
    } else if (k->ggml_simd && tr->quantize_err) {
        b0 = tr->quantize_err(x, nb, y, acc);
        if (b0 < 0) return TM_OK;
        st = check_finite(t, x, n, bad_block, err);
        if (!st) st = tr->quantize_ref(t, x, NULL, b0, nb, y, bad_block, err);
        /* not reached with acc: the reference fails where the kernel stopped */
    } else {
        st = check_finite(t, x, n, bad_block, err);
        tm__gq_rows_fn fn = k->ggml_simd && tr->quantize_simd ? tr->quantize_simd : tr->quantize_ref;
        if (!st) st = fn(t, x, NULL, 0, nb, y, bad_block, err);
    }
    if (!st && acc) {
        const int64_t v0 = b0 * t->block_size;
        st = tm_ggml_dequantize(type, y + (size_t)b0 * t->type_size, (uint64_t)(nb - b0) * t->type_size, n - v0, dq, err);
        if (!st) tm__gq_err_add(acc, x + v0, dq, n - v0, k);
    }
    return st;
}

tm_status tm_gq_quantize_row(int type, const float *x, int64_t n, void *out, int64_t *bad_block,
                             tm_err *err) {
    return quantize_row(type, x, n, NULL, 0, out, bad_block, NULL, NULL, NULL, err);
}

tm_status tm_gq_quantize_row_imatrix(int type, const float *x, int64_t n, const float *imatrix,
                                     void *out, int64_t *bad_block, tm_err *err) {
    return quantize_row(type, x, n, imatrix, n, out, bad_block, NULL, NULL, NULL, err);
}

int tm_gq_uses_imatrix(int type) {
    const tm__ggml_traits *t = tm__ggml_traits_of(type);
    return t && t->quantize_ref && t->uses_imatrix;
}

tm_status tm_gq_quantize_row_ref(int type, const float *x, int64_t n, void *out,
                                 int64_t *bad_block, tm_err *err) {
    return quantize_row(type, x, n, NULL, 0, out, bad_block, &tm__kernels_ref, NULL, NULL, err);
}

tm_status tm__gq_quantize_row_err(int type, const float *x, int64_t n, const float *imatrix,
                                  int64_t n_row, void *out, float *dq, tm__gq_err *acc,
                                  int64_t *bad_block, const tm_kernels *k, tm_err *err) {
    return quantize_row(type, x, n, imatrix, n_row, out, bad_block, k, acc, dq, err);
}
