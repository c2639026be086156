/*
** tensormorph/gguf_job.h: quantize a checkpoint (GGUF, or safetensors F32/F16/BF16) into a
** GGUF file with ggml block types, choosing each tensor's type by llama-quantize's rules
** (llama.cpp@c392e509 src/llama-quant.cpp; the rules and their sources: docs/gguf-quantize.md),
** byte-identical to llama-quantize on the same input.
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_GGUF_JOB_H
#define TENSORMORPH_GGUF_JOB_H

#ifdef __cplusplus
extern "C" {
#endif

/* llama.cpp's llama_ftype values (general.file_type) of the file types the job makes
** (llama.cpp@c392e509 include/llama.h enum llama_ftype). */
enum {
    TM_FTYPE_F32 = 0, TM_FTYPE_F16 = 1, TM_FTYPE_Q4_0 = 2, TM_FTYPE_Q4_1 = 3, TM_FTYPE_Q8_0 = 7,
    TM_FTYPE_Q5_0 = 8, TM_FTYPE_Q5_1 = 9, TM_FTYPE_Q2_K = 10, TM_FTYPE_Q3_K_S = 11,
    TM_FTYPE_Q3_K_M = 12, TM_FTYPE_Q3_K_L = 13, TM_FTYPE_Q4_K_S = 14, TM_FTYPE_Q4_K_M = 15,
    TM_FTYPE_Q5_K_S = 16, TM_FTYPE_Q5_K_M = 17, TM_FTYPE_Q6_K = 18, TM_FTYPE_IQ2_XXS = 19,
    TM_FTYPE_IQ2_XS = 20, TM_FTYPE_Q2_K_S = 21, TM_FTYPE_IQ3_XS = 22, TM_FTYPE_IQ3_XXS = 23,
    TM_FTYPE_IQ1_S = 24, TM_FTYPE_IQ4_NL = 25, TM_FTYPE_IQ3_S = 26, TM_FTYPE_IQ3_M = 27,
    TM_FTYPE_IQ2_S = 28, TM_FTYPE_IQ2_M = 29, TM_FTYPE_IQ4_XS = 30, TM_FTYPE_IQ1_M = 31,
    TM_FTYPE_BF16 = 32, TM_FTYPE_TQ1_0 = 36, TM_FTYPE_TQ2_0 = 37,
    /* llama-quantize's COPY: every tensor copied as it is (its only_copy); general.file_type
    ** then holds the input's file type (its general.file_type, else the type most tensors
    ** have, with llama's GUESSED bit 1024) */
    TM_FTYPE_COPY = 1 << 20
};
/* no --output-tensor-type / --token-embedding-type: the rules choose */
#define TM_GGUF_TYPE_RULES (-1)

/* tm_gguf_ftype_from_name: a llama-quantize type name (case-insensitive) of its QUANT_OPTIONS
** table at c392e509: Q4_0 Q4_1 Q5_0 Q5_1 IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ1_S IQ1_M TQ1_0 TQ2_0 Q2_K
** Q2_K_S IQ3_XXS IQ3_S IQ3_M Q3_K (= Q3_K_M) IQ3_XS Q3_K_S Q3_K_M Q3_K_L IQ4_NL IQ4_XS Q4_K
** (= Q4_K_M) Q4_K_S Q4_K_M Q5_K (= Q5_K_M) Q5_K_S Q5_K_M Q6_K Q8_0 F16 BF16 F32 COPY, or a
** file type number of one of them (as llama-quantize's try_parse_ftype). -1 when unknown. */
int         tm_gguf_ftype_from_name(const char *name);
/* tm_gguf_ftype_name: the canonical name ("Q4_K_M"), "?" when unknown. */
const char *tm_gguf_ftype_name(int ftype);
/* tm_gguf_ftype_list: every name tm_gguf_ftype_from_name accepts (the file-type table the
** quantizer uses, in llama-quantize's QUANT_OPTIONS order, then its aliases Q3_K Q4_K Q5_K),
** separated by one space, into buf (NUL-terminated; when n is too small it ends after the last
** whole name that fits). Returns the length of the whole list (without the NUL), as snprintf. */
size_t      tm_gguf_ftype_list(char *buf, size_t n);
/* tm_gguf_ftype_default_type: the ggml type of a file type's ordinary tensors (Q4_K_M ->
** Q4_K, IQ2_S -> IQ2_XS, COPY -> F32), -1 when unknown. */
int         tm_gguf_ftype_default_type(int ftype);
/* tm_gguf_ftype_needs_imatrix: 1 for the file types llama-quantize refuses without an
** importance matrix (IQ1_S IQ1_M IQ2_S IQ2_XXS IQ2_XS Q2_K_S). */
int         tm_gguf_ftype_needs_imatrix(int ftype);

