/*
** test_observer.c: observers and the qparams conventions against the vector families
** torch_observer (MinMax, moving average, per-channel, histogram) and ort_calibration
** (entropy, percentile), plus the MSE observer and the stateful calibration API.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/vectors.h"
#include "tensormorph.h"

static uint32_t fbits(float x) { return tmv_f32_bits(x); }

/* ---------------------------------------------------------------------------------------- */
/* torch_observer                                                                            */
/* ---------------------------------------------------------------------------------------- */

struct torch_obs_case {
    tm_qspec spec;
    int64_t  qmin, qmax;
    int      custom;
    int      ndim;       /* of one batch */
    int64_t  shape[8];
    int64_t  n_batches, batch_n;
};

static void torch_setup(const char *name, json_t *cj, const tmv_npy *in, struct torch_obs_case *t) {
    json_t *pr = json_object_get(cj, "params");
    const char *dtype = json_string_value(json_object_get(pr, "dtype"));
    const char *qs = json_string_value(json_object_get(pr, "qscheme"));
    const char *call = json_string_value(json_object_get(cj, "call"));
    memset(t, 0, sizeof *t);
    t->spec = tm_qspec_default();
    t->spec.convention = TM_CONV_TORCH;
    t->spec.code_dtype = strcmp(dtype, "qint8") == 0 ? TM_I8 : TM_U8;
    t->spec.symmetric = strstr(qs, "symmetric") != NULL;
    t->qmin = json_integer_value(json_object_get(pr, "quant_min"));
    t->qmax = json_integer_value(json_object_get(pr, "quant_max"));
    t->custom = strstr(call, "quant_min=") != NULL;
    json_t *ax = json_object_get(pr, "ch_axis");
    t->spec.gran = ax ? (tm_qgran){.kind = TM_GRAN_CHANNEL, .axis = (int)json_integer_value(ax)}
                      : (tm_qgran){.kind = TM_GRAN_TENSOR};
    if (strncmp(name, "movavg", 6) == 0) {
        t->spec.observer = tm_observer_default(TM_OBS_EMA_MINMAX);
        t->spec.observer.averaging_constant = json_number_value(json_object_get(pr, "averaging_constant"));
    } else if (strncmp(name, "histogram", 9) == 0) {
        t->spec.observer = tm_observer_default(TM_OBS_HISTOGRAM);
        t->spec.observer.n_bins = (int)json_integer_value(json_object_get(pr, "bins"));
    } else {
        t->spec.observer = tm_observer_default(TM_OBS_MINMAX);
    }
    t->n_batches = in->shape[0];
    t->ndim = in->ndim - 1;
    t->batch_n = 1;
    for (int i = 1; i < in->ndim; i++) {
        t->shape[i - 1] = in->shape[i];
        t->batch_n *= in->shape[i];
    }
}

