/*
** tensormorph/convert.h: turn a LLaMA/Mistral-family checkpoint (Hugging Face safetensors F32/F16/
** BF16, single or sharded, compressed-tensors, GPTQ, AWQ, a PyTorch state dict beside a
** config.json) into a llama GGUF that llama.cpp loads (docs/convert.md):
**   - hyper-parameters from config.json: llama.context_length (max_position_embeddings),
**     embedding_length, block_count, feed_forward_length, rope.dimension_count (head_dim, else
**     hidden_size / num_attention_heads), attention.head_count, head_count_kv, the rms epsilon,
**     rope.freq_base (rope_theta, default 10000), vocab_size; tie_word_embeddings: no output.weight
**     (llama.cpp then uses token_embd), as llama.cpp's convert_hf_to_gguf.py writes them;
**   - llama.cpp tensor names from the one name table (tensormorph/names.h, tm_name_rules) and the
**     q/k row permutation of convert_hf_to_gguf.py's LlamaModel.permute, read through
**     tm_tensor_pair_read_f32 (the same code diff and qdiff pair files with);
**   - every value through the logical tensor view (tm_tensor_read_f32: quantized tensors are
**     dequantized, scale*(q - zero_point)) into F32, or F16/BF16 when every value of the tensor
**     converts back to the same float (lossless); 1-D tensors stay F32 as llama.cpp keeps them;
**   - the tokenizer: every "tokenizer.*" key of a GGUF given as vocab_from, bit for bit.
** Tensor order: token_embd, then per layer (by number) in the name table's order, then output_norm
** and output; this is the order of ../shared's stories260K-F32.gguf (gguf-py).
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_CONVERT_H
#define TENSORMORPH_CONVERT_H

#ifdef __cplusplus
extern "C" {
#endif

struct tm_gguf_quantize_params;
struct tm_gguf_quantize_result;

typedef struct tm_convert_params {
    const char *vocab_from;    /* a GGUF whose tokenizer.* keys are copied; NULL: the checkpoint's
                                  tokenizer.model is read (tm_convert_tokenizer_kv), else refused */
    int         outtype;       /* TM_GGML_F32 (default), TM_GGML_F16 or TM_GGML_BF16            */
    const struct tm_gguf_quantize_params *quant; /* non-NULL: then quantize with these parameters (the
                                  GGUF quantizer and its llama-quantize mixture rules, run on
                                  the converted GGUF names); outtype must be F32                */
    int         force;         /* replace an OUT that is a previous tensormorph output         */
    int         no_checksums;
    int         n_threads;     /* for the quantizer; conversion itself runs on one thread      */
    const char *command_line;  /* recorded in the manifest                                     */
    volatile const int *cancel;
} tm_convert_params;

tm_convert_params tm_convert_params_default(void); /* F32, no vocab, no quantization */

/* One output tensor. */
typedef struct tm_convert_tensor {
    char    name[96];          /* the GGUF name                                                */
    char    source[160];       /* the source (logical) name                                    */
    int     source_type;       /* tm_dtype of the source's stored values (its codes if quantized)*/
    int     quantized_source;  /* 1: dequantized from a quantized tensor                       */
    int     type;              /* ggml type written                                            */
    int     rope;              /* tm_rope_rows applied                                         */
    uint64_t bytes;
} tm_convert_tensor;

typedef struct tm_convert_result {
    tm_convert_tensor *tensors; int64_t n;
    int64_t  n_skipped;        /* source tensors not written (tied lm_head, rotary inv_freq)   */
    uint64_t src_bytes, out_bytes;
    double   seconds;
    char     architecture[64]; /* config.json architectures[0]                                 */
    char    *manifest_json;    /* malloc'd                                                     */
    char    *manifest_path;
    struct tm_gguf_quantize_result *quant; /* with params.quant: the quantizer's result, else NULL     */
} tm_convert_result;

/* tm_convert_config: config.json of a checkpoint, as a malloc'd string: tm_file_config_json(f),
** else "config.json" in the directory of in_path (or in in_path when it is a directory).
** NULL when there is none. */
char *tm_convert_config(const tm_file *f, const char *in_path);

