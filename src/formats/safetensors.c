/*
** safetensors.c: the safetensors reader (single file, sharded index, directory, memory buffer).
**
** File layout (Hugging Face safetensors; all integers little-endian):
**
**   offset      size  field
**   0           8     N: u64, byte length of the header
**   8           N     header: UTF-8 JSON object, may be padded with trailing spaces
**                       "__metadata__": {string: string, ...}            (optional)
**                       "<tensor name>": {"dtype": "F32",
**                                         "shape": [d0, d1, ...],
**                                         "data_offsets": [begin, end]}  (one per tensor)
**   8+N         rest  data area; tensor bytes are [8+N+begin, 8+N+end), row-major, little-endian
**
** Every field is validated before use (docs/formats.md "safetensors" lists the rules): the
** header fits the file and the cap, the JSON is an object without duplicate keys, every
** dtype is known, shapes are small non-negative integer lists, each span has exactly the
** bytes its shape needs, and the spans tile the data area with no overlap, hole or overrun.
** Opening reads headers only; the data area is mapped, never touched.
**
** A sharded checkpoint is "<stem>.safetensors.index.json" {"metadata": {"total_size": N},
** "weight_map": {tensor: shard file}}; every shard sits in the index's folder. Any other
** *.safetensors file there is not read, with a warning naming it (st_warn_strays).
*/
#include "file.h"
#include "../core/fsutil.h"
#include "../core/jschema.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_DEFAULT_MAX_HEADER (100ull << 20) /* bytes; the reference reader caps at 100 MB  */
#define ST_CONFIG_MAX         (16ull << 20)  /* bytes of config.json we are willing to read   */

/* ctensors.c: layout recognition over a listed file (compressed-tensors, fp8 scale). */
/* Shared with ctensors.c and safetensors_write.c. */

/* ---------------------------------------------------------------------------------------- */
/* Small helpers                                                                            */
/* ---------------------------------------------------------------------------------------- */

/* The safetensors dtypes are the tm_dtype values F64..BOOL (I4/U4 exist only as codes). */
int tm__st_dtype_ok(tm_dtype dt) { return (int)dt >= (int)TM_F64 && (int)dt <= (int)TM_BOOL; }

/* Parse a safetensors dtype name: exact canonical names only (no CLI aliases). */
static int st_dtype_parse(const char *s, tm_dtype *out) {
    tm_dtype dt;
    if (tm_dtype_from_name(s, &dt) != TM_OK || !tm__st_dtype_ok(dt)) return 0;
    const tm_dtype_traits *tr = tm_dtype_get(dt);
    if (!tr || !tr->name || strcmp(tr->name, s) != 0) return 0;
    *out = dt;
    return 1;
}

static uint64_t st_itemsize(tm_dtype dt) {
    const tm_dtype_traits *tr = tm_dtype_get(dt);
    return tr ? (uint64_t)(tr->bits / 8) : 0;
}

/* Read a whole small file into a NUL-terminated buffer. *found = 0 (and TM_OK) when it does not
** exist; *too_big = 1 (TM_OK, no buffer) when it is larger than cap. */
static tm_status read_small_file(const char *path, uint64_t cap, char **out, size_t *n_out,
                                 int *found, int *too_big, tm_err *err) {
    *out = NULL;
    *n_out = 0;
    *found = 0;
    *too_big = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block us */
    if (fd < 0) {
        if (errno == ENOENT) return TM_OK;
        return tm__err_sys(err, errno, "%s: cannot open", path);
    }
    *found = 1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return tm__err_sys(err, e, "%s: cannot stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return tm__err_set(err, TM_E_IO, -1, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > cap) {
        close(fd);
        *too_big = 1;
        return TM_OK;
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory reading %s", path);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            free(buf);
            return tm__err_sys(err, e, "%s: cannot read", path);
        }
        if (r == 0) break; /* shrank while reading: use what is there */
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    *out = buf;
    *n_out = got;
    return TM_OK;
}

static char *join_path(const char *dir, const char *name) {
    if (strcmp(dir, "/") == 0) return tm__aprintf("/%s", name);
    return tm__aprintf("%s/%s", dir, name);
}

/* ---------------------------------------------------------------------------------------- */
/* Header key positions                                                                     */
/* ---------------------------------------------------------------------------------------- */

/* jansson gives no positions for parsed values, so messages would not be able to say where an
** entry sits. The header has already been parsed (it is valid JSON and has no duplicate keys,
** and jansson keeps insertion order), so a plain scan of the top level yields the byte offset
** of every key in the same order as json_object_foreach. Bounded by n throughout. */
static size_t scan_ws(const char *s, size_t i, size_t n) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i;
}

