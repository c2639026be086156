/*
** jschema.h: a JSON Schema validator for the documents Tensormorph reads and writes, and the
** schemas themselves (docs/schemas/<name>.schema.json), compiled into the library at build time
** (cmake/schemas.cmake writes gen/tm_schemas.c). Not installed.
**
** Supported: a subset of JSON Schema 2020-12 (json-schema.org, "JSON Schema Validation" and
** "JSON Schema Core", draft 2020-12): type (a name or an array of names; "integer" is any number
** with a zero fractional part, as the spec says), properties, required, additionalProperties
** (true/false or a schema), items (one schema for every element), enum, const, minimum, maximum,
** exclusiveMinimum, exclusiveMaximum, minItems, maxItems, minLength, maxLength, minProperties,
** maxProperties, propertyNames (each key validated as a string), $ref of the form
** "#/$defs/NAME" (resolved against the root schema), $defs, if/then/else (the document is
** validated against "then" when it matches "if", else against "else"; a mismatch of "if" itself
** is never an error). Annotations ($schema, $id, $comment,
** title, description, default, examples) are ignored. Any other keyword (pattern, oneOf, ...) is
** refused as TM_E_UNSUPPORTED so that a schema never silently means less than it says.
*/
#ifndef TM_CORE_JSCHEMA_H
#define TM_CORE_JSCHEMA_H

#include "core.h"

#include <jansson.h>

/* tm__json_type_name: the JSON Schema name of v's type: "object", "array", "string",
** "integer", "number", "boolean", "null" (for messages and type checks). */
const char *tm__json_type_name(const json_t *v);
/* tm__json_str: the string value of key k of object o, or NULL (no such key, not a string). */
static inline const char *tm__json_str(const json_t *o, const char *k) {
    return json_string_value(json_object_get(o, k));
}

/* Validate doc against schema (the subset above). Stops at the first violation, in document
** order (an object's keywords in the order type, const, enum, minProperties, maxProperties,
** propertyNames, required, properties, additionalProperties; arrays: minItems, maxItems, then each element).
** Returns TM_OK | TM_E_CORRUPT (doc violates the schema; err->msg is
**   "<doc_name>: <JSON path like $.models.baseline.latency_ms[3]>: <reason>"; object keys that are
**   not identifiers are written $["key"]) | TM_E_UNSUPPORTED (schema uses a keyword outside the
**   subset) | TM_E_INVALID_ARG (schema malformed: bad keyword value, unresolvable $ref, NULL
**   argument) | TM_E_LIMIT (nesting deeper than 128 levels of schema or $ref). */
tm_status tm__jschema_validate(const json_t *schema, const json_t *doc, const char *doc_name,
                               tm_err *err);

/* Check a schema itself, whatever document it will meet: every keyword, in every subschema
** reachable through properties, additionalProperties, items and $defs, is in the subset with a
** value of the right kind, and every $ref resolves. name is used in messages.
** Returns TM_OK | TM_E_UNSUPPORTED | TM_E_INVALID_ARG | TM_E_LIMIT, err->msg
** "<name>: <schema path like #/properties/models/items>: <reason>". */
tm_status tm__jschema_check_schema(const json_t *schema, const char *name, tm_err *err);

/* One embedded schema file (the table lives in the generated gen/tm_schemas.c). */
typedef struct tm__schema_blob {
    const char *name;  /* "evidence" for docs/schemas/evidence.schema.json */
    const char *text;  /* the file's bytes, NUL-terminated                 */
} tm__schema_blob;
extern const tm__schema_blob tm__schema_blobs[];
extern const size_t tm__n_schema_blobs;

/* The schema text of docs/schemas/<name>.schema.json compiled into the library (name like
** "evidence", "inputs", "slices", "policy"), or NULL when there is none. Static storage. */
const char *tm__schema_text(const char *name);

/* Convenience: parse the embedded schema `name` and validate doc against it.
** Returns as tm__jschema_validate, or TM_E_INTERNAL when the schema is missing or not JSON. */
tm_status tm__jschema_validate_named(const char *name, const json_t *doc, const char *doc_name,
                                     tm_err *err);

/* Read an integer the way the schemas' "integer" type admits it (JSON Schema 2020-12 Validation,
** "type": a number with a zero fractional part is an integer, so 4.0 and 1e12 are integers): a
** JSON integer, or a real that is finite, integral and inside [-2^63, 2^63). Every reader of an
** integer field of a validated document uses this (json_integer_value() would read 4.0 as 0).
** doc_name and json_path ("$.protocol.threads") only name the value in messages.
** Returns TM_OK (*out set) | TM_E_CORRUPT: v missing, not a number, fractional or out of range;
** err->msg "<doc_name>: <json_path>: <reason>". */
tm_status tm__json_int(const json_t *v, const char *doc_name, const char *json_path, json_int_t *out, tm_err *err);

#endif /* TM_CORE_JSCHEMA_H */
