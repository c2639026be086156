/* ggml_dequant.c: dequantization of every ggml block type, bit-exact with ggml's
** dequantize_row_* (ggml/src/ggml-quants.c at ggml-org/llama.cpp@c392e509) and gguf-py's
** quants.dequantize. The block layouts are facts of the format (ggml/src/ggml-common.h); the
** arithmetic is ours, written from the formulas in ../shared/vectors/gguf_dequant/<type>/
** case.json "layout", in the same order of float32 operations (every product an f16 times
** small integers, so exact; only the final subtraction/addition of the has-min types rounds).
** Build with -ffp-contract=off (CMakeLists.txt does) so no product is fused into an add.
**
** Each decoder fills y[0..block) and, when dt is non-NULL, the per-value code and the
** per-sub-block scale / zero point / min the Scalar Inspector shows (docs/formats.md "GGUF"). */
#include "../core/core.h"
#include "ggml_traits.h"

#define QK TM_GGML_QK_K

static float h2f(const uint8_t *p) { return tm_f16_to_f32(tm__ld16(p)); }

/* Sub-block fields (detail only). */
static void sub_set(blk_detail *dt, int s, double scale, double zp, double min, int64_t sc,
                    int64_t m) {
    dt->scale[s] = scale; dt->zp[s] = zp; dt->min[s] = min;
    dt->sub_scale[s] = sc; dt->sub_min[s] = m;
}

/* ---- 32-value blocks -------------------------------------------------------------------- */

void tm__ggml_dq_q4_0(const uint8_t *b, float *y, blk_detail *dt) {
    const float d = h2f(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        const int x0 = (qs[j] & 0x0F) - 8, x1 = (qs[j] >> 4) - 8;
        y[j] = (float)x0 * d;
        y[j + 16] = (float)x1 * d;
        if (dt) {
            dt->code[j] = qs[j] & 0x0F; dt->code[j + 16] = qs[j] >> 4;
            dt->stored[j] = dt->stored[j + 16] = qs[j];
        }
    }
    if (dt) { dt->stored_bits = 8; dt->d = d; sub_set(dt, 0, d, 8, 0, 1, 0); }
}

void tm__ggml_dq_q4_1(const uint8_t *b, float *y, blk_detail *dt) {
    const float d = h2f(b), m = h2f(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        const int x0 = qs[j] & 0x0F, x1 = qs[j] >> 4;
        y[j] = (float)x0 * d + m;
        y[j + 16] = (float)x1 * d + m;
        if (dt) {
            dt->code[j] = x0; dt->code[j + 16] = x1;
            dt->stored[j] = dt->stored[j + 16] = qs[j];
        }
    }
    if (dt) { dt->stored_bits = 8; dt->d = d; dt->dmin = m; sub_set(dt, 0, d, 0, -(double)m, 1, 0); }
}

static void dq_q5(const uint8_t *b, float *y, blk_detail *dt, int has_min) {
    const float d = h2f(b), m = has_min ? h2f(b + 2) : 0.0f;
    const uint8_t *p = b + (has_min ? 4 : 2);
    const uint32_t qh = tm__ld32(p);
    const uint8_t *qs = p + 4;
    for (int j = 0; j < 16; j++) {
        const int h0 = (int)((qh >> j) << 4) & 0x10, h1 = (int)(qh >> (j + 12)) & 0x10;
        const int x0 = (qs[j] & 0x0F) | h0, x1 = (qs[j] >> 4) | h1;
        if (has_min) {
            y[j] = (float)x0 * d + m;
            y[j + 16] = (float)x1 * d + m;
        } else {
            y[j] = (float)(x0 - 16) * d;
            y[j + 16] = (float)(x1 - 16) * d;
        }
        if (dt) {
            dt->code[j] = x0; dt->code[j + 16] = x1;
            dt->stored[j] = dt->stored[j + 16] = qs[j];
        }
    }
    if (dt) {
        dt->stored_bits = 8; dt->d = d; dt->dmin = m;
        sub_set(dt, 0, d, has_min ? 0 : 16, has_min ? -(double)m : 0, 1, 0);
    }
}
void tm__ggml_dq_q5_0(const uint8_t *b, float *y, blk_detail *dt) { dq_q5(b, y, dt, 0); }
void tm__ggml_dq_q5_1(const uint8_t *b, float *y, blk_detail *dt) { dq_q5(b, y, dt, 1); }

