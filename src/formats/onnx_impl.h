/*
** onnx_impl.h: what the ONNX reader's files share (internal). onnx.c decodes the ModelProto
** into tensors and a graph (ox_state, onnx_state.c); onnx_qrec.c recognises quantization on
** that graph and maps it onto logical quantized tensors (tm_qtensor); onnx_graph.c serves it
** through graph.h. Calls go onnx.c -> onnx_qrec.c -> onnx_state.c (no cycle). Not public API.
*/
#ifndef TM_FORMATS_ONNX_IMPL_H
#define TM_FORMATS_ONNX_IMPL_H
#include "file.h"
#include "tensormorph/graph.h"

#include <jansson.h>

typedef struct ox_node {
    tm_graph_node pub;
    int64_t      *io;          /* inputs then outputs (value indices)                     */
    int           axis;        /* Q/DQ attribute axis (default 1)                         */
    int64_t       block_size;  /* Q/DQ block_size (0)                                     */
    int           has_axis;
    int64_t       trans_b;     /* QGemm transB                                            */
    int64_t       k, n, bits, nbits_block; /* MatMulNBits K, N, bits, block_size          */
    int32_t       out_dtype;   /* QuantizeLinear output_dtype (0 when absent)             */
} ox_node;

typedef struct ox_state {
    ox_node        *nodes;   int64_t n_nodes, cap_nodes;
    tm_graph_value *values;  int64_t n_values, cap_values;
    char          **strings; int64_t n_strings, cap_strings; /* owned strings              */
    json_t         *value_index;   /* name -> value index                                  */
    uint8_t        *arena;   uint64_t arena_len, arena_cap;  /* owned tensor data          */
} ox_state;

/* Parse context for one model. */
typedef struct ox_ctx {
    tm_file    *f;
    ox_state   *st;
    const char *path;       /* model path as opened (messages)                          */
    char       *dir;        /* folder external data must stay in; NULL: buffer/no folder */
    const uint8_t *file;    /* the serialized bytes (to locate names for messages)       */
    size_t      file_len;
    json_t     *tensor_names; /* name -> 1, duplicate detection                         */
    int64_t     n_init, n_const; /* counts for metadata                                  */
    int64_t     n_skipped;
    int         n_bound;      /* tm_onnx_open_bound: TensorProto files bound to graph inputs */
    const char *const *bound;
} ox_ctx;

#define ARENA_SLOT (-2) /* file_index of tensors whose bytes sit in the arena (patched at end) */

/* onnx_state.c */
/* tm__ox_state_free: the tm_file's fmt_free for an ONNX graph (also tells an ONNX state apart). */
void      tm__ox_state_free(void *p);
/* tm__ox_arena_alloc: reserve n bytes in the arena (8-byte aligned start); *off gets their offset.
** Returns TM_OK | TM_E_LIMIT | TM_E_NOMEM. The arena may move: re-fetch pointers into it. */
tm_status tm__ox_arena_alloc(ox_state *s, uint64_t n, uint64_t *off, tm_err *err);
/* Sets a value's element type (when elem > 0, with its name) and shape (ndim >= 0): onnx.c's,
** handed to tm__ox_infer_types so that the element-type table stays in onnx.c. */
typedef void (*tm__ox_set_type_fn)(tm_graph_value *v, int elem, int ndim, const int64_t *shape);

/* onnx_qrec.c */
/* tm__ox_is_onnx_domain: "" / NULL / "ai.onnx". tm__ox_is_ms_domain: "com.microsoft". */
int        tm__ox_is_onnx_domain(const char *d);
int        tm__ox_is_ms_domain(const char *d);
/* tm__ox_node_qkind: what an op of that type and domain does to quantization. */
tm_qnode_kind tm__ox_node_qkind(const char *op, const char *dom);
/* tm__ox_infer_types: output element types (and shapes) of the quantization ops, as their specs
** define them, where value_info did not give them. */
void       tm__ox_infer_types(ox_state *st, tm__ox_set_type_fn set_type);
/* tm__ox_recognize: map the weight quantization of every node onto the tensors (tm_qtensor),
** mark quantized values; *n_points gets the activation quantization points. A combination that
** cannot be represented is a warning, not an error. Returns TM_OK | TM_E_NOMEM | TM_E_LIMIT. */
tm_status  tm__ox_recognize(ox_ctx *c, int64_t *n_points, tm_err *err);

#endif
