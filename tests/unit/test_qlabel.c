/* test_qlabel.c: one scheme label per quantized tensor (tm_qtensor_label / tm_qtensor_describe).
** Over a table of real models in ../shared (GGUF of many ggml types, ONNX QDQ and MatMulNBits,
** PyTorch qtensors) and compressed-tensors checkpoints that `quantize` makes here from the real
** stories260K: the label of each layout kind is the documented one; for EVERY quantized tensor
** the CLI (inspect --json and its text table, qdiff --json where a reference exists, compat
** --json; scalar and heatmap --json for one tensor per model) and the API
** of `serve` (inspect, tensor, scalar, arch, qdiff) give the same label and description as the
** library; `symmetric` agrees with the label (contains "asym" or "+min" iff not symmetric); and
** inspect's dtype column names the ggml type of a GGUF block tensor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers/cli_run.h"
#include "helpers/vectors.h"
#include "tensormorph.h"

static char g_tmp[256];

/* A model of the table: path under ../shared/models, or "@name" for one made in g_tmp. */
typedef struct model {
    const char *path, *ref;
} model;

static const model k_models[] = {
    {"gguf/stories260K-rows256-Q4_K_M.gguf", "gguf/stories260K-rows256-F32.gguf"},
    {"gguf/stories260K-rows256-Q2_K.gguf", "gguf/stories260K-rows256-F32.gguf"},
    {"gguf/stories260K-Q4_K_M.gguf", "gguf/stories260K-F32.gguf"},
    {"gguf/stories260K-Q5_K_M.gguf", NULL},
    {"gguf/stories260K-Q2_K.gguf", NULL},
    {"gguf/stories260K-Q4_0-ggufpy.gguf", NULL},
    {"gguf/imatrix/synth256-IQ2_XXS-imx.gguf", NULL},
    {"gguf/imatrix/synth256-TQ2_0-imx.gguf", NULL},
    {"gguf/imatrix/synth256-Q4_1-imx.gguf", NULL},
    {"onnx/ort_testdata/conv_qdq_s8s8_perchannel.onnx", NULL},
    {"onnx/ort_testdata/conv_qdq_u8u8.onnx", NULL},
    {"onnx/ort_testdata/conv.int4_weights.qdq.onnx", NULL},
    {"onnx/ort_testdata/ort_github_issue_12151_neg_dq_axis.onnx", NULL},
    {"onnx/ort_testdata/transform/qdq_optimization/dup_qdq_float16.onnx", NULL},
    {"onnx/ort_testdata/transform/runtime_optimization/matmulnbits_add.onnx", NULL},
    {"onnx/ort_testdata/transform/fusion/constant_folding_dequantizelinear.qdq16_contrib.onnx", NULL},
    {"torch/stories260K_qint8_per_channel.pt", "torch/stories260K_state_dict.pt"},
    {"torch/stories260K_quint8_per_tensor.pt", "torch/stories260K_state_dict.pt"},
    {"torch/mlp_static_qint8.pt", NULL},
    {"torch/mlp_dynamic_qint8.pt", NULL},
    {"@ct_int4", "safetensors/stories260K-f32"},
    {"@ct_int8", "safetensors/stories260K-f32"},
    {"@ct_fp8", "safetensors/stories260K-f32"},
};
enum { N_MODELS = sizeof k_models / sizeof k_models[0] };

static void model_path(const char *p, char *buf, size_t n) {
    if (p[0] == '@') snprintf(buf, n, "%s/%s", g_tmp, p + 1);
    else snprintf(buf, n, "%s/models/%s", tmv_shared_dir(), p);
}

/* ---- the label of each layout kind ----------------------------------------------------- */

typedef struct lcase {
    const char *model, *tensor, *label;
    int         symmetric;
    const char *desc_has;      /* a phrase the long description holds */
} lcase;

