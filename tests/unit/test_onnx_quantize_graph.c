/* test_onnx_quantize_graph.c: ONNX weight quantization into ONNX, the graph it writes
** (src/job/onnx_job.c, src/formats/onnx_write.c, src/formats/onnx_opset.c): which weights are
** quantized and why not, the opset decision table and the three strategies (native, raised,
** com.microsoft), the int4 refusal and atomic output, Constant-node weights in subgraphs.
** Models from helpers/onnx_model.h; the numbers are in test_onnx_quantize.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensormorph.h"
#include "tensormorph/onnx_quant.h"
#include "helpers/cli_run.h"
#include "helpers/onnx_model.h"
#include "helpers/vectors.h"

/* one weight read by Gemm transB=1 (axis 0) and Gemm transB=0 (axis 1): per-tensor, said so;
** skips: a graph input, a small tensor, an int64 tensor */
static void test_conflict_and_skips(void **state) {
    (void)state;
    g_rng = 5;
    Onnx__GraphProto *g = graph("g");
    int64_t wd[2] = {6, 6}, xd[2] = {1, 6}, n;
    g_init(g, tensor_f32("W", 2, wd, weight_values(2, wd, &n)));
    int64_t sd[2] = {3, 3};
    g_init(g, tensor_f32("Wsmall", 2, sd, weight_values(2, sd, &n)));
    g_init(g, tensor_f32("Win", 2, wd, weight_values(2, wd, &n)));
    g_in(g, vinfo("X", 1, 2, xd));
    g_in(g, vinfo("Win", 1, 2, wd));
    g_node(g, node("Gemm", "g1", "X,W", "A", attr_i("transB", 1), NULL));
    g_node(g, node("Gemm", "g0", "A,W", "B", attr_i("transB", 0), NULL));
    g_node(g, node("MatMul", "m1", "B,Win", "C", NULL, NULL));
    int64_t xs[2] = {1, 3};
    g_in(g, vinfo("X3", 1, 2, xs));
    g_node(g, node("MatMul", "m2", "X3,Wsmall", "D", NULL, NULL));
    g_out(g, vinfo("C", 1, 2, xd));
    g_out(g, vinfo("D", 1, 2, xs));
    const char *in = write_model("conflict.onnx", g, 13, 7);
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, outp("conflict.q.onnx"), NULL, TM_OK, &err);
    assert_int_equal(r->n, 3);
    assert_int_equal(r->n_quantized, 1);
    for (int64_t i = 0; i < r->n; i++) {
        const tm_onnx_quantize_tensor *w = &r->weights[i];
        if (!strcmp(w->name, "W")) {
            assert_true(w->quantized);
            assert_int_equal(w->gran.kind, TM_GRAN_TENSOR);
            assert_non_null(strstr(w->reason, "different channel axes"));
            assert_string_equal(w->consumers, "Gemm");
        } else if (!strcmp(w->name, "Win")) {
            assert_false(w->quantized);
            assert_non_null(strstr(w->reason, "graph input"));
        } else {
            assert_string_equal(w->name, "Wsmall");
            assert_false(w->quantized);
            assert_non_null(strstr(w->reason, "9 elements, fewer than 16"));
        }
    }
    tm_onnx_quantize_result_free(r);
    free_allocs();
}

/* the decision table (ONNX Operators.md / Changelog.md) and DequantizeLinear's opset needs */
static void test_opset_table(void **state) {
    (void)state;
    int64_t at = -1;
    assert_int_equal(tm_onnx_op_stable("Softmax", 9, 13, &at), 0);
    assert_int_equal(at, 11); /* negative axis first (-11), then the axis semantics (-13) */
    assert_int_equal(tm_onnx_op_stable("Softmax", 11, 13, &at), 0);
    assert_int_equal(at, 13);
    assert_int_equal(tm_onnx_op_stable("Softmax", 13, 21, &at), 1);
    assert_int_equal(at, 0);
    assert_int_equal(tm_onnx_op_stable("MatMul", 1, 21, &at), 1);
    assert_int_equal(tm_onnx_op_stable("Relu", 9, 13, NULL), 1);
    assert_int_equal(tm_onnx_op_stable("Relu", 5, 13, &at), 0);
    assert_int_equal(at, 6);
    assert_int_equal(tm_onnx_op_stable("Reshape", 9, 13, NULL), 1);
    assert_int_equal(tm_onnx_op_stable("Reshape", 9, 21, &at), 0);
    assert_int_equal(at, 14);
    assert_int_equal(tm_onnx_op_stable("Squeeze", 12, 13, &at), 0);
    assert_int_equal(at, 13);
    assert_int_equal(tm_onnx_op_stable("Slice", 9, 10, NULL), 0);
    assert_int_equal(tm_onnx_op_stable("Upsample", 9, 10, NULL), 0);
    assert_int_equal(tm_onnx_op_stable("Pad", 13, 21, &at), 0);
    assert_int_equal(at, 18);
    assert_int_equal(tm_onnx_op_stable("Conv", 9, 13, &at), 0);
    assert_int_equal(at, 11);
    assert_int_equal(tm_onnx_op_stable("Conv", 11, 21, NULL), 1);
    assert_int_equal(tm_onnx_op_stable("ReduceMean", 13, 21, &at), 0);
    assert_int_equal(at, 18);
    /* unknown: assumed to change */
    assert_int_equal(tm_onnx_op_stable("NoSuchOp", 9, 13, &at), 0);
    assert_int_equal(at, 13);
    assert_int_equal(tm_onnx_op_stable("NoSuchOp", 13, 13, NULL), 1);
    assert_int_equal(tm_onnx_dq_min_opset(TM_I8, TM_GRAN_TENSOR), 10);
    assert_int_equal(tm_onnx_dq_min_opset(TM_U8, TM_GRAN_CHANNEL), 13);
    assert_int_equal(tm_onnx_dq_min_opset(TM_I8, TM_GRAN_GROUP), 21);
    assert_int_equal(tm_onnx_dq_min_opset(TM_I4, TM_GRAN_CHANNEL), 21);
    assert_int_equal(tm_onnx_dq_min_opset(TM_I4, TM_GRAN_GROUP), 21);
    assert_int_equal(tm_onnx_dq_min_opset(TM_F8_E4M3, TM_GRAN_TENSOR), -1);
    assert_int_equal(tm_onnx_dq_min_opset(TM_I8, TM_GRAN_BLOCK), -1);
    assert_string_equal(tm_onnx_opset_strategy_name(TM_ONNX_OPSET_MS_CONTRIB), "com.microsoft");
}

