/*
** test_quant_affine.c: the affine quantizer against its definition: granularity (parameter
** shapes and indices), quantize/dequantize element by element for every granularity, bad
** parameters, empty and non-finite tensors, statistics and their merge, the qparams
** conventions and scale dtypes, and code packing (worked examples, round trips at every width).
** Split from test_quant.c; kernels in test_quant_kernels.c, vector families in
** test_quant_vectors.c.
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
#include "helpers/vectors.h"
#include "tensormorph.h"

/* ---------------------------------------------------------------------------------------- */
/* Granularity                                                                               */
/* ---------------------------------------------------------------------------------------- */

static void test_qgran_param_shape(void **state) {
    (void)state;
    const int64_t shape[3] = {4, 6, 100};
    int pnd;
    int64_t ps[8], np;
    tm_qgran g = {.kind = TM_GRAN_TENSOR};
    assert_int_equal(tm_qgran_param_shape(&g, 3, shape, &pnd, ps, &np, NULL), TM_OK);
    assert_int_equal(pnd, 0);
    assert_int_equal(np, 1);
    g = (tm_qgran){.kind = TM_GRAN_CHANNEL, .axis = -2};
    assert_int_equal(tm_qgran_param_shape(&g, 3, shape, &pnd, ps, &np, NULL), TM_OK);
    assert_int_equal(pnd, 1);
    assert_int_equal(ps[0], 6);
    assert_int_equal(np, 6);
    g = (tm_qgran){.kind = TM_GRAN_GROUP, .axis = -1, .group_size = 32};
    assert_int_equal(tm_qgran_param_shape(&g, 3, shape, &pnd, ps, &np, NULL), TM_OK);
    assert_int_equal(pnd, 3);
    assert_int_equal(ps[2], 4); /* ceil(100/32): ragged last group has its own scale */
    assert_int_equal(np, 4 * 6 * 4);
    g = (tm_qgran){.kind = TM_GRAN_BLOCK, .block_h = 4, .block_w = 16};
    assert_int_equal(tm_qgran_param_shape(&g, 3, shape, &pnd, ps, &np, NULL), TM_OK);
    assert_int_equal(ps[0], 4);
    assert_int_equal(ps[1], 2);
    assert_int_equal(ps[2], 7);
    assert_int_equal(np, 4 * 2 * 7);
    tm_err err;
    g = (tm_qgran){.kind = TM_GRAN_CHANNEL, .axis = 3};
    assert_int_equal(tm_qgran_param_shape(&g, 3, shape, &pnd, ps, &np, &err), TM_E_INVALID_ARG);
    assert_non_null(strstr(err.msg, "axis"));
    g = (tm_qgran){.kind = TM_GRAN_GROUP, .axis = 0, .group_size = 0};
    assert_int_equal(tm_qgran_param_shape(&g, 3, shape, &pnd, ps, &np, NULL), TM_E_INVALID_ARG);
    g = (tm_qgran){.kind = TM_GRAN_BLOCK, .block_h = 2, .block_w = 2};
    assert_int_equal(tm_qgran_param_shape(&g, 1, shape, &pnd, ps, &np, NULL), TM_E_INVALID_ARG);
    g = (tm_qgran){.kind = TM_GRAN_CHANNEL, .axis = 0};
    assert_int_equal(tm_qgran_param_shape(&g, 0, shape, &pnd, ps, &np, NULL), TM_E_INVALID_ARG);
}

