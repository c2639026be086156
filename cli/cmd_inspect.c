/* cmd_inspect.c: `tensormorph inspect PATH`: what is inside a checkpoint. */
#include "cli.h"

#include <inttypes.h>
#include <string.h>

const cli_opt opts_inspect[] = {
    {"filter", 0, "REGEX", 0, "list only tensors whose name matches REGEX (POSIX extended)"},
    {"no-tensors", 0, NULL, 0, "print the summary only"},
    CLI_OPT_END,
};
const char details_inspect[] =
    "PATH is any checkpoint tensormorph opens: a .safetensors file, a model.safetensors.index.json\n"
    "or a directory holding one, a .gguf file, an .onnx model, a PyTorch .pt/.pth, a NumPy\n"
    ".npy/.npz (docs/formats.md).\n"
    "Opening reads headers only. Each quantized tensor is shown once, under the name the dense\n"
    "tensor had, with its code type, granularity, group size, scale dtype and the effective bits\n"
    "per parameter counting scales and zero points. Where config.json claims a quantization\n"
    "scheme, disagreements with the tensors are printed as warnings; so is a GGUF tensor name of\n"
    "64 bytes or more (llama.cpp refuses it). Tensors over one storage (tied weights of a .pt)\n"
    "are counted once and the later ones marked (tied: NAME).";

#include <regex.h>

/* Bytes that a quantized tensor occupies with its scale, zero point and aux tensors. */
static uint64_t total_bytes(const tm_file *f, int64_t i) {
    const tm_tensor *t = tm_file_tensor(f, i);
    uint64_t b = t->n_bytes;
    if (!t->quant) return b;
    int64_t n = tm_file_n_tensors(f);
    for (int64_t j = 0; j < n; j++) {
        const tm_tensor *o = tm_file_tensor(f, j);
        if (o->role != TM_ROLE_DATA && o->owner == i) b += o->n_bytes;
    }
    return b;
}

/* The summary counts. A tensor whose bytes are those of an earlier tensor (the same file,
** offset and length: a PyTorch checkpoint's tied weights share one storage) is counted once;
** tied_to[i] names that earlier tensor, else -1. */
typedef struct inspect_counts {
    uint64_t by_dtype[TM_DTYPE_COUNT], total_bytes;
    int64_t  n_params, n_quant, n_tied;
    int64_t *tied_to; /* malloc'd, [n_tensors] */
} inspect_counts;

static const tm_file *g_order_f;
static int cmp_storage(const void *pa, const void *pb) {
    const tm_tensor *x = tm_file_tensor(g_order_f, *(const int64_t *)pa), *y = tm_file_tensor(g_order_f, *(const int64_t *)pb);
    if (x->file_index != y->file_index) return x->file_index < y->file_index ? -1 : 1;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->n_bytes != y->n_bytes) return x->n_bytes < y->n_bytes ? -1 : 1;
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return a < b ? -1 : a > b;
}

static int count_tensors(const tm_file *f, inspect_counts *c) {
    memset(c, 0, sizeof *c);
    int64_t n = tm_file_n_tensors(f);
    int64_t *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    c->tied_to = malloc((size_t)(n ? n : 1) * sizeof *c->tied_to);
    if (!order || !c->tied_to) { free(order); free(c->tied_to); c->tied_to = NULL; return -1; }
    for (int64_t i = 0; i < n; i++) order[i] = i, c->tied_to[i] = -1;
    g_order_f = f; /* by storage, then index: a tie's first tensor comes first */
    qsort(order, (size_t)n, sizeof *order, cmp_storage);
    for (int64_t k = 1; k < n; k++) {
        const tm_tensor *x = tm_file_tensor(f, order[k - 1]), *y = tm_file_tensor(f, order[k]);
        if (y->n_bytes > 0 && x->file_index == y->file_index && x->offset == y->offset && x->n_bytes == y->n_bytes)
            c->tied_to[order[k]] = c->tied_to[order[k - 1]] >= 0 ? c->tied_to[order[k - 1]] : order[k - 1];
    }
    free(order);
    for (int64_t i = 0; i < n; i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        if (t->quant) c->n_quant++;
        if (c->tied_to[i] >= 0) { c->n_tied++; continue; }
        c->by_dtype[t->phys_dtype] += t->n_bytes;
        c->total_bytes += t->n_bytes;
        if (t->role == TM_ROLE_DATA) c->n_params += t->n_elems;
    }
    return 0;
}