static const lcase k_cases[] = {
    /* ggml block types: sub-block scales and mins named in the label */
    {"gguf/stories260K-rows256-Q4_K_M.gguf", "blk.4.ffn_up.weight", "Q4_K block:256 sub:32 +min", 0,
     "8 sub-blocks of 32 values, each with its own scale and min"},
    {"gguf/stories260K-rows256-Q4_K_M.gguf", "blk.4.attn_v.weight", "Q6_K block:256 sub:16", 1,
     "16 sub-blocks of 16 values, each with its own scale;"},
    {"gguf/stories260K-rows256-Q2_K.gguf", "blk.0.attn_k.weight", "Q2_K block:256 sub:16 +min", 0, "2.62 bits per value"},
    {"gguf/stories260K-rows256-Q2_K.gguf", "blk.0.attn_output.weight", "Q3_K block:256 sub:16", 1, "codes in [0, 7]"},
    {"gguf/stories260K-Q4_K_M.gguf", "blk.0.attn_k.weight", "Q5_0 block:32", 1, "one scale per block"},
    {"gguf/stories260K-Q4_K_M.gguf", "token_embd.weight", "Q8_0 block:32", 1, "8.50 bits per value"},
    {"gguf/stories260K-Q5_K_M.gguf", "blk.0.attn_k.weight", "Q5_1 block:32 +min", 0, "one scale and one min per block"},
    {"gguf/stories260K-Q2_K.gguf", "blk.0.attn_k.weight", "IQ4_NL block:32", 1, "layout gguf/IQ4_NL"},
    {"gguf/stories260K-Q4_0-ggufpy.gguf", "blk.0.attn_q.weight", "Q4_0 block:32", 1, "the zero point a type constant"},
    {"gguf/imatrix/synth256-IQ2_XXS-imx.gguf", "blk.0.attn_k.weight", "IQ2_XXS block:256 sub:32", 1, "2.06 bits per value"},
    {"gguf/imatrix/synth256-TQ2_0-imx.gguf", "blk.0.attn_k.weight", "TQ2_0 block:256", 1, "one scale per block"},
    {"gguf/imatrix/synth256-Q4_1-imx.gguf", "token_embd.weight", "Q4_1 block:32 +min", 0, "value = scale*q - min"},
    /* ONNX DequantizeLinear: all-zero zero points are symmetric; per-tensor, per-channel with a
    ** negative axis, int4, 16-bit contrib codes, f16 scales; MatMulNBits without zero points */
    {"onnx/ort_testdata/conv_qdq_s8s8_perchannel.onnx", "conv1.weight_quantized", "I8 channel:0 sym scale:F32", 1,
     "I8 zero points 'conv1.weight_zero_point' (all 0)"},
    {"onnx/ort_testdata/conv_qdq_u8u8.onnx", "conv1.weight_quantized", "U8 tensor asym scale:F32", 0,
     "asymmetric: value = scale*(q - zero_point)"},
    {"onnx/ort_testdata/conv.int4_weights.qdq.onnx", NULL, "I4 channel:0 sym scale:F32", 1, "2 codes per U8 word"},
    {"onnx/ort_testdata/ort_github_issue_12151_neg_dq_axis.onnx", NULL, "U8 channel:1 asym scale:F32", 0,
     "one scale per index along axis 1"},
    {"onnx/ort_testdata/transform/qdq_optimization/dup_qdq_float16.onnx", NULL, "U8 tensor sym scale:F16", 1, "F16 scales"},
    {"onnx/ort_testdata/transform/runtime_optimization/matmulnbits_add.onnx", NULL, "I4 group:32 sym scale:F32", 1,
     "stored as code + 8; layout onnx/com.microsoft.MatMulNBits"},
    {"onnx/ort_testdata/transform/fusion/constant_folding_dequantizelinear.qdq16_contrib.onnx", NULL,
     "U16 tensor asym scale:F32", 0, "layout onnx/com.microsoft.DequantizeLinear"},
    /* PyTorch qtensors: per_channel_affine with zero points 0 is symmetric */
    {"torch/stories260K_qint8_per_channel.pt", "model.layers.0.self_attn.q_proj.weight", "I8 channel:0 sym scale:F64", 1,
     "layout pytorch/per_channel_affine"},
    {"torch/stories260K_quint8_per_tensor.pt", "model.layers.0.self_attn.q_proj.weight", "U8 tensor asym scale:F32", 0,
     "layout pytorch/per_tensor_affine"},
    {"torch/mlp_dynamic_qint8.pt", "0.weight", "I8 tensor sym scale:F32", 1, "one scale for the whole tensor"},
    /* compressed-tensors */
    {"@ct_int4", "model.layers.0.self_attn.q_proj.weight", "I4 group:32 asym scale:F16", 0,
     "8 codes per I32 word along axis 1, stored as code + 8; layout compressed-tensors/pack-quantized"},
    {"@ct_int8", "model.layers.0.mlp.down_proj.weight", "I8 channel:0 sym scale:F32", 1, "4 codes per I32 word"},
    {"@ct_fp8", "model.layers.0.mlp.up_proj.weight", "F8_E4M3 channel:0 sym scale:F32", 1,
     "value = scale*decode(q), F32 scales"},
};

