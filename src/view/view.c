/* view.c: the tensor view. Answers, for any tensor of any format, "values of elements
** [start, start+n) as float32" and, for a quantized tensor, "element i -> stored code, container
** word, scale, zero point, group, value". It combines a reader's description (tm_qtensor,
** tm_packing) with quant's arithmetic; formats/ and quant/ never see each other.
** Dequantize: value = (q - zero_point) * scale in float32 [ONNX DequantizeLinear]; float8
** codes: value = decode(q) * scale. */
#include "../core/core.h"
#include "layout.h"

#include <math.h>

/* Bytes per container word. */
static int container_bytes(tm_dtype c) {
    const tm_dtype_traits *t = tm_dtype_get(c);
    return t ? (t->bits + 7) / 8 : 0;
}

static uint64_t load_word(const uint8_t *p, int nbytes) {
    switch (nbytes) {
    case 1: return p[0];
    case 2: return tm__ld16(p);
    case 4: return tm__ld32(p);
    case 8: return tm__ld64(p);
    default: return 0;
    }
}

/* Sign-extend or keep a `bits`-wide field as the code dtype says. */
static int64_t field_to_code(uint64_t field, int bits, int is_signed_container, int64_t offset) {
    int64_t v = (int64_t)field;
    if (offset == 0 && is_signed_container && bits < 64 && (field >> (bits - 1)) & 1)
        v = (int64_t)field - ((int64_t)1 << bits);
    return v - offset;
}

/* GPTQ / AWQ: element `flat` of a 2-D tensor whose word grid is stored transposed, codes packed
** along logical axis 1 (GPTQ) or 0 (AWQ), fields possibly reordered (tm_qtensor.transposed and
** .field_order in tensormorph.h; docs/formats.md "GPTQ and AWQ"). Words are read as unsigned. */
static tm_status locate_transposed(const tm_file *f, const tm_tensor *t, int64_t flat,
                                   int64_t *code, uint64_t *word, int *word_bits, tm_err *err) {
    const tm_qtensor *q = t->quant;
    const tm_packing *pk = &q->packing;
    int cb = container_bytes(pk->container), wbits = cb * 8;
    if (t->ndim != 2 || cb < 1 || cb > 8 || pk->bits < 1 || pk->bits > 8 || wbits % pk->bits ||
        (pk->packed_axis != 0 && pk->packed_axis != 1) || (q->field_order && wbits / pk->bits > 8))
        return tm__err_set(err, TM_E_UNSUPPORTED, -1,
                           "tensor '%s': transposed packing of %d-bit codes along axis %d is not "
                           "supported", t->name, pk->bits, pk->packed_axis);
    int64_t per = wbits / pk->bits, rows = t->shape[0], cols = t->shape[1];
    if (rows <= 0 || cols <= 0) return tm__err_set(err, TM_E_CORRUPT, -1, "tensor '%s': empty", t->name);
    int64_t r = flat / cols, c = flat % cols, prow, pcol, pcols, j;
    if (pk->packed_axis == 1) { prow = c / per; pcol = r; pcols = rows; j = c % per; }
    else { prow = c; pcol = r / per; pcols = (rows + per - 1) / per; j = r % per; }
    int field = q->field_order ? q->field_order[j] : (int)j;
    const void *p;
    tm_status s = tm_tensor_data(f, q->codes_tensor, ((uint64_t)prow * (uint64_t)pcols + (uint64_t)pcol) * (uint64_t)cb,
                                 (uint64_t)cb, &p, err);
    if (s) return s;
    *word_bits = wbits;
    *word = load_word(p, cb);
    uint64_t fv = (*word >> ((unsigned)field * (unsigned)pk->bits)) & ((1ull << pk->bits) - 1);
    const tm_dtype_traits *cd = tm_dtype_get(q->code_dtype);
    *code = field_to_code(fv, pk->bits, cd && cd->is_signed && !cd->is_float, pk->offset);
    return TM_OK;
}

