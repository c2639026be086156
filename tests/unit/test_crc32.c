/* test_crc32.c: zip's CRC-32 (src/core/crc32.c): the check value of ISO 3309 / ITU-T V.42,
** "123456789" -> 0xCBF43926, and the PCLMULQDQ folding equal to zlib's for every length 0..1100
** at four start alignments, for long buffers (the 64-byte loop, a tail of 16-byte blocks and
** bytes), and continued in pieces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "core/crc32.h"

static uint8_t *noise(size_t n) {
    uint8_t *b = malloc(n);
    assert_non_null(b);
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        b[i] = (uint8_t)(s >> 16);
    }
    return b;
}

static void test_crc32_values(void **state) {
    (void)state;
    assert_int_equal(tm__crc32(0, "123456789", 9), 0xCBF43926u);
    assert_int_equal(tm__crc32_ref(0, "123456789", 9), 0xCBF43926u);
    assert_int_equal(tm__crc32(0, NULL, 0), 0u);
    uint8_t z[256] = {0};
    assert_int_equal(tm__crc32(0, z, sizeof z), tm__crc32_ref(0, z, sizeof z));
}

static void test_crc32_paths_agree(void **state) {
    (void)state;
    uint8_t *b = noise(1200);
    for (size_t off = 0; off < 4; off++)
        for (size_t n = 0; n + off <= 1100 + off && n <= 1100; n++)
            if (tm__crc32(0, b + off, n) != tm__crc32_ref(0, b + off, n)) fail_msg("length %zu at +%zu", n, off);
    free(b);
}

static void test_crc32_long(void **state) {
    (void)state;
    const size_t n = (3u << 20) + 77;
    uint8_t *b = noise(n + 3);
    uint32_t want = tm__crc32_ref(0, b + 3, n);
    assert_int_equal(tm__crc32(0, b + 3, n), want);
    /* in pieces: 1000 bytes, then the rest */
    assert_int_equal(tm__crc32(tm__crc32(0, b + 3, 1000), b + 1003, n - 1000), want);
    assert_int_equal(tm__crc32(0xDEADBEEFu, b, n), tm__crc32_ref(0xDEADBEEFu, b, n));
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32_values),
        cmocka_unit_test(test_crc32_paths_agree),
        cmocka_unit_test(test_crc32_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
