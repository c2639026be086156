/* test_onnx_qop.c: weights of the operator-oriented (QOperator) and integer ONNX ops become
** logical quantized tensors (src/formats/onnx_qrec.c): ONNX Runtime's test model
** matmul_integer_to_float.onnx (MatMulInteger whose scale a following Mul applies), and small
** models built here for MatMulInteger / ConvInteger in ONNX Runtime's IntegerOps form and for
** com.microsoft MatMulIntegerToFloat, DynamicQuantizeMatMul, QGemm, QAttention and
** QEmbedLayerNormalization: which
** tensors are quantized, with which scale and zero point tensors, granularity and axis, and
** every element dequantized as (q - zero_point) * scale. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensormorph.h"
#include "tensormorph/compat.h"
#include "tensormorph/graph.h"
#include "helpers/cli_run.h"
#include "helpers/onnx_pb.h"
#include "helpers/vectors.h"

enum { T_FLOAT = 1, T_UINT8 = 2, T_INT8 = 3 }; /* TensorProto.DataType */

static const tm_tensor *must_find(const tm_file *f, const char *name) {
    int64_t i = tm_file_find(f, name);
    if (i < 0) print_message("missing tensor %s\n", name);
    assert_true(i >= 0);
    return tm_file_tensor(f, i);
}

static int has_warning(const tm_file *f, const char *needle) {
    for (int64_t i = 0; i < tm_file_n_warnings(f); i++)
        if (strstr(tm_file_warning(f, i), needle)) return 1;
    return 0;
}

static int64_t n_quantized(const tm_file *f) {
    int64_t n = 0;
    for (int64_t i = 0; i < tm_file_n_tensors(f); i++) n += tm_file_tensor(f, i)->quant != NULL;
    return n;
}

static void check_value(const tm_file *f, const char *name, const char *scale, const char *zp);

/* Tensor `name` is quantized with scale `scale`, zero point `zp` (NULL: none), granularity
** `gran` (channel: along `axis`), symmetric or not, its graph value names the same scale and
** zero point, and its elements dequantize to (code - zp[c]) * sc[c] exactly, c the channel of
** the element (per tensor: 0). codes/zps are int8 when is_signed. */
static void check_weight(const tm_file *f, const char *name, const char *layout, const char *scale,
                         const char *zp, tm_granularity gran, int axis, const void *codes,
                         int is_signed, const void *zps, const float *sc, int symmetric) {
    const tm_tensor *t = must_find(f, name);
    assert_non_null(t->quant);
    assert_int_equal(t->quant->symmetric, symmetric);
    check_value(f, name, scale, zp);
    assert_string_equal(t->quant->layout, layout);
    assert_int_equal(t->quant->code_dtype, is_signed ? TM_I8 : TM_U8);
    assert_string_equal(tm_file_tensor(f, t->quant->scale_tensor)->name, scale);
    if (zp) assert_string_equal(tm_file_tensor(f, t->quant->zero_point_tensor)->name, zp);
    else assert_int_equal(t->quant->zero_point_tensor, -1);
    assert_int_equal(t->quant->gran.kind, gran);
    if (gran == TM_GRAN_CHANNEL) assert_int_equal(t->quant->gran.axis, axis);
    float *v = malloc((size_t)t->n_elems * sizeof(float));
    assert_non_null(v);
    assert_int_equal(tm_tensor_read_f32(f, tm_file_find(f, name), 0, t->n_elems, v, NULL), TM_OK);
    int64_t stride = 1;
    for (int d = t->ndim - 1; gran == TM_GRAN_CHANNEL && d > axis; d--) stride *= t->shape[d];
    for (int64_t e = 0; e < t->n_elems; e++) {
        int64_t ch = gran == TM_GRAN_CHANNEL ? (e / stride) % t->shape[axis] : 0;
        int q = is_signed ? ((const int8_t *)codes)[e] : ((const uint8_t *)codes)[e];
        int z = !zps ? 0 : is_signed ? ((const int8_t *)zps)[ch] : ((const uint8_t *)zps)[ch];
        float want = (float)(q - z) * sc[ch];
        if (v[e] != want) print_message("%s[%lld] = %.9g, want %.9g\n", name, (long long)e, v[e], want);
        assert_true(v[e] == want);
    }
    free(v);
}

