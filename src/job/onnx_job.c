/*
** onnx_job.c: quantize an ONNX model's weights into an ONNX model (tensormorph/onnx_quant.h).
**
**   1. plan: decode the model again for rewriting (src/formats/onnx_write.c); every weight read
**      as input 1 of Conv/ConvTranspose/MatMul/Gemm is a candidate, kept with its reason when
**      it is not float32/float16/bfloat16, too small, a graph input, filtered out, ...
**   2. opset: DequantizeLinear needs ai.onnx 10 / 13 / 21 (tm_onnx_dq_min_opset); the model's
**      opset is raised only when no op of any graph changes meaning (tm_onnx_op_stable), else
**      the com.microsoft contrib DequantizeLinear is used where it can hold the codes, else the
**      job is refused naming the op.
**   3. quantize each weight with the library's observers and kernels (tm_calib, tm_quantize_f32,
**      ONNX convention by default: q = clamp(round_half_even(x / scale) + zero_point)), measuring
**      the error with tm_erracc in LSB of each element's own scale.
**   4. pack, re-open the packed bytes with tensormorph's ONNX reader and check every quantized
**      weight comes back as a logical quantized tensor with the written scales, zero points and
**      granularity; then (the one driver, qpipeline.c) write it and OUT.manifest.json beside OUT and, under
**      OUT.lock, rename both into place.
*/
#include "../core/core.h"
#include "../core/fsutil.h"
#include "../formats/onnx_write.h"
#include "pipeline.h"
#include "tensormorph/graph.h"
#include "tensormorph/onnx_quant.h"

#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

json_t *tm__errsum_json(const tm_errsum *e); /* qjob.c */

tm_onnx_quantize_params tm_onnx_quantize_params_default(void) {
    tm_onnx_quantize_params p;
    memset(&p, 0, sizeof p);
    p.spec = tm_qspec_default();
    p.spec.gran.kind = TM_GRAN_CHANNEL;
    p.min_elems = 16;
    return p;
}

void tm_onnx_quantize_result_free(tm_onnx_quantize_result *r) {
    if (!r) return;
    for (int64_t i = 0; i < r->n; i++) {
        free(r->weights[i].name);
        free(r->weights[i].graph);
    }
    free(r->weights);
    free(r->manifest_json);
    free(r->manifest_path);
    free(r);
}

/* IR version an opset needs [onnx/helper.py VERSION_TABLE: opset 10 ships with IR 5, 11 with
** 6, 12-14 with 7, 15-18 with 8, 19-20 with 9, 21 with 10]. */
static int64_t ir_for_opset(int64_t v) {
    if (v >= 21) return 10;
    if (v >= 19) return 9;
    if (v >= 15) return 8;
    if (v >= 12) return 7;
    if (v >= 11) return 6;
    if (v >= 10) return 5;
    return 3;
}

static json_t *scheme_json(const tm_qspec *s) {
    json_t *o = json_object();
    char ob[96];
    tm_observer_name(&s->observer, ob, sizeof ob);
    json_object_set_new(o, "type", json_string(tm_dtype_get(s->code_dtype)->name));
    json_object_set_new(o, "granularity", json_string(tm_granularity_kind_name(s->gran.kind)));
    if (s->gran.kind == TM_GRAN_CHANNEL || s->gran.kind == TM_GRAN_GROUP)
        json_object_set_new(o, "axis", json_integer(s->gran.axis));
    if (s->gran.kind == TM_GRAN_GROUP) json_object_set_new(o, "group_size", json_integer(s->gran.group_size));
    json_object_set_new(o, "symmetric", json_boolean(s->symmetric));
    json_object_set_new(o, "observer", json_string(ob));
    json_object_set_new(o, "convention", json_string(s->convention == TM_CONV_TORCH ? "torch" : "onnx"));
    json_object_set_new(o, "scale_dtype", json_string(tm_dtype_get(s->scale_dtype)->name));
    json_object_set_new(o, "allow_nonfinite", json_boolean(s->allow_nonfinite));
    return o;
}

/* One weight's quantized form, kept until the model is packed and checked. */
typedef struct wq {
    int64_t  wi;         /* weight index in the rewrite model            */
    int64_t  ti;         /* tensor index in `in`                         */
    int      quantize;
    tm_qspec spec;
    float   *scale;
    int32_t *zp;
    uint8_t *codes;
    int      pndim;
    int64_t  pshape[TM_MAX_DIMS], n_params;
} wq;

