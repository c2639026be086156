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
#include "part.h"
#include "part_crc.h"
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

/* llama-quantize's QUANT_OPTIONS (examples/quantize/quantize.cpp at c392e509) with each file
** type's default ggml type (llama_model_quantize_impl's switch in src/llama-quant.cpp). */
static const struct ftype_row {
    const char *name; int ftype; int type;
} ftypes[] = {
    {"Q4_0", TM_FTYPE_Q4_0, TM_GGML_Q4_0},          {"Q4_1", TM_FTYPE_Q4_1, TM_GGML_Q4_1},
    {"Q5_0", TM_FTYPE_Q5_0, TM_GGML_Q5_0},          {"Q5_1", TM_FTYPE_Q5_1, TM_GGML_Q5_1},
    {"IQ2_XXS", TM_FTYPE_IQ2_XXS, TM_GGML_IQ2_XXS}, {"IQ2_XS", TM_FTYPE_IQ2_XS, TM_GGML_IQ2_XS},
    {"IQ2_S", TM_FTYPE_IQ2_S, TM_GGML_IQ2_XS},      {"IQ2_M", TM_FTYPE_IQ2_M, TM_GGML_IQ2_S},
    {"IQ1_S", TM_FTYPE_IQ1_S, TM_GGML_IQ1_S},       {"IQ1_M", TM_FTYPE_IQ1_M, TM_GGML_IQ1_M},
    {"TQ1_0", TM_FTYPE_TQ1_0, TM_GGML_TQ1_0},       {"TQ2_0", TM_FTYPE_TQ2_0, TM_GGML_TQ2_0},
    {"Q2_K", TM_FTYPE_Q2_K, TM_GGML_Q2_K},          {"Q2_K_S", TM_FTYPE_Q2_K_S, TM_GGML_Q2_K},
    {"IQ3_XXS", TM_FTYPE_IQ3_XXS, TM_GGML_IQ3_XXS}, {"IQ3_S", TM_FTYPE_IQ3_S, TM_GGML_IQ3_S},
    {"IQ3_M", TM_FTYPE_IQ3_M, TM_GGML_IQ3_S},       {"IQ3_XS", TM_FTYPE_IQ3_XS, TM_GGML_IQ3_S},
    {"Q3_K_S", TM_FTYPE_Q3_K_S, TM_GGML_Q3_K},      {"Q3_K_M", TM_FTYPE_Q3_K_M, TM_GGML_Q3_K},
    {"Q3_K_L", TM_FTYPE_Q3_K_L, TM_GGML_Q3_K},      {"IQ4_NL", TM_FTYPE_IQ4_NL, TM_GGML_IQ4_NL},
    {"IQ4_XS", TM_FTYPE_IQ4_XS, TM_GGML_IQ4_XS},    {"Q4_K_S", TM_FTYPE_Q4_K_S, TM_GGML_Q4_K},
    {"Q4_K_M", TM_FTYPE_Q4_K_M, TM_GGML_Q4_K},      {"Q5_K_S", TM_FTYPE_Q5_K_S, TM_GGML_Q5_K},
    {"Q5_K_M", TM_FTYPE_Q5_K_M, TM_GGML_Q5_K},      {"Q6_K", TM_FTYPE_Q6_K, TM_GGML_Q6_K},
    {"Q8_0", TM_FTYPE_Q8_0, TM_GGML_Q8_0},          {"F16", TM_FTYPE_F16, TM_GGML_F16},
    {"BF16", TM_FTYPE_BF16, TM_GGML_BF16},          {"F32", TM_FTYPE_F32, TM_GGML_F32},
    {"COPY", TM_FTYPE_COPY, TM_GGML_F32},
    /* llama-quantize's aliases (its QUANT_OPTIONS table) */
    {"Q3_K", TM_FTYPE_Q3_K_M, TM_GGML_Q3_K},        {"Q4_K", TM_FTYPE_Q4_K_M, TM_GGML_Q4_K},
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
    /* a number: the file type of that id (llama-quantize's std::stoi fallback, which skips
    ** leading white space, takes a sign and ignores what follows the digits; COPY has none) */
    if (name && *name) {
        char *end;
        long v = strtol(name, &end, 10);
        const int digits = end != name && end[-1] >= '0' && end[-1] <= '9';
        for (size_t i = 0; digits && i < N_FTYPES; i++)
            if (ftypes[i].ftype == v && ftypes[i].ftype != TM_FTYPE_COPY) return ftypes[i].ftype;
    }
    return -1;
}

const char *tm_gguf_ftype_name(int ftype) {
    for (size_t i = 0; i < N_FTYPES; i++)
        if (ftypes[i].ftype == ftype) return ftypes[i].name;
    return "?";
}

size_t tm_gguf_ftype_list(char *buf, size_t n) {
    size_t len = 0, kept = 0; /* kept: bytes of buf holding whole names */
    if (buf && n) buf[0] = 0;
    for (size_t i = 0; i < N_FTYPES; i++) {
        size_t l = strlen(ftypes[i].name) + (i > 0);
        if (buf && kept == len && len + l < n) {
            snprintf(buf + len, n - len, "%s%s", i ? " " : "", ftypes[i].name);
            kept += l;
        }
        len += l;
    }
    return len;
}

int tm_gguf_ftype_default_type(int ftype) {
    for (size_t i = 0; i < N_FTYPES; i++)
        if (ftypes[i].ftype == ftype) return ftypes[i].type;
    return -1;
}

int tm_gguf_ftype_needs_imatrix(int ftype) {
    return ftype == TM_FTYPE_IQ2_XS || ftype == TM_FTYPE_IQ2_XXS || ftype == TM_FTYPE_IQ2_S ||
           ftype == TM_FTYPE_Q2_K_S || ftype == TM_FTYPE_IQ1_S || ftype == TM_FTYPE_IQ1_M;
}

tm_gguf_quantize_params tm_gguf_quantize_params_default(void) {
    tm_gguf_quantize_params p;
    memset(&p, 0, sizeof p);
    p.ftype = TM_FTYPE_Q8_0;
    p.n_threads = 0; /* tm_usable_cpus() */
    p.output_tensor_type = TM_GGUF_TYPE_RULES;
    p.token_embedding_type = TM_GGUF_TYPE_RULES;
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
    const float *imx;       /* the tensor's importance-matrix weights (ne0 per matrix), or NULL */
    int      imx_use, imx_odd; /* TM_GGUF_IMX_*; tm_imatrix_odd_entry of its entry             */
    double   *c_x2, *c_e2, *c_max; /* per chunk: sum x^2, sum err^2, max |err|             */
    int      cached;        /* 1: every chunk is in p->tensor_cache: read, not quantized   */
    int      file;          /* the input file holding it, and its data offset there        */
    uint64_t off;
} gplan;

