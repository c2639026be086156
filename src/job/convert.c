/* convert.c: a LLaMA/Mistral-family checkpoint -> a llama GGUF that llama.cpp loads
** (tensormorph/convert.h, docs/convert.md). Names and the q/k row permutation come from the one
** name table (src/analysis/names.c); values from the logical tensor view; the file goes through
** the quantize pipeline (pipeline.c) or, with --type, through the GGUF quantizer (gguf_job.c). */
#include "pipeline.h"
#include "tensormorph/convert.h"
#include "tensormorph/ggml.h"
#include "tensormorph/gguf_job.h"
#include "tensormorph/gguf_write.h"
#include "tensormorph/names.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CV_CHUNK (1 << 18)          /* floats per read: 1 MiB                                  */
#define CV_CONFIG_MAX (16u << 20)   /* config.json larger than this is refused                 */

tm_convert_params tm_convert_params_default(void) {
    tm_convert_params p;
    memset(&p, 0, sizeof p);
    p.outtype = TM_GGML_F32;
    return p;
}

void tm_convert_result_free(tm_convert_result *r) {
    if (!r) return;
    free(r->tensors);
    free(r->manifest_json);
    free(r->manifest_path);
    tm_gguf_quantize_result_free(r->quant);
    free(r);
}

static char *read_config(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    char *buf = NULL;
    struct stat st;
    if (fstat(fileno(fp), &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size <= CV_CONFIG_MAX) {
        buf = malloc((size_t)st.st_size + 1);
        if (buf && fread(buf, 1, (size_t)st.st_size, fp) != (size_t)st.st_size) {
            free(buf);
            buf = NULL;
        }
        if (buf) buf[st.st_size] = '\0';
    }
    fclose(fp);
    return buf;
}

char *tm_convert_config(const tm_file *f, const char *in_path) {
    const char *c = tm_file_config_json(f);
    if (c) return tm__strdup(c);
    if (!in_path) return NULL;
    struct stat st;
    char path[4096];
    if (stat(in_path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(path, sizeof path, "%s/config.json", in_path);
    } else {
        const char *sl = strrchr(in_path, '/');
        if (sl) snprintf(path, sizeof path, "%.*s/config.json", (int)(sl - in_path), in_path);
        else snprintf(path, sizeof path, "config.json");
    }
    return read_config(path);
}

/* Architectures convert handles: llama.cpp's LlamaModel (convert_hf_to_gguf.py registers
** LlamaForCausalLM and MistralForCausalLM for MODEL_ARCH.LLAMA). */
static const char *const k_archs[] = {"LlamaForCausalLM", "MistralForCausalLM"};
static const char *const k_model_types[] = {"llama", "mistral"};

int tm_convert_supported(const char *config_json, char *arch, size_t arch_size) {
    if (arch_size) arch[0] = '\0';
    json_t *root = config_json ? json_loads(config_json, 0, NULL) : NULL;
    if (!root) return 0;
    int ok = 0;
    json_t *a = json_array_get(json_object_get(root, "architectures"), 0);
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    if (json_is_string(a)) {
        snprintf(arch, arch_size, "%s", json_string_value(a));
        for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++) ok |= !strcmp(json_string_value(a), k_archs[i]);
    } else if (mt) {
        snprintf(arch, arch_size, "%s", mt);
        for (size_t i = 0; i < sizeof k_model_types / sizeof k_model_types[0]; i++) ok |= !strcmp(mt, k_model_types[i]);
    }
    json_decref(root);
    return ok;
}

/* ---- hyper-parameters ---- */

typedef struct cv_hparams {
    int64_t hidden, n_layer, n_head, n_head_kv, ffn, vocab, ctx, head_dim;
    double  eps, theta, rope_factor;  /* rope_factor 0: no scaling                            */
    int     tied;
} cv_hparams;

static int get_int(json_t *o, const char *key, int64_t *v) {
    json_t *x = json_object_get(o, key);
    if (!json_is_integer(x)) return 0;
    *v = json_integer_value(x);
    return 1;
}

static tm_status read_hparams(const char *cfg_text, const char *in_path, cv_hparams *h, tm_err *err) {
    memset(h, 0, sizeof *h);
    json_error_t je;
    json_t *c = json_loads(cfg_text, 0, &je);
    if (!c) return tm__err_set(err, TM_E_CORRUPT, -1, "%s: config.json: not valid JSON (%s)", in_path, je.text);
    tm_status s = TM_OK;
    static const char *const req[] = {"hidden_size", "num_hidden_layers", "num_attention_heads",
                                      "intermediate_size", "vocab_size", "max_position_embeddings"};
    int64_t *dst[] = {&h->hidden, &h->n_layer, &h->n_head, &h->ffn, &h->vocab, &h->ctx};
    for (size_t i = 0; i < 6 && !s; i++)
        if (!get_int(c, req[i], dst[i]) || *dst[i] < 1 || *dst[i] > ((int64_t)1 << 40))
            s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: config.json: \"%s\" missing or not a positive integer",
                            in_path, req[i]);
    if (!s && (!get_int(c, "num_key_value_heads", &h->n_head_kv) || h->n_head_kv < 1)) h->n_head_kv = h->n_head;
    if (!s && (!get_int(c, "head_dim", &h->head_dim) || h->head_dim < 1)) h->head_dim = h->hidden / h->n_head;
    if (!s && (h->n_head % h->n_head_kv || h->head_dim < 2))
        s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: config.json: %lld attention heads with %lld key/value heads and head_dim %lld",
                        in_path, (long long)h->n_head, (long long)h->n_head_kv, (long long)h->head_dim);
    json_t *x;
    h->eps = json_is_number(x = json_object_get(c, "rms_norm_eps")) ? json_number_value(x) : 1e-6; /* LlamaConfig's default */
    h->theta = json_is_number(x = json_object_get(c, "rope_theta")) ? json_number_value(x) : 10000.0;
    x = json_object_get(c, "tie_word_embeddings");
    h->tied = json_is_boolean(x) ? json_is_true(x) : 0; /* LlamaConfig / MistralConfig default */
    json_t *rs = json_object_get(c, "rope_scaling");
    if (!s && rs && !json_is_null(rs)) {
        const char *ty = json_string_value(json_object_get(rs, "rope_type"));
        if (!ty) ty = json_string_value(json_object_get(rs, "type"));
        json_t *fa = json_object_get(rs, "factor");
        if (ty && !strcmp(ty, "linear") && json_is_number(fa) && json_number_value(fa) > 0)
            h->rope_factor = json_number_value(fa);
        else
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: config.json: rope_scaling type '%s' is not supported by convert (null or linear)",
                            in_path, ty ? ty : "?");
    }
    json_decref(c);
    return s;
}