/* opset 9 MatMul + Relu: raised to 13 (Relu and MatMul mean the same), IR to 7 */
static void test_opset_raised(void **state) {
    (void)state;
    g_rng = 11;
    const char *in = matmul_model("mm9relu.onnx", 32, 8, 9, "Relu", NULL);
    const char *out = outp("mm9relu.q.onnx");
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, out, NULL, TM_OK, &err);
    assert_int_equal(r->strategy, TM_ONNX_OPSET_RAISED);
    assert_int_equal(r->opset_from, 9);
    assert_int_equal(r->opset_to, 13);
    assert_int_equal(r->ir_to, 7);
    tm_onnx_quantize_result_free(r);
    loaded l = load(out);
    assert_int_equal(opset_of(l.m, ""), 13);
    assert_int_equal(opset_of(l.m, "com.microsoft"), 0);
    assert_int_equal(l.m->ir_version, 7);
    const Onnx__NodeProto *dq = find_node(l.m->graph, "DequantizeLinear", "W");
    assert_true(!dq->domain || !*dq->domain);
    unload(&l);
    free_allocs();
}

/* opset 9 MatMul + Softmax: Softmax changes meaning by 13, so com.microsoft DequantizeLinear */
static void test_opset_ms_fallback(void **state) {
    (void)state;
    g_rng = 13;
    const char *in = matmul_model("mm9sm.onnx", 32, 8, 9, "Softmax", NULL);
    const char *out = outp("mm9sm.q.onnx");
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, out, NULL, TM_OK, &err);
    assert_int_equal(r->strategy, TM_ONNX_OPSET_MS_CONTRIB);
    assert_int_equal(r->opset_to, 9);
    assert_non_null(strstr(r->strategy_reason, "Softmax"));
    tm_onnx_quantize_result_free(r);
    loaded l = load(out);
    assert_int_equal(opset_of(l.m, ""), 9);
    assert_int_equal(opset_of(l.m, "com.microsoft"), 1);
    const Onnx__NodeProto *dq = find_node(l.m->graph, "DequantizeLinear", "W");
    assert_string_equal(dq->domain, "com.microsoft");
    assert_int_equal(node_attr(dq, "axis", -99), 1);
    unload(&l);
    tm_file *f = NULL;
    assert_int_equal(tm_open(out, NULL, &f, &err), TM_OK);
    const tm_tensor *t = tm_file_tensor(f, tm_file_find(f, "W_quantized"));
    assert_non_null(t->quant);
    assert_string_equal(t->quant->layout, "onnx/com.microsoft.DequantizeLinear");
    tm_close(f);
    free_allocs();
}

static int count_entries(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    if (d) closedir(d);
    return n;
}