/* tm_gguf_tensor_cache: quantized tensors kept between quantize calls of one source (the
** sensitivity probes, docs/sensitivity.md "Cache"). A tensor is keyed by its name, the ggml type
** written and whether an importance matrix was used; its bytes come in the quantizer's chunks
** (rows of about 2^20 values, the same split on every call), each with its error sums
** sums[3] = {sum x^2, sum err^2, max |err|}, so a tensor taken from the cache gives the same
** output bytes and manifest as quantizing it again.
**   has: 1 when every chunk of that tensor (n_bytes in all) is stored; called once per quantized
**        tensor before the quantize starts (a miss is then quantized and offered to put).
**   get: chunk c (bytes [off, off + len) of the tensor) into dst and its sums; TM_OK or an error.
**   put: chunk c of n_chunks just quantized; may keep it or not (bounded memory). Called from the
**        quantizer's worker threads at once: the functions must be thread-safe. */
typedef struct tm_gguf_tensor_cache {
    void     *ud;
    int       (*has)(void *ud, const char *name, int type, int imatrix, uint64_t n_bytes);
    tm_status (*get)(void *ud, const char *name, int type, int imatrix, int64_t c, uint64_t off, void *dst,
                     size_t len, double sums[3], tm_err *err);
    void      (*put)(void *ud, const char *name, int type, int imatrix, uint64_t n_bytes, int64_t c, int64_t n_chunks,
                     uint64_t off, const void *data, size_t len, const double sums[3]);
} tm_gguf_tensor_cache;

typedef struct tm_gguf_quantize_params {
    int          ftype;               /* TM_FTYPE_*                                             */
    const tm_kernels *kernels;        /* kernel set of the whole job (tm_kernels_get): the ggml
                                         quantizers and error sums; NULL: "auto". Same bytes     */
    int          pure;                /* 1: every quantizable tensor gets the default type      */
    int          leave_output_tensor; /* 1: output.weight is not quantized                       */
    const char *const *tt_patterns;   /* --tensor-type REGEX=TYPE: POSIX extended regexes,      */
    const int   *tt_types;            /*   searched in the name; the last match wins             */
    int64_t      n_tt;
    int          strict;              /* 1: a tensor the reference refuses (a row that is not a
                                         multiple of any allowed block) is an error instead of
                                         being kept in F16                                       */
    int          no_checksums;        /* 1: no sha256 in the manifest                            */
    int          n_threads;           /* 0 = tm_usable_cpus(); same bytes for any count          */
    const char  *command_line;        /* recorded in the manifest                                */
    void (*progress)(void *ud, const char *phase, uint64_t done, uint64_t total);
    void        *progress_ud;
    volatile const int *cancel;
    int          force;               /* 1: replace an existing OUT that is a previous tensormorph
                                         output (has "<OUT>.manifest.json"); never anything else */
    int          allow_long_names;    /* 1: write tensor names of TM_GGUF_MAX_NAME (64) bytes or
                                         more, which llama.cpp refuses; 0: refuse them
                                         (TM_E_UNSUPPORTED naming the tensor and its length)     */
    const tm_file *source;            /* NULL, or the checkpoint `in` was made from (convert
                                         --type: `in` is its temporary F32 GGUF): the manifest
                                         names and hashes its files, and OUT may not be one    */
    /* llama-quantize's options (llama.cpp@c392e509 examples/quantize/quantize.cpp) */
    const tm_imatrix *imatrix;        /* --imatrix (tm_imatrix_load, filtered by --include-/
                                         --exclude-weights); NULL or no entries: none         */
    const char  *imatrix_arg;         /* the --imatrix argument as typed: quantize.imatrix.file
                                         (llama-quantize keeps 127 bytes); NULL: imatrix->path */
    int64_t      imatrix_n_read;      /* entries the file held before --include-/--exclude-weights
                                         (0: imatrix->n); the manifest and messages say it     */
    const char *const *imatrix_dropped; /* names of the entries those filters dropped (or NULL): a
                                         tensor among them is "excluded", not "no entry"     */
    int64_t      n_imatrix_dropped;
    int          output_tensor_type;  /* --output-tensor-type: a ggml type, or TM_GGUF_TYPE_RULES */
    int          token_embedding_type;/* --token-embedding-type: likewise                        */
    int          allow_requantize;    /* 1: a quantized source tensor is dequantized and quantized
                                         again (else refused, as llama-quantize)                 */
    int          allow_empty;         /* 1: an already-quantized input whose tensors all keep their
                                         types is copied (else TM_E_UNSUPPORTED; not COPY)       */
    const tm_gguf_kvlist *kv_overrides; /* --override-kv: set last, in order (NULL: none)          */
    int          tt_exact;            /* 1: a tt_patterns match sets the tensor's type even where the
                                         rules fell back (a K type on a row that is not a multiple
                                         of 256) or refused the tensor; the row must still hold the
                                         type (else F16, as above). 0: llama-quantize's behaviour,
                                         an override only where no fallback happened. Recipe key
                                         "tensor_types_exact" (docs/recipe.md); sensitivity plans */
    uint64_t     max_shard_bytes;     /* 0: one file; else llama.cpp gguf-split files
                                         OUT-00001-of-0000N.gguf ... of at most this many data
                                         bytes each (tm_gguf_writer_open_split) beside
                                         OUT.manifest.json; OUT itself is not written        */
    int          keep_split;          /* --keep-split: a split GGUF input (gguf-split files, read
                                         as one model) gives the same number of split files, each
                                         holding the tensors of its input file, named as above
                                         (tm_gguf_writer_open_split_as); a single-file input one
                                         file. Not with max_shard_bytes (TM_E_INVALID_ARG)     */
    int          shard_index, shard_count; /* --shard i/n (docs/scale-out.md): with count > 0
                                         write only part i, the directory OUT.part-i-of-n beside
                                         out_path, for tm_merge; 0: the whole file            */
    const tm_gguf_tensor_cache *tensor_cache; /* NULL, or quantized tensors to reuse and fill
                                         (tm_gguf_tensor_cache above); same bytes either way */
    int          scratch;             /* 1: OUT is a scratch file read back at once and removed
                                         (the sensitivity probes' candidates): its data is not
                                         fsynced (TM_GGUF_WRITE_SCRATCH); the same bytes       */
} tm_gguf_quantize_params;

