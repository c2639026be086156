/*
** pipeline.h: the phases that every quantize job shares: the compressed-tensors directory
** (qjob.c), the GGUF file (gguf_job.c) and the ONNX file (onnx_job.c), and the one driver that
** runs them (tm__qpipe_run, qpipeline.c, at the end of this file; the jobs are its writers,
** tm__qwriter). The driver calls, in order:
**   tm__pipe_begin        check OUT, take OUT.lock, create the staging path beside OUT
**   tm__pipe_hash_start   sha256 of the sources in a thread beside the work
**   ... the writer's plan, then its tasks on the pool ...
**   tm__pipe_hash_wait    phase "hash"
**   ... the writer's write into pp->stage (fsynced, closed) ...
**   tm__pipe_phase("fsync")
**   tm__pipe_manifest_new, the job's keys, tm__pipe_add_output (phase "checksum"),
**   tm__pipe_finish       phase "manifest", phase "publish", then the rename(s) into place
**   tm__pipe_end          always: stop the hashing, remove what was not published, drop the lock
** Cancellation: every phase up to the final rename checks the caller's cancel flag and returns
** TM_E_CANCELLED (exit 130): nothing is then at OUT (a previous output replaced with --force
** stays as it was), no staging file and no lock file is left. The hashing thread asks the flag
** before each 1 MiB block, so it stops within a few milliseconds. Once tm__pipe_finish has
** renamed the output into place the run has succeeded: a later signal does not undo it.
** Concurrency: OUT.lock beside OUT (flock(2), holding the owner's pid) is held from the check
** of OUT to the rename, so two runs at one OUT never both pass the check; the loser fails with
** TM_E_INVALID_ARG (exit 2) naming the pid that holds OUT. A lock taken over from a dead run
** (kill -9) also removes that pid's staging paths of exactly our naming (remove_dead_stage). Publishing a single-file output
** (GGUF, ONNX) with its OUT.manifest.json, under the lock: (1) remove the previous manifest,
** (2) rename the file into place, (3) rename the new manifest into place; a reader sees the
** old pair, a file without a manifest, or the new pair, never a file and manifest of two runs.
** docs/exit-codes.md and docs/quantize.md say the same to users.
*/
#ifndef TM_JOB_PIPELINE_H
#define TM_JOB_PIPELINE_H
#include "../core/core.h"
#include "../core/fsutil.h"
#include "manifest.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

typedef enum { TM__PIPE_DIR = 0, TM__PIPE_FILE = 1 } tm__pipe_kind;

typedef struct tm__pipe {
    const tm_file *in;
    const char    *out;        /* the target the caller named, without trailing '/' (owned)    */
    tm__pipe_kind  kind;
    volatile const int *cancel;
    int            threads;    /* worker threads: n_threads, or tm_usable_cpus() for 0        */
    struct timespec t0;        /* CLOCK_MONOTONIC at begin                                    */
    time_t         wall0;
    char          *stage;      /* DIR: "OUT.tmp.<pid>" (a directory); FILE: "OUT.tmp.<pid>"   */
    char          *man_stage;  /* the manifest before publishing                              */
    char          *man_final;  /* FILE: "OUT.manifest.json"; DIR: NULL (inside the directory)  */
    char          *lock_path;  /* "OUT.lock"                                                   */
    int            lock_fd;    /* -1 when not held                                            */
    int            published;
    int            held;       /* 1 while counted in tm_outputs_pending (begin .. end)        */
    tm_err        *err;        /* the job's error record: its message names OUT at the end    */
    char         (*hex)[65];   /* sha256 of each source file (tm_file_n_paths entries)        */
    pthread_t      hth;
    int            hashing;
    atomic_int     hstop;
    tm_status      hstatus;
    tm_err         herr;
    /* A part of a sharded run (--shard i/n, part.c): 0 parts when not. The pipeline's `out` is
    ** then the part's path OUT.part-i-of-n; final_out the OUT that merge builds. */
    int            shard_i, shard_n;
    const char    *final_out;  /* OUT as the caller named it (borrowed)                        */
    int           *tensor_owner; /* [n_tensors of in]: the part that quantizes each tensor     */
    int           *source_owner; /* [tm_file_n_paths(in)]: the part that hashes each source    */
    int            force;
    int            file_set;     /* FILE: the output is a set of files (GGUF split files) staged in
                                    the directory pp->stage, each renamed beside OUT at the end  */
    int            part_of_file; /* the part of a single-file output (a GGUF): written as OUT's
                                    name inside the part's directory (tm__pipe_file_target)     */
    char          *part_file;
    char          *shared;       /* a part: OUT.parts-of-n, the directory of the output files every
                                    part writes its own bytes into (part.h); else NULL          */
    struct tm__crclog *crclog;   /* a part: its writes into the shared files and their CRC-32C
                                    (part_crc.h), filled by the writer; NULL: read them back    */
    int            shared_made;  /* this run created `shared` (removed again if the run is refused
                                    while it is still empty)                                     */
    /* a part's start check of the parts present (tm__part_start, part.h), set by the driver */
    const struct tm__qwriter *qw;
    void          *qjob;
    const char    *command_line;
    int            no_checksums;
    int            shard_force;  /* --force of the part run: start the parts of another recipe over */
    int            layout_fd;    /* 1 + the fd of `shared` locked (flock) from the start check to the
                                    end of the plan; 0 when none                                 */
} tm__pipe;

