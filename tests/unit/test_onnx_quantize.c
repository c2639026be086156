/* test_onnx_quantize.c: ONNX weight quantization into ONNX, the numbers (src/job/onnx_job.c,
** src/formats/onnx_write.c): small models built with the protobuf-c code generated from
** onnx.proto (helpers/onnx_model.h), their outputs decoded again the same way and checked against
** an independent computation of the ONNX formulas: scale = max|x| / 127 (int8) or / 7 (int4) per
** unit, q = round_half_even(x / scale) clamped [ONNX QuantizeLinear]; uint8 per-tensor, each op's
** channel axis, int4 blocks, float16 weights, and the same bytes under every kernel set.
** The graph rewriting and opset strategies are in test_onnx_quantize_graph.c, the CLI in
** test_onnx_quantize_cli.c.
** `test_onnx_quantize --write-models DIR` only writes the generated models (tests/ort/run.sh
** feeds them to ONNX Runtime). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensormorph.h"
#include "tensormorph/onnx_quant.h"
#include "helpers/cli_run.h"
#include "helpers/onnx_model.h"
#include "helpers/vectors.h"

/* int8 per-channel on a MatMul weight [K, N]: axis 1, codes and scales exactly the formula's */
static void test_matmul_int8_channel_exact(void **state) {
    (void)state;
    g_rng = 1;
    float *w;
    const int64_t K = 24, N = 5;
    const char *in = matmul_model("mm13.onnx", K, N, 13, NULL, &w);
    const char *out = outp("mm13.q.onnx");
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, out, NULL, TM_OK, &err);
    assert_int_equal(r->n, 1);
    assert_int_equal(r->n_quantized, 1);
    assert_int_equal(r->strategy, TM_ONNX_OPSET_NATIVE);
    assert_int_equal(r->opset_to, 13);
    assert_int_equal(r->weights[0].gran.kind, TM_GRAN_CHANNEL);
    assert_int_equal(r->weights[0].gran.axis, 1);
    /* plain rounding: RMSE near 1/sqrt(12) LSB, never beyond half an LSB */
    assert_true(r->weights[0].e.rmse_lsb > 0.2 && r->weights[0].e.rmse_lsb < 0.36);
    assert_true(r->weights[0].e.max_err_lsb <= 0.5 + 1e-6);
    tm_onnx_quantize_result_free(r);

    loaded l = load(out);
    const Onnx__GraphProto *g = l.m->graph;
    assert_string_equal(l.m->doc_string, "a test model; this doc string must survive");
    assert_null(find_init(g, "W"));
    const Onnx__TensorProto *q = find_init(g, "W_quantized"), *s = find_init(g, "W_scale"),
                            *z = find_init(g, "W_zero_point");
    assert_non_null(q);
    assert_non_null(s);
    assert_non_null(z);
    assert_int_equal(q->data_type, 3); /* INT8 */
    assert_int_equal(z->data_type, 3);
    assert_int_equal(s->data_type, 1);
    assert_int_equal(s->n_dims, 1);
    assert_int_equal(s->dims[0], N);
    const Onnx__NodeProto *dq = find_node(g, "DequantizeLinear", "W");
    assert_non_null(dq);
    assert_true(!dq->domain || !*dq->domain);
    assert_int_equal(node_attr(dq, "axis", -99), 1);
    assert_string_equal(dq->input[0], "W_quantized");
    assert_string_equal(dq->input[1], "W_scale");
    assert_string_equal(dq->input[2], "W_zero_point");
    /* the MatMul still reads "W" */
    const Onnx__NodeProto *mm = find_node(g, "MatMul", "Y");
    assert_non_null(mm);
    assert_string_equal(mm->input[1], "W");
    check_int8_channels(q, s, w, N, K, 1, N);
    for (int64_t c = 0; c < N; c++) assert_int_equal((int8_t)z->raw_data.data[c], 0);
    unload(&l);

    /* tensormorph's own reader: one logical quantized tensor, per-channel axis 1, same scales */
    tm_file *f = NULL;
    assert_int_equal(tm_open(out, NULL, &f, &err), TM_OK);
    int64_t i = tm_file_find(f, "W_quantized");
    assert_true(i >= 0);
    const tm_tensor *t = tm_file_tensor(f, i);
    assert_non_null(t->quant);
    assert_int_equal(t->quant->gran.kind, TM_GRAN_CHANNEL);
    assert_int_equal(t->quant->gran.axis, 1);
    float vals[24 * 5];
    assert_int_equal(tm_tensor_read_f32(f, i, 0, K * N, vals, &err), TM_OK);
    for (int64_t k = 0; k < K * N; k++) {
        float es = ref_scale(w + k % N, K, N, 127);
        assert_true(vals[k] == (float)ref_code(w[k], es, 127) * es);
    }
    tm_close(f);
    free_allocs();
}

