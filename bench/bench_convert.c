/* bench_convert.c: throughput and peak memory of `tensormorph convert DIR -o OUT.gguf` on a
** synthetic Hugging Face LLaMA checkpoint (issue 13's targets: >= 1 GB/s of source on one
** thread, peak RSS <= 256 MiB + the largest tensor).
**
**   bench_convert [--layers L] [--dim D] [--vocab V] [--dtype f32|bf16] [--reps N] [--keep]
**                 TENSORMORPH_BIN SCRATCH_DIR
**
** 1. writes SCRATCH_DIR/model/ (model.safetensors through the library's writer, deterministic
**    values; LLaMA names, GQA with 4 KV heads of 128, ffn 2.6875 x dim; config.json) and
**    SCRATCH_DIR/vocab.gguf (a vocab-only GGUF of V tokens for --vocab-from). Defaults: 4 layers,
**    dim 2048, vocab 32000, F32: about 1.0 GB of source. `--layers 1 --dim 256 --vocab 512` is a
**    smoke run of a few MB;
** 2. runs the binary (convert --no-checksums --force -q) N times after one untimed run: best wall
**    time, and the child's peak resident set (wait4's ru_maxrss, counting touched source pages);
** 3. prints one JSON line on stdout and a line on stderr: GB/s of SOURCE bytes (1e9), peak RSS,
**    the RSS bound 256 MiB + the largest tensor, and whether each target is met.
** A benchmark, never a test: exit 0 whether or not the targets are met (2 on a setup failure).
** Do not run the default size on a shared machine. */
#include <tensormorph.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_floor.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float next_val(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 - 0.5) * 0.06f;
}

typedef struct bt { char name[96]; int64_t rows, cols; } bt;

static int write_model(const char *dir, int layers, int64_t dim, int64_t vocab, tm_dtype dt, uint64_t *src_bytes,
                       uint64_t *largest) {
    const int64_t kv = 4 * 128 < dim ? 4 * 128 : dim / 2, ffn = dim * 43 / 16;
    int n = 2 + 9 * layers;
    bt *t = calloc((size_t)n, sizeof *t);
    tm_st_entry *e = calloc((size_t)n, sizeof *e);
    if (!t || !e) return -1;
    int k = 0;
    t[k++] = (bt){"model.embed_tokens.weight", vocab, dim};
    static const struct { const char *n; int kind; } per[] = {
        {"input_layernorm", 0}, {"self_attn.q_proj", 1}, {"self_attn.k_proj", 2}, {"self_attn.v_proj", 2},
        {"self_attn.o_proj", 1}, {"post_attention_layernorm", 0}, {"mlp.gate_proj", 3}, {"mlp.up_proj", 3},
        {"mlp.down_proj", 4}};
    for (int l = 0; l < layers; l++)
        for (int j = 0; j < 9; j++) {
            bt *b = &t[k++];
            snprintf(b->name, sizeof b->name, "model.layers.%d.%s.weight", l, per[j].n);
            int64_t r[] = {1, dim, kv, ffn, dim}, c[] = {dim, dim, dim, dim, ffn};
            b->rows = r[per[j].kind];
            b->cols = c[per[j].kind];
        }
    t[k++] = (bt){"model.norm.weight", 1, dim};
    *src_bytes = *largest = 0;
    size_t es = dt == TM_F32 ? 4 : 2;
    for (int i = 0; i < n; i++) {
        e[i].name = t[i].name;
        e[i].dtype = dt;
        e[i].ndim = t[i].rows == 1 ? 1 : 2;
        e[i].shape[0] = t[i].rows == 1 ? t[i].cols : t[i].rows;
        e[i].shape[1] = t[i].cols;
        uint64_t nb = (uint64_t)(t[i].rows * t[i].cols) * es;
        *src_bytes += nb;
        if (nb > *largest) *largest = nb;
    }
    char path[8192];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    tm_st_writer *w;
    tm_err err;
    if (tm_st_writer_open(path, e, n, NULL, &w, &err)) { fprintf(stderr, "bench_convert: %s\n", err.msg); return -1; }
    const int64_t piece = 1 << 20;
    float *f = malloc((size_t)piece * 4);
    uint16_t *h = malloc((size_t)piece * 2);
    for (int i = 0; i < n && f && h; i++) {
        int64_t ne = t[i].rows * t[i].cols;
        for (int64_t o = 0; o < ne; o += piece) {
            int64_t m = ne - o < piece ? ne - o : piece;
            for (int64_t q = 0; q < m; q++) f[q] = t[i].rows == 1 ? 1.0f + next_val() : next_val();
            if (es == 2)
                for (int64_t q = 0; q < m; q++) h[q] = tm_f32_to_bf16(f[q]);
            if (tm_st_writer_write(w, i, (uint64_t)o * es, es == 4 ? (void *)f : (void *)h, (size_t)m * es, &err)) {
                fprintf(stderr, "bench_convert: %s\n", err.msg);
                return -1;
            }
        }
    }
    int rc = tm_st_writer_finish(w, &err) ? -1 : 0;
    tm_st_writer_free(w);
    free(f); free(h); free(t); free(e);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *fp = fopen(path, "w");
    if (!fp) return -1;
    fprintf(fp, "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": %lld, "
                "\"intermediate_size\": %lld, \"num_hidden_layers\": %d, \"num_attention_heads\": %lld, "
                "\"num_key_value_heads\": %lld, \"vocab_size\": %lld, \"max_position_embeddings\": 4096, "
                "\"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"tie_word_embeddings\": true}\n",
            (long long)dim, (long long)ffn, layers, (long long)(dim / 128), (long long)(kv / 128), (long long)vocab);
    return fclose(fp) ? -1 : rc;
}

