/* cmd_graph.c: `tensormorph graph PATH`: the architecture of a model with a graph (ONNX): every
** node with op type, domain and subgraph, and for each input and output value its element type,
** shape, the tensor holding it and whether quantized codes flow along it, so that quantization
** boundaries can be drawn on the real graph. */
#include "cli.h"
#include "tensormorph/graph.h"

#include <inttypes.h>
#include <string.h>

const cli_opt opts_graph[] = {
    {"quantized", 0, NULL, 0, "list only the nodes that quantize, dequantize or compute on codes"},
    CLI_OPT_END,
};
const char details_graph[] =
    "PATH is an ONNX model. Nodes are listed in file order, a subgraph's nodes (If branches,\n"
    "Loop/Scan bodies) right after the node that holds it, with the subgraph's path. A value\n"
    "marked 'q' carries quantized codes (the output of QuantizeLinear, the input of\n"
    "DequantizeLinear, a QOperator's code inputs); its scale and zero point are named. A weight\n"
    "mapped onto a quantized tensor is shown with its scheme, as inspect shows it.";

static json_t *value_json(const tm_file *f, int64_t vi) {
    const tm_graph_value *v = tm_graph_value_at(f, vi);
    if (!v) return json_null();
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(v->name));
    json_object_set_new(o, "elem_type", json_string(v->elem_type_name));
    json_object_set_new(o, "shape", v->ndim >= 0 ? cli_json_shape(v->ndim, v->shape) : json_null());
    const tm_tensor *t = v->tensor >= 0 ? tm_file_tensor(f, v->tensor) : NULL;
    json_object_set_new(o, "tensor", t ? json_string(t->name) : json_null());
    json_object_set_new(o, "quantized", json_boolean(v->quantized));
    if (v->quantized) {
        const tm_graph_value *s = tm_graph_value_at(f, v->scale_value);
        const tm_graph_value *z = tm_graph_value_at(f, v->zero_point_value);
        json_object_set_new(o, "scale", s ? json_string(s->name) : json_null());
        json_object_set_new(o, "zero_point", z ? json_string(z->name) : json_null());
        json_object_set_new(o, "axis", json_integer(v->axis));
        json_object_set_new(o, "block_size", json_integer(v->block_size));
    }
    if (t && t->quant) json_object_set_new(o, "quantization", cli_quant_json(f, t));
    return o;
}

static void value_str(const tm_file *f, int64_t vi, char *buf, size_t n) {
    const tm_graph_value *v = tm_graph_value_at(f, vi);
    if (!v) { snprintf(buf, n, "-"); return; }
    char sh[96] = "[?]";
    if (v->ndim >= 0) cli_shape_str(v->ndim, v->shape, sh, sizeof sh);
    const tm_tensor *t = v->tensor >= 0 ? tm_file_tensor(f, v->tensor) : NULL;
    char q[112] = "";
    if (t && t->quant) {
        char qs[96];
        cli_quant_str(f, t, qs, sizeof qs);
        snprintf(q, sizeof q, " {%s}", qs);
    }
    snprintf(buf, n, "%s:%s%s%s%s%s", v->name, v->elem_type_name, sh, t ? " (tensor)" : "",
             v->quantized ? " q" : "", q);
}

