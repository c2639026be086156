/*
** qjob_impl.h: the compressed-tensors quantize job's own types, shared by its plan
** (qjob_plan.c: which tensor is quantized with which scheme, and the output entries) and its
** run and finish (qjob.c). Internal to src/job/.
*/
#ifndef TM_JOB_QJOB_IMPL_H
#define TM_JOB_QJOB_IMPL_H
#include "../core/core.h"
#include "srcread.h"

#include <pthread.h>
#include <stdatomic.h>

enum { CHUNK_TARGET_BYTES = 4 << 20 };  /* source bytes per task (about 1M f32 values) */

typedef enum { OUT_COPY = 0, OUT_PACK, OUT_FP8 } out_kind;

typedef struct plan_t {
    int64_t   src;            /* source tensor index                                          */
    out_kind  kind;
    tm_qspec  spec;
    char      reason[200];    /* why copied                                                    */
    int64_t   rows, cols;
    int64_t   n_params;       /* scale entries                                                 */
    int       pndim;
    int64_t   pshape[TM_MAX_DIMS];
    int64_t   e_codes, e_scale, e_shape, e_zp, e_copy; /* writer entry indices or -1           */
    uint64_t  row_bytes;      /* packed bytes per row of codes                                 */
    int64_t   rows_per_chunk;
    int64_t   first_task, n_tasks;
    float    *scale;          /* [n_params]                                                    */
    int32_t  *zp;             /* [n_params] or NULL (symmetric)                                */
    double   *param_l2;       /* [n_params] per-param sum of squared LSB error                 */
    int64_t  *param_n;
    tm_erracc *chunk_acc;     /* [n_tasks]                                                     */
    atomic_llong n_degenerate;/* units with a zero range (constant), given the fallback scale */
    atomic_llong chunks_done; /* the chunk that completes the tensor writes its params, sums its
                                 statistics and frees the per-param arrays: memory follows the
                                 tensors in flight, not the model                              */
    int       params_ready;   /* scale/zp/param arrays allocated (under job_t.alloc_mu)        */
    tm_errsum summary;        /* filled by finish_plan                                          */
    char     *module;         /* name without ".weight" (malloc'd)                             */
} plan_t;

typedef struct job_t {
    tm_file              *in;
    const tm_ct_quantize_params *p;
    plan_t               *plans;
    int64_t               n_plans;
    tm_st_writer         *w;
    int64_t               n_tasks;
    int64_t              *task_plan;  /* task -> plan index                                     */
    int64_t              *task_chunk; /* task -> chunk index within its plan                    */
    uint64_t              total_bytes;
    atomic_ullong         done_bytes;
    pthread_mutex_t       prog_mu;
    pthread_mutex_t       alloc_mu;
    float               **fbuf;       /* per thread: chunk as float32                           */
    float               **qbuf;       /* per thread: dequantized chunk                          */
    uint8_t             **cbuf;       /* per thread: codes one per byte                         */
    uint8_t             **pbuf;       /* per thread: packed codes                               */
    int64_t             **ibuf;       /* per thread: param index per element                    */
    size_t                buf_elems;
    tm__srcread           src;        /* pread of the sources (srcread.h)                       */
    const int            *shard_owner;/* a part (--shard): the part of each tensor, else NULL    */
    int                   shard_i;    /* this part                                              */
    struct tm__crclog    *crclog;     /* a part: its writes' CRC-32C (part_crc.h), else NULL    */
} job_t;

/* Plan every tensor of j->in (j->p, j->in set; j->plans allocated here, j->n_plans, each plan's
** kind, spec, reason, shape, module and writer entry indices; j->total_bytes): refuses schemes
** the layout cannot hold (TM_E_INVALID_ARG), an already-quantized input and, unless
** allow_empty, a plan that quantizes nothing (TM_E_INVALID_ARG / TM_E_UNSUPPORTED, saying why).
** *entries / *names (n_entries slots, *ne used; names malloc'd) are the safetensors writer's
** entries in tensor order (ctensors_write.h), NULL when the error came before them. */
tm_status tm__qjob_plan(job_t *j, tm_st_entry **entries, char ***names, int64_t *n_entries, int64_t *ne,
                        tm_err *err);
/* Same compressed-tensors config group: code dtype, symmetry, granularity and its sizes. */
int tm__qjob_same_scheme(const tm_qspec *a, const tm_qspec *b);
/* An embedding's name (embed_tokens, tok_embeddings, wte., word_embeddings, token_embd, ...). */
int tm__qjob_is_embedding(const char *name);
/* 1 when a copy reason says --include, --exclude or a recipe's ignore left the tensor out. */
int tm__qjob_filtered_by_option(const char *reason);
/* Runtime notes on the plan (vLLM: int codes with block scales; fused q/k/v, gate/up shards
** with different schemes) appended to r->warnings. */
void tm__qjob_runtime_warnings(const job_t *j, tm_ct_quantize_result *r);

#endif
