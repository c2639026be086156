/* test_cli_main.c: the main job end to end through the tensormorph binary (env TM_BIN):
** demo checkpoint -> quantize (every output form) -> inspect -> qdiff -> scalar -> diff,
** checked through --json with real values; refusals and exit codes; atomic output; the
** real safetensors checkpoints of ../shared/models. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "tensormorph.h"
#include "helpers/cli_run.h"

static char g_tmp[256];
static const char *g_bin;

#define run tmt_run
#define run_json tmt_run_json
#define jnum tmt_num
#define find_named tmt_find_named
#define exists tmt_exists

static int setup_all(void **state) {
    (void)state;
    g_bin = tmt_bin();
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tm_cli_XXXXXX");
    if (!mkdtemp(g_tmp)) return -1;
    char *o;
    int rc = run(&o, "%s demo -o %s/demo -q", g_bin, g_tmp);
    free(o);
    return rc;
}

static int teardown_all(void **state) {
    (void)state;
    char *o;
    run(&o, "rm -rf %s", g_tmp);
    free(o);
    return 0;
}

/* default job: int8 per-channel symmetric minmax onnx on the demo checkpoint */
static void test_quantize_default_int8_channel(void **state) {
    (void)state;
    json_t *d = run_json(0, "%s quantize %s/demo -o %s/q8 --json", g_bin, g_tmp, g_tmp);
    json_t *man = json_object_get(d, "manifest");
    json_t *res = json_object_get(man, "results");
    /* 4 layers x 7 Linear weights; embed, lm_head and 9 norms kept */
    assert_int_equal(json_integer_value(json_object_get(res, "n_quantized")), 28);
    assert_int_equal(json_integer_value(json_object_get(res, "n_tensors")), 39);
    json_t *ts = json_object_get(man, "tensors");
    json_t *e = find_named(ts, "model.embed_tokens.weight");
    assert_string_equal(json_string_value(json_object_get(e, "decision")), "kept");
    assert_string_equal(json_string_value(json_object_get(e, "reason")), "embedding (kept dense by default)");
    e = find_named(ts, "lm_head.weight");
    assert_string_equal(json_string_value(json_object_get(e, "reason")), "lm_head (kept dense by default)");
    e = find_named(ts, "model.norm.weight");
    assert_string_equal(json_string_value(json_object_get(e, "reason")), "1-D tensor (norm or bias)");
    /* the all-zero row of layers.1 o_proj: one degenerate channel, still a finite result */
    e = find_named(ts, "model.layers.1.self_attn.o_proj.weight");
    assert_int_equal(json_integer_value(json_object_get(e, "degenerate_units")), 1);
    /* plain rounding: RMSE near 1/sqrt(12) LSB, max half an LSB, nothing clipped */
    size_t i;
    json_t *t;
    int n_checked = 0;
    json_array_foreach(ts, i, t) {
        if (strcmp(json_string_value(json_object_get(t, "decision")), "quantized")) continue;
        json_t *er = json_object_get(t, "error");
        double rl = jnum(er, "rmse_lsb");
        assert_true(rl > 0.2 && rl < 0.36);
        assert_true(jnum(er, "max_err_lsb") <= 0.5 + 1e-3);
        assert_true(jnum(er, "clipped_fraction") == 0);
        assert_true(jnum(er, "sqnr_db") > 20);
        n_checked++;
    }
    assert_int_equal(n_checked, 28);
    /* sources hashed, outputs listed with sha256 */
    json_t *src = json_array_get(json_object_get(man, "sources"), 0);
    assert_int_equal(strlen(json_string_value(json_object_get(src, "sha256"))), 64);
    json_t *outs = json_object_get(json_object_get(man, "output"), "files");
    assert_true(json_array_size(outs) >= 1);
    json_decref(d);

    char p[512];
    snprintf(p, sizeof p, "%s/q8/config.json", g_tmp);
    json_t *cfg = json_load_file(p, 0, NULL);
    assert_non_null(cfg);
    json_t *qc = json_object_get(cfg, "quantization_config");
    assert_string_equal(json_string_value(json_object_get(qc, "quant_method")), "compressed-tensors");
    assert_string_equal(json_string_value(json_object_get(qc, "format")), "pack-quantized");
    assert_string_equal(json_string_value(json_object_get(qc, "quantization_status")), "compressed");
    json_t *g0 = json_object_get(json_object_get(qc, "config_groups"), "group_0");
    assert_string_equal(json_string_value(json_object_get(g0, "format")), "pack-quantized");
    json_t *w = json_object_get(g0, "weights");
    assert_int_equal(json_integer_value(json_object_get(w, "num_bits")), 8);
    assert_string_equal(json_string_value(json_object_get(w, "strategy")), "channel");
    assert_true(json_is_true(json_object_get(w, "symmetric")));
    json_t *ign = json_object_get(qc, "ignore");
    int has_lm = 0;
    json_array_foreach(ign, i, t) has_lm |= !strcmp(json_string_value(t), "lm_head");
    assert_true(has_lm);
    assert_string_equal(json_string_value(json_object_get(cfg, "model_type")), "llama");
    json_decref(cfg);
    snprintf(p, sizeof p, "%s/q8/tensormorph-manifest.json", g_tmp);
    assert_true(exists(p));
}

