/*
** ggml_quant.c: ggml block quantizers, byte-identical to ggml's C reference quantizers
** (quantize_row_*_ref, ggml-org/ggml@d99724f2,
** src/ggml-quants.c, default x86-64 build). Written from the block layouts and algorithms
** described in docs/gguf-quantize.md and the case.json files of ../shared/vectors/gguf; every float32
** expression below keeps the reference's order of operations (the library is compiled with
** -ffp-contract=off, so every product is rounded, as in that build).
**
** Block layouts (little-endian, no padding):
**   Q4_0   18 B / 32: f16 d, qs[16] (value j low nibble of qs[j], j+16 high nibble); x = d(q-8)
**   Q4_1   20 B / 32: f16 d, f16 m, qs[16];                                 x = d q + m
**   Q5_0   22 B / 32: f16 d, u32 qh (5th bit of value j at bit j), qs[16];   x = d(q-16)
**   Q5_1   24 B / 32: f16 d, f16 m, u32 qh, qs[16];                         x = d q + m
**   Q8_0   34 B / 32: f16 d, int8 qs[32];                                   x = d q
**   Q2_K   84 B / 256: scales[16] (lo: scale, hi: min), qs[64], f16 d, f16 dmin
**   Q3_K  110 B / 256: hmask[32], qs[64], scales[12] (16 x 6 bit, -32), f16 d
**   Q4_K  144 B / 256: f16 d, f16 dmin, scales[12] (8 x 6-bit scale, 8 x 6-bit min), qs[128]
**   Q5_K  176 B / 256: f16 d, f16 dmin, scales[12], qh[32], qs[128]
**   Q6_K  210 B / 256: ql[128], qh[64], int8 scales[16], f16 d
*/
#include "core/core.h"
#include "ggml_round.h"
#include "ggml_traits.h"
#include "tensormorph/ggml.h"
#include "tensormorph/ggml_quant.h"

#include <math.h>

#define QK_K 256
#define GROUP_MAX_EPS 1e-15f /* the reference's threshold for "all zero" sub-blocks */

/* ---------------------------------------------------------------------------------------- */
/* Shared helpers                                                                            */
/* ---------------------------------------------------------------------------------------- */


/* (int8_t)v as C converts it (truncation toward zero) for v inside int8's range, saturated
** outside it (where the conversion would be undefined). */
static inline int trunc_i8(float v) {
    if (!(v > -129.0f)) return -128;
    if (!(v < 128.0f)) return 127;
    return (int)(int8_t)v;
}
/* (uint8_t)v for v in [0, 256), saturated outside. */
static inline int trunc_u8(float v) {
    if (!(v > -1.0f)) return 0;
    if (!(v < 256.0f)) return 255;
    return (int)(uint8_t)v;
}

/* Store f as f16 at p; an overflow to +-inf is TM_E_RANGE (the reference would store inf). */
static tm_status put_f16(uint8_t *p, float f, const char *field, int64_t blk, tm_err *err) {
    uint16_t h = tm_f32_to_f16(f);
    if ((h & 0x7c00u) == 0x7c00u && isnan(f))
        return tm__err_set(err, TM_E_NONFINITE, -1,
                           "block %lld: %s is NaN, as ggml's arithmetic gives it (every weight of its codes zero, e.g. "
                           "an all-zero importance-matrix entry); llama-quantize refuses it too (\"quantized data "
                           "validation failed\")", (long long)blk, field);
    if ((h & 0x7c00u) == 0x7c00u)
        return tm__err_set(err, TM_E_RANGE, -1,
                           "block %lld: %s = %g does not fit float16 (largest 65504)",
                           (long long)blk, field, (double)f);
    tm__st16(p, h);
    return TM_OK;
}

static inline float get_f16(const uint8_t *p) { return tm_f16_to_f32(tm__ld16(p)); }

/* id = 1/d as the reference computes it, except that an overflowing 1/d (d subnormal) gives
** 0: the block is then written as all zero codes instead of converting +-inf to an integer. */
static inline float safe_inv(float d) {
    if (!d) return 0.0f;
    float id = 1.0f / d;
    return isinf(id) ? 0.0f : id;
}

/* ---------------------------------------------------------------------------------------- */
/* Legacy 32-value blocks                                                                    */
/* ---------------------------------------------------------------------------------------- */

/* max: the signed value of largest magnitude, first one on a tie. */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
    }
    return max;
}

/* Q4_0/Q5_0's block scale: d = (the value of largest magnitude) / div (div -8 or -16, ggml's
** quantize_row_q4_0_ref / q5_0_ref), stored as f16 at y; *id = 1/d (0 for d = 0). */
static tm_status absmax_scale(const float *x, float div, uint8_t *y, int64_t blk, float *id, tm_err *err) {
    const float max = signed_absmax(x, 32);
    const float d = max / div;
    *id = safe_inv(d);
    return put_f16(y, d, "d", blk, err);
}

/* Q4_1/Q5_1's block scale and min: d = (max - min) / qmax (15 or 31), d and min stored as f16 at
** y and y + 2 (ggml's quantize_row_q4_1_ref / q5_1_ref); *min and *id = 1/d (0 for d = 0). */
static tm_status minmax_scale(const float *x, float qmax, uint8_t *y, int64_t blk, float *min, float *id,
                              tm_err *err) {
    float mn = 3.402823466e+38f, mx = -3.402823466e+38f;
    for (int j = 0; j < 32; j++) {
        if (x[j] < mn) mn = x[j];
        if (x[j] > mx) mx = x[j];
    }
    const float d = (mx - mn) / qmax;
    *id = safe_inv(d);
    *min = mn;
    tm_status st = put_f16(y, d, "d", blk, err);
    if (!st) st = put_f16(y + 2, mn, "m", blk, err);
    return st;
}

