/* gguf_job.c: `tensormorph quantize IN -o OUT.gguf --type T`: the GGUF quantize job.
**   1. plan: put the tensors in llama-quantize's order and choose each one's ggml type with
**      llama-quantize's rules (llama.cpp@c392e509 src/llama-quant.cpp: which tensors are
**      quantized at all, llama_tensor_get_type's per-tensor mixture, the fallbacks for rows
**      that are not a multiple of the block); every output size and offset is then fixed;
**   2. run: the shared deterministic pool (src/core/pool.c) takes row chunks of a tensor and,
**      piece by piece (a few rows, cache-sized),
**      convert them to float32 (F32 sources are read in place), quantize them with the
**      byte-identical block quantizers (src/quant/ggml_quant.c) and measure their error
**      against the dequantized values of the bytes written (Q8_0, Q4_0 and Q6_K compute those
**      from their codes in the kernel; the others dequantize the piece); one pwrite per chunk
**      at its offset;
**   3. finish (the one driver, qpipeline.c, and pipeline.c): fsync the file built beside OUT, write "<out>.manifest.json" beside
**      it, then under OUT.lock rename the file and its manifest into place.
** Rules with their sources: docs/gguf-quantize.md. */
#include "../core/core.h"
#include "../core/fsutil.h"
#include "../core/pool.h"
#include "../quant/ggml_quant_impl.h"
#include "pipeline.h"
#include "tensormorph/ggml_quant.h"
#include "tensormorph/gguf_job.h"
#include "tensormorph/gguf_write.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { CHUNK_TARGET_VALUES = 1 << 20, COPY_PIECE = 16 << 20, PIECE_VALUES = 8192 };

/* ---------------------------------------------------------------------------------------- */
/* File types                                                                                */
/* ---------------------------------------------------------------------------------------- */

static const struct ftype_row {
    const char *name; int ftype; int type;
} ftypes[] = {
    {"Q4_0", TM_FTYPE_Q4_0, TM_GGML_Q4_0},       {"Q4_1", TM_FTYPE_Q4_1, TM_GGML_Q4_1},
    {"Q5_0", TM_FTYPE_Q5_0, TM_GGML_Q5_0},       {"Q5_1", TM_FTYPE_Q5_1, TM_GGML_Q5_1},
    {"Q8_0", TM_FTYPE_Q8_0, TM_GGML_Q8_0},       {"IQ4_NL", TM_FTYPE_IQ4_NL, TM_GGML_IQ4_NL},
    {"Q2_K", TM_FTYPE_Q2_K, TM_GGML_Q2_K},       {"Q3_K_S", TM_FTYPE_Q3_K_S, TM_GGML_Q3_K},
    {"Q3_K_M", TM_FTYPE_Q3_K_M, TM_GGML_Q3_K},   {"Q3_K_L", TM_FTYPE_Q3_K_L, TM_GGML_Q3_K},
    {"Q4_K_S", TM_FTYPE_Q4_K_S, TM_GGML_Q4_K},   {"Q4_K_M", TM_FTYPE_Q4_K_M, TM_GGML_Q4_K},
    {"Q5_K_S", TM_FTYPE_Q5_K_S, TM_GGML_Q5_K},   {"Q5_K_M", TM_FTYPE_Q5_K_M, TM_GGML_Q5_K},
    {"Q6_K", TM_FTYPE_Q6_K, TM_GGML_Q6_K},       {"F16", TM_FTYPE_F16, TM_GGML_F16},
    {"BF16", TM_FTYPE_BF16, TM_GGML_BF16},
    /* llama-quantize's aliases (its QUANT_OPTIONS table) */
    {"Q3_K", TM_FTYPE_Q3_K_M, TM_GGML_Q3_K},     {"Q4_K", TM_FTYPE_Q4_K_M, TM_GGML_Q4_K},
    {"Q5_K", TM_FTYPE_Q5_K_M, TM_GGML_Q5_K},
};
#define N_FTYPES (sizeof ftypes / sizeof ftypes[0])

static int ieq(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        char x = *a >= 'a' && *a <= 'z' ? (char)(*a - 32) : *a;
        char y = *b >= 'a' && *b <= 'z' ? (char)(*b - 32) : *b;
        if (x != y) return 0;
    }
    return *a == *b;
}

int tm_gguf_ftype_from_name(const char *name) {
    for (size_t i = 0; name && i < N_FTYPES; i++)
        if (ieq(name, ftypes[i].name)) return ftypes[i].ftype;
    return -1;
}

const char *tm_gguf_ftype_name(int ftype) {
    for (size_t i = 0; i < N_FTYPES; i++)
        if (ftypes[i].ftype == ftype) return ftypes[i].name;
    return "?";
}

int tm_gguf_ftype_default_type(int ftype) {
    for (size_t i = 0; i < N_FTYPES; i++)
        if (ftypes[i].ftype == ftype) return ftypes[i].type;
    return -1;
}

tm_gguf_quantize_params tm_gguf_quantize_params_default(void) {
    tm_gguf_quantize_params p;
    memset(&p, 0, sizeof p);
    p.ftype = TM_FTYPE_Q8_0;
    p.n_threads = 0; /* tm_usable_cpus() */
    return p;
}

void tm_gguf_quantize_result_free(tm_gguf_quantize_result *r) {
    if (!r) return;
    free(r->tensors);
    free(r->manifest_json);
    free(r->manifest_path);
    free(r);
}

/* ---------------------------------------------------------------------------------------- */
/* Plan                                                                                      */
/* ---------------------------------------------------------------------------------------- */

typedef struct gplan {
    int64_t  src;           /* tensor index in the input                                  */
    const char *name;
    int      src_type, out_type;
    int      quantize;      /* 1: convert/quantize; 0: copy the bytes                     */
    int      n_dims;        /* as written (the source's dims, 1 for a scalar)             */
    int64_t  ne[4];
    int64_t  rows;          /* ne[1] * ne[2] * ne[3]                                      */
    int64_t  rows_per_chunk, n_chunks;
    char     reason[240];
    double   *c_x2, *c_e2, *c_max; /* per chunk: sum x^2, sum err^2, max |err|             */
} gplan;

/* llama-quantize's state while choosing types (its quantize_state_impl). */
typedef struct qstate {
    int ftype, falcon, n_gqa, n_expert, is_70b, has_output;
    int n_attention_wv, i_attention_wv;
    int n_ffn_down, i_ffn_down, n_ffn_gate, i_ffn_gate, n_ffn_up, i_ffn_up;
    int n_fallback;
} qstate;

