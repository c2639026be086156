/* test_qformula.c: the Scalar Inspector's formula (tm_qelement_formula) for every layout, on a
** table of real models from ../shared (GGUF K-quants, Q*_0, Q*_1, Q8_0, Q6_K, IQ grid types,
** TQ2_0; PyTorch per-tensor and per-channel qtensors; ONNX DequantizeLinear int8/uint8/int4/
** float8; compressed-tensors int4 and fp8 made here by `tensormorph quantize`): for sampled
** elements of every quantized tensor,
**   - the formula's numeric expression, parsed and evaluated here, gives the element's value
**     (tm_qelement.value) up to float32 rounding,
**   - that value is the dequantized value tm_tensor_read_f32 gives,
**   - the symbolic formula names the fields of the layout (K-quants: d, sc, dmin, m; Q*_1: + m;
**     IQ: the codebook entry and sign; affine: zero_point and scale),
**   - `scalar --json` (env TM_BIN) carries the same formula, terms and value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/cli_run.h"
#include "helpers/fixture.h"
#include "helpers/vectors.h"
#include "tensormorph.h"

/* ---- a tiny evaluator for "number", + - * and parentheses; *mag collects |additive terms| --- */
typedef struct ev { const char *p; int bad; } ev;
static void sp(ev *e) { while (*e->p == ' ') e->p++; }
static double expr(ev *e, double *mag);
static double atom(ev *e) {
    sp(e);
    if (*e->p == '(') {
        e->p++;
        double m, v = expr(e, &m);
        sp(e);
        if (*e->p != ')') e->bad = 1; else e->p++;
        return v;
    }
    char *end;
    double v = strtod(e->p, &end);
    if (end == e->p) { e->bad = 1; return 0; }
    e->p = end;
    return v;
}
static double prod(ev *e) {
    double v = atom(e);
    for (sp(e); *e->p == '*'; sp(e)) { e->p++; v *= atom(e); }
    return v;
}
static double expr(ev *e, double *mag) {
    double v = prod(e);
    *mag = fabs(v);
    for (sp(e); *e->p == '+' || *e->p == '-'; sp(e)) {
        char op = *e->p++;
        double w = prod(e);
        *mag += fabs(w);
        v = op == '+' ? v + w : v - w;
    }
    return v;
}
static double eval(const char *s, double *mag) {
    ev e = {s, 0};
    double v = expr(&e, mag);
    sp(&e);
    if (*e.p) e.bad = 1;
    if (e.bad) fail_msg("cannot evaluate the formula's numbers '%s'", s);
    return v;
}

static const char *term_names(const tm_qformula *fm, char *buf, size_t n) {
    buf[0] = 0;
    for (int k = 0; k < fm->n_terms; k++) {
        strncat(buf, fm->terms[k].name, n - strlen(buf) - 1);
        strncat(buf, ",", n - strlen(buf) - 1);
    }
    return buf;
}

/* Which fields the formula must name, by label prefix. */
static void check_names(const char *label, const tm_qformula *fm) {
    char names[256];
    term_names(fm, names, sizeof names);
    if (!strncmp(label, "Q4_K", 4) || !strncmp(label, "Q5_K", 4) || !strncmp(label, "Q2_K", 4)) {
        assert_string_equal(names, "d,sc,q,dmin,m,");
        assert_non_null(strstr(fm->symbolic, "dmin"));
    } else if (!strncmp(label, "Q4_1", 4) || !strncmp(label, "Q5_1", 4)) {
        assert_string_equal(names, "d,q,m,");
        assert_non_null(strstr(fm->symbolic, "+ m"));
    } else if (!strncmp(label, "Q6_K", 4) || !strncmp(label, "Q3_K", 4)) {
        assert_string_equal(names, "d,sc,q,z,");
    } else if (!strncmp(label, "Q4_0", 4) || !strncmp(label, "Q5_0", 4) || !strncmp(label, "TQ", 2)) {
        assert_string_equal(names, "d,q,z,");
        assert_null(strstr(fm->symbolic, "dmin")); /* no super-block fields */
    } else if (!strncmp(label, "Q8_0", 4)) {
        assert_string_equal(names, "d,q,");
    } else if (!strncmp(label, "IQ4", 3)) {
        assert_non_null(strstr(names, "kvalues_iq4nl[i]"));
    } else if (!strncmp(label, "IQ1", 3)) {
        assert_non_null(strstr(names, "k,j,grid[k][j],delta,"));
    } else if (!strncmp(label, "IQ", 2)) {
        assert_non_null(strstr(names, "k,j,grid[k][j],sign_bit,"));
    } else if (strstr(label, "F8") || strstr(label, "E4M3") || strstr(label, "E5M2")) {
        assert_non_null(strstr(fm->symbolic, "(q) \u00b7 scale"));
    } else {
        assert_non_null(strstr(names, "q,zero_point,scale,"));
    }
}

