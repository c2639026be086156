/* test_onnx_quantize.c: ONNX weight quantization into ONNX (src/job/onnx_job.c,
** src/formats/onnx_write.c, src/formats/onnx_opset.c, `tensormorph quantize X.onnx -o Y.onnx`).
** Small models are built here with the protobuf-c code generated from onnx.proto; the outputs
** are decoded again the same way and checked against an independent computation of the ONNX
** formulas: scale = max|x| / 127 (int8) or / 7 (int4) per unit, q = round_half_even(x / scale)
** clamped [ONNX QuantizeLinear]. Also: each op's channel axis, the opset decision table and the
** three strategies (native, raised, com.microsoft) and the refusal, atomic output, the manifest
** and --json, and qdiff pairing X_quantized with X.
** `test_onnx_quantize --write-models DIR` only writes the generated models (tests/ort/run.sh
** feeds them to ONNX Runtime). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensormorph.h"
#include "tensormorph/onnx_quant.h"
#include "helpers/cli_run.h"
#include "helpers/vectors.h"
#include "onnx.pb-c.h"

/* ---------------------------------------------------------------------------------------- */
/* building models: every allocation is tracked and freed after each test                    */
/* ---------------------------------------------------------------------------------------- */

static void **g_allocs;
static size_t g_n_allocs, g_cap_allocs;
static char g_tmp[256];

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
static void free_allocs(void) {
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
static uint64_t g_rng;
static float rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(g_rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static Onnx__TensorProto *tensor_f32(const char *name, int ndim, const int64_t *dims, const float *v) {
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
static float *weight_values(int ndim, const int64_t *dims, int64_t *n_out) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= dims[d];
    float *v = A((size_t)n * sizeof(float));
    int64_t inner = n / dims[0];
    for (int64_t k = 0; k < n; k++) v[k] = rnd() * (float)(1 + k / inner) * 0.25f;
    *n_out = n;
    return v;
}

static Onnx__AttributeProto *attr_i(const char *name, int64_t v) {
    Onnx__AttributeProto *a = A(sizeof *a);
    Onnx__AttributeProto init = ONNX__ATTRIBUTE_PROTO__INIT;
    *a = init;
    a->name = S(name);
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_i = 1;
    a->i = v;
    return a;
}
static Onnx__AttributeProto *attr_t(const char *name, Onnx__TensorProto *t) {
    Onnx__AttributeProto *a = A(sizeof *a);
    Onnx__AttributeProto init = ONNX__ATTRIBUTE_PROTO__INIT;
    *a = init;
    a->name = S(name);
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
    a->t = t;
    return a;
}
static Onnx__AttributeProto *attr_g(const char *name, Onnx__GraphProto *g) {
    Onnx__AttributeProto *a = A(sizeof *a);
    Onnx__AttributeProto init = ONNX__ATTRIBUTE_PROTO__INIT;
    *a = init;
    a->name = S(name);
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
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

static Onnx__NodeProto *node(const char *op, const char *name, const char *ins, const char *outs,
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

static Onnx__ValueInfoProto *vinfo(const char *name, int elem, int ndim, const int64_t *dims) {
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

static Onnx__GraphProto *graph(const char *name) {
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
static void g_node(Onnx__GraphProto *g, Onnx__NodeProto *n) { g->node[g->n_node++] = n; }
static void g_init(Onnx__GraphProto *g, Onnx__TensorProto *t) { g->initializer[g->n_initializer++] = t; }
static void g_in(Onnx__GraphProto *g, Onnx__ValueInfoProto *v) { g->input[g->n_input++] = v; }
static void g_out(Onnx__GraphProto *g, Onnx__ValueInfoProto *v) { g->output[g->n_output++] = v; }

/* Write a model: ai.onnx opset `opset`, IR `ir`. Returns the path (static buffer per call). */
static const char *write_model(const char *file, Onnx__GraphProto *g, int64_t opset, int64_t ir) {
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
static const char *matmul_model(const char *file, int64_t K, int64_t N, int64_t opset, const char *extra,
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

typedef struct loaded { Onnx__ModelProto *m; uint8_t *b; } loaded;

/* The whole file (malloc'd), its size in *n. */
static uint8_t *read_bytes(const char *path, size_t *n) {
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

static loaded load(const char *path) {
    loaded l = {0};
    size_t n;
    l.b = read_bytes(path, &n);
    l.m = onnx__model_proto__unpack(NULL, n, l.b);
    assert_non_null(l.m);
    return l;
}
static void unload(loaded *l) {
    onnx__model_proto__free_unpacked(l->m, NULL);
    free(l->b);
}

static const Onnx__TensorProto *find_init(const Onnx__GraphProto *g, const char *name) {
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
static const Onnx__NodeProto *find_node(const Onnx__GraphProto *g, const char *op, const char *out) {
    for (size_t k = 0; k < g->n_node; k++)
        if (!strcmp(g->node[k]->op_type, op) && g->node[k]->n_output && !strcmp(g->node[k]->output[0], out))
            return g->node[k];
    return NULL;
}
static int64_t node_attr(const Onnx__NodeProto *n, const char *name, int64_t dflt) {
    for (size_t a = 0; a < n->n_attribute; a++)
        if (!strcmp(n->attribute[a]->name, name)) return n->attribute[a]->i;
    return dflt;
}
static int64_t opset_of(const Onnx__ModelProto *m, const char *domain) {
    for (size_t k = 0; k < m->n_opset_import; k++) {
        const char *d = m->opset_import[k]->domain ? m->opset_import[k]->domain : "";
        if (!strcmp(d, domain)) return m->opset_import[k]->version;
    }
    return 0;
}
static float f32_at(const Onnx__TensorProto *t, int64_t k) {
    float v;
    memcpy(&v, t->raw_data.data + 4 * k, 4);
    return v;
}

/* Independent ONNX formula for one symmetric signed unit: scale = max|x| / half,
** q = clamp(round_half_even(x / scale), -half-1, half). */
static float ref_scale(const float *x, int64_t n, int64_t stride, int half) {
    float a = 0;
    for (int64_t k = 0; k < n; k++) a = fmaxf(a, fabsf(x[k * stride]));
    return a > 0 ? a / (float)half : 1.0f;
}
static int ref_code(float x, float s, int half) {
    float r = nearbyintf(x / s); /* default rounding mode: ties to even */
    if (r > (float)half) r = (float)half;
    if (r < (float)(-half - 1)) r = (float)(-half - 1);
    return (int)r;
}

/* Symmetric int8 per-channel codes and scales of n_ch channels of n values each: value k of
** channel c is w[c * ch_stride + k * el_stride], in the initializer q at the same index, its
** scale element c of s; every one equals the formula's (ref_scale, ref_code). */
static void check_int8_channels(const Onnx__TensorProto *q, const Onnx__TensorProto *s, const float *w,
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

static tm_onnx_quantize_result *run_job(const char *in, const char *out, const tm_onnx_quantize_params *p,
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

static char *outp(const char *name) {
    char *p = A(512);
    snprintf(p, 512, "%s/%s", g_tmp, name);
    return p;
}

/* ---------------------------------------------------------------------------------------- */
/* tests                                                                                      */
/* ---------------------------------------------------------------------------------------- */

/* int8 per-channel on a MatMul weight [K, N]: axis 1, codes and scales exactly the formula's */
static void test_matmul_int8_channel_exact(void **state) {
    (void)state;
    g_rng = 1;
    float *w;
    const int64_t K = 24, N = 5;
    const char *in = matmul_model("mm13.onnx", K, N, 13, NULL, &w);
    const char *out = outp("mm13.q.onnx");
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, out, NULL, TM_OK, &err);
    assert_int_equal(r->n, 1);
    assert_int_equal(r->n_quantized, 1);
    assert_int_equal(r->strategy, TM_ONNX_OPSET_NATIVE);
    assert_int_equal(r->opset_to, 13);
    assert_int_equal(r->weights[0].gran.kind, TM_GRAN_CHANNEL);
    assert_int_equal(r->weights[0].gran.axis, 1);
    /* plain rounding: RMSE near 1/sqrt(12) LSB, never beyond half an LSB */
    assert_true(r->weights[0].e.rmse_lsb > 0.2 && r->weights[0].e.rmse_lsb < 0.36);
    assert_true(r->weights[0].e.max_err_lsb <= 0.5 + 1e-6);
    tm_onnx_quantize_result_free(r);

    loaded l = load(out);
    const Onnx__GraphProto *g = l.m->graph;
    assert_string_equal(l.m->doc_string, "a test model; this doc string must survive");
    assert_null(find_init(g, "W"));
    const Onnx__TensorProto *q = find_init(g, "W_quantized"), *s = find_init(g, "W_scale"),
                            *z = find_init(g, "W_zero_point");
    assert_non_null(q);
    assert_non_null(s);
    assert_non_null(z);
    assert_int_equal(q->data_type, 3); /* INT8 */
    assert_int_equal(z->data_type, 3);
    assert_int_equal(s->data_type, 1);
    assert_int_equal(s->n_dims, 1);
    assert_int_equal(s->dims[0], N);
    const Onnx__NodeProto *dq = find_node(g, "DequantizeLinear", "W");
    assert_non_null(dq);
    assert_true(!dq->domain || !*dq->domain);
    assert_int_equal(node_attr(dq, "axis", -99), 1);
    assert_string_equal(dq->input[0], "W_quantized");
    assert_string_equal(dq->input[1], "W_scale");
    assert_string_equal(dq->input[2], "W_zero_point");
    /* the MatMul still reads "W" */
    const Onnx__NodeProto *mm = find_node(g, "MatMul", "Y");
    assert_non_null(mm);
    assert_string_equal(mm->input[1], "W");
    check_int8_channels(q, s, w, N, K, 1, N);
    for (int64_t c = 0; c < N; c++) assert_int_equal((int8_t)z->raw_data.data[c], 0);
    unload(&l);

    /* tensormorph's own reader: one logical quantized tensor, per-channel axis 1, same scales */
    tm_file *f = NULL;
    assert_int_equal(tm_open(out, NULL, &f, &err), TM_OK);
    int64_t i = tm_file_find(f, "W_quantized");
    assert_true(i >= 0);
    const tm_tensor *t = tm_file_tensor(f, i);
    assert_non_null(t->quant);
    assert_int_equal(t->quant->gran.kind, TM_GRAN_CHANNEL);
    assert_int_equal(t->quant->gran.axis, 1);
    float vals[24 * 5];
    assert_int_equal(tm_tensor_read_f32(f, i, 0, K * N, vals, &err), TM_OK);
    for (int64_t k = 0; k < K * N; k++) {
        float es = ref_scale(w + k % N, K, N, 127);
        assert_true(vals[k] == (float)ref_code(w[k], es, 127) * es);
    }
    tm_close(f);
    free_allocs();
}

/* uint8 per-tensor: zero point 128, scale 2a/255; DequantizeLinear without axis */
static void test_uint8_tensor(void **state) {
    (void)state;
    g_rng = 7;
    float *w;
    const char *in = matmul_model("mmu8.onnx", 16, 4, 13, NULL, &w);
    const char *out = outp("mmu8.q.onnx");
    tm_onnx_quantize_params p = tm_onnx_quantize_params_default();
    p.spec.code_dtype = TM_U8;
    p.spec.gran.kind = TM_GRAN_TENSOR;
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, out, &p, TM_OK, &err);
    tm_onnx_quantize_result_free(r);
    loaded l = load(out);
    const Onnx__TensorProto *q = find_init(l.m->graph, "W_quantized"), *s = find_init(l.m->graph, "W_scale"),
                            *z = find_init(l.m->graph, "W_zero_point");
    assert_int_equal(q->data_type, 2);
    assert_int_equal(s->n_dims, 0);
    assert_int_equal(z->raw_data.data[0], 128);
    float a = 0;
    for (int k = 0; k < 64; k++) a = fmaxf(a, fabsf(w[k]));
    float es = (a + a) / 255.0f;
    assert_true(f32_at(s, 0) == es);
    for (int k = 0; k < 64; k++) {
        float rq = nearbyintf(w[k] / es) + 128;
        rq = fminf(fmaxf(rq, 0), 255);
        assert_int_equal(q->raw_data.data[k], (int)rq);
    }
    const Onnx__NodeProto *dq = find_node(l.m->graph, "DequantizeLinear", "W");
    assert_int_equal(node_attr(dq, "axis", -99), -99);
    unload(&l);
    free_allocs();
}

/* The channel axis per consuming op: Conv 0, ConvTranspose 1, Gemm transB=1 0, transB=0 1 */
static void check_axis(const char *op, int trans_b, int ndim, const int64_t *wd, int expect_axis) {
    Onnx__GraphProto *g = graph("g");
    int64_t n;
    float *w = weight_values(ndim, wd, &n);
    g_init(g, tensor_f32("W", ndim, wd, w));
    int64_t xd[4] = {1, 3, 5, 5};
    g_in(g, vinfo("X", 1, 4, xd));
    g_node(g, node(op, "op0", "X,W", "Y", !strcmp(op, "Gemm") ? attr_i("transB", trans_b) : NULL, NULL));
    g_out(g, vinfo("Y", 1, 0, NULL));
    char fn[64];
    snprintf(fn, sizeof fn, "%s%d.onnx", op, trans_b);
    const char *in = write_model(fn, g, 13, 7);
    snprintf(fn, sizeof fn, "%s%d.q.onnx", op, trans_b);
    const char *out = outp(fn);
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, out, NULL, TM_OK, &err);
    assert_int_equal(r->n_quantized, 1);
    assert_int_equal(r->weights[0].gran.axis, expect_axis);
    assert_string_equal(r->weights[0].consumers, op);
    tm_onnx_quantize_result_free(r);
    loaded l = load(out);
    const Onnx__NodeProto *dq = find_node(l.m->graph, "DequantizeLinear", "W");
    assert_non_null(dq);
    assert_int_equal(node_attr(dq, "axis", -99), expect_axis);
    const Onnx__TensorProto *s = find_init(l.m->graph, "W_scale");
    assert_int_equal(s->dims[0], wd[expect_axis]);
    /* scale of channel c: max |w| over the slice at index c of the axis */
    int64_t inner = 1;
    for (int d = expect_axis + 1; d < ndim; d++) inner *= wd[d];
    for (int64_t c = 0; c < wd[expect_axis]; c++) {
        float a = 0;
        for (int64_t k = 0; k < n; k++)
            if ((k / inner) % wd[expect_axis] == c) a = fmaxf(a, fabsf(w[k]));
        assert_true(f32_at(s, c) == a / 127.0f);
    }
    unload(&l);
}

static void test_channel_axis_per_op(void **state) {
    (void)state;
    g_rng = 3;
    assert_int_equal(tm_onnx_channel_axis("Conv", 0), 0);
    assert_int_equal(tm_onnx_channel_axis("ConvTranspose", 0), 1);
    assert_int_equal(tm_onnx_channel_axis("MatMul", 0), 1);
    assert_int_equal(tm_onnx_channel_axis("Gemm", 1), 0);
    assert_int_equal(tm_onnx_channel_axis("Gemm", 0), 1);
    assert_int_equal(tm_onnx_channel_axis("Add", 0), -1);
    int64_t conv[4] = {6, 3, 3, 3}, convt[4] = {3, 4, 3, 3}, gemm1[2] = {7, 5}, gemm0[2] = {5, 7};
    check_axis("Conv", 0, 4, conv, 0);
    check_axis("ConvTranspose", 0, 4, convt, 1);
    check_axis("Gemm", 1, 2, gemm1, 0);
    check_axis("Gemm", 0, 2, gemm0, 1);
    free_allocs();
}

/* one weight read by Gemm transB=1 (axis 0) and Gemm transB=0 (axis 1): per-tensor, said so;
** skips: a graph input, a small tensor, an int64 tensor */
static void test_conflict_and_skips(void **state) {
    (void)state;
    g_rng = 5;
    Onnx__GraphProto *g = graph("g");
    int64_t wd[2] = {6, 6}, xd[2] = {1, 6}, n;
    g_init(g, tensor_f32("W", 2, wd, weight_values(2, wd, &n)));
    int64_t sd[2] = {3, 3};
    g_init(g, tensor_f32("Wsmall", 2, sd, weight_values(2, sd, &n)));
    g_init(g, tensor_f32("Win", 2, wd, weight_values(2, wd, &n)));
    g_in(g, vinfo("X", 1, 2, xd));
    g_in(g, vinfo("Win", 1, 2, wd));
    g_node(g, node("Gemm", "g1", "X,W", "A", attr_i("transB", 1), NULL));
    g_node(g, node("Gemm", "g0", "A,W", "B", attr_i("transB", 0), NULL));
    g_node(g, node("MatMul", "m1", "B,Win", "C", NULL, NULL));
    int64_t xs[2] = {1, 3};
    g_in(g, vinfo("X3", 1, 2, xs));
    g_node(g, node("MatMul", "m2", "X3,Wsmall", "D", NULL, NULL));
    g_out(g, vinfo("C", 1, 2, xd));
    g_out(g, vinfo("D", 1, 2, xs));
    const char *in = write_model("conflict.onnx", g, 13, 7);
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, outp("conflict.q.onnx"), NULL, TM_OK, &err);
    assert_int_equal(r->n, 3);
    assert_int_equal(r->n_quantized, 1);
    for (int64_t i = 0; i < r->n; i++) {
        const tm_onnx_quantize_tensor *w = &r->weights[i];
        if (!strcmp(w->name, "W")) {
            assert_true(w->quantized);
            assert_int_equal(w->gran.kind, TM_GRAN_TENSOR);
            assert_non_null(strstr(w->reason, "different channel axes"));
            assert_string_equal(w->consumers, "Gemm");
        } else if (!strcmp(w->name, "Win")) {
            assert_false(w->quantized);
            assert_non_null(strstr(w->reason, "graph input"));
        } else {
            assert_string_equal(w->name, "Wsmall");
            assert_false(w->quantized);
            assert_non_null(strstr(w->reason, "9 elements, fewer than 16"));
        }
    }
    tm_onnx_quantize_result_free(r);
    free_allocs();
}

/* the decision table (ONNX Operators.md / Changelog.md) and DequantizeLinear's opset needs */
static void test_opset_table(void **state) {
    (void)state;
    int64_t at = -1;
    assert_int_equal(tm_onnx_op_stable("Softmax", 9, 13, &at), 0);
    assert_int_equal(at, 11); /* negative axis first (-11), then the axis semantics (-13) */
    assert_int_equal(tm_onnx_op_stable("Softmax", 11, 13, &at), 0);
    assert_int_equal(at, 13);
    assert_int_equal(tm_onnx_op_stable("Softmax", 13, 21, &at), 1);
    assert_int_equal(at, 0);
    assert_int_equal(tm_onnx_op_stable("MatMul", 1, 21, &at), 1);
    assert_int_equal(tm_onnx_op_stable("Relu", 9, 13, NULL), 1);
    assert_int_equal(tm_onnx_op_stable("Relu", 5, 13, &at), 0);
    assert_int_equal(at, 6);
    assert_int_equal(tm_onnx_op_stable("Reshape", 9, 13, NULL), 1);
    assert_int_equal(tm_onnx_op_stable("Reshape", 9, 21, &at), 0);
    assert_int_equal(at, 14);
    assert_int_equal(tm_onnx_op_stable("Squeeze", 12, 13, &at), 0);
    assert_int_equal(at, 13);
    assert_int_equal(tm_onnx_op_stable("Slice", 9, 10, NULL), 0);
    assert_int_equal(tm_onnx_op_stable("Upsample", 9, 10, NULL), 0);
    assert_int_equal(tm_onnx_op_stable("Pad", 13, 21, &at), 0);
    assert_int_equal(at, 18);
    assert_int_equal(tm_onnx_op_stable("Conv", 9, 13, &at), 0);
    assert_int_equal(at, 11);
    assert_int_equal(tm_onnx_op_stable("Conv", 11, 21, NULL), 1);
    assert_int_equal(tm_onnx_op_stable("ReduceMean", 13, 21, &at), 0);
    assert_int_equal(at, 18);
    /* unknown: assumed to change */
    assert_int_equal(tm_onnx_op_stable("NoSuchOp", 9, 13, &at), 0);
    assert_int_equal(at, 13);
    assert_int_equal(tm_onnx_op_stable("NoSuchOp", 13, 13, NULL), 1);
    assert_int_equal(tm_onnx_dq_min_opset(TM_I8, TM_GRAN_TENSOR), 10);
    assert_int_equal(tm_onnx_dq_min_opset(TM_U8, TM_GRAN_CHANNEL), 13);
    assert_int_equal(tm_onnx_dq_min_opset(TM_I8, TM_GRAN_GROUP), 21);
    assert_int_equal(tm_onnx_dq_min_opset(TM_I4, TM_GRAN_CHANNEL), 21);
    assert_int_equal(tm_onnx_dq_min_opset(TM_I4, TM_GRAN_GROUP), 21);
    assert_int_equal(tm_onnx_dq_min_opset(TM_F8_E4M3, TM_GRAN_TENSOR), -1);
    assert_int_equal(tm_onnx_dq_min_opset(TM_I8, TM_GRAN_BLOCK), -1);
    assert_string_equal(tm_onnx_opset_strategy_name(TM_ONNX_OPSET_MS_CONTRIB), "com.microsoft");
}

/* opset 9 MatMul + Relu: raised to 13 (Relu and MatMul mean the same), IR to 7 */
static void test_opset_raised(void **state) {
    (void)state;
    g_rng = 11;
    const char *in = matmul_model("mm9relu.onnx", 32, 8, 9, "Relu", NULL);
    const char *out = outp("mm9relu.q.onnx");
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, out, NULL, TM_OK, &err);
    assert_int_equal(r->strategy, TM_ONNX_OPSET_RAISED);
    assert_int_equal(r->opset_from, 9);
    assert_int_equal(r->opset_to, 13);
    assert_int_equal(r->ir_to, 7);
    tm_onnx_quantize_result_free(r);
    loaded l = load(out);
    assert_int_equal(opset_of(l.m, ""), 13);
    assert_int_equal(opset_of(l.m, "com.microsoft"), 0);
    assert_int_equal(l.m->ir_version, 7);
    const Onnx__NodeProto *dq = find_node(l.m->graph, "DequantizeLinear", "W");
    assert_true(!dq->domain || !*dq->domain);
    unload(&l);
    free_allocs();
}

/* opset 9 MatMul + Softmax: Softmax changes meaning by 13, so com.microsoft DequantizeLinear */
static void test_opset_ms_fallback(void **state) {
    (void)state;
    g_rng = 13;
    const char *in = matmul_model("mm9sm.onnx", 32, 8, 9, "Softmax", NULL);
    const char *out = outp("mm9sm.q.onnx");
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, out, NULL, TM_OK, &err);
    assert_int_equal(r->strategy, TM_ONNX_OPSET_MS_CONTRIB);
    assert_int_equal(r->opset_to, 9);
    assert_non_null(strstr(r->strategy_reason, "Softmax"));
    tm_onnx_quantize_result_free(r);
    loaded l = load(out);
    assert_int_equal(opset_of(l.m, ""), 9);
    assert_int_equal(opset_of(l.m, "com.microsoft"), 1);
    const Onnx__NodeProto *dq = find_node(l.m->graph, "DequantizeLinear", "W");
    assert_string_equal(dq->domain, "com.microsoft");
    assert_int_equal(node_attr(dq, "axis", -99), 1);
    unload(&l);
    tm_file *f = NULL;
    assert_int_equal(tm_open(out, NULL, &f, &err), TM_OK);
    const tm_tensor *t = tm_file_tensor(f, tm_file_find(f, "W_quantized"));
    assert_non_null(t->quant);
    assert_string_equal(t->quant->layout, "onnx/com.microsoft.DequantizeLinear");
    tm_close(f);
    free_allocs();
}

static int count_entries(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    if (d) closedir(d);
    return n;
}

/* int4 blocked on opset 9 with Softmax: refused naming the op; nothing at OUT, no temp file */
static void test_int4_refused_atomic(void **state) {
    (void)state;
    g_rng = 17;
    const char *in = matmul_model("mm9sm4.onnx", 64, 8, 9, "Softmax", NULL);
    tm_onnx_quantize_params p = tm_onnx_quantize_params_default();
    p.spec.code_dtype = TM_I4;
    p.spec.gran.kind = TM_GRAN_GROUP;
    p.spec.gran.group_size = 32;
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, outp("refused.onnx"), &p, TM_E_UNSUPPORTED, &err);
    assert_null(r);
    assert_non_null(strstr(err.msg, "Softmax"));
    assert_non_null(strstr(err.msg, "opset 21"));
    assert_int_equal(count_entries(g_tmp, "refused.onnx"), 0);
    /* an existing file that tensormorph did not write is never replaced */
    FILE *fp = fopen(outp("taken.onnx"), "wb");
    fputs("not ours", fp);
    fclose(fp);
    r = run_job(matmul_model("mm13b.onnx", 16, 4, 13, NULL, NULL), outp("taken.onnx"), NULL, TM_E_INVALID_ARG, &err);
    assert_non_null(strstr(err.msg, "never replaces"));
    char buf[16] = {0};
    fp = fopen(outp("taken.onnx"), "rb");
    assert_int_equal(fread(buf, 1, sizeof buf - 1, fp), 8);
    fclose(fp);
    assert_string_equal(buf, "not ours");
    assert_int_equal(count_entries(g_tmp, "taken.onnx"), 1);
    /* a failure after the first weight was quantized (NaN in the second): still nothing at OUT */
    Onnx__GraphProto *g = graph("nan");
    int64_t wd[2] = {16, 4}, xd[2] = {1, 16}, yd[2] = {1, 4}, n;
    g_init(g, tensor_f32("W1", 2, wd, weight_values(2, wd, &n)));
    float *w2 = weight_values(2, wd, &n);
    w2[5] = NAN;
    int64_t wd2[2] = {4, 4};
    g_init(g, tensor_f32("W2", 2, wd2, w2));
    g_in(g, vinfo("X", 1, 2, xd));
    g_node(g, node("MatMul", "m1", "X,W1", "H", NULL, NULL));
    g_node(g, node("MatMul", "m2", "H,W2", "Y", NULL, NULL));
    g_out(g, vinfo("Y", 1, 2, yd));
    const char *nan_in = write_model("nan.onnx", g, 13, 7);
    r = run_job(nan_in, outp("nan.q.onnx"), NULL, TM_E_NONFINITE, &err);
    assert_null(r);
    assert_non_null(strstr(err.msg, "W2"));
    assert_int_equal(count_entries(g_tmp, "nan.q.onnx"), 0);
    free_allocs();
}

/* int4 blocked at opset 21: INT4 codes packed low nibble first, scale [K/32, N], block_size 32
** along axis 0, values a/7 per block */
static void test_int4_block_exact(void **state) {
    (void)state;
    g_rng = 19;
    float *w;
    const int64_t K = 64, N = 8;
    const char *in = matmul_model("mm21x.onnx", K, N, 21, NULL, &w);
    const char *out = outp("mm21x.q.onnx");
    tm_onnx_quantize_params p = tm_onnx_quantize_params_default();
    p.spec.code_dtype = TM_I4;
    p.spec.gran.kind = TM_GRAN_GROUP;
    p.spec.gran.group_size = 32;
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, out, &p, TM_OK, &err);
    assert_int_equal(r->strategy, TM_ONNX_OPSET_NATIVE);
    assert_int_equal(r->weights[0].gran.kind, TM_GRAN_GROUP);
    assert_int_equal(r->weights[0].gran.axis, 0);
    assert_int_equal(r->weights[0].gran.group_size, 32);
    tm_onnx_quantize_result_free(r);
    loaded l = load(out);
    const Onnx__TensorProto *q = find_init(l.m->graph, "W_quantized"), *s = find_init(l.m->graph, "W_scale");
    assert_int_equal(q->data_type, 22);
    assert_int_equal(q->raw_data.len, (size_t)(K * N / 2));
    assert_int_equal(s->n_dims, 2);
    assert_int_equal(s->dims[0], 2);
    assert_int_equal(s->dims[1], N);
    const Onnx__NodeProto *dq = find_node(l.m->graph, "DequantizeLinear", "W");
    assert_int_equal(node_attr(dq, "axis", -99), 0);
    assert_int_equal(node_attr(dq, "block_size", -99), 32);
    for (int64_t b = 0; b < 2; b++)
        for (int64_t c = 0; c < N; c++) {
            float es = ref_scale(w + b * 32 * N + c, 32, N, 7);
            assert_true(f32_at(s, b * N + c) == es);
            for (int64_t k = b * 32; k < b * 32 + 32; k++) {
                int64_t flat = k * N + c;
                int nib = (q->raw_data.data[flat / 2] >> (4 * (flat & 1))) & 0x0f;
                int code = nib >= 8 ? nib - 16 : nib;
                assert_int_equal(code, ref_code(w[flat], es, 7));
            }
        }
    unload(&l);
    tm_file *f = NULL;
    assert_int_equal(tm_open(out, NULL, &f, &err), TM_OK);
    const tm_tensor *t = tm_file_tensor(f, tm_file_find(f, "W_quantized"));
    assert_non_null(t->quant);
    assert_int_equal(t->quant->gran.kind, TM_GRAN_GROUP);
    assert_int_equal(t->quant->gran.group_size, 32);
    assert_int_equal(t->quant->code_dtype, TM_I4);
    tm_close(f);
    free_allocs();
}

/* a Constant-node weight inside both branches of an If: replaced by Constant codes/scale/zp and
** a DequantizeLinear in the same subgraph */
static Onnx__GraphProto *branch(const char *name, const char *wname, float **wv) {
    Onnx__GraphProto *b = graph(name);
    int64_t wd[2] = {16, 4}, n, yd[2] = {1, 4};
    float *w = weight_values(2, wd, &n);
    *wv = w;
    b->node[b->n_node++] = node("Constant", wname, "", wname, attr_t("value", tensor_f32(wname, 2, wd, w)), NULL);
    char out[64];
    snprintf(out, sizeof out, "%s_y", name);
    b->node[b->n_node++] = node("MatMul", out, wname[0] == 'A' ? "X,Aw" : "X,Bw", out, NULL, NULL);
    g_out(b, vinfo(out, 1, 2, yd));
    return b;
}

static const char *if_model(const char *file, float **wa, float **wb) {
    Onnx__GraphProto *g = graph("main");
    int64_t xd[2] = {1, 16}, yd[2] = {1, 4};
    g_in(g, vinfo("X", 1, 2, xd));
    g_in(g, vinfo("cond", 9, 0, NULL));
    g_node(g, node("If", "if0", "cond", "Y", attr_g("then_branch", branch("then", "Aw", wa)),
                   attr_g("else_branch", branch("else", "Bw", wb))));
    g_out(g, vinfo("Y", 1, 2, yd));
    return write_model(file, g, 16, 8);
}

static void test_subgraph_constants(void **state) {
    (void)state;
    g_rng = 23;
    float *wa, *wb;
    const char *in = if_model("if16.onnx", &wa, &wb);
    const char *out = outp("if16.q.onnx");
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, out, NULL, TM_OK, &err);
    assert_int_equal(r->n_quantized, 2);
    assert_true(r->weights[0].constant_node);
    assert_string_equal(r->weights[0].graph, "if0/then_branch");
    tm_onnx_quantize_result_free(r);
    loaded l = load(out);
    const Onnx__GraphProto *then = NULL;
    for (size_t a = 0; a < l.m->graph->node[0]->n_attribute; a++)
        if (!strcmp(l.m->graph->node[0]->attribute[a]->name, "then_branch")) then = l.m->graph->node[0]->attribute[a]->g;
    assert_non_null(then);
    /* Constant(codes), Constant(scale), Constant(zp), DequantizeLinear, MatMul */
    assert_int_equal(then->n_node, 5);
    assert_string_equal(then->node[3]->op_type, "DequantizeLinear");
    assert_string_equal(then->node[4]->op_type, "MatMul");
    const Onnx__TensorProto *q = find_init(then, "Aw_quantized"), *s = find_init(then, "Aw_scale");
    check_int8_channels(q, s, wa, 4, 16, 1, 4);
    unload(&l);
    free_allocs();
}

/* a float16 Conv weight: DequantizeLinear gives float "W_dequantized", a Cast to FLOAT16 gives
** "W"; codes follow the formula on the float16 values widened to float32 */
static void test_float16_weight_cast(void **state) {
    (void)state;
    g_rng = 31;
    Onnx__GraphProto *g = graph("g");
    int64_t wd[4] = {4, 2, 3, 3}, n, xd[4] = {1, 2, 5, 5};
    float *w = weight_values(4, wd, &n);
    Onnx__TensorProto *t = tensor_f32("W", 4, wd, w);
    t->data_type = 10;
    t->raw_data.len = (size_t)n * 2;
    for (int64_t k = 0; k < n; k++) {
        uint16_t h = tm_f32_to_f16(w[k]);
        w[k] = tm_f16_to_f32(h);
        memcpy(t->raw_data.data + 2 * k, &h, 2);
    }
    g_init(g, t);
    g_in(g, vinfo("X", 10, 4, xd));
    g_node(g, node("Conv", "c0", "X,W", "Y", NULL, NULL));
    g_out(g, vinfo("Y", 10, 0, NULL));
    const char *in = write_model("f16.onnx", g, 13, 7);
    const char *out = outp("f16.q.onnx");
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, out, NULL, TM_OK, &err);
    assert_int_equal(r->n_quantized, 1);
    assert_int_equal(r->weights[0].src_dtype, TM_F16);
    tm_onnx_quantize_result_free(r);
    loaded l = load(out);
    const Onnx__NodeProto *dq = find_node(l.m->graph, "DequantizeLinear", "W_dequantized");
    const Onnx__NodeProto *cast = find_node(l.m->graph, "Cast", "W");
    assert_non_null(dq);
    assert_non_null(cast);
    assert_int_equal(node_attr(cast, "to", -1), 10);
    assert_string_equal(cast->input[0], "W_dequantized");
    /* the Cast comes after the DequantizeLinear, both before the Conv */
    size_t idq = 99, icast = 99, iconv = 99;
    for (size_t k = 0; k < l.m->graph->n_node; k++) {
        if (l.m->graph->node[k] == dq) idq = k;
        if (l.m->graph->node[k] == cast) icast = k;
        if (!strcmp(l.m->graph->node[k]->op_type, "Conv")) iconv = k;
    }
    assert_true(idq < icast && icast < iconv);
    const Onnx__TensorProto *q = find_init(l.m->graph, "W_quantized"), *s = find_init(l.m->graph, "W_scale");
    check_int8_channels(q, s, w, 4, 18, 18, 1);
    unload(&l);
    free_allocs();
}

/* the CLI: --json fields, the manifest beside OUT, qdiff pairs W_quantized with W */
static void test_cli_json_and_qdiff(void **state) {
    (void)state;
    g_rng = 29;
    const char *in = matmul_model("mmcli.onnx", 32, 8, 9, "Relu", NULL);
    const char *out = outp("mmcli.q.onnx");
    json_t *j = tmt_run_json(0, "%s quantize %s -o %s --json", tmt_bin(), in, out);
    assert_string_equal(json_string_value(json_object_get(j, "schema")), "tensormorph.quantize/1");
    assert_string_equal(json_string_value(json_object_get(j, "output")), out);
    json_t *os = json_object_get(j, "opset");
    assert_string_equal(json_string_value(json_object_get(os, "strategy")), "raised");
    assert_int_equal(json_integer_value(json_object_get(os, "from")), 9);
    assert_int_equal(json_integer_value(json_object_get(os, "to")), 13);
    json_t *man = json_object_get(j, "manifest");
    assert_string_equal(json_string_value(json_object_get(man, "schema")), "tensormorph.manifest/1");
    assert_string_equal(json_string_value(json_object_get(json_object_get(man, "recipe"), "format")), "onnx");
    json_t *t = tmt_find_named(json_object_get(man, "tensors"), "W");
    assert_non_null(t);
    assert_string_equal(json_string_value(json_object_get(t, "decision")), "quantized");
    assert_string_equal(json_string_value(json_object_get(t, "quantized_name")), "W_quantized");
    double rl = tmt_num(json_object_get(t, "error"), "rmse_lsb");
    assert_true(rl > 0.2 && rl < 0.36);
    json_t *src = json_array_get(json_object_get(man, "sources"), 0);
    assert_int_equal(strlen(json_string_value(json_object_get(src, "sha256"))), 64);
    json_t *of = json_array_get(json_object_get(json_object_get(man, "output"), "files"), 0);
    assert_int_equal(strlen(json_string_value(json_object_get(of, "sha256"))), 64);
    json_decref(j);
    char mp[600];
    snprintf(mp, sizeof mp, "%s.manifest.json", out);
    assert_true(tmt_exists(mp));
    /* a second run refuses without --force, replaces with it */
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s 2>&1", tmt_bin(), in, out), 2);
    free(o);
    j = tmt_run_json(0, "%s quantize %s -o %s --force --json", tmt_bin(), in, out);
    json_decref(j);
    /* qdiff: the quantized tensor W_quantized is measured against W */
    j = tmt_run_json(0, "%s qdiff %s %s --json", tmt_bin(), in, out);
    json_t *arr = json_object_get(j, "tensors");
    assert_non_null(arr);
    json_t *e = tmt_find_named(arr, "W_quantized");
    assert_non_null(e);
    double q_rl = tmt_num(e, "rmse_lsb");
    assert_true(q_rl > 0.2 && q_rl < 0.36);
    json_decref(j);
    /* the refusal from the command line: exit 3 (unsupported input), op named */
    in = matmul_model("mmcli4.onnx", 64, 8, 9, "Softmax", NULL);
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s -t int4 -g group:32 2>&1", tmt_bin(), in, outp("cli4.onnx")), 3);
    assert_non_null(strstr(o, "Softmax"));
    free(o);
    assert_false(tmt_exists(outp("cli4.onnx")));
    free_allocs();
}

/* Exit codes of the CLI for inputs ONNX output cannot take: a non-ONNX input is a usage error
** (2); a model whose external data file is missing cannot be opened (4, the file named); an
** already-quantized model to compressed-tensors is unsupported input (3). */
static void test_cli_exit_codes(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char src[4096], dir[600], cmd[8192];
    snprintf(src, sizeof src, "%s/models/onnx/ort_testdata/conv_qdq_external_ini.onnx", tmv_shared_dir());
    snprintf(dir, sizeof dir, "%s/extmiss", g_tmp);
    mkdir(dir, 0755);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/'", src, dir);
    assert_int_equal(system(cmd), 0);
    char *o = NULL;
    /* copied without its .bin: 4, naming the missing file */
    assert_int_equal(tmt_run(&o, "%s quantize %s/conv_qdq_external_ini.onnx -o %s 2>&1", tmt_bin(), dir,
                             outp("ext.q.onnx")), 4);
    assert_non_null(strstr(o, "conv_qdq_external_ini.bin"));
    assert_non_null(strstr(o, "missing"));
    free(o);
    json_t *j = tmt_run_json(4, "%s inspect %s/conv_qdq_external_ini.onnx --json 2>/dev/null", tmt_bin(), dir);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "error"), "code")), 4);
    json_decref(j);
    /* a QDQ model (already quantized) to compressed-tensors: 3 */
    snprintf(src, sizeof src, "%s/models/onnx/ort_testdata/conv_qdq_s8s8.onnx", tmv_shared_dir());
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s 2>&1", tmt_bin(), src, outp("qdq-ct")), 3);
    assert_non_null(strstr(o, "already quantized"));
    free(o);
    /* ONNX output from a safetensors input: usage error, nothing written */
    snprintf(src, sizeof src, "%s/demo", g_tmp);
    assert_int_equal(tmt_run(&o, "%s demo -o %s -q", tmt_bin(), src), 0);
    free(o);
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s 2>&1", tmt_bin(), src, outp("st.onnx")), 2);
    assert_non_null(strstr(o, "needs an ONNX input"));
    free(o);
    assert_false(tmt_exists(outp("st.onnx")));
    /* an output directory that does not exist: 4, naming OUT and the directory */
    snprintf(src, sizeof src, "%s/models/onnx/ort_testdata/conv_qdq_s8s8.onnx", tmv_shared_dir());
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s 2>&1", tmt_bin(), src, outp("nodir/y.onnx")), 4);
    assert_non_null(strstr(o, "directory"));
    assert_non_null(strstr(o, "does not exist"));
    assert_null(strstr(o, ".tmp."));
    free(o);
    free_allocs();
}

