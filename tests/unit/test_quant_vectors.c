/*
** test_quant_vectors.c: the quantizer on the reference vectors of ../shared/vectors: the
** families onnx, torch_quantize, torch_fake_quantize and spec (all but spec/gguf_*, which
** belong to the GGUF codec's tests). Split from test_quant.c.
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

static tm_dtype code_dtype_of(const tmv_npy *a) {
    if (a->kind == 'i' && a->itemsize == 1) return TM_I8;
    if (a->kind == 'u' && a->itemsize == 1) return TM_U8;
    fail_msg("unexpected code array dtype %c%d", a->kind, a->itemsize);
    return TM_U8;
}

/* ---------------------------------------------------------------------------------------- */
/* Vector families                                                                           */
/* ---------------------------------------------------------------------------------------- */

/* per-axis when the scale has more than one element (ONNX), else per-tensor */
static tm_qgran gran_for(const tmv_npy *scale, int axis) {
    tm_qgran g = {.kind = scale->n > 1 ? TM_GRAN_CHANNEL : TM_GRAN_TENSOR, .axis = axis};
    return g;
}

static void onnx_case(const char *name, json_t *cj) {
    if (!tmv_case_has_file("onnx", name, "scale.npy"))
        fail_msg("onnx/%s: new case layout without a handler", name);
    int axis = (int)json_integer_value(json_object_get(json_object_get(cj, "params"), "axis"));
    const char *op = json_string_value(json_object_get(json_object_get(cj, "params"), "op"));
    int is_dq = strncmp(name, "dql_", 4) == 0 || (op && strcmp(op, "DequantizeLinear") == 0);
    tmv_npy in, sc, zpa = {0};
    tmv_case_npy("onnx", name, "input.npy", &in);
    tmv_case_npy("onnx", name, "scale.npy", &sc);
    int has_zp = tmv_case_has_file("onnx", name, "zero_point.npy");
    if (has_zp) tmv_case_npy("onnx", name, "zero_point.npy", &zpa);
    float *s = tmv_npy_as_f32(&sc);
    int32_t *zp = malloc((size_t)sc.n * sizeof(int32_t));
    for (int64_t i = 0; i < sc.n; i++) zp[i] = has_zp ? (int32_t)tmv_npy_get_i64(&zpa, i) : 0;
    tm_qparams qp = {.gran = gran_for(&sc, axis), .n_params = sc.n, .scale = s,
                     .zero_point = has_zp ? zp : NULL, .convention = TM_CONV_ONNX};
    tm_err err;
    if (is_dq) {
        tmv_npy ex;
        tmv_case_npy("onnx", name, "expected.npy", &ex);
        qp.code_dtype = code_dtype_of(&in);
        qp.qmin = tm_dtype_get(qp.code_dtype)->qmin;
        qp.qmax = tm_dtype_get(qp.code_dtype)->qmax;
        float *out = malloc((size_t)in.n * sizeof(float));
        assert_int_equal(tm_dequantize(&qp, in.ndim, in.shape, in.data, 0, in.n, out, &err), TM_OK);
        for (int64_t i = 0; i < in.n; i++) assert_int_equal(tmv_f32_bits(out[i]), tmv_npy_f32_bits(&ex, i));
        free(out);
        tmv_npy_free(&ex);
    } else {
        tmv_npy ex, ed = {0};
        const char *qfile =
            tmv_case_has_file("onnx", name, "expected_q.npy") ? "expected_q.npy" : "expected.npy";
        tmv_case_npy("onnx", name, qfile, &ex);
        qp.code_dtype = code_dtype_of(&ex);
        qp.qmin = tm_dtype_get(qp.code_dtype)->qmin;
        qp.qmax = tm_dtype_get(qp.code_dtype)->qmax;
        float *x = tmv_npy_as_f32(&in);
        uint8_t *codes = malloc((size_t)in.n);
        assert_int_equal(tm_quantize_f32(&qp, in.ndim, in.shape, x, 0, in.n, codes, NULL, &err), TM_OK);
        assert_memory_equal(codes, ex.data, (size_t)in.n);
        if (tmv_case_has_file("onnx", name, "expected_dequant.npy")) {
            tmv_case_npy("onnx", name, "expected_dequant.npy", &ed);
            float *out = malloc((size_t)in.n * sizeof(float));
            assert_int_equal(tm_dequantize(&qp, in.ndim, in.shape, codes, 0, in.n, out, &err), TM_OK);
            for (int64_t i = 0; i < in.n; i++) assert_int_equal(tmv_f32_bits(out[i]), tmv_npy_f32_bits(&ed, i));
            free(out);
            tmv_npy_free(&ed);
        }
        /* the reciprocal cases must differ from the torch convention on every element */
        if (strncmp(name, "ql_recip_vs_div_", 16) == 0) {
            uint8_t *tc = malloc((size_t)in.n);
            qp.convention = TM_CONV_TORCH;
            assert_int_equal(tm_quantize_f32(&qp, in.ndim, in.shape, x, 0, in.n, tc, NULL, &err), TM_OK);
            for (int64_t i = 0; i < in.n; i++) assert_int_not_equal(tc[i], codes[i]);
            free(tc);
        }
        free(x);
        free(codes);
        tmv_npy_free(&ex);
    }
    free(s);
    free(zp);
    tmv_npy_free(&in);
    tmv_npy_free(&sc);
    if (has_zp) tmv_npy_free(&zpa);
}

