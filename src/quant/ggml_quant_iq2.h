/* ggml_quant_iq2.h: private to src/quant: the IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M block
** quantizers (ggml_quant_iq2.c) and the search tables they walk, derived from the grids of
** ggml_iq_tables.c (ggml_iq2_nbr.c). Not installed. */
#ifndef TM_QUANT_GGML_QUANT_IQ2_H
#define TM_QUANT_GGML_QUANT_IQ2_H

#include "core/core.h"

/* The search tables of one 8-value grid, as llama.cpp's iq2xs_init_impl (ggml/src/ggml-quants.c
** at ggml-org/llama.cpp@c392e509) defines them:
**   pos[j][k]   = 2 l + 1, l in 0..3 the k-th 2-bit level of grid point j (IQ2: the grid value
**                 8/25/43 is level 0/1/2; IQ1: -1/0/1 is level 0/1/2);
**   map[u]      for the 16-bit key u = sum_k l_k << 2k (u < TM__IQ2_KMAP): the grid index of u when
**                 u is a grid point, else -(o + 1) with nbr[o] the count of u's neighbours and
**                 nbr[o + 1 ...] their grid indices;
**   neighbours  of a key not on the grid: every grid point whose squared distance sum_k
**                 (pos - (2 l_k + 1))^2 is one of the `nwant` smallest distinct distances (2 for
**                 IQ2_XXS/XS, 1 for IQ2_S, 3 for IQ1), ordered by (distance, grid index). */
#define TM__IQ2_KMAP 43692
typedef struct tm__iq2_tab tm__iq2_tab;
struct tm__iq2_tab {
    int            ngrid;
    const int8_t (*pos)[8];
    const int32_t *map;
    const uint16_t *nbr;
    /* the same lists' positions transposed for the candidate loop, padded to a multiple of 8
    ** candidates (the pad repeats the last one): for off-grid key u with n neighbours and
    ** n8 = n rounded up to 8, tq[tqo[u] + k n8 + j] = pos[neighbour j][k] */
    const int8_t   *tq;
    const uint32_t *tqo;
    /* the same lists as the candidates' 16-bit keys (sum_k l_k << 2k), one an entry, padded the
    ** same way: tk[tqo[u] / 8 + j] (a quarter of tq's bytes, for the SIMD searches) */
    const uint16_t *tk;
    /* NULL (the built tables): the scalar best-neighbour search of ggml_quant_iq2.c; a copy of
    ** the tables may name a SIMD variant with the same results (tm__iq2_best_avx2) */
    int (*best)(const tm__iq2_tab *t, int u, const float *xval, const float *w, float scale, int8_t *L);
    /* NULL: the 19 scale trials of IQ2_XS / IQ2_S's sub-block search in scalar code (trials16 of
    ** ggml_quant_iq2.c), else a SIMD variant with the same results (tm__iq2_trials16_avx2) */
    float (*trials16)(const tm__iq2_tab *t, const float *weight, const float *waux, const float *xval, float max,
                      int8_t *L, int *on_grid);
    /* NULL: the 13 scale trials of IQ2_XXS's sub-block search in scalar code (trials32 of
    ** ggml_quant_iq2.c), else a SIMD variant with the same results (tm__iq2_trials32_avx2) */
    float (*trials32)(const tm__iq2_tab *t, const float *weight, const float *waux, const float *xval, float eff_max,
                      float scale, int8_t *L);
    /* NULL: IQ1_S's scalar split search (iq1s_splits of ggml_quant_iq2.c), else a SIMD variant
    ** with the same results (tm__iq1s_splits_avx2) */
    void (*iq1s_splits)(const float *sumx, const float *sumw, float *scale, int *bi1, int *bi2, int *bshift);
    /* NULL: IQ1_M's scalar split search (iq1m_splits of ggml_quant_iq2.c), else a SIMD variant
    ** with the same results (tm__iq1m_splits_avx2) */
    void (*iq1m_splits)(const float *weight, const float *xb, const int *idx, float *scale, int *bi1, int *bi2,
                        int *bk);
    /* NULL: IQ1_S / IQ1_M's scalar best-neighbour search (best_neighbour1 of ggml_quant_iq2.c) of
    ** the off-grid key u, levels xg[0..2]; else a SIMD variant (tm__iq1_best_avx2) */
    int (*best1)(const tm__iq2_tab *t, int u, const float *xval, const float *w, float scale, const float *xg,
                 int8_t *L);
    /* NULL: IQ1_S / IQ1_M's scalar stable sort of a sub-block (sort_idx of ggml_quant_iq2.c: the
    ** order ascending into idx), else a SIMD variant with the same order (tm__iq1_sort_avx2) */
    void (*sort1)(int n, const float *xb, int *idx);
};

/* Which grid: the four 8-value grids of the five types (IQ1_S and IQ1_M share one). */
enum { TM__IQ2_GRID_XXS = 0, TM__IQ2_GRID_XS = 1, TM__IQ2_GRID_S = 2, TM__IQ2_GRID_1S = 3 };

/* The tables of grid g, built on first use (thread-safe); NULL when the grids are damaged or
** memory ran out. */
const tm__iq2_tab *tm__iq2_tab_get(int g);