/* Location of logical element `flat` of a quantized tensor in its packed storage. */
static tm_status locate(const tm_file *f, const tm_tensor *t, int64_t flat, int64_t *code,
                        uint64_t *word, int *word_bits, tm_err *err) {
    const tm_qtensor *q = t->quant;
    const tm_packing *pk = &q->packing;
    const tm_tensor *ct = tm_file_tensor(f, q->codes_tensor);
    if (!ct) return tm__err_set(err, TM_E_CORRUPT, -1, "tensor '%s': codes tensor missing", t->name);
    if (q->transposed) return locate_transposed(f, t, flat, code, word, word_bits, err);
    int cb = container_bytes(pk->container);
    if (cb <= 0) return tm__err_set(err, TM_E_CORRUPT, -1, "tensor '%s': bad container dtype", t->name);
    *word_bits = cb * 8;
    int64_t row = 0, col = flat;
    uint64_t row_bytes = 0;
    if (pk->codes_per_container > 1) {
        if (pk->packed_axis != t->ndim - 1 || t->ndim < 1)
            return tm__err_set(err, TM_E_UNSUPPORTED, -1,
                               "tensor '%s': codes packed along axis %d are not supported", t->name,
                               pk->packed_axis);
        int64_t cols = t->shape[t->ndim - 1];
        if (cols <= 0) return tm__err_set(err, TM_E_CORRUPT, -1, "tensor '%s': empty row", t->name);
        row = flat / cols;
        col = flat % cols;
        row_bytes = tm_packed_row_bytes(pk, cols); /* dense or per-word (TM_PACK_LSB_PER_WORD) */
        if (row_bytes == 0)
            return tm__err_set(err, TM_E_CORRUPT, -1, "tensor '%s': bad packing of %d-bit codes",
                               t->name, pk->bits);
    }
    uint64_t off = (uint64_t)row * row_bytes;
    uint64_t need;
    if (pk->codes_per_container > 1) need = row_bytes;
    else { off = (uint64_t)col * (uint64_t)cb; col = 0; need = (uint64_t)cb; }
    const void *p;
    tm_status s = tm_tensor_data(f, q->codes_tensor, off, need, &p, err);
    if (s) return s;
    if (pk->codes_per_container == 1 && cb >= 2 &&
        (q->code_dtype == TM_I16 || q->code_dtype == TM_U16 || q->code_dtype == TM_I32)) {
        /* 16- and 32-bit codes (ONNX int16/uint16 QDQ, PyTorch qint32) are whole words, beyond
        ** the sub-byte packer's range: sign-extended as the code dtype says, offset removed */
        *word = load_word(p, cb);
        *code = field_to_code(*word, cb * 8, tm_dtype_get(q->code_dtype)->is_signed, pk->offset);
        return TM_OK;
    }
    s = tm_unpack_one(pk, q->code_dtype, p, col, code, word);
    if (s) return tm__err_set(err, s, -1, "tensor '%s': cannot unpack element %lld", t->name,
                              (long long)flat);
    return TM_OK;
}

/* ---- ggml block types (GGUF) ------------------------------------------------------------ */
/* A GGUF block-quantized tensor (q->ggml_type != 0) stores blocks of its ggml type in flat
** row-major order (each row is a whole number of blocks). Its params are one per sub-block
** (tm_ggml_type_info.sub_block values sharing one effective scale): scale = that step,
** zero point = the type's code offset plus min/scale rounded to an integer (exact for the
** types without a min; for Q4_1 Q5_1 Q2_K Q4_K Q5_K only the qdiff clipping test uses it).
** A negative step is reported as its magnitude with the mirrored zero point, so these
** arrays describe the value range (qdiff's LSB and clipping); tm_qelement_get gives the
** signed step and the stored code. A sub-block of step 0 reports the smallest nonzero step of
** its block. For the codebook types one LSB is this step times tm_ggml_code_step.
** Values come from tm_ggml_dequantize, so they are the reference dequantization bit for bit. */

static const tm_ggml_type_info *ggml_info(const tm_tensor *t, tm_err *err) {
    const tm_ggml_type_info *ti = tm_ggml_type_info_get(t->quant->ggml_type);
    if (!ti || !ti->is_quantized)
        tm__err_set(err, TM_E_UNSUPPORTED, -1, "tensor '%s': unsupported ggml type %d", t->name,
                    t->quant->ggml_type);
    return ti && ti->is_quantized ? ti : NULL;
}

