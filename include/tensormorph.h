/*
** tensormorph.h: the public API of libtensormorph.
**
** Tensormorph opens neural-network checkpoints, lists what is inside, quantizes them and
** measures where quantization hurt. Every checkpoint becomes a list of tensors (tm_tensor);
** every quantized tensor, whatever its physical layout, is described by ONE logical model
** (tm_qtensor): stored codes + scale + zero point + granularity + packing.
**
** Conventions used throughout:
**   - Shapes are row-major (NumPy order): shape[ndim-1] varies fastest.
**   - Element counts and dims are int64_t; byte counts are uint64_t/size_t.
**   - Every fallible function returns tm_status and takes `tm_err *err` last (may be NULL).
**     On failure err->msg holds one line naming the object (file, tensor, offset, reason).
**   - Status values are not exit codes; the CLI maps them (docs/exit-codes.md).
**   - Formulas are derived once in docs/quantization.md; comments below cite it.
**   - Nothing in the library prints, exits, aborts on input or reads the environment.
*/
#ifndef TENSORMORPH_H
#define TENSORMORPH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TM_VERSION_MAJOR 0
#define TM_VERSION_MINOR 1
#define TM_VERSION_PATCH 0
#define TM_VERSION_STRING "0.1.0"

#define TM_MAX_DIMS    8    /* most dims of any tensor the library represents */
#define TM_ERR_MSG_MAX 512  /* bytes of tm_err.msg including the NUL */

/* ---------------------------------------------------------------------------------------- */
/* Status and errors                                                                        */
/* ---------------------------------------------------------------------------------------- */

/* Stable forever: never renumber; a retired value becomes TM_E_OBSOLETE_<n>. */
typedef enum tm_status {
    TM_OK             = 0,
    TM_E_INVALID_ARG  = 1,  /* the caller broke the contract (bad option, bad index)     */
    TM_E_NOMEM        = 2,  /* an allocation failed                                      */
    TM_E_IO           = 3,  /* open/read/write/fsync/rename/mmap failed (see sys_errno)  */
    TM_E_CORRUPT      = 4,  /* the file contradicts its own format                       */
    TM_E_UNSUPPORTED  = 5,  /* valid, but a dtype/version/layout not implemented         */
    TM_E_LIMIT        = 6,  /* a declared size exceeds a documented limit                */
    TM_E_CANCELLED    = 7,  /* interrupted by the caller's cancel flag                   */
    TM_E_NONFINITE    = 8,  /* NaN/Inf in input where finite values are required         */
    TM_E_RANGE        = 9,  /* a result does not fit its type (e.g. scale overflows f16) */
    TM_E_INTERNAL     = 99  /* a bug: an invariant did not hold                          */
} tm_status;

typedef struct tm_err {
    tm_status code;               /* same as the return value                          */
    int       sys_errno;          /* errno for TM_E_IO, else 0                         */
    int64_t   file_offset;        /* byte offset in the file for format errors, else -1 */
    char      msg[TM_ERR_MSG_MAX];/* one line of English, no trailing newline          */
} tm_err;

/* tm_version: TM_VERSION_STRING of the library linked; tm_git_commit: the commit it was built
** from ("abc123def456", "-dirty" appended for uncommitted changes, "unknown" outside git). */
const char *tm_version(void);
const char *tm_git_commit(void);

/* tm_status_str: a short static name for a status ("corrupt", "io", ...); never NULL. */
const char *tm_status_str(tm_status s);

/* tm_err_clear: reset an error record (code TM_OK, offset -1, empty message). NULL is a no-op. */
void tm_err_clear(tm_err *err);

/* tm_outputs_pending: how many jobs of this process hold files beside an output right now (an
** OUT.lock, a staging OUT.tmp.<pid>, convert's intermediate GGUF): from just before the first is
** created until the last is removed or renamed into place. A signal handler may call it
** (async-signal-safe: one lock-free atomic load); the CLI exits at once on a repeated SIGINT only
** when it is 0, and otherwise lets the job see its cancel flag and clean up. */
int tm_outputs_pending(void);
/* tm_outputs_published: how many outputs this process has renamed into place (async-signal-safe,
** as above). A signal after a publish does not undo the run: the CLI then does not exit at once. */
int tm_outputs_published(void);

