/*
** ctensors.c: recognise quantized layouts in a listed safetensors checkpoint and describe
** them with tm_qtensor (docs/formats.md "compressed-tensors"; ../shared/formats/compressed-tensors.md).
**
**   pack-quantized   P.weight_packed I32 [rows, ceil(cols*bits/32)] + P.weight_scale +
**                    P.weight_shape I64 [2] (+ P.weight_zero_point, P.weight_g_idx)
**                    -> tensor "P.weight", code dtype I4/I8, codes offset by 2^(bits-1),
**                       LSB first along dim 1; zero points packed the same way along dim 0.
**   int-/naive-/float-quantized
**                    P.weight I8 | F8_E4M3 | F8_E5M2 + P.weight_scale (+ P.weight_zero_point I8)
**                    -> P.weight itself, one code per element.
**   fp8 scale_inv    P.weight F8 + P.weight_scale_inv (DeepSeek/transformers fine-grained fp8:
**                    the value is code * scale_inv, the name notwithstanding).
**
** The tensors are the truth: where they contradict each other the file is corrupt; where
** config.json's quantization_config disagrees with them, each disagreement is a warning.
** Opening reads nothing but the 16 bytes of each weight_shape.
*/
#include "file.h"
#include "pep440.h"

#include <errno.h>
#include <jansson.h>
#include <regex.h>
#include <stdio.h>


#define LAYOUT_PACK      "compressed-tensors/pack-quantized"
#define LAYOUT_PACK_GIDX "compressed-tensors/pack-quantized+g_idx"
#define LAYOUT_INT       "compressed-tensors/int-quantized"
#define LAYOUT_FLOAT     "compressed-tensors/float-quantized"
#define LAYOUT_NAIVE     "compressed-tensors/naive-quantized"
#define LAYOUT_FP8_INV   "fp8/scale_inv"

/* ---------------------------------------------------------------------------------------- */
/* config.json quantization_config                                                          */
/* ---------------------------------------------------------------------------------------- */

/* The weights arguments of the config group that applies to one module. Unknown = -1 / 0 / NULL. */
typedef struct ct_args {
    int         weights;       /* 1: the group quantizes weights                          */
    const char *group;         /* config group name                                       */
    const char *format;        /* group format, else top-level format; may be NULL         */
    int         num_bits;      /* -1 unknown                                              */
    int         is_float;      /* -1 unknown, 0 int, 1 float                              */
    int         symmetric;     /* -1 unknown                                              */
    const char *strategy;      /* "tensor" "channel" "group" "block" ...; NULL unknown     */
    int64_t     group_size;    /* > 0 when given                                          */
    int64_t     block_h, block_w;
    int         act_quant;     /* input_activations present                               */
    int         actorder_group;/* actorder "group"                                        */
} ct_args;

typedef enum ct_pat_kind { PAT_EXACT, PAT_REGEX, PAT_CLASS } ct_pat_kind;

typedef struct ct_pat {
    const char *text;          /* borrowed from the config JSON                            */
    ct_pat_kind kind;
    int         re_ok;
    regex_t     re;
} ct_pat;

typedef struct ct_group {
    ct_args  args;
    ct_pat  *targets;
    size_t   n_targets;
} ct_group;

typedef struct ct_config {
    json_t   *root;
    int       is_ct;           /* quant_method compressed-tensors                          */
    const char *format;        /* top-level format                                        */
    ct_group *groups;
    size_t    n_groups;
    ct_pat   *ignore;
    size_t    n_ignore;
    int64_t   fp8_bh, fp8_bw;  /* quant_method fp8: weight_block_size                      */
    const char *version;       /* quantization_config.version (the writer's release), or NULL */
    int       pack_modes;      /* pack-quantized layouts that version allows: PACK_DENSE |
                                  PACK_WORD (unknown: both)                                  */
} ct_config;

/* pack-quantized bit layouts (../shared/formats/compressed-tensors.md section 3; issue 12):
** compressed-tensors before 0.18.0 (PR #715) puts 32 div bits codes in each int32 word, the
** top 32 mod bits bits unused; from 0.18.0 (PR #732) each row is one dense bit stream,
** ceil(cols*bits/32) words, codes straddling words. Both store code + 2^(bits-1), code j of a
** word or stream from the lowest bits up, and agree for 1, 2, 4 and 8 bits. */
#define PACK_DENSE       1
#define PACK_WORD        2
#define CT_DENSE_SINCE   "0.18.0"

static void pat_init(ct_pat *p, const char *text) {
    memset(p, 0, sizeof *p);
    p->text = text;
    if (strncmp(text, "re:", 3) == 0) {
        p->kind = PAT_REGEX;
        /* Python re.match anchors at the start only. Translate the few Python-only escapes
        ** that appear in recipes into POSIX ERE; an untranslatable pattern matches nothing. */
        const char *src = text + 3;
        size_t n = strlen(src);
        char *ere = malloc(n * 5 + 8);
        if (!ere) return;
        size_t o = 0;
        ere[o++] = '^';
        ere[o++] = '(';
        for (size_t i = 0; i < n; i++) {
            if (src[i] == '\\' && i + 1 < n && (src[i + 1] == 'd' || src[i + 1] == 'D')) {
                const char *r = src[i + 1] == 'd' ? "[0-9]" : "[^0-9]";
                size_t rl = strlen(r);
                memcpy(ere + o, r, rl);
                o += rl;
                i++;
            } else if (src[i] == '(' && i + 2 < n && src[i + 1] == '?' && src[i + 2] == ':') {
                ere[o++] = '(';
                i += 2;
            } else {
                ere[o++] = src[i];
            }
        }
        ere[o++] = ')';
        ere[o] = '\0';
        p->re_ok = regcomp(&p->re, ere, REG_EXTENDED | REG_NOSUB) == 0;
        free(ere);
    } else {
        p->kind = PAT_EXACT; /* also tried as a class name at match time */
    }
}

static void pats_free(ct_pat *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i].kind == PAT_REGEX && p[i].re_ok) regfree(&p[i].re);
    free(p);
}

