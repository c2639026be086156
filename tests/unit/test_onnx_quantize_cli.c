/* test_onnx_quantize_cli.c: `tensormorph quantize X.onnx -o Y.onnx` from the command line:
** --json fields and the manifest beside OUT, --force, qdiff pairing X_quantized with X, the exit
** codes (docs/exit-codes.md) for inputs ONNX output cannot take or nothing to quantize, already
** quantized models of ../shared, and tm_ref_find with `scalar --ref`, `heatmap --ref` and
** `inspect` on the output. Models from helpers/onnx_model.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tensormorph.h"
#include "tensormorph/onnx_quant.h"
#include "helpers/cli_run.h"
#include "helpers/onnx_model.h"
#include "helpers/vectors.h"

/* the CLI: --json fields, the manifest beside OUT, qdiff pairs W_quantized with W */
static void test_cli_json_and_qdiff(void **state) {
    (void)state;
    g_rng = 29;
    const char *in = matmul_model("mmcli.onnx", 32, 8, 9, "Relu", NULL);
    const char *out = outp("mmcli.q.onnx");
    json_t *j = tmt_run_json(0, "%s quantize %s -o %s --json", tmt_bin(), in, out);
    assert_string_equal(json_string_value(json_object_get(j, "schema")), "tensormorph.quantize/1");
    assert_string_equal(json_string_value(json_object_get(j, "output")), out);
    json_t *os = json_object_get(j, "opset");
    assert_string_equal(json_string_value(json_object_get(os, "strategy")), "raised");
    assert_int_equal(json_integer_value(json_object_get(os, "from")), 9);
    assert_int_equal(json_integer_value(json_object_get(os, "to")), 13);
    json_t *man = json_object_get(j, "manifest");
    assert_string_equal(json_string_value(json_object_get(man, "schema")), "tensormorph.manifest/1");
    assert_string_equal(json_string_value(json_object_get(json_object_get(man, "recipe"), "format")), "onnx");
    json_t *t = tmt_find_named(json_object_get(man, "tensors"), "W");
    assert_non_null(t);
    assert_string_equal(json_string_value(json_object_get(t, "decision")), "quantized");
    assert_string_equal(json_string_value(json_object_get(t, "quantized_name")), "W_quantized");
    double rl = tmt_num(json_object_get(t, "error"), "rmse_lsb");
    assert_true(rl > 0.2 && rl < 0.36);
    json_t *src = json_array_get(json_object_get(man, "sources"), 0);
    assert_int_equal(strlen(json_string_value(json_object_get(src, "sha256"))), 64);
    json_t *of = json_array_get(json_object_get(json_object_get(man, "output"), "files"), 0);
    assert_int_equal(strlen(json_string_value(json_object_get(of, "sha256"))), 64);
    json_decref(j);
    char mp[600];
    snprintf(mp, sizeof mp, "%s.manifest.json", out);
    assert_true(tmt_exists(mp));
    /* a second run refuses without --force, replaces with it */
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s 2>&1", tmt_bin(), in, out), 2);
    free(o);
    j = tmt_run_json(0, "%s quantize %s -o %s --force --json", tmt_bin(), in, out);
    json_decref(j);
    /* qdiff: the quantized tensor W_quantized is measured against W */
    j = tmt_run_json(0, "%s qdiff %s %s --json", tmt_bin(), in, out);
    json_t *arr = json_object_get(j, "tensors");
    assert_non_null(arr);
    json_t *e = tmt_find_named(arr, "W_quantized");
    assert_non_null(e);
    double q_rl = tmt_num(e, "rmse_lsb");
    assert_true(q_rl > 0.2 && q_rl < 0.36);
    json_decref(j);
    /* the refusal from the command line: exit 3 (unsupported input), op named */
    in = matmul_model("mmcli4.onnx", 64, 8, 9, "Softmax", NULL);
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s -t int4 -g group:32 2>&1", tmt_bin(), in, outp("cli4.onnx")), 3);
    assert_non_null(strstr(o, "Softmax"));
    free(o);
    assert_false(tmt_exists(outp("cli4.onnx")));
    free_allocs();
}

