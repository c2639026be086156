/*
** onnx_write.c: rewrite an ONNX model's weights as DequantizeLinear inputs (onnx_write.h).
**
** The model is decoded with the protobuf-c code generated from onnx.proto (onnx.pb-c.h, as
** src/formats/onnx.c does) and packed again with onnx__model_proto__pack, so every field this
** file does not touch (other nodes, value_info, metadata, doc strings, opset imports, functions,
** unknown fields of newer ONNX versions, which protobuf-c keeps) is written back unchanged.
** Edits live in side tables (per graph: initializers dropped and added, nodes put first,
** Constant nodes replaced) and are spliced into the message only for the pack call.
*/
#include "onnx_write.h"
#include "tensormorph/onnx_opset.h"

#include "onnx.pb-c.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>

#define OX_MAX_FILE  (2ull << 30) /* protobuf's message size limit */
#define OX_MAX_DEPTH 64           /* nested subgraphs, as the reader */

typedef struct ox_graph {
    Onnx__GraphProto   *g;
    char               *path;
    uint8_t            *drop_init;   /* [n_initializer]                                    */
    Onnx__TensorProto **add_init;  size_t n_add_init, cap_add_init;
    Onnx__NodeProto   **pre;       size_t n_pre, cap_pre;      /* nodes put first          */
    Onnx__NodeProto  ***repl;      /* [n_node]: replacement list of a Constant node, or NULL */
    size_t             *n_repl;    /* [n_node]                                             */
    /* originals while packing */
    size_t n_node0, n_init0;
    Onnx__NodeProto **node0; Onnx__TensorProto **init0;
    Onnx__NodeProto **tmp_nodes; Onnx__TensorProto **tmp_inits; /* spliced arrays */
} ox_graph;

typedef struct ox_wdef {
    tm__oxweight pub;
    int64_t      gi;        /* graph index                                                */
    int64_t      idx;       /* initializer or node index in that graph                    */
    const Onnx__TensorProto *t;
    int          replaced;
} ox_wdef;

struct tm__oxmodel {
    Onnx__ModelProto *mp;
    uint8_t   *bytes;
    ox_graph  *graphs;  int64_t n_graphs, cap_graphs;
    ox_wdef   *w;       int64_t n_w, cap_w;
    json_t    *names;   /* every tensor/value name of the model -> true                       */
    void     **allocs;  int64_t n_allocs, cap_allocs;   /* everything the edits own          */
    const char *external_name;
    /* opset edits */
    char      *set_domain[4]; int64_t set_version[4]; int n_set;
    int64_t    ir_min;
};

/* ---------------------------------------------------------------------------------------- */
/* small helpers                                                                              */
/* ---------------------------------------------------------------------------------------- */

