/* srcread.c: pread of source tensors for the quantize jobs (see srcread.h). */
#include "srcread.h"
#include "../formats/membercrc.h"

#include "../core/core.h"
#include "tensormorph.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

void tm__srcread_open(tm__srcread *r, const tm_file *in) {
    r->in = in;
    r->n_fd = 0;
    r->fd = malloc((size_t)(in->n_maps > 0 ? in->n_maps : 1) * sizeof(int));
    if (!r->fd) return;
    r->n_fd = in->n_maps;
    for (int k = 0; k < in->n_maps; k++) {
        r->fd[k] = -1;
        if (in->maps[k].owned != 1 || !in->maps[k].path) continue;
        int fd = open(in->maps[k].path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        struct stat st;
        if (fd < 0) continue;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != in->maps[k].size) {
            close(fd);
            continue;
        }
        r->fd[k] = fd;
    }
}

void tm__srcread_close(tm__srcread *r) {
    for (int k = 0; k < r->n_fd; k++)
        if (r->fd[k] >= 0) close(r->fd[k]);
    free(r->fd);
    r->fd = NULL;
    r->n_fd = 0;
}

int tm__srcread_can(const tm__srcread *r, const tm_tensor *t) {
    return !t->quant && !t->fortran_order && !t->big_endian && t->file_index >= 0 &&
           t->file_index < r->n_fd && r->fd[t->file_index] >= 0 &&
           (t->dtype == TM_F32 || t->dtype == TM_F16 || t->dtype == TM_BF16);
}

int tm__srcread_f32(const tm__srcread *r, const tm_tensor *t, int64_t e0, int64_t n, float *out, void *raw,
                    tm_err *err) {
    if (!tm__srcread_can(r, t)) return 0;
    /* an archive member read in place: its CRC-32 first, as tm_tensor_data does (membercrc.h) */
    if (r->in->crcs && tm__crc_tensor_check(r->in, t, err)) return -1;
    int fd = r->fd[t->file_index];
    size_t isz = t->dtype == TM_F32 ? 4 : 2;
    uint8_t *dst = t->dtype == TM_F32 ? (uint8_t *)out : raw;
    size_t want = (size_t)n * isz, got = 0;
    off_t off = (off_t)(t->offset + (uint64_t)e0 * isz);
    while (got < want) {
        ssize_t k = pread(fd, dst + got, want - got, off + (off_t)got);
        if (k <= 0) {
            if (k < 0 && errno == EINTR) continue;
            const char *path = tm_file_path(r->in, t->file_index);
            if (k < 0)
                tm__err_sys(err, errno, "%s: tensor '%s': reading %zu bytes at offset %lld", path, t->name,
                            want - got, (long long)(off + (off_t)got));
            else
                tm__err_set(err, TM_E_IO, (int64_t)(off + (off_t)got),
                            "%s: tensor '%s': the file ends at offset %lld, before the tensor's data (it "
                            "changed or shrank after it was opened)",
                            path, t->name, (long long)(off + (off_t)got));
            return -1;
        }
        got += (size_t)k;
    }
    if (t->dtype != TM_F32 && tm_convert_to_f32(t->dtype, raw, n, out) != TM_OK) return 0;
    return 1;
}
