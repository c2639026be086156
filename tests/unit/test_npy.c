/* test_npy.c: the NumPy .npy/.npz reader: generated arrays of every dtype, header version,
** order and byte order read back through the view; the real activation samples of
** ../shared/models/numpy (their relations stated in PROVENANCE.md [D5]); lying and malformed
** headers and archives; inspect --json through the binary (env TM_BIN). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zip.h>

#include "formats/file.h"
#include "helpers/cli_run.h"
#include "helpers/fixture.h"
#include "helpers/vectors.h"
#include "tensormorph.h"

static char g_dir[256];

static void pathf(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

static void write_file(const char *name, const void *data, size_t n) {
    char p[512];
    pathf(p, sizeof p, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, n), (ssize_t)n);
    close(fd);
}

/* Build a .npy image: version, header dict text, then data. Returns the malloc'd image. */
static uint8_t *npy_image(int major, const char *dict, const void *data, size_t nd, size_t *n_out) {
    size_t pre = major == 1 ? 10 : 12;
    size_t dl = strlen(dict);
    size_t hl = dl + 1;
    while ((pre + hl) % 64) hl++;
    uint8_t *b = calloc(1, pre + hl + nd + 1);
    assert_non_null(b);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (uint8_t)major;
    b[7] = 0;
    if (major == 1) { b[8] = (uint8_t)hl; b[9] = (uint8_t)(hl >> 8); }
    else { b[8] = (uint8_t)hl; b[9] = (uint8_t)(hl >> 8); b[10] = 0; b[11] = 0; }
    memset(b + pre, ' ', hl);
    memcpy(b + pre, dict, dl);
    b[pre + hl - 1] = '\n';
    if (nd) memcpy(b + pre + hl, data, nd);
    *n_out = pre + hl + nd;
    return b;
}

static tm_file *open_ok(const char *name) {
    char p[512];
    pathf(p, sizeof p, name);
    return tmt_open_ok(p);
}

static tm_status open_err(const char *name, tm_err *e) {
    char p[512];
    pathf(p, sizeof p, name);
    tm_file *f = NULL;
    tm_status s = tm_open(p, NULL, &f, e);
    assert_null(f);
    return s;
}

static void read_all(tm_file *f, int64_t i, float *out) {
    tm_err e;
    const tm_tensor *t = tm_file_tensor(f, i);
    tm_status s = tm_tensor_read_f32(f, i, 0, t->n_elems, out, &e);
    if (s) fprintf(stderr, "read: %s\n", e.msg);
    assert_int_equal(s, TM_OK);
}

/* Every dtype, versions 1-3, little and big endian: values read back exactly. */
static void test_generated_dtypes(void **state) {
    (void)state;
    static const struct { const char *d; int size; tm_dtype dt; } cases[] = {
        {"b1", 1, TM_BOOL}, {"i1", 1, TM_I8}, {"i2", 2, TM_I16}, {"i4", 4, TM_I32},
        {"i8", 8, TM_I64},  {"u1", 1, TM_U8}, {"u2", 2, TM_U16}, {"u4", 4, TM_U32},
        {"u8", 8, TM_U64},  {"f2", 2, TM_F16}, {"f4", 4, TM_F32}, {"f8", 8, TM_F64},
    };
    /* values 0, 1, 2, 3, 4, 5 in each type (bool: 0, 1, 1, ...) */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int big = 0; big < 2; big++) {
            for (int major = 1; major <= 3; major++) {
                uint8_t data[6 * 8];
                for (int k = 0; k < 6; k++) {
                    uint8_t le[8] = {0};
                    if (cases[c].dt == TM_F16) { uint16_t h = tm_f32_to_f16((float)k); memcpy(le, &h, 2); }
                    else if (cases[c].dt == TM_F32) { float v = (float)k; memcpy(le, &v, 4); }
                    else if (cases[c].dt == TM_F64) { double v = k; memcpy(le, &v, 8); }
                    else if (cases[c].dt == TM_BOOL) le[0] = k != 0;
                    else le[0] = (uint8_t)k;
                    for (int b = 0; b < cases[c].size; b++)
                        data[k * cases[c].size + b] = big ? le[cases[c].size - 1 - b] : le[b];
                }
                char dict[128];
                snprintf(dict, sizeof dict, "{'descr': '%c%s', 'fortran_order': False, 'shape': (2, 3), }",
                         cases[c].size == 1 ? '|' : big ? '>' : '<', cases[c].d);
                size_t n;
                uint8_t *img = npy_image(major, dict, data, (size_t)(6 * cases[c].size), &n);
                write_file("g.npy", img, n);
                free(img);
                tm_file *f = open_ok("g.npy");
                assert_int_equal(tm_file_format(f), TM_FMT_NPY);
                assert_int_equal(tm_file_n_tensors(f), 1);
                const tm_tensor *t = tm_file_tensor(f, 0);
                assert_string_equal(t->name, "g");
                assert_int_equal(t->dtype, cases[c].dt);
                assert_int_equal(t->ndim, 2);
                assert_int_equal(t->shape[0], 2);
                assert_int_equal(t->shape[1], 3);
                assert_int_equal(t->big_endian, big && cases[c].size > 1);
                assert_int_equal(t->offset % 64, 0);
                float v[6];
                read_all(f, 0, v);
                for (int k = 0; k < 6; k++)
                    assert_true(v[k] == (cases[c].dt == TM_BOOL ? (float)(k != 0) : (float)k));
                tm_close(f);
            }
        }
    }
}