/* ---- metadata ---- */

static tm_status set_f32(tm_gguf_kvlist *kv, const char *key, double v, tm_err *err) {
    float f = (float)v;
    uint8_t b[4];
    memcpy(b, &f, 4); /* little-endian hosts only (the library's GGUF writer assumes it too) */
    return tm_gguf_kvlist_set_raw(kv, key, TM_GGUF_F32, b, 4, err);
}

/* The number of elements of an array entry, -1 when not an array. */
static int64_t array_len(const tm_gguf_kvlist *l, const char *key) {
    int64_t i = tm_gguf_kvlist_find(l, key);
    size_t n = 0;
    const uint8_t *v = tm_gguf_kvlist_raw(l, i, &n);
    if (i < 0 || tm_gguf_kvlist_type(l, i) != TM_GGUF_ARRAY || n < 12) return -1;
    uint64_t c;
    memcpy(&c, v + 4, 8);
    return (int64_t)c;
}

static tm_status build_kv(const cv_hparams *h, const char *name, const tm_convert_params *p, int file_type,
                          const char *dir, const char *cfg, tm_gguf_kvlist **out, tm_err *err) {
    tm_gguf_kvlist *kv = tm_gguf_kvlist_new(), *voc = NULL;
    if (!kv) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    tm_status s = tm_gguf_kvlist_set_str(kv, "general.architecture", "llama", err);
    if (!s) s = tm_gguf_kvlist_set_str(kv, "general.name", name, err);
    /* convert_hf_to_gguf.py's order (Model.set_gguf_parameters) */
    const struct { const char *k; int64_t v; } u[] = {
        {"llama.context_length", h->ctx}, {"llama.embedding_length", h->hidden},
        {"llama.block_count", h->n_layer}, {"llama.feed_forward_length", h->ffn},
        {"llama.rope.dimension_count", h->head_dim}, {"llama.attention.head_count", h->n_head},
        {"llama.attention.head_count_kv", h->n_head_kv}};
    for (size_t i = 0; i < sizeof u / sizeof u[0] && !s; i++)
        s = u[i].v > UINT32_MAX ? tm__err_set(err, TM_E_LIMIT, -1, "%s = %lld does not fit u32", u[i].k, (long long)u[i].v)
                                : tm_gguf_kvlist_set_u32(kv, u[i].k, (uint32_t)u[i].v, err);
    if (!s && h->head_dim * h->n_head != h->hidden) {
        s = tm_gguf_kvlist_set_u32(kv, "llama.attention.key_length", (uint32_t)h->head_dim, err);
        if (!s) s = tm_gguf_kvlist_set_u32(kv, "llama.attention.value_length", (uint32_t)h->head_dim, err);
    }
    if (!s) s = set_f32(kv, "llama.attention.layer_norm_rms_epsilon", h->eps, err);
    if (!s) s = set_f32(kv, "llama.rope.freq_base", h->theta, err);
    if (!s && h->rope_factor > 0) {
        s = tm_gguf_kvlist_set_str(kv, "llama.rope.scaling.type", "linear", err);
        if (!s) s = set_f32(kv, "llama.rope.scaling.factor", h->rope_factor, err);
    }
    if (!s) s = tm_gguf_kvlist_set_u32(kv, "llama.vocab_size", (uint32_t)h->vocab, err);
    if (!s) s = tm_gguf_kvlist_set_u32(kv, "general.file_type", (uint32_t)file_type, err);
    /* the tokenizer: the checkpoint's tokenizer.model (convert_vocab.c), or every tokenizer.* key
    ** of vocab_from, raw */
    if (!s && !p->vocab_from) {
        s = tm_convert_tokenizer_kv(dir, cfg, h->vocab, kv, err);
        if (s) {
            tm_gguf_kvlist_free(kv);
            return s;
        }
        *out = kv;
        return TM_OK;
    }
    if (!s) s = tm_gguf_kvlist_read(p->vocab_from, &voc, err);
    int64_t n_tok = 0;
    for (int64_t i = 0; !s && i < tm_gguf_kvlist_count(voc); i++) {
        const char *k = tm_gguf_kvlist_key(voc, i);
        if (strncmp(k, "tokenizer.", 10)) continue;
        size_t n;
        const void *v = tm_gguf_kvlist_raw(voc, i, &n);
        s = tm_gguf_kvlist_set_raw(kv, k, tm_gguf_kvlist_type(voc, i), v, n, err);
        n_tok++;
    }
    if (!s) {
        int64_t nt = array_len(voc, "tokenizer.ggml.tokens");
        if (!n_tok || nt < 0)
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "--vocab-from %s: no tokenizer.ggml.tokens array", p->vocab_from);
        else if (nt != h->vocab)
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "--vocab-from %s: %lld tokens, but config.json's vocab_size is %lld",
                            p->vocab_from, (long long)nt, (long long)h->vocab);
    }
    tm_gguf_kvlist_free(voc);
    if (s) {
        tm_gguf_kvlist_free(kv);
        return s;
    }
    *out = kv;
    return TM_OK;
}

