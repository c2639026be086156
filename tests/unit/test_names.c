/* test_names.c: tensor names across conventions (issue 12 item 10): the HF <-> llama.cpp name
** table, the q/k row permutation of llama.cpp's converter (checked against a literal
** reshape/swapaxes written here), and diff / qdiff of ../shared's stories260K safetensors
** against its GGUF conversions, with qdiff's SQNR recomputed here from the two files. */
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
#include <unistd.h>

#include "helpers/cli_run.h"
#include "helpers/vectors.h"
#include "tensormorph.h"

static void test_name_table(void **state) {
    (void)state;
    static const struct { const char *hf, *gguf; tm_rope_rows rope; } cases[] = {
        {"model.embed_tokens.weight", "token_embd.weight", TM_ROPE_NONE},
        {"lm_head.weight", "output.weight", TM_ROPE_NONE},
        {"model.norm.weight", "output_norm.weight", TM_ROPE_NONE},
        {"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight", TM_ROPE_Q},
        {"model.layers.17.self_attn.k_proj.bias", "blk.17.attn_k.bias", TM_ROPE_K},
        {"model.layers.3.self_attn.v_proj.weight", "blk.3.attn_v.weight", TM_ROPE_NONE},
        {"model.layers.3.self_attn.o_proj.weight", "blk.3.attn_output.weight", TM_ROPE_NONE},
        {"model.layers.4.mlp.gate_proj.weight", "blk.4.ffn_gate.weight", TM_ROPE_NONE},
        {"model.layers.4.mlp.up_proj.weight", "blk.4.ffn_up.weight", TM_ROPE_NONE},
        {"model.layers.4.mlp.down_proj.weight", "blk.4.ffn_down.weight", TM_ROPE_NONE},
        {"model.layers.12.input_layernorm.weight", "blk.12.attn_norm.weight", TM_ROPE_NONE},
        {"model.layers.12.post_attention_layernorm.weight", "blk.12.ffn_norm.weight", TM_ROPE_NONE},
    };
    char buf[128];
    tm_rope_rows rope;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(tm_name_to_gguf(cases[i].hf, buf, sizeof buf, &rope), 1);
        assert_string_equal(buf, cases[i].gguf);
        assert_int_equal(rope, cases[i].rope);
        assert_int_equal(tm_name_from_gguf(cases[i].gguf, buf, sizeof buf, &rope), 1);
        assert_string_equal(buf, cases[i].hf);
        assert_int_equal(rope, cases[i].rope);
    }
    /* not in the table, a missing layer number, a foreign suffix, a buffer too small */
    assert_int_equal(tm_name_to_gguf("model.layers.x.mlp.up_proj.weight", buf, sizeof buf, NULL), 0);
    assert_string_equal(buf, "");
    assert_int_equal(tm_name_to_gguf("model.layers.1.mlp.up_proj.scales", buf, sizeof buf, NULL), 0);
    assert_int_equal(tm_name_from_gguf("blk..attn_q.weight", buf, sizeof buf, NULL), 0);
    assert_int_equal(tm_name_from_gguf("rope_freqs.weight", buf, sizeof buf, NULL), 0);
    assert_int_equal(tm_name_to_gguf("model.layers.1.mlp.up_proj.weight", buf, 8, NULL), 0);
    int n = 0;
    const tm_name_rule *r = tm_name_rules(&n);
    assert_int_equal(n, 12);
    assert_string_equal(r[0].hf, "model.embed_tokens");
}

/* llama.cpp's converter, literally: w.reshape(n_head, 2, rows/n_head/2, cols).swapaxes(1, 2)
** .reshape(rows, cols) lists GGUF rows in the order (h, i, j) of HF row h*2*half + j*half + i. */
static void literal_permute(int64_t rows, int n_head, int64_t *gguf_to_hf) {
    int64_t half = rows / n_head / 2, g = 0;
    for (int h = 0; h < n_head; h++)
        for (int64_t i = 0; i < half; i++)
            for (int j = 0; j < 2; j++) gguf_to_hf[g++] = h * 2 * half + j * half + i;
}