static void test_vectors_onnx(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    int n = tmv_run_cases("onnx", NULL, onnx_case);
    printf("onnx: %d of %d cases checked\n", n, n);
}

static tm_dtype torch_dtype(const char *d) {
    if (strcmp(d, "qint8") == 0) return TM_I8;
    if (strcmp(d, "quint8") == 0) return TM_U8;
    if (strcmp(d, "quint4x2") == 0) return TM_U4;
    fail_msg("unknown torch dtype %s", d);
    return TM_U8;
}

/* per-tensor torch params: params.scale and params.zero_point into malloc'd one-element arrays */
static void torch_tensor_params(json_t *pr, float **s, int32_t **zp) {
    *s = malloc(sizeof(float));
    *zp = malloc(sizeof(int32_t));
    (*s)[0] = (float)json_number_value(json_object_get(pr, "scale"));
    (*zp)[0] = (int32_t)json_integer_value(json_object_get(pr, "zero_point"));
}

static void torch_quantize_case(const char *name, json_t *cj) {
    json_t *pr = json_object_get(cj, "params");
    tm_dtype dt = torch_dtype(json_string_value(json_object_get(pr, "dtype")));
    tmv_npy in, eq, ed;
    tmv_case_npy("torch_quantize", name, "input.npy", &in);
    int per_channel = tmv_case_has_file("torch_quantize", name, "scales.npy");
    float *s;
    int32_t *zp;
    int64_t np = 1;
    tm_qgran g = {.kind = TM_GRAN_TENSOR};
    double *s64 = NULL;
    if (per_channel) {
        tmv_npy sa, za;
        tmv_case_npy("torch_quantize", name, "scales.npy", &sa);
        tmv_case_npy("torch_quantize", name, "zero_points.npy", &za);
        np = sa.n;
        s = malloc((size_t)np * sizeof(float));
        s64 = malloc((size_t)np * sizeof(double));
        zp = malloc((size_t)np * sizeof(int32_t));
        for (int64_t i = 0; i < np; i++) {
            s64[i] = tmv_npy_get_f64(&sa, i);
            s[i] = (float)s64[i]; /* torch casts the float64 scales to float32 to quantize */
            zp[i] = (int32_t)tmv_npy_get_i64(&za, i);
        }
        g.kind = TM_GRAN_CHANNEL;
        g.axis = (int)json_integer_value(json_object_get(pr, "axis"));
        tmv_npy_free(&sa);
        tmv_npy_free(&za);
    } else {
        torch_tensor_params(pr, &s, &zp);
    }
    tm_qparams qp = {.code_dtype = dt, .qmin = json_integer_value(json_object_get(pr, "qmin")),
                     .qmax = json_integer_value(json_object_get(pr, "qmax")), .gran = g,
                     .n_params = np, .scale = s, .zero_point = zp, .convention = TM_CONV_TORCH};
    float *x = tmv_npy_as_f32(&in);
    uint8_t *codes = malloc((size_t)in.n);
    float *deq = malloc((size_t)in.n * sizeof(float));
    tm_err err;
    assert_int_equal(tm_quantize_f32(&qp, in.ndim, in.shape, x, 0, in.n, codes, NULL, &err), TM_OK);
    assert_int_equal(tm_dequantize(&qp, in.ndim, in.shape, codes, 0, in.n, deq, &err), TM_OK);
    const char *qfile = dt == TM_U4 ? "expected_codes.npy" : "expected_q.npy";
    tmv_case_npy("torch_quantize", name, qfile, &eq);
    tmv_case_npy("torch_quantize", name, "expected_dequant.npy", &ed);
    for (int64_t i = 0; i < in.n; i++) assert_int_equal(tq_code_at(codes, i, dt), tmv_npy_get_i64(&eq, i));
    int nonf32 = strcmp(name, "qpc_qint8_nonf32_scales") == 0;
    for (int64_t i = 0; i < in.n; i++) {
        if (!nonf32) {
            assert_int_equal(tmv_f32_bits(deq[i]), tmv_npy_f32_bits(&ed, i));
        } else {
            /* KNOWINGLY NOT BIT-EXACT: torch's per-channel dequantize multiplies by the float64
            ** scale; we store and multiply float32 scales (README: "Tensormorph should store
            ** scales as float32"). Check torch's formula and that we are within 1 ulp of it. */
            int64_t p = tm_qgran_param_index(&g, in.ndim, in.shape, i);
            float torch_v = (float)((double)(tq_code_at(codes, i, dt) - zp[p]) * s64[p]);
            assert_int_equal(tmv_f32_bits(torch_v), tmv_npy_f32_bits(&ed, i));
            float e = tmv_npy_f32_bits(&ed, i) == tmv_f32_bits(deq[i]) ? 0.0f : fabsf(deq[i] - torch_v);
            assert_true(e <= fabsf(nextafterf(torch_v, INFINITY) - torch_v) * 1.0001f);
        }
    }
    if (dt == TM_U4) { /* quint4x2: element 2i in bits 0-3, 2i+1 in 4-7, odd tail nibble 0 */
        tmv_npy ep;
        tmv_case_npy("torch_quantize", name, "expected_packed.npy", &ep);
        tm_packing pk = {.container = TM_U8, .bits = 4, .codes_per_container = 2, .packed_axis = 0,
                         .offset = 0, .lsb_first = 1};
        uint8_t *packed = malloc((size_t)ep.n);
        assert_int_equal(tm_packed_row_bytes(&pk, in.n), (uint64_t)ep.n);
        assert_int_equal(tm_pack_codes(&pk, TM_U4, codes, 1, in.n, packed, &err), TM_OK);
        assert_memory_equal(packed, ep.data, (size_t)ep.n);
        free(packed);
        tmv_npy_free(&ep);
    }
    free(s);
    free(s64);
    free(zp);
    free(x);
    free(codes);
    free(deq);
    tmv_npy_free(&in);
    tmv_npy_free(&eq);
    tmv_npy_free(&ed);
}