/* ---- plan ---- */

typedef struct cv_item {
    int64_t        src;
    int            group, layer, rule;
    tm_tensor_pair pair;
    tm_gguf_wtensor wt;
    tm_convert_tensor info;
} cv_item;

static int cmp_item(const void *a, const void *b) {
    const cv_item *x = a, *y = b;
    if (x->group != y->group) return x->group - y->group;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return x->rule - y->rule;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static tm_status plan(const tm_file *in, const cv_hparams *h, int outtype, cv_item **out, int64_t *n_out,
                      int64_t *n_skipped, tm_err *err) {
    int n_rules, first_layer_rule = -1;
    const tm_name_rule *rules = tm_name_rules(&n_rules);
    for (int r = 0; r < n_rules && first_layer_rule < 0; r++)
        if (strchr(rules[r].hf, '#')) first_layer_rule = r;
    int64_t n = tm_file_n_tensors(in), k = 0;
    cv_item *it = tm__calloc((size_t)(n ? n : 1), sizeof *it);
    if (!it) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    tm_status s = TM_OK;
    const char *path0 = tm_file_path(in, 0);
    *n_skipped = 0;
    for (int64_t i = 0; i < n && !s; i++) {
        const tm_tensor *t = tm_file_tensor(in, i);
        if (t->role != TM_ROLE_DATA) continue;
        if (ends_with(t->name, ".rotary_emb.inv_freq") || (h->tied && !strcmp(t->name, "lm_head.weight"))) {
            (*n_skipped)++; /* convert_hf_to_gguf.py drops both */
            continue;
        }
        cv_item *c = &it[k];
        tm_rope_rows rope = TM_ROPE_NONE;
        c->src = i;
        c->rule = tm_name_rule_index(t->name, &c->layer);
        if (c->rule < 0 || !tm_name_to_gguf(t->name, c->info.name, sizeof c->info.name, &rope)) {
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: tensor '%s': no llama.cpp name for it (the name table, src/analysis/names.c)",
                            tm_file_path(in, t->file_index), t->name);
            break;
        }
        if (t->ndim < 1 || t->ndim > 2) {
            s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: tensor '%s' has %d dims (a LLaMA weight has 1 or 2)",
                            tm_file_path(in, t->file_index), t->name, t->ndim);
            break;
        }
        c->group = c->layer >= 0 ? 1 : (c->rule < first_layer_rule ? 0 : 2);
        snprintf(c->info.source, sizeof c->info.source, "%s", t->name);
        c->info.source_type = (int)t->dtype;
        c->info.quantized_source = t->quant != NULL;
        c->info.rope = (int)rope;
        c->pair.index = i;
        c->pair.rows = t->shape[0];
        c->pair.cols = t->n_elems / (t->shape[0] ? t->shape[0] : 1);
        c->pair.f_is_hf = 1;
        if (rope != TM_ROPE_NONE) {
            c->pair.rope = rope;
            c->pair.n_head = (int)(rope == TM_ROPE_Q ? h->n_head : h->n_head_kv);
            if (tm_rope_row_hf(0, c->pair.rows, c->pair.n_head) < 0) {
                s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: tensor '%s': %lld rows do not divide into 2 x %d heads (config.json)",
                                path0, t->name, (long long)c->pair.rows, c->pair.n_head);
                break;
            }
        }
        if (c->rule == 0 && (t->ndim != 2 || t->shape[0] != h->vocab || t->shape[1] != h->hidden)) {
            s = tm__err_set(err, TM_E_CORRUPT, -1, "%s: tensor '%s' is [%lld, %lld], config.json says vocab_size %lld, hidden_size %lld",
                            path0, t->name, (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0),
                            (long long)h->vocab, (long long)h->hidden);
            break;
        }
        c->wt.type = t->ndim == 1 ? TM_GGML_F32 : outtype; /* 1-D stays F32, as llama.cpp's converter keeps norms */
        c->wt.n_dims = t->ndim;
        c->wt.ne[0] = t->shape[t->ndim - 1];
        c->wt.ne[1] = t->ndim == 2 ? t->shape[0] : 1;
        c->wt.ne[2] = c->wt.ne[3] = 1;
        c->info.type = c->wt.type;
        k++;
    }
    if (!s && k == 0) s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: no LLaMA tensors", path0);
    if (s) {
        free(it);
        return s;
    }
    qsort(it, (size_t)k, sizeof *it, cmp_item);
    for (int64_t i = 0; i < k; i++) it[i].wt.name = it[i].info.name;
    *out = it;
    *n_out = k;
    return TM_OK;
}

