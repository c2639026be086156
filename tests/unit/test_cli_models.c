/* test_cli_models.c: every safetensors checkpoint in ../shared/models opens, quantizes and
** reports: the full matrix of valid type x granularity x observer x symmetry on two models
** (one F32, one BF16) and, in the release build, on the other three as well (a listed subset
** there under the sanitizers); each output is read back by inspect and
** measured by qdiff. Skipped (with the reason printed) when ../shared is absent, unless
** TM_REQUIRE_SHARED=1 (CI), then it fails. */
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
#include <sys/wait.h>
#include <unistd.h>

#include "helpers/cli_run.h"

static char g_tmp[256];
static const char *g_bin;
static char g_models[512];

static int run_capture(char **out, const char *cmd) { return tmt_run(out, "%s", cmd); }
#define jrun(...) tmt_run_json(0, __VA_ARGS__)
#define num tmt_num

static int have_shared(void) {
    const char *s = getenv("TM_SHARED");
    snprintf(g_models, sizeof g_models, "%s/models/safetensors", s ? s : "../shared");
    struct stat st;
    if (stat(g_models, &st) == 0) return 1;
    const char *req = getenv("TM_REQUIRE_SHARED");
    if (req && !strcmp(req, "1")) fail_msg("../shared/models not found at %s and TM_REQUIRE_SHARED=1", g_models);
    printf("SKIP: ../shared not found (%s); set TM_SHARED to run the real-model tests\n", g_models);
    return 0;
}

typedef struct combo { const char *type, *gran, *observer; int asym; } combo;

static void check_run(const char *model, const combo *c, int idx) {
    char out[600];
    snprintf(out, sizeof out, "%s/%s-%d", g_tmp, strrchr(model, '/') + 1, idx);
    json_t *q = jrun("%s quantize %s -o %s -t %s -g %s --observer %s %s --no-checksums --json", g_bin, model, out,
                     c->type, c->gran, c->observer, c->asym ? "--asymmetric" : "--symmetric");
    json_t *man = json_object_get(q, "manifest");
    int64_t nq = json_integer_value(json_object_get(json_object_get(man, "results"), "n_quantized"));
    if (nq == 0) fprintf(stderr, "no tensor quantized: %s %s %s\n", c->type, c->gran, c->observer);
    assert_true(nq > 0);
    json_t *qd = jrun("%s qdiff %s %s --json", g_bin, model, out);
    json_t *ts = json_object_get(qd, "tensors");
    assert_int_equal((int64_t)json_array_size(ts), nq);
    size_t i;
    json_t *t;
    int clipping_observer = strcmp(c->observer, "minmax") && strcmp(c->observer, "ema_minmax");
    json_array_foreach(ts, i, t) {
        double sq = num(t, "sqnr_db"), rl = num(t, "rmse_lsb"), mx = num(t, "max_err_lsb");
        assert_true(sq > 5);
        assert_true(isfinite(rl) && rl > 0);
        if (!clipping_observer) {
            if (mx > 0.5 + 1e-3) fprintf(stderr, "%s %s %s %s: max_err_lsb %g\n", json_string_value(json_object_get(t, "name")), c->type, c->gran, c->observer, mx);
            if (num(t, "clipped_fraction") != 0) fprintf(stderr, "%s %s %s %s asym=%d: clipped %g\n", json_string_value(json_object_get(t, "name")), c->type, c->gran, c->observer, c->asym, num(t, "clipped_fraction"));
            assert_true(mx <= 0.5 + 1e-3);
            assert_true(num(t, "clipped_fraction") == 0);
        }
        /* the job measured the same tensor from the same values */
        const char *name = json_string_value(json_object_get(t, "name"));
        size_t k;
        json_t *m;
        json_array_foreach(json_object_get(man, "tensors"), k, m) {
            if (strcmp(json_string_value(json_object_get(m, "name")), name)) continue;
            double sq2 = num(json_object_get(m, "error"), "sqnr_db");
            assert_true(fabs(sq2 - sq) <= 1e-6 * fabs(sq) + 1e-9);
        }
    }
    json_decref(qd);
    json_t *in = jrun("%s inspect %s --json", g_bin, out);
    assert_int_equal(json_array_size(json_object_get(in, "warnings")), 0);
    int64_t seen = 0;
    json_array_foreach(json_object_get(in, "tensors"), i, t) {
        json_t *qq = json_object_get(t, "quantization");
        if (!json_is_object(qq)) continue;
        seen++;
        const char *g = json_string_value(json_object_get(qq, "granularity"));
        assert_int_equal(strncmp(c->gran, g, strlen(g)), 0);
        assert_int_equal(json_is_true(json_object_get(qq, "symmetric")), !c->asym);
    }
    assert_int_equal(seen, nq);
    json_decref(in);
    json_decref(q);
    char *o;
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", out);
    run_capture(&o, cmd);
    free(o);
}

