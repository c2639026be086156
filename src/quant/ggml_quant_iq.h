/*
** ggml_quant_iq.h: private to src/quant: the IQ3 search tables and the IQ3 scale-trial loop,
** shared between the scalar quantizers (ggml_quant_iq.c, the specification) and their AVX2
** variant (ggml_quant_iq_avx2.c). Not installed.
*/
#ifndef TM_GGML_QUANT_IQ_H
#define TM_GGML_QUANT_IQ_H

#include "core/core.h"
#include "ggml_traits.h"

#include <stdbool.h>

/* A grid row holds 4 values, each one of 8 levels (the 8 distinct values of the grid, in
** ascending order: IQ3_XXS 4 12 20 28 36 44 52 62, IQ3_S 1 3 5 7 9 11 13 15). The search works
** on the odd numbers 2l + 1 of the levels l and keys a 4-tuple of levels by u = l0 | l1 << 3 |
** l2 << 6 | l3 << 9 (the index of ggml's kgrid_256 / kgrid_512 lists, which are these keys of
** the grid rows in row order, ascending). map[u] is the grid row of key u; for a key off the
** grid, -(1 + the position of its neighbour list in nb): the list's length, then the rows at
** the nwant smallest distinct squared distances sum (2l - 2l')^2 (nwant 2 for the 256-row grid,
** 3 for the 512-row grid), by distance, then row. nb has one spare entry at its end (0), so a
** 32-bit load at any entry stays inside it. */
typedef struct tm__iq3_tables {
    int       rows;
    int8_t    grid[512][4]; /* 2l + 1 of each value of each row                          */
    float     gridf[512][4];/* the same as float32 (exact; the search's products use it) */
    int32_t   map[4096];
    uint16_t *nb;           /* neighbour lists                                           */
} tm__iq3_tables;

/* The trials of one IQ3 sub-block of 32 (quantize_row_iq3_xxs_impl / _s_impl's loop over is):
** for is = -nis .. nis, the inverse scale id = (15 + 0.2 is) / max and scale 1 / id quantize the
** 8 groups of 4 |values| xval (an on-grid key's row, else the best neighbour by waux-weighted
** error); a trial is kept when sumq2 > 0 and sumqx^2 > best sumq2 (best = scale sumqx, from 0),
** sums over the 32 values in index order with weight. On the last kept trial: *scale its
** sumqx / sumq2, L its 32 levels, on its 8 on-grid flags; where none is kept they are left as
** they are. */
typedef void (*tm__iq3_trials_fn)(const tm__iq3_tables *t, const float *xval, const float *weight,
                                  const float *waux, float max, int nis, float *scale, int8_t *L, bool *on);

#ifdef TM__GQ_HAVE_AVX2
/* The same with 8 trials in the lanes of an AVX2 register (ggml_quant_iq_avx2.c). */
void tm__iq3_trials_avx2(const tm__iq3_tables *t, const float *xval, const float *weight, const float *waux,
                         float max, int nis, float *scale, int8_t *L, bool *on);
#endif

#endif
