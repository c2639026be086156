/*
** gptq.c: recognise the GPTQ and AWQ safetensors layouts in a listed checkpoint and describe
** each quantized Linear with one tm_qtensor (docs/formats.md "GPTQ and AWQ").
**
** For a Linear with weight [N = out_features, K = in_features] under prefix P:
**   GPTQ (AutoGPTQ, GPTQModel, transformers quant_method "gptq"; per = 32/bits)
**     P.qweight I32 [K/per, N]   element (k, n): field k % per of word (k/per, n), LSB first
**     P.qzeros  I32 [G, N/per]   zero point of (group g, column n): field n % per of word
**                                (g, n/per); checkpoint_format "gptq" (v1, every older exporter)
**                                stores z - 1, "gptq_v2" (GPTQModel) stores z
**     P.scales  F16 [G, N]       G = ceil(K / group_size), or 1 for group_size -1 (per channel)
**     P.g_idx   I32 [K]          group of each input column (act-order / desc_act permutes it);
**                                absent: k / group_size
**   AWQ (AutoAWQ "GEMM", quant_method "awq"; 4-bit only)
**     P.qweight I32 [K, N/8]     element (k, n): word (k, n/8), field AWQ_ORDER^-1[n % 8]: the
**                                8 nibbles of a word, low to high, hold columns 0,2,4,6,1,3,5,7
**     P.qzeros  I32 [G, N/8]     the same interleave, zero points stored as they are
**     P.scales  F16 [G, N]
**   dequantize: w[n, k] = scales[g, n] * (q[k, n] - z[g, n]), g = g_idx[k] (or k / group_size).
**
** Each becomes one logical tensor named "P.weight" with phys_name "P.qweight" (tm_file_find
** answers to both), dtype U4/U8, logical shape [N, K]: the name and layout of torch's Linear
** weight, which is what the float source holds, so qdiff, scalar --ref, heatmap --ref and the
** web UI pair it with the source by name, as for compressed-tensors' weight_packed. Where the
** file also has a "P.weight" the logical name stays "P.qweight" (qdiff still pairs it).
** Granularity group along axis 1 or channel along axis 0; read in place through
** tm_qtensor.transposed / .field_order (no copy, nothing materialised).
** scales/qzeros/g_idx stay listed under their own names with roles SCALE / ZERO_POINT / AUX.
**
** config.json's quantization_config (or, where it has none, AutoGPTQ's quantize_config.json /
** AutoAWQ's quant_config.json beside it), when it names gptq or awq, decides bits, group_size
** and the zero-point convention; without it the layout is found from the tensor shapes (GPTQ
** zero points then read as v1, with a warning). Where tensors contradict each other or the
** config the file is refused (TM_E_CORRUPT) naming tensor and reason; 3-bit GPTQ (fields that
** straddle words), other GPTQ checkpoint formats and other AWQ versions are TM_E_UNSUPPORTED.
** Opening reads headers, and the qzeros of 4-bit GPTQ read as v1 (not declared asymmetric):
** where every stored zero is 8 (gptq_v2's symmetric zero; a v1 writer stores 7) a warning says
** the file may be gptq_v2 (issue 12 item 2).
*/
#include "file.h"

#include <jansson.h>
#include <stdio.h>
#include <strings.h>
#include <sys/stat.h>

#define LAYOUT_GPTQ_V1 "gptq"
#define LAYOUT_GPTQ_V2 "gptq_v2"
#define LAYOUT_AWQ     "awq/gemm"

/* Field of the j-th column of a group of 8 in an AWQ word (inverse of the pack order
** 0,2,4,6,1,3,5,7). */
static const uint8_t awq_field_of[8] = {0, 4, 1, 5, 2, 6, 3, 7};

typedef enum gq_method { GQ_NONE = 0, GQ_GPTQ, GQ_AWQ } gq_method;

