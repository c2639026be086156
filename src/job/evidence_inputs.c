/* evidence_inputs.c: the inputs of `tensormorph evidence` (evidence_impl.h): the element types
** and shapes of the inputs ONNX Runtime requires, from tensormorph's ONNX reader; the --inputs
** DIR sample sets (inputs.json checked against docs/schemas/inputs.schema.json); seeded random
** sample sets; SLICES.json (docs/schemas/slices.schema.json). Every sample tensor is rewritten
** into the scratch folder as a canonical .npy (NumPy format 1.0, little-endian, C order) and
** hashed. */
#include "evidence_impl.h"
#include "../core/jschema.h"
#include "tensormorph/graph.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>

/* ---- model inputs ---------------------------------------------------------------------- */

/* ONNX TensorProto.DataType (onnx.proto) -> the dtypes the runner can feed. */
static tm_dtype onnx_to_dtype(int t) {
    switch (t) {
    case 1: return TM_F32;
    case 2: return TM_U8;
    case 3: return TM_I8;
    case 4: return TM_U16;
    case 5: return TM_I16;
    case 6: return TM_I32;
    case 7: return TM_I64;
    case 9: return TM_BOOL;
    case 10: return TM_F16;
    case 11: return TM_F64;
    case 12: return TM_U32;
    case 13: return TM_U64;
    default: return TM_DTYPE_COUNT;
    }
}

/* NumPy dtype string (little-endian) of a dtype the runner feeds, or NULL. */
static const char *npy_descr(tm_dtype d) {
    switch (d) {
    case TM_F32: return "<f4";
    case TM_F64: return "<f8";
    case TM_F16: return "<f2";
    case TM_I8: return "|i1";
    case TM_U8: return "|u1";
    case TM_I16: return "<i2";
    case TM_U16: return "<u2";
    case TM_I32: return "<i4";
    case TM_U32: return "<u4";
    case TM_I64: return "<i8";
    case TM_U64: return "<u8";
    case TM_BOOL: return "|b1";
    default: return NULL;
    }
}

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t l = 0;
    if (ndim < 0) { snprintf(buf, n, "[unknown rank]"); return; }
    l += (size_t)snprintf(buf + l, n - l, "[");
    for (int d = 0; d < ndim && l < n; d++) {
        if (shape[d] < 0) l += (size_t)snprintf(buf + l, n - l, "%s?", d ? "," : "");
        else l += (size_t)snprintf(buf + l, n - l, "%s%lld", d ? "," : "", (long long)shape[d]);
    }
    if (l < n) snprintf(buf + l, n - l, "]");
}

/* names: the feeds ONNX Runtime requires (graph inputs that no initializer provides); their
** element types and shapes come from the graph's value info as tensormorph reads it. */
tm_status tm__ev_model_inputs(const tm_file *f, const char *path, char *const *names, int n_names,
                              tm__ev_inputs *out, tm_err *err) {
    memset(out, 0, sizeof *out);
    if (tm_file_format(f) != TM_FMT_ONNX)
        return tm__err_set(err, TM_E_CORRUPT, -1, "%s: a %s checkpoint is not an ONNX model", path,
                           tm_format_name(tm_file_format(f)));
    if (n_names < 1) return tm__err_set(err, TM_E_CORRUPT, -1, "%s: the graph has no inputs to feed", path);
    out->in = tm__calloc((size_t)n_names, sizeof *out->in);
    if (!out->in) return tm__err_set(err, TM_E_NOMEM, -1, "%s: out of memory", path);
    tm_status s = TM_OK;
    for (int k = 0; k < n_names && !s; k++) {
        const tm_graph_value *gv = tm_graph_value_at(f, tm_graph_find_value(f, names[k]));
        if (!gv) {
            s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: ONNX Runtime asks for input '%s', which the "
                            "graph does not declare", path, names[k]);
            break;
        }
        tm__ev_input *in = &out->in[out->n++];
        if (!(in->name = tm__strdup(gv->name))) { s = tm__err_set(err, TM_E_NOMEM, -1, "%s: out of memory", path); break; }
        in->onnx_type = gv->elem_type;
        in->dtype = onnx_to_dtype(gv->elem_type);
        in->ndim = gv->ndim > TM_MAX_DIMS ? -1 : gv->ndim;
        for (int d = 0; d < in->ndim; d++) in->shape[d] = gv->shape[d];
        in->rndim = -1;
        if (in->dtype == TM_DTYPE_COUNT)
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: graph input '%s' has element type %s, which "
                            "the runner cannot feed (numeric types except bfloat16 and fp8)", path,
                            gv->name, gv->elem_type_name);
    }
    if (s) tm__ev_inputs_free(out);
    return s;
}

