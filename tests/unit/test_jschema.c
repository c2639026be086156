/* test_jschema.c: the JSON Schema subset validator (src/core/jschema.c) keyword by keyword,
** including the JSON path and reason of each failure, and the schemas compiled into the library
** (docs/schemas/NAME.schema.json) against valid and invalid documents. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/jschema.h"

static json_t *J(const char *text) {
    json_error_t je;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
    if (!v) print_message("bad test JSON: %s: %s\n", text, je.text);
    assert_non_null(v);
    return v;
}

/* Validate doc against schema (both JSON text); return the status, message in msg. */
static tm_status check(const char *schema, const char *doc, char *msg, size_t cap) {
    json_t *s = J(schema), *d = J(doc);
    tm_err err;
    tm_err_clear(&err);
    tm_status st = tm__jschema_validate(s, d, "doc.json", &err);
    snprintf(msg, cap, "%s", err.msg);
    assert_int_equal(err.code, st);
    json_decref(s);
    json_decref(d);
    return st;
}

static void expect_ok(const char *schema, const char *doc) {
    char msg[TM_ERR_MSG_MAX];
    tm_status st = check(schema, doc, msg, sizeof msg);
    if (st != TM_OK) print_message("unexpected failure: schema %s doc %s: %s\n", schema, doc, msg);
    assert_int_equal(st, TM_OK);
}

/* Expect `code` and exactly the message `want`. */
static void expect_fail(const char *schema, const char *doc, tm_status code, const char *want) {
    char msg[TM_ERR_MSG_MAX];
    tm_status st = check(schema, doc, msg, sizeof msg);
    if (st != code || strcmp(msg, want))
        print_message("schema %s doc %s:\n  got  %d \"%s\"\n  want %d \"%s\"\n", schema, doc, st, msg,
                      code, want);
    assert_int_equal(st, code);
    assert_string_equal(msg, want);
}

static void test_type(void **state) {
    (void)state;
    expect_ok("{\"type\":\"string\"}", "\"a\"");
    expect_ok("{\"type\":\"integer\"}", "3");
    expect_ok("{\"type\":\"integer\"}", "3.0"); /* zero fractional part is an integer (2020-12) */
    expect_ok("{\"type\":\"number\"}", "3");
    expect_ok("{\"type\":[\"number\",\"null\"]}", "null");
    expect_ok("{\"type\":\"boolean\"}", "false");
    expect_ok("{\"type\":\"array\"}", "[]");
    expect_ok("{\"type\":\"object\"}", "{}");
    expect_fail("{\"type\":\"integer\"}", "3.5", TM_E_CORRUPT, "doc.json: $: expected integer, got number");
    expect_fail("{\"type\":\"string\"}", "1", TM_E_CORRUPT, "doc.json: $: expected string, got integer");
    expect_fail("{\"type\":[\"number\",\"null\"]}", "\"x\"", TM_E_CORRUPT,
                "doc.json: $: expected number or null, got string");
    expect_fail("{\"type\":\"null\"}", "true", TM_E_CORRUPT, "doc.json: $: expected null, got boolean");
    expect_fail("{\"type\":\"float\"}", "1", TM_E_INVALID_ARG,
                "doc.json: $: schema keyword \"type\": names an unknown type");
}

static void test_properties_required_additional(void **state) {
    (void)state;
    const char *s = "{\"type\":\"object\",\"required\":[\"a\",\"b\"],\"additionalProperties\":false,"
                    "\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"object\","
                    "\"properties\":{\"c\":{\"type\":\"string\"}}}}}";
    expect_ok(s, "{\"a\":1,\"b\":{\"c\":\"x\",\"other\":1}}");
    expect_fail(s, "{\"a\":1}", TM_E_CORRUPT, "doc.json: $: missing required property \"b\"");
    expect_fail(s, "{\"a\":1,\"b\":{\"c\":2}}", TM_E_CORRUPT, "doc.json: $.b.c: expected string, got integer");
    expect_fail(s, "{\"a\":1,\"b\":{},\"zz\":0}", TM_E_CORRUPT,
                "doc.json: $: property \"zz\" is not allowed here");
    /* additionalProperties as a schema; keys that are not identifiers are bracketed */
    const char *m = "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\",\"minimum\":0}}";
    expect_ok(m, "{\"Conv\":3,\"a b\":0}");
    expect_fail(m, "{\"Conv\":3,\"a \\\"b\":-1}", TM_E_CORRUPT,
                "doc.json: $[\"a \\\"b\"]: -1 is less than 0 (minimum)");
    expect_fail(m, "{\"9x\":\"s\"}", TM_E_CORRUPT, "doc.json: $[\"9x\"]: expected integer, got string");
    expect_fail("{\"required\":\"a\"}", "{}", TM_E_INVALID_ARG,
                "doc.json: $: schema keyword \"required\": must be an array of strings");
    /* required does nothing to non-objects */
    expect_ok("{\"required\":[\"a\"]}", "5");
}

