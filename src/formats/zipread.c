/*
** zipread.c: zip archive access for .npz and PyTorch checkpoints (see zipread.h).
**
** Records walked here (PKWARE APPNOTE.TXT 6.3.x, section 4.3; all integers little-endian):
**   end of central directory   0x06054b50: +10 u16 entries, +12 u32 cd size, +16 u32 cd offset,
**                              +20 u16 comment length; 22 bytes + comment, at the file's end
**   zip64 EOCD locator         0x07064b50, 20 bytes just before the EOCD: +8 u64 zip64 EOCD offset
**   zip64 EOCD                 0x06064b50: +32 u64 entries, +40 u64 cd size, +48 u64 cd offset
**   central directory header   0x02014b50: +10 u16 method, +16 u32 CRC-32, +20 u32 comp size, +24 u32 size,
**                              +28 u16 name len, +30 u16 extra len, +32 u16 comment len,
**                              +42 u32 local header offset; 46 bytes + name + extra + comment
**   zip64 extra field          id 0x0001: u64 size, comp size, local header offset, each present
**                              only when the 32-bit field is 0xFFFFFFFF (in that order)
**   local file header          0x04034b50: +26 u16 name len, +28 u16 extra len; 30 bytes + name
**                              + extra, then the member's data
** Every offset is checked against the image before it is read.
*/
#include "zipread.h"
#include "../core/crc32.h"

#include <stdio.h>
#include <zip.h>

static uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t ld32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t ld64(const uint8_t *p) { return (uint64_t)ld32(p) | ((uint64_t)ld32(p + 4) << 32); }

void tm__zip_close(tm__zip *z) {
    if (!z) return;
    if (z->za) zip_discard((zip_t *)z->za);
    for (int64_t i = 0; i < z->n; i++) free(z->e[i].name);
    free(z->e);
    z->za = NULL;
    z->e = NULL;
    z->n = 0;
}

/* Locate the central directory: offset, size, entry count. */
static tm_status find_cd(tm__zip *z, uint64_t *cd_off, uint64_t *cd_size, uint64_t *n_ent,
                         tm_err *err) {
    const uint8_t *b = z->base;
    uint64_t size = z->size;
    if (size < 22)
        return tm__err_set(err, TM_E_CORRUPT, 0, "%s: zip archive of %llu bytes is too short",
                           z->path, (unsigned long long)size);
    uint64_t lo = size - 22 > 65535 ? size - 22 - 65535 : 0;
    uint64_t eocd = UINT64_MAX;
    for (uint64_t i = size - 22 + 1; i-- > lo;) {
        if (ld32(b + i) == 0x06054b50u && i + 22 + ld16(b + i + 20) == size) { eocd = i; break; }
    }
    if (eocd == UINT64_MAX)
        return tm__err_set(err, TM_E_CORRUPT, (int64_t)size,
                           "%s: no zip end-of-central-directory record", z->path);
    *n_ent = ld16(b + eocd + 10);
    *cd_size = ld32(b + eocd + 12);
    *cd_off = ld32(b + eocd + 16);
    if (*n_ent == 0xFFFF || *cd_size == 0xFFFFFFFFu || *cd_off == 0xFFFFFFFFu) {
        if (eocd < 20 || ld32(b + eocd - 20) != 0x07064b50u)
            return tm__err_set(err, TM_E_CORRUPT, (int64_t)eocd,
                               "%s: zip64 end-of-central-directory locator missing (byte %llu)",
                               z->path, (unsigned long long)eocd);
        uint64_t z64 = ld64(b + eocd - 20 + 8);
        if (z64 > size || size - z64 < 56 || ld32(b + z64) != 0x06064b50u)
            return tm__err_set(err, TM_E_CORRUPT, (int64_t)(eocd - 20),
                               "%s: zip64 end-of-central-directory offset %llu is not a zip64 "
                               "record (byte %llu)",
                               z->path, (unsigned long long)z64, (unsigned long long)(eocd - 20));
        *n_ent = ld64(b + z64 + 32);
        *cd_size = ld64(b + z64 + 40);
        *cd_off = ld64(b + z64 + 48);
    }
    uint64_t end;
    if (!tm__add_u64_ok(*cd_off, *cd_size, &end) || end > size)
        return tm__err_set(err, TM_E_CORRUPT, (int64_t)eocd,
                           "%s: central directory [%llu, +%llu) lies outside the %llu-byte archive",
                           z->path, (unsigned long long)*cd_off, (unsigned long long)*cd_size,
                           (unsigned long long)size);
    if (*n_ent > TM_ZIP_MAX_ENTRIES)
        return tm__err_set(err, TM_E_LIMIT, (int64_t)eocd,
                           "%s: zip archive lists %llu members, more than the limit of %d",
                           z->path, (unsigned long long)*n_ent, TM_ZIP_MAX_ENTRIES);
    return TM_OK;
}

