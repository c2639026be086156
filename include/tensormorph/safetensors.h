/* tensormorph/safetensors.h: the streaming, atomic safetensors writer (included by tensormorph.h). */
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_SAFETENSORS_H
#define TENSORMORPH_SAFETENSORS_H

#ifdef __cplusplus
extern "C" {
#endif

/* One tensor to write. dtype may be any tm_dtype except I4/U4 (safetensors has no 4-bit type). */
typedef struct tm_st_entry {
    const char *name;
    tm_dtype    dtype;
    int         ndim;
    int64_t     shape[TM_MAX_DIMS];
} tm_st_entry;

typedef struct tm_st_write_params {
    uint64_t            max_shard_bytes; /* 0: one file; else split into shards of at most this
                                            many data bytes (a larger single tensor gets its own) */
    const char *const  *meta_keys;       /* __metadata__ string pairs, may be NULL              */
    const char *const  *meta_values;
    int64_t             n_meta;
    /* Shared files (the parts of a sharded run, src/job/part.h): several processes write
    ** disjoint tensors of the same files. Each file is opened at its target itself (O_CREAT
    ** without O_EXCL or O_TRUNC) and sized to the layout; finish fsyncs and renames nothing;
    ** nothing is removed on error. Only a writer with shared_header writes the headers (8-byte
    ** length + JSON, which with the tensors' data tile each file); every writer writes the
    ** index (atomically, at index_dir when given). */
    int                 shared, shared_header;
    const char         *index_dir;       /* sharded: the index's directory; NULL: the files' */
} tm_st_write_params;

typedef struct tm_st_writer tm_st_writer;

/* tm_st_writer_open: plan a safetensors checkpoint and create its temporary file(s).
**   path     the target, e.g. "out/model.safetensors". Unsharded: that file. Sharded: files
**            "out/model-00001-of-0000N.safetensors" and "out/model.safetensors.index.json".
**   entries  n tensors in the order they are laid out; names unique.
** The header and every tensor's offset are fixed here, so data may then be written in any
** order, from any thread. Data goes to "<target>.tmp.<pid>" beside each target.
** Returns TM_OK | TM_E_INVALID_ARG (duplicate name, I4/U4, shape overflow) | TM_E_IO | TM_E_NOMEM. */
tm_status tm_st_writer_open(const char *path, const tm_st_entry *entries, int64_t n,
                            const tm_st_write_params *p, tm_st_writer **out, tm_err *err);

/* tm_st_writer_write: write n bytes at byte offset `off` of entry `entry`'s data (pwrite).
** Thread-safe for disjoint ranges. Returns TM_OK | TM_E_INVALID_ARG (range) | TM_E_IO. */
tm_status tm_st_writer_write(tm_st_writer *w, int64_t entry, uint64_t off, const void *data,
                             size_t n, tm_err *err);

/* tm_st_writer_finish: fsync every temporary file, rename each onto its target, fsync the
** directory, write the index (sharded). After it returns (either way) only tm_st_writer_free
** and the path getters may be called. On error every temporary file is removed.
** Returns TM_OK | TM_E_IO. */
tm_status tm_st_writer_finish(tm_st_writer *w, tm_err *err);

/* tm_st_writer_n_files / tm_st_writer_file: the final paths written (shards, then the index). */
int         tm_st_writer_n_files(const tm_st_writer *w);
const char *tm_st_writer_file(const tm_st_writer *w, int i);

/* tm_st_writer_entry_span: where entry `entry`'s data lies once written: *file, an index for
** tm_st_writer_file (its shard), *off the absolute byte offset in that file, *n its length in
** bytes. Fixed by open (any time before free). Returns TM_OK | TM_E_INVALID_ARG (no such entry). */
tm_status tm_st_writer_entry_span(const tm_st_writer *w, int64_t entry, int *file, uint64_t *off, uint64_t *n);

/* tm_st_writer_free: remove temporary files if finish did not succeed, and free. NULL no-op. */
void tm_st_writer_free(tm_st_writer *w);

#ifdef __cplusplus
}
#endif
#endif