/* Before writing a report file (a JSON document, or a cache) at path, given as option opt ("-o",
** "--base-cache") for the messages: its directory exists (TM_E_IO, as the output checks, so a
** long run fails at its start, not after the work); path is not a directory, not one of the
** n_inputs paths in inputs (NULL entries skipped; the same device and inode) and not inside an
** input that is a directory (inputs are never modified): TM_E_INVALID_ARG naming both. When
** schema is not NULL, an existing file is replaced only when it is a JSON object whose
** "schema" is schema (a previous report of this kind, written by tensormorph); any other
** existing file is TM_E_INVALID_ARG ("tensormorph never replaces a file it did not write").
** Errors: TM_E_IO (the directory), TM_E_INVALID_ARG (the rest), TM_E_NOMEM. */
tm_status tm_check_report_output(const char *opt, const char *path, const char *const *inputs, int n_inputs,
                                  const char *schema, tm_err *err);

/* ---------------------------------------------------------------------------------------- */
/* Dtypes                                                                                   */
/* ---------------------------------------------------------------------------------------- */

/* Element types. Append only; never renumber (files and JSON never store these numbers,
** but tests and bindings may). Names are the safetensors dtype strings. I4/U4 are code
** types: they exist only as the codes of a quantized tensor (packed two per byte or more). */
typedef enum tm_dtype {
    TM_F64 = 0, TM_F32, TM_F16, TM_BF16,
    TM_F8_E4M3,    /* OCP FP8 E4M3FN: bias 7, no inf, 0x7F/0xFF NaN, max 448             */
    TM_F8_E5M2,    /* OCP FP8 E5M2: bias 15, IEEE-like inf/NaN, max 57344                 */
    TM_F8_E8M0,    /* OCP MX E8M0 scale: 2^(e-127), 0xFF NaN                              */
    TM_I64, TM_I32, TM_I16, TM_I8,
    TM_U64, TM_U32, TM_U16, TM_U8,
    TM_BOOL,
    TM_I4,         /* signed 4-bit code, [-8, 7]                                          */
    TM_U4,         /* unsigned 4-bit code, [0, 15]                                        */
    TM_DTYPE_COUNT
} tm_dtype;

typedef struct tm_dtype_traits {
    const char *name;      /* "F32", "BF16", "F8_E4M3", "I4", ...                          */
    int         bits;      /* storage bits per element (4 for I4/U4)                        */
    int         is_float;  /* 1 for F64..F8_E8M0                                            */
    int         is_signed; /* 1 for signed integers and floats                              */
    int         is_code;   /* 1 for types valid as quantized codes: I8 U8 I4 U4 F8_E4M3 F8_E5M2 */
    int64_t     qmin;      /* integer types: smallest value; floats: 0                      */
    int64_t     qmax;      /* integer types: largest value (I64/U64 clipped to INT64_MAX)   */
    double      fmax;      /* floats: largest finite value; integers: 0                     */
} tm_dtype_traits;

/* tm_dtype_get: the traits row of `dt`; NULL when dt is out of range. */
const tm_dtype_traits *tm_dtype_get(tm_dtype dt);

/* tm_dtype_from_name: parse a safetensors dtype name (exact, case-sensitive: "F32", "I8", ...).
** Also accepts lower-case aliases used on the command line: f32 f16 bf16 int8 uint8 int4 uint4
** fp8_e4m3 fp8_e5m2. Returns TM_OK | TM_E_UNSUPPORTED (unknown name). */
tm_status tm_dtype_from_name(const char *name, tm_dtype *out);

/* tm_dtype_nbytes: bytes that n elements of dt occupy when densely stored (sub-byte types
** round up). Returns UINT64_MAX on overflow or bad dtype. */
uint64_t tm_dtype_nbytes(tm_dtype dt, int64_t n);

/* Scalar conversions. All are exact, deterministic and reentrant.
** f32 -> f16 / bf16: round to nearest, ties to even (IEEE 754-2008 roundTiesToEven); NaN stays
** NaN (quiet, sign kept); overflow of f16 gives +-inf.
** f32 -> fp8: OCP 8-bit Floating Point Specification (OFP8) rev 1.0, round to nearest even.
**   saturate=1: finite values beyond the max clamp to +-max (e4m3fn 448, e5m2 57344); inf -> +-max
**   for e4m3fn (no inf code) and +-inf kept for e5m2 only when saturate=0.
**   saturate=0: e4m3fn overflow -> NaN (0x7F|sign); e5m2 overflow -> +-inf.
**   NaN -> NaN in both. */
uint16_t tm_f32_to_f16(float x);
float    tm_f16_to_f32(uint16_t h);
uint16_t tm_f32_to_bf16(float x);
float    tm_bf16_to_f32(uint16_t b);
uint8_t  tm_f32_to_e4m3(float x, int saturate);
float    tm_e4m3_to_f32(uint8_t v);
uint8_t  tm_f32_to_e5m2(float x, int saturate);
float    tm_e5m2_to_f32(uint8_t v);
float    tm_e8m0_to_f32(uint8_t v);