tm_gguf_quantize_params tm_gguf_quantize_params_default(void); /* Q8_0, rules on, n_threads 0 (tm_usable_cpus) */

/* What the importance matrix did for a tensor (tm_gguf_quantize_tensor.imatrix_use). */
enum {
    TM_GGUF_IMX_NONE = 0,     /* no matrix, or the tensor is copied                                */
    TM_GGUF_IMX_WEIGHTED,     /* quantized with its entry's weights                                */
    TM_GGUF_IMX_NO_ENTRY,     /* its type takes weights, the matrix has no entry: unweighted       */
    TM_GGUF_IMX_FILTERED,     /* likewise: --exclude-weights/--include-weights dropped its entry   */
    TM_GGUF_IMX_BAD_SIZE,     /* token_embd whose entry has another size: unweighted (as llama)    */
    TM_GGUF_IMX_IGNORED       /* its type takes no weights (Q8_0, F16, ...)                        */
};

/* Decision and outcome for one source tensor, in output order. */
typedef struct tm_gguf_quantize_tensor {
    int         imatrix;         /* 1: quantized with its importance-matrix entry            */
    int         imatrix_use;     /* TM_GGUF_IMX_*: what the importance matrix did here       */
    int         imatrix_odd;     /* its entry (tm_imatrix_odd_entry): 1 negative values, 2 all
                                    zero (ggml's arithmetic runs on them as they are), else 0 */
    const char *name;
    int         src_type;        /* ggml type of the source (F32, F16, BF16, ...)            */
    int         out_type;        /* ggml type written                                         */
    int         quantized;       /* 1: converted/quantized; 0: copied unchanged               */
    char        reason[240];     /* why this type ("attn_v in an _M mixture: Q6_K", "1-D") */
    int64_t     n_elems;
    uint64_t    out_bytes;
    double      rmse, max_abs_err, sqnr_db; /* quantized: error of the dequantized values   */
} tm_gguf_quantize_tensor;

