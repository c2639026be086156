/* names.c: tensor names across naming conventions (Hugging Face transformers <-> llama.cpp GGUF)
** and the q/k row permutation of llama.cpp's converter, so that diff and qdiff pair a
** safetensors checkpoint with its GGUF conversion. The table is the one place that knows the
** names; a converter reuses it through tm_name_rules. */
#include "../core/core.h"

#include <jansson.h>
#include <stdio.h>

/* LLaMA-family names: transformers' LlamaForCausalLM state dict and llama.cpp's
** LLM_ARCH_LLAMA tensor names (llama.cpp src/llama-arch.cpp; gguf-py constants.py
** MODEL_TENSOR_NAMES). The ".weight" / ".bias" suffix is carried over. The order is the order
** convert writes (token_embd, each layer's tensors, output_norm, output: the order of gguf-py's
** stories260K conversion in ../shared), so the table is also convert's tensor order. */
static const tm_name_rule k_rules[] = {
    {"model.embed_tokens", "token_embd", TM_ROPE_NONE},
    {"model.layers.#.input_layernorm", "blk.#.attn_norm", TM_ROPE_NONE},
    {"model.layers.#.self_attn.q_proj", "blk.#.attn_q", TM_ROPE_Q},
    {"model.layers.#.self_attn.k_proj", "blk.#.attn_k", TM_ROPE_K},
    {"model.layers.#.self_attn.v_proj", "blk.#.attn_v", TM_ROPE_NONE},
    {"model.layers.#.self_attn.o_proj", "blk.#.attn_output", TM_ROPE_NONE},
    {"model.layers.#.post_attention_layernorm", "blk.#.ffn_norm", TM_ROPE_NONE},
    {"model.layers.#.mlp.gate_proj", "blk.#.ffn_gate", TM_ROPE_NONE},
    {"model.layers.#.mlp.down_proj", "blk.#.ffn_down", TM_ROPE_NONE},
    {"model.layers.#.mlp.up_proj", "blk.#.ffn_up", TM_ROPE_NONE},
    {"model.norm", "output_norm", TM_ROPE_NONE},
    {"lm_head", "output", TM_ROPE_NONE},
};

const tm_name_rule *tm_name_rules(int *n) {
    if (n) *n = (int)(sizeof k_rules / sizeof k_rules[0]);
    return k_rules;
}

/* Match name against pattern `pat` followed by ".weight" or ".bias"; "#" in pat matches one or
** more decimal digits. On a match, *layer / *layer_len give the digits and *suffix the suffix. */
static int match(const char *pat, const char *name, const char **layer, size_t *layer_len,
                 const char **suffix) {
    *layer = NULL;
    *layer_len = 0;
    for (; *pat; pat++) {
        if (*pat == '#') {
            const char *d = name;
            while (*name >= '0' && *name <= '9') name++;
            if (name == d || name - d > 9) return 0;
            *layer = d;
            *layer_len = (size_t)(name - d);
        } else if (*name++ != *pat) {
            return 0;
        }
    }
    if (strcmp(name, ".weight") && strcmp(name, ".bias")) return 0;
    *suffix = name;
    return 1;
}

/* Write pattern `pat` with "#" replaced by the layer digits, then the suffix. */
static int render(const char *pat, const char *layer, size_t layer_len, const char *suffix,
                  char *out, size_t out_size) {
    size_t p = 0;
    for (; *pat; pat++) {
        if (*pat == '#') {
            if (p + layer_len >= out_size) return 0;
            memcpy(out + p, layer, layer_len);
            p += layer_len;
        } else {
            if (p + 1 >= out_size) return 0;
            out[p++] = *pat;
        }
    }
    int w = snprintf(out + p, out_size - p, "%s", suffix);
    return w >= 0 && (size_t)w < out_size - p;
}

static int translate(const char *name, int to_gguf, char *out, size_t out_size, tm_rope_rows *rope) {
    if (out_size) out[0] = '\0';
    if (rope) *rope = TM_ROPE_NONE;
    if (!name || !out || !out_size) return 0;
    for (size_t i = 0; i < sizeof k_rules / sizeof k_rules[0]; i++) {
        const tm_name_rule *r = &k_rules[i];
        const char *layer, *suffix;
        size_t ll;
        if (!match(to_gguf ? r->hf : r->gguf, name, &layer, &ll, &suffix)) continue;
        if (!render(to_gguf ? r->gguf : r->hf, layer, ll, suffix, out, out_size)) {
            out[0] = '\0';
            return 0;
        }
        if (rope) *rope = r->rope;
        return 1;
    }
    return 0;
}

int tm_name_rule_index(const char *hf_name, int *layer) {
    if (layer) *layer = -1;
    for (size_t i = 0; hf_name && i < sizeof k_rules / sizeof k_rules[0]; i++) {
        const char *d, *suffix;
        size_t ll;
        if (!match(k_rules[i].hf, hf_name, &d, &ll, &suffix)) continue;
        if (layer && d) *layer = (int)strtol(d, NULL, 10); /* at most 9 digits (match) */
        return (int)i;
    }
    return -1;
}

int tm_name_to_gguf(const char *hf_name, char *out, size_t out_size, tm_rope_rows *rope) {
    return translate(hf_name, 1, out, out_size, rope);
}