static size_t scan_string(const char *s, size_t i, size_t n) {
    i++; /* opening quote */
    while (i < n && s[i] != '"') i += (s[i] == '\\') ? 2 : 1;
    return i < n ? i + 1 : n;
}

static size_t scan_value(const char *s, size_t i, size_t n) {
    if (i >= n) return n;
    if (s[i] == '"') return scan_string(s, i, n);
    if (s[i] == '{' || s[i] == '[') {
        size_t depth = 0;
        while (i < n) {
            char c = s[i];
            if (c == '"') { i = scan_string(s, i, n); continue; }
            if (c == '{' || c == '[') depth++;
            else if (c == '}' || c == ']') {
                if (--depth == 0) return i + 1;
            }
            i++;
        }
        return n;
    }
    while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\t' &&
           s[i] != '\n' && s[i] != '\r')
        i++;
    return i;
}

/* Offsets (within the header text) of the top-level keys; returns how many were found. */
static size_t scan_key_offsets(const char *s, size_t n, uint64_t *offs, size_t cap) {
    size_t k = 0, i = scan_ws(s, 0, n);
    if (i >= n || s[i] != '{') return 0;
    i++;
    for (;;) {
        i = scan_ws(s, i, n);
        if (i >= n || s[i] != '"') return k;
        if (k < cap) offs[k] = i;
        k++;
        i = scan_string(s, i, n);
        i = scan_ws(s, i, n);
        if (i >= n || s[i] != ':') return k;
        i = scan_ws(s, i + 1, n);
        i = scan_value(s, i, n);
        i = scan_ws(s, i, n);
        if (i >= n || s[i] != ',') return k;
        i++;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* One safetensors image                                                                     */
/* ---------------------------------------------------------------------------------------- */

typedef struct st_span {
    uint64_t    begin, end;  /* data_offsets, relative to the data area */
    uint64_t    hdr_off;     /* absolute file offset of the entry's key  */
    const char *name;        /* borrowed from the parsed header          */
} st_span;

static int span_cmp(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Shared state while one checkpoint (possibly many shards) is parsed. */
typedef struct st_ctx {
    tm_file              *f;
    const tm_open_params *p;
    json_t               *seen;      /* sharded: tensor name -> map index of its shard    */
    json_t               *meta_seen; /* metadata key -> value, across shards              */
} st_ctx;

static tm_status st_add_meta(st_ctx *c, const char *path, const char *key, const char *value,
                             tm_err *err) {
    json_t *old = json_object_get(c->meta_seen, key);
    if (old) {
        if (strcmp(json_string_value(old), value) != 0)
            return tm__file_add_warning(c->f, err,
                                        "%s: __metadata__ '%s' is '%s' here but '%s' in an earlier "
                                        "shard; keeping the first",
                                        path, key, value, json_string_value(old));
        return TM_OK;
    }
    if (json_object_set_new(c->meta_seen, key, json_string(value)) != 0)
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    return tm__file_add_meta(c->f, key, value, err);
}

/* Validate one entry and fill t. Returns TM_OK or the error. */
static tm_status st_entry(const char *path, const char *name, json_t *v, uint64_t hoff,
                          uint64_t data_start, uint64_t data_len, int mi, tm_tensor *t,
                          st_span *sp, tm_err *err) {
    int64_t ho = (int64_t)hoff;
    if (!json_is_object(v))
        return tm__err_set(err, TM_E_CORRUPT, ho,
                           "%s: tensor '%s': entry is a JSON %s, not an object (header byte %llu)",
                           path, name, tm__json_type_name(v), (unsigned long long)hoff);
    json_t *jd = json_object_get(v, "dtype");
    json_t *js = json_object_get(v, "shape");
    json_t *jo = json_object_get(v, "data_offsets");
    const char *missing = !jd ? "dtype" : !js ? "shape" : !jo ? "data_offsets" : NULL;
    if (missing)
        return tm__err_set(err, TM_E_CORRUPT, ho,
                           "%s: tensor '%s': entry has no \"%s\" (header byte %llu)", path, name,
                           missing, (unsigned long long)hoff);
    if (!json_is_string(jd))
        return tm__err_set(err, TM_E_CORRUPT, ho,
                           "%s: tensor '%s': dtype is a JSON %s, not a string (header byte %llu)",
                           path, name, tm__json_type_name(jd), (unsigned long long)hoff);
    tm_dtype dt;
    if (!st_dtype_parse(json_string_value(jd), &dt))
        return tm__err_set(err, TM_E_UNSUPPORTED, ho,
                           "%s: tensor '%s': unknown dtype '%s' (header byte %llu)", path, name,
                           json_string_value(jd), (unsigned long long)hoff);
    if (!json_is_array(js))
        return tm__err_set(err, TM_E_CORRUPT, ho,
                           "%s: tensor '%s': shape is a JSON %s, not an array (header byte %llu)",
                           path, name, tm__json_type_name(js), (unsigned long long)hoff);
    size_t nd = json_array_size(js);
    if (nd > TM_MAX_DIMS)
        return tm__err_set(err, TM_E_LIMIT, ho,
                           "%s: tensor '%s': shape has %zu dims, more than the %d supported "
                           "(header byte %llu)",
                           path, name, nd, TM_MAX_DIMS, (unsigned long long)hoff);
    memset(t, 0, sizeof *t);
    for (size_t d = 0; d < nd; d++) {
        json_t *x = json_array_get(js, d);
        if (!json_is_integer(x))
            return tm__err_set(err, TM_E_CORRUPT, ho,
                               "%s: tensor '%s': shape[%zu] is a JSON %s, not an integer "
                               "(header byte %llu)",
                               path, name, d, tm__json_type_name(x), (unsigned long long)hoff);
        json_int_t xv = json_integer_value(x);
        if (xv < 0)
            return tm__err_set(err, TM_E_CORRUPT, ho,
                               "%s: tensor '%s': negative dim shape[%zu] = %lld (header byte %llu)",
                               path, name, d, (long long)xv, (unsigned long long)hoff);
        t->shape[d] = (int64_t)xv;
    }
    t->ndim = (int)nd;
    char shp[160];
    tm__st_fmt_shape(shp, sizeof shp, t->ndim, t->shape);
    int ok;
    int64_t numel = tm__shape_numel(t->ndim, t->shape, &ok);
    uint64_t need = 0;
    if (!ok || !tm__mul_u64_ok((uint64_t)numel, st_itemsize(dt), &need))
        return tm__err_set(err, TM_E_CORRUPT, ho,
                           "%s: tensor '%s': shape %s x %s overflows 64 bits (header byte %llu)",
                           path, name, shp, tm_dtype_get(dt)->name, (unsigned long long)hoff);
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_is_integer(json_array_get(jo, 0)) || !json_is_integer(json_array_get(jo, 1)))
        return tm__err_set(err, TM_E_CORRUPT, ho,
                           "%s: tensor '%s': data_offsets is not a pair of integers [begin, end] "
                           "(header byte %llu)",
                           path, name, (unsigned long long)hoff);
    json_int_t b = json_integer_value(json_array_get(jo, 0));
    json_int_t e = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || e < 0 || b > e)
        return tm__err_set(err, TM_E_CORRUPT, ho,
                           "%s: tensor '%s': data_offsets [%lld, %lld] need 0 <= begin <= end "
                           "(header byte %llu)",
                           path, name, (long long)b, (long long)e, (unsigned long long)hoff);
    uint64_t ub = (uint64_t)b, ue = (uint64_t)e;
    if (ue - ub != need)
        return tm__err_set(err, TM_E_CORRUPT, ho,
                           "%s: tensor '%s': data_offsets [%llu, %llu] span %llu bytes but shape "
                           "%s x %s needs %llu (header byte %llu)",
                           path, name, (unsigned long long)ub, (unsigned long long)ue,
                           (unsigned long long)(ue - ub), shp, tm_dtype_get(dt)->name,
                           (unsigned long long)need, (unsigned long long)hoff);
    if (ue > data_len)
        return tm__err_set(err, TM_E_CORRUPT, ho,
                           "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the "
                           "data area (%llu bytes from file byte %llu) (header byte %llu)",
                           path, name, (unsigned long long)ub, (unsigned long long)ue,
                           (unsigned long long)data_len, (unsigned long long)data_start,
                           (unsigned long long)hoff);
    t->name = name;
    t->phys_name = NULL;
    t->dtype = dt;
    t->n_bytes = need;
    t->file_index = mi;
    t->offset = data_start + ub;
    t->phys_dtype = dt;
    t->phys_ndim = t->ndim;
    memcpy(t->phys_shape, t->shape, sizeof t->shape);
    t->role = TM_ROLE_DATA;
    t->owner = -1;
    t->quant = NULL;
    sp->begin = ub;
    sp->end = ue;
    sp->hdr_off = hoff;
    sp->name = name;
    return TM_OK;
}

/* The spans, sorted, must tile [0, data_len) exactly (zero-length spans may sit anywhere on a
** boundary). Past-the-end spans were rejected per entry. */
static tm_status st_check_tiling(const char *path, st_span *sp, size_t n, uint64_t data_start,
                                 uint64_t data_len, tm_err *err) {
    qsort(sp, n, sizeof *sp, span_cmp);
    uint64_t cur = 0;
    const st_span *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        if (sp[i].begin < cur)
            return tm__err_set(err, TM_E_CORRUPT, (int64_t)(data_start + sp[i].begin),
                               "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap at "
                               "file byte %llu (header byte %llu)",
                               path, prev->name, (unsigned long long)prev->begin,
                               (unsigned long long)prev->end, sp[i].name,
                               (unsigned long long)sp[i].begin, (unsigned long long)sp[i].end,
                               (unsigned long long)(data_start + sp[i].begin),
                               (unsigned long long)sp[i].hdr_off);
        if (sp[i].begin > cur)
            return tm__err_set(err, TM_E_CORRUPT, (int64_t)(data_start + cur),
                               "%s: hole in the data area: bytes [%llu, %llu) (file byte %llu) "
                               "belong to no tensor; next is '%s' (header byte %llu)",
                               path, (unsigned long long)cur, (unsigned long long)sp[i].begin,
                               (unsigned long long)(data_start + cur), sp[i].name,
                               (unsigned long long)sp[i].hdr_off);
        if (sp[i].end > cur) {
            cur = sp[i].end;
            prev = &sp[i];
        } else if (!prev) {
            prev = &sp[i];
        }
    }
    if (cur != data_len)
        return tm__err_set(err, TM_E_CORRUPT, (int64_t)(data_start + cur),
                           "%s: hole in the data area: the last %llu bytes (from file byte %llu) "
                           "belong to no tensor",
                           path, (unsigned long long)(data_len - cur),
                           (unsigned long long)(data_start + cur));
    return TM_OK;
}

