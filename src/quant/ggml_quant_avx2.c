/*
** ggml_quant_avx2.c: AVX2 variants of the Q8_0 and Q4_0 block quantizers (8 blocks at a time,
** F16C for the f16 scales), of the K-quant scale searches make_qkx2_quants (Q2_K, Q4_K, Q5_K),
** make_qx_quants (Q6_K) and make_q3_quants (Q3_K), of Q6_K's final codes, and of the GGUF job's
** error lanes (ggml_quant_impl.h); ggml_quant.c holds the scalar specification. Compiled for every
** x86-64 build with __attribute__((target("avx2"))) or ("avx2,f16c") (never -march); ggml_quant.c
** calls them only after __builtin_cpu_supports("avx2") (and tm__cpu_has_f16c() for Q8_0/Q4_0).
** Byte-identical to the scalar code, because every lane does the scalar arithmetic:
**   Q8_0/Q4_0: one IEEE multiply (x * id), one add (+ 8.5f), truncation or half-away-from-zero
**   rounding done exactly (below); the per-block maximum is order-free; d = amax / 127 (or
**   max / -8) and id = 1/d are IEEE divisions as in the scalar code, 8 blocks per instruction;
**   F16C's round-to-nearest-even conversion gives tm_f32_to_f16's bits for every float32;
**   the scale searches: 8 independent sub-blocks, one per lane, each lane's sums accumulated in
**   the scalar order (a reduction is never reordered), intrinsics never fused;
**   the error lanes: lane k of tm__gq_err in lane k of two double vectors, the scalar
**   expressions in double, from the dequantizer's own product (float)q * d.
** tests/unit/test_ggml_quant.c compares both paths (vectors and random rows).
*/
#include "ggml_quant_impl.h"

#ifdef TM__GQ_HAVE_AVX2
#include <immintrin.h>
#include <math.h>

#include "ggml_quant_avx2_blk.h"

/* Error lanes and the Q8_0 / Q4_0 kernels follow below. */
#endif

#ifdef TM__GQ_HAVE_AVX2
/* ---------------------------------------------------------------------------------------- */
/* Error lanes                                                                               */
/* ---------------------------------------------------------------------------------------- */

/* The 8 lanes of tm__gq_err in two registers per sum: lo = lanes 0-3, hi = lanes 4-7. */
typedef struct { __m256d xl, xh, el, eh, ml, mh; } err_regs;

TM_AVX2 TM_INLINE void err_load(err_regs *r, const tm__gq_err *a) {
    r->xl = _mm256_loadu_pd(a->x2);   r->xh = _mm256_loadu_pd(a->x2 + 4);
    r->el = _mm256_loadu_pd(a->e2);   r->eh = _mm256_loadu_pd(a->e2 + 4);
    r->ml = _mm256_loadu_pd(a->emax); r->mh = _mm256_loadu_pd(a->emax + 4);
}

TM_AVX2 TM_INLINE void err_store(const err_regs *r, tm__gq_err *a) {
    _mm256_storeu_pd(a->x2, r->xl);   _mm256_storeu_pd(a->x2 + 4, r->xh);
    _mm256_storeu_pd(a->e2, r->el);   _mm256_storeu_pd(a->e2 + 4, r->eh);
    _mm256_storeu_pd(a->emax, r->ml); _mm256_storeu_pd(a->emax + 4, r->mh);
}

/* 8 values (lanes 0-7): x and their dequantized values dq, as floats. Each lane: x2 += x*x,
** e = x - dq, e2 += e*e, m = max(|e|, m): the scalar expressions in double, never fused. */
TM_AVX2 TM_INLINE void err_step(err_regs *r, __m256 x, __m256 dq) {
    const __m256d sign = _mm256_set1_pd(-0.0);
    const __m256d xl = _mm256_cvtps_pd(_mm256_castps256_ps128(x)), xh = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    const __m256d dl = _mm256_cvtps_pd(_mm256_castps256_ps128(dq)), dh = _mm256_cvtps_pd(_mm256_extractf128_ps(dq, 1));
    const __m256d el = _mm256_sub_pd(xl, dl), eh = _mm256_sub_pd(xh, dh);
    r->xl = _mm256_add_pd(r->xl, _mm256_mul_pd(xl, xl));
    r->xh = _mm256_add_pd(r->xh, _mm256_mul_pd(xh, xh));
    r->el = _mm256_add_pd(r->el, _mm256_mul_pd(el, el));
    r->eh = _mm256_add_pd(r->eh, _mm256_mul_pd(eh, eh));
    r->ml = _mm256_max_pd(_mm256_andnot_pd(sign, el), r->ml);
    r->mh = _mm256_max_pd(_mm256_andnot_pd(sign, eh), r->mh);
}