static void test_vectors_torch_quantize(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    static const char *const kinds[] = {"qpt_", "qpc_", NULL};
    int n = tmv_run_cases("torch_quantize", kinds, torch_quantize_case);
    printf("torch_quantize: %d of %d cases checked (qpc_qint8_nonf32_scales: codes exact, "
           "dequant within 1 ulp of torch's float64-scale product)\n", n, n);
}

static void fake_quantize_case(const char *name, json_t *cj) {
    json_t *pr = json_object_get(cj, "params");
    int64_t qmin = json_integer_value(json_object_get(pr, "quant_min"));
    int64_t qmax = json_integer_value(json_object_get(pr, "quant_max"));
    tm_dtype dt = qmin < 0 ? (qmin >= -8 && qmax <= 7 ? TM_I4 : TM_I8) : (qmax <= 15 ? TM_U4 : TM_U8);
    tmv_npy in, ex;
    tmv_case_npy("torch_fake_quantize", name, "input.npy", &in);
    tmv_case_npy("torch_fake_quantize", name, "expected.npy", &ex);
    float *s;
    int32_t *zp;
    int64_t np = 1;
    tm_qgran g = {.kind = TM_GRAN_TENSOR};
    if (tmv_case_has_file("torch_fake_quantize", name, "scale.npy")) {
        tmv_npy sa, za;
        tmv_case_npy("torch_fake_quantize", name, "scale.npy", &sa);
        tmv_case_npy("torch_fake_quantize", name, "zero_point.npy", &za);
        np = sa.n;
        s = tmv_npy_as_f32(&sa);
        zp = malloc((size_t)np * sizeof(int32_t));
        for (int64_t i = 0; i < np; i++) zp[i] = (int32_t)tmv_npy_get_i64(&za, i);
        g.kind = TM_GRAN_CHANNEL;
        g.axis = (int)json_integer_value(json_object_get(pr, "axis"));
        tmv_npy_free(&sa);
        tmv_npy_free(&za);
    } else {
        torch_tensor_params(pr, &s, &zp);
    }
    tm_qparams qp = {.code_dtype = dt, .qmin = qmin, .qmax = qmax, .gran = g, .n_params = np,
                     .scale = s, .zero_point = zp, .convention = TM_CONV_TORCH};
    float *x = tmv_npy_as_f32(&in), *y = malloc((size_t)in.n * sizeof(float));
    uint8_t *codes = malloc((size_t)in.n);
    assert_int_equal(tm_quantize_f32(&qp, in.ndim, in.shape, x, 0, in.n, codes, NULL, NULL), TM_OK);
    assert_int_equal(tm_dequantize(&qp, in.ndim, in.shape, codes, 0, in.n, y, NULL), TM_OK);
    for (int64_t i = 0; i < in.n; i++) assert_int_equal(tmv_f32_bits(y[i]), tmv_npy_f32_bits(&ex, i));
    free(s);
    free(zp);
    free(x);
    free(y);
    free(codes);
    tmv_npy_free(&in);
    tmv_npy_free(&ex);
}

