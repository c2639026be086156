/* test_heatmap.c: heatmap tiles (library: raw and pyramid paths agree with brute force) and
** `tensormorph heatmap` (env TM_BIN): the PNG is decoded with libpng and its pixels checked
** against facts of the demo checkpoint. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensormorph.h"
#include "helpers/cli_run.h"
#include "helpers/fixture.h"
#include "helpers/vectors.h"

static char g_tmp[256];
static const char *g_bin;

#define run tmt_run

#define run_json(...) tmt_run_json(0, __VA_ARGS__)

typedef struct image { int w, h; uint8_t *rgb; } image;

static image load_png(const char *path) {
    image im = {0, 0, NULL};
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    uint8_t sig[8];
    assert_int_equal(fread(sig, 1, 8, fp), 8);
    assert_int_equal(png_sig_cmp(sig, 0, 8), 0);
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) fail_msg("libpng could not decode %s", path);
    png_init_io(png, fp);
    png_set_sig_bytes(png, 8);
    png_read_info(png, info);
    assert_int_equal(png_get_color_type(png, info), PNG_COLOR_TYPE_RGB);
    assert_int_equal(png_get_bit_depth(png, info), 8);
    im.w = (int)png_get_image_width(png, info);
    im.h = (int)png_get_image_height(png, info);
    im.rgb = malloc((size_t)im.w * (size_t)im.h * 3);
    for (int y = 0; y < im.h; y++) png_read_row(png, im.rgb + (size_t)y * (size_t)im.w * 3, NULL);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    fclose(fp);
    return im;
}

static const uint8_t *px(const image *im, int x, int y) { return im->rgb + ((size_t)y * (size_t)im->w + (size_t)x) * 3; }
static int px_is(const image *im, int x, int y, int r, int g, int b) {
    const uint8_t *p = px(im, x, y);
    return p[0] == r && p[1] == g && p[2] == b;
}
static int px_eq(const image *im, int x0, int y0, int x1, int y1) { return !memcmp(px(im, x0, y0), px(im, x1, y1), 3); }

static int setup_all(void **state) {
    (void)state;
    g_bin = tmt_bin();
    return tmt_demo_q4(g_tmp, sizeof g_tmp, "heatmap");
}

static int teardown_all(void **state) {
    (void)state;
    tmt_tmpdir_remove(g_tmp);
    return 0;
}

#define OPROJ "model.layers.1.self_attn.o_proj.weight"

/* the library: tiles at step 4 equal brute-force block statistics, with and without pyramid */
static void test_tiles_match_brute_force(void **state) {
    (void)state;
    char p[512];
    snprintf(p, sizeof p, "%s/demo", g_tmp);
    tm_file *f;
    tm_err err;
    assert_int_equal(tm_open(p, NULL, &f, &err), TM_OK);
    int64_t ti = tm_file_find(f, "model.layers.0.mlp.down_proj.weight");
    const tm_tensor *t = tm_file_tensor(f, ti);
    assert_non_null(t);
    int64_t R = t->shape[0], C = t->shape[1];
    float *all = malloc((size_t)(R * C) * sizeof(float));
    assert_int_equal(tm_tensor_read_f32(f, ti, 0, R * C, all, &err), TM_OK);
    tm_tiles *raw, *pyr;
    assert_int_equal(tm_tiles_open(f, ti, NULL, -1, TM_TILE_VALUE, -1, &raw, &err), TM_OK);
    assert_int_equal(tm_tiles_open(f, ti, NULL, -1, TM_TILE_VALUE, -1, &pyr, &err), TM_OK);
    assert_int_equal(tm_tiles_rows(raw), R);
    assert_int_equal(tm_tiles_cols(raw), C);
    /* exactly the bytes of the levels 4, 8, ... 1024 (3 floats per cell): base step 4, not 2 */
    uint64_t cells4 = (uint64_t)((R + 3) / 4) * (uint64_t)((C + 3) / 4), need = 0;
    for (int64_t s = 4; s <= 1024; s *= 2) need += (uint64_t)((R + s - 1) / s) * (uint64_t)((C + s - 1) / s) * 12;
    tm_tiles *tight;
    assert_int_equal(tm_tiles_open(f, ti, NULL, -1, TM_TILE_VALUE, -1, &tight, &err), TM_OK);
    assert_int_equal(tm_tiles_build_pyramid(tight, need - 1, &err), TM_OK);
    assert_int_equal(tm_tiles_pyramid_step(tight), 8);  /* one byte less: the next step up */
    tm_tiles_free(tight);
    assert_int_equal(tm_tiles_build_pyramid(pyr, need, &err), TM_OK);
    assert_int_equal(tm_tiles_pyramid_step(pyr), 4);
    assert_int_equal(tm_tiles_bytes(pyr), need);
    assert_true(need > cells4 * 12);
    for (int64_t step = 4; step <= 2048; step *= 2) {
        int W = 48, H = 40;
        int64_t o0 = step <= 64 ? 1 : 0;     /* starts one pixel in: offsets are honoured */
        tm_tile_req q = {step, o0, o0, W, H};
        float *a[4], *b[4];
        for (int k = 0; k < 4; k++) { a[k] = malloc(W * H * sizeof(float)); b[k] = malloc(W * H * sizeof(float)); }
        assert_int_equal(tm_tiles_read(raw, &q, a[0], a[1], a[2], a[3], &err), TM_OK);
        assert_int_equal(tm_tiles_read(pyr, &q, b[0], b[1], b[2], b[3], &err), TM_OK);
        int n_inside = 0;
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int o = y * W + x;
                int64_t r0 = (o0 + y) * step, c0 = (o0 + x) * step;
                if (r0 >= R || c0 >= C) {
                    assert_true(isnan(a[0][o]) && isnan(b[0][o]) && isnan(b[2][o]));
                    continue;
                }
                double mn = INFINITY, mx = -INFINITY, sum = 0;
                int64_t n = 0;
                for (int64_t r = r0; r < r0 + step && r < R; r++)
                    for (int64_t c = c0; c < c0 + step && c < C; c++) {
                        float v = all[r * C + c];
                        mn = fmin(mn, v); mx = fmax(mx, v); sum += v; n++;
                    }
                assert_true(a[0][o] == (float)mn && b[0][o] == (float)mn);
                assert_true(a[1][o] == (float)mx && b[1][o] == (float)mx);
                assert_true(fabs(a[2][o] - sum / n) <= 1e-6 * (fabs(mx) + fabs(mn)));
                assert_true(fabs(b[2][o] - sum / n) <= 1e-5 * (fabs(mx) + fabs(mn)));
                assert_true(a[3][o] == (float)fmax(fabs(mn), fabs(mx)));
                n_inside++;
            }
        assert_true(n_inside > 0);
        for (int k = 0; k < 4; k++) { free(a[k]); free(b[k]); }
    }
    /* whole-tensor range */
    double lo, hi, blo = INFINITY, bhi = -INFINITY;
    for (int64_t k = 0; k < R * C; k++) { blo = fmin(blo, all[k]); bhi = fmax(bhi, all[k]); }
    assert_int_equal(tm_tiles_range(raw, &lo, &hi, &err), TM_OK);
    assert_true(lo == (float)blo && hi == (float)bhi);
    assert_int_equal(tm_tiles_range(pyr, &lo, &hi, &err), TM_OK);
    assert_true(lo == (float)blo && hi == (float)bhi);
    /* refusals: bad step, oversize tile, groups of a dense tensor, error without reference */
    tm_tile_req bad = {3, 0, 0, 8, 8};
    float out[64];
    assert_int_equal(tm_tiles_read(raw, &bad, NULL, NULL, out, NULL, &err), TM_E_INVALID_ARG);
    tm_tile_req big = {1, 0, 0, TM_TILE_MAX_SIDE + 1, 1};
    assert_int_equal(tm_tiles_read(raw, &big, NULL, NULL, out, NULL, &err), TM_E_INVALID_ARG);
    tm_tile_req ok = {1, 0, 0, 8, 8};
    int64_t g[64];
    assert_int_equal(tm_tiles_groups(raw, &ok, g, &err), TM_E_INVALID_ARG);
    tm_tiles *e;
    assert_int_equal(tm_tiles_open(f, ti, NULL, -1, TM_TILE_ERROR_LSB, -1, &e, &err), TM_E_INVALID_ARG);
    tm_tiles_free(raw);
    tm_tiles_free(pyr);
    free(all);
    tm_close(f);
}

