/* test_gguf_read.c: the GGUF reader and the ggml dequantizers.
**   - every ../shared/vectors/gguf_dequant case, bit for bit, directly and through a GGUF file
**     opened from memory (tm_tensor_read_f32, tm_qelement_get: value = (code - zp)*scale - min);
**   - a corrupt-GGUF corpus generated here: each input with its status and message;
**     every prefix of a valid file (truncation) is refused;
**   - every GGUF of ../shared/models/gguf: counts, names, shapes, types, metadata (facts read
**     from the files with an independent parser and written below);
**   - inspect / scalar / qdiff / diff through the binary (env TM_BIN) with --json. */
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers/cli_run.h"
#include "helpers/vectors.h"
#include "tensormorph.h"

/* ---------------------------------------------------------------------------------------- */
/* A GGUF builder                                                                           */
/* ---------------------------------------------------------------------------------------- */

typedef struct gb {
    uint8_t *b;
    size_t   n, cap;
} gb;

static void gb_bytes(gb *g, const void *p, size_t k) {
    if (g->n + k > g->cap) {
        size_t nc = g->cap ? g->cap : 256;
        while (nc < g->n + k) nc *= 2;
        g->b = realloc(g->b, nc);
        assert_non_null(g->b);
        g->cap = nc;
    }
    if (k) memcpy(g->b + g->n, p, k);
    g->n += k;
}
static void gb_u8(gb *g, uint8_t v) { gb_bytes(g, &v, 1); }
static void gb_u32(gb *g, uint32_t v) { gb_bytes(g, &v, 4); }
static void gb_u64(gb *g, uint64_t v) { gb_bytes(g, &v, 8); }
static void gb_str(gb *g, const char *s) {
    gb_u64(g, strlen(s));
    gb_bytes(g, s, strlen(s));
}
static void gb_pad(gb *g, size_t align) {
    while (g->n % align) gb_u8(g, 0);
}
static void gb_free(gb *g) { free(g->b); memset(g, 0, sizeof *g); }

static void gb_header(gb *g, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_bytes(g, "GGUF", 4);
    gb_u32(g, version);
    gb_u64(g, n_tensors);
    gb_u64(g, n_kv);
}
static void kv_str(gb *g, const char *k, const char *v) { gb_str(g, k); gb_u32(g, 8); gb_str(g, v); }
static void kv_u32(gb *g, const char *k, uint32_t v) { gb_str(g, k); gb_u32(g, 4); gb_u32(g, v); }

typedef struct tinfo {
    const char *name;
    uint32_t    n_dims;
    uint64_t    ne[4];
    uint32_t    type;
    uint64_t    offset;
} tinfo;

static void gb_tinfo(gb *g, const tinfo *t) {
    gb_str(g, t->name);
    gb_u32(g, t->n_dims);
    for (uint32_t d = 0; d < t->n_dims; d++) gb_u64(g, t->ne[d]);
    gb_u32(g, t->type);
    gb_u64(g, t->offset);
}

/* A valid v3 file: 3 key/values (string, u32 alignment 32, an i32 array), tensors
** "a" F32 [4] at 0, "b" Q4_0 ne [32, 2] at 32 (36 bytes), "c" Q4_0 ne [32, 0] (empty) at 96. */
static void make_valid(gb *g) {
    gb_header(g, 3, 3, 3);
    kv_str(g, "general.architecture", "llama");
    kv_u32(g, "general.alignment", 32);
    gb_str(g, "list");
    gb_u32(g, 9);
    gb_u32(g, 5);
    gb_u64(g, 3);
    gb_u32(g, 1); gb_u32(g, 2); gb_u32(g, (uint32_t)-3);
    tinfo ts[3] = {{"a", 1, {4}, 0, 0}, {"b", 2, {32, 2}, 2, 32}, {"c", 2, {32, 0}, 2, 96}};
    for (int i = 0; i < 3; i++) gb_tinfo(g, &ts[i]);
    gb_pad(g, 32);
    float a[4] = {1.0f, -2.5f, 3.25f, 0.0f};
    gb_bytes(g, a, sizeof a);
    gb_pad(g, 32);
    for (int blk = 0; blk < 2; blk++) {
        uint16_t d = tm_f32_to_f16(0.5f * (float)(blk + 1));
        gb_bytes(g, &d, 2);
        for (int j = 0; j < 16; j++) gb_u8(g, (uint8_t)(j | ((15 - j) << 4)));
    }
    gb_pad(g, 32);
}

static tm_status open_buf(const gb *g, tm_file **f, tm_err *e) {
    return tm_open_buffer(g->b, g->n, "test.gguf", NULL, f, e);
}

/* Write g to a temporary file; returns its path (static buffer). */
static const char *to_file(const gb *g) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/tm_gguf_test_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, g->b, g->n), (ssize_t)g->n);
    close(fd);
    return path;
}

/* ---------------------------------------------------------------------------------------- */
/* Valid files                                                                              */
/* ---------------------------------------------------------------------------------------- */