/* The node of the graph named `name`. */
static const tm_graph_node *node_named(const tm_file *f, const char *name) {
    for (int64_t i = 0; i < tm_graph_n_nodes(f); i++)
        if (!strcmp(tm_graph_node_at(f, i)->name, name)) return tm_graph_node_at(f, i);
    fail_msg("no node %s", name);
    return NULL;
}

/* Value `name` carries codes with scale `scale` and zero point `zp` (NULL: none). */
static void check_value(const tm_file *f, const char *name, const char *scale, const char *zp) {
    const tm_graph_value *v = tm_graph_value_at(f, tm_graph_find_value(f, name));
    assert_non_null(v);
    assert_true(v->quantized);
    const tm_graph_value *s = tm_graph_value_at(f, v->scale_value);
    assert_non_null(s);
    assert_string_equal(s->name, scale);
    if (zp) assert_string_equal(tm_graph_value_at(f, v->zero_point_value)->name, zp);
    else assert_int_equal(v->zero_point_value, -1);
}

/* compat (ort-cpu) describes node `name` as a weight with these code type, granularity and
** symmetry (1, 0, -1 unknown). */
static void check_compat(const tm_file *f, const char *name, const char *code, const char *gran,
                         int symmetric) {
    tm_compat_report *r = NULL;
    tm_err err;
    assert_int_equal(tm_compat_check(f, "ort-cpu", NULL, NULL, &r, &err), TM_OK);
    int seen = 0;
    for (int64_t k = 0; k < r->n_items; k++) {
        const tm_compat_item *it = &r->items[k];
        if (!it->is_node || strcmp(it->name, name)) continue;
        seen = 1;
        print_message("compat %s: %s\n", name, it->describe);
        assert_string_equal(it->code_dtype, code);
        assert_string_equal(it->granularity, gran);
        assert_int_equal(it->symmetric, symmetric);
        assert_string_equal(it->operand, "weight");
    }
    assert_true(seen);
    tm_compat_report_free(r);
}

/* Initializers `name` (codes: dtype, shape dims, n bytes), `name`_scale (float, shape sdims,
** ns values) and, when zp is not NULL, `name`_zp (the codes' dtype, ns values). */
static void init_weight(pb *g, const char *name, int dtype, int ndim, const int64_t *dims,
                        const void *codes, size_t n, int sndim, const int64_t *sdims,
                        const float *sc, size_t ns, const void *zp) {
    char nm[64];
    pb_init_raw(g, name, dtype, ndim, dims, codes, n);
    snprintf(nm, sizeof nm, "%s_scale", name);
    pb_init_raw(g, nm, T_FLOAT, sndim, sdims, sc, ns * 4);
    snprintf(nm, sizeof nm, "%s_zp", name);
    if (zp) pb_init_raw(g, nm, dtype, sndim, sdims, zp, ns);
}

/* Scalar initializers: float `scale` = s, uint8 `zp` = z. */
static void init_scalar_qparams(pb *g, const char *scale, float s, const char *zp, uint8_t z) {
    pb_init_raw(g, scale, T_FLOAT, 0, NULL, &s, 4);
    pb_init_raw(g, zp, T_UINT8, 0, NULL, &z, 1);
}

/* Open the model built in m, asserting that n_q of its tensors are quantized. */
static tm_file *open_built(pb *m, int64_t n_q) {
    tm_file *f = NULL;
    tm_err err;
    tm_status s = tm_onnx_open_buffer(m->b, m->n, "built.onnx", NULL, &f, &err);
    if (s) print_message("%s\n", err.msg);
    assert_int_equal(s, TM_OK);
    assert_int_equal(n_quantized(f), n_q);
    return f;
}

/* ---------------------------------------------------------------------------------------- */
/* ONNX Runtime's matmul_integer_to_float.onnx                                                */
/* ---------------------------------------------------------------------------------------- */

/* onnxruntime/test/testdata/transform/fusion/matmul_integer_to_float.onnx: three
** DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(., Mul(a_scale, b_scale)) branches.
** Branches 1 and 3 hold B as initializers: uint8 [2, 3] codes 2 4 5 6 7 8 (int32_data), zero
** point 128 and scale 1.8f (float_data 0x3FE66666), read from the file's bytes; branch 2 takes
** B, its zero point and scale as graph inputs (no tensor). */
static const uint8_t k_ort_codes[6] = {2, 4, 5, 6, 7, 8};
static const uint8_t k_ort_zp = 128;

