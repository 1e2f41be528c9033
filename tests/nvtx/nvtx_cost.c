/* What an NVTX range costs a call: fw_nvtx_push, the function every attention call runs around its
 * backend, opens a range (returns 1) only where a tool is injected (NVTX_INJECTION64_PATH); without
 * one it returns 0, formats no name, calls no NVTX function, and costs a few nanoseconds (checked
 * against a bound of 100 ns, far above the one branch it is, so that a busy machine does not fail it).
 *   nvtx_cost          run with and without NVTX_INJECTION64_PATH (ctest runs both) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "core/nvtx.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e9 * (double)ts.tv_sec + (double)ts.tv_nsec;
}

int main(void)
{
    const int injected = getenv("NVTX_INJECTION64_PATH") != NULL;
    fw_problem p = {0};
    p.kind = FW_CALL_DENSE;
    const int opened = fw_nvtx_push("cpu-flash", &p, FW_NVTX_FORWARD, "cost");
    if (opened) fw_nvtx_pop();
    printf("%s: %s a range\n", opened == injected ? "ok" : "FAIL", opened ? "opened" : "did not open");
    if (opened != injected) return 1;
    if (injected) return 0;
    enum { CALLS = 200000 };
    double best = 1e30;
    for (int round = 0; round < 5; round++) {
        const double t0 = now_ns();
        int n = 0;
        for (int i = 0; i < CALLS; i++) n += fw_nvtx_push("cpu-flash", &p, FW_NVTX_FORWARD, "cost");
        const double per = (now_ns() - t0) / CALLS;
        if (n) {
            printf("FAIL: %d ranges opened without a tool\n", n);
            return 1;
        }
        if (per < best) best = per;
    }
    printf("%s: no tool: %.1f ns a call (bound 100 ns)\n", best <= 100.0 ? "ok" : "FAIL", best);
    return best > 100.0;
}
