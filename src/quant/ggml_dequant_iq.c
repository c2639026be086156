/* ggml_dequant_iq.c: block decoders of the IQ grid types (IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S
** IQ1_S IQ1_M), bit-exact with ggml's dequantize_row_iq* (ggml/src/ggml-quants.c at
** ggml-org/llama.cpp@c392e509) and gguf-py. Layouts and formulas as in
** ../shared/vectors/gguf_dequant/<type>/case.json "layout"; the float32 operations in ggml's
** order: db = d * (0.5 + s) * 0.25 (IQ2), d * (0.5 + s) * 0.5 (IQ3_XXS), d * (1 + 2s) (IQ3_S),
** then value = db * grid[j] * (+-1); IQ1: value = dl * (grid[j] + delta), delta = +-1/8.
** Detail for the Scalar Inspector: code = the signed grid value (IQ1: 8*grid +- 1, with
** scale = dl/8, so value = code * scale exactly), stored = the grid index, sub_scale = s. */
#include "ggml_traits.h"

#define QK TM_GGML_QK_K

static float h2f(const uint8_t *p) { return tm_f16_to_f32(tm__ld16(p)); }

static void sub(blk_detail *dt, int k, double scale, int64_t s) {
    dt->scale[k] = scale;
    dt->zp[k] = 0;
    dt->min[k] = 0;
    dt->sub_scale[k] = s;
    dt->sub_min[k] = 0;
}

/* One value of a grid type: db * g * sign, and its detail. */
static void put(float *y, blk_detail *dt, int i, float db, int g, int neg, unsigned idx) {
    y[i] = db * (float)g * (neg ? -1.0f : 1.0f);
    if (dt) {
        dt->code[i] = neg ? -g : g;
        dt->stored[i] = idx;
    }
}

void tm__ggml_dq_iq2_xxs(const uint8_t *b, float *y, blk_detail *dt) {
    const float d = h2f(b);
    for (int g = 0; g < 8; g++) {
        const uint32_t a = tm__ld32(b + 2 + 8 * g), w = tm__ld32(b + 2 + 8 * g + 4);
        const float db = d * (0.5f + (float)(w >> 28)) * 0.25f;
        if (dt) sub(dt, g, db, w >> 28);
        for (int l = 0; l < 4; l++) {
            const unsigned idx = (a >> (8 * l)) & 0xFF;
            const uint8_t signs = tm__ksigns_iq2xs[(w >> (7 * l)) & 127];
            for (int j = 0; j < 8; j++)
                put(y, dt, 32 * g + 8 * l + j, db, tm__iq2xxs_grid[idx][j], (signs >> j) & 1, idx);
        }
    }
    if (dt) { dt->stored_bits = 8; dt->d = d; }
}

/* The two sub-block scales of group g of IQ2_XS / IQ2_S: d * (0.5 + s) / 4 for the 4-bit s of
** each nibble of sc (low nibble first), recorded in dt as sub-blocks 2g and 2g+1. */
static void iq2_half_scales(float d, uint8_t sc, int g, float db[2], blk_detail *dt) {
    for (int h = 0; h < 2; h++) {
        const int s = (sc >> (4 * h)) & 0x0F;
        db[h] = d * (0.5f + (float)s) * 0.25f;
        if (dt) sub(dt, 2 * g + h, db[h], s);
    }
}

void tm__ggml_dq_iq2_xs(const uint8_t *b, float *y, blk_detail *dt) {
    const float d = h2f(b);
    const uint8_t *scales = b + 66;
    for (int g = 0; g < 8; g++) {
        float db[2];
        iq2_half_scales(d, scales[g], g, db, dt);
        for (int l = 0; l < 4; l++) {
            const unsigned q = tm__ld16(b + 2 + 2 * (4 * g + l));
            const unsigned idx = q & 511;
            const uint8_t signs = tm__ksigns_iq2xs[q >> 9];
            for (int j = 0; j < 8; j++)
                put(y, dt, 32 * g + 8 * l + j, db[l / 2], tm__iq2xs_grid[idx][j], (signs >> j) & 1, q);
        }
    }
    if (dt) { dt->stored_bits = 16; dt->d = d; }
}

