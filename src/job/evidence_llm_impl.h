/*
** evidence_llm_impl.h: the pieces of the LLM evidence (tensormorph/evidence_llm.h):
** evidence_llm_stats.c (per-position KLD, top-1, PPL sums from two streams of distributions, the
** worst positions, the statistics JSON) and evidence_llm.c (the job: runners, base cache, the
** document). Not installed.
*/
#ifndef TM_JOB_EVIDENCE_LLM_IMPL_H
#define TM_JOB_EVIDENCE_LLM_IMPL_H
#include "../core/core.h"
#include "tensormorph/evidence_llm.h"

#include <jansson.h>
#include <stdio.h>

#define TM__LLM_WORST 20   /* worst positions kept                                   */
#define TM__LLM_TOP 3      /* top tokens shown per worst position and model          */
#define TM__LLM_HIST 9     /* KLD histogram bins (edges: 0, 1e-6 .. 10, decades)      */

/* Sums over the scored tokens of one slice (or of several: tm__llm_acc_merge). */
typedef struct tm__llm_acc {
    int64_t n, same, nan;
    double  sum_k, sum_k2, sum_nb, sum_nb2, sum_nc, sum_nc2, sum_d, sum_d2, sum_dp2;
    double *klds;                     /* [n], in scoring order                              */
    int64_t cap;
    int64_t hist[TM__LLM_HIST];
} tm__llm_acc;

typedef struct tm__llm_top { int32_t token; float p; } tm__llm_top;

typedef struct tm__llm_worst_item {
    int     slice;
    int64_t position;                 /* index of the predicting token in the slice's tokens */
    double  kld;
    tm__llm_top base_top[TM__LLM_TOP], cand_top[TM__LLM_TOP];
} tm__llm_worst_item;

typedef struct tm__llm_worst {
    int n;
    tm__llm_worst_item it[TM__LLM_WORST]; /* descending kld                                 */
} tm__llm_worst;

/* Score one slice: read, for each of `chunks` chunks and each scored position ctx/2..ctx-2, one
** row of V little-endian float32 from bf (baseline) and cf (candidate); tokens[] is the slice's
** token list (BOS first, n_tokens >= chunks*ctx). Adds to acc and w. Names bname/cname in
** errors. Returns TM_OK | TM_E_CORRUPT (a stream ends early: file, row) | TM_E_CANCELLED |
** TM_E_NOMEM. */
tm_status tm__llm_score(FILE *bf, const char *bname, FILE *cf, const char *cname, int V,
                        const int32_t *tokens, int chunks, int ctx, int slice, tm__llm_acc *acc,
                        tm__llm_worst *w, volatile const int *cancel, tm_err *err);
/* Add src's sums and KLD values to dst. */
tm_status tm__llm_acc_merge(tm__llm_acc *dst, const tm__llm_acc *src, tm_err *err);
void      tm__llm_acc_free(tm__llm_acc *a);
/* The statistics object (docs/schemas/evidence.schema.json $defs/llm_stats) of acc; with
** acc->nan > 0 every statistic is null. NULL on out of memory. */
json_t   *tm__llm_stats_json(const tm__llm_acc *acc);
/* {"edges": [...], "counts": [...]} of acc's histogram. */
json_t   *tm__llm_hist_json(const tm__llm_acc *acc);

#endif
