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

#include "helpers/cli_run.h"
#include "helpers/vectors.h"
#include "quant/ggml_traits.h"
#include "quant/kernels.h"
#include "tensormorph.h"
#include "tensormorph/ggml.h"
#include "tensormorph/ggml_quant.h"
#include "tensormorph/experimental.h"

/* Bytes of a row of n values of type (tm_ggml_row_bytes), 0 when n does not fit the block. */
static uint64_t row_bytes(int type, int64_t n) {
    uint64_t rb = 0;
    return tm_ggml_row_bytes(type, n, &rb, NULL) == TM_OK ? rb : 0;
}

/* Quantize x [rows, n_per_row] row by row into a malloc'd buffer; fails the test on error. */
static uint8_t *quantize_rows(int type, const float *x, int64_t rows, int64_t n_per_row,
                              size_t *n_out) {
    uint64_t rb = row_bytes(type, n_per_row);
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
    size_t bs = tm_ggml_type_info_get(type)->type_size;
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

static int g_gguf_checked, g_gguf_failed; /* cases gguf_case got through; of them, with bytes that differ */

static void gguf_case(const char *name, json_t *cj) {
    json_t *params = json_object_get(cj, "params");
    const char *tname = json_string_value(json_object_get(params, "type"));
    assert_non_null(tname);
    int type = tm_ggml_type_from_name(tname);
    if (!tm_gq_writable(type)) fail_msg("gguf/%s: type %s has no quantizer", name, tname);
    int64_t rows = json_integer_value(json_object_get(params, "rows"));
    int64_t npr = json_integer_value(json_object_get(params, "n_per_row"));
    assert_true(rows > 0 && npr > 0);
    assert_int_equal(tm_ggml_type_info_get(type)->block_size, json_integer_value(json_object_get(params, "block_size")));
    assert_int_equal(tm_ggml_type_info_get(type)->type_size, json_integer_value(json_object_get(params, "type_size")));
    tmv_npy in;
    assert_int_equal(tmv_npy_load_case("gguf", name, "input.npy", &in), 0);
    assert_int_equal(in.n, rows * npr);
    float *x = tmv_npy_as_f32(&in);
    assert_non_null(x);
    assert_string_equal(tmv_output_match(cj, "blocks"), "exact");
    char path[4096];
    tmv_case_path(path, sizeof path, "gguf", name, "expected.bin");
    size_t nw = 0;
    uint8_t *want = (uint8_t *)tmt_read_bytes(path, &nw);
    assert_non_null(want);
    size_t ng = 0;
    uint8_t *got = quantize_rows(type, x, rows, npr, &ng);
    assert_int_equal(ng, nw);
    char what[256];
    snprintf(what, sizeof what, "gguf/%s", name);
    if (compare_blocks(what, type, got, want, nw)) g_gguf_failed++;
    /* The informative FMA build differs: our bytes must not match it where it differs
    ** from the unfused reference (proves no contraction crept in). */
    tmv_case_path(path, sizeof path, "gguf", name, "expected_fma_build.bin");
    size_t nf = 0;
    uint8_t *fma = (uint8_t *)tmt_read_bytes(path, &nf);
    if (fma && nf == nw && memcmp(fma, want, nw) != 0) assert_memory_not_equal(got, fma, nw);
    free(fma);
    g_gguf_checked++;
    free(got);
    free(want);
    free(x);
    tmv_npy_free(&in);
}

static void test_gguf_vectors(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    g_gguf_checked = g_gguf_failed = 0;
    int n = tmv_run_cases("gguf", NULL, gguf_case);
    printf("gguf: %d of %d cases checked byte for byte, %d differ\n", g_gguf_checked, n, g_gguf_failed);
    assert_int_equal(g_gguf_failed, 0);
    assert_int_equal(g_gguf_checked, n);
}

/* spec/gguf_subnormal_blocks: blocks 0-2 all tiny, written as zero blocks; 3-7 as ggml. */
static void test_subnormal_blocks(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    static const struct { int type; const char *file; int zero_code; } t[] = {
        {TM_GGML_Q8_0, "expected_q8_0.bin", 0},  {TM_GGML_Q4_0, "expected_q4_0.bin", 8},
        {TM_GGML_Q4_1, "expected_q4_1.bin", 0},  {TM_GGML_Q5_0, "expected_q5_0.bin", 16},
        {TM_GGML_Q5_1, "expected_q5_1.bin", 0}};
    tmv_npy in;
    assert_int_equal(tmv_npy_load_case("spec", "gguf_subnormal_blocks", "input.npy", &in), 0);
    float *x = tmv_npy_as_f32(&in);
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        char path[4096];
        tmv_case_path(path, sizeof path, "spec", "gguf_subnormal_blocks", t[k].file);
        size_t nw = 0;
        uint8_t *want = (uint8_t *)tmt_read_bytes(path, &nw);
        assert_non_null(want);
        size_t ng = 0;
        uint8_t *got = quantize_rows(t[k].type, x, 1, in.n, &ng);
        assert_int_equal(ng, nw);
        assert_int_equal(compare_blocks(t[k].file, t[k].type, got, want, nw), 0);
        /* the checks in words: blocks 0-2 dequantize to exactly zero (every code the zero code) */
        size_t bs = tm_ggml_type_info_get(t[k].type)->type_size;
        for (int b = 0; b < 3; b++) {
            const uint8_t *blk = got + b * bs;
            uint16_t d = (uint16_t)(blk[0] | blk[1] << 8);
            assert_true((d & 0x7fff) == 0);
            if (t[k].type == TM_GGML_Q8_0)
                for (int j = 0; j < 32; j++) assert_int_equal(blk[2 + j], 0);
            if (t[k].type == TM_GGML_Q4_0)
                for (int j = 0; j < 16; j++) assert_int_equal(blk[2 + j], 0x88);
            if (t[k].type == TM_GGML_Q5_0) {
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
    size_t bs = tm_ggml_type_info_get(type)->type_size;
    int64_t nb = npr / tm_ggml_type_info_get(type)->block_size;
    assert_int_equal((int64_t)ref.n, rows * nb * (int64_t)bs);
    int n_refused = 0;
    uint8_t *out = malloc((size_t)row_bytes(type, npr));
    for (int64_t r = 0; r < rows; r++) {
        int64_t first_inf = -1; /* first block of the row with an f16 inf d (or m) */
        for (int64_t b = 0; b < nb && first_inf < 0; b++) {
            const uint8_t *blk = rb + (r * nb + b) * (int64_t)bs;
            int nf = type == TM_GGML_Q4_1 ? 2 : 1;
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
    check_overflow("gguf_q8_0_f16_scale_overflow", TM_GGML_Q8_0, 0);
    check_overflow("gguf_q4_1_f16_scale_overflow", TM_GGML_Q4_1, 1);
}

/* Every quantizer: f16 overflow is refused for every type, not just the legacy ones. */
static void test_overflow_all_types(void **state) {
    (void)state;
    static const int types[] = {TM_GGML_Q4_0, TM_GGML_Q4_1, TM_GGML_Q5_0, TM_GGML_Q5_1, TM_GGML_Q8_0,
                                TM_GGML_IQ4_NL, TM_GGML_Q2_K, TM_GGML_Q3_K, TM_GGML_Q4_K, TM_GGML_Q5_K,
                                TM_GGML_Q6_K, TM_GGML_F16};
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
        if (st != TM_E_RANGE) fail_msg("%s: status %d (%s)", tm_ggml_type_info_get(types[k])->name, st, e.msg);
        int bs = tm_ggml_type_info_get(types[k])->block_size;
        assert_true(bad * bs >= 256 && bad * bs < 512);
    }
}

static void test_arguments(void **state) {
    (void)state;
    float x[256] = {0};
    uint8_t out[1024];
    tm_err e;
    int64_t bad;
    assert_int_equal(tm_gq_quantize_row(TM_GGML_Q4_K, x, 128, out, &bad, &e), TM_E_INVALID_ARG);
    assert_non_null(strstr(e.msg, "multiple"));
    assert_int_equal(tm_gq_quantize_row(TM_GGML_Q8_0, x, 33, out, &bad, &e), TM_E_INVALID_ARG);
    assert_int_equal(tm_gq_quantize_row(99, x, 32, out, &bad, &e), TM_E_INVALID_ARG);
    x[40] = NAN;
    assert_int_equal(tm_gq_quantize_row(TM_GGML_Q8_0, x, 64, out, &bad, &e), TM_E_NONFINITE);
    assert_int_equal(bad, 1);
    assert_non_null(strstr(e.msg, "NaN"));
    x[40] = -INFINITY;
    assert_int_equal(tm_gq_quantize_row(TM_GGML_Q6_K, x, 256, out, &bad, &e), TM_E_NONFINITE);
    assert_int_equal(bad, 0);
    /* names and sizes: the one type table */
    assert_int_equal(tm_ggml_type_from_name("q4_k"), TM_GGML_Q4_K);
    assert_int_equal(tm_ggml_type_from_name("IQ4_NL"), TM_GGML_IQ4_NL);
    assert_int_equal(tm_ggml_type_from_name("Q4_K_M"), -1);
    assert_string_equal(tm_ggml_type_info_get(TM_GGML_Q5_1)->name, "Q5_1");
    assert_int_equal(row_bytes(TM_GGML_Q6_K, 512), 420);
    assert_int_equal(row_bytes(TM_GGML_Q6_K, 500), 0);
    assert_int_equal(row_bytes(TM_GGML_F16, 3), 6);
    assert_true(tm_gq_writable(TM_GGML_Q4_K) && tm_gq_writable(TM_GGML_BF16));
    assert_false(tm_gq_writable(TM_GGML_Q8_K) || tm_gq_writable(TM_GGML_Q8_1) || tm_gq_writable(4) ||
                 tm_gq_writable(-1) || tm_gq_writable(TM_GGML_TYPE_COUNT));
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
    assert_int_equal(tm_gq_quantize_row(TM_GGML_IQ4_NL, x, 64, out, NULL, &e), TM_OK);
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
    assert_int_equal(tm_gq_quantize_row(TM_GGML_IQ4_NL, z, 32, out, NULL, &e), TM_OK);
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
    const int types[] = {TM_GGML_Q8_0, TM_GGML_Q4_0, TM_GGML_Q2_K, TM_GGML_Q3_K, TM_GGML_Q4_K, TM_GGML_Q5_K, TM_GGML_Q6_K};
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
            if (s1 == TM_OK) assert_memory_equal(a, b, (size_t)row_bytes(types[k], N));
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
        assert_memory_equal(a, b, 31 * tm_ggml_type_info_get(types[k])->type_size);
    }
}

/* ---- error sums measured while quantizing (tm__gq_quantize_row_err, the GGUF job's) ------- */

static uint64_t xs_state = 88172645463325252ull;
static uint64_t xs(void) {
    xs_state ^= xs_state << 13;
    xs_state ^= xs_state >> 7;
    xs_state ^= xs_state << 17;
    return xs_state;
}
static double unit(void) { return (double)(xs() >> 11) / 9007199254740992.0 - 0.5; }

/* The job's former err_sums, written out independently: lane k = index % 8 over the values
** before the last multiple of 8, the rest in order into the tail, then tail + lanes 0..7. */
static void err_spec(const float *x, const float *dq, int64_t n, double out[3]) {
    double ax[8] = {0}, ae[8] = {0}, am[8] = {0}, tx = 0, te = 0, tm = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            double xv = x[i + k], e = xv - (double)dq[i + k];
            ax[k] += xv * xv;
            ae[k] += e * e;
            am[k] = fabs(e) > am[k] ? fabs(e) : am[k];
        }
    for (; i < n; i++) {
        double xv = x[i], e = xv - (double)dq[i];
        tx += xv * xv;
        te += e * e;
        tm = fabs(e) > tm ? fabs(e) : tm;
    }
    for (int k = 0; k < 8; k++) {
        tx += ax[k];
        te += ae[k];
        tm = am[k] > tm ? am[k] : tm;
    }
    out[0] = tx;
    out[1] = te;
    out[2] = tm;
}

/* Fill x[n] with one of the data kinds below (kind 0-11). */
static void fill(float *x, int64_t n, int kind) {
    for (int64_t i = 0; i < n; i++) {
        double u = unit();
        switch (kind) {
        case 0: x[i] = (float)u; break;                                   /* uniform */
        case 1: x[i] = (float)((int)(u * 64)) * 0.5f; break;              /* ties after scaling */
        case 2: x[i] = (i % 7) ? 0.0f : (i % 2 ? -0.0f : (float)u); break; /* mostly zeros, -0 */
        case 3: x[i] = (float)u * 1e-39f; break;                          /* subnormal blocks */
        case 4: x[i] = (float)u * 1e-6f; break;                           /* d underflows f16 */
        case 5: x[i] = 0.25f; break;                                      /* constant */
        case 6: x[i] = (i / 32) % 3 == 0 ? 0.0f : (float)(u * 1000); break; /* zero blocks */
        case 7: x[i] = (float)(u * 8e6); break;                           /* d near f16's top */
        case 8: x[i] = (i % 32 == 3 || i % 32 == 29) ? ((i / 32) % 2 ? 4.0f : -4.0f) : (float)u; break;
        case 9: x[i] = (float)(u * u * u * 50); break;                    /* heavy tails */
        case 10: x[i] = (i % 32 == 0) ? -(float)(i + 1) : (float)u * (float)(i % 5); break;
        default: x[i] = (float)(u * 1e-5) + (i % 3 ? 1e-7f : -3e-8f); break;
        }
    }
}

/* The SIMD path (the "auto" kernel set: Q8_0/Q4_0/Q6_K measure the error inside the AVX2 kernel,
** other types dequantize and add in AVX2 lanes) against the scalar reference (the "ref" set), and
** both against
** err_spec over a dequantization of the reference bytes: bytes, status, block and the error
** accumulator bit for bit, on rows of 1..40 blocks (block counts that are not a multiple of the
** kernels' 8 blocks) added to one accumulator in several calls. */
static void test_err_fused_matches_ref(void **state) {
    (void)state;
    enum { MAXN = 40 * 256 };
    static float x[MAXN], dq[MAXN], dq2[MAXN];
    static uint8_t a[MAXN * 2], b[MAXN * 2];
    const int types[] = {TM_GGML_Q8_0, TM_GGML_Q4_0, TM_GGML_Q4_1, TM_GGML_Q5_0, TM_GGML_Q5_1, TM_GGML_Q6_K,
                         TM_GGML_Q4_K, TM_GGML_F16, TM_GGML_IQ4_NL};
    int checked = 0;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const int type = types[k];
        const int blk = tm_ggml_type_info_get(type)->block_size > 1 ? (int)tm_ggml_type_info_get(type)->block_size : 8;
        for (int kind = 0; kind < 12; kind++) {
            for (int nb = 1; nb <= 40; nb += tm_ggml_type_info_get(type)->block_size == 32 ? 1 : 13) {
                const int64_t n = (int64_t)nb * blk;
                fill(x, n, kind);
                /* three calls: two lane-aligned pieces and the rest */
                int64_t cut1 = (n / 3) / blk * blk, cut2 = (2 * n / 3) / blk * blk;
                if (type == TM_GGML_F16) { cut1 = cut1 / 8 * 8; cut2 = cut2 / 8 * 8; }
                tm__gq_err e1, e2;
                memset(&e1, 0, sizeof e1);
                memset(&e2, 0, sizeof e2);
                const int64_t cuts[4] = {0, cut1, cut2, n};
                size_t rb = 0;
                tm_status s1 = TM_OK, s2 = TM_OK;
                for (int c = 0; c < 3 && !s1 && !s2; c++) {
                    const int64_t m = cuts[c + 1] - cuts[c];
                    const size_t off = (size_t)row_bytes(type, cuts[c]);
                    int64_t b1, b2;
                    tm_err er1, er2;
                    s1 = tm__gq_quantize_row_err(type, x + cuts[c], m, NULL, 0, a + off, dq, &e1, &b1, NULL, &er1);
                    s2 = tm__gq_quantize_row_err(type, x + cuts[c], m, NULL, 0, b + off, dq, &e2, &b2, &tm__kernels_ref, &er2);
                    assert_int_equal(s1, s2);
                    assert_int_equal(b1, b2);
                    if (s1) assert_string_equal(er1.msg, er2.msg);
                    rb = off + (size_t)row_bytes(type, m);
                }
                if (s1) continue; /* kind 7 may overflow f16 in Q4_K's d: checked above */
                assert_memory_equal(a, b, rb);
                assert_memory_equal(&e1, &e2, sizeof e1);
                /* the reference equals err_spec over the whole row */
                tm_err er;
                assert_int_equal(tm_ggml_dequantize(type, b, rb, n, dq2, &er), TM_OK);
                double want[3], got[3];
                err_spec(x, dq2, n, want);
                tm__gq_err_total(&e1, &got[0], &got[1], &got[2]);
                assert_memory_equal(got, want, sizeof want);
                checked++;
            }
        }
    }
    /* a row whose length is not a multiple of 8 (F16 output): the tail in the last call */
    fill(x, 1003, 0);
    for (int simd = 0; simd < 2; simd++) {
        const tm_kernels *ks = simd ? NULL : &tm__kernels_ref;
        tm__gq_err e;
        memset(&e, 0, sizeof e);
        tm_err er;
        assert_int_equal(tm__gq_quantize_row_err(TM_GGML_F16, x, 1000, NULL, 0, a, dq, &e, NULL, ks, &er), TM_OK);
        assert_int_equal(tm__gq_quantize_row_err(TM_GGML_F16, x + 1000, 3, NULL, 0, a + 2000, dq, &e, NULL, ks, &er), TM_OK);
        assert_int_equal(tm_ggml_dequantize(TM_GGML_F16, a, 2006, 1003, dq2, &er), TM_OK);
        double want[3], got[3];
        err_spec(x, dq2, 1003, want);
        tm__gq_err_total(&e, &got[0], &got[1], &got[2]);
        assert_memory_equal(got, want, sizeof want);
    }
    printf("fused error sums: %d rows checked\n", checked);
}

/* The K-quant AVX2 kernels (the Q3_K search on 16 sub-blocks, Q3_K's final codes and packing)
** against the scalar code, with and without an importance matrix: every data kind of fill(),
** rows of 1 to 16 super-blocks, same status, block and bytes. */
static void test_k_simd_imatrix_matches_ref(void **state) {
    (void)state;
    enum { MAXN = 16 * 256 };
    static float x[MAXN], qw[MAXN], dq[MAXN];
    static uint8_t a[MAXN * 2], b[MAXN * 2];
    const int types[] = {TM_GGML_Q2_K, TM_GGML_Q3_K, TM_GGML_Q4_K, TM_GGML_Q5_K, TM_GGML_Q6_K};
    int checked = 0;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        for (int kind = 0; kind < 12; kind++)
            for (int nb = 1; nb <= 16; nb += 5)
                for (int with = 0; with < 2; with++) {
                    const int64_t n = (int64_t)nb * 256;
                    fill(x, n, kind);
                    for (int64_t i = 0; i < n; i++) qw[i] = (float)(unit() + 0.5) * (i % 11 ? 1.0f : 1e-3f);
                    int64_t b1 = -1, b2 = -1;
                    tm_err e1, e2;
                    tm_status s1 = tm__gq_quantize_row_err(types[k], x, n, with ? qw : NULL, n, a, dq, NULL, &b1, NULL, &e1);
                    tm_status s2 = tm__gq_quantize_row_err(types[k], x, n, with ? qw : NULL, n, b, dq, NULL, &b2,
                                                           &tm__kernels_ref, &e2);
                    assert_int_equal(s1, s2);
                    assert_int_equal(b1, b2);
                    if (s1 == TM_OK) {
                        assert_memory_equal(a, b, (size_t)row_bytes(types[k], n));
                        checked++;
                    }
                }
    assert_true(checked > 400); /* of 480: a few kinds overflow f16 */
    printf("K-quant SIMD vs scalar: %d rows checked\n", checked);
}

/* fill()'s kinds, then the legacy kernels' edge cases: 12 signed zeros in random order (the
** scalar's min / max keep the first zero's sign), 13 values <= 0 with zeros (a zero max), 14
** spans that overflow f16's d, 15 a min that overflows f16 while d fits, 16 deep subnormals,
** 17 a constant per block, 18 one huge value in a block of tiny ones. */
static void fill_legacy(float *x, int64_t n, int kind) {
    if (kind < 12) {
        fill(x, n, kind);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        const double u = unit();
        const int blk = (int)(i / 32);
        switch (kind) {
        case 12: x[i] = (xs() & 3) == 0 ? (float)u * (blk % 3 ? 1.0f : 0.0f) : ((xs() & 1) ? 0.0f : -0.0f); break;
        case 13: x[i] = (xs() & 1) ? -(float)(u * u) : ((xs() & 1) ? 0.0f : -0.0f); break;
        case 14: x[i] = (float)u * (blk % 5 == 3 ? 3e6f : 1.0f); break;
        case 15: x[i] = (blk % 4 == 1 ? -70000.0f : 0.0f) + (float)u; break;
        case 16: x[i] = (float)u * 1e-44f; break;
        case 17: x[i] = (float)(blk - 20) * 0.37f; break;
        default: x[i] = (i % 32 == (i / 32) % 32) ? (float)u * 1e4f : (float)u * 1e-30f; break;
        }
    }
}

/* The legacy AVX2 kernels (Q4_1 / Q5_0 / Q5_1 eight blocks at a time, the imatrix weights and
** searches of all four, Q4_0 / Q8_0's fused kernels) against the scalar reference, with and
** without an importance matrix (one row, and 3 rows sharing it): every kind of fill_legacy,
** 1..40 blocks (not multiples of 8 too); same status, block, message and bytes (up to the
** failing block). */
static void test_legacy_simd_matches_ref(void **state) {
    (void)state;
    enum { MAXN = 3 * 40 * 32 };
    static float x[MAXN], qw[MAXN], dq[MAXN];
    static uint8_t a[MAXN * 2], b[MAXN * 2];
    const int types[] = {TM_GGML_Q4_0, TM_GGML_Q4_1, TM_GGML_Q5_0, TM_GGML_Q5_1, TM_GGML_Q8_0};
    int checked = 0, failed = 0;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++)
        for (int kind = 0; kind < 19; kind++)
            for (int nb = 1; nb <= 40; nb += (nb < 17 ? 1 : 7))
                for (int with = 0; with < 3; with++) {
                    const int rows = with == 2 ? 3 : 1;
                    const int64_t n_row = (int64_t)nb * 32, n = rows * n_row;
                    fill_legacy(x, n, kind);
                    for (int64_t i = 0; i < n_row; i++) qw[i] = (float)(unit() + 0.5) * (i % 11 ? 1.0f : 1e-3f);
                    int64_t b1 = -1, b2 = -1;
                    tm_err e1, e2;
                    memset(&e1, 0, sizeof e1);
                    memset(&e2, 0, sizeof e2);
                    memset(a, 0, sizeof a);
                    memset(b, 0, sizeof b);
                    const float *w = with ? qw : NULL;
                    tm_status s1 = tm__gq_quantize_row_err(types[k], x, n, w, n_row, a, dq, NULL, &b1, NULL, &e1);
                    tm_status s2 = tm__gq_quantize_row_err(types[k], x, n, w, n_row, b, dq, NULL, &b2, &tm__kernels_ref, &e2);
                    assert_int_equal(s1, s2);
                    assert_int_equal(b1, b2);
                    if (s1 == TM_OK) {
                        if (memcmp(a, b, (size_t)row_bytes(types[k], n)) != 0)
                            fail_msg("%s kind %d nb %d imatrix %d: SIMD and scalar bytes differ",
                                     tm_ggml_type_info_get(types[k])->name, kind, nb, with);
                        checked++;
                    } else {
                        assert_string_equal(e1.msg, e2.msg);
                        assert_memory_equal(a, b, (size_t)b1 * tm_ggml_type_info_get(types[k])->type_size);
                        failed++;
                    }
                }
    assert_true(checked > 4800); /* of 5700: kinds 14, 15 (and 7 for Q4_1/Q5_1) fail by design */
    assert_true(failed > 400);
    printf("legacy SIMD vs scalar: %d rows equal, %d failing rows equal\n", checked, failed);
}

