/*
** pt_zip.c: PyTorch checkpoints (torch.save), zip and legacy, onto tm_file.
**
** Zip format (torch >= 1.6, the default): an archive whose members share one top folder
** "<stem>/":
**   <stem>/data.pkl     the pickled object; tensors refer to storages by persistent id
**                       ('storage', torch.<Type>Storage, key, location, numel)
**   <stem>/data/<key>   the storage's raw bytes: numel elements of the type, no header
**   <stem>/byteorder    "little" or "big" (absent in older files: little)
**   <stem>/version ...  ignored
** Storages are stored uncompressed (PyTorch aligns them to 64 bytes); they are used in place at
** the offset zipread.c computes. A deflated storage is inflated into memory the file owns.
**
** Legacy format (torch < 1.6, _use_new_zipfile_serialization=False), one stream of pickles:
**   magic number pickle (the int 0x1950a86a20f9469cfc6c), protocol version pickle (1001),
**   sys-info pickle ({'little_endian': bool, 'type_sizes': {...}, ...}), the object pickle
**   (persistent ids ('storage', type, key, location, numel, view_metadata)), a pickle of the
**   list of storage keys, then for each key in that order: u64 numel (in the writer's byte
**   order) and numel * itemsize bytes.
**
** The pickled object is walked into tensors (pt_unpickle.c builds it; nothing is executed):
** nested dicts give dotted names ("model.layers.0.attention.wq.weight"), lists and tuples
** index them (".0"), the (weight, bias) tuple of a dynamically quantized Linear's
** "<m>._packed_params._packed_params" becomes "<m>.weight" and "<m>.bias". Scalars (ints,
** floats, strings, bools, dtypes) become metadata under their dotted name. A quantized tensor
** (qint8/quint8/qint32, per_tensor_affine or per_channel_affine) is its codes (the storage
** bytes) plus a scale and a zero-point tensor: per-channel ones are the pickled tensors
** "<name>.q_per_channel_scales" (float64) and "<name>.q_per_channel_zero_points" (int64);
** per-tensor ones are Python numbers in the pickle, materialised in memory the tm_file owns as
** "<name>.q_scale" (float32, the value torch multiplies by) and "<name>.q_zero_point" (int64).
*/
#include "pt.h"
#include "membercrc.h"
#include "zipread.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define PT_MAX_DEPTH     64           /* nesting of dicts/lists walked                    */
#define PT_MAX_VISITS    (1 << 20)    /* values visited by the walk (shared subtrees count) */
#define PT_MAX_NAME      4096         /* bytes of a dotted tensor / metadata name         */
#define PT_MAX_PICKLE    (1ull << 31) /* bytes of a deflated data.pkl inflated            */
#define PT_MAX_INFLATED  (4ull << 30) /* bytes of deflated storages held in memory        */

typedef struct pt_res {
    const char *key;
    int         slot;
    uint64_t    off, avail;  /* where the storage's bytes are, and how many there are */
} pt_res;

typedef struct pt_ctx {
    tm_file    *f;
    const char *path;
    int         big;         /* storages written big-endian                            */
    tm__zip    *z;           /* zip: the archive, the folder prefix, the archive's slot */
    const char *stem;
    int         mi;
    uint64_t    inflated;
    pt_res     *res;  int64_t nres, capres;
    uint8_t    *qbuf; size_t qn, qcap;   /* per-tensor scales / zero points         */
    int64_t     visits;
    json_t     *res_map;   /* storage key -> index in res (hash lookups, not scans)      */
    json_t     *members;   /* zip member name -> index, built on first use               */
    tm_err     *err;
} pt_ctx;

static tm_status res_add(pt_ctx *c, const char *key, int slot, uint64_t off, uint64_t avail) {
    if (c->nres == c->capres) {
        int64_t nc = c->capres ? c->capres * 2 : 64;
        pt_res *r = realloc(c->res, (size_t)nc * sizeof *r);
        if (!r) return tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory");
        c->res = r;
        c->capres = nc;
    }
    if (!c->res_map && !(c->res_map = json_object()))
        return tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory");
    if (json_object_set_new_nocheck(c->res_map, key, json_integer(c->nres)) != 0)
        return tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory");
    c->res[c->nres++] = (pt_res){key, slot, off, avail};
    return TM_OK;
}

