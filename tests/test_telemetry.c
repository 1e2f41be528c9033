/* Telemetry: the real path with NVML absent reports n/a (never zero); powercap parsing and wrap;
 * throttle-reason names; a fake source through readings, the sampler ring and energy windows
 * (counter, sampled fallback, cross-check). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "flashwatt.h"
#include "flashwatt_internal.h"

#include "fw_check.h"
#define CHECK FWT_CHECK

static const unsigned k_fields[] = {FW_TEL_POWER_INSTANT, FW_TEL_POWER_AVERAGE, FW_TEL_ENERGY,
                                    FW_TEL_TEMPERATURE,   FW_TEL_SM_CLOCK,      FW_TEL_MEM_CLOCK,
                                    FW_TEL_UTILIZATION,   FW_TEL_THROTTLE,      FW_TEL_POWER_LIMIT};
#define N_FIELDS ((int)(sizeof k_fields / sizeof k_fields[0]))

static void sleep_s(double s)
{
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

static void check_all_na(const fw_gpu_reading *r, const char *what)
{
    CHECK(r->valid == 0, "%s: valid = 0x%x, want 0", what, r->valid);
    for (int i = 0; i < N_FIELDS; i++) {
        char buf[64];
        fw_gpu_reading_format(r, k_fields[i], buf, sizeof buf);
        CHECK(strcmp(buf, "n/a") == 0, "%s: field 0x%x formats as '%s', want n/a", what, k_fields[i], buf);
    }
}

/* NVML absent: the loader says why, the object opens with 0 GPUs and everything is n/a. */
static void test_absent(void)
{
    fw_tel_source s;
    char why[256] = "";
    int rc = fw_tel_nvml_open("libflashwatt-no-such-nvml.so.1", &s, why, sizeof why);
    CHECK(rc == -1, "nvml open of a missing library returned %d", rc);
    CHECK(strstr(why, "NVML not found") != NULL, "why = '%s'", why);

    setenv("FLASHWATT_NVML_LIB", "libflashwatt-no-such-nvml.so.1", 1);
    setenv("FLASHWATT_POWERCAP_ROOT", "/nonexistent-powercap", 1);
    fw_telemetry *t = NULL;
    fw_status st = fw_telemetry_open(&t);
    unsetenv("FLASHWATT_NVML_LIB");
    unsetenv("FLASHWATT_POWERCAP_ROOT");
    CHECK(st == FW_OK && t, "open without NVML: %s", fw_status_string(st));
    if (!t) return;
    printf("absent: %s\n", fw_telemetry_describe(t));
    CHECK(fw_telemetry_gpu_count(t) == 0, "gpu count %d", fw_telemetry_gpu_count(t));
    CHECK(strstr(fw_telemetry_describe(t), "gpu: n/a") != NULL, "describe '%s'", fw_telemetry_describe(t));
    CHECK(strstr(fw_telemetry_describe(t), "cpu: n/a") != NULL, "describe '%s'", fw_telemetry_describe(t));

    fw_gpu_reading r;
    memset(&r, 0x5a, sizeof r); /* garbage in: must come back cleared */
    st = fw_telemetry_read(t, 0, &r);
    CHECK(st == FW_ERR_INVALID_VALUE, "read gpu 0 without NVML: %s", fw_status_string(st));
    check_all_na(&r, "absent read");

    char name[64];
    CHECK(fw_telemetry_gpu_pci_bus_id(t, 0, name, sizeof name) != FW_OK && strcmp(name, "n/a") == 0, "bus id '%s'", name);
    CHECK(fw_telemetry_gpu_for_pci_bus_id(t, "0000:3b:00.0") == -1, "bus lookup without GPUs");
    st = fw_telemetry_gpu_name(t, 0, name, sizeof name);
    CHECK(st != FW_OK && strcmp(name, "n/a") == 0, "name '%s' (%s)", name, fw_status_string(st));

    fw_cpu_reading c;
    st = fw_telemetry_read_cpu(t, &c);
    CHECK(st == FW_ERR_UNSUPPORTED && !c.energy_valid, "cpu read %s valid %d", fw_status_string(st), c.energy_valid);
    CHECK(strncmp(c.source, "n/a", 3) == 0, "cpu source '%s'", c.source);

    fw_energy_window w;
    st = fw_energy_begin(t, 0, &w);
    CHECK(st == FW_ERR_INVALID_VALUE, "energy begin without GPU: %s", fw_status_string(st));
    st = fw_energy_end(&w);
    CHECK(st != FW_OK && !w.valid && strcmp(w.source, "n/a") == 0 && !w.sampled_valid && !w.peak_valid && !w.cpu_valid,
          "energy end: %s valid %d source %s", fw_status_string(st), w.valid, w.source);
    st = fw_energy_begin(t, -1, &w); /* CPU-only window: n/a too */
    CHECK(st == FW_OK, "cpu window begin %s", fw_status_string(st));
    st = fw_energy_end(&w);
    CHECK(st == FW_ERR_UNSUPPORTED && !w.cpu_valid && !w.valid, "cpu window end %s cpu_valid %d", fw_status_string(st),
          w.cpu_valid);

    st = fw_telemetry_start_sampler(t, 20, 0);
    CHECK(st == FW_ERR_UNSUPPORTED, "sampler with no GPU: %s", fw_status_string(st));
    fw_gpu_reading buf[4];
    CHECK(fw_telemetry_samples(t, 0, 0, buf, 4) == 0, "samples without GPU");
    fw_telemetry_close(t);

    /* argument checks */
    CHECK(fw_telemetry_open(NULL) == FW_ERR_NULL_ARGUMENT, "open(NULL)");
    CHECK(fw_telemetry_read(NULL, 0, &r) == FW_ERR_NULL_ARGUMENT && r.valid == 0, "read(NULL)");
    CHECK(fw_telemetry_gpu_count(NULL) == 0, "count(NULL)");
    fw_telemetry_close(NULL);
}