static void config_free(ct_config *c) {
    for (size_t g = 0; g < c->n_groups; g++) pats_free(c->groups[g].targets, c->groups[g].n_targets);
    free(c->groups);
    pats_free(c->ignore, c->n_ignore);
    json_decref(c->root);
    memset(c, 0, sizeof *c);
}

static ct_pat *pats_from(json_t *arr, size_t *n_out) {
    *n_out = 0;
    size_t n = json_is_array(arr) ? json_array_size(arr) : json_is_string(arr) ? 1 : 0;
    ct_pat *p = tm__calloc(n ? n : 1, sizeof *p);
    if (!p) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_is_array(arr) ? json_array_get(arr, i) : arr;
        if (json_is_string(x)) pat_init(&p[k++], json_string_value(x));
    }
    *n_out = k;
    return p;
}

static int64_t jint(json_t *o, const char *key, int64_t dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

static const char *jstr(json_t *o, const char *key) {
    return json_string_value(json_object_get(o, key));
}

static void args_unknown(ct_args *a) {
    memset(a, 0, sizeof *a);
    a->num_bits = -1;
    a->is_float = -1;
    a->symmetric = -1;
}

/* QuantizationArgs of a scheme's "weights" (compressed-tensors quant_args.py defaults). */
static void args_from_scheme(json_t *scheme, const char *top_format, ct_args *a) {
    args_unknown(a);
    json_t *w = json_object_get(scheme, "weights");
    const char *fmt = jstr(scheme, "format");
    a->format = fmt ? fmt : top_format;
    json_t *ia = json_object_get(scheme, "input_activations");
    a->act_quant = ia != NULL && !json_is_null(ia);
    if (!json_is_object(w)) return;
    a->weights = 1;
    a->num_bits = (int)jint(w, "num_bits", -1); /* absent: unknown, the packed shape or 8 decides */
    const char *type = jstr(w, "type");
    a->is_float = type ? strcmp(type, "float") == 0 : 0;
    json_t *sym = json_object_get(w, "symmetric");
    a->symmetric = json_is_boolean(sym) ? json_is_true(sym) : 1;
    a->group_size = jint(w, "group_size", 0);
    a->strategy = jstr(w, "strategy");
    if (!a->strategy)
        a->strategy = a->group_size > 0 ? "group" : a->group_size == -1 ? "channel" : "tensor";
    json_t *bs = json_object_get(w, "block_structure");
    if (json_is_array(bs) && json_array_size(bs) == 2) {
        a->block_h = json_integer_value(json_array_get(bs, 0));
        a->block_w = json_integer_value(json_array_get(bs, 1));
    } else if (json_is_string(bs)) { /* legacy "RxC" */
        const char *t = json_string_value(bs);
        char *end1 = NULL, *end2 = NULL;
        errno = 0;
        long long h = strtoll(t, &end1, 10);
        long long wv = end1 != t && *end1 == 'x' ? strtoll(end1 + 1, &end2, 10) : 0;
        if (errno == 0 && end2 && end2 != end1 + 1 && *end2 == '\0') {
            a->block_h = h;
            a->block_w = wv;
        }
    }
    json_t *ao = json_object_get(w, "actorder");
    const char *aos = json_string_value(ao);
    a->actorder_group = aos && (strcmp(aos, "group") == 0 || strcmp(aos, "dynamic") == 0);
}

/* A preset group ("W4A16": ["Linear"]): the weights arguments of the preset scheme. */
static void args_from_preset(const char *name, const char *top_format, ct_args *a) {
    static const struct {
        const char *name;
        int bits, is_float, sym, act;
        const char *strategy;
        int64_t group;
    } presets[] = {
        {"W8A16", 8, 0, 1, 0, "channel", 0},  {"W4A16", 4, 0, 1, 0, "group", 128},
        {"W4A16_ASYM", 4, 0, 0, 0, "group", 128}, {"W8A8", 8, 0, 1, 1, "channel", 0},
        {"INT8", 8, 0, 1, 1, "channel", 0},   {"W4A8", 4, 0, 1, 1, "group", 128},
        {"FP8", 8, 1, 1, 1, "tensor", 0},     {"FP8_DYNAMIC", 8, 1, 1, 1, "channel", 0},
        {"FP8_BLOCK", 8, 1, 1, 1, "block", 0},
    };
    args_unknown(a);
    a->format = top_format;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(presets[i].name, name) != 0) continue;
        a->weights = 1;
        a->num_bits = presets[i].bits;
        a->is_float = presets[i].is_float;
        a->symmetric = presets[i].sym;
        a->act_quant = presets[i].act;
        a->strategy = presets[i].strategy;
        a->group_size = presets[i].group;
        if (strcmp(name, "FP8_BLOCK") == 0) a->block_h = a->block_w = 128;
        return;
    }
    a->weights = 1; /* an unknown preset: quantized, details unknown */
}