static const pt_res *res_find(const pt_ctx *c, const char *key) {
    json_t *j = c->res_map ? json_object_get(c->res_map, key) : NULL;
    return j ? &c->res[json_integer_value(j)] : NULL;
}

/* Index of the archive member `name`, or -1 (-2: out of memory). */
static int64_t member_find(pt_ctx *c, const char *name) {
    if (!c->members) {
        if (!(c->members = json_object())) return -2;
        for (int64_t i = c->z->n - 1; i >= 0; i--) /* the first of duplicate names wins */
            if (json_object_set_new_nocheck(c->members, c->z->e[i].name, json_integer(i)) != 0)
                return -2;
    }
    json_t *j = json_object_get(c->members, name);
    return j ? (int64_t)json_integer_value(j) : -1;
}

/* Where storage `st` lives. */
static tm_status resolve(pt_ctx *c, const pv *st, const char *tname, const pt_res **out) {
    *out = res_find(c, st->key);
    if (*out) return TM_OK;
    if (!c->z)
        return tm__err_set(c->err, TM_E_CORRUPT, (int64_t)st->pos,
                           "%s: tensor '%s': storage '%s' is not in the file's storage list",
                           c->path, tname, st->key);
    char *mname = tm__aprintf("%sdata/%s", c->stem, st->key);
    if (!mname) return tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory");
    int64_t i = member_find(c, mname);
    tm_status s = TM_OK;
    if (i == -2) {
        s = tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory");
    } else if (i < 0) {
        s = tm__err_set(c->err, TM_E_CORRUPT, (int64_t)st->pos,
                        "%s: tensor '%s': storage member '%s' is missing from the archive",
                        c->path, tname, mname);
    } else if (c->z->e[i].method == 0) {
        if (c->z->e[i].size != c->z->e[i].comp_size)
            s = tm__err_set(c->err, TM_E_CORRUPT, (int64_t)c->z->e[i].lho,
                            "%s: stored member '%s' declares %llu bytes but holds %llu", c->path,
                            mname, (unsigned long long)c->z->e[i].size,
                            (unsigned long long)c->z->e[i].comp_size);
        else if (!(s = tm__crc_member_add(c->f, c->mi, c->z->e[i].data_offset, c->z->e[i].size,
                                           c->z->e[i].crc32, mname, c->err)))
            s = res_add(c, st->key, c->mi, c->z->e[i].data_offset, c->z->e[i].size);
    } else {
        const tm__zip_entry *e = &c->z->e[i];
        uint64_t tot;
        if (!tm__add_u64_ok(c->inflated, e->size, &tot) || tot > PT_MAX_INFLATED || e->size > SIZE_MAX - 1) {
            s = tm__err_set(c->err, TM_E_LIMIT, (int64_t)e->lho,
                            "%s: compressed storages inflate to more than the limit of %llu bytes",
                            c->path, (unsigned long long)PT_MAX_INFLATED);
        } else {
            c->inflated = tot;
            uint8_t *buf = malloc(e->size ? (size_t)e->size : 1);
            char *sn = tm__aprintf("%s:%s (inflated)", c->path, mname);
            int slot = -1;
            if (!buf || !sn) {
                free(buf);
                s = tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory");
            } else if ((s = tm__zip_inflate(c->z, i, buf, c->err)) != TM_OK) {
                free(buf);
            } else if ((s = tm__file_add_buffer_owned(c->f, sn, buf, (size_t)e->size, &slot,
                                                      c->err)) == TM_OK) {
                s = res_add(c, st->key, slot, 0, e->size);
            }
            free(sn);
        }
    }
    free(mname);
    if (!s) *out = &c->res[c->nres - 1];
    return s;
}

static uint64_t itemsize(tm_dtype dt) { return (uint64_t)tm_dtype_get(dt)->bits / 8; }

