/*
** ggml_traits.h: private to src/quant (and the tests): the one ggml type-traits table. Row
** `tm__ggml_traits[id]` of a TM_GGML_* id holds every fact and every function of that type:
** the public facts (tm_ggml_type_info: name, block size, type size, is quantized, ...), the
** block dequantizer, the reference quantizer and its SIMD variants. The table is defined in
** ggml_types.c with designated initializers; the functions it names live in ggml_dequant.c,
** ggml_dequant_iq.c, ggml_quant.c and ggml_quant_avx2.c, which do not use the table;
** ggml_row.c walks it for whole rows. Every path (the GGUF reader, tm_ggml_dequantize,
** tm_gq_quantize_row, the GGUF quantize job, the tests) looks a type up here; nothing else
** switches on a ggml type id to find a function.
**
** Adding a type: its id in tensormorph/ggml.h, its row in ggml_types.c (the _Static_assert there
** counts the ids), and its functions declared below.
*/
#ifndef TM_QUANT_GGML_TRAITS_H
#define TM_QUANT_GGML_TRAITS_H

#include "ggml_iq.h"
#include "ggml_quant_impl.h"
#include "ggml_quant_iq2.h"

/* Blocks b0 .. nb-1 of a row of a writable type t (its row of the table): x is the row's first
** value, y its first block (block b at x + b * block_size, y + b * type_size). On an error *bad_block (may be
** NULL) gets the block (the element for F16) and nothing after it is written. The values are
** finite (the caller checked).
** imatrix: NULL (no importance matrix: ggml's quant_weights == NULL path), or the importance of
** each input column of this ONE row, imatrix[i] for x[i], i in [0, nb * block_size): x then
** holds exactly one row of nb blocks (b0 is 0) and row-wide sums (ggml's sigma2 of the _impl
** quantizers) run over x[0 .. nb * block_size). Only types whose row has `uses_imatrix` set
** are ever given one (ggml_row.c drops it for the others, as ggml's quantize_q8_0 ignores it). */
typedef tm_status (*tm__gq_rows_fn)(const tm_ggml_type_info *t, const float *x, const float *imatrix,
                                    int64_t b0, int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err);

/* A SIMD quantizer that checks its own input and measures its own error: nb blocks from x into
** y; returns the index of the first block holding a NaN or inf or failing the reference's range
** checks (nothing written from it on), or -1. With acc non-NULL, each block written is added to
** acc (x's index 0 a lane-0 index of acc, see tm__gq_err); blocks from a failing one on are not.
** Same bytes as the reference quantizer. */
typedef int64_t (*tm__gq_fused_fn)(const float *x, int64_t nb, uint8_t *y, tm__gq_err *acc);

typedef struct tm__ggml_traits {
    tm_ggml_type_info info;         /* the public facts (tm_ggml_type_info_get returns &info)  */
    tm__ggml_block_fn dequantize;   /* one block's values (and detail); NULL: plain types      */
    int (*prepare)(void);           /* NULL, or run (thread-safe) before `dequantize`: 0 when
                                       its tables are unusable (the IQ grids)                  */
    tm__gq_rows_fn    quantize_ref; /* the reference quantizer (the specification); NULL: not
                                       writable                                                */
    tm__gq_rows_fn    quantize_simd;/* SIMD variant of quantize_ref (same bytes), or NULL      */
    tm__gq_fused_fn   quantize_err; /* SIMD quantizer + error kernel (same bytes), or NULL     */
    double (*code_step)(void);      /* codebook types (IQ*): the mean spacing of their code
                                       values, one LSB in code units (ggml_dequant_iq.c); NULL:
                                       integer codes, one LSB is one code                      */
    int               uses_imatrix; /* 1: quantize_ref reads an importance matrix (ggml's
                                       quantize_<type> takes quant_weights); with one, the
                                       fused quantize_err never runs, quantize_simd (when set)
                                       must take it too (same bytes as quantize_ref)          */
} tm__ggml_traits;

/* The table: TM_GGML_TYPE_COUNT rows, indexed by id; a removed id's row is all zero. */
extern const tm__ggml_traits tm__ggml_traits_table[TM_GGML_TYPE_COUNT];

/* The row of `type`, or NULL for an unknown or removed id. */
static inline const tm__ggml_traits *tm__ggml_traits_of(int type) {
    if (type < 0 || type >= TM_GGML_TYPE_COUNT || !tm__ggml_traits_table[type].info.name)
        return NULL;
    return &tm__ggml_traits_table[type];
}