/* tm_convert_supported: 1 when config_json names an architecture convert handles
** (architectures[0] LlamaForCausalLM or MistralForCausalLM, else model_type llama / mistral),
** with its name in arch[arch_size]; 0 otherwise (arch gets the name found, or ""). */
int tm_convert_supported(const char *config_json, char *arch, size_t arch_size);

/* tm_convert_gguf: write out_path (a GGUF v3 file, alignment 32) from `in` opened from in_path.
** Without p->quant the file goes through the quantize pipeline (src/job/pipeline.c): OUT.lock,
** staged as "OUT.tmp.<pid>", fsynced, renamed, "OUT.manifest.json" beside it. With p->quant an
** F32 GGUF is built beside OUT ("OUT.convert.<pid>.gguf", removed afterwards) and quantized into
** OUT by tm_gguf_quantize, whose manifest names `in`'s files as the source.
** Returns TM_OK | TM_E_INVALID_ARG (OUT refused; bad outtype) | TM_E_UNSUPPORTED (a GGUF input, no config.json,
** an architecture other than LLaMA/Mistral (named), rope_scaling other than null/linear, a tensor
** the name table does not know (named), no vocab_from, a vocabulary whose size differs from
** vocab_size, --outtype f16/bf16 that would round a value (tensor and element named)) |
** TM_E_CORRUPT (config.json values missing or inconsistent with the tensors, named) | TM_E_IO |
** TM_E_NOMEM | TM_E_CANCELLED, and the quantizer's. Free the result with tm_convert_result_free. */
tm_status tm_convert_gguf(tm_file *in, const char *in_path, const char *out_path,
                          const tm_convert_params *p, tm_convert_result **out, tm_err *err);
void      tm_convert_result_free(tm_convert_result *r);

struct tm_gguf_kvlist;

/* tm_convert_tokenizer_kv: append to kv the tokenizer.* keys llama.cpp's convert_hf_to_gguf.py
** writes for a llama SentencePiece tokenizer in the checkpoint folder dir (LlamaModel.set_vocab ->
** _set_vocab_sentencepiece, _create_vocab_sentencepiece, gguf-py SpecialVocab), in its order:
**   tokenizer.ggml.model "llama", tokenizer.ggml.pre "default", tokenizer.ggml.tokens (string[]),
**   tokenizer.ggml.scores (f32[]), tokenizer.ggml.token_type (i32[]) with vocab_size entries:
**   tokenizer.model's pieces (type UNKNOWN 2, CONTROL 3, UNUSED 5, BYTE 6, else NORMAL 1), ids it
**   does not define "[PAD<id>]" score -10000 UNUSED; added_tokens.json entries USER_DEFINED 4
**   score -1000; tokenizer_config.json added_tokens_decoder entries score -1000, CONTROL when
**   "special" or the text looks special (<|...|>, <pad>, <mask>, <unused...>), else USER_DEFINED
**   with U+2581 written as a space; then the <typ>_token_id of config_json (bos, eos, unk, sep,
**   pad, cls, mask -> tokenizer.ggml.bos_token_id, eos_token_id, unknown_token_id,
**   seperator_token_id, padding_token_id, cls_token_id, mask_token_id; u32; ids >= vocab_size
**   left out), tokenizer_config.json's add_bos_token / add_eos_token (bool) and chat_template.
** tokenizer.model is sentencepiece's ModelProto, read by a bounded protobuf wire reader with the
** checks sentencepiece's loader makes (one UNKNOWN piece, unique pieces, BYTE pieces only with
** byte_fallback, non-empty UTF-8 pieces).
** Returns TM_OK | TM_E_UNSUPPORTED (no tokenizer.model, the message naming --vocab-from and saying
** why a tokenizer.json alone is not read; a tokenizer.json beside it (its added tokens and
** post-processor would change the special keys); more pieces than vocab_size; a chat_template
** that is not a string) | TM_E_CORRUPT (file, byte offset and reason) | TM_E_IO | TM_E_NOMEM |
** TM_E_LIMIT | TM_E_INVALID_ARG (vocab_size < 1). On error kv may hold some of the keys. */
tm_status tm_convert_tokenizer_kv(const char *dir, const char *config_json, int64_t vocab_size,
                                  struct tm_gguf_kvlist *kv, tm_err *err);

#ifdef __cplusplus
}
#endif
#endif
