/* cli_run.h: helpers for tests that drive the tensormorph binary (env TM_BIN) and read its
** --json output. */
#ifndef TM_TEST_CLI_RUN_H
#define TM_TEST_CLI_RUN_H
#include <jansson.h>

/* The binary under test: $TM_BIN, else "./tensormorph". */
const char *tmt_bin(void);
/* Run a shell command line (printf-style); *out gets its stdout (malloc'd; may be NULL to
** discard). Returns the exit status (128 + signal when killed). */
int tmt_run(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Run, assert the exit status, parse stdout as JSON (the test fails otherwise). */
json_t *tmt_run_json(int expect_rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A number of a JSON object; "inf"/"-inf"/"nan" strings as the CLI writes them. */
double tmt_num(json_t *o, const char *key);
/* The element of an array of objects whose "name" is name, or NULL. */
json_t *tmt_find_named(json_t *arr, const char *name);
/* The whole file, NUL-terminated (malloc'd), or NULL when it cannot be read. */
char *tmt_read_file(const char *path);
/* 1 when path exists. */
int tmt_exists(const char *path);
#endif
