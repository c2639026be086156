/* qjob.c: the compressed-tensors quantize job, `tensormorph quantize IN -o OUT`:
**   1. plan (qjob_plan.c): decide for every source tensor: quantize (with which scheme) or
**      copy, and why; the plan fixes every output tensor's shape (formats/ctensors_write.c) and
**      so every byte offset before any data is written;
**   2. run: a thread pool walks row chunks of each quantized tensor; a chunk is converted to
**      float32 once, observed, quantized, packed, written at its known offset, and its error
**      statistics are measured from the same chunk (channel and group granularities with
**      integer codes: in slices of a few rows read with pread, each going through all of the
**      steps while it is in the cache, run_slices);
**   3. finish (the one driver, qpipeline.c, and pipeline.c): fsync the safetensors file(s) in the staging directory beside OUT,
**      write config.json with the compressed-tensors quantization_config and the manifest,
**      then rename the directory into place under OUT.lock (a killed or interrupted run
**      leaves nothing at OUT).
** Layout: ../shared/formats/compressed-tensors.md, summarised in docs/formats.md. */
#include "../core/core.h"
#include "../core/fsutil.h"
#include "../core/pool.h"
#include "../quant/quant_impl.h"
#include "qjob_impl.h"
#include "../formats/ctensors_write.h"
#include "../view/layout.h"
#include "pipeline.h"
#include "qjob_part.h"
#include "part.h"
#include "part_crc.h"

#include <stdarg.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>


tm_ct_quantize_params tm_ct_quantize_params_default(void) {
    tm_ct_quantize_params p;
    memset(&p, 0, sizeof p);
    p.spec = tm_qspec_default();
    p.n_threads = 0; /* tm_usable_cpus() */
    return p;
}

/* ---------------------------------------------------------------------------------------- */
/* run                                                                                       */
/* ---------------------------------------------------------------------------------------- */

static void progress(job_t *j, const char *phase, uint64_t add) {
    uint64_t d = atomic_fetch_add(&j->done_bytes, add) + add;
    if (!j->p->progress) return;
    if (pthread_mutex_trylock(&j->prog_mu) != 0) return;
    j->p->progress(j->p->progress_ud, phase, d, j->total_bytes);
    pthread_mutex_unlock(&j->prog_mu);
}

/* Convert source rows [r0, r1) of tensor `src` to float32 in out. */
static tm_status load_rows(job_t *j, int64_t src, int64_t e0, int64_t ne, float *out, tm_err *err) {
    tm_status s = tm_tensor_read_f32(j->in, src, e0, ne, out, err);
    if (s) return s;
    const tm_tensor *t = tm_file_tensor(j->in, src);
    uint64_t isz = (uint64_t)tm_dtype_get(t->dtype)->bits / 8;
    tm_tensor_release(j->in, src, (uint64_t)e0 * isz, (uint64_t)ne * isz);
    return TM_OK;
}

/* Observe one param unit gathered into `vals`, and store its scale / zero point. */
static tm_status set_unit(plan_t *pl, int64_t pidx, const float *vals, int64_t n, tm_err *err) {
    double lo, hi;
    tm_qspec spec = pl->spec;
    if (spec.observer.kind == TM_OBS_ENTROPY) {
        /* ONNX Runtime's entropy defaults (128 bins, 128 quantized bins) leave the KL search a
        ** single candidate, i.e. min/max. Over weights the histogram is sized to the unit:
        ** n/4 bins rounded up to even, within [160, 2048], with 128 quantized bins, so the
        ** search has 17 to 961 thresholds to choose from (docs/quantization.md). */
        int64_t b = (n / 4 + 1) & ~(int64_t)1;
        int bins = b < 160 ? 160 : b > 2048 ? 2048 : (int)b;
        spec.observer.n_bins = bins;
        spec.observer.n_quantized_bins = 128;
    }
    tm_status s = tm_observe_range(&spec, vals, n, &lo, &hi, err);
    if (s) return s;
    float sc;
    int32_t z;
    s = tm_qparams_from_range(&pl->spec, lo, hi, &sc, &z, err);
    if (s) return s;
    if (lo == hi) atomic_fetch_add(&pl->n_degenerate, 1); /* constant unit: fallback scale */
    pl->scale[pidx] = sc;
    if (pl->zp) pl->zp[pidx] = z;
    return TM_OK;
}

/* Compute the params of the units that lie in rows [r0, r1) (row-local granularities). */
static tm_status observe_rows(plan_t *pl, const float *x, int64_t r0, int64_t r1, float *tmp,
                              tm_err *err) {
    const tm_qgran *g = &pl->spec.gran;
    int64_t C = pl->cols;
    tm_status s = TM_OK;
    if (g->kind == TM_GRAN_CHANNEL) {
        for (int64_t r = r0; r < r1 && !s; r++) s = set_unit(pl, r, x + (r - r0) * C, C, err);
    } else if (g->kind == TM_GRAN_GROUP) {
        int64_t gs = g->group_size, ng = (C + gs - 1) / gs;
        for (int64_t r = r0; r < r1 && !s; r++)
            for (int64_t k = 0; k < ng && !s; k++) {
                int64_t c0 = k * gs, n = C - c0 < gs ? C - c0 : gs;
                s = set_unit(pl, r * ng + k, x + (r - r0) * C + c0, n, err);
            }
    } else if (g->kind == TM_GRAN_BLOCK) {
        int64_t bh = g->block_h, bw = g->block_w, nbw = (C + bw - 1) / bw;
        for (int64_t br = r0 / bh; br * bh < r1 && !s; br++) {
            int64_t rr0 = br * bh, rr1 = rr0 + bh < pl->rows ? rr0 + bh : pl->rows;
            for (int64_t bc = 0; bc < nbw && !s; bc++) {
                int64_t c0 = bc * bw, c1 = c0 + bw < C ? c0 + bw : C, n = 0;
                for (int64_t r = rr0; r < rr1; r++)
                    for (int64_t c = c0; c < c1; c++) tmp[n++] = x[(r - r0) * C + c];
                s = set_unit(pl, br * nbw + bc, tmp, n, err);
            }
        }
    }
    return s;
}

/* param index of every element of rows [r0, r1) of a 2-D [R, C] tensor, without a division per
** element for the common granularities (same values as tm_qgran_param_index). */
static void fill_params(const tm_qgran *g, const int64_t *shape, int64_t r0, int64_t r1, int64_t *param) {
    int64_t C = shape[1];
    int64_t k = 0;
    switch (g->kind) {
    case TM_GRAN_TENSOR:
        for (int64_t r = r0; r < r1; r++) for (int64_t c = 0; c < C; c++) param[k++] = 0;
        return;
    case TM_GRAN_CHANNEL:
        for (int64_t r = r0; r < r1; r++) for (int64_t c = 0; c < C; c++) param[k++] = r;
        return;
    case TM_GRAN_GROUP: {
        int64_t gs = g->group_size, ng = (C + gs - 1) / gs;
        for (int64_t r = r0; r < r1; r++)
            for (int64_t c0 = 0, gi = 0; c0 < C; c0 += gs, gi++)
                for (int64_t c = c0; c < C && c < c0 + gs; c++) param[k++] = r * ng + gi;
        return;
    }
    default:
        for (int64_t r = r0; r < r1; r++)
            for (int64_t c = 0; c < C; c++) param[k++] = tm_qgran_param_index(g, 2, shape, r * C + c);
    }
}

