/* test_convert.c: `convert` (issue 13 "Convert"): a Hugging Face LLaMA checkpoint in every form
** ../shared holds becomes the llama GGUF that gguf-py made from the same weights (PROVENANCE.md
** [D2]): same tensor names, order, types, shapes and bytes; --type Q4_K_M gives the tensors of
** quantizing stories260K-F32.gguf; compressed-tensors made by `quantize` convert to their
** dequantized values (and GPTQ/AWQ ones built here); a sentencepiece tokenizer.model written from
** stories260K-F32.gguf's vocabulary gives its tokenizer.* keys (+ tokenizer.ggml.pre) and KLD 0;
** the refusals (architecture, tokenizer, lossy --outtype); the CLI and the `quantize DIR -o
** X.gguf` route (no tokenizer: exit 3); the GGUF writer's sequential mode. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/jschema.h"
#include "helpers/cli_run.h"
#include "helpers/llama_rt.h"
#include "helpers/vectors.h"
#include "tensormorph.h"
#include "tensormorph/gguf_write.h"

static char g_tmp[64];

static const char *model(const char *rel) {
    static char buf[8][4096];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/models/%s", tmv_shared_dir(), rel);
    return buf[k];
}

static const char *tmp(const char *leaf) {
    static char buf[8][4096];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_tmp, leaf);
    return buf[k];
}

static int ggml_type_of(const tm_tensor *t) {
    if (t->quant) return t->quant->ggml_type;
    return t->dtype == TM_F32 ? TM_GGML_F32 : t->dtype == TM_F16 ? TM_GGML_F16 : t->dtype == TM_BF16 ? TM_GGML_BF16 : -1;
}

static const char *meta(const tm_file *f, const char *key) {
    for (int64_t i = 0; i < tm_file_n_meta(f); i++)
        if (!strcmp(tm_file_meta_key(f, i), key)) return tm_file_meta_value(f, i);
    return NULL;
}

/* got and want hold the same tensors: names (in the same order when `order`), types, shapes,
** bytes; and the same hyper-parameters and tokenizer metadata. */
static void same_tensors_ex(const char *got_path, const char *want_path, int order, int skip_1d) {
    tm_file *g, *w;
    assert_int_equal(tm_open(got_path, NULL, &g, NULL), TM_OK);
    assert_int_equal(tm_open(want_path, NULL, &w, NULL), TM_OK);
    assert_int_equal(tm_file_n_tensors(g), tm_file_n_tensors(w));
    for (int64_t i = 0; i < tm_file_n_tensors(w); i++) {
        const tm_tensor *wt = tm_file_tensor(w, i);
        int64_t j = tm_file_find(g, wt->name);
        if (j < 0) fail_msg("%s: no tensor %s", got_path, wt->name);
        if (order) assert_int_equal(j, i);
        const tm_tensor *gt = tm_file_tensor(g, j);
        if (skip_1d && wt->ndim == 1) continue;
        if (ggml_type_of(gt) != ggml_type_of(wt)) fail_msg("%s: type %d, want %d", wt->name, ggml_type_of(gt), ggml_type_of(wt));
        assert_int_equal(gt->ndim, wt->ndim);
        for (int d = 0; d < wt->ndim; d++) assert_int_equal(gt->shape[d], wt->shape[d]);
        assert_int_equal(gt->n_bytes, wt->n_bytes);
        const void *a, *b;
        assert_int_equal(tm_tensor_data(g, j, 0, gt->n_bytes, &a, NULL), TM_OK);
        assert_int_equal(tm_tensor_data(w, i, 0, wt->n_bytes, &b, NULL), TM_OK);
        if (memcmp(a, b, (size_t)wt->n_bytes)) fail_msg("%s: bytes differ from %s", wt->name, want_path);
    }
    static const char *const keys[] = {
        "general.architecture", "llama.context_length", "llama.embedding_length", "llama.block_count",
        "llama.feed_forward_length", "llama.rope.dimension_count", "llama.attention.head_count",
        "llama.attention.head_count_kv", "llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base",
        "tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const char *a = meta(g, keys[k]), *b = meta(w, keys[k]);
        if (!a || !b || strcmp(a, b)) fail_msg("%s: %s = %s, want %s", got_path, keys[k], a ? a : "(none)", b ? b : "(none)");
    }
    tm_close(g);
    tm_close(w);
}

/* Tensor gi of the converted file g holds, row by row, the rows of tensor si of the source src
** that llama.cpp's permutation names (rope with `heads` heads), exactly. */
static void rows_equal(const tm_file *g, int64_t gi, const tm_file *src, int64_t si, int rope, int heads) {
    const tm_tensor *st = tm_file_tensor(src, si);
    int64_t rows = st->shape[0], cols = st->n_elems / rows;
    assert_int_equal(tm_file_tensor(g, gi)->n_elems, st->n_elems);
    float *a = malloc((size_t)st->n_elems * 4), *b = malloc((size_t)cols * 4);
    assert_int_equal(tm_tensor_read_f32(g, gi, 0, st->n_elems, a, NULL), TM_OK);
    for (int64_t r = 0; r < rows; r++) {
        int64_t hr = rope ? tm_rope_row_hf(r, rows, heads) : r;
        assert_int_equal(tm_tensor_read_f32(src, si, hr * cols, cols, b, NULL), TM_OK);
        if (memcmp(a + r * cols, b, (size_t)cols * 4)) fail_msg("%s: row %lld differs", st->name, (long long)r);
    }
    free(a);
    free(b);
}

static void same_tensors(const char *got_path, const char *want_path, int order) {
    same_tensors_ex(got_path, want_path, order, 0);
}

static tm_status convert(const char *in_rel_or_path, const char *out_leaf, int outtype, const char *vocab,
                         const tm_gguf_quantize_params *q, tm_err *e) {
    tm_file *f;
    const char *in = in_rel_or_path[0] == '/' ? in_rel_or_path : model(in_rel_or_path);
    tm_status s = tm_open(in, NULL, &f, e);
    if (s) return s;
    tm_convert_params p = tm_convert_params_default();
    p.outtype = outtype;
    p.vocab_from = vocab;
    p.quant = q;
    p.no_checksums = 1;
    tm_convert_result *r = NULL;
    s = tm_convert_gguf(f, in, tmp(out_leaf), &p, &r, e);
    if (!s) {
        assert_non_null(r->manifest_json);
        assert_string_equal(r->architecture, "LlamaForCausalLM");
    }
    tm_convert_result_free(r);
    tm_close(f);
    return s;
}

#define VOCAB model("gguf/stories260K-F32.gguf")


/* ---- a tokenizer.model made from a GGUF's vocabulary (../shared holds none) ---- */

static void pb_varint(FILE *f, uint64_t v) {
    do {
        uint8_t c = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) c |= 0x80;
        fputc(c, f);
    } while (v);
}

