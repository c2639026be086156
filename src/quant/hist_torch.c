/*
** hist_torch.c: torch 1.13 HistogramObserver, reproduced operation by operation
** (torch/ao/quantization/observer.py at v1.13: forward, _adjust_min_max, _combine_histograms,
** _compute_quantization_error, _non_linear_param_search; torch.histc on CPU:
** aten/src/ATen/native/cpu/HistogramKernel.cpp, linear interpolation without local search).
**
** Quirks kept on purpose (../shared/vectors/README.md "Where the references disagree"):
**  - histc is called with min=int(min_val), max=int(max_val): the range is truncated toward
**    zero, values outside it are dropped; when both truncate to the same integer histc falls
**    back to the batch's own min/max (and to +-1 around a constant).
**  - The L2 search steps the quantile bounds by 1e-5 and stops at the first increase.
** Arithmetic follows torch's dtypes: float32 tensors are float32 here, Python floats are
** double, and a Python float meeting a float32 tensor is rounded to float32 first. One
** deliberate difference: torch sums the per-bin errors with a vectorized float32 reduction;
** we sum in double (the vectors allow one bin of difference for that reason).
*/
#include "quant_impl.h"

#include <math.h>

tm_status tm__torch_hist_init(struct tm__torch_hist *h, int bins) {
    memset(h, 0, sizeof *h);
    if (bins < 1) return TM_E_INVALID_ARG;
    h->bins = bins;
    h->upsample_rate = 128;
    h->min_val = INFINITY;
    h->max_val = -INFINITY;
    h->hist = tm__calloc((size_t)bins, sizeof(float));
    return h->hist ? TM_OK : TM_E_NOMEM;
}

void tm__torch_hist_free(struct tm__torch_hist *h) {
    if (!h) return;
    free(h->hist);
    h->hist = NULL;
}

/* torch.histc(x, bins, min=lo, max=hi) accumulated into out (float32 counts). */
static void histc(const float *x, int64_t n, int bins, double lo, double hi, float *out) {
    if (lo == hi && n > 0) {
        float a = x[0], b = x[0];
        for (int64_t i = 1; i < n; i++) {
            if (x[i] < a) a = x[i];
            if (x[i] > b) b = x[i];
        }
        lo = a;
        hi = b;
    }
    if (lo == hi) {
        lo -= 1;
        hi += 1;
    }
    float left = (float)lo, right = (float)hi; /* linspace's first and last edge */
    float width = right - left, nb = (float)bins;
    for (int64_t i = 0; i < n; i++) {
        float e = x[i];
        if (!(e >= left && e <= right)) continue;
        int64_t pos = (int64_t)((e - left) * nb / width);
        if (pos == bins) pos--;
        out[pos] += 1.0f;
    }
}

/* python int(float): truncation toward zero */
static double py_int(float v) { return trunc((double)v); }

/* _combine_histograms(orig_hist=comb, new_hist=old, ...): upsample old by `up`, place it at
** start_idx on a grid of bins*dr, integrate in double, downsample by dr, add to comb. The
** integral is computed in one pass over the upsampled values (zeros contribute nothing), so
** the bins*dr grid is never materialised; the double running sum is the same sequence of
** additions as torch.cumsum(dtype=double). */
static void combine(float *comb, const float *old, int bins, int64_t up, int64_t dr,
                    int64_t start_idx) {
    double run = 0.0, prev = 0.0;
    int64_t pos = 0, total_up = (int64_t)bins * up;
    for (int k = 0; k < bins; k++) {
        int64_t end = ((int64_t)k + 1) * dr - start_idx; /* upsampled index bound */
        if (end > total_up) end = total_up;
        while (pos < end) {
            run += (double)old[pos / up];
            pos++;
        }
        /* shifted_integral_histogram is a float32 tensor: the previous integral is rounded */
        double interp = (run - (k ? (double)(float)prev : 0.0)) / (double)up;
        comb[k] = comb[k] + (float)interp;
        prev = run;
    }
}

tm_status tm__torch_hist_update(struct tm__torch_hist *h, const float *x, int64_t n) {
    if (n <= 0) return TM_OK;
    float bmin = x[0], bmax = x[0];
    for (int64_t i = 1; i < n; i++) {
        if (x[i] < bmin) bmin = x[i];
        if (x[i] > bmax) bmax = x[i];
    }
    int same = h->min_val == h->max_val;
    int uninit = h->min_val == INFINITY && h->max_val == -INFINITY;
    if (uninit || same) {
        h->min_val = bmin;
        h->max_val = bmax;
        memset(h->hist, 0, (size_t)h->bins * sizeof(float));
        histc(x, n, h->bins, py_int(bmin), py_int(bmax), h->hist);
        return TM_OK;
    }
    float cmin = fminf(bmin, h->min_val), cmax = fmaxf(bmax, h->max_val);
    /* _adjust_min_max */
    float hbw = (h->max_val - h->min_val) / (float)((int64_t)h->bins * h->upsample_rate);
    float span = (float)h->bins * hbw;
    int64_t dr = (int64_t)ceilf((cmax - cmin) / span);
    float e = (float)dr * span - (cmax - cmin);
    cmax = cmax + e;
    int64_t start_idx = (int64_t)rintf((h->min_val - cmin) / hbw);
    if (dr < 1 || dr > ((int64_t)1 << 40)) return TM_E_LIMIT;
    float *comb = tm__calloc((size_t)h->bins, sizeof(float));
    if (!comb) return TM_E_NOMEM;
    histc(x, n, h->bins, py_int(cmin), py_int(cmax), comb);
    if (cmin == h->min_val && cmax == h->max_val) {
        for (int i = 0; i < h->bins; i++) comb[i] = comb[i] + h->hist[i];
    } else {
        combine(comb, h->hist, h->bins, h->upsample_rate, dr, start_idx);
    }
    free(h->hist);
    h->hist = comb;
    h->min_val = cmin;
    h->max_val = cmax;
    return TM_OK;
}

