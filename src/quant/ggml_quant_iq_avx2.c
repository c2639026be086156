/*
** ggml_quant_iq_avx2.c: AVX2 variants of the IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, TQ1_0 and TQ2_0
** quantizers of ggml_quant_iq.c
** (the scalar specification, byte for byte llama-quantize's quantize_iq4_nl / quantize_iq4_xs
** at c392e509). Compiled for every x86-64 build with __attribute__((target("avx2"))) (never
** -march, never FMA); reached only through the type table's quantize_simd column, which
** ggml_row.c takes with a kernel set whose ggml_simd is set ("avx2", "avx512": the CPU checked
** at run time, kernels.c).
**
** Same bytes as the scalar code because every lane does the scalar float32 arithmetic:
**   - the scale search of a sub-block of 32 (iq4_subblock_scale): its 16 trial inverse scales
**     (the first fit's 1/d, then (t - 127)/max for t = -7..7) sit in the 16 lanes of two
**     registers; every lane walks j = 0..31 in order and accumulates sumqx += (w q) x and
**     sumq2 += (w q) q as the scalar loop does (no reduction is reordered, no product fused);
**     the choice among the trials then runs in scalar code in the reference's order;
**   - the nearest code (best_index_int8 on kvalues_iq4nl): the bracket v[lo] <= x < v[lo+1]
**     by a 4-step bisection on lane-wise table look-ups (vpermps), then the same comparison
**     x - v[lo] < v[lo+1] - x as the scalar iq4_index; x is first clamped to v[15] with
**     min(x, 113), which maps NaN and +inf to 15 as the scalar code does;
**   - the weights qw sqrt(sigma2 + x^2) (correctly rounded square roots) or x^2.
** IQ3_XXS / IQ3_S (tm__iq3_trials_avx2): the scale trials 8 to a register, each lane the scalar
** trial; the best neighbour of an off-grid key for all the register's trials with that key at
** once, each lane at its own scale, the rows of its list in turn.
** IQ2_XXS / IQ2_XS / IQ2_S (tm__iq2_best_avx2): the best neighbour with the candidates in lanes.
** IQ2_XS / IQ2_S / IQ2_XXS (tm__iq2_trials16_avx2, tm__iq2_trials32_avx2): the scale trials of a
** sub-block of 16 / 32 in lanes; the neighbour searches of a run of trials with one key in one pass
** over its candidates (run_best_avx2).
** IQ1_S (tm__iq1s_splits_avx2): the split search, 4 values of i2 times 2 shifts in lanes.
** IQ1_S / IQ1_M (tm__iq1_sort_avx2): the stable sort of a sub-block by ranks counted in lanes.
** IQ1_M (tm__iq1m_splits_avx2): the split search, the 4 delta combinations' two sums in lanes.
** IQ1_S / IQ1_M (tm__iq1_best_avx2): the best neighbour, 8 candidates in lanes, terms looked up.
** TQ1_0 / TQ2_0: the block maximum and the trits 8 to a register, the packing on bytes.
** tests/unit/test_gguf_iq_simd.c compares the two paths on random and edge rows.
*/
#include "core/core.h"
#include "ggml_round.h"
#include "ggml_traits.h"
#include "ggml_quant_iq.h"
#include "ggml_quant_iq2.h"

#include <float.h>
#include <stdlib.h>

#ifdef TM__GQ_HAVE_AVX2
#include <immintrin.h>
#include <math.h>

#define TM_AVX2 __attribute__((target("avx2")))
#define TM_INLINE static inline __attribute__((always_inline))

/* The least of v's 8 lanes, broadcast to every lane. The callers' dead lanes hold +inf and
** their NaN distances were replaced by +inf, so min is exact and order-independent. */
TM_AVX2 TM_INLINE __m256 hmin8_avx2(__m256 v) {
    __m256 m = _mm256_min_ps(v, _mm256_permute2f128_ps(v, v, 1));
    m = _mm256_min_ps(m, _mm256_shuffle_ps(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm256_min_ps(m, _mm256_shuffle_ps(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
}

/* One step of a first-strict-minimum search over candidates j0..j0+7 held in the lanes of d2:
** if d2's least lane is below *best, it becomes *best and *at the first candidate holding it
** (the scalar walk's choice: a later equal distance never replaces an earlier one). */
TM_AVX2 TM_INLINE void keep_first_min_avx2(__m256 d2, int j0, float *best, int *at) {
    const __m256 m = hmin8_avx2(d2);
    const float mn = _mm256_cvtss_f32(m);
    if (mn < *best) {
        *best = mn;
        *at = j0 + __builtin_ctz((unsigned)_mm256_movemask_ps(_mm256_cmp_ps(d2, m, _CMP_EQ_OQ)));
    }
}

/* The least candidate index bi[e] over the lanes e whose running minimum bv[e] equals m (the
** broadcast least of bv): per-lane minima kept with strict <, so this is the list's first
** strict minimum, as the one-lane walk finds. */
TM_AVX2 TM_INLINE int least_index_at_min_avx2(__m256 bv, __m256i bi, __m256 m) {
    int32_t ji[8];
    _mm256_storeu_si256((__m256i *)ji, bi);
    const unsigned eq = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(bv, m, _CMP_EQ_OQ));
    int b = INT32_MAX;
    for (int e = 0; e < 8; e++)
        if ((eq >> e & 1) && ji[e] < b) b = ji[e];
    return b;
}
#define QK_K 256
#define GROUP_MAX_EPS 1e-15f /* as ggml_quant_iq.c */

/* kvalues_iq4nl (ggml-common.h) as float32. */
static const float kv[16] = {-127.f, -104.f, -83.f, -65.f, -49.f, -35.f, -22.f, -10.f,
                             1.f,    13.f,   25.f,  38.f,  53.f,  69.f,  89.f,  113.f};

/* The look-up tables of the bisection, each indexed lane-wise by vpermps (low 3 bits). */
typedef struct iq4_lut {
    __m256 lo, hi;   /* v[0..7], v[8..15]                                              */
    __m256 nlo, nhi; /* v[1..8], v[9..15] and 256 (above every clamped x)              */
    __m256 s3;       /* step 3, indexed by lo/2 (lo in {0,4,8,12}): v[lo + 2]          */
    __m256 s4;       /* step 4, indexed by lo/2 (lo even): v[lo + 1]                   */
    __m256 v4, v8, v12, vmax;
} iq4_lut;

TM_AVX2 TM_INLINE void iq4_lut_init(iq4_lut *t) {
    t->lo = _mm256_loadu_ps(kv);
    t->hi = _mm256_loadu_ps(kv + 8);
    t->nlo = _mm256_loadu_ps(kv + 1);
    t->nhi = _mm256_setr_ps(kv[9], kv[10], kv[11], kv[12], kv[13], kv[14], kv[15], 256.f);
    t->s3 = _mm256_setr_ps(kv[2], 0, kv[6], 0, kv[10], 0, kv[14], 0);
    t->s4 = _mm256_setr_ps(kv[1], kv[3], kv[5], kv[7], kv[9], kv[11], kv[13], kv[15]);
    t->v4 = _mm256_set1_ps(kv[4]);
    t->v8 = _mm256_set1_ps(kv[8]);
    t->v12 = _mm256_set1_ps(kv[12]);
    t->vmax = _mm256_set1_ps(kv[15]);
}

/* The nearest code of each lane of x (as iq4_index): its value into *q, its index returned. */
TM_AVX2 TM_INLINE __m256i iq4_nearest(const iq4_lut *t, __m256 x, __m256 *q) {
    x = _mm256_min_ps(x, t->vmax); /* x < 113 ? x : 113: NaN and x >= 113 -> 113 */
    const __m256 m8 = _mm256_cmp_ps(x, t->v8, _CMP_GE_OQ);
    __m256i lo = _mm256_and_si256(_mm256_castps_si256(m8), _mm256_set1_epi32(8));
    const __m256 m4 = _mm256_cmp_ps(x, _mm256_blendv_ps(t->v4, t->v12, m8), _CMP_GE_OQ);
    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_castps_si256(m4), _mm256_set1_epi32(4)));
    const __m256 m2 = _mm256_cmp_ps(x, _mm256_permutevar8x32_ps(t->s3, _mm256_srli_epi32(lo, 1)), _CMP_GE_OQ);
    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_castps_si256(m2), _mm256_set1_epi32(2)));
    const __m256 m1 = _mm256_cmp_ps(x, _mm256_permutevar8x32_ps(t->s4, _mm256_srli_epi32(lo, 1)), _CMP_GE_OQ);
    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_castps_si256(m1), _mm256_set1_epi32(1)));
    const __m256 vlo = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t->lo, lo), _mm256_permutevar8x32_ps(t->hi, lo), m8);
    const __m256 vhi = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t->nlo, lo), _mm256_permutevar8x32_ps(t->nhi, lo), m8);
    const __m256 below = _mm256_cmp_ps(_mm256_sub_ps(x, vlo), _mm256_sub_ps(vhi, x), _CMP_LT_OQ);
    *q = _mm256_blendv_ps(vhi, vlo, below);
    /* lo + 1, less one where the lower value is nearer (below is -1 there) */
    return _mm256_add_epi32(_mm256_add_epi32(lo, _mm256_set1_epi32(1)), _mm256_castps_si256(below));
}

