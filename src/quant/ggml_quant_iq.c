/*
** ggml_quant_iq.c: the ggml quantizers of the non-linear, grid and ternary types, with and
** without an importance matrix: IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, TQ1_0, TQ2_0. Byte for byte
** what llama-quantize writes (ggml_quantize_chunk -> quantize_iq4_nl, quantize_iq4_xs,
** quantize_iq3_xxs, quantize_iq3_s, quantize_tq1_0, quantize_tq2_0 of ggml/src/ggml-quants.c at
** ggml-org/llama.cpp@c392e5094deaf2d1a7c18683214f007fad3fe42b, default x86-64 build: no fused
** multiply-add; this file is compiled with -ffp-contract=off). The algorithms are carried over
** with their float32 order of operations (which decides the bytes); the code is our own.
**
** Block layouts (little-endian, ggml-common.h; decoded by ggml_dequant.c / ggml_dequant_iq.c):
**   IQ4_NL   18 B / 32:  f16 d, qs[16] (code j low nibble of qs[j], j+16 high);  x = d v[q]
**   IQ4_XS  136 B / 256: f16 d, u16 scales_h, scales_l[4], qs[128]; 8 sub-blocks of 32 with a
**                        6-bit scale ls (low 4 bits in scales_l nibble, high 2 in scales_h),
**                        x = d (ls - 32) v[q]; qs packed per 32 as IQ4_NL
**   IQ3_XXS  98 B / 256: f16 d, qs[64] (indices into the 256-row grid, 4 values each), then
**                        8 u32 (one per 32 values): 4 x 7 sign bits, scale in bits 28..31;
**                        x = d (0.5 + s) / 2 grid +-
**   IQ3_S   110 B / 256: f16 d, qs[64] (low 8 bits of 9-bit indices into the 512-row grid),
**                        qh[8] (9th bits), signs[32] (one bit a value), scales[4] (4-bit);
**                        x = d (1 + 2 s) grid +-
**   TQ1_0    54 B / 256: qs[48] (5 trits a byte), qh[4] (4 trits a byte), f16 d; x = d t, t in -1..1
**   TQ2_0    66 B / 256: qs[64] (4 two-bit codes a byte), f16 d;             x = d (q - 1)
**
** The IQ3 grids are data of the format (ggml_iq_tables.c). The quantizer's search needs, per
** grid, the map from a 4-tuple of 3-bit levels to its grid row and, for each of the 4096 tuples
** not on the grid, the list of its nearest grid rows: built here from the grid by the rule of
** ggml's iq3xs_init_impl (see iq3_build).
*/
#include "core/core.h"
#include "ggml_round.h"
#include "ggml_traits.h"
#include "ggml_quant_iq.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>

#define QK_K 256
#define GROUP_MAX_EPS 1e-15f         /* ggml-quants.c: "all zero" sub-block threshold     */
#define GROUP_MAX_EPS_IQ3_XXS 1e-8f  /* the same for IQ3_XXS                               */

/* ---------------------------------------------------------------------------------------- */
/* Helpers (the reference's, as in ggml_quant.c)                                             */
/* ---------------------------------------------------------------------------------------- */


static inline int iclamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Store f as f16 at p; an overflow to +-inf is TM_E_RANGE (the reference would store inf). */
static tm_status put_f16(uint8_t *p, float f, const char *field, int64_t blk, tm_err *err) {
    uint16_t h = tm_f32_to_f16(f);
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) == 0)
        return tm__err_set(err, TM_E_RANGE, -1, "block %lld: %s = %g does not fit float16 (largest 65504)",
                           (long long)blk, field, (double)f);
    tm__st16(p, h);
    return TM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* IQ4_NL, IQ4_XS (quantize_row_iq4_nl_impl)                                                 */
/* ---------------------------------------------------------------------------------------- */

/* kvalues_iq4nl as float32 (exact): the reference compares and multiplies the int8 values
** converted to float, so these give the same results. */
static const float kvf[16] = {-127.f, -104.f, -83.f, -65.f, -49.f, -35.f, -22.f, -10.f,
                              1.f,    13.f,   25.f,  38.f,  53.f,  69.f,  89.f,  113.f};