static void test_vectors_torch_fake_quantize(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    static const char *const kinds[] = {"fq_", NULL};
    int n = tmv_run_cases("torch_fake_quantize", kinds, fake_quantize_case);
    printf("torch_fake_quantize: %d of %d cases checked\n", n, n);
}

/* ---- spec ---- */

/* qparams for every unit with a min/max observer through the calibration API, cross-checked
** against the stateless per-unit entry point. */
static void spec_qparams(const tm_qspec *sp, int ndim, const int64_t *shape, const float *x,
                         float *scale, int32_t *zp, int64_t *n_params) {
    tm_calib *c;
    tm_err err;
    assert_int_equal(tm_calib_create(sp, ndim, shape, &c, &err), TM_OK);
    assert_int_equal(tm_calib_update(c, ndim, shape, x, &err), TM_OK);
    assert_int_equal(tm_calib_qparams(c, scale, zp, &err), TM_OK);
    *n_params = tm_calib_n_params(c);
    tm_calib_free(c);
}

static void quantize_all(const tm_qspec *sp, int ndim, const int64_t *shape, const float *x,
                         int64_t n, const float *s, const int32_t *zp, int64_t np, uint8_t *codes,
                         float *deq) {
    int64_t qmin, qmax;
    tm_qspec_range(sp, &qmin, &qmax);
    tm_qparams qp = {.code_dtype = sp->code_dtype, .qmin = qmin, .qmax = qmax, .gran = sp->gran,
                     .n_params = np, .scale = s, .zero_point = zp, .convention = sp->convention};
    tm_err err;
    assert_int_equal(tm_quantize_f32(&qp, ndim, shape, x, 0, n, codes, NULL, &err), TM_OK);
    assert_int_equal(tm_dequantize(&qp, ndim, shape, codes, 0, n, deq, &err), TM_OK);
}

