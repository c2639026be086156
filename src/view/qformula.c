/* qformula.c: the formula that produced a quantized element's value, for the Scalar Inspector
** (`scalar`, /api/v1/scalar, the page). One branch per way of computing a value:
**   ggml block types (GGUF): the type's own dequantization in ggml's order, with both levels of
**     scale and the min where it has them (ggml/src/ggml-quants.c dequantize_row_* at
**     ggml-org/llama.cpp@c392e509; the decoders in src/quant/ggml_dequant*.c);
**   affine integer codes: (q - zero_point) * scale (ONNX DequantizeLinear, compressed-tensors,
**     GPTQ/AWQ with the group from g_idx, PyTorch per-tensor/per-channel qtensors, whose float64
**     scales are applied in float64 and rounded once);
**   float8 codes: decode(q) * scale.
** The numbers come from tm_qelement (tm_qelement_get) and, for the grid types, from the code and
** container word it reports; nothing is recomputed from the tensor except GPTQ's g_idx entry. */
#include "../core/core.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void term(tm_qformula *o, const char *name, double v) {
    if (o->n_terms >= TM_QFORMULA_TERMS) return;
    snprintf(o->terms[o->n_terms].name, sizeof o->terms[0].name, "%s", name);
    o->terms[o->n_terms].value = v;
    o->n_terms++;
}

/* A number for the numeric expression: %.9g round-trips float32 (and the f16/integer terms are
** exact); negatives in parentheses so "a * (-b)" reads and parses as written. */
static const char *num(char *buf, size_t n, double v) {
    char t[48] = "0";
    for (int p = 9; p <= 17; p++) { /* the shortest of %.9g .. %.17g that reads back exactly */
        snprintf(t, sizeof t, "%.*g", p, v);
        if (strtod(t, NULL) == v) break;
    }
    snprintf(buf, n, v < 0 ? "(%s)" : "%s", t);
    return buf;
}

static void set(char *dst, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, TM_QFORMULA_MAX, fmt, ap);
    va_end(ap);
}