static int onnx_code_type(tm_dtype d) {
    return d == TM_I8 ? TM_ONNX_INT8 : d == TM_U8 ? TM_ONNX_UINT8 : d == TM_I4 ? TM_ONNX_INT4 : TM_ONNX_UINT4;
}

/* Quantize tensor ti of `in` under w->spec into w (codes, scale, zero point) and rw->e. */
static tm_status quantize_one(const tm_file *in, wq *w, tm_onnx_quantize_tensor *rw, tm_err *err) {
    const tm_tensor *t = tm_file_tensor(in, w->ti);
    int64_t n = t->n_elems;
    tm_status s = tm_qgran_param_shape(&w->spec.gran, t->ndim, t->shape, &w->pndim, w->pshape, &w->n_params, err);
    if (s) return s;
    float *x = tm__malloc_n((size_t)n, sizeof(float)), *xq = tm__malloc_n((size_t)n, sizeof(float));
    int64_t *param = tm__malloc_n((size_t)n, sizeof(int64_t));
    w->codes = tm__malloc_n((size_t)n, 1);
    w->scale = tm__malloc_n((size_t)w->n_params, sizeof(float));
    w->zp = tm__calloc((size_t)w->n_params, sizeof(int32_t));
    tm_calib *cal = NULL;
    tm_erracc acc;
    int acc_ok = 0;
    if (!x || !xq || !param || !w->codes || !w->scale || !w->zp) {
        s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory (%lld elements)", (long long)n);
        goto done;
    }
    if ((s = tm_tensor_read_f32(in, w->ti, 0, n, x, err))) goto done;
    if ((s = tm_calib_create(&w->spec, t->ndim, t->shape, &cal, err))) goto done;
    if ((s = tm_calib_update(cal, t->ndim, t->shape, x, err))) goto done;
    if ((s = tm_calib_qparams(cal, w->scale, w->zp, err))) goto done;
    tm_qparams qp = tm_qparams_for_spec(&w->spec, w->n_params, w->scale, w->zp);
    if ((s = tm_quantize_f32(&qp, t->ndim, t->shape, x, 0, n, w->codes, NULL, err))) goto done;
    if ((s = tm_dequantize(&qp, t->ndim, t->shape, w->codes, 0, n, xq, err))) goto done;
    for (int64_t k = 0; k < n; k++) param[k] = tm_qgran_param_index(&qp.gran, t->ndim, t->shape, k);
    if ((s = tm_erracc_init(&acc, w->n_params, err))) goto done;
    acc_ok = 1;
    acc.kernels = w->spec.kernels;
    tm_erracc_add(&acc, qp.code_dtype, x, xq, param, w->scale, w->zp, qp.qmin, qp.qmax, n);
    tm_erracc_summary(&acc, &rw->e);
done:
    if (s) tm__err_prefix(err, "tensor '%s'", t->name);
    if (acc_ok) tm_erracc_free(&acc);
    tm_calib_free(cal);
    free(x);
    free(xq);
    free(param);
    return s;
}

/* The re-opened output must show weight w as the quantized tensor written. */
static tm_status check_reopened(const tm_file *f, const char *wname, const wq *w, tm_err *err) {
    char nm[1100];
    snprintf(nm, sizeof nm, "%s_quantized", wname);
    int64_t i = tm_file_find(f, nm);
    const tm_tensor *t = tm_file_tensor(f, i);
    if (!t || !t->quant)
        return tm__err_set(err, TM_E_INTERNAL, -1, "re-opened output: '%s' is not a quantized tensor", nm);
    const tm_qtensor *q = t->quant;
    int axis_ok = q->gran.kind == TM_GRAN_TENSOR || q->gran.axis == w->spec.gran.axis;
    if (q->code_dtype != w->spec.code_dtype || q->gran.kind != w->spec.gran.kind || !axis_ok ||
        (q->gran.kind == TM_GRAN_GROUP && q->gran.group_size != w->spec.gran.group_size))
        return tm__err_set(err, TM_E_INTERNAL, -1, "re-opened output: '%s' reads back as %s %s axis %d, "
                           "written %s %s axis %d", nm, tm_dtype_get(q->code_dtype)->name,
                           tm_granularity_kind_name(q->gran.kind), q->gran.axis, tm_dtype_get(w->spec.code_dtype)->name,
                           tm_granularity_kind_name(w->spec.gran.kind), w->spec.gran.axis);
    float *sc = NULL;
    int32_t *zp = NULL;
    int64_t np = 0;
    tm_status s = tm_tensor_qparams(f, i, &sc, &zp, &np, err);
    if (!s && np != w->n_params)
        s = tm__err_set(err, TM_E_INTERNAL, -1, "re-opened output: '%s' has %lld scales, written %lld", nm,
                        (long long)np, (long long)w->n_params);
    for (int64_t k = 0; !s && k < np; k++)
        if (sc[k] != w->scale[k] || (zp ? zp[k] : 0) != w->zp[k])
            s = tm__err_set(err, TM_E_INTERNAL, -1, "re-opened output: '%s' scale/zero point %lld reads %g/%d, "
                            "written %g/%d", nm, (long long)k, (double)sc[k], zp ? zp[k] : 0,
                            (double)w->scale[k], w->zp[k]);
    free(sc);
    free(zp);
    return s;
}

