/* Device discovery that core and the tools share. */
#include "flashwatt.h"

#ifdef FW_HAVE_CUDA
int fw_cuda_count_devices(void); /* src/backends/cuda/cuda_common.cu */
int fw_cuda_device_count(void) { return fw_cuda_count_devices(); }
#else
int fw_cuda_device_count(void) { return 0; }
#endif