/* tm_convert_to_f32: n elements of a plain (non-code) dtype, little-endian, possibly unaligned,
** to float32. I64/U64 values are rounded to nearest float. BOOL gives 0/1.
** Returns TM_OK | TM_E_UNSUPPORTED (I4/U4: use the quantized-tensor view). */
tm_status tm_convert_to_f32(tm_dtype src_dtype, const void *src, int64_t n, float *dst);

/* tm_convert_from_f32: float32 to a float dtype (F64 F32 F16 BF16 F8_E4M3 F8_E5M2 saturating),
** little-endian output. Returns TM_OK | TM_E_UNSUPPORTED (integer targets). */
tm_status tm_convert_from_f32(tm_dtype dst_dtype, const float *src, int64_t n, void *dst);

/* ---------------------------------------------------------------------------------------- */
/* The logical quantized tensor                                                              */
/* ---------------------------------------------------------------------------------------- */

/* Who shares one scale/zero point (docs/quantization.md "Granularity"). */
typedef enum tm_granularity {
    TM_GRAN_TENSOR = 0,  /* one scale for the whole tensor; param shape []                 */
    TM_GRAN_CHANNEL,     /* one per index along `axis`; param shape [shape[axis]]          */
    TM_GRAN_GROUP,       /* groups of group_size consecutive elements along `axis`; param
                            shape = shape with shape[axis] -> ceil(shape[axis]/group_size);
                            a ragged last group has its own scale                            */
    TM_GRAN_BLOCK,       /* 2-D blocks block_h x block_w over the last two dims; param shape
                            = shape with the last two dims -> ceil(d/block); ragged edges too */
    TM_GRAN_COUNT
} tm_granularity;

typedef struct tm_qgran {
    tm_granularity kind;
    int            axis;        /* CHANNEL/GROUP: dimension, 0..ndim-1 (negative counts from end) */
    int64_t        group_size;  /* GROUP: elements per group (>= 1)                           */
    int64_t        block_h;     /* BLOCK: rows per block (>= 1)                               */
    int64_t        block_w;     /* BLOCK: columns per block (>= 1)                            */
} tm_qgran;

/* tm_qgran_param_shape: shape of the scale/zero-point tensor for a tensor of `shape`.
**   *pndim gets 0..TM_MAX_DIMS, pshape[] the dims; *n_params their product (>= 1).
** Returns TM_OK | TM_E_INVALID_ARG (axis out of range, group/block size < 1, BLOCK on ndim < 2). */
tm_status tm_qgran_param_shape(const tm_qgran *g, int ndim, const int64_t *shape,
                               int *pndim, int64_t *pshape, int64_t *n_params, tm_err *err);

/* tm_qgran_param_index: index into the flattened param tensor used by element `flat_index`
** (row-major index into `shape`). Assumes tm_qgran_param_shape succeeded for these args. */
int64_t tm_qgran_param_index(const tm_qgran *g, int ndim, const int64_t *shape, int64_t flat_index);

/* How codes sit in their container words (docs/formats.md "Packing"). */
typedef struct tm_packing {
    tm_dtype container;          /* dtype of the stored words: I32 (pack-quantized), I8, U8,
                                    F8_E4M3 ... For unpacked codes, equal to the code dtype   */
    int      bits;               /* bits per code (4, 8)                                      */
    int      codes_per_container;/* e.g. 8 int4 codes per I32 word; 1 when unpacked           */
    int      packed_axis;        /* logical axis the codes are packed along (-1 unpacked)     */
    int64_t  offset;             /* stored value = code + offset (pack-quantized: 2^(bits-1)) */
    int      lsb_first;          /* 1: element j of a word sits at bits [j*bits, j*bits+bits) */
} tm_packing;
/* tm_packing.lsb_first: 0 MSB first, bits divides the word; 1 LSB first as one bit stream per
** row (element j at stream bits [j*bits, (j+1)*bits), a field may straddle two words:
** compressed-tensors >= 0.18.0); TM_PACK_LSB_PER_WORD: LSB first, each word holds W div bits
** whole fields, its top W mod bits bits unused (compressed-tensors < 0.18.0 pack_to_int32).
** 1 and TM_PACK_LSB_PER_WORD give the same words when bits divides W. */
#define TM_PACK_LSB_PER_WORD 2