/* Q8_0: f16 d, int8 qs[32]; Q8_1: f16 d, f16 s (= d * sum q, unused here), int8 qs[32]. */
static void dq_q8(const uint8_t *b, float *y, blk_detail *dt, int off) {
    const float d = h2f(b);
    const int8_t *qs = (const int8_t *)(b + off);
    for (int j = 0; j < 32; j++) {
        y[j] = (float)qs[j] * d;
        if (dt) { dt->code[j] = qs[j]; dt->stored[j] = (uint8_t)qs[j]; }
    }
    if (dt) { dt->stored_bits = 8; dt->d = d; sub_set(dt, 0, d, 0, 0, 1, 0); }
}
void tm__ggml_dq_q8_0(const uint8_t *b, float *y, blk_detail *dt) { dq_q8(b, y, dt, 2); }
void tm__ggml_dq_q8_1(const uint8_t *b, float *y, blk_detail *dt) { dq_q8(b, y, dt, 4); }

/* IQ4_NL: f16 d, qs[16] nibbles indexing kvalues_iq4nl. */
void tm__ggml_dq_iq4_nl(const uint8_t *b, float *y, blk_detail *dt) {
    const float d = h2f(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        const int8_t v0 = tm__kvalues_iq4nl[qs[j] & 0x0F], v1 = tm__kvalues_iq4nl[qs[j] >> 4];
        y[j] = d * (float)v0;
        y[j + 16] = d * (float)v1;
        if (dt) {
            dt->code[j] = v0; dt->code[j + 16] = v1;
            dt->stored[j] = dt->stored[j + 16] = qs[j];
        }
    }
    if (dt) { dt->stored_bits = 8; dt->d = d; sub_set(dt, 0, d, 0, 0, 1, 0); }
}

/* ---- K-quants (256-value super-blocks) --------------------------------------------------- */

void tm__ggml_dq_q2_k(const uint8_t *b, float *y, blk_detail *dt) {
    const uint8_t *sc = b, *qs = b + 16;
    const float d = h2f(b + 80), dmin = h2f(b + 82);
    int is = 0, i = 0;
    for (int h = 0; h < 2; h++) {
        const uint8_t *q = qs + 32 * h;
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half = 0; half < 2; half++, is++) {
                const float dl = d * (float)(sc[is] & 0x0F), ml = dmin * (float)(sc[is] >> 4);
                if (dt) sub_set(dt, is, dl, 0, ml, sc[is] & 0x0F, sc[is] >> 4);
                for (int l = 0; l < 16; l++, i++) {
                    const uint8_t byte = q[l + 16 * half];
                    const int v = (byte >> shift) & 3;
                    y[i] = dl * (float)v - ml;
                    if (dt) { dt->code[i] = v; dt->stored[i] = byte; }
                }
            }
        }
    }
    if (dt) { dt->stored_bits = 8; dt->d = d; dt->dmin = dmin; }
}

/* Q3_K 6-bit sub-block scale s (0..15), 0..63 (the decoder subtracts 32). */
static int q3k_scale(const uint8_t *scales, int s) {
    const int lo = s < 8 ? (scales[s % 8] & 0x0F) : (scales[s % 8] >> 4);
    const int hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    return lo | (hi << 4);
}