/* Does this run write source tensor t? Always, unless it is a part that does not own t. */
static inline int tm__pipe_owns(const tm__pipe *pp, int64_t t) {
    return !pp->shard_n || !pp->tensor_owner || pp->tensor_owner[t] == pp->shard_i;
}

/* Test hook: when set, called with the phase name ("hash", "fsync", "checksum", "manifest",
** "publish") before the phase checks the cancel flag, so a test can raise the flag there. */
extern void (*tm__pipe_phase_hook)(const char *phase, void *ud);
extern void *tm__pipe_phase_hook_ud;

/* May a single-file job (GGUF, ONNX) write out_path? Yes when the path is new, or with force
** when it holds a previous tensormorph output (a regular OUT.manifest.json beside it; with OUT
** itself missing, a manifest that lists existing files, e.g. GGUF split files: without force
** refused, and a listed file that is one of in's files is refused as the input). Refused:
** its directory missing (TM_E_IO, tm__check_out_dir), a directory at out_path, one of in's own
** files, any other existing file (TM_E_INVALID_ARG). kind names the output in messages ("a
** GGUF output"). Nothing is lost: inputs and foreign files are never replaced. */
tm_status tm__check_file_output(const tm_file *in, const char *out_path, int force, const char *kind,
                                tm_err *err);

/* The refusals of tm__pipe_begin alone, without a lock (a part's early check of OUT; merge). */
tm_status tm__pipe_check_target(const tm_file *in, const char *out, tm__pipe_kind kind, const char *kind_name,
                                int force, tm_err *err);

/* Check that OUT may be written (FILE: tm__check_file_output with kind_name, e.g. "a GGUF
** output"; DIR: a new path, an empty directory, or with force a previous tensormorph output,
** never a directory that holds the input), take OUT.lock, check again under it, and create the
** staging path (DIR: an empty directory). On error nothing is left behind (tm__pipe_end may
** still be called). Returns TM_OK | TM_E_INVALID_ARG (refused; held by another run) | TM_E_IO. */
tm_status tm__pipe_begin(tm__pipe *pp, const tm_file *in, const char *out, tm__pipe_kind kind,
                         const char *kind_name, int force, int n_threads, volatile const int *cancel,
                         tm_err *err);

/* Where a single-file writer (GGUF, ONNX) writes: pp->stage, or in a part (part.h) the file
** named as OUT inside the part's staging directory. Borrowed from pp. */
const char *tm__pipe_file_target(tm__pipe *pp);

/* A FILE output written as a set of files (GGUF split files, named by the writer from
** tm__pipe_file_target): pp->stage becomes a directory; publishing renames each file in it
** beside OUT (tm__prev_check_names first: a file the previous manifest does not list is never
** replaced, a listed one only with force), then OUT.manifest.json. Refused (TM_E_INVALID_ARG):
** one of in's files named as one of OUT's split files (tm__prev_input_named). Call before
** tm__pipe_file_target. No-op in a part. */
tm_status tm__pipe_make_file_set(tm__pipe *pp, tm_err *err);

/* A previous tensormorph output at a FILE OUT (pipeline_prev.c). tm__prev_files: the file
** names (no directory) OUT.manifest.json lists in output.files, only OUT's own name and its
** split names "<stem>-NNNNN-of-NNNNN.gguf"; NULL-terminated, NULL when there is no readable
** manifest (free with tm__prev_free). tm__prev_lists: 1 when the list holds name's file name. */
char **tm__prev_files(const char *out);
void   tm__prev_free(char **names);
int    tm__prev_lists(char *const *prev, const char *name);
/* 1 when a file the list names exists beside OUT. */
int    tm__prev_any_exists(const char *out, char *const *prev);