/* quantization_config as far as it concerns these layouts. Unknown: -1 / 0. */
typedef struct gq_config {
    gq_method method;       /* from quant_method; GQ_NONE: no config for these layouts  */
    int       other;        /* 1: the config names another quant_method                */
    int       bits;         /* -1 unknown                                               */
    int64_t   group_size;   /* 0 unknown, -1 per channel                                */
    int       v2;           /* GPTQ checkpoint_format gptq_v2                          */
    int       desc_act;     /* -1 unknown                                               */
    int       sym;          /* -1 unknown                                               */
} gq_config;

static int64_t jint(json_t *o, const char *key, int64_t dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

static int jbool(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : -1;
}

enum { SIDECAR_MAX = 1 << 20 };

/* The JSON object in file `name` beside the checkpoint's first file, or NULL: absent, or
** unusable (then a warning says why; *st carries a failure to record it). */
static json_t *sidecar_load(tm_file *f, const char *name, tm_status *st, tm_err *err) {
    const char *p0 = f->maps[0].path, *slash = strrchr(p0, '/');
    char *path = slash ? tm__aprintf("%.*s/%s", (int)(slash - p0), p0, name) : tm__strdup(name);
    if (!path) {
        *st = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        return NULL;
    }
    json_t *j = NULL;
    struct stat sb;
    if (stat(path, &sb) == 0) {
        json_error_t je;
        if (!S_ISREG(sb.st_mode) || sb.st_size > SIDECAR_MAX)
            *st = tm__file_add_warning(f, err, "%s: not a regular file of at most %d bytes; ignored",
                                       path, SIDECAR_MAX);
        else if (!(j = json_load_file(path, JSON_REJECT_DUPLICATES, &je)) || !json_is_object(j))
            *st = tm__file_add_warning(f, err, "%s: not a JSON object (%s); ignored", path,
                                       j ? "another JSON value" : je.text);
        if (j && !json_is_object(j)) {
            json_decref(j);
            j = NULL;
        }
    }
    free(path);
    return j;
}

/* config.json's quantization_config (also under text_config); where config.json has none, the
** sidecar older exporters write beside it: AutoGPTQ's quantize_config.json, AutoAWQ's
** quant_config.json (method implied when they name none). No config.json: nothing is read. */
static tm_status config_load(tm_file *f, gq_config *c, tm_err *err) {
    memset(c, 0, sizeof *c);
    c->bits = -1;
    c->desc_act = -1;
    c->sym = -1;
    if (!f->config_json) return TM_OK;
    json_t *root = json_loads(f->config_json, 0, NULL);
    if (!root) return TM_OK;
    json_t *qc = json_object_get(root, "quantization_config"), *side = NULL;
    if (!json_is_object(qc))
        qc = json_object_get(json_object_get(root, "text_config"), "quantization_config");
    const char *src = "config.json: quantization_config";
    gq_method implied = GQ_NONE;
    tm_status s = TM_OK;
    if (!json_is_object(qc)) {
        if ((side = sidecar_load(f, "quantize_config.json", &s, err)) != NULL) {
            implied = GQ_GPTQ;
            src = "quantize_config.json";
        } else if (s == TM_OK && (side = sidecar_load(f, "quant_config.json", &s, err)) != NULL) {
            implied = GQ_AWQ;
            src = "quant_config.json";
        }
        qc = side;
    }
    const char *m = json_string_value(json_object_get(qc, "quant_method"));
    gq_method method = !m ? implied
                       : strcasecmp(m, "gptq") == 0 ? GQ_GPTQ
                       : strcasecmp(m, "awq") == 0 ? GQ_AWQ : GQ_NONE;
    if (s != TM_OK || !json_is_object(qc) || (!m && implied == GQ_NONE)) {
        /* no config for any method */
    } else if (method != GQ_NONE) {
        c->method = method;
        c->bits = (int)jint(qc, "bits", jint(qc, "w_bit", -1));
        c->group_size = jint(qc, "group_size", jint(qc, "q_group_size", 0));
        c->desc_act = jbool(qc, "desc_act");
        c->sym = jbool(qc, "sym");
        const char *fmt = json_string_value(json_object_get(qc, method == GQ_GPTQ ? "checkpoint_format" : "version"));
        if (!fmt && method == GQ_GPTQ) fmt = json_string_value(json_object_get(qc, "format"));
        if (method == GQ_GPTQ && fmt && strcasecmp(fmt, "gptq_v2") == 0) c->v2 = 1;
        else if (method == GQ_GPTQ && fmt && strcasecmp(fmt, "gptq") != 0)
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1,
                            "%s.checkpoint_format \"%s\" is not supported (GPTQ reads \"gptq\" and "
                            "\"gptq_v2\")", src, fmt);
        else if (method == GQ_AWQ && fmt && strcasecmp(fmt, "gemm") != 0)
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1,
                            "%s.version \"%s\" is not supported (AWQ reads the GEMM packing only)",
                            src, fmt);
    } else {
        c->other = 1;
    }
    json_decref(side);
    json_decref(root);
    return s;
}

