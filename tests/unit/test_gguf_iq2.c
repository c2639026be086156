/* test_gguf_iq2.c: the IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M quantizers with an importance
** matrix against llama-quantize (llama.cpp c392e509) outputs in
** ../shared/models/gguf/imatrix (README.md there: commands, logs, sha256):
**   - kernel level: every tensor of one of these types in synth256-{IQ2_XXS,IQ2_XS,IQ2_S,IQ1_S,
**     IQ1_M}-imx.gguf, quantized from synth256-F32.gguf with the tensor's entry of
**     synth256.imatrix (values / ncall, as llama-quantize loads them), byte for byte (the two
**     IQ2_XS option files hold the same IQ2_XS tensors: checked whole below);
**   - whole files: `tensormorph quantize` (run from that folder with the bare names llama-quantize
**     was given, so quantize.imatrix.file matches) reproduces the seven reference files byte for
**     byte (metadata, tensor order, every tensor), and each tensor's type in our manifest is the
**     one its .log says llama-quantize converted it to;
**   - refusals: IQ2_XS without --imatrix (synth256-IQ2_XS.log: exit 2 and llama-quantize's
**     reason), IQ2_M without --imatrix (its first IQ2_S tensor), the kernels without weights;
**   - IQ2_M (no reference file): its mixture (IQ2_S base, IQ3_S token_embd/attn_v/attn_output,
**     Q5_K output, file type 29), and llama.cpp (node-llama-cpp 3.21.1) loads and runs it with a
**     KL divergence to F32 no worse than llama-quantize's IQ2_S file;
**   - the search tables: key map and neighbour-list facts of the rule (ggml_quant_iq2.h).
** The imatrix is read by a small local reader of the legacy format (count, then per entry
** name length, name, ncall, nval, nval float32). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "helpers/cli_run.h"
#include "helpers/llama_rt.h"
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
static char g_tmp[256]; /* temp folder of the whole-file tests */
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
    if (g_tmp[0]) rmdir(g_tmp);
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
/* ---- whole files through the CLI ----------------------------------------------------------------- */


static const char *tmpdir(void) {
    if (!g_tmp[0]) {
        snprintf(g_tmp, sizeof g_tmp, "/tmp/tm_gguf_iq2_XXXXXX");
        assert_non_null(mkdtemp(g_tmp));
    }
    return g_tmp;
}

/* `tensormorph quantize synth256-F32.gguf -o OUT --type T --imatrix synth256.imatrix ARGS --json`
** run in the reference folder; returns the parsed JSON document (the test fails on rc != 0). */
static json_t *run_quantize(const char *out, const char *type, const char *args) {
    char *o = NULL;
    unlink(out);
    char man[600];
    snprintf(man, sizeof man, "%s.manifest.json", out);
    unlink(man);
    int rc = tmt_run(&o, "cd '%s' && '%s' quantize synth256-F32.gguf -o '%s' --type %s %s --json 2>/dev/null",
                     g_dir, tmt_bin(), out, type, args);
    if (rc) fail_msg("quantize --type %s %s: exit %d", type, args, rc);
    json_t *j = json_loads(o ? o : "", 0, NULL);
    if (!j) fail_msg("quantize --type %s: stdout is not JSON", type);
    free(o);
    return j;
}

/* The type llama-quantize's log gives tensor `name` ("converting to iq1_s .."; "f32" when it only
** printed the size: kept), lower case, into ty; 0 when the log does not list the tensor. Its
** record may span lines ("did not find weights for ..." comes between). */
static int log_type(const char *log, const char *name, char *ty, size_t n) {
    char key[200];
    snprintf(key, sizeof key, " %s - [", name);
    const char *p = strstr(log, key);
    if (!p) return 0;
    const char *eol = strstr(p, "\n["); /* the tensor's record ends where the next one starts */
    const char *c = strstr(p, "converting to ");
    if (c && (!eol || c < eol)) {
        c += strlen("converting to ");
        size_t k = 0;
        while (c[k] && c[k] != ' ' && k + 1 < n) { ty[k] = c[k]; k++; }
        ty[k] = 0;
    } else {
        snprintf(ty, n, "f32");
    }
    return 1;
}