/* ---- data ---- */

static int same_value(float a, float b) {
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

/* Tensor data in file order. In sequential mode (`seq`) each chunk is produced in the writer's
** stage (tm_gguf_writer_span/commit): read, permuted and narrowed in place, no copy after; a
** chunk the piece boundary cuts short is shortened, and a value that would straddle it (or a
** stage position not aligned for the type) goes through x/h and tm_gguf_writer_write. */
static tm_status write_data(const tm_file *in, cv_item *it, int64_t n, tm_gguf_writer *w, int seq,
                            volatile const int *cancel, tm_err *err) {
    float *x = malloc(CV_CHUNK * sizeof *x);
    uint16_t *h = malloc(CV_CHUNK * sizeof *h);
    tm_status s = x && h ? TM_OK : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t i = 0; i < n && !s; i++) {
        if (cancel && *cancel) {
            s = tm__err_set(err, TM_E_CANCELLED, -1, "interrupted");
            break;
        }
        const tm_tensor *t = tm_file_tensor(in, it[i].src);
        int type = it[i].wt.type;
        size_t esz = type == TM_GGML_F32 ? 4 : 2;
        for (int64_t e = 0, m = 0; e < t->n_elems && !s; e += m) {
            m = t->n_elems - e < CV_CHUNK ? t->n_elems - e : CV_CHUNK;
            void *dst = NULL;
            if (seq) {
                size_t av = 0;
                s = tm_gguf_writer_span(w, i, (uint64_t)e * esz, (size_t)m * esz, &dst, &av, err);
                if (s) break;
                if (av < esz || (uintptr_t)dst % esz) dst = NULL, m = 1;
                else if ((int64_t)(av / esz) < m) m = (int64_t)(av / esz);
            }
            float *xf = dst && type == TM_GGML_F32 ? (float *)dst : x;
            uint16_t *hf = dst ? (uint16_t *)dst : h;
            s = tm_tensor_pair_read_f32(in, &it[i].pair, e, m, xf, err);
            if (s) break;
            const void *data = x;
            if (type != TM_GGML_F32) {
                for (int64_t j = 0; j < m; j++) {
                    uint16_t v = type == TM_GGML_F16 ? tm_f32_to_f16(x[j]) : tm_f32_to_bf16(x[j]);
                    float back = type == TM_GGML_F16 ? tm_f16_to_f32(v) : tm_bf16_to_f32(v);
                    if (!same_value(back, x[j])) {
                        s = tm__err_set(err, TM_E_UNSUPPORTED, -1,
                                        "%s: tensor '%s': element %lld (%.9g) is not exact in %s; --outtype %s would round it "
                                        "(use --outtype f32, or --type for a quantized file)",
                                        tm_file_path(in, t->file_index), t->name, (long long)(e + j), (double)x[j],
                                        type == TM_GGML_F16 ? "F16" : "BF16", type == TM_GGML_F16 ? "f16" : "bf16");
                        break;
                    }
                    hf[j] = v;
                }
                data = h;
            }
            if (s) break;
            s = dst ? tm_gguf_writer_commit(w, (size_t)m * esz, err)
                    : tm_gguf_writer_write(w, i, (uint64_t)e * esz, data, (size_t)m * esz, err);
        }
        if (!t->quant) tm_tensor_release(in, it[i].src, 0, t->n_bytes);
        it[i].info.bytes = tm_gguf_writer_tensor_bytes(w, i);
    }
    free(x);
    free(h);
    return s;
}

