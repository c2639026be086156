/* errstats.c: error statistics of a quantized tensor against its source, in its own units and
** in LSB (units of the element's own scale). Definitions: docs/qdiff.md. */
#include "../core/core.h"

#include <math.h>

tm_status tm_erracc_init(tm_erracc *a, int64_t n_params, tm_err *err) {
    memset(a, 0, sizeof *a);
    if (n_params > 0) {
        a->param_sum_l2 = tm__calloc((size_t)n_params, sizeof(double));
        a->param_n = tm__calloc((size_t)n_params, sizeof(int64_t));
        if (!a->param_sum_l2 || !a->param_n) {
            tm_erracc_free(a);
            return tm__err_set(err, TM_E_NOMEM, -1, "out of memory for %lld error accumulators",
                               (long long)n_params);
        }
        a->n_params = n_params;
    }
    return TM_OK;
}

void tm_erracc_free(tm_erracc *a) {
    if (!a) return;
    free(a->param_sum_l2);
    free(a->param_n);
    a->param_sum_l2 = NULL;
    a->param_n = NULL;
    a->n_params = 0;
}

/* Spacing of the float8 grid at |v| (v in code units): OCP OFP8, 3 mantissa bits for E4M3
** (min normal exponent -6), 2 for E5M2 (min normal exponent -14). */
static double fp8_spacing(tm_dtype dt, double v) {
    int mbits = dt == TM_F8_E4M3 ? 3 : 2;
    int emin = dt == TM_F8_E4M3 ? -6 : -14;
    double av = fabs(v);
    int e = emin;
    if (av > 0) {
        int ex;
        frexp(av, &ex); /* av = m * 2^ex, m in [0.5, 1) */
        e = ex - 1;
        if (e < emin) e = emin;
    }
    return ldexp(1.0, e - mbits);
}

double tm_lsb_size(tm_dtype code_dtype, double scale, double x) {
    double s = fabs(scale);
    if ((code_dtype == TM_F8_E4M3 || code_dtype == TM_F8_E5M2) && s > 0)
        return s * fp8_spacing(code_dtype, x / s);
    return s;
}

/* Integer codes: one scale per run of elements sharing a param (a row, a group), so the
** per-element work is a few multiply-adds on local accumulators.
**
** Summation order (fixed, so results never depend on the kernel, the thread count or the CPU):
** within a run, element i of the run goes to lane i % RUN_LANES while whole groups of RUN_LANES
** remain; the last (run length % RUN_LANES) elements go, in order, to a tail accumulator; the run's
** total is the tail plus lanes 0..RUN_LANES-1 in that order. A non-finite x contributes +0 to
** every sum and nothing to the counts (skipping it and adding +0 give the same bits, because
** every lane starts at +0). run_sums_ref is the reference; run_sums_avx2 computes the same lanes
** in AVX2 registers (chosen at run time when the scale is finite and positive);
** tests/unit/test_quant.c compares the two. */
#define RUN_LANES 8

/* Tests set this to 1 to run the reference lanes only (tests/unit/test_quant.c). */
int tm__errstats_force_ref = 0;

typedef struct run_sums {
    double  sx2, sq2, sxq, se2, sl2, mabs, mlsb, mlsbu;
    int64_t cnt, clip, beyond, nonfin;
} run_sums;

typedef struct run_lane {
    double sx2, sq2, sxq, se2, sl2, mabs, mlsb, mlsbu;
    int64_t cnt, clip, beyond;
} run_lane;

static inline void lane_add(run_lane *l, double xv, double q, double s, double inv, double lo, double hi) {
    double e = q - xv, ae = fabs(e);
    double el = s > 0 ? ae * inv : (ae > 0 ? INFINITY : 0);
    l->cnt++;
    l->sx2 += xv * xv;
    l->sq2 += q * q;
    l->sxq += xv * q;
    l->se2 += e * e;
    l->sl2 += el * el;
    if (ae > l->mabs) l->mabs = ae;
    if (el > l->mlsb) l->mlsb = el;
    if (xv < lo || xv > hi) l->clip++;
    else {
        if (el > l->mlsbu) l->mlsbu = el;
        if (el > TM_QDIFF_MAX_LSB_TOL) l->beyond++;
    }
}

