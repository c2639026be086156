/* compat.c: the runtime contract check (tensormorph/compat.h): read the rule table
** (data/compat.json, compiled in), describe each quantized tensor or ONNX quantization node of a
** checkpoint by the facts rules test (code dtype, granularity, symmetry, ggml type, operand,
** consumer), and take the first rule of the target that matches. */
#include "../core/core.h"
#include "../core/jschema.h"
#include "tensormorph/compat.h"
#include "tensormorph/graph.h"

#include <jansson.h>
#include <stdio.h>

extern const char tm__compat_table_json[];

const char *tm_compat_table_default(void) { return tm__compat_table_json; }

static const char *const status_names[TM_COMPAT_STATUS_COUNT] = {
    "native", "higher_precision", "fallback_slow", "unsupported"};

const char *tm_compat_status_name(tm_compat_status s) {
    return (unsigned)s < TM_COMPAT_STATUS_COUNT ? status_names[s] : "?";
}

int tm_compat_status_from_name(const char *name) {
    for (int i = 0; name && i < TM_COMPAT_STATUS_COUNT; i++)
        if (!strcmp(status_names[i], name)) return i;
    return -1;
}

typedef struct compat_priv {
    json_t *table;
    char  **names;     /* "#<index>" names of anonymous nodes */
    int64_t n_names;
} compat_priv;

void tm_compat_report_free(tm_compat_report *r) {
    if (!r) return;
    compat_priv *p = r->priv_;
    if (p) {
        for (int64_t i = 0; i < p->n_names; i++) free(p->names[i]);
        free(p->names);
        json_decref(p->table);
        free(p);
    }
    free(r->items);
    free(r);
}

/* ---- the table ------------------------------------------------------------------------- */


/* Parse and check the table: JSON, the schema, then references the schema cannot express
** (a rule's target and source must be defined; sm_min/sm_max only on compute-capability
** targets). */
static tm_status load_table(const char *text, const char *name, json_t **out, tm_err *err) {
    json_error_t je;
    json_t *t = json_loads(text, 0, &je);
    if (!t)
        return tm__err_set(err, TM_E_CORRUPT, (int64_t)je.position, "%s: line %d column %d: %s", name,
                           je.line, je.column, je.text);
    tm_status s = tm__jschema_validate_named("compat", t, name, err);
    if (s) { json_decref(t); return s == TM_E_INTERNAL ? s : TM_E_CORRUPT; }
    json_t *targets = json_object_get(t, "targets"), *sources = json_object_get(t, "sources");
    json_t *rules = json_object_get(t, "rules");
    size_t i, j;
    json_t *r, *tg;
    json_array_foreach(rules, i, r) {
        const char *rt = tm__json_str(r, "target"), *src = tm__json_str(r, "source");
        const json_t *found = NULL;
        json_array_foreach(targets, j, tg) if (!strcmp(tm__json_str(tg, "name"), rt)) found = tg;
        tm_status bad = TM_OK;
        if (!found)
            bad = tm__err_set(err, TM_E_CORRUPT, -1, "%s: $.rules[%zu].target: '%s' is not a target of $.targets", name, i, rt);
        else if (!json_object_get(sources, src))
            bad = tm__err_set(err, TM_E_CORRUPT, -1, "%s: $.rules[%zu].source: '%s' is not defined in $.sources", name, i, src);
        else if ((json_object_get(r, "sm_min") || json_object_get(r, "sm_max")) &&
                 !json_is_true(json_object_get(found, "compute_capability")))
            bad = tm__err_set(err, TM_E_CORRUPT, -1, "%s: $.rules[%zu]: sm_min/sm_max on target '%s', which has no compute capability", name, i, rt);
        else if (json_object_get(r, "domain") && strcmp(tm__json_str(r, "kind"), "node"))
            bad = tm__err_set(err, TM_E_CORRUPT, -1, "%s: $.rules[%zu].domain: only node rules have a domain (kind is '%s')", name, i, tm__json_str(r, "kind"));
        for (int k = 0; !bad && k < 2; k++) {
            const char *key = k ? "sm_max" : "sm_min";
            json_int_t x;
            char path[64];
            snprintf(path, sizeof path, "$.rules[%zu].%s", i, key);
            if (json_object_get(r, key)) bad = tm__json_int(json_object_get(r, key), name, path, &x, err);
        }
        if (bad) { json_decref(t); return bad; } /* the message is written before t (and rt, src) go */
    }
    *out = t;
    return TM_OK;
}