static size_t varint_len(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* The raw array entry `key` of the GGUF kv list: its count and a pointer to the elements. */
static const uint8_t *kv_array(const tm_gguf_kvlist *kv, const char *key, uint32_t want_type, uint64_t *count) {
    int64_t i = tm_gguf_kvlist_find(kv, key);
    assert_true(i >= 0);
    size_t n = 0;
    const uint8_t *v = tm_gguf_kvlist_raw(kv, i, &n);
    uint32_t et;
    memcpy(&et, v, 4);
    assert_int_equal(et, want_type);
    memcpy(count, v + 4, 8);
    return v + 12;
}

/* Write a sentencepiece ModelProto at out with gguf's tokens/scores/token_type as pieces
** (SentencePiece {1 piece, 2 score, 3 type}; GGUF token types are sentencepiece's ids) and a
** trainer_spec with byte_fallback (field 35) set, as a llama tokenizer.model with byte pieces has.
** type_override >= 0 replaces the type of piece 0 (a model without an UNKNOWN piece). */
static void write_spm(const char *gguf, const char *out, int type_override) {
    tm_gguf_kvlist *kv = NULL;
    assert_int_equal(tm_gguf_kvlist_read(gguf, &kv, NULL), TM_OK);
    uint64_t nt, ns, ny;
    const uint8_t *tok = kv_array(kv, "tokenizer.ggml.tokens", TM_GGUF_STRING, &nt);
    const uint8_t *sc = kv_array(kv, "tokenizer.ggml.scores", TM_GGUF_F32, &ns);
    const uint8_t *ty = kv_array(kv, "tokenizer.ggml.token_type", TM_GGUF_I32, &ny);
    assert_true(nt == ns && nt == ny);
    FILE *f = fopen(out, "wb");
    assert_non_null(f);
    for (uint64_t i = 0; i < nt; i++) {
        uint64_t l;
        memcpy(&l, tok, 8);
        int32_t t;
        memcpy(&t, ty + 4 * i, 4);
        if (i == 0 && type_override >= 0) t = type_override;
        size_t body = 1 + varint_len(l) + (size_t)l + 5 + 1 + varint_len((uint64_t)t);
        fputc(0x0a, f); /* ModelProto.pieces */
        pb_varint(f, body);
        fputc(0x0a, f); /* piece */
        pb_varint(f, l);
        fwrite(tok + 8, 1, (size_t)l, f);
        fputc(0x15, f); /* score, fixed32 */
        fwrite(sc + 4 * i, 1, 4, f);
        fputc(0x18, f); /* type */
        pb_varint(f, (uint64_t)t);
        tok += 8 + l;
    }
    static const uint8_t trainer[] = {0x12, 0x03, 0x98, 0x02, 0x01}; /* trainer_spec {byte_fallback: true} */
    fwrite(trainer, 1, sizeof trainer, f);
    assert_int_equal(fclose(f), 0);
    tm_gguf_kvlist_free(kv);
}

/* A checkpoint folder dir: stories260K-f32's weights and config.json (with extra_cfg spliced in
** after its opening brace) and a tokenizer.model written from VOCAB's vocabulary. */
static void spm_checkpoint(const char *dir, const char *extra_cfg) {
    assert_int_equal(tmt_run(NULL, "rm -rf %s && mkdir -p %s && cp %s %s/ && sed '1s/{/{%s/' %s > %s/config.json", dir, dir,
                             model("safetensors/stories260K-f32/model.safetensors"), dir, extra_cfg,
                             model("safetensors/stories260K-f32/config.json"), dir), 0);
    char p[4200];
    snprintf(p, sizeof p, "%s/tokenizer.model", dir);
    write_spm(VOCAB, p, -1);
}

/* The F32 safetensors, its two shards and the .pt state dict give stories260K-F32.gguf's tensors,
** byte for byte and in its order; no output.weight (tied); rope rows permuted (llama.cpp's). */
static void test_f32_equals_reference(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    tm_err e;
    static const char *const srcs[] = {"safetensors/stories260K-f32", "safetensors/stories260K-f32-2shards"};
    for (size_t k = 0; k < 2; k++) {
        if (convert(srcs[k], "f32.gguf", TM_GGML_F32, VOCAB, NULL, &e)) fail_msg("%s: %s", srcs[k], e.msg);
        same_tensors(tmp("f32.gguf"), VOCAB, 1);
        assert_int_equal(tmt_run(NULL, "rm -f %s %s.manifest.json", tmp("f32.gguf"), tmp("f32.gguf")), 0);
    }
    /* a PyTorch state dict with the model's config.json beside it */
    assert_int_equal(tmt_run(NULL, "mkdir -p %s && cp %s %s/ && cp %s %s/", tmp("pt"), model("torch/stories260K_state_dict.pt"),
                             tmp("pt"), model("safetensors/stories260K-f32/config.json"), tmp("pt")), 0);
    if (convert(tmp("pt/stories260K_state_dict.pt"), "pt.gguf", TM_GGML_F32, VOCAB, NULL, &e)) fail_msg("pt: %s", e.msg);
    same_tensors(tmp("pt.gguf"), VOCAB, 1);
    /* without its config.json: refused, saying what is missing */
    assert_int_equal(tmt_run(NULL, "rm %s/config.json", tmp("pt")), 0);
    assert_int_equal(convert(tmp("pt/stories260K_state_dict.pt"), "pt2.gguf", TM_GGML_F32, VOCAB, NULL, &e), TM_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "config.json"));
    assert_false(tmt_exists(tmp("pt2.gguf")));
}

