/* ggml_quant_iq2.c: the IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M block quantizers with
** importance weights, byte-identical to llama.cpp's quantize_iq2_xxs, quantize_iq2_xs,
** quantize_iq2_s, quantize_iq1_s and quantize_iq1_m (ggml/src/ggml-quants.c at
** ggml-org/llama.cpp@c392e5094deaf2d1a7c18683214f007fad3fe42b: quantize_row_iq2_xxs_impl,
** quantize_row_iq2_xs_impl, quantize_row_iq2_s_impl, quantize_row_iq1_s_impl,
** quantize_row_iq1_m_impl (with make_qp_quants of ggml_quant.c), iq2_find_best_neighbour, iq1_find_best_neighbour2),
** default x86-64 build (ggml-base: no FMA contraction, as this library's -ffp-contract=off).
** Our code; the float32 expressions keep the reference's order of operations.
**
** Block layouts (little-endian; ggml-common.h):
**   IQ2_XXS 66 B: f16 d, 8 x (u32 4 grid indices, u32 4 x 7 sign bits | 4-bit scale << 28)
**   IQ2_XS  74 B: f16 d, 32 x u16 (9-bit grid index | 7 sign bits << 9), scales[8] (2 x 4 bit)
**   IQ2_S   82 B: f16 d, qs[32] grid index low bytes, signs[32], qh[8] (4 x 2 high bits),
**                 scales[8]
**   IQ1_S   50 B: f16 d, qs[32] grid index low bytes, 8 x u16 qh (4 x 3 high bits, 3-bit scale
**                 << 12, delta sign << 15)
**   IQ1_M   56 B: qs[32], qh[16] (2 x (3 high bits, delta sign)), 4 x u16 scales (4 x 3-bit
**                 sub-scales; the f16 super-scale in the top nibbles)
** The sign trick of IQ2_XXS/XS: each group of 8 stores 7 signs, the 8th is the parity (an even
** number of negatives): an odd group flips the sign of its least important value first. */
#include "ggml_quant_iq2.h"
#include "ggml_quant_impl.h"
#include "ggml_round.h"
#include "ggml_traits.h"

#include <float.h>
#include <math.h>

#define QK_K 256
#define GROUP_MAX_EPS 1e-15f
#define GROUP_MAX_EPS_IQ2_S 1e-8f
#define GROUP_MAX_EPS_IQ1_M 1e-7f
#define GROUP_MAX_EPS_IQ1_S 1e-12f
#define IQ1S_DELTA 0.125f
#define IQ1M_DELTA 0.125f

static inline float fmaxf_(float a, float b) { return a > b ? a : b; } /* ggml's MAX(a, b) */

/* f16 of f at p; 0 when it overflows (the reference stores inf). */
static int put_f16(uint8_t *p, float f) {
    const uint16_t h = tm_f32_to_f16(f);
    tm__st16(p, h);
    return (h & 0x7c00u) != 0x7c00u;
}

/* The key of 8 levels. */
static inline uint16_t key8(const int8_t *L) {
    uint16_t u = 0;
    for (int i = 0; i < 8; i++) u = (uint16_t)(u | (L[i] << 2 * i));
    return u;
}

/* iq2_find_best_neighbour: among the neighbours of an off-grid key, the grid point with the
** least weighted squared error sum w (scale q - x)^2 (the first on ties); its levels into L. */
static int best_neighbour(const tm__iq2_tab *t, int u, const float *xval, const float *w,
                          float scale, int8_t *L) {
    const uint16_t *nb = t->nbr + (-t->map[u] - 1);
    const int n = nb[0], n8 = (n + 7) & ~7;
    /* every candidate's sum in the reference's order (i = 0..7), the candidates side by side in
    ** blocks of 8 so the compiler runs them in vector lanes: the same operations, the same bits */
    const int8_t *tq = t->tq + t->tqo[u];
    float d2[512] __attribute__((aligned(32)));
    for (int j = 0; j < n8; j++) d2[j] = 0;
    for (int i = 0; i < 8; i++) {
        const float xi = xval[i], wi = w[i];
        const int8_t *qi = tq + (size_t)i * n8;
        for (int j = 0; j < n8; j++) {
            const float q = qi[j];
            const float diff = scale * q - xi;
            d2[j] += wi * diff * diff;
        }
    }
    /* the first strict minimum, as the reference's running d2 < best_d2 */
    float best_d2 = FLT_MAX;
    int bj = -1;
    for (int j = 0; j < n; j++) {
        const int lt = d2[j] < best_d2;
        best_d2 = lt ? d2[j] : best_d2;
        bj = lt ? j : bj;
    }
    const int gi = nb[1 + (bj < 0 ? 0 : bj)]; /* bj < 0: only NaN distances (the reference asserts) */
    const int8_t *pg = t->pos[gi];
    for (int i = 0; i < 8; i++) L[i] = (int8_t)((pg[i] - 1) / 2);
    return gi;
}

/* The search of t (its SIMD variant where the tables name one). */
#define BEST_NEIGHBOUR(t, ...) ((t)->best ? (t)->best : best_neighbour)((t), __VA_ARGS__)

/* Fold the signs of 8 values into xval (|x|) and return the 7 stored sign bits; an odd count of
** negatives flips the value with the least w x^2 back (the first on ties). */
static uint8_t fold_signs8(const float *xb, const float *w, float *xval) {
    int nflip = 0;
    uint8_t s = 0;
    for (int i = 0; i < 8; i++) {
        if (xb[i] >= 0) xval[i] = xb[i];
        else { xval[i] = -xb[i]; ++nflip; s = (uint8_t)(s | (1u << i)); }
    }
    if (nflip % 2) {
        int imn = 0;
        float mn = w[0] * xb[0] * xb[0];
        for (int i = 1; i < 8; i++) {
            const float ax = w[i] * xb[i] * xb[i];
            if (ax < mn) { mn = ax; imn = i; }
        }
        xval[imn] = -xval[imn];
        s = (uint8_t)(s ^ (1u << imn));
    }
    return (uint8_t)(s & 127);
}

