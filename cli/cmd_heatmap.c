/* cmd_heatmap.c: `tensormorph heatmap PATH TENSOR -o FILE.png`: the Heatmap view as a PNG
** (libpng), from the library's tiles (explore.h). */
#include "cli.h"
#include "heatmap_decor.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const cli_opt opts_heatmap[] = {
    CLI_OPT_OUTPUT("FILE", "the PNG to write (atomically: temp file, fsync, rename)"),
    {"mode", 0, "MODE", 0, "value (diverging, default), abs (|value|), groups (channel/group/block of each element), error (|ref - dequantized| in LSB; needs --ref)"},
    CLI_OPT_REF("full-precision checkpoint, for --mode error (its tensor of the same name, else P.weight for P.qweight, X for X_quantized)"),
    {"width", 0, "W", 0, "most pixels across, 1..4096 (default 1024)"},
    {"height", 0, "H", 0, "most pixels down, 1..4096 (default 1024)"},
    {"split", 0, "K", 0, "rows = product of the first K dims, columns = the rest (default: 1 for an N-D weight, as the framework's matrix view: conv [out, in*kh*kw]; 0 for 1-D)"},
    {"bare", 0, NULL, 0, "the heatmap pixels only: no title, axis ticks and labels, colour bar"},
    CLI_OPT_END,
};
const char details_heatmap[] =
    "The tensor is drawn as a matrix: a 1-D tensor as a strip, an N-D tensor as 2-D (--split).\n"
    "When it is larger than WxH, each pixel summarises a power-of-two square of elements: value\n"
    "mode shows their mean on a blue-white-red scale symmetric about zero (zero is white), abs\n"
    "mode the largest |value| (black is zero), error mode the largest |ref - dequantized| in\n"
    "LSB (the element's scale), groups mode colours each pixel by the quantization parameter\n"
    "(channel, group or block) of its first element, neighbouring units in distinct colours,\n"
    "with a dark line between units when the image is enlarged 4x or more.\n"
    "A small tensor is enlarged by a whole factor (at most 16); a long thin matrix is stretched\n"
    "across its short side by a whole factor so the picture is at most 4:1. Unless --bare, the\n"
    "PNG has a title (tensor, shape, scheme, mode), row and column ticks in element indices, the\n"
    "axes' names and a colour bar with its numbers and unit. --json prints the geometry (the\n"
    "PNG's width and height, the plot's place in it) and the range the colours span.";

enum { MODE_VALUE, MODE_ABS, MODE_GROUPS, MODE_ERROR };

static void px_set(uint8_t *p, int r, int g, int b) { p[0] = (uint8_t)r; p[1] = (uint8_t)g; p[2] = (uint8_t)b; }

/* Diverging: -1 blue, 0 white, +1 red. */
static void col_diverging(double t, uint8_t *p) {
    if (isnan(t)) { px_set(p, 96, 96, 96); return; }
    if (t > 1) t = 1;
    if (t < -1) t = -1;
    const double *e = t >= 0 ? (const double[]){178, 24, 43} : (const double[]){33, 102, 172};
    double a = fabs(t);
    px_set(p, (int)lround(255 + (e[0] - 255) * a), (int)lround(255 + (e[1] - 255) * a),
           (int)lround(255 + (e[2] - 255) * a));
}

/* Sequential: 0 black-purple .. 1 pale yellow. */
static void col_sequential(double t, uint8_t *p) {
    static const double stops[5][3] = {{0, 0, 4}, {87, 16, 110}, {188, 55, 84}, {249, 142, 9}, {252, 255, 164}};
    if (isnan(t)) { px_set(p, 96, 96, 96); return; }
    if (t < 0) t = 0;
    if (t > 1) t = 1;
    double x = t * 4;
    int k = (int)x;
    if (k > 3) k = 3;
    double f = x - k;
    px_set(p, (int)lround(stops[k][0] + (stops[k + 1][0] - stops[k][0]) * f),
           (int)lround(stops[k][1] + (stops[k + 1][1] - stops[k][1]) * f),
           (int)lround(stops[k][2] + (stops[k + 1][2] - stops[k][2]) * f));
}