/* the rewrite model's dims and the reader's shape of the same tensor agree */
static int same_shape(const tm__oxweight *w, const tm_tensor *t) {
    if (w->ndim != t->ndim) return 0;
    for (int d = 0; d < t->ndim; d++)
        if (w->shape[d] != t->shape[d]) return 0;
    return 1;
}

static int match_any(regex_t *re, int64_t n, const char *s) {
    for (int64_t k = 0; k < n; k++) if (regexec(&re[k], s, 0, NULL, 0) == 0) return 1;
    return 0;
}

static int is_float_type(int t) {
    return t == TM_ONNX_FLOAT || t == TM_ONNX_FLOAT16 || t == TM_ONNX_BFLOAT16;
}

/* "12 DequantizeLinear, 1 MatMulNBits": in's quantized tensors counted by layout (the reader's
** "onnx/..." names without the prefix). Returns how many there are. */
static int64_t count_quantized(const tm_file *in, char *buf, size_t n) {
    const char *lay[4] = {0};
    int64_t cnt[4] = {0}, total = 0;
    int nl = 0;
    for (int64_t i = 0; i < tm_file_n_tensors(in); i++) {
        const tm_tensor *t = tm_file_tensor(in, i);
        if (!t->quant || t->role != TM_ROLE_DATA) continue;
        const char *l = t->quant->layout ? t->quant->layout : "quantized";
        if (!strncmp(l, "onnx/", 5)) l += 5;
        total++;
        int k = 0;
        while (k < nl && strcmp(lay[k], l)) k++;
        if (k == nl && nl < 4) lay[nl++] = l;
        if (k < nl) cnt[k]++;
    }
    size_t at = 0;
    buf[0] = '\0';
    for (int k = 0; k < nl && at < n; k++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld %s", k ? ", " : "", (long long)cnt[k], lay[k]);
    return total;
}

/* After the plan: when no weight is to be quantized, say why instead of writing a copy of the
** input (the compressed-tensors job's rule, src/job/qjob.c check_something_quantized, and
** docs/exit-codes.md): an already-quantized model, a group size for a model without MatMul
** weights, or nothing left for another reason of the input is TM_E_UNSUPPORTED (exit 3); an
** --include that matches no weight, or filters that leave no float weight, TM_E_INVALID_ARG
** (exit 2). */
static tm_status check_something_quantized(const tm_file *in, const tm__oxmodel *m, const wq *plan,
                                           const tm_onnx_quantize_result *res, const tm_onnx_quantize_params *p,
                                           regex_t *re, tm_err *err) {
    int64_t nw = tm__ox_n_weights(m), n_float = 0, n_filtered = 0, n_group = 0, n_inc = 0;
    for (int64_t i = 0; i < nw; i++)
        if (plan[i].quantize) return TM_OK;
    char group_ops[160] = "";
    for (int64_t i = 0; i < nw; i++) {
        const tm__oxweight *w = tm__ox_weight(m, i);
        const char *why = res->weights[i].reason;
        if (p->n_include && match_any(re, p->n_include, w->name)) n_inc++;
        if (!is_float_type(w->elem_type)) continue;
        n_float++;
        if (!strcmp(why, "not matched by --include") || !strcmp(why, "matched by --exclude")) n_filtered++;
        if (!strncmp(why, "block quantization (group:N)", 28)) {
            n_group++;
            /* the union of the consumers' op types, each once */
            char ops[160];
            snprintf(ops, sizeof ops, "%s", w->consumers);
            for (char *save = NULL, *op = strtok_r(ops, ",", &save); op; op = strtok_r(NULL, ",", &save)) {
                int seen = 0;
                for (const char *q = group_ops; (q = strstr(q, op)); q++) {
                    size_t l = strlen(op);
                    if ((q == group_ops || q[-1] == ',') && (q[l] == ',' || q[l] == '\0')) { seen = 1; break; }
                }
                size_t gl = strlen(group_ops);
                if (!seen && gl + strlen(op) + 2 < sizeof group_ops)
                    snprintf(group_ops + gl, sizeof group_ops - gl, "%s%s", gl ? "," : "", op);
            }
        }
    }
    const char *in_path = tm_file_path(in, 0);
    const char *anyway = "(--allow-empty writes the unchanged copy anyway)";
    char qs[160];
    int64_t nq = count_quantized(in, qs, sizeof qs);
    if (n_float == 0 && nq > 0)
        return tm__err_set(err, TM_E_UNSUPPORTED, -1,
                           "%s: the model is already quantized: %s weight%s, no float weight of Conv, "
                           "ConvTranspose, MatMul or Gemm left; nothing to quantize %s",
                           in_path, qs, nq == 1 ? "" : "s", anyway);
    if (p->n_include > 0 && n_inc == 0)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "%s: --include '%s'%s matched no weight (of %lld); nothing to quantize %s",
                           in_path, p->include[0], p->n_include > 1 ? " (and the other --include patterns)" : "",
                           (long long)nw, anyway);
    if (n_group > 0) {
        char who[96];
        if (n_group == n_float) snprintf(who, sizeof who, "this model's %lld weight%s", (long long)n_group, n_group == 1 ? "" : "s");
        else snprintf(who, sizeof who, "%lld of this model's %lld float weights", (long long)n_group, (long long)n_float);
        return tm__err_set(err, TM_E_UNSUPPORTED, -1,
                           "%s: group:%lld applies to MatMul weights only; %s feed %s, so no weight was "
                           "quantized (-g channel or -g tensor quantizes them) %s",
                           in_path, (long long)p->spec.gran.group_size, who, group_ops, anyway);
    }
    if (n_filtered > 0)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "%s: --include/--exclude left no weight to quantize (%lld of %lld float weights "
                           "filtered out) %s",
                           in_path, (long long)n_filtered, (long long)n_float, anyway);
    char reasons[400] = "";
    size_t at = 0;
    for (int64_t i = 0; i < nw && i < 3 && at < sizeof reasons; i++)
        at += (size_t)snprintf(reasons + at, sizeof reasons - at, "%s'%s': %s", i ? "; " : "",
                               res->weights[i].name, res->weights[i].reason);
    if (nw == 0)
        return tm__err_set(err, TM_E_UNSUPPORTED, -1,
                           "%s: no weight to quantize: no float tensor is read as the weight (input 1) of "
                           "Conv, ConvTranspose, MatMul or Gemm %s", in_path, anyway);
    return tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: none of the %lld weights can be quantized (%s%s) %s",
                       in_path, (long long)nw, reasons, nw > 3 ? "; ..." : "", anyway);
}

