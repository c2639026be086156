/* cmd_calibrate.c: `tensormorph calibrate SAMPLES...`: run observers over calibration samples
** and show the range, scale, zero point, clipped tails, SQNR and probe values each one gives
** (docs/calibrate.md). The request parsing and JSON here are shared with /api/v1/calibrate. */
#include "calibrate.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

const cli_opt opts_calibrate[] = {
    CLI_OPT_OBSERVER("minmax (default) | ema_minmax[:C] | histogram | percentile[:P] | mse | entropy | all (side by side)"),
    CLI_OPT_CONVENTION("onnx (default: ONNX Runtime's scale/zero point, x/scale rounding) | torch (PyTorch observers, x*(1/scale))"),
    CLI_OPT_SYMMETRIC("symmetric codes (default)"),
    CLI_OPT_ASYMMETRIC,
    CLI_OPT_GRANULARITY("tensor | channel[:AXIS] (axis of one batch, default 0); default: channel:0 for a checkpoint weight (PATH:TENSOR, as quantize), tensor for .npy/.npz activation samples (as ONNX Runtime's calibrators)"),
    CLI_OPT_TYPE("int8 (default) | uint8 | int4 | uint4"),
    {"probe", 0, "X", 1, "a real value to follow (any finite number; beyond float32 it clips): code, dequantized value and error under each observer"},
    {"batches", 0, NULL, 0, "dim 0 of each SAMPLES indexes batches, fed to the observer one by one"},
    {"bins", 0, "N", 0, "histogram bins of histogram, percentile and entropy, 2..16777216 (default 2048); entropy costs bins^2 per unit (8192: 0.4 s, 131072: 80 s)"},
    {"quantized-bins", 0, "N", 0, "entropy: quantized bins of the KL search, 2..bins (default 128)"},
    {"reduce-range", 0, NULL, 0, "halve the code range (torch reduce_range: int8 [-64,63]; onnx: ONNX Runtime's)"},
    {"qrange", 0, "QMIN:QMAX", 0, "explicit code range (torch quant_min/quant_max), inside the type's"},
    CLI_OPT_END,
};

const char details_calibrate[] =
    "SAMPLES is an .npy file, FILE.npz:KEY, or PATH:TENSOR for a tensor of any checkpoint\n"
    "tensormorph opens (the whole argument is tried as a file first, so paths may hold ':').\n"
    "Several SAMPLES are several batches, observed in order (ONNX Runtime collect() calls).\n"
    "For each observer: the range it chose, the scale and zero point the convention gives,\n"
    "the rounding bound (scale/2), the clipped tails (fraction of samples beyond the\n"
    "representable range, mean and max excess in real units) and the SQNR of quantizing the\n"
    "samples with the same kernels as `tensormorph quantize`; each --probe X as\n"
    "real -> code -> dequantized -> error. Exit 2 for a bad option, an unknown tensor or npz\n"
    "key; 3 for samples that are not floating point, empty or not finite, an npz entry that is\n"
    "not a tensor or unreadable, batches with different channel counts; 130 on Ctrl-C.";

/* ---- request -------------------------------------------------------------------------------- */

