/*
** ggml_quant_avx2.c: AVX2 variants of the Q8_0 and Q4_0 block quantizers and of the K-quant
** scale searches make_qkx2_quants (Q2_K, Q4_K, Q5_K), make_qx_quants (Q6_K) and make_q3_quants
** (Q3_K); ggml_quant.c holds the scalar specification. Compiled for every x86-64 build with __attribute__((target("avx2"))) (never
** -march); ggml_quant.c calls them only after __builtin_cpu_supports("avx2").
** Byte-identical to the scalar code, because every lane does the scalar arithmetic:
**   Q8_0/Q4_0: one IEEE multiply (x * id), one add (+ 8.5f), truncation or half-away-from-zero
**   rounding done exactly (below); the per-block maximum is order-free; d and id come from the
**   scalar expressions;
**   the scale searches: 8 independent sub-blocks, one per lane, each lane's sums accumulated in
**   the scalar order (a reduction is never reordered), intrinsics never fused.
** tests/unit/test_ggml_quant.c compares both paths (vectors and random rows).
*/
#include "ggml_quant_impl.h"

#ifdef TM_GQ_HAVE_AVX2
#include <immintrin.h>
#include <math.h>

#define TM_AVX2 __attribute__((target("avx2")))

/* max |x| of 32 values (exact: max is order-free). */
TM_AVX2 static inline float absmax32(const float *x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(x));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8)));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 16)));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 24)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

static inline float inv_or_zero(float d) {
    if (!d) return 0.0f;
    float id = 1.0f / d;
    return isinf(id) ? 0.0f : id;
}

/* roundf(v) (half away from zero) for |v| < 2^23, as int32 lanes: t = trunc|v|; the
** difference |v| - t is exact, so "+1 when it is >= 0.5" is exactly roundf. */
TM_AVX2 static inline __m256i roundf_epi32(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 a = _mm256_andnot_ps(sign, v);
    __m256 t = _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 up = _mm256_cmp_ps(_mm256_sub_ps(a, t), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    t = _mm256_add_ps(t, _mm256_and_ps(up, _mm256_set1_ps(1.0f)));
    return _mm256_cvttps_epi32(_mm256_or_ps(t, _mm256_and_ps(sign, v)));
}

TM_AVX2 int64_t tm__gq_q8_0_avx2(const float *x, int64_t nb, uint8_t *y) {
    for (int64_t b = 0; b < nb; b++, x += 32, y += 34) {
        const float amax = absmax32(x);
        const float d = amax / 127;
        const float id = inv_or_zero(d);
        uint16_t h = tm_f32_to_f16(d);
        if ((h & 0x7c00u) == 0x7c00u) return b;
        tm__st16(y, h);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q0 = roundf_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), vid));
        __m256i q1 = roundf_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), vid));
        __m256i q2 = roundf_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), vid));
        __m256i q3 = roundf_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), vid));
        /* |q| <= 127: the saturating packs keep every value; undo their lane interleave */
        __m256i p01 = _mm256_packs_epi32(q0, q1), p23 = _mm256_packs_epi32(q2, q3);
        __m256i p = _mm256_packs_epi16(p01, p23);
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(void *)(y + 2), p);
    }
    return -1;
}

TM_AVX2 int64_t tm__gq_q4_0_avx2(const float *x, int64_t nb, uint8_t *y) {
    for (int64_t b = 0; b < nb; b++, x += 32, y += 18) {
        const float amax = absmax32(x);
        float max = 0.0f; /* the first value of largest magnitude, as the scalar scan finds it */
        if (amax > 0.0f) {
            const __m256 sign = _mm256_set1_ps(-0.0f), va = _mm256_set1_ps(amax);
            uint32_t bits = 0;
            for (int k = 0; k < 4; k++) {
                __m256 eq = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)), va, _CMP_EQ_OQ);
                bits |= (uint32_t)_mm256_movemask_ps(eq) << (8 * k);
            }
            max = x[__builtin_ctz(bits)]; /* bits != 0: amax is one of the |x| */
        }
        const float d = max / -8;
        const float id = inv_or_zero(d);
        uint16_t h = tm_f32_to_f16(d);
        if ((h & 0x7c00u) == 0x7c00u) return b;
        tm__st16(y, h);
        const __m256 vid = _mm256_set1_ps(id), half = _mm256_set1_ps(8.5f);
        const __m256i fifteen = _mm256_set1_epi32(15);
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vid), half);
            q[k] = _mm256_min_epi32(_mm256_cvttps_epi32(v), fifteen); /* v >= 0.5: trunc = (int8_t) */
        }
        /* qs[j] = q[j] | q[j+16] << 4 */
        __m256i lo0 = q[0], lo1 = q[1], hi0 = _mm256_slli_epi32(q[2], 4), hi1 = _mm256_slli_epi32(q[3], 4);
        __m256i b0 = _mm256_or_si256(lo0, hi0), b1 = _mm256_or_si256(lo1, hi1);
        __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(b0, b1), _mm256_setzero_si256());
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm_storeu_si128((__m128i *)(void *)(y + 2), _mm256_castsi256_si128(p));
    }
    return -1;
}
#endif

