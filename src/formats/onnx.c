/*
** onnx.c: the ONNX reader. A model file is one serialized onnx.ModelProto (protobuf); the
** decoding itself is done by the protobuf-c code that the build generates from the system's
** onnx.proto (Debian libonnx-dev, ONNX 1.12). This file turns the decoded message into a
** tm_file and a graph (include/tensormorph/graph.h):
**
**   tensors  every initializer of every graph and subgraph, and the tensor of every Constant
**            node (attribute value / value_float(s) / value_int(s)) named by its output, in
**            every subgraph (If/Loop/Scan bodies: any GRAPH or GRAPHS attribute).
**   data     raw_data, or the typed fields (float_data, int32_data, int64_data, double_data,
**            uint64_data) converted to little-endian bytes of the tensor's dtype, are copied into
**            one buffer owned by the tm_file (an in-memory map slot "<path>#tensor-data", after
**            the file slots, so not one of tm_file_n_paths); external
**            data (data_location EXTERNAL) is mmap'd from a file in the model's folder.
**   graph    nodes (op, domain, inputs, outputs) and values (element type, shape) from
**            graph inputs/outputs/value_info and the tensors.
**   quant    recognised on the graph by onnx_qrec.c: DequantizeLinear fed by a tensor, the
**            weights of the QOperator and integer ops and com.microsoft MatMulNBits become
**            logical quantized tensors (tm_qtensor); QuantizeLinear/DynamicQuantizeLinear on
**            activations are recorded as quantization points (graph nodes and metadata
**            "onnx.activation_quantization_points").
**
** Element types (TensorProto.DataType, onnx/onnx.proto of ONNX >= 1.20; 1.12's schema names
** only 0-16, the field is an int32): 1 FLOAT, 2 UINT8, 3 INT8, 4 UINT16, 5 INT16, 6 INT32,
** 7 INT64, 8 STRING, 9 BOOL, 10 FLOAT16, 11 DOUBLE, 12 UINT32, 13 UINT64, 14 COMPLEX64,
** 15 COMPLEX128, 16 BFLOAT16, 17 FLOAT8E4M3FN, 18 FLOAT8E4M3FNUZ, 19 FLOAT8E5M2,
** 20 FLOAT8E5M2FNUZ, 21 UINT4, 22 INT4, 23 FLOAT4E2M1, 24 FLOAT8E8M0, 25 UINT2, 26 INT2.
** Sub-byte types are packed densely over the flattened tensor, element 2k in the low nibble of
** byte k (4-bit; 2-bit: element 4k+j at bits 2j); int32_data then holds one packed byte per
** entry. int32_data holds 8- and 16-bit types one element per entry (float16/bfloat16 and
** float8 as their bit patterns); uint64_data holds UINT32/UINT64.
**
** The tm_file view of a 4-bit tensor with more than one row keeps its rows byte-aligned (the
** layout tm_packing describes): when a row's length is odd the copy in the owned buffer is
** re-laid row by row. 4-bit zero points are expanded to one byte per code (sign-extended for
** INT4) and listed as I8/U8 (phys_dtype I4/U4), the form the tensor view reads zero points in.
**
** Limits: a protobuf message cannot exceed 2 GiB, so a model file larger than that is refused
** (its weights must be external). Graph nesting is limited to ONNX_MAX_DEPTH, message nesting
** to ONNX_MAX_MSG_DEPTH (measured before protobuf-c, which recurses, sees the bytes).
*/
#include "onnx_impl.h"
#include "../core/fsutil.h"
#include "tensormorph/experimental.h"

#include "onnx.pb-c.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>

#define ONNX_MAX_FILE   (2ull << 30) /* protobuf's message size limit                          */
#define ONNX_MAX_DEPTH  64           /* nested subgraphs                                         */
#define ONNX_MAX_MSG_DEPTH 512       /* nested messages of any kind (checked before decoding)    */

/* ---------------------------------------------------------------------------------------- */
/* Element types                                                                             */
/* ---------------------------------------------------------------------------------------- */

enum {
    OX_UNDEFINED = 0, OX_FLOAT = 1, OX_UINT8, OX_INT8, OX_UINT16, OX_INT16, OX_INT32, OX_INT64,
    OX_STRING, OX_BOOL, OX_FLOAT16, OX_DOUBLE, OX_UINT32, OX_UINT64, OX_COMPLEX64, OX_COMPLEX128,
    OX_BFLOAT16, OX_FLOAT8E4M3FN, OX_FLOAT8E4M3FNUZ, OX_FLOAT8E5M2, OX_FLOAT8E5M2FNUZ, OX_UINT4,
    OX_INT4, OX_FLOAT4E2M1, OX_FLOAT8E8M0, OX_UINT2, OX_INT2, OX_N_TYPES
};

/* names and sizes: the one table, tm_onnx_elem_get (onnx_types.c) */
_Static_assert((int)OX_N_TYPES == (int)TM_ONNX_ELEM_COUNT && (int)OX_INT4 == (int)TM_ONNX_INT4, "OX_* are TensorProto.DataType codes");

static int too_deep(const ProtobufCMessageDescriptor *root, const uint8_t *b, size_t n, int max);

static tm_status grow_arr(void **arr, int64_t *cap, int64_t need, size_t elem, tm_err *err) {
    if (need <= *cap) return TM_OK;
    int64_t nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *p = tm__malloc_n((size_t)nc, elem);
    if (!p) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory (%lld list items)", (long long)nc);
    if (*arr) memcpy(p, *arr, (size_t)*cap * elem);
    free(*arr);
    *arr = p;
    *cap = nc;
    return TM_OK;
}

static const char *own_str(ox_state *s, const char *str, tm_err *err) {
    if (grow_arr((void **)&s->strings, &s->cap_strings, s->n_strings + 1, sizeof(char *), err))
        return NULL;
    char *c = tm__strdup(str ? str : "");
    if (!c) { tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); return NULL; }
    s->strings[s->n_strings++] = c;
    return c;
}

