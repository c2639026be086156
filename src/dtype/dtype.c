/*
** dtype.c: the dtype traits table, dtype names, and every scalar conversion between float32
** and the other float formats (f16, bf16, OCP FP8 E4M3FN / E5M2, OCP MX E8M0).
**
** All conversions work on bit patterns with integer arithmetic (no dependence on the FPU's
** flush-to-zero or rounding-mode state beyond the default round-to-nearest-even used by
** nearbyintf), so they are exact and identical on every host.
**
** Sources:
**   IEEE 754-2008 binary16 / roundTiesToEven (f16);
**   bfloat16 = the upper 16 bits of binary32, rounded to nearest even (the formula in
**     ../shared/vectors/torch_convert/f32_to_bf16_rne: (u + 0x7fff + ((u >> 16) & 1)) >> 16);
**   OCP 8-bit Floating Point Specification (OFP8) rev 1.0 (E4M3FN, E5M2);
**   OCP Microscaling Formats (MX) v1.0, E8M0 scale: 2^(e-127), 0xFF = NaN.
*/
#include "core/core.h"

#include <float.h>
#include <math.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TM_DT_HAVE_F16C 1
#endif

/* ---------------------------------------------------------------------------------------- */
/* Traits                                                                                   */
/* ---------------------------------------------------------------------------------------- */

#define TM_FLOAT_ROW(nm, b, mx) \
    { .name = nm, .bits = b, .is_float = 1, .is_signed = 1, .is_code = 0, .qmin = 0, .qmax = 0, \
      .fmax = mx }
#define TM_INT_ROW(nm, b, sg, code, lo, hi) \
    { .name = nm, .bits = b, .is_float = 0, .is_signed = sg, .is_code = code, .qmin = lo, \
      .qmax = hi, .fmax = 0.0 }

/* Largest finite bfloat16: (2 - 2^-7) * 2^127. */
#define TM_BF16_MAX 3.38953138925153547590470800371487866880e+38

static const tm_dtype_traits dtype_traits[TM_DTYPE_COUNT] = {
    [TM_F64]     = TM_FLOAT_ROW("F64", 64, DBL_MAX),
    [TM_F32]     = TM_FLOAT_ROW("F32", 32, FLT_MAX),
    [TM_F16]     = TM_FLOAT_ROW("F16", 16, 65504.0),
    [TM_BF16]    = TM_FLOAT_ROW("BF16", 16, TM_BF16_MAX),
    [TM_F8_E4M3] = { .name = "F8_E4M3", .bits = 8, .is_float = 1, .is_signed = 1, .is_code = 1,
                     .qmin = 0, .qmax = 0, .fmax = 448.0 },
    [TM_F8_E5M2] = { .name = "F8_E5M2", .bits = 8, .is_float = 1, .is_signed = 1, .is_code = 1,
                     .qmin = 0, .qmax = 0, .fmax = 57344.0 },
    /* E8M0 has no sign bit: is_signed 0. Largest finite value 2^127 (0xFE). */
    [TM_F8_E8M0] = { .name = "F8_E8M0", .bits = 8, .is_float = 1, .is_signed = 0, .is_code = 0,
                     .qmin = 0, .qmax = 0, .fmax = 1.70141183460469231731687303715884105728e+38 },
    [TM_I64]     = TM_INT_ROW("I64", 64, 1, 0, INT64_MIN, INT64_MAX),
    [TM_I32]     = TM_INT_ROW("I32", 32, 1, 0, INT32_MIN, INT32_MAX),
    [TM_I16]     = TM_INT_ROW("I16", 16, 1, 0, INT16_MIN, INT16_MAX),
    [TM_I8]      = TM_INT_ROW("I8", 8, 1, 1, INT8_MIN, INT8_MAX),
    [TM_U64]     = TM_INT_ROW("U64", 64, 0, 0, 0, INT64_MAX),
    [TM_U32]     = TM_INT_ROW("U32", 32, 0, 0, 0, UINT32_MAX),
    [TM_U16]     = TM_INT_ROW("U16", 16, 0, 0, 0, UINT16_MAX),
    [TM_U8]      = TM_INT_ROW("U8", 8, 0, 1, 0, UINT8_MAX),
    [TM_BOOL]    = TM_INT_ROW("BOOL", 8, 0, 0, 0, 1),
    [TM_I4]      = TM_INT_ROW("I4", 4, 1, 1, -8, 7),
    [TM_U4]      = TM_INT_ROW("U4", 4, 0, 1, 0, 15),
};
_Static_assert(sizeof dtype_traits / sizeof dtype_traits[0] == TM_DTYPE_COUNT,
               "one traits row per tm_dtype");
