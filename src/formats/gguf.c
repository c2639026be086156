/*
** gguf.c: the GGUF reader (versions 2 and 3, little-endian), over mmap or a caller's buffer.
**
** File layout (ggml's docs/gguf.md and ggml/include/gguf.h; all integers little-endian):
**
**   offset  size  field
**   0       4     magic "GGUF"
**   4       4     version: u32, 2 or 3 (1 used u32 counts and is refused)
**   8       8     n_tensors: u64
**   16      8     n_kv: u64
**   24      ...   n_kv key/values:   key: string; type: u32; value (below)
**           ...   n_tensors infos:   name: string; n_dims: u32 (<= 4); ne[n_dims]: u64;
**                                    type: u32 (ggml type id); offset: u64 (into the data)
**           pad   to general.alignment (default 32)
**           ...   data: tensor i at data_start + offset_i, n_bytes = prod(ne)/block * type_size
**
**   string = u64 length + that many bytes (not NUL-terminated)
**   value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string,
**                9 array (u32 element type, u64 count, elements), 10 u64, 11 i64, 12 f64
**
** Every count and length is checked against the bytes left before anything is allocated or
** read (docs/formats.md "GGUF" lists the rules). A GGUF tensor's logical shape is its ne list
** reversed (row-major); ne[0] is the row, a whole number of blocks of its type.
*/
#include "file.h"

#include <jansson.h>
#include <stdio.h>

#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_DIMS          4   /* GGML_MAX_DIMS */
#define GGUF_MAX_ARRAY_DEPTH   4   /* an array may hold arrays, 4 levels in all           */
#define GGUF_TEXT_ELEMS        8   /* array elements shown in the text summary            */
#define GGUF_TEXT_STR          48  /* bytes of a string element shown in the summary      */
#define GGUF_MAX_ARRAY_ELEMS   (1ull << 24) /* array elements in all the metadata: each is
                                               kept as a JSON value (tm_gguf_meta_json), so
                                               this bounds memory; real vocabularies hold < 1M */

enum {
    GV_U8 = 0, GV_I8, GV_U16, GV_I16, GV_U32, GV_I32, GV_F32, GV_BOOL, GV_STRING, GV_ARRAY,
    GV_U64, GV_I64, GV_F64, GV_COUNT
};

static const char *const gv_names[GV_COUNT] = {"u8",  "i8",  "u16",   "i16",   "u32",
                                               "i32", "f32", "bool",  "string", "array",
                                               "u64", "i64", "f64"};
/* Smallest encoding of one value of each type (strings: the length; arrays: type + count). */
static const uint64_t gv_min_size[GV_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 12, 8, 8, 8};

/* Format-private state: the complete value of every metadata entry as JSON text. */
typedef struct gguf_state {
    char   **meta_json;
    int     *meta_type;
    int64_t  n_meta;
    uint32_t version;
    uint64_t alignment, data_start;
    int     *tensor_type; /* ggml type of each tensor */
    int64_t  n_tensors;
} gguf_state;

static void gguf_state_free(void *p) {
    gguf_state *g = p;
    if (!g) return;
    for (int64_t i = 0; i < g->n_meta; i++) free(g->meta_json[i]);
    free(g->meta_json);
    free(g->meta_type);
    free(g->tensor_type);
    free(g);
}

/* ---------------------------------------------------------------------------------------- */
/* Cursor                                                                                   */
/* ---------------------------------------------------------------------------------------- */

typedef struct cur {
    const uint8_t *b;
    uint64_t       n, pos;
    const char    *path;
    tm_err        *err;
    uint64_t       array_elems; /* array elements read so far (GGUF_MAX_ARRAY_ELEMS) */
} cur;

static uint64_t left(const cur *c) { return c->n - c->pos; }

static tm_status need(cur *c, uint64_t k, const char *what) {
    if (k > left(c))
        return tm__err_set(c->err, TM_E_CORRUPT, (int64_t)c->pos,
                           "%s: truncated: %s needs %llu bytes at byte %llu, %llu left", c->path,
                           what, (unsigned long long)k, (unsigned long long)c->pos,
                           (unsigned long long)left(c));
    return TM_OK;
}

static tm_status rd_u32(cur *c, uint32_t *v, const char *what) {
    tm_status s = need(c, 4, what);
    if (s) return s;
    *v = tm__ld32(c->b + c->pos);
    c->pos += 4;
    return TM_OK;
}

static tm_status rd_u64(cur *c, uint64_t *v, const char *what) {
    tm_status s = need(c, 8, what);
    if (s) return s;
    *v = tm__ld64(c->b + c->pos);
    c->pos += 8;
    return TM_OK;
}

static tm_status rd_str(cur *c, const char **p, uint64_t *len, const char *what) {
    uint64_t at = c->pos, l;
    tm_status s = rd_u64(c, &l, what);
    if (s) return s;
    if (l > left(c))
        return tm__err_set(c->err, TM_E_CORRUPT, (int64_t)at,
                           "%s: %s: string length %llu at byte %llu runs past the end of the file "
                           "(%llu bytes left)",
                           c->path, what, (unsigned long long)l, (unsigned long long)at,
                           (unsigned long long)left(c));
    *p = (const char *)c->b + c->pos;
    *len = l;
    c->pos += l;
    return TM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Text helpers                                                                             */
/* ---------------------------------------------------------------------------------------- */

/* A growable string; on allocation failure `bad` is set and appends stop. */
typedef struct sbuf {
    char  *s;
    size_t n, cap;
    int    bad;
} sbuf;

static void sb_add(sbuf *b, const char *p, size_t k) {
    if (b->bad) return;
    if (b->n + k + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < b->n + k + 1) nc *= 2;
        char *q = realloc(b->s, nc);
        if (!q) { b->bad = 1; return; }
        b->s = q;
        b->cap = nc;
    }
    memcpy(b->s + b->n, p, k);
    b->n += k;
    b->s[b->n] = '\0';
}
static void sb_str(sbuf *b, const char *p) { sb_add(b, p, strlen(p)); }

