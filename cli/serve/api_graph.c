/* api_graph.c: GET /api/v1/graph, the dataflow graph of an ONNX model for the Architecture
** diagram (web/arch/): every node of every graph in file order with its inputs and outputs as
** indices into one table of values, and per value its element type, shape, the tensor holding it
** (an initializer or a Constant node's output), whether quantized codes flow along it and, for a
** quantized tensor, its scheme label (tm_qtensor_label, the label inspect prints). The same facts
** as `tensormorph graph --json` (cmd_graph.c), each value written once instead of per use, so the
** page can fold DequantizeLinear/QuantizeLinear pairs and constants itself. A checkpoint without
** a graph (safetensors, GGUF, .pt) answers n_nodes 0: the page draws its block diagram from
** /api/v1/inspect. docs/API.md "GET /api/v1/graph". */
#include "serve.h"

#include "tensormorph/graph.h"

static json_t *graph_value_json(const tm_file *f, const tm_graph_value *v) {
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(v->name));
    json_object_set_new(o, "elem_type", json_string(v->elem_type_name));
    json_object_set_new(o, "shape", v->ndim >= 0 ? cli_json_shape(v->ndim, v->shape) : json_null());
    const tm_tensor *t = v->tensor >= 0 ? tm_file_tensor(f, v->tensor) : NULL;
    json_object_set_new(o, "tensor", t ? json_string(t->name) : json_null());
    json_object_set_new(o, "quantized", json_boolean(v->quantized));
    if (v->quantized) {
        json_object_set_new(o, "scale", v->scale_value >= 0 ? json_integer(v->scale_value) : json_null());
        json_object_set_new(o, "zero_point", v->zero_point_value >= 0 ? json_integer(v->zero_point_value) : json_null());
        json_object_set_new(o, "axis", json_integer(v->axis));
        json_object_set_new(o, "block_size", json_integer(v->block_size));
    }
    if (t) {
        char lab[TM_QLABEL_MAX];
        json_object_set_new(o, "dtype", json_string(tm_dtype_get(t->dtype)->name));
        json_object_set_new(o, "scheme", json_string(t->quant ? tm_qtensor_label(f, t, lab, sizeof lab) : "dense"));
        json_object_set_new(o, "n_elems", json_integer(t->n_elems));
    }
    return o;
}

static json_t *index_array(int64_t n, const int64_t *ix) {
    json_t *a = json_array();
    for (int64_t k = 0; k < n; k++) json_array_append_new(a, ix[k] >= 0 ? json_integer(ix[k]) : json_null());
    return a;
}

json_t *api_graph(serve_ctx *c, int *status) {
    const tm_file *f = c->f;
    int64_t n = tm_graph_n_nodes(f), nv = n ? tm_graph_n_values(f) : 0;
    json_t *d = cli_json_doc("graph");
    json_object_set_new(d, "path", json_string(c->path));
    json_object_set_new(d, "format", json_string(tm_format_name(tm_file_format(f))));
    json_object_set_new(d, "n_nodes", json_integer(n));
    json_object_set_new(d, "n_values", json_integer(nv));
    json_t *values = json_array(), *nodes = json_array();
    for (int64_t i = 0; i < nv; i++) {
        const tm_graph_value *v = tm_graph_value_at(f, i);
        json_array_append_new(values, v ? graph_value_json(f, v) : json_null());
    }
    for (int64_t i = 0; i < n; i++) {
        const tm_graph_node *nd = tm_graph_node_at(f, i);
        if (!nd) { json_decref(values); json_decref(nodes); json_decref(d); *status = 500; return NULL; }
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(nd->name));
        json_object_set_new(o, "op_type", json_string(nd->op_type));
        json_object_set_new(o, "domain", json_string(nd->domain));
        json_object_set_new(o, "graph", json_string(nd->graph));
        json_object_set_new(o, "quant_kind", json_string(tm_qnode_kind_name(nd->qkind)));
        const tm_tensor *w = nd->weight_tensor >= 0 ? tm_file_tensor(f, nd->weight_tensor) : NULL;
        json_object_set_new(o, "weight", w ? json_string(w->name) : json_null());
        json_object_set_new(o, "inputs", index_array(nd->n_inputs, nd->inputs));
        json_object_set_new(o, "outputs", index_array(nd->n_outputs, nd->outputs));
        json_array_append_new(nodes, o);
    }
    json_object_set_new(d, "values", values);
    json_object_set_new(d, "nodes", nodes);
    return d;
}