_Static_assert(TM_DTYPE_COUNT == 18, "a new tm_dtype needs a traits row, a name and conversions");

const tm_dtype_traits *tm_dtype_get(tm_dtype dt) {
    if ((int)dt < 0 || dt >= TM_DTYPE_COUNT) return NULL;
    return &dtype_traits[dt];
}

/* Lower-case command-line aliases (tensormorph.h, tm_dtype_from_name). */
static const struct {
    const char *alias;
    tm_dtype    dt;
} dtype_aliases[] = {
    {"f32", TM_F32},   {"f16", TM_F16},   {"bf16", TM_BF16},         {"int8", TM_I8},
    {"uint8", TM_U8},  {"int4", TM_I4},   {"uint4", TM_U4},          {"fp8_e4m3", TM_F8_E4M3},
    {"fp8_e5m2", TM_F8_E5M2},
};

tm_status tm_dtype_from_name(const char *name, tm_dtype *out) {
    if (!name || !out) return TM_E_UNSUPPORTED;
    for (int i = 0; i < TM_DTYPE_COUNT; i++) {
        if (strcmp(name, dtype_traits[i].name) == 0) {
            *out = (tm_dtype)i;
            return TM_OK;
        }
    }
    for (size_t i = 0; i < sizeof dtype_aliases / sizeof dtype_aliases[0]; i++) {
        if (strcmp(name, dtype_aliases[i].alias) == 0) {
            *out = dtype_aliases[i].dt;
            return TM_OK;
        }
    }
    return TM_E_UNSUPPORTED;
}

uint64_t tm_dtype_nbytes(tm_dtype dt, int64_t n) {
    const tm_dtype_traits *t = tm_dtype_get(dt);
    if (!t || n < 0) return UINT64_MAX;
    uint64_t n_bits;
    if (!tm__mul_u64_ok((uint64_t)n, (uint64_t)t->bits, &n_bits)) return UINT64_MAX;
    return n_bits / 8 + (n_bits % 8 != 0);
}

/* ---------------------------------------------------------------------------------------- */
/* Bit casts                                                                                */
/* ---------------------------------------------------------------------------------------- */

static inline uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* ---------------------------------------------------------------------------------------- */
/* f16 (IEEE binary16)                                                                      */
/* ---------------------------------------------------------------------------------------- */

uint16_t tm_f32_to_f16(float x) {
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, sign and the top 9 payload bits kept */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 (and inf) -> inf */
    if (a >= 0x38800000u) {                                   /* normal result, >= 2^-14 */
        uint32_t r = a + 0xfffu + ((a >> 13) & 1u);           /* round to nearest even */
        return (uint16_t)(sign | ((r - (112u << 23)) >> 13)); /* rebias 127 -> 15 */
    }
    if (a < 0x33000000u) return sign; /* < 2^-25 rounds to zero; 2^-25 ties to even zero */
    /* Subnormal result: value = mant * 2^(exp-150); in units of 2^-24 that is
    ** mant >> (126 - exp); shift is 14..24 here. Round the dropped bits to nearest even. */
    uint32_t exp = a >> 23, mant = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp;
    uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

float tm_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13)); /* inf / NaN */
    if (exp != 0) return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0) return bits_f32(sign);
    /* subnormal: mant * 2^-24, exact in float32 */
    float v = (float)mant * 5.9604644775390625e-08f;
    return sign ? -v : v;
}