/* Whatever this machine has: the default open must succeed; with no GPU everything is n/a, with one
 * the fields it reports must be plausible (used on the GPU machine too). */
static void test_default_open(void)
{
    fw_telemetry *t = NULL;
    fw_status st = fw_telemetry_open(&t);
    CHECK(st == FW_OK && t, "default open: %s", fw_status_string(st));
    if (!t) return;
    printf("this machine: %s\n", fw_telemetry_describe(t));
    int n = fw_telemetry_gpu_count(t);
    fw_gpu_reading r;
    if (n == 0) {
        st = fw_telemetry_read(t, 0, &r);
        CHECK(st != FW_OK, "read with no GPU returned OK");
        check_all_na(&r, "no-GPU read");
    }
    for (int g = 0; g < n; g++) {
        st = fw_telemetry_read(t, g, &r);
        CHECK(st == FW_OK, "read gpu %d: %s", g, fw_status_string(st));
        char line[512] = "";
        for (int i = 0; i < N_FIELDS; i++) {
            char b[64];
            fw_gpu_reading_format(&r, k_fields[i], b, sizeof b);
            strncat(line, b, sizeof line - strlen(line) - 1);
            strncat(line, " | ", sizeof line - strlen(line) - 1);
        }
        printf("gpu %d: %s\n", g, line);
        if (r.valid & FW_TEL_POWER_INSTANT) CHECK(r.power_instant_w > 1 && r.power_instant_w < 5000, "power %g", r.power_instant_w);
        if (r.valid & FW_TEL_TEMPERATURE) CHECK(r.temperature_c > 0 && r.temperature_c < 150, "temp %g", r.temperature_c);
    }
    fw_cpu_reading c;
    st = fw_telemetry_read_cpu(t, &c);
    CHECK((st == FW_OK) == (c.energy_valid != 0), "cpu read status and validity disagree");
    printf("cpu energy: %s\n", c.source);
    fw_telemetry_close(t);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* powercap: package zones only, wrap correction, unreadable counters are n/a. */
static void test_powercap(void)
{
    char root[] = "/tmp/fw_powercap_XXXXXX";
    if (!mkdtemp(root)) {
        CHECK(0, "mkdtemp failed");
        return;
    }
    char p[512];
    snprintf(p, sizeof p, "%s/intel-rapl:0", root);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/intel-rapl:0:0", root); /* a sub-zone (core): must be ignored */
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/intel-rapl:0:0/energy_uj", root);
    write_file(p, "999999999\n");
    snprintf(p, sizeof p, "%s/intel-rapl:0/max_energy_range_uj", root);
    write_file(p, "2000000\n");
    char e[512];
    snprintf(e, sizeof e, "%s/intel-rapl:0/energy_uj", root);
    write_file(e, "1000000\n");

    fw_tel_source s;
    char why[256] = "";
    int rc = fw_tel_powercap_open(root, &s, why, sizeof why);
    CHECK(rc == 0, "powercap open: %s", why);
    if (rc == 0) {
        double j = -1;
        int pk = 0;
        char src[64];
        CHECK(s.read_cpu_energy(s.state, &j, &pk, src, sizeof src) == 0 && fabs(j) < 1e-12 && pk == 1,
              "first read %g J, %d packages", j, pk);
        write_file(e, "1500000\n");
        s.read_cpu_energy(s.state, &j, &pk, src, sizeof src);
        CHECK(fabs(j - 0.5) < 1e-9, "after +0.5 J: %g", j);
        write_file(e, "100000\n"); /* wrapped: 2000000 - 1500000 + 100000 uJ */
        s.read_cpu_energy(s.state, &j, &pk, src, sizeof src);
        CHECK(fabs(j - 1.1) < 1e-9, "after wrap: %g, want 1.1", j);
        s.close(s.state);
    }

    /* through fw_telemetry, with a CPU-only energy window */
    setenv("FLASHWATT_POWERCAP_ROOT", root, 1);
    setenv("FLASHWATT_NVML_LIB", "libflashwatt-no-such-nvml.so.1", 1);
    fw_telemetry *t = NULL;
    fw_telemetry_open(&t);
    unsetenv("FLASHWATT_POWERCAP_ROOT");
    unsetenv("FLASHWATT_NVML_LIB");
    if (t) {
        CHECK(strstr(fw_telemetry_describe(t), "cpu: powercap") != NULL, "describe '%s'", fw_telemetry_describe(t));
        write_file(e, "200000\n");
        fw_energy_window w;
        CHECK(fw_energy_begin(t, -1, &w) == FW_OK, "cpu window begin");
        write_file(e, "700000\n");
        fw_status st = fw_energy_end(&w);
        CHECK(st == FW_OK && w.cpu_valid && fabs(w.cpu_joules - 0.5) < 1e-9, "cpu window %s %d %g",
              fw_status_string(st), w.cpu_valid, w.cpu_joules);
        fw_telemetry_close(t);
    }

    /* unreadable counter (not as root: root reads anything) */
    if (geteuid() != 0) {
        chmod(e, 0);
        rc = fw_tel_powercap_open(root, &s, why, sizeof why);
        CHECK(rc == -1 && strstr(why, "not readable") != NULL, "unreadable: rc %d why '%s'", rc, why);
        if (rc == 0) s.close(s.state);
        chmod(e, 0644);
    }
    rc = fw_tel_powercap_open("/nonexistent-powercap", &s, why, sizeof why);
    CHECK(rc == -1, "missing root opened");

    unlink(e);
    snprintf(p, sizeof p, "%s/intel-rapl:0/max_energy_range_uj", root);
    unlink(p);
    snprintf(p, sizeof p, "%s/intel-rapl:0:0/energy_uj", root);
    unlink(p);
    snprintf(p, sizeof p, "%s/intel-rapl:0:0", root);
    rmdir(p);
    snprintf(p, sizeof p, "%s/intel-rapl:0", root);
    rmdir(p);
    rmdir(root);
}

static void test_throttle_names(void)
{
    char b[256];
    size_t n = fw_throttle_reasons_string(0, b, sizeof b);
    CHECK(strcmp(b, "none") == 0 && n == 4, "0 -> '%s'", b);
    fw_throttle_reasons_string(FW_THROTTLE_GPU_IDLE, b, sizeof b);
    CHECK(strcmp(b, "gpu_idle") == 0, "0x1 -> '%s'", b);
    fw_throttle_reasons_string(0x4 | 0x40 | 0x100, b, sizeof b);
    CHECK(strcmp(b, "sw_power_cap,hw_thermal,display_clocks") == 0, "0x144 -> '%s'", b);
    fw_throttle_reasons_string(0x8 | 0x10000, b, sizeof b);
    CHECK(strcmp(b, "hw_slowdown,0x10000") == 0, "unknown bit -> '%s'", b);
    const char *want[] = {"gpu_idle", "applications_clocks", "sw_power_cap", "hw_slowdown", "sync_boost",
                          "sw_thermal", "hw_thermal", "hw_power_brake", "display_clocks"};
    for (int i = 0; i < 9; i++) {
        const char *nm = fw_throttle_reason_name(1ull << i);
        CHECK(nm && strcmp(nm, want[i]) == 0, "bit %d -> %s", i, nm ? nm : "NULL");
    }
    CHECK(fw_throttle_reason_name(0x200) == NULL, "0x200 has a name");
    /* truncation: NUL-terminated, returns the wanted length */
    char small[8];
    n = fw_throttle_reasons_string(0x1ff, small, sizeof small);
    CHECK(strlen(small) == sizeof small - 1 && n > sizeof small, "truncated '%s' n %zu", small, n);
    n = fw_throttle_reasons_string(0x1ff, NULL, 0);
    CHECK(n == strlen("gpu_idle,applications_clocks,sw_power_cap,hw_slowdown,sync_boost,sw_thermal,hw_thermal,"
                      "hw_power_brake,display_clocks"),
          "length only %zu", n);
}

static void test_fake_readings(void)
{
    fw_tel_fake *f = fw_tel_fake_create(2, 1);
    fw_tel_source s = fw_tel_fake_source(f);
    fw_telemetry *t = NULL;
    CHECK(fw_telemetry_open_with_source(&t, &s, NULL) == FW_OK, "open fake");
    if (!t) return;
    CHECK(fw_telemetry_gpu_count(t) == 2, "fake count");
    fw_tel_fake_set_power(f, 1, 312.5);
    fw_tel_fake_set_temperature(f, 1, 71);
    fw_tel_fake_set_throttle(f, 1, FW_THROTTLE_SW_POWER_CAP);
    fw_gpu_reading r;
    CHECK(fw_telemetry_read(t, 1, &r) == FW_OK, "fake read");
    char b[64];
    fw_gpu_reading_format(&r, FW_TEL_POWER_INSTANT, b, sizeof b);
    CHECK(strcmp(b, "312.5 W") == 0, "power '%s'", b);
    fw_gpu_reading_format(&r, FW_TEL_TEMPERATURE, b, sizeof b);
    CHECK(strcmp(b, "71 C") == 0, "temp '%s'", b);
    fw_gpu_reading_format(&r, FW_TEL_THROTTLE, b, sizeof b);
    CHECK(strcmp(b, "sw_power_cap") == 0, "throttle '%s'", b);
    CHECK(r.gpu == 1, "gpu %d", r.gpu);

    /* PCI bus ids: NVML spelling out, either spelling in */
    char bus[64];
    CHECK(fw_telemetry_gpu_pci_bus_id(t, 1, bus, sizeof bus) == FW_OK && strcmp(bus, "00000000:11:00.0") == 0, "bus '%s'", bus);
    CHECK(fw_telemetry_gpu_for_pci_bus_id(t, "0000:11:00.0") == 1, "CUDA spelling");
    CHECK(fw_telemetry_gpu_for_pci_bus_id(t, "00000000:10:00.0") == 0, "NVML spelling");
    CHECK(fw_telemetry_gpu_for_pci_bus_id(t, "0000:3b:00.0") == -1, "unknown bus matched");
    CHECK(fw_telemetry_gpu_for_pci_bus_id(t, "cuda:0") == -1 && fw_telemetry_gpu_for_pci_bus_id(t, NULL) == -1, "garbage matched");
    CHECK(fw_telemetry_gpu_pci_bus_id(t, 2, bus, sizeof bus) == FW_ERR_INVALID_VALUE && strcmp(bus, "n/a") == 0, "bus of gpu 2");

    /* a source that lacks fields: those are n/a, never 0 */
    fw_tel_fake_set_valid(f, 1, FW_TEL_TEMPERATURE);
    fw_telemetry_read(t, 1, &r);
    CHECK(r.valid == FW_TEL_TEMPERATURE, "valid 0x%x", r.valid);
    fw_gpu_reading_format(&r, FW_TEL_POWER_INSTANT, b, sizeof b);
    CHECK(strcmp(b, "n/a") == 0, "missing power formats '%s'", b);
    fw_gpu_reading_format(&r, FW_TEL_ENERGY, b, sizeof b);
    CHECK(strcmp(b, "n/a") == 0, "missing energy formats '%s'", b);
    /* a device that fails outright */
    fw_tel_fake_set_fail(f, 1, 1);
    CHECK(fw_telemetry_read(t, 1, &r) == FW_ERR_DEVICE, "failed device");
    check_all_na(&r, "failed device");
    CHECK(fw_telemetry_read(t, 2, &r) == FW_ERR_INVALID_VALUE, "gpu out of range");
    CHECK(fw_telemetry_read(t, -3, &r) == FW_ERR_INVALID_VALUE, "negative gpu");
    fw_telemetry_close(t);
    fw_tel_fake_destroy(f);
}

/* Counter-based window on a manual clock: exact. */
static void test_window_counter(void)
{
    fw_tel_fake *f = fw_tel_fake_create(1, 1);
    fw_tel_source s = fw_tel_fake_source(f);
    fw_telemetry *t = NULL;
    fw_telemetry_open_with_source(&t, &s, NULL);
    if (!t) return;
    fw_tel_fake_set_cpu(f, 1, 50.0);
    fw_tel_fake_set_power(f, 0, 300.0);
    fw_tel_fake_advance(f, 5.0);
    fw_energy_window w;
    CHECK(fw_energy_begin(t, 0, &w) == FW_OK, "begin");
    fw_tel_fake_advance(f, 1.0);
    fw_tel_fake_set_power(f, 0, 500.0);
    fw_tel_fake_advance(f, 1.0);
    fw_status st = fw_energy_end(&w);
    CHECK(st == FW_OK && w.valid, "end %s", fw_status_string(st));
    CHECK(strcmp(w.source, "counter") == 0, "source %s", w.source);
    CHECK(fabs(w.seconds - 2.0) < 1e-9, "seconds %g", w.seconds);
    CHECK(fabs(w.joules - 800.0) < 1e-2, "joules %g, want 800", w.joules);
    CHECK(fabs(w.avg_w - 400.0) < 1e-2, "avg %g", w.avg_w);
    CHECK(w.peak_valid && fabs(w.peak_w - 500.0) < 1e-9, "peak %d %g", w.peak_valid, w.peak_w);
    CHECK(!w.sampled_valid, "sampled without a sampler");
    CHECK(w.cpu_valid && fabs(w.cpu_joules - 100.0) < 1e-6, "cpu %d %g", w.cpu_valid, w.cpu_joules);

    /* counter missing and no sampler: n/a, not zero */
    fw_tel_fake_set_valid(f, 0, 0x1ffu & ~FW_TEL_ENERGY);
    fw_energy_begin(t, 0, &w);
    fw_tel_fake_advance(f, 1.0);
    st = fw_energy_end(&w);
    CHECK(st == FW_ERR_UNSUPPORTED && !w.valid && strcmp(w.source, "n/a") == 0, "no counter, no sampler: %s %s",
          fw_status_string(st), w.source);
    /* counter appears only at the end: still n/a */
    fw_energy_begin(t, 0, &w);
    fw_tel_fake_set_valid(f, 0, 0x1ffu);
    fw_tel_fake_advance(f, 1.0);
    st = fw_energy_end(&w);
    CHECK(!w.valid, "counter only at the end gave %g J", w.joules);
    fw_telemetry_close(t);
    fw_tel_fake_destroy(f);
}

/* Real-clock fake with the sampler: ring order/capacity, sampled fallback and cross-check. */
static void test_sampler(void)
{
    fw_tel_fake *f = fw_tel_fake_create(1, 0);
    fw_tel_source s = fw_tel_fake_source(f);
    fw_telemetry *t = NULL;
    fw_telemetry_open_with_source(&t, &s, NULL);
    if (!t) return;
    CHECK(fw_telemetry_start_sampler(t, -1, 0) == FW_ERR_INVALID_VALUE, "negative period accepted");
    CHECK(fw_telemetry_start_sampler(t, 5, -2) == FW_ERR_INVALID_VALUE, "negative capacity accepted");
    fw_gpu_reading ring[64];
    CHECK(fw_telemetry_samples(t, 0, 0, ring, 64) == 0, "samples before start");

    /* small ring: never more than its capacity, oldest first, strictly increasing times */
    CHECK(fw_telemetry_start_sampler(t, 2, 16) == FW_OK, "start 2 ms / 16");
    sleep_s(0.15);
    int n = fw_telemetry_samples(t, 0, 0, ring, 64);
    CHECK(n == 16, "ring of 16 returned %d", n);
    int mono = 1;
    for (int i = 1; i < n; i++) mono &= ring[i].t_s > ring[i - 1].t_s;
    CHECK(mono, "sample times not increasing");
    CHECK(n > 0 && fw_telemetry_now(t) - ring[n - 1].t_s < 0.1, "newest sample is old");
    int m = fw_telemetry_samples(t, 0, 0, ring, 5);
    CHECK(m == 5, "max 5 returned %d", m);
    CHECK(fw_telemetry_stop_sampler(t) == FW_OK, "stop");
    long reads = fw_tel_fake_reads(f, 0);
    sleep_s(0.05);
    CHECK(fw_tel_fake_reads(f, 0) == reads, "sampler still reading after stop");
    CHECK(fw_telemetry_stop_sampler(t) == FW_OK, "second stop");

    /* 20 ms default period, counter off: the window falls back to the sampled integral */
    CHECK(fw_telemetry_start_sampler(t, 0, 0) == FW_OK, "start default");
    fw_tel_fake_set_power(f, 0, 200.0);
    fw_tel_fake_set_valid(f, 0, 0x1ffu & ~FW_TEL_ENERGY);
    sleep_s(0.05);
    fw_energy_window w;
    fw_energy_begin(t, 0, &w);
    sleep_s(0.6);
    fw_status st = fw_energy_end(&w);
    CHECK(st == FW_OK && w.valid && strcmp(w.source, "sampled") == 0, "sampled window: %s %s", fw_status_string(st),
          w.source);
    CHECK(w.samples >= 15 && w.samples <= 40, "samples in 0.6 s at 20 ms: %d", w.samples);
    CHECK(fabs(w.avg_w - 200.0) < 1.0, "sampled avg %g W, want 200", w.avg_w);
    CHECK(fabs(w.joules - 200.0 * w.seconds) < 0.02 * 200.0 * w.seconds, "sampled %g J over %g s", w.joules, w.seconds);
    printf("sampled window: %.3f J over %.3f s, %d samples, avg %.1f W\n", w.joules, w.seconds, w.samples, w.avg_w);

    /* counter back on, power stepping inside the window: counter is the answer, samples cross-check */
    fw_tel_fake_set_valid(f, 0, 0x1ffu);
    fw_energy_begin(t, 0, &w);
    sleep_s(0.3);
    fw_tel_fake_set_power(f, 0, 600.0);
    sleep_s(0.3);
    st = fw_energy_end(&w);
    CHECK(st == FW_OK && strcmp(w.source, "counter") == 0, "counter window %s", w.source);
    CHECK(w.sampled_valid && fabs(w.sampled_joules - w.joules) < 0.1 * w.joules, "cross-check %g vs %g J",
          w.sampled_joules, w.joules);
    CHECK(w.peak_valid && fabs(w.peak_w - 600.0) < 1e-9, "peak %g", w.peak_w);
    CHECK(w.avg_w > 300.0 && w.avg_w < 500.0, "avg %g", w.avg_w);
    printf("counter window: %.3f J (sampled %.3f J) over %.3f s, peak %.0f W\n", w.joules, w.sampled_joules, w.seconds,
           w.peak_w);
    fw_telemetry_stop_sampler(t);

    /* cool-down helpers */
    fw_tel_fake_set_power(f, 0, 82.0);
    double last = 0, mean = 0;
    int rc = fw_telemetry_wait_settled(t, 0, 80.0, 5.0, 0.2, 2.0, &last);
    CHECK(rc == 1 && fabs(last - 82.0) < 1e-9, "settled rc %d last %g", rc, last);
    fw_tel_fake_set_power(f, 0, 300.0);
    double t0 = fw_telemetry_now(t);
    rc = fw_telemetry_wait_settled(t, 0, 80.0, 5.0, 0.2, 0.3, &last);
    double took = fw_telemetry_now(t) - t0;
    CHECK(rc == 0 && last == 300.0 && took >= 0.3 && took < 1.0, "hot: rc %d last %g took %g", rc, last, took);
    CHECK(fw_telemetry_mean_power(t, 0, 0.2, &mean) == FW_OK && fabs(mean - 300.0) < 1e-9, "mean %g", mean);
    fw_tel_fake_set_valid(f, 0, FW_TEL_TEMPERATURE);
    rc = fw_telemetry_wait_settled(t, 0, 80.0, 5.0, 0.2, 0.2, &last);
    CHECK(rc == -1, "no power: rc %d", rc);
    CHECK(fw_telemetry_mean_power(t, 0, 0.1, &mean) == FW_ERR_UNSUPPORTED, "mean without power");
    CHECK(fw_telemetry_wait_settled(t, 5, 80.0, 5.0, 0.2, 0.2, &last) == -1, "bad gpu");
    fw_telemetry_close(t);
    fw_tel_fake_destroy(f);
}

int main(void)
{
    test_absent();
    test_default_open();
    test_powercap();
    test_throttle_names();
    test_fake_readings();
    test_window_counter();
    test_sampler();
    printf("%d passed, %d failed\n", fwt_passed, fwt_failed);
    return fwt_failed ? 1 : 0;
}
