/*
** tensormorph/graph.h: the architecture of a checkpoint that has one: today the graph of an ONNX
** model (nodes with op type, domain, inputs and outputs, in every subgraph), and per value that
** flows along an edge its element type, shape and quantization, so that a view can draw
** quantization boundaries on the real graph. Include after tensormorph.h.
**
** Every pointer returned here is borrowed from the tm_file and stays valid until tm_close.
** Functions taking `const tm_file *` may run concurrently once tm_open returned.
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_GRAPH_H
#define TENSORMORPH_GRAPH_H

#ifdef __cplusplus
extern "C" {
#endif

/* What a node does to quantization. */
typedef enum tm_qnode_kind {
    TM_QNODE_NONE = 0,       /* an ordinary op                                                */
    TM_QNODE_DEQUANTIZE,     /* DequantizeLinear (ai.onnx or com.microsoft): codes -> float    */
    TM_QNODE_QUANTIZE,       /* QuantizeLinear: float -> codes (an activation quantization
                                point when its input is not a listed tensor)                  */
    TM_QNODE_DYNAMIC_QUANTIZE,  /* DynamicQuantizeLinear: float -> uint8 codes, scale at run time */
    TM_QNODE_QOPERATOR,         /* QLinearConv, QLinearMatMul, QGemm: codes in, codes out (QGemm
                                without y_scale: float out); com.microsoft
                                MatMulIntegerToFloat, DynamicQuantizeMatMul, QAttention,
                                QEmbedLayerNormalization: weight codes with their scale and
                                zero point in, float out                                       */
    TM_QNODE_INTEGER,           /* MatMulInteger, ConvInteger: codes in, int32 out; the scale is
                                the one a following Cast -> Mul applies (docs/formats.md)      */
    TM_QNODE_MATMULNBITS,       /* com.microsoft MatMulNBits: float in, n-bit block weights       */
    TM_QNODE_COUNT
} tm_qnode_kind;

/* A value (an edge of the graph): a graph input/output, a node output, an initializer or a
** Constant node's output. */
typedef struct tm_graph_value {
    const char *name;
    int         elem_type;       /* ONNX TensorProto.DataType code; 0 when unknown             */
    const char *elem_type_name;  /* "FLOAT", "UINT8", "INT4", "FLOAT8E4M3FN", ...; "?" unknown */
    int         ndim;            /* -1 when the rank is unknown                                */
    int64_t     shape[TM_MAX_DIMS]; /* -1 for a symbolic or unknown dim                        */
    int64_t     tensor;          /* index of the tm_file tensor holding it, or -1              */
    int         quantized;       /* 1: carries quantized codes (output of QuantizeLinear, input
                                    of DequantizeLinear or of a QOperator's code slot)         */
    int64_t     scale_value;     /* quantized: value index of its scale, or -1                  */
    int64_t     zero_point_value;/* quantized: value index of its zero point, or -1             */
    int         axis;            /* quantized: Q/DQ axis as given (default 1)                   */
    int64_t     block_size;      /* quantized: Q/DQ block_size, 0 when not blocked              */
} tm_graph_value;

/* A node. */
typedef struct tm_graph_node {
    const char    *name;         /* may be ""                                                   */
    const char    *op_type;
    const char    *domain;       /* "" for ai.onnx                                               */
    const char    *graph;        /* "" for the main graph, else the path of the subgraph:
                                    "<node name or #index>/<attribute>[<k>]", nested with '/'  */
    int64_t        n_inputs;
    const int64_t *inputs;       /* value indices; -1 for an omitted optional input              */
    int64_t        n_outputs;
    const int64_t *outputs;
    tm_qnode_kind  qkind;
    int64_t        weight_tensor;/* the tm_file tensor this node's weight quantization was
                                    mapped onto (a tensor with ->quant), or -1                  */
} tm_graph_node;

