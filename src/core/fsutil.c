/* fsutil.c: atomic writes and directory helpers. */
#include "fsutil.h"

#include <dirent.h>
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

tm_status tm__write_file_atomic(const char *path, const void *data, size_t n, tm_err *err) {
    tm_status cs = tm__check_out_dir(path, err);
    if (cs) return cs;
    char *tmp = tm__aprintf("%s.tmp.%ld", path, (long)getpid());
    if (!tmp) return tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        tm_status s = tm__err_sys(err, errno, "%s: cannot create", tmp);
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
            tm_status s = tm__err_sys(err, e, "%s: write failed", tmp);
            free(tmp);
            return s;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd); unlink(tmp);
        tm_status s = tm__err_sys(err, e, "%s: fsync failed", tmp);
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
