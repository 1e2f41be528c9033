/* The controller's limits on the simulated plant of controller_plant.h (fake telemetry, manual clock):
 * a temperature limit (leaving the hot rung within the bound, pacing where even the bottom rung runs
 * too hot, the throttle bit), holding everything on missing samples or failed reads (also while
 * pacing, and no climbing on broken runs of samples), and fw_ctrl_tick reading telemetry once per
 * control period. The invariants step() counts (pacing off the bottom rung, a step up or a gap cut
 * sooner than the hysteresis) are checked over these runs too. */
#include <stdio.h>
#include "controller_plant.h"

#define CHECK FWT_CHECK

/* Thermal limit 80 C: A heads for 90 C, B for 80 C, C for 70 C. It must leave A within the bound
 * once over, and never oscillate faster than the hysteresis. */
static void test_thermal(void)
{
    rig r;
    fw_policy p = policy(FW_OBJECTIVE_FASTEST, 0, 80.0);
    if (!rig_open(&r, &p, 1.0, NULL)) return;
    r.p.temp_per_w = 0.1;
    run(&r, 600);
    int over_at = -1, down = first_act(&r.tr, FW_CTRL_STEP_DOWN);
    for (int i = 0; i < r.tr.n; i++)
        if (r.tr.temp[i] > 80.0) {
            over_at = i;
            break;
        }
    /* the reading of period i is taken after the plant moved: over at i -> seen at i */
    int bound = r.c.prm.settle_periods + r.c.prm.down_periods;
    CHECK(over_at >= 0 && down >= over_at && down - over_at <= bound, "over at %d, step down at %d", over_at, down);
    double hot = 0;
    for (int i = 0; i < r.tr.n; i++)
        if (r.tr.temp[i] > hot) hot = r.tr.temp[i];
    int changes = (int)(r.c.steps_down + r.c.steps_up);
    printf("thermal: peak %.1f C, %d changes, final %s at %.1f C\n", hot, changes, k_pts[fw_ctrl_choice(&r.c)].name,
           r.p.temp);
    CHECK(hot < 83.0, "peak %g C", hot);
    CHECK(changes <= 12, "%d changes in 600 periods", changes);
    CHECK(r.p.temp <= 80.0 + 0.5, "final temperature %g", r.p.temp);
    rig_close(&r);

    /* a limit that even D cannot hold (D heads for 60 C, limit 50 C): walk down, then pace */
    if (!rig_open(&r, &p, 1.0, NULL)) return;
    r.c.policy.temperature_limit_c = 50.0;
    r.p.temp_per_w = 0.1;
    run(&r, 800);
    double s = 0, hi = 0;
    for (int i = 400; i < 800; i++) {
        s += r.tr.temp[i];
        if (r.tr.temp[i] > hi) hi = r.tr.temp[i];
    }
    printf("thermal pacing: mean %.1f C, max %.1f C over the last 400 periods, gap %.0f us, %ld gap changes\n",
           s / 400.0, hi, fw_ctrl_gap_us(&r.c), r.c.pace_changes);
    CHECK(fw_ctrl_choice(&r.c) == D_ && r.c.steps_down == 3, "not at the bottom: %s", k_pts[fw_ctrl_choice(&r.c)].name);
    CHECK(s / 400.0 <= 50.0 && hi <= 51.0, "mean %.1f C max %.1f C with limit 50", s / 400.0, hi);
    CHECK(s / 400.0 >= 50.0 - 3.0 - 3.0, "over-paced: mean %.1f C", s / 400.0);
    rig_close(&r);

    /* a thermal throttle bit with a limit set counts as over even when the temperature reads fine */
    if (!rig_open(&r, &p, 1.0, NULL)) return;
    r.p.temp_per_w = 0.01;
    fw_tel_fake_set_throttle(r.f, 0, FW_THROTTLE_HW_THERMAL);
    run(&r, 10);
    CHECK(r.c.steps_down >= 1, "hw_thermal did not step down");
    rig_close(&r);
}

/* Missing samples hold: power field absent for 30 periods while over the cap -> no change; then it
 * steps down within the bound. A failed read holds too, also while pacing. */