static void test_inspect_quantized_output(void **state) {
    (void)state;
    json_t *d = run_json(0, "%s inspect %s/q8 --json", g_bin, g_tmp);
    assert_string_equal(json_string_value(json_object_get(d, "format")), "safetensors");
    json_t *ts = json_object_get(d, "tensors");
    json_t *e = find_named(ts, "model.layers.0.mlp.down_proj.weight");
    assert_non_null(e);
    assert_string_equal(json_string_value(json_object_get(e, "stored_as")), "model.layers.0.mlp.down_proj.weight_packed");
    assert_string_equal(json_string_value(json_object_get(e, "dtype")), "I8");
    json_t *sh = json_object_get(e, "shape");
    assert_int_equal(json_integer_value(json_array_get(sh, 0)), 256);
    assert_int_equal(json_integer_value(json_array_get(sh, 1)), 688);
    json_t *q = json_object_get(e, "quantization");
    assert_string_equal(json_string_value(json_object_get(q, "granularity")), "channel");
    assert_string_equal(json_string_value(json_object_get(q, "scale_dtype")), "F32");
    /* 8 bits per code + one f32 scale per 688-value row + weight_shape */
    double bpp = jnum(e, "bits_per_param");
    assert_true(fabs(bpp - (8.0 + 32.0 / 688 + 128.0 / (256 * 688))) < 1e-6);
    e = find_named(ts, "model.layers.0.mlp.down_proj.weight_scale");
    assert_string_equal(json_string_value(json_object_get(e, "role")), "scale");
    json_t *warn = json_object_get(d, "warnings");
    if (json_array_size(warn)) fprintf(stderr, "warnings: %s\n", json_dumps(warn, 0));
    assert_int_equal(json_array_size(warn), 0);
    json_decref(d);
}

static void test_qdiff_and_scalar(void **state) {
    (void)state;
    json_t *d = run_json(0, "%s qdiff %s/demo %s/q8 --json", g_bin, g_tmp, g_tmp);
    json_t *ts = json_object_get(d, "tensors");
    assert_int_equal(json_array_size(ts), 28);
    json_t *e = find_named(ts, "model.layers.2.mlp.down_proj.weight");
    assert_non_null(e);
    double rl = jnum(e, "rmse_lsb");
    assert_true(rl > 0.2 && rl < 0.36);
    /* the outlier input channels of layers.2 down_proj make its steps coarse: low SQNR */
    double med = jnum(d, "median_sqnr_db");
    assert_true(jnum(e, "sqnr_db") < med - 10);
    assert_true(json_is_true(json_object_get(e, "flagged")));
    assert_non_null(strstr(json_string_value(json_object_get(e, "reason")), "below the median"));
    /* flagged first */
    assert_true(json_is_true(json_object_get(json_array_get(ts, 0), "flagged")));
    json_decref(d);
    char *o;
    assert_int_equal(run(&o, "%s qdiff %s/demo %s/q8 --fail-on-flag >/dev/null", g_bin, g_tmp, g_tmp), 1);
    free(o);

    /* Scalar Inspector: value = (code - zp) * scale, error within half an LSB */
    d = run_json(0, "%s scalar %s/q8 model.layers.2.mlp.down_proj.weight 5,7 --ref %s/demo --json", g_bin, g_tmp, g_tmp);
    double code = jnum(d, "code"), scale = jnum(d, "scale"), zp = jnum(d, "zero_point");
    double value = jnum(d, "value"), ref = jnum(d, "ref_value");
    assert_true(code >= -128 && code <= 127);
    assert_true(zp == 0);
    assert_true((float)value == (float)((float)(code - zp) * (float)scale));
    assert_true(fabs(jnum(d, "error_lsb")) <= 0.5 + 1e-6);
    assert_true(fabs(value - ref) <= 0.5 * scale * 1.0001);
    assert_int_equal((int64_t)jnum(d, "group"), 5);
    /* the stored container word holds the code + 128 in the byte of column 7 (7 % 4 = 3) */
    uint64_t stored = (uint64_t)jnum(d, "stored");
    assert_int_equal((stored >> 24) & 0xff, (uint64_t)((int64_t)code + 128));
    json_decref(d);
    /* the all-zero row dequantizes to exactly zero */
    d = run_json(0, "%s scalar %s/q8 model.layers.1.self_attn.o_proj.weight 3,100 --json", g_bin, g_tmp);
    assert_true(jnum(d, "value") == 0 && jnum(d, "code") == 0);
    assert_true(isfinite(jnum(d, "scale")) && jnum(d, "scale") > 0);
    json_decref(d);
}