/* Exit codes of the CLI for inputs ONNX output cannot take: a non-ONNX input is a usage error
** (2); a model whose external data file is missing cannot be opened (4, the file named); an
** already-quantized model to compressed-tensors is unsupported input (3). */
static void test_cli_exit_codes(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char src[4096], dir[600], cmd[8192];
    snprintf(src, sizeof src, "%s/models/onnx/ort_testdata/conv_qdq_external_ini.onnx", tmv_shared_dir());
    snprintf(dir, sizeof dir, "%s/extmiss", g_tmp);
    mkdir(dir, 0755);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/'", src, dir);
    assert_int_equal(system(cmd), 0);
    char *o = NULL;
    /* copied without its .bin: 4, naming the missing file */
    assert_int_equal(tmt_run(&o, "%s quantize %s/conv_qdq_external_ini.onnx -o %s 2>&1", tmt_bin(), dir,
                             outp("ext.q.onnx")), 4);
    assert_non_null(strstr(o, "conv_qdq_external_ini.bin"));
    assert_non_null(strstr(o, "missing"));
    free(o);
    json_t *j = tmt_run_json(4, "%s inspect %s/conv_qdq_external_ini.onnx --json 2>/dev/null", tmt_bin(), dir);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "error"), "code")), 4);
    json_decref(j);
    /* a QDQ model (already quantized) to compressed-tensors: 3 */
    snprintf(src, sizeof src, "%s/models/onnx/ort_testdata/conv_qdq_s8s8.onnx", tmv_shared_dir());
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s 2>&1", tmt_bin(), src, outp("qdq-ct")), 3);
    assert_non_null(strstr(o, "already quantized"));
    free(o);
    /* ONNX output from a safetensors input: usage error, nothing written */
    snprintf(src, sizeof src, "%s/demo", g_tmp);
    assert_int_equal(tmt_run(&o, "%s demo -o %s -q", tmt_bin(), src), 0);
    free(o);
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s 2>&1", tmt_bin(), src, outp("st.onnx")), 2);
    assert_non_null(strstr(o, "needs an ONNX input"));
    free(o);
    assert_false(tmt_exists(outp("st.onnx")));
    /* an output directory that does not exist: 4, naming OUT and the directory */
    snprintf(src, sizeof src, "%s/models/onnx/ort_testdata/conv_qdq_s8s8.onnx", tmv_shared_dir());
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s 2>&1", tmt_bin(), src, outp("nodir/y.onnx")), 4);
    assert_non_null(strstr(o, "directory"));
    assert_non_null(strstr(o, "does not exist"));
    assert_null(strstr(o, ".tmp."));
    free(o);
    free_allocs();
}

/* A model X -> Conv(X, W[6,3,3,3]) -> Y at opset 13; *wv gets W's values. */
static const char *conv_model(const char *file, float **wv) {
    Onnx__GraphProto *g = graph("cv");
    int64_t wd[4] = {6, 3, 3, 3}, xd[4] = {1, 3, 5, 5}, n;
    float *w = weight_values(4, wd, &n);
    if (wv) *wv = w;
    g_init(g, tensor_f32("W", 4, wd, w));
    g_in(g, vinfo("X", 1, 4, xd));
    g_node(g, node("Conv", "conv0", "X,W", "Y", NULL, NULL));
    g_out(g, vinfo("Y", 1, 0, NULL));
    return write_model(file, g, 13, 7);
}

