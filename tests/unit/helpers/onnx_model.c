/* onnx_model.c: see onnx_model.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers/onnx_model.h"

/* ---------------------------------------------------------------------------------------- */
/* building models: every allocation is tracked and freed after each test                    */
/* ---------------------------------------------------------------------------------------- */

static void **g_allocs;
static size_t g_n_allocs, g_cap_allocs;
char g_tmp[256];

static void *A(size_t n) {
    void *p = calloc(1, n ? n : 1);
    assert_non_null(p);
    if (g_n_allocs == g_cap_allocs) {
        g_cap_allocs = g_cap_allocs ? 2 * g_cap_allocs : 256;
        g_allocs = realloc(g_allocs, g_cap_allocs * sizeof *g_allocs);
        assert_non_null(g_allocs);
    }
    g_allocs[g_n_allocs++] = p;
    return p;
}
void free_allocs(void) {
    for (size_t k = 0; k < g_n_allocs; k++) free(g_allocs[k]);
    free(g_allocs);
    g_allocs = NULL;
    g_n_allocs = g_cap_allocs = 0;
}
static char *S(const char *s) {
    char *c = A(strlen(s) + 1);
    memcpy(c, s, strlen(s));
    return c;
}

/* deterministic values: a fixed LCG, roughly uniform in [-1, 1), scaled per row */
uint64_t g_rng;
static float rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(g_rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

Onnx__TensorProto *tensor_f32(const char *name, int ndim, const int64_t *dims, const float *v) {
    Onnx__TensorProto *t = A(sizeof *t);
    Onnx__TensorProto init = ONNX__TENSOR_PROTO__INIT;
    *t = init;
    t->name = S(name);
    t->has_data_type = 1;
    t->data_type = 1;
    t->n_dims = (size_t)ndim;
    t->dims = A((size_t)ndim * sizeof(int64_t));
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) { t->dims[d] = dims[d]; n *= dims[d]; }
    t->has_raw_data = 1;
    t->raw_data.len = (size_t)n * 4;
    t->raw_data.data = A((size_t)n * 4);
    memcpy(t->raw_data.data, v, (size_t)n * 4);
    return t;
}

/* a weight of `ndim` dims with values rnd() * (1 + index along dim 0) */
float *weight_values(int ndim, const int64_t *dims, int64_t *n_out) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= dims[d];
    float *v = A((size_t)n * sizeof(float));
    int64_t inner = n / dims[0];
    for (int64_t k = 0; k < n; k++) v[k] = rnd() * (float)(1 + k / inner) * 0.25f;
    *n_out = n;
    return v;
}

