/* test_serve_graph.c: GET /api/v1/graph of `tensormorph serve` (cli/serve/api_graph.c), the
** document the Architecture diagram draws from: on the int8 QDQ model `quantize` makes from
** PaddleOCR cls (../shared) every node and value equals `tensormorph graph --json` (same order,
** names, op types, element types, tensors; inputs and outputs by value index resolve to the
** same names), each quantized weight's scheme is its `inspect` label, and a checkpoint without
** a graph answers n_nodes 0. Skipped (with the reason printed) when ../shared is absent, unless
** TM_REQUIRE_SHARED=1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helpers/cli_run.h"
#include "helpers/fixture.h"

static char g_tmp[256], g_cls[512], g_q8[600];
static const char *g_bin;
static int g_pid = -1;      /* the server running now: stopped by teardown when a check fails */
static FILE *g_pipe;

static int have_shared(void) {
    const char *s = getenv("TM_SHARED");
    snprintf(g_cls, sizeof g_cls, "%s/models/onnx/npm/paddleocr/ch_ppocr_mobile_v2.0_cls_infer.onnx", s ? s : "../shared");
    struct stat st;
    if (stat(g_cls, &st) == 0) return 1;
    const char *req = getenv("TM_REQUIRE_SHARED");
    if (req && !strcmp(req, "1")) fail_msg("%s not found and TM_REQUIRE_SHARED=1", g_cls);
    printf("SKIP: ../shared not found (%s)\n", g_cls);
    return 0;
}

/* The API's value name of index ix (json null -> NULL). */
static const char *vname(json_t *values, json_t *ix) {
    if (json_is_null(ix)) return NULL;
    json_t *v = json_array_get(values, (size_t)json_integer_value(ix));
    assert_non_null(v);
    return json_string_value(json_object_get(v, "name"));
}

