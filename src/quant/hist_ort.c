/*
** hist_ort.c: ONNX Runtime's HistogramCollector (onnxruntime/python/tools/quantization/
** calibrate.py: collect_value, collect_absolute_value, merge_histogram, compute_percentile,
** get_entropy_threshold; quant_utils.smooth_distribution) and the NumPy / SciPy arithmetic it
** relies on (numpy 1.24 histogram, linspace, pairwise float32 sums; scipy.stats.entropy).
**
** NumPy 1.x type rules matter for bit-exact edges: a float32 scalar meeting a Python number
** is promoted to float64, an array keeps float32 (value-based casting). Comments below name
** the dtype each step runs in.
*/
#include "quant_impl.h"

#include <math.h>

void tm__ort_hist_init(struct tm__ort_hist *h, int absolute) {
    memset(h, 0, sizeof *h);
    h->absolute = absolute;
}

void tm__ort_hist_free(struct tm__ort_hist *h) {
    if (!h) return;
    free(h->hist);
    free(h->edges);
    h->hist = NULL;
    h->edges = NULL;
}

/* numpy.linspace(first, last, n + 1) computed in float64 (start/stop become float64 0-d
** arrays), y[i] = i * step + first, y[n] = last, then cast to float32. */
static void linspace_f32(double first, double last, int64_t n, float *edges) {
    double step = (last - first) / (double)n;
    for (int64_t i = 0; i < n; i++) edges[i] = (float)((double)i * step + first);
    edges[n] = (float)last;
}

/* numpy.histogram(a, n, range=(first, last)) with float32 data and float32 bin edges (the
** uniform-bins path): keep first <= x <= last (compared in float32), index
** ((x - first) / denom) * n in float32, then the +-1 corrections against the edges. Counts
** are added into hist. */
static void np_histogram_uniform(const float *x, int64_t cnt, int64_t n, double first,
                                 double last, double denom, const float *edges, int64_t *hist) {
    float f = (float)first, l = (float)last, d = (float)denom, nb = (float)n;
    for (int64_t i = 0; i < cnt; i++) {
        float v = x[i];
        if (!(v >= f && v <= l)) continue;
        int64_t k = (int64_t)(((v - f) / d) * nb);
        if (k == n) k--;
        if (v < edges[k]) k--;
        if (k + 1 <= n && v >= edges[k + 1] && k != n - 1) k++;
        hist[k]++;
    }
}

/* numpy.histogram with explicit (non-uniform) float32 edges: bin k holds
** edges[k] <= x < edges[k+1], the last bin also x == edges[n]; outside values are dropped. */
static void np_histogram_edges(const float *x, int64_t cnt, int64_t n, const float *edges,
                               int64_t *hist) {
    for (int64_t i = 0; i < cnt; i++) {
        float v = x[i];
        if (!(v >= edges[0] && v <= edges[n])) continue;
        int64_t lo = 0, hi = n; /* first edge > v, minus one */
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (edges[mid] <= v) lo = mid + 1;
            else hi = mid;
        }
        int64_t k = lo - 1;
        if (k >= n) k = n - 1;
        hist[k]++;
    }
}

static tm_status alloc_hist(struct tm__ort_hist *h, int64_t n) {
    int64_t *hist = tm__calloc((size_t)n, sizeof(int64_t));
    float *edges = tm__malloc_n((size_t)n + 1, sizeof(float));
    if (!hist || !edges) {
        free(hist);
        free(edges);
        return TM_E_NOMEM;
    }
    free(h->hist);
    free(h->edges);
    h->hist = hist;
    h->edges = edges;
    h->n_bins = n;
    return TM_OK;
}