TM_AVX2 void tm__gq_err_lanes_avx2(tm__gq_err *a, const float *x, const float *dq, int64_t n) {
    err_regs r;
    err_load(&r, a);
    for (int64_t i = 0; i + 8 <= n; i += 8) err_step(&r, _mm256_loadu_ps(x + i), _mm256_loadu_ps(dq + i));
    err_store(&r, a);
}

/* The final codes of one super-block of 16 sub-blocks of 16: L = clamp(nearest_int(x / d[j]),
** -nmax, nmax - 1) + nmax where d[j] != 0 (Q6_K: nmax 32, Q3_K: 4). */
TM_AVX2 TM_INLINE void k_codes(const float *x, const float *d, int8_t *L, tm__gq_err *acc, const int with_err,
                               const int nmax) {
    err_regs r;
    if (with_err) err_load(&r, acc);
    const __m256i lo = _mm256_set1_epi32(-nmax), hi = _mm256_set1_epi32(nmax - 1), off = _mm256_set1_epi32(nmax);
    for (int j = 0; j < 16; j++) {
        const __m256 vd = _mm256_broadcast_ss(&d[j]);
        for (int h = 0; h < 2; h++) {
            const float *xp = x + 16 * j + 8 * h;
            int8_t *lp = L + 16 * j + 8 * h;
            const __m256 xv = _mm256_loadu_ps(xp);
            __m256i l;
            if (d[j] != 0.0f) {
                /* nearest_int's bit trick on the IEEE quotient, for any quotient (inf too) */
                const __m256i s = _mm256_castps_si256(_mm256_add_ps(_mm256_div_ps(xv, vd), _mm256_set1_ps(12582912.f)));
                l = _mm256_sub_epi32(_mm256_and_si256(s, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00400000));
                l = _mm256_min_epi32(_mm256_max_epi32(l, lo), hi);
                /* 8 codes in [0, 2 nmax) to bytes */
                const __m256i c = _mm256_add_epi32(l, off);
                const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
                _mm_storel_epi64((__m128i *)(void *)lp, _mm_packs_epi16(w, w));
            } else {
                l = _mm256_sub_epi32(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)lp)), off);
            }
            if (with_err) err_step(&r, xv, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(l)));
        }
    }
    if (with_err) err_store(&r, acc);
}

TM_AVX2 void tm__gq_q6_k_codes_avx2(const float *x, const float *d, int8_t *L, tm__gq_err *acc) {
    if (acc) k_codes(x, d, L, acc, 1, 32);
    else k_codes(x, d, L, NULL, 0, 32);
}

TM_AVX2 void tm__gq_q3_k_codes_avx2(const float *x, const float *d, int8_t *L) {
    k_codes(x, d, L, NULL, 0, 4);
}

/* ---------------------------------------------------------------------------------------- */
/* Q8_0 and Q4_0, 8 blocks at a time                                                         */
/* ---------------------------------------------------------------------------------------- */