void tm_compat_targets_str(const char *table_json, char *buf, size_t n) {
    if (!n) return;
    buf[0] = '\0';
    json_t *t = json_loads(table_json ? table_json : tm__compat_table_json, 0, NULL);
    size_t i, used = 0;
    json_t *tg;
    json_array_foreach(json_object_get(t, "targets"), i, tg) {
        const char *nm = tm__json_str(tg, "name");
        if (!nm) continue;
        int w = snprintf(buf + used, n - used, "%s%s%s", i ? ", " : "", nm,
                         json_is_true(json_object_get(tg, "compute_capability")) ? ":smNN" : "");
        if (w < 0 || (size_t)w >= n - used) break;
        used += (size_t)w;
    }
    json_decref(t);
}

/* ---- describing items ------------------------------------------------------------------ */


/* tensormorph dtype name of an ONNX element type of codes (integer and fp8 code types), or the
** ONNX name itself. */
static void onnx_code_name(int elem_type, const char *onnx, char *out, size_t n) {
    const tm_onnx_elem_info *e = tm_onnx_elem_get(elem_type);
    const tm_dtype_traits *dt = e && e->dtype >= 0 ? tm_dtype_get((tm_dtype)e->dtype) : NULL;
    if (dt && (dt->is_code || e->dtype == TM_I16 || e->dtype == TM_U16 || e->dtype == TM_I32)) snprintf(out, n, "%s", dt->name);
    else snprintf(out, n, "%s", onnx && strcmp(onnx, "?") ? onnx : "");
}

/* The quantized tensor's one label and description (tm_qtensor_label) on the item. */
static void set_label(const tm_file *f, const tm_tensor *t, tm_compat_item *it) {
    tm_qtensor_label(f, t, it->label, sizeof it->label);
    tm_qtensor_describe(f, t, it->description, sizeof it->description);
}

static void describe_tensor(const tm_file *f, const tm_tensor *t, tm_compat_item *it) {
    const tm_qtensor *q = t->quant;
    set_label(f, t, it);
    const tm_dtype_traits *dt = tm_dtype_get(q->code_dtype);
    snprintf(it->code_dtype, sizeof it->code_dtype, "%s", dt ? dt->name : "");
    snprintf(it->granularity, sizeof it->granularity, "%s", tm_granularity_kind_name(q->gran.kind));
    it->symmetric = q->symmetric ? 1 : 0;
    if (q->ggml_type) {
        const tm_ggml_type_info *gi = tm_ggml_type_info_get(q->ggml_type);
        snprintf(it->ggml_type, sizeof it->ggml_type, "%s", gi ? gi->name : "?");
    }
    snprintf(it->describe, sizeof it->describe, "%s", it->label);
}

/* Scale shape -> granularity of a Q/DQ node: scalar or [1] per-tensor, blocked when the codes
** carry a block size, else per-axis. */
static void qdq_granularity(const tm_file *f, const tm_graph_node *nd, const tm_graph_value *codes,
                            char *out, size_t n) {
    const tm_graph_value *s = nd->n_inputs > 1 ? tm_graph_value_at(f, nd->inputs[1]) : NULL;
    tm_granularity k = s && s->ndim >= 0 && (s->ndim == 0 || (s->ndim == 1 && s->shape[0] == 1)) ? TM_GRAN_TENSOR
                                                                                                  : TM_GRAN_CHANNEL;
    if (codes && codes->block_size > 0) k = TM_GRAN_GROUP;
    else if (!s || s->ndim < 0) { snprintf(out, n, "%s", ""); return; }
    snprintf(out, n, "%s", tm_granularity_kind_name(k));
}

