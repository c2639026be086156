/*
** observer.c: range observers, stateless (tm_observe_range, one param unit, one batch) and
** stateful over batches (tm_calib_*), and the MSE clipping search
** [docs/quantization.md "Observers"].
**
** MINMAX      torch MinMaxObserver / PerChannelMinMaxObserver: running min and max (float32).
** EMA_MINMAX  torch MovingAverage(PerChannel)MinMaxObserver: the first batch sets min/max,
**             later ones min += c * (batch_min - min) in float32 with c rounded to float32.
** HISTOGRAM   torch 1.13 HistogramObserver (hist_torch.c).
** PERCENTILE, ENTROPY  ONNX Runtime HistogramCollector (hist_ort.c).
** MSE         ours: a grid of clipping ratios, the one with the least squared error wins.
*/
#include "kernels.h"

#include <float.h>
#include <math.h>
#include <string.h>

struct tm_calib {
    tm_qspec         spec;
    struct tm__ggeom geo;
    int64_t          n_units;
    int64_t          n_batches;
    float           *min_val, *max_val;     /* [n_units]: MINMAX, EMA, and every kind's record */
    float           *bmin, *bmax;           /* [n_units] scratch: this batch's min / max       */
    int64_t         *unit_off;              /* [n_units + 1]: gather layout of one batch       */
    float           *gather;                /* [gather_cap] values grouped by unit             */
    int64_t          gather_cap;
    int              pndim;                 /* param shape: every batch must give the same     */
    int64_t          pshape[TM_MAX_DIMS];
    int64_t         *fill;                  /* [n_units] scratch                               */
    struct tm__torch_hist *th;              /* HISTOGRAM: [n_units]                            */
    struct tm__ort_hist   *oh;              /* PERCENTILE/ENTROPY: [n_units]                   */
    float          **kept;                  /* MSE: every value seen, per unit                 */
    int64_t         *n_kept, *cap_kept;
};

static tm_status check_observer(const tm_observer *o, tm_err *err) {
    switch (o->kind) {
    case TM_OBS_MINMAX:
    case TM_OBS_MSE:
        return TM_OK;
    case TM_OBS_EMA_MINMAX:
        if (!(o->averaging_constant >= 0.0 && o->averaging_constant <= 1.0))
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "observer: averaging_constant %g outside [0, 1]",
                               o->averaging_constant);
        return TM_OK;
    case TM_OBS_HISTOGRAM:
        if (o->n_bins < 1 || o->n_bins > (1 << 24))
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "observer: n_bins %d outside 1..2^24",
                               o->n_bins);
        return TM_OK;
    case TM_OBS_PERCENTILE:
        if (!(o->percentile >= 0.0 && o->percentile <= 100.0))
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "observer: percentile %g outside [0, 100]", o->percentile);
        /* fallthrough */
    case TM_OBS_ENTROPY:
        if (o->n_bins < 2 || o->n_bins > (1 << 24))
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "observer: n_bins %d outside 2..2^24",
                               o->n_bins);
        if (o->kind == TM_OBS_ENTROPY &&
            (o->n_quantized_bins < 2 || o->n_quantized_bins > o->n_bins))
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "observer: n_quantized_bins %d outside 2..n_bins",
                               o->n_quantized_bins);
        return TM_OK;
    case TM_OBS_COUNT:
        break;
    }
    return tm__err_set(err, TM_E_INVALID_ARG, -1, "observer: unknown kind %d", (int)o->kind);
}

static tm_status check_values(const float *v, int64_t n, tm_err *err) {
    if (!tm__any_nonfinite(v, n)) return TM_OK;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(v[i]))
            return tm__err_set(err, TM_E_NONFINITE, -1,
                               "observer: non-finite value %s at index %lld",
                               v[i] != v[i] ? "NaN" : v[i] > 0 ? "+inf" : "-inf", (long long)i);
    }
    return TM_OK;
}