/* F16 safetensors --outtype f16 is lossless and gives stories260K-F16.gguf (norms stay F32);
** BF16 converts to F32 with the BF16 values widened, and to BF16 bit for bit; F32 --outtype f16
** rounds and is refused, naming the tensor. */
static void test_outtypes(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    tm_err e;
    if (convert("safetensors/stories260K-f16", "f16.gguf", TM_GGML_F16, VOCAB, NULL, &e)) fail_msg("%s", e.msg);
    /* the 2-D tensors are the F16 GGUF's; its norms are the F32 originals, ours the F16 source's
    ** values (the same numbers rounded to F16), kept in F32 */
    same_tensors_ex(tmp("f16.gguf"), model("gguf/stories260K-F16.gguf"), 1, 1);
    {
        tm_file *g, *ref;
        assert_int_equal(tm_open(tmp("f16.gguf"), NULL, &g, NULL), TM_OK);
        assert_int_equal(tm_open(VOCAB, NULL, &ref, NULL), TM_OK);
        int n1 = 0;
        for (int64_t i = 0; i < tm_file_n_tensors(g); i++) {
            const tm_tensor *t = tm_file_tensor(g, i);
            if (t->ndim != 1) continue;
            n1++;
            assert_int_equal(ggml_type_of(t), TM_GGML_F32);
            float a[256], b[256];
            assert_true(t->n_elems <= 256);
            assert_int_equal(tm_tensor_read_f32(g, i, 0, t->n_elems, a, NULL), TM_OK);
            assert_int_equal(tm_tensor_read_f32(ref, tm_file_find(ref, t->name), 0, t->n_elems, b, NULL), TM_OK);
            for (int64_t k = 0; k < t->n_elems; k++) assert_true(a[k] == tm_f16_to_f32(tm_f32_to_f16(b[k])));
        }
        assert_int_equal(n1, 11);
        tm_close(ref);
        tm_close(g);
    }
    assert_int_equal(convert("safetensors/stories260K-f32", "bad.gguf", TM_GGML_F16, VOCAB, NULL, &e), TM_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "model.embed_tokens.weight"));
    assert_non_null(strstr(e.msg, "--outtype f16"));
    assert_false(tmt_exists(tmp("bad.gguf")));
    static const char *const bf[] = {"safetensors/stories260K-bf16", "safetensors/aidreams260K-bf16"};
    for (size_t k = 0; k < 2; k++) {
        const char *vocab = k ? model("gguf/aidreams260K-F16.gguf") : VOCAB;
        for (int ot = 0; ot < 2; ot++) {
            if (convert(bf[k], "bf.gguf", ot ? TM_GGML_BF16 : TM_GGML_F32, vocab, NULL, &e)) fail_msg("%s: %s", bf[k], e.msg);
            tm_file *g, *src, *ref;
            assert_int_equal(tm_open(tmp("bf.gguf"), NULL, &g, NULL), TM_OK);
            assert_int_equal(tm_open(model(bf[k]), NULL, &src, NULL), TM_OK);
            /* names, shapes and hyper-parameters of gguf-py's conversion of the same model */
            assert_int_equal(tm_open(k ? vocab : VOCAB, NULL, &ref, NULL), TM_OK);
            assert_int_equal(tm_file_n_tensors(g), tm_file_n_tensors(ref));
            static const char *const hp[] = {"llama.block_count", "llama.attention.head_count", "llama.attention.head_count_kv",
                                             "llama.rope.dimension_count", "llama.context_length", "llama.rope.freq_base"};
            for (size_t h = 0; h < sizeof hp / sizeof hp[0]; h++) assert_string_equal(meta(g, hp[h]), meta(ref, hp[h]));
            for (int64_t i = 0; i < tm_file_n_tensors(ref); i++) {
                const tm_tensor *rt = tm_file_tensor(ref, i), *gt = tm_file_tensor(g, i);
                assert_string_equal(gt->name, rt->name);
                assert_int_equal(ggml_type_of(gt), gt->ndim == 1 || !ot ? TM_GGML_F32 : TM_GGML_BF16);
                /* each GGUF row is the HF row llama.cpp's permutation names, widened exactly */
                tm_tensor_pair pr;
                assert_int_equal(tm_tensor_pair_find(src, g, i, &pr), 1);
                rows_equal(g, i, src, pr.index, pr.rope, pr.n_head);
            }
            tm_close(ref);
            tm_close(src);
            tm_close(g);
            assert_int_equal(tmt_run(NULL, "rm -f %s %s.manifest.json", tmp("bf.gguf"), tmp("bf.gguf")), 0);
        }
    }
}

/* --type Q4_K_M from the F32 safetensors = quantizing stories260K-F32.gguf with the quantizer. */
static void test_type_equals_quantize(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    tm_err e;
    static const char *const types[] = {"Q4_K_M", "Q8_0"};
    for (size_t k = 0; k < 2; k++) {
        tm_gguf_quantize_params q = tm_gguf_quantize_params_default();
        q.ftype = tm_gguf_ftype_from_name(types[k]);
        q.no_checksums = 1;
        if (convert("safetensors/stories260K-f32", "conv-q.gguf", TM_GGML_F32, VOCAB, &q, &e)) fail_msg("%s", e.msg);
        tm_file *ref;
        assert_int_equal(tm_open(VOCAB, NULL, &ref, NULL), TM_OK);
        tm_gguf_quantize_result *qr = NULL;
        assert_int_equal(tm_gguf_quantize(ref, tmp("ref-q.gguf"), &q, &qr, &e), TM_OK);
        tm_gguf_quantize_result_free(qr);
        tm_close(ref);
        same_tensors(tmp("conv-q.gguf"), tmp("ref-q.gguf"), 1);
        /* the manifest names the safetensors checkpoint, not the intermediate F32 file */
        char *m = tmt_read_file(tmp("conv-q.gguf.manifest.json"));
        assert_non_null(m);
        assert_non_null(strstr(m, "stories260K-f32"));
        assert_null(strstr(m, ".convert."));
        free(m);
        char *o = NULL;
        assert_int_equal(tmt_run(&o, "ls %s | grep -c '\\.convert\\.' || true", g_tmp), 0);
        assert_int_equal(atoi(o), 0); /* the intermediate F32 GGUF is gone */
        free(o);
        assert_int_equal(tmt_run(NULL, "rm -f %s*", tmp("conv-q.gguf")), 0);
        assert_int_equal(tmt_run(NULL, "rm -f %s*", tmp("ref-q.gguf")), 0);
    }
}

/* compressed-tensors made by `quantize` (int8 per channel, int4 group:32 asymmetric, fp8)
** convert to exactly their dequantized values, in llama.cpp's row order. */
static void test_compressed_tensors(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    static const char *const schemes[] = {"-t int8", "-t int4 -g group:32 --asymmetric", "-t fp8_e4m3"};
    for (size_t k = 0; k < 3; k++) {
        assert_int_equal(tmt_run(NULL, "rm -rf %s && %s quantize %s -o %s %s --no-checksums -q", tmp("ct"), tmt_bin(),
                                 model("safetensors/stories260K-f32"), tmp("ct"), schemes[k]), 0);
        tm_err e;
        if (convert(tmp("ct"), "ct.gguf", TM_GGML_F32, VOCAB, NULL, &e)) fail_msg("%s: %s", schemes[k], e.msg);
        tm_file *g, *ct, *ref;
        assert_int_equal(tm_open(tmp("ct.gguf"), NULL, &g, NULL), TM_OK);
        assert_int_equal(tm_open(tmp("ct"), NULL, &ct, NULL), TM_OK);
        assert_int_equal(tm_open(VOCAB, NULL, &ref, NULL), TM_OK);
        assert_int_equal(tm_file_n_tensors(g), tm_file_n_tensors(ref));
        int n_deq = 0;
        for (int64_t i = 0; i < tm_file_n_tensors(g); i++) {
            const tm_tensor *gt = tm_file_tensor(g, i);
            assert_string_equal(gt->name, tm_file_tensor(ref, i)->name);
            char hf[128];
            tm_rope_rows rope;
            assert_int_equal(tm_name_from_gguf(gt->name, hf, sizeof hf, &rope), 1);
            int64_t si = tm_file_find(ct, hf);
            assert_true(si >= 0);
            n_deq += tm_file_tensor(ct, si)->quant != NULL;
            rows_equal(g, i, ct, si, rope, rope == TM_ROPE_Q ? 8 : 4); /* stories260K: 8 heads, 4 KV heads */
        }
        assert_true(n_deq >= 30); /* the 2-D projections were quantized tensors */
        tm_close(ref);
        tm_close(ct);
        tm_close(g);
        assert_int_equal(tmt_run(NULL, "rm -f %s %s.manifest.json", tmp("ct.gguf"), tmp("ct.gguf")), 0);
    }
}

