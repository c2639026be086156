/* test_ctensors_pack.c: compressed-tensors pack-quantized at every width 1..8 in both bit
** layouts (issue 12 item 1; src/formats/ctensors.c, src/quant/pack.c, src/view/view.c):
** before 0.18.0 each int32 word holds 32 div bits codes (top bits unused), from 0.18.0 each row
** is one dense bit stream, ceil(cols*bits/32) words. The fixtures are packed here by the
** layouts' description, decoded through the library and compared code by code; the version
** in config.json is ordered by PEP 440; a file whose layout cannot be told, or whose words
** fit no layout, is refused (exit 3 from every command, naming the tensor). Also: what
** tensormorph quantize writes (int4, version 0.18.0) is the dense layout and reads back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/pep440.h"
#include "helpers/cli_run.h"
#include "tensormorph.h"

#define MOD "model.layers.0.mlp.up_proj"

enum { WORD = 1, DENSE = 2 };

static char g_tmp[256];

static const char *sub(const char *name) {
    static char buf[4][600];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "%.255s/%.300s", g_tmp, name);
    return b;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t words_of(int64_t n, int bits, int lay) {
    return lay == WORD ? cdiv(n, 32 / bits) : cdiv(n * bits, 32);
}

/* codes in [-2^(b-1), 2^(b-1)) that change from element to element */
static int code_at(int64_t r, int64_t c, int bits) {
    int span = 1 << bits;
    return (int)((r * 7 + c * 3 + (c * c) % 5) % span) - span / 2;
}
static int zp_at(int64_t r, int64_t g, int bits) {
    int span = 1 << bits;
    return (int)((r * 5 + g * 3 + 1) % span) - span / 2;
}

/* Field j of a stream whose word k sits at w[k * stride], in layout lay. */
static void put(uint32_t *w, int64_t stride, int64_t j, int bits, int lay, uint32_t field) {
    if (lay == WORD) {
        int per = 32 / bits;
        w[(j / per) * stride] |= field << ((j % per) * bits);
        return;
    }
    int64_t t = j * bits;
    int sh = (int)(t % 32);
    w[(t / 32) * stride] |= field << sh;
    if (sh + bits > 32) w[(t / 32 + 1) * stride] |= field >> (32 - sh);
}
static int get(const uint32_t *w, int64_t stride, int64_t j, int bits, int lay) {
    uint64_t f;
    if (lay == WORD) {
        int per = 32 / bits;
        f = w[(j / per) * stride] >> ((j % per) * bits);
    } else {
        int64_t t = j * bits;
        int sh = (int)(t % 32);
        f = w[(t / 32) * stride] >> sh;
        if (sh + bits > 32) f |= (uint64_t)w[(t / 32 + 1) * stride] << (32 - sh);
    }
    return (int)(f & ((1u << bits) - 1)) - (1 << (bits - 1));
}

typedef struct pq {
    int64_t R, C, group; /* group 0: channel, symmetric; else asymmetric groups along columns */
    int bits, lay;
    uint32_t *packed, *zp;
    int64_t words, zwords, ng;
} pq;

