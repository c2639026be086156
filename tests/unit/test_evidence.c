/* test_evidence.c: `tensormorph evidence` end to end on a real model from ../shared
** (PaddleOCR's ch_ppocr_mobile_v2.0_cls_infer.onnx, input x [N,3,48,192] with dynamic dims) run
** on ONNX Runtime (Node.js runner, onnxruntime-node), against itself and against its int8 QDQ
** version made by `tensormorph quantize model.onnx -o cand.onnx`: the evidence satisfies its
** schema, the nearest-rank percentiles recomputed here from latency_ms equal the reported ones,
** identical models drift by exactly 0 with top-1 agreement 1, the candidate holds
** DequantizeLinear nodes, and slices are computed over their own inputs (each slice equals a
** separate run over just its inputs); Silero VAD (three inputs, one read only inside If
** subgraphs, an int64 scalar; two outputs, one without a top-1). Bad input: malformed
** inputs.json / SLICES.json (JSON path in the message), an .npy of the wrong dtype, a dynamic dim
** without --input-shape, a missing onnxruntime-node (the install command), a model ONNX Runtime
** cannot load. Skips with a visible reason without ../shared, node or onnxruntime-node, unless
** TM_REQUIRE_SHARED=1. */
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
#include <unistd.h>

#include "tensormorph.h"
#include "tensormorph/evidence.h"
#include "core/jschema.h"
#include "helpers/cli_run.h"
#include "helpers/fixture.h"
#include "helpers/vectors.h"

static char g_tmp[256];
static char g_model[1024];
static char g_cand[1200];      /* the int8 QDQ candidate, or "" when quantize could not make it */
static const char *SHAPE = "--input-shape x=1,3,48,192";

/* ---- environment ------------------------------------------------------------------------ */

static int required(void) {
    const char *r = getenv("TM_REQUIRE_SHARED");
    return r && !strcmp(r, "1");
}

static void skip_or_fail(const char *why) {
    if (required()) {
        fail_msg("%s and TM_REQUIRE_SHARED=1", why);
        return;
    }
    printf("SKIP: %s\n", why);
    fflush(stdout);
    skip();
}

/* The node_modules folder the binary will use (TM_NODE_MODULES, else <source>/runner/node_modules). */
static void node_modules(char *buf, size_t n) {
    const char *e = getenv("TM_NODE_MODULES");
    const char *src = getenv("TM_SRC");
    if (e && *e) snprintf(buf, n, "%s", e);
    else snprintf(buf, n, "%s/runner/node_modules", src ? src : ".");
}

/* 1 when the test may go on: ../shared, node and onnxruntime-node are there. */
static int require_runtime(void) {
    if (!tmv_require_shared()) return 0;
    if (tmt_run(NULL, "node --version >/dev/null 2>&1") != 0) {
        skip_or_fail("node (Node.js) not found on PATH");
        return 0;
    }
    char nm[1024];
    node_modules(nm, sizeof nm);
    if (!tm_evidence_runtime_present(nm)) {
        char why[1200];
        snprintf(why, sizeof why, "onnxruntime-node not installed in %s (cd runner && npm install --ignore-scripts)", nm);
        skip_or_fail(why);
        return 0;
    }
    if (access(g_model, R_OK) != 0) {
        char why[1200];
        snprintf(why, sizeof why, "%s not found", g_model);
        skip_or_fail(why);
        return 0;
    }
    return 1;
}

static int setup(void **state) {
    (void)state;
    if (tmt_tmpdir_make(g_tmp, sizeof g_tmp, "test_evidence")) return -1;
    const char *sh = tmv_shared_dir();
    snprintf(g_model, sizeof g_model, "%s/models/onnx/npm/paddleocr/ch_ppocr_mobile_v2.0_cls_infer.onnx",
             sh ? sh : "/nonexistent");
    g_cand[0] = '\0';
    return 0;
}

static int teardown(void **state) { (void)state; return tmt_tmpdir_remove(g_tmp); }

/* ---- helpers ---------------------------------------------------------------------------- */

static json_t *load(const char *path) {
    json_error_t je;
    json_t *d = json_load_file(path, 0, &je);
    if (!d) print_message("%s: %s\n", path, je.text);
    assert_non_null(d);
    return d;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* Open path for writing and write a .npy version 1.0 preamble around the header dict h (l bytes,
** room for 64 more): padded with spaces and a newline to a multiple of 64 bytes. */
static FILE *open_npy(const char *path, char *h, int l) {
    while ((10 + l + 1) % 64) h[l++] = ' ';
    h[l++] = '\n';
    unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)l, 0};
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(head, 1, 10, f);
    fwrite(h, 1, (size_t)l, f);
    return f;
}

