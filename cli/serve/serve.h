/* serve.h: `tensormorph serve`: the HTTP server (libmicrohttpd), the JSON API over the library,
** and the assets of web/ compiled in by tools/embed.c. Only cli/serve/ knows HTTP. */
#ifndef TM_SERVE_H
#define TM_SERVE_H

#include "../cli.h"

#include <pthread.h>
#include <regex.h>

/* One embedded file of web/ (generated: build/gen/tm_assets.c). */
typedef struct tm_asset {
    const char          *path;     /* "/index.html"                                  */
    const char          *mime;     /* "text/html; charset=utf-8"                     */
    const unsigned char *data;
    size_t               n_bytes;
    const char          *etag;     /* quoted strong validator: "\"<fnv1a-64 hex>\""  */
} tm_asset;
extern const tm_asset tm_assets[];
extern const size_t   tm_n_assets;

/* The JSON builders the commands print with --json: one serializer for CLI and API. */
/* inspect_json: NULL when out of memory */
json_t *inspect_json(const tm_file *f, const char *path, const regex_t *re, int with_tensors);
json_t *scalar_json(const tm_file *f, const tm_tensor *t, int nc, const int64_t *coords, int64_t flat,
                    const tm_qelement *qe, double value, int have_ref, double ref_value);
tm_status scalar_lookup(const tm_file *f, int64_t ti, int64_t flat, const tm_file *ref, const tm_tensor_pair *rp,
                        tm_qelement *qe, double *value, double *ref_value, tm_err *err);
json_t *qdiff_json(const tm_qdiff_result *r, const tm_file *qf, const char *ref_path, const char *q_path);
void    qdiff_apply_manifest(const char *quant_path, tm_qdiff_result *r);

#define SERVE_MAX_TILE_SIDE 512          /* pixels a side per /api/v1/tile request          */
#define SERVE_MAX_URL       2048         /* bytes of a request URL                          */
#define SERVE_PYRAMID_BYTES (64u << 20)  /* most bytes of one tensor's summary pyramid       */

/* A tensor's tiles held in the cache. */
typedef struct serve_tiles {
    int64_t        tensor;
    tm_tile_source src;
    int            split;
    tm_tiles      *t;
    uint64_t       bytes;
    uint64_t       last_used;  /* cache clock                                           */
    int            refs;       /* requests using it now: never evicted while > 0        */
} serve_tiles;

typedef struct serve_ctx {
    tm_file        *f;
    const char     *path;
    tm_file        *ref;        /* NULL without --ref                                   */
    const char     *ref_path;
    const cli_args *calib_args; /* serve's options: --samples for /api/v1/calibrate      */
    const cli_args *release_args; /* serve's options: --manifest --evidence --policy ... for
                                     /api/v1/release (api_release.c)                    */
    json_t         *sensitivity;/* --sensitivity FILE (tensormorph.sensitivity/1), or NULL:
                                   /api/v1/arch's "sensitivity" field                      */
    uint64_t        cache_bytes;/* bound on all pyramids together                        */
    int             port;
    char            hosts[20][300]; /* accepted Host header values ("127.0.0.1:8080")   */
    int             n_hosts;
    const char     *allow[16];  /* --allow-host names (without port)                    */
    int             n_allow;
    pthread_mutex_t mu;         /* guards everything below                              */
    serve_tiles    *cache;
    int             n_cache, cap_cache;
    uint64_t        clock, cached_bytes;
    tm_qdiff_result *qdiff;     /* computed on the first /api/v1/qdiff                  */
} serve_ctx;

/* The API: fills *status (HTTP) and returns the JSON document (caller decrefs). query(k) returns
** the request's query argument k or NULL. */
typedef const char *(*serve_query_fn)(void *ud, const char *key);
json_t *serve_api(serve_ctx *c, const char *url, serve_query_fn query, void *ud, int *status);
json_t *api_calibrate(serve_ctx *c, serve_query_fn query, void *ud, int *status); /* api_calib.c */
/* api_calib_check_samples: read every serve --samples once at start; 0, or the exit code of the
** first that cannot be read, with its message on stderr (api_calib.c). */
int     api_calib_check_samples(const serve_ctx *c);
json_t *api_release(serve_ctx *c, int *status); /* api_release.c */
/* api_graph: the ONNX dataflow graph for the Architecture diagram (api_graph.c); NULL with *status
** 500 when the graph cannot be walked. */
json_t *api_graph(serve_ctx *c, int *status);
void    serve_ctx_free_cache(serve_ctx *c);

/* serve_run: listen on host:port (port 0: a free one), print the URL on stdout, serve until
** SIGINT/SIGTERM. Returns an exit code. */
int serve_run(serve_ctx *c, const char *host, int port);

/* Asset lookup by request path ("/" is "/index.html"); NULL when none. */
const tm_asset *serve_asset(const char *url);

/* base64 (RFC 4648) of n bytes; malloc'd NUL-terminated, NULL on OOM. */
char *serve_base64(const void *data, size_t n);

#endif
