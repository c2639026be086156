/*
** tensormorph/compat.h: the runtime contract check. For a runtime target (ONNX Runtime CPU,
** TensorRT, vLLM on CUDA by compute capability, llama.cpp CPU/CUDA/Metal) and an opened
** artifact, say for every quantized tensor (and, for ONNX, every quantization node) whether the
** target executes it natively, at higher precision than stored, through a slow fallback, or not
** at all, with the reason and the public document that says so.
**
** The facts live in a data table (data/compat.json, schema docs/schemas/compat.schema.json,
** explained in docs/compat.md), compiled into the library. Every rule of the table cites its
** source (URL and title). Rules are tried in table order; the first rule for the item's target
** whose conditions all hold decides. An item that no rule covers is TM_COMPAT_UNSUPPORTED with
** rule_id NULL ("fail closed"): the table claims nothing it has not read.
** Include after tensormorph.h.
*/
#include "../tensormorph.h" /* outside the guard: this header compiles alone */
#ifndef TENSORMORPH_COMPAT_H
#define TENSORMORPH_COMPAT_H

#ifdef __cplusplus
extern "C" {
#endif

/* How a target runs one item. Stable numbering; names are the JSON strings. */
typedef enum tm_compat_status {
    TM_COMPAT_NATIVE = 0,          /* "native": a kernel for the stored format            */
    TM_COMPAT_HIGHER_PRECISION,    /* "higher_precision": expanded to a wider type first   */
    TM_COMPAT_FALLBACK_SLOW,       /* "fallback_slow": runs, through a slow/reference path */
    TM_COMPAT_UNSUPPORTED,         /* "unsupported": not run, or not covered by the table  */
    TM_COMPAT_STATUS_COUNT
} tm_compat_status;

/* One classified item. Strings are borrowed from the report (valid until its free). */
typedef struct tm_compat_item {
    int              is_node;         /* 1: an ONNX node (tm_graph_node_at); 0: a tensor        */
    int64_t          index;           /* node index or tensor index in the tm_file               */
    const char      *name;            /* tensor name; node name, or "#<index>" when it has none  */
    const char      *op_type;         /* nodes: op type ("DequantizeLinear"); tensors: NULL      */
    const char      *domain;          /* nodes: the op's domain, "ai.onnx" for the default ("" in
                                         the file), "com.microsoft" for ONNX Runtime contrib ops;
                                         tensors: NULL. A node rule without "domain" matches
                                         ai.onnx nodes only (docs/compat.md)                    */
    char             code_dtype[24];  /* "I8" "U8" "I4" "U4" "F8_E4M3" ...; the ONNX element type
                                         name for one tensormorph has no dtype for; "" unknown  */
    char             granularity[16]; /* "tensor" "channel" "group" "block"; "" unknown          */
    int              symmetric;       /* 1 zero point 0/absent, 0 a non-zero zero point, -1 unknown */
    char             ggml_type[16];   /* GGUF block type name ("Q4_K"); "" otherwise             */
    char             operand[16];     /* nodes: "weight" (codes are an initializer) or "activation" */
    char             consumer[48];    /* Dequantize nodes: op type of the first consumer; ""     */
    int              consumer_inputs_8bit_dq; /* 1: that consumer's inputs 0 and 1 both come
                                         from DequantizeLinear nodes with int8/uint8 codes      */
    char             describe[160];   /* one line: tensors their tm_qtensor_label ("I4 group:128 sym
                                         scale:F16"), nodes "DequantizeLinear I8 channel weight -> Conv" */
    char             label[TM_QLABEL_MAX];       /* tm_qtensor_label of the tensor, or of the node's
                                                    quantized weight; "" when none               */
    char             description[TM_QDESC_MAX];  /* tm_qtensor_describe of the same; ""         */
    tm_compat_status status;
    const char      *rule_id;         /* the deciding rule's id; NULL when none matched          */
    const char      *reason;          /* why (the rule's reason, or the fail-closed reason)       */
    const char      *source_id;       /* the rule's source id; NULL when none                     */
    const char      *source_url;
    const char      *source_title;
} tm_compat_item;

typedef struct tm_compat_report {
    char            target[64];        /* as asked ("vllm:sm80")                                  */
    const char     *family;            /* the table's target name ("vllm")                       */
    int             compute_capability;/* 80 for "vllm:sm80"; 0 for targets without one           */
    const char     *runtime;           /* "vLLM (compressed-tensors checkpoints)"                 */
    const char     *device;
    const char     *format;            /* the artifact's format name (tm_format_name)            */
    int             format_loaded;     /* 0: the target does not load this format at all          */
    int64_t         n_items;
    tm_compat_item *items;
    int64_t         counts[TM_COMPAT_STATUS_COUNT];
    void           *priv_;             /* the parsed table and name storage                       */
} tm_compat_report;

/* tm_compat_check: classify every quantized tensor of `f` (for ONNX: every node whose qkind is
** not TM_QNODE_NONE) for `target`.
**   target      "ort-cpu", "tensorrt:sm89", "vllm:sm80", "vllm:sm90", "llamacpp-cpu",
**               "llamacpp-cuda", "llamacpp-metal" (docs/compat.md lists them); a target whose
**               table entry has "compute_capability": true needs ":smNN" (NN = major*10+minor,
**               30..150), the others refuse a suffix.
**   table_json  the table's JSON text; NULL uses the compiled-in data/compat.json.
**   table_name  name used in messages for table_json ("data/compat.json" when NULL).
** Returns TM_OK | TM_E_INVALID_ARG (unknown target or bad ":smNN"; the message lists the
**   targets) | TM_E_CORRUPT (the table is not JSON or breaks docs/schemas/compat.schema.json or
**   names a source/target it does not define: message "<table>: <JSON path>: <reason>") |
**   TM_E_NOMEM. On success *out is the report (free with tm_compat_report_free). */
tm_status tm_compat_check(const tm_file *f, const char *target, const char *table_json,
                          const char *table_name, tm_compat_report **out, tm_err *err);

/* tm_compat_report_json: the report as one JSON object, malloc'd text (free()), NULL when out of
** memory: {"target", "family", "compute_capability" (null without), "runtime", "device",
** "format", "format_loaded", "all_native", "counts": {status: n}, "items": [{"kind" ("tensor" |
** "node"), "name", "op_type", "domain" (null for tensors), "code_dtype", "granularity", "symmetric" (true/false/null),
** "ggml_type", "operand", "consumer", "describe", "status", "reason", "rule", "source": {"id",
** "url", "title"} or null}], "sources": {id: {"url", "title"}} (the sources the items cite)}.
** Empty strings are written as null. The format of `tensormorph compat --json` (docs/compat.md). */
char *tm_compat_report_json(const tm_compat_report *r);

/* tm_compat_report_free: NULL is a no-op. */
void tm_compat_report_free(tm_compat_report *r);

/* tm_compat_status_name: "native", "higher_precision", "fallback_slow", "unsupported"; "?" for
** an out-of-range value. tm_compat_status_from_name: the inverse; -1 for an unknown name. */
const char *tm_compat_status_name(tm_compat_status s);
int         tm_compat_status_from_name(const char *name);

/* tm_compat_table_default: the compiled-in table text (data/compat.json). Static storage. */
const char *tm_compat_table_default(void);

/* tm_compat_targets_str: the table's targets as "ort-cpu, tensorrt:smNN, ..." into buf (always
** NUL-terminated; "" when the table cannot be read). table_json NULL: the compiled-in table. */
void tm_compat_targets_str(const char *table_json, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