/* The observer or the quantizer met NaN/Inf (the cold path): name the tensor and the first
** bad element by its flat index and coordinates. */
static tm_status nonfinite_error(const job_t *j, const tm_tensor *t, const float *x, int64_t r0,
                                 int64_t ne, tm_err *err) {
    int64_t C = t->shape[1];
    for (int64_t k = 0; k < ne; k++)
        if (!isfinite(x[k])) {
            int64_t flat = r0 * C + k;
            return tm__err_set(err, TM_E_NONFINITE, -1,
                               "%s: tensor '%s': %s at element %lld ([%lld, %lld]); "
                               "use --allow-nonfinite to quantize it anyway",
                               tm_file_path(j->in, t->file_index), t->name,
                               isnan(x[k]) ? "NaN" : "infinity", (long long)flat,
                               (long long)(flat / C), (long long)(flat % C));
        }
    return tm__err_set(err, TM_E_NONFINITE, -1, "tensor '%s': non-finite value", t->name);
}

/* Allocate a tensor's per-param arrays on its first chunk (thread-safe). */
static tm_status ensure_params(job_t *j, plan_t *pl, tm_err *err) {
    tm_status s = TM_OK;
    pthread_mutex_lock(&j->alloc_mu);
    if (!pl->params_ready) {
        pl->scale = tm__calloc((size_t)pl->n_params, sizeof(float));
        pl->zp = pl->spec.symmetric ? NULL : tm__calloc((size_t)pl->n_params, sizeof(int32_t));
        pl->param_l2 = tm__calloc((size_t)pl->n_params, sizeof(double));
        pl->param_n = tm__calloc((size_t)pl->n_params, sizeof(int64_t));
        if (!pl->scale || (!pl->spec.symmetric && !pl->zp) || !pl->param_l2 || !pl->param_n)
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory for %lld scales", (long long)pl->n_params);
        else pl->params_ready = 1;
    }
    pthread_mutex_unlock(&j->alloc_mu);
    return s;
}

static tm_status write_params(job_t *j, plan_t *pl, tm_err *err);

/* The last chunk of a tensor: write its scales and zero points, summarise its error
** statistics (chunks merged in chunk order: deterministic), free the per-param arrays. */
static tm_status finish_plan(job_t *j, plan_t *pl, tm_err *err) {
    tm_status s = write_params(j, pl, err);
    if (s) return s;
    tm_erracc total;
    tm_erracc_init(&total, 0, NULL);
    for (int64_t c = 0; c < pl->n_tasks; c++) tm_erracc_merge(&total, &pl->chunk_acc[c]);
    total.n_params = pl->spec.gran.kind == TM_GRAN_TENSOR ? 0 : pl->n_params;
    total.param_sum_l2 = pl->param_l2;
    total.param_n = pl->param_n;
    tm_erracc_summary(&total, &pl->summary);
    if (pl->spec.gran.kind == TM_GRAN_TENSOR) {
        pl->summary.worst_group = 0;
        pl->summary.worst_group_rmse_lsb = pl->summary.rmse_lsb;
    }
    for (int64_t k = 0; k < pl->n_params; k++)
        if (!(pl->scale[k] > 0) || !isfinite(pl->scale[k])) pl->summary.n_bad_scales++;
    pthread_mutex_lock(&j->alloc_mu);
    free(pl->scale); free(pl->zp); free(pl->param_l2); free(pl->param_n);
    pl->scale = NULL; pl->zp = NULL; pl->param_l2 = NULL; pl->param_n = NULL;
    pthread_mutex_unlock(&j->alloc_mu);
    return TM_OK;
}

/* Error statistics of rows [r0, r1) of a channel (one param per row) or group (groups along
** axis 1, the last one possibly short) tensor: one run per param, in element order. */
static void add_row_runs(tm_erracc *acc, const plan_t *pl, const float *x, const float *xq, int64_t r0,
                         int64_t r1, int64_t emin, int64_t emax) {
    const int64_t C = pl->cols;
    if (pl->spec.gran.kind == TM_GRAN_CHANNEL) {
        for (int64_t r = r0; r < r1; r++)
            tm_erracc_add_run(acc, pl->spec.code_dtype, x + (r - r0) * C, xq + (r - r0) * C, r, pl->scale,
                              pl->zp, emin, emax, C);
        return;
    }
    const int64_t gs = pl->spec.gran.group_size, ng = (C + gs - 1) / gs;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c0 = 0, gi = 0; c0 < C; c0 += gs, gi++)
            tm_erracc_add_run(acc, pl->spec.code_dtype, x + (r - r0) * C + c0, xq + (r - r0) * C + c0,
                              r * ng + gi, pl->scale, pl->zp, emin, emax, C - c0 < gs ? C - c0 : gs);
}

/* Source bytes as float32 per slice of run_slices: the slice's values, dequantized values, codes
** and packed words stay in the L2 cache between the steps. */
enum { SLICE_TARGET_BYTES = 64 << 10 };

/* Rows [r0, r1) of a channel or group tensor with integer codes, in slices of a few rows: each
** slice is read (in_place: x is the chunk's float32 in the map; else the slice is read into fbuf
** with tm__srcread_f32, or through the view when that cannot be used, setting *mapped_read), observed,
** quantized and dequantized (one pass), measured and packed into pbuf at its row offset before
** the next one.
** Every step works per row and the error runs are added in the same order, so the codes,
** scales and statistics are the bits the whole-chunk passes give. */
static tm_status run_slices(job_t *j, plan_t *pl, const tm_tensor *t, const tm_qparams *qp,
                            const tm_packing *pk, tm_erracc *acc, const float *x, int in_place,
                            int64_t r0, int64_t r1, int64_t emin, int64_t emax, int thread,
                            int *mapped_read, tm_err *err) {
    const int64_t C = pl->cols;
    int64_t srows = (int64_t)(SLICE_TARGET_BYTES / 4) / (C > 0 ? C : 1);
    if (srows < 1) srows = 1;
    float *xq = j->qbuf[thread];
    uint8_t *codes = j->cbuf[thread];
    tm_status s = TM_OK;
    for (int64_t rs = r0; rs < r1 && !s; rs += srows) {
        int64_t re = rs + srows < r1 ? rs + srows : r1, nes = (re - rs) * C;
        const float *xs = j->fbuf[thread];
        if (in_place) {
            xs = x + (rs - r0) * C;
        } else {
            int pr = tm__srcread_f32(&j->src, t, rs * C, nes, j->fbuf[thread], j->ibuf[thread], err);
            if (pr < 0) return err && err->code ? err->code : TM_E_IO; /* TM_E_IO, or a member's CRC (TM_E_CORRUPT) */
            if (pr == 0) {
                s = tm_tensor_read_f32(j->in, pl->src, rs * C, nes, j->fbuf[thread], err);
                if (s) return s;
                *mapped_read = 1;
            }
        }
        s = observe_rows(pl, xs, rs, re, xq, err);
        if (s == TM_E_NONFINITE) return nonfinite_error(j, t, xs, rs, nes, err);
        if (s) return s;
        s = tm__quantize_dequantize_f32(qp, 2, t->shape, xs, rs * C, nes, codes, xq, err);
        if (s == TM_E_NONFINITE) return nonfinite_error(j, t, xs, rs, nes, err);
        if (s) return s;
        add_row_runs(acc, pl, xs, xq, rs, re, emin, emax);
        s = tm_pack_codes(pk, pl->spec.code_dtype, codes, re - rs, C,
                          j->pbuf[thread] + (size_t)((uint64_t)(rs - r0) * pl->row_bytes), err);
    }
    return s;
}

