/* api.c: the JSON API of `tensormorph serve` (docs/API.md). Every document is built by the same
** function the command prints with --json where one exists (inspect, scalar, qdiff); the rest
** (session, arch, tensor, tile) exist only here. Tiles come from a cache of per-tensor summary
** pyramids, built on a tensor's first view and evicted least-recently-used past a byte bound. */
#include "serve.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static json_t *api_error(int *status, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static json_t *api_error(int *status, int code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    *status = code;
    json_t *d = cli_json_doc("error");
    json_object_set_new(d, "status", json_integer(code));
    json_object_set_new(d, "error", json_string(msg));
    return d;
}

char *serve_base64(const void *data, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (n > (SIZE_MAX - 1) / 4 * 3 - 3) return NULL;
    char *out = malloc((n + 2) / 3 * 4 + 1);
    if (!out) return NULL;
    const unsigned char *p = data;
    size_t o = 0, i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        out[o++] = tab[v >> 18]; out[o++] = tab[(v >> 12) & 63]; out[o++] = tab[(v >> 6) & 63]; out[o++] = tab[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        out[o++] = tab[v >> 18];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        out[o++] = '=';
    }
    out[o] = '\0';
    return out;
}

/* Parse a decimal integer in [lo, hi]; 0 ok. */
static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static const tm_tensor *find_tensor(serve_ctx *c, serve_query_fn q, void *ud, int64_t *ti) {
    const char *name = q(ud, "name");
    *ti = name ? tm_file_find(c->f, name) : -1;
    return tm_file_tensor(c->f, *ti);
}

/* The reference tensor matching tensor ti (tm_ref_pair: same name, else P.weight for P.qweight,
** X for X_quantized, else the name in the other convention; same element count), or -1; *rp
** (when not NULL) how to read it in ti's element order. */
static int64_t ref_index(serve_ctx *c, int64_t ti, tm_tensor_pair *rp) {
    tm_tensor_pair p;
    if (!rp) rp = &p;
    memset(rp, 0, sizeof *rp);
    rp->index = -1;
    if (!c->ref) return -1;
    const tm_tensor *t = tm_file_tensor(c->f, ti);
    int64_t ri = tm_ref_pair(c->ref, c->f, ti, rp);
    const tm_tensor *rt = tm_file_tensor(c->ref, ri);
    return rt && rt->n_elems == t->n_elems ? ri : -1;
}

/* ---- the pyramid cache ------------------------------------------------------------------- */

static void evict(serve_ctx *c) {
    while (c->cached_bytes > c->cache_bytes) {
        int victim = -1;
        for (int k = 0; k < c->n_cache; k++)
            if (c->cache[k].refs == 0 && (victim < 0 || c->cache[k].last_used < c->cache[victim].last_used))
                victim = k;
        if (victim < 0) return;
        c->cached_bytes -= c->cache[victim].bytes;
        tm_tiles_free(c->cache[victim].t);
        c->cache[victim] = c->cache[--c->n_cache];
    }
}