static tm_status ggml_qparams(const tm_file *f, int64_t i, const tm_tensor *t, float **scale_out,
                              int32_t **zp_out, int64_t *n_out, tm_err *err) {
    const tm_ggml_type_info *ti = ggml_info(t, err);
    if (!ti) return TM_E_UNSUPPORTED;
    int64_t nb = t->n_elems / ti->block_size, per = ti->block_size / ti->sub_block;
    int64_t np = nb * per;
    float *scale = tm__malloc_n((size_t)(np ? np : 1), sizeof(float));
    int32_t *zp = tm__calloc((size_t)(np ? np : 1), sizeof(int32_t));
    if (!scale || !zp) { free(scale); free(zp); return tm__err_set(err, TM_E_NOMEM, -1, "oom"); }
    tm_status s = TM_OK;
    for (int64_t b = 0; b < nb && !s; b++) {
        const void *p;
        double sc[TM_GGML_QK_K], z[TM_GGML_QK_K], mn[TM_GGML_QK_K];
        s = tm_tensor_data(f, i, (uint64_t)b * ti->type_size, ti->type_size, &p, err);
        if (!s) s = tm_ggml_block_scales(ti->id, p, sc, z, mn, err);
        /* a sub-block of step 0 (a K-quant sub-scale of 0: its values are all its min, as
        ** llama.cpp writes them) is measured in the smallest nonzero step of its block, the
        ** step it would have had with sub-scale 1, so its error is finite in LSB */
        double step0 = 0;
        for (int64_t k = 0; !s && k < per; k++)
            if (sc[k] != 0 && isfinite(sc[k]) && (step0 == 0 || fabs(sc[k]) < step0)) step0 = fabs(sc[k]);
        for (int64_t k = 0; !s && k < per; k++) {
            if (sc[k] == 0 && step0 > 0) {
                double zz = z[k] + mn[k] / step0;
                scale[b * per + k] = (float)step0;
                zp[b * per + k] = zz > 2e9 ? 2000000000 : zz < -2e9 ? -2000000000 : (int32_t)lrint(zz);
                continue;
            }
            double zz = z[k] + (sc[k] != 0 ? mn[k] / sc[k] : 0);
            /* a negative step (Q4_0 Q5_0 Q3_K Q6_K IQ4_* d < 0): the same value range is
            ** (q' - zz') * |step| with q' = qmin + qmax - q, so report |step| and zz' */
            if (sc[k] < 0) zz = (double)(ti->qmin + ti->qmax) - zz;
            scale[b * per + k] = (float)fabs(sc[k]);
            zp[b * per + k] = zz > 2e9 ? 2000000000 : zz < -2e9 ? -2000000000 : (int32_t)lrint(zz);
        }
    }
    if (s) { free(scale); free(zp); return s; }
    *scale_out = scale;
    *zp_out = zp;
    *n_out = np;
    return TM_OK;
}

static tm_status ggml_read(const tm_file *f, int64_t i, const tm_tensor *t, int64_t start,
                           int64_t n, float *out, int64_t *param, tm_err *err) {
    const tm_ggml_type_info *ti = ggml_info(t, err);
    if (!ti) return TM_E_UNSUPPORTED;
    const int64_t bs = ti->block_size;
    float tmp[TM_GGML_QK_K];
    for (int64_t k = 0; k < n;) {
        int64_t e = start + k, b = e / bs, j = e % bs;
        int64_t nb = (j == 0 && n - k >= bs) ? (n - k) / bs : 1;
        const void *p;
        tm_status s = tm_tensor_data(f, i, (uint64_t)b * ti->type_size, (uint64_t)nb * ti->type_size,
                                     &p, err);
        if (s) return s;
        if (j == 0 && nb * bs <= n - k) {
            s = tm_ggml_dequantize(ti->id, p, (uint64_t)nb * ti->type_size, nb * bs, out + k, err);
            k += nb * bs;
        } else {
            int64_t take = bs - j < n - k ? bs - j : n - k;
            s = tm_ggml_dequantize(ti->id, p, ti->type_size, bs, tmp, err);
            if (!s) memcpy(out + k, tmp + j, (size_t)take * sizeof(float));
            k += take;
        }
        if (s) { tm__err_prefix(err, "tensor '%s'", t->name); return s; }
    }
    if (param)
        for (int64_t k = 0; k < n; k++) param[k] = (start + k) / ti->sub_block;
    return TM_OK;
}

