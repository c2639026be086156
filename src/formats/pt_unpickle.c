/*
** pt_unpickle.c: a restricted, inert unpickler for PyTorch checkpoints.
**
** Pickle is a small stack machine (Python's Lib/pickletools.py documents every opcode). A
** general unpickler imports modules and calls functions named by the stream, so loading an
** untrusted pickle runs arbitrary code. This one never does: GLOBAL and STACK_GLOBAL resolve
** only the names of an allow-list to tags (pt.h pt_global), REDUCE/NEWOBJ "call" only those
** tags, and the result of each is plain data (a storage reference, a tensor description, an
** empty dict). Any other global is refused with TM_E_UNSUPPORTED naming it; any opcode a
** state_dict does not need is refused naming it. The same policy as PyTorch's own
** weights_only unpickler (torch/_weights_only_unpickler.py), implemented from the opcode
** descriptions.
**
** Opcodes read (argument encodings are little-endian unless said):
**   PROTO 0x80 u8 · FRAME 0x95 u64 (ignored) · STOP '.' · MARK '(' · POP '0' · POP_MARK '1'
**   DUP '2' · NONE 'N' · NEWTRUE 0x88 · NEWFALSE 0x89 · BININT 'J' i32 · BININT1 'K' u8
**   BININT2 'M' u16 · LONG1 0x8a u8 n + n bytes · LONG4 0x8b i32 n + n bytes (two's complement)
**   BINFLOAT 'G' f64 big-endian · BINUNICODE 'X' u32 · SHORT_BINUNICODE 0x8c u8 ·
**   BINUNICODE8 0x8d u64 · BINSTRING 'T' i32 · SHORT_BINSTRING 'U' u8 · BINBYTES 'B' u32 ·
**   SHORT_BINBYTES 'C' u8 · EMPTY_TUPLE ')' · TUPLE 't' · TUPLE1-3 0x85-0x87 · EMPTY_LIST ']'
**   LIST 'l' · APPEND 'a' · APPENDS 'e' · EMPTY_DICT '}' · DICT 'd' · SETITEM 's' ·
**   SETITEMS 'u' · BINPUT 'q' u8 · LONG_BINPUT 'r' u32 · MEMOIZE 0x94 · BINGET 'h' u8 ·
**   LONG_BINGET 'j' u32 · GLOBAL 'c' "module\nname\n" · STACK_GLOBAL 0x93 · REDUCE 'R' ·
**   NEWOBJ 0x81 · BUILD 'b' · BINPERSID 'Q'
** The stack, the memo, the MARK depth and the number of values are bounded (pt.h).
*/
#include "pt.h"

#include <stdio.h>

struct pt_arena {
    pv     **blocks;   /* every value and every pt_tensor / items array, freed together */
    int64_t  n, cap;
    int64_t  n_values;
    pv      *storages; /* chain through pv.next */
};

pv *pt_arena_storages(const pt_arena *a) { return a->storages; }

pt_arena *pt_arena_new(void) { return calloc(1, sizeof(pt_arena)); }

void pt_arena_free(pt_arena *a) {
    if (!a) return;
    for (int64_t i = 0; i < a->n; i++) free(a->blocks[i]);
    free(a->blocks);
    free(a);
}

static void *arena_alloc(pt_arena *a, size_t size) {
    if (a->n == a->cap) {
        int64_t nc = a->cap ? a->cap * 2 : 256;
        pv **b = realloc(a->blocks, (size_t)nc * sizeof *b);
        if (!b) return NULL;
        a->blocks = b;
        a->cap = nc;
    }
    void *p = calloc(1, size);
    if (p) a->blocks[a->n++] = p;
    return p;
}

/* Unpickler state. */
typedef struct up {
    pt_arena      *a;
    const uint8_t *b;
    uint64_t       n, pos, op_pos;
    int            legacy;
    const char    *where;
    uint64_t       base;
    pv           **stack; int64_t sp, scap;
    int64_t       *marks; int64_t nm, mcap;
    pv           **memo;  int64_t memo_cap, memo_count; /* count: slots written (MEMOIZE) */
    tm_err        *err;
} up;

#define UERR(code, ...) up_err(u, code, __VA_ARGS__)