/* Everything before the bytes: config, hyper-parameters, metadata, plan. */
typedef struct cv_job {
    cv_hparams     h;
    tm_gguf_kvlist *kv;
    cv_item       *it;
    int64_t        n, n_skipped;
    char           arch[64];
} cv_job;

static void model_name(const char *in_path, char *out, size_t size) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", in_path);
    size_t l = strlen(buf);
    while (l > 1 && buf[l - 1] == '/') buf[--l] = '\0';
    struct stat st;
    if (!(stat(buf, &st) == 0 && S_ISDIR(st.st_mode))) { /* a file: its directory names the model */
        char *sl = strrchr(buf, '/');
        if (sl) *sl = '\0';
        else snprintf(buf, sizeof buf, ".");
    }
    if (!strcmp(buf, ".")) {
        char cwd[4096];
        if (getcwd(cwd, sizeof cwd)) snprintf(buf, sizeof buf, "%s", cwd);
    }
    const char *b = strrchr(buf, '/');
    snprintf(out, size, "%s", b && b[1] ? b + 1 : buf);
}

/* The folder of the checkpoint: in_path when it is a directory, else its directory. */
static void checkpoint_dir(const char *in_path, char *out, size_t size) {
    struct stat st;
    if (stat(in_path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(out, size, "%s", in_path);
        return;
    }
    const char *sl = strrchr(in_path, '/');
    if (sl) snprintf(out, size, "%.*s", (int)(sl - in_path > 0 ? sl - in_path : 1), in_path);
    else snprintf(out, size, ".");
}

static tm_status prepare(tm_file *in, const char *in_path, const tm_convert_params *p, cv_job *j, tm_err *err) {
    memset(j, 0, sizeof *j);
    if (tm_file_format(in) == TM_FMT_GGUF)
        return tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s is already a GGUF file: convert reads Hugging Face checkpoints "
                           "(quantize changes a GGUF's types)", in_path);
    char *cfg = tm_convert_config(in, in_path);
    if (!cfg)
        return tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: no config.json beside the checkpoint: convert needs the model's "
                           "Hugging Face config.json (architecture and hyper-parameters)", in_path);
    tm_status s = TM_OK;
    json_error_t je;
    json_t *cj = json_loads(cfg, JSON_DECODE_ANY, &je);
    if (!cj)
        s = tm__err_set(err, TM_E_CORRUPT, je.position, "%s: config.json is not valid JSON: line %d, column %d: %s",
                        in_path, je.line, je.column, je.text);
    json_decref(cj);
    if (!s && !tm_convert_supported(cfg, j->arch, sizeof j->arch))
        s = tm__err_set(err, TM_E_UNSUPPORTED, -1, "%s: architecture '%s' is not supported by convert (LlamaForCausalLM, MistralForCausalLM)",
                        in_path, j->arch[0] ? j->arch : "(none in config.json)");
    if (!s) s = read_hparams(cfg, in_path, &j->h, err);
    char name[256], dir[4096];
    model_name(in_path, name, sizeof name);
    checkpoint_dir(in_path, dir, sizeof dir);
    int ft = p->outtype == TM_GGML_F16 ? TM_FTYPE_F16 : p->outtype == TM_GGML_BF16 ? TM_FTYPE_BF16 : TM_FTYPE_F32;
    if (!s) s = build_kv(&j->h, name, p, ft, dir, cfg, &j->kv, err);
    free(cfg);
    if (!s) s = plan(in, &j->h, p->outtype, &j->it, &j->n, &j->n_skipped, err);
    return s;
}

