/*
** onnx_qrec.c: quantization recognition for the ONNX reader (onnx.c builds the graph first).
** DequantizeLinear fed by a tensor, the weights of the QOperator ops (QLinearConv,
** QLinearMatMul; com.microsoft QGemm, MatMulIntegerToFloat, DynamicQuantizeMatMul, QAttention,
** QEmbedLayerNormalization) and of MatMulInteger/ConvInteger (scale from the Cast -> Mul after
** them), and com.microsoft MatMulNBits become logical quantized tensors (tm_qtensor);
** QuantizeLinear / DynamicQuantizeLinear on activations are counted as quantization points;
** every value that carries codes is marked in the graph (tm_graph_value.quantized).
*/
#include "onnx_impl.h"

#include "onnx.pb-c.h"

#include <stdio.h>

int tm__ox_is_onnx_domain(const char *d) { return !d || !*d || !strcmp(d, "ai.onnx"); }
int tm__ox_is_ms_domain(const char *d) { return d && !strcmp(d, "com.microsoft"); }

/* ---- the operator-oriented (QOperator) ops --------------------------------------------- */

/* Where a 1-D scale of a code input runs. */
enum { AX_LAST, AX_ROW, AX_ZERO, AX_GEMM_B };

/* One code input of an op: its input index, the indices of its scale and zero point (-1:
** none), the axis of a 1-D scale. */
typedef struct qop_slot { int8_t codes, scale, zp, axis; } qop_slot;

typedef struct qop_spec {
    const char *op;
    int         ms_only;   /* only in com.microsoft (the ai.onnx ones are accepted in both)  */
    int         n_slots;
    qop_slot    slot[5];   /* the code inputs in input order (the integer ops: A/x, B/w)     */
    int8_t      y_scale, y_zp; /* inputs quantizing the output, -1: the output is float     */
    int8_t      out_type;  /* input whose element type the output has                        */
    const char *layout;
} qop_spec;

/* Input orders and optional inputs, from the operator specs:
**   QLinearConv (ai.onnx 10): x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
**     y_zero_point[, B]; x per tensor, w per output channel (axis 0).
**   QLinearMatMul (ai.onnx 10): a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
**     y_zero_point; per row of a, per column of b.
**   QGemm (com.microsoft 1): A, a_scale, a_zero_point, B, b_scale, b_zero_point[, C, y_scale,
**     y_zero_point]; A per tensor; b per column of op(B): axis 0 of B when transB, else 1;
**     without y_scale the output is float.
**   MatMulIntegerToFloat (com.microsoft 1): A, B, a_scale, b_scale[, a_zero_point,
**     b_zero_point, bias]; per column of A and of B; Y has the scales' type.
**   DynamicQuantizeMatMul (com.microsoft 1): A (float), B, b_scale[, b_zero_point, bias]; per
**     column of B; Y has A's type.
**   QAttention (com.microsoft 1): input, weight, bias, input_scale, weight_scale[, mask_index,
**     input_zero_point, weight_zero_point, past]; input per tensor; weight
**     [input_hidden, 3*hidden] per column; output has the scales' type.
**   QEmbedLayerNormalization (com.microsoft 1): input_ids, segment_ids?, word_embedding,
**     position_embedding, segment_embedding?, gamma, beta, mask?, then the five scales (8..12,
**     segment's optional) and the five zero points (13..17); all per tensor; output has the
**     scales' type.
** (onnx/docs/Operators.md; onnxruntime/docs/ContribOperators.md) */
static const qop_spec qop_specs[] = {
    {"QLinearConv", 0, 2, {{0, 1, 2, AX_LAST}, {3, 4, 5, AX_ZERO}}, 6, 7, 7, "onnx/QLinearConv"},
    {"QLinearMatMul", 0, 2, {{0, 1, 2, AX_ROW}, {3, 4, 5, AX_LAST}}, 6, 7, 7, "onnx/QLinearMatMul"},
    {"QGemm", 0, 2, {{0, 1, 2, AX_LAST}, {3, 4, 5, AX_GEMM_B}}, 7, 8, 8, "onnx/com.microsoft.QGemm"},
    {"MatMulIntegerToFloat", 1, 2, {{0, 2, 4, AX_LAST}, {1, 3, 5, AX_LAST}}, -1, -1, 2,
     "onnx/com.microsoft.MatMulIntegerToFloat"},
    {"DynamicQuantizeMatMul", 1, 1, {{1, 2, 3, AX_LAST}}, -1, -1, 0,
     "onnx/com.microsoft.DynamicQuantizeMatMul"},
    {"QAttention", 1, 2, {{0, 3, 6, AX_LAST}, {1, 4, 7, AX_LAST}}, -1, -1, 3,
     "onnx/com.microsoft.QAttention"},
    {"QEmbedLayerNormalization", 1, 5,
     {{2, 8, 13, AX_LAST}, {3, 9, 14, AX_LAST}, {4, 10, 15, AX_LAST}, {5, 11, 16, AX_LAST},
      {6, 12, 17, AX_LAST}}, -1, -1, 8, "onnx/com.microsoft.QEmbedLayerNormalization"},
};

