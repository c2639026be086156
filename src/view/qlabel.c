/* qlabel.c: the one short label and the one long description of a quantized tensor's scheme
** (tensormorph.h tm_qtensor_label / tm_qtensor_describe), for every layout the readers map to
** tm_qtensor. Every view prints these strings; nothing else spells a scheme. */
#include "../core/core.h"

#include <inttypes.h>
#include <stdio.h>

/* Appends to a fixed buffer, truncating; the buffer stays NUL-terminated. */
typedef struct sbuf {
    char  *p;
    size_t n, len;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) TM_PRINTF(2, 3);

static void sb_add(sbuf *b, const char *fmt, ...) {
    if (b->len + 1 >= b->n) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->p + b->len, b->n - b->len, fmt, ap);
    va_end(ap);
    if (w < 0) return;
    b->len += (size_t)w < b->n - b->len ? (size_t)w : b->n - b->len - 1;
}

static const char *dtype_name(tm_dtype d) {
    const tm_dtype_traits *tr = tm_dtype_get(d);
    return tr ? tr->name : "?";
}

static const tm_tensor *param_tensor(const tm_file *f, int64_t i) {
    return i >= 0 && f ? tm_file_tensor(f, i) : NULL;
}

/* Bits of one code: the packing's when narrower than the code dtype (GPTQ 2-bit codes in U4). */
static int code_bits(const tm_qtensor *q) {
    const tm_dtype_traits *cd = tm_dtype_get(q->code_dtype);
    int b = cd ? cd->bits : 0;
    return cd && !cd->is_float && q->packing.bits > 0 && q->packing.bits < b ? q->packing.bits : b;
}

/* The code type's name: the dtype's, or I<bits>/U<bits> for codes narrower than it. */
static void code_name(const tm_qtensor *q, sbuf *b) {
    const tm_dtype_traits *cd = tm_dtype_get(q->code_dtype);
    if (cd && code_bits(q) < cd->bits) sb_add(b, "%c%d", cd->is_signed ? 'I' : 'U', code_bits(q));
    else sb_add(b, "%s", dtype_name(q->code_dtype));
}

/* 1 when the group axis is the tensor's last (what --granularity group:N means). */
static int group_on_last_axis(const tm_tensor *t) {
    int a = t->quant->gran.axis;
    return a == -1 || a == t->ndim - 1;
}

/* Start a string: "" when t is not quantized (returns 0 then). */
static int begin(const tm_tensor *t, char *buf, size_t n, sbuf *b) {
    b->p = buf;
    b->n = n;
    b->len = 0;
    if (buf && n) buf[0] = '\0';
    return buf && n && t && t->quant;
}

char *tm_qtensor_label(const tm_file *f, const tm_tensor *t, char *buf, size_t n) {
    sbuf b;
    if (!begin(t, buf, n, &b)) return buf;
    const tm_qtensor *q = t->quant;
    if (q->ggml_type) {
        const tm_ggml_type_info *gi = tm_ggml_type_info_get(q->ggml_type);
        sb_add(&b, "%s block:%" PRId64, gi ? gi->name : "ggml?", q->ggml_block_size);
        if (q->gran.group_size != q->ggml_block_size) sb_add(&b, " sub:%" PRId64, q->gran.group_size);
        if (!q->symmetric) sb_add(&b, " +min");
        return buf;
    }
    code_name(q, &b);
    sb_add(&b, " ");
    const tm_qgran *g = &q->gran;
    switch (g->kind) {
    case TM_GRAN_CHANNEL: sb_add(&b, "channel:%d", g->axis); break;
    case TM_GRAN_GROUP:
        sb_add(&b, "group:%" PRId64, g->group_size);
        if (!group_on_last_axis(t)) sb_add(&b, ":%d", g->axis);
        break;
    case TM_GRAN_BLOCK: sb_add(&b, "block:%" PRId64 "x%" PRId64, g->block_h, g->block_w); break;
    default: sb_add(&b, "tensor");
    }
    const tm_tensor *sc = param_tensor(f, q->scale_tensor);
    sb_add(&b, " %s scale:%s", q->symmetric ? "sym" : "asym", sc ? dtype_name(sc->dtype) : "?");
    return buf;
}

