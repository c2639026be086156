/*
** qgran.c: granularity geometry: the shape of the scale / zero-point tensor, and which param
** an element uses [docs/quantization.md "Granularity"]. Agrees with compressed-tensors
** strategy_cdiv (ceil division, ragged last group/block with its own scale) and with
** the spec vectors (spec/ per-group cases and spec/int8_block2d).
*/
#include "quant_impl.h"

static tm_status shape_ok(int ndim, const int64_t *shape, int64_t *n_elems, tm_err *err) {
    if (ndim < 0 || ndim > TM_MAX_DIMS || (ndim > 0 && !shape))
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: ndim %d outside 0..%d", ndim,
                           TM_MAX_DIMS);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || !tm__mul_i64_ok(n, shape[i], &n))
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "quant: shape dim %d (%lld) negative or element count overflows",
                               i, (long long)shape[i]);
    }
    *n_elems = n;
    return TM_OK;
}

static tm_status axis_ok(int axis, int ndim, int *out, tm_err *err) {
    int a = axis < 0 ? axis + ndim : axis;
    if (a < 0 || a >= ndim)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: axis %d out of range for %d dims",
                           axis, ndim);
    *out = a;
    return TM_OK;
}

tm_status tm__ggeom_init(struct tm__ggeom *g, const tm_qgran *q, int ndim, const int64_t *shape,
                         tm_err *err) {
    memset(g, 0, sizeof *g);
    if (!q) return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: granularity is NULL");
    tm_status st = shape_ok(ndim, shape, &g->n_elems, err);
    if (st != TM_OK) return st;
    g->kind = q->kind;
    int a = 0;
    switch (q->kind) {
    case TM_GRAN_TENSOR:
        g->n_params = 1;
        return TM_OK;
    case TM_GRAN_CHANNEL:
    case TM_GRAN_GROUP:
        if ((st = axis_ok(q->axis, ndim, &a, err)) != TM_OK) return st;
        g->dim = shape[a];
        g->inner = 1;
        for (int i = a + 1; i < ndim; i++) g->inner *= shape[i];
        if (q->kind == TM_GRAN_CHANNEL) {
            g->n_params = g->dim;
            return TM_OK;
        }
        if (q->group_size < 1)
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: group_size %lld < 1",
                               (long long)q->group_size);
        g->group = q->group_size;
        g->n_groups = tm__ceil_div(g->dim, g->group);
        g->n_params = g->dim == 0 ? 0 : g->n_elems / g->dim * g->n_groups;
        return TM_OK;
    case TM_GRAN_BLOCK:
        if (ndim < 2)
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "quant: 2-D blocks need >= 2 dims, got %d", ndim);
        if (q->block_h < 1 || q->block_w < 1)
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: block %lldx%lld has a side < 1",
                               (long long)q->block_h, (long long)q->block_w);
        g->rows = shape[ndim - 2];
        g->cols = shape[ndim - 1];
        g->bh = q->block_h;
        g->bw = q->block_w;
        g->nbh = tm__ceil_div(g->rows, g->bh);
        g->nbw = tm__ceil_div(g->cols, g->bw);
        g->n_params = (g->rows == 0 || g->cols == 0)
                          ? 0
                          : g->n_elems / (g->rows * g->cols) * g->nbh * g->nbw;
        return TM_OK;
    case TM_GRAN_COUNT:
        break;
    }
    return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: unknown granularity %d", (int)q->kind);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

int64_t tm__ggeom_param(const struct tm__ggeom *g, int64_t f, int64_t *run) {
    int64_t p = 0, r = g->n_elems - f;
    switch (g->kind) {
    case TM_GRAN_TENSOR:
        break;
    case TM_GRAN_CHANNEL:
        p = (f / g->inner) % g->dim;
        r = g->inner - f % g->inner;
        break;
    case TM_GRAN_GROUP: {
        int64_t in = f % g->inner, ax = (f / g->inner) % g->dim, outer = f / g->inner / g->dim;
        p = (outer * g->n_groups + ax / g->group) * g->inner + in;
        /* along the last axis (inner 1) the run is the rest of the group; otherwise every
        ** element of a row of `inner` has its own param */
        r = g->inner == 1 ? min64(g->group - ax % g->group, g->dim - ax) : 1;
        break;
    }
    case TM_GRAN_BLOCK: {
        int64_t c = f % g->cols, rr = (f / g->cols) % g->rows, batch = f / g->cols / g->rows;
        p = (batch * g->nbh + rr / g->bh) * g->nbw + c / g->bw;
        r = min64(g->bw - c % g->bw, g->cols - c);
        break;
    }
    case TM_GRAN_COUNT:
        break;
    }
    if (run) *run = r;
    return p;
}

tm_status tm_qgran_param_shape(const tm_qgran *g, int ndim, const int64_t *shape, int *pndim,
                               int64_t *pshape, int64_t *n_params, tm_err *err) {
    struct tm__ggeom geo;
    tm_status st = tm__ggeom_init(&geo, g, ndim, shape, err);
    if (st != TM_OK) return st;
    int nd = 0;
    switch (g->kind) {
    case TM_GRAN_TENSOR:
        break;
    case TM_GRAN_CHANNEL: {
        int a = g->axis < 0 ? g->axis + ndim : g->axis;
        if (pshape) pshape[0] = shape[a];
        nd = 1;
        break;
    }
    case TM_GRAN_GROUP: {
        int a = g->axis < 0 ? g->axis + ndim : g->axis;
        for (int i = 0; i < ndim; i++)
            if (pshape) pshape[i] = i == a ? geo.n_groups : shape[i];
        nd = ndim;
        break;
    }
    case TM_GRAN_BLOCK:
        for (int i = 0; i < ndim; i++)
            if (pshape) pshape[i] = i == ndim - 2 ? geo.nbh : i == ndim - 1 ? geo.nbw : shape[i];
        nd = ndim;
        break;
    case TM_GRAN_COUNT:
        break;
    }
    if (pndim) *pndim = nd;
    if (n_params) *n_params = geo.n_params;
    return TM_OK;
}

int64_t tm_qgran_param_index(const tm_qgran *g, int ndim, const int64_t *shape,
                             int64_t flat_index) {
    struct tm__ggeom geo;
    if (tm__ggeom_init(&geo, g, ndim, shape, NULL) != TM_OK) return -1;
    if (flat_index < 0 || flat_index >= geo.n_elems) return -1;
    return tm__ggeom_param(&geo, flat_index, NULL);
}
