/*
** tensormorph/merge.h: assemble the output of a sharded quantize run from its parts (layer job,
** src/job/merge.c; docs/scale-out.md). `quantize IN -o OUT --shard i/n` writes the part
** OUT.part-i-of-n; tm_merge then builds OUT from the n parts by copying, byte-identical to one
** run of `quantize IN -o OUT` with the same options.
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_MERGE_H
#define TENSORMORPH_MERGE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tm_merge_params {
    int                 force;        /* 1: replace an OUT that holds a previous tensormorph output */
    const char         *command_line; /* not recorded (the parts' are, in "parts")            */
    volatile const int *cancel;       /* raised: TM_E_CANCELLED before the rename, OUT untouched */
} tm_merge_params;

typedef struct tm_merge_result {
    char    *out_path;       /* OUT as the parts recorded it                                  */
    char    *format;         /* the manifest's output.format ("compressed-tensors")           */
    int      n_parts;
    int64_t  n_files;        /* files written into OUT, the manifest included                  */
    uint64_t copied_bytes;   /* bytes copied from the parts (every file but the manifest)      */
    double   seconds;
    char    *manifest_json;  /* the manifest written at OUT/tensormorph-manifest.json           */
} tm_merge_result;

/* tm_merge: find the parts of OUT beside it (OUT.part-I-of-N; every part names N), check each
** (present; made by the same tool, recipe and sources as part 0: the sha256 each records; the
** same layout; every segment's CRC-32C as it is copied), build OUT by copying their bytes in the
** staging path OUT.tmp.<pid> beside it, hash the files (sha256), write the whole manifest (a
** one-machine run's, but times, host and command_line, plus "parts"), rename into place, then
** remove the parts (and stale lock and staging paths of parts no process holds). On failure OUT
** and every part are left as they were.
** Returns TM_OK | TM_E_IO (no parts found; a part missing, the message names it and the
** --shard to re-run; read/write failures) | TM_E_CORRUPT (a part of another recipe, source,
** tool or layout than part 0, a damaged part: the message names the part, the file and the byte
** range) | TM_E_INVALID_ARG (parts of two different counts; OUT exists without force or is held by
** another run) | TM_E_CANCELLED | TM_E_NOMEM. */
tm_status tm_merge(const char *out, const tm_merge_params *p, tm_merge_result **res, tm_err *err);

void tm_merge_result_free(tm_merge_result *r);

#ifdef __cplusplus
}
#endif
#endif