/* spec/allzero_channel_*: the checks of case.json, under both conventions */
static void spec_allzero_channel(const char *name, json_t *cj) {
    json_t *pr = json_object_get(cj, "params");
    const char *scheme = json_string_value(json_object_get(pr, "scheme"));
    int64_t zc = json_integer_value(json_object_get(pr, "zero_channel"));
    tmv_npy in;
    tmv_case_npy("spec", name, "input.npy", &in);
    float *x = tmv_npy_as_f32(&in);
    int64_t rows = in.shape[0], cols = in.n / rows;
    for (int conv = 0; conv < 2; conv++) {
        tm_qspec sp = tm_qspec_default();
        sp.convention = conv ? TM_CONV_TORCH : TM_CONV_ONNX;
        sp.gran = (tm_qgran){.kind = TM_GRAN_CHANNEL, .axis = 0};
        if (strcmp(scheme, "int8_symmetric") == 0) {
            sp.code_dtype = TM_I8;
            sp.symmetric = 1;
        } else if (strcmp(scheme, "uint8_affine") == 0) {
            sp.code_dtype = TM_U8;
            sp.symmetric = 0;
        } else {
            fail_msg("spec/%s: unknown scheme %s", name, scheme);
        }
        float *s = malloc((size_t)rows * sizeof(float)), *deq = malloc((size_t)in.n * sizeof(float));
        int32_t *zp = malloc((size_t)rows * sizeof(int32_t));
        uint8_t *codes = malloc((size_t)in.n);
        int64_t np;
        spec_qparams(&sp, in.ndim, in.shape, x, s, zp, &np);
        assert_int_equal(np, rows);
        quantize_all(&sp, in.ndim, in.shape, x, in.n, s, zp, np, codes, deq);
        for (int64_t r = 0; r < rows; r++) {
            assert_true(isfinite(s[r]) && s[r] > 0.0f); /* never 0, NaN, inf */
            for (int64_t j = 0; j < cols; j++) {
                int64_t i = r * cols + j;
                if (r == zc) {
                    assert_int_equal(tq_code_at(codes, i, sp.code_dtype), zp[r]);
                    assert_true(deq[i] == 0.0f); /* +0.0 or -0.0 */
                } else {
                    /* torch symmetric divides by 127.5: +amax lands on 127.5 and is clamped
                    ** to 127, so its error is half a step plus the float rounding of x/s;
                    ** the strict check applies to our default (ONNX) scheme */
                    double e = fabs((double)deq[i] - (double)x[i]);
                    double tol = (double)s[r] / 2 + (conv ? 2.0 * (nextafterf(x[i], INFINITY) - x[i]) : 0.0);
                    if (!(e <= tol))
                        fail_msg("spec/%s (%s): channel %lld element %lld: |deq - x| = %.9g > "
                                 "scale/2 = %.9g (x %.9g, scale %.9g)", name,
                                 conv ? "torch" : "onnx", (long long)r, (long long)j, e,
                                 (double)s[r] / 2, (double)x[i], (double)s[r]);
                }
            }
        }
        free(s);
        free(deq);
        free(zp);
        free(codes);
    }
    free(x);
    tmv_npy_free(&in);
}

/* spec/constant_tensor_*: per-tensor affine uint8 */
static void spec_constant(const char *name, json_t *cj) {
    tmv_npy in;
    tmv_case_npy("spec", name, "input.npy", &in);
    float *x = tmv_npy_as_f32(&in);
    json_t *inf = json_object_get(json_object_get(cj, "informative"), "torch_1.13_MinMaxObserver(quint8, affine)");
    for (int conv = 0; conv < 2; conv++) {
        tm_qspec sp = tm_qspec_default();
        sp.convention = conv ? TM_CONV_TORCH : TM_CONV_ONNX;
        sp.code_dtype = TM_U8;
        sp.symmetric = 0;
        sp.gran.kind = TM_GRAN_TENSOR;
        float s, *deq = malloc((size_t)in.n * sizeof(float));
        int32_t zp;
        int64_t np;
        uint8_t *codes = malloc((size_t)in.n);
        spec_qparams(&sp, in.ndim, in.shape, x, &s, &zp, &np);
        assert_true(isfinite(s) && s > 0.0f);
        assert_true(zp >= 0 && zp <= 255);
        quantize_all(&sp, in.ndim, in.shape, x, in.n, &s, &zp, 1, codes, deq);
        for (int64_t i = 0; i < in.n; i++) {
            assert_true(fabs((double)deq[i] - (double)x[i]) <= (double)s / 2);
            assert_int_equal(codes[i], codes[0]);
        }
        if (conv && inf) /* torch's scale, as the informative record gives it */
            assert_true(s == (float)json_number_value(json_object_get(inf, "scale")));
        free(deq);
        free(codes);
    }
    free(x);
    tmv_npy_free(&in);
}

