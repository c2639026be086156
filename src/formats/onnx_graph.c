/*
** onnx_graph.c: the graph API (include/tensormorph/graph.h) over the graph that onnx.c decodes
** and onnx_qrec.c annotates.
*/
#include "onnx_impl.h"


static const ox_state *graph_of(const tm_file *f) {
    return (f && f->format == TM_FMT_ONNX && f->fmt_free == tm__ox_state_free) ? f->fmt_state : NULL;
}

int64_t tm_graph_n_nodes(const tm_file *f) {
    const ox_state *s = graph_of(f);
    return s ? s->n_nodes : 0;
}

const tm_graph_node *tm_graph_node_at(const tm_file *f, int64_t i) {
    const ox_state *s = graph_of(f);
    if (!s || i < 0 || i >= s->n_nodes) return NULL;
    return &s->nodes[i].pub;
}

int64_t tm_graph_n_values(const tm_file *f) {
    const ox_state *s = graph_of(f);
    return s ? s->n_values : 0;
}

const tm_graph_value *tm_graph_value_at(const tm_file *f, int64_t i) {
    const ox_state *s = graph_of(f);
    return (s && i >= 0 && i < s->n_values) ? &s->values[i] : NULL;
}

int64_t tm_graph_find_value(const tm_file *f, const char *name) {
    const ox_state *s = graph_of(f);
    if (!s || !name) return -1;
    json_t *j = json_object_get(s->value_index, name);
    return j ? (int64_t)json_integer_value(j) : -1;
}

const char *tm_qnode_kind_name(tm_qnode_kind k) {
    switch (k) {
    case TM_QNODE_NONE: return "none";
    case TM_QNODE_DEQUANTIZE: return "dequantize";
    case TM_QNODE_QUANTIZE: return "quantize";
    case TM_QNODE_DYNAMIC_QUANTIZE: return "dynamic_quantize";
    case TM_QNODE_QOPERATOR: return "qoperator";
    case TM_QNODE_INTEGER: return "integer";
    case TM_QNODE_MATMULNBITS: return "matmulnbits";
    default: return "?";
    }
}