static void write_text(const char *dir, const char *name, const char *text) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *fp = fopen(p, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* Write dir/model.safetensors and dir/config.json (version NULL: none; num_bits 0: none). */
static void pq_write(const char *dir, pq *x, const char *version, int num_bits) {
    mkdir(dir, 0755);
    free(x->packed);
    free(x->zp);
    x->words = words_of(x->C, x->bits, x->lay);
    x->ng = x->group ? x->C / x->group : 1;
    x->zwords = words_of(x->R, x->bits, x->lay);
    x->packed = calloc((size_t)(x->R * x->words), 4);
    x->zp = calloc((size_t)(x->zwords * x->ng), 4);
    float *scale = malloc((size_t)(x->R * x->ng) * 4);
    assert_true(x->packed && x->zp && scale);
    uint32_t off = 1u << (x->bits - 1), mask = (1u << x->bits) - 1;
    for (int64_t r = 0; r < x->R; r++)
        for (int64_t c = 0; c < x->C; c++)
            put(x->packed + r * x->words, 1, c, x->bits, x->lay,
                ((uint32_t)code_at(r, c, x->bits) + off) & mask);
    for (int64_t r = 0; r < x->R; r++)
        for (int64_t g = 0; g < x->ng; g++) {
            scale[r * x->ng + g] = x->group ? 0.5f * (float)(g + 1) : 1.0f;
            put(x->zp + g, x->ng, r, x->bits, x->lay, ((uint32_t)zp_at(r, g, x->bits) + off) & mask);
        }
    int64_t shape[2] = {x->R, x->C};
    tm_st_entry e[4] = {
        {MOD ".weight_packed", TM_I32, 2, {x->R, x->words}},
        {MOD ".weight_scale", TM_F32, 2, {x->R, x->ng}},
        {MOD ".weight_shape", TM_I64, 1, {2}},
        {MOD ".weight_zero_point", TM_I32, 2, {x->zwords, x->ng}},
    };
    const void *data[4] = {x->packed, scale, shape, x->zp};
    size_t nb[4] = {(size_t)(x->R * x->words) * 4, (size_t)(x->R * x->ng) * 4, 16,
                    (size_t)(x->zwords * x->ng) * 4};
    int n = x->group ? 4 : 3;
    char path[700];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    tm_st_writer *w = NULL;
    tm_err err;
    assert_int_equal(tm_st_writer_open(path, e, n, NULL, &w, &err), TM_OK);
    for (int i = 0; i < n; i++) assert_int_equal(tm_st_writer_write(w, i, 0, data[i], nb[i], &err), TM_OK);
    assert_int_equal(tm_st_writer_finish(w, &err), TM_OK);
    tm_st_writer_free(w);
    free(scale);
    char cfg[1024], vs[128] = "", bs[64] = "", gs[64] = "";
    if (version) snprintf(vs, sizeof vs, ", \"version\": \"%s\"", version);
    if (num_bits) snprintf(bs, sizeof bs, "\"num_bits\": %d, ", num_bits);
    if (x->group) snprintf(gs, sizeof gs, ", \"group_size\": %lld", (long long)x->group);
    snprintf(cfg, sizeof cfg,
             "{\"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": "
             "\"pack-quantized\"%s, \"config_groups\": {\"g\": {\"targets\": [\"Linear\"], "
             "\"weights\": {%s\"type\": \"int\", \"symmetric\": %s, \"strategy\": \"%s\"%s}}}}}",
             vs, bs, x->group ? "false" : "true", x->group ? "group" : "channel", gs);
    write_text(dir, "config.json", cfg);
}

static void pq_free(pq *x) {
    free(x->packed);
    free(x->zp);
    x->packed = x->zp = NULL;
}

/* Open dir and check every element's code, zero point and value; read_lay: the layout the
** reader must have applied to the stored words (the file's own, or the other one where the
** version says so). */
static void pq_check(const char *dir, const pq *x, int read_lay) {
    tm_file *f = NULL;
    tm_err err;
    tm_status s = tm_open(dir, NULL, &f, &err);
    if (s) print_message("%s: %s\n", dir, err.msg);
    assert_int_equal(s, TM_OK);
    for (int64_t i = 0; i < tm_file_n_warnings(f); i++)
        print_message("  warning: %s\n", tm_file_warning(f, i));
    assert_int_equal(tm_file_n_warnings(f), 0);
    int64_t ti = tm_file_find(f, MOD ".weight");
    assert_true(ti >= 0);
    const tm_tensor *t = tm_file_tensor(f, ti);
    const tm_qtensor *q = t->quant;
    assert_non_null(q);
    assert_int_equal(q->packing.bits, x->bits);
    assert_int_equal(q->code_dtype, x->bits <= 4 ? TM_I4 : TM_I8);
    assert_int_equal(q->qmin, -(1 << (x->bits - 1)));
    assert_int_equal(q->qmax, (1 << (x->bits - 1)) - 1);
    assert_int_equal(t->shape[0], x->R);
    assert_int_equal(t->shape[1], x->C);
    int64_t n = x->R * x->C;
    float *v = malloc((size_t)n * sizeof(float));
    assert_int_equal(tm_tensor_read_f32(f, ti, 0, n, v, &err), TM_OK);
    for (int64_t r = 0; r < x->R; r++)
        for (int64_t c = 0; c < x->C; c++) {
            int64_t g = x->group ? c / x->group : 0;
            int code = get(x->packed + r * x->words, 1, c, x->bits, read_lay);
            int zp = x->group ? get(x->zp + g, x->ng, r, x->bits, read_lay) : 0;
            if (read_lay == x->lay) { /* the reader's fields are the writer's codes */
                assert_int_equal(code, code_at(r, c, x->bits));
                if (x->group) assert_int_equal(zp, zp_at(r, g, x->bits));
            }
            tm_qelement e;
            assert_int_equal(tm_qelement_get(f, ti, r * x->C + c, &e, &err), TM_OK);
            if (e.code != code || e.zero_point != zp)
                print_message("%d-bit [%lld, %lld] layout %d: code %lld zp %lld, want %d %d\n",
                              x->bits, (long long)x->R, (long long)x->C, x->lay, (long long)e.code,
                              (long long)e.zero_point, code, zp);
            assert_int_equal(e.code, code);
            assert_int_equal(e.zero_point, zp);
            float want = (float)(code - zp) * (x->group ? 0.5f * (float)(g + 1) : 1.0f);
            assert_true(v[r * x->C + c] == want);
        }
    free(v);
    tm_close(f);
}

static void expect_refused(const char *dir, tm_status want, const char *needle) {
    tm_file *f = NULL;
    tm_err err;
    tm_status s = tm_open(dir, NULL, &f, &err);
    if (s != want || !strstr(err.msg, needle)) print_message("%s: [%d] %s\n", dir, (int)s, s ? err.msg : "");
    assert_int_equal(s, want);
    assert_non_null(strstr(err.msg, MOD ".weight_"));
    assert_non_null(strstr(err.msg, needle));
    if (s == TM_OK) tm_close(f);
}

/* Widths 1..8, shapes where the layouts take different words per row (32 columns), the same
** words but different bits (11) and the same bits (4), both layouts, version absent / 0.17.1 /
** 0.18.0: decoded exactly where the file says which layout, refused where it cannot. */
static void test_widths_and_layouts(void **state) {
    (void)state;
    static const int64_t cols[] = {32, 11, 4};
    static const char *const vers[] = {NULL, "0.17.1", "0.18.0"};
    int n_ok = 0, n_refused = 0;
    for (int bits = 1; bits <= 8; bits++)
        for (int ci = 0; ci < 3; ci++)
            for (int lay = WORD; lay <= DENSE; lay++)
                for (int vi = 0; vi < 3; vi++) {
                    int64_t C = cols[ci];
                    int same = 32 % bits == 0 || C <= 32 / bits;
                    int64_t ww = words_of(C, bits, WORD), wd = words_of(C, bits, DENSE);
                    int ver_lay = vi == 0 ? 0 : vi == 1 ? WORD : DENSE;
                    pq x = {3, C, 0, bits, lay, NULL, NULL, 0, 0, 0};
                    char name[64];
                    snprintf(name, sizeof name, "w%d_c%lld_l%d_v%d", bits, (long long)C, lay, vi);
                    const char *dir = sub(name);
                    pq_write(dir, &x, vers[vi], bits);
                    if (same || ver_lay == lay || (ver_lay == 0 && ww != wd)) {
                        pq_check(dir, &x, lay);
                        n_ok++;
                    } else if (ver_lay == 0) {
                        expect_refused(dir, TM_E_UNSUPPORTED, "fit both the per-word layout");
                        n_refused++;
                    } else if (ww != wd) {
                        expect_refused(dir, TM_E_CORRUPT, "words per row cannot hold");
                        n_refused++;
                    } else { /* same words, the version says the other layout: read as it says */
                        pq_check(dir, &x, ver_lay);
                    }
                    pq_free(&x);
                }
    print_message("%d decoded, %d refused\n", n_ok, n_refused);
    assert_true(n_refused >= 16);
}

/* Zero points packed along dim 0 follow the layout of the codes, and decide it where the codes
** alone cannot. */
static void test_zero_points(void **state) {
    (void)state;
    /* 3-bit, 21 rows: 3 words per column per word, 2 dense; 32 columns in groups of 16 */
    for (int lay = WORD; lay <= DENSE; lay++) {
        pq x = {21, 32, 16, 3, lay, NULL, NULL, 0, 0, 0};
        pq_write(sub(lay == WORD ? "zp_word" : "zp_dense"), &x, NULL, 3);
        pq_check(sub(lay == WORD ? "zp_word" : "zp_dense"), &x, lay);
        pq_free(&x);
        /* 8 columns (one word in either layout, same bits): only the zero points tell */
        pq y = {21, 8, 4, 3, lay, NULL, NULL, 0, 0, 0};
        pq_write(sub("zp_only"), &y, NULL, 3);
        pq_check(sub("zp_only"), &y, lay);
        pq_write(sub("zp_only"), &y, lay == WORD ? "0.17.0" : "0.18.0", 3);
        pq_check(sub("zp_only"), &y, lay);
        pq_write(sub("zp_only"), &y, lay == WORD ? "0.18.0" : "0.17.0", 3);
        expect_refused(sub("zp_only"), TM_E_CORRUPT, "weight_zero_point is I32");
        pq_free(&y);
        /* 5-bit, 6 columns (one word either way) and 12 rows: 2 words per column in either
        ** layout, placed differently: refused without a version */
        pq z = {12, 6, 3, 5, lay, NULL, NULL, 0, 0, 0};
        pq_write(sub("zp_ambiguous"), &z, NULL, 5);
        expect_refused(sub("zp_ambiguous"), TM_E_UNSUPPORTED, "words per column fit both");
        pq_write(sub("zp_ambiguous"), &z, lay == WORD ? "0.17.5" : "0.18.2", 5);
        pq_check(sub("zp_ambiguous"), &z, lay);
        pq_free(&z);
    }
}

/* PEP 440 ordering decides the layout of a file whose words fit both (3-bit, 11 columns). */
static void test_version_order(void **state) {
    (void)state;
    static const char *const per_word[] = {"0.17.1", "0.17", "0.18.0.dev3", "0.18.0rc1",
                                           "0.18.0a0", "0.18.0b2", "0.17.9.post2",
                                           "0.18.0.dev3+g1234", "0.17.99+cu121", "v0.17.0",
                                           " 0.17.0 ", "0.18.0c1", "0.18.0-rc.1", "0.18.0.alpha"};
    static const char *const dense[] = {"0.18.0", "0.18", "0.18.0.0", "0.18.0.post1",
                                        "0.18.0+local.7", "0.18.1.dev0", "1!0.1", "0.18.0-1",
                                        "0.19.0rc1", "V0.18.0", "0.18.0.post0.dev1", "0.18.0.rev2"};
    pq x = {4, 11, 0, 3, WORD, NULL, NULL, 0, 0, 0};
    for (size_t i = 0; i < sizeof per_word / sizeof per_word[0]; i++) {
        pq_write(sub("ver"), &x, per_word[i], 3);
        pq_check(sub("ver"), &x, WORD);
        pq_free(&x);
    }
    for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++) {
        pq_write(sub("ver"), &x, dense[i], 3);
        pq_check(sub("ver"), &x, DENSE);
        pq_free(&x);
    }
    /* not a version: a warning, then decided as without one (here: refused) */
    pq_write(sub("ver"), &x, "latest", 3);
    expect_refused(sub("ver"), TM_E_UNSUPPORTED, "gives no quantization_config.version");
    pq_free(&x);
    /* the ordering itself */
    static const char *const asc[] = {"0.17", "0.18.0.dev0", "0.18.0.dev2", "0.18.0a1.dev1",
                                      "0.18.0a1", "0.18.0b1", "0.18.0rc1", "0.18.0",
                                      "0.18.0+abc", "0.18.0.post1.dev0", "0.18.0.post1",
                                      "0.18.1.dev0", "0.18.1", "1!0.0"};
    int ok;
    for (size_t i = 0; i + 1 < sizeof asc / sizeof asc[0]; i++) {
        assert_int_equal(tm__pep440_cmp(asc[i], asc[i + 1], &ok), -1);
        assert_true(ok);
        assert_int_equal(tm__pep440_cmp(asc[i + 1], asc[i], &ok), 1);
    }
    assert_int_equal(tm__pep440_cmp("0.18", "0.18.0.0", &ok), 0);
    assert_true(ok);
    assert_int_equal(tm__pep440_cmp("1.0RC1", "1.0rc.1", &ok), 0);
    assert_true(ok);
    static const char *const bad[] = {"", "latest", "0.18.0+", "0.18.0 x", "1..2", "0.18.0.devx"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tm__pep440_cmp(bad[i], "0.18.0", &ok);
        if (ok) print_message("'%s' parsed\n", bad[i]);
        assert_false(ok);
    }
}

