/* ggml_round.h: the integer helpers of ggml's reference quantizers (ggml-quants.c), shared by the
** scalar and AVX2 quantizers here (ggml_quant.c, ggml_quant_iq.c, ggml_quant_iq2.c,
** ggml_quant_iq_avx2.c) so that every path rounds alike. */
#ifndef TM_QUANT_GGML_ROUND_H
#define TM_QUANT_GGML_ROUND_H
#include <stdint.h>
#include <string.h>

/* nearest_int: x rounded to the nearest integer, ties to even: 1.5 * 2^23 added in float32
** rounds to an integer, read from the mantissa bits (the reference's nearest_int). Exact for
** |x| <= 2^22 - 1; outside that range, and for NaN or inf (0, resp. -2^22), it returns what the
** bit trick gives (as the reference, whose range assert is compiled out), never undefined
** behaviour. */
static inline int nearest_int(float fval) {
    float val = fval + 12582912.f;
    int32_t i;
    memcpy(&i, &val, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int imax(int a, int b) { return a > b ? a : b; } /* ggml's MAX on ints */
static inline int imin(int a, int b) { return a < b ? a : b; } /* ggml's MIN on ints */
#endif