/* histogram over the symmetric range [-t, t] (collect_value / merge_histogram). t_is_f32: t is
** a float32 scalar (then the index denominator is the float32 t - (-t)); otherwise a float64
** one (denominator computed in float64, then rounded to float32 by value-based casting). */
static void hist_symmetric(struct tm__ort_hist *h, const float *x, int64_t cnt, int64_t n,
                           double t, int t_is_f32, int64_t *into) {
    double first = -t, last = t;
    if (first == last) { /* numpy: first - 0.5, last + 0.5 (float32 scalar - 0.5 -> float64) */
        first -= 0.5;
        last += 0.5;
        t_is_f32 = 0;
    }
    double denom = t_is_f32 ? (double)((float)last - (float)first) : last - first;
    linspace_f32(first, last, n, h->edges);
    np_histogram_uniform(x, cnt, n, first, last, denom, h->edges, into);
}

static void f32_minmax(const float *x, int64_t n, float *mn, float *mx) {
    float a = x[0], b = x[0];
    for (int64_t i = 1; i < n; i++) {
        if (x[i] < a) a = x[i];
        if (x[i] > b) b = x[i];
    }
    *mn = a;
    *mx = b;
}

/* Python's float floor division a // b (CPython float_floor_div / numpy npy_divmod). */
static double py_floordiv(double a, double b) {
    double mod = fmod(a, b);
    double div = (a - mod) / b;
    if (mod != 0.0 && (b < 0.0) != (mod < 0.0)) div -= 1.0;
    if (div == 0.0) return copysign(0.0, a / b);
    double fl = floor(div);
    if (div - fl > 0.5) fl += 1.0;
    return fl;
}

/* merge_histogram, new_t <= old_t: the batch is binned on the old bins and added. */
static tm_status merge_same(struct tm__ort_hist *h, const float *x, int64_t n) {
    int64_t *tmp = tm__calloc((size_t)h->n_bins, sizeof(int64_t));
    float *edges = tm__malloc_n((size_t)h->n_bins + 1, sizeof(float));
    if (!tmp || !edges) {
        free(tmp);
        free(edges);
        return TM_E_NOMEM;
    }
    float *keep = h->edges; /* ORT returns the old edges; the recomputed ones are equal */
    h->edges = edges;
    hist_symmetric(h, x, n, h->n_bins, h->threshold, h->threshold_is_f32, tmp);
    h->edges = keep;
    for (int64_t i = 0; i < h->n_bins; i++) h->hist[i] += tmp[i];
    free(edges);
    free(tmp);
    return TM_OK;
}

/* merge_histogram, new_t > old_t: rebin over [-t', t'] and add the old counts at offset `at`
** (0 when the old threshold was 0, else half_increased_bins). */
static tm_status merge_rebin(struct tm__ort_hist *h, const float *x, int64_t n, int64_t new_n,
                             double new_t, int new_t_is_f32, int64_t at) {
    int64_t *old = h->hist, old_n = h->n_bins;
    h->hist = NULL;
    tm_status st = alloc_hist(h, new_n);
    if (st != TM_OK) {
        h->hist = old;
        h->n_bins = old_n;
        return st;
    }
    hist_symmetric(h, x, n, new_n, new_t, new_t_is_f32, h->hist);
    for (int64_t i = 0; i < old_n; i++) h->hist[at + i] += old[i];
    free(old);
    h->threshold = new_t;
    h->threshold_is_f32 = new_t_is_f32;
    return TM_OK;
}