static void test_deterministic_across_threads(void **state) {
    (void)state;
    char *o;
    assert_int_equal(run(&o, "%s quantize %s/demo -o %s/t1 -g group:64 -t int4 --asymmetric --threads 1 -q", g_bin, g_tmp, g_tmp), 0);
    free(o);
    assert_int_equal(run(&o, "%s quantize %s/demo -o %s/t2 -g group:64 -t int4 --asymmetric --threads 2 -q", g_bin, g_tmp, g_tmp), 0);
    free(o);
    assert_int_equal(run(&o, "cmp %s/t1/model.safetensors %s/t2/model.safetensors", g_tmp, g_tmp), 0);
    free(o);
    assert_int_equal(run(&o, "TM_FORCE_KERNEL=ref %s quantize %s/demo -o %s/t3 -g group:64 -t int4 --asymmetric --threads 2 -q", g_bin, g_tmp, g_tmp), 0);
    free(o);
    assert_int_equal(run(&o, "cmp %s/t1/model.safetensors %s/t3/model.safetensors", g_tmp, g_tmp), 0);
    free(o);
    /* the demo checkpoint itself is deterministic */
    assert_int_equal(run(&o, "%s demo -o %s/demo2 -q && cmp %s/demo/model.safetensors %s/demo2/model.safetensors", g_bin, g_tmp, g_tmp, g_tmp), 0);
    free(o);
}

static void test_int4_group_asym_layout(void **state) {
    (void)state;
    json_t *d = run_json(0, "%s inspect %s/t1 --json", g_bin, g_tmp);
    json_t *ts = json_object_get(d, "tensors");
    json_t *e = find_named(ts, "model.layers.0.self_attn.q_proj.weight");
    json_t *q = json_object_get(e, "quantization");
    assert_string_equal(json_string_value(json_object_get(q, "type")), "I4");
    assert_string_equal(json_string_value(json_object_get(q, "granularity")), "group");
    assert_int_equal(json_integer_value(json_object_get(q, "group_size")), 64);
    assert_false(json_is_true(json_object_get(q, "symmetric")));
    e = find_named(ts, "model.layers.0.self_attn.q_proj.weight_zero_point");
    assert_non_null(e);
    /* [256 rows, 4 groups] int4 zero points packed along dim 0: [256*4/32, 4] I32 */
    json_t *sh = json_object_get(e, "shape");
    assert_int_equal(json_integer_value(json_array_get(sh, 0)), 32);
    assert_int_equal(json_integer_value(json_array_get(sh, 1)), 4);
    e = find_named(ts, "model.layers.0.self_attn.q_proj.weight_packed");
    if (!e) {
        e = find_named(ts, "model.layers.0.self_attn.q_proj.weight");
        assert_string_equal(json_string_value(json_object_get(e, "stored_as")), "model.layers.0.self_attn.q_proj.weight_packed");
    }
    json_decref(d);
    d = run_json(0, "%s qdiff %s/demo %s/t1 --json", g_bin, g_tmp, g_tmp);
    json_t *t;
    size_t i;
    json_array_foreach(json_object_get(d, "tensors"), i, t) {
        double rl = jnum(t, "rmse_lsb");
        assert_true(rl > 0.2 && rl < 0.36);
        assert_true(jnum(t, "max_err_lsb") <= 0.5 + 1e-3);
    }
    json_decref(d);
}