/* A float .npy [1,3,48,192] whose row-major element i is a smooth pattern of `seed`; layout 1
** writes it big-endian ('>f4'), layout 2 in Fortran order (dim 0 fastest): the same values. */
static void write_x(const char *path, int seed, int layout, const char *descr_override) {
    const int n = 3 * 48 * 192;
    char h[128];
    int l = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': %s, 'shape': (1, 3, 48, 192), }",
                     descr_override ? descr_override : layout == 1 ? ">f4" : "<f4",
                     layout == 2 ? "True" : "False");
    FILE *f = open_npy(path, h, l);
    int esz = descr_override && !strcmp(descr_override, "<f8") ? 8 : 4;
    for (int pos = 0; pos < n; pos++) {
        int i = pos;
        if (layout == 2) { /* Fortran position -> (0, c, y, x) -> row-major index */
            int c = pos % 3, y = (pos / 3) % 48, x = pos / (3 * 48);
            i = (c * 48 + y) * 192 + x;
        }
        double v = sin(0.001 * i * (seed + 1) + seed) * (0.5 + 0.25 * seed);
        unsigned char b[8];
        if (esz == 8) memcpy(b, &v, 8);
        else { float fv = (float)v; memcpy(b, &fv, 4); }
        if (layout == 1) for (int k = 0; k < esz / 2; k++) { unsigned char t = b[k]; b[k] = b[esz - 1 - k]; b[esz - 1 - k] = t; }
        fwrite(b, 1, (size_t)esz, f);
    }
    assert_int_equal(fclose(f), 0);
}

/* DIR with inputs.json listing ids[k] -> file x_<seed>.npy for seeds[k]. */
static void make_dir(const char *dir, int n, const char *const *ids, const int *seeds, const int *layout) {
    char p[1400];
    mkdir(dir, 0700);
    json_t *doc = json_object(), *arr = json_array();
    json_object_set_new(doc, "schema", json_string("tensormorph.inputs/1"));
    for (int k = 0; k < n; k++) {
        char fn[64];
        snprintf(fn, sizeof fn, "x_%d.npy", seeds[k]);
        snprintf(p, sizeof p, "%s/%s", dir, fn);
        write_x(p, seeds[k], layout ? layout[k] : 0, NULL);
        json_t *o = json_object(), *t = json_object();
        json_object_set_new(o, "id", json_string(ids[k]));
        json_object_set_new(t, "x", json_string(fn));
        json_object_set_new(o, "tensors", t);
        json_array_append_new(arr, o);
    }
    json_object_set_new(doc, "inputs", arr);
    tmt_write_json(dir, "inputs.json", doc);
}

/* Nearest rank computed independently: the smallest rank k with k/n >= p/100. */
static double nearest_rank(json_t *lat, int p) {
    size_t n = json_array_size(lat);
    double *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) v[i] = json_number_value(json_array_get(lat, i));
    for (size_t i = 1; i < n; i++) /* insertion sort */
        for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) { double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
    size_t k = 1;
    while (k * 100 < (size_t)p * n) k++;
    double r = v[k - 1];
    free(v);
    return r;
}

/* Schema-valid, percentiles right, latency count runs*count, operator counts sane. */
static void check_evidence(json_t *d, int count, int runs) {
    tm_err err;
    tm_status s = tm__jschema_validate_named("evidence", d, "evidence", &err);
    if (s) print_message("%s\n", err.msg);
    assert_int_equal(s, TM_OK);
    json_t *proto = json_object_get(d, "protocol");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(proto, "inputs"), "count")), count);
    assert_int_equal(json_integer_value(json_object_get(proto, "runs")), runs);
    assert_int_equal(json_integer_value(json_object_get(proto, "threads")), 1);
    json_t *shape = json_object_get(json_object_get(proto, "input_shapes"), "x");
    assert_int_equal(json_array_size(shape), 4);
    assert_int_equal(json_integer_value(json_array_get(shape, 2)), 48);
    assert_string_equal(json_string_value(json_object_get(json_object_get(d, "runtime"), "version")), "1.30.0");
    const char *which[2] = {"baseline", "candidate"};
    for (int i = 0; i < 2; i++) {
        json_t *m = json_object_get(json_object_get(d, "models"), which[i]);
        json_t *lat = json_object_get(m, "latency_ms");
        assert_int_equal(json_array_size(lat), (size_t)(count * runs));
        assert_true(json_number_value(json_object_get(m, "p50_ms")) == nearest_rank(lat, 50));
        assert_true(json_number_value(json_object_get(m, "p95_ms")) == nearest_rank(lat, 95));
        assert_true(json_number_value(json_object_get(m, "p99_ms")) == nearest_rank(lat, 99));
        assert_true(json_number_value(json_object_get(m, "p50_ms")) > 0);
        /* a node process with ONNX Runtime loaded holds more than 20 MiB */
        assert_true(json_integer_value(json_object_get(m, "peak_rss_bytes")) > 20 * 1024 * 1024);
        json_t *ops = json_object_get(m, "operators");
        assert_true(json_integer_value(json_object_get(ops, "Conv")) > 10);
        assert_non_null(json_object_get(ops, "Softmax"));
    }
    assert_true(json_equal(json_object_get(d, "candidate_operators"),
                           json_object_get(json_object_get(json_object_get(d, "models"), "candidate"), "operators")));
}

