/* fuzz_pt_open.c: libFuzzer target for the PyTorch reader (buffer entry point: a zip checkpoint or a
** legacy stream; the restricted unpickler behind both). When an input opens, the
** listing must be self-consistent and every tensor readable through the view (Fortran-order
** and big-endian branches included) without reading outside its bytes.
** Build: -DTM_FUZZ=ON (clang); without libFuzzer, link fuzz/standalone_main.c instead. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/file.h"
#include "tensormorph.h"

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (!(x)) __builtin_trap();                                                                \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_file(const tm_file *f) {
    int64_t n = tm_file_n_tensors(f);
    for (int64_t i = 0; i < n; i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        CHECK(t && t->name && t->ndim >= 0 && t->ndim <= TM_MAX_DIMS);
        CHECK(t->file_index >= 0 && tm_file_path(f, t->file_index) != NULL);
        CHECK(t->offset <= tm_file_size(f, t->file_index));
        CHECK(t->n_bytes <= tm_file_size(f, t->file_index) - t->offset);
        CHECK(tm_file_find(f, t->name) == i);
        float buf[64];
        int64_t m = t->n_elems < 64 ? t->n_elems : 64;
        tm_err e;
        tm_status s = tm_tensor_read_f32(f, i, 0, m, buf, &e);
        CHECK(s == TM_OK);
        if (t->n_elems > m) CHECK(tm_tensor_read_f32(f, i, t->n_elems - m, m, buf, &e) == TM_OK);
        if (t->quant) {
            const tm_qtensor *q = t->quant;
            CHECK(q->codes_tensor == i);
            CHECK(tm_file_tensor(f, q->scale_tensor) && tm_file_tensor(f, q->scale_tensor)->owner == i);
            CHECK(tm_file_tensor(f, q->zero_point_tensor)->owner == i);
            tm_qelement el;
            if (t->n_elems) CHECK(tm_qelement_get(f, i, t->n_elems - 1, &el, &e) == TM_OK);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = malloc(size ? size : 1); /* exactly `size` bytes: ASan sees any overrun */
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    tm_file *f = NULL;
    tm_err err;
    tm_status s = tm__pt_open_buffer(copy, size, "fuzz.pt", NULL, &f, &err);
    if (s == TM_OK) {
        CHECK(f != NULL);
        check_file(f);
        tm_close(f);
    } else {
        CHECK(f == NULL);
        CHECK(err.code == s);
        CHECK(err.msg[0] != '\0');
    }
    free(copy);
    return 0;
}
