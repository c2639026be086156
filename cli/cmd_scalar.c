/* cmd_scalar.c: `tensormorph scalar PATH TENSOR INDEX`: the Scalar Inspector. */
#include "cli.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

const cli_opt opts_scalar[] = {
    CLI_OPT_REF("full-precision checkpoint: also print the source value and the error (also in LSB)"),
    CLI_OPT_END,
};
const char details_scalar[] =
    "INDEX is comma-separated coordinates in the tensor's logical shape (row-major, NumPy order),\n"
    "e.g. 3,17. For a quantized tensor prints the code q of value = (q - zero_point) x scale with\n"
    "any storage offset removed (for fp8 the stored byte), the container word as stored in the\n"
    "file, the scale, zero point, group id and the dequantized value. A plain tensor prints its\n"
    "stored value. With --ref, the source is the reference's tensor of the same name, else for\n"
    "P.qweight (GPTQ/AWQ) P.weight, for X_quantized (ONNX) X, else its name in the other convention\n"
    "(Hugging Face <-> GGUF, q/k rows un-permuted, as diff and qdiff pair them). A tensor the\n"
    "reference lacks (e.g. a quantized output's weight_scale) still prints its value; ref value and\n"
    "error are left out (JSON: null, with a \"note\"), exit 0. A negative coordinate is refused; put -- before an INDEX that starts with -.";

/* scalar_json: the `scalar --json` document (also served as /api/v1/scalar). qe: the element
** when t is quantized; ref_value used when have_ref. */
json_t *scalar_json(const tm_file *f, const tm_tensor *t, int nc, const int64_t *coords, int64_t flat,
                    const tm_qelement *qe_in, double value, int have_ref, double ref_value) {
    tm_qelement qe = *qe_in;
    double error = value - ref_value;
    double lsb = t->quant ? tm_lsb_size(t->quant->code_dtype, qe.scale, have_ref ? ref_value : value) : 0;
    double err_lsb = lsb > 0 ? error / lsb : NAN;
    json_t *d = cli_json_doc("scalar");
    json_object_set_new(d, "tensor", json_string(t->name));
    json_object_set_new(d, "index", cli_json_shape(nc, coords));
    json_object_set_new(d, "flat_index", json_integer(flat));
    json_object_set_new(d, "dtype", json_string(tm_dtype_get(t->dtype)->name));
    json_object_set_new(d, "quantized", json_boolean(t->quant != NULL));
    cli_json_set_label(d, f, t);
    if (t->quant) {
        json_object_set_new(d, "code", json_integer(qe.code));
        json_object_set_new(d, "stored", json_integer((json_int_t)qe.stored));
        json_object_set_new(d, "stored_bits", json_integer(qe.stored_bits));
        json_object_set_new(d, "scale", cli_json_num(qe.scale));
        json_object_set_new(d, "zero_point", json_integer(qe.zero_point));
        json_object_set_new(d, "group", json_integer(qe.group));
        tm_qformula fm;
        tm_err ferr;
        if (!tm_qelement_formula(f, tm_file_find(f, t->name), flat, &qe, &fm, &ferr)) {
            /* the formula that produced "value", its numbers and where they come from */
            json_t *fo = json_object(), *terms = json_object();
            json_object_set_new(fo, "symbolic", json_string(fm.symbolic));
            json_object_set_new(fo, "numeric", json_string(fm.numeric));
            json_object_set_new(fo, "note", json_string(fm.note));
            for (int k = 0; k < fm.n_terms; k++) json_object_set_new(terms, fm.terms[k].name, cli_json_num(fm.terms[k].value));
            json_object_set_new(fo, "terms", terms);
            json_object_set_new(d, "formula", fo);
        }
        if (qe.ggml_type) { /* GGUF block type: both levels of scale (tm_qelement) */
            json_t *g = json_object();
            const tm_ggml_type_info *gi = tm_ggml_type_info_get(qe.ggml_type);
            json_object_set_new(g, "type", json_string(gi ? gi->name : "?"));
            json_object_set_new(g, "block", json_integer(qe.block));
            json_object_set_new(g, "sub_block", json_integer(qe.sub_block));
            json_object_set_new(g, "super_scale", cli_json_num(qe.super_scale));
            json_object_set_new(g, "super_min", cli_json_num(qe.super_min));
            json_object_set_new(g, "sub_scale", json_integer(qe.sub_scale));
            json_object_set_new(g, "sub_min", json_integer(qe.sub_min));
            json_object_set_new(g, "min", cli_json_num(qe.min));
            json_object_set_new(d, "ggml", g);
        }
    } else {
        json_object_set_new(d, "code", json_null());
        json_object_set_new(d, "stored", json_null());
        json_object_set_new(d, "scale", json_null());
        json_object_set_new(d, "zero_point", json_null());
        json_object_set_new(d, "group", json_null());
    }
    json_object_set_new(d, "value", cli_json_num(value));
    json_object_set_new(d, "ref_value", have_ref ? cli_json_num(ref_value) : json_null());
    json_object_set_new(d, "error", have_ref ? cli_json_num(error) : json_null());
    json_object_set_new(d, "error_lsb", have_ref && t->quant ? cli_json_num(err_lsb) : json_null());
    return d;
}

