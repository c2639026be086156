/* errstats.c: error statistics of a quantized tensor against its source, in its own units and
** in LSB (units of the element's own scale). Definitions: docs/qdiff.md. */
#include "../core/core.h"
#include "../quant/kernels.h"

#include <math.h>

tm_status tm_erracc_init(tm_erracc *a, int64_t n_params, tm_err *err) {
    memset(a, 0, sizeof *a);
    a->lsb_mult = 1.0;
    if (n_params > 0) {
        a->param_sum_l2 = tm__calloc((size_t)n_params, sizeof(double));
        a->param_n = tm__calloc((size_t)n_params, sizeof(int64_t));
        if (!a->param_sum_l2 || !a->param_n) {
            tm_erracc_free(a);
            return tm__err_set(err, TM_E_NOMEM, -1, "out of memory for %lld error accumulators",
                               (long long)n_params);
        }
        a->n_params = n_params;
    }
    return TM_OK;
}

void tm_erracc_free(tm_erracc *a) {
    if (!a) return;
    free(a->param_sum_l2);
    free(a->param_n);
    a->param_sum_l2 = NULL;
    a->param_n = NULL;
    a->n_params = 0;
}

/* Spacing of the float8 grid at |v| (v in code units): OCP OFP8, 3 mantissa bits for E4M3
** (min normal exponent -6), 2 for E5M2 (min normal exponent -14). */
static double fp8_spacing(tm_dtype dt, double v) {
    int mbits = dt == TM_F8_E4M3 ? 3 : 2;
    int emin = dt == TM_F8_E4M3 ? -6 : -14;
    double av = fabs(v);
    int e = emin;
    if (av > 0) {
        int ex;
        frexp(av, &ex); /* av = m * 2^ex, m in [0.5, 1) */
        e = ex - 1;
        if (e < emin) e = emin;
    }
    return ldexp(1.0, e - mbits);
}

double tm_lsb_size(tm_dtype code_dtype, double scale, double x) {
    double s = fabs(scale);
    if ((code_dtype == TM_F8_E4M3 || code_dtype == TM_F8_E5M2) && s > 0)
        return s * fp8_spacing(code_dtype, x / s);
    return s;
}

/* Integer codes: one scale per run of elements sharing a param (a row, a group); the run's sums
** come from the kernel set's err_run (src/quant/errlanes.c: the fixed summation order, the
** reference lanes and their AVX2 form), so they are the same bits for every set. */

/* One run of integer codes sharing param p (see tm_erracc_add_run). */
static void add_int_run(tm_erracc *a, const float *x, const float *xq, int64_t p, const float *scale,
                        const int32_t *zero_point, int64_t qmin, int64_t qmax, int64_t n) {
    double s = scale[p];
    double zp = zero_point ? zero_point[p] : 0;
    double lo = ((double)qmin - zp) * s - TM_QDIFF_MAX_LSB_TOL * s;
    double hi = ((double)qmax - zp) * s + TM_QDIFF_MAX_LSB_TOL * s;
    double ls = a->lsb_mult > 0 && a->lsb_mult != 1.0 ? s * a->lsb_mult : s; /* one LSB (0: unset, 1) */
    double inv = ls > 0 ? 1.0 / ls : 0; /* one LSB is |scale|; s <= 0 gives inf/NaN below */
    tm__err_run r;
    tm__kernels_or_auto(a->kernels)->err_run(x, xq, n, ls, inv, lo, hi, &r);
    a->n += r.cnt;
    a->n_nonfinite += r.nonfin;
    a->n_clipped += r.clip;
    a->n_beyond += r.beyond;
    a->sum_x2 += r.sx2;
    a->sum_q2 += r.sq2;
    a->sum_xq += r.sxq;
    a->sum_e2 += r.se2;
    a->sum_l2 += r.sl2;
    if (r.mabs > a->max_abs) a->max_abs = r.mabs;
    if (r.mlsb > a->max_lsb) a->max_lsb = r.mlsb;
    if (r.mlsbu > a->max_lsb_unclipped) a->max_lsb_unclipped = r.mlsbu;
    if (a->n_params > 0 && p >= 0 && p < a->n_params) {
        a->param_sum_l2[p] += r.sl2;
        a->param_n[p] += r.cnt;
    }
}

static void add_int(tm_erracc *a, const float *x, const float *xq, const int64_t *param,
                    const float *scale, const int32_t *zero_point, int64_t qmin, int64_t qmax,
                    int64_t n) {
    int64_t k = 0;
    while (k < n) {
        int64_t p = param[k], k1 = k + 1;
        while (k1 < n && param[k1] == p) k1++;
        add_int_run(a, x + k, xq + k, p, scale, zero_point, qmin, qmax, k1 - k);
        k = k1;
    }
}