typedef struct tm_qtensor {
    tm_dtype   code_dtype;       /* I8 U8 I4 U4 F8_E4M3 F8_E5M2; whole-word I16 U16 I32       */
    int64_t    qmin, qmax;       /* code range (floats: +-max finite)                        */
    int        symmetric;        /* 1 when the zero point is 0 (or absent) by construction   */
    tm_qgran   gran;
    tm_packing packing;          /* of the codes                                             */
    int64_t    codes_tensor;     /* index of the physical codes tensor in tm_file            */
    int64_t    scale_tensor;     /* index of the scale tensor; its dtype is the scale dtype  */
    int64_t    zero_point_tensor;/* index, or -1 (zero point 0)                              */
    tm_packing zp_packing;       /* how zero points are stored (pack-quantized: along dim 0) */
    const char *layout;          /* static name: "compressed-tensors/pack-quantized", ...    */
    int64_t    g_idx_tensor;     /* GROUP only: I32 [shape[axis]] group of each index along the
                                    axis (GPTQ act-order "g_idx"), or -1 (index / group_size)  */
    int        ggml_type;        /* GGUF block-quantized tensor: its ggml type id (always >= 2,
                                    tensormorph/ggml.h); 0 for every other layout. Then codes_tensor
                                    is the tensor itself, gran is GROUP along the last axis with
                                    group_size = the sub-block (values sharing one effective
                                    scale), and ggml_block_size the block / super-block size    */
    int64_t    ggml_block_size;
    /* GPTQ / AWQ (docs/formats.md "GPTQ and AWQ"); 0 and NULL for every other layout.
    ** transposed = 1: the tensor is 2-D [rows, cols] and the codes tensor holds its word grid
    ** transposed. Packed along axis 1 (GPTQ) it is [ceil(cols/per), rows] words, word (c/per, r)
    ** holding element (r, c) in field c % per; packed along axis 0 (AWQ) it is
    ** [cols, ceil(rows/per)], word (c, r/per) holding (r, c) in field r % per (per =
    ** codes_per_container, field f = bits [f*bits, (f+1)*bits), bits divides the word). The
    ** scale and zero-point tensors hold the [rows, n_groups] param matrix transposed
    ** ([n_groups, rows]); zero points packed along rows (zp_packing, packed_axis 0). */
    int            transposed;
    /* Field order inside a word: the j-th element along the packed axis (j < per <= 8) sits in
    ** field field_order[j]; NULL = field j. AWQ: {0,4,1,5,2,6,3,7}. Codes and packed zero points. */
    const uint8_t *field_order;
} tm_qtensor;

/* ---------------------------------------------------------------------------------------- */
/* Files: open any checkpoint, list its tensors                                              */
/* ---------------------------------------------------------------------------------------- */

typedef enum tm_format {
    TM_FMT_UNKNOWN = 0, TM_FMT_SAFETENSORS, TM_FMT_GGUF, TM_FMT_ONNX, TM_FMT_PT, TM_FMT_NPY,
    TM_FMT_NPZ
} tm_format;

/* tm_format_name: "safetensors", "gguf", ...; never NULL. */
const char *tm_format_name(tm_format f);

/* What a tensor is for. Scale/zero-point tensors of a quantized tensor stay listed. */
typedef enum tm_tensor_role {
    TM_ROLE_DATA = 0,      /* an ordinary or quantized tensor of the model                   */
    TM_ROLE_SCALE,         /* the scale of tensor `owner`                                    */
    TM_ROLE_ZERO_POINT,    /* the zero point of tensor `owner`                               */
    TM_ROLE_AUX            /* other metadata of `owner` (e.g. weight_shape)                  */
} tm_tensor_role;

