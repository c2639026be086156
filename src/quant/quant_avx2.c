/*
** quant_avx2.c: AVX2 variants of the integer quantize/dequantize run kernels and of the
** observers' min/max. Compiled for
** every x86 build with __attribute__((target("avx2"))) (never -march); the kernel set "avx2"
** (kernels.c) names them; tm_kernels_get hands it out only where the CPU has AVX2.
** Bit-identical to tm__quant_int_ref / tm__dequant_int_ref (tests/unit/test_quant_kernels.c proves it on random data, ties and clipping):
** the same IEEE division/multiplication, round-to-nearest-even (vroundps imm 8 = nearbyint),
** the same clamp in float32 before the integer conversion, NaN -> the zero point.
*/
#include "kernels.h"

#ifdef TM_HAVE_X86_KERNELS
#include <immintrin.h>
#include <math.h>

#define TM_AVX2 __attribute__((target("avx2")))

/* round(v) clamped to [lo, hi], NaN -> 0: the code minus the zero point, as a float */
TM_AVX2 static inline __m256 qround8_avx2(const float *x, const struct tm__qseg *seg) {
    __m256 v = _mm256_loadu_ps(x);
    v = seg->use_mul ? _mm256_mul_ps(v, _mm256_set1_ps(seg->inv_scale))
                     : _mm256_div_ps(v, _mm256_set1_ps(seg->scale));
    __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* max/min return their second operand when the first is NaN; NaN lanes become 0 below */
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(seg->lo)), _mm256_set1_ps(seg->hi));
    return _mm256_andnot_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), r);
}

TM_AVX2 static inline __m256i quant8_avx2(const float *x, const struct tm__qseg *seg) {
    __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(qround8_avx2(x, seg)), _mm256_set1_epi32(seg->zp));
    return _mm256_and_si256(q, _mm256_set1_epi32(0xff)); /* the code byte, two's complement */
}

/* quant_int_avx2 + dequant_int_avx2 in one pass. The stored code c = r + zp lies in the code
** dtype's range, so reading it back (sign- or zero-extended) gives c - zp = r exactly, and the
** dequantized value float(c - zp) * s is float(r) * s, computed here from the integer r (so a
** rounded -0 gives +0 as the dequantizer does). */
TM_AVX2 void tm__quant_dequant_int_avx2(const float *x, int64_t n, const struct tm__qseg *seg,
                                           uint8_t *codes, float *out) {
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i zp = _mm256_set1_epi32(seg->zp), byte = _mm256_set1_epi32(0xff);
    const __m256 s = _mm256_set1_ps(seg->scale);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            const __m256i r = _mm256_cvtps_epi32(qround8_avx2(x + i + 8 * k, seg));
            _mm256_storeu_ps(out + i + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(r), s));
            q[k] = _mm256_and_si256(_mm256_add_epi32(r, zp), byte);
        }
        __m256i ab = _mm256_packus_epi32(q[0], q[1]), cd = _mm256_packus_epi32(q[2], q[3]);
        __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), order);
        _mm256_storeu_si256((__m256i *)(void *)(codes + i), bytes);
    }
    if (i < n) { /* the tail: the reference kernels */
        tm__quant_int_ref(x + i, n - i, seg, codes + i);
        tm__dequant_int_ref(codes + i, n - i, seg, out + i);
    }
}

TM_AVX2 void tm__quant_int_avx2(const float *x, int64_t n, const struct tm__qseg *seg,
                                   uint8_t *codes) {
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i a = quant8_avx2(x + i, seg), b = quant8_avx2(x + i + 8, seg);
        __m256i c = quant8_avx2(x + i + 16, seg), d = quant8_avx2(x + i + 24, seg);
        /* packs work per 128-bit lane: dwords come out a0 b0 c0 d0 a1 b1 c1 d1; reorder */
        __m256i ab = _mm256_packus_epi32(a, b), cd = _mm256_packus_epi32(c, d);
        __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), order);
        _mm256_storeu_si256((__m256i *)(void *)(codes + i), bytes);
    }
    for (; i < n; i++) codes[i] = (uint8_t)tm__quant_one(x[i], seg);
}

TM_AVX2 void tm__dequant_int_avx2(const uint8_t *codes, int64_t n, const struct tm__qseg *seg,
                                     float *out) {
    const __m256 s = _mm256_set1_ps(seg->scale);
    const __m256i zp = _mm256_set1_epi32(seg->zp);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(codes + i));
        __m256i q = seg->code_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
        __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(q, zp));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(v, s));
    }
    if (i < n) tm__dequant_int_ref(codes + i, n - i, seg, out + i);
}

/* ---- the observers' min/max (the "avx2" and "avx512" sets) --------------------------------- */