/* A GPTQ v1 checkpoint of stories260K (AutoGPTQ's layout, docs/formats.md "GPTQ and AWQ"): the
** attention projections (64 input columns) 4-bit symmetric in groups of 32, round to nearest,
** qweight I32 [K/8, N], qzeros I32 [G, N/8] holding z - 1 = 7, scales F16 [G, N]; the rest dense
** (modules_to_not_convert). Convert must give s * (q - 8) in llama.cpp's row order. The same
** weights in AutoAWQ's GEMM layout (qweight I32 [K, N/8] with the nibble order 0 2 4 6 1 3 5 7,
** qzeros I32 [G, N/8] holding z = 8 in the same order, scales F16 [G, N]) give the same values. */
static void gptq_or_awq(int awq) {
    static const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7}; /* AWQ: nibble i holds column order[i] */
    const char *dir = awq ? "awq" : "gptq";
    tm_file *src;
    assert_int_equal(tm_open(model("safetensors/stories260K-f32"), NULL, &src, NULL), TM_OK);
    int64_t n = tm_file_n_tensors(src);
    tm_st_entry *ent = calloc((size_t)n * 3, sizeof *ent);
    char (*names)[128] = calloc((size_t)n * 3, sizeof *names);
    void **data = calloc((size_t)n * 3, sizeof *data);
    size_t *bytes = calloc((size_t)n * 3, sizeof *bytes);
    float **want = calloc((size_t)n, sizeof *want); /* the dequantized values, HF order */
    int64_t m = 0, n_q = 0;
    for (int64_t i = 0; i < n; i++) {
        const tm_tensor *t = tm_file_tensor(src, i);
        float *w = malloc((size_t)t->n_elems * 4);
        assert_int_equal(tm_tensor_read_f32(src, i, 0, t->n_elems, w, NULL), TM_OK);
        if (!strstr(t->name, "self_attn.")) {
            snprintf(names[m], 128, "%s", t->name);
            ent[m] = (tm_st_entry){names[m], TM_F32, t->ndim, {t->shape[0], t->ndim > 1 ? t->shape[1] : 0}};
            data[m] = w;
            bytes[m++] = (size_t)t->n_elems * 4;
            continue;
        }
        int64_t N = t->shape[0], K = t->shape[1], G = K / 32;
        assert_int_equal(K % 32, 0);
        assert_int_equal(N % 8, 0);
        uint32_t *qw = calloc((size_t)(K / 8 * N), 4), *qz = calloc((size_t)(G * N / 8), 4); /* both layouts: K*N/8, G*N/8 words */
        uint16_t *sc = calloc((size_t)(G * N), 2);
        want[i] = malloc((size_t)t->n_elems * 4);
        for (int64_t g = 0; g < G; g++)
            for (int64_t r = 0; r < N; r++) {
                float amax = 0;
                for (int64_t k = g * 32; k < g * 32 + 32; k++) amax = fmaxf(amax, fabsf(w[r * K + k]));
                uint16_t h = tm_f32_to_f16(2.0f * amax / 15.0f);
                if (tm_f16_to_f32(h) < 2.0f * amax / 15.0f) h++;
                sc[g * N + r] = h;
                float s1 = tm_f16_to_f32(h);
                int nib = 0; /* AWQ: the nibble of column r within its word */
                while (awq && order[nib] != r % 8) nib++;
                if (awq) qz[g * (N / 8) + r / 8] |= 8u << (4 * nib);
                else qz[g * (N / 8) + r / 8] |= 7u << (4 * (r % 8));
                for (int64_t k = g * 32; k < g * 32 + 32; k++) {
                    long c = lrintf(w[r * K + k] / s1) + 8;
                    c = c < 0 ? 0 : c > 15 ? 15 : c;
                    if (awq) qw[k * (N / 8) + r / 8] |= (uint32_t)c << (4 * nib);
                    else qw[(k / 8) * N + r] |= (uint32_t)c << (4 * (k % 8));
                    want[i][r * K + k] = s1 * (float)(c - 8);
                }
            }
        char base[128];
        snprintf(base, sizeof base, "%.*s", (int)(strlen(t->name) - 7), t->name); /* without ".weight" */
        const struct { const char *suf; tm_dtype dt; int64_t r, c; void *d; size_t b; } parts[] = {
            {"qweight", TM_I32, awq ? K : K / 8, awq ? N / 8 : N, qw, (size_t)(K / 8 * N) * 4},
            {"qzeros", TM_I32, G, N / 8, qz, (size_t)(G * N / 8) * 4},
            {"scales", TM_F16, G, N, sc, (size_t)(G * N) * 2}};
        for (int p = 0; p < 3; p++) {
            snprintf(names[m], 128, "%.100s.%.20s", base, parts[p].suf);
            ent[m] = (tm_st_entry){names[m], parts[p].dt, 2, {parts[p].r, parts[p].c}};
            data[m] = parts[p].d;
            bytes[m++] = parts[p].b;
        }
        free(w);
        n_q++;
    }
    assert_int_equal(n_q, 20);
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/model.safetensors", tmp(dir));
    assert_int_equal(tmt_run(NULL, "mkdir -p %s", tmp(dir)), 0);
    tm_st_writer *w;
    assert_int_equal(tm_st_writer_open(mpath, ent, m, NULL, &w, NULL), TM_OK);
    for (int64_t k = 0; k < m; k++) assert_int_equal(tm_st_writer_write(w, k, 0, data[k], bytes[k], NULL), TM_OK);
    assert_int_equal(tm_st_writer_finish(w, NULL), TM_OK);
    tm_st_writer_free(w);
    const char *qc = awq ? "\"quant_method\": \"awq\", \"bits\": 4, \"group_size\": 32, \"version\": \"gemm\", \"zero_point\": true"
                         : "\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 32, \"sym\": true, \"desc_act\": false, "
                           "\"checkpoint_format\": \"gptq\"";
    assert_int_equal(tmt_run(NULL, "sed 's/\"use_cache\": true,/\"use_cache\": true, \"quantization_config\": {%s},/' %s > %s/config.json", qc,
                             model("safetensors/stories260K-f32/config.json"), tmp(dir)), 0);
    tm_err e;
    char outn[32];
    snprintf(outn, sizeof outn, "%s.gguf", dir);
    if (convert(tmp(dir), outn, TM_GGML_F32, VOCAB, NULL, &e)) fail_msg("%s", e.msg);
    tm_file *g;
    assert_int_equal(tm_open(tmp(outn), NULL, &g, NULL), TM_OK);
    {   /* the source opened as the layout it is */
        tm_file *q;
        assert_int_equal(tm_open(tmp(dir), NULL, &q, NULL), TM_OK);
        int64_t qi = tm_file_find(q, "model.layers.0.self_attn.q_proj.weight");
        assert_true(qi >= 0);
        assert_non_null(tm_file_tensor(q, qi)->quant);
        assert_string_equal(tm_file_tensor(q, qi)->quant->layout, awq ? "awq/gemm" : "gptq");
        tm_close(q);
    }
    assert_int_equal(tm_file_n_tensors(g), 47);
    int n_checked = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!want[i]) continue;
        const tm_tensor *t = tm_file_tensor(src, i);
        char gn[128];
        tm_rope_rows rope;
        assert_int_equal(tm_name_to_gguf(t->name, gn, sizeof gn, &rope), 1);
        int64_t gi = tm_file_find(g, gn);
        assert_true(gi >= 0);
        int64_t N = t->shape[0], K = t->shape[1];
        float *got = malloc((size_t)t->n_elems * 4);
        assert_int_equal(tm_tensor_read_f32(g, gi, 0, t->n_elems, got, NULL), TM_OK);
        for (int64_t r = 0; r < N; r++) {
            int64_t hr = rope ? tm_rope_row_hf(r, N, rope == TM_ROPE_Q ? 8 : 4) : r;
            if (memcmp(got + r * K, want[i] + hr * K, (size_t)K * 4)) fail_msg("%s row %lld", gn, (long long)r);
        }
        free(got);
        n_checked++;
    }
    assert_int_equal(n_checked, 20);
    tm_close(g);
    for (int64_t k = 0; k < m; k++) free(data[k]);
    for (int64_t i = 0; i < n; i++) free(want[i]);
    free(ent); free(names); free(data); free(bytes); free(want);
    tm_close(src);
}

