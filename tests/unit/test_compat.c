/* test_compat.c: the runtime contract check (tensormorph/compat.h, `tensormorph compat`):
** the compiled-in table is valid and every rule cites a source; GGUF Q4_K_M tensors on the three
** llama.cpp targets; onnxruntime's QDQ test models on ort-cpu and TensorRT by compute
** capability; compressed-tensors checkpoints written by `tensormorph quantize` (int8 channel,
** int4 group:128, fp8) on vLLM sm80 vs sm90; fail-closed classification with a reduced table;
** bad targets and bad tables with their messages; the CLI's exit codes and JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensormorph.h"
#include "tensormorph/compat.h"
#include "helpers/cli_run.h"
#include "helpers/fixture.h"
#include "helpers/vectors.h"

static char g_tmp[256];

static tm_file *open_shared(const char *rel) {
    char p[1024];
    snprintf(p, sizeof p, "%s/models/%s", tmv_shared_dir(), rel);
    return tmt_open_ok(p);
}

static tm_compat_report *check(const tm_file *f, const char *target, const char *table) {
    tm_compat_report *r = NULL;
    tm_err err;
    tm_status s = tm_compat_check(f, target, table, table ? "test table" : NULL, &r, &err);
    if (s) print_message("%s: %s\n", target, err.msg);
    assert_int_equal(s, TM_OK);
    return r;
}

static const tm_compat_item *item(const tm_compat_report *r, const char *name) {
    for (int64_t i = 0; i < r->n_items; i++)
        if (!strcmp(r->items[i].name, name)) return &r->items[i];
    print_message("no item %s\n", name);
    fail();
    return NULL;
}

static int64_t count_ggml(const tm_compat_report *r, const char *type) {
    int64_t n = 0;
    for (int64_t i = 0; i < r->n_items; i++) n += !strcmp(r->items[i].ggml_type, type);
    return n;
}

/* ---- the table ------------------------------------------------------------------------- */

static void test_table_cites_sources(void **state) {
    (void)state;
    json_error_t je;
    json_t *t = json_loads(tm_compat_table_default(), 0, &je);
    assert_non_null(t);
    assert_string_equal(json_string_value(json_object_get(t, "schema")), "tensormorph.compat-table/1");
    json_t *sources = json_object_get(t, "sources"), *rules = json_object_get(t, "rules");
    assert_true(json_object_size(sources) >= 10);
    assert_true(json_array_size(rules) >= 25);
    size_t i;
    json_t *r;
    int per_target[6] = {0};
    const char *names[6] = {"ort-cpu", "tensorrt", "vllm", "llamacpp-cpu", "llamacpp-cuda", "llamacpp-metal"};
    json_array_foreach(rules, i, r) {
        const json_t *s = json_object_get(sources, json_string_value(json_object_get(r, "source")));
        assert_non_null(s);
        const char *url = json_string_value(json_object_get(s, "url"));
        assert_true(!strncmp(url, "https://", 8));
        assert_true(strlen(json_string_value(json_object_get(s, "title"))) > 5);
        assert_true(tm_compat_status_from_name(json_string_value(json_object_get(r, "status"))) >= 0);
        for (int k = 0; k < 6; k++) per_target[k] += !strcmp(json_string_value(json_object_get(r, "target")), names[k]);
    }
    for (int k = 0; k < 6; k++) {
        if (per_target[k] == 0) print_message("no rule for %s\n", names[k]);
        assert_true(per_target[k] > 0);
    }
    json_decref(t);
    assert_string_equal(tm_compat_status_name(TM_COMPAT_HIGHER_PRECISION), "higher_precision");
    assert_int_equal(tm_compat_status_from_name("fallback_slow"), TM_COMPAT_FALLBACK_SLOW);
    assert_int_equal(tm_compat_status_from_name("fast"), -1);
}

