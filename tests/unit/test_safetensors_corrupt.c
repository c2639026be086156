/* test_safetensors_corrupt.c: the safetensors reader against the corrupt-file corpus (header
** length, JSON, entries, data layout), sharded indexes and their failures, directory rules,
** stray files beside an index and header byte offsets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsutil.h"
#include "helpers/cli_run.h"
#include "helpers/fixture.h"
#include "helpers/st_fixture.h"
#include "tensormorph.h"

/* ---------------------------------------------------------------------------------------- */
/* The corrupt corpus                                                                        */
/* ---------------------------------------------------------------------------------------- */

static void test_corrupt_truncated(void **state) {
    const char *dir = *state;
    char *p = tmst_path(dir, "x.safetensors");
    tmt_write_file(p, "\x10\x00\x00\x00\x00", 5);
    tm_file *f = NULL;
    tm_err e;
    assert_int_equal(tm_open(p, NULL, &f, &e), TM_E_CORRUPT);
    assert_non_null(strstr(e.msg, "x.safetensors: file is 5 bytes, truncated"));
    assert_int_equal(e.file_offset, 5);
    /* an empty file */
    tmt_write_file(p, "", 0);
    assert_int_equal(tm_open(p, NULL, &f, &e), TM_E_CORRUPT);
    assert_non_null(strstr(e.msg, "file is 0 bytes"));
    /* a valid file cut inside its data */
    size_t len;
    uint8_t *b = tmst_image("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
                          &len);
    tmt_write_file(p, b, len - 3);
    assert_int_equal(tm_open(p, NULL, &f, &e), TM_E_CORRUPT);
    assert_non_null(strstr(e.msg, "tensor 'a': data_offsets [0, 16] run past the end"));
    assert_int_equal(e.file_offset, 9);
    tmt_write_file(p, b, len);
    assert_int_equal(tm_open(p, NULL, &f, &e), TM_OK);
    tm_close(f);
    free(b);
    free(p);
}

static void test_corrupt_header_length(void **state) {
    (void)state;
    /* header length past the end */
    uint8_t b[32] = {0};
    b[0] = 0xe8;
    b[1] = 0x03; /* 1000 */
    memcpy(b + 8, "{}", 2);
    tm_file *f = NULL;
    tm_err e;
    assert_int_equal(tm_open_buffer(b, 10, "x.safetensors", NULL, &f, &e), TM_E_CORRUPT);
    assert_non_null(strstr(e.msg, "header length 1000 runs past the end of the file (2 bytes"));
    assert_int_equal(e.file_offset, 0);
    /* absurd length (all ones) */
    memset(b, 0xff, 8);
    assert_int_equal(tm_open_buffer(b, 32, "x.safetensors", NULL, &f, &e), TM_E_CORRUPT);
    assert_non_null(strstr(e.msg, "runs past the end"));
    /* header over the caller's limit, and the default limit is 100 MiB */
    tm_open_params p = tm_open_params_default();
    p.max_header_bytes = 16;
    tmst_expect_buf_fail("{\"__metadata__\":{\"format\":\"pt\"}}", 0, &p, TM_E_LIMIT,
                    "header length 32 exceeds the limit of 16 bytes", 0);
    size_t big = (100u << 20) + 8;
    uint8_t *huge = calloc(1, big + 8);
    assert_non_null(huge);
    uint64_t hl = big;
    memcpy(huge, &hl, 8);
    assert_int_equal(tm_open_buffer(huge, big + 8, "x.safetensors", NULL, &f, &e), TM_E_LIMIT);
    assert_non_null(strstr(e.msg, "exceeds the limit of 104857600 bytes"));
    free(huge);
    /* too short for an object */
    tmst_expect_buf_fail("{", 0, NULL, TM_E_CORRUPT, "too short for a JSON object", 0);
}

