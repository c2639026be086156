/*
** calib.c: the calibration lab: one observer over calibration batches, its scale and zero
** point, and what they cost on the same samples (clipped tails, SQNR, probes). Definitions:
** docs/calibrate.md; observers and conventions: docs/quantization.md.
*/
#include "../core/core.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

enum { CHUNK = 4096 };

/* 1 when the caller's cancel flag is set */
static int cancelled(volatile const int *cancel) { return cancel && *cancel; }

static tm_status cancel_err(tm_err *err) {
    return tm__err_set(err, TM_E_CANCELLED, -1, "calibrate: interrupted");
}

void tm_calib_result_free(tm_calib_result *r) {
    if (!r) return;
    free(r->units);
    free(r->probes);
    free(r);
}

/* prod(shape) of a batch, checked; -1 on a bad shape */
static int64_t batch_n(const tm_calib_batch *b) {
    if (b->ndim < 0 || b->ndim > TM_MAX_DIMS) return -1;
    int64_t n = 1;
    for (int d = 0; d < b->ndim; d++)
        if (b->shape[d] < 0 || !tm__mul_i64_ok(n, b->shape[d], &n)) return -1;
    return n;
}

static tm_status check_samples(const tm_calib_batch *b, int n_batches, volatile const int *cancel,
                               float *mn, float *mx, tm_err *err) {
    int64_t total = 0;
    float a = INFINITY, z = -INFINITY;
    for (int k = 0; k < n_batches; k++) {
        int64_t n = batch_n(&b[k]);
        if (n < 0) return tm__err_set(err, TM_E_INVALID_ARG, -1, "calibrate: batch %d: bad shape", k);
        if (n > 0 && !b[k].x)
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "calibrate: batch %d: no data", k);
        for (int64_t i = 0; i < n; i++) {
            if ((i & 0xfffff) == 0 && cancelled(cancel)) return cancel_err(err);
            float v = b[k].x[i];
            if (!isfinite(v))
                return tm__err_set(err, TM_E_NONFINITE, -1,
                                   "calibrate: samples hold %s at flat index %lld of batch %d "
                                   "(calibration needs finite samples)",
                                   v != v ? "NaN" : v > 0 ? "+inf" : "-inf", (long long)i, k);
            if (v < a) a = v;
            if (v > z) z = v;
        }
        total += n;
    }
    if (total == 0) return tm__err_set(err, TM_E_INVALID_ARG, -1, "calibrate: no samples (0 elements)");
    *mn = a;
    *mx = z;
    return TM_OK;
}

/* running sums of one tm_calib_stats; sum_excess kept aside for the mean */
struct acc {
    tm_calib_stats st;
    double         sum_excess;
};

static void acc_add(struct acc *a, double x, double deq, double clip_lo, double clip_hi,
                    double rep_lo, double rep_hi) {
    double e = x - deq;
    a->st.n++;
    a->st.sum_x2 += x * x;
    a->st.sum_err2 += e * e;
    double ex = -1.0;
    if (x < clip_lo) ex = rep_lo - x;
    else if (x > clip_hi) ex = x - rep_hi;
    if (ex >= 0.0) {
        a->st.n_clipped++;
        a->sum_excess += ex;
        if (ex > a->st.clipped_max_excess) a->st.clipped_max_excess = ex;
    }
}

static void acc_finish(struct acc *a) {
    tm_calib_stats *s = &a->st;
    s->clipped_fraction = s->n ? (double)s->n_clipped / (double)s->n : 0.0;
    s->clipped_mean_excess = s->n_clipped ? a->sum_excess / (double)s->n_clipped : 0.0;
    s->sqnr_db = s->sum_err2 > 0.0 ? 10.0 * log10(s->sum_x2 / s->sum_err2) : INFINITY;
}

/* the code of one byte as quantize writes it (see tensormorph/quant.h) */
static int64_t code_of(tm_dtype dt, uint8_t c) {
    return (dt == TM_I8 || dt == TM_I4) ? (int64_t)(int8_t)c : (int64_t)c;
}

static tm_status run_probes(const tm_calib_params *p, tm_calib_result *r, int64_t qmin,
                            int64_t qmax, tm_err *err) {
    for (int64_t u = 0; u < r->n_units; u++) {
        tm_qparams q = {.code_dtype = p->spec.code_dtype, .qmin = qmin, .qmax = qmax,
                        .gran = {.kind = TM_GRAN_TENSOR}, .n_params = 1,
                        .scale = &r->units[u].scale, .zero_point = &r->units[u].zero_point,
                        .convention = p->spec.convention};
        const int64_t one = 1;
        for (int64_t k = 0; k < p->n_probes; k++) {
            /* beyond float32's range: the nearest float32, which clips to an end code as the
               real value would (the error below is against the real value, in float64) */
            double pv = p->probes[k];
            float x = pv > FLT_MAX ? FLT_MAX : pv < -FLT_MAX ? -FLT_MAX : (float)pv, deq;
            uint8_t c;
            tm_status st = tm_quantize_f32(&q, 1, &one, &x, 0, 1, &c, NULL, err);
            if (st == TM_OK) st = tm_dequantize(&q, 1, &one, &c, 0, 1, &deq, err);
            if (st != TM_OK) return st;
            tm_calib_probe *pr = &r->probes[u * p->n_probes + k];
            pr->real = p->probes[k];
            pr->code = code_of(p->spec.code_dtype, c);
            pr->dequantized = deq;
            pr->error = (double)deq - p->probes[k];
        }
    }
    return TM_OK;
}

