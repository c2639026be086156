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
** 2. runs the binary (convert --no-checksums --force -q) N times after one untimed run, each into
**    a fresh output (the previous one removed first, untimed): best wall time, and the child's
**    peak resident set (wait4's ru_maxrss, counting touched source pages);
** 3. does the same with the output on tmpfs (/dev/shm, when it has room for it: the writer's
**    O_DIRECT is refused there and it writes through the page cache; fsync is free);
** 4. measures the I/O floors in the same run: the source read once (read(2), and a copy out of
**    an mmap as convert reads it), the output written once on each file system (the disk: 8 MiB
**    O_DIRECT pwrites + fsync, as convert's sequential mode, and buffered 1 MiB pwrites + fsync;
**    tmpfs: buffered). Convert overlaps its writes (one I/O thread) with reading and converting
**    (the caller's thread), so its ceiling on a file system is source / max(read, write);
** 5. prints one JSON line on stdout and lines on stderr: GB/s of SOURCE bytes (1e9) on each file
**    system against its ceiling, peak RSS, the RSS bound 256 MiB + the largest tensor, and
**    whether each target is met (the speed target on the disk).
** A benchmark, never a test: exit 0 whether or not the targets are met (2 on a setup failure).
** Do not run the default size on a shared machine. */
#define _GNU_SOURCE 1 /* O_DIRECT (bench_floor.h) */
#include <tensormorph.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
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

/* One convert into `out`, which is removed first (untimed): each run creates its output, as a
** first convert does (replacing a file also frees the old one's blocks or pages in the final
** rename: 60 ms for 224 MB on tmpfs). */
static double run_one(const char *bin, const char *in, const char *out, const char *vocab, long *maxrss_kib) {
    char man[8192];
    snprintf(man, sizeof man, "%s.manifest.json", out);
    unlink(out);
    unlink(man);
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

/* Best of `reps` copies of the whole file out of a fresh read-only mmap into one 1 MiB buffer
** (convert reads its sources so), the mapping dropped after each; negative on failure. */
static double read_floor_mmap(const char *path, int reps) {
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0) { if (fd >= 0) close(fd); return -1; }
    size_t n = (size_t)st.st_size, piece = 1 << 20;
    char *buf = malloc(piece);
    double best = -1;
    for (int r = 0; r < reps && buf; r++) {
        double t0 = tmb_now_s();
        const char *m = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) break;
        for (size_t o = 0; o < n; o += piece) memcpy(buf, m + o, n - o < piece ? n - o : piece);
        munmap((void *)m, n);
        double t = tmb_now_s() - t0;
        if (best < 0 || t < best) best = t;
    }
    free(buf);
    close(fd);
    return best;
}

/* The timed convert runs: one untimed, then `reps`; best wall time, largest peak RSS (KiB). */
static double best_run(const char *bin, const char *in, const char *out, const char *vocab, int reps, long *rss_kib) {
    long rss = 0;
    if (run_one(bin, in, out, vocab, &rss) < 0) return -1;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = run_one(bin, in, out, vocab, &rss);
        if (t < 0) return -1;
        if (t < best) best = t;
        if (rss > *rss_kib) *rss_kib = rss;
    }
    return best;
}

