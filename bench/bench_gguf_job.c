/* bench_gguf_job.c: end-to-end throughput and peak memory of `tensormorph quantize IN.gguf -o
** OUT.gguf --type T` on a synthetic LLaMA-shaped F32 GGUF (and its F16 twin).
**
**   bench_gguf_job [--layers L] [--reps N] [--types T1,T2,...] [--keep] [--no-gen] [--shape default|7b]
**                  [--imatrix] [--reference | --reference-bin LLAMA_QUANTIZE] [--no-warmup]
**                  TENSORMORPH_BIN SCRATCH_DIR
**
** 1. writes SCRATCH_DIR/model-f32.gguf and model-f16.gguf through the library's GGUF writer
**    (deterministic Gaussian-like values; llama names and hparams: token_embd 32000 x 2048, per
**    layer attn_q/k/v/output, ffn_gate/up/down with 2048 / 512 / 5632 rows, norms, no
**    output.weight: tied); with the default 5 layers the F32 file is about 1.1 GB. --shape 7b:
**    LLaMA-7B's shapes instead (hidden 4096, ffn 11008, vocab 32000, 32 heads, no GQA, its own
**    output.weight 32000 x 4096): 1.05 GB of token_embd + output plus 0.81 GB a layer in F32;
** 2. measures the page-cache read rate of each file (read(2) in 1 MiB pieces, best of 5, before
**    and again after the runs: the better of the two, so a busy moment cannot lower the target);
** 3. spawns the binary for each type (default Q8_0,Q4_0,Q6_K,Q4_K_M) without --threads (the default, tm_usable_cpus(); "2d" in the table) and with --threads 1 and 2,
**    --no-checksums, best wall time of N runs (after one untimed run), and the child's peak
**    resident set from wait4's ru_maxrss (which counts the mapped source pages it touched).
**    A type written T:pure runs with --pure (every quantizable tensor in T; without it the
**    file type's llama-quantize rules apply, e.g. Q4_0 puts output/tied token_embd in Q6_K);
** 4. measures the output-write floor (bench_floor.h): writing and fsyncing the job's output
**    bytes alone in the same directory, the most a job that writes that output could reach;
** 5. checks issue 3's one-thread targets against the reference figures it quotes (llama.cpp's
**    llama-quantize, one thread, from F32: Q4_0 1.6 GB/s, Q8_0 0.73, Q6_K 0.13, Q4_K_M 0.06):
**    Q8_0 and Q4_0 at least min(8 x reference, 60% of the page-cache read rate), K-quants 2x.
** --imatrix: also writes SCRATCH_DIR/model.imatrix (legacy llama-imatrix format, one entry per
** blk.* weight, deterministic positive importances) and runs every type with --imatrix, F32
** source, one thread, once with the default kernels and once with --kernel ref (the scalar
** reference: ggml's own weighted algorithm, what llama-quantize runs), printing the ratio.
** --reference: side by side with llama.cpp's llama_model_quantize (llama.h, the function behind
** llama-quantize), loaded with dlopen at run time from $TM_GGML_LIB_DIR (default: node-llama-cpp's
** prebuilt llama.cpp in runner/node_modules) in a forked child: every type of --types from the F32
** source, one thread each (our --threads 1, its nthread 1), interleaved (ours, reference, ...),
** best of N after one untimed run each, peak RSS of each child, and whether the two output files
** are identical (else whether their data sections, every tensor's bytes, are). Without the
** library it says so and stops. Nothing of llama.cpp is linked into the library or the CLI.
** --reference-bin PATH (or --reference with $TM_LLAMA_QUANTIZE set): the same against a
** llama-quantize binary, spawned as `PATH [--imatrix IMX] IN OUT T 1` (its log in
** SCRATCH_DIR/out-ref.log while it runs); with --imatrix both sides get the same imatrix path (it
** is stored in the output). A mismatch names the first differing tensor and byte. --no-warmup:
** no untimed run (the read-rate measurement has put the source in the page cache).
** Output: JSON Lines on stdout, a table on stderr. A benchmark, never a test: exit status 0
** whether or not figures meet any target. GB = 1e9 bytes of the SOURCE file per second. */
#include <tensormorph.h>

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_floor.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float next_val(void) {
    double u = 0;
    for (int k = 0; k < 4; k++) {
        g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
        u += (double)(g_rng >> 11) / 9007199254740992.0;
    }
    return (float)((u - 2.0) * 0.03);
}

/* A model shape: hidden width, FFN width, vocabulary, attention heads (query / key-value) and
** whether the model has its own output.weight (else token_embd is tied, as llama-quantize sees it). */
typedef struct {
    const char *name;
    int64_t hidden, ffn, vocab;
    uint32_t heads, heads_kv;
    int output;
} model_shape;
static const model_shape g_shapes[] = {
    {"default", 2048, 5632, 32000, 16, 4, 0}, /* TinyLlama-like: 0.18 GB per layer in F32 */
    {"7b", 4096, 11008, 32000, 32, 32, 1},    /* LLaMA-7B: 0.81 GB per layer + 2 x 0.52 GB */
};

