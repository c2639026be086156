/*
** tensormorph/onnx_opset.h: facts of the ai.onnx operator set that an ONNX writer needs: which
** opset's DequantizeLinear holds a code type, whether an operator changed between two opsets,
** the output-channel axis of a weight (layer formats, src/formats/onnx_opset.c).
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_ONNX_OPSET_H
#define TENSORMORPH_ONNX_OPSET_H

#ifdef __cplusplus
extern "C" {
#endif

/* How the DequantizeLinear nodes fit the model's ai.onnx opset. */
typedef enum tm_onnx_opset_strategy {
    TM_ONNX_OPSET_NATIVE = 0,     /* the model's ai.onnx opset already has what is needed     */
    TM_ONNX_OPSET_RAISED,         /* ai.onnx opset raised to the needed version: no op of the
                                     graph changes meaning between the two versions           */
    TM_ONNX_OPSET_MS_CONTRIB,     /* com.microsoft DequantizeLinear (ONNX Runtime contrib op,
                                     opset import com.microsoft 1): int8/uint8, per-tensor or
                                     per-axis                                                 */
    TM_ONNX_OPSET_NONE            /* refused: neither works                                    */
} tm_onnx_opset_strategy;

/* tm_onnx_opset_strategy_name: "native", "raised", "com.microsoft", "none". */
const char *tm_onnx_opset_strategy_name(tm_onnx_opset_strategy s);

/* tm_onnx_dq_min_opset: the ai.onnx opset whose DequantizeLinear can hold codes of code_dtype
** with granularity kind g: 10 (8-bit per-tensor, DequantizeLinear-10), 13 (8-bit per-axis,
** DequantizeLinear-13), 21 (INT4/UINT4 codes or block_size, DequantizeLinear-21).
** [ONNX Operators.md "DequantizeLinear"]. -1 for a combination no version holds (fp8 codes
** are not offered; BLOCK granularity). */
int tm_onnx_dq_min_opset(tm_dtype code_dtype, tm_granularity g);

/* tm_onnx_op_stable: 1 when ai.onnx operator `op` means the same at opset `from` and at opset
** `to` (from <= to): no version of it in (from, to] changed its inputs, attributes or
** semantics; versions that only added element types do not count. *changed_at (may be NULL)
** gets the first version that changed it, or 0. An operator missing from the table is
** assumed to change (returns 0, *changed_at = to). The table and its sources (ONNX
** docs/Operators.md and docs/Changelog.md) are in src/formats/onnx_opset.c. */
int tm_onnx_op_stable(const char *op, int64_t from, int64_t to, int64_t *changed_at);

/* tm_onnx_channel_axis: the axis of a weight that indexes the consuming op's output channels
** [ONNX Operators.md: Conv W is (M x C/group x k...), ConvTranspose W is (C x M/group x k...),
** MatMul B is (K x N), Gemm B is (K x N), or (N x K) with transB=1]:
** Conv 0, ConvTranspose 1, MatMul 1, Gemm 0 when trans_b else 1. -1 for any other op. */
int tm_onnx_channel_axis(const char *op, int trans_b);

#ifdef __cplusplus
}
#endif
#endif