/* Groups: hue steps by the golden ratio per unit, so neighbouring units differ strongly. */
static void col_group(int64_t id, uint8_t *p) {
    if (id < 0) { px_set(p, 96, 96, 96); return; }
    double h = fmod((double)id * 0.6180339887498949, 1.0) * 6.0;
    double s = 0.65, l = (id % 2) ? 0.45 : 0.62;
    double c = (1 - fabs(2 * l - 1)) * s, x = c * (1 - fabs(fmod(h, 2.0) - 1)), m = l - c / 2;
    double r = 0, g = 0, b = 0;
    switch ((int)h) {
    case 0: r = c; g = x; break;
    case 1: r = x; g = c; break;
    case 2: g = c; b = x; break;
    case 3: g = x; b = c; break;
    case 4: r = x; b = c; break;
    default: r = c; b = x; break;
    }
    px_set(p, (int)lround((r + m) * 255), (int)lround((g + m) * 255), (int)lround((b + m) * 255));
}

/* The colour bar: fraction f (0 bottom, 1 top) of the mode's range. */
static void bar_colour(const void *ud, double f, uint8_t c[3]) {
    int mode = *(const int *)ud;
    if (mode == MODE_VALUE) col_diverging(2 * f - 1, c);
    else if (mode == MODE_GROUPS) col_group((int64_t)floor(f * 7.999), c);
    else col_sequential(f, c);
}

typedef struct membuf { uint8_t *p; size_t n, cap; int failed; } membuf;

static void png_mem_write(png_structp png, png_bytep data, png_size_t n) {
    membuf *m = png_get_io_ptr(png);
    if (m->failed) return;
    if (m->n + n > m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 65536;
        while (nc < m->n + n) nc *= 2;
        uint8_t *q = realloc(m->p, nc);
        if (!q) { m->failed = 1; return; }
        m->p = q;
        m->cap = nc;
    }
    memcpy(m->p + m->n, data, n);
    m->n += n;
}
static void png_mem_flush(png_structp png) { (void)png; }

/* Encode rgb (w*h*3) as PNG into m. Returns 0 ok. */
static int png_encode(const uint8_t *rgb, int w, int h, membuf *m) {
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    if (!png) return -1;
    png_infop info = png_create_info_struct(png);
    if (!info) { png_destroy_write_struct(&png, NULL); return -1; }
    if (setjmp(png_jmpbuf(png))) { png_destroy_write_struct(&png, &info); return -1; }
    png_set_write_fn(png, m, png_mem_write, png_mem_flush);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < h; y++) png_write_row(png, (png_const_bytep)(rgb + (size_t)y * (size_t)w * 3));
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return m->failed ? -1 : 0;
}

/* Write atomically: "<path>.tmp.<pid>", fsync, rename. Returns 0 ok, else errno. */
static int write_atomic(const char *path, const void *data, size_t n) {
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp) return ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return errno;
    const uint8_t *p = data;
    size_t left = n;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno; close(fd); unlink(tmp); return e;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) { int e = errno; unlink(tmp); return e; }
    if (rename(tmp, path) != 0) { int e = errno; unlink(tmp); return e; }
    return 0;
}

/* --width / --height: 1..4096 pixels. */
static int parse_dim(const cli_cmd *cmd, const cli_args *a, const char *name, int def, int *out) {
    long x;
    int rc = cli_opt_long(cmd, a, name, def, 1, 4096, &x);
    *out = (int)x;
    return rc;
}