/* ---------------------------------------------------------------------------------------- */

static void set_role(tm_file *f, int64_t i, tm_tensor_role role, int64_t owner) {
    tm_tensor *t = tm__file_tensor_mut(f, i);
    if (t) {
        t->role = role;
        t->owner = owner;
    }
}

/* "file: NAME is DTYPE SHAPE; REASON" as TM_E_CORRUPT at the tensor's data offset. */
static tm_status bad(const tm_file *f, const tm_tensor *t, tm_err *err, const char *reason) {
    char sh[160];
    tm__st_fmt_shape(sh, sizeof sh, t->ndim, t->shape);
    return tm__err_set(err, TM_E_CORRUPT, (int64_t)t->offset, "%s: %s is %s %s; %s", tm__file_path_of(f, t),
                       t->name, tm_dtype_get(t->dtype)->name, sh, reason);
}

static int bits_ok(int b) { return b == 2 || b == 4 || b == 8; }

/* GPTQ v1 4-bit: 1 when every stored zero point field of qzeros (I32 [G, ceil(N/8)], N
** columns) is 8, the symmetric zero of gptq_v2; v1 stores z - 1, so a v1 writer stores 7.
** Reads the qzeros data (small: N*G/2 bytes). */
static tm_status zeros_all_8(const tm_file *f, int64_t zi, int64_t G, int64_t N, int *all8,
                             tm_err *err) {
    const tm_tensor *qz = &f->tensors[zi];
    const void *p;
    *all8 = 0;
    int64_t wpr = qz->shape[1];
    tm_status s = tm_tensor_data(f, zi, 0, qz->n_bytes, &p, err); /* [G, wpr] I32, checked */
    if (s) return s;
    for (int64_t g = 0; g < G; g++)
        for (int64_t n = 0; n < N; n++) {
            uint32_t w = tm__ld32((const uint8_t *)p + (uint64_t)(g * wpr + n / 8) * 4);
            if (((w >> (4 * (n % 8))) & 15u) != 8u) return TM_OK;
        }
    *all8 = 1;
    return TM_OK;
}