static void test_rope_rows(void **state) {
    (void)state;
    static const struct { int64_t rows; int heads; } shapes[] = {{64, 8}, {32, 4}, {4096, 32}, {1024, 8}, {2, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t R = shapes[s].rows;
        int64_t *m = malloc((size_t)R * sizeof *m);
        literal_permute(R, shapes[s].heads, m);
        for (int64_t g = 0; g < R; g++) {
            assert_int_equal(tm_rope_row_hf(g, R, shapes[s].heads), m[g]);
            assert_int_equal(tm_rope_row_gguf(m[g], R, shapes[s].heads), g);
        }
        free(m);
    }
    assert_int_equal(tm_rope_row_hf(0, 60, 8), -1); /* 60 rows do not split into 8 heads x 2 */
    assert_int_equal(tm_rope_row_hf(64, 64, 8), -1);
    assert_int_equal(tm_rope_row_gguf(0, 64, 0), -1);
}

static char g_st[600], g_f32[600], g_q4[600];

static int paths(void) {
    if (!tmv_require_shared()) return 0;
    const char *S = tmv_shared_dir();
    snprintf(g_st, sizeof g_st, "%s/models/safetensors/stories260K-f32", S);
    snprintf(g_f32, sizeof g_f32, "%s/models/gguf/stories260K-F32.gguf", S);
    snprintf(g_q4, sizeof g_q4, "%s/models/gguf/stories260K-Q4_K_M.gguf", S);
    return 1;
}

static void test_diff_safetensors_gguf(void **state) {
    (void)state;
    if (!paths()) return;
    for (int order = 0; order < 2; order++) {
        json_t *d = tmt_run_json(0, "%s diff %s %s --json", tmt_bin(), order ? g_f32 : g_st, order ? g_st : g_f32);
        json_t *ts = json_object_get(d, "tensors"), *t;
        assert_int_equal(json_array_size(ts), 47);
        assert_int_equal(json_integer_value(json_object_get(d, "n_differ")), 0);
        assert_int_equal(json_integer_value(json_object_get(d, "n_renamed")), 47);
        size_t i;
        json_array_foreach(ts, i, t) {
            assert_string_equal(json_string_value(json_object_get(t, "status")), "same");
            assert_true(tmt_num(t, "max_abs_diff") == 0);
        }
        json_t *q = tmt_find_named(ts, order ? "blk.2.attn_q.weight" : "model.layers.2.self_attn.q_proj.weight");
        assert_non_null(q);
        assert_string_equal(json_string_value(json_object_get(q, "b_name")),
                            order ? "model.layers.2.self_attn.q_proj.weight" : "blk.2.attn_q.weight");
        json_decref(d);
    }
}

/* SQNR of GGUF tensor gname against HF tensor hname, HF rows taken in GGUF order when heads > 0 */
static double sqnr_here(tm_file *st, tm_file *gg, const char *hname, const char *gname, int heads) {
    int64_t hi = tm_file_find(st, hname), gi = tm_file_find(gg, gname);
    assert_true(hi >= 0 && gi >= 0);
    const tm_tensor *ht = tm_file_tensor(st, hi);
    int64_t R = ht->shape[0], C = ht->n_elems / R, n = ht->n_elems;
    float *x = malloc((size_t)n * sizeof *x), *xq = malloc((size_t)n * sizeof *xq);
    int64_t *m = malloc((size_t)R * sizeof *m);
    assert_int_equal(tm_tensor_read_f32(st, hi, 0, n, x, NULL), TM_OK);
    assert_int_equal(tm_tensor_read_f32(gg, gi, 0, n, xq, NULL), TM_OK);
    if (heads) literal_permute(R, heads, m);
    else for (int64_t r = 0; r < R; r++) m[r] = r;
    double sx = 0, se = 0;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            double a = x[m[r] * C + c], e = a - xq[r * C + c];
            sx += a * a;
            se += e * e;
        }
    free(x); free(xq); free(m);
    return 10.0 * log10(sx / se);
}