/* roundf(v) (half away from zero) for |v| < 2^23, as int32 lanes: t = trunc|v|; the
** difference |v| - t is exact, so "+1 when it is >= 0.5" is exactly roundf. */
TM_AVX2_F16C TM_INLINE __m256i roundf_epi32(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 a = _mm256_andnot_ps(sign, v);
    __m256 t = _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 up = _mm256_cmp_ps(_mm256_sub_ps(a, t), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    t = _mm256_add_ps(t, _mm256_and_ps(up, _mm256_set1_ps(1.0f)));
    return _mm256_cvttps_epi32(_mm256_or_ps(t, _mm256_and_ps(sign, v)));
}

/* Q8_0 (the scalar q8_0_block): d = amax / 127, id = 1/d, q = roundf(x * id); with_err: the
** error of dq = (float)q * d16, the dequantizer's product. */
TM_AVX2_F16C TM_INLINE int64_t q8_0_x8(const float *x, int64_t nb, uint8_t *y, tm__gq_err *acc, const int with_err) {
    err_regs r;
    if (with_err) err_load(&r, acc);
    int64_t ret = -1;
    for (int64_t b = 0; b < nb; b += 8) {
        const int nk = nb - b < 8 ? (int)(nb - b) : 8;
        const __m256 amax = _mm256_castsi256_ps(absmax_x8(x, nk));
        uint16_t h[8];
        float df[8], id[8];
        int bad = scales_x8(_mm256_div_ps(amax, _mm256_set1_ps(127.0f)), h, df, id) & ((1 << (2 * nk)) - 1);
        const int kend = bad ? __builtin_ctz((unsigned)bad) / 2 : nk;
        for (int k = 0; k < kend; k++, x += 32, y += 34) {
            tm__st16(y, h[k]);
            const __m256 vid = _mm256_broadcast_ss(&id[k]);
            __m256i q[4];
            for (int i = 0; i < 4; i++) {
                const __m256 xv = _mm256_loadu_ps(x + 8 * i);
                q[i] = roundf_epi32(_mm256_mul_ps(xv, vid));
                if (with_err) err_step(&r, xv, _mm256_mul_ps(_mm256_cvtepi32_ps(q[i]), _mm256_broadcast_ss(&df[k])));
            }
            /* |q| <= 127: the saturating packs keep every value; undo their lane interleave */
            __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(void *)(y + 2), p);
        }
        if (bad) {
            ret = b + kend;
            break;
        }
    }
    if (with_err) err_store(&r, acc);
    return ret;
}

/* Q4_0 (the scalar q4_0_block): max = the first value of largest magnitude (+0 when all are
** zero), d = max / -8, q = min(15, (int)(x * id + 8.5)); with_err: dq = (float)((q & 15) - 8) * d16. */
TM_AVX2_F16C TM_INLINE int64_t q4_0_x8(const float *x, int64_t nb, uint8_t *y, tm__gq_err *acc, const int with_err) {
    err_regs r;
    if (with_err) err_load(&r, acc);
    int64_t ret = -1;
    for (int64_t b = 0; b < nb; b += 8) {
        const int nk = nb - b < 8 ? (int)(nb - b) : 8;
        uint16_t h[8];
        float df[8], id[8];
        int bad = scales_x8(_mm256_div_ps(signed_absmax_x8(x, nk), _mm256_set1_ps(-8.0f)), h, df, id) & ((1 << (2 * nk)) - 1);
        const int kend = bad ? __builtin_ctz((unsigned)bad) / 2 : nk;
        const __m256 half = _mm256_set1_ps(8.5f);
        const __m256i fifteen = _mm256_set1_epi32(15), eight = _mm256_set1_epi32(8);
        for (int k = 0; k < kend; k++, x += 32, y += 18) {
            tm__st16(y, h[k]);
            const __m256 vid = _mm256_broadcast_ss(&id[k]);
            __m256i q[4];
            for (int i = 0; i < 4; i++) {
                const __m256 xv = _mm256_loadu_ps(x + 8 * i);
                /* v >= 0.5: truncation is the reference's (int8_t) conversion */
                q[i] = _mm256_min_epi32(_mm256_cvttps_epi32(_mm256_add_ps(_mm256_mul_ps(xv, vid), half)), fifteen);
                if (with_err) {
                    const __m256i c = _mm256_sub_epi32(_mm256_and_si256(q[i], fifteen), eight);
                    err_step(&r, xv, _mm256_mul_ps(_mm256_cvtepi32_ps(c), _mm256_broadcast_ss(&df[k])));
                }
            }
            /* qs[j] = q[j] | q[j+16] << 4 */
            __m256i b0 = _mm256_or_si256(q[0], _mm256_slli_epi32(q[2], 4));
            __m256i b1 = _mm256_or_si256(q[1], _mm256_slli_epi32(q[3], 4));
            __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(b0, b1), _mm256_setzero_si256());
            p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm_storeu_si128((__m128i *)(void *)(y + 2), _mm256_castsi256_si128(p));
        }
        if (bad) {
            ret = b + kend;
            break;
        }
    }
    if (with_err) err_store(&r, acc);
    return ret;
}

TM_AVX2_F16C int64_t tm__gq_q8_0_avx2(const float *x, int64_t nb, uint8_t *y, tm__gq_err *acc) {
    return acc ? q8_0_x8(x, nb, y, acc, 1) : q8_0_x8(x, nb, y, NULL, 0);
}

