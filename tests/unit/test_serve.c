/* test_serve.c: `tensormorph serve` over HTTP (env TM_BIN), with a plain socket client: the API
** documents equal the CLI's --json documents, tiles hold the checkpoint's real values, the
** architecture tree marks quantization boundaries, and the server refuses foreign Host/Origin,
** non-GET methods, oversize tiles and any path outside its compiled-in assets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers/cli_run.h"
#include "helpers/fixture.h"

static char g_tmp[256];
static const char *g_bin;
static pid_t g_server = -1;
static int g_port;

#define OPROJ "model.layers.1.self_attn.o_proj.weight"

#define run tmt_run

#define cli_json(...) tmt_run_json(0, __VA_ARGS__)

typedef struct http_resp { int status; char *head; char *body; size_t body_len; } http_resp;

static void resp_free(http_resp *r) { free(r->head); free(r->body); }

/* One request on a fresh connection; `raw_headers` replaces the default Host line when given. */
static http_resp http_raw(const char *method, const char *path, const char *raw_headers) {
    http_resp r = {0, NULL, NULL, 0};
    int fd = tmt_http_connect(g_port);
    char req[8192];
    char host[64];
    snprintf(host, sizeof host, "Host: 127.0.0.1:%d\r\n", g_port);
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\n%sConnection: close\r\n\r\n", method, path,
                     raw_headers ? raw_headers : host);
    assert_true(n > 0 && (size_t)n < sizeof req);
    assert_int_equal(write(fd, req, (size_t)n), n);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t got;
    while ((got = read(fd, buf + len, cap - len - 1)) > 0) {
        len += (size_t)got;
        if (cap - len < 4096) { cap *= 2; buf = realloc(buf, cap); }
    }
    close(fd);
    buf[len] = '\0';
    assert_true(sscanf(buf, "HTTP/1.%*d %d", &r.status) == 1);
    char *sep = strstr(buf, "\r\n\r\n");
    assert_non_null(sep);
    r.head = strndup(buf, (size_t)(sep - buf) + 2);
    r.body_len = len - (size_t)(sep + 4 - buf);
    r.body = malloc(r.body_len + 1);
    memcpy(r.body, sep + 4, r.body_len);
    r.body[r.body_len] = '\0';
    free(buf);
    return r;
}

static http_resp http_get(const char *path) { return http_raw("GET", path, NULL); }

/* The value of header `name` (case-insensitive) in r, copied into out; 0 when absent. */
static int header(const http_resp *r, const char *name, char *out, size_t n) {
    size_t nl = strlen(name);
    for (const char *p = r->head; p && *p; p = strstr(p, "\r\n") ? strstr(p, "\r\n") + 2 : NULL) {
        if (!strncasecmp(p, name, nl) && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ') v++;
            const char *e = strstr(v, "\r\n");
            size_t l = e ? (size_t)(e - v) : strlen(v);
            if (l >= n) l = n - 1;
            memcpy(out, v, l);
            out[l] = '\0';
            return 1;
        }
    }
    return 0;
}

static json_t *api(const char *fmt, ...) {
    char path[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    http_resp r = http_get(path);
    if (r.status != 200) fprintf(stderr, "GET %s -> %d %s\n", path, r.status, r.body);
    assert_int_equal(r.status, 200);
    char ct[128];
    assert_true(header(&r, "Content-Type", ct, sizeof ct));
    assert_string_equal(ct, "application/json");
    json_t *j = json_loads(r.body, 0, NULL);
    resp_free(&r);
    assert_non_null(j);
    return j;
}

static int api_status(const char *path) {
    http_resp r = http_get(path);
    int s = r.status;
    if (s >= 400 && !strncmp(path, "/api/", 5)) {
        json_t *j = json_loads(r.body, 0, NULL);  /* API errors are JSON documents too */
        assert_non_null(j);
        assert_string_equal(json_string_value(json_object_get(j, "schema")), "tensormorph.error/1");
        json_decref(j);
    }
    resp_free(&r);
    return s;
}

static size_t b64_decode(const char *s, unsigned char *out, size_t cap) {
    size_t n = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (; *s && *s != '='; s++) {
        const char *tab = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        const char *p = strchr(tab, *s);
        assert_non_null(p);
        acc = acc << 6 | (uint32_t)(p - tab);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            assert_true(n < cap);
            out[n++] = (unsigned char)(acc >> bits);
        }
    }
    return n;
}