/* the param index against the definition, element by element, for every kind */
static void test_qgran_param_index_matches_definition(void **state) {
    (void)state;
    const int64_t shape[3] = {3, 10, 7};
    for (int kind = 0; kind < TM_GRAN_COUNT; kind++) {
        for (int axis = -3; axis < 3; axis++) {
            tm_qgran g = {.kind = (tm_granularity)kind, .axis = axis, .group_size = 4,
                          .block_h = 4, .block_w = 3};
            int64_t np;
            assert_int_equal(tm_qgran_param_shape(&g, 3, shape, NULL, NULL, &np, NULL), TM_OK);
            int a = axis < 0 ? axis + 3 : axis;
            for (int64_t f = 0; f < 3 * 10 * 7; f++) {
                int64_t i0 = f / 70, i1 = (f / 7) % 10, i2 = f % 7, idx[3] = {i0, i1, i2}, want = 0;
                if (kind == TM_GRAN_CHANNEL) want = idx[a];
                if (kind == TM_GRAN_GROUP) {
                    int64_t ps[3] = {shape[0], shape[1], shape[2]}, pi[3] = {i0, i1, i2};
                    ps[a] = (shape[a] + 3) / 4;
                    pi[a] = idx[a] / 4;
                    want = (pi[0] * ps[1] + pi[1]) * ps[2] + pi[2];
                }
                if (kind == TM_GRAN_BLOCK) want = (i0 * 3 + i1 / 4) * 3 + i2 / 3;
                assert_int_equal(tm_qgran_param_index(&g, 3, shape, f), want);
                assert_true(want < np);
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Quantize / dequantize against an element-by-element reference                            */
/* ---------------------------------------------------------------------------------------- */

static int32_t ref_code(float x, float s, int32_t zp, int64_t qmin, int64_t qmax, int torch) {
    float v = torch ? x * (1.0f / s) : x / s;
    double r = nearbyint((double)v) + zp;
    if (r < (double)qmin) r = (double)qmin;
    if (r > (double)qmax) r = (double)qmax;
    return (int32_t)r;
}

static void check_against_definition(tm_granularity kind, int ndim, const int64_t *shape,
                                     int axis, int64_t gs, tm_dtype dt, int torch) {
    tm_qgran g = {.kind = kind, .axis = axis, .group_size = gs, .block_h = 5, .block_w = 6};
    int64_t np, n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    assert_int_equal(tm_qgran_param_shape(&g, ndim, shape, NULL, NULL, &np, NULL), TM_OK);
    float *x = malloc((size_t)n * sizeof(float)), *s = malloc((size_t)np * sizeof(float));
    float *deq = malloc((size_t)n * sizeof(float));
    int32_t *zp = malloc((size_t)np * sizeof(int32_t));
    uint8_t *codes = malloc((size_t)n);
    const tm_dtype_traits *t = tm_dtype_get(dt);
    for (int64_t p = 0; p < np; p++) {
        s[p] = 0.01f + tq_rng_unit();
        zp[p] = (int32_t)(t->qmin + (int64_t)(tq_rng_u64() % (uint64_t)(t->qmax - t->qmin + 1)));
    }
    for (int64_t i = 0; i < n; i++) x[i] = tq_rng_normal() * 40.0f;
    tm_qparams qp = {.code_dtype = dt, .qmin = t->qmin, .qmax = t->qmax, .gran = g,
                     .n_params = np, .scale = s, .zero_point = zp,
                     .convention = torch ? TM_CONV_TORCH : TM_CONV_ONNX};
    /* in three uneven chunks, to cross run boundaries */
    int64_t cut1 = n / 3 + 1, cut2 = 2 * n / 3 + 2;
    assert_int_equal(tm_quantize_f32(&qp, ndim, shape, x, 0, cut1, codes, NULL, NULL), TM_OK);
    assert_int_equal(tm_quantize_f32(&qp, ndim, shape, x + cut1, cut1, cut2 - cut1, codes + cut1,
                                     NULL, NULL), TM_OK);
    assert_int_equal(tm_quantize_f32(&qp, ndim, shape, x + cut2, cut2, n - cut2, codes + cut2,
                                     NULL, NULL), TM_OK);
    assert_int_equal(tm_dequantize(&qp, ndim, shape, codes, 0, n, deq, NULL), TM_OK);
    for (int64_t i = 0; i < n; i++) {
        int64_t p = tm_qgran_param_index(&g, ndim, shape, i);
        int32_t want = ref_code(x[i], s[p], zp[p], t->qmin, t->qmax, torch);
        assert_int_equal(tq_code_at(codes, i, dt), want);
        assert_int_equal(tmv_f32_bits(deq[i]), tmv_f32_bits((float)(want - zp[p]) * s[p]));
    }
    free(x);
    free(s);
    free(deq);
    free(zp);
    free(codes);
}

static void test_quantize_matches_definition_every_granularity(void **state) {
    (void)state;
    const int64_t s2[2] = {9, 70}, s3[3] = {3, 11, 37}, s1[1] = {50};
    const tm_dtype dts[4] = {TM_I8, TM_U8, TM_I4, TM_U4};
    for (int d = 0; d < 4; d++) {
        for (int torch = 0; torch < 2; torch++) {
            check_against_definition(TM_GRAN_TENSOR, 2, s2, 0, 1, dts[d], torch);
            check_against_definition(TM_GRAN_CHANNEL, 2, s2, 0, 1, dts[d], torch);
            check_against_definition(TM_GRAN_CHANNEL, 2, s2, -1, 1, dts[d], torch);
            check_against_definition(TM_GRAN_CHANNEL, 3, s3, 1, 1, dts[d], torch);
            check_against_definition(TM_GRAN_GROUP, 2, s2, 1, 32, dts[d], torch);
            check_against_definition(TM_GRAN_GROUP, 2, s2, 0, 4, dts[d], torch);
            check_against_definition(TM_GRAN_GROUP, 3, s3, 2, 8, dts[d], torch);
            check_against_definition(TM_GRAN_GROUP, 3, s3, 1, 3, dts[d], torch);
            check_against_definition(TM_GRAN_BLOCK, 2, s2, 0, 1, dts[d], torch);
            check_against_definition(TM_GRAN_BLOCK, 3, s3, 0, 1, dts[d], torch);
            check_against_definition(TM_GRAN_TENSOR, 1, s1, 0, 1, dts[d], torch);
        }
    }
}

static void test_quantize_rejects_bad_params(void **state) {
    (void)state;
    const int64_t shape[2] = {2, 4};
    float x[8] = {0}, s[2] = {1.0f, 0.0f};
    int32_t zp[2] = {0, 0};
    uint8_t c[8];
    tm_err err;
    tm_qparams qp = {.code_dtype = TM_I8, .qmin = -128, .qmax = 127,
                     .gran = {.kind = TM_GRAN_CHANNEL, .axis = 0}, .n_params = 2, .scale = s,
                     .zero_point = zp};
    assert_int_equal(tm_quantize_f32(&qp, 2, shape, x, 0, 8, c, NULL, &err), TM_E_INVALID_ARG);
    assert_non_null(strstr(err.msg, "scale[1]"));
    s[1] = 1.0f;
    zp[1] = 200;
    assert_int_equal(tm_quantize_f32(&qp, 2, shape, x, 0, 8, c, NULL, &err), TM_E_INVALID_ARG);
    assert_non_null(strstr(err.msg, "zero_point[1]"));
    zp[1] = 0;
    qp.n_params = 1;
    assert_int_equal(tm_quantize_f32(&qp, 2, shape, x, 0, 8, c, NULL, &err), TM_E_INVALID_ARG);
    qp.n_params = 2;
    assert_int_equal(tm_quantize_f32(&qp, 2, shape, x, 4, 5, c, NULL, &err), TM_E_INVALID_ARG);
    qp.code_dtype = TM_F32;
    assert_int_equal(tm_quantize_f32(&qp, 2, shape, x, 0, 8, c, NULL, &err), TM_E_INVALID_ARG);
    qp.code_dtype = TM_I4; /* qmin/qmax outside int4 */
    assert_int_equal(tm_quantize_f32(&qp, 2, shape, x, 0, 8, c, NULL, &err), TM_E_INVALID_ARG);
    qp.code_dtype = TM_I8;
    assert_int_equal(tm_quantize_f32(&qp, 2, shape, x, 0, 8, c, NULL, &err), TM_OK);
}

static void test_empty_tensors(void **state) {
    (void)state;
    const int64_t shape[2] = {0, 5};
    int64_t np;
    for (int k = 0; k < TM_GRAN_COUNT; k++) {
        tm_qgran g = {.kind = (tm_granularity)k, .axis = 0, .group_size = 2, .block_h = 2, .block_w = 2};
        assert_int_equal(tm_qgran_param_shape(&g, 2, shape, NULL, NULL, &np, NULL), TM_OK);
        float s = 1.0f;
        tm_qparams qp = {.code_dtype = TM_I8, .qmin = -128, .qmax = 127, .gran = g,
                         .n_params = np, .scale = &s};
        assert_int_equal(tm_quantize_f32(&qp, 2, shape, NULL, 0, 0, NULL, NULL, NULL), TM_OK);
        assert_int_equal(tm_dequantize(&qp, 2, shape, NULL, 0, 0, NULL, NULL), TM_OK);
    }
    tm_packing pk = {.container = TM_I32, .bits = 4, .offset = 8, .lsb_first = 1};
    assert_int_equal(tm_pack_codes(&pk, TM_I4, NULL, 0, 7, NULL, NULL), TM_OK);
    assert_int_equal(tm_pack_codes_dim0(&pk, TM_I4, NULL, 3, 0, NULL, NULL), TM_OK);
    assert_int_equal(tm_packed_row_bytes(&pk, 0), 0);
    /* a scalar (ndim 0) tensor */
    float x = 1.26f, s = 0.5f, out;
    uint8_t c;
    tm_qparams qp = {.code_dtype = TM_I8, .qmin = -128, .qmax = 127,
                     .gran = {.kind = TM_GRAN_TENSOR}, .n_params = 1, .scale = &s};
    assert_int_equal(tm_quantize_f32(&qp, 0, NULL, &x, 0, 1, &c, NULL, NULL), TM_OK);
    assert_int_equal((int8_t)c, 3);
    assert_int_equal(tm_dequantize(&qp, 0, NULL, &c, 0, 1, &out, NULL), TM_OK);
    assert_true(out == 1.5f);
}

static void test_quantize_nonfinite(void **state) {
    (void)state;
    const int64_t shape[1] = {8};
    float x[8] = {1.0f, NAN, 2.0f, INFINITY, -INFINITY, 1e30f, -1e30f, 0.0f};
    float s = 0.01f;
    int32_t zp = 128;
    uint8_t c[8];
    memset(c, 0xAA, sizeof c);
    tm_err err;
    tm_qparams qp = {.code_dtype = TM_U8, .qmin = 0, .qmax = 255, .gran = {.kind = TM_GRAN_TENSOR},
                     .n_params = 1, .scale = &s, .zero_point = &zp, .convention = TM_CONV_TORCH};
    assert_int_equal(tm_quantize_f32(&qp, 1, shape, x + 1, 1, 7, c, NULL, &err), TM_E_NONFINITE);
    assert_non_null(strstr(err.msg, "3 non-finite"));
    assert_non_null(strstr(err.msg, "flat index 1"));
    assert_int_equal(c[0], 0xAA); /* nothing written */
    int64_t first;
    assert_int_equal(tm_count_nonfinite(x, 8, &first), 3);
    assert_int_equal(first, 1);
    assert_int_equal(tm_count_nonfinite(x + 5, 3, &first), 0);
    assert_int_equal(first, -1);
    qp.allow_nonfinite = 1;
    tm_qstats st;
    tm_qstats_init(&st, 0, NULL, NULL);
    assert_int_equal(tm_quantize_f32(&qp, 1, shape, x, 0, 8, c, &st, &err), TM_OK);
    const uint8_t want[8] = {228, 128, 255, 255, 0, 255, 0, 128};
    assert_memory_equal(c, want, 8);
    assert_int_equal(st.n_nonfinite, 3);
    assert_int_equal(st.first_nonfinite, 1);
    assert_int_equal(st.n, 5);
    assert_int_equal(st.n_clipped, 3); /* 2.0 (2.0/0.01 = 200 > 127.5 + zp), +-1e30 */
    /* fp8: NaN -> 0, inf -> +-max */
    qp.code_dtype = TM_F8_E4M3;
    s = 1.0f;
    assert_int_equal(tm_quantize_f32(&qp, 1, shape, x, 0, 8, c, NULL, &err), TM_OK);
    assert_int_equal(c[1], 0x00);
    assert_int_equal(c[3], 0x7e);
    assert_int_equal(c[4], 0xfe);
    assert_int_equal(c[5], 0x7e);
}

/* ---------------------------------------------------------------------------------------- */
/* Statistics                                                                                */
/* ---------------------------------------------------------------------------------------- */

static void test_qstats_values_and_merge(void **state) {
    (void)state;
    const int64_t shape[2] = {2, 4};
    const float x[8] = {0.0f, 0.26f, -0.5f, 100.0f, 1.0f, 1.1f, -1.0f, 0.0f};
    const float s[2] = {0.5f, 0.25f};
    tm_qparams qp = {.code_dtype = TM_I8, .qmin = -128, .qmax = 127,
                     .gran = {.kind = TM_GRAN_CHANNEL, .axis = 0}, .n_params = 2, .scale = s,
                     .convention = TM_CONV_ONNX};
    uint8_t c[8];
    double ps[2];
    int64_t pn[2];
    tm_qstats st;
    tm_qstats_init(&st, 2, ps, pn);
    assert_int_equal(tm_quantize_f32(&qp, 2, shape, x, 0, 8, c, &st, NULL), TM_OK);
    /* row 0: codes 0, 1 (0.52 -> 1), -1, 127 (clipped: 100 > 127.5 * 0.5) */
    assert_int_equal((int8_t)c[1], 1);
    assert_int_equal((int8_t)c[3], 127);
    assert_int_equal(st.n, 8);
    assert_int_equal(st.n_clipped, 1);
    assert_int_equal(pn[0], 4);
    assert_int_equal(pn[1], 4);
    double e3 = 100.0 - 63.5;
    assert_true(st.max_abs_err == e3);
    assert_true(st.max_err_lsb == e3 / 0.5);
    double sx2 = 0;
    for (int i = 0; i < 8; i++) sx2 += (double)x[i] * (double)x[i];
    assert_true(fabs(st.sum_x2 - sx2) < 1e-9);
    double rmse;
    assert_int_equal(tm_qstats_worst_param(&st, &rmse), 0);
    assert_true(rmse > 36.0);
    /* chunks merged in order give the same counts and, here, the same sums */
    tm_qstats a, b;
    double pa[2], pb[2];
    int64_t na[2], nb[2];
    tm_qstats_init(&a, 2, pa, na);
    tm_qstats_init(&b, 2, pb, nb);
    assert_int_equal(tm_quantize_f32(&qp, 2, shape, x, 0, 3, c, &a, NULL), TM_OK);
    assert_int_equal(tm_quantize_f32(&qp, 2, shape, x + 3, 3, 5, c + 3, &b, NULL), TM_OK);
    tm_qstats_merge(&a, &b);
    assert_int_equal(a.n, st.n);
    assert_int_equal(a.n_clipped, st.n_clipped);
    assert_true(a.max_abs_err == st.max_abs_err);
    assert_true(fabs(a.sum_err2 - st.sum_err2) <= 1e-12 * st.sum_err2);
    assert_int_equal(na[0], 4);
    assert_int_equal(na[1], 4);
    /* a mismatched per-param array is refused */
    tm_qstats bad;
    tm_qstats_init(&bad, 1, pa, na);
    assert_int_equal(tm_quantize_f32(&qp, 2, shape, x, 0, 8, c, &bad, NULL), TM_E_INVALID_ARG);
}

/* ---------------------------------------------------------------------------------------- */
/* Conventions                                                                               */
/* ---------------------------------------------------------------------------------------- */

static void test_qparams_conventions(void **state) {
    (void)state;
    tm_qspec sp = tm_qspec_default();
    int64_t qmin, qmax;
    tm_qspec_range(&sp, &qmin, &qmax);
    assert_int_equal(qmin, -128);
    assert_int_equal(qmax, 127);
    assert_int_equal(sp.code_dtype, TM_I8);
    assert_int_equal(sp.gran.kind, TM_GRAN_CHANNEL);
    float s;
    int32_t zp;
    /* ONNX symmetric int8: amax / 127, zp 0 */
    assert_int_equal(tm_qparams_from_range(&sp, -2.0, 1.0, &s, &zp, NULL), TM_OK);
    assert_true(s == 2.0f / 127.0f);
    assert_int_equal(zp, 0);
    /* ONNX symmetric uint8: 2 amax / 255, zp 128 */
    sp.code_dtype = TM_U8;
    assert_int_equal(tm_qparams_from_range(&sp, -2.0, 1.0, &s, &zp, NULL), TM_OK);
    assert_true(s == 4.0f / 255.0f);
    assert_int_equal(zp, 128);
    /* ONNX all-zero: scale 1, zp 0 */
    assert_int_equal(tm_qparams_from_range(&sp, 0.0, 0.0, &s, &zp, NULL), TM_OK);
    assert_true(s == 1.0f);
    assert_int_equal(zp, 0);
    /* ONNX affine uint8 */
    sp.symmetric = 0;
    assert_int_equal(tm_qparams_from_range(&sp, -1.0, 3.0, &s, &zp, NULL), TM_OK);
    assert_true(s == 4.0f / 255.0f);
    assert_int_equal(zp, 64); /* 0 - round(-1 / (4/255)) = round(63.75) */
    /* TORCH symmetric qint8 divides by 127.5; all-zero gives eps */
    sp.convention = TM_CONV_TORCH;
    sp.symmetric = 1;
    sp.code_dtype = TM_I8;
    assert_int_equal(tm_qparams_from_range(&sp, -2.0, 1.0, &s, &zp, NULL), TM_OK);
    assert_true(s == 2.0f / 127.5f);
    assert_int_equal(tm_qparams_from_range(&sp, 0.0, 0.0, &s, &zp, NULL), TM_OK);
    assert_true(s == ldexpf(1.0f, -23));
    sp.code_dtype = TM_U8;
    assert_int_equal(tm_qparams_from_range(&sp, -2.0, 1.0, &s, &zp, NULL), TM_OK);
    assert_int_equal(zp, 128);
    assert_int_equal(tm_qparams_from_range_q(&sp, 0, 15, 1, -2.0, 1.0, &s, &zp, NULL), TM_OK);
    assert_int_equal(zp, 7);
    tm_qrange_torch_reduced(TM_I8, &qmin, &qmax);
    assert_int_equal(qmin, -64);
    assert_int_equal(qmax, 63);
    tm_qrange_torch_reduced(TM_U8, &qmin, &qmax);
    assert_int_equal(qmax, 127);
    tm_qrange_onnxruntime(TM_I8, 1, 0, &qmin, &qmax);
    assert_int_equal(qmin, -127);
    assert_int_equal(qmax, 127);
    tm_qrange_onnxruntime(TM_I8, 0, 1, &qmin, &qmax);
    assert_int_equal(qmin, -64);
    assert_int_equal(qmax, 64);
    tm_qrange_onnxruntime(TM_U4, 0, 1, &qmin, &qmax);
    assert_int_equal(qmax, 7);
    tm_qrange_onnxruntime(TM_I4, 1, 0, &qmin, &qmax);
    assert_int_equal(qmin, -8);
    /* ONNX symmetric int4: the spec vectors' amax / 7 (ORT would use 2 amax / 15) */
    sp = tm_qspec_default();
    sp.code_dtype = TM_I4;
    assert_int_equal(tm_qparams_from_range(&sp, -1.0, 0.7, &s, &zp, NULL), TM_OK);
    assert_true(s == 1.0f / 7.0f);
    /* ORT's symmetric int8 range gives the same scale */
    sp.code_dtype = TM_I8;
    assert_int_equal(tm_qparams_from_range_q(&sp, -127, 127, 0, -1.0, 0.7, &s, &zp, NULL), TM_OK);
    assert_true(s == 1.0f / 127.0f);
    /* fp8 */
    sp = tm_qspec_default();
    sp.code_dtype = TM_F8_E5M2;
    assert_int_equal(tm_qparams_from_range(&sp, -57344.0, 1.0, &s, &zp, NULL), TM_OK);
    assert_true(s == 1.0f);
    /* errors */
    tm_err err;
    sp = tm_qspec_default();
    assert_int_equal(tm_qparams_from_range(&sp, 1.0, -1.0, &s, &zp, &err), TM_E_INVALID_ARG);
    assert_int_equal(tm_qparams_from_range(&sp, NAN, 1.0, &s, &zp, &err), TM_E_INVALID_ARG);
    sp.symmetric = 0;
    assert_int_equal(tm_qparams_from_range(&sp, -3e38, 3e38, &s, &zp, &err), TM_E_RANGE);
}

static void test_qparams_scale_dtype(void **state) {
    (void)state;
    tm_qspec sp = tm_qspec_default();
    float s;
    int32_t zp;
    tm_err err;
    sp.scale_dtype = TM_F16;
    assert_int_equal(tm_qparams_from_range(&sp, -1.0, 0.3, &s, &zp, &err), TM_OK);
    assert_true(s == tm_f16_to_f32(tm_f32_to_f16(1.0f / 127.0f)));
    /* amax 1e7 / 127 = 78740 > 65504: f16 overflow is an error, never inf */
    assert_int_equal(tm_qparams_from_range(&sp, -1e7, 0.0, &s, &zp, &err), TM_E_RANGE);
    assert_non_null(strstr(err.msg, "F16"));
    /* vanishing: 1e-12/127 rounds to 0 in f16 */
    assert_int_equal(tm_qparams_from_range(&sp, -1e-12, 0.0, &s, &zp, &err), TM_E_RANGE);
    sp.scale_dtype = TM_BF16;
    assert_int_equal(tm_qparams_from_range(&sp, -1e7, 0.0, &s, &zp, &err), TM_OK);
    assert_true(s == tm_bf16_to_f32(tm_f32_to_bf16(1e7f / 127.0f)));
    /* the zero point is recomputed with the rounded scale */
    sp.scale_dtype = TM_F16;
    sp.symmetric = 0;
    sp.code_dtype = TM_U8;
    assert_int_equal(tm_qparams_from_range(&sp, -0.3, 0.7, &s, &zp, &err), TM_OK);
    assert_true(s == tm_f16_to_f32(tm_f32_to_f16(1.0f / 255.0f)));
    assert_int_equal(zp, (int32_t)(0 - nearbyintf(-0.3f / s)));
    sp.scale_dtype = TM_I8;
    assert_int_equal(tm_qparams_from_range(&sp, -0.3, 0.7, &s, &zp, &err), TM_E_INVALID_ARG);
}

/* ---------------------------------------------------------------------------------------- */
/* Packing                                                                                   */
/* ---------------------------------------------------------------------------------------- */

static void test_pack_worked_examples(void **state) {
    (void)state;
    /* compressed-tensors.md section 3 */
    const int8_t c4[10] = {1, 2, 3, 4, 5, 6, 7, 0, -1, -8};
    tm_packing pk = {.container = TM_I32, .bits = 4, .codes_per_container = 8, .packed_axis = 1,
                     .offset = 8, .lsb_first = 1};
    uint8_t out[8];
    assert_int_equal(tm_packed_row_bytes(&pk, 10), 8);
    assert_int_equal(tm_pack_codes(&pk, TM_I4, (const uint8_t *)c4, 1, 10, out, NULL), TM_OK);
    uint32_t w[2];
    memcpy(w, out, 8);
    assert_int_equal(w[0], 0x8FEDCBA9u);
    assert_int_equal(w[1], 0x00000007u);
    int8_t back[10];
    assert_int_equal(tm_unpack_codes(&pk, TM_I4, out, 1, 10, (uint8_t *)back, NULL), TM_OK);
    assert_memory_equal(back, c4, 10);
    int64_t code;
    uint64_t word;
    assert_int_equal(tm_unpack_one(&pk, TM_I4, out, 9, &code, &word), TM_OK);
    assert_int_equal(code, -8);
    assert_int_equal(word, 0x00000007u);
    assert_int_equal(tm_unpack_one(&pk, TM_I4, out, 7, &code, &word), TM_OK);
    assert_int_equal(code, 0);
    assert_int_equal(word, 0x8FEDCBA9u);
    const int8_t c8[5] = {1, -1, 127, -128, 5};
    pk.bits = 8;
    pk.codes_per_container = 4;
    pk.offset = 128;
    assert_int_equal(tm_pack_codes(&pk, TM_I8, (const uint8_t *)c8, 1, 5, out, NULL), TM_OK);
    memcpy(w, out, 8);
    assert_int_equal(w[0], 0x00FF7F81u);
    assert_int_equal(w[1], 0x00000085u);
    /* a 172-column int4 row: 22 words, the last half used */
    pk.bits = 4;
    pk.offset = 8;
    assert_int_equal(tm_packed_row_bytes(&pk, 172), 22 * 4);
    uint8_t row[172], packed[88];
    memset(row, 0xF9, sizeof row); /* -7 */
    assert_int_equal(tm_pack_codes(&pk, TM_I4, row, 1, 172, packed, NULL), TM_OK);
    assert_int_equal(packed[86], 0);
    assert_int_equal(packed[87], 0);
    assert_int_equal(packed[85], 0x11);
}

static void test_pack_round_trips_every_width(void **state) {
    (void)state;
    const tm_dtype conts[4] = {TM_I32, TM_U8, TM_I16, TM_I64};
    for (int ci = 0; ci < 4; ci++) {
        for (int bits = 1; bits <= 8; bits++) {
            for (int lsb = 0; lsb < 2; lsb++) {
                tm_packing pk = {.container = conts[ci], .bits = bits, .offset = (int64_t)1 << (bits - 1),
                                 .lsb_first = lsb};
                const int64_t rows = 5, cols = 23;
                uint8_t codes[5 * 23], back[5 * 23], buf[5 * 23 * 8];
                for (int i = 0; i < rows * cols; i++)
                    codes[i] = (uint8_t)(int8_t)((int)(tq_rng_u64() % (1u << bits)) - (1 << (bits - 1)));
                tm_status st = tm_pack_codes(&pk, TM_I8, codes, rows, cols, buf, NULL);
                if (!lsb && (tm_dtype_get(conts[ci])->bits % bits) != 0) {
                    assert_int_equal(st, TM_E_INVALID_ARG);
                    continue;
                }
                assert_int_equal(st, TM_OK);
                assert_int_equal(tm_unpack_codes(&pk, TM_I8, buf, rows, cols, back, NULL), TM_OK);
                assert_memory_equal(back, codes, sizeof codes);
                for (int64_t j = 0; j < cols; j++) {
                    int64_t code;
                    assert_int_equal(tm_unpack_one(&pk, TM_I8,
                                                   buf + 2 * tm_packed_row_bytes(&pk, cols), j,
                                                   &code, NULL), TM_OK);
                    assert_int_equal(code, (int8_t)codes[2 * cols + j]);
                }
                memset(buf, 0, sizeof buf);
                assert_int_equal(tm_pack_codes_dim0(&pk, TM_I8, codes, rows, cols, buf, NULL), TM_OK);
                memset(back, 0, sizeof back);
                assert_int_equal(tm_unpack_codes_dim0(&pk, TM_I8, buf, rows, cols, back, NULL), TM_OK);
                assert_memory_equal(back, codes, sizeof codes);
            }
        }
    }
    /* dim-0 layout: [ceil(rows*bits/32), cols] words; column c's stream in words (k, c) */
    tm_packing pk = {.container = TM_I32, .bits = 4, .offset = 8, .lsb_first = 1};
    int8_t zp[9 * 2];
    for (int r = 0; r < 9; r++) {
        zp[2 * r] = (int8_t)(r - 4);
        zp[2 * r + 1] = (int8_t)(3 - r);
    }
    uint32_t words[4];
    assert_int_equal(tm_pack_codes_dim0(&pk, TM_I4, (const uint8_t *)zp, 9, 2, words, NULL), TM_OK);
    assert_int_equal(words[0], 0xBA987654u); /* column 0, rows 0..7: r-4+8 = r+4 */
    assert_int_equal(words[2], 0x0000000Cu); /* column 0, row 8 */
    assert_int_equal(words[1], 0x456789ABu); /* column 1: 11-r */
    assert_int_equal(words[3], 0x00000003u);
    /* bad packings */
    pk.bits = 9;
    assert_int_equal(tm_pack_codes(&pk, TM_I8, (const uint8_t *)zp, 1, 2, words, NULL), TM_E_INVALID_ARG);
    pk.bits = 4;
    pk.container = TM_F32;
    assert_int_equal(tm_pack_codes(&pk, TM_I8, (const uint8_t *)zp, 1, 2, words, NULL), TM_E_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qgran_param_shape),
        cmocka_unit_test(test_qgran_param_index_matches_definition),
        cmocka_unit_test(test_quantize_matches_definition_every_granularity),
        cmocka_unit_test(test_quantize_rejects_bad_params),
        cmocka_unit_test(test_empty_tensors),
        cmocka_unit_test(test_quantize_nonfinite),
        cmocka_unit_test(test_qstats_values_and_merge),
        cmocka_unit_test(test_qparams_conventions),
        cmocka_unit_test(test_qparams_scale_dtype),
        cmocka_unit_test(test_pack_worked_examples),
        cmocka_unit_test(test_pack_round_trips_every_width),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
