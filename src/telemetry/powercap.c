/* CPU package energy from Linux powercap: /sys/class/powercap/intel-rapl:N/energy_uj (the
 * intel-rapl driver also serves AMD Zen; some kernels name the zones amd-rapl:N). Counters wrap at
 * max_energy_range_uj; the source keeps a wrap-corrected total since it was opened. energy_uj is
 * often readable by root only: then the source is n/a. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "telemetry_internal.h"

#define PC_MAX_ZONES 16

typedef struct pc_state {
    pthread_mutex_t mu;
    int n;
    char path[PC_MAX_ZONES][320]; /* .../energy_uj */
    unsigned long long range[PC_MAX_ZONES];
    unsigned long long last[PC_MAX_ZONES];
    double total_j;
    char name[64];
} pc_state;

static int read_ull(const char *path, unsigned long long *v)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int ok = fscanf(f, "%llu", v) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

static int is_package_zone(const char *d)
{
    const char *p = NULL;
    if (strncmp(d, "intel-rapl:", 11) == 0) p = d + 11;
    else if (strncmp(d, "amd-rapl:", 9) == 0) p = d + 9;
    if (!p || !*p) return 0;
    for (; *p; p++)
        if (*p < '0' || *p > '9') return 0; /* "intel-rapl:0:1" is a sub-zone */
    return 1;
}

static int pc_read(void *state, double *joules, int *packages, char *src, size_t src_len)
{
    pc_state *s = (pc_state *)state;
    pthread_mutex_lock(&s->mu);
    int ok = 1;
    for (int i = 0; i < s->n; i++) {
        unsigned long long v;
        if (read_ull(s->path[i], &v) != 0) {
            ok = 0;
            continue;
        }
        unsigned long long d = v >= s->last[i] ? v - s->last[i] : (s->range[i] ? s->range[i] - s->last[i] + v : 0);
        s->total_j += (double)d * 1e-6;
        s->last[i] = v;
    }
    *joules = s->total_j;
    *packages = s->n;
    snprintf(src, src_len, "%s", ok ? s->name : "powercap read failed");
    pthread_mutex_unlock(&s->mu);
    return ok ? 0 : -1;
}

static void pc_close(void *state)
{
    pc_state *s = (pc_state *)state;
    if (!s) return;
    pthread_mutex_destroy(&s->mu);
    fw_free(s);
}

int fw_tel_powercap_open(const char *root, fw_tel_source *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    if (!root) root = "/sys/class/powercap";
    DIR *dir = opendir(root);
    if (!dir) {
        snprintf(why, why_len, "no %s", root);
        return -1;
    }
    pc_state *s = (pc_state *)fw_calloc(1, sizeof *s);
    if (!s) {
        closedir(dir);
        snprintf(why, why_len, "out of memory");
        return FW_TEL_OPEN_OOM;
    }
    int seen = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL && s->n < PC_MAX_ZONES) {
        if (!is_package_zone(e->d_name)) continue;
        seen++;
        char p[320];
        unsigned long long v, range = 0;
        snprintf(p, sizeof p, "%s/%s/energy_uj", root, e->d_name);
        if (read_ull(p, &v) != 0) continue; /* exists but not readable (root-only) */
        char rp[340];
        snprintf(rp, sizeof rp, "%s/%s/max_energy_range_uj", root, e->d_name);
        read_ull(rp, &range);
        snprintf(s->path[s->n], sizeof s->path[s->n], "%s", p);
        s->range[s->n] = range;
        s->last[s->n] = v;
        if (s->n == 0) snprintf(s->name, sizeof s->name, "powercap %.40s", e->d_name);
        s->n++;
    }
    closedir(dir);
    if (s->n == 0) {
        snprintf(why, why_len, seen ? "powercap energy_uj not readable (root only?)" : "no RAPL package zone in %s", root);
        fw_free(s);
        return -1;
    }
    if (s->n > 1) snprintf(s->name, sizeof s->name, "powercap (%d packages)", s->n);
    pthread_mutex_init(&s->mu, NULL);
    out->name = "powercap";
    out->state = s;
    out->read_cpu_energy = pc_read;
    out->close = pc_close;
    return 0;
}