/* 1 when the zero point value zv is absent (-1) or a tensor of zeros, 0 when it holds a non-zero
** value, -1 when it cannot be told (computed at run time, unreadable). */
static int zp_symmetric(const tm_file *f, int64_t zv) {
    if (zv < 0) return 1;
    const tm_graph_value *z = tm_graph_value_at(f, zv);
    if (!z || z->tensor < 0) return -1;
    const tm_tensor *t = tm_file_tensor(f, z->tensor);
    if (!t || t->n_elems <= 0 || t->n_elems > (1 << 24)) return -1;
    float *v = tm__malloc_n((size_t)t->n_elems, sizeof(float));
    if (!v) return -1;
    int r = 1;
    if (tm_tensor_read_f32(f, z->tensor, 0, t->n_elems, v, NULL) == TM_OK) {
        for (int64_t i = 0; i < t->n_elems; i++) if (v[i] != 0.0f) { r = 0; break; }
    } else {
        /* codes the view does not read as plain values (4-bit zero points): an integer zero
        ** point is zero exactly when its bytes are */
        const void *raw;
        const tm_dtype_traits *dt = tm_dtype_get(t->dtype);
        if (!dt || dt->is_float || tm_tensor_data(f, z->tensor, 0, t->n_bytes, &raw, NULL)) r = -1;
        else for (uint64_t i = 0; i < t->n_bytes; i++) if (((const uint8_t *)raw)[i]) { r = 0; break; }
    }
    free(v);
    return r;
}

typedef struct graph_maps {
    int64_t *producer;  /* value -> node producing it, -1 */
    int64_t *consumer;  /* value -> first node consuming it, -1 */
} graph_maps;

static tm_status build_maps(const tm_file *f, graph_maps *m, tm_err *err) {
    int64_t nv = tm_graph_n_values(f), nn = tm_graph_n_nodes(f);
    m->producer = tm__malloc_n((size_t)(nv > 0 ? nv : 1), sizeof(int64_t));
    m->consumer = tm__malloc_n((size_t)(nv > 0 ? nv : 1), sizeof(int64_t));
    if (!m->producer || !m->consumer) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t v = 0; v < nv; v++) m->producer[v] = m->consumer[v] = -1;
    for (int64_t i = 0; i < nn; i++) {
        const tm_graph_node *nd = tm_graph_node_at(f, i);
        for (int64_t k = 0; k < nd->n_outputs; k++)
            if (nd->outputs[k] >= 0 && nd->outputs[k] < nv && m->producer[nd->outputs[k]] < 0) m->producer[nd->outputs[k]] = i;
        for (int64_t k = 0; k < nd->n_inputs; k++)
            if (nd->inputs[k] >= 0 && nd->inputs[k] < nv && m->consumer[nd->inputs[k]] < 0) m->consumer[nd->inputs[k]] = i;
    }
    return TM_OK;
}

/* 1 when input k of nd comes from a DequantizeLinear whose codes are int8 or uint8 (the only
** codes ONNX Runtime's QLinearConv/QLinearMatMul kernels take) */
static int produced_by_8bit_dq(const tm_file *f, const graph_maps *m, const tm_graph_node *nd, int k) {
    if (nd->n_inputs <= k || nd->inputs[k] < 0) return 0;
    int64_t p = m->producer[nd->inputs[k]];
    const tm_graph_node *pn = p >= 0 ? tm_graph_node_at(f, p) : NULL;
    if (!pn || pn->qkind != TM_QNODE_DEQUANTIZE || pn->n_inputs < 1 || pn->inputs[0] < 0) return 0;
    const tm_graph_value *c = tm_graph_value_at(f, pn->inputs[0]);
    return c && (c->elem_type == TM_ONNX_INT8 || c->elem_type == TM_ONNX_UINT8);
}

/* The code input of a QOperator or integer node that describes it: the one holding the weight
** the reader mapped (tm_graph_node.weight_tensor), else the last input carrying codes (the
** weight slot: QLinearConv w, QLinearMatMul/QGemm b, MatMulInteger B, ...); -1 when none. */
static int weight_input(const tm_file *f, const tm_graph_node *nd) {
    int last = -1;
    for (int64_t k = 0; k < nd->n_inputs; k++) {
        const tm_graph_value *v = nd->inputs[k] >= 0 ? tm_graph_value_at(f, nd->inputs[k]) : NULL;
        if (!v || !v->quantized) continue;
        if (nd->weight_tensor >= 0 && v->tensor == nd->weight_tensor) return (int)k;
        last = (int)k;
    }
    return last;
}