static json_t *drift_of(json_t *d, const char *slice) {
    json_t *dr = json_object_get(d, "drift");
    json_t *o = slice ? json_object_get(json_object_get(dr, "slices"), slice) : json_object_get(dr, "overall");
    assert_non_null(o);
    assert_int_equal(json_object_size(o), 1);
    json_t *v = json_object_get(o, "softmax_0.tmp_0");
    assert_non_null(v);
    return v;
}

/* The candidate: the int8 QDQ model `tensormorph quantize` writes, once. */
static const char *candidate(void) {
    if (g_cand[0]) return g_cand;
    char out[1200];
    snprintf(out, sizeof out, "%s/cand.onnx", g_tmp);
    char *log = NULL;
    int rc = tmt_run(&log, "'%s' quantize '%s' -o '%s' -q 2>&1", tmt_bin(), g_model, out);
    if (rc != 0 || access(out, R_OK) != 0) {
        print_message("tensormorph quantize could not make the QDQ candidate (exit %d): %s\n", rc, log ? log : "");
        free(log);
        return NULL;
    }
    free(log);
    snprintf(g_cand, sizeof g_cand, "%s", out);
    return g_cand;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_nearest_rank(void **state) {
    (void)state;
    double s[200];
    for (int i = 0; i < 200; i++) s[i] = i + 1; /* s[k-1] = k: the value is the rank */
    for (int n = 1; n <= 200; n++) {
        int ps[] = {1, 50, 95, 99, 100};
        for (int j = 0; j < 5; j++) {
            int k = 1;
            while ((double)k / n < ps[j] / 100.0 - 1e-12) k++;
            assert_true(tm_percentile_nearest_rank(s, n, ps[j]) == (double)k);
        }
    }
    /* p95 of 20 samples is the 19th (0.95 * 20 is 19 exactly, not 19.000000000000004) */
    assert_true(tm_percentile_nearest_rank(s, 20, 95) == 19.0);
    assert_true(isnan(tm_percentile_nearest_rank(s, 0, 50)));
    assert_true(isnan(tm_percentile_nearest_rank(s, 10, 0)));
}

static void test_identical_models_random(void **state) {
    (void)state;
    if (!require_runtime()) return;
    char out[512];
    snprintf(out, sizeof out, "%s/self.json", g_tmp);
    char *stdout_text = NULL;
    int rc = tmt_run(&stdout_text, "'%s' evidence '%s' '%s' --random-inputs 2 --seed 7 %s --warmup 1 --runs 3 "
                     "--json -o '%s'", tmt_bin(), g_model, g_model, SHAPE, out);
    assert_int_equal(rc, 0);
    json_t *d = load(out), *printed = json_loads(stdout_text, 0, NULL);
    free(stdout_text);
    assert_non_null(printed);
    assert_true(json_equal(d, printed)); /* --json with -o prints what it wrote */
    json_decref(printed);
    check_evidence(d, 2, 3);
    json_t *pin = json_object_get(json_object_get(d, "protocol"), "inputs");
    assert_string_equal(json_string_value(json_object_get(pin, "mode")), "random");
    assert_int_equal(json_integer_value(json_object_get(pin, "seed")), 7);
    assert_true(json_is_null(json_object_get(pin, "path")));
    json_t *v = drift_of(d, NULL);
    assert_true(json_real_value(json_object_get(v, "max_abs")) == 0.0);
    assert_true(json_real_value(json_object_get(v, "rel_l2")) == 0.0);
    assert_true(json_real_value(json_object_get(v, "top1_agreement")) == 1.0);
    assert_int_equal(json_object_size(json_object_get(json_object_get(d, "drift"), "slices")), 0);
    assert_null(json_object_get(json_object_get(d, "candidate_operators"), "DequantizeLinear"));
    /* the same seed gives the same inputs; another seed others */
    json_t *again = tmt_run_json(0, "'%s' evidence '%s' '%s' --random-inputs 2 --seed 7 %s --warmup 0 --runs 1 --no-progress",
                                 tmt_bin(), g_model, g_model, SHAPE);
    json_t *other = tmt_run_json(0, "'%s' evidence '%s' '%s' --random-inputs 2 --seed 8 %s --warmup 0 --runs 1 --no-progress",
                                 tmt_bin(), g_model, g_model, SHAPE);
    const char *h7 = json_string_value(json_object_get(pin, "sha256"));
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(again, "protocol"), "inputs"), "sha256")), h7);
    assert_string_not_equal(json_string_value(json_object_get(json_object_get(json_object_get(other, "protocol"), "inputs"), "sha256")), h7);
    json_decref(again);
    json_decref(other);
    json_decref(d);
}

