/* test_part.c: the pieces of a sharded quantize run (src/job/part.c, src/core/crc32c.c):
**   - CRC-32C: the check value of RFC 3720 / the Castagnoli polynomial, "123456789" ->
**     0xE3069283, 32 zero bytes -> 0x8A9136AA (RFC 3720 B.4), and the SSE4.2 path equal to the
**     table for every length 0..300 and every start alignment, also continued in pieces;
**   - the partition (tm__shard_assign): largest first to the least loaded part, ties to the
**     lower index, worked out by hand; the same for a permuted tie order; n > items;
**   - tm__crc32c_combine equal to the CRC of the concatenation (split points 0..N, long B);
**   - the write log (part_crc.c): writes logged out of order give the range's CRC; a gap, an
**     overlap, a range cut inside a write, another file or an empty log give none (read back);
**   - the part path name;
**   - a GGUF part (stories260K-F32.gguf, Q8_0, --shard i/2) reads none of its tensor bytes back
**     for its record: part 1 none at all, part 0 only the header and padding it wrote. (quantize --shard + merge end to end: tests/cli/shard_merge.sh.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "tensormorph.h"
#include "core/core.h"
#include "core/crc32c.h"
#include "job/part.h"
#include "job/part_crc.h"
#include "helpers/fixture.h"
#include "helpers/vectors.h"
#include "tensormorph/gguf_job.h"

#include <stdatomic.h>
#include <stdio.h>

static void test_crc32c_values(void **state) {
    (void)state;
    assert_int_equal(tm__crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(tm__crc32c_ref(0, "123456789", 9), 0xE3069283u);
    uint8_t z[32] = {0}, ff[32];
    memset(ff, 0xff, sizeof ff);
    assert_int_equal(tm__crc32c(0, z, 32), 0x8A9136AAu);  /* RFC 3720 B.4: 32 bytes of zeros */
    assert_int_equal(tm__crc32c(0, ff, 32), 0x62A8AB43u); /* RFC 3720 B.4: 32 bytes of 0xff */
    assert_int_equal(tm__crc32c(0, NULL, 0), 0u);
}

static void test_crc32c_paths_agree(void **state) {
    (void)state;
    uint8_t buf[320];
    uint32_t x = 12345;
    for (size_t k = 0; k < sizeof buf; k++) buf[k] = (uint8_t)((x = x * 1103515245u + 12345u) >> 16);
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= 300; n++) {
            uint32_t a = tm__crc32c(0, buf + off, n), b = tm__crc32c_ref(0, buf + off, n);
            assert_int_equal(a, b);
            size_t h = n / 3; /* continued over two pieces */
            assert_int_equal(tm__crc32c(tm__crc32c(0, buf + off, h), buf + off + h, n - h), a);
        }
}

/* lengths past the three-lane blocks (3 x 4096 bytes) of the SSE4.2 path, at odd offsets */
static void test_crc32c_long(void **state) {
    (void)state;
    enum { N = 3 * 3 * 4096 + 77 };
    uint8_t *buf = malloc(N + 8);
    assert_non_null(buf);
    uint32_t x = 777;
    for (size_t k = 0; k < N + 8; k++) buf[k] = (uint8_t)((x = x * 1103515245u + 12345u) >> 16);
    const size_t lens[] = {12287, 12288, 12289, 24576, 24583, N};
    for (size_t q = 0; q < sizeof lens / sizeof lens[0]; q++)
        for (size_t off = 0; off < 8; off += 3) {
            uint32_t a = tm__crc32c(0, buf + off, lens[q]), b = tm__crc32c_ref(0, buf + off, lens[q]);
            assert_int_equal(a, b);
            assert_int_equal(tm__crc32c(tm__crc32c(0xDEADBEEFu, buf + off, 5000), buf + off + 5000, lens[q] - 5000),
                             tm__crc32c_ref(tm__crc32c_ref(0xDEADBEEFu, buf + off, 5000), buf + off + 5000, lens[q] - 5000));
        }
    free(buf);
}