/* No weight to quantize is refused as the compressed-tensors job refuses it (exit 3 for a
** reason of the input, 2 for filters; nothing written) unless --allow-empty. */
static void test_nothing_to_quantize(void **state) {
    (void)state;
    g_rng = 41;
    const char *in = conv_model("conv.onnx", NULL);
    /* library: group:N on a model whose only weight feeds Conv */
    tm_onnx_quantize_params p = tm_onnx_quantize_params_default();
    p.spec.gran.kind = TM_GRAN_GROUP;
    p.spec.gran.group_size = 32;
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, outp("conv.g.onnx"), &p, TM_E_UNSUPPORTED, &err);
    assert_null(r);
    assert_non_null(strstr(err.msg, "group:32 applies to MatMul weights only"));
    assert_non_null(strstr(err.msg, "this model's 1 weight feed Conv"));
    assert_false(tmt_exists(outp("conv.g.onnx")));
    assert_false(tmt_exists(outp("conv.g.onnx.manifest.json")));
    /* allow_empty: the copy, nothing quantized, the reason kept per weight */
    p.allow_empty = 1;
    r = run_job(in, outp("conv.g.onnx"), &p, TM_OK, &err);
    assert_int_equal(r->n, 1);
    assert_int_equal(r->n_quantized, 0);
    assert_non_null(strstr(r->weights[0].reason, "MatMul weights only"));
    tm_onnx_quantize_result_free(r);
    assert_true(tmt_exists(outp("conv.g.onnx")));
    /* the CLI: exit 3 with the reason, --json error document; --allow-empty accepted */
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s -g group:16 2>&1", tmt_bin(), in, outp("cli.g.onnx")), 3);
    assert_non_null(strstr(o, "group:16 applies to MatMul weights only"));
    assert_non_null(strstr(o, "--allow-empty"));
    free(o);
    assert_false(tmt_exists(outp("cli.g.onnx")));
    json_t *j = tmt_run_json(3, "%s quantize %s -o %s -g group:16 --json 2>/dev/null", tmt_bin(), in, outp("cli.g.onnx"));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "error"), "code")), 3);
    json_decref(j);
    j = tmt_run_json(0, "%s quantize %s -o %s -g group:16 --allow-empty --json", tmt_bin(), in, outp("cli.g.onnx"));
    json_t *sum = json_object_get(json_object_get(j, "manifest"), "results");
    assert_int_equal(json_integer_value(json_object_get(sum, "n_quantized")), 0);
    assert_int_equal(json_integer_value(json_object_get(sum, "n_kept")), 1);
    json_decref(j);
    /* filters: an --include that matches no weight, an --exclude of every weight: exit 2 */
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s --include '^nothing$' 2>&1", tmt_bin(), in, outp("cli.i.onnx")), 2);
    assert_non_null(strstr(o, "--include '^nothing$' matched no weight (of 1)"));
    free(o);
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s --exclude '^W$' 2>&1", tmt_bin(), in, outp("cli.e.onnx")), 2);
    assert_non_null(strstr(o, "1 of 1 float weights filtered out"));
    free(o);
    assert_false(tmt_exists(outp("cli.i.onnx")));
    assert_false(tmt_exists(outp("cli.e.onnx")));
    /* an already quantized model (our own output): exit 3, the DequantizeLinear weight counted */
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s -q", tmt_bin(), in, outp("conv.q.onnx")), 0);
    free(o);
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s 2>&1", tmt_bin(), outp("conv.q.onnx"), outp("conv.qq.onnx")), 3);
    assert_non_null(strstr(o, "already quantized: 1 DequantizeLinear weight,"));
    free(o);
    assert_false(tmt_exists(outp("conv.qq.onnx")));
    /* every weight too small: exit 3 naming the reason */
    Onnx__GraphProto *g = graph("small");
    int64_t wd[2] = {3, 3}, xd[2] = {1, 3}, n;
    g_init(g, tensor_f32("Ws", 2, wd, weight_values(2, wd, &n)));
    g_in(g, vinfo("X", 1, 2, xd));
    g_node(g, node("MatMul", "m", "X,Ws", "Y", NULL, NULL));
    g_out(g, vinfo("Y", 1, 2, xd));
    in = write_model("small.onnx", g, 13, 7);
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s 2>&1", tmt_bin(), in, outp("small.q.onnx")), 3);
    assert_non_null(strstr(o, "'Ws': 9 elements, fewer than 16"));
    free(o);
    assert_false(tmt_exists(outp("small.q.onnx")));
    free_allocs();
}

/* ONNX Runtime's own QDQ models, already quantized: exit 3 (docs/exit-codes.md), not a copy */
static void test_already_quantized_shared(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    static const char *const models[] = {"conv_qdq_s8s8.onnx", "conv_qdq_s8s8_perchannel.onnx", "conv_qdq_u8u8.onnx"};
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        char src[4096], *o = NULL;
        snprintf(src, sizeof src, "%s/models/onnx/ort_testdata/%s", tmv_shared_dir(), models[k]);
        assert_int_equal(tmt_run(&o, "%s quantize %s -o %s 2>&1", tmt_bin(), src, outp("ortq.onnx")), 3);
        assert_non_null(strstr(o, "already quantized: 1 DequantizeLinear weight,"));
        free(o);
        assert_false(tmt_exists(outp("ortq.onnx")));
    }
}