/* The largest tensor's bytes at `elem_size` bytes a value: token_embd (vocab x hidden) or ffn. */
static double largest_tensor_bytes(const model_shape *sh, int elem_size) {
    int64_t a = sh->vocab * sh->hidden, b = sh->ffn * sh->hidden;
    return (double)(a > b ? a : b) * elem_size;
}

/* Write the model of shape `sh` with element type `type` (F32 or F16). */
static int write_model(const char *path, int type, int layers, const model_shape *sh) {
    tm_gguf_kvlist *kv = tm_gguf_kvlist_new();
    if (!kv) return -1;
    tm_gguf_kvlist_set_str(kv, "general.architecture", "llama", NULL);
    tm_gguf_kvlist_set_str(kv, "general.name", "bench", NULL);
    tm_gguf_kvlist_set_u32(kv, "llama.block_count", (uint32_t)layers, NULL);
    tm_gguf_kvlist_set_u32(kv, "llama.embedding_length", (uint32_t)sh->hidden, NULL);
    tm_gguf_kvlist_set_u32(kv, "llama.attention.head_count", sh->heads, NULL);
    tm_gguf_kvlist_set_u32(kv, "llama.attention.head_count_kv", sh->heads_kv, NULL);
    /* hparams newer llama.cpp loaders require before llama_model_quantize runs */
    tm_gguf_kvlist_set_u32(kv, "llama.context_length", 4096, NULL);
    tm_gguf_kvlist_set_u32(kv, "llama.feed_forward_length", (uint32_t)sh->ffn, NULL);
    const float rms_eps = 1e-5f; /* GGUF value type 6: float32, little-endian on x86-64 */
    tm_gguf_kvlist_set_raw(kv, "llama.attention.layer_norm_rms_epsilon", 6, &rms_eps, sizeof rms_eps, NULL);
    tm_gguf_kvlist_set_u32(kv, "general.file_type", type == TM_GGML_F32 ? 0 : 1, NULL);
    const int64_t hd = sh->hidden, kvd = sh->hidden / sh->heads * sh->heads_kv;
    const struct { const char *n; int64_t rows, cols; } per_layer[] = {
        {"attn_norm", 1, hd}, {"attn_q", hd, hd}, {"attn_k", kvd, hd}, {"attn_v", kvd, hd},
        {"attn_output", hd, hd}, {"ffn_norm", 1, hd}, {"ffn_gate", sh->ffn, hd},
        {"ffn_up", sh->ffn, hd}, {"ffn_down", hd, sh->ffn}};
    const int nper = (int)(sizeof per_layer / sizeof per_layer[0]);
    int n = 2 + sh->output + layers * nper;
    tm_gguf_wtensor *t = calloc((size_t)n, sizeof *t);
    char (*names)[64] = calloc((size_t)n, sizeof *names);
    if (!t || !names) return -1;
    int k = 0;
    snprintf(names[k], 64, "token_embd.weight");
    t[k] = (tm_gguf_wtensor){names[k], type, 2, {hd, sh->vocab, 1, 1}};
    k++;
    snprintf(names[k], 64, "output_norm.weight");
    t[k] = (tm_gguf_wtensor){names[k], TM_GGML_F32, 1, {hd, 1, 1, 1}};
    k++;
    if (sh->output) {
        snprintf(names[k], 64, "output.weight");
        t[k] = (tm_gguf_wtensor){names[k], type, 2, {hd, sh->vocab, 1, 1}};
        k++;
    }
    for (int l = 0; l < layers; l++)
        for (int j = 0; j < nper; j++) {
            snprintf(names[k], 64, "blk.%d.%s.weight", l, per_layer[j].n);
            int is1d = per_layer[j].rows == 1;
            t[k] = (tm_gguf_wtensor){names[k], is1d ? TM_GGML_F32 : type, is1d ? 1 : 2,
                                     {per_layer[j].cols, per_layer[j].rows, 1, 1}};
            k++;
        }
    tm_gguf_writer *w;
    tm_err e;
    if (tm_gguf_writer_open(path, kv, t, n, &w, &e)) {
        fprintf(stderr, "bench_gguf_job: %s\n", e.msg);
        return -1;
    }
    const int64_t piece = 1 << 20;
    float *f = malloc((size_t)piece * sizeof *f);
    uint16_t *h = malloc((size_t)piece * sizeof *h);
    for (int i = 0; i < n && f && h; i++) {
        int64_t ne = t[i].ne[0] * t[i].ne[1];
        int es = t[i].type == TM_GGML_F32 ? 4 : 2;
        for (int64_t o = 0; o < ne; o += piece) {
            int64_t m = ne - o < piece ? ne - o : piece;
            for (int64_t q = 0; q < m; q++) f[q] = t[i].n_dims == 1 ? 1.0f + next_val() : next_val();
            if (es == 2)
                for (int64_t q = 0; q < m; q++) h[q] = tm_f32_to_f16(f[q]);
            if (tm_gguf_writer_write(w, i, (uint64_t)(o * es), es == 4 ? (void *)f : (void *)h, (size_t)(m * es), &e)) {
                fprintf(stderr, "bench_gguf_job: %s\n", e.msg);
                return -1;
            }
        }
    }
    int rc = tm_gguf_writer_finish(w, &e) ? -1 : 0;
    tm_gguf_writer_free(w);
    tm_gguf_kvlist_free(kv);
    free(f); free(h); free(t); free(names);
    return rc;
}