static tm_status ggml_element(const tm_file *f, int64_t i, const tm_tensor *t, int64_t flat,
                              tm_qelement *out, tm_err *err) {
    const tm_ggml_type_info *ti = ggml_info(t, err);
    if (!ti) return TM_E_UNSUPPORTED;
    const void *p;
    int64_t b = flat / ti->block_size;
    tm_status s = tm_tensor_data(f, i, (uint64_t)b * ti->type_size, ti->type_size, &p, err);
    if (s) return s;
    tm_ggml_elem e;
    s = tm_ggml_block_elem(ti->id, p, flat % ti->block_size, &e, err);
    if (s) return s;
    memset(out, 0, sizeof *out);
    out->code = e.code;
    out->stored = e.stored;
    out->stored_bits = e.stored_bits;
    out->scale = e.scale;
    out->zero_point = (int64_t)e.zero_point;
    out->group = flat / ti->sub_block;
    out->value = e.value;
    out->ggml_type = ti->id;
    out->min = e.min;
    out->super_scale = e.super_scale;
    out->super_min = e.super_min;
    out->sub_scale = e.sub_scale;
    out->sub_min = e.sub_min;
    out->sub_block = e.sub_block;
    out->block = b;
    return TM_OK;
}
/* ---- end of the ggml branch ---------------------------------------------------------------- */

/* The param matrix of a GPTQ/AWQ tensor is stored [ng, rows]; the view's is [rows, ng]. */
static tm_status transpose_params(float *v, int64_t np, int64_t ng, tm_err *err) {
    if (ng <= 1 || np <= ng) return TM_OK; /* one column or one row: same order */
    int64_t rows = np / ng;
    float *tmp = tm__malloc_n((size_t)np, sizeof(float));
    if (!tmp) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t g = 0; g < ng; g++)
        for (int64_t r = 0; r < rows; r++) tmp[r * ng + g] = v[g * rows + r];
    memcpy(v, tmp, (size_t)np * sizeof(float));
    free(tmp);
    return TM_OK;
}

