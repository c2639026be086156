/* tiles.c: heatmap tiles. A tensor is viewed as a rows x cols matrix (explore.h); a tile pixel
** at step s summarises an s x s block of elements: min, max, mean of the finite ones, and
** absmax. Small steps read the mapped tensor through the view; steps at or above the pyramid's
** base read precomputed levels, so a tile costs O(pixels) whatever the tensor's size.
** Higher pyramid levels merge 2x2 cells of the level below; the mean is weighted by the number
** of elements each cell covers (its clipped area), so ragged edges stay exact. */
#include "../core/core.h"

#include <math.h>

#define CHUNK_ELEMS 65536   /* elements read per view call */
#define MAX_LEVELS  64

typedef struct level {
    int64_t step;             /* elements per cell side                                       */
    int64_t rows, cols;       /* cells                                                         */
    float  *min, *max, *mean; /* [rows*cols]                                                   */
} level;

struct tm_tiles {
    const tm_file *f;
    int64_t        i;
    const tm_file *ref;
    tm_tensor_pair ref_pair;  /* ref's tensor, its rows in f's order where tm_ref_pair permutes */
    tm_tile_source src;
    int64_t        rows, cols;
    int            split;     /* leading dims forming the rows                                 */
    tm_qview      *qv;        /* quantized tensors: decoded scales, held for repeated reads    */
    int            n_levels;
    level          lv[MAX_LEVELS];
    uint64_t       bytes;
    int            have_range;
    double         rmin, rmax;
};

int64_t tm_tiles_rows(const tm_tiles *t) { return t->rows; }
int     tm_tiles_split(const tm_tiles *t) { return t->split; }
int     tm_tiles_default_split(int ndim) { return ndim >= 2 ? 1 : 0; }
int64_t tm_tiles_cols(const tm_tiles *t) { return t->cols; }
uint64_t tm_tiles_bytes(const tm_tiles *t) { return t ? t->bytes : 0; }
int64_t tm_tiles_pyramid_step(const tm_tiles *t) { return t->n_levels ? t->lv[0].step : 0; }

tm_status tm_tiles_open(const tm_file *f, int64_t i, const tm_file *ref, int64_t ref_i,
                        tm_tile_source src, int split, tm_tiles **out, tm_err *err) {
    *out = NULL;
    const tm_tensor *t = tm_file_tensor(f, i);
    if (!t) return tm__err_set(err, TM_E_INVALID_ARG, -1, "tensor index %lld out of range", (long long)i);
    if (split < 0) split = tm_tiles_default_split(t->ndim);
    if (split > t->ndim)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "tensor '%s': split %d outside [0, %d]",
                           t->name, split, t->ndim);
    if (src != TM_TILE_VALUE && src != TM_TILE_ERROR_LSB)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "unknown tile source %d", (int)src);
    if (!t->quant) {
        const tm_dtype_traits *dt = tm_dtype_get(t->dtype);
        if (!dt || dt->bits < 8)
            return tm__err_set(err, TM_E_UNSUPPORTED, -1, "tensor '%s': dtype %s has no float view",
                               t->name, dt ? dt->name : "?");
    }
    if (src == TM_TILE_ERROR_LSB) {
        if (!t->quant)
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "tensor '%s' is not quantized: it has no error in LSB", t->name);
        const tm_tensor *rt = ref ? tm_file_tensor(ref, ref_i) : NULL;
        if (!rt || rt->n_elems != t->n_elems)
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "tensor '%s': the error needs a reference tensor of %lld elements",
                               t->name, (long long)t->n_elems);
    }
    tm_tiles *o = calloc(1, sizeof *o);
    if (!o) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    o->f = f;
    o->i = i;
    o->ref = ref;
    /* the HF <-> GGUF row permutation of the q/k projections where ref_i is the tensor the one
    ** pairing (tm_ref_pair) gives; any other ref_i is read as stored */
    if (!ref || tm_ref_pair(ref, f, i, &o->ref_pair) != ref_i) {
        memset(&o->ref_pair, 0, sizeof o->ref_pair);
        o->ref_pair.index = ref_i;
    }
    o->src = src;
    o->split = split;
    o->rows = 1;
    for (int d = 0; d < split; d++) o->rows *= t->shape[d];
    o->cols = 1;
    for (int d = split; d < t->ndim; d++) o->cols *= t->shape[d];
    if (t->n_elems == 0) { o->rows = 0; o->cols = 0; }
    if (t->quant) {
        tm_status s = tm_qview_open(f, i, &o->qv, err);
        if (s) { free(o); return s; }
    }
    *out = o;
    return TM_OK;
}

