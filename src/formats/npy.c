/*
** npy.c: NumPy .npy arrays and .npz archives of them.
**
** .npy layout (NumPy NEP 1 / numpy.lib.format; integers little-endian):
**
**   offset  size  field
**   0       6     magic "\x93NUMPY"
**   6       1     major version: 1, 2 or 3
**   7       1     minor version: 0
**   8       2|4   HEADER_LEN: u16 (version 1) or u32 (versions 2, 3)
**   10|12   N     header: a Python dict literal, latin-1 (v1, v2) or UTF-8 (v3), padded with
**                 spaces and a final '\n':  {'descr': '<f4', 'fortran_order': False,
**                 'shape': (512, 64), }
**   10|12+N rest  the array's bytes: prod(shape) * itemsize, C order unless fortran_order
**
** descr is a byte-order character ('<' little, '>' big, '|' not applicable) followed by a kind
** and an item size: b1 (bool), i1 i2 i4 i8, u1 u2 u4 u8, f2 f4 f8. Other dtypes (strings,
** objects, structured records) are not tensors: a .npy of one is refused, an .npz member of one
** is skipped with a warning. Object arrays would need pickle: never read.
** A Fortran-order array keeps its logical (row-major) shape; the tensor is flagged
** fortran_order and the view transposes indices. Big-endian arrays are flagged big_endian and
** the view swaps bytes. The data is never touched while opening.
**
** .npz: a zip archive (numpy.savez: stored members; savez_compressed: deflate) whose members
** "<key>.npy" are .npy images; each array becomes a tensor named <key>. Stored members are used
** in place at their data offset (zipread.c); deflated members are inflated into memory that the
** tm_file owns, at most NPZ_MAX_INFLATED bytes in all. Members are independent: one that cannot
** be read (a bad .npy header, truncated data, a failed inflate or CRC, the inflate limit) is
** skipped with the warning "<path>: array '<key>' is unreadable (<reason>); skipped", as a
** non-tensor dtype is ("...: array '<key>' has dtype <descr>, which is not a tensor dtype;
** skipped"), so the other arrays stay usable; only when no array at all could be read and some
** member failed does the open fail, with the first member's error. The archive's own structure
** (central directory, local headers) is checked by zipread.c and still fails the open.
*/
#include "membercrc.h"
#include "zipread.h"

#include <errno.h>
#include <stdio.h>

#define NPY_MAX_HEADER   (1u << 20)     /* bytes of header dict we parse                    */
#define NPZ_MAX_INFLATED (4ull << 30)   /* bytes of deflated .npz members held in memory     */

static const uint8_t npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* Where the image being parsed sits, for messages. */
typedef struct npy_where {
    const char *path;    /* the file                                               */
    const char *array;   /* array name (npz key, or the file's stem)               */
    uint64_t    base;    /* offset of the image in the file (stored npz member)    */
    int         in_mem;  /* 1: the image was inflated; offsets are member offsets   */
} npy_where;

typedef struct npy_info {
    int      is_tensor;  /* 0: a valid header for a dtype that is not a tensor     */
    char     descr[32];
    tm_dtype dtype;
    int      big_endian, fortran;
    int      ndim;
    int64_t  shape[TM_MAX_DIMS];
    uint64_t data_off;   /* from the start of the image                            */
    uint64_t descr_off;  /* of the descr value, for messages                       */
    uint64_t n_bytes;
    uint64_t trailing;   /* bytes after the array's data                           */
} npy_info;

#define NPY_ERR(code, off, ...)                                                                   \
    npy_err(err, code, w, (uint64_t)(off), __VA_ARGS__)

static tm_status npy_err(tm_err *err, tm_status code, const npy_where *w, uint64_t off,
                         const char *fmt, ...) TM_PRINTF(5, 6);
