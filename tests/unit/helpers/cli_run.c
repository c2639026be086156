/* cli_run.c: see cli_run.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cli_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const char *tmt_bin(void) {
    const char *b = getenv("TM_BIN");
    return b && *b ? b : "./tensormorph";
}

static int vrun(char **out, const char *fmt, va_list ap) {
    char cmd[8192];
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    FILE *p = popen(cmd, "r");
    if (!p) {
        if (out) *out = NULL;
        return -1;
    }
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while (buf && (r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (cap - n < 1024) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
    }
    if (buf) buf[n] = '\0';
    int st = pclose(p);
    if (out) *out = buf;
    else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int tmt_run(char **out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = vrun(out, fmt, ap);
    va_end(ap);
    return rc;
}

json_t *tmt_run_json(int expect_rc, const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char *out = NULL;
    int rc = tmt_run(&out, "%s", cmd);
    if (rc != expect_rc)
        fprintf(stderr, "command: %s\nexit %d (expected %d)\nstdout: %.2000s\n", cmd, rc, expect_rc, out ? out : "");
    assert_int_equal(rc, expect_rc);
    json_error_t je;
    json_t *j = out ? json_loads(out, 0, &je) : NULL;
    if (!j) fprintf(stderr, "command: %s\nnot JSON: %.2000s\n", cmd, out ? out : "");
    free(out);
    assert_non_null(j);
    return j;
}

double tmt_num(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    if (json_is_number(v)) return json_number_value(v);
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (!strcmp(s, "inf")) return INFINITY;
        if (!strcmp(s, "-inf")) return -INFINITY;
        return NAN;
    }
    fail_msg("key '%s' missing or not a number", k);
    return NAN;
}

json_t *tmt_find_named(json_t *arr, const char *name) {
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
        const char *n = json_string_value(json_object_get(e, "name"));
        if (n && !strcmp(n, name)) return e;
    }
    return NULL;
}

int tmt_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int tmt_serve_start(const char *const *args, int *port, FILE **out) {
    const char *argv[32];
    int k = 0;
    argv[k++] = tmt_bin();
    argv[k++] = "serve";
    for (; *args && k < 27; args++) argv[k++] = *args;
    argv[k++] = "--port";
    argv[k++] = "0";
    argv[k++] = "-q";
    argv[k] = NULL;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        execv(tmt_bin(), (char *const *)argv);
        _exit(127);
    }
    close(pfd[1]);
    char line[256];
    *out = fdopen(pfd[0], "r");
    if (!*out || !fgets(line, sizeof line, *out) || sscanf(line, "http://127.0.0.1:%d/", port) != 1) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        fail_msg("serve printed no URL");
    }
    return (int)pid;
}

int tmt_serve_stop(int pid, FILE *out) {
    int ws = 0;
    kill((pid_t)pid, SIGTERM);
    waitpid((pid_t)pid, &ws, 0);
    if (out) fclose(out);
    return ws;
}

int tmt_http_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

json_t *tmt_http_json(int port, const char *path, int *status) {
    int fd = tmt_http_connect(port);
    char req[2048];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n", path, port);
    assert_true(n > 0 && (size_t)n < sizeof req);
    assert_int_equal(write(fd, req, (size_t)n), n);
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    ssize_t r;
    while ((r = read(fd, buf + len, cap - 1 - len)) > 0) {
        len += (size_t)r;
        if (cap - len < 4096) {
            buf = realloc(buf, cap *= 2);
            assert_non_null(buf);
        }
    }
    close(fd);
    buf[len] = '\0';
    assert_int_equal(sscanf(buf, "HTTP/1.1 %d", status), 1);
    char *body = strstr(buf, "\r\n\r\n");
    assert_non_null(body);
    json_t *j = json_loads(body + 4, 0, NULL);
    free(buf);
    assert_non_null(j);
    return j;
}

char *tmt_read_bytes(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, fp) != (size_t)n) { free(b); b = NULL; }
    if (b) b[n] = '\0';
    if (b && size) *size = (size_t)n;
    fclose(fp);
    return b;
}

char *tmt_read_file(const char *path) { return tmt_read_bytes(path, NULL); }

json_t *tmt_gate_check(json_t *verdict, const char *name) {
    json_t *c = tmt_find_named(json_object_get(verdict, "checks"), name);
    if (!c) print_message("no check %s\n", name);
    assert_non_null(c);
    return c;
}

const char *tmt_gate_status(json_t *verdict, const char *name) {
    return json_string_value(json_object_get(tmt_gate_check(verdict, name), "status"));
}

const char *tmt_gate_reason(json_t *verdict, const char *name) {
    return json_string_value(json_object_get(tmt_gate_check(verdict, name), "reason"));
}

void tmt_write_json(const char *dir, const char *name, json_t *doc) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    assert_int_equal(json_dump_file(doc, p, JSON_INDENT(1)), 0);
    json_decref(doc);
}