static void describe_node(const tm_file *f, const graph_maps *m, int64_t ni, tm_compat_item *it) {
    const tm_graph_node *nd = tm_graph_node_at(f, ni);
    it->symmetric = -1;
    int code_in = -1, zp_in = -1;
    switch (nd->qkind) {
    case TM_QNODE_DEQUANTIZE: code_in = 0; zp_in = 2; break;
    case TM_QNODE_QOPERATOR: case TM_QNODE_INTEGER: code_in = weight_input(f, nd); break;
    default: break;
    }
    const tm_graph_value *codes = NULL;
    if (nd->qkind == TM_QNODE_QUANTIZE && nd->n_outputs > 0) {
        codes = tm_graph_value_at(f, nd->outputs[0]);
        zp_in = 2;
    } else if (code_in >= 0 && nd->n_inputs > code_in && nd->inputs[code_in] >= 0) {
        codes = tm_graph_value_at(f, nd->inputs[code_in]);
    }
    int64_t zv = -1; /* the zero point's value */
    if (zp_in >= 0) zv = nd->n_inputs > zp_in ? nd->inputs[zp_in] : -1;
    else if (codes && code_in >= 0) zv = codes->zero_point_value; /* as the reader paired them */
    const tm_tensor *wt = nd->weight_tensor >= 0 ? tm_file_tensor(f, nd->weight_tensor) : NULL;
    if (wt && wt->quant) set_label(f, wt, it); /* the weight it dequantizes */
    if (nd->qkind == TM_QNODE_DYNAMIC_QUANTIZE) {
        snprintf(it->code_dtype, sizeof it->code_dtype, "U8");
        snprintf(it->granularity, sizeof it->granularity, "%s", tm_granularity_kind_name(TM_GRAN_TENSOR));
    } else if (nd->qkind == TM_QNODE_MATMULNBITS) {
        if (wt && wt->quant) {
            const tm_dtype_traits *dt = tm_dtype_get(wt->quant->code_dtype);
            snprintf(it->code_dtype, sizeof it->code_dtype, "%s", dt ? dt->name : "");
            snprintf(it->granularity, sizeof it->granularity, "%s", tm_granularity_kind_name(wt->quant->gran.kind));
            it->symmetric = wt->quant->symmetric ? 1 : 0;
        }
    } else if (codes) {
        onnx_code_name(codes->elem_type, codes->elem_type_name, it->code_dtype, sizeof it->code_dtype);
        if (nd->qkind == TM_QNODE_DEQUANTIZE || nd->qkind == TM_QNODE_QUANTIZE)
            qdq_granularity(f, nd, codes, it->granularity, sizeof it->granularity);
        else if (wt && wt->quant)
            snprintf(it->granularity, sizeof it->granularity, "%s", tm_granularity_kind_name(wt->quant->gran.kind));
        if (zp_in >= 0 || code_in >= 0) it->symmetric = zp_symmetric(f, zv);
    }
    if (nd->qkind == TM_QNODE_QUANTIZE)
        snprintf(it->operand, sizeof it->operand, "%s",
                 nd->n_inputs > 0 && tm_graph_value_at(f, nd->inputs[0]) && tm_graph_value_at(f, nd->inputs[0])->tensor >= 0 ? "weight" : "activation");
    else if (codes)
        snprintf(it->operand, sizeof it->operand, "%s", codes->tensor >= 0 ? "weight" : "activation");
    else if (wt)
        snprintf(it->operand, sizeof it->operand, "weight");
    if (nd->qkind == TM_QNODE_DEQUANTIZE && nd->n_outputs > 0 && nd->outputs[0] >= 0) {
        int64_t c = m->consumer[nd->outputs[0]];
        const tm_graph_node *cn = c >= 0 ? tm_graph_node_at(f, c) : NULL;
        if (cn) {
            snprintf(it->consumer, sizeof it->consumer, "%s", cn->op_type);
            it->consumer_inputs_8bit_dq = produced_by_8bit_dq(f, m, cn, 0) && produced_by_8bit_dq(f, m, cn, 1);
        }
    }
    int contrib = nd->domain && *nd->domain && strcmp(nd->domain, "ai.onnx");
    snprintf(it->describe, sizeof it->describe, "%s%s%s %s%s%s%s%s%s%s%s", contrib ? nd->domain : "", contrib ? ":" : "", nd->op_type,
             it->code_dtype[0] ? it->code_dtype : "?", it->granularity[0] ? " " : "", it->granularity,
             it->symmetric == 0 ? " asym" : "", it->operand[0] ? " " : "", it->operand,
             it->consumer[0] ? " -> " : "", it->consumer);
}

