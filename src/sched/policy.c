/* The static part of the power-aware policy: from a measured frontier to a ladder of
 * configurations and a starting point (see controller.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "controller.h"

fw_ctrl_params fw_ctrl_params_default(void)
{
    fw_ctrl_params p;
    memset(&p, 0, sizeof p);
    p.period_s = 0.1;
    p.avg_window = 4;
    p.settle_periods = 1;
    p.down_periods = 2;
    p.up_periods = 8;
    p.margin = 0.08;
    p.temp_hysteresis_c = 3.0;
    p.idle_w = 0.0;
    p.max_gap_us = 1e6;
    p.pace_gain = 0.7;
    p.max_backoff = 16;
    p.pace_target = 0.94;
    p.pace_window = 10;
    p.pace_max_shrink = 0.25;
    return p;
}

static int finite_nonneg(double x) { return isfinite(x) && x >= 0; }

/* a before b: faster, then lower power, then lower index */
static int before(const fw_frontier_point *pts, int a, int b)
{
    if (pts[a].ms != pts[b].ms) return pts[a].ms < pts[b].ms;
    if (pts[a].avg_w != pts[b].avg_w) return pts[a].avg_w < pts[b].avg_w;
    return a < b;
}

int fw_frontier_ladder(const fw_frontier_point *pts, int n, int start, int *ladder, int max, char *why,
                       size_t why_len)
{
    if (!pts || !ladder || n <= 0) {
        snprintf(why, why_len, "the frontier is empty");
        return -1;
    }
    if (n > FW_CTRL_MAX_POINTS) {
        snprintf(why, why_len, "the frontier has %d points, above the %d supported", n, FW_CTRL_MAX_POINTS);
        return -1;
    }
    if (start >= n) {
        snprintf(why, why_len, "start point %d is outside the frontier of %d", start, n);
        return -1;
    }
    int have_w = 1;
    for (int i = 0; i < n; i++) {
        if (!(isfinite(pts[i].ms) && pts[i].ms > 0)) {
            snprintf(why, why_len, "frontier point %d (%s): time per call %g ms is not > 0", i, pts[i].name, pts[i].ms);
            return -1;
        }
        if (!finite_nonneg(pts[i].avg_w) || !finite_nonneg(pts[i].j_per_call)) {
            snprintf(why, why_len, "frontier point %d (%s): watts/joules must be finite and >= 0 (0 = not measured)",
                     i, pts[i].name);
            return -1;
        }
        if (pts[i].avg_w <= 0) have_w = 0;
    }
    int order[FW_CTRL_MAX_POINTS];
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) { /* insertion sort by (ms, W, index) */
        int v = order[i], j = i - 1;
        while (j >= 0 && before(pts, v, order[j])) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = v;
    }
    if (start < 0) start = order[0];
    int k = 0;
    ladder[k++] = start;
    if (!have_w) return k;
    double w_last = pts[start].avg_w;     /* power of the rung above (the last one kept) */
    double j_best = pts[start].j_per_call; /* least J/call of the rungs kept so far; 0 = none measured */
    for (int i = 0; i < n && k < max; i++) {
        int p = order[i];
        if (p == start || !before(pts, start, p)) continue; /* only slower than the start */
        int keep;
        if (pts[p].j_per_call > 0 && j_best > 0) {
            /* Energy-aware rule: a slower rung must draw at least FW_LADDER_MIN_W_DROP less power than
             * the rung above (less is inside the power measurement's spread, and buys nothing) and use
             * at most FW_LADDER_J_TOL more J/call than the least-energy rung above it. Stepping down
             * then never trades throughput for more energy per call; where no lower rung qualifies,
             * the controller paces the bottom rung instead (on the H200 every kernel drew 600-750 W
             * back to back, and cuda-naive, 2% lower in power, cost 9x the J/call of cuda-flash). */
            keep = pts[p].avg_w <= (1.0 - FW_LADDER_MIN_W_DROP) * w_last &&
                   pts[p].j_per_call <= (1.0 + FW_LADDER_J_TOL) * j_best;
        } else {
            /* J/call not measured (n/a) for this point, or for every rung above: the energy check is
             * impossible, so the old rule applies: any slower point strictly lower in power. Such a
             * rung may cost more energy per call than the one above it. */
            keep = pts[p].avg_w < w_last;
        }
        if (keep) {
            ladder[k++] = p;
            w_last = pts[p].avg_w;
            if (pts[p].j_per_call > 0 && (j_best <= 0 || pts[p].j_per_call < j_best)) j_best = pts[p].j_per_call;
        }
    }
    return k;
}