/* inspect_json: the `inspect --json` document (also served as /api/v1/inspect). re: only
** tensors whose name matches (NULL: all); with_tensors 0: the summary only. */
json_t *inspect_json(const tm_file *f, const char *path, const regex_t *re, int with_tensors) {
    int64_t n = tm_file_n_tensors(f);
    inspect_counts c;
    if (count_tensors(f, &c)) return NULL;
    uint64_t total = c.total_bytes;
    json_t *d = cli_json_doc("inspect");
    json_object_set_new(d, "format", json_string(tm_format_name(tm_file_format(f))));
    json_object_set_new(d, "path", json_string(path));
    json_t *files = json_array();
    for (int i = 0; i < tm_file_n_paths(f); i++) {
        json_t *o = json_object();
        json_object_set_new(o, "path", json_string(tm_file_path(f, i)));
        json_object_set_new(o, "bytes", json_integer((json_int_t)tm_file_size(f, i)));
        json_array_append_new(files, o);
    }
    json_object_set_new(d, "files", files);
    json_object_set_new(d, "n_tensors", json_integer(n));
    json_object_set_new(d, "n_quantized", json_integer(c.n_quant));
    json_object_set_new(d, "n_parameters", json_integer(c.n_params));
    json_object_set_new(d, "tensor_bytes", json_integer((json_int_t)total));
    json_object_set_new(d, "n_tied", json_integer(c.n_tied));
    json_t *bd = json_object();
    for (int k = 0; k < TM_DTYPE_COUNT; k++)
        if (c.by_dtype[k])
            json_object_set_new(bd, tm_dtype_get((tm_dtype)k)->name,
                                json_integer((json_int_t)c.by_dtype[k]));
    json_object_set_new(d, "bytes_by_dtype", bd);
    json_t *meta = json_object();
    for (int64_t k = 0; k < tm_file_n_meta(f); k++) {
        /* GGUF: the complete typed value (arrays in full), else the text */
        const char *js = tm_gguf_meta_json(f, k);
        json_t *v = js ? json_loads(js, JSON_DECODE_ANY, NULL) : NULL;
        json_object_set_new(meta, tm_file_meta_key(f, k), v ? v : json_string(tm_file_meta_value(f, k)));
    }
    json_object_set_new(d, "metadata", meta);
    json_t *warn = json_array();
    for (int64_t k = 0; k < tm_file_n_warnings(f); k++)
        json_array_append_new(warn, json_string(tm_file_warning(f, k)));
    json_object_set_new(d, "warnings", warn);
    json_t *ts = json_array();
    for (int64_t i = 0; i < n && with_tensors; i++) {
        const tm_tensor *t = tm_file_tensor(f, i);
        if (re && regexec(re, t->name, 0, NULL, 0) != 0) continue;
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(t->name));
        if (strcmp(t->phys_name, t->name))
            json_object_set_new(o, "stored_as", json_string(t->phys_name));
        json_object_set_new(o, "dtype", json_string(tm_dtype_get(t->dtype)->name));
        json_object_set_new(o, "shape", cli_json_shape(t->ndim, t->shape));
        json_object_set_new(o, "bytes", json_integer((json_int_t)t->n_bytes));
        json_object_set_new(o, "quantization", cli_quant_json(f, t));
        static const char *roles[] = {"data", "scale", "zero_point", "aux"};
        json_object_set_new(o, "role", json_string(roles[t->role]));
        if (t->role != TM_ROLE_DATA && t->owner >= 0)
            json_object_set_new(o, "owner", json_string(tm_file_tensor(f, t->owner)->name));
        if (c.tied_to[i] >= 0) /* shares its storage with an earlier tensor, counted once */
            json_object_set_new(o, "tied_to", json_string(tm_file_tensor(f, c.tied_to[i])->name));
        double bpp = t->n_elems ? 8.0 * (double)total_bytes(f, i) / (double)t->n_elems : 0;
        json_object_set_new(o, "bits_per_param", cli_json_num(bpp));
        json_array_append_new(ts, o);
    }
    json_object_set_new(d, "tensors", ts);
    free(c.tied_to);
    return d;
}