static int contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }
static int blck(int type) {
    const tm_ggml_type_info *ti = tm_ggml_type_info_get(type);
    return ti ? (int)ti->block_size : 0;
}

static const char *tname(int type) {
    const tm_ggml_type_info *ti = tm_ggml_type_info_get(type);
    return ti ? ti->name : "?";
}

/* The ggml type of a source tensor; -1 when it has none (a non-GGUF quantized tensor). */
static int src_ggml_type(const tm_tensor *t) {
    if (t->quant) return t->quant->ggml_type > 0 ? t->quant->ggml_type : -1;
    switch (t->dtype) {
    case TM_F32: return TM_GGML_F32;
    case TM_F16: return TM_GGML_F16;
    case TM_BF16: return TM_GGML_BF16;
    case TM_F64: return TM_GGML_F64;
    case TM_I8: return TM_GGML_I8;
    case TM_I16: return TM_GGML_I16;
    case TM_I32: return TM_GGML_I32;
    case TM_I64: return TM_GGML_I64;
    default: return -1;
    }
}

/* llama-quantize's tensor order (its weight_name_comparer): by the layer number of a
** "blk.N." prefix (-1 without one), then by name (byte order). */
static int layer_of(const char *name) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    const char *p = name + 4;
    if (*p < '0' || *p > '9') return -1;
    long v = 0;
    while (*p >= '0' && *p <= '9' && v < 100000000) v = v * 10 + (*p++ - '0');
    return *p == '.' ? (int)v : -1;
}