#ifdef TM_GQ_HAVE_AVX2
/* ---------------------------------------------------------------------------------------- */
/* make_qkx2_quants on 8 sub-blocks at once, one sub-block per lane                          */
/* ---------------------------------------------------------------------------------------- */

/* nearest_int of every lane: the same float add of 1.5 * 2^23 and mantissa read. */
TM_AVX2 static inline __m256i nearest_int8(__m256 v) {
    __m256i i = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12582912.f)));
    return _mm256_sub_epi32(_mm256_and_si256(i, _mm256_set1_epi32(0x007fffff)),
                            _mm256_set1_epi32(0x00400000));
}

TM_AVX2 static inline __m256i clamp8(__m256i v, int hi) {
    return _mm256_min_epi32(_mm256_max_epi32(v, _mm256_setzero_si256()), _mm256_set1_epi32(hi));
}

TM_AVX2 static inline __m256 err_term(__m256 diff, int use_mad) {
    return use_mad ? _mm256_andnot_ps(_mm256_set1_ps(-0.0f), diff) : _mm256_mul_ps(diff, diff);
}

/* Lane k runs the scalar make_qkx2_quants over x[k*n .. k*n+n) with weights w[k*n ..]: every
** sum in the scalar order, every expression with the scalar's operations, so each lane's
** result is the scalar result. */
TM_AVX2 void tm__gq_qkx2_x8_avx2(const float *x, const float *w, int n, int nmax, float rmin,
                                 float rdelta, int nstep, int use_mad, uint8_t *L,
                                 float *scales, float *the_mins) {
    __m256 xt[32], wt[32];
    __m256i Lv[32], La[32];
    const __m256i idx = _mm256_setr_epi32(0, n, 2 * n, 3 * n, 4 * n, 5 * n, 6 * n, 7 * n);
    xt[0] = wt[0] = _mm256_setzero_ps(); /* n >= 1 always; this keeps the compiler sure */
    for (int i = 0; i < n; i++) {
        xt[i] = _mm256_i32gather_ps(x + i, idx, 4);
        wt[i] = _mm256_i32gather_ps(w + i, idx, 4);
    }
    __m256 min = xt[0], max = xt[0];
    __m256 sum_w = wt[0];
    __m256 sum_x = _mm256_mul_ps(sum_w, xt[0]);
    for (int i = 1; i < n; i++) {
        min = _mm256_min_ps(xt[i], min); /* (x < min) ? x : min */
        max = _mm256_max_ps(xt[i], max); /* (x > max) ? x : max */
        sum_w = _mm256_add_ps(sum_w, wt[i]);
        sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(wt[i], xt[i]));
    }
    const __m256 zero = _mm256_setzero_ps();
    min = _mm256_blendv_ps(min, zero, _mm256_cmp_ps(min, zero, _CMP_GT_OQ));
    const __m256 degenerate = _mm256_cmp_ps(max, min, _CMP_EQ_OQ);
    const __m256 fnmax = _mm256_set1_ps((float)nmax);
    __m256 iscale = _mm256_div_ps(fnmax, _mm256_sub_ps(max, min));
    __m256 scale = _mm256_div_ps(_mm256_set1_ps(1.0f), iscale);
    __m256 best_error = zero;
    for (int i = 0; i < n; i++) {
        Lv[i] = clamp8(nearest_int8(_mm256_mul_ps(iscale, _mm256_sub_ps(xt[i], min))), nmax);
        __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(Lv[i])), min), xt[i]);
        best_error = _mm256_add_ps(best_error, _mm256_mul_ps(wt[i], err_term(diff, use_mad)));
    }
    for (int is = 0; nstep >= 1 && is <= nstep; ++is) {
        const float num = rmin + rdelta * is + nmax;
        iscale = _mm256_div_ps(_mm256_set1_ps(num), _mm256_sub_ps(max, min));
        __m256 sum_l = zero, sum_l2 = zero, sum_xl = zero;
        for (int i = 0; i < n; i++) {
            La[i] = clamp8(nearest_int8(_mm256_mul_ps(iscale, _mm256_sub_ps(xt[i], min))), nmax);
            __m256 l = _mm256_cvtepi32_ps(La[i]);
            __m256 wl = _mm256_mul_ps(wt[i], l);
            sum_l = _mm256_add_ps(sum_l, wl);
            sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(wl, l));
            sum_xl = _mm256_add_ps(sum_xl, _mm256_mul_ps(wl, xt[i]));
        }
        __m256 D = _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_l2), _mm256_mul_ps(sum_l, sum_l));
        __m256 dpos = _mm256_cmp_ps(D, zero, _CMP_GT_OQ);
        if (_mm256_movemask_ps(dpos) == 0) continue;
        __m256 this_scale = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_w, sum_xl), _mm256_mul_ps(sum_x, sum_l)), D);
        __m256 this_min = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_l2, sum_x), _mm256_mul_ps(sum_l, sum_xl)), D);
        __m256 mpos = _mm256_cmp_ps(this_min, zero, _CMP_GT_OQ);
        this_min = _mm256_blendv_ps(this_min, zero, mpos);
        this_scale = _mm256_blendv_ps(this_scale, _mm256_div_ps(sum_xl, sum_l2), mpos);
        __m256 cur_error = zero;
        for (int i = 0; i < n; i++) {
            __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(this_scale, _mm256_cvtepi32_ps(La[i])), this_min), xt[i]);
            cur_error = _mm256_add_ps(cur_error, _mm256_mul_ps(wt[i], err_term(diff, use_mad)));
        }
        __m256 take = _mm256_and_ps(dpos, _mm256_cmp_ps(cur_error, best_error, _CMP_LT_OQ));
        take = _mm256_andnot_ps(degenerate, take); /* the scalar code returned early there */
        if (_mm256_movemask_ps(take) == 0) continue;
        __m256i ti = _mm256_castps_si256(take);
        for (int i = 0; i < n; i++) Lv[i] = _mm256_blendv_epi8(Lv[i], La[i], ti);
        best_error = _mm256_blendv_ps(best_error, cur_error, take);
        scale = _mm256_blendv_ps(scale, this_scale, take);
        min = _mm256_blendv_ps(min, this_min, take);
    }
    /* degenerate lanes (max == min): codes 0, scale 0 */
    scale = _mm256_blendv_ps(scale, zero, degenerate);
    __m256i dg = _mm256_castps_si256(degenerate);
    float sc[8], mn[8];
    _mm256_storeu_ps(sc, scale);
    _mm256_storeu_ps(mn, min);
    for (int k = 0; k < 8; k++) {
        scales[k] = sc[k];
        the_mins[k] = -mn[k];
    }
    for (int i = 0; i < n; i++) {
        int32_t l[8];
        _mm256_storeu_si256((__m256i *)(void *)l, _mm256_andnot_si256(dg, Lv[i]));
        for (int k = 0; k < 8; k++) L[k * n + i] = (uint8_t)l[k];
    }
}
#endif

