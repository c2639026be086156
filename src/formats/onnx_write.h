/*
** onnx_write.h: an ONNX model decoded for rewriting (protobuf-c code generated from
** onnx.proto, as the reader uses): its weight-consuming ops, the float weights they read, and
** the edit that puts a DequantizeLinear in front of a weight. Edits are kept beside the decoded
** message and spliced in only while packing (then taken out again), so the decoded message is
** always freed by protobuf-c exactly as it was allocated. Used by src/job/onnx_job.c.
*/
#ifndef TM_FORMATS_ONNX_WRITE_H
#define TM_FORMATS_ONNX_WRITE_H
#include "../core/core.h"

#include "tensormorph/graph.h" /* TM_ONNX_* element type codes */

typedef struct tm__oxmodel tm__oxmodel;

/* One candidate weight: a tensor read as input 1 of Conv/ConvTranspose/MatMul/Gemm. */
typedef struct tm__oxweight {
    const char *name;
    const char *graph;          /* "" main graph, else "node/attr" (as the reader names it)  */
    int         constant_node;  /* 1: a Constant node's `value`, 0: an initializer           */
    int         elem_type;      /* ONNX data type code                                       */
    int         ndim;
    int64_t     shape[8];
    int         external;       /* data_location EXTERNAL                                    */
    int         graph_input;    /* also listed as an input of some graph                     */
    char        consumers[160]; /* distinct op types, comma separated                        */
    int         axis;           /* the consumers' channel axis; -2 when they disagree         */
    int         only_matmul;    /* every consumer is MatMul                                  */
    int         name_clash;     /* <name>_quantized/_scale/_zero_point/... already exists     */
} tm__oxweight;

/* tm__ox_load: read and decode the model file `path` (at most 2 GiB: protobuf's limit).
** Returns TM_OK | TM_E_IO | TM_E_LIMIT | TM_E_CORRUPT | TM_E_NOMEM. */
tm_status tm__ox_load(const char *path, tm__oxmodel **out, tm_err *err);
void      tm__ox_free(tm__oxmodel *m);

/* The candidate weights, in graph order (depth first); valid until tm__ox_free. */
int64_t             tm__ox_n_weights(const tm__oxmodel *m);
const tm__oxweight *tm__ox_weight(const tm__oxmodel *m, int64_t i);
/* 1 when some tensor of the model (any graph) keeps its data in an external file; *name gets it */
int                 tm__ox_has_external(const tm__oxmodel *m, const char **name);

/* ai.onnx ("" domain) opset version imported, 0 when none; the IR version. */
int64_t   tm__ox_opset(const tm__oxmodel *m, const char *domain);
int64_t   tm__ox_ir_version(const tm__oxmodel *m);

/* The first ai.onnx node (any graph) whose op changes meaning between opsets from and to
** (tm_onnx_op_stable); 0 when none. *op, *node, *graph and *changed_at describe it. */
int       tm__ox_first_unstable(const tm__oxmodel *m, int64_t from, int64_t to, const char **op,
                                const char **node, const char **graph, int64_t *changed_at);

/* Quantized replacement of weight i. */
typedef struct tm__oxq {
    int            code_type;   /* TM_ONNX_INT8 / UINT8 / INT4 / UINT4                         */
    const uint8_t *codes;       /* one code per byte (tensormorph/quant.h), n_elems of them   */
    const float   *scale;       /* n_params                                                   */
    const int32_t *zero_point;  /* n_params                                                   */
    int            pndim;       /* scale/zero-point rank (0: per-tensor scalar)               */
    int64_t        pshape[8];
    int64_t        n_params;
    int            axis;        /* written when has_axis                                      */
    int            has_axis;
    int64_t        block_size;  /* > 0: block_size attribute                                  */
    const char    *domain;      /* "" or "com.microsoft"                                      */
    int            cast_to;     /* 0, or the ONNX type a Cast after the DequantizeLinear gives
                                   (float16/bfloat16 weights: the DequantizeLinear gives float) */
} tm__oxq;

/* tm__ox_replace: weight i becomes <w>_quantized, <w>_scale, <w>_zero_point (initializers, or
** Constant nodes where the weight was one) feeding DequantizeLinear "<w>_DequantizeLinear" whose
** output is <w> (with cast_to: "<w>_dequantized" then Cast "<w>_Cast" to <w>). Sub-byte codes
** are packed two per byte, element 2k in the low nibble of byte k [onnx.proto INT4/UINT4].
** Returns TM_OK | TM_E_INVALID_ARG (replaced twice, bad sizes) | TM_E_NOMEM. */
tm_status tm__ox_replace(tm__oxmodel *m, int64_t i, const tm__oxq *q, tm_err *err);

/* tm__ox_set_opset: set (or add) the opset import of `domain` to version; ir_min > 0 raises the
** IR version to at least ir_min. Applied at pack time. Returns TM_OK | TM_E_NOMEM. */
tm_status tm__ox_set_opset(tm__oxmodel *m, const char *domain, int64_t version, int64_t ir_min,
                           tm_err *err);

/* tm__ox_pack: the model with every edit, serialized (malloc'd into *buf, *n bytes).
** Returns TM_OK | TM_E_LIMIT (over 2 GiB) | TM_E_NOMEM. */
tm_status tm__ox_pack(tm__oxmodel *m, uint8_t **buf, size_t *n, tm_err *err);

#endif