static void test_gptq(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    gptq_or_awq(0);
}

static void test_awq(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    gptq_or_awq(1);
}

/* Refusals: another architecture (named, exit 3), no tokenizer (naming --vocab-from), a vocabulary
** of another size (both sizes), rope_scaling of another type; nothing is written. */
static void test_refusals(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    tm_err e;
    assert_int_equal(tmt_run(NULL, "mkdir -p %s && cp %s %s/ && sed 's/LlamaForCausalLM/GPT2LMHeadModel/' %s > %s/config.json",
                             tmp("gpt2"), model("safetensors/stories260K-f32/model.safetensors"), tmp("gpt2"),
                             model("safetensors/stories260K-f32/config.json"), tmp("gpt2")), 0);
    assert_int_equal(convert(tmp("gpt2"), "x.gguf", TM_GGML_F32, VOCAB, NULL, &e), TM_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "architecture 'GPT2LMHeadModel' is not supported"));
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s convert %s -o %s --vocab-from %s 2>&1", tmt_bin(), tmp("gpt2"), tmp("x.gguf"), VOCAB), 3);
    assert_non_null(strstr(o, "GPT2LMHeadModel"));
    free(o);
    assert_int_equal(convert("safetensors/stories260K-f32", "x.gguf", TM_GGML_F32, NULL, NULL, &e), TM_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "--vocab-from"));
    assert_int_equal(convert("safetensors/stories260K-f32", "x.gguf", TM_GGML_F32, model("gguf/ggml-vocab-llama-spm.gguf"), NULL, &e),
                     TM_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "32000 tokens"));
    assert_non_null(strstr(e.msg, "vocab_size is 512"));
    assert_int_equal(tmt_run(NULL, "sed 's/\"rope_scaling\": null/\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}/' %s > %s/config.json",
                             model("safetensors/stories260K-f32/config.json"), tmp("gpt2")), 0);
    assert_int_equal(convert(tmp("gpt2"), "x.gguf", TM_GGML_F32, VOCAB, NULL, &e), TM_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "rope_scaling type 'llama3'"));
    assert_false(tmt_exists(tmp("x.gguf")));
    assert_false(tmt_exists(tmp("x.gguf.manifest.json")));
}