static void free_levels(tm_tiles *t) {
    for (int k = 0; k < t->n_levels; k++) {
        free(t->lv[k].min);
        free(t->lv[k].max);
        free(t->lv[k].mean);
    }
    t->n_levels = 0;
    t->bytes = 0;
}

void tm_tiles_free(tm_tiles *t) {
    if (!t) return;
    free_levels(t);
    tm_qview_free(t->qv);
    free(t);
}

/* Source values of flat elements [start, start+n), n <= CHUNK_ELEMS. Scratch buffers: refbuf
** (floats) and param (int64), each CHUNK_ELEMS long, used by the error source only. */
static tm_status read_span(const tm_tiles *t, int64_t start, int64_t n, float *out, float *refbuf,
                           int64_t *param, tm_err *err) {
    if (t->src == TM_TILE_VALUE) {
        if (t->qv) return tm_qview_read(t->qv, start, n, out, NULL, err);
        return tm_tensor_read_f32(t->f, t->i, start, n, out, err);
    }
    tm_status s = tm_qview_read(t->qv, start, n, out, param, err);
    if (!s) s = tm_tensor_pair_read_f32(t->ref, &t->ref_pair, start, n, refbuf, err);
    if (s) return s;
    const float *scale = tm_qview_scale(t->qv);
    const tm_qtensor *qt = tm_file_tensor(t->f, t->i)->quant;
    tm_dtype cd = qt->code_dtype;
    int fp8 = cd == TM_F8_E4M3 || cd == TM_F8_E5M2;
    /* a ggml codebook type: one LSB is the step between neighbouring codes, as qdiff measures */
    float cstep = qt->ggml_type != 0 ? (float)tm_ggml_code_step(qt->ggml_type) : 1.0f;
    for (int64_t k = 0; k < n; k++) {
        float sc = scale[param[k]];
        if (!(sc > 0) || !isfinite(sc)) { out[k] = NAN; continue; }
        /* float8: one LSB is the grid spacing at the value, as qdiff and scalar measure it */
        if (fp8) out[k] = (float)(fabs((double)refbuf[k] - out[k]) / tm_lsb_size(cd, sc, refbuf[k]));
        else out[k] = fabsf(refbuf[k] - out[k]) / (cstep != 1.0f ? sc * cstep : sc);
    }
    return TM_OK;
}

typedef struct scratch { float *vals, *refbuf; int64_t *param; } scratch;