static void test_qdq_candidate_with_slices(void **state) {
    (void)state;
    if (!require_runtime()) return;
    const char *cand = candidate();
    if (!cand) {
        skip_or_fail("`tensormorph quantize model.onnx -o cand.onnx` did not produce the int8 QDQ candidate");
        return;
    }
    char dir[512], slices[512], dir_a[512], dir_b[512];
    snprintf(dir, sizeof dir, "%s/in3", g_tmp);
    const char *ids[3] = {"s0", "s1", "s2"};
    const int seeds[3] = {0, 1, 2};
    make_dir(dir, 3, ids, seeds, NULL);
    snprintf(slices, sizeof slices, "%s/slices.json", g_tmp);
    write_text(slices, "{\"schema\":\"tensormorph.slices/1\",\"slices\":{\"even\":[\"s0\",\"s2\"],\"odd\":[\"s1\"]}}");
    json_t *d = tmt_run_json(0, "'%s' evidence '%s' '%s' --inputs '%s' --slices '%s' --warmup 1 --runs 2 --no-progress",
                             tmt_bin(), g_model, cand, dir, slices);
    check_evidence(d, 3, 2);
    json_t *pin = json_object_get(json_object_get(d, "protocol"), "inputs");
    assert_string_equal(json_string_value(json_object_get(pin, "mode")), "dir");
    assert_string_equal(json_string_value(json_object_get(pin, "path")), dir);
    assert_true(json_is_null(json_object_get(pin, "seed")));
    /* the candidate is the QDQ model: DequantizeLinear nodes, and the baseline has none */
    json_t *cops = json_object_get(d, "candidate_operators");
    assert_true(json_integer_value(json_object_get(cops, "DequantizeLinear")) > 0);
    assert_null(json_object_get(json_object_get(json_object_get(json_object_get(d, "models"), "baseline"), "operators"),
                                "DequantizeLinear"));
    /* int8 moved the scores, but not far */
    json_t *v = drift_of(d, NULL);
    double mx = json_real_value(json_object_get(v, "max_abs")), rl = json_real_value(json_object_get(v, "rel_l2"));
    print_message("QDQ candidate drift: max_abs %g rel_l2 %g top1 %g\n", mx, rl,
                  json_number_value(json_object_get(v, "top1_agreement")));
    assert_true(mx > 0 && mx < 0.5);
    assert_true(rl > 0 && rl < 0.5);
    double t1 = json_number_value(json_object_get(v, "top1_agreement"));
    assert_true(t1 >= 0 && t1 <= 1);
    json_t *ev = drift_of(d, "even"), *od = drift_of(d, "odd");
    assert_int_equal(json_integer_value(json_object_get(ev, "n_inputs")), 2);
    assert_int_equal(json_integer_value(json_object_get(od, "n_inputs")), 1);
    /* slices partition the inputs: the overall max is the larger slice max */
    double me = json_real_value(json_object_get(ev, "max_abs")), mo = json_real_value(json_object_get(od, "max_abs"));
    assert_true(mx == (me > mo ? me : mo));

    /* each slice equals a run over only its inputs (written Fortran-order and big-endian there:
    ** the same values, so the same canonical bytes and the same drift) */
    snprintf(dir_a, sizeof dir_a, "%s/even", g_tmp);
    snprintf(dir_b, sizeof dir_b, "%s/odd", g_tmp);
    const char *ida[2] = {"s0", "s2"}, *idb[1] = {"s1"};
    const int sa[2] = {0, 2}, sb[1] = {1}, lay[2] = {2, 1};
    make_dir(dir_a, 2, ida, sa, lay);
    make_dir(dir_b, 1, idb, sb, NULL);
    json_t *da = tmt_run_json(0, "'%s' evidence '%s' '%s' --inputs '%s' --warmup 0 --runs 1 --no-progress",
                              tmt_bin(), g_model, cand, dir_a);
    json_t *db = tmt_run_json(0, "'%s' evidence '%s' '%s' --inputs '%s' --warmup 0 --runs 1 --no-progress",
                              tmt_bin(), g_model, cand, dir_b);
    /* the canonical bytes do not depend on the layout on disk */
    char dir_a2[600];
    snprintf(dir_a2, sizeof dir_a2, "%s/even_plain", g_tmp);
    make_dir(dir_a2, 2, ida, sa, NULL);
    json_t *da2 = tmt_run_json(0, "'%s' evidence '%s' '%s' --inputs '%s' --warmup 0 --runs 1 --no-progress",
                               tmt_bin(), g_model, g_model, dir_a2);
    const char *ha = json_string_value(json_object_get(json_object_get(json_object_get(da, "protocol"), "inputs"), "sha256"));
    const char *ha2 = json_string_value(json_object_get(json_object_get(json_object_get(da2, "protocol"), "inputs"), "sha256"));
    const char *hall = json_string_value(json_object_get(pin, "sha256"));
    assert_string_equal(ha, ha2);
    assert_string_not_equal(ha, hall);
    json_decref(da2);
    const char *keys[3] = {"max_abs", "rel_l2", "top1_agreement"};
    for (int k = 0; k < 3; k++) {
        double a1 = json_number_value(json_object_get(drift_of(da, NULL), keys[k]));
        double a2 = json_number_value(json_object_get(ev, keys[k]));
        double b1 = json_number_value(json_object_get(drift_of(db, NULL), keys[k]));
        double b2 = json_number_value(json_object_get(od, keys[k]));
        if (a1 != a2 || b1 != b2) print_message("%s: even %g vs %g, odd %g vs %g\n", keys[k], a1, a2, b1, b2);
        assert_true(a1 == a2);
        assert_true(b1 == b2);
    }
    json_decref(da);
    json_decref(db);
    json_decref(d);
}