static tm_status up_err(up *u, tm_status code, const char *fmt, ...) TM_PRINTF(3, 4);
static tm_status up_err(up *u, tm_status code, const char *fmt, ...) {
    char what[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tm__err_set(u->err, code, (int64_t)(u->base + u->op_pos), "%s: pickle: %s (byte %llu)",
                       u->where, what, (unsigned long long)(u->base + u->op_pos));
}

static pv *newv(up *u, pv_kind k) {
    if (u->a->n_values >= PT_MAX_VALUES) return NULL;
    pv *v = arena_alloc(u->a, sizeof *v);
    if (v) {
        v->kind = k;
        v->pos = u->base + u->op_pos;
        u->a->n_values++;
    }
    return v;
}

static tm_status oom_or_limit(up *u) {
    if (u->a->n_values >= PT_MAX_VALUES)
        return UERR(TM_E_LIMIT, "more than %d values", PT_MAX_VALUES);
    return UERR(TM_E_NOMEM, "out of memory");
}

static tm_status push(up *u, pv *v) {
    if (!v) return oom_or_limit(u);
    if (u->sp == u->scap) {
        if (u->scap >= PT_MAX_STACK) return UERR(TM_E_LIMIT, "stack deeper than %d", PT_MAX_STACK);
        int64_t nc = u->scap ? u->scap * 2 : 64;
        pv **s = realloc(u->stack, (size_t)nc * sizeof *s);
        if (!s) return UERR(TM_E_NOMEM, "out of memory");
        u->stack = s;
        u->scap = nc;
    }
    u->stack[u->sp++] = v;
    return TM_OK;
}

/* Values above the innermost MARK: [*first, sp). */
static tm_status mark_base(up *u, int64_t *first) {
    if (u->nm == 0) return UERR(TM_E_CORRUPT, "opcode needs a MARK and there is none");
    *first = u->marks[--u->nm];
    if (*first > u->sp) return UERR(TM_E_CORRUPT, "MARK above the stack");
    return TM_OK;
}

static tm_status pop(up *u, pv **v) {
    int64_t floor = u->nm ? u->marks[u->nm - 1] : 0;
    if (u->sp <= floor) return UERR(TM_E_CORRUPT, "stack underflow");
    *v = u->stack[--u->sp];
    return TM_OK;
}

static tm_status top(up *u, pv **v) {
    int64_t floor = u->nm ? u->marks[u->nm - 1] : 0;
    if (u->sp <= floor) return UERR(TM_E_CORRUPT, "stack underflow");
    *v = u->stack[u->sp - 1];
    return TM_OK;
}

static tm_status need(up *u, uint64_t k) {
    if (u->n - u->pos < k)
        return UERR(TM_E_CORRUPT, "opcode argument of %llu bytes runs past the end of the pickle",
                    (unsigned long long)k);
    return TM_OK;
}

static tm_status items_add(up *u, pv *c, pv *x) {
    if (c->n == c->cap) {
        int64_t nc = c->cap ? c->cap * 2 : 8;
        pv **it = arena_alloc(u->a, (size_t)nc * sizeof *it);
        if (!it) return UERR(TM_E_NOMEM, "out of memory");
        if (c->n) memcpy(it, c->items, (size_t)c->n * sizeof *it);
        c->items = it; /* the old array stays in the arena until the end */
        c->cap = nc;
    }
    c->items[c->n++] = x;
    return TM_OK;
}

/* APPENDS (kind PV_LIST: the list below the innermost MARK takes the values above it) and
** SETITEMS (PV_DICT: the dict takes them as key, value pairs); op names the opcode in errors. */
static tm_status add_marked(up *u, pv_kind kind, const char *op) {
    const char *noun = kind == PV_LIST ? "list" : "dict";
    int64_t first = 0;
    tm_status s;
    if ((s = mark_base(u, &first))) return s;
    if (first == 0 || first <= (u->nm ? u->marks[u->nm - 1] : 0))
        return UERR(TM_E_CORRUPT, "%s without a %s below its MARK", op, noun);
    if (kind == PV_DICT && (u->sp - first) % 2) return UERR(TM_E_CORRUPT, "%s of an odd number of items", op);
    pv *x = u->stack[first - 1];
    if (x->kind != kind)
        return UERR(TM_E_UNSUPPORTED, "%s %s something that is not a %s", op, kind == PV_LIST ? "to" : "on", noun);
    for (int64_t i = first; i < u->sp; i++)
        if ((s = items_add(u, x, u->stack[i]))) return s;
    u->sp = first;
    return TM_OK;
}

/* A tuple of the `k` values [first, first+k) of the stack, which are then dropped. */
static tm_status make_tuple(up *u, int64_t first) {
    pv *t = newv(u, PV_TUPLE);
    if (!t) return oom_or_limit(u);
    for (int64_t i = first; i < u->sp; i++) {
        tm_status s = items_add(u, t, u->stack[i]);
        if (s) return s;
    }
    u->sp = first;
    return push(u, t);
}

static tm_status memo_put(up *u, uint64_t idx, pv *v) {
    if (idx >= PT_MAX_MEMO) return UERR(TM_E_LIMIT, "memo index %llu beyond the limit of %d",
                                        (unsigned long long)idx, PT_MAX_MEMO);
    if ((int64_t)idx >= u->memo_cap) {
        int64_t nc = u->memo_cap ? u->memo_cap : 64;
        while (nc <= (int64_t)idx) nc *= 2;
        pv **m = realloc(u->memo, (size_t)nc * sizeof *m);
        if (!m) return UERR(TM_E_NOMEM, "out of memory");
        memset(m + u->memo_cap, 0, (size_t)(nc - u->memo_cap) * sizeof *m);
        u->memo = m;
        u->memo_cap = nc;
    }
    if (!u->memo[idx]) u->memo_count++;
    u->memo[idx] = v;
    return TM_OK;
}

static tm_status memo_get(up *u, uint64_t idx) {
    if ((int64_t)idx >= u->memo_cap || idx >= PT_MAX_MEMO || !u->memo[idx])
        return UERR(TM_E_CORRUPT, "memo slot %llu read before it was written",
                    (unsigned long long)idx);
    return push(u, u->memo[idx]);
}

/* ---- the allow-list ------------------------------------------------------------------------- */

static const struct { const char *name; tm_dtype dt; int q; } storage_types[] = {
    {"FloatStorage", TM_F32, 0},  {"DoubleStorage", TM_F64, 0}, {"HalfStorage", TM_F16, 0},
    {"BFloat16Storage", TM_BF16, 0}, {"LongStorage", TM_I64, 0}, {"IntStorage", TM_I32, 0},
    {"ShortStorage", TM_I16, 0},  {"CharStorage", TM_I8, 0},    {"ByteStorage", TM_U8, 0},
    {"BoolStorage", TM_BOOL, 0},  {"QInt8Storage", TM_I8, 1},   {"QUInt8Storage", TM_U8, 1},
    {"QInt32Storage", TM_I32, 1},
};

static const struct { const char *name; tm_dtype dt; int q; } dtypes[] = {
    {"float32", TM_F32, 0}, {"float", TM_F32, 0},   {"float64", TM_F64, 0}, {"double", TM_F64, 0},
    {"float16", TM_F16, 0}, {"half", TM_F16, 0},    {"bfloat16", TM_BF16, 0}, {"int64", TM_I64, 0},
    {"long", TM_I64, 0},    {"int32", TM_I32, 0},   {"int", TM_I32, 0},     {"int16", TM_I16, 0},
    {"short", TM_I16, 0},   {"int8", TM_I8, 0},     {"uint8", TM_U8, 0},    {"bool", TM_BOOL, 0},
    {"qint8", TM_I8, 1},    {"quint8", TM_U8, 1},   {"qint32", TM_I32, 1},
};

/* Resolve module.name, or refuse it. */
static tm_status resolve_global(up *u, const char *mod, size_t ml, const char *name, size_t nl) {
    char m[128], n[128];
    if (ml >= sizeof m || nl >= sizeof n || memchr(mod, 0, ml) || memchr(name, 0, nl))
        return UERR(TM_E_UNSUPPORTED, "global '%.*s.%.*s' is not in the allow-list; nothing is "
                    "imported or run", (int)(ml > 100 ? 100 : ml), mod, (int)(nl > 100 ? 100 : nl), name);
    memcpy(m, mod, ml); m[ml] = 0;
    memcpy(n, name, nl); n[nl] = 0;
    pv *v = newv(u, PV_GLOBAL);
    if (!v) return oom_or_limit(u);
    if (!strcmp(m, "collections") && !strcmp(n, "OrderedDict")) v->i = PT_G_ORDERED_DICT;
    else if (!strcmp(m, "torch._utils") && !strcmp(n, "_rebuild_tensor")) v->i = PT_G_REBUILD_TENSOR;
    else if (!strcmp(m, "torch._utils") && !strcmp(n, "_rebuild_tensor_v2")) v->i = PT_G_REBUILD_TENSOR_V2;
    else if (!strcmp(m, "torch._utils") && !strcmp(n, "_rebuild_parameter")) v->i = PT_G_REBUILD_PARAMETER;
    else if (!strcmp(m, "torch._utils") && !strcmp(n, "_rebuild_parameter_with_state"))
        v->i = PT_G_REBUILD_PARAMETER_ST;
    else if (!strcmp(m, "torch._utils") && !strcmp(n, "_rebuild_qtensor")) v->i = PT_G_REBUILD_QTENSOR;
    else if (!strcmp(m, "torch") && !strcmp(n, "per_tensor_affine")) {
        v->i = PT_G_QSCHEME; v->sub = PT_QS_PER_TENSOR_AFFINE;
    } else if (!strcmp(m, "torch") && !strcmp(n, "per_channel_affine")) {
        v->i = PT_G_QSCHEME; v->sub = PT_QS_PER_CHANNEL_AFFINE;
    } else if (!strcmp(m, "torch")) {
        for (size_t k = 0; k < sizeof storage_types / sizeof storage_types[0] && !v->i; k++)
            if (!strcmp(n, storage_types[k].name)) {
                v->i = PT_G_STORAGE; v->dtype = storage_types[k].dt; v->qdtype = storage_types[k].q;
            }
        for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0] && !v->i; k++)
            if (!strcmp(n, dtypes[k].name)) {
                v->i = PT_G_DTYPE; v->dtype = dtypes[k].dt; v->qdtype = dtypes[k].q;
                v->s = dtypes[k].name; /* static: rendered as metadata "torch.<name>" */
                v->slen = strlen(dtypes[k].name);
            }
    }
    if (!v->i)
        return UERR(TM_E_UNSUPPORTED, "global '%s.%s' is not in the allow-list; nothing is "
                    "imported or run", m, n);
    return push(u, v);
}

