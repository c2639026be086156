/* pipeline.c: the phases every quantize job shares: check and lock OUT, stage beside it, hash
** the sources beside the work, checksum the output, write the manifest, publish (pipeline.h). */
#include "pipeline.h"
#include "part_crc.h"
#include "../core/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

void (*tm__pipe_phase_hook)(const char *phase, void *ud);
void *tm__pipe_phase_hook_ud;

/* ---------------------------------------------------------------------------------------- */
/* may OUT be written?                                                                       */
/* ---------------------------------------------------------------------------------------- */

static int path_within(const char *inner, const char *outer) {
    size_t n = strlen(outer);
    return strncmp(inner, outer, n) == 0 && (inner[n] == '/' || inner[n] == '\0');
}

/* Nothing is lost: OUT may be a new path, an empty directory, or (with force) a previous
** tensormorph output; never a directory that holds the input or anything else. */
static tm_status check_output_dir(const tm_file *in, const char *out_dir, int force, tm_err *err) {
    if (!out_dir || !*out_dir) return tm__err_set(err, TM_E_INVALID_ARG, -1, "empty output path");
    char *oabs = tm__abs_path(out_dir, 1);
    if (!oabs) { /* a missing parent: named as -o X.gguf names it (docs/exit-codes.md) */
        int e = errno;
        tm_status ps = tm__check_out_dir(out_dir, err);
        return ps ? ps : tm__err_sys(err, e, "%s: cannot resolve the output path", out_dir);
    }
    tm_status s = TM_OK;
    for (int i = 0; !s && in && i < tm_file_n_paths(in); i++) {
        char *iabs = realpath(tm_file_path(in, i), NULL);
        if (iabs && path_within(iabs, oabs))
            s = tm__err_set(err, TM_E_INVALID_ARG, -1,
                            "-o %s would replace a directory that holds the input %s; choose another "
                            "output path", out_dir, tm_file_path(in, i));
        free(iabs);
    }
    struct stat st;
    if (!s && stat(out_dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            s = tm__err_set(err, TM_E_INVALID_ARG, -1, "-o %s exists and is not a directory", out_dir);
        } else {
            DIR *d = opendir(out_dir);
            int n_entries = 0, has_manifest = 0;
            struct dirent *de;
            while (d && (de = readdir(d)) != NULL) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
                n_entries++;
                if (!strcmp(de->d_name, "tensormorph-manifest.json")) has_manifest = 1;
            }
            if (d) closedir(d);
            if (n_entries > 0 && !(has_manifest && force))
                s = tm__err_set(err, TM_E_INVALID_ARG, -1,
                                has_manifest ? "-o %s holds a previous tensormorph output; add --force to replace it"
                                             : "-o %s exists and is not empty; tensormorph never replaces a "
                                               "directory it did not write (choose another path)",
                                out_dir);
        }
    }
    free(oabs);
    return s;
}

tm_status tm__check_file_output(const tm_file *in, const char *out_path, int force, const char *kind,
                                tm_err *err) {
    tm_status s = tm__check_out_dir(out_path, err);
    if (s) return s;
    struct stat st;
    if (stat(out_path, &st) != 0) { /* a new path, unless the manifest beside it lists files there */
        char **prev = tm__prev_files(out_path);
        s = TM_OK;
        if (prev && tm__prev_any_exists(out_path, prev)) {
            int n = 0;
            while (prev[n]) n++;
            /* its inputs first (a split input that was this OUT's output), then --force */
            s = tm__prev_check_names(in, out_path, 1, (const char *const *)prev, n, err);
            if (!s && !force)
                s = tm__err_set(err, TM_E_INVALID_ARG, -1, "-o %s holds a previous tensormorph output (%d file%s listed "
                                "in %s.manifest.json); add --force to replace it", out_path, n, n == 1 ? "" : "s", out_path);
        }
        tm__prev_free(prev);
        return s;
    }
    if (S_ISDIR(st.st_mode))
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "-o %s is a directory (%s is one file)", out_path, kind);
    for (int i = 0; in && i < tm_file_n_paths(in); i++) {
        struct stat is;
        if (stat(tm_file_path(in, i), &is) == 0 && is.st_dev == st.st_dev && is.st_ino == st.st_ino)
            return tm__err_set(err, TM_E_INVALID_ARG, -1, "-o %s is the input; choose another output path", out_path);
    }
    char *mp = tm__aprintf("%s.manifest.json", out_path);
    struct stat ms;
    int ours = mp && stat(mp, &ms) == 0 && S_ISREG(ms.st_mode);
    free(mp);
    if (ours && force) return TM_OK;
    return tm__err_set(err, TM_E_INVALID_ARG, -1,
                       ours ? "-o %s holds a previous tensormorph output; add --force to replace it"
                            : "-o %s exists; tensormorph never replaces a file it did not write "
                              "(choose another path)",
                       out_path);
}

