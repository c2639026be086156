/* test_gguf_iq2.c: the IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M quantizers with an importance
** matrix against llama-quantize (llama.cpp c392e509) outputs in
** ../shared/models/gguf/imatrix (README.md there: commands, logs, sha256):
**   - kernel level: every tensor of one of these types in synth256-{IQ2_XXS,IQ2_XS,IQ2_S,IQ1_S,
**     IQ1_M}-imx.gguf, synth256-IQ2_XS-imx-leave-output.gguf and
**     synth256-IQ2_XS-imx-q8out-q8embd.gguf, quantized from synth256-F32.gguf with the tensor's
**     entry of synth256.imatrix (values / ncall, as llama-quantize loads them), byte for byte;
**   - the search tables: key map and neighbour-list facts of the rule (ggml_quant_iq2.h);
**   - refusals: the types that need weights refuse without them.
** The imatrix is read by a small local reader of the legacy format (count, then per entry
** name length, name, ncall, nval, nval float32). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/vectors.h"
#include "quant/ggml_quant_iq2.h"
#include "quant/ggml_traits.h"
#include "tensormorph.h"
#include "tensormorph/ggml.h"
#include "tensormorph/ggml_quant.h"

/* ---- a minimal legacy imatrix reader -------------------------------------------------------- */

typedef struct imx_entry {
    char name[128];
    int32_t nval;
    float *v; /* values / ncall */
} imx_entry;

typedef struct imx {
    int n;
    imx_entry e[64];
} imx;

static int rd(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

static int imx_load(const char *path, imx *m) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    int32_t n;
    int ok = rd(f, &n, 4) && n > 0 && n <= 64;
    m->n = 0;
    for (int i = 0; ok && i < n; i++) {
        int32_t len, ncall, nval;
        imx_entry *e = &m->e[i];
        ok = rd(f, &len, 4) && len > 0 && len < (int32_t)sizeof e->name && rd(f, e->name, (size_t)len);
        if (!ok) break;
        e->name[len] = 0;
        ok = rd(f, &ncall, 4) && rd(f, &nval, 4) && nval > 0 && nval <= 1 << 20;
        if (!ok) break;
        e->nval = nval;
        e->v = malloc((size_t)nval * sizeof(float));
        ok = e->v && rd(f, e->v, (size_t)nval * sizeof(float));
        if (ok && ncall > 0)
            for (int j = 0; j < nval; j++) e->v[j] /= (float)ncall;
        m->n = i + 1;
    }
    fclose(f);
    return ok;
}

static void imx_free(imx *m) {
    for (int i = 0; i < m->n; i++) free(m->e[i].v);
    m->n = 0;
}

static const imx_entry *imx_find(const imx *m, const char *name) {
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->e[i].name, name) == 0) return &m->e[i];
    return NULL;
}

/* ---- helpers ---------------------------------------------------------------------------------- */

static char g_dir[1024];
static imx g_imx;
static tm_file *g_src;

static int setup(void **state) {
    (void)state;
    const char *sh = tmv_shared_dir();
    if (!sh) return 0;
    snprintf(g_dir, sizeof g_dir, "%s/models/gguf/imatrix", sh);
    char p[1200];
    snprintf(p, sizeof p, "%s/synth256.imatrix", g_dir);
    if (!imx_load(p, &g_imx)) return 0;
    snprintf(p, sizeof p, "%s/synth256-F32.gguf", g_dir);
    tm_err err;
    if (tm_open(p, NULL, &g_src, &err)) g_src = NULL;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    imx_free(&g_imx);
    tm_close(g_src);
    return 0;
}

static int need_data(void) {
    if (!tmv_require_shared()) return 0;
    if (!g_src || g_imx.n != 14) {
        fail_msg("%s: synth256-F32.gguf or synth256.imatrix missing or unreadable", g_dir);
        return 0;
    }
    return 1;
}

static int my_type(int ty) {
    return ty == TM_GGML_IQ2_XXS || ty == TM_GGML_IQ2_XS || ty == TM_GGML_IQ2_S ||
           ty == TM_GGML_IQ1_S || ty == TM_GGML_IQ1_M;
}