tm_status tm_tensor_qparams(const tm_file *f, int64_t i, float **scale_out, int32_t **zp_out,
                            int64_t *n_out, tm_err *err) {
    *scale_out = NULL;
    *zp_out = NULL;
    *n_out = 0;
    const tm_tensor *t = tm_file_tensor(f, i);
    if (!t || !t->quant)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "tensor %lld is not quantized", (long long)i);
    if (t->quant->ggml_type) return ggml_qparams(f, i, t, scale_out, zp_out, n_out, err);
    const tm_qtensor *q = t->quant;
    int pnd;
    int64_t pshape[TM_MAX_DIMS], np;
    tm_status s = tm_qgran_param_shape(&q->gran, t->ndim, t->shape, &pnd, pshape, &np, err);
    if (s) return s;
    const tm_tensor *st = tm_file_tensor(f, q->scale_tensor);
    if (!st || st->n_elems != np)
        return tm__err_set(err, TM_E_CORRUPT, -1,
                           "tensor '%s': scale tensor has %lld values, granularity needs %lld",
                           t->name, st ? (long long)st->n_elems : 0LL, (long long)np);
    float *scale = tm__malloc_n((size_t)np, sizeof(float));
    int32_t *zp = tm__calloc((size_t)np, sizeof(int32_t));
    if (!scale || !zp) { free(scale); free(zp); return tm__err_set(err, TM_E_NOMEM, -1, "oom"); }
    const void *p;
    s = tm_tensor_data(f, q->scale_tensor, 0, st->n_bytes, &p, err);
    if (!s) s = tm_convert_to_f32(st->dtype, p, np, scale);
    if (!s && q->transposed) s = transpose_params(scale, np, pnd >= 2 ? pshape[pnd - 1] : 1, err);
    if (!s && q->zero_point_tensor >= 0) {
        const tm_tensor *zt = tm_file_tensor(f, q->zero_point_tensor);
        const tm_packing *zk = &q->zp_packing;
        if (!zt) s = tm__err_set(err, TM_E_CORRUPT, -1, "tensor '%s': zero point missing", t->name);
        else s = tm_tensor_data(f, q->zero_point_tensor, 0, zt->n_bytes, &p, err);
        if (!s && zk->codes_per_container > 1) {
            /* packed along dim 0 of the [rows, n_groups] param matrix (compressed-tensors) */
            int64_t ng = pnd >= 2 ? pshape[pnd - 1] : 1;
            int64_t rows = np / (ng ? ng : 1);
            int cb = container_bytes(zk->container);
            uint64_t wbits = (uint64_t)cb * 8, per_word = zk->bits > 0 ? wbits / (uint64_t)zk->bits : 0;
            int by_word = zk->lsb_first == TM_PACK_LSB_PER_WORD;
            uint64_t wrows = tm_packed_row_bytes(zk, rows) / (cb > 0 ? (uint64_t)cb : 1);
            if (wrows == 0 || wrows * (uint64_t)ng * (uint64_t)cb > zt->n_bytes)
                s = tm__err_set(err, TM_E_CORRUPT, -1, "tensor '%s': zero point tensor too small",
                                t->name);
            /* GPTQ/AWQ (q->transposed): the word grid is [ng, wrows]; AWQ reorders fields */
            if (q->field_order && (zk->bits < 1 || (cb * 8) % zk->bits || (cb * 8) / zk->bits > 8))
                s = tm__err_set(err, TM_E_UNSUPPORTED, -1,
                                "tensor '%s': reordered %d-bit zero points", t->name, zk->bits);
            for (int64_t r = 0; !s && r < rows; r++) {
                uint64_t bit = by_word ? (uint64_t)r / per_word * wbits + (uint64_t)r % per_word * (uint64_t)zk->bits
                                       : (uint64_t)r * (uint64_t)zk->bits;
                uint64_t wr = bit / wbits;
                unsigned sh = (unsigned)(bit % wbits);
                if (q->field_order) sh = (unsigned)q->field_order[sh / (unsigned)zk->bits] * (unsigned)zk->bits;
                for (int64_t g = 0; g < ng; g++) {
                    uint64_t widx = q->transposed ? (uint64_t)g * wrows + wr : wr * (uint64_t)ng + (uint64_t)g;
                    uint64_t w = load_word((const uint8_t *)p + widx * (uint64_t)cb, cb);
                    uint64_t field = w >> sh;
                    if (sh + (unsigned)zk->bits > wbits) { /* dense stream: the field goes on in word wr+1 */
                        uint64_t w2 = q->transposed ? widx + 1 : widx + (uint64_t)ng;
                        field |= load_word((const uint8_t *)p + w2 * (uint64_t)cb, cb) << (wbits - sh);
                    }
                    field &= (1ull << zk->bits) - 1;
                    zp[r * ng + g] = (int32_t)((int64_t)field - zk->offset);
                }
            }
        } else if (!s) {
            if (zt->n_elems != np)
                s = tm__err_set(err, TM_E_CORRUPT, -1,
                                "tensor '%s': zero point has %lld values, scale has %lld", t->name,
                                (long long)zt->n_elems, (long long)np);
            int cb = container_bytes(zt->dtype);
            const tm_dtype_traits *zd = tm_dtype_get(zt->dtype);
            for (int64_t k = 0; !s && k < np; k++) {
                uint64_t w = load_word((const uint8_t *)p + k * cb, cb);
                zp[k] = (int32_t)field_to_code(w, cb * 8, zd->is_signed && !zd->is_float, zk->offset);
            }
        }
    }
    if (s) { free(scale); free(zp); return s; }
    *scale_out = scale;
    *zp_out = zp;
    *n_out = np;
    return TM_OK;
}

static float code_value(tm_dtype cd, int64_t code, float scale, int32_t zp) {
    if (cd == TM_F8_E4M3) return tm_e4m3_to_f32((uint8_t)code) * scale;
    if (cd == TM_F8_E5M2) return tm_e5m2_to_f32((uint8_t)code) * scale;
    return (float)(code - zp) * scale;
}

struct tm_qview {
    const tm_file *f;
    int64_t        i;
    float         *scale;
    int32_t       *zero_point;
    int64_t        n_params;
    int32_t       *g_idx;      /* act-order group of each column, or NULL */
    int64_t        n_groups;   /* groups per row when g_idx is used       */
    double        *scale64;    /* F64 scale tensor: the scales unrounded, else NULL */
};

/* A float64 scale (PyTorch per-channel qtensors store them so) is applied as torch does:
** (double)(q - zero_point) * scale, rounded once to float32 (../shared/vectors/README.md). */
static float code_value64(int64_t code, double scale, int32_t zp) {
    return (float)((double)(code - zp) * scale);
}

static tm_status load_scale64(tm_qview *v, const tm_tensor *t, tm_err *err) {
    const tm_tensor *st = tm_file_tensor(v->f, t->quant->scale_tensor);
    if (!st || st->dtype != TM_F64 || t->quant->code_dtype == TM_F8_E4M3 ||
        t->quant->code_dtype == TM_F8_E5M2)
        return TM_OK;
    const void *p;
    tm_status s = tm_tensor_data(v->f, t->quant->scale_tensor, 0, (uint64_t)v->n_params * 8, &p, err);
    if (s) return s;
    v->scale64 = tm__malloc_n((size_t)v->n_params, sizeof(double));
    if (!v->scale64) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t k = 0; k < v->n_params; k++) {
        uint64_t w = tm__ld64((const uint8_t *)p + 8 * k);
        memcpy(&v->scale64[k], &w, sizeof w);
    }
    return TM_OK;
}