/* Parse f->config_json's quantization_config. Absent or unusable config: c->root == NULL. */
static tm_status config_load(tm_file *f, ct_config *c, tm_err *err) {
    memset(c, 0, sizeof *c);
    if (!f->config_json) return TM_OK;
    c->root = json_loads(f->config_json, 0, NULL);
    if (!c->root) return TM_OK;
    json_t *qc = json_object_get(c->root, "quantization_config");
    if (!json_is_object(qc))
        qc = json_object_get(json_object_get(c->root, "text_config"), "quantization_config");
    if (!json_is_object(qc)) qc = json_object_get(c->root, "compression_config");
    if (!json_is_object(qc)) return TM_OK;
    const char *method = jstr(qc, "quant_method");
    json_t *groups = json_object_get(qc, "config_groups");
    if (method && strcmp(method, "fp8") == 0) {
        json_t *bs = json_object_get(qc, "weight_block_size");
        if (json_is_array(bs) && json_array_size(bs) == 2) {
            c->fp8_bh = json_integer_value(json_array_get(bs, 0));
            c->fp8_bw = json_integer_value(json_array_get(bs, 1));
        }
        return TM_OK;
    }
    if (method ? strcmp(method, "compressed-tensors") != 0 : !json_is_object(groups)) return TM_OK;
    c->is_ct = 1;
    c->format = jstr(qc, "format");
    c->pack_modes = PACK_DENSE | PACK_WORD;
    c->version = jstr(qc, "version");
    if (c->version) {
        int ok, cmp = tm__pep440_cmp(c->version, CT_DENSE_SINCE, &ok);
        if (ok) c->pack_modes = cmp < 0 ? PACK_WORD : PACK_DENSE;
        else {
            tm_status s = tm__file_add_warning(f, err,
                                               "config.json: quantization_config.version \"%s\" "
                                               "is not a PEP 440 version; the pack-quantized bit "
                                               "layout is taken from the tensor shapes",
                                               c->version);
            c->version = NULL;
            if (s != TM_OK) return s;
        }
    }
    size_t ng = json_is_object(groups) ? json_object_size(groups) : 0;
    c->groups = tm__calloc(ng ? ng : 1, sizeof *c->groups);
    c->ignore = pats_from(json_object_get(qc, "ignore"), &c->n_ignore);
    if (!c->groups || !c->ignore) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    const char *gname;
    json_t *gv;
    json_object_foreach(groups, gname, gv) {
        ct_group *g = &c->groups[c->n_groups];
        if (json_is_array(gv)) {
            args_from_preset(gname, c->format, &g->args);
            g->targets = pats_from(gv, &g->n_targets);
        } else if (json_is_object(gv)) {
            args_from_scheme(gv, c->format, &g->args);
            g->targets = pats_from(json_object_get(gv, "targets"), &g->n_targets);
        } else {
            continue;
        }
        if (!g->targets) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        g->args.group = gname;
        c->n_groups++;
    }
    return TM_OK;
}

/* What kind of module P is, for class-name targets: its weight is 2-D and it is not an
** embedding (by name) => Linear-like. */
typedef enum mod_kind { MOD_OTHER, MOD_LINEAR, MOD_EMBEDDING } mod_kind;

static mod_kind module_kind(const char *module, int weight_ndim) {
    if (weight_ndim != 2) return MOD_OTHER;
    if (strstr(module, "embed") || strstr(module, "wte") || strstr(module, "wpe"))
        return MOD_EMBEDDING;
    return MOD_LINEAR;
}

/* 3: exact name, 2: regex, 1: class name, 0: no match. */
static int pat_match(const ct_pat *p, const char *module, mod_kind kind) {
    if (p->kind == PAT_REGEX) return p->re_ok && regexec(&p->re, module, 0, NULL, 0) == 0 ? 2 : 0;
    if (strcmp(p->text, module) == 0) return 3;
    if (kind == MOD_LINEAR && strcmp(p->text, "Linear") == 0) return 1;
    if (kind == MOD_EMBEDDING && strcmp(p->text, "Embedding") == 0) return 1;
    return 0;
}

static int is_ignored(const ct_config *c, const char *module, mod_kind kind) {
    for (size_t i = 0; i < c->n_ignore; i++)
        if (pat_match(&c->ignore[i], module, kind)) return 1;
    return 0;
}

/* The group whose targets match module best (exact > regex > class); NULL when none. */
static const ct_args *args_for(const ct_config *c, const char *module, mod_kind kind) {
    const ct_args *best = NULL;
    int best_rank = 0;
    for (size_t g = 0; g < c->n_groups; g++)
        for (size_t t = 0; t < c->groups[g].n_targets; t++) {
            int r = pat_match(&c->groups[g].targets[t], module, kind);
            if (r > best_rank) {
                best_rank = r;
                best = &c->groups[g].args;
            }
        }
    return best;
}

/* ---------------------------------------------------------------------------------------- */
/* Recognition                                                                               */
/* ---------------------------------------------------------------------------------------- */

typedef struct ct_ctx {
    tm_file   *f;
    ct_config  cfg;
} ct_ctx;

static int is_scale_dtype(tm_dtype dt) {
    return dt == TM_F32 || dt == TM_F16 || dt == TM_BF16 || dt == TM_F64;
}


/* Outcome of a layout check: recognised, skipped with a warning, or an error in err. */
typedef enum ct_res { CT_OK = 0, CT_SKIP = 1, CT_ERR = 2 } ct_res;

static ct_res fail(tm_status *st, tm_status s) {
    *st = s;
    return s == TM_OK ? CT_SKIP : CT_ERR;
}

