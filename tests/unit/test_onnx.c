/* test_onnx.c: the ONNX reader (src/formats/onnx.c) and the graph API (tensormorph/graph.h):
** every model under ../shared/models/onnx opens; the real exports list their Constant-node
** weights (PaddleOCR, silero VAD in If subgraphs) with the right dtypes and shapes; the backend
** DequantizeLinear node tests dequantize through the tensor view bit for bit as the ONNX
** reference implementation did; onnxruntime's quantized test models give the granularities and
** axes they were written with; small models built here (protobuf written field by field) cover
** typed fields, 4-bit rows, external data and every malformed case with its error. */
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
#include <sys/wait.h>
#include <unistd.h>

#include "tensormorph.h"
#include "tensormorph/graph.h"
#include "tensormorph/experimental.h"
#include "helpers/onnx_pb.h"
#include "helpers/vectors.h"

/* ---------------------------------------------------------------------------------------- */
/* helpers                                                                                    */
/* ---------------------------------------------------------------------------------------- */

static char g_tmp[256];

static const char *onnx_dir(void) {
    static char buf[1024];
    const char *sh = tmv_shared_dir();
    if (!sh) return NULL;
    snprintf(buf, sizeof buf, "%s/models/onnx", sh);
    return buf;
}

static tm_file *open_ok(const char *rel) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", onnx_dir(), rel);
    tm_file *f = NULL;
    tm_err err;
    tm_status s = tm_open(p, NULL, &f, &err);
    if (s) print_message("%s: %s\n", p, err.msg);
    assert_int_equal(s, TM_OK);
    assert_int_equal(tm_file_format(f), TM_FMT_ONNX);
    return f;
}

static const tm_tensor *must_find(const tm_file *f, const char *name) {
    int64_t i = tm_file_find(f, name);
    if (i < 0) print_message("missing tensor %s\n", name);
    assert_true(i >= 0);
    return tm_file_tensor(f, i);
}

static const char *meta(const tm_file *f, const char *key) {
    for (int64_t i = 0; i < tm_file_n_meta(f); i++)
        if (!strcmp(tm_file_meta_key(f, i), key)) return tm_file_meta_value(f, i);
    return NULL;
}

static int has_warning(const tm_file *f, const char *needle) {
    for (int64_t i = 0; i < tm_file_n_warnings(f); i++)
        if (strstr(tm_file_warning(f, i), needle)) return 1;
    return 0;
}

static void assert_shape(const tm_tensor *t, int ndim, const int64_t *shape) {
    assert_int_equal(t->ndim, ndim);
    for (int d = 0; d < ndim; d++) assert_int_equal(t->shape[d], shape[d]);
}

static int64_t count_dtype(const tm_file *f, tm_dtype dt) {
    int64_t n = 0;
    for (int64_t i = 0; i < tm_file_n_tensors(f); i++) n += tm_file_tensor(f, i)->dtype == dt;
    return n;
}

static uint32_t f32_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }

static void write_file(const char *path, const void *d, size_t n) {
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(d, 1, n, fp), n);
    fclose(fp);
}

static tm_status open_model_bytes(const char *name, pb *m, tm_file **f, tm_err *err) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_tmp, name);
    write_file(p, m->b, m->n);
    free(m->b);
    memset(m, 0, sizeof *m);
    return tm_open(p, NULL, f, err);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tm_onnx_XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---------------------------------------------------------------------------------------- */
/* every model opens                                                                          */
/* ---------------------------------------------------------------------------------------- */

static int n_models_seen;

static void open_tree(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        assert_int_equal(stat(p, &st), 0);
        if (S_ISDIR(st.st_mode)) { open_tree(p); continue; }
        size_t l = strlen(p);
        if (l < 5 || strcmp(p + l - 5, ".onnx")) continue;
        tm_file *f = NULL;
        tm_err err;
        tm_status s = tm_open(p, NULL, &f, &err);
        if (s) print_message("%s: %s\n", p, err.msg);
        assert_int_equal(s, TM_OK);
        n_models_seen++;
        assert_true(tm_graph_n_nodes(f) >= 1);
        for (int64_t i = 0; i < tm_file_n_tensors(f); i++) {
            const tm_tensor *t = tm_file_tensor(f, i);
            const void *q;
            assert_int_equal(tm_tensor_data(f, i, 0, t->n_bytes, &q, NULL), TM_OK);
            /* every listed tensor has a float view (codes dequantized, 4-bit ones through
            ** their quantization) except 4-bit tensors that are not quantized */
            if ((t->dtype == TM_I4 || t->dtype == TM_U4) && !t->quant) continue;
            int64_t n = t->n_elems < 64 ? t->n_elems : 64;
            float v[64];
            tm_status rs = tm_tensor_read_f32(f, i, t->n_elems - n, n, v, &err);
            if (rs) print_message("%s: %s: %s\n", p, t->name, err.msg);
            assert_int_equal(rs, TM_OK);
        }
        tm_close(f);
    }
    closedir(d);
}

static void test_every_model_opens(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    n_models_seen = 0;
    open_tree(onnx_dir());
    /* 3 npm models, 45 node tests, 24 onnxruntime test models */
    assert_int_equal(n_models_seen, 72);
}

/* ---------------------------------------------------------------------------------------- */
/* real exports: weights in Constant nodes                                                    */
/* ---------------------------------------------------------------------------------------- */

