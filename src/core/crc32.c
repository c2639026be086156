/* crc32.c: zip's CRC-32, zlib's table code and a PCLMULQDQ folding of the bulk (crc32.h). */
#include "crc32.h"

#include <zlib.h>

uint32_t tm__crc32_ref(uint32_t crc, const void *p, uint64_t n) {
    const uint8_t *b = p;
    uLong c = crc;
    while (n) { /* zlib takes at most 4 GiB - 1 a call */
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, b, k);
        b += k;
        n -= k;
    }
    return (uint32_t)c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* Constants of the reflected polynomial (bit-reflected remainders x^k mod P, each shifted left
** by one as the reflected product needs): fold by 512 bits (x^(512+32), x^(512-32)), by 128
** bits (x^(128+32), x^(128-32)), 96 to 64 bits (x^64), and Barrett's P' and mu = x^64 / P. */
#define K_512_LO 0x154442bd4ull
#define K_512_HI 0x1c6e41596ull
#define K_128_LO 0x1751997d0ull
#define K_128_HI 0x0ccaa009eull
#define K_64     0x163cd6124ull
#define K_POLY   0x1db710641ull
#define K_MU     0x1f7011641ull

/* The CRC state c (not inverted) over n bytes at b, n a multiple of 16 and at least 64. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t fold(uint32_t c, const uint8_t *b, uint64_t n) {
    __m128i x0 = _mm_loadu_si128((const __m128i *)b), x1 = _mm_loadu_si128((const __m128i *)(b + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(b + 32)), x3 = _mm_loadu_si128((const __m128i *)(b + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)c));
    b += 64;
    n -= 64;
    const __m128i k512 = _mm_set_epi64x((long long)K_512_HI, (long long)K_512_LO);
#define FOLD(x, k, d) _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), d)
    while (n >= 64) {
        x0 = FOLD(x0, k512, _mm_loadu_si128((const __m128i *)b));
        x1 = FOLD(x1, k512, _mm_loadu_si128((const __m128i *)(b + 16)));
        x2 = FOLD(x2, k512, _mm_loadu_si128((const __m128i *)(b + 32)));
        x3 = FOLD(x3, k512, _mm_loadu_si128((const __m128i *)(b + 48)));
        b += 64;
        n -= 64;
    }
    const __m128i k128 = _mm_set_epi64x((long long)K_128_HI, (long long)K_128_LO);
    __m128i x = FOLD(x0, k128, x1);
    x = FOLD(x, k128, x2);
    x = FOLD(x, k128, x3);
    while (n >= 16) {
        x = FOLD(x, k128, _mm_loadu_si128((const __m128i *)b));
        b += 16;
        n -= 16;
    }
#undef FOLD
    const __m128i m32 = _mm_set_epi32(0, 0, 0, -1);
    /* 128 bits to 96: the low half times x^(128-32), plus the high half */
    x = _mm_xor_si128(_mm_clmulepi64_si128(x, k128, 0x10), _mm_srli_si128(x, 8));
    /* 96 to 64: the low 32 bits times x^64, plus the rest */
    x = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x, m32), _mm_set_epi64x(0, (long long)K_64), 0x00),
                      _mm_srli_si128(x, 4));
    /* Barrett reduction to 32 bits */
    const __m128i kb = _mm_set_epi64x((long long)K_MU, (long long)K_POLY);
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x, m32), kb, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, m32), kb, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(t, x), 1);
}

uint32_t tm__crc32(uint32_t crc, const void *p, uint64_t n) {
    static int have = -1; /* every thread finds the same answer: a race is harmless */
    if (have < 0) have = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    if (!have || n < 64) return tm__crc32_ref(crc, p, n);
    uint64_t bulk = n & ~(uint64_t)15;
    uint32_t c = ~fold(~crc, p, bulk);
    return tm__crc32_ref(c, (const uint8_t *)p + bulk, n - bulk);
}
#else
uint32_t tm__crc32(uint32_t crc, const void *p, uint64_t n) { return tm__crc32_ref(crc, p, n); }
#endif