typedef struct tm_tensor {
    const char    *name;        /* logical name (quantized: the name the dense tensor had,
                                   e.g. "model.layers.0.mlp.up_proj.weight")                 */
    const char    *phys_name;   /* name in the file (e.g. "...up_proj.weight_packed")        */
    tm_dtype       dtype;       /* stored dtype; for a quantized tensor: its code dtype       */
    int            ndim;
    int64_t        shape[TM_MAX_DIMS]; /* logical shape, row-major                            */
    int64_t        n_elems;     /* product of shape (1 for ndim 0)                           */
    uint64_t       n_bytes;     /* bytes in the file                                         */
    int            file_index;  /* which file of the checkpoint holds it (shards)            */
    uint64_t       offset;      /* absolute byte offset of its data in that file             */
    tm_dtype       phys_dtype;  /* dtype of the bytes in the file (pack-quantized: I32)      */
    int            phys_ndim;
    int64_t        phys_shape[TM_MAX_DIMS];
    tm_tensor_role role;
    int64_t        owner;       /* SCALE/ZERO_POINT/AUX: index of the tensor served, else -1 */
    const tm_qtensor *quant;    /* NULL for a plain tensor                                   */
    /* Byte layout of a plain tensor's data (NumPy .npy/.npz, PyTorch); 0 = row-major,
    ** little-endian, as every other reader stores. The view (tm_tensor_read_f32) undoes both,
    ** so values always come back row-major; tm_tensor_data gives the bytes as stored.      */
    int            fortran_order; /* 1: column-major bytes (shape[0] varies fastest)           */
    int            big_endian;    /* 1: each multi-byte element stored big-endian              */
} tm_tensor;

typedef struct tm_file tm_file;  /* one opened checkpoint (one or more files) */

typedef struct tm_open_params {
    uint64_t max_header_bytes;   /* safetensors header cap; 0 = 100 MiB                      */
    int      no_recognize;       /* 1: list physical tensors only, no layout recognition     */
    tm_format format;            /* tm_open_buffer only: read the image as this format
                                    (TM_FMT_UNKNOWN, the default: by content, as tm_open) */
} tm_open_params;

/* tm_open_params_default: zeroed defaults. */
tm_open_params tm_open_params_default(void);

/* tm_open: open a checkpoint. PATH may be a file (format found by content, then extension),
** a model.safetensors.index.json, or a directory holding model.safetensors or an index.
** Opening reads headers only (mmap, no tensor data touched).
** Returns TM_OK | TM_E_IO | TM_E_CORRUPT | TM_E_UNSUPPORTED | TM_E_LIMIT | TM_E_NOMEM.
** On error *out is NULL and err names file, offset and reason. */
tm_status tm_open(const char *path, const tm_open_params *p, tm_file **out, tm_err *err);

/* tm_open_buffer: open a checkpoint image held in memory (fuzzing, tests, embedding): any
** single-file format: safetensors, GGUF, ONNX (no external data: there is no folder), PyTorch
** (zip or legacy), NumPy .npy and .npz. The format is p->format when set, else found by content
** as tm_open finds it (magic numbers, then `name`'s extension); an image no probe claims is read
** as safetensors. The buffer must outlive the tm_file. `name` (may be NULL) is used in messages.
** Same returns as tm_open, and TM_E_INVALID_ARG for a p->format with no reader. */
tm_status tm_open_buffer(const void *data, size_t n_bytes, const char *name,
                         const tm_open_params *p, tm_file **out, tm_err *err);

/* tm_close: release maps and memory. NULL is a no-op. */
void tm_close(tm_file *f);

tm_format   tm_file_format(const tm_file *f);
int         tm_file_n_paths(const tm_file *f);              /* files of the checkpoint     */
const char *tm_file_path(const tm_file *f, int i);          /* path as opened              */
uint64_t    tm_file_size(const tm_file *f, int i);          /* bytes                       */
int64_t     tm_file_n_tensors(const tm_file *f);
const tm_tensor *tm_file_tensor(const tm_file *f, int64_t i); /* NULL when out of range    */
int64_t     tm_file_find(const tm_file *f, const char *name); /* logical or physical name; -1 */
/* config.json next to the checkpoint (safetensors), as text; NULL when absent. */
const char *tm_file_config_json(const tm_file *f);
/* Metadata key/value strings (safetensors __metadata__, GGUF KV rendered as text). */
int64_t     tm_file_n_meta(const tm_file *f);
const char *tm_file_meta_key(const tm_file *f, int64_t i);
const char *tm_file_meta_value(const tm_file *f, int64_t i);
/* Problems found while opening that are not fatal (e.g. config claims a scheme that tensors
** do not have). Each a line of English. */
int64_t     tm_file_n_warnings(const tm_file *f);
const char *tm_file_warning(const tm_file *f, int64_t i);