void tm__ggml_dq_q3_k(const uint8_t *b, float *y, blk_detail *dt) {
    const uint8_t *hm = b, *qs = b + 32, *scales = b + 96;
    const float d = h2f(b + 108);
    int is = 0, i = 0;
    unsigned m = 1;
    for (int h = 0; h < 2; h++) {
        const uint8_t *q = qs + 32 * h;
        for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
            for (int half = 0; half < 2; half++, is++) {
                const int S = q3k_scale(scales, is);
                const float dl = d * (float)(S - 32);
                if (dt) sub_set(dt, is, dl, 4, 0, S - 32, 0);
                for (int l = 0; l < 16; l++, i++) {
                    const int k = l + 16 * half;
                    const int lo = (q[k] >> shift) & 3, hb = (hm[k] & m) ? 1 : 0;
                    y[i] = dl * (float)(lo - (hb ? 0 : 4));
                    if (dt) { dt->code[i] = lo + 4 * hb; dt->stored[i] = q[k]; }
                }
            }
        }
    }
    if (dt) { dt->stored_bits = 8; dt->d = d; }
}

/* Q4_K/Q5_K 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes. */
static void k4_scale_min(const uint8_t *q, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void dq_q45_k(const uint8_t *b, float *y, blk_detail *dt, int five) {
    const float d = h2f(b), dmin = h2f(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + (five ? 48 : 16);
    int i = 0;
    for (int s = 0; s < 8; s++) {
        int sc, m;
        k4_scale_min(scales, s, &sc, &m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        if (dt) sub_set(dt, s, d1, 0, m1, sc, m);
        const uint8_t *q = ql + 32 * (s / 2);
        for (int l = 0; l < 32; l++, i++) {
            int v = (s % 2) ? (q[l] >> 4) : (q[l] & 0x0F);
            if (five && (qh[l] & (1u << s))) v += 16;
            y[i] = d1 * (float)v - m1;
            if (dt) { dt->code[i] = v; dt->stored[i] = q[l]; }
        }
    }
    if (dt) { dt->stored_bits = 8; dt->d = d; dt->dmin = dmin; }
}
void tm__ggml_dq_q4_k(const uint8_t *b, float *y, blk_detail *dt) { dq_q45_k(b, y, dt, 0); }
void tm__ggml_dq_q5_k(const uint8_t *b, float *y, blk_detail *dt) { dq_q45_k(b, y, dt, 1); }

void tm__ggml_dq_q6_k(const uint8_t *b, float *y, blk_detail *dt) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = h2f(b + 208);
    for (int h = 0; h < 2; h++) {
        for (int l = 0; l < 32; l++) {
            const uint8_t *L = ql + 64 * h, H = qh[32 * h + l];
            const int q1 = (L[l] & 0x0F) | (((H >> 0) & 3) << 4);
            const int q2 = (L[l + 32] & 0x0F) | (((H >> 2) & 3) << 4);
            const int q3 = (L[l] >> 4) | (((H >> 4) & 3) << 4);
            const int q4 = (L[l + 32] >> 4) | (((H >> 6) & 3) << 4);
            const int is = 8 * h + l / 16;
            float *yy = y + 128 * h;
            yy[l] = d * (float)sc[is] * (float)(q1 - 32);
            yy[l + 32] = d * (float)sc[is + 2] * (float)(q2 - 32);
            yy[l + 64] = d * (float)sc[is + 4] * (float)(q3 - 32);
            yy[l + 96] = d * (float)sc[is + 6] * (float)(q4 - 32);
            if (dt) {
                const int base = 128 * h + l;
                dt->code[base] = q1; dt->stored[base] = L[l];
                dt->code[base + 32] = q2; dt->stored[base + 32] = L[l + 32];
                dt->code[base + 64] = q3; dt->stored[base + 64] = L[l];
                dt->code[base + 96] = q4; dt->stored[base + 96] = L[l + 32];
            }
        }
    }
    if (dt) {
        dt->stored_bits = 8; dt->d = d;
        for (int s = 0; s < 16; s++) sub_set(dt, s, d * (float)sc[s], 32, 0, sc[s], 0);
    }
}

/* Q8_K: f32 d, int8 qs[256], int16 bsums[16] (sums, unused here). */
void tm__ggml_dq_q8_k(const uint8_t *b, float *y, blk_detail *dt) {
    float d;
    memcpy(&d, b, 4);
    const int8_t *qs = (const int8_t *)(b + 4);
    for (int j = 0; j < QK; j++) {
        y[j] = d * (float)qs[j];
        if (dt) { dt->code[j] = qs[j]; dt->stored[j] = (uint8_t)qs[j]; }
    }
    if (dt) { dt->stored_bits = 8; dt->d = d; sub_set(dt, 0, d, 0, 0, 1, 0); }
}

/* IQ4_XS: f16 d, u16 scales_h, u8 scales_l[4], qs[128]; 8 sub-blocks of 32. */
void tm__ggml_dq_iq4_xs(const uint8_t *b, float *y, blk_detail *dt) {
    const float d = h2f(b);
    const unsigned sh = tm__ld16(b + 2);
    const uint8_t *sl = b + 4, *qs = b + 8;
    for (int g = 0; g < 8; g++) {
        const int ls = ((sl[g / 2] >> (4 * (g % 2))) & 0x0F) | (int)(((sh >> (2 * g)) & 3) << 4);
        const float dl = d * (float)(ls - 32);
        if (dt) sub_set(dt, g, dl, 0, 0, ls - 32, 0);
        const uint8_t *q = qs + 16 * g;
        float *yy = y + 32 * g;
        for (int j = 0; j < 16; j++) {
            const int8_t v0 = tm__kvalues_iq4nl[q[j] & 0x0F], v1 = tm__kvalues_iq4nl[q[j] >> 4];
            yy[j] = dl * (float)v0;
            yy[j + 16] = dl * (float)v1;
            if (dt) {
                dt->code[32 * g + j] = v0; dt->code[32 * g + j + 16] = v1;
                dt->stored[32 * g + j] = dt->stored[32 * g + j + 16] = q[j];
            }
        }
    }
    if (dt) { dt->stored_bits = 8; dt->d = d; }
}

/* ---- ternary ----------------------------------------------------------------------------- */

/* Base-3 digit n of byte b as TQ1_0 packs it: the uint8 product wraps, then (x*3) >> 8. */
static int tq1_digit(uint8_t byte, int n) {
    static const uint8_t pow3[6] = {1, 3, 9, 27, 81, 243};
    const uint8_t q = (uint8_t)(byte * pow3[n]);
    return ((uint16_t)q * 3) >> 8;
}

void tm__ggml_dq_tq1_0(const uint8_t *b, float *y, blk_detail *dt) {
    const uint8_t *qs = b, *qh = b + 48;
    const float d = h2f(b + 52);
    for (int i = 0; i < QK; i++) {
        uint8_t byte;
        int n;
        if (i < 160) { byte = qs[i % 32]; n = i / 32; }
        else if (i < 240) { byte = qs[32 + (i - 160) % 16]; n = (i - 160) / 16; }
        else { byte = qh[(i - 240) % 4]; n = (i - 240) / 4; }
        const int t = tq1_digit(byte, n);
        y[i] = (float)(t - 1) * d;
        if (dt) { dt->code[i] = t; dt->stored[i] = byte; }
    }
    if (dt) { dt->stored_bits = 8; dt->d = d; sub_set(dt, 0, d, 1, 0, 1, 0); }
}

void tm__ggml_dq_tq2_0(const uint8_t *b, float *y, blk_detail *dt) {
    const float d = h2f(b + 64);
    for (int i = 0; i < QK; i++) {
        const int h = i / 128, g = (i % 128) / 32, l = i % 32;
        const uint8_t byte = b[32 * h + l];
        const int q = (byte >> (2 * g)) & 3;
        y[i] = (float)(q - 1) * d;
        if (dt) { dt->code[i] = q; dt->stored[i] = byte; }
    }
    if (dt) { dt->stored_bits = 8; dt->d = d; sub_set(dt, 0, d, 1, 0, 1, 0); }
}