TM_AVX2_F16C int64_t tm__gq_q4_0_avx2(const float *x, int64_t nb, uint8_t *y, tm__gq_err *acc) {
    return acc ? q4_0_x8(x, nb, y, acc, 1) : q4_0_x8(x, nb, y, NULL, 0);
}
#endif

#ifdef TM__GQ_HAVE_AVX2
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

#ifdef TM__GQ_HAVE_AVX2
/* make_qx_quants (rmse_type 1: weights x^2, no importance) on 8 sub-blocks of n values, one per
** lane, each lane in the scalar order. Used by Q6_K (n 16, nmax 32).
** The codes are kept as floats: |iscale * x| <= (nmax + 0.9) (1 + 2^-22) because |x| <= |max|,
** and for |v| < 2^22 nearest_int(v) (the sum v + 1.5 * 2^23, rounded to nearest even, read from
** the mantissa) is v rounded to the nearest integer, ties to even: VROUNDPS's mode 0; clamping
** and converting the integer, or clamping the float, then give the same float l. Lanes whose max is (near) zero compute
** garbage (inf * 0) and are discarded at the end, as before.
** The 18 trial scales run three at a time (independent sums, so the adds of three chains
** overlap); their comparisons with the best so far then run in the scalar order. A trial's codes
** are recomputed (the same expression) only when some lane takes it. */
TM_AVX2 TM_INLINE __m256 qx_code(__m256 iscale, __m256 x, __m256 lo, __m256 hi) {
    __m256 l = _mm256_round_ps(_mm256_mul_ps(iscale, x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm256_min_ps(_mm256_max_ps(l, lo), hi);
}

/* out[i] lane k = r[k] lane i for i, k < 8: an 8x8 transpose (of any 32-bit values). */
TM_AVX2 TM_INLINE void transpose8r(const __m256 *r, __m256 *out) {
    __m256 t[8], u[8];
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
        u[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
        u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
        u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
        u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
    }
    for (int k = 0; k < 4; k++) {
        out[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
        out[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
    }
}

/* out[i] lane k = p[k * stride + i] for i, k < 8. */
TM_AVX2 TM_INLINE void transpose8(const float *p, int stride, __m256 *out) {
    __m256 r[8];
    for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(p + k * stride);
    transpose8r(r, out);
}

TM_AVX2 TM_INLINE void qx_x8(const float *x, const float *w, const int n, const int nmax, int8_t *L, float *scales) {
    __m256 xt[32], wt[32], wx[32], Lv[32];
    const __m256i idx = _mm256_setr_epi32(0, n, 2 * n, 3 * n, 4 * n, 5 * n, 6 * n, 7 * n);
    const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
    const __m256 lo = _mm256_set1_ps((float)-nmax), hi = _mm256_set1_ps((float)(nmax - 1));
    __m256 amax = zero, max = zero;
    xt[0] = wt[0] = wx[0] = zero;
    if (n == 16 || n == 32) { /* lane k = sub-block k: n / 8 transposes instead of n gathers */
        for (int c = 0; c < n; c += 8) {
            transpose8(x + c, n, xt + c);
            if (w) transpose8(w + c, n, wt + c);
        }
    } else {
        for (int i = 0; i < n; i++) xt[i] = _mm256_i32gather_ps(x + i, idx, 4);
        for (int i = 0; w && i < n; i++) wt[i] = _mm256_i32gather_ps(w + i, idx, 4);
    }
    for (int i = 0; i < n; i++) {
        if (!w) wt[i] = _mm256_mul_ps(xt[i], xt[i]);
        wx[i] = _mm256_mul_ps(wt[i], xt[i]); /* w*x, the first product of w*x*l */
        __m256 ax = _mm256_andnot_ps(sign, xt[i]);
        __m256 gt = _mm256_cmp_ps(ax, amax, _CMP_GT_OQ); /* first largest wins */
        amax = _mm256_blendv_ps(amax, ax, gt);
        max = _mm256_blendv_ps(max, xt[i], gt);
    }
    const __m256 allzero = _mm256_cmp_ps(amax, _mm256_set1_ps(1e-15f), _CMP_LT_OQ);
    __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)-nmax), max);
    __m256 sumlx = zero, suml2 = zero;
    for (int i = 0; i < n; i++) {
        const __m256 l = qx_code(iscale, xt[i], lo, hi);
        Lv[i] = l;
        sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(wx[i], l));
        suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(wt[i], l), l));
    }
    __m256 nz = _mm256_cmp_ps(suml2, zero, _CMP_NEQ_UQ);
    __m256 scale = _mm256_and_ps(nz, _mm256_div_ps(sumlx, suml2));
    __m256 best = _mm256_mul_ps(scale, sumlx);
    static const int trials[18] = {-9, -8, -7, -6, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    for (int g = 0; g < 18; g += 3) {
        __m256 isc[3], slx[3], sl2[3];
        for (int k = 0; k < 3; k++) {
            isc[k] = _mm256_div_ps(_mm256_set1_ps(-(nmax + 0.1f * trials[g + k])), max);
            slx[k] = sl2[k] = zero;
        }
        for (int i = 0; i < n; i++) {
            for (int k = 0; k < 3; k++) {
                const __m256 l = qx_code(isc[k], xt[i], lo, hi);
                slx[k] = _mm256_add_ps(slx[k], _mm256_mul_ps(wx[i], l));
                sl2[k] = _mm256_add_ps(sl2[k], _mm256_mul_ps(_mm256_mul_ps(wt[i], l), l));
            }
        }
        for (int k = 0; k < 3; k++) {
            __m256 take = _mm256_and_ps(_mm256_cmp_ps(sl2[k], zero, _CMP_GT_OQ),
                                        _mm256_cmp_ps(_mm256_mul_ps(slx[k], slx[k]), _mm256_mul_ps(best, sl2[k]), _CMP_GT_OQ));
            take = _mm256_andnot_ps(allzero, take);
            if (_mm256_movemask_ps(take) == 0) continue;
            for (int i = 0; i < n; i++) Lv[i] = _mm256_blendv_ps(Lv[i], qx_code(isc[k], xt[i], lo, hi), take);
            __m256 ns = _mm256_div_ps(slx[k], sl2[k]);
            scale = _mm256_blendv_ps(scale, ns, take);
            best = _mm256_blendv_ps(best, _mm256_mul_ps(ns, slx[k]), take);
        }
    }
    scale = _mm256_andnot_ps(allzero, scale); /* all-zero sub-blocks: codes 0, scale 0 */
    __m256i az = _mm256_castps_si256(allzero);
    _mm256_storeu_ps(scales, scale);
    if (n == 16 || n == 32) { /* transpose back: row k = sub-block k's n codes (0..2 nmax - 1) as bytes */
        for (int h = 0; h < n; h += 16) {
            __m256 c[16], ra[8], rb[8];
            for (int i = 0; i < 16; i++)
                c[i] = _mm256_castsi256_ps(
                    _mm256_andnot_si256(az, _mm256_add_epi32(_mm256_cvttps_epi32(Lv[h + i]), _mm256_set1_epi32(nmax))));
            transpose8r(c, ra);
            transpose8r(c + 8, rb);
            for (int k = 0; k < 8; k++) {
                __m256i p = _mm256_packs_epi32(_mm256_castps_si256(ra[k]), _mm256_castps_si256(rb[k]));
                p = _mm256_permute4x64_epi64(p, 0xD8); /* codes h..h+7, h+8..h+15 as int16 in order */
                _mm_storeu_si128((__m128i *)(void *)(L + n * k + h),
                                 _mm_packs_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1)));
            }
        }
        return;
    }
    for (int i = 0; i < n; i++) {
        int32_t l[8];
        __m256i v = _mm256_add_epi32(_mm256_cvttps_epi32(Lv[i]), _mm256_set1_epi32(nmax));
        _mm256_storeu_si256((__m256i *)(void *)l, _mm256_andnot_si256(az, v));
        for (int k = 0; k < 8; k++) L[k * n + i] = (int8_t)l[k];
    }
}