static void test_bad_targets_and_tables(void **state) {
    (void)state;
    char p[600];
    snprintf(p, sizeof p, "%s/demo", g_tmp);
    tm_file *f = tmt_open_ok(p);
    tm_compat_report *r = NULL;
    tm_err err;
    assert_int_equal(tm_compat_check(f, "vllm", NULL, NULL, &r, &err), TM_E_INVALID_ARG);
    assert_null(r);
    assert_non_null(strstr(err.msg, "vllm:smNN"));
    assert_int_equal(tm_compat_check(f, "vllm:sm8x", NULL, NULL, &r, &err), TM_E_INVALID_ARG);
    assert_int_equal(tm_compat_check(f, "ort-cpu:sm80", NULL, NULL, &r, &err), TM_E_INVALID_ARG);
    assert_non_null(strstr(err.msg, "takes no ':' suffix"));
    assert_int_equal(tm_compat_check(f, "onnxruntime", NULL, NULL, &r, &err), TM_E_INVALID_ARG);
    assert_non_null(strstr(err.msg, "unknown target 'onnxruntime'"));
    assert_non_null(strstr(err.msg, "llamacpp-metal"));
    assert_non_null(strstr(err.msg, "tensorrt:smNN"));
    /* a table that is not JSON: line and column */
    assert_int_equal(tm_compat_check(f, "ort-cpu", "{\"schema\": ", "bad.json", &r, &err), TM_E_CORRUPT);
    assert_non_null(strstr(err.msg, "bad.json: line 1"));
    /* a rule citing an undefined source: the JSON path */
    const char *t2 = "{\"schema\":\"tensormorph.compat-table/1\",\"sources\":{},"
                     "\"targets\":[{\"name\":\"x\",\"runtime\":\"r\",\"device\":\"d\",\"formats\":[\"onnx\"]}],"
                     "\"rules\":[{\"id\":\"a\",\"target\":\"x\",\"kind\":\"node\",\"status\":\"native\",\"reason\":\"r\",\"source\":\"nowhere\"}]}";
    assert_int_equal(tm_compat_check(f, "x", t2, "t2.json", &r, &err), TM_E_CORRUPT);
    assert_string_equal(err.msg, "t2.json: $.rules[0].source: 'nowhere' is not defined in $.sources");
    /* a schema violation: the path of the bad value */
    const char *t3 = "{\"schema\":\"tensormorph.compat-table/1\",\"sources\":{},"
                     "\"targets\":[{\"name\":\"x\",\"runtime\":\"r\",\"device\":\"d\",\"formats\":[\"onnx\"]}],"
                     "\"rules\":[{\"id\":\"a\",\"target\":\"x\",\"kind\":\"node\",\"status\":\"fast\",\"reason\":\"r\",\"source\":\"s\"}]}";
    assert_int_equal(tm_compat_check(f, "x", t3, "t3.json", &r, &err), TM_E_CORRUPT);
    assert_non_null(strstr(err.msg, "t3.json: $.rules[0].status"));
    tm_close(f);
}

/* ---- GGUF on llama.cpp ----------------------------------------------------------------- */

