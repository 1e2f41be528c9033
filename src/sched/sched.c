/* Which backend and configuration runs a problem (see sched.h): a named backend; or, with "auto",
 * the policy's pick from the tuning table's measurements of the problem's bucket, moved at run time
 * by the controller under a power cap or temperature limit; or the first usable backend in registry
 * order. Nothing here knows a backend by name: every backend is reached through the registry. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "sched.h"
#include "controller.h"
#ifdef FW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define SLOTS 8
#define MAX_DEV 16

typedef struct sched_slot {
    int used;
    fw_tune_key key;
    int device_index;
    fw_dtype dtype;
    fw_precision requested;
    int n;                                   /* candidates (frontier points); 0 = no usable entry */
    const fw_backend *b[FW_CTRL_MAX_POINTS];
    fw_config cfg[FW_CTRL_MAX_POINTS];
    fw_frontier_point pts[FW_CTRL_MAX_POINTS];
    int pick;                                /* static choice (index into pts) */
    int has_ctrl;
    fw_controller ctrl;
    char note[200];                          /* why no entry / why the policy fell back */
} sched_slot;

struct fw_sched {
    char tuning_path[1024]; /* the knobs' FLASHWATT_TUNING, "" = the default path */
    char home[1024];        /* $HOME as the knobs read it */
    int table_loaded;
    fw_tuning_table table;
    char table_path[1024];
    char table_msg[1400];
    fw_telemetry *tel;
    int tel_tried;
    int nvml_gpu[MAX_DEV]; /* NVML index of each CUDA ordinal; -2 = not looked up yet */
    char devname[MAX_DEV][64];
    int next_slot;
    sched_slot slots[SLOTS];
    void *event;           /* cudaEvent_t of the last paced-path launch */
    int event_device, event_recorded;
    char last[320];
};

static const char *device_kind_name(fw_device_kind k) { return k == FW_DEVICE_CUDA ? "cuda" : "cpu"; }

/* ---- names, keys, path ------------------------------------------------------------------- */
static void cuda_name(int index, char *buf, size_t len)
{
    snprintf(buf, len, "cuda:%d", index);
#ifdef FW_HAVE_CUDA
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, index) == cudaSuccess) snprintf(buf, len, "%.63s", prop.name);
    else (void)cudaGetLastError();
#endif
}

void fw_sched_device_name(fw_device d, char *buf, size_t len)
{
    if (d.kind == FW_DEVICE_CUDA) cuda_name(d.index, buf, len);
    else snprintf(buf, len, "cpu");
}

static int table_path(const char *tuning_path, const char *home, char *buf, size_t len)
{
    if (tuning_path[0]) {
        snprintf(buf, len, "%s", tuning_path);
        return 0;
    }
    if (!home[0]) {
        snprintf(buf, len, "(no $HOME and no $FLASHWATT_TUNING)");
        return -1;
    }
    char name[64] = "cpu";
    if (fw_cuda_device_count() > 0) cuda_name(0, name, sizeof name);
    for (char *c = name; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '-' && *c != '_' && *c != '.') *c = '-';
    snprintf(buf, len, "%s/.cache/flashwatt/tuning-%s.txt", home, name);
    return 0;
}

int fw_sched_table_path(const fw_knobs *knobs, char *buf, size_t len)
{
    if (!knobs) knobs = &fw_knobs_defaults;
    return table_path(knobs->tuning_path, knobs->home, buf, len);
}

static const char *state_device_name(fw_sched *s, fw_device d, char *buf, size_t len)
{
    if (d.kind != FW_DEVICE_CUDA || d.index < 0 || d.index >= MAX_DEV) {
        fw_sched_device_name(d, buf, len);
        return buf;
    }
    if (!s->devname[d.index][0]) cuda_name(d.index, s->devname[d.index], sizeof s->devname[d.index]);
    snprintf(buf, len, "%s", s->devname[d.index]);
    return buf;
}