/* iq4_subblock_scale (ggml_quant_iq.c) with the 16 trials in lanes. */
TM_AVX2 static float iq4_scale_avx2(const iq4_lut *t, const float *xb, const float *w) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        float ax = fabsf(xb[j]);
        if (ax > amax) {
            amax = ax;
            max = xb[j];
        }
    }
    if (amax < GROUP_MAX_EPS) return 0.0f;
    float ids[16];
    ids[0] = 1 / (-max / kv[0]);
    for (int itry = -7; itry <= 7; itry++) ids[itry + 8] = (itry + kv[0]) / max;
    const __m256 ida = _mm256_loadu_ps(ids), idb = _mm256_loadu_ps(ids + 8);
    __m256 qxa = _mm256_setzero_ps(), q2a = qxa, qxb = qxa, q2b = qxa;
    for (int j = 0; j < 32; j++) {
        const __m256 xj = _mm256_set1_ps(xb[j]), wj = _mm256_set1_ps(w[j]);
        __m256 qa, qb;
        (void)iq4_nearest(t, _mm256_mul_ps(ida, xj), &qa);
        (void)iq4_nearest(t, _mm256_mul_ps(idb, xj), &qb);
        const __m256 wqa = _mm256_mul_ps(wj, qa), wqb = _mm256_mul_ps(wj, qb);
        qxa = _mm256_add_ps(qxa, _mm256_mul_ps(wqa, xj));
        q2a = _mm256_add_ps(q2a, _mm256_mul_ps(wqa, qa));
        qxb = _mm256_add_ps(qxb, _mm256_mul_ps(wqb, xj));
        q2b = _mm256_add_ps(q2b, _mm256_mul_ps(wqb, qb));
    }
    float sqx[16], sq2[16];
    _mm256_storeu_ps(sqx, qxa);
    _mm256_storeu_ps(sqx + 8, qxb);
    _mm256_storeu_ps(sq2, q2a);
    _mm256_storeu_ps(sq2 + 8, q2b);
    float d = sqx[0] / sq2[0];
    float best = d * sqx[0];
    for (int k = 1; k < 16; k++)
        if (sq2[k] > 0 && sqx[k] * sqx[k] > best * sq2[k]) {
            d = sqx[k] / sq2[k];
            best = d * sqx[k];
        }
    return d;
}

/* The codes of 32 values x at inverse scale id, packed as IQ4_NL's qs (code j in the low
** nibble of byte j, code j + 16 in its high nibble). */
TM_AVX2 TM_INLINE void iq4_codes_avx2(const iq4_lut *t, const float *x, float id, uint8_t *qs) {
    const __m256 idv = _mm256_set1_ps(id);
    __m256 q;
    const __m256i c0 = iq4_nearest(t, _mm256_mul_ps(idv, _mm256_loadu_ps(x)), &q);
    const __m256i c1 = iq4_nearest(t, _mm256_mul_ps(idv, _mm256_loadu_ps(x + 8)), &q);
    const __m256i c2 = iq4_nearest(t, _mm256_mul_ps(idv, _mm256_loadu_ps(x + 16)), &q);
    const __m256i c3 = iq4_nearest(t, _mm256_mul_ps(idv, _mm256_loadu_ps(x + 24)), &q);
    const __m256i b0 = _mm256_or_si256(c0, _mm256_slli_epi32(c2, 4)); /* bytes 0..7  */
    const __m256i b1 = _mm256_or_si256(c1, _mm256_slli_epi32(c3, 4)); /* bytes 8..15 */
    /* 16 int32 (each < 256) -> 16 bytes in order */
    const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(b0, b1), 0xd8);
    const __m128i p = _mm_packus_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1));
    _mm_storeu_si128((__m128i *)qs, p);
}

/* The weights of 32 values (subblock_weights of ggml_quant_iq.c). */
TM_AVX2 TM_INLINE void iq4_weights_avx2(const float *xb, const float *qw, float sigma2, float *w) {
    const __m256 s2 = _mm256_set1_ps(sigma2);
    for (int j = 0; j < 32; j += 8) {
        const __m256 x = _mm256_loadu_ps(xb + j), x2 = _mm256_mul_ps(x, x);
        const __m256 v = qw ? _mm256_mul_ps(_mm256_loadu_ps(qw + j), _mm256_sqrt_ps(_mm256_add_ps(s2, x2))) : x2;
        _mm256_storeu_ps(w + j, v);
    }
}

/* f16 of f at p, or TM_E_RANGE where it overflows (put_f16 of ggml_quant_iq.c). */
static tm_status put_f16(uint8_t *p, float f, int64_t blk, tm_err *err) {
    uint16_t h = tm_f32_to_f16(f);
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) == 0)
        return tm__err_set(err, TM_E_RANGE, -1, "block %lld: d = %g does not fit float16 (largest 65504)",
                           (long long)blk, (double)f);
    tm__st16(p, h);
    return TM_OK;
}


/* iq4_nl_block of ggml_quant_iq.c. */
TM_AVX2 static tm_status iq4_nl_block_avx2(const iq4_lut *t, const float *x, const float *qw, uint8_t *y,
                                           int64_t blk, tm_err *err) {
    float w[32];
    float sigma2 = 0;
    for (int j = 0; j < 32; j++) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / 32;
    iq4_weights_avx2(x, qw, sigma2, w);
    float d = iq4_scale_avx2(t, x, w);
    tm_status st = put_f16(y, d, blk, err);
    if (st) return st;
    float id = d ? 1 / d : 0;
    if (isinf(id)) id = 0;
    iq4_codes_avx2(t, x, id, y + 2);
    return TM_OK;
}

/* iq4_xs_block of ggml_quant_iq.c. */
TM_AVX2 static tm_status iq4_xs_block_avx2(const iq4_lut *t, const float *x, const float *qw, uint8_t *y,
                                           int64_t blk, tm_err *err) {
    float scales[8], w[32];
    float sigma2 = 0;
    for (int j = 0; j < QK_K; j++) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / QK_K;
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < 8; ib++) {
        iq4_weights_avx2(x + 32 * ib, qw ? qw + 32 * ib : NULL, sigma2, w);
        scales[ib] = iq4_scale_avx2(t, x + 32 * ib, w);
        float ad = fabsf(scales[ib]);
        if (ad > amax_scale) {
            amax_scale = ad;
            max_scale = scales[ib];
        }
    }
    const float d = -max_scale / 32;
    tm_status st = put_f16(y, d, blk, err);
    if (st) return st;
    const float id = d ? 1 / d : 0.f;
    uint16_t sh = 0;
    uint8_t *sl = y + 4, *qs = y + 8;
    memset(sl, 0, 4);
    for (int ib = 0; ib < 8; ib++) {
        int l = nearest_int(id * scales[ib]);
        l = l < -32 ? -32 : l > 31 ? 31 : l;
        float dl = d * l;
        float idl = dl ? 1 / dl : 0.f;
        iq4_codes_avx2(t, x + 32 * ib, idl, qs + 16 * ib);
        l += 32;
        sl[ib / 2] |= (uint8_t)((l & 0xf) << 4 * (ib % 2));
        sh |= (uint16_t)((l >> 4) << 2 * ib);
    }
    tm__st16(y + 2, sh);
    return TM_OK;
}

TM_AVX2 tm_status tm__gq_rows_iq4_nl_avx2(const tm_ggml_type_info *ti, const float *x, const float *imatrix,
                                          int64_t b0, int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    iq4_lut t;
    iq4_lut_init(&t);
    for (int64_t b = b0; b < nb; b++) {
        tm_status st = iq4_nl_block_avx2(&t, x + b * 32, imatrix ? imatrix + b * 32 : NULL,
                                         y + (size_t)b * ti->type_size, b, err);
        if (st) {
            if (bad_block) *bad_block = b;
            return st;
        }
    }
    return TM_OK;
}