static tm_status q4_0_block(const float *x, uint8_t *y, int64_t blk, tm_err *err) {
    float id;
    tm_status st = absmax_scale(x, -8, y, blk, &id, err);
    if (st) return st;
    for (int j = 0; j < 16; j++) {
        const float x0 = x[j] * id, x1 = x[16 + j] * id;
        const int q0 = imin(15, trunc_i8(x0 + 8.5f)), q1 = imin(15, trunc_i8(x1 + 8.5f));
        y[2 + j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
    }
    return TM_OK;
}

static tm_status q4_1_block(const float *x, uint8_t *y, int64_t blk, tm_err *err) {
    float min, id;
    tm_status st = minmax_scale(x, 15, y, blk, &min, &id, err);
    if (st) return st;
    for (int j = 0; j < 16; j++) {
        const float x0 = (x[j] - min) * id, x1 = (x[16 + j] - min) * id;
        const int q0 = imin(15, trunc_i8(x0 + 0.5f)), q1 = imin(15, trunc_i8(x1 + 0.5f));
        y[4 + j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
    }
    return TM_OK;
}

/* Q5_0/Q5_1's codes q[32] (0..31): the low nibbles of q[j] and q[16 + j] share byte j of qs,
** the fifth bits go to the little-endian 32-bit qh, bit j for q[j] (ggml's block_q5_0 layout). */
static void pack_5bit(uint8_t *qs, uint8_t *qh_at, const int *q) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0xF) | ((q[16 + j] & 0xF) << 4));
        qh |= (uint32_t)((q[j] & 0x10) >> 4) << j;
        qh |= (uint32_t)((q[16 + j] & 0x10) >> 4) << (j + 16);
    }
    tm__st32(qh_at, qh);
}

static tm_status q5_0_block(const float *x, uint8_t *y, int64_t blk, tm_err *err) {
    float id;
    tm_status st = absmax_scale(x, -16, y, blk, &id, err);
    if (st) return st;
    int q[32];
    for (int j = 0; j < 16; j++) {
        const float x0 = x[j] * id, x1 = x[16 + j] * id;
        q[j] = imin(31, trunc_i8(x0 + 16.5f));
        q[16 + j] = imin(31, trunc_i8(x1 + 16.5f));
    }
    pack_5bit(y + 6, y + 2, q);
    return TM_OK;
}

static tm_status q5_1_block(const float *x, uint8_t *y, int64_t blk, tm_err *err) {
    float min, id;
    tm_status st = minmax_scale(x, 31, y, blk, &min, &id, err);
    if (st) return st;
    int q[32];
    for (int j = 0; j < 16; j++) {
        const float x0 = (x[j] - min) * id, x1 = (x[16 + j] - min) * id;
        q[j] = imin(31, trunc_u8(x0 + 0.5f));
        q[16 + j] = imin(31, trunc_u8(x1 + 0.5f));
    }
    pack_5bit(y + 8, y + 4, q);
    return TM_OK;
}

static tm_status q8_0_block(const float *x, uint8_t *y, int64_t blk, tm_err *err) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float v = fabsf(x[j]);
        if (v > amax) amax = v;
    }
    const float d = amax / 127;
    const float id = safe_inv(d);
    tm_status st = put_f16(y, d, "d", blk, err);
    if (st) return st;
    for (int j = 0; j < 32; j++) {
        const float r = roundf(x[j] * id); /* half away from zero, as the reference */
        y[2 + j] = (uint8_t)(int8_t)(r > 127.0f ? 127 : r < -128.0f ? -128 : (int)r);
    }
    return TM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* K-quant scale searches                                                                    */
/* ---------------------------------------------------------------------------------------- */

/* One pass of the reference's weighted least-squares sums at iscale: l = nearest_int(iscale x)
** clamped to [-nmax, nmax - 1], w = qw[i] (the caller's weights) or x^2 when qw is NULL,
** sumlx = sum w x l, suml2 = sum w l^2 (float, element order); L[i] = l + off when L is not
** NULL. */
static void weighted_sums(int n, int nmax, const float *x, const float *qw, float iscale, int8_t *L,
                          int off, float *sumlx, float *suml2) {
    float slx = 0, sl2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = imax(-nmax, imin(nmax - 1, l));
        if (L) L[i] = (int8_t)(l + off);
        float w = qw ? qw[i] : x[i] * x[i];
        slx += w * x[i] * l;
        sl2 += w * l * l;
    }
    *sumlx = slx;
    *suml2 = sl2;
}

/* make_qx_quants (symmetric, codes L in [0, 2 nmax)): first iscale = -nmax / max (max the
** signed value of largest magnitude); with rmse_type 1 (weights x^2) the least-squares scale
** sum(w x l) / sum(w l^2) is refined over 18 trial iscales -(nmax + 0.1 is) / max, is in
** [-9, 9] \ {0}, keeping the one with the largest sumlx^2 / suml2. Used by Q6_K (nmax 32).
** qw: the weights (ggml's quant_weights argument; NULL: x^2): with an importance matrix, Q4_0
** (nmax 8), Q5_0 (16), Q3_K (4, then 32 for the sub-block scales) and Q6_K (32) use it. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L, const float *qw) {
    float max = signed_absmax(x, n);
    if (fabsf(max) < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx, suml2;
    weighted_sums(n, nmax, x, qw, iscale, L, nmax, &sumlx, &suml2);
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        weighted_sums(n, nmax, x, qw, iscale, NULL, 0, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* make_q3_quants with rmse: start from iscale = -nmax / max, then up to 5 passes of
** coordinate descent, each code moved to nearest_int(x * suml2 / sumlx) when that raises
** sumlx^2 / suml2 (weights x^2). Codes L in [0, 2 nmax). Used by Q3_K (nmax 4). */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = signed_absmax(x, n);
    if (fabsf(max) < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx, suml2;
    weighted_sums(n, nmax, x, NULL, iscale, L, 0, &sumlx, &suml2);
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = imax(-nmax, imin(nmax - 1, new_l));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return sumlx / suml2;
}

/* make_qkx2_quants: asymmetric codes L in [0, nmax] with scale and min (min <= 0, returned
** negated in *the_min). Start from the range [min(0, min x), max x]; then nstep+1 trial inverse
** scales (rmin + rdelta is + nmax) / (max - min), each followed by the weighted least-squares
** fit of scale and min to the trial codes; keep the fit with the least weighted error
** (|err| with use_mad, else err^2). Used by Q2_K (16, 3, MAD), Q4_K (32, 15), Q5_K (32, 31). */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                              int use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        float w = weights[i];
        best_error += w * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = imax(0, imin(nmax, l));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                float w = weights[i];
                cur_error += w * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* ---------------------------------------------------------------------------------------- */
/* K-quant blocks                                                                            */
/* ---------------------------------------------------------------------------------------- */

/* Q2_K's codes and Q3_K's low two bits (0..3 each): four per byte, code j + 32k of each 128 in
** bits 2k..2k+1 of byte j (ggml's block_q2_K qs / block_q3_K qs layout). */
static void pack_2bit_k(uint8_t *qs, const uint8_t *L) {
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                      (L[j + l + 96] << 6));
}