static void test_valid_small(void **state) {
    (void)state;
    gb g = {0};
    make_valid(&g);
    for (int via_file = 0; via_file < 2; via_file++) {
        tm_file *f;
        tm_err e;
        tm_status s;
        const char *path = NULL;
        if (via_file) {
            path = to_file(&g);
            s = tm_open(path, NULL, &f, &e);
        } else {
            s = open_buf(&g, &f, &e);
        }
        if (s) fprintf(stderr, "%s\n", e.msg);
        assert_int_equal(s, TM_OK);
        assert_int_equal(tm_file_format(f), TM_FMT_GGUF);
        assert_int_equal(tm_file_n_tensors(f), 3);
        uint32_t ver;
        uint64_t al, ds;
        assert_true(tm_gguf_info(f, &ver, &al, &ds));
        assert_int_equal(ver, 3);
        assert_int_equal(al, 32);
        assert_int_equal(ds % 32, 0);
        /* metadata: text and full JSON */
        assert_int_equal(tm_file_n_meta(f), 3);
        assert_string_equal(tm_file_meta_key(f, 0), "general.architecture");
        assert_string_equal(tm_file_meta_value(f, 0), "llama");
        assert_string_equal(tm_file_meta_value(f, 1), "32");
        assert_string_equal(tm_file_meta_value(f, 2), "[3 x i32: 1, 2, -3]");
        assert_string_equal(tm_gguf_meta_json(f, 2), "[1,2,-3]");
        assert_string_equal(tm_gguf_meta_json(f, 0), "\"llama\"");
        assert_string_equal(tm_gguf_meta_type(f, 1), "u32");
        /* a: plain F32 */
        const tm_tensor *a = tm_file_tensor(f, tm_file_find(f, "a"));
        assert_non_null(a);
        assert_int_equal(a->dtype, TM_F32);
        assert_null(a->quant);
        float v[4];
        assert_int_equal(tm_tensor_read_f32(f, tm_file_find(f, "a"), 0, 4, v, &e), TM_OK);
        assert_true(v[0] == 1.0f && v[1] == -2.5f && v[2] == 3.25f && v[3] == 0.0f);
        assert_int_equal(tm_gguf_tensor_type(f, tm_file_find(f, "a")), TM_GGML_F32);
        /* b: Q4_0, logical shape = ne reversed */
        int64_t bi = tm_file_find(f, "b");
        const tm_tensor *b = tm_file_tensor(f, bi);
        assert_int_equal(b->ndim, 2);
        assert_int_equal(b->shape[0], 2);
        assert_int_equal(b->shape[1], 32);
        assert_int_equal(b->n_bytes, 36);
        assert_non_null(b->quant);
        assert_int_equal(b->quant->ggml_type, TM_GGML_Q4_0);
        assert_int_equal(b->quant->gran.kind, TM_GRAN_GROUP);
        assert_int_equal(b->quant->gran.group_size, 32);
        float bv[64];
        assert_int_equal(tm_tensor_read_f32(f, bi, 0, 64, bv, &e), TM_OK);
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < 32; j++) {
                int q = j < 16 ? j : 15 - (j - 16);
                assert_true(bv[r * 32 + j] == (float)(q - 8) * (0.5f * (float)(r + 1)));
            }
        /* an unaligned slice through the view */
        float part[5];
        assert_int_equal(tm_tensor_read_f32(f, bi, 30, 5, part, &e), TM_OK);
        assert_memory_equal(part, bv + 30, sizeof part);
        tm_qelement qe;
        assert_int_equal(tm_qelement_get(f, bi, 32 + 17, &qe, &e), TM_OK);
        assert_int_equal(qe.code, 14);
        assert_int_equal(qe.zero_point, 8);
        assert_true(qe.scale == 1.0);
        assert_int_equal(qe.group, 1);
        assert_int_equal(qe.block, 1);
        assert_int_equal(qe.ggml_type, TM_GGML_Q4_0);
        assert_true(qe.value == 6.0);
        /* c: a zero dim is a valid empty tensor */
        const tm_tensor *c = tm_file_tensor(f, tm_file_find(f, "c"));
        assert_int_equal(c->n_elems, 0);
        assert_int_equal(c->n_bytes, 0);
        assert_int_equal(c->shape[0], 0);
        tm_close(f);
        if (path) unlink(path);
    }
    gb_free(&g);
}

/* ---------------------------------------------------------------------------------------- */
/* Corrupt corpus                                                                           */
/* ---------------------------------------------------------------------------------------- */

typedef struct bad_case {
    const char *name;
    void (*make)(gb *g);
    tm_status   status;
    const char *msg;
} bad_case;

static void tensors_after_kv(gb *g, const tinfo *ts, int n, size_t data) {
    for (int i = 0; i < n; i++) gb_tinfo(g, &ts[i]);
    gb_pad(g, 32);
    for (size_t i = 0; i < data; i++) gb_u8(g, 0x11);
}

static void mk_kv_count(gb *g) { gb_header(g, 3, 0, 1ull << 40); kv_str(g, "k", "v"); }
static void mk_tensor_count(gb *g) { gb_header(g, 3, 1ull << 59, 0); gb_u64(g, 0); }
static void mk_string_past_end(gb *g) {
    gb_header(g, 3, 0, 1);
    gb_u64(g, 1ull << 40);
    gb_bytes(g, "general.name", 12);
}
static void mk_value_string_past_end(gb *g) {
    gb_header(g, 3, 0, 1);
    gb_str(g, "general.name");
    gb_u32(g, 8);
    gb_u64(g, 1000);
    gb_bytes(g, "short", 5);
}
static void mk_nested_deep(gb *g) {
    gb_header(g, 3, 0, 1);
    gb_str(g, "deep");
    gb_u32(g, 9);
    for (int i = 0; i < 5; i++) { gb_u32(g, 9); gb_u64(g, 1); }
    gb_u32(g, 4);
    gb_u64(g, 1);
    gb_u32(g, 7);
    for (int i = 0; i < 64; i++) gb_u8(g, 0);
}
static void mk_array_count(gb *g) {
    gb_header(g, 3, 0, 1);
    gb_str(g, "arr");
    gb_u32(g, 9);
    gb_u32(g, 12); /* f64 */
    gb_u64(g, 1ull << 61);
    gb_u64(g, 0);
}
static void mk_dims_overflow(gb *g) {
    gb_header(g, 3, 1, 0);
    tinfo t = {"w", 3, {1ull << 32, 1ull << 32, 1ull << 32}, 0, 0};
    tensors_after_kv(g, &t, 1, 64);
}
static void mk_ne_negative(gb *g) {
    gb_header(g, 3, 1, 0);
    tinfo t = {"w", 2, {4, UINT64_MAX}, 0, 0};
    tensors_after_kv(g, &t, 1, 64);
}
static void mk_misaligned(gb *g) {
    gb_header(g, 3, 1, 0);
    tinfo t = {"w", 1, {4}, 0, 3};
    tensors_after_kv(g, &t, 1, 64);
}
static void mk_out_of_file(gb *g) {
    gb_header(g, 3, 1, 0);
    tinfo t = {"w", 1, {4}, 0, 1u << 20};
    tensors_after_kv(g, &t, 1, 64);
}
static void mk_span_past_end(gb *g) {
    gb_header(g, 3, 1, 0);
    tinfo t = {"w", 1, {64}, 0, 0}; /* 256 bytes, 64 present */
    tensors_after_kv(g, &t, 1, 64);
}
static void mk_align_zero(gb *g) { gb_header(g, 3, 0, 1); kv_u32(g, "general.alignment", 0); }
static void mk_align_npot(gb *g) { gb_header(g, 3, 0, 1); kv_u32(g, "general.alignment", 48); }
static void mk_align_type(gb *g) {
    gb_header(g, 3, 0, 1);
    gb_str(g, "general.alignment");
    gb_u32(g, 10);
    gb_u64(g, 32);
}
static void mk_type_unknown(gb *g) {
    gb_header(g, 3, 1, 0);
    tinfo t = {"w", 1, {32}, 99, 0};
    tensors_after_kv(g, &t, 1, 64);
}
static void mk_type_removed(gb *g) {
    gb_header(g, 3, 1, 0);
    tinfo t = {"w", 1, {32}, 4, 0}; /* the removed Q4_2 */
    tensors_after_kv(g, &t, 1, 64);
}
static void mk_row_not_block(gb *g) {
    gb_header(g, 3, 1, 0);
    tinfo t = {"w", 2, {33, 2}, 2, 0};
    tensors_after_kv(g, &t, 1, 128);
}
static void mk_duplicate_names(gb *g) {
    gb_header(g, 3, 2, 0);
    tinfo t[2] = {{"w", 1, {4}, 0, 0}, {"w", 1, {4}, 0, 32}};
    tensors_after_kv(g, t, 2, 64);
}
static void mk_overlap(gb *g) {
    gb_header(g, 3, 2, 0);
    tinfo t[2] = {{"x", 1, {16}, 0, 0}, {"y", 1, {16}, 0, 32}}; /* x is 64 bytes */
    tensors_after_kv(g, t, 2, 128);
}
static void mk_too_many_dims(gb *g) {
    gb_header(g, 3, 1, 0);
    gb_str(g, "w");
    gb_u32(g, 5);
    for (int i = 0; i < 5; i++) gb_u64(g, 1);
    gb_u32(g, 0);
    gb_u64(g, 0);
    gb_pad(g, 32);
    gb_u64(g, 0);
}
static void mk_big_endian(gb *g) {
    gb_bytes(g, "GGUF", 4);
    uint8_t v[4] = {0, 0, 0, 3};
    gb_bytes(g, v, 4);
    for (int i = 0; i < 16; i++) gb_u8(g, 0);
}
static void mk_version1(gb *g) { gb_header(g, 1, 0, 0); }
static void mk_version9(gb *g) { gb_header(g, 9, 0, 0); }
static void mk_dup_key(gb *g) {
    gb_header(g, 3, 0, 2);
    kv_str(g, "general.name", "a");
    kv_str(g, "general.name", "b");
}
static void mk_bad_value_type(gb *g) {
    gb_header(g, 3, 0, 1);
    gb_str(g, "k");
    gb_u32(g, 13);
    gb_u64(g, 0);
}
static void mk_truncated_header(gb *g) { gb_bytes(g, "GGUF\x03\x00", 6); }
static void mk_array_limit(gb *g) { /* 2^24 + 1 u8 values, all present */
    gb_header(g, 3, 0, 1);
    gb_str(g, "big");
    gb_u32(g, 9);
    gb_u32(g, 0);
    gb_u64(g, (1ull << 24) + 1);
    size_t n = ((size_t)1 << 24) + 1;
    uint8_t *z = calloc(n, 1);
    assert_non_null(z);
    gb_bytes(g, z, n);
    free(z);
}