/* First file offset of `name` in the serialized model: where messages point a reader to. */
static int64_t name_offset(const ox_ctx *c, const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (!c->file || n == 0 || n > c->file_len) return -1;
    for (size_t i = 0; i + n <= c->file_len; i++)
        if (c->file[i] == (uint8_t)name[0] && memcmp(c->file + i, name, n) == 0) return (int64_t)i;
    return -1;
}

/* ---------------------------------------------------------------------------------------- */
/* Values                                                                                     */
/* ---------------------------------------------------------------------------------------- */

/* Index of value `name`, created (unknown type and shape) when new. "" gives -1 (omitted). */
static tm_status value_get(ox_ctx *c, const char *name, int64_t *idx, tm_err *err) {
    ox_state *s = c->st;
    *idx = -1;
    if (!name || !*name) return TM_OK;
    json_t *j = json_object_get(s->value_index, name);
    if (j) { *idx = (int64_t)json_integer_value(j); return TM_OK; }
    tm_status st = grow_arr((void **)&s->values, &s->cap_values, s->n_values + 1,
                            sizeof(tm_graph_value), err);
    if (st) return st;
    tm_graph_value *v = &s->values[s->n_values];
    memset(v, 0, sizeof *v);
    v->name = own_str(s, name, err);
    if (!v->name) return TM_E_NOMEM;
    v->elem_type_name = "?";
    v->ndim = -1;
    v->tensor = v->scale_value = v->zero_point_value = -1;
    v->axis = 1;
    if (json_object_set_new(s->value_index, name, json_integer(s->n_values)) != 0)
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    *idx = s->n_values++;
    return TM_OK;
}

static void value_set_type(tm_graph_value *v, int elem, int ndim, const int64_t *shape) {
    if (elem > 0) {
        v->elem_type = elem;
        v->elem_type_name = tm_onnx_elem_name(elem, "?");
    }
    if (ndim >= 0 && ndim <= TM_MAX_DIMS) {
        v->ndim = ndim;
        for (int d = 0; d < ndim; d++) v->shape[d] = shape[d];
    }
}

static tm_status value_info(ox_ctx *c, const Onnx__ValueInfoProto *vi, tm_err *err) {
    if (!vi || !vi->name) return TM_OK;
    int64_t idx;
    tm_status s = value_get(c, vi->name, &idx, err);
    if (s || idx < 0) return s;
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type) return TM_OK;
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    int64_t shape[TM_MAX_DIMS];
    int ndim = -1;
    if (tt->shape && tt->shape->n_dim <= TM_MAX_DIMS) {
        ndim = (int)tt->shape->n_dim;
        for (int d = 0; d < ndim; d++) {
            const Onnx__TensorShapeProto__Dimension *dm = tt->shape->dim[d];
            shape[d] = (dm && dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
                        dm->dim_value >= 0) ? dm->dim_value : -1;
        }
    }
    tm_graph_value *v = &c->st->values[idx];
    if (v->tensor < 0) value_set_type(v, tt->has_elem_type ? tt->elem_type : 0, ndim, shape);
    return TM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Tensors                                                                                    */
/* ---------------------------------------------------------------------------------------- */

/* Parse a decimal external_data integer: digits only, fits 63 bits. */
static int parse_u63(const char *s, uint64_t *out) {
    if (!s || !*s) return 0;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return 0;
        if (v > (UINT64_MAX / 2 - 9) / 10) return 0;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return 1;
}

/* A location must name a file inside the model's folder: relative, no "..", no empty part. */
static int location_ok(const char *loc) {
    if (!loc || !*loc || loc[0] == '/') return 0;
    const char *p = loc;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 0 || (n == 2 && p[0] == '.' && p[1] == '.')) return 0;
        if (!e) break;
        p = e + 1;
    }
    return 1;
}

/* Map slot of external file `loc` (mapped once). */
static tm_status external_map(ox_ctx *c, const char *tname, const char *loc, int *slot, tm_err *err) {
    char *full = tm__aprintf("%s/%s", c->dir, loc);
    if (!full) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int i = 0; i < c->f->n_maps; i++)
        if (strcmp(c->f->maps[i].path, full) == 0) { *slot = i; free(full); return TM_OK; }
    /* the resolved file (symlinks followed) must still lie inside the model's folder */
    char *rdir = realpath(c->dir, NULL), *rfull = realpath(full, NULL);
    tm_status s = TM_OK;
    if (!rfull && errno == ENOENT) {
        s = tm__err_sys(err, ENOENT, "%s: tensor '%s': external data file '%s' (%s) is missing", c->path,
                        tname, loc, full);
    } else if (!rfull) {
        s = tm__err_sys(err, errno, "%s: tensor '%s': external data file '%s' (%s)", c->path, tname,
                        loc, full);
    } else if (!rdir || strncmp(rfull, rdir, strlen(rdir)) != 0 ||
               (rfull[strlen(rdir)] != '/' && strcmp(rdir, "/") != 0)) {
        s = tm__err_set(err, TM_E_CORRUPT, name_offset(c, loc),
                        "%s: tensor '%s': external data '%s' resolves to %s, outside the model's "
                        "folder %s",
                        c->path, tname, loc, rfull, rdir ? rdir : c->dir);
    } else {
        s = tm__file_map(c->f, full, slot, err);
        if (s) tm__err_prefix(err, "%s: tensor '%s': external data", c->path, tname);
    }
    free(rdir);
    free(rfull);
    free(full);
    return s;
}

/* Copy `need` bytes of a sub-byte tensor, densely packed over the flattened tensor in `src`,
** into dst with every row (last dim) starting on a byte boundary. */
static void relay_rows(const uint8_t *src, uint8_t *dst, int bits, int64_t rows, int64_t cols) {
    uint64_t row_bytes = ((uint64_t)cols * (uint64_t)bits + 7) / 8;
    uint64_t mask = (1u << bits) - 1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) {
            uint64_t sb = ((uint64_t)r * (uint64_t)cols + (uint64_t)j) * (uint64_t)bits;
            uint64_t db = (uint64_t)j * (uint64_t)bits;
            unsigned v = (src[sb / 8] >> (sb % 8)) & mask;
            dst[(uint64_t)r * row_bytes + db / 8] |= (uint8_t)(v << (db % 8));
        }
}