/* The table's reference and AVX2 block quantizers of a K-quant whose NAME_impl(x, y, blk, simd,
** err) does both (simd: the AVX2 scale search). */
#ifdef TM__GQ_HAVE_AVX2
#define GQ_K_BLOCKS(name)                                                                   \
    static tm_status name##_block(const float *x, uint8_t *y, int64_t blk, tm_err *err) {   \
        return name##_impl(x, y, blk, 0, err);                                              \
    }                                                                                       \
    static tm_status name##_block_avx2(const float *x, uint8_t *y, int64_t blk, tm_err *err) { \
        return name##_impl(x, y, blk, 1, err);                                              \
    }
#else
#define GQ_K_BLOCKS(name)                                                                   \
    static tm_status name##_block(const float *x, uint8_t *y, int64_t blk, tm_err *err) {   \
        return name##_impl(x, y, blk, 0, err);                                              \
    }
#endif

static tm_status q2_k_impl(const float *x, uint8_t *y, int64_t blk, int simd, tm_err *err) {
    uint8_t *scales = y, *qs = y + 16;
    uint8_t L[QK_K], Laux[16];
    float weights[16], mins[QK_K / 16], sc[QK_K / 16];
    const float q4scale = 15.f;
    float max_scale = 0, max_min = 0;
#ifdef TM__GQ_HAVE_AVX2
    if (simd) {
        float w[QK_K];
        for (int l = 0; l < QK_K; ++l) w[l] = fabsf(x[l]);
        tm__gq_qkx2_x8_avx2(x, w, 16, 3, -0.5f, 0.1f, 15, 1, L, sc, mins);
        tm__gq_qkx2_x8_avx2(x + 128, w + 128, 16, 3, -0.5f, 0.1f, 15, 1, L + 128, sc + 8, mins + 8);
    }
#else
    (void)simd;
#endif
    for (int j = 0; j < QK_K / 16; ++j) {
        if (!simd) {
            for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16 * j + l]);
            sc[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f,
                                     0.1f, 15, 1);
        }
        if (sc[j] > max_scale) max_scale = sc[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    tm_status st;
    if (max_scale > 0) {
        float iscale = q4scale / max_scale;
        for (int j = 0; j < QK_K / 16; ++j) scales[j] = (uint8_t)nearest_int(iscale * sc[j]);
        st = put_f16(y + 80, max_scale / q4scale, "d", blk, err);
    } else {
        for (int j = 0; j < QK_K / 16; ++j) scales[j] = 0;
        st = put_f16(y + 80, 0.f, "d", blk, err);
    }
    if (st) return st;
    if (max_min > 0) {
        float iscale = q4scale / max_min;
        for (int j = 0; j < QK_K / 16; ++j)
            scales[j] = (uint8_t)(scales[j] | ((unsigned)nearest_int(iscale * mins[j]) << 4));
        st = put_f16(y + 82, max_min / q4scale, "dmin", blk, err);
    } else {
        st = put_f16(y + 82, 0.f, "dmin", blk, err);
    }
    if (st) return st;
    for (int j = 0; j < QK_K / 16; ++j) {
        const float d = get_f16(y + 80) * (scales[j] & 0xF);
        if (!d) continue;
        const float dm = get_f16(y + 82) * (scales[j] >> 4);
        for (int ii = 0; ii < 16; ++ii) {
            int l = nearest_int((x[16 * j + ii] + dm) / d);
            L[16 * j + ii] = (uint8_t)imax(0, imin(3, l));
        }
    }
    pack_2bit_k(qs, (const uint8_t *)L);
    return TM_OK;
}

GQ_K_BLOCKS(q2_k)

/* Q3_K's codes L (0..7) into hmask (bit k of byte m: code 32k + m > 3) and the low two bits
** into qs (pack_2bit_k); branch-free, L is reduced to its low bits (simd: AVX2, L unchanged). */
static void q3_k_pack(int8_t *L, uint8_t *hmask, uint8_t *qs, int simd) {
#ifdef TM__GQ_HAVE_AVX2
    if (simd) {
        tm__gq_q3_k_pack_avx2(L, hmask, qs);
        return;
    }
#else
    (void)simd;
#endif
    memset(hmask, 0, QK_K / 8);
    for (int k = 0; k < 8; ++k)
        for (int m = 0; m < QK_K / 8; ++m) {
            const int l = L[32 * k + m];
            hmask[m] = (uint8_t)(hmask[m] | ((l >> 2) << k));
            L[32 * k + m] = (int8_t)(l & 3);
        }
    pack_2bit_k(qs, (const uint8_t *)L);
}

/* Q3_K's final codes from the stored 6-bit scales and f16 d (dh): for each sub-block j whose
** d = dh * scale_j is not 0, L = clamp(nearest_int(x / d), -4, 3) + 4 (others keep the search's
** codes); simd: the AVX2 lanes, same bytes. */
static void q3_k_codes(const float *x, const uint8_t *scales, float dh, int8_t *L, int simd) {
    float dv[QK_K / 16];
    for (int j = 0; j < QK_K / 16; ++j) {
        int s = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
        s = (s | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
        dv[j] = dh * s;
    }
#ifdef TM__GQ_HAVE_AVX2
    if (simd) {
        tm__gq_q3_k_codes_avx2(x, dv, L);
        return;
    }
#else
    (void)simd;
#endif
    for (int j = 0; j < QK_K / 16; ++j) {
        const float d = dv[j];
        if (!d) continue;
        for (int ii = 0; ii < 16; ++ii) {
            int l = nearest_int(x[16 * j + ii] / d);
            L[16 * j + ii] = (int8_t)(imax(-4, imin(3, l)) + 4);
        }
    }
}

/* quantize_row_q3_K_ref after the sub-block searches (codes L offset by 4, scales sc): the 16
** scales into 6-bit codes and d, the codes again from the stored scales, packed into y. */
static tm_status q3_k_finish(const float *x, uint8_t *y, int8_t *L, const float *sc, int64_t blk, int simd,
                             tm_err *err) {
    uint8_t *hmask = y, *qs = y + 32, *scales = y + 96;
    float max_scale = 0, amax = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
        float scale = fabsf(sc[j]);
        if (scale > amax) { amax = scale; max_scale = sc[j]; }
    }
    memset(scales, 0, 12);
    tm_status st;
    if (max_scale) {
        float iscale = -32.f / max_scale;
        for (int j = 0; j < QK_K / 16; ++j) {
            int l = (int8_t)nearest_int(iscale * sc[j]);
            l = imax(-32, imin(31, l)) + 32;
            if (j < 8) scales[j] = (uint8_t)(l & 0xF);
            else scales[j - 8] = (uint8_t)(scales[j - 8] | ((l & 0xF) << 4));
            l >>= 4;
            scales[j % 4 + 8] = (uint8_t)(scales[j % 4 + 8] | (l << (2 * (j / 4))));
        }
        st = put_f16(y + 108, 1 / iscale, "d", blk, err);
    } else {
        st = put_f16(y + 108, 0.f, "d", blk, err);
    }
    if (st) return st;
    q3_k_codes(x, scales, get_f16(y + 108), L, simd);
    q3_k_pack(L, hmask, qs, simd);
    return TM_OK;
}