/* Fill t (file_index, offset, bytes, shape, layout) from a pickled tensor. */
static tm_status place(pt_ctx *c, const char *name, const pt_tensor *pt, tm_tensor *t) {
    const pv *st = pt->storage;
    const pt_res *r;
    tm_status s = resolve(c, st, name, &r);
    if (s) return s;
    uint64_t isz = itemsize(st->dtype), sbytes;
    if (!tm__mul_u64_ok((uint64_t)st->numel, isz, &sbytes) || sbytes > r->avail)
        return tm__err_set(c->err, TM_E_CORRUPT, (int64_t)st->pos,
                           "%s: tensor '%s': storage '%s' declares %lld elements of %llu bytes but "
                           "holds %llu bytes",
                           c->path, name, st->key, (long long)st->numel, (unsigned long long)isz,
                           (unsigned long long)r->avail);
    int ok;
    int64_t numel = tm__shape_numel(pt->ndim, pt->shape, &ok);
    if (!ok) return tm__err_set(c->err, TM_E_CORRUPT, (int64_t)st->pos,
                                "%s: tensor '%s': shape overflows", c->path, name);
    memset(t, 0, sizeof *t);
    t->ndim = pt->ndim;
    memcpy(t->shape, pt->shape, sizeof t->shape);
    if (numel > 0) {
        int c_order = 1, f_order = 1;
        int64_t acc = 1;
        for (int d = pt->ndim - 1; d >= 0; d--) {
            if (pt->shape[d] != 1 && pt->stride[d] != acc) c_order = 0;
            acc *= pt->shape[d];
        }
        acc = 1;
        for (int d = 0; d < pt->ndim; d++) {
            if (pt->shape[d] != 1 && pt->stride[d] != acc) f_order = 0;
            acc *= pt->shape[d];
        }
        if (!c_order && !f_order) {
            char sh[160], sd[160];
            tm__st_fmt_shape(sh, sizeof sh, pt->ndim, pt->shape);
            tm__st_fmt_shape(sd, sizeof sd, pt->ndim, pt->stride);
            return tm__err_set(c->err, TM_E_UNSUPPORTED, (int64_t)st->pos,
                               "%s: tensor '%s': size %s with strides %s is neither row- nor "
                               "column-major",
                               c->path, name, sh, sd);
        }
        t->fortran_order = !c_order;
        uint64_t end;
        if (!tm__add_u64_ok((uint64_t)pt->storage_offset, (uint64_t)numel, &end) ||
            end > (uint64_t)st->numel)
            return tm__err_set(c->err, TM_E_CORRUPT, (int64_t)st->pos,
                               "%s: tensor '%s': elements [%lld, +%lld) lie outside its storage "
                               "'%s' of %lld",
                               c->path, name, (long long)pt->storage_offset, (long long)numel,
                               st->key, (long long)st->numel);
    }
    t->name = name;
    t->phys_name = name;
    t->dtype = t->phys_dtype = st->dtype;
    t->n_bytes = (uint64_t)numel * isz;
    t->file_index = r->slot;
    t->offset = r->off + (numel > 0 ? (uint64_t)pt->storage_offset * isz : 0);
    t->role = TM_ROLE_DATA;
    t->owner = -1;
    t->big_endian = c->big && isz > 1;
    return TM_OK;
}

static tm_status qbuf_put(pt_ctx *c, const void *p, size_t n, uint64_t *off) {
    if (c->qcap - c->qn < n) {
        size_t nc = c->qcap ? c->qcap * 2 : 256;
        while (nc - c->qn < n) nc *= 2;
        uint8_t *b = realloc(c->qbuf, nc);
        if (!b) return tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory");
        c->qbuf = b;
        c->qcap = nc;
    }
    *off = c->qn;
    memcpy(c->qbuf + c->qn, p, n);
    c->qn += n;
    return TM_OK;
}

/* A per-tensor scale or zero point as a 0-d tensor in the pending in-memory buffer
** (file_index -1 until the buffer becomes a map slot). */
static tm_status add_scalar(pt_ctx *c, const char *name, tm_dtype dt, const void *bytes,
                            tm_tensor_role role, int64_t owner, int64_t *idx) {
    tm_tensor t;
    memset(&t, 0, sizeof t);
    uint64_t off = 0;
    tm_status s = qbuf_put(c, bytes, (size_t)itemsize(dt), &off);
    if (s) return s;
    t.name = t.phys_name = name;
    t.dtype = t.phys_dtype = dt;
    t.n_bytes = itemsize(dt);
    t.file_index = -1;
    t.offset = off;
    t.role = role;
    t.owner = owner;
    return tm__file_add_tensor(c->f, &t, idx, c->err);
}