/* c10::div_floor_floating (float32). */
static float div_floor(float a, float b) {
    if (b == 0.0f) return a / b;
    float mod = fmodf(a, b);
    float div = (a - mod) / b;
    if (mod != 0.0f && (b < 0.0f) != (mod < 0.0f)) div -= 1.0f;
    float fl;
    if (div != 0.0f) {
        fl = floorf(div);
        if (div - fl > 0.5f) fl += 1.0f;
    } else {
        fl = copysignf(0.0f, a / b);
    }
    return fl;
}

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

/* _get_norm: density * (end^3 - begin^3) / 3, float32 */
static float l2_norm(float begin, float end, float density) {
    float nrm = (end * end * end - begin * begin * begin) / 3.0f;
    return density * nrm;
}

/* _compute_quantization_error(next_start_bin, next_end_bin). Only the bins listed in nz[0..n_nz)
** are visited: an empty bin has density 0, so each of its terms is +-0 and adding it to the
** (double) sum changes nothing; the result equals the sum over every bin. */
static double quant_error(const float *hist, const int *nz, int n_nz, int bins, float min_val,
                          float max_val, int dst_nbins, int64_t s, int64_t e) {
    double bin_width = ((double)max_val - (double)min_val) / bins;
    double dst_bin_width = bin_width * (double)(e - s + 1) / dst_nbins;
    if (dst_bin_width == 0.0) return 0.0;
    float bw = (float)bin_width, dbw = (float)dst_bin_width;
    float half = (float)(dst_bin_width / 2), nhalf = (float)(-dst_bin_width / 2);
    float top = (float)(dst_nbins - 1);
    float mid_norm = (half * half * half - nhalf * nhalf * nhalf) / 3.0f;
    double sum = 0.0;
    for (int k = 0; k < n_nz; k++) {
        int i = nz[k];
        float src_begin = (float)(i - s) * bw;
        float src_end = src_begin + bw;
        float db = clampf(div_floor(src_begin, dbw), 0.0f, top);
        float db_center = (db + 0.5f) * dbw;
        float de = clampf(div_floor(src_end, dbw), 0.0f, top);
        float density = hist[i] / bw;
        float norm = 0.0f;
        norm += l2_norm(src_begin - db_center, half, density);
        norm += (de - db - 1.0f) * (density * mid_norm);
        float de_center = de * dbw + half;
        norm += l2_norm(nhalf, src_end - de_center, density);
        sum += (double)norm;
    }
    return sum;
}

tm_status tm_hist_l2_search(const float *hist, int n_bins, float min_val, float max_val,
                            int dst_nbins, float *new_min, float *new_max, int64_t *start_bin,
                            int64_t *end_bin) {
    if (!hist || n_bins < 1 || dst_nbins < 2 || !new_min || !new_max || !(min_val <= max_val))
        return TM_E_INVALID_ARG;
    float bin_width = (max_val - min_val) / (float)n_bins;
    float *cs = tm__malloc_n((size_t)n_bins, sizeof(float));
    int *nz = tm__malloc_n((size_t)n_bins, sizeof(int));
    if (!cs || !nz) {
        free(cs);
        free(nz);
        return TM_E_NOMEM;
    }
    int n_nz = 0;
    for (int i = 0; i < n_bins; i++)
        if (hist[i] != 0.0f) nz[n_nz++] = i;
    /* torch.cumsum on CPU accumulates float32 in double (acc_type) and stores float32 */
    double acc = 0.0;
    for (int i = 0; i < n_bins; i++) {
        acc += (double)hist[i];
        cs[i] = (float)acc;
    }
    double total = (double)(float)acc; /* torch.sum(...).item() of float32 */
    double alpha = 0.0, beta = 1.0, norm_min = INFINITY;
    int64_t start = 0, end = n_bins - 1;
    while (alpha < beta) {
        double next_alpha = alpha + 1e-5, next_beta = beta - 1e-5;
        int64_t l = start, r = end;
        float lim_a = (float)(next_alpha * total), lim_b = (float)(next_beta * total);
        while (l < end && cs[l] < lim_a) l++;
        while (r > start && cs[r] > lim_b) r--;
        int64_t next_start = start, next_end = end;
        if ((l - start) > (end - r)) {
            next_start = l;
            alpha = next_alpha;
        } else {
            next_end = r;
            beta = next_beta;
        }
        if (next_start == start && next_end == end) continue;
        double norm = quant_error(hist, nz, n_nz, n_bins, min_val, max_val, dst_nbins,
                                  next_start, next_end);
        if (norm > norm_min) break;
        norm_min = norm;
        start = next_start;
        end = next_end;
    }
    free(cs);
    free(nz);
    *new_min = min_val + bin_width * (float)start;
    *new_max = min_val + bin_width * (float)(end + 1);
    if (start_bin) *start_bin = start;
    if (end_bin) *end_bin = end;
    return TM_OK;
}