static int cmp_plan(const void *a, const void *b) {
    const gplan *x = a, *y = b;
    int la = layer_of(x->name), lb = layer_of(y->name);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

/* The (layer, layer count) a per-layer rule uses: its counter, or for mixture-of-experts
** models the layer parsed from the name (llama-quantize's layer_info). */
static tm_status layer_info(const qstate *qs, int i, int n, const char *name, int *il, int *nl,
                            tm_err *err) {
    *il = i;
    *nl = n;
    if (qs->n_expert > 1) {
        int l = layer_of(name);
        if (l < 0) return tm__err_set(err, TM_E_UNSUPPORTED, -1, "tensor '%s': cannot determine its layer", name);
        *il = l;
    }
    return TM_OK;
}

#define SETR(...) snprintf(reason, rn, __VA_ARGS__)

/* llama_tensor_get_type for the file types this job makes (no importance matrix). `reason`
** gets the rule that decided. *refused = 1 where the reference gives up on the tensor
** ("Unsupported tensor size encountered"). */
static tm_status get_type(qstate *qs, int new_type, const char *name, int64_t ne0, int *out,
                          char *reason, size_t rn, int *refused, tm_err *err) {
    const int ft = qs->ftype;
    *refused = 0;
    SETR("default type of %s", tm_gguf_ftype_name(ft));
    if (strcmp(name, "output.weight") == 0 || (!qs->has_output && strcmp(name, "token_embd.weight") == 0)) {
        int64_t qk = blck(new_type);
        if (qs->falcon || ne0 % qk != 0) {
            new_type = TM_GGML_Q8_0;
            SETR("%s: row of %lld is not a multiple of %lld (or falcon): Q8_0",
                 strcmp(name, "output.weight") ? "tied token embedding (the output)" : "output",
                 (long long)ne0, (long long)qk);
        } else if (new_type != TM_GGML_Q8_0) {
            new_type = TM_GGML_Q6_K;
            SETR("%s: Q6_K", strcmp(name, "output.weight") ? "tied token embedding (the output)" : "output");
        }
    } else if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "per_layer_token_embd.weight") == 0) {
        /* only the IQ1/IQ2/IQ3 and TQ file types change it */
    } else if (contains(name, "attn_v.weight")) {
        int i = qs->i_attention_wv;
        if (ft == TM_FTYPE_Q2_K) {
            new_type = qs->n_gqa >= 4 ? TM_GGML_Q4_K : TM_GGML_Q3_K;
            SETR("attn_v in Q2_K (n_gqa %d): %s", qs->n_gqa, tname(new_type));
        } else if (ft == TM_FTYPE_Q3_K_M) {
            new_type = i < 2 ? TM_GGML_Q5_K : TM_GGML_Q4_K;
            SETR("attn_v #%d in Q3_K_M: %s", i, tname(new_type));
        } else if (ft == TM_FTYPE_Q3_K_L) {
            new_type = TM_GGML_Q5_K;
            SETR("attn_v in Q3_K_L: Q5_K");
        } else if (ft == TM_FTYPE_IQ4_NL && qs->n_gqa >= 4) {
            new_type = TM_GGML_Q5_K;
            SETR("attn_v in IQ4_NL (n_gqa %d): Q5_K", qs->n_gqa);
        } else if ((ft == TM_FTYPE_Q4_K_M || ft == TM_FTYPE_Q5_K_M) && use_more_bits(i, qs->n_attention_wv)) {
            new_type = TM_GGML_Q6_K;
            SETR("attn_v #%d of %d in %s (use_more_bits): Q6_K", i, qs->n_attention_wv, tm_gguf_ftype_name(ft));
        } else if (ft == TM_FTYPE_Q4_K_S && i < 4) {
            new_type = TM_GGML_Q5_K;
            SETR("attn_v #%d in Q4_K_S: Q5_K", i);
        }
        if (qs->is_70b && (new_type == TM_GGML_Q3_K || new_type == TM_GGML_Q4_K)) {
            new_type = TM_GGML_Q5_K;
            SETR("attn_v of a 70B model: Q5_K");
        }
        if (qs->n_expert == 8) {
            new_type = TM_GGML_Q8_0;
            SETR("attn_v of an 8-expert model: Q8_0");
        }
        ++qs->i_attention_wv;
    } else if (contains(name, "attn_k.weight")) {
        if (qs->n_expert == 8) {
            new_type = TM_GGML_Q8_0;
            SETR("attn_k of an 8-expert model: Q8_0");
        }
    } else if (contains(name, "attn_q.weight")) {
        /* only IQ3_XS / IQ2_M change it */
    } else if (contains(name, "ffn_down")) {
        int il, nl;
        tm_status s = layer_info(qs, qs->i_ffn_down, qs->n_ffn_down, name, &il, &nl, err);
        if (s) return s;
        if (ft == TM_FTYPE_Q2_K) {
            new_type = TM_GGML_Q3_K;
            SETR("ffn_down in Q2_K: Q3_K");
        } else if (ft == TM_FTYPE_Q3_K_M) {
            new_type = il < nl / 16 ? TM_GGML_Q5_K : !qs->falcon || use_more_bits(il, nl) ? TM_GGML_Q4_K : TM_GGML_Q3_K;
            SETR("ffn_down layer %d of %d in Q3_K_M: %s", il, nl, tname(new_type));
        } else if (ft == TM_FTYPE_Q3_K_L) {
            new_type = qs->falcon ? TM_GGML_Q4_K : TM_GGML_Q5_K;
            SETR("ffn_down in Q3_K_L: %s", tname(new_type));
        } else if (ft == TM_FTYPE_Q4_K_M) {
            if (qs->falcon) {
                new_type = il < nl / 16 ? TM_GGML_Q6_K : use_more_bits(il, nl) ? TM_GGML_Q5_K : TM_GGML_Q4_K;
                SETR("ffn_down layer %d of %d in Q4_K_M (falcon): %s", il, nl, tname(new_type));
            } else if (use_more_bits(il, nl)) {
                new_type = TM_GGML_Q6_K;
                SETR("ffn_down layer %d of %d in Q4_K_M (use_more_bits): Q6_K", il, nl);
            }
        } else if (il < nl / 8 && ft == TM_FTYPE_IQ4_NL) {
            new_type = TM_GGML_Q5_K;
            SETR("ffn_down layer %d of %d in IQ4_NL: Q5_K", il, nl);
        } else if (ft == TM_FTYPE_Q5_K_M && use_more_bits(il, nl)) {
            new_type = TM_GGML_Q6_K;
            SETR("ffn_down layer %d of %d in Q5_K_M (use_more_bits): Q6_K", il, nl);
        } else if (ft == TM_FTYPE_Q4_K_S && !qs->falcon && il < nl / 8) {
            new_type = TM_GGML_Q5_K;
            SETR("ffn_down layer %d of %d in Q4_K_S: Q5_K", il, nl);
        }
        ++qs->i_ffn_down;
    } else if (contains(name, "attn_output.weight")) {
        if (!qs->falcon) {
            if (qs->n_expert == 8) {
                if (ft == TM_FTYPE_Q2_K || ft == TM_FTYPE_Q3_K_S || ft == TM_FTYPE_Q3_K_M ||
                    ft == TM_FTYPE_IQ4_NL || ft == TM_FTYPE_Q4_K_S || ft == TM_FTYPE_Q4_K_M) {
                    new_type = TM_GGML_Q5_K;
                    SETR("attn_output of an 8-expert model: Q5_K");
                }
            } else {
                if (ft == TM_FTYPE_Q2_K) new_type = TM_GGML_Q3_K;
                else if (ft == TM_FTYPE_Q3_K_M) new_type = TM_GGML_Q4_K;
                else if (ft == TM_FTYPE_Q3_K_L) new_type = TM_GGML_Q5_K;
                if (ft == TM_FTYPE_Q2_K || ft == TM_FTYPE_Q3_K_M || ft == TM_FTYPE_Q3_K_L)
                    SETR("attn_output in %s: %s", tm_gguf_ftype_name(ft), tname(new_type));
            }
        } else if (ft == TM_FTYPE_Q3_K_L) {
            new_type = TM_GGML_Q4_K;
            SETR("attn_output in Q3_K_L (falcon): Q4_K");
        }
    } else if (contains(name, "attn_qkv.weight")) {
        if (ft == TM_FTYPE_Q3_K_M || ft == TM_FTYPE_Q3_K_L) new_type = TM_GGML_Q4_K;
        else if (ft == TM_FTYPE_Q4_K_M) new_type = TM_GGML_Q5_K;
        else if (ft == TM_FTYPE_Q5_K_M) new_type = TM_GGML_Q6_K;
        if (ft == TM_FTYPE_Q3_K_M || ft == TM_FTYPE_Q3_K_L || ft == TM_FTYPE_Q4_K_M || ft == TM_FTYPE_Q5_K_M)
            SETR("attn_qkv in %s: %s", tm_gguf_ftype_name(ft), tname(new_type));
    } else if (contains(name, "ffn_gate")) {
        ++qs->i_ffn_gate; /* only IQ3_XS changes it */
    } else if (contains(name, "ffn_up")) {
        ++qs->i_ffn_up;   /* only IQ3_XS changes it */
    }
    /* rows that are not a multiple of the chosen type's block */
    int64_t qk = blck(new_type);
    if (ne0 % qk != 0) {
        int fb;
        switch (new_type) {
        case TM_GGML_Q2_K: case TM_GGML_Q3_K: fb = TM_GGML_IQ4_NL; break;
        case TM_GGML_Q4_K: fb = TM_GGML_Q5_0; break;
        case TM_GGML_Q5_K: fb = TM_GGML_Q5_1; break;
        case TM_GGML_Q6_K: fb = TM_GGML_Q8_0; break;
        default: fb = -1; break;
        }
        size_t k = strlen(reason);
        if (fb < 0) {
            *refused = 1;
            snprintf(reason + k, rn - k, "; row of %lld is not a multiple of %lld and llama-quantize has no fallback for %s",
                     (long long)ne0, (long long)qk, tname(new_type));
            new_type = TM_GGML_F16;
        } else {
            int f2 = ne0 % blck(fb) != 0 ? TM_GGML_F16 : fb;
            snprintf(reason + k, rn - k, "; row of %lld is not a multiple of %lld: fallback %s%s",
                     (long long)ne0, (long long)qk, tname(fb), f2 == fb ? "" : ", not a multiple of its block either: F16");
            new_type = f2;
            ++qs->n_fallback; /* refused rows are counted once, by the caller (n_refused) */
        }
    }
    *out = new_type;
    return TM_OK;
}