static const bad_case k_bad[] = {
    {"kv count too large", mk_kv_count, TM_E_CORRUPT, "key/value count"},
    {"tensor count too large", mk_tensor_count, TM_E_CORRUPT, "tensor count"},
    {"key length past the end", mk_string_past_end, TM_E_CORRUPT, "runs past the end of the file"},
    {"string value past the end", mk_value_string_past_end, TM_E_CORRUPT, "string length 1000"},
    {"arrays nested too deep", mk_nested_deep, TM_E_LIMIT, "nested deeper than"},
    {"array count too large", mk_array_count, TM_E_CORRUPT, "cannot fit"},
    {"dims product overflows", mk_dims_overflow, TM_E_CORRUPT, "overflows int64"},
    {"dim negative as int64", mk_ne_negative, TM_E_CORRUPT, "negative"},
    {"misaligned offset", mk_misaligned, TM_E_CORRUPT, "not a multiple of the alignment"},
    {"offset outside the file", mk_out_of_file, TM_E_CORRUPT, "runs past the end of the file"},
    {"data span past the end", mk_span_past_end, TM_E_CORRUPT, "runs past the end of the file"},
    {"alignment zero", mk_align_zero, TM_E_CORRUPT, "general.alignment 0 is not a power of two"},
    {"alignment not a power of two", mk_align_npot, TM_E_CORRUPT, "general.alignment 48 is not"},
    {"alignment of the wrong type", mk_align_type, TM_E_CORRUPT, "has type u64, not u32"},
    {"unknown type id", mk_type_unknown, TM_E_UNSUPPORTED, "unsupported ggml type 99"},
    {"removed type id", mk_type_removed, TM_E_UNSUPPORTED, "unsupported ggml type 4"},
    {"row not a multiple of the block", mk_row_not_block, TM_E_CORRUPT,
     "ne[0] = 33 is not a multiple of the Q4_0 block size 32"},
    {"duplicate tensor names", mk_duplicate_names, TM_E_CORRUPT, "duplicate tensor name 'w'"},
    {"overlapping tensors", mk_overlap, TM_E_CORRUPT, "overlap"},
    {"too many dims", mk_too_many_dims, TM_E_CORRUPT, "5 dims"},
    {"big-endian", mk_big_endian, TM_E_UNSUPPORTED, "big-endian"},
    {"version 1", mk_version1, TM_E_UNSUPPORTED, "version 1"},
    {"version 9", mk_version9, TM_E_UNSUPPORTED, "version 9"},
    {"duplicate key", mk_dup_key, TM_E_CORRUPT, "duplicate metadata key 'general.name'"},
    {"bad value type", mk_bad_value_type, TM_E_CORRUPT, "value type 13"},
    {"truncated header", mk_truncated_header, TM_E_CORRUPT, "truncated"},
    {"too many array elements", mk_array_limit, TM_E_LIMIT, "limit of 16777216 array elements"},
};

static void test_corrupt_corpus(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        gb g = {0};
        k_bad[i].make(&g);
        for (int via_file = 0; via_file < 2; via_file++) {
            tm_file *f = (tm_file *)1;
            tm_err e;
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            const char *path = via_file ? to_file(&g) : NULL;
            tm_status s = via_file ? tm_open(path, NULL, &f, &e) : open_buf(&g, &f, &e);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if (s != k_bad[i].status || !strstr(e.msg, k_bad[i].msg))
                fprintf(stderr, "case '%s' (%s): status %s, message: %s\n", k_bad[i].name,
                        via_file ? "file" : "buffer", tm_status_str(s), e.msg);
            assert_int_equal(s, k_bad[i].status);
            assert_non_null(strstr(e.msg, k_bad[i].msg));
            assert_null(f);
            /* errors name the file */
            assert_non_null(strstr(e.msg, via_file ? path : "test.gguf"));
            assert_true((double)(t1.tv_sec - t0.tv_sec) < 2.0);
            if (path) unlink(path);
        }
        gb_free(&g);
    }
}

/* Every strict prefix of a valid file is refused (never read past the end: ASan build). */
static void test_truncated_prefixes(void **state) {
    (void)state;
    gb g = {0};
    make_valid(&g);
    for (size_t n = 0; n < g.n; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, g.b, n);
        tm_file *f;
        tm_err e;
        tm_status s = tm_open_buffer(copy, n, "cut.gguf", NULL, &f, &e);
        if (n >= 4) {
            if (s == TM_OK) fprintf(stderr, "prefix of %zu bytes opened\n", n);
            assert_int_equal(s, TM_E_CORRUPT);
        } else {
            assert_int_not_equal(s, TM_OK);
        }
        free(copy);
    }
    gb_free(&g);
}

/* ---------------------------------------------------------------------------------------- */
/* Dequantization vectors                                                                   */
/* ---------------------------------------------------------------------------------------- */

static uint32_t fbits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static int g_dequant_checked; /* cases dequant_case got through */

