/* gguf_qopts.h: the GGUF quantizer's options (llama-quantize's --imatrix, --include-weights,
** --exclude-weights, --output-tensor-type, --token-embedding-type, --leave-output-tensor, --pure,
** --override-kv, --tensor-type, --tensor-type-exact) that `quantize IN -o OUT.gguf` and
** `convert IN -o OUT.gguf --type T` take alike: one option table (CLI_OPTS_GGUF_QUANT, spelled in
** both commands' tables) and one parser into tm_gguf_quantize_params. Only cli/ uses this. */
#ifndef TM_CLI_GGUF_QOPTS_H
#define TM_CLI_GGUF_QOPTS_H
#include "cli.h"

/* The entries of the option table; P is the start of every help line ("GGUF: " for quantize,
** whose output may be another form; "with --type: " for convert). */
#define CLI_OPTS_GGUF_QUANT(P)                                                                                     \
    {"pure", 0, NULL, 0, P "every quantizable tensor gets --type's type (no llama-quantize mixture rules)"},        \
    {"leave-output-tensor", 0, NULL, 0, P "leave output.weight unquantized"},                                       \
    {"tensor-type-exact", 0, NULL, 0, P "--tensor-type applies even where the rules fall back (rows not a multiple of 256)"}, \
    {"tensor-type", 0, "RE=TYPE", 1, P "ggml TYPE for tensors whose name matches RE (POSIX extended; last match wins)"}, \
    {"imatrix", 0, "FILE", 0, P "importance matrix of llama-imatrix (legacy .dat or GGUF format): weighted K-quant/IQ searches, as llama-quantize --imatrix"}, \
    {"include-weights", 0, "NAME", 1, P "use the importance matrix only for tensors whose name contains NAME"},     \
    {"exclude-weights", 0, "NAME", 1, P "do not use the importance matrix for tensors whose name contains NAME"},   \
    {"output-tensor-type", 0, "TYPE", 0, P "ggml TYPE for output.weight"},                                          \
    {"token-embedding-type", 0, "TYPE", 0, P "ggml TYPE for token_embd.weight"},                                    \
    {"override-kv", 0, "KEY=TYPE:VALUE", 1, P "set metadata KEY (TYPE int, float, bool or str), as llama-quantize --override-kv"}

/* What the parsed options point to (owned until cli_gguf_qopts_free). */
typedef struct cli_gguf_qopts {
    tm_imatrix     *imx;
    char          **dropped; /* the imatrix entries --include/--exclude-weights dropped (names) */
    int64_t         n_dropped;
    tm_gguf_kvlist *ovr;
    char          **bufs;  /* the --tensor-type patterns, copied */
    const char    **pats;
    int            *types;
    int             n_tt;
} cli_gguf_qopts;

/* The first option of CLI_OPTS_GGUF_QUANT given in a (its long name), NULL when none. */
const char *cli_gguf_qopts_given(const cli_args *a);

/* Parse the options of CLI_OPTS_GGUF_QUANT into p: pure, leave_output_tensor, tt_exact,
** tt_patterns/tt_types/n_tt, output_tensor_type, token_embedding_type, imatrix (loaded and
** filtered by --include/--exclude-weights, a note on stderr unless -q), imatrix_arg and
** kv_overrides. recipe (may be NULL; rpath its path) is a GGUF recipe already checked (docs/recipe.md
** "GGUF"): its "pure", "leave_output_tensor", "tensor_types_exact" add to the flags, its
** "tensor_types", "output_tensor_type", "token_embedding_type" and "importance_matrix" apply
** when the option is not given. *o owns what p points to afterwards, also after a failure
** (cli_gguf_qopts_free). Returns 0, 2 after a usage error, 3 for a bad recipe entry, or the
** exit code of the imatrix's load failure (cli_fail). */
int cli_gguf_qopts_parse(const cli_cmd *cmd, const cli_args *a, json_t *recipe, const char *rpath,
                         tm_gguf_quantize_params *p, cli_gguf_qopts *o);
void cli_gguf_qopts_free(cli_gguf_qopts *o);

#endif