void tm__ev_inputs_free(tm__ev_inputs *in) {
    for (int k = 0; in->in && k < in->n; k++) free(in->in[k].name);
    free(in->in);
    memset(in, 0, sizeof *in);
}

static int find_input(const tm__ev_inputs *in, const char *name) {
    for (int k = 0; k < in->n; k++) if (!strcmp(in->in[k].name, name)) return k;
    return -1;
}

/* 1 when `shape` fits the model's (same rank, equal where the model's dim is fixed). */
static int shape_fits(const tm__ev_input *in, int ndim, const int64_t *shape) {
    if (in->ndim < 0) return 1;
    if (in->ndim != ndim) return 0;
    for (int d = 0; d < ndim; d++) if (in->shape[d] >= 0 && in->shape[d] != shape[d]) return 0;
    return 1;
}

static int shape_static(const tm__ev_input *in) {
    if (in->ndim < 0) return 0;
    for (int d = 0; d < in->ndim; d++) if (in->shape[d] < 0) return 0;
    return 1;
}

tm_status tm__ev_resolve_shapes(tm__ev_inputs *base, const tm__ev_inputs *cand,
                                const tm_evidence_params *p, tm_err *err) {
    char a[160], b[160];
    /* the candidate must take the same inputs */
    for (int k = 0; k < cand->n; k++) {
        int j = find_input(base, cand->in[k].name);
        if (j < 0)
            return tm__err_set(err, TM_E_CORRUPT, -1, "%s: graph input '%s' is not an input of the "
                               "baseline %s", p->candidate, cand->in[k].name, p->baseline);
        if (cand->in[k].dtype != base->in[j].dtype)
            return tm__err_set(err, TM_E_CORRUPT, -1, "%s: graph input '%s' is %s, the baseline's is %s",
                               p->candidate, cand->in[k].name, tm_dtype_get(cand->in[k].dtype)->name,
                               tm_dtype_get(base->in[j].dtype)->name);
    }
    for (int k = 0; k < base->n; k++)
        if (find_input(cand, base->in[k].name) < 0)
            return tm__err_set(err, TM_E_CORRUPT, -1, "%s: graph input '%s' of the baseline %s is "
                               "missing", p->candidate, base->in[k].name, p->baseline);
    for (int i = 0; i < p->n_input_shapes; i++) {
        const tm_evidence_shape *sh = &p->input_shapes[i];
        int k = find_input(base, sh->name);
        if (k < 0) {
            size_t l = 0;
            a[0] = '\0';
            for (int j = 0; j < base->n && l < sizeof a; j++)
                l += (size_t)snprintf(a + l, sizeof a - l, "%s%s", j ? ", " : "", base->in[j].name);
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "--input-shape %s: the model has no input "
                               "'%s' (its inputs: %s)", sh->name, sh->name, a);
        }
        if (sh->ndim < 0 || sh->ndim > TM_MAX_DIMS)
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "--input-shape %s: rank %d", sh->name, sh->ndim);
        tm__ev_input *in = &base->in[k];
        const tm__ev_input *ci = &cand->in[find_input(cand, sh->name)];
        size_t al = 0;
        a[0] = '\0';
        for (int d = 0; d < sh->ndim && al < sizeof a; d++)
            al += (size_t)snprintf(a + al, sizeof a - al, "%s%lld", d ? "," : "", (long long)sh->shape[d]);
        for (int pass = 0; pass < 2; pass++) {
            const tm__ev_input *m = pass ? ci : in;
            if (!shape_fits(m, sh->ndim, sh->shape)) {
                shape_str(m->ndim, m->shape, b, sizeof b);
                return tm__err_set(err, TM_E_INVALID_ARG, -1, "--input-shape %s=%s does not fit the "
                                   "%s's input shape %s", sh->name, a, pass ? "candidate" : "baseline", b);
            }
        }
        in->rndim = sh->ndim;
        memcpy(in->rshape, sh->shape, sizeof in->rshape);
    }
    for (int k = 0; k < base->n; k++) {
        tm__ev_input *in = &base->in[k];
        if (in->rndim >= 0) continue;
        const tm__ev_input *ci = &cand->in[find_input(cand, in->name)];
        if (shape_static(in) && shape_fits(ci, in->ndim, in->shape)) {
            in->rndim = in->ndim;
            memcpy(in->rshape, in->shape, sizeof in->rshape);
        } else if (shape_static(in)) {
            shape_str(in->ndim, in->shape, a, sizeof a);
            shape_str(ci->ndim, ci->shape, b, sizeof b);
            return tm__err_set(err, TM_E_CORRUPT, -1, "input '%s': baseline shape %s, candidate %s",
                               in->name, a, b);
        } else if (!p->inputs_dir) {
            shape_str(in->ndim, in->shape, a, sizeof a);
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "%s: input '%s' has shape %s with dynamic "
                               "dims: give --input-shape %s=D1,D2,...", p->baseline, in->name, a, in->name);
        }
        /* else: the first sample of --inputs DIR fixes it */
    }
    return TM_OK;
}

