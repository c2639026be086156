/* part_start.c: a part's check, before it writes, that the parts present are of its recipe, and
** with --force the start over of a layout of another recipe (part.h, docs/scale-out.md). */
#include "part.h"
#include "../core/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The "part" record of part j of OUT/n when one lies there (else NULL); *man_out the manifest. */
static json_t *part_record_of(const tm__pipe *pp, int j, json_t **man_out) {
    char *dir = tm__part_path(pp->final_out, j, pp->shard_n);
    char *mp = dir ? tm__aprintf("%s/tensormorph-manifest.json", dir) : NULL;
    struct stat st;
    json_t *man = mp && stat(mp, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (256 << 20) ? json_load_file(mp, 0, NULL) : NULL;
    free(dir);
    free(mp);
    json_t *rec = json_object_get(man, "part");
    const char *sc = json_string_value(json_object_get(rec, "schema")), *o = json_string_value(json_object_get(rec, "out"));
    if (!sc || strcmp(sc, "tensormorph.part/1") || !o || strcmp(o, pp->final_out) ||
        json_integer_value(json_object_get(rec, "count")) != pp->shard_n || json_integer_value(json_object_get(rec, "index")) != j ||
        !json_is_string(json_object_get(rec, "recipe_sha256"))) {
        json_decref(man);
        return NULL;
    }
    *man_out = man;
    return rec;
}

/* Is part j's lock held by a live run? (flock; a lock file of a dead run is not held) */
static int part_busy(const tm__pipe *pp, int j) {
    char *dir = tm__part_path(pp->final_out, j, pp->shard_n), *lp = dir ? tm__aprintf("%s.lock", dir) : NULL;
    int fd = lp ? open(lp, O_RDONLY | O_CLOEXEC) : -1, busy = 0;
    if (fd >= 0) {
        busy = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
        close(fd);
    }
    free(dir);
    free(lp);
    return busy;
}

/* Remove the shared files rec names (plain names in OUT.parts-of-n only). */
static void remove_shared_files(const tm__pipe *pp, const json_t *rec) {
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(rec, "files"), i, f) {
        const char *name = json_string_value(json_object_get(f, "file"));
        if (!json_is_true(json_object_get(f, "shared")) || !name || !*name || strchr(name, '/') || !strcmp(name, ".") ||
            !strcmp(name, ".."))
            continue;
        char *p = tm__aprintf("%s/%s", pp->shared, name);
        struct stat st;
        if (p && lstat(p, &st) == 0 && S_ISREG(st.st_mode)) unlink(p);
        free(p);
    }
}

tm_status tm__part_start(tm__pipe *pp, tm_err *err) {
    if (!pp->shared || !pp->qw || !pp->qw->recipe_add) return TM_OK;
    json_t *man = tm__manifest_new(NULL, pp->no_checksums, pp->in, NULL);
    if (man) pp->qw->recipe_add(pp->qjob, man);
    json_t *mine = man ? tm__part_recipe_sha256(man, pp->qw->format, tm_file_n_tensors(pp->in)) : NULL;
    json_decref(man);
    if (!mine) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    const char *my = json_string_value(mine);
    /* one part at a time from here to the end of its plan (tm__part_planned): a start over and
    ** the sizing of the shared files by a part of the new layout do not interleave */
    int fd = open(pp->shared, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        json_decref(mine);
        return tm__err_sys(err, errno, "%s: cannot open", pp->shared);
    }
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {}
    pp->layout_fd = fd + 1;
    const int n = pp->shard_n;
    json_t **other = tm__calloc((size_t)n, sizeof *other), **oman = tm__calloc((size_t)n, sizeof *oman);
    tm_status s = other && oman ? TM_OK : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    int first = -1, same = 0;
    for (int j = 0; !s && j < n; j++) {
        json_t *m = NULL, *rec = part_record_of(pp, j, &m);
        if (!rec) continue;
        if (!strcmp(json_string_value(json_object_get(rec, "recipe_sha256")), my)) {
            same += j != pp->shard_i;
            json_decref(m);
            continue;
        }
        other[j] = rec;
        oman[j] = m;
        if (first < 0 && j != pp->shard_i) first = j;
    }
    char *fp = !s && first >= 0 ? tm__part_path(pp->final_out, first, n) : NULL;
    if (!s && first >= 0 && !fp) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (!s && first >= 0 && !pp->shard_force) {
        const char *cmd = json_string_value(json_object_get(oman[first], "command_line"));
        s = tm__err_set(err, TM_E_INVALID_ARG, -1,
                        "--shard %d/%d: %s was made from another recipe, options or tool version (`%s`) than this run "
                        "(recipe_sha256 differs); nothing written: run every part with the same options, or give --force "
                        "to start the parts of %s over (it removes the parts of the other recipe and the files they wrote "
                        "in %s), or remove them yourself",
                        pp->shard_i, n, fp, cmd ? cmd : "?", pp->final_out, pp->shared);
    }
    for (int j = 0; !s && pp->shard_force && j < n; j++)
        if (other[j] && j != pp->shard_i && part_busy(pp, j)) {
            char *pj = tm__part_path(pp->final_out, j, n);
            s = tm__err_set(err, TM_E_INVALID_ARG, -1,
                            "--shard %d/%d --force: %s, of another recipe, is being written by another run (its lock "
                            "%s.lock is held); nothing removed: wait for it to end, then run this part again",
                            pp->shard_i, n, pj ? pj : "a part", pj ? pj : "");
            free(pj);
        }
    if (!s && pp->shard_force) { /* start over: the parts of the other recipe, then their files */
        int removed = 0;
        for (int j = 0; j < n; j++) {
            if (!other[j]) continue;
            removed = 1;
            if (!same) remove_shared_files(pp, other[j]);
            if (j == pp->shard_i) continue; /* this run replaces its own record */
            char *pj = tm__part_path(pp->final_out, j, n);
            if (pj) tm__rm_rf(pj);
            free(pj);
        }
        if (removed && !same) {
            char *note = tm__aprintf("%s/.tensormorph-plan", pp->shared);
            if (note) unlink(note);
            free(note);
        }
        if (removed) s = tm__fsync_dir(pp->shared, err);
    }
    for (int j = 0; oman && j < n; j++) json_decref(oman[j]);
    free(other);
    free(oman);
    free(fp);
    json_decref(mine);
    return s;
}
