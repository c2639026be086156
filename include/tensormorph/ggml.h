/*
** tensormorph/ggml.h: the ggml tensor types that GGUF files hold, and their dequantizers.
**
** Type ids, block sizes and bytes per block are facts of the GGUF format: ggml's `enum
** ggml_type` (ggml/include/ggml.h) and its type-traits table (ggml/src/ggml.c) at
** ggml-org/llama.cpp@c392e5094deaf2d1a7c18683214f007fad3fe42b; the same numbers are gguf-py's
** GGML_QUANT_SIZES. Ids 4, 5 (removed Q4_2, Q4_3), 31-33 (removed Q4_0_4_4/4_8/8_8) and 36-38
** (removed IQ4_NL_4_4/4_8/8_8) are not types; 39 (MXFP4) does not exist at that commit.
**
** A ggml row of n values is n / block_size blocks of type_size bytes each, in order; GGUF's
** ne[0] is the row length. Every dequantizer reproduces ggml's dequantize_row_* in float32
** with the same order of operations (docs/formats.md "GGUF"), bit for bit.
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_GGML_H
#define TENSORMORPH_GGML_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ggml type ids as GGUF stores them. Never renumber. */
typedef enum tm_ggml_type {
    TM_GGML_F32 = 0, TM_GGML_F16 = 1, TM_GGML_Q4_0 = 2, TM_GGML_Q4_1 = 3,
    TM_GGML_Q5_0 = 6, TM_GGML_Q5_1 = 7, TM_GGML_Q8_0 = 8, TM_GGML_Q8_1 = 9,
    TM_GGML_Q2_K = 10, TM_GGML_Q3_K = 11, TM_GGML_Q4_K = 12, TM_GGML_Q5_K = 13,
    TM_GGML_Q6_K = 14, TM_GGML_Q8_K = 15,
    TM_GGML_IQ2_XXS = 16, TM_GGML_IQ2_XS = 17, TM_GGML_IQ3_XXS = 18, TM_GGML_IQ1_S = 19,
    TM_GGML_IQ4_NL = 20, TM_GGML_IQ3_S = 21, TM_GGML_IQ2_S = 22, TM_GGML_IQ4_XS = 23,
    TM_GGML_I8 = 24, TM_GGML_I16 = 25, TM_GGML_I32 = 26, TM_GGML_I64 = 27, TM_GGML_F64 = 28,
    TM_GGML_IQ1_M = 29, TM_GGML_BF16 = 30,
    TM_GGML_TQ1_0 = 34, TM_GGML_TQ2_0 = 35,
    TM_GGML_TYPE_COUNT = 39   /* ids >= this are unknown                                   */
} tm_ggml_type;

/* QK_K: values per super-block of the K, IQ (except IQ4_NL) and TQ types. */
#define TM_GGML_QK_K 256

typedef struct tm_ggml_type_info {
    int         id;             /* tm_ggml_type                                               */
    const char *name;           /* "F32", "Q4_K", "IQ2_XXS" (gguf-py GGMLQuantizationType names) */
    int64_t     block_size;     /* values per block (1 for plain types)                       */
    uint64_t    type_size;      /* bytes per block                                            */
    int         is_quantized;   /* 1 for block types                                          */
    int         plain_dtype;    /* plain types: the tm_dtype of an element; block types: -1   */
    int64_t     sub_block;      /* values sharing one effective scale (the LSB unit): the block
                                   for Q4_0..Q8_1, IQ4_NL, TQ*; the sub-block for K/IQ types   */
    int         has_min;        /* 1: value = scale*q - min (Q4_1 Q5_1 Q2_K Q4_K Q5_K)       */
    int         code_bits;      /* bits of the stored code of one value (grid types: index bits
                                   per 8/4 values divided out, informative)                  */
    int64_t     qmin, qmax;     /* range of tm_ggml_elem.code                                 */
    int         can_dequantize; /* 1: tm_ggml_dequantize supports it                          */
} tm_ggml_type_info;

/* tm_ggml_type_info_get: the row of type id `type`; NULL for an unknown or removed id. */
const tm_ggml_type_info *tm_ggml_type_info_get(int type);

/* tm_ggml_code_step: one LSB of `type` in units of its code (tm_ggml_elem.code): 1 for the
** integer-code types (Q*, K-quants, TQ*); for the codebook types the mean spacing of their code
** values, (largest - smallest distinct |code|) / (levels - 1), derived from ggml's grids
** (ggml-common.h at llama.cpp c392e509): IQ2_XXS/IQ2_XS/IQ2_S 17.5 ({8, 25, 43}), IQ3_XXS 8.29
** ({4, 12, ..., 62}), IQ3_S 2 ({1, 3, ..., 15}), IQ1_S/IQ1_M 8 (code 8*grid +- 1), IQ4_NL/IQ4_XS 16 (kvalues
** -127..113). qdiff and the heatmap measure errors in (sub-block scale * this step), so one LSB
** is one step between neighbouring codes for every type (docs/qdiff.md). 1 for an unknown id. */
double tm_ggml_code_step(int type);

