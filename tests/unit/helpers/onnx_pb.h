/*
** onnx_pb.h: a protobuf writer for ONNX test fixtures, field by field from the protobuf wire
** format (varint tags, length-delimited messages) and the field numbers of onnx.proto:
** ModelProto ir_version 1, graph 7, opset_import 8 {domain 1, version 2}; GraphProto node 1,
** name 2, initializer 5; NodeProto input 1, output 2, name 3, op_type 4, attribute 5, domain 7;
** AttributeProto name 1, i 3, type 20 (INT = 2); TensorProto dims 1, data_type 2, name 8,
** raw_data 9. Every function asserts (cmocka) on out-of-memory.
*/
#ifndef TM_TEST_ONNX_PB_H
#define TM_TEST_ONNX_PB_H

#include <stddef.h>
#include <stdint.h>

typedef struct pb { uint8_t *b; size_t n, cap; } pb;

void pb_raw(pb *p, const void *d, size_t n);
void pb_varint(pb *p, uint64_t v);
void pb_vfield(pb *p, int field, uint64_t v);             /* varint field                   */
void pb_bytes(pb *p, int field, const void *d, size_t n); /* length-delimited field         */
void pb_str(pb *p, int field, const char *s);
void pb_msg(pb *p, int field, pb *m);                     /* appends m as a field, frees m  */

/* TensorProto with raw_data (raw NULL: none) into t. */
void pb_tensor_raw(pb *t, const char *name, int dtype, int ndim, const int64_t *dims,
                   const void *raw, size_t n);
/* tensor as an initializer of graph g. */
void pb_init_raw(pb *g, const char *name, int dtype, int ndim, const int64_t *dims,
                 const void *raw, size_t n);
/* NodeProto of ai.onnx with one output and at most one INT attribute (attr NULL: none). */
void pb_node(pb *g, const char *op, const char *name, int n_in, const char *const *in,
             const char *out, const char *attr, int64_t attr_v);
/* Any node: domain ("" or NULL: ai.onnx), n_out outputs; "" in `in` is an omitted input. */
void pb_node_dom(pb *g, const char *op, const char *domain, const char *name, int n_in,
                 const char *const *in, int n_out, const char *const *out, const char *attr,
                 int64_t attr_v);
/* ModelProto (ir_version 8) holding graph "g" (graph is consumed), importing ai.onnx `opset`
** and, when ms_opset > 0, com.microsoft `ms_opset`. */
void pb_model_ms(pb *m, pb *graph, int opset, int ms_opset);
void pb_model(pb *m, pb *graph, int opset);

#endif
