#ifndef FW_CPU_FEATURES_H
#define FW_CPU_FEATURES_H

typedef enum { FW_SIMD_SCALAR = 0, FW_SIMD_AVX2 = 1, FW_SIMD_AVX512 = 2 } fw_simd;

fw_simd fw_cpu_simd(void);

#endif