/* Add the TensorProto `t` (named `name`) as a tensor. `where` describes it for messages.
** Sets *added to 0 (with a warning) when the tensor cannot be represented. */
static tm_status add_tensor(ox_ctx *c, const Onnx__TensorProto *t, const char *name,
                            const char *where, int64_t *out_idx, tm_err *err) {
    ox_state *st = c->st;
/* where the tensor's name sits in the file, for messages: searched only when one is written */
#define NAME_OFF name_offset(c, name)
    *out_idx = -1;
    if (!name || !*name)
        return tm__err_set(err, TM_E_CORRUPT, -1, "%s: %s has no name", c->path, where);
    if (json_object_get(c->tensor_names, name))
        return tm__err_set(err, TM_E_CORRUPT, NAME_OFF,
                           "%s: tensor '%s' (%s, file byte %lld) is defined twice (ONNX names are "
                           "unique across a model and its subgraphs)",
                           c->path, name, where, (long long)NAME_OFF);
    if (json_object_set_new(c->tensor_names, name, json_true()) != 0)
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    int code = t->has_data_type ? t->data_type : 0;
    const tm_onnx_elem_info *ty = code > 0 ? tm_onnx_elem_get(code) : NULL;
    if (!ty || ty->dtype < 0) {
        c->n_skipped++;
        return tm__file_add_warning(c->f, err,
                                    "%s: tensor '%s' (%s, file byte %lld): element type %s (%d) "
                                    "has no tensormorph dtype; not listed",
                                    c->path, name, where, (long long)NAME_OFF, tm_onnx_elem_name(code, "?"), code);
    }
    if (t->segment)
        return tm__err_set(err, TM_E_UNSUPPORTED, NAME_OFF,
                           "%s: tensor '%s' (%s, file byte %lld): segmented tensors are not "
                           "supported", c->path, name, where, (long long)NAME_OFF);
    if (t->n_dims > TM_MAX_DIMS)
        return tm__err_set(err, TM_E_LIMIT, NAME_OFF,
                           "%s: tensor '%s' (%s, file byte %lld): %zu dims, more than the %d "
                           "supported", c->path, name, where, (long long)NAME_OFF, t->n_dims, TM_MAX_DIMS);
    tm_tensor tt;
    memset(&tt, 0, sizeof tt);
    tt.ndim = (int)t->n_dims;
    for (int d = 0; d < tt.ndim; d++) {
        if (t->dims[d] < 0)
            return tm__err_set(err, TM_E_CORRUPT, NAME_OFF,
                               "%s: tensor '%s' (%s, file byte %lld): negative dim dims[%d] = %lld",
                               c->path, name, where, (long long)NAME_OFF, d, (long long)t->dims[d]);
        tt.shape[d] = t->dims[d];
    }
    int ok;
    int64_t numel = tm__shape_numel(tt.ndim, tt.shape, &ok);
    uint64_t nbits;
    if (!ok || !tm__mul_u64_ok((uint64_t)numel, (uint64_t)ty->bits, &nbits))
        return tm__err_set(err, TM_E_CORRUPT, NAME_OFF,
                           "%s: tensor '%s' (%s, file byte %lld): shape overflows 64 bits", c->path,
                           name, where, (long long)NAME_OFF);
    uint64_t need = (nbits + 7) / 8; /* dense bytes in the file */
    int bits = ty->bits;
    int64_t cols = tt.ndim ? tt.shape[tt.ndim - 1] : 1;
    int64_t rows = (tt.ndim && cols) ? numel / cols : (tt.ndim ? 0 : 1);
    /* bytes in our view: sub-byte rows start on byte boundaries */
    uint64_t view_bytes = bits < 8 ? (uint64_t)rows * (((uint64_t)cols * (uint64_t)bits + 7) / 8) : need;
    int relay = bits < 8 && view_bytes != need;

    tt.name = name;
    tt.dtype = (tm_dtype)ty->dtype;
    tt.phys_dtype = tt.dtype;
    tt.phys_ndim = tt.ndim;
    memcpy(tt.phys_shape, tt.shape, sizeof tt.shape);
    tt.role = TM_ROLE_DATA;
    tt.owner = -1;
    tt.n_bytes = view_bytes;

    const uint8_t *src = NULL; /* dense bytes to copy into the arena, or NULL */
    int external = t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    uint64_t aoff = 0;
    if (external) {
        const char *loc = NULL, *soff = NULL, *slen = NULL;
        for (size_t k = 0; k < t->n_external_data; k++) {
            const Onnx__StringStringEntryProto *e = t->external_data[k];
            if (!e || !e->key) continue;
            if (!strcmp(e->key, "location")) loc = e->value;
            else if (!strcmp(e->key, "offset")) soff = e->value;
            else if (!strcmp(e->key, "length")) slen = e->value;
        }
        if (!c->dir)
            return tm__err_set(err, TM_E_UNSUPPORTED, NAME_OFF,
                               "%s: tensor '%s' (%s): external data cannot be resolved for a model "
                               "held in memory", c->path, name, where);
        if (!location_ok(loc))
            return tm__err_set(err, TM_E_CORRUPT, NAME_OFF,
                               "%s: tensor '%s' (%s, file byte %lld): external data location '%s' "
                               "must be a relative path inside the model's folder without '..'",
                               c->path, name, where, (long long)NAME_OFF, loc ? loc : "(missing)");
        uint64_t off = 0, len = need;
        if ((soff && !parse_u63(soff, &off)) || (slen && !parse_u63(slen, &len)))
            return tm__err_set(err, TM_E_CORRUPT, NAME_OFF,
                               "%s: tensor '%s' (%s, file byte %lld): external data offset '%s' / "
                               "length '%s' is not a non-negative decimal integer",
                               c->path, name, where, (long long)NAME_OFF, soff ? soff : "",
                               slen ? slen : "");
        if (len != need)
            return tm__err_set(err, TM_E_CORRUPT, NAME_OFF,
                               "%s: tensor '%s' (%s): external data length %llu but %s %s needs "
                               "%llu bytes", c->path, name, where, (unsigned long long)len,
                               ty->name, where, (unsigned long long)need);
        int slot;
        tm_status s = external_map(c, name, loc, &slot, err);
        if (s) return s;
        uint64_t end;
        uint64_t fsize = c->f->maps[slot].size;
        if (!tm__add_u64_ok(off, len, &end) || end > fsize)
            return tm__err_set(err, TM_E_CORRUPT, (int64_t)off,
                               "%s: tensor '%s' (%s): external data [%llu, +%llu) runs past the "
                               "end of %s (%llu bytes)", c->path, name, where,
                               (unsigned long long)off, (unsigned long long)len,
                               c->f->maps[slot].path, (unsigned long long)fsize);
        if (relay) {
            src = c->f->maps[slot].base + off;
        } else {
            tt.file_index = slot;
            tt.offset = off;
        }
    } else if (t->has_raw_data) {
        if ((uint64_t)t->raw_data.len != need)
            return tm__err_set(err, TM_E_CORRUPT, NAME_OFF,
                               "%s: tensor '%s' (%s, file byte %lld): raw_data has %zu bytes but "
                               "%s %s needs %llu",
                               c->path, name, where, (long long)NAME_OFF, t->raw_data.len, ty->name,
                               where, (unsigned long long)need);
        src = t->raw_data.data;
    } else {
        /* typed fields: check the entry count first (no allocation sized by the shape alone),
        ** then convert into the arena */
        size_t have = 0, want = 0;
        const char *field = "int32_data";
        switch (code) {
        case OX_FLOAT: field = "float_data"; have = t->n_float_data; want = (size_t)numel; break;
        case OX_DOUBLE: field = "double_data"; have = t->n_double_data; want = (size_t)numel; break;
        case OX_INT64: field = "int64_data"; have = t->n_int64_data; want = (size_t)numel; break;
        case OX_UINT32: case OX_UINT64:
            field = "uint64_data"; have = t->n_uint64_data; want = (size_t)numel; break;
        default: /* int32_data: INT32, 8/16-bit types one per entry, sub-byte one packed byte */
            have = t->n_int32_data;
            want = bits < 8 ? (size_t)need : (size_t)numel;
            break;
        }
        if (have != want)
            return tm__err_set(err, TM_E_CORRUPT, NAME_OFF,
                               "%s: tensor '%s' (%s, file byte %lld): %s has %zu entries but %s "
                               "%s needs %zu%s",
                               c->path, name, where, (long long)NAME_OFF, field, have, ty->name, where,
                               want, have == 0 ? " (no data at all)" : "");
        tm_status s = tm__ox_arena_alloc(st, need, &aoff, err);
        if (s) return s;
        uint8_t *dst = st->arena + aoff;
        switch (code) {
        case OX_FLOAT: if (have) memcpy(dst, t->float_data, have * 4); break;
        case OX_DOUBLE: if (have) memcpy(dst, t->double_data, have * 8); break;
        case OX_INT64: if (have) memcpy(dst, t->int64_data, have * 8); break;
        case OX_UINT32: case OX_UINT64:
            for (size_t k = 0; k < have; k++) {
                if (code == OX_UINT32) tm__st32(dst + 4 * k, (uint32_t)t->uint64_data[k]);
                else tm__st64(dst + 8 * k, t->uint64_data[k]);
            }
            break;
        default:
            for (size_t k = 0; k < have; k++) {
                uint32_t v = (uint32_t)t->int32_data[k];
                if (bits == 32) tm__st32(dst + 4 * k, v);
                else if (bits == 16) tm__st16(dst + 2 * k, (uint16_t)v);
                else dst[k] = (uint8_t)v;
            }
            break;
        }
        if (relay) {
            /* re-lay from the converted dense copy into a second arena block */
            uint64_t roff;
            if ((s = tm__ox_arena_alloc(st, view_bytes, &roff, err))) return s;
            relay_rows(st->arena + aoff, st->arena + roff, bits, rows, cols);
            aoff = roff;
        }
        tt.file_index = ARENA_SLOT;
        tt.offset = aoff;
    }
    if (src) {
        tm_status s = tm__ox_arena_alloc(st, view_bytes, &aoff, err);
        if (s) return s;
        if (relay) relay_rows(src, st->arena + aoff, bits, rows, cols);
        else if (need) memcpy(st->arena + aoff, src, (size_t)need);
        tt.file_index = ARENA_SLOT;
        tt.offset = aoff;
    }
    int64_t idx;
    tm_status s = tm__file_add_tensor(c->f, &tt, &idx, err);
    if (s) return s;
    int64_t vi;
    if ((s = value_get(c, name, &vi, err))) return s;
    tm_graph_value *v = &st->values[vi];
    v->tensor = idx;
    value_set_type(v, code, tt.ndim, tt.shape);
    *out_idx = idx;
    return TM_OK;
#undef NAME_OFF
}