static fw_tune_key key_named(const fw_problem *p, const char *name)
{
    fw_tune_key k = fw_tune_key_make(name, p->dtype, (int)p->head_dim, p->causal, p->batch * p->heads, p->seqlen_q,
                                     p->seqlen_k);
    k.group = p->group > 1 ? p->group : 1;
    k.call = p->kind == FW_CALL_VARLEN    ? FW_TUNE_VARLEN
             : p->kind != FW_CALL_KVCACHE ? FW_TUNE_DENSE
             : p->block_table             ? FW_TUNE_PAGED
                                          : FW_TUNE_CACHE;
    return k;
}

fw_tune_key fw_sched_key(const fw_problem *p)
{
    char name[64];
    fw_sched_device_name(p->device, name, sizeof name);
    return key_named(p, name);
}

/* ---- pure selection -------------------------------------------------------------------------- */
int fw_sched_precision_allowed(const fw_tune_entry *e, fw_dtype dtype, fw_precision requested, const fw_policy *policy)
{
    if (e->precision == requested) return 1;
    if (dtype != FW_F32 || e->precision == FW_PRECISION_EXACT) return 0; /* never less exact than asked */
    if (!policy || !policy->allow_reduced_precision) return 0;
    return e->err_valid && e->err <= policy->error_budget;
}

static int by_ms(const fw_tuning_table *t, int a, int b)
{
    if (t->e[a].ms != t->e[b].ms) return t->e[a].ms < t->e[b].ms;
    return a < b;
}

int fw_sched_select(const fw_tuning_table *t, const fw_tune_key *k, fw_dtype dtype, fw_precision requested,
                    const fw_policy *policy, int (*usable)(const fw_tune_entry *e, void *arg), void *arg, int *cand,
                    int *ncand, char *why, size_t why_len)
{
    int c[FW_CTRL_MAX_POINTS];
    int n = 0, seen = 0, prec_out = 0;
    if (ncand) *ncand = 0;
    if (!t || !k || !policy) {
        snprintf(why, why_len, "no table, key or policy");
        return -1;
    }
    for (int i = 0; i < t->n; i++) {
        const fw_tune_entry *e = &t->e[i];
        if (!fw_tune_key_equal(&e->key, k)) continue;
        seen++;
        if (!fw_sched_precision_allowed(e, dtype, requested, policy)) {
            prec_out++;
            continue;
        }
        if (usable && !usable(e, arg)) continue;
        if (n < FW_CTRL_MAX_POINTS) {
            c[n++] = i;
        } else { /* keep the fastest FW_CTRL_MAX_POINTS */
            int worst = 0;
            for (int j = 1; j < n; j++)
                if (by_ms(t, c[worst], c[j])) worst = j;
            if (by_ms(t, i, c[worst])) c[worst] = i;
        }
    }
    if (n == 0) {
        if (!seen) snprintf(why, why_len, "no tuning table entry for this bucket");
        else snprintf(why, why_len, "%d entr%s for this bucket, none usable (%d in a precision not allowed)", seen,
                      seen == 1 ? "y" : "ies", prec_out);
        return -1;
    }
    fw_frontier_point pts[FW_CTRL_MAX_POINTS];
    for (int j = 0; j < n; j++) {
        const fw_tune_entry *e = &t->e[c[j]];
        memset(&pts[j], 0, sizeof pts[j]);
        snprintf(pts[j].name, sizeof pts[j].name, "%.31s %.31s", e->backend, e->config[0] ? e->config : "default");
        pts[j].tag = c[j];
        pts[j].ms = e->ms;
        pts[j].j_per_call = e->j_per_call;
        pts[j].avg_w = e->avg_w;
    }
    if (cand) memcpy(cand, c, (size_t)n * sizeof *c);
    if (ncand) *ncand = n;
    double gap = 0;
    int pick = fw_policy_pick(pts, n, policy, NULL, &gap, why, why_len);
    return pick < 0 ? -1 : c[pick];
}

/* ---- state ----------------------------------------------------------------------------------- */
fw_sched *fw_sched_create(const fw_knobs *knobs)
{
    fw_sched *s = (fw_sched *)fw_calloc(1, sizeof *s);
    if (!s) return NULL;
    if (!knobs) knobs = &fw_knobs_defaults;
    snprintf(s->tuning_path, sizeof s->tuning_path, "%s", knobs->tuning_path);
    snprintf(s->home, sizeof s->home, "%s", knobs->home);
    for (int i = 0; i < MAX_DEV; i++) s->nvml_gpu[i] = -2;
    fw_tune_init(&s->table);
    return s;
}