/* The min/max of spec's kernel set. */
static int minmax_f32(const tm_qspec *spec, const float *v, int64_t n, float *mn, float *mx) {
    return tm__kernels_or_auto(spec->kernels)->minmax(v, n, mn, mx);
}

/* ---------------------------------------------------------------------------------------- */
/* MSE                                                                                       */
/* ---------------------------------------------------------------------------------------- */

/* Clipping ratios r_k = 1 - k/100, k = 0..99 (1.00, 0.99, ..., 0.01): the candidate range is
** [r*lo, r*hi]; the first ratio with the least sum of squared errors wins. */
#define MSE_GRID 100

/* Sum of (x - deq)^2 over the unit for one candidate (s, zp): the same codes and dequantized
** values as tm_quantize_f32 / tm_dequantize (the run kernels), float64 sum in element order. */
static double unit_sq_error(const tm_qspec *spec, int64_t qmin, int64_t qmax, float s,
                            int32_t zp, const float *v, int64_t n) {
    enum { CHUNK = 256 };
    const tm_dtype_traits *t = tm_dtype_get(spec->code_dtype);
    const tm_kernels *k = tm__kernels_or_auto(spec->kernels);
    struct tm__qseg seg = {.scale = s, .inv_scale = 1.0f / s,
                           .use_mul = spec->convention == TM_CONV_TORCH, .zp = zp,
                           .lo = (float)(qmin - zp), .hi = (float)(qmax - zp),
                           .code_signed = t->is_signed};
    uint8_t codes[CHUNK];
    float deq[CHUNK];
    double sum = 0.0;
    for (int64_t off = 0; off < n; off += CHUNK) {
        int64_t m = n - off < CHUNK ? n - off : CHUNK;
        const float *x = v + off;
        if (t->is_float) {
            for (int64_t i = 0; i < m; i++) {
                float u = seg.use_mul ? x[i] * seg.inv_scale : x[i] / s;
                deq[i] = spec->code_dtype == TM_F8_E4M3 ? tm_e4m3_to_f32(tm_f32_to_e4m3(u, 1)) * s
                                                        : tm_e5m2_to_f32(tm_f32_to_e5m2(u, 1)) * s;
            }
        } else {
            k->quant_int(x, m, &seg, codes);
            k->dequant_int(codes, m, &seg, deq);
        }
        for (int64_t i = 0; i < m; i++) {
            double e = (double)x[i] - (double)deq[i];
            sum += e * e;
        }
    }
    return sum;
}

