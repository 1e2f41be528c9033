/* NVML as a telemetry source, loaded at run time: dlopen("libnvidia-ml.so.1") and our own minimal
 * declarations (nvml.h is not needed at build time). A function the driver lacks, or a query a
 * device does not support, leaves its field n/a. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "telemetry_internal.h"

/* ---- the part of nvml.h we use (ABI-stable since NVML 10/11) --------------------------------- */
typedef int nvmlReturn_t; /* NVML_SUCCESS = 0 */
typedef struct nvmlDevice_opaque *nvmlDevice_t;
typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvml_utilization;
typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvml_value;
typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    int valueType; /* nvmlValueType_t */
    nvmlReturn_t nvmlReturn;
    nvml_value value;
} nvml_field_value;

#define NVML_SUCCESS 0
#define NVML_TEMPERATURE_GPU 0
#define NVML_CLOCK_SM 1
#define NVML_CLOCK_MEM 2
#define NVML_FI_DEV_POWER_AVERAGE 185
#define NVML_FI_DEV_POWER_INSTANT 186
enum { VT_DOUBLE = 0, VT_UINT = 1, VT_ULONG = 2, VT_ULLONG = 3, VT_SLLONG = 4, VT_SINT = 5, VT_USHORT = 6 };

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvml_pci_info;

typedef nvmlReturn_t (*fn_void)(void);
typedef const char *(*fn_errstr)(nvmlReturn_t);
typedef nvmlReturn_t (*fn_count)(unsigned int *);
typedef nvmlReturn_t (*fn_handle)(unsigned int, nvmlDevice_t *);
typedef nvmlReturn_t (*fn_name)(nvmlDevice_t, char *, unsigned int);
typedef nvmlReturn_t (*fn_fields)(nvmlDevice_t, int, nvml_field_value *);
typedef nvmlReturn_t (*fn_uint)(nvmlDevice_t, unsigned int *);
typedef nvmlReturn_t (*fn_ull)(nvmlDevice_t, unsigned long long *);
typedef nvmlReturn_t (*fn_temp)(nvmlDevice_t, int, unsigned int *);
typedef nvmlReturn_t (*fn_clock)(nvmlDevice_t, int, unsigned int *);
typedef nvmlReturn_t (*fn_util)(nvmlDevice_t, nvml_utilization *);
typedef nvmlReturn_t (*fn_pci)(nvmlDevice_t, nvml_pci_info *);

#define NVML_MAX_GPUS 64

typedef struct nvml_state {
    void *lib;
    fn_void shutdown;
    fn_errstr error_string;
    fn_name get_name;
    fn_fields get_fields;
    fn_uint get_power_usage;
    fn_ull get_total_energy;
    fn_temp get_temperature;
    fn_clock get_clock;
    fn_util get_utilization;
    fn_ull get_reasons;
    fn_uint get_enforced_limit;
    fn_pci get_pci;
    unsigned count;
    nvmlDevice_t dev[NVML_MAX_GPUS];
} nvml_state;

/* dlsym into a function pointer without the object/function pointer cast warning */
static void *sym(void *lib, const char *name) { return dlsym(lib, name); }
#define LOAD(dst, name)                   \
    do {                                  \
        void *p_ = sym(s->lib, name);     \
        memcpy(&(dst), &p_, sizeof p_);   \
    } while (0)

static const char *errstr(const nvml_state *s, nvmlReturn_t rc)
{
    const char *e = s->error_string ? s->error_string(rc) : NULL;
    return e ? e : "unknown NVML error";
}

static int nvml_gpu_count(void *state) { return (int)((nvml_state *)state)->count; }

static int nvml_gpu_name(void *state, int gpu, char *buf, size_t len)
{
    nvml_state *s = (nvml_state *)state;
    if (!s->get_name || gpu < 0 || (unsigned)gpu >= s->count) return -1;
    char name[96];
    if (s->get_name(s->dev[gpu], name, sizeof name) != NVML_SUCCESS) return -1;
    name[sizeof name - 1] = 0;
    snprintf(buf, len, "%s", name);
    return 0;
}

