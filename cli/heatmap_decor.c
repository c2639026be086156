/* heatmap_decor.c: the frame of a heatmap PNG (cmd_heatmap.c, left out with --bare): a title,
** row ticks on the left and column ticks below with the axes' labels, and a colour bar on the
** right with its numbers and unit. The plot itself is copied in unchanged. */
#include "heatmap_decor.h"
#include "heatmap_text.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t INK[3] = {29, 35, 48}, MUTED[3] = {100, 106, 120};

static void fill(uint8_t *rgb, int w, int h, int x, int y, int fw, int fh, const uint8_t c[3]) {
    for (int yy = y; yy < y + fh; yy++)
        for (int xx = x; xx < x + fw; xx++) {
            if (xx < 0 || yy < 0 || xx >= w || yy >= h) continue;
            uint8_t *p = rgb + ((size_t)yy * (size_t)w + (size_t)xx) * 3;
            p[0] = c[0]; p[1] = c[1]; p[2] = c[2];
        }
}

/* A tick spacing of 1, 2 or 5 x 10^k elements, so that ticks lie at least min_px apart when one
** element is px_per_elem pixels. */
static int64_t nice_step(int64_t n, double px_per_elem, int min_px) {
    int64_t s = 1;
    for (;;) {
        for (int m = 0; m < 3; m++) {
            int64_t c = s * (m == 0 ? 1 : m == 1 ? 2 : 5);
            if ((double)c * px_per_elem >= min_px || c >= n) return c;
        }
        s *= 10;
    }
}

/* Numbers on the colour bar: 4 significant digits. */
static void fmt_num(char *b, size_t n, double v) {
    if (v == 0) snprintf(b, n, "0");
    else snprintf(b, n, "%.4g", v);
}

