/*
** tensormorph/gguf_write.h: the streaming, atomic GGUF v3 writer and its metadata list.
**
** Output layout (ggml's docs/gguf.md; all integers little-endian):
**   "GGUF", u32 version 3, u64 n_tensors, u64 n_kv,
**   n_kv x { string key, u32 value type, value },
**   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset },
**   zero padding to the alignment, then the data: tensor i at data_start + offset_i, each
**   tensor's bytes followed by zero padding to the alignment (the last one too), offsets in
**   tensor order. string = u64 length + bytes. The alignment is the u32 value of the
**   "general.alignment" entry when the list has one, else 32.
** This is the layout llama-quantize writes, so the same tensors and metadata give the same bytes.
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_GGUF_WRITE_H
#define TENSORMORPH_GGUF_WRITE_H

#ifdef __cplusplus
extern "C" {
#endif

/* GGUF metadata value types (the u32 stored before each value). */
enum {
    TM_GGUF_U8 = 0, TM_GGUF_I8, TM_GGUF_U16, TM_GGUF_I16, TM_GGUF_U32, TM_GGUF_I32, TM_GGUF_F32,
    TM_GGUF_BOOL, TM_GGUF_STRING, TM_GGUF_ARRAY, TM_GGUF_U64, TM_GGUF_I64, TM_GGUF_F64
};

/* An ordered list of metadata entries, each kept as its raw encoded value bytes, so entries
** copied from a file are written back bit for bit. Keys are unique. */
typedef struct tm_gguf_kvlist tm_gguf_kvlist;

/* tm_gguf_kvlist_new: an empty list, NULL when out of memory. */
tm_gguf_kvlist *tm_gguf_kvlist_new(void);
void            tm_gguf_kvlist_free(tm_gguf_kvlist *l);               /* NULL is a no-op */
int64_t         tm_gguf_kvlist_count(const tm_gguf_kvlist *l);
const char     *tm_gguf_kvlist_key(const tm_gguf_kvlist *l, int64_t i);  /* borrowed        */
uint32_t        tm_gguf_kvlist_type(const tm_gguf_kvlist *l, int64_t i);
/* tm_gguf_kvlist_raw: entry i's encoded value bytes (as they follow the type in a file; for an
** array: u32 element type, u64 count, elements), *n their length; borrowed, valid until the
** entry is replaced or the list freed. NULL (and *n = 0) when i is out of range. */
const void     *tm_gguf_kvlist_raw(const tm_gguf_kvlist *l, int64_t i, size_t *n);
/* tm_gguf_kvlist_find: index of key, -1 when absent. */
int64_t         tm_gguf_kvlist_find(const tm_gguf_kvlist *l, const char *key);
/* tm_gguf_kvlist_get_int: a scalar integer entry (u8..i64, bool) as int64; 0 when absent or
** not an integer (then *found = 0; found may be NULL). */
int64_t         tm_gguf_kvlist_get_int(const tm_gguf_kvlist *l, const char *key, int *found);
/* tm_gguf_kvlist_get_str: a string entry as a malloc'd NUL-terminated copy, NULL when absent,
** not a string or out of memory. */
char           *tm_gguf_kvlist_get_str(const tm_gguf_kvlist *l, const char *key);

/* tm_gguf_kvlist_set_raw: remove `key` if present, then append it with `type` and the n
** encoded value bytes (as they follow the type in a file). The bytes are copied and checked
** to be exactly one well-formed value of that type.
** Returns TM_OK | TM_E_INVALID_ARG (bad type or bytes) | TM_E_NOMEM. */
tm_status tm_gguf_kvlist_set_raw(tm_gguf_kvlist *l, const char *key, uint32_t type,
                                 const void *val, size_t n, tm_err *err);
/* Typed setters: remove, then append at the end (ggml's gguf_set_val_* behaviour). */
tm_status tm_gguf_kvlist_set_u32(tm_gguf_kvlist *l, const char *key, uint32_t v, tm_err *err);
tm_status tm_gguf_kvlist_set_str(tm_gguf_kvlist *l, const char *key, const char *v, tm_err *err);
/* tm_gguf_kvlist_remove: drop key when present. */
void      tm_gguf_kvlist_remove(tm_gguf_kvlist *l, const char *key);

/* tm_gguf_kvlist_read: the metadata of the GGUF file at path, in file order, values raw.
** Reads the header with read(2) through a bounded cursor (every length checked against the
** bytes left and a 1 GiB header cap; arrays nested at most 4 deep).
** Returns TM_OK | TM_E_IO | TM_E_CORRUPT (names file and byte offset) | TM_E_UNSUPPORTED
** (not GGUF v2/v3 little-endian) | TM_E_LIMIT | TM_E_NOMEM. */
tm_status tm_gguf_kvlist_read(const char *path, tm_gguf_kvlist **out, tm_err *err);