/* groups and error tiles of the int4 group:32 checkpoint */
static void test_tiles_groups_and_error(void **state) {
    (void)state;
    char p[512], r[512];
    snprintf(p, sizeof p, "%s/q4", g_tmp);
    snprintf(r, sizeof r, "%s/demo", g_tmp);
    tm_file *f, *ref;
    tm_err err;
    assert_int_equal(tm_open(p, NULL, &f, &err), TM_OK);
    assert_int_equal(tm_open(r, NULL, &ref, &err), TM_OK);
    int64_t ti = tm_file_find(f, OPROJ), ri = tm_file_find(ref, OPROJ);
    const tm_tensor *t = tm_file_tensor(f, ti);
    assert_non_null(t->quant);
    tm_tiles *tl;
    assert_int_equal(tm_tiles_open(f, ti, NULL, -1, TM_TILE_VALUE, -1, &tl, &err), TM_OK);
    tm_tile_req q = {1, 0, 0, 64, 2};
    int64_t g[128];
    assert_int_equal(tm_tiles_groups(tl, &q, g, &err), TM_OK);
    int64_t groups_per_row = (t->shape[1] + 31) / 32;
    for (int x = 0; x < 64; x++) {
        assert_int_equal(g[x], x / 32);
        assert_int_equal(g[64 + x], groups_per_row + x / 32);
    }
    tm_tiles_free(tl);
    tm_tiles *et;
    assert_int_equal(tm_tiles_open(f, ti, ref, ri, TM_TILE_ERROR_LSB, -1, &et, &err), TM_OK);
    tm_tile_req q1 = {1, 0, 0, 256, 8};
    float *mx = malloc(256 * 8 * sizeof(float));
    assert_int_equal(tm_tiles_read(et, &q1, NULL, mx, NULL, NULL, &err), TM_OK);
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 256; x++) {
            float v = mx[y * 256 + x];
            assert_true(v >= 0 && v <= 0.5f + 1e-3f);  /* plain rounding: within half an LSB */
            if (y == 3) assert_true(v == 0);            /* the all-zero row is exact */
            /* the same number the Scalar Inspector computes */
            if (y == 5 && x == 70) {
                tm_qelement qe;
                assert_int_equal(tm_qelement_get(f, ti, 5 * t->shape[1] + 70, &qe, &err), TM_OK);
                float rv;
                assert_int_equal(tm_tensor_read_f32(ref, ri, 5 * t->shape[1] + 70, 1, &rv, &err), TM_OK);
                assert_true(fabs(v - fabs(rv - qe.value) / qe.scale) < 1e-6);
            }
        }
    free(mx);
    assert_int_equal(tm_tiles_build_pyramid(et, 1 << 20, &err), TM_OK);
    double lo, hi;
    assert_int_equal(tm_tiles_range(et, &lo, &hi, &err), TM_OK);
    assert_true(lo == 0 && hi > 0.3 && hi <= 0.5 + 1e-3);
    tm_tiles_free(et);
    tm_close(f);
    tm_close(ref);
}