/* Fortran order: logical row-major values from column-major bytes; 3-D, big-endian too. */
static void test_generated_fortran(void **state) {
    (void)state;
    /* logical a[i][j][k] = 100*i + 10*j + k, shape (2, 3, 4); column-major: i fastest */
    int32_t colmaj[24];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) colmaj[i + 2 * j + 6 * k] = 100 * i + 10 * j + k;
    for (int big = 0; big < 2; big++) {
        uint8_t data[96];
        for (int e = 0; e < 24; e++)
            for (int b = 0; b < 4; b++)
                data[4 * e + b] = (uint8_t)((uint32_t)colmaj[e] >> (8 * (big ? 3 - b : b)));
        size_t n;
        uint8_t *img = npy_image(2, big ? "{'descr': '>i4', 'fortran_order': True, 'shape': (2, 3, 4), }"
                                        : "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3, 4), }",
                                 data, sizeof data, &n);
        write_file("fort.npy", img, n);
        free(img);
        tm_file *f = open_ok("fort.npy");
        const tm_tensor *t = tm_file_tensor(f, 0);
        assert_int_equal(t->fortran_order, 1);
        assert_int_equal(t->shape[0], 2);
        assert_int_equal(t->shape[2], 4);
        float v[24];
        read_all(f, 0, v);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                for (int k = 0; k < 4; k++) assert_true(v[12 * i + 4 * j + k] == (float)(100 * i + 10 * j + k));
        /* a window starting mid-tensor */
        tm_err e;
        assert_int_equal(tm_tensor_read_f32(f, 0, 13, 5, v, &e), TM_OK);
        assert_true(v[0] == 101.0f && v[2] == 103.0f && v[3] == 110.0f && v[4] == 111.0f);
        tm_close(f);
    }
}