/* The job inside the pipeline: pp has checked and locked OUT; the model is written at pp->stage. */
/* The job's state from plan to done (the driver's phases: pipeline.h, tm__qwriter). */
typedef struct oxjob {
    tm_file               *in;
    const tm_onnx_quantize_params *p;
    regex_t               *re;       /* --include then --exclude, n_re compiled          */
    int64_t                n_re, nw, min_elems, n_todo, n_done;
    tm__oxmodel           *m;        /* the model being rewritten                        */
    wq                    *plan;     /* [nw]                                             */
    tm_onnx_quantize_result       *res;
    const char            *dq_domain;
    uint8_t               *buf;      /* the packed output                                */
    size_t                 nbuf;
    tm_file               *back;     /* the packed output re-opened                      */
} oxjob;

/* The plan: decode the model for rewriting, decide every weight, choose the opset strategy
** and refuse a run that would quantize nothing. One task per weight, on one thread (each
** replaces nodes of the one model). */
static tm_status onnx_plan(void *ctx, tm__pipe *pp, int64_t *n_tasks, tm_err *err) {
    oxjob *j = ctx;
    tm_file *in = j->in;
    const tm_onnx_quantize_params *p = j->p;
    const tm_qspec *ds = &p->spec;
    const int64_t min_elems = j->min_elems;
    (void)pp;
    tm_status s = TM_OK;
    regex_t *re = j->re = tm__calloc((size_t)(p->n_include + p->n_exclude + 1), sizeof *re);
    if (!re) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (; j->n_re < p->n_include + p->n_exclude; j->n_re++) {
        int64_t k = j->n_re;
        const char *pat = k < p->n_include ? p->include[k] : p->exclude[k - p->n_include];
        if (regcomp(&re[k], pat, REG_EXTENDED | REG_NOSUB))
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "invalid regular expression '%s'", pat);
    }
    const char *in_path = tm_file_path(in, 0);
    s = tm__ox_load(in_path, &j->m, err);
    tm__oxmodel *m = j->m;
    const char *ext;
    if (!s && tm__ox_has_external(m, &ext))
        s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: tensor '%s' keeps its data in an external file; "
                        "ONNX output of models with external data is not supported (refused, nothing "
                        "written)", in_path, ext);
    int64_t nw = j->nw = m ? tm__ox_n_weights(m) : 0;
    tm_onnx_quantize_result *res = NULL;
    wq *plan = NULL;
    if (!s) {
        res = j->res = tm__calloc(1, sizeof *res);
        if (res) res->weights = tm__calloc((size_t)(nw ? nw : 1), sizeof *res->weights);
        plan = j->plan = tm__calloc((size_t)(nw ? nw : 1), sizeof *plan);
        if (!res || !res->weights || !plan) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    /* ---- plan ---- */
    int64_t need = 0;
    for (int64_t i = 0; !s && i < nw; i++) {
        const tm__oxweight *w = tm__ox_weight(m, i);
        tm_onnx_quantize_tensor *rw = &res->weights[res->n++];
        wq *pl = &plan[i];
        pl->wi = i;
        rw->name = tm__strdup(w->name);
        rw->graph = tm__strdup(w->graph);
        if (!rw->name || !rw->graph) { s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); break; }
        snprintf(rw->consumers, sizeof rw->consumers, "%s", w->consumers);
        rw->constant_node = w->constant_node;
        pl->ti = tm_file_find(in, w->name);
        const tm_tensor *t = tm_file_tensor(in, pl->ti);
        rw->src_dtype = t ? t->dtype : TM_F32;
        rw->n_elems = t ? t->n_elems : 0;
        int ft = is_float_type(w->elem_type);
        char *why = rw->reason;
        size_t wn = sizeof rw->reason;
        if (p->n_include && !match_any(re, p->n_include, w->name)) snprintf(why, wn, "not matched by --include");
        else if (p->n_exclude && match_any(re + p->n_include, p->n_exclude, w->name)) snprintf(why, wn, "matched by --exclude");
        else if (!ft) snprintf(why, wn, "element type %s is not float32/float16/bfloat16", tm_onnx_elem_name(w->elem_type, "other"));
        else if (w->graph_input) snprintf(why, wn, "also a graph input (its value can be fed at run time)");
        else if (w->name_clash) snprintf(why, wn, "a name '%s_quantized/_scale/_zero_point/...' is already used in the model", w->name);
        else if (!t || t->quant || t->n_elems <= 0) snprintf(why, wn, "the ONNX reader lists no float tensor of this name");
        else if (!same_shape(w, t)) snprintf(why, wn, "the decoded dims disagree with the reader's shape");
        else if (t->n_elems < min_elems) snprintf(why, wn, "%lld elements, fewer than %lld", (long long)t->n_elems, (long long)min_elems);
        else if (w->only_matmul && t->ndim != 2) snprintf(why, wn, "MatMul weight is %d-D, not 2-D", t->ndim);
        if (*why) continue;
        pl->spec = *ds;
        pl->spec.kernels = p->kernels;
        if (ds->gran.kind == TM_GRAN_GROUP) {
            if (!w->only_matmul) {
                snprintf(why, wn, "block quantization (group:N) applies to MatMul weights only (consumers: %s)", w->consumers);
                continue;
            }
            pl->spec.gran.axis = 0; /* K of a [K, N] MatMul weight */
        } else if (ds->gran.kind == TM_GRAN_CHANNEL) {
            if (w->axis == -2) {
                pl->spec.gran.kind = TM_GRAN_TENSOR;
                snprintf(why, wn, "consumers %s read it with different channel axes: per-tensor", w->consumers);
            } else if (w->axis < 0 || w->axis >= t->ndim) {
                pl->spec.gran.kind = TM_GRAN_TENSOR;
                snprintf(why, wn, "%d-D weight has no channel axis %d: per-tensor", t->ndim, w->axis);
            } else if (t->shape[w->axis] == 1) {
                pl->spec.gran.kind = TM_GRAN_TENSOR; /* the same scales; read back as per-tensor */
                snprintf(why, wn, "one output channel: per-tensor");
            } else {
                pl->spec.gran.axis = w->axis;
            }
        }
        if (pl->spec.gran.kind == TM_GRAN_TENSOR) pl->spec.gran.axis = 0;
        pl->quantize = 1;
        rw->gran = pl->spec.gran;
        int64_t nd = tm_onnx_dq_min_opset(pl->spec.code_dtype, pl->spec.gran.kind);
        if (nd > need) need = nd;
    }
    /* ---- opset strategy ---- */
    const char *dq_domain = "";
    if (!s) {
        int64_t cur = tm__ox_opset(m, "");
        res->opset_from = res->opset_to = cur;
        res->opset_needed = need;
        res->ir_from = res->ir_to = tm__ox_ir_version(m);
        const char *op = NULL, *node = NULL, *graph = NULL;
        int64_t at = 0;
        if (need == 0) {
            res->strategy = TM_ONNX_OPSET_NATIVE;
            snprintf(res->strategy_reason, sizeof res->strategy_reason, "no weight to quantize: opset unchanged");
        } else if (cur >= need) {
            res->strategy = TM_ONNX_OPSET_NATIVE;
            snprintf(res->strategy_reason, sizeof res->strategy_reason,
                     "ai.onnx opset %lld already has the DequantizeLinear needed (opset %lld)", (long long)cur, (long long)need);
        } else if (!tm__ox_first_unstable(m, cur, need, &op, &node, &graph, &at)) {
            res->strategy = TM_ONNX_OPSET_RAISED;
            res->opset_to = need;
            int64_t irm = ir_for_opset(need);
            if (res->ir_to < irm) res->ir_to = irm;
            snprintf(res->strategy_reason, sizeof res->strategy_reason,
                     "ai.onnx opset raised %lld -> %lld: no op in the model changes meaning between them", (long long)cur, (long long)need);
            s = tm__ox_set_opset(m, "", need, irm, err);
        } else if (need <= 13 && ds->code_dtype != TM_I4) {
            res->strategy = TM_ONNX_OPSET_MS_CONTRIB;
            dq_domain = "com.microsoft";
            snprintf(res->strategy_reason, sizeof res->strategy_reason,
                     "ai.onnx opset %lld kept: raising it to %lld would change %s (node '%s'%s%s, changed in %s-%lld); "
                     "com.microsoft DequantizeLinear used", (long long)cur, (long long)need, op, node,
                     *graph ? " in " : "", graph, op, (long long)at);
            if (tm__ox_opset(m, "com.microsoft") < 1) s = tm__ox_set_opset(m, "com.microsoft", 1, 0, err);
        } else {
            res->strategy = TM_ONNX_OPSET_NONE;
            char scheme[64];
            if (ds->gran.kind == TM_GRAN_GROUP)
                snprintf(scheme, sizeof scheme, "%s group:%lld", ds->code_dtype == TM_I4 ? "int4" : tm_dtype_get(ds->code_dtype)->name,
                         (long long)ds->gran.group_size);
            else
                snprintf(scheme, sizeof scheme, "%s %s", ds->code_dtype == TM_I4 ? "int4" : tm_dtype_get(ds->code_dtype)->name,
                         tm_granularity_kind_name(ds->gran.kind));
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1,
                            "%s: %s needs DequantizeLinear of ai.onnx opset %lld, the model has opset %lld, and "
                            "raising it would change op %s (node '%s'%s%s; %s-%lld changed its meaning); "
                            "com.microsoft DequantizeLinear has no int4 or block_size. Nothing written",
                            in_path, scheme, (long long)need, (long long)cur, op, node, *graph ? " in graph " : "",
                            graph, op, (long long)at);
        }
    }
    /* float16/bfloat16 weights: a Cast after the DequantizeLinear; Cast to bfloat16 needs opset 13 */
    for (int64_t i = 0; !s && i < nw; i++) {
        const tm__oxweight *w = tm__ox_weight(m, i);
        if (plan[i].quantize && w->elem_type == TM_ONNX_BFLOAT16 && res->opset_to < 13) {
            plan[i].quantize = 0;
            snprintf(res->weights[i].reason, sizeof res->weights[i].reason,
                     "bfloat16 weight: Cast to bfloat16 needs ai.onnx opset 13, the output has %lld", (long long)res->opset_to);
        }
    }
    if (!s && !p->allow_empty) s = check_something_quantized(in, m, plan, res, p, re, err);
    j->dq_domain = dq_domain;
    for (int64_t i = 0; i < nw && plan; i++) j->n_todo += plan[i].quantize;
    *n_tasks = s ? 0 : nw;
    return s;
}

