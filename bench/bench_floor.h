/* bench_floor.h: the output-write floor shared by the end-to-end benchmarks (bench_quantize,
** bench_gguf_job).
**
** A quantize job must make its output durable: a temporary file beside the target, written,
** fsync()ed, then renamed (the project's rule for outputs). No kernel work removes that cost, so
** the benchmarks measure it on the same directory and report the highest source throughput the
** job could reach if it did nothing but write its output:
**
**     write floor (s)  = best of N: create a temporary file, pwrite() OUT_BYTES in 1 MiB pieces
**                        from a buffer already in memory, fsync(), close(), rename(), unlink()
**     floor GB/s       = SOURCE bytes / write floor (s)
**
** and the input side, reading the source once with read(2) into a cache-sized buffer (the job
** reads its slices so): read floor (s). One thread does both copies itself, so a one-thread job
** can go no faster than SOURCE bytes / (read floor + write floor), the I/O floor.
**
** On tmpfs (/dev/shm) fsync is free and the floor is the kernel's page allocation and copy; on a
** disk file system it is the device's write speed. tmb_write_floor_direct writes as the GGUF
** writer's sequential mode does (8 MiB pieces through an O_DIRECT descriptor, no page-cache
** copy; -2 where the file system refuses O_DIRECT, e.g. tmpfs, or the includer did not define
** _GNU_SOURCE before its first include). Header-only (static functions):
** each benchmark is one translation unit. */
#ifndef TM_BENCH_FLOOR_H
#define TM_BENCH_FLOOR_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double tmb_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Bytes in `path`: a regular file's size, or the sum of the regular files directly inside a
** directory (the compressed-tensors output is one flat directory). 0 when it cannot be read. */
static uint64_t tmb_path_bytes(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) return (uint64_t)st.st_size;
    DIR *d = opendir(path);
    if (!d) return 0;
    uint64_t total = 0;
    struct dirent *e;
    char buf[4352];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        int len = snprintf(buf, sizeof buf, "%s/%s", path, e->d_name);
        if (len < 0 || (size_t)len >= sizeof buf) continue;
        if (stat(buf, &st) == 0 && S_ISREG(st.st_mode)) total += (uint64_t)st.st_size;
    }
    closedir(d);
    return total;
}

/* Best wall time of `reps` durable writes of `nbytes` into directory `dir` (see the top of this
** file), in `piece`-byte pwrites, through O_DIRECT when `direct` (nbytes rounded up to 4 KiB
** there). Returns -1 when a step fails (errno is reported on stderr), -2 when `direct` and the
** file system refuses O_DIRECT. */
static double tmb_write_floor_ex(const char *dir, uint64_t nbytes, int reps, size_t piece, int direct) {
#ifndef O_DIRECT /* the includer did not define _GNU_SOURCE first */
    if (direct) return -2;
#define O_DIRECT 0
#define TMB_UNDEF_O_DIRECT
#endif
    unsigned char *buf = NULL;
    if (posix_memalign((void **)&buf, 4096, piece) != 0) return -1;
    if (direct) nbytes = (nbytes + 4095) / 4096 * 4096;
    for (size_t i = 0; i < piece; i++) buf[i] = (unsigned char)(i * 131u + 7u); /* in memory, not zero pages */
    char tmp[4352], fin[4352];
    snprintf(tmp, sizeof tmp, "%s/.tmb-floor.tmp", dir);
    snprintf(fin, sizeof fin, "%s/.tmb-floor.out", dir);
    double best = -1;
    for (int r = 0; r < reps; r++) {
        unlink(tmp);
        unlink(fin);
        double t0 = tmb_now_s();
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | (direct ? O_DIRECT : 0), 0644);
        if (fd < 0 && direct && errno == EINVAL) { best = -2; break; }
        if (fd < 0) { fprintf(stderr, "write floor: %s: %s\n", tmp, strerror(errno)); best = -1; break; }
        uint64_t off = 0;
        int bad = 0;
        while (off < nbytes && !bad) {
            size_t k = nbytes - off < piece ? (size_t)(nbytes - off) : piece;
            ssize_t w = pwrite(fd, buf, k, (off_t)off);
            if (w < 0 && direct && errno == EINVAL && off == 0) { bad = 2; break; }
            if (w <= 0) bad = 1;
            else off += (uint64_t)w;
        }
        if (bad == 2) { close(fd); best = -2; break; }
        if (bad || fsync(fd) != 0) bad = 1;
        if (close(fd) != 0) bad = 1;
        if (!bad && rename(tmp, fin) != 0) bad = 1;
        double t = tmb_now_s() - t0;
        if (bad) { fprintf(stderr, "write floor: %s: %s\n", tmp, strerror(errno)); best = -1; break; }
        if (best < 0 || t < best) best = t;
    }
    unlink(tmp);
    unlink(fin);
    free(buf);
    return best;
}
#ifdef TMB_UNDEF_O_DIRECT
#undef O_DIRECT
#undef TMB_UNDEF_O_DIRECT
#endif

static double tmb_write_floor(const char *dir, uint64_t nbytes, int reps) {
    return tmb_write_floor_ex(dir, nbytes, reps, 1 << 20, 0);
}

static inline double tmb_write_floor_direct(const char *dir, uint64_t nbytes, int reps) {
    return tmb_write_floor_ex(dir, nbytes, reps, 8u << 20, 1);
}

/* Best wall time of `reps` reads of the whole file `path` with read(2) in `piece`-byte pieces into
** one buffer (which stays in the cache): what reading the source once costs, the input side of
** the floor. *size gets the bytes read. Negative when the file cannot be read. */
static double tmb_read_floor(const char *path, size_t piece, int reps, uint64_t *size) {
    char *buf = malloc(piece);
    double best = -1;
    for (int r = 0; r < reps && buf; r++) {
        int fd = open(path, O_RDONLY);
        if (fd < 0) break;
        double t0 = tmb_now_s();
        uint64_t tot = 0;
        ssize_t k;
        while ((k = read(fd, buf, piece)) > 0) tot += (uint64_t)k;
        double dt = tmb_now_s() - t0;
        close(fd);
        if (k < 0) break;
        *size = tot;
        if (best < 0 || dt < best) best = dt;
    }
    free(buf);
    return best;
}

#endif