static tm_status q3_k_impl(const float *x, uint8_t *y, int64_t blk, int simd, tm_err *err) {
    int8_t L[QK_K];
    float sc[QK_K / 16];
#ifdef TM__GQ_HAVE_AVX2
    if (simd) tm__gq_q3_x16_avx2(x, L, sc);
#endif
    if (!simd)
        for (int j = 0; j < QK_K / 16; ++j) sc[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
    return q3_k_finish(x, y, L, sc, blk, simd, err);
}

GQ_K_BLOCKS(q3_k)

/* The 6-bit scale/min of sub-block j of a Q4_K/Q5_K scales[12] field. */
static void get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/* Q4_K and Q5_K share the scale search and scale packing; nmax 15 or 31. y points at the
** block (d at 0, dmin at 2, scales at 4); L gets the final codes.
** qw NULL: quantize_row_q4_K_ref / q5_K_ref: weights av_x + |x| per sub-block, make_qkx2_quants,
** the 6-bit scales and mins by rounding against the largest. qw (the block's 256 importances):
** quantize_row_q4_K_impl / q5_K_impl with quant_weights: sigma2 = 2 sum x^2 / 256 over the
** block, weights qw sqrt(sigma2 + x^2), make_qkx3_quants (-0.9, 0.05, 36 steps), then the 8
** scales and 8 mins each quantized by make_qp_quants (nmax 63) weighted by the sub-block's
** weight sums. */

static tm_status qk_scales_mins(const float *x, const float *qw, uint8_t *y, uint8_t *L, int nmax,
                                float rmin, int nstep, int64_t blk, int simd, tm_err *err) {
    uint8_t *scales = y + 4;
    uint8_t Laux[32], Ls[QK_K / 32], Lm[QK_K / 32];
    float weights[QK_K], mins[QK_K / 32], sc[QK_K / 32];
    float dstore, mstore;
    if (qw) {
        float sw[QK_K / 32];
        float sum_x2 = 0;
        for (int l = 0; l < QK_K; ++l) sum_x2 += x[l] * x[l];
        const float sigma2 = 2 * sum_x2 / QK_K;
        for (int j = 0; j < QK_K / 32; ++j) {
            for (int l = 0; l < 32; ++l)
                weights[32 * j + l] = qw[32 * j + l] * sqrtf(sigma2 + x[32 * j + l] * x[32 * j + l]);
            float sumw = 0;
            for (int l = 0; l < 32; ++l) sumw += weights[32 * j + l];
            sw[j] = sumw;
            if (!simd)
                sc[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights + 32 * j, L + 32 * j, &mins[j], Laux,
                                         -0.9f, 0.05f, 36, 0);
        }
#ifdef TM__GQ_HAVE_AVX2
        if (simd) tm__gq_qkx2_x8_avx2(x, weights, 32, nmax, -0.9f, 0.05f, 36, 0, L, sc, mins);
#endif
        dstore = tm__gq_make_qp_quants(QK_K / 32, 63, sc, Ls, sw);
        mstore = tm__gq_make_qp_quants(QK_K / 32, 63, mins, Lm, sw);
        for (int j = 0; j < QK_K / 32; ++j) { /* Q5_K's MIN(63, .), a no-op for both */
            Ls[j] = Ls[j] < 63 ? Ls[j] : 63;
            Lm[j] = Lm[j] < 63 ? Lm[j] : 63;
        }
    } else {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 32; ++j) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
            float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; ++l) weights[32 * j + l] = av_x + fabsf(x[32 * j + l]);
        }
#ifdef TM__GQ_HAVE_AVX2
        if (simd) tm__gq_qkx2_x8_avx2(x, weights, 32, nmax, rmin, 0.1f, nstep, 0, L, sc, mins);
#else
        (void)simd;
#endif
        for (int j = 0; j < QK_K / 32; ++j) {
            if (!simd)
                sc[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights + 32 * j, L + 32 * j, &mins[j],
                                         Laux, rmin, 0.1f, nstep, 0);
            if (sc[j] > max_scale) max_scale = sc[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        for (int j = 0; j < QK_K / 32; ++j) {
            uint8_t ls = (uint8_t)nearest_int(inv_scale * sc[j]);
            uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
            Ls[j] = ls < 63 ? ls : 63;
            Lm[j] = lm < 63 ? lm : 63;
        }
        dstore = max_scale / 63.f;
        mstore = max_min / 63.f;
    }
    for (int j = 0; j < QK_K / 32; ++j) {
        const uint8_t ls = Ls[j], lm = Lm[j];
        if (j < 4) {
            scales[j] = ls;
            scales[j + 4] = lm;
        } else {
            scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            scales[j - 4] = (uint8_t)(scales[j - 4] | ((ls >> 4) << 6));
            scales[j - 0] = (uint8_t)(scales[j - 0] | ((lm >> 4) << 6));
        }
    }
    tm_status st = put_f16(y, dstore, "d", blk, err);
    if (!st) st = put_f16(y + 2, mstore, "dmin", blk, err);
    if (st) return st;
    const float dh = get_f16(y), dmh = get_f16(y + 2);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t s, m;
        get_scale_min_k4(j, scales, &s, &m);
        const float d = dh * s;
        if (!d) continue;
        const float dm = dmh * m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, l));
        }
    }
    return TM_OK;
}

static tm_status q4_k_impl(const float *x, const float *qw, uint8_t *y, int64_t blk, int simd, tm_err *err) {
    uint8_t L[QK_K];
    tm_status st = qk_scales_mins(x, qw, y, L, 15, -1.f, 20, blk, simd, err);
    if (st) return st;
    uint8_t *q = y + 16;
    for (int j = 0; j < QK_K; j += 64) {
        for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
        q += 32;
    }
    return TM_OK;
}

