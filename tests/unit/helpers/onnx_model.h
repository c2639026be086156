/*
** onnx_model.h: ONNX models for the ONNX-quantize tests (test_onnx_quantize*.c), built and read
** back with the protobuf-c code generated from onnx.proto (onnx.pb-c.h, in the build's gen/),
** and an independent computation of the ONNX quantization formulas to check outputs against.
**
** Every builder allocation is tracked and freed by free_allocs() (call it at the end of each
** test). Files go to g_tmp, a directory per process that onnxq_setup() makes and
** onnxq_teardown() removes (cmocka group setup/teardown). Values come from one LCG (g_rng:
** x = x * 6364136223846793005 + 1442695040888963407, Knuth's MMIX constants); a test sets
** g_rng first, so its data does not depend on the tests run before it.
*/
#ifndef TM_TEST_ONNX_MODEL_H
#define TM_TEST_ONNX_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "tensormorph.h"
#include "tensormorph/onnx_quant.h"
#include "onnx.pb-c.h"

extern char g_tmp[256];
extern uint64_t g_rng;

void free_allocs(void);

/* ---- building models (tracked allocations) ---- */

/* FLOAT initializer `name` of `ndim` dims, raw_data a copy of v */
Onnx__TensorProto *tensor_f32(const char *name, int ndim, const int64_t *dims, const float *v);
/* a weight of `ndim` dims with values rnd() * (1 + index along dim 0) / 4, rnd() in [-1, 1);
** its element count in *n_out */
float *weight_values(int ndim, const int64_t *dims, int64_t *n_out);
Onnx__AttributeProto *attr_i(const char *name, int64_t v);               /* INT    */
Onnx__AttributeProto *attr_t(const char *name, Onnx__TensorProto *t);    /* TENSOR */
Onnx__AttributeProto *attr_g(const char *name, Onnx__GraphProto *g);     /* GRAPH  */
/* ai.onnx node; ins/outs: comma separated names ("" none); a0/a1 attributes or NULL */
Onnx__NodeProto *node(const char *op, const char *name, const char *ins, const char *outs,
                      Onnx__AttributeProto *a0, Onnx__AttributeProto *a1);
/* tensor value info, elem an ONNX TensorProto.DataType, ndim 0: no dims */
Onnx__ValueInfoProto *vinfo(const char *name, int elem, int ndim, const int64_t *dims);
/* an empty graph with room for 32 nodes and initializers, 8 inputs and outputs */
Onnx__GraphProto *graph(const char *name);
void g_node(Onnx__GraphProto *g, Onnx__NodeProto *n);
void g_init(Onnx__GraphProto *g, Onnx__TensorProto *t);
void g_in(Onnx__GraphProto *g, Onnx__ValueInfoProto *v);
void g_out(Onnx__GraphProto *g, Onnx__ValueInfoProto *v);
/* Write g_tmp/file: ai.onnx opset `opset`, IR `ir`, a doc string the output must keep.
** Returns the path (tracked). */
const char *write_model(const char *file, Onnx__GraphProto *g, int64_t opset, int64_t ir);
/* A model X[1,K] -> MatMul(X, W[K,N]) -> (extra op) -> Y. extra: NULL, "Relu", "Softmax".
** *wv (when wv is not NULL) gets W's values. */
const char *matmul_model(const char *file, int64_t K, int64_t N, int64_t opset, const char *extra,
                         float **wv);
/* g_tmp/name (tracked) */
char *outp(const char *name);

/* ---- reading outputs ---- */

typedef struct loaded { Onnx__ModelProto *m; uint8_t *b; } loaded;

/* The whole file (malloc'd), its size in *n. */
uint8_t *read_bytes(const char *path, size_t *n);
loaded load(const char *path);
void unload(loaded *l);
/* initializer or Constant-node value named `name` of g, NULL if none */
const Onnx__TensorProto *find_init(const Onnx__GraphProto *g, const char *name);
/* node of op type `op` whose first output is `out`, NULL if none */
const Onnx__NodeProto *find_node(const Onnx__GraphProto *g, const char *op, const char *out);
int64_t node_attr(const Onnx__NodeProto *n, const char *name, int64_t dflt);
/* the opset the model imports for `domain` ("" ai.onnx), 0 if none */
int64_t opset_of(const Onnx__ModelProto *m, const char *domain);
/* float32 element k of raw_data */
float f32_at(const Onnx__TensorProto *t, int64_t k);

/* ---- the ONNX formulas, independently ---- */

/* One symmetric signed unit of n values x[k * stride]: scale = max|x| / half (1 when all
** zero), q = clamp(round_half_even(x / scale), -half-1, half) [ONNX QuantizeLinear]. */
float ref_scale(const float *x, int64_t n, int64_t stride, int half);
int ref_code(float x, float s, int half);
/* Symmetric int8 per-channel codes and scales of n_ch channels of n values each: value k of
** channel c is w[c * ch_stride + k * el_stride], in the initializer q at the same index, its
** scale element c of s; every one equals the formula's (ref_scale, ref_code). */
void check_int8_channels(const Onnx__TensorProto *q, const Onnx__TensorProto *s, const float *w,
                         int64_t n_ch, int64_t n, int64_t ch_stride, int64_t el_stride);

/* tm_onnx_quantize(in -> out, p) asserting it returns `expect` (the message printed if not);
** the result (NULL on failure) for the caller to free. */
tm_onnx_quantize_result *run_job(const char *in, const char *out, const tm_onnx_quantize_params *p,
                         tm_status expect, tm_err *err);

/* cmocka group setup/teardown: make / remove g_tmp (/tmp/tm_onnxq_<pid>) */
int onnxq_setup(void **state);
int onnxq_teardown(void **state);

#endif
