/*
** tensormorph/qview.h: a quantized tensor's decoded scales and zero points, held open for
** repeated reads, and page release for streaming readers (layer view, src/view/).
*/
/* the base API first, outside the guard, so this header compiles alone (docs/ARCHITECTURE.md
** "Public headers") */
#include "../tensormorph.h"
#ifndef TENSORMORPH_QVIEW_H
#define TENSORMORPH_QVIEW_H

#ifdef __cplusplus
extern "C" {
#endif

/* tm_tensor_qparams: the decoded scale (f32) and zero point (int32) arrays of quantized tensor
** i, n_params long, param order as tm_qgran_param_index. Caller frees both with free().
** Returns TM_OK | TM_E_INVALID_ARG (not quantized) | TM_E_NOMEM | TM_E_CORRUPT. */
tm_status tm_tensor_qparams(const tm_file *f, int64_t i, float **scale, int32_t **zero_point,
                            int64_t *n_params, tm_err *err);

/* tm_qview: a quantized tensor's decoded scale/zero-point arrays held open for repeated reads.
** tm_qview_read gives dequantized float32 values of elements [start, start+n) and, when param
** is not NULL, each element's flat param index. Returns TM_OK | TM_E_INVALID_ARG | TM_E_CORRUPT. */
typedef struct tm_qview tm_qview;
tm_status      tm_qview_open(const tm_file *f, int64_t i, tm_qview **out, tm_err *err);
tm_status      tm_qview_read(tm_qview *v, int64_t start, int64_t n, float *out, int64_t *param,
                             tm_err *err);
const float   *tm_qview_scale(const tm_qview *v);
const int32_t *tm_qview_zero_point(const tm_qview *v);
int64_t        tm_qview_n_params(const tm_qview *v);
void           tm_qview_free(tm_qview *v);

/* tm_tensor_release_elems: a streaming reader is done with logical elements [start, start+n)
** of tensor i: release their mapped file pages (plain tensors: exactly their bytes; quantized:
** the codes of the whole rows covered). Never fails; a no-op where it does not apply. */
void tm_tensor_release_elems(const tm_file *f, int64_t i, int64_t start, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