TM_AVX2 tm_status tm__gq_rows_iq4_xs_avx2(const tm_ggml_type_info *ti, const float *x, const float *imatrix,
                                          int64_t b0, int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    iq4_lut t;
    iq4_lut_init(&t);
    for (int64_t b = b0; b < nb; b++) {
        tm_status st = iq4_xs_block_avx2(&t, x + b * QK_K, imatrix ? imatrix + b * QK_K : NULL,
                                         y + (size_t)b * ti->type_size, b, err);
        if (st) {
            if (bad_block) *bad_block = b;
            return st;
        }
    }
    return TM_OK;
}
/* ---------------------------------------------------------------------------------------- */
/* IQ3_XXS / IQ3_S: the scale trials, 8 to a register                                        */
/* ---------------------------------------------------------------------------------------- */

/* iq3_best_neighbour (ggml_quant_iq.c) of off-grid key u for the 8 trials of a register at
** once, each lane at its own scale s (the trials in lanes, the list's rows one after the
** other): per row j each lane's d2 = sum over i = 0..3 of (waux_i (s q_ij - x_i)) (s q_ij - x_i)
** as the scalar loop, kept when d2 < the lane's best so far (from FLT_MAX: the first strict
** minimum; NaN compares false and is never kept; the best by minps, which is that selection
** and keeps the loop-carried chain at one instruction); a lane that keeps none has the list's first
** row. Returns the rows; the caller takes the lanes whose key is u. */
TM_AVX2 TM_INLINE __m256i iq3_best_rows_avx2(const tm__iq3_tables *t, int u, const __m256 *xi, const __m256 *wa,
                                             __m256 s) {
    const uint16_t *nb = t->nb + (-t->map[u] - 1);
    const int n = nb[0];
    __m256 best = _mm256_set1_ps(FLT_MAX);
    __m256i row = _mm256_set1_epi32(nb[1]);
    for (int j = 1; j <= n; j++) {
        const int rj = nb[j];
        const float *g = t->gridf[rj];
        __m256 d2 = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            const __m256 diff = _mm256_sub_ps(_mm256_mul_ps(s, _mm256_broadcast_ss(g + i)), xi[i]);
            const __m256 term = _mm256_mul_ps(_mm256_mul_ps(wa[i], diff), diff);
            d2 = i ? _mm256_add_ps(d2, term) : term; /* 0 + term but for a zero's sign: same comparisons */
        }
        const __m256 lt = _mm256_cmp_ps(d2, best, _CMP_LT_OQ);
        best = _mm256_min_ps(d2, best); /* d2 < best ? d2 : best (minps), NaN d2 included */
        row = _mm256_blendv_epi8(row, _mm256_set1_epi32(rj), _mm256_castps_si256(lt));
    }
    return row;
}

/* tm__iq3_trials_fn (ggml_quant_iq.h) with trial is = -nis + 8 v + lane in lane `lane` of
** register v (the last register's spare lanes repeat trial nis and are never chosen). Each lane
** does the scalar trial: levels clamp(nearest_int(0.5 (id x - 1)), 0, 7) by the float adder's
** rounding, the key's row (vpgatherdd from map), for lanes off the grid the best neighbour
** (iq3_best_rows_avx2: the trials in lanes, the list's rows in turn), then sumqx += (w x) q and sumq2 += (w q) q over
** the 32 values in index order. The choice among the trials runs in scalar code in trial order. */
TM_AVX2 void tm__iq3_trials_avx2(const tm__iq3_tables *t, const float *xval, const float *weight,
                                 const float *waux, float max, int nis, float *scale, int8_t *L, bool *on) {
    const int ntr = 2 * nis + 1, nv = (ntr + 7) / 8;
    float ids[32], scs[32], sqx[32], sq2[32];
    int32_t rows[4][8][8], offs[4][8][8]; /* [register][group][lane] */
    for (int k = 0; k < 8 * nv; k++) {
        const int is = k < ntr ? -nis + k : nis;
        ids[k] = (15 + is * 0.2f) / max;
        scs[k] = 1 / ids[k];
    }
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f), magic = _mm256_set1_ps(12582912.f);
    const __m256i mant = _mm256_set1_epi32(0x007fffff), bias = _mm256_set1_epi32(0x00400000);
    const __m256i zero = _mm256_setzero_si256(), seven = _mm256_set1_epi32(7);
    for (int v = 0; v < nv; v++) {
        const __m256 idv = _mm256_loadu_ps(ids + 8 * v), sv = _mm256_loadu_ps(scs + 8 * v);
        __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
        for (int k = 0; k < 8; k++) {
            __m256 xi[4], wa[4];
            __m256i l[4];
            for (int i = 0; i < 4; i++) {
                xi[i] = _mm256_set1_ps(xval[4 * k + i]);
                const __m256 f = _mm256_mul_ps(half, _mm256_sub_ps(_mm256_mul_ps(idv, xi[i]), one));
                __m256i n = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(_mm256_add_ps(f, magic)), mant), bias);
                l[i] = _mm256_min_epi32(_mm256_max_epi32(n, zero), seven);
            }
            const __m256i u = _mm256_or_si256(_mm256_or_si256(l[0], _mm256_slli_epi32(l[1], 3)),
                                              _mm256_or_si256(_mm256_slli_epi32(l[2], 6), _mm256_slli_epi32(l[3], 9)));
            __m256i r = _mm256_i32gather_epi32(t->map, u, 4);
            const __m256i off = _mm256_cmpgt_epi32(zero, r);
            __m256 q[4];
            for (int i = 0; i < 4; i++)
                q[i] = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_add_epi32(l[i], l[i]), _mm256_set1_epi32(1)));
            if (_mm256_movemask_epi8(off)) {
                int32_t u8[8];
                _mm256_storeu_si256((__m256i *)u8, u);
                for (int i = 0; i < 4; i++) wa[i] = _mm256_set1_ps(waux[4 * k + i]);
                /* one pass per distinct off-grid key, all the register's trials at once (the
                ** levels grow with id: a key holds for a few consecutive trials) */
                for (unsigned todo = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(off)); todo;) {
                    const int key = u8[__builtin_ctz(todo)];
                    const __m256i same = _mm256_cmpeq_epi32(u, _mm256_set1_epi32(key));
                    r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r),
                                                             _mm256_castsi256_ps(iq3_best_rows_avx2(t, key, xi, wa, sv)),
                                                             _mm256_castsi256_ps(same)));
                    todo &= ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(same));
                }
                const __m256i r4 = _mm256_slli_epi32(r, 2);
                for (int i = 0; i < 4; i++)
                    q[i] = _mm256_blendv_ps(q[i], _mm256_i32gather_ps(&t->gridf[0][0], _mm256_add_epi32(r4, _mm256_set1_epi32(i)), 4),
                                            _mm256_castsi256_ps(off));
            }
            _mm256_storeu_si256((__m256i *)rows[v][k], r);
            _mm256_storeu_si256((__m256i *)offs[v][k], off);
            for (int i = 0; i < 4; i++) {
                const __m256 w = _mm256_set1_ps(weight[4 * k + i]);
                a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_mul_ps(w, xi[i]), q[i]));
                b = _mm256_add_ps(b, _mm256_mul_ps(_mm256_mul_ps(w, q[i]), q[i]));
            }
        }
        _mm256_storeu_ps(sqx + 8 * v, a);
        _mm256_storeu_ps(sq2 + 8 * v, b);
    }
    float best = 0;
    int kept = -1;
    for (int k = 0; k < ntr; k++)
        if (sq2[k] > 0 && sqx[k] * sqx[k] > best * sq2[k]) {
            *scale = sqx[k] / sq2[k];
            best = *scale * sqx[k];
            kept = k;
        }
    if (kept < 0) return;
    for (int g = 0; g < 8; g++) {
        const int row = rows[kept / 8][g][kept % 8];
        for (int i = 0; i < 4; i++) L[4 * g + i] = (int8_t)((t->grid[row][i] - 1) / 2);
        on[g] = !offs[kept / 8][g][kept % 8];
    }
}
/* ---------------------------------------------------------------------------------------- */
/* TQ1_0 / TQ2_0                                                                             */
/* ---------------------------------------------------------------------------------------- */

