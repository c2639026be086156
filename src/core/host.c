/* host.c: facts about the machine for manifests (CPU model, cores, OS). */
#include "core.h"
#include "tensormorph/host.h"

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