/* sum x^2 of a super-block, in index order. */
static float sumsq256(const float *x) {
    float s = 0;
    for (int i = 0; i < QK_K; i++) s += x[i] * x[i];
    return s;
}

/* The weighted fit sums of codes L (levels, value 2l+1) against xval over n values. */
static void fit_sums(int n, const float *w, const float *xval, const int8_t *L, float *sqx, float *sq2) {
    float sumqx = 0, sumq2 = 0;
    for (int i = 0; i < n; i++) {
        const float q = 2 * L[i] + 1;
        sumqx += w[i] * xval[i] * q;
        sumq2 += w[i] * q * q;
    }
    *sqx = sumqx;
    *sq2 = sumq2;
}

/* ---- IQ2_XXS ---------------------------------------------------------------------------- */

/* The 13 trial scales of IQ2_XXS's sub-block search (around eff_max / 5): the best fit's codes
** into L and its scale returned; L and `scale` left when none fits. tm__iq2_tab.trials32 may name
** a SIMD variant with the same results. */
static float trials32(const tm__iq2_tab *t, const float *weight, const float *waux, const float *xval,
                      float eff_max, float scale, int8_t *L) {
    const int kMaxQ = 3;
    int8_t Laux[32];
    float best = 0;
    for (int is = -6; is <= 6; ++is) {
        const float id = (2 * kMaxQ - 1 + is * 0.1f) / eff_max;
        const float this_scale = 1 / id;
        for (int k = 0; k < 4; k++) {
            for (int i = 0; i < 8; i++) {
                const int l = nearest_int(0.5f * (id * xval[8 * k + i] - 1));
                Laux[8 * k + i] = (int8_t)imax(0, imin(kMaxQ - 1, l));
            }
            const int u = key8(Laux + 8 * k);
            if (t->map[u] < 0) BEST_NEIGHBOUR(t, u, xval + 8 * k, waux + 8 * k, this_scale, Laux + 8 * k);
        }
        float sumqx, sumq2;
        fit_sums(32, weight, xval, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(L, Laux, 32);
        }
    }
    return scale;
}

int64_t tm__gq_iq2_xxs(const tm__iq2_tab *t, const float *x, uint8_t *y, int64_t n, const float *qw) {
    const int kMaxQ = 3;
    float scales[QK_K / 32], weight[32], xval[32], waux[32];
    int8_t L[32];
    uint8_t block_signs[4];
    uint32_t q2[2 * (QK_K / 32)];
    for (int64_t ibl = 0; ibl < n / QK_K; ibl++) {
        uint8_t *yb = y + ibl * 66;
        memset(yb, 0, 66);
        memset(q2, 0, sizeof q2);
        float max_scale = 0;
        const float *xbl = x + QK_K * ibl;
        const float sigma2 = sumsq256(xbl) / QK_K;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const float *xb = xbl + 32 * ib;
            const float *w = qw + QK_K * ibl + 32 * ib;
            for (int i = 0; i < 32; i++) weight[i] = w[i] * sqrtf(sigma2 + xb[i] * xb[i]);
            for (int i = 0; i < 32; i++) waux[i] = sqrtf(weight[i]);
            for (int k = 0; k < 4; k++) block_signs[k] = fold_signs8(xb + 8 * k, weight + 8 * k, xval + 8 * k);
            float max = xval[0];
            for (int i = 1; i < 32; i++) max = fmaxf_(max, xval[i]);
            if (max < GROUP_MAX_EPS) {
                scales[ib] = 0;
                memset(L, 0, 32);
                continue;
            }
            float scale = tm__gq_make_qp_quants(32, kMaxQ + 1, xval, (uint8_t *)L, weight);
            const float eff_max = scale * kMaxQ;
            /* also NaN: make_qp_quants returns 0/0 for all-zero weights, where ggml's search then
            ** aborts ("not on grid"); the group is zero, as before (docs/gguf-quantize.md) */
            if (!(eff_max > 0)) {
                scales[ib] = 0;
                memset(L, 0, 32);
                continue;
            }
            scale = (t->trials32 ? t->trials32 : trials32)(t, weight, waux, xval, eff_max, scale, L);
            if (scale > 0) {
                const float id = 1 / scale;
                for (int k = 0; k < 4; k++) {
                    int8_t Lk[8];
                    for (int i = 0; i < 8; i++) {
                        const int l = nearest_int(0.5f * (id * xval[8 * k + i] - 1));
                        Lk[i] = (int8_t)imax(0, imin(kMaxQ - 1, l));
                    }
                    const int u = key8(Lk);
                    int32_t gi = t->map[u];
                    if (gi < 0) gi = BEST_NEIGHBOUR(t, u, xval + 8 * k, waux + 8 * k, scale, L + 8 * k);
                    const int8_t *pg = t->pos[gi];
                    for (int i = 0; i < 8; i++) L[8 * k + i] = (int8_t)((pg[i] - 1) / 2);
                }
                float sumqx, sumq2;
                fit_sums(32, weight, xval, L, &sumqx, &sumq2);
                if (sumq2 > 0) scale = sumqx / sumq2;
            }
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 4; k++) block_signs[k] = (uint8_t)((~block_signs[k]) & 127);
            }
            for (int k = 0; k < 4; k++) {
                int32_t gi = t->map[key8(L + 8 * k)];
                if (gi < 0) gi = 0; /* cannot happen: L comes from a grid point */
                q2[2 * ib + 0] |= (uint32_t)gi << 8 * k;
                q2[2 * ib + 1] |= (uint32_t)block_signs[k] << 7 * k;
            }
            scales[ib] = scale;
            max_scale = fmaxf_(max_scale, scale);
        }
        if (!max_scale) continue; /* d 0, qs 0 */
        const float d = max_scale / 31;
        if (!put_f16(yb, d)) return ibl;
        const float id = 1 / d;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            int l = nearest_int(0.5f * (id * scales[ib] - 1));
            l = imax(0, imin(15, l));
            q2[2 * ib + 1] |= (uint32_t)l << 28;
        }
        for (int i = 0; i < 2 * (QK_K / 32); i++) tm__st32(yb + 2 + 4 * i, q2[i]);
    }
    return -1;
}

