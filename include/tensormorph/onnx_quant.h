/*
** tensormorph/onnx_quant.h: weight-only quantization of an ONNX model into an ONNX model
** (`tensormorph quantize model.onnx -o out.onnx`). Every float weight consumed as the weight
** input (index 1) of Conv, ConvTranspose, MatMul or Gemm, whether an initializer or a Constant
** node's output, in the main graph or any subgraph (If/Loop/Scan bodies), is replaced by
**   <w>_quantized (codes) + <w>_scale + <w>_zero_point -> DequantizeLinear -> <w>
** so every consumer keeps reading the name it read before. The rules (targets, channel axes,
** opset strategy, limits) are in docs/onnx-quantize.md; the DequantizeLinear formula
** y = (x - zero_point) * scale and its opset history are ONNX Operators.md / Changelog.md
** ("DequantizeLinear" 10, 13, 19, 21).
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#include "errstats.h"
#include "onnx_opset.h"
#ifndef TENSORMORPH_ONNX_QUANT_H
#define TENSORMORPH_ONNX_QUANT_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tm_onnx_quantize_params {
    tm_qspec      spec;          /* code_dtype I8 | U8 | I4; gran TENSOR | CHANNEL (the axis is
                                    taken from each weight's consumer, spec.gran.axis is ignored)
                                    | GROUP (group_size = DequantizeLinear block_size, along axis
                                    0 = K of a MatMul weight; other weights are skipped); scale
                                    dtype F32                                                   */
    const tm_kernels *kernels;   /* kernel set of the whole job (tm_kernels_get); NULL: "auto"  */
    int64_t       min_elems;     /* weights with fewer elements are skipped (0: 16)             */
    const char  **include;  int64_t n_include; /* regexes on the weight name: only these     */
    const char  **exclude;  int64_t n_exclude; /* regexes: never these                        */
    int           no_checksums;  /* 1: no sha256 in the manifest                                */
    int           force;         /* 1: replace an OUT that is a previous tensormorph output      */
    int           allow_empty;   /* 1: write OUT (an unchanged copy) even when no weight gets
                                    quantized; 0: refuse, saying why (see tm_onnx_quantize)      */
    const char   *command_line;  /* recorded in the manifest                                    */
    /* phase "quantize": done / total count weights (not bytes)                                  */
    void (*progress)(void *ud, const char *phase, uint64_t done, uint64_t total);
    void         *progress_ud;
    volatile const int *cancel;
} tm_onnx_quantize_params;

/* tm_onnx_quantize_params_default: int8, symmetric, per-channel, minmax, onnx convention, f32 scale,
** min_elems 16. */
tm_onnx_quantize_params tm_onnx_quantize_params_default(void);

/* One weight the job looked at, in model order (graph by graph, depth first). */
typedef struct tm_onnx_quantize_tensor {
    char       *name;            /* the weight (output name of its DequantizeLinear)            */
    char       *graph;           /* "" for the main graph, "node/attr" path for subgraphs       */
    char        consumers[160];  /* "Conv" / "MatMul,Gemm": ops reading it as their weight      */
    int         constant_node;   /* 1: defined by a Constant node, 0: an initializer            */
    int         quantized;
    char        reason[240];     /* skipped: why; quantized: notes ("axes disagree: per-tensor")*/
    tm_qgran    gran;            /* as written (axis filled in)                                 */
    tm_dtype    src_dtype;
    int64_t     n_elems;
    tm_errsum   e;               /* quantized: error summary (tm_erracc, LSB of each scale)    */
} tm_onnx_quantize_tensor;

typedef struct tm_onnx_quantize_result {
    tm_onnx_quantize_tensor *weights; int64_t n;
    int64_t  n_quantized;
    tm_onnx_opset_strategy strategy;
    int64_t  opset_from, opset_to;   /* ai.onnx opset before and after                          */
    int64_t  opset_needed;           /* what DequantizeLinear needed                             */
    int64_t  ir_from, ir_to;
    char     strategy_reason[320];   /* why this strategy (the op that blocked raising, ...)     */
    uint64_t src_bytes, out_bytes;
    double   seconds;
    char    *manifest_json;          /* as written to "<out>.manifest.json" (malloc'd)           */
    char    *manifest_path;
} tm_onnx_quantize_result;

/* tm_onnx_quantize: read the ONNX model `in` (opened with tm_open; its path is decoded again
** with protobuf-c and rewritten), write `out_path` and "<out_path>.manifest.json"
** (tensormorph.manifest/1) as temp files beside it, fsynced, then renamed into place under
** "<out_path>.lock" in the GGUF job's order (tm_gguf_quantize; a concurrent run gets
** TM_E_INVALID_ARG naming the lock's pid; cancel honoured up to the rename). Before the
** rename the new model is opened with tensormorph's own ONNX reader and every quantized weight
** must come back as a logical quantized tensor with the scales, zero points and granularity
** written. Only float32/float16/bfloat16 weights are quantized; DequantizeLinear, QOperator or
** MatMulNBits weights already in the model are left as they are (a model with nothing else is
** refused, see below).
** No weight to quantize is refused, nothing written, unless p->allow_empty (then OUT is the
** model unchanged but for the opset, with its manifest): TM_E_INVALID_ARG when --include matched
** no weight or include/exclude filtered out every float weight; TM_E_UNSUPPORTED when the model
** is already quantized (no float weight of Conv/ConvTranspose/MatMul/Gemm, quantized weights
** present: the message counts them by layout, e.g. "12 DequantizeLinear"), when group:N was
** asked and no weight is read by MatMul only (the message names the consumers), or for any
** other reason (the message gives the first weights' reasons) [docs/exit-codes.md].
** Returns TM_OK | TM_E_INVALID_ARG (bad params; the input is not ONNX; OUT exists and is not a
** previous output, is the input, or is a directory; include/exclude regex; filters leave no
** weight) | TM_E_UNSUPPORTED (external data; nothing to quantize, see above;
** int4 or block_size needed but neither raising the opset nor com.microsoft works: the message
** names the op) | TM_E_LIMIT (output over 2 GiB) | TM_E_NONFINITE | TM_E_RANGE | TM_E_IO |
** TM_E_NOMEM | TM_E_CANCELLED | TM_E_INTERNAL (the re-opened output disagrees).
** Free the result with tm_onnx_quantize_result_free. */
tm_status tm_onnx_quantize(tm_file *in, const char *out_path, const tm_onnx_quantize_params *p,
                           tm_onnx_quantize_result **out, tm_err *err);
void      tm_onnx_quantize_result_free(tm_onnx_quantize_result *r);

/* ---- deprecated names -------------------------------------------------------------------
** The names before the quantize jobs shared one pattern (tm_<form>_quantize_params,
** tm_<form>_quantize_params_default, tm_<form>_quantize, tm_<form>_quantize_result,
** tm_<form>_quantize_result_free, tm_<form>_quantize_tensor; docs/ARCHITECTURE.md "the jobs").
** Kept as aliases so that code written against them still builds; new code uses the names
** above. They will be removed in a later release. */
#define tm_onnx_qparams                  tm_onnx_quantize_params
#define tm_onnx_qparams_default          tm_onnx_quantize_params_default
#define tm_onnx_qresult                  tm_onnx_quantize_result
#define tm_onnx_qresult_free             tm_onnx_quantize_result_free
#define tm_onnx_qweight                  tm_onnx_quantize_tensor

#ifdef __cplusplus
}
#endif
#endif