static tm_status add_param_tensor(pt_ctx *c, const char *qname, const char *suffix, const pv *v,
                                  tm_tensor_role role, int64_t owner, int64_t want, int64_t *idx) {
    char *nm = tm__aprintf("%s.%s", qname, suffix);
    if (!nm) return tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory");
    tm_tensor t;
    tm_status s = place(c, nm, v->t, &t);
    if (!s && (v->t->qscheme || t.ndim != 1 || t.shape[0] != want || t.fortran_order ||
               (t.dtype != TM_F64 && t.dtype != TM_F32 && role == TM_ROLE_SCALE) ||
               (t.dtype != TM_I64 && t.dtype != TM_I32 && role == TM_ROLE_ZERO_POINT)))
        s = tm__err_set(c->err, TM_E_CORRUPT, (int64_t)v->pos,
                        "%s: tensor '%s': %s must be a 1-D float (scales) or integer (zero points) "
                        "tensor of %lld values",
                        c->path, qname, suffix, (long long)want);
    if (!s) {
        t.role = role;
        t.owner = owner;
        s = tm__file_add_tensor(c->f, &t, idx, c->err);
    }
    free(nm);
    return s;
}

static tm_status add_tensor(pt_ctx *c, const char *name, const pv *v) {
    const pt_tensor *pt = v->t;
    tm_tensor t;
    tm_status s = place(c, name, pt, &t);
    if (s) return s;
    if (!pt->qscheme) return tm__file_add_tensor(c->f, &t, NULL, c->err);
    if (t.big_endian || t.fortran_order)
        return tm__err_set(c->err, TM_E_UNSUPPORTED, (int64_t)v->pos,
                           "%s: tensor '%s': quantized tensor stored %s", c->path, name,
                           t.big_endian ? "big-endian" : "column-major");
    int64_t ci, si, zi;
    if ((s = tm__file_add_tensor(c->f, &t, &ci, c->err))) return s;
    tm_qtensor q;
    memset(&q, 0, sizeof q);
    q.code_dtype = t.dtype;
    q.qmin = t.dtype == TM_I8 ? -128 : t.dtype == TM_U8 ? 0 : INT32_MIN;
    q.qmax = t.dtype == TM_I8 ? 127 : t.dtype == TM_U8 ? 255 : INT32_MAX;
    q.packing.container = t.dtype;
    q.packing.bits = (int)itemsize(t.dtype) * 8;
    q.packing.codes_per_container = 1;
    q.packing.packed_axis = -1;
    q.packing.lsb_first = 1;
    q.codes_tensor = ci;
    q.g_idx_tensor = -1;
    if (pt->qscheme == PT_QS_PER_TENSOR_AFFINE) {
        /* torch dequantizes per-tensor qtensors as float(scale) * (q - zero_point) */
        float sc = (float)pt->scale;
        int64_t zp = pt->zero_point;
        char *sn = tm__aprintf("%s.q_scale", name), *zn = tm__aprintf("%s.q_zero_point", name);
        if (!sn || !zn) s = tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory");
        if (!s) s = add_scalar(c, sn, TM_F32, &sc, TM_ROLE_SCALE, ci, &si);
        if (!s) s = add_scalar(c, zn, TM_I64, &zp, TM_ROLE_ZERO_POINT, ci, &zi);
        free(sn);
        free(zn);
        if (s) return s;
        q.gran.kind = TM_GRAN_TENSOR;
        q.layout = "pytorch/per_tensor_affine";
    } else {
        if (pt->axis < 0 || pt->axis >= pt->ndim)
            return tm__err_set(c->err, TM_E_CORRUPT, (int64_t)v->pos,
                               "%s: tensor '%s': per-channel axis %lld outside its %d dims",
                               c->path, name, (long long)pt->axis, pt->ndim);
        int64_t want = pt->shape[pt->axis];
        if ((s = add_param_tensor(c, name, "q_per_channel_scales", pt->scales, TM_ROLE_SCALE, ci,
                                  want, &si)))
            return s;
        if ((s = add_param_tensor(c, name, "q_per_channel_zero_points", pt->zero_points,
                                  TM_ROLE_ZERO_POINT, ci, want, &zi)))
            return s;
        q.gran.kind = TM_GRAN_CHANNEL;
        q.gran.axis = (int)pt->axis;
        q.layout = "pytorch/per_channel_affine";
    }
    q.scale_tensor = si;
    q.zero_point_tensor = zi;
    const tm_tensor *zt = tm_file_tensor(c->f, zi);
    q.zp_packing.container = zt->dtype;
    q.zp_packing.bits = (int)itemsize(zt->dtype) * 8;
    q.zp_packing.codes_per_container = 1;
    q.zp_packing.packed_axis = -1;
    q.zp_packing.lsb_first = 1;
    /* symmetric when every zero point is 0, as for ONNX (torch stores per_channel_symmetric
    ** observers' qparams as per_channel_affine with zero points 0) */
    const void *zb = NULL;
    if (q.gran.kind == TM_GRAN_TENSOR) q.symmetric = pt->zero_point == 0;
    else if (tm_tensor_data(c->f, zi, 0, zt->n_bytes, &zb, NULL) == TM_OK) {
        const uint8_t *z8 = zb;
        q.symmetric = 1;
        for (uint64_t k = 0; k < zt->n_bytes && q.symmetric; k++) q.symmetric = z8[k] == 0;
    }
    return tm__file_set_quant(c->f, ci, &q, c->err);
}

