/* The power-aware policy and its closed-loop controller.
 *
 * Input: a frontier, i.e. the configurations measured for one problem bucket (time per call, joules
 * per call, average watts), and a policy (fastest, least energy, power cap in W, optional
 * temperature limit). policy.c turns the frontier into a "ladder", fastest (highest power) first:
 * a slower configuration becomes the next rung only if it draws at least FW_LADDER_MIN_W_DROP (5 %)
 * less average power than the rung above AND its J/call is at most FW_LADDER_J_TOL (5 %) above the
 * least J/call of the rungs above it. So a step down always buys a real power reduction and never
 * costs more than that tolerance in energy per call; a slower kernel that draws about the same power
 * (on the H200: cuda-naive, 9x the energy of cuda-flash) is never a rung. Where J/call is not
 * measured (0 = n/a) the old rule applies: any slower point strictly lower in power.
 *
 * Run time: once per control period the controller gets a telemetry reading and
 *   - keeps a moving average of measured power (instant power; the 1-s average as fallback) over
 *     the periods since its last change, after `settle_periods` that are ignored;
 *   - steps DOWN one rung when that average is above the cap (after `down_periods` samples), or the
 *     temperature is above the limit (or thermal throttling is reported, with a limit set);
 *   - steps UP one rung only after `up_periods` consecutive periods with the average below
 *     cap * (1 - margin) and the temperature below limit - hysteresis, no power/thermal throttling,
 *     and the rung above predicted (its measured watts scaled by measured/expected of the current
 *     rung) to stay under the cap. A step down soon after a step up doubles the wait for the next
 *     step up (up to max_backoff times), so it cannot oscillate faster than its hysteresis allows;
 *     4 * up_periods * multiplier periods without a step down halve the multiplier again;
 *   - at the bottom rung it paces: an idle gap (µs) before each launch, aimed at
 *     cap * pace_target, inside the band cap * (pace_target -+ margin / 2) (defaults 0.94 +- 0.04:
 *     [0.90, 0.98] x cap). The gap grows fast: as soon as `down_periods` samples average above the
 *     band. It shrinks carefully: only after `pace_window` samples (1 s) since the last change whose
 *     mean, and the short average, are both below the band; at half the gain; by at most
 *     pace_max_shrink of the gap per step; and never to 0 while the rung back to back is predicted
 *     over the target (it stays at a floor of 2 % of the rung's time instead of cycling between no
 *     gap, over, and a gap, under). The model behind the gap (avg = (P_run t + P_idle e) / (t + e))
 *     takes the device idle per call e from the launch rate fw_ctrl_tick counts: the gap plus what
 *     each paced launch adds itself (the event wait and sleep overshoot: 61-67 us in the H200
 *     streams, as large as the whole gap at 450 W). Why under the cap: the acceptance bar is every
 *     1-s average from the energy counter within cap + 5 %, and on the H200 those 1-s averages read
 *     up to +10 % above a constant load (static streams: 760 W windows among 692 W ones). Why the
 *     careful shrink: the 300 W trace's +7 % window sat between two low ones (259, 322, 261 W) with
 *     20 gap changes in 10 s: gaps cut on 0.2-0.4 s of readings, then grown back. Pacing happens
 *     only at the bottom rung (the ladder holds no lower rung worth stepping to), and it steps up
 *     only after the gap is back to 0;
 *   - a period whose reading lacks a needed field (power with a cap, temperature with a limit)
 *     holds the current choice and gap, and breaks the "consecutive" count for stepping up.
 * It never changes clocks or power limits: it only chooses what to launch and when.
 */
#ifndef FW_SCHED_CONTROLLER_H
#define FW_SCHED_CONTROLLER_H

#include <stddef.h>
#include "flashwatt.h"

#define FW_CTRL_MAX_POINTS 64
#define FW_CTRL_MAX_WINDOW 64
/* The ladder's energy-aware rule (policy.c): a slower rung draws at least this fraction less power
 * than the rung above ... */
#define FW_LADDER_MIN_W_DROP 0.05
/* ... and uses at most this fraction more J/call than the least-energy rung above it (the spread of
 * a 2-s energy window is about +-5 %). */
#define FW_LADDER_J_TOL 0.05

typedef struct fw_frontier_point {
    char name[64];     /* the configuration, e.g. "cuda-flash bm128-bn64-w4" */
    int tag;           /* the caller's id for it (backend / config index) */
    double ms;         /* time per call */
    double j_per_call; /* energy per call */
    double avg_w;      /* average power while running back to back */
} fw_frontier_point;

typedef struct fw_ctrl_params {
    double period_s;          /* control period for fw_ctrl_tick (default 0.1 s: NVML refresh) */
    int avg_window;           /* moving-average length in periods (default 4) */
    int settle_periods;       /* periods ignored after a change (default 1) */
    int down_periods;         /* samples needed before stepping down or pacing (default 2) */
    int up_periods;           /* N consecutive under-threshold periods before a step up (default 8) */
    double margin;            /* step up only below cap * (1 - margin) (default 0.08) */
    double temp_hysteresis_c; /* step up only below limit - this (default 3) */
    double idle_w;            /* device idle power for the first pacing estimate (default 0) */
    double max_gap_us;        /* pacing ceiling (default 1e6) */
    double pace_gain;         /* fraction of the computed gap correction applied (default 0.7) */
    int max_backoff;          /* ceiling of the up_periods multiplier (default 16) */
    double pace_target;       /* pacing aims at cap * this; band +- margin / 2 (default 0.94) */
    int pace_window;          /* samples since the last change before the gap may shrink (default 10) */
    double pace_max_shrink;   /* largest fraction of the gap removed in one step (default 0.25) */
} fw_ctrl_params;

