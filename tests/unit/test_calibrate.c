/*
** test_calibrate.c: the calibration lab (tm_calibrate, `tensormorph calibrate`): the observer
** reference vectors (torch_observer, ort_calibration) through the library call and the command,
** a hand-checked clipping case, the three SAMPLES forms (generated .npy / .npz / a checkpoint
** path holding ':'; the shared calibration files), per-channel output and bad input.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include <zip.h>

#include "helpers/cli_run.h"
#include "helpers/obs_cases.h"
#include "helpers/fixture.h"
#include "helpers/vectors.h"
#include "tensormorph.h"

static char g_tmp[256];

static int setup(void **state) { (void)state; return tmt_tmpdir_make(g_tmp, sizeof g_tmp, "calib"); }
static int teardown(void **state) { (void)state; return tmt_tmpdir_remove(g_tmp); }

static uint32_t fbits(float x) { return tmv_f32_bits(x); }

/* element u of a per-unit JSON value: a number (one unit) or an array */
static double jat(json_t *o, const char *key, size_t u) {
    json_t *v = json_object_get(o, key);
    if (json_is_array(v)) v = json_array_get(v, u);
    if (!json_is_number(v)) fail_msg("key %s[%zu] missing", key, u);
    return json_number_value(v);
}

/* ---- fixtures ------------------------------------------------------------------------------- */

/* a NumPy 1.0 .npy image of float32 (descr "<f4") or int64 ("<i8") values, C order */
static size_t npy_image(unsigned char *out, const char *descr, int ndim, const int64_t *shape,
                        const void *data, size_t nbytes) {
    char hdr[256], sh[128] = "";
    size_t o = 0;
    for (int d = 0; d < ndim; d++) o += (size_t)snprintf(sh + o, sizeof sh - o, "%lld,%s", (long long)shape[d], d + 1 < ndim ? " " : "");
    if (ndim > 1) sh[o - 1] = '\0'; /* (2, 3) not (2, 3,) */
    int hl = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, sh);
    int total = 10 + hl + 1;
    int pad = (64 - total % 64) % 64;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    uint16_t h = (uint16_t)(hl + pad + 1);
    memcpy(out + 8, &h, 2);
    memcpy(out + 10, hdr, (size_t)hl);
    memset(out + 10 + hl, ' ', (size_t)pad);
    out[10 + hl + pad] = '\n';
    memcpy(out + total + pad, data, nbytes);
    return (size_t)(total + pad) + nbytes;
}


/* A safetensors file: the 8-byte header length (host order: little-endian here), the header
** JSON hdr, then the data d0 (n0 bytes) and d1 (n1 bytes; none when d1 is NULL). */
static void write_st(const char *path, const char *hdr, const void *d0, size_t n0, const void *d1, size_t n1) {
    unsigned char buf[512];
    uint64_t hl = strlen(hdr);
    assert_true(8 + hl + n0 + n1 <= sizeof buf);
    memcpy(buf, &hl, 8);
    memcpy(buf + 8, hdr, hl);
    memcpy(buf + 8 + hl, d0, n0);
    if (d1) memcpy(buf + 8 + hl + n0, d1, n1);
    tmt_write_file(path, buf, 8 + hl + n0 + n1);
}

/* A quantized weight's fixture: l.weight I8 [2,3] and its float scale l.weight_scale F32 [2,1]. */
static void write_qs(const char *path) {
    const char *hdr = "{\"l.weight\":{\"dtype\":\"I8\",\"shape\":[2,3],\"data_offsets\":[0,6]},"
                      "\"l.weight_scale\":{\"dtype\":\"F32\",\"shape\":[2,1],\"data_offsets\":[6,14]}}";
    const unsigned char codes[6] = {1, 2, 3, 0xff, 0xfe, 0x7f};
    const float sc[2] = {0.5f, 0.25f};
    write_st(path, hdr, codes, 6, sc, 8);
}

static void write_npy(const char *path, int ndim, const int64_t *shape, const float *x) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    unsigned char *img = malloc((size_t)n * 4 + 512);
    size_t len = npy_image(img, "<f4", ndim, shape, x, (size_t)n * 4);
    tmt_write_file(path, img, len);
    free(img);
}

/* ---- torch_observer ------------------------------------------------------------------------- */