static char *join_name(const char *prefix, const char *key, size_t kl) {
    if ((prefix ? strlen(prefix) : 0) + kl + 1 > PT_MAX_NAME) return NULL;
    if (!prefix || !*prefix) return tm__strndup(key, kl);
    return tm__aprintf("%s.%.*s", prefix, (int)kl, key);
}

static tm_status walk(pt_ctx *c, const pv *v, const char *prefix, int depth) {
    if (depth > PT_MAX_DEPTH)
        return tm__err_set(c->err, TM_E_LIMIT, (int64_t)v->pos,
                           "%s: '%s': objects nested deeper than %d", c->path, prefix, PT_MAX_DEPTH);
    if (++c->visits > PT_MAX_VISITS)
        return tm__err_set(c->err, TM_E_LIMIT, (int64_t)v->pos,
                           "%s: the pickled object has more than %d values to walk", c->path,
                           PT_MAX_VISITS);
    const char *pname = prefix && *prefix ? prefix : "<root>";
    char buf[64];
    tm_status s = TM_OK;
    switch (v->kind) {
    case PV_DICT:
        for (int64_t k = 0; k + 1 < v->n && !s; k += 2) {
            const pv *key = v->items[k];
            char *nm = NULL;
            if (key->kind == PV_STR) {
                if (memchr(key->s, 0, key->slen))
                    return tm__err_set(c->err, TM_E_CORRUPT, (int64_t)key->pos,
                                       "%s: '%s': a key holds a NUL byte", c->path, pname);
                nm = join_name(prefix, key->s, key->slen);
            } else if (key->kind == PV_INT) {
                snprintf(buf, sizeof buf, "%lld", (long long)key->i);
                nm = join_name(prefix, buf, strlen(buf));
            } else {
                continue; /* keys that are not names (tuples, ...) hold no state_dict entries */
            }
            if (!nm)
                return tm__err_set(c->err, TM_E_LIMIT, (int64_t)key->pos,
                                   "%s: '%s': a name longer than %d bytes (or out of memory)",
                                   c->path, pname, PT_MAX_NAME);
            s = walk(c, v->items[k + 1], nm, depth + 1);
            free(nm);
        }
        return s;
    case PV_TUPLE:
    case PV_LIST:
        if (prefix && tm__ends_with(prefix, "._packed_params._packed_params") && v->n >= 1 &&
            v->n <= 2 && v->items[0]->kind == PV_TENSOR) {
            /* a dynamically / statically quantized Linear: (weight, bias or None) */
            size_t bl = strlen(prefix) - strlen("._packed_params._packed_params");
            for (int64_t k = 0; k < v->n && !s; k++) {
                if (v->items[k]->kind != PV_TENSOR) continue;
                char *nm = tm__aprintf("%.*s.%s", (int)bl, prefix, k ? "bias" : "weight");
                if (!nm) return tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory");
                s = add_tensor(c, nm, v->items[k]);
                free(nm);
            }
            return s;
        }
        for (int64_t k = 0; k < v->n && !s; k++) {
            snprintf(buf, sizeof buf, "%lld", (long long)k);
            char *nm = join_name(prefix, buf, strlen(buf));
            if (!nm)
                return tm__err_set(c->err, TM_E_LIMIT, (int64_t)v->pos,
                                   "%s: '%s': a name longer than %d bytes (or out of memory)",
                                   c->path, pname, PT_MAX_NAME);
            s = walk(c, v->items[k], nm, depth + 1);
            free(nm);
        }
        return s;
    case PV_TENSOR:
        return add_tensor(c, pname, v);
    case PV_INT: snprintf(buf, sizeof buf, "%lld", (long long)v->i); break;
    case PV_BOOL: snprintf(buf, sizeof buf, "%s", v->i ? "True" : "False"); break;
    case PV_FLOAT: /* the shortest text that reads back as the same double, like Python's repr */
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(buf, sizeof buf, "%.*g", prec, v->d);
            if (strtod(buf, NULL) == v->d || isnan(v->d)) break;
        }
        break;
    case PV_STR: {
        if (!prefix || !*prefix || memchr(v->s, 0, v->slen)) return TM_OK;
        char *val = tm__strndup(v->s, v->slen > 1024 ? 1024 : v->slen);
        if (!val) return tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory");
        s = tm__file_add_meta(c->f, prefix, val, c->err);
        free(val);
        return s;
    }
    case PV_GLOBAL:
        if (v->i != PT_G_DTYPE) return TM_OK;
        snprintf(buf, sizeof buf, "torch.%.*s", (int)v->slen, v->s);
        break;
    default:
        return TM_OK; /* None, bytes, big ints, bare storages: no tensor, no metadata */
    }
    if (!prefix || !*prefix) return TM_OK;
    return tm__file_add_meta(c->f, prefix, buf, c->err);
}