/* quantize-dequantize every sample with the chosen params; per-unit and total statistics */
static tm_status measure(const tm_calib_params *p, const tm_calib_batch *b, int n_batches,
                         tm_calib_result *r, const float *scale, const int32_t *zp,
                         int64_t qmin, int64_t qmax, tm_err *err) {
    int64_t nu = r->n_units;
    struct acc *ua = tm__calloc((size_t)nu, sizeof *ua);
    double *bound = tm__malloc_n((size_t)nu * 4, sizeof(double));
    uint8_t *codes = tm__malloc_n(CHUNK, 1);
    float *deq = tm__malloc_n(CHUNK, sizeof(float));
    tm_status st = TM_OK;
    if (!ua || !bound || !codes || !deq) {
        st = tm__err_set(err, TM_E_NOMEM, -1, "calibrate: out of memory for %lld units", (long long)nu);
        goto out;
    }
    for (int64_t u = 0; u < nu; u++) {
        double s = scale[u];
        bound[4 * u + 0] = ((double)(qmin - zp[u]) - 0.5) * s;     /* clipped below this */
        bound[4 * u + 1] = ((double)(qmax - zp[u]) + 0.5) * s;     /* or above this      */
        bound[4 * u + 2] = (double)((float)(qmin - zp[u]) * scale[u]); /* tm_dequantize(qmin) */
        bound[4 * u + 3] = (double)((float)(qmax - zp[u]) * scale[u]);
    }
    struct acc tot;
    memset(&tot, 0, sizeof tot);
    tm_qparams q = {.code_dtype = p->spec.code_dtype, .qmin = qmin, .qmax = qmax,
                    .gran = p->spec.gran, .n_params = nu, .scale = scale, .zero_point = zp,
                    .convention = p->spec.convention};
    for (int k = 0; k < n_batches && st == TM_OK; k++) {
        const tm_calib_batch *bk = &b[k];
        int64_t n = batch_n(bk);
        for (int64_t off = 0; off < n && st == TM_OK; off += CHUNK) {
            if (cancelled(p->cancel)) {
                st = cancel_err(err);
                goto out;
            }
            int64_t m = n - off < CHUNK ? n - off : CHUNK;
            st = tm_quantize_f32(&q, bk->ndim, bk->shape, bk->x + off, off, m, codes, NULL, err);
            if (st == TM_OK) st = tm_dequantize(&q, bk->ndim, bk->shape, codes, off, m, deq, err);
            for (int64_t i = 0; st == TM_OK && i < m; i++) {
                int64_t u = nu == 1 ? 0 : tm_qgran_param_index(&p->spec.gran, bk->ndim, bk->shape, off + i);
                const double *bd = &bound[4 * u];
                double x = bk->x[off + i], d = deq[i];
                acc_add(&ua[u], x, d, bd[0], bd[1], bd[2], bd[3]);
                acc_add(&tot, x, d, bd[0], bd[1], bd[2], bd[3]);
            }
        }
        if (st != TM_OK) tm__err_prefix(err, "calibrate: batch %d", k);
    }
    if (st == TM_OK) {
        for (int64_t u = 0; u < nu; u++) {
            acc_finish(&ua[u]);
            r->units[u].st = ua[u].st;
        }
        acc_finish(&tot);
        r->total = tot.st;
    }
out:
    free(ua);
    free(bound);
    free(codes);
    free(deq);
    return st;
}