/* total = tail, then += lane 0 .. RUN_LANES-1 */
static void lanes_total(const run_lane *lanes, const run_lane *tail, int64_t nonfin, run_sums *o) {
    o->sx2 = tail->sx2; o->sq2 = tail->sq2; o->sxq = tail->sxq; o->se2 = tail->se2; o->sl2 = tail->sl2;
    o->mabs = tail->mabs; o->mlsb = tail->mlsb; o->mlsbu = tail->mlsbu;
    o->cnt = tail->cnt; o->clip = tail->clip; o->beyond = tail->beyond; o->nonfin = nonfin;
    for (int k = 0; k < RUN_LANES; k++) {
        const run_lane *l = &lanes[k];
        o->sx2 += l->sx2; o->sq2 += l->sq2; o->sxq += l->sxq; o->se2 += l->se2; o->sl2 += l->sl2;
        if (l->mabs > o->mabs) o->mabs = l->mabs;
        if (l->mlsb > o->mlsb) o->mlsb = l->mlsb;
        if (l->mlsbu > o->mlsbu) o->mlsbu = l->mlsbu;
        o->cnt += l->cnt; o->clip += l->clip; o->beyond += l->beyond;
    }
}

static void run_sums_ref(const float *x, const float *xq, int64_t n, double s, double inv, double lo,
                         double hi, run_sums *o) {
    run_lane lanes[RUN_LANES], tail;
    memset(lanes, 0, sizeof lanes);
    memset(&tail, 0, sizeof tail);
    int64_t nonfin = 0, i = 0;
    for (; i + RUN_LANES <= n; i += RUN_LANES)
        for (int k = 0; k < RUN_LANES; k++) {
            double xv = x[i + k];
            if (!isfinite(xv)) { nonfin++; continue; }
            lane_add(&lanes[k], xv, xq[i + k], s, inv, lo, hi);
        }
    for (; i < n; i++) {
        double xv = x[i];
        if (!isfinite(xv)) { nonfin++; continue; }
        lane_add(&tail, xv, xq[i], s, inv, lo, hi);
    }
    lanes_total(lanes, &tail, nonfin, o);
}



