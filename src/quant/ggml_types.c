/* ggml_types.c: the ggml type table (ids, block sizes, bytes per block) and row sizes.
** Facts of the GGUF format: ggml's `enum ggml_type` (ggml/include/ggml.h) and the type-traits
** table in ggml/src/ggml.c at ggml-org/llama.cpp@c392e5094deaf2d1a7c18683214f007fad3fe42b;
** the block sizes and bytes equal gguf-py's GGML_QUANT_SIZES and every
** ../shared/vectors/gguf_dequant/<type>/case.json "params". The per-type code ranges and
** sub-block sizes follow from the block layouts in ggml/src/ggml-common.h (docs/formats.md). */
#include "../core/core.h"

#include <strings.h>

#define QK 256 /* TM_GGML_QK_K */

/* id, name, block, bytes, quantized, plain dtype, sub-block, has_min, code bits, qmin, qmax,
** dequantizable */
static const tm_ggml_type_info k_types[TM_GGML_TYPE_COUNT] = {
    [TM_GGML_F32]     = {TM_GGML_F32, "F32", 1, 4, 0, TM_F32, 1, 0, 32, 0, 0, 1},
    [TM_GGML_F16]     = {TM_GGML_F16, "F16", 1, 2, 0, TM_F16, 1, 0, 16, 0, 0, 1},
    [TM_GGML_Q4_0]    = {TM_GGML_Q4_0, "Q4_0", 32, 18, 1, -1, 32, 0, 4, 0, 15, 1},
    [TM_GGML_Q4_1]    = {TM_GGML_Q4_1, "Q4_1", 32, 20, 1, -1, 32, 1, 4, 0, 15, 1},
    [TM_GGML_Q5_0]    = {TM_GGML_Q5_0, "Q5_0", 32, 22, 1, -1, 32, 0, 5, 0, 31, 1},
    [TM_GGML_Q5_1]    = {TM_GGML_Q5_1, "Q5_1", 32, 24, 1, -1, 32, 1, 5, 0, 31, 1},
    [TM_GGML_Q8_0]    = {TM_GGML_Q8_0, "Q8_0", 32, 34, 1, -1, 32, 0, 8, -128, 127, 1},
    [TM_GGML_Q8_1]    = {TM_GGML_Q8_1, "Q8_1", 32, 36, 1, -1, 32, 0, 8, -128, 127, 1},
    [TM_GGML_Q2_K]    = {TM_GGML_Q2_K, "Q2_K", QK, 84, 1, -1, 16, 1, 2, 0, 3, 1},
    [TM_GGML_Q3_K]    = {TM_GGML_Q3_K, "Q3_K", QK, 110, 1, -1, 16, 0, 3, 0, 7, 1},
    [TM_GGML_Q4_K]    = {TM_GGML_Q4_K, "Q4_K", QK, 144, 1, -1, 32, 1, 4, 0, 15, 1},
    [TM_GGML_Q5_K]    = {TM_GGML_Q5_K, "Q5_K", QK, 176, 1, -1, 32, 1, 5, 0, 31, 1},
    [TM_GGML_Q6_K]    = {TM_GGML_Q6_K, "Q6_K", QK, 210, 1, -1, 16, 0, 6, 0, 63, 1},
    [TM_GGML_Q8_K]    = {TM_GGML_Q8_K, "Q8_K", QK, 292, 1, -1, QK, 0, 8, -128, 127, 1},
    [TM_GGML_IQ2_XXS] = {TM_GGML_IQ2_XXS, "IQ2_XXS", QK, 66, 1, -1, 32, 0, 2, -43, 43, 1},
    [TM_GGML_IQ2_XS]  = {TM_GGML_IQ2_XS, "IQ2_XS", QK, 74, 1, -1, 16, 0, 2, -43, 43, 1},
    [TM_GGML_IQ3_XXS] = {TM_GGML_IQ3_XXS, "IQ3_XXS", QK, 98, 1, -1, 32, 0, 3, -62, 62, 1},
    [TM_GGML_IQ1_S]   = {TM_GGML_IQ1_S, "IQ1_S", QK, 50, 1, -1, 32, 0, 1, -9, 9, 1},
    [TM_GGML_IQ4_NL]  = {TM_GGML_IQ4_NL, "IQ4_NL", 32, 18, 1, -1, 32, 0, 4, -127, 113, 1},
    [TM_GGML_IQ3_S]   = {TM_GGML_IQ3_S, "IQ3_S", QK, 110, 1, -1, 32, 0, 3, -15, 15, 1},
    [TM_GGML_IQ2_S]   = {TM_GGML_IQ2_S, "IQ2_S", QK, 82, 1, -1, 16, 0, 2, -43, 43, 1},
    [TM_GGML_IQ4_XS]  = {TM_GGML_IQ4_XS, "IQ4_XS", QK, 136, 1, -1, 32, 0, 4, -127, 113, 1},
    [TM_GGML_I8]      = {TM_GGML_I8, "I8", 1, 1, 0, TM_I8, 1, 0, 8, 0, 0, 1},
    [TM_GGML_I16]     = {TM_GGML_I16, "I16", 1, 2, 0, TM_I16, 1, 0, 16, 0, 0, 1},
    [TM_GGML_I32]     = {TM_GGML_I32, "I32", 1, 4, 0, TM_I32, 1, 0, 32, 0, 0, 1},
    [TM_GGML_I64]     = {TM_GGML_I64, "I64", 1, 8, 0, TM_I64, 1, 0, 64, 0, 0, 1},
    [TM_GGML_F64]     = {TM_GGML_F64, "F64", 1, 8, 0, TM_F64, 1, 0, 64, 0, 0, 1},
    [TM_GGML_IQ1_M]   = {TM_GGML_IQ1_M, "IQ1_M", QK, 56, 1, -1, 16, 0, 1, -9, 9, 1},
    [TM_GGML_BF16]    = {TM_GGML_BF16, "BF16", 1, 2, 0, TM_BF16, 1, 0, 16, 0, 0, 1},
    [TM_GGML_TQ1_0]   = {TM_GGML_TQ1_0, "TQ1_0", QK, 54, 1, -1, QK, 0, 2, 0, 2, 1},
    [TM_GGML_TQ2_0]   = {TM_GGML_TQ2_0, "TQ2_0", QK, 66, 1, -1, QK, 0, 2, 0, 3, 1},
};

const tm_ggml_type_info *tm_ggml_type_info_get(int type) {
    if (type < 0 || type >= TM_GGML_TYPE_COUNT) return NULL;
    const tm_ggml_type_info *t = &k_types[type];
    return t->name ? t : NULL; /* removed ids have an empty row */
}

int tm_ggml_type_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < TM_GGML_TYPE_COUNT; i++)
        if (k_types[i].name && strcasecmp(k_types[i].name, name) == 0) return i;
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