static void job_free(cv_job *j) {
    tm_gguf_kvlist_free(j->kv);
    free(j->it);
}

static tm_convert_result *result_new(const tm_file *in, const cv_job *j) {
    tm_convert_result *r = calloc(1, sizeof *r);
    if (!r || !(r->tensors = calloc((size_t)j->n + 1, sizeof *r->tensors))) {
        free(r);
        return NULL;
    }
    r->n = j->n;
    r->n_skipped = j->n_skipped;
    snprintf(r->architecture, sizeof r->architecture, "%s", j->arch);
    for (int64_t i = 0; i < j->n; i++) {
        r->tensors[i] = j->it[i].info;
        r->src_bytes += tm_file_tensor(in, j->it[i].src)->n_bytes;
        r->out_bytes += j->it[i].info.bytes;
    }
    return r;
}

static const char *rope_name(int rope) { return rope == TM_ROPE_Q ? "q" : rope == TM_ROPE_K ? "k" : NULL; }

static json_t *manifest_body(json_t *man, const cv_job *j, const tm_convert_params *p) {
    json_t *recipe = json_object();
    json_object_set_new(recipe, "format", json_string("gguf"));
    json_object_set_new(recipe, "conversion", json_string("convert: llama.cpp convert_hf_to_gguf.py LlamaModel layout"));
    json_object_set_new(recipe, "architecture", json_string(j->arch));
    json_object_set_new(recipe, "outtype", json_string(tm_ggml_type_info_get(p->outtype)->name));
    json_object_set_new(recipe, "vocab_from", p->vocab_from ? json_string(p->vocab_from) : json_null());
    json_t *hp = json_object();
    json_object_set_new(hp, "n_layer", json_integer(j->h.n_layer));
    json_object_set_new(hp, "n_head", json_integer(j->h.n_head));
    json_object_set_new(hp, "n_head_kv", json_integer(j->h.n_head_kv));
    json_object_set_new(hp, "head_dim", json_integer(j->h.head_dim));
    json_object_set_new(hp, "context_length", json_integer(j->h.ctx));
    json_object_set_new(hp, "rope_theta", json_real(j->h.theta));
    json_object_set_new(hp, "rms_norm_eps", json_real(j->h.eps));
    json_object_set_new(hp, "tie_word_embeddings", json_boolean(j->h.tied));
    json_object_set_new(recipe, "hparams", hp);
    json_object_set_new(man, "recipe", recipe);
    tm__manifest_add_calibration(man, "none: a conversion; values dequantized exactly through the tensor view");
    json_t *ts = json_array();
    for (int64_t i = 0; i < j->n; i++) {
        const tm_convert_tensor *t = &j->it[i].info;
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(t->name));
        json_object_set_new(o, "source", json_string(t->source));
        json_object_set_new(o, "source_dtype", json_string(tm_dtype_get((tm_dtype)t->source_type)->name));
        json_object_set_new(o, "dequantized", json_boolean(t->quantized_source));
        json_object_set_new(o, "type", json_string(tm_ggml_type_info_get(t->type)->name));
        json_object_set_new(o, "rope_permuted", rope_name(t->rope) ? json_string(rope_name(t->rope)) : json_null());
        json_object_set_new(o, "bytes", json_integer((json_int_t)t->bytes));
        json_array_append_new(ts, o);
    }
    json_object_set_new(man, "tensors", ts);
    return man;
}