static void torch_case(const char *name, json_t *cj) {
    tmv_obs_case oc;
    if (tmv_torch_observer_case(name, cj, &oc) != 0) fail_msg("torch_observer/%s: cannot set up", name);
    tmv_npy es, ez, emin, emax;
    assert_int_equal(tmv_npy_load_case("torch_observer", name, "expected_scale.npy", &es), 0);
    assert_int_equal(tmv_npy_load_case("torch_observer", name, "expected_zero_point.npy", &ez), 0);
    assert_int_equal(tmv_npy_load_case("torch_observer", name, "expected_min_val.npy", &emin), 0);
    assert_int_equal(tmv_npy_load_case("torch_observer", name, "expected_max_val.npy", &emax), 0);
    int exact = strcmp(tmv_output_match(cj, "scale"), "exact") == 0;
    int hist = oc.spec.observer.kind == TM_OBS_HISTOGRAM;
    /* the library call */
    tm_calib_params p = {.spec = oc.spec, .qmin = oc.qmin, .qmax = oc.qmax, .custom_range = oc.custom};
    tm_calib_result *r;
    tm_err err;
    if (tm_calibrate(&p, oc.batch, oc.n_batches, &r, &err) != TM_OK) fail_msg("torch_observer/%s: %s", name, err.msg);
    assert_int_equal(r->n_units, es.n);
    int64_t n = 0;
    for (int b = 0; b < oc.n_batches; b++) {
        int64_t m = 1;
        for (int d = 0; d < oc.batch[b].ndim; d++) m *= oc.batch[b].shape[d];
        n += m;
    }
    assert_int_equal(r->total.n, n);
    /* the command: the same case as options */
    char args[512], path[4096];
    tmv_case_path(path, sizeof path, "torch_observer", name, "input.npy");
    int o = snprintf(args, sizeof args, "--convention torch --batches --type %s %s",
                     oc.spec.code_dtype == TM_I8 ? "int8" : "uint8", oc.spec.symmetric ? "--symmetric" : "--asymmetric");
    if (oc.spec.gran.kind == TM_GRAN_CHANNEL) o += snprintf(args + o, sizeof args - (size_t)o, " -g channel:%d", oc.spec.gran.axis);
    if (oc.custom) o += snprintf(args + o, sizeof args - (size_t)o, " --qrange %lld:%lld", (long long)oc.qmin, (long long)oc.qmax);
    else if (oc.reduce_range) o += snprintf(args + o, sizeof args - (size_t)o, " --reduce-range");
    if (oc.spec.observer.kind == TM_OBS_EMA_MINMAX)
        o += snprintf(args + o, sizeof args - (size_t)o, " --observer ema_minmax:%.17g", oc.spec.observer.averaging_constant);
    else if (hist) o += snprintf(args + o, sizeof args - (size_t)o, " --observer histogram --bins %d", oc.spec.observer.n_bins);
    json_t *doc = tmt_run_json(0, "%s calibrate '%s' %s --json", tmt_bin(), path, args);
    json_t *jo = json_array_get(json_object_get(doc, "observers"), 0);
    assert_non_null(jo);
    assert_int_equal(json_integer_value(json_object_get(doc, "qmin")), oc.qmin);
    assert_int_equal(json_integer_value(json_object_get(doc, "qmax")), oc.qmax);
    for (int64_t u = 0; u < r->n_units; u++) {
        float s = r->units[u].scale, cs = (float)jat(jo, "scale", (size_t)u);
        int64_t zp = r->units[u].zero_point, czp = (int64_t)jat(jo, "zero_point", (size_t)u);
        int64_t want_zp = tmv_npy_get_i64(&ez, u);
        assert_int_equal(fbits(cs), fbits(s)); /* command == library, bit for bit */
        assert_int_equal(czp, zp);
        if (exact) {
            if (fbits(s) != tmv_npy_f32_bits(&es, u) || zp != want_zp)
                fail_msg("torch_observer/%s: unit %lld scale %.9g zp %lld, torch %.9g %lld", name, (long long)u,
                         (double)s, (long long)zp, tmv_npy_get_f64(&es, u), (long long)want_zp);
        } else {
            double ws = tmv_npy_get_f64(&es, u);
            double rtol = json_number_value(json_object_get(tmv_output(cj, "scale"), "rtol"));
            printf("torch_observer/%s: scale %.9g zp %lld, torch %.9g %lld (%s)\n", name, (double)s, (long long)zp, ws,
                   (long long)want_zp, fbits(s) == tmv_npy_f32_bits(&es, u) && zp == want_zp ? "exact" : "within tolerance");
            assert_true(fabs(s - ws) <= rtol * fabs(ws));
            assert_true(llabs(zp - want_zp) <= 1);
        }
        if (!hist) { /* minmax / moving average: the range is torch's min_val / max_val */
            assert_int_equal(fbits((float)r->units[u].range_min), tmv_npy_f32_bits(&emin, u));
            assert_int_equal(fbits((float)r->units[u].range_max), tmv_npy_f32_bits(&emax, u));
        }
        assert_true(r->units[u].rounding_bound == (double)s / 2);
    }
    json_decref(doc);
    tm_calib_result_free(r);
    tmv_npy_free(&es);
    tmv_npy_free(&ez);
    tmv_npy_free(&emin);
    tmv_npy_free(&emax);
    tmv_obs_case_free(&oc);
}

static void test_torch_observer_vectors(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    int n = tmv_run_cases("torch_observer", NULL, torch_case);
    printf("torch_observer: %d of %d cases through tm_calibrate and tensormorph calibrate\n", n, n);
}

/* ---- ort_calibration ------------------------------------------------------------------------ */

static void ort_case(const char *name, json_t *cj) {
    assert_string_equal(tmv_output_match(cj, "range"), "exact");
    tmv_obs_case oc;
    if (tmv_ort_calibration_case(name, cj, &oc) != 0) fail_msg("ort_calibration/%s: cannot set up", name);
    tmv_npy er;
    assert_int_equal(tmv_npy_load_case("ort_calibration", name, "expected_range.npy", &er), 0);
    tm_calib_params p = {.spec = oc.spec};
    tm_calib_result *r;
    tm_err err;
    if (tm_calibrate(&p, oc.batch, oc.n_batches, &r, &err) != TM_OK) fail_msg("ort_calibration/%s: %s", name, err.msg);
    if (fbits((float)r->units[0].range_min) != tmv_npy_f32_bits(&er, 0) ||
        fbits((float)r->units[0].range_max) != tmv_npy_f32_bits(&er, 1))
        fail_msg("ort_calibration/%s: range (%.9g, %.9g), ORT (%.9g, %.9g)", name, r->units[0].range_min,
                 r->units[0].range_max, tmv_npy_get_f64(&er, 0), tmv_npy_get_f64(&er, 1));
    /* scale from that range, ONNX convention */
    float ws;
    int32_t wzp;
    assert_int_equal(tm_qparams_from_range(&oc.spec, tmv_npy_get_f64(&er, 0), tmv_npy_get_f64(&er, 1), &ws, &wzp, &err), TM_OK);
    assert_int_equal(fbits(r->units[0].scale), fbits(ws));
    assert_int_equal(r->units[0].zero_point, wzp);
    /* the command, each input file one batch */
    char files[4096] = "", path[4096];
    size_t o = 0;
    for (int b = 0; b < oc.n_batches; b++) {
        tmv_case_path(path, sizeof path, "ort_calibration", name, oc.files[b]);
        o += (size_t)snprintf(files + o, sizeof files - o, " '%s'", path);
    }
    char obs[64];
    tm_observer_name(&oc.spec.observer, obs, sizeof obs);
    json_t *doc = tmt_run_json(0, "%s calibrate%s --observer %s --bins %d --quantized-bins %d %s --json", tmt_bin(), files,
                               obs, oc.spec.observer.n_bins, oc.spec.observer.n_quantized_bins,
                               oc.spec.symmetric ? "--symmetric" : "--asymmetric");
    json_t *jo = json_array_get(json_object_get(doc, "observers"), 0);
    assert_int_equal(json_integer_value(json_object_get(doc, "n_batches")), oc.n_batches);
    assert_int_equal(fbits((float)tmt_num(jo, "range_min")), tmv_npy_f32_bits(&er, 0));
    assert_int_equal(fbits((float)tmt_num(jo, "range_max")), tmv_npy_f32_bits(&er, 1));
    assert_int_equal(fbits((float)tmt_num(jo, "scale")), fbits(ws));
    json_decref(doc);
    tm_calib_result_free(r);
    tmv_npy_free(&er);
    tmv_obs_case_free(&oc);
}

static void test_ort_calibration_vectors(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    int n = tmv_run_cases("ort_calibration", NULL, ort_case);
    printf("ort_calibration: %d of %d cases exact through tm_calibrate and tensormorph calibrate\n", n, n);
}

/* ---- hand-checked clipping ------------------------------------------------------------------ */