/* Every quantized tensor of PATH: n_samples elements spread over it. Returns the labels seen. */
static int check_model(const char *path, int n_samples, char *labels, size_t nl) {
    tm_file *f = tmt_open_ok(path);
    int n_checked = 0;
    for (int64_t i = 0; i < tm_file_n_tensors(f); i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        if (!t->quant || t->n_elems == 0) continue;
        char label[TM_QLABEL_MAX];
        tm_qtensor_label(f, t, label, sizeof label);
        char key[TM_QLABEL_MAX + 2];
        snprintf(key, sizeof key, "%.*s;", (int)strcspn(label, " "), label);
        if (!strstr(labels, key)) strncat(labels, key, nl - strlen(labels) - 1);
        for (int k = 0; k < n_samples; k++) {
            int64_t flat = (int64_t)((double)k / n_samples * (double)t->n_elems) + (k * 7919) % 13;
            if (flat >= t->n_elems) flat = t->n_elems - 1;
            tm_qelement qe;
            tm_err err;
            assert_int_equal(tm_qelement_get(f, i, flat, &qe, &err), TM_OK);
            float rv;
            assert_int_equal(tm_tensor_read_f32(f, i, flat, 1, &rv, &err), TM_OK);
            if (!(isnan(rv) && isnan(qe.value)) && (double)rv != qe.value)
                fail_msg("%s %s[%lld]: tm_qelement value %.9g, read_f32 %.9g", path, t->name, (long long)flat, qe.value, rv);
            tm_qformula fm;
            if (tm_qelement_formula(f, i, flat, &qe, &fm, &err)) fail_msg("%s %s: %s", path, t->name, err.msg);
            double mag, v = eval(fm.numeric, &mag);
            double tol = mag * 3e-7 + 1e-30;  /* float32 rounding of ggml's order of operations */
            if (!(fabs(v - qe.value) <= tol) && !(isnan(v) && isnan(qe.value)))
                fail_msg("%s %s[%lld] (%s): '%s' = %.9g, the value is %.9g", path, t->name, (long long)flat, label,
                         fm.numeric, v, qe.value);
            check_names(label, &fm);
            n_checked++;
        }
    }
    tm_close(f);
    return n_checked;
}

static const char *gguf_models[] = {
    "Q2_K", "Q3_K_M-imx", "Q4_0-imx", "Q4_1-imx", "Q4_K_M", "Q5_0-imx", "Q5_1-imx", "Q5_K_M-imx", "Q6_K-imx",
    "Q8_0-imx", "IQ1_M-imx", "IQ1_S-imx", "IQ2_S-imx", "IQ2_XS-imx", "IQ2_XXS-imx", "IQ3_S-imx", "IQ3_XXS-imx",
    "IQ4_NL", "IQ4_XS", "TQ2_0-imx",
};

static void test_gguf_every_type(void **st) {
    (void)st;
    if (!tmv_require_shared()) return;
    char labels[2048] = "", path[1024];
    int n = 0;
    for (size_t k = 0; k < sizeof gguf_models / sizeof *gguf_models; k++) {
        snprintf(path, sizeof path, "%s/models/gguf/imatrix/synth256-%s.gguf", tmv_shared_dir(), gguf_models[k]);
        n += check_model(path, 24, labels, sizeof labels);
    }
    snprintf(path, sizeof path, "%s/models/gguf/stories260K-Q4_K_M.gguf", tmv_shared_dir());
    n += check_model(path, 24, labels, sizeof labels);
    print_message("gguf: %d elements, types %s\n", n, labels);
    const char *want[] = {"Q2_K;", "Q3_K;", "Q4_0;", "Q4_1;", "Q4_K;", "Q5_0;", "Q5_1;", "Q5_K;", "Q6_K;", "Q8_0;",
                          "IQ1_M;", "IQ1_S;", "IQ2_S;", "IQ2_XS;", "IQ2_XXS;", "IQ3_S;", "IQ3_XXS;", "IQ4_NL;", "IQ4_XS;", "TQ2_0;"};
    for (size_t k = 0; k < sizeof want / sizeof *want; k++)
        if (!strstr(labels, want[k])) fail_msg("no tensor of type %s in the table (%s)", want[k], labels);
}

static void test_torch_onnx(void **st) {
    (void)st;
    if (!tmv_require_shared()) return;
    const char *rel[] = {
        "torch/stories260K_qint8_per_channel.pt", "torch/stories260K_quint8_per_tensor.pt", "torch/mlp_static_qint8.pt",
        "onnx/ort_testdata/conv_qdq_s8s8_perchannel.onnx", "onnx/ort_testdata/conv_qdq_u8u8.onnx",
        "onnx/ort_testdata/conv.int4_weights.qdq.onnx",
    };
    char labels[2048] = "", path[1024];
    for (size_t k = 0; k < sizeof rel / sizeof *rel; k++) {
        snprintf(path, sizeof path, "%s/models/%s", tmv_shared_dir(), rel[k]);
        int n = check_model(path, 32, labels, sizeof labels);
        if (n == 0) fail_msg("%s: no quantized tensor", path);
    }
    print_message("torch/onnx code types %s\n", labels);
}