static tm_status run_task_inner(void *vctx, int64_t task, int thread, tm_err *err);
static tm_status run_task(void *vctx, int64_t task, int thread, tm_err *err) {
    const job_t *jo = vctx;
    if (jo->shard_owner && jo->shard_owner[jo->plans[jo->task_plan[task]].src] != jo->shard_i)
        return TM_OK; /* another part's tensor (part.h) */
    tm_status s = run_task_inner(vctx, task, thread, err);
    if (s && s != TM_E_NONFINITE && s != TM_E_CANCELLED) {
        job_t *j = vctx;
        const tm_tensor *t = tm_file_tensor(j->in, j->plans[j->task_plan[task]].src);
        if (!strstr(err->msg, t->name)) tm__err_prefix(err, "tensor '%s'", t->name);
    }
    return s;
}

/* n bytes of entry at off into the output; a part logs their CRC-32C from memory (part_crc.h). */
static tm_status out_write(job_t *j, int64_t entry, uint64_t off, const void *data, size_t n, tm_err *err) {
    tm_status s = tm_st_writer_write(j->w, entry, off, data, n, err);
    int file;
    uint64_t at, len;
    if (!s && j->crclog && tm_st_writer_entry_span(j->w, entry, &file, &at, &len) == TM_OK)
        tm__crclog_add(j->crclog, tm_st_writer_file(j->w, file), at + off, data, n);
    return s;
}

static tm_status run_task_inner(void *vctx, int64_t task, int thread, tm_err *err) {
    job_t *j = vctx;
    plan_t *pl = &j->plans[j->task_plan[task]];
    int64_t chunk = j->task_chunk[task];
    const tm_tensor *t = tm_file_tensor(j->in, pl->src);
    tm_status s;
    if (pl->kind == OUT_COPY) {
        /* copy the physical bytes unchanged, in pieces */
        uint64_t piece = CHUNK_TARGET_BYTES;
        uint64_t off = (uint64_t)chunk * piece;
        uint64_t n = t->n_bytes - off < piece ? t->n_bytes - off : piece;
        const void *p;
        void *rowmajor = NULL; /* column-major or big-endian source (NumPy, PyTorch): relaid */
        if (t->fortran_order || t->big_endian) {
            rowmajor = malloc(n ? (size_t)n : 1);
            s = rowmajor ? tm__tensor_bytes_rowmajor(j->in, pl->src, off, n, rowmajor, err)
                         : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
            p = rowmajor;
        } else {
            s = tm_tensor_data(j->in, pl->src, off, n, &p, err);
        }
        if (!s) s = out_write(j, pl->e_copy, off, p, (size_t)n, err);
        free(rowmajor);
        tm_tensor_release(j->in, pl->src, off, n);
        progress(j, "copy", n);
        return s;
    }
    s = ensure_params(j, pl, err);
    if (s) return s;
    int64_t C = pl->cols;
    int64_t r0 = chunk * pl->rows_per_chunk;
    int64_t r1 = r0 + pl->rows_per_chunk < pl->rows ? r0 + pl->rows_per_chunk : pl->rows;
    int64_t ne = (r1 - r0) * C;
    const tm_granularity gk = pl->spec.gran.kind;
    /* row-local units with integer codes: the chunk goes through every step in slices */
    const int sliced = pl->kind == OUT_PACK && (gk == TM_GRAN_CHANNEL || gk == TM_GRAN_GROUP);
    const float *x = j->fbuf[thread];
    float *xq = j->qbuf[thread];
    uint8_t *codes = j->cbuf[thread];
    int64_t *param = j->ibuf[thread];
    const void *mapped = NULL;
    int in_place = 0;
    if (sliced && tm__srcread_can(&j->src, t)) {
        /* read slice by slice with pread (run_slices), not from the map */
    } else if (t->dtype == TM_F32 && !t->fortran_order && !t->big_endian &&
        tm_tensor_data(j->in, pl->src, (uint64_t)(r0 * C) * 4, (uint64_t)ne * 4, &mapped, NULL) == TM_OK &&
        ((uintptr_t)mapped & 3u) == 0) {
        x = mapped; /* aligned little-endian float32 in the map: read it in place, no copy */
        in_place = 1;
    } else if (!sliced) {
        s = load_rows(j, pl->src, r0 * C, ne, j->fbuf[thread], err);
        if (s) return s;
    }
    tm_qparams qp = tm_qparams_for_spec(&pl->spec, pl->n_params, pl->scale, pl->zp);
    /* the observer pass (observe_rows, or observe_whole for per-tensor) has already refused
    ** non-finite values unless they are allowed: the quantizer need not scan for them again */
    qp.allow_nonfinite = 1;
    tm_erracc *acc = &pl->chunk_acc[chunk];
    acc->kernels = pl->spec.kernels;
    if (gk != TM_GRAN_TENSOR) {
        /* row-local units: this chunk owns its params, so it may accumulate into them */
        acc->n_params = pl->n_params;
        acc->param_sum_l2 = pl->param_l2;
        acc->param_n = pl->param_n;
    }
    int64_t emin = qp.qmin, emax = qp.qmax;
    if (pl->kind == OUT_FP8) { emin = -448; emax = 448; }
    tm_packing pk;
    memset(&pk, 0, sizeof pk);
    pk.container = TM_I32;
    pk.bits = tm_dtype_get(pl->spec.code_dtype)->bits;
    pk.codes_per_container = 32 / pk.bits;
    pk.packed_axis = 1;
    pk.offset = (int64_t)1 << (pk.bits - 1);
    pk.lsb_first = 1;
    if (sliced) {
        int mapped_read = 0;
        s = run_slices(j, pl, t, &qp, &pk, acc, x, in_place, r0, r1, emin, emax, thread, &mapped_read, err);
        if (!in_place && mapped_read) {
            uint64_t isz = (uint64_t)tm_dtype_get(t->dtype)->bits / 8;
            tm_tensor_release(j->in, pl->src, (uint64_t)(r0 * C) * isz, (uint64_t)ne * isz);
        }
    } else {
        if (gk != TM_GRAN_TENSOR) {
            s = observe_rows(pl, x, r0, r1, xq, err);
            if (s == TM_E_NONFINITE) s = nonfinite_error(j, t, x, r0, ne, err);
        }
        if (!s) {
            s = tm_quantize_f32(&qp, 2, t->shape, x, r0 * C, ne, codes, NULL, err);
            if (s == TM_E_NONFINITE) s = nonfinite_error(j, t, x, r0, ne, err);
        }
        if (!s) s = tm_dequantize(&qp, 2, t->shape, codes, r0 * C, ne, xq, err);
        if (!s) {
            if (gk == TM_GRAN_TENSOR) {
                tm_erracc_add_run(acc, pl->spec.code_dtype, x, xq, 0, pl->scale, pl->zp, emin, emax, ne);
            } else if (gk == TM_GRAN_CHANNEL || gk == TM_GRAN_GROUP) {
                add_row_runs(acc, pl, x, xq, r0, r1, emin, emax);
            } else {
                fill_params(&qp.gran, t->shape, r0, r1, param);
                tm_erracc_add(acc, pl->spec.code_dtype, x, xq, param, pl->scale, pl->zp, emin, emax, ne);
            }
        }
        if (!s && pl->kind == OUT_FP8)
            s = out_write(j, pl->e_codes, (uint64_t)(r0 * C), codes, (size_t)ne, err);
        else if (!s)
            s = tm_pack_codes(&pk, pl->spec.code_dtype, codes, r1 - r0, C, j->pbuf[thread], err);
    }
    acc->n_params = 0;
    acc->param_sum_l2 = NULL;
    acc->param_n = NULL;
    if (!s && pl->kind != OUT_FP8)
        s = out_write(j, pl->e_codes, (uint64_t)r0 * pl->row_bytes, j->pbuf[thread],
                               (size_t)((uint64_t)(r1 - r0) * pl->row_bytes), err);
    if (in_place) tm_tensor_release(j->in, pl->src, (uint64_t)(r0 * C) * 4, (uint64_t)ne * 4);
    progress(j, "quantize", (uint64_t)ne * (uint64_t)tm_dtype_get(t->dtype)->bits / 8);
    if (!s && atomic_fetch_add(&pl->chunks_done, 1) + 1 == pl->n_tasks) s = finish_plan(j, pl, err);
    return s;
}