/* uint8 per-tensor: zero point 128, scale 2a/255; DequantizeLinear without axis */
static void test_uint8_tensor(void **state) {
    (void)state;
    g_rng = 7;
    float *w;
    const char *in = matmul_model("mmu8.onnx", 16, 4, 13, NULL, &w);
    const char *out = outp("mmu8.q.onnx");
    tm_onnx_quantize_params p = tm_onnx_quantize_params_default();
    p.spec.code_dtype = TM_U8;
    p.spec.gran.kind = TM_GRAN_TENSOR;
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, out, &p, TM_OK, &err);
    tm_onnx_quantize_result_free(r);
    loaded l = load(out);
    const Onnx__TensorProto *q = find_init(l.m->graph, "W_quantized"), *s = find_init(l.m->graph, "W_scale"),
                            *z = find_init(l.m->graph, "W_zero_point");
    assert_int_equal(q->data_type, 2);
    assert_int_equal(s->n_dims, 0);
    assert_int_equal(z->raw_data.data[0], 128);
    float a = 0;
    for (int k = 0; k < 64; k++) a = fmaxf(a, fabsf(w[k]));
    float es = (a + a) / 255.0f;
    assert_true(f32_at(s, 0) == es);
    for (int k = 0; k < 64; k++) {
        float rq = nearbyintf(w[k] / es) + 128;
        rq = fminf(fmaxf(rq, 0), 255);
        assert_int_equal(q->raw_data.data[k], (int)rq);
    }
    const Onnx__NodeProto *dq = find_node(l.m->graph, "DequantizeLinear", "W");
    assert_int_equal(node_attr(dq, "axis", -99), -99);
    unload(&l);
    free_allocs();
}

/* The channel axis per consuming op: Conv 0, ConvTranspose 1, Gemm transB=1 0, transB=0 1 */
static void check_axis(const char *op, int trans_b, int ndim, const int64_t *wd, int expect_axis) {
    Onnx__GraphProto *g = graph("g");
    int64_t n;
    float *w = weight_values(ndim, wd, &n);
    g_init(g, tensor_f32("W", ndim, wd, w));
    int64_t xd[4] = {1, 3, 5, 5};
    g_in(g, vinfo("X", 1, 4, xd));
    g_node(g, node(op, "op0", "X,W", "Y", !strcmp(op, "Gemm") ? attr_i("transB", trans_b) : NULL, NULL));
    g_out(g, vinfo("Y", 1, 0, NULL));
    char fn[64];
    snprintf(fn, sizeof fn, "%s%d.onnx", op, trans_b);
    const char *in = write_model(fn, g, 13, 7);
    snprintf(fn, sizeof fn, "%s%d.q.onnx", op, trans_b);
    const char *out = outp(fn);
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, out, NULL, TM_OK, &err);
    assert_int_equal(r->n_quantized, 1);
    assert_int_equal(r->weights[0].gran.axis, expect_axis);
    assert_string_equal(r->weights[0].consumers, op);
    tm_onnx_quantize_result_free(r);
    loaded l = load(out);
    const Onnx__NodeProto *dq = find_node(l.m->graph, "DequantizeLinear", "W");
    assert_non_null(dq);
    assert_int_equal(node_attr(dq, "axis", -99), expect_axis);
    const Onnx__TensorProto *s = find_init(l.m->graph, "W_scale");
    assert_int_equal(s->dims[0], wd[expect_axis]);
    /* scale of channel c: max |w| over the slice at index c of the axis */
    int64_t inner = 1;
    for (int d = expect_axis + 1; d < ndim; d++) inner *= wd[d];
    for (int64_t c = 0; c < wd[expect_axis]; c++) {
        float a = 0;
        for (int64_t k = 0; k < n; k++)
            if ((k / inner) % wd[expect_axis] == c) a = fmaxf(a, fabsf(w[k]));
        assert_true(f32_at(s, c) == a / 127.0f);
    }
    unload(&l);
}