/* d = max |x| (order-free) and the 256 trits lroundf(x / d) + 1 (x times id = 1/d, rounded half
** away from zero: the truncation plus the sign where the exact remainder x - trunc(x) has
** magnitude >= 1/2; a non-finite product gives trit 1 as the scalar code) into t; returns d. */
TM_AVX2 static float tq_trits_avx2(const float *x, uint8_t *t) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < QK_K; j += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + j), absm));
    m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 1));
    m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
    const float d = _mm256_cvtss_f32(m);
    const __m256 id = _mm256_set1_ps(d ? 1.0f / d : 0.0f), half = _mm256_set1_ps(0.5f);
    const __m256 signm = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)), one = _mm256_set1_ps(1.0f);
    for (int j = 0; j < QK_K; j += 32) {
        __m256i r[4];
        for (int h = 0; h < 4; h++) {
            const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * h), id);
            const __m256 tr = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 up = _mm256_cmp_ps(_mm256_and_ps(_mm256_sub_ps(v, tr), absm), half, _CMP_GE_OQ);
            const __m256 fin = _mm256_cmp_ps(_mm256_and_ps(v, absm), _mm256_set1_ps(FLT_MAX), _CMP_LE_OQ);
            /* +-inf and NaN (a subnormal block's id = 1/d overflows): 0, what the scalar
            ** (int)lroundf gives on x86-64 (LONG_MIN, whose low 32 bits are 0) */
            const __m256 rv = _mm256_and_ps(fin, _mm256_add_ps(tr, _mm256_and_ps(up, _mm256_or_ps(one, _mm256_and_ps(v, signm)))));
            r[h] = _mm256_add_epi32(_mm256_cvtps_epi32(rv), _mm256_set1_epi32(1));
        }
        const __m256i w01 = _mm256_packs_epi32(r[0], r[1]), w23 = _mm256_packs_epi32(r[2], r[3]);
        const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(t + j), b);
    }
    return d;
}

/* 5 (or 4, padded) trits, most significant first, as a byte: ceil(q 256 / 243). */
static inline uint8_t tq1_byte(unsigned q) { return (uint8_t)((q * 256 + (243 - 1)) / 243); }

TM_AVX2 static tm_status tq1_0_block_avx2(const float *x, uint8_t *y, int64_t blk, tm_err *err) {
    uint8_t t[QK_K];
    const float d = tq_trits_avx2(x, t);
    for (int m = 0; m < 32; m++)
        y[m] = tq1_byte(81u * t[m] + 27u * t[m + 32] + 9u * t[m + 64] + 3u * t[m + 96] + t[m + 128]);
    for (int m = 0; m < 16; m++)
        y[32 + m] = tq1_byte(81u * t[160 + m] + 27u * t[176 + m] + 9u * t[192 + m] + 3u * t[208 + m] + t[224 + m]);
    for (int j = 0; j < 4; j++)
        y[48 + j] = tq1_byte(3u * (27u * t[240 + j] + 9u * t[244 + j] + 3u * t[248 + j] + t[252 + j]));
    return put_f16(y + 52, d, blk, err);
}

TM_AVX2 static tm_status tq2_0_block_avx2(const float *x, uint8_t *y, int64_t blk, tm_err *err) {
    uint8_t t[QK_K];
    const float d = tq_trits_avx2(x, t);
    for (int c = 0; c < 2; c++) {
        const uint8_t *tc = t + 128 * c;
        /* trits <= 2: the 16-bit shifts never carry across bytes */
        __m256i v = _mm256_loadu_si256((const __m256i *)tc);
        v = _mm256_or_si256(v, _mm256_slli_epi16(_mm256_loadu_si256((const __m256i *)(tc + 32)), 2));
        v = _mm256_or_si256(v, _mm256_slli_epi16(_mm256_loadu_si256((const __m256i *)(tc + 64)), 4));
        v = _mm256_or_si256(v, _mm256_slli_epi16(_mm256_loadu_si256((const __m256i *)(tc + 96)), 6));
        _mm256_storeu_si256((__m256i *)(y + 32 * c), v);
    }
    return put_f16(y + 64, d, blk, err);
}

typedef tm_status (*tq_block_fn)(const float *x, uint8_t *y, int64_t blk, tm_err *err);

static tm_status tq_rows(tq_block_fn fn, const tm_ggml_type_info *ti, const float *x, int64_t b0, int64_t nb,
                         uint8_t *y, int64_t *bad_block, tm_err *err) {
    for (int64_t b = b0; b < nb; b++) {
        tm_status st = fn(x + b * QK_K, y + (size_t)b * ti->type_size, b, err);
        if (st) {
            if (bad_block) *bad_block = b;
            return st;
        }
    }
    return TM_OK;
}

tm_status tm__gq_rows_tq1_0_avx2(const tm_ggml_type_info *ti, const float *x, const float *imatrix, int64_t b0,
                                 int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    (void)imatrix; /* quantize_tq1_0 ignores its quant_weights */
    return tq_rows(tq1_0_block_avx2, ti, x, b0, nb, y, bad_block, err);
}

tm_status tm__gq_rows_tq2_0_avx2(const tm_ggml_type_info *ti, const float *x, const float *imatrix, int64_t b0,
                                 int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    (void)imatrix;
    return tq_rows(tq2_0_block_avx2, ti, x, b0, nb, y, bad_block, err);
}
/* ---------------------------------------------------------------------------------------- */
/* IQ2_XXS / IQ2_XS / IQ2_S: the best neighbour                                              */
/* ---------------------------------------------------------------------------------------- */

/* The candidate tables as keys (tm__iq2_tab.tk): candidate j's level at value i is bits 2i, 2i + 1
** of its key, so the key shifted right by 2i, as a vpermps index (its low 3 bits), picks lane
** l + 4 b (b the next level's low bit) of a table holding the level-l term at lanes l and l + 4. */
TM_AVX2 TM_INLINE __m256i iq2_keys_avx2(const tm__iq2_tab *t, int u, int j0) {
    return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(t->tk + t->tqo[u] / 8 + (size_t)j0)));
}

/* d2 of 8 candidates with keys k: the sum over i = 0..7 of E[i] at each candidate's level, in
** that order from 0. */
TM_AVX2 TM_INLINE __m256 iq2_sum8_avx2(const __m256 *E, __m256i k) {
    __m256 d2 = _mm256_setzero_ps();
    for (int i = 0; i < 8; i++) d2 = _mm256_add_ps(d2, _mm256_permutevar8x32_ps(E[i], _mm256_srli_epi32(k, 2 * i)));
    return d2;
}

/* The 8 terms of the best-neighbour sums, independent of the candidate: E[i] holds the scalar
** term (w_i (s q - x_i)) (s q - x_i) of level l (q = 2 l + 1 = 1, 3, 5) at lanes l and l + 4. */
TM_AVX2 TM_INLINE void iq2_terms_avx2(const float *xval, const float *w, float s, __m256 *E) {
    /* s 1, s 3, s 5 (lanes 3 and 7, s 0, are never read) */
    const __m256 sq = _mm256_mul_ps(_mm256_set1_ps(s), _mm256_setr_ps(1.f, 3.f, 5.f, 0, 1.f, 3.f, 5.f, 0));
    for (int i = 0; i < 8; i++) {
        const __m256 diff = _mm256_sub_ps(sq, _mm256_set1_ps(xval[i]));
        E[i] = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(w[i]), diff), diff);
    }
}

/* best_neighbour of ggml_quant_iq2.c with 8 candidates a register: each lane's d2 = sum over
** i = 0..7 of (w_i (s q - x_i)) (s q - x_i) in that order from 0 (the terms of iq2_terms_avx2),
** then the first strict minimum below FLT_MAX (NaN never chosen), else the list's first row. */
TM_AVX2 int tm__iq2_best_avx2(const tm__iq2_tab *t, int u, const float *xval, const float *w, float scale,
                              int8_t *L) {
    const uint16_t *nb = t->nbr + (-t->map[u] - 1);
    const int n = nb[0], n8 = (n + 7) & ~7;
    const __m256 inf = _mm256_set1_ps(INFINITY);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 E[8];
    iq2_terms_avx2(xval, w, scale, E);
    float best_d2 = FLT_MAX;
    int bj = 0;
    /* one candidate: the scalar search keeps it whatever its distance (NaN included) */
    for (int j0 = 0; n > 1 && j0 < n8; j0 += 8) {
        const __m256 d2 = iq2_sum8_avx2(E, iq2_keys_avx2(t, u, j0));
        const __m256 live = _mm256_and_ps(_mm256_cmp_ps(d2, d2, _CMP_ORD_Q),
                                          _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n - j0), lane)));
        keep_first_min_avx2(_mm256_blendv_ps(inf, d2, live), j0, &best_d2, &bj);
    }
    const int gi = nb[1 + bj];
    const int8_t *pg = t->pos[gi];
    for (int i = 0; i < 8; i++) L[i] = (int8_t)((pg[i] - 1) / 2);
    return gi;
}