/* 1 when a label marks an asymmetric scheme */
static int label_says_asym(const char *label) { return strstr(label, "asym") || strstr(label, "+min"); }

static void test_label_of_each_layout(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++) {
        const lcase *c = &k_cases[k];
        char path[1024];
        model_path(c->model, path, sizeof path);
        tm_file *f = NULL;
        tm_err err;
        if (tm_open(path, NULL, &f, &err) != TM_OK) fail_msg("%s: %s", path, err.msg);
        const tm_tensor *t = NULL;
        if (c->tensor) t = tm_file_tensor(f, tm_file_find(f, c->tensor));
        for (int64_t i = 0; !c->tensor && i < tm_file_n_tensors(f); i++) /* the first quantized */
            if (tm_file_tensor(f, i)->quant) { t = tm_file_tensor(f, i); break; }
        if (!t || !t->quant) fail_msg("%s: no quantized tensor %s", c->model, c->tensor ? c->tensor : "");
        char lab[TM_QLABEL_MAX], desc[TM_QDESC_MAX];
        assert_ptr_equal(tm_qtensor_label(f, t, lab, sizeof lab), lab);
        tm_qtensor_describe(f, t, desc, sizeof desc);
        if (strcmp(lab, c->label) || t->quant->symmetric != c->symmetric || !strstr(desc, c->desc_has))
            fail_msg("%s %s: label '%s' (want '%s'), symmetric %d (want %d), description '%s' (want '%s' in it)",
                     c->model, t->name, lab, c->label, t->quant->symmetric, c->symmetric, desc, c->desc_has);
        assert_int_equal(label_says_asym(lab), !c->symmetric);
        /* truncation keeps a terminated prefix; a plain tensor gets "" */
        char small[6];
        tm_qtensor_label(f, t, small, sizeof small);
        assert_int_equal(strlen(small), 5);
        assert_memory_equal(small, c->label, 5);
        for (int64_t i = 0; i < tm_file_n_tensors(f); i++)
            if (!tm_file_tensor(f, i)->quant) {
                assert_string_equal(tm_qtensor_label(f, tm_file_tensor(f, i), lab, sizeof lab), "");
                assert_string_equal(tm_qtensor_describe(f, tm_file_tensor(f, i), desc, sizeof desc), "");
                break;
            }
        tm_close(f);
    }
    char lab[8] = "x";
    assert_string_equal(tm_qtensor_label(NULL, NULL, lab, sizeof lab), "");
}

/* ---- CLI and API agree, for every quantized tensor --------------------------------------- */

static void url_escape(const char *s, char *out, size_t n) {
    size_t o = 0;
    for (; *s && o + 4 < n; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || strchr("._-", ch))
            out[o++] = (char)ch;
        else o += (size_t)snprintf(out + o, n - o, "%%%02X", ch);
    }
    out[o] = '\0';
}

static const char *str(json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    if (!s) fail_msg("no string \"%s\" in %s", key, json_dumps(o, JSON_COMPACT));
    return s;
}

static json_t *get(int port, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static json_t *get(int port, const char *fmt, ...) {
    char url[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(url, sizeof url, fmt, ap);
    va_end(ap);
    int status = 0;
    json_t *j = tmt_http_json(port, url, &status);
    if (status != 200) fail_msg("GET %s -> %d", url, status);
    return j;
}

/* label and description of arch nodes naming a quantized tensor, checked against inspect's */
static int check_arch(json_t *node, json_t *by_name) {
    int n = 0;
    const char *tn = json_string_value(json_object_get(node, "tensor"));
    json_t *want = tn ? json_object_get(by_name, tn) : NULL;
    if (want) {
        assert_string_equal(str(node, "label"), str(want, "label"));
        assert_string_equal(str(node, "description"), str(want, "description"));
        n++;
    }
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(node, "children"), i, c) n += check_arch(c, by_name);
    return n;
}

/* The inspect text table's dtype and quantization columns of tensor `name`. */
static void text_columns(const char *text, const char *name, char *dtype, char *label) {
    size_t nl = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, name, nl) || p[nl] != ' ') continue;
        const char *e = strchr(p, '\n');
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(e ? e - p : (ptrdiff_t)strlen(p)), p);
        /* name dtype [shape] bytes  quantization bits/p: the label sits between bytes and bits/p */
        char nm[256];
        assert_int_equal(sscanf(line, "%255s %31s", nm, dtype), 2);
        char *q = strchr(line, ']'), *end = strrchr(line, ' ');
        assert_non_null(q);
        q++;
        while (*q == ' ' || (*q >= '0' && *q <= '9')) q++;
        while (end > q && end[-1] == ' ') end--;
        snprintf(label, TM_QLABEL_MAX, "%.*s", (int)(end - q), q);
        return;
    }
    fail_msg("inspect prints no row for %s", name);
}