static void test_gguf_q4_k_m_llamacpp(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    /* the rows256 export has rows of 256: llama-quantize's Q4_K_M gives Q4_K and Q6_K there (the
    ** 260K original falls back to Q5_0/Q8_0 on its short rows, checked below) */
    tm_file *f = open_shared("gguf/stories260K-rows256-Q4_K_M.gguf");
    const char *targets[3] = {"llamacpp-cpu", "llamacpp-cuda", "llamacpp-metal"};
    const char *rule[3] = {"llamacpp-cpu-all", "llamacpp-cuda-mulmat", "llamacpp-metal-mulmm"};
    const char *src[3] = {"llamacpp-readme", "llamacpp-cuda-supports-op", "llamacpp-metal-kernels"};
    int64_t n_items = -1;
    for (int k = 0; k < 3; k++) {
        tm_compat_report *r = check(f, targets[k], NULL);
        assert_true(r->format_loaded);
        assert_string_equal(r->format, "gguf");
        if (n_items < 0) n_items = r->n_items;
        assert_int_equal(r->n_items, n_items);
        /* Q4_K_M mixes Q4_K with Q6_K (llama-quantize's per-tensor rules) */
        assert_int_equal(count_ggml(r, "Q4_K"), 31);
        assert_int_equal(count_ggml(r, "Q6_K"), 5);
        assert_int_equal(r->counts[TM_COMPAT_NATIVE], r->n_items);
        for (int64_t i = 0; i < r->n_items; i++) {
            assert_false(r->items[i].is_node);
            assert_string_equal(r->items[i].rule_id, rule[k]);
            assert_string_equal(r->items[i].source_id, src[k]);
            assert_non_null(strstr(r->items[i].source_url, "github.com/ggml-org/"));
        }
        tm_compat_report_free(r);
    }
    assert_int_equal(n_items, 36);
    /* the same file under a table whose Metal row lacks Q6_K: those tensors are unsupported with
    ** no rule (fail closed), the Q4_K ones still native */
    json_t *t = json_loads(tm_compat_table_default(), 0, NULL);
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(t, "rules"), i, r) {
        if (strcmp(json_string_value(json_object_get(r, "id")), "llamacpp-metal-mulmm")) continue;
        json_t *types = json_object_get(r, "ggml_type"), *v;
        size_t k;
        json_array_foreach(types, k, v) if (!strcmp(json_string_value(v), "Q6_K")) { json_array_remove(types, k); break; }
    }
    char *txt = json_dumps(t, 0);
    json_decref(t);
    tm_compat_report *rr = check(f, "llamacpp-metal", txt);
    free(txt);
    int64_t q6 = count_ggml(rr, "Q6_K");
    assert_int_equal(rr->counts[TM_COMPAT_UNSUPPORTED], q6);
    assert_int_equal(rr->counts[TM_COMPAT_NATIVE], rr->n_items - q6);
    for (int64_t k = 0; k < rr->n_items; k++)
        if (!strcmp(rr->items[k].ggml_type, "Q6_K")) {
            assert_null(rr->items[k].rule_id);
            assert_null(rr->items[k].source_id);
            assert_non_null(strstr(rr->items[k].reason, "fail closed"));
        }
    tm_compat_report_free(rr);
    /* a GGUF on an ONNX runtime: the format is not loaded at all */
    tm_compat_report *ro = check(f, "ort-cpu", NULL);
    assert_false(ro->format_loaded);
    assert_int_equal(ro->counts[TM_COMPAT_UNSUPPORTED], ro->n_items);
    tm_compat_report_free(ro);
    tm_close(f);
    /* the original 260K Q4_K_M: its fallback types Q5_0/Q8_0 have CUDA and Metal kernels too */
    f = open_shared("gguf/stories260K-Q4_K_M.gguf");
    for (int k = 0; k < 3; k++) {
        tm_compat_report *r = check(f, targets[k], NULL);
        assert_int_equal(count_ggml(r, "Q5_0"), 28);
        assert_int_equal(count_ggml(r, "Q8_0"), 3);
        assert_int_equal(r->counts[TM_COMPAT_NATIVE], 31);
        tm_compat_report_free(r);
    }
    tm_close(f);
}

/* ---- ONNX QDQ on ONNX Runtime and TensorRT --------------------------------------------- */