static void dequant_case(const char *name, json_t *cj) {
    json_t *p = json_object_get(cj, "params");
    int type = (int)json_integer_value(json_object_get(p, "ggml_type_id"));
    int64_t rows = json_integer_value(json_object_get(p, "rows"));
    int64_t npr = json_integer_value(json_object_get(p, "n_per_row"));
    const tm_ggml_type_info *ti = tm_ggml_type_info_get(type);
    assert_non_null(ti);
    assert_string_equal(ti->name, json_string_value(json_object_get(p, "type")));
    assert_int_equal(ti->block_size, json_integer_value(json_object_get(p, "block_size")));
    assert_int_equal(ti->type_size, json_integer_value(json_object_get(p, "type_size")));
    char path[1024];
    tmv_case_path(path, sizeof path, "gguf_dequant", name, "blocks.bin");
    size_t nb = 0;
    uint8_t *blocks = (uint8_t *)tmt_read_bytes(path, &nb);
    assert_non_null(blocks);
    tmv_npy exp;
    assert_int_equal(tmv_npy_load_case("gguf_dequant", name, "expected.npy", &exp), 0);
    assert_int_equal(exp.n, rows * npr);
    float *y = malloc((size_t)exp.n * sizeof(float));
    tm_err e;
    tm_status s = tm_ggml_dequantize(type, blocks, nb, exp.n, y, &e);
    if (s) fprintf(stderr, "%s: %s\n", name, e.msg);
    assert_int_equal(s, TM_OK);
    int64_t bad = 0;
    for (int64_t i = 0; i < exp.n; i++)
        if (fbits(y[i]) != tmv_npy_f32_bits(&exp, i)) {
            if (bad++ < 3)
                fprintf(stderr, "%s: value %lld: got %08x want %08x\n", name, (long long)i,
                        fbits(y[i]), tmv_npy_f32_bits(&exp, i));
        }
    assert_int_equal(bad, 0);

    /* the same bytes as a GGUF tensor [rows, npr]: view and Scalar Inspector */
    gb g = {0};
    gb_header(&g, 3, 1, 0);
    tinfo t = {"w", 2, {(uint64_t)npr, (uint64_t)rows}, (uint32_t)type, 0};
    gb_tinfo(&g, &t);
    gb_pad(&g, 32);
    gb_bytes(&g, blocks, nb);
    tm_file *f;
    s = open_buf(&g, &f, &e);
    if (s) fprintf(stderr, "%s: %s\n", name, e.msg);
    assert_int_equal(s, TM_OK);
    const tm_tensor *tt = tm_file_tensor(f, 0);
    assert_int_equal(tt->shape[0], rows);
    assert_int_equal(tt->shape[1], npr);
    float *z = malloc((size_t)exp.n * sizeof(float));
    assert_int_equal(tm_tensor_read_f32(f, 0, 0, exp.n, z, &e), TM_OK);
    assert_memory_equal(y, z, (size_t)exp.n * sizeof(float));
    if (ti->is_quantized) {
        assert_int_equal(tt->quant->ggml_type, type);
        float *sc;
        int32_t *zp;
        int64_t np;
        assert_int_equal(tm_tensor_qparams(f, 0, &sc, &zp, &np, &e), TM_OK);
        assert_int_equal(np, exp.n / ti->sub_block);
        for (int64_t i = 0; i < exp.n; i += (i % 7) + 1) {
            tm_qelement q;
            assert_int_equal(tm_qelement_get(f, 0, i, &q, &e), TM_OK);
            assert_int_equal(fbits((float)q.value), tmv_npy_f32_bits(&exp, i));
            assert_int_equal(q.group, i / ti->sub_block);
            assert_int_equal(q.block, i / ti->block_size);
            assert_true(q.code >= ti->qmin && q.code <= ti->qmax);
            /* value = (code - zero_point) * scale - min, rounded once to float32 */
            double lin = (double)(q.code - q.zero_point) * q.scale;
            double want = lin - q.min;
            double tol = 1.2e-7 * (fabs(lin) + fabs(q.min)) + 1e-37;
            if (fabs(want - q.value) > tol)
                fprintf(stderr, "%s: element %lld: (%lld - %lld) * %.9g - %.9g = %.9g, value %.9g\n",
                        name, (long long)i, (long long)q.code, (long long)q.zero_point,
                        q.scale, q.min, want, q.value);
            assert_true(fabs(want - q.value) <= tol);
            /* qparams: the step's magnitude; a sub-block of step 0 reports the smallest nonzero
            ** step of its block (its LSB), never 0 unless the whole block is */
            if (q.scale != 0) assert_true(fabs(sc[q.group]) == (float)fabs(q.scale));
            else assert_true(sc[q.group] >= 0 && isfinite(sc[q.group]));
        }
        free(sc);
        free(zp);
    }
    tm_close(f);
    gb_free(&g);
    free(z);
    free(y);
    free(blocks);
    tmv_npy_free(&exp);
    g_dequant_checked++;
}

static void test_dequant_vectors(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    g_dequant_checked = 0;
    int nc = tmv_run_cases("gguf_dequant", NULL, dequant_case);
    assert_true(nc >= 24);
    assert_int_equal(g_dequant_checked, nc);
}

/* Types without reference vectors: Q8_1 and Q8_K are d*q; plain I8..I64/F64 convert. */
static void test_dequant_other_types(void **state) {
    (void)state;
    uint8_t b1[36];
    uint16_t d = tm_f32_to_f16(0.25f), sdummy = tm_f32_to_f16(100.0f);
    memcpy(b1, &d, 2);
    memcpy(b1 + 2, &sdummy, 2);
    for (int j = 0; j < 32; j++) b1[4 + j] = (uint8_t)(int8_t)(j - 16);
    float y[256];
    tm_err e;
    assert_int_equal(tm_ggml_dequantize(TM_GGML_Q8_1, b1, sizeof b1, 32, y, &e), TM_OK);
    for (int j = 0; j < 32; j++) assert_true(y[j] == 0.25f * (float)(j - 16));
    uint8_t b2[292];
    float dk = -0.125f;
    memcpy(b2, &dk, 4);
    for (int j = 0; j < 256; j++) b2[4 + j] = (uint8_t)(int8_t)(j - 128);
    memset(b2 + 260, 0, 32);
    assert_int_equal(tm_ggml_dequantize(TM_GGML_Q8_K, b2, sizeof b2, 256, y, &e), TM_OK);
    for (int j = 0; j < 256; j++) assert_true(y[j] == -0.125f * (float)(j - 128));
    int16_t i16[3] = {-7, 0, 32767};
    assert_int_equal(tm_ggml_dequantize(TM_GGML_I16, i16, sizeof i16, 3, y, &e), TM_OK);
    assert_true(y[0] == -7.0f && y[1] == 0.0f && y[2] == 32767.0f);
    double f64[2] = {1.5, -1e10};
    assert_int_equal(tm_ggml_dequantize(TM_GGML_F64, f64, sizeof f64, 2, y, &e), TM_OK);
    assert_true(y[0] == 1.5f && y[1] == -1e10f);
    /* refusals */
    assert_int_equal(tm_ggml_dequantize(77, b1, sizeof b1, 32, y, &e), TM_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "unsupported ggml type 77"));
    assert_int_equal(tm_ggml_dequantize(TM_GGML_Q8_0, b1, 10, 32, y, &e), TM_E_INVALID_ARG);
    assert_int_equal(tm_ggml_dequantize(TM_GGML_Q8_0, b1, sizeof b1, 31, y, &e), TM_E_INVALID_ARG);
    /* the type table */
    assert_int_equal(tm_ggml_type_from_name("q4_k"), TM_GGML_Q4_K);
    assert_int_equal(tm_ggml_type_from_name("IQ2_XXS"), TM_GGML_IQ2_XXS);
    assert_int_equal(tm_ggml_type_from_name("Q4_2"), -1);
    assert_null(tm_ggml_type_info_get(4));
    assert_null(tm_ggml_type_info_get(TM_GGML_TYPE_COUNT));
    uint64_t rb;
    assert_int_equal(tm_ggml_row_bytes(TM_GGML_Q6_K, 512, &rb, &e), TM_OK);
    assert_int_equal(rb, 420);
    assert_int_equal(tm_ggml_row_bytes(TM_GGML_Q6_K, 500, &rb, &e), TM_E_INVALID_ARG);
}