/* A legacy imatrix for the model of write_model: entries for the 2-D blk.* weights (what
** llama-imatrix collects by default; token_embd and output.weight have none). */
static int write_imatrix(const char *path, int layers, const model_shape *sh) {
    const int hd = (int)sh->hidden;
    const struct { const char *n; int cols; } w[] = {
        {"attn_q", hd}, {"attn_k", hd}, {"attn_v", hd}, {"attn_output", hd},
        {"ffn_gate", hd}, {"ffn_up", hd}, {"ffn_down", (int)sh->ffn}};
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int32_t n = layers * 7, v;
    fwrite(&n, 4, 1, f);
    for (int l = 0; l < layers; l++)
        for (int j = 0; j < 7; j++) {
            char name[64];
            int32_t len = (int32_t)snprintf(name, sizeof name, "blk.%d.%s.weight", l, w[j].n), ncall = 4, nval = w[j].cols;
            fwrite(&len, 4, 1, f);
            fwrite(name, 1, (size_t)len, f);
            fwrite(&ncall, 4, 1, f);
            fwrite(&nval, 4, 1, f);
            for (int c = 0; c < nval; c++) {
                float x = 4.0f * (0.05f + (float)((c * 2654435761u + (unsigned)l) % 1000) / 1000.0f);
                if (c % 97 == 0) x *= 50.0f; /* a few heavy input channels */
                fwrite(&x, 4, 1, f);
            }
        }
    v = 4;
    fwrite(&v, 4, 1, f);
    v = 5;
    fwrite(&v, 4, 1, f);
    fwrite("bench", 1, 5, f);
    return fclose(f) ? -1 : 0;
}

/* Page-cache read rate of the file in GB/s: read(2) in 1 MiB pieces, best of 5 (bench_floor.h). */
static double read_rate(const char *path, uint64_t *size) {
    double t = tmb_read_floor(path, 1 << 20, 5, size);
    return t > 0 ? (double)*size / t / 1e9 : NAN;
}

/* Wait for child `pid` (forked at now_s() == t0): wall seconds since t0, its peak RSS (KiB, wait4's
** ru_maxrss) and CPU seconds (user + system); -1 when it could not be started or did not exit 0. */
static double wait_child(pid_t pid, double t0, long *maxrss_kib, double *cpu_s) {
    if (pid < 0) return -1;
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) < 0) return -1;
    double dt = now_s() - t0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
    *maxrss_kib = ru.ru_maxrss;
    *cpu_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
             ru.ru_stime.tv_usec * 1e-6;
    return dt;
}

/* Run BIN quantize IN -o OUT --type T [--threads N] [--pure]; threads <= 0 passes no --threads
** (and clears TM_NUM_THREADS): the default thread count. Wall seconds, peak RSS (KiB), CPU
** seconds (user + system); -1 on failure. */
static double run_one(const char *bin, const char *in, const char *out, const char *type, int pure, int threads,
                      const char *imx, const char *kernel, long *maxrss_kib, double *cpu_s) {
    char th[16];
    snprintf(th, sizeof th, "%d", threads);
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        int dn = open("/dev/null", O_WRONLY);
        if (dn >= 0) { dup2(dn, 1); }
        /* --force: the previous run's output is tensormorph's own */
        const char *av[20];
        int k = 0;
        av[k++] = bin; av[k++] = "quantize"; av[k++] = in; av[k++] = "-o"; av[k++] = out; av[k++] = "--type";
        av[k++] = type;
        if (threads > 0) { av[k++] = "--threads"; av[k++] = th; }
        else unsetenv("TM_NUM_THREADS");
        av[k++] = "--no-checksums"; av[k++] = "-q"; av[k++] = "--force";
        if (pure) av[k++] = "--pure";
        if (imx) { av[k++] = "--imatrix"; av[k++] = imx; }
        if (kernel) { av[k++] = "--kernel"; av[k++] = kernel; }
        av[k] = NULL;
        execv(bin, (char *const *)av);
        _exit(127);
    }
    return wait_child(pid, t0, maxrss_kib, cpu_s);
}

#ifndef TM_DEFAULT_GGML_LIB_DIR
#define TM_DEFAULT_GGML_LIB_DIR "runner/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
#endif

/* llama.h's llama_model_quantize_params as that release documents it (the fields in order); the
** library fills it through llama_model_quantize_default_params (returned through a hidden
** pointer, so the padding only leaves room should a build have more fields). */
typedef struct {
    int32_t nthread;
    int ftype;                /* enum llama_ftype: tm_gguf_ftype_from_name's numbers */
    int output_tensor_type;   /* enum ggml_type */
    int token_embedding_type; /* enum ggml_type */
    bool allow_requantize, quantize_output_tensor, only_copy, pure, keep_split, dry_run;
    const void *imatrix, *kv_overrides, *tt_overrides;
    const int32_t *prune_layers;
    size_t max_buf_size;
    unsigned char pad[512];
} ref_quantize_params;