/* Granularity of a scale tensor for a weight of shape [rows, cols] (ndim 2) or any shape with
** a single scale (spec §5: scale ndim <= 1 -> tensor, [rows,1] -> channel, [rows,k] -> group
** with group size cols/k, else block from the config). */
static ct_res derive_gran(ct_ctx *x, const char *module, const tm_tensor *w, const tm_tensor *s,
                          const ct_args *a, tm_qgran *g, tm_status *st, tm_err *err) {
    tm_file *f = x->f;
    char ss[160], ws[160];
    tm__st_fmt_shape(ss, sizeof ss, s->ndim, s->shape);
    tm__st_fmt_shape(ws, sizeof ws, w->ndim, w->shape);
    memset(g, 0, sizeof *g);
    if (s->n_elems == 0)
        return fail(st, tm__err_set(err, TM_E_CORRUPT, (int64_t)s->offset,
                                    "%s: %s has shape %s: no scales for weight %s",
                                    f->maps[s->file_index].path, s->name, ss, ws));
    int says_channel = a && a->strategy && strcmp(a->strategy, "channel") == 0;
    if (s->n_elems == 1 && s->ndim <= 2 && !(says_channel && w->ndim == 2 && w->shape[0] == 1)) {
        g->kind = TM_GRAN_TENSOR;
        return CT_OK;
    }
    if (w->ndim != 2)
        return fail(st, tm__err_set(err, TM_E_CORRUPT, (int64_t)s->offset,
                                    "%s: %s has shape %s, but only a single scale fits a %d-D "
                                    "weight %s",
                                    f->maps[s->file_index].path, s->name, ss, w->ndim, ws));
    int64_t rows = w->shape[0], cols = w->shape[1];
    int64_t bh = a && a->block_h > 0 ? a->block_h : x->cfg.fp8_bh;
    int64_t bw = a && a->block_w > 0 ? a->block_w : x->cfg.fp8_bw;
    if (s->ndim == 2 && bh > 0 && bw > 0 && s->shape[0] == tm__ceil_div(rows, bh) &&
        s->shape[1] == tm__ceil_div(cols, bw) && (s->shape[0] != rows || s->shape[1] != 1)) {
        g->kind = TM_GRAN_BLOCK;
        g->block_h = bh;
        g->block_w = bw;
        return CT_OK;
    }
    if ((s->ndim == 1 && s->shape[0] == rows) ||
        (s->ndim == 2 && s->shape[0] == rows && s->shape[1] == 1)) {
        g->kind = TM_GRAN_CHANNEL;
        g->axis = 0;
        return CT_OK;
    }
    if (s->ndim == 2 && s->shape[0] == rows) {
        int64_t k = s->shape[1];
        int64_t gs = tm__ceil_div(cols, k);
        if (k > cols || tm__ceil_div(cols, gs) != k)
            return fail(st, tm__err_set(err, TM_E_CORRUPT, (int64_t)s->offset,
                                        "%s: %s has shape %s: no group size splits %lld columns "
                                        "of %s into %lld groups",
                                        f->maps[s->file_index].path, s->name, ss, (long long)cols,
                                        ws, (long long)k));
        if (a && a->group_size > 0 && tm__ceil_div(cols, a->group_size) == k) gs = a->group_size;
        g->kind = TM_GRAN_GROUP;
        g->axis = 1;
        g->group_size = gs;
        return CT_OK;
    }
    if (s->ndim == 2) {
        if (bh > 0 && bw > 0)
            *st = tm__file_add_warning(f, err,
                                       "%s.weight: scale %s has shape %s, which block size [%lld, "
                                       "%lld] from config.json does not give for weight %s; left "
                                       "unrecognised",
                                       module, s->name, ss, (long long)bh, (long long)bw, ws);
        else
            *st = tm__file_add_warning(f, err,
                                       "%s.weight: scale %s has block shape %s for weight %s but "
                                       "config.json gives no block size; left unrecognised",
                                       module, s->name, ss, ws);
        return *st == TM_OK ? CT_SKIP : CT_ERR;
    }
    return fail(st, tm__err_set(err, TM_E_CORRUPT, (int64_t)s->offset,
                                "%s: %s has shape %s, which fits no granularity for weight %s",
                                f->maps[s->file_index].path, s->name, ss, ws));
}

/* Warnings where config.json's scheme for this module disagrees with the tensors. */
static tm_status check_config(ct_ctx *x, const char *module, mod_kind kind, const tm_qtensor *q,
                              const tm_tensor *s, int has_zp, int has_gidx, int bits,
                              tm_err *err) {
    tm_file *f = x->f;
    const ct_config *c = &x->cfg;
    if (!c->is_ct) return TM_OK;
    tm_status st = TM_OK;
    if (is_ignored(c, module, kind))
        return tm__file_add_warning(f, err,
                                    "%s.weight is quantized (%s) but config.json lists '%s' in "
                                    "ignore",
                                    module, q->layout, module);
    const ct_args *a = args_for(c, module, kind);
    if (!a || !a->weights)
        return tm__file_add_warning(f, err,
                                    "%s.weight is quantized (%s) but no config group in "
                                    "config.json quantizes the weights of '%s'",
                                    module, q->layout, module);
    char ss[160];
    tm__st_fmt_shape(ss, sizeof ss, s->ndim, s->shape);
    int code_float = q->code_dtype == TM_F8_E4M3 || q->code_dtype == TM_F8_E5M2;
    if (a->is_float >= 0 && a->is_float != code_float && st == TM_OK)
        st = tm__file_add_warning(f, err, "config says type %s but %s.weight holds %s codes",
                                  a->is_float ? "float" : "int", module,
                                  tm_dtype_get(q->code_dtype)->name);
    if (a->num_bits > 0 && bits > 0 && a->num_bits != bits && st == TM_OK)
        st = tm__file_add_warning(f, err, "config says num_bits %d but %s.weight holds %d-bit codes",
                                  a->num_bits, module, bits);
    if (a->strategy && strcmp(a->strategy, tm_granularity_kind_name(q->gran.kind)) != 0 && st == TM_OK &&
        !(strcmp(a->strategy, "tensor_group") == 0 && q->gran.kind == TM_GRAN_GROUP)) {
        char extra[64] = "";
        if (q->gran.kind == TM_GRAN_GROUP)
            snprintf(extra, sizeof extra, " (group %lld)", (long long)q->gran.group_size);
        st = tm__file_add_warning(f, err, "config says strategy %s but %s has shape %s%s",
                                  a->strategy, s->name, ss, extra);
    }
    if (a->group_size > 0 && q->gran.kind == TM_GRAN_GROUP && a->group_size != q->gran.group_size &&
        st == TM_OK)
        st = tm__file_add_warning(f, err, "config says group_size %lld but %s has shape %s (group "
                                  "%lld)",
                                  (long long)a->group_size, s->name, ss,
                                  (long long)q->gran.group_size);
    if (a->symmetric == 1 && has_zp && st == TM_OK)
        st = tm__file_add_warning(f, err,
                                  "config says symmetric but %s.weight_zero_point is present "
                                  "(symmetric checkpoints carry no zero point)",
                                  module);
    if (a->symmetric == 0 && !has_zp && st == TM_OK)
        st = tm__file_add_warning(f, err, "config says asymmetric but %s has no weight_zero_point",
                                  module);
    if (a->actorder_group && !has_gidx && st == TM_OK)
        st = tm__file_add_warning(f, err, "config says actorder group but %s has no weight_g_idx",
                                  module);
    if (!a->actorder_group && has_gidx && st == TM_OK)
        st = tm__file_add_warning(f, err, "%s has a weight_g_idx but config.json sets no actorder",
                                  module);
    /* int-, float- and naive-quantized are one compressor under three names. */
    int stored_packed = strcmp(q->layout, LAYOUT_PACK) == 0 || strcmp(q->layout, LAYOUT_PACK_GIDX) == 0;
    const char *fam = !a->format ? NULL
                      : strcmp(a->format, "pack-quantized") == 0 ? "pack"
                      : (strcmp(a->format, "int-quantized") == 0 ||
                         strcmp(a->format, "float-quantized") == 0 ||
                         strcmp(a->format, "naive-quantized") == 0) ? "naive"
                      : strcmp(a->format, "mixed-precision") == 0 ? NULL : "other";
    if (fam && strcmp(fam, stored_packed ? "pack" : "naive") != 0 && st == TM_OK)
        st = tm__file_add_warning(f, err, "config says format %s but %s.weight is stored %s", a->format,
                                  module, strchr(q->layout, '/') + 1);
    return st;
}