/* The issue's case: 3-bit [4, 32] channel-symmetric, 4 words per row (0.17 layout). Before the
** fix it was read as 4-bit with a warning blaming the config. Then the CLI: inspect and scalar
** show 3-bit codes; a file that cannot be decoded is exit 3 from inspect, scalar and qdiff. */
static void test_issue_case_cli(void **state) {
    (void)state;
    const char *dir = sub("issue");
    pq x = {4, 32, 0, 3, WORD, NULL, NULL, 0, 0, 0};
    pq_write(dir, &x, "0.17.1", 3);
    pq_check(dir, &x, WORD);
    json_t *j = tmt_run_json(0, "%s inspect %s --json", tmt_bin(), dir);
    assert_int_equal(json_array_size(json_object_get(j, "warnings")), 0);
    json_t *t = tmt_find_named(json_object_get(j, "tensors"), MOD ".weight");
    json_t *q = json_object_get(t, "quantization");
    assert_int_equal(json_integer_value(json_object_get(q, "bits")), 3);
    assert_int_equal(json_integer_value(json_object_get(q, "qmin")), -4);
    assert_int_equal(json_integer_value(json_object_get(q, "qmax")), 3);
    json_t *pk = json_object_get(q, "packing");
    assert_int_equal(json_integer_value(json_object_get(pk, "bits")), 3);
    assert_int_equal(json_integer_value(json_object_get(pk, "codes_per_container")), 10);
    assert_true(json_is_true(json_object_get(pk, "per_word")));
    json_decref(j);
    j = tmt_run_json(0, "%s scalar %s %s 2,27 --json", tmt_bin(), dir, MOD ".weight");
    assert_int_equal(json_integer_value(json_object_get(j, "code")), code_at(2, 27, 3));
    assert_true(tmt_num(j, "value") == (double)code_at(2, 27, 3));
    json_decref(j);
    pq_free(&x);
    /* no version and 11 columns: refused by every command, exit 3, naming the tensor */
    const char *amb = sub("issue_ambiguous");
    pq y = {4, 11, 0, 3, WORD, NULL, NULL, 0, 0, 0};
    pq_write(amb, &y, NULL, 3);
    const char *cmds[3] = {"inspect %s", "scalar %s " MOD ".weight 0,0", "qdiff %s %s"};
    for (int i = 0; i < 3; i++) {
        char c[1400], out[1600];
        snprintf(c, sizeof c, cmds[i], amb, amb);
        char *o = NULL;
        snprintf(out, sizeof out, "%s %s 2>&1", tmt_bin(), c);
        int rc = tmt_run(&o, "%s", out);
        if (rc != 3 || !o || !strstr(o, MOD ".weight_packed")) print_message("%s: rc %d: %s\n", c, rc, o ? o : "");
        assert_int_equal(rc, 3);
        assert_non_null(strstr(o, MOD ".weight_packed has shape [4, 2]"));
        assert_non_null(strstr(o, "fit both the per-word layout of compressed-tensors < 0.18.0"));
        free(o);
    }
    pq_free(&y);
    /* the same 3-bit file with no num_bits in config.json: the width comes from the packed
    ** shape (docs/formats.md: 4 and 8 first; 4 words per row of 32 columns is 4-bit in the
    ** per-word layout), not from a num_bits of 8 the config never stated */
    const char *nob = sub("issue_no_num_bits");
    pq z = {4, 32, 0, 3, WORD, NULL, NULL, 0, 0, 0};
    pq_write(nob, &z, "0.17.1", 0);
    char *o = NULL;
    int rc = tmt_run(&o, "%s inspect %s --json 2>&1", tmt_bin(), nob);
    if (rc != 0 || strstr(o, "num_bits 8")) fail_msg("inspect: rc %d: %s", rc, o ? o : "");
    free(o);
    j = tmt_run_json(0, "%s inspect %s --json", tmt_bin(), nob);
    t = tmt_find_named(json_object_get(j, "tensors"), MOD ".weight");
    q = json_object_get(t, "quantization");
    assert_int_equal(json_integer_value(json_object_get(q, "bits")), 4);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(q, "packing"), "codes_per_container")), 8);
    json_decref(j);
    pq_free(&z);
}