/* ---- canonical .npy files ----------------------------------------------------------------- */

/* Write a NumPy format 1.0 file (C order, little-endian data given) and hash its bytes. */
static tm_status write_npy(const char *path, tm_dtype dt, int ndim, const int64_t *shape,
                           const void *data, uint64_t nbytes, EVP_MD_CTX *md, tm_err *err) {
    char h[512];
    int l = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (", npy_descr(dt));
    for (int d = 0; d < ndim; d++)
        l += snprintf(h + l, sizeof h - (size_t)l, "%lld%s", (long long)shape[d],
                      ndim == 1 ? "," : d + 1 < ndim ? ", " : "");
    l += snprintf(h + l, sizeof h - (size_t)l, "), }");
    int total = 10 + l + 1, pad = (64 - total % 64) % 64;
    memset(h + l, ' ', (size_t)pad);
    l += pad;
    h[l++] = '\n';
    uint8_t head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    tm__st16(head + 8, (uint16_t)l);
    FILE *fp = fopen(path, "wb");
    if (!fp) return tm__err_sys(err, errno, "%s: cannot create", path);
    int ok = fwrite(head, 1, 10, fp) == 10 && fwrite(h, 1, (size_t)l, fp) == (size_t)l &&
             (nbytes == 0 || fwrite(data, 1, (size_t)nbytes, fp) == (size_t)nbytes);
    int e = errno;
    if (fclose(fp) != 0 && ok) { ok = 0; e = errno; }
    if (!ok) return tm__err_sys(err, e, "%s: write failed", path);
    EVP_DigestUpdate(md, head, 10);
    EVP_DigestUpdate(md, h, (size_t)l);
    if (nbytes) EVP_DigestUpdate(md, data, (size_t)nbytes);
    return TM_OK;
}

static void hash_final(EVP_MD_CTX *md, char hex[65]) {
    unsigned char d[32];
    unsigned n = 0;
    EVP_DigestFinal_ex(md, d, &n);
    for (unsigned i = 0; i < n; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    hex[64] = '\0';
}

static tm_status samples_alloc(tm__ev_samples *s, int64_t n, int n_inputs, tm_err *err) {
    memset(s, 0, sizeof *s);
    s->ids = tm__calloc((size_t)n, sizeof *s->ids);
    s->files = tm__calloc((size_t)n * (size_t)n_inputs, sizeof *s->files);
    if (!s->ids || !s->files) {
        free(s->ids); free(s->files);
        memset(s, 0, sizeof *s);
        return tm__err_set(err, TM_E_NOMEM, -1, "evidence: out of memory for %lld samples", (long long)n);
    }
    s->n = n;
    return TM_OK;
}

void tm__ev_samples_free(tm__ev_samples *s, int n_inputs) {
    for (int64_t i = 0; s->ids && i < s->n; i++) free(s->ids[i]);
    for (int64_t i = 0; s->files && i < s->n * n_inputs; i++) free(s->files[i]);
    free(s->ids);
    free(s->files);
    memset(s, 0, sizeof *s);
}

/* ---- --inputs DIR ------------------------------------------------------------------------- */

static tm_status load_json(const char *path, json_t **out, tm_err *err) {
    json_error_t je;
    *out = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (*out) return TM_OK;
    if (json_error_code(&je) == json_error_cannot_open_file)
        return tm__err_set(err, TM_E_IO, -1, "%s: cannot open: %s", path, je.text);
    return tm__err_set(err, TM_E_CORRUPT, je.position, "%s: line %d column %d: %s", path, je.line,
                       je.column, je.text);
}

/* Rewrite one sample tensor (any .npy tm_open reads: versions 1-3, either byte order, C or
** Fortran order) as canonical little-endian C-order bytes. */
static tm_status canonical_bytes(const tm_file *f, const tm_tensor *t, uint8_t **out, uint64_t *n,
                                 tm_err *err) {
    const void *src;
    tm_status s = tm_tensor_data(f, 0, 0, t->n_bytes, &src, err);
    if (s) return s;
    uint8_t *dst = malloc(t->n_bytes ? (size_t)t->n_bytes : 1);
    if (!dst) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    size_t es = (size_t)(tm_dtype_get(t->dtype)->bits / 8);
    if (es == 0 || (uint64_t)t->n_elems * es != t->n_bytes) {
        free(dst);
        return tm__err_set(err, TM_E_CORRUPT, -1, "%lld elements do not fill %llu bytes",
                           (long long)t->n_elems, (unsigned long long)t->n_bytes);
    }
    if (!t->fortran_order || t->ndim < 2) {
        memcpy(dst, src, (size_t)t->n_bytes);
    } else {
        /* element (i0..ik) sits at sum i_j * stride_j with stride_0 = 1 in Fortran order */
        int64_t idx[TM_MAX_DIMS] = {0}, stride[TM_MAX_DIMS];
        stride[0] = 1;
        for (int d = 1; d < t->ndim; d++) stride[d] = stride[d - 1] * t->shape[d - 1];
        for (int64_t e = 0; e < t->n_elems; e++) {
            int64_t off = 0;
            for (int d = 0; d < t->ndim; d++) off += idx[d] * stride[d];
            memcpy(dst + (size_t)e * es, (const uint8_t *)src + (size_t)off * es, es);
            for (int d = t->ndim - 1; d >= 0; d--) {
                if (++idx[d] < t->shape[d]) break;
                idx[d] = 0;
            }
        }
    }
    if (t->big_endian && es > 1)
        for (int64_t e = 0; e < t->n_elems; e++)
            for (size_t b = 0; b < es / 2; b++) {
                uint8_t *p = dst + (size_t)e * es, tmp = p[b];
                p[b] = p[es - 1 - b];
                p[es - 1 - b] = tmp;
            }
    *out = dst;
    *n = t->n_bytes;
    return TM_OK;
}

/* A JSON path member: ".key" for identifiers, else ["key"] (as src/core/jschema.c writes). */
static const char *member(const char *key, char *buf, size_t n) {
    int ident = key[0] && !(key[0] >= '0' && key[0] <= '9');
    for (const char *p = key; *p && ident; p++)
        ident = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_';
    snprintf(buf, n, ident ? ".%s" : "[\"%s\"]", key);
    return buf;
}

static int plain_file_name(const char *s) {
    return s[0] && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/');
}

tm_status tm__ev_load_dir(const char *dir, tm__ev_inputs *in, const char *scratch,
                          tm__ev_samples *out, tm_err *err) {
    memset(out, 0, sizeof *out);
    char *jpath = tm__aprintf("%s/inputs.json", dir);
    if (!jpath) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    json_t *doc = NULL;
    tm_status s = load_json(jpath, &doc, err);
    if (!s) s = tm__jschema_validate_named("inputs", doc, jpath, err);
    json_t *arr = s ? NULL : json_object_get(doc, "inputs");
    int64_t n = arr ? (int64_t)json_array_size(arr) : 0;
    if (!s) s = samples_alloc(out, n, in->n, err);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!s && (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1))
        s = tm__err_set(err, TM_E_NOMEM, -1, "sha256: cannot initialise");
    char mb[300];
    /* first everything inputs.json alone can get wrong, then the files */
    for (int64_t i = 0; !s && i < n; i++) {
        json_t *smp = json_array_get(arr, (size_t)i);
        const char *id = json_string_value(json_object_get(smp, "id"));
        json_t *tensors = json_object_get(smp, "tensors");
        for (int64_t j = 0; j < i && !s; j++)
            if (!strcmp(out->ids[j], id))
                s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: $.inputs[%lld].id: duplicate id \"%s\" "
                                "(also $.inputs[%lld].id)", jpath, (long long)i, id, (long long)j);
        if (s) break;
        if (!(out->ids[i] = tm__strdup(id))) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); break; }
        const char *key;
        json_t *val;
        json_object_foreach(tensors, key, val) {
            if (find_input(in, key) < 0) {
                s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: $.inputs[%lld].tensors%s: the model has "
                                "no input '%s'", jpath, (long long)i, member(key, mb, sizeof mb), key);
                break;
            }
            if (!plain_file_name(json_string_value(val))) {
                s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: $.inputs[%lld].tensors%s: \"%s\" is not a "
                                "plain file name in %s", jpath, (long long)i, member(key, mb, sizeof mb),
                                json_string_value(val), dir);
                break;
            }
        }
        for (int k = 0; !s && k < in->n; k++)
            if (!json_object_get(tensors, in->in[k].name))
                s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: $.inputs[%lld].tensors: no file for model "
                                "input '%s'", jpath, (long long)i, in->in[k].name);
    }
    for (int64_t i = 0; !s && i < n; i++) {
        json_t *tensors = json_object_get(json_array_get(arr, (size_t)i), "tensors");
        for (int k = 0; !s && k < in->n; k++) {
            tm__ev_input *mi = &in->in[k];
            const char *fname = json_string_value(json_object_get(tensors, mi->name));
            char *npy = tm__aprintf("%s/%s", dir, fname);
            tm_file *f = NULL;
            if (!npy) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); break; }
            s = tm_open(npy, NULL, &f, err);
            if (!s && (tm_file_format(f) != TM_FMT_NPY || tm_file_n_tensors(f) != 1))
                s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: not a single .npy array", npy);
            if (s) {
                tm__err_prefix(err, "%s: $.inputs[%lld].tensors%s", jpath, (long long)i,
                               member(mi->name, mb, sizeof mb));
                free(npy);
                tm_close(f);
                break;
            }
            const tm_tensor *t = tm_file_tensor(f, 0);
            char a[160], b[160];
            shape_str(t->ndim, t->shape, a, sizeof a);
            if (t->dtype != mi->dtype) {
                s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: holds %s %s, model input '%s' needs %s", npy,
                                tm_dtype_get(t->dtype)->name, a, mi->name, tm_dtype_get(mi->dtype)->name);
            } else if (mi->rndim < 0) {
                if (!shape_fits(mi, t->ndim, t->shape)) {
                    shape_str(mi->ndim, mi->shape, b, sizeof b);
                    s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: shape %s does not fit model input '%s' %s",
                                    npy, a, mi->name, b);
                } else {
                    mi->rndim = t->ndim;
                    memcpy(mi->rshape, t->shape, sizeof mi->rshape);
                }
            } else {
                int same = t->ndim == mi->rndim;
                for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == mi->rshape[d];
                if (!same) {
                    shape_str(mi->rndim, mi->rshape, b, sizeof b);
                    s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: shape %s, but model input '%s' runs with "
                                    "%s (every sample must have the same shape)", npy, a, mi->name, b);
                }
            }
            uint8_t *bytes = NULL;
            uint64_t nb = 0;
            if (!s) s = canonical_bytes(f, t, &bytes, &nb, err);
            char *dst = s ? NULL : tm__aprintf("%s/in_%lld_%d.npy", scratch, (long long)i, k);
            if (!s && !dst) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
            if (!s) s = write_npy(dst, t->dtype, t->ndim, t->shape, bytes, nb, md, err);
            out->files[i * in->n + k] = dst;
            free(bytes);
            free(npy);
            tm_close(f);
        }
    }
    if (!s) hash_final(md, out->sha256);
    EVP_MD_CTX_free(md);
    json_decref(doc);
    free(jpath);
    if (s) tm__ev_samples_free(out, in->n);
    return s;
}