static void test_fp8_and_refusals(void **state) {
    (void)state;
    json_t *d = run_json(0, "%s quantize %s/demo -o %s/f8 -t fp8_e4m3 --json --no-checksums", g_bin, g_tmp, g_tmp);
    json_t *man = json_object_get(d, "manifest");
    assert_string_equal(json_string_value(json_object_get(man, "checksums")), "skipped (--no-checksums)");
    json_decref(d);
    char p[512];
    snprintf(p, sizeof p, "%s/f8/config.json", g_tmp);
    json_t *cfg = json_load_file(p, 0, NULL);
    json_t *qc = json_object_get(cfg, "quantization_config");
    assert_string_equal(json_string_value(json_object_get(qc, "format")), "naive-quantized");
    json_decref(cfg);
    d = run_json(0, "%s inspect %s/f8 --json", g_bin, g_tmp);
    json_t *e = find_named(json_object_get(d, "tensors"), "model.layers.3.mlp.up_proj.weight");
    assert_string_equal(json_string_value(json_object_get(e, "dtype")), "F8_E4M3");
    json_decref(d);
    d = run_json(0, "%s qdiff %s/demo %s/f8 --json", g_bin, g_tmp, g_tmp);
    json_t *t;
    size_t i;
    json_array_foreach(json_object_get(d, "tensors"), i, t) assert_true(jnum(t, "max_err_lsb") <= 0.5 + 1e-3);
    json_decref(d);
    char *o;
    /* types and granularities the compressed-tensors layout cannot represent: exit 2 */
    assert_int_equal(run(&o, "%s quantize %s/demo -o %s/x -t uint8 2>&1", g_bin, g_tmp, g_tmp), 2);
    assert_non_null(strstr(o, "signed"));
    free(o);
    assert_int_equal(run(&o, "%s quantize %s/demo -o %s/x -t fp8_e5m2 2>&1", g_bin, g_tmp, g_tmp), 2);
    assert_non_null(strstr(o, "e5m2"));
    free(o);
    assert_int_equal(run(&o, "%s quantize %s/demo -o %s/x -g channel:1 2>&1", g_bin, g_tmp, g_tmp), 2);
    free(o);
    assert_false(exists("x"));
    snprintf(p, sizeof p, "%s/x", g_tmp);
    assert_false(exists(p));
    /* a group size that does not divide 688 columns: those tensors kept dense with the reason */
    d = run_json(0, "%s quantize %s/demo -o %s/g128 -t int4 -g group:128 --json --no-checksums", g_bin, g_tmp, g_tmp);
    e = find_named(json_object_get(json_object_get(d, "manifest"), "tensors"), "model.layers.0.mlp.down_proj.weight");
    assert_non_null(strstr(json_string_value(json_object_get(e, "reason")), "does not divide"));
    json_decref(d);
    snprintf(p, sizeof p, "%s/g128/config.json", g_tmp);
    cfg = json_load_file(p, 0, NULL);
    json_t *ign = json_object_get(json_object_get(cfg, "quantization_config"), "ignore");
    int found = 0;
    json_array_foreach(ign, i, t) found |= !strcmp(json_string_value(t), "model.layers.0.mlp.down_proj");
    assert_true(found);
    json_decref(cfg);
    assert_int_equal(run(&o, "%s quantize %s/demo -o %s/y -t int4 -g group:128 --strict 2>&1", g_bin, g_tmp, g_tmp), 3);
    free(o);
    /* usage errors */
    assert_int_equal(run(&o, "%s quantize %s/demo 2>&1", g_bin, g_tmp), 2);
    free(o);
    assert_int_equal(run(&o, "%s quantise 2>&1", g_bin), 2);
    assert_non_null(strstr(o, "quantize"));
    free(o);
    assert_int_equal(run(&o, "%s quantize --help", g_bin), 0);
    assert_non_null(strstr(o, "--granularity"));
    free(o);
}

static void test_killed_run_leaves_nothing(void **state) {
    (void)state;
    char out[512], tgt[512];
    snprintf(tgt, sizeof tgt, "%s/killed", g_tmp);
    for (int delay_us = 0; delay_us <= 40000; delay_us += 4000) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            snprintf(out, sizeof out, "%s/demo", g_tmp);
            int fd = open("/dev/null", 1);
            dup2(fd, 1);
            dup2(fd, 2);
            execl(g_bin, g_bin, "quantize", out, "-o", tgt, "-t", "int4", "-g", "group:32", "--observer", "mse", (char *)NULL);
            _exit(127);
        }
        usleep((useconds_t)delay_us);
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        if (WIFSIGNALED(st)) assert_false(exists(tgt)); /* killed before the final rename */
        char *o;
        run(&o, "rm -rf %s %s.tmp.*", tgt, tgt);
        free(o);
    }
}