/* llama-quantize's state while choosing types (its quantize_state_impl). */
typedef struct qstate {
    int ftype, falcon, n_gqa, n_expert, is_70b, has_output, has_imatrix;
    int output_tensor_type, token_embedding_type; /* TM_GGUF_TYPE_RULES or a ggml type */
    int n_attention_wv, i_attention_wv;
    int n_ffn_down, i_ffn_down, n_ffn_gate, i_ffn_gate, n_ffn_up, i_ffn_up;
    int n_fallback;
    int n_attn_layer;   /* layers with attention (llama's sanity check); -1: no architecture */
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

/* The layer number llama.cpp reads with sscanf(name, "blk.%d.", &l): the literal "blk.", then a
** %d conversion (leading white space skipped, an optional sign, at least one digit; what follows
** the digits, the "." included, is not checked). *ok = 1 when the conversion matched (sscanf
** returned 1), else the result is -1. Digits past 9 are not accumulated (no model has such
** layers; sscanf's overflow is undefined). */
static int scan_layer(const char *name, int *ok) {
    *ok = 0;
    if (strncmp(name, "blk.", 4) != 0) return -1;
    const char *p = name + 4;
    while (*p == ' ' || (*p >= '\t' && *p <= '\r')) p++;
    int neg = 0;
    if (*p == '+' || *p == '-') neg = *p++ == '-';
    if (*p < '0' || *p > '9') return -1;
    long v = 0;
    for (int nd = 0; *p >= '0' && *p <= '9'; p++, nd++)
        if (nd < 9) v = v * 10 + (*p - '0');
    *ok = 1;
    return (int)(neg ? -v : v);
}

/* llama-quantize's tensor order (its loader's weight_name_comparer): by the layer number
** scan_layer reads (-1 when it reads none), then by name (byte order). */
static int layer_of(const char *name) {
    int ok;
    return scan_layer(name, &ok);
}

static int cmp_plan(const void *a, const void *b) {
    const gplan *x = a, *y = b;
    int la = layer_of(x->name), lb = layer_of(y->name);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_plan_ptr(const void *a, const void *b) {
    return cmp_plan(*(const gplan *const *)a, *(const gplan *const *)b);
}

/* --keep-split: llama-quantize sorts its tensors by (split file, offset in it), the input's
** order, instead of the loader's name order. */
static int cmp_file_order(const void *a, const void *b) {
    const gplan *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return 0;
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
        int ok, l = scan_layer(name, &ok);
        if (!ok) return tm__err_set(err, TM_E_UNSUPPORTED, -1, "tensor '%s': cannot determine its layer (llama-quantize: "
                                    "\"Failed to determine layer for tensor\")", name);
        if (l < 0 || l >= n)
            return tm__err_set(err, TM_E_UNSUPPORTED, -1, "tensor '%s': layer %d is outside [0, %d) (llama-quantize: "
                               "\"Bad layer\")", name, l, n);
        *il = l;
    }
    return TM_OK;
}

#define SETR(...) snprintf(reason, rn, __VA_ARGS__)

/* The IQ1/IQ2 file types' own branch of the rules. */
static int is_iq12_ftype(int ft) {
    return ft == TM_FTYPE_IQ2_XXS || ft == TM_FTYPE_IQ2_XS || ft == TM_FTYPE_IQ1_S || ft == TM_FTYPE_IQ2_S ||
           ft == TM_FTYPE_IQ2_M || ft == TM_FTYPE_IQ1_M;
}

/* llama_tensor_get_type (llama.cpp@c392e509 src/llama-quant.cpp) for every file type: the
** per-tensor mixture (with the rules that depend on an importance matrix being present), then
** the fallback for rows that are not a multiple of the chosen type's block. `reason` gets the
** rule that decided. *refused = 1 where the reference gives up on the tensor ("Unsupported
** tensor size encountered"). */
static tm_status get_type(qstate *qs, int new_type, const char *name, int64_t ne0, int *out,
                          char *reason, size_t rn, int *refused, tm_err *err) {
    const int ft = qs->ftype;
    const char *ftn = tm_gguf_ftype_name(ft);
    *refused = 0;
    SETR("default type of %s", ftn);
    if (strcmp(name, "output.weight") == 0 || (!qs->has_output && strcmp(name, "token_embd.weight") == 0)) {
        const char *what = strcmp(name, "output.weight") ? "tied token embedding (the output)" : "output";
        int64_t qk = blck(new_type);
        if (qs->output_tensor_type != TM_GGUF_TYPE_RULES) {
            new_type = qs->output_tensor_type;
            SETR("%s: --output-tensor-type %s", what, tname(new_type));
        } else if (qs->falcon || ne0 % qk != 0) {
            new_type = TM_GGML_Q8_0;
            SETR("%s: row of %lld is not a multiple of %lld (or falcon): Q8_0", what, (long long)ne0, (long long)qk);
        } else if (ft == TM_FTYPE_IQ2_XXS || ft == TM_FTYPE_IQ2_XS || ft == TM_FTYPE_IQ3_XXS || ft == TM_FTYPE_IQ1_S ||
                   ft == TM_FTYPE_IQ2_S || ft == TM_FTYPE_IQ2_M || ft == TM_FTYPE_IQ1_M) {
            new_type = TM_GGML_Q5_K;
            SETR("%s in %s: Q5_K", what, ftn);
        } else if (new_type != TM_GGML_Q8_0) {
            new_type = TM_GGML_Q6_K;
            SETR("%s: Q6_K", what);
        }
    } else if (strcmp(name, "token_embd.weight") == 0) {
        if (qs->token_embedding_type != TM_GGUF_TYPE_RULES) {
            new_type = qs->token_embedding_type;
            SETR("token_embd: --token-embedding-type %s", tname(new_type));
        } else if (ft == TM_FTYPE_IQ2_XXS || ft == TM_FTYPE_IQ2_XS || ft == TM_FTYPE_IQ1_S || ft == TM_FTYPE_IQ1_M) {
            new_type = TM_GGML_Q2_K;
            SETR("token_embd in %s: Q2_K", ftn);
        } else if (ft == TM_FTYPE_IQ2_S || ft == TM_FTYPE_IQ2_M || ft == TM_FTYPE_IQ3_XXS) {
            new_type = TM_GGML_IQ3_S;
            SETR("token_embd in %s: IQ3_S", ftn);
        } else if (ft == TM_FTYPE_TQ1_0 || ft == TM_FTYPE_TQ2_0) {
            new_type = TM_GGML_Q4_K;
            SETR("token_embd in %s: Q4_K", ftn);
        }
    } else if (is_iq12_ftype(ft)) {
        const int iq2sm = ft == TM_FTYPE_IQ2_S || ft == TM_FTYPE_IQ2_M;
        if (contains(name, "attn_v.weight")) {
            if (qs->n_gqa >= 4 || qs->n_expert >= 4) new_type = TM_GGML_Q4_K;
            else new_type = iq2sm ? TM_GGML_IQ3_S : TM_GGML_Q2_K;
            SETR("attn_v in %s (n_gqa %d, %d experts): %s", ftn, qs->n_gqa, qs->n_expert, tname(new_type));
            ++qs->i_attention_wv;
        } else if (qs->n_expert == 8 && contains(name, "attn_k.weight")) {
            new_type = TM_GGML_Q4_K;
            SETR("attn_k of an 8-expert model in %s: Q4_K", ftn);
        } else if (contains(name, "ffn_down")) {
            if (qs->i_ffn_down < qs->n_ffn_down / 8) {
                new_type = iq2sm ? TM_GGML_IQ3_S : TM_GGML_Q2_K;
                SETR("ffn_down #%d of %d in %s: %s", qs->i_ffn_down, qs->n_ffn_down, ftn, tname(new_type));
            }
            ++qs->i_ffn_down;
        } else if (contains(name, "attn_output.weight")) {
            if (qs->n_expert == 8) {
                new_type = TM_GGML_Q5_K;
                SETR("attn_output of an 8-expert model: Q5_K");
            } else if (ft == TM_FTYPE_IQ1_S || ft == TM_FTYPE_IQ1_M) {
                new_type = TM_GGML_IQ2_XXS;
                SETR("attn_output in %s: IQ2_XXS", ftn);
            } else if (iq2sm) {
                new_type = TM_GGML_IQ3_S;
                SETR("attn_output in %s: IQ3_S", ftn);
            }
        }
    } else if (contains(name, "attn_v.weight")) {
        int i = qs->i_attention_wv;
        if (ft == TM_FTYPE_Q2_K) {
            new_type = qs->n_gqa >= 4 ? TM_GGML_Q4_K : TM_GGML_Q3_K;
            SETR("attn_v in Q2_K (n_gqa %d): %s", qs->n_gqa, tname(new_type));
        } else if (ft == TM_FTYPE_Q2_K_S && qs->n_gqa >= 4) {
            new_type = TM_GGML_Q4_K;
            SETR("attn_v in Q2_K_S (n_gqa %d): Q4_K", qs->n_gqa);
        } else if (ft == TM_FTYPE_IQ3_XXS) {
            new_type = qs->n_gqa >= 4 ? TM_GGML_Q4_K : !qs->has_imatrix ? TM_GGML_IQ3_S : TM_GGML_IQ3_XXS;
            SETR("attn_v in IQ3_XXS (n_gqa %d, %s importance matrix): %s", qs->n_gqa, qs->has_imatrix ? "with" : "no",
                 tname(new_type));
        } else if ((ft == TM_FTYPE_IQ3_XS || ft == TM_FTYPE_IQ3_S) && qs->n_gqa >= 4) {
            new_type = TM_GGML_Q4_K;
            SETR("attn_v in %s (n_gqa %d): Q4_K", ftn, qs->n_gqa);
        } else if (ft == TM_FTYPE_IQ3_M) {
            new_type = TM_GGML_Q4_K;
            SETR("attn_v in IQ3_M: Q4_K");
        } else if (ft == TM_FTYPE_Q3_K_M) {
            new_type = i < 2 ? TM_GGML_Q5_K : TM_GGML_Q4_K;
            SETR("attn_v #%d in Q3_K_M: %s", i, tname(new_type));
        } else if (ft == TM_FTYPE_Q3_K_L) {
            new_type = TM_GGML_Q5_K;
            SETR("attn_v in Q3_K_L: Q5_K");
        } else if ((ft == TM_FTYPE_IQ4_NL || ft == TM_FTYPE_IQ4_XS) && qs->n_gqa >= 4) {
            new_type = TM_GGML_Q5_K;
            SETR("attn_v in %s (n_gqa %d): Q5_K", ftn, qs->n_gqa);
        } else if ((ft == TM_FTYPE_Q4_K_M || ft == TM_FTYPE_Q5_K_M) && use_more_bits(i, qs->n_attention_wv)) {
            new_type = TM_GGML_Q6_K;
            SETR("attn_v #%d of %d in %s (use_more_bits): Q6_K", i, qs->n_attention_wv, ftn);
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
        } else if (ft == TM_FTYPE_IQ3_XS) {
            new_type = TM_GGML_IQ3_XXS;
            SETR("attn_k in IQ3_XS: IQ3_XXS");
        } else if (ft == TM_FTYPE_IQ3_XXS) {
            new_type = TM_GGML_IQ2_S;
            SETR("attn_k in IQ3_XXS: IQ2_S");
        }
    } else if (contains(name, "attn_q.weight")) {
        if (ft == TM_FTYPE_IQ3_XS) {
            new_type = TM_GGML_IQ3_XXS;
            SETR("attn_q in IQ3_XS: IQ3_XXS");
        } else if (ft == TM_FTYPE_IQ3_XXS) {
            new_type = TM_GGML_IQ2_S;
            SETR("attn_q in IQ3_XXS: IQ2_S");
        }
    } else if (contains(name, "ffn_down")) {
        int il, nl;
        tm_status s = layer_info(qs, qs->i_ffn_down, qs->n_ffn_down, name, &il, &nl, err);
        if (s) return s;
        if (ft == TM_FTYPE_Q2_K) {
            new_type = TM_GGML_Q3_K;
            SETR("ffn_down in Q2_K: Q3_K");
        } else if (ft == TM_FTYPE_Q2_K_S) {
            if (il < nl / 8) {
                new_type = TM_GGML_Q4_K;
                SETR("ffn_down layer %d of %d in Q2_K_S: Q4_K", il, nl);
            }
        } else if (ft == TM_FTYPE_IQ3_XXS && !qs->has_imatrix) {
            new_type = il < nl / 8 ? TM_GGML_Q4_K : TM_GGML_Q3_K;
            SETR("ffn_down layer %d of %d in IQ3_XXS without importance matrix: %s", il, nl, tname(new_type));
        } else if (ft == TM_FTYPE_Q3_K_M) {
            new_type = il < nl / 16 ? TM_GGML_Q5_K : !qs->falcon || use_more_bits(il, nl) ? TM_GGML_Q4_K : TM_GGML_Q3_K;
            SETR("ffn_down layer %d of %d in Q3_K_M: %s", il, nl, tname(new_type));
        } else if (ft == TM_FTYPE_IQ3_M && (il < nl / 8 || (qs->n_expert == 8 && use_more_bits(il, nl)))) {
            new_type = TM_GGML_Q4_K;
            SETR("ffn_down layer %d of %d in IQ3_M: Q4_K", il, nl);
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
        } else if (il < nl / 8 && (ft == TM_FTYPE_IQ4_NL || ft == TM_FTYPE_IQ4_XS) && !qs->has_imatrix) {
            new_type = TM_GGML_Q5_K;
            SETR("ffn_down layer %d of %d in %s without importance matrix: Q5_K", il, nl, ftn);
        } else if (ft == TM_FTYPE_Q5_K_M && use_more_bits(il, nl)) {
            new_type = TM_GGML_Q6_K;
            SETR("ffn_down layer %d of %d in Q5_K_M (use_more_bits): Q6_K", il, nl);
        } else if (ft == TM_FTYPE_Q4_K_S && !qs->falcon && il < nl / 8) {
            new_type = TM_GGML_Q5_K;
            SETR("ffn_down layer %d of %d in Q4_K_S: Q5_K", il, nl);
        } else if ((ft == TM_FTYPE_Q4_0 || ft == TM_FTYPE_Q5_0) && qs->has_imatrix && il < nl / 8) {
            new_type = ft == TM_FTYPE_Q4_0 ? TM_GGML_Q4_1 : TM_GGML_Q5_1;
            SETR("ffn_down layer %d of %d in %s with importance matrix: %s", il, nl, ftn, tname(new_type));
        }
        ++qs->i_ffn_down;
    } else if (contains(name, "attn_output.weight")) {
        if (!qs->falcon) {
            if (qs->n_expert == 8) {
                if (ft == TM_FTYPE_Q2_K || ft == TM_FTYPE_IQ3_XS || ft == TM_FTYPE_IQ3_XXS || ft == TM_FTYPE_Q3_K_S ||
                    ft == TM_FTYPE_Q3_K_M || ft == TM_FTYPE_IQ4_NL || ft == TM_FTYPE_Q4_K_S || ft == TM_FTYPE_Q4_K_M ||
                    ft == TM_FTYPE_IQ3_S || ft == TM_FTYPE_IQ3_M || ft == TM_FTYPE_IQ4_XS) {
                    new_type = TM_GGML_Q5_K;
                    SETR("attn_output of an 8-expert model: Q5_K");
                }
            } else {
                int nt = ft == TM_FTYPE_Q2_K ? TM_GGML_Q3_K : ft == TM_FTYPE_IQ3_XXS ? TM_GGML_IQ3_S
                       : ft == TM_FTYPE_Q3_K_M ? TM_GGML_Q4_K : ft == TM_FTYPE_Q3_K_L ? TM_GGML_Q5_K
                       : ft == TM_FTYPE_IQ3_M ? TM_GGML_Q4_K : -1;
                if (nt >= 0) {
                    new_type = nt;
                    SETR("attn_output in %s: %s", ftn, tname(new_type));
                }
            }
        } else if (ft == TM_FTYPE_Q3_K_L) {
            new_type = TM_GGML_Q4_K;
            SETR("attn_output in Q3_K_L (falcon): Q4_K");
        }
    } else if (contains(name, "attn_qkv.weight")) {
        int nt = ft == TM_FTYPE_Q3_K_M || ft == TM_FTYPE_Q3_K_L || ft == TM_FTYPE_IQ3_M ? TM_GGML_Q4_K
               : ft == TM_FTYPE_Q4_K_M ? TM_GGML_Q5_K : ft == TM_FTYPE_Q5_K_M ? TM_GGML_Q6_K : -1;
        if (nt >= 0) {
            new_type = nt;
            SETR("attn_qkv in %s: %s", ftn, tname(new_type));
        }
    } else if (contains(name, "ffn_gate") || contains(name, "ffn_up")) {
        const int gate = contains(name, "ffn_gate");
        int il, nl;
        tm_status s = layer_info(qs, gate ? qs->i_ffn_gate : qs->i_ffn_up, gate ? qs->n_ffn_gate : qs->n_ffn_up, name,
                                 &il, &nl, err);
        if (s) return s;
        if (ft == TM_FTYPE_IQ3_XS && il >= nl / 8 && il < 7 * nl / 8) {
            new_type = TM_GGML_IQ3_XXS;
            SETR("%s layer %d of %d in IQ3_XS: IQ3_XXS", gate ? "ffn_gate" : "ffn_up", il, nl);
        }
        if (gate) ++qs->i_ffn_gate;
        else ++qs->i_ffn_up;
    }
    /* rows that are not a multiple of the chosen type's block */
    int64_t qk = blck(new_type);
    if (ne0 % qk != 0) {
        int fb;
        switch (new_type) {
        case TM_GGML_TQ1_0: case TM_GGML_TQ2_0: fb = TM_GGML_Q4_0; break;
        case TM_GGML_IQ2_XXS: case TM_GGML_IQ2_XS: case TM_GGML_IQ2_S: case TM_GGML_IQ3_XXS:
        case TM_GGML_IQ3_S: case TM_GGML_IQ1_S: case TM_GGML_IQ1_M: case TM_GGML_Q2_K:
        case TM_GGML_Q3_K: case TM_GGML_IQ4_XS: fb = TM_GGML_IQ4_NL; break;
        case TM_GGML_Q4_K: fb = TM_GGML_Q5_0; break;
        case TM_GGML_Q5_K: fb = TM_GGML_Q5_1; break;
        case TM_GGML_Q6_K: fb = TM_GGML_Q8_0; break;
        default: fb = -1; break;
        }
        size_t k = strlen(reason);
        if (fb < 0) {
            *refused = 1;
            snprintf(reason + k, rn - k, "; row of %lld is not a multiple of %lld and llama-quantize has no fallback for %s "
                     "(\"Unsupported tensor size encountered\")", (long long)ne0, (long long)qk, tname(new_type));
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
    /* llama's test is name.rfind("weight") == name.size() - 6, which a 5-byte name passes too
    ** (npos == 5 - 6 in size_t) */
    if (!tm__ends_with(name, "weight") && strlen(name) != 5) return "name does not end in 'weight'";
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
    struct tm__crclog    *crclog;               /* a part: its writes and their CRC-32C      */
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

/* n bytes of plan pl's tensor at off into the output; a part logs their CRC-32C from memory
** (part_crc.h), so that its record need not read them back. */
static tm_status out_write(gjob *j, const gplan *pl, uint64_t off, const void *data, size_t n, tm_err *err) {
    const int64_t i = pl - j->plans;
    tm_status s = tm_gguf_writer_write(j->w, i, off, data, n, err);
    if (!s && j->crclog)
        tm__crclog_add(j->crclog, tm_gguf_writer_file(j->w, tm_gguf_writer_tensor_file(j->w, i)),
                       tm_gguf_writer_tensor_offset(j->w, i) + off, data, n);
    return s;
}

typedef struct wbuf { float *x, *dq; uint8_t *q; size_t cap_vals, cap_bytes; } wbuf;

/* The first NaN or infinite value of n bytes of F32/F16/BF16 data (little-endian), or -1: the
** values ggml_validate_row_data refuses (an f16/bf16 with every exponent bit set). */
static int64_t first_nonfinite(int type, const uint8_t *p, uint64_t n) {
    if (type == TM_GGML_F32) {
        for (uint64_t i = 0; i + 4 <= n; i += 4)
            if ((tm__ld32(p + i) & 0x7f800000u) == 0x7f800000u) return (int64_t)(i / 4);
    } else if (type == TM_GGML_F16 || type == TM_GGML_BF16) {
        const uint16_t m = type == TM_GGML_F16 ? 0x7c00u : 0x7f80u;
        for (uint64_t i = 0; i + 2 <= n; i += 2)
            if ((tm__ld16(p + i) & m) == m) return (int64_t)(i / 2);
    }
    return -1;
}

static tm_status do_copy_chunk(gjob *j, gplan *pl, int64_t c, wbuf *b, tm_err *err) {
    uint64_t nb = tm_gguf_writer_tensor_bytes(j->w, pl - j->plans);
    uint64_t off = (uint64_t)c * COPY_PIECE, k = nb - off < COPY_PIECE ? nb - off : COPY_PIECE;
    (void)b;
    const void *src;
    tm_status s = tm_tensor_data(j->in, pl->src, off, k, &src, err);
    /* llama-quantize's loader validates every tensor it reads (check_tensors), the copied ones too */
    int64_t bad = !s && tm_file_format(j->in) == TM_FMT_GGUF ? first_nonfinite(pl->src_type, src, k) : -1;
    if (bad >= 0) {
        const tm_tensor *t = tm_file_tensor(j->in, pl->src);
        const uint64_t esz = pl->src_type == TM_GGML_F32 ? 4 : 2;
        s = tm__err_set(err, TM_E_NONFINITE, (int64_t)(t->offset + off + (uint64_t)bad * esz),
                        "%s: tensor '%s' (%s, copied): element %lld is NaN or infinite (llama-quantize refuses it too: "
                        "\"tensor has invalid data\")", tm_file_path(j->in, t->file_index), pl->name, tname(pl->src_type),
                        (long long)(off / esz + (uint64_t)bad));
    }
    if (!s) s = out_write(j, pl, off, src, (size_t)k, err);
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
        const float *w = pl->imx ? pl->imx + (pl->ne[2] > 1 ? (r / pl->ne[1] % pl->ne[2]) * ne0 : 0) : NULL;
        tm_status s = tm__gq_quantize_row_err(pl->out_type, x + (r - p0) * ne0, ne0, w, ne0, q, NULL, NULL, &bad, j->p->kernels, err);
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
    const tm_gguf_tensor_cache *tc = j->p->tensor_cache;
    const void *mapped = NULL;
    tm_status s;
    if (pl->cached) { /* the bytes and sums of an earlier quantize of this tensor to this type */
        double sums[3] = {0, 0, 0};
        s = tc->get(tc->ud, pl->name, pl->out_type, pl->imx != NULL, c, rb * (uint64_t)r0, b->q, nbytes, sums, err);
        if (!s) s = out_write(j, pl, rb * (uint64_t)r0, b->q, nbytes, err);
        if (s) return s;
        pl->c_x2[c] = sums[0];
        pl->c_e2[c] = sums[1];
        pl->c_max[c] = sums[2];
        report(j, esz * (uint64_t)nv);
        return TM_OK;
    }
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
        if (!pl->imx || pl->ne[2] == 1) {
            s = tm__gq_quantize_row_err(pl->out_type, x, (p1 - p0) * ne0, pl->imx, ne0, q, b->dq, &acc, NULL,
                                        j->p->kernels, err);
        } else { /* experts: matrix (row / ne1) % ne2 has its own ne0 importances */
            s = TM_OK;
            for (int64_t r = p0; r < p1 && !s; r++)
                s = tm__gq_quantize_row_err(pl->out_type, x + (r - p0) * ne0, ne0, pl->imx + (r / pl->ne[1] % pl->ne[2]) * ne0,
                                            ne0, q + (size_t)((uint64_t)(r - p0) * rb), b->dq, &acc, NULL, j->p->kernels, err);
        }
        if (s) return row_error(j, pl, x, p0, p1, q, s, err);
        /* llama-quantize's check of what it quantized (ggml_validate_row_data) */
        int nan = 0;
        const int64_t bpr = ne0 / blck(pl->out_type);
        const int64_t bad = tm__gq_validate(pl->out_type, q, (p1 - p0) * bpr, &nan);
        if (bad >= 0)
            return tm__err_set(err, TM_E_NONFINITE, -1,
                               "%s: tensor '%s' (%s): row %lld: block %lld: the stored scale is %s, as ggml's arithmetic "
                               "gives it%s; llama-quantize refuses it too (\"quantized data validation failed\")",
                               tm_file_path(j->in, t->file_index), pl->name, tname(pl->out_type),
                               (long long)(p0 + bad / bpr), (long long)(bad % bpr), nan ? "NaN" : "infinite",
                               pl->imx_odd == 2 ? " for its all-zero importance-matrix entry"
                               : pl->imx_odd == 1 ? " for its importance-matrix entry with negative values"
                               : pl->imx ? " for its importance-matrix entry" : "");
    }
    s = out_write(j, pl, rb * (uint64_t)r0, b->q, nbytes, err);
    if (s) return s;
    tm__gq_err_total(&acc, &pl->c_x2[c], &pl->c_e2[c], &pl->c_max[c]);
    if (tc) {
        const double sums[3] = {pl->c_x2[c], pl->c_e2[c], pl->c_max[c]};
        tc->put(tc->ud, pl->name, pl->out_type, pl->imx != NULL, tm_gguf_writer_tensor_bytes(j->w, pl - j->plans), c,
                pl->n_chunks, rb * (uint64_t)r0, b->q, nbytes, sums);
    }
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

/* An integer hparam as llama.cpp's model loader reads it (llama_model_loader::get_key): an
** --override-kv int of that key wins (an override of another type is ignored, as the loader
** ignores it with a warning), else the file's value. */
static int64_t hp_int(const tm_gguf_kvlist *kv, const tm_gguf_kvlist *ovr, const char *key, int *found) {
    int64_t o = tm_gguf_kvlist_find(ovr, key);
    if (o >= 0 && tm_gguf_kvlist_type(ovr, o) == TM_GGUF_I32) {
        *found = 1;
        return tm_gguf_kvlist_get_int(ovr, key, NULL);
    }
    return tm_gguf_kvlist_get_int(kv, key, found);
}

/* A head count as the loader reads it (get_key_or_arr, then hparams.n_head(0)): only when the
** file has the key; a per-layer array gives its first element (overrides do not apply to
** arrays), a scalar is read as hp_int. */
static int64_t hp_heads(const tm_gguf_kvlist *kv, const tm_gguf_kvlist *ovr, const char *key, int n_layer, int *found,
                        int *zeros) {
    int64_t i = tm_gguf_kvlist_find(kv, key);
    *found = 0;
    *zeros = n_layer; /* a layer without a count has 0 heads */
    if (i < 0) return 0;
    if (tm_gguf_kvlist_type(kv, i) != TM_GGUF_ARRAY) {
        int64_t v = hp_int(kv, ovr, key, found);
        *zeros = v == 0 ? n_layer : 0;
        return v;
    }
    size_t n = 0;
    const uint8_t *v = tm_gguf_kvlist_raw(kv, i, &n);
    if (!v || n < 12) return 0;
    const uint32_t et = tm__ld32(v);
    uint64_t cnt;
    memcpy(&cnt, v + 4, 8);
    static const uint8_t size[] = {1, 1, 2, 2, 4, 4, 0, 0, 0, 0, 8, 8, 0}; /* by GGUF type; 0: not an integer */
    if (cnt < 1 || et >= sizeof size || !size[et] || cnt > (n - 12) / size[et]) return 0;
    const uint8_t *e = v + 12;
    *found = 1;
    *zeros = 0;
    for (uint64_t k = 0; k < cnt && k < (uint64_t)(n_layer > 0 ? n_layer : 0); k++) {
        int nz = 0;
        for (int b = 0; b < size[et]; b++) nz |= e[k * size[et] + (uint64_t)b];
        *zeros += !nz;
    }
    switch (et) {
    case TM_GGUF_U8: return e[0];
    case TM_GGUF_I8: return (int8_t)e[0];
    case TM_GGUF_U16: return tm__ld16(e);
    case TM_GGUF_I16: return (int16_t)tm__ld16(e);
    case TM_GGUF_U32: return tm__ld32(e);
    case TM_GGUF_I32: return (int32_t)tm__ld32(e);
    default: return (int64_t)tm__ld64(e);
    }
}

/* hparams of the input's architecture from its metadata ("<arch>.block_count", ...), with the
** --override-kv entries applied as llama.cpp's loader applies them (llama-quantize hands its
** overrides to the loader: an overridden block or head count changes the rules). */
static void read_hparams(const tm_gguf_kvlist *kv, const tm_gguf_kvlist *ovr, qstate *qs, int *n_layer) {
    char *arch = tm_gguf_kvlist_get_str(ovr, "general.architecture");
    if (!arch) arch = tm_gguf_kvlist_get_str(kv, "general.architecture");
    char key[256];
    int found;
    *n_layer = 0;
    qs->n_attn_layer = -1;
    if (arch) {
        qs->falcon = strcmp(arch, "falcon") == 0;
        snprintf(key, sizeof key, "%s.block_count", arch);
        *n_layer = (int)hp_int(kv, ovr, key, &found);
        snprintf(key, sizeof key, "%s.attention.head_count", arch);
        int zh, zkv;
        int64_t nh = hp_heads(kv, ovr, key, *n_layer, &found, &zh);
        snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
        int64_t nkv = hp_heads(kv, ovr, key, *n_layer, &found, &zkv);
        if (!found) { /* n_head_kv defaults to n_head, layer by layer */
            nkv = nh;
            zkv = zh;
        }
        /* llama_model_quantize_impl's sanity check: the layers with kv heads (3 attentions per
        ** layer in an encoder-decoder model) */
        qs->n_attn_layer = (*n_layer - zkv) * (strcmp(arch, "t5") == 0 || strcmp(arch, "t5encoder") == 0 ? 3 : 1);
        qs->n_gqa = nkv > 0 ? (int)(nh / nkv) : 0;
        snprintf(key, sizeof key, "%s.expert_count", arch);
        qs->n_expert = (int)hp_int(kv, ovr, key, &found);
        /* llama.cpp's LLM_TYPE_70B (llama_model::load_hparams at c392e509): 80 layers of a llama
        ** with grouped-query attention and not 8 experts, or of deci, qwen2, qwen2vl, olmo */
        qs->is_70b = *n_layer == 80 &&
                     ((strcmp(arch, "llama") == 0 && qs->n_expert != 8 && nh != nkv) || strcmp(arch, "deci") == 0 ||
                      strcmp(arch, "qwen2") == 0 || strcmp(arch, "qwen2vl") == 0 || strcmp(arch, "olmo") == 0);
    }
    free(arch);
}

/* general.file_type of the output: the file type, or for COPY the input's (llama's only_copy
** keeps ml.ftype: the input's general.file_type, else the type most tensors have, first in name
** order on a tie, with LLAMA_FTYPE_GUESSED 1024). */
static int out_ftype(int ftype, const tm_gguf_kvlist *kv, const gplan *plans, int64_t n) {
    if (ftype != TM_FTYPE_COPY) return ftype;
    int found = 0;
    int64_t v = tm_gguf_kvlist_get_int(kv, "general.file_type", &found);
    if (found) return (int)v;
    static const int map[][2] = {
        {TM_GGML_F32, TM_FTYPE_F32}, {TM_GGML_F16, TM_FTYPE_F16}, {TM_GGML_BF16, TM_FTYPE_BF16},
        {TM_GGML_Q4_0, TM_FTYPE_Q4_0}, {TM_GGML_Q4_1, TM_FTYPE_Q4_1}, {TM_GGML_Q5_0, TM_FTYPE_Q5_0},
        {TM_GGML_Q5_1, TM_FTYPE_Q5_1}, {TM_GGML_Q8_0, TM_FTYPE_Q8_0}, {TM_GGML_Q2_K, TM_FTYPE_Q2_K},
        {TM_GGML_Q3_K, TM_FTYPE_Q3_K_M}, {TM_GGML_Q4_K, TM_FTYPE_Q4_K_M}, {TM_GGML_Q5_K, TM_FTYPE_Q5_K_M},
        {TM_GGML_Q6_K, TM_FTYPE_Q6_K}, {TM_GGML_TQ1_0, TM_FTYPE_TQ1_0}, {TM_GGML_TQ2_0, TM_FTYPE_TQ2_0},
        {TM_GGML_IQ2_XXS, TM_FTYPE_IQ2_XXS}, {TM_GGML_IQ2_XS, TM_FTYPE_IQ2_XS}, {TM_GGML_IQ2_S, TM_FTYPE_IQ2_S},
        {TM_GGML_IQ3_XXS, TM_FTYPE_IQ3_XXS}, {TM_GGML_IQ1_S, TM_FTYPE_IQ1_S}, {TM_GGML_IQ1_M, TM_FTYPE_IQ1_M},
        {TM_GGML_IQ4_NL, TM_FTYPE_IQ4_NL}, {TM_GGML_IQ4_XS, TM_FTYPE_IQ4_XS}, {TM_GGML_IQ3_S, TM_FTYPE_IQ3_S}};
    int64_t cnt[TM_GGML_TYPE_COUNT] = {0}, best = 0;
    int type_max = TM_GGML_F32;
    /* the loader's weights_map is ordered by its weight_name_comparer (layer, then name), the
    ** order of cmp_plan, whatever order the plans are in (--keep-split keeps the file order) */
    const gplan **by = malloc((size_t)(n ? n : 1) * sizeof *by);
    for (int64_t i = 0; by && i < n; i++) by[i] = &plans[i];
    if (by) qsort(by, (size_t)n, sizeof *by, cmp_plan_ptr);
    for (int64_t i = 0; by && i < n; i++) {
        int t = by[i]->src_type;
        if (t < 0 || t >= TM_GGML_TYPE_COUNT) continue;
        if (best < ++cnt[t]) {
            best = cnt[t];
            type_max = t;
        }
    }
    free(by);
    int ft = TM_FTYPE_F32;
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
        if (map[k][0] == type_max) ft = map[k][1];
    return ft | 1024;
}

/* The plan (the driver's phases: pipeline.h, tm__qwriter): pp has checked and locked OUT; the
** file is opened at pp->stage with every tensor's type, size and offset fixed. */
/* The type decisions (llama-quantize's rules, then --tensor-type): j->plans in output order,
** j->kv the metadata. Shared by the job and tm_gguf_quantize_plan. */
static tm_status plan_types(gjob *j, tm_err *err) {
    tm_file *in = j->in;
    const tm_gguf_quantize_params *p = j->p;
    const int def_type = j->def_type, def_quantized = tm_ggml_type_info_get(def_type)->is_quantized;
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
    /* llama-quantize's params.imatrix is set only when the (filtered) matrix has entries */
    const tm_imatrix *imx = p->imatrix && p->imatrix->n > 0 ? p->imatrix : NULL;
    qs.has_imatrix = imx != NULL;
    qs.output_tensor_type = p->output_tensor_type;
    qs.token_embedding_type = p->token_embedding_type;
    if (!s && !imx && tm_gguf_ftype_needs_imatrix(p->ftype)) {
        if (p->imatrix) /* given, but --include-/--exclude-weights left nothing */
            s = tm__err_set(err, TM_E_INVALID_ARG, -1,
                            "Please do not use IQ1_S, IQ1_M, IQ2_S, IQ2_XXS, IQ2_XS or Q2_K_S quantization without an "
                            "importance matrix (--type %s): --include-weights/--exclude-weights left 0 of the %lld "
                            "entries of %s (llama-quantize then has no importance matrix either)",
                            tm_gguf_ftype_name(p->ftype), (long long)(p->imatrix_n_read ? p->imatrix_n_read : p->imatrix->n),
                            p->imatrix_arg ? p->imatrix_arg : p->imatrix->path);
        else
            s = tm__err_set(err, TM_E_INVALID_ARG, -1,
                            "Please do not use IQ1_S, IQ1_M, IQ2_S, IQ2_XXS, IQ2_XS or Q2_K_S quantization without an "
                            "importance matrix (--type %s needs --imatrix FILE, as llama-quantize)", tm_gguf_ftype_name(p->ftype));
    }
    int n_layer = 0;
    if (!s) read_hparams(kv, p->kv_overrides, &qs, &n_layer);
    for (int64_t i = 0; i < n && !s; i++) {
        const tm_tensor *t = tm_file_tensor(in, i);
        gplan *pl = &plans[i];
        pl->src = i;
        pl->name = t->name;
        pl->file = t->file_index;
        pl->off = t->offset;
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
    /* the order the counters of the rules see and the output holds */
    const int keep_order = p->keep_split && tm_file_format(in) == TM_FMT_GGUF;
    if (!s) qsort(plans, (size_t)n, sizeof *plans, keep_order ? cmp_file_order : cmp_plan);
    if (!s && n_layer <= 0) /* no hparams (safetensors input): count the ffn_down tensors */
        for (int64_t i = 0; i < n; i++) n_layer += contains(plans[i].name, "ffn_down") ? 1 : 0;
    qs.n_ffn_down = qs.n_ffn_gate = qs.n_ffn_up = n_layer;
    if (!s && qs.n_attention_wv != 0 && qs.n_attn_layer >= 0 && qs.n_attention_wv != qs.n_attn_layer)
        s = tm__err_set(err, TM_E_UNSUPPORTED, -1,
                        "%s: %d attn_v/attn_qkv/attn_kv_b tensors, but the metadata gives %d layers with attention "
                        "(block count and kv head counts): llama-quantize stops on it (\"n_attention_wv is unexpected\")",
                        tm_file_path(in, 0), qs.n_attention_wv, qs.n_attn_layer);
    int64_t n_refused = 0;
    for (int64_t i = 0; i < n && !s; i++) {
        gplan *pl = &plans[i];
        int nd = pl->n_dims; /* ggml_n_dims: trailing dims of 1 do not count */
        while (nd > 1 && pl->ne[nd - 1] == 1) nd--;
        const char *why = p->ftype == TM_FTYPE_COPY ? "COPY: every tensor copied as it is"
                                                    : not_quantized_reason(pl->name, nd, p->leave_output_tensor);
        int new_type = pl->src_type, refused = 0, rowfail = 0, chosen = -1;
        if (why) {
            snprintf(pl->reason, sizeof pl->reason, "%s", why);
        } else {
            new_type = def_type;
            snprintf(pl->reason, sizeof pl->reason, "%s", p->pure ? "--pure" : "default type");
            if (!p->pure && def_quantized) {
                int nf = qs.n_fallback;
                s = get_type(&qs, new_type, pl->name, pl->ne[0], &new_type, pl->reason, sizeof pl->reason, &refused, err);
                if (s) break;
                /* llama-quantize applies an override only where the rules did not fall back;
                ** tt_exact applies it wherever it matches (the row is still checked below) */
                if (p->tt_exact || (qs.n_fallback == nf && !refused)) {
                    for (int64_t k = 0; k < n_re; k++)
                        if (regexec(&re[k], pl->name, 0, NULL, 0) == 0 && (p->tt_types[k] != new_type || refused)) {
                            new_type = p->tt_types[k];
                            refused = 0;
                            snprintf(pl->reason, sizeof pl->reason, "--tensor-type %s=%s", p->tt_patterns[k], tname(new_type));
                        }
                }
            }
            if (p->token_embedding_type != TM_GGUF_TYPE_RULES && strcmp(pl->name, "token_embd.weight") == 0 &&
                new_type != p->token_embedding_type) {
                new_type = p->token_embedding_type;
                snprintf(pl->reason, sizeof pl->reason, "--token-embedding-type %s", tname(new_type));
            }
            if (p->output_tensor_type != TM_GGUF_TYPE_RULES && strcmp(pl->name, "output.weight") == 0 &&
                new_type != p->output_tensor_type) {
                new_type = p->output_tensor_type;
                snprintf(pl->reason, sizeof pl->reason, "--output-tensor-type %s", tname(new_type));
            }
            /* --pure, an override or an F16/BF16 file type may pick a type the row cannot hold */
            chosen = new_type;
            if (!refused && pl->ne[0] % blck(new_type) != 0) {
                rowfail = 1;
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
        /* llama_model_quantize_impl's checks of a tensor to convert, in its order: the
        ** importance matrix's entry, the very low-bit refusal, then the source type. It looks the
        ** entry up for the type it chose (an override it then cannot write, kept here in F16, is
        ** still that type) */
        const int want = rowfail ? chosen : new_type;
        if (!(pl->quantize || (rowfail && pl->src_type != want))) continue;
        /* the importance matrix, matched as llama_model_quantize_impl matches it */
        int matched = 0;
        const int takes = tm_gq_uses_imatrix(want) || !tm_gq_writable(want);
        if (imx) {
            const tm_imatrix_entry *e = tm_imatrix_find(imx, pl->name);
            size_t k = strlen(pl->reason);
            int dropped = 0;
            for (int64_t d = 0; !e && d < p->n_imatrix_dropped; d++)
                if (strcmp(p->imatrix_dropped[d], pl->name) == 0) dropped = 1;
            if (!e) {
                if (takes && !rowfail) {
                    pl->imx_use = dropped ? TM_GGUF_IMX_FILTERED : TM_GGUF_IMX_NO_ENTRY;
                    snprintf(pl->reason + k, sizeof pl->reason - k, dropped
                             ? "; its importance-matrix entry was dropped by --include-weights/--exclude-weights: quantized without weights"
                             : "; no importance-matrix entry: quantized without weights");
                } else if (!rowfail) {
                    pl->imx_use = TM_GGUF_IMX_IGNORED;
                }
            } else if (e->nval != pl->ne[0] * pl->ne[2]) {
                if (strcmp(pl->name, "token_embd.weight") != 0) {
                    s = tm__err_set(err, TM_E_INVALID_ARG, -1,
                                    "%s: tensor '%s': imatrix size %lld is different from tensor size %lld (%lld columns x "
                                    "%lld matrices); the importance matrix was made for another model",
                                    p->imatrix_arg ? p->imatrix_arg : imx->path, pl->name, (long long)e->nval,
                                    (long long)(pl->ne[0] * pl->ne[2]), (long long)pl->ne[0], (long long)pl->ne[2]);
                    break;
                }
                pl->imx_use = rowfail ? TM_GGUF_IMX_NONE : takes ? TM_GGUF_IMX_BAD_SIZE : TM_GGUF_IMX_IGNORED;
                if (!rowfail)
                    snprintf(pl->reason + k, sizeof pl->reason - k, "; importance-matrix entry of %lld values does not fit "
                             "(token_embd: llama-quantize quantizes it without weights)", (long long)e->nval);
            } else if (rowfail) {
                matched = 1; /* kept in F16, which takes no weights */
            } else if (takes) {
                pl->imx = e->weights;
                pl->imx_use = TM_GGUF_IMX_WEIGHTED;
                pl->imx_odd = tm_imatrix_odd_entry(e);
                matched = 1;
                snprintf(pl->reason + k, sizeof pl->reason - k, "; importance matrix%s",
                         pl->imx_odd == 1 ? " (its entry holds negative values)"
                         : pl->imx_odd == 2 ? " (its entry is all zero)" : "");
            } else {
                matched = 1;
                pl->imx_use = TM_GGUF_IMX_IGNORED;
                snprintf(pl->reason + k, sizeof pl->reason - k, "; %s ignores the importance matrix", tname(new_type));
            }
        }
        /* llama-quantize's refusal of a very low-bit type without weights */
        if (!matched &&
            (want == TM_GGML_IQ2_XXS || want == TM_GGML_IQ2_XS || want == TM_GGML_IQ2_S ||
             want == TM_GGML_IQ1_S ||
             (want == TM_GGML_IQ1_M && strcmp(pl->name, "token_embd.weight") && strcmp(pl->name, "output.weight")) ||
             (want == TM_GGML_Q2_K && p->ftype == TM_FTYPE_Q2_K_S && strcmp(pl->name, "token_embd.weight") != 0))) {
            s = tm__err_set(err, TM_E_INVALID_ARG, -1,
                            "Missing importance matrix for tensor %s in a very low-bit quantization (%s): the result would "
                            "be garbage, so llama-quantize bails out; pass --imatrix with an entry for it",
                            pl->name, tname(want));
            break;
        }
        if (pl->quantize && tm_ggml_type_info_get(pl->src_type)->is_quantized && !p->allow_requantize)
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1,
                            "%s: tensor '%s': requantizing from type %s is disabled (llama-quantize refuses it too; "
                            "--allow-requantize dequantizes and quantizes again)",
                            tm_file_path(in, 0), pl->name, tname(pl->src_type));
        else if (pl->quantize && pl->src_type != TM_GGML_F32 && pl->src_type != TM_GGML_F16 &&
                 pl->src_type != TM_GGML_BF16 && !tm_ggml_type_info_get(pl->src_type)->is_quantized)
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: tensor '%s': cannot convert type %s",
                            tm_file_path(in, 0), pl->name, tname(pl->src_type));
        if (s) break;
        if (!pl->quantize) continue;
        if (!tm_gq_writable(new_type))
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: tensor '%s': the rules of %s choose %s, which this build "
                            "cannot write yet", tm_file_path(in, 0), pl->name, tm_gguf_ftype_name(p->ftype), tname(new_type));
    }
    /* an already-quantized input whose tensors all keep their types: the output would be a copy
    ** (docs/exit-codes.md: exit 3 unless --allow-empty; COPY asks for the copy) */
    if (!s && !p->allow_empty && p->ftype != TM_FTYPE_COPY) {
        int64_t n_q = 0, i_q = -1;
        for (int64_t i = 0; i < j->n; i++) {
            n_q += j->plans[i].quantize;
            if (i_q < 0 && tm_ggml_type_info_get(j->plans[i].src_type)->is_quantized) i_q = i;
        }
        if (n_q == 0 && i_q >= 0)
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1,
                            "%s is already quantized (e.g. '%s' is %s) and %s changes no tensor's type: nothing to "
                            "quantize; quantize its full-precision source (--allow-empty writes the unchanged copy anyway)",
                            tm_file_path(in, 0), j->plans[i_q].name, tname(j->plans[i_q].src_type), tm_gguf_ftype_name(p->ftype));
    }
    j->qs = qs;
    j->n_refused = n_refused;
    return s;
}

/* A part (--shard) refuses, before it writes a byte, when a finished part of the same OUT was
** made with another importance-matrix content (its recipe's sha256; merge checks it too). */
static tm_status same_imatrix_as_parts(const tm_gguf_quantize_params *p, const tm__pipe *pp, tm_err *err) {
    const char *mine = p->imatrix && p->imatrix->n > 0 ? p->imatrix->sha256 : NULL;
    tm_status s = TM_OK;
    for (int k = 0; !s && k < pp->shard_n; k++) {
        if (k == pp->shard_i) continue;
        char *dir = tm__part_path(pp->final_out, k, pp->shard_n);
        char *mp = dir ? tm__aprintf("%s/tensormorph-manifest.json", dir) : NULL;
        json_t *m = mp ? json_load_file(mp, 0, NULL) : NULL;
        if (m) {
            json_t *im = json_object_get(json_object_get(m, "recipe"), "importance_matrix");
            const char *theirs = json_string_value(json_object_get(im, "sha256"));
            if ((mine || theirs) && (!mine || !theirs || strcmp(mine, theirs)))
                s = tm__err_set(err, TM_E_CORRUPT, -1,
                                "--shard %d/%d: %s: imatrix differs (that part's sha256 %.12s..., this run's %.12s...): "
                                "every part of %s must be made with the same importance-matrix content",
                                pp->shard_i, pp->shard_n, dir, theirs ? theirs : "(none)", mine ? mine : "(none)",
                                pp->final_out);
            json_decref(m);
        }
        free(mp);
        free(dir);
    }
    return s;
}

static tm_status gguf_plan(void *ctx, tm__pipe *pp, int64_t *n_tasks, tm_err *err) {
    gjob *j = ctx;
    tm_file *in = j->in;
    const tm_gguf_quantize_params *p = j->p;
    tm_status s = pp->shard_n ? same_imatrix_as_parts(p, pp, err) : TM_OK;
    if (!s) s = plan_types(j, err);
    tm_gguf_kvlist *kv = j->kv;
    gplan *plans = j->plans;
    const int64_t n = j->n;
    /* ---- writer ---- */
    if (!s) s = tm_gguf_kvlist_set_u32(kv, "general.quantization_version", 2, err);
    if (!s) s = tm_gguf_kvlist_set_u32(kv, "general.file_type", (uint32_t)out_ftype(p->ftype, kv, plans, n), err);
    if (!s) {
        tm_gguf_kvlist_remove(kv, "split.no");
        tm_gguf_kvlist_remove(kv, "split.count");
        tm_gguf_kvlist_remove(kv, "split.tensors.count");
    }
    /* --override-kv, then the importance matrix's record (llama-quantize appends its KV overrides
    ** in that order and gguf_set_val_* moves each key to the end) */
    for (int64_t k = 0; !s && p->kv_overrides && k < tm_gguf_kvlist_count(p->kv_overrides); k++) {
        size_t vn = 0;
        const void *v = tm_gguf_kvlist_raw(p->kv_overrides, k, &vn);
        s = tm_gguf_kvlist_set_raw(kv, tm_gguf_kvlist_key(p->kv_overrides, k), tm_gguf_kvlist_type(p->kv_overrides, k),
                                   v, vn, err);
    }
    if (!s && j->qs.has_imatrix) {
        const tm_imatrix *im = p->imatrix;
        char buf[128]; /* llama-quantize copies 127 bytes of each string (strncpy into val_str[128]) */
        snprintf(buf, sizeof buf, "%s", p->imatrix_arg ? p->imatrix_arg : im->path);
        s = tm_gguf_kvlist_set_str(kv, "quantize.imatrix.file", buf, err);
        if (!s && im->dataset && *im->dataset) {
            snprintf(buf, sizeof buf, "%s", im->dataset);
            s = tm_gguf_kvlist_set_str(kv, "quantize.imatrix.dataset", buf, err);
        }
        int32_t v32 = (int32_t)im->n;
        if (!s) s = tm_gguf_kvlist_set_raw(kv, "quantize.imatrix.entries_count", 5 /* INT32 */, &v32, 4, err);
        v32 = im->chunks;
        if (!s && im->chunks > 0) s = tm_gguf_kvlist_set_raw(kv, "quantize.imatrix.chunks_count", 5, &v32, 4, err);
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
        j->crclog = pp->crclog;
        if (p->source) s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "--shard: a GGUF output converted from another checkpoint cannot be written in parts yet");
    }
    /* --keep-split: the input's split files, each output tensor in its input tensor's file; a
    ** one-file input too gives OUT-00001-of-00001.gguf (without split keys), as llama-quantize */
    const int keep = p->keep_split && tm_file_format(in) == TM_FMT_GGUF;
    if (!s && p->keep_split && p->max_shard_bytes)
        s = tm__err_set(err, TM_E_INVALID_ARG, -1, "--keep-split and --max-shard-size exclude each other");
    int *file_of = !s && keep ? tm__calloc((size_t)n, sizeof *file_of) : NULL;
    if (!s && keep && !file_of) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t i = 0; file_of && i < n; i++) file_of[i] = tm_file_tensor(in, plans[i].src)->file_index;
    if (!s && (p->max_shard_bytes || keep)) s = tm__pipe_make_file_set(pp, err); /* llama.cpp split files */
    j->target = tm__pipe_file_target(pp);
    /* a part writes into the file(s) every part shares, the header part 0 only (part.h) */
    unsigned wflags = (p->allow_long_names ? TM_GGUF_WRITE_LONG_NAMES : 0) | (p->scratch && !pp->shared ? TM_GGUF_WRITE_SCRATCH : 0) |
                      (pp->shared ? TM_GGUF_WRITE_SHARED | (pp->shard_i == 0 ? TM_GGUF_WRITE_HEADER : 0) : 0) |
                      (keep ? TM_GGUF_WRITE_KEEP_SPLIT : 0);
    if (!s && pp->shared) s = tm__part_start(pp, err); /* the parts present: of this recipe? */
    if (!s && keep) s = tm_gguf_writer_open_split_as(j->target, kv, wt, n, file_of, tm_file_n_paths(in), wflags, &j->w, err);
    else if (!s) s = tm_gguf_writer_open_split(j->target, kv, wt, n, p->max_shard_bytes, wflags, &j->w, err);
    free(file_of);
    if (!s && pp->file_set) { /* the names now known: refused before the work, nothing touched */
        int nf = tm_gguf_writer_n_files(j->w);
        const char **names = tm__calloc((size_t)nf, sizeof *names);
        for (int k = 0; names && k < nf; k++) names[k] = tm_gguf_writer_file(j->w, k);
        s = names ? tm__pipe_check_set(pp, names, nf, err) : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        free(names);
    }
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
            const tm_gguf_tensor_cache *tc = p->tensor_cache;
            pl->cached = tc && tc->has(tc->ud, pl->name, pl->out_type, pl->imx != NULL, tm_gguf_writer_tensor_bytes(j->w, i));
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

/* Whether a plan's tensor went without the weights its type takes (no entry, filtered out, or a
** token_embd entry of another size): the "unweighted" count of the result and the manifest. */
static int imx_unweighted(const gplan *pl) {
    return pl->imx_use == TM_GGUF_IMX_NO_ENTRY || pl->imx_use == TM_GGUF_IMX_FILTERED ||
           pl->imx_use == TM_GGUF_IMX_BAD_SIZE;
}

static tm_status gguf_results(void *ctx, tm__pipe *pp, tm__qtotals *tot, tm_err *err) {
    gjob *j = ctx;
    (void)pp;
    const int64_t n = j->n;
    tm_gguf_quantize_result *res = j->res = calloc(1, sizeof *res);
    if (res) res->tensors = tm__calloc((size_t)(n ? n : 1), sizeof(tm_gguf_quantize_tensor));
    if (!res || !res->tensors) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    res->n_fallback = j->qs.n_fallback + j->n_refused;
    /* file bytes on both sides, as out_bytes (the files written) */
    for (int k = 0; k < tm_file_n_paths(j->in); k++) res->src_bytes += tm_file_size(j->in, k);
    for (int64_t i = 0; i < n; i++) {
        gplan *pl = &j->plans[i];
        tm_gguf_quantize_tensor *rt = &res->tensors[res->n++];
        const tm_tensor *t = tm_file_tensor(j->in, pl->src);
        rt->name = pl->name;
        rt->src_type = pl->src_type;
        rt->out_type = pl->out_type;
        rt->quantized = pl->quantize;
        rt->imatrix = pl->imx != NULL;
        rt->imatrix_use = pl->imx_use;
        rt->imatrix_odd = pl->imx_odd;
        res->n_imx_weighted += pl->imx_use == TM_GGUF_IMX_WEIGHTED;
        res->n_imx_unweighted += imx_unweighted(pl);
        snprintf(rt->reason, sizeof rt->reason, "%s", pl->reason);
        rt->n_elems = t->n_elems;
        rt->out_bytes = tm_gguf_writer_tensor_bytes(j->w, i);
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

/* The manifest's "recipe" and "calibration" (fixed by the plan: tm__qwriter.recipe_add). */
static void gguf_recipe(void *ctx, json_t *man) {
    gjob *j = ctx;
    const tm_gguf_quantize_params *p = j->p;
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
    if (j->qs.has_imatrix) {
        const tm_imatrix *im = p->imatrix;
        json_t *o = json_object();
        json_object_set_new(o, "file", json_string(p->imatrix_arg ? p->imatrix_arg : im->path));
        json_object_set_new(o, "format", json_string(im->is_gguf ? "gguf" : "legacy"));
        json_object_set_new(o, "dataset", im->dataset ? json_string(im->dataset) : json_null());
        json_object_set_new(o, "sha256", json_string(im->sha256));
        json_object_set_new(o, "entries", json_integer((json_int_t)im->n));
        json_object_set_new(o, "chunks", json_integer(im->chunks));
        json_object_set_new(recipe, "importance_matrix", o);
    } else {
        json_object_set_new(recipe, "importance_matrix", json_null());
    }
    if (p->output_tensor_type != TM_GGUF_TYPE_RULES)
        json_object_set_new(recipe, "output_tensor_type", json_string(tname(p->output_tensor_type)));
    if (p->token_embedding_type != TM_GGUF_TYPE_RULES)
        json_object_set_new(recipe, "token_embedding_type", json_string(tname(p->token_embedding_type)));
    if (p->tt_exact) json_object_set_new(recipe, "tensor_types_exact", json_true());
    json_object_set_new(man, "recipe", recipe);
    if (j->qs.has_imatrix) {
        /* from the plans (plan_types), not the run's result: a part's start hashes this text too
        ** (part_start.c), before any tensor is quantized */
        int64_t n_neg = 0, n_zero = 0, n_w = 0, n_unw = 0;
        for (int64_t i = 0; i < j->n; i++) {
            const gplan *pl = &j->plans[i];
            n_neg += pl->imx_odd == 1;
            n_zero += pl->imx_odd == 2;
            n_w += pl->imx_use == TM_GGUF_IMX_WEIGHTED;
            n_unw += imx_unweighted(pl);
        }
        char odd[160] = "";
        if (n_neg || n_zero)
            snprintf(odd, sizeof odd, "; %lld of them with negative and %lld with all-zero importances (used as they "
                     "are, as llama-quantize)", (long long)n_neg, (long long)n_zero);
        char *c = tm__aprintf("importance matrix %s (%s format, %lld entries, %d chunks of dataset '%s'): the K-quant and "
                              "IQ searches of %lld tensors weighted each column's error by it, as llama-quantize --imatrix%s; "
                              "%lld tensors whose type takes weights were quantized without (no entry)",
                              p->imatrix_arg ? p->imatrix_arg : p->imatrix->path, p->imatrix->is_gguf ? "GGUF" : "legacy",
                              (long long)p->imatrix->n, p->imatrix->chunks, p->imatrix->dataset ? p->imatrix->dataset : "",
                              (long long)n_w, odd, (long long)n_unw);
        tm__manifest_add_calibration(man, c ? c : "importance matrix");
        free(c);
    } else if (p->imatrix) {
        char *c = tm__aprintf("none: the importance matrix %s had no entry left after --include-weights/--exclude-weights "
                              "(%lld read): ggml's reference quantizers ran on the weights themselves",
                              p->imatrix_arg ? p->imatrix_arg : p->imatrix->path,
                              (long long)(p->imatrix_n_read ? p->imatrix_n_read : p->imatrix->n));
        tm__manifest_add_calibration(man, c ? c : "none");
        free(c);
    } else {
        tm__manifest_add_calibration(man, "none: no importance matrix; ggml's reference quantizers ran on the weights themselves");
    }
}

static tm_status gguf_manifest(void *ctx, json_t *man, tm_err *err) {
    gjob *j = ctx;
    tm_gguf_quantize_result *res = j->res;
    (void)err;
    gguf_recipe(ctx, man);
    json_t *ts = json_array();
    for (int64_t i = 0; i < res->n; i++) {
        tm_gguf_quantize_tensor *rt = &res->tensors[i];
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(rt->name));
        json_object_set_new(o, "decision", json_string(rt->quantized ? "quantized" : "kept"));
        json_object_set_new(o, "source_type", json_string(tname(rt->src_type)));
        json_object_set_new(o, "type", json_string(tname(rt->out_type)));
        json_object_set_new(o, "reason", json_string(rt->reason));
        json_object_set_new(o, "imatrix", json_boolean(rt->imatrix));
        if (rt->imatrix_odd)
            json_object_set_new(o, "imatrix_values", json_string(rt->imatrix_odd == 1 ? "negative" : "all zero"));
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
    .manifest_add = gguf_manifest, .recipe_add = gguf_recipe, .summary = gguf_summary, .tensor_spans = gguf_tensor_spans,
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

tm_status tm_gguf_quantize_plan(tm_file *in, const tm_gguf_quantize_params *p, tm_gguf_quantize_tensor **rows,
                                int64_t *n_rows, tm_err *err) {
    *rows = NULL;
    *n_rows = 0;
    tm_err_clear(err);
    if (!in || !p) return tm__err_set(err, TM_E_INVALID_ARG, -1, "tm_gguf_quantize_plan: no input or parameters");
    const int def_type = tm_gguf_ftype_default_type(p->ftype);
    if (def_type < 0) return tm__err_set(err, TM_E_INVALID_ARG, -1, "unknown GGUF file type %d", p->ftype);
    gjob j;
    memset(&j, 0, sizeof j);
    j.in = in;
    j.p = p;
    j.def_type = def_type;
    tm_status s = plan_types(&j, err);
    tm_gguf_quantize_tensor *r = s ? NULL : tm__calloc((size_t)(j.n ? j.n : 1), sizeof *r);
    if (!s && !r) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t i = 0; !s && i < j.n; i++) {
        const gplan *pl = &j.plans[i];
        const tm_ggml_type_info *ti = tm_ggml_type_info_get(pl->out_type);
        r[i].name = pl->name;
        r[i].src_type = pl->src_type;
        r[i].out_type = pl->out_type;
        r[i].quantized = pl->quantize;
        snprintf(r[i].reason, sizeof r[i].reason, "%s", pl->reason);
        r[i].n_elems = pl->ne[0] * pl->rows;
        r[i].out_bytes = ti && ti->block_size ? (uint64_t)(pl->ne[0] / (int64_t)ti->block_size) * ti->type_size * (uint64_t)pl->rows : 0;
    }
    free_plans(j.plans, j.n);
    tm_gguf_kvlist_free(j.kv);
    for (int64_t k = 0; k < j.n_re; k++) regfree(&j.re[k]);
    free(j.re);
    if (s) { free(r); return s; }
    *rows = r;
    *n_rows = j.n;
    return TM_OK;
}
