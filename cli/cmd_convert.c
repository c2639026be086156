/* cmd_convert.c: `tensormorph convert IN -o OUT.gguf`: a LLaMA/Mistral-family checkpoint as a
** llama GGUF that llama.cpp loads (tensormorph/convert.h, docs/convert.md). */
#include "cli.h"
#include "gguf_qopts.h"
#include "tensormorph/convert.h"
#include "tensormorph/ggml.h"
#include "tensormorph/gguf_job.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int cmd_convert(const cli_cmd *cmd, cli_args *a);

const cli_opt opts_convert[] = {
    CLI_OPT_OUTPUT("OUT.gguf", "the GGUF file to write (OUT.gguf.manifest.json goes beside it)"),
    CLI_OPT_TYPE("then quantize with llama-quantize's rules to this GGUF file type: " CLI_HELP_GGUF_FTYPES),
    CLI_OPT_VOCAB_FROM("copy every tokenizer.* key from this GGUF (default: read IN's tokenizer.model)"),
    {"outtype", 0, "T", 0, "f32 (default), f16 or bf16: refused, naming the tensor, when a value would round"},
    CLI_OPT_FORCE,
    CLI_OPT_NO_CHECKSUMS,
    CLI_OPTS_GGUF_QUANT("with --type: "),
    CLI_OPT_END,
};

const char details_convert[] =
    "IN is a Hugging Face LLaMA or Mistral checkpoint tensormorph opens (safetensors F32/F16/BF16,\n"
    "single or sharded, compressed-tensors, GPTQ, AWQ, or a PyTorch state dict) with its\n"
    "config.json beside it. OUT is a llama GGUF as llama.cpp's convert_hf_to_gguf.py writes it:\n"
    "hyper-parameters from config.json, llama.cpp tensor names, q/k rows permuted for RoPE, every\n"
    "value dequantized through the tensor view; no output.weight when embeddings are tied.\n"
    "The tokenizer comes from --vocab-from (every tokenizer.* key), else from IN's sentencepiece\n"
    "tokenizer.model (with config.json's token ids, tokenizer_config.json's added tokens), as\n"
    "convert_hf_to_gguf.py writes it; with neither, exit 3. Another architecture exits 3.\n"
    "--type T converts, then quantizes with the GGUF quantizer's llama-quantize rules, the same\n"
    "file as `convert` then `quantize OUT.gguf --type T` with the same quantize options (--imatrix,\n"
    "--include/--exclude-weights, --output-tensor-type, --token-embedding-type,\n"
    "--leave-output-tensor, --pure, --override-kv, --tensor-type; the imatrix's names are the\n"
    "llama.cpp names convert writes) (docs/convert.md, docs/gguf-quantize.md).";

int cmd_convert(const cli_cmd *cmd, cli_args *a) {
    const char *out = cli_get(a, "output");
    if (!out) return cli_usage_error(cmd, "missing -o OUT.gguf");
    size_t ol = strlen(out);
    if (ol < 6 || strcmp(out + ol - 5, ".gguf")) return cli_usage_error(cmd, "-o: OUT must end in .gguf");
    tm_convert_params p = tm_convert_params_default();
    const char *v = cli_get(a, "outtype");
    if (v) {
        if (!strcasecmp(v, "f32")) p.outtype = TM_GGML_F32;
        else if (!strcasecmp(v, "f16")) p.outtype = TM_GGML_F16;
        else if (!strcasecmp(v, "bf16")) p.outtype = TM_GGML_BF16;
        else return cli_usage_error(cmd, "--outtype must be f32, f16 or bf16");
    }
    tm_gguf_quantize_params qp = tm_gguf_quantize_params_default();
    cli_gguf_qopts own;
    memset(&own, 0, sizeof own);
    if ((v = cli_get(a, "type"))) {
        qp.ftype = tm_gguf_ftype_from_name(v);
        if (qp.ftype < 0) {
            char names[512];
            tm_gguf_ftype_list(names, sizeof names);
            return cli_usage_error(cmd, "--type: '%s' is not a GGUF file type (llama-quantize's: %s; --outtype for an unquantized f16/bf16 conversion)", v, names);
        }
        if (cli_has(a, "outtype")) return cli_usage_error(cmd, "--type and --outtype exclude each other (--type quantizes from F32)");
        int qrc = cli_gguf_qopts_parse(cmd, a, NULL, NULL, &qp, &own);
        if (qrc) {
            cli_gguf_qopts_free(&own);
            return qrc;
        }
        qp.n_threads = g_cli.threads;
        qp.command_line = g_cli.argv_line;
        qp.progress = cli_progress_cb;
        p.quant = &qp;
    } else if ((v = cli_gguf_qopts_given(a))) {
        return cli_usage_error(cmd, "--%s is an option of the quantizer: it needs --type T", v);
    }
    p.vocab_from = cli_get(a, "vocab-from");
    p.force = cli_has(a, "force");
    p.no_checksums = cli_has(a, "no-checksums");
    p.n_threads = g_cli.threads;
    p.command_line = g_cli.argv_line;
    p.cancel = &g_cli_interrupted;
    tm_file *in;
    int rc = cli_open(a->pos[0], &in);
    if (rc) {
        cli_gguf_qopts_free(&own);
        return rc;
    }
    tm_err err;
    tm_convert_result *r = NULL;
    tm_status s = tm_convert_gguf(in, a->pos[0], out, &p, &r, &err);
    cli_progress_end();
    if (s) {
        tm_close(in);
        cli_gguf_qopts_free(&own);
        return cli_fail(s, &err);
    }
    if (g_cli.json) {
        json_t *d = cli_json_doc("convert");
        json_object_set_new(d, "output", json_string(out));
        json_object_set_new(d, "architecture", json_string(r->architecture));
        json_object_set_new(d, "type", json_string(p.quant ? tm_gguf_ftype_name(qp.ftype) : tm_ggml_type_info_get(p.outtype)->name));
        json_object_set_new(d, "n_tensors", json_integer(r->n));
        json_object_set_new(d, "n_skipped", json_integer(r->n_skipped));
        json_t *man = r->manifest_json ? json_loads(r->manifest_json, 0, NULL) : NULL;
        json_object_set_new(d, "manifest", man ? man : json_null());
        cli_json_print(d);
    } else if (!g_cli.quiet) {
        printf("converted %" PRId64 " tensors (%s) to GGUF %s: %s -> %s (%.2f MB -> %.2f MB) in %.2f s\n", r->n,
               r->architecture, p.quant ? tm_gguf_ftype_name(qp.ftype) : tm_ggml_type_info_get(p.outtype)->name,
               a->pos[0], out, (double)r->src_bytes / 1e6, (double)r->out_bytes / 1e6, r->seconds);
        if (r->n_skipped) printf("left out %" PRId64 " tensor(s) llama.cpp does not use (tied lm_head, rotary inv_freq)\n", r->n_skipped);
        printf("Manifest: %s\n", r->manifest_path ? r->manifest_path : "-");
    }
    tm_convert_result_free(r);
    tm_close(in);
    cli_gguf_qopts_free(&own);
    return 0;
}
