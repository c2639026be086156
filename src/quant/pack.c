/*
** pack.c: bit packing of codes into container words [../shared/formats/compressed-tensors.md
** section 3, pack_to_int32 / unpack_from_int32; docs/quantization.md "Packing"].
**
** A stream (one row, or one column for the dim-0 variant) is a sequence of `bits`-wide fields;
** field j occupies stream bits [j*bits, (j+1)*bits), stream bit t is bit t%W of word t/W
** (W = container width), words little-endian. Because the words are little-endian and filled
** least significant bit first, the stream of one row is exactly a little-endian byte stream
** (bit t in byte t/8 at bit t%8), which is how the row variant is written. The dim-0 variant
** strides over words of different columns, so it works word by word.
** lsb_first = 2 (TM_PACK_LSB_PER_WORD) is the per-word variant: each word holds W div bits
** fields from its lowest bits up and never a part of one (compressed-tensors < 0.18.0).
*/
#include "quant_impl.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

struct packer {
    int      bits;       /* field width, 1..8                   */
    int      wbits;      /* container width W: 8, 16, 32, 64     */
    int      lsb_first;
    uint32_t mask;       /* (1 << bits) - 1                      */
    int64_t  offset;
    int      code_signed;
};

static int container_bits(tm_dtype dt) {
    const tm_dtype_traits *t = tm_dtype_get(dt);
    if (!t || dt == TM_BOOL || dt == TM_I4 || dt == TM_U4 || dt == TM_F8_E8M0) return 0;
    if (t->is_float && t->bits != 8) return 0; /* only fp8 float containers */
    return t->bits;
}

static tm_status packer_init(struct packer *p, const tm_packing *pk, tm_dtype code_dtype,
                             tm_err *err) {
    if (!pk) return tm__err_set(err, TM_E_INVALID_ARG, -1, "pack: packing is NULL");
    const tm_dtype_traits *ct = tm_dtype_get(code_dtype);
    if (!ct || !ct->is_code)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "pack: %s is not a code dtype",
                           ct ? ct->name : "?");
    p->wbits = container_bits(pk->container);
    p->bits = pk->bits;
    if (p->wbits == 0 || p->bits < 1 || p->bits > 8 || p->bits > p->wbits)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "pack: %d-bit codes in a %s container are not supported", pk->bits,
                           tm_dtype_get(pk->container) ? tm_dtype_get(pk->container)->name : "?");
    p->lsb_first = pk->lsb_first;
    if (p->lsb_first < 0 || p->lsb_first > TM_PACK_LSB_PER_WORD)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "pack: lsb_first %d is not 0, 1 or 2",
                           pk->lsb_first);
    if (!p->lsb_first && p->wbits % p->bits != 0)
        return tm__err_set(err, TM_E_INVALID_ARG, -1,
                           "pack: MSB-first packing needs bits (%d) to divide the word (%d)",
                           p->bits, p->wbits);
    p->mask = (1u << p->bits) - 1u;
    p->offset = pk->offset;
    p->code_signed = ct->is_signed && !ct->is_float;
    return TM_OK;
}

uint64_t tm_packed_row_bytes(const tm_packing *pk, int64_t len) {
    struct packer p = {0};
    if (len < 0 || packer_init(&p, pk, TM_U8, NULL) != TM_OK) return 0;
    uint64_t nbits, words;
    if (p.lsb_first == TM_PACK_LSB_PER_WORD) {
        uint64_t per = (uint64_t)(p.wbits / p.bits);
        words = (uint64_t)len / per + ((uint64_t)len % per != 0);
    } else {
        if (!tm__mul_u64_ok((uint64_t)len, (uint64_t)p.bits, &nbits)) return 0;
        words = nbits / (uint64_t)p.wbits + (nbits % (uint64_t)p.wbits != 0);
    }
    uint64_t bytes;
    if (!tm__mul_u64_ok(words, (uint64_t)p.wbits / 8, &bytes)) return 0;
    return bytes;
}

/* Position of field j: word index and bit offset inside the word (LSB numbering). */
static void field_pos(const struct packer *p, int64_t j, int64_t *word, int *bit) {
    if (p->lsb_first == TM_PACK_LSB_PER_WORD) {
        int64_t per = p->wbits / p->bits;
        *word = j / per;
        *bit = (int)(j % per) * p->bits;
    } else if (p->lsb_first) {
        int64_t t = j * p->bits;
        *word = t / p->wbits;
        *bit = (int)(t % p->wbits);
    } else {
        int64_t per = p->wbits / p->bits;
        *word = j / per;
        *bit = p->wbits - (int)((j % per) + 1) * p->bits;
    }
}