/* Walk root, then turn the pending per-tensor parameters into an in-memory map slot. */
static tm_status build(pt_ctx *c, const pv *root) {
    tm_status s = walk(c, root, "", 0);
    if (!s && c->qn) {
        char *nm = tm__aprintf("%s (quantization parameters, in memory)", c->path);
        int slot = -1;
        uint8_t *b = c->qbuf;
        c->qbuf = NULL;
        if (!nm) { free(b); return tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory"); }
        s = tm__file_add_buffer_owned(c->f, nm, b, c->qn, &slot, c->err);
        free(nm);
        for (int64_t i = 0; !s && i < c->f->n_tensors; i++)
            if (c->f->tensors[i].file_index == -1) c->f->tensors[i].file_index = slot;
    }
    return s;
}

static void ctx_free(pt_ctx *c) {
    json_decref(c->res_map);
    json_decref(c->members);
    free(c->res);
    free(c->qbuf);
}

/* ---- zip ----------------------------------------------------------------------------------- */

tm_status tm__pt_zip_load(tm_file *f, int mi, tm__zip *z, const char *pkl_name,
                          const tm_open_params *p, tm_err *err) {
    (void)p;
    f->format = TM_FMT_PT;
    const char *path = f->maps[mi].path;
    size_t sl = strlen(pkl_name) - strlen("data.pkl");
    char *stem = tm__strndup(pkl_name, sl);
    char *bo_name = tm__aprintf("%sbyteorder", stem ? stem : "");
    pt_arena *a = pt_arena_new();
    pt_ctx c = {0};
    c.f = f; c.path = path; c.z = z; c.stem = stem; c.mi = mi; c.err = err;
    uint8_t *pkl_mem = NULL;
    tm_status s = (!stem || !bo_name || !a) ? tm__err_set(err, TM_E_NOMEM, -1, "out of memory")
                                            : TM_OK;
    int64_t bo = s ? -1 : tm__zip_find(z, bo_name);
    if (!s && bo >= 0) {
        char text[16] = {0};
        const tm__zip_entry *e = &z->e[bo];
        if (e->size > 8)
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)e->lho, "%s: '%s' is %llu bytes, not "
                            "'little' or 'big'", path, bo_name, (unsigned long long)e->size);
        else if (e->method != 0)
            s = tm__zip_inflate(z, bo, text, err);
        else if (e->size != e->comp_size)
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)e->lho, "%s: stored member '%s' declares %llu bytes but "
                            "holds %llu", path, bo_name, (unsigned long long)e->size, (unsigned long long)e->comp_size);
        else if (!(s = tm__zip_check_stored(z, bo, err)))
            memcpy(text, z->base + e->data_offset, (size_t)e->size);
        if (!s && strcmp(text, "little") == 0) c.big = 0;
        else if (!s && strcmp(text, "big") == 0) c.big = 1;
        else if (!s)
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)e->lho, "%s: '%s' says '%s', not 'little' "
                            "or 'big'", path, bo_name, text);
    }
    int64_t pi = s ? -1 : tm__zip_find(z, pkl_name);
    const uint8_t *pk = NULL;
    uint64_t pn = 0, pbase = 0;
    if (!s) {
        const tm__zip_entry *e = &z->e[pi];
        pn = e->size;
        if (e->method == 0 && e->size == e->comp_size) {
            s = tm__zip_check_stored(z, pi, err);
            pk = z->base + e->data_offset;
            pbase = e->data_offset;
        } else if (e->size > PT_MAX_PICKLE) {
            s = tm__err_set(err, TM_E_LIMIT, (int64_t)e->lho, "%s: '%s' inflates to %llu bytes, "
                            "more than the limit of %llu", path, pkl_name,
                            (unsigned long long)e->size, (unsigned long long)PT_MAX_PICKLE);
        } else if (!(pkl_mem = malloc(e->size ? (size_t)e->size : 1))) {
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        } else if (!(s = tm__zip_inflate(z, pi, pkl_mem, err))) {
            pk = pkl_mem;
        }
    }
    pv *root = NULL;
    if (!s) {
        char *where = tm__aprintf("%s:%s", path, pkl_name);
        uint64_t pos = 0;
        if (!where) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        else s = pt_unpickle(a, pk, pn, &pos, 0, where, pbase, &root, err);
        free(where);
    }
    if (!s) s = build(&c, root);
    ctx_free(&c);
    pt_arena_free(a);
    free(pkl_mem);
    free(stem);
    free(bo_name);
    return s;
}