/* The IQ tables (src/quant/ggml_iq_tables.c): sizes, ascending packed rows, spot rows of
** ggml-common.h, the sign table. */
#include "quant/ggml_iq.h"

static void check_ascending(const char *hex, size_t rows, size_t hex_per_row) {
    assert_int_equal(strlen(hex), rows * hex_per_row);
    unsigned long prev = 0;
    for (size_t r = 0; r < rows; r++) {
        /* bytes little-endian: the value of a row is its bytes read last-first */
        unsigned long v = 0;
        for (size_t k = hex_per_row; k >= 2; k -= 2) {
            char byte[3] = {hex[r * hex_per_row + k - 2], hex[r * hex_per_row + k - 1], 0};
            v = v << 8 | strtoul(byte, NULL, 16);
        }
        if (r) assert_true(v > prev);
        prev = v;
    }
}

static uint64_t row64(const uint8_t *g) {
    uint64_t v = 0;
    for (int j = 7; j >= 0; j--) v = v << 8 | g[j];
    return v;
}

static void test_iq_tables(void **state) {
    (void)state;
    assert_true(tm__ggml_iq_init());
    check_ascending(tm__iq2xxs_hex, 256, 4);
    check_ascending(tm__iq2xs_hex, 512, 4);
    check_ascending(tm__iq2s_hex, 1024, 4);
    check_ascending(tm__iq3xxs_hex, 256, 4);
    check_ascending(tm__iq3s_hex, 512, 4);
    check_ascending(tm__iq1s_hex, 2048, 4);
    /* rows as ggml-common.h lists them */
    assert_true(row64(tm__iq2xxs_grid[0]) == 0x0808080808080808ull);
    assert_true(row64(tm__iq2xxs_grid[1]) == 0x080808080808082bull);
    assert_true(row64(tm__iq2xxs_grid[2]) == 0x0808080808081919ull);
    assert_true(row64(tm__iq2xxs_grid[3]) == 0x0808080808082b08ull);
    assert_int_equal(tm__iq3xxs_grid[0][0], 0x04);
    assert_int_equal(tm__iq3s_grid[0][3], 0x01);
    for (int j = 0; j < 8; j++) assert_int_equal(tm__iq1s_grid[0][j], -1);
    for (int j = 0; j < 8; j++) assert_int_equal(tm__iq2s_grid[1023][j], 0x2b);
    /* ksigns_iq2xs as listed there: 0, 129, 130, 3, 132, ... 255 */
    static const uint8_t ks[8] = {0, 129, 130, 3, 132, 5, 6, 135};
    assert_memory_equal(tm__ksigns_iq2xs, ks, 8);
    assert_int_equal(tm__ksigns_iq2xs[127], 255);
    assert_int_equal(tm__ksigns_iq2xs[120], 120);
}

/* ---------------------------------------------------------------------------------------- */
/* The shared GGUF models                                                                   */
/* ---------------------------------------------------------------------------------------- */

typedef struct model_fact {
    const char *file;
    int64_t     n_tensors, n_kv;
    int         file_type;             /* general.file_type                            */
    int         type_count[6][2];      /* ggml type id, number of tensors (0-terminated) */
    const char *name;                  /* one tensor: name, logical shape, type          */
    int64_t     shape[2];
    int         type;
    int64_t     n_tokens;
} model_fact;

/* Read from the files with an independent Python parser of the GGUF layout. */
static const model_fact k_models[] = {
    {"aidreams260K-F16.gguf", 38, 20, 1, {{0, 9}, {1, 29}}, "blk.0.ffn_down.weight", {64, 172}, 1, 512},
    {"aidreams260K-Q4_K_M.gguf", 38, 21, 15, {{0, 9}, {1, 4}, {6, 22}, {8, 3}}, "token_embd.weight", {512, 64}, 8, 512},
    {"ggml-vocab-bert-bge.gguf", 0, 20, 1, {{0, 0}}, NULL, {0, 0}, 0, 30522},
    {"ggml-vocab-llama-spm.gguf", 0, 22, 1, {{0, 0}}, NULL, {0, 0}, 0, 32000},
    {"stories260K-F16.gguf", 47, 20, 1, {{0, 11}, {1, 36}}, "blk.0.attn_q.weight", {64, 64}, 1, 512},
    {"stories260K-F32.gguf", 47, 20, 0, {{0, 47}}, "token_embd.weight", {512, 64}, 0, 512},
    {"stories260K-Q2_K.gguf", 47, 21, 10, {{0, 11}, {1, 5}, {8, 1}, {20, 30}}, "blk.0.attn_k.weight", {32, 64}, 20, 512},
    {"stories260K-Q4_0-ggufpy.gguf", 47, 21, 2, {{0, 11}, {1, 5}, {2, 31}}, "blk.0.attn_q.weight", {64, 64}, 2, 512},
    {"stories260K-Q4_K_M.gguf", 47, 21, 15, {{0, 11}, {1, 5}, {6, 28}, {8, 3}}, "blk.0.attn_k.weight", {32, 64}, 6, 512},
    {"stories260K-Q5_K_M.gguf", 47, 21, 17, {{0, 11}, {1, 5}, {7, 28}, {8, 3}}, "blk.0.attn_k.weight", {32, 64}, 7, 512},
    {"stories260K-Q6_K.gguf", 47, 21, 18, {{0, 11}, {1, 5}, {8, 31}}, "blk.0.ffn_down.weight", {64, 172}, 1, 512},
    {"stories260K-Q8_0-ggufpy.gguf", 47, 21, 7, {{0, 11}, {1, 5}, {8, 31}}, "blk.0.attn_q.weight", {64, 64}, 8, 512},
    {"stories260K-rows256-F32.gguf", 47, 21, 0, {{0, 47}}, "blk.0.ffn_down.weight", {43, 256}, 0, 512},
    {"stories260K-rows256-Q2_K.gguf", 47, 22, 10, {{0, 11}, {10, 20}, {11, 15}, {14, 1}}, "blk.0.ffn_down.weight", {43, 256}, 11, 512},
    {"stories260K-rows256-Q3_K_M.gguf", 47, 22, 12, {{0, 11}, {11, 20}, {12, 13}, {13, 2}, {14, 1}}, "blk.0.ffn_down.weight", {43, 256}, 12, 512},
    {"stories260K-rows256-Q4_0.gguf", 47, 22, 2, {{0, 11}, {2, 35}, {14, 1}}, "token_embd.weight", {128, 256}, 14, 512},
    {"stories260K-rows256-Q4_K_M.gguf", 47, 22, 15, {{0, 11}, {12, 31}, {14, 5}}, "blk.0.attn_k.weight", {8, 256}, 12, 512},
    {"stories260K-rows256-Q5_K_M.gguf", 47, 22, 17, {{0, 11}, {13, 31}, {14, 5}}, "blk.0.attn_k.weight", {8, 256}, 13, 512},
    {"stories260K-rows256-Q6_K.gguf", 47, 22, 18, {{0, 11}, {14, 36}}, "blk.0.ffn_down.weight", {43, 256}, 14, 512},
    {"stories260K-rows256-Q8_0.gguf", 47, 22, 7, {{0, 11}, {8, 36}}, "token_embd.weight", {128, 256}, 8, 512},
};