/* ---- IQ2_XS and IQ2_S: groups of 16 ------------------------------------------------------- */

/* The 19 trial scales of search16 (around max / 5): the best fit's codes into L (left as they are
** when no trial fits), the best's groups' on-grid flags into on_grid; returns its scale (max / 5
** when none fits). tm__iq2_tab.trials16 may name a SIMD variant with the same results. */
static float trials16(const tm__iq2_tab *t, const float *weight, const float *waux, const float *xval,
                      float max, int8_t *L, int *on_grid) {
    const int kMaxQ = 3;
    int8_t Laux[16];
    int on_grid_aux[2];
    float best = 0;
    float scale = max / (2 * kMaxQ - 1);
    for (int is = -9; is <= 9; ++is) {
        const float id = (2 * kMaxQ - 1 + is * 0.1f) / max;
        const float this_scale = 1 / id;
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < 8; i++) {
                const int l = nearest_int(0.5f * (id * xval[8 * k + i] - 1));
                Laux[8 * k + i] = (int8_t)imax(0, imin(kMaxQ - 1, l));
            }
            const int u = key8(Laux + 8 * k);
            on_grid_aux[k] = 1;
            if (t->map[u] < 0) {
                on_grid_aux[k] = 0;
                BEST_NEIGHBOUR(t, u, xval + 8 * k, waux + 8 * k, this_scale, Laux + 8 * k);
            }
        }
        float sumqx, sumq2;
        fit_sums(16, weight, xval, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(L, Laux, 16);
            on_grid[0] = on_grid_aux[0];
            on_grid[1] = on_grid_aux[1];
        }
    }
    return scale;
}

/* The scale search of a sub-block of 16 (xval >= 0, max > 0) shared by IQ2_XS and IQ2_S:
** 19 trial scales around max / 5, the best fit kept; the off-grid groups of the best refitted at
** its scale. Codes into L; returns the scale. */
static float search16(const tm__iq2_tab *t, const float *weight, const float *waux,
                      const float *xval, float max, int8_t *L) {
    const int kMaxQ = 3;
    int on_grid[2] = {1, 1};
    float scale = (t->trials16 ? t->trials16 : trials16)(t, weight, waux, xval, max, L, on_grid);
    if ((!on_grid[0] || !on_grid[1]) && scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < 2; k++) {
            if (on_grid[k]) continue;
            for (int i = 0; i < 8; i++) {
                int l = nearest_int(0.5f * (id * xval[8 * k + i] - 1));
                l = imax(0, imin(kMaxQ - 1, l));
                L[8 * k + i] = (int8_t)l;
            }
            const int u = key8(L + 8 * k);
            if (t->map[u] < 0) BEST_NEIGHBOUR(t, u, xval + 8 * k, waux + 8 * k, scale, L + 8 * k);
        }
        float sumqx, sumq2;
        fit_sums(16, weight, xval, L, &sumqx, &sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    return scale;
}

int64_t tm__gq_iq2_xs(const tm__iq2_tab *t, const float *x, uint8_t *y, int64_t n, const float *qw) {
    float scales[QK_K / 16], weight[16], xval[16], waux[16];
    int8_t L[16];
    uint8_t block_signs[2];
    uint16_t q2[2 * (QK_K / 16)];
    for (int64_t ibl = 0; ibl < n / QK_K; ibl++) {
        uint8_t *yb = y + ibl * 74;
        memset(yb, 0, 74);
        memset(q2, 0, sizeof q2);
        float max_scale = 0;
        const float *xbl = x + QK_K * ibl;
        const float sigma2 = sumsq256(xbl) / QK_K;
        for (int ib = 0; ib < QK_K / 16; ib++) {
            const float *xb = xbl + 16 * ib;
            const float *w = qw + QK_K * ibl + 16 * ib;
            for (int i = 0; i < 16; i++) weight[i] = w[i] * sqrtf(sigma2 + xb[i] * xb[i]);
            for (int i = 0; i < 16; i++) waux[i] = sqrtf(weight[i]);
            for (int k = 0; k < 2; k++) block_signs[k] = fold_signs8(xb + 8 * k, weight + 8 * k, xval + 8 * k);
            float max = xval[0];
            for (int i = 1; i < 16; i++) max = fmaxf_(max, xval[i]);
            memset(L, 0, 16);
            if (max < GROUP_MAX_EPS) {
                scales[ib] = 0;
                continue;
            }
            float scale = search16(t, weight, waux, xval, max, L);
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 2; k++) block_signs[k] = (uint8_t)((~block_signs[k]) & 127);
            }
            for (int k = 0; k < 2; k++) {
                int32_t gi = t->map[key8(L + 8 * k)];
                if (gi < 0) gi = 0; /* cannot happen */
                q2[2 * ib + k] = (uint16_t)(gi | (block_signs[k] << 9));
            }
            scales[ib] = scale;
            max_scale = fmaxf_(max_scale, scale);
        }
        if (!max_scale) continue;
        const float d = max_scale / 31;
        if (!put_f16(yb, d)) return ibl;
        const float id = 1 / d;
        for (int ib = 0; ib < QK_K / 16; ib++) {
            int l = nearest_int(0.5f * (id * scales[ib] - 1));
            l = imax(0, imin(15, l));
            if (ib % 2 == 0) yb[66 + ib / 2] = (uint8_t)l;
            else yb[66 + ib / 2] = (uint8_t)(yb[66 + ib / 2] | (l << 4));
        }
        for (int i = 0; i < 2 * (QK_K / 16); i++) tm__st16(yb + 2 + 2 * i, q2[i]);
    }
    return -1;
}

