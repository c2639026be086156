/*
** membercrc.h: CRC-32 checks of archive members whose bytes tensors read in place (zip members
** stored uncompressed, mmapped). A reader registers each such member while opening; the member
** is checked once, the first time tm_tensor_data hands out bytes of a tensor inside it, so
** opening and listing (inspect) read no tensor data. The CRC is zip's (ISO 3309 / ITU-T V.42,
** polynomial 0x04C11DB7 reflected, as PKWARE APPNOTE.TXT 4.4.7 specifies: src/core/crc32.h).
*/
#ifndef TM_FORMATS_MEMBERCRC_H
#define TM_FORMATS_MEMBERCRC_H

#include "file.h"

/* Register bytes [off, off + len) of map slot `slot` of f as archive member `member` (copied,
** for messages) whose CRC-32 must be `want`. Members of one slot must not overlap. Call while
** opening (not thread-safe). TM_OK | TM_E_NOMEM. */
tm_status tm__crc_member_add(tm_file *f, int slot, uint64_t off, uint64_t len, uint32_t want,
                             const char *member, tm_err *err);
/* The check tm_tensor_data makes: when tensor t's bytes lie in a registered member, that
** member's CRC-32 (computed the first time, then remembered; thread-safe) must match.
** TM_OK, or TM_E_CORRUPT naming the file, the member, the tensor, the expected and actual CRC. */
tm_status tm__crc_tensor_check(const tm_file *f, const tm_tensor *t, tm_err *err);
/* Free f's registered members (tm_close). */
void tm__crc_free(tm_file *f);

#endif
