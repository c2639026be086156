/* jschema.c: JSON Schema 2020-12 subset validator and the embedded docs/schemas (jschema.h). */
#include "jschema.h"

#include <math.h>
#include <stdio.h>

#define JS_MAX_DEPTH 128
#define JS_PATH_MAX 400

typedef struct js_ctx {
    const json_t *root;     /* the root schema: $ref "#/$defs/NAME" resolves here */
    const char *doc_name;
    tm_err *err;
    char path[JS_PATH_MAX]; /* "$", "$.models.baseline", "$.latency_ms[3]" ...      */
    size_t plen;
    int depth;
} js_ctx;

/* A violation of the schema by the document: "<doc_name>: <path>: <reason>". */
static tm_status js_fail(js_ctx *c, tm_status code, const char *fmt, ...) TM_PRINTF(3, 4);
static tm_status js_fail(js_ctx *c, tm_status code, const char *fmt, ...) {
    char why[TM_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return tm__err_set(c->err, code, -1, "%s: %s: %s", c->doc_name, c->path, why);
}

/* A fault in the schema itself (never the document's). */
static tm_status js_bad_schema(js_ctx *c, tm_status code, const char *kw, const char *why) {
    return tm__err_set(c->err, code, -1, "%s: %s: schema keyword \"%s\": %s", c->doc_name,
                       c->path, kw, why);
}

/* Path building: push returns the old length to restore with js_pop. On overflow the path
** ends in "..." (still a usable message). */
static size_t js_push_key(js_ctx *c, const char *key) {
    size_t old = c->plen;
    int ident = (key[0] != '\0') && !(key[0] >= '0' && key[0] <= '9');
    for (const char *p = key; *p && ident; p++)
        ident = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                (*p >= '0' && *p <= '9') || *p == '_';
    char buf[JS_PATH_MAX];
    size_t n = 0;
    if (ident) {
        n = (size_t)snprintf(buf, sizeof buf, ".%s", key);
    } else {
        buf[n++] = '[';
        buf[n++] = '"';
        for (const char *p = key; *p && n < sizeof buf - 4; p++) {
            if (*p == '"' || *p == '\\') buf[n++] = '\\';
            buf[n++] = *p;
        }
        buf[n++] = '"';
        buf[n++] = ']';
        buf[n] = '\0';
    }
    if (n >= sizeof buf) n = sizeof buf - 1;
    if (c->plen + n + 4 >= sizeof c->path) {
        if (c->plen + 4 < sizeof c->path) { memcpy(c->path + c->plen, "...", 4); c->plen += 3; }
        return old;
    }
    memcpy(c->path + c->plen, buf, n + 1);
    c->plen += n;
    return old;
}

static size_t js_push_index(js_ctx *c, size_t i) {
    char key[32];
    size_t old = c->plen;
    int n = snprintf(key, sizeof key, "[%zu]", i);
    if (c->plen + (size_t)n + 4 >= sizeof c->path) {
        if (c->plen + 4 < sizeof c->path) { memcpy(c->path + c->plen, "...", 4); c->plen += 3; }
        return old;
    }
    memcpy(c->path + c->plen, key, (size_t)n + 1);
    c->plen += (size_t)n;
    return old;
}

static void js_pop(js_ctx *c, size_t old) {
    c->plen = old;
    c->path[old] = '\0';
}

static int js_is_integral(const json_t *v) {
    if (json_is_integer(v)) return 1;
    if (!json_is_real(v)) return 0;
    double d = json_real_value(v);
    return isfinite(d) && floor(d) == d;
}

const char *tm__json_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE: case JSON_FALSE: return "boolean";
    case JSON_NULL: return "null";
    }
    return "unknown";
}

/* 1 when v has type `name`, 0 when not, -1 when name is no JSON Schema type. */
static int js_type_matches(const char *name, const json_t *v) {
    if (!strcmp(name, "object")) return json_is_object(v);
    if (!strcmp(name, "array")) return json_is_array(v);
    if (!strcmp(name, "string")) return json_is_string(v);
    if (!strcmp(name, "number")) return json_is_number(v);
    if (!strcmp(name, "integer")) return js_is_integral(v);
    if (!strcmp(name, "boolean")) return json_is_boolean(v);
    if (!strcmp(name, "null")) return json_is_null(v);
    return -1;
}

