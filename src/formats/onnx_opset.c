/*
** onnx_opset.c: which ai.onnx operators keep their meaning when a model's opset is raised, the
** opset a DequantizeLinear needs, and the output-channel axis of each weight-consuming op
** (tensormorph/onnx_opset.h).
**
** Source of every row: ONNX docs/Operators.md (the "since version" list of each operator) and
** docs/Changelog.md (what each version changed), ONNX 1.16. A version is listed when it changed
** an operator's inputs, attributes, attribute defaults or semantics; versions that only widened
** the element types (bfloat16, int types, string, float8) are not. Where a change only matters
** for some attribute values (Conv-11 and the pool ops: auto_pad SAME with strides) it is still
** listed: the table is conservative, and an operator absent from it is assumed to change.
** Only versions up to 21 matter (the highest opset tensormorph raises to).
*/
#include "../core/core.h"
#include "tensormorph/onnx_opset.h"

#include <string.h>

typedef struct op_changes {
    const char *op;
    int         v[8];   /* versions that changed the meaning, ascending, 0-terminated */
} op_changes;

static const op_changes k_ops[] = {
    /* elementwise: -6 dropped consumed_inputs, -7 numpy broadcasting replaced `broadcast` */
    {"Abs", {6}}, {"Add", {6, 7}}, {"Sub", {6, 7}}, {"Mul", {6, 7}}, {"Div", {6, 7}},
    {"Pow", {7}}, {"Neg", {6}}, {"Reciprocal", {6}}, {"Sqrt", {6}}, {"Exp", {6}}, {"Log", {6}},
    {"Floor", {6}}, {"Ceil", {6}}, {"Relu", {6}}, {"Sigmoid", {6}}, {"Tanh", {6}},
    {"Elu", {6}}, {"Selu", {6}}, {"LeakyRelu", {6}}, {"HardSigmoid", {6}},
    {"PRelu", {6, 7}}, {"ThresholdedRelu", {10}}, {"Softplus", {0}}, {"Softsign", {0}},
    {"Erf", {0}}, {"Sin", {0}}, {"Cos", {0}}, {"Tan", {0}}, {"Atan", {0}}, {"Sign", {0}},
    {"Not", {7}}, {"And", {7}}, {"Or", {7}}, {"Xor", {7}},
    {"Equal", {7}}, {"Greater", {7}}, {"Less", {7}}, {"GreaterOrEqual", {0}},
    {"LessOrEqual", {0}}, {"Where", {0}}, {"Mod", {0}}, {"IsNaN", {0}}, {"IsInf", {0}},
    {"Sum", {6, 8}}, {"Mean", {6, 8}}, {"Max", {6, 8}}, {"Min", {6, 8}},
    /* -6 dropped consumed_inputs; -11 min/max moved from attributes to inputs */
    {"Clip", {6, 11}},
    /* -6 `to` became an int; -9 string casts; -19 saturate (float8 only, listed anyway) */
    {"Cast", {6, 9, 19}},
    {"HardSwish", {0}}, {"Mish", {0}}, {"Gelu", {0}},
    /* -11 negative axis; -13 Softmax/LogSoftmax/Hardmax: axis is one dim, not "flatten at axis" */
    {"Softmax", {11, 13}}, {"LogSoftmax", {11, 13}}, {"Hardmax", {11, 13}},
    /* linear algebra */
    {"MatMul", {0}}, {"Gemm", {6, 7}}, {"MatMulInteger", {0}}, {"Einsum", {0}},
    /* -11: auto_pad SAME output size rule, kernel_shape inferable */
    {"Conv", {11}}, {"ConvTranspose", {11}}, {"ConvInteger", {0}},
    /* pools: -7 count_include_pad, -8 indices/storage_order, -10 ceil_mode/dilations, -11 pads,
    ** -19 AveragePool dilations */
    {"AveragePool", {7, 10, 11, 19}}, {"MaxPool", {8, 10, 11}}, {"GlobalAveragePool", {0}},
    {"GlobalMaxPool", {0}}, {"LpPool", {2, 11, 18}},
    /* normalization: -6/-7/-9 spatial and is_test, -14 training_mode, -15 input types */
    {"BatchNormalization", {6, 7, 9, 14, 15}}, {"InstanceNormalization", {6}},
    {"LayerNormalization", {0}}, {"GroupNormalization", {21}}, {"LRN", {0}},
    {"LpNormalization", {0}},
    {"Dropout", {6, 7, 10, 12}},
    /* shape ops */
    {"Reshape", {5, 14}}, {"Flatten", {11}}, {"Transpose", {0}},
    {"Squeeze", {11, 13}}, {"Unsqueeze", {11, 13}}, {"Concat", {4, 11}},
    {"Split", {2, 11, 13, 18}}, {"Slice", {10, 11}}, {"Gather", {11}},
    {"GatherElements", {0}}, {"GatherND", {12}}, {"Shape", {15}}, {"Size", {0}},
    {"Expand", {0}}, {"Tile", {6}}, {"Pad", {2, 11, 18, 19}}, {"ConstantOfShape", {0}},
    {"Constant", {0}}, {"Identity", {0}}, {"Range", {0}}, {"NonZero", {0}},
    {"DepthToSpace", {11}}, {"SpaceToDepth", {0}}, {"OneHot", {11}},
    {"ScatterND", {16, 18}}, {"ScatterElements", {16, 18}}, {"CumSum", {0}},
    {"TopK", {10, 11}}, {"ArgMax", {11, 12}}, {"ArgMin", {11, 12}},
    /* -11 negative axes, -13 ReduceSum axes input, -18 axes input for the others */
    {"ReduceMean", {11, 18}}, {"ReduceSum", {11, 13}}, {"ReduceMax", {11, 18}},
    {"ReduceMin", {11, 18}}, {"ReduceProd", {11, 18}}, {"ReduceL1", {11, 18}},
    {"ReduceL2", {11, 18}}, {"ReduceLogSum", {11, 18}}, {"ReduceLogSumExp", {11, 18}},
    {"ReduceSumSquare", {11, 18}},
    {"Upsample", {7, 9, 10}}, {"Resize", {11, 13, 18, 19}},
    /* recurrent: -7 output shapes/optional outputs, -14 layout */
    {"LSTM", {3, 7, 14}}, {"GRU", {3, 7, 14}}, {"RNN", {7, 14}},
    /* control flow: -11 relaxed branch shapes / loop-carried rules, -13 sequences, -16 optional */
    {"If", {11, 13, 16}}, {"Loop", {11, 13, 16}}, {"Scan", {9, 11, 16}},
    {"DequantizeLinear", {13, 19, 21}}, {"QuantizeLinear", {13, 19, 21}},
    {"DynamicQuantizeLinear", {0}}, {"QLinearConv", {0}}, {"QLinearMatMul", {21}},
    {"NonMaxSuppression", {11}}, {"RoiAlign", {16}},
};