TM_AVX2 void tm__gq_qx_x8_avx2(const float *x, const float *w, int n, int nmax, int8_t *L, float *scales) {
    /* constants the compiler unrolls: Q6_K, and Q4_0 / Q5_0 with an importance matrix */
    if (n == 16 && nmax == 32 && !w) qx_x8(x, NULL, 16, 32, L, scales);
    else if (n == 32 && nmax == 8 && w) qx_x8(x, w, 32, 8, L, scales);
    else if (n == 32 && nmax == 16 && w) qx_x8(x, w, 32, 16, L, scales);
    else qx_x8(x, w, n, nmax, L, scales);
}
#endif

#ifdef TM__GQ_HAVE_AVX2
/* make_q3_quants with rmse (Q3_K: n 16, nmax 4), one sub-block per lane. The scalar code
** stops its coordinate-descent passes when a pass changes nothing; a lane that has stopped
** changing would change nothing in a further pass either (the pass depends only on the state,
** which is unchanged), so running a group of lanes until none of them changes gives every lane
** the scalar result. Likewise an element at which no lane has a new code to try changes nothing
** and is skipped. */
/* The search on whole Q3_K super-blocks (16 sub-blocks of 16, nmax 4 each): G groups of
** 8 lanes (sub-blocks 0-7, 8-15, ...; G 2: one super-block, 4: two) interleaved, so the G
** dependency chains of the
** coordinate descent (each element's step needs the sums of the previous one) overlap. Each
** lane is still the scalar make_q3_quants; a group's passes stop when none of its lanes
** changed (a further pass over an unchanged lane changes nothing, as above). */
TM_AVX2 TM_INLINE void q3_xg(const float *x, int8_t *L, float *scales, const int G) {
    enum { N = 16, NMAX = 4, GMAX = 4 };
    __m256 xt[GMAX][N], wt[GMAX][N], wx[GMAX][N], Lf[GMAX][N];
    const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
    const __m256i lo = _mm256_set1_epi32(-NMAX), hi = _mm256_set1_epi32(NMAX - 1);
    __m256 allzero[GMAX], sumlx[GMAX], suml2[GMAX];
    for (int g = 0; g < G; g++) {
        __m256 amax = zero, max = zero;
        transpose8(x + 8 * N * g, N, xt[g]); /* lane k = sub-block k */
        transpose8(x + 8 * N * g + 8, N, xt[g] + 8);
        for (int i = 0; i < N; i++) {
            wt[g][i] = _mm256_mul_ps(xt[g][i], xt[g][i]);
            wx[g][i] = _mm256_mul_ps(wt[g][i], xt[g][i]); /* w*x, the first product of w*x*l */
            __m256 ax = _mm256_andnot_ps(sign, xt[g][i]);
            __m256 gt = _mm256_cmp_ps(ax, amax, _CMP_GT_OQ);
            amax = _mm256_blendv_ps(amax, ax, gt);
            max = _mm256_blendv_ps(max, xt[g][i], gt);
        }
        allzero[g] = _mm256_cmp_ps(amax, _mm256_set1_ps(1e-15f), _CMP_LT_OQ);
        const __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)-NMAX), max);
        __m256 slx = zero, sl2 = zero;
        for (int i = 0; i < N; i++) {
            __m256i l = _mm256_min_epi32(_mm256_max_epi32(nearest_int8(_mm256_mul_ps(iscale, xt[g][i])), lo), hi);
            Lf[g][i] = _mm256_cvtepi32_ps(l);
            slx = _mm256_add_ps(slx, _mm256_mul_ps(wx[g][i], Lf[g][i]));
            sl2 = _mm256_add_ps(sl2, _mm256_mul_ps(_mm256_mul_ps(wt[g][i], Lf[g][i]), Lf[g][i]));
        }
        sumlx[g] = slx;
        suml2[g] = sl2;
    }
    int active[GMAX] = {1, 1, 1, 1}; /* a group none of whose lanes changed in a pass is done */
    for (int itry = 0; itry < 5; ++itry) {
        __m256 changed[GMAX] = {zero, zero, zero, zero};
        for (int i = 0; i < N; i++) {
            for (int g = 0; g < G; g++) {
                if (!active[g]) continue;
                const __m256 li = Lf[g][i], sx = sumlx[g], s2 = suml2[g];
                __m256 slx = _mm256_sub_ps(sx, _mm256_mul_ps(wx[g][i], li));
                __m256 ok = _mm256_cmp_ps(slx, zero, _CMP_GT_OQ);
                __m256 sl2 = _mm256_sub_ps(s2, _mm256_mul_ps(_mm256_mul_ps(wt[g][i], li), li));
                __m256i nl = nearest_int8(_mm256_div_ps(_mm256_mul_ps(xt[g][i], sl2), slx));
                __m256 nlf = _mm256_cvtepi32_ps(_mm256_min_epi32(_mm256_max_epi32(nl, lo), hi));
                ok = _mm256_and_ps(ok, _mm256_cmp_ps(nlf, li, _CMP_NEQ_OQ));
                if (!_mm256_movemask_ps(ok)) continue; /* no lane has a new code to try: nothing changes */
                slx = _mm256_add_ps(slx, _mm256_mul_ps(wx[g][i], nlf));
                sl2 = _mm256_add_ps(sl2, _mm256_mul_ps(_mm256_mul_ps(wt[g][i], nlf), nlf));
                __m256 better = _mm256_cmp_ps(_mm256_mul_ps(_mm256_mul_ps(slx, slx), s2),
                                              _mm256_mul_ps(_mm256_mul_ps(sx, sx), sl2), _CMP_GT_OQ);
                ok = _mm256_and_ps(ok, _mm256_and_ps(_mm256_cmp_ps(sl2, zero, _CMP_GT_OQ), better));
                Lf[g][i] = _mm256_blendv_ps(li, nlf, ok);
                sumlx[g] = _mm256_blendv_ps(sx, slx, ok);
                suml2[g] = _mm256_blendv_ps(s2, sl2, ok);
                changed[g] = _mm256_or_ps(changed[g], _mm256_andnot_ps(allzero[g], ok));
            }
        }
        int any = 0;
        for (int g = 0; g < G; g++) {
            active[g] = active[g] && _mm256_movemask_ps(changed[g]) != 0;
            any |= active[g];
        }
        if (!any) break;
    }
    for (int g = 0; g < G; g++) {
        _mm256_storeu_ps(scales + 8 * g, _mm256_andnot_ps(allzero[g], _mm256_div_ps(sumlx[g], suml2[g])));
        const __m256i az = _mm256_castps_si256(allzero[g]);
        for (int h = 0; h < 2; h++) { /* codes 8h..8h+7 of each lane: transpose back, to bytes */
            __m256 v[8], r[8];
            for (int i = 0; i < 8; i++)
                v[i] = _mm256_castsi256_ps(_mm256_andnot_si256(
                    az, _mm256_add_epi32(_mm256_cvtps_epi32(Lf[g][8 * h + i]), _mm256_set1_epi32(NMAX))));
            transpose8r(v, r);
            for (int k = 0; k < 8; k++) {
                const __m256i c = _mm256_castps_si256(r[k]);
                const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
                _mm_storel_epi64((__m128i *)(void *)(L + 8 * N * g + k * N + 8 * h), _mm_packs_epi16(w, w));
            }
        }
    }
}