/* A short rendering of a value for messages (at most ~60 characters). */
static void js_show(const json_t *v, char *out, size_t cap) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) { snprintf(out, cap, "(%s)", tm__json_type_name(v)); return; }
    if (strlen(s) > 60) snprintf(out, cap, "%.57s...", s);
    else snprintf(out, cap, "%s", s);
    free(s);
}

/* JSON numbers compared as equal under JSON Schema (1 == 1.0), else jansson's json_equal. */
static int js_equal(const json_t *a, const json_t *b) {
    if (json_is_number(a) && json_is_number(b)) {
        if (json_is_integer(a) && json_is_integer(b))
            return json_integer_value(a) == json_integer_value(b);
        return json_number_value(a) == json_number_value(b);
    }
    return json_equal((json_t *)a, (json_t *)b);
}

/* Unicode code points in a UTF-8 string (jansson strings are valid UTF-8). */
static size_t js_utf8_len(const char *s, size_t nbytes) {
    size_t n = 0;
    for (size_t i = 0; i < nbytes; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) n++;
    return n;
}

static const char *const js_known[] = {
    "type", "properties", "required", "additionalProperties", "items", "enum", "const",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems",
    "minLength", "maxLength", "minProperties", "maxProperties", "propertyNames", "$ref", "$defs",
    "if", "then", "else",
    /* annotations: no effect on validation */
    "$schema", "$id", "$comment", "title", "description", "default", "examples",
};

/* 1 when key is a keyword of the supported subset (or an annotation). */
static int js_is_known(const char *key) {
    for (size_t k = 0; k < sizeof js_known / sizeof js_known[0]; k++)
        if (!strcmp(key, js_known[k])) return 1;
    return 0;
}

static tm_status js_validate(js_ctx *c, const json_t *schema, const json_t *doc);

static tm_status js_ref(js_ctx *c, const json_t *ref, const json_t *doc) {
    if (!json_is_string(ref)) return js_bad_schema(c, TM_E_INVALID_ARG, "$ref", "must be a string");
    const char *r = json_string_value(ref);
    const json_t *target = NULL;
    if (!strcmp(r, "#")) {
        target = c->root;
    } else if (!strncmp(r, "#/$defs/", 8)) {
        const json_t *defs = json_object_get(c->root, "$defs");
        target = defs ? json_object_get(defs, r + 8) : NULL;
    } else {
        return js_bad_schema(c, TM_E_UNSUPPORTED, "$ref", "only \"#\" and \"#/$defs/NAME\" are supported");
    }
    if (!target) {
        char why[TM_ERR_MSG_MAX];
        snprintf(why, sizeof why, "\"%.200s\" does not resolve in the root schema", r);
        return js_bad_schema(c, TM_E_INVALID_ARG, "$ref", why);
    }
    return js_validate(c, target, doc);
}

static tm_status js_number_bounds(js_ctx *c, const json_t *schema, const json_t *doc) {
    static const struct { const char *kw; int excl, upper; } b[] = {
        {"minimum", 0, 0}, {"exclusiveMinimum", 1, 0}, {"maximum", 0, 1}, {"exclusiveMaximum", 1, 1},
    };
    for (size_t k = 0; k < sizeof b / sizeof b[0]; k++) {
        const json_t *lim = json_object_get(schema, b[k].kw);
        if (!lim) continue;
        if (!json_is_number(lim)) return js_bad_schema(c, TM_E_INVALID_ARG, b[k].kw, "must be a number");
        double x = json_number_value(doc), l = json_number_value(lim);
        int ok;
        if (json_is_integer(doc) && json_is_integer(lim)) {
            json_int_t xi = json_integer_value(doc), li = json_integer_value(lim);
            ok = b[k].upper ? (b[k].excl ? xi < li : xi <= li) : (b[k].excl ? xi > li : xi >= li);
        } else {
            ok = b[k].upper ? (b[k].excl ? x < l : x <= l) : (b[k].excl ? x > l : x >= l);
        }
        if (!ok) {
            char sx[80], sl[80];
            js_show(doc, sx, sizeof sx);
            js_show(lim, sl, sizeof sl);
            return js_fail(c, TM_E_CORRUPT, "%s is %s %s (%s)", sx,
                           b[k].upper ? (b[k].excl ? "not less than" : "greater than")
                                      : (b[k].excl ? "not greater than" : "less than"),
                           sl, b[k].kw);
        }
    }
    return TM_OK;
}