uint8_t *cli_heat_decorate(const uint8_t *plot, int pw, int ph, const cli_heat_decor *d, int *out_w, int *out_h,
                           int *plot_x, int *plot_y) {
    const int k = pw >= 400 || ph >= 400 ? 2 : 1;   /* font scale */
    const int lh = 10 * k, pad = 8 * k, tick = 4 * k;
    char buf[64];
    /* left margin: the widest row label */
    snprintf(buf, sizeof buf, "%" PRId64, d->rows > 0 ? d->rows - 1 : 0);
    int left = pad + cli_text_width(buf, k) + tick + 2 * k;
    int top = pad + 3 * lh + k * 2;
    /* colour bar: 14k wide, numbers to its right */
    char lo[32], hi[32], mid[32];
    fmt_num(lo, sizeof lo, d->lo);
    fmt_num(hi, sizeof hi, d->hi);
    fmt_num(mid, sizeof mid, d->integer ? floor((d->lo + d->hi) / 2) : (d->lo + d->hi) / 2);
    int numw = cli_text_width(lo, k);
    if (cli_text_width(hi, k) > numw) numw = cli_text_width(hi, k);
    if (cli_text_width(mid, k) > numw) numw = cli_text_width(mid, k);
    int unitw = cli_text_width(d->unit, k);
    int barw = 14 * k, right = pad + barw + tick + 2 * k + numw + pad;
    if (pad + unitw + pad > right) right = pad + unitw + pad;
    int bottom = tick + 2 * k + lh + lh + pad;
    int W = left + pw + right, H = top + ph + bottom;
    int tw = cli_text_width(d->title, k), sw = cli_text_width(d->subtitle, k);
    if (pad + tw + pad > W) W = pad + tw + pad;
    if (pad + sw + pad > W) W = pad + sw + pad;
    int bar_h = ph < 96 * k ? 96 * k : ph;
    if (top + bar_h + bottom > H) H = top + bar_h + bottom;
    uint8_t *rgb = malloc((size_t)W * (size_t)H * 3);
    if (!rgb) return NULL;
    memset(rgb, 255, (size_t)W * (size_t)H * 3);
    cli_text_draw(rgb, W, H, pad, pad, d->title, k, INK);
    cli_text_draw(rgb, W, H, pad, pad + lh, d->subtitle, k, MUTED);
    for (int y = 0; y < ph; y++)
        memcpy(rgb + ((size_t)(top + y) * (size_t)W + (size_t)left) * 3, plot + (size_t)y * (size_t)pw * 3, (size_t)pw * 3);
    /* a frame round the plot */
    fill(rgb, W, H, left - 1, top - 1, pw + 2, 1, MUTED);
    fill(rgb, W, H, left - 1, top + ph, pw + 2, 1, MUTED);
    fill(rgb, W, H, left - 1, top - 1, 1, ph + 2, MUTED);
    fill(rgb, W, H, left + pw, top - 1, 1, ph + 2, MUTED);
    /* row ticks: element r at pixel top + r / step * vrep */
    double ppr = (double)d->vrep / (double)d->step, ppc = (double)d->up / (double)d->step;
    int64_t rs = nice_step(d->rows, ppr, 3 * lh);
    for (int64_t r = 0; r < d->rows; r += rs) {
        int y = top + (int)floor((double)r * ppr);
        fill(rgb, W, H, left - tick - 1, y, tick, k, INK);
        snprintf(buf, sizeof buf, "%" PRId64, r);
        cli_text_draw(rgb, W, H, left - tick - 2 * k - cli_text_width(buf, k), y - (r ? 3 * k : 0), buf, k, INK);
    }
    /* column ticks */
    snprintf(buf, sizeof buf, "%" PRId64, d->cols > 0 ? d->cols - 1 : 0);
    int64_t cs = nice_step(d->cols, ppc, cli_text_width(buf, k) + 4 * lh / 3);
    for (int64_t c = 0; c < d->cols; c += cs) {
        int x = left + (int)floor((double)c * ppc);
        fill(rgb, W, H, x, top + ph + 1, k, tick, INK);
        snprintf(buf, sizeof buf, "%" PRId64, c);
        int bw = cli_text_width(buf, k);
        cli_text_draw(rgb, W, H, c ? x - bw / 2 : x, top + ph + tick + 2 * k, buf, k, INK);
    }
    /* axis labels: columns centred below, rows above the row ticks */
    int cw = cli_text_width(d->col_label, k);
    cli_text_draw(rgb, W, H, left + (pw - cw) / 2 > 0 ? left + (pw - cw) / 2 : 0, top + ph + tick + 2 * k + lh, d->col_label, k, MUTED);
    cli_text_draw(rgb, W, H, pad, top - lh, d->row_label, k, MUTED);
    /* the colour bar: bottom = lo, top = hi */
    int bx = left + pw + pad;
    cli_text_draw(rgb, W, H, bx, top - lh, d->unit, k, MUTED);
    for (int y = 0; y < bar_h; y++) {
        uint8_t c[3];
        d->bar(d->bar_ud, 1.0 - (double)y / (double)(bar_h > 1 ? bar_h - 1 : 1), c);
        fill(rgb, W, H, bx, top + y, barw, 1, c);
    }
    fill(rgb, W, H, bx - 1, top - 1, barw + 2, 1, MUTED);
    fill(rgb, W, H, bx - 1, top + bar_h, barw + 2, 1, MUTED);
    fill(rgb, W, H, bx - 1, top - 1, 1, bar_h + 2, MUTED);
    fill(rgb, W, H, bx + barw, top - 1, 1, bar_h + 2, MUTED);
    int nx = bx + barw + tick + 2 * k;
    fill(rgb, W, H, bx + barw, top, tick, k, INK);
    cli_text_draw(rgb, W, H, nx, top, hi, k, INK);
    fill(rgb, W, H, bx + barw, top + bar_h / 2, tick, k, INK);
    cli_text_draw(rgb, W, H, nx, top + bar_h / 2 - 3 * k, mid, k, INK);
    fill(rgb, W, H, bx + barw, top + bar_h - k, tick, k, INK);
    cli_text_draw(rgb, W, H, nx, top + bar_h - 7 * k, lo, k, INK);
    *out_w = W;
    *out_h = H;
    *plot_x = left;
    *plot_y = top;
    return rgb;
}
