/*
** tensormorph/diff.h: weight diff of two checkpoints by logical tensor name (layer analysis,
** src/analysis/diff.c).
*/
/* the base API first, outside the guard, so this header compiles alone (docs/ARCHITECTURE.md
** "Public headers") */
#include "../tensormorph.h"
#ifndef TENSORMORPH_DIFF_H
#define TENSORMORPH_DIFF_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tm_diff_kind { TM_DIFF_SAME = 0, TM_DIFF_CHANGED, TM_DIFF_ADDED, TM_DIFF_REMOVED,
                            TM_DIFF_SHAPE, TM_DIFF_DTYPE } tm_diff_kind;
typedef struct tm_diff_entry {
    const char  *name;
    tm_diff_kind kind;
    int64_t      a_index, b_index;
    double       max_abs_diff, rel_l2, cosine;  /* for SAME/CHANGED (and DTYPE with equal shape) */
    const char  *b_name;   /* the tensor's name in b (differs from name where the two files name
                              it in different conventions); NULL for REMOVED                    */
} tm_diff_entry;
typedef struct tm_diff_result {
    tm_diff_entry *entries; int64_t n; int64_t n_differ;
    int64_t        n_renamed;  /* entries paired across naming conventions (b_name != name)     */
} tm_diff_result;
/* tm_diff: compare two checkpoints tensor by tensor (by logical name; where b has no tensor of
** that name, by its name in the other convention, tm_tensor_pair_find: HF <-> llama.cpp, q/k
** rows un-permuted), values through the view (dequantized where quantized).
** Returns TM_OK | TM_E_NOMEM | TM_E_CORRUPT. */
tm_status tm_diff(const tm_file *a, const tm_file *b, int n_threads, tm_diff_result **out,
                  tm_err *err);
void      tm_diff_free(tm_diff_result *r);

#ifdef __cplusplus
}
#endif
#endif
