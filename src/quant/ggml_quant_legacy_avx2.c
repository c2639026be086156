/*
** ggml_quant_legacy_avx2.c: AVX2 variants of the Q4_1, Q5_0 and Q5_1 block quantizers without
** importance matrix (ggml's quantize_row_q4_1_ref / q5_0_ref / q5_1_ref; the scalar
** q4_1_block / q5_0_block / q5_1_block of ggml_quant.c are the specification), eight blocks at a
** time, F16C for the f16 d and m; and the importance weights of the legacy imatrix path. Compiled
** with __attribute__((target("avx2,f16c"))) (never -march); ggml_quant.c calls them only through
** the kernel sets "avx2" and "avx512" (kernels.h: AVX2, FMA and F16C present).
** Byte-identical to the scalar code, because every lane does the scalar arithmetic:
**   the block min and max are order-free for finite values except for the sign of a zero, where
**   the scalar keeps the first zero it meets: blocks whose min or max is a zero are rescanned in
**   the scalar order; d = (max - min) / qmax (Q4_1/Q5_1) or max / -16 (Q5_0, max the first value
**   of largest magnitude) and id = 1/d (0 where that overflows) are the same IEEE divisions;
**   (x - min) * id + 0.5 and x * id + 16.5 the same rounded operations, never fused; the
**   conversion to int truncates as the scalar's, and the values are bounded (below) so the
**   clamps are the scalar's; F16C rounds to nearest even as tm_f32_to_f16.
** A block holding a NaN or inf, or whose d or m does not fit f16, stops the row there (the row
** path then finds the reference's error). tests/unit/test_ggml_quant.c compares both paths.
*/
#include "ggml_quant_impl.h"
#include "ggml_traits.h"

#ifdef TM__GQ_HAVE_AVX2
#include "ggml_quant_avx2_blk.h"

#include <string.h>

/* [a0 a1 | a2 a3 | b0 b1 | b2 b3] pairs, per 128-bit half: lane-wise min (or max) of adjacent
** pairs, as pairmax does for the integer patterns. */
TM_AVX2 TM_INLINE __m256 pairmin(__m256 a, __m256 b) {
    return _mm256_min_ps(_mm256_shuffle_ps(a, b, 0x88), _mm256_shuffle_ps(a, b, 0xDD));
}
TM_AVX2 TM_INLINE __m256 pairmaxf(__m256 a, __m256 b) {
    return _mm256_max_ps(_mm256_shuffle_ps(a, b, 0x88), _mm256_shuffle_ps(a, b, 0xDD));
}

/* The min and max of each of nk (1..8) blocks of 32 values, block k in lane k (0 in the
** lanes past nk), with the scalar's sign of a zero (the first zero in index order). */
TM_AVX2 TM_INLINE void minmax_x8(const float *x, int nk, __m256 *vmin, __m256 *vmax) {
    __m256 lo[8], hi[8];
    for (int k = 0; k < 8; k++) {
        if (k >= nk) {
            lo[k] = hi[k] = _mm256_setzero_ps();
            continue;
        }
        const float *p = x + 32 * k;
        const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
        const __m256 c = _mm256_loadu_ps(p + 16), d = _mm256_loadu_ps(p + 24);
        lo[k] = _mm256_min_ps(_mm256_min_ps(a, b), _mm256_min_ps(c, d));
        hi[k] = _mm256_max_ps(_mm256_max_ps(a, b), _mm256_max_ps(c, d));
    }
    const __m256 l0 = pairmin(pairmin(lo[0], lo[1]), pairmin(lo[2], lo[3]));
    const __m256 l1 = pairmin(pairmin(lo[4], lo[5]), pairmin(lo[6], lo[7]));
    const __m256 h0 = pairmaxf(pairmaxf(hi[0], hi[1]), pairmaxf(hi[2], hi[3]));
    const __m256 h1 = pairmaxf(pairmaxf(hi[4], hi[5]), pairmaxf(hi[6], hi[7]));
    __m256 mn = _mm256_min_ps(_mm256_permute2f128_ps(l0, l1, 0x20), _mm256_permute2f128_ps(l0, l1, 0x31));
    __m256 mx = _mm256_max_ps(_mm256_permute2f128_ps(h0, h1, 0x20), _mm256_permute2f128_ps(h0, h1, 0x31));
    const __m256 zero = _mm256_setzero_ps();
    int zl = _mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(mn, zero, _CMP_EQ_OQ), _mm256_cmp_ps(mx, zero, _CMP_EQ_OQ)));
    zl &= (1 << nk) - 1;
    if (zl) { /* a zero min or max: the scalar scan for its sign */
        float m0[8], m1[8];
        _mm256_storeu_ps(m0, mn);
        _mm256_storeu_ps(m1, mx);
        for (int k = 0; k < nk; k++) {
            if (!(zl >> k & 1)) continue;
            float a = 3.402823466e+38f, b = -3.402823466e+38f;
            for (int j = 0; j < 32; j++) {
                if (x[32 * k + j] < a) a = x[32 * k + j];
                if (x[32 * k + j] > b) b = x[32 * k + j];
            }
            m0[k] = a;
            m1[k] = b;
        }
        mn = _mm256_loadu_ps(m0);
        mx = _mm256_loadu_ps(m1);
    }
    *vmin = mn;
    *vmax = mx;
}

