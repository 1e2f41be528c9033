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
    double wmin = pts[start].avg_w;
    for (int i = 0; i < n && k < max; i++) {
        int p = order[i];
        if (p == start || !before(pts, start, p)) continue; /* only slower than the start */
        if (pts[p].avg_w < wmin) {
            ladder[k++] = p;
            wmin = pts[p].avg_w;
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
            double target = policy->power_cap_w * (1.0 - 0.5 * prm.margin);
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