static void test_qdiff_safetensors_q4km(void **state) {
    (void)state;
    if (!paths()) return;
    json_t *d = tmt_run_json(0, "%s qdiff %s %s --json", tmt_bin(), g_st, g_q4);
    json_t *ts = json_object_get(d, "tensors");
    assert_int_equal(json_array_size(ts), 31); /* every quantized tensor found its source */
    assert_int_equal(json_integer_value(json_object_get(d, "n_unmatched")), 0);
    tm_file *st, *gg;
    assert_int_equal(tm_open(g_st, NULL, &st, NULL), TM_OK);
    assert_int_equal(tm_open(g_q4, NULL, &gg, NULL), TM_OK);
    static const struct { const char *hf, *gguf; int heads; } cases[] = {
        {"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight", 8},
        {"model.layers.3.self_attn.k_proj.weight", "blk.3.attn_k.weight", 4},
        {"model.layers.1.mlp.gate_proj.weight", "blk.1.ffn_gate.weight", 0},
        {"model.embed_tokens.weight", "token_embd.weight", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *t = tmt_find_named(ts, cases[i].gguf);
        assert_non_null(t);
        assert_string_equal(json_string_value(json_object_get(t, "ref_name")), cases[i].hf);
        double want = sqnr_here(st, gg, cases[i].hf, cases[i].gguf, cases[i].heads), got = tmt_num(t, "sqnr_db");
        if (fabs(got - want) > 1e-6 * fabs(want)) fail_msg("%s: qdiff SQNR %.9g, here %.9g", cases[i].gguf, got, want);
        assert_true(want > 20); /* 5-bit and 8-bit codes: over 20 dB when rows pair correctly */
        if (cases[i].heads) /* without undoing the permutation the rows would not pair */
            assert_true(sqnr_here(st, gg, cases[i].hf, cases[i].gguf, 0) < 5);
    }
    tm_close(st);
    tm_close(gg);
    json_decref(d);
}

/* The "order is qdiff REF QUANT" hint only when swapping the arguments would match. */
static void test_qdiff_order_hint(void **state) {
    (void)state;
    if (!paths()) return;
    char *err = NULL;
    int rc = tmt_run(&err, "%s qdiff %s %s 2>&1", tmt_bin(), g_q4, g_st);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "the order is qdiff REF QUANT"));
    free(err);
    /* two float files (HF safetensors and its llama.cpp GGUF): a plain weight diff across the
    ** naming conventions, q/k rows un-permuted, every tensor exact (docs/qdiff.md) */
    json_t *d = tmt_run_json(0, "%s qdiff %s %s --json", tmt_bin(), g_st, g_f32);
    assert_true(json_is_true(json_object_get(d, "plain")));
    assert_int_equal(json_integer_value(json_object_get(d, "n_unmatched")), 0);
    size_t k;
    json_t *t;
    assert_true(json_array_size(json_object_get(d, "tensors")) > 10);
    json_array_foreach(json_object_get(d, "tensors"), k, t)
        assert_string_equal(json_string_value(json_object_get(t, "sqnr_db")), "inf");
    json_decref(d);
    /* nothing to compare, and swapping would not help: no hint */
    char vocab[700];
    snprintf(vocab, sizeof vocab, "%.600s", g_f32);
    char *slash = strrchr(vocab, '/');
    snprintf(slash + 1, sizeof vocab - (size_t)(slash + 1 - vocab), "ggml-vocab-llama-spm.gguf");
    rc = tmt_run(&err, "%s qdiff %s %s 2>&1", tmt_bin(), g_st, vocab);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "holds no quantized tensor"));
    assert_null(strstr(err, "the order is"));
    free(err);
}

/* ---- issue 12 item 8: GGUF tensor names of 64 bytes or more ---------------------------------- */

/* A safetensors file of two F32 [2, 32] tensors named a and b (values i/64 - 0.5). */
static void write_st(const char *path, const char *a, const char *b) {
    char hdr[1024];
    int n = snprintf(hdr, sizeof hdr,
                     "{\"%s\":{\"dtype\":\"F32\",\"shape\":[2,32],\"data_offsets\":[0,256]},"
                     "\"%s\":{\"dtype\":\"F32\",\"shape\":[2,32],\"data_offsets\":[256,512]}}", a, b);
    while (n % 8) hdr[n++] = ' ';
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    uint64_t len = (uint64_t)n;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(len >> (8 * i));
    fwrite(le, 1, 8, fp);
    fwrite(hdr, 1, (size_t)n, fp);
    for (int i = 0; i < 128; i++) {
        float v = (float)(i % 64) / 64.0f - 0.5f;
        fwrite(&v, 4, 1, fp);
    }
    fclose(fp);
}