/* Headers that lie or are malformed: each a clear error naming the file and the reason. */
static void test_bad_headers(void **state) {
    (void)state;
    static const struct { const char *dict; tm_status code; const char *needle; size_t data; } cases[] = {
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", TM_E_CORRUPT, "truncated", 8},
        {"{'descr': '<f4', 'fortran_order': False, }", TM_E_CORRUPT, "lacks 'shape'", 0},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", TM_E_CORRUPT, "'x'", 4},
        {"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", TM_E_UNSUPPORTED, "object", 8},
        {"{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", TM_E_UNSUPPORTED, "not a numeric", 8},
        {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }", TM_E_CORRUPT, "True/False", 4},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", TM_E_LIMIT, "dimensions", 4},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", TM_E_CORRUPT, "non-negative", 4},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", TM_E_CORRUPT, "not closed", 4},
        {"{'descr': '<f3', 'fortran_order': False, 'shape': (1,), }", TM_E_UNSUPPORTED, "no 3-byte float", 4},
        {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", TM_E_UNSUPPORTED, "structured", 4},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", TM_E_CORRUPT, "overflows", 4},
    };
    uint8_t zeros[16] = {0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n;
        uint8_t *img = npy_image(1, cases[c].dict, zeros, cases[c].data, &n);
        write_file("bad.npy", img, n);
        free(img);
        tm_err e;
        tm_status s = open_err("bad.npy", &e);
        if (s != cases[c].code || !strstr(e.msg, cases[c].needle) || !strstr(e.msg, "bad.npy"))
            fprintf(stderr, "case %zu: %s -> %d %s\n", c, cases[c].dict, s, e.msg);
        assert_int_equal(s, cases[c].code);
        assert_non_null(strstr(e.msg, cases[c].needle));
        assert_non_null(strstr(e.msg, "array 'bad'"));
        assert_true(e.file_offset >= 10);
    }
    /* the header length field lies: says 4096 bytes, the file has 118 after it */
    size_t n;
    uint8_t *img = npy_image(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", zeros, 4, &n);
    img[8] = 0x00;
    img[9] = 0x10;
    write_file("lie.npy", img, n);
    tm_err e;
    assert_int_equal(open_err("lie.npy", &e), TM_E_CORRUPT);
    assert_non_null(strstr(e.msg, "header length field says 4096 bytes but only"));
    assert_int_equal(e.file_offset, 8);
    /* ... and says fewer bytes than the dict takes: the dict is cut off */
    img[8] = 20;
    img[9] = 0;
    write_file("lie.npy", img, n);
    assert_int_equal(open_err("lie.npy", &e), TM_E_CORRUPT);
    assert_non_null(strstr(e.msg, "not closed within the 20 bytes"));
    /* version 4 and a huge v2 header length */
    img[6] = 4;
    write_file("lie.npy", img, n);
    assert_int_equal(open_err("lie.npy", &e), TM_E_UNSUPPORTED);
    assert_non_null(strstr(e.msg, "version 4.0"));
    free(img);
    img = npy_image(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", zeros, 4, &n);
    img[10] = 0x7f;
    write_file("lie.npy", img, n);
    assert_int_equal(open_err("lie.npy", &e), TM_E_LIMIT);
    free(img);
    /* trailing bytes after the data: opened, with a warning */
    img = npy_image(3, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", zeros, 12, &n);
    write_file("trail.npy", img, n);
    free(img);
    tm_file *f = open_ok("trail.npy");
    assert_int_equal(tm_file_n_warnings(f), 1);
    assert_non_null(strstr(tm_file_warning(f, 0), "8 bytes after"));
    tm_close(f);
}

/* A new, empty zip archive at name (in the scratch directory). */
static zip_t *npz_create(const char *name) {
    char p[512];
    pathf(p, sizeof p, name);
    unlink(p);
    int ze;
    zip_t *z = zip_open(p, ZIP_CREATE | ZIP_TRUNCATE, &ze);
    assert_non_null(z);
    return z;
}

/* An .npz written with libzip: one stored and one deflated member, plus a non-array member. */
static void make_npz(const char *name, int deflate_second) {
    zip_t *z = npz_create(name);
    static uint8_t *imgs[2];
    size_t n0, n1;
    float a[6] = {1.5f, -2, 3, 4, 5, 6.25f};
    int16_t b[4] = {-7, 8, 300, -32768};
    imgs[0] = npy_image(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", a, sizeof a, &n0);
    imgs[1] = npy_image(1, "{'descr': '<i2', 'fortran_order': False, 'shape': (4,), }", b, sizeof b, &n1);
    zip_source_t *s0 = zip_source_buffer(z, imgs[0], n0, 0);
    zip_source_t *s1 = zip_source_buffer(z, imgs[1], n1, 0);
    zip_source_t *s2 = zip_source_buffer(z, "hello", 5, 0);
    zip_int64_t i0 = zip_file_add(z, "w.a.npy", s0, 0);
    zip_int64_t i1 = zip_file_add(z, "b.npy", s1, 0);
    zip_int64_t i2 = zip_file_add(z, "notes.txt", s2, 0);
    assert_true(i0 >= 0 && i1 >= 0 && i2 >= 0);
    zip_set_file_compression(z, (zip_uint64_t)i0, ZIP_CM_STORE, 0);
    zip_set_file_compression(z, (zip_uint64_t)i1, deflate_second ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 0);
    assert_int_equal(zip_close(z), 0);
    free(imgs[0]);
    free(imgs[1]);
}

static uint8_t *slurp(const char *name, size_t *n) {
    char p[512];
    pathf(p, sizeof p, name);
    return tmt_slurp(p, n);
}

static void test_npz_generated(void **state) {
    (void)state;
    for (int defl = 0; defl < 2; defl++) {
        make_npz("g.npz", defl);
        tm_file *f = open_ok("g.npz");
        assert_int_equal(tm_file_format(f), TM_FMT_NPZ);
        assert_int_equal(tm_file_n_tensors(f), 2);
        assert_int_equal(tm_file_n_paths(f), 1);
        assert_int_equal(tm_file_n_warnings(f), 1);
        assert_non_null(strstr(tm_file_warning(f, 0), "notes.txt"));
        int64_t ia = tm_file_find(f, "w.a"), ib = tm_file_find(f, "b");
        assert_true(ia >= 0 && ib >= 0);
        const tm_tensor *ta = tm_file_tensor(f, ia), *tb = tm_file_tensor(f, ib);
        assert_int_equal(ta->file_index, 0); /* stored: in place */
        assert_int_equal(tb->file_index, defl ? 1 : 0);
        assert_int_equal(tb->dtype, TM_I16);
        float v[6];
        read_all(f, ia, v);
        assert_true(v[0] == 1.5f && v[1] == -2.0f && v[5] == 6.25f);
        read_all(f, ib, v);
        assert_true(v[0] == -7.0f && v[2] == 300.0f && v[3] == -32768.0f);
        /* the stored member's bytes are the file's bytes at the computed offset */
        size_t n;
        uint8_t *raw = slurp("g.npz", &n);
        float first;
        memcpy(&first, raw + ta->offset, 4);
        assert_true(first == 1.5f);
        /* the buffer entry point agrees */
        tm_file *g = NULL;
        tm_err e;
        tm_open_params bp = tm_open_params_default();
        bp.format = TM_FMT_NPY; /* the NumPy reader asked for: a zip image is an .npz */
        assert_int_equal(tm_open_buffer(raw, n, "g.npz", &bp, &g, &e), TM_OK);
        assert_int_equal(tm_file_n_tensors(g), 2);
        tm_close(g);
        free(raw);
        tm_close(f);
    }
}

/* An .npz of stored members "<name>.npy" (libzip) from (name, npy dict, data, bytes) rows. */
static void make_npz_members(const char *file, int n, const char *const *names, const char *const *dicts,
                             const void *const *data, const size_t *nbytes) {
    zip_t *z = npz_create(file);
    uint8_t *imgs[8];
    assert_true(n <= 8);
    for (int k = 0; k < n; k++) {
        size_t len;
        imgs[k] = npy_image(1, dicts[k], data[k], nbytes[k], &len);
        char member[128];
        snprintf(member, sizeof member, "%s.npy", names[k]);
        zip_int64_t i = zip_file_add(z, member, zip_source_buffer(z, imgs[k], len, 0), 0);
        assert_true(i >= 0);
        zip_set_file_compression(z, (zip_uint64_t)i, ZIP_CM_STORE, 0);
    }
    assert_int_equal(zip_close(z), 0);
    for (int k = 0; k < n; k++) free(imgs[k]);
}

/* One broken member does not hide the others: a truncated array and a string array are skipped
** with a warning naming them; an archive of nothing but broken members fails with that error. */
static void test_npz_members_independent(void **state) {
    (void)state;
    const float good[3] = {0.5f, -1.25f, 8.0f};
    const float half[2] = {1.0f, 2.0f};          /* 8 bytes where (100,) needs 400 */
    const char text[24] = "ab\0\0c\0\0\0\0\0\0\0de\0\0";  /* '<U3' (2,): 24 bytes of UCS-4 */
    const char *names[3] = {"good", "bad", "text"};
    const char *dicts[3] = {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
                            "{'descr': '<f4', 'fortran_order': False, 'shape': (100,), }",
                            "{'descr': '<U3', 'fortran_order': False, 'shape': (2,), }"};
    const void *data[3] = {good, half, text};
    const size_t nb[3] = {sizeof good, sizeof half, sizeof text};
    make_npz_members("mixed.npz", 3, names, dicts, data, nb);
    tm_file *f = open_ok("mixed.npz");
    assert_int_equal(tm_file_n_tensors(f), 1);
    int64_t gi = tm_file_find(f, "good");
    assert_true(gi >= 0);
    assert_true(tm_file_find(f, "bad") < 0 && tm_file_find(f, "text") < 0);
    float v[3];
    read_all(f, gi, v);
    assert_true(v[0] == 0.5f && v[1] == -1.25f && v[2] == 8.0f);
    assert_int_equal(tm_file_n_warnings(f), 2);
    const char *w0 = tm_file_warning(f, 0), *w1 = tm_file_warning(f, 1);
    assert_non_null(strstr(w0, "mixed.npz: array 'bad' is unreadable (truncated: shape and dtype '<f4' need 400 bytes"));
    assert_non_null(strstr(w0, "; skipped"));
    assert_non_null(strstr(w1, "mixed.npz: array 'text' has dtype <U3, which is not a tensor dtype; skipped"));
    tm_close(f);
    /* nothing readable: the open fails with the broken member's error */
    make_npz_members("allbad.npz", 1, names + 1, dicts + 1, data + 1, nb + 1);
    tm_err e;
    assert_int_equal(open_err("allbad.npz", &e), TM_E_CORRUPT);
    assert_non_null(strstr(e.msg, "allbad.npz: array 'bad': truncated"));
    /* only a string array: opens, with no tensors and the warning */
    make_npz_members("onlytext.npz", 1, names + 2, dicts + 2, data + 2, nb + 2);
    f = open_ok("onlytext.npz");
    assert_int_equal(tm_file_n_tensors(f), 0);
    assert_int_equal(tm_file_n_warnings(f), 1);
    tm_close(f);
}

/* Archives whose entries lie: sizes, offsets, names, CRC. */
static void test_npz_bad(void **state) {
    (void)state;
    make_npz("b.npz", 1);
    size_t n;
    uint8_t *good = slurp("b.npz", &n);
    /* find the central directory entries by signature */
    size_t cd[3], k = 0;
    for (size_t i = 0; i + 4 <= n && k < 3; i++)
        if (good[i] == 'P' && good[i + 1] == 'K' && good[i + 2] == 1 && good[i + 3] == 2) cd[k++] = i;
    assert_int_equal(k, 3);
    struct { size_t off; uint32_t val; int width; tm_status code; const char *needle; } cases[] = {
        {cd[0] + 42, 0x7fffff00u, 4, TM_E_CORRUPT, ""},      /* local header outside the archive */
        {cd[0] + 20, 0x00ffffffu, 4, TM_E_CORRUPT, ""},      /* compressed size lies */
        {cd[1] + 24, 100000u, 4, TM_E_CORRUPT, ""},          /* deflated size lies */
        {cd[1] + 16, 0xdeadbeefu, 4, TM_E_CORRUPT, ""},      /* CRC lies */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint8_t *b = malloc(n);
        memcpy(b, good, n);
        for (int w = 0; w < cases[c].width; w++) b[cases[c].off + (size_t)w] = (uint8_t)(cases[c].val >> (8 * w));
        write_file("bad.npz", b, n);
        tm_err e;
        tm_status s = open_err("bad.npz", &e);
        if (s != cases[c].code) fprintf(stderr, "case %zu: %d %s\n", c, s, e.msg);
        assert_int_equal(s, cases[c].code);
        assert_non_null(strstr(e.msg, "bad.npz"));
        /* the buffer entry point reports the same */
        tm_file *g = NULL;
        tm_open_params bp = tm_open_params_default();
        bp.format = TM_FMT_NPY;
        assert_int_equal(tm_open_buffer(b, n, "bad.npz", &bp, &g, &e), cases[c].code);
        assert_null(g);
        free(b);
    }
    /* truncated archive */
    write_file("bad.npz", good, n - 30);
    tm_err e;
    assert_int_equal(open_err("bad.npz", &e), TM_E_CORRUPT);
    free(good);
}

/* ../shared/models/numpy: shapes and dtypes from PROVENANCE.md; the .npy files equal their
** .npz counterparts; the Fortran-order f16 file equals the f16 rounding of the deflated npz. */
static tm_file *open_shared(const char *name) {
    char p[1024];
    snprintf(p, sizeof p, "%s/models/numpy/%s", tmv_shared_dir(), name);
    return tmt_open_ok(p);
}

static float *read_named(tm_file *f, const char *name, int64_t *n) {
    int64_t i = tm_file_find(f, name);
    assert_true(i >= 0);
    const tm_tensor *t = tm_file_tensor(f, i);
    float *v = malloc((size_t)t->n_elems * sizeof(float));
    read_all(f, i, v);
    *n = t->n_elems;
    return v;
}

static void test_shared_numpy(void **state) {
    (void)state;
    if (!tmv_require_shared()) return;
    tm_file *a = open_shared("stories260K_calib_acts.npz");
    tm_file *b = open_shared("stories260K_calib_b_acts.npz");
    static const char *keys[] = {"tokens", "layers.0.attn_in", "layers.0.mlp_in", "layers.2.attn_in",
                                 "layers.4.mlp_in", "layers.4.down_proj_in", "final_norm_out"};
    for (int set = 0; set < 2; set++) {
        tm_file *f = set ? b : a;
        int64_t rows = set ? 384 : 512;
        assert_int_equal(tm_file_n_tensors(f), 7);
        assert_int_equal(tm_file_n_warnings(f), 1); /* 'text' is unicode */
        assert_non_null(strstr(tm_file_warning(f, 0), "'text'"));
        for (int k = 0; k < 7; k++) {
            const tm_tensor *t = tm_file_tensor(f, tm_file_find(f, keys[k]));
            assert_non_null(t);
            assert_int_equal(t->ndim, 2);
            if (set) assert_true(t->file_index >= 1); /* deflated: inflated in-memory slots */
            else assert_int_equal(t->file_index, 0);
            if (k == 0) {
                assert_int_equal(t->dtype, TM_I32);
                assert_int_equal(t->shape[0], set ? 4 : 8);
                assert_int_equal(t->shape[1], set ? 96 : 64);
            } else {
                assert_int_equal(t->dtype, TM_F32);
                assert_int_equal(t->shape[0], rows);
                assert_int_equal(t->shape[1], k == 5 ? 172 : 64);
            }
        }
        /* every sequence starts at BOS (token 1 in llama2.c's tokenizer) */
        int64_t n;
        float *tok = read_named(f, "tokens", &n);
        int64_t seq = set ? 96 : 64;
        for (int64_t s = 0; s < n / seq; s++) assert_true(tok[s * seq] == 1.0f);
        for (int64_t i = 0; i < n; i++) assert_true(tok[i] >= 0 && tok[i] < 512);
        free(tok);
    }
    /* stored .npy == npz member */
    tm_file *c = open_shared("stories260K_calib_L0_attn_in.npy");
    tm_file *cb = open_shared("stories260K_calib_b_L0_attn_in.npy");
    int64_t n1, n2;
    float *x = read_named(c, "stories260K_calib_L0_attn_in", &n1);
    float *y = read_named(a, "layers.0.attn_in", &n2);
    assert_int_equal(n1, 512 * 64);
    assert_int_equal(n1, n2);
    assert_memory_equal(x, y, (size_t)n1 * sizeof(float));
    free(x); free(y);
    x = read_named(cb, "stories260K_calib_b_L0_attn_in", &n1);
    y = read_named(b, "layers.0.attn_in", &n2);
    assert_int_equal(n1, 384 * 64);
    assert_memory_equal(x, y, (size_t)n1 * sizeof(float));
    /* RMSNorm outputs are not all zero */
    double ss = 0;
    for (int64_t i = 0; i < n1; i++) ss += (double)x[i] * x[i];
    assert_true(ss > 1.0);
    free(x); free(y);
    /* Fortran-order f16 == f16(C-order f32 from the deflated npz), element by element */
    tm_file *ff = open_shared("stories260K_calib_b_L4_down_proj_in_f16_fortran.npy");
    const tm_tensor *t = tm_file_tensor(ff, 0);
    assert_int_equal(t->dtype, TM_F16);
    assert_int_equal(t->fortran_order, 1);
    assert_int_equal(t->shape[0], 384);
    assert_int_equal(t->shape[1], 172);
    x = read_named(ff, "stories260K_calib_b_L4_down_proj_in_f16_fortran", &n1);
    y = read_named(b, "layers.4.down_proj_in", &n2);
    assert_int_equal(n1, n2);
    int64_t nz = 0;
    for (int64_t i = 0; i < n1; i++) {
        assert_true(x[i] == tm_f16_to_f32(tm_f32_to_f16(y[i])));
        nz += x[i] != 0;
    }
    assert_true(nz > n1 / 2);
    /* the stored bytes really are column-major: element [1, 0] is the second f16 in the file */
    const void *p;
    assert_int_equal(tm_tensor_data(ff, 0, 0, 4, &p, NULL), TM_OK);
    assert_true(tm_f16_to_f32(tm__ld16((const uint8_t *)p + 2)) == x[172]);
    free(x); free(y);
    tm_close(ff); tm_close(c); tm_close(cb); tm_close(a); tm_close(b);
}

/* inspect --json through the binary */
static void test_cli_inspect_npz(void **state) {
    (void)state;
    make_npz("cli.npz", 1);
    const char *bin = tmt_bin();
    json_t *d = tmt_run_json(0, "%s inspect %s/cli.npz --json", bin, g_dir);
    assert_true(json_is_object(d));
    assert_string_equal(json_string_value(json_object_get(d, "format")), "npz");
    assert_int_equal(json_integer_value(json_object_get(d, "n_tensors")), 2);
    assert_int_equal(json_integer_value(json_object_get(d, "n_parameters")), 10);
    assert_int_equal(json_array_size(json_object_get(d, "files")), 1);
    json_t *ts = json_object_get(d, "tensors");
    json_t *t0 = json_array_get(ts, 0);
    assert_string_equal(json_string_value(json_object_get(t0, "name")), "w.a");
    assert_string_equal(json_string_value(json_object_get(t0, "dtype")), "F32");
    json_decref(d);
    /* a lying header: exit 3, one line naming the file */
    size_t n;
    uint8_t *img = npy_image(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (100,), }", "", 0, &n);
    write_file("cli_bad.npy", img, n);
    free(img);
    assert_int_equal(tmt_run(NULL, "%s inspect %s/cli_bad.npy >/dev/null 2>&1", bin, g_dir), 3);
    /* quantize copies tensors it keeps: a big-endian Fortran-order array must come out as the
    ** row-major little-endian bytes safetensors holds (the values, not the stored bytes) */
    int32_t colmaj[24];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) colmaj[i + 2 * j + 6 * k] = 100 * i + 10 * j + k;
    uint8_t be[96];
    for (int e = 0; e < 24; e++)
        for (int b = 0; b < 4; b++) be[4 * e + b] = (uint8_t)((uint32_t)colmaj[e] >> (8 * (3 - b)));
    img = npy_image(1, "{'descr': '>i4', 'fortran_order': True, 'shape': (2, 3, 4), }", be, sizeof be, &n);
    write_file("copy.npy", img, n);
    free(img);
    assert_int_equal(tmt_run(NULL, "%s quantize %s/copy.npy -o %s/copy_out -q --allow-empty", bin, g_dir, g_dir), 0);
    char out[512];
    pathf(out, sizeof out, "copy_out");
    tm_file *f = NULL;
    tm_err e;
    assert_int_equal(tm_open(out, NULL, &f, &e), TM_OK);
    int64_t ti = tm_file_find(f, "copy");
    assert_true(ti >= 0);
    const tm_tensor *t = tm_file_tensor(f, ti);
    assert_int_equal(t->fortran_order, 0);
    assert_int_equal(t->big_endian, 0);
    const void *p;
    assert_int_equal(tm_tensor_data(f, ti, 0, 96, &p, &e), TM_OK);
    for (int k = 0; k < 24; k++) {
        int32_t v;
        memcpy(&v, (const uint8_t *)p + 4 * k, 4);
        assert_int_equal(v, 100 * (k / 12) + 10 * (k / 4 % 3) + k % 4);
    }
    tm_close(f);
    /* diff of the array against its copy: no difference, computed from values */
    d = tmt_run_json(0, "%s diff %s/copy.npy %s/copy_out --json", bin, g_dir, g_dir);
    assert_int_equal(json_integer_value(json_object_get(d, "n_differ")), 0);
    json_decref(d);
}

static int setup(void **state) { (void)state; return tmt_tmpdir_make(g_dir, sizeof g_dir, "npy"); }
static int teardown(void **state) { (void)state; return tmt_tmpdir_remove(g_dir); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generated_dtypes),  cmocka_unit_test(test_generated_fortran),
        cmocka_unit_test(test_bad_headers),       cmocka_unit_test(test_npz_generated),
        cmocka_unit_test(test_npz_bad),           cmocka_unit_test(test_npz_members_independent),           cmocka_unit_test(test_shared_numpy),
        cmocka_unit_test(test_cli_inspect_npz),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