/* The integer ops (ai.onnx 10) have zero points but no scales: MatMulInteger(A, B[,
** a_zero_point, b_zero_point]), zero points per row of A / per column of B; ConvInteger(x, w[,
** x_zero_point, w_zero_point]), x per tensor, w per output channel. Their scales are found on
** the float side (find_integer_scale). */
static const qop_spec int_specs[] = {
    {"MatMulInteger", 0, 2, {{0, -1, 2, AX_ROW}, {1, -1, 3, AX_LAST}}, -1, -1, -1,
     "onnx/MatMulInteger"},
    {"ConvInteger", 0, 2, {{0, -1, 2, AX_LAST}, {1, -1, 3, AX_ZERO}}, -1, -1, -1,
     "onnx/ConvInteger"},
};

static const qop_spec *spec_in(const qop_spec *t, size_t n, const char *op, int ms) {
    for (size_t k = 0; k < n; k++)
        if (!strcmp(t[k].op, op) && (ms || !t[k].ms_only)) return &t[k];
    return NULL;
}
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* The spec of a QOperator or integer node (NULL for any other). */
static const qop_spec *node_spec(const ox_node *on) {
    int ms = tm__ox_is_ms_domain(on->pub.domain);
    const qop_spec *q = spec_in(qop_specs, N_OF(qop_specs), on->pub.op_type, ms);
    return q ? q : spec_in(int_specs, N_OF(int_specs), on->pub.op_type, ms);
}

tm_qnode_kind tm__ox_node_qkind(const char *op, const char *dom) {
    int std = tm__ox_is_onnx_domain(dom), ms = tm__ox_is_ms_domain(dom);
    if (!std && !ms) return TM_QNODE_NONE;
    if (!strcmp(op, "DequantizeLinear")) return TM_QNODE_DEQUANTIZE;
    if (!strcmp(op, "QuantizeLinear")) return TM_QNODE_QUANTIZE;
    if (!strcmp(op, "DynamicQuantizeLinear")) return TM_QNODE_DYNAMIC_QUANTIZE;
    if (spec_in(qop_specs, N_OF(qop_specs), op, ms)) return TM_QNODE_QOPERATOR;
    if (spec_in(int_specs, N_OF(int_specs), op, ms)) return TM_QNODE_INTEGER;
    if (ms && !strcmp(op, "MatMulNBits")) return TM_QNODE_MATMULNBITS;
    return TM_QNODE_NONE;
}

/* ---- mapping onto tensors ---------------------------------------------------------------- */

static int64_t val_tensor(const ox_state *st, int64_t v) {
    return (v >= 0 && v < st->n_values) ? st->values[v].tensor : -1;
}

static int code_dtype_ok(tm_dtype d) {
    return d == TM_I8 || d == TM_U8 || d == TM_I4 || d == TM_U4 || d == TM_F8_E4M3 || d == TM_F8_E5M2 ||
           d == TM_I16 || d == TM_U16; /* 16-bit QDQ (opset 21, com.microsoft): whole-word codes */
}
static int scale_dtype_ok(tm_dtype d) {
    return d == TM_F32 || d == TM_F16 || d == TM_BF16 || d == TM_F64;
}

/* Bytes of tensor i wherever they are (arena or a mapped file). */
static const uint8_t *tensor_bytes(ox_ctx *c, const tm_tensor *t) {
    if (t->file_index == ARENA_SLOT) return c->st->arena + t->offset;
    if (t->file_index >= 0 && t->file_index < c->f->n_maps) return c->f->maps[t->file_index].base + t->offset;
    return NULL;
}

/* A 4-bit zero-point tensor becomes one byte per code (INT4 sign-extended). */
static tm_status expand_zp4(ox_ctx *c, int64_t zi, tm_err *err) {
    tm_tensor *z = tm__file_tensor_mut(c->f, zi);
    if (z->dtype != TM_I4 && z->dtype != TM_U4) return TM_OK;
    if (z->n_bytes == (uint64_t)z->n_elems && z->phys_ndim == -1) return TM_OK; /* done before */
    uint64_t off;
    uint64_t packed_row = z->ndim ? ((uint64_t)z->shape[z->ndim - 1] * 4 + 7) / 8 : 1;
    int64_t cols = z->ndim ? z->shape[z->ndim - 1] : 1;
    tm_status s = tm__ox_arena_alloc(c->st, (uint64_t)z->n_elems, &off, err);
    if (s) return s;
    z = tm__file_tensor_mut(c->f, zi); /* the arena may have moved; the tensor did not */
    const uint8_t *src = tensor_bytes(c, z);
    if (!src) return tm__err_set(err, TM_E_INTERNAL, -1, "zero point '%s' has no bytes", z->name);
    uint8_t *dst = c->st->arena + off;
    for (int64_t e = 0; e < z->n_elems; e++) {
        int64_t r = cols ? e / cols : 0, j = cols ? e % cols : 0;
        uint8_t b = src[(uint64_t)r * packed_row + (uint64_t)j / 2];
        uint8_t v = (j & 1) ? (uint8_t)(b >> 4) : (uint8_t)(b & 15);
        dst[e] = (z->dtype == TM_I4 && (v & 8)) ? (uint8_t)(v | 0xF0) : v;
    }
    z->file_index = ARENA_SLOT;
    z->offset = off;
    z->n_bytes = (uint64_t)z->n_elems;
    z->phys_ndim = -1; /* marks the expansion (fixed up at the end) */
    return TM_OK;
}