static void test_ort_matmul_integer_to_float(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char path[2048];
    snprintf(path, sizeof path, "%s/models/onnx/ort_testdata/transform/fusion/matmul_integer_to_float.onnx",
             tmv_shared_dir());
    tm_file *f = NULL;
    tm_err err;
    assert_int_equal(tm_open(path, NULL, &f, &err), TM_OK);
    assert_int_equal(n_quantized(f), 2);
    float sc;
    uint32_t bits;
    assert_int_equal(tm_tensor_read_f32(f, tm_file_find(f, "b_scale_1"), 0, 1, &sc, NULL), TM_OK);
    memcpy(&bits, &sc, 4);
    assert_int_equal(bits, 0x3FE66666u);
    for (int b = 1; b <= 3; b += 2) {
        char w[32], s[32], z[32], mm[32];
        snprintf(w, sizeof w, "b_quantized_%d", b);
        snprintf(s, sizeof s, "b_scale_%d", b);
        snprintf(z, sizeof z, "b_zp_%d", b);
        snprintf(mm, sizeof mm, "MatMulInteger_%d", b);
        check_weight(f, w, "onnx/MatMulInteger", s, z, TM_GRAN_TENSOR, 0, k_ort_codes, 0, &k_ort_zp, &sc, 0);
        assert_int_equal(must_find(f, s)->role, TM_ROLE_SCALE);
        assert_int_equal(must_find(f, z)->role, TM_ROLE_ZERO_POINT);
        /* the graph: the node's weight, the value's scale and zero point */
        const tm_graph_node *nd = node_named(f, mm);
        assert_int_equal(nd->qkind, TM_QNODE_INTEGER);
        assert_int_equal(nd->weight_tensor, tm_file_find(f, w));
    }
    /* the activation keeps the scale DynamicQuantizeLinear gave it */
    check_value(f, "a_quantized", "a_scale", "a_zp");
    assert_int_equal(tm_file_find(f, "b_quantized_2"), -1);
    assert_int_equal(node_named(f, "MatMulInteger_2")->weight_tensor, -1);
    tm_close(f);

    /* the CLI: inspect --json, scalar on one element, graph, compat and qdiff */
    json_t *d = tmt_run_json(0, "%s inspect --json '%s'", tmt_bin(), path);
    assert_int_equal(json_integer_value(json_object_get(d, "n_quantized")), 2);
    json_t *t = tmt_find_named(json_object_get(d, "tensors"), "b_quantized_1");
    json_t *q = json_object_get(t, "quantization");
    assert_string_equal(json_string_value(json_object_get(q, "layout")), "onnx/MatMulInteger");
    assert_string_equal(json_string_value(json_object_get(q, "granularity")), "tensor");
    assert_false(json_is_true(json_object_get(q, "symmetric")));
    json_decref(d);
    d = tmt_run_json(0, "%s scalar --json '%s' b_quantized_1 1,2", tmt_bin(), path);
    assert_int_equal(json_integer_value(json_object_get(d, "code")), 8);
    assert_int_equal(json_integer_value(json_object_get(d, "zero_point")), 128);
    assert_true((float)tmt_num(d, "scale") == sc);
    assert_true((float)tmt_num(d, "value") == (float)(8 - 128) * sc);
    json_decref(d);
    d = tmt_run_json(0, "%s graph --json --quantized '%s'", tmt_bin(), path);
    json_t *nodes = json_object_get(d, "nodes");
    int seen = 0;
    for (size_t k = 0; k < json_array_size(nodes); k++) {
        json_t *n = json_array_get(nodes, k);
        if (strcmp(json_string_value(json_object_get(n, "name")), "MatMulInteger_3")) continue;
        seen = 1;
        assert_string_equal(json_string_value(json_object_get(n, "weight")), "b_quantized_3");
        json_t *b = json_array_get(json_object_get(n, "inputs"), 1);
        assert_true(json_is_true(json_object_get(b, "quantized")));
        assert_string_equal(json_string_value(json_object_get(b, "scale")), "b_scale_3");
        assert_string_equal(json_string_value(json_object_get(b, "zero_point")), "b_zp_3");
        assert_non_null(json_object_get(b, "quantization"));
    }
    assert_true(seen);
    json_decref(d);
    d = tmt_run_json(0, "%s compat --json '%s' --target ort-cpu", tmt_bin(), path);
    json_t *items = json_object_get(d, "items");
    seen = 0;
    for (size_t k = 0; k < json_array_size(items); k++) {
        json_t *it = json_array_get(items, k);
        if (strcmp(json_string_value(json_object_get(it, "op_type")), "MatMulInteger")) continue;
        seen++;
        assert_string_equal(json_string_value(json_object_get(it, "status")), "native");
    }
    assert_int_equal(seen, 3);
    json_decref(d);
    d = tmt_run_json(0, "%s qdiff --json '%s' '%s'", tmt_bin(), path, path);
    assert_int_equal(json_array_size(json_object_get(d, "tensors")), 2);
    json_decref(d);
}