/* The least lane of v (int32), broadcast to every lane. */
TM_AVX2 TM_INLINE __m256i hmin8_epi32_avx2(__m256i v) {
    __m256i m = _mm256_min_epi32(v, _mm256_permute2x128_si256(v, v, 1));
    m = _mm256_min_epi32(m, _mm256_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm256_min_epi32(m, _mm256_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
}

/* tm__iq2_best_avx2 of off-grid key u for the R (1..24) consecutive trials with that key at
** once, trial r at scale ts[r]; the best candidate's key into out[r]. Per trial the same terms
** (iq2_terms_avx2: E[r][i]), per candidate the same sum over i = 0..7 in order (from the first
** term: 0 + t0 = t0 but for a zero's sign, which no comparison sees), the same choice: the first
** strict minimum below FLT_MAX, else the list's first candidate. The candidates' keys are
** loaded and shifted once per 8 for all the trials; each lane keeps its own first strict
** minimum (minps: a NaN distance is never kept), the least index among the lanes at the least
** value is the list's first. The pad lanes repeat the list's last candidate: the same distance
** at a later index, never chosen. A list of at most 8 (one register): the first lane at the least
** value, NaN distances as +inf. */
TM_AVX2 static void run_best_avx2(const tm__iq2_tab *t, int u, const float *xval, const float *w, const float *ts,
                                  int R, int32_t *out) {
    const int n = t->nbr[-t->map[u] - 1];
    const uint16_t *tk = t->tk + t->tqo[u] / 8;
    if (n == 1) { /* the scalar search keeps a lone candidate whatever its distance */
        for (int r = 0; r < R; r++) out[r] = tk[0];
        return;
    }
    if (n <= 8) { /* one register of candidates: the terms of each trial in turn, no index lanes */
        __m256i k[8];
        k[0] = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)tk));
        for (int i = 1; i < 8; i++) k[i] = _mm256_srli_epi32(k[0], 2 * i);
        for (int r = 0; r < R; r++) {
            __m256 E[8];
            iq2_terms_avx2(xval, w, ts[r], E);
            __m256 d2 = _mm256_permutevar8x32_ps(E[0], k[0]);
            for (int i = 1; i < 8; i++) d2 = _mm256_add_ps(d2, _mm256_permutevar8x32_ps(E[i], k[i]));
            d2 = _mm256_min_ps(d2, _mm256_set1_ps(INFINITY)); /* NaN -> inf */
            const __m256 m = hmin8_avx2(d2);
            int j = 0;
            if (_mm256_cvtss_f32(m) < FLT_MAX)
                j = __builtin_ctz((unsigned)_mm256_movemask_ps(_mm256_cmp_ps(d2, m, _CMP_EQ_OQ)));
            out[r] = tk[j];
        }
        return;
    }
    __m256 E[24][8], bv[24];
    __m256i bi[24];
    for (int r = 0; r < R; r++) {
        iq2_terms_avx2(xval, w, ts[r], E[r]);
        bv[r] = _mm256_set1_ps(INFINITY);
        bi[r] = _mm256_setzero_si256();
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int j0 = 0; j0 < n; j0 += 8) {
        __m256i k[8];
        k[0] = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(tk + j0)));
        for (int i = 1; i < 8; i++) k[i] = _mm256_srli_epi32(k[0], 2 * i);
        const __m256i jv = _mm256_add_epi32(_mm256_set1_epi32(j0), lane);
        for (int r = 0; r < R; r++) {
            __m256 d2 = _mm256_permutevar8x32_ps(E[r][0], k[0]);
            for (int i = 1; i < 8; i++) d2 = _mm256_add_ps(d2, _mm256_permutevar8x32_ps(E[r][i], k[i]));
            const __m256 lt = _mm256_cmp_ps(d2, bv[r], _CMP_LT_OQ);
            bv[r] = _mm256_min_ps(d2, bv[r]);
            bi[r] = _mm256_blendv_epi8(bi[r], jv, _mm256_castps_si256(lt));
        }
    }
    for (int r = 0; r < R; r++) {
        const __m256 m = hmin8_avx2(bv[r]);
        int j = 0;
        if (_mm256_cvtss_f32(m) < FLT_MAX) {
            const __m256i eq = _mm256_castps_si256(_mm256_cmp_ps(bv[r], m, _CMP_EQ_OQ));
            const __m256i c = _mm256_blendv_epi8(_mm256_set1_epi32(INT32_MAX), bi[r], eq);
            j = _mm256_cvtsi256_si32(hmin8_epi32_avx2(c));
        }
        out[r] = tk[j];
    }
}

/* The scale trials of IQ2_XXS / IQ2_XS / IQ2_S's sub-block search in lanes: nt trials
** is = is0, is0 + 1, ... in nl (8, 16 or 24) lanes (the lanes past nt repeat the last trial and are
** never read), ng groups of 8. Per lane, as the scalar trial: id = (5 + is 0.1f) / den, the level
** clamp(nearest_int(0.5f (id x_i - 1)), 0, 2) (nearest_int by the same float adder and bit
** mask), the groups' 16-bit keys; each off-grid group's key replaced by its best neighbour's at
** 1 / id (run_best_avx2, a run of consecutive trials with one key at once); then sumqx +=
** ((w_i x_i) q), sumq2 += ((w_i q) q) for i = 0..8 ng - 1 in order, the two products of each
** level computed once per value and picked by the key (vpermps, as the neighbour terms). The choice in scalar code in the trials' order from best = 0; returns scale (left when
** none fits), the kept trial's codes into L and its groups' on-grid flags into on_grid (when not
** NULL). */
TM_AVX2 TM_INLINE float trials_avx2(const tm__iq2_tab *t, const float *weight, const float *waux, const float *xval,
                                    float den, const int nt, const int nl, const int is0, const int ng, float scale,
                                    int8_t *L, int *on_grid) {
    float id[24] __attribute__((aligned(32))), ts[24];
    /* key[k][1 + j]: group k's key in trial j; key[k][0] a key no trial has (for the runs) */
    int32_t key[4][32] __attribute__((aligned(32)));
    float sqx[24] __attribute__((aligned(32))), sq2[24] __attribute__((aligned(32)));
    unsigned off[4] = {0, 0, 0, 0}; /* bit j: group k is off the grid in trial j */
    for (int j = 0; j < nl; j++) {
        const int is = (j < nt ? j : nt - 1) + is0;
        id[j] = (5 + is * 0.1f) / den;
        ts[j] = 1 / id[j];
    }
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f), magic = _mm256_set1_ps(12582912.f);
    const __m256i mant = _mm256_set1_epi32(0x007fffff), bias = _mm256_set1_epi32(0x00400000);
    const __m256i zero = _mm256_setzero_si256(), two = _mm256_set1_epi32(2);
    for (int k = 0; k < ng; k++) {
        key[k][0] = -1;
        for (int v = 0; v < nl; v += 8) {
            const __m256 idv = _mm256_load_ps(id + v);
            __m256i kk = zero;
            for (int i = 0; i < 8; i++) {
                const __m256 a = _mm256_mul_ps(half, _mm256_sub_ps(_mm256_mul_ps(idv, _mm256_set1_ps(xval[8 * k + i])), one));
                const __m256i b = _mm256_castps_si256(_mm256_add_ps(a, magic));
                __m256i l = _mm256_sub_epi32(_mm256_and_si256(b, mant), bias);
                l = _mm256_max_epi32(zero, _mm256_min_epi32(two, l));
                kk = _mm256_or_si256(kk, _mm256_slli_epi32(l, 2 * i));
            }
            _mm256_storeu_si256((__m256i *)(key[k] + 1 + v), kk);
        }
    }
    /* the runs of equal keys: bit j of start[k] where trial j's key differs from trial j - 1's */
    unsigned start[4];
    for (int k = 0; k < ng; k++) {
        unsigned same = 0;
        for (int v = 0; v < nl; v += 8) {
            const __m256i a = _mm256_loadu_si256((const __m256i *)(key[k] + 1 + v));
            const __m256i b = _mm256_loadu_si256((const __m256i *)(key[k] + v));
            same |= (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a, b))) << v;
        }
        start[k] = ~same & ((1u << nt) - 1);
    }
    /* the searches' table reads are random (a few hundred KiB of map / offsets, MiB of lists):
    ** start them all before the first search needs one */
    for (int k = 0; k < ng; k++)
        for (unsigned s = start[k]; s; s &= s - 1) {
            const int u = key[k][1 + __builtin_ctz(s)];
            _mm_prefetch((const char *)(t->map + u), _MM_HINT_T0);
            _mm_prefetch((const char *)(t->tqo + u), _MM_HINT_T0);
        }
    for (int k = 0; k < ng; k++)
        for (unsigned s = start[k]; s; s &= s - 1) {
            const int u = key[k][1 + __builtin_ctz(s)], m = t->map[u];
            if (m >= 0) continue;
            _mm_prefetch((const char *)(t->nbr + (-m - 1)), _MM_HINT_T0);
            _mm_prefetch((const char *)(t->tk + t->tqo[u] / 8), _MM_HINT_T0);
        }
    for (int k = 0; k < ng; k++)
        for (unsigned s = start[k]; s;) {
            const int j = __builtin_ctz(s);
            s &= s - 1;
            const int e = s ? __builtin_ctz(s) : nt;
            const int u = key[k][1 + j];
            if (t->map[u] >= 0) continue;
            off[k] |= ((1u << e) - 1) & ~((1u << j) - 1);
            run_best_avx2(t, u, xval + 8 * k, waux + 8 * k, ts + j, e - j, key[k] + 1 + j);
        }
    /* the registers' sums side by side (independent chains), each in index order */
    const __m256 q135 = _mm256_setr_ps(1.f, 3.f, 5.f, 0, 1.f, 3.f, 5.f, 0);
    __m256 sx[3], s2[3];
    for (int v = 0; v < nl / 8; v++) sx[v] = s2[v] = _mm256_setzero_ps();
    for (int k = 0; k < ng; k++) {
        __m256i kk[3];
        for (int v = 0; v < nl / 8; v++) kk[v] = _mm256_loadu_si256((const __m256i *)(key[k] + 1 + 8 * v));
        for (int i = 8 * k; i < 8 * k + 8; i++) {
            /* the two products of value i at level l (q = 1, 3, 5) at lanes l and l + 4, picked by
            ** the key shifted by 2 (i mod 8) as the neighbour terms are (iq2_keys_avx2) */
            const __m256 wq = _mm256_mul_ps(_mm256_set1_ps(weight[i]), q135);
            const __m256 tx = _mm256_mul_ps(_mm256_set1_ps(weight[i] * xval[i]), q135), t2 = _mm256_mul_ps(wq, q135);
            for (int v = 0; v < nl / 8; v++) {
                const __m256i l = _mm256_srli_epi32(kk[v], 2 * (i - 8 * k));
                sx[v] = _mm256_add_ps(sx[v], _mm256_permutevar8x32_ps(tx, l));
                s2[v] = _mm256_add_ps(s2[v], _mm256_permutevar8x32_ps(t2, l));
            }
        }
    }
    for (int v = 0; v < nl / 8; v++) {
        _mm256_store_ps(sqx + 8 * v, sx[v]);
        _mm256_store_ps(sq2 + 8 * v, s2[v]);
    }
    float best = 0;
    int bj = -1;
    for (int j = 0; j < nt; j++)
        if (sq2[j] > 0 && sqx[j] * sqx[j] > best * sq2[j]) {
            scale = sqx[j] / sq2[j];
            best = scale * sqx[j];
            bj = j;
        }
    if (bj >= 0) {
        for (int k = 0; k < ng; k++) {
            const int kk = key[k][1 + bj];
            for (int i = 0; i < 8; i++) L[8 * k + i] = (int8_t)(kk >> 2 * i & 3);
            if (on_grid) on_grid[k] = !(off[k] >> bj & 1);
        }
    }
    return scale;
}
/* trials16 of ggml_quant_iq2.c: 19 trials (is = -9..9) in 24 lanes, 2 groups. */
TM_AVX2 float tm__iq2_trials16_avx2(const tm__iq2_tab *t, const float *weight, const float *waux, const float *xval,
                                    float max, int8_t *L, int *on_grid) {
    return trials_avx2(t, weight, waux, xval, max, 19, 24, -9, 2, max / 5, L, on_grid);
}

