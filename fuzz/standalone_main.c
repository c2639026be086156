/* standalone_main.c: replay files through LLVMFuzzerTestOneInput without libFuzzer, so corpora
** and crashers run in ordinary builds (ctest, valgrind, gdb). Arguments are files or
** directories (their regular files, one level). Prints how many inputs ran; a crash is the
** failure signal.
**   cc -Iinclude fuzz/fuzz_safetensors_open.c fuzz/standalone_main.c -ltensormorph ...
**   ./a.out fuzz/corpus/safetensors crash-1234 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "%s: cannot open\n", path);
        return 1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        fclose(fp);
        return 1;
    }
    for (;;) {
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(fp);
                return 1;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, fp);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        fprintf(stderr, "%s: read error\n", path);
        free(buf);
        return 1;
    }
    /* an exact-size copy, so sanitizers catch reads past the end */
    uint8_t *exact = malloc(n ? n : 1);
    if (exact && n) memcpy(exact, buf, n);
    free(buf);
    if (!exact) return 1;
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

int main(int argc, char **argv) {
    int ran = 0, errors = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "%s: not found\n", argv[i]);
            errors++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            errors += run_file(argv[i]);
            ran++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            fprintf(stderr, "%s: cannot list\n", argv[i]);
            errors++;
            continue;
        }
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.') continue;
            size_t len = strlen(argv[i]) + strlen(de->d_name) + 2;
            char *p = malloc(len);
            if (!p) break;
            snprintf(p, len, "%s/%s", argv[i], de->d_name);
            if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
                errors += run_file(p);
                ran++;
            }
            free(p);
        }
        closedir(d);
    }
    printf("ran %d inputs, %d unreadable\n", ran, errors);
    return errors ? 1 : 0;
}