static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int calibrate_parse(const calib_args *a, calib_req *r, char *msg, size_t n) {
    memset(r, 0, sizeof *r);
    tm_qspec *s = &r->p.spec;
    *s = tm_qspec_default();
    s->gran = (tm_qgran){.kind = TM_GRAN_TENSOR};
    r->gran_default = a->granularity == NULL;
    if (a->type) {
        static const struct { const char *n; tm_dtype d; } t[] = {
            {"int8", TM_I8}, {"uint8", TM_U8}, {"int4", TM_I4}, {"uint4", TM_U4}};
        size_t k = 0;
        while (k < 4 && strcasecmp(a->type, t[k].n)) k++;
        if (k == 4) { snprintf(msg, n, "type: unknown '%s' (int8 uint8 int4 uint4)", a->type); return -1; }
        s->code_dtype = t[k].d;
    }
    if (a->convention) {
        if (!strcmp(a->convention, "onnx")) s->convention = TM_CONV_ONNX;
        else if (!strcmp(a->convention, "torch")) s->convention = TM_CONV_TORCH;
        else { snprintf(msg, n, "convention must be onnx or torch, got '%s'", a->convention); return -1; }
    }
    if (a->symmetric >= 0) s->symmetric = a->symmetric;
    if (a->granularity) {
        const char *g = a->granularity;
        tm_qgran qg;
        if (tm_granularity_parse(g, &qg) || qg.kind > TM_GRAN_CHANNEL || qg.axis < -8 || qg.axis > 7) {
            snprintf(msg, n, "granularity: cannot parse '%s' (tensor | channel[:AXIS])", g);
            return -1;
        }
        s->gran = qg;
    }
    long bins = -1, qbins = -1;
    if (a->bins && parse_long(a->bins, 2, 1L << 24, &bins)) {
        snprintf(msg, n, "bins must be an integer in [2, 16777216], got '%s'", a->bins);
        return -1;
    }
    if (a->quantized_bins && parse_long(a->quantized_bins, 2, 1L << 24, &qbins)) {
        snprintf(msg, n, "quantized-bins must be an integer in [2, 16777216], got '%s'", a->quantized_bins);
        return -1;
    }
    const char *on = a->observer ? a->observer : "minmax";
    if (!strcmp(on, "all")) {
        static const tm_observer_kind all[] = {TM_OBS_MINMAX, TM_OBS_EMA_MINMAX, TM_OBS_HISTOGRAM,
                                               TM_OBS_PERCENTILE, TM_OBS_MSE, TM_OBS_ENTROPY};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) r->obs[r->n_obs++] = tm_observer_default(all[k]);
    } else if (tm_observer_from_name(on, &r->obs[0]) == TM_OK) {
        r->n_obs = 1;
    } else {
        snprintf(msg, n, "observer: unknown '%s' (minmax ema_minmax[:C] histogram percentile[:P] mse entropy all)", on);
        return -1;
    }
    for (int k = 0; k < r->n_obs; k++) {
        if (bins > 0) r->obs[k].n_bins = (int)bins;
        if (qbins > 0) r->obs[k].n_quantized_bins = (int)qbins;
        if (r->obs[k].kind == TM_OBS_ENTROPY && r->obs[k].n_quantized_bins > r->obs[k].n_bins) {
            snprintf(msg, n, "quantized-bins (%d) must not exceed bins (%d)", r->obs[k].n_quantized_bins, r->obs[k].n_bins);
            return -1;
        }
    }
    s->observer = r->obs[0];
    if (a->qrange && a->reduce_range) { snprintf(msg, n, "qrange and reduce-range exclude each other"); return -1; }
    const tm_dtype_traits *tt = tm_dtype_get(s->code_dtype);
    if (a->qrange) {
        const char *c = strchr(a->qrange, ':');
        char lo[32];
        long a0, a1;
        size_t l = c ? (size_t)(c - a->qrange) : 0;
        if (!c || l == 0 || l >= sizeof lo) a0 = 1, a1 = 0;
        else {
            memcpy(lo, a->qrange, l);
            lo[l] = '\0';
            if (parse_long(lo, -1000, 1000, &a0) || parse_long(c + 1, -1000, 1000, &a1)) a0 = 1, a1 = 0;
        }
        if (a0 >= a1 || a0 < tt->qmin || a1 > tt->qmax) {
            snprintf(msg, n, "qrange must be QMIN:QMAX with %" PRId64 " <= QMIN < QMAX <= %" PRId64 " for %s, got '%s'",
                     tt->qmin, tt->qmax, a->type ? a->type : "int8", a->qrange);
            return -1;
        }
        r->p.qmin = a0;
        r->p.qmax = a1;
        r->p.custom_range = 1;
    } else if (a->reduce_range) {
        if (s->convention == TM_CONV_TORCH) tm_qrange_torch_reduced(s->code_dtype, &r->p.qmin, &r->p.qmax);
        else tm_qrange_onnxruntime(s->code_dtype, s->symmetric, 1, &r->p.qmin, &r->p.qmax);
    }
    if (a->n_probes > CALIB_MAX_PROBES) { snprintf(msg, n, "at most %d probes", CALIB_MAX_PROBES); return -1; }
    for (int k = 0; k < a->n_probes; k++) {
        char *end;
        errno = 0;
        double v = strtod(a->probes[k], &end);
        /* any finite double (an underflow to 0 or a subnormal included); beyond float32's range
           a probe simply clips to an end code, as a real value that large would */
        if (end == a->probes[k] || *end || !isfinite(v) || (errno == ERANGE && fabs(v) > 1.0)) {
            snprintf(msg, n, "probe: '%s' is not a finite number (it must fit a double)", a->probes[k]);
            return -1;
        }
        r->probes[k] = v;
    }
    r->p.probes = r->probes;
    r->p.n_probes = a->n_probes;
    return 0;
}

int calibrate_tensor_ok(const tm_tensor *t, char *msg, size_t n) {
    const tm_dtype_traits *tr = tm_dtype_get(t->dtype);
    if (!t->quant && !(tr && tr->is_float)) {
        snprintf(msg, n, "tensor '%s' has dtype %s: calibration needs floating-point samples (or a quantized tensor's dequantized values)",
                 t->name, tr ? tr->name : "?");
        return -1;
    }
    if (t->n_elems == 0) {
        char sh[96];
        cli_shape_str(t->ndim, t->shape, sh, sizeof sh);
        snprintf(msg, n, "tensor '%s' is empty (shape %s): no samples", t->name, sh);
        return -1;
    }
    return 0;
}