static void test_png_value_zero_row_is_white(void **state) {
    (void)state;
    json_t *d = run_json("%s heatmap %s/demo " OPROJ " -o %s/v.png --bare --json", g_bin, g_tmp, g_tmp);
    int up = (int)json_integer_value(json_object_get(d, "scale_up"));
    assert_int_equal(json_integer_value(json_object_get(d, "step")), 1);
    assert_int_equal(up, 4);  /* 256 x 256 in at most 1024 x 1024 */
    json_decref(d);
    char p[512];
    snprintf(p, sizeof p, "%s/v.png", g_tmp);
    image im = load_png(p);
    assert_int_equal(im.w, 1024);
    assert_int_equal(im.h, 1024);
    /* row 3 is all zero: every pixel of it is the zero colour, white */
    for (int y = 3 * up; y < 4 * up; y++)
        for (int x = 0; x < im.w; x++) assert_true(px_is(&im, x, y, 255, 255, 255));
    /* other rows are not: most of row 2 is coloured */
    int coloured = 0;
    for (int x = 0; x < im.w; x += up) coloured += !px_is(&im, x, 2 * up, 255, 255, 255);
    assert_true(coloured > 200);
    /* the element of largest |value| sits at an end of the diverging scale */
    tm_file *f;
    tm_err err;
    snprintf(p, sizeof p, "%s/demo", g_tmp);
    assert_int_equal(tm_open(p, NULL, &f, &err), TM_OK);
    int64_t ti = tm_file_find(f, OPROJ);
    float *all = malloc(256 * 256 * sizeof(float));
    assert_int_equal(tm_tensor_read_f32(f, ti, 0, 256 * 256, all, &err), TM_OK);
    int best = 0;
    for (int k = 1; k < 256 * 256; k++) if (fabsf(all[k]) > fabsf(all[best])) best = k;
    int bx = (best % 256) * up, by = (best / 256) * up;
    if (all[best] > 0) assert_true(px_is(&im, bx, by, 178, 24, 43));
    else assert_true(px_is(&im, bx, by, 33, 102, 172));
    /* sign decides the hue: a clearly positive element is red-ish, a negative one blue-ish */
    for (int k = 0; k < 256 * 256; k += 97) {
        if (fabsf(all[k]) < 0.3f * fabsf(all[best])) continue;
        const uint8_t *c = px(&im, (k % 256) * up, (k / 256) * up);
        if (all[k] > 0) assert_true(c[0] > c[2]);
        else assert_true(c[2] > c[0]);
    }
    free(all);
    tm_close(f);
    free(im.rgb);
}

