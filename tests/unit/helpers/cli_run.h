/* cli_run.h: helpers for tests that drive the tensormorph binary (env TM_BIN) and read its
** --json output. */
#ifndef TM_TEST_CLI_RUN_H
#define TM_TEST_CLI_RUN_H
#include <jansson.h>
#include <stdio.h>

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
/* The check `name` of a gate verdict's "checks" (the test fails when there is none). */
json_t *tmt_gate_check(json_t *verdict, const char *name);
/* Its "status" ("pass", "fail", ...) and its "reason". */
const char *tmt_gate_status(json_t *verdict, const char *name);
const char *tmt_gate_reason(json_t *verdict, const char *name);
/* Write doc to <dir>/<name> (JSON_INDENT(1)) and release it; the test fails when it cannot. */
void tmt_write_json(const char *dir, const char *name, json_t *doc);
/* The whole file, NUL-terminated (malloc'd), or NULL when it cannot be read. */
char *tmt_read_file(const char *path);
/* The same with its size: *n gets the byte count (the file may hold NULs). */
char *tmt_read_bytes(const char *path, size_t *n);
/* 1 when path exists. */
int tmt_exists(const char *path);
/* `tensormorph serve ARGS... --port 0 -q` (args NULL-terminated) in a child: returns its pid,
** *port the port it printed its URL with and *out the pipe of its stdout (close with
** tmt_serve_stop). The test fails when serve prints no URL. */
int tmt_serve_start(const char *const *args, int *port, FILE **out);
/* SIGTERM the server, reap it (returns its wait status) and close its pipe. */
int tmt_serve_stop(int pid, FILE *out);
/* A TCP connection to 127.0.0.1:port (the test fails when it cannot connect). */
int tmt_http_connect(int port);
/* GET path from 127.0.0.1:port; *status the HTTP status; the body parsed as JSON (the test
** fails when it is not). */
json_t *tmt_http_json(int port, const char *path, int *status);
#endif
