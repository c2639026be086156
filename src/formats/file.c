/* file.c: the generic tm_file container: maps, tensor list, metadata, name index. */
#include "file.h"
#include "membercrc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Open-addressing hash from name to tensor index (both logical and physical names). */
typedef struct name_index {
    uint64_t cap;          /* power of two */
    int64_t *slots;        /* tensor index, -1 empty */
    uint8_t *is_phys;      /* 1: slot keyed by phys_name */
} name_index;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
    for (; *s; s++) { h ^= (uint8_t)*s; h *= 1099511628211ull; }
    return h;
}

tm_file *tm__file_new(tm_format fmt) {
    tm_file *f = calloc(1, sizeof *f);
    if (f) f->format = fmt;
    return f;
}

void tm_close(tm_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n_maps; i++) {
        if (f->maps[i].owned == 1 && f->maps[i].size) munmap((void *)f->maps[i].base, f->maps[i].size);
        if (f->maps[i].owned == 2) free((void *)f->maps[i].base);
        free(f->maps[i].path);
    }
    free(f->maps);
    for (int64_t i = 0; i < f->n_tensors; i++) {
        if (f->tensors[i].phys_name != f->tensors[i].name) free((char *)f->tensors[i].phys_name);
        free((char *)f->tensors[i].name);
    }
    free(f->tensors);
    for (int64_t i = 0; i < f->n_qtensors; i++) free(f->qtensors[i]);
    free(f->qtensors);
    for (int64_t i = 0; i < f->n_meta; i++) { free(f->meta_keys[i]); free(f->meta_values[i]); }
    free(f->meta_keys); free(f->meta_values);
    for (int64_t i = 0; i < f->n_warnings; i++) free(f->warnings[i]);
    free(f->warnings);
    free(f->config_json);
    if (f->name_index) {
        name_index *ni = f->name_index;
        free(ni->slots); free(ni->is_phys); free(ni);
    }
    if (f->fmt_free) f->fmt_free(f->fmt_state);
    tm__crc_free(f);
    free(f);
}

static tm_status grow(void **arr, int64_t *cap, int64_t need, size_t elem, tm_err *err) {
    if (need <= *cap) return TM_OK;
    int64_t nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory growing a list to %lld items",
                               (long long)nc);
    *arr = p;
    *cap = nc;
    return TM_OK;
}

static tm_status add_map_slot(tm_file *f, tm__map m, int *idx, tm_err *err) {
    tm__map *p = realloc(f->maps, (size_t)(f->n_maps + 1) * sizeof *p);
    if (!p) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    f->maps = p;
    f->maps[f->n_maps] = m;
    if (idx) *idx = f->n_maps;
    f->n_maps++;
    return TM_OK;
}

tm_status tm__file_map(tm_file *f, const char *path, int *idx, tm_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block us */
    if (fd < 0) return tm__err_sys(err, errno, "%s: cannot open", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno; close(fd);
        return tm__err_sys(err, e, "%s: cannot stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return tm__err_set(err, TM_E_IO, -1, "%s: not a regular file", path);
    }
    tm__map m = {0};
    m.path = tm__strdup(path);
    if (!m.path) { close(fd); return tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); }
    m.size = (uint64_t)st.st_size;
    if (m.size) {
        void *p = mmap(NULL, (size_t)m.size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno; close(fd); free(m.path);
            return tm__err_sys(err, e, "%s: cannot mmap %llu bytes", path,
                               (unsigned long long)m.size);
        }
        m.base = p;
        m.owned = 1;
    } else {
        m.base = (const uint8_t *)"";
    }
    close(fd);
    tm_status s = add_map_slot(f, m, idx, err);
    if (s != TM_OK) {
        if (m.owned) munmap((void *)m.base, m.size);
        free(m.path);
    }
    return s;
}

tm_status tm__file_add_buffer(tm_file *f, const char *name, const void *data, size_t n, int *idx,
                              tm_err *err) {
    tm__map m = {0};
    m.path = tm__strdup(name ? name : "<buffer>");
    if (!m.path) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    m.base = data ? data : (const void *)"";
    m.size = n;
    tm_status s = add_map_slot(f, m, idx, err);
    if (s != TM_OK) free(m.path);
    return s;
}