/* 10000 values evenly in [-1, 1] plus four outliers; percentile 99.9 (symmetric |x| histogram,
** 2048 bins over [0, 10]) picks just under 1.0, so the outliers, and only they, are clipped
** (1.0 still rounds to code 127: 127.5 * scale > 1). The
** clipped fraction, excesses, SQNR and probes are recomputed here from the reported scale. */
static void test_percentile_clipping_hand_checked(void **state) {
    (void)state;
    enum { NU = 10000, N = NU + 4 };
    static float x[N];
    for (int i = 0; i < NU; i++) x[i] = -1.0f + 2.0f * (float)i / (float)(NU - 1);
    const float out[4] = {3.0f, -4.0f, 5.0f, 10.0f};
    for (int k = 0; k < 4; k++) x[NU + k] = out[k];
    tm_calib_batch b = {.ndim = 1, .shape = {N}, .x = x};
    const double probes[3] = {0.5, 20.0, -0.0123};
    tm_calib_params p = {.spec = tm_qspec_default(), .probes = probes, .n_probes = 3};
    p.spec.gran.kind = TM_GRAN_TENSOR;
    assert_int_equal(tm_observer_from_name("percentile:99.9", &p.spec.observer), TM_OK);
    tm_calib_result *r;
    tm_err err;
    assert_int_equal(tm_calibrate(&p, &b, 1, &r, &err), TM_OK);
    const tm_calib_unit *u = &r->units[0];
    /* ORT returns the left edge of the bin where the |x| cdf reaches 0.999: within one bin
    ** (10 / 2048) below the 0.999 quantile of |x| (about 0.9994) */
    assert_true(u->range_max > 0.9994 - 10.0 / 2048 && u->range_max < 0.9995);
    assert_true(u->range_min == -u->range_max); /* symmetric percentile */
    float s = u->scale;
    assert_int_equal(fbits(s), fbits((float)u->range_max / 127.0f)); /* ONNX symmetric int8: a/127 */
    assert_int_equal(u->zero_point, 0);
    /* independently: clipped beyond [(-128 - 1/2) s, (127 + 1/2) s]; excess beyond [-128 s, 127 s] */
    double lo = -128.5 * s, hi = 127.5 * s, rlo = (double)(-128.0f * s), rhi = (double)(127.0f * s);
    int64_t nc = 0;
    double sum_ex = 0, max_ex = 0, sx2 = 0, se2 = 0;
    for (int i = 0; i < N; i++) {
        double v = x[i];
        if (v < lo || v > hi) {
            double e = v < lo ? rlo - v : v - rhi;
            nc++;
            sum_ex += e;
            if (e > max_ex) max_ex = e;
        }
        float q = rintf(x[i] / s);
        if (q < -128) q = -128;
        if (q > 127) q = 127;
        double d = (double)(q * s);
        sx2 += v * v;
        se2 += (v - d) * (v - d);
    }
    assert_int_equal(nc, 4); /* exactly the outliers */
    assert_int_equal(u->st.n_clipped, 4);
    assert_true(u->st.clipped_fraction == 4.0 / N);
    assert_true(fabs(u->st.clipped_mean_excess - sum_ex / 4) <= 1e-12);
    assert_true(fabs(u->st.clipped_mean_excess - ((3 + 4 + 5 + 10) / 4.0 - (3 * rhi - rlo) / 4.0)) <= 1e-9);
    assert_true(u->st.clipped_max_excess == 10.0 - rhi);
    assert_true(max_ex == u->st.clipped_max_excess);
    assert_true(fabs(u->st.sqnr_db - 10 * log10(sx2 / se2)) <= 1e-9);
    assert_true(u->rounding_bound == (double)s / 2);
    /* probes: 0.5 -> rint(0.5 / s); 20 saturates at 127 */
    assert_int_equal(r->probes[0].code, (int64_t)rintf(0.5f / s));
    assert_true(r->probes[0].dequantized == (double)((float)r->probes[0].code * s));
    assert_true(fabs(r->probes[0].error) <= (double)s / 2);
    assert_int_equal(r->probes[1].code, 127);
    assert_true(r->probes[1].error == (double)(127.0f * s) - 20.0);
    assert_int_equal(r->probes[2].code, (int64_t)rintf(-0.0123f / s));
    tm_calib_result_free(r);

    /* the command on the same samples, and minmax on them clips nothing */
    char path[512];
    snprintf(path, sizeof path, "%s/uniform.npy", g_tmp);
    const int64_t shape[1] = {N};
    write_npy(path, 1, shape, x);
    json_t *doc = tmt_run_json(0, "%s calibrate '%s' --observer all --probe 0.5 --probe 20 --json", tmt_bin(), path);
    json_t *obs = json_object_get(doc, "observers");
    assert_int_equal(json_array_size(obs), 6);
    json_t *pc = NULL, *mm = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(obs, i, e) {
        const char *nm = json_string_value(json_object_get(e, "observer"));
        if (!strcmp(nm, "minmax")) mm = e;
        if (!strncmp(nm, "percentile", 10)) pc = e;
        const char *keys[] = {"observer", "range_min", "range_max", "scale", "zero_point", "rounding_bound", "clipped_fraction",
                              "clipped_mean_excess", "clipped_max_excess", "sqnr_db", "probes"};
        assert_int_equal(json_object_size(e), 11);
        for (size_t k = 0; k < 11; k++) assert_non_null(json_object_get(e, keys[k]));
        json_t *p0 = json_array_get(json_object_get(e, "probes"), 0);
        assert_int_equal(json_object_size(p0), 4);
        assert_true(tmt_num(p0, "real") == 0.5);
    }
    assert_non_null(pc);
    assert_non_null(mm);
    assert_true(tmt_num(mm, "clipped_fraction") == 0.0 && tmt_num(mm, "range_max") == 10.0 && tmt_num(mm, "range_min") == -4.0);
    assert_true(tmt_num(pc, "clipped_fraction") == 0.0); /* default 99.999 keeps the outliers */
    json_decref(doc);
    doc = tmt_run_json(0, "%s calibrate '%s' --observer percentile:99.9 --probe 20 --json", tmt_bin(), path);
    pc = json_array_get(json_object_get(doc, "observers"), 0);
    assert_true(tmt_num(pc, "clipped_fraction") == 4.0 / N);
    assert_true(tmt_num(pc, "clipped_max_excess") == 10.0 - rhi);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(pc, "probes"), 0), "code")), 127);
    json_decref(doc);
    /* text mode: a table with a row per observer */
    char *txt = NULL;
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s' --observer all", tmt_bin(), path), 0);
    assert_non_null(strstr(txt, "SQNR dB"));
    assert_non_null(strstr(txt, "\nentropy "));
    assert_non_null(strstr(txt, "\nhistogram "));
    free(txt);
}

/* ---- SAMPLES forms ---------------------------------------------------------------------------- */

