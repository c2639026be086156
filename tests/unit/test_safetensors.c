/* test_safetensors.c: the safetensors writer and what it writes read back: single-file and
** sharded round trips, writes from several threads, plans the writer refuses. The reader's
** corrupt-file corpus is in test_safetensors_corrupt.c, real checkpoints and the fuzz seeds in
** test_safetensors_models.c, compressed-tensors recognition in test_safetensors_ctensors.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "helpers/fixture.h"
#include "helpers/st_fixture.h"
#include "tensormorph.h"

/* ---------------------------------------------------------------------------------------- */
/* Round trips                                                                               */
/* ---------------------------------------------------------------------------------------- */

static void test_roundtrip_single(void **state) {
    const char *dir = *state;
    char *path = tmst_path(dir, "model.safetensors");
    const char *mk[] = {"format", "note"}, *mv[] = {"pt", "h\xc3\xa9llo \"quoted\""};
    tm_st_write_params wp = {0, mk, mv, 2, 0, 0, NULL};
    tmst_write_all(path, tmst_entries, tmst_n_entries, &wp);
    assert_int_equal(tmst_count_dir_entries(dir, ".tmp."), 0);

    /* layout: header padded to 8 with spaces, __metadata__ first, data contiguous */
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    uint8_t len8[8];
    assert_int_equal(fread(len8, 1, 8, fp), 8);
    uint64_t hl;
    memcpy(&hl, len8, 8);
    assert_int_equal(hl % 8, 0);
    char *hdr = malloc(hl + 1);
    assert_int_equal(fread(hdr, 1, hl, fp), hl);
    hdr[hl] = '\0';
    fclose(fp);
    assert_int_equal(strncmp(hdr, "{\"__metadata__\":{\"format\":\"pt\"", 30), 0);
    assert_true(strstr(hdr, "\"layer.0.weight\"") < strstr(hdr, "\"layer.0.bias\""));
    assert_true(strstr(hdr, "\"dtype\":\"F32\",\"shape\":[3,5],\"data_offsets\":[0,60]") != NULL);
    free(hdr);

    tm_file *f = NULL;
    tm_err e;
    tm_status s = tm_open(path, NULL, &f, &e);
    if (s) tmst_dump_err(&e);
    assert_int_equal(s, TM_OK);
    assert_int_equal(tm_file_format(f), TM_FMT_SAFETENSORS);
    assert_int_equal(tm_file_n_paths(f), 1);
    tmst_check_contents(f, tmst_entries, tmst_n_entries);
    /* file order is header order is entry order; offsets contiguous from 8 + header length */
    uint64_t off = 8 + hl;
    for (int64_t i = 0; i < tmst_n_entries; i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        assert_string_equal(t->name, tmst_entries[i].name);
        assert_int_equal(t->offset, off);
        assert_int_equal(t->file_index, 0);
        off += t->n_bytes;
    }
    assert_int_equal(tm_file_size(f, 0), off);
    assert_int_equal(tm_file_n_meta(f), 2);
    assert_string_equal(tm_file_meta_key(f, 0), "format");
    assert_string_equal(tm_file_meta_value(f, 0), "pt");
    assert_string_equal(tm_file_meta_key(f, 1), "note");
    assert_string_equal(tm_file_meta_value(f, 1), mv[1]);
    assert_null(tm_file_config_json(f));
    assert_int_equal(tm_file_n_warnings(f), 0);
    tm_close(f);

    /* the directory opens to the same file */
    assert_int_equal(tm_open(dir, NULL, &f, &e), TM_OK);
    tmst_check_contents(f, tmst_entries, tmst_n_entries);
    tm_close(f);
    free(path);
}

