/* open.c: tm_open dispatch. Finds the format of a path (directory, index file or container)
** and hands it to that format's reader. A new format is one row in `readers`. */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

typedef tm_status (*buffer_opener)(const void *data, size_t n, const char *name,
                                   const tm_open_params *p, tm_file **out, tm_err *err);

typedef struct reader {
    tm_format fmt;
    int (*probe)(const uint8_t *head, size_t n, const char *path);
    tm_status (*open)(const char *path, const tm_open_params *p, tm_file **out, tm_err *err);
    buffer_opener open_buffer;  /* the same reader over an image held in memory */
} reader;

/* A zip image: PyTorch when asked for (p->format TM_FMT_PT), NumPy .npz when asked for NPY or
** NPZ, else by its members (zipckpt.c). */
static tm_status zip_open_buffer(const void *data, size_t n, const char *name,
                                 const tm_open_params *p, tm_file **out, tm_err *err) {
    tm_format want = p->format == TM_FMT_PT                              ? TM_FMT_PT
                     : p->format == TM_FMT_NPY || p->format == TM_FMT_NPZ ? TM_FMT_NPZ
                                                                          : TM_FMT_UNKNOWN;
    return tm__zip_ckpt_open_buffer(data, n, name, want, p, out, err);
}

static const reader readers[] = {
    /* exact magic numbers first: a zip's first 8 bytes can pass for a safetensors length */
    {TM_FMT_NPY, tm__npy_probe, tm__npy_open, tm__npy_open_buffer},
    {TM_FMT_NPZ, tm__zip_probe, tm__zip_ckpt_open, zip_open_buffer}, /* .npz or PyTorch zip */
    {TM_FMT_PT, tm__pt_legacy_probe, tm__pt_legacy_open, tm__pt_open_buffer}, /* legacy stream */
    {TM_FMT_GGUF, tm__gguf_probe, tm__gguf_open, tm__gguf_open_buffer},     /* magic "GGUF" */
    {TM_FMT_SAFETENSORS, tm__safetensors_probe, tm__safetensors_open, tm__safetensors_open_buffer},
    {TM_FMT_ONNX, tm__onnx_probe, tm__onnx_open, tm_onnx_open_buffer},
};
#define N_READERS (sizeof readers / sizeof readers[0])

tm_status tm_open(const char *path, const tm_open_params *p, tm_file **out, tm_err *err) {
    tm_err_clear(err);
    *out = NULL;
    if (!path || !*path) return tm__err_set(err, TM_E_INVALID_ARG, -1, "empty path");
    tm_open_params defp = tm_open_params_default();
    if (!p) p = &defp;
    struct stat st;
    if (stat(path, &st) != 0) return tm__err_sys(err, errno, "%s: cannot open", path);
    /* A directory or a sharded index is a safetensors checkpoint (the only directory format). */
    if (S_ISDIR(st.st_mode) || tm__ends_with(path, ".index.json"))
        return tm__safetensors_open(path, p, out, err);
    if (!S_ISREG(st.st_mode)) return tm__err_set(err, TM_E_IO, -1, "%s: not a regular file", path);
    uint8_t head[64];
    size_t n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return tm__err_sys(err, errno, "%s: cannot open", path);
    ssize_t r = read(fd, head, sizeof head);
    int e = errno;
    close(fd);
    if (r < 0) return tm__err_sys(err, e, "%s: cannot read", path);
    n = (size_t)r;
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++)
        if (readers[i].probe(head, n, path)) return readers[i].open(path, p, out, err);
    if (n < 8)
        return tm__err_set(err, TM_E_CORRUPT, (int64_t)n,
                           "%s: file is %zu bytes, too short for any checkpoint format", path, n);
    return tm__err_set(err, TM_E_UNSUPPORTED, 0,
                       "%s: unrecognised file format (not safetensors, GGUF, ONNX, PyTorch or NumPy)", path);
}

static const reader *reader_of(tm_format fmt) {
    for (size_t i = 0; i < N_READERS; i++)
        if (readers[i].fmt == fmt) return &readers[i];
    return NULL;
}

/* p->format names the reader (a zip image asked for as NPY, NPZ or PT is read by zipckpt.c as
** that format). Else the probes decide, in tm_open's order; when none matches, the image is
** read as safetensors, whose reader gives the precise reason. */
static const reader *buffer_reader(const uint8_t *data, size_t n, const char *name,
                                   tm_format want) {
    if (want == TM_FMT_UNKNOWN) {
        for (size_t i = 0; data && i < N_READERS; i++)
            if (readers[i].probe(data, n, name)) return &readers[i];
        return reader_of(TM_FMT_SAFETENSORS);
    }
    if (want == TM_FMT_NPY || want == TM_FMT_PT)
        if (data && tm__zip_probe(data, n, name)) return reader_of(TM_FMT_NPZ);
    return reader_of(want);
}

tm_status tm_open_buffer(const void *data, size_t n_bytes, const char *name,
                         const tm_open_params *p, tm_file **out, tm_err *err) {
    tm_err_clear(err);
    *out = NULL;
    tm_open_params defp = tm_open_params_default();
    if (!p) p = &defp;
    if (!name) name = "<buffer>";
    const reader *r = buffer_reader(data, n_bytes, name, p->format);
    if (!r)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "%s: no buffer reader for format %d", name,
                           (int)p->format);
    return r->open_buffer(data, n_bytes, name, p, out, err);
}