/* Our output of `type` + args equals reference `ref` byte for byte, and every tensor's type in
** our manifest is the one of ref's .log. */
static void check_whole(const char *type, const char *args, const char *ref) {
    char out[512], rp[1200], lp[1200];
    snprintf(out, sizeof out, "%s/%s", tmpdir(), ref);
    snprintf(rp, sizeof rp, "%s/%s", g_dir, ref);
    snprintf(lp, sizeof lp, "%s/%s", g_dir, ref);
    strcpy(strstr(lp, ".gguf"), ".log");
    json_t *j = run_quantize(out, type, args);
    size_t na, nb;
    char *a = tmt_read_bytes(out, &na), *b = tmt_read_bytes(rp, &nb), *log = tmt_read_file(lp);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(log);
    if (na != nb || memcmp(a, b, na) != 0) {
        size_t k = 0;
        while (k < na && k < nb && a[k] == b[k]) k++;
        fail_msg("--type %s %s: %s differs from %s at byte %zu (sizes %zu, %zu)", type, args, out, ref, k, na, nb);
    }
    json_t *ts = json_object_get(json_object_get(j, "manifest"), "tensors");
    assert_int_equal(json_array_size(ts), 21);
    for (size_t i = 0; i < json_array_size(ts); i++) {
        json_t *t = json_array_get(ts, i);
        const char *name = json_string_value(json_object_get(t, "name"));
        const char *ours = json_string_value(json_object_get(t, "type"));
        char theirs[32];
        if (!log_type(log, name, theirs, sizeof theirs)) fail_msg("%s: %s not in the log", ref, name);
        if (strcasecmp(ours, theirs) != 0) fail_msg("%s: %s is %s, llama-quantize's log says %s", ref, name, ours, theirs);
    }
    json_decref(j);
    free(a); free(b); free(log);
    unlink(out);
    snprintf(rp, sizeof rp, "%s.manifest.json", out);
    unlink(rp);
}

static void test_files(void **state) {
    (void)state;
    if (!need_data()) return;
    check_whole("IQ2_XXS", "--imatrix synth256.imatrix", "synth256-IQ2_XXS-imx.gguf");
    /* one thread: the same bytes (rows are quantized independently) */
    check_whole("IQ2_XXS", "--imatrix synth256.imatrix --threads 1", "synth256-IQ2_XXS-imx.gguf");
    check_whole("IQ2_XS", "--imatrix synth256.imatrix", "synth256-IQ2_XS-imx.gguf");
    check_whole("IQ2_S", "--imatrix synth256.imatrix", "synth256-IQ2_S-imx.gguf");
    check_whole("IQ1_S", "--imatrix synth256.imatrix", "synth256-IQ1_S-imx.gguf");
    check_whole("IQ1_M", "--imatrix synth256.imatrix", "synth256-IQ1_M-imx.gguf");
    check_whole("IQ2_XS", "--imatrix synth256.imatrix --leave-output-tensor", "synth256-IQ2_XS-imx-leave-output.gguf");
    check_whole("IQ2_XS", "--imatrix synth256.imatrix --output-tensor-type q8_0 --token-embedding-type q8_0",
                "synth256-IQ2_XS-imx-q8out-q8embd.gguf");
}

/* Without an importance matrix: IQ2_XS is refused up front with llama-quantize's reason (the line
** of synth256-IQ2_XS.log), exit 2, nothing written; IQ2_M (not in that list) at its first IQ2_S
** tensor ("Missing importance matrix for tensor ... in a very low-bit quantization"). */
static void test_refusals(void **state) {
    (void)state;
    if (!need_data()) return;
    char lp[1200], out[512];
    snprintf(lp, sizeof lp, "%s/synth256-IQ2_XS.log", g_dir);
    char *log = tmt_read_file(lp);
    assert_non_null(log);
    const char *reason = strstr(log, "Please do not use");
    assert_non_null(reason);
    char line[256];
    size_t k = 0;
    while (reason[k] && reason[k] != '\n' && k + 1 < sizeof line) { line[k] = reason[k]; k++; }
    line[k] = 0;
    free(log);
    static const char *const types[] = {"IQ2_XS", "IQ2_XXS", "IQ2_S", "IQ1_S", "IQ1_M", "IQ2_M"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        snprintf(out, sizeof out, "%s/refused.gguf", tmpdir());
        unlink(out);
        char *o = NULL;
        int rc = tmt_run(&o, "cd '%s' && '%s' quantize synth256-F32.gguf -o '%s' --type %s 2>&1", g_dir, tmt_bin(), out, types[i]);
        if (rc != 2) fail_msg("--type %s without --imatrix: exit %d (want 2): %s", types[i], rc, o ? o : "");
        if (strcmp(types[i], "IQ2_M") == 0) {
            if (!strstr(o, "Missing importance matrix for tensor blk.0.attn_k.weight in a very low-bit quantization"))
                fail_msg("IQ2_M without --imatrix: %s", o);
        } else if (!strstr(o, line)) {
            fail_msg("--type %s without --imatrix: the message lacks llama-quantize's \"%s\": %s", types[i], line, o);
        }
        assert_false(tmt_exists(out));
        free(o);
    }
}