static tm_packing codes_packing(tm_dtype cd, int ndim) {
    tm_packing p;
    memset(&p, 0, sizeof p);
    p.container = cd == TM_I4 || cd == TM_U4 ? TM_U8 : cd;
    p.bits = cd == TM_I4 || cd == TM_U4 ? 4 : cd == TM_I16 || cd == TM_U16 ? 16 : 8;
    p.codes_per_container = p.bits < 8 ? 8 / p.bits : 1;
    p.packed_axis = p.codes_per_container > 1 ? ndim - 1 : -1;
    p.lsb_first = 1;
    return p;
}

static void set_role(tm_file *f, int64_t i, tm_tensor_role role, int64_t owner) {
    tm_tensor *t = tm__file_tensor_mut(f, i);
    if (t && t->role == TM_ROLE_DATA && !t->quant) { t->role = role; t->owner = owner; }
}

/* 1 when every zero point of zt is 0 (integer codes: every byte 0, which a 4-bit zero point
** expanded by expand_zp4 also is; float8: +0 or -0), 0 otherwise or when its bytes are not at
** hand. Such a DequantizeLinear computes x * scale: symmetric (docs/formats.md "ONNX"). */
static int zp_all_zero(ox_ctx *c, const tm_tensor *zt, int is_fp8) {
    const uint8_t *b = tensor_bytes(c, zt);
    if (!b) return 0;
    for (uint64_t k = 0; k < zt->n_bytes; k++)
        if (b[k] && !(is_fp8 && b[k] == 0x80)) return 0;
    return 1;
}