/* A model X -> Conv(X, W[6,3,3,3]) -> Y at opset 13; *wv gets W's values. */
static const char *conv_model(const char *file, float **wv) {
    Onnx__GraphProto *g = graph("cv");
    int64_t wd[4] = {6, 3, 3, 3}, xd[4] = {1, 3, 5, 5}, n;
    float *w = weight_values(4, wd, &n);
    if (wv) *wv = w;
    g_init(g, tensor_f32("W", 4, wd, w));
    g_in(g, vinfo("X", 1, 4, xd));
    g_node(g, node("Conv", "conv0", "X,W", "Y", NULL, NULL));
    g_out(g, vinfo("Y", 1, 0, NULL));
    return write_model(file, g, 13, 7);
}

/* No weight to quantize is refused as the compressed-tensors job refuses it (exit 3 for a
** reason of the input, 2 for filters; nothing written) unless --allow-empty. */
static void test_nothing_to_quantize(void **state) {
    (void)state;
    g_rng = 41;
    const char *in = conv_model("conv.onnx", NULL);
    /* library: group:N on a model whose only weight feeds Conv */
    tm_onnx_quantize_params p = tm_onnx_quantize_params_default();
    p.spec.gran.kind = TM_GRAN_GROUP;
    p.spec.gran.group_size = 32;
    tm_err err;
    tm_onnx_quantize_result *r = run_job(in, outp("conv.g.onnx"), &p, TM_E_UNSUPPORTED, &err);
    assert_null(r);
    assert_non_null(strstr(err.msg, "group:32 applies to MatMul weights only"));
    assert_non_null(strstr(err.msg, "this model's 1 weight feed Conv"));
    assert_false(tmt_exists(outp("conv.g.onnx")));
    assert_false(tmt_exists(outp("conv.g.onnx.manifest.json")));
    /* allow_empty: the copy, nothing quantized, the reason kept per weight */
    p.allow_empty = 1;
    r = run_job(in, outp("conv.g.onnx"), &p, TM_OK, &err);
    assert_int_equal(r->n, 1);
    assert_int_equal(r->n_quantized, 0);
    assert_non_null(strstr(r->weights[0].reason, "MatMul weights only"));
    tm_onnx_quantize_result_free(r);
    assert_true(tmt_exists(outp("conv.g.onnx")));
    /* the CLI: exit 3 with the reason, --json error document; --allow-empty accepted */
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s -g group:16 2>&1", tmt_bin(), in, outp("cli.g.onnx")), 3);
    assert_non_null(strstr(o, "group:16 applies to MatMul weights only"));
    assert_non_null(strstr(o, "--allow-empty"));
    free(o);
    assert_false(tmt_exists(outp("cli.g.onnx")));
    json_t *j = tmt_run_json(3, "%s quantize %s -o %s -g group:16 --json 2>/dev/null", tmt_bin(), in, outp("cli.g.onnx"));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "error"), "code")), 3);
    json_decref(j);
    j = tmt_run_json(0, "%s quantize %s -o %s -g group:16 --allow-empty --json", tmt_bin(), in, outp("cli.g.onnx"));
    json_t *sum = json_object_get(json_object_get(j, "manifest"), "results");
    assert_int_equal(json_integer_value(json_object_get(sum, "n_quantized")), 0);
    assert_int_equal(json_integer_value(json_object_get(sum, "n_kept")), 1);
    json_decref(j);
    /* filters: an --include that matches no weight, an --exclude of every weight: exit 2 */
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s --include '^nothing$' 2>&1", tmt_bin(), in, outp("cli.i.onnx")), 2);
    assert_non_null(strstr(o, "--include '^nothing$' matched no weight (of 1)"));
    free(o);
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s --exclude '^W$' 2>&1", tmt_bin(), in, outp("cli.e.onnx")), 2);
    assert_non_null(strstr(o, "1 of 1 float weights filtered out"));
    free(o);
    assert_false(tmt_exists(outp("cli.i.onnx")));
    assert_false(tmt_exists(outp("cli.e.onnx")));
    /* an already quantized model (our own output): exit 3, the DequantizeLinear weight counted */
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s -q", tmt_bin(), in, outp("conv.q.onnx")), 0);
    free(o);
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s 2>&1", tmt_bin(), outp("conv.q.onnx"), outp("conv.qq.onnx")), 3);
    assert_non_null(strstr(o, "already quantized: 1 DequantizeLinear weight,"));
    free(o);
    assert_false(tmt_exists(outp("conv.qq.onnx")));
    /* every weight too small: exit 3 naming the reason */
    Onnx__GraphProto *g = graph("small");
    int64_t wd[2] = {3, 3}, xd[2] = {1, 3}, n;
    g_init(g, tensor_f32("Ws", 2, wd, weight_values(2, wd, &n)));
    g_in(g, vinfo("X", 1, 2, xd));
    g_node(g, node("MatMul", "m", "X,Ws", "Y", NULL, NULL));
    g_out(g, vinfo("Y", 1, 2, xd));
    in = write_model("small.onnx", g, 13, 7);
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s 2>&1", tmt_bin(), in, outp("small.q.onnx")), 3);
    assert_non_null(strstr(o, "'Ws': 9 elements, fewer than 16"));
    free(o);
    assert_false(tmt_exists(outp("small.q.onnx")));
    free_allocs();
}

