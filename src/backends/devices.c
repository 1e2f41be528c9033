/* Device discovery of the public API (fw_cuda_device_count), answered by the CUDA backend where it is
 * compiled in; sched and the tools ask through it too. */
#include "flashwatt.h"

#ifdef FW_HAVE_CUDA
int fw_cuda_count_devices(void); /* src/backends/cuda/cuda_common.cu */
int fw_cuda_device_count(void) { return fw_cuda_count_devices(); }
#else
int fw_cuda_device_count(void) { return 0; }
#endif
