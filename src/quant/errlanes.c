/*
** errlanes.c: the error-statistics kernels of the kernel table (kernels.h err_run): the sums of
** one run of elements sharing one scale, for tm_erracc_add_run / tm_erracc_add
** (src/analysis/errstats.c; definitions: docs/qdiff.md). Pure numerics: the analysis layer
** calls them through the kernel set.
*/
#include "kernels.h"

#include <math.h>

/* Integer codes: one scale per run of elements sharing a param (a row, a group), so the
** per-element work is a few multiply-adds on local accumulators.
**
** Summation order (fixed, so results never depend on the kernel, the thread count or the CPU):
** within a run, element i of the run goes to lane i % RUN_LANES while whole groups of RUN_LANES
** remain; the last (run length % RUN_LANES) elements go, in order, to a tail accumulator; the run's
** total is the tail plus lanes 0..RUN_LANES-1 in that order. A non-finite x contributes +0 to
** every sum and nothing to the counts (skipping it and adding +0 give the same bits, because
** every lane starts at +0). Each lane adds its products with one rounding, fma(a, b, sum) (C99
** fma, exact everywhere; _mm256_fmadd_pd in the AVX2 lanes). The products of two float32 values
** are exact in a double anyway, so this changes nothing there; only e * e of a large error can
** differ from a separate multiply and add.
**
** Errors in LSB: when the run's scale s is finite and positive ("a good scale"), inv = 1/s is one
** constant for the run, so the lanes keep only errors in the tensor's units and the LSB figures
** are derived once per run: the sum of squared LSB errors is (run total of e^2) * inv * inv, the
** largest LSB error is (largest |e|) * inv, the largest unclipped one (largest unclipped |e|) *
** inv (exact: multiplying by a positive constant keeps the order). Only "|e| * inv > tolerance"
** (n_beyond) is still tested per element. With a bad scale (zero, negative, NaN, inf) the lanes
** sum the per-element LSB errors themselves (|e| * inv for s = +inf, +inf or 0 when s <= 0).
**
** tm__err_run_ref is the reference. run_sums_avx2 computes the same lanes in AVX2 registers (the
** "avx2" and "avx512" sets' err_run for a good scale; those sets need AVX2 and FMA): it checks first that no x of the
** run is outside [lo, hi] (the run's minimum and maximum), then sums without masks and checks
** that every x was finite (each lane's sum of x^2 is finite exactly then: a finite float32
** squared cannot overflow a double) and that the largest |e| * inv is within the tolerance (then
** no element's is); otherwise it measures the run with the per-element masks.
** tests/unit/test_quant_kernels.c and tests/unit/test_qjob_fast.c compare the two. */
#define RUN_LANES 8

typedef struct run_lane {
    double sx2, sq2, sxq, se2, mabs, mabsu; /* every scale                                    */
    double sl2, mlsb, mlsbu;                /* bad scales only (good: derived in lanes_total) */
    int64_t cnt, clip, beyond;
} run_lane;

static inline int good_scale(double s) { return s > 0 && isfinite(s); }

static inline void lane_add(run_lane *l, double xv, double q, double s, double inv, double lo, double hi) {
    double e = q - xv, ae = fabs(e);
    l->cnt++;
    l->sx2 = fma(xv, xv, l->sx2);
    l->sq2 = fma(q, q, l->sq2);
    l->sxq = fma(xv, q, l->sxq);
    l->se2 = fma(e, e, l->se2);
    if (ae > l->mabs) l->mabs = ae;
    int clipped = xv < lo || xv > hi;
    if (clipped) l->clip++;
    else if (ae > l->mabsu) l->mabsu = ae;
    if (good_scale(s)) {
        if (!clipped && ae * inv > TM_QDIFF_MAX_LSB_TOL) l->beyond++;
        return;
    }
    double el = s > 0 ? ae * inv : (ae > 0 ? INFINITY : 0);
    l->sl2 += el * el;
    if (el > l->mlsb) l->mlsb = el;
    if (!clipped) {
        if (el > l->mlsbu) l->mlsbu = el;
        if (el > TM_QDIFF_MAX_LSB_TOL) l->beyond++;
    }
}