/* Load and check a GPTQ act-order g_idx: column c of row r uses param r*n_groups + g_idx[c]. */
static tm_status load_g_idx(tm_qview *v, const tm_tensor *t, tm_err *err) {
    const tm_qtensor *q = t->quant;
    if (q->g_idx_tensor < 0 || q->gran.kind != TM_GRAN_GROUP) return TM_OK;
    int axis = q->gran.axis < 0 ? q->gran.axis + t->ndim : q->gran.axis;
    if (t->ndim != 2 || axis != 1)
        return tm__err_set(err, TM_E_UNSUPPORTED, -1,
                           "tensor '%s': g_idx is supported for 2-D weights grouped along axis 1",
                           t->name);
    const tm_tensor *gt = tm_file_tensor(v->f, q->g_idx_tensor);
    int64_t cols = t->shape[1];
    if (!gt || gt->dtype != TM_I32 || gt->n_elems != cols)
        return tm__err_set(err, TM_E_CORRUPT, -1, "tensor '%s': g_idx must be I32 [%lld]", t->name,
                           (long long)cols);
    const void *p;
    tm_status s = tm_tensor_data(v->f, q->g_idx_tensor, 0, gt->n_bytes, &p, err);
    if (s) return s;
    v->n_groups = t->shape[0] > 0 ? v->n_params / t->shape[0] : 0;
    v->g_idx = tm__malloc_n((size_t)cols, sizeof(int32_t));
    if (!v->g_idx) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t c = 0; c < cols; c++) {
        int32_t g = (int32_t)tm__ld32((const uint8_t *)p + 4 * c);
        if (g < 0 || g >= v->n_groups)
            return tm__err_set(err, TM_E_CORRUPT, (int64_t)(gt->offset + 4 * (uint64_t)c),
                               "tensor '%s': g_idx[%lld] = %d outside [0, %lld)", t->name,
                               (long long)c, g, (long long)v->n_groups);
        v->g_idx[c] = g;
    }
    return TM_OK;
}

static int64_t view_param_index(const tm_qview *v, const tm_tensor *t, int64_t flat) {
    if (v->g_idx) {
        int64_t cols = t->shape[1];
        return (flat / cols) * v->n_groups + v->g_idx[flat % cols];
    }
    return tm_qgran_param_index(&t->quant->gran, t->ndim, t->shape, flat);
}

tm_status tm_qview_open(const tm_file *f, int64_t i, tm_qview **out, tm_err *err) {
    *out = NULL;
    tm_qview *v = calloc(1, sizeof *v);
    if (!v) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    v->f = f;
    v->i = i;
    tm_status s = tm_tensor_qparams(f, i, &v->scale, &v->zero_point, &v->n_params, err);
    if (s) { free(v); return s; }
    s = load_g_idx(v, tm_file_tensor(f, i), err);
    if (!s) s = load_scale64(v, tm_file_tensor(f, i), err);
    if (s) { tm_qview_free(v); return s; }
    *out = v;
    return TM_OK;
}

void tm_qview_free(tm_qview *v) {
    if (!v) return;
    free(v->scale);
    free(v->zero_point);
    free(v->g_idx);
    free(v->scale64);
    free(v);
}

const float *tm_qview_scale(const tm_qview *v) { return v->scale; }
const int32_t *tm_qview_zero_point(const tm_qview *v) { return v->zero_point; }
int64_t tm_qview_n_params(const tm_qview *v) { return v->n_params; }