static tm_status check_out(const tm__pipe *pp, const char *kind_name, int force, tm_err *err) {
    return pp->kind == TM__PIPE_DIR ? check_output_dir(pp->in, pp->out, force, err)
                                    : tm__check_file_output(pp->in, pp->out, force, kind_name, err);
}

tm_status tm__pipe_check_target(const tm_file *in, const char *out, tm__pipe_kind kind, const char *kind_name,
                                int force, tm_err *err) {
    return kind == TM__PIPE_DIR ? check_output_dir(in, out, force, err)
                                : tm__check_file_output(in, out, force, kind_name, err);
}

/* ---------------------------------------------------------------------------------------- */
/* OUT.lock                                                                                  */
/* ---------------------------------------------------------------------------------------- */

/* The pid written in a lock file, 0 when none (yet), -1 when the file is not a lock file. */
static long lock_owner(int fd) {
    char b[32];
    ssize_t n = pread(fd, b, sizeof b - 1, 0);
    if (n < 0) return 0;
    b[n] = '\0';
    if (n == 0) return 0;
    char *end;
    long pid = strtol(b, &end, 10);
    if (pid <= 0 || (*end && strcmp(end, "\n"))) return -1;
    return pid;
}

/* A lock file taken over from a run that died (kill -9): remove that run's staging paths, the
** exact names this file gives them (OUT.tmp.<pid>, OUT.manifest.json.tmp.<pid>) and those its
** writers nest inside (<name>.tmp.<pid>), only for a pid that no longer exists. Nothing else. */
static void remove_dead_stage(const tm__pipe *pp, long pid) {
    if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) return;
    const char *fmt[] = {"%s.tmp.%ld", "%s.tmp.%ld.tmp.%ld", "%s.manifest.json.tmp.%ld", "%s.manifest.json.tmp.%ld.tmp.%ld"};
    for (int k = 0; k < 4; k++) {
        char *p = tm__aprintf(fmt[k], pp->out, pid, pid);
        struct stat st;
        if (p && lstat(p, &st) == 0) {
            if (S_ISDIR(st.st_mode)) tm__rm_rf(p);
            else if (S_ISREG(st.st_mode)) unlink(p);
        }
        free(p);
    }
}

static tm_status take_lock(tm__pipe *pp, tm_err *err) {
    pp->lock_path = tm__aprintf("%s.lock", pp->out);
    if (!pp->lock_path) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int attempt = 0; attempt < 100; attempt++) {
        int fd = open(pp->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) return tm__err_sys(err, errno, "%s: cannot create the lock file", pp->lock_path);
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            if (e != EWOULDBLOCK) {
                close(fd);
                return tm__err_sys(err, e, "%s: cannot lock", pp->lock_path);
            }
            long pid = 0;
            for (int k = 0; k < 50 && (pid = lock_owner(fd)) == 0; k++) usleep(1000); /* pid not written yet */
            close(fd);
            if (pid > 0)
                return tm__err_set(err, TM_E_INVALID_ARG, -1,
                                   "-o %s is being written by another tensormorph run (pid %ld, lock file %s); "
                                   "wait for it to finish or choose another path", pp->out, pid, pp->lock_path);
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "-o %s is locked by another process (lock file %s); wait for it or choose "
                               "another path", pp->out, pp->lock_path);
        }
        /* the holder before us may have removed the file after we opened it: lock the file
        ** that is at the path, or try again */
        struct stat a, b;
        if (fstat(fd, &a) != 0 || stat(pp->lock_path, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
            close(fd);
            continue;
        }
        struct stat fs;
        if (fstat(fd, &fs) == 0 && fs.st_size > 0 && lock_owner(fd) < 0) {
            close(fd); /* someone's own file: never truncated */
            return tm__err_set(err, TM_E_INVALID_ARG, -1,
                               "-o %s: %s exists and is not a tensormorph lock file (a pid); remove it or "
                               "choose another path", pp->out, pp->lock_path);
        }
        remove_dead_stage(pp, lock_owner(fd)); /* a killed run's lock (0: a new, empty file) */
        char pidtxt[32];
        int n = snprintf(pidtxt, sizeof pidtxt, "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, pidtxt, (size_t)n, 0) != n) {
            int e = errno;
            close(fd);
            return tm__err_sys(err, e, "%s: cannot write the lock file", pp->lock_path);
        }
        pp->lock_fd = fd;
        return TM_OK;
    }
    return tm__err_set(err, TM_E_IO, -1, "%s: cannot take the lock (it keeps being replaced)", pp->lock_path);
}