/* Task i: quantize weight i (when planned) and put its DequantizeLinear in the model. */
static tm_status onnx_run_task(void *ctx, int64_t i, int thread, tm_err *err) {
    oxjob *j = ctx;
    const tm_onnx_quantize_params *p = j->p;
    tm_onnx_quantize_result *res = j->res;
    wq *pl = &j->plan[i];
    (void)thread;
    if (!pl->quantize) return TM_OK;
    const tm__oxweight *w = tm__ox_weight(j->m, i);
    tm_status s = quantize_one(j->in, pl, &res->weights[i], err);
    if (s) return s;
    tm__oxq q;
    memset(&q, 0, sizeof q);
    q.code_type = onnx_code_type(pl->spec.code_dtype);
    q.codes = pl->codes;
    q.scale = pl->scale;
    q.zero_point = pl->zp;
    q.pndim = pl->pndim;
    memcpy(q.pshape, pl->pshape, sizeof q.pshape);
    q.n_params = pl->n_params;
    q.has_axis = pl->spec.gran.kind != TM_GRAN_TENSOR;
    q.axis = pl->spec.gran.axis;
    q.block_size = pl->spec.gran.kind == TM_GRAN_GROUP ? pl->spec.gran.group_size : 0;
    q.domain = j->dq_domain;
    q.cast_to = w->elem_type == TM_ONNX_FLOAT ? 0 : w->elem_type;
    if ((s = tm__ox_replace(j->m, i, &q, err))) return s;
    res->weights[i].quantized = 1;
    res->n_quantized++;
    if (p->progress) p->progress(p->progress_ud, "quantize", (uint64_t)++j->n_done, (uint64_t)j->n_todo);
    return TM_OK;
}