/* Write the converted GGUF at `path` (the writer stages it as path.tmp.<pid> and renames). */
static tm_status write_gguf(tm_file *in, cv_job *j, const char *path, volatile const int *cancel,
                            tm__pipe *pp, int no_checksums, unsigned wflags, tm_err *err) {
    tm_gguf_wtensor *wt = tm__calloc((size_t)j->n, sizeof *wt);
    if (!wt) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int64_t i = 0; i < j->n; i++) wt[i] = j->it[i].wt;
    tm_gguf_writer *w = NULL;
    tm_status s = tm_gguf_writer_open_ex(path, j->kv, wt, j->n, wflags, &w, err);
    free(wt);
    if (!s && pp) s = tm__pipe_hash_start(pp, no_checksums, err);
    if (!s) s = write_data(in, j->it, j->n, w, (wflags & TM_GGUF_WRITE_SEQUENTIAL) != 0, cancel, err);
    if (!s && pp) s = tm__pipe_hash_wait(pp, err);
    if (!s) s = tm_gguf_writer_finish(w, err);
    tm_gguf_writer_free(w);
    return s;
}

static tm_status convert_plain(tm_file *in, cv_job *j, const char *out_path, const tm_convert_params *p,
                               tm_convert_result **out, tm_err *err) {
    tm__pipe pp;
    tm_status s = tm__pipe_begin(&pp, in, out_path, TM__PIPE_FILE, "a GGUF output", p->force, 1, p->cancel, err);
    /* written once, front to back: sequential mode (O_DIRECT, no copy into the page cache) unless
    ** the output is read back for its sha256 right after, which the page cache then serves */
    if (!s) s = write_gguf(in, j, pp.stage, p->cancel, &pp, p->no_checksums,
                           p->no_checksums ? TM_GGUF_WRITE_SEQUENTIAL : 0, err);
    if (!s) s = tm__pipe_phase(&pp, "fsync", err);
    tm_convert_result *r = NULL;
    json_t *man = NULL;
    if (!s && (!(r = result_new(in, j)) || !(man = tm__pipe_manifest_new(&pp, p->command_line, p->no_checksums, 1))))
        s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (!s) {
        manifest_body(man, j, p);
        const char *files[1] = {pp.stage};
        r->out_bytes = 0;
        s = tm__pipe_add_output(&pp, man, "gguf", files, 1, p->no_checksums, &r->out_bytes, err);
    }
    if (!s) {
        json_t *sum = tm__manifest_results_new(j->n, 0);
        json_object_set_new(sum, "n_skipped", json_integer(j->n_skipped));
        r->seconds = tm__pipe_seconds(&pp);
        r->manifest_path = tm__strdup(pp.man_final);
        s = r->manifest_path ? tm__pipe_finish(&pp, man, sum, r->src_bytes, r->out_bytes, r->seconds, &r->manifest_json, err)
                             : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    }
    json_decref(man);
    tm__pipe_end(&pp);
    if (s) {
        tm_convert_result_free(r);
        return s;
    }
    *out = r;
    return TM_OK;
}

