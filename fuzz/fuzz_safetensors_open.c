/* fuzz_safetensors_open.c: libFuzzer target for the safetensors reader (buffer entry point) and
** the layout recognizer behind it. When an input opens, the listing must be self-consistent:
** every tensor's bytes lie inside the buffer, the byte sizes sum to at most its size, names
** resolve to themselves, and quantized descriptions point at tensors that exist.
** Build: -DTM_FUZZ=ON (clang); without libFuzzer, link fuzz/standalone_main.c instead. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensormorph.h"
#include "fuzz_check.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_file(const tm_file *f, const uint8_t *data, size_t size) {
    tm_fuzz_check_file(f, 0);
    int64_t n = tm_file_n_tensors(f);
    uint64_t sum = 0;
    CHECK(tm_file_n_paths(f) == 1);
    CHECK(tm_file_size(f, 0) == size);
    for (int64_t i = 0; i < n; i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        CHECK(t->file_index == 0);
        sum += t->n_bytes;
        CHECK(sum <= size);
        if (t->n_bytes) {
            const void *p = NULL;
            CHECK(tm_tensor_data(f, i, 0, t->n_bytes, &p, NULL) == TM_OK);
            CHECK((const uint8_t *)p == data + t->offset);
        }
        /* tm_open_buffer also opens GGUF images, whose block types keep their scales inside the blocks */
        if (t->quant && t->quant->ggml_type == 0) CHECK(tm_file_tensor(f, t->quant->scale_tensor)->owner == i);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* The layout recognizer reads weight_shape values: the private copy keeps the buffer
    ** alive as long as the tm_file and exactly `size` bytes (ASan sees any overrun). */
    return tm_fuzz_open_and_check(tm_open_buffer, "fuzz.safetensors", data, size, 1, check_file);
}
