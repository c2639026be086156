/*
** tensormorph/job.h: compatibility include. It used to hold hashing, host facts, error
** statistics, Quantization Diff, weight diff, the quantize job, the quantized-tensor view
** helpers and the demo checkpoint; each now has its own header (below), all included by
** tensormorph.h. New code includes the header it needs.
*/
#include "../tensormorph.h"
#ifndef TENSORMORPH_JOB_H
#define TENSORMORPH_JOB_H
#include "hash.h"      /* tm_sha256_file, tm_sha256_buffer                 (core)     */
#include "host.h"      /* tm_host_info                                     (core)     */
#include "qview.h"     /* tm_tensor_qparams, tm_qview_*, tm_tensor_release_elems (view) */
#include "errstats.h"  /* tm_errsum, tm_erracc_*, TM_QDIFF_* thresholds    (analysis) */
#include "qdiff.h"     /* tm_qdiff, tm_ref_find                            (analysis) */
#include "diff.h"      /* tm_diff                                          (analysis) */
#include "qjob.h"      /* tm_ct_quantize, tm_ct_quantize_*                 (job)      */
#include "demo.h"      /* tm_write_demo_checkpoint                         (job)      */
#endif