static tm_status scratch_init(const tm_tiles *t, scratch *s, tm_err *err) {
    s->vals = tm__malloc_n(CHUNK_ELEMS, sizeof(float));
    s->refbuf = t->src == TM_TILE_ERROR_LSB ? tm__malloc_n(CHUNK_ELEMS, sizeof(float)) : NULL;
    s->param = t->src == TM_TILE_ERROR_LSB ? tm__malloc_n(CHUNK_ELEMS, sizeof(int64_t)) : NULL;
    if (!s->vals || (t->src == TM_TILE_ERROR_LSB && (!s->refbuf || !s->param))) {
        free(s->vals); free(s->refbuf); free(s->param);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    return TM_OK;
}
static void scratch_free(scratch *s) { free(s->vals); free(s->refbuf); free(s->param); }

/* Accumulate row r, cols [c0, c1), into cells of width `step` starting at cell index cell0:
** element c lands in cell (c / step) - cell0. */
static tm_status accumulate_row(const tm_tiles *t, scratch *sc, int64_t r, int64_t c0, int64_t c1,
                                int64_t step, int64_t cell0, float *amin, float *amax,
                                double *asum, int64_t *an, tm_err *err) {
    int64_t c = c0;
    while (c < c1) {
        int64_t n = c1 - c;
        if (n > CHUNK_ELEMS) n = CHUNK_ELEMS;
        tm_status s = read_span(t, r * t->cols + c, n, sc->vals, sc->refbuf, sc->param, err);
        if (s) return s;
        int64_t k = 0;
        while (k < n) {
            int64_t cell = (c + k) / step;
            int64_t end = (cell + 1) * step - c;  /* first k of the next cell */
            if (end > n) end = n;
            int64_t ci = cell - cell0;
            float mn = amin[ci], mx = amax[ci];
            double sum = 0;
            int64_t cnt = 0;
            for (; k < end; k++) {
                float v = sc->vals[k];
                if (!isfinite(v)) continue;
                if (v < mn) mn = v;
                if (v > mx) mx = v;
                sum += v;
                cnt++;
            }
            amin[ci] = mn;
            amax[ci] = mx;
            asum[ci] += sum;
            an[ci] += cnt;
        }
        c += n;
    }
    return TM_OK;
}

static int is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

tm_status tm_tiles_build_pyramid(tm_tiles *t, uint64_t max_bytes, tm_err *err) {
    if (t->n_levels) return TM_OK;
    if (t->rows == 0 || t->cols == 0) return TM_OK;
    /* base step: the smallest power of two >= 2 whose levels, all together, fit */
    int64_t b = 2;
    for (;;) {
        uint64_t total = 0;
        for (int64_t s = b;; s *= 2) {
            total += (uint64_t)tm__ceil_div(t->rows, s) * (uint64_t)tm__ceil_div(t->cols, s) * 3 * sizeof(float);
            if ((tm__ceil_div(t->rows, s) == 1 && tm__ceil_div(t->cols, s) == 1) || s > INT64_MAX / 4) break;
        }
        if (total <= max_bytes) break;
        if (b >= TM_TILE_MAX_STEP)
            return tm__err_set(err, TM_E_LIMIT, -1, "pyramid: %llu bytes hold no level",
                               (unsigned long long)max_bytes);
        b *= 2;
    }
    /* levels b, 2b, ... until one cell */
    int nl = 0;
    for (int64_t s = b;; s *= 2) {
        level *L = &t->lv[nl++];
        L->step = s;
        L->rows = tm__ceil_div(t->rows, s);
        L->cols = tm__ceil_div(t->cols, s);
        size_t nc = (size_t)(L->rows * L->cols);
        L->min = tm__malloc_n(nc, sizeof(float));
        L->max = tm__malloc_n(nc, sizeof(float));
        L->mean = tm__malloc_n(nc, sizeof(float));
        t->n_levels = nl;
        if (!L->min || !L->max || !L->mean) {
            free_levels(t);
            return tm__err_set(err, TM_E_NOMEM, -1, "pyramid: out of memory");
        }
        t->bytes += 3 * nc * sizeof(float);
        if ((L->rows == 1 && L->cols == 1) || nl == MAX_LEVELS) break;
    }
    /* base level: one streaming pass, b rows at a time */
    level *L0 = &t->lv[0];
    scratch sc;
    tm_status s = scratch_init(t, &sc, err);
    float *amin = tm__malloc_n((size_t)L0->cols, sizeof(float));
    float *amax = tm__malloc_n((size_t)L0->cols, sizeof(float));
    double *asum = tm__malloc_n((size_t)L0->cols, sizeof(double));
    int64_t *an = tm__malloc_n((size_t)L0->cols, sizeof(int64_t));
    if (!s && (!amin || !amax || !asum || !an)) {
        scratch_free(&sc);
        s = tm__err_set(err, TM_E_NOMEM, -1, "pyramid: out of memory");
    }
    for (int64_t cr = 0; !s && cr < L0->rows; cr++) {
        for (int64_t k = 0; k < L0->cols; k++) {
            amin[k] = INFINITY; amax[k] = -INFINITY; asum[k] = 0; an[k] = 0;
        }
        int64_t r1 = (cr + 1) * b < t->rows ? (cr + 1) * b : t->rows;
        for (int64_t r = cr * b; !s && r < r1; r++)
            s = accumulate_row(t, &sc, r, 0, t->cols, b, 0, amin, amax, asum, an, err);
        for (int64_t k = 0; !s && k < L0->cols; k++) {
            size_t o = (size_t)(cr * L0->cols + k);
            if (an[k]) {
                L0->min[o] = amin[k]; L0->max[o] = amax[k]; L0->mean[o] = (float)(asum[k] / (double)an[k]);
            } else {
                L0->min[o] = L0->max[o] = L0->mean[o] = NAN;
            }
        }
    }
    if (amin) scratch_free(&sc);
    free(amin); free(amax); free(asum); free(an);
    if (s) { free_levels(t); return s; }
    /* higher levels: merge 2x2 cells, mean weighted by the elements each cell covers */
    for (int k = 1; k < t->n_levels; k++) {
        const level *P = &t->lv[k - 1];
        level *L = &t->lv[k];
        for (int64_t r = 0; r < L->rows; r++)
            for (int64_t c = 0; c < L->cols; c++) {
                float mn = INFINITY, mx = -INFINITY;
                double sum = 0, w = 0;
                for (int64_t dr = 0; dr < 2; dr++)
                    for (int64_t dc = 0; dc < 2; dc++) {
                        int64_t pr = 2 * r + dr, pc = 2 * c + dc;
                        if (pr >= P->rows || pc >= P->cols) continue;
                        size_t o = (size_t)(pr * P->cols + pc);
                        if (isnan(P->mean[o])) continue;
                        int64_t h = t->rows - pr * P->step, wd = t->cols - pc * P->step;
                        if (h > P->step) h = P->step;
                        if (wd > P->step) wd = P->step;
                        double area = (double)h * (double)wd;
                        if (P->min[o] < mn) mn = P->min[o];
                        if (P->max[o] > mx) mx = P->max[o];
                        sum += area * P->mean[o];
                        w += area;
                    }
                size_t o = (size_t)(r * L->cols + c);
                if (w > 0) { L->min[o] = mn; L->max[o] = mx; L->mean[o] = (float)(sum / w); }
                else L->min[o] = L->max[o] = L->mean[o] = NAN;
            }
    }
    const level *top = &t->lv[t->n_levels - 1];
    t->rmin = top->rows == 1 && top->cols == 1 ? top->min[0] : NAN;
    t->rmax = top->rows == 1 && top->cols == 1 ? top->max[0] : NAN;
    t->have_range = top->rows == 1 && top->cols == 1;
    return TM_OK;
}

static tm_status check_req(const tm_tiles *t, const tm_tile_req *q, tm_err *err) {
    if (!is_pow2(q->step) || q->step > TM_TILE_MAX_STEP)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "tile step %lld is not a power of two in [1, 2^40]",
                           (long long)q->step);
    if (q->width < 1 || q->height < 1 || q->width > TM_TILE_MAX_SIDE || q->height > TM_TILE_MAX_SIDE)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "tile %dx%d outside 1..%d pixels a side",
                           q->width, q->height, TM_TILE_MAX_SIDE);
    if (q->x0 < 0 || q->y0 < 0 || q->x0 > INT64_MAX / 4 / q->step || q->y0 > INT64_MAX / 4 / q->step)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "tile origin (%lld, %lld) out of range",
                           (long long)q->x0, (long long)q->y0);
    (void)t;
    return TM_OK;
}