static void test_silero_if_subgraph_constants(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    tm_file *f = open_ok("npm/silero_vad/silero_vad_v5.onnx");
    /* no initializers; 341 Constant tensors (FLOAT x34, INT64 x307), almost all in If branches */
    assert_int_equal(tm_file_n_tensors(f), 341);
    assert_int_equal(count_dtype(f, TM_F32), 34);
    assert_int_equal(count_dtype(f, TM_I64), 307);
    assert_string_equal(meta(f, "onnx.initializers"), "0");
    assert_string_equal(meta(f, "onnx.constant_tensors"), "341");
    assert_string_equal(meta(f, "onnx.nodes"), "689");
    assert_string_equal(meta(f, "onnx.producer"), "spox");
    assert_string_equal(meta(f, "onnx.opset.ai.onnx"), "16");
    const tm_tensor *t = must_find(f, "If_0_then_branch__Inline_0__stft.forward_basis_buffer");
    assert_int_equal(t->dtype, TM_F32);
    assert_shape(t, 3, (int64_t[]){258, 1, 256});
    t = must_find(f, "If_0_else_branch__Inline_0__stft.forward_basis_buffer");
    assert_shape(t, 3, (int64_t[]){130, 1, 128});
    t = must_find(f, "If_0_else_branch__Inline_0__decoder.rnn.weight_ih");
    assert_shape(t, 2, (int64_t[]){512, 128});
    t = must_find(f, "If_0_then_branch__Inline_0__encoder.0.reparam_conv.weight");
    assert_shape(t, 3, (int64_t[]){128, 129, 3});
    /* 50 subgraphs: the main graph plus 50 distinct subgraph paths; the weight's Constant sits
    ** in If_0's then_branch */
    int64_t n = tm_graph_n_nodes(f);
    assert_int_equal(n, 689);
    int64_t vi = tm_graph_find_value(f, "If_0_then_branch__Inline_0__encoder.0.reparam_conv.weight");
    assert_true(vi >= 0);
    assert_int_equal(tm_graph_value_at(f, vi)->tensor,
                     tm_file_find(f, "If_0_then_branch__Inline_0__encoder.0.reparam_conv.weight"));
    int found = 0;
    char *paths[64];
    int n_paths = 0;
    for (int64_t i = 0; i < n; i++) {
        const tm_graph_node *nd = tm_graph_node_at(f, i);
        if (nd->n_outputs == 1 && nd->outputs[0] == vi) {
            assert_string_equal(nd->op_type, "Constant");
            assert_string_equal(nd->graph, "If_0/then_branch");
            found = 1;
        }
        int seen = 0;
        for (int k = 0; k < n_paths; k++) seen |= !strcmp(paths[k], nd->graph);
        if (!seen && n_paths < 64) paths[n_paths++] = (char *)nd->graph;
    }
    assert_true(found);
    assert_int_equal(n_paths, 51);
    /* values: the view reads the Constant's float_data/raw_data; sum of |w| is finite, nonzero */
    int64_t wi = tm_file_find(f, "If_0_else_branch__Inline_0__decoder.rnn.weight_ih");
    float *w = malloc(512 * 128 * sizeof *w);
    assert_int_equal(tm_tensor_read_f32(f, wi, 0, 512 * 128, w, NULL), TM_OK);
    double s = 0;
    for (int i = 0; i < 512 * 128; i++) s += fabs(w[i]);
    assert_true(isfinite(s) && s > 1.0);
    free(w);
    tm_close(f);
}

static void test_paddleocr_constant_weights(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    tm_file *f = open_ok("npm/paddleocr/ch_PP-OCRv4_rec_infer.onnx");
    assert_int_equal(tm_file_n_tensors(f), 325);
    assert_int_equal(count_dtype(f, TM_F32), 309);
    assert_int_equal(count_dtype(f, TM_I32), 15);
    assert_int_equal(count_dtype(f, TM_I64), 1);
    assert_string_equal(meta(f, "onnx.initializers"), "0");
    assert_string_equal(meta(f, "onnx.opset.ai.onnx"), "9");
    assert_string_equal(meta(f, "onnx.nodes"), "765");
    assert_shape(must_find(f, "linear_85.w_0"), 2, (int64_t[]){120, 6625});
    assert_shape(must_find(f, "conv2d_180.w_0"), 4, (int64_t[]){480, 480, 1, 1});
    assert_shape(must_find(f, "batch_norm2d_148.w_0"), 1, (int64_t[]){60});
    tm_close(f);
    f = open_ok("npm/paddleocr/ch_ppocr_mobile_v2.0_cls_infer.onnx");
    assert_int_equal(tm_file_n_tensors(f), 250);
    assert_int_equal(count_dtype(f, TM_F32), 249);
    assert_int_equal(count_dtype(f, TM_I32), 1);
    assert_shape(must_find(f, "conv2d_44.w_0"), 4, (int64_t[]){50, 200, 1, 1});
    assert_shape(must_find(f, "batch_norm_0.b_0"), 1, (int64_t[]){8});
    tm_close(f);
}

/* ---------------------------------------------------------------------------------------- */
/* DequantizeLinear node tests: the view equals the ONNX reference output bit for bit          */
/* ---------------------------------------------------------------------------------------- */

static tm_file *open_pb(const char *dir, const char *file) {
    char p[4200];
    snprintf(p, sizeof p, "%s/test_data_set_0/%s", dir, file);
    tm_file *f = NULL;
    tm_err err;
    tm_status s = tm_onnx_open_tensor(p, &f, &err);
    if (s) print_message("%s: %s\n", p, err.msg);
    assert_int_equal(s, TM_OK);
    return f;
}

static float *read_all(const tm_file *f, int64_t i) {
    const tm_tensor *t = tm_file_tensor(f, i);
    float *v = malloc((size_t)(t->n_elems ? t->n_elems : 1) * sizeof *v);
    tm_err err;
    tm_status s = tm_tensor_read_f32(f, i, 0, t->n_elems, v, &err);
    if (s) print_message("%s: %s\n", t->name, err.msg);
    assert_int_equal(s, TM_OK);
    return v;
}