/* A vocab-only GGUF: tokenizer.ggml.model "llama" and V tokens "t<i>". */
static int write_vocab(const char *path, int64_t vocab) {
    tm_gguf_kvlist *kv = tm_gguf_kvlist_new();
    size_t cap = 12 + (size_t)vocab * 24, n = 0;
    uint8_t *b = malloc(cap);
    if (!kv || !b) return -1;
    uint32_t ty = TM_GGUF_STRING;
    uint64_t cnt = (uint64_t)vocab;
    memcpy(b, &ty, 4); memcpy(b + 4, &cnt, 8); n = 12;
    for (int64_t i = 0; i < vocab; i++) {
        char s[16];
        uint64_t l = (uint64_t)snprintf(s, sizeof s, "t%lld", (long long)i);
        memcpy(b + n, &l, 8); memcpy(b + n + 8, s, l); n += 8 + l;
    }
    tm_err e;
    int rc = tm_gguf_kvlist_set_str(kv, "general.architecture", "llama", &e) ||
             tm_gguf_kvlist_set_str(kv, "tokenizer.ggml.model", "llama", &e) ||
             tm_gguf_kvlist_set_raw(kv, "tokenizer.ggml.tokens", TM_GGUF_ARRAY, b, n, &e);
    tm_gguf_writer *w = NULL;
    if (!rc) rc = tm_gguf_writer_open(path, kv, NULL, 0, &w, &e) || tm_gguf_writer_finish(w, &e);
    if (rc) fprintf(stderr, "bench_convert: %s\n", e.msg);
    tm_gguf_writer_free(w);
    tm_gguf_kvlist_free(kv);
    free(b);
    return rc ? -1 : 0;
}

static double run_one(const char *bin, const char *in, const char *out, const char *vocab, long *maxrss_kib) {
    double t0 = tmb_now_s();
    pid_t pid = fork();
    if (pid == 0) {
        execl(bin, bin, "convert", in, "-o", out, "--vocab-from", vocab, "--no-checksums", "--force", "-q", (char *)NULL);
        _exit(127);
    }
    if (pid < 0) return -1;
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) return -1;
    *maxrss_kib = ru.ru_maxrss;
    return tmb_now_s() - t0;
}