/* May a FILE output at OUT write these files (names: paths whose file names go beside OUT)?
** Each existing one is refused when it is one of in's files ("is the input"; every name is
** checked for that first), when OUT.manifest.json does not list it (tensormorph never replaces
** a file it did not write), or, listed, without force ("holds a previous tensormorph output;
** add --force"). Returns TM_OK | TM_E_INVALID_ARG | TM_E_NOMEM. Changes nothing on disk. */
tm_status tm__prev_check_names(const tm_file *in, const char *out, int force, const char *const *names, int n,
                               tm_err *err);

/* The index of in's first file that is named as one of OUT's split files in OUT's directory
** (an input "<stem>-NNNNN-of-NNNNN.gguf" beside OUT = "<stem>.gguf"), else -1. */
int tm__prev_input_named(const tm_file *in, const char *out);

/* After a new output is in place: remove the previous output's files (prev) that it did not
** replace (kept: the new output's paths), regular files only, never one of in's files. */
void tm__prev_remove_stale(const tm_file *in, const char *out, char *const *prev, const char *const *kept,
                           int n_kept);

/* Check the names a file set will publish (tm__prev_check_names with pp's input, OUT and
** force), once the writer has named them, before the work: a refusal then costs nothing and
** changes nothing. No-op outside a file set and in a part (its merge checks them). */
tm_status tm__pipe_check_set(tm__pipe *pp, const char *const *names, int n, tm_err *err);

/* TM_E_CANCELLED ("interrupted") when the cancel flag is raised, after the test hook. */
tm_status tm__pipe_phase(tm__pipe *pp, const char *phase, tm_err *err);

/* Start hashing the sources in a thread (nothing with no_checksums). */
tm_status tm__pipe_hash_start(tm__pipe *pp, int no_checksums, tm_err *err);
/* Phase "hash": wait for the source checksums; TM_E_CANCELLED when cancelled meanwhile. */
tm_status tm__pipe_hash_wait(tm__pipe *pp, tm_err *err);

/* Seconds since tm__pipe_begin. */
double tm__pipe_seconds(const tm__pipe *pp);

/* tm__manifest_new with the source checksums and host.threads_used = threads (the workers the
** job ran; 1 for a job that runs on one thread). NULL when out of memory. */
json_t *tm__pipe_manifest_new(tm__pipe *pp, const char *command_line, int no_checksums, int threads);

/* Phase "checksum", then "output": {path: OUT, format, files: [{file, sha256 (or null), bytes}]}
** over the staged files (paths inside/at pp->stage; named by their basename, the FILE output by
** OUT's basename); byte counts added to *out_bytes. Cancellable while hashing. */
tm_status tm__pipe_add_output(tm__pipe *pp, json_t *man, const char *format, const char *const *files,
                              int n_files, int no_checksums, uint64_t *out_bytes, tm_err *err);

/* tm__manifest_finish into the staged manifest, phase "manifest", phase "publish", then the
** rename(s) into place (see the top of this file) and fsync of OUT's directory. */
tm_status tm__pipe_finish(tm__pipe *pp, json_t *man, json_t *results, uint64_t source_bytes,
                          uint64_t output_bytes, double seconds, char **json_out, tm_err *err);

/* Always, once: stop and join the hashing thread, remove the staging path and manifest unless
** published, remove and release OUT.lock, free. */
void tm__pipe_end(tm__pipe *pp);

/* ---------------------------------------------------------------------------------------- */
/* The one quantize driver (qpipeline.c): every quantize job is a writer of this table and    */
/* tm__qpipe_run is its only loop:                                                           */
/*   begin (check and lock OUT, stage) -> hash the sources in a thread -> plan -> run the     */
/*   plan's tasks on the shared deterministic pool (src/core/pool.c) -> hash (wait) -> write  */
/*   -> fsync -> results -> manifest (the job's keys, "output", the job's summary keys) ->    */
/*   finish (publish) -> end (always)                                                         */
/* ---------------------------------------------------------------------------------------- */

/* What every job's result holds, filled by the driver and the job's results callback. */
typedef struct tm__qtotals {
    int64_t  n_tensors, n_quantized;  /* the manifest's results.n_tensors / n_quantized         */
    uint64_t src_bytes, out_bytes;
    double   seconds;                 /* at the end of the work, before the manifest            */
    char    *manifest_json;           /* malloc'd                                               */
    char    *manifest_path;           /* FILE: OUT.manifest.json (malloc'd); DIR: NULL          */
    /* Where the job's result keeps them (set by the results callback): on success the driver
    ** stores out_bytes, seconds, manifest_json, manifest_path (when the slot is set; else it is
    ** freed) and a copy of OUT (out_path, when set) there. */
    struct {
        uint64_t *out_bytes;
        double   *seconds;
        char    **manifest_json, **manifest_path, **out_path;
    } at;
} tm__qtotals;