static void torch_observer_case(const char *name, json_t *cj) {
    tmv_npy in, es, ez, emin, emax;
    tmv_case_npy("torch_observer", name, "input.npy", &in);
    tmv_case_npy("torch_observer", name, "expected_scale.npy", &es);
    tmv_case_npy("torch_observer", name, "expected_zero_point.npy", &ez);
    tmv_case_npy("torch_observer", name, "expected_min_val.npy", &emin);
    tmv_case_npy("torch_observer", name, "expected_max_val.npy", &emax);
    struct torch_obs_case t;
    torch_setup(name, cj, &in, &t);
    float *x = tmv_npy_as_f32(&in);
    tm_calib *c;
    tm_err err;
    assert_int_equal(tm_calib_create(&t.spec, t.ndim, t.shape, &c, &err), TM_OK);
    for (int64_t b = 0; b < t.n_batches; b++)
        assert_int_equal(tm_calib_update(c, t.ndim, t.shape, x + b * t.batch_n, &err), TM_OK);
    int64_t nu = tm_calib_n_params(c);
    assert_int_equal(nu, es.n);
    int hist = t.spec.observer.kind == TM_OBS_HISTOGRAM;
    int scale_exact = strcmp(tmv_output_match(cj, "scale"), "exact") == 0;
    for (int64_t u = 0; u < nu; u++) {
        float mn, mx;
        assert_int_equal(tm_calib_minmax(c, u, &mn, &mx), TM_OK);
        if (fbits(mn) != tmv_npy_f32_bits(&emin, u) || fbits(mx) != tmv_npy_f32_bits(&emax, u))
            fail_msg("torch_observer/%s: unit %lld min/max %.9g %.9g, expected %.9g %.9g", name,
                     (long long)u, (double)mn, (double)mx, tmv_npy_get_f64(&emin, u),
                     tmv_npy_get_f64(&emax, u));
        double lo, hi;
        assert_int_equal(tm_calib_range(c, u, &lo, &hi, &err), TM_OK);
        float s;
        int32_t zp;
        assert_int_equal(tm_qparams_from_range_q(&t.spec, t.qmin, t.qmax, t.custom, lo, hi, &s,
                                                 &zp, &err), TM_OK);
        double want_s = tmv_npy_get_f64(&es, u);
        int64_t want_zp = tmv_npy_get_i64(&ez, u);
        if (scale_exact) {
            if (fbits(s) != tmv_npy_f32_bits(&es, u) || zp != want_zp)
                fail_msg("torch_observer/%s: unit %lld scale %.9g zp %d, expected %.9g %lld", name,
                         (long long)u, (double)s, zp, want_s, (long long)want_zp);
        } else {
            json_t *o = tmv_output(cj, "scale");
            double rtol = json_number_value(json_object_get(o, "rtol"));
            double atol = json_number_value(json_object_get(o, "atol"));
            printf("torch_observer/%s: scale %.9g zp %d, torch %.9g %lld (%s)\n", name, (double)s,
                   zp, want_s, (long long)want_zp,
                   fbits(s) == tmv_npy_f32_bits(&es, u) && zp == want_zp ? "exact" : "within tolerance");
            if (!(fabs(s - want_s) <= atol + rtol * fabs(want_s)))
                fail_msg("torch_observer/%s: scale %.9g vs %.9g beyond rtol %g", name, (double)s,
                         want_s, rtol);
            json_t *oz = tmv_output(cj, "zero_point");
            double zatol = json_number_value(json_object_get(oz, "atol"));
            assert_true(fabs((double)zp - (double)want_zp) <= zatol);
        }
    }
    if (hist) {
        /* the histogram torch built (int-truncated histc range, upsampled combination) */
        tmv_npy eh, emm, eb;
        tmv_case_npy("torch_observer", name, "expected_histogram.npy", &eh);
        tmv_case_npy("torch_observer", name, "expected_search_min_max.npy", &emm);
        tmv_case_npy("torch_observer", name, "expected_search_bins.npy", &eb);
        int64_t nb;
        assert_int_equal(tm_calib_histogram(c, 0, &nb, NULL, NULL), TM_OK);
        assert_int_equal(nb, eh.n);
        double *h = malloc((size_t)nb * sizeof(double));
        assert_int_equal(tm_calib_histogram(c, 0, &nb, h, NULL), TM_OK);
        for (int64_t i = 0; i < nb; i++)
            if (fbits((float)h[i]) != tmv_npy_f32_bits(&eh, i))
                fail_msg("torch_observer/%s: histogram[%lld] = %.9g, expected %.9g", name,
                         (long long)i, h[i], tmv_npy_get_f64(&eh, i));
        /* the search alone, on torch's histogram */
        float *th = tmv_npy_as_f32(&eh), nmin, nmax;
        int64_t sb, ebin;
        float mn = (float)tmv_npy_get_f64(&emin, 0), mx = (float)tmv_npy_get_f64(&emax, 0);
        assert_int_equal(tm_hist_l2_search(th, (int)nb, mn, mx, 256, &nmin, &nmax, &sb, &ebin), TM_OK);
        int64_t wsb = tmv_npy_get_i64(&eb, 0), web = tmv_npy_get_i64(&eb, 1);
        printf("torch_observer/%s: search bins (%lld, %lld), torch (%lld, %lld)%s\n", name,
               (long long)sb, (long long)ebin, (long long)wsb, (long long)web,
               (sb == wsb && ebin == web) ? " exact" : " within atol");
        assert_true(llabs(sb - wsb) <= 1 && llabs(ebin - web) <= 1);
        double wmin = tmv_npy_get_f64(&emm, 0), wmax = tmv_npy_get_f64(&emm, 1);
        if (sb == wsb && ebin == web) {
            assert_int_equal(fbits(nmin), tmv_npy_f32_bits(&emm, 0));
            assert_int_equal(fbits(nmax), tmv_npy_f32_bits(&emm, 1));
        } else {
            double bw = ((double)mx - (double)mn) / (double)nb;
            assert_true(fabs(nmin - wmin) <= bw * 1.001 && fabs(nmax - wmax) <= bw * 1.001);
        }
        free(h);
        free(th);
        tmv_npy_free(&eh);
        tmv_npy_free(&emm);
        tmv_npy_free(&eb);
    }
    tm_calib_free(c);
    free(x);
    tmv_npy_free(&in);
    tmv_npy_free(&es);
    tmv_npy_free(&ez);
    tmv_npy_free(&emin);
    tmv_npy_free(&emax);
}