int64_t tm__gq_iq2_s(const tm__iq2_tab *t, const float *x, uint8_t *y, int64_t n, const float *qw) {
    float scales[QK_K / 16], weight[16], xval[16], waux[16];
    int8_t L[16];
    uint8_t block_signs[2];
    for (int64_t ibl = 0; ibl < n / QK_K; ibl++) {
        uint8_t *yb = y + ibl * 82, *qs = yb + 2, *qh = yb + 66, *sc = yb + 74;
        memset(yb, 0, 82);
        float max_scale = 0;
        const float *xbl = x + QK_K * ibl;
        const float sigma2 = 2 * sumsq256(xbl) / QK_K;
        for (int ib = 0; ib < QK_K / 16; ib++) {
            const float *xb = xbl + 16 * ib;
            if (qw) {
                const float *w = qw + QK_K * ibl + 16 * ib;
                for (int i = 0; i < 16; i++) weight[i] = w[i] * sqrtf(sigma2 + xb[i] * xb[i]);
            } else {
                for (int i = 0; i < 16; i++) weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
            }
            for (int i = 0; i < 16; i++) waux[i] = sqrtf(weight[i]);
            for (int k = 0; k < 2; k++) {
                uint8_t s = 0;
                for (int i = 0; i < 8; i++) { /* without branches: the signs are random */
                    const float v = xb[8 * k + i];
                    const unsigned neg = !(v >= 0);
                    xval[8 * k + i] = neg ? -v : v;
                    s = (uint8_t)(s | neg << i);
                }
                block_signs[k] = s;
            }
            float max = xval[0];
            for (int i = 1; i < 16; i++) max = fmaxf_(max, xval[i]);
            memset(L, 0, 16);
            if (max < GROUP_MAX_EPS_IQ2_S) {
                scales[ib] = 0;
                continue;
            }
            float scale = search16(t, weight, waux, xval, max, L);
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 2; k++) block_signs[k] = (uint8_t)~block_signs[k];
            }
            for (int k = 0; k < 2; k++) {
                int32_t gi = t->map[key8(L + 8 * k)];
                if (gi < 0) gi = 0; /* cannot happen */
                const int i8 = 2 * ib + k;
                qs[i8] = (uint8_t)(gi & 255);
                qh[i8 / 4] = (uint8_t)(qh[i8 / 4] | ((gi >> 8) << 2 * (i8 % 4)));
                qs[QK_K / 8 + i8] = block_signs[k];
            }
            scales[ib] = scale;
            max_scale = fmaxf_(max_scale, scale);
        }
        if (!max_scale) continue;
        const float d = max_scale / 31;
        if (!put_f16(yb, d * 0.9875f)) return ibl;
        const float id = 1 / d;
        for (int ib = 0; ib < QK_K / 16; ib++) {
            int l = nearest_int(0.5f * (id * scales[ib] - 1));
            l = imax(0, imin(15, l));
            if (ib % 2 == 0) sc[ib / 2] = (uint8_t)l;
            else sc[ib / 2] = (uint8_t)(sc[ib / 2] | (l << 4));
        }
    }
    return -1;
}

/* ---- IQ1_S and IQ1_M ------------------------------------------------------------------------ */

/* Sort the n values of xb ascending with their indices into idx, stably (equal values keep index
** order). llama.cpp sorts (value, index) pairs with glibc's qsort and a value-only comparator;
** glibc 2.36 (the reference build's Debian 12) sorts arrays this small with its merge sort,
** which is stable, so the two orders agree. */
static void sort_idx(int n, const float *xb, float *val, int *idx) {
    for (int a = 0; a < n; a++) {
        const float v = xb[a];
        int b = a - 1;
        while (b >= 0 && val[b] > v) {
            val[b + 1] = val[b];
            idx[b + 1] = idx[b];
            --b;
        }
        val[b + 1] = v;
        idx[b + 1] = a;
    }
}