/* tm_tensor_data: pointer to `n` bytes at byte offset `off` inside tensor i's physical data
** (mmap; valid until tm_close). Returns TM_OK | TM_E_INVALID_ARG (range outside the tensor). */
tm_status tm_tensor_data(const tm_file *f, int64_t i, uint64_t off, uint64_t n,
                         const void **out, tm_err *err);

/* tm_tensor_release: tell the kernel the mapped pages of tensor i (bytes [off, off+n)) are
** no longer needed (madvise MADV_DONTNEED), so streaming reads keep the resident set bounded. */
void tm_tensor_release(const tm_file *f, int64_t i, uint64_t off, uint64_t n);

/* ---------------------------------------------------------------------------------------- */
/* Tensor view: values of any tensor, plain or quantized, as float32                          */
/* ---------------------------------------------------------------------------------------- */

/* tm_tensor_read_f32: logical elements [start, start+n) (row-major) of tensor i as float32;
** for a quantized tensor the dequantized value scale*(q - zero_point) [docs/quantization.md].
**   out  caller-owned, n floats.
** Returns TM_OK | TM_E_INVALID_ARG (range) | TM_E_UNSUPPORTED (dtype) | TM_E_CORRUPT. */
tm_status tm_tensor_read_f32(const tm_file *f, int64_t i, int64_t start, int64_t n, float *out,
                             tm_err *err);

/* One element of a quantized tensor, as the Scalar Inspector shows it. */
typedef struct tm_qelement {
    int64_t  code;        /* q in value = (q - zero_point) * scale, storage offset removed;
                             for fp8 the stored byte                                        */
    uint64_t stored;      /* the container word as it sits in the file (little-endian value) */
    int      stored_bits; /* width of that word in bits                                      */
    double   scale;
    int64_t  zero_point;
    int64_t  group;       /* flat index of the scale/zero point used                          */
    double   value;       /* dequantized value (float32 arithmetic, as read_f32)             */
    /* GGUF block types only (ggml_type != 0; tensormorph/ggml.h tm_ggml_elem): value =
    ** (code - zero_point) * scale - min, scale = super_scale * sub_scale (x a type constant). */
    int      ggml_type;   /* ggml type id, 0 when not a ggml block type                      */
    double   min;         /* subtracted after scaling (Q4_1 Q5_1 Q2_K Q4_K Q5_K), else 0      */
    double   super_scale; /* the block's d                                                    */
    double   super_min;   /* the block's dmin / m, else 0                                     */
    int64_t  sub_scale;   /* the sub-block's stored integer scale (K/IQ types), else 1        */
    int64_t  sub_min;     /* the sub-block's stored integer min (Q2_K Q4_K Q5_K), else 0      */
    int64_t  sub_block;   /* sub-block within the block                                       */
    int64_t  block;       /* flat index of the block in the tensor                            */
} tm_qelement;

/* tm_qelement_get: the element at flat index `flat` of quantized tensor i.
** Returns TM_OK | TM_E_INVALID_ARG (not quantized, index out of range) | TM_E_CORRUPT. */
tm_status tm_qelement_get(const tm_file *f, int64_t i, int64_t flat, tm_qelement *out,
                          tm_err *err);

/* tm_qelement_formula: the formula that produced element `flat` of quantized tensor i (qe from
** tm_qelement_get), as the Scalar Inspector shows it, for every layout:
**   ggml block types in ggml's order with both levels of scale and the min (Q4_K: "value = d ·
**   sc · q − dmin · m"; Q4_1: "d · q + m"; Q6_K: "d · sc · (q − z)"; IQ grid types with the
**   codebook entry k, its value j and the sign bit; ggml/src/ggml-quants.c dequantize_row_* at
**   ggml-org/llama.cpp@c392e509), affine codes "(q − zero_point) · scale" (ONNX
**   DequantizeLinear, compressed-tensors, GPTQ/AWQ with g_idx[c] for act-order, PyTorch
**   qtensors), float8 "e4m3(q) · scale".
** symbolic: the formula in the field's names (UTF-8); numeric: the same with each term's number
** (ASCII * + - and parentheses; each number printed so it reads back exactly), which evaluates
** to qe->value up to the float32 rounding of ggml's / the kernel's order of operations;
** terms: the named numbers (d, sc, q, dmin, m, ...); note: one line on where they come from.
** Returns TM_OK | TM_E_INVALID_ARG (not quantized) | TM_E_UNSUPPORTED (a ggml type without one)
** | TM_E_INVALID_ARG from reading g_idx. */
#define TM_QFORMULA_MAX   240
#define TM_QFORMULA_TERMS 8
typedef struct tm_qformula {
    char symbolic[TM_QFORMULA_MAX];
    char numeric[TM_QFORMULA_MAX];
    char note[TM_QFORMULA_MAX];
    int  n_terms;
    struct { char name[24]; double value; } terms[TM_QFORMULA_TERMS];
} tm_qformula;
tm_status tm_qelement_formula(const tm_file *f, int64_t i, int64_t flat, const tm_qelement *qe,
                              tm_qformula *out, tm_err *err);