void fw_sched_destroy(fw_sched *s)
{
    if (!s) return;
#ifdef FW_HAVE_CUDA
    if (s->event) {
        int prev = -1;
        if (cudaGetDevice(&prev) == cudaSuccess) {
            cudaSetDevice(s->event_device);
            cudaEventDestroy((cudaEvent_t)s->event);
            cudaSetDevice(prev);
        }
        (void)cudaGetLastError();
    }
#endif
    if (s->tel) fw_telemetry_close(s->tel);
    fw_tune_free(&s->table);
    fw_free(s);
}

void fw_sched_policy_changed(fw_sched *s)
{
    if (!s) return;
    memset(s->slots, 0, sizeof s->slots);
    s->next_slot = 0;
}

/* Reads the table on the first call that needs it. A table that cannot be used leaves the built-in
 * defaults (with a warning); running out of memory is the call's error, and the next call tries again. */
static fw_status load_table(fw_sched *s)
{
    if (s->table_loaded) return FW_OK;
    char why[1200] = "";
    if (table_path(s->tuning_path, s->home, s->table_path, sizeof s->table_path) != 0) {
        s->table_loaded = 1;
        snprintf(s->table_msg, sizeof s->table_msg, "no tuning table path %s: built-in defaults", s->table_path);
        return FW_OK;
    }
    fw_status st = fw_tune_load(&s->table, s->table_path, why, sizeof why);
    if (st == FW_ERR_OUT_OF_MEMORY) {
        fw_tune_free(&s->table);
        fw_tune_init(&s->table);
        snprintf(s->table_msg, sizeof s->table_msg, "no memory to read the tuning table %s", s->table_path);
        return st;
    }
    s->table_loaded = 1;
    if (st != FW_OK) {
        static atomic_int warned; /* once per process, whichever context finds it first */
        fw_tune_free(&s->table);
        fw_tune_init(&s->table);
        snprintf(s->table_msg, sizeof s->table_msg, "tuning table unusable, built-in defaults in use: %s", why);
        if (!atomic_exchange(&warned, 1)) fprintf(stderr, "flashwatt: %s\n", s->table_msg);
    } else if (s->table.n == 0) {
        snprintf(s->table_msg, sizeof s->table_msg, "%s: built-in defaults (registry order)",
                 why[0] ? why : "the tuning table is empty");
    } else {
        snprintf(s->table_msg, sizeof s->table_msg, "loaded %d entr%s from %s", s->table.n, s->table.n == 1 ? "y" : "ies",
                 s->table_path);
    }
    return FW_OK;
}

const char *fw_sched_table_status(fw_sched *s)
{
    if (!s) return "no scheduler";
    (void)load_table(s); /* its message says what happened */
    return s->table_msg;
}

const char *fw_sched_last_choice(const fw_sched *s) { return s ? s->last : ""; }

/* ---- telemetry and pacing -------------------------------------------------------------------- */
static int nvml_index(fw_sched *s, int cuda_index)
{
    if (!s->tel_tried) {
        s->tel_tried = 1;
        if (fw_telemetry_open(&s->tel) != FW_OK) s->tel = NULL;
    }
    if (!s->tel || cuda_index < 0 || cuda_index >= MAX_DEV) return -1;
    if (s->nvml_gpu[cuda_index] == -2) {
        int g = -1;
#ifdef FW_HAVE_CUDA
        char bus[64];
        if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, cuda_index) == cudaSuccess)
            g = fw_telemetry_gpu_for_pci_bus_id(s->tel, bus);
        else (void)cudaGetLastError();
#endif
        if (g < 0 && cuda_index < fw_telemetry_gpu_count(s->tel)) g = cuda_index;
        s->nvml_gpu[cuda_index] = g;
    }
    return s->nvml_gpu[cuda_index];
}