/* Per-tensor granularity: observe the whole tensor first (one extra streaming pass). */
static tm_status observe_whole(job_t *j, plan_t *pl, tm_err *err) {
    const tm_tensor *t = tm_file_tensor(j->in, pl->src);
    tm_status s0 = ensure_params(j, pl, err);
    if (s0) return s0;
    float *all = tm__malloc_n((size_t)t->n_elems, sizeof(float));
    if (!all) return tm__err_set(err, TM_E_NOMEM, -1, "tensor '%s': out of memory for %lld values",
                                 t->name, (long long)t->n_elems);
    tm_status s = load_rows(j, pl->src, 0, t->n_elems, all, err);
    for (int64_t k = 0; !s && !pl->spec.allow_nonfinite && k < t->n_elems; k++)
        if (!isfinite(all[k]))
            s = tm__err_set(err, TM_E_NONFINITE, -1,
                            "%s: tensor '%s': %s at element %lld; use --allow-nonfinite to quantize it anyway",
                            tm_file_path(j->in, t->file_index), t->name, isnan(all[k]) ? "NaN" : "infinity",
                            (long long)k);
    if (!s) s = set_unit(pl, 0, all, t->n_elems, err);
    else { free(all); return s; }
    if (s) tm__err_prefix(err, "tensor '%s'", t->name);
    free(all);
    return s;
}

/* ---------------------------------------------------------------------------------------- */
/* finish: scales, zero points, shapes, config.json, manifest                                */
/* ---------------------------------------------------------------------------------------- */

static tm_status write_params(job_t *j, plan_t *pl, tm_err *err) {
    /* scale in the scale dtype */
    tm_dtype sd = pl->spec.scale_dtype;
    size_t nb = (size_t)tm_dtype_nbytes(sd, pl->n_params);
    void *buf = malloc(nb ? nb : 1);
    if (!buf) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    tm_status s = tm_convert_from_f32(sd, pl->scale, pl->n_params, buf);
    if (!s) s = out_write(j, pl->e_scale, 0, buf, nb, err);
    free(buf);
    if (s) return s;
    if (pl->e_shape >= 0) {
        int64_t shp[2] = {pl->rows, pl->cols};
        uint8_t b[16];
        tm__st64(b, (uint64_t)shp[0]);
        tm__st64(b + 8, (uint64_t)shp[1]);
        s = out_write(j, pl->e_shape, 0, b, 16, err);
        if (s) return s;
    }
    if (pl->e_zp >= 0) {
        int bits = tm_dtype_get(pl->spec.code_dtype)->bits;
        if (pl->spec.gran.kind == TM_GRAN_TENSOR) {
            int8_t z = (int8_t)pl->zp[0];
            s = out_write(j, pl->e_zp, 0, &z, 1, err);
        } else {
            /* [prow, ng] params packed along dim 0: [ceil(prow*bits/32), ng] I32 */
            int64_t ng = pl->pndim >= 2 ? pl->pshape[1] : 1, prow = pl->n_params / ng;
            uint64_t wrows = ((uint64_t)prow * (uint64_t)bits + 31) / 32;
            uint8_t *zc = tm__malloc_n((size_t)pl->n_params, 1);
            uint8_t *le = tm__calloc((size_t)(wrows * (uint64_t)ng), 4);
            if (!zc || !le) { free(zc); free(le); return tm__err_set(err, TM_E_NOMEM, -1, "out of memory"); }
            for (int64_t k = 0; k < pl->n_params; k++) zc[k] = (uint8_t)(int8_t)pl->zp[k];
            tm_packing pk;
            memset(&pk, 0, sizeof pk);
            pk.container = TM_I32;
            pk.bits = bits;
            pk.codes_per_container = 32 / bits;
            pk.packed_axis = 0;
            pk.offset = (int64_t)1 << (bits - 1);
            pk.lsb_first = 1;
            s = tm_pack_codes_dim0(&pk, pl->spec.code_dtype, zc, prow, ng, le, err);
            if (!s) s = out_write(j, pl->e_zp, 0, le, (size_t)(wrows * (uint64_t)ng * 4), err);
            free(zc);
            free(le);
        }
    }
    return s;
}