/* The quantizer's result borrows its tensor names from its input, the intermediate file closed
** below: copy them to the end of the result's own tensors block (freed with it). */
static tm_status own_names(tm_gguf_quantize_result *qr, tm_err *err) {
    if (!qr || qr->n <= 0 || !qr->tensors) return TM_OK;
    size_t arr = (size_t)qr->n * sizeof *qr->tensors, names = 0;
    for (int64_t k = 0; k < qr->n; k++) names += strlen(qr->tensors[k].name ? qr->tensors[k].name : "") + 1;
    tm_gguf_quantize_tensor *t = realloc(qr->tensors, arr + names);
    if (!t) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    qr->tensors = t;
    char *p = (char *)t + arr;
    for (int64_t k = 0; k < qr->n; k++) {
        const char *nm = t[k].name ? t[k].name : "";
        size_t l = strlen(nm) + 1;
        memcpy(p, nm, l);
        t[k].name = p;
        p += l;
    }
    return TM_OK;
}

/* --type: an F32 GGUF beside OUT, then the GGUF quantizer into OUT (its manifest: the source). */
static tm_status convert_quant(tm_file *in, cv_job *j, const char *out_path, const tm_convert_params *p,
                               tm_convert_result **out, tm_err *err) {
    tm_status s = tm__check_file_output(in, out_path, p->force, "a GGUF output", err);
    if (s) return s;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.convert.%ld.gguf", out_path, (long)getpid());
    tm__outputs_hold(1); /* the intermediate GGUF beside OUT, until it is removed below */
    s = write_gguf(in, j, tmp, p->cancel, NULL, 1, 0, err); /* the quantizer reads it next: page cache */
    tm_file *mid = NULL;
    if (!s) s = tm_open(tmp, NULL, &mid, err);
    tm_gguf_quantize_result *qr = NULL;
    if (!s) {
        tm_gguf_quantize_params qp = *p->quant;
        qp.source = in;
        qp.force = p->force;
        qp.no_checksums = p->no_checksums;
        if (!qp.command_line) qp.command_line = p->command_line;
        if (!qp.cancel) qp.cancel = p->cancel;
        s = tm_gguf_quantize(mid, out_path, &qp, &qr, err);
        if (!s) s = own_names(qr, err);
    }
    tm_close(mid);
    unlink(tmp);
    tm__outputs_hold(-1);
    tm_convert_result *r = NULL;
    if (!s && !(r = result_new(in, j))) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (s) {
        tm_gguf_quantize_result_free(qr);
        return s;
    }
    r->quant = qr;
    r->out_bytes = qr->out_bytes;
    r->seconds = qr->seconds;
    r->manifest_json = qr->manifest_json ? tm__strdup(qr->manifest_json) : NULL;
    r->manifest_path = qr->manifest_path ? tm__strdup(qr->manifest_path) : NULL;
    *out = r;
    return TM_OK;
}

tm_status tm_convert_gguf(tm_file *in, const char *in_path, const char *out_path, const tm_convert_params *p,
                          tm_convert_result **out, tm_err *err) {
    *out = NULL;
    tm_err_clear(err);
    tm_convert_params defp = tm_convert_params_default();
    if (!p) p = &defp;
    if (p->outtype != TM_GGML_F32 && p->outtype != TM_GGML_F16 && p->outtype != TM_GGML_BF16)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "convert: outtype must be F32, F16 or BF16");
    if (p->quant && p->outtype != TM_GGML_F32)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "convert: --type quantizes from F32; --outtype does not apply");
    cv_job j;
    tm_status s = prepare(in, in_path ? in_path : tm_file_path(in, 0), p, &j, err);
    if (!s) s = p->quant ? convert_quant(in, &j, out_path, p, out, err) : convert_plain(in, &j, out_path, p, out, err);
    job_free(&j);
    return s;
}
