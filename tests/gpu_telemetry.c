/* GPU test of the telemetry on real hardware (NVML through dlopen) and a first energy measurement
 * following docs/ENERGY.md: readings present and plausible, refresh intervals of the instant power
 * and of the energy counter, idle baseline, then a >= 1.5 s window of back-to-back attention calls
 * after warm-up: J/call from the counter, cross-checked against the sampled integral.
 *
 *   gpu_telemetry            the checks (exit 0 pass, 1 fail, 77 no CUDA device)
 *   gpu_telemetry --seconds S   length of the load window (default 2)
 * Where CUDA devices exist but NVML does not load, that is a failure: the readings must be there. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fw_harness.h"
#include "flashwatt.h"

#ifdef FW_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "fw_check.h"
#define CHECK FWT_CHECK

#ifdef FW_HAVE_CUDA
static void sleep_s(double s)
{
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

/* Distinct values of instant power and of the energy counter in `seconds` of 5 ms polls. */
static void refresh_rates(fw_telemetry *t, int g, double seconds)
{
    double t0 = fw_telemetry_now(t), last_p = -1;
    uint64_t last_e = 0;
    int np = 0, ne = 0, polls = 0, have_e = 0;
    while (fw_telemetry_now(t) - t0 < seconds) {
        fw_gpu_reading r;
        if (fw_telemetry_read(t, g, &r) == FW_OK) {
            polls++;
            if ((r.valid & FW_TEL_POWER_INSTANT) && r.power_instant_w != last_p) {
                np++;
                last_p = r.power_instant_w;
            }
            if ((r.valid & FW_TEL_ENERGY) && (!have_e || r.energy_mj != last_e)) {
                ne++;
                last_e = r.energy_mj;
                have_e = 1;
            }
        }
        sleep_s(0.005);
    }
    printf("refresh over %.1f s (%d polls): instant power changed %d times (~%.0f ms), energy counter %d times (~%.0f ms)\n",
           seconds, polls, np, np > 1 ? 1000.0 * seconds / (np - 1) : 0.0, ne, ne > 1 ? 1000.0 * seconds / (ne - 1) : 0.0);
    CHECK(np >= 2, "instant power never changed in %.1f s", seconds);
    CHECK(ne >= 2, "energy counter never changed in %.1f s", seconds);
}

static int run_load(fw_context *ctx, fw_run *run, long calls)
{
    fw_attn_params p = run->c.params;
    for (long i = 0; i < calls; i++)
        if (fw_attention_forward(ctx, &run->q, &run->k, &run->v, &run->o, NULL, &p) != FW_OK) return -1;
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : -1;
}
#endif

int main(int argc, char **argv)
{
    double window_s = 2.0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc) window_s = atof(argv[++i]);
    if (fw_cuda_device_count() <= 0) {
        printf("SKIP gpu_telemetry: no CUDA device\n");
        return 77;
    }
#ifndef FW_HAVE_CUDA
    (void)window_s;
    (void)fwt_passed;
    (void)fwt_failed;
    printf("SKIP gpu_telemetry: built without CUDA\n");
    return 77;