/* Whether llama-quantize quantizes this tensor at all (its checks before the type choice). */
static const char *not_quantized_reason(const char *name, int n_dims, int leave_output) {
    static const char *const never[] = {
        "_norm.weight", "ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj",
        "ssm_conv1d.weight", "shortconv.conv.weight", "time_mix_first.weight",
        "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight",
        "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight",
        "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
        "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight",
        "attn_rel_b.weight", ".position_embd."};
    if (!tm__ends_with(name, "weight")) return "name does not end in 'weight'";
    if (n_dims < 2) return "1-D tensor";
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (contains(name, never[i])) return "kept by llama-quantize's name rules (norms, gates, small special tensors)";
    if (leave_output && strcmp(name, "output.weight") == 0) return "--leave-output-tensor";
    if (strcmp(name, "position_embd.weight") == 0 || strcmp(name, "token_types.weight") == 0)
        return "positional embeddings / token types stay unquantized";
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Run                                                                                       */
/* ---------------------------------------------------------------------------------------- */

typedef struct gjob {
    tm_file              *in;
    const tm_gguf_quantize_params *p;
    gplan                *plans;
    int64_t               n;
    tm_gguf_writer       *w;
    pthread_mutex_t       mu;                   /* serialises the progress callback       */
    int64_t               n_tasks;              /* every chunk of every tensor, in file order */
    int64_t              *task_plan;            /* task -> plan; its chunk: task - first_task */
    int64_t              *first_task;           /* plan -> its first task                 */
    struct wbuf          *bufs;                 /* per worker thread                      */
    uint64_t              total_bytes, done_bytes;
    /* the plan's state, kept from plan to done (the driver's phases, pipeline.h) */
    int                   def_type, def_quantized, nt;
    regex_t              *re;                   /* --tensor-type patterns, n_re compiled  */
    int64_t               n_re, n_refused;
    tm_gguf_kvlist       *kv;
    tm_gguf_wtensor      *wt;
    qstate                qs;
    tm_gguf_quantize_result      *res;
    const int            *shard_owner;          /* a part (--shard, part.h): each tensor's part */
    int                   shard_i;
    int64_t              *plan_of;              /* parts: source tensor -> its plan (spans)  */
    const char           *target;               /* the file the writer writes (pipeline.h)   */
    const char          **ofiles;               /* gguf_output_files                         */
} gjob;

/* Progress: the callback runs under the job's lock, so it is never called concurrently. */
static void report(gjob *j, uint64_t add) {
    pthread_mutex_lock(&j->mu);
    j->done_bytes += add;
    if (j->p->progress) j->p->progress(j->p->progress_ud, "quantize", j->done_bytes, j->total_bytes);
    pthread_mutex_unlock(&j->mu);
}

typedef struct wbuf { float *x, *dq; uint8_t *q; size_t cap_vals, cap_bytes; } wbuf;

static tm_status do_copy_chunk(gjob *j, gplan *pl, int64_t c, wbuf *b, tm_err *err) {
    uint64_t nb = tm_gguf_writer_tensor_bytes(j->w, pl - j->plans);
    uint64_t off = (uint64_t)c * COPY_PIECE, k = nb - off < COPY_PIECE ? nb - off : COPY_PIECE;
    (void)b;
    const void *src;
    tm_status s = tm_tensor_data(j->in, pl->src, off, k, &src, err);
    if (!s) s = tm_gguf_writer_write(j->w, pl - j->plans, off, src, (size_t)k, err);
    tm_tensor_release(j->in, pl->src, off, k);
    if (!s) report(j, k);
    return s;
}

/* Rows per piece: the unit a chunk is quantized and measured in, small enough for the caches
** (about PIECE_VALUES values), a multiple of 8 values so every piece but a chunk's last starts
** on error lane 0 (ggml_quant_impl.h): the error sums are those of the whole chunk in one call,
** whatever the piece size. A chunk of fewer rows is one piece. */
static int64_t piece_rows(int64_t ne0, int64_t rows_per_chunk) {
    int64_t rp = ne0 > 0 && ne0 < PIECE_VALUES ? PIECE_VALUES / ne0 : 1;
    const int64_t m = ne0 % 8 == 0 ? 1 : ne0 % 4 == 0 ? 2 : ne0 % 2 == 0 ? 4 : 8;
    rp = (rp + m - 1) / m * m;
    return rp < rows_per_chunk ? rp : rows_per_chunk;
}

/* The old per-row calls, for the message of a piece that failed: the first failing row's error
** exactly as before (row-relative block and element numbers). */
static tm_status row_error(gjob *j, gplan *pl, const float *x, int64_t p0, int64_t p1, uint8_t *q,
                           tm_status s0, tm_err *err) {
    const int64_t ne0 = pl->ne[0];
    const tm_tensor *t = tm_file_tensor(j->in, pl->src);
    tm_err e0 = *err;
    for (int64_t r = p0; r < p1; r++) {
        int64_t bad;
        tm_status s = tm__gq_quantize_row_err(pl->out_type, x + (r - p0) * ne0, ne0, q, NULL, NULL, &bad, j->p->kernels, err);
        if (s) {
            tm__err_prefix(err, "%s: tensor '%s' (%s): row %lld", tm_file_path(j->in, t->file_index), pl->name,
                           tname(pl->out_type), (long long)r);
            return s;
        }
    }
    *err = e0;
    return s0;
}

/* One chunk of rows: piece by piece, convert (unless read in place), quantize into the chunk's
** output buffer and add the error of what was written; then one write, and the source pages are
** released. */
static tm_status do_quant_chunk(gjob *j, gplan *pl, int64_t c, wbuf *b, tm_err *err) {
    const int64_t ne0 = pl->ne[0];
    const int64_t r0 = c * pl->rows_per_chunk;
    const int64_t r1 = r0 + pl->rows_per_chunk < pl->rows ? r0 + pl->rows_per_chunk : pl->rows;
    const int64_t nv = (r1 - r0) * ne0;
    uint64_t rb = 0;
    tm_ggml_row_bytes(pl->out_type, ne0, &rb, NULL); /* the plan fitted ne0 to the type's block */
    const int64_t prow = piece_rows(ne0, pl->rows_per_chunk);
    const size_t pvals = (size_t)(prow * ne0), nbytes = (size_t)(rb * (uint64_t)(r1 - r0));
    if (pvals > b->cap_vals) {
        float *x = realloc(b->x, pvals * sizeof(float));
        if (x) b->x = x;
        float *dq = realloc(b->dq, pvals * sizeof(float));
        if (dq) b->dq = dq;
        if (!x || !dq) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        b->cap_vals = pvals;
    }
    if (nbytes > b->cap_bytes) {
        uint8_t *q = realloc(b->q, nbytes ? nbytes : 1);
        if (!q) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        b->q = q;
        b->cap_bytes = nbytes;
    }
    const tm_tensor *t = tm_file_tensor(j->in, pl->src);
    const uint64_t esz = t->n_elems > 0 ? t->n_bytes / (uint64_t)t->n_elems : 0;
    const void *mapped = NULL;
    tm_status s;
    if (!(t->dtype == TM_F32 && !t->big_endian && !t->fortran_order &&
          tm_tensor_data(j->in, pl->src, (uint64_t)(r0 * ne0) * 4, (uint64_t)nv * 4, &mapped, NULL) == TM_OK &&
          ((uintptr_t)mapped & 3u) == 0))
        mapped = NULL; /* else aligned little-endian float32 in the map: read in place, no copy */
    tm__gq_err acc;
    memset(&acc, 0, sizeof acc);
    for (int64_t p0 = r0; p0 < r1; p0 += prow) {
        const int64_t p1 = p0 + prow < r1 ? p0 + prow : r1;
        const float *x = b->x;
        if (mapped) {
            x = (const float *)mapped + (p0 - r0) * ne0;
        } else {
            s = tm_tensor_read_f32(j->in, pl->src, p0 * ne0, (p1 - p0) * ne0, b->x, err);
            if (s) {
                tm__err_prefix(err, "tensor '%s'", pl->name);
                return s;
            }
        }
        /* the piece's rows are contiguous in x and in the output, and blocks are independent:
        ** one call quantizes them all */
        uint8_t *q = b->q + (size_t)((uint64_t)(p0 - r0) * rb);
        s = tm__gq_quantize_row_err(pl->out_type, x, (p1 - p0) * ne0, q, b->dq, &acc, NULL, j->p->kernels, err);
        if (s) return row_error(j, pl, x, p0, p1, q, s, err);
    }
    s = tm_gguf_writer_write(j->w, pl - j->plans, rb * (uint64_t)r0, b->q, nbytes, err);
    if (s) return s;
    tm__gq_err_total(&acc, &pl->c_x2[c], &pl->c_e2[c], &pl->c_max[c]);
    /* keep the resident set bounded: these source pages are done */
    tm_tensor_release(j->in, pl->src, (uint64_t)(r0 * ne0) * esz, (uint64_t)nv * esz);
    report(j, esz * (uint64_t)nv);
    return TM_OK;
}

/* One task of the shared deterministic pool (src/core/pool.c): chunk `task` of the file, in
** tensor order. The pool keeps the error of the lowest-numbered failed task, so the first bad
** row of the file is reported whatever the thread count. */
static tm_status run_item(void *ctx, int64_t task, int thread, tm_err *err) {
    gjob *j = ctx;
    const int64_t pi = j->task_plan[task], ci = task - j->first_task[pi];
    gplan *pl = &j->plans[pi];
    if (j->shard_owner && j->shard_owner[pl->src] != j->shard_i) return TM_OK; /* another part's */
    wbuf *b = &j->bufs[thread];
    return pl->quantize ? do_quant_chunk(j, pl, ci, b, err) : do_copy_chunk(j, pl, ci, b, err);
}

/* ---------------------------------------------------------------------------------------- */
/* The job                                                                                   */
/* ---------------------------------------------------------------------------------------- */

static void free_plans(gplan *pl, int64_t n) {
    for (int64_t i = 0; pl && i < n; i++) {
        free(pl[i].c_x2);
        free(pl[i].c_e2);
        free(pl[i].c_max);
    }
    free(pl);
}

/* hparams of the input's architecture from its metadata ("<arch>.block_count", ...). */
static void read_hparams(const tm_gguf_kvlist *kv, qstate *qs, int *n_layer) {
    char *arch = tm_gguf_kvlist_get_str(kv, "general.architecture");
    char key[256];
    int found;
    *n_layer = 0;
    if (arch) {
        qs->falcon = strcmp(arch, "falcon") == 0;
        snprintf(key, sizeof key, "%s.block_count", arch);
        *n_layer = (int)tm_gguf_kvlist_get_int(kv, key, NULL);
        snprintf(key, sizeof key, "%s.attention.head_count", arch);
        int64_t nh = tm_gguf_kvlist_get_int(kv, key, NULL);
        snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
        int64_t nkv = tm_gguf_kvlist_get_int(kv, key, &found);
        if (!found) nkv = nh;
        qs->n_gqa = nkv > 0 ? (int)(nh / nkv) : 0;
        snprintf(key, sizeof key, "%s.expert_count", arch);
        qs->n_expert = (int)tm_gguf_kvlist_get_int(kv, key, NULL);
        /* llama's LLM_TYPE_70B: 80 layers with grouped-query attention */
        qs->is_70b = strcmp(arch, "llama") == 0 && *n_layer == 80 && nh != nkv;
    }
    free(arch);
}

/* The plan (the driver's phases: pipeline.h, tm__qwriter): pp has checked and locked OUT; the
** file is opened at pp->stage with every tensor's type, size and offset fixed. */
static tm_status gguf_plan(void *ctx, tm__pipe *pp, int64_t *n_tasks, tm_err *err) {
    gjob *j = ctx;
    tm_file *in = j->in;
    const tm_gguf_quantize_params *p = j->p;
    const int def_type = j->def_type, def_quantized = def_type != TM_GGML_F16 && def_type != TM_GGML_BF16;
    j->def_quantized = def_quantized;
    tm_status s = TM_OK;
    if (p->n_tt > 0) {
        j->re = tm__calloc((size_t)p->n_tt, sizeof *j->re);
        if (!j->re) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        for (; j->n_re < p->n_tt; j->n_re++) {
            int64_t k = j->n_re;
            int rc = regcomp(&j->re[k], p->tt_patterns[k], REG_EXTENDED | REG_NOSUB);
            if (rc) {
                char eb[128];
                regerror(rc, &j->re[k], eb, sizeof eb);
                return tm__err_set(err, TM_E_INVALID_ARG, -1, "--tensor-type '%s': %s", p->tt_patterns[k], eb);
            }
            if (!tm_gq_writable(p->tt_types[k])) {
                regfree(&j->re[k]);
                return tm__err_set(err, TM_E_INVALID_ARG, -1, "--tensor-type '%s': type %s cannot be written",
                                   p->tt_patterns[k], tname(p->tt_types[k]));
            }
        }
    }
    regex_t *re = j->re;
    const int64_t n_re = j->n_re;
    /* metadata: a GGUF input's, entry for entry */
    if (tm_file_format(in) == TM_FMT_GGUF) s = tm_gguf_kvlist_read(tm_file_path(in, 0), &j->kv, err);
    else if (!(j->kv = tm_gguf_kvlist_new())) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    tm_gguf_kvlist *kv = j->kv;
    /* ---- plan ---- */
    const int64_t n = tm_file_n_tensors(in);
    gplan *plans = s ? NULL : tm__calloc((size_t)(n ? n : 1), sizeof(gplan));
    if (!s && !plans) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    j->plans = plans;
    j->n = n;
    qstate qs;
    memset(&qs, 0, sizeof qs);
    qs.ftype = p->ftype;
    int n_layer = 0;
    if (!s) read_hparams(kv, &qs, &n_layer);
    for (int64_t i = 0; i < n && !s; i++) {
        const tm_tensor *t = tm_file_tensor(in, i);
        gplan *pl = &plans[i];
        pl->src = i;
        pl->name = t->name;
        pl->src_type = src_ggml_type(t);
        if (pl->src_type < 0)
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: tensor '%s': %s cannot be written to GGUF",
                            tm_file_path(in, t->file_index), t->name,
                            t->quant ? "a quantized tensor of this layout" : tm_dtype_get(t->dtype)->name);
        else if (t->ndim > 4)
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: tensor '%s' has %d dims (GGUF holds at most 4)",
                            tm_file_path(in, t->file_index), t->name, t->ndim);
        if (s) break;
        pl->n_dims = t->ndim ? t->ndim : 1;
        for (int d = 0; d < 4; d++) pl->ne[d] = 1;
        for (int d = 0; d < t->ndim; d++) pl->ne[d] = t->shape[t->ndim - 1 - d]; /* ne = reversed shape */
        pl->rows = pl->ne[1] * pl->ne[2] * pl->ne[3];
        if (strcmp(t->name, "output.weight") == 0) qs.has_output = 1;
        if (contains(t->name, "attn_v.weight") || contains(t->name, "attn_qkv.weight") ||
            contains(t->name, "attn_kv_b.weight"))
            qs.n_attention_wv++;
    }
    if (!s) qsort(plans, (size_t)n, sizeof *plans, cmp_plan);
    if (!s && n_layer <= 0) /* no hparams (safetensors input): count the ffn_down tensors */
        for (int64_t i = 0; i < n; i++) n_layer += contains(plans[i].name, "ffn_down") ? 1 : 0;
    qs.n_ffn_down = qs.n_ffn_gate = qs.n_ffn_up = n_layer;
    int64_t n_refused = 0;
    for (int64_t i = 0; i < n && !s; i++) {
        gplan *pl = &plans[i];
        int nd = pl->n_dims; /* ggml_n_dims: trailing dims of 1 do not count */
        while (nd > 1 && pl->ne[nd - 1] == 1) nd--;
        const char *why = not_quantized_reason(pl->name, nd, p->leave_output_tensor);
        int new_type = pl->src_type, refused = 0;
        if (why) {
            snprintf(pl->reason, sizeof pl->reason, "%s", why);
        } else {
            new_type = def_type;
            snprintf(pl->reason, sizeof pl->reason, "%s", p->pure ? "--pure" : "default type");
            if (!p->pure && def_quantized) {
                int nf = qs.n_fallback;
                s = get_type(&qs, new_type, pl->name, pl->ne[0], &new_type, pl->reason, sizeof pl->reason, &refused, err);
                if (s) break;
                if (qs.n_fallback == nf && !refused) {
                    for (int64_t k = 0; k < n_re; k++)
                        if (regexec(&re[k], pl->name, 0, NULL, 0) == 0 && p->tt_types[k] != new_type) {
                            new_type = p->tt_types[k];
                            snprintf(pl->reason, sizeof pl->reason, "--tensor-type %s=%s", p->tt_patterns[k], tname(new_type));
                        }
                }
            }
            /* --pure, an override or an F16/BF16 file type may pick a type the row cannot hold */
            if (!refused && pl->ne[0] % blck(new_type) != 0) {
                size_t k = strlen(pl->reason);
                snprintf(pl->reason + k, sizeof pl->reason - k, "; row of %lld is not a multiple of the %s block (%d)",
                         (long long)pl->ne[0], tname(new_type), blck(new_type));
                new_type = TM_GGML_F16;
                refused = 1;
            }
            if (refused) {
                n_refused++;
                if (p->strict) {
                    s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: tensor '%s': %s (--strict)",
                                    tm_file_path(in, 0), pl->name, pl->reason);
                    break;
                }
                size_t k = strlen(pl->reason);
                snprintf(pl->reason + k, sizeof pl->reason - k, ": kept in F16");
            }
        }
        pl->out_type = new_type;
        pl->quantize = pl->src_type != new_type;
        if (pl->quantize && pl->src_type != TM_GGML_F32 && pl->src_type != TM_GGML_F16 && pl->src_type != TM_GGML_BF16)
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1,
                            "%s: tensor '%s': requantizing from %s is not supported (llama-quantize refuses it too)",
                            tm_file_path(in, 0), pl->name, tname(pl->src_type));
    }
    j->qs = qs;
    j->n_refused = n_refused;
    /* ---- writer ---- */
    if (!s) s = tm_gguf_kvlist_set_u32(kv, "general.quantization_version", 2, err);
    if (!s) s = tm_gguf_kvlist_set_u32(kv, "general.file_type", (uint32_t)p->ftype, err);
    if (!s) {
        tm_gguf_kvlist_remove(kv, "split.no");
        tm_gguf_kvlist_remove(kv, "split.count");
        tm_gguf_kvlist_remove(kv, "split.tensors.count");
    }
    tm_gguf_wtensor *wt = s ? NULL : tm__calloc((size_t)(n ? n : 1), sizeof *wt);
    if (!s && !wt) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    j->wt = wt;
    for (int64_t i = 0; i < n && !s; i++) {
        wt[i].name = plans[i].name;
        wt[i].type = plans[i].out_type;
        wt[i].n_dims = plans[i].n_dims;
        memcpy(wt[i].ne, plans[i].ne, sizeof wt[i].ne);
    }
    if (!s && pp->shard_n) { /* a part: only its own tensors (part.h) */
        j->shard_owner = pp->tensor_owner;
        j->shard_i = pp->shard_i;
        if (p->source) s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "--shard: a GGUF output converted from another checkpoint cannot be written in parts yet");
    }
    if (!s && p->max_shard_bytes) s = tm__pipe_make_file_set(pp, err); /* llama.cpp split files */
    j->target = tm__pipe_file_target(pp);
    if (!s) s = tm_gguf_writer_open_split(j->target, kv, wt, n, p->max_shard_bytes,
                                                p->allow_long_names ? TM_GGUF_WRITE_LONG_NAMES : 0, &j->w, err);
    for (int64_t i = 0; i < n && !s; i++) {
        gplan *pl = &plans[i];
        const tm_tensor *t = tm_file_tensor(in, pl->src);
        j->total_bytes += t->n_bytes;
        if (pl->quantize) {
            int64_t rpc = pl->ne[0] > 0 ? CHUNK_TARGET_VALUES / pl->ne[0] : pl->rows;
            pl->rows_per_chunk = rpc < 1 ? 1 : rpc;
            pl->n_chunks = pl->rows ? (pl->rows + pl->rows_per_chunk - 1) / pl->rows_per_chunk : 0;
            size_t nc = (size_t)(pl->n_chunks ? pl->n_chunks : 1);
            pl->c_x2 = tm__calloc(nc, sizeof(double));
            pl->c_e2 = tm__calloc(nc, sizeof(double));
            pl->c_max = tm__calloc(nc, sizeof(double));
            if (!pl->c_x2 || !pl->c_e2 || !pl->c_max) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        } else {
            uint64_t nb = tm_gguf_writer_tensor_bytes(j->w, i);
            if (nb != t->n_bytes)
                s = tm__err_set(err, TM_E_INTERNAL, -1, "tensor '%s': %llu bytes in, %llu out", pl->name,
                                (unsigned long long)t->n_bytes, (unsigned long long)nb);
            pl->n_chunks = (int64_t)((nb + COPY_PIECE - 1) / COPY_PIECE);
        }
    }
    /* ---- the tasks: every chunk of every tensor, in file order ---- */
    j->nt = pp->threads;
    if (!s) {
        j->first_task = tm__calloc((size_t)(n ? n : 1), sizeof *j->first_task);
        j->bufs = tm__calloc((size_t)j->nt, sizeof *j->bufs);
        if (!j->first_task || !j->bufs) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        for (int64_t i = 0; !s && i < n; i++) {
            j->first_task[i] = j->n_tasks;
            j->n_tasks += plans[i].n_chunks;
        }
        j->task_plan = s ? NULL : tm__calloc((size_t)(j->n_tasks ? j->n_tasks : 1), sizeof *j->task_plan);
        if (!s && !j->task_plan) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        for (int64_t i = 0; !s && i < n; i++)
            for (int64_t c = 0; c < plans[i].n_chunks; c++) j->task_plan[j->first_task[i] + c] = i;
    }
    *n_tasks = s ? 0 : j->n_tasks;
    return s;
}