static const char *types[] = {"int8", "int4", "fp8_e4m3"};
static const char *grans[] = {"tensor", "channel", "group:16", "block:16x16"};
static const char *observers[] = {"minmax", "ema_minmax", "histogram", "percentile:99.9", "mse", "entropy"};

static int valid(const char *type, const char *gran, int asym) {
    int fp8 = !strcmp(type, "fp8_e4m3");
    if (fp8 && (asym || !strncmp(gran, "group", 5))) return 0; /* fp8: no zero point, no groups */
    return 1;
}

static void full_matrix(const char *name) {
    char model[700];
    snprintf(model, sizeof model, "%s/%s", g_models, name);
    int idx = 0, n = 0;
    for (size_t t = 0; t < 3; t++)
        for (size_t g = 0; g < 4; g++)
            for (size_t o = 0; o < 6; o++)
                for (int asym = 0; asym < 2; asym++) {
                    if (!valid(types[t], grans[g], asym)) continue;
                    combo c = {types[t], grans[g], observers[o], asym};
                    check_run(model, &c, idx++);
                    n++;
                }
    assert_int_equal(n, 114); /* 2 int types x 4 x 6 x 2 + fp8 x 3 x 6 */
}

static void test_matrix_stories_f32(void **s) { (void)s; if (have_shared()) full_matrix("stories260K-f32"); }
static void test_matrix_aidreams_bf16(void **s) { (void)s; if (have_shared()) full_matrix("aidreams260K-bf16"); }

static void subset(const char *name) {
    static const combo list[] = {
        {"int8", "channel", "minmax", 0}, {"int8", "tensor", "percentile:99.99", 1},
        {"int4", "group:16", "mse", 1},   {"int4", "block:16x16", "minmax", 0},
        {"fp8_e4m3", "channel", "minmax", 0}, {"int8", "channel", "entropy", 0},
        {"int4", "channel", "histogram", 1},
    };
    char model[700];
    snprintf(model, sizeof model, "%s/%s", g_models, name);
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) check_run(model, &list[i], (int)i);
}

/* The release build runs the full matrix on every checkpoint; the sanitizer build
** (TM_MODELS_MATRIX=subset, set by scripts/test.sh) runs the listed subset on these three to
** stay inside the CI budget — the numerics are the same code paths as the full runs above. */
static void test_matrix_others(void **s) {
    (void)s;
    if (!have_shared()) return;
    const char *m = getenv("TM_MODELS_MATRIX");
    int sub = m && !strcmp(m, "subset");
    const char *names[] = {"stories260K-bf16", "stories260K-f16", "stories260K-f32-2shards"};
    for (size_t i = 0; i < 3; i++) {
        if (sub) subset(names[i]);
        else full_matrix(names[i]);
    }
}

/* The sharded and the single-file F32 checkpoints hold the same tensors: their quantized
** outputs are byte-identical. */
static void test_sharded_equals_single(void **s) {
    (void)s;
    if (!have_shared()) return;
    char *o;
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s quantize %s/stories260K-f32 -o %s/a -t int4 -g group:16 -q --no-checksums && "
             "%s quantize %s/stories260K-f32-2shards -o %s/b -t int4 -g group:16 -q --no-checksums && "
             "cmp %s/a/model.safetensors %s/b/model.safetensors",
             g_bin, g_models, g_tmp, g_bin, g_models, g_tmp, g_tmp, g_tmp);
    assert_int_equal(run_capture(&o, cmd), 0);
    free(o);
    /* and a sharded output (--max-shard-size) reads back the same tensors */
    json_t *q = jrun("%s quantize %s/stories260K-f32 -o %s/c -t int8 --max-shard-size 100KB --no-checksums --json", g_bin, g_models, g_tmp);
    assert_true(json_array_size(json_object_get(json_object_get(json_object_get(q, "manifest"), "output"), "files")) > 2);
    json_decref(q);
    json_t *d = jrun("%s diff %s/a %s/c --json", g_bin, g_tmp, g_tmp);
    assert_true(json_integer_value(json_object_get(d, "n_differ")) > 0); /* int4 vs int8 differ */
    json_decref(d);
    d = jrun("%s qdiff %s/stories260K-f32 %s/c --json", g_bin, g_models, g_tmp);
    assert_true(json_array_size(json_object_get(d, "tensors")) > 0);
    json_decref(d);
}

static int setup(void **s) {
    (void)s;
    g_bin = tmt_bin();
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tm_models_XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}
static int teardown(void **s) {
    (void)s;
    char *o, cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    run_capture(&o, cmd);
    free(o);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matrix_stories_f32),
        cmocka_unit_test(test_matrix_aidreams_bf16),
        cmocka_unit_test(test_matrix_others),
        cmocka_unit_test(test_sharded_equals_single),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