/* A .npy version 1.0 of `nbytes` little-endian bytes. */
static void write_npy(const char *path, const char *descr, int ndim, const int64_t *shape, const void *data,
                      size_t nbytes) {
    char h[256];
    int l = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int d = 0; d < ndim; d++) l += snprintf(h + l, sizeof h - (size_t)l, "%lld,", (long long)shape[d]);
    l += snprintf(h + l, sizeof h - (size_t)l, "), }");
    FILE *f = open_npy(path, h, l);
    fwrite(data, 1, nbytes, f);
    assert_int_equal(fclose(f), 0);
}

/* Silero VAD v5: three inputs (input [?,?], state [2,?,128], sr int64 scalar; 'input' is read
** only inside If subgraphs), two outputs; sr must be 16000, so the inputs come from a DIR. */
static void test_multi_input_model(void **state) {
    (void)state;
    if (!require_runtime()) return;
    char model[1200], dir[600], p[900];
    snprintf(model, sizeof model, "%s/models/onnx/npm/silero_vad/silero_vad_v5.onnx", tmv_shared_dir());
    if (access(model, R_OK) != 0) { skip_or_fail("silero_vad_v5.onnx not found in ../shared"); return; }
    snprintf(dir, sizeof dir, "%s/silero", g_tmp);
    mkdir(dir, 0700);
    float in[512], st[256] = {0};
    int64_t sr = 16000, sh_in[2] = {1, 512}, sh_st[3] = {2, 1, 128};
    for (int s = 0; s < 2; s++) {
        for (int k = 0; k < 512; k++) in[k] = 0.3f * (float)sin(0.05 * k * (s + 1));
        snprintf(p, sizeof p, "%s/in%d.npy", dir, s);
        write_npy(p, "<f4", 2, sh_in, in, sizeof in);
    }
    snprintf(p, sizeof p, "%s/state.npy", dir);
    write_npy(p, "<f4", 3, sh_st, st, sizeof st);
    snprintf(p, sizeof p, "%s/sr.npy", dir);
    write_npy(p, "<i8", 0, NULL, &sr, sizeof sr);
    snprintf(p, sizeof p, "%s/inputs.json", dir);
    write_text(p, "{\"schema\":\"tensormorph.inputs/1\",\"inputs\":["
                  "{\"id\":\"a\",\"tensors\":{\"input\":\"in0.npy\",\"state\":\"state.npy\",\"sr\":\"sr.npy\"}},"
                  "{\"id\":\"b\",\"tensors\":{\"input\":\"in1.npy\",\"state\":\"state.npy\",\"sr\":\"sr.npy\"}}]}");
    json_t *d = tmt_run_json(0, "'%s' evidence '%s' '%s' --inputs '%s' --warmup 0 --runs 2 --no-progress",
                             tmt_bin(), model, model, dir);
    tm_err err;
    assert_int_equal(tm__jschema_validate_named("evidence", d, "evidence", &err), TM_OK);
    json_t *shapes = json_object_get(json_object_get(d, "protocol"), "input_shapes");
    assert_int_equal(json_object_size(shapes), 3);
    assert_int_equal(json_array_size(json_object_get(shapes, "sr")), 0);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(shapes, "input"), 1)), 512);
    json_t *ov = json_object_get(json_object_get(d, "drift"), "overall");
    assert_int_equal(json_object_size(ov), 2);
    json_t *o = json_object_get(ov, "output"), *sn = json_object_get(ov, "stateN");
    assert_non_null(o);
    assert_non_null(sn);
    assert_true(json_number_value(json_object_get(o, "max_abs")) == 0.0);
    assert_true(json_number_value(json_object_get(sn, "rel_l2")) == 0.0);
    assert_true(json_is_null(json_object_get(o, "top1_agreement"))); /* output [1,1]: last dim 1 */
    assert_true(json_number_value(json_object_get(sn, "top1_agreement")) == 1.0);
    json_decref(d);
}

