/* recipe.h: `quantize --recipe FILE` for the three output forms (docs/recipe.md): loading the
** JSON object, its scheme objects and the keys every form shares. Only cli/ uses this. */
#ifndef TM_CLI_RECIPE_H
#define TM_CLI_RECIPE_H
#include "cli.h"

/* Read FILE as one JSON object (duplicate keys refused). Its "format", when present, must be the
** output form's ("compressed-tensors", "gguf", "onnx"), and every top-level key one of `keys`
** (NULL-terminated; "format", "comment" and "schema" are always allowed). *out is the object
** (json_decref it). Returns 0, EXIT_IO (cannot open) or EXIT_INPUT, after one line on stderr
** naming FILE. */
int cli_recipe_load(const char *path, const char *form, const char *const *keys, json_t **out);

/* 1 when every key of o is one of keys[] (NULL-terminated); else prints "recipe PATH: WHERE:
** unknown key" and returns 0. */
int cli_recipe_only_keys(json_t *o, const char *const *keys, const char *where, const char *path);

/* A scheme object over *s (docs/recipe.md "Scheme"): type, granularity (tm_granularity_parse's
** text, or the bare kind with axis / group_size / block keys as manifests write it), axis,
** group_size, block [H, W], symmetric, observer (tm_observer_name's text), convention,
** scale_dtype, allow_nonfinite. Returns NULL, or the error text (an unknown key: its name). */
const char *cli_recipe_scheme(json_t *o, tm_qspec *s);

/* Code type names: int8 uint8 int4 uint4 fp8_e4m3 fp8_e5m2 fp8 and the dtype names manifests
** write (I8 U8 I4 U4 F8_E4M3 F8_E5M2), any case. 0 or -1. */
int cli_parse_code_type(const char *s, tm_dtype *d);
/* f32 f16 bf16, any case. 0 or -1. */
int cli_parse_scale_dtype(const char *s, tm_dtype *d);

/* Optional members of the recipe's top level. Each returns 0 (absent: outputs untouched) or
** EXIT_INPUT after printing why. Strings stay owned by the recipe object. */
int cli_recipe_bool(json_t *r, const char *key, const char *path, int *v);
int cli_recipe_int(json_t *r, const char *key, const char *path, int64_t lo, int64_t hi, int64_t *v);
/* An array of strings: *out is a malloc'd NULL-terminated array of borrowed strings. */
int cli_recipe_strings(json_t *r, const char *key, const char *path, const char ***out, int64_t *n);
/* A member that manifests record and a recipe may carry back: when present it must have the
** JSON type `type` (JSON_STRING, JSON_OBJECT, ...); its value is not used. */
int cli_recipe_record(json_t *r, const char *key, json_type type, const char *path);

#endif