/* ---- rebuilding (data only) ---------------------------------------------------------------- */

static int as_int(const pv *v, int64_t *out) {
    if (!v || (v->kind != PV_INT && v->kind != PV_BOOL)) return 0;
    *out = v->i;
    return 1;
}

static int as_float(const pv *v, double *out) {
    if (v && v->kind == PV_FLOAT) { *out = v->d; return 1; }
    int64_t i;
    if (as_int(v, &i)) { *out = (double)i; return 1; }
    return 0;
}

/* A tuple of ints of at most TM_MAX_DIMS items. */
static tm_status int_tuple(up *u, const pv *v, const char *what, int64_t *out, int *n) {
    if (!v || (v->kind != PV_TUPLE && v->kind != PV_LIST))
        return UERR(TM_E_CORRUPT, "tensor %s is not a tuple", what);
    if (v->n > TM_MAX_DIMS)
        return UERR(TM_E_LIMIT, "tensor has %lld dimensions, more than %d", (long long)v->n,
                    TM_MAX_DIMS);
    for (int64_t k = 0; k < v->n; k++)
        if (!as_int(v->items[k], &out[k]))
            return UERR(TM_E_CORRUPT, "tensor %s[%lld] is not an integer", what, (long long)k);
    *n = (int)v->n;
    return TM_OK;
}