static void test_channel_axis_per_op(void **state) {
    (void)state;
    g_rng = 3;
    assert_int_equal(tm_onnx_channel_axis("Conv", 0), 0);
    assert_int_equal(tm_onnx_channel_axis("ConvTranspose", 0), 1);
    assert_int_equal(tm_onnx_channel_axis("MatMul", 0), 1);
    assert_int_equal(tm_onnx_channel_axis("Gemm", 1), 0);
    assert_int_equal(tm_onnx_channel_axis("Gemm", 0), 1);
    assert_int_equal(tm_onnx_channel_axis("Add", 0), -1);
    int64_t conv[4] = {6, 3, 3, 3}, convt[4] = {3, 4, 3, 3}, gemm1[2] = {7, 5}, gemm0[2] = {5, 7};
    check_axis("Conv", 0, 4, conv, 0);
    check_axis("ConvTranspose", 0, 4, convt, 1);
    check_axis("Gemm", 1, 2, gemm1, 0);
    check_axis("Gemm", 0, 2, gemm0, 1);
    free_allocs();
}

/* int4 blocked at opset 21: INT4 codes packed low nibble first, scale [K/32, N], block_size 32
** along axis 0, values a/7 per block */
static void test_int4_block_exact(void **state) {
    (void)state;
    g_rng = 19;
    float *w;
    const int64_t K = 64, N = 8;
    const char *in = matmul_model("mm21x.onnx", K, N, 21, NULL, &w);
    const char *out = outp("mm21x.q.onnx");
    tm_onnx_quantize_params p = tm_onnx_quantize_params_default();
    p.spec.code_dtype = TM_I4;
    p.spec.gran.kind = TM_GRAN_GROUP;
    p.spec.gran.group_size = 32;
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, out, &p, TM_OK, &err);
    assert_int_equal(r->strategy, TM_ONNX_OPSET_NATIVE);
    assert_int_equal(r->weights[0].gran.kind, TM_GRAN_GROUP);
    assert_int_equal(r->weights[0].gran.axis, 0);
    assert_int_equal(r->weights[0].gran.group_size, 32);
    tm_onnx_quantize_result_free(r);
    loaded l = load(out);
    const Onnx__TensorProto *q = find_init(l.m->graph, "W_quantized"), *s = find_init(l.m->graph, "W_scale");
    assert_int_equal(q->data_type, 22);
    assert_int_equal(q->raw_data.len, (size_t)(K * N / 2));
    assert_int_equal(s->n_dims, 2);
    assert_int_equal(s->dims[0], 2);
    assert_int_equal(s->dims[1], N);
    const Onnx__NodeProto *dq = find_node(l.m->graph, "DequantizeLinear", "W");
    assert_int_equal(node_attr(dq, "axis", -99), 0);
    assert_int_equal(node_attr(dq, "block_size", -99), 32);
    for (int64_t b = 0; b < 2; b++)
        for (int64_t c = 0; c < N; c++) {
            float es = ref_scale(w + b * 32 * N + c, 32, N, 7);
            assert_true(f32_at(s, b * N + c) == es);
            for (int64_t k = b * 32; k < b * 32 + 32; k++) {
                int64_t flat = k * N + c;
                int nib = (q->raw_data.data[flat / 2] >> (4 * (flat & 1))) & 0x0f;
                int code = nib >= 8 ? nib - 16 : nib;
                assert_int_equal(code, ref_code(w[flat], es, 7));
            }
        }
    unload(&l);
    tm_file *f = NULL;
    assert_int_equal(tm_open(out, NULL, &f, &err), TM_OK);
    const tm_tensor *t = tm_file_tensor(f, tm_file_find(f, "W_quantized"));
    assert_non_null(t->quant);
    assert_int_equal(t->quant->gran.kind, TM_GRAN_GROUP);
    assert_int_equal(t->quant->gran.group_size, 32);
    assert_int_equal(t->quant->code_dtype, TM_I4);
    tm_close(f);
    free_allocs();
}