/* A tile's statistic as floats (w*h). */
static float *tile_floats(json_t *d, const char *key, size_t npx) {
    const char *s = json_string_value(json_object_get(d, key));
    assert_non_null(s);
    float *f = malloc(npx * sizeof(float));
    assert_int_equal(b64_decode(s, (unsigned char *)f, npx * sizeof(float)), npx * sizeof(float));
    return f;
}

static int setup_all(void **state) {
    (void)state;
    g_bin = tmt_bin();
    if (tmt_demo_q4(g_tmp, sizeof g_tmp, "serve")) return -1;
    char q[512], r[512];
    snprintf(q, sizeof q, "%s/q4", g_tmp);
    snprintf(r, sizeof r, "%s/demo", g_tmp);
    const char *args[] = {q, "--ref", r, NULL};
    FILE *in;
    g_server = (pid_t)tmt_serve_start(args, &g_port, &in);
    fclose(in);
    return g_port > 0 ? 0 : -1;
}

static int teardown_all(void **state) {
    (void)state;
    if (g_server > 0) {
        kill(g_server, SIGTERM);
        int st;
        waitpid(g_server, &st, 0);
    }
    tmt_tmpdir_remove(g_tmp);
    return 0;
}

static void test_assets_and_headers(void **state) {
    (void)state;
    http_resp r = http_get("/");
    assert_int_equal(r.status, 200);
    char v[512];
    assert_true(header(&r, "Content-Type", v, sizeof v));
    assert_string_equal(v, "text/html; charset=utf-8");
    assert_true(header(&r, "Content-Security-Policy", v, sizeof v));
    assert_non_null(strstr(v, "default-src 'self'"));
    assert_true(header(&r, "X-Content-Type-Options", v, sizeof v));
    assert_string_equal(v, "nosniff");
    assert_true(header(&r, "Cache-Control", v, sizeof v));
    assert_string_equal(v, "no-cache");
    assert_non_null(strstr(r.body, "app.js"));
    char etag[64];
    assert_true(header(&r, "ETag", etag, sizeof etag));
    resp_free(&r);
    char hdr[256];
    snprintf(hdr, sizeof hdr, "Host: 127.0.0.1:%d\r\nIf-None-Match: %s\r\n", g_port, etag);
    r = http_raw("GET", "/index.html", hdr);
    assert_int_equal(r.status, 304);
    resp_free(&r);
    r = http_get("/app.js");
    assert_int_equal(r.status, 200);
    assert_true(header(&r, "Content-Type", v, sizeof v));
    assert_string_equal(v, "text/javascript; charset=utf-8");
    assert_true(r.body_len > 1000);
    resp_free(&r);
    /* nothing outside the compiled-in table, however the path is spelled */
    assert_int_equal(api_status("/../CMakeLists.txt"), 404);
    assert_int_equal(api_status("/%2e%2e/%2e%2e/etc/passwd"), 404);
    assert_int_equal(api_status("//etc/passwd"), 404);
    assert_int_equal(api_status("/web/index.html"), 404);
    assert_int_equal(api_status("/api/v1/nothing"), 404);
}

static void test_host_origin_and_methods(void **state) {
    (void)state;
    http_resp r = http_raw("GET", "/api/v1/session", "Host: evil.example:80\r\n");
    assert_int_equal(r.status, 403);
    resp_free(&r);
    char hdr[256];
    snprintf(hdr, sizeof hdr, "Host: 127.0.0.1:%d\r\nOrigin: http://evil.example\r\n", g_port);
    r = http_raw("GET", "/api/v1/session", hdr);
    assert_int_equal(r.status, 403);
    resp_free(&r);
    snprintf(hdr, sizeof hdr, "Host: localhost:%d\r\nOrigin: http://127.0.0.1:%d\r\n", g_port, g_port);
    r = http_raw("GET", "/api/v1/session", hdr);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    snprintf(hdr, sizeof hdr, "Host: 127.0.0.1:%d\r\n", g_port + 1);  /* another port: rebinding */
    r = http_raw("GET", "/api/v1/session", hdr);
    assert_int_equal(r.status, 403);
    resp_free(&r);
    r = http_raw("POST", "/api/v1/session", NULL);
    assert_int_equal(r.status, 405);
    char v[64];
    assert_true(header(&r, "Allow", v, sizeof v));
    resp_free(&r);
    r = http_raw("DELETE", "/index.html", NULL);
    assert_int_equal(r.status, 405);
    resp_free(&r);
    r = http_raw("HEAD", "/index.html", NULL);  /* headers only */
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, 0);
    resp_free(&r);
    char longpath[3200];
    memset(longpath, 'a', sizeof longpath - 1);
    longpath[0] = '/';
    longpath[sizeof longpath - 1] = '\0';
    r = http_get(longpath);
    assert_int_equal(r.status, 414);
    resp_free(&r);
}