#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TM_ES_AVX2 __attribute__((target("avx2")))
/* run_sums_ref for 0 < s < inf, the same 8 lanes as 2 vectors of 4 doubles (lane 4v+k is element k of
** vector v); chosen at run time when the CPU has AVX2. */
TM_ES_AVX2 static void run_sums_avx2(const float *x, const float *xq, int64_t n, double s, double inv,
                                     double lo, double hi, run_sums *o) {
    const __m256d sign = _mm256_set1_pd(-0.0), vinf = _mm256_set1_pd(INFINITY);
    const __m256d vinv = _mm256_set1_pd(inv), vlo = _mm256_set1_pd(lo), vhi = _mm256_set1_pd(hi);
    const __m256d vtol = _mm256_set1_pd(TM_QDIFF_MAX_LSB_TOL);
    __m256d sx2[2], sq2[2], sxq[2], se2[2], sl2[2], mabs[2], mlsb[2], mlsbu[2];
    __m256i cnt[2], clip[2], beyond[2];
    for (int v = 0; v < 2; v++) {
        sx2[v] = sq2[v] = sxq[v] = se2[v] = sl2[v] = mabs[v] = mlsb[v] = mlsbu[v] = _mm256_setzero_pd();
        cnt[v] = clip[v] = beyond[v] = _mm256_setzero_si256();
    }
    int64_t i = 0;
    for (; i + RUN_LANES <= n; i += RUN_LANES) {
        for (int v = 0; v < 2; v++) {
            __m256d xv = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * v));
            __m256d q = _mm256_cvtps_pd(_mm_loadu_ps(xq + i + 4 * v));
            const __m256d fin = _mm256_cmp_pd(_mm256_andnot_pd(sign, xv), vinf, _CMP_LT_OQ);
            xv = _mm256_and_pd(xv, fin);
            q = _mm256_and_pd(q, fin);
            const __m256d e = _mm256_sub_pd(q, xv), ae = _mm256_andnot_pd(sign, e);
            const __m256d el = _mm256_mul_pd(ae, vinv);
            sx2[v] = _mm256_add_pd(sx2[v], _mm256_mul_pd(xv, xv));
            sq2[v] = _mm256_add_pd(sq2[v], _mm256_mul_pd(q, q));
            sxq[v] = _mm256_add_pd(sxq[v], _mm256_mul_pd(xv, q));
            se2[v] = _mm256_add_pd(se2[v], _mm256_mul_pd(e, e));
            sl2[v] = _mm256_add_pd(sl2[v], _mm256_mul_pd(el, el));
            mabs[v] = _mm256_max_pd(ae, mabs[v]);
            mlsb[v] = _mm256_max_pd(el, mlsb[v]);
            const __m256d in = _mm256_and_pd(_mm256_cmp_pd(xv, vlo, _CMP_GE_OQ), _mm256_cmp_pd(xv, vhi, _CMP_LE_OQ));
            const __m256d unclipped = _mm256_and_pd(in, fin), clipped = _mm256_andnot_pd(in, fin);
            mlsbu[v] = _mm256_max_pd(_mm256_and_pd(el, unclipped), mlsbu[v]);
            const __m256d bey = _mm256_and_pd(_mm256_cmp_pd(el, vtol, _CMP_GT_OQ), unclipped);
            cnt[v] = _mm256_sub_epi64(cnt[v], _mm256_castpd_si256(fin));
            clip[v] = _mm256_sub_epi64(clip[v], _mm256_castpd_si256(clipped));
            beyond[v] = _mm256_sub_epi64(beyond[v], _mm256_castpd_si256(bey));
        }
    }
    run_lane lanes[RUN_LANES], tail;
    memset(&tail, 0, sizeof tail);
    for (int v = 0; v < 2; v++) {
        double d[4];
        int64_t c[4];
#define LANE_STORE(field, vec) _mm256_storeu_pd(d, vec); for (int k = 0; k < 4; k++) lanes[4 * v + k].field = d[k];
#define LANE_STORE_I(field, vec) _mm256_storeu_si256((__m256i *)(void *)c, vec); for (int k = 0; k < 4; k++) lanes[4 * v + k].field = c[k];
        LANE_STORE(sx2, sx2[v]) LANE_STORE(sq2, sq2[v]) LANE_STORE(sxq, sxq[v]) LANE_STORE(se2, se2[v])
        LANE_STORE(sl2, sl2[v]) LANE_STORE(mabs, mabs[v]) LANE_STORE(mlsb, mlsb[v]) LANE_STORE(mlsbu, mlsbu[v])
        LANE_STORE_I(cnt, cnt[v]) LANE_STORE_I(clip, clip[v]) LANE_STORE_I(beyond, beyond[v])
#undef LANE_STORE
#undef LANE_STORE_I
    }
    int64_t nonfin = 0;
    for (int k = 0; k < RUN_LANES; k++) nonfin += i / RUN_LANES - lanes[k].cnt;
    for (; i < n; i++) {
        double xv = x[i];
        if (!isfinite(xv)) { nonfin++; continue; }
        lane_add(&tail, xv, xq[i], s, inv, lo, hi);
    }
    lanes_total(lanes, &tail, nonfin, o);
}
#define TM_ES_HAVE_AVX2 1
#endif

/* The run's sums, through the AVX2 lanes when they apply (same result as run_sums_ref). */
static void run_sums_any(const float *x, const float *xq, int64_t n, double s, double inv, double lo,
                         double hi, run_sums *o) {
#ifdef TM_ES_HAVE_AVX2
    if (s > 0 && isfinite(s) && !tm__errstats_force_ref && __builtin_cpu_supports("avx2")) {
        run_sums_avx2(x, xq, n, s, inv, lo, hi, o);
        return;
    }
#endif
    run_sums_ref(x, xq, n, s, inv, lo, hi, o);
}