/* The gap must be device idle: wait for the previous launch (its event), then sleep. */
static void pace(fw_sched *s, const fw_controller *c)
{
    if (!(fw_ctrl_gap_us(c) > 0)) return;
#ifdef FW_HAVE_CUDA
    if (s->event && s->event_recorded) {
        if (cudaEventSynchronize((cudaEvent_t)s->event) != cudaSuccess) (void)cudaGetLastError();
    }
#else
    (void)s;
#endif
    fw_ctrl_sleep_gap(c);
}

void fw_sched_after_launch(fw_sched *s, const fw_sched_request *rq, const fw_problem *p)
{
#ifdef FW_HAVE_CUDA
    if (!s || !rq || !p || p->device.kind != FW_DEVICE_CUDA) return;
    int any_ctrl = 0;
    for (int i = 0; i < SLOTS; i++) any_ctrl |= s->slots[i].used && s->slots[i].has_ctrl;
    if (!any_ctrl) return;
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    if (prev != p->device.index) cudaSetDevice(p->device.index);
    if (s->event && s->event_device != p->device.index) {
        cudaSetDevice(s->event_device);
        cudaEventDestroy((cudaEvent_t)s->event);
        cudaSetDevice(p->device.index);
        s->event = NULL;
        s->event_recorded = 0;
    }
    if (!s->event) {
        cudaEvent_t ev;
        if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess) {
            s->event = (void *)ev;
            s->event_device = p->device.index;
        }
    }
    if (s->event) s->event_recorded = cudaEventRecord((cudaEvent_t)s->event, (cudaStream_t)rq->stream) == cudaSuccess;
    (void)cudaGetLastError();
    if (prev != p->device.index) cudaSetDevice(prev);
#else
    (void)s;
    (void)rq;
    (void)p;
#endif
}

/* ---- the table path of dispatch ------------------------------------------------------------- */
typedef struct usable_arg {
    const fw_problem *p;
    const fw_backend *b;
    fw_config cfg;
} usable_arg;

/* Is the entry's backend + configuration runnable for p now? Fills a->b and a->cfg. */
static int entry_usable(const fw_tune_entry *e, void *argp)
{
    usable_arg *a = (usable_arg *)argp;
    char why[256];
    const fw_backend *b = fw_registry_find(e->backend);
    if (!b || b->device != a->p->device.kind || !b->available(why, sizeof why)) return 0;
    fw_problem pp = *a->p;
    pp.precision = e->precision;
    if (!b->supports(&pp, why, sizeof why)) return 0;
    fw_config all[FW_MAX_CONFIGS];
    int n = b->configs ? b->configs(&pp, all, FW_MAX_CONFIGS) : 0;
    memset(&a->cfg, 0, sizeof a->cfg);
    if (e->config[0]) {
        int found = -1;
        for (int i = 0; i < n && found < 0; i++)
            if (strcmp(all[i].name, e->config) == 0) found = i;
        if (found < 0) return 0; /* a stale entry: the backend no longer has this configuration */
        a->cfg = all[found];
    } else if (n >= 1) {
        a->cfg = all[0];
    }
    a->cfg.precision = e->precision;
    a->b = b;
    return 1;
}

