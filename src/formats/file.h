/*
** file.h: the in-memory form of an opened checkpoint, shared by every format reader.
** A reader maps its file(s), validates headers and fills a tm_file through the builder
** functions below. Readers never touch tensor data while opening.
*/
#ifndef TM_FORMATS_FILE_H
#define TM_FORMATS_FILE_H

#include "../core/core.h"

typedef struct tm__map {
    char       *path;     /* as given or resolved                                   */
    const uint8_t *base;  /* mmap'd bytes, or the caller's buffer                    */
    uint64_t    size;     /* bytes                                                   */
    int         owned;    /* 1: munmap on close; 2: a malloc'd copy, freed on close   */
} tm__map;

struct tm_file {
    tm_format   format;
    tm__map    *maps;       int n_maps;
    tm_tensor  *tensors;    int64_t n_tensors;  int64_t cap_tensors;
    tm_qtensor **qtensors;  int64_t n_qtensors; int64_t cap_qtensors; /* owned descriptors */
    char      **meta_keys;  char **meta_values; int64_t n_meta; int64_t cap_meta;
    char      **warnings;   int64_t n_warnings; int64_t cap_warnings;
    char       *config_json;     /* config.json text or NULL                              */
    void       *name_index;      /* hash index: name -> tensor index (file.c)              */
    void       *fmt_state;       /* format-private state, freed by fmt_free                */
    void      (*fmt_free)(void *);
    struct tm__crcset *crcs;     /* archive members checked on first use (membercrc.c)      */
};

/* Create an empty tm_file of format fmt. NULL on allocation failure. */
tm_file *tm__file_new(tm_format fmt);
/* Map `path` read-only into a new slot; returns its index in *idx. Empty files map to size 0. */
tm_status tm__file_map(tm_file *f, const char *path, int *idx, tm_err *err);
/* Add a caller-owned buffer as a map slot. */
tm_status tm__file_add_buffer(tm_file *f, const char *name, const void *data, size_t n, int *idx,
                              tm_err *err);
/* Add a map slot holding a copy of n bytes of data (decoded in memory: inflated zip members,
** torch per-tensor scales); the file owns and frees it. Slots of this kind are not files:
** add them after every file slot; tm_file_n_paths stops at the first one. */
tm_status tm__file_add_buffer_copy(tm_file *f, const char *name, const void *data, size_t n,
                                   int *idx, tm_err *err);
/* The same for a malloc'd buffer the file adopts (freed on close, and on failure here). */
tm_status tm__file_add_buffer_owned(tm_file *f, const char *name, void *data, size_t n, int *idx,
                                    tm_err *err);
/* Append a tensor; the strings are copied; returns its index in *idx (may be NULL).
** name and phys_name may be equal; phys_name NULL means same as name. */
tm_status tm__file_add_tensor(tm_file *f, const tm_tensor *t, int64_t *idx, tm_err *err);
/* Mutable access while building. */
tm_tensor *tm__file_tensor_mut(tm_file *f, int64_t i);
/* Attach a copy of q to tensor i (the file owns it). */
tm_status tm__file_set_quant(tm_file *f, int64_t i, const tm_qtensor *q, tm_err *err);
/* Rename tensor i (copied). */
tm_status tm__file_rename_tensor(tm_file *f, int64_t i, const char *name, tm_err *err);
tm_status tm__file_add_meta(tm_file *f, const char *key, const char *value, tm_err *err);
tm_status tm__file_add_warning(tm_file *f, tm_err *err, const char *fmt, ...) TM_PRINTF(3, 4);
/* Build the name index; call when the tensor list is final. Duplicate logical names are
** TM_E_CORRUPT. */
tm_status tm__file_finish(tm_file *f, tm_err *err);
/* Reads member mi of a file being built (a format's loader; ctx is its own). */
typedef tm_status (*tm__member_load_fn)(tm_file *f, int mi, void *ctx, tm_err *err);
/* Open a one-member tm_file of format fmt: the file at path (mapped) when path is not NULL,
** else the caller's n bytes at data (not copied: they must outlive the file; NULL data with
** n > 0 is TM_E_INVALID_ARG), called name in messages (NULL: "<buffer>"). Then
** load(f, member, ctx, err) and tm__file_finish. *out gets the file, or NULL on any error
** (TM_E_NOMEM, the map's, the loader's), the half-built file closed. */
tm_status tm__file_open_one(tm_format fmt, const char *path, const void *data, size_t n,
                            const char *name, tm__member_load_fn load, void *ctx, tm_file **out,
                            tm_err *err);