/* Length of the valid UTF-8 sequence at p (1..4), or 0 when invalid (RFC 3629). */
static size_t utf8_len(const uint8_t *p, size_t n) {
    uint8_t c = p[0];
    size_t k;
    uint32_t cp;
    if (c < 0x80) return c ? 1 : 0;
    if (c >= 0xC2 && c <= 0xDF) { k = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { k = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 4; cp = c & 0x07; }
    else return 0;
    if (k > n) return 0;
    for (size_t i = 1; i < k; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if ((k == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return k;
}

/* Append bytes [p, p+n) as valid UTF-8: NUL and invalid bytes become U+FFFD. At most `limit`
** input bytes are taken (then "..." is added); limit 0 = all. */
static void sb_utf8(sbuf *b, const char *p, uint64_t n, uint64_t limit) {
    const uint8_t *u = (const uint8_t *)p;
    uint64_t i = 0, stop = (limit && n > limit) ? limit : n;
    while (i < stop) {
        size_t k = utf8_len(u + i, (size_t)(n - i));
        if (k == 0) { sb_add(b, "\xEF\xBF\xBD", 3); i++; continue; }
        sb_add(b, (const char *)u + i, k);
        i += k;
    }
    if (stop < n) sb_str(b, "...");
}

/* ---------------------------------------------------------------------------------------- */
/* Metadata values                                                                          */
/* ---------------------------------------------------------------------------------------- */

static json_t *json_num_f(double v) {
    if (v != v) return json_string("nan");
    if (v > 1.7976931348623157e308) return json_string("inf");
    if (v < -1.7976931348623157e308) return json_string("-inf");
    return json_real(v);
}

/* Read one scalar of type t (not ARRAY). Appends its text to tb when tb, and returns its JSON
** in *j when j. *u gets the value as u64 for u8..u64/bool (general.alignment). */
static tm_status rd_scalar(cur *c, int t, sbuf *tb, uint64_t str_limit, json_t **j, uint64_t *u,
                           const char *key) {
    char buf[64];
    tm_status s;
    *j = NULL;
    if (t == GV_STRING) {
        const char *p;
        uint64_t l;
        if ((s = rd_str(c, &p, &l, key)) != TM_OK) return s;
        sbuf tmp = {0};
        sb_utf8(&tmp, p, l, 0);
        if (tmp.bad) { free(tmp.s); return tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory"); }
        if (tb) {
            if (str_limit) {
                sb_str(tb, "\"");
                sb_utf8(tb, p, l, str_limit);
                sb_str(tb, "\"");
            } else {
                sb_add(tb, tmp.s ? tmp.s : "", tmp.n);
            }
        }
        *j = json_stringn(tmp.s ? tmp.s : "", tmp.n);
        free(tmp.s);
        return *j ? TM_OK : tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory");
    }
    if ((s = need(c, gv_min_size[t], key)) != TM_OK) return s;
    const uint8_t *p = c->b + c->pos;
    c->pos += gv_min_size[t];
    uint64_t uv = 0;
    int64_t iv = 0;
    double fv = 0;
    int kind = 0; /* 0 unsigned, 1 signed, 2 float, 3 bool */
    switch (t) {
    case GV_U8: uv = p[0]; break;
    case GV_I8: iv = (int8_t)p[0]; kind = 1; break;
    case GV_U16: uv = tm__ld16(p); break;
    case GV_I16: iv = (int16_t)tm__ld16(p); kind = 1; break;
    case GV_U32: uv = tm__ld32(p); break;
    case GV_I32: iv = (int32_t)tm__ld32(p); kind = 1; break;
    case GV_U64: uv = tm__ld64(p); break;
    case GV_I64: iv = (int64_t)tm__ld64(p); kind = 1; break;
    case GV_F32: { float f; memcpy(&f, p, 4); fv = f; kind = 2; break; }
    case GV_F64: memcpy(&fv, p, 8); kind = 2; break;
    case GV_BOOL: uv = p[0]; kind = 3; break;
    default: return tm__err_set(c->err, TM_E_INTERNAL, -1, "bad value type");
    }
    if (u) *u = kind == 1 ? (uint64_t)iv : uv;
    switch (kind) {
    case 0:
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)uv);
        /* JSON integers are signed 64-bit: a larger u64 is written as a decimal string */
        *j = uv > (uint64_t)INT64_MAX ? json_string(buf) : json_integer((json_int_t)uv);
        break;
    case 1: snprintf(buf, sizeof buf, "%lld", (long long)iv); *j = json_integer((json_int_t)iv); break;
    case 2:
        snprintf(buf, sizeof buf, t == GV_F32 ? "%.9g" : "%.17g", fv);
        *j = json_num_f(fv);
        break;
    default:
        /* GGUF bools are one byte; any non-zero byte reads as true (as gguf-py does) */
        snprintf(buf, sizeof buf, "%s", uv ? "true" : "false");
        *j = json_boolean(uv != 0);
        break;
    }
    if (tb) sb_str(tb, buf);
    return *j ? TM_OK : tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory");
}

/* Read one value of type t; arrays recurse up to GGUF_MAX_ARRAY_DEPTH. The text summary of an
** array is "[N x type: e0, e1, ...]" with at most GGUF_TEXT_ELEMS elements. */
static tm_status rd_value(cur *c, int t, int depth, sbuf *tb, json_t **j, uint64_t *u,
                          const char *key, uint64_t key_off) {
    if (t != GV_ARRAY) return rd_scalar(c, t, tb, depth ? GGUF_TEXT_STR : 0, j, u, key);
    *j = NULL;
    if (depth + 1 > GGUF_MAX_ARRAY_DEPTH)
        return tm__err_set(c->err, TM_E_LIMIT, (int64_t)c->pos,
                           "%s: key '%s' (byte %llu): arrays nested deeper than %d levels at byte "
                           "%llu",
                           c->path, key, (unsigned long long)key_off, GGUF_MAX_ARRAY_DEPTH,
                           (unsigned long long)c->pos);
    uint32_t et;
    uint64_t n, at = c->pos;
    tm_status s;
    if ((s = rd_u32(c, &et, key)) != TM_OK) return s;
    if ((s = rd_u64(c, &n, key)) != TM_OK) return s;
    if (et >= GV_COUNT)
        return tm__err_set(c->err, TM_E_CORRUPT, (int64_t)at,
                           "%s: key '%s' (byte %llu): array element type %u is not a GGUF value "
                           "type (byte %llu)",
                           c->path, key, (unsigned long long)key_off, et, (unsigned long long)at);
    if (n > left(c) / gv_min_size[et])
        return tm__err_set(c->err, TM_E_CORRUPT, (int64_t)at,
                           "%s: key '%s' (byte %llu): array of %llu %s values cannot fit in the "
                           "%llu bytes left (byte %llu)",
                           c->path, key, (unsigned long long)key_off, (unsigned long long)n,
                           gv_names[et], (unsigned long long)left(c), (unsigned long long)at);
    if (n > GGUF_MAX_ARRAY_ELEMS - c->array_elems)
        return tm__err_set(c->err, TM_E_LIMIT, (int64_t)at,
                           "%s: key '%s' (byte %llu): array of %llu values takes the metadata past "
                           "the limit of %llu array elements (byte %llu)",
                           c->path, key, (unsigned long long)key_off, (unsigned long long)n,
                           (unsigned long long)GGUF_MAX_ARRAY_ELEMS, (unsigned long long)at);
    c->array_elems += n;
    json_t *arr = json_array();
    if (!arr) return tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory");
    char hd[64];
    snprintf(hd, sizeof hd, "[%llu x %s%s", (unsigned long long)n, gv_names[et], n ? ": " : "");
    if (tb) sb_str(tb, hd);
    for (uint64_t i = 0; i < n; i++) {
        json_t *e;
        int show = tb && i < GGUF_TEXT_ELEMS;
        if (show && i) sb_str(tb, ", ");
        s = rd_value(c, (int)et, depth + 1, show ? tb : NULL, &e, NULL, key, key_off);
        if (s) { json_decref(arr); return s; }
        if (json_array_append_new(arr, e) != 0) {
            json_decref(arr);
            return tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory");
        }
    }
    if (tb) sb_str(tb, n > GGUF_TEXT_ELEMS ? ", ...]" : "]");
    *j = arr;
    return TM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Tensors                                                                                  */
/* ---------------------------------------------------------------------------------------- */

typedef struct ginfo {
    const char *name;    /* into the map */
    uint64_t    name_len;
    uint64_t    hdr_off; /* byte offset of the info in the file */
    uint32_t    n_dims, type;
    uint64_t    ne[GGUF_MAX_DIMS];
    uint64_t    offset, n_bytes;
} ginfo;

static int cmp_span(const void *a, const void *b) {
    const ginfo *x = *(const ginfo *const *)a, *y = *(const ginfo *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->n_bytes < y->n_bytes ? -1 : x->n_bytes > y->n_bytes;
}

static int cmp_name(const void *a, const void *b) {
    const ginfo *x = *(const ginfo *const *)a, *y = *(const ginfo *const *)b;
    uint64_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int r = memcmp(x->name, y->name, (size_t)n);
    if (r) return r;
    return x->name_len < y->name_len ? -1 : x->name_len > y->name_len;
}

/* A printable copy of a tensor name for messages (invalid UTF-8 replaced, long names cut). */
static void name_for_msg(char *buf, size_t cap, const char *p, uint64_t n) {
    sbuf b = {0};
    sb_utf8(&b, p, n, 200);
    snprintf(buf, cap, "%s", b.s && !b.bad ? b.s : "?");
    free(b.s);
}

/* Code dtype and static layout name of a block type. */
static tm_dtype code_dtype_of(int type, const tm_ggml_type_info *ti) {
    if (ti->qmin < 0) return TM_I8;
    return ti->qmax <= 15 && type != TM_GGML_TQ2_0 && type != TM_GGML_TQ1_0 && ti->code_bits == 4
               ? TM_U4
               : TM_U8;
}

static const char *layout_name(int type) {
    static const char *const names[TM_GGML_TYPE_COUNT] = {
        [TM_GGML_Q4_0] = "gguf/Q4_0",       [TM_GGML_Q4_1] = "gguf/Q4_1",
        [TM_GGML_Q5_0] = "gguf/Q5_0",       [TM_GGML_Q5_1] = "gguf/Q5_1",
        [TM_GGML_Q8_0] = "gguf/Q8_0",       [TM_GGML_Q8_1] = "gguf/Q8_1",
        [TM_GGML_Q2_K] = "gguf/Q2_K",       [TM_GGML_Q3_K] = "gguf/Q3_K",
        [TM_GGML_Q4_K] = "gguf/Q4_K",       [TM_GGML_Q5_K] = "gguf/Q5_K",
        [TM_GGML_Q6_K] = "gguf/Q6_K",       [TM_GGML_Q8_K] = "gguf/Q8_K",
        [TM_GGML_IQ2_XXS] = "gguf/IQ2_XXS", [TM_GGML_IQ2_XS] = "gguf/IQ2_XS",
        [TM_GGML_IQ3_XXS] = "gguf/IQ3_XXS", [TM_GGML_IQ1_S] = "gguf/IQ1_S",
        [TM_GGML_IQ4_NL] = "gguf/IQ4_NL",   [TM_GGML_IQ3_S] = "gguf/IQ3_S",
        [TM_GGML_IQ2_S] = "gguf/IQ2_S",     [TM_GGML_IQ4_XS] = "gguf/IQ4_XS",
        [TM_GGML_IQ1_M] = "gguf/IQ1_M",     [TM_GGML_TQ1_0] = "gguf/TQ1_0",
        [TM_GGML_TQ2_0] = "gguf/TQ2_0",
    };
    return (type >= 0 && type < TM_GGML_TYPE_COUNT && names[type]) ? names[type] : "gguf";
}

/* Validate one tensor info (already read) and compute its byte size. */
static tm_status check_info(const char *path, ginfo *g, tm_err *err) {
    char nm[256];
    name_for_msg(nm, sizeof nm, g->name, g->name_len);
    int64_t ho = (int64_t)g->hdr_off;
    const tm_ggml_type_info *ti = tm_ggml_type_info_get((int)g->type);
    if (!ti)
        return tm__err_set(err, TM_E_UNSUPPORTED, ho,
                           "%s: tensor '%s': unsupported ggml type %u (header byte %llu)", path,
                           nm, g->type, (unsigned long long)g->hdr_off);
    int64_t numel = 1;
    for (uint32_t d = 0; d < g->n_dims; d++) {
        if (g->ne[d] > (uint64_t)INT64_MAX)
            return tm__err_set(err, TM_E_CORRUPT, ho,
                               "%s: tensor '%s': ne[%u] = %llu is negative as int64 (header byte "
                               "%llu)",
                               path, nm, d, (unsigned long long)g->ne[d],
                               (unsigned long long)g->hdr_off);
        if (!tm__mul_i64_ok(numel, (int64_t)g->ne[d], &numel))
            return tm__err_set(err, TM_E_CORRUPT, ho,
                               "%s: tensor '%s': the product of its dims overflows int64 at ne[%u] "
                               "= %llu (header byte %llu)",
                               path, nm, d, (unsigned long long)g->ne[d],
                               (unsigned long long)g->hdr_off);
    }
    uint64_t row = g->n_dims ? g->ne[0] : 1;
    if (row % (uint64_t)ti->block_size != 0)
        return tm__err_set(err, TM_E_CORRUPT, ho,
                           "%s: tensor '%s': row length ne[0] = %llu is not a multiple of the %s "
                           "block size %lld (header byte %llu)",
                           path, nm, (unsigned long long)row, ti->name, (long long)ti->block_size,
                           (unsigned long long)g->hdr_off);
    if (!tm__mul_u64_ok((uint64_t)numel / (uint64_t)ti->block_size, ti->type_size, &g->n_bytes))
        return tm__err_set(err, TM_E_CORRUPT, ho,
                           "%s: tensor '%s': byte size overflows 64 bits (header byte %llu)", path,
                           nm, (unsigned long long)g->hdr_off);
    return TM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* The parse                                                                                */
/* ---------------------------------------------------------------------------------------- */

static tm_status add_meta(tm_file *f, gguf_state *gs, const char *key, sbuf *tb, json_t *j,
                          int type, tm_err *err) {
    char *js = json_dumps(j, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!js || tb->bad) { free(js); return tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); }
    tm_status s = tm__file_add_meta(f, key, tb->s ? tb->s : "", err);
    if (s) { free(js); return s; }
    gs->meta_json[gs->n_meta] = js;
    gs->meta_type[gs->n_meta] = type;
    gs->n_meta++;
    return TM_OK;
}

static tm_status gguf_parse(tm_file *f, int mi, tm_err *err) {
    const int64_t first = f->n_tensors;
    const tm__map *m = &f->maps[mi];
    cur c = {m->base, m->size, 0, m->path, err, 0};
    const char *path = m->path;
    tm_status s;
    if (m->size < 4 || memcmp(m->base, "GGUF", 4) != 0)
        return tm__err_set(err, TM_E_CORRUPT, 0, "%s: no GGUF magic at byte 0", path);
    c.pos = 4;
    uint32_t version;
    if ((s = rd_u32(&c, &version, "the version")) != TM_OK) return s;
    if (version == 0x02000000u || version == 0x03000000u || version == 0x01000000u)
        return tm__err_set(err, TM_E_UNSUPPORTED, 4,
                           "%s: big-endian GGUF (version %u byte-swapped at byte 4) is not "
                           "supported; convert it to little-endian",
                           path, (unsigned)((version >> 24) & 0xFF));
    if (version == 1)
        return tm__err_set(err, TM_E_UNSUPPORTED, 4,
                           "%s: GGUF version 1 is not supported (only 2 and 3) (byte 4)", path);
    if (version < 2 || version > 3)
        return tm__err_set(err, TM_E_UNSUPPORTED, 4,
                           "%s: GGUF version %u is not supported (only 2 and 3; a huge number "
                           "suggests a byte-order mismatch) (byte 4)",
                           path, version);
    uint64_t n_tensors, n_kv;
    if ((s = rd_u64(&c, &n_tensors, "the tensor count")) != TM_OK) return s;
    if ((s = rd_u64(&c, &n_kv, "the key/value count")) != TM_OK) return s;
    /* smallest key/value: empty key (8) + type (4) + u8 (1); smallest tensor info: empty name
    ** (8) + n_dims (4) + type (4) + offset (8) */
    if (n_kv > left(&c) / 13)
        return tm__err_set(err, TM_E_CORRUPT, 16,
                           "%s: key/value count %llu cannot fit in the %llu bytes after the header "
                           "(byte 16)",
                           path, (unsigned long long)n_kv, (unsigned long long)left(&c));
    if (n_tensors > left(&c) / 24)
        return tm__err_set(err, TM_E_CORRUPT, 8,
                           "%s: tensor count %llu cannot fit in the %llu bytes after the header "
                           "(byte 8)",
                           path, (unsigned long long)n_tensors, (unsigned long long)left(&c));
    if (n_kv + n_tensors > left(&c) / 13)
        return tm__err_set(err, TM_E_CORRUPT, 8,
                           "%s: %llu key/values and %llu tensors cannot fit in the %llu bytes left "
                           "(byte 8)",
                           path, (unsigned long long)n_kv, (unsigned long long)n_tensors,
                           (unsigned long long)left(&c));

    gguf_state *gs = calloc(1, sizeof *gs);
    if (!gs) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    f->fmt_state = gs;
    f->fmt_free = gguf_state_free;
    gs->version = version;
    gs->meta_json = tm__calloc((size_t)(n_kv ? n_kv : 1), sizeof *gs->meta_json);
    gs->meta_type = tm__calloc((size_t)(n_kv ? n_kv : 1), sizeof *gs->meta_type);
    gs->tensor_type = tm__calloc((size_t)(n_tensors ? n_tensors : 1), sizeof *gs->tensor_type);
    if (!gs->meta_json || !gs->meta_type || !gs->tensor_type)
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");

    /* key/values */
    uint64_t alignment = GGUF_DEFAULT_ALIGNMENT;
    json_t *seen = json_object();
    if (!seen) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (uint64_t k = 0; k < n_kv; k++) {
        uint64_t at = c.pos, klen;
        const char *kp;
        if ((s = rd_str(&c, &kp, &klen, "a metadata key")) != TM_OK) break;
        sbuf kb = {0};
        sb_utf8(&kb, kp, klen, 0);
        const char *key = kb.s ? kb.s : "";
        if (kb.bad) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); free(kb.s); break; }
        if (json_object_get(seen, key)) {
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)at,
                            "%s: duplicate metadata key '%s' at byte %llu", path, key,
                            (unsigned long long)at);
            free(kb.s);
            break;
        }
        json_object_set_new(seen, key, json_true());
        uint32_t t;
        uint64_t tat = c.pos;
        if ((s = rd_u32(&c, &t, key)) != TM_OK) { free(kb.s); break; }
        if (t >= GV_COUNT) {
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)tat,
                            "%s: key '%s' (byte %llu): value type %u is not a GGUF value type "
                            "(byte %llu)",
                            path, key, (unsigned long long)at, t, (unsigned long long)tat);
            free(kb.s);
            break;
        }
        sbuf tb = {0};
        json_t *j = NULL;
        uint64_t u = 0;
        s = rd_value(&c, (int)t, 0, &tb, &j, &u, key, at);
        if (s == TM_OK && strcmp(key, "general.alignment") == 0) {
            if (t != GV_U32)
                s = tm__err_set(err, TM_E_CORRUPT, (int64_t)tat,
                                "%s: general.alignment has type %s, not u32 (byte %llu)", path,
                                gv_names[t], (unsigned long long)tat);
            else if (u == 0 || (u & (u - 1)) != 0)
                s = tm__err_set(err, TM_E_CORRUPT, (int64_t)tat,
                                "%s: general.alignment %llu is not a power of two (byte %llu)",
                                path, (unsigned long long)u, (unsigned long long)tat);
            else
                alignment = u;
        }
        if (s == TM_OK) s = add_meta(f, gs, key, &tb, j, (int)t, err);
        json_decref(j);
        free(tb.s);
        free(kb.s);
        if (s) break;
    }
    json_decref(seen);
    if (s) return s;
    gs->alignment = alignment;

    /* tensor infos */
    ginfo *gi = tm__calloc((size_t)(n_tensors ? n_tensors : 1), sizeof *gi);
    ginfo **order = tm__calloc((size_t)(n_tensors ? n_tensors : 1), sizeof *order);
    if (!gi || !order) {
        free(gi); free(order);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    for (uint64_t i = 0; i < n_tensors && s == TM_OK; i++) {
        ginfo *g = &gi[i];
        g->hdr_off = c.pos;
        if ((s = rd_str(&c, &g->name, &g->name_len, "a tensor name")) != TM_OK) break;
        char nm[256];
        name_for_msg(nm, sizeof nm, g->name, g->name_len);
        if ((s = rd_u32(&c, &g->n_dims, nm)) != TM_OK) break;
        if (g->n_dims > GGUF_MAX_DIMS) {
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)g->hdr_off,
                            "%s: tensor '%s': %u dims, more than the %d GGUF allows (header byte "
                            "%llu)",
                            path, nm, g->n_dims, GGUF_MAX_DIMS, (unsigned long long)g->hdr_off);
            break;
        }
        for (uint32_t d = 0; d < g->n_dims && s == TM_OK; d++) s = rd_u64(&c, &g->ne[d], nm);
        if (s) break;
        if ((s = rd_u32(&c, &g->type, nm)) != TM_OK) break;
        if ((s = rd_u64(&c, &g->offset, nm)) != TM_OK) break;
        s = check_info(path, g, err);
        if (s == TM_OK && g->offset % alignment != 0)
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)g->hdr_off,
                            "%s: tensor '%s': data offset %llu is not a multiple of the alignment "
                            "%llu (header byte %llu)",
                            path, nm, (unsigned long long)g->offset, (unsigned long long)alignment,
                            (unsigned long long)g->hdr_off);
        order[i] = g;
    }
    uint64_t data_start = 0;
    if (s == TM_OK) {
        data_start = (c.pos + alignment - 1) / alignment * alignment;
        if (c.pos > UINT64_MAX - alignment || data_start > m->size) {
            if (n_tensors)
                s = tm__err_set(err, TM_E_CORRUPT, (int64_t)c.pos,
                                "%s: truncated: the data section would start at byte %llu, past "
                                "the end of the %llu-byte file",
                                path, (unsigned long long)data_start, (unsigned long long)m->size);
            else
                data_start = m->size; /* vocab-only files may end without padding */
        }
    }
    gs->data_start = data_start;
    uint64_t data_len = m->size - data_start;
    for (uint64_t i = 0; i < n_tensors && s == TM_OK; i++) {
        ginfo *g = &gi[i];
        if (g->offset > data_len || g->n_bytes > data_len - g->offset) {
            char nm[256];
            name_for_msg(nm, sizeof nm, g->name, g->name_len);
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)g->hdr_off,
                            "%s: tensor '%s': data [%llu, +%llu) at file byte %llu runs past the "
                            "end of the file (%llu bytes of data) (header byte %llu)",
                            path, nm, (unsigned long long)g->offset,
                            (unsigned long long)g->n_bytes,
                            (unsigned long long)(data_start + g->offset),
                            (unsigned long long)data_len, (unsigned long long)g->hdr_off);
        }
    }
    /* duplicate names */
    if (s == TM_OK && n_tensors > 1) {
        qsort(order, (size_t)n_tensors, sizeof *order, cmp_name);
        for (uint64_t i = 1; i < n_tensors && s == TM_OK; i++)
            if (cmp_name(&order[i - 1], &order[i]) == 0) {
                char nm[256];
                name_for_msg(nm, sizeof nm, order[i]->name, order[i]->name_len);
                const ginfo *a = order[i - 1]->hdr_off < order[i]->hdr_off ? order[i - 1] : order[i];
                const ginfo *b = a == order[i] ? order[i - 1] : order[i];
                s = tm__err_set(err, TM_E_CORRUPT, (int64_t)b->hdr_off,
                                "%s: duplicate tensor name '%s' (header bytes %llu and %llu)", path,
                                nm, (unsigned long long)a->hdr_off, (unsigned long long)b->hdr_off);
            }
    }
    /* no overlap (empty tensors overlap nothing) */
    if (s == TM_OK && n_tensors > 1) {
        qsort(order, (size_t)n_tensors, sizeof *order, cmp_span);
        const ginfo *prev = NULL;
        for (uint64_t i = 0; i < n_tensors && s == TM_OK; i++) {
            const ginfo *g = order[i];
            if (g->n_bytes == 0) continue;
            if (prev && g->offset < prev->offset + prev->n_bytes) {
                char a[256], b[256];
                name_for_msg(a, sizeof a, prev->name, prev->name_len);
                name_for_msg(b, sizeof b, g->name, g->name_len);
                s = tm__err_set(err, TM_E_CORRUPT, (int64_t)(data_start + g->offset),
                                "%s: tensors '%s' [%llu, +%llu) and '%s' [%llu, +%llu) overlap at "
                                "file byte %llu (header byte %llu)",
                                path, a, (unsigned long long)prev->offset,
                                (unsigned long long)prev->n_bytes, b,
                                (unsigned long long)g->offset, (unsigned long long)g->n_bytes,
                                (unsigned long long)(data_start + g->offset),
                                (unsigned long long)g->hdr_off);
            }
            if (!prev || g->offset + g->n_bytes > prev->offset + prev->n_bytes) prev = g;
        }
    }
    /* into the tm_file, in file order */
    for (uint64_t i = 0; i < n_tensors && s == TM_OK; i++) {
        const ginfo *g = &gi[i];
        const tm_ggml_type_info *ti = tm_ggml_type_info_get((int)g->type);
        sbuf nb = {0};
        sb_utf8(&nb, g->name, g->name_len, 0);
        if (nb.bad) { free(nb.s); s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); break; }
        tm_tensor t;
        memset(&t, 0, sizeof t);
        t.name = nb.s ? nb.s : "";
        t.phys_name = NULL;
        t.ndim = (int)g->n_dims;
        for (uint32_t d = 0; d < g->n_dims; d++) t.shape[g->n_dims - 1 - d] = (int64_t)g->ne[d];
        t.n_bytes = g->n_bytes;
        t.file_index = mi;
        t.offset = data_start + g->offset;
        t.role = TM_ROLE_DATA;
        t.owner = -1;
        if (!ti->is_quantized) {
            t.dtype = t.phys_dtype = (tm_dtype)ti->plain_dtype;
            t.phys_ndim = t.ndim;
            memcpy(t.phys_shape, t.shape, sizeof t.shape);
        } else {
            t.dtype = code_dtype_of((int)g->type, ti);
            t.phys_dtype = TM_U8;
            t.phys_ndim = t.ndim;
            memcpy(t.phys_shape, t.shape, sizeof t.shape);
            t.phys_shape[t.ndim - 1] = (int64_t)(g->ne[0] / (uint64_t)ti->block_size * ti->type_size);
        }
        int64_t idx;
        s = tm__file_add_tensor(f, &t, &idx, err);
        free(nb.s);
        if (s) break;
        gs->tensor_type[idx - first] = (int)g->type; /* first: the tensors of earlier splits */
        gs->n_tensors = idx - first + 1;
        if (g->name_len >= TM_GGUF_MAX_NAME) { /* llama.cpp's reader refuses it (GGML_MAX_NAME) */
            char nm[256];
            name_for_msg(nm, sizeof nm, g->name, g->name_len);
            s = tm__file_add_warning(f, err, "%s: tensor '%s': its name is %llu bytes; llama.cpp refuses "
                                     "tensor names of %d bytes or more (GGML_MAX_NAME)", path, nm,
                                     (unsigned long long)g->name_len, TM_GGUF_MAX_NAME);
            if (s) break;
        }
        if (ti->is_quantized) {
            tm_qtensor q;
            memset(&q, 0, sizeof q);
            q.code_dtype = t.dtype;
            q.qmin = ti->qmin;
            q.qmax = ti->qmax;
            q.symmetric = !ti->has_min;
            q.gran.kind = TM_GRAN_GROUP;
            q.gran.axis = t.ndim - 1;
            q.gran.group_size = ti->sub_block;
            q.packing.container = TM_U8;
            q.packing.bits = ti->code_bits;
            q.packing.codes_per_container = 8 / (ti->code_bits < 8 ? ti->code_bits : 8);
            q.packing.packed_axis = t.ndim - 1;
            q.packing.offset = 0;
            q.packing.lsb_first = 1;
            q.codes_tensor = idx;
            q.scale_tensor = -1;
            q.zero_point_tensor = -1;
            q.zp_packing.container = TM_U8;
            q.zp_packing.packed_axis = -1;
            q.zp_packing.codes_per_container = 1;
            q.layout = layout_name((int)g->type);
            q.g_idx_tensor = -1;
            q.ggml_type = (int)g->type;
            q.ggml_block_size = ti->block_size;
            s = tm__file_set_quant(f, idx, &q, err);
        }
    }
    free(gi);
    free(order);
    return s;
}

