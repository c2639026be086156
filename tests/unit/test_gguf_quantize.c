/* test_gguf_quantize.c: the GGUF writer and the GGUF quantize job.
**   - byte-identical to llama-quantize on every reference file of ../shared/models/gguf
**     (stories260K-rows256-{Q8_0,Q4_0,Q6_K,Q2_K,Q3_K_M,Q4_K_M,Q5_K_M} from the rows256 F32
**     file, stories260K-{Q2_K,Q4_K_M,Q5_K_M,Q6_K} from stories260K-F32.gguf), with the
**     manifest beside each output checked against the files;
**   - the mixture rules the reference files do not reach (a synthetic GGUF with an untied
**     output, n_gqa 4 and 256-wide rows), --pure, --leave-output-tensor, --tensor-type,
**     --strict, the F16 fallback, f16 scale overflow naming tensor/row/block, atomicity;
**   - safetensors input to GGUF output; the metadata list; the CLI's dispatch and exit codes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers/cli_run.h"
#include "helpers/vectors.h"
#include "tensormorph.h"
#include "tensormorph/experimental.h"

static char g_tmp[512];

static void tmp_path(char *buf, size_t n, const char *leaf) {
    snprintf(buf, n, "%s/%s", g_tmp, leaf);
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* No "<leaf>.tmp.*" file left in the temp directory. */
static int no_temp_left(const char *leaf) {
    DIR *d = opendir(g_tmp);
    if (!d) return 0;
    struct dirent *e;
    int ok = 1;
    size_t k = strlen(leaf);
    while ((e = readdir(d)))
        if (strncmp(e->d_name, leaf, k) == 0 && strstr(e->d_name + k, ".tmp.")) ok = 0;
    closedir(d);
    return ok;
}

/* Quantize `in` to `leaf` in the temp dir with file type name `ft`. */
static tm_status quantize(const char *in_path, const char *leaf, const char *ft, tm_gguf_quantize_params *pp,
                          tm_gguf_quantize_result **res, tm_err *err, char *out, size_t nout) {
    tm_file *in = NULL;
    tm_status s = tm_open(in_path, NULL, &in, err);
    if (s) return s;
    tm_gguf_quantize_params p = pp ? *pp : tm_gguf_quantize_params_default();
    p.ftype = tm_gguf_ftype_from_name(ft);
    assert_true(p.ftype >= 0);
    tmp_path(out, nout, leaf);
    unlink(out);
    s = tm_gguf_quantize(in, out, &p, res, err);
    /* names in the result point into `in`: copy what the tests use before closing */
    if (!s && res && *res) {
        for (int64_t i = 0; i < (*res)->n; i++) (*res)->tensors[i].name = strdup((*res)->tensors[i].name);
    }
    tm_close(in);
    return s;
}

static void free_res(tm_gguf_quantize_result *r) {
    if (!r) return;
    for (int64_t i = 0; i < r->n; i++) free((void *)r->tensors[i].name);
    tm_gguf_quantize_result_free(r);
}

static const tm_gguf_quantize_tensor *find_t(const tm_gguf_quantize_result *r, const char *name) {
    for (int64_t i = 0; i < r->n; i++)
        if (!strcmp(r->tensors[i].name, name)) return &r->tensors[i];
    fail_msg("tensor %s not in the result", name);
    return NULL;
}

/* The ggml type of each tensor of a GGUF file, via the reader. */
static int file_tensor_type(const tm_file *f, int64_t i) {
    const tm_tensor *t = tm_file_tensor(f, i);
    if (t->quant) return t->quant->ggml_type;
    return t->dtype == TM_F32 ? 0 : t->dtype == TM_F16 ? 1 : t->dtype == TM_BF16 ? 30 : -1;
}

/* The file at `out` holds exactly the bytes of the file at `ref`. */
static void assert_same_file(const char *out, const char *ref) {
    size_t na = 0, nb = 0;
    uint8_t *a = (uint8_t *)tmt_read_bytes(out, &na), *b = (uint8_t *)tmt_read_bytes(ref, &nb);
    assert_non_null(a);
    assert_non_null(b);
    if (na != nb || memcmp(a, b, na) != 0) {
        size_t k = 0;
        while (k < na && k < nb && a[k] == b[k]) k++;
        fail_msg("%s: differs from %s at byte %zu (sizes %zu / %zu)", out, ref, k, na, nb);
    }
    free(a);
    free(b);
}

/* ---------------------------------------------------------------------------------------- */

static void check_reference(const char *src, const char *ref, const char *ft) {
    char in[4096], rp[4096], out[4096];
    snprintf(in, sizeof in, "%s/models/gguf/%s", tmv_shared_dir(), src);
    snprintf(rp, sizeof rp, "%s/models/gguf/%s", tmv_shared_dir(), ref);
    tm_gguf_quantize_result *res = NULL;
    tm_err e;
    tm_gguf_quantize_params p = tm_gguf_quantize_params_default();
    p.n_threads = 2;
    tm_status s = quantize(in, ref, ft, &p, &res, &e, out, sizeof out);
    if (s) fail_msg("%s -> %s: %s", src, ft, e.msg);
    assert_same_file(out, rp);
    assert_true(no_temp_left(ref));
    /* the manifest beside the file */
    char mp[4200];
    snprintf(mp, sizeof mp, "%s.manifest.json", out);
    json_error_t je;
    json_t *m = json_load_file(mp, 0, &je);
    assert_non_null(m);
    assert_string_equal(json_string_value(json_object_get(m, "schema")), "tensormorph.manifest/1");
    char hex[65];
    uint64_t n_bytes;
    assert_int_equal(tm_sha256_file(out, hex, &n_bytes, NULL), TM_OK);
    json_t *f0 = json_array_get(json_object_get(json_object_get(m, "output"), "files"), 0);
    assert_string_equal(json_string_value(json_object_get(f0, "sha256")), hex);
    assert_int_equal(json_integer_value(json_object_get(f0, "bytes")), (json_int_t)n_bytes);
    assert_string_equal(json_string_value(json_object_get(json_object_get(m, "output"), "format")), "gguf");
    assert_int_equal(tm_sha256_file(in, hex, NULL, NULL), TM_OK);
    json_t *s0 = json_array_get(json_object_get(m, "sources"), 0);
    assert_string_equal(json_string_value(json_object_get(s0, "sha256")), hex);
    assert_string_equal(json_string_value(json_object_get(json_object_get(m, "recipe"), "file_type")),
                        tm_gguf_ftype_name(tm_gguf_ftype_from_name(ft)));
    /* every tensor's manifest type is the type the reference file holds */
    tm_file *rf;
    assert_int_equal(tm_open(rp, NULL, &rf, NULL), TM_OK);
    json_t *ts = json_object_get(m, "tensors");
    assert_int_equal((int64_t)json_array_size(ts), tm_file_n_tensors(rf));
    assert_int_equal(res->n, tm_file_n_tensors(rf));
    for (int64_t i = 0; i < tm_file_n_tensors(rf); i++) {
        json_t *o = json_array_get(ts, (size_t)i);
        assert_string_equal(json_string_value(json_object_get(o, "name")), tm_file_tensor(rf, i)->name);
        const tm_ggml_type_info *ti = tm_ggml_type_info_get(file_tensor_type(rf, i));
        assert_non_null(ti);
        assert_string_equal(json_string_value(json_object_get(o, "type")), ti->name);
        if (res->tensors[i].quantized) {
            /* measured error: finite and small against the weights' scale */
            assert_true(res->tensors[i].rmse >= 0 && res->tensors[i].rmse < 0.1);
            assert_true(res->tensors[i].sqnr_db > 5);
        }
    }
    tm_close(rf);
    json_decref(m);
    free_res(res);
}