static void drop_lock(tm__pipe *pp) {
    if (pp->lock_fd >= 0) {
        unlink(pp->lock_path); /* while still held: the next run creates a new one */
        close(pp->lock_fd);
        pp->lock_fd = -1;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* begin, phases, hashing                                                                    */
/* ---------------------------------------------------------------------------------------- */

tm_status tm__pipe_begin(tm__pipe *pp, const tm_file *in, const char *out, tm__pipe_kind kind,
                         const char *kind_name, int force, int n_threads, volatile const int *cancel,
                         tm_err *err) {
    memset(pp, 0, sizeof *pp);
    pp->in = in;
    /* "OUT/" names OUT: the lock and the staging path go beside it, not inside */
    size_t ol = out ? strlen(out) : 0;
    while (ol > 1 && out[ol - 1] == '/') ol--;
    char *own = out ? tm__strndup(out, ol) : NULL;
    if (out && !own) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    pp->out = own;
    out = own;
    pp->kind = kind;
    pp->force = force;
    pp->err = err;
    pp->cancel = cancel;
    pp->lock_fd = -1;
    atomic_init(&pp->hstop, 0);
    clock_gettime(CLOCK_MONOTONIC, &pp->t0);
    pp->wall0 = time(NULL);
    pp->threads = n_threads > 0 ? n_threads : tm_usable_cpus();
    if (kind == TM__PIPE_DIR && (!out || !*out)) return tm__err_set(err, TM_E_INVALID_ARG, -1, "empty output path");
    /* refusals first (their own messages), then the same check again under the lock */
    tm_status s = check_out(pp, kind_name, force, err);
    if (!s) {
        tm__outputs_hold(1); /* before OUT.lock exists: a repeated SIGINT now waits for tm__pipe_end */
        pp->held = 1;
        s = take_lock(pp, err);
    }
    if (!s) s = check_out(pp, kind_name, force, err);
    if (s) return s;
    long pid = (long)getpid();
    pp->stage = tm__aprintf("%s.tmp.%ld", out, pid);
    pp->man_stage = kind == TM__PIPE_DIR ? tm__aprintf("%s/tensormorph-manifest.json", pp->stage)
                                         : tm__aprintf("%s.manifest.json.tmp.%ld", out, pid);
    if (kind == TM__PIPE_FILE) pp->man_final = tm__aprintf("%s.manifest.json", out);
    pp->hex = tm__calloc((size_t)(in ? tm_file_n_paths(in) : 0) + 1, sizeof *pp->hex);
    if (!pp->stage || !pp->man_stage || (kind == TM__PIPE_FILE && !pp->man_final) || !pp->hex)
        return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    if (kind == TM__PIPE_DIR) {
        tm__rm_rf(pp->stage);
        if (mkdir(pp->stage, 0755) != 0) return tm__err_sys(err, errno, "%s: cannot create directory", pp->stage);
    } else {
        unlink(pp->stage);
    }
    return TM_OK;
}

const char *tm__pipe_file_target(tm__pipe *pp) {
    if (!pp->part_of_file && !pp->file_set) return pp->stage;
    if (!pp->part_file) {
        const char *o = pp->part_of_file ? pp->final_out : pp->out;
        const char *b = strrchr(o, '/') ? strrchr(o, '/') + 1 : o;
        pp->part_file = tm__aprintf("%s/%s", pp->shared ? pp->shared : pp->stage, b);
    }
    return pp->part_file;
}

tm_status tm__pipe_make_file_set(tm__pipe *pp, tm_err *err) {
    if (pp->part_of_file || pp->kind != TM__PIPE_FILE || pp->file_set) return TM_OK;
    int ii = tm__prev_input_named(pp->in, pp->out); /* any part of a split input, whatever its count */
    if (ii >= 0)
        return tm__err_set(err, TM_E_INVALID_ARG, -1, "-o %s: its split files would be named as the input's %s (the "
                           "input is never replaced); choose another output path", pp->out, tm_file_path(pp->in, ii));
    tm__rm_rf(pp->stage);
    if (mkdir(pp->stage, 0755) != 0) return tm__err_sys(err, errno, "%s: cannot create directory", pp->stage);
    pp->file_set = 1;
    return TM_OK;
}

tm_status tm__pipe_phase(tm__pipe *pp, const char *phase, tm_err *err) {
    if (tm__pipe_phase_hook) tm__pipe_phase_hook(phase, tm__pipe_phase_hook_ud);
    if (pp->cancel && *pp->cancel) return tm__err_set(err, TM_E_CANCELLED, -1, "interrupted");
    return TM_OK;
}

static int hash_stop(void *ud) {
    tm__pipe *pp = ud;
    return (pp->cancel && *pp->cancel) || atomic_load(&pp->hstop);
}

static void *hash_sources(void *ud) {
    tm__pipe *pp = ud;
    pp->hstatus = TM_OK;
    for (int i = 0; i < tm_file_n_paths(pp->in) && !pp->hstatus; i++)
        if (!pp->source_owner || pp->source_owner[i] == pp->shard_i) /* a part hashes its share */
            pp->hstatus = tm__sha256_file_stop(tm_file_path(pp->in, i), pp->hex[i], NULL, hash_stop, pp, &pp->herr);
    return NULL;
}

tm_status tm__pipe_hash_start(tm__pipe *pp, int no_checksums, tm_err *err) {
    (void)err;
    if (no_checksums || pp->hashing) return TM_OK;
    if (pthread_create(&pp->hth, NULL, hash_sources, pp) == 0) pp->hashing = 1;
    else hash_sources(pp);
    return TM_OK;
}

static void hash_join(tm__pipe *pp) {
    if (!pp->hashing) return;
    pthread_join(pp->hth, NULL);
    pp->hashing = 0;
}

tm_status tm__pipe_hash_wait(tm__pipe *pp, tm_err *err) {
    tm_status s = tm__pipe_phase(pp, "hash", err);
    if (s) return s;
    hash_join(pp);
    if (pp->hstatus) {
        *err = pp->herr;
        return pp->hstatus;
    }
    return tm__pipe_phase(pp, "hash", err);
}

double tm__pipe_seconds(const tm__pipe *pp) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - pp->t0.tv_sec) + (double)(t1.tv_nsec - pp->t0.tv_nsec) * 1e-9;
}

