/*
** part.h: the parts of a sharded quantize run (`quantize IN -o OUT --shard i/n`) and what
** merge (merge.c) reads of them. docs/scale-out.md says the same to users.
**
** Partition. The source tensors are dealt to the n parts by bytes (tm__shard_assign: largest
** first, each to the part with the fewest bytes so far, ties to the lower index and part), from
** the tensor list and sizes alone: the same on every machine, for any thread count and any
** output sharding. The source files are dealt the same way for their sha256.
**
** The output files (safetensors shards, the GGUF file or its split files) are written by every
** part together in the directory OUT.parts-of-n beside OUT (pp->shared, made by the first part):
** each part opens each file there without O_EXCL or O_TRUNC, sizes it to the plan, writes only
** its own tensors' bytes at their final offsets (every offset is fixed by the plan) and fsyncs
** it; part 0 also writes every byte no tensor owns (headers, GGUF padding). No lock: the ranges
** are disjoint. A file there of another size than the plan's was laid out by another plan: the
** writer refuses before changing it (tm__shared_size_check; tm__part_planned names the first
** part's command, noted in OUT.parts-of-n/.tensormorph-plan). merge holds every part's lock. A part's record is a directory OUT.part-i-of-n beside OUT, built and published
** by the pipeline like any output (staged as OUT.part-i-of-n.tmp.<pid>, fsynced, renamed, under
** OUT.part-i-of-n.lock) after its bytes in the shared files are fsynced: it holds the small
** files every part writes whole (the safetensors index; part 0 keeps them, with config.json and
** the side files) and its tensormorph-manifest.json, the
** manifest a whole run writes, its own tensors' rows filled, plus "part":
**   schema "tensormorph.part/1", out (OUT as given), index i, count n, format,
**   recipe_sha256 (recipe, calibration, tool, checksums mode), source_sha256 (each source's size
**   and the sha256 of its first and last 64 KiB), layout_sha256 (the files and segments below
**   without checksums), sources [{bytes, probe_sha256, sha256 (the full sha256 from the part
**   that hashed it, else null)}], files [{file, bytes, segments [[offset, length, owner part,
**   crc32c of the bytes when this part owns them, else -1]], shared (in OUT.parts-of-n)}], tensors [the indices this part
**   owns], rows [the rows of the manifest's "tensors" that are its tensors'], tensor_records [{index, record}] (the form's extra per-tensor data), data_bytes.
** Segments tile each file exactly, in offset order.
*/
#ifndef TM_JOB_PART_H
#define TM_JOB_PART_H
#include "pipeline.h"

/* Test counter: the bytes tm__part_record has read back to checksum them (the segments not
** logged from memory: a part's own small files, the headers and padding part 0 writes). */
extern _Atomic uint64_t tm__part_readback_bytes;

/* Deal n_items weights (bytes) to n_parts: owner[k] in 0..n_parts-1 (the rule above). Returns
** TM_OK | TM_E_NOMEM. */
tm_status tm__shard_assign(const uint64_t *bytes, int64_t n_items, int n_parts, int *owner, tm_err *err);

/* "OUT.part-i-of-n" (malloc'd; NULL when out of memory). */
char *tm__part_path(const char *out, int i, int n);

/* A part run: fill pp->tensor_owner / source_owner for in (pp->shard_i, shard_n set). */
tm_status tm__part_begin(tm__pipe *pp, const tm_file *in, tm_err *err);

/* After the whole manifest of the part is built (before tm__pipe_finish): compute the layout of
** the staged files from w->tensor_spans, checksum the part's own segments, remove the staged
** files it owns nothing of, set output.path to OUT and null the sources it did not hash, and
** add the "part" record (job's part_tensor records included). */
tm_status tm__part_record(tm__pipe *pp, const tm__qwriter *w, void *job, json_t *man, tm_err *err);

/* The part record's "recipe_sha256" (a JSON string, new reference; NULL when out of memory): the
** sha256 of the compact, key-sorted JSON of man's tool, checksums, recipe and calibration, the
** output format and the tensor count nt. */
json_t *tm__part_recipe_sha256(const json_t *man, const char *format, int64_t nt);

/* In the writer's plan, once the recipe is fixed (pp->qw->recipe_add) and before it opens the
** shared files (part_start.c): lock OUT.parts-of-n (flock, until tm__part_planned) and compare
** this run's recipe_sha256 with those of the parts of OUT/n present (records with another index).
** One of another recipe: without pp->shard_force refused, TM_E_INVALID_ARG naming that part and
** its command line, nothing written; with it the parts of that recipe are removed (their
** directories), and when no part of this recipe is present either, the shared files their records
** name and the plan note too: the layout starts over. Never removes a file no record names;
** refuses (TM_E_INVALID_ARG) to remove a part whose lock a live run holds. TM_OK when all agree. */
tm_status tm__part_start(tm__pipe *pp, tm_err *err);

/* After the writer's plan (which sizes the shared files, or refuses a size another part's plan
** gave them: tm__shared_size_check): on success note command_line as the run that laid out
** OUT.parts-of-n (the first part only); on that refusal add the noted command line to err. */
void tm__part_planned(tm__pipe *pp, const char *command_line, tm_status s, tm_err *err);

/* A part run that failed: the directory OUT.parts-of-n it created, removed while still empty. */
void tm__part_refused(tm__pipe *pp);

/* The sha256 of a source's first and last 64 KiB (all of it when smaller), for the source's
** identity across parts. */
tm_status tm__part_probe(const char *path, uint64_t bytes, char hex[65], tm_err *err);

#endif
