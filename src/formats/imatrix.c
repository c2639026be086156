/* imatrix.c: the importance-matrix reader (tensormorph/imatrix.h): llama-imatrix's legacy
** binary file (llama.cpp@c392e509 examples/imatrix/imatrix.cpp save_imatrix, read as
** examples/quantize/quantize.cpp load_imatrix reads it) and the newer GGUF-based file
** (llama.cpp tools/quantize/quantize.cpp load_imatrix: general.type "imatrix",
** imatrix.datasets / chunk_count / chunk_size, "<name>.in_sum2" and "<name>.counts" tensors).
** Every length is checked against the bytes left before it is used; errors name the file,
** the entry and the byte offset. */
#include "../core/core.h"
#include "tensormorph/gguf_write.h"
#include "tensormorph/imatrix.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>

void tm_imatrix_free(tm_imatrix *m) {
    if (!m) return;
    for (int64_t i = 0; i < m->n; i++) {
        free(m->e[i].name);
        free(m->e[i].weights);
    }
    free(m->e);
    free(m->path);
    free(m->dataset);
    free(m);
}

const tm_imatrix_entry *tm_imatrix_find(const tm_imatrix *m, const char *name) {
    for (int64_t i = 0; m && name && i < m->n; i++)
        if (strcmp(m->e[i].name, name) == 0) return &m->e[i];
    return NULL;
}

void tm_imatrix_filter(tm_imatrix *m, const char *const *excl, int64_t n_excl, const char *const *incl,
                       int64_t n_incl) {
    int64_t k = 0;
    for (int64_t i = 0; i < m->n; i++) {
        int keep = 1;
        for (int64_t x = 0; keep && x < n_excl; x++)
            if (strstr(m->e[i].name, excl[x])) keep = 0;
        if (keep && n_incl > 0) {
            keep = 0;
            for (int64_t x = 0; !keep && x < n_incl; x++)
                if (strstr(m->e[i].name, incl[x])) keep = 1;
        }
        if (keep) m->e[k++] = m->e[i];
        else {
            free(m->e[i].name);
            free(m->e[i].weights);
        }
    }
    m->n = k;
}

/* Append (or, for a name already present, replace: llama-quantize's map keeps the last) an
** entry; takes ownership of name and w. */
static tm_status add_entry(tm_imatrix *m, int64_t *cap, char *name, float *w, int64_t nval, int32_t ncall,
                           uint64_t off, uint64_t voff, int64_t idx, tm_err *err) {
    const tm_imatrix_entry ne = {name, nval, ncall, off, w, voff, idx};
    for (int64_t i = 0; i < m->n; i++) {
        if (strcmp(m->e[i].name, name) == 0) {
            free(m->e[i].name);
            free(m->e[i].weights);
            m->e[i] = ne;
            return TM_OK;
        }
    }
    if (m->n == *cap) {
        int64_t nc = *cap ? *cap * 2 : 16;
        tm_imatrix_entry *e = realloc(m->e, (size_t)nc * sizeof *e);
        if (!e) {
            free(name);
            free(w);
            return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        }
        m->e = e;
        *cap = nc;
    }
    m->e[m->n++] = ne;
    return TM_OK;
}

tm_status tm_imatrix_check_finite(const tm_imatrix *m, tm_err *err) {
    const tm_imatrix_entry *bad = NULL;
    int64_t bj = 0;
    for (int64_t i = 0; m && i < m->n; i++) {
        const tm_imatrix_entry *e = &m->e[i];
        if (bad && e->index > bad->index) continue; /* the first in file order */
        for (int64_t j = 0; j < e->nval; j++)
            if (!isfinite(e->weights[j])) {
                bad = e;
                bj = j;
                break;
            }
    }
    if (!bad) return TM_OK;
    const float v = bad->weights[bj];
    const uint64_t at = bad->values_offset + 4 * (uint64_t)bj;
    return tm__err_set(err, TM_E_NONFINITE, (int64_t)at,
                       "%s: entry '%s' at byte %llu: value %lld is %s (entry %lld; llama-quantize refuses an imatrix "
                       "with non-finite values)", m->path, bad->name, (unsigned long long)at, (long long)bj,
                       isnan(v) ? "NaN" : "infinite", (long long)bad->index);
}

int tm_imatrix_odd_entry(const tm_imatrix_entry *e) {
    int any = 0;
    for (int64_t j = 0; e && j < e->nval; j++) {
        if (e->weights[j] < 0) return 1;
        if (e->weights[j] != 0) any = 1;
    }
    return e && !any ? 2 : 0;
}

/* ---- legacy binary ------------------------------------------------------------------------ */

typedef struct cur { const uint8_t *p; uint64_t n, off; const char *path; } cur;

