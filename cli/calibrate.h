/* calibrate.h: `tensormorph calibrate` pieces shared with the web API (/api/v1/calibrate): the
** request parsed from option strings, the run over every chosen observer and the one JSON
** serializer (docs/calibrate.md). Implemented in cli/cmd_calibrate.c. */
#ifndef TM_CLI_CALIBRATE_H
#define TM_CLI_CALIBRATE_H

#include "cli.h"

#define CALIB_MAX_PROBES 64
#define CALIB_MAX_OBS    TM_OBS_COUNT

/* The options as strings (NULL: not given), as the command line and the query string hold them. */
typedef struct calib_args {
    const char *observer;       /* a tm_observer_from_name name, or "all"        */
    const char *convention;     /* onnx | torch                                  */
    const char *type;           /* int8 | uint8 | int4 | uint4                   */
    const char *granularity;    /* tensor | channel[:AXIS]                       */
    int         symmetric;      /* -1 default (symmetric), 0, 1                  */
    const char *bins;           /* histogram / percentile / entropy bins         */
    const char *quantized_bins; /* entropy                                       */
    const char *qrange;         /* QMIN:QMAX                                     */
    int         reduce_range;
    const char *const *probes;  /* n_probes decimal numbers                      */
    int         n_probes;
} calib_args;

typedef struct calib_req {
    tm_calib_params p;              /* spec, code range, probes (point into probes[]) */
    tm_observer     obs[CALIB_MAX_OBS];
    int             n_obs;
    double          probes[CALIB_MAX_PROBES];
    int             gran_default;   /* 1: no granularity was given (see calibrate_default_granularity) */
    const char     *gran_rule;      /* "weight" / "activation": the default applied; NULL: given */
} calib_req;

/* Parse; 0 ok, else -1 with one line in msg naming the option. */
int calibrate_parse(const calib_args *a, calib_req *r, char *msg, size_t n);

/* 0 when tensor t can give samples (a float dtype, or a quantized tensor: its dequantized
** values), else -1 with the reason in msg. */
int calibrate_tensor_ok(const tm_tensor *t, char *msg, size_t n);

/* Samples read from one SAMPLES argument, float32 row-major (malloc'd). */
typedef struct calib_samples {
    float   *x;
    int      ndim;
    int64_t  shape[TM_MAX_DIMS];
    int64_t  n;
    int      weight;  /* 1: a tensor of a model checkpoint (not an .npy/.npz array) */
} calib_samples;

/* Load SAMPLES: FILE (exactly one data tensor), FILE.npz:KEY or PATH:TENSOR (any tensor by name,
** auxiliary ones such as a weight_scale included, as long as calibrate_tensor_ok accepts it); the
** whole argument is tried as a file first, then split at the last ':' whose left part is a file
** or directory. Returns 0, or an exit code with one line in msg (no "tensormorph: " prefix):
** EXIT_USAGE for no such tensor/key or a file of several tensors; EXIT_INPUT for samples that
** are not floating point, empty or not finite, a file without data tensors ("FILE.npz holds no
** arrays") and an npz entry the reader skipped (a string array, an unreadable member: its
** reason); the open error's code otherwise (a directory that does not open as a checkpoint
** says so). Listings name the skipped npz entries. free(out->x) after. */
int calibrate_load_samples(const char *arg, calib_samples *out, char *msg, size_t n);

/* The default granularity, one rule with quantize: when no granularity was given and every
** sample is a checkpoint weight (all_weights), channel:0 (quantize's weight default, one scale
** per output channel); otherwise tensor (samples are activations, per tensor as ONNX Runtime's
** calibrators). Returns "weight", "activation", or NULL when the granularity was given; the same
** is kept in r->gran_rule for the report (`granularity_default` in the JSON). */
const char *calibrate_default_granularity(calib_req *r, int all_weights);

/* Check that the batches b[0..nb) can be calibrated together under r's granularity: for
** channel:AXIS every batch has that axis and the same number of channels along it.
** name(ud, k) names batch k for the message (the SAMPLES argument). Returns 0, or EXIT_USAGE (an
** axis the samples lack, e.g. a 0-D tensor) / EXIT_INPUT (batches disagree) with one line in
** msg naming the batch. */
int calibrate_check_batches(const calib_req *r, const tm_calib_batch *b, int nb, const char *(*name)(void *ud, int k),
                            void *ud, char *msg, size_t n);

/* Run every observer of r: res[k] for r->obs[k] (free each with tm_calib_result_free). */
tm_status calibrate_run(const calib_req *r, const tm_calib_batch *b, int nb, tm_calib_result **res,
                        tm_err *err);

/* The `calibrate --json` document (schema tensormorph.calibrate/1) without the samples'
** description, which the caller adds. */
json_t *calibrate_json(const calib_req *r, tm_calib_result *const *res, const tm_calib_batch *b,
                       int nb);

#endif