#ifdef TM_GQ_HAVE_AVX2
/* make_qx_quants (rmse_type 1: weights x^2, no importance) on 8 sub-blocks of n values, one per
** lane, each lane in the scalar order. Used by Q6_K (n 16, nmax 32). */
TM_AVX2 void tm__gq_qx_x8_avx2(const float *x, int n, int nmax, int8_t *L, float *scales) {
    __m256 xt[32], wt[32];
    __m256i Lv[32];
    const __m256i idx = _mm256_setr_epi32(0, n, 2 * n, 3 * n, 4 * n, 5 * n, 6 * n, 7 * n);
    const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
    const __m256i lo = _mm256_set1_epi32(-nmax), hi = _mm256_set1_epi32(nmax - 1);
    __m256 amax = zero, max = zero;
    xt[0] = wt[0] = zero;
    for (int i = 0; i < n; i++) {
        xt[i] = _mm256_i32gather_ps(x + i, idx, 4);
        wt[i] = _mm256_mul_ps(xt[i], xt[i]);
        __m256 ax = _mm256_andnot_ps(sign, xt[i]);
        __m256 gt = _mm256_cmp_ps(ax, amax, _CMP_GT_OQ); /* first largest wins */
        amax = _mm256_blendv_ps(amax, ax, gt);
        max = _mm256_blendv_ps(max, xt[i], gt);
    }
    const __m256 allzero = _mm256_cmp_ps(amax, _mm256_set1_ps(1e-15f), _CMP_LT_OQ);
    __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)-nmax), max);
    __m256 sumlx = zero, suml2 = zero;
    for (int i = 0; i < n; i++) {
        __m256i l = _mm256_min_epi32(_mm256_max_epi32(nearest_int8(_mm256_mul_ps(iscale, xt[i])), lo), hi);
        Lv[i] = l;
        __m256 lf = _mm256_cvtepi32_ps(l);
        sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(wt[i], xt[i]), lf));
        suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(wt[i], lf), lf));
    }
    __m256 nz = _mm256_cmp_ps(suml2, zero, _CMP_NEQ_UQ);
    __m256 scale = _mm256_and_ps(nz, _mm256_div_ps(sumlx, suml2));
    __m256 best = _mm256_mul_ps(scale, sumlx);
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        const float num = -(nmax + 0.1f * is);
        iscale = _mm256_div_ps(_mm256_set1_ps(num), max);
        __m256i La[32];
        sumlx = suml2 = zero;
        for (int i = 0; i < n; i++) {
            __m256i l = _mm256_min_epi32(_mm256_max_epi32(nearest_int8(_mm256_mul_ps(iscale, xt[i])), lo), hi);
            La[i] = l;
            __m256 lf = _mm256_cvtepi32_ps(l);
            sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(wt[i], xt[i]), lf));
            suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(wt[i], lf), lf));
        }
        __m256 take = _mm256_and_ps(_mm256_cmp_ps(suml2, zero, _CMP_GT_OQ),
                                    _mm256_cmp_ps(_mm256_mul_ps(sumlx, sumlx), _mm256_mul_ps(best, suml2), _CMP_GT_OQ));
        take = _mm256_andnot_ps(allzero, take);
        if (_mm256_movemask_ps(take) == 0) continue;
        __m256i ti = _mm256_castps_si256(take);
        for (int i = 0; i < n; i++) Lv[i] = _mm256_blendv_epi8(Lv[i], La[i], ti);
        __m256 ns = _mm256_div_ps(sumlx, suml2);
        scale = _mm256_blendv_ps(scale, ns, take);
        best = _mm256_blendv_ps(best, _mm256_mul_ps(ns, sumlx), take);
    }
    scale = _mm256_andnot_ps(allzero, scale); /* all-zero sub-blocks: codes 0, scale 0 */
    __m256i az = _mm256_castps_si256(allzero);
    _mm256_storeu_ps(scales, scale);
    for (int i = 0; i < n; i++) {
        int32_t l[8];
        __m256i v = _mm256_add_epi32(Lv[i], _mm256_set1_epi32(nmax));
        _mm256_storeu_si256((__m256i *)(void *)l, _mm256_andnot_si256(az, v));
        for (int k = 0; k < 8; k++) L[k * n + i] = (int8_t)l[k];
    }
}
#endif

