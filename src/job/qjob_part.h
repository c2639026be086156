/* qjob_part.h: the compressed-tensors job's share of a sharded run (part.h, merge.c): what a part
** records of each quantized tensor so that merge flags the tensors over the whole model as one
** run does (tm_qdiff_flag compares each tensor with the median of its scheme). */
#ifndef TM_JOB_QJOB_PART_H
#define TM_JOB_QJOB_PART_H
#include "../core/core.h"

#include <jansson.h>

/* {scheme, clip_expected, e: every field of the tm_errsum, non-finite values as "nan"/"inf"/
** "-inf"} of a quantized tensor's qdiff entry. New reference, NULL when out of memory. */
json_t *tm__ct_part_qentry(const tm_qdiff_entry *e);

/* Merge's fix-up of a compressed-tensors manifest assembled from parts: records[t] is the
** tm__ct_part_qentry of tensor t (NULL for a tensor not quantized); flags every quantized tensor
** again over all of them (tm_qdiff_flag) and writes tensors[t].flagged / flag_reason and
** results.n_flagged / median_sqnr_db as a whole run does. Returns TM_OK | TM_E_CORRUPT (a
** record of the wrong shape: the part named by the caller) | TM_E_NOMEM. */
tm_status tm__ct_merge_fix(json_t *man, json_t *const *records, int64_t n_tensors, tm_err *err);

#endif