static uint64_t load_word(const uint8_t *w, int wbits) {
    switch (wbits) {
    case 8: return w[0];
    case 16: return tm__ld16(w);
    case 32: return tm__ld32(w);
    default: return tm__ld64(w);
    }
}
static void store_word(uint8_t *w, int wbits, uint64_t v) {
    switch (wbits) {
    case 8: w[0] = (uint8_t)v; break;
    case 16: tm__st16(w, (uint16_t)v); break;
    case 32: tm__st32(w, (uint32_t)v); break;
    default: tm__st64(w, v); break;
    }
}

/* OR `field` into the stream at field index j; words at base + k * stride_bytes. The target
** bits must be zero (streams are zeroed first). */
static void put_field(const struct packer *p, uint8_t *base, size_t stride_bytes, int64_t j,
                      uint32_t field) {
    int64_t k;
    int bit;
    field_pos(p, j, &k, &bit);
    uint8_t *w = base + (size_t)k * stride_bytes;
    store_word(w, p->wbits, load_word(w, p->wbits) | ((uint64_t)field << bit));
    int spill = bit + p->bits - p->wbits; /* bits that continue in the next word */
    if (spill > 0) {
        uint8_t *w2 = w + stride_bytes;
        store_word(w2, p->wbits, load_word(w2, p->wbits) | ((uint64_t)field >> (p->bits - spill)));
    }
}

static uint32_t get_field(const struct packer *p, const uint8_t *base, size_t stride_bytes,
                          int64_t j, uint64_t *first_word) {
    int64_t k;
    int bit;
    field_pos(p, j, &k, &bit);
    const uint8_t *w = base + (size_t)k * stride_bytes;
    uint64_t v0 = load_word(w, p->wbits);
    if (first_word) *first_word = v0;
    uint64_t f = v0 >> bit;
    int spill = bit + p->bits - p->wbits;
    if (spill > 0) f |= load_word(w + stride_bytes, p->wbits) << (p->bits - spill);
    return (uint32_t)(f & p->mask);
}

static uint32_t encode(const struct packer *p, uint8_t code) {
    int64_t c = p->code_signed ? (int64_t)(int8_t)code : (int64_t)code;
    return (uint32_t)((uint64_t)(c + p->offset) & p->mask);
}

static int64_t decode(const struct packer *p, uint32_t field) {
    int64_t c = (int64_t)field - p->offset;
    if (p->code_signed && p->offset == 0 && (field & (1u << (p->bits - 1))))
        c -= (int64_t)1 << p->bits; /* two's complement field */
    return c;
}

static tm_status dims_ok(int64_t rows, int64_t cols, const void *a, const void *b, tm_err *err) {
    if (rows < 0 || cols < 0)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "pack: negative matrix size %lldx%lld",
                           (long long)rows, (long long)cols);
    if (rows > 0 && cols > 0 && (!a || !b))
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "pack: NULL buffer");
    return TM_OK;
}

tm_status tm_pack_codes(const tm_packing *pk, tm_dtype code_dtype, const uint8_t *codes,
                        int64_t rows, int64_t cols, void *out, tm_err *err) {
    struct packer p = {0};
    tm_status st = packer_init(&p, pk, code_dtype, err);
    if (st == TM_OK) st = dims_ok(rows, cols, codes, out, err);
    if (st != TM_OK || rows == 0 || cols == 0) return st;
    uint64_t row_bytes = tm_packed_row_bytes(pk, cols);
    size_t wbytes = (size_t)p.wbits / 8;
    if (p.lsb_first && (p.bits == 8 || p.bits == 4)) {
        /* Byte-aligned fields of an LSB-first stream in little-endian words: field j of an 8-bit
        ** stream is byte j, of a 4-bit stream the low (even j) or high (odd j) nibble of byte
        ** j/2. (code + offset) mod 2^bits equals ((uint8_t)code + offset) mod 2^bits for signed
        ** and unsigned codes alike, so one add per code: the same words as put_field writes. */
        const uint8_t off = (uint8_t)((uint64_t)p.offset & 0xffu);
        for (int64_t r = 0; r < rows; r++) {
            uint8_t *row = (uint8_t *)out + (size_t)r * row_bytes;
            const uint8_t *c = codes + (size_t)r * (size_t)cols;
            size_t used;
            if (p.bits == 8) {
                for (int64_t j = 0; j < cols; j++) row[j] = (uint8_t)(c[j] + off);
                used = (size_t)cols;
            } else {
                int64_t j = 0;
#ifdef __SSE2__
                /* 32 codes at a time: v = (code + off) & 15 per byte; in each 16-bit word
                ** w = v[2i] | v[2i+1] << 8, (w | w >> 4) & 0xff is v[2i] | v[2i+1] << 4
                ** (v[2i] < 16 leaves nothing above bit 3 for the shift to bring down) */
                const __m128i voff = _mm_set1_epi8((char)off), nib = _mm_set1_epi8(0x0f);
                const __m128i lo8 = _mm_set1_epi16(0xff);
                for (; j + 32 <= cols; j += 32) {
                    __m128i a = _mm_and_si128(_mm_add_epi8(_mm_loadu_si128((const __m128i *)(const void *)(c + j)), voff), nib);
                    __m128i b = _mm_and_si128(_mm_add_epi8(_mm_loadu_si128((const __m128i *)(const void *)(c + j + 16)), voff), nib);
                    a = _mm_and_si128(_mm_or_si128(a, _mm_srli_epi16(a, 4)), lo8);
                    b = _mm_and_si128(_mm_or_si128(b, _mm_srli_epi16(b, 4)), lo8);
                    _mm_storeu_si128((__m128i *)(void *)(row + j / 2), _mm_packus_epi16(a, b));
                }
#endif
                for (; j + 1 < cols; j += 2)
                    row[j / 2] = (uint8_t)(((c[j] + off) & 0x0fu) | (((c[j + 1] + off) & 0x0fu) << 4));
                if (j < cols) row[j / 2] = (uint8_t)((c[j] + off) & 0x0fu);
                used = (size_t)(cols + 1) / 2;
            }
            memset(row + used, 0, row_bytes - used);
        }
        return TM_OK;
    }
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = (uint8_t *)out + (size_t)r * row_bytes;
        memset(row, 0, row_bytes);
        const uint8_t *c = codes + (size_t)r * (size_t)cols;
        for (int64_t j = 0; j < cols; j++) put_field(&p, row, wbytes, j, encode(&p, c[j]));
    }
    return TM_OK;
}