static void test_samples_forms(void **state) {
    (void)state;
    /* .npy */
    const int64_t shape[2] = {3, 4};
    const float a[12] = {0.5f, -1.5f, 2.0f, 0.25f, -0.75f, 1.0f, 3.5f, -2.25f, 0.0f, 0.125f, -3.0f, 1.75f};
    char npy[512], npz[512], dir[512], st[600], cmd[1200];
    snprintf(npy, sizeof npy, "%s/a.npy", g_tmp);
    write_npy(npy, 2, shape, a);
    json_t *doc = tmt_run_json(0, "%s calibrate '%s' --json", tmt_bin(), npy);
    json_t *o = json_array_get(json_object_get(doc, "observers"), 0);
    assert_true(tmt_num(o, "range_min") == -3.0 && tmt_num(o, "range_max") == 3.5);
    assert_true((float)tmt_num(o, "scale") == 3.5f / 127.0f);
    assert_int_equal(json_integer_value(json_object_get(doc, "n_samples")), 12);
    json_decref(doc);
    /* per channel (axis 1: 4 channels): per-unit arrays, probes per channel, overall */
    doc = tmt_run_json(0, "%s calibrate '%s' -g channel:1 --asymmetric --type uint8 --probe 1 --json", tmt_bin(), npy);
    o = json_array_get(json_object_get(doc, "observers"), 0);
    assert_int_equal(json_array_size(json_object_get(o, "scale")), 4);
    assert_int_equal(json_array_size(json_object_get(o, "sqnr_db")), 4);
    for (size_t c = 0; c < 4; c++) {
        float mn = fminf(fminf(a[c], a[4 + c]), a[8 + c]), mx = fmaxf(fmaxf(a[c], a[4 + c]), a[8 + c]);
        assert_true(jat(o, "range_min", c) == mn && jat(o, "range_max", c) == mx);
        float s = (fmaxf(mx, 0) - fminf(mn, 0)) / 255.0f; /* ONNX affine uint8 */
        assert_int_equal(fbits((float)jat(o, "scale", c)), fbits(s));
        assert_true(jat(o, "zero_point", c) == (double)(0 - (int)rintf(fminf(mn, 0) / s)));
    }
    json_t *p0 = json_array_get(json_object_get(o, "probes"), 0);
    assert_int_equal(json_array_size(json_object_get(p0, "code")), 4);
    assert_non_null(json_object_get(json_object_get(o, "overall"), "sqnr_db"));
    json_decref(doc);

    /* .npz: FILE.npz:KEY (stored members, made with libzip) */
    snprintf(npz, sizeof npz, "%s/s.npz", g_tmp);
    static unsigned char img1[1024], img2[1024];
    const float b2[5] = {-8.0f, 1.0f, 2.0f, 3.0f, 6.0f};
    const int64_t ids[3] = {1, 2, 3};
    const int64_t s5[1] = {5}, s3[1] = {3};
    size_t l1 = npy_image(img1, "<f4", 1, s5, b2, sizeof b2), l2 = npy_image(img2, "<i8", 1, s3, ids, sizeof ids);
    int ze;
    zip_t *z = zip_open(npz, ZIP_CREATE | ZIP_TRUNCATE, &ze);
    assert_non_null(z);
    zip_source_t *zs1 = zip_source_buffer(z, img1, l1, 0), *zs2 = zip_source_buffer(z, img2, l2, 0);
    zip_int64_t i1 = zip_file_add(z, "acts.npy", zs1, 0), i2 = zip_file_add(z, "ids.npy", zs2, 0);
    assert_true(i1 >= 0 && i2 >= 0);
    zip_set_file_compression(z, (zip_uint64_t)i1, ZIP_CM_STORE, 0);
    zip_set_file_compression(z, (zip_uint64_t)i2, ZIP_CM_STORE, 0);
    assert_int_equal(zip_close(z), 0);
    doc = tmt_run_json(0, "%s calibrate '%s:acts' --asymmetric --json", tmt_bin(), npz);
    o = json_array_get(json_object_get(doc, "observers"), 0);
    assert_true(tmt_num(o, "range_min") == -8.0 && tmt_num(o, "range_max") == 6.0);
    assert_int_equal(fbits((float)tmt_num(o, "scale")), fbits(14.0f / 255.0f));
    json_decref(doc);

    /* PATH:TENSOR of a checkpoint whose path holds ':' (safetensors written here) */
    snprintf(dir, sizeof dir, "%s/run:1", g_tmp);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(st, sizeof st, "%s/m.safetensors", dir);
    const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    const float w[4] = {-0.5f, 0.25f, 0.75f, -1.0f};
    write_st(st, hdr, w, 16, NULL, 0);
    doc = tmt_run_json(0, "%s calibrate '%s:w' -g tensor --convention torch --json", tmt_bin(), st);
    o = json_array_get(json_object_get(doc, "observers"), 0);
    assert_true(tmt_num(o, "range_min") == -1.0 && tmt_num(o, "range_max") == 0.75);
    assert_int_equal(fbits((float)tmt_num(o, "scale")), fbits(1.0f / 127.5f)); /* torch symmetric: /127.5 */
    assert_null(json_object_get(doc, "granularity_default")); /* given, not defaulted */
    json_decref(doc);
    /* a checkpoint weight without -g: quantize's default, channel:0 (one rule for both commands) */
    doc = tmt_run_json(0, "%s calibrate '%s:w' --convention torch --json", tmt_bin(), st);
    assert_string_equal(json_string_value(json_object_get(doc, "granularity")), "channel");
    assert_int_equal(json_integer_value(json_object_get(doc, "axis")), 0);
    assert_string_equal(json_string_value(json_object_get(doc, "granularity_default")), "weight");
    o = json_array_get(json_object_get(doc, "observers"), 0);
    assert_true(jat(o, "range_min", 0) == -0.5 && jat(o, "range_max", 0) == 0.25);
    assert_true(jat(o, "range_min", 1) == -1.0 && jat(o, "range_max", 1) == 0.75);
    assert_int_equal(fbits((float)jat(o, "scale", 0)), fbits(0.5f / 127.5f));
    assert_int_equal(fbits((float)jat(o, "scale", 1)), fbits(1.0f / 127.5f));
    json_decref(doc);
    /* activation samples (.npy) without -g: per tensor, and the report says which default */
    doc = tmt_run_json(0, "%s calibrate '%s' --json", tmt_bin(), npy);
    assert_string_equal(json_string_value(json_object_get(doc, "granularity")), "tensor");
    assert_string_equal(json_string_value(json_object_get(doc, "granularity_default")), "activation");
    json_decref(doc);

    /* bad input: clear messages and exit codes */
    char *txt = NULL;
    snprintf(cmd, sizeof cmd, "%s calibrate '%s:nokey' 2>&1", tmt_bin(), npz);
    assert_int_equal(tmt_run(&txt, "%s", cmd), 2);
    assert_non_null(strstr(txt, "no array (npz key) named 'nokey'"));
    assert_non_null(strstr(txt, "'acts'"));
    free(txt);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s:nope' 2>&1", tmt_bin(), st), 2);
    assert_non_null(strstr(txt, "no tensor named 'nope'"));
    free(txt);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s:ids' 2>&1", tmt_bin(), npz), 3);
    assert_non_null(strstr(txt, "has dtype I64: calibration needs floating-point samples"));
    free(txt);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s' 2>&1", tmt_bin(), npz), 2); /* two arrays: name one */
    assert_non_null(strstr(txt, "holds 2 arrays"));
    free(txt);
    char empty[512], nan[512];
    snprintf(empty, sizeof empty, "%s/empty.npy", g_tmp);
    const int64_t s0[2] = {0, 4};
    write_npy(empty, 2, s0, a);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s' 2>&1", tmt_bin(), empty), 3);
    assert_non_null(strstr(txt, "is empty (shape [0, 4]): no samples"));
    free(txt);
    snprintf(nan, sizeof nan, "%s/nan.npy", g_tmp);
    float an[12];
    memcpy(an, a, sizeof an);
    an[6] = NAN;
    write_npy(nan, 2, shape, an);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s' --json 2>&1", tmt_bin(), nan), 3);
    assert_non_null(strstr(txt, "NaN at flat index 6 [1, 2]: calibration needs finite samples"));
    free(txt);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s' --observer bogus 2>&1", tmt_bin(), npy), 2);
    assert_non_null(strstr(txt, "observer: unknown 'bogus'"));
    free(txt);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s' --probe abc 2>&1", tmt_bin(), npy), 2);
    assert_non_null(strstr(txt, "probe: 'abc' is not a finite number"));
    free(txt);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s/missing.npy' 2>&1", tmt_bin(), g_tmp), 4);
    free(txt);
    /* the library refuses the same things */
    tm_calib_batch bb = {.ndim = 2, .shape = {3, 4}, .x = an};
    tm_calib_params p = {.spec = tm_qspec_default()};
    p.spec.gran.kind = TM_GRAN_TENSOR;
    tm_calib_result *r = NULL;
    tm_err err;
    assert_int_equal(tm_calibrate(&p, &bb, 1, &r, &err), TM_E_NONFINITE);
    assert_non_null(strstr(err.msg, "NaN at flat index 6 of batch 0"));
    bb.shape[0] = 0;
    assert_int_equal(tm_calibrate(&p, &bb, 1, &r, &err), TM_E_INVALID_ARG);
    assert_non_null(strstr(err.msg, "no samples"));
    assert_null(r);
}