static int64_t meta_find(const tm_file *f, const char *key) {
    for (int64_t i = 0; i < tm_file_n_meta(f); i++)
        if (strcmp(tm_file_meta_key(f, i), key) == 0) return i;
    return -1;
}

static void test_models(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    for (size_t m = 0; m < sizeof k_models / sizeof k_models[0]; m++) {
        const model_fact *mf = &k_models[m];
        char path[1024];
        snprintf(path, sizeof path, "%s/models/gguf/%s", tmv_shared_dir(), mf->file);
        tm_file *f;
        tm_err e;
        tm_status s = tm_open(path, NULL, &f, &e);
        if (s) fprintf(stderr, "%s\n", e.msg);
        assert_int_equal(s, TM_OK);
        assert_int_equal(tm_file_format(f), TM_FMT_GGUF);
        assert_int_equal(tm_file_n_tensors(f), mf->n_tensors);
        assert_int_equal(tm_file_n_meta(f), mf->n_kv);
        int64_t ft = meta_find(f, "general.file_type");
        assert_true(ft >= 0);
        assert_int_equal(strtol(tm_file_meta_value(f, ft), NULL, 10), mf->file_type);
        int64_t tk = meta_find(f, "tokenizer.ggml.tokens");
        assert_true(tk >= 0);
        json_t *toks = json_loads(tm_gguf_meta_json(f, tk), JSON_DECODE_ANY, NULL);
        assert_true(json_is_array(toks));
        assert_int_equal(json_array_size(toks), mf->n_tokens);
        json_decref(toks);
        char head[32];
        snprintf(head, sizeof head, "[%lld x string: ", (long long)mf->n_tokens);
        assert_memory_equal(tm_file_meta_value(f, tk), head, strlen(head));
        int counts[64] = {0};
        for (int64_t i = 0; i < tm_file_n_tensors(f); i++) {
            int ty = tm_gguf_tensor_type(f, i);
            assert_true(ty >= 0 && ty < 64);
            counts[ty]++;
            const tm_tensor *t = tm_file_tensor(f, i);
            const tm_ggml_type_info *ti = tm_ggml_type_info_get(ty);
            assert_int_equal((t->quant != NULL), ti->is_quantized);
            /* every tensor reads (dequantizes) without error and is finite */
            float *v = malloc((size_t)(t->n_elems ? t->n_elems : 1) * sizeof(float));
            s = tm_tensor_read_f32(f, i, 0, t->n_elems, v, &e);
            if (s) fprintf(stderr, "%s: %s\n", mf->file, e.msg);
            assert_int_equal(s, TM_OK);
            for (int64_t k = 0; k < t->n_elems; k++) assert_true(isfinite(v[k]));
            free(v);
        }
        int total = 0;
        for (int k = 0; k < 6 && mf->type_count[k][1]; k++) {
            assert_int_equal(counts[mf->type_count[k][0]], mf->type_count[k][1]);
            total += mf->type_count[k][1];
        }
        assert_int_equal(total, mf->n_tensors);
        if (mf->name) {
            int64_t i = tm_file_find(f, mf->name);
            assert_true(i >= 0);
            const tm_tensor *t = tm_file_tensor(f, i);
            assert_int_equal(t->ndim, 2);
            assert_int_equal(t->shape[0], mf->shape[0]);
            assert_int_equal(t->shape[1], mf->shape[1]);
            assert_int_equal(tm_gguf_tensor_type(f, i), mf->type);
        }
        tm_close(f);
    }
}

/* F16 file = F32 file rounded to f16 (both converted from the same checkpoint). */
static void test_f16_matches_f32(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char p32[1024], p16[1024];
    snprintf(p32, sizeof p32, "%s/models/gguf/stories260K-F32.gguf", tmv_shared_dir());
    snprintf(p16, sizeof p16, "%s/models/gguf/stories260K-F16.gguf", tmv_shared_dir());
    tm_file *a, *b;
    tm_err e;
    assert_int_equal(tm_open(p32, NULL, &a, &e), TM_OK);
    assert_int_equal(tm_open(p16, NULL, &b, &e), TM_OK);
    int64_t i = tm_file_find(a, "blk.1.attn_q.weight"), j = tm_file_find(b, "blk.1.attn_q.weight");
    const tm_tensor *t = tm_file_tensor(a, i);
    assert_int_equal(tm_file_tensor(b, j)->dtype, TM_F16);
    float *x = malloc((size_t)t->n_elems * 4), *y = malloc((size_t)t->n_elems * 4);
    assert_int_equal(tm_tensor_read_f32(a, i, 0, t->n_elems, x, &e), TM_OK);
    assert_int_equal(tm_tensor_read_f32(b, j, 0, t->n_elems, y, &e), TM_OK);
    for (int64_t k = 0; k < t->n_elems; k++) assert_true(tm_f16_to_f32(tm_f32_to_f16(x[k])) == y[k]);
    free(x);
    free(y);
    tm_close(a);
    tm_close(b);
}

/* ---------------------------------------------------------------------------------------- */
/* Commands                                                                                 */
/* ---------------------------------------------------------------------------------------- */