/* Attach codes + scale (+ zp) as a quantized tensor. gran_axis < -1000 means "infer". Returns
** TM_OK also when the combination is not representable (a warning says why). */
static tm_status attach(ox_ctx *c, ox_node *on, int64_t ci, int64_t si, int64_t zi, int axis,
                        int64_t block, const char *layout, tm_err *err) {
    tm_file *f = c->f;
    tm_tensor *ct = tm__file_tensor_mut(f, ci);
    const tm_tensor *stn = tm_file_tensor(f, si);
    const tm_tensor *zt = zi >= 0 ? tm_file_tensor(f, zi) : NULL;
    const char *op = on->pub.op_type;
    if (!ct || !stn) return TM_OK;
    if (ct->quant) {
        if (ct->quant->scale_tensor == si) { on->pub.weight_tensor = ci; return TM_OK; }
        return tm__file_add_warning(f, err, "%s: tensor '%s' feeds %s '%s' with scale '%s' but is "
                                    "already quantized with scale '%s'; first kept", c->path,
                                    ct->name, op, on->pub.name, stn->name,
                                    tm_file_tensor(f, ct->quant->scale_tensor)->name);
    }
    if (ct->role != TM_ROLE_DATA) return TM_OK;
    const char *why = NULL;
    /* an int32 bias dequantized with scale = input scale x weight scale is ordinary in QDQ
    ** graphs: listed as a plain I32 tensor without a warning (the graph marks it quantized) */
    if (ct->dtype == TM_I32) return TM_OK;
    if (!code_dtype_ok(ct->dtype)) why = "the tensor view has no code dtype for it (codes are I8 U8 I4 U4 I16 U16 F8_E4M3 F8_E5M2); listed unquantized";
    else if (!scale_dtype_ok(stn->dtype)) why = "the scale is not a float tensor";
    else if (zt && (zt->quant || zi == ci || (zt->role != TM_ROLE_DATA && zt->role != TM_ROLE_ZERO_POINT)))
        why = "the zero point is itself a quantized tensor or a scale";
    else if (zt && zt->dtype != ct->dtype) why = "the zero point's type differs from the codes'";
    else if (zt && zt->n_elems != stn->n_elems) why = "zero point and scale differ in size";
    else if ((ct->dtype == TM_I4 || ct->dtype == TM_U4) && ct->ndim < 1) why = "4-bit scalar codes";
    if (why)
        return tm__file_add_warning(f, err, "%s: %s '%s': '%s' (%s) not mapped to a quantized "
                                    "tensor: %s", c->path, op, on->pub.name, ct->name,
                                    tm_dtype_get(ct->dtype)->name, why);
    tm_qtensor q;
    memset(&q, 0, sizeof q);
    int nd = ct->ndim;
    if (axis < 0) axis += nd;
    if (block > 0) {
        q.gran.kind = TM_GRAN_GROUP;
        q.gran.axis = axis;
        q.gran.group_size = block;
    } else if (stn->n_elems == 1 && stn->ndim <= 1) {
        q.gran.kind = TM_GRAN_TENSOR;
    } else {
        q.gran.kind = TM_GRAN_CHANNEL;
        q.gran.axis = axis;
    }
    int pnd;
    int64_t ps[TM_MAX_DIMS], np;
    tm_err e2;
    int shape_ok = (q.gran.kind == TM_GRAN_TENSOR) ||
                   (axis >= 0 && axis < nd &&
                    tm_qgran_param_shape(&q.gran, nd, ct->shape, &pnd, ps, &np, &e2) == TM_OK &&
                    np == stn->n_elems);
    if (shape_ok && q.gran.kind == TM_GRAN_GROUP) {
        /* blocked: the scale has the codes' rank with the axis dim divided */
        shape_ok = stn->ndim == nd;
        for (int d = 0; shape_ok && d < nd; d++) shape_ok = stn->shape[d] == ps[d];
    }
    if (!shape_ok)
        return tm__file_add_warning(f, err, "%s: %s '%s': scale '%s' (%lld values) does not fit "
                                    "'%s' with axis %d block_size %lld; not mapped", c->path, op,
                                    on->pub.name, stn->name, (long long)stn->n_elems, ct->name,
                                    on->axis, (long long)block);
    const tm_dtype_traits *tr = tm_dtype_get(ct->dtype);
    q.code_dtype = ct->dtype;
    q.qmin = tr->is_float ? -(int64_t)tr->fmax : tr->qmin;
    q.qmax = tr->is_float ? (int64_t)tr->fmax : tr->qmax;
    int is_fp8 = tr->is_float;
    q.packing = codes_packing(ct->dtype, nd);
    q.codes_tensor = ci;
    q.scale_tensor = si;
    q.zero_point_tensor = (zt && !is_fp8) ? zi : -1;
    /* 4-bit zero points are read one per byte (expand_zp4) */
    q.zp_packing.container = !zt ? ct->dtype
                             : zt->dtype == TM_I4 ? TM_I8 : zt->dtype == TM_U4 ? TM_U8 : zt->dtype;
    q.zp_packing.bits = tm_dtype_get(q.zp_packing.container)->bits;
    q.zp_packing.codes_per_container = 1;
    q.zp_packing.packed_axis = -1;
    q.zp_packing.lsb_first = 1;
    q.layout = layout;
    q.g_idx_tensor = -1;
    if (zt && !is_fp8) {
        tm_status s = expand_zp4(c, zi, err);
        if (s) return s;
        zt = tm_file_tensor(f, zi);
    }
    q.symmetric = !zt || zp_all_zero(c, zt, is_fp8);
    tm_status s = tm__file_set_quant(f, ci, &q, err);
    if (s) return s;
    set_role(f, si, TM_ROLE_SCALE, ci);
    if (zt) set_role(f, zi, TM_ROLE_ZERO_POINT, ci);
    on->pub.weight_tensor = ci;
    return TM_OK;
}

/* Mark value v as carrying codes with scale/zp values and Q/DQ attributes. */
static void mark_q(ox_state *st, int64_t v, int64_t sv, int64_t zv, int axis, int64_t block) {
    if (v < 0 || v >= st->n_values) return;
    tm_graph_value *x = &st->values[v];
    x->quantized = 1;
    x->scale_value = sv;
    x->zero_point_value = zv;
    x->axis = axis;
    x->block_size = block;
}

static int64_t in_v(const ox_node *on, int64_t k) {
    return k >= 0 && k < on->pub.n_inputs ? on->io[k] : -1;
}