/* A Constant node's value_float(s)/value_int(s) as a tensor. */
static tm_status add_scalar_const(ox_ctx *c, const Onnx__AttributeProto *a, const char *name,
                                  const char *where, tm_err *err) {
    Onnx__TensorProto t = ONNX__TENSOR_PROTO__INIT;
    int64_t one = 0;
    t.has_data_type = 1;
    /* value_float / value_int: a scalar; value_floats / value_ints (any other name): 1-D */
    const int is_float = !strcmp(a->name, "value_float") || !strcmp(a->name, "value_floats");
    const int is_list = strcmp(a->name, "value_float") && strcmp(a->name, "value_int");
    t.data_type = is_float ? OX_FLOAT : OX_INT64;
    if (is_float) {
        t.n_float_data = is_list ? a->n_floats : 1;
        t.float_data = is_list ? a->floats : (float *)&a->f;
    } else {
        t.n_int64_data = is_list ? a->n_ints : 1;
        t.int64_data = is_list ? a->ints : (int64_t *)&a->i;
    }
    if (is_list) {
        one = (int64_t)(is_float ? a->n_floats : a->n_ints);
        t.n_dims = 1;
        t.dims = &one;
    }
    int64_t idx;
    return add_tensor(c, &t, name, where, &idx, err);
}