static void describe_ggml(const tm_qtensor *q, sbuf *b) {
    const tm_ggml_type_info *gi = tm_ggml_type_info_get(q->ggml_type);
    if (!gi) {
        sb_add(b, "ggml type %d (unknown to this build)", q->ggml_type);
        return;
    }
    double bpv = gi->block_size > 0 ? 8.0 * (double)gi->type_size / (double)gi->block_size : 0;
    sb_add(b, "%s, a ggml block type (GGUF): blocks of %" PRId64 " values in %" PRIu64
              " bytes (%.2f bits per value)", gi->name, gi->block_size, gi->type_size, bpv);
    if (gi->sub_block > 0 && gi->sub_block < gi->block_size)
        sb_add(b, ", %" PRId64 " sub-blocks of %" PRId64 " values, each with its own scale%s",
               gi->block_size / gi->sub_block, gi->sub_block, gi->has_min ? " and min" : "");
    else
        sb_add(b, ", one scale%s per block", gi->has_min ? " and one min" : "");
    sb_add(b, "; value = %s, codes in [%" PRId64 ", %" PRId64 "] (%d bits)",
           gi->has_min ? "scale*q - min" : "scale*(q - zero point), the zero point a type constant",
           gi->qmin, gi->qmax, gi->code_bits);
    sb_add(b, ", %s block scales", q->ggml_type == TM_GGML_Q8_K ? "F32" : "F16");
}

static void describe_gran(const tm_file *f, const tm_tensor *t, sbuf *b) {
    const tm_qgran *g = &t->quant->gran;
    int pnd;
    int64_t ps[TM_MAX_DIMS], np = 0;
    if (tm_qgran_param_shape(g, t->ndim, t->shape, &pnd, ps, &np, NULL) != TM_OK) np = 0;
    switch (g->kind) {
    case TM_GRAN_CHANNEL: sb_add(b, "one scale per index along axis %d (%" PRId64 " channels)", g->axis, np); break;
    case TM_GRAN_GROUP:
        sb_add(b, "groups of %" PRId64 " consecutive values along axis %d (%" PRId64 " groups)",
               g->group_size, g->axis < 0 ? g->axis + t->ndim : g->axis, np);
        break;
    case TM_GRAN_BLOCK:
        sb_add(b, "blocks of %" PRId64 "x%" PRId64 " over the last two dims (%" PRId64 " blocks)",
               g->block_h, g->block_w, np);
        break;
    default: sb_add(b, "one scale for the whole tensor");
    }
    const tm_tensor *gx = param_tensor(f, t->quant->g_idx_tensor);
    if (gx) sb_add(b, ", groups permuted by act-order g_idx '%s'", gx->name);
}

char *tm_qtensor_describe(const tm_file *f, const tm_tensor *t, char *buf, size_t n) {
    sbuf b;
    if (!begin(t, buf, n, &b)) return buf;
    const tm_qtensor *q = t->quant;
    if (q->ggml_type) {
        describe_ggml(q, &b);
        sb_add(&b, "; layout %s", q->layout ? q->layout : "gguf");
        return buf;
    }
    const tm_dtype_traits *cd = tm_dtype_get(q->code_dtype);
    int is_float = cd && cd->is_float;
    if (is_float)
        sb_add(&b, "%d-bit float codes %s (max %g)", cd->bits, cd->name, cd->fmax);
    else {
        sb_add(&b, "%d-bit %s integer codes ", code_bits(q), cd && cd->is_signed ? "signed" : "unsigned");
        code_name(q, &b);
        sb_add(&b, " in [%" PRId64 ", %" PRId64 "]", q->qmin, q->qmax);
    }
    sb_add(&b, ", ");
    describe_gran(f, t, &b);
    const tm_tensor *sc = param_tensor(f, q->scale_tensor), *zp = param_tensor(f, q->zero_point_tensor);
    if (q->symmetric)
        sb_add(&b, "; symmetric: value = scale*%s", is_float ? "decode(q)" : "q");
    else
        sb_add(&b, "; asymmetric: value = scale*(q - zero_point)");
    if (sc) sb_add(&b, ", %s scales '%s'", dtype_name(sc->dtype), sc->name);
    if (zp) sb_add(&b, ", %s zero points '%s'%s", dtype_name(zp->dtype), zp->name, q->symmetric ? " (all 0)" : "");
    else if (!q->symmetric) sb_add(&b, ", zero points fixed");
    const tm_packing *p = &q->packing;
    if (p->codes_per_container > 1)
        sb_add(&b, "; %d codes per %s word", p->codes_per_container, dtype_name(p->container));
    if (p->codes_per_container > 1 && p->packed_axis >= 0) sb_add(&b, " along axis %d", p->packed_axis);
    if (p->offset) sb_add(&b, ", stored as code + %" PRId64, p->offset);
    if (q->transposed) sb_add(&b, "; word grid stored transposed (GPTQ/AWQ)");
    if (q->field_order) sb_add(&b, ", interleaved field order");
    sb_add(&b, "; layout %s", q->layout ? q->layout : "?");
    return buf;
}