/* the shared calibration activations: an f16 Fortran-order .npy, a deflated .npz member, the
** integer tokens array refused */
static void test_shared_calibration_files(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char p[4096];
    /* the string entry of the shared npz: named as what it is, not "no array named" (exit 3),
    ** and the listing counts it as skipped */
    char *txt = NULL;
    snprintf(p, sizeof p, "%s/models/numpy/stories260K_calib_acts.npz", tmv_shared_dir());
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s:text' 2>&1", tmt_bin(), p), 3);
    assert_non_null(strstr(txt, "array 'text' has dtype <U177, which is not a tensor dtype"));
    free(txt);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s' 2>&1", tmt_bin(), p), 2);
    assert_non_null(strstr(txt, "holds 7 arrays"));
    assert_non_null(strstr(txt, "skipped (not a tensor or unreadable): 'text'"));
    free(txt);
    snprintf(p, sizeof p, "%s/models/numpy/stories260K_calib_b_L4_down_proj_in_f16_fortran.npy", tmv_shared_dir());
    /* min and max do not depend on the element order: read the f16 values here */
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    unsigned char h[12];
    assert_int_equal(fread(h, 1, 10, f), 10);
    uint16_t hl = (uint16_t)(h[8] | h[9] << 8);
    assert_int_equal(fseek(f, 10 + hl, SEEK_SET), 0);
    float mn = INFINITY, mx = -INFINITY;
    int64_t n = 0;
    uint16_t v;
    while (fread(&v, 2, 1, f) == 1) {
        float x = tm_f16_to_f32(v);
        mn = fminf(mn, x);
        mx = fmaxf(mx, x);
        n++;
    }
    fclose(f);
    assert_int_equal(n, 384 * 172);
    json_t *doc = tmt_run_json(0, "%s calibrate '%s' --asymmetric --type uint8 --json", tmt_bin(), p);
    json_t *o = json_array_get(json_object_get(doc, "observers"), 0);
    assert_true(tmt_num(o, "range_min") == mn && tmt_num(o, "range_max") == mx);
    assert_int_equal(json_integer_value(json_object_get(doc, "n_samples")), n);
    json_decref(doc);
    /* per channel along axis 1 of the Fortran array: channel c's min is over column c */
    doc = tmt_run_json(0, "%s calibrate '%s' -g channel:1 --json", tmt_bin(), p);
    o = json_array_get(json_object_get(doc, "observers"), 0);
    assert_int_equal(json_array_size(json_object_get(o, "range_min")), 172);
    json_decref(doc);
    snprintf(p, sizeof p, "%s/models/numpy/stories260K_calib_b_acts.npz", tmv_shared_dir());
    doc = tmt_run_json(0, "%s calibrate '%s:layers.0.attn_in' --observer entropy --json", tmt_bin(), p);
    o = json_array_get(json_object_get(doc, "observers"), 0);
    assert_true(tmt_num(o, "range_max") <= tmt_num(doc, "sample_max") && tmt_num(o, "scale") > 0);
    json_decref(doc);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s:tokens' 2>&1", tmt_bin(), p), 3);
    assert_non_null(strstr(txt, "calibration needs floating-point samples"));
    free(txt);
}


/* ---- cancellation, probes beyond float32, messages ------------------------------------------- */