/* Acquire the tiles of (ti, src, split), building the pyramid on first use. Returns the cache
** slot's tm_tiles with a reference held (release with cache_release), or NULL + err. */
static tm_tiles *cache_acquire(serve_ctx *c, int64_t ti, tm_tile_source src, int split, tm_status *st,
                               tm_err *err) {
    pthread_mutex_lock(&c->mu);
    tm_tiles *out = NULL;
    for (int k = 0; k < c->n_cache; k++) {
        serve_tiles *e = &c->cache[k];
        if (e->tensor == ti && e->src == src && e->split == split) {
            e->refs++;
            e->last_used = ++c->clock;
            out = e->t;
            break;
        }
    }
    if (!out) {
        tm_tiles *t = NULL;
        int64_t ri = src == TM_TILE_ERROR_LSB ? ref_index(c, ti, NULL) : -1;
        *st = tm_tiles_open(c->f, ti, c->ref, ri, src, split, &t, err);
        if (!*st) {
            uint64_t budget = c->cache_bytes < SERVE_PYRAMID_BYTES ? c->cache_bytes : SERVE_PYRAMID_BYTES;
            *st = tm_tiles_build_pyramid(t, budget, err);
            if (*st == TM_E_LIMIT) *st = TM_OK;  /* too small a budget: tiles read the tensor */
        }
        if (!*st && c->n_cache == c->cap_cache) {
            int nc = c->cap_cache ? c->cap_cache * 2 : 16;
            serve_tiles *nn = realloc(c->cache, (size_t)nc * sizeof *nn);
            if (!nn) { *st = TM_E_NOMEM; snprintf(err->msg, sizeof err->msg, "out of memory"); }
            else { c->cache = nn; c->cap_cache = nc; }
        }
        if (*st) {
            tm_tiles_free(t);
        } else {
            serve_tiles *e = &c->cache[c->n_cache++];
            e->tensor = ti;
            e->src = src;
            e->split = split;
            e->t = t;
            e->bytes = tm_tiles_bytes(t);
            e->last_used = ++c->clock;
            e->refs = 1;
            c->cached_bytes += e->bytes;
            evict(c);
            out = t;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return out;
}

static void cache_release(serve_ctx *c, tm_tiles *t) {
    pthread_mutex_lock(&c->mu);
    for (int k = 0; k < c->n_cache; k++)
        if (c->cache[k].t == t) c->cache[k].refs--;
    evict(c);
    pthread_mutex_unlock(&c->mu);
}

void serve_ctx_free_cache(serve_ctx *c) {
    for (int k = 0; k < c->n_cache; k++) tm_tiles_free(c->cache[k].t);
    free(c->cache);
    c->cache = NULL;
    c->n_cache = 0;
    tm_qdiff_free(c->qdiff);
    c->qdiff = NULL;
}

/* ---- endpoints ----------------------------------------------------------------------------- */

static json_t *api_session(serve_ctx *c) {
    json_t *d = cli_json_doc("session");
    json_object_set_new(d, "version", json_string(TM_VERSION_STRING));
    json_object_set_new(d, "path", json_string(c->path));
    json_object_set_new(d, "ref", c->ref ? json_string(c->ref_path) : json_null());
    json_object_set_new(d, "max_tile_side", json_integer(SERVE_MAX_TILE_SIDE));
    json_t *cache = json_object();
    pthread_mutex_lock(&c->mu);
    json_object_set_new(cache, "bytes", json_integer((json_int_t)c->cached_bytes));
    json_object_set_new(cache, "limit_bytes", json_integer((json_int_t)c->cache_bytes));
    json_object_set_new(cache, "n_pyramids", json_integer(c->n_cache));
    pthread_mutex_unlock(&c->mu);
    json_object_set_new(d, "pyramid_cache", cache);
    return d;
}

static json_t *arch_node_json(const tm_file *f, const tm_arch *a, int64_t k) {
    const tm_arch_node *x = &a->nodes[k];
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(x->name));
    json_object_set_new(o, "path", json_string(x->path));
    json_object_set_new(o, "n_params", json_integer(x->n_params));
    json_object_set_new(o, "bytes", json_integer((json_int_t)x->n_bytes));
    json_object_set_new(o, "n_tensors", json_integer(x->n_tensors));
    json_object_set_new(o, "dtype", json_string(x->dtype));
    json_object_set_new(o, "scheme", json_string(x->scheme));
    json_object_set_new(o, "boundary", json_boolean(x->boundary));
    const tm_tensor *t = x->tensor >= 0 ? tm_file_tensor(f, x->tensor) : NULL;
    if (t) json_object_set_new(o, "tensor", json_string(t->name)); /* an ONNX node's weight */
    cli_json_set_label(o, f, t); /* the tensor's own label ("scheme" may merge: "mixed") */
    json_t *ch = json_array();
    for (int64_t c = x->first_child; c >= 0; c = a->nodes[c].next_sibling)
        json_array_append_new(ch, arch_node_json(f, a, c));
    json_object_set_new(o, "children", ch);
    return o;
}

/* The "sensitivity" field of /api/v1/arch (serve --sensitivity FILE, docs/sensitivity.md): per
** unit its rank (1 = most sensitive), measured KLDs, weight SQNR, tensors and the plan's scheme
** for it (null without a plan), for the Architecture view to colour each module by. */
static json_t *sensitivity_json(json_t *doc) {
    json_t *o = json_object(), *units = json_array(), *plan = json_object_get(doc, "plan");
    json_t *as = json_object_get(plan, "assignments");
    size_t i;
    json_t *u;
    json_array_foreach(json_object_get(doc, "units"), i, u) {
        json_t *e = json_object();
        static const char *const keys[] = {"name", "rank", "kld_mean_only", "kld_mean_all_but", "weight_sqnr_db", "tensors"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            json_object_set(e, keys[k], json_object_get(u, keys[k]) ? json_object_get(u, keys[k]) : json_null());
        json_t *sc = json_object_get(as, json_string_value(json_object_get(u, "name")));
        json_object_set(e, "scheme", sc ? sc : json_null());
        json_array_append_new(units, e);
    }
    json_object_set(o, "scheme", json_object_get(doc, "scheme"));
    json_object_set(o, "unit", json_object_get(doc, "unit"));
    json_object_set(o, "spearman_weight_vs_kld", json_object_get(doc, "spearman_weight_vs_kld"));
    json_object_set_new(o, "units", units);
    json_object_set_new(o, "recipe", json_is_string(json_object_get(plan, "recipe")) ? json_copy(json_object_get(plan, "recipe")) : json_null());
    json_object_set_new(o, "met", json_is_boolean(json_object_get(plan, "met")) ? json_copy(json_object_get(plan, "met")) : json_null());
    /* the plan as the run wrote it (file_type + tensor_types, or rules; assignments; measured
    ** bytes, KLD, top-1), less its search steps: "start from this plan" in the view */
    json_object_set(o, "form", json_object_get(doc, "form") ? json_object_get(doc, "form") : json_null());
    json_t *pc = json_is_object(plan) ? json_deep_copy(plan) : json_null();
    if (json_is_object(pc)) json_object_del(pc, "steps");
    json_object_set_new(o, "plan", pc);
    return o;
}

static json_t *api_arch(serve_ctx *c, int *status) {
    tm_arch *a;
    tm_err err;
    tm_status s = tm_arch_build(c->f, &a, &err);
    if (s) return api_error(status, 500, "%s", err.msg);
    json_t *d = cli_json_doc("arch");
    json_object_set_new(d, "path", json_string(c->path));
    json_object_set_new(d, "n_boundaries", json_integer(a->n_boundaries));
    json_object_set_new(d, "root", arch_node_json(c->f, a, 0));
    tm_arch_free(a);
    if (c->sensitivity) json_object_set_new(d, "sensitivity", sensitivity_json(c->sensitivity));
    return d;
}

static int parse_mode(const char *m, tm_tile_source *src) {
    if (!m || !strcmp(m, "value") || !strcmp(m, "abs") || !strcmp(m, "groups")) { *src = TM_TILE_VALUE; return 0; }
    if (!strcmp(m, "error")) { *src = TM_TILE_ERROR_LSB; return 0; }
    return -1;
}

static json_t *api_tensor(serve_ctx *c, serve_query_fn q, void *ud, int *status) {
    int64_t ti, split = -1;
    const tm_tensor *t = find_tensor(c, q, ud, &ti);
    if (!t) return api_error(status, 404, "no tensor named '%s'", q(ud, "name") ? q(ud, "name") : "");
    if (q(ud, "split") && parse_i64(q(ud, "split"), 0, t->ndim, &split))
        return api_error(status, 400, "split must be an integer in [0, %d]", t->ndim);
    tm_tile_source src;
    const char *mode = q(ud, "mode");
    if (parse_mode(mode, &src)) return api_error(status, 400, "mode must be value, abs, groups or error");
    if (mode && !strcmp(mode, "groups") && !t->quant) return api_error(status, 400, "tensor '%s' is not quantized: it has no groups", t->name);
    int64_t ri = ref_index(c, ti, NULL);
    if (src == TM_TILE_ERROR_LSB && (!t->quant || ri < 0))
        return api_error(status, 400, "tensor '%s': the error view needs a quantized tensor and --ref with a tensor of that name", t->name);
    tm_err err;
    tm_status s = TM_OK;
    tm_tiles *tl = cache_acquire(c, ti, src, (int)split, &s, &err);
    if (!tl) return api_error(status, s == TM_E_INVALID_ARG || s == TM_E_UNSUPPORTED ? 400 : 500, "%s", err.msg);
    double lo, hi;
    s = tm_tiles_range(tl, &lo, &hi, &err);
    json_t *d = cli_json_doc("tensor");
    json_object_set_new(d, "name", json_string(t->name));
    json_object_set_new(d, "dtype", json_string(tm_dtype_get(t->dtype)->name));
    json_object_set_new(d, "shape", cli_json_shape(t->ndim, t->shape));
    json_object_set_new(d, "split", json_integer(tm_tiles_split(tl)));
    json_object_set_new(d, "rows", json_integer(tm_tiles_rows(tl)));
    json_object_set_new(d, "cols", json_integer(tm_tiles_cols(tl)));
    json_object_set_new(d, "mode", json_string(mode ? mode : "value"));
    json_object_set_new(d, "quantized", json_boolean(t->quant != NULL));
    json_object_set_new(d, "quantization", cli_quant_json(c->f, t));
    char sch[TM_QLABEL_MAX];
    json_object_set_new(d, "scheme", json_string(t->quant ? tm_qtensor_label(c->f, t, sch, sizeof sch) : "dense"));
    cli_json_set_label(d, c->f, t);
    json_object_set_new(d, "has_ref", json_boolean(ri >= 0));
    json_object_set_new(d, "pyramid_step", json_integer(tm_tiles_pyramid_step(tl)));
    json_object_set_new(d, "pyramid_bytes", json_integer((json_int_t)tm_tiles_bytes(tl)));
    json_object_set_new(d, "min", s ? json_null() : cli_json_num(lo));
    json_object_set_new(d, "max", s ? json_null() : cli_json_num(hi));
    cache_release(c, tl);
    if (s) { json_decref(d); return api_error(status, 500, "%s", err.msg); }
    return d;
}

static json_t *api_tile(serve_ctx *c, serve_query_fn q, void *ud, int *status) {
    int64_t ti, split = -1, step = 1, x = 0, y = 0, w = 256, h = 256;
    const tm_tensor *t = find_tensor(c, q, ud, &ti);
    if (!t) return api_error(status, 404, "no tensor named '%s'", q(ud, "name") ? q(ud, "name") : "");
    if (q(ud, "split") && parse_i64(q(ud, "split"), 0, t->ndim, &split))
        return api_error(status, 400, "split must be an integer in [0, %d]", t->ndim);
    if ((q(ud, "step") && parse_i64(q(ud, "step"), 1, TM_TILE_MAX_STEP, &step)) || (step & (step - 1)))
        return api_error(status, 400, "step must be a power of two in [1, 2^40]");
    if ((q(ud, "x") && parse_i64(q(ud, "x"), 0, INT64_MAX / 4 / step, &x)) ||
        (q(ud, "y") && parse_i64(q(ud, "y"), 0, INT64_MAX / 4 / step, &y)))
        return api_error(status, 400, "x and y must be non-negative pixel offsets");
    if ((q(ud, "w") && parse_i64(q(ud, "w"), 1, SERVE_MAX_TILE_SIDE, &w)) ||
        (q(ud, "h") && parse_i64(q(ud, "h"), 1, SERVE_MAX_TILE_SIDE, &h)))
        return api_error(status, 400, "w and h must be integers in [1, %d]", SERVE_MAX_TILE_SIDE);
    const char *mode = q(ud, "mode") ? q(ud, "mode") : "value";
    tm_tile_source src;
    if (parse_mode(mode, &src)) return api_error(status, 400, "mode must be value, abs, groups or error");
    int groups = !strcmp(mode, "groups");
    if (groups && !t->quant) return api_error(status, 400, "tensor '%s' is not quantized: it has no groups", t->name);
    if (src == TM_TILE_ERROR_LSB && (!t->quant || ref_index(c, ti, NULL) < 0))
        return api_error(status, 400, "tensor '%s': the error view needs a quantized tensor and --ref with a tensor of that name", t->name);
    tm_err err;
    tm_status s = TM_OK;
    tm_tiles *tl = cache_acquire(c, ti, src, (int)split, &s, &err);
    if (!tl) return api_error(status, s == TM_E_INVALID_ARG || s == TM_E_UNSUPPORTED ? 400 : 500, "%s", err.msg);
    tm_tile_req req = {step, x, y, (int)w, (int)h};
    size_t npx = (size_t)w * (size_t)h;
    json_t *d = cli_json_doc("tile");
    json_object_set_new(d, "name", json_string(t->name));
    json_object_set_new(d, "mode", json_string(mode));
    json_object_set_new(d, "rows", json_integer(tm_tiles_rows(tl)));
    json_object_set_new(d, "cols", json_integer(tm_tiles_cols(tl)));
    json_object_set_new(d, "step", json_integer(step));
    json_object_set_new(d, "x", json_integer(x));
    json_object_set_new(d, "y", json_integer(y));
    json_object_set_new(d, "w", json_integer(w));
    json_object_set_new(d, "h", json_integer(h));
    if (groups) {
        int64_t *g = malloc(npx * sizeof(int64_t));
        int32_t *g32 = malloc(npx * sizeof(int32_t));
        if (!g || !g32) { s = TM_E_NOMEM; snprintf(err.msg, sizeof err.msg, "out of memory"); }
        else s = tm_tiles_groups(tl, &req, g, &err);
        for (size_t k = 0; !s && k < npx; k++) {
            if (g[k] > INT32_MAX) { s = TM_E_LIMIT; snprintf(err.msg, sizeof err.msg, "more than 2^31 groups"); }
            else g32[k] = (int32_t)g[k];
        }
        char *b = s ? NULL : serve_base64(g32, npx * sizeof(int32_t));
        if (!s && !b) { s = TM_E_NOMEM; snprintf(err.msg, sizeof err.msg, "out of memory"); }
        if (!s) {
            json_object_set_new(d, "encoding", json_string("i32le-base64"));
            json_object_set_new(d, "groups", json_string(b));
        }
        free(b); free(g); free(g32);
    } else {
        float *st[4];
        static const char *names[4] = {"min", "max", "mean", "absmax"};
        for (int k = 0; k < 4; k++) st[k] = malloc(npx * sizeof(float));
        if (!st[0] || !st[1] || !st[2] || !st[3]) { s = TM_E_NOMEM; snprintf(err.msg, sizeof err.msg, "out of memory"); }
        else s = tm_tiles_read(tl, &req, st[0], st[1], st[2], st[3], &err);
        if (!s) json_object_set_new(d, "encoding", json_string("f32le-base64"));
        for (int k = 0; k < 4; k++) {
            if (!s) {
                char *b = serve_base64(st[k], npx * sizeof(float));
                if (!b) { s = TM_E_NOMEM; snprintf(err.msg, sizeof err.msg, "out of memory"); }
                else json_object_set_new(d, names[k], json_string(b));
                free(b);
            }
        }
        for (int k = 0; k < 4; k++) free(st[k]);
    }
    cache_release(c, tl);
    if (s) { json_decref(d); return api_error(status, s == TM_E_INVALID_ARG ? 400 : 500, "%s", err.msg); }
    return d;
}

static json_t *api_scalar(serve_ctx *c, serve_query_fn q, void *ud, int *status) {
    int64_t ti;
    const tm_tensor *t = find_tensor(c, q, ud, &ti);
    if (!t) return api_error(status, 404, "no tensor named '%s'", q(ud, "name") ? q(ud, "name") : "");
    const char *idx = q(ud, "index");
    int64_t coords[TM_MAX_DIMS];
    int nc = idx ? cli_parse_coords(idx, coords, TM_MAX_DIMS) : -1;
    if (nc < 0) return api_error(status, 400, "index must be comma-separated integers");
    if (nc != t->ndim && !(t->ndim == 0 && nc == 1 && coords[0] == 0))
        return api_error(status, 400, "tensor '%s' has %d dims: index needs %d coordinate(s), got %d", t->name, t->ndim, t->ndim, nc);
    int64_t flat = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (coords[d] < 0 || coords[d] >= t->shape[d])
            return api_error(status, 400, "coordinate %d is %" PRId64 ", outside [0, %" PRId64 ")", d, coords[d], t->shape[d]);
        flat = flat * t->shape[d] + coords[d];
    }
    tm_tensor_pair rp;
    int64_t ri = ref_index(c, ti, &rp);
    tm_qelement qe;
    double value, ref_value;
    tm_err err;
    tm_status s = scalar_lookup(c->f, ti, flat, ri >= 0 ? c->ref : NULL, &rp, &qe, &value, &ref_value, &err);
    if (s) return api_error(status, 500, "%s", err.msg);
    return scalar_json(c->f, t, nc, coords, flat, &qe, value, ri >= 0, ref_value);
}

static json_t *api_qdiff(serve_ctx *c, int *status) {
    if (!c->ref) return api_error(status, 404, "no reference: start serve with --ref REF");
    pthread_mutex_lock(&c->mu);
    tm_status s = TM_OK;
    tm_err err;
    if (!c->qdiff) {
        tm_qdiff_params p;
        memset(&p, 0, sizeof p);
        p.n_threads = g_cli.threads;
        s = tm_qdiff(c->ref, c->f, &p, &c->qdiff, &err);
        if (!s) qdiff_apply_manifest(c->path, c->qdiff);  /* exactly as `qdiff` does */
    }
    json_t *d = s ? NULL : qdiff_json(c->qdiff, c->f, c->ref_path, c->path);
    pthread_mutex_unlock(&c->mu);
    return d ? d : api_error(status, 500, "%s", err.msg);
}

json_t *serve_api(serve_ctx *c, const char *url, serve_query_fn q, void *ud, int *status) {
    *status = 200;
    if (!strcmp(url, "/api/v1/session")) return api_session(c);
    if (!strcmp(url, "/api/v1/inspect")) {
        json_t *d = inspect_json(c->f, c->path, NULL, 1);
        return d ? d : api_error(status, 500, "out of memory");
    }
    if (!strcmp(url, "/api/v1/arch")) return api_arch(c, status);
    if (!strcmp(url, "/api/v1/graph")) {
        json_t *d = api_graph(c, status); /* api_graph.c */
        return d ? d : api_error(status, 500, "the graph of %.200s cannot be walked", c->path);
    }
    if (!strcmp(url, "/api/v1/tensor")) return api_tensor(c, q, ud, status);
    if (!strcmp(url, "/api/v1/tile")) return api_tile(c, q, ud, status);
    if (!strcmp(url, "/api/v1/scalar")) return api_scalar(c, q, ud, status);
    if (!strcmp(url, "/api/v1/qdiff")) return api_qdiff(c, status);
    if (!strcmp(url, "/api/v1/calibrate")) return api_calibrate(c, q, ud, status); /* api_calib.c */
    if (!strcmp(url, "/api/v1/release")) return api_release(c, status); /* api_release.c */
    return api_error(status, 404, "no API endpoint %.200s", url);
}