/* ---------------------------------------------------------------------------------------- */
/* bf16                                                                                     */
/* ---------------------------------------------------------------------------------------- */

/* NaN policy (documented in docs/quantization.md "Conversions"): a NaN keeps its sign and the
** top 7 payload bits and gets the quiet bit: (u >> 16) | 0x0040. That is ggml's
** ggml_compute_fp32_to_bf16 and gguf-py's BF16 (torch_convert/f32_to_bf16_nan "ggml" bits).
** torch 1.13 gives 0xFFFF (vectorized) or 0x7FC0 (scalar) instead; we do not copy either,
** because both lose the sign and one depends on the code path. */
uint16_t tm_f32_to_bf16(float x) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float tm_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

/* ---------------------------------------------------------------------------------------- */
/* OCP FP8                                                                                  */
/* ---------------------------------------------------------------------------------------- */

/* One 8-bit float format: 1 sign bit, ebits exponent bits, mbits mantissa bits. */
struct fp8_format {
    int     mbits;
    int     bias;
    uint8_t max_code;  /* magnitude code of the largest finite value              */
    uint8_t nan_code;  /* magnitude code produced for NaN                         */
    uint8_t inf_code;  /* magnitude code of +inf, or 0 when the format has none   */
};

static const struct fp8_format fmt_e4m3 = {.mbits = 3, .bias = 7, .max_code = 0x7e,
                                           .nan_code = 0x7f, .inf_code = 0};
static const struct fp8_format fmt_e5m2 = {.mbits = 2, .bias = 15, .max_code = 0x7b,
                                           .nan_code = 0x7e, .inf_code = 0x7c};

/* OFP8 rev 1.0 section 5: round to nearest even; saturate clamps to max finite (inf too);
** otherwise overflow gives inf (E5M2) or NaN (E4M3FN, which has no inf). */
static uint8_t f32_to_fp8(float x, int saturate, const struct fp8_format *f) {
    uint32_t u = f32_bits(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint8_t)(sign | f->nan_code);
    uint8_t overflow = saturate ? f->max_code : (f->inf_code ? f->inf_code : f->nan_code);
    if (a == 0x7f800000u) return (uint8_t)(sign | overflow);
    int emin = 1 - f->bias; /* exponent of the smallest normal */
    uint32_t code;
    if (a < (uint32_t)(127 + emin) << 23) {
        /* below the smallest normal: multiples of 2^(emin - mbits); a * 2^(mbits - emin) is
        ** exact (a power-of-two scaling without overflow) and nearbyintf rounds it to even.
        ** A result of 2^mbits is the smallest normal's code, so the carry is right. */
        float m = nearbyintf(ldexpf(bits_f32(a), f->mbits - emin));
        code = (uint32_t)m;
    } else {
        /* normal: rebias the float32 exponent, then round away 23 - mbits mantissa bits to
        ** nearest even; a carry out of the mantissa increments the exponent, as it should. */
        uint32_t v = a - ((uint32_t)(127 - f->bias) << 23);
        int shift = 23 - f->mbits;
        code = (v + (1u << (shift - 1)) - 1u + ((v >> shift) & 1u)) >> shift;
    }
    if (code > f->max_code) return (uint8_t)(sign | overflow);
    return (uint8_t)(sign | code);
}

static float fp8_to_f32(uint8_t v, const struct fp8_format *f) {
    int ebits = 7 - f->mbits;
    uint32_t mag = v & 0x7fu;
    int exp = (int)(mag >> f->mbits), mant = (int)(mag & ((1u << f->mbits) - 1u));
    float r;
    if (f->inf_code == 0 && mag == 0x7f) {
        r = NAN;
    } else if (f->inf_code != 0 && exp == (1 << ebits) - 1) {
        r = mant == 0 ? INFINITY : NAN;
    } else if (exp == 0) {
        r = ldexpf((float)mant, 1 - f->bias - f->mbits);
    } else {
        r = ldexpf((float)((1 << f->mbits) + mant), exp - f->bias - f->mbits);
    }
    return (v & 0x80u) ? -r : r;
}