/* trials32 of ggml_quant_iq2.c: 13 trials (is = -6..6) in 16 lanes, 4 groups. */
TM_AVX2 float tm__iq2_trials32_avx2(const tm__iq2_tab *t, const float *weight, const float *waux, const float *xval,
                                    float eff_max, float scale, int8_t *L) {
    return trials_avx2(t, weight, waux, xval, eff_max, 13, 16, -6, 4, scale, L, NULL);
}
/* ---------------------------------------------------------------------------------------- */
/* IQ1_S: the split search                                                                   */
/* ---------------------------------------------------------------------------------------- */

/* The walk of every chunk in order (the whole scalar rule, a chunk none of whose candidates
** passes skipped): the fallback of tm__iq1s_splits_avx2. */
TM_AVX2 static void iq1s_walk_avx2(const float *sumx, const float *sumw, float *scale, int *bi1, int *bi2,
                                   int *bshift) {
    enum { BS = 32 };
    const float d = 0.125f; /* IQ1S_DELTA of ggml_quant_iq2.c */
    const float x_p[3] = {-1 + d, d, 1 + d};
    const float x_m[3] = {-1 - d, -d, 1 - d};
    float sx[BS + 1 + 8], sw[BS + 1 + 8]; /* padded for the last chunk's loads */
    memcpy(sx, sumx, (BS + 1) * sizeof *sx);
    memcpy(sw, sumw, (BS + 1) * sizeof *sw);
    for (int i = BS + 1; i < BS + 1 + 8; i++) sx[i] = sw[i] = 0;
    const __m256 p0 = _mm256_set1_ps(x_p[0]), p1 = _mm256_set1_ps(x_p[1]), p2 = _mm256_set1_ps(x_p[2]);
    const __m256 m0 = _mm256_set1_ps(x_m[0]), m1 = _mm256_set1_ps(x_m[1]), m2 = _mm256_set1_ps(x_m[2]);
    const __m256 zero = _mm256_setzero_ps(), sxe = _mm256_set1_ps(sx[BS]), swe = _mm256_set1_ps(sw[BS]);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    float best_score = -FLT_MAX;
    for (int i1 = 0; i1 <= BS; ++i1) {
        const __m256 ax = _mm256_set1_ps(sx[i1] - sx[0]), aw = _mm256_set1_ps(sw[i1] - sw[0]);
        const __m256 sx1 = _mm256_set1_ps(sx[i1]), sw1 = _mm256_set1_ps(sw[i1]);
        const __m256 apx = _mm256_mul_ps(ax, p0), amx = _mm256_mul_ps(ax, m0);
        const __m256 apw = _mm256_mul_ps(_mm256_mul_ps(aw, p0), p0), amw = _mm256_mul_ps(_mm256_mul_ps(aw, m0), m0);
        for (int c = i1; c <= BS; c += 8) {
            const __m256 x2 = _mm256_loadu_ps(sx + c), w2 = _mm256_loadu_ps(sw + c);
            const __m256 bx = _mm256_sub_ps(x2, sx1), cx = _mm256_sub_ps(sxe, x2);
            const __m256 bw = _mm256_sub_ps(w2, sw1), cw = _mm256_sub_ps(swe, w2);
            const __m256 qxp = _mm256_add_ps(_mm256_add_ps(apx, _mm256_mul_ps(bx, p1)), _mm256_mul_ps(cx, p2));
            const __m256 q2p = _mm256_add_ps(_mm256_add_ps(apw, _mm256_mul_ps(_mm256_mul_ps(bw, p1), p1)),
                                             _mm256_mul_ps(_mm256_mul_ps(cw, p2), p2));
            const __m256 qxm = _mm256_add_ps(_mm256_add_ps(amx, _mm256_mul_ps(bx, m1)), _mm256_mul_ps(cx, m2));
            const __m256 q2m = _mm256_add_ps(_mm256_add_ps(amw, _mm256_mul_ps(_mm256_mul_ps(bw, m1), m1)),
                                             _mm256_mul_ps(_mm256_mul_ps(cw, m2), m2));
            const __m256 bs = _mm256_set1_ps(best_score);
            const __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(BS + 1 - c), lane));
            const __m256 okp = _mm256_and_ps(_mm256_cmp_ps(q2p, zero, _CMP_GT_OQ),
                                             _mm256_cmp_ps(_mm256_mul_ps(qxp, qxp), _mm256_mul_ps(bs, q2p), _CMP_GT_OQ));
            const __m256 okm = _mm256_and_ps(_mm256_cmp_ps(q2m, zero, _CMP_GT_OQ),
                                             _mm256_cmp_ps(_mm256_mul_ps(qxm, qxm), _mm256_mul_ps(bs, q2m), _CMP_GT_OQ));
            if (!_mm256_movemask_ps(_mm256_and_ps(valid, _mm256_or_ps(okp, okm)))) continue;
            float vxp[8], v2p[8], vxm[8], v2m[8];
            _mm256_storeu_ps(vxp, qxp);
            _mm256_storeu_ps(v2p, q2p);
            _mm256_storeu_ps(vxm, qxm);
            _mm256_storeu_ps(v2m, q2m);
            for (int e = 0; e < 8 && c + e <= BS; e++) {
                if (v2p[e] > 0 && vxp[e] * vxp[e] > best_score * v2p[e]) {
                    *scale = vxp[e] / v2p[e];
                    best_score = *scale * vxp[e];
                    *bi1 = i1;
                    *bi2 = c + e;
                    *bshift = 1;
                }
                if (v2m[e] > 0 && vxm[e] * vxm[e] > best_score * v2m[e]) {
                    *scale = vxm[e] / v2m[e];
                    best_score = *scale * vxm[e];
                    *bi1 = i1;
                    *bi2 = c + e;
                    *bshift = -1;
                }
            }
        }
    }
}
/* The scalar rule keeps candidate c (in the order i1, i2, +1, -1) when q2_c > 0 and
** fl(qx_c^2) > fl(b q2_c), b the score s = fl(fl(qx / q2) qx) of the last kept one (-FLT_MAX
** first); the result is the last kept. Every candidate's qx, q2, qx^2 first (4 values of i2
** times the two shifts in the 8 lanes, in that order), with an estimate M of the best ratio
** qx^2 / q2 (rcp). Then f: the first candidate with fl(qx^2) >= fl(L q2), L = M (1 - 2^-9),
** provided every earlier one has max(fl(qx^2), 2^-126) < fl(K q2), K = L (1 - 2^-16): then each
** earlier score is below K (1 + 8u) (u = 2^-24), so whatever b the walk holds before f, f
** passes and is kept (2^-16 > 11u; L in [2^-60, 2^60] and q2_f in [2^-60, 2^60] keep every
** product involved normal and finite). From f on the rule runs exactly, candidate by candidate
** in the lanes (a keep re-tests the lanes after it against the new b). When a condition fails
** (near ties at the threshold, ranges), the walk of every chunk (iq1s_walk_avx2) instead. */
TM_AVX2 void tm__iq1s_splits_avx2(const float *sumx, const float *sumw, float *scale, int *bi1, int *bi2,
                                  int *bshift) {
    enum { BS = 32, NV = 153 }; /* sum over i1 of ceil((33 - i1) / 4) */
    const float d = 0.125f;     /* IQ1S_DELTA of ggml_quant_iq2.c */
    const float x_p[3] = {-1 + d, d, 1 + d};
    const float x_m[3] = {-1 - d, -d, 1 - d};
    float sxd[2 * (BS + 1) + 8], swd[2 * (BS + 1) + 8]; /* each prefix sum twice, padded */
    for (int j = 0; j <= BS; j++) {
        sxd[2 * j] = sxd[2 * j + 1] = sumx[j];
        swd[2 * j] = swd[2 * j + 1] = sumw[j];
    }
    for (int j = 2 * (BS + 1); j < 2 * (BS + 1) + 8; j++) sxd[j] = sumx[BS], swd[j] = sumw[BS];
    const __m256 P0 = _mm256_setr_ps(x_p[0], x_m[0], x_p[0], x_m[0], x_p[0], x_m[0], x_p[0], x_m[0]);
    const __m256 P1 = _mm256_setr_ps(x_p[1], x_m[1], x_p[1], x_m[1], x_p[1], x_m[1], x_p[1], x_m[1]);
    const __m256 P2 = _mm256_setr_ps(x_p[2], x_m[2], x_p[2], x_m[2], x_p[2], x_m[2], x_p[2], x_m[2]);
    const __m256 sxe = _mm256_set1_ps(sumx[BS]), swe = _mm256_set1_ps(sumw[BS]), zero = _mm256_setzero_ps();
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    float QX[NV][8], Q2[NV][8], QX2[NV][8];
    __m256 amax = zero;
    int nv = 0;
    for (int i1 = 0; i1 <= BS; ++i1) {
        const __m256 ax = _mm256_set1_ps(sumx[i1] - sumx[0]), aw = _mm256_set1_ps(sumw[i1] - sumw[0]);
        const __m256 sx1 = _mm256_set1_ps(sumx[i1]), sw1 = _mm256_set1_ps(sumw[i1]);
        const __m256 A = _mm256_mul_ps(ax, P0), Aw = _mm256_mul_ps(_mm256_mul_ps(aw, P0), P0);
        for (int c = i1; c <= BS; c += 4, nv++) {
            const __m256 x2 = _mm256_loadu_ps(sxd + 2 * c), w2 = _mm256_loadu_ps(swd + 2 * c);
            const __m256 bx = _mm256_sub_ps(x2, sx1), cx = _mm256_sub_ps(sxe, x2);
            const __m256 bw = _mm256_sub_ps(w2, sw1), cw = _mm256_sub_ps(swe, w2);
            __m256 qx = _mm256_add_ps(_mm256_add_ps(A, _mm256_mul_ps(bx, P1)), _mm256_mul_ps(cx, P2));
            __m256 q2 = _mm256_add_ps(_mm256_add_ps(Aw, _mm256_mul_ps(_mm256_mul_ps(bw, P1), P1)),
                                      _mm256_mul_ps(_mm256_mul_ps(cw, P2), P2));
            if (c + 3 > BS) { /* lanes past i2 = 32: q2 = 0, never kept */
                const __m256 in = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(2 * (BS + 1 - c)), lane));
                qx = _mm256_and_ps(qx, in);
                q2 = _mm256_and_ps(q2, in);
            }
            const __m256 qx2 = _mm256_mul_ps(qx, qx);
            _mm256_storeu_ps(QX[nv], qx);
            _mm256_storeu_ps(Q2[nv], q2);
            _mm256_storeu_ps(QX2[nv], qx2);
            /* 0 / 0 is NaN, which maxps drops (the second operand is kept) */
            amax = _mm256_max_ps(_mm256_mul_ps(qx2, _mm256_rcp_ps(q2)), amax);
        }
    }
    __m256 mx = _mm256_max_ps(amax, _mm256_permute2f128_ps(amax, amax, 1));
    mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, _MM_SHUFFLE(1, 0, 3, 2)));
    mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, _MM_SHUFFLE(2, 3, 0, 1)));
    const float L = _mm256_cvtss_f32(mx) * (1 - 0x1p-9f), K = L * (1 - 0x1p-16f);
    if (!(L >= 0x1p-60f && L <= 0x1p60f)) {
        iq1s_walk_avx2(sumx, sumw, scale, bi1, bi2, bshift);
        return;
    }
    const __m256 Lv = _mm256_set1_ps(L), Kv = _mm256_set1_ps(K), tiny = _mm256_set1_ps(0x1p-126f);
    int v = 0, e = -1;
    for (; v < nv; v++) {
        const __m256 q2 = _mm256_loadu_ps(Q2[v]), qx2 = _mm256_loadu_ps(QX2[v]);
        const __m256 valid = _mm256_cmp_ps(q2, zero, _CMP_GT_OQ);
        const unsigned hit = (unsigned)_mm256_movemask_ps(
            _mm256_and_ps(valid, _mm256_cmp_ps(qx2, _mm256_mul_ps(Lv, q2), _CMP_GE_OQ)));
        const unsigned bad = (unsigned)_mm256_movemask_ps(
            _mm256_andnot_ps(_mm256_cmp_ps(_mm256_max_ps(qx2, tiny), _mm256_mul_ps(Kv, q2), _CMP_LT_OQ), valid));
        if (hit) {
            e = __builtin_ctz(hit);
            if (bad & ((1u << e) - 1)) e = -1;
            break;
        }
        if (bad) break;
    }
    if (e < 0 || !(Q2[v][e] >= 0x1p-60f && Q2[v][e] <= 0x1p60f)) {
        iq1s_walk_avx2(sumx, sumw, scale, bi1, bi2, bshift);
        return;
    }
    /* f is kept; from here the rule itself */
    float b = 0;
    unsigned m = 1u << e;
    for (;;) {
        if (m) {
            const __m256 q2 = _mm256_loadu_ps(Q2[v]), qx2 = _mm256_loadu_ps(QX2[v]);
            const __m256 valid = _mm256_cmp_ps(q2, zero, _CMP_GT_OQ);
            int i1 = 0, w = v; /* the register's i1 and first i2 */
            while (w >= (BS - i1) / 4 + 1) w -= (BS - i1) / 4 + 1, i1++;
            do {
                const int k = __builtin_ctz(m);
                *scale = QX[v][k] / Q2[v][k];
                b = *scale * QX[v][k];
                *bi1 = i1;
                *bi2 = i1 + 4 * w + (k >> 1);
                *bshift = k & 1 ? -1 : 1;
                m = (unsigned)_mm256_movemask_ps(
                        _mm256_and_ps(valid, _mm256_cmp_ps(qx2, _mm256_mul_ps(_mm256_set1_ps(b), q2), _CMP_GT_OQ))) &
                    (0xFEu << k) & 0xFFu;
            } while (m);
        }
        if (++v >= nv) break;
        const __m256 q2 = _mm256_loadu_ps(Q2[v]);
        m = (unsigned)_mm256_movemask_ps(_mm256_and_ps(
            _mm256_cmp_ps(q2, zero, _CMP_GT_OQ),
            _mm256_cmp_ps(_mm256_loadu_ps(QX2[v]), _mm256_mul_ps(_mm256_set1_ps(b), q2), _CMP_GT_OQ)));
    }
}
/* ---------------------------------------------------------------------------------------- */
/* IQ1_M: the split search                                                                   */
/* ---------------------------------------------------------------------------------------- */