/* ---------------------------------------------------------------------------------------- */
/* models built here                                                                           */
/* ---------------------------------------------------------------------------------------- */

/* MatMulInteger in ONNX Runtime's IntegerOps form with B [4, 3] per column (zero point and
** scale [3]); A from QuantizeLinear with a tensor scale too, so the weight's factor of
** Mul(a_scale, b_scale) must be told apart by the activation's scale. */
static const int8_t k_mi_codes[12] = {-128, -3, 0, 1, 2, 127, -7, 5, 9, 100, -100, 4};
static const int8_t k_mi_zp[3] = {1, -2, 0};
static const float k_mi_sc[3] = {0.5f, 0.25f, 0.03125f};

static void build_matmul_integer(pb *m, int with_scales_mul) {
    pb g = {0};
    int64_t d43[2] = {4, 3}, d3[1] = {3};
    init_weight(&g, "B", T_INT8, 2, d43, k_mi_codes, 12, 1, d3, k_mi_sc, 3, k_mi_zp);
    init_scalar_qparams(&g, "a_scale", 0.125f, "a_zp", 3);
    const char *q_in[3] = {"x", "a_scale", "a_zp"}, *mi_in[4] = {"x_q", "B", "a_zp", "B_zp"};
    pb_node(&g, "QuantizeLinear", "q", 3, q_in, "x_q", NULL, 0);
    pb_node(&g, "MatMulInteger", "mi", 4, mi_in, "y_i32", NULL, 0);
    const char *c_in[1] = {"y_i32"};
    pb_node(&g, "Cast", "cast", 1, c_in, "y_f", "to", T_FLOAT);
    if (with_scales_mul) {
        /* the activation's scale second, as a plain tensor like the weight's */
        const char *sm_in[2] = {"B_scale", "a_scale"}, *om_in[2] = {"y_f", "scales"};
        pb_node(&g, "Mul", "scales_mul", 2, sm_in, "scales", NULL, 0);
        pb_node(&g, "Mul", "out_mul", 2, om_in, "y", NULL, 0);
    } else {
        /* one folded constant: which part is the weight's cannot be told */
        const char *om_in[2] = {"y_f", "B_scale"};
        pb_node(&g, "Mul", "out_mul", 2, om_in, "y", NULL, 0);
    }
    pb_model(m, &g, 13);
}

static void test_matmul_integer_per_column(void **state) {
    (void)state;
    pb m = {0};
    build_matmul_integer(&m, 1);
    tm_file *f = open_built(&m, 1);
    check_weight(f, "B", "onnx/MatMulInteger", "B_scale", "B_zp", TM_GRAN_CHANNEL, 1, k_mi_codes, 1,
                 k_mi_zp, k_mi_sc, 0);
    check_value(f, "x_q", "a_scale", "a_zp");
    assert_int_equal(node_named(f, "mi")->weight_tensor, tm_file_find(f, "B"));
    check_compat(f, "mi", "I8", "channel", 0);
    tm_close(f);
    free(m.b);
    /* no product of two scales after the Cast: listed plain, with a warning saying why */
    memset(&m, 0, sizeof m);
    build_matmul_integer(&m, 0);
    f = open_built(&m, 0);
    assert_true(has_warning(f, "MatMulInteger 'mi': 'B' not mapped to a quantized tensor: no scale found"));
    tm_close(f);
    free(m.b);
}