tm_status tm__mse_range(const tm_qspec *spec, const float *v, int64_t n, double *lo, double *hi,
                        tm_err *err) {
    float mn, mx;
    minmax_f32(spec, v, n, &mn, &mx);
    int64_t qmin, qmax;
    tm_qspec_range(spec, &qmin, &qmax);
    double best = INFINITY, blo = mn, bhi = mx;
    for (int k = 0; k < MSE_GRID; k++) {
        double r = 1.0 - (double)k / MSE_GRID;
        double clo = (double)(float)(r * mn), chi = (double)(float)(r * mx);
        float s;
        int32_t zp = 0;
        tm_status st = tm_qparams_from_range(spec, clo, chi, &s, &zp, err);
        if (st != TM_OK) return st;
        double e = unit_sq_error(spec, qmin, qmax, s, zp, v, n);
        if (e < best) {
            best = e;
            blo = clo;
            bhi = chi;
        }
    }
    *lo = blo;
    *hi = bhi;
    return TM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Stateless                                                                                 */
/* ---------------------------------------------------------------------------------------- */

static tm_status observe_finite(const tm_qspec *spec, const float *vals, int64_t n, double *lo,
                                double *hi, tm_err *err);

static int64_t count_nonfinite(const float *v, int64_t n) {
    if (!tm__any_nonfinite(v, n)) return 0;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += !isfinite(v[i]);
    return k;
}

/* A percentile or KL search over a histogram of one distinct value (a 1x1 tensor, a constant
** unit) can return a range whose ends are out of order (the histogram's width is then an
** artefact of its binning, not of the data): fall back to the data's own [min, max], which the
** scale rules turn into a finite documented scale (docs/quantization.md, constant units). */
static void ort_range_or_minmax(float *l, float *r, float mn, float mx) {
    if (*l <= *r) return;
    *l = mn;
    *r = mx;
}

tm_status tm_observe_range(const tm_qspec *spec, const float *vals, int64_t n, double *lo,
                           double *hi, tm_err *err) {
    if (!spec || !vals || !lo || !hi || n < 1)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "observer: no values (n = %lld)",
                           (long long)n);
    tm_status st = check_observer(&spec->observer, err);
    if (st != TM_OK) return st;
    if (!spec->allow_nonfinite) {
        if (spec->observer.kind == TM_OBS_MINMAX || spec->observer.kind == TM_OBS_EMA_MINMAX) {
            /* one pass: the range and the finiteness check together */
            float mn, mx;
            if (minmax_f32(spec, vals, n, &mn, &mx)) return check_values(vals, n, err);
            *lo = mn;
            *hi = mx;
            return TM_OK;
        }
        if ((st = check_values(vals, n, err)) != TM_OK) return st;
        return observe_finite(spec, vals, n, lo, hi, err);
    }
    if (count_nonfinite(vals, n) == 0) return observe_finite(spec, vals, n, lo, hi, err);
    /* allow_nonfinite: NaN/Inf do not take part in the range */
    float *f = tm__malloc_n((size_t)n, sizeof(float));
    if (!f) return tm__err_set(err, TM_E_NOMEM, -1, "observer: out of memory");
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(vals[i])) f[m++] = vals[i];
    if (m == 0) {
        *lo = *hi = 0.0; /* no finite value: the all-zero rule */
    } else {
        st = observe_finite(spec, f, m, lo, hi, err);
    }
    free(f);
    return st;
}

static tm_status observe_finite(const tm_qspec *spec, const float *vals, int64_t n, double *lo,
                                double *hi, tm_err *err) {
    tm_status st;
    const tm_observer *o = &spec->observer;
    float mn, mx;
    switch (o->kind) {
    case TM_OBS_MINMAX:
    case TM_OBS_EMA_MINMAX:
        minmax_f32(spec, vals, n, &mn, &mx);
        *lo = mn;
        *hi = mx;
        return TM_OK;
    case TM_OBS_MSE:
        return tm__mse_range(spec, vals, n, lo, hi, err);
    case TM_OBS_HISTOGRAM: {
        struct tm__torch_hist h;
        if (tm__torch_hist_init(&h, o->n_bins) != TM_OK)
            return tm__err_set(err, TM_E_NOMEM, -1, "observer: out of memory");
        st = tm__torch_hist_update(&h, vals, n);
        float nmin = 0, nmax = 0;
        if (st == TM_OK) {
            /* dst_nbins = 2 ** torch.iinfo(dtype).bits: 256 for 8-bit codes */
            int dst = 1 << tm_dtype_get(spec->code_dtype)->bits;
            st = tm_hist_l2_search(h.hist, h.bins, h.min_val, h.max_val, dst, &nmin, &nmax, NULL,
                                   NULL);
        }
        tm__torch_hist_free(&h);
        if (st != TM_OK) return tm__err_set(err, st, -1, "observer: histogram search failed");
        *lo = nmin;
        *hi = nmax;
        return TM_OK;
    }
    case TM_OBS_PERCENTILE:
    case TM_OBS_ENTROPY: {
        struct tm__ort_hist h;
        tm__ort_hist_init(&h, o->kind == TM_OBS_PERCENTILE && spec->symmetric);
        st = tm__ort_hist_update(&h, vals, n, o->n_bins);
        float l = 0, r = 0;
        if (st == TM_OK) {
            if (o->kind == TM_OBS_PERCENTILE)
                st = tm_hist_percentile_range(h.hist, h.edges, h.n_bins, h.min_val, h.max_val,
                                              o->percentile, spec->symmetric, &l, &r);
            else
                st = tm_hist_entropy_range(h.hist, h.edges, h.n_bins, h.min_val, h.max_val,
                                           o->n_quantized_bins, &l, &r);
        }
        if (st == TM_OK) ort_range_or_minmax(&l, &r, h.min_val, h.max_val);
        tm__ort_hist_free(&h);
        if (st != TM_OK) return tm__err_set(err, st, -1, "observer: ORT histogram failed");
        *lo = l;
        *hi = r;
        return TM_OK;
    }
    case TM_OBS_COUNT:
        break;
    }
    return tm__err_set(err, TM_E_INVALID_ARG, -1, "observer: unknown kind");
}