static tm_status collect_value(struct tm__ort_hist *h, const float *x, int64_t n, int64_t n_bins) {
    float mn, mx;
    f32_minmax(x, n, &mn, &mx);
    float t = fmaxf(fabsf(mn), fabsf(mx)); /* threshold: a float32 scalar */
    tm_status st;
    if (!h->initialised) {
        if ((st = alloc_hist(h, n_bins)) != TM_OK) return st;
        hist_symmetric(h, x, n, n_bins, t, 1, h->hist);
        h->min_val = mn;
        h->max_val = mx;
        h->threshold = t;
        h->threshold_is_f32 = 1;
        h->initialised = 1;
        return TM_OK;
    }
    if ((double)t <= h->threshold) {
        st = merge_same(h, x, n);
    } else if (h->threshold == 0.0) {
        st = merge_rebin(h, x, n, h->n_bins, t, 1, 0);
    } else {
        /* old_stride = 2 * old_t / old_num_bins is float64 (a Python int meets a numpy scalar);
        ** new_t - old_t stays float32 while both are float32 scalars */
        int64_t old_n = h->n_bins;
        double old_stride = 2.0 * h->threshold / (double)old_n;
        double diff = h->threshold_is_f32 ? (double)(t - (float)h->threshold)
                                          : (double)t - h->threshold;
        int64_t half_inc = (int64_t)(py_floordiv(diff, old_stride) + 1.0);
        double new_t = (double)half_inc * old_stride + h->threshold;
        st = merge_rebin(h, x, n, old_n + 2 * half_inc, new_t, 0, half_inc);
    }
    if (st != TM_OK) return st;
    if (mn < h->min_val) h->min_val = mn;
    if (mx > h->max_val) h->max_val = mx;
    return TM_OK;
}

static tm_status collect_absolute(struct tm__ort_hist *h, const float *x, int64_t n,
                                  int64_t n_bins) {
    float mn, mx;
    f32_minmax(x, n, &mn, &mx);
    float *a = tm__malloc_n((size_t)n, sizeof(float));
    if (!a) return TM_E_NOMEM;
    for (int64_t i = 0; i < n; i++) a[i] = fabsf(x[i]);
    float amin, amax;
    f32_minmax(a, n, &amin, &amax);
    tm_status st = TM_OK;
    if (!h->initialised) {
        /* np.histogram(|x|, bins=n_bins): range = (min|x|, max|x|) as float32 scalars */
        if ((st = alloc_hist(h, n_bins)) == TM_OK) {
            double first = amin, last = amax, denom;
            if (first == last) {
                first -= 0.5;
                last += 0.5;
                denom = last - first;
            } else {
                denom = (double)(amax - amin);
            }
            linspace_f32(first, last, n_bins, h->edges);
            np_histogram_uniform(a, n, n_bins, first, last, denom, h->edges, h->hist);
            h->min_val = mn;
            h->max_val = mx;
            h->initialised = 1;
        }
        free(a);
        return st;
    }
    int64_t old_n = h->n_bins, new_n = old_n;
    float *edges = h->edges;
    if (amax > h->edges[old_n]) {
        /* np.arange(edges[-1] + width, amax + width, width) in float32: length
        ** ceil((stop - start) / width) of float32 values, element i = start + i*delta */
        float width = h->edges[1] - h->edges[0];
        float start = h->edges[old_n] + width, stop = amax + width;
        int64_t extra = (int64_t)ceil((double)((stop - start) / width));
        if (extra < 0) extra = 0;
        new_n = old_n + extra;
        edges = tm__malloc_n((size_t)new_n + 1, sizeof(float));
        if (!edges) {
            free(a);
            return TM_E_NOMEM;
        }
        memcpy(edges, h->edges, (size_t)(old_n + 1) * sizeof(float));
        float delta = (start + width) - start;
        for (int64_t i = 0; i < extra; i++)
            edges[old_n + 1 + i] = i == 0   ? start
                                   : i == 1 ? start + width
                                            : start + (float)i * delta;
    }
    int64_t *hist = tm__calloc((size_t)new_n, sizeof(int64_t));
    if (!hist) {
        if (edges != h->edges) free(edges);
        free(a);
        return TM_E_NOMEM;
    }
    np_histogram_edges(a, n, new_n, edges, hist);
    for (int64_t i = 0; i < old_n; i++) hist[i] += h->hist[i];
    free(h->hist);
    if (edges != h->edges) free(h->edges);
    h->hist = hist;
    h->edges = edges;
    h->n_bins = new_n;
    if (mn < h->min_val) h->min_val = mn;
    if (mx > h->max_val) h->max_val = mx;
    free(a);
    return TM_OK;
}

