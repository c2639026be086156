/* ctensors_write.c: the compressed-tensors tensor layout and side files for the writer
** (ctensors_write.h); its reader is ctensors.c. */
#include "ctensors_write.h"
#include "../core/fsutil.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

tm_status tm__ct_weight_entries(const tm__ct_weight *w, tm_st_entry *entries, char **names, int64_t *ne,
                                int64_t idx[4], uint64_t *row_bytes, tm_err *err) {
    const tm_qspec *sp = w->spec;
    int bits = tm_dtype_get(sp->code_dtype)->bits;
    int64_t first = *ne;
    for (int k = 0; k < 4; k++) idx[k] = -1;
    /* codes */
    tm_st_entry *e = &entries[*ne];
    if (w->fp8) {
        names[*ne] = tm__aprintf("%s.weight", w->module);
        e->dtype = TM_F8_E4M3;
        e->ndim = 2; e->shape[0] = w->rows; e->shape[1] = w->cols;
        *row_bytes = (uint64_t)w->cols;
    } else {
        names[*ne] = tm__aprintf("%s.weight_packed", w->module);
        int64_t words = (w->cols * bits + 31) / 32;
        e->dtype = TM_I32;
        e->ndim = 2; e->shape[0] = w->rows; e->shape[1] = words;
        *row_bytes = (uint64_t)words * 4;
    }
    e->name = names[*ne];
    idx[TM__CT_CODES] = (*ne)++;
    /* scale: tensor [1], channel [rows, 1], group [rows, ngroups], block [nbr, nbc] */
    e = &entries[*ne];
    names[*ne] = tm__aprintf("%s.weight_scale", w->module);
    e->name = names[*ne];
    e->dtype = sp->scale_dtype;
    if (sp->gran.kind == TM_GRAN_TENSOR) { e->ndim = 1; e->shape[0] = 1; }
    else if (sp->gran.kind == TM_GRAN_CHANNEL) { e->ndim = 2; e->shape[0] = w->rows; e->shape[1] = 1; }
    else { e->ndim = 2; e->shape[0] = w->pshape[0]; e->shape[1] = w->pshape[1]; }
    idx[TM__CT_SCALE] = (*ne)++;
    if (!w->fp8) {
        e = &entries[*ne];
        names[*ne] = tm__aprintf("%s.weight_shape", w->module);
        e->name = names[*ne];
        e->dtype = TM_I64; e->ndim = 1; e->shape[0] = 2;
        idx[TM__CT_SHAPE] = (*ne)++;
    }
    if (!sp->symmetric) {
        e = &entries[*ne];
        names[*ne] = tm__aprintf("%s.weight_zero_point", w->module);
        e->name = names[*ne];
        if (sp->gran.kind == TM_GRAN_TENSOR) { e->dtype = TM_I8; e->ndim = 1; e->shape[0] = 1; }
        else {
            int64_t ng = w->pndim >= 2 ? w->pshape[1] : 1, prow = w->n_params / ng;
            e->dtype = TM_I32; e->ndim = 2; e->shape[0] = (prow * bits + 31) / 32; e->shape[1] = ng;
        }
        idx[TM__CT_ZP] = (*ne)++;
    }
    for (int64_t k = first; k < *ne; k++)
        if (!names[k]) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    return TM_OK;
}

static const char *const side_files[] = {
    "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "tokenizer.model", "vocab.json", "vocab.txt", "merges.txt", "added_tokens.json",
    "chat_template.jinja", "chat_template.json", "preprocessor_config.json", NULL};

tm_status tm__ct_copy_side_files(const tm_file *in, const char *dir, tm_err *err) {
    if (tm_file_n_paths(in) < 1) return TM_OK;
    char *src_dir = tm__dirname(tm_file_path(in, 0));
    if (!src_dir) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    tm_status s = TM_OK;
    for (int k = 0; side_files[k] && !s; k++) {
        char *from = tm__aprintf("%s/%s", src_dir, side_files[k]);
        char *to = tm__aprintf("%s/%s", dir, side_files[k]);
        struct stat st;
        if (from && to && stat(from, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (64 << 20)) {
            FILE *fp = fopen(from, "rb");
            char *buf = malloc((size_t)st.st_size + 1);
            size_t got = (fp && buf) ? fread(buf, 1, (size_t)st.st_size, fp) : 0;
            if (fp) fclose(fp);
            if (!buf || got != (size_t)st.st_size) s = tm__err_sys(err, errno ? errno : EIO, "%s: cannot read", from);
            else s = tm__write_file_atomic(to, buf, got, err);
            free(buf);
        }
        free(from);
        free(to);
    }
    free(src_dir);
    return s;
}