/* ---- matching -------------------------------------------------------------------------- */

static int in_list(const json_t *list, const char *v) {
    if (!v || !*v) return 0;
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) if (json_is_string(e) && !strcmp(json_string_value(e), v)) return 1;
    return 0;
}

/* a rule's sm_min/sm_max; load_table has checked each is an integer (4.0 included) in range */
static json_int_t rule_int(const json_t *v) {
    json_int_t x = 0;
    tm__json_int(v, "compat table", "sm", &x, NULL);
    return x;
}

static int rule_matches(const json_t *r, const tm_compat_report *rep, const tm_compat_item *it) {
    if (strcmp(tm__json_str(r, "target"), rep->family)) return 0;
    if (strcmp(tm__json_str(r, "kind"), it->is_node ? "node" : "tensor")) return 0;
    json_t *v;
    if ((v = json_object_get(r, "sm_min")) && rep->compute_capability < rule_int(v)) return 0;
    if ((v = json_object_get(r, "sm_max")) && rep->compute_capability > rule_int(v)) return 0;
    /* node rules: the op's domain; without "domain" only the default ONNX domain, so a rule
    ** written for ai.onnx DequantizeLinear never claims a com.microsoft contrib op */
    if (it->is_node && ((v = json_object_get(r, "domain")) ? !in_list(v, it->domain) : strcmp(it->domain ? it->domain : "", "ai.onnx")))
        return 0;
    if ((v = json_object_get(r, "op_type")) && !in_list(v, it->op_type)) return 0;
    if ((v = json_object_get(r, "code_dtype")) && !in_list(v, it->code_dtype)) return 0;
    if ((v = json_object_get(r, "granularity")) && !in_list(v, it->granularity)) return 0;
    if ((v = json_object_get(r, "ggml_type")) && !in_list(v, it->ggml_type)) return 0;
    if ((v = json_object_get(r, "consumer_op")) && !in_list(v, it->consumer)) return 0;
    if ((v = json_object_get(r, "operand")) && strcmp(json_string_value(v), it->operand)) return 0;
    if ((v = json_object_get(r, "symmetric")) && (it->symmetric < 0 || json_is_true(v) != (it->symmetric == 1))) return 0;
    if ((v = json_object_get(r, "consumer_inputs_8bit_dq")) && json_is_true(v) != (it->consumer_inputs_8bit_dq != 0)) return 0;
    return 1;
}

static void classify(const json_t *table, tm_compat_report *rep, tm_compat_item *it) {
    const json_t *sources = json_object_get(table, "sources");
    if (!rep->format_loaded) {
        it->status = TM_COMPAT_UNSUPPORTED;
        it->reason = "the target does not load artifacts of this format";
        return;
    }
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(table, "rules"), i, r) {
        if (!rule_matches(r, rep, it)) continue;
        it->status = (tm_compat_status)tm_compat_status_from_name(tm__json_str(r, "status"));
        it->rule_id = tm__json_str(r, "id");
        it->reason = tm__json_str(r, "reason");
        it->source_id = tm__json_str(r, "source");
        const json_t *s = json_object_get(sources, it->source_id);
        it->source_url = tm__json_str(s, "url");
        it->source_title = tm__json_str(s, "title");
        return;
    }
    it->status = TM_COMPAT_UNSUPPORTED;
    it->reason = "no row of the table covers this combination for this target (fail closed: nothing found in the target's documentation says it runs)";
}