uint8_t tm_f32_to_e4m3(float x, int saturate) { return f32_to_fp8(x, saturate, &fmt_e4m3); }
float tm_e4m3_to_f32(uint8_t v) { return fp8_to_f32(v, &fmt_e4m3); }
uint8_t tm_f32_to_e5m2(float x, int saturate) { return f32_to_fp8(x, saturate, &fmt_e5m2); }
float tm_e5m2_to_f32(uint8_t v) { return fp8_to_f32(v, &fmt_e5m2); }

float tm_e8m0_to_f32(uint8_t v) {
    if (v == 0xffu) return NAN;
    return ldexpf(1.0f, (int)v - 127); /* 2^-127 is a float32 subnormal: exact */
}

/* ---------------------------------------------------------------------------------------- */
/* Buffers                                                                                  */
/* ---------------------------------------------------------------------------------------- */

/* f16 -> f32 for n halves (little-endian) at p, the bits of tm_f16_to_f32 for every pattern:
** the portable branch-free loop, and an F16C one picked at run time. */
static void f16_to_f32_bulk(const uint8_t *p, int64_t n, float *dst) {
    /* tm_f16_to_f32 without branches, so the compiler vectorises it; equal for every one of
    ** the 65536 patterns (tests/unit/test_dtype.c checks all): the magnitude bits moved to
    ** float32's place read as a float32 whose value is the half's times 2^-112 (subnormal
    ** halves land on float32 subnormals), so one exact multiply by 2^112 rescales normal and
    ** subnormal halves alike; exponent 31 (inf/NaN) maps to 255 with the payload kept. */
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        const uint32_t m = (uint32_t)(h & 0x7fffu) << 13;
        float f;
        memcpy(&f, &m, 4);
        f *= 0x1p112f;
        uint32_t r;
        memcpy(&r, &f, 4);
        const uint32_t special = 0u - (uint32_t)(m >= 0x0f800000u); /* all ones: inf/NaN */
        r = (r & ~special) | ((m | 0x70000000u) & special);
        r |= (uint32_t)(h & 0x8000u) << 16;
        memcpy(dst + i, &r, 4);
    }
}

#ifdef TM_DT_HAVE_F16C
/* VCVTPH2PS is exact for every half except a signaling NaN, which it returns quieted (bit 22
** set); tm_f16_to_f32 keeps the payload as it is, so those lanes get bit 22 cleared again. */
__attribute__((target("avx2,f16c"))) static void f16_to_f32_f16c(const uint8_t *p, int64_t n, float *dst) {
    const __m128i expm = _mm_set1_epi16(0x7e00), snan_exp = _mm_set1_epi16(0x7c00), low = _mm_set1_epi16(0x01ff);
    const __m256i quiet = _mm256_set1_epi32(0x00400000);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i));
        const __m128i snan = _mm_andnot_si128(_mm_cmpeq_epi16(_mm_and_si128(h, low), _mm_setzero_si128()),
                                              _mm_cmpeq_epi16(_mm_and_si128(h, expm), snan_exp));
        __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h));
        f = _mm256_andnot_si256(_mm256_and_si256(_mm256_cvtepi16_epi32(snan), quiet), f);
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), f);
    }
    f16_to_f32_bulk(p + 2 * i, n - i, dst + i);
}
#endif