/* Parse the image in map slot mi and append its tensors to c->f. */
static tm_status st_parse(st_ctx *c, int mi, tm_err *err) {
    tm_file *f = c->f;
    const char *path = f->maps[mi].path;
    const uint8_t *base = f->maps[mi].base;
    uint64_t size = f->maps[mi].size;
    if (size < 8)
        return tm__err_set(err, TM_E_CORRUPT, (int64_t)size,
                           "%s: file is %llu bytes, truncated before the 8-byte header length",
                           path, (unsigned long long)size);
    uint64_t hlen = tm__ld64(base);
    if (hlen > size - 8)
        return tm__err_set(err, TM_E_CORRUPT, 0,
                           "%s: header length %llu runs past the end of the file (%llu bytes "
                           "after the length field)",
                           path, (unsigned long long)hlen, (unsigned long long)(size - 8));
    uint64_t cap = c->p->max_header_bytes ? c->p->max_header_bytes : ST_DEFAULT_MAX_HEADER;
    if (hlen > cap)
        return tm__err_set(err, TM_E_LIMIT, 0,
                           "%s: header length %llu exceeds the limit of %llu bytes", path,
                           (unsigned long long)hlen, (unsigned long long)cap);
    if (hlen < 2)
        return tm__err_set(err, TM_E_CORRUPT, 0,
                           "%s: header length %llu is too short for a JSON object", path,
                           (unsigned long long)hlen);
    const char *hdr = (const char *)base + 8;
    uint64_t data_start = 8 + hlen, data_len = size - data_start;

    json_error_t je;
    json_t *root = json_loadb(hdr, (size_t)hlen, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!root) {
        uint64_t pos = je.position > 0 ? (uint64_t)je.position : 0;
        const char *why = strstr(je.text, "duplicate object key") ? "duplicate key in header: "
                                                                   : "";
        return tm__err_set(err, TM_E_CORRUPT, (int64_t)(8 + pos),
                           "%s: header is not valid JSON: %s%s (header byte %llu)", path, why,
                           je.text, (unsigned long long)(8 + pos));
    }
    if (!json_is_object(root)) {
        tm_status s = tm__err_set(err, TM_E_CORRUPT, 8,
                                  "%s: header is a JSON %s, not an object (header byte 8)", path,
                                  tm__json_type_name(root));
        json_decref(root);
        return s;
    }

    size_t n_keys = json_object_size(root);
    uint64_t *offs = tm__malloc_n(n_keys ? n_keys : 1, sizeof *offs);
    st_span *spans = tm__malloc_n(n_keys ? n_keys : 1, sizeof *spans);
    tm_status s = TM_OK;
    if (!offs || !spans) {
        s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory reading %s", path);
        goto done;
    }
    if (scan_key_offsets(hdr, (size_t)hlen, offs, n_keys) != n_keys)
        for (size_t i = 0; i < n_keys; i++) offs[i] = 0; /* cannot happen for parsed JSON */

    size_t k = 0, n_spans = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        uint64_t hoff = 8 + offs[k++];
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(v)) {
                s = tm__err_set(err, TM_E_CORRUPT, (int64_t)hoff,
                                "%s: __metadata__ is a JSON %s, not an object of strings "
                                "(header byte %llu)",
                                path, tm__json_type_name(v), (unsigned long long)hoff);
                goto done;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) {
                    s = tm__err_set(err, TM_E_CORRUPT, (int64_t)hoff,
                                    "%s: __metadata__ value for key '%s' is a JSON %s, not a "
                                    "string (header byte %llu)",
                                    path, mk, tm__json_type_name(mv), (unsigned long long)hoff);
                    goto done;
                }
                if ((s = st_add_meta(c, path, mk, json_string_value(mv), err)) != TM_OK) goto done;
            }
            continue;
        }
        tm_tensor t;
        s = st_entry(path, key, v, hoff, data_start, data_len, mi, &t, &spans[n_spans], err);
        if (s != TM_OK) goto done;
        n_spans++;
        if (c->seen) {
            json_t *other = json_object_get(c->seen, key);
            if (other) {
                s = tm__err_set(err, TM_E_CORRUPT, (int64_t)hoff,
                                "%s: tensor '%s' also appears in shard %s (header byte %llu)",
                                path, key, f->maps[json_integer_value(other)].path,
                                (unsigned long long)hoff);
                goto done;
            }
            if (json_object_set_new(c->seen, key, json_integer(mi)) != 0) {
                s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
                goto done;
            }
        }
        if ((s = tm__file_add_tensor(f, &t, NULL, err)) != TM_OK) goto done;
    }
    s = st_check_tiling(path, spans, n_spans, data_start, data_len, err);
