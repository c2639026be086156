/* test_gguf_iq.c: the IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, TQ1_0 and TQ2_0 quantizers
** (src/quant/ggml_quant_iq.c) against llama-quantize's outputs in
** ../shared/models/gguf/imatrix (llama.cpp c392e509, README.md there):
**   - tensor level: every tensor of one of these types in each reference file, quantized row by
**     row from synth256-F32.gguf (or stories260K-F32.gguf) with the imatrix entry of its name
**     (values / ncall, as llama-quantize loads it; none for token_embd/output and the runs
**     without imatrix), equals the reference's bytes, and dequantizes to the same floats;
**   - the IQ3 search tables derived from the grids: keys ascending, every off-grid key has a
**     neighbour list whose rows are at the smallest distances;
**   - TQ1_0 (no reference file): round trip of ternary data exact, error bounds on random rows;
**     IQ3_S/IQ3_XXS/IQ4_XS error bounds, imatrix weighting lowers the weighted error.
** The imatrix file is parsed here by the layout its README gives (legacy llama-imatrix .dat). */
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
#include "quant/ggml_traits.h"
#include "tensormorph.h"

/* ---- the legacy imatrix file ------------------------------------------------------------- */

typedef struct imx_entry { char name[128]; int ncall, nval; float *v; } imx_entry;
typedef struct imx { int n; imx_entry *e; } imx;

static int rd_i32(FILE *f, int32_t *v) { return fread(v, 4, 1, f) == 1; }

static void imx_load(const char *path, imx *m) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    int32_t n;
    assert_true(rd_i32(f, &n) && n > 0 && n < 10000);
    m->n = n;
    m->e = calloc((size_t)n, sizeof *m->e);
    for (int i = 0; i < n; i++) {
        int32_t len, ncall, nval;
        assert_true(rd_i32(f, &len) && len > 0 && len < 128);
        assert_int_equal(fread(m->e[i].name, 1, (size_t)len, f), (size_t)len);
        assert_true(rd_i32(f, &ncall) && rd_i32(f, &nval) && nval > 0 && nval < (1 << 20));
        m->e[i].ncall = ncall;
        m->e[i].nval = nval;
        m->e[i].v = malloc((size_t)nval * 4);
        assert_int_equal(fread(m->e[i].v, 4, (size_t)nval, f), (size_t)nval);
        /* llama-quantize divides each value by ncall in float32 when it loads the file */
        if (ncall > 0)
            for (int j = 0; j < nval; j++) m->e[i].v[j] /= ncall;
    }
    fclose(f);
}

static const float *imx_find(const imx *m, const char *name, int nval) {
    for (int i = 0; m && i < m->n; i++)
        if (strcmp(m->e[i].name, name) == 0) {
            assert_int_equal(m->e[i].nval, nval);
            return m->e[i].v;
        }
    return NULL;
}

static void imx_free(imx *m) {
    for (int i = 0; i < m->n; i++) free(m->e[i].v);
    free(m->e);
}

/* ---- tensor-level comparison --------------------------------------------------------------- */

static int is_ours(int type) {
    return type == TM_GGML_IQ4_NL || type == TM_GGML_IQ4_XS || type == TM_GGML_IQ3_XXS ||
           type == TM_GGML_IQ3_S || type == TM_GGML_TQ1_0 || type == TM_GGML_TQ2_0;
}

static char g_path[1024];
static const char *imx_path(const char *leaf) {
    snprintf(g_path, sizeof g_path, "%s/models/gguf/imatrix/%s", tmv_shared_dir(), leaf);
    return g_path;
}

/* Quantize every tensor of ours in reference file `ref` from `src` (with imatrix file `imf`,
** or none) and compare bytes and dequantized values; returns the count per type in counts[]. */
static int compare_file(const char *src_leaf, const char *ref_leaf, const char *imf, int *counts) {
    if (!tmv_require_shared()) return 0;
    char srcp[1024], refp[1024];
    snprintf(srcp, sizeof srcp, "%s", strncmp(src_leaf, "../", 3) == 0
                                          ? (snprintf(g_path, sizeof g_path, "%s/models/gguf/%s", tmv_shared_dir(), src_leaf + 3), g_path)
                                          : imx_path(src_leaf));
    snprintf(refp, sizeof refp, "%s", imx_path(ref_leaf));
    imx m = {0};
    if (imf) imx_load(imx_path(imf), &m);
    tm_err err = {0};
    tm_file *src = NULL, *ref = NULL;
    assert_int_equal(tm_open(srcp, NULL, &src, &err), TM_OK);
    assert_int_equal(tm_open(refp, NULL, &ref, &err), TM_OK);
    int n_ours = 0;
    for (int64_t i = 0; i < tm_file_n_tensors(ref); i++) {
        const tm_tensor *rt = tm_file_tensor(ref, i);
        if (!rt->quant || !is_ours(rt->quant->ggml_type)) continue;
        const int type = rt->quant->ggml_type;
        const int64_t si = tm_file_find(src, rt->name);
        assert_true(si >= 0);
        const tm_tensor *st = tm_file_tensor(src, si);
        const int64_t ne0 = st->shape[st->ndim - 1], rows = st->n_elems / ne0;
        uint64_t rb;
        assert_int_equal(tm_ggml_row_bytes(type, ne0, &rb, &err), TM_OK);
        assert_int_equal(rt->n_bytes, rb * (uint64_t)rows);
        const float *w = imx_find(&m, rt->name, (int)ne0);
        float *x = malloc((size_t)ne0 * 4), *dq = malloc((size_t)ne0 * 4), *dr = malloc((size_t)ne0 * 4);
        uint8_t *q = malloc(rb);
        int64_t bad_rows = 0, first_bad = -1;
        for (int64_t r = 0; r < rows; r++) {
            assert_int_equal(tm_tensor_read_f32(src, si, r * ne0, ne0, x, &err), TM_OK);
            int64_t bb;
            tm_status s = tm_gq_quantize_row_imatrix(type, x, ne0, w, q, &bb, &err);
            if (s) fail_msg("%s: %s row %lld: %s", ref_leaf, rt->name, (long long)r, err.msg);
            const void *rp;
            assert_int_equal(tm_tensor_data(ref, i, rb * (uint64_t)r, rb, &rp, &err), TM_OK);
            if (memcmp(q, rp, rb) != 0) {
                if (first_bad < 0) first_bad = r;
                bad_rows++;
                continue;
            }
            /* same bytes: the same floats back (through our dequantizer, twice) */
            assert_int_equal(tm_ggml_dequantize(type, q, rb, ne0, dq, &err), TM_OK);
            assert_int_equal(tm_ggml_dequantize(type, rp, rb, ne0, dr, &err), TM_OK);
            assert_memory_equal(dq, dr, (size_t)ne0 * 4);
        }
        if (bad_rows)
            fail_msg("%s: tensor %s (%s, imatrix %s): %lld of %lld rows differ, first row %lld", ref_leaf, rt->name,
                     tm_ggml_type_info_get(type)->name, w ? "yes" : "no", (long long)bad_rows, (long long)rows,
                     (long long)first_bad);
        if (counts) counts[type]++;
        n_ours++;
        free(x);
        free(dq);
        free(dr);
        free(q);
    }
    tm_close(src);
    tm_close(ref);
    if (imf) imx_free(&m);
    return n_ours;
}