static void test_vectors_torch_observer(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    static const char *const kinds[] = {"minmax_", "movavg_", "perchannel_", "histogram_", NULL};
    int n = tmv_run_cases("torch_observer", kinds, torch_observer_case);
    printf("torch_observer: %d of %d cases checked\n", n, n);
}

/* ---------------------------------------------------------------------------------------- */
/* ort_calibration                                                                           */
/* ---------------------------------------------------------------------------------------- */

static void ort_case(const char *name, json_t *cj) {
    json_t *pr = json_object_get(cj, "params");
    const char *method = json_string_value(json_object_get(pr, "method"));
    tm_qspec sp = tm_qspec_default();
    sp.gran.kind = TM_GRAN_TENSOR;
    sp.symmetric = json_is_true(json_object_get(pr, "symmetric"));
    if (strcmp(method, "entropy") == 0) sp.observer = tm_observer_default(TM_OBS_ENTROPY);
    else if (strcmp(method, "percentile") == 0) sp.observer = tm_observer_default(TM_OBS_PERCENTILE);
    else fail_msg("ort_calibration/%s: unknown method %s", name, method);
    sp.observer.n_bins = (int)json_integer_value(json_object_get(pr, "num_bins"));
    sp.observer.n_quantized_bins = (int)json_integer_value(json_object_get(pr, "num_quantized_bins"));
    sp.observer.percentile = json_number_value(json_object_get(pr, "percentile"));
    tmv_npy er, eh, ee;
    tmv_case_npy("ort_calibration", name, "expected_range.npy", &er);
    tmv_case_npy("ort_calibration", name, "expected_histogram.npy", &eh);
    tmv_case_npy("ort_calibration", name, "expected_hist_edges.npy", &ee);
    tm_calib *c = NULL;
    tm_err err;
    float fmin = INFINITY, fmax = -INFINITY;
    for (int b = 0;; b++) {
        char file[32];
        snprintf(file, sizeof file, "input_%d.npy", b);
        if (!tmv_case_has_file("ort_calibration", name, file)) break;
        tmv_npy in;
        tmv_case_npy("ort_calibration", name, file, &in);
        float *x = tmv_npy_as_f32(&in);
        if (!c) assert_int_equal(tm_calib_create(&sp, in.ndim, in.shape, &c, &err), TM_OK);
        assert_int_equal(tm_calib_update(c, in.ndim, in.shape, x, &err), TM_OK);
        for (int64_t i = 0; i < in.n; i++) {
            fmin = fminf(fmin, x[i]);
            fmax = fmaxf(fmax, x[i]);
        }
        free(x);
        tmv_npy_free(&in);
    }
    assert_non_null(c);
    int64_t nb;
    assert_int_equal(tm_calib_histogram(c, 0, &nb, NULL, NULL), TM_OK);
    assert_int_equal(nb, eh.n);
    double *h = malloc((size_t)nb * sizeof(double));
    float *e = malloc((size_t)(nb + 1) * sizeof(float));
    assert_int_equal(tm_calib_histogram(c, 0, &nb, h, e), TM_OK);
    for (int64_t i = 0; i < nb; i++)
        if ((int64_t)h[i] != tmv_npy_get_i64(&eh, i))
            fail_msg("ort_calibration/%s: histogram[%lld] = %lld, expected %lld", name, (long long)i,
                     (long long)h[i], (long long)tmv_npy_get_i64(&eh, i));
    for (int64_t i = 0; i <= nb; i++)
        if (fbits(e[i]) != tmv_npy_f32_bits(&ee, i))
            fail_msg("ort_calibration/%s: edge[%lld] = %.9g, expected %.9g", name, (long long)i,
                     (double)e[i], tmv_npy_get_f64(&ee, i));
    double lo, hi;
    assert_int_equal(tm_calib_range(c, 0, &lo, &hi, &err), TM_OK);
    if (fbits((float)lo) != tmv_npy_f32_bits(&er, 0) || fbits((float)hi) != tmv_npy_f32_bits(&er, 1))
        fail_msg("ort_calibration/%s: range (%.9g, %.9g), expected (%.9g, %.9g)", name, lo, hi,
                 tmv_npy_get_f64(&er, 0), tmv_npy_get_f64(&er, 1));
    /* the threshold rule alone, on ORT's histogram */
    int64_t *hi64 = tmv_npy_as_i64(&eh);
    float *edges = tmv_npy_as_f32(&ee), l2, r2;
    if (sp.observer.kind == TM_OBS_ENTROPY)
        assert_int_equal(tm_hist_entropy_range(hi64, edges, eh.n, fmin, fmax,
                                               sp.observer.n_quantized_bins, &l2, &r2), TM_OK);
    else
        assert_int_equal(tm_hist_percentile_range(hi64, edges, eh.n, fmin, fmax,
                                                  sp.observer.percentile, sp.symmetric, &l2, &r2), TM_OK);
    assert_int_equal(fbits(l2), tmv_npy_f32_bits(&er, 0));
    assert_int_equal(fbits(r2), tmv_npy_f32_bits(&er, 1));
    free(hi64);
    free(edges);
    free(h);
    free(e);
    tm_calib_free(c);
    tmv_npy_free(&er);
    tmv_npy_free(&eh);
    tmv_npy_free(&ee);
}