static sched_slot *build_slot(fw_sched *s, const fw_policy *pol, const fw_problem *p, const fw_tune_key *k)
{
    sched_slot *sl = &s->slots[s->next_slot];
    s->next_slot = (s->next_slot + 1) % SLOTS;
    memset(sl, 0, sizeof *sl);
    sl->used = 1;
    sl->key = *k;
    sl->device_index = p->device.index;
    sl->dtype = p->dtype;
    sl->requested = p->precision;
    int n = 0;
    char why[256] = "";
    int pick = fw_sched_select(&s->table, k, p->dtype, p->precision, pol, NULL, NULL, NULL, NULL, why,
                               sizeof why);
    (void)pick;
    /* gather the usable candidates with their resolved configurations */
    for (int i = 0; i < s->table.n && n < FW_CTRL_MAX_POINTS; i++) {
        const fw_tune_entry *e = &s->table.e[i];
        if (!fw_tune_key_equal(&e->key, k) || !fw_sched_precision_allowed(e, p->dtype, p->precision, pol))
            continue;
        usable_arg a;
        memset(&a, 0, sizeof a);
        a.p = p;
        if (!entry_usable(e, &a)) continue;
        sl->b[n] = a.b;
        sl->cfg[n] = a.cfg;
        fw_frontier_point *pt = &sl->pts[n];
        memset(pt, 0, sizeof *pt);
        const char *pn = fw_precision_name(e->precision);
        const int tag = e->precision != FW_PRECISION_EXACT && !strstr(e->config, pn);
        snprintf(pt->name, sizeof pt->name, "%.24s %.24s%s%s", e->backend, e->config[0] ? e->config : "default",
                 tag ? " " : "", tag ? pn : "");
        pt->tag = i;
        pt->ms = e->ms;
        pt->j_per_call = e->j_per_call;
        pt->avg_w = e->avg_w;
        n++;
    }
    sl->n = n;
    if (n == 0) {
        snprintf(sl->note, sizeof sl->note, "%.190s", why[0] ? why : "no usable tuning table entry for this bucket");
        return sl;
    }
    /* the loop needs this GPU's power / temperature readings; without them the static plan runs */
    const int dynamic = (pol->power_cap_w > 0 || pol->temperature_limit_c > 0) && p->device.kind == FW_DEVICE_CUDA &&
                        nvml_index(s, p->device.index) >= 0;
    double gap = 0;
    if (dynamic && fw_ctrl_init(&sl->ctrl, sl->pts, n, pol, NULL, why, sizeof why) == FW_OK) {
        sl->has_ctrl = 1;
        sl->pick = fw_ctrl_choice(&sl->ctrl);
        snprintf(sl->note, sizeof sl->note, "controller");
        return sl;
    }
    int pk = fw_policy_pick(sl->pts, n, pol, NULL, &gap, why, sizeof why);
    if (pk >= 0) {
        sl->pick = pk;
        snprintf(sl->note, sizeof sl->note, "%s%s",
                 pol->objective == FW_OBJECTIVE_MIN_ENERGY ? "least energy"
                 : pol->power_cap_w > 0                    ? "fastest under the cap"
                                                           : "fastest",
                 dynamic ? "" : (pol->power_cap_w > 0 || pol->temperature_limit_c > 0) ? ", static (no GPU telemetry loop)" : "");
        return sl;
    }
    /* the policy needs measurements the table lacks (e.g. joules without NVML): fastest */
    fw_policy fast = fw_policy_default();
    pk = fw_policy_pick(sl->pts, n, &fast, NULL, &gap, NULL, 0);
    sl->pick = pk >= 0 ? pk : 0;
    snprintf(sl->note, sizeof sl->note, "fastest (policy not applicable: %.150s)", why);
    return sl;
}

static sched_slot *find_slot(fw_sched *s, const fw_policy *pol, const fw_problem *p, const fw_tune_key *k)
{
    for (int i = 0; i < SLOTS; i++) {
        sched_slot *sl = &s->slots[i];
        if (sl->used && sl->device_index == p->device.index && sl->dtype == p->dtype &&
            sl->requested == p->precision && fw_tune_key_equal(&sl->key, k))
            return sl;
    }
    return build_slot(s, pol, p, k);
}

/* 1 with *b and *cfg from the table, 0 to fall back to registry order, -1 when the table could not
 * be read for want of memory. */
static int choose_from_table(fw_sched *s, const fw_policy *pol, const fw_problem *p, const fw_backend **b,
                             fw_config *cfg)
{
    if (load_table(s) != FW_OK) return -1;
    if (s->table.n == 0) {
        snprintf(s->last, sizeof s->last, "registry order (%.280s)", s->table_msg);
        return 0;
    }
    /* the bucket has no window dimension: only plain and causal masks */
    const int plain_or_causal = !p->has_window || (p->causal && p->window_left >= FW_UNBOUNDED);
    if (!plain_or_causal) {
        snprintf(s->last, sizeof s->last, "registry order (sliding windows are not in the tuning table)");
        return 0;
    }
    char name[64];
    fw_tune_key k = key_named(p, state_device_name(s, p->device, name, sizeof name)); /* cached name */
    sched_slot *sl = find_slot(s, pol, p, &k);
    if (sl->n == 0) {
        snprintf(s->last, sizeof s->last, "registry order (%.280s)", sl->note);
        return 0;
    }
    int i = sl->pick;
    double gap = 0;
    if (sl->has_ctrl) {
        const int gpu = nvml_index(s, p->device.index);
        if (gpu >= 0) fw_ctrl_tick(&sl->ctrl, s->tel, gpu);
        i = fw_ctrl_choice(&sl->ctrl);
        gap = fw_ctrl_gap_us(&sl->ctrl);
        pace(s, &sl->ctrl);
    }
    *b = sl->b[i];
    *cfg = sl->cfg[i];
    if (sl->has_ctrl)
        snprintf(s->last, sizeof s->last, "table: %s (controller: rung %d/%d, gap %.0f us; %.120s)", sl->pts[i].name,
                 sl->ctrl.rung, sl->ctrl.n_rungs, gap, sl->ctrl.reason);
    else
        snprintf(s->last, sizeof s->last, "table: %s (%s)", sl->pts[i].name, sl->note);
    return 1;
}