static void test_graph_equals_cli(void **state) {
    (void)state;
    if (!have_shared()) { skip(); return; }
    assert_int_equal(tmt_tmpdir_make(g_tmp, sizeof g_tmp, "serve_graph"), 0);
    snprintf(g_q8, sizeof g_q8, "%s/cls-int8.onnx", g_tmp);
    char *out = NULL;
    assert_int_equal(tmt_run(&out, "%s quantize %s -o %s -q", g_bin, g_cls, g_q8), 0);
    free(out);
    json_t *cli = tmt_run_json(0, "%s graph %s --json", g_bin, g_q8);
    json_t *ins = tmt_run_json(0, "%s inspect %s --json", g_bin, g_q8);
    const char *args[] = {g_q8, NULL};
    int port, status;
    g_pid = tmt_serve_start(args, &port, &g_pipe);
    json_t *d = tmt_http_json(port, "/api/v1/graph", &status);
    assert_int_equal(status, 200);
    assert_string_equal(json_string_value(json_object_get(d, "schema")), "tensormorph.graph/1");
    json_t *nodes = json_object_get(d, "nodes"), *values = json_object_get(d, "values"), *cn = json_object_get(cli, "nodes");
    assert_int_equal(json_integer_value(json_object_get(d, "n_nodes")), 633);  /* PROVENANCE: 471 nodes + 54 DQ + their 108 scale/zp Constants */
    assert_int_equal(json_array_size(nodes), json_array_size(cn));
    assert_int_equal(json_integer_value(json_object_get(d, "n_values")), json_integer_value(json_object_get(cli, "n_values")));
    assert_int_equal(json_array_size(values), json_integer_value(json_object_get(d, "n_values")));
    int n_dq = 0, n_scheme = 0;
    for (size_t i = 0; i < json_array_size(nodes); i++) {
        json_t *a = json_array_get(nodes, i), *b = json_array_get(cn, i);
        assert_string_equal(json_string_value(json_object_get(a, "op_type")), json_string_value(json_object_get(b, "op_type")));
        assert_string_equal(json_string_value(json_object_get(a, "name")), json_string_value(json_object_get(b, "name")));
        assert_string_equal(json_string_value(json_object_get(a, "quant_kind")), json_string_value(json_object_get(b, "quant_kind")));
        const char *side[2] = {"inputs", "outputs"};
        for (int s = 0; s < 2; s++) {
            json_t *ai = json_object_get(a, side[s]), *bi = json_object_get(b, side[s]);
            assert_int_equal(json_array_size(ai), json_array_size(bi));
            for (size_t k = 0; k < json_array_size(ai); k++) {
                json_t *bv = json_array_get(bi, k);
                const char *an = vname(values, json_array_get(ai, k));
                if (json_is_null(bv)) { assert_null(an); continue; }
                assert_string_equal(an, json_string_value(json_object_get(bv, "name")));
                json_t *av = json_array_get(values, (size_t)json_integer_value(json_array_get(ai, k)));
                assert_string_equal(json_string_value(json_object_get(av, "elem_type")), json_string_value(json_object_get(bv, "elem_type")));
                assert_true(json_equal(json_object_get(av, "tensor"), json_object_get(bv, "tensor")));
                assert_true(json_equal(json_object_get(av, "quantized"), json_object_get(bv, "quantized")));
                json_t *q = json_object_get(bv, "quantization");
                if (q) {  /* a quantized weight: its scheme is the label inspect prints */
                    const char *tn = json_string_value(json_object_get(bv, "tensor"));
                    json_t *it = tmt_find_named(json_object_get(ins, "tensors"), tn);
                    assert_non_null(it);
                    const char *want = json_string_value(json_object_get(json_object_get(it, "quantization"), "label"));
                    assert_string_equal(json_string_value(json_object_get(av, "scheme")), want);
                    assert_string_equal(json_string_value(json_object_get(av, "scheme")), json_string_value(json_object_get(q, "label")));
                    assert_true(!strncmp(want, "I8 channel:", 11));
                    /* its scale is a value of the same table, named as graph --json names it */
                    assert_string_equal(vname(values, json_object_get(av, "scale")), json_string_value(json_object_get(bv, "scale")));
                    if (s == 0 && k == 0 && !strcmp(json_string_value(json_object_get(a, "op_type")), "DequantizeLinear")) n_scheme++;
                } else if (!json_is_null(json_object_get(av, "tensor"))) {
                    assert_string_equal(json_string_value(json_object_get(av, "scheme")), "dense");
                }
            }
        }
        if (!strcmp(json_string_value(json_object_get(a, "op_type")), "DequantizeLinear")) n_dq++;
    }
    assert_int_equal(n_dq, 54);
    assert_int_equal(n_scheme, 54);  /* each DQ's weight input */
    json_decref(d);
    tmt_serve_stop(g_pid, g_pipe);
    g_pid = -1;
    /* a checkpoint has no graph: n_nodes 0, the page draws blocks from /api/v1/inspect */
    char demo[600];
    snprintf(demo, sizeof demo, "%s/demo", g_tmp);
    assert_int_equal(tmt_run(&out, "%s demo -o %s -q", g_bin, demo), 0);
    free(out);
    const char *args2[] = {demo, NULL};
    g_pid = tmt_serve_start(args2, &port, &g_pipe);
    d = tmt_http_json(port, "/api/v1/graph", &status);
    assert_int_equal(status, 200);
    assert_int_equal(json_integer_value(json_object_get(d, "n_nodes")), 0);
    assert_int_equal(json_array_size(json_object_get(d, "nodes")), 0);
    json_decref(d);
    tmt_serve_stop(g_pid, g_pipe);
    g_pid = -1;
    json_decref(cli);
    json_decref(ins);
}

static int teardown(void **state) {
    (void)state;
    if (g_pid > 0) tmt_serve_stop(g_pid, g_pipe);
    g_pid = -1;
    if (g_tmp[0]) tmt_tmpdir_remove(g_tmp);
    return 0;
}

int main(void) {
    g_bin = tmt_bin();
    const struct CMUnitTest tests[] = {cmocka_unit_test_teardown(test_graph_equals_cli, teardown)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