/* ---------------------------------------------------------------------------------------- */
/* Stateful                                                                                  */
/* ---------------------------------------------------------------------------------------- */

void tm_calib_free(tm_calib *c) {
    if (!c) return;
    if (c->th)
        for (int64_t u = 0; u < c->n_units; u++) tm__torch_hist_free(&c->th[u]);
    if (c->oh)
        for (int64_t u = 0; u < c->n_units; u++) tm__ort_hist_free(&c->oh[u]);
    if (c->kept)
        for (int64_t u = 0; u < c->n_units; u++) free(c->kept[u]);
    free(c->th);
    free(c->oh);
    free(c->kept);
    free(c->n_kept);
    free(c->cap_kept);
    free(c->min_val);
    free(c->max_val);
    free(c->bmin);
    free(c->bmax);
    free(c->unit_off);
    free(c->gather);
    free(c->fill);
    free(c);
}

int64_t tm_calib_n_params(const tm_calib *c) { return c ? c->n_units : 0; }

static int needs_gather(tm_observer_kind k) {
    return k == TM_OBS_HISTOGRAM || k == TM_OBS_PERCENTILE || k == TM_OBS_ENTROPY ||
           k == TM_OBS_MSE;
}

tm_status tm_calib_create(const tm_qspec *spec, int ndim, const int64_t *shape, tm_calib **out,
                          tm_err *err) {
    if (!spec || !out) return tm__err_set(err, TM_E_INVALID_ARG, -1, "calib: NULL argument");
    *out = NULL;
    tm_status st = check_observer(&spec->observer, err);
    if (st != TM_OK) return st;
    const tm_dtype_traits *t = tm_dtype_get(spec->code_dtype);
    if (!t || !t->is_code)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "calib: %s is not a code dtype",
                           t ? t->name : "?");
    tm_calib *c = tm__calloc(1, sizeof *c);
    if (!c) return tm__err_set(err, TM_E_NOMEM, -1, "calib: out of memory");
    c->spec = *spec;
    if ((st = tm__ggeom_init(&c->geo, &spec->gran, ndim, shape, err)) != TM_OK) {
        tm_calib_free(c);
        return st;
    }
    int64_t nu = c->n_units = c->geo.n_params;
    tm_qgran_param_shape(&spec->gran, ndim, shape, &c->pndim, c->pshape, NULL, NULL);
    size_t n_u = (size_t)(nu > 0 ? nu : 1);
    c->min_val = tm__malloc_n(n_u, sizeof(float));
    c->max_val = tm__malloc_n(n_u, sizeof(float));
    c->bmin = tm__malloc_n(n_u, sizeof(float));
    c->bmax = tm__malloc_n(n_u, sizeof(float));
    int ok = c->min_val && c->max_val && c->bmin && c->bmax;
    tm_observer_kind k = spec->observer.kind;
    if (ok && needs_gather(k)) {
        c->unit_off = tm__calloc(n_u + 1, sizeof(int64_t));
        c->fill = tm__calloc(n_u, sizeof(int64_t));
        ok = c->unit_off && c->fill;
    }
    if (ok && k == TM_OBS_HISTOGRAM) {
        c->th = tm__calloc(n_u, sizeof *c->th);
        ok = c->th != NULL;
        for (int64_t u = 0; ok && u < nu; u++)
            ok = tm__torch_hist_init(&c->th[u], spec->observer.n_bins) == TM_OK;
    }
    if (ok && (k == TM_OBS_PERCENTILE || k == TM_OBS_ENTROPY)) {
        c->oh = tm__calloc(n_u, sizeof *c->oh);
        ok = c->oh != NULL;
        for (int64_t u = 0; ok && u < nu; u++)
            tm__ort_hist_init(&c->oh[u], k == TM_OBS_PERCENTILE && spec->symmetric);
    }
    if (ok && k == TM_OBS_MSE) {
        c->kept = tm__calloc(n_u, sizeof *c->kept);
        c->n_kept = tm__calloc(n_u, sizeof(int64_t));
        c->cap_kept = tm__calloc(n_u, sizeof(int64_t));
        ok = c->kept && c->n_kept && c->cap_kept;
    }
    if (!ok) {
        tm_calib_free(c);
        return tm__err_set(err, TM_E_NOMEM, -1, "calib: out of memory for %lld units",
                           (long long)nu);
    }
    for (int64_t u = 0; u < nu; u++) {
        c->min_val[u] = INFINITY;
        c->max_val[u] = -INFINITY;
    }
    *out = c;
    return TM_OK;
}