/* total = tail, then += lane 0 .. RUN_LANES-1; then the LSB figures of a good scale */
static void lanes_total(const run_lane *lanes, const run_lane *tail, int64_t nonfin, double s, double inv,
                        tm__err_run *o) {
    o->sx2 = tail->sx2; o->sq2 = tail->sq2; o->sxq = tail->sxq; o->se2 = tail->se2; o->sl2 = tail->sl2;
    o->mabs = tail->mabs; o->mlsb = tail->mlsb; o->mlsbu = tail->mlsbu;
    double mabsu = tail->mabsu;
    o->cnt = tail->cnt; o->clip = tail->clip; o->beyond = tail->beyond; o->nonfin = nonfin;
    for (int k = 0; k < RUN_LANES; k++) {
        const run_lane *l = &lanes[k];
        o->sx2 += l->sx2; o->sq2 += l->sq2; o->sxq += l->sxq; o->se2 += l->se2; o->sl2 += l->sl2;
        if (l->mabs > o->mabs) o->mabs = l->mabs;
        if (l->mabsu > mabsu) mabsu = l->mabsu;
        if (l->mlsb > o->mlsb) o->mlsb = l->mlsb;
        if (l->mlsbu > o->mlsbu) o->mlsbu = l->mlsbu;
        o->cnt += l->cnt; o->clip += l->clip; o->beyond += l->beyond;
    }
    if (good_scale(s)) {
        o->sl2 = o->se2 * inv * inv;
        o->mlsb = o->mabs * inv;
        o->mlsbu = mabsu * inv;
    }
}

void tm__err_run_ref(const float *x, const float *xq, int64_t n, double s, double inv, double lo,
                     double hi, tm__err_run *o) {
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
    lanes_total(lanes, &tail, nonfin, s, inv, o);
}



#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TM_ES_AVX2 __attribute__((target("avx2,fma")))

/* The lanes of the whole groups of 8 (lane 4v+k is element k of vector v), with the
** per-element masks: any x, any clipping. Good scale only. Returns the index after the last whole
** group. */
TM_ES_AVX2 static int64_t lanes_masked_avx2(const float *x, const float *xq, int64_t n, double inv,
                                            double lo, double hi, run_lane *lanes) {
    const __m256d sign = _mm256_set1_pd(-0.0), vinf = _mm256_set1_pd(INFINITY);
    const __m256d vinv = _mm256_set1_pd(inv), vlo = _mm256_set1_pd(lo), vhi = _mm256_set1_pd(hi);
    const __m256d vtol = _mm256_set1_pd(TM_QDIFF_MAX_LSB_TOL);
    __m256d sx2[2], sq2[2], sxq[2], se2[2], mabs[2], mabsu[2];
    __m256i cnt[2], clip[2], beyond[2];
    for (int v = 0; v < 2; v++) {
        sx2[v] = sq2[v] = sxq[v] = se2[v] = mabs[v] = mabsu[v] = _mm256_setzero_pd();
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
            sx2[v] = _mm256_fmadd_pd(xv, xv, sx2[v]);
            sq2[v] = _mm256_fmadd_pd(q, q, sq2[v]);
            sxq[v] = _mm256_fmadd_pd(xv, q, sxq[v]);
            se2[v] = _mm256_fmadd_pd(e, e, se2[v]);
            mabs[v] = _mm256_max_pd(ae, mabs[v]);
            const __m256d in = _mm256_and_pd(_mm256_cmp_pd(xv, vlo, _CMP_GE_OQ), _mm256_cmp_pd(xv, vhi, _CMP_LE_OQ));
            const __m256d unclipped = _mm256_and_pd(in, fin), clipped = _mm256_andnot_pd(in, fin);
            mabsu[v] = _mm256_max_pd(_mm256_and_pd(ae, unclipped), mabsu[v]);
            const __m256d bey = _mm256_and_pd(_mm256_cmp_pd(_mm256_mul_pd(ae, vinv), vtol, _CMP_GT_OQ), unclipped);
            cnt[v] = _mm256_sub_epi64(cnt[v], _mm256_castpd_si256(fin));
            clip[v] = _mm256_sub_epi64(clip[v], _mm256_castpd_si256(clipped));
            beyond[v] = _mm256_sub_epi64(beyond[v], _mm256_castpd_si256(bey));
        }
    }
    for (int v = 0; v < 2; v++) {
        double d[4];
        int64_t c[4];
#define LANE_STORE(field, vec) _mm256_storeu_pd(d, vec); for (int k = 0; k < 4; k++) lanes[4 * v + k].field = d[k];
#define LANE_STORE_I(field, vec) _mm256_storeu_si256((__m256i *)(void *)c, vec); for (int k = 0; k < 4; k++) lanes[4 * v + k].field = c[k];
        LANE_STORE(sx2, sx2[v]) LANE_STORE(sq2, sq2[v]) LANE_STORE(sxq, sxq[v]) LANE_STORE(se2, se2[v])
        LANE_STORE(mabs, mabs[v]) LANE_STORE(mabsu, mabsu[v])
        LANE_STORE_I(cnt, cnt[v]) LANE_STORE_I(clip, clip[v]) LANE_STORE_I(beyond, beyond[v])
#undef LANE_STORE
#undef LANE_STORE_I
    }
    return i;
}