/* A FLOAT16 initializer of the n values w (rounded to nearest float16); w then holds those
** float16 values widened back to float32, what a reader of the tensor sees. */
static Onnx__TensorProto *tensor_f16_of(const char *name, int ndim, const int64_t *dims, float *w,
                                        int64_t n) {
    Onnx__TensorProto *t = tensor_f32(name, ndim, dims, w);
    t->data_type = 10;
    t->raw_data.len = (size_t)n * 2;
    for (int64_t k = 0; k < n; k++) {
        uint16_t h = tm_f32_to_f16(w[k]);
        w[k] = tm_f16_to_f32(h);
        memcpy(t->raw_data.data + 2 * k, &h, 2);
    }
    return t;
}

/* a float16 Conv weight: DequantizeLinear gives float "W_dequantized", a Cast to FLOAT16 gives
** "W"; codes follow the formula on the float16 values widened to float32 */
static void test_float16_weight_cast(void **state) {
    (void)state;
    g_rng = 31;
    Onnx__GraphProto *g = graph("g");
    int64_t wd[4] = {4, 2, 3, 3}, n, xd[4] = {1, 2, 5, 5};
    float *w = weight_values(4, wd, &n);
    Onnx__TensorProto *t = tensor_f16_of("W", 4, wd, w, n);
    g_init(g, t);
    g_in(g, vinfo("X", 10, 4, xd));
    g_node(g, node("Conv", "c0", "X,W", "Y", NULL, NULL));
    g_out(g, vinfo("Y", 10, 0, NULL));
    const char *in = write_model("f16.onnx", g, 13, 7);
    const char *out = outp("f16.q.onnx");
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, out, NULL, TM_OK, &err);
    assert_int_equal(r->n_quantized, 1);
    assert_int_equal(r->weights[0].src_dtype, TM_F16);
    tm_onnx_quantize_result_free(r);
    loaded l = load(out);
    const Onnx__NodeProto *dq = find_node(l.m->graph, "DequantizeLinear", "W_dequantized");
    const Onnx__NodeProto *cast = find_node(l.m->graph, "Cast", "W");
    assert_non_null(dq);
    assert_non_null(cast);
    assert_int_equal(node_attr(cast, "to", -1), 10);
    assert_string_equal(cast->input[0], "W_dequantized");
    /* the Cast comes after the DequantizeLinear, both before the Conv */
    size_t idq = 99, icast = 99, iconv = 99;
    for (size_t k = 0; k < l.m->graph->n_node; k++) {
        if (l.m->graph->node[k] == dq) idq = k;
        if (l.m->graph->node[k] == cast) icast = k;
        if (!strcmp(l.m->graph->node[k]->op_type, "Conv")) iconv = k;
    }
    assert_true(idq < icast && icast < iconv);
    const Onnx__TensorProto *q = find_init(l.m->graph, "W_quantized"), *s = find_init(l.m->graph, "W_scale");
    check_int8_channels(q, s, w, 4, 18, 18, 1);
    unload(&l);
    free_allocs();
}