/* The k bytes of `what` at the cursor, or TM_E_CORRUPT "<file>: [entry '<name>' at byte E: ]
** <what> at byte N needs K bytes, L left (truncated ...)". */
static tm_status need(cur *c, uint64_t k, const char *name, uint64_t e_off, const char *what, tm_err *err) {
    if (c->n - c->off >= k) return TM_OK;
    char ent[400] = "";
    if (name) snprintf(ent, sizeof ent, "entry '%.300s' at byte %llu: ", name, (unsigned long long)e_off);
    return tm__err_set(err, TM_E_CORRUPT, (int64_t)c->off,
                       "%s: %s%s at byte %llu needs %llu bytes, but only %llu are left (the file is truncated or "
                       "not an imatrix)", c->path, ent, what, (unsigned long long)c->off, (unsigned long long)k,
                       (unsigned long long)(c->n - c->off));
}

static int32_t rd32(cur *c) {
    int32_t v = (int32_t)tm__ld32(c->p + c->off);
    c->off += 4;
    return v;
}

static tm_status load_legacy(tm_imatrix *m, const uint8_t *p, uint64_t n, tm_err *err) {
    cur c = {p, n, 0, m->path};
    int64_t cap = 0;
    char what[128];
    tm_status s = need(&c, 4, NULL, 0, "the entry count (int32)", err);
    if (s) return s;
    const int32_t n_entries = rd32(&c);
    if (n_entries < 1)
        return tm__err_set(err, TM_E_CORRUPT, 0, "%s: imatrix holds %d entries (at least 1 expected; "
                           "llama-quantize: \"no data in file\")", m->path, n_entries);
    for (int32_t i = 0; i < n_entries; i++) {
        const uint64_t e_off = c.off;
        snprintf(what, sizeof what, "entry %d's name length (int32)", i);
        if ((s = need(&c, 4, NULL, 0, what, err))) return s;
        const int32_t len = rd32(&c);
        if (len < 0)
            return tm__err_set(err, TM_E_CORRUPT, (int64_t)e_off,
                               "%s: entry %d at byte %llu: name length %d is negative (not an imatrix)", m->path, i,
                               (unsigned long long)e_off, len);
        snprintf(what, sizeof what, "entry %d's name (name length %d at byte %llu)", i, len, (unsigned long long)e_off);
        if ((s = need(&c, (uint64_t)len, NULL, 0, what, err))) return s;
        /* llama-quantize keeps the name up to its first NUL (std::string of a C string); an
        ** empty name is an entry named "" */
        const void *nul = memchr(c.p + c.off, 0, (size_t)len);
        const size_t nl = nul ? (size_t)((const uint8_t *)nul - (c.p + c.off)) : (size_t)len;
        char *name = malloc(nl + 1);
        if (!name) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        memcpy(name, c.p + c.off, nl);
        name[nl] = 0;
        c.off += (uint64_t)len;
        if ((s = need(&c, 8, name, e_off, "ncall and nval (int32 each)", err))) {
            free(name);
            return s;
        }
        const int32_t ncall = rd32(&c);
        const uint64_t nval_off = c.off;
        const int32_t nval = rd32(&c);
        if (nval < 1) {
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)nval_off,
                            "%s: entry '%s' at byte %llu: nval %d at byte %llu: at least 1 value expected "
                            "(llama-quantize: \"failed reading number of values\")", m->path, name,
                            (unsigned long long)e_off, nval, (unsigned long long)nval_off);
            free(name);
            return s;
        }
        snprintf(what, sizeof what, "its %d values (nval at byte %llu; float32 each)", nval, (unsigned long long)nval_off);
        if ((s = need(&c, (uint64_t)nval * 4, name, e_off, what, err))) {
            free(name);
            return s;
        }
        float *w = malloc((size_t)nval * sizeof(float));
        if (!w) {
            free(name);
            return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        }
        memcpy(w, c.p + c.off, (size_t)nval * 4);
        /* llama-quantize: `v /= ncall` for each value, float32 by int */
        if (ncall > 0)
            for (int32_t j = 0; j < nval; j++) w[j] /= (float)ncall;
        const uint64_t v_off = c.off;
        c.off += (uint64_t)nval * 4;
        if ((s = add_entry(m, &cap, name, w, nval, ncall, e_off, v_off, i, err))) return s;
    }
    /* the optional trailer: chunks, dataset */
    m->chunks = 0;
    if (c.off < c.n) {
        const uint64_t t_off = c.off;
        if ((s = need(&c, 8, NULL, 0, "the trailer (chunk count and dataset name length, int32 each)", err))) return s;
        m->chunks = rd32(&c);
        const int32_t dl = rd32(&c);
        if (dl < 0)
            return tm__err_set(err, TM_E_CORRUPT, (int64_t)t_off + 4,
                               "%s: trailer at byte %llu: dataset name length %d at byte %llu is negative", m->path,
                               (unsigned long long)t_off, dl, (unsigned long long)t_off + 4);
        snprintf(what, sizeof what, "the dataset name (length %d at byte %llu)", dl, (unsigned long long)t_off + 4);
        if ((s = need(&c, (uint64_t)dl, NULL, 0, what, err))) return s;
        m->dataset = malloc((size_t)dl + 1);
        if (!m->dataset) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        memcpy(m->dataset, c.p + c.off, (size_t)dl);
        m->dataset[dl] = 0;
        c.off += (uint64_t)dl;
        if (c.off != c.n)
            return tm__err_set(err, TM_E_CORRUPT, (int64_t)c.off,
                               "%s: imatrix has %llu unexpected bytes after the dataset name (byte %llu)",
                               m->path, (unsigned long long)(c.n - c.off), (unsigned long long)c.off);
    }
    return TM_OK;
}