static tm_status js_count_kw(js_ctx *c, const json_t *schema, const char *kw, size_t have,
                             int upper, const char *what) {
    const json_t *lim = json_object_get(schema, kw);
    if (!lim) return TM_OK;
    if (!json_is_integer(lim) || json_integer_value(lim) < 0)
        return js_bad_schema(c, TM_E_INVALID_ARG, kw, "must be a non-negative integer");
    json_int_t l = json_integer_value(lim);
    if (upper ? (json_int_t)have > l : (json_int_t)have < l)
        return js_fail(c, TM_E_CORRUPT, "%s %zu %s, %s %s %lld", what, have,
                       !strcmp(what, "array has") ? "items" : !strcmp(what, "object has") ? "properties" : "characters",
                       upper ? "more than" : "fewer than", kw, (long long)l);
    return TM_OK;
}

static tm_status js_object(js_ctx *c, const json_t *schema, const json_t *doc) {
    tm_status cst;
    if ((cst = js_count_kw(c, schema, "minProperties", json_object_size(doc), 0, "object has")) != TM_OK) return cst;
    if ((cst = js_count_kw(c, schema, "maxProperties", json_object_size(doc), 1, "object has")) != TM_OK) return cst;
    const json_t *pnames = json_object_get(schema, "propertyNames");
    if (pnames && !json_is_object(pnames) && !json_is_boolean(pnames))
        return js_bad_schema(c, TM_E_INVALID_ARG, "propertyNames", "must be a schema");
    if (pnames) {
        /* each key validated as a string instance (2020-12 Core, "propertyNames"); the path names the key */
        const char *pk;
        json_t *pv;
        json_object_foreach((json_t *)doc, pk, pv) {
            (void)pv;
            json_t *ks = json_stringn(pk, strlen(pk));
            if (!ks) return tm__err_set(c->err, TM_E_NOMEM, -1, "out of memory");
            size_t old = js_push_key(c, pk);
            tm_status st = js_validate(c, pnames, ks);
            json_decref(ks);
            if (st != TM_OK && c->err) {
                char why[TM_ERR_MSG_MAX];
                snprintf(why, sizeof why, "%s", c->err->msg);
                return tm__err_set(c->err, st, -1, "%s (the property name)", why);
            }
            if (st != TM_OK) return st;
            js_pop(c, old);
        }
    }
    const json_t *req = json_object_get(schema, "required");
    if (req) {
        if (!json_is_array(req)) return js_bad_schema(c, TM_E_INVALID_ARG, "required", "must be an array of strings");
        for (size_t i = 0; i < json_array_size(req); i++) {
            const json_t *k = json_array_get(req, i);
            if (!json_is_string(k)) return js_bad_schema(c, TM_E_INVALID_ARG, "required", "must be an array of strings");
            if (!json_object_get(doc, json_string_value(k)))
                return js_fail(c, TM_E_CORRUPT, "missing required property \"%s\"", json_string_value(k));
        }
    }
    const json_t *props = json_object_get(schema, "properties");
    if (props && !json_is_object(props)) return js_bad_schema(c, TM_E_INVALID_ARG, "properties", "must be an object");
    const json_t *addl = json_object_get(schema, "additionalProperties");
    if (addl && !json_is_object(addl) && !json_is_boolean(addl))
        return js_bad_schema(c, TM_E_INVALID_ARG, "additionalProperties", "must be a boolean or a schema");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)doc, key, val) {
        const json_t *sub = props ? json_object_get(props, key) : NULL;
        size_t old = js_push_key(c, key);
        tm_status st = TM_OK;
        if (sub) {
            st = js_validate(c, sub, val);
        } else if (addl && json_is_false(addl)) {
            js_pop(c, old);
            return js_fail(c, TM_E_CORRUPT, "property \"%s\" is not allowed here", key);
        } else if (addl && json_is_object(addl)) {
            st = js_validate(c, addl, val);
        }
        if (st != TM_OK) return st;
        js_pop(c, old);
    }
    return TM_OK;
}