static void put(float *a, size_t o, float v) { if (a) a[o] = v; }

static void put_px(float *mn, float *mx, float *me, float *am, size_t o, float vmin, float vmax,
                   float vmean) {
    put(mn, o, vmin);
    put(mx, o, vmax);
    put(me, o, vmean);
    float a = fabsf(vmin) > fabsf(vmax) ? fabsf(vmin) : fabsf(vmax);
    put(am, o, isnan(vmin) ? NAN : a);
}

tm_status tm_tiles_read(const tm_tiles *t, const tm_tile_req *q, float *omin, float *omax,
                        float *omean, float *oabs, tm_err *err) {
    tm_status s = check_req(t, q, err);
    if (s) return s;
    int W = q->width, H = q->height;
    const int64_t st = q->step;
    const level *L = NULL;
    for (int k = 0; k < t->n_levels; k++)
        if (t->lv[k].step == st) L = &t->lv[k];
    if (!L && t->n_levels && st > t->lv[t->n_levels - 1].step) {
        /* coarser than one cell: pixel (0,0) is the whole matrix */
        const level *top = &t->lv[t->n_levels - 1];
        for (int py = 0; py < H; py++)
            for (int px = 0; px < W; px++) {
                size_t o = (size_t)py * (size_t)W + (size_t)px;
                if (q->x0 + px == 0 && q->y0 + py == 0) put_px(omin, omax, omean, oabs, o, top->min[0], top->max[0], top->mean[0]);
                else put_px(omin, omax, omean, oabs, o, NAN, NAN, NAN);
            }
        return TM_OK;
    }
    if (L) {
        for (int py = 0; py < H; py++)
            for (int px = 0; px < W; px++) {
                size_t o = (size_t)py * (size_t)W + (size_t)px;
                int64_t r = q->y0 + py, c = q->x0 + px;
                if (r < L->rows && c < L->cols) {
                    size_t k = (size_t)(r * L->cols + c);
                    put_px(omin, omax, omean, oabs, o, L->min[k], L->max[k], L->mean[k]);
                } else {
                    put_px(omin, omax, omean, oabs, o, NAN, NAN, NAN);
                }
            }
        return TM_OK;
    }
    /* read the elements */
    scratch sc;
    s = scratch_init(t, &sc, err);
    if (s) return s;
    float *amin = tm__malloc_n((size_t)W, sizeof(float));
    float *amax = tm__malloc_n((size_t)W, sizeof(float));
    double *asum = tm__malloc_n((size_t)W, sizeof(double));
    int64_t *an = tm__malloc_n((size_t)W, sizeof(int64_t));
    if (!amin || !amax || !asum || !an) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    int64_t c0 = q->x0 * st, c1 = (q->x0 + W) * st;
    if (c1 > t->cols) c1 = t->cols;
    for (int py = 0; !s && py < H; py++) {
        for (int px = 0; px < W; px++) { amin[px] = INFINITY; amax[px] = -INFINITY; asum[px] = 0; an[px] = 0; }
        int64_t r0 = (q->y0 + py) * st, r1 = r0 + st;
        if (r1 > t->rows) r1 = t->rows;
        for (int64_t r = r0; !s && r < r1 && c0 < c1; r++)
            s = accumulate_row(t, &sc, r, c0, c1, st, q->x0, amin, amax, asum, an, err);
        for (int px = 0; !s && px < W; px++) {
            size_t o = (size_t)py * (size_t)W + (size_t)px;
            if (an[px]) put_px(omin, omax, omean, oabs, o, amin[px], amax[px], (float)(asum[px] / (double)an[px]));
            else put_px(omin, omax, omean, oabs, o, NAN, NAN, NAN);
        }
    }
    scratch_free(&sc);
    free(amin); free(amax); free(asum); free(an);
    return s;
}

