/* test_ggml_quant.c: the ggml block quantizers (src/quant/ggml_quant.c) against every case of
** ../shared/vectors/gguf (expected.bin byte for byte where case.json says "exact") and the
** GGUF cases of spec/ (f16 scale overflow is an error, all-subnormal blocks are zero blocks).
** Plus properties that need no vectors: block sizes, argument checks, non-finite input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/vectors.h"
#include "tensormorph.h"
#include "tensormorph/ggml_quant.h"

/* Read a whole file; returns malloc'd bytes and *n, or NULL. */
static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(sz > 0 ? (size_t)sz : 1);
    size_t r = fread(buf, 1, (size_t)sz, f);
    fclose(f);
    if (r != (size_t)sz) { free(buf); return NULL; }
    *n = r;
    return buf;
}

/* Quantize x [rows, n_per_row] row by row into a malloc'd buffer; fails the test on error. */
static uint8_t *quantize_rows(int type, const float *x, int64_t rows, int64_t n_per_row,
                              size_t *n_out) {
    uint64_t rb = tm_gq_row_bytes(type, n_per_row);
    assert_true(rb > 0);
    uint8_t *out = malloc((size_t)(rb * (uint64_t)rows));
    assert_non_null(out);
    for (int64_t r = 0; r < rows; r++) {
        tm_err e;
        int64_t bad;
        tm_status st = tm_gq_quantize_row(type, x + r * n_per_row, n_per_row, out + r * rb, &bad, &e);
        if (st != TM_OK) fail_msg("row %lld: %s", (long long)r, e.msg);
    }
    *n_out = (size_t)(rb * (uint64_t)rows);
    return out;
}

/* Compare, reporting the first differing block. */
static int compare_blocks(const char *what, int type, const uint8_t *got, const uint8_t *want,
                          size_t n) {
    size_t bs = tm_gq_type_size(type);
    int bad = 0;
    for (size_t b = 0; b * bs < n; b++) {
        if (memcmp(got + b * bs, want + b * bs, bs) != 0) {
            if (bad < 3) {
                size_t k = 0;
                while (got[b * bs + k] == want[b * bs + k]) k++;
                fprintf(stderr, "%s: block %zu differs at byte %zu: got 0x%02x want 0x%02x\n", what,
                        b, k, got[b * bs + k], want[b * bs + k]);
            }
            bad++;
        }
    }
    if (bad) fprintf(stderr, "%s: %d of %zu blocks differ\n", what, bad, n / bs);
    return bad;
}

static void test_gguf_vectors(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char **names;
    int n = tmv_list_cases("gguf", &names);
    assert_true(n > 0);
    int checked = 0, failed = 0;
    for (int c = 0; c < n; c++) {
        json_t *cj = tmv_case_json("gguf", names[c]);
        assert_non_null(cj);
        json_t *params = json_object_get(cj, "params");
        const char *tname = json_string_value(json_object_get(params, "type"));
        assert_non_null(tname);
        int type = tm_gq_type_from_name(tname);
        if (type < 0) fail_msg("gguf/%s: type %s has no quantizer", names[c], tname);
        int64_t rows = json_integer_value(json_object_get(params, "rows"));
        int64_t npr = json_integer_value(json_object_get(params, "n_per_row"));
        assert_true(rows > 0 && npr > 0);
        assert_int_equal(tm_gq_block_size(type), json_integer_value(json_object_get(params, "block_size")));
        assert_int_equal(tm_gq_type_size(type), json_integer_value(json_object_get(params, "type_size")));
        tmv_npy in;
        assert_int_equal(tmv_npy_load_case("gguf", names[c], "input.npy", &in), 0);
        assert_int_equal(in.n, rows * npr);
        float *x = tmv_npy_as_f32(&in);
        assert_non_null(x);
        assert_string_equal(tmv_output_match(cj, "blocks"), "exact");
        char path[4096];
        tmv_case_path(path, sizeof path, "gguf", names[c], "expected.bin");
        size_t nw = 0;
        uint8_t *want = read_all(path, &nw);
        assert_non_null(want);
        size_t ng = 0;
        uint8_t *got = quantize_rows(type, x, rows, npr, &ng);
        assert_int_equal(ng, nw);
        char what[256];
        snprintf(what, sizeof what, "gguf/%s", names[c]);
        if (compare_blocks(what, type, got, want, nw)) failed++;
        /* The informative FMA build differs: our bytes must not match it where it differs
        ** from the unfused reference (proves no contraction crept in). */
        tmv_case_path(path, sizeof path, "gguf", names[c], "expected_fma_build.bin");
        size_t nf = 0;
        uint8_t *fma = read_all(path, &nf);
        if (fma && nf == nw && memcmp(fma, want, nw) != 0) assert_memory_not_equal(got, fma, nw);
        free(fma);
        checked++;
        free(got);
        free(want);
        free(x);
        tmv_npy_free(&in);
        json_decref(cj);
    }
    printf("gguf: %d of %d cases checked byte for byte, %d differ\n", checked, n, failed);
    assert_int_equal(failed, 0);
    assert_int_equal(checked, n);
    tmv_free_names(names, n);
}