static Onnx__AttributeProto *attr_new(const char *name, Onnx__AttributeProto__AttributeType type) {
    Onnx__AttributeProto *a = A(sizeof *a);
    Onnx__AttributeProto init = ONNX__ATTRIBUTE_PROTO__INIT;
    *a = init;
    a->name = S(name);
    a->has_type = 1;
    a->type = type;
    return a;
}
Onnx__AttributeProto *attr_i(const char *name, int64_t v) {
    Onnx__AttributeProto *a = attr_new(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    a->has_i = 1;
    a->i = v;
    return a;
}
Onnx__AttributeProto *attr_t(const char *name, Onnx__TensorProto *t) {
    Onnx__AttributeProto *a = attr_new(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    a->t = t;
    return a;
}
Onnx__AttributeProto *attr_g(const char *name, Onnx__GraphProto *g) {
    Onnx__AttributeProto *a = attr_new(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH);
    a->g = g;
    return a;
}

/* ins/outs: comma separated names */
static char **split(const char *s, size_t *n) {
    *n = 0;
    if (!*s) return NULL;
    char **v = A(16 * sizeof(char *));
    const char *p = s;
    while (*n < 16) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        char *x = A(l + 1);
        memcpy(x, p, l);
        v[(*n)++] = x;
        if (!e) break;
        p = e + 1;
    }
    return v;
}

Onnx__NodeProto *node(const char *op, const char *name, const char *ins, const char *outs,
                      Onnx__AttributeProto *a0, Onnx__AttributeProto *a1) {
    Onnx__NodeProto *n = A(sizeof *n);
    Onnx__NodeProto init = ONNX__NODE_PROTO__INIT;
    *n = init;
    n->op_type = S(op);
    n->name = S(name);
    n->input = split(ins, &n->n_input);
    n->output = split(outs, &n->n_output);
    n->attribute = A(2 * sizeof *n->attribute);
    if (a0) n->attribute[n->n_attribute++] = a0;
    if (a1) n->attribute[n->n_attribute++] = a1;
    return n;
}

Onnx__ValueInfoProto *vinfo(const char *name, int elem, int ndim, const int64_t *dims) {
    Onnx__ValueInfoProto *v = A(sizeof *v);
    Onnx__ValueInfoProto vi = ONNX__VALUE_INFO_PROTO__INIT;
    *v = vi;
    v->name = S(name);
    Onnx__TypeProto *tp = A(sizeof *tp);
    Onnx__TypeProto ti = ONNX__TYPE_PROTO__INIT;
    *tp = ti;
    Onnx__TypeProto__Tensor *tt = A(sizeof *tt);
    Onnx__TypeProto__Tensor tti = ONNX__TYPE_PROTO__TENSOR__INIT;
    *tt = tti;
    tt->has_elem_type = 1;
    tt->elem_type = elem;
    Onnx__TensorShapeProto *sh = A(sizeof *sh);
    Onnx__TensorShapeProto shi = ONNX__TENSOR_SHAPE_PROTO__INIT;
    *sh = shi;
    sh->n_dim = (size_t)ndim;
    sh->dim = A((size_t)(ndim ? ndim : 1) * sizeof *sh->dim);
    for (int d = 0; d < ndim; d++) {
        Onnx__TensorShapeProto__Dimension *dm = A(sizeof *dm);
        Onnx__TensorShapeProto__Dimension di = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
        *dm = di;
        dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        dm->dim_value = dims[d];
        sh->dim[d] = dm;
    }
    tt->shape = sh;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    v->type = tp;
    return v;
}

Onnx__GraphProto *graph(const char *name) {
    Onnx__GraphProto *g = A(sizeof *g);
    Onnx__GraphProto init = ONNX__GRAPH_PROTO__INIT;
    *g = init;
    g->name = S(name);
    g->node = A(32 * sizeof *g->node);
    g->initializer = A(32 * sizeof *g->initializer);
    g->input = A(8 * sizeof *g->input);
    g->output = A(8 * sizeof *g->output);
    return g;
}
void g_node(Onnx__GraphProto *g, Onnx__NodeProto *n) { g->node[g->n_node++] = n; }
void g_init(Onnx__GraphProto *g, Onnx__TensorProto *t) { g->initializer[g->n_initializer++] = t; }
void g_in(Onnx__GraphProto *g, Onnx__ValueInfoProto *v) { g->input[g->n_input++] = v; }
void g_out(Onnx__GraphProto *g, Onnx__ValueInfoProto *v) { g->output[g->n_output++] = v; }

/* Write a model: ai.onnx opset `opset`, IR `ir`. Returns the path (static buffer per call). */
const char *write_model(const char *file, Onnx__GraphProto *g, int64_t opset, int64_t ir) {
    Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
    m.has_ir_version = 1;
    m.ir_version = ir;
    m.producer_name = S("tensormorph-test");
    m.doc_string = S("a test model; this doc string must survive");
    Onnx__OperatorSetIdProto os = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    os.domain = S("");
    os.has_version = 1;
    os.version = opset;
    Onnx__OperatorSetIdProto *ops[1] = {&os};
    m.n_opset_import = 1;
    m.opset_import = ops;
    m.graph = g;
    size_t n = onnx__model_proto__get_packed_size(&m);
    uint8_t *b = A(n);
    assert_int_equal(onnx__model_proto__pack(&m, b), n);
    char *path = A(512);
    snprintf(path, 512, "%s/%s", g_tmp, file);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
    return path;
}

/* A model X[1,K] -> MatMul(X, W[K,N]) -> (extra op) -> Y. extra: NULL, "Relu", "Softmax". */
const char *matmul_model(const char *file, int64_t K, int64_t N, int64_t opset, const char *extra,
                         float **wv) {
    Onnx__GraphProto *g = graph("mm");
    int64_t wd[2] = {K, N}, xd[2] = {1, K}, yd[2] = {1, N}, n;
    float *w = weight_values(2, wd, &n);
    if (wv) *wv = w;
    g_init(g, tensor_f32("W", 2, wd, w));
    g_in(g, vinfo("X", 1, 2, xd));
    g_node(g, node("MatMul", "mm0", "X,W", extra ? "H" : "Y", NULL, NULL));
    if (extra) g_node(g, node(extra, "post", "H", "Y", NULL, NULL));
    g_out(g, vinfo("Y", 1, 2, yd));
    return write_model(file, g, opset, opset >= 21 ? 10 : opset >= 13 ? 7 : 4);
}

/* ---------------------------------------------------------------------------------------- */
/* reading outputs                                                                            */
/* ---------------------------------------------------------------------------------------- */


/* The whole file (malloc'd), its size in *n. */
uint8_t *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long m = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)m + 1);
    assert_int_equal(fread(b, 1, (size_t)m, f), (size_t)m);
    fclose(f);
    *n = (size_t)m;
    return b;
}