/* This batch's per-unit min/max, by runs. */
static void batch_minmax(tm_calib *c, const struct tm__ggeom *g, const float *x) {
    for (int64_t u = 0; u < c->n_units; u++) {
        c->bmin[u] = INFINITY;
        c->bmax[u] = -INFINITY;
    }
    for (int64_t f = 0; f < g->n_elems;) {
        int64_t run, p = tm__ggeom_param(g, f, &run);
        float mn, mx;
        minmax_f32(&c->spec, x + f, run, &mn, &mx);
        if (mn < c->bmin[p]) c->bmin[p] = mn;
        if (mx > c->bmax[p]) c->bmax[p] = mx;
        f += run;
    }
}

/* Group this batch's values by unit: unit u's values, in element order, at
** gather[unit_off[u] .. unit_off[u+1]). */
static tm_status gather_units(tm_calib *c, const struct tm__ggeom *g, const float *x) {
    if (g->n_elems > c->gather_cap) {
        float *p = realloc(c->gather, (size_t)g->n_elems * sizeof(float));
        if (!p) return TM_E_NOMEM;
        c->gather = p;
        c->gather_cap = g->n_elems;
    }
    memset(c->unit_off, 0, (size_t)(c->n_units + 1) * sizeof *c->unit_off);
    memset(c->fill, 0, (size_t)c->n_units * sizeof *c->fill);
    for (int64_t f = 0; f < g->n_elems;) {
        int64_t run, p = tm__ggeom_param(g, f, &run);
        c->unit_off[p + 1] += run;
        f += run;
    }
    for (int64_t u = 0; u < c->n_units; u++) c->unit_off[u + 1] += c->unit_off[u];
    for (int64_t f = 0; f < g->n_elems;) {
        int64_t run, p = tm__ggeom_param(g, f, &run);
        float *base = c->gather + c->unit_off[p];
        if (!c->spec.allow_nonfinite) {
            memcpy(base + c->fill[p], x + f, (size_t)run * sizeof(float));
            c->fill[p] += run;
        } else { /* non-finite values are left out; fill[u] counts what was kept */
            for (int64_t i = 0; i < run; i++)
                if (isfinite(x[f + i])) base[c->fill[p]++] = x[f + i];
        }
        f += run;
    }
    return TM_OK;
}