/* NaN / inf / an f16-overflowing block anywhere in a row, with and without an accumulator:
** the SIMD path gives the reference's status, block, message and bytes before the block. */
static void test_simd_nonfinite_and_overflow(void **state) {
    (void)state;
    enum { NB = 37, N = NB * 32 };
    static float x[N], dq[N];
    static uint8_t a[N * 2], b[N * 2];
    const float bad[] = {NAN, -NAN, INFINITY, -INFINITY, 1e9f, -3e8f};
    const int types[] = {TM_GGML_Q8_0, TM_GGML_Q4_0, TM_GGML_Q4_1, TM_GGML_Q5_0, TM_GGML_Q5_1};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (size_t v = 0; v < sizeof bad / sizeof bad[0]; v++)
            for (int pos = 0; pos < N; pos += 97)
                for (int with_acc = 0; with_acc < 2; with_acc++) {
                    fill(x, N, 0);
                    x[pos] = bad[v];
                    if (pos % 2) x[(pos * 7) % N] = 2e9f; /* a second bad block, before or after */
                    tm__gq_err e1, e2;
                    memset(&e1, 0, sizeof e1);
                    memset(&e2, 0, sizeof e2);
                    memset(a, 0, sizeof a);
                    memset(b, 0, sizeof b);
                    int64_t b1, b2;
                    tm_err er1, er2;
                    tm_status s1 = with_acc ? tm__gq_quantize_row_err(types[t], x, N, NULL, 0, a, dq, &e1, &b1, NULL, &er1)
                                            : tm_gq_quantize_row(types[t], x, N, a, &b1, &er1);
                    tm_status s2 = with_acc ? tm__gq_quantize_row_err(types[t], x, N, NULL, 0, b, dq, &e2, &b2, &tm__kernels_ref, &er2)
                                            : tm_gq_quantize_row_ref(types[t], x, N, b, &b2, &er2);
                    assert_true(s1 != TM_OK);
                    assert_int_equal(s1, s2);
                    assert_int_equal(b1, b2);
                    assert_string_equal(er1.msg, er2.msg);
                    if (s1 == TM_E_RANGE) assert_memory_equal(a, b, (size_t)b1 * tm_ggml_type_info_get(types[t])->type_size);
                }
}