/* scalar_lookup: element `flat` of tensor ti: its value (dequantized), the quantized element
** (when quantized, else *qe zeroed) and, when ref is given, the value there of ref's tensor rp
** (tm_ref_pair: in ti's element order, q/k rows un-permuted across conventions). */
tm_status scalar_lookup(const tm_file *f, int64_t ti, int64_t flat, const tm_file *ref, const tm_tensor_pair *rp,
                        tm_qelement *qe, double *value, double *ref_value, tm_err *err) {
    const tm_tensor *t = tm_file_tensor(f, ti);
    memset(qe, 0, sizeof *qe);
    *ref_value = NAN;
    tm_status s;
    if (t->quant) {
        s = tm_qelement_get(f, ti, flat, qe, err);
        *value = qe->value;
    } else {
        float v;
        s = tm_tensor_read_f32(f, ti, flat, 1, &v, err);
        *value = v;
    }
    if (!s && ref) {
        float v;
        s = tm_tensor_pair_read_f32(ref, rp, flat, 1, &v, err);
        *ref_value = v;
    }
    return s;
}

int cmd_scalar(const cli_cmd *cmd, cli_args *a) {
    int64_t coords[TM_MAX_DIMS];
    int nc = cli_parse_coords(a->pos[2], coords, TM_MAX_DIMS);
    if (nc < 0) return cli_usage_error(cmd, "INDEX must be comma-separated integers, got '%s'", a->pos[2]);
    tm_file *f;
    int rc = cli_open(a->pos[0], &f);
    if (rc) return rc;
    int64_t ti = tm_file_find(f, a->pos[1]);
    const tm_tensor *t = tm_file_tensor(f, ti);
    if (!t) {
        cli_error(EXIT_USAGE, "%s: no tensor named '%s'", a->pos[0], a->pos[1]);
        tm_close(f);
        return EXIT_USAGE;
    }
    char sh[96];
    cli_shape_str(t->ndim, t->shape, sh, sizeof sh);
    if (nc != t->ndim && !(t->ndim == 0 && nc == 1 && coords[0] == 0)) {
        cli_error(EXIT_USAGE, "tensor '%s' has shape %s: INDEX needs %d coordinate(s), got %d", t->name, sh, t->ndim, nc);
        tm_close(f);
        return EXIT_USAGE;
    }
    int64_t flat = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (coords[d] < 0) {
            cli_error(EXIT_USAGE, "tensor '%s' has shape %s: index %" PRId64 " (coordinate %d) is negative; "
                      "coordinates count from 0", t->name, sh, coords[d], d);
            tm_close(f);
            return EXIT_USAGE;
        }
        if (coords[d] >= t->shape[d]) {
            cli_error(EXIT_USAGE, "tensor '%s' has shape %s: coordinate %d is %" PRId64 ", outside [0, %" PRId64 ")",
                      t->name, sh, d, coords[d], t->shape[d]);
            tm_close(f);
            return EXIT_USAGE;
        }
        flat = flat * t->shape[d] + coords[d];
    }
    tm_err err;
    tm_qelement qe;
    memset(&qe, 0, sizeof qe);
    double value;
    tm_status s;
    double unused_ref;
    s = scalar_lookup(f, ti, flat, NULL, NULL, &qe, &value, &unused_ref, &err);
    if (s) { rc = cli_fail(s, &err); tm_close(f); return rc; }
    int have_ref = 0;
    double ref_value = NAN;
    char ref_note[1024] = "", ref_name[512] = "";
    if (cli_get(a, "ref")) {
        tm_file *r;
        rc = cli_open(cli_get(a, "ref"), &r);
        if (rc) { tm_close(f); return rc; }
        /* the source: same name, P.qweight -> P.weight, X_quantized -> X, else the name in the
        ** other convention (HF <-> GGUF, q/k rows un-permuted): tm_ref_pair */
        tm_tensor_pair rp;
        int64_t ri = tm_ref_pair(r, f, ti, &rp);
        const tm_tensor *rt = tm_file_tensor(r, ri);
        if (rt && rt->n_elems == t->n_elems && strcmp(rt->name, t->name))
            snprintf(ref_name, sizeof ref_name, "%s", rt->name);
        if (!rt || rt->n_elems != t->n_elems) {
            /* e.g. a quantized output's weight_scale: the source has nothing to compare with.
            ** The stored value is still shown; the ref_* fields are left out (docs/API.md). */
            if (!rt)
                snprintf(ref_note, sizeof ref_note, "%s has no tensor '%s': ref value and error left out",
                         cli_get(a, "ref"), t->name);
            else
                snprintf(ref_note, sizeof ref_note,
                         "%s: tensor '%s' has %" PRId64 " elements, not %" PRId64 ": ref value and error left out",
                         cli_get(a, "ref"), rt->name, rt->n_elems, t->n_elems);
            fprintf(stderr, "tensormorph: note: %s\n", ref_note);
            tm_close(r);
        } else {
            float v;
            s = tm_tensor_pair_read_f32(r, &rp, flat, 1, &v, &err);
            tm_close(r);
            if (s) { rc = cli_fail(s, &err); tm_close(f); return rc; }
            ref_value = v;
            have_ref = 1;
        }
    }
    double error = value - ref_value;
    double lsb = t->quant ? tm_lsb_size(t->quant->code_dtype, qe.scale, have_ref ? ref_value : value) : 0;
    double err_lsb = lsb > 0 ? error / lsb : NAN;
    if (g_cli.json) {
        json_t *d = scalar_json(f, t, nc, coords, flat, &qe, value, have_ref, ref_value);
        if (ref_note[0]) json_object_set_new(d, "note", json_string(ref_note));
        cli_json_print(d);
    } else {
        printf("tensor:      %s %s %s\n", t->name, tm_dtype_get(t->dtype)->name, sh);
        printf("index:       %s (flat %" PRId64 ")\n", a->pos[2], flat);
        if (t->quant) {
            char q[96];
            cli_quant_str(f, t, q, sizeof q);
            printf("scheme:      %s\n", q);
            printf("code q:      %" PRId64 "\n", qe.code);
            printf("stored:      0x%0*" PRIx64 " (%d-bit container word)\n", qe.stored_bits / 4, qe.stored, qe.stored_bits);
            printf("scale:       %.9g\n", qe.scale);
            printf("zero_point:  %" PRId64 "\n", qe.zero_point);
            printf("group:       %" PRId64 "\n", qe.group);
            const tm_ggml_type_info *gi = qe.ggml_type ? tm_ggml_type_info_get(qe.ggml_type) : NULL;
            if (gi && gi->block_size > gi->sub_block) /* super-block types: both levels */
                printf("block:       %" PRId64 ", sub-block %" PRId64 " of %" PRId64 " values\n", qe.block, qe.sub_block, gi->sub_block);
            else if (gi)
                printf("block:       %" PRId64 " (%" PRId64 " values)\n", qe.block, gi->block_size);
            tm_qformula fm;
            if (!tm_qelement_formula(f, ti, flat, &qe, &fm, &err)) {
                printf("formula:     %s\n", fm.symbolic);
                printf("             = %s\n", fm.numeric);
                printf("terms:      ");
                for (int k = 0; k < fm.n_terms; k++) printf(" %s %.9g%s", fm.terms[k].name, fm.terms[k].value, k + 1 < fm.n_terms ? "," : "");
                printf("\n");
                printf("             (%s)\n", fm.note);
            }
            printf("value:       %.9g\n", value);
        } else {
            printf("value:       %.9g (not quantized)\n", value);
        }
        if (have_ref) {
            if (ref_name[0]) printf("ref value:   %.9g (tensor '%s' of the reference)\n", ref_value, ref_name);
            else printf("ref value:   %.9g\n", ref_value);
            if (t->quant) printf("error:       %.9g (%.4f LSB)\n", error, err_lsb);
            else printf("error:       %.9g\n", error);
        }
    }
    tm_close(f);
    return 0;
}