/* ---- legacy -------------------------------------------------------------------------------- */

static const uint8_t legacy_magic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

int tm__pt_legacy_probe(const uint8_t *head, size_t n, const char *path) {
    (void)path;
    return n >= 14 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5 && head[2] == 0x8a &&
           head[3] == 10 && memcmp(head + 4, legacy_magic, 10) == 0;
}

static tm_status legacy_load(tm_file *f, int mi, tm_err *err) {
    const tm__map *m = &f->maps[mi];
    const char *path = m->path;
    pt_arena *a = pt_arena_new();
    pt_ctx c = {0};
    c.f = f; c.path = path; c.mi = mi; c.err = err;
    if (!a) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    uint64_t pos = 0;
    pv *magic = NULL, *proto = NULL, *info = NULL, *root = NULL, *keys = NULL;
    tm_status s = pt_unpickle(a, m->base, m->size, &pos, 1, path, 0, &magic, err);
    if (!s && (magic->kind != PV_BIGINT || magic->slen != 10 || memcmp(magic->s, legacy_magic, 10)))
        s = tm__err_set(err, TM_E_CORRUPT, 0, "%s: not a PyTorch legacy checkpoint (bad magic "
                        "number)", path);
    uint64_t p1 = pos;
    if (!s) s = pt_unpickle(a, m->base, m->size, &pos, 1, path, 0, &proto, err);
    if (!s && (proto->kind != PV_INT || proto->i != 1001))
        s = tm__err_set(err, TM_E_UNSUPPORTED, (int64_t)p1, "%s: legacy protocol version %lld "
                        "(1001 is read)", path, proto->kind == PV_INT ? (long long)proto->i : -1LL);
    p1 = pos;
    if (!s) s = pt_unpickle(a, m->base, m->size, &pos, 1, path, 0, &info, err);
    if (!s && info->kind != PV_DICT)
        s = tm__err_set(err, TM_E_CORRUPT, (int64_t)p1, "%s: legacy sys-info is not a dict", path);
    for (int64_t k = 0; !s && k + 1 < info->n; k += 2) {
        const pv *key = info->items[k], *val = info->items[k + 1];
        if (key->kind == PV_STR && key->slen == 13 && !memcmp(key->s, "little_endian", 13))
            c.big = val->kind == PV_BOOL && val->i == 0;
    }
    if (!s) s = pt_unpickle(a, m->base, m->size, &pos, 1, path, 0, &root, err);
    p1 = pos;
    if (!s) s = pt_unpickle(a, m->base, m->size, &pos, 1, path, 0, &keys, err);
    if (!s && keys->kind != PV_LIST)
        s = tm__err_set(err, TM_E_CORRUPT, (int64_t)p1, "%s: legacy storage key list is not a list",
                        path);
    /* the raw storages, in key-list order; key -> storage through a hash */
    json_t *by_key = s ? NULL : json_object();
    const pv **sts = NULL;
    int64_t n_st = 0;
    for (const pv *q = pt_arena_storages(a); !s && q; q = q->next) n_st++;
    if (!s && (!by_key || !(sts = tm__malloc_n(n_st ? (size_t)n_st : 1, sizeof *sts))))
        s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    n_st = 0;
    for (const pv *q = pt_arena_storages(a); !s && q; q = q->next) {
        sts[n_st] = q;
        if (json_object_set_new_nocheck(by_key, q->key, json_integer(n_st++)) != 0)
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    for (int64_t k = 0; !s && k < keys->n; k++) {
        const pv *key = keys->items[k];
        const pv *st = NULL;
        if (key->kind == PV_STR && key->slen < 256 && !memchr(key->s, 0, key->slen)) {
            char kb[256];
            memcpy(kb, key->s, key->slen);
            kb[key->slen] = 0;
            json_t *j = json_object_get(by_key, kb);
            if (j) st = sts[json_integer_value(j)];
        }
        if (!st) {
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)key->pos, "%s: storage list entry %lld "
                            "names no storage of the object", path, (long long)k);
            break;
        }
        if (m->size - pos < 8) {
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)pos, "%s: storage '%s': truncated before "
                            "its element count (byte %llu)", path, st->key, (unsigned long long)pos);
            break;
        }
        uint64_t cnt = 0;
        for (int b = 0; b < 8; b++)
            cnt |= (uint64_t)m->base[pos + (uint64_t)(c.big ? 7 - b : b)] << (8 * b);
        uint64_t bytes;
        if (!tm__mul_u64_ok(cnt, itemsize(st->dtype), &bytes) || bytes > m->size - pos - 8) {
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)pos, "%s: storage '%s': %llu elements run "
                            "past the end of the file (byte %llu)", path, st->key,
                            (unsigned long long)cnt, (unsigned long long)pos);
            break;
        }
        if (res_find(&c, st->key)) {
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)pos, "%s: storage '%s' stored twice", path,
                            st->key);
            break;
        }
        s = res_add(&c, st->key, mi, pos + 8, bytes);
        pos += 8 + bytes;
    }
    json_decref(by_key);
    free(sts);
    if (!s) s = build(&c, root);
    ctx_free(&c);
    pt_arena_free(a);
    return s;
}

/* legacy_load as a tm__member_load_fn (no ctx). */
static tm_status legacy_load_member(tm_file *f, int mi, void *ctx, tm_err *err) {
    (void)ctx;
    return legacy_load(f, mi, err);
}

tm_status tm__pt_legacy_open(const char *path, const tm_open_params *p, tm_file **out,
                             tm_err *err) {
    (void)p;
    return tm__file_open_one(TM_FMT_PT, path, NULL, 0, NULL, legacy_load_member, NULL, out, err);
}

/* Buffer entry point: a legacy (non-zip) stream (a zip checkpoint goes through
** tm_open_buffer's table to zipckpt.c, which calls tm__pt_zip_load). */
tm_status tm__pt_open_buffer(const void *data, size_t n, const char *name,
                             const tm_open_params *p, tm_file **out, tm_err *err) {
    (void)p;
    return tm__file_open_one(TM_FMT_PT, NULL, data, n, name, legacy_load_member, NULL, out, err);
}