static void test_documents_equal_cli_json(void **state) {
    (void)state;
    json_t *a = api("/api/v1/inspect");
    json_t *b = cli_json("%s inspect %s/q4 --json", g_bin, g_tmp);
    assert_true(json_equal(a, b));
    json_decref(a);
    json_decref(b);
    a = api("/api/v1/scalar?name=" OPROJ "&index=5,70");
    b = cli_json("%s scalar %s/q4 " OPROJ " 5,70 --ref %s/demo --json", g_bin, g_tmp, g_tmp);
    assert_true(json_equal(a, b));
    assert_true(json_is_number(json_object_get(a, "error_lsb")));
    json_decref(a);
    json_decref(b);
    a = api("/api/v1/scalar?name=model.norm.weight&index=7");
    b = cli_json("%s scalar %s/q4 model.norm.weight 7 --ref %s/demo --json", g_bin, g_tmp, g_tmp);
    assert_true(json_equal(a, b));
    json_decref(a);
    json_decref(b);
    a = api("/api/v1/qdiff");
    b = cli_json("%s qdiff %s/demo %s/q4 --json", g_bin, g_tmp, g_tmp);
    assert_true(json_equal(a, b));
    assert_int_equal(json_array_size(json_object_get(a, "tensors")), 24);  /* int4 group:32: 4 x 6 */
    json_decref(a);
    json_decref(b);
    assert_int_equal(api_status("/api/v1/scalar?name=" OPROJ "&index=5,256"), 400);
    assert_int_equal(api_status("/api/v1/scalar?name=" OPROJ "&index=5"), 400);
    /* every endpoint: a parameter given twice or a NUL in a name is a 400 with its message */
    const char *dup[] = {"/api/v1/scalar?name=" OPROJ "&index=5,3&index=1,1", "/api/v1/tensor?name=" OPROJ "&name=" OPROJ,
                         "/api/v1/tile?name=" OPROJ "&step=1&step=2", "/api/v1/inspect?x=1&x=2", "/api/v1/arch?a=1&a=1",
                         "/api/v1/calibrate?tensor=" OPROJ "&observer=mse&observer=minmax", "/api/v1/session?k=&k="};
    for (size_t k = 0; k < sizeof dup / sizeof *dup; k++) {
        http_resp r = http_get(dup[k]);
        if (r.status != 400 || !strstr(r.body, "times; give each parameter once")) fail_msg("GET %s -> %d %s", dup[k], r.status, r.body);
        resp_free(&r);
    }
    const char *nul[] = {"/api/v1/tensor?name=" OPROJ "%00x", "/api/v1/scalar?name=" OPROJ "%00&index=0,0",
                         "/api/v1/tile?name=a%00b", "/api/v1/calibrate?tensor=x%00y"};
    for (size_t k = 0; k < sizeof nul / sizeof *nul; k++) {
        http_resp r = http_get(nul[k]);
        if (r.status != 400 || !strstr(r.body, "holds a NUL byte")) fail_msg("GET %s -> %d %s", nul[k], r.status, r.body);
        resp_free(&r);
    }
    assert_int_equal(api_status("/api/v1/scalar?name=nope&index=0"), 404);
}

