/*
** tensormorph/qjob.h: the compressed-tensors quantize job: open -> plan -> run -> write ->
** manifest -> finish (layer job, src/job/qjob.c).
*/
/* the base API first, outside the guard, so this header compiles alone (docs/ARCHITECTURE.md
** "Public headers") */
#include "../tensormorph.h"
#include "errstats.h"
#ifndef TENSORMORPH_QJOB_H
#define TENSORMORPH_QJOB_H

#ifdef __cplusplus
extern "C" {
#endif

/* A per-tensor rule (from --include/--exclude or a recipe): first matching rule wins. */
typedef struct tm_qrule {
    const char *pattern;       /* POSIX extended regex, searched in the tensor name              */
    int         ignore;        /* 1: leave this tensor unquantized                               */
    int         has_spec;      /* 1: use `spec` for it, else the job's default spec              */
    tm_qspec    spec;
} tm_qrule;

typedef struct tm_ct_quantize_params {
    tm_qspec        spec;          /* default scheme (tm_qspec_default)                           */
    const tm_kernels *kernels;     /* kernel set of the whole job (tm_kernels_get): observers,
                                      quantize, error statistics; NULL: "auto". Same bytes      */
    const tm_qrule *rules;  int64_t n_rules;   /* recipe targets/ignore, in order                */
    const char    **include;int64_t n_include; /* regexes: when given, only matching tensors     */
    const char    **exclude;int64_t n_exclude; /* regexes: never these                          */
    int             quantize_embeddings;  /* 0: embeddings and lm_head stay dense (default)     */
    int             strict;        /* 1: a tensor the output layout cannot hold is an error       */
    int             force;         /* 1: replace an existing OUT that holds a previous tensormorph
                                      output (tensormorph-manifest.json); anything else is never
                                      replaced                                                    */
    int             no_checksums;  /* 1: skip sha256 of sources and outputs                       */
    int             allow_empty;   /* 1: write the output even when no tensor is quantized (else
                                      TM_E_INVALID_ARG / TM_E_UNSUPPORTED saying why)             */
    int             n_threads;     /* 0 = tm_usable_cpus(); the output is the same for any count */
    uint64_t        max_shard_bytes;
    const char     *command_line;  /* recorded in the manifest                                    */
    const char     *recipe_path;   /* recorded in the manifest, may be NULL                       */
    const char     *recipe_json;   /* the recipe text, recorded, may be NULL                      */
    void (*progress)(void *ud, const char *phase, uint64_t done, uint64_t total);
    void *progress_ud;
    volatile const int *cancel;
    int             shard_index, shard_count; /* --shard i/n (docs/scale-out.md): with count > 0
                                      write only part i of count, the directory OUT.part-i-of-n
                                      beside out_dir, for tm_merge; 0: the whole output         */
} tm_ct_quantize_params;

tm_ct_quantize_params tm_ct_quantize_params_default(void);

/* Decision for one source tensor. */
typedef struct tm_ct_quantize_tensor {
    const char *name;
    int         quantized;       /* 1 quantized, 0 copied unchanged                             */
    char        reason[200];     /* why not quantized ("1-D tensor", "embedding", ...)           */
    tm_qspec    spec;            /* the scheme used (when quantized)                            */
    tm_errsum   e;               /* error summary (when quantized)                              */
    int         flagged;  char flag_reason[256];
    int64_t     n_degenerate;    /* all-zero/constant channels or groups given a fallback scale */
    int         kept_by_choice;  /* not quantized because of the options given (--include,
                                    --exclude, a recipe's ignore, a group size that does not divide
                                    the columns), not by the default rules (norms, biases,
                                    embeddings, lm_head)                                         */
} tm_ct_quantize_tensor;

typedef struct tm_ct_quantize_result {
    tm_ct_quantize_tensor *tensors; int64_t n;
    int64_t n_quantized;
    uint64_t src_bytes, out_bytes;
    double   seconds;
    char    *manifest_json;      /* the manifest as written (malloc'd)                           */
    char    *out_path;           /* the output directory                                         */
    char   **warnings;           /* lines about runtime compatibility of the output (malloc'd)   */
    int64_t  n_warnings;
} tm_ct_quantize_result;

/* tm_ct_quantize: quantize `in` into a compressed-tensors directory `out_dir`
** (safetensors + config.json with quantization_config + tensormorph-manifest.json), following
** ../shared/formats/compressed-tensors.md. The directory is built under "<out_dir>.tmp.<pid>"
** and renamed into place at the end: a killed run leaves nothing at out_dir. "<out_dir>.lock"
** (flock, the owner's pid) is held from the check of out_dir to the rename and removed after:
** a second run at the same out_dir meanwhile gets TM_E_INVALID_ARG naming the pid. The cancel
** flag is honoured up to the rename (source and output hashing, fsync, manifest): TM_E_CANCELLED
** leaves nothing at out_dir; once renamed the run has succeeded (src/job/pipeline.h).
** Returns TM_OK | TM_E_INVALID_ARG (a type/granularity the layout cannot represent at all:
** uint codes, e5m2, channel axis != 0, group axis != last) | TM_E_NONFINITE | TM_E_RANGE |
** TM_E_UNSUPPORTED (strict: a tensor it cannot hold; an already-quantized input; no tensor
** quantized and !allow_empty) | TM_E_INVALID_ARG also when --include matches nothing or the
** filters leave nothing (!allow_empty) | TM_E_IO | TM_E_NOMEM | TM_E_CANCELLED.
** Free the result with tm_ct_quantize_result_free. */
tm_status tm_ct_quantize(tm_file *in, const char *out_dir, const tm_ct_quantize_params *p,
                         tm_ct_quantize_result **out, tm_err *err);
void      tm_ct_quantize_result_free(tm_ct_quantize_result *r);

/* ---- deprecated names -------------------------------------------------------------------
** The names before the quantize jobs shared one pattern (tm_<form>_quantize_params,
** tm_<form>_quantize_params_default, tm_<form>_quantize, tm_<form>_quantize_result,
** tm_<form>_quantize_result_free, tm_<form>_quantize_tensor; docs/ARCHITECTURE.md "the jobs").
** Kept as aliases so that code written against them still builds; new code uses the names
** above. They will be removed in a later release. */
#define tm_qjob_params                   tm_ct_quantize_params
#define tm_qjob_params_default           tm_ct_quantize_params_default
#define tm_quantize_checkpoint           tm_ct_quantize
#define tm_qjob_result                   tm_ct_quantize_result
#define tm_qjob_result_free              tm_ct_quantize_result_free
#define tm_qjob_tensor                   tm_ct_quantize_tensor

#ifdef __cplusplus
}
#endif
#endif