/* ---------------------------------------------------------------------------------------- */
/* manifest and publish                                                                      */
/* ---------------------------------------------------------------------------------------- */

json_t *tm__pipe_manifest_new(tm__pipe *pp, const char *command_line, int no_checksums, int threads) {
    json_t *man = tm__manifest_new(command_line, no_checksums, pp->in, pp->hex);
    if (man) json_object_set_new(json_object_get(man, "host"), "threads_used", json_integer(threads));
    return man;
}

static int cancel_stop(void *ud) {
    const tm__pipe *pp = ud;
    return pp->cancel && *pp->cancel;
}

tm_status tm__pipe_add_output(tm__pipe *pp, json_t *man, const char *format, const char *const *files,
                              int n_files, int no_checksums, uint64_t *out_bytes, tm_err *err) {
    tm_status s = tm__pipe_phase(pp, "checksum", err);
    if (s) return s;
    json_t *outs = json_array();
    for (int f = 0; f < n_files && !s; f++) {
        const char *fp = files[f];
        const char *name = pp->kind == TM__PIPE_FILE && !pp->file_set ? pp->out : fp;
        const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
        json_t *o = json_object();
        char hex[65];
        uint64_t nb = 0;
        json_object_set_new(o, "file", json_string(base));
        if (!no_checksums) {
            s = tm__sha256_file_stop(fp, hex, &nb, cancel_stop, pp, err);
            if (s) { json_decref(o); break; }
            json_object_set_new(o, "sha256", json_string(hex));
        } else {
            struct stat fst;
            if (stat(fp, &fst) == 0) nb = (uint64_t)fst.st_size;
            json_object_set_new(o, "sha256", json_null());
        }
        json_object_set_new(o, "bytes", json_integer((json_int_t)nb));
        *out_bytes += nb;
        json_array_append_new(outs, o);
    }
    json_t *output = json_object();
    json_object_set_new(output, "path", json_string(pp->out));
    json_object_set_new(output, "format", json_string(format));
    json_object_set_new(output, "files", outs);
    json_object_set_new(man, "output", output);
    return s;
}

