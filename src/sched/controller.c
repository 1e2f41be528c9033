/* The closed-loop controller: walks the ladder of policy.c with hysteresis and paces at the bottom
 * (see controller.h for the rules). Pure state machine over readings; fw_ctrl_poll/tick read the
 * telemetry. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "controller.h"

#define THERMAL_BITS (FW_THROTTLE_SW_THERMAL | FW_THROTTLE_HW_THERMAL | FW_THROTTLE_HW_SLOWDOWN)
#define BLOCK_UP_BITS (THERMAL_BITS | FW_THROTTLE_SW_POWER_CAP | FW_THROTTLE_HW_POWER_BRAKE)

const char *fw_ctrl_action_name(fw_ctrl_action a)
{
    switch (a) {
    case FW_CTRL_HOLD: return "hold";
    case FW_CTRL_SETTLE: return "settle";
    case FW_CTRL_MISSING: return "missing";
    case FW_CTRL_STEP_DOWN: return "step-down";
    case FW_CTRL_STEP_UP: return "step-up";
    case FW_CTRL_PACE_MORE: return "pace-more";
    case FW_CTRL_PACE_LESS: return "pace-less";
    }
    return "?";
}

static int check_params(const fw_ctrl_params *p, char *why, size_t len)
{
    if (!(p->period_s > 0) || p->avg_window < 1 || p->avg_window > FW_CTRL_MAX_WINDOW || p->settle_periods < 0 ||
        p->down_periods < 1 || p->down_periods > p->avg_window || p->up_periods < 1 || !(p->margin >= 0 && p->margin < 1) ||
        !(p->temp_hysteresis_c >= 0) || !(p->idle_w >= 0) || !(p->max_gap_us >= 0) ||
        !(p->pace_gain > 0 && p->pace_gain <= 1) || p->max_backoff < 1 || !(p->pace_target > 0.5 * p->margin) ||
        !(p->pace_target <= 1) || p->pace_window < 1 || !(p->pace_max_shrink > 0 && p->pace_max_shrink <= 1)) {
        snprintf(len ? why : NULL, len,
                 "controller parameters out of range (period > 0, 1 <= down <= window <= %d, up >= 1, 0 <= margin < 1, "
                 "0 < gain <= 1, margin / 2 < pace_target <= 1, pace_window >= 1, 0 < pace_max_shrink <= 1, ...)",
                 FW_CTRL_MAX_WINDOW);
        return -1;
    }
    return 0;
}

fw_status fw_ctrl_init(fw_controller *c, const fw_frontier_point *pts, int n, const fw_policy *policy,
                       const fw_ctrl_params *prm, char *why, size_t why_len)
{
    char dummy[8];
    if (!why || why_len == 0) {
        why = dummy;
        why_len = sizeof dummy;
    }
    why[0] = 0;
    if (!c || !pts || !policy) {
        snprintf(why, why_len, "controller, frontier and policy must not be NULL");
        return FW_ERR_NULL_ARGUMENT;
    }
    memset(c, 0, sizeof *c);
    c->prm = prm ? *prm : fw_ctrl_params_default();
    if (check_params(&c->prm, why, why_len) != 0) return FW_ERR_INVALID_VALUE;
    int start = 0, top = 0;
    double gap = 0;
    if (fw_policy_plan(pts, n, policy, &c->prm, c->ladder, &c->n_rungs, &start, &top, &gap, why, why_len) != 0)
        return FW_ERR_INVALID_VALUE;
    c->policy = *policy;
    c->n_points = n;
    memcpy(c->points, pts, (size_t)n * sizeof *pts);
    c->rung = start;
    c->top = top;
    c->gap_us = gap;
    c->up_mult = 1;
    c->last_up_period = -1000000;
    c->last_down_period = 0;
    c->last_action = FW_CTRL_HOLD;
    snprintf(c->reason, sizeof c->reason, "start at %s%s", pts[c->ladder[start]].name, gap > 0 ? " with pacing" : "");
    return FW_OK;
}

int fw_ctrl_choice(const fw_controller *c) { return c ? c->ladder[c->rung] : -1; }

double fw_ctrl_gap_us(const fw_controller *c) { return c ? c->gap_us : 0; }

void fw_ctrl_sleep_gap(const fw_controller *c)
{
    if (!c || !(c->gap_us > 0)) return;
    double s = c->gap_us * 1e-6;
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void changed(fw_controller *c)
{
    c->hist_n = 0;
    c->hist_pos = 0;
    c->since_change = 0;
    c->since_sum = 0;
    c->since_n = 0;
    c->since_idle_sum = 0;
    c->since_idle_n = 0;
    c->under_streak = 0;
}

static double hist_avg(const fw_controller *c)
{
    double s = 0;
    for (int i = 0; i < c->hist_n; i++) s += c->hist[i];
    return c->hist_n ? s / c->hist_n : 0;
}

/* The pacing model at the bottom rung: avg = (P_run t + P_idle e) / (t + e), with t the rung's time
 * per call and e the device idle per call. e is measured from the launch rate where the integration
 * counts launches (fw_ctrl_tick): the gap plus what each paced launch adds on its own (waiting for
 * the previous launch's event, sleep overshoot: about 60 us on the H200 streams). Without a launch
 * count e is taken to be the gap alone. From the measured average: P_run, then the idle per call
 * that would give `target` (*want_idle; <= 0: even back to back the rung is under the target), and
 * the gap that gives it (*want_gap = *want_idle minus the launches' own idle; <= 0 when that own
 * idle alone already brings the power under the target). */
