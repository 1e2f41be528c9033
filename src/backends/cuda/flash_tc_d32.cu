/* cuda-flash instantiations for padded head dim 32 (see flash_tc.cuh). Entry order is
 * irrelevant; cuda_flash.cu picks the default. Fields: D, BM, BN, warps, stages, Q in registers,
 * softmax sub-tile keys. */
#include "flash_tc.cuh"

extern "C" const fw_flash_tc_variant fw_flash_tc_variants_d32[] = {
    FW_FLASH_TC_VARIANT(32, 128, 128, 4, 2, true, 128),
    FW_FLASH_TC_VARIANT(32, 64, 64, 4, 2, true, 64),
};
extern "C" const int fw_flash_tc_nvariants_d32 =
    (int)(sizeof fw_flash_tc_variants_d32 / sizeof fw_flash_tc_variants_d32[0]);