/* The ggml branch: one formula per family of types. */
static tm_status ggml_formula(const tm_qelement *e, int64_t flat, tm_qformula *o, tm_err *err) {
    char a[48], b[48], c[48], d[48], g[48];
    const double D = e->super_scale;
    const int64_t q = e->code;
    switch (e->ggml_type) {
    case TM_GGML_Q4_0: case TM_GGML_Q5_0: case TM_GGML_TQ1_0: case TM_GGML_TQ2_0:
        set(o->symbolic, "value = d \u00b7 (q \u2212 z)");
        set(o->numeric, "%s * (%s - %s)", num(a, 48, D), num(b, 48, (double)q), num(c, 48, (double)e->zero_point));
        term(o, "d", D); term(o, "q", (double)q); term(o, "z", (double)e->zero_point);
        set(o->note, "one f16 scale d per block of 32%s; z is the type's code offset",
            e->ggml_type >= TM_GGML_TQ1_0 ? " (ternary: 256)" : "");
        return TM_OK;
    case TM_GGML_Q8_0: case TM_GGML_Q8_K:
        set(o->symbolic, "value = d \u00b7 q");
        set(o->numeric, "%s * %s", num(a, 48, D), num(b, 48, (double)q));
        term(o, "d", D); term(o, "q", (double)q);
        set(o->note, "one scale d per block, signed 8-bit codes");
        return TM_OK;
    case TM_GGML_Q4_1: case TM_GGML_Q5_1:
        set(o->symbolic, "value = d \u00b7 q + m");
        set(o->numeric, "%s * %s + %s", num(a, 48, D), num(b, 48, (double)q), num(c, 48, e->super_min));
        term(o, "d", D); term(o, "q", (double)q); term(o, "m", e->super_min);
        set(o->note, "f16 scale d and f16 min m per block of 32");
        return TM_OK;
    case TM_GGML_Q2_K: case TM_GGML_Q4_K: case TM_GGML_Q5_K:
        set(o->symbolic, "value = d \u00b7 sc \u00b7 q \u2212 dmin \u00b7 m");
        set(o->numeric, "%s * %s * %s - %s * %s", num(a, 48, D), num(b, 48, (double)e->sub_scale), num(c, 48, (double)q),
            num(d, 48, e->super_min), num(g, 48, (double)e->sub_min));
        term(o, "d", D); term(o, "sc", (double)e->sub_scale); term(o, "q", (double)q);
        term(o, "dmin", e->super_min); term(o, "m", (double)e->sub_min);
        set(o->note, "super-block of 256: f16 d and dmin; sub-block %lld of %d: integer scale sc and min m",
            (long long)e->sub_block, e->ggml_type == TM_GGML_Q2_K ? 16 : 32);
        return TM_OK;
    case TM_GGML_Q3_K: case TM_GGML_Q6_K:
        set(o->symbolic, "value = d \u00b7 sc \u00b7 (q \u2212 z)");
        set(o->numeric, "%s * %s * (%s - %s)", num(a, 48, D), num(b, 48, (double)e->sub_scale), num(c, 48, (double)q),
            num(d, 48, (double)e->zero_point));
        term(o, "d", D); term(o, "sc", (double)e->sub_scale); term(o, "q", (double)q); term(o, "z", (double)e->zero_point);
        set(o->note, "super-block of 256: f16 d; sub-block %lld of 16: signed integer scale sc%s; z the code offset",
            (long long)e->sub_block, e->ggml_type == TM_GGML_Q3_K ? " (stored 6-bit, minus 32)" : "");
        return TM_OK;
    case TM_GGML_IQ4_NL: case TM_GGML_IQ4_XS: {
        /* the 4-bit index: low nibble for the first 16 values of each 32, high for the rest */
        const int64_t idx = (flat % 32) < 16 ? (int64_t)(e->stored & 0x0F) : (int64_t)((e->stored >> 4) & 0x0F);
        if (e->ggml_type == TM_GGML_IQ4_NL) {
            set(o->symbolic, "value = d \u00b7 kvalues_iq4nl[i]");
            set(o->numeric, "%s * %s", num(a, 48, D), num(b, 48, (double)q));
        } else {
            set(o->symbolic, "value = d \u00b7 sc \u00b7 kvalues_iq4nl[i]");
            set(o->numeric, "%s * %s * %s", num(a, 48, D), num(b, 48, (double)e->sub_scale), num(c, 48, (double)q));
        }
        term(o, "d", D);
        if (e->ggml_type == TM_GGML_IQ4_XS) term(o, "sc", (double)e->sub_scale);
        term(o, "i", (double)idx); term(o, "kvalues_iq4nl[i]", (double)q);
        set(o->note, "non-linear codebook of 16 values; i the stored 4-bit index");
        return TM_OK;
    }
    case TM_GGML_IQ2_XXS: case TM_GGML_IQ2_XS: case TM_GGML_IQ2_S: case TM_GGML_IQ3_XXS: case TM_GGML_IQ3_S: {
        const int three = e->ggml_type == TM_GGML_IQ3_XXS || e->ggml_type == TM_GGML_IQ3_S;
        const int64_t j = flat % (three ? 4 : 8);
        const int64_t k = e->ggml_type == TM_GGML_IQ2_XS ? (int64_t)(e->stored & 511) : (int64_t)e->stored;
        const double gv = (double)(q < 0 ? -q : q), sgn = q < 0 ? -1 : 1;
        const double s = (double)e->sub_scale;
        if (e->ggml_type == TM_GGML_IQ3_S) {
            set(o->symbolic, "value = d \u00b7 (1 + 2\u00b7s) \u00b7 grid[k][j] \u00b7 sign");
            set(o->numeric, "%s * (1 + 2 * %s) * %s * %s", num(a, 48, D), num(b, 48, s), num(c, 48, gv), num(d, 48, sgn));
        } else {
            const char *f = three ? "0.5" : "0.25";
            set(o->symbolic, "value = d \u00b7 (0.5 + s) \u00b7 %s \u00b7 grid[k][j] \u00b7 sign", f);
            set(o->numeric, "%s * (0.5 + %s) * %s * %s * %s", num(a, 48, D), num(b, 48, s), f, num(c, 48, gv), num(d, 48, sgn));
        }
        term(o, "d", D); term(o, "s", s); term(o, "k", (double)k); term(o, "j", (double)j);
        term(o, "grid[k][j]", gv); term(o, "sign_bit", q < 0 ? 1 : 0);
        set(o->note, "codebook %s: entry k (%s values), value j of it; sign bit %d (1 = negative)",
            e->ggml_type == TM_GGML_IQ2_XXS ? "iq2xxs_grid[256]" : e->ggml_type == TM_GGML_IQ2_XS ? "iq2xs_grid[512]" :
            e->ggml_type == TM_GGML_IQ2_S ? "iq2s_grid[1024]" : e->ggml_type == TM_GGML_IQ3_XXS ? "iq3xxs_grid[256]" : "iq3s_grid[512]",
            three ? "4" : "8", q < 0);
        return TM_OK;
    }
    case TM_GGML_IQ1_S: case TM_GGML_IQ1_M: {
        const int64_t gq = (int64_t)lround((double)q / 8.0);
        const double delta = q - 8 * gq > 0 ? 0.125 : -0.125;
        /* sub_scale holds s; the step dl = d * (2s + 1), the element's scale dl / 8 */
        set(o->symbolic, "value = d \u00b7 (2\u00b7s + 1) \u00b7 (grid[k][j] + delta)");
        set(o->numeric, "%s * (2 * %s + 1) * (%s + %s)", num(a, 48, D), num(b, 48, (double)e->sub_scale),
            num(c, 48, (double)gq), num(d, 48, delta));
        term(o, "d", D); term(o, "s", (double)e->sub_scale); term(o, "k", (double)e->stored); term(o, "j", (double)(flat % 8));
        term(o, "grid[k][j]", (double)gq); term(o, "delta", delta);
        set(o->note, "codebook iq1s_grid[2048] of values -1, 0, 1; delta = +-1/8 per group of 32");
        return TM_OK;
    }
    default:
        return tm__err_set(err, TM_E_UNSUPPORTED, -1, "ggml type %d: no formula", e->ggml_type);
    }
}

