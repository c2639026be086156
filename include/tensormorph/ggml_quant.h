/*
** tensormorph/ggml_quant.h: ggml block quantizers (float32 rows -> GGUF tensor bytes), byte for
** byte what ggml's C reference quantizers (quantize_row_*_ref, ggml-org/ggml@d99724f2, the
** default x86-64 build: every product rounded, no fused multiply-add) write for the same row.
** Algorithms and formulas: docs/gguf-quantize.md; checked by tests/unit/test_ggml_quant.c
** against ../shared/vectors/gguf and spec/gguf_*.
**
** Types are named by their ggml type ids, TM_GGML_* of tensormorph/ggml.h (the GGUF tensor-info
** "type" field); one type table (src/quant/ggml_traits.h) serves the reader and this writer.
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_GGML_QUANT_H
#define TENSORMORPH_GGML_QUANT_H

#ifdef __cplusplus
extern "C" {
#endif

/* tm_gq_writable: 1 when this writer can produce ggml type `type` (a TM_GGML_* id of
** tensormorph/ggml.h): F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL IQ4_XS IQ3_XXS IQ3_S TQ1_0
** TQ2_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ2_XXS IQ2_XS IQ2_S IQ1_S IQ1_M (IQ2_XXS, IQ2_XS and IQ1_S only
** with an importance matrix).
** Names, block sizes and bytes per block of every type: tm_ggml_type_info_get,
** tm_ggml_type_from_name, tm_ggml_row_bytes (one type table for the reader and the writer). */
int         tm_gq_writable(int type);

/* tm_gq_quantize_row: quantize one row of n float32 values into GGUF blocks of `type`.
**   x    in  [n] float32, finite.
**   n    a multiple of the type's block_size (tm_ggml_type_info_get).
**   out  caller-owned, tm_ggml_row_bytes(type, n) bytes.
**   bad_block  out (may be NULL): the block index the error concerns, else -1.
** Byte-identical to ggml's reference for every finite input on which the reference is defined.
** Where it is not (docs/gguf-quantize.md "Deviations"): a block whose scale 1/d overflows
** float32 (all values subnormal) is written as an all-zero block (every code the zero code, d
** and m the f16 of the reference's float32 values); the reference converts +-inf to int8.
** Returns TM_OK | TM_E_INVALID_ARG (type not writable, n not a multiple of the block) |
** TM_E_NONFINITE (NaN/Inf input) | TM_E_RANGE (a block scale or min overflows f16: the
** reference would store an f16 inf). The message names the block and the element, without
** the tensor/row: callers prefix those.
** Reentrant, no allocation: at most a few KiB of stack. Q8_0 and Q4_0 use AVX2 where the CPU
** has it (same bytes). */
tm_status tm_gq_quantize_row(int type, const float *x, int64_t n, void *out, int64_t *bad_block,
                             tm_err *err);

/* tm_gq_quantize_row_imatrix: tm_gq_quantize_row with an importance matrix, byte for byte what
** ggml's quantize_<type>(x, out, 1, n, quant_weights) writes (llama.cpp@c392e509
** ggml/src/ggml-quants.c: quantize_row_q4_0_impl, ..., quantize_row_q6_K_impl; the IQ types'
** quantize_iq*): the row's blocks are searched for the scales that minimise the squared error
** weighted per column by imatrix (and by each type's sqrt(sigma2 + x^2) factor).
**   imatrix  in [n] float32: the importance of each input column of this row, as llama-quantize
**            hands it to ggml (an imatrix file's sums divided by its ncall); NULL: exactly
**            tm_gq_quantize_row (ggml's quant_weights == NULL path, a different algorithm for
**            several types).
** Types that have no imatrix path (F32 F16 BF16 Q8_0 TQ1_0 TQ2_0: tm_gq_uses_imatrix 0) ignore
** it, as ggml does. Errors as tm_gq_quantize_row. */
tm_status tm_gq_quantize_row_imatrix(int type, const float *x, int64_t n, const float *imatrix,
                                     void *out, int64_t *bad_block, tm_err *err);
/* tm_gq_uses_imatrix: 1 when the quantizer of writable `type` reads an importance matrix. */
int       tm_gq_uses_imatrix(int type);

#ifdef __cplusplus
}
#endif
#endif
