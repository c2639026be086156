/* arch.c: the module tree of a checkpoint from its tensors' dotted names
** ("model.layers.0.self_attn.q_proj.weight" -> model / layers / 0 / self_attn / q_proj / weight),
** with parameter counts, bytes (a quantized tensor's scale and zero point count in its bytes),
** the dtype and quantization scheme of each subtree, and a boundary mark on every module whose
** dtype or scheme differs from its previous sibling's. */
#include "../core/core.h"
#include "tensormorph/graph.h"

#include <inttypes.h>
#include <stdio.h>

/* The scheme badge of tensor t: "dense" or its tm_qtensor_label. */
static void scheme_of(const tm_file *f, const tm_tensor *t, char *buf, size_t n) {
    if (!t->quant) snprintf(buf, n, "dense");
    else tm_qtensor_label(f, t, buf, n);
}

typedef struct builder {
    tm_arch_node *nodes;
    int64_t       n, cap;
    int64_t      *last_child;   /* [cap] last child of each node, for appending */
} builder;

static int64_t add_node(builder *b, int64_t parent, const char *path, size_t path_len, tm_err *err) {
    if (b->n == b->cap) {
        int64_t nc = b->cap ? b->cap * 2 : 64;
        tm_arch_node *nn = realloc(b->nodes, (size_t)nc * sizeof *nn);
        if (!nn) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory"), -1;
        b->nodes = nn;
        int64_t *lc = realloc(b->last_child, (size_t)nc * sizeof *lc);
        if (!lc) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory"), -1;
        b->last_child = lc;
        b->cap = nc;
    }
    int64_t k = b->n;
    tm_arch_node *x = &b->nodes[k];
    memset(x, 0, sizeof *x);
    char *p = tm__strndup(path, path_len);
    if (!p) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory"), -1;
    b->n++;
    x->path = p;
    const char *dot = strrchr(p, '.');
    x->name = dot ? dot + 1 : p;
    x->parent = parent;
    x->first_child = x->next_sibling = -1;
    x->tensor = -1;
    b->last_child[k] = -1;
    if (parent >= 0) {
        if (b->last_child[parent] < 0) b->nodes[parent].first_child = k;
        else b->nodes[b->last_child[parent]].next_sibling = k;
        b->last_child[parent] = k;
    }
    return k;
}

static int64_t find_child(const builder *b, int64_t parent, const char *name, size_t len) {
    for (int64_t c = b->nodes[parent].first_child; c >= 0; c = b->nodes[c].next_sibling)
        if (strlen(b->nodes[c].name) == len && !memcmp(b->nodes[c].name, name, len)) return c;
    return -1;
}

static int numeric(const char *s, uint64_t *v) {
    if (!*s) return 0;
    uint64_t x = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || x > UINT64_MAX / 10 - 9) return 0;
        x = x * 10 + (uint64_t)(*s - '0');
    }
    *v = x;
    return 1;
}

/* Siblings in name order, integers numerically ("layers.2" before "layers.10"), integers first. */
static int before(const tm_arch_node *a, const tm_arch_node *b) {
    uint64_t x, y;
    int na = numeric(a->name, &x), nb = numeric(b->name, &y);
    if (na && nb) return x < y;
    if (na != nb) return na;
    return strcmp(a->name, b->name) < 0;
}

static tm_status sort_children(tm_arch *A, tm_err *err) {
    int64_t *tmp = tm__malloc_n((size_t)A->n, sizeof(int64_t));
    if (!tmp) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t p = 0; p < A->n; p++) {
        int64_t m = 0;
        for (int64_t c = A->nodes[p].first_child; c >= 0; c = A->nodes[c].next_sibling) tmp[m++] = c;
        for (int64_t i = 1; i < m; i++) {  /* insertion sort: stable */
            int64_t v = tmp[i], j = i;
            while (j > 0 && before(&A->nodes[v], &A->nodes[tmp[j - 1]])) { tmp[j] = tmp[j - 1]; j--; }
            tmp[j] = v;
        }
        A->nodes[p].first_child = m ? tmp[0] : -1;
        for (int64_t i = 0; i < m; i++) A->nodes[tmp[i]].next_sibling = i + 1 < m ? tmp[i + 1] : -1;
    }
    free(tmp);
    return TM_OK;
}

