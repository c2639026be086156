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

static int64_t find_npy(const tm__zip *z) {
    for (int64_t i = 0; i < z->n; i++)
        if (tm__ends_with(z->e[i].name, ".npy")) return i;
    return -1;
}

/* The formats a zip archive can hold, tried in order: the first whose member is there (or
** that the caller asked for) loads it. The loaders live in their format's file (pt_zip.c,
** npy.c) and use zipread.c only, so those files never call back here. */
typedef struct zip_kind {
    tm_format fmt;
    int64_t (*find)(const tm__zip *z);  /* the member that identifies the format, or -1 */
    int       when_empty;               /* 1: an archive without members is this format */
    tm_status (*load)(tm_file *f, int mi, tm__zip *z, int64_t member, const tm_open_params *p,
                      tm_err *err);
} zip_kind;

static tm_status load_pt(tm_file *f, int mi, tm__zip *z, int64_t member, const tm_open_params *p,
                         tm_err *err) {
    return tm__pt_zip_load(f, mi, z, z->e[member].name, p, err);
}

static tm_status load_npz(tm_file *f, int mi, tm__zip *z, int64_t member,
                          const tm_open_params *p, tm_err *err) {
    (void)member;
    return tm__npz_load(f, mi, z, p, err);
}

static const zip_kind zip_kinds[] = {
    {TM_FMT_PT, find_pkl, 0, load_pt},   /* "data.pkl" (or "<stem>/data.pkl"): PyTorch       */
    {TM_FMT_NPZ, find_npy, 1, load_npz}, /* .npy members: NumPy .npz                          */
};

/* want: TM_FMT_UNKNOWN (decide by content), TM_FMT_NPZ or TM_FMT_PT (buffer entry points). */
static tm_status zip_load(tm_file *f, int mi, tm_format want, const tm_open_params *p,
                          tm_err *err) {
    tm__zip z;
    tm_status s = tm__zip_open(&z, f->maps[mi].base, f->maps[mi].size, f->maps[mi].path, err);
    if (s) return s;
    const zip_kind *k = NULL;
    int64_t member = -1;
    for (size_t i = 0; i < sizeof zip_kinds / sizeof zip_kinds[0] && !k; i++) {
        const zip_kind *c = &zip_kinds[i];
        if (want != TM_FMT_UNKNOWN && want != c->fmt) continue;
        member = c->find(&z);
        /* NPZ asked for: an archive without .npy members still reads (and fails) as one */
        if (member >= 0 || (c->when_empty && z.n == 0) || (want == c->fmt && c->when_empty)) k = c;
    }
    if (k)
        s = k->load(f, mi, &z, member, p, err);
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