/* iq1_find_best_neighbour2: among the neighbours of off-grid key u, the one with the least weighted squared error of
** scale xg[level] against xval (the first on ties); its levels into L. tm__iq2_tab.best1 may
** name a SIMD variant with the same results. */
static int best_neighbour1(const tm__iq2_tab *t, int u, const float *xval, const float *w,
                           float scale, const float *xg, int8_t *L) {
    const uint16_t *nb = t->nbr + (-t->map[u] - 1);
    float best = FLT_MAX;
    int gi = -1;
    for (int j = 1; j <= nb[0]; j++) {
        const int8_t *pg = t->pos[nb[j]];
        float d2 = 0;
        for (int i = 0; i < 8; i++) {
            const float q = xg[(pg[i] - 1) / 2];
            const float diff = scale * q - xval[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best) { best = d2; gi = nb[j]; }
    }
    /* The reference then searches the whole grid (reading xval out of range: a bug that only
    ** NaN distances reach); keep the first neighbour instead. */
    if (gi < 0) gi = nb[1];
    const int8_t *pg = t->pos[gi];
    for (int i = 0; i < 8; i++) L[i] = (int8_t)((pg[i] - 1) / 2);
    return gi;
}

/* IQ1_S's search of one sub-block of 32 over the two boundaries (i1, i2) splitting the sorted
** values into the levels -1, 0, 1 with the delta +-1/8 (shift +1: x_p, -1: x_m), from the prefix
** sums sumx / sumw [33] of the sorted values: each split and shift kept when sumq2 > 0 and
** sumqx^2 > best sumq2 (best = scale sumqx, from -FLT_MAX), in the order (i1, i2, +1, -1). On the
** last kept one: *scale, *bi1, *bi2, *bshift; none kept leaves them. tm__iq2_tab.iq1s_splits may
** name a SIMD variant with the same results. */
static void iq1s_splits(const float *sumx, const float *sumw, float *scale, int *bi1, int *bi2, int *bshift) {
    enum { BS = 32 };
    const float x_p[3] = {-1 + IQ1S_DELTA, IQ1S_DELTA, 1 + IQ1S_DELTA};
    const float x_m[3] = {-1 - IQ1S_DELTA, -IQ1S_DELTA, 1 - IQ1S_DELTA};
    float best_score = -FLT_MAX;
    for (int i1 = 0; i1 <= BS; ++i1) {
        for (int i2 = i1; i2 <= BS; ++i2) {
            float sumqx = (sumx[i1] - sumx[0]) * x_p[0] + (sumx[i2] - sumx[i1]) * x_p[1] +
                          (sumx[BS] - sumx[i2]) * x_p[2];
            float sumq2 = (sumw[i1] - sumw[0]) * x_p[0] * x_p[0] +
                          (sumw[i2] - sumw[i1]) * x_p[1] * x_p[1] +
                          (sumw[BS] - sumw[i2]) * x_p[2] * x_p[2];
            if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
                *scale = sumqx / sumq2; best_score = *scale * sumqx;
                *bi1 = i1; *bi2 = i2; *bshift = 1;
            }
            sumqx = (sumx[i1] - sumx[0]) * x_m[0] + (sumx[i2] - sumx[i1]) * x_m[1] +
                    (sumx[BS] - sumx[i2]) * x_m[2];
            sumq2 = (sumw[i1] - sumw[0]) * x_m[0] * x_m[0] +
                    (sumw[i2] - sumw[i1]) * x_m[1] * x_m[1] +
                    (sumw[BS] - sumw[i2]) * x_m[2] * x_m[2];
            if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
                *scale = sumqx / sumq2; best_score = *scale * sumqx;
                *bi1 = i1; *bi2 = i2; *bshift = -1;
            }
        }
    }
}

int64_t tm__gq_iq1_s(const tm__iq2_tab *t, const float *x, uint8_t *y, int64_t n, const float *qw) {
    enum { BS = 32 };
    const float x_p[3] = {-1 + IQ1S_DELTA, IQ1S_DELTA, 1 + IQ1S_DELTA};
    const float x_m[3] = {-1 - IQ1S_DELTA, -IQ1S_DELTA, 1 - IQ1S_DELTA};
    float scales[QK_K / BS], weight[BS], sumx[BS + 1], sumw[BS + 1], val[BS];
    int idx[BS];
    int8_t L[BS], shifts[QK_K / BS];
    uint16_t index[BS / 8], qh[QK_K / BS];
    for (int64_t ibl = 0; ibl < n / QK_K; ibl++) {
        uint8_t *yb = y + ibl * 50, *qs = yb + 2;
        memset(yb, 0, 50);
        memset(qh, 0, sizeof qh);
        float max_scale = 0;
        const float *xbl = x + QK_K * ibl;
        const float sigma2 = 2 * sumsq256(xbl) / QK_K;
        for (int ib = 0; ib < QK_K / BS; ib++) {
            const float *xb = xbl + BS * ib;
            const float *w = qw + QK_K * ibl + BS * ib;
            for (int i = 0; i < BS; i++) weight[i] = w[i] * sqrtf(sigma2 + xb[i] * xb[i]);
            float max = fabsf(xb[0]);
            for (int i = 1; i < BS; i++) max = fmaxf_(max, fabsf(xb[i]));
            if (max < GROUP_MAX_EPS_IQ1_S) {
                scales[ib] = 0;
                shifts[ib] = 1;
                continue;
            }
            /* three levels -1, 0, 1 (+- delta): the exact weighted optimum over the two
            ** boundaries splitting the sorted values, from prefix sums */
            if (t->sort1) t->sort1(BS, xb, idx);
            else sort_idx(BS, xb, val, idx);
            sumx[0] = sumw[0] = 0;
            for (int j = 0; j < BS; j++) {
                const int i = idx[j];
                sumx[j + 1] = sumx[j] + weight[i] * xb[i];
                sumw[j + 1] = sumw[j] + weight[i];
            }
            float scale = max;
            int besti1 = -1, besti2 = -1, best_shift = 0;
            (t->iq1s_splits ? t->iq1s_splits : iq1s_splits)(sumx, sumw, &scale, &besti1, &besti2, &best_shift);
            if (besti1 < 0 || besti2 < 0 || best_shift == 0) {
                scales[ib] = 0;
                shifts[ib] = 1;
                continue;
            }
            for (int j = 0; j < besti1; ++j) L[idx[j]] = 0;
            for (int j = besti1; j < besti2; ++j) L[idx[j]] = 1;
            for (int j = besti2; j < BS; ++j) L[idx[j]] = 2;
            if (scale < 0) {
                for (int j = 0; j < BS; ++j) L[j] = (int8_t)(2 - L[j]);
                scale = -scale;
                best_shift = -best_shift;
            }
            int all_on_grid = 1;
            const float *xx = best_shift == 1 ? x_p : x_m;
            for (int k = 0; k < BS / 8; k++) {
                const int u = key8(L + 8 * k);
                int32_t gi = t->map[u];
                if (gi < 0) {
                    all_on_grid = 0;
                    gi = (t->best1 ? t->best1 : best_neighbour1)(t, u, xb + 8 * k, weight + 8 * k, scale, xx, L + 8 * k);
                }
                index[k] = (uint16_t)gi;
            }
            if (!all_on_grid) {
                float sumqx = 0, sumq2 = 0;
                for (int k = 0; k < BS / 8; k++) {
                    const int8_t *pg = t->pos[index[k]];
                    for (int j = 0; j < 8; j++) {
                        const float w8 = weight[8 * k + j];
                        const float q = xx[(pg[j] - 1) / 2];
                        sumqx += w8 * q * xb[8 * k + j];
                        sumq2 += w8 * q * q;
                    }
                }
                if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
            }
            uint16_t h = 0;
            for (int k = 0; k < BS / 8; k++) {
                qs[(BS / 8) * ib + k] = (uint8_t)(index[k] & 255);
                h = (uint16_t)(h | ((index[k] >> 8) << 3 * k));
            }
            qh[ib] = h;
            scales[ib] = scale;
            shifts[ib] = (int8_t)best_shift;
            max_scale = fmaxf_(max_scale, scale);
        }
        if (max_scale) {
            const float d = max_scale / 15;
            if (!put_f16(yb, d * 1.125f)) return ibl;
            const float id = 1 / d;
            for (int ib = 0; ib < QK_K / BS; ib++) {
                int l = nearest_int(0.5f * (id * scales[ib] - 1));
                l = imax(0, imin(7, l));
                if (shifts[ib] == -1) l |= 8;
                qh[ib] = (uint16_t)(qh[ib] | (l << 12));
            }
        }
        for (int ib = 0; ib < QK_K / BS; ib++) tm__st16(yb + 34 + 2 * ib, qh[ib]);
    }
    return -1;
}

