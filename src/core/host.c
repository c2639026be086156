/* host.c: facts about the machine for manifests (CPU model, cores, OS) and the number of CPUs
** this process may use (the default worker count of the quantize jobs). */
#define _GNU_SOURCE 1
#include "core.h"
#include "tensormorph/host.h"

#include <sched.h>
#include <stdio.h>
#include <sys/utsname.h>
#include <unistd.h>

void tm_host_info(tm_host_info_t *h) {
    memset(h, 0, sizeof *h);
    snprintf(h->cpu_model, sizeof h->cpu_model, "unknown");
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (fp) {
        char line[512];
        while (fgets(line, sizeof line, fp)) {
            if (strncmp(line, "model name", 10) == 0) {
                char *c = strchr(line, ':');
                if (c) {
                    c++;
                    while (*c == ' ' || *c == '\t') c++;
                    size_t n = strcspn(c, "\n");
                    if (n >= sizeof h->cpu_model) n = sizeof h->cpu_model - 1;
                    memcpy(h->cpu_model, c, n);
                    h->cpu_model[n] = '\0';
                }
                break;
            }
        }
        fclose(fp);
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    h->n_cores = n > 0 ? (int)n : 1;
    struct utsname u;
    if (uname(&u) == 0) {
        snprintf(h->os, sizeof h->os, "%.60s %.60s %.60s", u.sysname, u.release, u.machine);
        snprintf(h->hostname, sizeof h->hostname, "%.90s", u.nodename);
    }
}

/* The first two numbers of a small text file; how many were read (0 when it cannot be read). */
static int read_two(const char *path, char *a, size_t na, char *b, size_t nb) {
    FILE *fp = fopen(path, "r");
    if (!fp) return 0;
    char line[128];
    int n = 0;
    if (fgets(line, sizeof line, fp)) {
        char fa[64] = "", fb[64] = "";
        n = sscanf(line, "%63s %63s", fa, fb);
        snprintf(a, na, "%s", fa);
        snprintf(b, nb, "%s", fb);
    }
    fclose(fp);
    return n < 0 ? 0 : n;
}

/* ceil(quota / period) for positive numbers, else 0 (no limit). */
static int quota_cpus(long long quota, long long period) {
    if (quota <= 0 || period <= 0) return 0;
    long long n = (quota + period - 1) / period;
    return n > 4096 ? 4096 : (int)n;
}

/* The CPU limit of cgroup directory dir and of its parents up to root (the smallest one). */
static int v2_limit(const char *root, const char *rel) {
    char path[4096];
    snprintf(path, sizeof path, "%s%s", root, rel);
    int best = 0;
    for (;;) {
        char f[4200], a[64], b[64];
        snprintf(f, sizeof f, "%s/cpu.max", path);
        if (read_two(f, a, sizeof a, b, sizeof b) == 2 && strcmp(a, "max")) {
            int n = quota_cpus(atoll(a), atoll(b));
            if (n > 0 && (best == 0 || n < best)) best = n;
        }
        size_t rl = strlen(root), pl = strlen(path);
        if (pl <= rl) break;
        char *slash = strrchr(path + rl, '/');
        if (!slash) break;
        *slash = '\0';
    }
    return best;
}

static int v1_limit(const char *root, const char *rel) {
    static const char *const dirs[] = {"cpu", "cpu,cpuacct", "cpuacct,cpu"};
    int best = 0;
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        for (int at_root = 0; at_root < 2; at_root++) {
            char q[4200], pp[4200], a[64], b[64], c[64], e[64];
            snprintf(q, sizeof q, "%s/%s%s/cpu.cfs_quota_us", root, dirs[d], at_root ? "" : rel);
            snprintf(pp, sizeof pp, "%s/%s%s/cpu.cfs_period_us", root, dirs[d], at_root ? "" : rel);
            if (read_two(q, a, sizeof a, b, sizeof b) >= 1 && read_two(pp, c, sizeof c, e, sizeof e) >= 1) {
                int n = quota_cpus(atoll(a), atoll(c));
                if (n > 0 && (best == 0 || n < best)) best = n;
            }
        }
    }
    return best;
}

int tm__cgroup_cpu_limit(const char *proc_cgroup, const char *root) {
    int best = 0;
    const char *line = proc_cgroup;
    while (line && *line) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        char buf[4096];
        if (n >= sizeof buf) n = sizeof buf - 1;
        memcpy(buf, line, n);
        buf[n] = '\0';
        char *c1 = strchr(buf, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c1 && c2) {
            *c2 = '\0';
            const char *ctrl = c1 + 1, *rel = c2 + 1;
            if (!strcmp(rel, "/")) rel = "";
            int lim = 0;
            if (!strncmp(buf, "0:", 2) && !*ctrl) {
                lim = v2_limit(root, rel);
            } else { /* v1: the controller list must name "cpu" */
                char cl[256];
                snprintf(cl, sizeof cl, ",%s,", ctrl);
                if (strstr(cl, ",cpu,")) lim = v1_limit(root, rel);
            }
            if (lim > 0 && (best == 0 || lim < best)) best = lim;
        }
        line = end ? end + 1 : NULL;
    }
    return best;
}

int tm_usable_cpus(void) {
    int n = 0;
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
#endif
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    char text[8192] = "";
    FILE *fp = fopen("/proc/self/cgroup", "r");
    if (fp) {
        size_t got = fread(text, 1, sizeof text - 1, fp);
        text[got] = '\0';
        fclose(fp);
    }
    int lim = tm__cgroup_cpu_limit(text, "/sys/fs/cgroup");
    if (lim > 0 && lim < n) n = lim;
    return n > 256 ? 256 : n;
}
