/* release.c: give back the page-cache pages of elements a streaming reader has finished with,
** so a pass over a model larger than memory keeps its resident set bounded (madvise
** MADV_DONTNEED on the mapped file pages, via tm_tensor_release). */
#include "../core/core.h"

void tm_tensor_release_elems(const tm_file *f, int64_t i, int64_t start, int64_t n) {
    const tm_tensor *t = tm_file_tensor(f, i);
    if (!t || n <= 0 || start < 0) return;
    if (!t->quant) {
        const tm_dtype_traits *dt = tm_dtype_get(t->dtype);
        if (!dt || dt->bits < 8) return;
        uint64_t isz = (uint64_t)dt->bits / 8;
        tm_tensor_release(f, i, (uint64_t)start * isz, (uint64_t)n * isz);
        return;
    }
    /* quantized: release the codes of the whole rows covered (packed along the last axis or
    ** unpacked); scales and zero points are small and stay */
    const tm_qtensor *q = t->quant;
    const tm_tensor *ct = tm_file_tensor(f, q->codes_tensor);
    if (!ct || t->ndim < 1 || t->n_elems <= 0) return;
    int64_t cols = t->shape[t->ndim - 1];
    if (cols <= 0) return;
    int64_t rows = t->n_elems / cols;
    if (rows <= 0) return;
    uint64_t row_bytes = ct->n_bytes / (uint64_t)rows;
    int64_t r0 = start / cols, r1 = (start + n) / cols; /* whole rows only */
    if (r1 > r0) tm_tensor_release(f, q->codes_tensor, (uint64_t)r0 * row_bytes, (uint64_t)(r1 - r0) * row_bytes);
}