static void free_run_bufs(gjob *j) {
    for (int t = 0; j->bufs && t < j->nt; t++) {
        free(j->bufs[t].x);
        free(j->bufs[t].dq);
        free(j->bufs[t].q);
    }
    free(j->bufs);
    free(j->task_plan);
    free(j->first_task);
    j->bufs = NULL;
    j->task_plan = j->first_task = NULL;
}

static tm_status gguf_write(void *ctx, tm__pipe *pp, tm_err *err) {
    gjob *j = ctx;
    (void)pp;
    free_run_bufs(j);
    return tm_gguf_writer_finish(j->w, err);
}

static tm_status gguf_results(void *ctx, tm__pipe *pp, tm__qtotals *tot, tm_err *err) {
    gjob *j = ctx;
    (void)pp;
    const int64_t n = j->n;
    tm_gguf_quantize_result *res = j->res = calloc(1, sizeof *res);
    if (res) res->tensors = tm__calloc((size_t)(n ? n : 1), sizeof(tm_gguf_quantize_tensor));
    if (!res || !res->tensors) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    res->n_fallback = j->qs.n_fallback + j->n_refused;
    for (int64_t i = 0; i < n; i++) {
        gplan *pl = &j->plans[i];
        tm_gguf_quantize_tensor *rt = &res->tensors[res->n++];
        const tm_tensor *t = tm_file_tensor(j->in, pl->src);
        rt->name = pl->name;
        rt->src_type = pl->src_type;
        rt->out_type = pl->out_type;
        rt->quantized = pl->quantize;
        snprintf(rt->reason, sizeof rt->reason, "%s", pl->reason);
        rt->n_elems = t->n_elems;
        rt->out_bytes = tm_gguf_writer_tensor_bytes(j->w, i);
        res->src_bytes += t->n_bytes;
        if (!pl->quantize) continue;
        res->n_quantized++;
        double sx2 = 0, se2 = 0, mx = 0;
        for (int64_t c = 0; c < pl->n_chunks; c++) {
            sx2 += pl->c_x2[c];
            se2 += pl->c_e2[c];
            if (pl->c_max[c] > mx) mx = pl->c_max[c];
        }
        rt->rmse = t->n_elems ? sqrt(se2 / (double)t->n_elems) : 0;
        rt->max_abs_err = mx;
        rt->sqnr_db = se2 > 0 ? 10 * log10(sx2 / se2) : INFINITY;
    }
    TM__QTOTALS_OF(tot, res);
    tot->at.manifest_path = &res->manifest_path;
    return TM_OK;
}