/* Pack, check every quantized weight through the reader, write the staged file. */
static tm_status onnx_write(void *ctx, tm__pipe *pp, tm_err *err) {
    oxjob *j = ctx;
    const tm_onnx_quantize_params *p = j->p;
    tm_status s = tm__ox_pack(j->m, &j->buf, &j->nbuf, err);
    if (!s) {
        s = tm_onnx_open_buffer(j->buf, j->nbuf, pp->out, NULL, &j->back, err);
        if (s) tm__err_prefix(err, "re-opening the quantized model");
    }
    for (int64_t i = 0; !s && i < j->nw; i++)
        if (j->plan[i].quantize) s = check_reopened(j->back, tm__ox_weight(j->m, i)->name, &j->plan[i], err);
    if (!s && p->cancel && *p->cancel) s = tm__err_set(err, TM_E_CANCELLED, -1, "cancelled");
    if (!s) s = tm__write_file_atomic(pp->stage, j->buf, j->nbuf, err);
    return s;
}

static tm_status onnx_results(void *ctx, tm__pipe *pp, tm__qtotals *tot, tm_err *err) {
    oxjob *j = ctx;
    (void)pp;
    (void)err;
    j->res->src_bytes = tm_file_size(j->in, 0);
    TM__QTOTALS_OF(tot, j->res);
    tot->at.manifest_path = &j->res->manifest_path;
    return TM_OK;
}