/* --write-models DIR: the generated models tests/ort/run.sh runs through ONNX Runtime */
static int write_models(const char *dir) {
    snprintf(g_tmp, sizeof g_tmp, "%s", dir);
    g_rng = 101;
    matmul_model("matmul_opset21.onnx", 64, 16, 21, NULL, NULL);
    g_rng = 102;
    matmul_model("matmul_opset9_softmax.onnx", 64, 16, 9, "Softmax", NULL);
    g_rng = 103;
    matmul_model("matmul_opset9_relu.onnx", 64, 16, 9, "Relu", NULL);
    /* float in and out, a float16 Conv weight in between (Cast -> Conv -> Cast) */
    g_rng = 104;
    Onnx__GraphProto *g = graph("f16");
    int64_t wd[4] = {8, 3, 3, 3}, n, xd[4] = {1, 3, 16, 16};
    float *w = weight_values(4, wd, &n);
    Onnx__TensorProto *t = tensor_f16_of("W", 4, wd, w, n);
    g_init(g, t);
    g_in(g, vinfo("X", 1, 4, xd));
    g_node(g, node("Cast", "c_in", "X", "X16", attr_i("to", 10), NULL));
    g_node(g, node("Conv", "conv", "X16,W", "Y16", NULL, NULL));
    g_node(g, node("Cast", "c_out", "Y16", "Y", attr_i("to", 1), NULL));
    g_out(g, vinfo("Y", 1, 0, NULL));
    write_model("conv_f16_opset13.onnx", g, 13, 7);
    free_allocs();
    return 0;
}

/* The whole job under every kernel set this CPU runs (tm_onnx_quantize_params.kernels: auto, ref, avx2,
** avx512; observers, quantize and error statistics): the same file bytes and the same error
** figures, bit for bit, for minmax and MSE observers, symmetric int8 channels and asymmetric
** uint8 and int4 groups, on a weight whose rows are not a multiple of any vector width. */
static void test_kernel_sets(void **state) {
    (void)state;
    static const char *const kern[] = {"auto", "ref", "avx2", "avx512"};
    static const struct { tm_dtype code; tm_granularity gk; int64_t gs; int symmetric; tm_observer_kind obs; } sc[] = {
        {TM_I8, TM_GRAN_CHANNEL, 0, 1, TM_OBS_MINMAX}, {TM_U8, TM_GRAN_TENSOR, 0, 0, TM_OBS_MSE},
        {TM_I4, TM_GRAN_GROUP, 32, 0, TM_OBS_MINMAX}, {TM_I8, TM_GRAN_CHANNEL, 0, 0, TM_OBS_PERCENTILE}};
    g_rng = 11;
    const char *in = matmul_model("kern.onnx", 96, 131, 21, NULL, NULL);
    for (size_t c = 0; c < sizeof sc / sizeof sc[0]; c++) {
        uint8_t *b0 = NULL;
        size_t n0 = 0;
        tm_errsum e0;
        int ran = 0;
        for (size_t k = 0; k < sizeof kern / sizeof kern[0]; k++) {
            tm_onnx_quantize_params p = tm_onnx_quantize_params_default();
            if (tm_kernels_get(kern[k], &p.kernels) != TM_OK) continue; /* the CPU lacks it */
            p.spec.code_dtype = sc[c].code;
            p.spec.gran.kind = sc[c].gk;
            p.spec.gran.group_size = sc[c].gs;
            p.spec.symmetric = sc[c].symmetric;
            p.spec.observer = tm_observer_default(sc[c].obs);
            p.force = 1;
            tm_err err;
            tm_onnx_quantize_result *r = run_job(in, outp("kern.q.onnx"), &p, TM_OK, &err);
            assert_int_equal(r->n_quantized, 1);
            size_t n;
            uint8_t *b = read_bytes(outp("kern.q.onnx"), &n);
            if (!b0) {
                b0 = b;
                n0 = n;
                e0 = r->weights[0].e;
            } else {
                assert_int_equal(n, n0);
                assert_memory_equal(b, b0, n);
                assert_memory_equal(&r->weights[0].e, &e0, sizeof e0);
                free(b);
            }
            ran++;
            tm_onnx_quantize_result_free(r);
        }
        assert_true(ran >= 2); /* auto and ref at least */
        free(b0);
    }
    free_allocs();
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-models")) return write_models(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_int8_channel_exact),
        cmocka_unit_test(test_kernel_sets),
        cmocka_unit_test(test_uint8_tensor),
        cmocka_unit_test(test_channel_axis_per_op),
        cmocka_unit_test(test_int4_block_exact),
        cmocka_unit_test(test_float16_weight_cast),
    };
    return cmocka_run_group_tests(tests, onnxq_setup, onnxq_teardown);
}