/* tm_graph_n_nodes: nodes of the checkpoint's graph (all subgraphs, in file order, a subgraph's
** nodes right after the node that holds it); 0 for a format without a graph. */
int64_t tm_graph_n_nodes(const tm_file *f);
/* tm_graph_node_at: node i, or NULL when out of range. */
const tm_graph_node *tm_graph_node_at(const tm_file *f, int64_t i);
int64_t tm_graph_n_values(const tm_file *f);
/* tm_graph_value_at: value i, or NULL when out of range. */
const tm_graph_value *tm_graph_value_at(const tm_file *f, int64_t i);
/* tm_graph_find_value: index of the value named `name`, or -1. */
int64_t tm_graph_find_value(const tm_file *f, const char *name);
/* tm_qnode_kind_name: "none", "dequantize", "quantize", "dynamic_quantize", "qoperator",
** "integer", "matmulnbits"; never NULL. */
const char *tm_qnode_kind_name(tm_qnode_kind k);

/* tm_onnx_open_buffer: open an ONNX ModelProto held in memory (fuzzing, tests). External data
** is refused (there is no folder). The buffer must outlive the tm_file. Same returns as tm_open. */
tm_status tm_onnx_open_buffer(const void *data, size_t n_bytes, const char *name,
                              const tm_open_params *p, tm_file **out, tm_err *err);

/* ---------------------------------------------------------------------------------------- */
/* ONNX element types (src/formats/onnx_types.c)                                              */
/* ---------------------------------------------------------------------------------------- */
/* TensorProto.DataType codes [onnx/onnx.proto of ONNX >= 1.20; ONNX 1.12's schema names only
** 0..16; the field is an int32]. The one table every ONNX path (reader, writer, graph, the
** quantize job, compat) reads names and sizes from. */
typedef enum tm_onnx_elem {
    TM_ONNX_UNDEFINED = 0, TM_ONNX_FLOAT = 1, TM_ONNX_UINT8 = 2, TM_ONNX_INT8 = 3,
    TM_ONNX_UINT16 = 4, TM_ONNX_INT16 = 5, TM_ONNX_INT32 = 6, TM_ONNX_INT64 = 7,
    TM_ONNX_STRING = 8, TM_ONNX_BOOL = 9, TM_ONNX_FLOAT16 = 10, TM_ONNX_DOUBLE = 11,
    TM_ONNX_UINT32 = 12, TM_ONNX_UINT64 = 13, TM_ONNX_COMPLEX64 = 14, TM_ONNX_COMPLEX128 = 15,
    TM_ONNX_BFLOAT16 = 16, TM_ONNX_FLOAT8E4M3FN = 17, TM_ONNX_FLOAT8E4M3FNUZ = 18,
    TM_ONNX_FLOAT8E5M2 = 19, TM_ONNX_FLOAT8E5M2FNUZ = 20, TM_ONNX_UINT4 = 21, TM_ONNX_INT4 = 22,
    TM_ONNX_FLOAT4E2M1 = 23, TM_ONNX_FLOAT8E8M0 = 24, TM_ONNX_UINT2 = 25, TM_ONNX_INT2 = 26,
    TM_ONNX_ELEM_COUNT
} tm_onnx_elem;

typedef struct tm_onnx_elem_info {
    int         code;   /* the TensorProto.DataType value                                    */
    const char *name;   /* the onnx.proto enum name: "FLOAT", "INT4", "FLOAT8E4M3FN", ...     */
    int         dtype;  /* the tm_dtype holding it, or -1 when tensormorph has none           */
    int         bits;   /* storage bits per element (0: variable, STRING)                    */
} tm_onnx_elem_info;

/* tm_onnx_elem_get: the entry for code, or NULL outside 0..TM_ONNX_ELEM_COUNT-1. */
const tm_onnx_elem_info *tm_onnx_elem_get(int code);

/* tm_onnx_elem_name: the onnx.proto name of code, or `unknown` (e.g. "?") outside the table. */
const char *tm_onnx_elem_name(int code, const char *unknown);

/* tm_onnx_elem_by_name: the entry whose name is `name` (exact, upper case), or NULL. */
const tm_onnx_elem_info *tm_onnx_elem_by_name(const char *name);

#ifdef __cplusplus
}
#endif
#endif
