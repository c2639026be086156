/*
** manifest.h: the parts of tensormorph.manifest/1 that every quantize job writes the same way
** (tool, command line, host, sources and rollback checksums, output files, times), shared by
** the compressed-tensors job (qjob.c) and the GGUF job (gguf_job.c). Each job adds its own
** "recipe", "tensors" and "results" between these calls, so the key order is:
**   schema tool command_line host checksums sources rollback  <- tm__manifest_new
**   ... job-specific keys ...
**   output                                                    <- tm__manifest_add_output
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

/* A new manifest object with schema ... rollback. hex: the sha256 of each of in's files
** (tm_file_n_paths entries), or NULL with no_checksums. NULL when out of memory. */
json_t *tm__manifest_new(const char *command_line, int no_checksums, const tm_file *in,
                         char (*hex)[65]);

/* Hash every file of `in` (tm_sha256_file) into hex[tm_file_n_paths(in)]. */
tm_status tm__manifest_hash_sources(const tm_file *in, char (*hex)[65], tm_err *err);

/* "output": {path, format, files: [{file (basename), sha256 (or null), bytes}]}; the byte
** counts are added to *out_bytes. Returns TM_OK | TM_E_IO (hashing). */
tm_status tm__manifest_add_output(json_t *man, const char *path, const char *format,
                                  const char *const *files, int n_files, int no_checksums,
                                  uint64_t *out_bytes, tm_err *err);

/* "times": {started_utc, finished_utc (now), seconds}. */
void tm__manifest_add_times(json_t *man, time_t wall0, double seconds);

/* May a single-file job (GGUF, ONNX) write out_path? Yes when the path is new, or with force
** when it holds a previous tensormorph output (a regular OUT.manifest.json beside it). Refused:
** its directory missing (TM_E_IO, tm__check_out_dir), a directory at out_path, one of in's own
** files, any other existing file (TM_E_INVALID_ARG). kind names the output in messages ("a
** GGUF output"). Nothing is lost: inputs and foreign files are never replaced. */
tm_status tm__check_file_output(const tm_file *in, const char *out_path, int force, const char *kind,
                                tm_err *err);

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