tm_status tm_tiles_range(tm_tiles *t, double *mn, double *mx, tm_err *err) {
    if (!t->have_range) {
        double lo = INFINITY, hi = -INFINITY;
        if (t->rows > 0 && t->cols > 0) {
            /* one pass: one pixel row per matrix row, columns in chunks */
            scratch sc;
            tm_status s = scratch_init(t, &sc, err);
            if (s) return s;
            for (int64_t r = 0; !s && r < t->rows; r++)
                for (int64_t c = 0; !s && c < t->cols; c += CHUNK_ELEMS) {
                    int64_t n = t->cols - c < CHUNK_ELEMS ? t->cols - c : CHUNK_ELEMS;
                    s = read_span(t, r * t->cols + c, n, sc.vals, sc.refbuf, sc.param, err);
                    for (int64_t k = 0; !s && k < n; k++) {
                        float v = sc.vals[k];
                        if (!isfinite(v)) continue;
                        if (v < lo) lo = v;
                        if (v > hi) hi = v;
                    }
                }
            scratch_free(&sc);
            if (s) return s;
        }
        t->rmin = lo <= hi ? lo : NAN;
        t->rmax = lo <= hi ? hi : NAN;
        t->have_range = 1;
    }
    *mn = t->rmin;
    *mx = t->rmax;
    return TM_OK;
}

tm_status tm_tiles_groups(const tm_tiles *t, const tm_tile_req *q, int64_t *param, tm_err *err) {
    if (!t->qv) {
        const tm_tensor *tt = tm_file_tensor(t->f, t->i);
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "tensor '%s' is not quantized: it has no groups",
                           tt ? tt->name : "?");
    }
    tm_status s = check_req(t, q, err);
    if (s) return s;
    for (int py = 0; py < q->height; py++)
        for (int px = 0; px < q->width; px++) {
            size_t o = (size_t)py * (size_t)q->width + (size_t)px;
            int64_t r = (q->y0 + py) * q->step, c = (q->x0 + px) * q->step;
            param[o] = -1;
            if (r >= t->rows || c >= t->cols) continue;
            float v;
            s = tm_qview_read(t->qv, r * t->cols + c, 1, &v, &param[o], err);
            if (s) return s;
        }
    return TM_OK;
}