/* storage, storage_offset, size, stride: the common head of the rebuild functions. */
static tm_status tensor_head(up *u, const pv *args, pt_tensor *t) {
    if (args->n < 4) return UERR(TM_E_CORRUPT, "tensor rebuild with %lld arguments", (long long)args->n);
    if (args->items[0]->kind != PV_STORAGE)
        return UERR(TM_E_CORRUPT, "tensor rebuild: first argument is not a storage");
    t->storage = args->items[0];
    if (!as_int(args->items[1], &t->storage_offset) || t->storage_offset < 0)
        return UERR(TM_E_CORRUPT, "tensor rebuild: bad storage offset");
    int nd = 0, ns = 0;
    tm_status s = int_tuple(u, args->items[2], "size", t->shape, &nd);
    if (!s) s = int_tuple(u, args->items[3], "stride", t->stride, &ns);
    if (s) return s;
    if (nd != ns) return UERR(TM_E_CORRUPT, "tensor size has %d dims but stride %d", nd, ns);
    for (int d = 0; d < nd; d++)
        if (t->shape[d] < 0 || t->stride[d] < 0)
            return UERR(TM_E_CORRUPT, "tensor has a negative size or stride");
    t->ndim = nd;
    return TM_OK;
}

static tm_status call(up *u, pv *fn, pv *args) {
    if (fn->kind != PV_GLOBAL) return UERR(TM_E_UNSUPPORTED, "REDUCE of something that is not a global");
    if (!args || args->kind != PV_TUPLE) return UERR(TM_E_CORRUPT, "REDUCE arguments are not a tuple");
    switch ((pt_global)fn->i) {
    case PT_G_ORDERED_DICT: {
        pv *d = newv(u, PV_DICT);
        if (!d) return oom_or_limit(u);
        if (args->n != 0) return UERR(TM_E_UNSUPPORTED, "OrderedDict built from arguments");
        return push(u, d);
    }
    case PT_G_REBUILD_TENSOR:
    case PT_G_REBUILD_TENSOR_V2: {
        pv *v = newv(u, PV_TENSOR);
        if (!v) return oom_or_limit(u);
        v->t = arena_alloc(u->a, sizeof *v->t);
        if (!v->t) return UERR(TM_E_NOMEM, "out of memory");
        tm_status s = tensor_head(u, args, v->t);
        if (s) return s;
        if (args->items[0]->qdtype)
            return UERR(TM_E_CORRUPT, "a quantized storage rebuilt as a plain tensor");
        return push(u, v);
    }
    case PT_G_REBUILD_PARAMETER:
    case PT_G_REBUILD_PARAMETER_ST:
        if (args->n < 1 || args->items[0]->kind != PV_TENSOR)
            return UERR(TM_E_CORRUPT, "_rebuild_parameter of something that is not a tensor");
        return push(u, args->items[0]);
    case PT_G_REBUILD_QTENSOR: {
        pv *v = newv(u, PV_TENSOR);
        if (!v) return oom_or_limit(u);
        v->t = arena_alloc(u->a, sizeof *v->t);
        if (!v->t) return UERR(TM_E_NOMEM, "out of memory");
        pt_tensor *t = v->t;
        tm_status s = tensor_head(u, args, t);
        if (s) return s;
        if (!args->items[0]->qdtype)
            return UERR(TM_E_CORRUPT, "_rebuild_qtensor of a storage that is not quantized");
        if (args->n < 5 || args->items[4]->kind != PV_TUPLE || args->items[4]->n < 1 ||
            args->items[4]->items[0]->kind != PV_GLOBAL || args->items[4]->items[0]->i != PT_G_QSCHEME)
            return UERR(TM_E_UNSUPPORTED, "quantized tensor with a quantizer other than "
                        "per_tensor_affine / per_channel_affine");
        const pv *qp = args->items[4];
        t->qscheme = (int)qp->items[0]->sub;
        if (t->qscheme == PT_QS_PER_TENSOR_AFFINE) {
            if (qp->n != 3 || !as_float(qp->items[1], &t->scale) || !as_int(qp->items[2], &t->zero_point))
                return UERR(TM_E_CORRUPT, "per_tensor_affine parameters are not (scale, zero_point)");
        } else {
            if (qp->n != 4 || qp->items[1]->kind != PV_TENSOR || qp->items[2]->kind != PV_TENSOR ||
                !as_int(qp->items[3], &t->axis))
                return UERR(TM_E_CORRUPT, "per_channel_affine parameters are not "
                            "(scales, zero_points, axis)");
            t->scales = qp->items[1];
            t->zero_points = qp->items[2];
        }
        return push(u, v);
    }
    default:
        return UERR(TM_E_UNSUPPORTED, "global of kind %lld is not callable", (long long)fn->i);
    }
}