/* The one name of a quantized tensor's scheme, whatever its layout (GGUF ggml block types,
** compressed-tensors, GPTQ/AWQ, PyTorch qtensors, ONNX DequantizeLinear / QOperator /
** MatMulNBits). Every view (inspect, qdiff, scalar, heatmap, graph, serve and its pages) shows
** these and no other spelling (docs/quantization.md "Scheme labels").
**
** tm_qtensor_label: the short label, one of
**   "<ggml type> block:<B>[ sub:<S>][ +min]"   ggml block types: B values per (super-)block, S
**                                             per sub-block with its own scale (left out when
**                                             S == B), "+min" when values are scale*q - min
**                                             (Q4_1 Q5_1 Q2_K Q4_K Q5_K)        "Q4_K block:256 sub:32 +min"
**   "<code type> <granularity> sym|asym scale:<scale dtype>"   every other layout, granularity
**                                             spelled as --granularity takes it: tensor,
**                                             channel:AXIS, group:N (along the last axis) or
**                                             group:N:AXIS, block:HxW       "I8 channel:0 sym scale:F32"
**                                             code type: the code dtype's name, or I<b>/U<b> when
**                                             the packing holds fewer bits (GPTQ 2-bit: "U2")
** A label contains "asym" or "+min" exactly when t->quant->symmetric is 0.
** tm_qtensor_describe: one line of English for a tooltip or report: the code type and range,
** who shares a scale, how a value is computed, scale/zero-point tensors and dtypes, packing,
** GPTQ/AWQ transposition and act-order, the layout name.
** Both write a NUL-terminated string of at most n bytes into buf (truncated to fit; labels fit
** TM_QLABEL_MAX, descriptions TM_QDESC_MAX) and return buf; "" when t is NULL or not
** quantized. f is the file holding t (its scale and zero-point tensors are looked up there). */
#define TM_QLABEL_MAX 80
#define TM_QDESC_MAX  640
char *tm_qtensor_label(const tm_file *f, const tm_tensor *t, char *buf, size_t n);
char *tm_qtensor_describe(const tm_file *f, const tm_tensor *t, char *buf, size_t n);

/* ---------------------------------------------------------------------------------------- */
/* Quantization numerics (pure functions over buffers)                                        */
/* ---------------------------------------------------------------------------------------- */

typedef enum tm_observer_kind {
    TM_OBS_MINMAX = 0,   /* min/max of the values                                           */
    TM_OBS_EMA_MINMAX,   /* moving average of per-batch min/max (torch MovingAverageMinMax)  */
    TM_OBS_HISTOGRAM,    /* torch HistogramObserver L2 range search                          */
    TM_OBS_PERCENTILE,   /* ONNX Runtime HistogramCalibrater percentile                      */
    TM_OBS_MSE,          /* clipping-ratio grid search minimising squared error             */
    TM_OBS_ENTROPY,      /* ONNX Runtime KL-divergence threshold search                      */
    TM_OBS_COUNT
} tm_observer_kind;

typedef enum tm_convention {
    TM_CONV_ONNX = 0,    /* ONNX Runtime's compute_scale_zp; quantize rounds x/scale         */
    TM_CONV_TORCH        /* PyTorch observers' calculate_qparams; quantize rounds x*(1/scale)*/
} tm_convention;

typedef struct tm_observer {
    tm_observer_kind kind;
    double percentile;          /* PERCENTILE: P in (0, 100], default 99.999                  */
    double averaging_constant;  /* EMA_MINMAX: default 0.01                                    */
    int    n_bins;              /* HISTOGRAM (default 2048) / PERCENTILE, ENTROPY bins          */
    int    n_quantized_bins;    /* ENTROPY: default 128                                         */
} tm_observer;