int tm_onnx_op_stable(const char *op, int64_t from, int64_t to, int64_t *changed_at) {
    if (changed_at) *changed_at = 0;
    if (!op || to <= from) return 1;
    for (size_t i = 0; i < sizeof k_ops / sizeof k_ops[0]; i++) {
        if (strcmp(k_ops[i].op, op)) continue;
        for (int k = 0; k < 8 && k_ops[i].v[k]; k++)
            if (k_ops[i].v[k] > from && k_ops[i].v[k] <= to) {
                if (changed_at) *changed_at = k_ops[i].v[k];
                return 0;
            }
        return 1;
    }
    if (changed_at) *changed_at = to; /* unknown: assume it changes */
    return 0;
}

int tm_onnx_dq_min_opset(tm_dtype code_dtype, tm_granularity g) {
    int four = code_dtype == TM_I4 || code_dtype == TM_U4;
    if (code_dtype != TM_I8 && code_dtype != TM_U8 && !four) return -1;
    switch (g) {
    case TM_GRAN_TENSOR:  return four ? 21 : 10;
    case TM_GRAN_CHANNEL: return four ? 21 : 13;
    case TM_GRAN_GROUP:   return 21;
    default:              return -1;
    }
}

int tm_onnx_channel_axis(const char *op, int trans_b) {
    if (!op) return -1;
    if (!strcmp(op, "Conv")) return 0;
    if (!strcmp(op, "ConvTranspose")) return 1;
    if (!strcmp(op, "MatMul")) return 1;
    if (!strcmp(op, "Gemm")) return trans_b ? 0 : 1;
    return -1;
}

const char *tm_onnx_opset_strategy_name(tm_onnx_opset_strategy s) {
    switch (s) {
    case TM_ONNX_OPSET_NATIVE:     return "native";
    case TM_ONNX_OPSET_RAISED:     return "raised";
    case TM_ONNX_OPSET_MS_CONTRIB: return "com.microsoft";
    default:                       return "none";
    }
}
