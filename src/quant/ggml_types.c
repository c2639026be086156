/* ggml_types.c: the ggml type-traits table (ggml_traits.h: per id its facts, dequantizer and
** quantizers) and row sizes.
** Facts of the GGUF format: ggml's `enum ggml_type` (ggml/include/ggml.h) and the type-traits
** table in ggml/src/ggml.c at ggml-org/llama.cpp@c392e5094deaf2d1a7c18683214f007fad3fe42b;
** the block sizes and bytes equal gguf-py's GGML_QUANT_SIZES and every
** ../shared/vectors/gguf_dequant/<type>/case.json "params". The per-type code ranges and
** sub-block sizes follow from the block layouts in ggml/src/ggml-common.h (docs/formats.md). */
#include "../core/core.h"
#include "ggml_traits.h"

#include <strings.h>

#define QK 256 /* TM_GGML_QK_K */

/* The facts of one row: name, block, bytes, quantized, plain dtype, sub-block, has_min, code
** bits, qmin, qmax (tm_ggml_type_info); every type listed here dequantizes. */
#define INFO(ID, BLK, BYTES, QUANT, DTYPE, SUB, HAS_MIN, BITS, QMIN, QMAX)                       \
    .info = {.id = TM_GGML_##ID, .name = #ID, .block_size = BLK, .type_size = BYTES,            \
             .is_quantized = QUANT, .plain_dtype = DTYPE, .sub_block = SUB, .has_min = HAS_MIN, \
             .code_bits = BITS, .qmin = QMIN, .qmax = QMAX, .can_dequantize = 1}

/* ggml's enum at the commit above ends at 38 (MXFP4, 39, is newer): a new id needs its row. */
_Static_assert(TM_GGML_TYPE_COUNT == 39, "a new ggml type id needs its row in tm__ggml_traits_table");