static void test_nonfinite_input(void **state) {
    (void)state;
    /* a checkpoint with a NaN at [2, 5] of one weight */
    char path[512];
    snprintf(path, sizeof path, "%s/nan/model.safetensors", g_tmp);
    char *o;
    run(&o, "mkdir -p %s/nan", g_tmp);
    free(o);
    tm_st_entry e[1];
    memset(e, 0, sizeof e);
    e[0].name = "layer.weight";
    e[0].dtype = TM_F32;
    e[0].ndim = 2;
    e[0].shape[0] = 4;
    e[0].shape[1] = 8;
    tm_st_writer *w;
    tm_err err;
    assert_int_equal(tm_st_writer_open(path, e, 1, NULL, &w, &err), TM_OK);
    float v[32];
    for (int i = 0; i < 32; i++) v[i] = (float)(i % 7) - 3.0f;
    v[2 * 8 + 5] = NAN;
    v[3 * 8 + 1] = INFINITY;
    assert_int_equal(tm_st_writer_write(w, 0, 0, v, sizeof v, &err), TM_OK);
    assert_int_equal(tm_st_writer_finish(w, &err), TM_OK);
    tm_st_writer_free(w);
    assert_int_equal(run(&o, "%s quantize %s/nan -o %s/nanq 2>&1", g_bin, g_tmp, g_tmp), 3);
    assert_non_null(strstr(o, "layer.weight"));
    assert_non_null(strstr(o, "21")); /* flat index of [2, 5] */
    free(o);
    json_t *d = run_json(0, "%s quantize %s/nan -o %s/nanq --allow-nonfinite --json", g_bin, g_tmp, g_tmp);
    json_t *t = find_named(json_object_get(json_object_get(d, "manifest"), "tensors"), "layer.weight");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(t, "error"), "n_nonfinite")), 2);
    json_decref(d);
    /* NaN stored as the zero point code, +Inf as qmax */
    d = run_json(0, "%s scalar %s/nanq layer.weight 2,5 --json", g_bin, g_tmp);
    assert_true(jnum(d, "code") == jnum(d, "zero_point"));
    json_decref(d);
    d = run_json(0, "%s scalar %s/nanq layer.weight 3,1 --json", g_bin, g_tmp);
    assert_true(jnum(d, "code") == 127);
    json_decref(d);
}

/* Scales in f16/bf16 on request; a scale that overflows f16 is an error, never Inf. */
static void test_scale_dtype(void **state) {
    (void)state;
    json_t *d = run_json(0, "%s quantize %s/demo -o %s/sf16 --scale-dtype f16 --json --no-checksums", g_bin, g_tmp, g_tmp);
    json_decref(d);
    d = run_json(0, "%s inspect %s/sf16 --json", g_bin, g_tmp);
    json_t *e = find_named(json_object_get(d, "tensors"), "model.layers.0.mlp.up_proj.weight_scale");
    assert_string_equal(json_string_value(json_object_get(e, "dtype")), "F16");
    json_decref(d);
    /* the f16 scale is the one used to quantize: max error still half an LSB */
    d = run_json(0, "%s qdiff %s/demo %s/sf16 --json", g_bin, g_tmp, g_tmp);
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(d, "tensors"), i, t) assert_true(jnum(t, "max_err_lsb") <= 0.5 + 1e-3);
    json_decref(d);
    char path[512];
    snprintf(path, sizeof path, "%s/big/model.safetensors", g_tmp);
    char *o;
    run(&o, "mkdir -p %s/big", g_tmp);
    free(o);
    tm_st_entry en[1];
    memset(en, 0, sizeof en);
    en[0].name = "big.weight";
    en[0].dtype = TM_F32;
    en[0].ndim = 2;
    en[0].shape[0] = 2;
    en[0].shape[1] = 4;
    tm_st_writer *w;
    tm_err err;
    assert_int_equal(tm_st_writer_open(path, en, 1, NULL, &w, &err), TM_OK);
    float v[8] = {1e10f, -3e9f, 2.0f, 0, 5e9f, 1, -1e10f, 7};
    assert_int_equal(tm_st_writer_write(w, 0, 0, v, sizeof v, &err), TM_OK);
    assert_int_equal(tm_st_writer_finish(w, &err), TM_OK);
    tm_st_writer_free(w);
    assert_int_equal(run(&o, "%s quantize %s/big -o %s/bigq --scale-dtype f16 2>&1", g_bin, g_tmp, g_tmp), 3);
    assert_non_null(strstr(o, "big.weight"));
    assert_non_null(strstr(o, "F16"));
    free(o);
    snprintf(path, sizeof path, "%s/bigq", g_tmp);
    assert_false(exists(path));
    /* f32 scales hold it */
    assert_int_equal(run(&o, "%s quantize %s/big -o %s/bigq -q", g_bin, g_tmp, g_tmp), 0);
    free(o);
}

