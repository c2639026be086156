/*
** zipread.h: zip archives for the NumPy .npz and PyTorch readers. libzip validates the archive
** (ZIP_CHECKCONS: central directory against local headers) and inflates deflated members;
** libzip has no call that gives a member's data offset, so the central directory and each
** local header are also walked here, bounds-checked, and cross-checked against libzip's view,
** so stored members can be used in place (mmap) at their computed offset. libzip checks the
** CRC-32 of what it inflates; a stored member's is checked by the reader (tm__zip_check_stored
** now, or lazily through membercrc.h).
*/
#ifndef TM_FORMATS_ZIPREAD_H
#define TM_FORMATS_ZIPREAD_H

#include "file.h"

typedef struct tm__zip_entry {
    char    *name;         /* member name as stored                                        */
    uint64_t data_offset;  /* absolute offset of the member's (compressed) data in the image */
    uint64_t comp_size;    /* bytes stored                                                 */
    uint64_t size;         /* bytes after decompression                                    */
    int      method;       /* 0 stored, 8 deflate (others are refused when read)           */
    uint64_t lho;          /* offset of its local file header (for messages)               */
    uint32_t crc32;        /* CRC-32 of the data after decompression (central directory)   */
} tm__zip_entry;

typedef struct tm__zip {
    const char    *path;   /* for messages (borrowed)                                      */
    const uint8_t *base;   /* the whole archive image (borrowed: a tm_file map)            */
    uint64_t       size;
    void          *za;     /* zip_t *                                                      */
    tm__zip_entry *e;
    int64_t        n;
} tm__zip;

#define TM_ZIP_MAX_ENTRIES 1000000  /* members we are willing to list                     */

/* Open the image [base, base+size). On error z is left closed (tm__zip_close is safe). */
tm_status tm__zip_open(tm__zip *z, const uint8_t *base, uint64_t size, const char *path,
                       tm_err *err);
void tm__zip_close(tm__zip *z);
/* Index of the member named `name`, or -1. */
int64_t tm__zip_find(const tm__zip *z, const char *name);
/* Decompress member i into dst, which holds exactly e[i].size bytes; the size and CRC are
** checked. */
tm_status tm__zip_inflate(tm__zip *z, int64_t i, void *dst, tm_err *err);

/* The CRC-32 of stored member i (its bytes in the image) against the central directory's, now:
** for the small members a reader uses while opening (a pickle, a byte-order note). Members
** tensors read in place are registered with tm__crc_member_add instead (membercrc.h), to be
** checked when their data is first used. TM_OK | TM_E_CORRUPT (file, member, both CRCs). */
tm_status tm__zip_check_stored(const tm__zip *z, int64_t i, tm_err *err);

/* Zip checkpoints: a data.pkl member makes a PyTorch checkpoint, .npy members an .npz. */
tm_status tm__pt_zip_load(tm_file *f, int mi, tm__zip *z, const char *pkl_name,
                          const tm_open_params *p, tm_err *err);
tm_status tm__npz_load(tm_file *f, int mi, tm__zip *z, const tm_open_params *p, tm_err *err);

#endif