static tm_status js_validate(js_ctx *c, const json_t *schema, const json_t *doc) {
    if (json_is_true(schema)) return TM_OK;
    if (json_is_false(schema)) return js_fail(c, TM_E_CORRUPT, "no value is allowed here");
    if (!json_is_object(schema))
        return tm__err_set(c->err, TM_E_INVALID_ARG, -1, "%s: %s: schema is neither an object nor a boolean",
                           c->doc_name, c->path);
    if (c->depth >= JS_MAX_DEPTH)
        return tm__err_set(c->err, TM_E_LIMIT, -1, "%s: %s: schema nesting deeper than %d levels",
                           c->doc_name, c->path, JS_MAX_DEPTH);
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)schema, key, val) {
        if (!js_is_known(key)) return js_bad_schema(c, TM_E_UNSUPPORTED, key, "not in the supported subset (src/core/jschema.h)");
    }
    c->depth++;
    tm_status st = TM_OK;
    const json_t *ref = json_object_get(schema, "$ref");
    if (ref && (st = js_ref(c, ref, doc)) != TM_OK) goto out;

    const json_t *type = json_object_get(schema, "type");
    if (type) {
        int ok = 0;
        char want[160] = "";
        size_t wl = 0;
        size_t nt = json_is_array(type) ? json_array_size(type) : 1;
        if (!json_is_array(type) && !json_is_string(type)) { st = js_bad_schema(c, TM_E_INVALID_ARG, "type", "must be a string or an array of strings"); goto out; }
        for (size_t i = 0; i < nt; i++) {
            const json_t *t = json_is_array(type) ? json_array_get(type, i) : type;
            int m = json_is_string(t) ? js_type_matches(json_string_value(t), doc) : -1;
            if (m < 0) { st = js_bad_schema(c, TM_E_INVALID_ARG, "type", "names an unknown type"); goto out; }
            ok |= m;
            if (wl < sizeof want)
                wl += (size_t)snprintf(want + wl, sizeof want - wl, "%s%s", i ? " or " : "", json_string_value(t));
        }
        if (!ok) { st = js_fail(c, TM_E_CORRUPT, "expected %s, got %s", want, tm__json_type_name(doc)); goto out; }
    }
    const json_t *cst = json_object_get(schema, "const");
    if (cst && !js_equal(cst, doc)) {
        char sv[80], sc[80];
        js_show(doc, sv, sizeof sv);
        js_show(cst, sc, sizeof sc);
        st = js_fail(c, TM_E_CORRUPT, "%s is not the required constant %s", sv, sc);
        goto out;
    }
    const json_t *en = json_object_get(schema, "enum");
    if (en) {
        if (!json_is_array(en)) { st = js_bad_schema(c, TM_E_INVALID_ARG, "enum", "must be an array"); goto out; }
        int found = 0;
        for (size_t i = 0; i < json_array_size(en) && !found; i++) found = js_equal(json_array_get(en, i), doc);
        if (!found) {
            char sv[80], se[80];
            js_show(doc, sv, sizeof sv);
            js_show(en, se, sizeof se);
            st = js_fail(c, TM_E_CORRUPT, "%s is not one of %s", sv, se);
            goto out;
        }
    }
    if (json_is_number(doc) && (st = js_number_bounds(c, schema, doc)) != TM_OK) goto out;
    if (json_is_string(doc)) {
        size_t n = js_utf8_len(json_string_value(doc), json_string_length(doc));
        if ((st = js_count_kw(c, schema, "minLength", n, 0, "string has")) != TM_OK) goto out;
        if ((st = js_count_kw(c, schema, "maxLength", n, 1, "string has")) != TM_OK) goto out;
    }
    if (json_is_object(doc) && (st = js_object(c, schema, doc)) != TM_OK) goto out;
    const json_t *cond = json_object_get(schema, "if");
    if (cond) { /* 2020-12 "if"/"then"/"else": the "if" outcome only selects, never fails */
        tm_err scratch;
        tm_err *keep = c->err;
        size_t old = c->plen;
        c->err = &scratch;
        tm_status ci = js_validate(c, cond, doc);
        c->err = keep;
        js_pop(c, old);
        if (ci != TM_OK && ci != TM_E_CORRUPT) { st = tm__err_set(c->err, ci, -1, "%s", scratch.msg); goto out; }
        const json_t *branch = json_object_get(schema, ci == TM_OK ? "then" : "else");
        if (branch && (st = js_validate(c, branch, doc)) != TM_OK) goto out;
    }
    if (json_is_array(doc)) {
        size_t n = json_array_size(doc);
        if ((st = js_count_kw(c, schema, "minItems", n, 0, "array has")) != TM_OK) goto out;
        if ((st = js_count_kw(c, schema, "maxItems", n, 1, "array has")) != TM_OK) goto out;
        const json_t *items = json_object_get(schema, "items");
        if (items && !json_is_object(items) && !json_is_boolean(items)) {
            st = js_bad_schema(c, TM_E_INVALID_ARG, "items", "must be a schema (tuple forms are not supported)");
            goto out;
        }
        for (size_t i = 0; items && i < n; i++) {
            size_t old = js_push_index(c, i);
            if ((st = js_validate(c, items, json_array_get(doc, i))) != TM_OK) goto out;
            js_pop(c, old);
        }
    }