static double gbs_of(uint64_t bytes, double s) { return s > 0 ? (double)bytes / s / 1e9 : 0; }

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
    long best_rss = 0;
    double best = best_run(bin, mdir, out, vpath, reps, &best_rss);
    if (best < 0) { fprintf(stderr, "bench_convert: the convert run failed\n"); return 2; }
    double gbs = (double)src / best / 1e9;
    char mfile[8192];
    snprintf(mfile, sizeof mfile, "%s/model.safetensors", mdir);
    uint64_t msize = 0, osize = tmb_path_bytes(out);
    /* the same convert with the output on tmpfs, when /dev/shm has room for two outputs */
    char shm[64] = "", shm_out[128] = "";
    struct statvfs vs;
    double shm_best = -1, shm_wf = -1;
    if (statvfs("/dev/shm", &vs) == 0 && (uint64_t)vs.f_bavail * vs.f_frsize > 2 * osize + (64u << 20)) {
        snprintf(shm, sizeof shm, "/dev/shm/tm-bench-convert-XXXXXX");
        if (!mkdtemp(shm)) shm[0] = '\0';
    }
    if (shm[0]) {
        snprintf(shm_out, sizeof shm_out, "%s/out.gguf", shm);
        long r2 = 0;
        shm_best = best_run(bin, mdir, shm_out, vpath, reps, &r2);
        if (r2 > best_rss) best_rss = r2;
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -f '%s' '%s.manifest.json'", shm_out, shm_out);
        if (system(cmd)) fprintf(stderr, "bench_convert: could not remove %s\n", shm_out);
        shm_wf = tmb_write_floor(shm, osize, 3);
        rmdir(shm);
    }
    /* the I/O floors (bench_floor.h), measured right after the runs */
    double rf = tmb_read_floor(mfile, 1 << 20, 3, &msize), rmf = read_floor_mmap(mfile, 3);
    double wf = tmb_write_floor(dir, osize, 3), wdf = tmb_write_floor_direct(dir, osize, 3);
    double floor_gbs = rf > 0 && wf > 0 ? (double)src / (rf + wf) / 1e9 : 0;
    double rd = rmf > 0 ? rmf : rf, wd = wdf > 0 ? wdf : wf;
    double ceil_disk = gbs_of(src, rd > wd ? rd : wd), ceil_shm = gbs_of(src, rd > shm_wf ? rd : shm_wf);
    double rss_mib = (double)best_rss / 1024.0, bound_mib = 256.0 + (double)largest / 1048576.0;
    printf("{\"bench\": \"convert\", \"dtype\": \"%s\", \"layers\": %d, \"dim\": %lld, \"vocab\": %lld, \"source_bytes\": %llu, "
           "\"seconds\": %.4f, \"gb_per_s\": %.3f, \"peak_rss_mib\": %.1f, \"rss_bound_mib\": %.1f, "
           "\"io_floor_gb_per_s\": %.3f, \"read_s\": %.4f, \"read_mmap_s\": %.4f, \"write_buffered_s\": %.4f, "
           "\"write_direct_s\": %.4f, \"ceiling_gb_per_s\": %.3f, \"tmpfs\": ",
           dt == TM_F32 ? "F32" : "BF16", layers, (long long)dim, (long long)vocab, (unsigned long long)src, best, gbs, rss_mib,
           bound_mib, floor_gbs, rf, rmf, wf, wdf, ceil_disk);
    if (shm_best > 0)
        printf("{\"seconds\": %.4f, \"gb_per_s\": %.3f, \"write_s\": %.4f, \"ceiling_gb_per_s\": %.3f}", shm_best,
               gbs_of(src, shm_best), shm_wf, ceil_shm);
    else
        printf("null");
    printf(", \"meets_speed\": %s, \"meets_rss\": %s}\n", gbs >= 1.0 ? "true" : "false", rss_mib <= bound_mib ? "true" : "false");
    fprintf(stderr, "convert %s %.2f MB: disk %.3f s = %.2f GB/s (target 1; ceiling %.2f = source / max(read %.3f s, O_DIRECT "
                    "write %.3f s); serial floor read + buffered write %.2f)\n",
            dt == TM_F32 ? "F32" : "BF16", (double)src / 1e6, best, gbs, ceil_disk, rd, wd, floor_gbs);
    if (shm_best > 0)
        fprintf(stderr, "  tmpfs %.3f s = %.2f GB/s (ceiling %.2f = source / max(read %.3f s, write %.3f s))\n", shm_best,
                gbs_of(src, shm_best), ceil_shm, rd, shm_wf);
    else
        fprintf(stderr, "  tmpfs: not measured (/dev/shm missing or without room for the output)\n");
    fprintf(stderr, "  peak RSS %.1f MiB (bound %.1f)\n", rss_mib, bound_mib);
    if (!keep) {
        char cmd[20000];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s' '%s.manifest.json'", mdir, vpath, out, out);
        if (system(cmd)) fprintf(stderr, "bench_convert: could not remove the scratch files\n");
    }
    return 0;
}