/* One module P with P.qweight at index wi. *warned: the "no config" warning was given.
** *v2_like: set to the logical index when GPTQ v1 4-bit zero points all read 8 (-1 untouched). */
static tm_status recognize_one(tm_file *f, const gq_config *cfg, int64_t wi, const char *P,
                               int *warned, int64_t *v2_like, tm_err *err) {
    int64_t si = tm__file_find_param(f, P, "scales"), zi = tm__file_find_param(f, P, "qzeros");
    int64_t gi = tm__file_find_param(f, P, "g_idx");
    if (si == -2 || zi == -2 || gi == -2) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    const tm_tensor *qw = &f->tensors[wi];
    if (si < 0 || zi < 0)
        return tm__file_add_warning(f, err, "%s has no %s.%s; left as a plain tensor", qw->name,
                                    P[0] ? P : "(root)", si < 0 ? "scales" : "qzeros");
    const tm_tensor *sc = &f->tensors[si], *qz = &f->tensors[zi];
    const tm_tensor *gt = gi >= 0 ? &f->tensors[gi] : NULL;
    if (sc->role != TM_ROLE_DATA || qz->role != TM_ROLE_DATA || sc->quant || qz->quant)
        return tm__file_add_warning(f, err, "%s: %s or %s already belongs to another tensor; left "
                                    "as a plain tensor", qw->name, sc->name, qz->name);
    if (qw->dtype != TM_I32 || qw->ndim != 2)
        return bad(f, qw, err, "a GPTQ/AWQ qweight is I32 [rows, columns] of packed codes");
    if (!(sc->dtype == TM_F16 || sc->dtype == TM_BF16 || sc->dtype == TM_F32) || sc->ndim != 2 ||
        sc->shape[0] < 1 || sc->shape[1] < 1)
        return bad(f, sc, err, "scales are F16 (or BF16, F32) [groups, out_features]");
    if (qz->dtype != TM_I32 || qz->ndim != 2)
        return bad(f, qz, err, "qzeros are I32 [groups, packed out_features]");
    int64_t G = sc->shape[0], N = sc->shape[1];
    if (N > INT64_MAX / 64 || qw->shape[0] > INT64_MAX / 64 || qw->shape[1] > INT64_MAX / 64)
        return bad(f, qw, err, "its dimensions are too large");
    /* Which layout: the config says; else GPTQ keeps N columns, AWQ packs them. */
    gq_method m = cfg->method;
    if (m == GQ_NONE) {
        if (qw->shape[1] == N) m = GQ_GPTQ;
        else if (qw->shape[1] * 8 == N) m = GQ_AWQ;
        else {
            char e[200];
            snprintf(e, sizeof e, "with %s [%lld, %lld] it fits neither GPTQ ([K*bits/32, %lld]) nor "
                     "AWQ ([K, %lld])", sc->name, (long long)G, (long long)N, (long long)N,
                     (long long)(N / 8));
            return bad(f, qw, err, e);
        }
    }
    char e[320];
    int bits;
    int64_t K;
    if (m == GQ_GPTQ) {
        if (qw->shape[1] != N) {
            snprintf(e, sizeof e, "GPTQ packs codes along in_features, so it must have %lld columns "
                     "like %s", (long long)N, sc->name);
            return bad(f, qw, err, e);
        }
        bits = cfg->bits;
        if (bits < 0) { /* from qzeros (and g_idx when present) */
            for (int b = 8; b >= 2 && bits < 0; b /= 2)
                if (qz->shape[1] == tm__ceil_div(N * b, 32) &&
                    (!gt || gt->ndim != 1 || gt->shape[0] == qw->shape[0] * (32 / b)))
                    bits = b;
            if (bits < 0 && qz->shape[1] == tm__ceil_div(N * 3, 32)) bits = 3;
        }
        if (bits == 3)
            return tm__err_set(err, TM_E_UNSUPPORTED, (int64_t)qw->offset,
                               "%s: %s holds 3-bit GPTQ codes, whose fields straddle 32-bit "
                               "words; not supported (2, 4 and 8 bits are)", tm__file_path_of(f, qw), qw->name);
        if (!bits_ok(bits)) {
            if (cfg->bits > 0)
                return tm__err_set(err, TM_E_UNSUPPORTED, (int64_t)qw->offset,
                                   "%s: %s: config.json says %d-bit GPTQ codes; 2, 4 and 8 bits "
                                   "are supported", tm__file_path_of(f, qw), qw->name, bits);
            snprintf(e, sizeof e, "with %s [%lld, %lld] no code width 2, 4 or 8 gives its %lld "
                     "packed columns", sc->name, (long long)G, (long long)N, (long long)qz->shape[1]);
            return bad(f, qz, err, e);
        }
        K = qw->shape[0] * (32 / bits);
    } else {
        bits = cfg->bits < 0 ? 4 : cfg->bits;
        if (bits != 4)
            return tm__err_set(err, TM_E_UNSUPPORTED, (int64_t)qw->offset,
                               "%s: %s: config.json says %d-bit AWQ codes; the GEMM layout is "
                               "read for 4 bits only", tm__file_path_of(f, qw), qw->name, bits);
        if (qw->shape[1] * 8 != N) {
            snprintf(e, sizeof e, "AWQ packs 8 codes per word along out_features, so it must have "
                     "%lld / 8 columns (%s is [%lld, %lld])", (long long)N, sc->name, (long long)G,
                     (long long)N);
            return bad(f, qw, err, e);
        }
        if (gt) {
            snprintf(e, sizeof e, "AWQ has no g_idx, but %s has one", qw->name);
            return bad(f, gt, err, e);
        }
        K = qw->shape[0];
    }
    int per = 32 / bits;
    int64_t numel;
    if (K < 1 || N < 1) return bad(f, qw, err, "an empty quantized weight");
    if (!tm__mul_i64_ok(N, K, &numel)) return bad(f, qw, err, "out_features x in_features overflows");
    if (qz->shape[0] != G || qz->shape[1] != tm__ceil_div(N, per)) {
        snprintf(e, sizeof e, "with %s [%lld, %lld] and %d-bit codes it must be I32 [%lld, %lld]",
                 sc->name, (long long)G, (long long)N, bits, (long long)G, (long long)tm__ceil_div(N, per));
        return bad(f, qz, err, e);
    }
    if (gt && (gt->dtype != TM_I32 || gt->ndim != 1 || gt->shape[0] != K)) {
        snprintf(e, sizeof e, "a g_idx is I32 [%lld] (the in_features %s holds)", (long long)K,
                 qw->name);
        return bad(f, gt, err, e);
    }
    /* Granularity: group_size from the config, else K / G. */
    tm_qgran g;
    memset(&g, 0, sizeof g);
    int64_t gs = cfg->group_size;
    if (gs == 0) gs = G == 1 ? -1 : tm__ceil_div(K, G);
    if (gs == -1) {
        if (G != 1) {
            snprintf(e, sizeof e, "per-channel scales (group_size %lld, in_features %lld) are "
                     "[1, %lld]", (long long)gs, (long long)K, (long long)N);
            return bad(f, sc, err, e);
        }
        g.kind = TM_GRAN_CHANNEL;
        g.axis = 0;
    } else if (gs < 1 || tm__ceil_div(K, gs) != G) {
        snprintf(e, sizeof e, "group_size %lld over in_features %lld gives %lld groups, not %lld",
                 (long long)gs, (long long)K, gs > 0 ? (long long)tm__ceil_div(K, gs) : 0LL, (long long)G);
        return bad(f, sc, err, e);
    } else {
        g.kind = TM_GRAN_GROUP;
        g.axis = 1;
        g.group_size = gs;
    }
    if (m == GQ_GPTQ && cfg->method == GQ_NONE && !*warned) {
        *warned = 1;
        tm_status s = tm__file_add_warning(f, err,
                                           "GPTQ tensors without a quantization_config in "
                                           "config.json or a quantize_config.json: zero points "
                                           "read as checkpoint_format \"gptq\" (stored z-1)");
        if (s) return s;
    }
    if (m == GQ_GPTQ && cfg->desc_act == 1 && !gt) {
        tm_status s = tm__file_add_warning(f, err, "config.json sets desc_act but %s has no g_idx",
                                           qw->name);
        if (s) return s;
    }
    if (m == GQ_GPTQ && !cfg->v2 && bits == 4 && cfg->sym != 0) {
        int all8;
        tm_status s = zeros_all_8(f, zi, G, N, &all8, err);
        if (s) return s;
        if (all8) *v2_like = wi;
    }
    tm_qtensor q;
    memset(&q, 0, sizeof q);
    q.code_dtype = bits == 8 ? TM_U8 : TM_U4;
    q.qmin = 0;
    q.qmax = ((int64_t)1 << bits) - 1;
    q.symmetric = 0; /* GPTQ sym=True still stores zero points (2^(bits-1)), read as they are */
    q.gran = g;
    q.packing = (tm_packing){TM_I32, bits, per, m == GQ_GPTQ ? 1 : 0, 0, 1};
    q.codes_tensor = wi;
    q.scale_tensor = si;
    q.zero_point_tensor = zi;
    /* GPTQ v1 stores z - 1: stored = z + offset with offset -1 */
    q.zp_packing = (tm_packing){TM_I32, bits, per, 0, m == GQ_GPTQ && !cfg->v2 ? -1 : 0, 1};
    q.layout = m == GQ_AWQ ? LAYOUT_AWQ : cfg->v2 ? LAYOUT_GPTQ_V2 : LAYOUT_GPTQ_V1;
    q.g_idx_tensor = gt && g.kind == TM_GRAN_GROUP ? gi : -1;
    q.transposed = 1;
    q.field_order = m == GQ_AWQ ? awq_field_of : NULL;
    int64_t dense = tm__file_find_param(f, P, "weight");
    if (dense == -2) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    tm_status s = TM_OK;
    if (dense < 0) {
        char *wname = P[0] ? tm__aprintf("%s.weight", P) : tm__strdup("weight");
        if (!wname) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        s = tm__file_rename_tensor(f, wi, wname, err);
        free(wname);
        if (s) return s;
    }
    tm_tensor *t = tm__file_tensor_mut(f, wi);
    t->dtype = q.code_dtype;
    t->ndim = 2;
    t->shape[0] = N;
    t->shape[1] = K;
    t->n_elems = numel;
    s = tm__file_set_quant(f, wi, &q, err);
    if (s) return s;
    set_role(f, si, TM_ROLE_SCALE, wi);
    set_role(f, zi, TM_ROLE_ZERO_POINT, wi);
    if (gi >= 0) set_role(f, gi, TM_ROLE_AUX, wi);
    return TM_OK;
}