/* target "name" or "name:smNN" -> its table entry */
static tm_status find_target(const json_t *table, const char *target, tm_compat_report *rep,
                             const json_t **entry, tm_err *err) {
    char fam[64], list[512];
    const char *colon = strchr(target, ':');
    size_t fl = colon ? (size_t)(colon - target) : strlen(target), i, used = 0;
    json_t *tg;
    if (fl > 0 && fl < sizeof fam) {
        memcpy(fam, target, fl);
        fam[fl] = '\0';
        json_array_foreach(json_object_get(table, "targets"), i, tg) {
            if (strcmp(tm__json_str(tg, "name"), fam)) continue;
            if (json_is_true(json_object_get(tg, "compute_capability"))) {
                char *end = NULL;
                long cc = colon && !strncmp(colon, ":sm", 3) && colon[3] ? strtol(colon + 3, &end, 10) : -1;
                if (cc < 30 || cc > 150 || !end || *end)
                    return tm__err_set(err, TM_E_INVALID_ARG, -1,
                                       "target '%s': %s needs a compute capability, as %s:smNN with NN = major*10+minor in 30..150 (e.g. %s:sm80, %s:sm90)",
                                       target, fam, fam, fam, fam);
                rep->compute_capability = (int)cc;
            } else if (colon) {
                return tm__err_set(err, TM_E_INVALID_ARG, -1, "target '%s': %s takes no ':' suffix", target, fam);
            }
            rep->family = tm__json_str(tg, "name");
            rep->runtime = tm__json_str(tg, "runtime");
            rep->device = tm__json_str(tg, "device");
            *entry = tg;
            return TM_OK;
        }
    }
    list[0] = '\0';
    json_array_foreach(json_object_get(table, "targets"), i, tg) {
        int w = snprintf(list + used, sizeof list - used, "%s%s%s", i ? ", " : "", tm__json_str(tg, "name"),
                         json_is_true(json_object_get(tg, "compute_capability")) ? ":smNN" : "");
        if (w < 0 || (size_t)w >= sizeof list - used) break;
        used += (size_t)w;
    }
    return tm__err_set(err, TM_E_INVALID_ARG, -1, "unknown target '%s' (targets: %s)", target, list);
}

tm_status tm_compat_check(const tm_file *f, const char *target, const char *table_json,
                          const char *table_name, tm_compat_report **out, tm_err *err) {
    *out = NULL;
    if (!f || !target) return tm__err_set(err, TM_E_INVALID_ARG, -1, "compat: NULL file or target");
    if (!table_name) table_name = table_json ? "compat table" : "data/compat.json";
    json_t *table = NULL;
    tm_status s = load_table(table_json ? table_json : tm__compat_table_json, table_name, &table, err);
    if (s) return s;
    tm_compat_report *rep = calloc(1, sizeof *rep);
    compat_priv *p = calloc(1, sizeof *p);
    if (!rep || !p) { free(rep); free(p); json_decref(table); return tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); }
    rep->priv_ = p;
    p->table = table;
    snprintf(rep->target, sizeof rep->target, "%s", target);
    const json_t *entry = NULL;
    s = find_target(table, target, rep, &entry, err);
    if (s) { tm_compat_report_free(rep); return s; }
    rep->format = tm_format_name(tm_file_format(f));
    rep->format_loaded = in_list(json_object_get(entry, "formats"), rep->format);

    graph_maps m = {NULL, NULL};
    int is_onnx = tm_file_format(f) == TM_FMT_ONNX;
    int64_t cap = 0;
    if (is_onnx) {
        s = build_maps(f, &m, err);
        for (int64_t i = 0; !s && i < tm_graph_n_nodes(f); i++) cap += tm_graph_node_at(f, i)->qkind != TM_QNODE_NONE;
    } else {
        for (int64_t i = 0; i < tm_file_n_tensors(f); i++) {
            const tm_tensor *t = tm_file_tensor(f, i);
            cap += t->role == TM_ROLE_DATA && t->quant;
        }
    }
    if (!s && cap > 0) {
        rep->items = calloc((size_t)cap, sizeof *rep->items);
        p->names = calloc((size_t)cap, sizeof *p->names);
        if (!rep->items || !p->names) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    for (int64_t i = 0; !s && is_onnx && i < tm_graph_n_nodes(f); i++) {
        const tm_graph_node *nd = tm_graph_node_at(f, i);
        if (nd->qkind == TM_QNODE_NONE) continue;
        tm_compat_item *it = &rep->items[rep->n_items++];
        it->is_node = 1;
        it->index = i;
        it->op_type = nd->op_type;
        it->domain = nd->domain && *nd->domain ? nd->domain : "ai.onnx";
        if (nd->name && *nd->name) it->name = nd->name;
        else {
            p->names[p->n_names] = tm__aprintf("#%lld", (long long)i);
            if (!p->names[p->n_names]) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); break; }
            it->name = p->names[p->n_names++];
        }
        describe_node(f, &m, i, it);
        classify(table, rep, it);
    }
    for (int64_t i = 0; !s && !is_onnx && i < tm_file_n_tensors(f); i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        if (t->role != TM_ROLE_DATA || !t->quant) continue;
        tm_compat_item *it = &rep->items[rep->n_items++];
        it->index = i;
        it->name = t->name;
        describe_tensor(f, t, it);
        classify(table, rep, it);
    }
    free(m.producer);
    free(m.consumer);
    if (s) { tm_compat_report_free(rep); return s; }
    for (int64_t i = 0; i < rep->n_items; i++) rep->counts[rep->items[i].status]++;
    *out = rep;
    return TM_OK;
}