static tm_status set_role(tm_file *f, int64_t i, tm_tensor_role role, int64_t owner) {
    tm_tensor *t = tm__file_tensor_mut(f, i);
    if (t) {
        t->role = role;
        t->owner = owner;
    }
    return TM_OK;
}

static char *tensor_name(const char *module, const char *param) {
    return module[0] ? tm__aprintf("%s.%s", module, param) : tm__strdup(param);
}

/* Words of one packed stream of n codes of `bits` in layout mode (PACK_DENSE, PACK_WORD). */
static int64_t pack_words(int64_t n, int bits, int mode) {
    return mode == PACK_WORD ? tm__ceil_div(n, 32 / bits) : tm__ceil_div(n * bits, 32);
}

/* The layouts among `allowed` in which n codes of `bits` take `words` words. */
static int pack_modes_fitting(int allowed, int64_t n, int bits, int64_t words) {
    return ((allowed & PACK_DENSE) && pack_words(n, bits, PACK_DENSE) == words ? PACK_DENSE : 0) |
           ((allowed & PACK_WORD) && pack_words(n, bits, PACK_WORD) == words ? PACK_WORD : 0);
}

/* The bit layout of packed tensor t: streams of n `bits`-wide codes in `words` words each (what:
** "words per row"). *modes = the layouts among `allowed` that fit. None fits: refused (corrupt);
** both fit and place the codes differently (the config names no version): refused
** (unsupported). cfg_bits: the width is config.json's num_bits (said in the message). */
static ct_res pack_layout(ct_ctx *x, const tm_tensor *t, int64_t n, int bits, int64_t words,
                          int cfg_bits, int allowed, const char *what, int *modes, tm_status *st,
                          tm_err *err) {
    const char *path = tm__file_path_of(x->f, t);
    char ts[160], why[96] = "";
    tm__st_fmt_shape(ts, sizeof ts, t->ndim, t->shape);
    if (cfg_bits) snprintf(why, sizeof why, " (config.json num_bits %d)", bits);
    *modes = pack_modes_fitting(allowed, n, bits, words);
    int64_t wd = pack_words(n, bits, PACK_DENSE), ww = pack_words(n, bits, PACK_WORD);
    if (*modes == 0) {
        char need[200];
        if (allowed == (PACK_DENSE | PACK_WORD) && ww == wd)
            snprintf(need, sizeof need, "%lld in either layout", (long long)wd);
        else if (allowed == (PACK_DENSE | PACK_WORD))
            snprintf(need, sizeof need, "%lld in the per-word layout of compressed-tensors < %s, "
                     "%lld in the dense layout of >= %s", (long long)ww, CT_DENSE_SINCE,
                     (long long)wd, CT_DENSE_SINCE);
        else
            snprintf(need, sizeof need, "%lld in the %s layout of compressed-tensors %s "
                     "(config.json version)", (long long)(allowed == PACK_WORD ? ww : wd),
                     allowed == PACK_WORD ? "per-word" : "dense", x->cfg.version);
        return fail(st, tm__err_set(err, TM_E_CORRUPT, (int64_t)t->offset,
                                    "%s: %s has shape %s: %lld %s cannot hold %lld %d-bit "
                                    "codes%s; they take %s",
                                    path, t->name, ts, (long long)words, what, (long long)n, bits,
                                    why, need));
    }
    if (*modes == (PACK_DENSE | PACK_WORD) && 32 % bits != 0 && n > 32 / bits)
        return fail(st, tm__err_set(err, TM_E_UNSUPPORTED, (int64_t)t->offset,
                                    "%s: %s has shape %s: %lld %d-bit codes%s in %lld %s fit both "
                                    "the per-word layout of compressed-tensors < %s and the dense "
                                    "one of >= %s, which place them differently, and config.json "
                                    "gives no quantization_config.version; refused",
                                    path, t->name, ts, (long long)n, bits, why, (long long)words,
                                    what, CT_DENSE_SINCE, CT_DENSE_SINCE));
    return CT_OK;
}

