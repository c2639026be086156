/* crc32c.c: CRC-32C, table-driven (slicing by 8) and with the SSE4.2 CRC32 instruction
** (crc32c.h). */
#include "crc32c.h"

#include <stdatomic.h>

static uint32_t g_tab[8][256];
static atomic_int g_tab_ready;

static void make_table(void) {
    if (atomic_load(&g_tab_ready)) return;
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1u ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        g_tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) g_tab[t][i] = (g_tab[t - 1][i] >> 8) ^ g_tab[0][g_tab[t - 1][i] & 0xFFu];
    atomic_store(&g_tab_ready, 1); /* every thread computes the same values: a race is harmless */
}

uint32_t tm__crc32c_ref(uint32_t crc, const void *p, size_t n) {
    make_table();
    const uint8_t *b = p;
    uint32_t c = ~crc;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
        c = g_tab[7][lo & 0xFF] ^ g_tab[6][(lo >> 8) & 0xFF] ^ g_tab[5][(lo >> 16) & 0xFF] ^ g_tab[4][lo >> 24] ^
            g_tab[3][b[4]] ^ g_tab[2][b[5]] ^ g_tab[1][b[6]] ^ g_tab[0][b[7]];
        b += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ g_tab[0][(c ^ *b++) & 0xFFu];
    return ~c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <string.h>
/* Three lanes of LANE bytes at once (the CRC32 instruction's latency is 3 cycles, its throughput
** one a cycle), joined by the linearity of the CRC without its inversions: for a state s and
** data D of LANE bytes, crc(s, D) = crc(s, LANE zeros) ^ crc(0, D), and s -> crc(s, LANE zeros)
** is a linear map of the 32 bits of s, applied through four 256-entry tables (g_shift). */
enum { LANE = 4096 };
static uint32_t g_shift[4][256];
static atomic_int g_shift_ready;

__attribute__((target("sse4.2"))) static uint32_t zeros_lane(uint32_t s) {
    uint64_t c = s;
    for (int i = 0; i < LANE / 8; i++) c = __builtin_ia32_crc32di(c, 0);
    return (uint32_t)c;
}

static void make_shift(void) { /* the map is linear: 32 lanes of zeros (its basis), the rest by XOR */
    if (atomic_load(&g_shift_ready)) return;
    for (int k = 0; k < 4; k++) {
        uint32_t basis[8];
        for (int b = 0; b < 8; b++) basis[b] = zeros_lane(1u << (8 * k + b));
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t x = 0;
            for (int b = 0; b < 8; b++)
                if (v >> b & 1u) x ^= basis[b];
            g_shift[k][v] = x;
        }
    }
    atomic_store(&g_shift_ready, 1); /* every thread computes the same values: a race is harmless */
}

static inline uint32_t shift_lane(uint32_t s) {
    return g_shift[0][s & 0xFF] ^ g_shift[1][(s >> 8) & 0xFF] ^ g_shift[2][(s >> 16) & 0xFF] ^ g_shift[3][s >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const uint8_t *b, size_t n) {
    uint64_t c = ~crc;
    if (n >= 3 * LANE) make_shift();
    while (n >= 3 * LANE) {
        uint64_t c0 = c, c1 = 0, c2 = 0;
        for (size_t i = 0; i < LANE; i += 8) {
            uint64_t v0, v1, v2;
            memcpy(&v0, b + i, 8);
            memcpy(&v1, b + LANE + i, 8);
            memcpy(&v2, b + 2 * LANE + i, 8);
            c0 = __builtin_ia32_crc32di(c0, v0);
            c1 = __builtin_ia32_crc32di(c1, v1);
            c2 = __builtin_ia32_crc32di(c2, v2);
        }
        c = shift_lane(shift_lane((uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
        b += 3 * LANE;
        n -= 3 * LANE;
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, b, 8);
        c = __builtin_ia32_crc32di(c, v);
        b += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = __builtin_ia32_crc32qi(c32, *b++);
    return ~c32;
}
#endif

/* Combining. The CRC without its inversions is linear in the message: for A then B,
** crc(A B) = M(crc(A)) ^ crc(B) with M the state's advance over len(B) zero bytes, which is the
** multiplication by x^(8 len(B)) modulo the polynomial (bit 31 the coefficient of x^0, as the
** reflected register holds it). g_pow[k] = x^(8 * 2^k). */
static uint32_t g_pow[64];
static atomic_int g_pow_ready;

static uint32_t mul_mod(uint32_t a, uint32_t b) { /* a * b mod P, reflected */
    uint32_t r = 0;
    for (int i = 0; i < 32; i++) {
        if (a & (0x80000000u >> i)) r ^= b;
        b = b & 1u ? (b >> 1) ^ 0x82F63B78u : b >> 1; /* b * x */
    }
    return r;
}

static void make_pow(void) {
    if (atomic_load(&g_pow_ready)) return;
    g_pow[0] = 0x80000000u >> 8; /* x^8: one byte */
    for (int k = 1; k < 64; k++) g_pow[k] = mul_mod(g_pow[k - 1], g_pow[k - 1]);
    atomic_store(&g_pow_ready, 1); /* every thread computes the same values: a race is harmless */
}

uint32_t tm__crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
    make_pow();
    uint32_t s = crc_a;
    for (int k = 0; len_b; k++, len_b >>= 1)
        if (len_b & 1u) s = mul_mod(s, g_pow[k]);
    return s ^ crc_b;
}

uint32_t tm__crc32c(uint32_t crc, const void *p, size_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("sse4.2")) return crc_sse42(crc, p, n);
#endif
    return tm__crc32c_ref(crc, p, n);
}