int main(int argc, char **argv) {
    int layers = 4, reps = 3, keep = 0;
    int64_t dim = 2048, vocab = 32000;
    tm_dtype dt = TM_F32;
    int a = 1;
    for (; a < argc && argv[a][0] == '-' && argv[a][1] == '-'; a++) {
        if (!strcmp(argv[a], "--layers") && a + 1 < argc) layers = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--dim") && a + 1 < argc) dim = atoll(argv[++a]);
        else if (!strcmp(argv[a], "--vocab") && a + 1 < argc) vocab = atoll(argv[++a]);
        else if (!strcmp(argv[a], "--reps") && a + 1 < argc) reps = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--dtype") && a + 1 < argc) dt = !strcmp(argv[++a], "bf16") ? TM_BF16 : TM_F32;
        else if (!strcmp(argv[a], "--keep")) keep = 1;
        else break;
    }
    if (argc - a != 2 || layers < 1 || dim < 256 || dim % 128 || vocab < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_convert [--layers L] [--dim D (multiple of 128)] [--vocab V] [--dtype f32|bf16] "
                        "[--reps N] [--keep] TENSORMORPH_BIN SCRATCH_DIR\n");
        return 2;
    }
    const char *bin = argv[a], *dir = argv[a + 1];
    char mdir[4096], vpath[4096], out[4096];
    snprintf(mdir, sizeof mdir, "%s/model", dir);
    snprintf(vpath, sizeof vpath, "%s/vocab.gguf", dir);
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    mkdir(dir, 0755);
    mkdir(mdir, 0755);
    uint64_t src = 0, largest = 0;
    if (write_model(mdir, layers, dim, vocab, dt, &src, &largest) || write_vocab(vpath, vocab)) return 2;
    long rss = 0, best_rss = 0;
    if (run_one(bin, mdir, out, vpath, &rss) < 0) { fprintf(stderr, "bench_convert: the convert run failed\n"); return 2; }
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = run_one(bin, mdir, out, vpath, &rss);
        if (t < 0) { fprintf(stderr, "bench_convert: the convert run failed\n"); return 2; }
        if (t < best) best = t;
        if (rss > best_rss) best_rss = rss;
    }
    double gbs = (double)src / best / 1e9;
    /* the I/O floor (bench_floor.h): read the source once, write and fsync the output once */
    char mfile[8192];
    snprintf(mfile, sizeof mfile, "%s/model.safetensors", mdir);
    uint64_t msize = 0, osize = tmb_path_bytes(out);
    double rf = tmb_read_floor(mfile, 1 << 20, 3, &msize), wf = tmb_write_floor(dir, osize, 3);
    double floor_gbs = rf > 0 && wf > 0 ? (double)src / (rf + wf) / 1e9 : 0;
    double rss_mib = (double)best_rss / 1024.0, bound_mib = 256.0 + (double)largest / 1048576.0;
    printf("{\"bench\": \"convert\", \"dtype\": \"%s\", \"layers\": %d, \"dim\": %lld, \"vocab\": %lld, \"source_bytes\": %llu, "
           "\"seconds\": %.4f, \"gb_per_s\": %.3f, \"peak_rss_mib\": %.1f, \"rss_bound_mib\": %.1f, "
           "\"io_floor_gb_per_s\": %.3f, \"meets_speed\": %s, \"meets_rss\": %s}\n",
           dt == TM_F32 ? "F32" : "BF16", layers, (long long)dim, (long long)vocab, (unsigned long long)src, best, gbs, rss_mib,
           bound_mib, floor_gbs, gbs >= 1.0 ? "true" : "false", rss_mib <= bound_mib ? "true" : "false");
    fprintf(stderr, "convert %s %.2f MB: %.3f s = %.2f GB/s (target 1; I/O floor %.2f), peak RSS %.1f MiB (bound %.1f)\n",
            dt == TM_F32 ? "F32" : "BF16", (double)src / 1e6, best, gbs, floor_gbs, rss_mib, bound_mib);
    if (!keep) {
        char cmd[20000];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s' '%s.manifest.json'", mdir, vpath, out, out);
        if (system(cmd)) fprintf(stderr, "bench_convert: could not remove the scratch files\n");
    }
    return 0;
}