#define SYNTH "synth256-F32.gguf"

static void test_iq4_nl_imx(void **state) {
    (void)state;
    int c[TM_GGML_TYPE_COUNT] = {0};
    assert_int_equal(compare_file(SYNTH, "synth256-IQ4_NL-imx.gguf", "synth256.imatrix", c), 15);
}
static void test_iq4_nl_plain(void **state) {
    (void)state;
    int c[TM_GGML_TYPE_COUNT] = {0};
    assert_int_equal(compare_file(SYNTH, "synth256-IQ4_NL.gguf", NULL, c), 15);
}
static void test_iq4_xs_imx(void **state) {
    (void)state;
    int c[TM_GGML_TYPE_COUNT] = {0};
    assert_int_equal(compare_file(SYNTH, "synth256-IQ4_XS-imx.gguf", "synth256.imatrix", c), 15);
}
static void test_iq4_xs_plain(void **state) {
    (void)state;
    int c[TM_GGML_TYPE_COUNT] = {0};
    assert_int_equal(compare_file(SYNTH, "synth256-IQ4_XS.gguf", NULL, c), 15);
}
/* IQ3_XXS file: IQ3_XXS x8 (v gate up down), IQ3_S x3 (embd o); q/k are IQ2_S (not ours) */
static void test_iq3_xxs_imx(void **state) {
    (void)state;
    int c[TM_GGML_TYPE_COUNT] = {0};
    assert_int_equal(compare_file(SYNTH, "synth256-IQ3_XXS-imx.gguf", "synth256.imatrix", c), 11);
    assert_int_equal(c[TM_GGML_IQ3_XXS], 8);
    assert_int_equal(c[TM_GGML_IQ3_S], 3);
}
static void test_iq3_xs_imx(void **state) {
    (void)state;
    int c[TM_GGML_TYPE_COUNT] = {0};
    assert_int_equal(compare_file(SYNTH, "synth256-IQ3_XS-imx.gguf", "synth256.imatrix", c), 15);
    assert_int_equal(c[TM_GGML_IQ3_XXS], 6);
    assert_int_equal(c[TM_GGML_IQ3_S], 9);
}
static void test_iq3_s_imx(void **state) {
    (void)state;
    int c[TM_GGML_TYPE_COUNT] = {0};
    assert_int_equal(compare_file(SYNTH, "synth256-IQ3_S-imx.gguf", "synth256.imatrix", c), 15);
}
static void test_tq2_0_imx(void **state) {
    (void)state;
    int c[TM_GGML_TYPE_COUNT] = {0};
    assert_int_equal(compare_file(SYNTH, "synth256-TQ2_0-imx.gguf", "synth256.imatrix", c), 14);
}
/* stories260K TQ2_0 with imatrix: 64/172-wide rows, none a multiple of 256: no TQ2_0 tensor
** (Q4_0 fallbacks, Q8_0, F16); the whole file is checked where the job is (test_gguf_quantize) */
static void test_tq2_0_stories(void **state) {
    (void)state;
    assert_int_equal(compare_file("../stories260K-F32.gguf", "stories260K-TQ2_0-imx.gguf", "stories260K.imatrix", NULL), 0);
}
/* stories260K Q2_K with imatrix: the 30 IQ4_NL fallbacks (64-wide rows) with the imatrix */
static void test_iq4_nl_stories(void **state) {
    (void)state;
    int c[TM_GGML_TYPE_COUNT] = {0};
    assert_int_equal(compare_file("../stories260K-F32.gguf", "stories260K-Q2_K-imx.gguf", "stories260K.imatrix", c), 30);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_iq4_nl_imx),  cmocka_unit_test(test_iq4_nl_plain), cmocka_unit_test(test_iq4_xs_imx),
        cmocka_unit_test(test_iq4_xs_plain), cmocka_unit_test(test_iq3_xxs_imx), cmocka_unit_test(test_iq3_xs_imx),
        cmocka_unit_test(test_iq3_s_imx),   cmocka_unit_test(test_tq2_0_imx),    cmocka_unit_test(test_tq2_0_stories),
        cmocka_unit_test(test_iq4_nl_stories),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
