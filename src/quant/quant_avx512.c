/*
** quant_avx512.c: AVX-512F variants of the integer quantize/dequantize run kernels (16 lanes),
** compiled with __attribute__((target("avx512f"))) named by the kernel set
** "avx512" (kernels.c), handed out only where the CPU has AVX-512F. Bit-identical to the reference kernels for the same
** reasons as quant_avx2.c; vpmovdb keeps the low byte of each code (two's complement).
*/
#include "kernels.h"

#ifdef TM_HAVE_X86_KERNELS
#include <immintrin.h>

#define TM_AVX512 __attribute__((target("avx512f")))

TM_AVX512 void tm__quant_int_avx512(const float *x, int64_t n, const struct tm__qseg *seg,
                                       uint8_t *codes) {
    const __m512 s = _mm512_set1_ps(seg->scale), inv = _mm512_set1_ps(seg->inv_scale);
    const __m512 lo = _mm512_set1_ps(seg->lo), hi = _mm512_set1_ps(seg->hi);
    const __m512i zp = _mm512_set1_epi32(seg->zp);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        v = seg->use_mul ? _mm512_mul_ps(v, inv) : _mm512_div_ps(v, s);
        __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
        __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        r = _mm512_mask_blend_ps(nan, r, _mm512_setzero_ps());
        __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(r), zp);
        _mm_storeu_si128((__m128i *)(void *)(codes + i), _mm512_cvtepi32_epi8(q));
    }
    for (; i < n; i++) codes[i] = (uint8_t)tm__quant_one(x[i], seg);
}

TM_AVX512 void tm__dequant_int_avx512(const uint8_t *codes, int64_t n,
                                         const struct tm__qseg *seg, float *out) {
    const __m512 s = _mm512_set1_ps(seg->scale);
    const __m512i zp = _mm512_set1_epi32(seg->zp);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(codes + i));
        __m512i q = seg->code_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
        __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(q, zp));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(v, s));
    }
    if (i < n) tm__dequant_int_ref(codes + i, n - i, seg, out + i);
}


#else
typedef int tm__quant_avx512_unused;
#endif