/* spec/gguf_subnormal_blocks: blocks 0-2 all tiny, written as zero blocks; 3-7 as ggml. */
static void test_subnormal_blocks(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    static const struct { int type; const char *file; int zero_code; } t[] = {
        {TM_GQ_Q8_0, "expected_q8_0.bin", 0},  {TM_GQ_Q4_0, "expected_q4_0.bin", 8},
        {TM_GQ_Q4_1, "expected_q4_1.bin", 0},  {TM_GQ_Q5_0, "expected_q5_0.bin", 16},
        {TM_GQ_Q5_1, "expected_q5_1.bin", 0}};
    tmv_npy in;
    assert_int_equal(tmv_npy_load_case("spec", "gguf_subnormal_blocks", "input.npy", &in), 0);
    float *x = tmv_npy_as_f32(&in);
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        char path[4096];
        tmv_case_path(path, sizeof path, "spec", "gguf_subnormal_blocks", t[k].file);
        size_t nw = 0;
        uint8_t *want = read_all(path, &nw);
        assert_non_null(want);
        size_t ng = 0;
        uint8_t *got = quantize_rows(t[k].type, x, 1, in.n, &ng);
        assert_int_equal(ng, nw);
        assert_int_equal(compare_blocks(t[k].file, t[k].type, got, want, nw), 0);
        /* the checks in words: blocks 0-2 dequantize to exactly zero (every code the zero code) */
        size_t bs = tm_gq_type_size(t[k].type);
        for (int b = 0; b < 3; b++) {
            const uint8_t *blk = got + b * bs;
            uint16_t d = (uint16_t)(blk[0] | blk[1] << 8);
            assert_true((d & 0x7fff) == 0);
            if (t[k].type == TM_GQ_Q8_0)
                for (int j = 0; j < 32; j++) assert_int_equal(blk[2 + j], 0);
            if (t[k].type == TM_GQ_Q4_0)
                for (int j = 0; j < 16; j++) assert_int_equal(blk[2 + j], 0x88);
            if (t[k].type == TM_GQ_Q5_0) {
                for (int j = 0; j < 16; j++) assert_int_equal(blk[6 + j], 0x00);
                assert_int_equal(blk[2] & blk[3] & blk[4] & blk[5], 0xff); /* 5th bit of 16 */
            }
        }
        free(got);
        free(want);
    }
    free(x);
    tmv_npy_free(&in);
}

/* spec/gguf_*_f16_scale_overflow: every row in which ggml's reference stored an f16 +-inf
** scale or min (reference_ggml_bytes.npy) is refused, naming the first such block; every other
** row quantizes, with finite scales. */
static void check_overflow(const char *caseid, int type, int must_fail_row) {
    tmv_npy in, ref;
    assert_int_equal(tmv_npy_load_case("spec", caseid, "input.npy", &in), 0);
    assert_int_equal(tmv_npy_load_case("spec", caseid, "reference_ggml_bytes.npy", &ref), 0);
    float *x = tmv_npy_as_f32(&in);
    const uint8_t *rb = ref.data;
    int64_t rows = in.shape[0], npr = in.shape[1];
    size_t bs = tm_gq_type_size(type);
    int64_t nb = npr / tm_gq_block_size(type);
    assert_int_equal((int64_t)ref.n, rows * nb * (int64_t)bs);
    int n_refused = 0;
    uint8_t *out = malloc((size_t)tm_gq_row_bytes(type, npr));
    for (int64_t r = 0; r < rows; r++) {
        int64_t first_inf = -1; /* first block of the row with an f16 inf d (or m) */
        for (int64_t b = 0; b < nb && first_inf < 0; b++) {
            const uint8_t *blk = rb + (r * nb + b) * (int64_t)bs;
            int nf = type == TM_GQ_Q4_1 ? 2 : 1;
            for (int f = 0; f < nf; f++)
                if (((blk[2 * f] | blk[2 * f + 1] << 8) & 0x7fff) == 0x7c00) first_inf = b;
        }
        tm_err e;
        int64_t bad = 0;
        tm_status st = tm_gq_quantize_row(type, x + r * npr, npr, out, &bad, &e);
        if (first_inf >= 0) {
            assert_int_equal(st, TM_E_RANGE);
            assert_int_equal(bad, first_inf);
            char want[64];
            snprintf(want, sizeof want, "block %lld:", (long long)first_inf);
            assert_non_null(strstr(e.msg, want));
            assert_non_null(strstr(e.msg, "float16"));
            n_refused++;
        } else {
            assert_int_equal(st, TM_OK);
            for (int64_t b = 0; b < nb; b++) {
                uint16_t d = (uint16_t)(out[b * bs] | out[b * bs + 1] << 8);
                assert_true((d & 0x7c00) != 0x7c00);
            }
        }
        if (r == must_fail_row) assert_true(first_inf >= 0);
    }
    assert_true(n_refused >= 1);
    free(out);
    free(x);
    tmv_npy_free(&in);
    tmv_npy_free(&ref);
}