static tm_status q5_k_impl(const float *x, const float *qw, uint8_t *y, int64_t blk, int simd, tm_err *err) {
    uint8_t L[QK_K];
    tm_status st = qk_scales_mins(x, qw, y, L, 31, -0.5f, 15, blk, simd, err);
    if (st) return st;
    uint8_t *qh = y + 16, *ql = y + 48;
    memset(qh, 0, QK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < QK_K; n += 64) {
        for (int j = 0; j < 32; ++j) {
            int l1 = L[n + j];
            if (l1 > 15) { l1 -= 16; qh[j] = (uint8_t)(qh[j] | m1); }
            int l2 = L[n + j + 32];
            if (l2 > 15) { l2 -= 16; qh[j] = (uint8_t)(qh[j] | m2); }
            ql[j] = (uint8_t)(l1 | (l2 << 4));
        }
        m1 = (uint8_t)(m1 << 2);
        m2 = (uint8_t)(m2 << 2);
        ql += 32;
    }
    return TM_OK;
}

/* the K blocks without importance matrix: qw NULL */
static tm_status q4_k_impl0(const float *x, uint8_t *y, int64_t blk, int simd, tm_err *err) {
    return q4_k_impl(x, NULL, y, blk, simd, err);
}
static tm_status q5_k_impl0(const float *x, uint8_t *y, int64_t blk, int simd, tm_err *err) {
    return q5_k_impl(x, NULL, y, blk, simd, err);
}
#define q4_k0_impl q4_k_impl0
#define q5_k0_impl q5_k_impl0
GQ_K_BLOCKS(q4_k0)
GQ_K_BLOCKS(q5_k0)

/* simd: the AVX2 scale search and final codes; acc (only with simd): the block's error added
** as the final codes are made. */
/* qw (scalar path only): the block's 256 importances (ggml's quantize_row_q6_K_impl passes them
** unchanged to make_qx_quants), NULL without an importance matrix. */
static tm_status q6_k_impl(const float *x, const float *qw, uint8_t *y, int64_t blk, int simd, tm__gq_err *acc,
                           tm_err *err) {
    uint8_t *ql = y, *qh = y + 128;
    int8_t *scales = (int8_t *)(y + 192);
    int8_t L[QK_K];
    float sc[QK_K / 16];
    float max_scale = 0, max_abs_scale = 0;
#ifdef TM__GQ_HAVE_AVX2
    if (simd) {
        tm__gq_qx_x8_avx2(x, qw, 16, 32, L, sc);
        tm__gq_qx_x8_avx2(x + 128, qw ? qw + 128 : NULL, 16, 32, L + 128, sc + 8);
    }
#else
    (void)simd;
    (void)acc;
#endif
    for (int ib = 0; ib < QK_K / 16; ++ib) {
        const float scale = simd ? sc[ib] : make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, qw ? qw + 16 * ib : NULL);
        sc[ib] = scale;
        const float abs_scale = fabsf(scale);
        if (abs_scale > max_abs_scale) { max_abs_scale = abs_scale; max_scale = scale; }
    }
    if (max_abs_scale < GROUP_MAX_EPS) {
        memset(y, 0, 210);
#ifdef TM__GQ_HAVE_AVX2
        if (acc) { /* every code 0 with d 0: dq = 0 * (0 - 32) */
            float dz[QK_K / 16] = {0};
            memset(L, 0, sizeof L);
            tm__gq_q6_k_codes_avx2(x, dz, L, acc);
        }
#endif
        return TM_OK;
    }
    float iscale = -128.f / max_scale;
    tm_status st = put_f16(y + 208, 1 / iscale, "d", blk, err);
    if (st) return st;
    for (int ib = 0; ib < QK_K / 16; ++ib) scales[ib] = (int8_t)imin(127, nearest_int(iscale * sc[ib]));
    const float dh = get_f16(y + 208);
#ifdef TM__GQ_HAVE_AVX2
    if (simd) {
        float dv[QK_K / 16];
        for (int j = 0; j < QK_K / 16; ++j) dv[j] = dh * scales[j];
        tm__gq_q6_k_codes_avx2(x, dv, L, acc);
    }
#endif
    for (int j = 0; !simd && j < QK_K / 16; ++j) {
        float d = dh * scales[j];
        if (!d) continue;
        for (int ii = 0; ii < 16; ++ii) {
            int l = nearest_int(x[16 * j + ii] / d);
            L[16 * j + ii] = (int8_t)(imax(-32, imin(31, l)) + 32);
        }
    }
    for (int j = 0; j < QK_K; j += 128) {
        for (int l = 0; l < 32; ++l) {
            const int q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
            const int q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
            ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
            ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
            qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                              ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
        }
        ql += 64;
        qh += 32;
    }
    return TM_OK;
}

static tm_status q6_k_block(const float *x, uint8_t *y, int64_t blk, tm_err *err) {
    return q6_k_impl(x, NULL, y, blk, 0, NULL, err);
}

#ifdef TM__GQ_HAVE_AVX2
int64_t tm__gq_q6_k_avx2(const float *x, int64_t nb, uint8_t *y, tm__gq_err *acc) {
    for (int64_t b = 0; b < nb; b++) {
        tm_err e;
        if (tm__any_nonfinite(x + b * QK_K, QK_K) || q6_k_impl(x + b * QK_K, NULL, y + (size_t)b * 210, b, 1, acc, &e))
            return b;
    }
    return -1;
}
#endif

/* ---------------------------------------------------------------------------------------- */
/* Importance-matrix paths (ggml's quantize_<type> with quant_weights != NULL)               */
/* ---------------------------------------------------------------------------------------- */
/* llama.cpp@c392e509 ggml/src/ggml-quants.c: quantize_row_q4_0_impl .. q5_1_impl,
** quantize_row_q2_K_impl .. q6_K_impl, make_qkx3_quants, make_qp_quants; written from those
** algorithms with every float32 expression in the reference's order. qw is the importance of
** each value's input column (imatrix sums / ncall), aligned with x. */

/* make_qkx3_quants (ggml), as the importance-matrix paths call it (weights always given,
** use_mad false): its sums, start codes, trial codes (nearest_int, clamped to [0, nmax]),
** least-squares fit and error are make_qkx2_quants's expression for expression, so
** make_qkx2_quants (and its AVX2 lanes, tm__gq_qkx2_x8_avx2) serve for both; the arguments
** differ: rmin -0.9, rdelta 0.05, 36 steps. */
#define make_qkx3_quants make_qkx2_quants

