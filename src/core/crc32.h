/* crc32.h: zip's CRC-32 of byte ranges (the checksum of zip members: PKWARE APPNOTE.TXT 4.4.7),
** for the check of stored members (src/formats/membercrc.c, zipread.c). */
#ifndef TM_CORE_CRC32_H
#define TM_CORE_CRC32_H
#include "core.h"

/* tm__crc32: continue the CRC-32 `crc` (0 to start) over n bytes at p and return it, as zlib's
** crc32(crc, p, n). Polynomial 0x04C11DB7 (reflected 0xEDB88320), initial value and final XOR
** 0xFFFFFFFF (ISO 3309 / ITU-T V.42); check value crc32("123456789") = 0xCBF43926. With
** PCLMULQDQ (carry-less multiplication, checked at run time) the bulk is folded 64 bytes at a
** time (the method of Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
** Instruction", 2009); the rest, and every byte without it, goes through zlib (the same value
** either way). */
uint32_t tm__crc32(uint32_t crc, const void *p, uint64_t n);
/* zlib only (the reference the tests compare the folded path with). */
uint32_t tm__crc32_ref(uint32_t crc, const void *p, uint64_t n);
#endif