static int run(char **out, const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while ((r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (cap - n < 1024) { cap *= 2; buf = realloc(buf, cap); }
    }
    buf[n] = '\0';
    int st = pclose(p);
    if (out) *out = buf;
    else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static json_t *run_json(int want_rc, const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char *out;
    int rc = run(&out, "%s", cmd);
    if (rc != want_rc) fprintf(stderr, "%s: exit %d\n%.2000s\n", cmd, rc, out);
    assert_int_equal(rc, want_rc);
    json_t *j = json_loads(out, 0, NULL);
    if (!j) fprintf(stderr, "%s: not JSON:\n%.2000s\n", cmd, out);
    free(out);
    assert_non_null(j);
    return j;
}

static const char *bin(void) {
    const char *b = getenv("TM_BIN");
    return b ? b : "./tensormorph";
}

static void test_cli_inspect(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    const char *S = tmv_shared_dir();
    json_t *d = run_json(0, "%s inspect --json %s/models/gguf/stories260K-rows256-Q4_K_M.gguf", bin(), S);
    assert_string_equal(json_string_value(json_object_get(d, "format")), "gguf");
    assert_int_equal(json_integer_value(json_object_get(d, "n_tensors")), 47);
    assert_int_equal(json_integer_value(json_object_get(d, "n_quantized")), 36);
    json_t *meta = json_object_get(d, "metadata");
    assert_int_equal(json_integer_value(json_object_get(meta, "general.file_type")), 15);
    assert_int_equal(json_array_size(json_object_get(meta, "tokenizer.ggml.tokens")), 512);
    assert_string_equal(json_string_value(json_array_get(json_object_get(meta, "tokenizer.ggml.tokens"), 1)), "<s>");
    json_t *ts = json_object_get(d, "tensors");
    int found = 0;
    for (size_t i = 0; i < json_array_size(ts); i++) {
        json_t *t = json_array_get(ts, i);
        if (strcmp(json_string_value(json_object_get(t, "name")), "blk.0.ffn_down.weight")) continue;
        found = 1;
        json_t *sh = json_object_get(t, "shape");
        assert_int_equal(json_integer_value(json_array_get(sh, 0)), 43);
        assert_int_equal(json_integer_value(json_array_get(sh, 1)), 256);
        assert_int_equal(json_integer_value(json_object_get(t, "bytes")), 43 * 144);
        json_t *q = json_object_get(t, "quantization");
        assert_string_equal(json_string_value(json_object_get(q, "ggml_type")), "Q4_K");
        assert_int_equal(json_integer_value(json_object_get(q, "group_size")), 32);
        assert_int_equal(json_integer_value(json_object_get(q, "block_size")), 256);
        assert_true(json_is_true(json_object_get(q, "has_min")));
        assert_true(fabs(json_number_value(json_object_get(t, "bits_per_param")) - 4.5) < 1e-9);
    }
    assert_true(found);
    json_decref(d);
    /* text: the long token array is summarised */
    char *out;
    assert_int_equal(run(&out, "%s inspect --no-tensors %s/models/gguf/ggml-vocab-bert-bge.gguf", bin(), S), 0);
    assert_non_null(strstr(out, "tokenizer.ggml.tokens = [30522 x string: \"[PAD]\", \"[unused0]\""));
    assert_non_null(strstr(out, "general.architecture = bert"));
    free(out);
}

static void test_cli_qdiff_scalar_diff(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    const char *S = tmv_shared_dir();
    /* Q4_K_M and Q6_K against the F32 source: plain rounding-like error in LSB of each
    ** element's sub-block step (1/sqrt(12) = 0.289 for uniform rounding error) */
    const char *qs[] = {"Q4_K_M", "Q6_K", "Q8_0", "Q4_0"};
    for (int k = 0; k < 4; k++) {
        json_t *d = run_json(0, "%s qdiff --json %s/models/gguf/stories260K-rows256-F32.gguf "
                                "%s/models/gguf/stories260K-rows256-%s.gguf",
                             bin(), S, S, qs[k]);
        json_t *ts = json_object_get(d, "tensors");
        assert_int_equal(json_array_size(ts), 36);
        for (size_t i = 0; i < json_array_size(ts); i++) {
            json_t *t = json_array_get(ts, i);
            double r = json_number_value(json_object_get(t, "rmse_lsb"));
            if (!(r > 0.2 && r < 0.32)) fprintf(stderr, "%s %s: rmse_lsb %g\n", qs[k], json_string_value(json_object_get(t, "name")), r);
            assert_true(r > 0.2 && r < 0.32);
            assert_true(json_number_value(json_object_get(t, "sqnr_db")) > 15.0);
        }
        if (k == 1) assert_int_equal(json_integer_value(json_object_get(d, "n_flagged")), 0);
        json_decref(d);
    }
    /* scalar on a Q4_K element: both levels of scale and the identity */
    json_t *d = run_json(0, "%s scalar --json %s/models/gguf/stories260K-rows256-Q4_K_M.gguf "
                            "blk.0.attn_q.weight 3,17 --ref %s/models/gguf/stories260K-rows256-F32.gguf",
                         bin(), S, S);
    json_t *g = json_object_get(d, "ggml");
    assert_string_equal(json_string_value(json_object_get(g, "type")), "Q4_K");
    assert_int_equal(json_integer_value(json_object_get(d, "group")), (3 * 256 + 17) / 32);
    assert_int_equal(json_integer_value(json_object_get(g, "block")), 3);
    double scale = json_number_value(json_object_get(d, "scale"));
    double d_ = json_number_value(json_object_get(g, "super_scale"));
    double dmin = json_number_value(json_object_get(g, "super_min"));
    double sc = (double)json_integer_value(json_object_get(g, "sub_scale"));
    double m = (double)json_integer_value(json_object_get(g, "sub_min"));
    assert_true(scale == (double)(float)(d_ * sc));
    assert_true(json_number_value(json_object_get(g, "min")) == (double)(float)(dmin * m));
    double code = (double)json_integer_value(json_object_get(d, "code"));
    double v = json_number_value(json_object_get(d, "value"));
    assert_true(fabs(v - (code * scale - dmin * m)) < 1e-6);
    assert_true(fabs(json_number_value(json_object_get(d, "error_lsb"))) <= 0.5);
    json_decref(d);
    /* diff F32 vs F16 by name */
    d = run_json(0, "%s diff --json %s/models/gguf/stories260K-F32.gguf %s/models/gguf/stories260K-F16.gguf",
                 bin(), S, S);
    json_t *ts = json_object_get(d, "tensors");
    assert_true(json_array_size(ts) >= 36);
    for (size_t i = 0; i < json_array_size(ts); i++) {
        json_t *t = json_array_get(ts, i);
        json_t *cs = json_object_get(t, "cosine");
        if (json_is_number(cs)) assert_true(json_number_value(cs) > 0.99999);
    }
    json_decref(d);
}

static void test_cli_refusals(void **state) {
    (void)state;
    gb g = {0};
    mk_type_unknown(&g);
    const char *p = to_file(&g);
    char *out;
    int rc = run(&out, "%s inspect %s 2>&1", bin(), p);
    assert_int_equal(rc, 3);
    assert_non_null(strstr(out, "unsupported ggml type 99"));
    free(out);
    unlink(p);
    gb_free(&g);
    mk_duplicate_names(&g);
    p = to_file(&g);
    rc = run(&out, "%s inspect %s 2>&1", bin(), p);
    assert_int_equal(rc, 3);
    assert_non_null(strstr(out, "duplicate tensor name"));
    free(out);
    unlink(p);
    gb_free(&g);
}


/* One LSB of a codebook type is the sub-block scale times the spacing of its code values
** (tm_ggml_code_step, derived from the grids), and qdiff's RMSE in LSB is exactly that measure;
** a K-quant sub-block of scale 0 (llama.cpp writes them) is not a bad scale. Reference files:
** llama-quantize's own outputs of synth256 (../shared/models/gguf/imatrix/README.md). */
static void test_codebook_lsb(void **state) {
    (void)state;
    /* the steps, from the grids: IQ2 magnitudes {8, 25, 43} (IQ2_S too), IQ3_XXS
    ** {4, 12, ..., 62} (8 levels), IQ3_S {1, 3, ..., 15}, IQ1 code 8*grid +- 1, IQ4 kvalues */
    assert_true(tm_ggml_code_step(tm_ggml_type_from_name("IQ2_XXS")) == 17.5);
    assert_true(tm_ggml_code_step(tm_ggml_type_from_name("IQ2_XS")) == 17.5);
    assert_true(tm_ggml_code_step(tm_ggml_type_from_name("IQ2_S")) == 17.5);
    assert_true(tm_ggml_code_step(tm_ggml_type_from_name("IQ3_XXS")) == 58.0 / 7);
    assert_true(tm_ggml_code_step(tm_ggml_type_from_name("IQ3_S")) == 2.0);
    assert_true(tm_ggml_code_step(tm_ggml_type_from_name("IQ1_S")) == 8.0);
    assert_true(tm_ggml_code_step(tm_ggml_type_from_name("IQ1_M")) == 8.0);
    assert_true(tm_ggml_code_step(tm_ggml_type_from_name("IQ4_NL")) == 16.0);
    assert_true(tm_ggml_code_step(tm_ggml_type_from_name("IQ4_XS")) == 16.0);
    const char *plain[] = {"Q4_0", "Q8_0", "Q2_K", "Q4_K", "Q6_K", "TQ2_0", "F16"};
    for (size_t k = 0; k < sizeof plain / sizeof plain[0]; k++)
        assert_true(tm_ggml_code_step(tm_ggml_type_from_name(plain[k])) == 1.0);
    if (!tmv_require_shared()) return;
    static const struct { const char *file; const char *tensor; } cases[] = {
        {"synth256-IQ4_NL-imx.gguf", "blk.0.attn_q.weight"},
        {"synth256-IQ2_XXS-imx.gguf", "blk.1.attn_output.weight"},
        {"synth256-IQ3_S-imx.gguf", "blk.0.ffn_up.weight"},
        {"synth256-Q2_K-imx.gguf", "blk.0.attn_q.weight"},
    };
    char rp[1024], qp[1024];
    snprintf(rp, sizeof rp, "%s/models/gguf/imatrix/synth256-F32.gguf", tmv_shared_dir());
    tm_file *ref, *q;
    tm_err e;
    assert_int_equal(tm_open(rp, NULL, &ref, &e), TM_OK);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        snprintf(qp, sizeof qp, "%s/models/gguf/imatrix/%s", tmv_shared_dir(), cases[c].file);
        assert_int_equal(tm_open(qp, NULL, &q, &e), TM_OK);
        tm_qdiff_result *r = NULL;
        tm_qdiff_params prm = {.n_threads = 2};
        assert_int_equal(tm_qdiff(ref, q, &prm, &r, &e), TM_OK);
        int64_t qi = tm_file_find(q, cases[c].tensor), ri = tm_file_find(ref, cases[c].tensor);
        assert_true(qi >= 0 && ri >= 0);
        const tm_tensor *t = tm_file_tensor(q, qi);
        double step = tm_ggml_code_step(t->quant->ggml_type);
        /* the measure by hand: sum of (error / (|element scale| * step))^2, a zero sub-block
        ** scale measured in the smallest nonzero one of its block */
        float *x = malloc((size_t)t->n_elems * sizeof(float));
        assert_non_null(x);
        assert_int_equal(tm_tensor_read_f32(ref, ri, 0, t->n_elems, x, &e), TM_OK);
        const tm_ggml_type_info *ti = tm_ggml_type_info_get(t->quant->ggml_type);
        double sl2 = 0;
        for (int64_t b0 = 0; b0 < t->n_elems; b0 += ti->block_size) {
            double smin = 0;
            tm_qelement qe[256];
            for (int64_t i = 0; i < ti->block_size; i++) {
                assert_int_equal(tm_qelement_get(q, qi, b0 + i, &qe[i], &e), TM_OK);
                double a = fabs(qe[i].scale);
                if (a > 0 && (smin == 0 || a < smin)) smin = a;
            }
            for (int64_t i = 0; i < ti->block_size; i++) {
                double lsb = (qe[i].scale != 0 ? fabs(qe[i].scale) : smin) * step;
                double el = fabs(qe[i].value - (double)x[b0 + i]) / lsb;
                sl2 += el * el;
            }
        }
        double want = sqrt(sl2 / (double)t->n_elems);
        const tm_qdiff_entry *en = NULL;
        for (int64_t k = 0; k < r->n; k++)
            if (!strcmp(r->entries[k].name, cases[c].tensor)) en = &r->entries[k];
        assert_non_null(en);
        if (!(fabs(en->e.rmse_lsb - want) <= 1e-6 * want))
            fail_msg("%s %s: qdiff RMSE %.9g LSB, by hand %.9g", cases[c].file, cases[c].tensor, en->e.rmse_lsb, want);
        assert_int_equal(en->e.n_bad_scales, 0);
        assert_int_equal(en->codebook, step != 1.0);
        /* llama-quantize's own output is not damage: nothing of it is flagged */
        assert_int_equal(r->n_flagged, 0);
        free(x);
        tm_qdiff_free(r);
        tm_close(q);
    }
    tm_close(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_small),
        cmocka_unit_test(test_corrupt_corpus),
        cmocka_unit_test(test_truncated_prefixes),
        cmocka_unit_test(test_dequant_vectors),
        cmocka_unit_test(test_dequant_other_types),
        cmocka_unit_test(test_iq_tables),
        cmocka_unit_test(test_models),
        cmocka_unit_test(test_f16_matches_f32),
        cmocka_unit_test(test_cli_inspect),
        cmocka_unit_test(test_cli_qdiff_scalar_diff),
        cmocka_unit_test(test_cli_refusals),
        cmocka_unit_test(test_codebook_lsb),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
