/* quant_data.c: see quant_data.h. */
#include "helpers/quant_data.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

uint64_t tq_rng_u64(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}
float tq_rng_unit(void) { return (float)((tq_rng_u64() >> 40) * (1.0 / 16777216.0)); }
float tq_rng_normal(void) {
    float s = 0;
    for (int i = 0; i < 6; i++) s += tq_rng_unit();
    return (s - 3.0f) * 1.41421356f;
}

int64_t tq_code_at(const uint8_t *codes, int64_t i, tm_dtype dt) {
    return tm_dtype_get(dt)->is_signed ? (int64_t)(int8_t)codes[i] : (int64_t)codes[i];
}
