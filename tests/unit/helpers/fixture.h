/* fixture.h: what many tests set up the same way: the scratch directory of a cmocka test group
** (made in its setup, removed in its teardown), the demo fixture that CLI tests quantize
** against, writing a file that must be written and opening a checkpoint that must open. */
#ifndef TM_TEST_FIXTURE_H
#define TM_TEST_FIXTURE_H
#include <stddef.h>
#include <stdint.h>

#include "tensormorph.h"

/* Make a fresh directory "/tmp/tm_<tag>_XXXXXX" (mkdtemp) and write its path into buf (n bytes).
** Returns 0, or -1 when it cannot be made (a cmocka setup's result). */
int tmt_tmpdir_make(char *buf, size_t n, const char *tag);
/* Remove dir and everything below it (rm -rf). Returns 0, or -1 when that fails. */
int tmt_tmpdir_remove(const char *dir);
/* tmt_tmpdir_make(dir, n, tag), then the demo checkpoint in <dir>/demo, written by tmt_bin().
** Returns 0, -1 when the directory cannot be made, or the exit status of `demo`. */
int tmt_demo(char *dir, size_t n, const char *tag);
/* tmt_demo, then its int4 group:32 quantization in <dir>/q4. Returns 0, -1, or the first
** non-zero exit status. */
int tmt_demo_q4(char *dir, size_t n, const char *tag);
/* The sha256 of a manifest's first source (src) and first output file (out), 64 hex digits each.
** Returns 0, or -1 when the manifest cannot be read or lacks them. */
int tmt_manifest_shas(const char *manifest_path, char src[65], char out[65]);
/* The whole file at path (malloc'd, NUL-terminated past its *n bytes); the test fails when it
** cannot be read. */
uint8_t *tmt_slurp(const char *path, size_t *n);
/* Write the n bytes at data to path, replacing it (the test fails on any error). */
void tmt_write_file(const char *path, const void *data, size_t n);
/* Write text to <dir>/<name>, as tmt_write_file. */
void tmt_write_text(const char *dir, const char *name, const char *text);
/* tm_open(path) with default parameters; asserts TM_OK (the error message is printed first). */
tm_file *tmt_open_ok(const char *path);
#endif