/* IQ1_M's split search of a sub-block of 16 (xb its values, weight their weights, idx their
** order ascending, stable): every split (i1, i2) of the sorted values into levels 0 / 1 / 2 and
** every delta-sign combination k (0: ++, 1: +-, 2: -+, 3: --, the first and second half), kept
** when sumqx^2 > best sumq2 (from -FLT_MAX), in the order (i1, i2, k). On the last kept one:
** *scale, *bi1, *bi2, *bk; none kept leaves them. tm__iq2_tab.iq1m_splits may name a SIMD
** variant with the same results. */
static void iq1m_splits(const float *weight, const float *xb, const int *idx, float *scale, int *bi1, int *bi2,
                        int *bk) {
    enum { BS = 16 };
    const float x_p[3] = {-1 + IQ1M_DELTA, IQ1M_DELTA, 1 + IQ1M_DELTA};
    const float x_m[3] = {-1 - IQ1M_DELTA, -IQ1M_DELTA, 1 - IQ1M_DELTA};
    const float *vk[4][2] = {{x_p, x_p}, {x_p, x_m}, {x_m, x_p}, {x_m, x_m}};
    /* The reference sums, for every split (i1, i2), all 16 sorted values in order:
    ** j < i1 at level 0, i1 <= j < i2 at level 1, the rest at level 2, each combination
    ** k in its own accumulators (w v) x and (w v) v. The partial sums over j < i2 do not
    ** depend on how the rest is split, so they are carried from one i2 to the next;
    ** the sequence of float operations per (i1, i2, k) is the reference's. */
    float P0x[4] = {0, 0, 0, 0}, P02[4] = {0, 0, 0, 0};
    float best_score = -FLT_MAX;
    for (int i1 = 0; i1 <= BS; ++i1) {
        float Qx[4], Q2[4];
        memcpy(Qx, P0x, sizeof Qx);
        memcpy(Q2, P02, sizeof Q2);
        for (int i2 = i1; i2 <= BS; ++i2) {
            float sumqx[4], sumq2[4];
            memcpy(sumqx, Qx, sizeof sumqx);
            memcpy(sumq2, Q2, sizeof sumq2);
            for (int j = i2; j < BS; ++j) {
                const int i = idx[j], h = i < BS / 2 ? 0 : 1;
                for (int k = 0; k < 4; k++) {
                    const float v = vk[k][h][2];
                    sumqx[k] += weight[i] * v * xb[i];
                    sumq2[k] += weight[i] * v * v;
                }
            }
            for (int k = 0; k < 4; k++) {
                if (sumq2[k] > 0 && sumqx[k] * sumqx[k] > best_score * sumq2[k]) {
                    *scale = sumqx[k] / sumq2[k]; best_score = *scale * sumqx[k];
                    *bi1 = i1; *bi2 = i2; *bk = k;
                }
            }
            if (i2 < BS) { /* value i2 joins level 1 for the next i2 */
                const int i = idx[i2], h = i < BS / 2 ? 0 : 1;
                for (int k = 0; k < 4; k++) {
                    const float v = vk[k][h][1];
                    Qx[k] += weight[i] * v * xb[i];
                    Q2[k] += weight[i] * v * v;
                }
            }
        }
        if (i1 < BS) { /* value i1 joins level 0 for the next i1 */
            const int i = idx[i1], h = i < BS / 2 ? 0 : 1;
            for (int k = 0; k < 4; k++) {
                const float v = vk[k][h][0];
                P0x[k] += weight[i] * v * xb[i];
                P02[k] += weight[i] * v * v;
            }
        }
    }
}

