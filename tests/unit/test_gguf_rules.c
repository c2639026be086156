/* test_gguf_rules.c: llama-quantize's (llama.cpp@c392e509) type choices that neither the shared
** reference files nor test_gguf_quantize.c reach, each on a small synthetic GGUF, through
** tm_gguf_quantize_plan (and tm_gguf_quantize where the file itself matters):
**   - --override-kv reaches the rules as llama.cpp's model loader applies it (head_count_kv,
**     expert_count; an override of another type is ignored), a per-layer head-count array
**     counts by its first element;
**   - llama's check that the attn_v tensors match the layers with kv heads;
**   - LLM_TYPE_70B: 80 layers of llama with GQA (not 8 experts), deci, qwen2, qwen2vl, olmo;
**   - --type by number as std::stoi reads it;
**   - the tensor order of the loader's weight_name_comparer (sscanf "blk.%d."), a 5-byte name
**     passes llama's "ends in weight" test, MoE layers outside [0, n_layer) are refused;
**   - COPY's guessed file type in the loader's order; the per-tensor refusals in llama's order;
**     a NaN/inf in a copied F32/F16/BF16 tensor refused (the loader's check_tensors);
**   - --override-kv general.alignment refused; --keep-split keeps the file order and names a
**     one-file input's output OUT-00001-of-00001.gguf, without split keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers/fixture.h"
#include "tensormorph.h"
#include "tensormorph/experimental.h"
#include "tensormorph/imatrix.h"

static char g_tmp[512];

typedef struct stensor { const char *name; int type; int64_t ne0, ne1; } stensor;

/* A GGUF of the given tensors (zero bytes: every ggml type accepts them) with metadata kv. */
static void write_gguf(const char *path, tm_gguf_kvlist *kv, const stensor *ts, int n) {
    tm_gguf_wtensor *t = calloc((size_t)n, sizeof *t);
    assert_non_null(t);
    for (int i = 0; i < n; i++) {
        t[i].name = ts[i].name;
        t[i].type = ts[i].type;
        t[i].n_dims = ts[i].ne1 > 1 ? 2 : 1;
        t[i].ne[0] = ts[i].ne0;
        t[i].ne[1] = ts[i].ne1;
        t[i].ne[2] = t[i].ne[3] = 1;
    }
    tm_gguf_writer *w;
    tm_err e;
    unlink(path);
    if (tm_gguf_writer_open(path, kv, t, n, &w, &e)) fail_msg("%s", e.msg);
    for (int i = 0; i < n; i++) {
        uint64_t nb = tm_gguf_writer_tensor_bytes(w, i);
        void *z = calloc(1, (size_t)nb);
        assert_int_equal(tm_gguf_writer_write(w, i, 0, z, (size_t)nb, NULL), TM_OK);
        free(z);
    }
    assert_int_equal(tm_gguf_writer_finish(w, NULL), TM_OK);
    tm_gguf_writer_free(w);
    free(t);
}

static tm_gguf_kvlist *arch_kv(const char *arch, uint32_t n_layer, uint32_t nh, uint32_t nkv) {
    tm_gguf_kvlist *kv = tm_gguf_kvlist_new();
    char key[128];
    assert_int_equal(tm_gguf_kvlist_set_str(kv, "general.architecture", arch, NULL), TM_OK);
    snprintf(key, sizeof key, "%s.block_count", arch);
    assert_int_equal(tm_gguf_kvlist_set_u32(kv, key, n_layer, NULL), TM_OK);
    snprintf(key, sizeof key, "%s.attention.head_count", arch);
    assert_int_equal(tm_gguf_kvlist_set_u32(kv, key, nh, NULL), TM_OK);
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    if (nkv) assert_int_equal(tm_gguf_kvlist_set_u32(kv, key, nkv, NULL), TM_OK);
    return kv;
}

/* The plan of `path` under file type `ft` (params from *pp when given); the rows' names are
** copied, the file closed. Returns the status; the rows and their count set on success. */
static tm_status plan(const char *path, const char *ft, const tm_gguf_quantize_params *pp,
                      tm_gguf_quantize_tensor **rows, int64_t *n, tm_err *e) {
    tm_file *f;
    if (tm_open(path, NULL, &f, e)) fail_msg("%s", e->msg);
    tm_gguf_quantize_params p = pp ? *pp : tm_gguf_quantize_params_default();
    p.ftype = tm_gguf_ftype_from_name(ft);
    assert_true(p.ftype >= 0);
    tm_status s = tm_gguf_quantize_plan(f, &p, rows, n, e);
    for (int64_t i = 0; !s && i < *n; i++) (*rows)[i].name = strdup((*rows)[i].name);
    tm_close(f);
    return s;
}