void tm__ggml_dq_iq2_s(const uint8_t *b, float *y, blk_detail *dt) {
    const float d = h2f(b);
    const uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66, *scales = b + 74;
    for (int g = 0; g < 8; g++) {
        float db[2];
        iq2_half_scales(d, scales[g], g, db, dt);
        for (int l = 0; l < 4; l++) {
            const int k = 4 * g + l;
            const unsigned idx = qs[k] | (((unsigned)qh[g] >> (2 * l)) & 3) << 8;
            for (int j = 0; j < 8; j++)
                put(y, dt, 8 * k + j, db[l / 2], tm__iq2s_grid[idx][j], (signs[k] >> j) & 1, idx);
        }
    }
    if (dt) { dt->stored_bits = 16; dt->d = d; }
}

void tm__ggml_dq_iq3_xxs(const uint8_t *b, float *y, blk_detail *dt) {
    const float d = h2f(b);
    const uint8_t *qs = b + 2;
    for (int g = 0; g < 8; g++) {
        const uint32_t w = tm__ld32(b + 66 + 4 * g);
        const float db = d * (0.5f + (float)(w >> 28)) * 0.5f;
        if (dt) sub(dt, g, db, w >> 28);
        for (int l = 0; l < 4; l++) {
            const uint8_t signs = tm__ksigns_iq2xs[(w >> (7 * l)) & 127];
            const unsigned i1 = qs[8 * g + 2 * l], i2 = qs[8 * g + 2 * l + 1];
            for (int j = 0; j < 4; j++) {
                put(y, dt, 32 * g + 8 * l + j, db, tm__iq3xxs_grid[i1][j], (signs >> j) & 1, i1);
                put(y, dt, 32 * g + 8 * l + j + 4, db, tm__iq3xxs_grid[i2][j], (signs >> (j + 4)) & 1, i2);
            }
        }
    }
    if (dt) { dt->stored_bits = 8; dt->d = d; }
}

void tm__ggml_dq_iq3_s(const uint8_t *b, float *y, blk_detail *dt) {
    const float d = h2f(b);
    const uint8_t *qs = b + 2, *qh = b + 66, *signs = b + 74, *scales = b + 106;
    for (int g = 0; g < 8; g++) {
        const int s = (scales[g / 2] >> (4 * (g % 2))) & 0x0F;
        const float db = d * (float)(1 + 2 * s);
        if (dt) sub(dt, g, db, s);
        for (int i = 32 * g; i < 32 * g + 32; i++) {
            const int t = i / 4;
            const unsigned idx = qs[t] | (((unsigned)qh[g] >> (t % 8)) & 1) << 8;
            put(y, dt, i, db, tm__iq3s_grid[idx][i % 4], (signs[i / 8] >> (i % 8)) & 1, idx);
        }
    }
    if (dt) { dt->stored_bits = 16; dt->d = d; }
}

#define IQ1_DELTA 0.125f /* IQ1S_DELTA = IQ1M_DELTA */

/* value = dl * (grid + delta); detail: code = 8*grid + sign(delta), scale = dl / 8. */
static void put1(float *y, blk_detail *dt, int i, float dl, int g, int neg_delta, unsigned idx) {
    y[i] = dl * ((float)g + (neg_delta ? -IQ1_DELTA : IQ1_DELTA));
    if (dt) {
        dt->code[i] = 8 * g + (neg_delta ? -1 : 1);
        dt->stored[i] = idx;
    }
}

void tm__ggml_dq_iq1_s(const uint8_t *b, float *y, blk_detail *dt) {
    const float d = h2f(b);
    const uint8_t *qs = b + 2;
    for (int g = 0; g < 8; g++) {
        const unsigned qh = tm__ld16(b + 34 + 2 * g);
        const int s = (qh >> 12) & 7;
        const float dl = d * (float)(2 * s + 1);
        const int neg = (qh & 0x8000) != 0;
        if (dt) sub(dt, g, (double)dl / 8, s);
        for (int l = 0; l < 4; l++) {
            const unsigned idx = qs[4 * g + l] | ((qh >> (3 * l)) & 7) << 8;
            for (int j = 0; j < 8; j++) put1(y, dt, 32 * g + 8 * l + j, dl, tm__iq1s_grid[idx][j], neg, idx);
        }
    }
    if (dt) { dt->stored_bits = 16; dt->d = d; }
}