TM_AVX2 void tm__gq_q3_x16_avx2(const float *x, int8_t *L, float *scales) { q3_xg(x, L, scales, 2); }
TM_AVX2 void tm__gq_q3_x32_avx2(const float *x, int8_t *L, float *scales) { q3_xg(x, L, scales, 4); }

/* Q3_K's codes L[256] (0..7) into hmask[32] (bit k of byte m: code 32k + m > 3) and qs[64] (the
** low two bits, pack_2bit_k's layout: code j + 32k of each 128 in bits 2k..2k+1 of byte j). */
TM_AVX2 void tm__gq_q3_k_pack_avx2(const int8_t *L, uint8_t *hmask, uint8_t *qs) {
    const __m256i three = _mm256_set1_epi8(3);
    __m256i hm = _mm256_setzero_si256(), lo[8];
    for (int k = 0; k < 8; k++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(L + 32 * k));
        hm = _mm256_or_si256(hm, _mm256_and_si256(_mm256_cmpgt_epi8(v, three), _mm256_set1_epi8((char)(1 << k))));
        lo[k] = _mm256_and_si256(v, three);
    }
    _mm256_storeu_si256((__m256i *)(void *)hmask, hm);
    for (int h = 0; h < 2; h++) { /* bytes stay below 256: each 2-bit code moves inside its byte */
        __m256i q = _mm256_or_si256(lo[4 * h], _mm256_slli_epi16(lo[4 * h + 1], 2));
        q = _mm256_or_si256(q, _mm256_or_si256(_mm256_slli_epi16(lo[4 * h + 2], 4), _mm256_slli_epi16(lo[4 * h + 3], 6)));
        _mm256_storeu_si256((__m256i *)(void *)(qs + 32 * h), q);
    }
}
#endif