/* n pseudo-random values, roughly normal (sum of 4 uniforms), deterministic */
static void fill_noise(float *x, int64_t n, uint32_t seed) {
    uint32_t r = seed;
    for (int64_t i = 0; i < n; i++) {
        float s = 0.0f;
        for (int k = 0; k < 4; k++) {
            r = r * 1664525u + 1013904223u;
            s += (float)(r >> 8) / 16777216.0f - 0.5f;
        }
        x[i] = s;
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct flag_setter { volatile int *flag; int delay_ms; };
static void *set_flag_later(void *arg) {
    struct flag_setter *fs = arg;
    struct timespec ts = {fs->delay_ms / 1000, (long)(fs->delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    *fs->flag = 1;
    return NULL;
}

/* 64 channels x 8192 entropy bins: ~64 O(bins^2) searches, tens of seconds uninterrupted */
#define CANCEL_ROWS 64
#define CANCEL_COLS 4096

static void test_cancel_library(void **state) {
    (void)state;
    float *x = malloc(CANCEL_ROWS * CANCEL_COLS * sizeof(float));
    assert_non_null(x);
    fill_noise(x, CANCEL_ROWS * CANCEL_COLS, 7);
    tm_calib_batch b = {.ndim = 2, .shape = {CANCEL_ROWS, CANCEL_COLS}, .x = x};
    tm_calib_params p;
    memset(&p, 0, sizeof p);
    p.spec = tm_qspec_default();
    p.spec.gran = (tm_qgran){.kind = TM_GRAN_CHANNEL, .axis = 0};
    p.spec.observer = tm_observer_default(TM_OBS_ENTROPY);
    p.spec.observer.n_bins = 8192;
    volatile int flag = 1;
    p.cancel = &flag;
    tm_calib_result *r = (tm_calib_result *)1;
    tm_err err;
    /* already set: nothing is computed */
    assert_int_equal(tm_calibrate(&p, &b, 1, &r, &err), TM_E_CANCELLED);
    assert_null(r);
    assert_int_equal(err.code, TM_E_CANCELLED);
    /* one unit's search, uncancelled, on this machine now (the bound below scales with it, so a
    ** loaded machine or a sanitizer build does not fail the test) */
    p.cancel = NULL;
    b.shape[0] = 2;
    double u0 = now_s();
    assert_int_equal(tm_calibrate(&p, &b, 1, &r, &err), TM_OK);
    double unit_s = (now_s() - u0) / 2;
    assert_int_equal(r->n_units, 2);
    tm_calib_result_free(r);
    b.shape[0] = CANCEL_ROWS;
    p.cancel = &flag;
    /* set by another thread while the observers run: returns within about one unit's search */
    flag = 0;
    struct flag_setter fs = {(volatile int *)&flag, 300};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, set_flag_later, &fs), 0);
    double t0 = now_s();
    tm_status st = tm_calibrate(&p, &b, 1, &r, &err);
    double dt = now_s() - t0;
    pthread_join(th, NULL);
    assert_int_equal(st, TM_E_CANCELLED);
    assert_null(r);
    printf("cancel: tm_calibrate returned %.2f s after start (flag set at 0.3 s; one unit %.2f s)\n", dt, unit_s);
    /* the flag is seen between units: at most the unit in flight on each thread after 0.3 s,
    ** with room for scheduling; uncancelled, the 64 units take 64 * unit_s */
    assert_true(dt < 0.3 + 3 * unit_s + 1.0);
    assert_true(dt < CANCEL_ROWS * unit_s / 4);
    free(x);
}

/* `calibrate` stops on SIGINT: exit 130, nothing on stdout */
static void test_cli_interrupt(void **state) {
    (void)state;
    float *x = malloc(CANCEL_ROWS * CANCEL_COLS * sizeof(float));
    assert_non_null(x);
    fill_noise(x, CANCEL_ROWS * CANCEL_COLS, 11);
    char npy[512], out[600];
    snprintf(npy, sizeof npy, "%s/long.npy", g_tmp);
    snprintf(out, sizeof out, "%s/long.out", g_tmp);
    const int64_t shape[2] = {CANCEL_ROWS, CANCEL_COLS};
    write_npy(npy, 2, shape, x);
    free(x);
    const char *const runs[2][4] = {{"--observer", "entropy", "--bins", "8192"},
                                    {"--observer", "histogram", "--bins", "4194304"}};
    for (int k = 0; k < 2; k++) {
        fflush(stdout);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            FILE *o = freopen(out, "w", stdout);
            if (!o) _exit(126);
            execl(tmt_bin(), tmt_bin(), "calibrate", npy, "-g", "channel:0", runs[k][0], runs[k][1], runs[k][2],
                  runs[k][3], "--json", (char *)NULL);
            _exit(127);
        }
        struct timespec ts = {0, 500 * 1000 * 1000};
        nanosleep(&ts, NULL);
        double t0 = now_s();
        assert_int_equal(kill(pid, SIGINT), 0);
        int ws = 0;
        assert_int_equal(waitpid(pid, &ws, 0), pid);
        double dt = now_s() - t0;
        printf("calibrate %s %s: exit %d %.2f s after SIGINT\n", runs[k][1], runs[k][3], WEXITSTATUS(ws), dt);
        assert_true(WIFEXITED(ws));
        assert_int_equal(WEXITSTATUS(ws), 130);
        assert_true(dt < 3.0);
        struct stat sb;
        assert_int_equal(stat(out, &sb), 0);
        assert_int_equal(sb.st_size, 0); /* no partial output */
    }
}

/* probes are any finite double; beyond float32's range they clip like any large value */
static void test_probes_beyond_float32(void **state) {
    (void)state;
    char npy[512];
    snprintf(npy, sizeof npy, "%s/pr.npy", g_tmp);
    const int64_t shape[1] = {4};
    const float a[4] = {-2.0f, 1.0f, 0.5f, 2.0f};
    write_npy(npy, 1, shape, a);
    json_t *d = tmt_run_json(0, "%s calibrate '%s' --probe 3.4028235e38 --probe 1e39 --probe -1e300 --probe 1 --json",
                             tmt_bin(), npy);
    json_t *o = json_array_get(json_object_get(d, "observers"), 0);
    double scale = jat(o, "scale", 0);
    assert_true(scale > 0.01 && scale < 0.02); /* minmax symmetric int8 over max|x| = 2 */
    json_t *pr = json_object_get(o, "probes");
    assert_int_equal(json_array_size(pr), 4);
    const double real[4] = {3.4028235e38, 1e39, -1e300, 1.0};
    /* the huge ones clip to the end codes; 1.0 is round(1 / scale) (onnx: x / s, half to even) */
    const int64_t code[4] = {127, 127, -128, (int64_t)nearbyintf(1.0f / (float)scale)};
    for (size_t k = 0; k < 4; k++) {
        json_t *p = json_array_get(pr, k);
        assert_true(tmt_num(p, "real") == real[k]);
        assert_int_equal(json_integer_value(json_object_get(p, "code")), code[k]);
        double deq = (double)((float)code[k] * (float)scale);
        assert_true(fabs(tmt_num(p, "dequantized") - deq) < 1e-6);
        assert_true(tmt_num(p, "error") == tmt_num(p, "dequantized") - real[k]);
    }
    json_decref(d);
    char *txt = NULL;
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s' --probe 1e400 2>&1", tmt_bin(), npy), 2);
    assert_non_null(strstr(txt, "probe: '1e400' is not a finite number"));
    free(txt);
}

/* bad SAMPLES say which argument and what is wrong in user terms */
static void test_samples_messages(void **state) {
    (void)state;
    char *txt = NULL;
    /* a directory that is not a checkpoint */
    char dir[512], p[700], q[700];
    snprintf(dir, sizeof dir, "%s/adir", g_tmp);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(p, sizeof p, "%s/empty.safetensors", dir);
    tmt_write_file(p, "", 0);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s' 2>&1", tmt_bin(), dir), 3);
    assert_non_null(strstr(txt, "is a directory, not a checkpoint, .npy or .npz"));
    assert_non_null(strstr(txt, "empty.safetensors")); /* and which file it tried */
    free(txt);
    /* channel granularity on a 0-D tensor */
    const float one = 1.5f;
    snprintf(p, sizeof p, "%s/scalar.npy", g_tmp);
    write_npy(p, 0, NULL, &one);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s' -g channel 2>&1", tmt_bin(), p), 2);
    assert_non_null(strstr(txt, "scalar.npy: samples of shape [] have no axis 0"));
    free(txt);
    /* batches with different channel counts */
    const float a6[6] = {1, 2, 3, 4, 5, 6};
    const int64_t s23[2] = {2, 3}, s32[2] = {3, 2};
    snprintf(p, sizeof p, "%s/b23.npy", g_tmp);
    snprintf(q, sizeof q, "%s/b32.npy", g_tmp);
    write_npy(p, 2, s23, a6);
    write_npy(q, 2, s32, a6);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s' '%s' -g channel:0 2>&1", tmt_bin(), p, q), 3);
    assert_non_null(strstr(txt, "b32.npy: samples of shape [3, 2] have 3 channels on axis 0, but"));
    assert_non_null(strstr(txt, "b23.npy has 2"));
    free(txt);
    /* tensor granularity: the same two batches are fine */
    json_t *d = tmt_run_json(0, "%s calibrate '%s' '%s' --json", tmt_bin(), p, q);
    assert_int_equal(json_integer_value(json_object_get(d, "n_samples")), 12);
    json_decref(d);
    /* npz: one truncated entry and one string entry do not block the good one */
    unsigned char img[3][1024];
    size_t len[3];
    const int64_t s3[1] = {3}, s100[1] = {100}, s2[1] = {2};
    const float good[3] = {0.5f, -1.25f, 8.0f};
    const char text[24] = "ab";
    len[0] = npy_image(img[0], "<f4", 1, s3, good, sizeof good);
    len[1] = npy_image(img[1], "<f4", 1, s100, good, sizeof good); /* 12 of 400 bytes */
    len[2] = npy_image(img[2], "<U3", 1, s2, text, sizeof text);
    char npz[512];
    snprintf(npz, sizeof npz, "%s/mixed.npz", g_tmp);
    int ze;
    zip_t *z = zip_open(npz, ZIP_CREATE | ZIP_TRUNCATE, &ze);
    assert_non_null(z);
    const char *members[3] = {"good.npy", "bad.npy", "text.npy"};
    for (int k = 0; k < 3; k++) {
        zip_int64_t i = zip_file_add(z, members[k], zip_source_buffer(z, img[k], len[k], 0), 0);
        assert_true(i >= 0);
        zip_set_file_compression(z, (zip_uint64_t)i, ZIP_CM_STORE, 0);
    }
    assert_int_equal(zip_close(z), 0);
    d = tmt_run_json(0, "%s calibrate '%s:good' --json", tmt_bin(), npz);
    assert_int_equal(json_integer_value(json_object_get(d, "n_samples")), 3);
    assert_true(tmt_num(d, "sample_max") == 8.0);
    json_decref(d);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s:bad' 2>&1", tmt_bin(), npz), 3);
    assert_non_null(strstr(txt, "mixed.npz: array 'bad' is unreadable (truncated"));
    free(txt);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s:text' 2>&1", tmt_bin(), npz), 3);
    assert_non_null(strstr(txt, "mixed.npz: array 'text' has dtype <U3, which is not a tensor dtype"));
    free(txt);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s:nokey' 2>&1", tmt_bin(), npz), 2);
    assert_non_null(strstr(txt, "it holds: 'good'; skipped (not a tensor or unreadable): 'bad', 'text'"));
    free(txt);
    /* an npz without arrays (numpy.savez with nothing: the end-of-central-directory record) */
    unsigned char eocd[22] = {'P', 'K', 5, 6};
    snprintf(npz, sizeof npz, "%s/empty.npz", g_tmp);
    tmt_write_file(npz, eocd, sizeof eocd);
    assert_int_equal(tmt_run(&txt, "%s calibrate '%s' 2>&1", tmt_bin(), npz), 3);
    assert_non_null(strstr(txt, "empty.npz holds no arrays"));
    assert_null(strstr(txt, "nothing"));
    free(txt);
    /* an auxiliary float tensor named explicitly (a quantized weight's scale) is calibrated */
    snprintf(p, sizeof p, "%s/qs.safetensors", g_tmp);
    write_qs(p);
    d = tmt_run_json(0, "%s calibrate '%s:l.weight_scale' --json", tmt_bin(), p);
    assert_int_equal(json_integer_value(json_object_get(d, "n_samples")), 2);
    assert_true(tmt_num(d, "sample_min") == 0.25 && tmt_num(d, "sample_max") == 0.5);
    json_decref(d);
}

/* ---- /api/v1/calibrate ------------------------------------------------------------------------ */

/* GET path from 127.0.0.1:port; *status the HTTP status; returns the parsed JSON body */
#define http_json tmt_http_json

/* the page's API answers with the command's document for a tensor of the served checkpoint */
/* `tensormorph serve ST --samples NPY` on a free port: its pid, the pipe of its stdout (*f, for the
** caller to close) and the port it printed. */
static pid_t start_serve(const char *st, const char *npy, FILE **f, int *port) {
    const char *args[] = {st, "--samples", npy, NULL};
    return (pid_t)tmt_serve_start(args, port, f);
}

static void test_api_equals_cli(void **state) {
    (void)state;
    char st[512];
    snprintf(st, sizeof st, "%s/api.safetensors", g_tmp);
    const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                      "\"ids\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[24,32]}}";
    const float w[6] = {-0.5f, 0.25f, 0.75f, -1.0f, 2.0f, 0.125f};
    const int32_t ids[2] = {7, 9};
    write_st(st, hdr, w, 24, ids, 8);
    char npy[512];
    snprintf(npy, sizeof npy, "%s/served.npy", g_tmp);
    const float sv[8] = {0.5f, -1.0f, 4.0f, 0.25f, -0.125f, 2.0f, 1.5f, -3.0f};
    const int64_t s8[2] = {2, 4};
    write_npy(npy, 2, s8, sv);
    FILE *f = NULL;
    int port = 0;
    pid_t pid = start_serve(st, npy, &f, &port);
    int status;
    json_t *a = http_json(port, "/api/v1/calibrate?tensor=w&observer=mse&convention=torch&type=uint8&symmetric=0&probe=0.5,-3&hist_bins=4", &status);
    json_t *c = tmt_run_json(0, "%s calibrate '%s:w' --observer mse --convention torch --type uint8 --asymmetric --probe 0.5 --probe -3 --json", tmt_bin(), st);
    assert_int_equal(status, 200);
    assert_true(json_equal(json_object_get(a, "observers"), json_object_get(c, "observers")));
    assert_true(json_equal(json_object_get(a, "qmax"), json_object_get(c, "qmax")));
    json_t *h = json_object_get(a, "histogram"), *cnt = json_object_get(h, "counts");
    assert_int_equal(json_array_size(cnt), 4);
    assert_int_equal(json_array_size(json_object_get(h, "edges")), 5);
    /* 4 bins over [-1, 2]: [-1,-0.25) [-0.25,0.5) [0.5,1.25) [1.25,2] */
    const int64_t want[4] = {2, 2, 1, 1};
    for (size_t k = 0; k < 4; k++) assert_int_equal(json_integer_value(json_array_get(cnt, k)), want[k]);
    json_decref(a);
    json_decref(c);
    /* serve --samples: listed, and calibrated as the command does */
    a = http_json(port, "/api/v1/calibrate?samples=list", &status);
    assert_int_equal(status, 200);
    assert_string_equal(json_string_value(json_array_get(json_object_get(a, "samples"), 0)), npy);
    json_decref(a);
    a = http_json(port, "/api/v1/calibrate?samples=1&observer=histogram&symmetric=0&probe=1", &status);
    c = tmt_run_json(0, "%s calibrate '%s' --observer histogram --asymmetric --probe 1 --json", tmt_bin(), npy);
    assert_int_equal(status, 200);
    assert_true(json_equal(json_object_get(a, "observers"), json_object_get(c, "observers")));
    assert_true(json_equal(json_object_get(a, "samples"), json_object_get(c, "samples")));
    json_decref(a);
    json_decref(c);
    a = http_json(port, "/api/v1/calibrate?tensor=nope", &status);
    assert_int_equal(status, 404);
    json_decref(a);
    a = http_json(port, "/api/v1/calibrate?tensor=ids", &status);
    assert_int_equal(status, 400);
    assert_non_null(strstr(json_string_value(json_object_get(a, "error")), "dtype I32"));
    json_decref(a);
    a = http_json(port, "/api/v1/calibrate?tensor=w&observer=bogus", &status);
    assert_int_equal(status, 400);
    json_decref(a);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    fclose(f);
}


/* requests the API must refuse with 400 and an "error", and serve's --samples checked at start */
static void test_api_bad_requests(void **state) {
    (void)state;
    char st[512], npy[512];
    snprintf(st, sizeof st, "%s/apiq.safetensors", g_tmp);
    write_qs(st);
    snprintf(npy, sizeof npy, "%s/apis.npy", g_tmp);
    const float sv[4] = {0.5f, -1.0f, 4.0f, 0.25f};
    const int64_t s4[1] = {4};
    write_npy(npy, 1, s4, sv);
    /* unreadable --samples: refused at start, before any URL is printed */
    char *txt = NULL;
    assert_int_equal(tmt_run(&txt, "%s serve '%s' --port 0 --samples '%s/nonexist.npy' 2>&1", tmt_bin(), st, g_tmp), 4);
    assert_non_null(strstr(txt, "--samples"));
    assert_non_null(strstr(txt, "nonexist.npy"));
    assert_null(strstr(txt, "http://"));
    free(txt);
    FILE *f = NULL;
    int port = 0;
    pid_t pid = start_serve(st, npy, &f, &port);
    static const struct { const char *q; const char *needle; } bad[] = {
        {"tensor=%ff%fe", "not valid UTF-8"},
        {"samples=2", "samples must be 1"},
        {"tensor=l.weight%00xx", "NUL byte"},
        {"tensor=l.weight&tensor=l.weight_scale", "tensor: given 2 times"},
        {"samples=1&tensor=l.weight", "not both"},
        {"", "give tensor=NAME"},
        {"samples=1&observer=entropy&bins=16777216", "at most 8192 bins"},
        {"samples=1&observer=entropy&bins=16384", "at most 8192 bins"},
        {"samples=1&probe=1e400", "probe: '1e400' is not a finite number"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char path[256];
        int status = 0;
        snprintf(path, sizeof path, "/api/v1/calibrate?%s", bad[k].q);
        json_t *a = http_json(port, path, &status);
        const char *e = json_string_value(json_object_get(a, "error"));
        if (status != 400 || !e || !strstr(e, bad[k].needle))
            fail_msg("%s: status %d, error '%s' (want 400 with '%s')", bad[k].q, status, e ? e : "(none)", bad[k].needle);
        json_decref(a);
    }
    /* within the bounds, and a huge probe clips */
    int status = 0;
    json_t *a = http_json(port, "/api/v1/calibrate?samples=1&observer=entropy&bins=8192&probe=3.4028235e38", &status);
    assert_int_equal(status, 200);
    json_t *pr = json_array_get(json_object_get(json_array_get(json_object_get(a, "observers"), 0), "probes"), 0);
    assert_int_equal(json_integer_value(json_object_get(pr, "code")), 127);
    json_decref(a);
    /* a scale tensor listed by inspect: calibrated like any float tensor, as the command does */
    a = http_json(port, "/api/v1/calibrate?tensor=l.weight_scale", &status);
    json_t *c = tmt_run_json(0, "%s calibrate '%s:l.weight_scale' --json", tmt_bin(), st);
    assert_int_equal(status, 200);
    assert_true(json_equal(json_object_get(a, "observers"), json_object_get(c, "observers")));
    assert_string_equal(json_string_value(json_object_get(a, "tensor")), "l.weight_scale");
    json_decref(a);
    json_decref(c);
    a = http_json(port, "/api/v1/calibrate?tensor=nope", &status);
    assert_int_equal(status, 404);
    assert_non_null(strstr(json_string_value(json_object_get(a, "error")), "no tensor named 'nope'"));
    json_decref(a);
    kill(pid, SIGTERM);
    int ws = 0;
    waitpid(pid, &ws, 0);
    fclose(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_torch_observer_vectors),
        cmocka_unit_test(test_ort_calibration_vectors),
        cmocka_unit_test(test_percentile_clipping_hand_checked),
        cmocka_unit_test(test_samples_forms),
        cmocka_unit_test(test_shared_calibration_files),
        cmocka_unit_test(test_api_equals_cli),
        cmocka_unit_test(test_cancel_library),
        cmocka_unit_test(test_cli_interrupt),
        cmocka_unit_test(test_probes_beyond_float32),
        cmocka_unit_test(test_samples_messages),
        cmocka_unit_test(test_api_bad_requests),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
