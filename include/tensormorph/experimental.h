/*
** tensormorph/experimental.h: test-only entry points. They are kept out of tensormorph.h (which
** does not include this header) and may change without notice; tests and tools that check the
** library against references include it. Each is declared here, beside the layer it comes
** from; its definition stays in that layer's file.
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_EXPERIMENTAL_H
#define TENSORMORPH_EXPERIMENTAL_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- quant (src/quant/ggml_row.c) -------------------------------------------------------- */

/* tm_gq_quantize_row_ref: the same with the scalar code only (the specification; for tests). */
tm_status tm_gq_quantize_row_ref(int type, const float *x, int64_t n, void *out,
                                 int64_t *bad_block, tm_err *err);

/* ---- formats (src/formats/onnx.c): ONNX backend node tests as checkpoints --------------- */

/* tm_onnx_open_tensor: open one serialized onnx.TensorProto (a backend test's input_N.pb /
** output_N.pb) as a checkpoint holding that one tensor, named by the proto's name (or "tensor"
** when it has none). Same element types and checks as initializers of a model.
** Returns TM_OK | TM_E_IO | TM_E_CORRUPT | TM_E_UNSUPPORTED (an element type without a
** tensormorph dtype, external data) | TM_E_LIMIT | TM_E_NOMEM. */
tm_status tm_onnx_open_tensor(const char *path, tm_file **out, tm_err *err);

/* tm_onnx_open_bound: open the ONNX model at `path` with the TensorProto files input_paths[k]
** (k < n_inputs) bound to its k-th graph input, as if they were initializers named like that
** input: a backend node test (model.onnx + test_data_set_0/input_k.pb) becomes a checkpoint in
** which DequantizeLinear's codes are tensors, recognised and dequantized like weights.
** Returns as tm_open, and TM_E_INVALID_ARG when the graph has fewer inputs. */
tm_status tm_onnx_open_bound(const char *path, int n_inputs, const char *const *input_paths,
                             tm_file **out, tm_err *err);

#ifdef __cplusplus
}
#endif
#endif