/* ---- GGUF ----------------------------------------------------------------------------------- */

/* The first string of a GGUF string-array value (raw bytes: u32 type, u64 count, elements). */
static char *first_string(const uint8_t *v, size_t n) {
    if (n < 12 || tm__ld32(v) != 8) return NULL;
    uint64_t cnt;
    memcpy(&cnt, v + 4, 8);
    if (cnt < 1 || n < 20) return NULL;
    uint64_t len;
    memcpy(&len, v + 12, 8);
    if (len > n - 20) return NULL;
    char *s = malloc((size_t)len + 1);
    if (s) {
        memcpy(s, v + 20, (size_t)len);
        s[len] = 0;
    }
    return s;
}

static tm_status load_gguf(tm_imatrix *m, tm_err *err) {
    tm_gguf_kvlist *kv = NULL;
    tm_status s = tm_gguf_kvlist_read(m->path, &kv, err);
    if (s) return s;
    char *gtype = tm_gguf_kvlist_get_str(kv, "general.type");
    int fc = 0, fs = 0;
    const int64_t chunks = tm_gguf_kvlist_get_int(kv, "imatrix.chunk_count", &fc);
    (void)tm_gguf_kvlist_get_int(kv, "imatrix.chunk_size", &fs);
    const int64_t di = tm_gguf_kvlist_find(kv, "imatrix.datasets");
    if (!gtype || strcmp(gtype, "imatrix") != 0 || !fc || !fs || di < 0) {
        s = tm__err_set(err, TM_E_UNSUPPORTED, -1,
                        "%s: a GGUF file but not an imatrix (needs general.type \"imatrix\", imatrix.datasets, "
                        "imatrix.chunk_count, imatrix.chunk_size)", m->path);
        free(gtype);
        tm_gguf_kvlist_free(kv);
        return s;
    }
    free(gtype);
    size_t dn = 0;
    const void *dv = tm_gguf_kvlist_raw(kv, di, &dn);
    m->dataset = first_string(dv, dn);
    m->chunks = (int32_t)chunks;
    tm_gguf_kvlist_free(kv);
    tm_file *f = NULL;
    if ((s = tm_open(m->path, NULL, &f, err))) return s;
    int64_t cap = 0;
    const int64_t nt = tm_file_n_tensors(f);
    for (int64_t i = 0; i < nt && !s; i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        const size_t ln = strlen(t->name), ls = strlen(".in_sum2");
        if (ln <= ls || strcmp(t->name + ln - ls, ".in_sum2") != 0) continue;
        char *name = malloc(ln - ls + 1);
        char *cname = malloc(ln - ls + sizeof ".counts");
        if (!name || !cname) {
            free(name);
            free(cname);
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
            break;
        }
        memcpy(name, t->name, ln - ls);
        name[ln - ls] = 0;
        snprintf(cname, ln - ls + sizeof ".counts", "%s.counts", name);
        const int64_t ci = tm_file_find(f, cname);
        free(cname);
        const tm_tensor *ct = ci >= 0 ? tm_file_tensor(f, ci) : NULL;
        /* in_sum2 ne [nval, n_mat] (shape [n_mat, nval]), counts ne [1, n_mat] */
        const int64_t ne0 = t->ndim >= 1 ? t->shape[t->ndim - 1] : 1;
        const int64_t n_mat = ne0 > 0 ? t->n_elems / ne0 : 0;
        if (!ct || t->dtype != TM_F32 || ct->dtype != TM_F32 || t->ndim > 2 || ct->n_elems != n_mat || ne0 < 1) {
            s = tm__err_set(err, TM_E_CORRUPT, (int64_t)t->offset,
                            "%s: entry '%s' at byte %llu: %s", m->path, name, (unsigned long long)t->offset,
                            !ct ? "no matching .counts tensor (llama-quantize: mismatched sums and counts)"
                                : "in_sum2 / counts are not F32 [nval, n_mat] / [1, n_mat]");
            free(name);
            break;
        }
        const void *sp, *cp;
        if ((s = tm_tensor_data(f, i, 0, t->n_bytes, &sp, err)) || (s = tm_tensor_data(f, ci, 0, ct->n_bytes, &cp, err))) {
            free(name);
            break;
        }
        float *w = malloc((size_t)t->n_elems * sizeof(float));
        if (!w) {
            free(name);
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
            break;
        }
        float maxc = 0;
        for (int64_t j = 0; j < n_mat; j++) {
            float cnt, v;
            memcpy(&cnt, (const uint8_t *)cp + 4 * j, 4);
            for (int64_t k = 0; k < ne0; k++) {
                memcpy(&v, (const uint8_t *)sp + 4 * (j * ne0 + k), 4);
                w[j * ne0 + k] = cnt > 0.0f ? v / cnt : 1.0f; /* never seen in calibration: 1 */
            }
            if (cnt > maxc) maxc = cnt;
        }
        s = add_entry(m, &cap, name, w, t->n_elems, maxc > 2147483647.0f ? 2147483647 : (int32_t)maxc, t->offset,
                      t->offset, i, err);
    }
    tm_close(f);
    if (!s && m->n < 1)
        s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: imatrix holds no entries (no .in_sum2 tensors)", m->path);
    return s;
}