tm_status tm__file_add_buffer_owned(tm_file *f, const char *name, void *data, size_t n, int *idx,
                                    tm_err *err) {
    tm__map m = {0};
    m.path = tm__strdup(name ? name : "<memory>");
    if (!data || !m.path) {
        free(data); free(m.path);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    m.base = data;
    m.size = n;
    m.owned = 2;
    tm_status s = add_map_slot(f, m, idx, err);
    if (s != TM_OK) { free(data); free(m.path); }
    return s;
}

tm_status tm__file_add_buffer_copy(tm_file *f, const char *name, const void *data, size_t n,
                                   int *idx, tm_err *err) {
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory copying %zu bytes", n);
    if (n) memcpy(copy, data, n);
    return tm__file_add_buffer_owned(f, name, copy, n, idx, err);
}

int64_t tm__shape_numel(int ndim, const int64_t *shape, int *ok) {
    int64_t n = 1;
    *ok = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || !tm__mul_i64_ok(n, shape[d], &n)) { *ok = 0; return 0; }
    }
    return n;
}

tm_status tm__file_add_tensor(tm_file *f, const tm_tensor *t, int64_t *idx, tm_err *err) {
    tm_status s = grow((void **)&f->tensors, &f->cap_tensors, f->n_tensors + 1, sizeof(tm_tensor),
                       err);
    if (s) return s;
    tm_tensor c = *t;
    c.name = tm__strdup(t->name);
    if (!c.name) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (t->phys_name && strcmp(t->phys_name, t->name) != 0) {
        c.phys_name = tm__strdup(t->phys_name);
        if (!c.phys_name) { free((char *)c.name); return tm__err_set(err, TM_E_NOMEM, -1, "oom"); }
    } else {
        c.phys_name = c.name;
    }
    if (c.phys_ndim == 0 && t->phys_ndim == 0 && c.ndim > 0 && c.phys_dtype == c.dtype) {
        c.phys_ndim = c.ndim;
        memcpy(c.phys_shape, c.shape, sizeof c.shape);
    }
    int ok;
    c.n_elems = tm__shape_numel(c.ndim, c.shape, &ok);
    if (!ok) {
        free((char *)c.name);
        if (c.phys_name != c.name) free((char *)c.phys_name);
        return tm__err_set(err, TM_E_CORRUPT, -1, "tensor '%s': shape overflows", t->name);
    }
    c.quant = NULL;
    if (c.owner == 0 && c.role == TM_ROLE_DATA) c.owner = -1;
    f->tensors[f->n_tensors] = c;
    if (idx) *idx = f->n_tensors;
    f->n_tensors++;
    return TM_OK;
}

tm_tensor *tm__file_tensor_mut(tm_file *f, int64_t i) {
    if (!f || i < 0 || i >= f->n_tensors) return NULL;
    return &f->tensors[i];
}

tm_status tm__file_set_quant(tm_file *f, int64_t i, const tm_qtensor *q, tm_err *err) {
    if (i < 0 || i >= f->n_tensors) return tm__err_set(err, TM_E_INTERNAL, -1, "bad tensor index");
    tm_status s = grow((void **)&f->qtensors, &f->cap_qtensors, f->n_qtensors + 1,
                       sizeof(tm_qtensor *), err);
    if (s) return s;
    tm_qtensor *c = malloc(sizeof *c);
    if (!c) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    *c = *q;
    f->qtensors[f->n_qtensors++] = c;
    f->tensors[i].quant = c;
    return TM_OK;
}

tm_status tm__file_rename_tensor(tm_file *f, int64_t i, const char *name, tm_err *err) {
    tm_tensor *t = tm__file_tensor_mut(f, i);
    if (!t) return tm__err_set(err, TM_E_INTERNAL, -1, "bad tensor index");
    char *n = tm__strdup(name);
    if (!n) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (t->phys_name == t->name) t->phys_name = t->name; /* keep the old string as phys */
    else free((char *)t->name);
    t->name = n;
    return TM_OK;
}

tm_status tm__file_add_meta(tm_file *f, const char *key, const char *value, tm_err *err) {
    int64_t cap = f->cap_meta;
    tm_status s = grow((void **)&f->meta_keys, &cap, f->n_meta + 1, sizeof(char *), err);
    if (s) return s;
    int64_t cap2 = f->cap_meta;
    s = grow((void **)&f->meta_values, &cap2, f->n_meta + 1, sizeof(char *), err);
    if (s) return s;
    f->cap_meta = cap < cap2 ? cap : cap2;
    char *k = tm__strdup(key), *v = tm__strdup(value);
    if (!k || !v) { free(k); free(v); return tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); }
    f->meta_keys[f->n_meta] = k;
    f->meta_values[f->n_meta] = v;
    f->n_meta++;
    return TM_OK;
}