tm_status tm__ort_hist_update(struct tm__ort_hist *h, const float *x, int64_t n, int64_t n_bins) {
    if (n <= 0) return TM_OK;
    return h->absolute ? collect_absolute(h, x, n, n_bins) : collect_value(h, x, n, n_bins);
}

/* ---------------------------------------------------------------------------------------- */
/* Thresholds                                                                                */
/* ---------------------------------------------------------------------------------------- */

static int64_t searchsorted_left(const double *a, int64_t n, double v) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

tm_status tm_hist_percentile_range(const int64_t *hist, const float *edges, int64_t n_bins,
                                   float min_val, float max_val, double percentile,
                                   int symmetric, float *lo, float *hi) {
    if (!hist || !edges || n_bins < 1 || !lo || !hi || !(percentile >= 0 && percentile <= 100))
        return TM_E_INVALID_ARG;
    int64_t total = 0;
    for (int64_t i = 0; i < n_bins; i++) total += hist[i];
    if (total <= 0) return TM_E_INVALID_ARG;
    double *cdf = tm__malloc_n((size_t)n_bins, sizeof(double));
    if (!cdf) return TM_E_NOMEM;
    double acc = 0.0; /* np.cumsum(hist / total): float64 */
    for (int64_t i = 0; i < n_bins; i++) {
        acc += (double)hist[i] / (double)total;
        cdf[i] = acc;
    }
    float l, r;
    if (symmetric) {
        int64_t idx = searchsorted_left(cdf, n_bins, percentile / 100.0);
        r = edges[idx];
        l = -r;
    } else {
        double cut = (100.0 - percentile) / 200.0;
        r = edges[searchsorted_left(cdf, n_bins, 1.0 - cut)];
        l = edges[searchsorted_left(cdf, n_bins, cut)];
    }
    free(cdf);
    if (l < min_val) l = min_val;
    if (r > max_val) r = max_val;
    *lo = l;
    *hi = r;
    return TM_OK;
}