/* MatMulNBits: B uint8 [N, n_blocks, blob] -> logical [N, K] codes, group along axis 1. */
static tm_status recognize_nbits(ox_ctx *c, ox_node *on, tm_err *err) {
    ox_state *st = c->st;
    tm_file *f = c->f;
    int64_t bi = val_tensor(st, in_v(on, 1)), si = val_tensor(st, in_v(on, 2));
    int64_t zi = val_tensor(st, in_v(on, 3)), gi = val_tensor(st, in_v(on, 4));
    if (bi < 0 || si < 0) return TM_OK;
    tm_tensor *b = tm__file_tensor_mut(f, bi);
    const tm_tensor *sc = tm_file_tensor(f, si);
    int64_t K = on->k, N = on->n, bs = on->nbits_block, bits = on->bits;
    const char *why = NULL;
    int64_t nb = bs > 0 ? (K + bs - 1) / bs : 0;
    int64_t blob = bs > 0 ? bs * bits / 8 : 0;
    if (b->quant || b->role != TM_ROLE_DATA) return TM_OK;
    if (bits != 4 && bits != 8) why = "only 4- and 8-bit MatMulNBits weights are mapped";
    else if (K <= 0 || N <= 0 || bs < 16 || (bs & (bs - 1))) why = "K, N or block_size is invalid";
    else if (b->dtype != TM_U8 || b->ndim != 3 || b->shape[0] != N || b->shape[1] != nb ||
             b->shape[2] != blob)
        why = "B is not uint8 [N, ceil(K/block_size), block_size*bits/8]";
    else if (!scale_dtype_ok(sc->dtype) || sc->n_elems != N * nb) why = "scales are not N*n_blocks floats";
    else if (zi >= 0 && (zi == bi || tm_file_tensor(f, zi)->quant || tm_file_tensor(f, zi)->role != TM_ROLE_DATA))
        why = "the zero points are already another tensor's codes, scale or zero point";
    else if (zi >= 0 && tm_file_tensor(f, zi)->dtype != TM_U8) why = "float zero points are not representable";
    else if (gi >= 0 && (tm_file_tensor(f, gi)->dtype != TM_I32 || tm_file_tensor(f, gi)->n_elems != K))
        why = "g_idx is not int32 [K]";
    if (why)
        return tm__file_add_warning(f, err, "%s: MatMulNBits '%s': '%s' not mapped: %s", c->path,
                                    on->pub.name, b->name, why);
    /* compact rows of ceil(K*bits/8) bytes (the physical row also holds the padding of the last
    ** block) */
    uint64_t row = ((uint64_t)K * (uint64_t)bits + 7) / 8, prow = (uint64_t)(nb * blob), off;
    tm_status s = tm__ox_arena_alloc(st, row * (uint64_t)N, &off, err);
    if (s) return s;
    b = tm__file_tensor_mut(f, bi);
    const uint8_t *src = tensor_bytes(c, b);
    for (int64_t r = 0; r < N; r++)
        memcpy(st->arena + off + (uint64_t)r * row, src + (uint64_t)r * prow, (size_t)row);
    b->file_index = ARENA_SLOT;
    b->offset = off;
    b->n_bytes = row * (uint64_t)N;
    b->ndim = 2;
    b->shape[0] = N;
    b->shape[1] = K;
    b->n_elems = N * K;
    b->dtype = bits == 4 ? TM_U4 : TM_U8;
    b->phys_dtype = TM_U8;
    b->phys_ndim = 2;
    b->phys_shape[0] = N;
    b->phys_shape[1] = (int64_t)row;
    tm_qtensor q;
    memset(&q, 0, sizeof q);
    q.gran.kind = TM_GRAN_GROUP;
    q.gran.axis = 1;
    q.gran.group_size = bs;
    q.packing.container = TM_U8;
    q.packing.bits = (int)bits;
    q.packing.codes_per_container = (int)(8 / bits);
    q.packing.packed_axis = q.packing.codes_per_container > 1 ? 1 : -1;
    q.packing.lsb_first = 1;
    q.codes_tensor = bi;
    q.scale_tensor = si;
    q.g_idx_tensor = gi;
    q.layout = "onnx/com.microsoft.MatMulNBits";
    if (zi < 0) {
        /* no zero points: the zero point is 2^(bits-1); as signed codes with that offset */
        q.code_dtype = bits == 4 ? TM_I4 : TM_I8;
        q.packing.offset = (int64_t)1 << (bits - 1);
        q.symmetric = 1;
        q.zero_point_tensor = -1;
    } else {
        tm_tensor *z = tm__file_tensor_mut(f, zi);
        uint64_t zrow = ((uint64_t)nb * (uint64_t)bits + 7) / 8;
        if (z->n_bytes != zrow * (uint64_t)N)
            return tm__file_add_warning(f, err, "%s: MatMulNBits '%s': zero points '%s' hold %llu "
                                        "bytes, expected %llu; not mapped", c->path, on->pub.name,
                                        z->name, (unsigned long long)z->n_bytes,
                                        (unsigned long long)(zrow * (uint64_t)N));
        uint64_t zoff;
        if ((s = tm__ox_arena_alloc(st, (uint64_t)(N * nb), &zoff, err))) return s;
        z = tm__file_tensor_mut(f, zi);
        const uint8_t *zs = tensor_bytes(c, z);
        for (int64_t r = 0; r < N; r++)
            for (int64_t g = 0; g < nb; g++) {
                uint8_t byte = zs[(uint64_t)r * zrow + (uint64_t)g * (uint64_t)bits / 8];
                st->arena[zoff + (uint64_t)(r * nb + g)] =
                    bits == 8 ? byte : (uint8_t)((g & 1) ? byte >> 4 : byte & 15);
            }
        z->file_index = ARENA_SLOT;
        z->offset = zoff;
        z->n_bytes = (uint64_t)(N * nb);
        z->dtype = TM_U8; /* one code per byte */
        z->ndim = 2;
        z->shape[0] = N;
        z->shape[1] = nb;
        z->n_elems = N * nb;
        z->phys_dtype = TM_U8;
        z->phys_ndim = 2;
        memcpy(z->phys_shape, z->shape, sizeof z->shape);
        q.code_dtype = bits == 4 ? TM_U4 : TM_U8;
        q.symmetric = 0;
        q.zero_point_tensor = zi;
        q.zp_packing.container = z->dtype;
        q.zp_packing.bits = (int)bits;
        q.zp_packing.codes_per_container = 1;
        q.zp_packing.packed_axis = -1;
        q.zp_packing.lsb_first = 1;
    }
    const tm_dtype_traits *tr = tm_dtype_get(q.code_dtype);
    q.qmin = tr->qmin;
    q.qmax = tr->qmax;
    if ((s = tm__file_set_quant(f, bi, &q, err))) return s;
    set_role(f, si, TM_ROLE_SCALE, bi);
    if (zi >= 0) set_role(f, zi, TM_ROLE_ZERO_POINT, bi);
    if (gi >= 0) set_role(f, gi, TM_ROLE_AUX, bi);
    on->pub.weight_tensor = bi;
    return TM_OK;
}

