/* server.c: the HTTP side of `tensormorph serve` on libmicrohttpd: one thread per connection,
** GET/HEAD only, every request's Host (DNS rebinding) and Origin checked against the address
** we bound, security headers on every response, assets straight from the compiled-in table
** (no request path ever reaches the file system), API documents from api.c. */
#include "serve.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#define CSP "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; " \
            "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'"

const tm_asset *serve_asset(const char *url) {
    if (!strcmp(url, "/")) url = "/index.html";
    for (size_t k = 0; k < tm_n_assets; k++)
        if (!strcmp(tm_assets[k].path, url)) return &tm_assets[k];
    return NULL;
}

static void add_common_headers(struct MHD_Response *r) {
    MHD_add_response_header(r, "Content-Security-Policy", CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "Cross-Origin-Resource-Policy", "same-origin");
}

static enum MHD_Result send_buf(struct MHD_Connection *conn, unsigned code, const char *mime, void *buf,
                                size_t n, enum MHD_ResponseMemoryMode mm, const char *etag) {
    struct MHD_Response *r = MHD_create_response_from_buffer(n, buf, mm);
    if (!r) {
        if (mm == MHD_RESPMEM_MUST_FREE) free(buf);
        return MHD_NO;
    }
    add_common_headers(r);
    if (mime) MHD_add_response_header(r, "Content-Type", mime);
    if (etag) MHD_add_response_header(r, "ETag", etag);
    if (code == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(r, "Allow", "GET, HEAD");
    enum MHD_Result ret = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_text(struct MHD_Connection *conn, unsigned code, const char *msg) {
    return send_buf(conn, code, "text/plain; charset=utf-8", (void *)msg, strlen(msg), MHD_RESPMEM_PERSISTENT, NULL);
}

static enum MHD_Result send_json(struct MHD_Connection *conn, unsigned code, json_t *d) {
    char *s = json_dumps(d, JSON_COMPACT);
    json_decref(d);
    if (!s) return send_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    return send_buf(conn, code, "application/json", s, strlen(s), MHD_RESPMEM_MUST_FREE, NULL);
}

static int host_ok(const serve_ctx *c, const char *host) {
    if (!host) return 0;
    for (int k = 0; k < c->n_hosts; k++)
        if (!strcasecmp(host, c->hosts[k])) return 1;
    return 0;
}

static int origin_ok(const serve_ctx *c, const char *origin) {
    if (!origin) return 1;  /* same-origin GETs and non-browser clients send none */
    if (strncasecmp(origin, "http://", 7)) return 0;
    return host_ok(c, origin + 7);
}

static const char *query_arg(void *ud, const char *key) {
    return MHD_lookup_connection_value((struct MHD_Connection *)ud, MHD_GET_ARGUMENT_KIND, key);
}

/* The one check of an /api/ request's query, for every endpoint, before it runs: each parameter
** at most once (a plain lookup would silently take the first) and no NUL byte in a name or value
** (%00: the lookup would see only its start). Messages name the parameter:
** "tensor: given 2 times; give each parameter once", "name: the value holds a NUL byte (%00)". */
typedef struct query_scan {
    char key[32][64];
    int  count[32], nul[32], n;
    int  key_nul;  /* a NUL inside a parameter's name */
} query_scan;

static enum MHD_Result query_scan_one(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                      const char *value, size_t value_size) {
    (void)kind;
    query_scan *q = cls;
    if (!key || strlen(key) != key_size) { q->key_nul = 1; return MHD_YES; }
    int k = 0;
    while (k < q->n && strcmp(q->key[k], key)) k++;
    if (k == q->n) {
        if (q->n == (int)(sizeof q->key / sizeof q->key[0])) return MHD_YES; /* more names than any endpoint reads */
        snprintf(q->key[q->n++], sizeof q->key[0], "%s", key);
    }
    q->count[k]++;
    if (value && strlen(value) != value_size) q->nul[k] = 1;
    return MHD_YES;
}

/* NULL when the query is acceptable, else the 400 document. */
static json_t *query_problem(struct MHD_Connection *conn) {
    query_scan q;
    memset(&q, 0, sizeof q);
    MHD_get_connection_values_n(conn, MHD_GET_ARGUMENT_KIND, query_scan_one, &q);
    char msg[200] = "";
    if (q.key_nul) snprintf(msg, sizeof msg, "a parameter's name holds a NUL byte (%%00)");
    for (int k = 0; k < q.n && !msg[0]; k++) {
        if (q.count[k] > 1) snprintf(msg, sizeof msg, "%.60s: given %d times; give each parameter once", q.key[k], q.count[k]);
        else if (q.nul[k]) snprintf(msg, sizeof msg, "%.60s: the value holds a NUL byte (%%00)", q.key[k]);
    }
    if (!msg[0]) return NULL;
    json_t *d = cli_json_doc("error");
    json_object_set_new(d, "status", json_integer(400));
    json_t *m = json_string(msg);  /* a name that is not UTF-8: its bytes as '?' */
    if (!m) {
        for (char *p = msg; *p; p++) if ((unsigned char)*p >= 0x80) *p = '?';
        m = json_string(msg);
    }
    json_object_set_new(d, "error", m);
    return d;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version; (void)upload_data; (void)con_cls;
    serve_ctx *c = cls;
    if (*upload_data_size) return send_text(conn, MHD_HTTP_CONTENT_TOO_LARGE, "request bodies are not accepted\n");
    if (!host_ok(c, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST)))
        return send_text(conn, MHD_HTTP_FORBIDDEN, "forbidden: unexpected Host header\n");
    if (!origin_ok(c, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin")))
        return send_text(conn, MHD_HTTP_FORBIDDEN, "forbidden: cross-origin request\n");
    if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
        return send_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "read-only: only GET and HEAD\n");
    if (strlen(url) > SERVE_MAX_URL) return send_text(conn, MHD_HTTP_URI_TOO_LONG, "URL too long\n");
    if (!strncmp(url, "/api/", 5)) {
        int status = 200;
        json_t *d = query_problem(conn);
        if (d) return send_json(conn, 400, d);
        d = serve_api(c, url, query_arg, conn, &status);
        return send_json(conn, (unsigned)status, d);
    }
    const tm_asset *a = serve_asset(url);
    if (!a) return send_text(conn, MHD_HTTP_NOT_FOUND, "not found\n");
    const char *inm = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "If-None-Match");
    if (inm && !strcmp(inm, a->etag)) return send_buf(conn, MHD_HTTP_NOT_MODIFIED, NULL, (void *)"", 0, MHD_RESPMEM_PERSISTENT, a->etag);
    return send_buf(conn, MHD_HTTP_OK, a->mime, (void *)a->data, a->n_bytes, MHD_RESPMEM_PERSISTENT, a->etag);
}

static int is_loopback(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return 0;
}

static void add_host(serve_ctx *c, const char *name, int v6) {
    if (c->n_hosts >= (int)(sizeof c->hosts / sizeof c->hosts[0])) return;
    snprintf(c->hosts[c->n_hosts++], sizeof c->hosts[0], v6 ? "[%s]:%d" : "%s:%d", name, c->port);
}

int serve_run(serve_ctx *c, const char *host, int port) {
    int src = api_calib_check_samples(c); /* refuse unreadable --samples now, not per request */
    if (src) return src;
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int gr = getaddrinfo(host, "0", &hints, &ai);
    if (gr || !ai) {
        fprintf(stderr, "tensormorph serve: cannot resolve --host '%s': %s\n", host, gai_strerror(gr));
        return EXIT_USAGE;
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    int v6 = ss.ss_family == AF_INET6;
    if (v6) ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
    else ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
    int loop = is_loopback((struct sockaddr *)&ss);
    if (!loop)
        fprintf(stderr, "tensormorph serve: warning: listening on %s, which is not a loopback address: anyone who "
                        "can reach it can read this checkpoint\n", host);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION;
    if (v6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, c,
                                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
                                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60,
                                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                                            MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "tensormorph serve: cannot listen on %s port %d (in use, or not allowed)\n", host, port);
        return EXIT_IO;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    c->port = di ? di->port : port;
    char addr[INET6_ADDRSTRLEN] = "";
    if (v6) inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, addr, sizeof addr);
    else inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, addr, sizeof addr);
    /* Host values a browser sends for the address we bound; nothing else (DNS rebinding) */
    add_host(c, addr, v6);
    if (loop) {
        add_host(c, "localhost", 0);
        add_host(c, v6 ? "127.0.0.1" : "::1", !v6);
    } else if (strcmp(host, addr)) {
        add_host(c, host, strchr(host, ':') != NULL);
    }
    for (int k = 0; k < c->n_allow; k++) add_host(c, c->allow[k], strchr(c->allow[k], ':') != NULL);
    char url[320];
    snprintf(url, sizeof url, "http://%s%s%s:%d/", v6 ? "[" : "", addr, v6 ? "]" : "", c->port);
    if (g_cli.json) { /* one JSON line, then serve */
        json_t *d = json_object();
        json_object_set_new(d, "schema", json_string("tensormorph.serve/1"));
        json_object_set_new(d, "url", json_string(url));
        json_object_set_new(d, "port", json_integer(c->port));
        cli_json_print_line(d);
    } else {
        printf("%s\n", url);
        fflush(stdout);
    }
    if (!g_cli.quiet) fprintf(stderr, "tensormorph serve: serving %s%s%s; Ctrl-C stops\n", c->path, c->ref ? " with reference " : "", c->ref ? c->ref_path : "");
    while (!g_cli_interrupted) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(d);
    return 0;
}