/* ---- random inputs ------------------------------------------------------------------------ */

/* splitmix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number generators", 2014). */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

tm_status tm__ev_random(tm__ev_inputs *in, int64_t n, uint64_t seed, const char *scratch,
                        tm__ev_samples *out, tm_err *err) {
    tm_status s = samples_alloc(out, n, in->n, err);
    if (s) return s;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(md);
        tm__ev_samples_free(out, in->n);
        return tm__err_set(err, TM_E_NOMEM, -1, "sha256: cannot initialise");
    }
    uint64_t state = seed;
    for (int64_t i = 0; !s && i < n; i++) {
        if (!(out->ids[i] = tm__aprintf("r%lld", (long long)i))) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); break; }
        for (int k = 0; !s && k < in->n; k++) {
            const tm__ev_input *mi = &in->in[k];
            int64_t ne = 1;
            for (int d = 0; d < mi->rndim; d++)
                if (!tm__mul_i64_ok(ne, mi->rshape[d], &ne) || ne > ((int64_t)1 << 31)) {
                    s = tm__err_set(err, TM_E_LIMIT, -1, "input '%s': more than 2^31 elements", mi->name);
                    break;
                }
            if (s) break;
            size_t es = (size_t)(tm_dtype_get(mi->dtype)->bits / 8);
            uint8_t *buf = malloc(ne ? (size_t)ne * es : 1);
            if (!buf) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); break; }
            for (int64_t e = 0; e < ne; e++) {
                uint64_t r = splitmix64(&state);
                double u = (double)(r >> 11) * 0x1.0p-53 * 2.0 - 1.0; /* [-1, 1) */
                uint8_t *p = buf + (size_t)e * es;
                switch (mi->dtype) {
                case TM_F32: { float v = (float)u; memcpy(p, &v, 4); break; }
                case TM_F64: memcpy(p, &u, 8); break;
                case TM_F16: tm__st16(p, tm_f32_to_f16((float)u)); break;
                case TM_BOOL: p[0] = (uint8_t)(r & 1); break;
                default: { /* integers: uniform in [0, 16), little-endian */
                    uint64_t v = r % 16;
                    for (size_t b = 0; b < es; b++) p[b] = b ? 0 : (uint8_t)v;
                    break;
                }
                }
            }
            char *dst = tm__aprintf("%s/in_%lld_%d.npy", scratch, (long long)i, k);
            if (!dst) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
            else s = write_npy(dst, mi->dtype, mi->rndim, mi->rshape, buf, (uint64_t)ne * es, md, err);
            out->files[i * in->n + k] = dst;
            free(buf);
        }
    }
    if (!s) hash_final(md, out->sha256);
    EVP_MD_CTX_free(md);
    if (s) tm__ev_samples_free(out, in->n);
    return s;
}