/* ONNX Runtime's own QDQ models, already quantized: exit 3 (docs/exit-codes.md), not a copy */
static void test_already_quantized_shared(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    static const char *const models[] = {"conv_qdq_s8s8.onnx", "conv_qdq_s8s8_perchannel.onnx", "conv_qdq_u8u8.onnx"};
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        char src[4096], *o = NULL;
        snprintf(src, sizeof src, "%s/models/onnx/ort_testdata/%s", tmv_shared_dir(), models[k]);
        assert_int_equal(tmt_run(&o, "%s quantize %s -o %s 2>&1", tmt_bin(), src, outp("ortq.onnx")), 3);
        assert_non_null(strstr(o, "already quantized: 1 DequantizeLinear weight,"));
        free(o);
        assert_false(tmt_exists(outp("ortq.onnx")));
    }
}

/* tm_ref_find, and through it `scalar --ref` and `heatmap --ref`: W_quantized of an ONNX output
** is measured against W of the source; the symmetric output reads back as symmetric. */
static void test_ref_pairing_and_symmetric(void **state) {
    (void)state;
    g_rng = 43;
    float *w;
    const char *in = conv_model("convref.onnx", &w);
    const char *out = outp("convref.q.onnx");
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s -q", tmt_bin(), in, out), 0);
    free(o);
    tm_err err;
    tm_file *src = NULL, *q = NULL;
    assert_int_equal(tm_open(in, NULL, &src, &err), TM_OK);
    assert_int_equal(tm_open(out, NULL, &q, &err), TM_OK);
    assert_int_equal(tm_ref_find(src, "W_quantized"), tm_file_find(src, "W"));
    assert_true(tm_ref_find(src, "W") >= 0);
    assert_int_equal(tm_ref_find(src, "W_scale"), -1);
    assert_int_equal(tm_ref_find(src, "_quantized"), -1);
    assert_int_equal(tm_ref_find(NULL, "W_quantized"), -1);
    assert_int_equal(tm_ref_find(src, NULL), -1);
    /* exact name first: the output paired with itself */
    assert_int_equal(tm_ref_find(q, "W_quantized"), tm_file_find(q, "W_quantized"));
    /* symmetric int8 (zero points all 0) is symmetric to the reader */
    const tm_tensor *qt = tm_file_tensor(q, tm_file_find(q, "W_quantized"));
    assert_non_null(qt->quant);
    assert_true(qt->quant->zero_point_tensor >= 0);
    assert_int_equal(qt->quant->symmetric, 1);
    tm_close(q);
    tm_close(src);
    /* scalar --ref: element [4,2,1,0] (flat 4*27 + 2*9 + 1*3 = 129) against the source value */
    int64_t flat = 4 * 27 + 2 * 9 + 1 * 3;
    float es = ref_scale(w + 4 * 27, 27, 1, 127);
    int code = ref_code(w[flat], es, 127);
    json_t *j = tmt_run_json(0, "%s scalar %s W_quantized 4,2,1,0 --ref %s --json", tmt_bin(), out, in);
    assert_int_equal(json_integer_value(json_object_get(j, "code")), code);
    assert_true(tmt_num(j, "value") == (double)((float)code * es));
    assert_true(tmt_num(j, "ref_value") == (double)w[flat]);
    assert_true(fabs(tmt_num(j, "error") - ((double)((float)code * es) - (double)w[flat])) < 1e-12);
    double el = tmt_num(j, "error_lsb");
    assert_true(fabs(el) <= 0.5 + 1e-6);
    assert_true(fabs(el - ((double)((float)code * es) - (double)w[flat]) / (double)es) < 1e-6);
    assert_null(json_object_get(j, "note"));
    json_decref(j);
    assert_int_equal(tmt_run(&o, "%s scalar %s W_quantized 4,2,1,0 --ref %s", tmt_bin(), out, in), 0);
    assert_non_null(strstr(o, "(tensor 'W' of the reference)"));
    free(o);
    /* heatmap --mode error --ref: drawn, the range is the largest |error| in LSB */
    double maxl = 0;
    for (int64_t c = 0; c < 6; c++) {
        float s = ref_scale(w + c * 27, 27, 1, 127);
        for (int64_t k = 0; k < 27; k++) {
            float dq = (float)ref_code(w[c * 27 + k], s, 127) * s;
            double l = fabs((double)dq - (double)w[c * 27 + k]) / (double)s;
            if (l > maxl) maxl = l;
        }
    }
    j = tmt_run_json(0, "%s heatmap %s W_quantized --mode error --ref %s -o %s --json", tmt_bin(), out, in,
                     outp("err.png"));
    assert_string_equal(json_string_value(json_object_get(j, "ref_tensor")), "W");
    json_t *rg = json_object_get(j, "range");
    assert_true(fabs(json_number_value(json_array_get(rg, 1)) - maxl) < 1e-5);
    assert_true(maxl > 0.25 && maxl <= 0.5 + 1e-6);
    json_decref(j);
    assert_true(tmt_exists(outp("err.png")));
    /* inspect labels the scheme sym, --json "symmetric": true; the asymmetric output is not */
    j = tmt_run_json(0, "%s inspect %s --json", tmt_bin(), out);
    json_t *t = tmt_find_named(json_object_get(j, "tensors"), "W_quantized");
    assert_non_null(t);
    assert_true(json_is_true(json_object_get(json_object_get(t, "quantization"), "symmetric")));
    json_decref(j);
    assert_int_equal(tmt_run(&o, "%s inspect %s", tmt_bin(), out), 0);
    assert_non_null(strstr(o, "I8 channel:0 sym scale:F32"));
    free(o);
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s --asymmetric -q", tmt_bin(), in, outp("convref.a.onnx")), 0);
    free(o);
    j = tmt_run_json(0, "%s inspect %s --json", tmt_bin(), outp("convref.a.onnx"));
    t = tmt_find_named(json_object_get(j, "tensors"), "W_quantized");
    assert_true(json_is_false(json_object_get(json_object_get(t, "quantization"), "symmetric")));
    json_decref(j);
    free_allocs();
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tm_onnxq_%d", (int)getpid());
    mkdir(g_tmp, 0755);
    return 0;
}
static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    return system(cmd) == 0 ? 0 : 0;
}