/* pack-quantized: module P with P.weight_packed at index r. */
static ct_res recognize_packed(ct_ctx *x, int64_t r, const char *P, tm_status *st, tm_err *err) {
    tm_file *f = x->f;
    *st = TM_OK;
    int64_t si = tm__file_find_param(f, P, "weight_scale"), shi = tm__file_find_param(f, P, "weight_shape");
    int64_t zi = tm__file_find_param(f, P, "weight_zero_point"), gi = tm__file_find_param(f, P, "weight_g_idx");
    int64_t wi = tm__file_find_param(f, P, "weight");
    if (si == -2 || shi == -2 || zi == -2 || gi == -2 || wi == -2)
        return fail(st, tm__err_set(err, TM_E_NOMEM, -1, "out of memory"));
    const tm_tensor *pk = &f->tensors[r];
    if (si < 0 || shi < 0)
        return fail(st, tm__file_add_warning(f, err, "%s has no %s.%s; left as a plain tensor",
                                             pk->name, P[0] ? P : "(root)",
                                             si < 0 ? "weight_scale" : "weight_shape"));
    if (wi >= 0)
        return fail(st, tm__file_add_warning(f, err,
                                             "%s.weight and %s both exist; the pack-quantized "
                                             "module is left unrecognised",
                                             P, pk->name));
    const tm_tensor *sh = &f->tensors[shi], *sc = &f->tensors[si];
    const char *path = tm__file_path_of(f, pk);
    /* weight_shape: two int64 (int32 tolerated) holding [rows, cols]. */
    if (!((sh->dtype == TM_I64 || sh->dtype == TM_I32) && sh->ndim == 1)) {
        char shs[160];
        tm__st_fmt_shape(shs, sizeof shs, sh->ndim, sh->shape);
        return fail(st, tm__err_set(err, TM_E_CORRUPT, (int64_t)sh->offset,
                                    "%s: %s is %s %s; a weight_shape is I64 [2]", tm__file_path_of(f, sh),
                                    sh->name, tm_dtype_get(sh->dtype)->name, shs));
    }
    if (sh->shape[0] != 2)
        return fail(st, tm__file_add_warning(f, err,
                                             "%s has %lld dims; only 2-D pack-quantized weights "
                                             "are supported, left unrecognised",
                                             sh->name, (long long)sh->shape[0]));
    const void *p;
    tm_status s = tm_tensor_data(f, shi, 0, sh->n_bytes, &p, err);
    if (s != TM_OK) return fail(st, s);
    int64_t rows, cols;
    if (sh->dtype == TM_I64) {
        rows = (int64_t)tm__ld64(p);
        cols = (int64_t)tm__ld64((const uint8_t *)p + 8);
    } else {
        rows = (int32_t)tm__ld32(p);
        cols = (int32_t)tm__ld32((const uint8_t *)p + 4);
    }
    int64_t numel;
    if (rows < 0 || cols < 0 || cols > INT64_MAX / 32 || !tm__mul_i64_ok(rows, cols, &numel))
        return fail(st, tm__err_set(err, TM_E_CORRUPT, (int64_t)sh->offset,
                                    "%s: %s holds [%lld, %lld], not a valid weight shape (file "
                                    "byte %llu)",
                                    tm__file_path_of(f, sh), sh->name, (long long)rows, (long long)cols,
                                    (unsigned long long)sh->offset));
    char ps[160];
    tm__st_fmt_shape(ps, sizeof ps, pk->ndim, pk->shape);
    if (pk->dtype != TM_I32 || pk->ndim != 2)
        return fail(st, tm__err_set(err, TM_E_CORRUPT, (int64_t)pk->offset,
                                    "%s: %s is %s %s; packed weights are I32 [rows, words]", path,
                                    pk->name, tm_dtype_get(pk->dtype)->name, ps));
    if (pk->shape[0] != rows)
        return fail(st, tm__err_set(err, TM_E_CORRUPT, (int64_t)pk->offset,
                                    "%s: %s has shape %s but %s says %lld rows", path, pk->name, ps,
                                    sh->name, (long long)rows));
    /* Code width: config.json's num_bits; without one, the width whose words per row the
    ** shape gives (4 and 8 first). Bit layout: the one the writer's version allows. */
    int64_t words = pk->shape[1];
    const ct_args *a = NULL;
    mod_kind kind = MOD_LINEAR;
    if (x->cfg.is_ct && !is_ignored(&x->cfg, P, kind)) a = args_for(&x->cfg, P, kind);
    int allowed = x->cfg.pack_modes ? x->cfg.pack_modes : PACK_DENSE | PACK_WORD;
    int bits = a && a->is_float != 1 && a->num_bits >= 1 && a->num_bits <= 8 ? a->num_bits : 0;
    if (bits == 0) {
        int fits[9] = {0};
        for (int b = 1; b <= 8; b++) fits[b] = pack_modes_fitting(allowed, cols, b, words) != 0;
        bits = fits[4] ? 4 : fits[8] ? 8 : 0;
        for (int b = 1; b <= 8 && !bits; b++)
            if (fits[b]) bits = b;
        if (bits == 0)
            return fail(st, tm__err_set(err, TM_E_CORRUPT, (int64_t)pk->offset,
                                        "%s: %s has shape %s: %lld words per row hold %lld codes "
                                        "of no width 1..8 (%s says %lld columns)",
                                        path, pk->name, ps, (long long)words, (long long)cols,
                                        sh->name, (long long)cols));
    }
    int modes = 0;
    ct_res lr = pack_layout(x, pk, cols, bits, words, a != NULL && bits == a->num_bits, allowed,
                            "words per row", &modes, st, err);
    if (lr != CT_OK) return lr;
    if (!is_scale_dtype(sc->dtype))
        return fail(st, tm__err_set(err, TM_E_CORRUPT, (int64_t)sc->offset,
                                    "%s: %s has dtype %s; a scale is F32, F16, BF16 or F64",
                                    tm__file_path_of(f, sc), sc->name, tm_dtype_get(sc->dtype)->name));
    /* Granularity against the logical weight shape. */
    tm_tensor logical = *pk;
    logical.ndim = 2;
    logical.shape[0] = rows;
    logical.shape[1] = cols;
    tm_qgran g;
    ct_res cr = derive_gran(x, P, &logical, sc, a, &g, st, err);
    if (cr != CT_OK) return cr;

    tm_qtensor q;
    memset(&q, 0, sizeof q);
    q.g_idx_tensor = -1;
    q.code_dtype = bits <= 4 ? TM_I4 : TM_I8;
    q.qmin = -((int64_t)1 << (bits - 1));
    q.qmax = ((int64_t)1 << (bits - 1)) - 1;
    q.gran = g;
    q.packing = (tm_packing){TM_I32, bits, 32 / bits, 1, (int64_t)1 << (bits - 1), 1};
    q.codes_tensor = r;
    q.scale_tensor = si;
    q.zero_point_tensor = -1;
    q.zp_packing = q.packing;
    q.zp_packing.packed_axis = 0;
    q.layout = gi >= 0 ? LAYOUT_PACK_GIDX : LAYOUT_PACK;
    if (zi >= 0) {
        const tm_tensor *z = &f->tensors[zi];
        char zs[160], ss[160];
        tm__st_fmt_shape(zs, sizeof zs, z->ndim, z->shape);
        tm__st_fmt_shape(ss, sizeof ss, sc->ndim, sc->shape);
        int64_t srows = sc->ndim == 2 ? sc->shape[0] : sc->n_elems;
        int64_t scols = sc->ndim == 2 ? sc->shape[1] : 1;
        int64_t zw = pack_words(srows, bits, modes & PACK_DENSE ? PACK_DENSE : PACK_WORD);
        if (z->dtype == TM_I32 && z->ndim == 2 && g.kind != TM_GRAN_TENSOR &&
            z->shape[1] == scols && pack_modes_fitting(modes, srows, bits, z->shape[0])) {
            /* packed along dim 0, like the weights, in a layout the codes allow */
            lr = pack_layout(x, z, srows, bits, z->shape[0], 0, modes, "words per column",
                             &modes, st, err);
            if (lr != CT_OK) return lr;
        } else if (z->dtype == TM_I8 && z->n_elems == sc->n_elems) {
            q.zp_packing = (tm_packing){TM_I8, 8, 1, -1, 0, 1};
        } else {
            return fail(st, tm__err_set(err, TM_E_CORRUPT, (int64_t)z->offset,
                                        "%s: %s is %s %s; with %s %s it must be I32 [%lld, %lld] "
                                        "(packed along dim 0) or I8 %s",
                                        tm__file_path_of(f, z), z->name, tm_dtype_get(z->dtype)->name, zs,
                                        sc->name, ss, (long long)zw, (long long)scols, ss));
        }
        q.zero_point_tensor = zi;
    }
    /* per word where only that layout fits and it differs from the dense one */
    if (modes == PACK_WORD && 32 % bits != 0) {
        q.packing.lsb_first = TM_PACK_LSB_PER_WORD;
        if (q.zp_packing.container == TM_I32) q.zp_packing.lsb_first = TM_PACK_LSB_PER_WORD;
    }
    q.symmetric = zi < 0;
    if (gi >= 0) {
        const tm_tensor *gt = &f->tensors[gi];
        if (gt->dtype != TM_I32 || gt->ndim != 1 || gt->shape[0] != cols) {
            char gs[160];
            tm__st_fmt_shape(gs, sizeof gs, gt->ndim, gt->shape);
            return fail(st, tm__err_set(err, TM_E_CORRUPT, (int64_t)gt->offset,
                                        "%s: %s is %s %s; a g_idx is I32 [%lld]", tm__file_path_of(f, gt),
                                        gt->name, tm_dtype_get(gt->dtype)->name, gs,
                                        (long long)cols));
        }
    }
    q.g_idx_tensor = gi;
    /* Apply: the packed tensor becomes the logical P.weight. */
    char *wname = tensor_name(P, "weight");
    if (!wname) return fail(st, tm__err_set(err, TM_E_NOMEM, -1, "out of memory"));
    s = tm__file_rename_tensor(f, r, wname, err);
    free(wname);
    if (s != TM_OK) return fail(st, s);
    tm_tensor *t = tm__file_tensor_mut(f, r);
    t->dtype = q.code_dtype;
    t->ndim = 2;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->n_elems = numel;
    if ((s = tm__file_set_quant(f, r, &q, err)) != TM_OK) return fail(st, s);
    set_role(f, si, TM_ROLE_SCALE, r);
    set_role(f, shi, TM_ROLE_AUX, r);
    if (zi >= 0) set_role(f, zi, TM_ROLE_ZERO_POINT, r);
    if (gi >= 0) set_role(f, gi, TM_ROLE_AUX, r);
    s = check_config(x, P, kind, t->quant, &f->tensors[si], zi >= 0, gi >= 0, bits, err);
    if (s != TM_OK) return fail(st, s);
    return CT_OK;
}