/* Quantize source tensor `name` (rows of ncol) as type ty with weights w (NULL: none) into a
** malloc'd buffer of *nbytes. */
static uint8_t *quantize_tensor(const char *name, int ty, const float *w, uint64_t *nbytes) {
    const int64_t i = tm_file_find(g_src, name);
    assert_true(i >= 0);
    const tm_tensor *t = tm_file_tensor(g_src, i);
    const int64_t ncol = t->shape[t->ndim - 1], nrow = t->n_elems / ncol;
    const tm_ggml_type_info *ti = tm_ggml_type_info_get(ty);
    uint64_t rb;
    tm_err err;
    assert_int_equal(tm_ggml_row_bytes(ty, ncol, &rb, &err), TM_OK);
    float *x = malloc((size_t)t->n_elems * sizeof(float));
    uint8_t *y = malloc((size_t)(rb * (uint64_t)nrow));
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(tm_tensor_read_f32(g_src, i, 0, t->n_elems, x, &err), TM_OK);
    for (int64_t r = 0; r < nrow; r++) {
        int64_t bad = 0;
        tm_status s = w ? tm_gq_quantize_row_imatrix(ty, x + r * ncol, ncol, w, y + (uint64_t)r * rb, &bad, &err)
                        : tm_gq_quantize_row(ty, x + r * ncol, ncol, y + (uint64_t)r * rb, &bad, &err);
        if (s) fail_msg("%s row %lld as %s: %s", name, (long long)r, ti->name, err.msg);
    }
    free(x);
    *nbytes = rb * (uint64_t)nrow;
    return y;
}

/* Every tensor of an IQ1/IQ2 type in reference file `leaf`: the same bytes from synth256-F32
** with its imatrix entry. Returns how many tensors were checked. */
static int check_file(const char *leaf, int expect_n) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", g_dir, leaf);
    tm_file *ref = NULL;
    tm_err err;
    if (tm_open(p, NULL, &ref, &err)) fail_msg("%s: %s", p, err.msg);
    int checked = 0;
    for (int64_t i = 0; i < tm_file_n_tensors(ref); i++) {
        const tm_tensor *t = tm_file_tensor(ref, i);
        const int ty = t->quant ? t->quant->ggml_type : 0;
        if (!my_type(ty)) continue;
        const imx_entry *e = imx_find(&g_imx, t->name);
        if (!e) fail_msg("%s: %s has no imatrix entry", leaf, t->name);
        assert_int_equal(e->nval, t->shape[t->ndim - 1]);
        uint64_t nb;
        uint8_t *y = quantize_tensor(t->name, ty, e->v, &nb);
        const void *rb;
        assert_int_equal(t->n_bytes, nb);
        assert_int_equal(tm_tensor_data(ref, i, 0, nb, &rb, &err), TM_OK);
        if (memcmp(y, rb, nb) != 0) {
            uint64_t k = 0;
            while (((const uint8_t *)rb)[k] == y[k]) k++;
            const tm_ggml_type_info *ti = tm_ggml_type_info_get(ty);
            fail_msg("%s: %s (%s) differs from byte %llu (block %llu): ours 0x%02x, llama.cpp 0x%02x",
                     leaf, t->name, ti->name, (unsigned long long)k,
                     (unsigned long long)(k / ti->type_size), y[k], ((const uint8_t *)rb)[k]);
        }
        free(y);
        checked++;
    }
    tm_close(ref);
    assert_int_equal(checked, expect_n);
    return checked;
}

/* ---- tests -------------------------------------------------------------------------------------- */