/* Quantize n values (a multiple of 256) at x into n / 256 blocks at y. qw: n importance weights
** for these columns (the imatrix entry of the tensor, the same columns as x), or NULL.
** IQ2_XXS, IQ2_XS and IQ1_S need qw (llama.cpp asserts it); IQ2_S and IQ1_M fall back to the
** reference's unweighted rule. Values are finite (the caller checks).
** Returns -1, or the index of the first block whose float16 scale would overflow (the
** reference would store inf; the blocks from it on are unspecified). Byte-identical to
** quantize_iq2_xxs / quantize_iq2_xs / quantize_iq2_s / quantize_iq1_s / quantize_iq1_m on one
** row (ggml-quants.c at c392e509). */
int64_t tm__gq_iq2_xxs(const tm__iq2_tab *tab, const float *x, uint8_t *y, int64_t n, const float *qw);
int64_t tm__gq_iq2_xs(const tm__iq2_tab *tab, const float *x, uint8_t *y, int64_t n, const float *qw);
int64_t tm__gq_iq2_s(const tm__iq2_tab *tab, const float *x, uint8_t *y, int64_t n, const float *qw);
int64_t tm__gq_iq1_s(const tm__iq2_tab *tab, const float *x, uint8_t *y, int64_t n, const float *qw);
int64_t tm__gq_iq1_m(const tm__iq2_tab *tab, const float *x, uint8_t *y, int64_t n, const float *qw);

/* The table's rows (ggml_traits.h tm__gq_rows_fn) of the five types: blocks [b0, nb) of a row,
** qw the row's n importance weights (indexed like x) or NULL. TM_E_INVALID_ARG for IQ2_XXS,
** IQ2_XS, IQ1_S without weights; TM_E_RANGE (bad_block set) when a float16 scale overflows;
** TM_E_NOMEM when the search tables cannot be built. */
struct tm_ggml_type_info;
tm_status tm__gq_rows_iq2w(const struct tm_ggml_type_info *t, const float *x, int64_t b0, int64_t nb,
                           uint8_t *y, const float *qw, int64_t *bad_block, tm_err *err);
/* iq2_find_best_neighbour of off-grid key u (8 values xval, weights w) at `scale`, with the
** candidates in AVX2 lanes (ggml_quant_iq_avx2.c): the grid index, its levels into L, exactly
** as the scalar search. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
int tm__iq2_best_avx2(const tm__iq2_tab *t, int u, const float *xval, const float *w, float scale, int8_t *L);
/* trials16 of ggml_quant_iq2.c with the 19 trials in the lanes of 3 registers: each lane's codes,
** keys and fit sums (i = 0..15 in order, as fit_sums) the scalar trial's; the off-grid groups
** through tm__iq2_best_avx2; the choice in scalar code in the trials' order. */
float tm__iq2_trials16_avx2(const tm__iq2_tab *t, const float *weight, const float *waux, const float *xval,
                            float max, int8_t *L, int *on_grid);
/* trials32 of ggml_quant_iq2.c, the same way: the 13 trials in the lanes of 2 registers. */
float tm__iq2_trials32_avx2(const tm__iq2_tab *t, const float *weight, const float *waux, const float *xval,
                            float eff_max, float scale, int8_t *L);
/* iq1s_splits in AVX2 lanes: every candidate's sums first (4 values of i2 times the two shifts a
** register, the scalar arithmetic), then the scalar rule run exactly from a near-best candidate
** that the rule provably keeps whatever came before it; where that proof's conditions fail, the
** walk of every chunk of 8 values of i2 (a chunk with no passing candidate skipped). Same result. */
void tm__iq1s_splits_avx2(const float *sumx, const float *sumw, float *scale, int *bi1, int *bi2, int *bshift);
/* iq1m_splits with the 4 combinations' sums (w v) x and (w v) v in the 8 lanes of one register,
** the terms of every sorted value precomputed: the same additions in the same order per lane; a
** split none of whose 4 candidates passes against the running best is skipped. */
void tm__iq1m_splits_avx2(const float *weight, const float *xb, const int *idx, float *scale, int *bi1, int *bi2,
                          int *bk);
/* best_neighbour1 with 8 candidates a register: the 24 terms (w_i (s xg_l - x_i)) (s xg_l - x_i)
** computed once, each candidate's d2 their sum over i = 0..7 in order (a lane-wise look-up). */
int tm__iq1_best_avx2(const tm__iq2_tab *t, int u, const float *xval, const float *w, float scale,
                      const float *xg, int8_t *L);
/* sort_idx's order of n values (n 16 or 32) by their ranks: value a goes to place
** #{b: x_b < x_a} + #{b < a: x_b == x_a}, the stable ascending order, counted in lanes. */
void tm__iq1_sort_avx2(int n, const float *xb, int *idx);
#endif
/* The same with the table's signature (ggml_traits.h tm__gq_rows_fn: imatrix before b0). */
tm_status tm__gq_rows_iq2(const struct tm_ggml_type_info *t, const float *x, const float *imatrix,
                          int64_t b0, int64_t nb, uint8_t *y, int64_t *bad_block, tm_err *err);

#endif