static void test_png_groups_distinct_across_boundary(void **state) {
    (void)state;
    assert_int_equal(run(NULL, "%s heatmap %s/q4 " OPROJ " -o %s/g.png --mode groups --width 256 --height 256 --bare -q", g_bin, g_tmp, g_tmp), 0);
    char p[512];
    snprintf(p, sizeof p, "%s/g.png", g_tmp);
    image im = load_png(p);
    assert_int_equal(im.w, 256);
    for (int y = 0; y < 4; y++) {
        /* inside a group of 32 columns: one colour; across the boundary at 32: another */
        for (int x = 1; x < 32; x++) assert_true(px_eq(&im, 0, y, x, y));
        assert_false(px_eq(&im, 31, y, 32, y));
        assert_false(px_eq(&im, 63, y, 64, y));
        /* each row has its own groups */
        assert_false(px_eq(&im, 0, y, 0, y + 1));
    }
    free(im.rgb);
    /* enlarged 4x (the default size): a dark line on the last pixel before each unit boundary */
    assert_int_equal(run(NULL, "%s heatmap %s/q4 " OPROJ " -o %s/g4.png --mode groups --bare -q", g_bin, g_tmp, g_tmp), 0);
    snprintf(p, sizeof p, "%s/g4.png", g_tmp);
    im = load_png(p);
    assert_int_equal(im.w, 1024);
    assert_true(px_is(&im, 4 * 32 - 1, 1, 20, 20, 30));   /* column 31 | 32, above the row line */
    assert_false(px_is(&im, 4 * 32 - 2, 1, 20, 20, 30));
    assert_true(px_eq(&im, 0, 1, 4 * 32 - 2, 1));          /* inside the group: its colour */
    assert_true(px_is(&im, 10, 3, 20, 20, 30));            /* row 0 | row 1: other groups */
    free(im.rgb);
    /* a dense tensor has no groups */
    assert_int_equal(run(NULL, "%s heatmap %s/demo " OPROJ " -o %s/x.png --mode groups 2>/dev/null", g_bin, g_tmp, g_tmp), 2);
}

