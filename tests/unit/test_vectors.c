/*
** test_vectors.c: the test helpers themselves (.npy reader, shared-tree lookup) and the
** inventory of ../shared/vectors: every case directory of the families the numerics tests own
** is listed in INDEX.json and the other way round, so a case cannot be added or lost without
** a test noticing. Which test file checks which family:
**   float8, torch_convert                          test_dtype.c
**   onnx, torch_quantize, torch_fake_quantize,
**   spec (except spec/gguf_*)                      test_quant_vectors.c
**   torch_observer, ort_calibration                test_observer.c
**   gguf, gguf_dequant, spec/gguf_*                the GGUF codec's tests (not quant/)
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers/vectors.h"

static const char *const owned_families[] = {
    "float8", "torch_convert", "onnx", "torch_quantize", "torch_fake_quantize", "spec",
    "torch_observer", "ort_calibration"};

/* write a v1.0 .npy with the given header dict and payload */
static void write_npy(const char *path, const char *dict, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    size_t dl = strlen(dict), total = 10 + dl + 1;
    size_t pad = (64 - total % 64) % 64;
    unsigned short hl = (unsigned short)(dl + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(hl & 0xff, f);
    fputc(hl >> 8, f);
    fwrite(dict, 1, dl, f);
    for (size_t i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    fwrite(data, 1, n, f);
    fclose(f);
}

static void tmp_path(char *buf, size_t n, const char *leaf) {
    const char *b = getenv("TM_BUILD");
    snprintf(buf, n, "%s/test_vectors_%d_%s.npy", b && *b ? b : "/tmp", (int)getpid(), leaf);
}

static void test_npy_reader_dtypes(void **state) {
    (void)state;
    char p[4096];
    tmv_npy a;
    const float f4[6] = {1.5f, -2.0f, 0.0f, 3.25f, -0.0f, 1e-40f};
    tmp_path(p, sizeof p, "f4");
    write_npy(p, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f4, sizeof f4);
    assert_int_equal(tmv_npy_load(p, &a), 0);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[0], 2);
    assert_int_equal(a.shape[1], 3);
    assert_int_equal(a.n, 6);
    assert_int_equal(tmv_npy_f32_bits(&a, 4), 0x80000000u);
    assert_true(tmv_npy_get_f64(&a, 3) == 3.25);
    tmv_npy_free(&a);
    remove(p);
    const int16_t i2[3] = {-32768, 5, 32767};
    tmp_path(p, sizeof p, "i2");
    write_npy(p, "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", i2, sizeof i2);
    assert_int_equal(tmv_npy_load(p, &a), 0);
    assert_int_equal(tmv_npy_get_i64(&a, 0), -32768);
    assert_int_equal(tmv_npy_get_i64(&a, 2), 32767);
    tmv_npy_free(&a);
    remove(p);
    const uint16_t u2[2] = {0xffff, 1};
    tmp_path(p, sizeof p, "u2");
    write_npy(p, "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", u2, sizeof u2);
    assert_int_equal(tmv_npy_load(p, &a), 0);
    assert_int_equal(tmv_npy_get_i64(&a, 0), 65535);
    tmv_npy_free(&a);
    remove(p);
    const int8_t i1[2] = {-128, 127};
    tmp_path(p, sizeof p, "i1");
    write_npy(p, "{'descr': '|i1', 'fortran_order': False, 'shape': (2,), }", i1, sizeof i1);
    assert_int_equal(tmv_npy_load(p, &a), 0);
    assert_int_equal(tmv_npy_get_i64(&a, 0), -128);
    tmv_npy_free(&a);
    remove(p);
    const int64_t i8[1] = {-5};
    tmp_path(p, sizeof p, "i8");
    write_npy(p, "{'descr': '<i8', 'fortran_order': False, 'shape': (), }", i8, sizeof i8);
    assert_int_equal(tmv_npy_load(p, &a), 0);
    assert_int_equal(a.ndim, 0);
    assert_int_equal(a.n, 1);
    assert_int_equal(tmv_npy_get_i64(&a, 0), -5);
    tmv_npy_free(&a);
    remove(p);
    const double f8[1] = {0.1};
    tmp_path(p, sizeof p, "f8");
    write_npy(p, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", f8, sizeof f8);
    assert_int_equal(tmv_npy_load(p, &a), 0);
    assert_true(tmv_npy_get_f64(&a, 0) == 0.1);
    tmv_npy_free(&a);
    remove(p);
    /* refused: big-endian, Fortran order, truncated payload */
    tmp_path(p, sizeof p, "bad");
    write_npy(p, "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", f4, 4);
    assert_int_equal(tmv_npy_load(p, &a), -1);
    write_npy(p, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", f4, sizeof f4);
    assert_int_equal(tmv_npy_load(p, &a), -1);
    write_npy(p, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", f4, 8);
    assert_int_equal(tmv_npy_load(p, &a), -1);
    remove(p);
}

static void test_shared_dir_lookup(void **state) {
    (void)state;
    const char *orig = getenv("TM_SHARED");
    char *saved = orig ? strdup(orig) : NULL;
    setenv("TM_SHARED", "/nonexistent/shared", 1);
    assert_null(tmv_shared_dir());
    if (saved) {
        setenv("TM_SHARED", saved, 1);
        free(saved);
    } else {
        unsetenv("TM_SHARED");
    }
}

static int in_index(json_t *cases, const char *id) {
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *s = json_string_value(json_object_get(c, "id"));
        if (s && strcmp(s, id) == 0) return 1;
    }
    return 0;
}

static void test_vectors_inventory(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char path[4200];
    snprintf(path, sizeof path, "%s/vectors/INDEX.json", tmv_shared_dir());
    json_error_t je;
    json_t *idx = json_load_file(path, 0, &je);
    assert_non_null(idx);
    json_t *cases = json_object_get(idx, "cases");
    int total = 0;
    for (size_t f = 0; f < sizeof owned_families / sizeof owned_families[0]; f++) {
        char **names;
        int n = tmv_list_cases(owned_families[f], &names);
        assert_true(n > 0);
        for (int i = 0; i < n; i++) {
            char id[512];
            snprintf(id, sizeof id, "%s/%s", owned_families[f], names[i]);
            if (!in_index(cases, id)) fail_msg("%s is on disk but not in INDEX.json", id);
            json_t *cj = tmv_case_json(owned_families[f], names[i]);
            assert_non_null(cj);
            assert_string_equal(json_string_value(json_object_get(cj, "id")), id);
            json_decref(cj);
        }
        total += n;
        tmv_free_names(names, n);
    }
    /* and every INDEX entry of these families exists on disk */
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *id = json_string_value(json_object_get(c, "id"));
        for (size_t f = 0; f < sizeof owned_families / sizeof owned_families[0]; f++) {
            size_t l = strlen(owned_families[f]);
            if (strncmp(id, owned_families[f], l) == 0 && id[l] == '/') {
                char cp[4200];
                snprintf(cp, sizeof cp, "%s/vectors/%s/case.json", tmv_shared_dir(), id);
                FILE *fp = fopen(cp, "rb");
                if (!fp) fail_msg("%s is in INDEX.json but missing on disk", id);
                fclose(fp);
            }
        }
    }
    printf("vectors: %d cases in the families checked by the numerics tests\n", total);
    json_decref(idx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_npy_reader_dtypes),
        cmocka_unit_test(test_shared_dir_lookup),
        cmocka_unit_test(test_vectors_inventory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
