/*
** test_quant_kernels.c: kernel variants of quantization: every SIMD variant gives the
** reference's codes and statistics bit for bit, the kernel table, and the error statistics
** accumulator (tm_erracc: SIMD lanes = reference lanes, and the values themselves).
** Split from test_quant.c; the quantizer's definition in test_quant_affine.c.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/quant_data.h"
#include "quant/kernels.h"
#include "tensormorph.h"
#include "tensormorph/job.h"

/* ---------------------------------------------------------------------------------------- */
/* Kernel variants                                                                           */
/* ---------------------------------------------------------------------------------------- */

static const char *const variants[] = {"avx2", "avx512"};

/* random data with exact ties (x = (k + 1/2) * s, s a power of two), saturating values and
** (with allow_nonfinite) NaN/Inf; every variant must give the reference's codes and stats */
static void run_variant_case(tm_dtype dt, int torch, int allow_nf, int64_t rows, int64_t cols,
                             tm_granularity kind) {
    int64_t n = rows * cols, shape[2] = {rows, cols};
    tm_qgran g = {.kind = kind, .axis = kind == TM_GRAN_GROUP ? 1 : 0, .group_size = 32};
    int64_t np;
    assert_int_equal(tm_qgran_param_shape(&g, 2, shape, NULL, NULL, &np, NULL), TM_OK);
    float *x = malloc((size_t)n * sizeof(float)), *s = malloc((size_t)np * sizeof(float));
    int32_t *zp = malloc((size_t)np * sizeof(int32_t));
    const tm_dtype_traits *t = tm_dtype_get(dt);
    for (int64_t p = 0; p < np; p++) {
        s[p] = (tq_rng_u64() & 1) ? ldexpf(1.0f, (int)(tq_rng_u64() % 6) - 4) : 0.003f + tq_rng_unit();
        zp[p] = (int32_t)(t->qmin + (int64_t)(tq_rng_u64() % (uint64_t)(t->qmax - t->qmin + 1)));
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t p = tm_qgran_param_index(&g, 2, shape, i);
        uint64_t r = tq_rng_u64() % 16;
        if (r < 6) x[i] = ((float)((int64_t)(tq_rng_u64() % 300) - 150) + 0.5f) * s[p]; /* ties */
        else if (r < 8) x[i] = (tq_rng_u64() & 1 ? 1.0f : -1.0f) * s[p] * (float)(t->qmax + 50);
        else if (r < 9) x[i] = (tq_rng_u64() & 1 ? 3e38f : -3e38f);
        else if (r < 10 && allow_nf) x[i] = (tq_rng_u64() % 3 == 0) ? NAN : (tq_rng_u64() & 1) ? INFINITY : -INFINITY;
        else x[i] = tq_rng_normal() * s[p] * 60.0f;
    }
    tm_qparams qp = {.code_dtype = dt, .qmin = t->qmin, .qmax = t->qmax, .gran = g, .n_params = np,
                     .scale = s, .zero_point = zp, .convention = torch ? TM_CONV_TORCH : TM_CONV_ONNX,
                     .allow_nonfinite = allow_nf};
    uint8_t *ref = malloc((size_t)n), *got = malloc((size_t)n);
    float *dref = malloc((size_t)n * sizeof(float)), *dgot = malloc((size_t)n * sizeof(float));
    double *pref = calloc((size_t)np, sizeof(double)), *pgot = calloc((size_t)np, sizeof(double));
    int64_t *nref = calloc((size_t)np, sizeof(int64_t)), *ngot = calloc((size_t)np, sizeof(int64_t));
    tm_qstats sr, sg;
    assert_int_equal(tm_kernels_get("ref", &qp.kernels), TM_OK);
    assert_string_equal(tm_kernels_name(qp.kernels), "ref");
    tm_qstats_init(&sr, np, pref, nref);
    assert_int_equal(tm_quantize_f32(&qp, 2, shape, x, 0, n, ref, &sr, NULL), TM_OK);
    assert_int_equal(tm_dequantize(&qp, 2, shape, ref, 0, n, dref, NULL), TM_OK);
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        if (tm_kernels_get(variants[v], &qp.kernels) != TM_OK) continue; /* CPU lacks it */
        assert_string_equal(tm_kernels_name(qp.kernels), variants[v]);
        tm_qstats_init(&sg, np, pgot, ngot);
        assert_int_equal(tm_quantize_f32(&qp, 2, shape, x, 0, n, got, &sg, NULL), TM_OK);
        assert_int_equal(tm_dequantize(&qp, 2, shape, got, 0, n, dgot, NULL), TM_OK);
        assert_memory_equal(got, ref, (size_t)n);
        assert_memory_equal(dgot, dref, (size_t)n * sizeof(float));
        assert_memory_equal(pgot, pref, (size_t)np * sizeof(double));
        assert_memory_equal(ngot, nref, (size_t)np * sizeof(int64_t));
        assert_true(memcmp(&sg.sum_err2, &sr.sum_err2, sizeof(double)) == 0);
        assert_true(memcmp(&sg.sum_x2, &sr.sum_x2, sizeof(double)) == 0);
        assert_int_equal(sg.n_clipped, sr.n_clipped);
        assert_int_equal(sg.n_nonfinite, sr.n_nonfinite);
    }
    free(x);
    free(s);
    free(zp);
    free(ref);
    free(got);
    free(dref);
    free(dgot);
    free(pref);
    free(pgot);
    free(nref);
    free(ngot);
}

