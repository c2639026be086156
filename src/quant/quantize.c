/*
** quantize.c: tm_quantize_f32 / tm_dequantize (any granularity), the reference kernels, the
** error statistics [docs/quantization.md "Quantize"]; the run kernels come from qp->kernels
** (kernels.h).
**
** The driver walks the element range in runs that share one param unit (tm__ggeom_param
** gives the param and the run length once per run), so per-channel axis 0 and per-group along
** the last axis cost one lookup per row / group, never a generic index per element. Each run
** goes to a kernel (reference or SIMD: identical codes); the statistics are then computed by
** one scalar pass over the same run, so they are identical for every kernel variant.
*/
#include "kernels.h"

#include <float.h>
#include <math.h>

/* ---------------------------------------------------------------------------------------- */
/* Statistics                                                                                */
/* ---------------------------------------------------------------------------------------- */

void tm_qstats_init(tm_qstats *s, int64_t n_params, double *param_sum_err_lsb2,
                    int64_t *param_n) {
    if (!s) return;
    memset(s, 0, sizeof *s);
    s->first_nonfinite = -1;
    if (param_sum_err_lsb2 && param_n && n_params > 0) {
        s->n_params = n_params;
        s->param_sum_err_lsb2 = param_sum_err_lsb2;
        s->param_n = param_n;
        memset(param_sum_err_lsb2, 0, (size_t)n_params * sizeof *param_sum_err_lsb2);
        memset(param_n, 0, (size_t)n_params * sizeof *param_n);
    }
}

void tm_qstats_merge(tm_qstats *dst, const tm_qstats *src) {
    if (!dst || !src) return;
    dst->n += src->n;
    dst->n_clipped += src->n_clipped;
    dst->n_nonfinite += src->n_nonfinite;
    if (src->first_nonfinite >= 0 &&
        (dst->first_nonfinite < 0 || src->first_nonfinite < dst->first_nonfinite))
        dst->first_nonfinite = src->first_nonfinite;
    dst->sum_x2 += src->sum_x2;
    dst->sum_err2 += src->sum_err2;
    dst->sum_err_lsb2 += src->sum_err_lsb2;
    if (src->max_abs_err > dst->max_abs_err) dst->max_abs_err = src->max_abs_err;
    if (src->max_err_lsb > dst->max_err_lsb) dst->max_err_lsb = src->max_err_lsb;
    if (dst->param_sum_err_lsb2 && src->param_sum_err_lsb2 && dst->param_n && src->param_n &&
        dst->n_params == src->n_params && dst->param_sum_err_lsb2 != src->param_sum_err_lsb2) {
        for (int64_t i = 0; i < dst->n_params; i++) {
            dst->param_sum_err_lsb2[i] += src->param_sum_err_lsb2[i];
            dst->param_n[i] += src->param_n[i];
        }
    }
}

int64_t tm_qstats_worst_param(const tm_qstats *s, double *rmse_lsb) {
    int64_t worst = -1;
    double best = -1.0;
    if (s && s->param_sum_err_lsb2 && s->param_n) {
        for (int64_t i = 0; i < s->n_params; i++) {
            if (s->param_n[i] <= 0) continue;
            double r = sqrt(s->param_sum_err_lsb2[i] / (double)s->param_n[i]);
            if (r > best) {
                best = r;
                worst = i;
            }
        }
    }
    if (rmse_lsb) *rmse_lsb = worst >= 0 ? best : 0.0;
    return worst;
}

static int f32_finite(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (u & 0x7f800000u) != 0x7f800000u;
}

/* What one run contributes, given the dequantized values deq[0..n). */
struct run_ctx {
    const float *x;
    const float *deq;
    int64_t      n;
    int64_t      f0;       /* flat index of x[0]                                      */
    int64_t      param;
    double       scale;
    double       clip_lo;  /* x below this (or above clip_hi) counts as clipped       */
    double       clip_hi;
    const uint8_t *fp8_clip; /* fp8: per-element 1 when the unsaturated code overflows */
};

