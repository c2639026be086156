/* st_fixture.h: what the safetensors test programs (test_safetensors*.c) share: scratch
** directories, hand-made safetensors images, the writer's deterministic entry pattern and the
** checks that read it back, and lookups on an opened checkpoint that must succeed. */
#ifndef TM_TEST_ST_FIXTURE_H
#define TM_TEST_ST_FIXTURE_H
#include <stddef.h>
#include <stdint.h>

#include "tensormorph.h"

/* A fresh directory $TMPDIR/tm_st_XXXXXX (or under /tmp); malloc'd path. */
char *tmst_tmpdir(void);
/* A cmocka setup/teardown pair: *state is a fresh tmst_tmpdir() for one test, removed with
** everything below it afterwards. */
int tmst_dir_setup(void **state);
int tmst_dir_teardown(void **state);
/* "<dir>/<name>", malloc'd. */
char *tmst_path(const char *dir, const char *name);
/* Print an error's code and message (before an assertion on it). */
void tmst_dump_err(const tm_err *e);
/* Print every warning of f. */
void tmst_dump_warnings(const tm_file *f);
/* 1 when some warning of f contains substr. */
int tmst_has_warning(const tm_file *f, const char *substr);
/* The number of entries of dir (dot files left out) whose name contains needle (any if NULL). */
int tmst_count_dir_entries(const char *dir, const char *needle);

/* A safetensors image: 8-byte little-endian length + header text as given (no padding) +
** n_data bytes of a counting pattern (byte i is i*7+1). *len gets its size. Caller frees. */
uint8_t *tmst_image(const char *header, size_t n_data, size_t *len);
/* Open the image of header/n_data from a buffer named "x.safetensors"; it must fail with
** status, a message naming the file and containing substr, and (when offset >= 0) that file
** offset. */
void tmst_expect_buf_fail(const char *header, size_t n_data, const tm_open_params *p,
                          tm_status status, const char *substr, int64_t offset);

/* Fill n bytes of entry number `entry` of a writer with its deterministic pattern. */
void tmst_pattern(uint8_t *buf, size_t n, int64_t entry);
/* The data bytes of a writer entry (dtype bits / 8 x the shape). */
uint64_t tmst_entry_bytes(const tm_st_entry *e);
/* Write es[0..n) to path with tm_st_writer (last entry first, each in two pieces, second
** first), every entry holding tmst_pattern; asserts every step. */
void tmst_write_all(const char *path, const tm_st_entry *es, int64_t n, const tm_st_write_params *wp);
/* f holds exactly es[0..n), plain (no quant, role data), each with its tmst_pattern bytes. */
void tmst_check_contents(const tm_file *f, const tm_st_entry *es, int64_t n);
/* One entry of every safetensors dtype, scalars and empty tensors among them. */
extern const tm_st_entry tmst_entries[];
extern const int64_t tmst_n_entries;

/* tm_open("<dir>/<rel>") with default parameters; asserts TM_OK (the error printed first). */
tm_file *tmst_open_in(const char *dir, const char *rel);
/* The tensor called name; the test fails (naming it) when f has none. */
const tm_tensor *tmst_must_find(const tm_file *f, const char *name);
/* t is 2-D [a, b] / 1-D [a]. */
void tmst_assert_shape2(const tm_tensor *t, int64_t a, int64_t b);
void tmst_assert_shape1(const tm_tensor *t, int64_t a);
#endif