/* QuantizationArgs of compressed-tensors for one scheme (every key the library knows). */
static json_t *ct_weights_args(const tm_qspec *s, tm_dtype weight_dtype) {
    json_t *w = json_object();
    int fp8 = s->code_dtype == TM_F8_E4M3;
    json_object_set_new(w, "num_bits", json_integer(tm_dtype_get(s->code_dtype)->bits));
    json_object_set_new(w, "type", json_string(fp8 ? "float" : "int"));
    json_object_set_new(w, "symmetric", json_boolean(s->symmetric));
    json_object_set_new(w, "group_size", s->gran.kind == TM_GRAN_GROUP ? json_integer(s->gran.group_size) : json_null());
    json_object_set_new(w, "strategy", json_string(tm_granularity_kind_name(s->gran.kind)));
    json_object_set_new(w, "block_structure", json_null());
    if (s->gran.kind == TM_GRAN_BLOCK) {
        json_t *b = json_array();
        json_array_append_new(b, json_integer(s->gran.block_h));
        json_array_append_new(b, json_integer(s->gran.block_w));
        json_object_set_new(w, "block_structure", b);
    }
    json_object_set_new(w, "dynamic", json_false());
    json_object_set_new(w, "actorder", json_null());
    /* null means "the weight's dtype"; say which dtype the scales really have otherwise */
    json_object_set_new(w, "scale_dtype", s->scale_dtype == weight_dtype ? json_null()
                        : json_string(s->scale_dtype == TM_F16 ? "torch.float16"
                                      : s->scale_dtype == TM_BF16 ? "torch.bfloat16" : "torch.float32"));
    json_object_set_new(w, "zp_dtype", s->symmetric ? json_null() : json_string("torch.int8"));
    char ob[96];
    tm_observer_name(&s->observer, ob, sizeof ob);
    json_object_set_new(w, "observer", json_string(ob));
    json_object_set_new(w, "observer_kwargs", json_object());
    return w;
}

static json_t *build_quant_config(job_t *j) {
    json_t *qc = json_object();
    json_t *groups = json_object();
    /* one config group per distinct scheme */
    int64_t n_groups = 0;
    int64_t *rep = tm__calloc((size_t)j->n_plans + 1, sizeof(int64_t));
    for (int64_t i = 0; rep && i < j->n_plans; i++) {
        if (j->plans[i].kind == OUT_COPY) continue;
        int found = 0;
        for (int64_t g = 0; g < n_groups && !found; g++) found = tm__qjob_same_scheme(&j->plans[rep[g]].spec, &j->plans[i].spec);
        if (!found) rep[n_groups++] = i;
    }
    const char *top_format = NULL;
    int mixed = 0;
    for (int64_t g = 0; g < n_groups; g++) {
        const plan_t *r = &j->plans[rep[g]];
        const char *fmt = r->kind == OUT_FP8 ? "naive-quantized" : "pack-quantized";
        if (top_format && strcmp(top_format, fmt)) mixed = 1;
        top_format = fmt;
        json_t *grp = json_object();
        json_t *targets = json_array();
        int only_linear = 1;
        for (int64_t i = 0; i < j->n_plans; i++)
            if (j->plans[i].kind != OUT_COPY && (tm__qjob_is_embedding(j->plans[i].module) || tm__qjob_is_embedding(tm_file_tensor(j->in, j->plans[i].src)->name)))
                only_linear = 0;
        if (n_groups == 1 && only_linear) {
            json_array_append_new(targets, json_string("Linear"));
        } else { /* exact module names: also covers embeddings, which "Linear" would not */
            for (int64_t i = 0; i < j->n_plans; i++)
                if (j->plans[i].kind != OUT_COPY && tm__qjob_same_scheme(&j->plans[i].spec, &r->spec))
                    json_array_append_new(targets, json_string(j->plans[i].module));
        }
        json_object_set_new(grp, "targets", targets);
        json_object_set_new(grp, "weights", ct_weights_args(&r->spec, tm_file_tensor(j->in, r->src)->dtype));
        json_object_set_new(grp, "input_activations", json_null());
        json_object_set_new(grp, "output_activations", json_null());
        json_object_set_new(grp, "format", json_string(fmt));
        char name[32];
        snprintf(name, sizeof name, "group_%lld", (long long)g);
        json_object_set_new(groups, name, grp);
    }
    free(rep);
    json_t *ignore = json_array();
    for (int64_t i = 0; i < j->n_plans; i++) {
        const plan_t *pl = &j->plans[i];
        const tm_tensor *t = tm_file_tensor(j->in, pl->src);
        if (pl->kind != OUT_COPY || t->role != TM_ROLE_DATA || t->ndim != 2 || !tm__ends_with(t->name, ".weight"))
            continue;
        if (tm__qjob_is_embedding(t->name)) continue; /* not a Linear module */
        char *mod = tm__strndup(t->name, strlen(t->name) - strlen(".weight"));
        if (mod) json_array_append_new(ignore, json_string(mod));
        free(mod);
    }
    json_object_set_new(qc, "config_groups", groups);
    json_object_set_new(qc, "format", json_string(mixed ? "mixed-precision" : (top_format ? top_format : "dense")));
    json_object_set_new(qc, "global_compression_ratio", json_null());
    json_object_set_new(qc, "ignore", ignore);
    json_object_set_new(qc, "kv_cache_scheme", json_null());
    json_object_set_new(qc, "quant_method", json_string("compressed-tensors"));
    json_object_set_new(qc, "quantization_status", json_string("compressed"));
    json_object_set_new(qc, "sparsity_config", json_object());
    json_object_set_new(qc, "transform_config", json_object());
    json_object_set_new(qc, "version", json_string("0.18.0"));
    return qc;
}