static tm_status npy_err(tm_err *err, tm_status code, const npy_where *w, uint64_t off,
                         const char *fmt, ...) {
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (w->in_mem)
        return tm__err_set(err, code, -1, "%s: array '%s': %s (byte %llu of the inflated member)",
                           w->path, w->array, what, (unsigned long long)off);
    return tm__err_set(err, code, (int64_t)(w->base + off), "%s: array '%s': %s (byte %llu)",
                       w->path, w->array, what, (unsigned long long)(w->base + off));
}

/* ---- the header dict: a restricted Python literal ------------------------------------------ */

typedef struct hcur {
    const char *s;
    size_t      i, n;
    uint64_t    off;   /* offset of s[0] in the image */
} hcur;

static void h_ws(hcur *c) {
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' ||
                           c->s[c->i] == '\r'))
        c->i++;
}

/* A quoted string without escapes (NumPy never writes any in these keys and values). */
static int h_string(hcur *c, char *out, size_t cap) {
    if (c->i >= c->n || (c->s[c->i] != '\'' && c->s[c->i] != '"')) return 0;
    char q = c->s[c->i++];
    size_t k = 0;
    while (c->i < c->n && c->s[c->i] != q) {
        if (c->s[c->i] == '\\' || k + 1 >= cap) return 0;
        out[k++] = c->s[c->i++];
    }
    if (c->i >= c->n) return 0;
    c->i++;
    out[k] = '\0';
    return 1;
}

static int h_word(hcur *c, const char *w) {
    size_t l = strlen(w);
    if (c->n - c->i < l || memcmp(c->s + c->i, w, l) != 0) return 0;
    c->i += l;
    return 1;
}

static tm_status parse_shape(hcur *c, const npy_where *w, npy_info *in, tm_err *err) {
    if (c->i >= c->n || c->s[c->i] != '(')
        return NPY_ERR(TM_E_CORRUPT, c->off + c->i, "header 'shape' is not a tuple");
    c->i++;
    in->ndim = 0;
    for (;;) {
        h_ws(c);
        if (c->i < c->n && c->s[c->i] == ')') { c->i++; return TM_OK; }
        if (c->i >= c->n || c->s[c->i] < '0' || c->s[c->i] > '9')
            return NPY_ERR(TM_E_CORRUPT, c->off + c->i,
                           "header 'shape' holds something other than non-negative integers");
        uint64_t v = 0;
        while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') {
            if (v > (uint64_t)INT64_MAX / 10)
                return NPY_ERR(TM_E_CORRUPT, c->off + c->i, "header 'shape' dimension overflows");
            v = v * 10 + (uint64_t)(c->s[c->i++] - '0');
            if (v > (uint64_t)INT64_MAX)
                return NPY_ERR(TM_E_CORRUPT, c->off + c->i, "header 'shape' dimension overflows");
        }
        if (c->i < c->n && c->s[c->i] == 'L') c->i++; /* Python 2 long */
        if (in->ndim == TM_MAX_DIMS)
            return NPY_ERR(TM_E_LIMIT, c->off + c->i, "shape has more than %d dimensions",
                           TM_MAX_DIMS);
        in->shape[in->ndim++] = (int64_t)v;
        h_ws(c);
        if (c->i < c->n && c->s[c->i] == ',') { c->i++; continue; }
        if (c->i < c->n && c->s[c->i] == ')') { c->i++; return TM_OK; }
        return NPY_ERR(TM_E_CORRUPT, c->off + c->i, "header 'shape' tuple is not closed");
    }
}