static tm_status gguf_manifest(void *ctx, json_t *man, tm_err *err) {
    gjob *j = ctx;
    const tm_gguf_quantize_params *p = j->p;
    tm_gguf_quantize_result *res = j->res;
    (void)err;
    json_t *recipe = json_object();
    json_object_set_new(recipe, "format", json_string("gguf"));
    json_object_set_new(recipe, "file_type", json_string(tm_gguf_ftype_name(p->ftype)));
    json_object_set_new(recipe, "file_type_id", json_integer(p->ftype));
    json_object_set_new(recipe, "default_type", json_string(tname(j->def_type)));
    json_object_set_new(recipe, "rules", json_string(p->pure ? "none (--pure)" : "llama-quantize llama_tensor_get_type (llama.cpp@c392e509)"));
    json_object_set_new(recipe, "pure", json_boolean(p->pure));
    json_object_set_new(recipe, "leave_output_tensor", json_boolean(p->leave_output_tensor));
    json_object_set_new(recipe, "strict", json_boolean(p->strict));
    json_t *tt = json_array();
    for (int64_t k = 0; k < p->n_tt; k++) {
        json_t *o = json_object();
        json_object_set_new(o, "pattern", json_string(p->tt_patterns[k]));
        json_object_set_new(o, "type", json_string(tname(p->tt_types[k])));
        json_array_append_new(tt, o);
    }
    json_object_set_new(recipe, "tensor_types", tt);
    json_object_set_new(recipe, "importance_matrix", json_null());
    json_object_set_new(man, "recipe", recipe);
    tm__manifest_add_calibration(man, "none: no importance matrix; ggml's reference quantizers ran on the weights themselves");
    json_t *ts = json_array();
    for (int64_t i = 0; i < res->n; i++) {
        tm_gguf_quantize_tensor *rt = &res->tensors[i];
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(rt->name));
        json_object_set_new(o, "decision", json_string(rt->quantized ? "quantized" : "kept"));
        json_object_set_new(o, "source_type", json_string(tname(rt->src_type)));
        json_object_set_new(o, "type", json_string(tname(rt->out_type)));
        json_object_set_new(o, "reason", json_string(rt->reason));
        json_object_set_new(o, "bytes", json_integer((json_int_t)rt->out_bytes));
        if (rt->quantized) {
            json_t *e = json_object();
            json_object_set_new(e, "sqnr_db", tm__manifest_num(rt->sqnr_db));
            json_object_set_new(e, "rmse", tm__manifest_num(rt->rmse));
            json_object_set_new(e, "max_abs_err", tm__manifest_num(rt->max_abs_err));
            json_object_set_new(o, "error", e);
        }
        json_array_append_new(ts, o);
    }
    json_object_set_new(man, "tensors", ts);
    return TM_OK;
}