/* The f16 scale through F16C (the kernels) and through tm_f32_to_f16 (the reference): a Q4_0
** block whose largest value is -8 t has d = t exactly (a division by a power of two), so blocks
** with t over a large sample of float32 patterns (every exponent, f16's subnormal and overflow
** boundaries pattern by pattern, random patterns) compare the two conversions bit for bit. */
static void test_f16c_scale_matches_ref(void **state) {
    (void)state;
    enum { NB = 1024 };
    static float x[NB * 32];
    static uint8_t a[NB * 18], b[NB * 18];
    static float t[NB];
    int64_t total = 0;
    for (int round = 0; round < 2400; round++) {
        for (int k = 0; k < NB; k++) {
            uint32_t u;
            if (round < 800) u = 0x30000000u + (uint32_t)(round * NB + k) * 491u; /* 2^-31 .. 2^17, strided */
            else if (round < 1000) u = 0x33000000u - 4096u + (uint32_t)((round - 800) * NB + k); /* 2^-25 */
            else if (round < 1200) u = 0x387fc000u + (uint32_t)((round - 1000) * NB + k); /* 2^-14 */
            else if (round < 1300) u = 0x477fe000u - 16384u + (uint32_t)((round - 1200) * NB + k); /* 65504..65520 */
            else u = (uint32_t)(xs() & 0x7fffffffu) % 0x47800000u; /* random up to 65536 */
            memcpy(&t[k], &u, 4);
            if (t[k] > 2e37f || t[k] < 1e-37f) t[k] = 1.0f; /* -8 t must be finite and normal */
            for (int j = 0; j < 32; j++) x[k * 32 + j] = (float)unit() * t[k];
            x[k * 32 + (k % 32)] = -8.0f * t[k];
        }
        /* rows of 1 block so an overflowing block stops only itself */
        for (int k = 0; k < NB; k++) {
            int64_t b1, b2;
            tm_err e1, e2;
            tm_status s1 = tm_gq_quantize_row(TM_GGML_Q4_0, x + k * 32, 32, a + k * 18, &b1, &e1);
            tm_status s2 = tm_gq_quantize_row_ref(TM_GGML_Q4_0, x + k * 32, 32, b + k * 18, &b2, &e2);
            assert_int_equal(s1, s2);
            if (s1 == TM_OK) {
                if (memcmp(a + k * 18, b + k * 18, 18) != 0)
                    fail_msg("t = %a: simd and reference Q4_0 blocks differ", (double)t[k]);
                uint16_t h = (uint16_t)(a[k * 18] | a[k * 18 + 1] << 8);
                if (h != tm_f32_to_f16(-t[k] * -1.0f)) fail_msg("t = %a: d %04x", (double)t[k], h);
            }
            total++;
        }
    }
    printf("f16 scales: %lld blocks compared\n", (long long)total);
}