/* descr -> dtype; is_tensor 0 for valid NumPy dtypes that are not numeric tensors. */
static tm_status parse_descr(const npy_where *w, uint64_t off, npy_info *in, tm_err *err) {
    const char *d = in->descr;
    in->is_tensor = 0;
    size_t l = strlen(d);
    if (l < 2 || (d[0] != '<' && d[0] != '>' && d[0] != '|' && d[0] != '='))
        return NPY_ERR(TM_E_UNSUPPORTED, off, "dtype '%s' is not a plain NumPy dtype", d);
    char kind = d[1];
    long size = 0;
    for (size_t k = 2; k < l; k++) {
        if (d[k] < '0' || d[k] > '9' || size > 100000) {
            if (kind == 'M' || kind == 'm') return TM_OK; /* datetime64[unit] */
            return NPY_ERR(TM_E_UNSUPPORTED, off, "dtype '%s' is not a plain NumPy dtype", d);
        }
        size = size * 10 + (d[k] - '0');
    }
    static const struct { char kind; long size; tm_dtype dt; } map[] = {
        {'b', 1, TM_BOOL}, {'i', 1, TM_I8}, {'i', 2, TM_I16}, {'i', 4, TM_I32}, {'i', 8, TM_I64},
        {'u', 1, TM_U8},   {'u', 2, TM_U16}, {'u', 4, TM_U32}, {'u', 8, TM_U64},
        {'f', 2, TM_F16},  {'f', 4, TM_F32}, {'f', 8, TM_F64},
    };
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++) {
        if (map[k].kind == kind && map[k].size == size) {
            if (d[0] == '=' && size > 1)
                return NPY_ERR(TM_E_UNSUPPORTED, off,
                               "dtype '%s' has native byte order, which the file cannot tell", d);
            if (d[0] == '|' && size > 1)
                return NPY_ERR(TM_E_CORRUPT, off, "dtype '%s': multi-byte type without byte order",
                               d);
            in->dtype = map[k].dt;
            in->big_endian = d[0] == '>' && size > 1;
            in->is_tensor = 1;
            return TM_OK;
        }
    }
    if (kind == 'O')
        return NPY_ERR(TM_E_UNSUPPORTED, off,
                       "dtype '%s' is an object array (pickled Python objects; never loaded)", d);
    if (strchr("fiub", kind))
        return NPY_ERR(TM_E_UNSUPPORTED, off, "dtype '%s': no %ld-byte %s type", d, size,
                       kind == 'f' ? "float" : kind == 'b' ? "bool" : "integer");
    if (strchr("cUSVaMm", kind)) return TM_OK; /* complex, strings, raw bytes, datetimes */
    return NPY_ERR(TM_E_UNSUPPORTED, off, "dtype '%s' is not a plain NumPy dtype", d);
}