static void test_dequantizelinear_node_tests(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char base[1536];
    snprintf(base, sizeof base, "%s/onnx_node_tests", onnx_dir());
    DIR *d = opendir(base);
    assert_non_null(d);
    int n_view = 0, n_unlisted = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "test_dequantizelinear", 21)) continue;
        char dir[2048], model[2100], in[3][2200];
        snprintf(dir, sizeof dir, "%s/%s", base, de->d_name);
        snprintf(model, sizeof model, "%s/model.onnx", dir);
        int n_in = 0;
        for (int k = 0; k < 3; k++) {
            snprintf(in[k], sizeof in[k], "%s/test_data_set_0/input_%d.pb", dir, k);
            if (access(in[k], R_OK) == 0) n_in = k + 1;
        }
        const char *paths[3] = {in[0], in[1], in[2]};
        tm_file *f = NULL;
        tm_err err;
        tm_status s = tm_onnx_open_bound(model, n_in, paths, &f, &err);
        if (s) print_message("%s: %s\n", model, err.msg);
        assert_int_equal(s, TM_OK);
        /* the one node: DequantizeLinear(x, x_scale[, x_zero_point]) -> y */
        assert_int_equal(tm_graph_n_nodes(f), 1);
        const tm_graph_node *nd = tm_graph_node_at(f, 0);
        assert_string_equal(nd->op_type, "DequantizeLinear");
        assert_int_equal(nd->qkind, TM_QNODE_DEQUANTIZE);
        const tm_graph_value *x = tm_graph_value_at(f, nd->inputs[0]);
        assert_true(x->quantized);
        tm_file *ref = open_pb(dir, "output_0.pb");
        const tm_tensor *rt = tm_file_tensor(ref, 0);
        float *want = read_all(ref, 0);
        if (x->tensor < 0) {
            /* int2/uint2/float4e2m1: no tensormorph dtype; the model says so and opens */
            assert_true(has_warning(f, "has no tensormorph dtype"));
            assert_true(strstr(de->d_name, "int2") || strstr(de->d_name, "float4e2m1"));
            n_unlisted++;
        } else {
            const tm_tensor *ct = tm_file_tensor(f, x->tensor);
            assert_int_equal(ct->n_elems, rt->n_elems);
            if (ct->quant) {
                /* the recognised quantized tensor, read through the view */
                assert_int_equal(nd->weight_tensor, x->tensor);
                float *got = read_all(f, x->tensor);
                for (int64_t k = 0; k < ct->n_elems; k++) {
                    if (rt->dtype == TM_F16) /* the reference rounds the f32 product to f16 */
                        assert_int_equal(tm_f32_to_f16(got[k]), tm_f32_to_f16(want[k]));
                    else if (f32_bits(got[k]) != f32_bits(want[k])) {
                        print_message("%s[%lld]: view %.9g, reference %.9g\n", de->d_name,
                                      (long long)k, got[k], want[k]);
                        fail();
                    }
                }
                free(got);
                if (strstr(de->d_name, "blocked")) {
                    assert_int_equal(ct->quant->gran.kind, TM_GRAN_GROUP);
                    assert_int_equal(ct->quant->gran.axis, 1);
                    assert_int_equal(ct->quant->gran.group_size, 2);
                } else if (strstr(de->d_name, "axis")) {
                    assert_int_equal(ct->quant->gran.kind, TM_GRAN_CHANNEL);
                    assert_int_equal(ct->quant->gran.axis, 1);
                }
                if (strstr(de->d_name, "int16")) { /* whole 16-bit words, one code each */
                    assert_int_equal(ct->quant->packing.bits, 16);
                    assert_int_equal(ct->quant->packing.codes_per_container, 1);
                    assert_int_equal(ct->quant->code_dtype, ct->dtype);
                }
                if (strstr(de->d_name, "int4")) {
                    assert_int_equal(ct->quant->packing.codes_per_container, 2);
                    assert_int_equal(ct->quant->packing.bits, 4);
                    assert_int_equal(ct->n_bytes, 3); /* 5 codes, two per byte */
                }
                n_view++;
            } else {
                print_message("%s: codes not mapped to a quantized tensor\n", de->d_name);
                fail();
            }
        }
        free(want);
        tm_close(ref);
        tm_close(f);
    }
    closedir(d);
    /* plain, axis, blocked, e4m3fn, e4m3fn_float16, e4m3fn_zero_point, e5m2, int4, uint4 */
    assert_int_equal(n_view, 11);    /* ... and int16, uint16 */
    assert_int_equal(n_unlisted, 3); /* int2, uint2, float4e2m1 */
}

/* The TensorProto reader on the typed fields: int4 codes in int32_data, one packed byte each. */
static void test_tensorproto_typed_fields(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char dir[2048];
    snprintf(dir, sizeof dir, "%s/onnx_node_tests/test_dequantizelinear_int4", onnx_dir());
    tm_file *f = open_pb(dir, "input_0.pb");
    const tm_tensor *t = tm_file_tensor(f, 0);
    assert_string_equal(t->name, "x");
    assert_int_equal(t->dtype, TM_I4);
    assert_shape(t, 1, (int64_t[]){5});
    assert_int_equal(t->n_bytes, 3);
    const uint8_t *p;
    assert_int_equal(tm_tensor_data(f, 0, 0, 3, (const void **)&p, NULL), TM_OK);
    /* int32_data = [0x10, 0xc7, 0x08]: codes 0, 1, 7, -4, -8 (low nibble first) */
    assert_int_equal(p[0], 0x10);
    assert_int_equal(p[1], 0xc7);
    assert_int_equal(p[2], 0x08);
    tm_close(f);
    snprintf(dir, sizeof dir, "%s/onnx_node_tests/test_dequantizelinear_e4m3fn", onnx_dir());
    f = open_pb(dir, "input_0.pb");
    t = tm_file_tensor(f, 0);
    assert_int_equal(t->dtype, TM_F8_E4M3);
    float v[5];
    assert_int_equal(tm_tensor_read_f32(f, 0, 0, 5, v, NULL), TM_OK);
    /* int32_data 0x00 0x30 0x38 0x7e 0xed: 0, 0.5, 1, 448, -104 (OFP8 E4M3FN) */
    assert_true(v[0] == 0.0f && v[1] == 0.5f && v[2] == 1.0f && v[3] == 448.0f && v[4] == -104.0f);
    tm_close(f);
}

/* ---------------------------------------------------------------------------------------- */
/* onnxruntime's quantized models                                                              */
/* ---------------------------------------------------------------------------------------- */