/* ---- dispatch -------------------------------------------------------------------------------- */
/* The backend's first configuration (its heuristic's choice): asked for alone, since listing the whole search
 * space on every call costs the host microseconds. */
static void default_config(const fw_backend *b, const fw_problem *p, fw_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    if (b->configs && b->configs(p, cfg, 1) < 1) memset(cfg, 0, sizeof *cfg);
    cfg->precision = p->precision;
}

const fw_backend *fw_sched_choose(fw_sched *s, const fw_sched_request *rq, const fw_problem *p, fw_pass pass,
                                  fw_config *cfg, fw_status *st, char *msg, size_t msg_len)
{
    char why[512];
    if (strcmp(rq->backend, "auto") != 0) {
        const fw_backend *b = fw_registry_find(rq->backend);
        if (!b) {
            *st = FW_ERR_NO_BACKEND;
            snprintf(msg, msg_len, "backend '%s' is not compiled into this build", rq->backend);
            return NULL;
        }
        if (b->device != p->device.kind) {
            *st = FW_ERR_UNSUPPORTED;
            snprintf(msg, msg_len, "backend '%s' runs on %s but the tensors are on %s", b->name,
                     device_kind_name(b->device), device_kind_name(p->device.kind));
            return NULL;
        }
        if (!b->available(why, sizeof why)) {
            *st = FW_ERR_UNSUPPORTED;
            snprintf(msg, msg_len, "backend '%s' is not usable here: %s", b->name, why);
            return NULL;
        }
        if (!b->supports(p, why, sizeof why)) {
            *st = FW_ERR_UNSUPPORTED;
            snprintf(msg, msg_len, "backend '%s' cannot run this problem: %s", b->name, why);
            return NULL;
        }
        if (pass == FW_PASS_BACKWARD && !b->backward) {
            *st = FW_ERR_NOT_IMPLEMENTED;
            snprintf(msg, msg_len, "backend '%s' has no backward pass yet", b->name);
            return NULL;
        }
        default_config(b, p, cfg);
        return b;
    }
    if (pass == FW_PASS_FORWARD) {
        const fw_backend *b = NULL;
        const int from_table = s ? choose_from_table(s, rq->policy, p, &b, cfg) : 0;
        if (from_table > 0) return b;
        if (from_table < 0) {
            *st = FW_ERR_OUT_OF_MEMORY;
            snprintf(msg, msg_len, "%s", s->table_msg);
            return NULL;
        }
    } else if (s) {
        snprintf(s->last, sizeof s->last, "registry order (backward)");
    }
    size_t used = (size_t)snprintf(msg, msg_len, "no backend can run this problem:");
    for (int i = 0; i < fw_registry_count(); i++) {
        const fw_backend *b = fw_registry_get(i);
        if (b->device != p->device.kind) continue;
        int ok = b->available(why, sizeof why) && b->supports(p, why, sizeof why);
        if (ok && pass == FW_PASS_BACKWARD && !b->backward) {
            ok = 0;
            snprintf(why, sizeof why, "no backward pass");
        }
        if (ok) {
            default_config(b, p, cfg);
            return b;
        }
        if (used < msg_len) used += (size_t)snprintf(msg + used, msg_len - used, " %s: %s;", b->name, why);
    }
    *st = FW_ERR_NO_BACKEND;
    return NULL;
}