/* Walk the central directory and every local header; fill z->e. */
static tm_status walk(tm__zip *z, tm_err *err) {
    uint64_t cd_off = 0, cd_size = 0, n = 0;
    tm_status s = find_cd(z, &cd_off, &cd_size, &n, err);
    if (s) return s;
    z->e = tm__calloc(n ? (size_t)n : 1, sizeof *z->e);
    if (!z->e) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    const uint8_t *b = z->base;
    uint64_t pos = cd_off, end = cd_off + cd_size;
    for (uint64_t k = 0; k < n; k++) {
        if (end - pos < 46 || ld32(b + pos) != 0x02014b50u)
            return tm__err_set(err, TM_E_CORRUPT, (int64_t)pos,
                               "%s: central directory entry %llu is truncated or has a bad "
                               "signature (byte %llu)",
                               z->path, (unsigned long long)k, (unsigned long long)pos);
        const uint8_t *h = b + pos;
        uint64_t nl = ld16(h + 28), xl = ld16(h + 30), cl = ld16(h + 32);
        if (end - pos - 46 < nl + xl + cl)
            return tm__err_set(err, TM_E_CORRUPT, (int64_t)pos,
                               "%s: central directory entry %llu runs past the directory (byte %llu)",
                               z->path, (unsigned long long)k, (unsigned long long)pos);
        tm__zip_entry *e = &z->e[k];
        e->name = tm__strndup((const char *)h + 46, (size_t)nl);
        if (!e->name) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        z->n = (int64_t)k + 1;
        e->method = ld16(h + 10);
        e->crc32 = ld32(h + 16);
        e->comp_size = ld32(h + 20);
        e->size = ld32(h + 24);
        e->lho = ld32(h + 42);
        /* zip64 extended information */
        const uint8_t *x = h + 46 + nl, *xe = x + xl;
        while (xe - x >= 4) {
            uint16_t id = ld16(x), len = ld16(x + 2);
            if ((uint64_t)(xe - x - 4) < len) break;
            if (id == 0x0001) {
                const uint8_t *q = x + 4, *qe = x + 4 + len;
                uint64_t *fields[3] = {&e->size, &e->comp_size, &e->lho};
                for (int fi = 0; fi < 3; fi++) {
                    if (*fields[fi] != 0xFFFFFFFFu) continue;
                    if (qe - q < 8)
                        return tm__err_set(err, TM_E_CORRUPT, (int64_t)pos,
                                           "%s: member '%s': zip64 extra field too short "
                                           "(byte %llu)",
                                           z->path, e->name, (unsigned long long)pos);
                    *fields[fi] = ld64(q);
                    q += 8;
                }
            }
            x += 4 + len;
        }
        pos += 46 + nl + xl + cl;
        /* the local header and the data it announces must lie before the central directory */
        if (e->lho > cd_off || cd_off - e->lho < 30 || ld32(b + e->lho) != 0x04034b50u)
            return tm__err_set(err, TM_E_CORRUPT, (int64_t)e->lho,
                               "%s: member '%s': local header offset %llu is outside the archive "
                               "data or has a bad signature",
                               z->path, e->name, (unsigned long long)e->lho);
        uint64_t lnl = ld16(b + e->lho + 26), lxl = ld16(b + e->lho + 28);
        uint64_t data = e->lho + 30 + lnl + lxl, dend;
        if (data > cd_off || !tm__add_u64_ok(data, e->comp_size, &dend) || dend > cd_off)
            return tm__err_set(err, TM_E_CORRUPT, (int64_t)e->lho,
                               "%s: member '%s': %llu bytes of data at offset %llu run past the "
                               "archive data, which ends at byte %llu",
                               z->path, e->name, (unsigned long long)e->comp_size,
                               (unsigned long long)data, (unsigned long long)cd_off);
        if (lnl != nl || memcmp(b + e->lho + 30, e->name, (size_t)nl) != 0)
            return tm__err_set(err, TM_E_CORRUPT, (int64_t)e->lho,
                               "%s: member '%s': local header names a different member (byte %llu)",
                               z->path, e->name, (unsigned long long)e->lho);
        e->data_offset = data;
    }
    return TM_OK;
}