/* --write-models DIR: the generated models tests/ort/run.sh runs through ONNX Runtime */
static int write_models(const char *dir) {
    snprintf(g_tmp, sizeof g_tmp, "%s", dir);
    g_rng = 101;
    matmul_model("matmul_opset21.onnx", 64, 16, 21, NULL, NULL);
    g_rng = 102;
    matmul_model("matmul_opset9_softmax.onnx", 64, 16, 9, "Softmax", NULL);
    g_rng = 103;
    matmul_model("matmul_opset9_relu.onnx", 64, 16, 9, "Relu", NULL);
    /* float in and out, a float16 Conv weight in between (Cast -> Conv -> Cast) */
    g_rng = 104;
    Onnx__GraphProto *g = graph("f16");
    int64_t wd[4] = {8, 3, 3, 3}, n, xd[4] = {1, 3, 16, 16};
    float *w = weight_values(4, wd, &n);
    Onnx__TensorProto *t = tensor_f32("W", 4, wd, w);
    t->data_type = 10;
    t->raw_data.len = (size_t)n * 2;
    for (int64_t k = 0; k < n; k++) {
        uint16_t h = tm_f32_to_f16(w[k]);
        memcpy(t->raw_data.data + 2 * k, &h, 2);
    }
    g_init(g, t);
    g_in(g, vinfo("X", 1, 4, xd));
    g_node(g, node("Cast", "c_in", "X", "X16", attr_i("to", 10), NULL));
    g_node(g, node("Conv", "conv", "X16,W", "Y16", NULL, NULL));
    g_node(g, node("Cast", "c_out", "Y16", "Y", attr_i("to", 1), NULL));
    g_out(g, vinfo("Y", 1, 0, NULL));
    write_model("conv_f16_opset13.onnx", g, 13, 7);
    free_allocs();
    return 0;
}

