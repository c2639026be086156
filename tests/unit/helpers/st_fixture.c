/* st_fixture.c: see st_fixture.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "st_fixture.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsutil.h"
#include "fixture.h"

char *tmst_tmpdir(void) {
    const char *base = getenv("TMPDIR");
    char *t = NULL;
    size_t n = strlen(base && *base ? base : "/tmp") + 32;
    t = malloc(n);
    assert_non_null(t);
    snprintf(t, n, "%s/tm_st_XXXXXX", base && *base ? base : "/tmp");
    assert_non_null(mkdtemp(t));
    return t;
}

int tmst_dir_setup(void **state) {
    *state = tmst_tmpdir();
    return 0;
}

int tmst_dir_teardown(void **state) {
    tm__rm_rf(*state);
    free(*state);
    return 0;
}

char *tmst_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    assert_non_null(p);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

int tmst_count_dir_entries(const char *dir, const char *needle) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.' && (!needle || strstr(de->d_name, needle))) n++;
    closedir(d);
    return n;
}

/* A safetensors image: 8-byte length + header text as given (no padding) + n_data bytes of a
** counting tmst_pattern. Caller frees. */
uint8_t *tmst_image(const char *header, size_t n_data, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + n_data;
    uint8_t *b = malloc(*len ? *len : 1);
    assert_non_null(b);
    uint64_t hl = h;
    memcpy(b, &hl, 8);
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < n_data; i++) b[8 + h + i] = (uint8_t)(i * 7 + 1);
    return b;
}

void tmst_dump_err(const tm_err *e) { print_message("  err: [%d] %s\n", (int)e->code, e->msg); }

/* Open a buffer that must fail with `status`, a message containing `substr` and (when
** offset >= 0) that file offset. */
void tmst_expect_buf_fail(const char *header, size_t n_data, const tm_open_params *p,
                            tm_status status, const char *substr, int64_t offset) {
    size_t len;
    uint8_t *b = tmst_image(header, n_data, &len);
    tm_file *f = (tm_file *)1;
    tm_err e;
    tm_status s = tm_open_buffer(b, len, "x.safetensors", p, &f, &e);
    if (s != status || !strstr(e.msg, substr) || (offset >= 0 && e.file_offset != offset)) {
        print_message("header %s\n", header);
        tmst_dump_err(&e);
        print_message("  offset %lld, wanted status %d, '%s', offset %lld\n",
                      (long long)e.file_offset, (int)status, substr, (long long)offset);
    }
    assert_int_equal(s, status);
    assert_int_equal(e.code, status);
    assert_null(f);
    assert_non_null(strstr(e.msg, "x.safetensors"));
    assert_non_null(strstr(e.msg, substr));
    if (offset >= 0) assert_int_equal(e.file_offset, offset);
    free(b);
}

/* Fill entry i of a writer with its deterministic tmst_pattern. */
void tmst_pattern(uint8_t *buf, size_t n, int64_t entry) {
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(entry * 31 + (int64_t)i * 13 + 5);
}

uint64_t tmst_entry_bytes(const tm_st_entry *e) {
    uint64_t n = tm_dtype_get(e->dtype)->bits / 8;
    for (int d = 0; d < e->ndim; d++) n *= (uint64_t)e->shape[d];
    return n;
}

void tmst_write_all(const char *path, const tm_st_entry *es, int64_t n,
                      const tm_st_write_params *wp) {
    tm_st_writer *w = NULL;
    tm_err e;
    tm_status s = tm_st_writer_open(path, es, n, wp, &w, &e);
    if (s) tmst_dump_err(&e);
    assert_int_equal(s, TM_OK);
    for (int64_t i = n - 1; i >= 0; i--) { /* any order */
        uint64_t nb = tmst_entry_bytes(&es[i]);
        uint8_t *buf = malloc(nb ? nb : 1);
        tmst_pattern(buf, nb, i);
        /* two pieces, second first */
        uint64_t half = nb / 2;
        assert_int_equal(tm_st_writer_write(w, i, half, buf + half, nb - half, &e), TM_OK);
        assert_int_equal(tm_st_writer_write(w, i, 0, buf, half, &e), TM_OK);
        free(buf);
    }
    s = tm_st_writer_finish(w, &e);
    if (s) tmst_dump_err(&e);
    assert_int_equal(s, TM_OK);
    tm_st_writer_free(w);
}