/* tm_ggml_type_from_name: id of a type name (exact, case-insensitive: "q4_k", "Q4_K"); -1. */
int tm_ggml_type_from_name(const char *name);

/* tm_ggml_row_bytes: bytes of n values of `type` (n a multiple of its block size).
** Returns TM_OK | TM_E_UNSUPPORTED ("unsupported ggml type N") | TM_E_INVALID_ARG (n < 0 or
** not a multiple of the block) | TM_E_LIMIT (overflow). */
tm_status tm_ggml_row_bytes(int type, int64_t n, uint64_t *out, tm_err *err);

/* tm_ggml_dequantize: n values (a multiple of the block size) of `type` from `src` (n/block
** blocks, src_bytes bytes, any alignment) into dst, bit-exactly as ggml's dequantize_row_*.
** Plain types (F32 F16 BF16 F64 I8 I16 I32 I64) convert as tm_convert_to_f32.
** Returns TM_OK | TM_E_UNSUPPORTED (unknown type, Q8_1/Q8_K) | TM_E_INVALID_ARG (sizes). */
tm_status tm_ggml_dequantize(int type, const void *src, uint64_t src_bytes, int64_t n, float *dst,
                             tm_err *err);

/* One value of a block as the Scalar Inspector shows it. The value, computed in float32 in
** ggml's order, is `value`; in exact arithmetic
**     value = (code - zero_point) * scale - min
** where scale = super_scale * sub_scale (times a type constant, see docs/formats.md "GGUF")
** and min = super_min * sub_min. For grid (IQ) types `code` is the signed grid value. */
typedef struct tm_ggml_elem {
    int64_t  code;        /* the integer the block stores for this value (see above)           */
    uint64_t stored;      /* the byte(s) holding its low bits, little-endian                   */
    int      stored_bits; /* width of `stored`                                                 */
    double   scale;       /* effective step of this value's sub-block                          */
    double   zero_point;  /* code offset (Q4_0: 8, Q3_K: 4, Q6_K: 32, ...); 0 when none        */
    double   min;         /* subtracted after scaling (has_min types), else 0                  */
    double   super_scale; /* the block's f16/f32 d (widened)                                   */
    double   super_min;   /* the block's dmin / m (has_min types), else 0                      */
    int64_t  sub_scale;   /* the sub-block's integer scale as stored (K/IQ types), else 1      */
    int64_t  sub_min;     /* the sub-block's integer min (Q2_K Q4_K Q5_K), else 0              */
    int64_t  sub_block;   /* index of the sub-block within the block                           */
    float    value;       /* the dequantized value (== tm_ggml_dequantize's)                   */
} tm_ggml_elem;

/* tm_ggml_block_elem: value j (0 <= j < block_size) of the block at `block` (type_size bytes).
** Returns TM_OK | TM_E_UNSUPPORTED | TM_E_INVALID_ARG (j out of range, plain type). */
tm_status tm_ggml_block_elem(int type, const void *block, int64_t j, tm_ggml_elem *out,
                             tm_err *err);

/* tm_ggml_block_scales: per sub-block effective scale, zero point and min of one block
** (block_size / sub_block entries each; any output may be NULL). Same returns. */
tm_status tm_ggml_block_scales(int type, const void *block, double *scale, double *zero_point,
                               double *min, tm_err *err);

/* GGUF files (src/formats/gguf.c). tm_file_meta_key/value list every key/value; the value
** text summarises arrays as "[N x type: first 8 ...]". These give the rest: */

/* tm_gguf_meta_json: the complete value of metadata entry i as JSON text (numbers, strings,
** true/false, arrays in full; a u64 above INT64_MAX and non-finite floats as strings); NULL when
** f is not a GGUF file or i is out of range. Valid until tm_close. */
const char *tm_gguf_meta_json(const tm_file *f, int64_t i);
/* tm_gguf_meta_type: the GGUF value type of entry i ("u32", "string", "array", ...) or NULL. */
const char *tm_gguf_meta_type(const tm_file *f, int64_t i);
/* tm_gguf_tensor_type: the ggml type id of tensor i as stored; -1 when not GGUF. */
int tm_gguf_tensor_type(const tm_file *f, int64_t i);
/* tm_gguf_info: version, general.alignment (default 32) and the data section's file offset;
** returns 0 (outputs untouched) when f is not GGUF. Any output may be NULL. */
int tm_gguf_info(const tm_file *f, uint32_t *version, uint64_t *alignment, uint64_t *data_start);

#ifdef __cplusplus
}
#endif

#endif /* TENSORMORPH_GGML_H */
