/* recipe.c: `quantize --recipe FILE` (docs/recipe.md): the pieces the compressed-tensors, GGUF
** and ONNX output forms share. A manifest's "recipe" object, saved alone, is a recipe for the
** form that wrote it, so every value is read with the same names the manifests write
** (tm_granularity_parse, tm_observer_from_name, dtype names). */
#include "recipe.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

int cli_recipe_only_keys(json_t *o, const char *const *keys, const char *where, const char *path) {
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val) {
        int ok = 0;
        for (size_t i = 0; keys[i]; i++) ok |= !strcmp(key, keys[i]);
        if (!ok) {
            fprintf(stderr, "tensormorph: recipe %s: %s: unknown key \"%s\" (docs/recipe.md)\n", path, where, key);
            return 0;
        }
    }
    return 1;
}

int cli_recipe_load(const char *path, const char *form, const char *const *keys, json_t **out) {
    *out = NULL;
    FILE *rf = fopen(path, "rb");
    if (!rf) {
        fprintf(stderr, "tensormorph: recipe %s: cannot open: %s\n", path, strerror(errno));
        return EXIT_IO;
    }
    json_error_t je;
    json_t *r = json_loadf(rf, JSON_REJECT_DUPLICATES, &je);
    fclose(rf);
    if (!r || !json_is_object(r)) {
        if (r) fprintf(stderr, "tensormorph: recipe %s: not a JSON object\n", path);
        else fprintf(stderr, "tensormorph: recipe %s: line %d, column %d: %s\n", path, je.line, je.column, je.text);
        json_decref(r);
        return EXIT_INPUT;
    }
    json_t *fmt = json_object_get(r, "format");
    if (fmt && (!json_is_string(fmt) || strcmp(json_string_value(fmt), form))) {
        fprintf(stderr, "tensormorph: recipe %s: \"format\" is %s, but OUT asks for %s output\n", path,
                json_is_string(fmt) ? json_string_value(fmt) : "not a string", form);
        json_decref(r);
        return EXIT_INPUT;
    }
    const char *key;
    json_t *val;
    json_object_foreach(r, key, val) {
        int ok = !strcmp(key, "format") || !strcmp(key, "comment") || !strcmp(key, "schema");
        for (size_t i = 0; keys[i] && !ok; i++) ok = !strcmp(key, keys[i]);
        if (!ok) {
            fprintf(stderr, "tensormorph: recipe %s: top level: unknown key \"%s\" for %s output (docs/recipe.md)\n",
                    path, key, form);
            json_decref(r);
            return EXIT_INPUT;
        }
    }
    *out = r;
    return 0;
}

int cli_parse_code_type(const char *s, tm_dtype *d) {
    static const struct { const char *n; tm_dtype d; } t[] = {
        {"int8", TM_I8}, {"uint8", TM_U8}, {"int4", TM_I4}, {"uint4", TM_U4},
        {"fp8_e4m3", TM_F8_E4M3}, {"fp8_e5m2", TM_F8_E5M2}, {"fp8", TM_F8_E4M3},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcasecmp(s, t[i].n)) { *d = t[i].d; return 0; }
    for (int k = 0; k < TM_DTYPE_COUNT; k++) { /* the dtype names manifests write: I8 F8_E4M3 ... */
        const tm_dtype_traits *tr = tm_dtype_get((tm_dtype)k);
        if (tr && tr->is_code && !strcasecmp(s, tr->name)) { *d = (tm_dtype)k; return 0; }
    }
    return -1;
}

int cli_parse_scale_dtype(const char *s, tm_dtype *d) {
    if (!strcasecmp(s, "f32")) *d = TM_F32;
    else if (!strcasecmp(s, "f16")) *d = TM_F16;
    else if (!strcasecmp(s, "bf16")) *d = TM_BF16;
    else return -1;
    return 0;
}

/* json integer in [lo, hi] (4.0 is not an integer here: manifests write integers) */
static int int_in(json_t *v, int64_t lo, int64_t hi, int64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) return -1;
    *out = json_integer_value(v);
    return 0;
}

