/*
** tensormorph/explore.h: what the Heatmap and Architecture views need from a checkpoint:
** heatmap tiles (min/max/mean/absmax per pixel, at any power-of-two zoom) with an optional
** summary pyramid, the quantization unit (channel/group/block) under each pixel, and the
** module tree built from tensor names with dtype/scheme boundaries. Included by tensormorph.h.
**
** A tensor of any rank is viewed as a 2-D matrix: rows = product of its first `split` dims,
** cols = product of the rest (split = 1 by default, the matrix view frameworks use for a weight:
** a conv [out, in, kh, kw] is [out, in*kh*kw]; a 1-D tensor is one row, a strip).
** Pixel (py, px) of a tile at `step` s covers elements rows [(y0+py)s, +s) x cols [(x0+px)s, +s)
** of that matrix, clipped to it.
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_EXPLORE_H
#define TENSORMORPH_EXPLORE_H

#ifdef __cplusplus
extern "C" {
#endif

#define TM_TILE_MAX_SIDE  1024        /* most pixels along one side of one tile request       */
#define TM_TILE_MAX_STEP  (1LL << 40) /* most elements per pixel side                          */

/* What a pixel summarises. */
typedef enum tm_tile_source {
    TM_TILE_VALUE = 0,   /* the tensor's values (dequantized where quantized)                  */
    TM_TILE_ERROR_LSB    /* |ref - dequantized| / scale of the element (its LSB); needs a ref   */
} tm_tile_source;

typedef struct tm_tiles tm_tiles;  /* one tensor opened for tiles (+ its pyramid when built)  */

/* tm_tiles_open: view tensor i of f as a matrix for tiles.
**   split   leading dims that form the rows, 0..ndim; -1 = tm_tiles_default_split(ndim).
**   src     TM_TILE_ERROR_LSB needs i quantized and ref/ref_i a tensor with the same element
**           count (ref may be NULL for TM_TILE_VALUE). Where ref_i is the tensor tm_ref_pair
**           pairs with i across conventions, its rows are read un-permuted (in i's order).
**           f and ref must outlive the object.
** Returns TM_OK | TM_E_INVALID_ARG (bad index, split, source without ref, tensor not quantized)
**   | TM_E_UNSUPPORTED (a dtype without a float view) | TM_E_NOMEM | TM_E_CORRUPT. */
tm_status tm_tiles_open(const tm_file *f, int64_t i, const tm_file *ref, int64_t ref_i,
                        tm_tile_source src, int split, tm_tiles **out, tm_err *err);
void      tm_tiles_free(tm_tiles *t);   /* NULL is a no-op */
int64_t   tm_tiles_rows(const tm_tiles *t);
/* tm_tiles_split: the split in use; tm_tiles_default_split: the default for a rank: 1 for
** ndim >= 2 (rows = dim 0: the output channels of a linear or conv weight, as PyTorch's
** weight.flatten(1) / ONNX Gemm-on-Conv views it), 0 for a 0-D or 1-D tensor. */
int       tm_tiles_split(const tm_tiles *t);
int       tm_tiles_default_split(int ndim);
int64_t   tm_tiles_cols(const tm_tiles *t);

/* tm_tiles_build_pyramid: one streaming pass over the tensor building min/max/mean summaries
** at steps b, 2b, 4b, ... up to one cell, b the smallest power of two >= 2 whose levels all
** together fit in max_bytes (12 bytes per cell). Later tile reads at a step >= b
** read the pyramid instead of the tensor. Memory: tm_tiles_bytes(). Building twice is a no-op.
** Returns TM_OK | TM_E_NOMEM | TM_E_CORRUPT | TM_E_LIMIT (max_bytes too small for any level). */
tm_status tm_tiles_build_pyramid(tm_tiles *t, uint64_t max_bytes, tm_err *err);
uint64_t  tm_tiles_bytes(const tm_tiles *t);           /* bytes held by the pyramid          */
int64_t   tm_tiles_pyramid_step(const tm_tiles *t);    /* b, or 0 when no pyramid            */

/* Whole-tensor range of the source (finite values only; NaN when none). Known after the pyramid
** is built, else computed by one pass (and remembered). */
tm_status tm_tiles_range(tm_tiles *t, double *min, double *max, tm_err *err);

typedef struct tm_tile_req {
    int64_t step;        /* elements per pixel side: a power of two, 1..TM_TILE_MAX_STEP      */
    int64_t x0, y0;      /* the tile's first pixel column/row, in pixels at `step` (>= 0)     */
    int     width, height; /* pixels, 1..TM_TILE_MAX_SIDE                                     */
} tm_tile_req;

/* tm_tiles_read: aggregate one tile. Each output is width*height floats, row-major, or NULL when
** not wanted. Pixels outside the matrix (and pixels with no finite element) get NaN.
** absmax = max(|min|, |max|). Reentrant: concurrent reads of one tm_tiles are safe once any
** tm_tiles_build_pyramid call has returned.
** Returns TM_OK | TM_E_INVALID_ARG (step not a power of two, sizes out of range) | TM_E_NOMEM
**   | TM_E_CORRUPT. */
tm_status tm_tiles_read(const tm_tiles *t, const tm_tile_req *req, float *min, float *max,
                        float *mean, float *absmax, tm_err *err);

/* tm_tiles_groups: for each pixel, the flat param index (channel/group/block, as
** tm_qgran_param_index and act-order g_idx say) of the first element it covers; -1 outside the
** matrix. Tensor must be quantized. Returns TM_OK | TM_E_INVALID_ARG | TM_E_CORRUPT. */
tm_status tm_tiles_groups(const tm_tiles *t, const tm_tile_req *req, int64_t *param, tm_err *err);

/* ---- the module tree ------------------------------------------------------------------------ */

typedef struct tm_arch_node {
    const char *name;          /* last name component ("self_attn", "0", "weight")           */
    const char *path;          /* full dotted path ("model.layers.0.self_attn")                */
    int64_t     parent;        /* node index, -1 for the root                                  */
    int64_t     first_child;   /* -1 when a leaf                                               */
    int64_t     next_sibling;  /* -1 when last; siblings in name order, integers numerically   */
    int64_t     tensor;        /* leaf: index of the tensor in the file, else -1               */
    int64_t     n_params;      /* elements of the data tensors below                           */
    uint64_t    n_bytes;       /* bytes below, scales and zero points included                 */
    int64_t     n_tensors;     /* data tensors below                                           */
    char        dtype[16];     /* "F32", "I4", or "mixed"                                       */
    char        scheme[TM_QLABEL_MAX]; /* "dense", the tensors' tm_qtensor_label ("I4 group:128 sym
                                   scale:F16", "Q4_K block:256 sub:32 +min"), or "mixed"         */
    int         boundary;      /* 1: dtype or scheme differs from the previous sibling         */
} tm_arch_node;

typedef struct tm_arch {
    tm_arch_node *nodes;       /* nodes[0] is the root (name "", path "")                      */
    int64_t       n;
    int64_t       n_boundaries;
} tm_arch;

/* tm_arch_build: the module tree of f from its data tensors' dotted names; scale/zero-point/aux
** tensors count in their owner's bytes. Returns TM_OK | TM_E_NOMEM. Free with tm_arch_free. */
tm_status tm_arch_build(const tm_file *f, tm_arch **out, tm_err *err);
void      tm_arch_free(tm_arch *a);

#ifdef __cplusplus
}
#endif
#endif