loaded load(const char *path) {
    loaded l = {0};
    size_t n;
    l.b = read_bytes(path, &n);
    l.m = onnx__model_proto__unpack(NULL, n, l.b);
    assert_non_null(l.m);
    return l;
}
void unload(loaded *l) {
    onnx__model_proto__free_unpacked(l->m, NULL);
    free(l->b);
}

const Onnx__TensorProto *find_init(const Onnx__GraphProto *g, const char *name) {
    for (size_t k = 0; k < g->n_initializer; k++)
        if (!strcmp(g->initializer[k]->name, name)) return g->initializer[k];
    for (size_t k = 0; k < g->n_node; k++) {
        const Onnx__NodeProto *n = g->node[k];
        if (!strcmp(n->op_type, "Constant") && n->n_output && !strcmp(n->output[0], name))
            for (size_t a = 0; a < n->n_attribute; a++)
                if (!strcmp(n->attribute[a]->name, "value")) return n->attribute[a]->t;
    }
    return NULL;
}
const Onnx__NodeProto *find_node(const Onnx__GraphProto *g, const char *op, const char *out) {
    for (size_t k = 0; k < g->n_node; k++)
        if (!strcmp(g->node[k]->op_type, op) && g->node[k]->n_output && !strcmp(g->node[k]->output[0], out))
            return g->node[k];
    return NULL;
}
int64_t node_attr(const Onnx__NodeProto *n, const char *name, int64_t dflt) {
    for (size_t a = 0; a < n->n_attribute; a++)
        if (!strcmp(n->attribute[a]->name, name)) return n->attribute[a]->i;
    return dflt;
}
int64_t opset_of(const Onnx__ModelProto *m, const char *domain) {
    for (size_t k = 0; k < m->n_opset_import; k++) {
        const char *d = m->opset_import[k]->domain ? m->opset_import[k]->domain : "";
        if (!strcmp(d, domain)) return m->opset_import[k]->version;
    }
    return 0;
}
float f32_at(const Onnx__TensorProto *t, int64_t k) {
    float v;
    memcpy(&v, t->raw_data.data + 4 * k, 4);
    return v;
}

/* Independent ONNX formula for one symmetric signed unit: scale = max|x| / half,
** q = clamp(round_half_even(x / scale), -half-1, half). */
float ref_scale(const float *x, int64_t n, int64_t stride, int half) {
    float a = 0;
    for (int64_t k = 0; k < n; k++) a = fmaxf(a, fabsf(x[k * stride]));
    return a > 0 ? a / (float)half : 1.0f;
}
int ref_code(float x, float s, int half) {
    float r = nearbyintf(x / s); /* default rounding mode: ties to even */
    if (r > (float)half) r = (float)half;
    if (r < (float)(-half - 1)) r = (float)(-half - 1);
    return (int)r;
}

/* Symmetric int8 per-channel codes and scales of n_ch channels of n values each: value k of
** channel c is w[c * ch_stride + k * el_stride], in the initializer q at the same index, its
** scale element c of s; every one equals the formula's (ref_scale, ref_code). */
void check_int8_channels(const Onnx__TensorProto *q, const Onnx__TensorProto *s, const float *w,
                         int64_t n_ch, int64_t n, int64_t ch_stride, int64_t el_stride) {
    assert_non_null(q);
    assert_non_null(s);
    for (int64_t c = 0; c < n_ch; c++) {
        float es = ref_scale(w + c * ch_stride, n, el_stride, 127);
        assert_true(f32_at(s, c) == es);
        for (int64_t k = 0; k < n; k++) {
            int64_t i = c * ch_stride + k * el_stride;
            assert_int_equal((int8_t)q->raw_data.data[i], ref_code(w[i], es, 127));
        }
    }
}

tm_onnx_quantize_result *run_job(const char *in, const char *out, const tm_onnx_quantize_params *p,
                         tm_status expect, tm_err *err) {
    tm_file *f = NULL;
    assert_int_equal(tm_open(in, NULL, &f, err), TM_OK);
    tm_onnx_quantize_result *r = NULL;
    tm_status s = tm_onnx_quantize(f, out, p, &r, err);
    if (s != expect) print_message("%s\n", err->msg);
    assert_int_equal(s, expect);
    tm_close(f);
    return r;
}

char *outp(const char *name) {
    char *p = A(512);
    snprintf(p, 512, "%s/%s", g_tmp, name);
    return p;
}

int onnxq_setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tm_onnxq_%d", (int)getpid());
    mkdir(g_tmp, 0755);
    return 0;
}
int onnxq_teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    return system(cmd) == 0 ? 0 : 0;
}