tm_status tm__zip_open(tm__zip *z, const uint8_t *base, uint64_t size, const char *path,
                       tm_err *err) {
    memset(z, 0, sizeof *z);
    z->path = path;
    z->base = base;
    z->size = size;
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(size ? (const void *)base : (const void *)"", size, 0, &ze);
    if (!src) {
        zip_error_fini(&ze);
        return tm__err_set(err, TM_E_NOMEM, -1, "%s: cannot read the zip archive", path);
    }
    zip_t *za = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
    if (!za) {
        tm_status s = tm__err_set(err, zip_error_code_zip(&ze) == ZIP_ER_MEMORY ? TM_E_NOMEM
                                                                                : TM_E_CORRUPT,
                                  -1, "%s: not a valid zip archive: %s", path,
                                  zip_error_strerror(&ze));
        zip_source_free(src);
        zip_error_fini(&ze);
        return s;
    }
    zip_error_fini(&ze);
    z->za = za;
    tm_status s = walk(z, err);
    zip_int64_t nz = zip_get_num_entries(za, 0);
    if (!s && nz != z->n)
        s = tm__err_set(err, TM_E_CORRUPT, -1,
                        "%s: libzip lists %lld members but the central directory has %lld",
                        path, (long long)nz, (long long)z->n);
    for (int64_t i = 0; !s && i < z->n; i++) {
        zip_stat_t st;
        zip_stat_init(&st);
        const char *nm = zip_get_name(za, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
        if (zip_stat_index(za, (zip_uint64_t)i, ZIP_FL_ENC_RAW, &st) != 0 || !nm ||
            strcmp(nm, z->e[i].name) != 0 || st.size != z->e[i].size ||
            st.comp_size != z->e[i].comp_size || st.comp_method != z->e[i].method ||
            ((st.valid & ZIP_STAT_CRC) && st.crc != z->e[i].crc32))
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)z->e[i].lho,
                            "%s: member %lld ('%s'): central directory and libzip disagree",
                            path, (long long)i, z->e[i].name);
        else if (st.encryption_method != ZIP_EM_NONE)
            s = tm__err_set(err, TM_E_UNSUPPORTED, (int64_t)z->e[i].lho,
                            "%s: member '%s' is encrypted", path, z->e[i].name);
    }
    if (s) tm__zip_close(z);
    return s;
}

int64_t tm__zip_find(const tm__zip *z, const char *name) {
    for (int64_t i = 0; i < z->n; i++)
        if (strcmp(z->e[i].name, name) == 0) return i;
    return -1;
}

tm_status tm__zip_check_stored(const tm__zip *z, int64_t i, tm_err *err) {
    const tm__zip_entry *e = &z->e[i];
    uint32_t got = tm__crc32(0, z->base + e->data_offset, e->comp_size); /* bounds: walk() */
    if (got == e->crc32) return TM_OK;
    return tm__err_set(err, TM_E_CORRUPT, (int64_t)e->data_offset,
                       "%s: member '%s': CRC-32 of its %llu bytes is 0x%08x, the archive records "
                       "0x%08x: the data is damaged",
                       z->path, e->name, (unsigned long long)e->comp_size, (unsigned)got,
                       (unsigned)e->crc32);
}

tm_status tm__zip_inflate(tm__zip *z, int64_t i, void *dst, tm_err *err) {
    const tm__zip_entry *e = &z->e[i];
    if (e->method != 0 && e->method != 8)
        return tm__err_set(err, TM_E_UNSUPPORTED, (int64_t)e->lho,
                           "%s: member '%s': compression method %d (only stored and deflate)",
                           z->path, e->name, e->method);
    zip_file_t *zf = zip_fopen_index((zip_t *)z->za, (zip_uint64_t)i, 0);
    if (!zf)
        return tm__err_set(err, TM_E_CORRUPT, (int64_t)e->lho, "%s: member '%s': cannot open: %s",
                           z->path, e->name, zip_strerror((zip_t *)z->za));
    uint64_t got = 0;
    tm_status s = TM_OK;
    while (got < e->size) {
        uint64_t want = e->size - got > (1u << 30) ? (1u << 30) : e->size - got;
        zip_int64_t r = zip_fread(zf, (uint8_t *)dst + got, want);
        if (r <= 0) {
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)e->lho,
                            "%s: member '%s': decompressed %llu of the %llu bytes it declares%s%s",
                            z->path, e->name, (unsigned long long)got,
                            (unsigned long long)e->size, r < 0 ? ": " : "",
                            r < 0 ? zip_file_strerror(zf) : "");
            break;
        }
        got += (uint64_t)r;
    }
    if (!s) {
        uint8_t extra;
        zip_int64_t r = zip_fread(zf, &extra, 1);
        if (r != 0)
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)e->lho,
                            "%s: member '%s': data %s the %llu bytes it declares%s%s", z->path,
                            e->name, r > 0 ? "holds more than" : "fails its check after",
                            (unsigned long long)e->size, r < 0 ? ": " : "",
                            r < 0 ? zip_file_strerror(zf) : "");
    }
    int rc = zip_fclose(zf);
    if (!s && rc != 0)
        s = tm__err_set(err, TM_E_CORRUPT, (int64_t)e->lho, "%s: member '%s': %s", z->path,
                        e->name, zip_error_strerror(zip_get_error((zip_t *)z->za)));
    return s;
}
