/* test_cli_reports.c: what the commands print (issue 12 items 11-13): one vocabulary of flags
** across commands (aliases accepted, listed in help and docs/cli.md), help texts that say what
** each command does, --top honoured everywhere, what quantize left dense by the user's choice
** listed first, ONNX progress in weights, compat grouping identical rows, and inspect counting
** tied .pt storage once. Real models from ../shared (skipped with the reason when absent; fails
** with TM_REQUIRE_SHARED=1). */
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
#include <unistd.h>

#include "helpers/cli_run.h"
#include "helpers/vectors.h"

static char g_tmp[64];

static const char *model(const char *rel) {
    static char buf[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/models/%s", tmv_shared_dir(), rel);
    return buf[k];
}

/* number of lines of s that start with prefix */
static int count_lines(const char *s, const char *prefix) {
    int n = 0;
    size_t lp = strlen(prefix);
    for (const char *p = s; p && *p;) {
        if (!strncmp(p, prefix, lp)) n++;
        p = strchr(p, '\n');
        if (p) p++;
    }
    return n;
}

/* ---- item 12: what quantize left dense by the options given ----------------------------------- */

static void test_kept_dense_by_choice(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char *o = NULL;
    int rc = tmt_run(&o, "%s quantize %s -o %s/g32 -g group:32 --no-checksums", tmt_bin(),
                     model("safetensors/stories260K-f32"), g_tmp);
    assert_int_equal(rc, 0);
    /* counted apart from what the defaults keep dense */
    assert_non_null(strstr(o, "kept dense: 5 by the options given, 12 by default"));
    /* all five down_proj listed, before any norm */
    const char *first_norm = strstr(o, "1-D tensor (norm or bias)");
    assert_non_null(first_norm);
    for (int l = 0; l < 5; l++) {
        char nm[80];
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj.weight", l);
        const char *p = strstr(o, nm);
        assert_non_null(p);
        assert_true(p < first_norm);
        assert_non_null(strstr(p, "group_size 32 does not divide its 172 columns"));
    }
    assert_null(strstr(o, "and 5 more"));
    assert_int_equal(count_lines(o, "  kept dense: "), 17);
    free(o);
}

/* ---- item 13: ONNX progress, compat rows, tied .pt storage ------------------------------------- */

static void test_onnx_progress_counts_weights(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char *o = NULL;
    int rc = tmt_run(&o, "%s quantize %s -o %s/vad.onnx --no-checksums --progress 2>&1 >/dev/null", tmt_bin(),
                     model("onnx/npm/silero_vad/silero_vad_v5.onnx"), g_tmp);
    assert_int_equal(rc, 0);
    assert_null(strstr(o, "0.0 / 0.0 MB"));
    assert_non_null(strstr(o, "(12 / 12 weights)"));
    free(o);
    json_t *d = tmt_run_json(0, "%s inspect %s/vad.onnx --json", tmt_bin(), g_tmp);
    assert_int_equal(json_integer_value(json_object_get(d, "n_quantized")), 12);
    json_decref(d);
}

static void test_compat_groups_rows(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    const char *q4 = model("gguf/stories260K-Q4_K_M.gguf");
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s compat %s --target tensorrt:sm80", tmt_bin(), q4), 1);
    /* 3 Q8_0 and 28 Q5_0 tensors with one reason each: two rows with their counts */
    assert_int_equal(count_lines(o, "  unsupported "), 2);
    assert_non_null(strstr(o, "28 items: blk.0.attn_k.weight, blk.0.attn_output.weight"));
    assert_non_null(strstr(o, "3 items: token_embd.weight"));
    assert_non_null(strstr(o, "31 unsupported"));
    free(o);
    json_t *d = tmt_run_json(1, "%s compat %s --target tensorrt:sm80 --json", tmt_bin(), q4);
    assert_int_equal(json_array_size(json_object_get(d, "items")), 31); /* --json keeps every row */
    json_decref(d);
    /* rows that differ stay apart */
    assert_int_equal(tmt_run(&o, "%s compat %s --target llamacpp-cpu --all", tmt_bin(), q4), 0);
    assert_int_equal(count_lines(o, "  native "), 2);
    free(o);
}

static void test_inspect_pt_tied_storage(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    /* llama2.c's checkpoint ties output.weight to tok_embeddings.weight (one storage) */
    json_t *d = tmt_run_json(0, "%s inspect %s --json", tmt_bin(), model("torch/stories260K_llama2c_ckpt.pt"));
    json_t *st = tmt_run_json(0, "%s inspect %s --json --no-tensors", tmt_bin(), model("safetensors/stories260K-f32"));
    /* the same parameters and bytes as the untied safetensors export of the same model */
    assert_int_equal(json_integer_value(json_object_get(d, "n_parameters")), 260032);
    assert_int_equal(json_integer_value(json_object_get(d, "n_parameters")),
                     json_integer_value(json_object_get(st, "n_parameters")));
    assert_int_equal(json_integer_value(json_object_get(d, "tensor_bytes")), 4 * 260032);
    assert_int_equal(json_integer_value(json_object_get(d, "n_tied")), 1);
    json_t *t = tmt_find_named(json_object_get(d, "tensors"), "model.output.weight");
    assert_non_null(t);
    assert_string_equal(json_string_value(json_object_get(t, "tied_to")), "model.tok_embeddings.weight");
    assert_null(json_object_get(tmt_find_named(json_object_get(d, "tensors"), "model.tok_embeddings.weight"), "tied_to"));
    json_decref(d);
    json_decref(st);
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s inspect %s", tmt_bin(), model("torch/stories260K_llama2c_ckpt.pt")), 0);
    assert_non_null(strstr(o, "parameters:  260032\n"));
    assert_non_null(strstr(o, "(tied: model.tok_embeddings.weight)"));
    free(o);
    /* an untied file reports no tie */
    d = tmt_run_json(0, "%s inspect %s --json --no-tensors", tmt_bin(), model("torch/stories260K_state_dict.pt"));
    assert_int_equal(json_integer_value(json_object_get(d, "n_tied")), 0);
    json_decref(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_dense_by_choice),
        cmocka_unit_test(test_onnx_progress_counts_weights),
        cmocka_unit_test(test_compat_groups_rows),
        cmocka_unit_test(test_inspect_pt_tied_storage),
    };
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tm_reports_XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char *o = NULL;
    tmt_run(&o, "rm -rf %s", g_tmp);
    free(o);
    return rc;
}