/* min and max of the finite values (inputs are checked, or non-finite ones are allowed and
** ignored); +inf / -inf when there is none. Returns 1 when it met a non-finite value. The
** kernel set (kernels.h) picks tm__minmax_ref or tm__minmax_avx2. The SSE2 path takes 8 lanes
** (a non-finite value becomes +inf for the minimum and -inf for the maximum, which is skipping
** it); minimum and maximum do not depend on the order, except which of -0 and +0 is returned
** when both are the extreme, which no scale or zero point depends on. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* tm__minmax_avx2 when every value is finite, 32 values a step in four AVX2 accumulators of each;
** returns 0 without a result when some value is NaN or infinite (exponent bits all ones), and the
** caller takes the general path. The minimum and maximum of finite values do not depend on the
** order (but for the -0 / +0 choice noted above). */
__attribute__((target("avx2"))) static int minmax_f32_avx2(const float *v, int64_t n, float *mn, float *mx) {
    const __m256i expo = _mm256_set1_epi32(0x7f800000);
    __m256 lo[4], hi[4];
    __m256i bad = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) { lo[k] = _mm256_set1_ps(INFINITY); hi[k] = _mm256_set1_ps(-INFINITY); }
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            const __m256 x = _mm256_loadu_ps(v + i + 8 * k);
            lo[k] = _mm256_min_ps(lo[k], x);
            hi[k] = _mm256_max_ps(hi[k], x);
            const __m256i e = _mm256_and_si256(_mm256_castps_si256(x), expo);
            bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, expo));
        }
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(v + i);
        lo[0] = _mm256_min_ps(lo[0], x);
        hi[0] = _mm256_max_ps(hi[0], x);
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(x), expo), expo));
    }
    if (!_mm256_testz_si256(bad, bad)) return 0;
    float l[8], h[8], a = INFINITY, b = -INFINITY;
    lo[0] = _mm256_min_ps(_mm256_min_ps(lo[0], lo[1]), _mm256_min_ps(lo[2], lo[3]));
    hi[0] = _mm256_max_ps(_mm256_max_ps(hi[0], hi[1]), _mm256_max_ps(hi[2], hi[3]));
    _mm256_storeu_ps(l, lo[0]);
    _mm256_storeu_ps(h, hi[0]);
    for (int k = 0; k < 8; k++) {
        if (l[k] < a) a = l[k];
        if (h[k] > b) b = h[k];
    }
    for (; i < n; i++) {
        if (!isfinite(v[i])) return 0;
        if (v[i] < a) a = v[i];
        if (v[i] > b) b = v[i];
    }
    *mn = a;
    *mx = b;
    return 1;
}
#define TM_OBS_HAVE_AVX2 1
#endif

/* The "avx2" and "avx512" sets' min/max: AVX2 when every value is finite, else SSE2 lanes. */
int tm__minmax_avx2(const float *v, int64_t n, float *mn, float *mx) {
    float a = INFINITY, b = -INFINITY;
    int64_t i = 0, bad = 0;
#ifdef TM_OBS_HAVE_AVX2
    if (n >= 32 && minmax_f32_avx2(v, n, mn, mx)) return 0;
#endif
#ifdef __SSE2__
    if (n >= 8) {
        const __m128 sign = _mm_set1_ps(-0.0f), inf = _mm_set1_ps(INFINITY), ninf = _mm_set1_ps(-INFINITY);
        __m128 lo0 = inf, lo1 = inf, hi0 = ninf, hi1 = ninf, all = _mm_castsi128_ps(_mm_set1_epi32(-1));
        for (; i + 8 <= n; i += 8) {
            __m128 x0 = _mm_loadu_ps(v + i), x1 = _mm_loadu_ps(v + i + 4);
            __m128 f0 = _mm_cmplt_ps(_mm_andnot_ps(sign, x0), inf), f1 = _mm_cmplt_ps(_mm_andnot_ps(sign, x1), inf);
            all = _mm_and_ps(all, _mm_and_ps(f0, f1));
            lo0 = _mm_min_ps(lo0, _mm_or_ps(_mm_and_ps(f0, x0), _mm_andnot_ps(f0, inf)));
            lo1 = _mm_min_ps(lo1, _mm_or_ps(_mm_and_ps(f1, x1), _mm_andnot_ps(f1, inf)));
            hi0 = _mm_max_ps(hi0, _mm_or_ps(_mm_and_ps(f0, x0), _mm_andnot_ps(f0, ninf)));
            hi1 = _mm_max_ps(hi1, _mm_or_ps(_mm_and_ps(f1, x1), _mm_andnot_ps(f1, ninf)));
        }
        bad = _mm_movemask_ps(all) != 0xf;
        float l[8], h[8];
        _mm_storeu_ps(l, lo0); _mm_storeu_ps(l + 4, lo1);
        _mm_storeu_ps(h, hi0); _mm_storeu_ps(h + 4, hi1);
        for (int k = 0; k < 8; k++) {
            if (l[k] < a) a = l[k];
            if (h[k] > b) b = h[k];
        }
    }
#endif
    float ta, tb; /* the rest through the reference, folded in as the scalar scan would */
    const int tbad = tm__minmax_ref(v + i, n - i, &ta, &tb);
    *mn = ta < a ? ta : a;
    *mx = tb > b ? tb : b;
    return bad || tbad;
}

#else
typedef int tm__quant_avx2_unused; /* ISO C: a translation unit must declare something */
#endif