static void merge_label(char *dst, size_t n, const char *src) {
    if (!src[0]) return;
    if (!dst[0]) {
        size_t l = strlen(src);
        if (l >= n) l = n - 1;
        memmove(dst, src, l);
        dst[l] = '\0';
    } else if (strcmp(dst, src)) {
        snprintf(dst, n, "mixed");
    }
}

/* Shared tail of both builders: fold subtree totals bottom-up, optionally sort siblings, and
** mark a boundary wherever dtype or scheme differs from the previous sibling. */
static tm_status finish_tree(builder *b, int sort, tm_arch **out, tm_err *err) {
    free(b->last_child);
    tm_arch *A = calloc(1, sizeof *A);
    if (!A) {
        for (int64_t k = 0; k < b->n; k++) free((char *)b->nodes[k].path);
        free(b->nodes);
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    A->nodes = b->nodes;
    A->n = b->n;
    for (int64_t k = A->n - 1; k > 0; k--) {
        tm_arch_node *x = &A->nodes[k], *p = &A->nodes[x->parent];
        p->n_params += x->n_params;
        p->n_bytes += x->n_bytes;
        p->n_tensors += x->n_tensors;
        merge_label(p->dtype, sizeof p->dtype, x->dtype);
        merge_label(p->scheme, sizeof p->scheme, x->scheme);
    }
    tm_status s = sort ? sort_children(A, err) : TM_OK;
    if (s) { tm_arch_free(A); return s; }
    for (int64_t p = 0; p < A->n; p++) {
        int64_t prev = -1;
        for (int64_t c = A->nodes[p].first_child; c >= 0; c = A->nodes[c].next_sibling) {
            tm_arch_node *x = &A->nodes[c];
            if (prev >= 0 && (strcmp(x->dtype, A->nodes[prev].dtype) || strcmp(x->scheme, A->nodes[prev].scheme))) {
                x->boundary = 1;
                A->n_boundaries++;
            }
            prev = c;
        }
    }
    *out = A;
    return TM_OK;
}

/* An ONNX model's architecture is its graph: one child per (sub)graph, then its nodes in graph
** order, each labelled "<index>:<op_type> <node name>", with the dtype of what it outputs and
** the scheme of its quantized weight (or "quantized codes" when it outputs codes); a boundary
** falls where that changes from one node to the next. A node's parameters and bytes are those
** of the checkpoint tensors it consumes (a tensor shared by two nodes counts in both). */
static void dotless(char *s) { for (; *s; s++) if (*s == '.') *s = '_'; }

static tm_status arch_from_graph(const tm_file *f, tm_arch **out, tm_err *err) {
    builder b;
    memset(&b, 0, sizeof b);
    if (add_node(&b, -1, "", 0, err) < 0) return TM_E_NOMEM;
    int64_t nn = tm_graph_n_nodes(f);
    tm_status s = TM_OK;
    for (int64_t k = 0; k < nn && !s; k++) {
        const tm_graph_node *nd = tm_graph_node_at(f, k);
        char glabel[256];
        snprintf(glabel, sizeof glabel, "%s", nd->graph[0] ? nd->graph : "graph");
        dotless(glabel);
        int64_t g = find_child(&b, 0, glabel, strlen(glabel));
        if (g < 0) g = add_node(&b, 0, glabel, strlen(glabel), err);
        if (g < 0) { s = TM_E_NOMEM; break; }
        char nm[256], path[600];
        snprintf(nm, sizeof nm, "%lld:%s %s", (long long)k, nd->op_type, nd->name);
        dotless(nm);
        int pl = snprintf(path, sizeof path, "%s.%s", glabel, nm);
        if (pl < 0) pl = 0;
        if ((size_t)pl >= sizeof path) pl = (int)sizeof path - 1;
        int64_t c = add_node(&b, g, path, (size_t)pl, err);
        if (c < 0) { s = TM_E_NOMEM; break; }
        tm_arch_node *x = &b.nodes[c];
        int outputs_codes = 0;
        for (int64_t o = 0; o < nd->n_outputs; o++) {
            const tm_graph_value *v = nd->outputs[o] >= 0 ? tm_graph_value_at(f, nd->outputs[o]) : NULL;
            if (!v) continue;
            if (!x->dtype[0]) snprintf(x->dtype, sizeof x->dtype, "%s", v->elem_type_name);
            outputs_codes |= v->quantized;
        }
        for (int64_t in = 0; in < nd->n_inputs; in++) {
            const tm_graph_value *v = nd->inputs[in] >= 0 ? tm_graph_value_at(f, nd->inputs[in]) : NULL;
            const tm_tensor *t = v && v->tensor >= 0 ? tm_file_tensor(f, v->tensor) : NULL;
            if (!t || t->role != TM_ROLE_DATA) continue;
            if (x->tensor < 0) x->tensor = v->tensor;
            x->n_params += t->n_elems;
            x->n_bytes += t->n_bytes;
            x->n_tensors++;
        }
        if (nd->weight_tensor >= 0) {
            x->tensor = nd->weight_tensor;
            scheme_of(f, tm_file_tensor(f, nd->weight_tensor), x->scheme, sizeof x->scheme);
        } else {
            snprintf(x->scheme, sizeof x->scheme, "%s", outputs_codes ? "quantized codes" : "dense");
        }
        if (!x->dtype[0]) snprintf(x->dtype, sizeof x->dtype, "?");
    }
    if (s) {
        for (int64_t k = 0; k < b.n; k++) free((char *)b.nodes[k].path);
        free(b.nodes);
        free(b.last_child);
        return s;
    }
    return finish_tree(&b, 0, out, err);
}

tm_status tm_arch_build(const tm_file *f, tm_arch **out, tm_err *err) {
    *out = NULL;
    if (tm_file_format(f) == TM_FMT_ONNX && tm_graph_n_nodes(f) > 0) return arch_from_graph(f, out, err);
    builder b;
    memset(&b, 0, sizeof b);
    int64_t nt = tm_file_n_tensors(f);
    uint64_t *extra = tm__calloc((size_t)(nt ? nt : 1), sizeof(uint64_t));
    if (!extra) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t i = 0; i < nt; i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        if (t->role != TM_ROLE_DATA && t->owner >= 0 && t->owner < nt) extra[t->owner] += t->n_bytes;
    }
    tm_status s = add_node(&b, -1, "", 0, err) < 0 ? TM_E_NOMEM : TM_OK;
    for (int64_t i = 0; !s && i < nt; i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        if (t->role != TM_ROLE_DATA) continue;
        const char *name = t->name;
        int64_t cur = 0;
        size_t pos = 0, len = strlen(name);
        while (pos <= len) {
            const char *dot = memchr(name + pos, '.', len - pos);
            size_t end = dot ? (size_t)(dot - name) : len;
            int64_t c = find_child(&b, cur, name + pos, end - pos);
            if (c < 0) c = add_node(&b, cur, name, end, err);
            if (c < 0) { s = TM_E_NOMEM; break; }
            cur = c;
            pos = end + 1;
        }
        if (s) break;
        tm_arch_node *x = &b.nodes[cur];
        x->tensor = i;
        x->n_params += t->n_elems;
        x->n_bytes += t->n_bytes + extra[i];
        x->n_tensors++;
        const tm_dtype_traits *dt = tm_dtype_get(t->dtype);
        merge_label(x->dtype, sizeof x->dtype, dt ? dt->name : "?");
        char sch[TM_QLABEL_MAX];
        scheme_of(f, t, sch, sizeof sch);
        merge_label(x->scheme, sizeof x->scheme, sch);
    }
    free(extra);
    if (s) {
        for (int64_t k = 0; k < b.n; k++) free((char *)b.nodes[k].path);
        free(b.nodes);
        free(b.last_child);
        return s;
    }
    return finish_tree(&b, 1, out, err);
}

void tm_arch_free(tm_arch *a) {
    if (!a) return;
    for (int64_t k = 0; k < a->n; k++) free((char *)a->nodes[k].path);
    free(a->nodes);
    free(a);
}
