/* ggml_validate.c: the check llama-quantize makes of every quantized row before it writes it
** (ggml_validate_row_data, llama.cpp@c392e509 ggml/src/ggml-quants.c, called by
** llama_tensor_quantize_impl; "quantized data validation failed"): each block's float16 scale
** (and min) must be finite. ggml's arithmetic gives NaN scales for some importance matrices
** (all-zero or negative importances), and llama-quantize then refuses the model. */
#include "ggml_quant_impl.h"
#include "tensormorph/ggml.h"

/* Byte offsets of a block's float16 d and (or -1) its min, as ggml's block structs lay them out. */
static int field_offsets(int type, int *d, int *m) {
    *m = -1;
    switch (type) {
    case TM_GGML_Q4_0: case TM_GGML_Q5_0: case TM_GGML_Q8_0: case TM_GGML_IQ1_S: case TM_GGML_IQ2_XXS:
    case TM_GGML_IQ2_XS: case TM_GGML_IQ2_S: case TM_GGML_IQ3_XXS: case TM_GGML_IQ3_S: case TM_GGML_IQ4_NL:
    case TM_GGML_IQ4_XS: *d = 0; return 1;
    case TM_GGML_Q4_1: case TM_GGML_Q5_1: case TM_GGML_Q4_K: case TM_GGML_Q5_K: *d = 0; *m = 2; return 1;
    case TM_GGML_Q2_K: *d = 80; *m = 82; return 1;  /* scales[16], qs[64], d, dmin   */
    case TM_GGML_Q3_K: *d = 108; return 1;          /* hmask[32], qs[64], scales[12] */
    case TM_GGML_Q6_K: *d = 208; return 1;          /* ql[128], qh[64], scales[16]   */
    case TM_GGML_TQ1_0: *d = 52; return 1;          /* qs[48], qh[4]                 */
    case TM_GGML_TQ2_0: *d = 64; return 1;          /* qs[64]                        */
    case TM_GGML_IQ1_M: *d = -2; return 1;          /* spread over scales[8] at 48   */
    default: return 0;
    }
}

static int bad_f16(uint16_t h) { return (h & 0x7c00u) == 0x7c00u; }

int64_t tm__gq_validate(int type, const uint8_t *q, int64_t nb, int *nan) {
    int d, m;
    const tm_ggml_type_info *ti = tm_ggml_type_info_get(type);
    *nan = 0;
    if (!ti || !field_offsets(type, &d, &m)) return -1;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = q + (size_t)b * ti->type_size;
        uint16_t h[2];
        int k = 0;
        if (d == -2) { /* IQ1_M: the f16 scale's nibbles are the top nibbles of the 4 u16 scales */
            const uint16_t s0 = tm__ld16(p + 48), s1 = tm__ld16(p + 50), s2 = tm__ld16(p + 52), s3 = tm__ld16(p + 54);
            h[k++] = (uint16_t)((s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000));
        } else {
            h[k++] = tm__ld16(p + d);
            if (m >= 0) h[k++] = tm__ld16(p + m);
        }
        for (int i = 0; i < k; i++)
            if (bad_f16(h[i])) {
                *nan = (h[i] & 0x03ffu) != 0;
                return b;
            }
    }
    return -1;
}