static int nvml_gpu_pci(void *state, int gpu, char *buf, size_t len)
{
    nvml_state *s = (nvml_state *)state;
    if (!s->get_pci || gpu < 0 || (unsigned)gpu >= s->count) return -1;
    nvml_pci_info pi;
    memset(&pi, 0, sizeof pi);
    if (s->get_pci(s->dev[gpu], &pi) != NVML_SUCCESS) return -1;
    pi.busId[sizeof pi.busId - 1] = 0;
    snprintf(buf, len, "%s", pi.busId);
    return 0;
}

static int field_as_double(const nvml_field_value *f, double *out)
{
    if (f->nvmlReturn != NVML_SUCCESS) return 0;
    switch (f->valueType) {
    case VT_DOUBLE: *out = f->value.dVal; return 1;
    case VT_UINT: *out = (double)f->value.uiVal; return 1;
    case VT_ULONG: *out = (double)f->value.ulVal; return 1;
    case VT_ULLONG: *out = (double)f->value.ullVal; return 1;
    case VT_SLLONG: *out = (double)f->value.sllVal; return 1;
    case VT_SINT: *out = (double)f->value.siVal; return 1;
    case VT_USHORT: *out = (double)f->value.usVal; return 1;
    default: return 0;
    }
}

static int nvml_read_gpu(void *state, int gpu, fw_gpu_reading *r)
{
    nvml_state *s = (nvml_state *)state;
    if (gpu < 0 || (unsigned)gpu >= s->count) return -1;
    nvmlDevice_t d = s->dev[gpu];
    unsigned u = 0;
    unsigned long long ull = 0;
    if (s->get_fields) {
        nvml_field_value f[2];
        memset(f, 0, sizeof f);
        f[0].fieldId = NVML_FI_DEV_POWER_INSTANT;
        f[1].fieldId = NVML_FI_DEV_POWER_AVERAGE;
        if (s->get_fields(d, 2, f) == NVML_SUCCESS) {
            double mw;
            if (field_as_double(&f[0], &mw)) {
                r->power_instant_w = mw / 1000.0;
                r->valid |= FW_TEL_POWER_INSTANT;
            }
            if (field_as_double(&f[1], &mw)) {
                r->power_average_w = mw / 1000.0;
                r->valid |= FW_TEL_POWER_AVERAGE;
            }
        }
    }
    if (!(r->valid & FW_TEL_POWER_AVERAGE) && s->get_power_usage && s->get_power_usage(d, &u) == NVML_SUCCESS) {
        r->power_average_w = u / 1000.0;
        r->valid |= FW_TEL_POWER_AVERAGE;
    }
    if (s->get_total_energy && s->get_total_energy(d, &ull) == NVML_SUCCESS) {
        r->energy_mj = (uint64_t)ull;
        r->valid |= FW_TEL_ENERGY;
    }
    if (s->get_temperature && s->get_temperature(d, NVML_TEMPERATURE_GPU, &u) == NVML_SUCCESS) {
        r->temperature_c = (double)u;
        r->valid |= FW_TEL_TEMPERATURE;
    }
    if (s->get_clock && s->get_clock(d, NVML_CLOCK_SM, &u) == NVML_SUCCESS) {
        r->sm_clock_mhz = u;
        r->valid |= FW_TEL_SM_CLOCK;
    }
    if (s->get_clock && s->get_clock(d, NVML_CLOCK_MEM, &u) == NVML_SUCCESS) {
        r->mem_clock_mhz = u;
        r->valid |= FW_TEL_MEM_CLOCK;
    }
    nvml_utilization ut;
    if (s->get_utilization && s->get_utilization(d, &ut) == NVML_SUCCESS) {
        r->util_gpu_pct = ut.gpu;
        r->util_mem_pct = ut.memory;
        r->valid |= FW_TEL_UTILIZATION;
    }
    if (s->get_reasons && s->get_reasons(d, &ull) == NVML_SUCCESS) {
        r->throttle_reasons = (uint64_t)ull;
        r->valid |= FW_TEL_THROTTLE;
    }
    if (s->get_enforced_limit && s->get_enforced_limit(d, &u) == NVML_SUCCESS) {
        r->power_limit_w = u / 1000.0;
        r->valid |= FW_TEL_POWER_LIMIT;
    }
    return r->valid ? 0 : -1;
}