static tm_status keep_values(tm_calib *c, int64_t u, const float *v, int64_t n) {
    if (n == 0) return TM_OK;
    if (c->n_kept[u] + n > c->cap_kept[u]) {
        int64_t cap = c->cap_kept[u] ? c->cap_kept[u] : 64;
        while (cap < c->n_kept[u] + n) cap *= 2;
        float *p = realloc(c->kept[u], (size_t)cap * sizeof(float));
        if (!p) return TM_E_NOMEM;
        c->kept[u] = p;
        c->cap_kept[u] = cap;
    }
    memcpy(c->kept[u] + c->n_kept[u], v, (size_t)n * sizeof(float));
    c->n_kept[u] += n;
    return TM_OK;
}

tm_status tm_calib_update(tm_calib *c, int ndim, const int64_t *shape, const float *x,
                          tm_err *err) {
    if (!c) return tm__err_set(err, TM_E_INVALID_ARG, -1, "calib: NULL argument");
    struct tm__ggeom g;
    tm_status st = tm__ggeom_init(&g, &c->spec.gran, ndim, shape, err);
    if (st != TM_OK) return st;
    int pnd;
    int64_t ps[TM_MAX_DIMS];
    tm_qgran_param_shape(&c->spec.gran, ndim, shape, &pnd, ps, NULL, NULL);
    int same = pnd == c->pndim && g.n_params == c->n_units;
    for (int i = 0; same && i < pnd; i++) same = ps[i] == c->pshape[i];
    if (!same)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "calib: this batch's shape gives another param layout (%lld params, "
                           "%lld expected)", (long long)g.n_params, (long long)c->n_units);
    if (g.n_elems == 0) return TM_OK;
    if (!x) return tm__err_set(err, TM_E_INVALID_ARG, -1, "calib: NULL batch");
    if (!c->spec.allow_nonfinite && (st = check_values(x, g.n_elems, err)) != TM_OK) return st;
    batch_minmax(c, &g, x);
    float ac = (float)c->spec.observer.averaging_constant;
    tm_observer_kind k = c->spec.observer.kind;
    for (int64_t u = 0; u < c->n_units; u++) {
        if (c->bmin[u] > c->bmax[u]) continue; /* no finite value of this unit in the batch */
        int first = c->min_val[u] > c->max_val[u]; /* torch: min_val == inf, max_val == -inf */
        if (k == TM_OBS_EMA_MINMAX && !first) {
            c->min_val[u] = c->min_val[u] + ac * (c->bmin[u] - c->min_val[u]);
            c->max_val[u] = c->max_val[u] + ac * (c->bmax[u] - c->max_val[u]);
        } else {
            c->min_val[u] = fminf(c->min_val[u], c->bmin[u]);
            c->max_val[u] = fmaxf(c->max_val[u], c->bmax[u]);
        }
    }
    if (needs_gather(k)) {
        st = gather_units(c, &g, x);
        for (int64_t u = 0; u < c->n_units && st == TM_OK; u++) {
            const float *v = c->gather + c->unit_off[u];
            int64_t n = c->fill[u];
            if (k == TM_OBS_HISTOGRAM)
                st = tm__torch_hist_update(&c->th[u], v, n);
            else if (k == TM_OBS_MSE)
                st = keep_values(c, u, v, n);
            else
                st = tm__ort_hist_update(&c->oh[u], v, n, c->spec.observer.n_bins);
        }
        if (st != TM_OK)
            return tm__err_set(err, st, -1, "calib: update failed (%s)", tm_status_str(st));
    }
    c->n_batches++;
    return TM_OK;
}