tm_status tm_qview_read(tm_qview *v, int64_t start, int64_t n, float *out, int64_t *param,
                        tm_err *err) {
    const tm_tensor *t = tm_file_tensor(v->f, v->i);
    if (start < 0 || n < 0 || start > t->n_elems || n > t->n_elems - start)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "tensor '%s': elements [%lld, +%lld) outside its %lld", t->name,
                           (long long)start, (long long)n, (long long)t->n_elems);
    const tm_qtensor *q = t->quant;
    if (q->ggml_type) return ggml_read(v->f, v->i, t, start, n, out, param, err);
    int is_fp8 = q->code_dtype == TM_F8_E4M3 || q->code_dtype == TM_F8_E5M2;
    tm_status s = TM_OK;
    for (int64_t k = 0; k < n; k++) {
        int64_t code;
        uint64_t word;
        int wb;
        s = locate(v->f, t, start + k, &code, &word, &wb, err);
        if (s) break;
        if (is_fp8) code &= 0xff;
        int64_t g = view_param_index(v, t, start + k);
        if (g < 0 || g >= v->n_params) {
            s = tm__err_set(err, TM_E_CORRUPT, -1, "tensor '%s': param index out of range", t->name);
            break;
        }
        if (param) param[k] = g;
        out[k] = v->scale64 ? code_value64(code, v->scale64[g], v->zero_point[g])
                            : code_value(q->code_dtype, code, v->scale[g], v->zero_point[g]);
    }
    return s;
}

tm_status tm_qelement_get(const tm_file *f, int64_t i, int64_t flat, tm_qelement *out, tm_err *err) {
    const tm_tensor *t = tm_file_tensor(f, i);
    if (!t || !t->quant)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "tensor is not quantized");
    if (flat < 0 || flat >= t->n_elems)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "tensor '%s': index %lld outside %lld elements",
                           t->name, (long long)flat, (long long)t->n_elems);
    if (t->quant->ggml_type) return ggml_element(f, i, t, flat, out, err);
    tm_qview *v;
    tm_status s = tm_qview_open(f, i, &v, err);
    if (s) return s;
    memset(out, 0, sizeof *out);
    s = locate(f, t, flat, &out->code, &out->stored, &out->stored_bits, err);
    if (!s) {
        if (t->quant->code_dtype == TM_F8_E4M3 || t->quant->code_dtype == TM_F8_E5M2)
            out->code &= 0xff;
        int64_t g = view_param_index(v, t, flat);
        if (g < 0 || g >= v->n_params)
            s = tm__err_set(err, TM_E_CORRUPT, -1, "tensor '%s': param index out of range", t->name);
        else {
            out->group = g;
            out->scale = v->scale[g];
            out->zero_point = v->zero_point[g];
            out->value = code_value(t->quant->code_dtype, out->code, v->scale[g], v->zero_point[g]);
            if (v->scale64) {
                out->scale = v->scale64[g];
                out->value = code_value64(out->code, v->scale64[g], v->zero_point[g]);
            }
        }
    }
    tm_qview_free(v);
    return s;
}

/* ---- Plain tensors stored column-major and/or big-endian (NumPy, PyTorch) -------------------
** Kept apart from the common path: the logical element at row-major index k sits, in a
** column-major tensor, at sum(idx[d] * fstride[d]) with fstride[0] = 1 and
** fstride[d] = fstride[d-1] * shape[d-1]; a big-endian element has its bytes reversed. Elements
** are gathered into a small little-endian staging buffer and converted in batches. */
enum { RELAYOUT_BATCH = 256 };

/* Elements [start, start+n) of a plain tensor, row-major and little-endian, into dst. */
static void gather_rowmajor(const tm_tensor *t, const uint8_t *base, size_t isz, int64_t start,
                            int64_t n, uint8_t *dst) {
    int64_t idx[TM_MAX_DIMS] = {0}, fstride[TM_MAX_DIMS];
    int64_t rem = start, acc = 1;
    for (int d = 0; d < t->ndim; d++) { fstride[d] = acc; acc *= t->shape[d]; }
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = t->shape[d] ? rem % t->shape[d] : 0;
        rem = t->shape[d] ? rem / t->shape[d] : 0;
    }
    for (int64_t k = 0; k < n; k++) {
        int64_t src = start + k;
        if (t->fortran_order) {
            src = 0;
            for (int d = 0; d < t->ndim; d++) src += idx[d] * fstride[d];
            for (int d = t->ndim - 1; d >= 0; d--) { /* next row-major index */
                if (++idx[d] < t->shape[d]) break;
                idx[d] = 0;
            }
        }
        const uint8_t *p = base + (size_t)src * isz;
        uint8_t *q = dst + (size_t)k * isz;
        for (size_t b = 0; b < isz; b++) q[b] = t->big_endian ? p[isz - 1 - b] : p[b];
    }
}