static void stats_run(tm_qstats *st, const struct run_ctx *r) {
    double sx2 = 0, se2 = 0, sl2 = 0, mae = st->max_abs_err, mlsb = st->max_err_lsb;
    int64_t cnt = 0, clipped = 0;
    for (int64_t i = 0; i < r->n; i++) {
        float xi = r->x[i];
        if (!f32_finite(xi)) {
            st->n_nonfinite++;
            if (st->first_nonfinite < 0) st->first_nonfinite = r->f0 + i;
            continue;
        }
        double xd = (double)xi, e = xd - (double)r->deq[i];
        double ae = fabs(e), lsb = ae / r->scale;
        sx2 += xd * xd;
        se2 += e * e;
        sl2 += lsb * lsb;
        if (ae > mae) mae = ae;
        if (lsb > mlsb) mlsb = lsb;
        if (r->fp8_clip ? r->fp8_clip[i] != 0 : (xd < r->clip_lo || xd > r->clip_hi)) clipped++;
        cnt++;
    }
    st->n += cnt;
    st->n_clipped += clipped;
    st->sum_x2 += sx2;
    st->sum_err2 += se2;
    st->sum_err_lsb2 += sl2;
    st->max_abs_err = mae;
    st->max_err_lsb = mlsb;
    if (st->param_sum_err_lsb2 && r->param < st->n_params) {
        st->param_sum_err_lsb2[r->param] += sl2;
        st->param_n[r->param] += cnt;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Validation                                                                                */
/* ---------------------------------------------------------------------------------------- */

struct qplan {
    struct tm__ggeom geo;
    const tm_dtype_traits *t;
    int is_fp8;
};

static tm_status plan_init(struct qplan *pl, const tm_qparams *qp, int ndim, const int64_t *shape,
                           int64_t start, int64_t n, const void *in, const void *out,
                           tm_err *err) {
    if (!qp) return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: qparams is NULL");
    pl->t = tm_dtype_get(qp->code_dtype);
    if (!pl->t || !pl->t->is_code)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: %s is not a code dtype",
                           pl->t ? pl->t->name : "?");
    pl->is_fp8 = pl->t->is_float;
    if (!pl->is_fp8 && (qp->qmin > qp->qmax || qp->qmin < pl->t->qmin || qp->qmax > pl->t->qmax))
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: code range [%lld, %lld] outside %s",
                           (long long)qp->qmin, (long long)qp->qmax, pl->t->name);
    tm_status st = tm__ggeom_init(&pl->geo, &qp->gran, ndim, shape, err);
    if (st != TM_OK) return st;
    if (qp->n_params != pl->geo.n_params || (pl->geo.n_params > 0 && !qp->scale))
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "quant: %lld params given, the granularity needs %lld",
                           (long long)qp->n_params, (long long)pl->geo.n_params);
    if (start < 0 || n < 0 || start > pl->geo.n_elems || n > pl->geo.n_elems - start)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "quant: elements [%lld, +%lld) outside a tensor of %lld",
                           (long long)start, (long long)n, (long long)pl->geo.n_elems);
    if (n > 0 && (!in || !out))
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: NULL input or output buffer");
    return TM_OK;
}

/* The run's scale/zero point, checked. */
static tm_status seg_init(struct tm__qseg *seg, const tm_qparams *qp, const struct qplan *pl,
                          int64_t p, tm_err *err) {
    float s = qp->scale[p];
    if (!isfinite(s) || !(s > 0.0f))
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: scale[%lld] = %g is not finite > 0",
                           (long long)p, (double)s);
    int32_t zp = (qp->zero_point && !pl->is_fp8) ? qp->zero_point[p] : 0;
    if (!pl->is_fp8 && (zp < qp->qmin || zp > qp->qmax))
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "quant: zero_point[%lld] = %d outside [%lld, %lld]", (long long)p,
                           (int)zp, (long long)qp->qmin, (long long)qp->qmax);
    seg->scale = s;
    seg->inv_scale = 1.0f / s;
    seg->use_mul = qp->convention == TM_CONV_TORCH;
    seg->zp = zp;
    seg->lo = (float)(qp->qmin - zp);
    seg->hi = (float)(qp->qmax - zp);
    seg->code_signed = pl->t->is_signed;
    return TM_OK;
}