static void test_corrupt_json(void **state) {
    (void)state;
    tmst_expect_buf_fail("[1, 2]", 0, NULL, TM_E_CORRUPT, "header is a JSON array, not an object", 8);
    tmst_expect_buf_fail("\"str\"", 0, NULL, TM_E_CORRUPT, "header is a JSON string, not an object", 8);
    tmst_expect_buf_fail("{\"a\": ", 0, NULL, TM_E_CORRUPT, "header is not valid JSON", -1);
    tmst_expect_buf_fail("{\"a\":{} x", 0, NULL, TM_E_CORRUPT, "header is not valid JSON", -1);
    tmst_expect_buf_fail("{\"a\":\"\xff\xfe\"}", 0, NULL, TM_E_CORRUPT, "not valid JSON", -1);
    tmst_expect_buf_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                    8, NULL, TM_E_CORRUPT, "duplicate key in header", -1);
    tmst_expect_buf_fail("{\"__metadata__\":{\"k\":1}}", 0, NULL, TM_E_CORRUPT,
                    "__metadata__ value for key 'k' is a JSON integer, not a string", 9);
    tmst_expect_buf_fail("{\"__metadata__\":[\"k\"]}", 0, NULL, TM_E_CORRUPT,
                    "__metadata__ is a JSON array, not an object", 9);
    tmst_expect_buf_fail("{\"__metadata__\":{\"k\":null}}", 0, NULL, TM_E_CORRUPT, "not a string", 9);
}

static void test_corrupt_entries(void **state) {
    (void)state;
    /* one entry each: header, data bytes, status, message, offset (-1: any) */
    static const struct {
        const char *header;
        size_t      n_data;
        tm_status   status;
        const char *substr;
        int64_t     offset;
    } cases[] = {
        /* the brief's example, byte for byte */
        {"{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_offsets\":[0,96]}}",
         96, TM_E_CORRUPT,
         "x.safetensors: tensor 'a.weight': data_offsets [0, 96] span 96 bytes but shape [4, 8] x F32 "
         "needs 128 (header byte 9)",
         9},
        {"{\"a\":{\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, TM_E_UNSUPPORTED, "tensor 'a': unknown dtype 'F31'", 9},
        {"{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, TM_E_UNSUPPORTED, "unknown dtype 'f32'", 9},
        {"{\"a\":{\"dtype\":\"I4\",\"shape\":[2],\"data_offsets\":[0,1]}}",
         1, TM_E_UNSUPPORTED, "unknown dtype 'I4'", 9},
        {"{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, TM_E_CORRUPT, "dtype is a JSON integer, not a string", 9},
        {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, TM_E_CORRUPT, "tensor 'a': entry has no \"dtype\"", 9},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}",
         4, TM_E_CORRUPT, "entry has no \"shape\"", 9},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}",
         4, TM_E_CORRUPT, "entry has no \"data_offsets\"", 9},
        {"{\"a\":[1]}",
         0, TM_E_CORRUPT, "entry is a JSON array, not an object", 9},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,-3],\"data_offsets\":[0,0]}}",
         0, TM_E_CORRUPT, "negative dim shape[1] = -3", 9},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}",
         8, TM_E_CORRUPT, "shape[0] is a JSON number, not an integer", 9},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}",
         16, TM_E_CORRUPT, "shape is a JSON integer, not an array", 9},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}",
         0, TM_E_CORRUPT, "shape [4294967296, 4294967296] x U8 overflows 64 bits", 9},
        {"{\"a\":{\"dtype\":\"F64\",\"shape\":[1152921504606846976,2],\"data_offsets\":[0,0]}}",
         0, TM_E_CORRUPT, "overflows 64 bits", 9},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
         1, TM_E_LIMIT, "shape has 9 dims, more than the 8 supported", 9},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,0]}}",
         1, TM_E_CORRUPT, "data_offsets [1, 0] need 0 <= begin <= end", 9},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}",
         1, TM_E_CORRUPT, "need 0 <= begin <= end", 9},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}",
         1, TM_E_CORRUPT, "data_offsets is not a pair of integers", 9},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,\"1\"]}}",
         1, TM_E_CORRUPT, "data_offsets is not a pair of integers", 9},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}",
         1, TM_E_CORRUPT, "not valid JSON", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        tmst_expect_buf_fail(cases[i].header, cases[i].n_data, NULL, cases[i].status, cases[i].substr,
                             cases[i].offset);
    /* the second entry's offset is where its key starts */
    const char *two = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},  \"b\":"
                      "{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[2,7]}}";
    tmst_expect_buf_fail(two, 7, NULL, TM_E_CORRUPT, "tensor 'b': data_offsets [2, 7] span 5 bytes",
                    8 + (strstr(two, "\"b\"") - two));
}