void tmst_check_contents(const tm_file *f, const tm_st_entry *es, int64_t n) {
    assert_int_equal(tm_file_n_tensors(f), n);
    for (int64_t i = 0; i < n; i++) {
        int64_t k = tm_file_find(f, es[i].name);
        assert_true(k >= 0);
        const tm_tensor *t = tm_file_tensor(f, k);
        assert_string_equal(t->name, es[i].name);
        assert_string_equal(t->phys_name, es[i].name);
        assert_int_equal(t->dtype, es[i].dtype);
        assert_int_equal(t->phys_dtype, es[i].dtype);
        assert_int_equal(t->ndim, es[i].ndim);
        assert_int_equal(t->phys_ndim, es[i].ndim);
        for (int d = 0; d < t->ndim; d++) assert_int_equal(t->shape[d], es[i].shape[d]);
        assert_int_equal(t->role, TM_ROLE_DATA);
        assert_int_equal(t->owner, -1);
        assert_null(t->quant);
        uint64_t nb = tmst_entry_bytes(&es[i]);
        assert_int_equal(t->n_bytes, nb);
        const void *p = NULL;
        tm_err e;
        assert_int_equal(tm_tensor_data(f, k, 0, nb, &p, &e), TM_OK);
        uint8_t *want = malloc(nb ? nb : 1);
        tmst_pattern(want, nb, i);
        assert_memory_equal(p, want, nb);
        free(want);
    }
}

const tm_st_entry tmst_entries[] = {
    {"layer.0.weight", TM_F32, 2, {3, 5}},
    {"layer.0.bias", TM_F16, 1, {5}},
    {"scalar", TM_BF16, 0, {0}},
    {"empty", TM_I8, 2, {3, 0}},
    {"bytes", TM_U8, 1, {7}},
    {"flags", TM_BOOL, 1, {3}},
    {"wide", TM_F64, 2, {2, 2}},
    {"ids", TM_I64, 1, {3}},
    {"e4m3", TM_F8_E4M3, 1, {9}},
    {"e5m2", TM_F8_E5M2, 1, {2}},
    {"e8m0", TM_F8_E8M0, 1, {1}},
    {"u16", TM_U16, 3, {1, 2, 3}},
    {"i16", TM_I16, 1, {4}},
    {"u32", TM_U32, 1, {2}},
    {"i32", TM_I32, 1, {2}},
    {"u64", TM_U64, 1, {1}},
};
const int64_t tmst_n_entries = (int64_t)(sizeof tmst_entries / sizeof tmst_entries[0]);

const tm_tensor *tmst_must_find(const tm_file *f, const char *name) {
    int64_t i = tm_file_find(f, name);
    if (i < 0) print_message("missing tensor %s\n", name);
    assert_true(i >= 0);
    return tm_file_tensor(f, i);
}

void tmst_assert_shape2(const tm_tensor *t, int64_t a, int64_t b) {
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], a);
    assert_int_equal(t->shape[1], b);
}

void tmst_assert_shape1(const tm_tensor *t, int64_t a) {
    assert_int_equal(t->ndim, 1);
    assert_int_equal(t->shape[0], a);
}

tm_file *tmst_open_in(const char *dir, const char *rel) {
    char *p = tmst_path(dir, rel);
    tm_file *f = tmt_open_ok(p);
    free(p);
    return f;
}

void tmst_dump_warnings(const tm_file *f) {
    for (int64_t i = 0; i < tm_file_n_warnings(f); i++)
        print_message("  warning: %s\n", tm_file_warning(f, i));
}

int tmst_has_warning(const tm_file *f, const char *substr) {
    for (int64_t i = 0; i < tm_file_n_warnings(f); i++)
        if (strstr(tm_file_warning(f, i), substr)) return 1;
    return 0;
}