/* The directory's libllama*.so (node-llama-cpp names it libllama.v0.4.0.so) into path. */
static int find_libllama(const char *dir, char *path, size_t n) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    int found = -1;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "libllama", 8) && strstr(e->d_name, ".so") && !strstr(e->d_name, "common")) {
            snprintf(path, n, "%s/%s", dir, e->d_name);
            found = 0;
            break;
        }
    closedir(d);
    return found;
}

/* In a child: llama_model_quantize(in, out, {nthread 1, ftype}); wall seconds, peak RSS, CPU
** seconds as run_one; -1 on failure (the child's exit status: 0 ok, 3 no library, else its rc). */
static double run_ref(const char *lib, const char *in, const char *out, int ftype, long *maxrss_kib, double *cpu_s) {
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        int dn = open("/dev/null", O_WRONLY);
        if (dn >= 0) { dup2(dn, 1); dup2(dn, 2); } /* its progress log */
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!h) _exit(3);
        void (*backend_init)(void);
        ref_quantize_params (*defaults)(void);
        uint32_t (*quantize)(const char *, const char *, const ref_quantize_params *);
        *(void **)&backend_init = dlsym(h, "llama_backend_init");
        *(void **)&defaults = dlsym(h, "llama_model_quantize_default_params");
        *(void **)&quantize = dlsym(h, "llama_model_quantize");
        if (!backend_init || !defaults || !quantize) _exit(3);
        backend_init();
        ref_quantize_params p = defaults();
        p.nthread = 1;
        p.ftype = ftype;
        _exit(quantize(in, out, &p) ? 4 : 0);
    }
    return wait_child(pid, t0, maxrss_kib, cpu_s);
}

/* Run the llama-quantize binary `exe` as `exe [--imatrix IMX] IN OUT TYPE 1` (nthread 1), its
** stdout and stderr into `log`; wall seconds, peak RSS, CPU seconds as run_one; -1 on failure. */
static double run_ref_bin(const char *exe, const char *in, const char *out, const char *type, const char *imx,
                          const char *log, long *maxrss_kib, double *cpu_s) {
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); }
        const char *av[10];
        int k = 0;
        av[k++] = exe;
        if (imx) { av[k++] = "--imatrix"; av[k++] = imx; }
        av[k++] = in; av[k++] = out; av[k++] = type; av[k++] = "1";
        av[k] = NULL;
        execv(exe, (char *const *)av);
        _exit(127);
    }
    return wait_child(pid, t0, maxrss_kib, cpu_s);
}

/* Compare at most `len` bytes (UINT64_MAX: to the end) from a_off of file a with those from b_off of
** b: 1 equal, 0 not (*first: the offset from a_off / b_off of the first differing byte, or of the
** end of the shorter one), -1 unreadable. */
static int same_bytes(const char *a, uint64_t a_off, const char *b, uint64_t b_off, uint64_t len, uint64_t *first) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int r = -1;
    if (fa && fb && !fseeko(fa, (off_t)a_off, SEEK_SET) && !fseeko(fb, (off_t)b_off, SEEK_SET)) {
        static unsigned char ba[1 << 20], bb[1 << 20];
        uint64_t pos = 0;
        r = 1;
        while (pos < len) {
            size_t want = len - pos < sizeof ba ? (size_t)(len - pos) : sizeof ba;
            size_t na = fread(ba, 1, want, fa), nb = fread(bb, 1, want, fb), m = na < nb ? na : nb, j = 0;
            while (j < m && ba[j] == bb[j]) j++;
            if (j < m || na != nb) { r = 0; if (first) *first = pos + j; break; }
            if (na == 0) break;
            pos += na;
        }
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return r;
}