/* iq1m_splits of ggml_quant_iq2.c. Lanes 0..3: sumqx of the combinations k = 0..3, lanes 4..7
** their sumq2. The term of sorted value j at level lev, (w v) x in lanes 0..3 and (w v) v in
** 4..7 with v = vk[k][half][lev], is the scalar term; the sums add them in the scalar order. */
TM_AVX2 void tm__iq1m_splits_avx2(const float *weight, const float *xb, const int *idx, float *scale, int *bi1,
                                  int *bi2, int *bk) {
    enum { BS = 16 };
    const float d = 0.125f; /* IQ1M_DELTA of ggml_quant_iq2.c */
    const float x_p[3] = {-1 + d, d, 1 + d};
    const float x_m[3] = {-1 - d, -d, 1 - d};
    /* k = 0 ++, 1 +-, 2 -+, 3 --: the half's levels */
    const float *vk[2][4] = {{x_p, x_p, x_m, x_m}, {x_p, x_m, x_p, x_m}};
    __m256 T[3][BS];
    for (int j = 0; j < BS; j++) {
        const int i = idx[j], h = i < BS / 2 ? 0 : 1;
        for (int lev = 0; lev < 3; lev++) {
            const float v0 = vk[h][0][lev], v1 = vk[h][1][lev], v2 = vk[h][2][lev], v3 = vk[h][3][lev];
            const __m256 V = _mm256_setr_ps(v0, v1, v2, v3, v0, v1, v2, v3);
            const __m256 B = _mm256_setr_ps(xb[i], xb[i], xb[i], xb[i], v0, v1, v2, v3);
            T[lev][j] = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(weight[i]), V), B);
        }
    }
    const __m256 zero = _mm256_setzero_ps();
    float best_score = -FLT_MAX;
    __m256 P0 = zero;
    for (int i1 = 0; i1 <= BS; ++i1) {
        __m256 Q = P0;
        for (int i2 = i1; i2 <= BS; ++i2) {
            __m256 S = Q;
            for (int j = i2; j < BS; ++j) S = _mm256_add_ps(S, T[2][j]);
            const __m256 q2 = _mm256_permute2f128_ps(S, S, 1);
            const __m256 ok = _mm256_and_ps(_mm256_cmp_ps(q2, zero, _CMP_GT_OQ),
                                            _mm256_cmp_ps(_mm256_mul_ps(S, S), _mm256_mul_ps(_mm256_set1_ps(best_score), q2),
                                                          _CMP_GT_OQ));
            if (_mm256_movemask_ps(ok) & 15) {
                float f[8];
                _mm256_storeu_ps(f, S);
                for (int k = 0; k < 4; k++)
                    if (f[4 + k] > 0 && f[k] * f[k] > best_score * f[4 + k]) {
                        *scale = f[k] / f[4 + k];
                        best_score = *scale * f[k];
                        *bi1 = i1;
                        *bi2 = i2;
                        *bk = k;
                    }
            }
            if (i2 < BS) Q = _mm256_add_ps(Q, T[1][i2]);
        }
        if (i1 < BS) P0 = _mm256_add_ps(P0, T[0][i1]);
    }
}
/* ---------------------------------------------------------------------------------------- */
/* IQ1_S / IQ1_M: the sort of a sub-block                                                    */
/* ---------------------------------------------------------------------------------------- */

