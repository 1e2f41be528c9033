/* flashwatt info: what this build has and what this machine can run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "flashwatt.h"
#include "commands.h"
#include "flashwatt_internal.h"
#ifdef FW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static void cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ' || *c == '\t') c++;
                snprintf(buf, len, "%s", c);
                size_t n = strlen(buf);
                if (n && buf[n - 1] == '\n') buf[n - 1] = 0;
            }
            break;
        }
    }
    fclose(f);
}

int fw_cmd_info(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: flashwatt info\n\nPrints the version, the CPU features in use, threads, the backends\n"
                   "compiled in (usable now, or why not) and the GPUs visible. Takes no flags.\n");
            return 0;
        }
        fprintf(stderr, "flashwatt info: unexpected argument '%s' (info takes no flags)\n", argv[i]);
        return 2;
    }
    char model[256];
    cpu_model(model, sizeof model);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *simd_env = getenv("FLASHWATT_SIMD");
    printf("flashwatt %s\n", fw_version());
#ifdef FW_HAVE_CUDA
    printf("build:    CUDA backends compiled in\n");
#else
    printf("build:    CPU only (no CUDA backends compiled in)\n");
#endif
    printf("cpu:      %s\n", model);
    printf("simd:     %s%s%s%s\n", fw_cpu_simd_level(), simd_env ? " (FLASHWATT_SIMD=" : "", simd_env ? simd_env : "",
           simd_env ? ")" : "");
    printf("threads:  %ld (all online cores; the default; --threads N or fw_context_set_threads to change)\n", cores);

    const int n = fw_backend_count();
    int usable = 0;
    printf("backends: %d compiled in\n", n);
    for (int i = 0; i < n; i++) {
        fw_backend_info info;
        if (fw_backend_get_info(i, &info) != FW_OK) continue;
        usable += info.usable;
        printf("  %-16s %-4s  %-10s  %s", info.name, info.device == FW_DEVICE_CUDA ? "cuda" : "cpu",
               info.usable ? "usable" : "not usable", info.description ? info.description : "");
        if (!info.usable) printf(" — %s", info.why_not[0] ? info.why_not : "(no reason given)");
        printf("\n");
    }
    printf("          %d usable now\n", usable);
    const int gpus = fw_cuda_device_count();
    if (gpus <= 0) {
#ifdef FW_HAVE_CUDA
        printf("gpus:     none visible (the CUDA backends above say why)\n");
#else
        printf("gpus:     none visible (this build has no CUDA support)\n");
#endif
    } else {
        printf("gpus:     %d visible\n", gpus);
        for (int i = 0; i < gpus; i++) {
#ifdef FW_HAVE_CUDA
            struct cudaDeviceProp prop;
            if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) {
                printf("  cuda:%d  %s, %.0f GiB, sm_%d%d, %d SMs\n", i, prop.name,
                       (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), prop.major, prop.minor,
                       prop.multiProcessorCount);
                continue;
            }
#endif
            printf("  cuda:%d\n", i);
        }
    }
    /* the tuning table the scheduler reads (flashwatt tune writes it) */
    fw_context *ctx = NULL;
    char path[1024];
    fw_knobs knobs; /* the path a context created now reads */
    fw_knobs_read(&knobs);
    fw_sched_table_path(&knobs, path, sizeof path);
    printf("tuning:   %s\n", path);
    if (fw_context_create(&ctx) == FW_OK) {
        printf("          %s\n", fw_sched_table_status(fw_context_sched(ctx)));
        fw_context_destroy(ctx);
    }
    return 0;
}