static void test_tiles_hold_real_values(void **state) {
    (void)state;
    json_t *m = api("/api/v1/tensor?name=" OPROJ);
    assert_int_equal(json_integer_value(json_object_get(m, "rows")), 256);
    assert_int_equal(json_integer_value(json_object_get(m, "cols")), 256);
    assert_string_equal(json_string_value(json_object_get(m, "scheme")), "I4 group:32 sym scale:F32");
    assert_string_equal(json_string_value(json_object_get(m, "label")), "I4 group:32 sym scale:F32");
    assert_true(json_is_true(json_object_get(m, "has_ref")));
    assert_true(json_integer_value(json_object_get(m, "pyramid_step")) >= 2);
    double tmax = json_number_value(json_object_get(m, "max"));
    json_decref(m);
    /* step 1: each pixel is one element */
    json_t *d = api("/api/v1/tile?name=" OPROJ "&step=1&x=0&y=0&w=256&h=8");
    size_t npx = 256 * 8;
    float *mn = tile_floats(d, "min", npx), *mx = tile_floats(d, "max", npx), *me = tile_floats(d, "mean", npx);
    for (int x = 0; x < 256; x++) assert_true(mn[3 * 256 + x] == 0 && mx[3 * 256 + x] == 0);  /* the all-zero row */
    for (size_t k = 0; k < npx; k++) assert_true(mn[k] == mx[k] && mx[k] == me[k]);
    json_t *s = api("/api/v1/scalar?name=" OPROJ "&index=5,70");
    assert_true(me[5 * 256 + 70] == (float)json_number_value(json_object_get(s, "value")));
    double err_lsb = json_number_value(json_object_get(s, "error_lsb"));
    json_decref(d);
    free(mn); free(mx); free(me);
    /* the whole tensor in one pixel: its maximum */
    d = api("/api/v1/tile?name=" OPROJ "&step=256&w=1&h=1");
    mx = tile_floats(d, "max", 1);
    assert_true(mx[0] == (float)tmax);
    free(mx);
    json_decref(d);
    /* error in LSB, as the Scalar Inspector computes it */
    d = api("/api/v1/tile?name=" OPROJ "&mode=error&step=1&x=64&y=5&w=16&h=1");
    mx = tile_floats(d, "max", 16);
    assert_true(fabs(mx[70 - 64] - fabs(err_lsb)) < 1e-6);
    for (int k = 0; k < 16; k++) assert_true(mx[k] >= 0 && mx[k] <= 0.5 + 1e-3);
    free(mx);
    json_decref(d);
    json_decref(s);
    /* groups: 32 columns share a scale, the next 32 another */
    d = api("/api/v1/tile?name=" OPROJ "&mode=groups&step=1&w=64&h=2");
    assert_string_equal(json_string_value(json_object_get(d, "encoding")), "i32le-base64");
    int32_t g[128];
    assert_int_equal(b64_decode(json_string_value(json_object_get(d, "groups")), (unsigned char *)g, sizeof g), sizeof g);
    for (int x = 0; x < 64; x++) {
        assert_int_equal(g[x], x / 32);
        assert_int_equal(g[64 + x], 8 + x / 32);
    }
    json_decref(d);
    /* another 2-D view: split 0 makes the whole tensor one row */
    m = api("/api/v1/tensor?name=" OPROJ "&split=0");
    assert_int_equal(json_integer_value(json_object_get(m, "rows")), 1);
    assert_int_equal(json_integer_value(json_object_get(m, "cols")), 65536);
    json_decref(m);
    d = api("/api/v1/tile?name=" OPROJ "&split=0&step=1&x=%d&w=4&h=1", 5 * 256 + 70);
    me = tile_floats(d, "mean", 4);
    s = api("/api/v1/scalar?name=" OPROJ "&index=5,70");
    assert_true(me[0] == (float)json_number_value(json_object_get(s, "value")));
    free(me);
    json_decref(d);
    json_decref(s);
    assert_int_equal(api_status("/api/v1/tensor?name=" OPROJ "&split=3"), 400);
    /* bounds */
    assert_int_equal(api_status("/api/v1/tile?name=" OPROJ "&w=513"), 400);
    assert_int_equal(api_status("/api/v1/tile?name=" OPROJ "&step=3"), 400);
    assert_int_equal(api_status("/api/v1/tile?name=" OPROJ "&x=-1"), 400);
    assert_int_equal(api_status("/api/v1/tile?name=" OPROJ "&mode=rainbow"), 400);
    assert_int_equal(api_status("/api/v1/tile?name=model.norm.weight&mode=groups"), 400);
    assert_int_equal(api_status("/api/v1/tile?name=model.norm.weight&mode=error"), 400);
    assert_int_equal(api_status("/api/v1/tile?name=no.such"), 404);
}

static json_t *child(json_t *node, const char *name) {
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(node, "children"), i, c)
        if (!strcmp(json_string_value(json_object_get(c, "name")), name)) return c;
    return NULL;
}

