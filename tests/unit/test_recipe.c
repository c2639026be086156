/*
** test_recipe.c: a manifest's "recipe" object is a recipe (docs/recipe.md). For a table of
** schemes on each output form of `quantize` (compressed-tensors, GGUF, ONNX; every observer with
** parameters, every granularity, int8/int4/fp8, sym/asym, GGUF file types and rules), the recipe
** object of the manifest the first run writes, saved alone as a file and fed back with
** `quantize --recipe FILE` and no other scheme option, is accepted, records the same recipe and
** reproduces the output byte for byte. Models from ../shared (skipped without it).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/cli_run.h"
#include "helpers/vectors.h"

static char g_dir[64];

static void assert_same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char *x = tmt_read_bytes(a, &na), *y = tmt_read_bytes(b, &nb);
    if (!x || !y || na != nb || memcmp(x, y, na)) fail_msg("%s and %s differ (%zu / %zu bytes)", a, b, na, nb);
    free(x);
    free(y);
}

/* The manifest's recipe without what says where it came from (the file and its text). */
static json_t *recipe_of(const char *manifest) {
    json_error_t je;
    json_t *m = json_load_file(manifest, 0, &je);
    if (!m) fail_msg("%s: %s", manifest, je.text);
    json_t *r = json_deep_copy(json_object_get(m, "recipe"));
    json_decref(m);
    assert_true(json_is_object(r));
    return r;
}

/* form: 0 compressed-tensors (OUT a directory), 1 GGUF, 2 ONNX. */
static void round_trip(int form, const char *in, const char *flags, int k) {
    static const char *const ext[] = {"", ".gguf", ".onnx"};
    char o1[160], o2[160], m1[200], m2[200], rf[160];
    snprintf(o1, sizeof o1, "%s/f%d_%d_a%s", g_dir, form, k, ext[form]);
    snprintf(o2, sizeof o2, "%s/f%d_%d_b%s", g_dir, form, k, ext[form]);
    snprintf(rf, sizeof rf, "%s/f%d_%d.recipe.json", g_dir, form, k);
    if (form == 0) {
        snprintf(m1, sizeof m1, "%s/tensormorph-manifest.json", o1);
        snprintf(m2, sizeof m2, "%s/tensormorph-manifest.json", o2);
    } else {
        snprintf(m1, sizeof m1, "%s.manifest.json", o1);
        snprintf(m2, sizeof m2, "%s.manifest.json", o2);
    }
    char *out = NULL;
    int rc = tmt_run(&out, "%s quantize '%s' -o '%s' %s --no-checksums -q 2>&1", tmt_bin(), in, o1, flags);
    if (rc) fail_msg("quantize %s: exit %d: %s", flags, rc, out ? out : "");
    free(out);
    json_t *r1 = recipe_of(m1);
    assert_int_equal(json_dump_file(r1, rf, JSON_INDENT(1)), 0);
    out = NULL;
    rc = tmt_run(&out, "%s quantize '%s' -o '%s' --recipe '%s' --no-checksums -q 2>&1", tmt_bin(), in, o2, rf);
    if (rc) fail_msg("quantize --recipe (from %s): exit %d: %s", flags, rc, out ? out : "");
    free(out);
    json_t *r2 = recipe_of(m2);
    if (form == 0) { /* the second run also records where its recipe came from */
        assert_true(json_is_null(json_object_get(r1, "recipe_file")) || strstr(flags, "--recipe"));
        json_object_del(r1, "recipe_file"), json_object_del(r2, "recipe_file");
        json_object_del(r1, "recipe"), json_object_del(r2, "recipe");
    }
    if (!json_equal(r1, r2)) {
        char *a = json_dumps(r1, JSON_COMPACT), *b = json_dumps(r2, JSON_COMPACT);
        fail_msg("recipe did not read back (%s):\n%s\n%s", flags, a, b);
    }
    json_decref(r1);
    json_decref(r2);
    if (form) {
        assert_same_file(o1, o2);
        return;
    }
    DIR *d = opendir(o1);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "tensormorph-manifest.json")) continue;
        char a[600], b[600];
        snprintf(a, sizeof a, "%s/%s", o1, e->d_name);
        snprintf(b, sizeof b, "%s/%s", o2, e->d_name);
        assert_same_file(a, b);
        n++;
    }
    closedir(d);
    assert_true(n >= 2); /* config.json and the safetensors file(s) at least */
}