/* n pseudo-random bytes (a linear congruential sequence from seed); malloc'd */
static uint8_t *lcg_bytes(size_t n, uint32_t x) {
    uint8_t *buf = malloc(n);
    assert_non_null(buf);
    for (size_t k = 0; k < n; k++) buf[k] = (uint8_t)((x = x * 1103515245u + 12345u) >> 16);
    return buf;
}

static void test_crc32c_combine(void **state) {
    (void)state;
    enum { N = 70000 };
    uint8_t *buf = lcg_bytes(N, 4242);
    const size_t cuts[] = {0, 1, 7, 8, 255, 4096, 12288, 12289, 33333, N - 1, N};
    for (size_t q = 0; q < sizeof cuts / sizeof cuts[0]; q++) {
        size_t h = cuts[q];
        uint32_t a = tm__crc32c_ref(0, buf, h), b = tm__crc32c_ref(0, buf + h, N - h);
        assert_int_equal(tm__crc32c_combine(a, b, N - h), tm__crc32c_ref(0, buf, N));
    }
    assert_int_equal(tm__crc32c_combine(0xE3069283u, 0, 0), 0xE3069283u); /* B empty */
    free(buf);
}

static void test_crclog(void **state) {
    (void)state;
    enum { N = 50000 };
    uint8_t *buf = lcg_bytes(N, 99);
    uint32_t c = 0;
    tm__crclog *l = tm__crclog_new();
    assert_non_null(l);
    assert_int_equal(tm__crclog_range(l, "a", 0, 10, &c), 0); /* nothing logged */
    /* file "dir/a" at byte 1000: [1000, 21000) in three writes out of order, then [21000, 31000) */
    tm__crclog_add(l, "dir/a", 13000, buf + 12000, 8000);
    tm__crclog_add(l, "dir/a", 1000, buf, 5000);
    tm__crclog_add(l, "/x/b", 1000, buf, 4000); /* another file */
    tm__crclog_add(l, "dir/a", 6000, buf + 5000, 7000);
    tm__crclog_add(l, "dir/a", 21000, buf + 20000, 10000);
    c = 0;
    assert_int_equal(tm__crclog_range(l, "a", 1000, 20000, &c), 1);
    assert_int_equal(c, tm__crc32c_ref(0, buf, 20000));
    assert_int_equal(tm__crclog_range(l, "other/a", 1000, 30000, &c), 1); /* the basename counts */
    assert_int_equal(c, tm__crc32c_ref(0, buf, 30000));
    assert_int_equal(tm__crclog_range(l, "b", 1000, 4000, &c), 1);
    assert_int_equal(c, tm__crc32c_ref(0, buf, 4000));
    assert_int_equal(tm__crclog_range(l, "a", 1000, 15000, &c), 0); /* ends inside a write */
    assert_int_equal(tm__crclog_range(l, "a", 2000, 19000, &c), 0); /* starts inside a write */
    assert_int_equal(tm__crclog_range(l, "a", 1000, 31000, &c), 0); /* runs past the last write */
    assert_int_equal(tm__crclog_range(l, "c", 1000, 4000, &c), 0);  /* no such file */
    tm__crclog_add(l, "dir/a", 40000, buf, 100);                      /* [40000, 40100) */
    assert_int_equal(tm__crclog_range(l, "a", 31000, 9100, &c), 0);   /* a gap before it */
    tm__crclog_add(l, "dir/a", 6000, buf + 5000, 7000);               /* written twice */
    assert_int_equal(tm__crclog_range(l, "a", 1000, 20000, &c), 0);
    assert_int_equal(tm__crclog_range(l, "b", 1000, 4000, &c), 1);
    tm__crclog_free(l);
    free(buf);
}