tm_status calibrate_run(const calib_req *r, const tm_calib_batch *b, int nb, tm_calib_result **res,
                        tm_err *err) {
    for (int k = 0; k < r->n_obs; k++) res[k] = NULL;
    for (int k = 0; k < r->n_obs; k++) {
        tm_calib_params p = r->p;
        p.spec.observer = r->obs[k];
        tm_status s = tm_calibrate(&p, b, nb, &res[k], err);
        if (s) {
            char name[64];
            tm_observer_name(&r->obs[k], name, sizeof name);
            char m[TM_ERR_MSG_MAX];
            snprintf(m, sizeof m, "%s", err->msg);
            snprintf(err->msg, sizeof err->msg, "observer %.60s: %.440s", name, m);
            for (int j = 0; j < k; j++) { tm_calib_result_free(res[j]); res[j] = NULL; }
            return s;
        }
    }
    return TM_OK;
}

/* ---- JSON ----------------------------------------------------------------------------------- */

/* a per-unit number: the value itself for one unit, else an array over units */
typedef double (*unit_get)(const tm_calib_result *x, int64_t u);
static double g_rmin(const tm_calib_result *x, int64_t u) { return x->units[u].range_min; }
static double g_rmax(const tm_calib_result *x, int64_t u) { return x->units[u].range_max; }
static double g_scale(const tm_calib_result *x, int64_t u) { return x->units[u].scale; }
static double g_rb(const tm_calib_result *x, int64_t u) { return x->units[u].rounding_bound; }
static double g_cf(const tm_calib_result *x, int64_t u) { return x->units[u].st.clipped_fraction; }
static double g_cme(const tm_calib_result *x, int64_t u) { return x->units[u].st.clipped_mean_excess; }
static double g_cxe(const tm_calib_result *x, int64_t u) { return x->units[u].st.clipped_max_excess; }
static double g_sqnr(const tm_calib_result *x, int64_t u) { return x->units[u].st.sqnr_db; }

static json_t *per_unit(const tm_calib_result *x, unit_get g) {
    if (x->n_units == 1) return cli_json_num(g(x, 0));
    json_t *a = json_array();
    for (int64_t u = 0; u < x->n_units; u++) json_array_append_new(a, cli_json_num(g(x, u)));
    return a;
}

static void stats_json(json_t *o, const tm_calib_stats *s) {
    json_object_set_new(o, "clipped_fraction", cli_json_num(s->clipped_fraction));
    json_object_set_new(o, "clipped_mean_excess", cli_json_num(s->clipped_mean_excess));
    json_object_set_new(o, "clipped_max_excess", cli_json_num(s->clipped_max_excess));
    json_object_set_new(o, "sqnr_db", cli_json_num(s->sqnr_db));
}

static json_t *observer_json(const tm_calib_result *x) {
    json_t *o = json_object();
    char name[64];
    tm_observer_name(&x->observer, name, sizeof name);
    int one = x->n_units == 1;
    json_object_set_new(o, "observer", json_string(name));
    json_object_set_new(o, "range_min", per_unit(x, g_rmin));
    json_object_set_new(o, "range_max", per_unit(x, g_rmax));
    json_object_set_new(o, "scale", per_unit(x, g_scale));
    if (one) json_object_set_new(o, "zero_point", json_integer(x->units[0].zero_point));
    else {
        json_t *a = json_array();
        for (int64_t u = 0; u < x->n_units; u++) json_array_append_new(a, json_integer(x->units[u].zero_point));
        json_object_set_new(o, "zero_point", a);
    }
    json_object_set_new(o, "rounding_bound", per_unit(x, g_rb));
    json_object_set_new(o, "clipped_fraction", per_unit(x, g_cf));
    json_object_set_new(o, "clipped_mean_excess", per_unit(x, g_cme));
    json_object_set_new(o, "clipped_max_excess", per_unit(x, g_cxe));
    json_object_set_new(o, "sqnr_db", per_unit(x, g_sqnr));
    json_t *pa = json_array();
    for (int64_t k = 0; k < x->n_probes; k++) {
        json_t *p = json_object();
        json_object_set_new(p, "real", cli_json_num(x->probes[k].real));
        if (one) {
            const tm_calib_probe *q = &x->probes[k];
            json_object_set_new(p, "code", json_integer(q->code));
            json_object_set_new(p, "dequantized", cli_json_num(q->dequantized));
            json_object_set_new(p, "error", cli_json_num(q->error));
        } else {
            json_t *c = json_array(), *d = json_array(), *e = json_array();
            for (int64_t u = 0; u < x->n_units; u++) {
                const tm_calib_probe *q = &x->probes[u * x->n_probes + k];
                json_array_append_new(c, json_integer(q->code));
                json_array_append_new(d, cli_json_num(q->dequantized));
                json_array_append_new(e, cli_json_num(q->error));
            }
            json_object_set_new(p, "code", c);
            json_object_set_new(p, "dequantized", d);
            json_object_set_new(p, "error", e);
        }
        json_array_append_new(pa, p);
    }
    json_object_set_new(o, "probes", pa);
    if (!one) { /* per-channel: the same statistics over every sample */
        json_t *ov = json_object();
        stats_json(ov, &x->total);
        json_object_set_new(o, "overall", ov);
    }
    return o;
}