void tm__ggml_dq_iq1_m(const uint8_t *b, float *y, blk_detail *dt) {
    const uint8_t *qs = b, *qh = b + 32;
    unsigned sc[4];
    for (int k = 0; k < 4; k++) sc[k] = tm__ld16(b + 48 + 2 * k);
    const uint16_t dbits = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                      ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
    const float d = tm_f16_to_f32(dbits);
    for (int g = 0; g < 8; g++) {
        for (int l = 0; l < 4; l++) {
            const unsigned q8 = (unsigned)qh[2 * g + l / 2] >> (4 * (l % 2));
            const unsigned idx = qs[4 * g + l] | (q8 & 7) << 8;
            const int s = (int)((sc[g / 2] >> (6 * (g % 2) + 3 * (l / 2))) & 7);
            const float dl = d * (float)(2 * s + 1);
            if (dt && l % 2 == 0) sub(dt, 2 * g + l / 2, (double)dl / 8, s);
            for (int j = 0; j < 8; j++) put1(y, dt, 32 * g + 8 * l + j, dl, tm__iq1s_grid[idx][j], (q8 & 8) != 0, idx);
        }
    }
    if (dt) { dt->stored_bits = 16; dt->d = d; }
}

/* ---- codebook steps (one LSB of a grid type in code units, for qdiff and the heatmap) ------ */

/* (largest - smallest distinct value) / (count - 1) of n unsigned grid bytes */
static double levels_step(const uint8_t *g, size_t n) {
    if (!tm__ggml_iq_init()) return 0;
    unsigned char seen[256] = {0};
    int lo = 256, hi = -1, cnt = 0;
    for (size_t k = 0; k < n; k++) {
        if (seen[g[k]]) continue;
        seen[g[k]] = 1;
        cnt++;
        if (g[k] < lo) lo = g[k];
        if (g[k] > hi) hi = g[k];
    }
    return cnt > 1 ? (double)(hi - lo) / (cnt - 1) : 1.0;
}

double tm__ggml_step_iq2xxs(void) { return levels_step(&tm__iq2xxs_grid[0][0], sizeof tm__iq2xxs_grid); }
double tm__ggml_step_iq2xs(void) { return levels_step(&tm__iq2xs_grid[0][0], sizeof tm__iq2xs_grid); }
double tm__ggml_step_iq2s(void) { return levels_step(&tm__iq2s_grid[0][0], sizeof tm__iq2s_grid); }
double tm__ggml_step_iq3xxs(void) { return levels_step(&tm__iq3xxs_grid[0][0], sizeof tm__iq3xxs_grid); }
double tm__ggml_step_iq3s(void) { return levels_step(&tm__iq3s_grid[0][0], sizeof tm__iq3s_grid); }

/* IQ1: code = 8 * grid + sign(delta) (put1), so one grid level is 8 codes: 8 times the spacing
** of the grid's levels (-1, 0, 1) */
double tm__ggml_step_iq1(void) {
    if (!tm__ggml_iq_init()) return 0;
    uint8_t shifted[2048 * 8];
    for (size_t k = 0; k < sizeof shifted; k++) shifted[k] = (uint8_t)(tm__iq1s_grid[k / 8][k % 8] + 1);
    return 8.0 * levels_step(shifted, sizeof shifted);
}

/* IQ4_NL / IQ4_XS: the 16 kvalues */
double tm__ggml_step_iq4(void) {
    int lo = tm__kvalues_iq4nl[0], hi = tm__kvalues_iq4nl[0];
    for (int k = 1; k < 16; k++) {
        if (tm__kvalues_iq4nl[k] < lo) lo = tm__kvalues_iq4nl[k];
        if (tm__kvalues_iq4nl[k] > hi) hi = tm__kvalues_iq4nl[k];
    }
    return (double)(hi - lo) / 15.0;
}