/* The integer value of metadata key `key` from entry k0 on (-1: absent or not a number). */
static long long meta_int(const tm_file *f, int64_t k0, const char *key) {
    for (int64_t k = k0; k < f->n_meta; k++)
        if (!strcmp(f->meta_keys[k], key)) {
            char *end;
            long long v = strtoll(f->meta_values[k], &end, 10);
            return *f->meta_values[k] && !*end && v >= 0 ? v : -1;
        }
    return -1;
}

/* A split set (llama.cpp's gguf-split convention, examples/gguf-split and llama_split_prefix /
** llama_split_path "%s-%05d-of-%05d.gguf", split.no numbered from 0): file 0 at mi holds
** split.count N > 1; files 1..N-1 are PREFIX-0000k-of-0000N.gguf beside it. Each is parsed and
** its tensors appended (their file_index its own map); its metadata is checked (split.no k,
** split.count N) and dropped (file 0's is the model's). The tensors of all files must number
** file 0's split.tensors.count and have unique names. */
static tm_status gguf_open_splits(tm_file *f, int mi, tm_err *err) {
    const char *path = f->maps[mi].path;
    long long n = meta_int(f, 0, "split.count"), no = meta_int(f, 0, "split.no");
    long long total = meta_int(f, 0, "split.tensors.count");
    if (n <= 1) return TM_OK;
    if (n > 65535 || no != 0)
        return tm__err_set(err, TM_E_CORRUPT, -1, "%s: split.no %lld of split.count %lld: open the first file of the "
                           "split set (split.no 0, NAME-00001-of-%05lld.gguf)", path, no, n, n);
    size_t pl = strlen(path);
    char tail[32];
    snprintf(tail, sizeof tail, "-00001-of-%05lld.gguf", n);
    size_t tl = strlen(tail);
    if (pl <= tl || strcmp(path + pl - tl, tail))
        return tm__err_set(err, TM_E_CORRUPT, -1, "%s: the first of %lld split files, but not named "
                           "PREFIX%s (llama.cpp's gguf-split convention), so the others cannot be found",
                           path, n, tail);
    gguf_state *g0 = f->fmt_state;
    tm_status s = TM_OK;
    for (long long k = 1; k < n && !s; k++) {
        char *pk = tm__aprintf("%.*s-%05lld-of-%05lld.gguf", (int)(pl - tl), path, k + 1, n);
        int mk = -1;
        s = pk ? tm__file_map(f, pk, &mk, err) : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        free(pk);
        if (s) break;
        int64_t meta0 = f->n_meta, t0 = f->n_tensors;
        f->fmt_state = NULL; /* this file's own state, merged into file 0's below */
        s = gguf_parse(f, mk, err);
        gguf_state *gk = f->fmt_state;
        f->fmt_state = g0;
        long long kno = meta_int(f, meta0, "split.no"), kn = meta_int(f, meta0, "split.count");
        if (!s && (kno != k || kn != n))
            s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: split.no %lld, split.count %lld; the split set of %s needs "
                            "split.no %lld of %lld", f->maps[mk].path, kno, kn, path, k, n);
        int *tt = s ? NULL : realloc(g0->tensor_type, (size_t)(f->n_tensors ? f->n_tensors : 1) * sizeof *tt);
        if (!s && !tt) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        if (!s) {
            g0->tensor_type = tt;
            memcpy(tt + t0, gk->tensor_type, (size_t)(f->n_tensors - t0) * sizeof *tt);
            g0->n_tensors = f->n_tensors;
        }
        gguf_state_free(gk);
        for (int64_t q = meta0; q < f->n_meta; q++) { free(f->meta_keys[q]); free(f->meta_values[q]); }
        f->n_meta = meta0;
    }
    if (!s && total >= 0 && total != f->n_tensors)
        s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: split.tensors.count %lld, but the %lld files hold %lld tensors",
                        path, total, n, (long long)f->n_tensors);
    return s;
}

