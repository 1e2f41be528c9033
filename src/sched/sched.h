/* Which backend and configuration runs a problem.
 *
 * A named backend runs with its default configuration. With "auto":
 *  - forward, with a tuning table entry for the problem's bucket (tuning_table.h; the file is
 *    $FLASHWATT_TUNING or ~/.cache/flashwatt/tuning-<gpu name>.txt as the context's knobs say,
 *    read on the context's first call): the measured configurations of the bucket that are usable
 *    now form the menu, and the context's policy picks from it (fastest, least energy, fastest
 *    under the power cap). With a power cap or a temperature limit on a CUDA problem, a controller
 *    (controller.h) per bucket moves the choice along the frontier from the context's telemetry
 *    each control period, and paces launches (waits for the previous launch's event, then sleeps
 *    the gap) when it says so;
 *  - otherwise (no table, no entry, backward, sliding windows): the first usable backend in
 *    registry order that supports the problem.
 * Precision: an entry runs in its recorded precision only if that is the context's precision, or
 * the policy allows reduced precision, the inputs are f32, and the entry's measured error is within
 * policy.error_budget. It never changes clocks or power limits, and never special-cases a backend
 * by name.
 *
 * Layering: sched sits above the backends (backend.h) and below the public API (src/core/api.c),
 * which owns one fw_sched per context; nothing here includes the context. */
#ifndef FW_SCHED_H
#define FW_SCHED_H

#include <stddef.h>
#include "backends/backend.h"
#include "core/knobs.h"
#include "tuning_table.h"

typedef enum { FW_PASS_FORWARD = 0, FW_PASS_BACKWARD = 1 } fw_pass;

/* The scheduler state of one context: its tuning table, telemetry, controllers and pacing event.
 * Sched knows nothing of the context: the public API owns one and passes the request in. */
typedef struct fw_sched fw_sched;

/* What a call asks for: the context's settings that steer the choice. */
typedef struct fw_sched_request {
    const char *backend;     /* "auto" or a backend name */
    const fw_policy *policy;
    void *stream;            /* cudaStream_t the launch goes to (pacing event) */
} fw_sched_request;

/* A scheduler reading its table from knobs->tuning_path (else the default path); NULL when out of
 * memory. The table is loaded on the first auto call. */
fw_sched *fw_sched_create(const fw_knobs *knobs);
void fw_sched_destroy(fw_sched *s);

/* On success returns the backend and fills *cfg (cfg->precision is the precision to run: core
 * copies it into the problem); on failure NULL with the status in *st and a message in msg. May
 * sleep (pacing under a power cap). */
const fw_backend *fw_sched_choose(fw_sched *s, const fw_sched_request *rq, const fw_problem *p, fw_pass pass,
                                  fw_config *cfg, fw_status *st, char *msg, size_t msg_len);
/* After a successful launch chosen by fw_sched_choose: records the pacing event on rq->stream. */
void fw_sched_after_launch(fw_sched *s, const fw_sched_request *rq, const fw_problem *p);
/* The policy or precision changed: forget controllers (the table stays). */
void fw_sched_policy_changed(fw_sched *s);

/* The tuning table path: knobs->tuning_path ($FLASHWATT_TUNING), else
 * $HOME/.cache/flashwatt/tuning-<name>.txt with <name> the name of cuda:0 (spaces as '-') or "cpu"
 * where there is no GPU. 0, or -1 when no path can be formed (no HOME). */
int fw_sched_table_path(const fw_knobs *knobs, char *buf, size_t len);
/* Device name used in table keys: the CUDA device's name, or "cpu". */
void fw_sched_device_name(fw_device d, char *buf, size_t len);
/* The bucket key of a problem. */
fw_tune_key fw_sched_key(const fw_problem *p);
/* How the last auto forward call was chosen ("registry order: no tuning table at ...",
 * "table: cuda-flash bm128-bn64-w4 (fastest)", "controller: ... gap 120 us"). "" before. */
const char *fw_sched_last_choice(const fw_sched *s);
/* Tuning table status ("loaded 12 entries from P", "no tuning table at P yet", or the parse
 * error); loads it if not done yet. */
const char *fw_sched_table_status(fw_sched *s);

/* The pure selection (tested on its own): candidate entries of bucket k that run in an allowed
 * precision (see above) and pass usable(entry, arg) (NULL = all), then the policy's pick among
 * them as an index into t->e; -1 with why when there is no candidate or the policy cannot decide
 * (e.g. least energy on entries without joules). cand/ncand (may be NULL) get the candidates. */
int fw_sched_select(const fw_tuning_table *t, const fw_tune_key *k, fw_dtype dtype, fw_precision requested,
                    const fw_policy *policy, int (*usable)(const fw_tune_entry *e, void *arg), void *arg,
                    int *cand, int *ncand, char *why, size_t why_len);
/* Is an entry's precision allowed for this call? */
int fw_sched_precision_allowed(const fw_tune_entry *e, fw_dtype dtype, fw_precision requested,
                               const fw_policy *policy);

#endif