/* A results callback's common part: r is the job's result (every result struct names n,
** n_quantized, src_bytes, out_bytes, seconds and manifest_json alike). */
#define TM__QTOTALS_OF(t, r)                        \
    do {                                            \
        (t)->n_tensors = (r)->n;                    \
        (t)->n_quantized = (r)->n_quantized;        \
        (t)->src_bytes = (r)->src_bytes;            \
        (t)->at.out_bytes = &(r)->out_bytes;        \
        (t)->at.seconds = &(r)->seconds;            \
        (t)->at.manifest_json = &(r)->manifest_json; \
    } while (0)

/* One byte range of a staged output file: `file` a path inside pp->stage (borrowed). */
typedef struct tm__span {
    const char *file;
    uint64_t    off, len;
} tm__span;

typedef struct tm__qwriter {
    tm__pipe_kind kind;               /* DIR: compressed-tensors; FILE: GGUF, ONNX              */
    const char   *kind_name;          /* "a GGUF output", in refusals                           */
    const char   *format;             /* the manifest's output.format                           */
    /* Decide every tensor and open the output at pp->stage; *n_tasks: the pool's tasks. */
    tm_status (*plan)(void *job, tm__pipe *pp, int64_t *n_tasks, tm_err *err);
    /* One task on the pool (pp->threads workers; results kept per task index). */
    tm_status (*run_task)(void *job, int64_t task, int thread, tm_err *err);
    /* After the pool and the source checksums: finish the output, fsynced and closed. */
    tm_status (*write)(void *job, tm__pipe *pp, tm_err *err);
    /* The job's result: per-tensor rows; sets t->n_tensors, n_quantized, src_bytes. */
    tm_status (*results)(void *job, tm__pipe *pp, tm__qtotals *t, tm_err *err);
    /* The manifest's "recipe" and "calibration", from the parameters and the plan alone (the job's
    ** manifest_add adds them the same way); a part hashes them before it writes (part.h). */
    void (*recipe_add)(void *job, json_t *man);
    /* The job's manifest keys before "output": recipe, calibration, tensors. */
    tm_status (*manifest_add)(void *job, json_t *man, tm_err *err);
    /* DIR only: the staged files the manifest's output lists (FILE: the staged file). */
    int (*output_files)(void *job, const char *const **files);
    /* After "output": the job's keys of the manifest and of its "results" object. On failure
    ** the job frees the result its results callback made (the driver never owns it). */
    tm_status (*summary)(void *job, json_t *man, json_t *results, tm_err *err);
    /* Parts (--shard i/n, part.c); NULL: the form cannot be sharded. The byte ranges source
    ** tensor t occupies in the staged output (at most max; returns how many, -1 on error). */
    int (*tensor_spans)(void *job, int64_t t, tm__span *spans, int max);
    /* Optional: what merge needs of tensor t besides its manifest row to finish the manifest
    ** (merge.c hands it to the form's merge fix-up); NULL when nothing. New reference. */
    json_t *(*part_tensor)(void *job, int64_t t);
    /* Optional: the source tensor of row r of the manifest's "tensors" (NULL: r itself). */
    int64_t (*row_tensor)(void *job, int64_t r);
} tm__qwriter;

/* The options every job has. */
typedef struct tm__qpipe_opts {
    int                 force, n_threads, no_checksums;
    int                 shard_i, shard_n;  /* --shard i/n; shard_n 0: one whole run          */
    const char         *command_line;
    volatile const int *cancel;
} tm__qpipe_opts;

/* The options of a job's parameters p (the three parameter structs name them alike). */
#define TM__QPIPE_OPTS_OF(p, threads)                                                      \
    {.force = (p)->force, .n_threads = (threads), .no_checksums = (p)->no_checksums,       \
     .command_line = (p)->command_line, .cancel = (p)->cancel}

/* Run job through the phases above into out. Returns the first failing phase's status
** (TM_E_CANCELLED when the cancel flag was raised before the publish). */
tm_status tm__qpipe_run(const tm__qwriter *w, void *job, const tm_file *in, const char *out,
                        const tm__qpipe_opts *o, tm_err *err);

#endif