static void test_items_and_counts(void **state) {
    (void)state;
    const char *s = "{\"type\":\"object\",\"properties\":{\"models\":{\"type\":\"object\",\"properties\":"
                    "{\"baseline\":{\"type\":\"object\",\"properties\":{\"latency_ms\":{\"type\":\"array\","
                    "\"minItems\":1,\"maxItems\":4,\"items\":{\"type\":\"number\",\"minimum\":0}}}}}}}}";
    expect_ok(s, "{\"models\":{\"baseline\":{\"latency_ms\":[1,2.5,0]}}}");
    expect_fail(s, "{\"models\":{\"baseline\":{\"latency_ms\":[1,2,3,-0.5]}}}", TM_E_CORRUPT,
                "doc.json: $.models.baseline.latency_ms[3]: -0.5 is less than 0 (minimum)");
    expect_fail(s, "{\"models\":{\"baseline\":{\"latency_ms\":[]}}}", TM_E_CORRUPT,
                "doc.json: $.models.baseline.latency_ms: array has 0 items, fewer than minItems 1");
    expect_fail(s, "{\"models\":{\"baseline\":{\"latency_ms\":[1,1,1,1,1]}}}", TM_E_CORRUPT,
                "doc.json: $.models.baseline.latency_ms: array has 5 items, more than maxItems 4");
    expect_fail("{\"items\":false}", "[1]", TM_E_CORRUPT, "doc.json: $[0]: no value is allowed here");
    expect_ok("{\"items\":false}", "[]");
    expect_fail("{\"items\":[{}]}", "[1]", TM_E_INVALID_ARG,
                "doc.json: $: schema keyword \"items\": must be a schema (tuple forms are not supported)");
}

static void test_enum_const(void **state) {
    (void)state;
    expect_ok("{\"enum\":[\"dir\",\"random\"]}", "\"random\"");
    expect_ok("{\"enum\":[1,null]}", "1.0"); /* 1 == 1.0 as JSON numbers */
    expect_fail("{\"enum\":[\"dir\",\"random\"]}", "\"Dir\"", TM_E_CORRUPT,
                "doc.json: $: \"Dir\" is not one of [\"dir\",\"random\"]");
    expect_ok("{\"const\":\"tensormorph.slices/1\"}", "\"tensormorph.slices/1\"");
    expect_fail("{\"const\":\"tensormorph.slices/1\"}", "\"tensormorph.slices/2\"", TM_E_CORRUPT,
                "doc.json: $: \"tensormorph.slices/2\" is not the required constant \"tensormorph.slices/1\"");
    expect_fail("{\"const\":{\"a\":[1]}}", "{\"a\":[2]}", TM_E_CORRUPT,
                "doc.json: $: {\"a\":[2]} is not the required constant {\"a\":[1]}");
}

static void test_number_bounds(void **state) {
    (void)state;
    expect_ok("{\"minimum\":1,\"maximum\":3}", "1");
    expect_ok("{\"minimum\":1,\"maximum\":3}", "3");
    expect_ok("{\"minimum\":1}", "\"not a number: bounds do not apply\"");
    expect_fail("{\"minimum\":1}", "0", TM_E_CORRUPT, "doc.json: $: 0 is less than 1 (minimum)");
    expect_fail("{\"maximum\":1}", "1.5", TM_E_CORRUPT, "doc.json: $: 1.5 is greater than 1 (maximum)");
    expect_fail("{\"exclusiveMinimum\":0}", "0", TM_E_CORRUPT,
                "doc.json: $: 0 is not greater than 0 (exclusiveMinimum)");
    expect_ok("{\"exclusiveMinimum\":0}", "1e-300");
    expect_fail("{\"exclusiveMaximum\":1}", "1.0", TM_E_CORRUPT,
                "doc.json: $: 1.0 is not less than 1 (exclusiveMaximum)");
    /* integers beyond 2^53 compare exactly */
    expect_fail("{\"maximum\":9007199254740992}", "9007199254740993", TM_E_CORRUPT,
                "doc.json: $: 9007199254740993 is greater than 9007199254740992 (maximum)");
    expect_fail("{\"minimum\":\"1\"}", "1", TM_E_INVALID_ARG,
                "doc.json: $: schema keyword \"minimum\": must be a number");
}

