#include <stdio.h>
#include "cuda_common.h"

extern "C" int fw_cuda_count_devices(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}

extern "C" int fw_cuda_available(char *why, size_t why_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fw_why(why, why_len, "no usable CUDA device (%s)", cudaGetErrorString(e));
    }
    if (n == 0) return fw_why(why, why_len, "no CUDA device present");
    return 1;
}