/* One tensor of the output, in file order. */
typedef struct tm_gguf_wtensor {
    const char *name;
    int         type;        /* ggml type id (tensormorph/ggml.h)                           */
    int         n_dims;      /* 1..4                                                         */
    int64_t     ne[4];       /* ggml order: ne[0] is the row (the reverse of the shape)      */
} tm_gguf_wtensor;

typedef struct tm_gguf_writer tm_gguf_writer;

/* llama.cpp's GGML_MAX_NAME: its GGUF reader refuses a tensor name of this many bytes or more
** (ggml/src/gguf.cpp: name.length() >= GGML_MAX_NAME). */
#define TM_GGUF_MAX_NAME 64

/* tm_gguf_writer_open_ex flags */
#define TM_GGUF_WRITE_LONG_NAMES 1u  /* write names of TM_GGUF_MAX_NAME bytes or more           */
/* Sequential mode: tm_gguf_writer_write must come in file order (tensor by tensor, each from its
** start, no overlap; what is skipped is zero padding). The writer stages the file in 8 MiB
** pieces (the header first) and writes each with one pwrite, through an O_DIRECT descriptor
** where the file system takes it (no copy into the page cache; else the ordinary one), the last
** piece rounded up to 4 KiB and the file cut back to its size in finish. Three 8 MiB stage
** buffers and one I/O thread (started at the first full piece): the caller fills one piece while
** up to two earlier ones are queued, the first of them being written; a write error is returned by the next call that hands over a piece,
** or by finish (the file offset in the message). For a writer that produces the file once,
** front to back (convert); the calls are not thread-safe (one caller thread). */
#define TM_GGUF_WRITE_SEQUENTIAL 2u
/* Shared mode (the parts of a sharded run, src/job/part.h): several processes write disjoint
** tensors of one file. The file is opened at path itself (O_CREAT without O_EXCL or O_TRUNC: the
** first writer creates it, the others open it) and sized to the layout; finish fsyncs it and
** renames nothing; nothing is removed on error. Only a writer with TM_GGUF_WRITE_HEADER too
** writes the header and every byte no tensor owns (the zero padding after the header and after
** each tensor), so that a file left by an earlier run of the same size holds this layout's bytes
** once every tensor is written. Not with TM_GGUF_WRITE_SEQUENTIAL. */
#define TM_GGUF_WRITE_SHARED 4u
#define TM_GGUF_WRITE_HEADER 8u
/* A scratch file read back at once and removed after (the sensitivity probes' candidates):
** finish renames it into place without fsync of the file or its folder; the same bytes. */
#define TM_GGUF_WRITE_SCRATCH 16u
/* TM_GGUF_WRITE_KEEP_SPLIT (tm_gguf_writer_open_split_as only): a set of one file carries no
** split keys, as llama-quantize --keep-split writes a one-file input (still named
** NAME-00001-of-00001.gguf). */
#define TM_GGUF_WRITE_KEEP_SPLIT 32u

/* tm_gguf_writer_open: fix the whole layout (header, each tensor's offset) and create
** "<path>.tmp.<pid>" (O_EXCL) of the final size holding the header; padding is zero.
**   kv       the metadata, written in list order (copied: may be freed after open).
**   t        n tensors; names unique; ne[0] a multiple of the type's block size.
** Returns TM_OK | TM_E_INVALID_ARG (duplicate name, bad type/dims, alignment not a power of
** two) | TM_E_UNSUPPORTED (a name of TM_GGUF_MAX_NAME bytes or more, which llama.cpp refuses;
** the message names the tensor and its length) | TM_E_LIMIT (size overflow) | TM_E_IO |
** TM_E_NOMEM. */
tm_status tm_gguf_writer_open(const char *path, const tm_gguf_kvlist *kv,
                              const tm_gguf_wtensor *t, int64_t n, tm_gguf_writer **out,
                              tm_err *err);
/* tm_gguf_writer_open_ex: the same with flags (TM_GGUF_WRITE_LONG_NAMES: long names are
** written, not refused). */
tm_status tm_gguf_writer_open_ex(const char *path, const tm_gguf_kvlist *kv,
                                 const tm_gguf_wtensor *t, int64_t n, unsigned flags,
                                 tm_gguf_writer **out, tm_err *err);
/* Bytes of tensor i's data (without padding); 0 when i is out of range. */
uint64_t  tm_gguf_writer_tensor_bytes(const tm_gguf_writer *w, int64_t i);
/* Absolute byte offset of tensor i's data in its file (fixed by open); 0 when i is out of range. */
uint64_t  tm_gguf_writer_tensor_offset(const tm_gguf_writer *w, int64_t i);