static void test_onnx_qdq_ort_tensorrt(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    tm_file *f = open_shared("onnx/ort_testdata/conv_qdq_s8s8.onnx");
    tm_compat_report *r = check(f, "ort-cpu", NULL);
    assert_int_equal(r->n_items, 6); /* Q/DQ of input and output, DQ of weight and bias */
    const tm_compat_item *w = item(r, "conv1.weight_DequantizeLinear");
    assert_true(w->is_node);
    assert_string_equal(w->op_type, "DequantizeLinear");
    assert_string_equal(w->code_dtype, "I8");
    assert_string_equal(w->operand, "weight");
    assert_string_equal(w->consumer, "Conv");
    assert_int_equal(w->consumer_inputs_8bit_dq, 1);
    assert_int_equal(w->status, TM_COMPAT_NATIVE);
    assert_string_equal(w->rule_id, "ort-dq-8bit-fused");
    const tm_compat_item *b = item(r, "conv1.bias_DequantizeLinear");
    assert_string_equal(b->code_dtype, "I32");
    assert_string_equal(b->rule_id, "ort-dq-bias-fused");
    const tm_compat_item *in = item(r, "input_DequantizeLinear");
    assert_string_equal(in->operand, "activation");
    assert_int_equal(in->symmetric, 0); /* s8s8: activations keep a non-zero zero point */
    assert_int_equal(r->counts[TM_COMPAT_NATIVE], 6);
    tm_compat_report_free(r);

    /* TensorRT is symmetric-only: the asymmetric activation Q/DQ are unsupported, the
    ** symmetric int8 weight is native, the int32 bias is not one of its quantized types */
    r = check(f, "tensorrt:sm89", NULL);
    assert_int_equal(r->compute_capability, 89);
    assert_int_equal(item(r, "conv1.weight_DequantizeLinear")->status, TM_COMPAT_NATIVE);
    assert_string_equal(item(r, "conv1.weight_DequantizeLinear")->rule_id, "trt-int8");
    assert_int_equal(item(r, "input_DequantizeLinear")->status, TM_COMPAT_UNSUPPORTED);
    assert_string_equal(item(r, "input_DequantizeLinear")->rule_id, "trt-asymmetric");
    assert_string_equal(item(r, "input_DequantizeLinear")->source_id, "trt-quantize-op");
    assert_string_equal(item(r, "conv1.bias_DequantizeLinear")->rule_id, "trt-not-a-quantized-type");
    assert_int_equal(r->counts[TM_COMPAT_NATIVE], 1);
    assert_int_equal(r->counts[TM_COMPAT_UNSUPPORTED], 5);
    tm_compat_report_free(r);
    tm_close(f);

    /* int4 weights: ORT CPU dequantizes them to float (no 4-bit compute kernel); the int32 bias
    ** of that Conv cannot fuse either; TensorRT takes INT4 as weight-only */
    f = open_shared("onnx/ort_testdata/conv.int4_weights.qdq.onnx");
    r = check(f, "ort-cpu", NULL);
    const tm_compat_item *w4 = item(r, "weight_DequantizeLinear");
    assert_string_equal(w4->code_dtype, "I4");
    assert_int_equal(w4->status, TM_COMPAT_HIGHER_PRECISION);
    assert_string_equal(w4->rule_id, "ort-dq-4bit-fp8");
    assert_int_equal(item(r, "bias_DequantizeLinear")->status, TM_COMPAT_HIGHER_PRECISION);
    /* the uint8 activation feeds a Conv whose weight is not 8-bit: nothing fuses, float Conv */
    assert_int_equal(item(r, "input_0_DequantizeLinear")->consumer_inputs_8bit_dq, 0);
    assert_int_equal(item(r, "input_0_DequantizeLinear")->status, TM_COMPAT_HIGHER_PRECISION);
    assert_string_equal(item(r, "input_0_DequantizeLinear")->rule_id, "ort-dq-8bit-unfused");
    tm_compat_report_free(r);
    r = check(f, "tensorrt:sm80", NULL);
    assert_int_equal(item(r, "weight_DequantizeLinear")->status, TM_COMPAT_NATIVE);
    assert_string_equal(item(r, "weight_DequantizeLinear")->rule_id, "trt-int4-weight");
    assert_int_equal(item(r, "input_0_DequantizeLinear")->status, TM_COMPAT_UNSUPPORTED); /* uint8 */
    tm_compat_report_free(r);
    tm_close(f);

    /* FP8 Q/DQ: TensorRT runs FP8 from compute capability 8.9 only */
    f = open_shared("onnx/ort_testdata/float8/te.cast_fp8_1_fp32.onnx");
    r = check(f, "tensorrt:sm80", NULL);
    assert_int_equal(r->n_items, 2);
    assert_int_equal(r->counts[TM_COMPAT_UNSUPPORTED], 2);
    assert_string_equal(r->items[0].code_dtype, "F8_E4M3");
    assert_string_equal(r->items[0].rule_id, "trt-fp8-older");
    tm_compat_report_free(r);
    r = check(f, "tensorrt:sm90", NULL);
    assert_int_equal(r->counts[TM_COMPAT_NATIVE], 2);
    assert_string_equal(r->items[1].rule_id, "trt-fp8-sm89");
    tm_compat_report_free(r);
    tm_close(f);
}

