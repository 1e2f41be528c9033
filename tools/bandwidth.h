/* The copy bandwidth a memory-bound kernel is held against: measured on the device it runs on, in
 * the same run (flashwatt bench's KV-cache rows). */
#ifndef FW_TOOLS_BANDWIDTH_H
#define FW_TOOLS_BANDWIDTH_H

#include <stddef.h>
#include "flashwatt.h"

/* Two buffers of `bytes` on a device: on a GPU copied device to device (cudaMemcpy), on the cpu by a
 * memcpy split over `threads` OpenMP threads (0 = all cores), each copying the part it first touched. */
typedef struct fw_copier fw_copier;

fw_copier *fw_copier_open(fw_device dev, int threads, size_t bytes, char *why, size_t why_len);
/* Seconds of one copy (CUDA events on a GPU); NaN if it failed. The bandwidth of a copy counts the
 * bytes read and written: 2 · bytes / seconds. */
double fw_copier_run(fw_copier *c);
size_t fw_copier_bytes(const fw_copier *c);
void fw_copier_close(fw_copier *c);

#endif