static void test_f16_scale_overflow(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    check_overflow("gguf_q8_0_f16_scale_overflow", TM_GQ_Q8_0, 0);
    check_overflow("gguf_q4_1_f16_scale_overflow", TM_GQ_Q4_1, 1);
}

/* Every quantizer: f16 overflow is refused for every type, not just the legacy ones. */
static void test_overflow_all_types(void **state) {
    (void)state;
    static const int types[] = {TM_GQ_Q4_0, TM_GQ_Q4_1, TM_GQ_Q5_0, TM_GQ_Q5_1, TM_GQ_Q8_0,
                                TM_GQ_IQ4_NL, TM_GQ_Q2_K, TM_GQ_Q3_K, TM_GQ_Q4_K, TM_GQ_Q5_K,
                                TM_GQ_Q6_K, TM_GQ_F16};
    float x[512];
    uint8_t out[2048];
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        for (int i = 0; i < 512; i++) x[i] = (float)((i * 37) % 101 - 50) * 0.01f;
        tm_err e;
        int64_t bad;
        assert_int_equal(tm_gq_quantize_row(types[k], x, 512, out, &bad, &e), TM_OK);
        assert_int_equal(bad, -1);
        for (int i = 256; i < 512; i++) x[i] = (float)(i - 300) * 1e10f; /* second half huge */
        tm_status st = tm_gq_quantize_row(types[k], x, 512, out, &bad, &e);
        if (st != TM_E_RANGE) fail_msg("%s: status %d (%s)", tm_gq_type_name(types[k]), st, e.msg);
        int bs = tm_gq_block_size(types[k]);
        assert_true(bad * bs >= 256 && bad * bs < 512);
    }
}

static void test_arguments(void **state) {
    (void)state;
    float x[256] = {0};
    uint8_t out[1024];
    tm_err e;
    int64_t bad;
    assert_int_equal(tm_gq_quantize_row(TM_GQ_Q4_K, x, 128, out, &bad, &e), TM_E_INVALID_ARG);
    assert_non_null(strstr(e.msg, "multiple"));
    assert_int_equal(tm_gq_quantize_row(TM_GQ_Q8_0, x, 33, out, &bad, &e), TM_E_INVALID_ARG);
    assert_int_equal(tm_gq_quantize_row(99, x, 32, out, &bad, &e), TM_E_INVALID_ARG);
    x[40] = NAN;
    assert_int_equal(tm_gq_quantize_row(TM_GQ_Q8_0, x, 64, out, &bad, &e), TM_E_NONFINITE);
    assert_int_equal(bad, 1);
    assert_non_null(strstr(e.msg, "NaN"));
    x[40] = -INFINITY;
    assert_int_equal(tm_gq_quantize_row(TM_GQ_Q6_K, x, 256, out, &bad, &e), TM_E_NONFINITE);
    assert_int_equal(bad, 0);
    /* names and sizes */
    assert_int_equal(tm_gq_type_from_name("q4_k"), TM_GQ_Q4_K);
    assert_int_equal(tm_gq_type_from_name("IQ4_NL"), TM_GQ_IQ4_NL);
    assert_int_equal(tm_gq_type_from_name("Q4_K_M"), -1);
    assert_string_equal(tm_gq_type_name(TM_GQ_Q5_1), "Q5_1");
    assert_int_equal(tm_gq_row_bytes(TM_GQ_Q6_K, 512), 420);
    assert_int_equal(tm_gq_row_bytes(TM_GQ_Q6_K, 500), 0);
    assert_int_equal(tm_gq_row_bytes(TM_GQ_F16, 3), 6);
}