static int grow(void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 8;
    while (nc < need) nc *= 2;
    void *p = realloc(*arr, nc * elem);
    if (!p) return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

/* An allocation owned by the model (freed by tm__ox_free). */
static void *own(tm__oxmodel *m, void *p) {
    if (!p) return NULL;
    size_t cap = (size_t)m->cap_allocs;
    if (grow((void **)&m->allocs, &cap, (size_t)m->n_allocs + 1, sizeof(void *))) { free(p); return NULL; }
    m->cap_allocs = (int64_t)cap;
    m->allocs[m->n_allocs++] = p;
    return p;
}
static void *own_calloc(tm__oxmodel *m, size_t n, size_t sz) { return own(m, tm__calloc(n ? n : 1, sz)); }
static char *own_str(tm__oxmodel *m, const char *fmt, const char *a, const char *b) {
    return own(m, tm__aprintf(fmt, a, b ? b : ""));
}

static int is_std(const char *d) { return !d || !*d || !strcmp(d, "ai.onnx"); }

static int64_t attr_i(const Onnx__NodeProto *n, const char *name, int64_t dflt) {
    for (size_t k = 0; k < n->n_attribute; k++) {
        const Onnx__AttributeProto *a = n->attribute[k];
        if (a && a->name && !strcmp(a->name, name) && a->has_i) return a->i;
    }
    return dflt;
}

static void name_add(tm__oxmodel *m, const char *s) {
    if (s && *s) json_object_set_new(m->names, s, json_true());
}

/* ---------------------------------------------------------------------------------------- */
/* loading: graphs, consumers, weights                                                        */
/* ---------------------------------------------------------------------------------------- */

typedef struct cons_info {
    char ops[160];
    int  axis;         /* -1 none yet, -2 conflict */
    int  only_matmul;
} cons_info;

static tm_status add_graph(tm__oxmodel *m, Onnx__GraphProto *g, const char *path, int depth,
                           tm_err *err) {
    if (depth > OX_MAX_DEPTH)
        return tm__err_set(err, TM_E_LIMIT, -1, "subgraphs nest more than %d deep", OX_MAX_DEPTH);
    size_t cap = (size_t)m->cap_graphs;
    if (grow((void **)&m->graphs, &cap, (size_t)m->n_graphs + 1, sizeof(ox_graph)))
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    m->cap_graphs = (int64_t)cap;
    ox_graph *og = &m->graphs[m->n_graphs++];
    memset(og, 0, sizeof *og);
    og->g = g;
    og->path = tm__strdup(path);
    og->drop_init = tm__calloc(g->n_initializer ? g->n_initializer : 1, 1);
    og->repl = tm__calloc(g->n_node ? g->n_node : 1, sizeof *og->repl);
    og->n_repl = tm__calloc(g->n_node ? g->n_node : 1, sizeof *og->n_repl);
    if (!og->path || !og->drop_init || !og->repl || !og->n_repl)
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (size_t k = 0; k < g->n_initializer; k++) {
        const Onnx__TensorProto *t = g->initializer[k];
        if (!t) continue;
        name_add(m, t->name);
        if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL &&
            !m->external_name)
            m->external_name = t->name ? t->name : "?";
    }
    for (size_t k = 0; k < g->n_input; k++) if (g->input[k]) name_add(m, g->input[k]->name);
    for (size_t ni = 0; ni < g->n_node; ni++) {
        Onnx__NodeProto *n = g->node[ni];
        if (!n) continue;
        for (size_t k = 0; k < n->n_output; k++) name_add(m, n->output[k]);
        if (n->name) name_add(m, n->name);
        for (size_t k = 0; k < n->n_attribute; k++) {
            Onnx__AttributeProto *a = n->attribute[k];
            if (!a) continue;
            if (a->t && a->t->has_data_location &&
                a->t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL && !m->external_name)
                m->external_name = n->n_output ? n->output[0] : "?";
            char sub[512];
            const char *nn = n->name && *n->name ? n->name : NULL;
            if (a->g) {
                if (nn) snprintf(sub, sizeof sub, "%s%s%s/%s", path, *path ? "/" : "", nn, a->name ? a->name : "?");
                else snprintf(sub, sizeof sub, "%s%s#%zu/%s", path, *path ? "/" : "", ni, a->name ? a->name : "?");
                tm_status s = add_graph(m, a->g, sub, depth + 1, err);
                if (s) return s;
            }
            for (size_t j = 0; j < a->n_graphs; j++) {
                if (!a->graphs[j]) continue;
                if (nn) snprintf(sub, sizeof sub, "%s%s%s/%s[%zu]", path, *path ? "/" : "", nn, a->name ? a->name : "?", j);
                else snprintf(sub, sizeof sub, "%s%s#%zu/%s[%zu]", path, *path ? "/" : "", ni, a->name ? a->name : "?", j);
                tm_status s = add_graph(m, a->graphs[j], sub, depth + 1, err);
                if (s) return s;
            }
        }
    }
    return TM_OK;
}