/* node-llama-cpp's modules directory, or NULL (the test then skips, or fails under
** TM_REQUIRE_LLAMA=1). */
static const char *llama_modules(void) { return tmt_llama_modules(); }

/* max KL divergence of cand's next-token distributions to ref's (tests/unit/convert_kld.mjs). */
static double max_kld(const char *mods, const char *ref, const char *cand) {
    char *o = NULL;
    int rc = tmt_run(&o, "node '%s/tests/unit/convert_kld.mjs' '%s' '%s' '%s' 2>&1", getenv("TM_SRC"), mods, ref, cand);
    if (rc) fail_msg("node: rc %d: %s", rc, o ? o : "");
    json_t *r = json_loads(o, 0, NULL);
    if (!r) fail_msg("not JSON: %s", o);
    assert_int_equal(json_integer_value(json_object_get(r, "vocab")), 512);
    const double k = json_number_value(json_object_get(r, "max_kld"));
    json_decref(r);
    free(o);
    return k;
}

/* IQ2_M (llama-quantize has no reference file here): the mixture of llama_tensor_get_type at
** c392e509 (default IQ2_S; token_embd, attn_v (n_gqa 2) and attn_output IQ3_S; output Q5_K;
** ffn_down's first eighth is no layer of 2), general.file_type 29, and llama.cpp runs it. */
static void test_iq2_m(void **state) {
    (void)state;
    if (!need_data()) return;
    char out[512], f32[1200], ref[1200];
    snprintf(out, sizeof out, "%s/synth256-IQ2_M-imx.gguf", tmpdir());
    json_t *j = run_quantize(out, "IQ2_M", "--imatrix synth256.imatrix");
    json_t *man = json_object_get(j, "manifest");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(man, "recipe"), "file_type_id")), 29);
    json_t *ts = json_object_get(man, "tensors");
    assert_int_equal(json_array_size(ts), 21);
    for (size_t i = 0; i < json_array_size(ts); i++) {
        json_t *t = json_array_get(ts, i);
        const char *name = json_string_value(json_object_get(t, "name"));
        const char *ty = json_string_value(json_object_get(t, "type"));
        const char *want = strstr(name, "_norm") ? "F32"
                         : !strcmp(name, "output.weight") ? "Q5_K"
                         : !strcmp(name, "token_embd.weight") || strstr(name, "attn_v") || strstr(name, "attn_output") ? "IQ3_S"
                         : "IQ2_S";
        if (strcmp(ty, want)) fail_msg("IQ2_M: %s is %s, the rules give %s", name, ty, want);
        /* block tensors have imatrix entries, token_embd/output do not */
        assert_int_equal(json_is_true(json_object_get(t, "imatrix")), !strncmp(name, "blk.", 4) && !strstr(name, "_norm"));
    }
    json_decref(j);
    tm_file *f = NULL;
    tm_err err;
    assert_int_equal(tm_open(out, NULL, &f, &err), TM_OK);
    int found = 0;
    for (int64_t i = 0; i < tm_file_n_meta(f); i++)
        if (!strcmp(tm_file_meta_key(f, i), "general.file_type")) found = !strcmp(tm_file_meta_value(f, i), "29");
    tm_close(f);
    assert_true(found);
    const char *mods = llama_modules();
    if (mods) {
        snprintf(f32, sizeof f32, "%s/synth256-F32.gguf", g_dir);
        snprintf(ref, sizeof ref, "%s/synth256-IQ2_S-imx.gguf", g_dir);
        const double k_ref = max_kld(mods, f32, ref), k = max_kld(mods, f32, out);
        printf("IQ2_M: max KLD to F32 %g (llama-quantize IQ2_S-imx: %g)\n", k, k_ref);
        if (!(isfinite(k) && k <= k_ref * 1.25 + 0.02))
            fail_msg("IQ2_M: max KLD %g to F32, llama-quantize's IQ2_S file %g", k, k_ref);
    }
    unlink(out);
    snprintf(ref, sizeof ref, "%s.manifest.json", out);
    unlink(ref);
    if (!mods) skip();
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
        cmocka_unit_test(test_files),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_iq2_m),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