static void test_corrupt_layout(void **state) {
    (void)state;
    /* header of 104 bytes each below: data starts at 8 + strlen(header) */
    const char *ovl = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}";
    tmst_expect_buf_fail(ovl, 24, NULL, TM_E_CORRUPT,
                    "tensors 'a' [0, 16] and 'b' [8, 24] overlap", (int64_t)(8 + strlen(ovl) + 8));
    const char *same = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                       "\"b\":{\"dtype\":\"I32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    tmst_expect_buf_fail(same, 16, NULL, TM_E_CORRUPT, "overlap", (int64_t)(8 + strlen(same)));
    const char *past = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    tmst_expect_buf_fail(past, 8, NULL, TM_E_CORRUPT,
                    "tensor 'a': data_offsets [0, 16] run past the end of the data area (8 bytes",
                    9);
    const char *hole = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[20,36]}}";
    tmst_expect_buf_fail(hole, 36, NULL, TM_E_CORRUPT, "hole in the data area: bytes [16, 20)",
                    (int64_t)(8 + strlen(hole) + 16));
    tmst_expect_buf_fail(past, 20, NULL, TM_E_CORRUPT,
                    "hole in the data area: the last 4 bytes", (int64_t)(8 + strlen(past) + 16));
    const char *lead = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[4,20]}}";
    tmst_expect_buf_fail(lead, 20, NULL, TM_E_CORRUPT, "bytes [0, 4)", (int64_t)(8 + strlen(lead)));
    tmst_expect_buf_fail("{}", 3, NULL, TM_E_CORRUPT, "the last 3 bytes", 10);
    /* zero-size tensors may sit on any boundary; out of order entries are fine */
    size_t len;
    uint8_t *b = tmst_image("{\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[16,16]},"
                          "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[16,18]},"
                          "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                          "\"s\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[18,20]}}",
                          20, &len);
    tm_file *f = NULL;
    tm_err e;
    assert_int_equal(tm_open_buffer(b, len, "ok", NULL, &f, &e), TM_OK);
    assert_int_equal(tm_file_n_tensors(f), 4);
    assert_string_equal(tm_file_tensor(f, 0)->name, "z");
    assert_int_equal(tm_file_tensor(f, 0)->n_elems, 0);
    assert_int_equal(tm_file_tensor(f, 3)->ndim, 0);
    assert_int_equal(tm_file_tensor(f, 3)->n_elems, 1);
    tm_close(f);
    free(b);
    /* an empty checkpoint is valid */
    b = tmst_image("{}", 0, &len);
    assert_int_equal(tm_open_buffer(b, len, "ok", NULL, &f, &e), TM_OK);
    assert_int_equal(tm_file_n_tensors(f), 0);
    tm_close(f);
    free(b);
}

/* A shard or index for the sharded corrupt cases. */
static void put_shard(const char *dir, const char *name, const char *tensors_csv) {
    /* tensors_csv: "a,b": each F32 [2] */
    char hdr[1024] = "{";
    size_t pos = 1;
    int k = 0;
    char copy[256];
    snprintf(copy, sizeof copy, "%s", tensors_csv);
    for (char *t = copy; t && *t;) {
        char *c = strchr(t, ',');
        if (c) *c = '\0';
        pos += (size_t)snprintf(hdr + pos, sizeof hdr - pos,
                                "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[%d,%d]}",
                                k ? "," : "", t, k * 8, k * 8 + 8);
        k++;
        t = c ? c + 1 : NULL;
    }
    snprintf(hdr + pos, sizeof hdr - pos, "}");
    size_t len;
    uint8_t *b = tmst_image(hdr, (size_t)k * 8, &len);
    char *p = tmst_path(dir, name);
    tmt_write_file(p, b, len);
    free(p);
    free(b);
}