tm_status tm_calib_range(const tm_calib *c, int64_t unit, double *lo, double *hi, tm_err *err) {
    if (!c || unit < 0 || unit >= c->n_units || !lo || !hi)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "calib: unit %lld out of range",
                           (long long)unit);
    if (c->n_batches == 0)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "calib: nothing observed yet");
    const tm_observer *o = &c->spec.observer;
    tm_status st = TM_OK;
    if (c->min_val[unit] > c->max_val[unit]) { /* no finite value seen (allow_nonfinite) */
        *lo = *hi = 0.0;
        return TM_OK;
    }
    switch (o->kind) {
    case TM_OBS_MINMAX:
    case TM_OBS_EMA_MINMAX:
        *lo = c->min_val[unit];
        *hi = c->max_val[unit];
        return TM_OK;
    case TM_OBS_MSE:
        return tm__mse_range(&c->spec, c->kept[unit], c->n_kept[unit], lo, hi, err);
    case TM_OBS_HISTOGRAM: {
        const struct tm__torch_hist *h = &c->th[unit];
        float a, b;
        int bits = tm_dtype_get(c->spec.code_dtype)->bits;
        st = tm_hist_l2_search(h->hist, h->bins, h->min_val, h->max_val, 1 << bits, &a, &b, NULL,
                               NULL);
        *lo = a;
        *hi = b;
        break;
    }
    case TM_OBS_PERCENTILE:
    case TM_OBS_ENTROPY: {
        const struct tm__ort_hist *h = &c->oh[unit];
        float a = 0, b = 0;
        if (o->kind == TM_OBS_PERCENTILE)
            st = tm_hist_percentile_range(h->hist, h->edges, h->n_bins, h->min_val, h->max_val,
                                          o->percentile, c->spec.symmetric, &a, &b);
        else
            st = tm_hist_entropy_range(h->hist, h->edges, h->n_bins, h->min_val, h->max_val,
                                       o->n_quantized_bins, &a, &b);
        if (st == TM_OK) ort_range_or_minmax(&a, &b, h->min_val, h->max_val);
        *lo = a;
        *hi = b;
        break;
    }
    case TM_OBS_COUNT:
        st = TM_E_INVALID_ARG;
        break;
    }
    if (st != TM_OK)
        return tm__err_set(err, st, -1, "calib: range of unit %lld failed", (long long)unit);
    return TM_OK;
}

tm_status tm_calib_qparams(const tm_calib *c, float *scale, int32_t *zero_point, tm_err *err) {
    if (!c || !scale) return tm__err_set(err, TM_E_INVALID_ARG, -1, "calib: NULL argument");
    for (int64_t u = 0; u < c->n_units; u++) {
        double lo, hi;
        tm_status st = tm_calib_range(c, u, &lo, &hi, err);
        if (st == TM_OK)
            st = tm_qparams_from_range(&c->spec, lo, hi, &scale[u],
                                       zero_point ? &zero_point[u] : NULL, err);
        if (st != TM_OK) {
            tm__err_prefix(err, "unit %lld", (long long)u);
            return st;
        }
    }
    return TM_OK;
}

tm_status tm_calib_minmax(const tm_calib *c, int64_t unit, float *min_val, float *max_val) {
    if (!c || unit < 0 || unit >= c->n_units) return TM_E_INVALID_ARG;
    float mn = c->min_val[unit], mx = c->max_val[unit];
    if (c->th) { /* torch's histogram observer widens max_val when it combines batches */
        mn = c->th[unit].min_val;
        mx = c->th[unit].max_val;
    }
    if (min_val) *min_val = mn;
    if (max_val) *max_val = mx;
    return TM_OK;
}

tm_status tm_calib_histogram(const tm_calib *c, int64_t unit, int64_t *n_bins, double *hist,
                             float *edges) {
    if (!c || unit < 0 || unit >= c->n_units || !n_bins) return TM_E_INVALID_ARG;
    if (c->th) {
        const struct tm__torch_hist *h = &c->th[unit];
        *n_bins = h->bins;
        if (hist)
            for (int i = 0; i < h->bins; i++) hist[i] = h->hist[i];
        return TM_OK;
    }
    if (c->oh) {
        const struct tm__ort_hist *h = &c->oh[unit];
        *n_bins = h->n_bins;
        if (hist)
            for (int64_t i = 0; i < h->n_bins; i++) hist[i] = (double)h->hist[i];
        if (edges && h->edges) memcpy(edges, h->edges, (size_t)(h->n_bins + 1) * sizeof(float));
        return TM_OK;
    }
    return TM_E_INVALID_ARG;
}
