/*
** tensormorph/merge.h: assemble the output of a sharded quantize run from its parts (layer job,
** src/job/merge.c; docs/scale-out.md). `quantize IN -o OUT --shard i/n` writes the part
** record OUT.part-i-of-n and its bytes into the output files all parts share, OUT.parts-of-n;
** tm_merge then builds OUT from them (links, no copy of the output), byte-identical to one run
** of `quantize IN -o OUT` with the same options.
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
    uint64_t copied_bytes;   /* bytes copied (part 0's small files; the shared files only where
                                hard links fail), not those linked into OUT                  */
    double   seconds;
    char    *manifest_json;  /* the manifest written at OUT/tensormorph-manifest.json           */
} tm_merge_result;

/* tm_merge: find the parts of OUT beside it (OUT.part-I-of-N; every part names N), check each
** (present; made by the same tool, recipe and sources as part 0: the sha256 each records; the
** same layout; every segment's CRC-32C, in the one read that hashes the files), build OUT in the
** staging path OUT.tmp.<pid> beside it (the files of OUT.parts-of-N hard-linked, copied where
** the file system has no hard links; part 0's small files copied), hash the files (sha256),
** write the whole manifest (a
** one-machine run's, but times, host and command_line, plus "parts"), rename into place, then
** remove OUT.parts-of-N and the parts (and stale lock and staging paths of parts no process
** holds). On failure OUT
** and every part are left as they were.
** Returns TM_OK | TM_E_IO (no parts found; a part missing, the message names it and the
** --shard to re-run; read/write failures) | TM_E_CORRUPT (a part of another recipe, source,
** tool or layout than part 0, a damaged part or one killed while re-running: the message names
** the part, the file and the byte range; a shared file missing or of another size) | TM_E_INVALID_ARG (parts of two different counts; OUT exists without force or is held by
** another run) | TM_E_CANCELLED | TM_E_NOMEM. */
tm_status tm_merge(const char *out, const tm_merge_params *p, tm_merge_result **res, tm_err *err);

void tm_merge_result_free(tm_merge_result *r);

#ifdef __cplusplus
}
#endif
#endif