/* One run of integer codes sharing param p (see tm_erracc_add_run). */
static void add_int_run(tm_erracc *a, const float *x, const float *xq, int64_t p, const float *scale,
                        const int32_t *zero_point, int64_t qmin, int64_t qmax, int64_t n) {
    double s = scale[p];
    double zp = zero_point ? zero_point[p] : 0;
    double inv = s > 0 ? 1.0 / s : 0; /* one LSB is |scale|; s <= 0 gives inf/NaN below */
    double lo = ((double)qmin - zp) * s - TM_QDIFF_MAX_LSB_TOL * s;
    double hi = ((double)qmax - zp) * s + TM_QDIFF_MAX_LSB_TOL * s;
    run_sums r;
    run_sums_any(x, xq, n, s, inv, lo, hi, &r);
    a->n += r.cnt;
    a->n_nonfinite += r.nonfin;
    a->n_clipped += r.clip;
    a->n_beyond += r.beyond;
    a->sum_x2 += r.sx2;
    a->sum_q2 += r.sq2;
    a->sum_xq += r.sxq;
    a->sum_e2 += r.se2;
    a->sum_l2 += r.sl2;
    if (r.mabs > a->max_abs) a->max_abs = r.mabs;
    if (r.mlsb > a->max_lsb) a->max_lsb = r.mlsb;
    if (r.mlsbu > a->max_lsb_unclipped) a->max_lsb_unclipped = r.mlsbu;
    if (a->n_params > 0 && p >= 0 && p < a->n_params) {
        a->param_sum_l2[p] += r.sl2;
        a->param_n[p] += r.cnt;
    }
}

static void add_int(tm_erracc *a, const float *x, const float *xq, const int64_t *param,
                    const float *scale, const int32_t *zero_point, int64_t qmin, int64_t qmax,
                    int64_t n) {
    int64_t k = 0;
    while (k < n) {
        int64_t p = param[k], k1 = k + 1;
        while (k1 < n && param[k1] == p) k1++;
        add_int_run(a, x + k, xq + k, p, scale, zero_point, qmin, qmax, k1 - k);
        k = k1;
    }
}

void tm_erracc_add_run(tm_erracc *a, tm_dtype code_dtype, const float *x, const float *xq, int64_t p,
                       const float *scale, const int32_t *zero_point, int64_t qmin, int64_t qmax,
                       int64_t n) {
    if (n <= 0) return;
    if (code_dtype == TM_F8_E4M3 || code_dtype == TM_F8_E5M2) {
        /* float8: per element anyway; reuse the general path with a constant param */
        int64_t buf[256];
        for (int64_t k = 0; k < n; k += 256) {
            int64_t m = n - k < 256 ? n - k : 256;
            for (int64_t i = 0; i < m; i++) buf[i] = p;
            tm_erracc_add(a, code_dtype, x + k, xq + k, buf, scale, zero_point, qmin, qmax, m);
        }
        return;
    }
    add_int_run(a, x, xq, p, scale, zero_point, qmin, qmax, n);
}