/* ---------------------------------------------------------------------------------------- */
/* Graphs                                                                                      */
/* ---------------------------------------------------------------------------------------- */

static int64_t attr_int(const Onnx__NodeProto *n, const char *name, int64_t dflt, int *found) {
    if (found) *found = 0;
    for (size_t k = 0; k < n->n_attribute; k++) {
        const Onnx__AttributeProto *a = n->attribute[k];
        if (a && a->name && !strcmp(a->name, name) && a->has_i) {
            if (found) *found = 1;
            return a->i;
        }
    }
    return dflt;
}

static tm_status walk_graph(ox_ctx *c, const Onnx__GraphProto *g, const char *gpath, int depth,
                            tm_err *err);

static tm_status walk_node(ox_ctx *c, const Onnx__NodeProto *n, size_t ni, const char *gpath,
                           int depth, tm_err *err) {
    ox_state *st = c->st;
    tm_status s = grow_arr((void **)&st->nodes, &st->cap_nodes, st->n_nodes + 1, sizeof(ox_node), err);
    if (s) return s;
    int64_t me = st->n_nodes++;
    ox_node *on = &st->nodes[me];
    memset(on, 0, sizeof *on);
    const char *op = n->op_type ? n->op_type : "";
    on->pub.name = own_str(st, n->name, err);
    on->pub.op_type = own_str(st, op, err);
    on->pub.domain = own_str(st, n->domain, err);
    on->pub.graph = own_str(st, gpath, err);
    if (!on->pub.name || !on->pub.op_type || !on->pub.domain || !on->pub.graph) return TM_E_NOMEM;
    on->pub.weight_tensor = -1;
    on->pub.qkind = tm__ox_node_qkind(op, n->domain);
    on->axis = (int)attr_int(n, "axis", 1, &on->has_axis);
    on->block_size = attr_int(n, "block_size", 0, NULL);
    on->trans_b = attr_int(n, "transB", 0, NULL);
    on->k = attr_int(n, "K", 0, NULL);
    on->n = attr_int(n, "N", 0, NULL);
    on->bits = attr_int(n, "bits", 4, NULL);
    on->nbits_block = attr_int(n, "block_size", 0, NULL);
    on->out_dtype = (int32_t)attr_int(n, "output_dtype", 0, NULL);
    size_t nio = n->n_input + n->n_output;
    on->io = tm__malloc_n(nio ? nio : 1, sizeof(int64_t));
    if (!on->io) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    on->pub.n_inputs = (int64_t)n->n_input;
    on->pub.n_outputs = (int64_t)n->n_output;
    /* Constant first, so its output value carries the tensor's type */
    if (!strcmp(op, "Constant") && tm__ox_is_onnx_domain(n->domain) && n->n_output >= 1) {
        const char *out = n->output[0];
        char where[96];
        snprintf(where, sizeof where, "Constant node #%zu", ni);
        for (size_t k = 0; k < n->n_attribute; k++) {
            const Onnx__AttributeProto *a = n->attribute[k];
            if (!a || !a->name) continue;
            int64_t idx;
            if (!strcmp(a->name, "value") && a->t) {
                s = add_tensor(c, a->t, out, where, &idx, err);
                if (!s) c->n_const++;
            } else if (!strcmp(a->name, "value_float") || !strcmp(a->name, "value_floats") ||
                       !strcmp(a->name, "value_int") || !strcmp(a->name, "value_ints")) {
                s = add_scalar_const(c, a, out, where, err);
                if (!s) c->n_const++;
            } else if (!strcmp(a->name, "sparse_value") || !strcmp(a->name, "value_string") ||
                       !strcmp(a->name, "value_strings")) {
                c->n_skipped++;
                s = tm__file_add_warning(c->f, err,
                                         "%s: %s '%s': %s constants are not listed", c->path, where,
                                         out, a->name);
            }
            if (s) return s;
        }
    }
    for (size_t k = 0; k < n->n_input; k++)
        if ((s = value_get(c, n->input[k], &st->nodes[me].io[k], err))) return s;
    for (size_t k = 0; k < n->n_output; k++)
        if ((s = value_get(c, n->output[k], &st->nodes[me].io[n->n_input + k], err))) return s;
    /* subgraphs: If then/else, Loop/Scan body, anything GRAPH/GRAPHS */
    for (size_t k = 0; k < n->n_attribute; k++) {
        const Onnx__AttributeProto *a = n->attribute[k];
        if (!a) continue;
        char sub[512];
        if (a->g) {
            if (n->name && *n->name)
                snprintf(sub, sizeof sub, "%s%s%s/%s", gpath, *gpath ? "/" : "", n->name,
                         a->name ? a->name : "?");
            else
                snprintf(sub, sizeof sub, "%s%s#%zu/%s", gpath, *gpath ? "/" : "", ni,
                         a->name ? a->name : "?");
            if ((s = walk_graph(c, a->g, sub, depth + 1, err))) return s;
        }
        for (size_t j = 0; j < a->n_graphs; j++) {
            if (n->name && *n->name)
                snprintf(sub, sizeof sub, "%s%s%s/%s[%zu]", gpath, *gpath ? "/" : "", n->name,
                         a->name ? a->name : "?", j);
            else
                snprintf(sub, sizeof sub, "%s%s#%zu/%s[%zu]", gpath, *gpath ? "/" : "", ni,
                         a->name ? a->name : "?", j);
            if (a->graphs[j] && (s = walk_graph(c, a->graphs[j], sub, depth + 1, err))) return s;
        }
    }
    return TM_OK;
}