/* QOperator, integer and dynamic-quantization nodes (the ONNX backend node tests): ONNX Runtime
** has CPU kernels for their 8-bit forms; the TensorRT table has no row for them (fail closed) */
static void test_onnx_qoperator_nodes(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    static const struct { const char *dir, *op, *code, *ort_rule; } C[] = {
        {"test_qlinearmatmul_2D_int8_float32", "QLinearMatMul", "I8", "ort-qlinear"},
        {"test_qlinearconv", "QLinearConv", "U8", "ort-qlinear"},
        {"test_matmulinteger", "MatMulInteger", "U8", "ort-integer"},
        {"test_dynamicquantizelinear", "DynamicQuantizeLinear", "U8", "ort-dynq"},
    };
    for (size_t k = 0; k < sizeof C / sizeof C[0]; k++) {
        char rel[256];
        snprintf(rel, sizeof rel, "onnx/onnx_node_tests/%s/model.onnx", C[k].dir);
        tm_file *f = open_shared(rel);
        tm_compat_report *r = check(f, "ort-cpu", NULL);
        assert_int_equal(r->n_items, 1);
        assert_string_equal(r->items[0].op_type, C[k].op);
        assert_string_equal(r->items[0].name, "#0"); /* the node tests' nodes have no name */
        assert_string_equal(r->items[0].code_dtype, C[k].code);
        assert_int_equal(r->items[0].status, TM_COMPAT_NATIVE);
        assert_string_equal(r->items[0].rule_id, C[k].ort_rule);
        tm_compat_report_free(r);
        r = check(f, "tensorrt:sm90", NULL);
        assert_int_equal(r->items[0].status, TM_COMPAT_UNSUPPORTED);
        assert_null(r->items[0].rule_id);
        tm_compat_report_free(r);
        tm_close(f);
    }
}