static tm_status gguf_summary(void *ctx, json_t *man, json_t *sum, tm_err *err) {
    gjob *j = ctx;
    (void)man;
    (void)err;
    json_object_set_new(sum, "n_fallback", json_integer(j->res->n_fallback));
    return TM_OK;
}

/* Parts (part.h): the data bytes of source tensor t (its padding belongs to part 0). */
static int gguf_tensor_spans(void *ctx, int64_t t, tm__span *sp, int max) {
    gjob *j = ctx;
    if (!j->plan_of) {
        int64_t nt = tm_file_n_tensors(j->in);
        if (!(j->plan_of = tm__malloc_n((size_t)nt + 1, sizeof *j->plan_of))) return -1;
        for (int64_t k = 0; k < nt; k++) j->plan_of[k] = -1;
        for (int64_t i = 0; i < j->n; i++)
            if (j->plans[i].src >= 0 && j->plans[i].src < nt) j->plan_of[j->plans[i].src] = i;
    }
    int64_t i = t >= 0 && t < tm_file_n_tensors(j->in) ? j->plan_of[t] : -1;
    if (i < 0 || max < 1) return 0; /* a source tensor the output does not hold */
    sp[0].file = tm_gguf_writer_file(j->w, tm_gguf_writer_tensor_file(j->w, i));
    sp[0].off = tm_gguf_writer_tensor_offset(j->w, i);
    sp[0].len = tm_gguf_writer_tensor_bytes(j->w, i);
    return 1;
}