/* Codebook steps (ggml_dequant_iq.c), derived from the grids: (largest - smallest distinct
** |code|) / (count - 1). IQ2_XXS/XS/S: {8, 25, 43} -> 17.5; IQ3_XXS {4..62}, IQ3_S {1..15}: 8 levels; IQ1
** codes 8*grid +- 1 -> 8; IQ4 kvalues -127..113 -> 16. 0 when the grids are unusable. */
double tm__ggml_step_iq2xxs(void);
double tm__ggml_step_iq2xs(void);
double tm__ggml_step_iq2s(void);
double tm__ggml_step_iq3xxs(void);
double tm__ggml_step_iq3s(void);
double tm__ggml_step_iq1(void);
double tm__ggml_step_iq4(void);

/* Block dequantizers (ggml_dequant.c, ggml_dequant_iq.c). */
void tm__ggml_dq_q4_0(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_q4_1(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_q5_0(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_q5_1(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_q8_0(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_q8_1(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_q2_k(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_q3_k(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_q4_k(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_q5_k(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_q6_k(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_q8_k(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_iq4_nl(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_iq4_xs(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_tq1_0(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_tq2_0(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_iq2_xxs(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_iq2_xs(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_iq2_s(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_iq3_xxs(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_iq3_s(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_iq1_s(const uint8_t *b, float *y, blk_detail *dt);
void tm__ggml_dq_iq1_m(const uint8_t *b, float *y, blk_detail *dt);

/* Reference quantizers (ggml_quant.c). */
tm_status tm__gq_rows_f32(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_f16(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_bf16(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q4_0(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q4_1(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q5_0(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q5_1(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q8_0(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q2_k(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q3_k(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q4_k(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q5_k(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q6_k(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);

/* The non-linear, grid and ternary types (ggml_quant_iq.c): IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S
** with and without an importance matrix, TQ1_0 and TQ2_0 (which ignore it). */
tm_status tm__gq_rows_iq4_nl(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_iq4_xs(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_iq3_xxs(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_iq3_s(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_tq1_0(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_tq2_0(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
/* The IQ3 search tables (tests): for the 256-row (IQ3_XXS) or 512-row (IQ3_S) grid, the map
** entry of level key u (0..4095: >= 0 the grid row, < 0 off the grid, then *neighbours gets its
** list: count, then rows); INT32_MIN when the tables are unusable. */
int tm__gq_iq3_lookup(int rows, int u, const uint16_t **neighbours);

#ifdef TM__GQ_HAVE_AVX2
/* The K-quants with the AVX2 scale searches (ggml_quant.c). */
tm_status tm__gq_rows_q2_k_avx2(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q3_k_avx2(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q4_k_avx2(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q5_k_avx2(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
/* Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q6_K: the reference without importance matrix (Q4_0 and Q6_K take
** their fused kernels then, quantize_err); with one, the eight-lane searches. */
tm_status tm__gq_rows_q4_0_avx2(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q5_0_avx2(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q6_k_avx2(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q4_1_avx2(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_q5_1_avx2(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
/* IQ4_NL / IQ4_XS with the scale search's 16 trials in AVX2 lanes (ggml_quant_iq_avx2.c), with
** and without importance matrix; the same bytes as tm__gq_rows_iq4_nl / tm__gq_rows_iq4_xs. */
tm_status tm__gq_rows_iq4_nl_avx2(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_iq4_xs_avx2(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
/* IQ3_XXS / IQ3_S with the scale trials in AVX2 lanes (tm__iq3_trials_avx2, ggml_quant_iq.c). */
tm_status tm__gq_rows_iq3_xxs_avx2(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_iq3_s_avx2(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
/* TQ1_0 / TQ2_0 with the trits in AVX2 lanes (ggml_quant_iq_avx2.c). */
tm_status tm__gq_rows_tq1_0_avx2(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
tm_status tm__gq_rows_tq2_0_avx2(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
/* IQ2_XXS / IQ2_XS / IQ2_S / IQ1_S / IQ1_M with the IQ2 best-neighbour search in AVX2 lanes
** (ggml_quant_iq2.c, tm__iq2_best_avx2); the same bytes as tm__gq_rows_iq2. */
tm_status tm__gq_rows_iq2_avx2(const tm_ggml_type_info *, const float *, const float *, int64_t, int64_t, uint8_t *,
                           int64_t *, tm_err *);
/* Q6_K with the AVX2 scale search and final codes, measuring the error as it makes them
** (ggml_quant.c); tm__gq_q8_0_avx2 / tm__gq_q4_0_avx2 (ggml_quant_avx2.c) are the others of
** the quantize_err column. */
int64_t tm__gq_q6_k_avx2(const float *x, int64_t nb, uint8_t *y, tm__gq_err *acc);
#define TM__GQ_SIMD(f) f
#else
#define TM__GQ_SIMD(f) NULL
#endif

#endif