static void spec_pack_odd(const char *name) {
    tmv_npy in, ep;
    tmv_case_npy("spec", name, "input.npy", &in);
    tmv_case_npy("spec", name, "expected_packed.npy", &ep);
    tm_packing pk = {.container = TM_U8, .bits = 4, .codes_per_container = 2, .packed_axis = 0,
                     .offset = 0, .lsb_first = 1};
    uint8_t out[64], back[128];
    assert_int_equal(tm_packed_row_bytes(&pk, in.n), (uint64_t)ep.n);
    assert_int_equal(tm_pack_codes(&pk, TM_I4, in.data, 1, in.n, out, NULL), TM_OK);
    assert_memory_equal(out, ep.data, (size_t)ep.n);
    assert_int_equal(tm_unpack_codes(&pk, TM_I4, out, 1, in.n, back, NULL), TM_OK);
    assert_memory_equal(back, in.data, (size_t)in.n);
    tmv_npy_free(&in);
    tmv_npy_free(&ep);
}

/* per-group / block cases: scale, zero point, codes, dequant and packed, all exact */
static void spec_grouped(const char *name, json_t *cj) {
    json_t *pr = json_object_get(cj, "params");
    tmv_npy in, es, ec, ed;
    tmv_case_npy("spec", name, "input.npy", &in);
    tmv_case_npy("spec", name, "expected_scale.npy", &es);
    tmv_case_npy("spec", name, "expected_codes.npy", &ec);
    tmv_case_npy("spec", name, "expected_dequant.npy", &ed);
    tm_qspec sp = tm_qspec_default();
    tm_dtype dt;
    assert_int_equal(tm_dtype_from_name(json_string_value(json_object_get(pr, "dtype")), &dt), TM_OK);
    sp.code_dtype = dt;
    sp.symmetric = json_is_false(json_object_get(pr, "symmetric")) ? 0 : 1;
    json_t *block = json_object_get(pr, "block");
    if (block) {
        sp.gran = (tm_qgran){.kind = TM_GRAN_BLOCK,
                             .block_h = json_integer_value(json_array_get(block, 0)),
                             .block_w = json_integer_value(json_array_get(block, 1))};
    } else {
        sp.gran = (tm_qgran){.kind = TM_GRAN_GROUP,
                             .axis = (int)json_integer_value(json_object_get(pr, "axis")),
                             .group_size = json_integer_value(json_object_get(pr, "group_size"))};
    }
    if (json_object_get(pr, "qmin")) {
        int64_t qmin, qmax;
        tm_qspec_range(&sp, &qmin, &qmax);
        assert_int_equal(qmin, json_integer_value(json_object_get(pr, "qmin")));
        assert_int_equal(qmax, json_integer_value(json_object_get(pr, "qmax")));
    }
    int pnd;
    int64_t ps[8], np;
    assert_int_equal(tm_qgran_param_shape(&sp.gran, in.ndim, in.shape, &pnd, ps, &np, NULL), TM_OK);
    assert_int_equal(pnd, es.ndim);
    for (int i = 0; i < pnd; i++) assert_int_equal(ps[i], es.shape[i]);
    float *x = tmv_npy_as_f32(&in), *s = malloc((size_t)np * sizeof(float));
    float *deq = malloc((size_t)in.n * sizeof(float));
    int32_t *zp = malloc((size_t)np * sizeof(int32_t));
    uint8_t *codes = malloc((size_t)in.n);
    int64_t n_units;
    spec_qparams(&sp, in.ndim, in.shape, x, s, zp, &n_units);
    assert_int_equal(n_units, np);
    for (int64_t p = 0; p < np; p++) assert_int_equal(tmv_f32_bits(s[p]), tmv_npy_f32_bits(&es, p));
    if (tmv_case_has_file("spec", name, "expected_zero_point.npy")) {
        tmv_npy ez;
        tmv_case_npy("spec", name, "expected_zero_point.npy", &ez);
        for (int64_t p = 0; p < np; p++) assert_int_equal(zp[p], tmv_npy_get_i64(&ez, p));
        tmv_npy_free(&ez);
    }
    quantize_all(&sp, in.ndim, in.shape, x, in.n, s, sp.symmetric ? NULL : zp, np, codes, deq);
    for (int64_t i = 0; i < in.n; i++) {
        assert_int_equal(tq_code_at(codes, i, dt), tmv_npy_get_i64(&ec, i));
        assert_int_equal(tmv_f32_bits(deq[i]), tmv_npy_f32_bits(&ed, i));
    }
    if (tmv_case_has_file("spec", name, "expected_packed.npy")) {
        /* "codes in C order, two per byte, element 2i in bits 0-3" */
        tmv_npy ep;
        tmv_case_npy("spec", name, "expected_packed.npy", &ep);
        tm_packing pk = {.container = TM_U8, .bits = 4, .codes_per_container = 2,
                         .packed_axis = in.ndim - 1, .offset = 0, .lsb_first = 1};
        int64_t rows = in.shape[0], cols = in.n / rows;
        assert_int_equal((uint64_t)rows * tm_packed_row_bytes(&pk, cols), (uint64_t)ep.n);
        uint8_t *packed = malloc((size_t)ep.n);
        assert_int_equal(tm_pack_codes(&pk, dt, codes, rows, cols, packed, NULL), TM_OK);
        assert_memory_equal(packed, ep.data, (size_t)ep.n);
        free(packed);
        tmv_npy_free(&ep);
    }
    free(x);
    free(s);
    free(deq);
    free(zp);
    free(codes);
    tmv_npy_free(&in);
    tmv_npy_free(&es);
    tmv_npy_free(&ec);
    tmv_npy_free(&ed);
}

