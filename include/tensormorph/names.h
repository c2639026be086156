/* tensormorph/names.h: tensor names across naming conventions. One table pairs the Hugging Face
** (transformers LLaMA) names with llama.cpp's GGUF names, and the q/k row permutation that
** llama.cpp's converter applies is undone, so that a safetensors checkpoint compares with its
** GGUF conversion (diff, qdiff). Layer analysis (src/analysis/names.c); included by
** tensormorph.h. */
/* the base API first, outside the guard, so this header compiles alone (docs/ARCHITECTURE.md
** "Public headers") */
#include "../tensormorph.h"
#ifndef TENSORMORPH_NAMES_H
#define TENSORMORPH_NAMES_H

#ifdef __cplusplus
extern "C" {
#endif

/* Which rows llama.cpp's converter permutes (convert_hf_to_gguf.py, LlamaModel.modify_tensors:
** q_proj with n_head, k_proj with n_head_kv; weights and biases alike). */
typedef enum tm_rope_rows {
    TM_ROPE_NONE = 0,   /* same element order in both conventions                             */
    TM_ROPE_Q,          /* rows permuted per attention head (n_head heads)                     */
    TM_ROPE_K           /* rows permuted per key/value head (n_head_kv heads)                  */
} tm_rope_rows;

/* One row of the name table. Names are module paths without the ".weight" / ".bias" suffix,
** which is carried over unchanged; "#" stands for the decimal layer number (the same number on
** both sides): {"model.layers.#.self_attn.q_proj", "blk.#.attn_q", TM_ROPE_Q} pairs
** model.layers.3.self_attn.q_proj.weight with blk.3.attn_q.weight. */
typedef struct tm_name_rule {
    const char  *hf;     /* Hugging Face transformers name                                      */
    const char  *gguf;   /* llama.cpp GGUF name (llama.cpp src/llama-arch.cpp, LLM_ARCH_LLAMA)  */
    tm_rope_rows rope;
} tm_name_rule;

/* The table (static storage); *n gets its length. */
const tm_name_rule *tm_name_rules(int *n);

/* tm_name_to_gguf / tm_name_from_gguf: the name of tensor `name` in the other convention,
** written to out[out_size] (NUL-terminated), and in *rope (may be NULL) whether its rows are
** permuted. Returns 1 when the table pairs the name, 0 when it does not (out then holds "") or
** when out_size is too small. */
/* tm_name_rule_index: the index in tm_name_rules of the rule that pairs Hugging Face name
** hf_name, and in *layer (may be NULL) its layer number (-1 for a rule without "#"); -1 when no
** rule does. The table's order is the tensor order convert writes (tensormorph/convert.h). */
int tm_name_rule_index(const char *hf_name, int *layer);
int tm_name_to_gguf(const char *hf_name, char *out, size_t out_size, tm_rope_rows *rope);
int tm_name_from_gguf(const char *gguf_name, char *out, size_t out_size, tm_rope_rows *rope);

/* tm_rope_row_hf: the Hugging Face row held by row `gguf_row` of a permuted tensor of n_rows
** rows and n_head heads (TM_ROPE_Q: n_head; TM_ROPE_K: n_head_kv). llama.cpp's converter writes
** w.reshape(n_head, 2, n_rows/n_head/2, cols).swapaxes(1, 2).reshape(n_rows, cols), so with
** d = n_rows/n_head and h, i, j the head, pair index and half: GGUF row h*d + 2*i + j holds HF
** row h*d + j*d/2 + i. tm_rope_row_gguf is its inverse. Both return -1 when n_head < 1, n_rows
** is not a multiple of 2*n_head or the row is outside [0, n_rows). */
int64_t tm_rope_row_hf(int64_t gguf_row, int64_t n_rows, int n_head);
int64_t tm_rope_row_gguf(int64_t hf_row, int64_t n_rows, int n_head);

/* tm_file_head_counts: attention heads of a checkpoint, from GGUF metadata
** "<general.architecture>.attention.head_count" and "...head_count_kv", else from config.json's
** num_attention_heads / num_key_value_heads (also under text_config). n_head_kv defaults to
** n_head. Returns 1 when n_head was found (both >= 1), else 0 with both set to 0. */
int tm_file_head_counts(const tm_file *f, int *n_head, int *n_head_kv);

/* How tensor `index` of one file pairs with a tensor of another (tm_tensor_pair). */
typedef struct tm_tensor_pair {
    int64_t      index;     /* the tensor of `f` in tm_tensor_pair, -1 when none                  */
    tm_rope_rows rope;      /* its rows are permuted relative to the other file's tensor          */
    int          n_head;    /* heads of that permutation (0 when rope == TM_ROPE_NONE)            */
    int          f_is_hf;   /* 1: f carries the HF names (the other file the GGUF ones)           */
    int64_t      rows, cols;/* shape[0] and the product of the other dimensions                   */
} tm_tensor_pair;

/* tm_tensor_pair_find: the tensor of f that pairs with tensor `other_index` of file `other`:
** the same name, else the name tm_name_to_gguf / tm_name_from_gguf gives, where f has no tensor
** of `other`'s name. For a q/k projection the heads come from whichever file states them
** (tm_file_head_counts, `other` first); where neither does, or the rows do not divide into
** 2*heads, the pair is refused (index -1). Returns 1 paired (*out filled), 0 not. */
int tm_tensor_pair_find(const tm_file *f, const tm_file *other, int64_t other_index,
                        tm_tensor_pair *out);

/* tm_tensor_pair_read_f32: logical elements [start, start+n) of p->index of f, in the element
** order of the other file's tensor (rows permuted where p->rope says so), as float32
** (tm_tensor_read_f32 per row segment). Errors as tm_tensor_read_f32. */
tm_status tm_tensor_pair_read_f32(const tm_file *f, const tm_tensor_pair *p, int64_t start,
                            int64_t n, float *out, tm_err *err);

#ifdef __cplusplus
}
#endif
#endif