/* How the output `ours` compares with llama.cpp's `ref`, into buf: "file identical", "tensor data
** identical (header differs at byte N)" or "DIFFER: ..." naming the first tensor (file order of
** ours) whose type, size or bytes differ and the first differing byte inside its data. */
static const char *compare_outputs(const char *ours, const char *ref, char *buf, size_t n) {
    uint64_t first = 0;
    if (same_bytes(ours, 0, ref, 0, UINT64_MAX, &first) == 1) return snprintf(buf, n, "file identical"), buf;
    tm_open_params op = tm_open_params_default();
    op.no_recognize = 1; /* the physical GGUF tensors */
    tm_file *f[2] = {NULL, NULL};
    uint64_t d[2] = {0, 0};
    const char *p[2] = {ours, ref};
    for (int k = 0; k < 2; k++)
        if (tm_open(p[k], &op, &f[k], NULL) == TM_OK) tm_gguf_info(f[k], NULL, NULL, &d[k]);
    if (!d[0] || !d[1]) snprintf(buf, n, "DIFFER (unreadable; first differing file byte %llu)", (unsigned long long)first);
    else if (tm_file_n_tensors(f[0]) != tm_file_n_tensors(f[1]))
        snprintf(buf, n, "DIFFER: %lld tensors vs %lld", (long long)tm_file_n_tensors(f[0]),
                 (long long)tm_file_n_tensors(f[1]));
    else {
        snprintf(buf, n, "tensor data identical (header differs at byte %llu)", (unsigned long long)first);
        for (int64_t i = 0; i < tm_file_n_tensors(f[0]); i++) {
            const tm_tensor *a = tm_file_tensor(f[0], i);
            int64_t j = tm_file_find(f[1], a->phys_name);
            const tm_tensor *b = j >= 0 ? tm_file_tensor(f[1], j) : NULL;
            int ta = tm_gguf_tensor_type(f[0], i), tb = b ? tm_gguf_tensor_type(f[1], j) : -1;
            uint64_t at = 0;
            if (!b) snprintf(buf, n, "DIFFER: tensor %s missing from llama.cpp's file", a->phys_name);
            else if (ta != tb || a->n_bytes != b->n_bytes)
                snprintf(buf, n, "DIFFER: tensor %s type %d, %llu bytes vs type %d, %llu bytes", a->phys_name, ta,
                         (unsigned long long)a->n_bytes, tb, (unsigned long long)b->n_bytes);
            else if (same_bytes(ours, a->offset, ref, b->offset, a->n_bytes, &at) != 1)
                snprintf(buf, n, "DIFFER: tensor %s (type %d), first at byte %llu of its data (file offset %llu / %llu)",
                         a->phys_name, ta, (unsigned long long)at, (unsigned long long)(a->offset + at),
                         (unsigned long long)(b->offset + at));
            else continue;
            break;
        }
    }
    for (int k = 0; k < 2; k++) tm_close(f[k]);
    return buf;
}

/* Side by side with llama.cpp at one thread on the F32 source: through the llama-quantize binary
** `exe` when given (with the imatrix `imx` when not NULL), else llama_model_quantize from `lib`.
** Interleaved per type (ours, reference), best of `reps` after one untimed run each unless
** !warmup (the read-rate measurement has read the source into the page cache). */
static int reference_mode(const char *bin, const char *dir, const char *types, int layers, int reps, int no_gen,
                          int keep, const model_shape *sh, const char *exe, int use_imx, int warmup) {
    char lib[4096] = "";
    if (!exe) {
        const char *ldir = getenv("TM_GGML_LIB_DIR");
        if (!ldir || !*ldir) ldir = TM_DEFAULT_GGML_LIB_DIR;
        if (find_libllama(ldir, lib, sizeof lib)) {
            fprintf(stderr, "bench_gguf_job --reference: no libllama*.so in %s (set TM_GGML_LIB_DIR); nothing to compare\n", ldir);
            return 0;
        }
    } else if (access(exe, X_OK)) {
        fprintf(stderr, "bench_gguf_job --reference-bin: %s: %s; nothing to compare\n", exe, strerror(errno));
        return 0;
    }
    char src[4096], out[4096], ref_out[4096], imx[4096], log[4096];
    snprintf(src, sizeof src, "%s/model-f32.gguf", dir);
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    snprintf(ref_out, sizeof ref_out, "%s/out-ref.gguf", dir);
    snprintf(imx, sizeof imx, "%s/model.imatrix", dir);
    snprintf(log, sizeof log, "%s/out-ref.log", dir);
    if (!no_gen && write_model(src, TM_GGML_F32, layers, sh)) return 1;
    if (use_imx && write_imatrix(imx, layers, sh)) return 1;
    uint64_t size = 0;
    double rr = read_rate(src, &size);
    double la[3] = {0, 0, 0};
    if (getloadavg(la, 3) < 0) la[0] = -1;
    fprintf(stderr, "reference: %s%s, one thread; shape %s, %d layer(s), F32 %.2f GB (page-cache read %.2f GB/s)%s; "
                    "best of %d%s, interleaved; load average %.2f %.2f %.2f\n",
            exe ? exe : lib, exe ? "" : " (llama_model_quantize)", sh->name, layers, (double)size / 1e9, rr,
            use_imx ? ", --imatrix" : "", reps, warmup ? " after one untimed run" : "", la[0], la[1], la[2]);
    fprintf(stderr, "%-8s %9s %9s %7s %9s %9s %7s %8s %8s  %s\n", "type", "ours GB/s", "ref GB/s", "ratio", "ours cpu",
            "ref cpu", "r/cpu", "ours MB", "ref MB", "bytes");
    const char *p = types;
    while (*p) {
        char ty[32];
        size_t k = strcspn(p, ",");
        snprintf(ty, sizeof ty, "%.*s", (int)k, p);
        p += k + (p[k] == ',');
        const int ftype = tm_gguf_ftype_from_name(ty);
        if (ftype < 0) {
            fprintf(stderr, "bench_gguf_job: unknown type %s\n", ty);
            return 2;
        }
        double best[2] = {1e30, 1e30}, cpu[2] = {0, 0};
        long rss[2] = {0, 0};
        for (int r = !warmup; r <= reps; r++) /* run 0: untimed */
            for (int side = 0; side < 2; side++) {
                long rs = 0;
                double c = 0;
                double dt = !side ? run_one(bin, src, out, ty, 0, 1, use_imx ? imx : NULL, NULL, &rs, &c)
                            : exe ? run_ref_bin(exe, src, ref_out, ty, use_imx ? imx : NULL, log, &rs, &c)
                                  : run_ref(lib, src, ref_out, ftype, &rs, &c);
                if (dt < 0) {
                    fprintf(stderr, "bench_gguf_job: %s %s failed%s%s\n", side ? (exe ? exe : "llama_model_quantize") : bin,
                            ty, side && exe ? "; its log: " : "", side && exe ? log : "");
                    return 1;
                }
                if (r && dt < best[side]) { best[side] = dt; cpu[side] = c; }
                if (rs > rss[side]) rss[side] = rs;
            }
        char same[512];
        compare_outputs(out, ref_out, same, sizeof same);
        printf("{\"op\": \"reference\", \"type\": \"%s\", \"shape\": \"%s\", \"imatrix\": %s, \"threads\": 1, "
               "\"seconds\": %.3f, \"gb_per_s\": %.4f, "
               "\"cpu_s\": %.3f, \"peak_rss_mb\": %.1f, \"ref_seconds\": %.3f, \"ref_gb_per_s\": %.4f, \"ref_cpu_s\": %.3f, "
               "\"ref_peak_rss_mb\": %.1f, \"ratio\": %.3f, \"ratio_cpu\": %.3f, \"bytes\": \"%s\"}\n",
               ty, sh->name, use_imx ? "true" : "false", best[0], (double)size / best[0] / 1e9, cpu[0], rss[0] / 1024.0,
               best[1], (double)size / best[1] / 1e9, cpu[1], rss[1] / 1024.0, best[1] / best[0], cpu[1] / cpu[0], same);
        fflush(stdout);
        fprintf(stderr, "%-8s %9.4f %9.4f %6.2fx %9.2f %9.2f %6.2fx %8.1f %8.1f  %s\n", ty, (double)size / best[0] / 1e9,
                (double)size / best[1] / 1e9, best[1] / best[0], cpu[0], cpu[1], cpu[1] / cpu[0], rss[0] / 1024.0,
                rss[1] / 1024.0, same);
    }
    if (getloadavg(la, 3) < 0) la[0] = -1;
    fprintf(stderr, "load average after: %.2f %.2f %.2f\n", la[0], la[1], la[2]);
    if (!keep) unlink(src);
    unlink(out);
    unlink(ref_out);
    unlink(imx);
    unlink(log);
    char mp[4200];
    snprintf(mp, sizeof mp, "%s.manifest.json", out);
    unlink(mp);
    return 0;
}

