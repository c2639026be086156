/* part_crc.h: the CRC-32C of what a part wrote, from memory (part.h): each write into the shared
** output files logged with the CRC of its bytes as the part had them, so the part's record takes
** its segments' checksums from the log instead of reading the files back. */
#ifndef TM_JOB_PART_CRC_H
#define TM_JOB_PART_CRC_H
#include "../core/core.h"

typedef struct tm__crclog tm__crclog;

tm__crclog *tm__crclog_new(void); /* NULL when out of memory */
void tm__crclog_free(tm__crclog *l);

/* Log the n bytes at data written at byte off of the file named `file` (its basename is what
** counts): computes their CRC-32C. Thread-safe. Out of memory only marks the log unusable (the
** record then reads the files back). */
void tm__crclog_add(tm__crclog *l, const char *file, uint64_t off, const void *data, size_t n);

/* The CRC-32C of bytes [off, off + len) of the file with basename `file` when the logged writes
** tile exactly that range (in any order, no gap, no overlap): 1 and *crc; else 0 (read it). Call
** after the last add. */
int tm__crclog_range(tm__crclog *l, const char *file, uint64_t off, uint64_t len, uint32_t *crc);
#endif