static void pace_model(const fw_controller *c, double avg, double idle_e, int idle_e_ok, double target,
                       double *want_idle, double *want_gap)
{
    const fw_frontier_point *b = &c->points[c->ladder[c->n_rungs - 1]];
    const double t = b->ms * 1000.0, g = c->gap_us, idle = c->prm.idle_w;
    const double e = idle_e_ok ? idle_e : g;
    const double p_run = (avg * (t + e) - idle * e) / t;
    if (target <= idle) {
        *want_idle = *want_gap = c->prm.max_gap_us;
        return;
    }
    *want_idle = t * (p_run - target) / (target - idle);
    const double own = idle_e_ok && e > g ? e - g : 0;
    *want_gap = *want_idle - own;
}

fw_ctrl_action fw_ctrl_update(fw_controller *c, const fw_gpu_reading *r)
{
    if (!c) return FW_CTRL_HOLD;
    c->period++;
    const double cap = c->policy.power_cap_w, tlim = c->policy.temperature_limit_c;
    const int cap_on = cap > 0, temp_on = tlim > 0;
    if (!cap_on && !temp_on) { /* a static policy: nothing to control */
        c->last_action = FW_CTRL_HOLD;
        return FW_CTRL_HOLD;
    }
    double p = 0;
    int p_ok = 0, t_ok = 0;
    if (r && (r->valid & FW_TEL_POWER_INSTANT)) {
        p = r->power_instant_w;
        p_ok = isfinite(p);
    } else if (r && (r->valid & FW_TEL_POWER_AVERAGE)) {
        p = r->power_average_w;
        p_ok = isfinite(p);
    }
    t_ok = r && (r->valid & FW_TEL_TEMPERATURE) && isfinite(r->temperature_c);
    if ((cap_on && !p_ok) || (temp_on && !t_ok)) {
        c->missing++;
        c->under_streak = 0;
        snprintf(c->reason, sizeof c->reason, "missing %s: hold", cap_on && !p_ok ? "power" : "temperature");
        return c->last_action = FW_CTRL_MISSING;
    }
    /* stable for long: forget part of the backoff */
    if (c->up_mult > 1 && c->period - c->last_down_period > 4L * c->prm.up_periods * c->up_mult) {
        c->up_mult /= 2;
        c->last_down_period = c->period;
    }
    uint64_t thr = (r->valid & FW_TEL_THROTTLE) ? r->throttle_reasons : 0;
    double temp = t_ok ? r->temperature_c : 0;

    if (++c->since_change <= c->prm.settle_periods) {
        snprintf(c->reason, sizeof c->reason, "settling after a change");
        return c->last_action = FW_CTRL_SETTLE;
    }
    const double t_bottom_us = c->points[c->ladder[c->n_rungs - 1]].ms * 1000.0;
    const double idle_now = c->call_us_valid && c->call_us > t_bottom_us ? c->call_us - t_bottom_us : 0;
    if (c->call_us_valid) {
        c->since_idle_sum += idle_now;
        c->since_idle_n++;
    }
    if (p_ok) {
        c->since_sum += p;
        c->since_n++;
        int w = c->prm.avg_window;
        c->hist[c->hist_pos] = p;
        c->hist_pos = (c->hist_pos + 1) % w;
        if (c->hist_n < w) c->hist_n++;
    }
    double avg = hist_avg(c);
    c->avg_valid = c->hist_n > 0;
    c->avg_w = avg;
    /* valid samples since the last change (missing periods return above and do not count) */
    const int enough = c->since_change - c->prm.settle_periods >= c->prm.down_periods;
    const int bottom = c->rung == c->n_rungs - 1;
    /* the pacing band at the bottom rung: cap * (pace_target -+ margin / 2) */
    const double pace_to = cap * c->prm.pace_target;
    const double pace_hi = fmin(cap, cap * (c->prm.pace_target + 0.5 * c->prm.margin));
    const double pace_lo = cap * (c->prm.pace_target - 0.5 * c->prm.margin);
    /* above the cap on a rung with one below it: step down; at the bottom: above the band, pace */
    const int over_p = cap_on && enough && avg > (bottom ? pace_hi : cap);
    /* temperature lags power: over the limit but already falling (and not far over) waits */
    const int falling = c->prev_temp_valid && temp < c->prev_temp - 0.05 && temp <= tlim + c->prm.temp_hysteresis_c;
    const int over_t = temp_on && enough && ((temp > tlim && !falling) || (thr & THERMAL_BITS));
    if (t_ok) {
        c->prev_temp = temp;
        c->prev_temp_valid = 1;
    }

    if (over_p || over_t) {
        c->under_streak = 0;
        if (!bottom) {
            c->rung++;
            c->steps_down++;
            c->last_down_period = c->period;
            /* a step down soon after a step up: wait longer before the next step up */
            long up_wait = (long)c->prm.up_periods * c->up_mult;
            if (c->period - c->last_up_period <= 2 * up_wait + c->prm.settle_periods + c->prm.avg_window &&
                c->up_mult < c->prm.max_backoff)
                c->up_mult *= 2;
            snprintf(c->reason, sizeof c->reason, "%s (avg %.1f W, cap %.1f W, %.0f C): down to %s",
                     over_p ? "over the power cap" : "over the temperature limit", avg, cap, temp,
                     c->points[c->ladder[c->rung]].name);
            changed(c);
            return c->last_action = FW_CTRL_STEP_DOWN;
        }
        /* bottom of the ladder and still over: pace */
        double g = c->gap_us;
        if (over_p) {
            double want_idle, want;
            pace_model(c, avg, idle_now, c->call_us_valid, pace_to, &want_idle, &want);
            g = c->gap_us + c->prm.pace_gain * (want - c->gap_us);
        }
        const double t_us = c->points[c->ladder[c->rung]].ms * 1000.0;
        double min_next = c->gap_us * 1.1 + 0.05 * t_us; /* always grow while over */
        if (over_t && !over_p) min_next = c->gap_us * 1.5 + 0.25 * t_us;
        if (g < min_next) g = min_next;
        if (g > c->prm.max_gap_us) g = c->prm.max_gap_us;
        if (g == c->gap_us) {
            snprintf(c->reason, sizeof c->reason, "over at the bottom with the gap at its ceiling %.0f us", g);
            return c->last_action = FW_CTRL_HOLD;
        }
        c->gap_us = g;
        c->pace_changes++;
        snprintf(c->reason, sizeof c->reason, "bottom rung still over (avg %.1f W, %.0f C): gap %.0f us", avg, temp, g);
        changed(c);
        return c->last_action = FW_CTRL_PACE_MORE;
    }

    const int low_p = !cap_on || (enough && avg < cap * (1.0 - c->prm.margin));
    const int low_t = !temp_on || temp < tlim - c->prm.temp_hysteresis_c;
    const int under = low_p && low_t && !(thr & BLOCK_UP_BITS) && enough;

    if (c->gap_us > 0) { /* pacing: shrink the gap first, on a full pace_window of evidence */
        c->under_streak = 0;
        const int evidence = c->since_change - c->prm.settle_periods >= c->prm.pace_window; /* valid periods */
        const double since_avg = c->since_n ? c->since_sum / c->since_n : 0;
        const int low_pace = !cap_on || (evidence && avg < pace_lo && since_avg < pace_lo);
        const int shrink = low_pace && low_t && !(thr & BLOCK_UP_BITS) && enough && evidence;
        if (!shrink) {
            snprintf(c->reason, sizeof c->reason, "pacing inside the band (avg %.1f W, %d/%d periods since the change)",
                     avg, c->since_change - c->prm.settle_periods, c->prm.pace_window);
            return c->last_action = FW_CTRL_HOLD;
        }
        double g;
        const double t_us = c->points[c->ladder[c->rung]].ms * 1000.0;
        const double floor_us = 0.02 * t_us; /* the smallest gap kept while pacing */
        if (cap_on) {
            /* the model from the means since the change: >= pace_window samples, less noisy */
            double want_idle, want;
            pace_model(c, since_avg, c->since_idle_n ? c->since_idle_sum / c->since_idle_n : 0, c->since_idle_n > 0,
                       pace_to, &want_idle, &want);
            if (want_idle <= 0) {
                g = 0; /* even back to back the rung is predicted under the target */
            } else {
                g = c->gap_us + 0.5 * c->prm.pace_gain * (want - c->gap_us);
                if (g < c->gap_us * (1.0 - c->prm.pace_max_shrink)) g = c->gap_us * (1.0 - c->prm.pace_max_shrink);
                if (g > c->gap_us * 0.95) g = c->gap_us * 0.95;
                /* never to 0 while the rung back to back is over the target: where the launches' own
                 * idle alone brings the power under the band (a cap just under the rung's power),
                 * stay at the floor rather than cycle between no gap (over) and a gap (under) */
                if (g < floor_us) g = floor_us;
            }
            if (g == c->gap_us) {
                snprintf(c->reason, sizeof c->reason, "under the band at the smallest gap %.1f us (mean %.1f W)", g,
                         since_avg);
                return c->last_action = FW_CTRL_HOLD;
            }
        } else {
            g = c->gap_us * 0.67;
            if (g < floor_us) g = 0;
        }
        c->gap_us = g;
        c->pace_changes++;
        snprintf(c->reason, sizeof c->reason, "under the band for %d periods (mean %.1f W, %.0f C): gap %.0f us",
                 c->since_change - c->prm.settle_periods, since_avg, temp, g);
        changed(c);
        return c->last_action = FW_CTRL_PACE_LESS;
    }

    if (!under) {
        c->under_streak = 0;
        snprintf(c->reason, sizeof c->reason, "inside the band (avg %.1f W, %.0f C)", avg, temp);
        return c->last_action = FW_CTRL_HOLD;
    }
    c->under_streak++;
    long need = (long)c->prm.up_periods * c->up_mult;
    if (c->rung <= c->top || c->under_streak < need) {
        snprintf(c->reason, sizeof c->reason, "under (%d/%ld periods)", c->under_streak, need);
        return c->last_action = FW_CTRL_HOLD;
    }
    if (cap_on) { /* would the rung above stay under the cap? */
        const fw_frontier_point *cur = &c->points[c->ladder[c->rung]];
        const fw_frontier_point *up = &c->points[c->ladder[c->rung - 1]];
        double predicted = up->avg_w * (avg / cur->avg_w);
        if (predicted > cap) {
            snprintf(c->reason, sizeof c->reason, "under, but %s would draw about %.1f W > cap %.1f W", up->name,
                     predicted, cap);
            return c->last_action = FW_CTRL_HOLD;
        }
    }
    c->rung--;
    c->steps_up++;
    c->last_up_period = c->period;
    snprintf(c->reason, sizeof c->reason, "under for %ld periods (avg %.1f W, %.0f C): up to %s", need, avg, temp,
             c->points[c->ladder[c->rung]].name);
    changed(c);
    return c->last_action = FW_CTRL_STEP_UP;
}