static void test_reference_rows256(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    static const char *const types[] = {"Q8_0", "Q4_0", "Q6_K", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char ref[128];
        snprintf(ref, sizeof ref, "stories260K-rows256-%s.gguf", types[i]);
        check_reference("stories260K-rows256-F32.gguf", ref, types[i]);
    }
}

static void test_reference_real_shapes(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    static const char *const types[] = {"Q2_K", "Q4_K_M", "Q5_K_M", "Q6_K"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char ref[128];
        snprintf(ref, sizeof ref, "stories260K-%s.gguf", types[i]);
        check_reference("stories260K-F32.gguf", ref, types[i]);
    }
}

/* The whole job under every kernel set this CPU runs (tm_gguf_quantize_params.kernels: auto, ref, avx2,
** avx512): the bytes of llama-quantize's file, and the measured errors of auto bit for bit. The
** types cover the ggml type table's SIMD columns: fused quantizer+error kernels (Q8_0, Q4_0,
** Q6_K), AVX2 scale searches (Q2_K..Q5_K) and the plain dequantize-and-measure path. */
static void test_kernel_sets(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    static const char *const kern[] = {"auto", "ref", "avx2", "avx512"};
    static const char *const types[] = {"Q8_0", "Q4_0", "Q6_K", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M"};
    char in[4096], rp[4096], out[4096];
    snprintf(in, sizeof in, "%s/models/gguf/stories260K-rows256-F32.gguf", tmv_shared_dir());
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        snprintf(rp, sizeof rp, "%s/models/gguf/stories260K-rows256-%s.gguf", tmv_shared_dir(), types[t]);
        tm_gguf_quantize_result *r0 = NULL;
        int ran = 0;
        for (size_t k = 0; k < sizeof kern / sizeof kern[0]; k++) {
            tm_gguf_quantize_params p = tm_gguf_quantize_params_default();
            if (tm_kernels_get(kern[k], &p.kernels) != TM_OK) continue; /* the CPU lacks it */
            p.n_threads = 2;
            tm_gguf_quantize_result *res = NULL;
            tm_err e;
            if (quantize(in, "kernels.gguf", types[t], &p, &res, &e, out, sizeof out))
                fail_msg("%s under --kernel %s: %s", types[t], kern[k], e.msg);
            assert_same_file(out, rp);
            ran++;
            if (!r0) { r0 = res; continue; }
            assert_int_equal(res->n, r0->n);
            for (int64_t i = 0; i < res->n; i++) {
                const tm_gguf_quantize_tensor *a = &r0->tensors[i], *b = &res->tensors[i];
                assert_int_equal(a->out_type, b->out_type);
                assert_memory_equal(&a->rmse, &b->rmse, sizeof a->rmse);
                assert_memory_equal(&a->max_abs_err, &b->max_abs_err, sizeof a->max_abs_err);
                assert_memory_equal(&a->sqnr_db, &b->sqnr_db, sizeof a->sqnr_db);
            }
            free_res(res);
        }
        assert_true(ran >= 2); /* auto and ref at least */
        free_res(r0);
    }
}

/* Q4_0 on real shapes: llama-quantize refuses ffn_down (172-wide rows); we keep it in F16
** with the reason, or fail with --strict leaving nothing behind. */
static void test_f16_keep_and_strict(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char in[4096], out[4096];
    snprintf(in, sizeof in, "%s/models/gguf/stories260K-F32.gguf", tmv_shared_dir());
    tm_gguf_quantize_result *res = NULL;
    tm_err e;
    assert_int_equal(quantize(in, "q40.gguf", "Q4_0", NULL, &res, &e, out, sizeof out), TM_OK);
    const tm_gguf_quantize_tensor *t = find_t(res, "blk.3.ffn_down.weight");
    assert_int_equal(t->out_type, TM_GGML_F16);
    assert_non_null(strstr(t->reason, "not a multiple of 32"));
    assert_non_null(strstr(t->reason, "F16"));
    assert_int_equal(find_t(res, "blk.3.ffn_up.weight")->out_type, TM_GGML_Q4_0);
    assert_int_equal(find_t(res, "token_embd.weight")->out_type, TM_GGML_Q8_0); /* tied, 64-wide */
    assert_int_equal(find_t(res, "output_norm.weight")->out_type, TM_GGML_F32);
    assert_true(find_t(res, "blk.3.ffn_down.weight")->sqnr_db > 60); /* F16 keeps ~all bits */
    /* each refused tensor (the five 172-wide ffn_down) counts once, not twice; plus the tied
    ** token_embd's real fallback (Q6_K -> Q8_0 for its 64-wide rows) */
    int64_t n_down = 0;
    for (int64_t i = 0; i < res->n; i++) n_down += strstr(res->tensors[i].name, "ffn_down") != NULL;
    assert_int_equal(n_down, 5);
    assert_non_null(strstr(find_t(res, "token_embd.weight")->reason, "fallback Q8_0"));
    assert_int_equal(res->n_fallback, 5 + 1);
    free_res(res);
    res = NULL;
    assert_int_equal(quantize(in, "q80.gguf", "Q8_0", NULL, &res, &e, out, sizeof out), TM_OK);
    assert_int_equal(find_t(res, "blk.0.ffn_down.weight")->out_type, TM_GGML_F16);
    assert_null(strstr(find_t(res, "token_embd.weight")->reason, "fallback")); /* Q8_0 needs none */
    assert_int_equal(res->n_fallback, 5);
    char mp[4200];
    snprintf(mp, sizeof mp, "%s.manifest.json", out);
    json_t *m = json_load_file(mp, 0, NULL);
    assert_non_null(m);
    json_t *mres = json_object_get(m, "results");
    assert_non_null(mres);
    assert_int_equal(json_integer_value(json_object_get(mres, "n_fallback")), 5);
    json_decref(m);
    free_res(res);
    res = NULL;
    tm_gguf_quantize_params p = tm_gguf_quantize_params_default();
    p.strict = 1;
    assert_int_equal(quantize(in, "q40s.gguf", "Q4_0", &p, &res, &e, out, sizeof out), TM_E_UNSUPPORTED);
    assert_null(res);
    assert_non_null(strstr(e.msg, "ffn_down"));
    assert_non_null(strstr(e.msg, "--strict"));
    assert_false(exists(out));
    assert_true(no_temp_left("q40s.gguf"));
}