/* The whole job under every kernel set this CPU runs (tm_onnx_quantize_params.kernels: auto, ref, avx2,
** avx512; observers, quantize and error statistics): the same file bytes and the same error
** figures, bit for bit, for minmax and MSE observers, symmetric int8 channels and asymmetric
** uint8 and int4 groups, on a weight whose rows are not a multiple of any vector width. */
static void test_kernel_sets(void **state) {
    (void)state;
    static const char *const kern[] = {"auto", "ref", "avx2", "avx512"};
    static const struct { tm_dtype code; tm_granularity gk; int64_t gs; int symmetric; tm_observer_kind obs; } sc[] = {
        {TM_I8, TM_GRAN_CHANNEL, 0, 1, TM_OBS_MINMAX}, {TM_U8, TM_GRAN_TENSOR, 0, 0, TM_OBS_MSE},
        {TM_I4, TM_GRAN_GROUP, 32, 0, TM_OBS_MINMAX}, {TM_I8, TM_GRAN_CHANNEL, 0, 0, TM_OBS_PERCENTILE}};
    g_rng = 11;
    const char *in = matmul_model("kern.onnx", 96, 131, 21, NULL, NULL);
    for (size_t c = 0; c < sizeof sc / sizeof sc[0]; c++) {
        uint8_t *b0 = NULL;
        size_t n0 = 0;
        tm_errsum e0;
        int ran = 0;
        for (size_t k = 0; k < sizeof kern / sizeof kern[0]; k++) {
            tm_onnx_quantize_params p = tm_onnx_quantize_params_default();
            if (tm_kernels_get(kern[k], &p.kernels) != TM_OK) continue; /* the CPU lacks it */
            p.spec.code_dtype = sc[c].code;
            p.spec.gran.kind = sc[c].gk;
            p.spec.gran.group_size = sc[c].gs;
            p.spec.symmetric = sc[c].symmetric;
            p.spec.observer = tm_observer_default(sc[c].obs);
            p.force = 1;
            tm_err err;
            tm_onnx_quantize_result *r = run_job(in, outp("kern.q.onnx"), &p, TM_OK, &err);
            assert_int_equal(r->n_quantized, 1);
            size_t n;
            uint8_t *b = read_bytes(outp("kern.q.onnx"), &n);
            if (!b0) {
                b0 = b;
                n0 = n;
                e0 = r->weights[0].e;
            } else {
                assert_int_equal(n, n0);
                assert_memory_equal(b, b0, n);
                assert_memory_equal(&r->weights[0].e, &e0, sizeof e0);
                free(b);
            }
            ran++;
            tm_onnx_quantize_result_free(r);
        }
        assert_true(ran >= 2); /* auto and ref at least */
        free(b0);
    }
    free_allocs();
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-models")) return write_models(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_int8_channel_exact),
        cmocka_unit_test(test_kernel_sets),
        cmocka_unit_test(test_uint8_tensor),
        cmocka_unit_test(test_channel_axis_per_op),
        cmocka_unit_test(test_conflict_and_skips),
        cmocka_unit_test(test_opset_table),
        cmocka_unit_test(test_opset_raised),
        cmocka_unit_test(test_opset_ms_fallback),
        cmocka_unit_test(test_int4_refused_atomic),
        cmocka_unit_test(test_int4_block_exact),
        cmocka_unit_test(test_subgraph_constants),
        cmocka_unit_test(test_float16_weight_cast),
        cmocka_unit_test(test_cli_json_and_qdiff),
        cmocka_unit_test(test_cli_exit_codes),
        cmocka_unit_test(test_nothing_to_quantize),
        cmocka_unit_test(test_already_quantized_shared),
        cmocka_unit_test(test_ref_pairing_and_symmetric),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