static tm_status onnx_manifest(void *ctx, json_t *man, tm_err *err) {
    oxjob *j = ctx;
    const tm_onnx_quantize_params *p = j->p;
    const tm_onnx_quantize_result *res = j->res;
    const char *dq_domain = j->dq_domain;
    (void)err;
    json_t *recipe = json_object();
    json_object_set_new(recipe, "format", json_string("onnx"));
    json_object_set_new(recipe, "default", scheme_json(&p->spec));
    json_object_set_new(recipe, "targets", json_string("float weights read as input 1 (the weight) of ai.onnx Conv, ConvTranspose, MatMul, Gemm, in every graph and subgraph"));
    json_object_set_new(recipe, "min_elems", json_integer(j->min_elems));
    json_t *inc = json_array(), *exc = json_array();
    for (int64_t k = 0; k < p->n_include; k++) json_array_append_new(inc, json_string(p->include[k]));
    for (int64_t k = 0; k < p->n_exclude; k++) json_array_append_new(exc, json_string(p->exclude[k]));
    json_object_set_new(recipe, "include", inc);
    json_object_set_new(recipe, "exclude", exc);
    json_t *os = json_object();
    json_object_set_new(os, "strategy", json_string(tm_onnx_opset_strategy_name(res->strategy)));
    json_object_set_new(os, "dequantize_domain", json_string(*dq_domain ? dq_domain : "ai.onnx"));
    json_object_set_new(os, "from", json_integer(res->opset_from));
    json_object_set_new(os, "to", json_integer(res->opset_to));
    json_object_set_new(os, "needed", json_integer(res->opset_needed));
    json_object_set_new(os, "ir_version_from", json_integer(res->ir_from));
    json_object_set_new(os, "ir_version_to", json_integer(res->ir_to));
    json_object_set_new(os, "reason", json_string(res->strategy_reason));
    json_object_set_new(recipe, "opset", os);
    json_object_set_new(man, "recipe", recipe);
    tm__manifest_add_calibration(man, "none: weight-only quantization; each observer ran on the weights themselves");
    json_t *ts = json_array();
    for (int64_t i = 0; i < res->n; i++) {
        const tm_onnx_quantize_tensor *rw = &res->weights[i];
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(rw->name));
        json_object_set_new(o, "graph", json_string(rw->graph));
        json_object_set_new(o, "source", json_string(rw->constant_node ? "Constant node" : "initializer"));
        json_object_set_new(o, "consumers", json_string(rw->consumers));
        json_object_set_new(o, "decision", json_string(rw->quantized ? "quantized" : "kept"));
        if (rw->quantized) {
            json_object_set_new(o, "scheme", scheme_json(&j->plan[i].spec));
            json_object_set_new(o, "error", tm__errsum_json(&rw->e));
            json_object_set_new(o, "note", json_string(rw->reason));
            char *qn = tm__aprintf("%s_quantized", rw->name);
            json_object_set_new(o, "quantized_name", qn ? json_string(qn) : json_null());
            free(qn);
        } else {
            json_object_set_new(o, "reason", json_string(rw->reason));
        }
        json_array_append_new(ts, o);
    }
    json_object_set_new(man, "tensors", ts);
    return TM_OK;
}