static void test_string_length(void **state) {
    (void)state;
    expect_ok("{\"minLength\":2,\"maxLength\":2}", "\"\\u00e9\\u00e9\""); /* 2 code points, 4 bytes */
    expect_fail("{\"minLength\":1}", "\"\"", TM_E_CORRUPT,
                "doc.json: $: string has 0 characters, fewer than minLength 1");
    expect_fail("{\"maxLength\":3}", "\"abcd\"", TM_E_CORRUPT,
                "doc.json: $: string has 4 characters, more than maxLength 3");
    expect_fail("{\"minLength\":-1}", "\"\"", TM_E_INVALID_ARG,
                "doc.json: $: schema keyword \"minLength\": must be a non-negative integer");
}

static void test_ref_defs(void **state) {
    (void)state;
    const char *s = "{\"type\":\"object\",\"additionalProperties\":{\"$ref\":\"#/$defs/model\"},"
                    "\"$defs\":{\"ms\":{\"type\":\"number\",\"minimum\":0},"
                    "\"model\":{\"type\":\"object\",\"required\":[\"p50_ms\"],"
                    "\"properties\":{\"p50_ms\":{\"$ref\":\"#/$defs/ms\"}}}}}";
    expect_ok(s, "{\"baseline\":{\"p50_ms\":1.25}}");
    expect_fail(s, "{\"baseline\":{\"p50_ms\":1},\"candidate\":{\"p50_ms\":-2}}", TM_E_CORRUPT,
                "doc.json: $.candidate.p50_ms: -2 is less than 0 (minimum)");
    expect_fail(s, "{\"candidate\":{}}", TM_E_CORRUPT,
                "doc.json: $.candidate: missing required property \"p50_ms\"");
    expect_fail("{\"$ref\":\"#/$defs/nope\",\"$defs\":{}}", "1", TM_E_INVALID_ARG,
                "doc.json: $: schema keyword \"$ref\": \"#/$defs/nope\" does not resolve in the root schema");
    expect_fail("{\"$ref\":\"other.json#/x\"}", "1", TM_E_UNSUPPORTED,
                "doc.json: $: schema keyword \"$ref\": only \"#\" and \"#/$defs/NAME\" are supported");
    /* a recursive schema: trees of any depth the document has, bounded by the depth limit */
    const char *tree = "{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}";
    expect_ok(tree, "[[[]],[]]");
    expect_fail(tree, "[[1]]", TM_E_CORRUPT, "doc.json: $[0][0]: expected array, got integer");
    char deep[400];
    memset(deep, '[', 150);
    memset(deep + 150, ']', 150);
    deep[300] = '\0';
    char msg[TM_ERR_MSG_MAX];
    assert_int_equal(check(tree, deep, msg, sizeof msg), TM_E_LIMIT);
    assert_non_null(strstr(msg, "schema nesting deeper than 128 levels"));
}

static void test_unsupported_and_annotations(void **state) {
    (void)state;
    expect_ok("{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"title\":\"t\","
              "\"description\":\"d\",\"$comment\":\"c\",\"default\":1,\"examples\":[1],\"$id\":\"x\"}", "1");
    expect_fail("{\"pattern\":\"^a\"}", "\"a\"", TM_E_UNSUPPORTED,
                "doc.json: $: schema keyword \"pattern\": not in the supported subset (src/core/jschema.h)");
    expect_fail("{\"properties\":{\"a\":{\"oneOf\":[]}}}", "{\"a\":1}", TM_E_UNSUPPORTED,
                "doc.json: $.a: schema keyword \"oneOf\": not in the supported subset (src/core/jschema.h)");
    expect_ok("true", "{\"anything\":[1]}");
    expect_fail("false", "1", TM_E_CORRUPT, "doc.json: $: no value is allowed here");
    tm_err err;
    assert_int_equal(tm__jschema_validate(NULL, NULL, "x", &err), TM_E_INVALID_ARG);
}