#ifdef TM_GQ_HAVE_AVX2
/* make_q3_quants with rmse (Q3_K: n 16, nmax 4) on 8 sub-blocks, one per lane. The scalar code
** stops its coordinate-descent passes when a pass changes nothing; a lane that has stopped
** changing would change nothing in a further pass either (the pass depends only on the state,
** which is unchanged), so running all lanes until no lane changes gives every lane the scalar
** result. */
TM_AVX2 void tm__gq_q3_x8_avx2(const float *x, int n, int nmax, int8_t *L, float *scales) {
    __m256 xt[32], wt[32], wx[32], Lf[32];
    const __m256i idx = _mm256_setr_epi32(0, n, 2 * n, 3 * n, 4 * n, 5 * n, 6 * n, 7 * n);
    const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
    const __m256i lo = _mm256_set1_epi32(-nmax), hi = _mm256_set1_epi32(nmax - 1);
    __m256 amax = zero, max = zero;
    xt[0] = wt[0] = zero;
    for (int i = 0; i < n; i++) {
        xt[i] = _mm256_i32gather_ps(x + i, idx, 4);
        wt[i] = _mm256_mul_ps(xt[i], xt[i]);
        wx[i] = _mm256_mul_ps(wt[i], xt[i]); /* w*x, the first product of w*x*l */
        __m256 ax = _mm256_andnot_ps(sign, xt[i]);
        __m256 gt = _mm256_cmp_ps(ax, amax, _CMP_GT_OQ);
        amax = _mm256_blendv_ps(amax, ax, gt);
        max = _mm256_blendv_ps(max, xt[i], gt);
    }
    const __m256 allzero = _mm256_cmp_ps(amax, _mm256_set1_ps(1e-15f), _CMP_LT_OQ);
    const __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)-nmax), max);
    __m256 sumlx = zero, suml2 = zero;
    for (int i = 0; i < n; i++) {
        __m256i l = _mm256_min_epi32(_mm256_max_epi32(nearest_int8(_mm256_mul_ps(iscale, xt[i])), lo), hi);
        Lf[i] = _mm256_cvtepi32_ps(l);
        sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(wx[i], Lf[i]));
        suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(wt[i], Lf[i]), Lf[i]));
    }
    for (int itry = 0; itry < 5; ++itry) {
        __m256 changed = zero;
        for (int i = 0; i < n; i++) {
            __m256 slx = _mm256_sub_ps(sumlx, _mm256_mul_ps(wx[i], Lf[i]));
            __m256 ok = _mm256_cmp_ps(slx, zero, _CMP_GT_OQ);
            if (_mm256_movemask_ps(ok) == 0) continue;
            __m256 sl2 = _mm256_sub_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(wt[i], Lf[i]), Lf[i]));
            __m256i nl = nearest_int8(_mm256_div_ps(_mm256_mul_ps(xt[i], sl2), slx));
            __m256 nlf = _mm256_cvtepi32_ps(_mm256_min_epi32(_mm256_max_epi32(nl, lo), hi));
            ok = _mm256_and_ps(ok, _mm256_cmp_ps(nlf, Lf[i], _CMP_NEQ_OQ));
            slx = _mm256_add_ps(slx, _mm256_mul_ps(wx[i], nlf));
            sl2 = _mm256_add_ps(sl2, _mm256_mul_ps(_mm256_mul_ps(wt[i], nlf), nlf));
            __m256 better = _mm256_cmp_ps(_mm256_mul_ps(_mm256_mul_ps(slx, slx), suml2),
                                          _mm256_mul_ps(_mm256_mul_ps(sumlx, sumlx), sl2), _CMP_GT_OQ);
            ok = _mm256_and_ps(ok, _mm256_and_ps(_mm256_cmp_ps(sl2, zero, _CMP_GT_OQ), better));
            Lf[i] = _mm256_blendv_ps(Lf[i], nlf, ok);
            sumlx = _mm256_blendv_ps(sumlx, slx, ok);
            suml2 = _mm256_blendv_ps(suml2, sl2, ok);
            changed = _mm256_or_ps(changed, ok);
        }
        if (_mm256_movemask_ps(_mm256_andnot_ps(allzero, changed)) == 0) break;
    }
    _mm256_storeu_ps(scales, _mm256_andnot_ps(allzero, _mm256_div_ps(sumlx, suml2)));
    __m256i az = _mm256_castps_si256(allzero);
    for (int i = 0; i < n; i++) {
        int32_t l[8];
        __m256i v = _mm256_add_epi32(_mm256_cvtps_epi32(Lf[i]), _mm256_set1_epi32(nmax));
        _mm256_storeu_si256((__m256i *)(void *)l, _mm256_andnot_si256(az, v));
        for (int k = 0; k < 8; k++) L[k * n + i] = (int8_t)l[k];
    }
}
#endif
