/*
** onnx_types.c: the ONNX element-type table (include/tensormorph/graph.h "ONNX element types"),
** TensorProto.DataType of onnx/onnx.proto (ONNX >= 1.20).
*/
#include "tensormorph.h"
#include "tensormorph/graph.h"

#include <string.h>

static const tm_onnx_elem_info k_elems[TM_ONNX_ELEM_COUNT] = {
#define E(code, dtype, bits) [TM_ONNX_##code] = {TM_ONNX_##code, #code, dtype, bits}
    E(UNDEFINED, -1, 0),          E(FLOAT, TM_F32, 32),       E(UINT8, TM_U8, 8),
    E(INT8, TM_I8, 8),            E(UINT16, TM_U16, 16),      E(INT16, TM_I16, 16),
    E(INT32, TM_I32, 32),         E(INT64, TM_I64, 64),       E(STRING, -1, 0),
    E(BOOL, TM_BOOL, 8),          E(FLOAT16, TM_F16, 16),     E(DOUBLE, TM_F64, 64),
    E(UINT32, TM_U32, 32),        E(UINT64, TM_U64, 64),      E(COMPLEX64, -1, 64),
    E(COMPLEX128, -1, 128),       E(BFLOAT16, TM_BF16, 16),   E(FLOAT8E4M3FN, TM_F8_E4M3, 8),
    E(FLOAT8E4M3FNUZ, -1, 8),     E(FLOAT8E5M2, TM_F8_E5M2, 8), E(FLOAT8E5M2FNUZ, -1, 8),
    E(UINT4, TM_U4, 4),           E(INT4, TM_I4, 4),          E(FLOAT4E2M1, -1, 4),
    E(FLOAT8E8M0, TM_F8_E8M0, 8), E(UINT2, -1, 2),            E(INT2, -1, 2),
#undef E
};
_Static_assert(sizeof k_elems / sizeof k_elems[0] == TM_ONNX_ELEM_COUNT && TM_ONNX_INT2 == 26,
               "one entry per TensorProto.DataType");

const tm_onnx_elem_info *tm_onnx_elem_get(int code) {
    return code >= 0 && code < TM_ONNX_ELEM_COUNT ? &k_elems[code] : NULL;
}

const char *tm_onnx_elem_name(int code, const char *unknown) {
    const tm_onnx_elem_info *e = tm_onnx_elem_get(code);
    return e ? e->name : unknown;
}

const tm_onnx_elem_info *tm_onnx_elem_by_name(const char *name) {
    for (int k = 0; name && k < TM_ONNX_ELEM_COUNT; k++)
        if (!strcmp(k_elems[k].name, name)) return &k_elems[k];
    return NULL;
}
