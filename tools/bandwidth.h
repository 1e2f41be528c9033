/* The copy bandwidth a memory-bound kernel is held against: measured on the device it runs on, in
 * the same run (flashwatt bench's KV-cache rows). */
#ifndef FW_TOOLS_BANDWIDTH_H
#define FW_TOOLS_BANDWIDTH_H

#include <stddef.h>
#include "flashwatt.h"

/* GB/s of a copy of `bytes` (bytes read + written per second; median of 9 copies after a warm-up):
 * on a GPU the device-to-device cudaMemcpy, on the cpu a memcpy split over `threads` OpenMP threads
 * (0 = all cores), each copying the part it first touched. NaN with the reason in why on failure. */
double fw_copy_bandwidth(fw_device dev, int threads, size_t bytes, char *why, size_t why_len);

#endif