/* spec/nonfinite_inputs: refuse with count and first index; or count when asked to go on */
static void spec_nonfinite(const char *name, json_t *cj) {
    tmv_npy in, em;
    tmv_case_npy("spec", name, "input.npy", &in);
    tmv_case_npy("spec", name, "expected_nonfinite_mask.npy", &em);
    float *x = tmv_npy_as_f32(&in);
    int64_t count = 0, first = -1;
    for (int64_t i = 0; i < in.n; i++) {
        int bad = !isfinite(x[i]);
        assert_int_equal(bad, tmv_npy_get_i64(&em, i));
        if (bad && first < 0) first = i;
        count += bad;
    }
    json_t *pos = json_object_get(json_object_get(cj, "params"), "positions");
    int64_t huge = json_integer_value(json_array_get(json_object_get(pos, "huge_finite_1e30"), 0));
    tm_err err;
    double lo, hi;
    tm_qspec sp = tm_qspec_default();
    sp.gran.kind = TM_GRAN_TENSOR;
    /* every observer refuses */
    for (int k = 0; k < TM_OBS_COUNT; k++) {
        sp.observer = tm_observer_default((tm_observer_kind)k);
        assert_int_equal(tm_observe_range(&sp, x, in.n, &lo, &hi, &err), TM_E_NONFINITE);
        char want[64];
        snprintf(want, sizeof want, "index %lld", (long long)first);
        assert_non_null(strstr(err.msg, want));
    }
    tm_calib *c;
    sp.observer = tm_observer_default(TM_OBS_MINMAX);
    assert_int_equal(tm_calib_create(&sp, in.ndim, in.shape, &c, NULL), TM_OK);
    assert_int_equal(tm_calib_update(c, in.ndim, in.shape, x, &err), TM_E_NONFINITE);
    tm_calib_free(c);
    /* quantize refuses, naming the count (4) and the first index (3), writing nothing */
    const tm_dtype dts[4] = {TM_I8, TM_U8, TM_F8_E4M3, TM_I4};
    for (int d = 0; d < 4; d++) {
        float s = 0.01f;
        int32_t zp = dts[d] == TM_U8 ? 128 : 0;
        int64_t qmin, qmax;
        sp.code_dtype = dts[d];
        tm_qspec_range(&sp, &qmin, &qmax);
        tm_qparams qp = {.code_dtype = dts[d], .qmin = qmin, .qmax = qmax, .gran = sp.gran,
                         .n_params = 1, .scale = &s, .zero_point = &zp};
        uint8_t *codes = malloc((size_t)in.n);
        memset(codes, 0x5A, (size_t)in.n);
        assert_int_equal(tm_quantize_f32(&qp, in.ndim, in.shape, x, 0, in.n, codes, NULL, &err),
                         TM_E_NONFINITE);
        char want[96];
        snprintf(want, sizeof want, "%lld non-finite values", (long long)count);
        assert_non_null(strstr(err.msg, want));
        snprintf(want, sizeof want, "flat index %lld", (long long)first);
        assert_non_null(strstr(err.msg, want));
        for (int64_t i = 0; i < in.n; i++) assert_int_equal(codes[i], 0x5A);
        /* asked to continue: counted, and 1e30 saturates to qmax (never qmin as torch) */
        qp.allow_nonfinite = 1;
        tm_qstats st;
        tm_qstats_init(&st, 0, NULL, NULL);
        assert_int_equal(tm_quantize_f32(&qp, in.ndim, in.shape, x, 0, in.n, codes, &st, &err), TM_OK);
        assert_int_equal(st.n_nonfinite, count);
        assert_int_equal(st.first_nonfinite, first);
        if (dts[d] == TM_F8_E4M3) assert_int_equal(codes[huge], 0x7e);
        else assert_int_equal(tq_code_at(codes, huge, dts[d]), qmax);
        free(codes);
    }
    /* 1e30 is finite: per-tensor min/max over the finite values gives a huge, valid scale */
    float *fin = malloc((size_t)in.n * sizeof(float));
    int64_t nf = 0;
    for (int64_t i = 0; i < in.n; i++)
        if (isfinite(x[i])) fin[nf++] = x[i];
    sp = tm_qspec_default();
    sp.gran.kind = TM_GRAN_TENSOR;
    assert_int_equal(tm_observe_range(&sp, fin, nf, &lo, &hi, &err), TM_OK);
    float s;
    assert_int_equal(tm_qparams_from_range(&sp, lo, hi, &s, NULL, &err), TM_OK);
    assert_true(isfinite(s) && s > 1e27f);
    free(fin);
    free(x);
    tmv_npy_free(&in);
    tmv_npy_free(&em);
}