static tm_status gguf_open_map(tm_file *f, int mi, tm_err *err) {
    tm_status s = gguf_parse(f, mi, err);
    if (s == TM_OK && f->maps[mi].owned == 1) s = gguf_open_splits(f, mi, err); /* files only, not buffers */
    if (s == TM_OK) s = tm__file_finish(f, err);
    return s;
}

int tm__gguf_probe(const uint8_t *head, size_t n, const char *path) {
    (void)path;
    return n >= 4 && memcmp(head, "GGUF", 4) == 0;
}

tm_status tm__gguf_open(const char *path, const tm_open_params *p, tm_file **out, tm_err *err) {
    (void)p;
    *out = NULL;
    tm_file *f = tm__file_new(TM_FMT_GGUF);
    if (!f) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    int mi;
    tm_status s = tm__file_map(f, path, &mi, err);
    if (s == TM_OK) s = gguf_open_map(f, mi, err);
    if (s) { tm_close(f); return s; }
    *out = f;
    return TM_OK;
}

tm_status tm__gguf_open_buffer(const void *data, size_t n, const char *name,
                               const tm_open_params *p, tm_file **out, tm_err *err) {
    (void)p;
    *out = NULL;
    if (!data && n) return tm__err_set(err, TM_E_INVALID_ARG, -1, "NULL buffer of %zu bytes", n);
    tm_file *f = tm__file_new(TM_FMT_GGUF);
    if (!f) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    int mi;
    tm_status s = tm__file_add_buffer(f, name ? name : "<buffer>", data, n, &mi, err);
    if (s == TM_OK) s = gguf_open_map(f, mi, err);
    if (s) { tm_close(f); return s; }
    *out = f;
    return TM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Public accessors (tensormorph/ggml.h)                                                     */
/* ---------------------------------------------------------------------------------------- */

static const gguf_state *state_of(const tm_file *f) {
    return (f && f->format == TM_FMT_GGUF && f->fmt_free == gguf_state_free) ? f->fmt_state : NULL;
}

const char *tm_gguf_meta_json(const tm_file *f, int64_t i) {
    const gguf_state *g = state_of(f);
    return (g && i >= 0 && i < g->n_meta) ? g->meta_json[i] : NULL;
}

const char *tm_gguf_meta_type(const tm_file *f, int64_t i) {
    const gguf_state *g = state_of(f);
    return (g && i >= 0 && i < g->n_meta) ? gv_names[g->meta_type[i]] : NULL;
}

int tm_gguf_tensor_type(const tm_file *f, int64_t i) {
    const gguf_state *g = state_of(f);
    return (g && i >= 0 && i < g->n_tensors) ? g->tensor_type[i] : -1;
}

int tm_gguf_info(const tm_file *f, uint32_t *version, uint64_t *alignment, uint64_t *data_start) {
    const gguf_state *g = state_of(f);
    if (!g) return 0;
    if (version) *version = g->version;
    if (alignment) *alignment = g->alignment;
    if (data_start) *data_start = g->data_start;
    return 1;
}