/* int-/naive-/float-quantized and fp8 scale(_inv): P.weight at index wi is itself the codes. */
static ct_res recognize_unpacked(ct_ctx *x, int64_t wi, const char *P, tm_status *st,
                                 tm_err *err) {
    tm_file *f = x->f;
    *st = TM_OK;
    const tm_tensor *w = &f->tensors[wi];
    int is_fp8 = w->dtype == TM_F8_E4M3 || w->dtype == TM_F8_E5M2;
    int64_t si = tm__file_find_param(f, P, "weight_scale"), inv = -1;
    if (si == -2) return fail(st, tm__err_set(err, TM_E_NOMEM, -1, "out of memory"));
    if (si < 0 && is_fp8) {
        inv = tm__file_find_param(f, P, "weight_scale_inv");
        if (inv == -2) return fail(st, tm__err_set(err, TM_E_NOMEM, -1, "out of memory"));
        si = inv;
    }
    if (si < 0) return CT_SKIP; /* a plain int8/fp8 tensor */
    int64_t zi = tm__file_find_param(f, P, "weight_zero_point"), gi = tm__file_find_param(f, P, "weight_g_idx");
    if (zi == -2 || gi == -2) return fail(st, tm__err_set(err, TM_E_NOMEM, -1, "out of memory"));
    const tm_tensor *sc = &f->tensors[si];
    if (sc->role != TM_ROLE_DATA) return CT_SKIP;
    if (!is_scale_dtype(sc->dtype))
        return fail(st, tm__err_set(err, TM_E_CORRUPT, (int64_t)sc->offset,
                                    "%s: %s has dtype %s; a scale is F32, F16, BF16 or F64",
                                    tm__file_path_of(f, sc), sc->name, tm_dtype_get(sc->dtype)->name));
    mod_kind kind = module_kind(P, w->ndim);
    const ct_args *a = NULL;
    if (x->cfg.is_ct && !is_ignored(&x->cfg, P, kind)) a = args_for(&x->cfg, P, kind);
    tm_qgran g;
    ct_res cr = derive_gran(x, P, w, sc, a, &g, st, err);
    if (cr != CT_OK) return cr;
    tm_qtensor q;
    memset(&q, 0, sizeof q);
    q.g_idx_tensor = -1;
    q.code_dtype = w->dtype;
    if (is_fp8) {
        q.qmax = w->dtype == TM_F8_E4M3 ? 448 : 57344;
        q.qmin = -q.qmax;
    } else {
        int b = a && !a->is_float && a->num_bits >= 2 && a->num_bits < 8 ? a->num_bits : 8;
        q.qmin = -((int64_t)1 << (b - 1));
        q.qmax = ((int64_t)1 << (b - 1)) - 1;
    }
    q.gran = g;
    q.packing = (tm_packing){w->dtype, 8, 1, -1, 0, 1};
    q.codes_tensor = wi;
    q.scale_tensor = si;
    q.zero_point_tensor = -1;
    q.zp_packing = (tm_packing){TM_I8, 8, 1, -1, 0, 1};
    if (inv >= 0) q.layout = LAYOUT_FP8_INV;
    else if (!is_fp8) q.layout = LAYOUT_INT;
    else if (a && a->format && strcmp(a->format, "float-quantized") == 0) q.layout = LAYOUT_FLOAT;
    else if (a && a->act_quant && !(a->format && strcmp(a->format, "naive-quantized") == 0))
        q.layout = LAYOUT_FLOAT;
    else q.layout = LAYOUT_NAIVE;
    if (zi >= 0) {
        const tm_tensor *z = &f->tensors[zi];
        char zs[160], ss[160];
        tm__st_fmt_shape(zs, sizeof zs, z->ndim, z->shape);
        tm__st_fmt_shape(ss, sizeof ss, sc->ndim, sc->shape);
        if (is_fp8) {
            tm_status s = tm__file_add_warning(f, err,
                                               "%s: an fp8 weight takes no zero point; %s is "
                                               "ignored",
                                               w->name, z->name);
            if (s != TM_OK) return fail(st, s);
            zi = -1;
        } else if (z->dtype != TM_I8 || z->n_elems != sc->n_elems) {
            return fail(st, tm__err_set(err, TM_E_CORRUPT, (int64_t)z->offset,
                                        "%s: %s is %s %s; it must be I8 shaped like %s %s",
                                        tm__file_path_of(f, z), z->name, tm_dtype_get(z->dtype)->name, zs,
                                        sc->name, ss));
        } else {
            q.zero_point_tensor = zi;
        }
    }
    q.symmetric = q.zero_point_tensor < 0;
    if (gi >= 0) {
        const tm_tensor *gt = &f->tensors[gi];
        if (gt->dtype != TM_I32 || gt->ndim != 1 || w->ndim != 2 || gt->shape[0] != w->shape[1]) {
            char gs[160];
            tm__st_fmt_shape(gs, sizeof gs, gt->ndim, gt->shape);
            return fail(st, tm__err_set(err, TM_E_CORRUPT, (int64_t)gt->offset,
                                        "%s: %s is %s %s; a g_idx is I32 [columns of %s]",
                                        tm__file_path_of(f, gt), gt->name, tm_dtype_get(gt->dtype)->name, gs,
                                        w->name));
        }
    }
    if (q.gran.kind == TM_GRAN_GROUP) q.g_idx_tensor = gi;
    tm_status s = tm__file_set_quant(f, wi, &q, err);
    if (s != TM_OK) return fail(st, s);
    set_role(f, si, TM_ROLE_SCALE, wi);
    if (q.zero_point_tensor >= 0) set_role(f, zi, TM_ROLE_ZERO_POINT, wi);
    if (gi >= 0) set_role(f, gi, TM_ROLE_AUX, wi);
    /* an I8 container holds codes of any width up to 8 (W4A8 stores int4 unpacked) */
    s = check_config(x, P, kind, f->tensors[wi].quant, sc, q.zero_point_tensor >= 0, gi >= 0,
                     is_fp8 ? 8 : -1, err);
    if (s != TM_OK) return fail(st, s);
    return CT_OK;
}