/* The TensorProto in file `path` becomes the tensor of graph input `name`. */
static tm_status bind_input(ox_ctx *c, const char *name, const char *path, tm_err *err) {
    int slot;
    tm_status s = tm__file_map(c->f, path, &slot, err);
    if (s) return s;
    const tm__map *m = &c->f->maps[slot];
    if (m->size > ONNX_MAX_FILE)
        return tm__err_set(err, TM_E_LIMIT, 0, "%s: more than 2 GiB", path);
    Onnx__TensorProto *tp = too_deep(&onnx__tensor_proto__descriptor, m->base, (size_t)m->size,
                                     ONNX_MAX_MSG_DEPTH)
                                ? NULL
                                : onnx__tensor_proto__unpack(NULL, (size_t)m->size, m->base);
    if (!tp)
        return tm__err_set(err, TM_E_CORRUPT, 0,
                           "%s: the %llu bytes do not decode as an onnx.TensorProto (malformed or "
                           "truncated protobuf)", path, (unsigned long long)m->size);
    char where[600];
    snprintf(where, sizeof where, "TensorProto %s bound to graph input", path);
    int64_t idx;
    s = add_tensor(c, tp, name, where, &idx, err);
    onnx__tensor_proto__free_unpacked(tp, NULL);
    return s;
}

static tm_status walk_graph(ox_ctx *c, const Onnx__GraphProto *g, const char *gpath, int depth,
                            tm_err *err) {
    if (depth > ONNX_MAX_DEPTH)
        return tm__err_set(err, TM_E_LIMIT, -1, "%s: subgraph %s nests deeper than %d levels",
                           c->path, gpath, ONNX_MAX_DEPTH);
    tm_status s;
    char where[600];
    for (size_t k = 0; k < g->n_initializer; k++) {
        const Onnx__TensorProto *t = g->initializer[k];
        if (!t) continue;
        snprintf(where, sizeof where, "initializer #%zu of graph '%s'", k, *gpath ? gpath : "main");
        int64_t idx;
        if ((s = add_tensor(c, t, t->name, where, &idx, err))) return s;
        if (idx >= 0) c->n_init++;
    }
    if (g->n_sparse_initializer) {
        c->n_skipped += (int64_t)g->n_sparse_initializer;
        if ((s = tm__file_add_warning(c->f, err, "%s: graph '%s': %zu sparse initializers are not "
                                      "listed", c->path, *gpath ? gpath : "main",
                                      g->n_sparse_initializer)))
            return s;
    }
    for (int k = 0; depth == 0 && k < c->n_bound; k++) {
        if ((size_t)k >= g->n_input || !g->input[k] || !g->input[k]->name)
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "%s: %d tensors bound but the graph has "
                               "%zu inputs", c->path, c->n_bound, g->n_input);
        if ((s = bind_input(c, g->input[k]->name, c->bound[k], err))) return s;
    }
    for (size_t k = 0; k < g->n_input; k++) if ((s = value_info(c, g->input[k], err))) return s;
    for (size_t k = 0; k < g->n_output; k++) if ((s = value_info(c, g->output[k], err))) return s;
    for (size_t k = 0; k < g->n_value_info; k++)
        if ((s = value_info(c, g->value_info[k], err))) return s;
    for (size_t k = 0; k < g->n_node; k++)
        if (g->node[k] && (s = walk_node(c, g->node[k], k, gpath, depth, err))) return s;
    return TM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Opening                                                                                    */
/* ---------------------------------------------------------------------------------------- */

static tm_status add_meta_fmt(tm_file *f, const char *key, tm_err *err, const char *fmt, ...)
    TM_PRINTF(4, 5);
static tm_status add_meta_fmt(tm_file *f, const char *key, tm_err *err, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return tm__file_add_meta(f, key, buf, err);
}

/* protobuf-c decodes nested messages recursively without a depth limit, so a small file of
** deeply nested subgraphs (or TypeProtos) would exhaust the stack. Before it runs, the nesting
** depth is measured: only tags and lengths are read, and which fields are messages is looked
** up in protobuf-c's generated descriptors; values are never decoded here. Bytes this walk
** cannot follow are left for protobuf-c to reject. Returns 1 when the depth exceeds `max`. */

static int wire_varint(const uint8_t *b, size_t end, size_t *pos, uint64_t *v) {
    uint64_t r = 0;
    for (int sh = 0; sh < 64 && *pos < end; sh += 7) {
        uint8_t x = b[(*pos)++];
        r |= (uint64_t)(x & 0x7f) << sh;
        if (!(x & 0x80)) { *v = r; return 1; }
    }
    return 0;
}

static int too_deep(const ProtobufCMessageDescriptor *root, const uint8_t *b, size_t n, int max) {
    struct { const ProtobufCMessageDescriptor *d; size_t end; } st[ONNX_MAX_MSG_DEPTH + 1];
    if (max > ONNX_MAX_MSG_DEPTH) max = ONNX_MAX_MSG_DEPTH;
    int depth = 0;
    size_t pos = 0;
    st[0].d = root;
    st[0].end = n;
    while (depth >= 0) {
        if (pos >= st[depth].end) {
            if (pos > st[depth].end) return 0;
            depth--;
            continue;
        }
        uint64_t tag, len;
        if (!wire_varint(b, st[depth].end, &pos, &tag)) return 0;
        switch (tag & 7) {
        case 0: if (!wire_varint(b, st[depth].end, &pos, &len)) return 0; break;
        case 1: pos += 8; break;
        case 5: pos += 4; break;
        case 2: {
            if (!wire_varint(b, st[depth].end, &pos, &len) || len > st[depth].end - pos) return 0;
            const ProtobufCFieldDescriptor *fd =
                tag >> 3 <= UINT32_MAX
                    ? protobuf_c_message_descriptor_get_field(st[depth].d, (unsigned)(tag >> 3))
                    : NULL;
            if (fd && fd->type == PROTOBUF_C_TYPE_MESSAGE && fd->descriptor) {
                if (depth + 1 > max) return 1;
                depth++;
                st[depth].d = fd->descriptor;
                st[depth].end = pos + (size_t)len;
            } else {
                pos += (size_t)len;
            }
            break;
        }
        default: return 0;
        }
    }
    return 0;
}