/* Parse the .npy image [p, p+n). */
static tm_status npy_parse(const uint8_t *p, uint64_t n, const npy_where *w, npy_info *in,
                           tm_err *err) {
    memset(in, 0, sizeof *in);
    size_t nm = n < 6 ? (size_t)n : 6;
    if (memcmp(p, npy_magic, nm) != 0 || n == 0)
        return NPY_ERR(TM_E_CORRUPT, 0, "not a .npy image (no \\x93NUMPY magic in its %llu bytes)",
                       (unsigned long long)n);
    if (n < 10) /* the magic (or its start) is there: the header stops early */
        return NPY_ERR(TM_E_CORRUPT, n, ".npy header truncated: %llu bytes, the fixed part (magic, "
                       "version, header length) needs 10", (unsigned long long)n);
    int major = p[6], minor = p[7];
    if (major < 1 || major > 3 || minor != 0)
        return NPY_ERR(TM_E_UNSUPPORTED, 6, ".npy format version %d.%d (1.0, 2.0 and 3.0 are read)",
                       major, minor);
    uint64_t start = major == 1 ? 10 : 12;
    if (n < start)
        return NPY_ERR(TM_E_CORRUPT, 8, "truncated in the header length field");
    uint64_t hl = major == 1 ? tm__ld16(p + 8) : tm__ld32(p + 8);
    if (hl > NPY_MAX_HEADER)
        return NPY_ERR(TM_E_LIMIT, 8, "header length %llu exceeds the limit of %u bytes",
                       (unsigned long long)hl, NPY_MAX_HEADER);
    if (hl > n - start)
        return NPY_ERR(TM_E_CORRUPT, 8,
                       "header length field says %llu bytes but only %llu follow it",
                       (unsigned long long)hl, (unsigned long long)(n - start));
    hcur c = {(const char *)p + start, 0, (size_t)hl, start};
    for (size_t k = 0; k < hl; k++)
        if (c.s[k] == '\0')
            return NPY_ERR(TM_E_CORRUPT, start + k, "NUL byte inside the header");
    h_ws(&c);
    if (c.i >= c.n || c.s[c.i] != '{')
        return NPY_ERR(TM_E_CORRUPT, start + c.i, "header is not a Python dict literal");
    c.i++;
    int have_descr = 0, have_fortran = 0, have_shape = 0;
    uint64_t descr_off = start;
    for (;;) {
        h_ws(&c);
        if (c.i < c.n && c.s[c.i] == '}') { c.i++; break; }
        char key[32];
        uint64_t koff = start + c.i;
        if (!h_string(&c, key, sizeof key))
            return NPY_ERR(TM_E_CORRUPT, koff,
                           "header dict is not closed within the %llu bytes its length field "
                           "declares, or holds a key that is not a short string",
                           (unsigned long long)hl);
        h_ws(&c);
        if (c.i >= c.n || c.s[c.i] != ':')
            return NPY_ERR(TM_E_CORRUPT, start + c.i, "header: ':' expected after key '%s'", key);
        c.i++;
        h_ws(&c);
        if (strcmp(key, "descr") == 0 && !have_descr) {
            descr_off = start + c.i;
            if (!h_string(&c, in->descr, sizeof in->descr))
                return NPY_ERR(TM_E_UNSUPPORTED, start + c.i,
                               "header 'descr' is not a simple dtype string (structured dtypes "
                               "are not tensors)");
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0 && !have_fortran) {
            if (h_word(&c, "True")) in->fortran = 1;
            else if (h_word(&c, "False")) in->fortran = 0;
            else return NPY_ERR(TM_E_CORRUPT, start + c.i, "header 'fortran_order' is not True/False");
            have_fortran = 1;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            tm_status s = parse_shape(&c, w, in, err);
            if (s) return s;
            have_shape = 1;
        } else {
            return NPY_ERR(TM_E_CORRUPT, koff, "header key '%s' is unknown or repeated", key);
        }
        h_ws(&c);
        if (c.i < c.n && c.s[c.i] == ',') { c.i++; continue; }
        if (c.i < c.n && c.s[c.i] == '}') { c.i++; break; }
        return NPY_ERR(TM_E_CORRUPT, start + c.i,
                       "header dict is not closed within the %llu bytes its length field declares",
                       (unsigned long long)hl);
    }
    h_ws(&c);
    if (c.i != c.n)
        return NPY_ERR(TM_E_CORRUPT, start + c.i, "header has bytes after its dict");
    if (!have_descr || !have_fortran || !have_shape)
        return NPY_ERR(TM_E_CORRUPT, start, "header lacks '%s'",
                       !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
    in->descr_off = descr_off;
    tm_status s = parse_descr(w, descr_off, in, err);
    if (s || !in->is_tensor) return s;
    in->data_off = start + hl;
    int ok;
    int64_t numel = tm__shape_numel(in->ndim, in->shape, &ok);
    uint64_t isz = (uint64_t)tm_dtype_get(in->dtype)->bits / 8;
    if (!ok || !tm__mul_u64_ok((uint64_t)numel, isz, &in->n_bytes))
        return NPY_ERR(TM_E_CORRUPT, descr_off, "shape x itemsize overflows 64 bits");
    if (in->n_bytes > n - in->data_off)
        return NPY_ERR(TM_E_CORRUPT, in->data_off,
                       "truncated: shape and dtype '%s' need %llu bytes of data, only %llu follow "
                       "the header",
                       in->descr, (unsigned long long)in->n_bytes,
                       (unsigned long long)(n - in->data_off));
    in->trailing = n - in->data_off - in->n_bytes;
    if (in->ndim < 2 || numel <= 1) in->fortran = 0; /* the same bytes either way */
    return TM_OK;
}

static tm_status add_array(tm_file *f, const npy_where *w, const npy_info *in, int mi,
                           uint64_t image_off, tm_err *err) {
    tm_tensor t;
    memset(&t, 0, sizeof t);
    t.name = w->array;
    t.phys_name = w->array;
    t.dtype = t.phys_dtype = in->dtype;
    t.ndim = in->ndim;
    memcpy(t.shape, in->shape, sizeof t.shape);
    t.n_bytes = in->n_bytes;
    t.file_index = mi;
    t.offset = image_off + in->data_off;
    t.role = TM_ROLE_DATA;
    t.owner = -1;
    t.fortran_order = in->fortran;
    t.big_endian = in->big_endian;
    tm_status s = tm__file_add_tensor(f, &t, NULL, err);
    if (s) return s;
    if (in->trailing)
        s = tm__file_add_warning(f, err, "%s: array '%s': %llu bytes after the array's data ignored",
                                 w->path, w->array, (unsigned long long)in->trailing);
    return s;
}

/* ---- .npy ------------------------------------------------------------------------------------ */

int tm__npy_probe(const uint8_t *head, size_t n, const char *path) {
    (void)path;
    return n >= 6 && memcmp(head, npy_magic, 6) == 0;
}

static tm_status npy_load(tm_file *f, int mi, const char *array, tm_err *err) {
    const tm__map *m = &f->maps[mi];
    npy_where wh = {m->path, array, 0, 0};
    const npy_where *w = &wh;
    npy_info in;
    tm_status s = npy_parse(m->base, m->size, w, &in, err);
    if (s) return s;
    if (!in.is_tensor)
        return NPY_ERR(TM_E_UNSUPPORTED, in.descr_off, "dtype '%s' is not a numeric tensor type",
                       in.descr);
    return add_array(f, w, &in, mi, 0, err);
}

/* The array of a .npy file is named after the file: "dir/acts.npy" -> "acts". */
static char *stem_of(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t l = strlen(b);
    if (l > 4 && strcmp(b + l - 4, ".npy") == 0) l -= 4;
    return tm__strndup(l ? b : "array", l ? l : 5);
}

/* npy_load as a tm__member_load_fn: ctx is the array's name. */
static tm_status npy_load_member(tm_file *f, int mi, void *ctx, tm_err *err) {
    return npy_load(f, mi, ctx, err);
}

tm_status tm__npy_open(const char *path, const tm_open_params *p, tm_file **out, tm_err *err) {
    (void)p;
    *out = NULL;
    char *stem = stem_of(path);
    if (!stem) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    tm_status s = tm__file_open_one(TM_FMT_NPY, path, NULL, 0, NULL, npy_load_member, stem, out, err);
    free(stem);
    return s;
}

/* ---- .npz -------------------------------------------------------------------------------------- */

tm_status tm__npz_load(tm_file *f, int mi, tm__zip *z, const tm_open_params *p, tm_err *err) {
    (void)p;
    tm_err local;
    if (!err) err = &local;
    f->format = TM_FMT_NPZ;
    const char *path = f->maps[mi].path;
    uint64_t inflated = 0;
    int64_t n_arrays = 0, n_broken = 0;
    tm_err first; /* the first unreadable member's error */
    memset(&first, 0, sizeof first);
    for (int64_t i = 0; i < z->n; i++) {
        const tm__zip_entry *e = &z->e[i];
        size_t l = strlen(e->name);
        if (l == 0 || e->name[l - 1] == '/') continue; /* a directory */
        if (l < 5 || strcmp(e->name + l - 4, ".npy") != 0) {
            tm_status s = tm__file_add_warning(f, err, "%s: member '%s' is not a .npy array; "
                                               "ignored", path, e->name);
            if (s) return s;
            continue;
        }
        char *key = tm__strndup(e->name, l - 4);
        if (!key) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        npy_where wh = {path, key, e->data_offset, 0};
        const npy_where *w = &wh;
        npy_info in;
        tm_status s = TM_OK;
        int slot = mi;
        uint64_t image_off = e->data_offset;
        if (e->method == 0) {
            if (e->size != e->comp_size)
                s = NPY_ERR(TM_E_CORRUPT, 0, "stored member declares %llu bytes but holds %llu",
                            (unsigned long long)e->size, (unsigned long long)e->comp_size);
            else if (!(s = npy_parse(z->base + e->data_offset, e->comp_size, w, &in, err)))
                s = tm__crc_member_add(f, mi, e->data_offset, e->size, e->crc32, e->name, err);
        } else {
            uint64_t tot;
            if (!tm__add_u64_ok(inflated, e->size, &tot) || tot > NPZ_MAX_INFLATED ||
                e->size > SIZE_MAX - 1) {
                s = tm__err_set(err, TM_E_LIMIT, (int64_t)e->lho,
                                "%s: array '%s': compressed members inflate to more than the "
                                "limit of %llu bytes held in memory",
                                path, key, (unsigned long long)NPZ_MAX_INFLATED);
            } else {
                inflated = tot;
                uint8_t *buf = malloc(e->size ? (size_t)e->size : 1);
                char *slot_name = tm__aprintf("%s:%s (inflated)", path, e->name);
                if (!buf || !slot_name) {
                    free(buf);
                    s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory inflating %llu bytes",
                                    (unsigned long long)e->size);
                } else if ((s = tm__zip_inflate(z, i, buf, err)) != TM_OK) {
                    free(buf);
                } else if ((s = tm__file_add_buffer_owned(f, slot_name, buf, (size_t)e->size,
                                                          &slot, err)) == TM_OK) {
                    wh.in_mem = 1;
                    wh.base = 0;
                    image_off = 0;
                    s = npy_parse(f->maps[slot].base, f->maps[slot].size, w, &in, err);
                }
                free(slot_name);
            }
        }
        if (!s && !in.is_tensor) {
            s = tm__file_add_warning(f, err, "%s: array '%s' has dtype %s, which is not a tensor "
                                     "dtype; skipped", path, key, in.descr);
        } else if (!s) {
            s = add_array(f, w, &in, slot, image_off, err);
            if (!s) n_arrays++;
        } else if (s != TM_E_NOMEM && s != TM_E_IO && s != TM_E_INTERNAL) {
            /* this member only: keep the others usable, report it */
            if (n_broken++ == 0) first = *err;
            char pre[600];
            snprintf(pre, sizeof pre, "%s: array '%s': ", path, key);
            size_t pl = strlen(pre);
            const char *why = strncmp(err->msg, pre, pl) ? err->msg : err->msg + pl;
            s = tm__file_add_warning(f, err, "%s: array '%s' is unreadable (%.300s); skipped",
                                     path, key, why);
        }
        free(key);
        if (s) return s;
    }
    if (n_arrays == 0 && n_broken > 0) { /* nothing usable: the first member's error */
        *err = first;
        return first.code;
    }
    return TM_OK;
}

/* Buffer entry point: a .npy image (an .npz archive goes through tm_open_buffer's table to
** zipckpt.c, which calls tm__npz_load). */
tm_status tm__npy_open_buffer(const void *data, size_t n, const char *name,
                              const tm_open_params *p, tm_file **out, tm_err *err) {
    (void)p;
    return tm__file_open_one(TM_FMT_NPY, NULL, data, n, name, npy_load_member, (void *)"array", out,
                             err);
}