out:
    c->depth--;
    return st;
}

/* ---- checking a schema by itself ------------------------------------------------------- */

typedef struct js_check {
    const json_t *root;
    const char *name;
    tm_err *err;
    char path[JS_PATH_MAX];
} js_check;

static tm_status jc_fail(js_check *c, tm_status code, const char *kw, const char *why) {
    return tm__err_set(c->err, code, -1, "%s: %s: \"%s\": %s", c->name, c->path, kw, why);
}

static int jc_is_type_name(const json_t *t) {
    static const char *const names[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
    if (!json_is_string(t)) return 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(json_string_value(t), names[i])) return 1;
    return 0;
}

static tm_status jc_walk(js_check *c, const json_t *s, int depth);

/* Recurse into child `sub` with "/<seg>" (or "/<seg>/<key>") appended to the schema path. */
static tm_status jc_child(js_check *c, const json_t *sub, const char *seg, const char *key, int depth) {
    size_t old = strlen(c->path);
    snprintf(c->path + old, sizeof c->path - old, "/%s%s%s", seg, key ? "/" : "", key ? key : "");
    tm_status st = jc_walk(c, sub, depth + 1);
    if (st == TM_OK) c->path[old] = '\0';
    return st;
}

static tm_status jc_walk(js_check *c, const json_t *s, int depth) {
    if (json_is_boolean(s)) return TM_OK;
    if (!json_is_object(s)) return jc_fail(c, TM_E_INVALID_ARG, "(schema)", "is neither an object nor a boolean");
    if (depth >= JS_MAX_DEPTH) return jc_fail(c, TM_E_LIMIT, "(schema)", "nested too deeply");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v) {
        if (!js_is_known(key)) return jc_fail(c, TM_E_UNSUPPORTED, key, "not in the supported subset (src/core/jschema.h)");
        if (!strcmp(key, "type")) {
            int ok = jc_is_type_name(v);
            if (json_is_array(v)) {
                ok = json_array_size(v) > 0;
                for (size_t i = 0; i < json_array_size(v); i++) ok &= jc_is_type_name(json_array_get(v, i));
            }
            if (!ok) return jc_fail(c, TM_E_INVALID_ARG, key, "must name JSON Schema types");
        } else if (!strcmp(key, "required")) {
            int ok = json_is_array(v);
            for (size_t i = 0; ok && i < json_array_size(v); i++) ok = json_is_string(json_array_get(v, i));
            if (!ok) return jc_fail(c, TM_E_INVALID_ARG, key, "must be an array of strings");
        } else if (!strcmp(key, "enum")) {
            if (!json_is_array(v)) return jc_fail(c, TM_E_INVALID_ARG, key, "must be an array");
        } else if (!strcmp(key, "minimum") || !strcmp(key, "maximum") || !strcmp(key, "exclusiveMinimum") ||
                   !strcmp(key, "exclusiveMaximum")) {
            if (!json_is_number(v)) return jc_fail(c, TM_E_INVALID_ARG, key, "must be a number");
        } else if (!strcmp(key, "minItems") || !strcmp(key, "maxItems") || !strcmp(key, "minLength") ||
                   !strcmp(key, "maxLength") || !strcmp(key, "minProperties") || !strcmp(key, "maxProperties")) {
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                return jc_fail(c, TM_E_INVALID_ARG, key, "must be a non-negative integer");
        } else if (!strcmp(key, "$ref")) {
            const char *r = json_string_value(v);
            const json_t *defs = json_object_get(c->root, "$defs");
            if (!r || (strcmp(r, "#") && (strncmp(r, "#/$defs/", 8) || !defs || !json_object_get(defs, r + 8))))
                return jc_fail(c, TM_E_INVALID_ARG, key, "must be \"#\" or \"#/$defs/NAME\" naming a root $defs entry");
        } else if (!strcmp(key, "properties") || !strcmp(key, "$defs")) {
            if (!json_is_object(v)) return jc_fail(c, TM_E_INVALID_ARG, key, "must be an object of schemas");
            const char *pk;
            json_t *ps;
            json_object_foreach(v, pk, ps) {
                tm_status st = jc_child(c, ps, key, pk, depth);
                if (st) return st;
            }
        } else if (!strcmp(key, "additionalProperties") || !strcmp(key, "items") || !strcmp(key, "propertyNames") ||
                   !strcmp(key, "if") || !strcmp(key, "then") || !strcmp(key, "else")) {
            tm_status st = jc_child(c, v, key, NULL, depth);
            if (st) return st;
        }
    }
    return TM_OK;
}