const tm__ggml_traits tm__ggml_traits_table[] = {
    [TM_GGML_F32]     = {INFO(F32, 1, 4, 0, TM_F32, 1, 0, 32, 0, 0), .quantize_ref = tm__gq_rows_f32},
    [TM_GGML_F16]     = {INFO(F16, 1, 2, 0, TM_F16, 1, 0, 16, 0, 0), .quantize_ref = tm__gq_rows_f16},
    [TM_GGML_Q4_0]    = {INFO(Q4_0, 32, 18, 1, -1, 32, 0, 4, 0, 15), .dequantize = tm__ggml_dq_q4_0,
                         .uses_imatrix = 1, .quantize_ref = tm__gq_rows_q4_0,
                         .quantize_simd = TM__GQ_SIMD(tm__gq_rows_q4_0_avx2), .quantize_err = TM__GQ_SIMD(tm__gq_q4_0_avx2)},
    [TM_GGML_Q4_1]    = {INFO(Q4_1, 32, 20, 1, -1, 32, 1, 4, 0, 15), .dequantize = tm__ggml_dq_q4_1,
                         .uses_imatrix = 1, .quantize_ref = tm__gq_rows_q4_1,
                         .quantize_simd = TM__GQ_SIMD(tm__gq_rows_q4_1_avx2),
                         .quantize_err = TM__GQ_SIMD(tm__gq_q4_1_avx2)},
    [TM_GGML_Q5_0]    = {INFO(Q5_0, 32, 22, 1, -1, 32, 0, 5, 0, 31), .dequantize = tm__ggml_dq_q5_0,
                         .uses_imatrix = 1, .quantize_ref = tm__gq_rows_q5_0,
                         .quantize_simd = TM__GQ_SIMD(tm__gq_rows_q5_0_avx2),
                         .quantize_err = TM__GQ_SIMD(tm__gq_q5_0_avx2)},
    [TM_GGML_Q5_1]    = {INFO(Q5_1, 32, 24, 1, -1, 32, 1, 5, 0, 31), .dequantize = tm__ggml_dq_q5_1,
                         .uses_imatrix = 1, .quantize_ref = tm__gq_rows_q5_1,
                         .quantize_simd = TM__GQ_SIMD(tm__gq_rows_q5_1_avx2),
                         .quantize_err = TM__GQ_SIMD(tm__gq_q5_1_avx2)},
    [TM_GGML_Q8_0]    = {INFO(Q8_0, 32, 34, 1, -1, 32, 0, 8, -128, 127), .dequantize = tm__ggml_dq_q8_0,
                         .quantize_ref = tm__gq_rows_q8_0, .quantize_err = TM__GQ_SIMD(tm__gq_q8_0_avx2)},
    [TM_GGML_Q8_1]    = {INFO(Q8_1, 32, 36, 1, -1, 32, 0, 8, -128, 127), .dequantize = tm__ggml_dq_q8_1},
    [TM_GGML_Q2_K]    = {INFO(Q2_K, QK, 84, 1, -1, 16, 1, 2, 0, 3), .dequantize = tm__ggml_dq_q2_k,
                         .uses_imatrix = 1, .quantize_ref = tm__gq_rows_q2_k, .quantize_simd = TM__GQ_SIMD(tm__gq_rows_q2_k_avx2)},
    [TM_GGML_Q3_K]    = {INFO(Q3_K, QK, 110, 1, -1, 16, 0, 3, 0, 7), .dequantize = tm__ggml_dq_q3_k,
                         .uses_imatrix = 1, .quantize_ref = tm__gq_rows_q3_k, .quantize_simd = TM__GQ_SIMD(tm__gq_rows_q3_k_avx2)},
    [TM_GGML_Q4_K]    = {INFO(Q4_K, QK, 144, 1, -1, 32, 1, 4, 0, 15), .dequantize = tm__ggml_dq_q4_k,
                         .uses_imatrix = 1, .quantize_ref = tm__gq_rows_q4_k, .quantize_simd = TM__GQ_SIMD(tm__gq_rows_q4_k_avx2)},
    [TM_GGML_Q5_K]    = {INFO(Q5_K, QK, 176, 1, -1, 32, 1, 5, 0, 31), .dequantize = tm__ggml_dq_q5_k,
                         .uses_imatrix = 1, .quantize_ref = tm__gq_rows_q5_k, .quantize_simd = TM__GQ_SIMD(tm__gq_rows_q5_k_avx2)},
    [TM_GGML_Q6_K]    = {INFO(Q6_K, QK, 210, 1, -1, 16, 0, 6, 0, 63), .dequantize = tm__ggml_dq_q6_k,
                         .uses_imatrix = 1, .quantize_ref = tm__gq_rows_q6_k,
                         .quantize_simd = TM__GQ_SIMD(tm__gq_rows_q6_k_avx2), .quantize_err = TM__GQ_SIMD(tm__gq_q6_k_avx2)},
    [TM_GGML_Q8_K]    = {INFO(Q8_K, QK, 292, 1, -1, QK, 0, 8, -128, 127), .dequantize = tm__ggml_dq_q8_k},
    [TM_GGML_IQ2_XXS] = {INFO(IQ2_XXS, QK, 66, 1, -1, 32, 0, 2, -43, 43), .dequantize = tm__ggml_dq_iq2_xxs,
                         .prepare = tm__ggml_iq_init, .quantize_ref = tm__gq_rows_iq2, .quantize_simd = TM__GQ_SIMD(tm__gq_rows_iq2_avx2),
                         .uses_imatrix = 1, .code_step = tm__ggml_step_iq2xxs},
    [TM_GGML_IQ2_XS]  = {INFO(IQ2_XS, QK, 74, 1, -1, 16, 0, 2, -43, 43), .dequantize = tm__ggml_dq_iq2_xs,
                         .prepare = tm__ggml_iq_init, .quantize_ref = tm__gq_rows_iq2, .quantize_simd = TM__GQ_SIMD(tm__gq_rows_iq2_avx2),
                         .uses_imatrix = 1, .code_step = tm__ggml_step_iq2xs},
    [TM_GGML_IQ3_XXS] = {INFO(IQ3_XXS, QK, 98, 1, -1, 32, 0, 3, -62, 62), .dequantize = tm__ggml_dq_iq3_xxs,
                         .prepare = tm__ggml_iq_init, .quantize_ref = tm__gq_rows_iq3_xxs, .quantize_simd = TM__GQ_SIMD(tm__gq_rows_iq3_xxs_avx2),
                         .uses_imatrix = 1, .code_step = tm__ggml_step_iq3xxs},
    [TM_GGML_IQ1_S]   = {INFO(IQ1_S, QK, 50, 1, -1, 32, 0, 1, -9, 9), .dequantize = tm__ggml_dq_iq1_s,
                         .prepare = tm__ggml_iq_init, .quantize_ref = tm__gq_rows_iq2, .quantize_simd = TM__GQ_SIMD(tm__gq_rows_iq2_avx2),
                         .uses_imatrix = 1, .code_step = tm__ggml_step_iq1},
    [TM_GGML_IQ4_NL]  = {INFO(IQ4_NL, 32, 18, 1, -1, 32, 0, 4, -127, 113), .dequantize = tm__ggml_dq_iq4_nl,
                         .quantize_ref = tm__gq_rows_iq4_nl, .quantize_simd = TM__GQ_SIMD(tm__gq_rows_iq4_nl_avx2),
                         .uses_imatrix = 1, .code_step = tm__ggml_step_iq4},
    [TM_GGML_IQ3_S]   = {INFO(IQ3_S, QK, 110, 1, -1, 32, 0, 3, -15, 15), .dequantize = tm__ggml_dq_iq3_s,
                         .prepare = tm__ggml_iq_init, .quantize_ref = tm__gq_rows_iq3_s, .quantize_simd = TM__GQ_SIMD(tm__gq_rows_iq3_s_avx2),
                         .uses_imatrix = 1, .code_step = tm__ggml_step_iq3s},
    [TM_GGML_IQ2_S]   = {INFO(IQ2_S, QK, 82, 1, -1, 16, 0, 2, -43, 43), .dequantize = tm__ggml_dq_iq2_s,
                         .prepare = tm__ggml_iq_init, .quantize_ref = tm__gq_rows_iq2, .quantize_simd = TM__GQ_SIMD(tm__gq_rows_iq2_avx2),
                         .uses_imatrix = 1, .code_step = tm__ggml_step_iq2s},
    [TM_GGML_IQ4_XS]  = {INFO(IQ4_XS, QK, 136, 1, -1, 32, 0, 4, -127, 113), .dequantize = tm__ggml_dq_iq4_xs,
                         .quantize_ref = tm__gq_rows_iq4_xs, .quantize_simd = TM__GQ_SIMD(tm__gq_rows_iq4_xs_avx2),
                         .uses_imatrix = 1, .code_step = tm__ggml_step_iq4},
    [TM_GGML_I8]      = {INFO(I8, 1, 1, 0, TM_I8, 1, 0, 8, 0, 0)},
    [TM_GGML_I16]     = {INFO(I16, 1, 2, 0, TM_I16, 1, 0, 16, 0, 0)},
    [TM_GGML_I32]     = {INFO(I32, 1, 4, 0, TM_I32, 1, 0, 32, 0, 0)},
    [TM_GGML_I64]     = {INFO(I64, 1, 8, 0, TM_I64, 1, 0, 64, 0, 0)},
    [TM_GGML_F64]     = {INFO(F64, 1, 8, 0, TM_F64, 1, 0, 64, 0, 0)},
    [TM_GGML_IQ1_M]   = {INFO(IQ1_M, QK, 56, 1, -1, 16, 0, 1, -9, 9), .dequantize = tm__ggml_dq_iq1_m,
                         .prepare = tm__ggml_iq_init, .quantize_ref = tm__gq_rows_iq2, .quantize_simd = TM__GQ_SIMD(tm__gq_rows_iq2_avx2),
                         .uses_imatrix = 1, .code_step = tm__ggml_step_iq1},
    [TM_GGML_BF16]    = {INFO(BF16, 1, 2, 0, TM_BF16, 1, 0, 16, 0, 0), .quantize_ref = tm__gq_rows_bf16},
    [TM_GGML_TQ1_0]   = {INFO(TQ1_0, QK, 54, 1, -1, QK, 0, 2, 0, 2), .dequantize = tm__ggml_dq_tq1_0,
                         .quantize_ref = tm__gq_rows_tq1_0,
                         .quantize_simd = TM__GQ_SIMD(tm__gq_rows_tq1_0_avx2)},
    [TM_GGML_TQ2_0]   = {INFO(TQ2_0, QK, 66, 1, -1, QK, 0, 2, 0, 3), .dequantize = tm__ggml_dq_tq2_0,
                         .quantize_ref = tm__gq_rows_tq2_0,
                         .quantize_simd = TM__GQ_SIMD(tm__gq_rows_tq2_0_avx2)},
    [TM_GGML_TYPE_COUNT - 1] = {{0}}, /* 36-38: removed (IQ4_NL_4_4/4_8/8_8), empty rows */
};
_Static_assert(sizeof tm__ggml_traits_table / sizeof tm__ggml_traits_table[0] == TM_GGML_TYPE_COUNT,
               "tm__ggml_traits_table has one row per ggml type id");

