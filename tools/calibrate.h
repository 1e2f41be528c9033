/* Cost estimates of flashwatt bench's rows from small calibration runs (FLOP/s of a backend, or of the float64
 * reference comparison, per device, dtype, head dim and thread count; cached for the process). */
#ifndef FW_TOOLS_CALIBRATE_H
#define FW_TOOLS_CALIBRATE_H

#include <stdint.h>
#include "flashwatt.h"
#include "suites.h"

/* FLOP/s of one backend on shape s (warm calls, then the best of timed calls), or of the float64 reference
 * comparison when backend is NULL (on the cpu). 0 when it cannot run. */
double fw_calib_measure(const char *backend, const fw_shape *s, fw_device dev, int warm, int timed);
/* FLOP/s of backend (or of the reference comparison when backend is NULL) on a small problem of this dtype and
 * head dim, or as last learnt; cached. */
double fw_calib_rate(const char *backend, fw_device dev, fw_dtype dtype, int64_t head_dim, int threads);
/* A rate measured on a real row replaces the calibration of its key. */
void fw_calib_learn(const char *backend, fw_device dev, fw_dtype dtype, int64_t head_dim, int threads,
                    double flops_per_s);

#endif
