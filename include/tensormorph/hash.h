/*
** tensormorph/hash.h: SHA-256 of files and buffers (layer core, src/core/hash.c).
*/
/* the base API first, outside the guard, so this header compiles alone (docs/ARCHITECTURE.md
** "Public headers") */
#include "../tensormorph.h"
#ifndef TENSORMORPH_HASH_H
#define TENSORMORPH_HASH_H

#ifdef __cplusplus
extern "C" {
#endif

/* tm_sha256_file: SHA-256 (FIPS 180-4, via OpenSSL) of a whole file, streamed with read(2)
** in 1 MiB pieces (read(2) leaves nothing mapped: the resident set stays small, and the page
** cache keeps what a concurrent reader of the same file needs). hex_out: 64 hex chars + NUL.
** Returns TM_OK | TM_E_IO. */
tm_status tm_sha256_file(const char *path, char hex_out[65], uint64_t *n_bytes, tm_err *err);
void      tm_sha256_buffer(const void *data, size_t n, char hex_out[65]);

#ifdef __cplusplus
}
#endif
#endif