/* ---- a synthetic GGUF for the rules the reference files do not reach -------------------- */

static const char *const syn_layer_names[] = {"attn_k", "attn_norm", "attn_output", "attn_q",
                                              "attn_v", "ffn_down", "ffn_gate", "ffn_norm", "ffn_up"};

/* 2 layers, untied output, 8 heads / 2 kv heads (n_gqa 4), rows of `ne0`; one value may be
** replaced by `poison` (NaN or huge) at tensor `poison_name`. */
static void write_synthetic(const char *path, int64_t ne0, const char *poison_name, float poison) {
    tm_gguf_kvlist *kv = tm_gguf_kvlist_new();
    assert_non_null(kv);
    assert_int_equal(tm_gguf_kvlist_set_str(kv, "general.architecture", "llama", NULL), TM_OK);
    assert_int_equal(tm_gguf_kvlist_set_u32(kv, "llama.block_count", 2, NULL), TM_OK);
    assert_int_equal(tm_gguf_kvlist_set_u32(kv, "llama.attention.head_count", 8, NULL), TM_OK);
    assert_int_equal(tm_gguf_kvlist_set_u32(kv, "llama.attention.head_count_kv", 2, NULL), TM_OK);
    assert_int_equal(tm_gguf_kvlist_set_u32(kv, "general.file_type", 0, NULL), TM_OK);
    assert_int_equal(tm_gguf_kvlist_set_str(kv, "split.count", "dropped", NULL), TM_OK);
    tm_gguf_wtensor t[24];
    char names[24][64];
    int n = 0;
    const char *top[] = {"token_embd.weight", "output.weight", "output_norm.weight"};
    for (int k = 0; k < 3; k++) {
        snprintf(names[n], sizeof names[n], "%s", top[k]);
        t[n].name = names[n];
        t[n].type = TM_GGML_F32;
        t[n].n_dims = k == 2 ? 1 : 2;
        t[n].ne[0] = ne0;
        t[n].ne[1] = k == 2 ? 1 : 4;
        t[n].ne[2] = t[n].ne[3] = 1;
        n++;
    }
    for (int l = 0; l < 2; l++)
        for (size_t k = 0; k < sizeof syn_layer_names / sizeof syn_layer_names[0]; k++) {
            snprintf(names[n], sizeof names[n], "blk.%d.%s.weight", l, syn_layer_names[k]);
            int norm = strstr(syn_layer_names[k], "norm") != NULL;
            t[n].name = names[n];
            t[n].type = TM_GGML_F32;
            t[n].n_dims = norm ? 1 : 2;
            t[n].ne[0] = ne0;
            t[n].ne[1] = norm ? 1 : 4;
            t[n].ne[2] = t[n].ne[3] = 1;
            n++;
        }
    tm_gguf_writer *w;
    tm_err e;
    if (tm_gguf_writer_open(path, kv, t, n, &w, &e)) fail_msg("%s", e.msg);
    for (int i = 0; i < n; i++) {
        int64_t nv = t[i].ne[0] * t[i].ne[1];
        float *x = malloc((size_t)nv * sizeof *x);
        for (int64_t k = 0; k < nv; k++) x[k] = sinf((float)(k * 7 + i * 13) * 0.37f) * (1.0f + (float)(k % 11) * 0.1f);
        if (poison_name && !strcmp(t[i].name, poison_name)) x[2 * ne0 + 40] = poison; /* row 2, block 40/bs */
        assert_int_equal(tm_gguf_writer_tensor_bytes(w, i), (uint64_t)nv * 4);
        assert_int_equal(tm_gguf_writer_write(w, i, 0, x, (size_t)nv * 4, NULL), TM_OK);
        free(x);
    }
    /* writing outside a tensor is refused */
    float z = 0;
    assert_int_equal(tm_gguf_writer_write(w, 0, tm_gguf_writer_tensor_bytes(w, 0), &z, 4, NULL), TM_E_INVALID_ARG);
    assert_int_equal(tm_gguf_writer_finish(w, NULL), TM_OK);
    tm_gguf_writer_free(w);
    tm_gguf_kvlist_free(kv);
}

struct expect { const char *name; int type; };

static void check_types(const tm_gguf_quantize_result *r, const struct expect *ex, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++) {
        const tm_gguf_quantize_tensor *t = find_t(r, ex[i].name);
        if (t->out_type != ex[i].type)
            fail_msg("%s: %s is %s, expected %s (%s)", what, ex[i].name,
                     tm_ggml_type_info_get(t->out_type)->name, tm_ggml_type_info_get(ex[i].type)->name, t->reason);
    }
}