const tm_ggml_type_info *tm_ggml_type_info_get(int type) {
    const tm__ggml_traits *t = tm__ggml_traits_of(type);
    return t ? &t->info : NULL; /* removed ids have an empty row */
}

double tm_ggml_code_step(int type) {
    const tm__ggml_traits *t = tm__ggml_traits_of(type);
    if (!t || !t->code_step) return 1.0;
    double s = t->code_step();
    return s > 0 ? s : 1.0;
}

int tm_ggml_type_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < TM_GGML_TYPE_COUNT; i++)
        if (tm__ggml_traits_table[i].info.name && strcasecmp(tm__ggml_traits_table[i].info.name, name) == 0)
            return i;
    return -1;
}

tm_status tm_ggml_row_bytes(int type, int64_t n, uint64_t *out, tm_err *err) {
    const tm_ggml_type_info *t = tm_ggml_type_info_get(type);
    if (!t) return tm__err_set(err, TM_E_UNSUPPORTED, -1, "unsupported ggml type %d", type);
    if (n < 0 || n % t->block_size != 0)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "%lld values of ggml type %s are not a multiple of its block of %lld",
                           (long long)n, t->name, (long long)t->block_size);
    if (!tm__mul_u64_ok((uint64_t)(n / t->block_size), t->type_size, out))
        return tm__err_set(err, TM_E_LIMIT, -1, "%lld values of ggml type %s overflow 64 bits",
                           (long long)n, t->name);
    return TM_OK;
}