static void test_ort_granularities(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    tm_file *f = open_ok("ort_testdata/conv_qdq_s8s8_perchannel.onnx");
    const tm_tensor *t = must_find(f, "conv1.weight_quantized");
    assert_non_null(t->quant);
    assert_int_equal(t->quant->code_dtype, TM_I8);
    assert_int_equal(t->quant->gran.kind, TM_GRAN_CHANNEL);
    assert_int_equal(t->quant->gran.axis, 0);
    assert_shape(t, 4, (int64_t[]){32, 3, 3, 3});
    assert_int_equal(must_find(f, "conv1.weight_scale")->role, TM_ROLE_SCALE);
    assert_int_equal(must_find(f, "conv1.weight_zero_point")->role, TM_ROLE_ZERO_POINT);
    assert_int_equal(must_find(f, "conv1.weight_scale")->owner, tm_file_find(f, "conv1.weight_quantized"));
    /* one element by hand: (q - zp) * scale of its channel */
    int64_t wi = tm_file_find(f, "conv1.weight_quantized");
    const int8_t *q;
    const float *sc;
    const int8_t *zp;
    assert_int_equal(tm_tensor_data(f, wi, 0, 32 * 27, (const void **)&q, NULL), TM_OK);
    assert_int_equal(tm_tensor_data(f, tm_file_find(f, "conv1.weight_scale"), 0, 128, (const void **)&sc, NULL), TM_OK);
    assert_int_equal(tm_tensor_data(f, tm_file_find(f, "conv1.weight_zero_point"), 0, 32, (const void **)&zp, NULL), TM_OK);
    tm_qelement e;
    assert_int_equal(tm_qelement_get(f, wi, 5 * 27 + 4, &e, NULL), TM_OK);
    float s5;
    memcpy(&s5, (const uint8_t *)sc + 5 * 4, 4);
    assert_int_equal(e.code, q[5 * 27 + 4]);
    assert_int_equal(e.zero_point, zp[5]);
    assert_int_equal(e.group, 5);
    assert_true((float)e.value == (float)(q[5 * 27 + 4] - zp[5]) * s5);
    assert_true(has_warning(f, "") == 0); /* int32 bias: plain, no warning */
    /* ORT's s8s8 per-channel weight: a zero-point tensor of 32 zeros, so symmetric (the
    ** zero-point tensor stays attached) */
    int all_zero = 1;
    for (int k = 0; k < 32; k++) all_zero &= zp[k] == 0;
    assert_true(all_zero);
    assert_int_equal(t->quant->zero_point_tensor, tm_file_find(f, "conv1.weight_zero_point"));
    assert_int_equal(t->quant->symmetric, 1);
    tm_close(f);

    f = open_ok("ort_testdata/conv_qdq_u8u8.onnx");
    t = must_find(f, "conv1.weight_quantized");
    assert_int_equal(t->quant->code_dtype, TM_U8);
    assert_int_equal(t->quant->gran.kind, TM_GRAN_TENSOR);
    /* a non-zero uint8 zero point: asymmetric */
    const uint8_t *zu;
    assert_int_equal(tm_tensor_data(f, tm_file_find(f, "conv1.weight_zero_point"), 0, 1, (const void **)&zu, NULL), TM_OK);
    assert_true(zu[0] != 0);
    assert_int_equal(t->quant->symmetric, 0);
    tm_close(f);

    /* a negative axis (-3) on a rank-4 weight is axis 1 */
    f = open_ok("ort_testdata/ort_github_issue_12151_neg_dq_axis.onnx");
    int nq = 0;
    for (int64_t i = 0; i < tm_file_n_tensors(f); i++) {
        t = tm_file_tensor(f, i);
        if (!t->quant) continue;
        nq++;
        assert_int_equal(t->quant->gran.kind, TM_GRAN_CHANNEL);
        assert_int_equal(t->quant->gran.axis, t->ndim - 3);
    }
    assert_int_equal(nq, 1);
    tm_close(f);

    /* int4 weights with int4 zero points: rows of 3 codes re-laid byte-aligned */
    f = open_ok("ort_testdata/conv.int4_weights.qdq.onnx");
    t = must_find(f, "weight_quantized");
    assert_int_equal(t->quant->code_dtype, TM_I4);
    assert_int_equal(t->quant->gran.kind, TM_GRAN_CHANNEL);
    assert_int_equal(t->n_bytes, 45 * 2);
    const tm_tensor *z = must_find(f, "weight_zero_point");
    assert_int_equal(z->phys_dtype, TM_I4); /* INT4 in the file */
    assert_int_equal(z->dtype, TM_I8);      /* one sign-extended byte per code in the view */
    assert_int_equal(z->n_bytes, 5);
    float *w = read_all(f, tm_file_find(f, "weight_quantized"));
    float *s = read_all(f, tm_file_find(f, "weight_scale"));
    float *zz = read_all(f, tm_file_find(f, "weight_zero_point"));
    for (int64_t k = 0; k < 135; k++) {
        int64_t ch = k / 27;
        float code = w[k] / s[ch] + zz[ch];
        assert_true(code >= -8.0f && code <= 7.0f);          /* an int4 code */
        assert_true(fabsf(code - nearbyintf(code)) < 1e-3f); /* an integer */
    }
    /* symmetric exactly when every (expanded 4-bit) zero point is 0 */
    int zz_zero = 1;
    for (int k = 0; k < 5; k++) zz_zero &= zz[k] == 0.0f;
    assert_int_equal(t->quant->symmetric, zz_zero);
    free(w); free(s); free(zz);
    tm_close(f);

    /* 16-bit Q/DQ in both domains: recorded in the graph; the U16 weight is a quantized tensor
    ** (values checked in test_gptq_awq.c test_onnx_qdq16) */
    f = open_ok("ort_testdata/transform/fusion/constant_folding_dequantizelinear.qdq16_contrib.onnx");
    assert_false(has_warning(f, "U16"));
    assert_non_null(must_find(f, "conv_weight_quantized")->quant);
    assert_int_equal(must_find(f, "conv_weight_quantized")->quant->code_dtype, TM_U16);
    int64_t n_ms = 0;
    for (int64_t i = 0; i < tm_graph_n_nodes(f); i++) {
        const tm_graph_node *nd = tm_graph_node_at(f, i);
        if (nd->qkind == TM_QNODE_DEQUANTIZE && !strcmp(nd->domain, "com.microsoft")) n_ms++;
    }
    assert_int_equal(n_ms, 3);
    tm_close(f);

    f = open_ok("ort_testdata/transform/qdq_optimization/dup_qdq_float16.onnx");
    nq = 0;
    for (int64_t i = 0; i < tm_file_n_tensors(f); i++) {
        t = tm_file_tensor(f, i);
        if (t->quant) { nq++; assert_int_equal(tm_file_tensor(f, t->quant->scale_tensor)->dtype, TM_F16); }
    }
    assert_int_equal(nq, 1);
    tm_close(f);
    f = open_ok("ort_testdata/transform/qdq_optimization/dup_qdq_bfloat16.onnx");
    for (int64_t i = 0; i < tm_file_n_tensors(f); i++) {
        t = tm_file_tensor(f, i);
        if (t->quant) assert_int_equal(tm_file_tensor(f, t->quant->scale_tensor)->dtype, TM_BF16);
    }
    tm_close(f);

    /* MatMulNBits K=2 N=3 block 32, no zero points: codes centred at 8 */
    f = open_ok("ort_testdata/transform/runtime_optimization/matmulnbits_add.onnx");
    t = must_find(f, "B_Q4");
    assert_non_null(t->quant);
    assert_shape(t, 2, (int64_t[]){3, 2});
    assert_int_equal(t->quant->gran.kind, TM_GRAN_GROUP);
    assert_int_equal(t->quant->gran.group_size, 32);
    assert_int_equal(t->quant->packing.offset, 8);
    assert_int_equal(t->quant->code_dtype, TM_I4);
    assert_int_equal(must_find(f, "B_scales")->role, TM_ROLE_SCALE);
    for (int64_t k = 0; k < 6; k++) {
        tm_qelement e;
        assert_int_equal(tm_qelement_get(f, tm_file_find(f, "B_Q4"), k, &e, NULL), TM_OK);
        assert_true(e.code >= -8 && e.code <= 7);
        assert_int_equal(e.group, k / 2);
        assert_true((float)e.value == (float)e.code * (float)e.scale);
    }
    tm_close(f);

    /* external data: the .bin beside the model is mapped, and the tensor lies in it */
    f = open_ok("ort_testdata/conv_qdq_external_ini.onnx");
    assert_int_equal(tm_file_n_paths(f), 2);
    assert_non_null(strstr(tm_file_path(f, 1), "conv_qdq_external_ini.bin"));
    /* the uint8 weight is external; its DequantizeLinear carries axis=1 but one scale: per-tensor */
    t = must_find(f, "conv1.weight_quantized");
    assert_int_equal(t->file_index, 1);
    assert_int_equal(t->n_bytes, 864);
    assert_true(t->offset + t->n_bytes <= tm_file_size(f, 1));
    assert_non_null(t->quant);
    assert_int_equal(t->quant->gran.kind, TM_GRAN_TENSOR);
    assert_int_equal(t->quant->code_dtype, TM_U8);
    tm_close(f);

    /* an FP8 E4M3FN initializer is listed as F8_E4M3 */
    f = open_ok("ort_testdata/custom_op_local_function/custom_ops_type_inference_fails_0.onnx");
    assert_int_equal(count_dtype(f, TM_F8_E4M3), 1);
    tm_close(f);
}