static void free_rows(tm_gguf_quantize_tensor *r, int64_t n) {
    for (int64_t i = 0; i < n; i++) free((char *)r[i].name);
    free(r);
}

static int type_of(const tm_gguf_quantize_tensor *r, int64_t n, const char *name) {
    for (int64_t i = 0; i < n; i++)
        if (!strcmp(r[i].name, name)) return r[i].out_type;
    fail_msg("no tensor %s", name);
    return -1;
}

static void expect_type(const char *path, const char *ft, const tm_gguf_quantize_params *p, const char *name,
                        int type, const char *what) {
    tm_gguf_quantize_tensor *r;
    int64_t n;
    tm_err e;
    if (plan(path, ft, p, &r, &n, &e)) fail_msg("%s: %s", what, e.msg);
    int got = type_of(r, n, name);
    if (got != type)
        fail_msg("%s: %s %s is %s, expected %s", what, ft, name, tm_ggml_type_info_get(got)->name,
                 tm_ggml_type_info_get(type)->name);
    free_rows(r, n);
}

static const stensor two_layers[] = {
    {"token_embd.weight", TM_GGML_F32, 256, 4}, {"output.weight", TM_GGML_F32, 256, 4},
    {"blk.0.attn_v.weight", TM_GGML_F32, 256, 2}, {"blk.0.attn_k.weight", TM_GGML_F32, 256, 2},
    {"blk.0.ffn_down.weight", TM_GGML_F32, 256, 2}, {"blk.1.attn_v.weight", TM_GGML_F32, 256, 2},
    {"blk.1.attn_k.weight", TM_GGML_F32, 256, 2}, {"blk.1.ffn_down.weight", TM_GGML_F32, 256, 2}};

static void test_overrides_reach_rules(void **state) {
    (void)state;
    char in[600];
    snprintf(in, sizeof in, "%s/ovr.gguf", g_tmp);
    tm_gguf_kvlist *kv = arch_kv("llama", 2, 4, 2); /* n_gqa 2 */
    write_gguf(in, kv, two_layers, 8);
    tm_gguf_kvlist_free(kv);
    expect_type(in, "Q2_K", NULL, "blk.0.attn_v.weight", TM_GGML_Q3_K, "n_gqa 2");
    tm_gguf_quantize_params p = tm_gguf_quantize_params_default();
    tm_gguf_kvlist *ovr = tm_gguf_kvlist_new();
    int32_t one = 1;
    assert_int_equal(tm_gguf_kvlist_set_raw(ovr, "llama.attention.head_count_kv", TM_GGUF_I32, &one, 4, NULL), TM_OK);
    p.kv_overrides = ovr;
    expect_type(in, "Q2_K", &p, "blk.0.attn_v.weight", TM_GGML_Q4_K, "head_count_kv overridden to 1 (n_gqa 4)");
    /* a string override of an integer key: the loader ignores it (with a warning) */
    assert_int_equal(tm_gguf_kvlist_set_str(ovr, "llama.attention.head_count_kv", "1", NULL), TM_OK);
    expect_type(in, "Q2_K", &p, "blk.0.attn_v.weight", TM_GGML_Q3_K, "string override of head_count_kv");
    tm_gguf_kvlist_remove(ovr, "llama.attention.head_count_kv");
    int32_t eight = 8;
    assert_int_equal(tm_gguf_kvlist_set_raw(ovr, "llama.expert_count", TM_GGUF_I32, &eight, 4, NULL), TM_OK);
    expect_type(in, "Q2_K", &p, "blk.1.attn_v.weight", TM_GGML_Q8_0, "8 experts by override: attn_v");
    expect_type(in, "Q2_K", &p, "blk.1.attn_k.weight", TM_GGML_Q8_0, "8 experts by override: attn_k");
    tm_gguf_kvlist_free(ovr);

    /* a per-layer head_count_kv array: layer 0's value counts (hparams.n_gqa(0)) */
    kv = arch_kv("llama", 2, 4, 0);
    uint8_t arr[12 + 8];
    const uint32_t et = TM_GGUF_I32;
    const uint64_t cnt = 2;
    const int32_t v[2] = {1, 4};
    memcpy(arr, &et, 4);
    memcpy(arr + 4, &cnt, 8);
    memcpy(arr + 12, v, 8);
    assert_int_equal(tm_gguf_kvlist_set_raw(kv, "llama.attention.head_count_kv", TM_GGUF_ARRAY, arr, sizeof arr, NULL), TM_OK);
    write_gguf(in, kv, two_layers, 8);
    tm_gguf_kvlist_free(kv);
    expect_type(in, "Q2_K", NULL, "blk.1.attn_v.weight", TM_GGML_Q4_K, "head_count_kv array [1, 4]");

    /* llama's sanity check: as many attn_v as layers with kv heads (a 0 in the array: none) */
    tm_gguf_quantize_tensor *r;
    int64_t n;
    tm_err e;
    const int32_t v0[2] = {0, 4};
    memcpy(arr + 12, v0, 8);
    kv = arch_kv("llama", 2, 4, 0);
    assert_int_equal(tm_gguf_kvlist_set_raw(kv, "llama.attention.head_count_kv", TM_GGUF_ARRAY, arr, sizeof arr, NULL), TM_OK);
    write_gguf(in, kv, two_layers, 8);
    tm_gguf_kvlist_free(kv);
    assert_int_equal(plan(in, "Q4_K_M", NULL, &r, &n, &e), TM_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "n_attention_wv is unexpected"));
    kv = arch_kv("llama", 3, 4, 2); /* 3 layers, 2 attn_v */
    write_gguf(in, kv, two_layers, 8);
    tm_gguf_kvlist_free(kv);
    assert_int_equal(plan(in, "Q4_K_M", NULL, &r, &n, &e), TM_E_UNSUPPORTED);
}