static void test_arch_tree_and_boundaries(void **state) {
    (void)state;
    json_t *a = api("/api/v1/arch");
    json_t *ins = api("/api/v1/inspect");
    json_t *root = json_object_get(a, "root");
    assert_int_equal(json_integer_value(json_object_get(root, "n_params")),
                     json_integer_value(json_object_get(ins, "n_parameters")));
    json_t *model = child(root, "model");
    assert_non_null(model);
    assert_non_null(child(root, "lm_head"));
    json_t *layers = child(model, "layers");
    json_t *kids = json_object_get(layers, "children");
    assert_int_equal(json_array_size(kids), 4);
    for (size_t k = 0; k < 4; k++) {
        char want[8];
        snprintf(want, sizeof want, "%zu", k);
        assert_string_equal(json_string_value(json_object_get(json_array_get(kids, k), "name")), want);
    }
    json_t *l0 = json_array_get(kids, 0);
    assert_string_equal(json_string_value(json_object_get(l0, "scheme")), "mixed");
    json_t *norm = child(l0, "input_layernorm"), *mlp = child(l0, "mlp"), *attn = child(l0, "self_attn");
    assert_string_equal(json_string_value(json_object_get(norm, "dtype")), "F32");
    assert_string_equal(json_string_value(json_object_get(norm, "scheme")), "dense");
    assert_string_equal(json_string_value(json_object_get(attn, "dtype")), "I4");
    assert_string_equal(json_string_value(json_object_get(attn, "scheme")), "I4 group:32 sym scale:F32");
    /* down_proj (688 columns, not a multiple of 32) stays dense next to int4 gate/up */
    assert_string_equal(json_string_value(json_object_get(mlp, "scheme")), "mixed");
    json_t *down = child(mlp, "down_proj"), *gate = child(mlp, "gate_proj"), *up = child(mlp, "up_proj");
    assert_string_equal(json_string_value(json_object_get(down, "scheme")), "dense");
    assert_string_equal(json_string_value(json_object_get(gate, "scheme")), "I4 group:32 sym scale:F32");
    /* siblings in name order; a boundary wherever dtype or scheme changes from the previous one */
    assert_false(json_is_true(json_object_get(down, "boundary")));
    assert_true(json_is_true(json_object_get(gate, "boundary")));
    assert_false(json_is_true(json_object_get(up, "boundary")));
    assert_false(json_is_true(json_object_get(norm, "boundary")));
    assert_true(json_is_true(json_object_get(mlp, "boundary")));
    assert_true(json_is_true(json_object_get(child(l0, "post_attention_layernorm"), "boundary")));
    assert_true(json_is_true(json_object_get(attn, "boundary")));
    /* bytes of a quantized module count its scales: more than the packed codes alone */
    json_t *q = child(attn, "q_proj");
    json_t *ts = json_object_get(ins, "tensors");
    size_t i;
    json_t *t;
    json_array_foreach(ts, i, t)
        if (!strcmp(json_string_value(json_object_get(t, "name")), "model.layers.0.self_attn.q_proj.weight"))
            assert_true(json_integer_value(json_object_get(q, "bytes")) > json_integer_value(json_object_get(t, "bytes")));
    assert_true(json_integer_value(json_object_get(a, "n_boundaries")) >= 8);
    json_decref(a);
    json_decref(ins);
}

static void test_listen_options(void **state) {
    (void)state;
    char *o;
    /* a non-loopback address works but warns; the URL still comes first on stdout */
    int rc = run(&o, "timeout 3 %s serve %s/q4 --host 0.0.0.0 --port 0 2>&1", g_bin, g_tmp);
    assert_int_equal(rc, 124);  /* still serving when timeout stopped it */
    assert_non_null(strstr(o, "http://0.0.0.0:"));
    assert_non_null(strstr(o, "warning"));
    assert_non_null(strstr(o, "not a loopback address"));
    free(o);
    rc = run(&o, "timeout 3 %s serve %s/q4 --port 0 2>&1", g_bin, g_tmp);
    assert_int_equal(rc, 124);
    assert_null(strstr(o, "warning"));
    free(o);
    assert_int_equal(run(&o, "%s serve %s/q4 --port 70000 2>&1", g_bin, g_tmp), 2);
    free(o);
    assert_int_equal(run(&o, "%s serve %s/q4 --host no-such-host.invalid --port 0 2>&1", g_bin, g_tmp), 2);
    free(o);
    assert_int_equal(run(&o, "%s serve %s/q4 --allow-host 'a/b' --port 0 2>&1", g_bin, g_tmp), 2);
    free(o);
    /* the port in use: an I/O error, not a hang */
    assert_int_equal(run(&o, "%s serve %s/q4 --port %d 2>&1", g_bin, g_tmp, g_port), 4);
    free(o);
}