/* Four lanes of run_sums_avx2: x and xq widened to double, e = xq - x, sums of x^2, xq^2, x*xq
** and e^2 fused into the accumulators, |e| into the running maximum. max_pd returns its
** second operand when the first is NaN: a NaN |e| is skipped, as in lane_add. */
TM_ES_AVX2 static inline void sums4_avx2(const float *x, const float *xq, __m256d sign, __m256d *sx2,
                                         __m256d *sq2, __m256d *sxq, __m256d *se2, __m256d *mabs) {
    const __m256d xv = _mm256_cvtps_pd(_mm_loadu_ps(x)), qv = _mm256_cvtps_pd(_mm_loadu_ps(xq));
    const __m256d e = _mm256_sub_pd(qv, xv);
    *sx2 = _mm256_fmadd_pd(xv, xv, *sx2);
    *sq2 = _mm256_fmadd_pd(qv, qv, *sq2);
    *sxq = _mm256_fmadd_pd(xv, qv, *sxq);
    *se2 = _mm256_fmadd_pd(e, e, *se2);
    *mabs = _mm256_max_pd(_mm256_andnot_pd(sign, e), *mabs);
}

/* tm__err_run_ref for a good scale, the same 8 lanes as 2 vectors of 4 doubles (AVX2 and FMA).
** The sums have no masks (see the comment on RUN_LANES); it keeps one
** maximum of |e| for all lanes (a maximum does not depend on the order, and without clipping
** every lane's unclipped maximum is its maximum). */
TM_ES_AVX2 static void run_sums_avx2(const float *x, const float *xq, int64_t n, double s, double inv,
                                     double lo, double hi, tm__err_run *o) {
    const __m256d sign = _mm256_set1_pd(-0.0);
    __m256d sx2a = _mm256_setzero_pd(), sx2b = sx2a, sq2a = sx2a, sq2b = sx2a, sxqa = sx2a, sxqb = sx2a;
    __m256d se2a = sx2a, se2b = sx2a, mabs = sx2a;
    const int64_t full = n / RUN_LANES * RUN_LANES;
    int ok = 1;
    if (full > 0) {
        /* clipping first, in a pass of its own (the run is in the cache): the sums below then
        ** keep all their accumulators in registers */
        __m256 vmin = _mm256_set1_ps(INFINITY), vmax = _mm256_set1_ps(-INFINITY);
        for (int64_t k = 0; k < full; k += RUN_LANES) {
            const __m256 x8 = _mm256_loadu_ps(x + k);
            vmin = _mm256_min_ps(vmin, x8);
            vmax = _mm256_max_ps(vmax, x8);
        }
        float fmn[8], fmx[8];
        _mm256_storeu_ps(fmn, vmin);
        _mm256_storeu_ps(fmx, vmax);
        float mn = fmn[0], mx = fmx[0];
        for (int k = 1; k < 8; k++) {
            mn = fmn[k] < mn ? fmn[k] : mn;
            mx = fmx[k] > mx ? fmx[k] : mx;
        }
        ok = (double)mn >= lo && (double)mx <= hi; /* false too when NaN took part */
    }
    int64_t i = 0;
    for (; ok && i < full; i += RUN_LANES) {
        /* lanes 0-3, then lanes 4-7: few registers live at once, no accumulator spilled */
        sums4_avx2(x + i, xq + i, sign, &sx2a, &sq2a, &sxqa, &se2a, &mabs);
        sums4_avx2(x + i + 4, xq + i + 4, sign, &sx2b, &sq2b, &sxqb, &se2b, &mabs);
    }
    double hm = 0;
    if (ok && full > 0) {
        const __m256d vinf = _mm256_set1_pd(INFINITY);
        const __m256d fin = _mm256_and_pd(_mm256_cmp_pd(sx2a, vinf, _CMP_LT_OQ), _mm256_cmp_pd(sx2b, vinf, _CMP_LT_OQ));
        double m[4];
        _mm256_storeu_pd(m, mabs);
        for (int k = 0; k < 4; k++) hm = m[k] > hm ? m[k] : hm;
        ok = _mm256_movemask_pd(fin) == 0xf && !(hm * inv > TM_QDIFF_MAX_LSB_TOL);
    }
    if (!ok) {
        i = full;
        run_lane lanes[RUN_LANES], tail;
        memset(lanes, 0, sizeof lanes);
        memset(&tail, 0, sizeof tail);
        lanes_masked_avx2(x, xq, n, inv, lo, hi, lanes);
        int64_t nonfin = 0;
        for (int k = 0; k < RUN_LANES; k++) nonfin += full / RUN_LANES - lanes[k].cnt;
        for (; i < n; i++) {
            double xv = x[i];
            if (!isfinite(xv)) { nonfin++; continue; }
            lane_add(&tail, xv, xq[i], s, inv, lo, hi);
        }
        lanes_total(lanes, &tail, nonfin, s, inv, o);
        return;
    }
    /* every x of the whole groups finite, none clipped, no |e| * inv beyond the tolerance: lane k
    ** has full / RUN_LANES elements, no clip, nothing beyond, and its largest unclipped |e| is
    ** its largest |e|; the totals as lanes_total forms them (tail first, then lanes 0..7) */
    double a[RUN_LANES], b[RUN_LANES], c[RUN_LANES], d[RUN_LANES];
    _mm256_storeu_pd(a, sx2a); _mm256_storeu_pd(a + 4, sx2b);
    _mm256_storeu_pd(b, sq2a); _mm256_storeu_pd(b + 4, sq2b);
    _mm256_storeu_pd(c, sxqa); _mm256_storeu_pd(c + 4, sxqb);
    _mm256_storeu_pd(d, se2a); _mm256_storeu_pd(d + 4, se2b);
    double tx2 = 0, tq2 = 0, txq = 0, te2 = 0, tm = 0, tmu = 0;
    int64_t cnt = full, clip = 0, beyond = 0, nonfin = 0;
    if (i < n) {
        run_lane tail;
        memset(&tail, 0, sizeof tail);
        for (; i < n; i++) {
            double xv = x[i];
            if (!isfinite(xv)) { nonfin++; continue; }
            lane_add(&tail, xv, xq[i], s, inv, lo, hi);
        }
        tx2 = tail.sx2; tq2 = tail.sq2; txq = tail.sxq; te2 = tail.se2; tm = tail.mabs; tmu = tail.mabsu;
        cnt += tail.cnt; clip = tail.clip; beyond = tail.beyond;
    }
    for (int k = 0; k < RUN_LANES; k++) {
        tx2 += a[k]; tq2 += b[k]; txq += c[k]; te2 += d[k];
    }
    if (hm > tm) tm = hm;
    if (hm > tmu) tmu = hm;
    o->sx2 = tx2; o->sq2 = tq2; o->sxq = txq; o->se2 = te2;
    o->mabs = tm;
    o->sl2 = te2 * inv * inv;
    o->mlsb = tm * inv;
    o->mlsbu = tmu * inv;
    o->cnt = cnt;
    o->clip = clip;
    o->beyond = beyond;
    o->nonfin = nonfin;
}
#define TM_ES_HAVE_AVX2 1
#endif

#ifdef TM_HAVE_X86_KERNELS
/* The "avx2" and "avx512" sets' err_run: the AVX2 lanes for a good scale, else the reference. */
void tm__err_run_avx2(const float *x, const float *xq, int64_t n, double s, double inv, double lo,
                      double hi, tm__err_run *o) {
#ifdef TM_ES_HAVE_AVX2
    if (good_scale(s)) {
        run_sums_avx2(x, xq, n, s, inv, lo, hi, o);
        return;
    }
#endif
    tm__err_run_ref(x, xq, n, s, inv, lo, hi, o);
}
#endif