/* BINPERSID: ('storage', storage_type, key, location, numel[, view_metadata]). */
static tm_status persistent(up *u, pv *pid) {
    if (pid->kind != PV_TUPLE || pid->n < 5 || pid->items[0]->kind != PV_STR ||
        pid->items[0]->slen != 7 || memcmp(pid->items[0]->s, "storage", 7) != 0)
        return UERR(TM_E_UNSUPPORTED, "persistent id is not a ('storage', ...) tuple");
    if (u->legacy ? pid->n != 6 : pid->n != 5)
        return UERR(TM_E_CORRUPT, "storage persistent id has %lld fields", (long long)pid->n);
    pv *ty = pid->items[1], *key = pid->items[2];
    if (ty->kind != PV_GLOBAL || ty->i != PT_G_STORAGE)
        return UERR(TM_E_CORRUPT, "storage persistent id without a storage type");
    if (key->kind != PV_STR || key->slen == 0 || key->slen > 200 || memchr(key->s, 0, key->slen) ||
        memchr(key->s, '/', key->slen))
        return UERR(TM_E_CORRUPT, "storage key is not a short name");
    if (u->legacy && pid->items[5]->kind != PV_NONE)
        return UERR(TM_E_UNSUPPORTED, "legacy storage views (view_metadata)");
    pv *v = newv(u, PV_STORAGE);
    if (!v) return oom_or_limit(u);
    int64_t numel;
    if (!as_int(pid->items[4], &numel) || numel < 0)
        return UERR(TM_E_CORRUPT, "storage size is not a non-negative integer");
    char *k = arena_alloc(u->a, key->slen + 1);
    if (!k) return UERR(TM_E_NOMEM, "out of memory");
    memcpy(k, key->s, key->slen);
    v->key = k;
    v->numel = numel;
    v->dtype = ty->dtype;
    v->qdtype = ty->qdtype;
    v->next = u->a->storages;
    u->a->storages = v;
    return push(u, v);
}

