/* crc32c.h: CRC-32C (Castagnoli) of byte ranges, the checksum of the parts of a sharded
** quantize run (src/job/part.c, merge.c). */
#ifndef TM_CORE_CRC32C_H
#define TM_CORE_CRC32C_H
#include "core.h"

/* tm__crc32c: continue the CRC-32C `crc` (0 to start) over n bytes at p and return it.
** Polynomial 0x1EDC6F41 (reflected 0x82F63B78), initial value and final XOR 0xFFFFFFFF, as in
** RFC 3720 (iSCSI) section 12.1 and the SSE4.2 CRC32 instruction (Intel SDM vol. 2A, CRC32);
** check value crc32c("123456789") = 0xE3069283. The SSE4.2 instruction is used when the CPU has
** it, else the scalar table (the same value either way). */
uint32_t tm__crc32c(uint32_t crc, const void *p, size_t n);
/* tm__crc32c_combine: the CRC-32C of A followed by B from crc_a = tm__crc32c(0, A), crc_b =
** tm__crc32c(0, B) and B's length (no data read: about 32 steps per set bit of len_b). */
uint32_t tm__crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
/* The scalar table version (the reference the tests compare the instruction path with). */
uint32_t tm__crc32c_ref(uint32_t crc, const void *p, size_t n);
#endif