/* Nothing is lost: an existing directory is never replaced unless it is a previous
** tensormorph output and --force is given; never a directory holding the input. */
static void test_output_path_safety(void **state) {
    (void)state;
    char *o;
    char p[512];
    run(&o, "mkdir -p %s/keep && touch %s/keep/mine.txt", g_tmp, g_tmp);
    free(o);
    assert_int_equal(run(&o, "%s quantize %s/demo -o %s/keep 2>&1", g_bin, g_tmp, g_tmp), 2);
    assert_non_null(strstr(o, "not empty"));
    free(o);
    snprintf(p, sizeof p, "%s/keep/mine.txt", g_tmp);
    assert_true(exists(p));
    /* OUT equal to, or containing, the input */
    assert_int_equal(run(&o, "%s quantize %s/demo -o %s/demo 2>&1", g_bin, g_tmp, g_tmp), 2);
    assert_non_null(strstr(o, "holds the input"));
    free(o);
    assert_int_equal(run(&o, "%s quantize %s/demo -o %s 2>&1", g_bin, g_tmp, g_tmp), 2);
    free(o);
    snprintf(p, sizeof p, "%s/demo/model.safetensors", g_tmp);
    assert_true(exists(p));
    /* a previous output: refused without --force, replaced with it; a trailing slash is fine */
    assert_int_equal(run(&o, "%s quantize %s/demo -o %s/q8/ -q 2>&1", g_bin, g_tmp, g_tmp), 2);
    assert_non_null(strstr(o, "--force"));
    free(o);
    assert_int_equal(run(&o, "%s quantize %s/demo -o %s/q8/ -q --force 2>&1", g_bin, g_tmp, g_tmp), 0);
    free(o);
    /* re-quantizing codes is refused: input unsupported (3, as for GGUF, ONNX and .pt input) */
    assert_int_equal(run(&o, "%s quantize %s/q8 -o %s/qq 2>&1", g_bin, g_tmp, g_tmp), 3);
    assert_non_null(strstr(o, "already quantized"));
    free(o);
    /* qdiff with REF and QUANT swapped says so */
    assert_int_equal(run(&o, "%s qdiff %s/q8 %s/demo 2>&1", g_bin, g_tmp, g_tmp), 2);
    assert_non_null(strstr(o, "REF QUANT"));
    free(o);
}

static void test_recipe(void **state) {
    (void)state;
    char *o;
    char p[512];
    snprintf(p, sizeof p, "%s/recipe.json", g_tmp);
    FILE *fp = fopen(p, "w");
    fputs("{\"default\": {\"type\": \"int4\", \"granularity\": \"group:64\"},\n"
          " \"ignore\": [\"mlp\\\\.down_proj\"],\n"
          " \"targets\": [{\"pattern\": \"self_attn\\\\.q_proj\", \"scheme\": {\"type\": \"int8\", \"granularity\": \"channel\"}},\n"
          "             {\"pattern\": \"^lm_head\\\\.weight$\"}]}\n", fp);
    fclose(fp);
    json_t *d = run_json(0, "%s quantize %s/demo -o %s/rq --recipe %s --json --no-checksums", g_bin, g_tmp, g_tmp, p);
    json_t *ts = json_object_get(json_object_get(d, "manifest"), "tensors");
    json_t *e = find_named(ts, "model.layers.0.mlp.down_proj.weight");
    assert_non_null(strstr(json_string_value(json_object_get(e, "reason")), "ignored by recipe"));
    e = find_named(ts, "model.layers.0.self_attn.q_proj.weight");
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "scheme"), "type")), "I8");
    e = find_named(ts, "model.layers.0.self_attn.k_proj.weight");
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "scheme"), "type")), "I4");
    e = find_named(ts, "lm_head.weight"); /* named by a target: quantized with the default scheme */
    assert_string_equal(json_string_value(json_object_get(e, "decision")), "quantized");
    json_decref(d);
    /* two schemes: config groups target exact module names */
    char cp[512];
    snprintf(cp, sizeof cp, "%s/rq/config.json", g_tmp);
    json_t *cfg = json_load_file(cp, 0, NULL);
    json_t *groups = json_object_get(json_object_get(cfg, "quantization_config"), "config_groups");
    assert_int_equal(json_object_size(groups), 2);
    json_decref(cfg);
    /* command-line options beat the recipe's default */
    d = run_json(0, "%s quantize %s/demo -o %s/rq2 --recipe %s -t int8 --json --no-checksums", g_bin, g_tmp, g_tmp, p);
    e = find_named(json_object_get(json_object_get(d, "manifest"), "tensors"), "model.layers.0.self_attn.k_proj.weight");
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "scheme"), "type")), "I8");
    json_decref(d);
    /* typos are errors, never silently ignored */
    fp = fopen(p, "w");
    fputs("{\"defualt\": {\"type\": \"int4\"}}", fp);
    fclose(fp);
    assert_int_equal(run(&o, "%s quantize %s/demo -o %s/rq3 --recipe %s 2>&1", g_bin, g_tmp, g_tmp, p), 3);
    assert_non_null(strstr(o, "defualt"));
    free(o);
    fp = fopen(p, "w");
    fputs("{\"ignore\": \"q_proj\"}", fp);
    fclose(fp);
    assert_int_equal(run(&o, "%s quantize %s/demo -o %s/rq3 --recipe %s 2>&1", g_bin, g_tmp, g_tmp, p), 3);
    free(o);
    assert_int_equal(run(&o, "%s quantize %s/demo -o %s/rq3 --recipe %s/none.json 2>&1", g_bin, g_tmp, g_tmp, g_tmp), 4);
    free(o);
    /* one group per row is per-channel in the config, matching the [rows, 1] scale */
    run(&o, "%s quantize %s/demo -o %s/g256 -g group:256 -q --no-checksums", g_bin, g_tmp, g_tmp);
    free(o);
    d = run_json(0, "%s inspect %s/g256 --json", g_bin, g_tmp);
    assert_int_equal(json_array_size(json_object_get(d, "warnings")), 0);
    json_decref(d);
}