json_t *calibrate_json(const calib_req *r, tm_calib_result *const *res, const tm_calib_batch *b, int nb) {
    json_t *d = cli_json_doc("calibrate");
    int64_t n = 0;
    for (int k = 0; k < nb; k++) {
        int64_t m = 1;
        for (int i = 0; i < b[k].ndim; i++) m *= b[k].shape[i];
        n += m;
    }
    const tm_qspec *s = &r->p.spec;
    json_object_set_new(d, "n_batches", json_integer(nb));
    json_object_set_new(d, "n_samples", json_integer(n));
    json_object_set_new(d, "batch_shape", cli_json_shape(b[0].ndim, b[0].shape));
    json_object_set_new(d, "sample_min", cli_json_num(res[0]->sample_min));
    json_object_set_new(d, "sample_max", cli_json_num(res[0]->sample_max));
    static const char *types[] = {"int8", "uint8", "int4", "uint4"};
    const char *tn = s->code_dtype == TM_I8 ? types[0] : s->code_dtype == TM_U8 ? types[1]
                   : s->code_dtype == TM_I4 ? types[2] : types[3];
    json_object_set_new(d, "type", json_string(tn));
    json_object_set_new(d, "qmin", json_integer(res[0]->qmin));
    json_object_set_new(d, "qmax", json_integer(res[0]->qmax));
    json_object_set_new(d, "symmetric", json_boolean(s->symmetric));
    json_object_set_new(d, "convention", json_string(s->convention == TM_CONV_TORCH ? "torch" : "onnx"));
    json_object_set_new(d, "granularity", json_string(tm_granularity_kind_name(s->gran.kind)));
    if (s->gran.kind == TM_GRAN_CHANNEL) json_object_set_new(d, "axis", json_integer(s->gran.axis));
    if (r->gran_rule) json_object_set_new(d, "granularity_default", json_string(r->gran_rule));
    json_object_set_new(d, "n_params", json_integer(res[0]->n_units));
    json_t *obs = json_array();
    for (int k = 0; k < r->n_obs; k++) json_array_append_new(obs, observer_json(res[k]));
    json_object_set_new(d, "observers", obs);
    return d;
}

/* ---- samples --------------------------------------------------------------------------------- */

static int is_file_or_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode));
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* the key of an npz entry the reader skipped, from its warning "<path>: array '<key>' ...;
** skipped" (src/formats/npy.c); NULL when the warning is about something else */
static const char *skipped_key(const char *w, size_t *len) {
    size_t wl = strlen(w);
    if (wl < 9 || strcmp(w + wl - 9, "; skipped")) return NULL;
    const char *a = strstr(w, ": array '");
    if (!a) return NULL;
    a += 9;
    const char *e = strstr(a, "' ");
    if (!e) return NULL;
    *len = (size_t)(e - a);
    return a;
}

/* the warning of the skipped npz entry `key`, or NULL */
static const char *skipped_warning(const tm_file *f, const char *key) {
    for (int64_t i = 0; i < tm_file_n_warnings(f); i++) {
        size_t l;
        const char *k = skipped_key(tm_file_warning(f, i), &l);
        if (k && l == strlen(key) && !memcmp(k, key, l)) return tm_file_warning(f, i);
    }
    return NULL;
}

/* append ": 'a', 'b', ..." (the first 8 data tensors), then the skipped npz entries, to msg */
static void append_names(const tm_file *f, char *msg, size_t n) {
    int shown = 0, skipped = 0;
    size_t o = strlen(msg);
    for (int64_t i = 0; i < tm_file_n_tensors(f) && shown < 8 && o < n; i++) {
        const tm_tensor *u = tm_file_tensor(f, i);
        if (u->role == TM_ROLE_DATA) o += (size_t)snprintf(msg + o, n - o, "%s '%s'", shown++ ? "," : ":", u->name);
    }
    if (o < n && shown == 8) o += (size_t)snprintf(msg + o, n - o, ", ...");
    for (int64_t i = 0; i < tm_file_n_warnings(f) && o < n; i++) {
        size_t l;
        const char *k = skipped_key(tm_file_warning(f, i), &l);
        if (!k) continue;
        if (skipped++ == 4) { o += (size_t)snprintf(msg + o, n - o, ", ..."); break; }
        o += (size_t)snprintf(msg + o, n - o, "%s'%.*s'", skipped == 1 ? "; skipped (not a tensor or unreadable): " : ", ",
                              (int)(l > 200 ? 200 : l), k);
    }
}