/* Output element types (and shapes) of the quantization ops, as their specs define them, where
** value_info did not give them: what flows out of a Q/DQ node is known without running it. */
void tm__ox_infer_types(ox_state *st, tm__ox_set_type_fn set_type) {
    for (int64_t i = 0; i < st->n_nodes; i++) {
        ox_node *on = &st->nodes[i];
        /* an omitted optional output ("") has no value */
        if (on->pub.qkind == TM_QNODE_NONE || on->pub.n_outputs < 1 || on->io[on->pub.n_inputs] < 0)
            continue;
        tm_graph_value *y = &st->values[on->io[on->pub.n_inputs]];
        const tm_graph_value *x = in_v(on, 0) >= 0 ? &st->values[in_v(on, 0)] : NULL;
        const tm_graph_value *sc = in_v(on, 1) >= 0 ? &st->values[in_v(on, 1)] : NULL;
        const tm_graph_value *zp = in_v(on, 2) >= 0 ? &st->values[in_v(on, 2)] : NULL;
        int elem = 0, same_shape = 0;
        switch (on->pub.qkind) {
        case TM_QNODE_DEQUANTIZE: /* y has the scale's type (output_dtype in newer opsets) */
            elem = on->out_dtype ? on->out_dtype : (sc ? sc->elem_type : 0);
            same_shape = 1;
            break;
        case TM_QNODE_QUANTIZE: /* y has the zero point's type, else output_dtype, else uint8 */
            elem = zp && zp->elem_type ? zp->elem_type : (on->out_dtype ? on->out_dtype : ONNX__TENSOR_PROTO__DATA_TYPE__UINT8);
            same_shape = 1;
            break;
        case TM_QNODE_DYNAMIC_QUANTIZE:
            elem = ONNX__TENSOR_PROTO__DATA_TYPE__UINT8;
            same_shape = 1;
            for (int k = 1; k <= 2 && k < on->pub.n_outputs; k++) {
                int64_t o = on->io[on->pub.n_inputs + k];
                int64_t none[1] = {0};
                if (o >= 0 && !st->values[o].elem_type)
                    set_type(&st->values[o],
                             k == 1 ? ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
                                    : ONNX__TENSOR_PROTO__DATA_TYPE__UINT8,
                             0, none);
            }
            break;
        case TM_QNODE_QOPERATOR: { /* as its spec says: y_zero_point's type, the scales' or A's */
            const qop_spec *q = node_spec(on);
            int64_t tv = q ? in_v(on, q->out_type) : -1;
            elem = tv >= 0 ? st->values[tv].elem_type : 0;
            break;
        }
        case TM_QNODE_INTEGER: elem = ONNX__TENSOR_PROTO__DATA_TYPE__INT32; break;
        case TM_QNODE_MATMULNBITS: elem = x ? x->elem_type : 0; break;
        default: break;
        }
        if (!y->elem_type && elem > 0) set_type(y, elem, -1, NULL);
        if (same_shape && y->ndim < 0 && x && x->ndim >= 0)
            set_type(y, 0, x->ndim, x->shape);
    }
}

/* Axis of a 1-D scale of slot sl over codes of rank nd. */
static int slot_axis(const ox_node *on, const qop_slot *sl, int nd) {
    switch (sl->axis) {
    case AX_ROW: return nd >= 2 ? nd - 2 : 0;
    case AX_ZERO: return 0;
    case AX_GEMM_B: return on->trans_b ? 0 : 1;
    default: return nd > 0 ? nd - 1 : 0;
    }
}