static tm_status relayout_base(const tm_file *f, int64_t i, const tm_tensor *t, size_t *isz,
                               const uint8_t **base, tm_err *err) {
    const tm_dtype_traits *dt = tm_dtype_get(t->dtype);
    if (t->quant || !dt || dt->bits < 8 || dt->bits % 8 || t->ndim > TM_MAX_DIMS)
        return tm__err_set(err, TM_E_UNSUPPORTED, -1, "tensor '%s': dtype %s has no element view",
                           t->name, dt ? dt->name : "?");
    *isz = (size_t)dt->bits / 8;
    const void *p;
    tm_status s = tm_tensor_data(f, i, 0, (uint64_t)t->n_elems * *isz, &p, err);
    *base = p;
    return s;
}

static tm_status read_relayout(const tm_file *f, int64_t i, const tm_tensor *t, int64_t start,
                               int64_t n, float *out, tm_err *err) {
    size_t isz = 1;
    const uint8_t *base = NULL;
    tm_status s = relayout_base(f, i, t, &isz, &base, err);
    if (s) return s;
    uint8_t stage[RELAYOUT_BATCH * 8];
    for (int64_t k0 = 0; k0 < n; k0 += RELAYOUT_BATCH) {
        int64_t nb = n - k0 < RELAYOUT_BATCH ? n - k0 : RELAYOUT_BATCH;
        gather_rowmajor(t, base, isz, start + k0, nb, stage);
        s = tm_convert_to_f32(t->dtype, stage, nb, out + k0);
        if (s) return tm__err_set(err, s, -1, "tensor '%s': cannot convert %s to float32", t->name,
                                  tm_dtype_get(t->dtype)->name);
    }
    return TM_OK;
}

tm_status tm__tensor_bytes_rowmajor(const tm_file *f, int64_t i, uint64_t off, uint64_t n,
                                    void *dst, tm_err *err) {
    const tm_tensor *t = tm_file_tensor(f, i);
    if (!t) return tm__err_set(err, TM_E_INVALID_ARG, -1, "tensor index %lld out of range", (long long)i);
    size_t isz = 1;
    const uint8_t *base = NULL;
    tm_status s = relayout_base(f, i, t, &isz, &base, err);
    if (s) return s;
    uint64_t end;
    if (off % isz || n % isz || !tm__add_u64_ok(off, n, &end) || end > t->n_bytes)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "tensor '%s': byte range [%llu, +%llu) is not whole elements inside it",
                           t->name, (unsigned long long)off, (unsigned long long)n);
    gather_rowmajor(t, base, isz, (int64_t)(off / isz), (int64_t)(n / isz), dst);
    return TM_OK;
}

tm_status tm_tensor_read_f32(const tm_file *f, int64_t i, int64_t start, int64_t n, float *out,
                             tm_err *err) {
    const tm_tensor *t = tm_file_tensor(f, i);
    if (!t) return tm__err_set(err, TM_E_INVALID_ARG, -1, "tensor index %lld out of range", (long long)i);
    if (start < 0 || n < 0 || start > t->n_elems || n > t->n_elems - start)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "tensor '%s': elements [%lld, +%lld) outside its %lld", t->name,
                           (long long)start, (long long)n, (long long)t->n_elems);
    if (n == 0) return TM_OK;
    if (!t->quant && (t->fortran_order || t->big_endian)) return read_relayout(f, i, t, start, n, out, err);
    if (!t->quant) {
        const tm_dtype_traits *dt = tm_dtype_get(t->dtype);
        if (!dt || dt->bits < 8)
            return tm__err_set(err, TM_E_UNSUPPORTED, -1, "tensor '%s': dtype %s has no float view",
                               t->name, dt ? dt->name : "?");
        uint64_t isz = (uint64_t)dt->bits / 8;
        const void *p;
        tm_status s = tm_tensor_data(f, i, (uint64_t)start * isz, (uint64_t)n * isz, &p, err);
        if (s) return s;
        s = tm_convert_to_f32(t->dtype, p, n, out);
        if (s) return tm__err_set(err, s, -1, "tensor '%s': cannot convert %s to float32", t->name, dt->name);
        return TM_OK;
    }
    if (t->quant->ggml_type) return ggml_read(f, i, t, start, n, out, NULL, err);
    tm_qview *v;
    tm_status s = tm_qview_open(f, i, &v, err);
    if (s) return s;
    s = tm_qview_read(v, start, n, out, NULL, err);
    tm_qview_free(v);
    return s;
}