/* Run, expect exit `rc`, and a stderr line containing `needle`. */
static void expect_error(int rc, const char *needle, const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char *out = NULL;
    int got = tmt_run(&out, "%s 2>&1 >/dev/null", cmd);
    if (got != rc || !out || !strstr(out, needle))
        print_message("command: %s\nexit %d (want %d)\noutput: %s\nwant: %s\n", cmd, got, rc, out ? out : "", needle);
    assert_int_equal(got, rc);
    assert_non_null(out);
    assert_non_null(strstr(out, needle));
    free(out);
}

/* A small valid ONNX model (ir_version 8, opset 17) x[2] -> `op` (8 letters) -> out[2] (a
** one-letter output name). Protobuf written field by field (onnx.proto). */
static void write_op_model(const char *path, const char op[8], char out) {
    /* ValueInfoProto {name "x", type {tensor_type {elem_type 1, shape {dim {dim_value 2}}}}} */
    static const unsigned char vi_x[] = {0x0a, 1, 'x', 0x12, 10, 0x0a, 8, 0x08, 1, 0x12, 4, 0x0a, 2, 0x08, 2};
    unsigned char vi_y[] = {0x0a, 1, 'y', 0x12, 10, 0x0a, 8, 0x08, 1, 0x12, 4, 0x0a, 2, 0x08, 2};
    vi_y[2] = (unsigned char)out;
    /* NodeProto {input "x", output "<out>", op_type "<op>"} */
    unsigned char node[] = {0x0a, 1, 'x', 0x12, 1, 'y', 0x22, 8, 0, 0, 0, 0, 0, 0, 0, 0};
    node[5] = (unsigned char)out;
    memcpy(node + 8, op, 8);
    unsigned char g[128];
    size_t n = 0;
    g[n++] = 0x0a; g[n++] = sizeof node; memcpy(g + n, node, sizeof node); n += sizeof node;     /* node (1)   */
    g[n++] = 0x12; g[n++] = 1; g[n++] = 'g';                                                    /* name (2)   */
    g[n++] = 0x5a; g[n++] = sizeof vi_x; memcpy(g + n, vi_x, sizeof vi_x); n += sizeof vi_x;     /* input (11) */
    g[n++] = 0x62; g[n++] = sizeof vi_y; memcpy(g + n, vi_y, sizeof vi_y); n += sizeof vi_y;     /* output (12)*/
    unsigned char m[192];
    size_t k = 0;
    m[k++] = 0x08; m[k++] = 8;                                                                  /* ir_version */
    m[k++] = 0x3a; m[k++] = (unsigned char)n; memcpy(m + k, g, n); k += n;                      /* graph (7)  */
    m[k++] = 0x42; m[k++] = 4; m[k++] = 0x0a; m[k++] = 0; m[k++] = 0x10; m[k++] = 17;            /* opset (8)  */
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(m, 1, k, f);
    assert_int_equal(fclose(f), 0);
}

/* one node of an op no runtime has: tensormorph opens it, ONNX Runtime refuses it */
static void write_bad_op_model(const char *path) { write_op_model(path, "NoSuchOp", 'y'); }

