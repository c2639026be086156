/* fuzz_check.h: invariants every fuzz target checks on what a reader returns. When an input
** opens, the listing must be self-consistent: each tensor's bytes inside its file, names found
** again, scale/zero-point links valid, metadata and warnings present, and the first and last
** elements readable through the view; when it does not open, the error is a proper one. A
** broken invariant traps (a crash libFuzzer reports). Header-only: each target is one file. */
#ifndef TM_FUZZ_CHECK_H
#define TM_FUZZ_CHECK_H

#include <stdlib.h>
#include <string.h>

#include "tensormorph.h"

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (!(x)) __builtin_trap();                                                                \
    } while (0)

/* strict_reads: 1 when every listed tensor must read (a reader that validates dtypes fully);
** 0 when a read may fail, but only with a message. */
static inline void tm_fuzz_check_file(const tm_file *f, int strict_reads) {
    int64_t n = tm_file_n_tensors(f);
    for (int64_t i = 0; i < n; i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        CHECK(t != NULL && t->name != NULL && t->phys_name != NULL);
        CHECK(t->ndim >= 0 && t->ndim <= TM_MAX_DIMS);
        CHECK(t->file_index >= 0 && tm_file_path(f, t->file_index) != NULL);
        CHECK(t->offset <= tm_file_size(f, t->file_index));
        CHECK(t->n_bytes <= tm_file_size(f, t->file_index) - t->offset);
        CHECK(tm_file_find(f, t->name) == i);
        if (t->role != TM_ROLE_DATA) CHECK(t->owner >= 0 && t->owner < n);
        if (t->quant) {
            const tm_qtensor *q = t->quant;
            CHECK(q->codes_tensor == i);
            /* a ggml block type carries its scales inside its blocks */
            if (q->ggml_type == 0) CHECK(q->scale_tensor >= 0 && q->scale_tensor < n && q->scale_tensor != i);
            CHECK(q->zero_point_tensor >= -1 && q->zero_point_tensor < n);
            CHECK(q->layout != NULL);
        }
        float v[64];
        int64_t m = t->n_elems < 64 ? t->n_elems : 64;
        tm_err e;
        tm_status s = tm_tensor_read_f32(f, i, 0, m, v, &e);
        if (strict_reads) CHECK(s == TM_OK);
        else CHECK(s == TM_OK || e.msg[0] != '\0');
        if (s == TM_OK && t->n_elems > m) {
            s = tm_tensor_read_f32(f, i, t->n_elems - m, m, v, &e);
            if (strict_reads) CHECK(s == TM_OK);
            else CHECK(s == TM_OK || e.msg[0] != '\0');
        }
    }
    for (int64_t i = 0; i < tm_file_n_meta(f); i++)
        CHECK(tm_file_meta_key(f, i) != NULL && tm_file_meta_value(f, i) != NULL);
    for (int64_t i = 0; i < tm_file_n_warnings(f); i++) CHECK(tm_file_warning(f, i) != NULL);
}

/* A failed open: no file handed back, the status recorded, a terminated one-line message. */
static inline void tm_fuzz_check_error(tm_status s, const tm_file *f, const tm_err *err) {
    CHECK(f == NULL);
    CHECK(err->code == s);
    CHECK(err->msg[0] != '\0');
    CHECK(memchr(err->msg, '\0', sizeof err->msg) != NULL);
}

/* The common body of a buffer-opener target: open a private copy exactly `size` bytes long
** (ASan sees any overrun; it outlives the tm_file), check the result with check(f, copy, size)
** or the error, close. both_modes: open twice, with recognition on and with no_recognize
** (default parameters otherwise); 0: once, with NULL parameters. */
typedef tm_status (*tm_fuzz_opener)(const void *data, size_t n, const char *name,
                                    const tm_open_params *p, tm_file **out, tm_err *err);
typedef void (*tm_fuzz_checker)(const tm_file *f, const uint8_t *data, size_t size);
static inline int tm_fuzz_open_and_check(tm_fuzz_opener open, const char *name, const uint8_t *data,
                                         size_t size, int both_modes, tm_fuzz_checker check) {
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    for (int raw = 0; raw < (both_modes ? 2 : 1); raw++) {
        tm_open_params p = tm_open_params_default();
        p.no_recognize = raw;
        tm_file *f = NULL;
        tm_err err;
        tm_status s = open(copy, size, name, both_modes ? &p : NULL, &f, &err);
        if (s == TM_OK) {
            CHECK(f != NULL);
            check(f, copy, size);
            tm_close(f);
        } else {
            tm_fuzz_check_error(s, f, &err);
        }
    }
    free(copy);
    return 0;
}

#endif