/* Little-endian two's-complement integer of n bytes. */
static tm_status long_value(up *u, const uint8_t *p, uint64_t n) {
    if (n > 8) {
        pv *v = newv(u, PV_BIGINT);
        if (!v) return oom_or_limit(u);
        v->s = (const char *)p;
        v->slen = (size_t)n;
        return push(u, v);
    }
    uint64_t x = 0;
    for (uint64_t k = 0; k < n; k++) x |= (uint64_t)p[k] << (8 * k);
    if (n > 0 && n < 8 && (p[n - 1] & 0x80)) x |= ~(uint64_t)0 << (8 * n);
    pv *v = newv(u, PV_INT);
    if (!v) return oom_or_limit(u);
    v->i = (int64_t)x;
    return push(u, v);
}

static tm_status str_value(up *u, pv_kind k, uint64_t len) {
    tm_status s = need(u, len);
    if (s) return s;
    pv *v = newv(u, k);
    if (!v) return oom_or_limit(u);
    v->s = (const char *)u->b + u->pos;
    v->slen = (size_t)len;
    u->pos += len;
    return push(u, v);
}

static tm_status step(up *u, int *done) {
    tm_status s;
    u->op_pos = u->pos;
    if (u->pos >= u->n) return UERR(TM_E_CORRUPT, "pickle ends without STOP");
    uint8_t op = u->b[u->pos++];
    const uint8_t *a = u->b + u->pos;
    pv *x = NULL, *y = NULL, *z = NULL;
    int64_t first = 0;
    switch (op) {
    case 0x80: /* PROTO */
        if ((s = need(u, 1))) return s;
        if (a[0] > 5) return UERR(TM_E_UNSUPPORTED, "pickle protocol %d", a[0]);
        u->pos += 1;
        return TM_OK;
    case 0x95: /* FRAME */
        if ((s = need(u, 8))) return s;
        u->pos += 8;
        return TM_OK;
    case '.': /* STOP */
        *done = 1;
        return TM_OK;
    case '(':
        if (u->nm == PT_MAX_MARKS) return UERR(TM_E_LIMIT, "more than %d nested MARKs", PT_MAX_MARKS);
        if (u->nm == u->mcap) {
            int64_t nc = u->mcap ? u->mcap * 2 : 32;
            int64_t *m = realloc(u->marks, (size_t)nc * sizeof *m);
            if (!m) return UERR(TM_E_NOMEM, "out of memory");
            u->marks = m;
            u->mcap = nc;
        }
        u->marks[u->nm++] = u->sp;
        return TM_OK;
    case '0': return pop(u, &x);
    case '1': if ((s = mark_base(u, &first))) return s; u->sp = first; return TM_OK;
    case '2': if ((s = top(u, &x))) return s; return push(u, x);
    case 'N': return push(u, newv(u, PV_NONE));
    case 0x88: case 0x89:
        if (!(x = newv(u, PV_BOOL))) return oom_or_limit(u);
        x->i = op == 0x88;
        return push(u, x);
    case 'J': if ((s = need(u, 4))) return s; u->pos += 4; return long_value(u, a, 4);
    case 'K': if ((s = need(u, 1))) return s; u->pos += 1;
        if (!(x = newv(u, PV_INT))) return oom_or_limit(u);
        x->i = a[0];
        return push(u, x);
    case 'M': if ((s = need(u, 2))) return s; u->pos += 2;
        if (!(x = newv(u, PV_INT))) return oom_or_limit(u);
        x->i = tm__ld16(a);
        return push(u, x);
    case 0x8a: /* LONG1 */
        if ((s = need(u, 1))) return s;
        u->pos += 1;
        if ((s = need(u, a[0]))) return s;
        u->pos += a[0];
        return long_value(u, a + 1, a[0]);
    case 0x8b: { /* LONG4 */
        if ((s = need(u, 4))) return s;
        int32_t l = (int32_t)tm__ld32(a);
        if (l < 0) return UERR(TM_E_CORRUPT, "negative LONG4 length");
        u->pos += 4;
        if ((s = need(u, (uint64_t)l))) return s;
        u->pos += (uint64_t)l;
        return long_value(u, a + 4, (uint64_t)l);
    }
    case 'G': {
        if ((s = need(u, 8))) return s;
        uint64_t w = 0;
        for (int k = 0; k < 8; k++) w = (w << 8) | a[k];
        u->pos += 8;
        if (!(x = newv(u, PV_FLOAT))) return oom_or_limit(u);
        memcpy(&x->d, &w, 8);
        return push(u, x);
    }
    case 'X': if ((s = need(u, 4))) return s; u->pos += 4; return str_value(u, PV_STR, tm__ld32(a));
    case 0x8c: if ((s = need(u, 1))) return s; u->pos += 1; return str_value(u, PV_STR, a[0]);
    case 0x8d: if ((s = need(u, 8))) return s; u->pos += 8; return str_value(u, PV_STR, tm__ld64(a));
    case 'T': {
        if ((s = need(u, 4))) return s;
        int32_t l = (int32_t)tm__ld32(a);
        if (l < 0) return UERR(TM_E_CORRUPT, "negative BINSTRING length");
        u->pos += 4;
        return str_value(u, PV_STR, (uint64_t)l);
    }
    case 'U': if ((s = need(u, 1))) return s; u->pos += 1; return str_value(u, PV_STR, a[0]);
    case 'B': if ((s = need(u, 4))) return s; u->pos += 4; return str_value(u, PV_BYTES, tm__ld32(a));
    case 'C': if ((s = need(u, 1))) return s; u->pos += 1; return str_value(u, PV_BYTES, a[0]);
    case ')': return push(u, newv(u, PV_TUPLE));
    case 't': if ((s = mark_base(u, &first))) return s; return make_tuple(u, first);
    case 0x85: case 0x86: case 0x87: {
        int64_t k = op - 0x84, floor = u->nm ? u->marks[u->nm - 1] : 0;
        if (u->sp - floor < k) return UERR(TM_E_CORRUPT, "stack underflow");
        return make_tuple(u, u->sp - k);
    }
    case ']': return push(u, newv(u, PV_LIST));
    case '}': return push(u, newv(u, PV_DICT));
    case 'l': case 'd': {
        if ((s = mark_base(u, &first))) return s;
        if (op == 'd' && (u->sp - first) % 2) return UERR(TM_E_CORRUPT, "DICT of an odd number of items");
        if (!(x = newv(u, op == 'l' ? PV_LIST : PV_DICT))) return oom_or_limit(u);
        for (int64_t i = first; i < u->sp; i++)
            if ((s = items_add(u, x, u->stack[i]))) return s;
        u->sp = first;
        return push(u, x);
    }
    case 'a':
        if ((s = pop(u, &y)) || (s = top(u, &x))) return s;
        if (x->kind != PV_LIST) return UERR(TM_E_UNSUPPORTED, "APPEND to something that is not a list");
        return items_add(u, x, y);
    case 'e': return add_marked(u, PV_LIST, "APPENDS");
    case 's':
        if ((s = pop(u, &z)) || (s = pop(u, &y)) || (s = top(u, &x))) return s;
        if (x->kind != PV_DICT) return UERR(TM_E_UNSUPPORTED, "SETITEM on something that is not a dict");
        if ((s = items_add(u, x, y))) return s;
        return items_add(u, x, z);
    case 'u': return add_marked(u, PV_DICT, "SETITEMS");
    case 'q': if ((s = need(u, 1))) return s; u->pos += 1;
        if ((s = top(u, &x))) return s;
        return memo_put(u, a[0], x);
    case 'r': if ((s = need(u, 4))) return s; u->pos += 4;
        if ((s = top(u, &x))) return s;
        return memo_put(u, tm__ld32(a), x);
    case 0x94: /* MEMOIZE: the next slot is the memo's current size */
        if ((s = top(u, &x))) return s;
        return memo_put(u, (uint64_t)u->memo_count, x);
    case 'h': if ((s = need(u, 1))) return s; u->pos += 1; return memo_get(u, a[0]);
    case 'j': if ((s = need(u, 4))) return s; u->pos += 4; return memo_get(u, tm__ld32(a));
    case 'c': {
        const uint8_t *nl1 = memchr(a, '\n', (size_t)(u->n - u->pos));
        if (!nl1) return UERR(TM_E_CORRUPT, "GLOBAL without a newline");
        const uint8_t *b2 = nl1 + 1;
        const uint8_t *nl2 = memchr(b2, '\n', (size_t)(u->b + u->n - b2));
        if (!nl2) return UERR(TM_E_CORRUPT, "GLOBAL without a second newline");
        u->pos = (uint64_t)(nl2 + 1 - u->b);
        return resolve_global(u, (const char *)a, (size_t)(nl1 - a), (const char *)b2,
                              (size_t)(nl2 - b2));
    }
    case 0x93:
        if ((s = pop(u, &y)) || (s = pop(u, &x))) return s;
        if (x->kind != PV_STR || y->kind != PV_STR)
            return UERR(TM_E_CORRUPT, "STACK_GLOBAL of values that are not strings");
        return resolve_global(u, x->s, x->slen, y->s, y->slen);
    case 'R':
        if ((s = pop(u, &y)) || (s = pop(u, &x))) return s;
        return call(u, x, y);
    case 0x81:
        if ((s = pop(u, &y)) || (s = pop(u, &x))) return s;
        return call(u, x, y);
    case 'b':
        /* BUILD sets state on the object below; the only objects here are dicts (OrderedDict's
        ** _metadata) and tensors (attributes): the state is dropped, nothing is set. */
        if ((s = pop(u, &y)) || (s = top(u, &x))) return s;
        if (x->kind != PV_DICT && x->kind != PV_TENSOR)
            return UERR(TM_E_UNSUPPORTED, "BUILD on something that is not a dict or tensor");
        return TM_OK;
    case 'Q':
        if ((s = pop(u, &x))) return s;
        return persistent(u, x);
    default:
        return UERR(TM_E_UNSUPPORTED, "opcode 0x%02x ('%c') is not one a state_dict needs", op,
                    op >= 0x20 && op < 0x7f ? op : '?');
    }
}

tm_status pt_unpickle(pt_arena *a, const uint8_t *buf, uint64_t n, uint64_t *pos, int legacy,
                      const char *where, uint64_t base_off, pv **out, tm_err *err) {
    up u;
    memset(&u, 0, sizeof u);
    u.a = a;
    u.b = buf;
    u.n = n;
    u.pos = *pos;
    u.legacy = legacy;
    u.where = where;
    u.base = base_off;
    u.err = err;
    *out = NULL;
    int done = 0;
    tm_status s = TM_OK;
    while (!s && !done) s = step(&u, &done);
    if (!s && (u.sp != 1 || u.nm != 0))
        s = up_err(&u, TM_E_CORRUPT, "STOP with %lld values on the stack and %lld open MARKs",
                 (long long)u.sp, (long long)u.nm);
    if (!s) {
        *out = u.stack[0];
        *pos = u.pos;
    }
    free(u.stack);
    free(u.marks);
    free(u.memo);
    return s;
}