static tm_status write_config(job_t *j, const char *dir, tm_err *err) {
    json_t *cfg = NULL;
    const char *src = tm_file_config_json(j->in);
    if (src) {
        cfg = json_loads(src, 0, NULL);
        if (cfg && !json_is_object(cfg)) { json_decref(cfg); cfg = NULL; }
    }
    if (!cfg) cfg = json_object();
    json_object_del(cfg, "compression_config");
    json_object_set_new(cfg, "quantization_config", build_quant_config(j));
    char *text = json_dumps(cfg, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    json_decref(cfg);
    if (!text) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    char *path = tm__aprintf("%s/config.json", dir);
    tm_status s = path ? tm__write_file_atomic(path, text, strlen(text), err)
                       : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    free(path);
    free(text);
    return s;
}

static json_t *num(double v) { return tm__manifest_num(v); }


json_t *tm__errsum_json(const tm_errsum *e);
json_t *tm__errsum_json(const tm_errsum *e) {
    json_t *o = json_object();
    json_object_set_new(o, "sqnr_db", num(e->sqnr_db));
    json_object_set_new(o, "rmse", num(e->rmse));
    json_object_set_new(o, "rmse_lsb", num(e->rmse_lsb));
    json_object_set_new(o, "max_abs_err", num(e->max_abs_err));
    json_object_set_new(o, "max_err_lsb", num(e->max_err_lsb));
    json_object_set_new(o, "clipped_fraction", num(e->clipped_fraction));
    json_object_set_new(o, "cosine", num(e->cosine));
    json_object_set_new(o, "worst_group", json_integer(e->worst_group));
    json_object_set_new(o, "worst_group_rmse_lsb", num(e->worst_group_rmse_lsb));
    json_object_set_new(o, "n_nonfinite", json_integer(e->n_nonfinite));
    return o;
}


/* ---------------------------------------------------------------------------------------- */

static void free_plans(job_t *j) {
    for (int64_t i = 0; i < j->n_plans; i++) {
        plan_t *pl = &j->plans[i];
        free(pl->scale); free(pl->zp); free(pl->param_l2); free(pl->param_n); free(pl->chunk_acc);
        free(pl->module);
    }
    free(j->plans);
    free(j->task_plan);
    free(j->task_chunk);
}

static void free_bufs(job_t *j, int nt) {
    for (int t = 0; t < nt; t++) {
        if (j->fbuf) free(j->fbuf[t]);
        if (j->qbuf) free(j->qbuf[t]);
        if (j->cbuf) free(j->cbuf[t]);
        if (j->pbuf) free(j->pbuf[t]);
        if (j->ibuf) free(j->ibuf[t]);
    }
    free(j->fbuf); free(j->qbuf); free(j->cbuf); free(j->pbuf); free(j->ibuf);
    tm__srcread_close(&j->src);
}



void tm_ct_quantize_result_free(tm_ct_quantize_result *r) {
    if (!r) return;
    free(r->tensors);
    free(r->manifest_json);
    free(r->out_path);
    for (int64_t i = 0; i < r->n_warnings; i++) free(r->warnings[i]);
    free(r->warnings);
    free(r);
}

/* The job's state from plan to done (the driver's phases: pipeline.h, tm__qwriter). job_t is
** first: the pool's tasks (run_task) see it. */
typedef struct ctjob {
    job_t           j;
    int             nt;          /* worker threads                                        */
    tm_st_entry    *entries;     /* the writer's entries, ne used of n_entries            */
    char          **names;
    int64_t         n_entries, ne;
    char           *stpath;      /* pp->stage/model.safetensors                           */
    const char    **ofiles;      /* the staged safetensors files, for the manifest        */
    tm_qdiff_result qr;          /* the quantized tensors' statistics and flags           */
    int64_t        *qr_of;       /* parts: tensor -> its entry of qr, -1 (ct_part_tensor)  */
    tm_ct_quantize_result *res;
} ctjob;

/* The plan (qjob_plan.c), the tasks (row chunks; copies in pieces), the per-thread buffers, the
** safetensors writer at pp->stage and the per-tensor observations, before the pool runs. */
static tm_status ct_plan(void *ctx, tm__pipe *pp, int64_t *n_tasks, tm_err *err) {
    ctjob *cj = ctx;
    job_t *jp = &cj->j;
    tm_file *in = jp->in;
    const tm_ct_quantize_params *p = jp->p;
    const int nt = cj->nt = pp->threads;
    int64_t n = tm_file_n_tensors(in);
    tm_status s = tm__qjob_plan(jp, &cj->entries, &cj->names, &cj->n_entries, &cj->ne, err);
    if (s) return s;
    if (pp->shard_n) { /* a part: only its own tensors are quantized and written (part.h) */
        jp->shard_owner = pp->tensor_owner;
        jp->shard_i = pp->shard_i;
        jp->crclog = pp->crclog;
    }
    /* tasks */
    size_t max_chunk_elems = 1;
    uint64_t max_chunk_packed = 1; /* packed bytes of the largest chunk: rows x row_bytes, which
                                   ** exceeds the values when I32 words pad a row (int8, 257 columns) */
    for (int64_t i = 0; i < n && !s; i++) {
        plan_t *pl = &jp->plans[i];
        const tm_tensor *t = tm_file_tensor(in, i);
        pl->first_task = jp->n_tasks;
        if (pl->kind == OUT_COPY) {
            pl->n_tasks = (int64_t)((t->n_bytes + CHUNK_TARGET_BYTES - 1) / CHUNK_TARGET_BYTES);
        } else {
            uint64_t row_src = (uint64_t)pl->cols * (uint64_t)tm_dtype_get(t->dtype)->bits / 8;
            int64_t rpc = (int64_t)(CHUNK_TARGET_BYTES / (row_src ? row_src : 1));
            if (rpc < 1) rpc = 1;
            if (pl->spec.gran.kind == TM_GRAN_BLOCK) {
                int64_t bh = pl->spec.gran.block_h;
                rpc = rpc < bh ? bh : rpc / bh * bh;
            }
            if (rpc > pl->rows) rpc = pl->rows;
            pl->rows_per_chunk = rpc;
            pl->n_tasks = (pl->rows + rpc - 1) / rpc;
            if ((size_t)(rpc * pl->cols) > max_chunk_elems) max_chunk_elems = (size_t)(rpc * pl->cols);
            if ((uint64_t)rpc * pl->row_bytes > max_chunk_packed) max_chunk_packed = (uint64_t)rpc * pl->row_bytes;
            pl->chunk_acc = tm__calloc((size_t)pl->n_tasks, sizeof(tm_erracc));
            if (!pl->chunk_acc) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        }
        jp->n_tasks += pl->n_tasks;
    }
    if (!s) {
        jp->task_plan = tm__calloc((size_t)(jp->n_tasks + 1), sizeof(int64_t));
        jp->task_chunk = tm__calloc((size_t)(jp->n_tasks + 1), sizeof(int64_t));
        if (!jp->task_plan || !jp->task_chunk) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        for (int64_t i = 0; !s && i < n; i++)
            for (int64_t c = 0; c < jp->plans[i].n_tasks; c++) {
                jp->task_plan[jp->plans[i].first_task + c] = i;
                jp->task_chunk[jp->plans[i].first_task + c] = c;
            }
    }
    if (!s) {
        jp->buf_elems = max_chunk_elems;
        tm__srcread_open(&jp->src, in);
        jp->fbuf = tm__calloc((size_t)nt, sizeof(float *));
        jp->qbuf = tm__calloc((size_t)nt, sizeof(float *));
        jp->cbuf = tm__calloc((size_t)nt, sizeof(uint8_t *));
        jp->pbuf = tm__calloc((size_t)nt, sizeof(uint8_t *));
        jp->ibuf = tm__calloc((size_t)nt, sizeof(int64_t *));
        if (!jp->fbuf || !jp->qbuf || !jp->cbuf || !jp->pbuf || !jp->ibuf) s = tm__err_set(err, TM_E_NOMEM, -1, "oom");
        for (int t = 0; t < nt && !s; t++) {
            jp->fbuf[t] = tm__malloc_n(max_chunk_elems, sizeof(float));
            jp->qbuf[t] = tm__malloc_n(max_chunk_elems, sizeof(float));
            jp->cbuf[t] = tm__malloc_n(max_chunk_elems, 1);
            jp->pbuf[t] = tm__malloc_n((size_t)max_chunk_packed + 64, 1);
            jp->ibuf[t] = tm__malloc_n(max_chunk_elems, sizeof(int64_t));
            if (!jp->fbuf[t] || !jp->qbuf[t] || !jp->cbuf[t] || !jp->pbuf[t] || !jp->ibuf[t])
                s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory for chunk buffers");
        }
    }

    /* ---- output: built in pp->stage beside the target, renamed at the end (pipeline.c) ---- */
    if (!s) {
        /* a part writes the shards into the directory every part shares, the index into its own (part.h) */
        cj->stpath = tm__aprintf("%s/model.safetensors", pp->shared ? pp->shared : pp->stage);
        const char *mk[] = {"format", "quantized_by"};
        const char *mv[] = {"pt", "tensormorph " TM_VERSION_STRING};
        tm_st_write_params wp;
        memset(&wp, 0, sizeof wp);
        wp.max_shard_bytes = p->max_shard_bytes;
        wp.meta_keys = mk;
        wp.meta_values = mv;
        wp.n_meta = 2;
        wp.shared = pp->shared != NULL;
        wp.shared_header = pp->shard_i == 0;
        wp.index_dir = pp->shared ? pp->stage : NULL;
        if (pp->shared) s = tm__part_start(pp, err); /* the parts present: of this recipe? */
        if (!s) s = cj->stpath ? tm_st_writer_open(cj->stpath, cj->entries, cj->ne, &wp, &jp->w, err)
                   : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    /* the per-tensor observations (over the whole tensor) before the chunks */
    for (int64_t i = 0; i < n && !s; i++)
        if (jp->plans[i].kind != OUT_COPY && jp->plans[i].spec.gran.kind == TM_GRAN_TENSOR &&
            tm__pipe_owns(pp, jp->plans[i].src))
            s = observe_whole(jp, &jp->plans[i], err);
    *n_tasks = s ? 0 : jp->n_tasks;
    return s;
}

/* The safetensors file(s), then config.json and the input's side files beside them. */
static tm_status ct_write(void *ctx, tm__pipe *pp, tm_err *err) {
    ctjob *cj = ctx;
    tm_status s = tm_st_writer_finish(cj->j.w, err);
    if (!s) s = write_config(&cj->j, pp->stage, err);
    if (!s) s = tm__ct_copy_side_files(cj->j.in, pp->stage, err);
    return s;
}

/* Per-tensor rows of the result and the statistics that flag the worst tensors (qdiff.h). */
static tm_status ct_results(void *ctx, tm__pipe *pp, tm__qtotals *tot, tm_err *err) {
    ctjob *cj = ctx;
    job_t *jp = &cj->j;
    tm_file *in = jp->in;
    int64_t n = tm_file_n_tensors(in);
    (void)pp;
    tm_ct_quantize_result *res = cj->res = calloc(1, sizeof *res);
    if (res) res->tensors = tm__calloc((size_t)(n ? n : 1), sizeof(tm_ct_quantize_tensor));
    if (!res || !res->tensors) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    tm_qdiff_result *qr = &cj->qr;
    qr->entries = tm__calloc((size_t)(n ? n : 1), sizeof(tm_qdiff_entry));
    if (!qr->entries) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        plan_t *pl = &jp->plans[i];
        tm_ct_quantize_tensor *rt = &res->tensors[res->n++];
        const tm_tensor *t = tm_file_tensor(in, i);
        rt->name = t->name;
        res->src_bytes += t->n_bytes;
        if (pl->kind == OUT_COPY) {
            snprintf(rt->reason, sizeof rt->reason, "%s", pl->reason);
            rt->kept_by_choice = tm__qjob_filtered_by_option(pl->reason) || !strncmp(pl->reason, "group_size ", 11);
            continue;
        }
        rt->quantized = 1;
        rt->spec = pl->spec;
        rt->n_degenerate = atomic_load(&pl->n_degenerate);
        res->n_quantized++;
        rt->e = pl->summary;
        tm_qdiff_entry *qe = &qr->entries[qr->n++];
        qe->name = t->name;
        qe->ref_index = i;
        qe->q_index = i;
        qe->e = rt->e;
        {
            char ob[48];
            const tm_qgran *g = &pl->spec.gran;
            char gs[64];
            if (g->kind == TM_GRAN_CHANNEL) snprintf(gs, sizeof gs, "channel:%d", g->axis);
            else if (g->kind == TM_GRAN_GROUP) snprintf(gs, sizeof gs, "group:%lld", (long long)g->group_size);
            else if (g->kind == TM_GRAN_BLOCK) snprintf(gs, sizeof gs, "block:%lldx%lld", (long long)g->block_h, (long long)g->block_w);
            else snprintf(gs, sizeof gs, "tensor");
            snprintf(qe->scheme, sizeof qe->scheme, "%s %s %s scale:%s", tm_dtype_get(pl->spec.code_dtype)->name, gs,
                     pl->spec.symmetric ? "sym" : "asym", tm_dtype_get(pl->spec.scale_dtype)->name);
            (void)ob;
            tm_observer_kind ok = pl->spec.observer.kind;
            qe->clip_expected = ok == TM_OBS_PERCENTILE || ok == TM_OBS_MSE || ok == TM_OBS_ENTROPY || ok == TM_OBS_HISTOGRAM;
        }
    }
    {
        tm_qdiff_flag(qr);
        for (int64_t k = 0; k < qr->n; k++)
            for (int64_t i = 0; i < res->n; i++)
                if (res->tensors[i].name == qr->entries[k].name) {
                    res->tensors[i].flagged = qr->entries[k].flagged;
                    snprintf(res->tensors[i].flag_reason, sizeof res->tensors[i].flag_reason, "%s", qr->entries[k].reason);
                }
    }
    TM__QTOTALS_OF(tot, res);
    tot->at.out_path = &res->out_path;
    return TM_OK;
}

/* The manifest's "recipe" and "calibration" (tm__qwriter.recipe_add). */
static void ct_recipe(void *ctx, json_t *man) {
    ctjob *cj = ctx;
    const tm_ct_quantize_params *p = cj->j.p;
    json_t *recipe = json_object();
    json_object_set_new(recipe, "format", json_string("compressed-tensors"));
    json_object_set_new(recipe, "default", tm__manifest_scheme(&p->spec, 1));
    json_object_set_new(recipe, "quantize_embeddings", json_boolean(p->quantize_embeddings));
    json_object_set_new(recipe, "strict", json_boolean(p->strict));
    json_object_set_new(recipe, "max_shard_bytes", json_integer((json_int_t)p->max_shard_bytes));
    json_t *inc = json_array(), *exc = json_array(), *rules = json_array();
    for (int64_t k = 0; k < p->n_include; k++) json_array_append_new(inc, json_string(p->include[k]));
    for (int64_t k = 0; k < p->n_exclude; k++) json_array_append_new(exc, json_string(p->exclude[k]));
    for (int64_t k = 0; k < p->n_rules; k++) {
        json_t *r = json_object();
        json_object_set_new(r, "pattern", json_string(p->rules[k].pattern));
        json_object_set_new(r, "ignore", json_boolean(p->rules[k].ignore));
        if (p->rules[k].has_spec) json_object_set_new(r, "scheme", tm__manifest_scheme(&p->rules[k].spec, 1));
        json_array_append_new(rules, r);
    }
    json_object_set_new(recipe, "include", inc);
    json_object_set_new(recipe, "exclude", exc);
    json_object_set_new(recipe, "rules", rules);
    json_object_set_new(recipe, "recipe_file", p->recipe_path ? json_string(p->recipe_path) : json_null());
    if (p->recipe_json) {
        json_t *rj = json_loads(p->recipe_json, 0, NULL);
        json_object_set_new(recipe, "recipe", rj ? rj : json_string(p->recipe_json));
    }
    json_object_set_new(man, "recipe", recipe);
    tm__manifest_add_calibration(man, "none: weight-only quantization; each observer ran on the weights themselves");
}

static tm_status ct_manifest(void *ctx, json_t *man, tm_err *err) {
    ctjob *cj = ctx;
    tm_ct_quantize_result *res = cj->res;
    (void)err;
    ct_recipe(ctx, man);
    json_t *ts = json_array();
    for (int64_t i = 0; i < res->n; i++) {
        tm_ct_quantize_tensor *rt = &res->tensors[i];
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(rt->name));
        json_object_set_new(o, "decision", json_string(rt->quantized ? "quantized" : "kept"));
        if (rt->quantized) {
            json_object_set_new(o, "scheme", tm__manifest_scheme(&rt->spec, 1));
            json_object_set_new(o, "error", tm__errsum_json(&rt->e));
            json_object_set_new(o, "degenerate_units", json_integer(rt->n_degenerate));
            json_object_set_new(o, "flagged", json_boolean(rt->flagged));
            json_object_set_new(o, "flag_reason", json_string(rt->flag_reason));
        } else {
            json_object_set_new(o, "reason", json_string(rt->reason));
        }
        json_array_append_new(ts, o);
    }
    json_object_set_new(man, "tensors", ts);
    return TM_OK;
}