/* Bit k set when block k (k < nk) of 32 values holds a NaN or inf (exponent bits all ones). */
TM_AVX2 TM_INLINE int nonfinite_x8(const float *x, int nk) {
    const __m256i e = _mm256_set1_epi32(0x7f800000);
    int m = 0;
    for (int k = 0; k < nk; k++) {
        const __m256i *p = (const __m256i *)(const void *)(x + 32 * k);
        __m256i a = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_loadu_si256(p), e), e);
        a = _mm256_or_si256(a, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_loadu_si256(p + 1), e), e));
        a = _mm256_or_si256(a, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_loadu_si256(p + 2), e), e));
        a = _mm256_or_si256(a, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_loadu_si256(p + 3), e), e));
        m |= (_mm256_movemask_epi8(a) != 0) << k;
    }
    return m;
}

/* The first of the nk blocks to stop at: the first holding a NaN or inf (nf, a bit per block)
** or whose f16 scale does not fit (bad, two bits per block, scales_x8); nk when none. */
static inline int first_stop(int nf, int bad, int nk) {
    int k = nk;
    if (nf) k = __builtin_ctz((unsigned)nf);
    bad &= (1 << (2 * nk)) - 1;
    if (bad && __builtin_ctz((unsigned)bad) / 2 < k) k = __builtin_ctz((unsigned)bad) / 2;
    return k;
}

/* 32 codes (0..31) in four vectors (values 0-7, 8-15, 16-23, 24-31) to qs[16]: the low nibbles,
** value j in the low half of byte j, value j + 16 in the high half. */
TM_AVX2 TM_INLINE void pack_nibbles(const __m256i *q, uint8_t *qs) {
    const __m256i f = _mm256_set1_epi32(15);
    const __m256i b0 = _mm256_or_si256(_mm256_and_si256(q[0], f), _mm256_slli_epi32(_mm256_and_si256(q[2], f), 4));
    const __m256i b1 = _mm256_or_si256(_mm256_and_si256(q[1], f), _mm256_slli_epi32(_mm256_and_si256(q[3], f), 4));
    __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(b0, b1), _mm256_setzero_si256());
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm_storeu_si128((__m128i *)(void *)qs, _mm256_castsi256_si128(p));
}

/* The fifth bits of the 32 codes: bit j of the little-endian qh for value j. */
TM_AVX2 TM_INLINE void pack_qh(const __m256i *q, uint8_t *qh) {
    uint32_t h = 0;
    for (int i = 0; i < 4; i++)
        h |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_slli_epi32(q[i], 27))) << (8 * i);
    memcpy(qh, &h, 4); /* x86-64: little-endian */
}

/* Q4_1 (qmax 15, 20-byte blocks) and Q5_1 (qmax 31, 24-byte blocks) on nk (1..8) blocks:
** d = (max - min) / qmax, id = 1/d, q = min(qmax, trunc((x - min) * id + 0.5)).
** (x - min) * id is at most qmax (1 + 2^-21) where d fits f16 (the rounding of d and id), so
** clamping the float to qmax + 1 before the conversion keeps the scalar's int8 / uint8
** truncation exactly. Returns the number of blocks written: all but those from the first one
** that holds a NaN or inf or whose d or m does not fit f16 on. */
TM_AVX2_F16C TM_INLINE int qx_1_x8(const float *x, int nk, uint8_t *y, const int five) {
    const int qmax = five ? 31 : 15, bs = five ? 24 : 20;
    const __m256 half = _mm256_set1_ps(0.5f), top = _mm256_set1_ps((float)(qmax + 1));
    const __m256i vq = _mm256_set1_epi32(qmax);
    const int nf = nonfinite_x8(x, nk);
    __m256 mn, mx;
    minmax_x8(x, nk, &mn, &mx);
    uint16_t h[8], hm[8];
    float df[8], id[8], mf[8];
    int bad = scales_x8(_mm256_div_ps(_mm256_sub_ps(mx, mn), _mm256_set1_ps((float)qmax)), h, df, id);
    const __m128i hmv = _mm256_cvtps_ph(mn, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128((__m128i *)(void *)hm, hmv);
    const __m128i e = _mm_set1_epi16(0x7c00);
    bad |= _mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(hmv, e), e));
    _mm256_storeu_ps(mf, mn);
    const int kend = first_stop(nf, bad, nk);
    for (int k = 0; k < kend; k++, x += 32, y += bs) {
        tm__st16(y, h[k]);
        tm__st16(y + 2, hm[k]);
        const __m256 vid = _mm256_broadcast_ss(&id[k]), vmn = _mm256_broadcast_ss(&mf[k]);
        __m256i q[4];
        for (int i = 0; i < 4; i++) {
            const __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + 8 * i), vmn), vid), half);
            q[i] = _mm256_min_epi32(_mm256_cvttps_epi32(_mm256_min_ps(v, top)), vq);
        }
        if (five) {
            pack_qh(q, y + 4);
            pack_nibbles(q, y + 8);
        } else {
            pack_nibbles(q, y + 4);
        }
    }
    return kend;
}