static void test_roundtrip_sharded(void **state) {
    const char *dir = *state;
    char *path = tmst_path(dir, "model.safetensors");
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    /* 60+10+2+0+7+3+32+24+9+2+1+12+8+8+8+8 = 194 bytes; cap 64 -> several shards */
    tm_st_write_params wp = {64, mk, mv, 1, 0, 0, NULL};
    tm_st_writer *w = NULL;
    tm_err e;
    assert_int_equal(tm_st_writer_open(path, tmst_entries, tmst_n_entries, &wp, &w, &e), TM_OK);
    int nf = tm_st_writer_n_files(w);
    assert_true(nf >= 4);
    char want[64];
    for (int i = 0; i < nf - 1; i++) {
        snprintf(want, sizeof want, "/model-%05d-of-%05d.safetensors", i + 1, nf - 1);
        assert_non_null(strstr(tm_st_writer_file(w, i), want));
    }
    assert_non_null(strstr(tm_st_writer_file(w, nf - 1), "/model.safetensors.index.json"));
    assert_null(tm_st_writer_file(w, nf));
    /* nothing at the targets before finish */
    assert_int_equal(tmst_count_dir_entries(dir, ".tmp."), nf - 1);
    assert_int_equal(tmst_count_dir_entries(dir, NULL), nf - 1);
    tm_st_writer_free(w);
    assert_int_equal(tmst_count_dir_entries(dir, NULL), 0);

    tmst_write_all(path, tmst_entries, tmst_n_entries, &wp);
    assert_int_equal(tmst_count_dir_entries(dir, ".tmp."), 0);
    assert_int_equal(tmst_count_dir_entries(dir, NULL), nf);
    char *idx = tmst_path(dir, "model.safetensors.index.json");
    json_t *j = json_load_file(idx, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "metadata"),
                                                        "total_size")),
                     194);
    assert_int_equal(json_object_size(json_object_get(j, "weight_map")), tmst_n_entries);
    json_decref(j);

    const char *opens[] = {idx, dir};
    for (int o = 0; o < 2; o++) {
        tm_file *f = NULL;
        tm_status s = tm_open(opens[o], NULL, &f, &e);
        if (s) tmst_dump_err(&e);
        assert_int_equal(s, TM_OK);
        assert_int_equal(tm_file_n_paths(f), nf - 1);
        tmst_check_contents(f, tmst_entries, tmst_n_entries);
        /* each shard's data at most the cap unless it holds one tensor */
        assert_int_equal(tm_file_n_meta(f), 1);
        assert_int_equal(tm_file_n_warnings(f), 0);
        for (int64_t i = 0; i < tm_file_n_tensors(f); i++) {
            const tm_tensor *t = tm_file_tensor(f, i);
            assert_true(t->file_index >= 0 && t->file_index < nf - 1);
            assert_true(t->offset + t->n_bytes <= tm_file_size(f, t->file_index));
        }
        tm_close(f);
    }
    /* a shard opened alone is a valid safetensors file too */
    char *s1 = tmst_path(dir, "model-00001-of-00004.safetensors");
    if (nf - 1 == 4) {
        tm_file *f = NULL;
        assert_int_equal(tm_open(s1, NULL, &f, &e), TM_OK);
        assert_true(tm_file_n_tensors(f) >= 1);
        tm_close(f);
    }
    free(s1);
    free(idx);
    free(path);
}

/* Disjoint ranges from several threads at once land where they belong. */
typedef struct wjob {
    tm_st_writer *w;
    int           part;     /* which interleaved 4 KiB chunks this thread writes */
    tm_status     status;
} wjob;

#define MT_BYTES (1u << 20)

static void *write_part(void *arg) {
    wjob *j = arg;
    uint8_t chunk[4096];
    tm_err e;
    j->status = TM_OK;
    for (uint64_t off = (uint64_t)j->part * sizeof chunk; off < MT_BYTES && !j->status;
         off += 4 * sizeof chunk) {
        for (size_t i = 0; i < sizeof chunk; i++) chunk[i] = (uint8_t)((off + i) * 2654435761u >> 13);
        j->status = tm_st_writer_write(j->w, 1, off, chunk, sizeof chunk, &e);
    }
    if (j->part == 0 && !j->status) {
        uint8_t small[12] = "twelve bytes";
        j->status = tm_st_writer_write(j->w, 0, 0, small, 12, &e);
    }
    return NULL;
}

static void test_writer_threads(void **state) {
    const char *dir = *state;
    char *path = tmst_path(dir, "mt.safetensors");
    tm_st_entry es[] = {{"small", TM_U8, 1, {12}}, {"big", TM_F32, 2, {MT_BYTES / 1024, 256}}};
    tm_st_writer *w = NULL;
    tm_err e;
    assert_int_equal(tm_st_writer_open(path, es, 2, NULL, &w, &e), TM_OK);
    pthread_t th[4];
    wjob jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i].w = w;
        jobs[i].part = i;
        assert_int_equal(pthread_create(&th[i], NULL, write_part, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].status, TM_OK);
    }
    assert_int_equal(tm_st_writer_finish(w, &e), TM_OK);
    tm_st_writer_free(w);
    tm_file *f = NULL;
    assert_int_equal(tm_open(path, NULL, &f, &e), TM_OK);
    const void *p;
    assert_int_equal(tm_tensor_data(f, 1, 0, MT_BYTES, &p, &e), TM_OK);
    const uint8_t *b = p;
    for (uint64_t i = 0; i < MT_BYTES; i++)
        if (b[i] != (uint8_t)(i * 2654435761u >> 13)) fail_msg("byte %llu", (unsigned long long)i);
    assert_int_equal(tm_tensor_data(f, 0, 0, 12, &p, &e), TM_OK);
    assert_memory_equal(p, "twelve bytes", 12);
    tm_close(f);
    free(path);
}