/* Dense Linear-like weights that config.json says are quantized. */
static tm_status check_dense(ct_ctx *x, tm_err *err) {
    tm_file *f = x->f;
    if (!x->cfg.is_ct) return TM_OK;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const tm_tensor *t = &f->tensors[i];
        if (t->quant || t->role != TM_ROLE_DATA || t->ndim != 2) continue;
        if (!(t->dtype == TM_F32 || t->dtype == TM_F16 || t->dtype == TM_BF16 || t->dtype == TM_F64))
            continue;
        char *P = tm__module_of(t->name, "weight");
        if (!P) continue;
        mod_kind kind = module_kind(P, t->ndim);
        const ct_args *a = is_ignored(&x->cfg, P, kind) ? NULL : args_for(&x->cfg, P, kind);
        tm_status s = TM_OK;
        if (a && a->weights)
            s = tm__file_add_warning(f, err,
                                     "config.json quantizes '%s' (config group '%s') but %s is "
                                     "dense %s and not in ignore",
                                     P, a->group ? a->group : "?", t->name,
                                     tm_dtype_get(t->dtype)->name);
        free(P);
        if (s != TM_OK) return s;
    }
    return TM_OK;
}

tm_status tm__ctensors_recognize(tm_file *f, tm_err *err) {
    ct_ctx x;
    memset(&x, 0, sizeof x);
    x.f = f;
    tm_status s = config_load(f, &x.cfg, err);
    int64_t n = f->n_tensors;
    /* Pass 1: pack-quantized modules (their roots are renamed; lookups of other names stay valid). */
    for (int64_t i = 0; s == TM_OK && i < n; i++) {
        const tm_tensor *t = &f->tensors[i];
        if (t->role != TM_ROLE_DATA || t->quant) continue;
        char *P = tm__module_of(t->name, "weight_packed");
        if (!P) continue;
        tm_status st = TM_OK;
        ct_res r = recognize_packed(&x, i, P, &st, err);
        free(P);
        if (r == CT_ERR) s = st;
    }
    /* Pass 2: unpacked codes with a scale. */
    for (int64_t i = 0; s == TM_OK && i < n; i++) {
        const tm_tensor *t = &f->tensors[i];
        if (t->role != TM_ROLE_DATA || t->quant) continue;
        if (t->dtype != TM_I8 && t->dtype != TM_F8_E4M3 && t->dtype != TM_F8_E5M2) continue;
        char *P = tm__module_of(t->name, "weight");
        if (!P) continue;
        tm_status st = TM_OK;
        ct_res r = recognize_unpacked(&x, i, P, &st, err);
        free(P);
        if (r == CT_ERR) s = st;
    }
    if (s == TM_OK) s = check_dense(&x, err);
    config_free(&x.cfg);
    return s;
}