tm_status tm_convert_to_f32(tm_dtype src_dtype, const void *src, int64_t n, float *dst) {
    const uint8_t *p = (const uint8_t *)src;
    if (n < 0 || (n > 0 && (!src || !dst))) return TM_E_INVALID_ARG;
    switch (src_dtype) {
    case TM_F64:
        for (int64_t i = 0; i < n; i++) {
            uint64_t b = tm__ld64(p + 8 * i);
            double d;
            memcpy(&d, &b, 8);
            dst[i] = (float)d;
        }
        return TM_OK;
    case TM_F32:
        if (n > 0) memcpy(dst, src, (size_t)n * 4);
        return TM_OK;
    case TM_F16:
#ifdef TM_DT_HAVE_F16C
        if (__builtin_cpu_supports("avx2") && tm__cpu_has_f16c()) {
            f16_to_f32_f16c(p, n, dst);
            return TM_OK;
        }
#endif
        f16_to_f32_bulk(p, n, dst);
        return TM_OK;
    case TM_BF16: {
        /* bf16 is the top half of an f32: widening is a 16-bit shift, exact for every pattern
        ** (NaN payloads included); written as a plain loop the compiler vectorises */
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            uint32_t w = (uint32_t)h << 16;
            memcpy(dst + i, &w, 4);
        }
        return TM_OK;
    }
    case TM_F8_E4M3:
        for (int64_t i = 0; i < n; i++) dst[i] = tm_e4m3_to_f32(p[i]);
        return TM_OK;
    case TM_F8_E5M2:
        for (int64_t i = 0; i < n; i++) dst[i] = tm_e5m2_to_f32(p[i]);
        return TM_OK;
    case TM_F8_E8M0:
        for (int64_t i = 0; i < n; i++) dst[i] = tm_e8m0_to_f32(p[i]);
        return TM_OK;
    case TM_I64:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(int64_t)tm__ld64(p + 8 * i);
        return TM_OK;
    case TM_I32:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(int32_t)tm__ld32(p + 4 * i);
        return TM_OK;
    case TM_I16:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(int16_t)tm__ld16(p + 2 * i);
        return TM_OK;
    case TM_I8:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(int8_t)p[i];
        return TM_OK;
    case TM_U64:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)tm__ld64(p + 8 * i);
        return TM_OK;
    case TM_U32:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)tm__ld32(p + 4 * i);
        return TM_OK;
    case TM_U16:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)tm__ld16(p + 2 * i);
        return TM_OK;
    case TM_U8:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)p[i];
        return TM_OK;
    case TM_BOOL:
        for (int64_t i = 0; i < n; i++) dst[i] = p[i] ? 1.0f : 0.0f;
        return TM_OK;
    case TM_I4:
    case TM_U4:
    case TM_DTYPE_COUNT:
        break;
    }
    return TM_E_UNSUPPORTED;
}

tm_status tm_convert_from_f32(tm_dtype dst_dtype, const float *src, int64_t n, void *dst) {
    uint8_t *p = (uint8_t *)dst;
    if (n < 0 || (n > 0 && (!src || !dst))) return TM_E_INVALID_ARG;
    switch (dst_dtype) {
    case TM_F64:
        for (int64_t i = 0; i < n; i++) {
            double d = (double)src[i];
            uint64_t b;
            memcpy(&b, &d, 8);
            tm__st64(p + 8 * i, b);
        }
        return TM_OK;
    case TM_F32:
        if (n > 0) memcpy(dst, src, (size_t)n * 4);
        return TM_OK;
    case TM_F16:
        for (int64_t i = 0; i < n; i++) tm__st16(p + 2 * i, tm_f32_to_f16(src[i]));
        return TM_OK;
    case TM_BF16:
        for (int64_t i = 0; i < n; i++) tm__st16(p + 2 * i, tm_f32_to_bf16(src[i]));
        return TM_OK;
    case TM_F8_E4M3:
        for (int64_t i = 0; i < n; i++) p[i] = tm_f32_to_e4m3(src[i], 1);
        return TM_OK;
    case TM_F8_E5M2:
        for (int64_t i = 0; i < n; i++) p[i] = tm_f32_to_e5m2(src[i], 1);
        return TM_OK;
    default:
        break;
    }
    return TM_E_UNSUPPORTED;
}