fw_ctrl_params fw_ctrl_params_default(void);

typedef enum fw_ctrl_action {
    FW_CTRL_HOLD = 0,
    FW_CTRL_SETTLE,    /* just changed; this period's sample is ignored */
    FW_CTRL_MISSING,   /* a needed field was missing: hold */
    FW_CTRL_STEP_DOWN,
    FW_CTRL_STEP_UP,
    FW_CTRL_PACE_MORE,
    FW_CTRL_PACE_LESS
} fw_ctrl_action;

const char *fw_ctrl_action_name(fw_ctrl_action a);

typedef struct fw_controller {
    fw_ctrl_params prm;
    fw_policy policy;
    int n_points;
    fw_frontier_point points[FW_CTRL_MAX_POINTS];
    int n_rungs;
    int ladder[FW_CTRL_MAX_POINTS]; /* indices into points, fastest first */
    int top;                        /* highest rung it may climb to (min-energy: its start) */
    int rung;                       /* current rung */
    double gap_us;                  /* idle gap before each launch (only at the bottom rung) */
    /* state */
    double hist[FW_CTRL_MAX_WINDOW];
    int hist_n, hist_pos;
    int since_change;
    double since_sum;  /* power samples since the last change (after settling): sum and count */
    int since_n;
    double since_idle_sum; /* measured device idle per call since the last change: sum and count */
    int since_idle_n;
    long launches;     /* counted since the last poll (fw_ctrl_tick, fw_ctrl_count_launches) */
    double call_us;    /* time per launch over the last period, from the count */
    int call_us_valid;
    int under_streak;
    int up_mult;
    long period;
    long last_up_period;
    long last_down_period; /* or the last backoff decay */
    double prev_temp;
    int prev_temp_valid;
    double last_tick_s;
    int have_tick;
    /* what it did, for logs and tests */
    fw_ctrl_action last_action;
    int avg_valid;
    double avg_w;
    long steps_down, steps_up, pace_changes, missing;
    char reason[160];
} fw_controller;

/* ---- policy.c: the static part --------------------------------------------------------------- */
/* Fills ladder (indices into pts) and returns the number of rungs: rung 0 is pts[start] (start < 0:
 * the fastest point), then, in time order, every slower point that draws at least
 * FW_LADDER_MIN_W_DROP less power than the last rung kept and whose J/call is at most
 * FW_LADDER_J_TOL above the least J/call of the rungs kept (where a J/call is 0 = not measured:
 * strictly less power than the last rung, the old rule). Without watts (an avg_w <= 0) the ladder
 * is rung 0 alone. -1 with why when the frontier is unusable (empty, too long, a time <= 0 or a
 * value not finite). */
int fw_frontier_ladder(const fw_frontier_point *pts, int n, int start, int *ladder, int max, char *why,
                       size_t why_len);
/* The whole static plan: ladder, the rung to start on, the highest rung the controller may climb to
 * (top), and the initial pacing gap in µs (> 0 only when even the lowest-power rung is over the
 * cap; it aims at cap * prm.pace_target). Returns 0, or -1 with why on bad input (a policy that
 * needs watts or joules on a frontier without them, a negative cap...). A power cap applies whenever
 * power_cap_w > 0, whatever the objective; least energy starts at the least-energy point (and never climbs above it). */
int fw_policy_plan(const fw_frontier_point *pts, int n, const fw_policy *policy, const fw_ctrl_params *prm,
                   int *ladder, int *n_rungs, int *start_rung, int *top, double *gap_us, char *why,
                   size_t why_len);
/* Where the policy starts: index into pts (and the initial gap); -1 with why on bad input. */
int fw_policy_pick(const fw_frontier_point *pts, int n, const fw_policy *policy, const fw_ctrl_params *prm,
                   double *gap_us, char *why, size_t why_len);

/* ---- controller.c: the loop ---------------------------------------------------------------- */
/* prm NULL = defaults. FW_OK, or FW_ERR_INVALID_VALUE / FW_ERR_NULL_ARGUMENT with why. */
fw_status fw_ctrl_init(fw_controller *c, const fw_frontier_point *pts, int n, const fw_policy *policy,
                       const fw_ctrl_params *prm, char *why, size_t why_len);
/* One control period with this reading (NULL = no reading: hold). */
fw_ctrl_action fw_ctrl_update(fw_controller *c, const fw_gpu_reading *r);
/* Reads telemetry now and runs one control period (a failed read is a missing sample). */
fw_ctrl_action fw_ctrl_poll(fw_controller *c, fw_telemetry *t, int gpu);
/* Cheap: call before every launch; runs fw_ctrl_poll when a control period has passed on the
 * telemetry clock, else returns FW_CTRL_HOLD without reading. It counts the launch: the launch rate
 * over each period gives the real device idle per call while pacing (the gap plus what each paced
 * launch adds itself), which the pacing model uses; without counts it assumes the gap alone. */
fw_ctrl_action fw_ctrl_tick(fw_controller *c, fw_telemetry *t, int gpu);
/* Counts n launches for the current period (fw_ctrl_tick does this itself; for callers that poll). */
void fw_ctrl_count_launches(fw_controller *c, long n);
/* The current choice: index into the frontier given to fw_ctrl_init. */
int fw_ctrl_choice(const fw_controller *c);
/* Idle gap (µs) to insert before the next launch; 0 unless pacing. */
double fw_ctrl_gap_us(const fw_controller *c);
/* Sleeps the host for the gap (no-op at 0). The gap must be device idle: call it after waiting for
 * the previous launch (cudaEventSynchronize on its event), not between asynchronous launches that
 * are still queued. */
void fw_ctrl_sleep_gap(const fw_controller *c);

#endif