/* Q5_0 (22-byte blocks) on nk blocks: d = max / -16 (max the first value of largest
** magnitude), id = 1/d, q = min(31, trunc(x * id + 16.5)); x * id lies in [-16, 16] (1 + 2^-21),
** so the sum is above -1 (truncating to 0 as the scalar's int8 conversion) and is clamped to 32
** before the conversion as for Q4_1. Returns the blocks written, as qx_1_x8. */
TM_AVX2_F16C TM_INLINE int q5_0_x8(const float *x, int nk, uint8_t *y) {
    const __m256 off = _mm256_set1_ps(16.5f), top = _mm256_set1_ps(32.0f);
    const __m256i vq = _mm256_set1_epi32(31);
    const int nf = nonfinite_x8(x, nk);
    uint16_t h[8];
    float df[8], id[8];
    const int bad = scales_x8(_mm256_div_ps(signed_absmax_x8(x, nk), _mm256_set1_ps(-16.0f)), h, df, id);
    const int kend = first_stop(nf, bad, nk);
    for (int k = 0; k < kend; k++, x += 32, y += 22) {
        tm__st16(y, h[k]);
        const __m256 vid = _mm256_broadcast_ss(&id[k]);
        __m256i q[4];
        for (int i = 0; i < 4; i++) {
            const __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), vid), off);
            q[i] = _mm256_min_epi32(_mm256_cvttps_epi32(_mm256_min_ps(v, top)), vq);
        }
        pack_qh(q, y + 2);
        pack_nibbles(q, y + 6);
    }
    return kend;
}

/* A row of nb blocks of one type, eight at a time; with acc, each group's error from its bytes
** dequantized by the type's dequantizer (ggml_dequant.c), added in the error lanes
** (tm__gq_err_lanes_avx2: the bits of tm__gq_err_add, as the row path adds it). */
TM_AVX2_F16C TM_INLINE int64_t legacy_row(const float *x, int64_t nb, uint8_t *y, tm__gq_err *acc, const int type) {
    const int bs = type == TM_GGML_Q4_1 ? 20 : type == TM_GGML_Q5_1 ? 24 : 22;
    for (int64_t b = 0; b < nb; b += 8) {
        const int nk = nb - b < 8 ? (int)(nb - b) : 8;
        const float *xb = x + 32 * b;
        uint8_t *yb = y + (size_t)b * (size_t)bs;
        const int done = type == TM_GGML_Q5_0 ? q5_0_x8(xb, nk, yb) : qx_1_x8(xb, nk, yb, type == TM_GGML_Q5_1);
        if (acc && done > 0) {
            float dq[256];
            for (int k = 0; k < done; k++) {
                const uint8_t *q = yb + (size_t)k * (size_t)bs;
                if (type == TM_GGML_Q4_1) tm__ggml_dq_q4_1(q, dq + 32 * k, NULL);
                else if (type == TM_GGML_Q5_1) tm__ggml_dq_q5_1(q, dq + 32 * k, NULL);
                else tm__ggml_dq_q5_0(q, dq + 32 * k, NULL);
            }
            tm__gq_err_lanes_avx2(acc, xb, dq, (int64_t)done * 32);
        }
        if (done < nk) return b + done;
    }
    return -1;
}

TM_AVX2_F16C int64_t tm__gq_q4_1_avx2(const float *x, int64_t nb, uint8_t *y, tm__gq_err *acc) {
    return legacy_row(x, nb, y, acc, TM_GGML_Q4_1);
}
TM_AVX2_F16C int64_t tm__gq_q5_0_avx2(const float *x, int64_t nb, uint8_t *y, tm__gq_err *acc) {
    return legacy_row(x, nb, y, acc, TM_GGML_Q5_0);
}
TM_AVX2_F16C int64_t tm__gq_q5_1_avx2(const float *x, int64_t nb, uint8_t *y, tm__gq_err *acc) {
    return legacy_row(x, nb, y, acc, TM_GGML_Q5_1);
}

/* The legacy imatrix weights: w[j] = qw[j] * sqrtf(sigma2 + x[j] * x[j]) for j < n (a multiple of
** 8), each an IEEE multiply, add, square root (VSQRTPS is correctly rounded, as sqrtf) and
** multiply, as the scalar expression. */
TM_AVX2 void tm__gq_legacy_weights_avx2(const float *x, const float *qw, float sigma2, int64_t n, float *w) {
    const __m256 s2 = _mm256_set1_ps(sigma2);
    for (int64_t j = 0; j + 8 <= n; j += 8) {
        const __m256 xv = _mm256_loadu_ps(x + j);
        const __m256 r = _mm256_sqrt_ps(_mm256_add_ps(s2, _mm256_mul_ps(xv, xv)));
        _mm256_storeu_ps(w + j, _mm256_mul_ps(_mm256_loadu_ps(qw + j), r));
    }
}
#endif