/* A QOperator node: its code inputs (and a quantized output) are marked, and every code input
** that is a tensor with a tensor scale becomes a quantized tensor. */
static tm_status recognize_qop(ox_ctx *c, ox_node *on, const qop_spec *q, tm_err *err) {
    ox_state *st = c->st;
    tm_status s = TM_OK;
    for (int k = 0; k < q->n_slots; k++)
        if (q->slot[k].codes >= 0)
            mark_q(st, in_v(on, q->slot[k].codes), in_v(on, q->slot[k].scale),
                   in_v(on, q->slot[k].zp), 1, 0);
    if (q->y_scale >= 0 && on->pub.n_outputs > 0 && on->pub.n_inputs > q->y_scale)
        mark_q(st, on->io[on->pub.n_inputs], in_v(on, q->y_scale), in_v(on, q->y_zp), 1, 0);
    for (int k = 0; k < q->n_slots && !s; k++) {
        const qop_slot *sl = &q->slot[k];
        int64_t ci = val_tensor(st, in_v(on, sl->codes)), si = val_tensor(st, in_v(on, sl->scale));
        if (ci < 0 || si < 0) continue;
        s = attach(c, on, ci, si, val_tensor(st, in_v(on, sl->zp)),
                   slot_axis(on, sl, tm_file_tensor(c->f, ci)->ndim), 0, q->layout, err);
    }
    return s;
}

static int is_op(const ox_node *on, const char *op) {
    return tm__ox_is_onnx_domain(on->pub.domain) && !strcmp(on->pub.op_type, op);
}
static int64_t out0(const ox_node *on) { return on->pub.n_outputs > 0 ? on->io[on->pub.n_inputs] : -1; }

/* The scale of an integer op's code input, found where the float side applies it. ONNX
** Runtime's quantizer (IntegerOps mode: onnxruntime/python/tools/quantization/operators/
** matmul.py and conv.py) writes
**     MatMulInteger / ConvInteger [-> Add (int32 bias)] -> Cast (to float)
**         -> Mul(., Mul(a_scale, b_scale))
** so the scale of one code input is the factor of the inner Mul that is not the other code
** input's scale (the scale output of the DynamicQuantizeLinear, or the scale input of the
** QuantizeLinear, that made it); when that is not known, the one factor that is a tensor.
** cons[v]: the node consuming value v (-1 none, -2 several); prod[v]: the node making it.
** Returns the scale's value index, or -1 with *why set. */
static int64_t find_integer_scale(const ox_state *st, const int64_t *cons, const int64_t *prod,
                                  const ox_node *on, int64_t other, const char **why) {
    int64_t y = out0(on), ni = y >= 0 ? cons[y] : -1;
    if (ni >= 0 && is_op(&st->nodes[ni], "Add")) { /* ConvInteger's int32 bias */
        y = out0(&st->nodes[ni]);
        ni = y >= 0 ? cons[y] : -1;
    }
    if (ni < 0 || !is_op(&st->nodes[ni], "Cast")) {
        *why = "its int32 output does not go (alone) to a Cast";
        return -1;
    }
    y = out0(&st->nodes[ni]);
    ni = y >= 0 ? cons[y] : -1;
    if (ni < 0 || !is_op(&st->nodes[ni], "Mul") || st->nodes[ni].pub.n_inputs != 2) {
        *why = "the Cast's output does not go (alone) to a Mul";
        return -1;
    }
    const ox_node *mul = &st->nodes[ni];
    int64_t m = mul->io[0] == y ? mul->io[1] : mul->io[0];
    int64_t pi = m >= 0 ? prod[m] : -1;
    if (pi < 0 || !is_op(&st->nodes[pi], "Mul") || st->nodes[pi].pub.n_inputs != 2) {
        *why = "the factor it is multiplied by is not a product of two scales (a Mul)";
        return -1;
    }
    int64_t p0 = st->nodes[pi].io[0], p1 = st->nodes[pi].io[1], cand = -1;
    int64_t os = other >= 0 ? st->values[other].scale_value : -1;
    int t0 = val_tensor(st, p0) >= 0, t1 = val_tensor(st, p1) >= 0;
    if (os >= 0 && (p0 == os || p1 == os)) cand = p0 == os ? p1 : p0;
    else if (t0 != t1) cand = t0 ? p0 : p1;
    if (cand < 0 || val_tensor(st, cand) < 0) {
        *why = "which factor of the scales' product is its scale cannot be told";
        return -1;
    }
    return cand;
}