static void test_writer_rejects_bad_plans(void **state) {
    const char *dir = *state;
    char *path = tmst_path(dir, "model.safetensors");
    tm_st_writer *w = NULL;
    tm_err e;
    tm_st_entry dup[] = {{"a", TM_F32, 1, {2}}, {"b", TM_F32, 1, {2}}, {"a", TM_F16, 1, {1}}};
    assert_int_equal(tm_st_writer_open(path, dup, 3, NULL, &w, &e), TM_E_INVALID_ARG);
    assert_non_null(strstr(e.msg, "duplicate tensor name 'a'"));
    assert_null(w);
    tm_st_entry i4[] = {{"q", TM_I4, 1, {8}}};
    assert_int_equal(tm_st_writer_open(path, i4, 1, NULL, &w, &e), TM_E_INVALID_ARG);
    assert_non_null(strstr(e.msg, "no safetensors name"));
    tm_st_entry neg[] = {{"n", TM_F32, 2, {2, -1}}};
    assert_int_equal(tm_st_writer_open(path, neg, 1, NULL, &w, &e), TM_E_INVALID_ARG);
    tm_st_entry big[] = {{"n", TM_F64, 3, {1ll << 30, 1ll << 30, 1ll << 30}}};
    assert_int_equal(tm_st_writer_open(path, big, 1, NULL, &w, &e), TM_E_INVALID_ARG);
    assert_non_null(strstr(e.msg, "overflows"));
    tm_st_entry meta_name[] = {{"__metadata__", TM_F32, 1, {1}}};
    assert_int_equal(tm_st_writer_open(path, meta_name, 1, NULL, &w, &e), TM_E_INVALID_ARG);
    const char *mk[] = {"k", "k"}, *mv[] = {"1", "2"};
    tm_st_write_params wp = {0, mk, mv, 2, 0, 0, NULL};
    assert_int_equal(tm_st_writer_open(path, dup, 2, &wp, &w, &e), TM_E_INVALID_ARG);
    assert_non_null(strstr(e.msg, "duplicate metadata key 'k'"));
    assert_int_equal(tmst_count_dir_entries(dir, NULL), 0);

    /* writes outside an entry, and an error before finish, leave nothing behind */
    assert_int_equal(tm_st_writer_open(path, dup, 2, NULL, &w, &e), TM_OK);
    uint8_t buf[16] = {0};
    assert_int_equal(tm_st_writer_write(w, 0, 4, buf, 8, &e), TM_E_INVALID_ARG);
    assert_int_equal(tm_st_writer_write(w, 2, 0, buf, 1, &e), TM_E_INVALID_ARG);
    assert_int_equal(tm_st_writer_write(w, 1, 0, buf, 8, &e), TM_OK);
    assert_int_equal(tmst_count_dir_entries(dir, ".tmp."), 1);
    tm_st_writer_free(w);
    assert_int_equal(tmst_count_dir_entries(dir, NULL), 0);

    /* a stale temporary file of ours blocks the open (O_EXCL) and is left alone */
    char tmpname[64];
    snprintf(tmpname, sizeof tmpname, "model.safetensors.tmp.%ld", (long)getpid());
    tmt_write_text(dir, tmpname, "stale");
    assert_int_equal(tm_st_writer_open(path, dup, 2, NULL, &w, &e), TM_E_IO);
    assert_non_null(strstr(e.msg, "cannot create"));
    assert_int_equal(tmst_count_dir_entries(dir, NULL), 1);
    /* a missing directory */
    char *nodir = tmst_path(dir, "nope/model.safetensors");
    assert_int_equal(tm_st_writer_open(nodir, dup, 2, NULL, &w, &e), TM_E_IO);
    free(nodir);
    free(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roundtrip_single, tmst_dir_setup, tmst_dir_teardown),
        cmocka_unit_test_setup_teardown(test_roundtrip_sharded, tmst_dir_setup, tmst_dir_teardown),
        cmocka_unit_test_setup_teardown(test_writer_threads, tmst_dir_setup, tmst_dir_teardown),
        cmocka_unit_test_setup_teardown(test_writer_rejects_bad_plans, tmst_dir_setup, tmst_dir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