/* tm_gguf_writer_open_split: the same tensors as a set of files as llama.cpp's gguf-split
** writes them (examples/gguf-split/gguf-split.cpp, split_strategy, and llama_split_path's
** "%s-%05d-of-%05d.gguf", llama.cpp@0043213c), with
** max_split_bytes 0 exactly tm_gguf_writer_open_ex at path. Else: path "NAME.gguf" gives files
** "NAME-00001-of-0000N.gguf" ... (1-based, 5 digits), tensors in order, a tensor starting a new
** file when the file's data (each tensor padded to the alignment) plus it would exceed
** max_split_bytes (a file holds at least one tensor, so one larger tensor gets its own);
** each file is a whole GGUF v3: the first holds every key of kv, the others none (as gguf-split
** writes them; laid out with the default alignment), then every file split.no (u16, 0-based), split.count
** (u16, N) and split.tensors.count (i32, all n tensors), the keys llama.cpp's loader reads
** (LLM_KV_SPLIT_*). The writer's tensor indices stay those of t; each file is written, fsynced
** and renamed by finish as one file is. Returns as tm_gguf_writer_open_ex | TM_E_LIMIT (more
** than 65535 files). */
tm_status tm_gguf_writer_open_split(const char *path, const tm_gguf_kvlist *kv, const tm_gguf_wtensor *t, int64_t n,
                                    uint64_t max_split_bytes, unsigned flags, tm_gguf_writer **out, tm_err *err);
/* tm_gguf_writer_open_split_as: the same set of files with tensor i in file file_of[i] (0-based,
** < n_files; each file's tensors in the order of t), as llama-quantize --keep-split keeps an
** input's splits (llama.cpp src/llama-quant.cpp: the output tensor's split is the input
** tensor's, files named by llama_split_path from OUT without ".gguf"). A file may hold no
** tensor. Returns as tm_gguf_writer_open_split | TM_E_INVALID_ARG (file_of out of range). */
tm_status tm_gguf_writer_open_split_as(const char *path, const tm_gguf_kvlist *kv, const tm_gguf_wtensor *t, int64_t n,
                                       const int *file_of, int n_files, unsigned flags, tm_gguf_writer **out,
                                       tm_err *err);
/* The files of the writer (1 unless split), file k's final path, and the file tensor i is in. */
int         tm_gguf_writer_n_files(const tm_gguf_writer *w);
const char *tm_gguf_writer_file(const tm_gguf_writer *w, int k);
int         tm_gguf_writer_tensor_file(const tm_gguf_writer *w, int64_t i);
/* tm_gguf_writer_write: n bytes at offset off of tensor i's data (pwrite; thread-safe for
** disjoint ranges; with TM_GGUF_WRITE_SEQUENTIAL staged, in file order only).
** Returns TM_OK | TM_E_INVALID_ARG (range; sequential mode: a write before the last) | TM_E_IO. */
tm_status tm_gguf_writer_write(tm_gguf_writer *w, int64_t i, uint64_t off, const void *data,
                               size_t n, tm_err *err);
/* tm_gguf_writer_span / tm_gguf_writer_commit (TM_GGUF_WRITE_SEQUENTIAL only): produce bytes in
** place instead of copying them in. span zero-pads up to byte `off` of tensor i (in file order,
** as tm_gguf_writer_write) and returns in *p the staging memory where that byte goes and in
** *avail how many of the next n bytes (n >= 1) fit there contiguously: 1..n, at most one 8 MiB
** piece. The caller writes k <= *avail bytes at *p, then commit(w, k) stages them (and hands a
** full piece to the I/O thread; *p is then no longer valid). span then commit(k) gives the same
** file as tm_gguf_writer_write of those k bytes.
** Returns TM_OK | TM_E_INVALID_ARG (not sequential mode, a split set, range, order, k > span) |
** TM_E_IO (a previous piece could not be written). */
tm_status tm_gguf_writer_span(tm_gguf_writer *w, int64_t i, uint64_t off, size_t n, void **p,
                              size_t *avail, tm_err *err);
tm_status tm_gguf_writer_commit(tm_gguf_writer *w, size_t k, tm_err *err);
/* tm_gguf_writer_finish: fsync, rename onto path, fsync the directory. On error the
** temporary file is removed. Returns TM_OK | TM_E_IO. */
tm_status tm_gguf_writer_finish(tm_gguf_writer *w, tm_err *err);
/* tm_gguf_writer_free: remove the temporary file unless finish succeeded; free. NULL no-op. */
void      tm_gguf_writer_free(tm_gguf_writer *w);

#ifdef __cplusplus
}
#endif
#endif