static void test_bad_input(void **state) {
    (void)state;
    if (!require_runtime()) return;
    const char *bin = tmt_bin();
    char dir[512], p[1024];
    snprintf(dir, sizeof dir, "%s/bad", g_tmp);
    mkdir(dir, 0700);
    /* inputs.json against its schema */
    snprintf(p, sizeof p, "%s/inputs.json", dir);
    write_text(p, "{\"schema\":\"tensormorph.inputs/1\",\"inputs\":[{\"id\":\"s0\",\"tensors\":{\"x\":5}}]}");
    expect_error(3, "inputs.json: $.inputs[0].tensors.x: expected string, got integer",
                 "'%s' evidence '%s' '%s' --inputs '%s'", bin, g_model, g_model, dir);
    write_text(p, "{\"schema\":\"tensormorph.inputs/1\",\"inputs\":[{\"id\":\"s0\",\"tensors\":{\"x\":\"x.npy\"}},"
                  "{\"id\":\"s0\",\"tensors\":{\"x\":\"x.npy\"}}]}");
    expect_error(3, "$.inputs[1].id: duplicate id \"s0\"", "'%s' evidence '%s' '%s' --inputs '%s'", bin, g_model,
                 g_model, dir);
    write_text(p, "{\"schema\":\"tensormorph.inputs/1\",\"inputs\":[{\"id\":\"s0\",\"tensors\":{\"x\":\"../x.npy\"}}]}");
    expect_error(3, "$.inputs[0].tensors.x: \"../x.npy\" is not a plain file name", "'%s' evidence '%s' '%s' --inputs '%s'",
                 bin, g_model, g_model, dir);
    write_text(p, "{\"schema\":\"tensormorph.inputs/1\",\"inputs\":[{\"id\":\"s0\",\"tensors\":{\"x\":\"x.npy\",\"y:0\":\"y.npy\"}}]}");
    expect_error(3, "$.inputs[0].tensors[\"y:0\"]: the model has no input 'y:0'", "'%s' evidence '%s' '%s' --inputs '%s'",
                 bin, g_model, g_model, dir);
    write_text(p, "{\"schema\":\"tensormorph.inputs/1\",\"inputs\":[{\"id\":\"s0\",\"tensors\":{}}]}");
    expect_error(3, "$.inputs[0].tensors: no file for model input 'x'", "'%s' evidence '%s' '%s' --inputs '%s'",
                 bin, g_model, g_model, dir);
    /* an .npy whose dtype is not the model input's */
    snprintf(p, sizeof p, "%s/x64.npy", dir);
    write_x(p, 0, 0, "<f8");
    snprintf(p, sizeof p, "%s/inputs.json", dir);
    write_text(p, "{\"schema\":\"tensormorph.inputs/1\",\"inputs\":[{\"id\":\"s0\",\"tensors\":{\"x\":\"x64.npy\"}}]}");
    expect_error(3, "x64.npy: holds F64 [1,3,48,192], model input 'x' needs F32",
                 "'%s' evidence '%s' '%s' --inputs '%s'", bin, g_model, g_model, dir);
    /* SLICES.json against its schema, and ids that are not in inputs.json */
    snprintf(p, sizeof p, "%s/x.npy", dir);
    write_x(p, 0, 0, NULL);
    snprintf(p, sizeof p, "%s/inputs.json", dir);
    write_text(p, "{\"schema\":\"tensormorph.inputs/1\",\"inputs\":[{\"id\":\"s0\",\"tensors\":{\"x\":\"x.npy\"}}]}");
    char sl[600];
    snprintf(sl, sizeof sl, "%s/slices.json", dir);
    static const struct { const char *slices, *msg; } k_bad_slices[] = {
        {"{\"a\":\"s0\"}", "slices.json: $.slices.a: expected array, got string"},
        {"{\"a\":[\"s0\",\"zz\"]}", "slices.json: $.slices.a[1]: no input \"zz\""},
        {"{\"day 1\":[\"s0\",\"s0\"]}", "slices.json: $.slices[\"day 1\"][1]: input \"s0\" is listed twice (also [0])"},
        {"{\"a\":[\"s0\"]},\"extra\":1", "slices.json: $: property \"extra\" is not allowed here"},
        /* a slice needs a name */
        {"{\"\":[\"s0\"]}", "slices.json: $.slices[\"\"]: string has 0 characters, fewer than minLength 1 (the property name)"},
    };
    for (size_t k = 0; k < sizeof k_bad_slices / sizeof k_bad_slices[0]; k++) {
        char doc[300];
        snprintf(doc, sizeof doc, "{\"schema\":\"tensormorph.slices/1\",\"slices\":%s}", k_bad_slices[k].slices);
        write_text(sl, doc);
        expect_error(3, k_bad_slices[k].msg, "'%s' evidence '%s' '%s' --inputs '%s' --slices '%s'", bin, g_model,
                     g_model, dir, sl);
    }
    /* dynamic dims need --input-shape; a wrong one is refused */
    expect_error(2, "input 'x' has shape [?,3,?,?] with dynamic dims: give --input-shape x=",
                 "'%s' evidence '%s' '%s' --random-inputs 1", bin, g_model, g_model);
    expect_error(2, "--input-shape x=1,4,48,192 does not fit the baseline's input shape [?,3,?,?]",
                 "'%s' evidence '%s' '%s' --random-inputs 1 --input-shape x=1,4,48,192", bin, g_model, g_model);
    expect_error(2, "--input-shape y: the model has no input 'y' (its inputs: x)",
                 "'%s' evidence '%s' '%s' --random-inputs 1 --input-shape y=1", bin, g_model, g_model);
    expect_error(2, "give --inputs DIR or --random-inputs N", "'%s' evidence '%s' '%s'", bin, g_model, g_model);
    /* onnxruntime-node missing: the message gives the install command */
    char empty[600], want[2048];
    snprintf(empty, sizeof empty, "%s/empty_node_modules", g_tmp);
    mkdir(empty, 0700);
    snprintf(want, sizeof want, "cd %s/runner && npm install --ignore-scripts", getenv("TM_SRC") ? getenv("TM_SRC") : ".");
    expect_error(4, want, "TM_NODE_MODULES='%s' '%s' evidence '%s' '%s' --random-inputs 1 %s", empty, bin, g_model,
                 g_model, SHAPE);
    expect_error(4, "onnxruntime-node is not installed in", "TM_NODE_MODULES='%s' '%s' evidence '%s' '%s' --random-inputs 1 %s",
                 empty, bin, g_model, g_model, SHAPE);
    /* a model ONNX Runtime cannot load: named, with ORT's reason */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/nosuchop.onnx", g_tmp);
    write_bad_op_model(bad);
    char *ins = NULL;
    assert_int_equal(tmt_run(&ins, "'%s' graph '%s' --json", bin, bad), 0); /* tensormorph reads it */
    assert_non_null(strstr(ins, "NoSuchOp"));
    free(ins);
    snprintf(want, sizeof want, "baseline model %s: the runner failed (exit 3): evidence.js: %s: ONNX Runtime cannot load the model:", bad, bad);
    expect_error(3, want, "'%s' evidence '%s' '%s' --random-inputs 1", bin, bad, bad);
    expect_error(3, "NoSuchOp", "'%s' evidence '%s' '%s' --random-inputs 1", bin, bad, bad);
}