/* int4 blocked on opset 9 with Softmax: refused naming the op; nothing at OUT, no temp file */
static void test_int4_refused_atomic(void **state) {
    (void)state;
    g_rng = 17;
    const char *in = matmul_model("mm9sm4.onnx", 64, 8, 9, "Softmax", NULL);
    tm_onnx_quantize_params p = tm_onnx_quantize_params_default();
    p.spec.code_dtype = TM_I4;
    p.spec.gran.kind = TM_GRAN_GROUP;
    p.spec.gran.group_size = 32;
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, outp("refused.onnx"), &p, TM_E_UNSUPPORTED, &err);
    assert_null(r);
    assert_non_null(strstr(err.msg, "Softmax"));
    assert_non_null(strstr(err.msg, "opset 21"));
    assert_int_equal(count_entries(g_tmp, "refused.onnx"), 0);
    /* an existing file that tensormorph did not write is never replaced */
    FILE *fp = fopen(outp("taken.onnx"), "wb");
    fputs("not ours", fp);
    fclose(fp);
    r = run_job(matmul_model("mm13b.onnx", 16, 4, 13, NULL, NULL), outp("taken.onnx"), NULL, TM_E_INVALID_ARG, &err);
    assert_non_null(strstr(err.msg, "never replaces"));
    char buf[16] = {0};
    fp = fopen(outp("taken.onnx"), "rb");
    assert_int_equal(fread(buf, 1, sizeof buf - 1, fp), 8);
    fclose(fp);
    assert_string_equal(buf, "not ours");
    assert_int_equal(count_entries(g_tmp, "taken.onnx"), 1);
    /* a failure after the first weight was quantized (NaN in the second): still nothing at OUT */
    Onnx__GraphProto *g = graph("nan");
    int64_t wd[2] = {16, 4}, xd[2] = {1, 16}, yd[2] = {1, 4}, n;
    g_init(g, tensor_f32("W1", 2, wd, weight_values(2, wd, &n)));
    float *w2 = weight_values(2, wd, &n);
    w2[5] = NAN;
    int64_t wd2[2] = {4, 4};
    g_init(g, tensor_f32("W2", 2, wd2, w2));
    g_in(g, vinfo("X", 1, 2, xd));
    g_node(g, node("MatMul", "m1", "X,W1", "H", NULL, NULL));
    g_node(g, node("MatMul", "m2", "H,W2", "Y", NULL, NULL));
    g_out(g, vinfo("Y", 1, 2, yd));
    const char *nan_in = write_model("nan.onnx", g, 13, 7);
    r = run_job(nan_in, outp("nan.q.onnx"), NULL, TM_E_NONFINITE, &err);
    assert_null(r);
    assert_non_null(strstr(err.msg, "W2"));
    assert_int_equal(count_entries(g_tmp, "nan.q.onnx"), 0);
    free_allocs();
}

/* a Constant-node weight inside both branches of an If: replaced by Constant codes/scale/zp and
** a DequantizeLinear in the same subgraph */
static Onnx__GraphProto *branch(const char *name, const char *wname, float **wv) {
    Onnx__GraphProto *b = graph(name);
    int64_t wd[2] = {16, 4}, n, yd[2] = {1, 4};
    float *w = weight_values(2, wd, &n);
    *wv = w;
    b->node[b->n_node++] = node("Constant", wname, "", wname, attr_t("value", tensor_f32(wname, 2, wd, w)), NULL);
    char out[64];
    snprintf(out, sizeof out, "%s_y", name);
    b->node[b->n_node++] = node("MatMul", out, wname[0] == 'A' ? "X,Aw" : "X,Bw", out, NULL, NULL);
    g_out(b, vinfo(out, 1, 2, yd));
    return b;
}

static const char *if_model(const char *file, float **wa, float **wb) {
    Onnx__GraphProto *g = graph("main");
    int64_t xd[2] = {1, 16}, yd[2] = {1, 4};
    g_in(g, vinfo("X", 1, 2, xd));
    g_in(g, vinfo("cond", 9, 0, NULL));
    g_node(g, node("If", "if0", "cond", "Y", attr_g("then_branch", branch("then", "Aw", wa)),
                   attr_g("else_branch", branch("else", "Bw", wb))));
    g_out(g, vinfo("Y", 1, 2, yd));
    return write_model(file, g, 16, 8);
}

static void test_subgraph_constants(void **state) {
    (void)state;
    g_rng = 23;
    float *wa, *wb;
    const char *in = if_model("if16.onnx", &wa, &wb);
    const char *out = outp("if16.q.onnx");
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, out, NULL, TM_OK, &err);
    assert_int_equal(r->n_quantized, 2);
    assert_true(r->weights[0].constant_node);
    assert_string_equal(r->weights[0].graph, "if0/then_branch");
    tm_onnx_quantize_result_free(r);
    loaded l = load(out);
    const Onnx__GraphProto *then = NULL;
    for (size_t a = 0; a < l.m->graph->node[0]->n_attribute; a++)
        if (!strcmp(l.m->graph->node[0]->attribute[a]->name, "then_branch")) then = l.m->graph->node[0]->attribute[a]->g;
    assert_non_null(then);
    /* Constant(codes), Constant(scale), Constant(zp), DequantizeLinear, MatMul */
    assert_int_equal(then->n_node, 5);
    assert_string_equal(then->node[3]->op_type, "DequantizeLinear");
    assert_string_equal(then->node[4]->op_type, "MatMul");
    const Onnx__TensorProto *q = find_init(then, "Aw_quantized"), *s = find_init(then, "Aw_scale");
    check_int8_channels(q, s, wa, 4, 16, 1, 4);
    unload(&l);
    free_allocs();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conflict_and_skips),
        cmocka_unit_test(test_opset_table),
        cmocka_unit_test(test_opset_raised),
        cmocka_unit_test(test_opset_ms_fallback),
        cmocka_unit_test(test_int4_refused_atomic),
        cmocka_unit_test(test_subgraph_constants),
    };
    return cmocka_run_group_tests(tests, onnxq_setup, onnxq_teardown);
}
