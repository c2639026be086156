/* demo.c: the built-in default checkpoint: a small LLaMA-shaped model with realistic weight
** statistics, generated offline and deterministically (same seed, same bytes). It gives
** `make demo` and the tests something real-looking to quantize without any download:
**   - Linear rows Gaussian with per-row standard deviations spread over a decade,
**   - a few outlier input channels (columns 10-40x larger), strongest in one down_proj,
**   - one all-zero row (layers.1.self_attn.o_proj row 3),
**   - RMSNorm weights near 1, an embedding and an untied lm_head. */
#include "../core/core.h"
#include "../core/fsutil.h"
#include "pipeline.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

enum { DEMO_DIM = 256, DEMO_HIDDEN = 688, DEMO_LAYERS = 4, DEMO_HEADS = 8, DEMO_KV_HEADS = 4,
       DEMO_VOCAB = 1024 };

typedef struct rng { uint64_t s; } rng;

static uint64_t splitmix64(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform01(rng *r) { return (double)(splitmix64(r) >> 11) * (1.0 / 9007199254740992.0); }
/* Marsaglia polar method: only sqrt and log, both correctly rounded enough in glibc. */
static double gauss(rng *r) {
    for (;;) {
        double u = 2 * uniform01(r) - 1, v = 2 * uniform01(r) - 1, s = u * u + v * v;
        if (s > 0 && s < 1) return u * sqrt(-2 * log(s) / s);
    }
}

typedef enum { K_LINEAR, K_NORM, K_EMBED } kind;
typedef struct spec {
    char name[96];
    kind k;
    int64_t rows, cols;       /* cols 0 for 1-D */
    double outlier_gain;      /* outlier input channels multiplier (LINEAR) */
    int zero_row;             /* row forced to zero, or -1 */
} spec;

static const int64_t outlier_cols[] = {7, 61, 190};

static void gen_tensor(const spec *sp, uint64_t seed, float *out) {
    rng r = {seed};
    if (sp->k == K_NORM) {
        for (int64_t i = 0; i < sp->rows; i++) out[i] = (float)(1.0 + 0.05 * gauss(&r));
        return;
    }
    for (int64_t i = 0; i < sp->rows; i++) {
        double sd = sp->k == K_EMBED ? 0.02 : 0.01 * pow(10.0, uniform01(&r)); /* 0.01 .. 0.1 */
        float *row = out + i * sp->cols;
        for (int64_t j = 0; j < sp->cols; j++) row[j] = (float)(sd * gauss(&r));
        if (sp->k == K_LINEAR && sp->outlier_gain > 1) {
            for (size_t c = 0; c < sizeof outlier_cols / sizeof outlier_cols[0]; c++)
                if (outlier_cols[c] < sp->cols) row[outlier_cols[c]] *= (float)sp->outlier_gain;
        }
        if (i == sp->zero_row) memset(row, 0, (size_t)sp->cols * sizeof(float));
    }
}

static int build_specs(spec *s) {
    int n = 0;
    const int64_t hd = DEMO_DIM / DEMO_HEADS, kv = DEMO_KV_HEADS * hd;
    snprintf(s[n].name, sizeof s[n].name, "model.embed_tokens.weight");
    s[n].k = K_EMBED; s[n].rows = DEMO_VOCAB; s[n].cols = DEMO_DIM; s[n].zero_row = -1; n++;
    for (int l = 0; l < DEMO_LAYERS; l++) {
        struct { const char *n; int64_t r, c; kind k; double og; } parts[] = {
            {"input_layernorm.weight", DEMO_DIM, 0, K_NORM, 0},
            {"self_attn.q_proj.weight", DEMO_DIM, DEMO_DIM, K_LINEAR, 4},
            {"self_attn.k_proj.weight", kv, DEMO_DIM, K_LINEAR, 4},
            {"self_attn.v_proj.weight", kv, DEMO_DIM, K_LINEAR, 2},
            {"self_attn.o_proj.weight", DEMO_DIM, DEMO_DIM, K_LINEAR, 1},
            {"post_attention_layernorm.weight", DEMO_DIM, 0, K_NORM, 0},
            {"mlp.gate_proj.weight", DEMO_HIDDEN, DEMO_DIM, K_LINEAR, 3},
            {"mlp.up_proj.weight", DEMO_HIDDEN, DEMO_DIM, K_LINEAR, 3},
            {"mlp.down_proj.weight", DEMO_DIM, DEMO_HIDDEN, K_LINEAR, l == 2 ? 40 : 1},
        };
        for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++) {
            snprintf(s[n].name, sizeof s[n].name, "model.layers.%d.%s", l, parts[p].n);
            s[n].k = parts[p].k;
            s[n].rows = parts[p].r;
            s[n].cols = parts[p].c;
            s[n].outlier_gain = parts[p].og;
            s[n].zero_row = (l == 1 && p == 4) ? 3 : -1;
            n++;
        }
    }
    snprintf(s[n].name, sizeof s[n].name, "model.norm.weight");
    s[n].k = K_NORM; s[n].rows = DEMO_DIM; s[n].cols = 0; s[n].zero_row = -1; n++;
    snprintf(s[n].name, sizeof s[n].name, "lm_head.weight");
    s[n].k = K_EMBED; s[n].rows = DEMO_VOCAB; s[n].cols = DEMO_DIM; s[n].zero_row = -1; n++;
    return n;
}