static tm_status publish_dir(tm__pipe *pp, tm_err *err) {
    tm_status s = TM_OK;
    struct stat st;
    char *old = NULL;
    if (stat(pp->out, &st) == 0) {
        old = tm__aprintf("%s.old.%ld", pp->out, (long)getpid());
        if (!old || rename(pp->out, old) != 0) s = tm__err_sys(err, errno, "%s: cannot move the existing output aside", pp->out);
    }
    if (!s && rename(pp->stage, pp->out) != 0) {
        s = tm__err_sys(err, errno, "%s: cannot rename into place", pp->out);
        if (old) rename(old, pp->out);
    }
    if (!s && old) tm__rm_rf(old);
    free(old);
    return s;
}

/* The file names a file set's staging directory holds, NULL-terminated, in *n (NULL with err
** set when it cannot be listed or out of memory; free with tm__prev_free). */
static char **staged_names(const tm__pipe *pp, int *n, tm_err *err) {
    DIR *d = opendir(pp->stage);
    if (!d) { tm__err_sys(err, errno, "%s: cannot list", pp->stage); return NULL; }
    size_t k = 0, cap = 8;
    char **v = tm__calloc(cap, sizeof *v);
    struct dirent *de;
    while (v && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        if (k + 2 > cap) {
            char **nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) { tm__prev_free(v); v = NULL; break; }
            v = nv;
        }
        v[k + 1] = NULL;
        if (!(v[k] = tm__strdup(de->d_name))) { tm__prev_free(v); v = NULL; break; }
        k++;
    }
    closedir(d);
    if (!v) tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    *n = (int)k;
    return v;
}

/* A file set: every staged file renamed beside OUT (tm__prev_check_names was passed). */
static tm_status publish_set(tm__pipe *pp, char *const *names, int n, tm_err *err) {
    char *dir = tm__dirname(pp->out);
    tm_status s = dir ? TM_OK : tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (int i = 0; !s && i < n; i++) {
        char *from = tm__aprintf("%s/%s", pp->stage, names[i]), *to = tm__aprintf("%s/%s", dir, names[i]);
        if (!from || !to) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
        else if (rename(from, to) != 0) s = tm__err_sys(err, errno, "%s: cannot rename into place", to);
        free(from);
        free(to);
    }
    free(dir);
    if (!s) rmdir(pp->stage);
    return s;
}