/* the message of the skipped-entry warning without its path prefix and "; skipped" */
static void skipped_reason(const char *w, const char *path, char *msg, size_t n) {
    size_t pl = strlen(path), wl = strlen(w) - 9;
    const char *a = (!strncmp(w, path, pl) && !strncmp(w + pl, ": ", 2)) ? w + pl + 2 : w;
    snprintf(msg, n, "%s: %.*s", path, (int)(wl - (size_t)(a - w)), a);
}

const char *calibrate_default_granularity(calib_req *r, int all_weights) {
    if (!r->gran_default) return r->gran_rule = NULL;
    if (!all_weights) return r->gran_rule = "activation";
    r->p.spec.gran = (tm_qgran){.kind = TM_GRAN_CHANNEL, .axis = 0};
    return r->gran_rule = "weight";
}

int calibrate_load_samples(const char *arg, calib_samples *out, char *msg, size_t n) {
    memset(out, 0, sizeof *out);
    size_t len = strlen(arg);
    char *path = malloc(len + 1);
    if (!path) { snprintf(msg, n, "out of memory"); return EXIT_IO; }
    memcpy(path, arg, len + 1);
    const char *name = NULL;
    if (!is_file_or_dir(arg)) { /* the longest prefix before a ':' that is a file */
        for (size_t k = len; k-- > 0;) {
            if (arg[k] != ':') continue;
            path[k] = '\0';
            if (is_file_or_dir(path)) { name = arg + k + 1; break; }
            path[k] = ':';
        }
    }
    tm_file *f = NULL;
    tm_err err;
    tm_status s = tm_open(path, NULL, &f, &err);
    int rc = 0;
    int64_t ti = -1;
    const tm_tensor *t = NULL;
    if (s) {
        if (is_dir(path))  /* tm_open reads a directory as a (sharded) safetensors checkpoint */
            snprintf(msg, n, "SAMPLES %s is a directory, not a checkpoint, .npy or .npz (read as a checkpoint directory: %s)",
                     path, err.msg);
        else
            snprintf(msg, n, "%s", err.msg);
        rc = cli_exit_code(s);
        goto done;
    }
    int npz = tm_file_format(f) == TM_FMT_NPZ;
    out->weight = !npz && tm_file_format(f) != TM_FMT_NPY;
    if (name) {
        ti = tm_file_find(f, name);
        t = tm_file_tensor(f, ti);
        const char *w = (!t && npz) ? skipped_warning(f, name) : NULL;
        if (w) { /* an entry the reader skipped: a string array, an unreadable member */
            skipped_reason(w, path, msg, n);
            rc = EXIT_INPUT;
            goto done;
        }
        if (!t) {
            snprintf(msg, n, "%s: no %s named '%s'; it holds", path, npz ? "array (npz key)" : "tensor", name);
            append_names(f, msg, n);
            rc = EXIT_USAGE;
            goto done;
        }
    } else {
        int64_t nd = 0;
        for (int64_t i = 0; i < tm_file_n_tensors(f); i++)
            if (tm_file_tensor(f, i)->role == TM_ROLE_DATA) { nd++; if (ti < 0) ti = i; }
        if (nd == 0) {
            snprintf(msg, n, "%s holds no %s", path, npz ? "arrays" : "tensors");
            size_t l = strlen(msg);
            if (l < n) {
                char tail[600] = "";
                append_names(f, tail, sizeof tail);
                if (*tail) snprintf(msg + l, n - l, "%s", tail + 1); /* "; skipped ..." */
            }
            rc = EXIT_INPUT;
            goto done;
        }
        if (nd != 1) {
            snprintf(msg, n, "%s holds %" PRId64 " %s: name one as %s:%s; they are", path, nd, npz ? "arrays" : "tensors", path,
                     npz ? "KEY" : "TENSOR");
            append_names(f, msg, n);
            rc = EXIT_USAGE;
            goto done;
        }
        t = tm_file_tensor(f, ti);
    }
    char why[512];
    if (calibrate_tensor_ok(t, why, sizeof why)) {
        snprintf(msg, n, "%s: %s", path, why);
        rc = EXIT_INPUT;
        goto done;
    }
    out->x = malloc((size_t)t->n_elems * sizeof(float));
    if (!out->x) {
        snprintf(msg, n, "%s: tensor '%s': out of memory for %" PRId64 " samples", path, t->name, t->n_elems);
        rc = EXIT_IO;
        goto done;
    }
    if ((s = tm_tensor_read_f32(f, ti, 0, t->n_elems, out->x, &err)) != TM_OK) {
        snprintf(msg, n, "%s", err.msg);
        rc = cli_exit_code(s);
        goto done;
    }
    out->ndim = t->ndim;
    memcpy(out->shape, t->shape, sizeof out->shape);
    out->n = t->n_elems;
    for (int64_t i = 0; i < out->n; i++) {
        if (isfinite(out->x[i])) continue;
        char idx[160] = "";
        int64_t rem = i, co[TM_MAX_DIMS];
        for (int d = t->ndim - 1; d >= 0; d--) {
            co[d] = rem % t->shape[d]; /* n > 0: every dim >= 1 */
            rem /= t->shape[d];
        }
        if (t->ndim > 0) cli_shape_str(t->ndim, co, idx, sizeof idx);
        snprintf(msg, n, "%s: tensor '%s': %s at flat index %" PRId64 "%s%s: calibration needs finite samples",
                 path, t->name, isnan(out->x[i]) ? "NaN" : out->x[i] > 0 ? "+inf" : "-inf", i, *idx ? " " : "", idx);
        rc = EXIT_INPUT;
        goto done;
    }
done:
    if (rc) {
        free(out->x);
        memset(out, 0, sizeof *out);
    }
    tm_close(f);
    free(path);
    return rc;
}