int64_t tm__gq_iq1_m(const tm__iq2_tab *t, const float *x, uint8_t *y, int64_t n, const float *qw) {
    enum { BS = 16 };
    const float x_p[3] = {-1 + IQ1M_DELTA, IQ1M_DELTA, 1 + IQ1M_DELTA};
    const float x_m[3] = {-1 - IQ1M_DELTA, -IQ1M_DELTA, 1 - IQ1M_DELTA};
    static const uint8_t masks[4] = {0x00, 0x80, 0x08, 0x88};
    float scales[QK_K / BS], weight[BS], val[BS];
    int idx[BS];
    int8_t L[BS], shifts[QK_K / BS];
    uint16_t index[BS / 8];
    /* per combination k (0: ++, 1: +-, 2: -+, 3: --; the sign of the delta in the first and
    ** the second half of the sub-block) the levels v[k][half][level] */
    const float *vk[4][2] = {{x_p, x_p}, {x_p, x_m}, {x_m, x_p}, {x_m, x_m}};
    for (int64_t ibl = 0; ibl < n / QK_K; ibl++) {
        uint8_t *qs = y + ibl * 56, *qh = qs + 32, *scb = qs + 48;
        memset(qs, 0, 56);
        float max_scale = 0;
        const float *xbl = x + QK_K * ibl;
        const float sigma2 = 2 * sumsq256(xbl) / QK_K;
        for (int ib = 0; ib < QK_K / BS; ib++) {
            const float *xb = xbl + BS * ib;
            if (qw) {
                const float *w = qw + QK_K * ibl + BS * ib;
                for (int i = 0; i < BS; i++) weight[i] = w[i] * sqrtf(sigma2 + xb[i] * xb[i]);
            } else {
                for (int i = 0; i < BS; i++) weight[i] = xb[i] * xb[i];
            }
            float max = fabsf(xb[0]);
            for (int i = 1; i < BS; i++) max = fmaxf_(max, fabsf(xb[i]));
            if (max < GROUP_MAX_EPS_IQ1_M) {
                scales[ib] = 0;
                shifts[ib] = 0;
                continue;
            }
            if (t->sort1) t->sort1(BS, xb, idx);
            else sort_idx(BS, xb, val, idx);
            float scale = max;
            int besti1 = -1, besti2 = -1, best_k = -1;
            (t->iq1m_splits ? t->iq1m_splits : iq1m_splits)(weight, xb, idx, &scale, &besti1, &besti2, &best_k);
            if (besti1 < 0 || besti2 < 0 || best_k < 0) {
                scales[ib] = 0;
                shifts[ib] = 0;
                continue;
            }
            for (int j = 0; j < besti1; ++j) L[idx[j]] = 0;
            for (int j = besti1; j < besti2; ++j) L[idx[j]] = 1;
            for (int j = besti2; j < BS; ++j) L[idx[j]] = 2;
            if (scale < 0) {
                for (int j = 0; j < BS; ++j) L[j] = (int8_t)(2 - L[j]);
                scale = -scale;
                best_k = 3 - best_k; /* 0 <-> 3, 1 <-> 2 */
            }
            int all_on_grid = 1;
            for (int k = 0; k < BS / 8; k++) {
                const float *xx = vk[best_k][k];
                const int u = key8(L + 8 * k);
                int32_t gi = t->map[u];
                if (gi < 0) {
                    all_on_grid = 0;
                    gi = (t->best1 ? t->best1 : best_neighbour1)(t, u, xb + 8 * k, weight + 8 * k, scale, xx, L + 8 * k);
                }
                index[k] = (uint16_t)gi;
            }
            if (!all_on_grid) {
                float sumqx_f = 0, sumq2_f = 0;
                for (int k = 0; k < BS / 8; k++) {
                    const float *xx = vk[best_k][k];
                    const int8_t *pg = t->pos[index[k]];
                    for (int j = 0; j < 8; j++) {
                        const float w8 = weight[8 * k + j];
                        const float q = xx[(pg[j] - 1) / 2];
                        sumqx_f += w8 * q * xb[8 * k + j];
                        sumq2_f += w8 * q * q;
                    }
                }
                if (sumqx_f > 0 && sumq2_f > 0) scale = sumqx_f / sumq2_f;
            }
            qs[2 * ib + 0] = (uint8_t)(index[0] & 255);
            qs[2 * ib + 1] = (uint8_t)(index[1] & 255);
            qh[ib] = (uint8_t)((index[0] >> 8) | ((index[1] >> 8) << 4));
            scales[ib] = scale;
            shifts[ib] = (int8_t)best_k;
            max_scale = fmaxf_(max_scale, scale);
        }
        if (!max_scale) continue;
        uint16_t sc[4] = {0, 0, 0, 0};
        float d = max_scale / 15;
        const float id = 1 / d;
        float sumqx_f = 0, sumq2_f = 0;
        for (int ib = 0; ib < QK_K / BS; ib++) {
            int l = nearest_int(0.5f * (id * scales[ib] - 1));
            l = imax(0, imin(7, l));
            sc[ib / 4] = (uint16_t)(sc[ib / 4] | (l << 3 * (ib % 4)));
            qh[ib] = (uint8_t)(qh[ib] | masks[shifts[ib]]);
            const float *xb = xbl + BS * ib;
            if (qw) {
                const float *w = qw + QK_K * ibl + BS * ib;
                for (int i = 0; i < BS; i++) weight[i] = w[i] * sqrtf(sigma2 + xb[i] * xb[i]);
            } else {
                for (int i = 0; i < BS; i++) weight[i] = xb[i] * xb[i];
            }
            for (int k = 0; k < BS / 8; k++) {
                const float *xx = vk[shifts[ib]][k];
                const int8_t *pg = t->pos[qs[2 * ib + k] + ((qh[ib] << (8 - 4 * k)) & 0x700)];
                for (int j = 0; j < 8; j++) {
                    const float w8 = weight[8 * k + j];
                    const float q = xx[(pg[j] - 1) / 2] * (2 * l + 1);
                    sumqx_f += w8 * q * xb[8 * k + j];
                    sumq2_f += w8 * q * q;
                }
            }
        }
        if (sumq2_f > 0) d = sumqx_f / sumq2_f;
        const uint16_t s = tm_f32_to_f16(d * 1.1125f);
        if ((s & 0x7c00u) == 0x7c00u) return ibl;
        sc[0] = (uint16_t)(sc[0] | ((s & 0x000f) << 12));
        sc[1] = (uint16_t)(sc[1] | ((s & 0x00f0) << 8));
        sc[2] = (uint16_t)(sc[2] | ((s & 0x0f00) << 4));
        sc[3] = (uint16_t)(sc[3] | ((s & 0xf000) << 0));
        for (int i = 0; i < 4; i++) tm__st16(scb + 2 * i, sc[i]);
    }
    return -1;
}