static tm_status add_weight(tm__oxmodel *m, int64_t gi, int64_t idx, int cnode,
                            const Onnx__TensorProto *t, const char *name, const cons_info *ci,
                            json_t *graph_inputs, tm_err *err) {
    size_t cap = (size_t)m->cap_w;
    if (grow((void **)&m->w, &cap, (size_t)m->n_w + 1, sizeof(ox_wdef)))
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    m->cap_w = (int64_t)cap;
    ox_wdef *w = &m->w[m->n_w++];
    memset(w, 0, sizeof *w);
    w->gi = gi;
    w->idx = idx;
    w->t = t;
    w->pub.name = name;
    w->pub.graph = m->graphs[gi].path;
    w->pub.constant_node = cnode;
    w->pub.elem_type = t->has_data_type ? t->data_type : 0;
    w->pub.ndim = t->n_dims <= 8 ? (int)t->n_dims : -1;
    for (int d = 0; d < w->pub.ndim; d++) w->pub.shape[d] = t->dims[d];
    w->pub.external = t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    w->pub.graph_input = json_object_get(graph_inputs, name) != NULL;
    snprintf(w->pub.consumers, sizeof w->pub.consumers, "%s", ci->ops);
    w->pub.axis = ci->axis;
    w->pub.only_matmul = ci->only_matmul;
    static const char *const sfx[] = {"_quantized", "_scale", "_zero_point", "_DequantizeLinear",
                                      "_dequantized", "_Cast"};
    for (size_t k = 0; k < sizeof sfx / sizeof sfx[0]; k++) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s%s", name, sfx[k]);
        if (json_object_get(m->names, buf)) w->pub.name_clash = 1;
    }
    return TM_OK;
}

static tm_status scan(tm__oxmodel *m, tm_err *err) {
    tm_status s = add_graph(m, m->mp->graph, "", 0, err);
    if (s) return s;
    /* consumers: any graph may read a weight of an enclosing graph */
    json_t *cons = json_object(), *graph_inputs = json_object();
    cons_info *ci = NULL;
    size_t n_ci = 0, cap_ci = 0;
    if (!cons || !graph_inputs) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); goto done; }
    for (int64_t gi = 0; gi < m->n_graphs; gi++) {
        Onnx__GraphProto *g = m->graphs[gi].g;
        for (size_t k = 0; k < g->n_input; k++)
            if (g->input[k] && g->input[k]->name) json_object_set_new(graph_inputs, g->input[k]->name, json_true());
        for (size_t ni = 0; ni < g->n_node; ni++) {
            const Onnx__NodeProto *n = g->node[ni];
            if (!n || !n->op_type || !is_std(n->domain) || n->n_input < 2 || !n->input[1] || !*n->input[1]) continue;
            int ax = tm_onnx_channel_axis(n->op_type, (int)attr_i(n, "transB", 0));
            if (ax < 0) continue;
            json_t *j = json_object_get(cons, n->input[1]);
            cons_info *c;
            if (!j) {
                if (grow((void **)&ci, &cap_ci, n_ci + 1, sizeof *ci)) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); goto done; }
                c = &ci[n_ci];
                memset(c, 0, sizeof *c);
                c->axis = ax;
                c->only_matmul = 1;
                json_object_set_new(cons, n->input[1], json_integer((json_int_t)n_ci));
                n_ci++;
            } else {
                c = &ci[json_integer_value(j)];
                if (c->axis != ax) c->axis = -2;
            }
            if (strcmp(n->op_type, "MatMul")) c->only_matmul = 0;
            if (!strstr(c->ops, n->op_type)) {
                size_t l = strlen(c->ops);
                snprintf(c->ops + l, sizeof c->ops - l, "%s%s", l ? "," : "", n->op_type);
            }
        }
    }
    for (int64_t gi = 0; gi < m->n_graphs && !s; gi++) {
        Onnx__GraphProto *g = m->graphs[gi].g;
        for (size_t k = 0; k < g->n_initializer && !s; k++) {
            const Onnx__TensorProto *t = g->initializer[k];
            json_t *j = t && t->name ? json_object_get(cons, t->name) : NULL;
            if (j) s = add_weight(m, gi, (int64_t)k, 0, t, t->name, &ci[json_integer_value(j)], graph_inputs, err);
        }
        for (size_t ni = 0; ni < g->n_node && !s; ni++) {
            const Onnx__NodeProto *n = g->node[ni];
            if (!n || !n->op_type || strcmp(n->op_type, "Constant") || !is_std(n->domain) || n->n_output < 1) continue;
            json_t *j = json_object_get(cons, n->output[0]);
            if (!j) continue;
            for (size_t k = 0; k < n->n_attribute && !s; k++) {
                const Onnx__AttributeProto *a = n->attribute[k];
                if (a && a->name && !strcmp(a->name, "value") && a->t)
                    s = add_weight(m, gi, (int64_t)ni, 1, a->t, n->output[0], &ci[json_integer_value(j)], graph_inputs, err);
            }
        }
    }