int calibrate_check_batches(const calib_req *r, const tm_calib_batch *b, int nb, const char *(*name)(void *ud, int k),
                            void *ud, char *msg, size_t n) {
    const tm_qgran *g = &r->p.spec.gran;
    if (g->kind != TM_GRAN_CHANNEL) return 0;
    int64_t want = -1;
    int first = -1;
    for (int k = 0; k < nb; k++) {
        int nd = b[k].ndim, ax = g->axis < 0 ? g->axis + nd : g->axis;
        char sh[96];
        cli_shape_str(nd, b[k].shape, sh, sizeof sh);
        if (ax < 0 || ax >= nd) {
            snprintf(msg, n, "%s: samples of shape %s have no axis %d: --granularity channel:%d needs %s", name(ud, k), sh,
                     g->axis, g->axis, nd == 0 ? "samples with at least one dimension (these are a scalar; use tensor)"
                                               : "an axis inside the samples' dimensions");
            return EXIT_USAGE;
        }
        if (want < 0) { want = b[k].shape[ax]; first = k; continue; }
        if (b[k].shape[ax] != want) {
            snprintf(msg, n, "%s: samples of shape %s have %" PRId64 " channels on axis %d, but %s has %" PRId64
                     ": every batch needs the same number of channels", name(ud, k), sh, b[k].shape[ax], g->axis,
                     name(ud, first), want);
            return EXIT_INPUT;
        }
    }
    return 0;
}

/* ---- text ----------------------------------------------------------------------------------- */

