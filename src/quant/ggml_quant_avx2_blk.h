/*
** ggml_quant_avx2_blk.h: the per-block reductions and f16 scales shared by the AVX2 kernels of
** the legacy 32-value types, eight blocks at a time (ggml_quant_avx2.c: Q8_0, Q4_0;
** ggml_quant_legacy_avx2.c: Q4_1, Q5_0, Q5_1). Private, included only by those two files, and
** only where TM__GQ_HAVE_AVX2 is defined (after <immintrin.h>). Every result is the scalar
** code's (ggml_quant.c): the reductions are order-free or pick the scalar's element.
*/
#ifndef TM_GGML_QUANT_AVX2_BLK_H
#define TM_GGML_QUANT_AVX2_BLK_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define TM_AVX2 __attribute__((target("avx2")))
#define TM_AVX2_F16C __attribute__((target("avx2,f16c")))
#define TM_INLINE static inline __attribute__((always_inline))

/* Per-lane max of the 32-bit patterns of two vectors' adjacent pairs: lane-wise within each
** 128-bit half, [a0 a1 | a2 a3 | b0 b1 | b2 b3] -> [max a0,a1; max a2,a3; max b0,b1; max b2,b3]. */
TM_AVX2_F16C TM_INLINE __m256i pairmax(__m256i a, __m256i b) {
    const __m256 fa = _mm256_castsi256_ps(a), fb = _mm256_castsi256_ps(b);
    return _mm256_max_epi32(_mm256_castps_si256(_mm256_shuffle_ps(fa, fb, 0x88)),
                            _mm256_castps_si256(_mm256_shuffle_ps(fa, fb, 0xDD)));
}

/* The largest magnitude of each of nk (1..8) blocks of 32 values, block k in lane k (0 in the
** lanes past nk), as an integer max of the magnitudes' bit patterns: for non-negative floats that
** order is the float order (exact, order-free), and a NaN, whose pattern is above +inf's, is
** never dropped, so a lane is non-finite exactly when its block holds a NaN or inf. */
TM_AVX2_F16C TM_INLINE __m256i absmax_x8(const float *x, int nk) {
    const __m256i mag = _mm256_set1_epi32(0x7fffffff);
    __m256i m[8];
    for (int k = 0; k < 8; k++) {
        if (k >= nk) {
            m[k] = _mm256_setzero_si256();
            continue;
        }
        const __m256i *p = (const __m256i *)(const void *)(x + 32 * k);
        __m256i a = _mm256_max_epi32(_mm256_and_si256(mag, _mm256_loadu_si256(p)),
                                     _mm256_and_si256(mag, _mm256_loadu_si256(p + 1)));
        __m256i c = _mm256_max_epi32(_mm256_and_si256(mag, _mm256_loadu_si256(p + 2)),
                                     _mm256_and_si256(mag, _mm256_loadu_si256(p + 3)));
        m[k] = _mm256_max_epi32(a, c);
    }
    const __m256i b0 = pairmax(pairmax(m[0], m[1]), pairmax(m[2], m[3]));
    const __m256i b1 = pairmax(pairmax(m[4], m[5]), pairmax(m[6], m[7]));
    return _mm256_max_epi32(_mm256_permute2x128_si256(b0, b1, 0x20), _mm256_permute2x128_si256(b0, b1, 0x31));
}

/* d (8 lanes) -> its f16 bits (F16C, round to nearest even: tm_f32_to_f16's bits for every
** float, NaN and inf included), the f16 value read back as the dequantizer reads it (exact),
** and id = 1/d with the scalar rule (0 where d is 0 or 1/d overflows); returns the lane mask
** of the d that do not fit f16 (inf or NaN bits), which stop the row. */
TM_AVX2_F16C TM_INLINE int scales_x8(__m256 d, uint16_t h[8], float df[8], float id[8]) {
    const __m128i hv = _mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128((__m128i *)(void *)h, hv);
    _mm256_storeu_ps(df, _mm256_cvtph_ps(hv));
    __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), d);
    const __m256 inf = _mm256_set1_ps(INFINITY);
    inv = _mm256_andnot_ps(_mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), inv), inf, _CMP_EQ_OQ), inv);
    _mm256_storeu_ps(id, inv);
    const __m128i e = _mm_set1_epi16(0x7c00);
    return _mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(hv, e), e));
}

/* The scalar signed_absmax of each of nk (1..8) blocks of 32 values, block k in lane k
** (+0 in the lanes past nk): the first value of largest magnitude, +0 when all are zero. */
TM_AVX2_F16C TM_INLINE __m256 signed_absmax_x8(const float *x, int nk) {
    int32_t am[8];
    float mx[8] = {0};
    _mm256_storeu_si256((__m256i *)(void *)am, absmax_x8(x, nk));
    for (int k = 0; k < nk; k++) {
        if (am[k] == 0) continue; /* all zero: +0, as the scalar scan leaves it */
        const __m256i va = _mm256_set1_epi32(am[k]), mag = _mm256_set1_epi32(0x7fffffff);
        const __m256i *p = (const __m256i *)(const void *)(x + 32 * k);
        uint32_t bits = 0;
        for (int i = 0; i < 4; i++) {
            __m256i eq = _mm256_cmpeq_epi32(_mm256_and_si256(mag, _mm256_loadu_si256(p + i)), va);
            bits |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(eq)) << (8 * i);
        }
        mx[k] = x[32 * k + __builtin_ctz(bits)]; /* bits != 0: am[k] is one of the patterns */
    }
    return _mm256_loadu_ps(mx);
}

#endif