tm_status tm_qelement_formula(const tm_file *f, int64_t i, int64_t flat, const tm_qelement *e,
                              tm_qformula *o, tm_err *err) {
    memset(o, 0, sizeof *o);
    const tm_tensor *t = tm_file_tensor(f, i);
    if (!t || !t->quant) return tm__err_set(err, TM_E_INVALID_ARG, -1, "tensor %lld is not quantized", (long long)i);
    if (e->ggml_type) return ggml_formula(e, flat, o, err);
    const tm_qtensor *q = t->quant;
    char a[48], b[48], c[48];
    const char *layout = q->layout ? q->layout : "";
    if (q->code_dtype == TM_F8_E4M3 || q->code_dtype == TM_F8_E5M2) {
        const int e4 = q->code_dtype == TM_F8_E4M3;
        const double dv = e4 ? tm_e4m3_to_f32((uint8_t)e->code) : tm_e5m2_to_f32((uint8_t)e->code);
        set(o->symbolic, "value = %s(q) \u00b7 scale", e4 ? "e4m3" : "e5m2");
        set(o->numeric, "%s * %s", num(a, 48, dv), num(b, 48, e->scale));
        term(o, "q", (double)e->code); term(o, e4 ? "e4m3(q)" : "e5m2(q)", dv); term(o, "scale", e->scale);
        set(o->note, "%s: float8 byte 0x%02x decoded, times the scale of group %lld", layout,
            (unsigned)(e->code & 0xff), (long long)e->group);
        return TM_OK;
    }
    set(o->symbolic, "value = (q \u2212 zero_point) \u00b7 scale");
    set(o->numeric, "(%s - %s) * %s", num(a, 48, (double)e->code), num(b, 48, (double)e->zero_point), num(c, 48, e->scale));
    term(o, "q", (double)e->code); term(o, "zero_point", (double)e->zero_point); term(o, "scale", e->scale);
    const tm_tensor *st = tm_file_tensor(f, q->scale_tensor);
    const char *prec = st && st->dtype == TM_F64 ? "; float64 scale, product rounded once to float32" : "";
    if (q->g_idx_tensor >= 0 && t->ndim == 2 && t->shape[1] > 0) {
        /* act-order: the group of column c is g_idx[c], the param index row * n_groups + g */
        const int64_t col = flat % t->shape[1];
        const void *p;
        tm_status s = tm_tensor_data(f, q->g_idx_tensor, (uint64_t)col * 4, 4, &p, err);
        if (s) return s;
        const int32_t gi = (int32_t)tm__ld32(p);
        term(o, "g_idx[c]", (double)gi);
        set(o->note, "%s: column %lld is in group g_idx[%lld] = %d (act-order), param %lld%s", layout,
            (long long)col, (long long)col, gi, (long long)e->group, prec);
    } else if (!strncmp(layout, "onnx/", 5)) {
        set(o->note, "%s: DequantizeLinear y = (x \u2212 x_zero_point) \u00b7 x_scale, param %lld%s", layout,
            (long long)e->group, prec);
    } else {
        set(o->note, "%s: param %lld (%s)%s", layout, (long long)e->group,
            q->gran.kind == TM_GRAN_TENSOR ? "per tensor" : q->gran.kind == TM_GRAN_CHANNEL ? "per channel" :
            q->gran.kind == TM_GRAN_GROUP ? "per group" : "per block", prec);
    }
    return TM_OK;
}