/* IQ4_NL has no quantize vector: check it through its own decode (d * grid[q]) on a ramp:
** the error of every value is at most half the largest gap of the grid times |d|, and the
** reconstruction beats the plain first-guess scale max/-127. */
static void test_iq4_nl_properties(void **state) {
    (void)state;
    static const int8_t grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = sinf((float)i * 0.7f) * (1.0f + (float)(i % 5));
    uint8_t out[36];
    tm_err e;
    assert_int_equal(tm_gq_quantize_row(TM_GQ_IQ4_NL, x, 64, out, NULL, &e), TM_OK);
    for (int b = 0; b < 2; b++) {
        uint16_t dh = (uint16_t)(out[b * 18] | out[b * 18 + 1] << 8);
        float d = tm_f16_to_f32(dh);
        assert_true(d != 0.0f && isfinite(d));
        double err2 = 0;
        for (int j = 0; j < 32; j++) {
            int q = j < 16 ? out[b * 18 + 2 + j] & 0xF : out[b * 18 + 2 + j - 16] >> 4;
            float v = d * grid[q];
            double diff = (double)v - x[b * 32 + j];
            assert_true(fabs(diff) <= 12.5 * fabs(d) + 1e-6);
            err2 += diff * diff;
        }
        assert_true(err2 / 32 < 0.05);
    }
    /* an all-zero block: d 0, every code the grid index nearest 0 (value 1, index 8) */
    float z[32] = {0};
    assert_int_equal(tm_gq_quantize_row(TM_GQ_IQ4_NL, z, 32, out, NULL, &e), TM_OK);
    assert_int_equal(out[0] | out[1], 0);
    for (int j = 0; j < 16; j++) assert_int_equal(out[2 + j], 0x88);
}

/* The SIMD paths (Q8_0, Q4_0 with AVX2) give the scalar specification's bytes: random rows,
** rows of exact .5 ties after scaling, zeros and -0, subnormal blocks, the tie of first/last
** largest magnitude, and an overflowing block (same status, same block). */
static void test_simd_matches_ref(void **state) {
    (void)state;
    enum { N = 4096 };
    static float x[N];
    static uint8_t a[N * 2], b[N * 2];
    uint64_t s = 12345;
    const int types[] = {TM_GQ_Q8_0, TM_GQ_Q4_0, TM_GQ_Q2_K, TM_GQ_Q3_K, TM_GQ_Q4_K, TM_GQ_Q5_K, TM_GQ_Q6_K};
    for (int round = 0; round < 40; round++) {
        for (int i = 0; i < N; i++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            double u = (double)(s >> 11) / 9007199254740992.0 - 0.5;
            switch (round % 5) {
            case 0: x[i] = (float)u; break;
            case 1: x[i] = (float)((int)(u * 64)) * 0.5f; break;          /* k/2: ties after scaling */
            case 2: x[i] = (i % 7) ? 0.0f : (i % 2 ? -0.0f : (float)u);  break;
            case 3: x[i] = (float)u * 1e-39f; break;                     /* subnormal blocks */
            default: x[i] = (i % 32 == 3 || i % 32 == 29) ? ((i / 32) % 2 ? 4.0f : -4.0f) : (float)u; break;
            }
        }
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
            tm_err e1, e2;
            int64_t b1, b2;
            tm_status s1 = tm_gq_quantize_row(types[k], x, N, a, &b1, &e1);
            tm_status s2 = tm_gq_quantize_row_ref(types[k], x, N, b, &b2, &e2);
            assert_int_equal(s1, s2);
            assert_int_equal(b1, b2);
            if (s1 == TM_OK) assert_memory_equal(a, b, (size_t)tm_gq_row_bytes(types[k], N));
        }
    }
    x[1000] = 1e9f; /* block 31 overflows f16 for Q8_0 and Q4_0 */
    for (int k = 0; k < 2; k++) {
        int64_t b1, b2;
        tm_err e1, e2;
        assert_int_equal(tm_gq_quantize_row(types[k], x, N, a, &b1, &e1), TM_E_RANGE);
        assert_int_equal(tm_gq_quantize_row_ref(types[k], x, N, b, &b2, &e2), TM_E_RANGE);
        assert_int_equal(b1, 31);
        assert_int_equal(b2, 31);
        assert_string_equal(e1.msg, e2.msg);
        assert_memory_equal(a, b, 31 * tm_gq_type_size(types[k]));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_vectors),
        cmocka_unit_test(test_subnormal_blocks),
        cmocka_unit_test(test_f16_scale_overflow),
        cmocka_unit_test(test_overflow_all_types),
        cmocka_unit_test(test_arguments),
        cmocka_unit_test(test_iq4_nl_properties),
        cmocka_unit_test(test_simd_matches_ref),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