tm_status tm__file_add_warning(tm_file *f, tm_err *err, const char *fmt, ...) {
    tm_status s = grow((void **)&f->warnings, &f->cap_warnings, f->n_warnings + 1,
                       sizeof(char *), err);
    if (s) return s;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char *w = tm__strdup(buf);
    if (!w) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    f->warnings[f->n_warnings++] = w;
    return TM_OK;
}

static int64_t index_lookup(const tm_file *f, const char *name, int want_phys) {
    const name_index *ni = f->name_index;
    if (!ni) return -1;
    uint64_t h = hash_str(name) & (ni->cap - 1);
    for (;;) {
        int64_t t = ni->slots[h];
        if (t < 0) return -1;
        const char *k = ni->is_phys[h] ? f->tensors[t].phys_name : f->tensors[t].name;
        if (ni->is_phys[h] == want_phys && strcmp(k, name) == 0) return t;
        h = (h + 1) & (ni->cap - 1);
    }
}

static void index_put(tm_file *f, int64_t t, int phys) {
    name_index *ni = f->name_index;
    const char *k = phys ? f->tensors[t].phys_name : f->tensors[t].name;
    uint64_t h = hash_str(k) & (ni->cap - 1);
    while (ni->slots[h] >= 0) h = (h + 1) & (ni->cap - 1);
    ni->slots[h] = t;
    ni->is_phys[h] = (uint8_t)phys;
}

tm_status tm__file_open_one(tm_format fmt, const char *path, const void *data, size_t n,
                            const char *name, tm__member_load_fn load, void *ctx, tm_file **out,
                            tm_err *err) {
    *out = NULL;
    if (!path && !data && n) return tm__err_set(err, TM_E_INVALID_ARG, -1, "NULL buffer of %zu bytes", n);
    tm_file *f = tm__file_new(fmt);
    if (!f) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    int mi = 0;
    tm_status s = path ? tm__file_map(f, path, &mi, err)
                       : tm__file_add_buffer(f, name ? name : "<buffer>", data, n, &mi, err);
    if (!s) s = load(f, mi, ctx, err);
    if (!s) s = tm__file_finish(f, err);
    if (s) { tm_close(f); return s; }
    *out = f;
    return TM_OK;
}

tm_status tm__file_finish(tm_file *f, tm_err *err) {
    name_index *ni = calloc(1, sizeof *ni);
    if (!ni) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    uint64_t cap = 16;
    while (cap < (uint64_t)f->n_tensors * 4) cap *= 2;
    ni->cap = cap;
    ni->slots = malloc(cap * sizeof *ni->slots);
    ni->is_phys = calloc(cap, 1);
    if (!ni->slots || !ni->is_phys) {
        free(ni->slots); free(ni->is_phys); free(ni);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    for (uint64_t i = 0; i < cap; i++) ni->slots[i] = -1;
    if (f->name_index) {
        name_index *old = f->name_index;
        free(old->slots); free(old->is_phys); free(old);
    }
    f->name_index = ni;
    for (int64_t t = 0; t < f->n_tensors; t++) {
        if (index_lookup(f, f->tensors[t].name, 0) >= 0)
            return tm__err_set(err, TM_E_CORRUPT, -1, "%s: duplicate tensor name '%s'",
                               f->n_maps ? f->maps[0].path : "?", f->tensors[t].name);
        index_put(f, t, 0);
        if (f->tensors[t].phys_name != f->tensors[t].name &&
            strcmp(f->tensors[t].phys_name, f->tensors[t].name) != 0)
            index_put(f, t, 1);
    }
    return TM_OK;
}

tm_format tm_file_format(const tm_file *f) { return f ? f->format : TM_FMT_UNKNOWN; }
int tm_file_n_paths(const tm_file *f) {
    int n = 0;
    while (f && n < f->n_maps && f->maps[n].owned != 2) n++; /* in-memory slots are not files */
    return n;
}
const char *tm_file_path(const tm_file *f, int i) {
    return (f && i >= 0 && i < f->n_maps) ? f->maps[i].path : NULL;
}
uint64_t tm_file_size(const tm_file *f, int i) {
    return (f && i >= 0 && i < f->n_maps) ? f->maps[i].size : 0;
}
int64_t tm_file_n_tensors(const tm_file *f) { return f ? f->n_tensors : 0; }
const tm_tensor *tm_file_tensor(const tm_file *f, int64_t i) {
    return (f && i >= 0 && i < f->n_tensors) ? &f->tensors[i] : NULL;
}
int64_t tm_file_find(const tm_file *f, const char *name) {
    if (!f || !name) return -1;
    int64_t t = index_lookup(f, name, 0);
    if (t < 0) t = index_lookup(f, name, 1);
    return t;
}
const char *tm_file_config_json(const tm_file *f) { return f ? f->config_json : NULL; }
int64_t tm_file_n_meta(const tm_file *f) { return f ? f->n_meta : 0; }
const char *tm_file_meta_key(const tm_file *f, int64_t i) {
    return (f && i >= 0 && i < f->n_meta) ? f->meta_keys[i] : NULL;
}
const char *tm_file_meta_value(const tm_file *f, int64_t i) {
    return (f && i >= 0 && i < f->n_meta) ? f->meta_values[i] : NULL;
}
int64_t tm_file_n_warnings(const tm_file *f) { return f ? f->n_warnings : 0; }
const char *tm_file_warning(const tm_file *f, int64_t i) {
    return (f && i >= 0 && i < f->n_warnings) ? f->warnings[i] : NULL;
}

tm_status tm_tensor_data(const tm_file *f, int64_t i, uint64_t off, uint64_t n, const void **out,
                         tm_err *err) {
    const tm_tensor *t = tm_file_tensor(f, i);
    if (!t) return tm__err_set(err, TM_E_INVALID_ARG, -1, "tensor index %lld out of range",
                               (long long)i);
    uint64_t end;
    if (!tm__add_u64_ok(off, n, &end) || end > t->n_bytes)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "tensor '%s': byte range [%llu, +%llu) outside its %llu bytes", t->name,
                           (unsigned long long)off, (unsigned long long)n,
                           (unsigned long long)t->n_bytes);
    if (t->file_index < 0 || t->file_index >= f->n_maps)
        return tm__err_set(err, TM_E_INTERNAL, -1, "tensor '%s': bad file index", t->name);
    const tm__map *m = &f->maps[t->file_index];
    uint64_t abs;
    if (!tm__add_u64_ok(t->offset, end, &abs) || abs > m->size)
        return tm__err_set(err, TM_E_CORRUPT, (int64_t)t->offset,
                           "%s: tensor '%s' data lies outside the file", m->path, t->name);
    if (f->crcs) { /* an archive member read in place: its CRC-32, once (membercrc.h) */
        tm_status s = tm__crc_tensor_check(f, t, err);
        if (s) return s;
    }
    *out = m->base + t->offset + off;
    return TM_OK;
}