#else
    fw_telemetry *t = NULL;
    fw_status st = fw_telemetry_open(&t);
    CHECK(st == FW_OK && t, "open: %s", fw_status_string(st));
    if (!t) return 1;
    printf("telemetry: %s\n", fw_telemetry_describe(t));
    CHECK(fw_telemetry_gpu_count(t) >= 1, "CUDA sees %d device(s) but NVML none", fw_cuda_device_count());
    if (fw_telemetry_gpu_count(t) < 1) {
        fw_telemetry_close(t);
        printf("%d passed, %d failed\n", fwt_passed, fwt_failed);
        return 1;
    }
    /* cuda:0 -> NVML index through the PCI bus id */
    char bus[64] = "";
    int g = 0;
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, 0) == cudaSuccess) {
        g = fw_telemetry_gpu_for_pci_bus_id(t, bus);
        CHECK(g >= 0, "cuda:0 at %s has no NVML device", bus);
        if (g < 0) g = 0;
    }
    char name[96];
    fw_telemetry_gpu_name(t, g, name, sizeof name);
    printf("cuda:0 = %s = NVML %d: %s\n", bus, g, name);

    fw_gpu_reading r;
    st = fw_telemetry_read(t, g, &r);
    CHECK(st == FW_OK, "read: %s", fw_status_string(st));
    const unsigned need = FW_TEL_POWER_INSTANT | FW_TEL_POWER_AVERAGE | FW_TEL_ENERGY | FW_TEL_TEMPERATURE |
                          FW_TEL_SM_CLOCK | FW_TEL_MEM_CLOCK | FW_TEL_THROTTLE | FW_TEL_POWER_LIMIT;
    CHECK((r.valid & need) == need, "fields missing: valid 0x%x, want 0x%x", r.valid, need);
    const unsigned fields[] = {FW_TEL_POWER_INSTANT, FW_TEL_POWER_AVERAGE, FW_TEL_ENERGY, FW_TEL_TEMPERATURE,
                               FW_TEL_SM_CLOCK,      FW_TEL_MEM_CLOCK,     FW_TEL_UTILIZATION, FW_TEL_THROTTLE,
                               FW_TEL_POWER_LIMIT};
    for (int i = 0; i < 9; i++) {
        char b[128];
        fw_gpu_reading_format(&r, fields[i], b, sizeof b);
        printf("  %s", b);
    }
    printf("\n");
    if (r.valid & FW_TEL_POWER_INSTANT) CHECK(r.power_instant_w > 10 && r.power_instant_w < 1500, "power %g W", r.power_instant_w);
    if (r.valid & FW_TEL_TEMPERATURE) CHECK(r.temperature_c > 5 && r.temperature_c < 110, "temperature %g C", r.temperature_c);
    if (r.valid & FW_TEL_POWER_LIMIT) CHECK(r.power_limit_w > 50 && r.power_limit_w < 2000, "limit %g W", r.power_limit_w);

    refresh_rates(t, g, 1.5);

    st = fw_telemetry_start_sampler(t, 20, 0);
    CHECK(st == FW_OK, "sampler: %s", fw_status_string(st));
    double idle = 0;
    st = fw_telemetry_mean_power(t, g, 1.0, &idle);
    CHECK(st == FW_OK, "idle mean: %s", fw_status_string(st));
    printf("idle baseline: %.1f W\n", idle);

    /* load: B=16 H=8 L=2048 D=64 (the anchor's seed000 shape), f16, else f32 */
    fw_context *ctx = NULL;
    fw_context_create(&ctx);
    fw_run run;
    memset(&run, 0, sizeof run);
    int loaded = 0;
    fw_dtype dts[2] = {FW_F16, FW_F32};
    for (int i = 0; i < 2 && !loaded; i++) {
        fw_case c = fw_case_default();
        c.batch = 16;
        c.heads = c.kv_heads = 8;
        c.seqlen_q = c.seqlen_k = 2048;
        c.head_dim = 64;
        c.dtype = dts[i];
        c.device.kind = FW_DEVICE_CUDA;
        c.device.index = 0;
        c.seed = 7;
        char msg[512];
        if (fw_run_alloc(&run, &c, msg, sizeof msg) != FW_OK) {
            printf("alloc %s: %s\n", fw_dtype_name(dts[i]), msg);
            continue;
        }
        if (run_load(ctx, &run, 3) == 0) loaded = 1;
        else {
            printf("%s forward failed: %s\n", fw_dtype_name(dts[i]), fw_context_last_error(ctx));
            fw_run_free(&run);
            memset(&run, 0, sizeof run);
        }
    }
    CHECK(loaded, "no CUDA backend ran the load");
    if (loaded) {
        /* calibrate a batch of calls to ~50 ms, warm up >= 1 s */
        double t0 = fw_now_seconds();
        run_load(ctx, &run, 10);
        double per = (fw_now_seconds() - t0) / 10.0;
        long batch = per > 0 ? (long)(0.05 / per) + 1 : 100;
        double w0 = fw_now_seconds();
        while (fw_now_seconds() - w0 < 1.0) run_load(ctx, &run, batch);
        fw_energy_window w;
        long calls = 0;
        st = fw_energy_begin(t, g, &w);
        double l0 = fw_now_seconds();
        while (fw_now_seconds() - l0 < window_s) {
            run_load(ctx, &run, batch);
            calls += batch;
        }
        st = fw_energy_end(&w);
        CHECK(st == FW_OK && w.valid, "window: %s", fw_status_string(st));
        printf("load (%s, %s): %ld calls in %.3f s = %.4f ms/call; %.4f J/call (%s), avg %.1f W, peak %.1f W, "
               "sampled %.2f J vs counter %.2f J over %d samples; last backend %s\n",
               fw_dtype_name(run.c.dtype), name, calls, w.seconds, 1000.0 * w.seconds / (double)calls,
               w.joules / (double)calls, w.source, w.avg_w, w.peak_w, w.sampled_joules, w.joules, w.samples,
               fw_context_last_backend(ctx));
        CHECK(strcmp(w.source, "counter") == 0, "source %s", w.source);
        CHECK(w.seconds >= 0.9 * window_s, "window %g s", w.seconds);
        CHECK(w.avg_w > idle + 10.0, "load avg %.1f W not above idle %.1f W", w.avg_w, idle);
        CHECK(w.sampled_valid && fabs(w.sampled_joules - w.joules) <= 0.15 * w.joules,
              "sampled %.2f J vs counter %.2f J", w.sampled_joules, w.joules);
        CHECK(w.peak_valid && w.peak_w >= w.avg_w * 0.9, "peak %.1f avg %.1f", w.peak_w, w.avg_w);
        fw_gpu_reading after;
        fw_telemetry_read(t, g, &after);
        char thr[256] = "n/a";
        if (after.valid & FW_TEL_THROTTLE) fw_throttle_reasons_string(after.throttle_reasons, thr, sizeof thr);
        printf("after the window: %.0f C, SM %u MHz, throttle: %s\n", after.temperature_c, after.sm_clock_mhz, thr);
        fw_run_free(&run);
    }
    fw_context_destroy(ctx);
    fw_telemetry_close(t);
    printf("%d passed, %d failed\n", fwt_passed, fwt_failed);
    return fwt_failed ? 1 : 0;
#endif
}
