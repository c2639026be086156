/* fuzz_gguf_open.c: libFuzzer target for the GGUF reader (tm_open_buffer probes the magic
** "GGUF"; inputs without it are given the magic, so every input reaches the GGUF parser) and
** the ggml view behind it. When an input opens, the listing must be self-consistent: every
** tensor's bytes lie inside the buffer, names resolve to themselves, a block-quantized tensor's
** byte size matches its type, and the first and last elements of every tensor read (and
** dequantize) without error; metadata keys, values and JSON texts exist.
** Build: -DTM_FUZZ=ON (clang); without libFuzzer, link fuzz/standalone_main.c instead. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensormorph.h"
#include "fuzz_check.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_file(const tm_file *f, const uint8_t *data, size_t size) {
    tm_fuzz_check_file(f, 1);
    int64_t n = tm_file_n_tensors(f);
    CHECK(tm_file_format(f) == TM_FMT_GGUF);
    CHECK(tm_file_n_paths(f) == 1 && tm_file_size(f, 0) == size);
    for (int64_t i = 0; i < n; i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        CHECK(t->ndim <= 4);
        int type = tm_gguf_tensor_type(f, i);
        const tm_ggml_type_info *ti = tm_ggml_type_info_get(type);
        CHECK(ti != NULL);
        uint64_t want;
        CHECK(tm_ggml_row_bytes(type, t->n_elems, &want, NULL) == TM_OK);
        CHECK(want == t->n_bytes);
        CHECK((t->quant != NULL) == (ti->is_quantized != 0));
        if (t->n_bytes) {
            const void *p = NULL;
            CHECK(tm_tensor_data(f, i, 0, t->n_bytes, &p, NULL) == TM_OK);
            CHECK((const uint8_t *)p == data + t->offset);
        }
        if (t->n_elems > 0) {
            float v[2];
            tm_err e;
            CHECK(tm_tensor_read_f32(f, i, 0, 1, v, &e) == TM_OK);
            CHECK(tm_tensor_read_f32(f, i, t->n_elems - 1, 1, v + 1, &e) == TM_OK);
            if (t->quant) {
                tm_qelement q;
                CHECK(tm_qelement_get(f, i, t->n_elems - 1, &q, &e) == TM_OK);
                CHECK(q.code >= ti->qmin && q.code <= ti->qmax);
                CHECK(memcmp(&v[1], &(float){(float)q.value}, sizeof(float)) == 0 || v[1] != v[1]);
            }
        }
    }
    for (int64_t i = 0; i < tm_file_n_meta(f); i++)
        CHECK(tm_gguf_meta_json(f, i) != NULL && tm_gguf_meta_type(f, i) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* a private copy exactly `size` bytes long (ASan sees any overrun), with the magic */
    size_t n = size < 4 ? 4 : size;
    uint8_t *copy = malloc(n);
    if (!copy) return 0;
    memcpy(copy, "GGUF", 4);
    if (size > 4) memcpy(copy + 4, data + 4, size - 4);
    tm_file *f = NULL;
    tm_err err;
    tm_status s = tm_open_buffer(copy, n, "fuzz.gguf", NULL, &f, &err);
    if (s == TM_OK) {
        CHECK(f != NULL);
        check_file(f, copy, n);
        tm_close(f);
    } else {
        tm_fuzz_check_error(s, f, &err);
    }
    free(copy);
    return 0;
}