void tm_tensor_release(const tm_file *f, int64_t i, uint64_t off, uint64_t n) {
    const tm_tensor *t = tm_file_tensor(f, i);
    if (!t || t->file_index < 0 || t->file_index >= f->n_maps) return;
    const tm__map *m = &f->maps[t->file_index];
    if (m->owned != 1 || n == 0) return; /* only file mappings can be dropped */
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t a = t->offset + off, b = a + n;
    if (b > m->size) b = m->size;
    /* only whole pages fully inside the range, so neighbours stay cached */
    uint64_t a2 = (a + page - 1) / page * page, b2 = b / page * page;
    if (b == m->size) b2 = (b + page - 1) / page * page;
    if (b2 > a2) madvise((void *)(m->base + a2), (size_t)(b2 - a2), MADV_DONTNEED);
}

tm_open_params tm_open_params_default(void) {
    tm_open_params p;
    memset(&p, 0, sizeof p);
    return p;
}

const char *tm_format_name(tm_format f) {
    switch (f) {
    case TM_FMT_SAFETENSORS: return "safetensors";
    case TM_FMT_GGUF: return "gguf";
    case TM_FMT_ONNX: return "onnx";
    case TM_FMT_PT: return "pytorch";
    case TM_FMT_NPY: return "npy";
    case TM_FMT_NPZ: return "npz";
    default: return "unknown";
    }
}

/* "[4, 8]" into buf (truncated with "..." when it does not fit). */
void tm__st_fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t pos = 0;
    if (n == 0) return;
    buf[0] = '\0';
    int w = snprintf(buf, n, "[");
    if (w < 0) return;
    pos = (size_t)w;
    for (int d = 0; d < ndim && pos < n; d++) {
        w = snprintf(buf + pos, n - pos, "%s%lld", d ? ", " : "", (long long)shape[d]);
        if (w < 0) return;
        pos += (size_t)w;
    }
    if (pos < n) snprintf(buf + pos, n - pos, "]");
}

int64_t tm__file_find_param(const tm_file *f, const char *module, const char *param) {
    char *n = module[0] ? tm__aprintf("%s.%s", module, param) : tm__strdup(param);
    if (!n) return -2;
    int64_t i = tm_file_find(f, n);
    free(n);
    return i;
}