static void test_diff(void **state) {
    (void)state;
    json_t *d = run_json(0, "%s diff %s/demo %s/demo2 --json", g_bin, g_tmp, g_tmp);
    assert_int_equal(json_integer_value(json_object_get(d, "n_differ")), 0);
    json_decref(d);
    char *o;
    assert_int_equal(run(&o, "%s diff %s/demo %s/demo2 --exit-code", g_bin, g_tmp, g_tmp), 0);
    free(o);
    d = run_json(1, "%s diff %s/demo %s/q8 --json --exit-code", g_bin, g_tmp, g_tmp);
    json_t *e = find_named(json_object_get(d, "tensors"), "model.layers.0.mlp.up_proj.weight");
    assert_string_equal(json_string_value(json_object_get(e, "status")), "dtype");
    assert_true(jnum(e, "cosine") > 0.999);
    assert_true(jnum(e, "rel_l2") < 0.02);
    e = find_named(json_object_get(d, "tensors"), "model.norm.weight");
    assert_string_equal(json_string_value(json_object_get(e, "status")), "same");
    json_decref(d);
}

/* The {"error": ...} document a failing --json command prints on stdout. */
static void expect_json_error(json_t *d, int code, const char *status, const char *needle) {
    json_t *e = json_object_get(d, "error");
    assert_non_null(e);
    assert_int_equal(json_integer_value(json_object_get(e, "code")), code);
    assert_string_equal(json_string_value(json_object_get(e, "status")), status);
    const char *m = json_string_value(json_object_get(e, "message"));
    assert_non_null(m);
    if (!strstr(m, needle)) fail_msg("message '%s' lacks '%s'", m, needle);
}

