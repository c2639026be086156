/* fsutil.c: atomic writes and directory helpers. */
#include "fsutil.h"

#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_int g_outputs_pending; /* lock-free on every target we build for */

void tm__outputs_hold(int delta) { atomic_fetch_add(&g_outputs_pending, delta); }

int tm_outputs_pending(void) { return atomic_load(&g_outputs_pending); }

static atomic_int g_outputs_published;

void tm__outputs_publish(void) { atomic_fetch_add(&g_outputs_published, 1); }

int tm_outputs_published(void) { return atomic_load(&g_outputs_published); }

char *tm__dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return tm__strdup(".");
    if (slash == path) return tm__strdup("/");
    return tm__strndup(path, (size_t)(slash - path));
}

tm_status tm__fsync_dir(const char *dir, tm_err *err) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return tm__err_sys(err, errno, "%s: cannot open directory", dir);
    if (fsync(fd) != 0 && errno != EINVAL) {
        int e = errno;
        close(fd);
        return tm__err_sys(err, e, "%s: fsync failed", dir);
    }
    close(fd);
    return TM_OK;
}

tm_status tm__check_out_dir(const char *path, tm_err *err) {
    char *dir = tm__dirname(path);
    if (!dir) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    struct stat st;
    tm_status s = TM_OK;
    if (stat(dir, &st) != 0)
        s = tm__err_sys(err, errno, "-o %s: directory '%s' %s", path, dir,
                        errno == ENOENT ? "does not exist" : "cannot be read");
    else if (!S_ISDIR(st.st_mode))
        s = tm__err_set(err, TM_E_IO, -1, "-o %s: '%s' is not a directory", path, dir);
    free(dir);
    return s;
}

char *tm__abs_path(const char *path, int resolve_last) {
    if (resolve_last) {
        char *r = realpath(path, NULL);
        if (r) return r;
    }
    char *dir = tm__dirname(path);
    char *rd = dir ? realpath(dir, NULL) : NULL;
    free(dir);
    if (!rd) return NULL;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char *full = tm__aprintf("%s/%s", strcmp(rd, "/") ? rd : "", base);
    free(rd);
    return full;
}

/* 1 when the file at path is a JSON object whose "schema" is schema (files over 256 MiB are not
** read: no report of ours is that large). */
static int is_report_of(const char *path, const struct stat *st, const char *schema) {
    if (!S_ISREG(st->st_mode) || st->st_size > (256 << 20)) return 0;
    json_t *d = json_load_file(path, 0, NULL);
    const char *v = d ? json_string_value(json_object_get(d, "schema")) : NULL;
    int ok = v && !strcmp(v, schema);
    json_decref(d);
    return ok;
}

tm_status tm_check_report_output(const char *opt, const char *path, const char *const *inputs, int n_inputs,
                                  const char *schema, tm_err *err) {
    if (!path || !*path) return tm__err_set(err, TM_E_INVALID_ARG, -1, "%s: empty path", opt);
    char *dir = tm__dirname(path);
    if (!dir) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    struct stat st;
    tm_status s = TM_OK;
    if (stat(dir, &st) != 0)
        s = tm__err_sys(err, errno, "%s %s: directory '%s' %s", opt, path, dir, errno == ENOENT ? "does not exist" : "cannot be read");
    else if (!S_ISDIR(st.st_mode))
        s = tm__err_set(err, TM_E_IO, -1, "%s %s: '%s' is not a directory", opt, path, dir);
    free(dir);
    if (s) return s;
    int exists = stat(path, &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) return tm__err_set(err, TM_E_INVALID_ARG, -1, "%s %s is a directory (a file is written there)", opt, path);
    char *abs = tm__abs_path(path, 0); /* the name itself is what a rename replaces */
    for (int i = 0; !s && i < n_inputs; i++) {
        if (!inputs[i]) continue;
        struct stat is;
        if (stat(inputs[i], &is) != 0) continue;
        if (exists && is.st_dev == st.st_dev && is.st_ino == st.st_ino)
            s = tm__err_set(err, TM_E_INVALID_ARG, -1, "%s %s is the input %s; choose another path", opt, path, inputs[i]);
        else if (S_ISDIR(is.st_mode) && abs) {
            char *ia = realpath(inputs[i], NULL);
            size_t n = ia ? strlen(ia) : 0;
            if (ia && !strncmp(abs, ia, n) && abs[n] == '/')
                s = tm__err_set(err, TM_E_INVALID_ARG, -1, "%s %s is inside the input directory %s (inputs are never "
                                "modified); choose another path", opt, path, inputs[i]);
            free(ia);
        }
    }
    free(abs);
    if (!s && exists && schema && !is_report_of(path, &st, schema))
        s = tm__err_set(err, TM_E_INVALID_ARG, -1, "%s %s exists and is not a %s document; tensormorph never replaces a file "
                        "it did not write (choose another path)", opt, path, schema);
    return s;
}

tm_status tm__write_file_atomic(const char *path, const void *data, size_t n, tm_err *err) {
    tm_status cs = tm__check_out_dir(path, err);
    if (cs) return cs;
    char *tmp = tm__aprintf("%s.tmp.%ld", path, (long)getpid());
    if (!tmp) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        tm_status s = tm__err_sys(err, errno, "%s: cannot create the file beside it to write it", path);
        free(tmp);
        return s;
    }
    const uint8_t *p = data;
    size_t left = n;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd); unlink(tmp);
            tm_status s = tm__err_sys(err, e, "%s: write failed", path);
            free(tmp);
            return s;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd); unlink(tmp);
        tm_status s = tm__err_sys(err, e, "%s: fsync failed", path);
        free(tmp);
        return s;
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        tm_status s = tm__err_sys(err, e, "%s: cannot rename into place", path);
        free(tmp);
        return s;
    }
    free(tmp);
    char *dir = tm__dirname(path);
    tm_status s = dir ? tm__fsync_dir(dir, err) : TM_OK;
    free(dir);
    return s;
}

void tm__rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *de;
            while ((de = readdir(d)) != NULL) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
                char *c = tm__aprintf("%s/%s", path, de->d_name);
                if (c) { tm__rm_rf(c); free(c); }
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

tm_status tm__mkdir_p(const char *path, tm_err *err) {
    char *p = tm__strdup(path);
    if (!p) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    for (char *s = p + 1; *s; s++) {
        if (*s == '/') {
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                tm_status st = tm__err_sys(err, errno, "%s: cannot create directory", p);
                free(p);
                return st;
            }
            *s = '/';
        }
    }
    tm_status st = TM_OK;
    if (mkdir(p, 0755) != 0 && errno != EEXIST) st = tm__err_sys(err, errno, "%s: cannot create directory", p);
    free(p);
    return st;
}

tm_status tm__shared_size_check(int fd, const char *path, uint64_t bytes, tm_err *err) {
    struct stat st;
    if (fstat(fd, &st) != 0) return tm__err_sys(err, errno, "%s: cannot stat", path);
    if (st.st_size == 0 || (uint64_t)st.st_size == bytes) return TM_OK;
    return tm__err_set(err, TM_E_INVALID_ARG, -1,
                       "--shard: %s, which every part writes, was laid out by another plan (%lld bytes, this run "
                       "plans %llu: another recipe, type, option or source); nothing written: run every part with "
                       "the same options, or remove that directory and the parts beside it to start over",
                       path, (long long)st.st_size, (unsigned long long)bytes);
}
