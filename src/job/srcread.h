/* srcread.h: reading a checkpoint's tensors with pread for the quantize job (qjob.c).
**
** A job reads each source value once. Faulting the values in from the file's map and dropping
** them again with madvise costs per page; pread into a buffer that stays in the cache is cheaper
** (docs/PERFORMANCE.md), and a file that shrinks while it is read gives an error instead of
** SIGBUS. Sources that are not plain files of the size they were mapped at (buffers,
** decompressed members) are not read so: the callers fall back to the view.
** (The GGUF job keeps reading aligned F32 in place from the map: measured on its 8 K-value
** pieces, pread cost it about 15% more CPU time, 2026-11-30.) */
#ifndef TM_JOB_SRCREAD_H
#define TM_JOB_SRCREAD_H

#include "../formats/file.h"

typedef struct tm__srcread {
    const tm_file *in;
    int           *fd;   /* per source map: a descriptor for pread, or -1 */
    int            n_fd;
} tm__srcread;

/* Open a descriptor for every map of `in` that is a regular file of the mapped size. Never
** fails: without descriptors every read falls back (tm__srcread_f32 returns 0). */
void tm__srcread_open(tm__srcread *r, const tm_file *in);
void tm__srcread_close(tm__srcread *r);

/* 1 when tensor t can be read with tm__srcread_f32: plain little-endian row-major F32, F16 or
** BF16, not a quantized tensor, in a file tm__srcread_open could open. */
int tm__srcread_can(const tm__srcread *r, const tm_tensor *t);

/* Elements [e0, e0 + n) (flat, row-major) of tensor t as float32 into out; raw is scratch of
** n * 2 bytes for F16/BF16 (unused for F32). The values equal tm_tensor_read_f32's (t->offset is
** the absolute offset of the data in its file; the range was checked at open). Returns 1 when
** read; 0 when t cannot be read so (the caller reads the view); -1 with err set (TM_E_IO, naming
** file, tensor and offset) when the read fails or the file ends early: it changed or shrank after
** it was opened; or (TM_E_CORRUPT) when t lies in an archive member whose CRC-32 does not match
** (checked once per member before its first read, as tm_tensor_data checks it: membercrc.h). */
int tm__srcread_f32(const tm__srcread *r, const tm_tensor *t, int64_t e0, int64_t n, float *out, void *raw,
                    tm_err *err);

#endif