static void test_vectors_ort_calibration(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    static const char *const kinds[] = {"entropy_", "percentile_", NULL};
    int n = tmv_run_cases("ort_calibration", kinds, ort_case);
    printf("ort_calibration: %d of %d cases checked\n", n, n);
}

/* ---------------------------------------------------------------------------------------- */
/* Observers without vectors                                                                 */
/* ---------------------------------------------------------------------------------------- */

/* MSE picks a clipped range on heavy-tailed data and never a worse error than min/max */
static void test_mse_observer_clips_outliers(void **state) {
    (void)state;
    enum { N = 4096 };
    static float v[N];
    uint64_t r = 12345;
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = ((float)(r >> 40) / 16777216.0f - 0.5f) * 2.0f;
    }
    v[17] = 40.0f; /* one outlier */
    tm_qspec sp = tm_qspec_default();
    sp.gran.kind = TM_GRAN_TENSOR;
    sp.code_dtype = TM_I4;
    double lo, hi, mlo, mhi;
    sp.observer = tm_observer_default(TM_OBS_MINMAX);
    assert_int_equal(tm_observe_range(&sp, v, N, &mlo, &mhi, NULL), TM_OK);
    sp.observer = tm_observer_default(TM_OBS_MSE);
    assert_int_equal(tm_observe_range(&sp, v, N, &lo, &hi, NULL), TM_OK);
    assert_true(hi < mhi * 0.5);
    assert_true(hi > 0.0);
    /* deterministic */
    double lo2, hi2;
    assert_int_equal(tm_observe_range(&sp, v, N, &lo2, &hi2, NULL), TM_OK);
    assert_true(lo == lo2 && hi == hi2);
    /* stateful path over two batches equals the stateless one over all values */
    const int64_t shape[1] = {N / 2};
    tm_calib *c;
    assert_int_equal(tm_calib_create(&sp, 1, shape, &c, NULL), TM_OK);
    assert_int_equal(tm_calib_update(c, 1, shape, v, NULL), TM_OK);
    assert_int_equal(tm_calib_update(c, 1, shape, v + N / 2, NULL), TM_OK);
    assert_int_equal(tm_calib_range(c, 0, &lo2, &hi2, NULL), TM_OK);
    assert_true(lo == lo2 && hi == hi2);
    tm_calib_free(c);
}