static void test_png_error_mode_and_strip(void **state) {
    (void)state;
    assert_int_equal(run(NULL, "%s heatmap %s/q4 " OPROJ " -o %s/e.png --mode error 2>/dev/null", g_bin, g_tmp, g_tmp), 2);
    json_t *d = run_json("%s heatmap %s/q4 " OPROJ " -o %s/e.png --mode error --ref %s/demo --width 256 --height 256 --bare --json", g_bin, g_tmp, g_tmp, g_tmp);
    json_t *rg = json_object_get(d, "range");
    double hi = json_number_value(json_array_get(rg, 1));
    assert_true(hi > 0.3 && hi <= 0.5 + 1e-3);
    json_decref(d);
    char p[512];
    snprintf(p, sizeof p, "%s/e.png", g_tmp);
    image im = load_png(p);
    for (int x = 0; x < 256; x++) assert_true(px_is(&im, x, 3, 0, 0, 4));  /* zero error */
    int nonzero = 0;
    for (int x = 0; x < 256; x++) nonzero += !px_is(&im, x, 2, 0, 0, 4);
    assert_true(nonzero > 200);
    free(im.rgb);
    /* a 1-D tensor is a strip; a downsampled view halves until it fits */
    /* a strip is stretched down to a 4:1 picture (a whole factor: 1024 x 256) */
    d = run_json("%s heatmap %s/demo model.norm.weight -o %s/n.png --bare --json", g_bin, g_tmp, g_tmp);
    assert_int_equal(json_integer_value(json_object_get(d, "rows")), 1);
    assert_int_equal(json_integer_value(json_object_get(d, "width")), 1024);
    assert_int_equal(json_integer_value(json_object_get(d, "height")), 256);
    json_decref(d);
    snprintf(p, sizeof p, "%s/n.png", g_tmp);
    im = load_png(p);
    assert_int_equal(im.w, 1024);
    assert_int_equal(im.h, 256);
    assert_true(px_eq(&im, 5, 0, 5, 255));
    free(im.rgb);
    /* --split 0: the 256 x 256 matrix as one 65536-element strip, 64 elements per pixel */
    d = run_json("%s heatmap %s/demo " OPROJ " -o %s/n.png --split 0 --bare --json", g_bin, g_tmp, g_tmp);
    assert_int_equal(json_integer_value(json_object_get(d, "rows")), 1);
    assert_int_equal(json_integer_value(json_object_get(d, "cols")), 65536);
    assert_int_equal(json_integer_value(json_object_get(d, "step")), 64);
    assert_int_equal(json_integer_value(json_object_get(d, "width")), 1024);
    json_decref(d);
    snprintf(p, sizeof p, "%s/n.png", g_tmp);
    im = load_png(p);
    assert_true(px_is(&im, 12, 0, 255, 255, 255));  /* pixel 12 = elements 768..831: row 3, all zero */
    assert_false(px_is(&im, 11, 0, 255, 255, 255));
    free(im.rgb);
    d = run_json("%s heatmap %s/demo model.layers.0.mlp.down_proj.weight -o %s/s.png --width 100 --height 100 --bare --json", g_bin, g_tmp, g_tmp);
    assert_int_equal(json_integer_value(json_object_get(d, "step")), 8);  /* 256 x 688 */
    assert_int_equal(json_integer_value(json_object_get(d, "width")), 86);
    assert_int_equal(json_integer_value(json_object_get(d, "height")), 32);
    json_decref(d);
}


/* The frame (no --bare): title, ticks, colour bar; the plot is the --bare image at plot.x/y. */
static void test_png_frame(void **state) {
    (void)state;
    json_t *d = run_json("%s heatmap %s/demo " OPROJ " -o %s/f.png --json", g_bin, g_tmp, g_tmp);
    json_t *pl = json_object_get(d, "plot");
    int x0 = (int)json_integer_value(json_object_get(pl, "x")), y0 = (int)json_integer_value(json_object_get(pl, "y"));
    int pw = (int)json_integer_value(json_object_get(pl, "width")), ph = (int)json_integer_value(json_object_get(pl, "height"));
    assert_int_equal(pw, 1024);
    assert_int_equal(ph, 1024);
    assert_false(json_is_true(json_object_get(d, "bare")));
    json_decref(d);
    char p[512];
    snprintf(p, sizeof p, "%s/f.png", g_tmp);
    image f = load_png(p);
    snprintf(p, sizeof p, "%s/v.png", g_tmp);
    assert_int_equal(run(NULL, "%s heatmap %s/demo " OPROJ " -o %s/v.png --bare -q", g_bin, g_tmp, g_tmp), 0);
    image b = load_png(p);
    assert_true(f.w > x0 + pw && f.h > y0 + ph && x0 > 0 && y0 > 0);
    /* the plot is the bare picture, pixel for pixel */
    for (int y = 0; y < ph; y += 7)
        for (int x = 0; x < pw; x += 5)
            assert_int_equal(memcmp(px(&f, x0 + x, y0 + y), px(&b, x, y), 3), 0);
    /* the title: dark text in the top margin; row tick "0" left of the plot */
    int ink = 0;
    for (int y = 0; y < y0 - 24; y++)
        for (int x = 0; x < f.w / 2; x++) ink += px_is(&f, x, y, 29, 35, 48);
    assert_true(ink > 100);
    int tick = 0;
    for (int y = y0; y < y0 + 20; y++)
        for (int x = 0; x < x0; x++) tick += px_is(&f, x, y, 29, 35, 48);
    assert_true(tick > 10);
    /* the colour bar right of the plot: red (+max) at the top, blue (-max) at the bottom,
    ** white (0) in the middle */
    int bx = -1;
    for (int x = x0 + pw + 2; x < f.w && bx < 0; x++) if (px_is(&f, x, y0, 178, 24, 43)) bx = x;
    assert_true(bx > 0);
    assert_true(px_is(&f, bx + 4, y0 + ph - 1, 33, 102, 172));
    const uint8_t *mid = px(&f, bx + 4, y0 + ph / 2);
    assert_true(mid[0] > 240 && mid[1] > 240 && mid[2] > 240);
    free(f.rgb);
    free(b.rgb);
}

