/* fuzz_onnx_open.c: libFuzzer target for the ONNX reader (buffer entry point tm_onnx_open_buffer):
** protobuf-c decoding of arbitrary bytes, then the walk over graphs, subgraphs, initializers and
** Constant nodes, typed-field conversion, and quantization recognition. When an input opens, the
** listing must be self-consistent: every tensor's bytes can be fetched, names resolve to
** themselves, quantized descriptions point at tensors that exist, graph nodes reference values
** that exist, and every tensor has a float view where its dtype has one.
** Build: -DTM_FUZZ=ON (clang); without libFuzzer, link fuzz/standalone_main.c instead. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensormorph.h"
#include "fuzz_check.h"
#include "tensormorph/graph.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_file(const tm_file *f, const uint8_t *data, size_t size) {
    (void)data;
    (void)size;
    tm_fuzz_check_file(f, 0);
    int64_t n = tm_file_n_tensors(f);
    CHECK(tm_file_n_paths(f) == 1);
    for (int64_t i = 0; i < n; i++) {
        const void *p = NULL;
        CHECK(tm_tensor_data(f, i, 0, tm_file_tensor(f, i)->n_bytes, &p, NULL) == TM_OK);
    }
    int64_t nv = tm_graph_n_values(f);
    for (int64_t i = 0; i < tm_graph_n_nodes(f); i++) {
        const tm_graph_node *nd = tm_graph_node_at(f, i);
        CHECK(nd && nd->op_type && nd->domain && nd->graph && nd->name);
        for (int64_t k = 0; k < nd->n_inputs; k++) CHECK(nd->inputs[k] >= -1 && nd->inputs[k] < nv);
        for (int64_t k = 0; k < nd->n_outputs; k++) CHECK(nd->outputs[k] >= -1 && nd->outputs[k] < nv);
        CHECK(nd->weight_tensor >= -1 && nd->weight_tensor < n);
    }
    for (int64_t i = 0; i < nv; i++) {
        const tm_graph_value *v = tm_graph_value_at(f, i);
        CHECK(v && v->name && v->elem_type_name && tm_graph_find_value(f, v->name) == i);
        CHECK(v->tensor >= -1 && v->tensor < n);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return tm_fuzz_open_and_check(tm_onnx_open_buffer, "fuzz.onnx", data, size, 1, check_file);
}