/* `tensormorph quantize` on an opset-9 model (PaddleOCR cls) writes com.microsoft
** DequantizeLinear nodes: ONNX Runtime runs those contrib ops (the same rules as ai.onnx Q/DQ),
** TensorRT's parser does not import contrib ops at all, whatever the codes */
static void test_onnx_contrib_domain(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char p[600];
    snprintf(p, sizeof p, "%s/cls-int8.onnx", g_tmp);
    assert_int_equal(tmt_run(NULL, "%s quantize %s/models/onnx/npm/paddleocr/ch_ppocr_mobile_v2.0_cls_infer.onnx -o %s -q",
                             tmt_bin(), tmv_shared_dir(), p), 0);
    tm_file *f = tmt_open_ok(p);
    tm_compat_report *r = check(f, "tensorrt:sm89", NULL);
    assert_true(r->n_items >= 10);
    assert_int_equal(r->counts[TM_COMPAT_UNSUPPORTED], r->n_items);
    for (int64_t i = 0; i < r->n_items; i++) {
        const tm_compat_item *it = &r->items[i];
        assert_string_equal(it->op_type, "DequantizeLinear");
        assert_string_equal(it->domain, "com.microsoft");
        assert_string_equal(it->code_dtype, "I8"); /* symmetric int8: an ai.onnx DQ would be trt-int8 native */
        assert_int_equal(it->symmetric, 1);
        assert_string_equal(it->rule_id, "trt-contrib-op");
        assert_non_null(strstr(it->reason, "contrib op"));
        assert_non_null(strstr(it->source_url, "onnx-tensorrt"));
        assert_non_null(strstr(it->describe, "com.microsoft:DequantizeLinear"));
    }
    int64_t n = r->n_items;
    tm_compat_report_free(r);
    /* ORT CPU: the contrib DequantizeLinear runs, classified by the ai.onnx rules */
    r = check(f, "ort-cpu", NULL);
    assert_int_equal(r->n_items, n);
    assert_int_equal(r->counts[TM_COMPAT_UNSUPPORTED], 0);
    for (int64_t i = 0; i < r->n_items; i++) {
        assert_string_equal(r->items[i].domain, "com.microsoft");
        assert_true(!strcmp(r->items[i].rule_id, "ort-dq-8bit-unfused") || !strcmp(r->items[i].rule_id, "ort-dq-other"));
        assert_non_null(strstr(r->items[i].source_url, "onnxruntime"));
    }
    tm_compat_report_free(r);
    tm_close(f);
    /* a rule without "domain" matches ai.onnx nodes only: a table whose one TensorRT row says
    ** "every DequantizeLinear is native" does not claim the contrib op (fail closed) */
    const char *table =
        "{\"schema\": \"tensormorph.compat-table/1\", \"sources\": {\"s\": {\"url\": \"https://example.org\", \"title\": \"t\", \"facts\": \"f\"}},"
        " \"targets\": [{\"name\": \"tensorrt\", \"runtime\": \"r\", \"device\": \"d\", \"compute_capability\": true, \"formats\": [\"onnx\"]}],"
        " \"rules\": [{\"id\": \"any-dq\", \"target\": \"tensorrt\", \"kind\": \"node\", \"sm_min\": 80.0, \"op_type\": [\"DequantizeLinear\"],"
        " \"status\": \"native\", \"reason\": \"x\", \"source\": \"s\"}]}";
    f = tmt_open_ok(p);
    r = check(f, "tensorrt:sm89", table);
    assert_int_equal(r->counts[TM_COMPAT_UNSUPPORTED], r->n_items);
    assert_null(r->items[0].rule_id);
    tm_compat_report_free(r);
    tm_close(f);
    /* sm_min written 80.0 is the integer 80 (JSON Schema's "integer"): on an ai.onnx model the
    ** row holds on sm89 and not on sm75; 1e300 is no compute capability (the table is refused) */
    f = open_shared("onnx/ort_testdata/conv_qdq_s8s8.onnx");
    r = check(f, "tensorrt:sm89", table);
    assert_int_equal(r->counts[TM_COMPAT_NATIVE], 4); /* the 4 DequantizeLinear; the 2 QuantizeLinear have no row */
    for (int64_t i = 0; i < r->n_items; i++) {
        assert_string_equal(r->items[i].domain, "ai.onnx");
        if (!strcmp(r->items[i].op_type, "DequantizeLinear")) assert_string_equal(r->items[i].rule_id, "any-dq");
    }
    tm_compat_report_free(r);
    r = check(f, "tensorrt:sm75", table);
    assert_int_equal(r->counts[TM_COMPAT_UNSUPPORTED], r->n_items);
    tm_compat_report_free(r);
    char *big = strdup(table);
    assert_non_null(big);
    char *at = strstr(big, "80.0");
    assert_non_null(at);
    memcpy(at, "1e99", 4);
    tm_err err;
    assert_int_equal(tm_compat_check(f, "tensorrt:sm89", big, "big.json", &r, &err), TM_E_CORRUPT);
    assert_non_null(strstr(err.msg, "big.json: $.rules[0].sm_min"));
    assert_non_null(strstr(err.msg, "outside the 64-bit integer range"));
    /* a domain on a tensor rule means nothing: the table is refused */
    const char *tdom =
        "{\"schema\": \"tensormorph.compat-table/1\", \"sources\": {\"s\": {\"url\": \"https://example.org\", \"title\": \"t\", \"facts\": \"f\"}},"
        " \"targets\": [{\"name\": \"tensorrt\", \"runtime\": \"r\", \"device\": \"d\", \"compute_capability\": true, \"formats\": [\"onnx\"]}],"
        " \"rules\": [{\"id\": \"t\", \"target\": \"tensorrt\", \"kind\": \"tensor\", \"domain\": [\"ai.onnx\"],"
        " \"status\": \"native\", \"reason\": \"x\", \"source\": \"s\"}]}";
    assert_int_equal(tm_compat_check(f, "tensorrt:sm89", tdom, "dom.json", &r, &err), TM_E_CORRUPT);
    assert_string_equal(err.msg, "dom.json: $.rules[0].domain: only node rules have a domain (kind is 'tensor')");
    free(big);
    tm_close(f);
    /* the CLI's JSON carries the domain */
    json_t *j = tmt_run_json(1, "%s compat %s --target tensorrt:sm89 --json", tmt_bin(), p);
    json_t *first = json_array_get(json_object_get(j, "items"), 0);
    assert_string_equal(json_string_value(json_object_get(first, "domain")), "com.microsoft");
    assert_string_equal(json_string_value(json_object_get(first, "rule")), "trt-contrib-op");
    json_decref(j);
}

