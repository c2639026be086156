/* sensitivity_impl.h: the state shared by sensitivity.c (units, probes, documents) and
** sensitivity_budget.c (the plan search, its artifact). Internal to the job layer. */
#ifndef TM_SENSITIVITY_IMPL_H
#define TM_SENSITIVITY_IMPL_H
#include "../core/core.h"
#include "tensormorph/gguf_job.h"
#include "tensormorph/qjob.h"
#include "tensormorph/qdiff.h"
#include "tensormorph/sensitivity.h"

#include <jansson.h>

typedef struct sens_tensor {
    char    *name;
    int      src_type;
    uint64_t src_bytes;
    int64_t  n_elems;
    int      ndim;
    int      unit;                          /* unit index, -1: stays at source precision     */
    int      carrier_type;                  /* what the carrier file type's rules give       */
    int      rung_type[TM_SENS_MAX_LADDER]; /* its type on each rung                         */
    uint64_t rung_bytes[TM_SENS_MAX_LADDER];
} sens_tensor;

typedef struct sens_meas {
    int    done;
    double kld_mean, kld_p99, top1;
    double w_sqnr_db, w_rmse_lsb;           /* weight error (only when asked for)            */
    int    w_have;
} sens_meas;

typedef struct sens_qcache sens_qcache; /* sensitivity_cache.c */
typedef struct sens_ctd sens_ctd;       /* sensitivity_ctdirect.c */

/* The cache key type of a compressed-tensors rung r's dequantized tensor (above every ggml type). */
#define TM__SENS_CT_KEY 0x10000

typedef struct sens {
    const tm_sensitivity_params *p;
    char        *work;                      /* scratch folder (removed at the end)           */
    char        *base;                      /* the source as a GGUF                          */
    char        *cache;                     /* base distribution cache                       */
    char         src_sha[65];
    sens_tensor *t;
    int          n_t;
    char       **unit_names;
    int          n_u;
    int          rung[TM_SENS_MAX_LADDER];
    int          n_r;
    int          carrier;                   /* file type written: the first quantized rung   */
    int          ct;                        /* the compressed-tensors form                   */
    tm_qspec     rspec[TM_SENS_MAX_LADDER]; /* ct: each rung's scheme                        */
    int          rdense[TM_SENS_MAX_LADDER];/* ct: 1 for the dense rung                      */
    char         rname[TM_SENS_MAX_LADDER][160]; /* each rung's name                         */
    int64_t      n_params;
    int          n_evals;                   /* evaluations run                               */
    int          cand_seq;                  /* candidate file names                          */
    sens_qcache *qc;                        /* quantized tensors of this run, NULL: off      */
    char        *ct_rung_dir[TM_SENS_MAX_LADDER]; /* ct with the cache: each rung's directory
                                               (every weight on that rung), kept; NULL: dense */
    sens_ctd    *ctd;                       /* ct with the cache: direct candidates, or NULL  */
    double       cand_seconds, eval_seconds;/* summed over evaluations: writing candidates
                                               and their weight error / the evidence runs    */
} sens;

/* One evaluation: the whole-model assignment a[n_t] (rung index, -1 source) -> m. */
typedef struct sens_eval {
    int       *a;
    int        weights;                     /* u + 1: also the weight error of unit u's ONLY
                                               candidate (tm_qdiff); 0: none                  */
    sens_meas *m;
    int        seq;                         /* the candidate's number (its file name), set by
                                               tm__sens_eval_many in the order of evals       */
} sens_eval;

/* A compressed-tensors rung's name, as documents and --ladder show it: "int4 channel:0",
** "int8 group:32:-1 asym", "dense" (the inverse of tm_sensitivity_ct_rung_parse). */
void        tm__sens_rung_name(const tm_qspec *sp, int dense, char *buf, size_t n);
/* "int8", "int4", "fp8_e4m3", ... ("?" for another dtype) */
const char *tm__sens_code_type_name(int code_dtype);
/* The evidence run that scores `candidate` (a path): p->ev against S->base and its cache, on
** p->threads, with no generation, no warm-up and no progress (p->cancel kept). */
tm_evidence_llm_params tm__sens_evidence_params(const sens *S, const char *candidate);
/* Run evals[0..n) on p->jobs workers (the first alone when the base cache is not there yet). */
tm_status tm__sens_eval_many(sens *S, sens_eval *evals, int n, tm_err *err);
/* The tensor types of assignment a as exact --tensor-type entries against the carrier:
** pats[i] (malloc'd) / types[i] for every tensor whose type differs. Returns the count, -1 OOM. */
int       tm__sens_overrides(const sens *S, const int *a, char ***pats, int **types);
void      tm__sens_overrides_free(char **pats, int *types, int n);
uint64_t  tm__sens_bytes(const sens *S, const int *a);
/* a[] of the unit rungs ur[n_u] (-1 source). */
void      tm__sens_assign(const sens *S, const int *ur, int *a);
/* Write the GGUF of assignment a at path (the quantizer, exact overrides). */
tm_status tm__sens_write(sens *S, const int *a, const char *path, int checksums, int force, tm_err *err);
/* ct: the rules of assignment a (exact names -> their rung's scheme, then ".*" ignored):
** *rules (malloc'd; patterns malloc'd) and the count; -1 out of memory. */
int       tm__sens_ct_rules(const sens *S, const int *a, tm_qrule **rules);
void      tm__sens_ct_rules_free(tm_qrule *rules, int n);
/* The quantized-tensor cache (sensitivity_cache.c): entries in memory up to mem_cap bytes, the
** rest in work/quantized-tensors.spill; NULL when out of memory. */
sens_qcache         *tm__sens_qcache_new(const char *work, uint64_t mem_cap);
tm_gguf_tensor_cache tm__sens_qcache_hooks(sens_qcache *c);
/* tensors quantized (cache misses), reused (hits), entries spilled, bytes held in memory */
void                 tm__sens_qcache_counts(const sens_qcache *c, long *quantized, long *reused, long *spilled, uint64_t *mem_bytes);
void                 tm__sens_qcache_free(sens_qcache *c);
/* The weight error sums over qdiff entries (sensitivity_core.c): add entry e; then m's figures. */
void      tm__sens_werr_add(const tm_qdiff_entry *e, double *x2, double *e2, double *l2, double *nn);
void      tm__sens_werr_finish(double x2, double e2, double l2, double nn, sens_meas *m);
/* ct direct candidates (sensitivity_ctdirect.c): init after the units (opens the source GGUF and
** the rung directories, computes every unit's weight error, writes the shared split); write the
** candidate GGUF of assignment a named `name` in the scratch folder: files[0] (malloc'd) the file
** to evaluate, files[1] NULL or its second split (a hard link of the shared one); the weight
** error of unit u into m; free. */
tm_status tm__sens_ctd_init(sens *S, tm_err *err);
tm_status tm__sens_ctd_write(sens *S, const int *a, const char *name, char *files[2], tm_err *err);
void      tm__sens_ctd_weight(const sens *S, int u, sens_meas *m);
void      tm__sens_ctd_free(sens *S);
/* The budget search and the plan's outputs: adds "plan" to doc; *met. */
tm_status tm__sens_budget(sens *S, json_t *doc, int *met, tm_err *err);

#endif