void tm_erracc_add(tm_erracc *a, tm_dtype code_dtype, const float *x, const float *xq,
                   const int64_t *param, const float *scale, const int32_t *zero_point,
                   int64_t qmin, int64_t qmax, int64_t n) {
    int is_fp8 = code_dtype == TM_F8_E4M3 || code_dtype == TM_F8_E5M2;
    if (!is_fp8) {
        add_int(a, x, xq, param, scale, zero_point, qmin, qmax, n);
        return;
    }
    for (int64_t k = 0; k < n; k++) {
        double xv = x[k];
        if (!isfinite(xv)) { a->n_nonfinite++; continue; }
        int64_t p = param[k];
        double s = scale[p];
        double q = xq[k];
        double e = q - xv;
        double ae = fabs(e);
        double lsb = s * fp8_spacing(code_dtype, xv / s);
        double el = lsb > 0 ? ae / lsb : (ae > 0 ? INFINITY : 0);
        double lim = (double)qmax * s; /* qmax = largest finite code value */
        int clipped = fabs(xv) > lim + TM_QDIFF_MAX_LSB_TOL * s * fp8_spacing(code_dtype, (double)qmax);
        a->n++;
        a->sum_x2 += xv * xv;
        a->sum_q2 += q * q;
        a->sum_xq += xv * q;
        a->sum_e2 += e * e;
        a->sum_l2 += el * el;
        if (ae > a->max_abs) a->max_abs = ae;
        if (el > a->max_lsb) a->max_lsb = el;
        if (clipped) {
            a->n_clipped++;
        } else {
            if (el > a->max_lsb_unclipped) a->max_lsb_unclipped = el;
            if (el > TM_QDIFF_MAX_LSB_TOL) a->n_beyond++;
        }
        if (a->n_params > 0 && p >= 0 && p < a->n_params) {
            a->param_sum_l2[p] += el * el;
            a->param_n[p]++;
        }
    }
}

void tm_erracc_merge(tm_erracc *into, const tm_erracc *from) {
    into->n += from->n;
    into->n_clipped += from->n_clipped;
    into->n_nonfinite += from->n_nonfinite;
    into->n_beyond += from->n_beyond;
    into->sum_x2 += from->sum_x2;
    into->sum_e2 += from->sum_e2;
    into->sum_l2 += from->sum_l2;
    into->sum_q2 += from->sum_q2;
    into->sum_xq += from->sum_xq;
    if (from->max_abs > into->max_abs) into->max_abs = from->max_abs;
    if (from->max_lsb > into->max_lsb) into->max_lsb = from->max_lsb;
    if (from->max_lsb_unclipped > into->max_lsb_unclipped)
        into->max_lsb_unclipped = from->max_lsb_unclipped;
    if (into->n_params > 0 && from->n_params == into->n_params) {
        for (int64_t p = 0; p < into->n_params; p++) {
            into->param_sum_l2[p] += from->param_sum_l2[p];
            into->param_n[p] += from->param_n[p];
        }
    }
}

void tm_erracc_summary(const tm_erracc *a, tm_errsum *o) {
    memset(o, 0, sizeof *o);
    o->n = a->n;
    o->n_nonfinite = a->n_nonfinite;
    o->worst_group = -1;
    if (a->n == 0) { o->sqnr_db = INFINITY; o->cosine = 1; return; }
    double nn = (double)a->n;
    if (a->sum_e2 == 0) o->sqnr_db = INFINITY;
    else if (a->sum_x2 == 0) o->sqnr_db = -INFINITY;
    else o->sqnr_db = 10.0 * log10(a->sum_x2 / a->sum_e2);
    o->rmse = sqrt(a->sum_e2 / nn);
    o->rmse_lsb = sqrt(a->sum_l2 / nn);
    o->max_abs_err = a->max_abs;
    o->max_err_lsb = a->max_lsb;
    o->max_err_lsb_unclipped = a->max_lsb_unclipped;
    o->n_beyond_half_lsb = a->n_beyond;
    o->clipped_fraction = (double)a->n_clipped / nn;
    double den = sqrt(a->sum_x2) * sqrt(a->sum_q2);
    o->cosine = den > 0 ? a->sum_xq / den : (a->sum_x2 == a->sum_q2 ? 1.0 : 0.0);
    double worst = -1;
    for (int64_t p = 0; p < a->n_params; p++) {
        if (a->param_n[p] == 0) continue;
        double r = sqrt(a->param_sum_l2[p] / (double)a->param_n[p]);
        if (r > worst) { worst = r; o->worst_group = p; }
    }
    o->worst_group_rmse_lsb = worst < 0 ? 0 : worst;
}
