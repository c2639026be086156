/*
** evidence_impl.h: the pieces of `tensormorph evidence` (tensormorph/evidence.h), one concern
** per file: evidence_inputs.c (model inputs, --inputs DIR, random inputs, SLICES.json),
** evidence_runner.c (the Node.js runner process and its result), evidence.c (the job, drift,
** percentiles and the evidence document). Not installed.
*/
#ifndef TM_JOB_EVIDENCE_IMPL_H
#define TM_JOB_EVIDENCE_IMPL_H
#include "../core/core.h"
#include "tensormorph/evidence.h"

#include <jansson.h>

/* One graph input of a model. */
typedef struct tm__ev_input {
    char    *name;
    int      onnx_type;              /* ONNX TensorProto.DataType                          */
    tm_dtype dtype;                  /* its tensormorph dtype; TM_DTYPE_COUNT unsupported  */
    int      ndim;                   /* the model's rank, -1 unknown                       */
    int64_t  shape[TM_MAX_DIMS];     /* the model's dims, -1 symbolic/unknown              */
    int      rndim;                  /* the shape every sample uses (resolved), -1 not yet */
    int64_t  rshape[TM_MAX_DIMS];
} tm__ev_input;

typedef struct tm__ev_inputs {
    tm__ev_input *in;
    int           n;
} tm__ev_inputs;

/* Sample sets written to the scratch folder as canonical .npy (version 1.0, little-endian,
** C order): files[s * n_inputs + k] is sample s's tensor for model input k. */
typedef struct tm__ev_samples {
    int64_t n;
    char  **ids;                     /* [n]                                                */
    char  **files;                   /* [n * n_inputs]                                     */
    char    sha256[65];              /* over every file's bytes, sample-major              */
} tm__ev_samples;

/* Slices resolved to sample indices. */
typedef struct tm__ev_slices {
    int       n;
    char    **names;
    int64_t **idx;                   /* [n][count[k]] indices into the samples             */
    int64_t  *count;
} tm__ev_slices;

/* What the runner measured for one model. */
typedef struct tm__ev_result {
    char    *runtime_version, *node;
    int      n_out;
    char   **out_names;              /* [n_out], the session's output order                */
    double  *latency_ms;             /* [n_samples * runs], sample-major                   */
    int64_t  n_latency;
    int64_t  peak_rss_bytes;
    char   **out_files;              /* [n_samples * n_out] full paths                     */
} tm__ev_result;

/* evidence_inputs.c: the graph inputs named (the feeds ONNX Runtime asks for, in its order)
** with their element types and shapes from tensormorph's ONNX reader. */
tm_status tm__ev_model_inputs(const tm_file *f, const char *path, char *const *names, int n_names,
                              tm__ev_inputs *out, tm_err *err);
void      tm__ev_inputs_free(tm__ev_inputs *in);
/* Apply --input-shape and check the candidate's inputs against the baseline's. */
tm_status tm__ev_resolve_shapes(tm__ev_inputs *base, const tm__ev_inputs *cand,
                                const tm_evidence_params *p, tm_err *err);
tm_status tm__ev_load_dir(const char *dir, tm__ev_inputs *in, const char *scratch,
                          tm__ev_samples *out, tm_err *err);
tm_status tm__ev_random(tm__ev_inputs *in, int64_t n, uint64_t seed, const char *scratch,
                        tm__ev_samples *out, tm_err *err);
void      tm__ev_samples_free(tm__ev_samples *s, int n_inputs);
tm_status tm__ev_load_slices(const char *path, const tm__ev_samples *smp, tm__ev_slices *out,
                             tm_err *err);
void      tm__ev_slices_free(tm__ev_slices *s);

/* evidence_runner.c: run runner_script on `model` over the samples; phase names the model
** ("baseline"/"candidate") in progress and errors. */
tm_status tm__ev_run_model(const tm_evidence_params *p, const char *phase, const char *model,
                           const tm__ev_inputs *in, const tm__ev_samples *smp,
                           const char *scratch, tm__ev_result *out, tm_err *err);
void      tm__ev_result_free(tm__ev_result *r, int64_t n_samples);
/* Load `model` in the runner (describe mode): *names gets the *n_names input names ONNX Runtime
** requires, in its order. A model ONNX Runtime refuses is TM_E_CORRUPT: "<phase> model <path>:
** the runner failed (exit 3): evidence.js: <path>: ONNX Runtime cannot load the model: <why>".
** Free with tm__ev_names_free. */
tm_status tm__ev_describe(const tm_evidence_params *p, const char *phase, const char *model,
                          const char *scratch, char ***names, int *n_names, tm_err *err);
void      tm__ev_names_free(char ***names, int *n_names);
/* Run the LLM runner (runner/llm_evidence.js, p->runner_script) on job file `job`, its stderr to
** errp; `what` names the model in errors. Exit 3 of the runner is TM_E_CORRUPT, a runner killed by
** a signal TM_E_CORRUPT too, with its whole stderr kept in a file the message names; exit 5 or
** another failure TM_E_IO; TM_E_CANCELLED when p->cancel was set. */
tm_status tm__ev_run_llm_job(const tm_evidence_params *p, const char *phase, const char *what,
                             const char *job, const char *errp, tm_err *err);
/* evidence.c: put "schema", "tool", "runtime" (taking the reference), "device" and "host"
** into the evidence document d, in that order. */
void      tm__ev_doc_head(json_t *d, json_t *runtime);
/* evidence.c: validate doc against the embedded evidence schema (a violation is TM_E_INTERNAL:
** our own bug) and dump it into *json_out (malloc'd, 2-space indented, ends in "\n"). */
tm_status tm__ev_finish(const json_t *doc, char **json_out, tm_err *err);

#endif