tm_status tm__gptq_recognize(tm_file *f, tm_err *err) {
    gq_config cfg;
    tm_status s = config_load(f, &cfg, err);
    if (s || cfg.other) return s; /* another method's config: its recogniser's business */
    int warned = 0;
    int64_t n_v2_like = 0, n_v1 = 0, first_v2_like = -1;
    for (int64_t i = 0; s == TM_OK && i < f->n_tensors; i++) {
        const tm_tensor *t = &f->tensors[i];
        if (t->role != TM_ROLE_DATA || t->quant) continue;
        char *P = tm__module_of(t->name, "qweight");
        if (!P) continue;
        int64_t v2_like = -1;
        s = recognize_one(f, &cfg, i, P, &warned, &v2_like, err);
        free(P);
        if (s == TM_OK && f->tensors[i].quant && strcmp(f->tensors[i].quant->layout, LAYOUT_GPTQ_V1) == 0)
            n_v1++;
        if (v2_like >= 0 && n_v2_like++ == 0) first_v2_like = v2_like;
    }
    /* v1 stores z - 1: a symmetric 4-bit writer stores 7; all 8 is gptq_v2's symmetric zero */
    if (s == TM_OK && n_v2_like > 0)
        s = tm__file_add_warning(f, err,
                                 "%s (%lld of %lld GPTQ tensors read as checkpoint_format \"gptq\"):"
                                 " sym 4-bit but stored zeros = 8; under v1 the effective zero is "
                                 "9; the file may be gptq_v2 (set checkpoint_format \"gptq_v2\" in "
                                 "its quantization_config if so)",
                                 f->tensors[first_v2_like].phys_name, (long long)n_v2_like,
                                 (long long)n_v1);
    return s;
}
