/* Device discovery of the public API (fw_cuda_device_count), answered by the CUDA backend where it is
 * compiled in (sched and the tools ask through it too), and the copy of device-resident values to the
 * host that fw_context_set_check_device_values asks for. */
#include <stdio.h>
#include "flashwatt.h"
#include "backends/backend.h"

#ifdef FW_HAVE_CUDA
int fw_cuda_count_devices(void); /* src/backends/cuda/common/cuda_common.cu */
fw_status fw_cuda_values_to_host(int device, void *stream, void *dst, const void *src, size_t bytes, char *msg,
                                 size_t msg_len); /* src/backends/cuda/common/cuda_common.cu */
int fw_cuda_device_count(void) { return fw_cuda_count_devices(); }
#else
int fw_cuda_device_count(void) { return 0; }
#endif

fw_status fw_device_values_to_host(fw_device dev, void *stream, void *dst, const void *src, size_t bytes, char *msg,
                                   size_t msg_len)
{
#ifdef FW_HAVE_CUDA
    if (dev.kind == FW_DEVICE_CUDA) return fw_cuda_values_to_host(dev.index, stream, dst, src, bytes, msg, msg_len);
#else
    (void)stream; (void)dst; (void)src; (void)bytes;
#endif
    snprintf(msg, msg_len, "no CUDA in this build to read device %d's values from", dev.index);
    return FW_ERR_NOT_IMPLEMENTED;
}