/* granularity text, then the axis / group_size / block members manifests write beside the kind */
static const char *scheme_gran(json_t *o, tm_qgran *g) {
    json_t *v = json_object_get(o, "granularity"), *ax = json_object_get(o, "axis");
    json_t *gs = json_object_get(o, "group_size"), *bl = json_object_get(o, "block");
    tm_qgran r = *g;
    if (v) {
        const char *t = json_is_string(v) ? json_string_value(v) : "";
        if (!strcmp(t, "group") || !strcmp(t, "block")) { /* the kind alone: sizes from the members */
            memset(&r, 0, sizeof r);
            r.kind = t[0] == 'g' ? TM_GRAN_GROUP : TM_GRAN_BLOCK;
            r.axis = r.kind == TM_GRAN_GROUP ? -1 : 0;
            if (r.kind == TM_GRAN_GROUP ? !gs : !bl) return t[0] == 'g' ? "\"granularity\": \"group\" needs \"group_size\""
                                                                        : "\"granularity\": \"block\" needs \"block\": [H, W]";
        } else if (tm_granularity_parse(t, &r)) {
            return "bad \"granularity\" (tensor | channel[:AXIS] | group:N[:AXIS] | block:HxW)";
        }
    }
    int64_t x, y;
    if (ax) {
        if (r.kind != TM_GRAN_CHANNEL && r.kind != TM_GRAN_GROUP) return "\"axis\" needs a channel or group granularity";
        if (int_in(ax, -1000000, 1000000, &x)) return "bad \"axis\"";
        r.axis = (int)x;
    }
    if (gs && !json_is_null(gs)) {
        if (r.kind != TM_GRAN_GROUP) return "\"group_size\" needs a group granularity";
        if (int_in(gs, 1, INT64_MAX, &x)) return "bad \"group_size\"";
        r.group_size = x;
    }
    if (bl) {
        if (r.kind != TM_GRAN_BLOCK) return "\"block\" needs a block granularity";
        if (!json_is_array(bl) || json_array_size(bl) != 2 || int_in(json_array_get(bl, 0), 1, INT64_MAX, &x) ||
            int_in(json_array_get(bl, 1), 1, INT64_MAX, &y))
            return "\"block\" must be [H, W] with H, W >= 1";
        r.block_h = x;
        r.block_w = y;
    }
    *g = r;
    return NULL;
}

const char *cli_recipe_scheme(json_t *o, tm_qspec *s) {
    static const char *const keys[] = {"type", "granularity", "axis", "group_size", "block", "symmetric",
                                       "observer", "convention", "scale_dtype", "allow_nonfinite",
                                       "targets", "comment", NULL};
    const char *key;
    json_t *val, *v;
    json_object_foreach(o, key, val) {
        size_t i = 0;
        while (keys[i] && strcmp(key, keys[i])) i++;
        if (!keys[i]) return key;
    }
    if ((v = json_object_get(o, "type")) && (!json_is_string(v) || cli_parse_code_type(json_string_value(v), &s->code_dtype)))
        return "bad \"type\"";
    const char *bad = scheme_gran(o, &s->gran);
    if (bad) return bad;
    if ((v = json_object_get(o, "symmetric"))) {
        if (!json_is_boolean(v)) return "\"symmetric\" must be true or false";
        s->symmetric = json_is_true(v);
    }
    if ((v = json_object_get(o, "observer")) && (!json_is_string(v) || cli_parse_observer(json_string_value(v), &s->observer)))
        return "bad \"observer\"";
    if ((v = json_object_get(o, "convention"))) {
        const char *c = json_is_string(v) ? json_string_value(v) : "";
        if (!strcmp(c, "onnx")) s->convention = TM_CONV_ONNX;
        else if (!strcmp(c, "torch")) s->convention = TM_CONV_TORCH;
        else return "\"convention\" must be onnx or torch";
    }
    if ((v = json_object_get(o, "scale_dtype")) && (!json_is_string(v) || cli_parse_scale_dtype(json_string_value(v), &s->scale_dtype)))
        return "bad \"scale_dtype\"";
    if ((v = json_object_get(o, "allow_nonfinite"))) {
        if (!json_is_boolean(v)) return "\"allow_nonfinite\" must be true or false";
        s->allow_nonfinite = json_is_true(v);
    }
    return NULL;
}

int cli_recipe_bool(json_t *r, const char *key, const char *path, int *v) {
    json_t *x = json_object_get(r, key);
    if (!x) return 0;
    if (!json_is_boolean(x)) {
        fprintf(stderr, "tensormorph: recipe %s: \"%s\" must be true or false\n", path, key);
        return EXIT_INPUT;
    }
    *v = json_is_true(x);
    return 0;
}

int cli_recipe_int(json_t *r, const char *key, const char *path, int64_t lo, int64_t hi, int64_t *v) {
    json_t *x = json_object_get(r, key);
    if (!x) return 0;
    if (int_in(x, lo, hi, v)) {
        fprintf(stderr, "tensormorph: recipe %s: \"%s\" must be an integer in [%lld, %lld]\n", path, key,
                (long long)lo, (long long)hi);
        return EXIT_INPUT;
    }
    return 0;
}

int cli_recipe_strings(json_t *r, const char *key, const char *path, const char ***out, int64_t *n) {
    json_t *x = json_object_get(r, key);
    if (!x) return 0;
    size_t m = json_is_array(x) ? json_array_size(x) : 0;
    const char **a = json_is_array(x) ? calloc(m + 1, sizeof *a) : NULL;
    for (size_t i = 0; a && i < m; i++) a[i] = json_string_value(json_array_get(x, i));
    for (size_t i = 0; a && i < m; i++)
        if (!a[i]) { free(a); a = NULL; }
    if (!a) {
        fprintf(stderr, "tensormorph: recipe %s: \"%s\" must be an array of strings\n", path, key);
        return EXIT_INPUT;
    }
    free(*out);
    *out = a;
    *n = (int64_t)m;
    return 0;
}

int cli_recipe_record(json_t *r, const char *key, json_type type, const char *path) {
    json_t *x = json_object_get(r, key);
    if (!x || json_typeof(x) == type || json_is_null(x)) return 0;
    fprintf(stderr, "tensormorph: recipe %s: \"%s\" has the wrong JSON type (docs/recipe.md)\n", path, key);
    return EXIT_INPUT;
}