/* Shared tail: walk the model in map slot 0 and finish the tm_file. */
static tm_status parse_model(ox_ctx *c, const tm_open_params *p, tm_err *err) {
    tm_file *f = c->f;
    const tm__map *m = &f->maps[0];
    if (m->size > ONNX_MAX_FILE)
        return tm__err_set(err, TM_E_LIMIT, 0,
                           "%s: %llu bytes, more than the 2 GiB a protobuf message may hold", c->path,
                           (unsigned long long)m->size);
    if (too_deep(&onnx__model_proto__descriptor, m->base, (size_t)m->size, ONNX_MAX_MSG_DEPTH))
        return tm__err_set(err, TM_E_LIMIT, 0,
                           "%s: messages nest more than %d deep (subgraphs or types); refused "
                           "before decoding", c->path, ONNX_MAX_MSG_DEPTH);
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, (size_t)m->size, m->base);
    if (!mp)
        return tm__err_set(err, TM_E_CORRUPT, 0,
                           "%s: not a valid ONNX model: the %llu bytes do not decode as an "
                           "onnx.ModelProto (malformed or truncated protobuf; protobuf-c reports "
                           "no position)",
                           c->path, (unsigned long long)m->size);
    c->file = m->base;
    c->file_len = (size_t)m->size;
    tm_status s = TM_OK;
    if (!mp->graph) {
        s = tm__err_set(err, TM_E_CORRUPT, 0, "%s: ModelProto has no graph (not an ONNX model)",
                        c->path);
        goto done;
    }
    if ((s = add_meta_fmt(f, "onnx.ir_version", err, "%lld", (long long)mp->ir_version))) goto done;
    if (mp->producer_name &&
        (s = add_meta_fmt(f, "onnx.producer", err, "%s%s%s", mp->producer_name,
                          mp->producer_version && *mp->producer_version ? " " : "",
                          mp->producer_version ? mp->producer_version : "")))
        goto done;
    for (size_t k = 0; k < mp->n_opset_import; k++) {
        const Onnx__OperatorSetIdProto *o = mp->opset_import[k];
        if (!o) continue;
        char key[256];
        snprintf(key, sizeof key, "onnx.opset.%s",
                 o->domain && *o->domain ? o->domain : "ai.onnx");
        if ((s = add_meta_fmt(f, key, err, "%lld", (long long)o->version))) goto done;
    }
    for (size_t k = 0; k < mp->n_metadata_props; k++) {
        const Onnx__StringStringEntryProto *e = mp->metadata_props[k];
        if (!e || !e->key) continue;
        char key[256];
        snprintf(key, sizeof key, "onnx.metadata.%s", e->key);
        if ((s = tm__file_add_meta(f, key, e->value ? e->value : "", err))) goto done;
    }
    if ((s = walk_graph(c, mp->graph, "", 0, err))) goto done;
    tm__ox_infer_types(c->st, value_set_type);
    int64_t n_points = 0;
    if (!p->no_recognize && (s = tm__ox_recognize(c, &n_points, err))) goto done;
    if ((s = add_meta_fmt(f, "onnx.initializers", err, "%lld", (long long)c->n_init))) goto done;
    if ((s = add_meta_fmt(f, "onnx.constant_tensors", err, "%lld", (long long)c->n_const))) goto done;
    if ((s = add_meta_fmt(f, "onnx.nodes", err, "%lld", (long long)c->st->n_nodes))) goto done;
    if (!p->no_recognize &&
        (s = add_meta_fmt(f, "onnx.activation_quantization_points", err, "%lld", (long long)n_points)))
        goto done;
done:
    onnx__model_proto__free_unpacked(mp, NULL);
    return s;
}

/* Give the arena its map slot and point arena tensors at it; build the name index. */
static tm_status finish(ox_ctx *c, tm_err *err) {
    tm_file *f = c->f;
    ox_state *st = c->st;
    int slot = -1;
    char *nm = tm__aprintf("%s#tensor-data", c->path);
    if (!nm) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (!st->arena && !(st->arena = malloc(1))) {
        free(nm);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    /* the file adopts the buffer (an in-memory slot: not one of its paths) */
    uint8_t *arena = st->arena;
    st->arena = NULL;
    tm_status s = tm__file_add_buffer_owned(f, nm, arena, (size_t)st->arena_len, &slot, err);
    free(nm);
    if (s) return s;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        tm_tensor *t = &f->tensors[i];
        if (t->file_index == ARENA_SLOT) t->file_index = slot;
        if (t->phys_ndim == -1) { /* an expanded 4-bit zero point: one byte per code */
            t->phys_ndim = t->ndim;
            memcpy(t->phys_shape, t->shape, sizeof t->shape);
            t->phys_dtype = t->dtype;
            t->dtype = t->dtype == TM_I4 ? TM_I8 : TM_U8;
        }
    }
    for (int64_t i = 0; i < st->n_nodes; i++) {
        st->nodes[i].pub.inputs = st->nodes[i].io;
        st->nodes[i].pub.outputs = st->nodes[i].io + st->nodes[i].pub.n_inputs;
    }
    return tm__file_finish(f, err);
}