/* if/then/else: "then" applies when the document matches "if", "else" otherwise; a mismatch of
** "if" is never reported; the error of the branch names the document path. */
static void test_if_then_else(void **state) {
    (void)state;
    const char *sch = "{\"type\":\"object\",\"if\":{\"properties\":{\"kind\":{\"const\":\"llm\"}}},"
                      "\"then\":{\"required\":[\"llm\"]},\"else\":{\"required\":[\"drift\"],\"properties\":{\"llm\":false}}}";
    expect_ok(sch, "{\"kind\":\"llm\",\"llm\":{}}");
    expect_ok(sch, "{\"kind\":\"onnx\",\"drift\":1}");
    expect_fail(sch, "{\"kind\":\"llm\",\"drift\":1}", TM_E_CORRUPT, "doc.json: $: missing required property \"llm\"");
    expect_fail(sch, "{\"kind\":\"onnx\",\"drift\":1,\"llm\":{}}", TM_E_CORRUPT, "doc.json: $.llm: no value is allowed here");
    expect_fail("{\"properties\":{\"a\":{\"if\":{\"type\":\"string\"},\"then\":{\"minLength\":2}}}}", "{\"a\":\"x\"}",
                TM_E_CORRUPT, "doc.json: $.a: string has 1 characters, fewer than minLength 2");
    expect_ok("{\"properties\":{\"a\":{\"if\":{\"type\":\"string\"},\"then\":{\"minLength\":2}}}}", "{\"a\":7}");
}

/* minProperties / maxProperties count an object's keys; propertyNames validates each key as a
** string (JSON Schema 2020-12 Validation 6.5.1-2, Core 10.3.2.4) */
static void test_object_counts_and_property_names(void **state) {
    (void)state;
    expect_ok("{\"minProperties\":1}", "{\"a\":1}");
    expect_ok("{\"minProperties\":1}", "[]"); /* only objects are counted */
    expect_fail("{\"minProperties\":1}", "{}", TM_E_CORRUPT, "doc.json: $: object has 0 properties, fewer than minProperties 1");
    expect_fail("{\"properties\":{\"t\":{\"minProperties\":2}}}", "{\"t\":{\"a\":1}}", TM_E_CORRUPT,
                "doc.json: $.t: object has 1 properties, fewer than minProperties 2");
    expect_ok("{\"maxProperties\":1}", "{\"a\":1}");
    expect_fail("{\"maxProperties\":1}", "{\"a\":1,\"b\":2}", TM_E_CORRUPT, "doc.json: $: object has 2 properties, more than maxProperties 1");
    expect_ok("{\"propertyNames\":{\"minLength\":1}}", "{\"a\":[]}");
    expect_fail("{\"propertyNames\":{\"minLength\":1}}", "{\"a\":1,\"\":2}", TM_E_CORRUPT,
                "doc.json: $[\"\"]: string has 0 characters, fewer than minLength 1 (the property name)");
    expect_fail("{\"propertyNames\":{\"maxLength\":3}}", "{\"long key\":1}", TM_E_CORRUPT,
                "doc.json: $[\"long key\"]: string has 8 characters, more than maxLength 3 (the property name)");
    expect_fail("{\"propertyNames\":{\"enum\":[\"a\",\"b\"]}}", "{\"c\":1}", TM_E_CORRUPT,
                "doc.json: $.c: \"c\" is not one of [\"a\",\"b\"] (the property name)");
    expect_fail("{\"propertyNames\":false}", "{\"c\":1}", TM_E_CORRUPT, "doc.json: $.c: no value is allowed here (the property name)");
    expect_ok("{\"propertyNames\":false}", "{}");
    expect_fail("{\"propertyNames\":3}", "{\"c\":1}", TM_E_INVALID_ARG, "doc.json: $: schema keyword \"propertyNames\": must be a schema");
}