static void print_text(const calib_req *r, tm_calib_result *const *res, const tm_calib_batch *b, int nb,
                       int64_t n, char *const *names, int n_names) {
    const tm_qspec *s = &r->p.spec;
    printf("samples:");
    for (int k = 0; k < n_names; k++) printf(" %s", names[k]);
    char sh[96];
    cli_shape_str(b[0].ndim, b[0].shape, sh, sizeof sh);
    printf("\n  %" PRId64 " values in %d batch(es) of shape %s%s, min %.9g, max %.9g\n", n, nb, sh,
           nb > 1 ? " (first)" : "", (double)res[0]->sample_min, (double)res[0]->sample_max);
    char gran[128], gn[32];
    tm_granularity_name(&s->gran, gn, sizeof gn);
    if (s->gran.kind == TM_GRAN_CHANNEL) snprintf(gran, sizeof gran, "%s (%" PRId64 " channels)", gn, res[0]->n_units);
    else snprintf(gran, sizeof gran, "%s", gn);
    if (r->gran_rule) {
        size_t l = strlen(gran);
        snprintf(gran + l, sizeof gran - l, "%s", !strcmp(r->gran_rule, "weight") ? ", the default for a checkpoint weight as in quantize"
                                                                           : ", the default for activation samples");
    }
    printf("  %s codes [%" PRId64 ", %" PRId64 "], %s, %s convention, granularity %s\n\n",
           tm_dtype_get(s->code_dtype)->name, res[0]->qmin, res[0]->qmax, s->symmetric ? "symmetric" : "asymmetric",
           s->convention == TM_CONV_TORCH ? "torch" : "onnx", gran);
    int one = res[0]->n_units == 1;
    if (one) {
        printf("%-18s %13s %13s %13s %5s %12s %9s %12s %12s %8s\n", "observer", "range_min", "range_max", "scale", "zp",
               "round_bound", "clipped", "mean_excess", "max_excess", "SQNR dB");
        for (int k = 0; k < r->n_obs; k++) {
            const tm_calib_result *x = res[k];
            const tm_calib_unit *u = &x->units[0];
            char name[64];
            tm_observer_name(&x->observer, name, sizeof name);
            printf("%-18s %13.6g %13.6g %13.6g %5d %12.6g %8.4f%% %12.6g %12.6g %8.2f\n", name, u->range_min, u->range_max,
                   (double)u->scale, u->zero_point, u->rounding_bound, 100 * u->st.clipped_fraction,
                   u->st.clipped_mean_excess, u->st.clipped_max_excess, u->st.sqnr_db);
        }
        if (r->p.n_probes) {
            printf("\nprobes: real -> code -> dequantized (error)\n");
            for (int k = 0; k < r->n_obs; k++) {
                char name[64];
                tm_observer_name(&res[k]->observer, name, sizeof name);
                printf("%-18s", name);
                for (int64_t j = 0; j < res[k]->n_probes; j++) {
                    const tm_calib_probe *p = &res[k]->probes[j];
                    printf("  %.6g -> %" PRId64 " -> %.6g (%+.3g)", p->real, p->code, p->dequantized, p->error);
                }
                printf("\n");
            }
        }
        return;
    }
    /* per channel */
    if (r->n_obs == 1) {
        const tm_calib_result *x = res[0];
        char name[64];
        tm_observer_name(&x->observer, name, sizeof name);
        printf("observer %s\n%8s %13s %13s %13s %5s %9s %12s %12s %8s\n", name, "channel", "range_min", "range_max",
               "scale", "zp", "clipped", "mean_excess", "max_excess", "SQNR dB");
        for (int64_t c = 0; c < x->n_units; c++) {
            const tm_calib_unit *u = &x->units[c];
            printf("%8" PRId64 " %13.6g %13.6g %13.6g %5d %8.4f%% %12.6g %12.6g %8.2f\n", c, u->range_min, u->range_max,
                   (double)u->scale, u->zero_point, 100 * u->st.clipped_fraction, u->st.clipped_mean_excess,
                   u->st.clipped_max_excess, u->st.sqnr_db);
        }
        printf("%8s %13s %13s %13s %5s %8.4f%% %12.6g %12.6g %8.2f\n", "all", "", "", "", "", 100 * x->total.clipped_fraction,
               x->total.clipped_mean_excess, x->total.clipped_max_excess, x->total.sqnr_db);
    } else {
        printf("%-18s %27s %9s %12s %12s %8s\n", "observer", "scale (min .. max)", "clipped", "mean_excess", "max_excess", "SQNR dB");
        for (int k = 0; k < r->n_obs; k++) {
            const tm_calib_result *x = res[k];
            float lo = x->units[0].scale, hi = lo;
            for (int64_t c = 1; c < x->n_units; c++) {
                if (x->units[c].scale < lo) lo = x->units[c].scale;
                if (x->units[c].scale > hi) hi = x->units[c].scale;
            }
            char name[64], sc[64];
            tm_observer_name(&x->observer, name, sizeof name);
            snprintf(sc, sizeof sc, "%.5g .. %.5g", (double)lo, (double)hi);
            printf("%-18s %27s %8.4f%% %12.6g %12.6g %8.2f\n", name, sc, 100 * x->total.clipped_fraction,
                   x->total.clipped_mean_excess, x->total.clipped_max_excess, x->total.sqnr_db);
        }
    }
    if (r->p.n_probes) printf("\nprobes per channel: see --json\n");
}

/* ---- the command ----------------------------------------------------------------------------- */

/* batch k named by its SAMPLES argument ("ARG", or "ARG batch i" under --batches) */
typedef struct batch_names {
    char *const         *pos;
    const calib_samples *src;
    int                  ns, split;
    char                 buf[1200];
} batch_names;

static const char *batch_name(void *ud, int k) {
    batch_names *bn = ud;
    for (int j = 0; j < bn->ns; j++) {
        int64_t c = bn->split ? bn->src[j].shape[0] : 1;
        if (k < c) {
            if (!bn->split) return bn->pos[j];
            snprintf(bn->buf, sizeof bn->buf, "%.1100s batch %d", bn->pos[j], k);
            return bn->buf;
        }
        k -= (int)c;
    }
    return "?";
}

