/* hash.c: SHA-256 of files and buffers (OpenSSL EVP; FIPS 180-4). */
#include "core.h"
#include "tensormorph/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void to_hex(const unsigned char *d, unsigned n, char *out) {
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < n; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[2 * n] = '\0';
}

tm_status tm_sha256_file(const char *path, char hex_out[65], uint64_t *n_bytes, tm_err *err) {
    return tm__sha256_file_stop(path, hex_out, n_bytes, NULL, NULL, err);
}

tm_status tm__sha256_file_stop(const char *path, char hex_out[65], uint64_t *n_bytes,
                               int (*stop)(void *ud), void *stop_ud, tm_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tm__err_sys(err, errno, "%s: cannot open for sha256", path);
#ifdef POSIX_FADV_SEQUENTIAL
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    const size_t bufsz = 1 << 20;
    unsigned char *buf = malloc(bufsz);
    if (!ctx || !buf || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx); free(buf); close(fd);
        return tm__err_set(err, TM_E_NOMEM, -1, "sha256: cannot initialise");
    }
    uint64_t total = 0;
    for (;;) {
        ssize_t r = read(fd, buf, bufsz);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            EVP_MD_CTX_free(ctx); free(buf); close(fd);
            return tm__err_sys(err, e, "%s: read failed at byte %llu", path,
                               (unsigned long long)total);
        }
        if (r == 0) break;
        if (stop && stop(stop_ud)) {
            EVP_MD_CTX_free(ctx); free(buf); close(fd);
            return tm__err_set(err, TM_E_CANCELLED, -1, "interrupted");
        }
        EVP_DigestUpdate(ctx, buf, (size_t)r);
        total += (uint64_t)r;
    }
    unsigned char md[32];
    unsigned mdlen = 0;
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    free(buf);
    close(fd);
    to_hex(md, mdlen, hex_out);
    if (n_bytes) *n_bytes = total;
    return TM_OK;
}

enum { VISIT_PIECE = 128 << 10, VISIT_WINDOW = 8 << 20 };

/* Hand n bytes at p (byte off of the file) to visit and the digest in cache-sized pieces. */
static tm_status visit_pieces(EVP_MD_CTX *ctx, const uint8_t *p, size_t n, uint64_t off,
                              tm_status (*visit)(void *, const uint8_t *, size_t, uint64_t, tm_err *), void *ud,
                              tm_err *err) {
    tm_status s = TM_OK;
    for (size_t at = 0; at < n && !s; at += VISIT_PIECE) {
        size_t k = n - at < VISIT_PIECE ? n - at : VISIT_PIECE;
        if (visit) s = visit(ud, p + at, k, off + at, err);
        if (!s && ctx) EVP_DigestUpdate(ctx, p + at, k);
    }
    return s;
}

tm_status tm__sha256_file_visit(const char *path, char hex_out[65], uint64_t *n_bytes,
                                tm_status (*visit)(void *ud, const uint8_t *buf, size_t n, uint64_t off, tm_err *err),
                                void *ud, tm_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tm__err_sys(err, errno, "%s: cannot open", path);
#ifdef POSIX_FADV_SEQUENTIAL
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
    EVP_MD_CTX *ctx = hex_out ? EVP_MD_CTX_new() : NULL;
    if (hex_out && (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)) {
        EVP_MD_CTX_free(ctx); close(fd);
        return tm__err_set(err, TM_E_NOMEM, -1, "sha256: cannot initialise");
    }
    uint64_t total = 0;
    tm_status s = TM_OK;
    /* through maps of VISIT_WINDOW bytes of the page cache (no copy; the memory mapped at once
    ** stays bounded), else, where the file cannot be mapped, read into a buffer */
    struct stat st;
    uint64_t size = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
    while (!s && total < size) {
        size_t w = size - total < VISIT_WINDOW ? (size_t)(size - total) : VISIT_WINDOW;
        void *m = mmap(NULL, w, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, (off_t)total);
        if (m == MAP_FAILED) break;
        s = visit_pieces(ctx, m, w, total, visit, ud, err);
        munmap(m, w);
        if (!s) total += w;
    }
    unsigned char *buf = NULL;
    const size_t bufsz = 4 << 20;
    if (!s && lseek(fd, (off_t)total, SEEK_SET) < 0) s = tm__err_sys(err, errno, "%s: cannot seek", path);
    if (!s && !(buf = malloc(bufsz))) s = tm__err_set(err, TM_E_NOMEM, -1, "out of memory");
    while (!s) {
        ssize_t r = read(fd, buf, bufsz);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { s = tm__err_sys(err, errno, "%s: read failed at byte %llu", path, (unsigned long long)total); break; }
        if (r == 0) break;
        s = visit_pieces(ctx, buf, (size_t)r, total, visit, ud, err);
        if (!s) total += (uint64_t)r;
    }
    if (!s && ctx) {
        unsigned char md[32];
        unsigned mdlen = 0;
        EVP_DigestFinal_ex(ctx, md, &mdlen);
        to_hex(md, mdlen, hex_out);
    }
    EVP_MD_CTX_free(ctx);
    free(buf);
    close(fd);
    if (!s && n_bytes) *n_bytes = total;
    return s;
}

void tm_sha256_buffer(const void *data, size_t n, char hex_out[65]) {
    unsigned char md[32];
    unsigned mdlen = 0;
    EVP_Digest(data, n, md, &mdlen, EVP_sha256(), NULL);
    to_hex(md, mdlen, hex_out);
}