static void test_synthetic_rules(void **state) {
    (void)state;
    char in[4096], out[4096];
    tmp_path(in, sizeof in, "syn256.gguf");
    write_synthetic(in, 256, NULL, 0);
    /* the writer's output opens, with the layout it promised */
    tm_file *f;
    tm_err e;
    if (tm_open(in, NULL, &f, &e)) fail_msg("%s", e.msg);
    assert_int_equal(tm_file_n_tensors(f), 21);
    const tm_tensor *t0 = tm_file_tensor(f, 0);
    assert_string_equal(t0->name, "token_embd.weight");
    assert_int_equal(t0->shape[0], 4);
    assert_int_equal(t0->shape[1], 256);
    for (int64_t i = 0; i < tm_file_n_tensors(f); i++) assert_int_equal(tm_file_tensor(f, i)->offset % 32, 0);
    tm_close(f);

    tm_gguf_quantize_result *r = NULL;
    const int F32 = TM_GGML_F32, Q2 = TM_GGML_Q2_K, Q3 = TM_GGML_Q3_K, Q4 = TM_GGML_Q4_K,
              Q5 = TM_GGML_Q5_K, Q6 = TM_GGML_Q6_K;
    /* Q2_K: output Q6_K; untied token_embd keeps Q2_K; attn_v Q4_K (n_gqa 4 >= 4);
    ** ffn_down and attn_output Q3_K; the rest Q2_K; norms F32 */
    assert_int_equal(quantize(in, "o-q2k.gguf", "Q2_K", NULL, &r, &e, out, sizeof out), TM_OK);
    const struct expect q2[] = {{"output.weight", Q6}, {"token_embd.weight", Q2},
        {"blk.0.attn_v.weight", Q4}, {"blk.1.attn_v.weight", Q4}, {"blk.0.ffn_down.weight", Q3},
        {"blk.1.attn_output.weight", Q3}, {"blk.0.attn_q.weight", Q2}, {"blk.1.ffn_up.weight", Q2},
        {"blk.0.attn_norm.weight", F32}, {"output_norm.weight", F32}};
    check_types(r, q2, sizeof q2 / sizeof q2[0], "Q2_K");
    /* output order: non-layer tensors by name, then layer by layer by name */
    assert_string_equal(r->tensors[0].name, "output.weight");
    assert_string_equal(r->tensors[1].name, "output_norm.weight");
    assert_string_equal(r->tensors[2].name, "token_embd.weight");
    assert_string_equal(r->tensors[3].name, "blk.0.attn_k.weight");
    free_res(r);
    /* metadata: kept, split.* dropped, quantization_version then file_type at the end */
    tm_gguf_kvlist *kv;
    assert_int_equal(tm_gguf_kvlist_read(out, &kv, NULL), TM_OK);
    int64_t nkv = tm_gguf_kvlist_count(kv);
    assert_int_equal(nkv, 6);
    assert_string_equal(tm_gguf_kvlist_key(kv, 0), "general.architecture");
    assert_string_equal(tm_gguf_kvlist_key(kv, nkv - 2), "general.quantization_version");
    assert_string_equal(tm_gguf_kvlist_key(kv, nkv - 1), "general.file_type");
    assert_int_equal(tm_gguf_kvlist_get_int(kv, "general.file_type", NULL), TM_FTYPE_Q2_K);
    assert_int_equal(tm_gguf_kvlist_find(kv, "split.count"), -1);
    tm_gguf_kvlist_free(kv);

    /* Q3_K_M: attn_v #0 and #1 Q5_K; ffn_down Q4_K; attn_output Q4_K */
    assert_int_equal(quantize(in, "o-q3km.gguf", "Q3_K_M", NULL, &r, &e, out, sizeof out), TM_OK);
    const struct expect q3m[] = {{"output.weight", Q6}, {"token_embd.weight", Q3},
        {"blk.0.attn_v.weight", Q5}, {"blk.1.attn_v.weight", Q5}, {"blk.0.ffn_down.weight", Q4},
        {"blk.1.attn_output.weight", Q4}, {"blk.0.ffn_gate.weight", Q3}};
    check_types(r, q3m, sizeof q3m / sizeof q3m[0], "Q3_K_M");
    free_res(r);
    /* Q3_K_L: attn_v, ffn_down, attn_output Q5_K */
    assert_int_equal(quantize(in, "o-q3kl.gguf", "Q3_K_L", NULL, &r, &e, out, sizeof out), TM_OK);
    const struct expect q3l[] = {{"blk.0.attn_v.weight", Q5}, {"blk.1.ffn_down.weight", Q5},
        {"blk.0.attn_output.weight", Q5}, {"blk.0.attn_q.weight", Q3}};
    check_types(r, q3l, sizeof q3l / sizeof q3l[0], "Q3_K_L");
    free_res(r);
    /* Q4_K_S: attn_v #0, #1 (< 4) Q5_K; ffn_down (layer < 2/8 = 0: none) Q4_K */
    assert_int_equal(quantize(in, "o-q4ks.gguf", "Q4_K_S", NULL, &r, &e, out, sizeof out), TM_OK);
    const struct expect q4s[] = {{"blk.1.attn_v.weight", Q5}, {"blk.0.ffn_down.weight", Q4},
        {"output.weight", Q6}, {"blk.0.attn_output.weight", Q4}};
    check_types(r, q4s, sizeof q4s / sizeof q4s[0], "Q4_K_S");
    free_res(r);
    /* Q5_K_M: use_more_bits(i, 2) holds for layer 1 only (i >= 7*2/8) */
    assert_int_equal(quantize(in, "o-q5km.gguf", "Q5_K_M", NULL, &r, &e, out, sizeof out), TM_OK);
    const struct expect q5m[] = {{"blk.0.attn_v.weight", Q5}, {"blk.1.attn_v.weight", Q6},
        {"blk.0.ffn_down.weight", Q5}, {"blk.1.ffn_down.weight", Q6}, {"output.weight", Q6}};
    check_types(r, q5m, sizeof q5m / sizeof q5m[0], "Q5_K_M");
    free_res(r);
    /* Q5_K_S and Q6_K: no bumps but the output */
    assert_int_equal(quantize(in, "o-q5ks.gguf", "Q5_K_S", NULL, &r, &e, out, sizeof out), TM_OK);
    const struct expect q5s[] = {{"blk.1.attn_v.weight", Q5}, {"blk.1.ffn_down.weight", Q5}, {"output.weight", Q6}};
    check_types(r, q5s, sizeof q5s / sizeof q5s[0], "Q5_K_S");
    free_res(r);
    /* --leave-output-tensor: output.weight copied as F32 */
    tm_gguf_quantize_params p = tm_gguf_quantize_params_default();
    p.leave_output_tensor = 1;
    assert_int_equal(quantize(in, "o-leave.gguf", "Q4_K_M", &p, &r, &e, out, sizeof out), TM_OK);
    const tm_gguf_quantize_tensor *ot = find_t(r, "output.weight");
    assert_int_equal(ot->out_type, F32);
    assert_int_equal(ot->quantized, 0);
    assert_non_null(strstr(ot->reason, "--leave-output-tensor"));
    assert_int_equal(find_t(r, "token_embd.weight")->out_type, Q4);
    free_res(r);
    /* --pure: every quantizable tensor Q4_K, output and attn_v included */
    p = tm_gguf_quantize_params_default();
    p.pure = 1;
    assert_int_equal(quantize(in, "o-pure.gguf", "Q4_K_M", &p, &r, &e, out, sizeof out), TM_OK);
    const struct expect pure[] = {{"output.weight", Q4}, {"blk.1.attn_v.weight", Q4},
        {"blk.1.ffn_down.weight", Q4}, {"output_norm.weight", F32}};
    check_types(r, pure, sizeof pure / sizeof pure[0], "pure");
    free_res(r);
    /* --tensor-type: last match wins; applies after the rules */
    const char *pats[] = {"attn_(q|k)", "blk\\.1\\.attn_q", "ffn_down"};
    const int tts[] = {TM_GGML_Q8_0, TM_GGML_Q5_0, TM_GGML_Q6_K};
    p = tm_gguf_quantize_params_default();
    p.tt_patterns = pats;
    p.tt_types = tts;
    p.n_tt = 3;
    assert_int_equal(quantize(in, "o-tt.gguf", "Q4_K_M", &p, &r, &e, out, sizeof out), TM_OK);
    const struct expect tt[] = {{"blk.0.attn_q.weight", TM_GGML_Q8_0}, {"blk.0.attn_k.weight", TM_GGML_Q8_0},
        {"blk.1.attn_q.weight", TM_GGML_Q5_0}, {"blk.0.ffn_down.weight", Q6}, {"blk.0.ffn_up.weight", Q4}};
    check_types(r, tt, sizeof tt / sizeof tt[0], "tensor-type");
    assert_non_null(strstr(find_t(r, "blk.1.attn_q.weight")->reason, "--tensor-type"));
    free_res(r);
    /* a bad regex is an argument error */
    const char *badpat[] = {"attn_(q"};
    p.tt_patterns = badpat;
    p.n_tt = 1;
    assert_int_equal(quantize(in, "o-bad.gguf", "Q4_K_M", &p, &r, &e, out, sizeof out), TM_E_INVALID_ARG);
    assert_false(exists(out));
}