/* The matrix of an N-D weight is [dim 0, the rest] (conv [out, in*kh*kw]), and its picture has
** a sane aspect ratio: the PaddleOCR recognizer's [480, 480, 1, 1] conv is 480 x 480 (a square
** PNG), its [120, 480, 1, 1] one is 4:1. */
static void test_png_conv_shape(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char m[1024];
    snprintf(m, sizeof m, "%s/models/onnx/npm/paddleocr/ch_PP-OCRv4_rec_infer.onnx", tmv_shared_dir());
    json_t *d = run_json("%s heatmap %s conv2d_180.w_0 -o %s/c.png --bare --json", g_bin, m, g_tmp);
    assert_int_equal(json_integer_value(json_object_get(d, "split")), 1);
    assert_int_equal(json_integer_value(json_object_get(d, "rows")), 480);
    assert_int_equal(json_integer_value(json_object_get(d, "cols")), 480);
    assert_int_equal(json_integer_value(json_object_get(d, "width")), json_integer_value(json_object_get(d, "height")));
    json_decref(d);
    char p[512];
    snprintf(p, sizeof p, "%s/c.png", g_tmp);
    image im = load_png(p);
    assert_int_equal(im.w, 960);
    assert_int_equal(im.h, 960);
    free(im.rgb);
    d = run_json("%s heatmap %s conv2d_117.w_0 -o %s/c.png --bare --json", g_bin, m, g_tmp);
    assert_int_equal(json_integer_value(json_object_get(d, "rows")), 120);
    assert_int_equal(json_integer_value(json_object_get(d, "cols")), 480);
    int w = (int)json_integer_value(json_object_get(d, "width")), h = (int)json_integer_value(json_object_get(d, "height"));
    assert_true(w <= 4 * h && h <= w);
    json_decref(d);
    /* a tall thin one: --split 3 makes [480*480*1, 1] -> stretched across to at most 4:1 */
    d = run_json("%s heatmap %s conv2d_117.w_0 -o %s/c.png --split 3 --bare --json", g_bin, m, g_tmp);
    w = (int)json_integer_value(json_object_get(d, "width"));
    h = (int)json_integer_value(json_object_get(d, "height"));
    assert_int_equal(json_integer_value(json_object_get(d, "cols")), 1);
    assert_true(h <= 4 * w);
    json_decref(d);
}

static void test_png_written_atomically(void **state) {
    (void)state;
    /* a missing directory: I/O error, nothing written */
    assert_int_equal(run(NULL, "%s heatmap %s/demo " OPROJ " -o %s/nodir/x.png 2>/dev/null", g_bin, g_tmp, g_tmp), 4);
    assert_int_equal(run(NULL, "%s heatmap %s/demo " OPROJ " -o %s/v.png --mode rainbow 2>/dev/null", g_bin, g_tmp, g_tmp), 2);
    assert_int_equal(run(NULL, "%s heatmap %s/demo no.such.tensor -o %s/v.png 2>/dev/null", g_bin, g_tmp, g_tmp), 2);
    DIR *dir = opendir(g_tmp);
    assert_non_null(dir);
    struct dirent *de;
    while ((de = readdir(dir))) assert_null(strstr(de->d_name, ".tmp."));
    closedir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiles_match_brute_force),
        cmocka_unit_test(test_tiles_groups_and_error),
        cmocka_unit_test(test_png_value_zero_row_is_white),
        cmocka_unit_test(test_png_groups_distinct_across_boundary),
        cmocka_unit_test(test_png_error_mode_and_strip),
        cmocka_unit_test(test_png_frame),
        cmocka_unit_test(test_png_conv_shape),
        cmocka_unit_test(test_png_written_atomically),
    };
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
