/*
** tensormorph/imatrix.h: importance matrices (imatrix files) as llama.cpp's llama-imatrix writes
** them and llama-quantize reads them: per weight tensor, the mean squared input activation of
** each of its input columns, which the ggml K-quant and IQ searches use as column weights
** (tm_gq_quantize_row_imatrix, tensormorph/ggml_quant.h). Two file formats:
**   legacy binary (llama.cpp@c392e509 examples/imatrix/imatrix.cpp save_imatrix, read by
**   examples/quantize/quantize.cpp load_imatrix), little-endian, no magic, no padding:
**       int32 n_entries (>= 1); n_entries times { int32 name_len; char name[name_len];
**       int32 ncall; int32 nval (>= 1); float32 values[nval] }; then, optionally (absent in
**       older files), int32 chunks (llama-imatrix's last_call) and int32 dataset_len,
**       char dataset[dataset_len] (its -f argument as typed).
**     values[j] = ncall * mean(x_j^2); llama-quantize divides by ncall (float32 division, when
**     ncall > 0) to get the column weights.
**   GGUF (newer llama.cpp, tools/imatrix/imatrix.cpp and tools/quantize/quantize.cpp
**   load_imatrix, the format since llama.cpp's "imatrix : use GGUF to store importance
**   matrices" change, 2025): a GGUF file with general.type = "imatrix", imatrix.datasets
**   (array of strings), imatrix.chunk_count (u32), imatrix.chunk_size (u32), and per weight W
**   two F32 tensors "W.in_sum2" (ne [nval, n_mat]: per matrix, the sums of x_j^2) and
**   "W.counts" (ne [1, n_mat]: rows seen per matrix); weights = in_sum2 / counts per matrix,
**   1 for a matrix whose count is <= 0 (never seen in calibration).
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_IMATRIX_H
#define TENSORMORPH_IMATRIX_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tm_imatrix_entry {
    char    *name;     /* the weight's tensor name ("blk.0.attn_q.weight")                    */
    int64_t  nval;     /* values: input columns x matrices (experts)                           */
    int32_t  ncall;    /* legacy: the stored ncall; GGUF: the largest count, as an int         */
    uint64_t offset;   /* byte offset of the entry (legacy: its name_len; GGUF: in_sum2 data)  */
    float   *weights;  /* [nval] the column weights llama-quantize uses (sums / ncall)         */
    uint64_t values_offset; /* byte offset of the stored values (legacy) / in_sum2 data (GGUF) */
    int64_t  index;    /* the entry's number in the file (0-based)                              */
} tm_imatrix_entry;

typedef struct tm_imatrix {
    char             *path;       /* as given                                                 */
    int               is_gguf;    /* 1: GGUF-based format, 0: legacy binary                   */
    int64_t           n;          /* distinct entries (a repeated legacy name: the last wins,  */
    tm_imatrix_entry *e;          /*   as in llama-quantize's unordered_map)                   */
    int32_t           chunks;     /* legacy trailer's chunk count / imatrix.chunk_count; 0 when
                                     the legacy trailer is absent                             */
    char             *dataset;    /* the (first) dataset name; NULL when absent               */
    char              sha256[65]; /* hex sha256 of the file's bytes (the recipe of a --shard part
                                     records it: parts of one output must use one matrix)     */
} tm_imatrix;

/* tm_imatrix_load: read an imatrix file of either format (GGUF when it starts with "GGUF"),
** as llama-quantize reads it: a legacy name is cut at its first NUL byte, an empty name is an
** entry named "". Every length and count is checked against the bytes left before use.
** Returns TM_OK | TM_E_IO (cannot read; a directory) | TM_E_CORRUPT (truncated or inconsistent:
** the message names the file, the entry by number and name, the field, its byte offset, the
** bytes it needs and those left) | TM_E_NONFINITE (a NaN or inf value: llama-quantize refuses
** such a matrix too; names entry and index) | TM_E_UNSUPPORTED (a GGUF file that is not an
** imatrix) | TM_E_LIMIT (a non-GGUF file over 1 GiB: legacy files are a few MiB) | TM_E_NOMEM.
** Free with tm_imatrix_free. */
tm_status tm_imatrix_load(const char *path, tm_imatrix **out, tm_err *err);
/* tm_imatrix_load_unchecked: tm_imatrix_load without the non-finite check, for a caller that
** filters entries first (llama-quantize's order: --include/--exclude-weights, then the check of
** the entries kept); then call tm_imatrix_check_finite. */
tm_status tm_imatrix_load_unchecked(const char *path, tm_imatrix **out, tm_err *err);
/* tm_imatrix_check_finite: TM_OK, or TM_E_NONFINITE naming the file, the first entry (in file
** order) holding a NaN or inf, the value's index and byte offset. */
tm_status tm_imatrix_check_finite(const tm_imatrix *m, tm_err *err);
/* tm_imatrix_odd_entry: 1 when the entry's weights hold a negative value, 2 when they are all
** zero (ggml's searches then weight nothing: llama-quantize writes what its arithmetic gives,
** often zero or NaN scales), else 0. */
int       tm_imatrix_odd_entry(const tm_imatrix_entry *e);
void      tm_imatrix_free(tm_imatrix *m);

/* tm_imatrix_find: the entry of tensor `name` (exact match), NULL when absent. */
const tm_imatrix_entry *tm_imatrix_find(const tm_imatrix *m, const char *name);

/* tm_imatrix_filter: llama-quantize's --exclude-weights / --include-weights (prepare_imatrix):
** drop every entry whose name contains one of the n_excl strings; then, when n_incl > 0, keep
** only entries whose name contains one of the n_incl strings. */
void      tm_imatrix_filter(tm_imatrix *m, const char *const *excl, int64_t n_excl,
                            const char *const *incl, int64_t n_incl);

#ifdef __cplusplus
}
#endif
#endif