/* Rows of 96 (a multiple of 32, not of 256): K types fall back as the reference does. */
static void test_synthetic_fallbacks(void **state) {
    (void)state;
    char in[4096], out[4096];
    tmp_path(in, sizeof in, "syn96.gguf");
    write_synthetic(in, 96, NULL, 0);
    tm_gguf_quantize_result *r = NULL;
    tm_err e;
    assert_int_equal(quantize(in, "f-q4km.gguf", "Q4_K_M", NULL, &r, &e, out, sizeof out), TM_OK);
    const struct expect q4m[] = {{"output.weight", TM_GGML_Q8_0}, {"blk.0.attn_q.weight", TM_GGML_Q5_0},
        {"blk.1.attn_v.weight", TM_GGML_Q8_0}, {"blk.1.ffn_down.weight", TM_GGML_Q8_0},
        {"blk.0.ffn_down.weight", TM_GGML_Q5_0}};
    check_types(r, q4m, sizeof q4m / sizeof q4m[0], "Q4_K_M rows 96");
    /* here every count is a real fallback (Q4_K -> Q5_0, Q6_K -> Q8_0), none refused */
    int64_t n_fb = 0, n_kept = 0;
    for (int64_t i = 0; i < r->n; i++) {
        n_fb += strstr(r->tensors[i].reason, ": fallback ") != NULL;
        n_kept += strstr(r->tensors[i].reason, "kept in F16") != NULL;
    }
    assert_true(n_fb >= 4);
    assert_int_equal(n_kept, 0);
    assert_int_equal(r->n_fallback, n_fb);
    free_res(r);
    assert_int_equal(quantize(in, "f-q5km.gguf", "Q5_K_M", NULL, &r, &e, out, sizeof out), TM_OK);
    const struct expect q5m[] = {{"blk.0.attn_q.weight", TM_GGML_Q5_1}, {"blk.1.ffn_down.weight", TM_GGML_Q8_0}};
    check_types(r, q5m, sizeof q5m / sizeof q5m[0], "Q5_K_M rows 96");
    free_res(r);
    assert_int_equal(quantize(in, "f-q3ks.gguf", "Q3_K_S", NULL, &r, &e, out, sizeof out), TM_OK);
    const struct expect q3s[] = {{"blk.0.attn_q.weight", TM_GGML_IQ4_NL}, {"blk.0.ffn_down.weight", TM_GGML_IQ4_NL}};
    check_types(r, q3s, sizeof q3s / sizeof q3s[0], "Q3_K_S rows 96");
    free_res(r);
    /* rows of 48: the fallback types do not fit either -> F16 (the reference's rule) */
    tmp_path(in, sizeof in, "syn48.gguf");
    write_synthetic(in, 48, NULL, 0);
    assert_int_equal(quantize(in, "f-q6k.gguf", "Q6_K", NULL, &r, &e, out, sizeof out), TM_OK);
    assert_int_equal(find_t(r, "blk.0.attn_q.weight")->out_type, TM_GGML_F16);
    assert_int_equal(find_t(r, "output.weight")->out_type, TM_GGML_F16);
    free_res(r);
}

/* An existing OUT: refused unless it is a previous tensormorph output and force is set; never
** the input itself, never a file tensormorph did not write. */
static void test_existing_output(void **state) {
    (void)state;
    char in[4096], out[4096];
    tmp_path(in, sizeof in, "synex.gguf");
    write_synthetic(in, 256, NULL, 0);
    tm_file *f;
    assert_int_equal(tm_open(in, NULL, &f, NULL), TM_OK);
    tm_gguf_quantize_params p = tm_gguf_quantize_params_default();
    tm_gguf_quantize_result *r = NULL;
    tm_err e;
    tmp_path(out, sizeof out, "ex-out.gguf");
    unlink(out);
    assert_int_equal(tm_gguf_quantize(f, out, &p, &r, &e), TM_OK);
    tm_gguf_quantize_result_free(r);
    r = NULL;
    size_t n1 = 0;
    uint8_t *first = (uint8_t *)tmt_read_bytes(out, &n1);
    assert_int_equal(tm_gguf_quantize(f, out, &p, &r, &e), TM_E_INVALID_ARG); /* no force */
    assert_non_null(strstr(e.msg, "--force"));
    p.ftype = TM_FTYPE_Q4_0;
    p.force = 1;
    assert_int_equal(tm_gguf_quantize(f, out, &p, &r, &e), TM_OK); /* replaced */
    tm_gguf_quantize_result_free(r);
    r = NULL;
    size_t n2 = 0;
    uint8_t *second = (uint8_t *)tmt_read_bytes(out, &n2);
    assert_true(n1 != n2 || memcmp(first, second, n1) != 0);
    free(first);
    free(second);
    /* a file without a manifest beside it is not ours: refused even with force */
    char other[4096];
    tmp_path(other, sizeof other, "notours.gguf");
    FILE *o = fopen(other, "wb");
    fputs("precious", o);
    fclose(o);
    assert_int_equal(tm_gguf_quantize(f, other, &p, &r, &e), TM_E_INVALID_ARG);
    assert_non_null(strstr(e.msg, "did not write"));
    size_t no = 0;
    uint8_t *kept = (uint8_t *)tmt_read_bytes(other, &no);
    assert_int_equal(no, 8);
    free(kept);
    /* the input itself */
    assert_int_equal(tm_gguf_quantize(f, in, &p, &r, &e), TM_E_INVALID_ARG);
    assert_non_null(strstr(e.msg, "is the input"));
    tm_close(f);
}

/* A block whose scale overflows f16 is refused naming file, tensor, row and block; NaN input
** is refused too; nothing is left at the output path. */
static void test_bad_values(void **state) {
    (void)state;
    char in[4096], out[4096];
    tmp_path(in, sizeof in, "synbig.gguf");
    write_synthetic(in, 256, "blk.1.ffn_gate.weight", 1e12f);
    tm_gguf_quantize_result *r = NULL;
    tm_err e;
    assert_int_equal(quantize(in, "b-q8.gguf", "Q8_0", NULL, &r, &e, out, sizeof out), TM_E_RANGE);
    assert_non_null(strstr(e.msg, "synbig.gguf"));
    assert_non_null(strstr(e.msg, "blk.1.ffn_gate.weight"));
    assert_non_null(strstr(e.msg, "row 2"));
    assert_non_null(strstr(e.msg, "block 1:"));
    assert_non_null(strstr(e.msg, "float16"));
    assert_false(exists(out));
    assert_true(no_temp_left("b-q8.gguf"));
    assert_int_equal(quantize(in, "b-q4k.gguf", "Q4_K_M", NULL, &r, &e, out, sizeof out), TM_E_RANGE);
    assert_non_null(strstr(e.msg, "block 0:"));
    tmp_path(in, sizeof in, "synnan.gguf");
    write_synthetic(in, 256, "blk.0.attn_q.weight", NAN);
    assert_int_equal(quantize(in, "b-nan.gguf", "Q4_0", NULL, &r, &e, out, sizeof out), TM_E_NONFINITE);
    assert_non_null(strstr(e.msg, "blk.0.attn_q.weight"));
    assert_non_null(strstr(e.msg, "NaN"));
    assert_false(exists(out));
}