void fw_ctrl_count_launches(fw_controller *c, long n)
{
    if (c && n > 0) c->launches += n;
}

fw_ctrl_action fw_ctrl_poll(fw_controller *c, fw_telemetry *t, int gpu)
{
    if (!c) return FW_CTRL_HOLD;
    fw_gpu_reading r;
    fw_status st = fw_telemetry_read(t, gpu, &r);
    c->call_us_valid = 0;
    if (t) {
        const double now = fw_telemetry_now(t);
        if (c->have_tick && now > c->last_tick_s && c->launches > 0) { /* the launch rate of the last period */
            c->call_us = (now - c->last_tick_s) * 1e6 / (double)c->launches;
            c->call_us_valid = 1;
        }
        c->last_tick_s = now;
        c->have_tick = 1;
    }
    c->launches = 0;
    return fw_ctrl_update(c, st == FW_OK ? &r : NULL);
}

fw_ctrl_action fw_ctrl_tick(fw_controller *c, fw_telemetry *t, int gpu)
{
    if (!c || !t) return FW_CTRL_HOLD;
    double now = fw_telemetry_now(t);
    fw_ctrl_action a = FW_CTRL_HOLD;
    if (!c->have_tick || now - c->last_tick_s >= c->prm.period_s) a = fw_ctrl_poll(c, t, gpu);
    c->launches++; /* the launch this tick comes before */
    return a;
}