/* Nothing quantized, axis ranges, negative indices, a reference without the tensor, JSON
** errors on stdout, help --help, an unknown file format. */
static void test_refusals_and_messages(void **state) {
    (void)state;
    char *o = NULL;
    /* group:7 divides no column count of the demo (256, 688): exit 3, nothing written */
    json_t *d = run_json(3, "%s quantize %s/demo -o %s/g7 -t int4 -g group:7 --json 2>/dev/null", g_bin, g_tmp, g_tmp);
    expect_json_error(d, 3, "input", "group:7 does not divide");
    json_decref(d);
    assert_false(exists("/nonexistent-never")); /* sanity of the helper */
    char p[512];
    snprintf(p, sizeof p, "%s/g7", g_tmp);
    assert_false(exists(p));
    /* a filter that matches nothing: a usage error */
    d = run_json(2, "%s quantize %s/demo -o %s/inc --include nomatch --json 2>/dev/null", g_bin, g_tmp, g_tmp);
    expect_json_error(d, 2, "usage", "--include 'nomatch' matched no tensor");
    json_decref(d);
    snprintf(p, sizeof p, "%s/inc", g_tmp);
    assert_false(exists(p));
    /* --allow-empty forces the copy */
    d = run_json(0, "%s quantize %s/demo -o %s/g7e -t int4 -g group:7 --allow-empty --json", g_bin, g_tmp, g_tmp);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(json_object_get(d, "manifest"), "results"), "n_quantized")), 0);
    json_decref(d);
    /* any integer axis parses; out of range is said so */
    d = run_json(2, "%s quantize %s/demo -o %s/ax -g channel:99 --json 2>/dev/null", g_bin, g_tmp, g_tmp);
    expect_json_error(d, 2, "usage", "axis 99 out of range for a 2-D weight");
    json_decref(d);
    /* group axis -1 is recorded as 1 in the manifest, as the command line's default */
    d = run_json(0, "%s quantize %s/demo -o %s/gm1 -t int4 -g group:64:-1 --json", g_bin, g_tmp, g_tmp);
    json_t *rec = json_object_get(json_object_get(d, "manifest"), "recipe");
    assert_non_null(rec);
    char *txt = json_dumps(rec, JSON_COMPACT);
    assert_non_null(txt);
    assert_null(strstr(txt, "\"axis\":-1"));
    assert_non_null(strstr(txt, "\"axis\":1"));
    free(txt);
    json_decref(d);
    /* a compressed-tensors directory cannot become ONNX: usage error */
    d = run_json(2, "%s quantize %s/demo -o %s/x.onnx --json 2>/dev/null", g_bin, g_tmp, g_tmp);
    expect_json_error(d, 2, "usage", "needs an ONNX input");
    json_decref(d);
    /* re-quantizing quantized codes: input unsupported (3) */
    assert_int_equal(run(&o, "%s quantize %s/demo -o %s/f2q8 -q", g_bin, g_tmp, g_tmp), 0);
    free(o);
    d = run_json(3, "%s quantize %s/f2q8 -o %s/f2rq --json 2>/dev/null", g_bin, g_tmp, g_tmp);
    expect_json_error(d, 3, "input", "already quantized");
    json_decref(d);
    /* scalar: a negative index is named as such, with or without -- */
    const char *w = "model.layers.2.mlp.down_proj.weight";
    d = run_json(2, "%s scalar %s/f2q8 %s -1,0 --json 2>/dev/null", g_bin, g_tmp, w);
    expect_json_error(d, 2, "usage", "index -1 is negative");
    json_decref(d);
    d = run_json(2, "%s scalar %s/f2q8 %s --json -- -1,0 2>/dev/null", g_bin, g_tmp, w);
    expect_json_error(d, 2, "usage", "index -1 (coordinate 0) is negative");
    json_decref(d);
    /* scalar --ref where the reference has no such tensor: value shown, ref_* null, note */
    d = run_json(0, "%s scalar %s/f2q8 %s_scale 3,0 --ref %s/demo --json 2>/dev/null", g_bin, g_tmp, w, g_tmp);
    assert_true(jnum(d, "value") > 0);
    assert_true(json_is_null(json_object_get(d, "ref_value")));
    assert_true(json_is_null(json_object_get(d, "error")));
    assert_non_null(strstr(json_string_value(json_object_get(d, "note")), "has no tensor"));
    json_decref(d);
    /* ... and it is the same scale the quantized weight's element reports */
    d = run_json(0, "%s scalar %s/f2q8 %s 3,5 --json", g_bin, g_tmp, w);
    double sc = jnum(d, "scale");
    json_decref(d);
    d = run_json(0, "%s scalar %s/f2q8 %s_scale 3,0 --json", g_bin, g_tmp, w);
    assert_true((float)jnum(d, "value") == (float)sc);
    json_decref(d);
    /* help --help is the overview, exit 0 */
    assert_int_equal(run(&o, "%s help --help", g_bin), 0);
    assert_non_null(o);
    assert_non_null(strstr(o, "usage: tensormorph <command>"));
    free(o);
    /* an unknown file: every format tried is named */
    snprintf(p, sizeof p, "%s/junk.bin", g_tmp);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    for (int i = 0; i < 64; i++) fputc((i * 37 + 11) & 0xff, f);
    fclose(f);
    d = run_json(3, "%s inspect %s --json 2>/dev/null", g_bin, p);
    expect_json_error(d, 3, "input", "not safetensors, GGUF, ONNX, PyTorch or NumPy");
    json_decref(d);
    /* a .npy holding only the magic: its header is truncated (the magic is not "missing") */
    snprintf(p, sizeof p, "%s/six.npy", g_tmp);
    f = fopen(p, "wb");
    assert_non_null(f);
    fwrite("\x93NUMPY", 1, 6, f);
    fclose(f);
    assert_int_equal(run(&o, "%s inspect %s 2>&1", g_bin, p), 3);
    assert_non_null(strstr(o, "header truncated"));
    assert_null(strstr(o, "no \\x93NUMPY magic"));
    free(o);
    /* a check that fails (exit 1) still prints its own document, not an error document */
    d = run_json(1, "%s qdiff %s/demo %s/f2q8 --fail-on-flag --json", g_bin, g_tmp, g_tmp);
    assert_null(json_object_get(d, "error"));
    assert_non_null(json_object_get(d, "tensors"));
    json_decref(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantize_default_int8_channel),
        cmocka_unit_test(test_inspect_quantized_output),
        cmocka_unit_test(test_qdiff_and_scalar),
        cmocka_unit_test(test_deterministic_across_threads),
        cmocka_unit_test(test_int4_group_asym_layout),
        cmocka_unit_test(test_fp8_and_refusals),
        cmocka_unit_test(test_killed_run_leaves_nothing),
        cmocka_unit_test(test_nonfinite_input),
        cmocka_unit_test(test_scale_dtype),
        cmocka_unit_test(test_output_path_safety),
        cmocka_unit_test(test_recipe),
        cmocka_unit_test(test_diff),
        cmocka_unit_test(test_refusals_and_messages),
    };
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