/* Start `serve DIR/q4 ARG1..ARG4 --port 0 -q`; returns the pid and sets *port. */
static pid_t start_server(const char *arg1, const char *arg2, const char *arg3, const char *arg4, int *port) {
    char q[512];
    snprintf(q, sizeof q, "%s/q4", g_tmp);
    const char *args[] = {q, arg1, arg2, arg3, arg4, NULL};
    FILE *in;
    pid_t pid = (pid_t)tmt_serve_start(args, port, &in);
    fclose(in);
    return pid;
}

/* Pyramids stay within --cache-mb: older ones are evicted, tiles keep working. --allow-host adds
** one accepted Host name, no other. */
static void test_pyramid_cache_bound(void **state) {
    (void)state;
    int port, main_port = g_port;
    pid_t pid = start_server("--cache-mb", "1", "--allow-host", "tm.example", &port);
    g_port = port;
    char hdr[256];
    snprintf(hdr, sizeof hdr, "Host: tm.example:%d\r\nOrigin: http://tm.example:%d\r\n", port, port);
    http_resp hr = http_raw("GET", "/api/v1/session", hdr);
    assert_int_equal(hr.status, 200);
    resp_free(&hr);
    snprintf(hdr, sizeof hdr, "Host: other.example:%d\r\n", port);
    hr = http_raw("GET", "/api/v1/session", hdr);
    assert_int_equal(hr.status, 403);
    resp_free(&hr);
    static const char *names[] = {"model.layers.0.mlp.down_proj.weight", "model.layers.1.mlp.down_proj.weight",
                                  "model.layers.2.mlp.down_proj.weight", "model.layers.3.mlp.down_proj.weight",
                                  "model.embed_tokens.weight", "lm_head.weight"};
    for (int k = 0; k < 6; k++) {
        json_t *m = api("/api/v1/tensor?name=%s", names[k]);
        assert_true(json_integer_value(json_object_get(m, "pyramid_bytes")) > 0);
        json_decref(m);
        json_t *d = api("/api/v1/tile?name=%s&step=1&w=8&h=8", names[k]);
        json_decref(d);
        json_t *s = api("/api/v1/session");
        json_t *c = json_object_get(s, "pyramid_cache");
        assert_int_equal(json_integer_value(json_object_get(c, "limit_bytes")), 1 << 20);
        assert_true(json_integer_value(json_object_get(c, "bytes")) <= 1 << 20);
        assert_true(json_integer_value(json_object_get(c, "n_pyramids")) >= 1);
        if (k == 5) assert_true(json_integer_value(json_object_get(c, "n_pyramids")) < 6);  /* some evicted */
        json_decref(s);
    }
    g_port = main_port;
    kill(pid, SIGTERM);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);  /* SIGTERM: a clean stop */
}

static void *hammer(void *arg) {
    long id = (long)arg;
    int ok = 0;
    for (int k = 0; k < 12; k++) {
        char path[256];
        snprintf(path, sizeof path, "/api/v1/tile?name=model.layers.%ld.self_attn.q_proj.weight&step=%d&w=64&h=64%s",
                 id % 4, 1 << (k % 4), k % 3 == 0 ? "&mode=error" : "");
        http_resp r = http_get(path);
        ok += r.status == 200 && strstr(r.body, "\"mean\"") != NULL;
        resp_free(&r);
    }
    return (void *)(long)ok;
}

static void test_concurrent_requests(void **state) {
    (void)state;
    pthread_t th[8];
    for (long k = 0; k < 8; k++) assert_int_equal(pthread_create(&th[k], NULL, hammer, (void *)k), 0);
    for (int k = 0; k < 8; k++) {
        void *ret;
        pthread_join(th[k], &ret);
        assert_int_equal((long)ret, 12);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_assets_and_headers),
        cmocka_unit_test(test_host_origin_and_methods),
        cmocka_unit_test(test_documents_equal_cli_json),
        cmocka_unit_test(test_tiles_hold_real_values),
        cmocka_unit_test(test_arch_tree_and_boundaries),
        cmocka_unit_test(test_concurrent_requests),
        cmocka_unit_test(test_listen_options),
        cmocka_unit_test(test_pyramid_cache_bound),
    };
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