/* 80 layers of attn_v only: Q3_K_S gives attn_v Q3_K, bumped to Q5_K in a 70B. */
static void test_70b(void **state) {
    (void)state;
    static char names[80][32];
    stensor ts[80];
    for (int l = 0; l < 80; l++) {
        snprintf(names[l], sizeof names[l], "blk.%d.attn_v.weight", l);
        ts[l] = (stensor){names[l], TM_GGML_F32, 256, 2};
    }
    static const struct { const char *arch; uint32_t nkv, n_expert; int big; } cases[] = {
        {"llama", 2, 0, 1}, {"llama", 8, 0, 0}, {"deci", 8, 0, 1}, {"qwen2", 8, 0, 1}, {"qwen2vl", 8, 0, 1},
        {"olmo", 8, 0, 1}, {"gemma", 2, 0, 0}, {"falcon", 2, 0, 0}};
    char in[600];
    snprintf(in, sizeof in, "%s/deep.gguf", g_tmp);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tm_gguf_kvlist *kv = arch_kv(cases[c].arch, 80, 8, cases[c].nkv);
        write_gguf(in, kv, ts, 80);
        tm_gguf_kvlist_free(kv);
        char what[64];
        snprintf(what, sizeof what, "%s, 80 layers, 8/%u heads", cases[c].arch, cases[c].nkv);
        expect_type(in, "Q3_K_S", NULL, "blk.40.attn_v.weight", cases[c].big ? TM_GGML_Q5_K : TM_GGML_Q3_K, what);
    }
    /* 79 layers: no 70B */
    tm_gguf_kvlist *kv = arch_kv("qwen2", 79, 8, 8);
    write_gguf(in, kv, ts, 79);
    tm_gguf_kvlist_free(kv);
    expect_type(in, "Q3_K_S", NULL, "blk.40.attn_v.weight", TM_GGML_Q3_K, "qwen2, 79 layers");
}