/* numpy pairwise summation of float32 (loops_utils.h.src, PW_BLOCKSIZE 128). */
static float pairwise_sum_f32(const float *a, int64_t n) {
    if (n < 8) {
        float res = 0.0f;
        for (int64_t i = 0; i < n; i++) res += a[i];
        return res;
    }
    if (n <= 128) {
        float r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        int64_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum_f32(a, n2) + pairwise_sum_f32(a + n2, n - n2);
}

/* quant_utils.smooth_distribution(p, eps=1e-4) into out (float32); 0 when p is all zero. */
static int smooth(const int64_t *p, int64_t n, float *out) {
    int64_t nz = 0;
    for (int64_t i = 0; i < n; i++) nz += p[i] == 0;
    int64_t nnz = n - nz;
    if (nnz == 0) return 0;
    double eps1 = 1e-4 * (double)nz / (double)nnz;
    float add_zero = (float)1e-4, add_nonzero = (float)(-eps1);
    for (int64_t i = 0; i < n; i++) out[i] = (float)p[i] + (p[i] == 0 ? add_zero : add_nonzero);
    return 1;
}

/* scipy.stats.entropy(p, q) on float32 arrays: both normalised by their float32 pairwise sums,
** rel_entr computed in double per element and rounded to float32, summed pairwise. */
static float kl_f32(float *p, float *q, float *vec, int64_t n) {
    float sp = pairwise_sum_f32(p, n), sq = pairwise_sum_f32(q, n);
    for (int64_t i = 0; i < n; i++) {
        float x = p[i] / sp, y = q[i] / sq;
        double v;
        if (x > 0 && y > 0) v = (double)x * log((double)x / (double)y);
        else if (x == 0 && y >= 0) v = 0.0;
        else v = INFINITY;
        vec[i] = (float)v;
    }
    return pairwise_sum_f32(vec, n);
}

/* Scratch of the entropy search, sized for the widest slice (n_bins entries). */
struct kl_work {
    int64_t *p, *q, *qb, *prefix;
    float   *pf, *qf, *vec;
};

/* KL divergence of candidate i: p = hist[start:end) with the outside mass on its end bins,
** q = p's slice merged into nq bins and spread back (ORT's truncating int64 spread). */
static float entropy_candidate(const int64_t *hist, int64_t n_bins, int64_t start, int64_t end,
                               int64_t nq, struct kl_work *w) {
    int64_t len = end - start, merged = len / nq;
    for (int64_t j = 0; j < len; j++) w->p[j] = hist[start + j];
    w->p[0] += w->prefix[start];
    w->p[len - 1] += w->prefix[n_bins] - w->prefix[end];
    for (int64_t k = 0; k < nq; k++) /* merged bins come from the slice, not from p */
        w->qb[k] = w->prefix[start + k * merged + merged] - w->prefix[start + k * merged];
    w->qb[nq - 1] += w->prefix[end] - w->prefix[start + nq * merged];
    memset(w->q, 0, (size_t)len * sizeof *w->q);
    for (int64_t k = 0; k < nq; k++) {
        int64_t nrm = 0;
        for (int64_t j = k * merged; j < k * merged + merged; j++) nrm += w->p[j] != 0;
        if (nrm == 0) continue;
        /* ORT quirk: q is int64, so the spread value is truncated, and it is written to every
        ** bin of the block (zero bins of p included) */
        int64_t v = (int64_t)((double)w->qb[k] / (double)nrm);
        for (int64_t j = k * merged; j < k * merged + merged; j++) w->q[j] = v;
    }
    if (!smooth(w->p, len, w->pf) || !smooth(w->q, len, w->qf)) return INFINITY;
    return kl_f32(w->pf, w->qf, w->vec, len);
}

tm_status tm_hist_entropy_range(const int64_t *hist, const float *edges, int64_t n_bins,
                                float min_val, float max_val, int n_quantized_bins, float *lo,
                                float *hi) {
    if (!hist || !edges || !lo || !hi || n_quantized_bins < 2 || n_bins < n_quantized_bins)
        return TM_E_INVALID_ARG;
    int64_t zero = n_bins / 2, half_q = n_quantized_bins / 2, nq = n_quantized_bins;
    size_t cap = (size_t)n_bins + 1;
    struct kl_work w = {
        .p = tm__malloc_n(cap, sizeof(int64_t)), .q = tm__malloc_n(cap, sizeof(int64_t)),
        .qb = tm__malloc_n((size_t)nq, sizeof(int64_t)),
        .prefix = tm__malloc_n(cap, sizeof(int64_t)),
        .pf = tm__malloc_n(cap, sizeof(float)), .qf = tm__malloc_n(cap, sizeof(float)),
        .vec = tm__malloc_n(cap, sizeof(float))};
    tm_status st = TM_E_NOMEM;
    if (w.p && w.q && w.qb && w.prefix && w.pf && w.qf && w.vec) {
        w.prefix[0] = 0;
        for (int64_t i = 0; i < n_bins; i++) w.prefix[i + 1] = w.prefix[i] + hist[i];
        float best_kl = INFINITY;
        int64_t best_start = -1, best_end = -1;
        for (int64_t i = half_q; i <= zero; i++) {
            int64_t start = zero - i, end = zero + i + 1 <= n_bins ? zero + i + 1 : n_bins;
            float kl = entropy_candidate(hist, n_bins, start, end, nq, &w);
            if (best_start < 0 || kl < best_kl) { /* np.argmin: the first minimum */
                best_kl = kl;
                best_start = start;
                best_end = end;
            }
        }
        float l = edges[best_start], r = edges[best_end];
        *lo = l < min_val ? min_val : l;
        *hi = r > max_val ? max_val : r;
        st = TM_OK;
    }
    free(w.p);
    free(w.q);
    free(w.qb);
    free(w.prefix);
    free(w.pf);
    free(w.qf);
    free(w.vec);
    return st;
}
