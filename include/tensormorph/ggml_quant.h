/*
** tensormorph/ggml_quant.h: ggml block quantizers (float32 rows -> GGUF tensor bytes), byte for
** byte what ggml's C reference quantizers (quantize_row_*_ref, ggml-org/ggml@d99724f2, the
** default x86-64 build: every product rounded, no fused multiply-add) write for the same row.
** Algorithms and formulas: docs/gguf-quantize.md; checked by tests/unit/test_ggml_quant.c
** against ../shared/vectors/gguf and spec/gguf_*.
**
** Types are named by their ggml type ids (the GGUF tensor-info "type" field). The reader's type
** table (tensormorph/ggml.h) covers every id; this header lists only the ids this writer can
** produce, under its own TM_GQ_ prefix.
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_GGML_QUANT_H
#define TENSORMORPH_GGML_QUANT_H

#ifdef __cplusplus
extern "C" {
#endif

/* ggml type ids (ggml.h enum ggml_type; stable file-format values). */
enum {
    TM_GQ_F32 = 0, TM_GQ_F16 = 1, TM_GQ_Q4_0 = 2, TM_GQ_Q4_1 = 3, TM_GQ_Q5_0 = 6,
    TM_GQ_Q5_1 = 7, TM_GQ_Q8_0 = 8, TM_GQ_Q2_K = 10, TM_GQ_Q3_K = 11, TM_GQ_Q4_K = 12,
    TM_GQ_Q5_K = 13, TM_GQ_Q6_K = 14, TM_GQ_IQ4_NL = 20, TM_GQ_BF16 = 30
};

/* tm_gq_writable: 1 when `type` is one of the ids above (a type tm_gq_quantize_row writes). */
int         tm_gq_writable(int type);
/* tm_gq_type_name: "Q4_K", "F16", ... for the ids above; "?" otherwise. Static, never NULL. */
const char *tm_gq_type_name(int type);
/* tm_gq_type_from_name: parse a name above (case-insensitive: "q4_k", "Q8_0", "f16").
** Returns the id, or -1 when unknown. */
int         tm_gq_type_from_name(const char *name);
/* Values per block (32 for Q4_0..Q8_0 and IQ4_NL, 256 for K-quants, 1 for F32/F16/BF16) and
** bytes per block; 0 for an id not above. */
int         tm_gq_block_size(int type);
size_t      tm_gq_type_size(int type);
/* tm_gq_row_bytes: bytes of one row of n values (n a multiple of the block size), else 0. */
uint64_t    tm_gq_row_bytes(int type, int64_t n);

/* tm_gq_quantize_row: quantize one row of n float32 values into GGUF blocks of `type`.
**   x    in  [n] float32, finite.
**   n    a multiple of tm_gq_block_size(type).
**   out  caller-owned, tm_gq_row_bytes(type, n) bytes.
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
#ifdef __cplusplus
}
#endif
#endif
