/* Energy per call (see energy.h and docs/ENERGY.md section 2). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "energy.h"
#include "fw_harness.h"
#ifdef FW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static fw_telemetry *g_tel;
static int g_tried, g_gpu = -1;
static double g_idle;
static char g_why[256];

fw_status fw_device_sync(int cuda_index)
{
#ifdef FW_HAVE_CUDA
    if (cudaSetDevice(cuda_index) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        (void)cudaGetLastError();
        return FW_ERR_DEVICE;
    }
#else
    (void)cuda_index;
#endif
    return FW_OK;
}

fw_telemetry *fw_energy_session(int cuda_index, int *gpu, double *idle_w, char *why, size_t why_len)
{
    if (!g_tried) {
        g_tried = 1;
        snprintf(g_why, sizeof g_why, "n/a");
        if (fw_telemetry_open(&g_tel) != FW_OK) {
            g_tel = NULL;
            snprintf(g_why, sizeof g_why, "telemetry cannot be opened");
        } else if (fw_telemetry_gpu_count(g_tel) <= 0) {
            snprintf(g_why, sizeof g_why, "%.250s", fw_telemetry_describe(g_tel));
            fw_telemetry_close(g_tel);
            g_tel = NULL;
        } else {
            int g = -1;
#ifdef FW_HAVE_CUDA
            char bus[64];
            if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, cuda_index) == cudaSuccess)
                g = fw_telemetry_gpu_for_pci_bus_id(g_tel, bus);
            else (void)cudaGetLastError();
#endif
            if (g < 0 && cuda_index < fw_telemetry_gpu_count(g_tel)) g = cuda_index;
            fw_gpu_reading r;
            if (g < 0 || fw_telemetry_read(g_tel, g, &r) != FW_OK ||
                !(r.valid & (FW_TEL_POWER_INSTANT | FW_TEL_POWER_AVERAGE))) {
                snprintf(g_why, sizeof g_why, "no power reading for cuda:%d (NVML index %d)", cuda_index, g);
                fw_telemetry_close(g_tel);
                g_tel = NULL;
            } else {
                g_gpu = g;
                fw_telemetry_start_sampler(g_tel, 20, 16384);
                if (fw_telemetry_mean_power(g_tel, g, 1.0, &g_idle) != FW_OK) g_idle = 0;
            }
        }
    }
    if (gpu) *gpu = g_gpu;
    if (idle_w) *idle_w = g_idle;
    if (!g_tel && why) snprintf(why, why_len, "%s", g_why);
    return g_tel;
}

void fw_energy_session_close(void)
{
    if (g_tel) {
        fw_telemetry_stop_sampler(g_tel);
        fw_telemetry_close(g_tel);
    }
    g_tel = NULL;
    g_tried = 0;
}

void fw_emeas_init(fw_emeas *m)
{
    memset(m, 0, sizeof *m);
    m->source = "n/a";
    m->settled = -1;
    m->ms_per_call = m->joules_per_call = m->watts_avg = m->watts_peak = m->watts_std = NAN;
    m->idle_w = m->start_w = NAN;
}

void fw_emeas_free(fw_emeas *m)
{
    free(m->trace);
    m->trace = NULL;
    m->ntrace = 0;
}

fw_status fw_energy_measure(fw_telemetry *t, int gpu, double idle_w, double cooldown_s, double warmup_s,
                            double window_s, double est_call_s, fw_call_fn call, fw_sync_fn sync, void *arg,
                            fw_emeas *m)
{
    fw_emeas_init(m);
    if (!t || gpu < 0) {
        snprintf(m->note, sizeof m->note, "energy n/a (no GPU power telemetry)");
        return FW_OK;
    }
    m->idle_w = idle_w > 0 ? idle_w : NAN;
    if (cooldown_s > 0 && idle_w > 0) {
        double last = NAN;
        const double hold = cooldown_s < 1.0 ? 0.5 * cooldown_s : 0.5;
        m->settled = fw_telemetry_wait_settled(t, gpu, idle_w, fmax(10.0, 0.1 * idle_w), hold, cooldown_s, &last);
    }
    long batch = 1;
    if (est_call_s > 0) {
        double b = 0.02 / est_call_s;
        batch = b < 1 ? 1 : b > 2000 ? 2000 : (long)b;
    }
    fw_status st = FW_OK;
    const double w0 = fw_now_seconds();
    do { /* warm-up: clocks and temperature to their working point */
        for (long i = 0; i < batch && st == FW_OK; i++) st = call(arg);
        if (st == FW_OK) st = sync(arg);
    } while (st == FW_OK && fw_now_seconds() - w0 < warmup_s);
    if (st != FW_OK) return st;
    fw_gpu_reading r;
    if (fw_telemetry_read(t, gpu, &r) == FW_OK && (r.valid & FW_TEL_POWER_INSTANT)) m->start_w = r.power_instant_w;
    fw_energy_window w;
    if (window_s < 1.0) window_s = 1.0; /* the counter and the power reading refresh every ~0.1 s */
    const double ts0 = fw_telemetry_now(t);
    fw_energy_begin(t, gpu, &w);
    long n = 0;
    const double t0 = fw_now_seconds();
    do {
        for (long i = 0; i < batch && st == FW_OK; i++) st = call(arg);
        n += batch;
        if (st == FW_OK) st = sync(arg);
    } while (st == FW_OK && fw_now_seconds() - t0 < window_s);
    fw_energy_end(&w);
    if (st != FW_OK) return st;
    m->calls = n;
    m->seconds = w.seconds;
    m->ms_per_call = w.seconds * 1e3 / (double)n;
    if (w.valid && w.joules > 0) {
        m->valid = 1;
        m->source = w.source;
        m->joules_per_call = w.joules / (double)n;
        m->watts_avg = w.avg_w;
    } else {
        snprintf(m->note, sizeof m->note, "energy window n/a");
    }
    if (w.peak_valid) {
        m->peak_valid = 1;
        m->watts_peak = w.peak_w;
    }
    enum { MAXS = 4096 };
    fw_gpu_reading *buf = (fw_gpu_reading *)malloc(MAXS * sizeof *buf);
    if (buf) {
        const int got = fw_telemetry_samples(t, gpu, ts0, buf, MAXS);
        m->trace = (double(*)[2])malloc((size_t)(got > 0 ? got : 1) * sizeof *m->trace);
        double s = 0, s2 = 0;
        int k = 0;
        for (int i = 0; i < got && m->trace; i++) {
            if (!(buf[i].valid & FW_TEL_POWER_INSTANT) || buf[i].t_s > ts0 + w.seconds + 0.05) continue;
            m->trace[k][0] = buf[i].t_s - ts0;
            m->trace[k][1] = buf[i].power_instant_w;
            s += buf[i].power_instant_w;
            s2 += buf[i].power_instant_w * buf[i].power_instant_w;
            k++;
        }
        m->ntrace = k;
        if (k >= 2) {
            const double mean = s / k;
            m->std_valid = 1;
            m->watts_std = sqrt(fmax(s2 / k - mean * mean, 0.0));
        }
        free(buf);
    }
    if (m->settled == 0)
        snprintf(m->note, sizeof m->note, "did not cool to %.0f W within %.1f s (started at %.0f W)", idle_w, cooldown_s,
                 m->start_w);
    return FW_OK;
}