static void test_calib_per_group_minmax_and_errors(void **state) {
    (void)state;
    const int64_t shape[2] = {2, 5};
    const float x[10] = {1, -2, 3, 4, 5, 0, 0, 0, -1, 0.5f};
    tm_qspec sp = tm_qspec_default();
    sp.gran = (tm_qgran){.kind = TM_GRAN_GROUP, .axis = 1, .group_size = 2};
    tm_calib *c;
    tm_err err;
    assert_int_equal(tm_calib_create(&sp, 2, shape, &c, &err), TM_OK);
    assert_int_equal(tm_calib_n_params(c), 6);
    double lo, hi;
    assert_int_equal(tm_calib_range(c, 0, &lo, &hi, &err), TM_E_INVALID_ARG); /* nothing yet */
    assert_int_equal(tm_calib_update(c, 2, shape, x, &err), TM_OK);
    assert_int_equal(tm_calib_range(c, 1, &lo, &hi, &err), TM_OK);
    assert_true(lo == 3.0 && hi == 4.0);
    assert_int_equal(tm_calib_range(c, 2, &lo, &hi, &err), TM_OK); /* ragged group: column 4 */
    assert_true(lo == 5.0 && hi == 5.0);
    assert_int_equal(tm_calib_range(c, 5, &lo, &hi, &err), TM_OK);
    assert_true(lo == 0.5 && hi == 0.5);
    assert_int_equal(tm_calib_range(c, 6, &lo, &hi, &err), TM_E_INVALID_ARG);
    float s[6];
    int32_t zp[6];
    assert_int_equal(tm_calib_qparams(c, s, zp, &err), TM_OK);
    assert_true(s[3] == 1.0f); /* all-zero group: scale 1 (ONNX) */
    assert_true(s[1] == 4.0f / 127.0f);
    tm_calib_free(c);
    sp.observer.kind = TM_OBS_PERCENTILE;
    sp.observer.percentile = 101;
    assert_int_equal(tm_calib_create(&sp, 2, shape, &c, &err), TM_E_INVALID_ARG);
    sp.observer = tm_observer_default(TM_OBS_EMA_MINMAX);
    sp.observer.averaging_constant = -1;
    assert_int_equal(tm_calib_create(&sp, 2, shape, &c, &err), TM_E_INVALID_ARG);
}