/* best_index_int8 on kvalues_iq4nl: the nearest grid value's index (the upper one when
** x - v[lo] and v[lo+1] - x round to the same float); x below (above) the grid gives 0 (15); NaN
** gives 15. The reference bisects to the bracket v[lo] <= x < v[lo+1]; the same bracket is
** found here by a branch-free search of 4 steps, then the same comparison picks lo or lo+1. */
static inline int iq4_index(float x) {
    if (x <= kvf[0]) return 0;
    if (x >= kvf[15] || x != x) return 15;
    int lo = 0;
    lo += (!(x < kvf[lo + 8])) * 8;
    lo += (!(x < kvf[lo + 4])) * 4;
    lo += (!(x < kvf[lo + 2])) * 2;
    lo += !(x < kvf[lo + 1]);
    return x - kvf[lo] < kvf[lo + 1] - x ? lo : lo + 1;
}

/* The scale of one sub-block of 32 values xb with weights w (quantize_row_iq4_nl_impl's inner
** search, ntry 7): a first scale -max/-127 (max the signed value of largest magnitude), the
** weighted least-squares d = sum w q x / sum w q^2 over the nearest grid values, then the 15
** trial inverse scales (t - 127)/max, t = -7..7, each kept when sumqx^2 > best sumq2. The
** reference's codes of the first pass are overwritten by every caller, so none are returned.
** An all-zero sub-block (|x| < 1e-15) gives 0. */
static float iq4_subblock_scale(const float *xb, const float *w) {
    const float *v = kvf;
    const int ntry = 7;
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        float ax = fabsf(xb[j]);
        if (ax > amax) {
            amax = ax;
            max = xb[j];
        }
    }
    if (amax < GROUP_MAX_EPS) return 0.0f;
    float d = -max / v[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        float q = v[iq4_index(id * xb[j])];
        sumqx += w[j] * q * xb[j];
        sumq2 += w[j] * q * q;
    }
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; ++itry) {
        id = (itry + v[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            float q = v[iq4_index(id * xb[j])];
            sumqx += w[j] * q * xb[j];
            sumq2 += w[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* The weights of sub-block xb (32 values) of a super-block: with an importance matrix qw,
** qw[j] * sqrt(sigma2 + x[j]^2); without, x[j]^2 (the reference's rule for every IQ type). */
static void subblock_weights(const float *xb, const float *qw, float sigma2, int n, float *w) {
    if (qw)
        for (int j = 0; j < n; j++) w[j] = qw[j] * sqrtf(sigma2 + xb[j] * xb[j]);
    else
        for (int j = 0; j < n; j++) w[j] = xb[j] * xb[j];
}

/* One IQ4_NL block (32 values at x, importance weights qw or NULL) into y (18 bytes). */
static tm_status iq4_nl_block(const float *x, const float *qw, uint8_t *y, int64_t blk, tm_err *err) {
    float w[32];
    float sigma2 = 0;
    for (int j = 0; j < 32; j++) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / 32;
    subblock_weights(x, qw, sigma2, 32, w);
    float d = iq4_subblock_scale(x, w);
    /* where all weights vanish (sumq2 = 0) d is NaN, as the reference stores it (and
    ** llama-quantize then refuses the row: tm__gq_validate) */
    tm_status st = put_f16(y, d, "d", blk, err);
    if (st) return st;
    float id = d ? 1 / d : 0;
    if (isinf(id)) id = 0; /* as ggml_quant.c's IQ4_NL: a subnormal d gives the zero codes */
    uint8_t L[32];
    for (int j = 0; j < 32; j++) L[j] = (uint8_t)iq4_index(id * x[j]);
    for (int j = 0; j < 16; j++) y[2 + j] = (uint8_t)(L[j] | (L[16 + j] << 4));
    return TM_OK;
}

/* One IQ4_XS super-block (256 values at x, weights qw or NULL) into y (136 bytes): the 8
** sub-block scales as IQ4_NL's, then d = -max_scale/32 (max_scale the signed scale of largest
** magnitude), 6-bit ls = clamp(nearest_int(scale/d), -32, 31) + 32, and the codes re-derived
** from d (ls - 32). Without any non-zero sub-block d is -0 (stored 0x8000) and every ls 32. */
static tm_status iq4_xs_block(const float *x, const float *qw, uint8_t *y, int64_t blk, tm_err *err) {
    float scales[8], w[32];
    float sigma2 = 0;
    for (int j = 0; j < QK_K; j++) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / QK_K;
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < 8; ib++) {
        subblock_weights(x + 32 * ib, qw ? qw + 32 * ib : NULL, sigma2, 32, w);
        scales[ib] = iq4_subblock_scale(x + 32 * ib, w);
        float ad = fabsf(scales[ib]);
        if (ad > amax_scale) {
            amax_scale = ad;
            max_scale = scales[ib];
        }
    }
    const float d = -max_scale / 32;
    tm_status st = put_f16(y, d, "d", blk, err);
    if (st) return st;
    const float id = d ? 1 / d : 0.f;
    uint16_t sh = 0;
    uint8_t *sl = y + 4, *qs = y + 8;
    memset(sl, 0, 4);
    for (int ib = 0; ib < 8; ib++) {
        int l = iclamp(nearest_int(id * scales[ib]), -32, 31);
        float dl = d * l;
        float idl = dl ? 1 / dl : 0.f;
        uint8_t L[32];
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)iq4_index(idl * x[32 * ib + j]);
        for (int j = 0; j < 16; j++) qs[16 * ib + j] = (uint8_t)(L[j] | (L[16 + j] << 4));
        l += 32;
        sl[ib / 2] |= (uint8_t)((l & 0xf) << 4 * (ib % 2));
        sh |= (uint16_t)((l >> 4) << 2 * ib);
    }
    tm__st16(y + 2, sh);
    return TM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* IQ3 grids: the search tables (iq3xs_init_impl's rule)                                     */
/* ---------------------------------------------------------------------------------------- */

/* The tables (tm__iq3_tables, ggml_quant_iq.h). */
typedef tm__iq3_tables iq3_tables;

static iq3_tables g_iq3[2]; /* [0]: IQ3_XXS (256 rows), [1]: IQ3_S (512 rows) */
static int g_iq3_ok;
static pthread_once_t g_iq3_once = PTHREAD_ONCE_INIT;

/* The neighbour list of off-grid key u into out; returns its length (without the count
** entry). */
static int iq3_neighbours(const iq3_tables *t, int u, int nwant, uint16_t *out) {
    int pos[4], d2[512];
    for (int k = 0; k < 4; k++) pos[k] = 2 * ((u >> 3 * k) & 7) + 1;
    for (int j = 0; j < t->rows; j++) {
        int s = 0;
        for (int k = 0; k < 4; k++) s += (t->grid[j][k] - pos[k]) * (t->grid[j][k] - pos[k]);
        d2[j] = s;
    }
    int n = 0, level = -1;
    for (int h = 0; h < nwant; h++) {
        int next = INT32_MAX; /* the smallest distance above `level` */
        for (int j = 0; j < t->rows; j++)
            if (d2[j] > level && d2[j] < next) next = d2[j];
        if (next == INT32_MAX) break;
        level = next;
        for (int j = 0; j < t->rows; j++)
            if (d2[j] == level) out[n++] = (uint16_t)j;
    }
    return n;
}

/* Build t from the unpacked grid src (rows x 4 stored values); 0 if the grid is not a grid of
** 8 levels with distinct keys in ascending order, or on allocation failure. */
static int iq3_build(iq3_tables *t, const uint8_t (*src)[4], int rows, int nwant) {
    int levels[8], nl = 0;
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < 4; k++) {
            int v = src[r][k], seen = 0;
            for (int i = 0; i < nl; i++) seen |= levels[i] == v;
            if (!seen) {
                if (nl == 8) return 0;
                levels[nl++] = v;
            }
        }
    if (nl != 8) return 0;
    for (int i = 1; i < 8; i++) /* insertion sort: ascending levels */
        for (int j = i; j > 0 && levels[j - 1] > levels[j]; j--) {
            int s = levels[j];
            levels[j] = levels[j - 1];
            levels[j - 1] = s;
        }
    t->rows = rows;
    for (int u = 0; u < 4096; u++) t->map[u] = -1;
    int prev = -1;
    for (int r = 0; r < rows; r++) {
        int u = 0;
        for (int k = 0; k < 4; k++) {
            int l = 0;
            while (levels[l] != src[r][k]) l++;
            t->grid[r][k] = (int8_t)(2 * l + 1);
            t->gridf[r][k] = (float)(2 * l + 1);
            u |= l << 3 * k;
        }
        if (u <= prev) return 0;
        prev = u;
        t->map[u] = r;
    }
    /* one pass into room for every list at its longest, then trimmed */
    t->nb = malloc((size_t)(4096 - rows) * (size_t)(rows + 1) * sizeof *t->nb);
    if (!t->nb) return 0;
    size_t at = 0;
    for (int u = 0; u < 4096; u++) {
        if (t->map[u] >= 0) continue;
        int n = iq3_neighbours(t, u, nwant, t->nb + at + 1);
        t->nb[at] = (uint16_t)n;
        t->map[u] = -(int32_t)(at + 1);
        at += 1 + (size_t)n;
    }
    t->nb[at] = 0; /* the spare entry (ggml_quant_iq.h) */
    uint16_t *trimmed = realloc(t->nb, (at + 1) * sizeof *t->nb);
    if (trimmed) t->nb = trimmed;
    return 1;
}

static void iq3_init_once(void) {
    g_iq3_ok = tm__ggml_iq_init() && iq3_build(&g_iq3[0], (const uint8_t (*)[4])tm__iq3xxs_grid, 256, 2) &&
               iq3_build(&g_iq3[1], (const uint8_t (*)[4])tm__iq3s_grid, 512, 3);
}

/* The search tables of the 256-row (IQ3_XXS) or 512-row (IQ3_S) grid, built on first use
** (thread-safe); NULL if the packed grids are damaged or memory ran out. */
static const iq3_tables *iq3_tables_get(int rows) {
    pthread_once(&g_iq3_once, iq3_init_once);
    return g_iq3_ok ? &g_iq3[rows == 256 ? 0 : 1] : NULL;
}

/* Test access (tests/unit/test_gguf_iq.c): the key of grid row r, the map entry of key u and
** the neighbour list it points to. */
int tm__gq_iq3_lookup(int rows, int u, const uint16_t **neighbours) {
    const iq3_tables *t = iq3_tables_get(rows);
    if (!t || u < 0 || u >= 4096) return INT32_MIN;
    int m = t->map[u];
    if (neighbours) *neighbours = m < 0 ? t->nb - m - 1 : NULL;
    return m;
}

/* iq3_find_best_neighbour: among the neighbour rows of an off-grid key, the one of least
** sum w (scale g - x)^2 (first on a tie); its levels into L[4]; returns the row. */
static int iq3_best_neighbour(const iq3_tables *t, const uint16_t *nb, const float *xval, const float *w,
                              float scale, int8_t *L) {
    float best_d2 = FLT_MAX;
    int best = nb[1];
    for (int j = 1; j <= nb[0]; j++) {
        const float *pg = t->gridf[nb[j]];
        float d2 = 0;
        for (int i = 0; i < 4; i++) {
            float q = pg[i];
            float diff = scale * q - xval[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            best = nb[j];
        }
    }
    for (int i = 0; i < 4; i++) L[i] = (int8_t)((t->grid[best][i] - 1) / 2);
    return best;
}

/* Levels of 4 values at inverse scale id (clamp(nearest_int((id x - 1) / 2), 0, 7)) into L, and
** their key. */
static int iq3_levels(const float *xval, float id, int8_t *L) {
    int u = 0;
    for (int i = 0; i < 4; i++) {
        L[i] = (int8_t)iclamp(nearest_int(0.5f * (id * xval[i] - 1)), 0, 7);
        u |= L[i] << 3 * i;
    }
    return u;
}

/* Quantize 4 values to a grid row at inverse scale id: the row of their key if it is on the
** grid (*on = 1), else the best neighbour at `scale` (*on = 0); levels into L. */
static int iq3_group(const iq3_tables *t, const float *xval, const float *waux, float id, float scale,
                     int8_t *L, bool *on) {
    int u = iq3_levels(xval, id, L);
    int r = t->map[u];
    *on = r >= 0;
    if (r < 0) r = iq3_best_neighbour(t, t->nb - r - 1, xval, waux, scale, L);
    return r;
}

/* sum w x q and sum w q^2 with q = 2L + 1, in index order. */
static void iq3_sums(int n, const float *w, const float *xval, const int8_t *L, float *sumqx, float *sumq2) {
    float a = 0, b = 0;
    for (int i = 0; i < n; i++) {
        float q = 2 * L[i] + 1;
        a += w[i] * xval[i] * q;
        b += w[i] * q * q;
    }
    *sumqx = a;
    *sumq2 = b;
}

/* tm__iq3_trials_fn (ggml_quant_iq.h), the specification: one trial after the other. */
static void iq3_trials_ref(const iq3_tables *t, const float *xval, const float *weight, const float *waux,
                           float max, int nis, float *scale, int8_t *L, bool *on) {
    const int kMaxQ = 8;
    int8_t Laux[32];
    bool on_aux[8];
    float best = 0;
    for (int is = -nis; is <= nis; ++is) {
        float id = (2 * kMaxQ - 1 + is * 0.2f) / max;
        float this_scale = 1 / id;
        for (int k = 0; k < 8; k++)
            iq3_group(t, xval + 4 * k, waux + 4 * k, id, this_scale, Laux + 4 * k, &on_aux[k]);
        float sumqx, sumq2;
        iq3_sums(32, weight, xval, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            *scale = sumqx / sumq2;
            best = *scale * sumqx;
            memcpy(L, Laux, 32);
            memcpy(on, on_aux, sizeof on_aux);
        }
    }
}

/* The reference keeps L and the on-grid flags of IQ3_XXS in locals of the row function that a
** sub-block whose scale search never improves (all weights zero, or sums underflowing) reads
** without writing (uninitialised on a row's first sub-block). We carry them over from the
** previous sub-block (run_iq3 says when they start again from zero codes, all off the grid). */
typedef struct iq3_carry {
    int8_t L[32];
    bool   on[8];
} iq3_carry;

/* One IQ3_XXS super-block (256 values at x, weights qw or NULL) into y (98 bytes)
** (quantize_row_iq3_xxs_impl, grid 256): per sub-block of 32, the signs taken out (an odd
** count of negatives in a group of 8 flips the value of least w x^2 back, so 7 bits hold the
** signs), then 31 trial inverse scales (15 + 0.2 is)/max, is = -15..15, each quantizing the 8
** groups of 4 to the grid (a neighbour where the key is off it) and kept when the weighted
** least-squares fit improves; the groups off the grid are then re-quantized at the fitted scale
** and the scale refitted. d = max_scale/31 (stored times 1.0125), 4-bit sub-block scales
** clamp(nearest_int((s/d - 1)/2), 0, 15). */
static tm_status iq3_xxs_block(const iq3_tables *t, tm__iq3_trials_fn trials, const float *x, const float *qw, uint8_t *y, iq3_carry *c,
                               int64_t blk, tm_err *err) {
    const int kMaxQ = 8;
    float scales[8], weight[32], xval[32], waux[32];
    int8_t *L = c->L;
    bool *on = c->on;
    uint8_t q3[64], block_signs[4];
    uint32_t ss[8];
    memset(q3, 0, sizeof q3);
    memset(ss, 0, sizeof ss);
    float max_scale = 0;
    float sumx2 = 0;
    for (int i = 0; i < QK_K; i++) sumx2 += x[i] * x[i];
    const float sigma2 = 2 * sumx2 / QK_K;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        subblock_weights(xb, qw ? qw + 32 * ib : NULL, sigma2, 32, weight);
        for (int i = 0; i < 32; i++) waux[i] = sqrtf(weight[i]);
        for (int k = 0; k < 4; k++) {
            int nflip = 0;
            uint8_t s = 0;
            for (int i = 0; i < 8; i++) {
                if (xb[8 * k + i] >= 0) {
                    xval[8 * k + i] = xb[8 * k + i];
                } else {
                    xval[8 * k + i] = -xb[8 * k + i];
                    ++nflip;
                    s |= (uint8_t)(1 << i);
                }
            }
            if (nflip % 2) {
                int imin = 0;
                float min = weight[8 * k] * xb[8 * k] * xb[8 * k];
                for (int i = 1; i < 8; i++) {
                    float ax = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                    if (ax < min) {
                        min = ax;
                        imin = i;
                    }
                }
                xval[8 * k + imin] = -xval[8 * k + imin];
                s ^= (uint8_t)(1 << imin);
            }
            block_signs[k] = s & 127;
        }
        float max = xval[0];
        for (int i = 1; i < 32; i++) max = max > xval[i] ? max : xval[i];
        if (max < GROUP_MAX_EPS_IQ3_XXS) {
            scales[ib] = 0;
            memset(L, 0, 32);
            continue;
        }
        float scale = max / (2 * kMaxQ - 1);
        trials(t, xval, weight, waux, max, 15, &scale, L, on);
        int n_off = 0;
        for (int k = 0; k < 8; k++) n_off += !on[k];
        if (n_off > 0 && scale > 0) {
            float id = 1 / scale;
            for (int k = 0; k < 8; k++) {
                if (on[k]) continue;
                bool dummy;
                int r = iq3_group(t, xval + 4 * k, waux + 4 * k, id, scale, L + 4 * k, &dummy);
                for (int i = 0; i < 4; i++) L[4 * k + i] = (int8_t)((t->grid[r][i] - 1) / 2);
            }
            float sumqx, sumq2;
            iq3_sums(32, weight, xval, L, &sumqx, &sumq2);
            if (sumq2 > 0) scale = sumqx / sumq2;
        }
        if (scale < 0) { /* never with the search above; the reference's guard */
            scale = -scale;
            for (int k = 0; k < 4; k++) block_signs[k] = (uint8_t)(~block_signs[k] & 127);
        }
        for (int k = 0; k < 8; k++) {
            int u = 0;
            for (int i = 0; i < 4; i++) u |= L[4 * k + i] << 3 * i;
            int r = t->map[u];
            if (r < 0) /* the reference aborts ("found point not on grid"); not reachable */
                return tm__err_set(err, TM_E_INTERNAL, -1, "block %lld: IQ3_XXS levels off the grid", (long long)blk);
            q3[8 * ib + k] = (uint8_t)r;
        }
        ss[ib] = (uint32_t)block_signs[0] | (uint32_t)block_signs[1] << 7 | (uint32_t)block_signs[2] << 14 |
                 (uint32_t)block_signs[3] << 21;
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    memset(y, 0, 98);
    if (!max_scale) return TM_OK;
    const float d = max_scale / 31;
    tm_status st = put_f16(y, d * 1.0125f, "d", blk, err);
    if (st) return st;
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib++) {
        int l = iclamp(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 15);
        ss[ib] |= (uint32_t)l << 28;
    }
    memcpy(y + 2, q3, 64);
    for (int ib = 0; ib < 8; ib++) tm__st32(y + 66 + 4 * ib, ss[ib]);
    return TM_OK;
}

/* One IQ3_S super-block (256 values at x, weights qw or NULL) into y (110 bytes)
** (quantize_row_iq3_s_impl, grid 512, sub-blocks of 32): plain sign bits, 19 trial inverse
** scales (15 + 0.2 is)/max, is = -9..9, then, if any group is off the grid, every group
** re-quantized at the fitted scale and the scale refitted; d = max_scale/31 (stored times 1.033),
** 4-bit scales as IQ3_XXS's. As in the reference, an all-zero sub-block writes no qs/signs and
** the following sub-blocks' qs and signs move up into its place (qh and scales stay by index). */
static tm_status iq3_s_block(const iq3_tables *t, tm__iq3_trials_fn trials, const float *x, const float *qw, uint8_t *y, int64_t blk,
                             tm_err *err) {
    const int kMaxQ = 8;
    float scales[8], weight[32], xval[32], waux[32];
    int8_t L[32];
    bool on[8];
    uint8_t block_signs[4];
    memset(y, 0, 110);
    memset(L, 0, sizeof L);
    uint8_t *qs = y + 2, *qh = y + 66, *signs = y + 74, *sc = y + 106;
    float max_scale = 0;
    float sumx2 = 0;
    for (int i = 0; i < QK_K; i++) sumx2 += x[i] * x[i];
    const float sigma2 = 2 * sumx2 / QK_K;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        subblock_weights(xb, qw ? qw + 32 * ib : NULL, sigma2, 32, weight);
        for (int i = 0; i < 32; i++) waux[i] = sqrtf(weight[i]);
        for (int k = 0; k < 4; k++) {
            uint8_t s = 0;
            for (int i = 0; i < 8; i++) {
                if (xb[8 * k + i] >= 0) {
                    xval[8 * k + i] = xb[8 * k + i];
                } else {
                    xval[8 * k + i] = -xb[8 * k + i];
                    s |= (uint8_t)(1 << i);
                }
            }
            block_signs[k] = s;
        }
        float max = xval[0];
        for (int i = 1; i < 32; i++) max = max > xval[i] ? max : xval[i];
        if (!max) {
            scales[ib] = 0;
            continue;
        }
        float scale = max / (2 * kMaxQ - 1);
        for (int k = 0; k < 8; k++) on[k] = false;
        trials(t, xval, weight, waux, max, 9, &scale, L, on);
        int n_off = 0;
        for (int k = 0; k < 8; k++) n_off += !on[k];
        if (n_off > 0 && scale > 0) {
            float id = 1 / scale;
            for (int k = 0; k < 8; k++) { /* every group, on the grid or not (as the reference) */
                bool dummy;
                int r = iq3_group(t, xval + 4 * k, waux + 4 * k, id, scale, L + 4 * k, &dummy);
                for (int i = 0; i < 4; i++) L[4 * k + i] = (int8_t)((t->grid[r][i] - 1) / 2);
            }
            float sumqx, sumq2;
            iq3_sums(32, weight, xval, L, &sumqx, &sumq2);
            if (sumq2 > 0) scale = sumqx / sumq2;
        }
        if (scale < 0) { /* the reference's guard, not reachable */
            scale = -scale;
            for (int k = 0; k < 4; k++) block_signs[k] = (uint8_t)~block_signs[k];
        }
        for (int k = 0; k < 8; k++) {
            int u = 0;
            for (int i = 0; i < 4; i++) u |= L[4 * k + i] << 3 * i;
            int r = t->map[u];
            if (r < 0)
                return tm__err_set(err, TM_E_INTERNAL, -1, "block %lld: IQ3_S levels off the grid", (long long)blk);
            qs[k] = (uint8_t)(r & 255);
            qh[(ib * 8 + k) / 8] |= (uint8_t)((r >> 8) << ((ib * 8 + k) % 8));
        }
        qs += 8;
        memcpy(signs, block_signs, 4);
        signs += 4;
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) return TM_OK;
    const float d = max_scale / 31;
    tm_status st = put_f16(y, d * 1.033f, "d", blk, err);
    if (st) return st;
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib += 2) {
        int l1 = iclamp(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 15);
        int l2 = iclamp(nearest_int(0.5f * (id * scales[ib + 1] - 1)), 0, 15);
        sc[ib / 2] = (uint8_t)(l1 | (l2 << 4));
    }
    return TM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* TQ1_0, TQ2_0 (quantize_row_tq1_0_ref / tq2_0_ref; they take no importance matrix)          */
/* ---------------------------------------------------------------------------------------- */

/* d = max |x|; each value's trit lroundf(x / d) (half away from zero) in -1..1. */
static float tq_scale(const float *x) {
    float amax = 0.0f;
    for (int j = 0; j < QK_K; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    return amax;
}

static inline int trit(float v, float id) { return (int)lroundf(v * id) + 1; }

/* n trits (x[0], x[stride], ...) as one byte: base-3 digits most significant first, padded
** to 5 digits, then scaled to 0..255 (ceil(q 256 / 243)). */
static uint8_t tq1_pack(const float *x, int stride, int n, float id) {
    unsigned q = 0;
    for (int k = 0; k < n; k++) q = q * 3 + (unsigned)trit(x[k * stride], id);
    for (int k = n; k < 5; k++) q *= 3;
    return (uint8_t)((q * 256 + (243 - 1)) / 243);
}

/* TQ1_0: 160 values as 32 bytes of 5 trits (byte m: values m, m+32, ..., m+128), 80 as 16
** bytes (m, m+16, ...), the last 16 as 4 bytes of 4 trits (byte j: j, j+4, j+8, j+12). */
static tm_status tq1_0_block(const float *x, const float *qw, uint8_t *y, int64_t blk, tm_err *err) {
    (void)qw;
    const float d = tq_scale(x);
    const float id = d ? 1.0f / d : 0.0f;
    for (int m = 0; m < 32; m++) y[m] = tq1_pack(x + m, 32, 5, id);
    for (int m = 0; m < 16; m++) y[32 + m] = tq1_pack(x + 160 + m, 16, 5, id);
    for (int j = 0; j < 4; j++) y[48 + j] = tq1_pack(x + 240 + j, 4, 4, id);
    return put_f16(y + 52, d, "d", blk, err);
}

/* TQ2_0: byte 32 c + m holds the codes of values 128 c + m + 32 n at bits 2n (n = 0..3). */
static tm_status tq2_0_block(const float *x, const float *qw, uint8_t *y, int64_t blk, tm_err *err) {
    (void)qw;
    const float d = tq_scale(x);
    const float id = d ? 1.0f / d : 0.0f;
    for (int c = 0; c < 2; c++)
        for (int m = 0; m < 32; m++) {
            unsigned q = 0;
            for (int n = 0; n < 4; n++) q |= ((unsigned)trit(x[128 * c + m + 32 * n], id) & 3) << 2 * n;
            y[32 * c + m] = (uint8_t)q;
        }
    return put_f16(y + 64, d, "d", blk, err);
}

/* ---------------------------------------------------------------------------------------- */
/* Rows                                                                                      */
/* ---------------------------------------------------------------------------------------- */

typedef tm_status (*iq_block_fn)(const float *x, const float *qw, uint8_t *y, int64_t blk, tm_err *err);

/* Blocks b0 .. nb-1 (x the first block's row start, y its first block); with an importance
** matrix x is one row and block b's weights start at imatrix + b * block (ggml_traits.h). */
static tm_status run_blocks(iq_block_fn fn, const tm_ggml_type_info *t, const float *x, const float *imatrix,
                            int64_t b0, int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    const int64_t block = t->block_size;
    for (int64_t b = b0; b < nb; b++) {
        tm_status st = fn(x + b * block, imatrix ? imatrix + b * block : NULL, y + (size_t)b * t->type_size, b, err);
        if (st) {
            if (bad_block) *bad_block = b;
            return st;
        }
    }
    return TM_OK;
}

/* IQ3 rows: the grid tables, and IQ3_XXS's carried state (iq3_carry): with an importance
** matrix the call is one row (ggml_traits.h), carried over within it as in the reference's row
** function and reset at its start; without one the call may hold several rows whose bounds are
** not known here, so the state is reset at every super-block (the bytes then never depend on
** how rows are grouped into calls). */
static tm_status run_iq3(int rows, tm__iq3_trials_fn trials, const tm_ggml_type_info *t, const float *x, const float *imatrix, int64_t b0,
                         int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    const iq3_tables *g = iq3_tables_get(rows);
    if (!g) return tm__err_set(err, TM_E_INTERNAL, -1, "the IQ3 grid tables are unusable");
    iq3_carry c;
    memset(&c, 0, sizeof c);
    for (int64_t b = b0; b < nb; b++) {
        if (!imatrix) memset(&c, 0, sizeof c);
        const float *w = imatrix ? imatrix + b * QK_K : NULL;
        uint8_t *yb = y + (size_t)b * t->type_size;
        tm_status st = rows == 256 ? iq3_xxs_block(g, trials, x + b * QK_K, w, yb, &c, b, err)
                                   : iq3_s_block(g, trials, x + b * QK_K, w, yb, b, err);
        if (st) {
            if (bad_block) *bad_block = b;
            return st;
        }
    }
    return TM_OK;
}

tm_status tm__gq_rows_iq4_nl(const tm_ggml_type_info *t, const float *x, const float *imatrix, int64_t b0,
                             int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    return run_blocks(iq4_nl_block, t, x, imatrix, b0, nb, y, bad_block, err);
}

tm_status tm__gq_rows_iq4_xs(const tm_ggml_type_info *t, const float *x, const float *imatrix, int64_t b0,
                             int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    return run_blocks(iq4_xs_block, t, x, imatrix, b0, nb, y, bad_block, err);
}

tm_status tm__gq_rows_iq3_xxs(const tm_ggml_type_info *t, const float *x, const float *imatrix, int64_t b0,
                              int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    return run_iq3(256, iq3_trials_ref, t, x, imatrix, b0, nb, y, bad_block, err);
}

tm_status tm__gq_rows_iq3_s(const tm_ggml_type_info *t, const float *x, const float *imatrix, int64_t b0,
                            int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    return run_iq3(512, iq3_trials_ref, t, x, imatrix, b0, nb, y, bad_block, err);
}

tm_status tm__gq_rows_tq1_0(const tm_ggml_type_info *t, const float *x, const float *imatrix, int64_t b0,
                            int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    (void)imatrix; /* quantize_tq1_0 ignores its quant_weights */
    return run_blocks(tq1_0_block, t, x, NULL, b0, nb, y, bad_block, err);
}

tm_status tm__gq_rows_tq2_0(const tm_ggml_type_info *t, const float *x, const float *imatrix, int64_t b0,
                            int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    (void)imatrix;
    return run_blocks(tq2_0_block, t, x, NULL, b0, nb, y, bad_block, err);
}

#ifdef TM__GQ_HAVE_AVX2
/* IQ3_XXS / IQ3_S with the scale trials in AVX2 lanes (tm__iq3_trials_avx2); the rest of each
** block as above. The same bytes as the two functions above. */
tm_status tm__gq_rows_iq3_xxs_avx2(const tm_ggml_type_info *t, const float *x, const float *imatrix, int64_t b0,
                                   int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    return run_iq3(256, tm__iq3_trials_avx2, t, x, imatrix, b0, nb, y, bad_block, err);
}

tm_status tm__gq_rows_iq3_s_avx2(const tm_ggml_type_info *t, const float *x, const float *imatrix, int64_t b0,
                                 int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err) {
    return run_iq3(512, tm__iq3_trials_avx2, t, x, imatrix, b0, nb, y, bad_block, err);
}
#endif