/* ---- JSON ------------------------------------------------------------------------------ */

static json_t *str_or_null(const char *s) { return s && *s ? json_string(s) : json_null(); }

char *tm_compat_report_json(const tm_compat_report *r) {
    json_t *o = json_object(), *counts = json_object(), *items = json_array(), *srcs = json_object();
    if (!o || !counts || !items || !srcs) { json_decref(o); json_decref(counts); json_decref(items); json_decref(srcs); return NULL; }
    json_object_set_new(o, "target", json_string(r->target));
    json_object_set_new(o, "family", str_or_null(r->family));
    json_object_set_new(o, "compute_capability", r->compute_capability ? json_integer(r->compute_capability) : json_null());
    json_object_set_new(o, "runtime", str_or_null(r->runtime));
    json_object_set_new(o, "device", str_or_null(r->device));
    json_object_set_new(o, "format", str_or_null(r->format));
    json_object_set_new(o, "format_loaded", json_boolean(r->format_loaded));
    json_object_set_new(o, "all_native", json_boolean(r->counts[TM_COMPAT_NATIVE] == r->n_items));
    for (int k = 0; k < TM_COMPAT_STATUS_COUNT; k++)
        json_object_set_new(counts, status_names[k], json_integer(r->counts[k]));
    json_object_set_new(o, "counts", counts);
    for (int64_t i = 0; i < r->n_items; i++) {
        const tm_compat_item *it = &r->items[i];
        json_t *e = json_object();
        json_object_set_new(e, "kind", json_string(it->is_node ? "node" : "tensor"));
        json_object_set_new(e, "name", str_or_null(it->name));
        json_object_set_new(e, "op_type", str_or_null(it->op_type));
        json_object_set_new(e, "domain", str_or_null(it->domain));
        json_object_set_new(e, "code_dtype", str_or_null(it->code_dtype));
        json_object_set_new(e, "granularity", str_or_null(it->granularity));
        json_object_set_new(e, "symmetric", it->symmetric < 0 ? json_null() : json_boolean(it->symmetric));
        json_object_set_new(e, "ggml_type", str_or_null(it->ggml_type));
        json_object_set_new(e, "operand", str_or_null(it->operand));
        json_object_set_new(e, "consumer", str_or_null(it->consumer));
        json_object_set_new(e, "describe", str_or_null(it->describe));
        if (it->label[0]) { /* a quantized tensor, or the node's quantized weight */
            json_object_set_new(e, "label", json_string(it->label));
            json_object_set_new(e, "description", json_string(it->description));
        }
        json_object_set_new(e, "status", json_string(tm_compat_status_name(it->status)));
        json_object_set_new(e, "reason", str_or_null(it->reason));
        json_object_set_new(e, "rule", str_or_null(it->rule_id));
        if (it->source_id) {
            json_t *s = json_object();
            json_object_set_new(s, "id", json_string(it->source_id));
            json_object_set_new(s, "url", str_or_null(it->source_url));
            json_object_set_new(s, "title", str_or_null(it->source_title));
            json_object_set_new(e, "source", s);
            if (!json_object_get(srcs, it->source_id)) {
                json_t *d = json_object();
                json_object_set_new(d, "url", str_or_null(it->source_url));
                json_object_set_new(d, "title", str_or_null(it->source_title));
                json_object_set_new(srcs, it->source_id, d);
            }
        } else {
            json_object_set_new(e, "source", json_null());
        }
        json_array_append_new(items, e);
    }
    json_object_set_new(o, "items", items);
    json_object_set_new(o, "sources", srcs);
    char *txt = json_dumps(o, JSON_PRESERVE_ORDER | JSON_COMPACT);
    json_decref(o);
    return txt;
}