/* every observer on a plain batch: a finite range that contains 0 after widening */
static void test_every_observer_gives_a_range(void **state) {
    (void)state;
    enum { N = 3000 };
    static float v[N];
    for (int i = 0; i < N; i++) v[i] = sinf((float)i * 0.37f) * 3.0f + (i % 97 == 0 ? 9.0f : 0.0f);
    for (int k = 0; k < TM_OBS_COUNT; k++) {
        for (int sym = 0; sym < 2; sym++) {
            tm_qspec sp = tm_qspec_default();
            sp.gran.kind = TM_GRAN_TENSOR;
            sp.symmetric = sym;
            sp.observer = tm_observer_default((tm_observer_kind)k);
            sp.observer.n_bins = 512;
            double lo, hi;
            tm_err err;
            assert_int_equal(tm_observe_range(&sp, v, N, &lo, &hi, &err), TM_OK);
            assert_true(isfinite(lo) && isfinite(hi) && lo <= hi);
            assert_true(lo >= -3.0001 && hi <= 12.0001);
            float s;
            int32_t zp;
            assert_int_equal(tm_qparams_from_range(&sp, lo, hi, &s, &zp, &err), TM_OK);
            assert_true(isfinite(s) && s > 0.0f);
        }
    }
}

/* ORT merge_histogram: a later batch with a larger max|x| grows the histogram by whole old
** bins on both sides (collect_value); the |x| collector extends its edges (percentile sym) */
static void test_ort_histogram_grows(void **state) {
    (void)state;
    enum { N = 1000 };
    static float a[N], b[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)(i - N / 2) / (N / 2);       /* [-1, 1) */
        b[i] = (float)(i - N / 2) / (N / 2) * 2.5f; /* [-2.5, 2.5) */
    }
    const int64_t shape[1] = {N};
    for (int absolute = 0; absolute < 2; absolute++) {
        tm_qspec sp = tm_qspec_default();
        sp.gran.kind = TM_GRAN_TENSOR;
        sp.symmetric = absolute;
        sp.observer = tm_observer_default(absolute ? TM_OBS_PERCENTILE : TM_OBS_ENTROPY);
        sp.observer.n_bins = 100;
        sp.observer.n_quantized_bins = 16;
        tm_calib *c;
        assert_int_equal(tm_calib_create(&sp, 1, shape, &c, NULL), TM_OK);
        assert_int_equal(tm_calib_update(c, 1, shape, a, NULL), TM_OK);
        int64_t nb0, nb1;
        static double h0[4096], h1[4096];
        static float e0[4097], e1[4097];
        assert_int_equal(tm_calib_histogram(c, 0, &nb0, h0, e0), TM_OK);
        assert_int_equal(nb0, 100);
        assert_int_equal(tm_calib_update(c, 1, shape, b, NULL), TM_OK);
        assert_int_equal(tm_calib_histogram(c, 0, &nb1, h1, e1), TM_OK);
        double total = 0;
        for (int64_t i = 0; i < nb1; i++) total += h1[i];
        /* |x| mode: np.histogram with explicit float32 arange edges drops values above the
        ** last edge (ORT: "np.arange may create an extra bin" - or, in float32, fall short) */
        double want = 2.0 * N;
        if (absolute)
            for (int i = 0; i < N; i++) want -= fabsf(b[i]) > e1[nb1];
        if (total != want) fail_msg("absolute %d: total %g, nb0 %lld nb1 %lld, last edge %.9g", absolute, total, (long long)nb0, (long long)nb1, (double)e1[nb1]);
        assert_true(nb1 > nb0);
        assert_true(e1[nb1] >= 2.4999f);
        if (!absolute) {
            /* old stride 0.02; half_increased_bins = int(1.5 // 0.02 + 1) */
            int64_t half = (nb1 - nb0) / 2;
            assert_int_equal(nb1 - nb0, 2 * half);
            assert_true(fabsf(e1[half] - e0[0]) < 1e-5f); /* old bins sit in the middle */
        } else {
            for (int64_t i = 0; i <= nb0; i++) assert_int_equal(fbits(e1[i]), fbits(e0[i]));
        }
        float mn, mx;
        assert_int_equal(tm_calib_minmax(c, 0, &mn, &mx), TM_OK);
        assert_true(mn == -2.5f && mx == b[N - 1]);
        double lo, hi;
        assert_int_equal(tm_calib_range(c, 0, &lo, &hi, NULL), TM_OK);
        assert_true(lo >= -2.5 && hi <= 2.5 && lo < hi);
        tm_calib_free(c);
    }
}