static void test_shard_assign(void **state) {
    (void)state;
    /* 10 -> p0, 9 -> p1, 8 -> p2, 7 -> p2 (8 is least), 6 -> p1 (9), 5 -> p0 (10), 1 -> p0
    ** (all at 15: the lowest index) */
    const uint64_t b[] = {10, 9, 8, 7, 6, 5, 1};
    const int want[] = {0, 1, 2, 2, 1, 0, 0};
    int own[7];
    assert_int_equal(tm__shard_assign(b, 7, 3, own, NULL), TM_OK);
    for (int k = 0; k < 7; k++) assert_int_equal(own[k], want[k]);
    /* ties in bytes go by item index: items 1 and 3 (both 4) */
    const uint64_t c[] = {1, 4, 2, 4};
    int oc[4];
    assert_int_equal(tm__shard_assign(c, 4, 2, oc, NULL), TM_OK);
    /* #1 -> p0, #3 -> p1, #2 (2) -> p0 (tie 4/4: lowest), #0 (1) -> p1 (6 vs 4) */
    assert_int_equal(oc[1], 0);
    assert_int_equal(oc[3], 1);
    assert_int_equal(oc[2], 0);
    assert_int_equal(oc[0], 1);
    /* more parts than items: each item alone, in size order */
    int od[3];
    const uint64_t d[] = {5, 7, 6};
    assert_int_equal(tm__shard_assign(d, 3, 8, od, NULL), TM_OK);
    assert_int_equal(od[1], 0);
    assert_int_equal(od[2], 1);
    assert_int_equal(od[0], 2);
    assert_int_equal(tm__shard_assign(d, 3, 0, od, NULL), TM_E_INVALID_ARG);
}

static void test_part_path(void **state) {
    (void)state;
    char *p = tm__part_path("/data/out", 3, 16);
    assert_string_equal(p, "/data/out.part-3-of-16");
    free(p);
}

static void test_gguf_part_crc_from_memory(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char in_path[4200], dir[512], out[600];
    snprintf(in_path, sizeof in_path, "%s/models/gguf/stories260K-F32.gguf", tmv_shared_dir());
    tm_file *in = tmt_open_ok(in_path);
    assert_int_equal(tmt_tmpdir_make(dir, sizeof dir, "part_gguf"), 0);
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    uint64_t data = 0;
    for (int64_t t = 0; t < tm_file_n_tensors(in); t++) data += tm_file_tensor(in, t)->n_bytes;
    for (int i = 1; i >= 0; i--) {
        tm_gguf_quantize_params p = tm_gguf_quantize_params_default();
        p.shard_index = i;
        p.shard_count = 2;
        p.n_threads = 2;
        tm_gguf_quantize_result *r = NULL;
        tm_err err;
        atomic_store(&tm__part_readback_bytes, 0);
        tm_status s = tm_gguf_quantize(in, out, &p, &r, &err);
        if (s) fail_msg("part %d/2: %s", i, err.msg);
        uint64_t rb = atomic_load(&tm__part_readback_bytes);
        if (i == 1 && rb != 0) fail_msg("part 1/2 read %llu bytes back", (unsigned long long)rb);
        if (i == 0 && (rb == 0 || rb > 64 * 1024 || rb * 8 > data)) /* the header: about 14 KB */
            fail_msg("part 0/2 read %llu bytes back (the tensors' data: %llu)", (unsigned long long)rb, (unsigned long long)data);
        tm_gguf_quantize_result_free(r);
    }
    tm_close(in);
    tmt_tmpdir_remove(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_values),
        cmocka_unit_test(test_crc32c_paths_agree),
        cmocka_unit_test(test_crc32c_long),
        cmocka_unit_test(test_crc32c_combine),
        cmocka_unit_test(test_crclog),
        cmocka_unit_test(test_shard_assign),
        cmocka_unit_test(test_part_path),
        cmocka_unit_test(test_gguf_part_crc_from_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
