/*
** ggml_quant_iq_avx2.c: AVX2 variants of the IQ4_NL and IQ4_XS quantizers of ggml_quant_iq.c
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
** tests/unit/test_gguf_iq_simd.c compares the two paths on random and edge rows.
*/
#include "core/core.h"
#include "ggml_traits.h"

#ifdef TM__GQ_HAVE_AVX2
#include <immintrin.h>
#include <math.h>

#define TM_AVX2 __attribute__((target("avx2")))
#define TM_INLINE static inline __attribute__((always_inline))
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

static inline int nearest_int(float fval) {
    float val = fval + 12582912.f;
    int32_t i;
    memcpy(&i, &val, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
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
    if (!isfinite(d)) d = 0.0f; /* the scalar code's deviation (docs/gguf-quantize.md) */
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
#endif