static void test_vectors_spec(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char **names;
    int n = tmv_list_cases("spec", &names), checked = 0, elsewhere = 0;
    assert_true(n > 0);
    for (int i = 0; i < n; i++) {
        const char *c = names[i];
        json_t *cj = tmv_case_json("spec", c);
        assert_non_null(cj);
        if (strncmp(c, "gguf_", 5) == 0) {
            /* UNHANDLED HERE: GGUF block codecs are not part of quant/ (the GGUF engineer's
            ** tests own spec/gguf_*) */
            elsewhere++;
        } else if (strncmp(c, "allzero_channel_", 16) == 0) {
            spec_allzero_channel(c, cj);
            checked++;
        } else if (strncmp(c, "constant_tensor_", 16) == 0) {
            spec_constant(c, cj);
            checked++;
        } else if (strcmp(c, "int4_pack_odd_count") == 0) {
            spec_pack_odd(c);
            checked++;
        } else if (strstr(c, "per_group") || strcmp(c, "int8_block2d") == 0) {
            spec_grouped(c, cj);
            checked++;
        } else if (strcmp(c, "nonfinite_inputs") == 0) {
            spec_nonfinite(c, cj);
            checked++;
        } else {
            fail_msg("spec/%s: new case without a handler", c);
        }
        json_decref(cj);
    }
    printf("spec: %d of %d cases checked, %d (spec/gguf_*) left to the GGUF tests\n", checked, n,
           elsewhere);
    tmv_free_names(names, n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors_onnx),
        cmocka_unit_test(test_vectors_torch_quantize),
        cmocka_unit_test(test_vectors_torch_fake_quantize),
        cmocka_unit_test(test_vectors_spec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