/* F16 sources are widened by tm_convert_to_f32 (F16C where the CPU has it): every start offset
** and ragged length (tails shorter than a vector), random patterns with every NaN kind, equal to
** the scalar tm_f16_to_f32 bit for bit. */
static void test_f16_widening_ragged(void **state) {
    (void)state;
    enum { N = 4096 };
    static uint16_t h[N + 8];
    static float f[N + 8];
    for (int i = 0; i < N + 8; i++) {
        uint16_t v = (uint16_t)xs();
        if (i % 11 == 0) v = (uint16_t)(0x7c00u | (v & 0x83ffu)); /* inf / NaN, both signs */
        if (i % 13 == 0) v = (uint16_t)(v & 0x83ffu);             /* subnormal / zero */
        h[i] = v;
    }
    for (int off = 0; off < 8; off++)
        for (int n = 0; n < 80; n += (n < 20 ? 1 : 7)) {
            memset(f, 0xa5, sizeof f);
            assert_int_equal(tm_convert_to_f32(TM_F16, h + off, n, f), TM_OK);
            for (int i = 0; i < n; i++) {
                float r = tm_f16_to_f32(h[off + i]);
                if (memcmp(&r, &f[i], 4) != 0) fail_msg("off %d n %d i %d: half %04x", off, n, i, h[off + i]);
            }
            uint32_t guard;
            memcpy(&guard, &f[n], 4);
            assert_int_equal(guard, 0xa5a5a5a5u); /* nothing written past n */
        }
    assert_int_equal(tm_convert_to_f32(TM_F16, h, N, f), TM_OK);
    for (int i = 0; i < N; i++) {
        float r = tm_f16_to_f32(h[i]);
        assert_memory_equal(&r, &f[i], 4);
    }
}