/* tm__json_int: a JSON integer, or a real with a zero fractional part inside int64 */
static void test_json_int(void **state) {
    (void)state;
    static const struct { const char *text; long long want; } ok[] = {
        {"4", 4}, {"4.0", 4}, {"1e12", 1000000000000LL}, {"1000000000000.0", 1000000000000LL}, {"-3.0", -3},
        {"9223372036854775807", 9223372036854775807LL}, {"-9223372036854775808.0", -9223372036854775807LL - 1},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        json_t *v = J(ok[i].text);
        json_int_t x = -1;
        tm_err err;
        tm_err_clear(&err);
        assert_int_equal(tm__json_int(v, "f.json", "$.n", &x, &err), TM_OK);
        assert_true(x == ok[i].want);
        json_decref(v);
    }
    static const struct { const char *text, *msg; } bad[] = {
        {"4.5", "f.json: $.n: 4.5 is not an integer (it has a fractional part)"},
        {"1e300", "f.json: $.n: 1.0000000000000001e+300 is outside the 64-bit integer range"},
        {"9223372036854775808.0", "f.json: $.n: 9.2233720368547758e+18 is outside the 64-bit integer range"},
        {"\"4\"", "f.json: $.n: expected an integer, got string"},
        {"null", "f.json: $.n: expected an integer, got null"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *v = J(bad[i].text);
        json_int_t x = 7;
        tm_err err;
        tm_err_clear(&err);
        assert_int_equal(tm__json_int(v, "f.json", "$.n", &x, &err), TM_E_CORRUPT);
        if (strcmp(err.msg, bad[i].msg)) print_message("got \"%s\"\n", err.msg);
        assert_string_equal(err.msg, bad[i].msg);
        json_decref(v);
    }
    json_int_t x;
    tm_err err;
    assert_int_equal(tm__json_int(NULL, "f.json", "$.n", &x, &err), TM_E_CORRUPT);
    assert_string_equal(err.msg, "f.json: $.n: missing (an integer is required)");
}

static void expect_schema_fault(const char *schema, tm_status code, const char *want) {
    json_t *s = J(schema);
    tm_err err;
    tm_err_clear(&err);
    tm_status st = tm__jschema_check_schema(s, "s.json", &err);
    if (st != code || strcmp(err.msg, want)) print_message("got %d \"%s\"\nwant \"%s\"\n", st, err.msg, want);
    assert_int_equal(st, code);
    assert_string_equal(err.msg, want);
    json_decref(s);
}

static void test_check_schema(void **state) {
    (void)state;
    json_t *s = J("{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/x\"}},"
                  "\"$defs\":{\"x\":{\"type\":[\"integer\",\"null\"],\"minimum\":0}}}");
    tm_err err;
    assert_int_equal(tm__jschema_check_schema(s, "s.json", &err), TM_OK);
    json_decref(s);
    /* found without any document reaching them */
    expect_schema_fault("{\"properties\":{\"a\":{\"items\":{\"pattern\":\"x\"}}}}", TM_E_UNSUPPORTED,
                        "s.json: #/properties/a/items: \"pattern\": not in the supported subset (src/core/jschema.h)");
    expect_schema_fault("{\"additionalProperties\":{\"type\":\"float\"}}", TM_E_INVALID_ARG,
                        "s.json: #/additionalProperties: \"type\": must name JSON Schema types");
    expect_schema_fault("{\"$defs\":{\"m\":{\"$ref\":\"#/$defs/none\"}}}", TM_E_INVALID_ARG,
                        "s.json: #/$defs/m: \"$ref\": must be \"#\" or \"#/$defs/NAME\" naming a root $defs entry");
    expect_schema_fault("{\"required\":[1]}", TM_E_INVALID_ARG, "s.json: #: \"required\": must be an array of strings");
    expect_schema_fault("{\"minItems\":1.5}", TM_E_INVALID_ARG, "s.json: #: \"minItems\": must be a non-negative integer");
    expect_schema_fault("{\"maximum\":\"9\"}", TM_E_INVALID_ARG, "s.json: #: \"maximum\": must be a number");
    expect_schema_fault("{\"enum\":{}}", TM_E_INVALID_ARG, "s.json: #: \"enum\": must be an array");
    expect_schema_fault("{\"minProperties\":-1}", TM_E_INVALID_ARG, "s.json: #: \"minProperties\": must be a non-negative integer");
    expect_schema_fault("{\"propertyNames\":{\"pattern\":\"x\"}}", TM_E_UNSUPPORTED,
                        "s.json: #/propertyNames: \"pattern\": not in the supported subset (src/core/jschema.h)");
    expect_schema_fault("{\"properties\":{\"a\":3}}", TM_E_INVALID_ARG,
                        "s.json: #/properties/a: \"(schema)\": is neither an object nor a boolean");
}

/* Every schema compiled into the library (docs/schemas/NAME.schema.json, whoever wrote it) is
** JSON and uses only the supported subset. */
static void test_every_embedded_schema_checks(void **state) {
    (void)state;
    assert_true(tm__n_schema_blobs >= 3);
    for (size_t i = 0; i < tm__n_schema_blobs; i++) {
        json_error_t je;
        json_t *s = json_loads(tm__schema_blobs[i].text, 0, &je);
        if (!s) print_message("docs/schemas/%s.schema.json: line %d: %s\n", tm__schema_blobs[i].name, je.line, je.text);
        assert_non_null(s);
        assert_ptr_equal(tm__schema_text(tm__schema_blobs[i].name), tm__schema_blobs[i].text);
        tm_err err;
        tm_status st = tm__jschema_check_schema(s, tm__schema_blobs[i].name, &err);
        if (st) print_message("%s\n", err.msg);
        assert_int_equal(st, TM_OK);
        json_decref(s);
    }
}

/* ---- the schemas compiled into the library ---------------------------------------------- */

static tm_status named(const char *name, const char *doc, char *msg, size_t cap) {
    json_t *d = J(doc);
    tm_err err;
    tm_err_clear(&err);
    tm_status st = tm__jschema_validate_named(name, d, name, &err);
    snprintf(msg, cap, "%s", err.msg);
    json_decref(d);
    return st;
}

static void named_ok(const char *name, const char *doc) {
    char msg[TM_ERR_MSG_MAX];
    tm_status st = named(name, doc, msg, sizeof msg);
    if (st) print_message("%s: %s\n", name, msg);
    assert_int_equal(st, TM_OK);
}

static void named_fail(const char *name, const char *doc, const char *want) {
    char msg[TM_ERR_MSG_MAX];
    tm_status st = named(name, doc, msg, sizeof msg);
    if (st != TM_E_CORRUPT || strcmp(msg, want)) print_message("got %d \"%s\"\nwant \"%s\"\n", st, msg, want);
    assert_int_equal(st, TM_E_CORRUPT);
    assert_string_equal(msg, want);
}

static void test_embedded_schemas_parse(void **state) {
    (void)state;
    const char *names[] = {"inputs", "slices", "evidence"};
    for (size_t i = 0; i < 3; i++) {
        const char *t = tm__schema_text(names[i]);
        assert_non_null(t);
        json_t *s = J(t);
        /* the schema validates itself as a document without schema faults: a schema object
        ** against `true` exercises nothing, so check every keyword is in the subset by
        ** validating an empty object (all schemas here require properties) */
        tm_err err;
        json_t *empty = json_object();
        tm_status st = tm__jschema_validate(s, empty, names[i], &err);
        json_decref(empty);
        assert_int_equal(st, TM_E_CORRUPT);
        assert_non_null(strstr(err.msg, "missing required property \"schema\""));
        json_decref(s);
    }
    assert_null(tm__schema_text("no-such-schema"));
    assert_null(tm__schema_text(NULL));
    char msg[TM_ERR_MSG_MAX];
    assert_int_equal(named("no-such-schema", "{}", msg, sizeof msg), TM_E_INTERNAL);
}

static void test_inputs_schema(void **state) {
    (void)state;
    named_ok("inputs", "{\"schema\":\"tensormorph.inputs/1\",\"inputs\":[{\"id\":\"s0\",\"tensors\":"
                       "{\"x\":\"s0_x.npy\"}},{\"id\":\"s1\",\"tensors\":{\"x\":\"s1_x.npy\",\"y\":\"y.npy\"}}]}");
    named_fail("inputs", "{\"schema\":\"tensormorph.inputs/1\",\"inputs\":[]}",
               "inputs: $.inputs: array has 0 items, fewer than minItems 1");
    named_fail("inputs", "{\"schema\":\"tensormorph.inputs/1\",\"inputs\":[{\"id\":\"s0\",\"tensors\":{\"x\":3}}]}",
               "inputs: $.inputs[0].tensors.x: expected string, got integer");
    named_fail("inputs", "{\"schema\":\"tensormorph.inputs/1\",\"inputs\":[{\"id\":\"s0\"}]}",
               "inputs: $.inputs[0]: missing required property \"tensors\"");
    named_fail("inputs", "{\"schema\":\"tensormorph.inputs/2\",\"inputs\":[]}",
               "inputs: $.schema: \"tensormorph.inputs/2\" is not the required constant \"tensormorph.inputs/1\"");
}

static void test_slices_schema(void **state) {
    (void)state;
    named_ok("slices", "{\"schema\":\"tensormorph.slices/1\",\"slices\":{\"day\":[\"s0\",\"s1\"],\"night\":[\"s2\"]}}");
    named_ok("slices", "{\"schema\":\"tensormorph.slices/1\",\"slices\":{}}");
    named_fail("slices", "{\"schema\":\"tensormorph.slices/1\",\"slices\":{\"day\":[]}}",
               "slices: $.slices.day: array has 0 items, fewer than minItems 1");
    named_fail("slices", "{\"schema\":\"tensormorph.slices/1\",\"slices\":{\"day\":[\"s0\",7]}}",
               "slices: $.slices.day[1]: expected string, got integer");
    named_fail("slices", "{\"schema\":\"tensormorph.slices/1\",\"slices\":[\"s0\"]}",
               "slices: $.slices: expected object, got array");
    named_fail("slices", "{\"schema\":\"tensormorph.slices/1\",\"slices\":{\"day\":[\"s0\"],\"\":[\"s1\"]}}",
               "slices: $.slices[\"\"]: string has 0 characters, fewer than minLength 1 (the property name)");
}

/* A minimal valid evidence document; `patch` (JSON object) is merged over the top level. */
static json_t *evidence_doc(void) {
    char sha[65];
    memset(sha, 'a', 64);
    sha[64] = '\0';
    char text[4096];
    snprintf(text, sizeof text,
             "{\"schema\":\"tensormorph.evidence/1\","
             "\"tool\":{\"name\":\"tensormorph\",\"version\":\"0.1.0\",\"commit\":\"abc\"},"
             "\"runtime\":{\"name\":\"onnxruntime-node\",\"version\":\"1.30.0\",\"node\":\"v20.1.0\",\"execution_provider\":\"cpu\"},"
             "\"device\":{\"kind\":\"cpu\",\"name\":\"cpu\",\"cores\":2,\"measured\":true},"
             "\"host\":{\"cpu_model\":\"cpu\",\"cores\":2,\"os\":\"Linux\",\"hostname\":\"h\"},"
             "\"protocol\":{\"inputs\":{\"mode\":\"random\",\"path\":null,\"count\":1,\"sha256\":\"%s\",\"seed\":0},"
             "\"input_shapes\":{\"x\":[1,3]},\"warmup\":1,\"runs\":2,\"threads\":1,\"graph_optimization_level\":\"all\"},"
             "\"models\":{\"baseline\":{\"path\":\"a.onnx\",\"sha256\":\"%s\",\"latency_ms\":[1.5,2],\"p50_ms\":1.5,"
             "\"p95_ms\":2,\"p99_ms\":2,\"peak_rss_bytes\":1000,\"operators\":{\"Conv\":1}},"
             "\"candidate\":{\"path\":\"b.onnx\",\"sha256\":\"%s\",\"latency_ms\":[1,1],\"p50_ms\":1,"
             "\"p95_ms\":1,\"p99_ms\":1,\"peak_rss_bytes\":1000,\"operators\":{\"Conv\":1,\"DequantizeLinear\":2}}},"
             "\"drift\":{\"overall\":{\"y\":{\"max_abs\":0.1,\"rel_l2\":0.01,\"top1_agreement\":1}},"
             "\"slices\":{\"day\":{\"y\":{\"max_abs\":0.1,\"rel_l2\":0.01,\"top1_agreement\":null,\"n_inputs\":1}}}},"
             "\"candidate_operators\":{\"Conv\":1,\"DequantizeLinear\":2}}",
             sha, sha, sha);
    return J(text);
}

static tm_status evidence_check(json_t *doc, char *msg, size_t cap) {
    tm_err err;
    tm_err_clear(&err);
    tm_status st = tm__jschema_validate_named("evidence", doc, "evidence.json", &err);
    snprintf(msg, cap, "%s", err.msg);
    json_decref(doc);
    return st;
}

static void test_evidence_schema(void **state) {
    (void)state;
    char msg[TM_ERR_MSG_MAX];
    json_t *d = evidence_doc();
    tm_status st = evidence_check(d, msg, sizeof msg);
    if (st) print_message("%s\n", msg);
    assert_int_equal(st, TM_OK);

    d = evidence_doc();
    json_array_append_new(json_object_get(json_object_get(json_object_get(d, "models"), "baseline"),
                                          "latency_ms"), json_string("3"));
    assert_int_equal(evidence_check(d, msg, sizeof msg), TM_E_CORRUPT);
    assert_string_equal(msg, "evidence.json: $.models.baseline.latency_ms[2]: expected number, got string");

    d = evidence_doc();
    json_object_set_new(json_object_get(json_object_get(d, "drift"), "overall"), "y",
                        J("{\"max_abs\":0.1,\"rel_l2\":0.01,\"top1_agreement\":1.5}"));
    assert_int_equal(evidence_check(d, msg, sizeof msg), TM_E_CORRUPT);
    assert_string_equal(msg, "evidence.json: $.drift.overall.y.top1_agreement: 1.5 is greater than 1 (maximum)");

    d = evidence_doc();
    json_object_del(json_object_get(json_object_get(json_object_get(json_object_get(d, "drift"), "slices"),
                                                    "day"), "y"), "n_inputs");
    assert_int_equal(evidence_check(d, msg, sizeof msg), TM_E_CORRUPT);
    assert_string_equal(msg, "evidence.json: $.drift.slices.day.y: missing required property \"n_inputs\"");

    d = evidence_doc();
    json_object_set_new(json_object_get(d, "protocol"), "graph_optimization_level", json_string("basic"));
    assert_int_equal(evidence_check(d, msg, sizeof msg), TM_E_CORRUPT);
    assert_string_equal(msg, "evidence.json: $.protocol.graph_optimization_level: \"basic\" is not the required constant \"all\"");

    d = evidence_doc();
    json_object_set_new(json_object_get(d, "candidate_operators"), "Conv", json_integer(-1));
    assert_int_equal(evidence_check(d, msg, sizeof msg), TM_E_CORRUPT);
    assert_string_equal(msg, "evidence.json: $.candidate_operators.Conv: -1 is less than 0 (minimum)");

    d = evidence_doc();
    json_object_set_new(d, "extra", json_true());
    assert_int_equal(evidence_check(d, msg, sizeof msg), TM_E_CORRUPT);
    assert_string_equal(msg, "evidence.json: $: property \"extra\" is not allowed here");

    d = evidence_doc();
    json_object_set_new(json_object_get(json_object_get(d, "protocol"), "inputs"), "sha256",
                        json_string("abc"));
    assert_int_equal(evidence_check(d, msg, sizeof msg), TM_E_CORRUPT);
    assert_string_equal(msg, "evidence.json: $.protocol.inputs.sha256: string has 3 characters, fewer than minLength 64");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type),
        cmocka_unit_test(test_properties_required_additional),
        cmocka_unit_test(test_items_and_counts),
        cmocka_unit_test(test_enum_const),
        cmocka_unit_test(test_number_bounds),
        cmocka_unit_test(test_string_length),
        cmocka_unit_test(test_ref_defs),
        cmocka_unit_test(test_unsupported_and_annotations),
        cmocka_unit_test(test_if_then_else),
        cmocka_unit_test(test_object_counts_and_property_names),
        cmocka_unit_test(test_json_int),
        cmocka_unit_test(test_check_schema),
        cmocka_unit_test(test_every_embedded_schema_checks),
        cmocka_unit_test(test_embedded_schemas_parse),
        cmocka_unit_test(test_inputs_schema),
        cmocka_unit_test(test_slices_schema),
        cmocka_unit_test(test_evidence_schema),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