/* ---- SLICES.json -------------------------------------------------------------------------- */

void tm__ev_slices_free(tm__ev_slices *sl) {
    for (int k = 0; k < sl->n; k++) {
        if (sl->names) free(sl->names[k]);
        if (sl->idx) free(sl->idx[k]);
    }
    free(sl->names);
    free(sl->idx);
    free(sl->count);
    memset(sl, 0, sizeof *sl);
}

tm_status tm__ev_load_slices(const char *path, const tm__ev_samples *smp, tm__ev_slices *out,
                             tm_err *err) {
    memset(out, 0, sizeof *out);
    json_t *doc = NULL;
    tm_status s = load_json(path, &doc, err);
    if (!s) s = tm__jschema_validate_named("slices", doc, path, err);
    if (s) { json_decref(doc); return s; }
    json_t *obj = json_object_get(doc, "slices");
    size_t n = json_object_size(obj);
    out->names = tm__calloc(n ? n : 1, sizeof *out->names);
    out->idx = tm__calloc(n ? n : 1, sizeof *out->idx);
    out->count = tm__calloc(n ? n : 1, sizeof *out->count);
    if (!out->names || !out->idx || !out->count) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    const char *key;
    json_t *ids;
    char mb[300];
    json_object_foreach(obj, key, ids) {
        if (s) break;
        int k = out->n++;
        size_t m = json_array_size(ids);
        out->names[k] = tm__strdup(key);
        out->idx[k] = tm__calloc(m, sizeof **out->idx);
        if (!out->names[k] || !out->idx[k]) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); break; }
        for (size_t j = 0; j < m && !s; j++) {
            const char *id = json_string_value(json_array_get(ids, j));
            int64_t hit = -1;
            for (int64_t i = 0; i < smp->n && hit < 0; i++) if (!strcmp(smp->ids[i], id)) hit = i;
            if (hit < 0) {
                s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: $.slices%s[%zu]: no input \"%s\" in the "
                                "--inputs DIR's inputs.json", path, member(key, mb, sizeof mb), j, id);
                break;
            }
            for (size_t q = 0; q < j; q++)
                if (out->idx[k][q] == hit) {
                    s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: $.slices%s[%zu]: input \"%s\" is listed "
                                    "twice (also [%zu])", path, member(key, mb, sizeof mb), j, id, q);
                    break;
                }
            out->idx[k][j] = hit;
            out->count[k] = (int64_t)j + 1;
        }
    }
    json_decref(doc);
    if (s) tm__ev_slices_free(out);
    return s;
}