int fw_policy_plan(const fw_frontier_point *pts, int n, const fw_policy *policy, const fw_ctrl_params *prm_in,
                   int *ladder, int *n_rungs, int *start_rung, int *top, double *gap_us, char *why,
                   size_t why_len)
{
    fw_ctrl_params prm = prm_in ? *prm_in : fw_ctrl_params_default();
    if (!policy) {
        snprintf(why, why_len, "policy is NULL");
        return -1;
    }
    if (policy->objective < FW_OBJECTIVE_FASTEST || policy->objective > FW_OBJECTIVE_POWER_CAP) {
        snprintf(why, why_len, "policy.objective %d is not fastest, min-energy or power-cap", (int)policy->objective);
        return -1;
    }
    if (!finite_nonneg(policy->power_cap_w) || !finite_nonneg(policy->temperature_limit_c)) {
        snprintf(why, why_len, "policy.power_cap_w and temperature_limit_c must be finite and >= 0 (0 = none)");
        return -1;
    }
    if (policy->objective == FW_OBJECTIVE_POWER_CAP && policy->power_cap_w <= 0) {
        snprintf(why, why_len, "the power-cap objective needs policy.power_cap_w > 0");
        return -1;
    }
    /* validates the frontier too */
    int tmp[FW_CTRL_MAX_POINTS];
    if (fw_frontier_ladder(pts, n, -1, tmp, FW_CTRL_MAX_POINTS, why, why_len) < 0) return -1;
    int cap_on = policy->power_cap_w > 0;
    int min_e = policy->objective == FW_OBJECTIVE_MIN_ENERGY;
    for (int i = 0; i < n; i++) {
        if ((cap_on || min_e) && pts[i].avg_w <= 0) {
            snprintf(why, why_len, "the policy needs measured watts but frontier point %d (%s) has none", i, pts[i].name);
            return -1;
        }
        if (min_e && pts[i].j_per_call <= 0) {
            snprintf(why, why_len, "least energy needs measured joules but frontier point %d (%s) has none", i,
                     pts[i].name);
            return -1;
        }
    }
    int start = -1;
    if (min_e) {
        start = 0;
        for (int i = 1; i < n; i++)
            if (pts[i].j_per_call < pts[start].j_per_call ||
                (pts[i].j_per_call == pts[start].j_per_call && before(pts, i, start)))
                start = i;
    }
    int k = fw_frontier_ladder(pts, n, start, ladder, FW_CTRL_MAX_POINTS, why, why_len);
    if (k < 0) return -1;
    *n_rungs = k;
    *top = 0;
    *start_rung = 0;
    *gap_us = 0;
    if (cap_on) {
        int r = 0;
        while (r < k && pts[ladder[r]].avg_w > policy->power_cap_w) r++;
        if (r == k) { /* even the lowest-power rung is over: pace */
            r = k - 1;
            const fw_frontier_point *b = &pts[ladder[r]];
            double target = policy->power_cap_w * prm.pace_target;
            double t_us = b->ms * 1000.0;
            double g = target > prm.idle_w ? t_us * (b->avg_w - target) / (target - prm.idle_w) : prm.max_gap_us;
            if (g > prm.max_gap_us) g = prm.max_gap_us;
            if (g < 0) g = 0;
            *gap_us = g;
        }
        *start_rung = r;
    }
    return 0;
}

int fw_policy_pick(const fw_frontier_point *pts, int n, const fw_policy *policy, const fw_ctrl_params *prm,
                   double *gap_us, char *why, size_t why_len)
{
    int ladder[FW_CTRL_MAX_POINTS], k, start, top;
    double g = 0;
    if (fw_policy_plan(pts, n, policy, prm, ladder, &k, &start, &top, &g, why, why_len) != 0) return -1;
    if (gap_us) *gap_us = g;
    return ladder[start];
}