int cmd_calibrate(const cli_cmd *cmd, cli_args *a) {
    if (cli_has(a, "symmetric") && cli_has(a, "asymmetric"))
        return cli_usage_error(cmd, "--symmetric and --asymmetric exclude each other");
    calib_args ca = {
        .observer = cli_get(a, "observer"), .convention = cli_get(a, "convention"), .type = cli_get(a, "type"),
        .granularity = cli_get(a, "granularity"), .symmetric = cli_has(a, "asymmetric") ? 0 : cli_has(a, "symmetric") ? 1 : -1,
        .bins = cli_get(a, "bins"), .quantized_bins = cli_get(a, "quantized-bins"), .qrange = cli_get(a, "qrange"),
        .reduce_range = cli_has(a, "reduce-range"), .n_probes = cli_n(a, "probe"),
    };
    const char *probes[CALIB_MAX_PROBES];
    if (ca.n_probes > CALIB_MAX_PROBES) return cli_usage_error(cmd, "at most %d --probe values", CALIB_MAX_PROBES);
    for (int k = 0; k < ca.n_probes; k++) probes[k] = cli_get_i(a, "probe", k);
    ca.probes = probes;
    calib_req req;
    char msg[300];
    if (calibrate_parse(&ca, &req, msg, sizeof msg)) return cli_usage_error(cmd, "--%s", msg);
    int split = cli_has(a, "batches");
    int ns = a->n_pos, rc = 0;
    calib_samples *src = calloc((size_t)ns, sizeof *src);
    tm_calib_batch *b = NULL;
    tm_calib_result *res[CALIB_MAX_OBS] = {0};
    int nb = 0;
    if (!src) { fprintf(stderr, "tensormorph: out of memory\n"); return EXIT_IO; }
    int64_t total = 0;
    g_cli_exit_on_interrupt = 1; /* reading and calibrating write nothing: a signal may exit at once */
    for (int k = 0; k < ns && !rc; k++) {
        char lmsg[1024];
        if ((rc = calibrate_load_samples(a->pos[k], &src[k], lmsg, sizeof lmsg)) != 0) {
            cli_progress_end();
            fprintf(stderr, "tensormorph: %s\n", lmsg);
        }
        if (!rc && split && src[k].ndim < 1) {
            fprintf(stderr, "tensormorph: %s: --batches needs samples with at least one dimension\n", a->pos[k]);
            rc = EXIT_USAGE;
        }
        if (!rc && split && src[k].shape[0] > (1 << 20)) {
            fprintf(stderr, "tensormorph: %s: more than 2^20 batches\n", a->pos[k]);
            rc = EXIT_INPUT;
        }
        if (!rc) {
            nb += split ? (int)src[k].shape[0] : 1;
            total += src[k].n;
        }
    }
    if (!rc && nb == 0) { fprintf(stderr, "tensormorph: %s: no batches (dim 0 is 0)\n", a->pos[0]); rc = EXIT_INPUT; }
    if (!rc) {
        int all_weights = 1;
        for (int k = 0; k < ns; k++) all_weights &= src[k].weight;
        calibrate_default_granularity(&req, all_weights);
    }
    if (!rc && !(b = calloc((size_t)nb, sizeof *b))) { fprintf(stderr, "tensormorph: out of memory\n"); rc = EXIT_IO; }
    for (int k = 0, j = 0; !rc && k < ns; k++) {
        if (!split) {
            b[j].ndim = src[k].ndim;
            memcpy(b[j].shape, src[k].shape, sizeof b[j].shape);
            b[j++].x = src[k].x;
            continue;
        }
        int64_t per = src[k].shape[0] ? src[k].n / src[k].shape[0] : 0;
        for (int64_t i = 0; i < src[k].shape[0]; i++, j++) {
            b[j].ndim = src[k].ndim - 1;
            memcpy(b[j].shape, src[k].shape + 1, (size_t)(TM_MAX_DIMS - 1) * sizeof(int64_t));
            b[j].x = src[k].x + i * per;
        }
    }
    if (!rc) {
        batch_names bn = {a->pos, src, ns, split, ""};
        char cmsg[1400];
        if ((rc = calibrate_check_batches(&req, b, nb, batch_name, &bn, cmsg, sizeof cmsg)) != 0)
            fprintf(stderr, "tensormorph: %s\n", cmsg);
    }
    if (!rc) {
        tm_err err;
        req.p.cancel = &g_cli_interrupted; /* Ctrl-C: TM_E_CANCELLED, exit 130, nothing printed */
        tm_status s = calibrate_run(&req, b, nb, res, &err);
        if (s) rc = cli_fail(s, &err);
    }
    g_cli_exit_on_interrupt = 0; /* from here on output is written: finish it */
    if (!rc && g_cli_interrupted) rc = EXIT_INTERRUPT; /* the signal came after the last check */
    if (!rc) {
        if (g_cli.json) {
            json_t *d = calibrate_json(&req, res, b, nb);
            json_t *sa = json_array();
            for (int k = 0; k < ns; k++) json_array_append_new(sa, json_string(a->pos[k]));
            json_object_set_new(d, "samples", sa);
            cli_json_print(d);
        } else if (!g_cli.quiet) {
            print_text(&req, res, b, nb, total, a->pos, ns);
        }
    }
    for (int k = 0; k < CALIB_MAX_OBS; k++) tm_calib_result_free(res[k]);
    for (int k = 0; k < ns; k++) free(src[k].x);
    free(src);
    free(b);
    return rc;
}