/* ---- the one type table (src/quant/ggml_traits.h) ----------------------------------------- */

/* Every id's row: the public facts are the table's (same pointer), the id matches the index, a
** block type has a dequantizer, a SIMD column only beside a reference quantizer, and the
** writable ids are exactly the twenty-four of tensormorph/ggml_quant.h. */
static void test_type_table(void **state) {
    (void)state;
    static const int writable[] = {TM_GGML_F32, TM_GGML_F16, TM_GGML_BF16, TM_GGML_Q4_0, TM_GGML_Q4_1,
                                   TM_GGML_Q5_0, TM_GGML_Q5_1, TM_GGML_Q8_0, TM_GGML_IQ4_NL, TM_GGML_Q2_K,
                                   TM_GGML_Q3_K, TM_GGML_Q4_K, TM_GGML_Q5_K, TM_GGML_Q6_K, TM_GGML_IQ4_XS,
                                   TM_GGML_IQ3_XXS, TM_GGML_IQ3_S, TM_GGML_TQ1_0, TM_GGML_TQ2_0,
                                   TM_GGML_IQ2_XXS, TM_GGML_IQ2_XS, TM_GGML_IQ2_S, TM_GGML_IQ1_S, TM_GGML_IQ1_M};
    int n_named = 0, n_writable = 0;
    for (int id = -1; id <= TM_GGML_TYPE_COUNT; id++) {
        const tm__ggml_traits *t = tm__ggml_traits_of(id);
        const tm_ggml_type_info *info = tm_ggml_type_info_get(id);
        if (!t) {
            assert_null(info);
            assert_false(tm_gq_writable(id));
            continue;
        }
        n_named++;
        assert_ptr_equal(info, &t->info);
        assert_int_equal(t->info.id, id);
        assert_int_equal(tm_ggml_type_from_name(t->info.name), id);
        assert_int_equal(t->info.is_quantized, t->dequantize != NULL);
        if (t->quantize_simd || t->quantize_err) assert_non_null(t->quantize_ref);
        int want = 0;
        for (size_t k = 0; k < sizeof writable / sizeof writable[0]; k++) want |= writable[k] == id;
        assert_int_equal(tm_gq_writable(id), want);
        n_writable += want;
    }
    assert_int_equal(n_named, 31); /* 39 ids less the removed 4, 5, 31-33, 36-38 */
    assert_int_equal(n_writable, 24);
    assert_null(tm__ggml_traits_of(4));
    assert_null(tm__ggml_traits_of(36));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_gguf_vectors),
        cmocka_unit_test(test_subnormal_blocks),
        cmocka_unit_test(test_f16_scale_overflow),
        cmocka_unit_test(test_overflow_all_types),
        cmocka_unit_test(test_arguments),
        cmocka_unit_test(test_iq4_nl_properties),
        cmocka_unit_test(test_simd_matches_ref),
        cmocka_unit_test(test_err_fused_matches_ref),
        cmocka_unit_test(test_k_simd_imatrix_matches_ref),
        cmocka_unit_test(test_legacy_simd_matches_ref),
        cmocka_unit_test(test_simd_nonfinite_and_overflow),
        cmocka_unit_test(test_f16c_scale_matches_ref),
        cmocka_unit_test(test_f16_widening_ragged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
