/*
** manifest.h: the parts of tensormorph.manifest/1 that every quantize job writes the same way
** (tool, command line, host, sources and rollback checksums, output files, times), shared by
** the three quantize jobs through pipeline.h (which adds "output" and publishes). Each job adds its own
** "recipe", "tensors" and "results" between these calls, so the key order is:
**   schema tool command_line host checksums sources rollback  <- tm__manifest_new
**   ... job-specific keys ...
**   output                                                    <- tm__pipe_add_output
**   ... results ...
**   times                                                     <- tm__manifest_add_times
*/
#ifndef TM_JOB_MANIFEST_H
#define TM_JOB_MANIFEST_H
#include "../core/core.h"

#include <jansson.h>
#include <time.h>

/* A number, or the strings "nan", "inf", "-inf" for non-finite values. */
json_t *tm__manifest_num(double v);

/* The "host" object of a manifest or an evidence record: {cpu_model, cores, os, hostname}
** from tm_host_info. NULL when out of memory. */
json_t *tm__manifest_host(void);

/* A recipe's scheme object (docs/recipe.md "scheme"): type, granularity, axis (channel and
** group), group_size, block [h, w], symmetric, observer (tm_observer_name, with its
** parameters), convention, scale_dtype, allow_nonfinite, in that order. axis_2d: write a
** negative axis of a 2-D weight as its positive index (-2 -> 0, -1 -> 1), as the
** compressed-tensors output does; 0 writes it as given (ONNX). NULL when out of memory. */
json_t *tm__manifest_scheme(const tm_qspec *s, int axis_2d);

/* A new manifest object with schema ... rollback. hex: the sha256 of each of in's files
** (tm_file_n_paths entries), or NULL with no_checksums. NULL when out of memory. */
json_t *tm__manifest_new(const char *command_line, int no_checksums, const tm_file *in,
                         char (*hex)[65]);

/* The files a manifest was made from, as evidence and gate name them: a new array of
** {path, sha256} objects, one for each entry of man's "sources" (in its order; empty when man is
** NULL or has none). NULL when out of memory. */
json_t *tm__manifest_source_files(const json_t *man);

/* "times": {started_utc, finished_utc (now), seconds}. */
void tm__manifest_add_times(json_t *man, time_t wall0, double seconds);

/* "calibration": {"data": data}: what the scales were computed from (weight-only jobs say
** that no calibration data was used, and why). */
void tm__manifest_add_calibration(json_t *man, const char *data);

/* The start of every job's "results": {n_tensors, n_quantized}; the job adds its own keys, and
** tm__manifest_finish ends it with source_bytes and output_bytes. NULL when out of memory. */
json_t *tm__manifest_results_new(int64_t n_tensors, int64_t n_quantized);

/* The end of every job's manifest: "results" (steals `results`, to which it appends
** source_bytes and output_bytes, in bytes) and "times", serialised
** (2-space indent, key order kept, 17 significant digits) into *json_out (malloc'd, the
** caller frees) and written atomically to `path` (tm__write_file_atomic). Returns TM_OK |
** TM_E_NOMEM | TM_E_IO. */
tm_status tm__manifest_finish(json_t *man, json_t *results, uint64_t source_bytes, uint64_t output_bytes,
                              time_t wall0, double seconds, const char *path, char **json_out, tm_err *err);

#endif