int cmd_inspect(const cli_cmd *cmd, cli_args *a) {
    tm_file *f;
    int rc = cli_open_warn(a->pos[0], &f, g_cli.json); /* text: the warnings are in the listing */
    if (rc) return rc;
    regex_t re;
    const char *filter = cli_get(a, "filter");
    if (filter && regcomp(&re, filter, REG_EXTENDED | REG_NOSUB) != 0) {
        tm_close(f);
        return cli_usage_error(cmd, "--filter: invalid regular expression '%s'", filter);
    }
    int64_t n = tm_file_n_tensors(f);
    inspect_counts c;
    if (count_tensors(f, &c)) {
        if (filter) regfree(&re);
        tm_close(f);
        return cli_error(EXIT_IO, "out of memory");
    }
    if (g_cli.json) {
        json_t *d = inspect_json(f, a->pos[0], filter ? &re : NULL, !cli_has(a, "no-tensors"));
        if (d) cli_json_print(d);
        else rc = cli_error(EXIT_IO, "out of memory");
    } else {
        printf("path:        %s\nformat:      %s\n", a->pos[0], tm_format_name(tm_file_format(f)));
        printf("files:       %d (", tm_file_n_paths(f));
        uint64_t fb = 0;
        for (int i = 0; i < tm_file_n_paths(f); i++) fb += tm_file_size(f, i);
        printf("%.2f MB)\n", (double)fb / 1e6);
        printf("tensors:     %" PRId64 " (%" PRId64 " quantized)\nparameters:  %" PRId64 "\n", n,
               c.n_quant, c.n_params);
        printf("bytes:      ");
        for (int k = 0; k < TM_DTYPE_COUNT; k++)
            if (c.by_dtype[k]) printf(" %s %.2f MB", tm_dtype_get((tm_dtype)k)->name, (double)c.by_dtype[k] / 1e6);
        printf("\n");
        int64_t n_conv[2] = {0, 0}; /* GPTQ tensors read as v1, v2 */
        for (int64_t i = 0; i < n; i++) {
            const tm_tensor *t = tm_file_tensor(f, i);
            const char *zc = t->quant ? cli_gptq_convention(t->quant) : NULL;
            if (zc) n_conv[zc[1] == '2']++;
        }
        if (n_conv[0] || n_conv[1]) {
            printf("gptq:        zero points read as");
            if (n_conv[0]) printf(" v1 (stored z - 1) in %" PRId64 " tensors%s", n_conv[0], n_conv[1] ? "," : "");
            if (n_conv[1]) printf(" v2 (stored z) in %" PRId64 " tensors", n_conv[1]);
            printf("\n");
        }
        if (c.n_tied)
            printf("tied:        %" PRId64 " tensor%s sharing the storage of another, counted once\n", c.n_tied,
                   c.n_tied == 1 ? "" : "s");
        for (int64_t k = 0; k < tm_file_n_warnings(f); k++)
            printf("warning:     %s\n", tm_file_warning(f, k));
        if (tm_file_format(f) == TM_FMT_GGUF) /* GGUF key/values; long values cut */
            for (int64_t k = 0; k < tm_file_n_meta(f); k++) {
                const char *v = tm_file_meta_value(f, k);
                printf("%-12s %s = ", k ? "" : "metadata:", tm_file_meta_key(f, k));
                size_t len = strlen(v), shown = 0;
                for (; shown < len && shown < 160; shown++)
                    putchar(v[shown] == '\n' || v[shown] == '\r' || v[shown] == '\t' ? ' ' : v[shown]);
                printf("%s\n", shown < len ? "..." : "");
            }
        if (!cli_has(a, "no-tensors")) {
            printf("\n%-48s %-8s %-16s %12s  %-34s %6s\n", "name", "dtype", "shape", "bytes",
                   "quantization", "bits/p");
            for (int64_t i = 0; i < n; i++) {
                const tm_tensor *t = tm_file_tensor(f, i);
                if (filter && regexec(&re, t->name, 0, NULL, 0) != 0) continue;
                char sh[64], q[96];
                cli_shape_str(t->ndim, t->shape, sh, sizeof sh);
                if (t->quant) cli_quant_str(f, t, q, sizeof q);
                else if (t->role == TM_ROLE_SCALE) snprintf(q, sizeof q, "(scale)");
                else if (t->role == TM_ROLE_ZERO_POINT) snprintf(q, sizeof q, "(zero point)");
                else if (t->role == TM_ROLE_AUX) snprintf(q, sizeof q, "(aux)");
                else if (c.tied_to[i] >= 0) snprintf(q, sizeof q, "(tied: %.80s)", tm_file_tensor(f, c.tied_to[i])->name);
                else snprintf(q, sizeof q, "-");
                double bpp = t->n_elems ? 8.0 * (double)total_bytes(f, i) / (double)t->n_elems : 0;
                /* a GGUF block-quantized tensor's type is its ggml type (Q5_0), not its codes' (U8) */
                const tm_ggml_type_info *gi = t->quant && t->quant->ggml_type ? tm_ggml_type_info_get(t->quant->ggml_type) : NULL;
                printf("%-48s %-8s %-16s %12" PRIu64 "  %-34s %6.2f\n", t->name,
                       gi ? gi->name : tm_dtype_get(t->dtype)->name, sh, t->n_bytes, q, bpp);
            }
        }
    }
    free(c.tied_to);
    if (filter) regfree(&re);
    tm_close(f);
    return rc;
}