static void test_missing(void)
{
    rig r;
    fw_policy p = policy(FW_OBJECTIVE_POWER_CAP, 450, 0);
    if (!rig_open(&r, &p, 1.2, NULL)) return;
    fw_tel_fake_set_valid(r.f, 0, 0x1ffu & ~(FW_TEL_POWER_INSTANT | FW_TEL_POWER_AVERAGE));
    run(&r, 30);
    CHECK(count_act(&r.tr, FW_CTRL_MISSING, 0, 30) == 30 && fw_ctrl_choice(&r.c) == C_, "missing: %d holds, choice %s",
          count_act(&r.tr, FW_CTRL_MISSING, 0, 30), k_pts[fw_ctrl_choice(&r.c)].name);
    fw_tel_fake_set_valid(r.f, 0, 0x1ffu & ~FW_TEL_POWER_INSTANT); /* the 1-s average alone will do */
    run(&r, 10);
    int down = first_act(&r.tr, FW_CTRL_STEP_DOWN);
    CHECK(down >= 30 && down - 30 + 1 <= r.c.prm.settle_periods + r.c.prm.down_periods, "down at %d", down);
    rig_close(&r);

    /* pacing, then the device stops answering: gap and choice held */
    p = policy(FW_OBJECTIVE_POWER_CAP, 200, 0);
    if (!rig_open(&r, &p, 1.0, NULL)) return;
    run(&r, 50);
    double g = fw_ctrl_gap_us(&r.c);
    int k = fw_ctrl_choice(&r.c);
    fw_tel_fake_set_fail(r.f, 0, 1);
    for (int i = 0; i < NPTS; i++) r.p.factor[i] = 3.0; /* would demand a change if seen */
    run(&r, 40);
    CHECK(fw_ctrl_gap_us(&r.c) == g && fw_ctrl_choice(&r.c) == k && r.c.missing == 40, "held gap %g->%g, missing %ld", g,
          fw_ctrl_gap_us(&r.c), r.c.missing);
    fw_ctrl_action a = fw_ctrl_update(&r.c, NULL);
    CHECK(a == FW_CTRL_MISSING, "NULL reading: %s", fw_ctrl_action_name(a));
    rig_close(&r);

    /* steps up need consecutive periods: a missing sample every 6th period keeps it from climbing */
    p = policy(FW_OBJECTIVE_POWER_CAP, 450, 0);
    if (!rig_open(&r, &p, 0.8, NULL)) return;
    for (int i = 0; i < 120; i++) {
        fw_tel_fake_set_fail(r.f, 0, i % 6 == 5);
        run(&r, 1);
    }
    CHECK(r.c.steps_up == 0, "climbed with gaps in the samples");
    fw_tel_fake_set_fail(r.f, 0, 0);
    run(&r, 20);
    CHECK(r.c.steps_up == 1, "did not climb once samples were back");
    rig_close(&r);
}

/* fw_ctrl_tick reads telemetry only once per control period. */
static void test_tick(void)
{
    rig r;
    fw_policy p = policy(FW_OBJECTIVE_POWER_CAP, 450, 0);
    if (!rig_open(&r, &p, 1.0, NULL)) return;
    fw_ctrl_tick(&r.c, r.t, 0);
    long n0 = fw_tel_fake_reads(r.f, 0);
    for (int i = 0; i < 100; i++) fw_ctrl_tick(&r.c, r.t, 0);
    CHECK(fw_tel_fake_reads(r.f, 0) == n0, "tick read telemetry inside a period (%ld -> %ld)", n0,
          fw_tel_fake_reads(r.f, 0));
    fw_tel_fake_advance(r.f, 0.1);
    fw_ctrl_tick(&r.c, r.t, 0);
    CHECK(fw_tel_fake_reads(r.f, 0) == n0 + 1, "tick did not read after a period");
    CHECK(r.c.period == 2, "periods %ld", r.c.period);
    rig_close(&r);
}

int main(void)
{
    test_thermal();
    test_missing();
    test_tick();
    check_invariants();
    printf("%d passed, %d failed\n", fwt_passed, fwt_failed);
    return fwt_failed ? 1 : 0;
}