/* safetensors F32/BF16 in, GGUF out: same names, each block what the quantizer makes of the
** source row; the real model's 64-wide rows give Q8_0 / F16 (172) as the rules say. */
static void test_safetensors_input(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    static const char *const srcs[] = {"stories260K-f32", "stories260K-bf16"};
    for (size_t k = 0; k < 2; k++) {
        char in[4096], out[4096];
        snprintf(in, sizeof in, "%s/models/safetensors/%s", tmv_shared_dir(), srcs[k]);
        tm_gguf_quantize_result *r = NULL;
        tm_err e;
        tm_status s = quantize(in, "st.gguf", "Q8_0", NULL, &r, &e, out, sizeof out);
        if (s) fail_msg("%s: %s", srcs[k], e.msg);
        tm_file *src, *q;
        assert_int_equal(tm_open(in, NULL, &src, NULL), TM_OK);
        assert_int_equal(tm_open(out, NULL, &q, NULL), TM_OK);
        assert_int_equal(tm_file_format(q), TM_FMT_GGUF);
        assert_int_equal(tm_file_n_tensors(q), tm_file_n_tensors(src));
        int n_q8 = 0;
        for (int64_t i = 0; i < tm_file_n_tensors(q); i++) {
            const tm_tensor *qt = tm_file_tensor(q, i);
            int64_t si = tm_file_find(src, qt->name);
            assert_true(si >= 0);
            const tm_tensor *st = tm_file_tensor(src, si);
            assert_int_equal(qt->ndim, st->ndim);
            for (int d = 0; d < st->ndim; d++) assert_int_equal(qt->shape[d], st->shape[d]);
            int ty = file_tensor_type(q, i);
            if (st->ndim == 1) { assert_int_equal(ty, k == 0 ? TM_GGML_F32 : TM_GGML_BF16); continue; }
            int64_t ne0 = st->shape[st->ndim - 1];
            assert_int_equal(ty, ne0 % 32 ? TM_GGML_F16 : TM_GGML_Q8_0);
            if (ty != TM_GGML_Q8_0) continue;
            n_q8++;
            float *x = malloc((size_t)st->n_elems * sizeof *x);
            assert_int_equal(tm_tensor_read_f32(src, si, 0, st->n_elems, x, NULL), TM_OK);
            uint64_t rb;
            assert_int_equal(tm_ggml_row_bytes(TM_GGML_Q8_0, ne0, &rb, NULL), TM_OK);
            uint64_t nb = rb * (uint64_t)(st->n_elems / ne0);
            uint8_t *want = malloc((size_t)nb);
            for (int64_t rr = 0; rr < st->n_elems / ne0; rr++)
                assert_int_equal(tm_gq_quantize_row(TM_GGML_Q8_0, x + rr * ne0, ne0, want + rr * rb, NULL, NULL), TM_OK);
            const void *got;
            assert_int_equal(qt->n_bytes, nb);
            assert_int_equal(tm_tensor_data(q, i, 0, nb, &got, NULL), TM_OK);
            assert_memory_equal(got, want, (size_t)nb);
            free(want);
            free(x);
        }
        assert_int_equal(n_q8, 31);
        tm_close(q);
        tm_close(src);
        free_res(r);
    }
}

/* An F16 GGUF source: quantized tensors are what the quantizer makes of the F16 values
** widened to float32; tensors whose type stays F16 (the 172-wide ffn_down fallback) are
** copied byte for byte. */
static void test_f16_source(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char in[4096], out[4096];
    snprintf(in, sizeof in, "%s/models/gguf/stories260K-F16.gguf", tmv_shared_dir());
    tm_gguf_quantize_result *r = NULL;
    tm_err e;
    if (quantize(in, "f16src.gguf", "Q4_K_M", NULL, &r, &e, out, sizeof out)) fail_msg("%s", e.msg);
    tm_file *src, *q;
    assert_int_equal(tm_open(in, NULL, &src, NULL), TM_OK);
    assert_int_equal(tm_open(out, NULL, &q, NULL), TM_OK);
    int n_copied = 0, n_quant = 0;
    for (int64_t i = 0; i < tm_file_n_tensors(q); i++) {
        const tm_tensor *qt = tm_file_tensor(q, i);
        int64_t si = tm_file_find(src, qt->name);
        assert_true(si >= 0);
        const tm_tensor *st = tm_file_tensor(src, si);
        int ty = file_tensor_type(q, i);
        const void *a, *b;
        if (ty == file_tensor_type(src, si)) {
            assert_int_equal(qt->n_bytes, st->n_bytes);
            assert_int_equal(tm_tensor_data(q, i, 0, qt->n_bytes, &a, NULL), TM_OK);
            assert_int_equal(tm_tensor_data(src, si, 0, st->n_bytes, &b, NULL), TM_OK);
            assert_memory_equal(a, b, (size_t)qt->n_bytes);
            n_copied++;
            continue;
        }
        int64_t ne0 = st->shape[st->ndim - 1], rows = st->n_elems / ne0;
        float *x = malloc((size_t)st->n_elems * sizeof *x);
        assert_int_equal(tm_tensor_read_f32(src, si, 0, st->n_elems, x, NULL), TM_OK);
        uint64_t rb;
        assert_int_equal(tm_ggml_row_bytes(ty, ne0, &rb, NULL), TM_OK);
        uint8_t *want = malloc((size_t)(rb * (uint64_t)rows));
        for (int64_t rr = 0; rr < rows; rr++)
            assert_int_equal(tm_gq_quantize_row_ref(ty, x + rr * ne0, ne0, want + rr * rb, NULL, NULL), TM_OK);
        assert_int_equal(qt->n_bytes, rb * (uint64_t)rows);
        assert_int_equal(tm_tensor_data(q, i, 0, qt->n_bytes, &a, NULL), TM_OK);
        assert_memory_equal(a, want, (size_t)qt->n_bytes);
        n_quant++;
        free(want);
        free(x);
    }
    assert_int_equal(n_quant, 31);  /* 28 Q5_0 + 3 Q8_0, as the F32 source gives */
    assert_int_equal(n_copied, 16); /* 11 F32 norms + 5 F16 ffn_down */
    tm_close(q);
    tm_close(src);
    free_res(r);
}

