/* stderr_tap.c: with --json, stderr is passed through a tap that remembers the last message
** line, so that the {"error": ...} document a failing command leaves on stdout carries the
** text it printed on stderr (docs/exit-codes.md), whichever way the command printed it. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static char s_line[1024];   /* the line being written                                      */
static size_t s_len;
static char s_last[1024];   /* the last complete message line                              */
static FILE *s_real;         /* the stderr the tap replaced                                  */

static void line_done(void) {
    s_line[s_len] = '\0';
    s_len = 0;
    const char *m = s_line;
    const char *cr = strrchr(m, '\r');  /* a progress line redrawn in place: its last state */
    if (cr) m = cr + 1;
    if (!strncmp(m, "tensormorph", 11)) { /* "tensormorph: X" / "tensormorph CMD: X" -> X */
        const char *c = strstr(m, ": ");
        if (c) m = c + 2;
    }
    if (!*m || !strncmp(m, "note: ", 6) || !strncmp(m, "warning: ", 9) || !strncmp(m, "try 'tensormorph", 16)) return;
    snprintf(s_last, sizeof s_last, "%s", m);
}

static ssize_t tap_write(void *cookie, const char *buf, size_t n) {
    (void)cookie;
    for (size_t k = 0; k < n; k++) {
        if (buf[k] == '\n') line_done();
        else if (s_len + 1 < sizeof s_line) s_line[s_len++] = buf[k];
    }
    fwrite(buf, 1, n, s_real);
    fflush(s_real);
    return (ssize_t)n;
}

void cli_stderr_tap(void) {
    if (s_real) return;
    cookie_io_functions_t io = {NULL, tap_write, NULL, NULL};
    FILE *t = fopencookie(NULL, "w", io);
    if (!t) return;
    setvbuf(t, NULL, _IONBF, 0);
    s_real = stderr;
    stderr = t;
}

const char *cli_stderr_last(void) {
    if (s_len) line_done(); /* a message without its newline */
    return s_last[0] ? s_last : NULL;
}