static void test_names(void **state) {
    (void)state;
    /* --type by number as std::stoi reads it */
    assert_int_equal(tm_gguf_ftype_from_name("15"), TM_FTYPE_Q4_K_M);
    assert_int_equal(tm_gguf_ftype_from_name(" 7"), TM_FTYPE_Q8_0);
    assert_int_equal(tm_gguf_ftype_from_name("+15abc"), TM_FTYPE_Q4_K_M);
    assert_int_equal(tm_gguf_ftype_from_name("0"), TM_FTYPE_F32);
    assert_int_equal(tm_gguf_ftype_from_name("q4_k_m"), TM_FTYPE_Q4_K_M);
    assert_int_equal(tm_gguf_ftype_from_name("x15"), -1);
    assert_int_equal(tm_gguf_ftype_from_name("4"), -1); /* a removed file type */
    assert_int_equal(tm_gguf_ftype_from_name("-"), -1);
    char in[600];
    snprintf(in, sizeof in, "%s/names.gguf", g_tmp);
    static const stensor ts[] = {
        {"blk.10.a.weight", TM_GGML_F32, 256, 2}, {"zzz.weight", TM_GGML_F32, 256, 2},
        {"blk.2.a.weight", TM_GGML_F32, 256, 2}, {"blk.+3.a.weight", TM_GGML_F32, 256, 2},
        {"blk.04b.weight", TM_GGML_F32, 256, 2}, {"blk.x.weight", TM_GGML_F32, 256, 2},
        {"embed", TM_GGML_F32, 256, 2}, {"emb", TM_GGML_F32, 256, 2}, {"embeds", TM_GGML_F32, 256, 2}};
    tm_gguf_kvlist *kv = arch_kv("llama", 12, 4, 4);
    write_gguf(in, kv, ts, 9);
    tm_gguf_kvlist_free(kv);
    tm_gguf_quantize_tensor *r;
    int64_t n;
    tm_err e;
    if (plan(in, "Q8_0", NULL, &r, &n, &e)) fail_msg("%s", e.msg);
    /* layer -1 first (by name), then layers 2, +3, 04 and 10 as sscanf("blk.%d.") reads them */
    static const char *const order[] = {"blk.x.weight", "emb", "embed", "embeds", "zzz.weight",
                                        "blk.2.a.weight", "blk.+3.a.weight", "blk.04b.weight", "blk.10.a.weight"};
    assert_int_equal(n, 9);
    for (int i = 0; i < 9; i++) assert_string_equal(r[i].name, order[i]);
    /* llama's "ends in weight" test passes a 5-byte name */
    assert_int_equal(type_of(r, n, "embed"), TM_GGML_Q8_0);
    assert_int_equal(type_of(r, n, "emb"), TM_GGML_F32);
    assert_int_equal(type_of(r, n, "embeds"), TM_GGML_F32);
    free_rows(r, n);

    /* MoE (8 experts): a layer read from the name must lie in [0, n_layer) */
    static const stensor moe[] = {{"blk.0.ffn_down.weight", TM_GGML_F32, 256, 2}, {"blk.5.ffn_down.weight", TM_GGML_F32, 256, 2}};
    kv = arch_kv("llama", 2, 4, 4);
    assert_int_equal(tm_gguf_kvlist_set_u32(kv, "llama.expert_count", 8, NULL), TM_OK);
    write_gguf(in, kv, moe, 2);
    tm_gguf_kvlist_free(kv);
    assert_int_equal(plan(in, "Q4_K_M", NULL, &r, &n, &e), TM_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "blk.5.ffn_down.weight"));
    assert_non_null(strstr(e.msg, "[0, 2)"));
}

static tm_status run_quantize(const char *in, const char *out, const char *ft, tm_gguf_quantize_params *p, tm_err *e) {
    tm_file *f;
    if (tm_open(in, NULL, &f, e)) fail_msg("%s", e->msg);
    p->ftype = tm_gguf_ftype_from_name(ft);
    p->no_checksums = 1;
    tm_gguf_quantize_result *res = NULL;
    tm_status s = tm_gguf_quantize(f, out, p, &res, e);
    tm_gguf_quantize_result_free(res);
    tm_close(f);
    return s;
}