void tm_erracc_add_run(tm_erracc *a, tm_dtype code_dtype, const float *x, const float *xq, int64_t p,
                       const float *scale, const int32_t *zero_point, int64_t qmin, int64_t qmax,
                       int64_t n) {
    if (n <= 0) return;
    if (code_dtype == TM_F8_E4M3 || code_dtype == TM_F8_E5M2) {
        /* float8: per element anyway; reuse the general path with a constant param */
        int64_t buf[256];
        for (int64_t k = 0; k < n; k += 256) {
            int64_t m = n - k < 256 ? n - k : 256;
            for (int64_t i = 0; i < m; i++) buf[i] = p;
            tm_erracc_add(a, code_dtype, x + k, xq + k, buf, scale, zero_point, qmin, qmax, m);
        }
        return;
    }
    add_int_run(a, x, xq, p, scale, zero_point, qmin, qmax, n);
}

void tm_erracc_add(tm_erracc *a, tm_dtype code_dtype, const float *x, const float *xq,
                   const int64_t *param, const float *scale, const int32_t *zero_point,
                   int64_t qmin, int64_t qmax, int64_t n) {
    int is_fp8 = code_dtype == TM_F8_E4M3 || code_dtype == TM_F8_E5M2;
    if (!is_fp8) {
        add_int(a, x, xq, param, scale, zero_point, qmin, qmax, n);
        return;
    }
    for (int64_t k = 0; k < n; k++) {
        double xv = x[k];
        if (!isfinite(xv)) { a->n_nonfinite++; continue; }
        int64_t p = param[k];
        double s = scale[p];
        double q = xq[k];
        double e = q - xv;
        double ae = fabs(e);
        double lsb = s * fp8_spacing(code_dtype, xv / s);
        double el = lsb > 0 ? ae / lsb : (ae > 0 ? INFINITY : 0);
        double lim = (double)qmax * s; /* qmax = largest finite code value */
        int clipped = fabs(xv) > lim + TM_QDIFF_MAX_LSB_TOL * s * fp8_spacing(code_dtype, (double)qmax);
        a->n++;
        a->sum_x2 += xv * xv;
        a->sum_q2 += q * q;
        a->sum_xq += xv * q;
        a->sum_e2 += e * e;
        a->sum_l2 += el * el;
        if (ae > a->max_abs) a->max_abs = ae;
        if (el > a->max_lsb) a->max_lsb = el;
        if (clipped) {
            a->n_clipped++;
        } else {
            if (el > a->max_lsb_unclipped) a->max_lsb_unclipped = el;
            if (el > TM_QDIFF_MAX_LSB_TOL) a->n_beyond++;
        }
        if (a->n_params > 0 && p >= 0 && p < a->n_params) {
            a->param_sum_l2[p] += el * el;
            a->param_n[p]++;
        }
    }
}

void tm_erracc_merge(tm_erracc *into, const tm_erracc *from) {
    into->n += from->n;
    into->n_clipped += from->n_clipped;
    into->n_nonfinite += from->n_nonfinite;
    into->n_beyond += from->n_beyond;
    into->sum_x2 += from->sum_x2;
    into->sum_e2 += from->sum_e2;
    into->sum_l2 += from->sum_l2;
    into->sum_q2 += from->sum_q2;
    into->sum_xq += from->sum_xq;
    if (from->max_abs > into->max_abs) into->max_abs = from->max_abs;
    if (from->max_lsb > into->max_lsb) into->max_lsb = from->max_lsb;
    if (from->max_lsb_unclipped > into->max_lsb_unclipped)
        into->max_lsb_unclipped = from->max_lsb_unclipped;
    if (into->n_params > 0 && from->n_params == into->n_params) {
        for (int64_t p = 0; p < into->n_params; p++) {
            into->param_sum_l2[p] += from->param_sum_l2[p];
            into->param_n[p] += from->param_n[p];
        }
    }
}

void tm_erracc_summary(const tm_erracc *a, tm_errsum *o) {
    memset(o, 0, sizeof *o);
    o->n = a->n;
    o->n_nonfinite = a->n_nonfinite;
    o->worst_group = -1;
    if (a->n == 0) { o->sqnr_db = INFINITY; o->cosine = 1; return; }
    double nn = (double)a->n;
    if (a->sum_e2 == 0) o->sqnr_db = INFINITY;
    else if (a->sum_x2 == 0) o->sqnr_db = -INFINITY;
    else o->sqnr_db = 10.0 * log10(a->sum_x2 / a->sum_e2);
    o->rmse = sqrt(a->sum_e2 / nn);
    o->rmse_lsb = sqrt(a->sum_l2 / nn);
    o->max_abs_err = a->max_abs;
    o->max_err_lsb = a->max_lsb;
    o->max_err_lsb_unclipped = a->max_lsb_unclipped;
    o->n_beyond_half_lsb = a->n_beyond;
    o->clipped_fraction = (double)a->n_clipped / nn;
    double den = sqrt(a->sum_x2) * sqrt(a->sum_q2);
    o->cosine = den > 0 ? a->sum_xq / den : (a->sum_x2 == a->sum_q2 ? 1.0 : 0.0);
    double worst = -1;
    for (int64_t p = 0; p < a->n_params; p++) {
        if (a->param_n[p] == 0) continue;
        double r = sqrt(a->param_sum_l2[p] / (double)a->param_n[p]);
        if (r > worst) { worst = r; o->worst_group = p; }
    }
    o->worst_group_rmse_lsb = worst < 0 ? 0 : worst;
}