/* allow_nonfinite: NaN/Inf are left out of every observer's range; a unit without any finite
** value falls under the all-zero rule */
static void test_observers_skip_nonfinite_when_allowed(void **state) {
    (void)state;
    const int64_t shape[2] = {3, 4};
    const float x[12] = {1.0f, NAN, -2.0f, INFINITY, NAN, NAN, -INFINITY, NAN, 0.5f, 0.25f, -0.5f, 0.0f};
    for (int k = 0; k < TM_OBS_COUNT; k++) {
        tm_qspec sp = tm_qspec_default();
        sp.allow_nonfinite = 1;
        sp.observer = tm_observer_default((tm_observer_kind)k);
        sp.observer.n_bins = 256;
        sp.observer.n_quantized_bins = 16;
        double lo, hi;
        tm_err err;
        assert_int_equal(tm_observe_range(&sp, x, 4, &lo, &hi, &err), TM_OK);
        assert_true(lo >= -2.0 && hi <= 1.0 && lo <= hi);
        assert_int_equal(tm_observe_range(&sp, x + 4, 4, &lo, &hi, &err), TM_OK);
        assert_true(lo == 0.0 && hi == 0.0);
        tm_calib *c;
        assert_int_equal(tm_calib_create(&sp, 2, shape, &c, &err), TM_OK);
        assert_int_equal(tm_calib_update(c, 2, shape, x, &err), TM_OK);
        assert_int_equal(tm_calib_update(c, 2, shape, x, &err), TM_OK);
        float s[3];
        int32_t zp[3];
        assert_int_equal(tm_calib_qparams(c, s, zp, &err), TM_OK);
        assert_true(s[1] == 1.0f); /* row 1: no finite value */
        assert_true(isfinite(s[0]) && s[0] > 0.0f && isfinite(s[2]) && s[2] > 0.0f);
        if (k == TM_OBS_MINMAX || k == TM_OBS_EMA_MINMAX) assert_true(s[0] == 2.0f / 127.0f);
        tm_calib_free(c);
        sp.allow_nonfinite = 0;
        assert_int_equal(tm_observe_range(&sp, x, 4, &lo, &hi, &err), TM_E_NONFINITE);
        assert_non_null(strstr(err.msg, "index 1"));
    }
}

/* A unit of one distinct value (a 1x1 tensor): every observer gives an ordered range, with the
** entropy sizing the job uses for weights (found by a tester: entropy returned lo > hi) */
static void test_one_value_gives_ordered_range(void **state) {
    (void)state;
    const float vals[] = {0.0418053f, -3.5f, 1e-30f, 65504.0f};
    for (int k = 0; k < TM_OBS_COUNT; k++)
        for (int v = 0; v < 4; v++)
            for (int n = 1; n <= 3; n++) {
                float x[3] = {vals[v], vals[v], vals[v]};
                tm_qspec sp = tm_qspec_default();
                sp.observer = tm_observer_default((tm_observer_kind)k);
                if (k == TM_OBS_ENTROPY) { sp.observer.n_bins = 160; sp.observer.n_quantized_bins = 128; }
                double lo, hi;
                tm_err err;
                assert_int_equal(tm_observe_range(&sp, x, n, &lo, &hi, &err), TM_OK);
                assert_true(lo <= hi);
                float sc;
                int32_t zp;
                assert_int_equal(tm_qparams_from_range(&sp, lo, hi, &sc, &zp, &err), TM_OK);
                assert_true(isfinite(sc) && sc > 0.0f);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors_torch_observer),
        cmocka_unit_test(test_vectors_ort_calibration),
        cmocka_unit_test(test_mse_observer_clips_outliers),
        cmocka_unit_test(test_calib_per_group_minmax_and_errors),
        cmocka_unit_test(test_every_observer_gives_a_range),
        cmocka_unit_test(test_ort_histogram_grows),
        cmocka_unit_test(test_observers_skip_nonfinite_when_allowed),
        cmocka_unit_test(test_one_value_gives_ordered_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
