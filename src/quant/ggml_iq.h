/* ggml_iq.h: private to src/quant: the IQ lookup tables (ggml_iq_tables.c) and the block
** decoders of the grid types (ggml_dequant_iq.c, named in the type table ggml_traits.h). */
#ifndef TM_QUANT_GGML_IQ_H
#define TM_QUANT_GGML_IQ_H

#include "../core/core.h"

/* What a block decoder reports besides the values (see tm_ggml_elem). */
typedef struct blk_detail {
    int64_t  code[TM_GGML_QK_K];
    uint64_t stored[TM_GGML_QK_K];
    int      stored_bits;
    double   d, dmin;
    double   scale[TM_GGML_QK_K / 8], zp[TM_GGML_QK_K / 8], min[TM_GGML_QK_K / 8];
    int64_t  sub_scale[TM_GGML_QK_K / 8], sub_min[TM_GGML_QK_K / 8];
} blk_detail;

typedef void (*tm__ggml_block_fn)(const uint8_t *block, float *y, blk_detail *dt);

/* ggml-common.h kvalues_iq4nl: the 16 IQ4_NL / IQ4_XS code values. */
extern const int8_t tm__kvalues_iq4nl[16];

/* The grids and sign table, unpacked from ggml_iq_tables.c on first use: call
** tm__ggml_iq_init() (thread-safe) first; it returns 0 if the packed text is damaged. */
int tm__ggml_iq_init(void);
extern uint8_t tm__iq2xxs_grid[256][8];
extern uint8_t tm__iq2xs_grid[512][8];
extern uint8_t tm__iq2s_grid[1024][8];
extern uint8_t tm__iq3xxs_grid[256][4];
extern uint8_t tm__iq3s_grid[512][4];
extern int8_t  tm__iq1s_grid[2048][8];
extern uint8_t tm__ksigns_iq2xs[128];
/* The packed text itself (tests check its order). */
extern const char tm__iq2xxs_hex[], tm__iq2xs_hex[], tm__iq2s_hex[], tm__iq3xxs_hex[],
    tm__iq3s_hex[], tm__iq1s_hex[];

#endif
