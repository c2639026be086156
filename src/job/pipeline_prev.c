/* pipeline_prev.c: a previous tensormorph output at a FILE OUT (pipeline.h): the files its
** OUT.manifest.json lists, which names a new output may replace, and the previous files a new
** output leaves behind (removed once the new one is in place). */
#include "pipeline.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* 1 when name is OUT's own file name or one of its split names "<stem>-NNNNN-of-NNNNN.gguf"
** (stem: OUT's name without ".gguf", as tm_gguf_writer_open_split names them): the only names
** a manifest of OUT may make us replace or remove. */
static int out_name(const char *base, const char *name) {
    if (!strcmp(name, base)) return 1;
    size_t bl = strlen(base), nl = strlen(name);
    if (bl > 5 && !strcmp(base + bl - 5, ".gguf")) bl -= 5;
    if (nl != bl + 20 || strncmp(name, base, bl) || strcmp(name + nl - 5, ".gguf")) return 0;
    const char *t = name + bl; /* "-NNNNN-of-NNNNN" */
    for (int i = 0; i < 15; i++) {
        int digit = (i >= 1 && i <= 5) || i >= 10;
        if (digit ? (t[i] < '0' || t[i] > '9') : t[i] != "-00000-of-00000"[i]) return 0;
    }
    return 1;
}

static const char *base_of(const char *p) { return strrchr(p, '/') ? strrchr(p, '/') + 1 : p; }

void tm__prev_free(char **names) {
    for (int i = 0; names && names[i]; i++) free(names[i]);
    free(names);
}

char **tm__prev_files(const char *out) {
    char *mp = tm__aprintf("%s.manifest.json", out);
    struct stat st;
    json_t *m = mp && stat(mp, &st) == 0 && S_ISREG(st.st_mode) ? json_load_file(mp, 0, NULL) : NULL;
    free(mp);
    if (!m) return NULL;
    json_t *files = json_object_get(json_object_get(m, "output"), "files");
    size_t n = json_is_array(files) ? json_array_size(files) : 0;
    char **r = tm__calloc(n + 1, sizeof *r);
    size_t k = 0;
    for (size_t i = 0; r && i < n; i++) {
        const char *f = json_string_value(json_object_get(json_array_get(files, i), "file"));
        if (!f || !out_name(base_of(out), f)) continue;
        if (!(r[k] = tm__strdup(f))) break; /* a shorter list: more refusals, never fewer */
        k++;
    }
    json_decref(m);
    return r;
}

int tm__prev_lists(char *const *prev, const char *name) {
    for (int i = 0; prev && prev[i]; i++)
        if (!strcmp(prev[i], base_of(name))) return 1;
    return 0;
}

/* 1 when path is one of in's files. */
static int is_input(const tm_file *in, const struct stat *st) {
    for (int i = 0; in && i < tm_file_n_paths(in); i++) {
        struct stat is;
        if (stat(tm_file_path(in, i), &is) == 0 && is.st_dev == st->st_dev && is.st_ino == st->st_ino) return 1;
    }
    return 0;
}

tm_status tm__prev_check_names(const tm_file *in, const char *out, int force, const char *const *names, int n,
                               tm_err *err) {
    char *dir = tm__dirname(out);
    char **prev = tm__prev_files(out);
    tm_status s = dir ? TM_OK : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int i = 0; !s && i < n; i++) { /* the inputs first: every name, then the other refusals */
        char *to = tm__aprintf("%s/%s", dir, base_of(names[i]));
        struct stat st;
        if (!to) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        else if (stat(to, &st) == 0 && is_input(in, &st))
            s = tm__err_set(err, TM_E_INVALID_ARG, -1, "-o %s: %s is the input; choose another output path", out, to);
        free(to);
    }
    for (int i = 0; !s && i < n; i++) {
        char *to = tm__aprintf("%s/%s", dir, base_of(names[i]));
        struct stat st;
        if (!to) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        else if (lstat(to, &st) != 0) { /* a new name */
        } else if (!tm__prev_lists(prev, to) || !S_ISREG(st.st_mode))
            s = tm__err_set(err, TM_E_INVALID_ARG, -1, "-o %s: %s exists and is not listed in %s.manifest.json%s; "
                            "tensormorph never replaces a file it did not write (choose another path, or remove it)",
                            out, to, out, prev ? "" : " (there is none)");
        else if (!force)
            s = tm__err_set(err, TM_E_INVALID_ARG, -1, "-o %s holds a previous tensormorph output (%s, listed in "
                            "%s.manifest.json); add --force to replace it", out, to, out);
        free(to);
    }
    tm__prev_free(prev);
    free(dir);
    return s;
}

int tm__prev_any_exists(const char *out, char *const *prev) {
    char *dir = tm__dirname(out);
    int any = 0;
    for (int i = 0; dir && prev && prev[i] && !any; i++) {
        char *p = tm__aprintf("%s/%s", dir, prev[i]);
        struct stat st;
        any = p && lstat(p, &st) == 0;
        free(p);
    }
    free(dir);
    return any;
}

void tm__prev_remove_stale(const tm_file *in, const char *out, char *const *prev, const char *const *kept,
                           int n_kept) {
    char *dir = tm__dirname(out);
    for (int i = 0; dir && prev && prev[i]; i++) {
        int keep = 0;
        for (int k = 0; k < n_kept && !keep; k++) keep = !strcmp(prev[i], base_of(kept[k]));
        char *p = keep ? NULL : tm__aprintf("%s/%s", dir, prev[i]);
        struct stat st;
        if (p && lstat(p, &st) == 0 && S_ISREG(st.st_mode) && !is_input(in, &st)) unlink(p);
        free(p);
    }
    free(dir);
}

int tm__prev_input_named(const tm_file *in, const char *out) {
    char *od = tm__dirname(out), *oa = od ? realpath(od, NULL) : NULL;
    int hit = -1;
    for (int i = 0; oa && in && hit < 0 && i < tm_file_n_paths(in); i++) {
        const char *ip = tm_file_path(in, i);
        if (!out_name(base_of(out), base_of(ip))) continue;
        char *id = tm__dirname(ip), *ia = id ? realpath(id, NULL) : NULL;
        if (ia && !strcmp(ia, oa)) hit = i;
        free(ia);
        free(id);
    }
    free(oa);
    free(od);
    return hit;
}

tm_status tm__pipe_check_set(tm__pipe *pp, const char *const *names, int n, tm_err *err) {
    if (!pp->file_set || pp->part_of_file) return TM_OK;
    return tm__prev_check_names(pp->in, pp->out, pp->force, names, n, err);
}