/* Integer nodes, after every other node was seen (their other operand's scale is known then):
** each code input that is a tensor gets the scale find_integer_scale finds. */
static tm_status recognize_integer(ox_ctx *c, tm_err *err) {
    ox_state *st = c->st;
    int64_t n_int = 0;
    for (int64_t i = 0; i < st->n_nodes; i++) n_int += st->nodes[i].pub.qkind == TM_QNODE_INTEGER;
    if (!n_int) return TM_OK;
    int64_t nv = st->n_values > 0 ? st->n_values : 1;
    int64_t *cons = tm__malloc_n((size_t)nv, sizeof(int64_t));
    int64_t *prod = tm__malloc_n((size_t)nv, sizeof(int64_t));
    if (!cons || !prod) {
        free(cons);
        free(prod);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    for (int64_t v = 0; v < nv; v++) cons[v] = prod[v] = -1;
    for (int64_t i = 0; i < st->n_nodes; i++) {
        const ox_node *on = &st->nodes[i];
        for (int64_t k = 0; k < on->pub.n_inputs; k++) {
            int64_t v = on->io[k];
            if (v >= 0) cons[v] = cons[v] == -1 ? i : -2;
        }
        for (int64_t k = 0; k < on->pub.n_outputs; k++) {
            int64_t v = on->io[on->pub.n_inputs + k];
            if (v >= 0 && prod[v] < 0) prod[v] = i;
        }
    }
    tm_status s = TM_OK;
    for (int64_t i = 0; i < st->n_nodes && !s; i++) {
        ox_node *on = &st->nodes[i];
        const qop_spec *q = on->pub.qkind == TM_QNODE_INTEGER ? node_spec(on) : NULL;
        for (int k = 0; q && k < 2 && !s; k++) {
            const qop_slot *sl = &q->slot[k];
            int64_t cv = in_v(on, sl->codes), ci = val_tensor(st, cv);
            if (ci < 0) continue;
            const char *why = NULL;
            int64_t sv = find_integer_scale(st, cons, prod, on, in_v(on, q->slot[1 - k].codes), &why);
            if (sv < 0) {
                s = tm__file_add_warning(c->f, err, "%s: %s '%s': '%s' not mapped to a quantized "
                                         "tensor: no scale found (%s)", c->path,
                                         on->pub.op_type, on->pub.name, tm_file_tensor(c->f, ci)->name,
                                         why);
                continue;
            }
            mark_q(st, cv, sv, in_v(on, sl->zp), 1, 0);
            s = attach(c, on, ci, val_tensor(st, sv), val_tensor(st, in_v(on, sl->zp)),
                       slot_axis(on, sl, tm_file_tensor(c->f, ci)->ndim), 0, q->layout, err);
        }
    }
    free(cons);
    free(prod);
    return s;
}

tm_status tm__ox_recognize(ox_ctx *c, int64_t *n_points, tm_err *err) {
    ox_state *st = c->st;
    tm_status s = TM_OK;
    *n_points = 0;
    for (int64_t i = 0; i < st->n_nodes && !s; i++) {
        ox_node *on = &st->nodes[i];
        switch (on->pub.qkind) {
        case TM_QNODE_DEQUANTIZE: {
            int64_t x = in_v(on, 0), sv = in_v(on, 1), zv = in_v(on, 2);
            mark_q(st, x, sv, zv, on->axis, on->block_size);
            int64_t ci = val_tensor(st, x), si = val_tensor(st, sv), zi = val_tensor(st, zv);
            if (ci >= 0 && si >= 0)
                s = attach(c, on, ci, si, zi, on->axis, on->block_size,
                           tm__ox_is_ms_domain(on->pub.domain) ? "onnx/com.microsoft.DequantizeLinear"
                                                        : "onnx/DequantizeLinear", err);
            break;
        }
        case TM_QNODE_QUANTIZE: case TM_QNODE_DYNAMIC_QUANTIZE: {
            int64_t y = on->pub.n_outputs > 0 ? on->io[on->pub.n_inputs] : -1;
            if (on->pub.qkind == TM_QNODE_QUANTIZE)
                mark_q(st, y, in_v(on, 1), in_v(on, 2), on->axis, on->block_size);
            else if (on->pub.n_outputs >= 3)
                mark_q(st, y, on->io[on->pub.n_inputs + 1], on->io[on->pub.n_inputs + 2], 1, 0);
            if (val_tensor(st, in_v(on, 0)) < 0) (*n_points)++;
            break;
        }
        case TM_QNODE_QOPERATOR: {
            const qop_spec *q = node_spec(on);
            if (q) s = recognize_qop(c, on, q, err);
            break;
        }
        case TM_QNODE_INTEGER: { /* scales: recognize_integer, below; keep a scale already known */
            int64_t a = in_v(on, 0), b = in_v(on, 1);
            mark_q(st, a, a >= 0 && st->values[a].quantized ? st->values[a].scale_value : -1,
                   in_v(on, 2), 1, 0);
            mark_q(st, b, b >= 0 && st->values[b].quantized ? st->values[b].scale_value : -1,
                   in_v(on, 3), 1, 0);
            break;
        }
        case TM_QNODE_MATMULNBITS:
            s = recognize_nbits(c, on, err);
            break;
        default: break;
        }
    }
    return s ? s : recognize_integer(c, err);
}