done:
    free(offs);
    free(spans);
    json_decref(root);
    return s;
}

/* ---------------------------------------------------------------------------------------- */
/* Checkpoint-level opening                                                                  */
/* ---------------------------------------------------------------------------------------- */

/* config.json beside the checkpoint: stored when it is a JSON object, else a warning. */
static tm_status st_read_config(tm_file *f, const char *dir, tm_err *err) {
    char *path = join_path(dir, "config.json");
    if (!path) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    char *buf = NULL;
    size_t n = 0;
    int found = 0, too_big = 0;
    tm_err e2;
    tm_err_clear(&e2);
    tm_status s = read_small_file(path, ST_CONFIG_MAX, &buf, &n, &found, &too_big, &e2);
    if (s == TM_E_NOMEM) {
        free(path);
        if (err) *err = e2;
        return s;
    }
    if (s != TM_OK) {
        s = tm__file_add_warning(f, err, "%s; config.json ignored", e2.msg);
    } else if (too_big) {
        s = tm__file_add_warning(f, err, "%s: larger than %llu bytes; ignored", path,
                                 (unsigned long long)ST_CONFIG_MAX);
    } else if (found) {
        json_error_t je;
        json_t *j = json_loadb(buf, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
        if (!j) {
            s = tm__file_add_warning(f, err, "%s: not valid JSON at byte %d (%s); ignored", path,
                                     je.position, je.text);
        } else if (!json_is_object(j)) {
            s = tm__file_add_warning(f, err, "%s: a JSON %s, not an object; ignored", path,
                                     tm__json_type_name(j));
        } else {
            f->config_json = buf;
            buf = NULL;
        }
        json_decref(j);
    }
    free(buf);
    free(path);
    return s;
}

/* Quantized layouts found by tensor names and shapes once the listing is complete, in order
** (GPTQ/AWQ modules after compressed-tensors ones). A recognizer only uses file.c's builder,
** never this reader, so a new layout is a row here and a file of its own. */
static const struct {
    const char *layout;
    tm_status (*recognize)(tm_file *f, tm_err *err);
} st_recognizers[] = {
    {"compressed-tensors", tm__ctensors_recognize}, /* ctensors.c */
    {"gptq/awq", tm__gptq_recognize},               /* gptq.c     */
};

static tm_status st_finish(tm_file *f, const tm_open_params *p, tm_err *err) {
    tm_status s = tm__file_finish(f, err);
    if (s != TM_OK || p->no_recognize) return s;
    for (size_t k = 0; k < sizeof st_recognizers / sizeof st_recognizers[0]; k++)
        if ((s = st_recognizers[k].recognize(f, err)) != TM_OK) return s;
    return tm__file_finish(f, err); /* names changed: rebuild the index */
}

static void st_ctx_free(st_ctx *c) {
    json_decref(c->seen);
    json_decref(c->meta_seen);
}

/* One safetensors file: the one at path (mapped), or when path is NULL the caller's n bytes at
** data called name; dir (may be NULL) is where config.json is looked for. */
static tm_status st_open_single(const char *path, const void *data, size_t n, const char *name,
                                const char *dir, const tm_open_params *p, tm_file **out,
                                tm_err *err) {
    tm_file *f = tm__file_new(TM_FMT_SAFETENSORS);
    st_ctx c = {f, p, NULL, json_object()};
    tm_status s = TM_OK;
    int mi = 0;
    if (!f || !c.meta_seen) {
        s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        goto fail;
    }
    s = path ? tm__file_map(f, path, &mi, err) : tm__file_add_buffer(f, name, data, n, &mi, err);
    if (s != TM_OK) goto fail;
    if ((s = st_parse(&c, mi, err)) != TM_OK) goto fail;
    if (dir && (s = st_read_config(f, dir, err)) != TM_OK) goto fail;
    s = st_finish(f, p, err);
fail: /* and success: s == TM_OK */
    st_ctx_free(&c);
    if (s != TM_OK) {
        tm_close(f);
        return s;
    }
    *out = f;
    return TM_OK;
}

static int shard_name_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A shard name must stay inside the index's folder. */
static int shard_name_ok(const char *s) {
    return s[0] != '\0' && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int is_regular(const char *path);

/* A *.safetensors file in the index's folder that the index does not name (a single-file copy
** or an older shard beside the shards, issue 12 item 4) is not read: one warning names each. */
static tm_status st_warn_strays(tm_file *f, const char *ipath, const char *dir,
                                json_t *shard_set, tm_err *err) {
    DIR *d = opendir(dir);
    if (!d) return TM_OK; /* the shards were read from it; nothing more to say */
    tm_status s = TM_OK;
    struct dirent *de;
    while (s == TM_OK && (de = readdir(d)) != NULL) {
        if (!tm__ends_with(de->d_name, ".safetensors") || json_object_get(shard_set, de->d_name))
            continue;
        char *c = join_path(dir, de->d_name);
        if (!c) {
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
            break;
        }
        if (is_regular(c))
            s = tm__file_add_warning(f, err,
                                     "%s: a checkpoint file beside %s that the index does not "
                                     "name; not read (the index's %zu shard(s) are)",
                                     c, ipath, json_object_size(shard_set));
        free(c);
    }
    closedir(d);
    return s;
}

static tm_status st_open_index(const char *ipath, const tm_open_params *p, tm_file **out,
                               tm_err *err) {
    uint64_t cap = p->max_header_bytes ? p->max_header_bytes : ST_DEFAULT_MAX_HEADER;
    char *text = NULL, *dir = NULL;
    const char **shards = NULL;
    size_t n_text = 0, n_shards = 0;
    int found = 0, too_big = 0;
    json_t *root = NULL, *shard_set = NULL;
    tm_file *f = NULL;
    st_ctx c = {NULL, p, NULL, NULL};
    tm_status s = read_small_file(ipath, cap, &text, &n_text, &found, &too_big, err);
    if (s != TM_OK) goto fail;
    if (!found) {
        s = tm__err_sys(err, ENOENT, "%s: cannot open", ipath);
        goto fail;
    }
    if (too_big) {
        s = tm__err_set(err, TM_E_LIMIT, 0, "%s: index is larger than the limit of %llu bytes",
                        ipath, (unsigned long long)cap);
        goto fail;
    }
    json_error_t je;
    root = json_loadb(text, n_text, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!root) {
        s = tm__err_set(err, TM_E_CORRUPT, je.position, "%s: index is not valid JSON: %s (byte %d)",
                        ipath, je.text, je.position);
        goto fail;
    }
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(wm)) {
        s = tm__err_set(err, TM_E_CORRUPT, 0, "%s: index has no \"weight_map\" object", ipath);
        goto fail;
    }
    if (json_object_size(wm) == 0) {
        s = tm__err_set(err, TM_E_CORRUPT, 0, "%s: index \"weight_map\" lists no tensors", ipath);
        goto fail;
    }
    shard_set = json_object();
    if (!shard_set) {
        s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        goto fail;
    }
    const char *name;
    json_t *v;
    json_object_foreach(wm, name, v) {
        if (!json_is_string(v)) {
            s = tm__err_set(err, TM_E_CORRUPT, 0,
                            "%s: weight_map entry for tensor '%s' is a JSON %s, not a file name",
                            ipath, name, tm__json_type_name(v));
            goto fail;
        }
        const char *sh = json_string_value(v);
        if (!shard_name_ok(sh)) {
            s = tm__err_set(err, TM_E_CORRUPT, 0,
                            "%s: weight_map puts tensor '%s' in '%s', a path outside the index's "
                            "folder (shard names may not contain '/' or be '..')",
                            ipath, name, sh);
            goto fail;
        }
        if (json_object_set_new(shard_set, sh, json_true()) != 0) {
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
            goto fail;
        }
    }
    n_shards = json_object_size(shard_set);
    shards = tm__malloc_n(n_shards, sizeof *shards);
    dir = tm__dirname(ipath);
    f = tm__file_new(TM_FMT_SAFETENSORS);
    c.f = f;
    c.seen = json_object();
    c.meta_seen = json_object();
    if (!shards || !dir || !f || !c.seen || !c.meta_seen) {
        s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        goto fail;
    }
    size_t k = 0;
    json_object_foreach(shard_set, name, v) shards[k++] = name;
    qsort(shards, n_shards, sizeof *shards, shard_name_cmp);
    for (size_t i = 0; i < n_shards; i++) {
        char *sp = join_path(dir, shards[i]);
        if (!sp) {
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
            goto fail;
        }
        int mi = 0;
        s = tm__file_map(f, sp, &mi, err);
        if (s == TM_E_IO && err && err->sys_errno == ENOENT) /* the usual I/O error, said plainly */
            s = tm__err_sys(err, ENOENT, "%s: shard '%s' named by the index is missing", ipath, shards[i]);
        free(sp);
        if (s != TM_OK) goto fail;
        if ((s = st_parse(&c, mi, err)) != TM_OK) goto fail;
    }
    /* Index and shards must agree both ways. */
    json_object_foreach(c.seen, name, v) {
        json_t *want = json_object_get(wm, name);
        const char *holder = f->maps[json_integer_value(v)].path;
        if (!want) {
            s = tm__err_set(err, TM_E_CORRUPT, -1,
                            "%s: shard %s holds tensor '%s' that the index does not list", ipath,
                            holder, name);
            goto fail;
        }
        const char *base = strrchr(holder, '/');
        base = base ? base + 1 : holder;
        if (strcmp(base, json_string_value(want)) != 0) {
            s = tm__err_set(err, TM_E_CORRUPT, -1,
                            "%s: index puts tensor '%s' in shard '%s' but it is in %s", ipath,
                            name, json_string_value(want), holder);
            goto fail;
        }
    }
    json_object_foreach(wm, name, v) {
        if (!json_object_get(c.seen, name)) {
            s = tm__err_set(err, TM_E_CORRUPT, -1,
                            "%s: index lists tensor '%s' in shard '%s' but that shard does not "
                            "hold it",
                            ipath, name, json_string_value(v));
            goto fail;
        }
    }
    json_t *md = json_object_get(root, "metadata");
    json_t *ts = json_is_object(md) ? json_object_get(md, "total_size") : NULL;
    if (ts) {
        uint64_t sum = 0;
        for (int64_t i = 0; i < f->n_tensors; i++) sum += f->tensors[i].n_bytes;
        if (!json_is_integer(ts) || (uint64_t)json_integer_value(ts) != sum) {
            char tsv[64];
            if (json_is_integer(ts)) snprintf(tsv, sizeof tsv, "%lld", (long long)json_integer_value(ts));
            else snprintf(tsv, sizeof tsv, "a JSON %s", tm__json_type_name(ts));
            if ((s = tm__file_add_warning(f, err,
                                          "%s: metadata.total_size is %s but the tensors hold %llu "
                                          "bytes",
                                          ipath, tsv, (unsigned long long)sum)) != TM_OK)
                goto fail;
        }
    }
    if ((s = st_warn_strays(f, ipath, dir, shard_set, err)) != TM_OK) goto fail;
    if ((s = st_read_config(f, dir, err)) != TM_OK) goto fail;
    s = st_finish(f, p, err);
fail: /* and success: s == TM_OK */
    st_ctx_free(&c);
    json_decref(root);
    json_decref(shard_set);
    free(shards);
    free(dir);
    free(text);
    if (s != TM_OK) {
        tm_close(f);
        return s;
    }
    *out = f;
    return TM_OK;
}

static int is_regular(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A directory: model.safetensors.index.json, the only *.safetensors.index.json,
** model.safetensors, or the only *.safetensors, in that order: an index beats a single file
** beside it (which is then a warning, st_warn_strays). */
static tm_status st_open_dir(const char *dir, const tm_open_params *p, tm_file **out,
                             tm_err *err) {
    char *c = join_path(dir, "model.safetensors.index.json");
    if (!c) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (is_regular(c)) {
        tm_status s = st_open_index(c, p, out, err);
        free(c);
        return s;
    }
    free(c);
    DIR *d = opendir(dir);
    if (!d) return tm__err_sys(err, errno, "%s: cannot list directory", dir);
    char *idx = NULL, *single = NULL, *model = NULL;
    int n_idx = 0, n_single = 0;
    tm_status s = TM_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int is_idx = tm__ends_with(de->d_name, ".safetensors.index.json");
        int is_st = tm__ends_with(de->d_name, ".safetensors");
        if (!is_idx && !is_st) continue;
        char *c = join_path(dir, de->d_name);
        if (!c) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); break; }
        if (!is_regular(c)) { free(c); continue; }
        if (is_idx) { n_idx++; free(idx); idx = c; }
        else if (strcmp(de->d_name, "model.safetensors") == 0) { free(model); model = c; }
        else { n_single++; free(single); single = c; }
    }
    closedir(d);
    if (s == TM_OK) {
        if (n_idx == 1) s = st_open_index(idx, p, out, err);
        else if (n_idx > 1)
            s = tm__err_set(err, TM_E_INVALID_ARG, -1,
                            "%s: directory holds %d *.safetensors.index.json files; name one", dir,
                            n_idx);
        else if (model) s = st_open_single(model, NULL, 0, NULL, dir, p, out, err);
        else if (n_single == 1) s = st_open_single(single, NULL, 0, NULL, dir, p, out, err);
        else if (n_single > 1)
            s = tm__err_set(err, TM_E_INVALID_ARG, -1,
                            "%s: directory holds %d *.safetensors files and no index; name one",
                            dir, n_single);
        else
            s = tm__err_sys(err, ENOENT,
                            "%s: directory holds no model.safetensors, no index and no "
                            "*.safetensors",
                            dir);
    }
    free(idx);
    free(single);
    free(model);
    return s;
}