int cmd_heatmap(const cli_cmd *cmd, cli_args *a) {
    const char *outp = cli_get(a, "output");
    if (!outp) return cli_usage_error(cmd, "-o FILE.png is required");
    const char *ms = cli_get(a, "mode");
    int mode = MODE_VALUE;
    if (ms) {
        if (!strcmp(ms, "value")) mode = MODE_VALUE;
        else if (!strcmp(ms, "abs")) mode = MODE_ABS;
        else if (!strcmp(ms, "groups")) mode = MODE_GROUPS;
        else if (!strcmp(ms, "error")) mode = MODE_ERROR;
        else return cli_usage_error(cmd, "--mode must be value, abs, groups or error, got '%s'", ms);
    }
    if (mode == MODE_ERROR && !cli_get(a, "ref")) return cli_usage_error(cmd, "--mode error needs --ref REF");
    int W, H, rc;
    if ((rc = parse_dim(cmd, a, "width", 1024, &W)) || (rc = parse_dim(cmd, a, "height", 1024, &H))) return rc;
    int split = -1;
    if (cli_get(a, "split")) {
        char *end;
        long v = strtol(cli_get(a, "split"), &end, 10);
        if (*end || v < 0 || v > TM_MAX_DIMS) return cli_usage_error(cmd, "--split must be an integer in [0, %d]", TM_MAX_DIMS);
        split = (int)v;
    }
    tm_file *f, *r = NULL;
    if ((rc = cli_open(a->pos[0], &f))) return rc;
    int64_t ti = tm_file_find(f, a->pos[1]);
    const tm_tensor *t = tm_file_tensor(f, ti);
    if (!t) {
        fprintf(stderr, "tensormorph: %s: no tensor named '%s'\n", a->pos[0], a->pos[1]);
        tm_close(f);
        return EXIT_USAGE;
    }
    if ((mode == MODE_GROUPS || mode == MODE_ERROR) && !t->quant) {
        fprintf(stderr, "tensormorph: tensor '%s' is not quantized: --mode %s needs a quantized tensor\n", t->name, ms);
        tm_close(f);
        return EXIT_USAGE;
    }
    int64_t ri = -1;
    if (mode == MODE_ERROR) {
        if ((rc = cli_open(cli_get(a, "ref"), &r))) { tm_close(f); return rc; }
        tm_tensor_pair rp; /* same name, P.qweight -> P.weight, X_quantized -> X, HF <-> GGUF */
        ri = tm_ref_pair(r, f, ti, &rp);
        const tm_tensor *rt = tm_file_tensor(r, ri);
        if (!rt || rt->n_elems != t->n_elems) {
            fprintf(stderr, "tensormorph: %s: no tensor '%s' with %" PRId64 " elements%s\n", cli_get(a, "ref"),
                    rt ? rt->name : t->name, t->n_elems, rt ? "" : " (nor its source name: P.weight for "
                    "P.qweight, X for X_quantized)");
            tm_close(r); tm_close(f);
            return EXIT_USAGE;
        }
    }
    tm_err err;
    tm_tiles *tl;
    tm_status s = tm_tiles_open(f, ti, r, ri, mode == MODE_ERROR ? TM_TILE_ERROR_LSB : TM_TILE_VALUE, split, &tl, &err);
    if (s) { rc = s == TM_E_INVALID_ARG ? (fprintf(stderr, "tensormorph: %s\n", err.msg), EXIT_USAGE) : cli_fail(s, &err); tm_close(r); tm_close(f); return rc; }
    int64_t rows = tm_tiles_rows(tl), cols = tm_tiles_cols(tl);
    if (rows == 0 || cols == 0) {
        fprintf(stderr, "tensormorph: tensor '%s' has no elements to draw\n", t->name);
        tm_tiles_free(tl); tm_close(r); tm_close(f);
        return EXIT_USAGE;
    }
    int64_t step = 1;
    while ((cols + step - 1) / step > W || (rows + step - 1) / step > H) step *= 2;
    int pw = (int)((cols + step - 1) / step), ph = (int)((rows + step - 1) / step);
    int up = 1;
    if (step == 1) {
        up = W / pw < H / ph ? W / pw : H / ph;
        if (up > 16) up = 16;
        if (up < 1) up = 1;
    }
    int vrep = up;
    /* a sane aspect ratio: stretch the short side by a whole factor to at most 4:1 */
    if ((int64_t)pw * up > 4 * (int64_t)ph * vrep) {
        int64_t v = ((int64_t)pw * up + 4 * (int64_t)ph - 1) / (4 * (int64_t)ph);
        if (v * ph > H) v = H / ph > 0 ? H / ph : 1;
        if (v > vrep) vrep = (int)v;
    } else if ((int64_t)ph * vrep > 4 * (int64_t)pw * up) {
        int64_t u = ((int64_t)ph * vrep + 4 * (int64_t)pw - 1) / (4 * (int64_t)pw);
        if (u * pw > W) u = W / pw > 0 ? W / pw : 1;
        if (u > up) up = (int)u;
    }
    size_t npx = (size_t)pw * (size_t)ph;
    float *val = mode != MODE_GROUPS ? malloc(npx * sizeof(float)) : NULL;
    int64_t *gid = mode == MODE_GROUPS ? malloc(npx * sizeof(int64_t)) : NULL;
    int iw = pw * up, ih = ph * vrep;
    uint8_t *rgb = malloc((size_t)iw * (size_t)ih * 3);
    float *tile = malloc((size_t)TM_TILE_MAX_SIDE * TM_TILE_MAX_SIDE * sizeof(float));
    int64_t *tileg = mode == MODE_GROUPS ? malloc((size_t)TM_TILE_MAX_SIDE * TM_TILE_MAX_SIDE * sizeof(int64_t)) : NULL;
    if ((mode != MODE_GROUPS && !val) || !rgb || !tile || (mode == MODE_GROUPS && (!gid || !tileg))) {
        s = TM_E_NOMEM;
        err.code = s;
        err.sys_errno = 0;
        snprintf(err.msg, sizeof err.msg, "out of memory");
    }
    for (int y0 = 0; !s && y0 < ph; y0 += TM_TILE_MAX_SIDE)
        for (int x0 = 0; !s && x0 < pw; x0 += TM_TILE_MAX_SIDE) {
            tm_tile_req q = {step, x0, y0, pw - x0 < TM_TILE_MAX_SIDE ? pw - x0 : TM_TILE_MAX_SIDE,
                             ph - y0 < TM_TILE_MAX_SIDE ? ph - y0 : TM_TILE_MAX_SIDE};
            if (mode == MODE_GROUPS) s = tm_tiles_groups(tl, &q, tileg, &err);
            else s = tm_tiles_read(tl, &q, NULL, mode == MODE_ERROR ? tile : NULL, mode == MODE_VALUE ? tile : NULL,
                                   mode == MODE_ABS ? tile : NULL, &err);
            for (int y = 0; !s && y < q.height; y++)
                for (int x = 0; x < q.width; x++) {
                    size_t o = (size_t)(y0 + y) * (size_t)pw + (size_t)(x0 + x), k = (size_t)y * (size_t)q.width + (size_t)x;
                    if (mode == MODE_GROUPS) gid[o] = tileg[k];
                    else val[o] = tile[k];
                }
        }
    double lo = INFINITY, hi = -INFINITY;
    if (!s && mode != MODE_GROUPS)
        for (size_t k = 0; k < npx; k++)
            if (isfinite(val[k])) { if (val[k] < lo) lo = val[k]; if (val[k] > hi) hi = val[k]; }
    if (!(lo <= hi)) lo = hi = 0;
    double span = mode == MODE_VALUE ? fmax(fabs(lo), fabs(hi)) : hi;
    if (mode != MODE_VALUE) lo = 0;
    int64_t gmax = 0;
    for (int y = 0; !s && y < ih; y++)
        for (int x = 0; x < iw; x++) {
            size_t o = (size_t)(y / vrep) * (size_t)pw + (size_t)(x / up);
            uint8_t *p = rgb + ((size_t)y * (size_t)iw + (size_t)x) * 3;
            if (mode == MODE_GROUPS) {
                /* enlarged enough to spare a pixel: a dark line where the unit changes */
                int px = x / up, py = y / vrep;
                int edge_r = up >= 4 && x % up == up - 1 && px + 1 < pw && gid[o + 1] != gid[o];
                int edge_b = vrep >= 4 && y % vrep == vrep - 1 && py + 1 < ph && gid[o + (size_t)pw] != gid[o];
                if (gid[o] > gmax) gmax = gid[o];
                if (edge_r || edge_b) px_set(p, 20, 20, 30);
                else col_group(gid[o], p);
            }
            else if (mode == MODE_VALUE) col_diverging(span > 0 ? val[o] / span : (isnan(val[o]) ? NAN : 0), p);
            else col_sequential(span > 0 ? val[o] / span : (isnan(val[o]) ? NAN : 0), p);
        }
    /* the frame: title, ticks, axis names, colour bar (heatmap_decor.c) */
    int bare = cli_get(a, "bare") != NULL, ow = iw, oh = ih, plot_x = 0, plot_y = 0;
    uint8_t *img = rgb;
    if (!s && !bare) {
        char title[512], sub[256], rl[160], cl[160], shape[96];
        cli_shape_str(t->ndim, t->shape, shape, sizeof shape);
        char q[96] = "dense";
        if (t->quant) cli_quant_str(f, t, q, sizeof q);
        snprintf(title, sizeof title, "%s  %s %s  %s", t->name, shape, tm_dtype_get(t->dtype)->name, q);
        int sp = tm_tiles_split(tl);
        snprintf(rl, sizeof rl, sp == 0 ? "row" : sp == 1 ? "row (dim 0)" : "row (dims 0..%d)", sp - 1);
        snprintf(cl, sizeof cl, sp >= t->ndim ? "column" : sp == t->ndim - 1 ? "column (dim %d)" : "column (dims %d..%d)", sp, t->ndim - 1);
        const char *what = mode == MODE_VALUE ? "mean value per pixel, white = 0" : mode == MODE_ABS ? "largest |value| per pixel"
                         : mode == MODE_ERROR ? "largest |ref - dequantized| per pixel, in LSB" : "quantization unit (channel/group/block) of each pixel";
        if (step > 1) snprintf(sub, sizeof sub, "%s; %" PRId64 "x%" PRId64 " elements per pixel", what, step, step);
        else snprintf(sub, sizeof sub, "%s; %dx%d pixels per element", what, up, vrep);
        cli_heat_decor dc = {title, sub, rl, cl, mode == MODE_VALUE ? "value" : mode == MODE_ABS ? "|value|" : mode == MODE_ERROR ? "LSB" : "unit id",
                             rows, cols, step, up, vrep, mode == MODE_VALUE ? -span : 0, mode == MODE_GROUPS ? (double)gmax : span, mode == MODE_GROUPS,
                             bar_colour, &mode};
        img = cli_heat_decorate(rgb, iw, ih, &dc, &ow, &oh, &plot_x, &plot_y);
        if (!img) { s = TM_E_NOMEM; err.code = s; err.sys_errno = 0; snprintf(err.msg, sizeof err.msg, "out of memory"); }
    }
    membuf m = {0};
    if (!s && png_encode(img, ow, oh, &m)) {
        fprintf(stderr, "tensormorph: cannot encode the PNG\n");
        rc = EXIT_INTERNAL;
    } else if (!s) {
        int e = write_atomic(outp, m.p, m.n);
        if (e) { fprintf(stderr, "tensormorph: %s: %s\n", outp, strerror(e)); rc = EXIT_IO; }
    } else {
        rc = cli_fail(s, &err);
    }
    if (!rc && g_cli.json) {
        json_t *d = cli_json_doc("heatmap");
        json_object_set_new(d, "tensor", json_string(t->name));
        cli_json_set_label(d, f, t);
        json_object_set_new(d, "output", json_string(outp));
        json_object_set_new(d, "mode", json_string(ms ? ms : "value"));
        if (r) json_object_set_new(d, "ref_tensor", json_string(tm_file_tensor(r, ri)->name));
        json_object_set_new(d, "rows", json_integer(rows));
        json_object_set_new(d, "cols", json_integer(cols));
        json_object_set_new(d, "step", json_integer(step));
        json_object_set_new(d, "scale_up", json_integer(up));
        json_object_set_new(d, "scale_up_rows", json_integer(vrep));
        json_object_set_new(d, "split", json_integer(tm_tiles_split(tl)));
        json_object_set_new(d, "width", json_integer(ow));   /* the PNG */
        json_object_set_new(d, "height", json_integer(oh));
        json_object_set_new(d, "bare", json_boolean(bare));
        json_t *pl = json_object();                          /* the heatmap pixels in it */
        json_object_set_new(pl, "x", json_integer(plot_x));
        json_object_set_new(pl, "y", json_integer(plot_y));
        json_object_set_new(pl, "width", json_integer(iw));
        json_object_set_new(pl, "height", json_integer(ih));
        json_object_set_new(d, "plot", pl);
        json_t *rg = json_array();
        json_array_append_new(rg, cli_json_num(mode == MODE_VALUE ? -span : lo));
        json_array_append_new(rg, cli_json_num(mode == MODE_GROUPS ? NAN : span));
        json_object_set_new(d, "range", mode == MODE_GROUPS ? (json_decref(rg), json_null()) : rg);
        cli_json_print(d);
    } else if (!rc && !g_cli.quiet) {
        fprintf(stderr, "heatmap: %s: %" PRId64 "x%" PRId64 ", %" PRId64 " element(s) per pixel side -> %s (%dx%d)\n",
                t->name, rows, cols, step, outp, ow, oh);
    }
    free(m.p);
    if (img != rgb) free(img);
    free(val); free(gid); free(rgb); free(tile); free(tileg);
    tm_tiles_free(tl);
    tm_close(r);
    tm_close(f);
    return rc;
}
