/* open.c: tm_open dispatch. Finds the format of a path (directory, index file or container)
** and hands it to that format's reader. A new format is one row in `readers`. */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct reader {
    tm_format fmt;
    int (*probe)(const uint8_t *head, size_t n, const char *path);
    tm_status (*open)(const char *path, const tm_open_params *p, tm_file **out, tm_err *err);
} reader;

static const reader readers[] = {
    /* exact magic numbers first: a zip's first 8 bytes can pass for a safetensors length */
    {TM_FMT_NPY, tm__npy_probe, tm__npy_open},
    {TM_FMT_NPZ, tm__zip_probe, tm__zip_ckpt_open}, /* .npz or PyTorch zip, by content */
    {TM_FMT_PT, tm__pt_legacy_probe, tm__pt_legacy_open}, /* PyTorch legacy (non-zip) stream */
    {TM_FMT_GGUF, tm__gguf_probe, tm__gguf_open},   /* magic "GGUF" */
    {TM_FMT_SAFETENSORS, tm__safetensors_probe, tm__safetensors_open},
    {TM_FMT_ONNX, tm__onnx_probe, tm__onnx_open},
};

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

tm_status tm_open(const char *path, const tm_open_params *p, tm_file **out, tm_err *err) {
    tm_err_clear(err);
    *out = NULL;
    if (!path || !*path) return tm__err_set(err, TM_E_INVALID_ARG, -1, "empty path");
    tm_open_params defp = tm_open_params_default();
    if (!p) p = &defp;
    struct stat st;
    if (stat(path, &st) != 0) return tm__err_sys(err, errno, "%s: cannot open", path);
    /* A directory or a sharded index is a safetensors checkpoint (the only directory format). */
    if (S_ISDIR(st.st_mode) || ends_with(path, ".index.json"))
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

tm_status tm_open_buffer(const void *data, size_t n_bytes, const char *name,
                         const tm_open_params *p, tm_file **out, tm_err *err) {
    tm_err_clear(err);
    *out = NULL;
    tm_open_params defp = tm_open_params_default();
    if (data && tm__gguf_probe(data, n_bytes, name))
        return tm__gguf_open_buffer(data, n_bytes, name ? name : "<buffer>", p ? p : &defp, out,
                                    err);
    return tm__safetensors_open_buffer(data, n_bytes, name ? name : "<buffer>", p ? p : &defp,
                                       out, err);
}