/* Write the two files into the directory `dir` (the staging directory). */
static tm_status write_demo_files(const char *dir, tm_dtype dtype, uint64_t seed, volatile const int *cancel,
                                  tm_err *err) {
    tm_status s;
    spec specs[2 + DEMO_LAYERS * 9 + 1];
    int n = build_specs(specs);
    tm_st_entry entries[sizeof specs / sizeof specs[0]];
    for (int i = 0; i < n; i++) {
        memset(&entries[i], 0, sizeof entries[i]);
        entries[i].name = specs[i].name;
        entries[i].dtype = dtype;
        entries[i].ndim = specs[i].cols ? 2 : 1;
        entries[i].shape[0] = specs[i].rows;
        entries[i].shape[1] = specs[i].cols;
    }
    char *path = tm__aprintf("%s/model.safetensors", dir);
    if (!path) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    const char *mk[] = {"format", "generator"};
    const char *mv[] = {"pt", "tensormorph demo checkpoint " TM_VERSION_STRING};
    tm_st_write_params wp;
    memset(&wp, 0, sizeof wp);
    wp.meta_keys = mk;
    wp.meta_values = mv;
    wp.n_meta = 2;
    tm_st_writer *w = NULL;
    s = tm_st_writer_open(path, entries, n, &wp, &w, err);
    free(path);
    if (s) return s;
    float *buf = NULL;
    void *conv = NULL;
    for (int i = 0; i < n && s == TM_OK; i++) {
        int64_t ne = specs[i].rows * (specs[i].cols ? specs[i].cols : 1);
        float *nb = realloc(buf, (size_t)ne * sizeof(float));
        void *nc = realloc(conv, (size_t)ne * sizeof(float));
        if (!nb || !nc) {
            free(nb ? nb : buf); free(nc ? nc : conv);
            buf = NULL; conv = NULL;
            s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
            break;
        }
        buf = nb; conv = nc;
        if (cancel && *cancel) { s = tm__err_set(err, TM_E_CANCELLED, -1, "interrupted"); break; }
        gen_tensor(&specs[i], seed * 0x100000001b3ull + (uint64_t)i * 7919u + 1, buf);
        s = tm_convert_from_f32(dtype, buf, ne, conv);
        if (s == TM_OK)
            s = tm_st_writer_write(w, i, 0, conv, (size_t)tm_dtype_nbytes(dtype, ne), err);
    }
    free(buf);
    free(conv);
    if (s == TM_OK) s = tm_st_writer_finish(w, err);
    tm_st_writer_free(w);
    if (s) return s;
    char *cfg = tm__aprintf(
        "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
        "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_attention_heads\": %d,\n"
        "  \"num_hidden_layers\": %d,\n  \"num_key_value_heads\": %d,\n  \"vocab_size\": %d,\n"
        "  \"max_position_embeddings\": 512,\n  \"rms_norm_eps\": 1e-05,\n  \"hidden_act\": \"silu\",\n"
        "  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"%s\"\n}\n",
        DEMO_DIM, DEMO_HIDDEN, DEMO_HEADS, DEMO_LAYERS, DEMO_KV_HEADS, DEMO_VOCAB,
        dtype == TM_F32 ? "float32" : dtype == TM_F16 ? "float16" : "bfloat16");
    char *cpath = tm__aprintf("%s/config.json", dir);
    if (!cfg || !cpath) { free(cfg); free(cpath); return tm__err_set(err, TM_E_NOMEM, -1, "oom"); }
    s = tm__write_file_atomic(cpath, cfg, strlen(cfg), err);
    free(cfg);
    free(cpath);
    return s;
}

/* Through the quantize pipeline (pipeline.c): the same check of DIR (new, empty, or with force a
** previous tensormorph output), DIR.lock, DIR.tmp.<pid> and rename, plus a manifest. */
tm_status tm_write_demo_output(const char *dir, tm_dtype dtype, uint64_t seed, int force, volatile const int *cancel,
                               const char *command_line, tm_err *err) {
    if (dtype != TM_F32 && dtype != TM_BF16 && dtype != TM_F16)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "demo checkpoint: dtype must be F32, F16 or BF16");
    tm__pipe pp;
    tm_status s = tm__pipe_begin(&pp, NULL, dir, TM__PIPE_DIR, "a demo checkpoint", force, 1, cancel, err);
    if (!s) s = write_demo_files(pp.stage, dtype, seed, cancel, err);
    if (!s) s = tm__pipe_phase(&pp, "fsync", err);
    json_t *man = s ? NULL : tm__pipe_manifest_new(&pp, command_line, 0, 1);
    if (!s && !man) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    char *mf = NULL, *cf = NULL, *js = NULL;
    uint64_t ob = 0;
    if (!s) {
        mf = tm__aprintf("%s/model.safetensors", pp.stage);
        cf = tm__aprintf("%s/config.json", pp.stage);
        const char *files[2] = {mf, cf};
        s = mf && cf ? tm__pipe_add_output(&pp, man, "safetensors", files, 2, 0, &ob, err)
                     : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    if (!s) {
        json_t *d = json_object();
        json_object_set_new(d, "dtype", json_string(tm_dtype_get(dtype)->name));
        json_object_set_new(d, "seed", json_integer((json_int_t)seed));
        json_object_set_new(man, "demo", d);
        s = tm__pipe_finish(&pp, man, NULL, 0, ob, tm__pipe_seconds(&pp), &js, err);
    }
    free(js);
    free(mf);
    free(cf);
    json_decref(man);
    tm__pipe_end(&pp);
    return s;
}

tm_status tm_write_demo_checkpoint(const char *dir, tm_dtype dtype, uint64_t seed, tm_err *err) {
    return tm_write_demo_output(dir, dtype, seed, 0, NULL, NULL, err);
}