/* The files the manifest lists: OUT, or the split files (staged). */
static int gguf_output_files(void *ctx, const char *const **files) {
    gjob *j = ctx;
    int nf = tm_gguf_writer_n_files(j->w);
    free(j->ofiles);
    if (!(j->ofiles = tm__calloc((size_t)nf + 1, sizeof *j->ofiles))) return -1;
    for (int k = 0; k < nf; k++) j->ofiles[k] = tm_gguf_writer_file(j->w, k);
    *files = j->ofiles;
    return nf;
}

static int64_t gguf_row_tensor(void *ctx, int64_t r) { /* the manifest's rows are the plans */
    gjob *j = ctx;
    return r >= 0 && r < j->n ? j->plans[r].src : -1;
}

static const tm__qwriter gguf_writer = {
    .kind = TM__PIPE_FILE, .kind_name = "a GGUF output", .format = "gguf", .plan = gguf_plan,
    .run_task = run_item, .write = gguf_write, .results = gguf_results,
    .manifest_add = gguf_manifest, .summary = gguf_summary, .tensor_spans = gguf_tensor_spans,
    .row_tensor = gguf_row_tensor, .output_files = gguf_output_files,
};

tm_status tm_gguf_quantize(tm_file *in, const char *out_path, const tm_gguf_quantize_params *p,
                           tm_gguf_quantize_result **out, tm_err *err) {
    *out = NULL;
    tm_err_clear(err);
    tm_gguf_quantize_params defp = tm_gguf_quantize_params_default();
    if (!p) p = &defp;
    const int def_type = tm_gguf_ftype_default_type(p->ftype);
    if (def_type < 0) return tm__err_set(err, TM_E_INVALID_ARG, -1, "unknown GGUF file type %d", p->ftype);
    gjob j;
    memset(&j, 0, sizeof j);
    j.in = in;
    j.p = p;
    j.def_type = def_type;
    pthread_mutex_init(&j.mu, NULL);
    /* nothing is lost: OUT is a new path, or (with force) a previous tensormorph output */
    tm__qpipe_opts o = TM__QPIPE_OPTS_OF(p, p->n_threads);
    o.shard_i = p->shard_index;
    o.shard_n = p->shard_count;
    tm_status s = tm__qpipe_run(&gguf_writer, &j, p->source ? p->source : in, out_path, &o, err);
    free_run_bufs(&j);
    free(j.plan_of);
    free(j.ofiles);
    tm_gguf_writer_free(j.w);
    pthread_mutex_destroy(&j.mu);
    free(j.wt);
    free_plans(j.plans, j.n);
    tm_gguf_kvlist_free(j.kv);
    for (int64_t k = 0; k < j.n_re; k++) regfree(&j.re[k]);
    free(j.re);
    /* names point into `in`; plans are gone, keep only what the result owns */
    if (s) tm_gguf_quantize_result_free(j.res);
    *out = s ? NULL : j.res;
    return s;
}