/* ---- compressed-tensors on vLLM -------------------------------------------------------- */

static void vllm_case(const char *dir, const char *target, tm_compat_status want, const char *rule, const char *code) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", g_tmp, dir);
    tm_file *f = tmt_open_ok(p);
    tm_compat_report *r = check(f, target, NULL);
    assert_true(r->n_items >= 20);
    assert_int_equal(r->counts[want], r->n_items);
    for (int64_t i = 0; i < r->n_items; i++) {
        assert_string_equal(r->items[i].code_dtype, code);
        assert_string_equal(r->items[i].rule_id, rule);
        assert_non_null(strstr(r->items[i].source_url, "vllm"));
    }
    /* per tensor: a known projection */
    const tm_compat_item *q = item(r, "model.layers.0.self_attn.q_proj.weight");
    assert_int_equal(q->status, want);
    tm_compat_report_free(r);
    tm_close(f);
}

static void test_compressed_tensors_vllm(void **state) {
    (void)state;
    vllm_case("q8", "vllm:sm80", TM_COMPAT_NATIVE, "vllm-int8-weight-marlin", "I8");
    vllm_case("q8", "vllm:sm90", TM_COMPAT_NATIVE, "vllm-int8-weight-marlin", "I8");
    vllm_case("q4", "vllm:sm80", TM_COMPAT_NATIVE, "vllm-int4-marlin", "I4");
    vllm_case("q4", "vllm:sm90", TM_COMPAT_NATIVE, "vllm-int4-machete", "I4");
    vllm_case("q4", "vllm:sm75", TM_COMPAT_UNSUPPORTED, "vllm-int4-old", "I4");
    /* fp8: no FP8 math below 8.9, the weight-only Marlin path instead */
    vllm_case("f8", "vllm:sm80", TM_COMPAT_HIGHER_PRECISION, "vllm-fp8-marlin", "F8_E4M3");
    vllm_case("f8", "vllm:sm90", TM_COMPAT_NATIVE, "vllm-fp8-w8a8", "F8_E4M3");
    vllm_case("f8", "vllm:sm70", TM_COMPAT_UNSUPPORTED, "vllm-fp8-none", "F8_E4M3");
    /* group:128 is what the item says */
    char p[600];
    snprintf(p, sizeof p, "%s/q4", g_tmp);
    tm_file *f = tmt_open_ok(p);
    tm_compat_report *r = check(f, "vllm:sm90", NULL);
    assert_string_equal(item(r, "model.layers.0.mlp.up_proj.weight")->granularity, "group");
    assert_non_null(strstr(item(r, "model.layers.0.mlp.up_proj.weight")->describe, "group:128"));
    tm_compat_report_free(r);
    tm_close(f);
}

/* ---- the CLI --------------------------------------------------------------------------- */