int64_t tm_count_nonfinite(const float *x, int64_t n, int64_t *first) {
    int64_t bad = 0, f = -1;
    uint32_t any = 0; /* branch-free first pass (vectorises): exponent bits all ones */
    for (int64_t i = 0; x && i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        any |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    for (int64_t i = 0; any && i < n; i++) {
        if (!f32_finite(x[i])) {
            if (f < 0) f = i;
            bad++;
        }
    }
    if (first) *first = f;
    return bad;
}

static tm_status check_finite(const float *x, int64_t start, int64_t n, tm_err *err) {
    int64_t first;
    int64_t bad = tm_count_nonfinite(x, n, &first);
    if (!bad) return TM_OK;
    float v = x[first];
    return tm__err_set(err, TM_E_NONFINITE, -1,
                       "quant: %lld non-finite value%s in elements [%lld, %lld); the first, %s, "
                       "at flat index %lld",
                       (long long)bad, bad == 1 ? "" : "s", (long long)start,
                       (long long)(start + n), v != v ? "NaN" : v > 0 ? "+inf" : "-inf",
                       (long long)(start + first));
}

/* ---------------------------------------------------------------------------------------- */
/* fp8                                                                                       */
/* ---------------------------------------------------------------------------------------- */

static uint8_t fp8_encode(tm_dtype dt, float v, int saturate) {
    return dt == TM_F8_E4M3 ? tm_f32_to_e4m3(v, saturate) : tm_f32_to_e5m2(v, saturate);
}
static float fp8_decode(tm_dtype dt, uint8_t c) {
    return dt == TM_F8_E4M3 ? tm_e4m3_to_f32(c) : tm_e5m2_to_f32(c);
}

/* q = fp8_saturate(x / s) (TORCH: x * (1/s)); NaN -> +0 (allow_nonfinite only). clip[i] = 1
** when x is finite and the unsaturated conversion overflows. */
static void fp8_quant_run(tm_dtype dt, const float *x, int64_t n, const struct tm__qseg *seg,
                          uint8_t *codes, uint8_t *clip) {
    for (int64_t i = 0; i < n; i++) {
        float v = seg->use_mul ? x[i] * seg->inv_scale : x[i] / seg->scale;
        if (v != v) {
            codes[i] = 0;
            if (clip) clip[i] = 0;
            continue;
        }
        codes[i] = fp8_encode(dt, v, 1);
        if (clip) {
            float u = fp8_decode(dt, fp8_encode(dt, v, 0));
            clip[i] = (uint8_t)(f32_finite(x[i]) && !f32_finite(u));
        }
    }
}

static void fp8_dequant_run(tm_dtype dt, const uint8_t *codes, int64_t n, float s, float *out) {
    for (int64_t i = 0; i < n; i++) out[i] = fp8_decode(dt, codes[i]) * s;
}

/* ---------------------------------------------------------------------------------------- */
/* Drivers                                                                                   */
/* ---------------------------------------------------------------------------------------- */

#define STATS_CHUNK 256 /* runs are measured in pieces of this many elements */

static void measure(tm_qstats *st, const tm_qparams *qp, const struct qplan *pl,
                    const struct tm__qseg *seg, const float *x, const uint8_t *codes,
                    const uint8_t *clip, int64_t n, int64_t f0, int64_t p) {
    float deq[STATS_CHUNK];
    for (int64_t off = 0; off < n; off += STATS_CHUNK) {
        int64_t m = n - off < STATS_CHUNK ? n - off : STATS_CHUNK;
        if (pl->is_fp8)
            fp8_dequant_run(qp->code_dtype, codes + off, m, seg->scale, deq);
        else
            tm__dequant_int_ref(codes + off, m, seg, deq);
        struct run_ctx r = {
            .x = x + off, .deq = deq, .n = m, .f0 = f0 + off, .param = p,
            .scale = (double)seg->scale,
            .clip_lo = ((double)(qp->qmin - seg->zp) - 0.5) * (double)seg->scale,
            .clip_hi = ((double)(qp->qmax - seg->zp) + 0.5) * (double)seg->scale,
            .fp8_clip = clip ? clip + off : NULL};
        stats_run(st, &r);
    }
}

tm_status tm_quantize_f32(const tm_qparams *qp, int ndim, const int64_t *shape, const float *x,
                          int64_t start, int64_t n, uint8_t *codes, tm_qstats *stats,
                          tm_err *err) {
    struct qplan pl;
    tm_status st = plan_init(&pl, qp, ndim, shape, start, n, x, codes, err);
    if (st != TM_OK) return st;
    if (stats && stats->param_sum_err_lsb2 && stats->n_params != pl.geo.n_params)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "quant: stats hold %lld per-param slots, the tensor has %lld params",
                           (long long)stats->n_params, (long long)pl.geo.n_params);
    if (!qp->allow_nonfinite && (st = check_finite(x, start, n, err)) != TM_OK) return st;
    const tm_kernels *k = tm__kernels_or_auto(qp->kernels);
    uint8_t clip[STATS_CHUNK];
    int64_t i = 0;
    while (i < n) {
        int64_t run;
        int64_t p = tm__ggeom_param(&pl.geo, start + i, &run);
        if (run > n - i) run = n - i;
        struct tm__qseg seg;
        if ((st = seg_init(&seg, qp, &pl, p, err)) != TM_OK) return st;
        if (!pl.is_fp8) {
            k->quant_int(x + i, run, &seg, codes + i);
            if (stats) measure(stats, qp, &pl, &seg, x + i, codes + i, NULL, run, start + i, p);
        } else {
            for (int64_t off = 0; off < run; off += STATS_CHUNK) {
                int64_t m = run - off < STATS_CHUNK ? run - off : STATS_CHUNK;
                fp8_quant_run(qp->code_dtype, x + i + off, m, &seg, codes + i + off,
                              stats ? clip : NULL);
                if (stats)
                    measure(stats, qp, &pl, &seg, x + i + off, codes + i + off, clip, m,
                            start + i + off, p);
            }
        }
        i += run;
    }
    return TM_OK;
}