static int g_pid = -1; /* the running server, stopped by stop_server after a failure too */

static int stop_server(void **state) {
    (void)state;
    if (g_pid > 0) tmt_serve_stop(g_pid, NULL);
    g_pid = -1;
    return 0;
}

static void check_model(const model *m) {
    char path[1024], ref[1024];
    model_path(m->path, path, sizeof path);
    if (m->ref) model_path(m->ref, ref, sizeof ref);
    tm_file *f = NULL;
    tm_err err;
    if (tm_open(path, NULL, &f, &err) != TM_OK) fail_msg("%s: %s", path, err.msg);
    json_t *cli = tmt_run_json(0, "%s inspect '%s' --json", tmt_bin(), path);
    char *text = NULL;
    assert_int_equal(tmt_run(&text, "%s inspect '%s'", tmt_bin(), path), 0);
    const char *args[] = {path, m->ref ? "--ref" : NULL, m->ref ? ref : NULL, NULL};
    FILE *out;
    int port;
    g_pid = tmt_serve_start(args, &port, &out);
    json_t *api = get(port, "/api/v1/inspect");
    json_t *ct = json_object_get(cli, "tensors"), *at = json_object_get(api, "tensors");
    assert_int_equal(json_array_size(ct), json_array_size(at));
    json_t *by_name = json_object();
    size_t i, n_quant = 0;
    json_t *tc;
    json_array_foreach(ct, i, tc) {
        json_t *qc = json_object_get(tc, "quantization"), *qa = json_object_get(json_array_get(at, i), "quantization");
        const char *name = str(tc, "name");
        const tm_tensor *t = tm_file_tensor(f, tm_file_find(f, name));
        assert_non_null(t);
        if (json_is_null(qc)) {
            assert_true(json_is_null(qa));
            assert_null(t->quant);
            continue;
        }
        n_quant++;
        char lab[TM_QLABEL_MAX], desc[TM_QDESC_MAX];
        tm_qtensor_label(f, t, lab, sizeof lab);
        tm_qtensor_describe(f, t, desc, sizeof desc);
        const char *label = str(qc, "label");
        if (strcmp(label, lab)) fail_msg("%s %s: CLI label '%s', library '%s'", m->path, name, label, lab);
        assert_string_equal(str(qa, "label"), lab);
        assert_string_equal(str(qc, "description"), desc);
        assert_string_equal(str(qa, "description"), desc);
        /* symmetric agrees with the label */
        int sym = json_is_true(json_object_get(qc, "symmetric"));
        if (label_says_asym(label) == sym)
            fail_msg("%s %s: symmetric %d but label '%s'", m->path, name, sym, label);
        /* the text table: the same label; the ggml type in the dtype column */
        char dtype[32], tlabel[TM_QLABEL_MAX];
        text_columns(text, name, dtype, tlabel);
        assert_string_equal(tlabel, lab);
        const tm_ggml_type_info *gi = t->quant->ggml_type ? tm_ggml_type_info_get(t->quant->ggml_type) : NULL;
        assert_string_equal(dtype, gi ? gi->name : tm_dtype_get(t->dtype)->name);
        /* the API's tensor and scalar documents */
        char esc[512], idx[256] = "0";
        url_escape(name, esc, sizeof esc);
        for (int d = 1; d < t->ndim; d++) strcat(idx, ",0");
        json_t *td = get(port, "/api/v1/tensor?name=%s", esc);
        assert_string_equal(str(td, "label"), lab);
        assert_string_equal(str(td, "scheme"), lab);
        assert_string_equal(str(td, "description"), desc);
        json_decref(td);
        json_t *sd = get(port, "/api/v1/scalar?name=%s&index=%s", esc, idx);
        assert_string_equal(str(sd, "label"), lab);
        json_decref(sd);
        json_object_set(by_name, name, qc);
        if (n_quant == 1) { /* the CLI's scalar and heatmap documents, for the first of them */
            json_t *sc = tmt_run_json(0, "%s scalar '%s' '%s' %s --json", tmt_bin(), path, name, idx);
            assert_string_equal(str(sc, "label"), lab);
            assert_string_equal(str(sc, "description"), desc);
            json_decref(sc);
            json_t *hm = tmt_run_json(0, "%s heatmap '%s' '%s' -o %s/h.png --json -q", tmt_bin(), path, name, g_tmp);
            assert_string_equal(str(hm, "label"), lab);
            assert_string_equal(str(hm, "description"), desc);
            json_decref(hm);
        }
    }
    assert_true(n_quant > 0);
    json_t *arch = get(port, "/api/v1/arch");
    assert_true(check_arch(json_object_get(arch, "root"), by_name) > 0);
    json_decref(arch);
    /* compat --json: a tensor item carries its tensor's label, a node item its weight's */
    const char *target = strstr(path, ".gguf") ? "llamacpp-cpu" : strstr(path, ".onnx") ? "ort-cpu" : "vllm:sm80";
    char *cout = NULL;
    tmt_run(&cout, "%s compat '%s' --target %s --all --json", tmt_bin(), path, target);
    json_t *cj = cout ? json_loads(cout, 0, NULL) : NULL, *it;
    free(cout);
    assert_non_null(cj);
    size_t n_labelled = 0;
    json_array_foreach(json_object_get(cj, "items"), i, it) {
        const char *lab = json_string_value(json_object_get(it, "label"));
        if (!lab) continue;
        n_labelled++;
        if (!strcmp(str(it, "kind"), "tensor")) {
            json_t *want = json_object_get(by_name, str(it, "name"));
            assert_non_null(want);
            assert_string_equal(lab, str(want, "label"));
            assert_string_equal(str(it, "description"), str(want, "description"));
            assert_string_equal(str(it, "describe"), lab);
        } else {
            int found = 0;
            const char *key;
            json_t *v;
            json_object_foreach(by_name, key, v) found |= !strcmp(lab, str(v, "label"));
            assert_true(found);
        }
    }
    assert_true(n_labelled > 0);
    json_decref(cj);
    if (m->ref) { /* qdiff: CLI and API entries carry inspect's label */
        json_t *qa = get(port, "/api/v1/qdiff");
        json_t *qc = tmt_run_json(0, "%s qdiff '%s' '%s' --json", tmt_bin(), ref, path);
        json_t *ea = json_object_get(qa, "tensors"), *ec = json_object_get(qc, "tensors"), *e;
        assert_true(json_array_size(ec) > 0);
        assert_int_equal(json_array_size(ea), json_array_size(ec));
        json_array_foreach(ec, i, e) {
            json_t *want = json_object_get(by_name, str(e, "name"));
            assert_non_null(want);
            assert_string_equal(str(e, "label"), str(want, "label"));
            assert_string_equal(str(e, "scheme"), str(want, "label"));
            assert_string_equal(str(e, "description"), str(want, "description"));
            assert_string_equal(str(json_array_get(ea, i), "label"), str(want, "label"));
        }
        json_decref(qa);
        json_decref(qc);
    }
    tmt_serve_stop(g_pid, out);
    g_pid = -1;
    json_decref(by_name);
    json_decref(api);
    json_decref(cli);
    free(text);
    tm_close(f);
}

static void test_cli_and_api_agree(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    for (int k = 0; k < N_MODELS; k++) check_model(&k_models[k]);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tm_qlabel_XXXXXX");
    if (!mkdtemp(g_tmp)) return -1;
    if (!tmv_shared_dir()) return 0;
    char *o = NULL;
    const char *src = "models/safetensors/stories260K-f32";
    int rc = tmt_run(&o, "%s quantize %s/%s -o %s/ct_int4 --type int4 --granularity group:32 --asymmetric "
                        "--scale-dtype f16 -q && %s quantize %s/%s -o %s/ct_int8 -q && "
                        "%s quantize %s/%s -o %s/ct_fp8 --type fp8_e4m3 -q",
                     tmt_bin(), tmv_shared_dir(), src, g_tmp, tmt_bin(), tmv_shared_dir(), src, g_tmp,
                     tmt_bin(), tmv_shared_dir(), src, g_tmp);
    free(o);
    return rc;
}

static int teardown(void **state) {
    (void)state;
    char *o = NULL;
    tmt_run(&o, "rm -rf '%s'", g_tmp);
    free(o);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_label_of_each_layout),
        cmocka_unit_test_teardown(test_cli_and_api_agree, stop_server),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