/* Q/DQ around activations are quantization points; types flow through the graph. */
/* The Architecture view of an ONNX model is its graph: nodes in graph order under their
** (sub)graph, badges from what flows out, boundaries where that changes. */
static void test_arch_from_graph(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    tm_file *f = open_ok("ort_testdata/conv.int4_weights.qdq.onnx");
    tm_arch *a = NULL;
    tm_err err;
    assert_int_equal(tm_arch_build(f, &a, &err), TM_OK);
    const tm_arch_node *root = &a->nodes[0];
    assert_int_equal(root->first_child >= 0, 1);
    const tm_arch_node *g = &a->nodes[root->first_child];
    assert_string_equal(g->name, "graph");
    assert_int_equal(g->next_sibling, -1); /* no subgraphs in this model */
    int64_t k = 0, n_boundary = 0, weight_node = -1;
    for (int64_t c = g->first_child; c >= 0; c = a->nodes[c].next_sibling, k++) {
        const tm_arch_node *x = &a->nodes[c];
        const tm_graph_node *nd = tm_graph_node_at(f, k);
        char want[256];
        snprintf(want, sizeof want, "%lld:%s %s", (long long)k, nd->op_type, nd->name);
        for (char *q = want; *q; q++) if (*q == '.') *q = '_';
        assert_string_equal(x->name, want); /* graph order, not name order */
        n_boundary += x->boundary;
        if (!strcmp(nd->name, "weight_DequantizeLinear")) weight_node = c;
        if (!strcmp(nd->name, "input_0_QuantizeLinear")) {
            assert_string_equal(x->dtype, "UINT8");
            assert_string_equal(x->scheme, "quantized codes");
        }
    }
    assert_int_equal(k, tm_graph_n_nodes(f));
    assert_true(weight_node >= 0);
    /* the int4 weight's own scheme on the node that dequantizes it, its params counted there */
    assert_string_equal(a->nodes[weight_node].dtype, "FLOAT");
    assert_non_null(strstr(a->nodes[weight_node].scheme, "I4 channel"));
    assert_int_equal(a->nodes[weight_node].n_params >= 5 * 3 * 3 * 3, 1);
    /* codes -> float -> codes: the dtype changes along the graph, so boundaries are drawn */
    assert_true(n_boundary >= 2);
    assert_int_equal(a->n_boundaries, n_boundary);
    tm_arch_free(a);
    tm_close(f);
}

static void test_graph_quant_boundaries(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    tm_file *f = open_ok("ort_testdata/conv_qdq_s8s8_perchannel.onnx");
    assert_int_equal(tm_graph_n_nodes(f), 7);
    assert_string_equal(meta(f, "onnx.activation_quantization_points"), "2");
    int64_t n_dq = 0, n_q = 0;
    for (int64_t i = 0; i < tm_graph_n_nodes(f); i++) {
        const tm_graph_node *nd = tm_graph_node_at(f, i);
        if (nd->qkind == TM_QNODE_DEQUANTIZE) n_dq++;
        if (nd->qkind == TM_QNODE_QUANTIZE) {
            n_q++;
            const tm_graph_value *y = tm_graph_value_at(f, nd->outputs[0]);
            assert_true(y->quantized);
            assert_string_equal(y->elem_type_name, "INT8"); /* the zero point's type */
            assert_string_equal(tm_graph_value_at(f, y->scale_value)->elem_type_name, "FLOAT");
        }
        if (!strcmp(nd->name, "conv1.weight_DequantizeLinear")) {
            assert_int_equal(nd->weight_tensor, tm_file_find(f, "conv1.weight_quantized"));
            const tm_graph_value *y = tm_graph_value_at(f, nd->outputs[0]);
            assert_string_equal(y->elem_type_name, "FLOAT");
            assert_int_equal(y->ndim, 4);
            assert_false(y->quantized);
        }
    }
    assert_int_equal(n_dq, 4);
    assert_int_equal(n_q, 2);
    tm_close(f);
    /* QOperator and integer ops from the node tests */
    char dir[2048];
    snprintf(dir, sizeof dir, "onnx_node_tests/test_qlinearmatmul_2D_int8_float32/model.onnx");
    f = open_ok(dir);
    assert_int_equal(tm_graph_node_at(f, 0)->qkind, TM_QNODE_QOPERATOR);
    assert_true(tm_graph_value_at(f, tm_graph_node_at(f, 0)->inputs[3])->quantized);
    assert_string_equal(tm_graph_value_at(f, tm_graph_node_at(f, 0)->outputs[0])->elem_type_name, "INT8");
    tm_close(f);
    f = open_ok("ort_testdata/dynamic_quantize_matmul_uint8_bias.onnx");
    assert_string_equal(meta(f, "onnx.activation_quantization_points"), "1");
    int n_int = 0;
    for (int64_t i = 0; i < tm_graph_n_nodes(f); i++) n_int += tm_graph_node_at(f, i)->qkind == TM_QNODE_INTEGER;
    assert_int_equal(n_int, 1);
    tm_close(f);
}