static int ct_output_files(void *ctx, const char *const **files) {
    ctjob *cj = ctx;
    int nf = tm_st_writer_n_files(cj->j.w);
    free(cj->ofiles);
    cj->ofiles = tm__calloc((size_t)nf + 1, sizeof *cj->ofiles);
    if (!cj->ofiles) return -1;
    for (int f = 0; f < nf; f++) cj->ofiles[f] = tm_st_writer_file(cj->j.w, f);
    *files = cj->ofiles;
    return nf;
}

static tm_status ct_summary(void *ctx, json_t *man, json_t *sum, tm_err *err) {
    ctjob *cj = ctx;
    tm_ct_quantize_result *res = cj->res;
    (void)err;
    tm__qjob_runtime_warnings(&cj->j, res);
    json_t *wa = json_array();
    for (int64_t k = 0; k < res->n_warnings; k++) json_array_append_new(wa, json_string(res->warnings[k]));
    json_object_set_new(man, "warnings", wa);
    json_object_set_new(sum, "n_flagged", json_integer(cj->qr.n_flagged));
    json_object_set_new(sum, "median_sqnr_db", num(cj->qr.median_sqnr_db));
    return TM_OK;
}

/* Parts (part.h): the output bytes of source tensor t, its writer entries (contiguous). */
static int ct_tensor_spans(void *ctx, int64_t t, tm__span *sp, int max) {
    ctjob *cj = ctx;
    if (t < 0 || t >= cj->j.n_plans || cj->j.plans[t].src != t) return -1;
    const plan_t *pl = &cj->j.plans[t];
    const int64_t e[] = {pl->e_codes, pl->e_scale, pl->e_shape, pl->e_zp, pl->e_copy};
    int k = 0;
    for (int q = 0; q < 5; q++) {
        if (e[q] < 0) continue;
        int f;
        if (k == max || tm_st_writer_entry_span(cj->j.w, e[q], &f, &sp[k].off, &sp[k].len)) return -1;
        sp[k++].file = tm_st_writer_file(cj->j.w, f);
    }
    return k;
}

