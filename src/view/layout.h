/*
** layout.h: raw access to plain tensors whose bytes are not row-major little-endian
** (tm_tensor.fortran_order / big_endian: NumPy, PyTorch). Private to the library.
*/
#ifndef TM_VIEW_LAYOUT_H
#define TM_VIEW_LAYOUT_H

#include "tensormorph.h"

/* Bytes [off, off+n) of plain tensor i as they would be stored row-major and little-endian
** (what a byte-for-byte copy into safetensors must write). off and n are whole elements.
** Returns TM_OK | TM_E_INVALID_ARG | TM_E_UNSUPPORTED (quantized, sub-byte dtype). */
tm_status tm__tensor_bytes_rowmajor(const tm_file *f, int64_t i, uint64_t off, uint64_t n,
                                    void *dst, tm_err *err);

#endif