/* tokenizer.model (sentencepiece) read as convert_hf_to_gguf.py reads it: from a tokenizer.model
** written from stories260K-F32.gguf's own vocabulary, with config.json's bos/eos/unk ids, every
** tokenizer.* key of that GGUF comes back with the same type and bytes, in its order, plus the
** tokenizer.ggml.pre = "default" convert_hf_to_gguf.py writes (gguf-py's [D2] script did not);
** the tensors are the GGUF's. Without unk_token_id in config.json there is no unknown_token_id
** key (SpecialVocab reads the ids from config.json only). tokenizer_config.json's
** added_tokens_decoder and add_bos_token apply. Refusals: a tokenizer.json alone, a tokenizer.json
** beside it, a truncated file (byte offset), no UNKNOWN piece; nothing written. */
static void test_tokenizer_model(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    tm_err e;
    spm_checkpoint(tmp("spm"), " \"unk_token_id\": 0,");
    if (convert(tmp("spm"), "spm.gguf", TM_GGML_F32, NULL, NULL, &e)) fail_msg("%s", e.msg);
    same_tensors(tmp("spm.gguf"), VOCAB, 1);
    tm_gguf_kvlist *got = NULL, *want = NULL;
    assert_int_equal(tm_gguf_kvlist_read(tmp("spm.gguf"), &got, NULL), TM_OK);
    assert_int_equal(tm_gguf_kvlist_read(VOCAB, &want, NULL), TM_OK);
    int64_t last = -1, n_want = 0, n_got = 0;
    for (int64_t i = 0; i < tm_gguf_kvlist_count(want); i++) {
        const char *k = tm_gguf_kvlist_key(want, i);
        if (strncmp(k, "tokenizer.", 10)) continue;
        n_want++;
        int64_t j = tm_gguf_kvlist_find(got, k);
        if (j < 0) fail_msg("converted file has no %s", k);
        assert_true(j > last); /* the reference's order */
        last = j;
        assert_int_equal(tm_gguf_kvlist_type(got, j), tm_gguf_kvlist_type(want, i));
        size_t na, nb;
        const void *a = tm_gguf_kvlist_raw(got, j, &na), *b = tm_gguf_kvlist_raw(want, i, &nb);
        if (na != nb || memcmp(a, b, na)) fail_msg("%s differs from %s's", k, VOCAB);
    }
    for (int64_t i = 0; i < tm_gguf_kvlist_count(got); i++) n_got += !strncmp(tm_gguf_kvlist_key(got, i), "tokenizer.", 10);
    assert_int_equal(n_want, 7);
    assert_int_equal(n_got, n_want + 1);
    char *pre = tm_gguf_kvlist_get_str(got, "tokenizer.ggml.pre");
    assert_non_null(pre);
    assert_string_equal(pre, "default");
    free(pre);
    assert_int_equal(tm_gguf_kvlist_find(got, "tokenizer.ggml.pre"), tm_gguf_kvlist_find(got, "tokenizer.ggml.model") + 1);
    tm_gguf_kvlist_free(got);
    tm_gguf_kvlist_free(want);
    /* config.json as ../shared has it (bos 1, eos 2, no unk id); tokenizer_config.json's
    ** added_tokens_decoder (special -> CONTROL, else USER_DEFINED, score -1000) and add_bos_token */
    spm_checkpoint(tmp("spm2"), "");
    assert_int_equal(tmt_run(NULL, "printf '%%s' '{\"add_bos_token\": true, \"add_eos_token\": false, \"added_tokens_decoder\": "
                             "{\"2\": {\"content\": \"</s>\", \"special\": true}, \"300\": {\"content\": \"\\u2581hi\", \"special\": false}, "
                             "\"301\": {\"content\": \"<|im_end|>\", \"special\": false}}}' > %s/tokenizer_config.json", tmp("spm2")), 0);
    if (convert(tmp("spm2"), "spm2.gguf", TM_GGML_F32, NULL, NULL, &e)) fail_msg("%s", e.msg);
    assert_int_equal(tm_gguf_kvlist_read(tmp("spm2.gguf"), &got, NULL), TM_OK);
    assert_int_equal(tm_gguf_kvlist_find(got, "tokenizer.ggml.unknown_token_id"), -1);
    int found = 0;
    assert_int_equal(tm_gguf_kvlist_get_int(got, "tokenizer.ggml.bos_token_id", &found), 1);
    assert_int_equal(tm_gguf_kvlist_get_int(got, "tokenizer.ggml.eos_token_id", &found), 2);
    assert_int_equal(tm_gguf_kvlist_get_int(got, "tokenizer.ggml.add_bos_token", &found), 1);
    assert_true(found);
    assert_int_equal(tm_gguf_kvlist_get_int(got, "tokenizer.ggml.add_eos_token", &found), 0);
    assert_true(found);
    uint64_t nt;
    const uint8_t *ty = kv_array(got, "tokenizer.ggml.token_type", TM_GGUF_I32, &nt);
    const uint8_t *sc = kv_array(got, "tokenizer.ggml.scores", TM_GGUF_F32, &nt);
    int32_t t2, t300, t301, t3;
    float s300, s3;
    memcpy(&t2, ty + 8, 4);
    memcpy(&t3, ty + 12, 4);
    memcpy(&t300, ty + 1200, 4);
    memcpy(&t301, ty + 1204, 4);
    memcpy(&s300, sc + 1200, 4);
    memcpy(&s3, sc + 12, 4);
    assert_int_equal(t2, 3);
    assert_int_equal(t3, 6);     /* <0x00>: BYTE, untouched */
    assert_int_equal(t300, 4);   /* USER_DEFINED */
    assert_int_equal(t301, 3);   /* <|...|> looks special: CONTROL */
    assert_true(s300 == -1000.0f && s3 == 0.0f);
    const uint8_t *tok = kv_array(got, "tokenizer.ggml.tokens", TM_GGUF_STRING, &nt);
    for (int i = 0; i < 300; i++) {
        uint64_t l;
        memcpy(&l, tok, 8);
        tok += 8 + l;
    }
    uint64_t l300;
    memcpy(&l300, tok, 8);
    assert_int_equal(l300, 3);
    assert_memory_equal(tok + 8, " hi", 3); /* U+2581 written as a space */
    tm_gguf_kvlist_free(got);
    /* refusals */
    assert_int_equal(tmt_run(NULL, "cd %s && mv tokenizer.model t.bak && echo '{}' > tokenizer.json", tmp("spm2")), 0);
    assert_int_equal(convert(tmp("spm2"), "bad.gguf", TM_GGML_F32, NULL, NULL, &e), TM_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "tokenizer.json but no tokenizer.model"));
    assert_non_null(strstr(e.msg, "--vocab-from"));
    assert_int_equal(tmt_run(NULL, "cd %s && cp t.bak tokenizer.model", tmp("spm2")), 0);
    assert_int_equal(convert(tmp("spm2"), "bad.gguf", TM_GGML_F32, NULL, NULL, &e), TM_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "tokenizer.json beside tokenizer.model"));
    assert_int_equal(tmt_run(NULL, "cd %s && rm tokenizer.json && head -c 1001 t.bak > tokenizer.model", tmp("spm2")), 0);
    assert_int_equal(convert(tmp("spm2"), "bad.gguf", TM_GGML_F32, NULL, NULL, &e), TM_E_CORRUPT);
    assert_non_null(strstr(e.msg, "tokenizer.model: byte "));
    char p[4200];
    snprintf(p, sizeof p, "%s/tokenizer.model", tmp("spm2"));
    write_spm(VOCAB, p, 1); /* <unk> as NORMAL: no UNKNOWN piece */
    assert_int_equal(convert(tmp("spm2"), "bad.gguf", TM_GGML_F32, NULL, NULL, &e), TM_E_CORRUPT);
    assert_non_null(strstr(e.msg, "no UNKNOWN piece"));
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s convert %s -o %s 2>&1", tmt_bin(), tmp("spm2"), tmp("bad.gguf")), 3);
    assert_non_null(strstr(o, "no UNKNOWN piece"));
    free(o);
    assert_false(tmt_exists(tmp("bad.gguf")));
}