static tm_status ctx_init(ox_ctx *c, tm_file *f, const char *path, tm_err *err) {
    memset(c, 0, sizeof *c);
    c->f = f;
    c->path = path;
    c->st = calloc(1, sizeof *c->st);
    c->tensor_names = json_object();
    if (!c->st || !c->tensor_names || !(c->st->value_index = json_object())) {
        if (c->st) { json_decref(c->st->value_index); free(c->st); c->st = NULL; }
        json_decref(c->tensor_names);
        c->tensor_names = NULL; /* ox_open_end frees it again otherwise */
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    f->fmt_state = c->st;
    f->fmt_free = tm__ox_state_free;
    return TM_OK;
}

int tm__onnx_probe(const uint8_t *head, size_t n, const char *path) {
    size_t l = path ? strlen(path) : 0;
    if (l > 5 && !strcmp(path + l - 5, ".onnx")) return 1;
    /* ModelProto as exporters write it: field 1 (ir_version, varint 1..20) first, then
    ** producer_name (2), opset_import (8) or graph (7) */
    if (n < 3 || head[0] != 0x08 || head[1] < 1 || head[1] > 20) return 0;
    return head[2] == 0x12 || head[2] == 0x3a || head[2] == 0x42 || head[2] == 0x1a ||
           head[2] == 0x22 || head[2] == 0x28 || head[2] == 0x32;
}

/* The start of the openers of a file: a new ONNX tm_file in c->f with path mapped as its
** first slot, c->path its name. On failure c is still fit for ox_open_end (c->f may be NULL). */
static tm_status ox_open_map(ox_ctx *c, const char *path, tm_err *err) {
    tm_file *f = tm__file_new(TM_FMT_ONNX);
    if (!f) {
        memset(c, 0, sizeof *c);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    int slot;
    tm_status s = ctx_init(c, f, path, err);
    if (!s) s = tm__file_map(f, path, &slot, err);
    if (!s) c->path = f->maps[0].path;
    return s;
}

/* The end of every opener: finish the file when s is TM_OK, free the context (the file keeps
** its state), and hand the file to *out, or close it and return the error. */
static tm_status ox_open_end(ox_ctx *c, tm_status s, tm_file **out, tm_err *err) {
    if (!s) s = finish(c, err);
    json_decref(c->tensor_names);
    free(c->dir);
    if (s) {
        tm_close(c->f);
        return s;
    }
    *out = c->f;
    return TM_OK;
}

tm_status tm__onnx_open(const char *path, const tm_open_params *p, tm_file **out, tm_err *err) {
    tm_open_params defp = tm_open_params_default();
    if (!p) p = &defp;
    *out = NULL;
    ox_ctx c;
    tm_status s = ox_open_map(&c, path, err);
    if (!s) {
        c.dir = tm__dirname(path);
        if (!c.dir) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    if (!s) s = parse_model(&c, p, err);
    return ox_open_end(&c, s, out, err);
}

tm_status tm_onnx_open_bound(const char *path, int n_inputs, const char *const *input_paths,
                             tm_file **out, tm_err *err) {
    tm_err_clear(err);
    *out = NULL;
    if (n_inputs < 0 || (n_inputs && !input_paths))
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "bad bound inputs");
    tm_open_params p = tm_open_params_default();
    ox_ctx c;
    tm_status s = ox_open_map(&c, path, err);
    if (!s) {
        c.n_bound = n_inputs;
        c.bound = input_paths;
        c.dir = tm__dirname(path);
        if (!c.dir) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    if (!s) s = parse_model(&c, &p, err);
    return ox_open_end(&c, s, out, err);
}

tm_status tm_onnx_open_buffer(const void *data, size_t n, const char *name, const tm_open_params *p,
                              tm_file **out, tm_err *err) {
    tm_err_clear(err);
    tm_open_params defp = tm_open_params_default();
    if (!p) p = &defp;
    *out = NULL;
    if (!data && n) return tm__err_set(err, TM_E_INVALID_ARG, -1, "NULL buffer of %zu bytes", n);
    tm_file *f = tm__file_new(TM_FMT_ONNX);
    if (!f) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    ox_ctx c;
    int slot;
    tm_status s = ctx_init(&c, f, name ? name : "<buffer>", err);
    if (!s) s = tm__file_add_buffer(f, name ? name : "<buffer>", data, n, &slot, err);
    if (!s) { c.path = f->maps[0].path; s = parse_model(&c, p, err); }
    return ox_open_end(&c, s, out, err);
}

tm_status tm_onnx_open_tensor(const char *path, tm_file **out, tm_err *err) {
    tm_err_clear(err);
    *out = NULL;
    ox_ctx c;
    tm_status s = ox_open_map(&c, path, err);
    tm_file *f = c.f;
    Onnx__TensorProto *tp = NULL;
    if (!s) {
        c.file = f->maps[0].base;
        c.file_len = (size_t)f->maps[0].size;
        if (f->maps[0].size > ONNX_MAX_FILE)
            s = tm__err_set(err, TM_E_LIMIT, 0, "%s: more than 2 GiB", path);
        else if (too_deep(&onnx__tensor_proto__descriptor, f->maps[0].base,
                          (size_t)f->maps[0].size, ONNX_MAX_MSG_DEPTH) ||
                 !(tp = onnx__tensor_proto__unpack(NULL, (size_t)f->maps[0].size, f->maps[0].base)))
            s = tm__err_set(err, TM_E_CORRUPT, 0,
                            "%s: the %llu bytes do not decode as an onnx.TensorProto (malformed or "
                            "truncated protobuf)", path, (unsigned long long)f->maps[0].size);
    }
    if (!s) {
        int64_t idx;
        s = add_tensor(&c, tp, tp->name && *tp->name ? tp->name : "tensor", "TensorProto", &idx, err);
        if (!s && idx < 0)
            s = tm__err_set(err, TM_E_UNSUPPORTED, 0, "%s: %s", path,
                            f->n_warnings ? f->warnings[f->n_warnings - 1] : "tensor not listed");
    }
    if (tp) onnx__tensor_proto__free_unpacked(tp, NULL);
    return ox_open_end(&c, s, out, err);
}