static void test_cli_exit_codes_and_json(void **state) {
    (void)state;
    const char *bin = tmt_bin();
    json_t *j = tmt_run_json(1, "%s compat %s/f8 --target vllm:sm80 --json", bin, g_tmp);
    assert_string_equal(json_string_value(json_object_get(j, "schema")), "tensormorph.compat/1");
    assert_string_equal(json_string_value(json_object_get(j, "target")), "vllm:sm80");
    assert_int_equal(json_integer_value(json_object_get(j, "compute_capability")), 80);
    assert_false(json_is_true(json_object_get(j, "all_native")));
    json_t *items = json_object_get(j, "items");
    json_t *q = tmt_find_named(items, "model.layers.1.self_attn.o_proj.weight");
    assert_non_null(q);
    assert_string_equal(json_string_value(json_object_get(q, "status")), "higher_precision");
    assert_string_equal(json_string_value(json_object_get(json_object_get(q, "source"), "url")),
                        "https://docs.vllm.ai/en/v0.32.0/features/quantization/llm_compressor/fp8/");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "counts"), "higher_precision")),
                     (json_int_t)json_array_size(items));
    assert_non_null(json_object_get(json_object_get(j, "sources"), "vllm-fp8"));
    json_decref(j);
    j = tmt_run_json(0, "%s compat %s/f8 --target vllm:sm90 --json", bin, g_tmp);
    assert_true(json_is_true(json_object_get(j, "all_native")));
    json_decref(j);
    char *out = NULL;
    assert_int_equal(tmt_run(&out, "%s compat %s/q8 --target vllm 2>&1", bin, g_tmp), 2);
    assert_non_null(strstr(out, "vllm:smNN"));
    free(out);
    assert_int_equal(tmt_run(&out, "%s compat %s/q8 2>&1", bin, g_tmp), 2);
    assert_non_null(strstr(out, "--target is required"));
    free(out);
    assert_int_equal(tmt_run(&out, "%s compat %s/nothing-here --target ort-cpu 2>/dev/null", bin, g_tmp), 4);
    free(out);
    /* text output of a non-native run names the reason and the source */
    assert_int_equal(tmt_run(&out, "%s compat %s/q8 --target ort-cpu", bin, g_tmp), 1);
    assert_non_null(strstr(out, "does not load safetensors artifacts"));
    assert_non_null(strstr(out, "summary: 0 native, 0 higher_precision, 0 fallback_slow, 28 unsupported"));
    free(out);
    /* a table given with --table that does not parse: exit 3 */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/bad-table.json", g_tmp);
    FILE *fp = fopen(bad, "w");
    assert_non_null(fp);
    fputs("{\"schema\": \"tensormorph.compat-table/1\",", fp);
    fclose(fp);
    assert_int_equal(tmt_run(&out, "%s compat %s/q8 --target ort-cpu --table %s 2>&1", bin, g_tmp, bad), 3);
    assert_non_null(strstr(out, "bad-table.json: line"));
    free(out);
    if (tmv_shared_dir()) {
        j = tmt_run_json(0, "%s compat %s/models/gguf/stories260K-Q4_K_M.gguf --target llamacpp-metal --json", bin, tmv_shared_dir());
        assert_true(json_is_true(json_object_get(j, "all_native")));
        json_t *first = json_array_get(json_object_get(j, "items"), 0);
        assert_string_equal(json_string_value(json_object_get(first, "kind")), "tensor");
        assert_non_null(json_string_value(json_object_get(first, "ggml_type")));
        json_decref(j);
    }
}

/* ---- fixtures -------------------------------------------------------------------------- */

static int setup(void **state) {
    (void)state;
    if (tmt_demo(g_tmp, sizeof g_tmp, "test_compat")) return -1;
    const char *bin = tmt_bin();
    if (tmt_run(NULL, "%s quantize %s/demo -o %s/q8 -t int8 -g channel -q", bin, g_tmp, g_tmp)) return -1;
    if (tmt_run(NULL, "%s quantize %s/demo -o %s/q4 -t int4 -g group:128 -q", bin, g_tmp, g_tmp)) return -1;
    if (tmt_run(NULL, "%s quantize %s/demo -o %s/f8 -t fp8_e4m3 -q", bin, g_tmp, g_tmp)) return -1;
    return 0;
}

static int teardown(void **state) { (void)state; return tmt_tmpdir_remove(g_tmp); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_cites_sources),
        cmocka_unit_test(test_bad_targets_and_tables),
        cmocka_unit_test(test_gguf_q4_k_m_llamacpp),
        cmocka_unit_test(test_onnx_qdq_ort_tensorrt),
        cmocka_unit_test(test_onnx_qoperator_nodes),
        cmocka_unit_test(test_onnx_contrib_domain),
        cmocka_unit_test(test_compressed_tensors_vllm),
        cmocka_unit_test(test_cli_exit_codes_and_json),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