/* The CLI: convert (--json, exit codes, --force) and quantize DIR -o X.gguf through convert;
** a bare .safetensors file keeps the raw path with a warning. */
static void test_cli(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    char st[4096];
    snprintf(st, sizeof st, "%s", model("safetensors/stories260K-f32"));
    json_t *d = tmt_run_json(0, "%s convert %s -o %s --vocab-from %s --json --no-checksums", tmt_bin(), st, tmp("c.gguf"), VOCAB);
    assert_string_equal(json_string_value(json_object_get(d, "schema")), "tensormorph.convert/1");
    assert_int_equal(json_integer_value(json_object_get(d, "n_tensors")), 47);
    tm_err je;
    if (tm__jschema_validate_named("manifest", json_object_get(d, "manifest"), "convert manifest", &je))
        fail_msg("%s", je.msg);
    json_t *ts = json_object_get(json_object_get(d, "manifest"), "tensors");
    json_t *q = tmt_find_named(ts, "blk.0.attn_q.weight");
    assert_string_equal(json_string_value(json_object_get(q, "source")), "model.layers.0.self_attn.q_proj.weight");
    assert_string_equal(json_string_value(json_object_get(q, "rope_permuted")), "q");
    json_decref(d);
    same_tensors(tmp("c.gguf"), VOCAB, 1);
    /* an existing output: exit 2 without --force, replaced with it */
    assert_int_equal(tmt_run(NULL, "%s convert %s -o %s --vocab-from %s -q 2>/dev/null", tmt_bin(), st, tmp("c.gguf"), VOCAB), 2);
    assert_int_equal(tmt_run(NULL, "%s convert %s -o %s --vocab-from %s -q --force", tmt_bin(), st, tmp("c.gguf"), VOCAB), 0);
    assert_int_equal(tmt_run(NULL, "%s convert %s -o %s --outtype f8 2>/dev/null", tmt_bin(), st, tmp("u.gguf")), 2);
    assert_int_equal(tmt_run(NULL, "%s convert %s -o %s -q 2>/dev/null", tmt_bin(), st, tmp("u.gguf")), 3);
    /* a GGUF is no input to convert: exit 3, saying so */
    char *g = NULL;
    assert_int_equal(tmt_run(&g, "%s convert %s -o %s --vocab-from %s 2>&1", tmt_bin(), VOCAB, tmp("u.gguf"), VOCAB), 3);
    assert_non_null(strstr(g, "already a GGUF"));
    free(g);
    /* quantize DIR -o X.gguf: converted first, same file as convert --type */
    assert_int_equal(tmt_run(NULL, "%s quantize %s -o %s -t Q4_K_M --vocab-from %s -q --no-checksums", tmt_bin(), st, tmp("qz.gguf"), VOCAB), 0);
    assert_int_equal(tmt_run(NULL, "%s convert %s -o %s -t Q4_K_M --vocab-from %s -q --no-checksums", tmt_bin(), st, tmp("cz.gguf"), VOCAB), 0);
    assert_int_equal(tmt_run(NULL, "cmp %s %s", tmp("qz.gguf"), tmp("cz.gguf")), 0);
    /* an LLM checkpoint with no tokenizer and no --vocab-from: exit 3 naming --vocab-from, nothing written */
    char *o = NULL;
    assert_int_equal(tmt_run(&o, "%s quantize %s -o %s -t Q4_K_M --no-checksums 2>&1 >/dev/null", tmt_bin(), st, tmp("qn.gguf")), 3);
    assert_non_null(strstr(o, "no tokenizer"));
    assert_non_null(strstr(o, "--vocab-from"));
    free(o);
    assert_false(tmt_exists(tmp("qn.gguf")));
    assert_false(tmt_exists(tmp("qn.gguf.manifest.json")));
    /* with its tokenizer.model: converted (llama.cpp names, its tokenizer), as convert --type */
    spm_checkpoint(tmp("qspm"), " \"unk_token_id\": 0,");
    assert_int_equal(tmt_run(NULL, "%s quantize %s -o %s -t Q4_K_M -q --no-checksums", tmt_bin(), tmp("qspm"), tmp("qt.gguf")), 0);
    assert_int_equal(tmt_run(NULL, "%s convert %s -o %s -t Q4_K_M -q --no-checksums", tmt_bin(), tmp("qspm"), tmp("ct.gguf")), 0);
    assert_int_equal(tmt_run(NULL, "cmp %s %s", tmp("qt.gguf"), tmp("ct.gguf")), 0);
    same_tensors(tmp("qt.gguf"), tmp("cz.gguf"), 1);
    /* --vocab-from with a GGUF input: nothing to convert, a usage error */
    assert_int_equal(tmt_run(NULL, "%s quantize %s -o %s -t Q8_0 --vocab-from %s -q 2>/dev/null", tmt_bin(), VOCAB, tmp("g.gguf"), VOCAB), 2);
    /* a bare .safetensors file (no config.json): today's raw path, HF names, and a warning */
    assert_int_equal(tmt_run(NULL, "mkdir -p %s && cp %s/model.safetensors %s/", tmp("bare"), st, tmp("bare")), 0);
    assert_int_equal(tmt_run(&o, "%s quantize %s/model.safetensors -o %s -t Q8_0 --no-checksums 2>&1 >/dev/null", tmt_bin(), tmp("bare"), tmp("raw.gguf")), 0);
    assert_non_null(strstr(o, "llama.cpp will not load"));
    free(o);
    tm_file *f;
    assert_int_equal(tm_open(tmp("raw.gguf"), NULL, &f, NULL), TM_OK);
    assert_true(tm_file_find(f, "model.layers.0.self_attn.q_proj.weight") >= 0);
    tm_close(f);
}


/* The GGUF writer's sequential mode (what convert writes with): the same bytes as the ordinary
** writer for tensors of odd sizes, one of them over three 8 MiB pieces (so each of the two stage
** buffers is refilled while the I/O thread writes the other; every value differs, so a piece
** overwritten before it was written shows), with O_DIRECT (the test's /tmp) and without
** (/dev/shm, tmpfs refuses O_DIRECT), with the big tensor's second half through span/commit
** (produced in the stage); a write before the last refused. */
static void write_seq_file(const char *path, unsigned flags, int out_of_order) {
    tm_gguf_kvlist *kv = tm_gguf_kvlist_new();
    assert_int_equal(tm_gguf_kvlist_set_str(kv, "general.architecture", "test", NULL), TM_OK);
    static const int64_t ne[3] = {3, 6815747, 5};
    tm_gguf_wtensor t[3];
    char names[3][8];
    for (int i = 0; i < 3; i++) {
        snprintf(names[i], sizeof names[i], "t%d", i);
        t[i] = (tm_gguf_wtensor){names[i], TM_GGML_F32, 1, {ne[i], 1, 1, 1}};
    }
    tm_gguf_writer *w = NULL;
    assert_int_equal(tm_gguf_writer_open_ex(path, kv, t, 3, flags, &w, NULL), TM_OK);
    float *x = malloc((size_t)ne[1] * 4);
    for (int64_t k = 0; k < ne[1]; k++) x[k] = (float)k * 0.25f - 7.0f;
    for (int i = 0; i < 3; i++) {
        /* in two pieces, the second from an offset inside the tensor */
        size_t half = (size_t)(ne[i] / 2) * 4, all = (size_t)ne[i] * 4;
        assert_int_equal(tm_gguf_writer_write(w, i, 0, x, half, NULL), TM_OK);
        if (!(flags & TM_GGUF_WRITE_SEQUENTIAL) && i == 0) { /* span is for sequential mode only */
            void *p;
            size_t av;
            assert_int_equal(tm_gguf_writer_span(w, i, half, 4, &p, &av, NULL), TM_E_INVALID_ARG);
        }
        if ((flags & TM_GGUF_WRITE_SEQUENTIAL) && i == 1) { /* the second half produced in place */
            for (size_t at = half; at < all;) {
                void *p = NULL;
                size_t av = 0;
                assert_int_equal(tm_gguf_writer_span(w, i, at, all - at, &p, &av, NULL), TM_OK);
                assert_true(av >= 1 && av <= all - at && av <= (8u << 20));
                tm_err e;
                assert_int_equal(tm_gguf_writer_commit(w, av + 1, &e), TM_E_INVALID_ARG); /* past the span */
                memcpy(p, (const char *)x + at, av);
                assert_int_equal(tm_gguf_writer_commit(w, av, NULL), TM_OK);
                at += av;
            }
        } else
            assert_int_equal(tm_gguf_writer_write(w, i, half, (const char *)x + half, all - half, NULL), TM_OK);
        if (out_of_order && i == 1) {
            tm_err e;
            assert_int_equal(tm_gguf_writer_write(w, 0, 0, x, 4, &e), TM_E_INVALID_ARG);
            assert_non_null(strstr(e.msg, "sequential mode"));
        }
    }
    assert_int_equal(tm_gguf_writer_finish(w, NULL), TM_OK);
    tm_gguf_writer_free(w);
    tm_gguf_kvlist_free(kv);
    free(x);
}