/* tm__file_find_param: the index of tensor "<module>.<param>" (just "<param>" when module is
** ""), -1 when absent, -2 when out of memory (the recognizers' lookup of a module's parts). */
int64_t tm__file_find_param(const tm_file *f, const char *module, const char *param);
/* tm__file_path_of: the path of the file of the checkpoint that holds tensor t. */
static inline const char *tm__file_path_of(const tm_file *f, const tm_tensor *t) {
    return f->maps[t->file_index].path;
}
/* Element count of shape (1 for ndim 0); 0 on overflow with *ok = 0. */
int64_t tm__shape_numel(int ndim, const int64_t *shape, int *ok);

/* Format readers (one file each). They return a filled, finished tm_file. */
int       tm__safetensors_probe(const uint8_t *head, size_t n, const char *path);
tm_status tm__safetensors_open(const char *path, const tm_open_params *p, tm_file **out,
                               tm_err *err);
tm_status tm__safetensors_open_buffer(const void *data, size_t n, const char *name,
                                      const tm_open_params *p, tm_file **out, tm_err *err);

/* NumPy (npy.c) and zip checkpoints: .npz or PyTorch by content (zipckpt.c, pt_zip.c). */
int       tm__npy_probe(const uint8_t *head, size_t n, const char *path);
tm_status tm__npy_open(const char *path, const tm_open_params *p, tm_file **out, tm_err *err);
/* a .npy image held in memory (an .npz one: tm__zip_ckpt_open_buffer) */
tm_status tm__npy_open_buffer(const void *data, size_t n, const char *name,
                              const tm_open_params *p, tm_file **out, tm_err *err);
int       tm__zip_probe(const uint8_t *head, size_t n, const char *path);
tm_status tm__zip_ckpt_open(const char *path, const tm_open_params *p, tm_file **out,
                            tm_err *err);
/* want: TM_FMT_NPZ or TM_FMT_PT (read the archive as that format only) */
tm_status tm__zip_ckpt_open_buffer(const void *data, size_t n, const char *name, tm_format want,
                                   const tm_open_params *p, tm_file **out, tm_err *err);

/* ONNX (onnx.c): a ModelProto file; protobuf-c code generated from the system's onnx.proto. */
int       tm__onnx_probe(const uint8_t *head, size_t n, const char *path);
tm_status tm__onnx_open(const char *path, const tm_open_params *p, tm_file **out, tm_err *err);

/* GGUF (gguf.c): versions 2 and 3, little-endian; probe by the magic "GGUF". */
int       tm__gguf_probe(const uint8_t *head, size_t n, const char *path);
tm_status tm__gguf_open(const char *path, const tm_open_params *p, tm_file **out, tm_err *err);
tm_status tm__gguf_open_buffer(const void *data, size_t n, const char *name,
                               const tm_open_params *p, tm_file **out, tm_err *err);

/* PyTorch (pt_zip.c, pt_unpickle.c): the legacy non-zip stream; zip ones go through zipckpt.c */
int       tm__pt_legacy_probe(const uint8_t *head, size_t n, const char *path);
tm_status tm__pt_legacy_open(const char *path, const tm_open_params *p, tm_file **out,
                             tm_err *err);
/* a legacy stream held in memory (a zip checkpoint: tm__zip_ckpt_open_buffer) */
tm_status tm__pt_open_buffer(const void *data, size_t n, const char *name,
                             const tm_open_params *p, tm_file **out, tm_err *err);

/* Quantized-layout recognizers of safetensors checkpoints, run by the reader through its
** table of recognizers after the listing is finished: compressed-tensors (ctensors.c). */
tm_status tm__ctensors_recognize(tm_file *f, tm_err *err);
/* GPTQ and AWQ qweight/qzeros/scales/g_idx modules (gptq.c); run after tm__ctensors_recognize. */
tm_status tm__gptq_recognize(tm_file *f, tm_err *err);
/* "[4, 8]" into buf (truncated when it does not fit); file.c, for every reader's messages. */
void      tm__st_fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape);
/* The safetensors dtypes (safetensors.c). */
int       tm__st_dtype_ok(tm_dtype dt);

#endif