/* The runner's error is kept whole: a model under a long path makes ONNX Runtime's message
** longer than one error line; the line keeps its start and its end (ORT's cause), and names a
** file holding the whole stderr */
static void test_long_runner_error(void **state) {
    (void)state;
    if (!require_runtime()) return;
    char dir[600], bad[800];
    char longname[201];
    memset(longname, 'd', 200);
    longname[200] = '\0';
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, longname);
    mkdir(dir, 0700);
    snprintf(bad, sizeof bad, "%s/nosuchop.onnx", dir);
    write_bad_op_model(bad);
    char *out = NULL;
    assert_int_equal(tmt_run(&out, "'%s' evidence '%s' '%s' --random-inputs 1 2>&1 >/dev/null", tmt_bin(), bad, bad), 3);
    assert_non_null(out);
    if (!strstr(out, "No Op registered for NoSuchOp")) print_message("%s\n", out);
    assert_non_null(strstr(out, "baseline model "));
    assert_non_null(strstr(out, " ... "));
    assert_non_null(strstr(out, "No Op registered for NoSuchOp with domain_version of 17")); /* ORT's cause, at the end */
    const char *k = strstr(out, "(whole stderr: ");
    assert_non_null(k);
    char kept[700];
    snprintf(kept, sizeof kept, "%s", k + 15);
    char *close = strchr(kept, ')');
    assert_non_null(close);
    *close = '\0';
    free(out);
    out = NULL;
    /* the kept file has the whole message: the model path, ORT's load error and its cause */
    assert_int_equal(tmt_run(&out, "cat '%s'", kept), 0);
    assert_non_null(strstr(out, "evidence.js: "));
    assert_non_null(strstr(out, bad));
    assert_non_null(strstr(out, "No Op registered for NoSuchOp with domain_version of 17"));
    free(out);
    unlink(kept);
}

/* outputs that differ by name are named, each side's */
static void test_output_names_differ(void **state) {
    (void)state;
    if (!require_runtime()) return;
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/ident_y.onnx", g_tmp);
    snprintf(b, sizeof b, "%s/ident_z.onnx", g_tmp);
    write_op_model(a, "Identity", 'y');
    write_op_model(b, "Identity", 'z');
    char want[1400];
    snprintf(want, sizeof want, "%s: the candidate's outputs are not the baseline's (drift compares outputs by name): "
                                "baseline only: 'y'; candidate only: 'z'", b);
    expect_error(3, want, "'%s' evidence '%s' '%s' --random-inputs 1 --runs 1 --warmup 0", tmt_bin(), a, b);
    /* the same model on both sides measures */
    json_t *d = tmt_run_json(0, "'%s' evidence '%s' '%s' --random-inputs 1 --runs 1 --warmup 0 --no-progress", tmt_bin(), a, a);
    assert_non_null(json_object_get(json_object_get(json_object_get(d, "drift"), "overall"), "y"));
    json_decref(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nearest_rank),
        cmocka_unit_test(test_identical_models_random),
        cmocka_unit_test(test_qdq_candidate_with_slices),
        cmocka_unit_test(test_multi_input_model),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_long_runner_error),
        cmocka_unit_test(test_output_names_differ),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