int tm_name_from_gguf(const char *gguf_name, char *out, size_t out_size, tm_rope_rows *rope) {
    return translate(gguf_name, 0, out, out_size, rope);
}

int64_t tm_rope_row_hf(int64_t g, int64_t n_rows, int n_head) {
    if (n_head < 1 || n_rows <= 0 || n_rows % (2 * (int64_t)n_head) || g < 0 || g >= n_rows) return -1;
    int64_t d = n_rows / n_head, h = g / d, r = g % d;
    return h * d + (r % 2) * (d / 2) + r / 2;
}

int64_t tm_rope_row_gguf(int64_t f, int64_t n_rows, int n_head) {
    if (n_head < 1 || n_rows <= 0 || n_rows % (2 * (int64_t)n_head) || f < 0 || f >= n_rows) return -1;
    int64_t d = n_rows / n_head, h = f / d, r = f % d;
    return h * d + 2 * (r % (d / 2)) + r / (d / 2);
}

static const char *meta_get(const tm_file *f, const char *key) {
    for (int64_t i = 0; i < tm_file_n_meta(f); i++)
        if (!strcmp(tm_file_meta_key(f, i), key)) return tm_file_meta_value(f, i);
    return NULL;
}

static int parse_heads(const char *s) {
    if (!s) return 0;
    char *end;
    long v = strtol(s, &end, 10);
    return (end != s && *end == '\0' && v >= 1 && v <= 1 << 20) ? (int)v : 0;
}

static int json_heads(const json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    json_int_t x = json_is_integer(v) ? json_integer_value(v) : 0;
    return (x >= 1 && x <= 1 << 20) ? (int)x : 0;
}

int tm_file_head_counts(const tm_file *f, int *n_head, int *n_head_kv) {
    *n_head = *n_head_kv = 0;
    if (!f) return 0;
    const char *arch = meta_get(f, "general.architecture");
    if (arch) {
        char key[160];
        snprintf(key, sizeof key, "%s.attention.head_count", arch);
        *n_head = parse_heads(meta_get(f, key));
        snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
        *n_head_kv = parse_heads(meta_get(f, key));
    }
    const char *cfg = tm_file_config_json(f);
    if (!*n_head && cfg) {
        json_t *root = json_loads(cfg, 0, NULL);
        const json_t *o = root;
        if (o && !json_object_get(o, "num_attention_heads") && json_object_get(o, "text_config"))
            o = json_object_get(o, "text_config");
        *n_head = json_heads(o, "num_attention_heads");
        *n_head_kv = json_heads(o, "num_key_value_heads");
        json_decref(root);
    }
    if (!*n_head) { *n_head_kv = 0; return 0; }
    if (!*n_head_kv) *n_head_kv = *n_head;
    return 1;
}

int tm_tensor_pair_find(const tm_file *f, const tm_file *other, int64_t other_index,
                        tm_tensor_pair *out) {
    memset(out, 0, sizeof *out);
    out->index = -1;
    const tm_tensor *ot = tm_file_tensor(other, other_index);
    if (!f || !ot) return 0;
    int64_t j = tm_file_find(f, ot->name);
    if (j >= 0) { out->index = j; return 1; }
    char name[512];
    tm_rope_rows rope = TM_ROPE_NONE;
    int f_is_hf = 1;
    if (!tm_name_from_gguf(ot->name, name, sizeof name, &rope)) {
        f_is_hf = 0;
        if (!tm_name_to_gguf(ot->name, name, sizeof name, &rope)) return 0;
    }
    j = tm_file_find(f, name);
    const tm_tensor *t = tm_file_tensor(f, j);
    if (!t) return 0;
    out->f_is_hf = f_is_hf;
    out->rows = t->ndim ? t->shape[0] : 1;
    out->cols = out->rows ? t->n_elems / out->rows : 0;
    if (rope != TM_ROPE_NONE) {
        int h = 0, hkv = 0;
        if (!tm_file_head_counts(other, &h, &hkv)) tm_file_head_counts(f, &h, &hkv);
        int heads = rope == TM_ROPE_Q ? h : hkv;
        if (tm_rope_row_hf(0, out->rows, heads) < 0) return 0;
        out->rope = rope;
        out->n_head = heads;
    }
    out->index = j;
    return 1;
}

tm_status tm_tensor_pair_read_f32(const tm_file *f, const tm_tensor_pair *p, int64_t start,
                                  int64_t n, float *out, tm_err *err) {
    if (p->rope == TM_ROPE_NONE || p->cols <= 0) return tm_tensor_read_f32(f, p->index, start, n, out, err);
    int64_t end = start + n;
    if (start < 0 || n < 0 || end > p->rows * p->cols)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "pair read: range [%lld, %lld) outside the tensor",
                           (long long)start, (long long)end);
    for (int64_t e = start; e < end;) {
        int64_t row = e / p->cols, col = e % p->cols;
        int64_t len = p->cols - col < end - e ? p->cols - col : end - e;
        /* the other file's row `row` is f's row src */
        int64_t src = p->f_is_hf ? tm_rope_row_hf(row, p->rows, p->n_head)
                                 : tm_rope_row_gguf(row, p->rows, p->n_head);
        tm_status s = tm_tensor_read_f32(f, p->index, src * p->cols + col, len, out + (e - start), err);
        if (s) return s;
        e += len;
    }
    return TM_OK;
}
