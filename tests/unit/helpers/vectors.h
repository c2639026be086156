/*
** vectors.h: test helpers for ../shared/vectors: locate the shared tree, load case.json
** (jansson) and .npy files (NumPy format 1.0, little-endian, C order, plain numeric dtypes).
**
** Location: env TM_SHARED, else "$TM_SRC/../shared", else "../shared". When the tree is
** missing, tmv_require_shared() prints "SKIP: ../shared not found (set TM_SHARED)" and skips
** the cmocka test, unless TM_REQUIRE_SHARED=1, in which case the test fails.
*/
#ifndef TM_TEST_VECTORS_H
#define TM_TEST_VECTORS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* A loaded .npy array. */
typedef struct tmv_npy {
    char     kind;        /* 'f' float, 'i' signed int, 'u' unsigned int, 'b' bool        */
    int      itemsize;    /* bytes per element                                            */
    int      ndim;
    int64_t  shape[8];
    int64_t  n;           /* element count                                                */
    void    *data;        /* n * itemsize bytes, little-endian as in the file             */
} tmv_npy;

/* The shared directory ("<...>/shared"), or NULL when it does not exist. Static storage. */
const char *tmv_shared_dir(void);

/* Call first in a cmocka test that needs vectors: skips (or fails with TM_REQUIRE_SHARED=1)
** when the shared tree is missing. Returns 1 when the test may go on. Must be used as
**   if (!tmv_require_shared()) return;   (cmocka's skip() longjmps; the return is for form) */
int tmv_require_shared(void);

/* Sorted case names of a family ("float8", ...). *names is malloc'd (free with tmv_free_names).
** Returns the count, -1 on error. */
int tmv_list_cases(const char *family, char ***names);
void tmv_free_names(char **names, int n);

/* Run fn on every case of a family (name, its case.json), asserting there is at least one. With
** prefixes (NULL-terminated), a case whose name starts with none of them fails the test ("new
** case without a handler"): a new kind of case is never skipped silently. Returns the count. */
int tmv_run_cases(const char *family, const char *const *prefixes, void (*fn)(const char *name, json_t *cj));

/* Path "<shared>/vectors/<family>/<name>/<file>" into buf. */
void tmv_case_path(char *buf, size_t n, const char *family, const char *name, const char *file);

/* case.json of a case (caller json_decref's), NULL on error. */
json_t *tmv_case_json(const char *family, const char *name);

/* Load "<case dir>/<file>". Returns 0 on success, -1 (with a message on stderr) otherwise. */
int tmv_npy_load_case(const char *family, const char *name, const char *file, tmv_npy *out);
/* The same, failing the cmocka test ("FAMILY/NAME: cannot load FILE") when it cannot load. */
void tmv_case_npy(const char *family, const char *name, const char *file, tmv_npy *out);
/* 1 when "<case dir>/<file>" can be opened for reading, else 0. */
int tmv_case_has_file(const char *family, const char *name, const char *file);
int tmv_npy_load(const char *path, tmv_npy *out);
void tmv_npy_free(tmv_npy *a);

/* Element i converted (integers exactly, floats to double). */
double  tmv_npy_get_f64(const tmv_npy *a, int64_t i);
int64_t tmv_npy_get_i64(const tmv_npy *a, int64_t i);
/* float32 arrays only: the element's bits */
uint32_t tmv_npy_f32_bits(const tmv_npy *a, int64_t i);

/* Convenience: a malloc'd float32 / int64 copy of the whole array (NULL on error). */
float   *tmv_npy_as_f32(const tmv_npy *a);
int64_t *tmv_npy_as_i64(const tmv_npy *a);

/* Small JSON accessors: the output object of case.json named `name` (NULL if absent). */
json_t *tmv_output(json_t *cj, const char *name);
/* "match" of that output ("exact", "allclose", "informative"), "" if absent. */
const char *tmv_output_match(json_t *cj, const char *name);

/* float bits helpers */
uint32_t tmv_f32_bits(float x);

#endif