static void setup_dir(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/tm_recipe_XXXXXX");
    assert_non_null(mkdtemp(g_dir));
}

static void cleanup_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    assert_int_equal(system(cmd), 0);
}

/* round_trip of every scheme on the model at ../shared/models/<model>. */
static void run_table(int form, const char *model, const char *const *schemes, int n) {
    char in[512];
    snprintf(in, sizeof in, "%s/models/%s", tmv_shared_dir(), model);
    for (int k = 0; k < n; k++) round_trip(form, in, schemes[k], k);
    cleanup_dir();
}

static void test_compressed_tensors_recipe_round_trip(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    setup_dir();
    char user[160];
    /* a user recipe with ignore and mixed-precision targets: the manifest records it as rules */
    snprintf(user, sizeof user, "%s/user.json", g_dir);
    FILE *f = fopen(user, "w");
    assert_non_null(f);
    fputs("{\"default\": {\"type\": \"int4\", \"granularity\": \"group:32\", \"observer\": \"percentile:99.99\"},"
          " \"ignore\": [\"layers\\\\.0\\\\.mlp\\\\.down_proj\"],"
          " \"targets\": [{\"pattern\": \"q_proj\", \"scheme\": {\"type\": \"int8\", \"granularity\": \"channel\","
          " \"symmetric\": false, \"observer\": \"ema_minmax:0.25\"}},"
          " {\"pattern\": \"k_proj\", \"scheme\": {\"type\": \"fp8_e4m3\", \"granularity\": \"block:16x32\"}}]}",
          f);
    fclose(f);
    char with_recipe[256];
    snprintf(with_recipe, sizeof with_recipe, "--recipe '%s'", user);
    const char *const schemes[] = {
        "-t int8",
        "-t int8 -g tensor --asymmetric --observer ema_minmax:0.9",
        "-t int8 -g channel:0 --observer histogram --convention torch",
        "-t int8 -g channel --asymmetric --observer mse --scale-dtype f16",
        "-t int8 --observer entropy",
        "-t int8 --asymmetric --observer entropy:bins=256:quantized_bins=64",
        "-t int8 --observer percentile:99.999:bins=1024 --scale-dtype bf16",
        "-t int4 -g group:32 --observer percentile:99.9",
        "-t int4 -g group:16:-1 --asymmetric --observer ema_minmax:0.30000000000000004 --convention torch",
        "-t fp8 -g channel",
        "-t fp8_e4m3 -g tensor --observer percentile:99.99",
        "-t fp8 -g block:16x16",
        "-t int8 --quantize-embeddings --include 'self_attn|embed_tokens' --exclude 'o_proj'",
        "-t int4 -g group:4 --max-shard-size 100KB --allow-nonfinite --strict",
        with_recipe,
    };
    run_table(0, "safetensors/stories260K-bf16", schemes, (int)(sizeof schemes / sizeof schemes[0]));
}

static void test_gguf_recipe_round_trip(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    setup_dir();
    const char *const schemes[] = {
        "-t Q4_K_M",
        "-t Q8_0 --pure",
        "-t Q4_0 --leave-output-tensor --tensor-type 'ffn_down=Q8_0' --tensor-type 'attn_(q|k)=Q5_1'",
        "-t Q2_K --strict",
        "-t Q6_K",
    };
    run_table(1, "gguf/stories260K-F32.gguf", schemes, (int)(sizeof schemes / sizeof schemes[0]));
}

static void test_onnx_recipe_round_trip(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    setup_dir();
    const char *const schemes[] = {
        "-t int8",
        "-t uint8 -g tensor --asymmetric --observer ema_minmax:0.5",
        "-t uint8 -g channel --asymmetric --observer percentile:99.9 --convention torch",
        "-t int8 -g channel --observer entropy",
        "-t int8 --observer histogram --exclude 'conv1'",
        "-t int8 --observer mse --include 'conv'",
        "-t int8 -g tensor --allow-nonfinite",
    };
    run_table(2, "onnx/npm/paddleocr/ch_ppocr_mobile_v2.0_cls_infer.onnx", schemes, (int)(sizeof schemes / sizeof schemes[0]));
}

