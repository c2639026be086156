/* fixture.c: see fixture.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fixture.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_run.h"

int tmt_tmpdir_make(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/tm_%s_XXXXXX", tag);
    return mkdtemp(buf) ? 0 : -1;
}

int tmt_tmpdir_remove(const char *dir) { return tmt_run(NULL, "rm -rf '%s'", dir) == 0 ? 0 : -1; }

int tmt_demo(char *dir, size_t n, const char *tag) {
    if (tmt_tmpdir_make(dir, n, tag)) return -1;
    return tmt_run(NULL, "%s demo -o %s/demo -q", tmt_bin(), dir);
}

int tmt_demo_q4(char *dir, size_t n, const char *tag) {
    int rc = tmt_demo(dir, n, tag);
    if (rc) return rc;
    return tmt_run(NULL, "%s quantize %s/demo -o %s/q4 -t int4 -g group:32 -q", tmt_bin(), dir, dir);
}

tm_file *tmt_open_ok(const char *path) {
    tm_file *f = NULL;
    tm_err e;
    tm_status s = tm_open(path, NULL, &f, &e);
    if (s) print_message("open %s: %s\n", path, e.msg);
    assert_int_equal(s, TM_OK);
    return f;
}

pid_t tmt_serve_start(const char *const *args, int *port) {
    const char *argv[24] = {tmt_bin(), "serve"};
    int n = 2;
    for (; *args && n < 18; args++) argv[n++] = *args;
    argv[n++] = "--port";
    argv[n++] = "0";
    argv[n++] = "-q";
    argv[n] = NULL;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(pfd[1]);
    FILE *in = fdopen(pfd[0], "r");
    char line[256];
    const char *got = in ? fgets(line, sizeof line, in) : NULL;
    int parsed = got ? sscanf(line, "http://127.0.0.1:%d/", port) : 0;
    if (in) fclose(in);
    if (parsed != 1) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
    assert_non_null(in);
    assert_non_null(got);
    assert_int_equal(parsed, 1);
    return pid;
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

void tmt_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) print_message("cannot write %s\n", path);
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

void tmt_write_text(const char *dir, const char *name, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tmt_write_file(path, text, strlen(text));
}