/* make_qp_quants: non-negative values x (sub-block scales or mins) as codes L in [0, nmax]
** times one scale: iscale = nmax / max, then 8 trial iscales (nmax + 0.1 is) / max, is in
** [-4, 4] \ {0}, keeping the least qw-weighted squared error, then up to 5 passes of coordinate
** descent raising sumlx^2 / suml2; returns sumlx / suml2 (0 for all-zero input). L is uint8_t
** as in the reference (a negative code would wrap, as there). */
float tm__gq_make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *qw) {
    float max = 0;
    for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
    if (max < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; ++i) L[i] = (uint8_t)nearest_int(iscale * x[i]);
    float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        float diff = x[i] - scale * L[i];
        float w = qw[i];
        best_mse += w * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        float iscale_is = (0.1f * is + nmax) / max;
        float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale_is * x[i]);
            l = imin(nmax, l);
            float diff = x[i] - scale_is * l;
            float w = qw[i];
            mse += w * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = imin(nmax, l);
        L[i] = (uint8_t)l;
        float w = qw[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = qw[i];
            float slx = sumlx - w * x[i] * L[i];
            float sl2 = suml2 - w * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = imin(nmax, new_l);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return sumlx / suml2; /* as ggml: NaN where every weight is 0 (llama-quantize then refuses the row) */
}