static void test_kernel_variants_match_ref(void **state) {
    (void)state;
    const tm_dtype dts[4] = {TM_I8, TM_U8, TM_I4, TM_U4};
    int ran = 0;
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        const tm_kernels *k;
        if (tm_kernels_get(variants[v], &k) == TM_OK) {
            printf("kernel variant available: %s\n", variants[v]);
            ran++;
        }
    }
    if (!ran) printf("no SIMD variant on this CPU: only the reference is checked\n");
    for (int d = 0; d < 4; d++)
        for (int torch = 0; torch < 2; torch++)
            for (int nf = 0; nf < 2; nf++) {
                run_variant_case(dts[d], torch, nf, 37, 203, TM_GRAN_CHANNEL);
                run_variant_case(dts[d], torch, nf, 16, 100, TM_GRAN_GROUP);
                run_variant_case(dts[d], torch, nf, 1, 1001, TM_GRAN_TENSOR);
            }
    const tm_kernels *k = &tm__kernels_ref;
    assert_int_equal(tm_kernels_get("nope", &k), TM_E_INVALID_ARG);
    assert_ptr_equal(k, &tm__kernels_ref); /* untouched */
}

/* The kernel table (src/quant/kernels.h): "ref" is the reference function in every entry (the
** affine runs, the observers' min/max, the error-statistics lanes, the ggml error lanes and the
** ggml type table's reference column); every other set fills every entry; "auto" and NULL are
** the same set, one of them. */
static void test_kernel_table(void **state) {
    (void)state;
    const tm_kernels *ref = NULL, *aut = NULL, *k;
    assert_int_equal(tm_kernels_get("ref", &ref), TM_OK);
    assert_ptr_equal(ref, &tm__kernels_ref);
    assert_ptr_equal(ref->quant_int, tm__quant_int_ref);
    assert_ptr_equal(ref->dequant_int, tm__dequant_int_ref);
    assert_null(ref->quant_dequant_int);
    assert_ptr_equal(ref->minmax, tm__minmax_ref);
    assert_ptr_equal(ref->err_run, tm__err_run_ref);
    assert_ptr_equal(ref->gq_err_lanes, tm__gq_err_lanes_ref);
    assert_int_equal(ref->ggml_simd, 0);
    assert_string_equal(tm_kernels_name(ref), "ref");
    assert_int_equal(tm_kernels_get("auto", &aut), TM_OK);
    assert_ptr_equal(tm__kernels_or_auto(NULL), aut);
    assert_string_equal(tm_kernels_name(NULL), tm_kernels_name(aut));
    int found = aut == ref;
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        tm_status st = tm_kernels_get(variants[v], &k);
        assert_true(st == TM_OK || st == TM_E_UNSUPPORTED);
        if (st) continue;
        found |= k == aut;
        assert_string_equal(k->name, variants[v]);
        assert_true(k->quant_int && k->dequant_int && k->minmax && k->err_run && k->gq_err_lanes);
        assert_true(k->quant_int != tm__quant_int_ref && k->minmax != tm__minmax_ref && k->err_run != tm__err_run_ref);
    }
    assert_true(found);
    assert_int_equal(tm_kernels_get(NULL, &k), TM_E_INVALID_ARG);
}


/* ---------------------------------------------------------------------------------------- */
/* Error statistics (tm_erracc): SIMD lanes = reference lanes, and the values themselves      */
/* ---------------------------------------------------------------------------------------- */


static uint64_t erracc_rng = 88172645463325252ull;
static double erracc_u(void) { /* xorshift64 in [0, 1) */
    erracc_rng ^= erracc_rng << 13; erracc_rng ^= erracc_rng >> 7; erracc_rng ^= erracc_rng << 17;
    return (double)(erracc_rng >> 11) / 9007199254740992.0;
}

static void erracc_fill(tm_erracc *a, int force_ref, const float *x, const float *xq, const int64_t *param,
                        const float *scale, const int32_t *zp, int64_t n, int64_t n_params) {
    assert_int_equal(tm_erracc_init(a, n_params, NULL), TM_OK);
    a->kernels = force_ref ? &tm__kernels_ref : NULL;
    tm_erracc_add(a, TM_I8, x, xq, param, scale, zp, -128, 127, n);
}

