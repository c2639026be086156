/*
** tensormorph/evidence.h: serving evidence from a real runtime. Runs a baseline and a
** candidate ONNX model under one frozen protocol (same inputs, shapes, threads, warmup) on ONNX
** Runtime's CPU execution provider, through the Node.js runner that ships with Tensormorph
** (runner/evidence.js, npm package onnxruntime-node), and writes evidence JSON
** (docs/schemas/evidence.schema.json, "tensormorph.evidence/1"): the protocol, latency samples
** and nearest-rank p50/p95/p99 per model, peak memory, output drift per output overall and per
** slice, and the candidate's operators by type. docs/evidence.md is the long form.
** Include after tensormorph.h.
**
** The library reads no environment: the caller says where node, the runner script and
** onnxruntime-node are (the CLI looks at TM_NODE_MODULES, TM_NODE and the folder it was built
** from). Node processes are started with posix_spawn (no shell): one per model to list its
** inputs, then one per model to measure, so the peak resident set is per model.
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_EVIDENCE_H
#define TENSORMORPH_EVIDENCE_H

#ifdef __cplusplus
extern "C" {
#endif

/* A fixed shape for one model input (--input-shape NAME=D1,D2,...): needed for inputs whose
** ONNX shape has symbolic or unknown dims. */
typedef struct tm_evidence_shape {
    const char *name;
    int         ndim;                 /* 0..TM_MAX_DIMS                                       */
    int64_t     shape[TM_MAX_DIMS];   /* each >= 0                                            */
} tm_evidence_shape;

typedef struct tm_evidence_params {
    const char *baseline;             /* ONNX model paths                                     */
    const char *candidate;
    /* Inputs: a folder with inputs.json (docs/schemas/inputs.schema.json) ... */
    const char *inputs_dir;
    /* ... or, when inputs_dir is NULL, n_random sample sets drawn from a seeded generator
    ** (splitmix64; floats uniform in [-1, 1), integers uniform in [0, 16), bools 0/1). */
    int64_t     n_random;
    uint64_t    seed;
    const tm_evidence_shape *input_shapes; /* n_input_shapes entries, or NULL                 */
    int         n_input_shapes;
    const char *slices_path;          /* SLICES.json (docs/schemas/slices.schema.json) or NULL;
                                         needs inputs_dir                                     */
    int         warmup;               /* untimed runs per sample set (>= 0)                   */
    int         runs;                 /* timed runs per sample set (>= 1)                     */
    int         threads;              /* ORT intraOpNumThreads (>= 1); interOpNumThreads is 1 */
    const char *node;                 /* node executable: a path, or a name searched in PATH  */
    const char *runner_script;        /* runner/evidence.js                                   */
    const char *node_modules;         /* a node_modules folder holding onnxruntime-node       */
    const char *tmp_dir;              /* where the scratch folder goes; NULL: "/tmp"          */
    void (*progress)(void *ud, const char *phase, uint64_t done, uint64_t total);
    void *progress_ud;
    volatile const int *cancel;       /* set non-zero to stop: the runner is killed            */
} tm_evidence_params;

/* tm_evidence_params_default: zeroed, n_random 1, warmup 3, runs 10, threads 1, node "node". */
tm_evidence_params tm_evidence_params_default(void);

/* tm_evidence_run: the whole job: load each model in the runner for the inputs ONNX Runtime
** requires, read their element types and shapes with tensormorph's ONNX reader,
** read and check --inputs DIR (every .npy's dtype equal to the model input's element type and
** its shape equal to the model's fixed shape or the given one) or generate random inputs, run
** the runner once per model, compute percentiles and drift in C, validate the document against
** the embedded evidence schema and return it.
**   *json_out  malloc'd evidence JSON text (2-space indented, ends in "\n"); free() it.
** Percentiles: nearest-rank, p-th of sorted samples s[0..n-1] is s[ceil(p*n/100)-1]
** (computed in integers). Drift per output: max |c-b|; rel_l2 = ||c-b||_2/||b||_2; top-1
** agreement (floating-point outputs whose last dim is > 1: argmax over the last axis, first
** maximum on ties, per row) -- null when not applicable or not finite.
** Returns TM_OK | TM_E_INVALID_ARG (bad params; a dynamic input dim without an input shape,
**   naming the input) | TM_E_CORRUPT (inputs.json or SLICES.json violate their schema: file, JSON
**   path, reason; an .npy that does not fit the model input; ONNX Runtime refused a model or an
**   input: its message, naming the model; baseline and candidate outputs differ in name or shape)
**   | TM_E_UNSUPPORTED (an input element type the runner cannot feed, e.g. bfloat16)
**   | TM_E_IO (files; node could not be started; the runner failed otherwise, with its stderr)
**   | TM_E_CANCELLED | TM_E_NOMEM | TM_E_INTERNAL (the evidence failed its own schema). */
tm_status tm_evidence_run(const tm_evidence_params *p, char **json_out, tm_err *err);

/* tm_evidence_write: parse json_text, check it against docs/schemas/evidence.schema.json and
** write it to path atomically ("<path>.tmp.<pid>" beside it, fsync, rename, fsync the folder).
** Returns TM_OK | TM_E_CORRUPT (not JSON, or not evidence: JSON path and reason) | TM_E_IO. */
tm_status tm_evidence_write(const char *path, const char *json_text, tm_err *err);

/* tm_evidence_runtime_present: 1 when <node_modules>/onnxruntime-node/package.json exists. */
int tm_evidence_runtime_present(const char *node_modules);

/* tm_percentile_nearest_rank: the p-th percentile (0 < p <= 100) of n >= 1 ascending samples by
** the nearest-rank method: sorted[ceil(p*n/100) - 1]. NaN when n < 1 or p out of range. */
double tm_percentile_nearest_rank(const double *sorted, int64_t n, int p);

#ifdef __cplusplus
}
#endif
#endif