/* quantize_row_q2_K_impl: sigma2 = sum x^2 / 256 over the block, weights qw sqrt(sigma2 + x^2),
** make_qkx3_quants per sub-block of 16 (nmax 3), the 16 scales and 16 mins by make_qp_quants
** (nmax 15, weighted by the sub-block weight sums), then the codes again from the stored
** scales. */
static tm_status q2_k_block_imx(const float *x, const float *qw, uint8_t *y, int64_t blk, int simd, tm_err *err) {
    uint8_t *scales = y, *qs = y + 16;
    uint8_t L[QK_K], Laux[16], Ls[QK_K / 16], Lm[QK_K / 16];
    float mins[QK_K / 16], sc[QK_K / 16], sw[QK_K / 16], weight[QK_K];
    memset(sw, 0, sizeof sw);
    float sumx2 = 0;
    for (int j = 0; j < QK_K; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = sumx2 / QK_K;
    for (int j = 0; j < QK_K / 16; ++j) {
        float *wj = weight + 16 * j;
        for (int l = 0; l < 16; ++l) wj[l] = qw[16 * j + l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
        for (int l = 0; l < 16; ++l) sw[j] += wj[l];
        if (!simd) sc[j] = make_qkx3_quants(16, 3, x + 16 * j, wj, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36, 0);
    }
#ifdef TM__GQ_HAVE_AVX2
    if (simd) {
        tm__gq_qkx2_x8_avx2(x, weight, 16, 3, -0.9f, 0.05f, 36, 0, L, sc, mins);
        tm__gq_qkx2_x8_avx2(x + 128, weight + 128, 16, 3, -0.9f, 0.05f, 36, 0, L + 128, sc + 8, mins + 8);
    }
#else
    (void)simd;
#endif
    const float dm0 = tm__gq_make_qp_quants(QK_K / 16, 15, sc, Ls, sw);
    const float mm0 = tm__gq_make_qp_quants(QK_K / 16, 15, mins, Lm, sw);
    tm_status st = put_f16(y + 80, dm0, "d", blk, err);
    if (!st) st = put_f16(y + 82, mm0, "dmin", blk, err);
    if (st) return st;
    const float dm = get_f16(y + 80), mm = get_f16(y + 82);
    for (int j = 0; j < QK_K / 16; ++j) scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
    for (int j = 0; j < QK_K / 16; ++j) {
        const float d = dm * (scales[j] & 0xF);
        if (!d) continue;
        const float m = mm * (scales[j] >> 4);
        for (int ii = 0; ii < 16; ++ii) {
            int l = nearest_int((x[16 * j + ii] + m) / d);
            L[16 * j + ii] = (uint8_t)imax(0, imin(3, l));
        }
    }
    pack_2bit_k(qs, L);
    return TM_OK;
}

/* quantize_row_q3_K_impl: sigma2 = 2 sum x^2 / 256, weights qw sqrt(sigma2 + x^2),
** make_qx_quants per sub-block of 16 (nmax 4), the 16 signed scales by make_qx_quants (nmax
** 32, weighted by the sub-block weight sums) into 6-bit codes, then the codes again from the
** stored scales. */
static tm_status q3_k_block_imx(const float *x, const float *qw, uint8_t *y, int64_t blk, int simd, tm_err *err) {
    uint8_t *hmask = y, *qs = y + 32, *scales = y + 96;
    int8_t L[QK_K], Ls[QK_K / 16];
    float sc[QK_K / 16], sw[QK_K / 16], weight[QK_K];
    float sumx2 = 0;
    for (int j = 0; j < QK_K; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = 2 * sumx2 / QK_K;
    for (int j = 0; j < QK_K / 16; ++j) {
        float *wj = weight + 16 * j;
        for (int l = 0; l < 16; ++l) wj[l] = qw[16 * j + l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
        float sumw = 0;
        for (int l = 0; l < 16; ++l) sumw += wj[l];
        sw[j] = sumw;
        if (!simd) sc[j] = make_qx_quants(16, 4, x + 16 * j, L + 16 * j, wj);
    }
#ifdef TM__GQ_HAVE_AVX2
    if (simd) {
        tm__gq_qx_x8_avx2(x, weight, 16, 4, L, sc);
        tm__gq_qx_x8_avx2(x + 128, weight + 128, 16, 4, L + 128, sc + 8);
    }
#else
    (void)simd;
#endif
    memset(scales, 0, 12);
    const float d_block = make_qx_quants(QK_K / 16, 32, sc, Ls, sw);
    for (int j = 0; j < QK_K / 16; ++j) {
        int l = Ls[j];
        if (j < 8) scales[j] = (uint8_t)(l & 0xF);
        else scales[j - 8] = (uint8_t)(scales[j - 8] | ((l & 0xF) << 4));
        l >>= 4;
        scales[j % 4 + 8] = (uint8_t)(scales[j % 4 + 8] | (l << (2 * (j / 4))));
    }
    tm_status st = put_f16(y + 108, d_block, "d", blk, err);
    if (st) return st;
    q3_k_codes(x, scales, get_f16(y + 108), L, simd);
    q3_k_pack(L, hmask, qs, simd);
    return TM_OK;
}

/* The legacy 32-value types with an importance matrix (quantize_row_q4_0_impl .. q5_1_impl):
** sigma2 = sum x^2 / n over the WHOLE row, weights qw sqrt(sigma2 + x^2) per block; Q4_0 / Q5_0
** symmetric by make_qx_quants (nmax 8 / 16), Q4_1 / Q5_1 with a min by make_qkx3_quants
** (nmax 15 / 31, rmin -0.9, rdelta 0.05, 36 steps), m = -min. */
static float row_sigma2(const float *x, int64_t n) {
    float sum_x2 = 0;
    for (int64_t j = 0; j < n; ++j) sum_x2 += x[j] * x[j];
    return sum_x2 / n;
}

static tm_status legacy_row_imx(int type, const tm_ggml_type_info *t, const float *x, const float *qw,
                                int64_t nb, uint8_t *y, int64_t *bad_block, int simd, tm_err *err) {
    const float sigma2 = row_sigma2(x, nb * 32);
    const int has_min = type == TM_GGML_Q4_1 || type == TM_GGML_Q5_1, nmax1 = type == TM_GGML_Q4_1 ? 15 : 31;
    uint8_t L8[256];
    float w8[256], d8[8], m8[8];
    (void)simd;
    for (int64_t ib = 0; ib < nb; ++ib) {
        const float *xb = x + 32 * ib, *w = qw + 32 * ib;
        uint8_t *yb = y + (size_t)ib * t->type_size;
        float weight[32];
#ifdef TM__GQ_HAVE_AVX2
        /* eight blocks' weights and searches at once, one block per lane (same results) */
        if (simd && ib % 8 == 0 && nb - ib >= 8) {
            tm__gq_legacy_weights_avx2(xb, w, sigma2, 256, w8);
            if (has_min) tm__gq_qkx2_x8_avx2(xb, w8, 32, nmax1, -0.9f, 0.05f, 36, 0, L8, d8, m8);
            else tm__gq_qx_x8_avx2(xb, w8, 32, type == TM_GGML_Q4_0 ? 8 : 16, (int8_t *)L8, d8);
        }
        const int lane = simd && nb - ib / 8 * 8 >= 8 ? (int)(ib % 8) : -1;
#else
        const int lane = -1;
        (void)L8; (void)w8; (void)d8; (void)m8; (void)has_min; (void)nmax1;
#endif
        if (lane < 0)
            for (int j = 0; j < 32; ++j) weight[j] = w[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        tm_status st;
        int q[32];
        if (type == TM_GGML_Q4_0 || type == TM_GGML_Q5_0) {
            int8_t L[32];
            float d;
            if (lane >= 0) {
                memcpy(L, L8 + 32 * lane, 32);
                d = d8[lane];
            } else {
                d = make_qx_quants(32, type == TM_GGML_Q4_0 ? 8 : 16, xb, L, weight);
            }
            st = put_f16(yb, d, "d", ib, err);
            for (int j = 0; j < 32; ++j) q[j] = (uint8_t)L[j];
            if (!st && type == TM_GGML_Q4_0)
                for (int j = 0; j < 16; ++j) yb[2 + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
            else if (!st) pack_5bit(yb + 6, yb + 2, q);
        } else {
            uint8_t L[32], Laux[32];
            float min, d;
            if (lane >= 0) {
                memcpy(L, L8 + 32 * lane, 32);
                d = d8[lane];
                min = m8[lane];
            } else {
                d = make_qkx3_quants(32, nmax1, xb, weight, L, &min, Laux, -0.9f, 0.05f, 36, 0);
            }
            st = put_f16(yb, d, "d", ib, err);
            if (!st) st = put_f16(yb + 2, -min, "m", ib, err);
            for (int j = 0; j < 32; ++j) q[j] = L[j];
            if (!st && type == TM_GGML_Q4_1)
                for (int j = 0; j < 16; ++j) yb[4 + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
            else if (!st) pack_5bit(yb + 8, yb + 4, q);
        }
        if (st) {
            if (bad_block) *bad_block = ib;
            return st;
        }
    }
    return TM_OK;
}

/* The K types with an importance matrix, block by block (their sums are per block). */
static tm_status k_row_imx(int type, const tm_ggml_type_info *t, const float *x, const float *qw,
                           int64_t nb, uint8_t *y, int64_t *bad_block, int simd, tm_err *err) {
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * QK_K, *wb = qw + b * QK_K;
        uint8_t *yb = y + (size_t)b * t->type_size;
        tm_status st;
        switch (type) {
        case TM_GGML_Q2_K: st = q2_k_block_imx(xb, wb, yb, b, simd, err); break;
        case TM_GGML_Q3_K: st = q3_k_block_imx(xb, wb, yb, b, simd, err); break;
        case TM_GGML_Q4_K: st = q4_k_impl(xb, wb, yb, b, simd, err); break;
        case TM_GGML_Q5_K: st = q5_k_impl(xb, wb, yb, b, simd, err); break;
        default: st = q6_k_impl(xb, wb, yb, b, simd, NULL, err); break;
        }
        if (st) {
            if (bad_block) *bad_block = b;
            return st;
        }
    }
    return TM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Rows: the quantizers of the type table (ggml_traits.h)                                    */
/* ---------------------------------------------------------------------------------------- */

/* Blocks b0..nb-1 of type t through one block function (inlined into each row function). */
static inline tm_status run_blocks(tm_status (*fn)(const float *, uint8_t *, int64_t, tm_err *),
                                   const tm_ggml_type_info *t, const float *x, int64_t b0, int64_t nb,
                                   uint8_t *y, int64_t *bad_block, tm_err *err) {
    for (int64_t b = b0; b < nb; b++) {
        tm_status st = fn(x + b * t->block_size, y + (size_t)b * t->type_size, b, err);
        if (st) {
            if (bad_block) *bad_block = b;
            return st;
        }
    }
    return TM_OK;
}

#define GQ_ROWS(name, block)                                                                     \
    tm_status name(const tm_ggml_type_info *t, const float *x, const float *imatrix, int64_t b0,  \
                   int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {                    \
        (void)imatrix;                                                                           \
        return run_blocks(block, t, x, b0, nb, y, bad_block, err);                               \
    }
/* a type with an importance-matrix path: with imatrix (one whole row, b0 = 0), that path */
#define GQ_ROWS_IMX_S(name, block, type, imx_fn, simd)                                           \
    tm_status name(const tm_ggml_type_info *t, const float *x, const float *imatrix, int64_t b0,  \
                   int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {                    \
        if (imatrix) return imx_fn(type, t, x, imatrix, nb, y, bad_block, simd, err);            \
        return run_blocks(block, t, x, b0, nb, y, bad_block, err);                               \
    }
#define GQ_ROWS_IMX(name, block, type, imx_fn) GQ_ROWS_IMX_S(name, block, type, imx_fn, 0)
GQ_ROWS_IMX(tm__gq_rows_q4_0, q4_0_block, TM_GGML_Q4_0, legacy_row_imx)
GQ_ROWS_IMX(tm__gq_rows_q4_1, q4_1_block, TM_GGML_Q4_1, legacy_row_imx)
GQ_ROWS_IMX(tm__gq_rows_q5_0, q5_0_block, TM_GGML_Q5_0, legacy_row_imx)
GQ_ROWS_IMX(tm__gq_rows_q5_1, q5_1_block, TM_GGML_Q5_1, legacy_row_imx)
GQ_ROWS(tm__gq_rows_q8_0, q8_0_block)
GQ_ROWS_IMX(tm__gq_rows_q2_k, q2_k_block, TM_GGML_Q2_K, k_row_imx)
GQ_ROWS_IMX(tm__gq_rows_q3_k, q3_k_block, TM_GGML_Q3_K, k_row_imx)
GQ_ROWS_IMX(tm__gq_rows_q4_k, q4_k0_block, TM_GGML_Q4_K, k_row_imx)
GQ_ROWS_IMX(tm__gq_rows_q5_k, q5_k0_block, TM_GGML_Q5_K, k_row_imx)
GQ_ROWS_IMX(tm__gq_rows_q6_k, q6_k_block, TM_GGML_Q6_K, k_row_imx)
#ifdef TM__GQ_HAVE_AVX2
/* the AVX2 variants also take the importance-matrix paths with the eight-lane searches */
GQ_ROWS_IMX_S(tm__gq_rows_q2_k_avx2, q2_k_block_avx2, TM_GGML_Q2_K, k_row_imx, 1)
/* Q3_K without an importance matrix: the searches of two super-blocks at once (four groups of
** lanes interleaved), then each block finished in order (the first failing one stops the row) */
tm_status tm__gq_rows_q3_k_avx2(const tm_ggml_type_info *t, const float *x, const float *imatrix, int64_t b0,
                                int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    if (imatrix) return k_row_imx(TM_GGML_Q3_K, t, x, imatrix, nb, y, bad_block, 1, err);
    int64_t b = b0;
    for (; b + 1 < nb; b += 2) {
        int8_t L[2 * QK_K];
        float sc[2 * QK_K / 16];
        tm__gq_q3_x32_avx2(x + b * QK_K, L, sc);
        for (int h = 0; h < 2; h++) {
            tm_status st = q3_k_finish(x + (b + h) * QK_K, y + (size_t)(b + h) * t->type_size, L + h * QK_K,
                                       sc + h * (QK_K / 16), b + h, 1, err);
            if (st) {
                if (bad_block) *bad_block = b + h;
                return st;
            }
        }
    }
    return run_blocks(q3_k_block_avx2, t, x, b, nb, y, bad_block, err);
}
GQ_ROWS_IMX_S(tm__gq_rows_q4_k_avx2, q4_k0_block_avx2, TM_GGML_Q4_K, k_row_imx, 1)
GQ_ROWS_IMX_S(tm__gq_rows_q5_k_avx2, q5_k0_block_avx2, TM_GGML_Q5_K, k_row_imx, 1)
GQ_ROWS_IMX_S(tm__gq_rows_q4_0_avx2, q4_0_block, TM_GGML_Q4_0, legacy_row_imx, 1)
GQ_ROWS_IMX_S(tm__gq_rows_q6_k_avx2, q6_k_block, TM_GGML_Q6_K, k_row_imx, 1)
/* Q4_1 / Q5_0 / Q5_1: the reference without importance matrix (their eight-block kernels take
** that path, quantize_err); with one, the eight-lane searches */
GQ_ROWS_IMX_S(tm__gq_rows_q4_1_avx2, q4_1_block, TM_GGML_Q4_1, legacy_row_imx, 1)
GQ_ROWS_IMX_S(tm__gq_rows_q5_0_avx2, q5_0_block, TM_GGML_Q5_0, legacy_row_imx, 1)
GQ_ROWS_IMX_S(tm__gq_rows_q5_1_avx2, q5_1_block, TM_GGML_Q5_1, legacy_row_imx, 1)
#endif

/* The plain types: one value a block. */
tm_status tm__gq_rows_f32(const tm_ggml_type_info *t, const float *x, const float *imatrix, int64_t b0, int64_t nb, uint8_t *y, int64_t *bad_block,
                          tm_err *err) {
    (void)t;
    (void)imatrix;
    (void)bad_block;
    (void)err;
    memcpy(y + 4 * b0, x + b0, (size_t)(nb - b0) * 4);
    return TM_OK;
}

tm_status tm__gq_rows_f16(const tm_ggml_type_info *t, const float *x, const float *imatrix, int64_t b0, int64_t nb, uint8_t *y, int64_t *bad_block,
                          tm_err *err) {
    (void)t;
    (void)imatrix;
    for (int64_t i = b0; i < nb; i++) {
        uint16_t h = tm_f32_to_f16(x[i]);
        if ((h & 0x7c00u) == 0x7c00u) {
            if (bad_block) *bad_block = i;
            return tm__err_set(err, TM_E_RANGE, -1, "element %lld = %g does not fit float16 (largest 65504)",
                               (long long)i, (double)x[i]);
        }
        tm__st16(y + 2 * i, h);
    }
    return TM_OK;
}

tm_status tm__gq_rows_bf16(const tm_ggml_type_info *t, const float *x, const float *imatrix, int64_t b0, int64_t nb, uint8_t *y, int64_t *bad_block,
                           tm_err *err) {
    (void)t;
    (void)imatrix;
    (void)bad_block;
    (void)err;
    for (int64_t i = b0; i < nb; i++) tm__st16(y + 2 * i, tm_f32_to_bf16(x[i]));
    return TM_OK;
}