/* ConvInteger as ONNX Runtime's conv.py writes it: DynamicQuantizeLinear -> ConvInteger ->
** Add (int32 bias) -> Cast -> Mul(., Mul(x_scale, w_scale)); w uint8 [2, 1, 2, 2] with zero
** point [2] and scale [2, 1, 1] per output channel. */
static void test_conv_integer_per_channel(void **state) {
    (void)state;
    static const uint8_t codes[8] = {0, 255, 128, 7, 9, 130, 64, 200};
    static const uint8_t zp[2] = {128, 120};
    static const float sc[2] = {0.0625f, 1.5f};
    static const int32_t bias[2] = {5, -9};
    pb g = {0}, m = {0};
    int64_t dw[4] = {2, 1, 2, 2}, d2[1] = {2}, ds[3] = {2, 1, 1};
    init_weight(&g, "w", T_UINT8, 4, dw, codes, 8, 3, ds, sc, 2, NULL);
    pb_init_raw(&g, "w_zp", T_UINT8, 1, d2, zp, 2);
    pb_init_raw(&g, "bias_i32", 6, 3, ds, bias, 8);
    const char *dq_out[3] = {"x_q", "x_scale", "x_zp"}, *dq_in[1] = {"x"};
    pb_node_dom(&g, "DynamicQuantizeLinear", NULL, "dql", 1, dq_in, 3, dq_out, NULL, 0);
    const char *ci_in[4] = {"x_q", "w", "x_zp", "w_zp"}, *add_in[2] = {"y_i32", "bias_i32"};
    pb_node(&g, "ConvInteger", "conv", 4, ci_in, "y_i32", NULL, 0);
    pb_node(&g, "Add", "bias_add", 2, add_in, "y_b", NULL, 0);
    const char *c_in[1] = {"y_b"}, *sm_in[2] = {"x_scale", "w_scale"}, *om_in[2] = {"y_f", "scales"};
    pb_node(&g, "Cast", "cast", 1, c_in, "y_f", "to", T_FLOAT);
    pb_node(&g, "Mul", "scales_mul", 2, sm_in, "scales", NULL, 0);
    pb_node(&g, "Mul", "out_mul", 2, om_in, "y", NULL, 0);
    pb_model(&m, &g, 13);
    tm_file *f = open_built(&m, 1);
    check_weight(f, "w", "onnx/ConvInteger", "w_scale", "w_zp", TM_GRAN_CHANNEL, 0, codes, 0, zp, sc, 0);
    assert_int_equal(node_named(f, "conv")->weight_tensor, tm_file_find(f, "w"));
    check_compat(f, "conv", "U8", "channel", 0);
    tm_close(f);
    free(m.b);
}

/* com.microsoft MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias):
** B uint8 [2, 3] per column; Y is float (the scales' type). */
static void test_matmul_integer_to_float(void **state) {
    (void)state;
    static const uint8_t codes[6] = {10, 20, 30, 250, 0, 128};
    static const uint8_t zp[3] = {128, 127, 0};
    static const float sc[3] = {0.01f, 0.02f, 0.75f};
    pb g = {0}, m = {0};
    int64_t d23[2] = {2, 3}, d3[1] = {3};
    init_weight(&g, "W", T_UINT8, 2, d23, codes, 6, 1, d3, sc, 3, zp);
    init_scalar_qparams(&g, "a_scale", 0.5f, "a_zp", 0);
    const char *in[6] = {"A", "W", "a_scale", "W_scale", "a_zp", "W_zp"}, *out[1] = {"Y"};
    pb_node_dom(&g, "MatMulIntegerToFloat", "com.microsoft", "mitf", 6, in, 1, out, NULL, 0);
    pb_model_ms(&m, &g, 13, 1);
    tm_file *f = open_built(&m, 1);
    check_weight(f, "W", "onnx/com.microsoft.MatMulIntegerToFloat", "W_scale", "W_zp",
                 TM_GRAN_CHANNEL, 1, codes, 0, zp, sc, 0);
    const tm_graph_node *nd = node_named(f, "mitf");
    assert_int_equal(nd->qkind, TM_QNODE_QOPERATOR);
    assert_int_equal(nd->weight_tensor, tm_file_find(f, "W"));
    check_value(f, "A", "a_scale", "a_zp");
    assert_string_equal(tm_graph_value_at(f, tm_graph_find_value(f, "Y"))->elem_type_name, "FLOAT");
    check_compat(f, "mitf", "U8", "channel", 0);
    tm_close(f);
    free(m.b);
}