done:
    json_decref(cons);
    json_decref(graph_inputs);
    free(ci);
    return s;
}

tm_status tm__ox_load(const char *path, tm__oxmodel **out, tm_err *err) {
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) return tm__err_sys(err, errno, "%s: cannot open", path);
    struct stat st;
    if (fstat(fileno(fp), &st) != 0) {
        int e = errno;
        fclose(fp);
        return tm__err_sys(err, e, "%s: cannot stat", path);
    }
    if ((uint64_t)st.st_size > OX_MAX_FILE) {
        fclose(fp);
        return tm__err_set(err, TM_E_LIMIT, 0, "%s: %lld bytes, more than the 2 GiB a protobuf message "
                           "may hold (models this large keep weights external; not supported for "
                           "ONNX output)", path, (long long)st.st_size);
    }
    tm__oxmodel *m = tm__calloc(1, sizeof *m);
    size_t n = (size_t)st.st_size;
    if (m) m->bytes = malloc(n ? n : 1);
    if (m) m->names = json_object();
    if (!m || !m->bytes || !m->names) {
        fclose(fp);
        tm__ox_free(m);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory (%zu bytes)", n);
    }
    size_t got = fread(m->bytes, 1, n, fp);
    int e = ferror(fp) ? errno : 0;
    fclose(fp);
    if (got != n) {
        tm__ox_free(m);
        return e ? tm__err_sys(err, e, "%s: read failed", path)
                 : tm__err_set(err, TM_E_IO, -1, "%s: file shrank while reading", path);
    }
    m->mp = onnx__model_proto__unpack(NULL, n, m->bytes);
    if (!m->mp || !m->mp->graph) {
        tm__ox_free(m);
        return tm__err_set(err, TM_E_CORRUPT, 0, "%s: not a valid ONNX model (does not decode as an "
                           "onnx.ModelProto with a graph)", path);
    }
    tm_status s = scan(m, err);
    if (s) {
        tm__ox_free(m);
        return s;
    }
    *out = m;
    return TM_OK;
}

void tm__ox_free(tm__oxmodel *m) {
    if (!m) return;
    for (int64_t gi = 0; gi < m->n_graphs; gi++) {
        ox_graph *og = &m->graphs[gi];
        free(og->path);
        free(og->drop_init);
        free(og->add_init);
        free(og->pre);
        free(og->repl);
        free(og->n_repl);
    }
    free(m->graphs);
    free(m->w);
    for (int64_t k = 0; k < m->n_allocs; k++) free(m->allocs[k]);
    free(m->allocs);
    for (int k = 0; k < m->n_set; k++) free(m->set_domain[k]);
    if (m->mp) onnx__model_proto__free_unpacked(m->mp, NULL);
    json_decref(m->names);
    free(m->bytes);
    free(m);
}

int64_t tm__ox_n_weights(const tm__oxmodel *m) { return m->n_w; }
const tm__oxweight *tm__ox_weight(const tm__oxmodel *m, int64_t i) {
    return i >= 0 && i < m->n_w ? &m->w[i].pub : NULL;
}
int tm__ox_has_external(const tm__oxmodel *m, const char **name) {
    if (name) *name = m->external_name;
    return m->external_name != NULL;
}

int64_t tm__ox_opset(const tm__oxmodel *m, const char *domain) {
    for (size_t k = 0; k < m->mp->n_opset_import; k++) {
        const Onnx__OperatorSetIdProto *o = m->mp->opset_import[k];
        if (!o) continue;
        int std = is_std(o->domain);
        if ((is_std(domain) && std) || (!is_std(domain) && o->domain && !strcmp(o->domain, domain)))
            return o->has_version ? o->version : 0;
    }
    return 0;
}

int64_t tm__ox_ir_version(const tm__oxmodel *m) { return m->mp->has_ir_version ? m->mp->ir_version : 0; }