tm_status tm_calibrate(const tm_calib_params *p, const tm_calib_batch *b, int n_batches,
                       tm_calib_result **out, tm_err *err) {
    if (!p || !b || !out || n_batches < 1)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "calibrate: no batches");
    *out = NULL;
    const tm_dtype_traits *t = tm_dtype_get(p->spec.code_dtype);
    if (!t || !t->is_code || t->is_float)
        return tm__err_set(err, TM_E_UNSUPPORTED, -1,
                           "calibrate: code dtype %s: only int8, uint8, int4 and uint4 codes",
                           t ? t->name : "?");
    if (p->spec.allow_nonfinite)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "calibrate: allow_nonfinite is not supported");
    int64_t qmin = p->qmin, qmax = p->qmax;
    if (qmin == 0 && qmax == 0) tm_qspec_range(&p->spec, &qmin, &qmax);
    if (qmin < t->qmin || qmax > t->qmax || qmin >= qmax)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "calibrate: code range [%lld, %lld] outside %s's [%lld, %lld] or empty",
                           (long long)qmin, (long long)qmax, t->name, (long long)t->qmin,
                           (long long)t->qmax);
    if (p->n_probes < 0 || (p->n_probes > 0 && !p->probes))
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "calibrate: bad probe list");
    for (int64_t k = 0; k < p->n_probes; k++)
        if (!isfinite(p->probes[k]))
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "calibrate: probe %lld (%g) is not a finite number",
                               (long long)k, p->probes[k]);
    float smin = 0.0f, smax = 0.0f;
    tm_status st = check_samples(b, n_batches, p->cancel, &smin, &smax, err);
    if (st != TM_OK) return st;

    tm_calib *c = NULL;
    st = tm_calib_create(&p->spec, b[0].ndim, b[0].shape, &c, err);
    for (int k = 0; st == TM_OK && k < n_batches; k++) {
        if (cancelled(p->cancel)) {
            st = cancel_err(err);
            break;
        }
        st = tm_calib_update(c, b[k].ndim, b[k].shape, b[k].x, err);
        if (st != TM_OK) tm__err_prefix(err, "calibrate: batch %d", k);
    }
    if (st != TM_OK) {
        tm_calib_free(c);
        return st;
    }
    tm_calib_result *r = tm__calloc(1, sizeof *r);
    int64_t nu = tm_calib_n_params(c);
    float *scale = tm__malloc_n((size_t)nu, sizeof(float));
    int32_t *zp = tm__malloc_n((size_t)nu, sizeof(int32_t));
    int64_t n_pr = 0;
    if (!tm__mul_i64_ok(nu, p->n_probes > 0 ? p->n_probes : 1, &n_pr)) n_pr = -1;
    if (r && n_pr > 0) {
        r->units = tm__calloc((size_t)nu, sizeof *r->units);
        r->probes = tm__calloc((size_t)n_pr, sizeof *r->probes);
    }
    if (!r || !r->units || !r->probes || !scale || !zp) {
        st = tm__err_set(err, TM_E_NOMEM, -1, "calibrate: out of memory for %lld units", (long long)nu);
        goto fail;
    }
    r->observer = p->spec.observer;
    r->qmin = qmin;
    r->qmax = qmax;
    r->n_units = nu;
    r->n_probes = p->n_probes;
    r->sample_min = smin;
    r->sample_max = smax;
    tm_qgran_param_shape(&p->spec.gran, b[0].ndim, b[0].shape, &r->pndim, r->pshape, NULL, NULL);
    for (int64_t u = 0; u < nu; u++) {
        double lo, hi;
        if (cancelled(p->cancel)) {
            st = cancel_err(err);
            goto fail;
        }
        st = tm_calib_range(c, u, &lo, &hi, err);
        if (st == TM_OK)
            st = tm_qparams_from_range_q(&p->spec, qmin, qmax, p->custom_range, lo, hi, &scale[u],
                                         &zp[u], err);
        if (st != TM_OK) {
            tm__err_prefix(err, "calibrate: unit %lld", (long long)u);
            goto fail;
        }
        tm_calib_unit *cu = &r->units[u];
        cu->range_min = lo;
        cu->range_max = hi;
        cu->scale = scale[u];
        cu->zero_point = zp[u];
        cu->rounding_bound = (double)scale[u] / 2.0;
    }
    if ((st = measure(p, b, n_batches, r, scale, zp, qmin, qmax, err)) != TM_OK) goto fail;
    if ((st = run_probes(p, r, qmin, qmax, err)) != TM_OK) goto fail;
    tm_calib_free(c);
    free(scale);
    free(zp);
    *out = r;
    return TM_OK;
fail:
    tm_calib_free(c);
    free(scale);
    free(zp);
    tm_calib_result_free(r);
    return st;
}

tm_status tm_calib_histogram_samples(const tm_calib_batch *b, int n_batches, double lo, double hi,
                                     int n_bins, int64_t *counts, tm_err *err) {
    if (!b || n_batches < 0 || !counts || n_bins < 1 || !isfinite(lo) || !isfinite(hi) || !(lo < hi))
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "calibrate: histogram needs n_bins >= 1 and a finite range lo < hi");
    memset(counts, 0, (size_t)n_bins * sizeof *counts);
    double w = hi - lo;
    for (int k = 0; k < n_batches; k++) {
        int64_t n = batch_n(&b[k]);
        for (int64_t i = 0; i < n; i++) {
            double x = b[k].x[i];
            if (!(x >= lo && x <= hi)) continue;
            int64_t j = (int64_t)floor((x - lo) / w * n_bins);
            if (j >= n_bins) j = n_bins - 1;
            if (j < 0) j = 0;
            counts[j]++;
        }
    }
    return TM_OK;
}