static void test_tables(void **state) {
    (void)state;
    /* the grids' keys map to their indices; an off-grid key lists the nearest grid points */
    static const int ngrid[4] = {256, 512, 1024, 2048};
    for (int g = 0; g < 4; g++) {
        const tm__iq2_tab *t = tm__iq2_tab_get(g);
        assert_non_null(t);
        assert_int_equal(t->ngrid, ngrid[g]);
        int on = 0;
        for (int u = 0; u < TM__IQ2_KMAP; u++) {
            if (t->map[u] >= 0) {
                on++;
                int key = 0;
                for (int k = 0; k < 8; k++) key |= ((t->pos[t->map[u]][k] - 1) / 2) << 2 * k;
                assert_int_equal(key, u);
                continue;
            }
            const uint16_t *nb = t->nbr + (-t->map[u] - 1);
            assert_true(nb[0] > 0);
            /* distances non-decreasing, indices increasing within one distance; at most nwant
            ** distinct distances */
            int prevd = -1, previ = -1, ndist = 0;
            for (int j = 1; j <= nb[0]; j++) {
                int d = 0;
                for (int k = 0; k < 8; k++) {
                    const int p = 2 * ((u >> 2 * k) & 3) + 1, q = t->pos[nb[j]][k];
                    d += (p - q) * (p - q);
                }
                if (d != prevd) { assert_true(d > prevd); ndist++; previ = -1; }
                assert_true(nb[j] > previ);
                prevd = d;
                previ = nb[j];
            }
            assert_true(ndist <= (g == 2 ? 1 : g == 3 ? 3 : 2));
        }
        assert_int_equal(on, ngrid[g]);
    }
    /* IQ2_XXS grid point 0 is all level 0 (0x0808080808080808); key 1 (level 1 at position 0) is
    ** off that grid (iq2xxs_grid[1] is 0x080808080808082b: level 2 at position 0) */
    const tm__iq2_tab *t = tm__iq2_tab_get(0);
    assert_int_equal(t->map[0], 0);
    assert_int_equal(t->map[2], 1);
    assert_true(t->map[1] < 0);
}

static void test_need_weights(void **state) {
    (void)state;
    float x[256];
    uint8_t y[82];
    for (int i = 0; i < 256; i++) x[i] = (float)((i * 37) % 19 - 9) * 0.01f;
    static const int need[] = {TM_GGML_IQ2_XXS, TM_GGML_IQ2_XS, TM_GGML_IQ1_S};
    for (size_t k = 0; k < sizeof need / sizeof need[0]; k++) {
        tm_err err;
        int64_t bad;
        assert_int_equal(tm_gq_quantize_row(need[k], x, 256, y, &bad, &err), TM_E_INVALID_ARG);
        assert_non_null(strstr(err.msg, "importance matrix"));
    }
    /* IQ2_S and IQ1_M run unweighted (llama.cpp allows it): the output dequantizes close */
    static const int opt[] = {TM_GGML_IQ2_S, TM_GGML_IQ1_M};
    for (size_t k = 0; k < 2; k++) {
        tm_err err;
        assert_int_equal(tm_gq_quantize_row(opt[k], x, 256, y, NULL, &err), TM_OK);
        float dq[256];
        assert_int_equal(tm_ggml_dequantize(opt[k], y, sizeof y, 256, dq, &err), TM_OK);
        double e2 = 0, x2 = 0;
        for (int i = 0; i < 256; i++) { e2 += (x[i] - dq[i]) * (x[i] - dq[i]); x2 += x[i] * x[i]; }
        assert_true(e2 < 0.6 * x2);
    }
}

static void test_iq2_xxs(void **state) { (void)state; if (need_data()) check_file("synth256-IQ2_XXS-imx.gguf", 12); }
static void test_iq2_xs(void **state) { (void)state; if (need_data()) check_file("synth256-IQ2_XS-imx.gguf", 12); }
static void test_iq2_s(void **state) { (void)state; if (need_data()) check_file("synth256-IQ2_S-imx.gguf", 10); }
static void test_iq1_s(void **state) { (void)state; if (need_data()) check_file("synth256-IQ1_S-imx.gguf", 12); }
static void test_iq1_m(void **state) { (void)state; if (need_data()) check_file("synth256-IQ1_M-imx.gguf", 12); }
static void test_iq2_xs_options(void **state) {
    (void)state;
    if (!need_data()) return;
    check_file("synth256-IQ2_XS-imx-leave-output.gguf", 12);
    check_file("synth256-IQ2_XS-imx-q8out-q8embd.gguf", 12);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_need_weights),
        cmocka_unit_test(test_iq2_xxs),
        cmocka_unit_test(test_iq2_xs),
        cmocka_unit_test(test_iq2_s),
        cmocka_unit_test(test_iq1_s),
        cmocka_unit_test(test_iq1_m),
        cmocka_unit_test(test_iq2_xs_options),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