int tm__ox_first_unstable(const tm__oxmodel *m, int64_t from, int64_t to, const char **op,
                          const char **node, const char **graph, int64_t *changed_at) {
    for (int64_t gi = 0; gi < m->n_graphs; gi++) {
        const Onnx__GraphProto *g = m->graphs[gi].g;
        for (size_t ni = 0; ni < g->n_node; ni++) {
            const Onnx__NodeProto *n = g->node[ni];
            if (!n || !is_std(n->domain)) continue;
            int64_t at;
            if (!tm_onnx_op_stable(n->op_type ? n->op_type : "", from, to, &at)) {
                if (op) *op = n->op_type ? n->op_type : "";
                if (node) *node = n->name ? n->name : "";
                if (graph) *graph = m->graphs[gi].path;
                if (changed_at) *changed_at = at;
                return 1;
            }
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* edits                                                                                      */
/* ---------------------------------------------------------------------------------------- */

static Onnx__TensorProto *new_tensor(tm__oxmodel *m, const char *name, int type, int ndim,
                                     const int64_t *shape, const uint8_t *data, size_t nbytes) {
    Onnx__TensorProto *t = own_calloc(m, 1, sizeof *t);
    if (!t) return NULL;
    Onnx__TensorProto init = ONNX__TENSOR_PROTO__INIT;
    *t = init;
    t->name = (char *)name;
    t->has_data_type = 1;
    t->data_type = type;
    t->n_dims = (size_t)ndim;
    if (ndim > 0) {
        t->dims = own_calloc(m, (size_t)ndim, sizeof(int64_t));
        if (!t->dims) return NULL;
        memcpy(t->dims, shape, (size_t)ndim * sizeof(int64_t));
    }
    t->has_raw_data = 1;
    t->raw_data.len = nbytes;
    t->raw_data.data = (uint8_t *)data;
    return t;
}

static Onnx__AttributeProto *attr_int(tm__oxmodel *m, const char *name, int64_t v) {
    Onnx__AttributeProto *a = own_calloc(m, 1, sizeof *a);
    if (!a) return NULL;
    Onnx__AttributeProto init = ONNX__ATTRIBUTE_PROTO__INIT;
    *a = init;
    a->name = (char *)name;
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_i = 1;
    a->i = v;
    return a;
}

static Onnx__NodeProto *new_node(tm__oxmodel *m, const char *name, const char *op, const char *domain,
                                 int n_in, char **in, char *out_name, int n_attr,
                                 Onnx__AttributeProto **attrs) {
    Onnx__NodeProto *n = own_calloc(m, 1, sizeof *n);
    char **outs = own_calloc(m, 1, sizeof(char *));
    if (!n || !outs) return NULL;
    Onnx__NodeProto init = ONNX__NODE_PROTO__INIT;
    *n = init;
    n->name = (char *)name;
    n->op_type = (char *)op;
    n->domain = domain && *domain ? (char *)domain : NULL;
    n->n_input = (size_t)n_in;
    n->input = in;
    outs[0] = out_name;
    n->n_output = 1;
    n->output = outs;
    n->n_attribute = (size_t)n_attr;
    n->attribute = attrs;
    return n;
}

/* A Constant node whose `value` is t, output t->name. */
static Onnx__NodeProto *const_node(tm__oxmodel *m, Onnx__TensorProto *t) {
    Onnx__AttributeProto *a = own_calloc(m, 1, sizeof *a);
    Onnx__AttributeProto **as = own_calloc(m, 1, sizeof *as);
    char *nm = own_str(m, "%s_Constant%s", t->name, "");
    if (!a || !as || !nm) return NULL;
    Onnx__AttributeProto init = ONNX__ATTRIBUTE_PROTO__INIT;
    *a = init;
    a->name = "value";
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
    a->t = t;
    as[0] = a;
    return new_node(m, nm, "Constant", "", 0, NULL, t->name, 1, as);
}

/* codes (one per byte) as the bytes of an ONNX tensor of `type` */
static uint8_t *encode_codes(tm__oxmodel *m, int type, const uint8_t *codes, int64_t n, size_t *nb) {
    int four = type == TM_ONNX_INT4 || type == TM_ONNX_UINT4;
    *nb = four ? (size_t)((n + 1) / 2) : (size_t)n;
    uint8_t *b = own_calloc(m, *nb, 1);
    if (!b) return NULL;
    if (!four) { memcpy(b, codes, (size_t)n); return b; }
    for (int64_t k = 0; k < n; k++) b[k / 2] |= (uint8_t)((codes[k] & 0x0f) << (4 * (k & 1)));
    return b;
}

static tm_status push_ptr(void ***arr, size_t *n, size_t *cap, void *p, tm_err *err) {
    if (grow((void **)arr, cap, *n + 1, sizeof(void *))) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    (*arr)[(*n)++] = p;
    return TM_OK;
}

tm_status tm__ox_replace(tm__oxmodel *m, int64_t i, const tm__oxq *q, tm_err *err) {
    if (i < 0 || i >= m->n_w || m->w[i].replaced)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "weight %lld: bad index or replaced twice", (long long)i);
    ox_wdef *w = &m->w[i];
    ox_graph *og = &m->graphs[w->gi];
    const char *nm = w->pub.name;
    int64_t n = 1;
    for (int d = 0; d < w->pub.ndim; d++) n *= w->pub.shape[d];
    int64_t np = 1;
    for (int d = 0; d < q->pndim; d++) np *= q->pshape[d];
    if (np != q->n_params || q->pndim < 0 || q->pndim > 8)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "%s: scale shape does not hold %lld values", nm, (long long)q->n_params);
    size_t ncb, nzb;
    uint8_t *cb = encode_codes(m, q->code_type, q->codes, n, &ncb);
    uint8_t *zc = own_calloc(m, (size_t)np, 1);
    uint8_t *sb = own_calloc(m, (size_t)np, 4);
    if (!cb || !zc || !sb) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t k = 0; k < np; k++) {
        zc[k] = (uint8_t)q->zero_point[k];
        uint32_t u;
        memcpy(&u, &q->scale[k], 4);
        for (int b = 0; b < 4; b++) sb[4 * k + b] = (uint8_t)(u >> (8 * b)); /* little-endian */
    }
    uint8_t *zb = encode_codes(m, q->code_type, zc, np, &nzb);
    char *n_codes = own_str(m, "%s_quantized%s", nm, NULL), *n_scale = own_str(m, "%s_scale%s", nm, NULL);
    char *n_zp = own_str(m, "%s_zero_point%s", nm, NULL), *n_dq = own_str(m, "%s_DequantizeLinear%s", nm, NULL);
    char *n_deq = q->cast_to ? own_str(m, "%s_dequantized%s", nm, NULL) : (char *)nm;
    char *n_cast = q->cast_to ? own_str(m, "%s_Cast%s", nm, NULL) : NULL;
    char **dq_in = own_calloc(m, 3, sizeof(char *));
    Onnx__AttributeProto **dq_attr = own_calloc(m, 2, sizeof *dq_attr);
    if (!zb || !n_codes || !n_scale || !n_zp || !n_dq || !n_deq || (q->cast_to && !n_cast) || !dq_in || !dq_attr)
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    Onnx__TensorProto *tc = new_tensor(m, n_codes, q->code_type, w->pub.ndim, w->pub.shape, cb, ncb);
    Onnx__TensorProto *ts = new_tensor(m, n_scale, TM_ONNX_FLOAT, q->pndim, q->pshape, sb, (size_t)np * 4);
    Onnx__TensorProto *tz = new_tensor(m, n_zp, q->code_type, q->pndim, q->pshape, zb, nzb);
    if (!tc || !ts || !tz) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    dq_in[0] = n_codes;
    dq_in[1] = n_scale;
    dq_in[2] = n_zp;
    int na = 0;
    if (q->has_axis && !(dq_attr[na++] = attr_int(m, "axis", q->axis))) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (q->block_size > 0 && !(dq_attr[na++] = attr_int(m, "block_size", q->block_size)))
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    Onnx__NodeProto *dq = new_node(m, n_dq, "DequantizeLinear", q->domain, 3, dq_in, n_deq, na, dq_attr);
    Onnx__NodeProto *cast = NULL;
    if (dq && q->cast_to) {
        char **cin = own_calloc(m, 1, sizeof(char *));
        Onnx__AttributeProto **ca = own_calloc(m, 1, sizeof *ca);
        if (cin && ca && (ca[0] = attr_int(m, "to", q->cast_to))) {
            cin[0] = n_deq;
            cast = new_node(m, n_cast, "Cast", "", 1, cin, (char *)nm, 1, ca);
        }
    }
    if (!dq || (q->cast_to && !cast)) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    tm_status s = TM_OK;
    if (w->pub.constant_node) {
        Onnx__NodeProto **list = own_calloc(m, 5, sizeof *list);
        if (!list) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        size_t k = 0;
        if (!(list[k++] = const_node(m, tc)) || !(list[k++] = const_node(m, ts)) || !(list[k++] = const_node(m, tz)))
            return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        list[k++] = dq;
        if (cast) list[k++] = cast;
        og->repl[w->idx] = list;
        og->n_repl[w->idx] = k;
    } else {
        og->drop_init[w->idx] = 1;
        s = push_ptr((void ***)&og->add_init, &og->n_add_init, &og->cap_add_init, tc, err);
        if (!s) s = push_ptr((void ***)&og->add_init, &og->n_add_init, &og->cap_add_init, ts, err);
        if (!s) s = push_ptr((void ***)&og->add_init, &og->n_add_init, &og->cap_add_init, tz, err);
        if (!s) s = push_ptr((void ***)&og->pre, &og->n_pre, &og->cap_pre, dq, err);
        if (!s && cast) s = push_ptr((void ***)&og->pre, &og->n_pre, &og->cap_pre, cast, err);
    }
    if (!s) w->replaced = 1;
    return s;
}