tm_status tm__quantize_dequantize_f32(const tm_qparams *qp, int ndim, const int64_t *shape,
                                      const float *x, int64_t start, int64_t n, uint8_t *codes,
                                      float *xq, tm_err *err) {
    struct qplan pl;
    tm_status st = plan_init(&pl, qp, ndim, shape, start, n, x, codes, err);
    if (st != TM_OK) return st;
    if (n > 0 && !xq) return tm__err_set(err, TM_E_INVALID_ARG, -1, "quant: NULL output buffer");
    if (!qp->allow_nonfinite && (st = check_finite(x, start, n, err)) != TM_OK) return st;
    const tm_kernels *k = tm__kernels_or_auto(qp->kernels);
    int64_t i = 0;
    while (i < n) {
        int64_t run;
        int64_t p = tm__ggeom_param(&pl.geo, start + i, &run);
        if (run > n - i) run = n - i;
        struct tm__qseg seg;
        if ((st = seg_init(&seg, qp, &pl, p, err)) != TM_OK) return st;
        if (pl.is_fp8) {
            for (int64_t off = 0; off < run; off += STATS_CHUNK) {
                int64_t m = run - off < STATS_CHUNK ? run - off : STATS_CHUNK;
                fp8_quant_run(qp->code_dtype, x + i + off, m, &seg, codes + i + off, NULL);
            }
            fp8_dequant_run(qp->code_dtype, codes + i, run, seg.scale, xq + i);
        } else if (k->quant_dequant_int) {
            k->quant_dequant_int(x + i, run, &seg, codes + i, xq + i);
        } else {
            k->quant_int(x + i, run, &seg, codes + i);
            k->dequant_int(codes + i, run, &seg, xq + i);
        }
        i += run;
    }
    return TM_OK;
}

tm_status tm_dequantize(const tm_qparams *qp, int ndim, const int64_t *shape,
                        const uint8_t *codes, int64_t start, int64_t n, float *out,
                        tm_err *err) {
    struct qplan pl;
    tm_status st = plan_init(&pl, qp, ndim, shape, start, n, codes, out, err);
    if (st != TM_OK) return st;
    const tm_kernels *k = tm__kernels_or_auto(qp->kernels);
    int64_t i = 0;
    while (i < n) {
        int64_t run;
        int64_t p = tm__ggeom_param(&pl.geo, start + i, &run);
        if (run > n - i) run = n - i;
        struct tm__qseg seg;
        if ((st = seg_init(&seg, qp, &pl, p, err)) != TM_OK) return st;
        if (pl.is_fp8)
            fp8_dequant_run(qp->code_dtype, codes + i, run, seg.scale, out + i);
        else
            k->dequant_int(codes + i, run, &seg, out + i);
        i += run;
    }
    return TM_OK;
}
