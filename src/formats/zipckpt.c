/*
** zipckpt.c: checkpoints that are zip archives. The content decides the format: a member
** "data.pkl" (PyTorch writes "<stem>/data.pkl") makes a PyTorch checkpoint (pt_zip.c); .npy
** members make a NumPy .npz (npy.c). Opening maps the archive once; libzip validates it.
*/
#include "zipread.h"

int tm__zip_probe(const uint8_t *head, size_t n, const char *path) {
    (void)path;
    return n >= 4 && head[0] == 'P' && head[1] == 'K' &&
           ((head[2] == 3 && head[3] == 4) || (head[2] == 5 && head[3] == 6));
}

/* The PyTorch pickle of an archive: "data.pkl" at the top or one folder down, else -1. */
static int64_t find_pkl(const tm__zip *z) {
    for (int64_t i = 0; i < z->n; i++) {
        const char *nm = z->e[i].name, *sl = strchr(nm, '/');
        if (strcmp(nm, "data.pkl") == 0 || (sl && strcmp(sl + 1, "data.pkl") == 0)) return i;
    }
    return -1;
}

static int has_npy(const tm__zip *z) {
    for (int64_t i = 0; i < z->n; i++) {
        size_t l = strlen(z->e[i].name);
        if (l > 4 && strcmp(z->e[i].name + l - 4, ".npy") == 0) return 1;
    }
    return 0;
}

/* want: TM_FMT_UNKNOWN (decide by content), TM_FMT_NPZ or TM_FMT_PT (buffer entry points). */
static tm_status zip_load(tm_file *f, int mi, tm_format want, const tm_open_params *p,
                          tm_err *err) {
    tm__zip z;
    tm_status s = tm__zip_open(&z, f->maps[mi].base, f->maps[mi].size, f->maps[mi].path, err);
    if (s) return s;
    int64_t pkl = find_pkl(&z);
    if (pkl >= 0 && want != TM_FMT_NPZ)
        s = tm__pt_zip_load(f, mi, &z, z.e[pkl].name, p, err);
    else if (want != TM_FMT_PT && (has_npy(&z) || z.n == 0 || want == TM_FMT_NPZ))
        s = tm__npz_load(f, mi, &z, p, err);
    else
        s = tm__err_set(err, TM_E_UNSUPPORTED, 0,
                        "%s: zip archive holds neither a PyTorch data.pkl nor NumPy .npy members",
                        f->maps[mi].path);
    tm__zip_close(&z);
    return s;
}

static tm_status finish(tm_file *f, tm_status s, tm_file **out, tm_err *err) {
    if (!s) s = tm__file_finish(f, err);
    if (s) { tm_close(f); return s; }
    *out = f;
    return TM_OK;
}

tm_status tm__zip_ckpt_open(const char *path, const tm_open_params *p, tm_file **out,
                            tm_err *err) {
    tm_open_params defp = tm_open_params_default();
    if (!p) p = &defp;
    *out = NULL;
    tm_file *f = tm__file_new(TM_FMT_NPZ);
    if (!f) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    int mi = 0;
    tm_status s = tm__file_map(f, path, &mi, err);
    if (!s) s = zip_load(f, mi, TM_FMT_UNKNOWN, p, err);
    return finish(f, s, out, err);
}

tm_status tm__zip_ckpt_open_buffer(const void *data, size_t n, const char *name, tm_format want,
                                   const tm_open_params *p, tm_file **out, tm_err *err) {
    tm_open_params defp = tm_open_params_default();
    if (!p) p = &defp;
    *out = NULL;
    if (!data && n) return tm__err_set(err, TM_E_INVALID_ARG, -1, "NULL buffer of %zu bytes", n);
    tm_file *f = tm__file_new(want == TM_FMT_PT ? TM_FMT_PT : TM_FMT_NPZ);
    if (!f) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    int mi = 0;
    tm_status s = tm__file_add_buffer(f, name ? name : "<buffer>", data, n, &mi, err);
    if (!s) s = zip_load(f, mi, want, p, err);
    return finish(f, s, out, err);
}