static void test_cli_graph_json(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    const char *bin = getenv("TM_BIN");
    if (!bin) bin = "./tensormorph";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s graph %s/ort_testdata/conv_qdq_s8s8_perchannel.onnx --json", bin,
             onnx_dir());
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    json_error_t je;
    json_t *d = json_loadf(p, 0, &je);
    int st = pclose(p);
    assert_non_null(d);
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_string_equal(json_string_value(json_object_get(d, "schema")), "tensormorph.graph/1");
    assert_int_equal(json_integer_value(json_object_get(d, "n_nodes")), 7);
    json_t *qn = json_object_get(d, "quant_nodes");
    assert_int_equal(json_integer_value(json_object_get(qn, "dequantize")), 4);
    assert_int_equal(json_integer_value(json_object_get(qn, "quantize")), 2);
    json_t *pts = json_object_get(d, "activation_quantization_points");
    assert_int_equal(json_array_size(pts), 2);
    json_t *p0 = json_array_get(pts, 0);
    assert_string_equal(json_string_value(json_object_get(p0, "input")), "input");
    assert_string_equal(json_string_value(json_object_get(p0, "scale")), "input_scale");
    assert_string_equal(json_string_value(json_object_get(p0, "zero_point")), "input_zero_point");
    assert_string_equal(json_string_value(json_object_get(p0, "elem_type")), "INT8");
    json_t *n1 = json_array_get(json_object_get(d, "nodes"), 1);
    assert_string_equal(json_string_value(json_object_get(n1, "weight")), "conv1.weight_quantized");
    json_t *x = json_array_get(json_object_get(n1, "inputs"), 0);
    assert_true(json_is_true(json_object_get(x, "quantized")));
    json_t *q = json_object_get(x, "quantization");
    assert_string_equal(json_string_value(json_object_get(q, "granularity")), "channel");
    /* its zero points are all 0: symmetric, as compat says */
    assert_true(json_is_true(json_object_get(q, "symmetric")));
    json_decref(d);
    /* the text views label it sym too */
    snprintf(cmd, sizeof cmd, "%s inspect %s/ort_testdata/conv_qdq_s8s8_perchannel.onnx", bin, onnx_dir());
    p = popen(cmd, "r");
    assert_non_null(p);
    char line[512];
    int seen_sym = 0;
    while (fgets(line, sizeof line, p))
        if (strstr(line, "conv1.weight_quantized") && strstr(line, "I8 channel:0 sym scale:F32")) seen_sym = 1;
    assert_int_equal(WEXITSTATUS(pclose(p)), 0);
    assert_true(seen_sym);
    /* a safetensors checkpoint has no graph: exit 3 */
    snprintf(cmd, sizeof cmd, "%s demo -o %s/demo -q && %s graph %s/demo >/dev/null 2>&1", bin,
             g_tmp, bin, g_tmp);
    st = system(cmd);
    assert_int_equal(WEXITSTATUS(st), 3);
}

/* ---------------------------------------------------------------------------------------- */
/* models built here                                                                           */
/* ---------------------------------------------------------------------------------------- */

/* typed fields, Constant value_floats, a 4-bit [3,3] initializer with an odd row length */
static void test_built_models(void **state) {
    (void)state;
    pb g = {0}, t = {0}, m = {0};
    /* FLOAT [2,2] in float_data (field 4, packed) */
    int64_t d22[2] = {2, 2};
    float fd[4] = {1.5f, -2.0f, 0.25f, 3.0f};
    pb_tensor_raw(&t, "wf", 1, 2, d22, NULL, 0);
    pb_bytes(&t, 4, fd, sizeof fd);
    pb_msg(&g, 5, &t);
    /* INT8 [3] in int32_data (field 5, packed varints; -3 is a 10-byte varint) */
    int64_t d3[1] = {3};
    pb_tensor_raw(&t, "wi8", 3, 1, d3, NULL, 0);
    pb vi = {0};
    pb_varint(&vi, 5);
    pb_varint(&vi, (uint64_t)(int64_t)-3);
    pb_varint(&vi, 127);
    pb_bytes(&t, 5, vi.b, vi.n);
    free(vi.b);
    pb_msg(&g, 5, &t);
    /* INT4 [3,3] codes -8..0 packed densely: byte k = codes 2k (low), 2k+1 (high) */
    int64_t d33[2] = {3, 3};
    uint8_t packed[5] = {0};
    for (int k = 0; k < 9; k++) packed[k / 2] |= (uint8_t)(((k - 8) & 15) << ((k & 1) * 4));
    pb_tensor_raw(&t, "q4", 22, 2, d33, packed, sizeof packed);
    pb_msg(&g, 5, &t);
    float sc[3] = {0.5f, 1.0f, 2.0f};
    pb_tensor_raw(&t, "q4_scale", 1, 1, d3, sc, sizeof sc);
    pb_msg(&g, 5, &t);
    const char *in[2] = {"q4", "q4_scale"};
    pb_node(&g, "DequantizeLinear", "dq", 2, in, "q4_deq", "axis", 0);
    /* Constant value_floats */
    {
        pb n = {0}, a = {0};
        pb_str(&n, 2, "cf");
        pb_str(&n, 4, "Constant");
        pb_str(&a, 1, "value_floats");
        float cf[2] = {7.0f, 8.0f};
        pb_bytes(&a, 7, cf, sizeof cf);
        pb_vfield(&a, 20, 6);
        pb_msg(&n, 5, &a);
        pb_msg(&g, 1, &n);
    }
    pb_model(&m, &g, 21);
    tm_file *f = NULL;
    tm_err err;
    tm_status s = open_model_bytes("built.onnx", &m, &f, &err);
    if (s) print_message("%s\n", err.msg);
    assert_int_equal(s, TM_OK);
    float v[9];
    assert_int_equal(tm_tensor_read_f32(f, tm_file_find(f, "wf"), 0, 4, v, NULL), TM_OK);
    assert_true(v[0] == 1.5f && v[1] == -2.0f && v[2] == 0.25f && v[3] == 3.0f);
    const tm_tensor *ti = must_find(f, "wi8");
    assert_int_equal(ti->dtype, TM_I8);
    assert_int_equal(tm_tensor_read_f32(f, tm_file_find(f, "wi8"), 0, 3, v, NULL), TM_OK);
    assert_true(v[0] == 5.0f && v[1] == -3.0f && v[2] == 127.0f);
    const tm_tensor *q4 = must_find(f, "q4");
    assert_non_null(q4->quant);
    assert_int_equal(q4->n_bytes, 6); /* 3 rows of 2 bytes */
    assert_int_equal(tm_tensor_read_f32(f, tm_file_find(f, "q4"), 0, 9, v, NULL), TM_OK);
    for (int k = 0; k < 9; k++) assert_true(v[k] == (float)(k - 8) * sc[k / 3]);
    const tm_tensor *cf = must_find(f, "cf");
    assert_shape(cf, 1, (int64_t[]){2});
    assert_int_equal(tm_tensor_read_f32(f, tm_file_find(f, "cf"), 0, 2, v, NULL), TM_OK);
    assert_true(v[0] == 7.0f && v[1] == 8.0f);
    assert_string_equal(meta(f, "onnx.initializers"), "4");
    assert_string_equal(meta(f, "onnx.constant_tensors"), "1");
    tm_close(f);
}