/* sort_idx of ggml_quant_iq2.c by ranks: value b counts against every value a with x_b < x_a,
** and with x_b <= x_a when b < a (a tie keeps the index order), so rank a is the place of a in
** the stable ascending order (finite values; -0 and +0 equal, as the scalar comparison). */
TM_AVX2 void tm__iq1_sort_avx2(int n, const float *xb, int *idx) {
    const int nv = n / 8; /* 2 or 4 */
    __m256 X[4];
    __m256i R[4];
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int k = 0; k < nv; k++) {
        X[k] = _mm256_loadu_ps(xb + 8 * k);
        R[k] = _mm256_setzero_si256();
    }
    for (int kb = 0; kb < nv; kb++)
        for (int e = 0; e < 8; e++) {
            const __m256 v = _mm256_set1_ps(xb[8 * kb + e]);
            for (int k = 0; k < kb; k++) /* a < b: strict */
                R[k] = _mm256_sub_epi32(R[k], _mm256_castps_si256(_mm256_cmp_ps(v, X[k], _CMP_LT_OQ)));
            /* the same register: a > b counts ties */
            const __m256 after = _mm256_castsi256_ps(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32(e)));
            const __m256 c = _mm256_blendv_ps(_mm256_cmp_ps(v, X[kb], _CMP_LT_OQ), _mm256_cmp_ps(v, X[kb], _CMP_LE_OQ),
                                              after);
            R[kb] = _mm256_sub_epi32(R[kb], _mm256_castps_si256(c));
            for (int k = kb + 1; k < nv; k++) /* a > b: ties count */
                R[k] = _mm256_sub_epi32(R[k], _mm256_castps_si256(_mm256_cmp_ps(v, X[k], _CMP_LE_OQ)));
        }
    int32_t r[32];
    for (int k = 0; k < nv; k++) _mm256_storeu_si256((__m256i *)(r + 8 * k), R[k]);
    for (int a = 0; a < n; a++) idx[r[a]] = a;
}
/* ---------------------------------------------------------------------------------------- */
/* IQ1_S / IQ1_M: the best neighbour                                                         */
/* ---------------------------------------------------------------------------------------- */

/* best_neighbour1 of ggml_quant_iq2.c. The term of value i at level l is
** (w_i (scale xg_l - x_i)) (scale xg_l - x_i), as the scalar loop; E[i] holds it at lanes l and
** l + 4, so one vpermps per i and 8 candidates gathers the terms from the candidates' keys
** (iq2_sum8_avx2), and every lane adds them for i = 0..7 in order from 0. Then the first strict minimum below FLT_MAX
** (NaN never chosen), else the list's first row. */
TM_AVX2 int tm__iq1_best_avx2(const tm__iq2_tab *t, int u, const float *xval, const float *w, float scale,
                              const float *xg, int8_t *L) {
    const uint16_t *nb = t->nbr + (-t->map[u] - 1);
    const int n = nb[0], n8 = (n + 7) & ~7;
    const float s0 = scale * xg[0], s1 = scale * xg[1], s2 = scale * xg[2];
    const __m256 sq = _mm256_setr_ps(s0, s1, s2, 0, s0, s1, s2, 0);
    __m256 E[8];
    for (int i = 0; i < 8; i++) {
        const __m256 diff = _mm256_sub_ps(sq, _mm256_set1_ps(xval[i]));
        E[i] = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(w[i]), diff), diff);
    }
    const __m256 inf = _mm256_set1_ps(INFINITY);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    /* per lane the least distance and the first candidate with it (strict <, so the earliest);
    ** then the least of the lanes and, among the lanes holding it, the least candidate: the
    ** first strict minimum of the whole list */
    __m256 bv = inf;
    __m256i bi = _mm256_setzero_si256();
    for (int j0 = 0; j0 < n8; j0 += 8) {
        __m256 d2 = iq2_sum8_avx2(E, iq2_keys_avx2(t, u, j0));
        const __m256 live = _mm256_and_ps(_mm256_cmp_ps(d2, d2, _CMP_ORD_Q),
                                          _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n - j0), lane)));
        d2 = _mm256_blendv_ps(inf, d2, live);
        const __m256 lt = _mm256_cmp_ps(d2, bv, _CMP_LT_OQ);
        bv = _mm256_blendv_ps(bv, d2, lt);
        bi = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(bi),
                                                  _mm256_castsi256_ps(_mm256_add_epi32(_mm256_set1_epi32(j0), lane)), lt));
    }
    const __m256 mm = hmin8_avx2(bv);
    const int bj = _mm256_cvtss_f32(mm) < FLT_MAX ? least_index_at_min_avx2(bv, bi, mm) : 0;
    const int gi = nb[1 + bj];
    const int8_t *pg = t->pos[gi];
    for (int i = 0; i < 8; i++) L[i] = (int8_t)((pg[i] - 1) / 2);
    return gi;
}
#endif