typedef struct tm_gguf_quantize_result {
    tm_gguf_quantize_tensor *tensors; int64_t n;
    int64_t  n_quantized, n_fallback;
    int64_t  n_imx_weighted, n_imx_unweighted; /* tensors TM_GGUF_IMX_WEIGHTED; NO_ENTRY,
                                                   FILTERED or BAD_SIZE                   */
    uint64_t src_bytes, out_bytes;
    double   seconds;
    char    *manifest_json;      /* as written to "<out>.manifest.json" (malloc'd)           */
    char    *manifest_path;
} tm_gguf_quantize_result;

/* tm_gguf_quantize: write `out_path` (a GGUF v3 file) from `in`. Tensors come in llama-quantize's
** order (non-layer tensors by name, then by layer number, by name within a layer); a GGUF
** input's metadata is kept entry for entry, then general.quantization_version (2) and
** general.file_type are set (moved to the end, as ggml's gguf_set_val does) and split.* keys
** removed. The file is written as "<out>.tmp.<pid>" and its manifest as
** "<out>.manifest.json.tmp.<pid>"; under "<out>.lock" (flock, the owner's pid; a concurrent
** run gets TM_E_INVALID_ARG naming it) a previous manifest is removed, the file renamed into
** place, then "<out>.manifest.json": a reader never sees a file and manifest of two runs. The
** cancel flag is honoured up to that rename (TM_E_CANCELLED, nothing at OUT).
** An existing OUT is replaced only when it is a previous tensormorph output and p->force is
** set; OUT may never be the input.
** With p->imatrix (entries matched by name, as llama_model_quantize_impl; docs/gguf-quantize.md
** "Importance matrix") the weighted quantizers run and quantize.imatrix.* is recorded.
** Returns TM_OK | TM_E_INVALID_ARG (bad ftype or regex; OUT exists, is the input or a directory;
** llama-quantize's refusals: an IQ1_S/IQ1_M/IQ2_S/IQ2_XXS/IQ2_XS/Q2_K_S file type without an
** importance matrix, a tensor of a very low-bit type without an entry, an entry whose size is
** not the tensor's columns x experts) | TM_E_UNSUPPORTED (a tensor name of 64 bytes or more
** without allow_long_names; a source tensor already quantized without allow_requantize; an
** already-quantized input none of whose tensors changes type, without allow_empty; a type
** the rules pick that cannot hold the row under --strict, or that this build cannot write) |
** TM_E_NONFINITE | TM_E_RANGE (a block scale overflows f16: names tensor, row and block) |
** TM_E_IO | TM_E_NOMEM | TM_E_CANCELLED. Free the result with tm_gguf_quantize_result_free. */
tm_status tm_gguf_quantize(tm_file *in, const char *out_path, const tm_gguf_quantize_params *p,
                           tm_gguf_quantize_result **out, tm_err *err);
void      tm_gguf_quantize_result_free(tm_gguf_quantize_result *r);

/* tm_gguf_quantize_plan: the type decisions tm_gguf_quantize would make for `in` with `p`
** (llama-quantize's rules, --tensor-type, fallbacks), without quantizing or writing anything.
** *rows (malloc'd, free() it; names point into `in`) gets one row per tensor in output order
** with name, src_type, out_type, quantized, reason, n_elems and out_bytes (the tensor's bytes
** in the output: rows * (ne0 / block) * type size); rmse/max_abs_err/sqnr_db are 0.
** Returns TM_OK | TM_E_INVALID_ARG (bad ftype or regex) | TM_E_UNSUPPORTED | TM_E_IO |
** TM_E_NOMEM, as tm_gguf_quantize's plan phase. */
tm_status tm_gguf_quantize_plan(tm_file *in, const tm_gguf_quantize_params *p, tm_gguf_quantize_tensor **rows,
                                int64_t *n_rows, tm_err *err);

/* ---- deprecated names -------------------------------------------------------------------
** The names before the quantize jobs shared one pattern (tm_<form>_quantize_params,
** tm_<form>_quantize_params_default, tm_<form>_quantize, tm_<form>_quantize_result,
** tm_<form>_quantize_result_free, tm_<form>_quantize_tensor; docs/ARCHITECTURE.md "the jobs").
** Kept as aliases so that code written against them still builds; new code uses the names
** above. They will be removed in a later release. */
#define tm_gguf_qparams                  tm_gguf_quantize_params
#define tm_gguf_qparams_default          tm_gguf_quantize_params_default
#define tm_gguf_qresult                  tm_gguf_quantize_result
#define tm_gguf_qresult_free             tm_gguf_quantize_result_free
#define tm_gguf_qtensor                  tm_gguf_quantize_tensor

#ifdef __cplusplus
}
#endif
#endif