int main(int argc, char **argv) {
    int layers = 5, reps = 1, keep = 0, no_gen = 0, use_imx = 0, use_ref = 0, warmup = 1;
    const char *types = "Q8_0,Q4_0,Q6_K,Q4_K_M", *exe = NULL;
    const model_shape *sh = &g_shapes[0];
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = (int)strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = (int)strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "--keep")) keep = 1; /* leave the sources (profiling input) */
        else if (!strcmp(argv[i], "--no-gen")) no_gen = 1; /* reuse the sources of a --keep run */
        else if (!strcmp(argv[i], "--imatrix")) use_imx = 1;
        else if (!strcmp(argv[i], "--reference")) use_ref = 1;
        else if (!strcmp(argv[i], "--reference-bin") && i + 1 < argc) { use_ref = 1; exe = argv[++i]; }
        else if (!strcmp(argv[i], "--no-warmup")) warmup = 0;
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            const char *name = argv[++i];
            sh = NULL;
            for (size_t k = 0; k < sizeof g_shapes / sizeof g_shapes[0]; k++)
                if (!strcmp(g_shapes[k].name, name)) sh = &g_shapes[k];
            if (!sh) break;
        } else break;
    }
    if (use_ref && !exe && getenv("TM_LLAMA_QUANTIZE") && *getenv("TM_LLAMA_QUANTIZE")) exe = getenv("TM_LLAMA_QUANTIZE");
    if (argc - i != 2 || layers < 1 || reps < 1 || !sh || (use_ref && use_imx && !exe)) {
        fprintf(stderr, "usage: bench_gguf_job [--layers L] [--reps N] [--types T[:pure],...] [--keep] [--no-gen]\n"
                        "                      [--shape default|7b] [--imatrix] [--reference | --reference-bin LLAMA_QUANTIZE]\n"
                        "                      [--no-warmup] TENSORMORPH_BIN SCRATCH_DIR\n"
                        "(--imatrix with --reference needs the binary: --reference-bin or $TM_LLAMA_QUANTIZE)\n");
        return 2;
    }
    const char *bin = argv[i], *dir = argv[i + 1];
    if (use_ref) return reference_mode(bin, dir, types, layers, reps, no_gen, keep, sh, exe, use_imx, warmup);
    char src[2][4096], out[4096];
    snprintf(src[0], sizeof src[0], "%s/model-f32.gguf", dir);
    snprintf(src[1], sizeof src[1], "%s/model-f16.gguf", dir);
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    char imx[4096];
    snprintf(imx, sizeof imx, "%s/model.imatrix", dir);
    if (use_imx) {
        if (!no_gen && write_model(src[0], TM_GGML_F32, layers, sh)) return 1;
        if (write_imatrix(imx, layers, sh)) return 1;
        uint64_t size = 0;
        double rr = read_rate(src[0], &size);
        fprintf(stderr, "F32 page-cache read %.2f GB/s, %.2f GB; --imatrix, one thread\n%-8s %10s %10s %10s %8s %12s\n", rr,
                (double)size / 1e9, "type", "GB/s", "ref GB/s", "seconds", "x ref", "peak RSS MB");
        const char *p = types;
        while (*p) {
            char ty[32];
            size_t k = strcspn(p, ",");
            snprintf(ty, sizeof ty, "%.*s", (int)k, p);
            p += k + (p[k] == ',');
            double t[2] = {1e30, 1e30};
            long rss = 0;
            for (int kk = 0; kk < 2; kk++)
                for (int r = 0; r < reps; r++) {
                    long rs = 0;
                    double cpu = 0, dt = run_one(bin, src[0], out, ty, 0, 1, imx, kk ? "ref" : NULL, &rs, &cpu);
                    if (dt < 0) {
                        fprintf(stderr, "bench_gguf_job: %s quantize %s --imatrix failed\n", bin, ty);
                        return 1;
                    }
                    if (dt < t[kk]) t[kk] = dt;
                    if (!kk && rs > rss) rss = rs;
                }
            printf("{\"source\": \"F32\", \"type\": \"%s\", \"imatrix\": true, \"threads\": 1, \"seconds\": %.3f, "
                   "\"gb_per_s\": %.4f, \"ref_kernel_seconds\": %.3f, \"ref_kernel_gb_per_s\": %.4f, \"peak_rss_mb\": %.1f}\n",
                   ty, t[0], (double)size / t[0] / 1e9, t[1], (double)size / t[1] / 1e9, rss / 1024.0);
            fprintf(stderr, "%-8s %10.4f %10.4f %10.2f %8.2f %12.1f\n", ty, (double)size / t[0] / 1e9,
                    (double)size / t[1] / 1e9, t[0], t[1] / t[0], rss / 1024.0);
        }
        if (!keep) unlink(src[0]);
        unlink(imx);
        unlink(out);
        char mp[4200];
        snprintf(mp, sizeof mp, "%s.manifest.json", out);
        unlink(mp);
        return 0;
    }
    if (!no_gen && (write_model(src[0], TM_GGML_F32, layers, sh) || write_model(src[1], TM_GGML_F16, layers, sh))) return 1;
    const double rss_target_mb[2] = {256.0 + largest_tensor_bytes(sh, 4) / 1048576.0,
                                     256.0 + largest_tensor_bytes(sh, 2) / 1048576.0};
    enum { MAX_ONE = 32 };
    struct { char type[32]; double gbps, floor_gbps, floor_s; } one[MAX_ONE]; /* F32, one thread, file types */
    uint64_t size_f32 = 0;
    int n_one = 0, rss_miss = 0;
    double rr_f32 = 0;
    fprintf(stderr, "%-5s %-11s %7s %8s %8s %8s %12s %10s %9s %9s\n", "src", "type", "threads", "GB/s", "seconds", "cpu s",
            "peak RSS MB", "out GB", "floorGB/s", "ioflrGB/s");
    for (int s = 0; s < 2; s++) {
        uint64_t size = 0;
        double rr = read_rate(src[s], &size); /* the better of this and the rate after the runs */
        printf("{\"source\": \"%s\", \"bytes\": %llu, \"page_cache_read_gb_per_s\": %.3f}\n",
               s ? "F16" : "F32", (unsigned long long)size, rr);
        fprintf(stderr, "%-5s page-cache read %.2f GB/s, %.2f GB\n", s ? "F16" : "F32", rr, (double)size / 1e9);
        const char *p = types;
        while (*p) {
            char spec[32], ty[32];
            size_t k = strcspn(p, ",");
            snprintf(spec, sizeof spec, "%.*s", (int)k, p);
            p += k + (p[k] == ',');
            snprintf(ty, sizeof ty, "%s", spec);
            char *colon = strchr(ty, ':');
            int pure = colon && !strcmp(colon, ":pure");
            if (colon) *colon = '\0';
            for (int th = 0; th <= 2; th++) { /* 0: the default thread count */
                long rss = 0;
                double cpu = 0, best_cpu = 0;
                if (run_one(bin, src[s], out, ty, pure, th, NULL, NULL, &rss, &cpu) < 0) {
                    fprintf(stderr, "bench_gguf_job: %s quantize %s failed\n", bin, spec);
                    return 1;
                }
                double best = 1e30;
                for (int r = 0; r < reps; r++) {
                    long rs = 0;
                    double dt = run_one(bin, src[s], out, ty, pure, th, NULL, NULL, &rs, &cpu);
                    if (dt < 0) return 1;
                    if (dt < best) { best = dt; best_cpu = cpu; }
                    if (rs > rss) rss = rs;
                }
                uint64_t out_bytes = tmb_path_bytes(out);
                double floor_s = tmb_write_floor(dir, out_bytes, reps + 1);
                double gbps = (double)size / best / 1e9, floor_gbps = floor_s > 0 ? (double)size / floor_s / 1e9 : NAN;
                /* one thread copies the source in and the output out itself: the I/O floor */
                double io_floor_gbps = floor_s > 0 ? (double)size / (floor_s + (double)size / (rr * 1e9)) / 1e9 : NAN;
                double rss_mb = (double)rss / 1024.0;
                int nth = th > 0 ? th : tm_usable_cpus(); /* what the default used */
                printf("{\"source\": \"%s\", \"type\": \"%s\", \"pure\": %s, \"threads\": %d, \"threads_default\": %s, \"seconds\": %.3f, "
                       "\"gb_per_s\": %.3f, \"cpu_s\": %.3f, \"peak_rss_mb\": %.1f, \"rss_target_mb\": %.1f, "
                       "\"out_bytes\": %llu, \"write_floor_s\": %.4f, \"write_floor_src_gb_per_s\": %.3f, "
                       "\"io_floor_src_gb_per_s\": %.3f}\n",
                       s ? "F16" : "F32", ty, pure ? "true" : "false", nth, th > 0 ? "false" : "true", best, gbps, best_cpu, rss_mb,
                       rss_target_mb[s], (unsigned long long)out_bytes, floor_s, floor_gbps, io_floor_gbps);
                char thl[16];
                snprintf(thl, sizeof thl, th > 0 ? "%d" : "%dd", nth); /* "2d": the default, 2 threads */
                fprintf(stderr, "%-5s %-11s %7s %8.3f %8.3f %8.2f %12.1f %10.3f %9.2f %9.2f\n", s ? "F16" : "F32", spec,
                        thl, gbps, best, best_cpu, rss_mb, out_bytes / 1e9, floor_gbps, io_floor_gbps);
                if (!(rss_mb < rss_target_mb[s])) rss_miss++;
                if (th == 1 && s == 0 && !pure && n_one < MAX_ONE) {
                    snprintf(one[n_one].type, sizeof one[n_one].type, "%s", ty);
                    one[n_one].gbps = gbps;
                    one[n_one].floor_gbps = floor_gbps;
                    one[n_one].floor_s = floor_s;
                    n_one++;
                }
            }
        }
        double rr2 = read_rate(src[s], &size);
        if (rr2 > rr) rr = rr2;
        if (s == 0) { rr_f32 = rr; size_f32 = size; }
    }
    /* issue 3's one-thread targets (from F32), against the reference figures it quotes */
    static const struct { const char *type; double ref, factor; int fast; } tg[] = {
        {"Q8_0", 0.73, 8, 1}, {"Q4_0", 1.6, 8, 1}, {"Q6_K", 0.13, 2, 0}, {"Q4_K_M", 0.06, 2, 0}};
    fprintf(stderr, "\ntargets (F32 source, one thread; page-cache read %.2f GB/s, the better of before/after):\n", rr_f32);
    for (int r = 0; r < n_one; r++)
        for (size_t t = 0; t < sizeof tg / sizeof tg[0]; t++) {
            if (strcmp(tg[t].type, one[r].type)) continue;
            double need = tg[t].factor * tg[t].ref;
            if (tg[t].fast && 0.6 * rr_f32 < need) need = 0.6 * rr_f32;
            int pass = one[r].gbps >= need;
            double io = one[r].floor_s > 0 ? (double)size_f32 / (one[r].floor_s + (double)size_f32 / (rr_f32 * 1e9)) / 1e9 : NAN;
            printf("{\"op\": \"target\", \"type\": \"%s\", \"threads\": 1, \"measured_gb_per_s\": %.3f, "
                   "\"threshold_gb_per_s\": %.3f, \"page_cache_read_gb_per_s\": %.3f, \"write_floor_src_gb_per_s\": %.3f, "
                   "\"io_floor_src_gb_per_s\": %.3f, \"threshold_above_io_floor\": %s, \"pass\": %s}\n",
                   one[r].type, one[r].gbps, need, rr_f32, one[r].floor_gbps, io, need > io ? "true" : "false",
                   pass ? "true" : "false");
            fprintf(stderr, "  %-7s >= %.3f GB/s (%s): %.3f GB/s, %.0f%% of it: %s; I/O floor %.2f GB/s%s\n",
                    one[r].type, need, tg[t].fast ? "min of 8x reference, 60% of page-cache read" : "2x reference",
                    one[r].gbps, 100 * one[r].gbps / need, pass ? "PASS" : "MISS", io,
                    need > io ? " (the target is above it)" : "");
        }
    fprintf(stderr, "  peak RSS < 256 MiB + largest tensor: %d run(s) MISS\n", rss_miss);
    if (!keep) {
        unlink(src[0]);
        unlink(src[1]);
    }
    unlink(out);
    char mp[4200];
    snprintf(mp, sizeof mp, "%s.manifest.json", out);
    unlink(mp);
    return 0;
}