static void expect_open_fail(const char *path, tm_status status, const char *substr) {
    tm_file *f = (tm_file *)1;
    tm_err e;
    tm_status s = tm_open(path, NULL, &f, &e);
    if (s != status || !strstr(e.msg, substr)) tmst_dump_err(&e);
    assert_int_equal(s, status);
    assert_null(f);
    assert_non_null(strstr(e.msg, substr));
}

static void test_corrupt_sharded(void **state) {
    const char *dir = *state;
    char *idx = tmst_path(dir, "model.safetensors.index.json");
    put_shard(dir, "s1.safetensors", "a,b");
    put_shard(dir, "s2.safetensors", "c");
    const char *good = "{\"metadata\":{\"total_size\":24},\"weight_map\":{\"a\":\"s1.safetensors\","
                       "\"b\":\"s1.safetensors\",\"c\":\"s2.safetensors\"}}";
    tmt_write_text(dir, "model.safetensors.index.json", good);
    tm_file *f = NULL;
    tm_err e;
    assert_int_equal(tm_open(idx, NULL, &f, &e), TM_OK);
    assert_int_equal(tm_file_n_tensors(f), 3);
    assert_int_equal(tm_file_n_paths(f), 2);
    assert_int_equal(tm_file_tensor(f, tm_file_find(f, "c"))->file_index, 1);
    assert_int_equal(tm_file_n_warnings(f), 0);
    tm_close(f);

    /* indexes that contradict their shards, escape the folder or are malformed */
    static const struct {
        const char *index;
        tm_status   status;
        const char *substr;
    } bad[] = {
        {"{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
         "\"c\":\"s3.safetensors\"}}",
         TM_E_IO, "shard 's3.safetensors' named by the index is missing"},
        {"{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
         "\"c\":\"s2.safetensors\",\"d\":\"s2.safetensors\"}}",
         TM_E_CORRUPT, "index lists tensor 'd' in shard 's2.safetensors' but that shard does not "
                       "hold it"},
        {"{\"weight_map\":{\"a\":\"s1.safetensors\",\"c\":\"s2.safetensors\"}}",
         TM_E_CORRUPT, "s1.safetensors holds tensor 'b' that the index does not list"},
        {"{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\","
         "\"c\":\"s2.safetensors\"}}",
         TM_E_CORRUPT, "index puts tensor 'b' in shard 's2.safetensors' but it is in"},
        {"{\"weight_map\":{\"a\":\"../s1.safetensors\"}}",
         TM_E_CORRUPT, "'../s1.safetensors', a path outside the index's folder"},
        {"{\"weight_map\":{\"a\":\"..\"}}", TM_E_CORRUPT, "outside the index's folder"},
        {"{\"weight_map\":{\"a\":\"/etc/passwd\"}}", TM_E_CORRUPT, "outside the index's folder"},
        {"{\"weight_map\":{\"a\":3}}", TM_E_CORRUPT, "weight_map entry for tensor 'a' is a JSON integer"},
        {"{\"metadata\":{}}", TM_E_CORRUPT, "index has no \"weight_map\" object"},
        {"{\"weight_map\":{}}", TM_E_CORRUPT, "lists no tensors"},
        {"{\"weight_map\":{\"a\":\"s1.safetensors\",", TM_E_CORRUPT, "index is not valid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tmt_write_text(dir, "model.safetensors.index.json", bad[i].index);
        expect_open_fail(idx, bad[i].status, bad[i].substr);
    }
    /* one tensor in two shards */
    put_shard(dir, "s2.safetensors", "c,a");
    tmt_write_text(dir, "model.safetensors.index.json", good);
    expect_open_fail(idx, TM_E_CORRUPT, "tensor 'a' also appears in shard");
    put_shard(dir, "s2.safetensors", "c");
    /* a corrupt shard: the message names the shard */
    tmt_write_text(dir, "s2.safetensors", "garbage!");
    tmt_write_text(dir, "model.safetensors.index.json", good);
    expect_open_fail(idx, TM_E_CORRUPT, "s2.safetensors: header length");
    put_shard(dir, "s2.safetensors", "c");
    /* total_size that lies is a warning */
    tmt_write_text(dir, "model.safetensors.index.json",
               "{\"metadata\":{\"total_size\":1000},\"weight_map\":{\"a\":\"s1.safetensors\","
               "\"b\":\"s1.safetensors\",\"c\":\"s2.safetensors\"}}");
    assert_int_equal(tm_open(dir, NULL, &f, &e), TM_OK);
    assert_int_equal(tm_file_n_warnings(f), 1);
    assert_non_null(strstr(tm_file_warning(f, 0), "metadata.total_size is 1000 but the tensors hold 24"));
    tm_close(f);
    free(idx);
}

static void test_open_directory_rules(void **state) {
    const char *dir = *state;
    tm_file *f = NULL;
    tm_err e;
    assert_int_equal(tm_open(dir, NULL, &f, &e), TM_E_IO);
    assert_non_null(strstr(e.msg, "no model.safetensors"));
    put_shard(dir, "one.safetensors", "a");
    assert_int_equal(tm_open(dir, NULL, &f, &e), TM_OK);
    tm_close(f);
    put_shard(dir, "two.safetensors", "b");
    assert_int_equal(tm_open(dir, NULL, &f, &e), TM_E_INVALID_ARG);
    assert_non_null(strstr(e.msg, "holds 2 *.safetensors files and no index"));
    put_shard(dir, "model.safetensors", "m1,m2");
    assert_int_equal(tm_open(dir, NULL, &f, &e), TM_OK);
    assert_int_equal(tm_file_n_tensors(f), 2);
    tm_close(f);
    /* config.json: invalid JSON is a warning, valid JSON is kept */
    tmt_write_text(dir, "config.json", "{\"hidden_size\": 64,");
    assert_int_equal(tm_open(dir, NULL, &f, &e), TM_OK);
    assert_null(tm_file_config_json(f));
    assert_int_equal(tm_file_n_warnings(f), 1);
    assert_non_null(strstr(tm_file_warning(f, 0), "config.json: not valid JSON"));
    tm_close(f);
    tmt_write_text(dir, "config.json", "[1]");
    assert_int_equal(tm_open(dir, NULL, &f, &e), TM_OK);
    assert_null(tm_file_config_json(f));
    assert_non_null(strstr(tm_file_warning(f, 0), "not an object"));
    tm_close(f);
    tmt_write_text(dir, "config.json", "{\"hidden_size\": 64}");
    char *m = tmst_path(dir, "model.safetensors");
    assert_int_equal(tm_open(m, NULL, &f, &e), TM_OK);
    assert_string_equal(tm_file_config_json(f), "{\"hidden_size\": 64}");
    assert_int_equal(tm_file_n_warnings(f), 0);
    tm_close(f);
    free(m);
}

/* A stray checkpoint file beside a sharded index (a single-file copy, an older shard): what the
** index names is read, the stray is not, and a warning names it; whichever way the checkpoint
** is named (the index, its directory, an index under another name). Issue 12 item 4. */
static void test_stray_beside_index(void **state) {
    const char *dir = *state;
    char *path = tmst_path(dir, "model.safetensors");
    tm_st_write_params wp = {64, NULL, NULL, 0, 0, 0, NULL};
    tmst_write_all(path, tmst_entries, tmst_n_entries, &wp); /* shards + model.safetensors.index.json */
    put_shard(dir, "model.safetensors", "stray_a,layer.0.weight");
    put_shard(dir, "model-00009-of-00009.safetensors", "stray_b");
    char *idx = tmst_path(dir, "model.safetensors.index.json");
    char *other = tmst_path(dir, "other.safetensors.index.json");
    for (int o = 0; o < 3; o++) {
        if (o == 2) assert_int_equal(rename(idx, other), 0); /* then only the dir finds it */
        tm_file *f = NULL;
        tm_err e;
        tm_status s = tm_open(o == 0 ? idx : dir, NULL, &f, &e);
        if (s) tmst_dump_err(&e);
        assert_int_equal(s, TM_OK);
        tmst_check_contents(f, tmst_entries, tmst_n_entries); /* nothing of the strays merged in */
        assert_int_equal(tm_file_find(f, "stray_a"), -1);
        assert_int_equal(tm_file_find(f, "stray_b"), -1);
        for (int i = 0; i < tm_file_n_paths(f); i++) { /* the strays are not even mapped */
            const char *fp = tm_file_path(f, i);
            assert_int_not_equal(strcmp(fp + strlen(fp) - strlen("/model.safetensors"), "/model.safetensors"), 0);
            assert_null(strstr(fp, "00009"));
        }
        assert_int_equal(tm_file_n_warnings(f), 2);
        int named[2] = {0, 0};
        for (int64_t i = 0; i < tm_file_n_warnings(f); i++) {
            const char *w = tm_file_warning(f, i);
            assert_non_null(strstr(w, "a checkpoint file beside "));
            assert_non_null(strstr(w, o == 2 ? "other.safetensors.index.json" : "model.safetensors.index.json"));
            assert_non_null(strstr(w, "that the index does not name; not read"));
            named[0] |= strstr(w, "/model.safetensors: ") != NULL;
            named[1] |= strstr(w, "/model-00009-of-00009.safetensors: ") != NULL;
        }
        assert_true(named[0] && named[1]);
        tm_close(f);
    }
    /* on stderr from any command, and in inspect --json */
    char *out = NULL;
    assert_int_equal(tmt_run(&out, "%s diff %s %s 2>&1 >/dev/null", tmt_bin(), dir, dir), 0);
    assert_non_null(strstr(out, "tensormorph: warning: "));
    assert_non_null(strstr(out, "/model.safetensors: a checkpoint file beside"));
    free(out);
    json_t *j = tmt_run_json(0, "%s inspect %s --json 2>/dev/null", tmt_bin(), dir);
    assert_int_equal(json_array_size(json_object_get(j, "warnings")), 2);
    assert_int_equal(json_integer_value(json_object_get(j, "n_tensors")), tmst_n_entries);
    json_decref(j);
    free(other);
    free(idx);
    free(path);
}

/* The byte offset of an entry survives escapes, nesting and odd spacing before it. */
static void test_header_key_offsets(void **state) {
    (void)state;
    const char *h = "{ \"__metadata__\" : {\"k\":\"}{,\\\"\"} ,\n\t\"a\\\"b\":{\"dtype\":\"U8\","
                    "\"shape\":[1],\"data_offsets\":[0,1],\"extra\":[[{\"x\":\"]\"}]]},"
                    "\"c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,3]}}   ";
    tmst_expect_buf_fail(h, 3, NULL, TM_E_CORRUPT, "tensor 'c': data_offsets [1, 3] span 2 bytes",
                    8 + (strstr(h, "\"c\":") - h));
    /* and the good version opens, unknown entry keys ignored, trailing spaces allowed */
    const char *g = "{ \"__metadata__\" : {\"k\":\"}{,\\\"\"} ,\n\t\"a\\\"b\":{\"dtype\":\"U8\","
                    "\"shape\":[1],\"data_offsets\":[0,1],\"extra\":[[{\"x\":\"]\"}]]},"
                    "\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}   ";
    size_t len;
    uint8_t *b = tmst_image(g, 3, &len);
    tm_file *f = NULL;
    tm_err e;
    assert_int_equal(tm_open_buffer(b, len, "x.safetensors", NULL, &f, &e), TM_OK);
    assert_int_equal(tm_file_find(f, "a\"b"), 0);
    assert_string_equal(tm_file_meta_value(f, 0), "}{,\"");
    tm_close(f);
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_corrupt_truncated, tmst_dir_setup, tmst_dir_teardown),
        cmocka_unit_test(test_corrupt_header_length),
        cmocka_unit_test(test_corrupt_json),
        cmocka_unit_test(test_corrupt_entries),
        cmocka_unit_test(test_corrupt_layout),
        cmocka_unit_test_setup_teardown(test_corrupt_sharded, tmst_dir_setup, tmst_dir_teardown),
        cmocka_unit_test_setup_teardown(test_open_directory_rules, tmst_dir_setup, tmst_dir_teardown),
        cmocka_unit_test(test_header_key_offsets),
        cmocka_unit_test_setup_teardown(test_stray_beside_index, tmst_dir_setup, tmst_dir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