static void test_erracc_lanes_and_values(void **state) {
    (void)state;
    enum { NP = 9, N = 9 * 37 + 5 };
    float x[N], xq[N], scale[NP];
    int32_t zp[NP];
    int64_t param[N];
    /* runs of 37 (tails of 5), then 5 of the last param; scales include 0, negative and
    ** normal values; x includes NaN, inf, clipped outliers and -0 */
    for (int p = 0; p < NP; p++) {
        scale[p] = p == 3 ? 0.0f : p == 5 ? -0.01f : (float)(0.001 + 0.01 * erracc_u());
        zp[p] = (int32_t)(erracc_u() * 20) - 10;
    }
    for (int64_t i = 0; i < N; i++) {
        int64_t p = i < 9 * 37 ? i / 37 : NP - 1;
        param[i] = p;
        float s = scale[p] > 0 ? scale[p] : 0.01f;
        x[i] = (float)((erracc_u() * 2 - 1) * 100 * s);
        if (i % 41 == 7) x[i] = (float)(400 * s);        /* clipped */
        if (i == 50) x[i] = NAN;
        if (i == 90) x[i] = INFINITY;
        if (i == 91) x[i] = -0.0f;
        double q = nearbyint(x[i] / s) + zp[p];
        q = q < -128 ? -128 : q > 127 ? 127 : q;
        xq[i] = (float)(s * (q - zp[p]));
        if (i % 53 == 11) xq[i] += 0.9f * s;                 /* beyond half an LSB */
    }
    tm_erracc a, b;
    erracc_fill(&a, 0, x, xq, param, scale, zp, N, NP);
    erracc_fill(&b, 1, x, xq, param, scale, zp, N, NP);
    /* bit-identical: the SIMD lanes are the reference lanes */
    assert_int_equal(a.n, b.n);
    assert_int_equal(a.n_clipped, b.n_clipped);
    assert_int_equal(a.n_beyond, b.n_beyond);
    assert_int_equal(a.n_nonfinite, b.n_nonfinite);
    assert_memory_equal(&a.sum_x2, &b.sum_x2, sizeof(double));
    assert_memory_equal(&a.sum_e2, &b.sum_e2, sizeof(double));
    assert_memory_equal(&a.sum_l2, &b.sum_l2, sizeof(double));
    assert_memory_equal(&a.sum_q2, &b.sum_q2, sizeof(double));
    assert_memory_equal(&a.sum_xq, &b.sum_xq, sizeof(double));
    assert_memory_equal(&a.max_abs, &b.max_abs, sizeof(double));
    assert_memory_equal(&a.max_lsb, &b.max_lsb, sizeof(double));
    assert_memory_equal(&a.max_lsb_unclipped, &b.max_lsb_unclipped, sizeof(double));
    assert_memory_equal(a.param_sum_l2, b.param_sum_l2, NP * sizeof(double));
    assert_memory_equal(a.param_n, b.param_n, NP * sizeof(int64_t));
    /* and the values: an independent element-order computation (sums to 1e-12 relative;
    ** counts and maxima exact) */
    double sx2 = 0, se2 = 0, mabs = 0;
    int64_t cnt = 0, nonfin = 0, clip = 0;
    for (int64_t i = 0; i < N; i++) {
        if (!isfinite(x[i])) { nonfin++; continue; }
        int64_t p = param[i];
        double s = scale[p], e = (double)xq[i] - (double)x[i];
        cnt++;
        sx2 += (double)x[i] * x[i];
        se2 += e * e;
        if (fabs(e) > mabs) mabs = fabs(e);
        double lo = (-128.0 - zp[p]) * s - TM_QDIFF_MAX_LSB_TOL * s, hi = (127.0 - zp[p]) * s + TM_QDIFF_MAX_LSB_TOL * s;
        if (x[i] < lo || x[i] > hi) clip++;
    }
    assert_int_equal(a.n, cnt);
    assert_int_equal(a.n_nonfinite, nonfin);
    assert_int_equal(nonfin, 2);
    assert_int_equal(a.n_clipped, clip);
    assert_true(clip > 3);
    assert_true(a.n_beyond > 3);
    assert_true(fabs(a.sum_x2 - sx2) <= 1e-12 * sx2);
    assert_true(fabs(a.sum_e2 - se2) <= 1e-12 * se2);
    assert_true(a.max_abs == mabs);
    /* runs through tm_erracc_add_run give the same bits as the param array */
    tm_erracc c;
    assert_int_equal(tm_erracc_init(&c, NP, NULL), TM_OK);
    for (int64_t k = 0; k < N;) {
        int64_t k1 = k;
        while (k1 < N && param[k1] == param[k]) k1++;
        tm_erracc_add_run(&c, TM_I8, x + k, xq + k, param[k], scale, zp, -128, 127, k1 - k);
        k = k1;
    }
    assert_memory_equal(&a.sum_e2, &c.sum_e2, sizeof(double));
    assert_memory_equal(&a.sum_l2, &c.sum_l2, sizeof(double));
    assert_int_equal(a.n_clipped, c.n_clipped);
    tm_erracc_free(&a);
    tm_erracc_free(&b);
    tm_erracc_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_variants_match_ref),
        cmocka_unit_test(test_kernel_table),
        cmocka_unit_test(test_erracc_lanes_and_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