tm_status tm__jschema_check_schema(const json_t *schema, const char *name, tm_err *err) {
    if (!schema) return tm__err_set(err, TM_E_INVALID_ARG, -1, "jschema: NULL schema");
    js_check c = {.root = schema, .name = name ? name : "schema", .err = err, .path = "#"};
    return jc_walk(&c, schema, 0);
}

tm_status tm__jschema_validate(const json_t *schema, const json_t *doc, const char *doc_name,
                               tm_err *err) {
    if (!schema || !doc)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "jschema: NULL %s", schema ? "document" : "schema");
    js_ctx c = {.root = schema, .doc_name = doc_name ? doc_name : "document", .err = err, .path = "$", .plen = 1};
    return js_validate(&c, schema, doc);
}

const char *tm__schema_text(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < tm__n_schema_blobs; i++)
        if (!strcmp(tm__schema_blobs[i].name, name)) return tm__schema_blobs[i].text;
    return NULL;
}

tm_status tm__jschema_validate_named(const char *name, const json_t *doc, const char *doc_name,
                                     tm_err *err) {
    const char *text = tm__schema_text(name);
    if (!text)
        return tm__err_set(err, TM_E_INTERNAL, -1, "schema \"%s\" is not compiled into this build "
                           "(docs/schemas/%s.schema.json)", name ? name : "(null)", name ? name : "");
    json_error_t je;
    json_t *schema = json_loads(text, 0, &je);
    if (!schema)
        return tm__err_set(err, TM_E_INTERNAL, -1, "docs/schemas/%s.schema.json: line %d: %s", name,
                           je.line, je.text);
    tm_status st = tm__jschema_validate(schema, doc, doc_name, err);
    json_decref(schema);
    return st;
}

/* ---- reading integers ----------------------------------------------------------------- */

tm_status tm__json_int(const json_t *v, const char *doc_name, const char *json_path, json_int_t *out, tm_err *err) {
    const char *dn = doc_name ? doc_name : "document", *jp = json_path ? json_path : "$";
    if (json_is_integer(v)) { *out = json_integer_value(v); return TM_OK; }
    if (!v) return tm__err_set(err, TM_E_CORRUPT, -1, "%s: %s: missing (an integer is required)", dn, jp);
    if (!json_is_real(v)) return tm__err_set(err, TM_E_CORRUPT, -1, "%s: %s: expected an integer, got %s", dn, jp, tm__json_type_name(v));
    double d = json_real_value(v);
    if (!isfinite(d) || floor(d) != d)
        return tm__err_set(err, TM_E_CORRUPT, -1, "%s: %s: %.17g is not an integer (it has a fractional part)", dn, jp, d);
    /* json_int_t is long long: the doubles exactly representable in it are [-2^63, 2^63) */
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
        return tm__err_set(err, TM_E_CORRUPT, -1, "%s: %s: %.17g is outside the 64-bit integer range", dn, jp, d);
    *out = (json_int_t)d;
    return TM_OK;
}
