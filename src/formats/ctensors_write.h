/*
** ctensors_write.h: the compressed-tensors layout as the writer lays it out (the reader,
** ctensors.c, recognises the same; docs/formats.md "compressed-tensors",
** ../shared/formats/compressed-tensors.md). The quantize job (src/job/qjob.c) computes and packs
** the values; this file knows the tensor names, dtypes and shapes, and the files a Hugging Face
** checkpoint directory carries beside its weights.
*/
#ifndef TM_FORMATS_CTENSORS_WRITE_H
#define TM_FORMATS_CTENSORS_WRITE_H
#include "../core/core.h"

/* One quantized 2-D weight "<module>.weight" [rows, cols] with its scheme (axes normalised to
** 2-D: channel axis 0, group axis 1) and its param (scale) shape [pshape[0], pshape[1]]. */
typedef struct tm__ct_weight {
    const char     *module;    /* the tensor name without ".weight"                             */
    int             fp8;       /* 1: naive-quantized float8_e4m3fn codes; 0: pack-quantized int */
    const tm_qspec *spec;
    int64_t         rows, cols;
    int             pndim;
    const int64_t  *pshape;
    int64_t         n_params;
} tm__ct_weight;

enum { TM__CT_CODES = 0, TM__CT_SCALE, TM__CT_SHAPE, TM__CT_ZP };

/* Append the safetensors entries of w at entries[*ne], names[*ne] (malloc'd, the caller frees):
**   codes       pack-quantized "M.weight_packed" I32 [rows, ceil(cols*bits/32)];
**               fp8 "M.weight" F8_E4M3 [rows, cols];
**   scale       "M.weight_scale" in the scale dtype: tensor [1], channel [rows, 1], group and
**               block [pshape[0], pshape[1]];
**   shape       pack-quantized only: "M.weight_shape" I64 [2];
**   zero point  asymmetric only: "M.weight_zero_point", tensor I8 [1], else I32
**               [ceil(prow*bits/32), ng] (prow = n_params / ng rows of params packed along dim 0).
** idx[TM__CT_CODES..TM__CT_ZP] get the entry indices (-1 for an absent one), *row_bytes the bytes
** of one row of codes. Returns TM_OK | TM_E_NOMEM. */
tm_status tm__ct_weight_entries(const tm__ct_weight *w, tm_st_entry *entries, char **names, int64_t *ne,
                                int64_t idx[4], uint64_t *row_bytes, tm_err *err);

/* Copy the files a Hugging Face checkpoint directory carries beside its weights
** (generation_config.json, tokenizer files, chat template, preprocessor config; each under
** 64 MiB) from the directory of `in`'s first file into `dir`, each written atomically. A runtime
** loading the quantized directory needs them just the same. Returns TM_OK | TM_E_IO | TM_E_NOMEM. */
tm_status tm__ct_copy_side_files(const tm_file *in, const char *dir, tm_err *err);

#endif