static void test_kvlist(void **state) {
    (void)state;
    tm_gguf_kvlist *l = tm_gguf_kvlist_new();
    tm_err e;
    assert_int_equal(tm_gguf_kvlist_set_u32(l, "a", 1, NULL), TM_OK);
    assert_int_equal(tm_gguf_kvlist_set_str(l, "b", "hello", NULL), TM_OK);
    assert_int_equal(tm_gguf_kvlist_set_u32(l, "a", 7, NULL), TM_OK); /* moves to the end */
    assert_string_equal(tm_gguf_kvlist_key(l, 0), "b");
    assert_string_equal(tm_gguf_kvlist_key(l, 1), "a");
    assert_int_equal(tm_gguf_kvlist_get_int(l, "a", NULL), 7);
    char *sv = tm_gguf_kvlist_get_str(l, "b");
    assert_string_equal(sv, "hello");
    free(sv);
    /* a raw array of 2 strings; a malformed one is refused */
    uint8_t arr[12 + 8 + 1 + 8 + 2];
    memset(arr, 0, sizeof arr);
    arr[0] = TM_GGUF_STRING;
    arr[4] = 2;
    arr[12] = 1; arr[20] = 'x';
    arr[21] = 2; arr[29] = 'y'; arr[30] = 'z';
    assert_int_equal(tm_gguf_kvlist_set_raw(l, "arr", TM_GGUF_ARRAY, arr, sizeof arr, NULL), TM_OK);
    assert_int_equal(tm_gguf_kvlist_set_raw(l, "arr2", TM_GGUF_ARRAY, arr, sizeof arr - 1, &e), TM_E_INVALID_ARG);
    assert_int_equal(tm_gguf_kvlist_set_raw(l, "t", 13, arr, 4, &e), TM_E_INVALID_ARG);
    tm_gguf_kvlist_remove(l, "b");
    assert_int_equal(tm_gguf_kvlist_count(l), 2);
    assert_int_equal(tm_gguf_kvlist_find(l, "b"), -1);
    tm_gguf_kvlist_free(l);
    /* reading a file that is not GGUF */
    char p[4096];
    tmp_path(p, sizeof p, "notgguf.bin");
    FILE *f = fopen(p, "wb");
    fputs("this is not a gguf file at all, not even close", f);
    fclose(f);
    tm_gguf_kvlist *k2;
    assert_int_equal(tm_gguf_kvlist_read(p, &k2, &e), TM_E_CORRUPT);
    assert_non_null(strstr(e.msg, "notgguf.bin"));
    /* metadata larger than the reader's first 1 MiB read: read back whole, bit for bit */
    {
        tm_gguf_kvlist *big = tm_gguf_kvlist_new();
        size_t blen = 3u << 20;
        char *txt = malloc(blen + 1);
        for (size_t i = 0; i < blen; i++) txt[i] = (char)('a' + i % 26);
        txt[blen] = '\0';
        assert_int_equal(tm_gguf_kvlist_set_u32(big, "first", 5, NULL), TM_OK);
        assert_int_equal(tm_gguf_kvlist_set_str(big, "big", txt, NULL), TM_OK);
        assert_int_equal(tm_gguf_kvlist_set_u32(big, "after", 9, NULL), TM_OK);
        tm_gguf_wtensor one = {"w", TM_GGML_F32, 1, {8, 1, 1, 1}};
        tm_gguf_writer *bw;
        tmp_path(p, sizeof p, "bigmeta.gguf");
        assert_int_equal(tm_gguf_writer_open(p, big, &one, 1, &bw, NULL), TM_OK);
        float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        assert_int_equal(tm_gguf_writer_write(bw, 0, 0, v, sizeof v, NULL), TM_OK);
        assert_int_equal(tm_gguf_writer_finish(bw, NULL), TM_OK);
        tm_gguf_writer_free(bw);
        tm_gguf_kvlist *back;
        if (tm_gguf_kvlist_read(p, &back, &e)) fail_msg("%s", e.msg);
        assert_int_equal(tm_gguf_kvlist_count(back), 3);
        char *got = tm_gguf_kvlist_get_str(back, "big");
        assert_non_null(got);
        assert_string_equal(got, txt);
        assert_int_equal(tm_gguf_kvlist_get_int(back, "after", NULL), 9);
        tm_file *bf;
        assert_int_equal(tm_open(p, NULL, &bf, NULL), TM_OK); /* the reader agrees */
        float rv[8];
        assert_int_equal(tm_tensor_read_f32(bf, 0, 0, 8, rv, NULL), TM_OK);
        assert_memory_equal(rv, v, sizeof v);
        tm_close(bf);
        free(got);
        free(txt);
        tm_gguf_kvlist_free(back);
        tm_gguf_kvlist_free(big);
    }
    /* a duplicate tensor name is refused by the writer */
    tm_gguf_wtensor t[2] = {{"x", TM_GGML_F32, 1, {4, 1, 1, 1}}, {"x", TM_GGML_F32, 1, {4, 1, 1, 1}}};
    tm_gguf_writer *w;
    tmp_path(p, sizeof p, "dup.gguf");
    assert_int_equal(tm_gguf_writer_open(p, NULL, t, 2, &w, &e), TM_E_INVALID_ARG);
    assert_non_null(strstr(e.msg, "twice"));
    t[1].name = "y";
    t[1].type = TM_GGML_Q4_K; /* 4 is not a multiple of 256 */
    assert_int_equal(tm_gguf_writer_open(p, NULL, t, 2, &w, &e), TM_E_INVALID_ARG);
    assert_false(exists(p));
    /* names, aliases */
    assert_int_equal(tm_gguf_ftype_from_name("q4_k"), TM_FTYPE_Q4_K_M);
    assert_int_equal(tm_gguf_ftype_from_name("Q3_K_S"), TM_FTYPE_Q3_K_S);
    assert_int_equal(tm_gguf_ftype_from_name("Q4_K_X"), -1);
    assert_int_equal(tm_gguf_ftype_default_type(TM_FTYPE_Q5_K_S), TM_GGML_Q5_K);
}