/* ---------------------------------------------------------------------------------------- */
/* Entry points (file.h)                                                                     */
/* ---------------------------------------------------------------------------------------- */

int tm__safetensors_probe(const uint8_t *head, size_t n, const char *path) {
    if (path && tm__ends_with(path, ".safetensors")) return 1;
    if (n < 10) return 0;
    uint64_t hlen = tm__ld64(head);
    if (hlen < 2 || hlen > (1ull << 40)) return 0;
    if (head[8] != '{') return 0;
    size_t i = 9;
    while (i < n && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t')) i++;
    return i >= n || head[i] == '"' || head[i] == '}';
}

tm_status tm__safetensors_open(const char *path, const tm_open_params *p, tm_file **out,
                               tm_err *err) {
    tm_open_params defp = tm_open_params_default();
    if (!p) p = &defp;
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0) return tm__err_sys(err, errno, "%s: cannot open", path);
    if (S_ISDIR(st.st_mode)) return st_open_dir(path, p, out, err);
    if (tm__ends_with(path, ".index.json")) return st_open_index(path, p, out, err);
    char *dir = tm__dirname(path);
    if (!dir) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    tm_status s = st_open_single(path, NULL, 0, NULL, dir, p, out, err);
    free(dir);
    return s;
}

tm_status tm__safetensors_open_buffer(const void *data, size_t n, const char *name,
                                      const tm_open_params *p, tm_file **out, tm_err *err) {
    tm_open_params defp = tm_open_params_default();
    if (!p) p = &defp;
    *out = NULL;
    if (!data && n) return tm__err_set(err, TM_E_INVALID_ARG, -1, "NULL buffer of %zu bytes", n);
    return st_open_single(NULL, data, n, name, NULL, p, out, err);
}