static const float *fd_bytes_for_test(void) {
    static const float v[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    return v;
}

static void expect_corrupt(const char *file, pb *m, tm_status want, const char *needle) {
    tm_file *f = NULL;
    tm_err err;
    tm_status s = open_model_bytes(file, m, &f, &err);
    if (s != want || !strstr(err.msg, needle))
        print_message("%s: status %d, message: %s (wanted %d and '%s')\n", file, s, err.msg, want, needle);
    assert_int_equal(s, want);
    assert_null(f);
    assert_non_null(strstr(err.msg, needle));
    assert_non_null(strstr(err.msg, file)); /* the message names the file */
}

static void test_malformed(void **state) {
    (void)state;
    pb g = {0}, t = {0}, m = {0};
    int64_t d4[1] = {4};
    /* raw_data shorter than the shape needs: names the tensor and both sizes */
    uint8_t raw[3] = {1, 2, 3};
    pb_tensor_raw(&t, "short_w", 1, 1, d4, raw, 3);
    pb_msg(&g, 5, &t);
    pb_model(&m, &g, 13);
    expect_corrupt("short.onnx", &m, TM_E_CORRUPT, "tensor 'short_w'");
    /* the same message carries the byte offset where the name sits */
    pb_tensor_raw(&t, "short_w", 1, 1, d4, raw, 3);
    pb_msg(&g, 5, &t);
    pb_model(&m, &g, 13);
    {
        tm_file *f = NULL;
        tm_err err;
        assert_int_equal(open_model_bytes("short2.onnx", &m, &f, &err), TM_E_CORRUPT);
        assert_true(err.file_offset > 0);
        assert_non_null(strstr(err.msg, "raw_data has 3 bytes"));
        assert_non_null(strstr(err.msg, "needs 16"));
    }
    /* negative dim */
    int64_t dn[1] = {-2};
    pb_tensor_raw(&t, "neg", 1, 1, dn, NULL, 0);
    pb_msg(&g, 5, &t);
    pb_model(&m, &g, 13);
    expect_corrupt("neg.onnx", &m, TM_E_CORRUPT, "negative dim");
    /* a shape whose byte size overflows 64 bits */
    int64_t dbig[3] = {1ll << 40, 1ll << 40, 1ll << 20};
    pb_tensor_raw(&t, "huge", 1, 3, dbig, NULL, 0);
    pb_msg(&g, 5, &t);
    pb_model(&m, &g, 13);
    expect_corrupt("huge.onnx", &m, TM_E_CORRUPT, "overflows");
    /* no data at all for 4 floats */
    pb_tensor_raw(&t, "empty", 1, 1, d4, NULL, 0);
    pb_msg(&g, 5, &t);
    pb_model(&m, &g, 13);
    expect_corrupt("nodata.onnx", &m, TM_E_CORRUPT, "no data at all");
    /* two tensors with one name */
    float four[4] = {0};
    pb_tensor_raw(&t, "dup", 1, 1, d4, four, 16);
    pb_msg(&g, 5, &t);
    pb_tensor_raw(&t, "dup", 1, 1, d4, four, 16);
    pb_msg(&g, 5, &t);
    pb_model(&m, &g, 13);
    expect_corrupt("dup.onnx", &m, TM_E_CORRUPT, "defined twice");
    /* external data outside the model's folder: '..' and an absolute path */
    const char *locs[2] = {"../escape.bin", "/etc/passwd"};
    for (int k = 0; k < 2; k++) {
        pb_tensor_raw(&t, "ext", 1, 1, d4, NULL, 0);
        pb e = {0};
        pb_str(&e, 1, "location");
        pb_str(&e, 2, locs[k]);
        pb_msg(&t, 13, &e);
        pb_vfield(&t, 14, 1);
        pb_msg(&g, 5, &t);
        pb_model(&m, &g, 13);
        expect_corrupt("ext_escape.onnx", &m, TM_E_CORRUPT, "inside the model's folder");
    }
    /* external data through a symlink that leaves the folder */
    char sub[512], link[600], target[600];
    snprintf(sub, sizeof sub, "%s/sub", g_tmp);
    mkdir(sub, 0755);
    snprintf(target, sizeof target, "%s/outside.bin", g_tmp);
    write_file(target, four, 16);
    snprintf(link, sizeof link, "%s/sub/w.bin", g_tmp);
    assert_int_equal(symlink(target, link), 0);
    pb_tensor_raw(&t, "ext", 1, 1, d4, NULL, 0);
    {
        pb e = {0};
        pb_str(&e, 1, "location");
        pb_str(&e, 2, "w.bin");
        pb_msg(&t, 13, &e);
    }
    pb_vfield(&t, 14, 1);
    pb_msg(&g, 5, &t);
    pb_model(&m, &g, 13);
    expect_corrupt("sub/ext_link.onnx", &m, TM_E_CORRUPT, "outside the model's folder");
    /* external data naming a file that is not there */
    pb_tensor_raw(&t, "ext", 1, 1, d4, NULL, 0);
    {
        pb e = {0};
        pb_str(&e, 1, "location");
        pb_str(&e, 2, "absent.bin");
        pb_msg(&t, 13, &e);
    }
    pb_vfield(&t, 14, 1);
    pb_msg(&g, 5, &t);
    pb_model(&m, &g, 13);
    expect_corrupt("ext_absent.onnx", &m, TM_E_IO, "'absent.bin'");
    /* external data past the end of its file, and a good one */
    const char *offs[2] = {"8", "0"};
    for (int k = 0; k < 2; k++) {
        char binp[600];
        snprintf(binp, sizeof binp, "%s/ok.bin", g_tmp);
        write_file(binp, fd_bytes_for_test(), 16);
        pb_tensor_raw(&t, "ext", 1, 1, d4, NULL, 0);
        pb e = {0};
        pb_str(&e, 1, "location");
        pb_str(&e, 2, "ok.bin");
        pb_msg(&t, 13, &e);
        pb_str(&e, 1, "offset");
        pb_str(&e, 2, offs[k]);
        pb_msg(&t, 13, &e);
        pb_vfield(&t, 14, 1);
        pb_msg(&g, 5, &t);
        pb_model(&m, &g, 13);
        if (k == 0) {
            expect_corrupt("ext_past.onnx", &m, TM_E_CORRUPT, "runs past the end");
        } else {
            tm_file *f = NULL;
            tm_err err;
            assert_int_equal(open_model_bytes("ext_ok.onnx", &m, &f, &err), TM_OK);
            float v[4];
            assert_int_equal(tm_tensor_read_f32(f, 0, 0, 4, v, NULL), TM_OK);
            assert_true(v[0] == 1.0f && v[3] == 4.0f);
            assert_int_equal(tm_file_tensor(f, 0)->file_index, 1);
            tm_close(f);
        }
    }
    /* bytes that are not a protobuf at all, and a real model cut short */
    pb_raw(&m, "\x08\x08\x3a\xff\xff\xff\xff\x0f garbage", 16);
    expect_corrupt("garbage.onnx", &m, TM_E_CORRUPT, "do not decode as an onnx.ModelProto");
    if (tmv_shared_dir()) {
        char p[2048];
        snprintf(p, sizeof p, "%s/npm/silero_vad/silero_vad_v5.onnx", onnx_dir());
        FILE *fp = fopen(p, "rb");
        assert_non_null(fp);
        uint8_t *buf = malloc(100000);
        assert_int_equal(fread(buf, 1, 100000, fp), 100000);
        fclose(fp);
        pb_raw(&m, buf, 100000);
        free(buf);
        expect_corrupt("truncated.onnx", &m, TM_E_CORRUPT, "truncated protobuf");
    }
    /* 15000 nested If subgraphs in 433 KB (enough to overflow the stack of a recursive decoder):
    ** refused before protobuf-c recurses into them. Written outside-in: sizes first, then each
    ** level's prefix (the nested field is the last of every message) and the innermost graph. */
    {
        enum { LEVELS = 15000 };
        static uint64_t gsz[LEVELS + 1], asz[LEVELS + 1], nsz[LEVELS + 1];
        gsz[0] = 3; /* GraphProto {name: "g"} */
        for (int k = 1; k <= LEVELS; k++) {
            pb v = {0};
            pb_varint(&v, gsz[k - 1]);
            asz[k] = 13 + 1 + v.n + gsz[k - 1];
            v.n = 0;
            pb_varint(&v, asz[k]);
            nsz[k] = 4 + 1 + v.n + asz[k];
            v.n = 0;
            pb_varint(&v, nsz[k]);
            gsz[k] = 1 + v.n + nsz[k];
            free(v.b);
        }
        pb_vfield(&m, 1, 8);
        pb_varint(&m, (7 << 3) | 2);
        pb_varint(&m, gsz[LEVELS]);
        for (int k = LEVELS; k >= 1; k--) {
            pb_varint(&m, (1 << 3) | 2); /* GraphProto.node */
            pb_varint(&m, nsz[k]);
            pb_raw(&m, "\x22\x02If", 4); /* NodeProto.op_type */
            pb_varint(&m, (5 << 3) | 2); /* NodeProto.attribute */
            pb_varint(&m, asz[k]);
            pb_raw(&m, "\x0a\x0bthen_branch", 13); /* AttributeProto.name */
            pb_varint(&m, (6 << 3) | 2); /* AttributeProto.g */
            pb_varint(&m, gsz[k - 1]);
        }
        pb_raw(&m, "\x12\x01g", 3);
        expect_corrupt("deep.onnx", &m, TM_E_LIMIT, "nest more than");
    }
    /* a model with no graph */
    pb_vfield(&m, 1, 8);
    expect_corrupt("nograph.onnx", &m, TM_E_CORRUPT, "no graph");
}

/* qdiff between a float model and its QDQ version (../shared has no such pair; built here):
** W float [8, 16] and the same W as int8 codes per output channel (symmetric, scale =
** max|row| / 127, codes = round-half-even(x / scale)) feeding a DequantizeLinear. Plain rounding
** must show: every error within half an LSB, RMSE near 1/sqrt(12) LSB, nothing clipped. */
static void test_qdiff_float_vs_qdq(void **state) {
    (void)state;
    enum { R = 8, C = 16 };
    float w[R * C], scale[R];
    int8_t codes[R * C];
    uint32_t lcg = 12345;
    for (int k = 0; k < R * C; k++) {
        lcg = lcg * 1664525u + 1013904223u;
        w[k] = ((float)(lcg >> 8) / 16777216.0f - 0.5f) * (float)(1 + k / C);
    }
    for (int r = 0; r < R; r++) {
        float mx = 0;
        for (int c = 0; c < C; c++) mx = fmaxf(mx, fabsf(w[r * C + c]));
        scale[r] = mx / 127.0f;
        for (int c = 0; c < C; c++) codes[r * C + c] = (int8_t)nearbyintf(w[r * C + c] / scale[r]);
    }
    int64_t dims[2] = {R, C}, dr[1] = {R};
    pb g = {0}, t = {0}, m = {0};
    pb_tensor_raw(&t, "W", 1, 2, dims, w, sizeof w);
    pb_msg(&g, 5, &t);
    const char *in1[2] = {"x", "W"};
    pb_node(&g, "MatMul", "mm", 2, in1, "y", NULL, 0);
    pb_model(&m, &g, 13);
    tm_file *ref = NULL, *q = NULL;
    tm_err err;
    assert_int_equal(open_model_bytes("float.onnx", &m, &ref, &err), TM_OK);
    pb_tensor_raw(&t, "W", 3, 2, dims, codes, sizeof codes);
    pb_msg(&g, 5, &t);
    pb_tensor_raw(&t, "W_scale", 1, 1, dr, scale, sizeof scale);
    pb_msg(&g, 5, &t);
    const char *in2[2] = {"W", "W_scale"};
    pb_node(&g, "DequantizeLinear", "W_dq", 2, in2, "W_deq", "axis", 0);
    const char *in3[2] = {"x", "W_deq"};
    pb_node(&g, "MatMul", "mm", 2, in3, "y", NULL, 0);
    pb_model(&m, &g, 13);
    assert_int_equal(open_model_bytes("qdq.onnx", &m, &q, &err), TM_OK);
    const tm_tensor *qt = must_find(q, "W");
    assert_non_null(qt->quant);
    assert_int_equal(qt->quant->gran.kind, TM_GRAN_CHANNEL);
    tm_qdiff_params qp;
    memset(&qp, 0, sizeof qp);
    tm_qdiff_result *res = NULL;
    assert_int_equal(tm_qdiff(ref, q, &qp, &res, &err), TM_OK);
    assert_int_equal(res->n, 1);
    assert_string_equal(res->entries[0].name, "W");
    const tm_errsum *e = &res->entries[0].e;
    assert_int_equal(e->n, R * C);
    assert_true(e->max_err_lsb <= 0.5 + 1e-4);
    assert_true(e->rmse_lsb > 0.2 && e->rmse_lsb < 0.4);
    assert_true(e->clipped_fraction == 0);
    assert_true(e->sqnr_db > 30);
    assert_false(res->entries[0].flagged);
    tm_qdiff_free(res);
    tm_close(ref);
    tm_close(q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_built_models),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_every_model_opens),
        cmocka_unit_test(test_silero_if_subgraph_constants),
        cmocka_unit_test(test_paddleocr_constant_weights),
        cmocka_unit_test(test_dequantizelinear_node_tests),
        cmocka_unit_test(test_tensorproto_typed_fields),
        cmocka_unit_test(test_ort_granularities),
        cmocka_unit_test(test_arch_from_graph),
        cmocka_unit_test(test_graph_quant_boundaries),
        cmocka_unit_test(test_cli_graph_json),
        cmocka_unit_test(test_qdiff_float_vs_qdq),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