static void test_sequential_writer(void **state) {
    (void)state;
    char shm[64] = "";
    struct stat st;
    if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode)) snprintf(shm, sizeof shm, "/dev/shm/tm_seq_%ld.gguf", (long)getpid());
    write_seq_file(tmp("plain.gguf"), 0, 0);
    write_seq_file(tmp("seq.gguf"), TM_GGUF_WRITE_SEQUENTIAL, 1);
    assert_int_equal(tmt_run(NULL, "cmp %s %s", tmp("plain.gguf"), tmp("seq.gguf")), 0);
    if (shm[0]) {
        write_seq_file(shm, TM_GGUF_WRITE_SEQUENTIAL, 0);
        assert_int_equal(tmt_run(NULL, "cmp %s %s", tmp("plain.gguf"), shm), 0);
        unlink(shm);
    }
    tm_file *f;
    assert_int_equal(tm_open(tmp("seq.gguf"), NULL, &f, NULL), TM_OK);
    float v[3];
    assert_int_equal(tm_tensor_read_f32(f, 2, 0, 3, v, NULL), TM_OK);
    assert_true(v[0] == -7.0f && v[2] == -6.5f);
    tm_close(f);
}

/* llama.cpp (node-llama-cpp 3.21.1) loads the converted file and its next-token distributions
** equal those of gguf-py's stories260K-F32.gguf (KLD 0). Skipped without node-llama-cpp unless
** TM_REQUIRE_LLAMA=1. */
static void test_llama_cpp_loads(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    const char *mods = tmt_llama_modules();
    if (!mods) skip();
    tm_err e;
    if (convert("safetensors/stories260K-f32-2shards", "ll.gguf", TM_GGML_F32, VOCAB, NULL, &e)) fail_msg("%s", e.msg);
    char *o = NULL;
    int rc = tmt_run(&o, "node %s/tests/unit/convert_kld.mjs %s %s %s 2>&1", getenv("TM_SRC"), mods, VOCAB,
                     tmp("ll.gguf"));
    if (rc) fail_msg("node: rc %d: %s", rc, o ? o : "");
    json_t *r = json_loads(o, 0, NULL);
    if (!r) fail_msg("not JSON: %s", o);
    assert_true(json_integer_value(json_object_get(r, "positions")) >= 16);
    assert_int_equal(json_integer_value(json_object_get(r, "vocab")), 512);
    assert_true(json_number_value(json_object_get(r, "max_kld")) == 0.0);
    assert_true(json_number_value(json_object_get(r, "max_abs_dp")) == 0.0);
    json_decref(r);
    free(o);
    /* the tokenizer read from a tokenizer.model (written from the GGUF's vocabulary): llama.cpp
    ** tokenizes the text the same way and gives the same distributions (KLD 0) */
    spm_checkpoint(tmp("spmk"), "");
    if (convert(tmp("spmk"), "spmk.gguf", TM_GGML_F32, NULL, NULL, &e)) fail_msg("%s", e.msg);
    rc = tmt_run(&o, "node %s/tests/unit/convert_kld.mjs %s %s %s 2>&1", getenv("TM_SRC"), mods, VOCAB, tmp("spmk.gguf"));
    if (rc) fail_msg("node: rc %d: %s", rc, o ? o : "");
    r = json_loads(o, 0, NULL);
    if (!r) fail_msg("not JSON: %s", o);
    assert_true(json_integer_value(json_object_get(r, "positions")) >= 16);
    assert_true(json_number_value(json_object_get(r, "max_kld")) == 0.0);
    assert_true(json_number_value(json_object_get(r, "max_abs_dp")) == 0.0);
    json_decref(r);
    free(o);
    /* aidreams260K (4 heads of 16, a second real model) from BF16 safetensors against gguf-py's F16
    ** conversion of its F32 weights: only the BF16 vs F16 rounding differs (measured max KLD 2.9e-4
    ** over 60 positions; its Q4_K_M gives 0.057), so a wrong row order or hyper-parameter shows */
    if (convert("safetensors/aidreams260K-bf16", "ad.gguf", TM_GGML_BF16, model("gguf/aidreams260K-F16.gguf"), NULL, &e))
        fail_msg("%s", e.msg);
    rc = tmt_run(&o, "node %s/tests/unit/convert_kld.mjs %s %s %s 2>&1", getenv("TM_SRC"), mods,
                 model("gguf/aidreams260K-F16.gguf"), tmp("ad.gguf"));
    if (rc) fail_msg("node: rc %d: %s", rc, o ? o : "");
    r = json_loads(o, 0, NULL);
    if (!r) fail_msg("not JSON: %s", o);
    assert_int_equal(json_integer_value(json_object_get(r, "vocab")), 512);
    double kld = json_number_value(json_object_get(r, "max_kld"));
    if (!(kld < 1e-3)) fail_msg("aidreams260K: max KLD %g against its F16 GGUF", kld);
    json_decref(r);
    free(o);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tm_convert_XXXXXX");
    return mkdtemp(g_tmp) ? 0 : 1;
}

static int teardown(void **state) {
    (void)state;
    return tmt_run(NULL, "rm -rf %s", g_tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_equals_reference),
        cmocka_unit_test(test_outtypes),
        cmocka_unit_test(test_type_equals_quantize),
        cmocka_unit_test(test_compressed_tensors),
        cmocka_unit_test(test_gptq),
        cmocka_unit_test(test_awq),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_tokenizer_model),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_sequential_writer),
        cmocka_unit_test(test_llama_cpp_loads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
