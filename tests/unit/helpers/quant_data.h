/*
** quant_data.h: deterministic data and code access shared by the quantization tests
** (test_quant_affine.c, test_quant_kernels.c, test_quant_vectors.c).
**
** tq_rng_*: one xorshift64* stream (Vigna 2016: x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
** return x * 0x2545F4914F6CDD1D), seeded 0x9E3779B97F4A7C15 at program start and shared by
** every caller of the program, so a test's data depends on the tests run before it.
*/
#ifndef TM_TEST_QUANT_DATA_H
#define TM_TEST_QUANT_DATA_H

#include <stdint.h>

#include "tensormorph.h"

uint64_t tq_rng_u64(void);
/* uniform in [0, 1), 24 bits */
float tq_rng_unit(void);
/* roughly N(0, 1): the sum of 6 uniforms, centred and scaled by sqrt(2) */
float tq_rng_normal(void);

/* Code i of a byte-per-code array of dtype dt (signed dtypes sign-extended). */
int64_t tq_code_at(const uint8_t *codes, int64_t i, tm_dtype dt);

#endif