/* A quantization recipe for one tensor. */
/* A kernel set (tensormorph/quant.h tm_kernels_get): which implementation of each CPU-dependent
** kernel runs; every set gives the same bits. NULL means "auto". */
typedef struct tm_kernels tm_kernels;

typedef struct tm_qspec {
    tm_dtype      code_dtype;   /* I8 U8 I4 U4 F8_E4M3 F8_E5M2                               */
    int           symmetric;    /* 1 symmetric, 0 asymmetric (affine)                         */
    tm_qgran      gran;
    tm_observer   observer;
    tm_convention convention;
    tm_dtype      scale_dtype;  /* F32 (default), F16, BF16: scales are rounded to it; a scale
                                   that overflows it is TM_E_RANGE                            */
    int           allow_nonfinite; /* 0: NaN/Inf input is TM_E_NONFINITE                      */
    const tm_kernels *kernels;  /* the observers' and quantizer's kernel set; NULL: "auto".
                                   Not part of the scheme: no effect on any result           */
} tm_qspec;

/* tm_qspec_default: int8, symmetric, per-channel axis 0, minmax, onnx, f32 scales. */
tm_qspec tm_qspec_default(void);

/* tm_qspec_range: the code range [qmin, qmax] that spec uses (depends on convention and
** symmetry; docs/quantization.md "Code ranges"). */
void tm_qspec_range(const tm_qspec *spec, int64_t *qmin, int64_t *qmax);

#ifdef __cplusplus
}
#endif

/* Every stable sub-header, lowest layer first (docs/ARCHITECTURE.md "Public headers").
** tensormorph/experimental.h (test-only entry points) is not included. */
#include "tensormorph/hash.h"         /* SHA-256 of files and buffers                 core */
#include "tensormorph/host.h"         /* host facts for manifests                     core */
#include "tensormorph/quant.h"        /* quantize/dequantize kernels, observers, packing  quant */
#include "tensormorph/ggml.h"         /* ggml type table and dequantizers (GGUF)     quant */
#include "tensormorph/ggml_quant.h"   /* ggml block quantizers (byte-identical to ggml) quant */
#include "tensormorph/safetensors.h"  /* the streaming, atomic safetensors writer  formats */
#include "tensormorph/gguf_write.h"   /* the streaming, atomic GGUF writer          formats */
#include "tensormorph/imatrix.h"      /* importance matrices (llama-imatrix files)    formats */
#include "tensormorph/onnx_opset.h"   /* ai.onnx opset facts for the ONNX writer       formats */
#include "tensormorph/graph.h"        /* ONNX graph: nodes, values, quantization kinds formats */
#include "tensormorph/qview.h"        /* decoded scales/zero points of a quantized tensor view */
#include "tensormorph/errstats.h"     /* SQNR / LSB error statistics               analysis */
#include "tensormorph/qdiff.h"        /* Quantization Diff                         analysis */
#include "tensormorph/diff.h"         /* weight diff                               analysis */
#include "tensormorph/names.h"        /* HF <-> llama.cpp tensor names, q/k rows   analysis */
#include "tensormorph/calib.h"        /* calibration lab: observer, qparams, clipping, SQNR analysis */
#include "tensormorph/explore.h"      /* heatmap tiles, summary pyramid, module tree analysis */
#include "tensormorph/compat.h"       /* runtime compatibility table               analysis */
#include "tensormorph/qjob.h"         /* the compressed-tensors quantize job            job */
#include "tensormorph/onnx_quant.h"   /* ONNX opset facts and the ONNX quantize job       job */
#include "tensormorph/gguf_job.h"     /* quantize to GGUF with llama-quantize's rules   job */
#include "tensormorph/convert.h"      /* a LLaMA checkpoint -> a llama.cpp GGUF         job */
#include "tensormorph/demo.h"         /* the built-in demo checkpoint                   job */
#include "tensormorph/merge.h"        /* merge the parts of a sharded quantize run      job */
#include "tensormorph/evidence.h"     /* evidence runs of a quantized model             job */
#include "tensormorph/gate.h"         /* the release gate over evidence                 job */
#include "tensormorph/job.h"          /* compatibility: includes the job.h split above      */

#endif /* TENSORMORPH_H */