/* ---- rows of the type table (ggml_traits.h) --------------------------------------------- */

static tm_status rows_iq2(const tm_ggml_type_info *t, const float *x, int64_t b0, int64_t nb, uint8_t *y,
                          const float *qw, int64_t *bad_block, int simd, tm_err *err) {
    int g;
    int64_t (*fn)(const tm__iq2_tab *, const float *, uint8_t *, int64_t, const float *);
    int need_w = 1;
    switch (t->id) {
    case TM_GGML_IQ2_XXS: g = TM__IQ2_GRID_XXS; fn = tm__gq_iq2_xxs; break;
    case TM_GGML_IQ2_XS:  g = TM__IQ2_GRID_XS;  fn = tm__gq_iq2_xs; break;
    case TM_GGML_IQ2_S:   g = TM__IQ2_GRID_S;   fn = tm__gq_iq2_s; need_w = 0; break;
    case TM_GGML_IQ1_S:   g = TM__IQ2_GRID_1S;  fn = tm__gq_iq1_s; break;
    case TM_GGML_IQ1_M:   g = TM__IQ2_GRID_1S;  fn = tm__gq_iq1_m; need_w = 0; break;
    default: return tm__err_set(err, TM_E_INVALID_ARG, -1, "ggml type %s is not an IQ1/IQ2 type", t->name);
    }
    if (bad_block) *bad_block = -1;
    if (!qw && need_w)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "%s needs an importance matrix (llama.cpp: \"missing quantization weights\")", t->name);
    const tm__iq2_tab *tab = tm__iq2_tab_get(g);
    if (!tab) return tm__err_set(err, TM_E_NOMEM, -1, "%s: cannot build the grid search tables", t->name);
    tm__iq2_tab view = *tab;
#ifdef TM__GQ_HAVE_AVX2
    if (simd) {
        view.best = tm__iq2_best_avx2;
        view.trials16 = tm__iq2_trials16_avx2;
        view.trials32 = tm__iq2_trials32_avx2;
        view.iq1s_splits = tm__iq1s_splits_avx2;
        view.iq1m_splits = tm__iq1m_splits_avx2;
        view.best1 = tm__iq1_best_avx2;
        view.sort1 = tm__iq1_sort_avx2;
        tab = &view;
    }
#else
    (void)simd;
    (void)view;
#endif
    if (nb <= b0) return TM_OK;
    const int64_t v0 = b0 * QK_K;
    const int64_t bad = fn(tab, x + v0, y + b0 * t->type_size, (nb - b0) * QK_K, qw ? qw + v0 : NULL);
    if (bad >= 0) {
        if (bad_block) *bad_block = b0 + bad;
        return tm__err_set(err, TM_E_RANGE, -1, "block %lld: the %s super-block scale does not fit float16 (largest 65504)",
                           (long long)(b0 + bad), t->name);
    }
    return TM_OK;
}

tm_status tm__gq_rows_iq2w(const tm_ggml_type_info *t, const float *x, int64_t b0, int64_t nb,
                           uint8_t *y, const float *qw, int64_t *bad_block, tm_err *err) {
    return rows_iq2(t, x, b0, nb, y, qw, bad_block, 0, err);
}

tm_status tm__gq_rows_iq2(const tm_ggml_type_info *t, const float *x, const float *imatrix,
                          int64_t b0, int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    return rows_iq2(t, x, b0, nb, y, imatrix, bad_block, 0, err);
}

#ifdef TM__GQ_HAVE_AVX2
/* The same with the best-neighbour search of IQ2_XXS / IQ2_XS / IQ2_S (tm__iq2_best_avx2) and
** the split searches of IQ1_S / IQ1_M (tm__iq1s_splits_avx2, tm__iq1m_splits_avx2) in AVX2 lanes. Same
** bytes. */
tm_status tm__gq_rows_iq2_avx2(const tm_ggml_type_info *t, const float *x, const float *imatrix,
                               int64_t b0, int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    return rows_iq2(t, x, b0, nb, y, imatrix, bad_block, 1, err);
}
#endif