/* What --recipe refuses, naming the file: another form's recipe, an unknown key, a bad name. */
static void test_recipe_refusals(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    setup_dir();
    char in[512], rf[160];
    snprintf(in, sizeof in, "%s/models/gguf/stories260K-F32.gguf", tmv_shared_dir());
    snprintf(rf, sizeof rf, "%s/r.json", g_dir);
    const char *const bad[][2] = {
        {"{\"format\": \"onnx\", \"default\": {\"type\": \"I8\"}}", ""},
        {"{\"default\": {\"type\": \"I8\", \"granularity\": \"group\"}}", ""},
        {"{\"default\": {\"observer\": \"percentile:101\"}}", ""},
        {"{\"default\": {\"granularity\": \"tensor\", \"axis\": 0}}", ""},
        {"{\"rules\": [], \"targets\": []}", ""},
        {"{\"file_type\": \"Q4_K_M\"}", ""},
        {"{\"file_type\": \"Q4_K_M\", \"file_type_id\": 7}", ".gguf"},
        {"{\"file_type\": \"Q4_K_M\", \"importance_matrix\": \"x.dat\"}", ".gguf"},
        {"{\"file_type\": \"Q4_K_Z\"}", ".gguf"},
        {"{\"tensor_types\": [{\"pattern\": \"ffn\", \"type\": \"Q9_9\"}], \"file_type\": \"Q8_0\"}", ".gguf"},
        {"{\"format\": \"gguf\", \"file_type\": \"Q8_0\"}", ".onnx"},
        {"{\"default\": {\"type\": \"fp8_e4m3\"}}", ".onnx"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        FILE *f = fopen(rf, "w");
        assert_non_null(f);
        fputs(bad[k][0], f);
        fclose(f);
        char *out = NULL;
        int rc = tmt_run(&out, "%s quantize '%s' -o '%s/o%zu%s' --recipe '%s' 2>&1", tmt_bin(), in, g_dir, k, bad[k][1], rf);
        if (rc != 3 || !out || !strstr(out, rf)) fail_msg("recipe %s: exit %d: %s", bad[k][0], rc, out ? out : "");
        free(out);
    }
    cleanup_dir();
}

/* qdiff reads the observer names of the manifest (entropy:bins=128, histogram:bins=512 since
** they carry their parameters): clipping observers expect clipping, so it is not flagged. */
static void test_qdiff_reads_observer_names(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    setup_dir();
    char in[512];
    snprintf(in, sizeof in, "%s/models/safetensors/stories260K-bf16", tmv_shared_dir());
    const char *const obs[] = {"entropy", "histogram:bins=512"};
    for (int k = 0; k < 2; k++) {
        char *out = NULL;
        int rc = tmt_run(&out, "%s quantize '%s' -o '%s/q%d' -t int4 -g group:16 --observer %s --no-checksums -q 2>&1",
                         tmt_bin(), in, g_dir, k, obs[k]);
        if (rc) fail_msg("quantize: exit %d: %s", rc, out ? out : "");
        free(out);
        json_t *d = tmt_run_json(0, "%s qdiff '%s' '%s/q%d' --json", tmt_bin(), in, g_dir, k);
        json_t *ts = json_object_get(d, "tensors"), *t;
        size_t i;
        assert_true(json_array_size(ts) > 10);
        json_array_foreach(ts, i, t) {
            const char *why = json_string_value(json_object_get(t, "reason"));
            if (why && strstr(why, "clipped")) fail_msg("%s: %s flagged: %s", obs[k], json_string_value(json_object_get(t, "name")), why);
        }
        json_decref(d);
    }
    cleanup_dir();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compressed_tensors_recipe_round_trip),
        cmocka_unit_test(test_gguf_recipe_round_trip),
        cmocka_unit_test(test_onnx_recipe_round_trip),
        cmocka_unit_test(test_recipe_refusals),
        cmocka_unit_test(test_qdiff_reads_observer_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