/* com.microsoft DynamicQuantizeMatMul(A, B, b_scale[, b_zero_point, bias]): int8 B [3, 2], one
** scale, no zero point (symmetric); A is float and carries no codes. */
static void test_dynamic_quantize_matmul(void **state) {
    (void)state;
    static const int8_t codes[6] = {-127, -1, 0, 3, 64, 127};
    float sc = 0.0078125f;
    pb g = {0}, m = {0};
    int64_t d32[2] = {3, 2};
    init_weight(&g, "W", T_INT8, 2, d32, codes, 6, 0, NULL, &sc, 1, NULL);
    const char *in[3] = {"A", "W", "W_scale"}, *out[1] = {"Y"};
    pb_node_dom(&g, "DynamicQuantizeMatMul", "com.microsoft", "dqmm", 3, in, 1, out, NULL, 0);
    pb_model_ms(&m, &g, 13, 1);
    tm_file *f = open_built(&m, 1);
    check_weight(f, "W", "onnx/com.microsoft.DynamicQuantizeMatMul", "W_scale", NULL, TM_GRAN_TENSOR,
                 0, codes, 1, NULL, &sc, 1);
    assert_int_equal(node_named(f, "dqmm")->weight_tensor, tm_file_find(f, "W"));
    assert_false(tm_graph_value_at(f, tm_graph_find_value(f, "A"))->quantized);
    check_compat(f, "dqmm", "I8", "tensor", 1);
    tm_close(f);
    free(m.b);
}

/* com.microsoft QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp) with transB = 1:
** B int8 [3, 2] = op(B) [2, 3] transposed, so per column of op(B) is axis 0 of B; zero points
** all 0 (symmetric); Y is quantized with y_scale / y_zero_point. */
static void test_qgemm_trans_b(void **state) {
    (void)state;
    static const int8_t codes[6] = {1, -2, 3, -4, 5, -6};
    static const int8_t zp[3] = {0, 0, 0};
    static const float sc[3] = {0.5f, 2.0f, 0.125f};
    pb g = {0}, m = {0};
    int64_t d32[2] = {3, 2}, d3[1] = {3};
    init_weight(&g, "B", T_INT8, 2, d32, codes, 6, 1, d3, sc, 3, zp);
    init_scalar_qparams(&g, "a_scale", 0.25f, "a_zp", 10);
    init_scalar_qparams(&g, "y_scale", 4.0f, "y_zp", 20);
    const char *in[9] = {"A", "a_scale", "a_zp", "B", "B_scale", "B_zp", "", "y_scale", "y_zp"};
    const char *out[1] = {"Y"};
    pb_node_dom(&g, "QGemm", "com.microsoft", "qgemm", 9, in, 1, out, "transB", 1);
    pb_model_ms(&m, &g, 13, 1);
    tm_file *f = open_built(&m, 1);
    check_weight(f, "B", "onnx/com.microsoft.QGemm", "B_scale", "B_zp", TM_GRAN_CHANNEL, 0, codes, 1,
                 zp, sc, 1);
    check_value(f, "Y", "y_scale", "y_zp");
    check_compat(f, "qgemm", "I8", "channel", 1);
    assert_string_equal(tm_graph_value_at(f, tm_graph_find_value(f, "Y"))->elem_type_name, "UINT8");
    tm_close(f);
    free(m.b);
}