static tm_status onnx_summary(void *ctx, json_t *man, json_t *sum, tm_err *err) {
    oxjob *j = ctx;
    (void)man;
    (void)err;
    json_object_set_new(sum, "n_kept", json_integer(j->res->n - j->res->n_quantized));
    json_object_set_new(sum, "opset_strategy", json_string(tm_onnx_opset_strategy_name(j->res->strategy)));
    return TM_OK;
}

static const tm__qwriter onnx_writer = {
    .kind = TM__PIPE_FILE, .kind_name = "an ONNX output", .format = "onnx", .plan = onnx_plan,
    .run_task = onnx_run_task, .write = onnx_write, .results = onnx_results,
    .manifest_add = onnx_manifest, .summary = onnx_summary,
};

tm_status tm_onnx_quantize(tm_file *in, const char *out_path, const tm_onnx_quantize_params *p,
                           tm_onnx_quantize_result **out, tm_err *err) {
    *out = NULL;
    tm_err_clear(err);
    tm_onnx_quantize_params defp = tm_onnx_quantize_params_default();
    if (!p) p = &defp;
    const tm_qspec *ds = &p->spec;
    if (tm_file_format(in) != TM_FMT_ONNX)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "%s: ONNX output (-o ending in .onnx) needs an ONNX "
                           "input (this is %s); for it write -o DIR (compressed-tensors) or -o OUT.gguf",
                           tm_file_path(in, 0), tm_format_name(tm_file_format(in)));
    if (tm_onnx_dq_min_opset(ds->code_dtype, ds->gran.kind) < 0 || ds->code_dtype == TM_U4)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "ONNX output: type %s with granularity %s is not "
                           "offered (int8, uint8 or int4; tensor, channel or group:N)",
                           tm_dtype_get(ds->code_dtype) ? tm_dtype_get(ds->code_dtype)->name : "?",
                           tm_granularity_kind_name(ds->gran.kind));
    if (ds->gran.kind == TM_GRAN_GROUP && ds->gran.group_size < 2)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "ONNX output: group size must be at least 2");
    if (ds->scale_dtype != TM_F32)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "ONNX output: scales are float32 (DequantizeLinear "
                           "before opset 19 takes only float32 scales)");
    oxjob j;
    memset(&j, 0, sizeof j);
    j.in = in;
    j.p = p;
    j.min_elems = p->min_elems > 0 ? p->min_elems : 16;
    /* nothing is lost: OUT is a new path, or (with force) a previous tensormorph output; one
    ** thread: the weights are quantized one after the other into the one model */
    const tm__qpipe_opts o = TM__QPIPE_OPTS_OF(p, 1);
    tm_status s = tm__qpipe_run(&onnx_writer, &j, in, out_path, &o, err);
    tm_close(j.back);
    free(j.buf);
    for (int64_t i = 0; j.plan && i < j.nw; i++) {
        free(j.plan[i].codes);
        free(j.plan[i].scale);
        free(j.plan[i].zp);
    }
    free(j.plan);
    tm__ox_free(j.m);
    for (int64_t k = 0; k < j.n_re; k++) regfree(&j.re[k]);
    free(j.re);
    if (s) tm_onnx_quantize_result_free(j.res);
    *out = s ? NULL : j.res;
    return s;
}