tm_status tm_unpack_codes(const tm_packing *pk, tm_dtype code_dtype, const void *packed,
                          int64_t rows, int64_t cols, uint8_t *codes, tm_err *err) {
    struct packer p = {0};
    tm_status st = packer_init(&p, pk, code_dtype, err);
    if (st == TM_OK) st = dims_ok(rows, cols, packed, codes, err);
    if (st != TM_OK || rows == 0 || cols == 0) return st;
    uint64_t row_bytes = tm_packed_row_bytes(pk, cols);
    size_t wbytes = (size_t)p.wbits / 8;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *row = (const uint8_t *)packed + (size_t)r * row_bytes;
        uint8_t *c = codes + (size_t)r * (size_t)cols;
        for (int64_t j = 0; j < cols; j++)
            c[j] = (uint8_t)decode(&p, get_field(&p, row, wbytes, j, NULL));
    }
    return TM_OK;
}

tm_status tm_pack_codes_dim0(const tm_packing *pk, tm_dtype code_dtype, const uint8_t *codes,
                             int64_t rows, int64_t cols, void *out, tm_err *err) {
    struct packer p = {0};
    tm_status st = packer_init(&p, pk, code_dtype, err);
    if (st == TM_OK) st = dims_ok(rows, cols, codes, out, err);
    if (st != TM_OK || rows == 0 || cols == 0) return st;
    uint64_t col_bytes = tm_packed_row_bytes(pk, rows); /* words of one column's stream */
    size_t wbytes = (size_t)p.wbits / 8, stride = wbytes * (size_t)cols;
    memset(out, 0, (size_t)col_bytes * (size_t)cols);
    for (int64_t c = 0; c < cols; c++) {
        uint8_t *base = (uint8_t *)out + (size_t)c * wbytes;
        for (int64_t r = 0; r < rows; r++)
            put_field(&p, base, stride, r, encode(&p, codes[(size_t)r * (size_t)cols + (size_t)c]));
    }
    return TM_OK;
}

tm_status tm_unpack_codes_dim0(const tm_packing *pk, tm_dtype code_dtype, const void *packed,
                               int64_t rows, int64_t cols, uint8_t *codes, tm_err *err) {
    struct packer p = {0};
    tm_status st = packer_init(&p, pk, code_dtype, err);
    if (st == TM_OK) st = dims_ok(rows, cols, packed, codes, err);
    if (st != TM_OK || rows == 0 || cols == 0) return st;
    size_t wbytes = (size_t)p.wbits / 8, stride = wbytes * (size_t)cols;
    for (int64_t c = 0; c < cols; c++) {
        const uint8_t *base = (const uint8_t *)packed + (size_t)c * wbytes;
        for (int64_t r = 0; r < rows; r++)
            codes[(size_t)r * (size_t)cols + (size_t)c] =
                (uint8_t)decode(&p, get_field(&p, base, stride, r, NULL));
    }
    return TM_OK;
}

tm_status tm_unpack_one(const tm_packing *pk, tm_dtype code_dtype, const void *row_base,
                        int64_t col, int64_t *code, uint64_t *stored_word) {
    struct packer p = {0};
    if (packer_init(&p, pk, code_dtype, NULL) != TM_OK || col < 0 || !row_base)
        return TM_E_INVALID_ARG;
    uint64_t w;
    uint32_t f = get_field(&p, (const uint8_t *)row_base, (size_t)p.wbits / 8, col, &w);
    if (code) *code = decode(&p, f);
    if (stored_word) *stored_word = w;
    return TM_OK;
}