/* compressed-tensors made by quantize from the f32 stories260K: int4 group:32 asym, fp8. */
static void test_ctensors(void **st) {
    (void)st;
    if (!tmv_require_shared()) return;
    char dir[256], src[1024], out[512], labels[1024] = "";
    assert_int_equal(tmt_tmpdir_make(dir, sizeof dir, "qformula"), 0);
    snprintf(src, sizeof src, "%s/models/safetensors/stories260K-f32", tmv_shared_dir());
    const char *schemes[][2] = {{"int4", "--granularity group:32 --asymmetric"}, {"fp8_e4m3", "--granularity channel"}};
    for (int k = 0; k < 2; k++) {
        snprintf(out, sizeof out, "%s/q%d", dir, k);
        char *o = NULL;
        int rc = tmt_run(&o, "%s quantize '%s' -o '%s' --type %s %s -q", tmt_bin(), src, out, schemes[k][0], schemes[k][1]);
        if (rc) fail_msg("quantize failed (%d): %s", rc, o ? o : "");
        free(o);
        assert_true(check_model(out, 32, labels, sizeof labels) > 0);
    }
    print_message("compressed-tensors code types %s\n", labels);
    tmt_tmpdir_remove(dir);
}

/* `scalar --json` carries the same formula and terms, and its value is the formula's. */
static void test_scalar_json(void **st) {
    (void)st;
    if (!tmv_require_shared()) return;
    struct { const char *rel, *tensor, *index, *sym; } c[] = {
        {"gguf/imatrix/synth256-Q4_K_M.gguf", "blk.0.attn_q.weight", "3,17", "d \u00b7 sc \u00b7 q \u2212 dmin \u00b7 m"},
        {"gguf/imatrix/synth256-Q6_K-imx.gguf", "blk.0.attn_q.weight", "5,100", "d \u00b7 sc \u00b7 (q \u2212 z)"},
        {"gguf/imatrix/synth256-Q5_1-imx.gguf", "blk.0.attn_q.weight", "1,2", "d \u00b7 q + m"},
        {"gguf/stories260K-Q4_K_M.gguf", "blk.0.attn_q.weight", "52,25", "d \u00b7 (q \u2212 z)"},
        {"gguf/imatrix/synth256-IQ2_XS-imx.gguf", "blk.0.attn_q.weight", "2,9", "grid[k][j] \u00b7 sign"},
        {"torch/stories260K_qint8_per_channel.pt", NULL, "0,0", "(q \u2212 zero_point) \u00b7 scale"},
    };
    for (size_t k = 0; k < sizeof c / sizeof *c; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/models/%s", tmv_shared_dir(), c[k].rel);
        const char *tensor = c[k].tensor;
        char first[256] = "";
        if (!tensor) { /* the first quantized 2-D tensor */
            tm_file *f = tmt_open_ok(path);
            for (int64_t i = 0; i < tm_file_n_tensors(f) && !first[0]; i++) {
                const tm_tensor *t = tm_file_tensor(f, i);
                if (t->quant && t->ndim == 2) snprintf(first, sizeof first, "%s", t->name);
            }
            tm_close(f);
            tensor = first;
        }
        json_t *d = tmt_run_json(0, "%s scalar --json '%s' '%s' %s", tmt_bin(), path, tensor, c[k].index);
        json_t *fo = json_object_get(d, "formula");
        assert_non_null(fo);
        const char *sym = json_string_value(json_object_get(fo, "symbolic"));
        if (!sym || !strstr(sym, c[k].sym)) fail_msg("%s %s: formula '%s', want '%s'", c[k].rel, tensor, sym ? sym : "-", c[k].sym);
        double mag, v = eval(json_string_value(json_object_get(fo, "numeric")), &mag);
        double value = json_number_value(json_object_get(d, "value"));
        assert_true(fabs(v - value) <= mag * 3e-7 + 1e-30);
        /* every term of the formula is a number the page can show */
        json_t *terms = json_object_get(fo, "terms");
        assert_true(json_object_size(terms) >= 2);
        if (strstr(c[k].rel, "Q5_0") || strstr(c[k].rel, "stories260K-Q4_K_M")) /* Q5_0: no super-block fields */
            assert_null(json_object_get(terms, "dmin"));
        json_decref(d);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_every_type),
        cmocka_unit_test(test_torch_onnx),
        cmocka_unit_test(test_ctensors),
        cmocka_unit_test(test_scalar_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