static tm_status load_file(const char *path, tm_imatrix **out, int check, tm_err *err) {
    *out = NULL;
    struct stat ps;
    if (stat(path, &ps) == 0 && S_ISDIR(ps.st_mode))
        return tm__err_set(err, TM_E_IO, -1, "%s: is a directory, not an imatrix file", path);
    tm_imatrix *m = calloc(1, sizeof *m);
    if (!m || !(m->path = tm__strdup(path))) {
        free(m);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        tm_status s = tm__err_set(err, TM_E_IO, -1, "%s: cannot open the imatrix: %s", path, strerror(errno));
        tm_imatrix_free(m);
        return s;
    }
    uint8_t magic[4] = {0};
    size_t got = fread(magic, 1, 4, fp);
    tm_status s = TM_OK;
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0) {
        fclose(fp);
        m->is_gguf = 1;
        s = load_gguf(m, err);
    } else {
        /* legacy files are small (a few MiB for a 70B model): read whole, up to 1 GiB */
        uint8_t *buf = NULL;
        size_t n = 0, capb = 0;
        struct stat st;
        if (fstat(fileno(fp), &st) == 0 && st.st_size > (off_t)1 << 30)
            s = tm__err_set(err, TM_E_LIMIT, -1, "%s: %lld bytes: not a legacy imatrix (those are a few MiB; the cap "
                            "is 1 GiB)", path, (long long)st.st_size);
        if (!s && fseek(fp, 0, SEEK_SET) != 0) s = tm__err_set(err, TM_E_IO, -1, "%s: %s", path, strerror(errno));
        while (!s) {
            if (n == capb && capb >= ((size_t)1 << 30) + 1) {
                s = tm__err_set(err, TM_E_LIMIT, -1, "%s: more than 1 GiB: not a legacy imatrix", path);
                break;
            }
            if (n == capb) {
                size_t nc = capb ? capb * 2 : 1 << 16;
                uint8_t *b = realloc(buf, nc);
                if (!b) {
                    s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
                    break;
                }
                buf = b;
                capb = nc;
            }
            size_t r = fread(buf + n, 1, capb - n, fp);
            n += r;
            if (r == 0) {
                if (ferror(fp)) s = tm__err_set(err, TM_E_IO, -1, "%s: read error", path);
                break;
            }
        }
        fclose(fp);
        if (!s) s = load_legacy(m, buf, n, err);
        free(buf);
    }
    if (!s && check) s = tm_imatrix_check_finite(m, err);
    /* the content's identity: parts of one --shard run must use one matrix (part.h) */
    if (!s) s = tm__sha256_file_visit(path, m->sha256, NULL, NULL, NULL, err);
    if (s) {
        tm_imatrix_free(m);
        return s;
    }
    *out = m;
    return TM_OK;
}

tm_status tm_imatrix_load(const char *path, tm_imatrix **out, tm_err *err) { return load_file(path, out, 1, err); }

tm_status tm_imatrix_load_unchecked(const char *path, tm_imatrix **out, tm_err *err) {
    return load_file(path, out, 0, err);
}