/* Every check first (a refusal changes nothing: the previous manifest stays), then the
** previous manifest goes, the new file(s) go into place, the previous output's files the new
** one did not replace go, and the new manifest goes into place. */
static tm_status publish_file(tm__pipe *pp, tm_err *err) {
    struct stat st;
    int n = 1;
    char **names = pp->file_set ? staged_names(pp, &n, err) : NULL;
    const char *one = pp->out;
    const char *const *kept = pp->file_set ? (const char *const *)names : &one;
    tm_status s = pp->file_set && !names ? err->code : TM_OK;
    if (!s && pp->file_set) s = tm__prev_check_names(pp->in, pp->out, pp->force, kept, n, err);
    char **prev = s ? NULL : tm__prev_files(pp->out);
    if (!s && lstat(pp->man_final, &st) == 0 && unlink(pp->man_final) != 0)
        s = tm__err_sys(err, errno, "%s: cannot remove the previous manifest", pp->man_final);
    if (!s && pp->file_set) s = publish_set(pp, names, n, err);
    else if (!s && rename(pp->stage, pp->out) != 0) s = tm__err_sys(err, errno, "%s: cannot rename into place", pp->out);
    if (!s) {
        pp->published = 1;
        tm__prev_remove_stale(pp->in, pp->out, prev, kept, n);
        if (rename(pp->man_stage, pp->man_final) != 0)
            s = tm__err_sys(err, errno, "%s: cannot rename into place", pp->man_final);
    }
    tm__prev_free(prev);
    tm__prev_free(names);
    return s;
}

tm_status tm__pipe_finish(tm__pipe *pp, json_t *man, json_t *results, uint64_t source_bytes,
                          uint64_t output_bytes, double seconds, char **json_out, tm_err *err) {
    tm_status s = tm__manifest_finish(man, results, source_bytes, output_bytes, pp->wall0, seconds,
                                      pp->man_stage, json_out, err);
    if (!s) s = tm__pipe_phase(pp, "manifest", err);
    if (!s) s = tm__pipe_phase(pp, "publish", err);
    if (s) return s;
    /* from here on the run succeeds or fails on I/O, never on the cancel flag */
    s = pp->kind == TM__PIPE_DIR ? publish_dir(pp, err) : publish_file(pp, err);
    if (!s) {
        pp->published = 1;
        tm__outputs_publish(); /* a later signal must not turn this run into an exit 130 */
        char *parent = tm__dirname(pp->out);
        if (parent) { tm__fsync_dir(parent, NULL); free(parent); }
    }
    return s;
}

/* Error messages name the user's paths, never staging names: every ".tmp.<pid>" of this run is
** cut out, so "OUT.tmp.<pid>/model.safetensors.tmp.<pid>" reads "OUT/model.safetensors" and
** "OUT.tmp.<pid>.tmp.<pid>" reads "OUT". */
static void err_names_out(tm_err *err) {
    if (!err || err->code == TM_OK) return;
    char tag[32];
    int tl = snprintf(tag, sizeof tag, ".tmp.%ld", (long)getpid());
    char *m = err->msg, *hit = m;
    while ((hit = strstr(hit, tag)) != NULL) {
        if (hit[tl] >= '0' && hit[tl] <= '9') { hit += tl; continue; } /* another number */
        memmove(hit, hit + tl, strlen(hit + tl) + 1);
    }
}

void tm__pipe_end(tm__pipe *pp) {
    err_names_out(pp->err);
    atomic_store(&pp->hstop, 1);
    hash_join(pp);
    if (!pp->published && pp->stage) {
        if (pp->kind == TM__PIPE_DIR || pp->file_set) tm__rm_rf(pp->stage);
        else unlink(pp->stage);
    }
    if (pp->kind == TM__PIPE_FILE && pp->man_stage) unlink(pp->man_stage);
    if (pp->lock_path) drop_lock(pp);
    free(pp->lock_path);
    free((char *)pp->out);
    pp->out = NULL;
    free(pp->stage);
    free(pp->man_stage);
    free(pp->man_final);
    free(pp->hex);
    free(pp->tensor_owner);
    free(pp->source_owner);
    free(pp->part_file);
    free(pp->shared);
    tm__crclog_free(pp->crclog);
    pp->crclog = NULL;
    pp->part_file = pp->shared = NULL;
    pp->tensor_owner = pp->source_owner = NULL;
    pp->lock_path = pp->stage = pp->man_stage = pp->man_final = NULL;
    pp->hex = NULL;
    if (pp->held) tm__outputs_hold(-1); /* nothing of this job is left beside OUT */
    pp->held = 0;
}
