/*
** test_open_buffer.c: tm_open_buffer opens an in-memory image of every single-file format
** (safetensors, GGUF, ONNX, PyTorch zip and legacy, NumPy .npy and .npz), found by content and
** when asked for by tm_open_params.format, and lists the same tensors with the same values as
** tm_open on the file (docs/ARCHITECTURE.md "Adding a format": every reader has a buffer
** opener in the open table). Models: ../shared/models.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tensormorph.h"
#include "helpers/fixture.h"
#include "helpers/vectors.h"

typedef struct model_case {
    const char *rel;       /* under <shared>/models */
    tm_format   fmt;       /* what tm_file_format reports */
} model_case;

static const model_case k_models[] = {
    {"safetensors/stories260K-f32/model.safetensors", TM_FMT_SAFETENSORS},
    {"gguf/stories260K-Q4_K_M.gguf", TM_FMT_GGUF},
    {"onnx/ort_testdata/conv_qdq_s8s8_perchannel.onnx", TM_FMT_ONNX},
    {"torch/mlp_static_qint8.pt", TM_FMT_PT},
    {"numpy/stories260K_calib_L0_attn_in.npy", TM_FMT_NPY},
    {"numpy/stories260K_calib_acts.npz", TM_FMT_NPZ},
};

static uint8_t *slurp(const char *path, size_t *n) {
    uint8_t *b = tmt_slurp(path, n);
    assert_true(*n > 0);
    return b;
}

/* same tensors, same logical shapes, same first and last values */
static void same_listing(const tm_file *a, const tm_file *b) {
    assert_int_equal(tm_file_format(a), tm_file_format(b));
    assert_int_equal(tm_file_n_tensors(a), tm_file_n_tensors(b));
    assert_true(tm_file_n_tensors(a) > 0);
    for (int64_t i = 0; i < tm_file_n_tensors(a); i++) {
        const tm_tensor *x = tm_file_tensor(a, i), *y = tm_file_tensor(b, i);
        /* a lone .npy array is named by its file's stem; an image has none ("array") */
        if (tm_file_format(a) != TM_FMT_NPY) assert_string_equal(x->name, y->name);
        assert_int_equal(x->dtype, y->dtype);
        assert_int_equal(x->n_elems, y->n_elems);
        if (x->role != TM_ROLE_DATA || x->n_elems == 0) continue;
        float u[2], v[2];
        tm_err e;
        assert_int_equal(tm_tensor_read_f32(a, i, 0, 1, &u[0], &e), TM_OK);
        assert_int_equal(tm_tensor_read_f32(b, i, 0, 1, &v[0], &e), TM_OK);
        assert_int_equal(tm_tensor_read_f32(a, i, x->n_elems - 1, 1, &u[1], &e), TM_OK);
        assert_int_equal(tm_tensor_read_f32(b, i, x->n_elems - 1, 1, &v[1], &e), TM_OK);
        assert_memory_equal(u, v, sizeof u);
    }
}

static void test_every_format_opens_from_memory(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    for (size_t c = 0; c < sizeof k_models / sizeof k_models[0]; c++) {
        if (k_models[c].fmt == TM_FMT_UNKNOWN) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/models/%s", tmv_shared_dir(), k_models[c].rel);
        tm_file *ff = NULL, *fb = NULL, *fa = NULL;
        tm_err e;
        if (tm_open(path, NULL, &ff, &e) != TM_OK) fail_msg("%s: %s", path, e.msg);
        assert_int_equal(tm_file_format(ff), k_models[c].fmt);
        size_t n = 0;
        uint8_t *img = slurp(path, &n);
        /* by content, under a name without an extension */
        tm_status s = tm_open_buffer(img, n, "image", NULL, &fb, &e);
        if (s != TM_OK) fail_msg("%s from memory: %s", k_models[c].rel, e.msg);
        same_listing(ff, fb);
        /* asked for by format */
        tm_open_params p = tm_open_params_default();
        p.format = k_models[c].fmt;
        s = tm_open_buffer(img, n, "image", &p, &fa, &e);
        if (s != TM_OK) fail_msg("%s as format %d: %s", k_models[c].rel, (int)p.format, e.msg);
        same_listing(ff, fa);
        tm_close(fa);
        tm_close(fb);
        tm_close(ff);
        free(img);
    }
}

/* A format asked for reads the image as that format only: a GGUF image asked for as
** safetensors fails as a safetensors image would, naming the buffer. */
static void test_format_asked_for_is_used(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/models/gguf/stories260K-Q4_K_M.gguf", tmv_shared_dir());
    size_t n = 0;
    uint8_t *img = slurp(path, &n);
    tm_open_params p = tm_open_params_default();
    p.format = TM_FMT_SAFETENSORS;
    tm_file *f = NULL;
    tm_err e;
    assert_int_not_equal(tm_open_buffer(img, n, "img", &p, &f, &e), TM_OK);
    assert_null(f);
    assert_non_null(strstr(e.msg, "img"));
    p.format = TM_FMT_GGUF;
    assert_int_equal(tm_open_buffer(img, n, "img", &p, &f, &e), TM_OK);
    assert_int_equal(tm_file_format(f), TM_FMT_GGUF);
    tm_close(f);
    free(img);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_format_opens_from_memory),
        cmocka_unit_test(test_format_asked_for_is_used),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