static void test_copy_refusals_keep_split(void **state) {
    (void)state;
    char in[600], out[600];
    snprintf(in, sizeof in, "%s/copy.gguf", g_tmp);
    snprintf(out, sizeof out, "%s/copy-out.gguf", g_tmp);
    /* COPY: no general.file_type, one F32 and one F16 tensor: the loader's order (layer -1
    ** first) meets zz.weight (F32) first, name order would meet blk.0.a.weight (F16) first */
    static const stensor ts[] = {{"zz.weight", TM_GGML_F32, 256, 2}, {"blk.0.a.weight", TM_GGML_F16, 256, 2}};
    tm_gguf_kvlist *kv = arch_kv("llama", 1, 4, 4);
    write_gguf(in, kv, ts, 2);
    tm_gguf_kvlist_free(kv);
    tm_gguf_quantize_params p = tm_gguf_quantize_params_default();
    tm_err e;
    if (run_quantize(in, out, "COPY", &p, &e)) fail_msg("%s", e.msg);
    assert_int_equal(tm_gguf_kvlist_read(out, &kv, NULL), TM_OK);
    assert_int_equal(tm_gguf_kvlist_get_int(kv, "general.file_type", NULL), TM_FTYPE_F32 | 1024);
    tm_gguf_kvlist_free(kv);

    /* --override-kv general.alignment: ggml aborts on a non-u32 alignment; refused (the writer's
    ** check) */
    tm_gguf_kvlist *ovr = tm_gguf_kvlist_new();
    int32_t a64 = 64;
    assert_int_equal(tm_gguf_kvlist_set_raw(ovr, "general.alignment", TM_GGUF_I32, &a64, 4, NULL), TM_OK);
    p = tm_gguf_quantize_params_default();
    p.kv_overrides = ovr;
    p.force = 1;
    assert_int_not_equal(run_quantize(in, out, "Q8_0", &p, &e), TM_OK);
    assert_non_null(strstr(e.msg, "general.alignment"));
    tm_gguf_kvlist_free(ovr);

    /* an infinite value in a copied tensor (a norm): llama's loader validates every tensor */
    static const stensor nt[] = {{"blk.0.attn_norm.weight", TM_GGML_F32, 256, 1}, {"blk.0.ffn_up.weight", TM_GGML_F32, 256, 2}};
    kv = arch_kv("llama", 1, 4, 4);
    write_gguf(in, kv, nt, 2);
    tm_gguf_kvlist_free(kv);
    tm_file *f;
    if (tm_open(in, NULL, &f, &e)) fail_msg("%s", e.msg);
    const uint64_t noff = tm_file_tensor(f, 0)->offset;
    tm_close(f);
    FILE *fp = fopen(in, "r+b");
    assert_non_null(fp);
    const float inf = 1.0f / 0.0f;
    assert_int_equal(fseek(fp, (long)noff + 3 * 4, SEEK_SET), 0);
    assert_int_equal(fwrite(&inf, 4, 1, fp), 1);
    fclose(fp);
    p = tm_gguf_quantize_params_default();
    p.force = 1;
    assert_int_equal(run_quantize(in, out, "Q8_0", &p, &e), TM_E_NONFINITE);
    assert_non_null(strstr(e.msg, "blk.0.attn_norm.weight"));
    assert_non_null(strstr(e.msg, "element 3"));

    /* a quantized source without --allow-requantize and without an imatrix entry under IQ2_XS:
    ** llama refuses the missing matrix first */
    static const stensor q[] = {{"blk.0.ffn_up.weight", TM_GGML_Q8_0, 256, 2}};
    kv = arch_kv("llama", 1, 4, 4);
    write_gguf(in, kv, q, 1);
    tm_gguf_kvlist_free(kv);
    float w[256];
    for (int i = 0; i < 256; i++) w[i] = 1;
    tm_imatrix_entry ent = {.name = (char *)"blk.0.other.weight", .nval = 256, .ncall = 1, .offset = 0, .weights = w};
    tm_imatrix im = {.path = (char *)"x.imatrix", .is_gguf = 0, .n = 1, .e = &ent, .chunks = 1, .dataset = NULL};
    p = tm_gguf_quantize_params_default();
    p.imatrix = &im;
    tm_gguf_quantize_tensor *r;
    int64_t n;
    assert_int_equal(plan(in, "IQ2_XS", &p, &r, &n, &e), TM_E_INVALID_ARG);
    assert_non_null(strstr(e.msg, "Missing importance matrix for tensor blk.0.ffn_up.weight"));

    /* --keep-split on a one-file input: OUT-00001-of-00001.gguf, no split keys, the file's
    ** tensor order (not the loader's name order) */
    static const stensor ks[] = {{"token_embd.weight", TM_GGML_F32, 256, 4}, {"blk.0.attn_v.weight", TM_GGML_F32, 256, 2},
                                 {"blk.0.attn_k.weight", TM_GGML_F32, 256, 2}, {"output.weight", TM_GGML_F32, 256, 4}};
    kv = arch_kv("llama", 1, 4, 4);
    write_gguf(in, kv, ks, 4);
    tm_gguf_kvlist_free(kv);
    p = tm_gguf_quantize_params_default();
    p.keep_split = 1;
    snprintf(out, sizeof out, "%s/ks.gguf", g_tmp);
    if (run_quantize(in, out, "Q4_K_M", &p, &e)) fail_msg("%s", e.msg);
    struct stat st;
    assert_int_not_equal(stat(out, &st), 0);
    char one[700];
    snprintf(one, sizeof one, "%s/ks-00001-of-00001.gguf", g_tmp);
    assert_int_equal(tm_gguf_kvlist_read(one, &kv, NULL), TM_OK);
    assert_int_equal(tm_gguf_kvlist_find(kv, "split.count"), -1);
    assert_int_equal(tm_gguf_kvlist_find(kv, "split.no"), -1);
    tm_gguf_kvlist_free(kv);
    if (tm_open(one, NULL, &f, &e)) fail_msg("%s", e.msg);
    for (int i = 0; i < 4; i++) assert_string_equal(tm_file_tensor(f, i)->name, ks[i].name);
    tm_close(f);
}

static int setup(void **state) {
    (void)state;
    return tmt_tmpdir_make(g_tmp, sizeof g_tmp, "test_gguf_rules") == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    tmt_tmpdir_remove(g_tmp);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overrides_reach_rules),
        cmocka_unit_test(test_70b),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_copy_refusals_keep_split),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