/* What tensormorph quantize writes: int4 (group, asymmetric) and int8, recorded as version
** 0.18.0; the stored words are the dense layout of the codes (the same words per-word packing
** gives at 4 and 8 bits) and the reader reads them back without a warning. */
static void test_writer_reads_back(void **state) {
    (void)state;
    const char *src = sub("wsrc");
    mkdir(src, 0755);
    enum { R = 6, C = 40 };
    float *w = malloc(R * C * sizeof(float));
    for (int i = 0; i < R * C; i++) w[i] = (float)((i * 37) % 101) / 50.0f - 1.0f + 0.01f * (float)(i % 7);
    tm_st_entry e[1] = {{MOD ".weight", TM_F32, 2, {R, C}}};
    char path[700];
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    tm_st_writer *wr = NULL;
    tm_err err;
    assert_int_equal(tm_st_writer_open(path, e, 1, NULL, &wr, &err), TM_OK);
    assert_int_equal(tm_st_writer_write(wr, 0, 0, w, R * C * sizeof(float), &err), TM_OK);
    assert_int_equal(tm_st_writer_finish(wr, &err), TM_OK);
    tm_st_writer_free(wr);
    free(w);
    static const char *const args[2] = {"-t int4 -g group:8 --asymmetric", "-t int8 --asymmetric"};
    for (int k = 0; k < 2; k++) {
        int bits = k == 0 ? 4 : 8;
        const char *out = sub(k == 0 ? "wout4" : "wout8");
        char *o = NULL;
        assert_int_equal(tmt_run(&o, "%s quantize %s -o %s %s --no-checksums -q", tmt_bin(), src, out, args[k]), 0);
        free(o);
        snprintf(path, sizeof path, "%s/config.json", out);
        json_t *cfg = json_load_file(path, 0, NULL);
        assert_non_null(cfg);
        assert_string_equal(json_string_value(json_object_get(json_object_get(cfg, "quantization_config"), "version")), "0.18.0");
        json_decref(cfg);
        tm_file *f = NULL, *raw = NULL;
        assert_int_equal(tm_open(out, NULL, &f, &err), TM_OK);
        assert_int_equal(tm_file_n_warnings(f), 0);
        tm_open_params p = tm_open_params_default();
        p.no_recognize = 1;
        assert_int_equal(tm_open(out, &p, &raw, &err), TM_OK);
        int64_t ti = tm_file_find(f, MOD ".weight");
        const tm_qtensor *q = tm_file_tensor(f, ti)->quant;
        assert_non_null(q);
        assert_int_equal(q->packing.bits, bits);
        assert_int_equal(q->packing.lsb_first, 1);
        int64_t pi = tm_file_find(raw, MOD ".weight_packed");
        const tm_tensor *pt = tm_file_tensor(raw, pi);
        int64_t words = words_of(C, bits, DENSE);
        assert_int_equal(pt->shape[1], words);
        const void *pp;
        assert_int_equal(tm_tensor_data(raw, pi, 0, pt->n_bytes, &pp, &err), TM_OK);
        uint32_t *mine = calloc((size_t)(R * words), 4), *mine_w = calloc((size_t)(R * words), 4);
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) {
                tm_qelement qe;
                assert_int_equal(tm_qelement_get(f, ti, r * C + c, &qe, &err), TM_OK);
                assert_true(qe.code >= -(1 << (bits - 1)) && qe.code < (1 << (bits - 1)));
                uint32_t field = ((uint32_t)qe.code + (1u << (bits - 1))) & ((1u << bits) - 1);
                put(mine + r * words, 1, c, bits, DENSE, field);
                put(mine_w + r * words, 1, c, bits, WORD, field);
            }
        assert_memory_equal(pp, mine, (size_t)(R * words) * 4);
        assert_memory_equal(mine_w, mine, (size_t)(R * words) * 4);
        free(mine);
        free(mine_w);
        tm_close(raw);
        tm_close(f);
    }
}

static int setup(void **state) {
    (void)state;
    const char *base = getenv("TMPDIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/tm_ctpack_XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_widths_and_layouts),
        cmocka_unit_test(test_zero_points),
        cmocka_unit_test(test_version_order),
        cmocka_unit_test(test_issue_case_cli),
        cmocka_unit_test(test_writer_reads_back),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