/* com.microsoft QAttention(input, weight, bias, input_scale, weight_scale, mask_index,
** input_zero_point, weight_zero_point): weight uint8 [2, 6] ([input_hidden, 3 * hidden]) per
** column; mask_index omitted (""). */
static void test_qattention(void **state) {
    (void)state;
    static const uint8_t codes[12] = {0, 1, 2, 3, 4, 5, 250, 251, 252, 253, 254, 255};
    static const uint8_t zp[6] = {128, 128, 100, 100, 0, 255};
    static const float sc[6] = {0.5f, 0.25f, 0.125f, 1.0f, 2.0f, 4.0f};
    static const float bias[6] = {0};
    pb g = {0}, m = {0};
    int64_t d26[2] = {2, 6}, d6[1] = {6};
    init_weight(&g, "Wqkv", T_UINT8, 2, d26, codes, 12, 1, d6, sc, 6, zp);
    pb_init_raw(&g, "bias", T_FLOAT, 1, d6, bias, 24);
    init_scalar_qparams(&g, "in_scale", 0.5f, "in_zp", 128);
    const char *in[8] = {"X", "Wqkv", "bias", "in_scale", "Wqkv_scale", "", "in_zp", "Wqkv_zp"};
    const char *out[1] = {"Y"};
    pb_node_dom(&g, "QAttention", "com.microsoft", "qattn", 8, in, 1, out, "num_heads", 1);
    pb_model_ms(&m, &g, 13, 1);
    tm_file *f = open_built(&m, 1);
    check_weight(f, "Wqkv", "onnx/com.microsoft.QAttention", "Wqkv_scale", "Wqkv_zp", TM_GRAN_CHANNEL,
                 1, codes, 0, zp, sc, 0);
    assert_int_equal(node_named(f, "qattn")->qkind, TM_QNODE_QOPERATOR);
    check_compat(f, "qattn", "U8", "channel", 0);
    check_value(f, "X", "in_scale", "in_zp");
    assert_string_equal(tm_file_tensor(f, tm_file_find(f, "bias"))->name, "bias");
    assert_null(must_find(f, "bias")->quant);
    assert_string_equal(tm_graph_value_at(f, tm_graph_find_value(f, "Y"))->elem_type_name, "FLOAT");
    tm_close(f);
    free(m.b);
}

/* com.microsoft QEmbedLayerNormalization: word and position embeddings, gamma and beta uint8
** (segment embedding and mask omitted), each with its own scalar scale and zero point at
** inputs 8..12 / 13..17 (the segment's left ""). */
static void test_qembed_layer_norm(void **state) {
    (void)state;
    static const uint8_t word[8] = {0, 9, 18, 27, 36, 45, 54, 255}, pos[6] = {1, 2, 3, 4, 5, 6};
    static const uint8_t gamma[2] = {200, 100}, beta[2] = {128, 129};
    static const uint8_t zps[4] = {128, 3, 0, 128};
    static const float scs[4] = {0.5f, 0.25f, 0.0078125f, 0.001953125f};
    const char *names[4] = {"word", "pos", "gamma", "beta"};
    const void *codes[4] = {word, pos, gamma, beta};
    int64_t dims[4][2] = {{4, 2}, {3, 2}, {2, 0}, {2, 0}};
    size_t n[4] = {8, 6, 2, 2};
    pb g = {0}, m = {0};
    for (int k = 0; k < 4; k++)
        init_weight(&g, names[k], T_UINT8, k < 2 ? 2 : 1, dims[k], codes[k], n[k], 0, NULL, &scs[k],
                    1, &zps[k]);
    const char *in[18] = {"ids", "", "word", "pos", "", "gamma", "beta", "",
                          "word_scale", "pos_scale", "", "gamma_scale", "beta_scale",
                          "word_zp", "pos_zp", "", "gamma_zp", "beta_zp"};
    const char *out[2] = {"Y", "mask_index"};
    pb_node_dom(&g, "QEmbedLayerNormalization", "com.microsoft", "qemb", 18, in, 2, out, NULL, 0);
    pb_model_ms(&m, &g, 13, 1);
    tm_file *f = open_built(&m, 4);
    for (int k = 0; k < 4; k++) {
        char s[32], z[32];
        snprintf(s, sizeof s, "%s_scale", names[k]);
        snprintf(z, sizeof z, "%s_zp", names[k]);
        check_weight(f, names[k], "onnx/com.microsoft.QEmbedLayerNormalization", s, z,
                     TM_GRAN_TENSOR, 0, codes[k], 0, &zps[k], &scs[k], k == 2);
    }
    assert_int_equal(node_named(f, "qemb")->qkind, TM_QNODE_QOPERATOR);
    assert_string_equal(tm_graph_value_at(f, tm_graph_find_value(f, "Y"))->elem_type_name, "FLOAT");
    tm_close(f);
    free(m.b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_integer_per_column),
        cmocka_unit_test(test_conv_integer_per_channel),
        cmocka_unit_test(test_matmul_integer_to_float),
        cmocka_unit_test(test_dynamic_quantize_matmul),
        cmocka_unit_test(test_qgemm_trans_b),
        cmocka_unit_test(test_qattention),
        cmocka_unit_test(test_qembed_layer_norm),
        cmocka_unit_test(test_ort_matmul_integer_to_float),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