int cmd_graph(const cli_cmd *cmd, cli_args *a) {
    (void)cmd;
    tm_file *f;
    int rc = cli_open(a->pos[0], &f);
    if (rc) return rc;
    int64_t n = tm_graph_n_nodes(f);
    if (n == 0 && tm_file_format(f) != TM_FMT_ONNX) {
        fprintf(stderr, "tensormorph: %s: a %s checkpoint has no graph\n", a->pos[0],
                tm_format_name(tm_file_format(f)));
        tm_close(f);
        return EXIT_INPUT;
    }
    int only_q = cli_has(a, "quantized");
    int64_t counts[TM_QNODE_COUNT] = {0};
    for (int64_t i = 0; i < n; i++) counts[tm_graph_node_at(f, i)->qkind]++;
    if (g_cli.json) {
        json_t *d = cli_json_doc("graph");
        json_object_set_new(d, "path", json_string(a->pos[0]));
        json_object_set_new(d, "format", json_string(tm_format_name(tm_file_format(f))));
        json_object_set_new(d, "n_nodes", json_integer(n));
        json_object_set_new(d, "n_values", json_integer(tm_graph_n_values(f)));
        json_t *qc = json_object();
        for (int k = 1; k < TM_QNODE_COUNT; k++)
            json_object_set_new(qc, tm_qnode_kind_name((tm_qnode_kind)k), json_integer(counts[k]));
        json_object_set_new(d, "quant_nodes", qc);
        json_t *nodes = json_array(), *points = json_array();
        for (int64_t i = 0; i < n; i++) {
            const tm_graph_node *nd = tm_graph_node_at(f, i);
            if ((nd->qkind == TM_QNODE_QUANTIZE || nd->qkind == TM_QNODE_DYNAMIC_QUANTIZE) &&
                nd->n_inputs > 0 && nd->n_outputs > 0) {
                const tm_graph_value *x = tm_graph_value_at(f, nd->inputs[0]);
                const tm_graph_value *y = tm_graph_value_at(f, nd->outputs[0]);
                if (x && y && x->tensor < 0) {
                    json_t *p = json_object();
                    json_object_set_new(p, "node", json_integer(i));
                    json_object_set_new(p, "input", json_string(x->name));
                    json_object_set_new(p, "output", json_string(y->name));
                    json_object_set_new(p, "elem_type", json_string(y->elem_type_name));
                    json_object_set_new(p, "dynamic", json_boolean(nd->qkind == TM_QNODE_DYNAMIC_QUANTIZE));
                    const tm_graph_value *sv = tm_graph_value_at(f, y->scale_value);
                    const tm_graph_value *zv = tm_graph_value_at(f, y->zero_point_value);
                    json_object_set_new(p, "scale", sv ? json_string(sv->name) : json_null());
                    json_object_set_new(p, "zero_point", zv ? json_string(zv->name) : json_null());
                    json_array_append_new(points, p);
                }
            }
            if (only_q && nd->qkind == TM_QNODE_NONE) continue;
            json_t *o = json_object();
            json_object_set_new(o, "index", json_integer(i));
            json_object_set_new(o, "name", json_string(nd->name));
            json_object_set_new(o, "op_type", json_string(nd->op_type));
            json_object_set_new(o, "domain", json_string(nd->domain));
            json_object_set_new(o, "graph", json_string(nd->graph));
            json_object_set_new(o, "quant_kind", json_string(tm_qnode_kind_name(nd->qkind)));
            const tm_tensor *w = nd->weight_tensor >= 0 ? tm_file_tensor(f, nd->weight_tensor) : NULL;
            json_object_set_new(o, "weight", w ? json_string(w->name) : json_null());
            json_t *in = json_array(), *out = json_array();
            for (int64_t k = 0; k < nd->n_inputs; k++) json_array_append_new(in, value_json(f, nd->inputs[k]));
            for (int64_t k = 0; k < nd->n_outputs; k++) json_array_append_new(out, value_json(f, nd->outputs[k]));
            json_object_set_new(o, "inputs", in);
            json_object_set_new(o, "outputs", out);
            json_array_append_new(nodes, o);
        }
        json_object_set_new(d, "activation_quantization_points", points);
        json_object_set_new(d, "nodes", nodes);
        cli_json_print(d);
    } else {
        printf("path:   %s\nformat: %s\nnodes:  %" PRId64 " (", a->pos[0],
               tm_format_name(tm_file_format(f)), n);
        for (int k = 1; k < TM_QNODE_COUNT; k++)
            printf("%s%s %" PRId64, k > 1 ? ", " : "", tm_qnode_kind_name((tm_qnode_kind)k), counts[k]);
        printf(")\n\n");
        char buf[512];
        for (int64_t i = 0; i < n; i++) {
            const tm_graph_node *nd = tm_graph_node_at(f, i);
            if (only_q && nd->qkind == TM_QNODE_NONE) continue;
            printf("#%-5" PRId64 " %s%s%s%s%s%s", i, *nd->graph ? "[" : "", nd->graph,
                   *nd->graph ? "] " : "", *nd->domain ? nd->domain : "", *nd->domain ? "." : "",
                   nd->op_type);
            if (*nd->name) printf(" '%s'", nd->name);
            if (nd->qkind != TM_QNODE_NONE) printf("  <%s>", tm_qnode_kind_name(nd->qkind));
            printf("\n");
            for (int64_t k = 0; k < nd->n_inputs; k++) {
                value_str(f, nd->inputs[k], buf, sizeof buf);
                printf("         in  %s\n", buf);
            }
            for (int64_t k = 0; k < nd->n_outputs; k++) {
                value_str(f, nd->outputs[k], buf, sizeof buf);
                printf("         out %s\n", buf);
            }
        }
    }
    tm_close(f);
    return 0;
}