tm_status tm__ox_set_opset(tm__oxmodel *m, const char *domain, int64_t version, int64_t ir_min,
                           tm_err *err) {
    if (ir_min > m->ir_min) m->ir_min = ir_min;
    for (int k = 0; k < m->n_set; k++)
        if (!strcmp(m->set_domain[k], domain)) { m->set_version[k] = version; return TM_OK; }
    if (m->n_set >= 4) return tm__err_set(err, TM_E_INVALID_ARG, -1, "too many opset edits");
    if (!(m->set_domain[m->n_set] = tm__strdup(domain))) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    m->set_version[m->n_set++] = version;
    return TM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* packing                                                                                    */
/* ---------------------------------------------------------------------------------------- */

tm_status tm__ox_pack(tm__oxmodel *m, uint8_t **buf, size_t *nbuf, tm_err *err) {
    *buf = NULL;
    *nbuf = 0;
    Onnx__ModelProto *mp = m->mp;
    tm_status s = TM_OK;
    /* splice graph edits */
    int64_t gi = 0;
    for (; gi < m->n_graphs; gi++) {
        ox_graph *og = &m->graphs[gi];
        Onnx__GraphProto *g = og->g;
        og->n_node0 = g->n_node;
        og->node0 = g->node;
        og->n_init0 = g->n_initializer;
        og->init0 = g->initializer;
        int touched = og->n_pre || og->n_add_init;
        for (size_t k = 0; k < g->n_node && !touched; k++) touched = og->repl[k] != NULL;
        if (!touched) continue;
        size_t nn = og->n_pre;
        for (size_t k = 0; k < g->n_node; k++) nn += og->repl[k] ? og->n_repl[k] : 1;
        Onnx__NodeProto **nodes = tm__calloc(nn ? nn : 1, sizeof *nodes);
        Onnx__TensorProto **inits = tm__calloc(g->n_initializer + og->n_add_init + 1, sizeof *inits);
        og->tmp_nodes = nodes;
        og->tmp_inits = inits;
        if (!nodes || !inits) {
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory (graph %lld)", (long long)gi);
            gi++; /* restore this one too */
            break;
        }
        size_t j = 0;
        for (size_t k = 0; k < og->n_pre; k++) nodes[j++] = og->pre[k];
        for (size_t k = 0; k < g->n_node; k++) {
            if (og->repl[k]) for (size_t r = 0; r < og->n_repl[k]; r++) nodes[j++] = og->repl[k][r];
            else nodes[j++] = g->node[k];
        }
        size_t ji = 0;
        for (size_t k = 0; k < g->n_initializer; k++) if (!og->drop_init[k]) inits[ji++] = g->initializer[k];
        for (size_t k = 0; k < og->n_add_init; k++) inits[ji++] = og->add_init[k];
        g->node = nodes;
        g->n_node = j;
        g->initializer = inits;
        g->n_initializer = ji;
    }
    /* opset imports and IR version */
    size_t n_ops0 = mp->n_opset_import;
    Onnx__OperatorSetIdProto **ops0 = mp->opset_import;
    int has_ir0 = mp->has_ir_version;
    int64_t ir0 = mp->ir_version;
    Onnx__OperatorSetIdProto *ops_new = NULL;
    Onnx__OperatorSetIdProto **ops_arr = NULL;
    if (!s && m->n_set) {
        ops_new = tm__calloc(n_ops0 + (size_t)m->n_set, sizeof *ops_new);
        ops_arr = tm__calloc(n_ops0 + (size_t)m->n_set, sizeof *ops_arr);
        if (!ops_new || !ops_arr) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        size_t no = 0;
        for (size_t k = 0; !s && k < n_ops0; k++) {
            if (!ops0[k]) continue;
            ops_new[no] = *ops0[k];
            for (int e = 0; e < m->n_set; e++)
                if ((is_std(m->set_domain[e]) && is_std(ops0[k]->domain)) ||
                    (!is_std(m->set_domain[e]) && ops0[k]->domain && !strcmp(ops0[k]->domain, m->set_domain[e]))) {
                    ops_new[no].has_version = 1;
                    ops_new[no].version = m->set_version[e];
                }
            ops_arr[no] = &ops_new[no];
            no++;
        }
        for (int e = 0; !s && e < m->n_set; e++) {
            if (tm__ox_opset(m, m->set_domain[e]) > 0) continue;
            Onnx__OperatorSetIdProto init = ONNX__OPERATOR_SET_ID_PROTO__INIT;
            ops_new[no] = init;
            ops_new[no].domain = m->set_domain[e];
            ops_new[no].has_version = 1;
            ops_new[no].version = m->set_version[e];
            ops_arr[no] = &ops_new[no];
            no++;
        }
        if (!s) {
            mp->opset_import = ops_arr;
            mp->n_opset_import = no;
        }
    }
    if (!s && m->ir_min > 0 && (!mp->has_ir_version || mp->ir_version < m->ir_min)) {
        mp->has_ir_version = 1;
        mp->ir_version = m->ir_min;
    }
    if (!s) {
        size_t need = onnx__model_proto__get_packed_size(mp);
        if (need > OX_MAX_FILE)
            s = tm__err_set(err, TM_E_LIMIT, -1, "the quantized model would be %zu bytes, more than the 2 GiB "
                            "a protobuf message may hold", need);
        else if (!(*buf = malloc(need ? need : 1)))
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory (%zu bytes)", need);
        else if ((*nbuf = onnx__model_proto__pack(mp, *buf)) != need)
            s = tm__err_set(err, TM_E_INTERNAL, -1, "protobuf-c packed %zu bytes, expected %zu", *nbuf, need);
    }
    /* restore the decoded message exactly as protobuf-c allocated it */
    mp->opset_import = ops0;
    mp->n_opset_import = n_ops0;
    mp->has_ir_version = has_ir0;
    mp->ir_version = ir0;
    free(ops_new);
    free(ops_arr);
    for (int64_t k = 0; k < gi && k < m->n_graphs; k++) {
        ox_graph *og = &m->graphs[k];
        og->g->node = og->node0;
        og->g->n_node = og->n_node0;
        og->g->initializer = og->init0;
        og->g->n_initializer = og->n_init0;
        free(og->tmp_nodes);
        free(og->tmp_inits);
        og->tmp_nodes = NULL;
        og->tmp_inits = NULL;
    }
    if (s) {
        free(*buf);
        *buf = NULL;
        *nbuf = 0;
    }
    return s;
}