/* tm_ref_find, and through it `scalar --ref` and `heatmap --ref`: W_quantized of an ONNX output
** is measured against W of the source; the symmetric output reads back as symmetric. */
static void test_ref_pairing_and_symmetric(void **state) {
    (void)state;
    g_rng = 43;
    float *w;
    const char *in = conv_model("convref.onnx", &w);
    const char *out = outp("convref.q.onnx");
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s -q", tmt_bin(), in, out), 0);
    free(o);
    tm_err err;
    tm_file *src = NULL, *q = NULL;
    assert_int_equal(tm_open(in, NULL, &src, &err), TM_OK);
    assert_int_equal(tm_open(out, NULL, &q, &err), TM_OK);
    assert_int_equal(tm_ref_find(src, "W_quantized"), tm_file_find(src, "W"));
    assert_true(tm_ref_find(src, "W") >= 0);
    assert_int_equal(tm_ref_find(src, "W_scale"), -1);
    assert_int_equal(tm_ref_find(src, "_quantized"), -1);
    assert_int_equal(tm_ref_find(NULL, "W_quantized"), -1);
    assert_int_equal(tm_ref_find(src, NULL), -1);
    /* exact name first: the output paired with itself */
    assert_int_equal(tm_ref_find(q, "W_quantized"), tm_file_find(q, "W_quantized"));
    /* symmetric int8 (zero points all 0) is symmetric to the reader */
    const tm_tensor *qt = tm_file_tensor(q, tm_file_find(q, "W_quantized"));
    assert_non_null(qt->quant);
    assert_true(qt->quant->zero_point_tensor >= 0);
    assert_int_equal(qt->quant->symmetric, 1);
    tm_close(q);
    tm_close(src);
    /* scalar --ref: element [4,2,1,0] (flat 4*27 + 2*9 + 1*3 = 129) against the source value */
    int64_t flat = 4 * 27 + 2 * 9 + 1 * 3;
    float es = ref_scale(w + 4 * 27, 27, 1, 127);
    int code = ref_code(w[flat], es, 127);
    json_t *j = tmt_run_json(0, "%s scalar %s W_quantized 4,2,1,0 --ref %s --json", tmt_bin(), out, in);
    assert_int_equal(json_integer_value(json_object_get(j, "code")), code);
    assert_true(tmt_num(j, "value") == (double)((float)code * es));
    assert_true(tmt_num(j, "ref_value") == (double)w[flat]);
    assert_true(fabs(tmt_num(j, "error") - ((double)((float)code * es) - (double)w[flat])) < 1e-12);
    double el = tmt_num(j, "error_lsb");
    assert_true(fabs(el) <= 0.5 + 1e-6);
    assert_true(fabs(el - ((double)((float)code * es) - (double)w[flat]) / (double)es) < 1e-6);
    assert_null(json_object_get(j, "note"));
    json_decref(j);
    assert_int_equal(tmt_run(&o, "%s scalar %s W_quantized 4,2,1,0 --ref %s", tmt_bin(), out, in), 0);
    assert_non_null(strstr(o, "(tensor 'W' of the reference)"));
    free(o);
    /* heatmap --mode error --ref: drawn, the range is the largest |error| in LSB */
    double maxl = 0;
    for (int64_t c = 0; c < 6; c++) {
        float s = ref_scale(w + c * 27, 27, 1, 127);
        for (int64_t k = 0; k < 27; k++) {
            float dq = (float)ref_code(w[c * 27 + k], s, 127) * s;
            double l = fabs((double)dq - (double)w[c * 27 + k]) / (double)s;
            if (l > maxl) maxl = l;
        }
    }
    j = tmt_run_json(0, "%s heatmap %s W_quantized --mode error --ref %s -o %s --json", tmt_bin(), out, in,
                     outp("err.png"));
    assert_string_equal(json_string_value(json_object_get(j, "ref_tensor")), "W");
    json_t *rg = json_object_get(j, "range");
    assert_true(fabs(json_number_value(json_array_get(rg, 1)) - maxl) < 1e-5);
    assert_true(maxl > 0.25 && maxl <= 0.5 + 1e-6);
    json_decref(j);
    assert_true(tmt_exists(outp("err.png")));
    /* inspect labels the scheme sym, --json "symmetric": true; the asymmetric output is not */
    j = tmt_run_json(0, "%s inspect %s --json", tmt_bin(), out);
    json_t *t = tmt_find_named(json_object_get(j, "tensors"), "W_quantized");
    assert_non_null(t);
    assert_true(json_is_true(json_object_get(json_object_get(t, "quantization"), "symmetric")));
    json_decref(j);
    assert_int_equal(tmt_run(&o, "%s inspect %s", tmt_bin(), out), 0);
    assert_non_null(strstr(o, "I8 channel:0 sym scale:F32"));
    free(o);
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s --asymmetric -q", tmt_bin(), in, outp("convref.a.onnx")), 0);
    free(o);
    j = tmt_run_json(0, "%s inspect %s --json", tmt_bin(), outp("convref.a.onnx"));
    t = tmt_find_named(json_object_get(j, "tensors"), "W_quantized");
    assert_true(json_is_false(json_object_get(json_object_get(t, "quantization"), "symmetric")));
    json_decref(j);
    free_allocs();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_json_and_qdiff),
        cmocka_unit_test(test_cli_exit_codes),
        cmocka_unit_test(test_nothing_to_quantize),
        cmocka_unit_test(test_already_quantized_shared),
        cmocka_unit_test(test_ref_pairing_and_symmetric),
    };
    return cmocka_run_group_tests(tests, onnxq_setup, onnxq_teardown);
}