/* "model.vision_tower.vision_model.encoder.layers.10.self_attn.q_proj.weight": 73 bytes */
#define LONG_NAME "model.vision_tower.vision_model.encoder.layers.10.self_attn.q_proj.weight"
/* exactly 63 and 64 bytes */
#define NAME63 "model.layers.0.mlp.experts.12.aaaaaaaaaaaaaaaaaaaaaaaaaa.weight"
#define NAME64 "model.layers.0.mlp.experts.12.aaaaaaaaaaaaaaaaaaaaaaaaaaa.weight"

static void test_gguf_long_names(void **state) {
    (void)state;
    assert_int_equal(strlen(LONG_NAME), 73);
    assert_int_equal(strlen(NAME63), 63);
    assert_int_equal(strlen(NAME64), 64);
    char dir[] = "/tmp/tm_names_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char in[128], in63[128], out[128], *o = NULL;
    snprintf(in, sizeof in, "%s/long.safetensors", dir);
    snprintf(in63, sizeof in63, "%s/n63.safetensors", dir);
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    write_st(in, LONG_NAME, "model.norm.weight");
    write_st(in63, NAME63, NAME64);
    /* refused by default: exit 3 naming the tensor and its length, nothing at OUT */
    int rc = tmt_run(&o, "%s quantize %s -o %s -t Q8_0 --no-checksums 2>&1", tmt_bin(), in, out);
    assert_int_equal(rc, 3);
    assert_non_null(strstr(o, "'" LONG_NAME "'"));
    assert_non_null(strstr(o, "73 bytes"));
    assert_non_null(strstr(o, "--allow-long-names"));
    assert_false(tmt_exists(out));
    free(o);
    /* the boundary: 63 bytes is fine, 64 is refused (llama.cpp: name.length() >= GGML_MAX_NAME) */
    rc = tmt_run(&o, "%s quantize %s -o %s -t Q8_0 --no-checksums 2>&1", tmt_bin(), in63, out);
    assert_int_equal(rc, 3);
    assert_non_null(strstr(o, "'" NAME64 "'"));
    assert_non_null(strstr(o, "64 bytes"));
    assert_null(strstr(o, "'" NAME63 "'"));
    free(o);
    /* --allow-long-names writes it, with a warning; inspect warns on the file */
    rc = tmt_run(&o, "%s quantize %s -o %s -t Q8_0 --no-checksums --allow-long-names 2>&1 >/dev/null", tmt_bin(), in, out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(o, "warning"));
    assert_non_null(strstr(o, "'" LONG_NAME "'"));
    assert_true(tmt_exists(out));
    free(o);
    json_t *d = tmt_run_json(0, "%s inspect %s --json", tmt_bin(), out);
    json_t *w = json_object_get(d, "warnings");
    assert_int_equal(json_array_size(w), 1);
    assert_non_null(strstr(json_string_value(json_array_get(w, 0)), "73 bytes"));
    assert_non_null(strstr(json_string_value(json_array_get(w, 0)), LONG_NAME));
    json_decref(d);
    rc = tmt_run(&o, "%s inspect %s", tmt_bin(), out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(o, "warning:"));
    free(o);
    /* other outputs do not take the option */
    rc = tmt_run(&o, "%s quantize %s -o %s/ct --allow-long-names 2>&1", tmt_bin(), in, dir);
    assert_int_equal(rc, 2);
    free(o);
    /* the writer itself */
    tm_gguf_wtensor t = {NAME64, TM_GGML_F32, 1, {32, 1, 1, 1}};
    tm_gguf_writer *gw = NULL;
    tm_err e;
    char p2[160];
    snprintf(p2, sizeof p2, "%s/w.gguf", dir);
    assert_int_equal(tm_gguf_writer_open(p2, NULL, &t, 1, &gw, &e), TM_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "64 bytes"));
    assert_int_equal(tm_gguf_writer_open_ex(p2, NULL, &t, 1, TM_GGUF_WRITE_LONG_NAMES, &gw, &e), TM_OK);
    tm_gguf_writer_free(gw);
    t.name = NAME63;
    assert_int_equal(tm_gguf_writer_open(p2, NULL, &t, 1, &gw, &e), TM_OK);
    tm_gguf_writer_free(gw);
    rc = tmt_run(&o, "rm -rf %s", dir);
    free(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_name_table),
        cmocka_unit_test(test_rope_rows),
        cmocka_unit_test(test_diff_safetensors_gguf),
        cmocka_unit_test(test_qdiff_safetensors_q4km),
        cmocka_unit_test(test_qdiff_order_hint),
        cmocka_unit_test(test_gguf_long_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