/* The CLI: OUT ending in .gguf dispatches here; usage errors exit 2, refusals 3. */
static int run_cmd(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void test_cli(void **state) {
    (void)state;
    const char *bin = getenv("TM_BIN");
    if (!bin || !*bin) skip();
    char in[4096], out[4096], js[4096];
    tmp_path(in, sizeof in, "clisyn.gguf");
    write_synthetic(in, 256, NULL, 0);
    tmp_path(out, sizeof out, "cli.gguf");
    tmp_path(js, sizeof js, "cli.json");
    assert_int_equal(run_cmd("'%s' quantize '%s' -o '%s' --type q5_k_m --tensor-type 'attn_q=Q8_0' --json > '%s'", bin, in, out, js), 0);
    json_t *d = json_load_file(js, 0, NULL);
    assert_non_null(d);
    assert_string_equal(json_string_value(json_object_get(d, "schema")), "tensormorph.quantize/1");
    json_t *m = json_object_get(d, "manifest");
    assert_string_equal(json_string_value(json_object_get(json_object_get(m, "recipe"), "file_type")), "Q5_K_M");
    int seen = 0;
    json_t *ts = json_object_get(m, "tensors");
    for (size_t i = 0; i < json_array_size(ts); i++) {
        json_t *o = json_array_get(ts, i);
        if (!strcmp(json_string_value(json_object_get(o, "name")), "blk.0.attn_q.weight")) {
            assert_string_equal(json_string_value(json_object_get(o, "type")), "Q8_0");
            seen = 1;
        }
    }
    assert_true(seen);
    json_decref(d);
    /* --kernel reaches the GGUF form: every set writes the same bytes; an unknown one is a usage error */
    char kout[4096];
    tmp_path(kout, sizeof kout, "cli-kernel.gguf");
    assert_int_equal(run_cmd("'%s' quantize '%s' -o '%s' --type q5_k_m --tensor-type 'attn_q=Q8_0' --kernel ref -q", bin, in, kout), 0);
    assert_same_file(kout, out);
    unlink(kout);
    assert_int_equal(run_cmd("TM_FORCE_KERNEL=ref '%s' quantize '%s' -o '%s' --type q5_k_m --tensor-type 'attn_q=Q8_0' -q", bin, in, kout), 0);
    assert_same_file(kout, out);
    assert_int_equal(run_cmd("'%s' quantize '%s' -o '%s' --type Q8_0 --kernel fast --force 2>/dev/null", bin, in, kout), 2);
    assert_int_equal(run_cmd("'%s' quantize '%s' -o '%s' --type Q4_K_X 2>/dev/null", bin, in, out), 2);
    assert_int_equal(run_cmd("'%s' quantize '%s' -o '%s' --type Q4_0 -g group:32 2>/dev/null", bin, in, out), 2);
    assert_int_equal(run_cmd("'%s' quantize '%s' -o '%s' --tensor-type 'x=Q9' --type Q4_0 2>/dev/null", bin, in, out), 2);
    char dir[4096];
    tmp_path(dir, sizeof dir, "clidir");
    assert_int_equal(run_cmd("'%s' quantize '%s' -o '%s' --pure 2>/dev/null", bin, in, dir), 2);
    tmp_path(in, sizeof in, "clibig.gguf");
    write_synthetic(in, 256, "blk.0.ffn_up.weight", 3e9f);
    tmp_path(out, sizeof out, "clibig-out.gguf");
    assert_int_equal(run_cmd("'%s' quantize '%s' -o '%s' --type Q8_0 2>/dev/null", bin, in, out), 3);
    assert_false(exists(out));
    /* an output directory that does not exist: exit 4, the message names OUT and the directory,
    ** not the temporary file */
    char err_path[4096], nodir[4096];
    tmp_path(err_path, sizeof err_path, "cli-err.txt");
    tmp_path(nodir, sizeof nodir, "no-such-dir/y.gguf");
    tmp_path(in, sizeof in, "clisyn.gguf");
    assert_int_equal(run_cmd("'%s' quantize '%s' -o '%s' --type Q8_0 2>'%s'", bin, in, nodir, err_path), 4);
    size_t ne = 0;
    char *msg = tmt_read_bytes(err_path, &ne);
    assert_non_null(msg);
    msg = realloc(msg, ne + 1);
    msg[ne] = '\0';
    assert_non_null(strstr(msg, nodir));
    assert_non_null(strstr(msg, "does not exist"));
    assert_null(strstr(msg, ".tmp."));
    free(msg);
    /* re-quantizing a quantized GGUF: input unsupported, exit 3 (as for every other format) */
    tmp_path(out, sizeof out, "cli-q8.gguf");
    assert_int_equal(run_cmd("'%s' quantize '%s' -o '%s' --type Q8_0 -q", bin, in, out), 0);
    tmp_path(js, sizeof js, "cli-q4.gguf");
    assert_int_equal(run_cmd("'%s' quantize '%s' -o '%s' --type Q4_0 2>/dev/null", bin, out, js), 3);
}

/* qdiff on llama-quantize-identical Q8_0: codes chosen with the float32 step d = amax/127, d
** then stored as f16, so some errors exceed half an LSB; docs/qdiff.md exempts ggml block
** types from the half-LSB and clipping flags, while RMSE stays near plain rounding. */
static void test_qdiff_ggml_half_lsb(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char in[4096], out[4096];
    snprintf(in, sizeof in, "%s/models/gguf/stories260K-F32.gguf", tmv_shared_dir());
    tm_gguf_quantize_result *res = NULL;
    tm_err e;
    assert_int_equal(quantize(in, "qd-q80.gguf", "Q8_0", NULL, &res, &e, out, sizeof out), TM_OK);
    free_res(res);
    tm_file *ref = NULL, *q = NULL;
    assert_int_equal(tm_open(in, NULL, &ref, &e), TM_OK);
    assert_int_equal(tm_open(out, NULL, &q, &e), TM_OK);
    tm_qdiff_params qp;
    memset(&qp, 0, sizeof qp);
    qp.n_threads = 2;
    tm_qdiff_result *r = NULL;
    assert_int_equal(tm_qdiff(ref, q, &qp, &r, &e), TM_OK);
    double max_lsb = 0;
    int64_t n_beyond = 0;
    for (int64_t i = 0; i < r->n; i++) {
        const tm_qdiff_entry *en = &r->entries[i];
        if (en->e.max_err_lsb > max_lsb) max_lsb = en->e.max_err_lsb;
        n_beyond += en->e.n_beyond_half_lsb;
        assert_true(en->clip_expected);
        assert_true(en->e.rmse_lsb < 0.35);
        assert_null(strstr(en->reason, "half an LSB"));
    }
    assert_true(r->n > 0);
    assert_true(max_lsb > 0.5 && max_lsb < 0.6);
    assert_true(n_beyond > 0);
    tm_qdiff_free(r);
    tm_close(q);
    tm_close(ref);
}

static int setup(void **state) {
    (void)state;
    const char *b = getenv("TM_BUILD");
    snprintf(g_tmp, sizeof g_tmp, "%s/test_gguf_quantize.%d", b && *b ? b : "/tmp", (int)getpid());
    mkdir(g_tmp, 0755);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kvlist),
        cmocka_unit_test(test_reference_rows256),
        cmocka_unit_test(test_reference_real_shapes),
        cmocka_unit_test(test_kernel_sets),
        cmocka_unit_test(test_f16_keep_and_strict),
        cmocka_unit_test(test_synthetic_rules),
        cmocka_unit_test(test_synthetic_fallbacks),
        cmocka_unit_test(test_existing_output),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_safetensors_input),
        cmocka_unit_test(test_f16_source),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_qdiff_ggml_half_lsb),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