/* What merge needs to flag tensors over the whole model (qjob_part.c): the full error summary,
** the scheme label and whether clipping is expected, of a quantized tensor. */
static json_t *ct_part_tensor(void *ctx, int64_t t) {
    ctjob *cj = ctx;
    if (!cj->qr_of) { /* tensor -> its qdiff entry, once */
        if (!(cj->qr_of = tm__malloc_n((size_t)cj->j.n_plans + 1, sizeof *cj->qr_of))) return NULL;
        for (int64_t k = 0; k < cj->j.n_plans; k++) cj->qr_of[k] = -1;
        for (int64_t k = 0; k < cj->qr.n; k++)
            if (cj->qr.entries[k].q_index >= 0 && cj->qr.entries[k].q_index < cj->j.n_plans)
                cj->qr_of[cj->qr.entries[k].q_index] = k;
    }
    if (t < 0 || t >= cj->j.n_plans || cj->qr_of[t] < 0) return NULL;
    return tm__ct_part_qentry(&cj->qr.entries[cj->qr_of[t]]);
}

static const tm__qwriter ct_writer = {
    .kind = TM__PIPE_DIR, .kind_name = "a compressed-tensors output", .format = "compressed-tensors",
    .plan = ct_plan, .run_task = run_task, .write = ct_write, .results = ct_results,
    .manifest_add = ct_manifest, .recipe_add = ct_recipe, .output_files = ct_output_files, .summary = ct_summary,
    .tensor_spans = ct_tensor_spans, .part_tensor = ct_part_tensor,
};

tm_status tm_ct_quantize(tm_file *in, const char *out_dir, const tm_ct_quantize_params *p,
                         tm_ct_quantize_result **out, tm_err *err) {
    *out = NULL;
    tm_ct_quantize_params defp = tm_ct_quantize_params_default();
    if (!p) p = &defp;
    ctjob cj;
    memset(&cj, 0, sizeof cj);
    cj.j.in = in;
    cj.j.p = p;
    pthread_mutex_init(&cj.j.prog_mu, NULL);
    pthread_mutex_init(&cj.j.alloc_mu, NULL);
    atomic_init(&cj.j.done_bytes, 0);
    tm__qpipe_opts o = TM__QPIPE_OPTS_OF(p, p->n_threads);
    o.shard_i = p->shard_index;
    o.shard_n = p->shard_count;
    tm_status s = tm__qpipe_run(&ct_writer, &cj, in, out_dir, &o, err);
    free(cj.ofiles);
    free(cj.qr.entries);
    free(cj.qr_of);
    tm_st_writer_free(cj.j.w);
    free(cj.stpath);
    for (int64_t k = 0; cj.names && k < cj.n_entries; k++) free(cj.names[k]);
    free(cj.names);
    free(cj.entries);
    free_bufs(&cj.j, cj.nt);
    free_plans(&cj.j);
    pthread_mutex_destroy(&cj.j.prog_mu);
    pthread_mutex_destroy(&cj.j.alloc_mu);
    if (s) tm_ct_quantize_result_free(cj.res);
    *out = s ? NULL : cj.res;
    return s;
}