static void nvml_close(void *state)
{
    nvml_state *s = (nvml_state *)state;
    if (!s) return;
    if (s->shutdown) s->shutdown();
    if (s->lib) dlclose(s->lib);
    fw_free(s);
}

int fw_tel_nvml_open(const char *lib, fw_tel_source *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    const char *path = lib ? lib : "libnvidia-ml.so.1";
    nvml_state *s = (nvml_state *)fw_calloc(1, sizeof *s);
    if (!s) {
        snprintf(why, why_len, "out of memory");
        return FW_TEL_OPEN_OOM;
    }
    s->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!s->lib) {
        const char *e = dlerror();
        snprintf(why, why_len, "NVML not found: %s", e ? e : path);
        fw_free(s);
        return -1;
    }
    fn_void init = NULL;
    fn_count get_count = NULL;
    fn_handle get_handle = NULL;
    LOAD(init, "nvmlInit_v2");
    if (!init) LOAD(init, "nvmlInit");
    LOAD(s->shutdown, "nvmlShutdown");
    LOAD(s->error_string, "nvmlErrorString");
    LOAD(get_count, "nvmlDeviceGetCount_v2");
    if (!get_count) LOAD(get_count, "nvmlDeviceGetCount");
    LOAD(get_handle, "nvmlDeviceGetHandleByIndex_v2");
    if (!get_handle) LOAD(get_handle, "nvmlDeviceGetHandleByIndex");
    LOAD(s->get_name, "nvmlDeviceGetName");
    LOAD(s->get_fields, "nvmlDeviceGetFieldValues");
    LOAD(s->get_power_usage, "nvmlDeviceGetPowerUsage");
    LOAD(s->get_total_energy, "nvmlDeviceGetTotalEnergyConsumption");
    LOAD(s->get_temperature, "nvmlDeviceGetTemperature");
    LOAD(s->get_clock, "nvmlDeviceGetClockInfo");
    LOAD(s->get_utilization, "nvmlDeviceGetUtilizationRates");
    LOAD(s->get_reasons, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!s->get_reasons) LOAD(s->get_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    LOAD(s->get_enforced_limit, "nvmlDeviceGetEnforcedPowerLimit");
    LOAD(s->get_pci, "nvmlDeviceGetPciInfo_v3");
    if (!init || !get_count || !get_handle) {
        snprintf(why, why_len, "%s lacks nvmlInit/nvmlDeviceGetCount/nvmlDeviceGetHandleByIndex", path);
        dlclose(s->lib);
        fw_free(s);
        return -1;
    }
    nvmlReturn_t rc = init();
    if (rc != NVML_SUCCESS) {
        snprintf(why, why_len, "nvmlInit failed: %s", errstr(s, rc));
        dlclose(s->lib);
        fw_free(s);
        return -1;
    }
    unsigned n = 0;
    rc = get_count(&n);
    if (rc != NVML_SUCCESS || n == 0) {
        snprintf(why, why_len, "%s", rc != NVML_SUCCESS ? errstr(s, rc) : "NVML sees no GPU");
        nvml_close(s);
        return -1;
    }
    if (n > NVML_MAX_GPUS) n = NVML_MAX_GPUS;
    for (unsigned i = 0; i < n; i++) {
        rc = get_handle(i, &s->dev[i]);
        if (rc != NVML_SUCCESS) {
            snprintf(why, why_len, "nvmlDeviceGetHandleByIndex(%u): %s", i, errstr(s, rc));
            nvml_close(s);
            return -1;
        }
    }
    s->count = n;
    out->name = "nvml";
    out->state = s;
    out->gpu_count = nvml_gpu_count;
    out->gpu_name = nvml_gpu_name;
    out->gpu_pci = nvml_gpu_pci;
    out->read_gpu = nvml_read_gpu;
    out->read_cpu_energy = NULL;
    out->now = NULL;
    out->close = nvml_close;
    return 0;
}
